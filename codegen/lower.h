/* lower.h — lowering graph ops to kernel IR and library calls.
 *
 * Every op has a lowering, named in the `lower` column of ir/ops.def and
 * defined in codegen/ as `const sc_lowering sc_lw_<name>`. (ir/ does not link
 * codegen: ir/ops.c ignores the column; codegen/lower.c expands the same
 * X-macro into sc_lowerings[].) There are four kinds:
 *
 *   POINT   a pure index function: the value of output `out` at multi-index
 *           idx (i64 kir exprs, one per output dim) in terms of its inputs
 *           read at other indices through sc_lower_input_at. Elementwise,
 *           broadcast and data-movement ops (Transpose, Slice, Concat,
 *           Gather, Pad, Expand, Where, Cast, ...). Fusion inlines POINT
 *           producers into their consumers.
 *   KERNEL  builds a whole kernel (outer domain, REDUCE phases, STORE):
 *           reductions, softmax, normalisations, pooling. Inputs are read
 *           through sc_lower_input_at (so POINT producers fuse in as a
 *           prologue); values are stored through sc_lower_store (so POINT
 *           consumers fuse in as an epilogue).
 *   STEP    adds library-call steps (and helper kernels): MatMul, Gemm, Conv
 *           (im2col kernel + GEMM). A POINT consumer of a GEMM (bias add,
 *           activation) may fuse as the GEMM's epilogue kernel.
 *   VIEW    no computation: the output buffer is a VIEW of the input's
 *           storage (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout
 *           in inference).
 *
 * Fusion (passes/fuse.c) assigns each node a group; sc_program_from_graph
 * lowers each group to one kernel (or one GEMM step with its epilogue),
 * giving buffers only to values that cross groups or are graph outputs. */
#ifndef SC_CODEGEN_LOWER_H
#define SC_CODEGEN_LOWER_H

#include "codegen/program.h"

typedef enum sc_lower_kind {
  SC_LOWER_POINT, SC_LOWER_KERNEL, SC_LOWER_STEP, SC_LOWER_VIEW, SC_LOWER_NONE
} sc_lower_kind;

typedef struct sc_lower_ctx sc_lower_ctx; /* defined in lower_internal.h */

typedef int32_t (*sc_lower_point_fn)(sc_lower_ctx *cx, const sc_node *n,
                                     int32_t out, const int32_t *idx);
typedef sc_status (*sc_lower_build_fn)(sc_lower_ctx *cx, const sc_node *n);

typedef struct sc_lowering {
  sc_lower_kind kind;
  sc_lower_point_fn point; /* POINT */
  sc_lower_build_fn build; /* KERNEL, STEP */
} sc_lowering;

/* Lowering of op `op` (from the ops.def column). */
const sc_lowering *sc_lowering_of(sc_op op);

/* How node n of g lowers: its op's kind, except a Concat whose inputs are
 * each one contiguous run of the output (every dim before the axis is 1:
 * the 1-D concatenation of passes/partition/bucket.c, an outer-dim Concat),
 * which is a STEP: one copy kernel per input writing its slice of the
 * output (lower_shape.c), not one kernel selecting among all the inputs at
 * every element. SC_LOWER_NONE for an op without a lowering. Fusion, the
 * program builder and sc_lower_value_at all ask this. */
sc_lower_kind sc_lower_kind_of(const sc_graph *g, const sc_node *n);

/* Operand transposes a GEMM takes as trans_a / trans_b. When input `in` (0:
 * A, 1: B) of MatMul node mn is the output of a live Transpose whose perm
 * swaps the last two axes and keeps the others (rank >= 2), returns that
 * Transpose's node id, else -1. The fuse pass puts such a Transpose, when
 * the MatMul is its only consumer, into the MatMul's group; the MatMul's
 * GEMM step then reads the Transpose's input with the transposed flag
 * (lower_linalg.c), so no transposed copy is ever written: the tied LM head
 * MatMul(h, Transpose(wte)), and the Transpose(B) that MatMul's gradient
 * rules emit. */
int32_t sc_lower_gemm_operand_transpose(sc_graph *g, const sc_node *mn, int32_t in);

#endif
