/* partition_cli.h — the partitioning options shared by `shardc plan`,
 * `shardc run` and `shardc compile`, and the build of a partitioned model.
 *
 * Options (each subcommand takes them out of argv with
 * sc_pcli_take_option before its own parsing):
 *   --mesh SPEC              e.g. pp=2,dp=2,tp=2 (ir/mesh.h); axes named
 *                            dp, tp, pp play those roles
 *   --ranks-per-node N
 *   --microbatches M         pipeline microbatches (>= 1, default 1)
 *   --stage-boundaries A,B   node names starting stages 1, 2, ...
 *   --sequence-parallel      reduce-scatter + all-gather instead of all-reduce
 *   --no-vocab-parallel      keep the embedding and LM head whole
 *   --plan FILE.json         replay a plan written by `shardc plan --json`
 *                            (its mesh and choices win; --mesh etc. may not
 *                            be given with it)
 *   --comm local|mpi         communicator backend (run only; default local)
 *
 * Microbatches: the model is compiled for one microbatch. Every --dim whose
 * name is the symbolic dim 0 of some graph input (the batch) is divided by
 * M before binding (an error when it does not divide); the caller feeds the
 * full batch and sc_dist_* cut it. */
#ifndef SC_TOOLS_PARTITION_CLI_H
#define SC_TOOLS_PARTITION_CLI_H

#include <stdbool.h>

#include "passes/partition/partition.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

typedef struct sc_pcli {
  const char *mesh;            /* --mesh, or NULL: not partitioned */
  int64_t ranks_per_node;
  int32_t microbatches;        /* 0 = not given */
  const char *boundaries;      /* comma-separated, or NULL */
  bool sequence_parallel;
  bool no_vocab_parallel;
  const char *plan_file;
  const char *comm;            /* "local" (default) or "mpi" */
} sc_pcli;

void sc_pcli_init(sc_pcli *p);
/* If argv[*i] is one of the options above (with its value in the same
 * argument after '=' or the next one), consumes it, advancing *i past its
 * value (to the next unread argument), and returns 1; returns 0 when it is
 * not one (*i unchanged); 2 after printing a usage error (missing or bad
 * value). allow_comm: --comm accepted. */
int sc_pcli_take_option(sc_pcli *p, int argc, char **argv, int *i, bool allow_comm);
/* Whether a partitioned build was asked for (--mesh or --plan). */
bool sc_pcli_active(const sc_pcli *p);

/* Divides the --dim values of batch dims by the microbatch count (see
 * above) in opts->dims before sc_cli_bind_dims. Returns 0 or an exit
 * status after printing the error. */
int sc_pcli_adjust_dims(const sc_pcli *p, const sc_graph *g, sc_cli_opts *opts);

/* Imports opts->file (ONNX; weights unless opts->no_weights), adjusts the
 * batch dims (sc_pcli_adjust_dims) and binds the --dims. Returns 0 with *g
 * ready, or an exit status after reporting (*g NULL). */
int sc_pcli_load(const sc_pcli *p, sc_cli_opts *opts, sc_graph **g);

/* A partitioned, compiled model. */
typedef struct sc_pbuild {
  sc_plan *plan;               /* the plan used (owned) */
  sc_partition *part;          /* owned */
  sc_program **programs;       /* [part->n_stages], owned; NULL entries when
                                  built with compile == false */
} sc_pbuild;

/* g: imported, dims bound. Runs the canonical passes on g, builds the plan
 * (from the options, or read from --plan against g), partitions, and when
 * compile is true compiles each stage graph (sc_compile_graph with co).
 * Returns 0 or an exit status after reporting (file names the model). */
int sc_pcli_build(const sc_pcli *p, sc_graph *g, const char *file, const sc_pass_opts *po,
                  const sc_compile_opts *co, bool compile, sc_pbuild *out);
void sc_pbuild_free(sc_pbuild *b);

#endif
