/* plan_html.h — a plan as one self-contained HTML page (`shardc plan
 * --html FILE`, docs/report.md): a summary, each rank's memory as stacked
 * bars against the device's capacity, the simulated step as a timeline
 * (one lane per pipeline rank and per communication queue,
 * codegen/dist_sim.h's events), the collectives per axis and, for `plan
 * --auto`, the candidates and why each lost.
 *
 * The page needs nothing but itself: inline CSS, the plan's data as JSON
 * in a <script type="application/json"> element, and a small inline
 * script that draws SVG from it (no network, no external files). Every
 * string from the model, the cluster or the command line (node and model
 * names are untrusted) goes only into that JSON, with '<', '>' and '&'
 * written as \u escapes so that no text can close the element; the script
 * puts text into the page with textContent, never as markup.
 *
 * Big meshes stay small: the simulation runs one rank per pipeline
 * coordinate (the others of its data and tensor parallel group run the
 * same program), so the timeline has P lanes of compute and P sets of
 * queues whatever the mesh; the page's rank picker maps any rank to its
 * coordinates and its representative lane and bar.
 *
 * Callers: plan.c (sc_plan_infer_html: inference), plan_train.c
 * (sc_plan_train_html: training); plan_auto.c passes either its --auto
 * candidates, and `shardc check --html` calls the one of its build. */
#ifndef SC_TOOLS_PLAN_HTML_H
#define SC_TOOLS_PLAN_HTML_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/device_memory.h"
#include "codegen/dist_program.h"
#include "driver/driver.h"
#include "passes/plan/plan.h"

/* The parts of a memory bar, in drawing order. What each holds is the
 * caller's count (docs/report.md lists each caller's mapping). */
typedef enum sc_plan_html_mem {
  SC_PLAN_HTML_PARAMS,      /* parameters (master weights, frozen weights) */
  SC_PLAN_HTML_GRADIENTS,   /* gradients and their accumulators */
  SC_PLAN_HTML_OPTIMIZER,   /* optimizer state (moments) */
  SC_PLAN_HTML_ACTIVATIONS, /* activations (one program's peak) */
  SC_PLAN_HTML_STASH,       /* values a pipeline rank keeps between pieces */
  SC_PLAN_HTML_WORKSPACE,   /* temporaries; pipelined: the arena its pieces share */
  SC_PLAN_HTML_COMM,        /* collectives' buffers and scratch */
  SC_PLAN_HTML_DEVICE,      /* the device's own memory beside the arena */
  SC_PLAN_HTML_OTHER,       /* the batch, what arena placement loses */
  SC_PLAN_HTML_MEM_COUNT
} sc_plan_html_mem;

typedef struct sc_plan_html_bar {
  char label[96];           /* "pipeline rank 0", "stage 1", "every rank" */
  int32_t pipe_rank;        /* the pipeline coordinate it stands for; -1: all */
  int64_t bytes[SC_PLAN_HTML_MEM_COUNT];
} sc_plan_html_bar;

/* One row of `plan --auto`'s table. */
typedef struct sc_plan_html_candidate {
  char plan[4096];          /* its options, as the JSON's (a pipeline's cut
                               with them) */
  double step_s, tokens_per_s, mfu;
  int64_t peak_bytes;       /* per rank */
  bool fits, chosen, exact; /* exact: compiled and predicted, not estimated */
  char why[320];            /* why it lost ("chosen" for the chosen one) */
} sc_plan_html_candidate;

enum { SC_PLAN_HTML_MAX_FIELDS = 24 };

typedef struct sc_plan_html {
  const char *command;      /* "shardc plan --train", shown as the title */
  const char *model;        /* the model file (untrusted) */
  const char *model_name;   /* the graph's name, or NULL (untrusted) */
  const char *kind;         /* "inference" or "training step" */
  const sc_dist_program *dp; /* the compiled program: mesh, schedule, and
                               what the timeline simulates */
  const sc_plan *plan;      /* cluster and predicted block; NULL: none */
  int32_t n_fields;         /* more summary lines, in order */
  struct {
    char key[48];
    char value[256];
  } fields[SC_PLAN_HTML_MAX_FIELDS];
  const sc_plan_html_bar *bars;
  int32_t n_bars;
  const sc_plan_html_candidate *candidates; /* --auto; NULL otherwise */
  int32_t n_candidates;
} sc_plan_html;

/* Adds a summary line (printf-style value); silently dropped past
 * SC_PLAN_HTML_MAX_FIELDS. */
void sc_plan_html_field(sc_plan_html *h, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes h's page to path (replaced whole: written aside, then renamed).
 * With a cluster whose figures are known the step is simulated again with
 * its events recorded (sc_dist_sim_run_traced) for the timeline and the
 * collectives; without one the page says so and lists the programs'
 * collectives unpriced. Errors: SC_ERR_IO naming path, SC_ERR_NOMEM; a
 * simulation that fails only leaves the timeline out (the reason shown). */
sc_status sc_plan_html_write(const sc_plan_html *h, const char *path, sc_diag *d);

/* The page of an inference build b (a partitioned plan: b->part set, else
 * SC_ERR_INVALID), written to path (defined in plan.c, beside the text
 * report whose figures it shows): one bar per stage, the predicted step
 * when b's plan has a cluster, and candidates (NULL: none; plan --auto's
 * table). command titles the page; file names the model. Errors: the
 * page's (SC_ERR_IO naming path), SC_ERR_NOMEM. */
sc_status sc_plan_infer_html(const sc_build *b, const sc_device_target *target,
                             const char *file, const char *command,
                             const sc_plan_html_candidate *candidates, int32_t n_candidates,
                             const char *path, sc_diag *d);

#endif
