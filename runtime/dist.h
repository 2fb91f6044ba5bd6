/* dist.h — running a distributed program: one session per rank.
 *
 * Input: a distributed program (codegen/dist_program.h), whether just
 * compiled (driver/driver.h) or loaded from a partitioned bundle
 * (runtime/dist_load.h). The runtime sees nothing else: no graph, no plan,
 * no partitioner.
 *
 * Rank r (mesh rank, sc_mesh_rank_to_coords) runs stage
 * sc_dist_rank_stage(dp, r). Its session gets:
 *   - its weight shards (sc_dist_rank_weights: cut once from the sources,
 *     or the loaded bundle's rank file), passed through
 *     sc_session_opts.const_data;
 *   - per microbatch m (0..M-1, M = dp->schedule.microbatches): each
 *     program input, cut from the caller's GLOBAL input: first the
 *     microbatch's rows of dim 0 ([m*b, (m+1)*b) where b = global dim 0 /
 *     M; M == 1: the whole tensor), then the rank's piece under the stage's
 *     input sharding (sc_sharding_extract).
 * The stages run concurrently; Send/Recv COMM steps move activations
 * between them (GPipe fill/drain for inference: stage s runs microbatch m
 * as soon as stage s-1 has sent it).
 * Outputs: every graph output is replicated by construction; the rank that
 * owns it (sc_dist_owns_output) copies microbatch m's output into rows
 * [m*b', (m+1)*b') of the global output (b' its dim 0; M == 1: whole).
 *
 * Failure: an error on any rank (bad input, kernel error, a peer's abort)
 * aborts the world communicator with that rank's message
 * ("rank R: MESSAGE"); every rank then returns within seconds, and the
 * call reports the first failing rank's message, never hangs.
 * SHARDC_FAIL_RANK=R (testing): rank R fails on purpose before its first
 * microbatch with "injected failure", to test exactly that; R:kill kills
 * its process instead (SIGKILL), as a crashed node would. */
#ifndef SC_RUNTIME_DIST_H
#define SC_RUNTIME_DIST_H

#include "codegen/dist_program.h"
#include "runtime/comm.h"
#include "runtime/runtime.h"

typedef struct sc_dist_opts {
  int threads;          /* CPU threads per rank (0: cores / ranks, >= 1) */
  sc_device_choice device; /* every rank's (the GPU: rank modulo the count) */
  /* CPU kernels compiled once per stage ([n_stages], borrowed), shared by
   * every rank of the stage; NULL: the stages' own (a loaded bundle's), or
   * else sc_dist_run_local JIT-compiles each stage's program once itself
   * and sc_dist_run_rank lets its session do it. */
  const struct sc_cpu_module *const *cpu_modules;
  bool quiet;
  /* Timing (shardc run --repeat): the ranks run warmup + repeat times (at
   * least once; outputs from the last run), each run between two barriers
   * of the world; mesh rank 0 writes the wall time of the runs after the
   * first `warmup` into times_ms[repeat] (when not NULL). */
  int warmup, repeat;
  double *times_ms;
} sc_dist_opts;
void sc_dist_opts_init(sc_dist_opts *o);

/* What one rank allocated (for "planned == allocated"). */
typedef struct sc_dist_rank_stats {
  int64_t arena_bytes;  /* its session's arena (activations, comm scratch) */
  int64_t weight_bytes; /* its shards of sharded constants, as allocated */
  int32_t stage;
} sc_dist_rank_stats;

/* A global output: dtype, global dims (dim 0 times M) and data, allocated
 * by sc_dist_run with sc_malloc; the caller frees data with sc_free. */
typedef struct sc_dist_output {
  const char *name;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  void *data;
} sc_dist_output;

/* local backend: all dp->mesh.n_ranks ranks as threads of this process.
 * inputs: global tensors, one per global input, by name (extra ones are
 * ignored; a missing one is an error naming it). outputs[n_outputs]
 * receives the global outputs in dp->outputs' order (n_outputs must equal
 * dp->n_outputs). stats: NULL or [n_ranks]. */
sc_status sc_dist_run_local(const sc_dist_program *dp, const sc_dist_opts *o, const sc_tensor_view *inputs,
                            int32_t n_inputs, sc_dist_output *outputs, int32_t n_outputs,
                            sc_dist_rank_stats *stats, sc_diag *d);

/* One rank of any backend: world is this rank's handle on the world
 * communicator (size n_ranks, its rank = mesh rank). Same inputs (every
 * rank gets the global inputs). outputs: filled for the outputs this rank
 * owns (see above), others left with data NULL. Used by the mpi backend
 * (one process per rank, under mpirun) and by sc_dist_run_local's threads. */
sc_status sc_dist_run_rank(const sc_dist_program *dp, const sc_dist_opts *o, sc_comm *world,
                           const sc_tensor_view *inputs, int32_t n_inputs,
                           sc_dist_output *outputs, int32_t n_outputs,
                           sc_dist_rank_stats *stats, sc_diag *d);

/* Whether SHARDC_FAIL_RANK (above) names this rank: it is to fail now with
 * "injected failure". "R:kill" kills the process instead of returning. */
bool sc_dist_injected_failure(int64_t rank);
#endif
