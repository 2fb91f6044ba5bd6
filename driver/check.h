/* check.h — the outcome of `shardc check` as data (docs/ci.md): each
 * check passed, failed or skipped with its reason, the figures the run
 * measured, the artifacts' hashes; written as the report JSON, read back as
 * a baseline, and a run's figures compared with a baseline's.
 *
 * Figures are one flat list of named numbers (metrics). The name says what
 * a figure is and how it is compared:
 *   step_time_s                 the predicted step (seconds; more is worse)
 *   tokens_per_s                the predicted throughput (less is worse)
 *   time/<term>                 the critical rank's step broken down:
 *                               compute, comm <axes>, bubble, recompute,
 *                               optimizer (seconds; they sum to the step)
 *   memory/<rank>/peak          a rank's exact memory (bytes)
 *   memory/<rank>/<part>        what it is made of (bytes)
 *   collective/<Op> <axes>      bytes a rank sends per step in those
 *                               collectives (ring algorithms)
 *   block/<block>/flops         a repeated block's FLOPs (the built graph's)
 *   block/<block>/param_bytes   and its parameters' bytes
 * The gates are step_time_s and tokens_per_s (against the time threshold)
 * and every memory/<rank>/peak (against the memory threshold); the other
 * figures explain a gate that failed: the ones that grew are named (the
 * step's terms and collectives under the time gates, the rank's parts under
 * its peak, the blocks under any).
 *
 * Ownership: a report owns its strings and arrays (sc_check_report_free).
 * No globals; not thread-safe per report. */
#ifndef SC_DRIVER_CHECK_H
#define SC_DRIVER_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base.h"

#define SC_CHECK_REPORT_VERSION 1

typedef enum sc_check_id {
  SC_CHECK_IMPORT,       /* every node supported */
  SC_CHECK_FITS,         /* every rank's exact memory fits its device */
  SC_CHECK_PERFORMANCE,  /* the predicted step against the baseline */
  SC_CHECK_EQUIVALENCE,  /* the partitioned step trains as one rank */
  SC_CHECK_REPRODUCIBLE, /* two compiles give byte-identical artifacts */
  SC_CHECK_COUNT
} sc_check_id;

typedef enum sc_check_state {
  SC_CHECK_NOT_RUN, /* not reached (an earlier check's failure stopped the run) */
  SC_CHECK_PASSED,
  SC_CHECK_FAILED,
  SC_CHECK_SKIPPED,
  SC_CHECK_STATE_COUNT
} sc_check_state;

typedef struct sc_check_result {
  sc_check_state state;
  char *message; /* sc_malloc'd, lines; why it failed or was skipped, or what it found */
  double seconds;
} sc_check_result;

typedef struct sc_check_metric {
  char name[160];
  double value;
} sc_check_metric;

typedef struct sc_check_artifact {
  char path[256];  /* relative to the bundle directory */
  char sha256[65];
} sc_check_artifact;

typedef struct sc_check_report {
  char *model;   /* the model's path as given */
  char *plan;    /* the mesh ("dp=2,tp=2"), or "one rank" */
  char *cluster; /* or NULL */
  bool train;
  sc_check_result checks[SC_CHECK_COUNT];
  sc_check_metric *metrics;
  int32_t n_metrics, cap_metrics;
  sc_check_artifact *artifacts;
  int32_t n_artifacts, cap_artifacts;
} sc_check_report;

/* "import", "fits", "performance", "equivalence", "reproducible". */
const char *sc_check_name(sc_check_id id);
/* "not run", "passed", "failed", "skipped". */
const char *sc_check_state_name(sc_check_state s);

void sc_check_report_init(sc_check_report *r);
void sc_check_report_free(sc_check_report *r);
/* Sets check id's outcome, the message printf-formatted (replacing one
 * set before). SC_ERR_NOMEM only. */
sc_status sc_check_set(sc_check_report *r, sc_check_id id, sc_check_state state,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Appends a line to check id's message. */
sc_status sc_check_append(sc_check_report *r, sc_check_id id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets metric name (added when new). */
sc_status sc_check_metric_set(sc_check_report *r, const char *name, double value);
/* The metric's value, or NULL when the report has none of that name. */
const double *sc_check_metric_get(const sc_check_report *r, const char *name);
sc_status sc_check_artifact_add(sc_check_report *r, const char *path, const char *sha256);
/* Whether any check failed. */
bool sc_check_any_failed(const sc_check_report *r);

/* The import check: MODEL imported (shapes only) listing every node whose
 * op is not supported (frontend/onnx.h: sc_import_opts.unsupported); sets
 * SC_CHECK_IMPORT of r: passed, or failed naming every such node by name,
 * domain and op, or with the importer's error when the file is not a
 * model shardc reads. */
void sc_check_import(sc_check_report *r, const char *model);

/* The report as JSON (docs/ci.md, "The report"): a new sc_malloc'd string,
 * NULL when out of memory. */
char *sc_check_report_json(const sc_check_report *r);
/* Reads a report written by sc_check_report_json (a baseline): a regular
 * file of at most 64 MiB (else the file reader's error: a FIFO is refused,
 * not waited on). A file that is not a report gets SC_ERR_PARSE /
 * SC_ERR_INVALID naming the file and the key. */
sc_status sc_check_report_read(const char *path, sc_check_report *out, sc_diag *d);

/* Thresholds of the comparison: how much a gate may grow, as fractions
 * (0.05 = 5 %). */
typedef struct sc_check_thresholds {
  double time;   /* step_time_s up, tokens_per_s down */
  double memory; /* each memory/<rank>/peak up */
} sc_check_thresholds;

/* Compares cur with base: *regressed when a gate moved past its
 * threshold; *message (sc_malloc'd lines, set either way) says each gate
 * compared, the ones that regressed, and for each the figures behind it
 * that grew, most first (which collective, which rank's part). A gate
 * missing on either side is said, not compared. SC_ERR_NOMEM only. */
sc_status sc_check_compare(const sc_check_report *base, const sc_check_report *cur,
                           const sc_check_thresholds *t, bool *regressed, char **message);

#endif
