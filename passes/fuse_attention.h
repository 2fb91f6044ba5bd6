/* fuse_attention.h — the attention core as one node (docs/passes.md#fused-attention).
 *
 * sc_fuse_attention finds each attention core by what it computes, from
 * each Softmax over the last axis back to the score product:
 *   MatMul(Q, Kᵀ)        Kᵀ a Transpose of K's last two axes (peeled), or
 *                        any [b, kvh, d, skv] operand (then read through a
 *                        new Transpose)
 *   Mul / Div            by scalar constants (the scale; positive)
 *   Add(mask)            at most one additive mask of q's dtype or f32 whose
 *                        shape fits [b, h, sq, skv] (ir/attention.h), not
 *                        computed from a trained parameter
 *   Where(tril, s, -∞)   a constant condition that is exactly the causal
 *                        pattern (key j visible to query i iff j <= i + skv
 *                        − sq, any broadcastable shape), the other branch a
 *                        scalar constant <= -1e4 (exp of it is 0 in f32 next
 *                        to any score above -1e4 + 88): the causal flag
 *   Cast                 anywhere on the way (a bf16/fp16 step's casts)
 *   Softmax(axis −1)     its probabilities read only by the product below,
 *                        possibly through Casts
 *   MatMul(P, V)         V [b, kvh, skv, dv], kvh dividing h (grouped heads)
 * and replaces it by FusedAttention(Q, K, V[, mask]) computing in the
 * products' dtype (f32 accumulation), whose output o takes the place of
 * the second product's (its readers, casts included, are unchanged). Q, K
 * and V have rank 4 and the products no broadcast batch dims.
 * A Softmax over the last axis whose core does not qualify stays as it is,
 * with the reason recorded in the report. The graph stays topologically
 * ordered; the replaced nodes are dropped (sc_graph_compact: node ids
 * change, value ids do not, new values are appended); their values that
 * nothing reads any more stay for dce.
 *
 * The walk back from a Softmax to its score product,
 * sc_attention_core_chain, is shared with selective recompute
 * (passes/recompute.c). */
#ifndef SC_PASSES_FUSE_ATTENTION_H
#define SC_PASSES_FUSE_ATTENTION_H

#include <stdio.h>

#include "ir/ir.h"

enum { SC_FUSE_ATTENTION_MAX_UNFUSED = 32, SC_ATTENTION_CHAIN_MAX = 16 };

typedef struct sc_attention_unfused {
  char node[128]; /* the Softmax node's name */
  char why[160];
} sc_attention_unfused;

/* What a run found: cores fused, Softmaxes over the last axis left alone
 * (the first SC_FUSE_ATTENTION_MAX_UNFUSED with their reasons). */
typedef struct sc_fuse_attention_report {
  bool ran;          /* false: the pass was turned off (--no-fuse-attention) */
  int32_t fused;
  int32_t unfused;   /* all of them */
  int32_t n_listed;  /* entries of list[] */
  sc_attention_unfused list[SC_FUSE_ATTENTION_MAX_UNFUSED];
} sc_fuse_attention_report;

/* r as JSON: {"fused": N, "unfused": M, "cores": [{"node", "why"}...]}
 * (the listed ones). NULL: out of memory. */
struct json_t;
struct json_t *sc_fuse_attention_json(const sc_fuse_attention_report *r);
/* r as text lines on f, each after `indent`: "attention: N cores fused,
 * M left (--no-fuse-attention: off)" and one line per listed core. */
void sc_fuse_attention_print(const sc_fuse_attention_report *r, FILE *f, const char *indent);

/* The nodes from Softmax node `softmax`'s producer back to the MatMul that
 * computes its scores (last), through Add, Sub, Mul, Div, Where and Cast,
 * each step following the input of the node's own shape computed by a node
 * (in the node's dtype, except through a Cast), at most
 * SC_ATTENTION_CHAIN_MAX nodes; every node below `limit` and, when blk is
 * not NULL, of the Softmax's block (blk[node]). Returns the chain's length,
 * 0 when no MatMul is reached. */
int32_t sc_attention_core_chain(const sc_graph *g, int32_t softmax, int32_t limit,
                                const int64_t *blk, int32_t *chain);

/* Fuses every qualifying core of g (above). params (n_params value ids,
 * may be NULL): the trained parameters, so that a mask computed from one
 * is left unfused (the fused node gives its mask no gradient). r may be
 * NULL. Errors: SC_ERR_NOMEM (g->diag set). */
sc_status sc_fuse_attention(sc_graph *g, const int32_t *params, int32_t n_params,
                            sc_fuse_attention_report *r);

#endif
