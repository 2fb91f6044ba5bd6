/* rank_memory.h — one rank's memory as every report counts it, and the
 * exact predicted step that carries its largest rank's figure.
 *
 * The memory of a rank is the memory plan's exact count (planned =
 * allocated) plus the device's own lines beside the arena
 * (codegen/device_memory.h on a target: the CPU's, or on a GPU cluster the
 * CUDA device's workspace, weights padding, context and NCCL's buffers).
 * An inference plan counts it per stage (sc_plan_stage_memory), a training
 * step per pipeline rank or for its one program (sc_plan_train_rank_memory).
 * The predicted step (sc_plan_infer_predict, sc_plan_train_predict) is
 * sc_build_predict with the largest of those totals, so that its
 * `peak_bytes_per_rank` and `fits` are the same whichever caller asks:
 * `shardc plan` (its text, --json, --html, --auto's exact check, `check`)
 * and the public API's plan reports (sc_plan_report_json,
 * sc_training_plan_json). Nothing here prints. */
#ifndef SC_DRIVER_RANK_MEMORY_H
#define SC_DRIVER_RANK_MEMORY_H

#include "codegen/device_memory.h"
#include "codegen/dist_program.h"
#include "codegen/pipe_schedule.h"
#include "driver/driver.h"
#include "driver/train_memory.h"

/* One rank's memory, in parts that sum to total. parts[].name are static
 * strings. */
enum { SC_RANK_MEMORY_MAX_PARTS = 16 };
typedef struct sc_rank_memory {
  char rank[48];  /* "pipeline rank 1", "stage 1", "rank 0" (every rank alike) */
  int64_t total;
  int32_t n_parts;
  struct {
    const char *name;
    int64_t bytes;
  } parts[SC_RANK_MEMORY_MAX_PARTS];
} sc_rank_memory;

/* An inference plan's memory per stage (the ranks of a stage run the same
 * program): every line of the device's memory (codegen/device_memory.h on
 * target t: the arena, and on a CUDA target its workspace, the weights'
 * padding, the context, NCCL's buffers) and the weights (CONST buffers),
 * as plan's per-rank memory table prints them; into a new sc_malloc'd
 * array (*out, *n = dp->n_stages rows, "rank 0" for one stage). Errors:
 * the device memory plan's. */
sc_status sc_plan_stage_memory(const sc_dist_program *dp, const sc_device_target *t,
                               sc_rank_memory **out, int32_t *n, sc_diag *d);

/* The largest of sc_plan_stage_memory's totals; 0 when a stage's lines
 * cannot be had. */
int64_t sc_plan_peak_rank_bytes(const sc_dist_program *dp, const sc_device_target *t);

/* Pipeline rank q of a pipelined training step: its pieces' one arena
 * (the largest piece's: sc_pipe_arena_bytes), the state it keeps, its
 * stash and what it sends, by its action list (codegen/pipe_schedule.h). */
typedef struct sc_pipe_row {
  int32_t q;
  int64_t arena, state, stash, p2p, coll; /* arena: the one its pieces share */
  int64_t state_by[3];   /* of state: parameters, gradient accumulators,
                            optimizer state (for the page's bars) */
  int64_t step, kept;    /* the step's handed-over values' peak, and that of
                            all handed-over values (the total's) */
  int64_t outside;       /* the device's lines beside the arena: the CPU's,
                            the most any of its pieces needs (one pool,
                            reused by the pieces in turn); the CUDA
                            device's, its pieces' summed (each a session
                            with its own communicators), one context */
  sc_device_memory dev;  /* those lines (arena: 0) */
  int32_t stashed, formula; /* the most microbatches stashed, and the
                               schedule's formula for it */
  /* activation offloading (docs/offload.md, "Pipelines"): the host pool's
   * bytes, the microbatch copies of values parked there per step and their
   * bytes, the device stash's and handed-over values' peaks without
   * offloading */
  int64_t host, off_values, off_bytes, stash_without, kept_without;
  sc_pipe_action *acts;  /* [n_acts] its action list */
  uint64_t *from, *to;   /* [n_acts] pipeline ranks each action receives from, sends to */
  int32_t n_acts;
} sc_pipe_row;

/* Pipeline rank q's row of dp on target (ho: dp's hand-overs). r's arrays
 * are sc_malloc'd, freed by sc_pipe_row_free (also after an error).
 * Errors: the schedule's, the device memory plan's, out of memory. */
sc_status sc_pipe_row_of(const sc_dist_program *dp, const sc_pipe_handoffs *ho, int32_t q,
                         const sc_device_target *target, sc_pipe_row *r, sc_diag *d);
void sc_pipe_row_free(sc_pipe_row *r);

/* Each memory row of b's training step, as every report draws them: a
 * pipelined step's pipeline ranks (pipe(r, ctx) for each), else its one
 * program (one(m, workspace, outside, ctx): workspace the device's reserved
 * in the arena, outside the device's lines beside it). The first error
 * stops the walk. */
typedef void (*sc_pipe_row_fn)(const sc_pipe_row *r, void *ctx);
typedef void (*sc_program_row_fn)(const sc_train_memory *m, int64_t workspace, int64_t outside,
                                  void *ctx);
sc_status sc_train_rows_walk(const sc_build *b, const sc_device_target *target,
                             sc_pipe_row_fn pipe, sc_program_row_fn one, void *ctx, sc_diag *d);

/* b's ranks' memory in the training step (b: a build with opts.train and
 * codegen), into a new sc_malloc'd array (*out, *n rows: one per pipeline
 * rank, or one): per pipeline rank the one arena its pieces share, the
 * state it keeps, the handed-over values it keeps at once (its stash and
 * the step's values) and the device's lines beside the arena; else the one
 * program's classes live at the peak (driver/train_memory.h), what
 * placement loses, the device's workspace reserved in the arena (a CUDA
 * target's cuBLASLt workspace), the constants and the device's lines.
 * Errors: the memory plan's. */
sc_status sc_plan_train_rank_memory(const sc_build *b, const sc_device_target *target,
                                    sc_rank_memory **out, int32_t *n, sc_diag *d);

/* The exact predicted step of an inference build b on its plan's cluster,
 * into b->plan->predicted: sc_build_predict with the largest stage's
 * memory on target (sc_plan_peak_rank_bytes). */
void sc_plan_infer_predict(const sc_build *b, const sc_device_target *target);

/* The exact predicted step of a training build b on its plan's cluster,
 * into b->plan->predicted: sc_build_predict with the largest rank's memory
 * on target (sc_plan_train_rank_memory) and the MFU in t's precision.
 * Nothing without a cluster. Errors: the memory plan's. */
sc_status sc_plan_train_predict(const sc_build *b, const sc_train_opts *t,
                                const sc_device_target *target, sc_diag *d);

/* The options a plan's programs are compiled with to be reported on
 * target, as `shardc plan` and the API's plan reports compile them: the
 * device's workspace (sc_compile_opts_target), and for a training step
 * (train) the state bound in place on the CPU (a pipeline rank's pieces
 * read and update it there), copied into the arena on a GPU. */
void sc_compile_opts_report(sc_compile_opts *co, const sc_device_target *target, bool train);

#endif
