/* dist_program.h — the distributed program: the one object between the
 * compiler and the runtime.
 *
 * The compiler (driver/driver.c) links it from a partition (passes/
 * partition) and one compiled program per pipeline stage; a partitioned
 * bundle is it on disk (codegen/dist_bundle.c writes it, runtime/
 * dist_load.c reads it back); the runtime (runtime/dist.h) consumes only
 * it and never sees a graph, a plan or the partitioner. It holds:
 *   - the mesh, with the axis roles (pp, dp, tp) resolved once into axis
 *     indices and masks;
 *   - one program per pipeline stage (one SPMD program shared by every
 *     rank of the stage), the sharding of each of its inputs and, for each
 *     of its outputs, which global output it is (or -1);
 *   - the model's global inputs and outputs (dtype and the dims of ONE
 *     microbatch), and for each output the stage that produces it and the
 *     ranks that own a copy (sc_dist_owns_output);
 *   - the schedule (GPipe fill/drain over `microbatches` today; training
 *     adds 1F1B and interleaved schedules as per-rank action lists);
 *   - each rank's weight shards, cut once by one function
 *     (sc_dist_rank_weights): from the sharded constants' global sources
 *     when freshly compiled, or pointing into the rank's weight file when
 *     loaded from a bundle.
 * Room for training: the backward and optimizer programs, optimizer-state
 * shards and action-list schedules join sc_dist_stage and sc_dist_schedule.
 *
 * Invariants (sc_dist_program_check): every stage has a program whose mesh
 * is the program's mesh (or none); each program input's sharding cuts the
 * global input of the same name to the program buffer's dims; every global
 * output is produced by exactly one stage.
 *
 * Ownership: a dist program owns its stages' programs (unless loaded from a
 * bundle, which owns them: `owner`), shardings, sources and names (its
 * arena). Sources' data is borrowed: from the imported model, kept alive by
 * `owner`, which sc_dist_program_destroy releases last. Immutable after
 * it is linked: any number of rank threads may read it at once. */
#ifndef SC_CODEGEN_DIST_PROGRAM_H
#define SC_CODEGEN_DIST_PROGRAM_H

#include "codegen/program.h"
#include "ir/name_index.h"
#include "ir/sharding.h"

/* A global input or output of the model. */
typedef struct sc_dist_value {
  const char *name;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];  /* one microbatch's global dims */
} sc_dist_value;

typedef struct sc_dist_stage {
  sc_program *program;          /* its SPMD program */
  sc_sharding *input_sharding;  /* [program->n_inputs] how each input is cut */
  int32_t *output_global;       /* [program->n_outputs] global output index, or -1 */
  /* CPU kernels already compiled for the program (a loaded bundle's
   * kernels.o), or NULL: the runtime JIT-compiles the kernel IR once. */
  const struct sc_cpu_module *kernels;
} sc_dist_stage;

typedef enum sc_schedule_kind {
  SC_SCHEDULE_GPIPE,  /* every microbatch forward (then, training, every
                         backward), stages overlapping */
  SC_SCHEDULE_1F1B,   /* training: one forward, one backward (PipeDream-flush) */
  SC_SCHEDULE_INTERLEAVED, /* training: 1F1B over virtual stages (Megatron) */
  SC_SCHEDULE_ZB_H1,  /* training: 1F1B with weight gradients held back to
                         fill the cool-down (zero bubble, Qi et al.) */
  SC_SCHEDULE_COUNT
} sc_schedule_kind;

typedef struct sc_dist_schedule {
  sc_schedule_kind kind;
  int32_t microbatches;         /* >= 1; the global batch is microbatches
                                   times an input's dim 0 */
  int32_t runs;                 /* >= 1: the program's runs per step. An
                                   unpipelined training step that
                                   accumulates K microbatches (--grad-accum)
                                   runs it K times; a pipeline's
                                   microbatches are in its schedule */
  /* Activation offloading in a pipelined training step (docs/offload.md,
   * "Pipelines"): the values whose stashed microbatches wait in the host
   * pool (names in the program's arena, sorted), and the horizon in reload
   * points (the rank's actions that first read an offloaded value). */
  int32_t n_offload;
  const char **offload;
  int32_t offload_horizon;
} sc_dist_schedule;

