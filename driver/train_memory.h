/* train_memory.h — what the arena of a compiled training step holds.
 *
 * A training program (passes/train.h) keeps its parameters and optimizer
 * state in the arena for the whole run (state pairs, codegen/program.h)
 * and computes gradients, activations and temporaries in it. This splits
 * the storage live at the memory plan's peak step (sc_memplan_peak) into:
 *
 *   params       inputs P updated in place by "new:P" (master weights)
 *   optimizer    inputs P.momentum_buffer, P.exp_avg, P.exp_avg_sq
 *   gradients    the storage of the "grad:P" values and the gradient
 *                accumulators "accum:P"
 *   activations  values of the forward graph (those still live at the
 *                peak are the ones the backward reads)
 *   workspace    backward and optimizer temporaries ("<node>/grad/…",
 *                "train/…"), the loss
 *   data         the batch and the step's scalars
 *   communication  what a collective wrote that is none of the above: a
 *                parameter gathered before its use (ZeRO-3), a pending sum
 *                reduced, the collectives' pack and unpack scratch
 *
 * The classes sum to peak_live; arena is what the memory plan asked for
 * and the runtime allocates (planned == allocated), arena − peak_live is
 * what greedy placement loses. Constants (frozen weights, folded values)
 * are outside the arena. Also the totals of params and optimizer state,
 * which are live at every step. */
#ifndef SC_DRIVER_TRAIN_MEMORY_H
#define SC_DRIVER_TRAIN_MEMORY_H

#include "codegen/program.h"

typedef enum sc_mem_class {
  SC_MEM_PARAMS, SC_MEM_OPTIMIZER, SC_MEM_GRADIENTS, SC_MEM_ACTIVATIONS, SC_MEM_WORKSPACE,
  SC_MEM_DATA, SC_MEM_COMM, SC_MEM_CLASS_COUNT
} sc_mem_class;

typedef struct sc_train_memory {
  int64_t live[SC_MEM_CLASS_COUNT]; /* bytes live at the peak, by class */
  int64_t peak_live;
  int32_t peak_step;                /* n_steps: after the last step */
  const char *peak_origin;          /* the step's origin (NULL after the end) */
  int64_t arena;                    /* planned = allocated */
  int64_t constants;                /* CONST bytes, outside the arena */
  /* The activations saved for the backward: the bytes (unrounded) of the
   * forward values live when the backward begins (at the first step that
   * computes gradient nodes "…/grad/…" alone, backward_step, not a
   * collective or a gather's bucket the overlap starts earlier; -1 and 0
   * without one) that a later step reads: what Korthikanti et al. count
   * per layer; on the device (an offloaded value's host copy is not
   * counted). */
  int32_t backward_step;
  int64_t saved;
  /* Activation offloading (codegen/offload.c): the host pool (planned =
   * allocated, apart from the arena), the values parked there and their
   * bytes (unrounded), and the peak the device would have without it
   * (sc_memplan_peak_unoffloaded): peak_live_unoffloaded − peak_live is
   * what offloading saves at the peak. All 0 (the last = peak_live) when
   * nothing is offloaded. */
  int64_t host;
  int32_t n_offloaded;
  int64_t offloaded;
  int64_t peak_live_unoffloaded;
  /* The transposed FP8 copies that make FP8 products "TN" for cuBLASLt
   * (sc_gemm.a8_tn, b8_tn: TEMP buffers of the arena, counted in the
   * classes above while live): how many, their bytes (unrounded), and the
   * bytes of them live at the peak (rounded as live[] rounds). */
  int32_t n_fp8_copies;
  int64_t fp8_copies, fp8_copies_at_peak;
} sc_train_memory;
/* One row of a partitioned step's collectives: every COMM step of one kind
 * over one group of axes. bytes: the larger of input and output (the whole
 * tensor M); sent: what each rank sends with ring algorithms (all-reduce
 * 2(n-1)/n M, all-gather and reduce-scatter (n-1)/n M, all-to-all
 * (n-1)/n M, send M). */
typedef struct sc_train_comm {
  sc_comm_kind kind;
  uint32_t axes;
  int64_t group_size;
  int64_t ops, bytes, sent;
  int64_t async_ops; /* of ops: started asynchronously (codegen/overlap.c) */
  int64_t backward_sent; /* of sent: by steps of gradient nodes ("…/grad/…"
                            in the origin: the backward's, e.g. its ring
                            attention's under cp) */
} sc_train_comm;
/* The program's collectives by (kind, axes), in first-use order, into a
 * new sc_malloc'd array (*out, NULL when none). */
sc_status sc_train_comm_of(const sc_program *p, sc_train_comm **out, int32_t *n, sc_diag *d);

const char *sc_mem_class_name(sc_mem_class c);
sc_status sc_train_memory_of(const sc_program *p, sc_train_memory *m, sc_diag *d);

#endif
