/* compile.h — one graph to one program: the codegen half of the pipeline.
 *
 * sc_compile_graph takes a graph already imported and bound (a whole model,
 * or one pipeline stage of a partitioned one) through the canonical passes,
 * fusion, lowering to kernel IR and the memory plan (verified), and returns
 * a program (codegen/program.h) that any device can run. The partitioned
 * pipeline (driver/driver.h) calls it once per stage.
 *
 * Errors come back in diag: the graph pass's diagnostic (with its node) or
 * the lowering's. The program is owned by the caller (sc_program_destroy). */
#ifndef SC_CODEGEN_COMPILE_H
#define SC_CODEGEN_COMPILE_H

#include <stdbool.h>
#include <stdio.h>

#include "codegen/program.h"
#include "passes/pass.h"

typedef struct sc_compile_opts {
  bool fuse;               /* default true */
  bool overlap;            /* default true: collectives run asynchronously,
                              the next block's gather prefetched
                              (sc_program_overlap, codegen/overlap.c) */
  const char *print_after; /* graph pass name, "all", or "program" (the
                              final program after memplan), or NULL */
  bool time_passes;
  FILE *print_out;         /* --print-after output; NULL = stderr */
  FILE *time_out;          /* --time-passes output; NULL = stderr */
  bool quiet;              /* no notes (e.g. dims bound to 1) on stderr */
  bool skip_canonical;     /* the graph already went through
                              SC_CANONICAL_PASSES (the driver ran them) */
  bool no_fuse_attention;  /* the canonical passes leave attention cores
                              unfused (--no-fuse-attention) */
  int64_t workspace_bytes; /* device scratch to reserve in the arena when the
                              program has a GEMM step (program.h; the CUDA
                              device's cuBLASLt workspace:
                              SC_GEMM_WORKSPACE_BYTES); default 0 */
  /* Pipelined training on a device whose arena is host memory (the CPU):
   * the driver binds each piece's state inputs outside the arena (a
   * parameter, optimizer moment or accumulator X with an output "new:X"
   * in the step, not handed over by an earlier piece), so that a pipeline
   * rank's pieces read and update its state buffers in place
   * (runtime/pipe_rank.c); not for a plan placed on a cluster (its GPUs
   * hold the state). Default false: copied into the arena. */
  bool bind_state;
  /* The names of the inputs to bind (sc_program_bind_inputs), set per
   * piece by the driver from bind_state; n_bound 0: none. */
  const char *const *bound;
  int32_t n_bound;
  /* Activation offloading (sc_program_offload, codegen/offload.c): the
   * names of the buffers to park in the host pool between their forward
   * and backward uses (the training step's saved activations,
   * sc_train_info.offload), and how many reload points ahead each copy
   * back starts. n_offload 0: none. */
  const char *const *offload;
  int32_t n_offload;
  int32_t offload_horizon;
} sc_compile_opts;
void sc_compile_opts_init(sc_compile_opts *o);
sc_status sc_compile_graph(sc_graph *g, const sc_compile_opts *o, sc_program **out,
                           sc_diag *diag);

/* codegen/fuse.c: fusion groups (attribute __group per node), a graph pass
 * that codegen owns because it follows the lowering's kinds. */
sc_status sc_pass_fuse(sc_graph *g, const sc_pass_opts *opts);
/* Adds codegen's graph passes (fuse) to the pass registry; idempotent and
 * thread-safe. sc_compile_graph calls it; `shardc opt` calls it before
 * naming passes. */
void sc_codegen_register_passes(void);

#endif
