/* attention.h — the fused attention ops' shapes and cost (ir/ops.def's
 * FusedAttention and FusedAttentionGrad), shared by shape inference, the
 * lowering (codegen/lower_attention.c), the sharding rule and the cost
 * models (passes/plan/cost.c, codegen/dist_sim.c).
 *
 * FusedAttention(q, k, v[, mask]) -> (o, lse), attributes scale (float)
 * and causal (int 0/1):
 *   q [b, h, sq, d], k [b, kvh, skv, d], v [b, kvh, skv, dv], one float
 *   dtype (f32, bf16, f16); h % kvh == 0 (head i reads kv head
 *   i / (h / kvh)); mask, additive, of q's dtype or f32, of rank <= 4 with
 *   its last two dims [sq, skv] and the others 1 or b (dim 0 of a rank-4
 *   mask) / 1 or h (the heads' dim); o [b, h, sq, dv] in q's dtype, lse
 *   [b, h, sq] f32 (program.h's sc_attention_step says what they hold).
 * FusedAttentionGrad(q, k, v, o, lse, d_o[, mask]) -> (dq, dk, dv), the
 * same attributes: the gradients of sum(d_o ∘ o) with respect to q, k, v. */
#ifndef SC_IR_ATTENTION_H
#define SC_IR_ATTENTION_H

#include "ir/ir.h"

typedef struct sc_attention_shape {
  int64_t b, h, kvh, sq, skv, d, dv;
  int64_t mask_stride_b, mask_stride_h; /* elements; 0: broadcast (no mask: 0) */
  bool has_mask, causal;
  double scale;
  sc_dtype t, mask_t;
} sc_attention_shape;

/* Reads a FusedAttention or FusedAttentionGrad node's inputs and
 * attributes into *s, checking everything the comment above says; an
 * error names the node (g->diag). */
sc_status sc_attention_read(sc_graph *g, const sc_node *n, sc_attention_shape *s);

/* Whether a mask of the given shape fits queries [b, h, sq] against skv
 * keys (the rule above); its strides into *sb, *sh when it does. */
bool sc_attention_mask_fits(int32_t rank, const int64_t *dims, int64_t b, int64_t h, int64_t sq,
                            int64_t skv, int64_t *sb, int64_t *sh);

/* (query, key) pairs a head computes: sq·skv, or those a causal mask
 * leaves visible (key j visible to query i iff j <= i + skv - sq). */
double sc_attention_pairs(int64_t sq, int64_t skv, bool causal);

/* FLOPs of one forward: 2·pairs·(d + dv) per head (scores and the
 * product with v; 4·b·h·sq·skv·d when dv = d, no causal mask); the
 * backward (grad true) SC_ATTENTION_GRAD_FLOPS times that,
 * FlashAttention-2's count (the recomputed scores and four products). */
#define SC_ATTENTION_GRAD_FLOPS 2.5
double sc_attention_flops(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d, int64_t dv,
                          bool causal, bool grad);

#endif