typedef struct sc_dist_program {
  sc_mesh mesh;
  int32_t pp_axis, dp_axis, tp_axis; /* axis index of each role, or -1 */
  sc_axes pp_axes, dp_axes, tp_axes; /* the same as masks (0 when absent) */
  bool sequence_parallel;            /* for reports only */

  int32_t n_stages;                  /* = pp size (1 without pp), or the
                                        pieces of a pipelined step */
  sc_dist_stage *stages;             /* [n_stages] */
  /* A pipelined training step (ir/pipe.h): stages[] are its 4 x pipe_chunks
   * pieces in piece order, chunk c on pipeline rank c % pipe_ranks, run by
   * runtime/pipe_rank.c; pipe_chunks is 0 for any other program. */
  int32_t pipe_chunks, pipe_ranks;
  sc_dist_schedule schedule;

  int32_t n_inputs, n_outputs;
  sc_dist_value *inputs;             /* [n_inputs] the model's, in order */
  sc_dist_value *outputs;            /* [n_outputs] */
  int32_t *output_stage;             /* [n_outputs] the stage producing it */

  /* Weights. A freshly compiled program cuts them from sources; a loaded
   * one has rank_weights[r][s][b], pointers into rank r's weight file for
   * each stage (or piece) s that rank r runs (NULL for the others). */
  int32_t n_sources;
  sc_shard_source *sources;          /* [n_sources], sorted by name */
  const void ****rank_weights;       /* NULL, or [n_ranks][n_stages][n_buffers] */

  /* A loaded training bundle's manifest (codegen/train_manifest.h), written
   * against sc_dist_program_global_view; NULL otherwise. */
  const struct sc_train_manifest *train;

  /* The names looked up by name, indexed once put together
   * (sc_dist_program_index: link, single, the bundle loader): the global
   * inputs and outputs, and each stage's program outputs (a pipelined
   * step's hand-offs). A program put together without them, or whose
   * inputs or outputs changed in number since, is scanned instead. */
  sc_name_index input_names, output_names;
  sc_name_index *stage_output_names; /* [n_stages], or NULL */

  void *owner;                       /* released by destroy, after the rest */
  void (*release_owner)(void *owner);
  bool owns_programs;                /* destroy frees the stage programs */
  sc_arena arena;                    /* every array and name above */
} sc_dist_program;

/* An empty program over mesh (roles resolved from the axis names pp, dp,
 * tp), n_stages stages with no programs yet. NULL when memory runs out. */
sc_dist_program *sc_dist_program_create(const sc_mesh *mesh, int32_t n_stages);
/* The one-rank distributed program of p: the one-rank mesh, one stage,
 * every input replicated, the model's inputs and outputs those of p. take:
 * p is owned by the result (and destroyed on failure); else borrowed. */
sc_status sc_dist_program_single(sc_program *p, bool take, sc_dist_program **out,
                                 sc_diag *d);
/* A pipelined training step's offloaded values (sc_dist_schedule.offload:
 * copied into dp's arena and sorted) and horizon. Errors: SC_ERR_NOMEM. */
sc_status sc_dist_program_set_offload(sc_dist_program *dp, const char *const *names, int32_t n,
                                      int32_t horizon, sc_diag *d);
/* A training step that accumulates grad_accum microbatches: without a
 * pipeline it runs its program that many times a step (schedule.runs); a
 * pipeline's microbatches are its schedule's, and runs stays 1. */
void sc_dist_program_set_accumulation(sc_dist_program *dp, int32_t grad_accum);
/* Sets the role axes (indices into the mesh, or -1) and their masks. */
void sc_dist_program_set_roles(sc_dist_program *dp, int32_t pp_axis, int32_t dp_axis,
                               int32_t tp_axis);
