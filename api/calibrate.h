/* calibrate.h — measuring what the planner's cost model needs on the
 * machine at hand (`shardc calibrate`, docs/planner.md section 5).
 *
 * sc_calibrate compiles tiny programs from textual IR (ir/text.h) with the
 * real pipeline (codegen/compile.h) and times them through a session
 * (runtime/runtime.h), the path `shardc run` and `shardc train` take:
 *
 *   step overhead   programs of 1 and K unfused Add steps on 16 floats:
 *                   (t_K - t_1) / (their difference in compiled steps)
 *   GEMM table      one MatMul of every (m, n, k) of a grid, f32 and bf16,
 *                   minus the 1-step run (the run's fixed cost and one
 *                   step's overhead): seconds of the product alone
 *   memory          one Add of two large f32 tensors (3 x their bytes moved)
 *                   minus the 1-step run
 *   collectives     all-reduce, all-gather and reduce-scatter over local
 *                   thread-ranks (runtime/comm.h), groups of 2..max_ranks,
 *                   a ladder of sizes, then fitted (sc_profile_fit_comm)
 *
 * Every time is the median of repeated runs after one warm-up run, the
 * inputs written once into the session's arena slots (no copy per run).
 * The runtime's thread count is the session's default (all cores) unless
 * opts->threads is set.
 *
 * device "cuda" measures the GPU a CUDA session of this process takes
 * (runtime/runtime.h: sc_cuda_probe_device; the emulated GPU with
 * SHARDC_CUDA_EMU=1): the same programs compiled as for `train --device
 * cuda` and run by the CUDA device (GEMMs through cuBLASLt in f32 and bf16,
 * kernels from NVRTC, runs replayed as CUDA graphs), each run timed by the
 * device's events (its steps, not the copies in and out); the GEMM grid
 * {256, 1024, 4096} ({256, 1024} quick), the streaming Add over 64 Mi
 * floats (16 Mi quick); no collectives (one process on one GPU has no
 * communicator of 2+ ranks); the device memory in use once the context
 * exists as the profile's context_bytes (not on the emulated GPU).
 *
 * Errors: SC_ERR_UNSUPPORTED (cuda without a driver or device: "calibrate
 * --device cuda: no CUDA driver ..."), SC_ERR_USAGE (bad options), and
 * whatever compiling or running the programs returns. Not thread-safe (it
 * sets the process's GEMM engine to its default). */
#ifndef SC_API_CALIBRATE_H
#define SC_API_CALIBRATE_H

#include <stdbool.h>
#include <stdio.h>

#include "passes/plan/profile.h"

typedef struct sc_calibrate_opts {
  const char *device; /* "cpu" (NULL: cpu) or "cuda" */
  bool quick;         /* a few seconds: a smaller grid, fewer repeats */
  int threads;        /* runtime threads per rank; 0 = the runtime's default */
  int max_ranks;      /* largest collective group; 0 = max(cores, 4), at most 8 */
  FILE *log;          /* a line per measurement, or NULL */
} sc_calibrate_opts;

void sc_calibrate_opts_init(sc_calibrate_opts *o);
/* Measures and fills *out (present, calibrate_s set). */
sc_status sc_calibrate(const sc_calibrate_opts *o, sc_profile *out, sc_diag *d);

#endif
