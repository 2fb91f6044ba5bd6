/* shard_rule.h — each op's sharding rule (the `shard` column of ir/ops.def).
 *
 * The partitioner (passes/partition/localize.c) walks the global graph in
 * topological order. At each node it knows the sharding every input has now
 * (ir/sharding.h) and calls the op's rule, which says
 *   want[i]  the sharding input i must have for the node to run on local
 *            pieces (the partitioner reshards the input when it differs:
 *            collectives, or a comm-free local slice), and
 *   out[j]   the sharding output j then has.
 * Computing the node on the local pieces described by want[] must give the
 * local pieces described by out[] — that is the whole contract, and what the
 * equivalence tests check end to end.
 *
 * On entry want[i] = in[i] (absent inputs: replicated of rank 0) and out[j]
 * is replicated (of the output's rank). The simplest valid rule replicates
 * everything (sc_shard_replicate_all): every rank computes the whole node.
 * Rules may:
 *   - keep or move split axes (a dim's axis list, its stride) from inputs to
 *     outputs where the op is independent along that dim;
 *   - ask for a dim to be unsplit (the partitioner all-gathers);
 *   - produce a pending sum (out[j].partial) when the op contracts a split
 *     dim (MatMul over K split on both sides), or keep one through a linear
 *     op (Neg, Identity, Transpose, Reshape, Add of two partials of the same
 *     axes, Mul/Div of one partial by a non-partial, ReduceSum/Mean);
 *   - ask for want[i].partial only ⊆ in[i].partial, with one exception: a
 *     constant input (sc_value_has_data in the global graph) may be asked
 *     to be partial (the partitioner gives its data to the group's first
 *     rank and zeros to the others), and so may a float value that is not
 *     partial (the partitioner multiplies it by a partial 1) — how a bias,
 *     constant or a training step's parameter, joins a row-parallel
 *     product's pending sum.
 * Every axis at most once per sharding (sc_sharding_validate), and split
 * dims divisible: the rule checks divisibility with sc_shard_divides and
 * falls back to unsplitting when a dim does not divide.
 *
 * Rules read attributes and constant inputs from the global graph (global
 * shapes: c->g's values), never write the graph, and return SC_OK, or an
 * error with c->g->diag set (sc_node_error) for a malformed node only. */
#ifndef SC_PASSES_SHARD_RULE_H
#define SC_PASSES_SHARD_RULE_H

#include "ir/ops.h"
#include "ir/sharding.h"

typedef enum sc_shard_expand {
  SC_SHARD_EXPAND_NONE = 0,
  /* Gather over a data dim split along `axis` with replicated indices
   * (vocabulary-parallel embedding): each rank gathers the rows it holds,
   * zeroing the others; out is partial over the data dim's axes. The
   * partitioner emits the masked form (Sub offset, range mask, Where,
   * Gather, Mul). */
  SC_SHARD_EXPAND_MASKED_GATHER,
  /* ScatterND (reduction add, indices [.., 1]) into data split on dim 0
   * (a vocabulary-parallel lookup's gradient: passes/partition/tp.c splits
   * its zeros like the table), indices and updates whole over those axes:
   * each rank adds the updates of the rows it holds, the others masked to
   * zeros (Sub offset, range mask, Where, ScatterND). out = the data's
   * sharding (pending over the axes the updates' rows stay split on). */
  SC_SHARD_EXPAND_MASKED_SCATTER,
  /* Softmax / LogSoftmax over a dim split along (non-strided) axes: each
   * rank normalises its piece with the group's maximum and sum (two small
   * all-reduces of [.., 1] values: max, then sum), so the split stays —
   * Megatron's vocabulary-parallel cross-entropy, without gathering the
   * logits. out = in. */
  SC_SHARD_EXPAND_SPLIT_SOFTMAX,
  /* FusedAttention marked `cp_ring` (passes/partition/cp.c) with q, k and v
   * split alike over cp on the sequence (dim 2): ring attention
   * (passes/partition/ring.c), o and lse split the same way; or
   * FusedAttentionGrad so marked, q, k, v, o, lse and d_o so split: the
   * backward's ring, dq, dk and dv split the same way. */
  SC_SHARD_EXPAND_RING_ATTENTION,
  /* ReduceMax / ReduceMin of an f32 input over dims split along axes (an
   * FP8 step's amax of a tensor split over tp or the batch): each rank
   * reduces its piece, then an AllReduce ("max" / "min") over each axis
   * splitting a reduced dim, one small collective instead of gathering the
   * input. out = the reduction's sharding, the reduced dims whole. */
  SC_SHARD_EXPAND_GROUP_REDUCE,
  /* ReduceMean (f32, f64) over dims split along axes (ViT's pooling of the
   * tokens split over cp): each rank's mean of its piece times 1/k, k the
   * product of those axes' sizes, pending over them; their sum is the
   * mean of the whole (the pieces are equal). out = the reduction's
   * sharding, partial over those axes. */
  SC_SHARD_EXPAND_SCALED_MEAN,
} sc_shard_expand;

typedef struct sc_shard_ctx {
  sc_graph *g;              /* the global graph (global shapes, constants' data) */
  const sc_node *n;
  const sc_mesh *mesh;
  const sc_sharding *in;    /* [n->n_inputs] shardings the inputs have now */
  sc_sharding *want;        /* [n->n_inputs] what the node needs (in: = in) */
  sc_sharding *out;         /* [n->n_outputs] (in: replicated) */
  sc_shard_expand expand;   /* (in: NONE) */
} sc_shard_ctx;

typedef sc_status (*sc_shard_fn)(sc_shard_ctx *c);

/* The rule of each op, from ir/ops.def's shard column (defined in
 * passes/partition/shard_rules.c as sc_shard_<name>). */
sc_shard_fn sc_shard_rule(sc_op op);

/* Helpers for rules (shard_rules.c). */
/* want[] all replicated (no split, no partial), out[] replicated. */
sc_status sc_shard_replicate_all(sc_shard_ctx *c);
/* Whether a global dim of `size` can be split over `axes` of s's dim d
 * (stride included): size % (parts * stride) == 0. */
bool sc_shard_divides(const sc_sharding *s, const sc_mesh *m, int32_t d, int64_t size);
/* Copies dim src_d of `from` (axes and stride) onto dim dst_d of `to`. */
void sc_shard_copy_dim(sc_sharding *to, int32_t dst_d, const sc_sharding *from,
                       int32_t src_d);
/* Clears dim d's axes and stride. */
void sc_shard_unsplit_dim(sc_sharding *s, int32_t d);

#endif
