/* partition_args.h — the partitioning options shared by `shardc plan`,
 * `shardc run` and `shardc compile`, and the one call that turns a
 * subcommand's options into a build (driver/driver.h).
 *
 * Options (each subcommand takes them out of argv with
 * sc_partition_args_take before its own parsing):
 *   --mesh SPEC              e.g. pp=2,dp=2,tp=2 (ir/mesh.h); axes named
 *                            dp, tp, pp play those roles; `--mesh auto`
 *                            (or --auto): the planner's search chooses the
 *                            mesh and the options below (plan_auto.h:
 *                            sc_plan_auto_resolve, before the build)
 *   --objective latency|throughput  what --mesh auto ranks (inference)
 *   --ranks-per-node N
 *   --cluster C              a cluster file or preset (passes/plan/cluster.h):
 *                            the mesh's axes are ordered and placed on it;
 *                            sets the ranks per node (--ranks-per-node may
 *                            only repeat it)
 *   --microbatches M         pipeline microbatches (>= 1, default 1)
 *   --stage-boundaries A,B   node names starting stages 1, 2, ...
 *   --schedule gpipe|1f1b|interleaved|zb-h1  pipeline schedule (training: 1f1b,
 *                            interleaved and zb-h1 too; codegen/pipe_schedule.h)
 *   --virtual-stages V       chunks per pipeline rank (interleaved)
 *   --sequence-parallel      reduce-scatter + all-gather instead of all-reduce
 *   --no-vocab-parallel      keep the embedding and LM head whole
 *   --expert-tensor-parallel each expert's MLP split over tp too (ep.c)
 *   --zero 1|2|3             training: what the fsdp axis shards (1 optimizer
 *                            state, 2 + gradients, 3 + parameters; default 3)
 *   --no-reshard-after-forward  ZeRO-3: keep the gathered parameters from
 *                            the forward to the backward (no second gather)
 *   --no-overlap             every collective runs to completion where it
 *                            is (no async start and wait, no prefetch of the
 *                            next block's gather: codegen/overlap.c)
 *   --hybrid-shard-degree S  training: the dp axis of N ranks becomes
 *                            dp=N/S,fsdp=S (SMP v2's hybrid_shard_degree)
 *   --plan FILE.json         replay a plan written by `shardc plan --json`
 *                            (its mesh and choices win; --mesh etc. may not
 *                            be given with it)
 *   --comm local|mpi         communicator backend (run only; default local)
 *
 * Microbatches: the model is compiled for one microbatch; the driver
 * divides the batch --dim by M. The caller feeds the full batch and the
 * runtime cuts it. */
#ifndef SC_TOOLS_PARTITION_ARGS_H
#define SC_TOOLS_PARTITION_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "codegen/device_memory.h"
#include "driver/driver.h"
#include "passes/plan/cluster.h"
#include "runtime/comm.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

typedef struct sc_partition_args {
  const char *mesh;            /* --mesh, or NULL: not partitioned */
  int64_t ranks_per_node;
  const char *cluster;         /* --cluster, or NULL */
  int32_t microbatches;        /* 0 = not given */
  const char *boundaries;      /* comma-separated, or NULL */
  const char *schedule;        /* --schedule, or NULL */
  int32_t virtual_stages;      /* 0 = not given */
  bool sequence_parallel;
  bool no_vocab_parallel;
  bool expert_tensor_parallel; /* --expert-tensor-parallel */
  int32_t zero;                /* --zero, 0 = not given */
  bool keep_after_forward;     /* --no-reshard-after-forward */
  const char *reduce_dtype;    /* --reduce-dtype, or NULL: fp32 */
  bool no_overlap;             /* --no-overlap */
  bool no_fuse_attention;      /* --no-fuse-attention */
  int64_t hybrid_shard_degree; /* 0 = not given */
  const char *plan_file;
  const char *comm;            /* "local" (default), "cuda-local", "mpi", "tcp", "nccl" */
  bool comm_given;             /* --comm appeared */
  bool auto_plan;              /* --mesh auto or --auto: mesh still to choose */
  const char *objective;       /* --objective, or NULL (latency) */
  const sc_cluster *cluster_loaded; /* the cluster already loaded (--mesh
                                  auto's, measured when assumed), used instead
                                  of loading --cluster again; not owned */
  sc_cluster auto_cluster;     /* --mesh auto's cluster (cluster_loaded points
                                  here after sc_plan_auto_resolve) */
  char auto_mesh[128];         /* the chosen mesh, which mesh then points at */
} sc_partition_args;