void sc_dist_program_destroy(sc_dist_program *dp);
/* One line on dp's GEMM steps with FP8 operands (sc_gemm.fp8), when it has
 * any: how many a GPU runs as cuBLASLt FP8 matmuls (sm_89 or later), and
 * each reason the others stay f32 products of the widened values
 * (sc_gemm_fp8_refusal), to f with the given indent. */
void sc_dist_fp8_print(const sc_dist_program *dp, FILE *f, const char *indent);
/* The stage rank runs (its coordinate on pp; 0 without pp). */
int32_t sc_dist_rank_stage(const sc_dist_program *dp, int64_t rank);
/* Whether rank keeps global output k (it runs the producing stage and its
 * coordinates are 0 on every other axis). */
bool sc_dist_owns_output(const sc_dist_program *dp, int64_t rank, int32_t k);
/* Indexes dp's global inputs and outputs and its stages' program outputs
 * by name (again, when they were). Errors: SC_ERR_NOMEM, SC_ERR_LIMIT. */
sc_status sc_dist_program_index(sc_dist_program *dp, sc_diag *d);
/* The first global output named name, or -1; and the next one after output
 * k with k's name, or -1. */
int32_t sc_dist_find_output(const sc_dist_program *dp, const char *name);
int32_t sc_dist_next_output(const sc_dist_program *dp, int32_t k);
/* Index of the global input named name, or -1. */
int32_t sc_dist_find_input(const sc_dist_program *dp, const char *name);
/* The source of the sharded constant `name`, or NULL. */
const sc_shard_source *sc_dist_source(const sc_dist_program *dp, const char *name);
/* Whether global input `name` is training state: the step writes
 * "new:name" (a global output). */
bool sc_dist_is_state(const sc_dist_program *dp, const char *name);
/* A pipelined step: the piece before `piece` whose program hands over the
 * value `name` (its output; *out: the output index), or -1. */
int32_t sc_dist_handoff_source(const sc_dist_program *dp, int32_t piece, const char *name,
                               int32_t *out);
/* Whether rank runs stage (or piece) s. */
bool sc_dist_rank_runs(const sc_dist_program *dp, int64_t rank, int32_t s);
/* The program that has the global inputs and outputs of dp as its inputs
 * and outputs (no steps, no arena): the frame a distributed training
 * step's manifest is written and read against. NULL when memory runs out;
 * sc_program_destroy frees it. */
sc_program *sc_dist_program_global_view(const sc_dist_program *dp);
/* "gpipe", "1f1b", "interleaved", "zb-h1"; and back (-1 when unknown). */
const char *sc_schedule_name(sc_schedule_kind k);
int32_t sc_schedule_parse(const char *name);
/* Checks the invariants above; errors name the stage and value. */
sc_status sc_dist_program_check(const sc_dist_program *dp, sc_diag *d);

/* Rank r's weight shards: data[b] for every CONST buffer b of its stage
 * program that has no data of its own (a sharded constant), NULL for the
 * others. Cut here, once, with sc_sharding_extract from the source (checked
 * to cut to the buffer's dtype and dims) into buffers this object owns, or
 * pointing into a loaded bundle's weight file. The only place shards are
 * cut: the bundle writer and the runtime both call it. */
typedef struct sc_dist_weights {
  int32_t n_buffers;
  const void **data;                 /* [n_buffers] */
  void **owned;                      /* [n_buffers] what was cut here */
  int64_t bytes;                     /* sum of the shards' sizes */
} sc_dist_weights;
sc_status sc_dist_rank_weights(const sc_dist_program *dp, int64_t rank, sc_dist_weights *w,
                               sc_diag *d);
void sc_dist_weights_free(sc_dist_weights *w);
/* The same for the program of stage (or piece) `stage`, as run by rank. */
sc_status sc_dist_stage_weights(const sc_dist_program *dp, int32_t stage, int64_t rank,
                                sc_dist_weights *w, sc_diag *d);

#endif
