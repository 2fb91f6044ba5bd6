/* driver.h — the compiler's pipeline, once, in one place: from a model file
 * and a plan to a distributed program.
 *
 *   (plan)        passes/plan/   made by the caller before the build:
 *                                sc_plan_from_options or a plan file
 *   import        frontend/      ONNX → IR graph (weights mmapped)
 *   specialise    driver.c       inputs given as constants are frozen
 *   bind-dims     driver.c       --dim values (the batch divided by the
 *                                microbatch count) onto symbolic dims
 *   train         passes/train.c the training step (loss, autodiff,
 *                                optimizer), when asked for
 *   canonical     passes/        bind-dims, infer-shapes, fold, dce
 *   partition     passes/partition/  seeds, stages, localize, split
 *   codegen       codegen/       per stage: fuse, lower, memory plan
 *   link          driver.c       the distributed program
 *                                (codegen/dist_program.h)
 *
 * The list lives in driver.c (the `pipeline` table) and runs in that order;
 * each step reads what the previous ones left in sc_build. Nothing is done
 * twice: the mesh is parsed once (sc_plan_from_options, before the model is
 * read), a plan file is read once, the canonical passes run once on the
 * whole model, localize once.
 * A one-rank build (no plan) is the same pipeline over the one-rank mesh:
 * partition is skipped and the whole graph is stage 0.
 *
 * The command line (tools/) and the public API (api/, include/shardc.h)
 * both call sc_build_run; neither holds pipeline logic.
 *
 * Errors come back as a status and a diagnostic naming the file and node;
 * usage errors (a --dim that matches nothing, a batch that does not divide
 * into microbatches) are SC_ERR_USAGE. */
#ifndef SC_DRIVER_H
#define SC_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/compile.h"
#include "codegen/device_memory.h"
#include "codegen/dist_program.h"
#include "passes/partition/partition.h"
#include "passes/pass.h"
#include "passes/plan/plan.h"
#include "passes/stats.h"
#include "passes/train.h"

/* A symbolic dim bound to a value (--dim NAME=V). */
typedef struct sc_dim_value {
  const char *name;
  int64_t value;
} sc_dim_value;

/* A graph input frozen to a value (specialisation: an input that
 * determines shapes is compiled for its given value). */
typedef struct sc_frozen_input {
  const char *name;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  const void *data;          /* copied into the graph */
  uint64_t bytes;
} sc_frozen_input;

typedef struct sc_build_opts {
  const char *model;                  /* the ONNX file */
  bool no_weights;                    /* shapes only (plan, inspect) */
  const sc_dim_value *dims;           /* the batch dim is the GLOBAL batch */
  int32_t n_dims;
  const sc_frozen_input *frozen;
  int32_t n_frozen;
  /* Partitioning: the plan (taken: owned by the build, freed with it, also
   * when the build fails), or NULL: one rank. plan_file: the file it was
   * read from, named by errors about the plan, or NULL. */
  sc_plan *plan;
  const char *plan_file;
  /* Training: the graph becomes one training step (passes/train.h) right
   * after the dims are bound, before anything folds; NULL: inference. */
  const sc_train_opts *train;
  bool codegen;                       /* false: stop after partitioning */
  bool stats;                         /* sc_stats_begin after binding */
  bool no_fuse_attention;             /* attention cores stay unfused, in
                                         training, the canonical passes and
                                         codegen (--no-fuse-attention) */
  const sc_pass_opts *pass;           /* NULL: defaults */
  const sc_compile_opts *compile;     /* NULL: defaults */
  /* Out, on failure: the input whose value the shapes need (so that the
   * caller can freeze it and build again), or "". */
  char *wanted_input;
  size_t wanted_input_size;
} sc_build_opts;
void sc_build_opts_init(sc_build_opts *o);

typedef struct sc_build {
  sc_graph *graph;              /* the model after the canonical passes
                                   (vocabulary padding included) */
  sc_plan *plan;                /* NULL for one rank */
  sc_partition *part;           /* NULL for one rank */
  sc_stats stats;               /* when opts.stats */
  bool has_stats;
  sc_train_info train;          /* with opts.train: the parameters */
  sc_fuse_attention_report attention; /* what fuse-attention did (training:
                                         train.attention's copy) */
  sc_dist_program *program;     /* NULL when opts.codegen is false; its
                                   weight sources borrow from graph */
  double seconds[8];            /* per pipeline step, in table order */
} sc_build;

/* The pipeline above. *out is NULL on failure. */
sc_status sc_build_run(const sc_build_opts *o, sc_build **out, sc_diag *d);
void sc_build_destroy(sc_build *b);
/* The pipeline's step names, in order (for --time-passes and docs). */
const char *sc_build_step_name(int32_t i);
int32_t sc_build_step_count(void);

/* Sets co's options as programs for target t (codegen/device_memory.h)
 * are compiled by every caller that compiles for a device, so that a plan
 * reached by the command line or by the API is the same program: on a
 * CUDA target cuBLASLt's workspace reserved in the arena
 * (SC_GEMM_WORKSPACE_BYTES), none on the CPU (t NULL: the CPU). */
void sc_compile_opts_target(sc_compile_opts *co, const sc_device_target *t);

/* The name of the dtype of t's matrix products ("fp32", "bf16", "fp16",
 * "fp8"; --precision): a static string. */
const char *sc_train_precision_name(const sc_train_opts *t);

/* The predicted step of b's program on its plan's cluster, into
 * b->plan->predicted (codegen/dist_sim.h: sc_dist_sim_to_plan; cleared
 * without a cluster): what `shardc plan --cluster` prints and the API's
 * plan reports give, one call for both. The MFU is in the dtype of t's
 * matrix products for a training step (t NULL: the plan's precision);
 * peak_bytes is the largest rank's memory (0: not computed). */
void sc_build_predict(const sc_build *b, const sc_train_opts *t, int64_t peak_bytes);

/* The link step on its own: a distributed program from a partition and one
 * compiled program per stage (programs[part->n_stages], taken: owned by the
 * result, also on failure). Its sources borrow from part->global. */
sc_status sc_dist_program_link(const sc_partition *part, sc_program **programs,
                               sc_dist_program **out, sc_diag *d);

#endif