void sc_partition_args_init(sc_partition_args *p);
/* If argv[*i] is one of the options above (with its value in the same
 * argument after '=' or the next one), consumes it, advancing *i past its
 * value (to the next unread argument), and returns 1; returns 0 when it is
 * not one (*i unchanged); 2 after printing a usage error (missing or bad
 * value). allow_comm: --comm accepted. */
int sc_partition_args_take(sc_partition_args *p, int argc, char **argv, int *i,
                           bool allow_comm);
/* Prints the options above, one or two lines each, for a subcommand's
 * --help: training's (--zero, --hybrid-shard-degree, the four schedules)
 * when training, the communicators when allow_comm. */
void sc_partition_args_help(FILE *f, bool training, bool allow_comm);
/* Whether a partitioned build was asked for (--mesh, --plan, or --mesh
 * auto). */
bool sc_partition_args_active(const sc_partition_args *p);
/* Whether any option above but --comm was given (what a bundle has
 * compiled in). */
bool sc_partition_args_any(const sc_partition_args *p);

/* A subcommand's build options: the pass options from opts (--print-after,
 * --time-passes, to stderr), the compile options likewise, and the build
 * options pointing at both (so the setup must not be copied). The caller
 * then sets what is its own (quiet, fuse, no_weights, stats). */
typedef struct sc_build_setup {
  sc_pass_opts pass;
  sc_compile_opts compile;
  sc_build_opts build;
} sc_build_setup;
/* p (may be NULL): --no-overlap turns compile.overlap off. */
void sc_build_setup_init(sc_build_setup *s, const sc_cli_opts *opts,
                         const sc_partition_args *p);

/* The device a plan with p is made for, as `shardc plan` and `shardc check`
 * plan its memory (one path, so that the two agree): on a GPU cluster
 * (--cluster C, the cluster --mesh auto loaded, or the preset a replayed
 * --plan FILE was placed on) *t becomes the CUDA target for it
 * (codegen/device_memory.h: sc_device_target_of_cluster) and true; else *t
 * is left as the caller set it (this host's CPU target) and false. A
 * cluster or plan that cannot be read is left to the build, which reports
 * it. */
bool sc_partition_args_target(const sc_partition_args *p, sc_device_target *t);
/* Sets s's compile options as programs for target t are compiled, as
 * `shardc train --device` compiles them: on a CUDA target cuBLASLt's
 * workspace reserved in the arena (SC_GEMM_WORKSPACE_BYTES), none on the
 * CPU. (Binding a pipelined step's state outside the arena, bind_state, is
 * the caller's: a bundle cannot hold it; with a --cluster the driver never
 * binds.) */
void sc_build_setup_target(sc_build_setup *s, const sc_device_target *t);

/* Builds the model of opts (import → ... → distributed program) with the
 * partitioning options p (none: one rank). bo: the fields the subcommand
 * sets (no_weights, codegen, stats, frozen inputs, pass and compile
 * options, wanted_input); model, dims and the plan come from opts and p.
 * Checks the options first (a bad --mesh is a usage error found before the
 * model is read). Returns 0 with *out built, or an exit status after
 * printing the error (1 a problem in the model or plan, 2 usage); or, when
 * unreported is not NULL and the build failed wanting an input's value
 * (bo->wanted_input), -1 with the error in *unreported, not printed: the
 * caller may freeze that input and build again. */
int sc_partition_args_build(const sc_partition_args *p, const sc_cli_opts *opts,
                            sc_build_opts *bo, sc_build **out, sc_diag *unreported);

/* Whether --comm COMM runs one rank per process (mpi, tcp, nccl), and that
 * process's world communicator (nccl: bootstrapped over MPI under mpirun,
 * else over RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT). dp (and m, the
 * training step's manifest, or NULL): what this rank runs; the tcp
 * communicator and NCCL's env bootstrap admit only ranks whose
 * sc_dist_program_hash is the same (runtime/comm.h). */
bool sc_partition_comm_is_world(const char *comm);
/* Whether --comm COMM is cuda-local: the mesh's thread-ranks share one GPU
 * (sc_device_choice.comm_on_device). */
bool sc_partition_comm_on_device(const char *comm);
/* 0, or 2 after the usage error of a --comm the device cannot use (nccl
 * without --device cuda). */
int sc_partition_comm_device_check(const char *comm, const sc_device_choice *dev);
sc_status sc_partition_world(const char *comm, const sc_dist_program *dp,
                             const struct sc_train_manifest *m, sc_comm **world, sc_diag *d);
/* SC_OK when world has the mesh's n_ranks ranks; else a usage error that
 * says how to start that many (mpirun -np N, or WORLD_SIZE for tcp). */
sc_status sc_partition_world_check(const char *comm, const sc_comm *world, int64_t n_ranks,
                                   sc_diag *d);

#endif
