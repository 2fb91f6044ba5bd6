/* localize.c — propagation and communication insertion: the global graph
 * becomes one local SPMD graph.
 *
 * One forward walk over the global graph's nodes (topological order). Each
 * global value has, at any time, a CURRENT sharding and the local value that
 * holds its piece under it. At node n:
 *   1. the op's rule (shard_rule.h) sees the inputs' current shardings and
 *      says what it needs (want) and what it produces (out); when an input
 *      arrives split but the rule gathers it and nothing leaves split, the
 *      node is recorded as a fallback to replicated (partition.h);
 *   2. each input is resharded to its want (reshard() below), memoized per
 *      (value, sharding) so that two readers needing the same layout share
 *      one collective;
 *   3. n is copied with its outputs' LOCAL shapes (global dims divided by
 *      their sharding); inputs that encode the output shape (Reshape's and
 *      Expand's shape, ConstantOfShape's, Split's sizes) are replaced by
 *      constants of the local sizes;
 *   4. a value with a sharding in the global graph that is neither an
 *      input nor a constant (a CONSTRAINT: train_seed.c puts them on a
 *      training step's gradients and state outputs) is resharded to it at
 *      once, and that is its current sharding from then on;
 *   5. a graph output is resharded to its constraint, or else replicated,
 *      at once: the local graph's outputs are those values, under their
 *      global names.
 * Storage axis (training, ZeRO-3): a parameter input split over the fsdp
 * axis is stored split but used whole: a node on the way to the loss or to
 * a gradient (the forward and the backward) sees it with its storage group
 * gathered (an AllGather before the first use): fsdp and the axes after it
 * on its dim, ep for a parameter outside the experts under fsdp x ep
 * (train_seed.c), gathered by one AllGather over both when fsdp comes
 * first in the mesh (storage_group; the gradient's reduce-scatter likewise,
 * reshard's step a), else axis by axis (bucket.c then makes each such pair
 * one collective over both, its rows reordered); the optimizer's nodes,
 * which feed neither, read it split. Unless keep_after_forward, the
 * gathered copies of the blocks' parameters are forgotten when the walk
 * reaches the backward (the first node feeding a gradient but not the
 * loss), so the backward gathers again and the forward's copy dies after
 * its last forward use (FSDP's reshard_after_forward); a parameter outside
 * the blocks (passes/stats.h's block key on its name) keeps its forward
 * copy, as FSDP2's root module does. A parameter the forward and the
 * backward read only through narrowing Casts (mixed precision's bf16 copy)
 * is cast on its shard and the bf16 shard is gathered instead
 * (casts_first), kept as the parameter would be.
 * Constants are never resharded at run time: a constant wanted under a
 * sharding becomes a sharded constant (no data, local shape) whose source is
 * the global data (partition.h) — each rank loads its piece. Constants
 * wanted partial give their data to the group's first rank and zeros to the
 * others.
 *
 * reshard(x: A -> B), in this order:
 *   0. when A has partial axes B lacks: per dim whose axes in A are a
 *      prefix of B's and whose extra axes in B are none of A's partial
 *      axes and split no other dim of A, the comm-free local slice of c,
 *      first (a slice commutes with the sum, and the reductions then move
 *      the rank's piece);
 *   a. partial axes A has and B lacks: ReduceScatter onto the dim where B
 *      adds that axis last (sequence parallelism's reduce-scatter), else
 *      AllReduce (reduce-scatters first; of the all-reduces tp's first,
 *      so that a data axis's, of a gradient, comes last); an f32
 *      gradient's reduce-scatter over a data axis and the data axes'
 *      reductions after it in the plan's reduce dtype under
 *      --reduce-dtype bf16 or fp16 (a Cast before, one back after);
 *   b'. an axis that splits dim d innermost in A and dim e innermost in B
 *      (the rest equal): one AllToAll moves it;
 *   b. per dim, while A's axis list is not a prefix of B's: AllGather the
 *      innermost axis (a strided dim is gathered as [stride, piece] by
 *      Reshape, AllGather, Reshape);
 *   c. per dim, B's extra axes: a comm-free local slice — Gather with the
 *      rank's indices, a sharded constant arange;
 *   d. partial axes B has and A lacks (a replicated activation joining a
 *      pending sum): Mul by a partial scalar 1 (1 on the group's first rank,
 *      0 elsewhere).
 * Every new node gets the `__stage` of the global node it serves.
 *
 * Where pending sums are reduced (the cut). A pending sum begins at a node
 * (a row-parallel MatMul, the backward of a column-parallel one) and
 * travels through the nodes whose rules keep it pending (linear ones: a
 * bias or a residual add, a norm's backward, a sum over a dim) until
 * readers that need it whole reduce what reached them. Reducing lazily,
 * there, is right in the forward (one all-reduce per residual sum: a
 * decomposed norm's reads share it, "once reduced, stays reduced"), but a
 * norm's backward spreads the pending gradient of its output over its
 * input's gradient and its weights' gradients, and the lazy walk reduces
 * each. So the walk runs twice. The first records every pending (value,
 * mesh axis) as a node of a flow graph (cut.c): what reducing it where it
 * is made would move (an all-reduce 2M, or under sequence parallelism a
 * reduce-scatter onto the sequence, M; M its local bytes; each collective
 * also a latency), which pending inputs it flows from, and what the
 * reductions the walk made of it moved. A minimum cut of that graph is the
 * cheapest set of values to reduce where they are made (a tie keeps the
 * lazy reductions); in a pipelined training step a reduction in a piece
 * that runs once per microbatch (forward, backward, weight) costs M times
 * what it moves, one in the norm or update piece once, so a gradient that
 * accumulates pending over the microbatches is reduced once, at the norm
 * (not a narrower bf16 copy of it every microbatch); a gradient's sum
 * over a data axis in bf16 or fp16 is never reduced where it is made
 * unless the plan reduces in the low precision (low_gradient_sum: it is
 * reduced after its Cast back to f32, --reduce-dtype fp32, the default);
 * an input pending over an axis (an accumulator) is a source that is
 * never reduced where it is made, so a gradient added into it is not
 * reduced on its own as well (a position embedding's rows every
 * microbatch besides the accumulated table once); the second walk reshards those right after their
 * node, and what flowed only through them is no longer pending. At tp=2 it
 * turns GPT-2's backward into Megatron's: the gradient of each
 * column-parallel input (the norms' outputs, the LM head's input) is
 * all-reduced once, and nothing after it (the norms' weights, the
 * embeddings) is reduced again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/context_parallel.h"
#include "ir/pipe.h"
#include "ir/op_util.h"
#include "partition.h"
#include "passes/stats.h"
#include "shard_rule.h"

typedef struct memo {
  int32_t gid;       /* global value */
  sc_sharding s;
  int32_t lid;       /* local value holding it */
  int32_t stage;     /* the stage (or piece) that made it */
  bool backward;     /* made in the backward */
  int32_t next;      /* next memo of the same gid, or -1 */
} memo;

typedef struct lz {
  sc_partition *p;
  sc_graph *g, *L;
  const sc_mesh *m;
  sc_sharding *cur;  /* [g->n_values] current sharding */
  int32_t *lid;      /* [g->n_values] local value of cur, -1 = not yet */
  int32_t *head;     /* [g->n_values] first memo, -1 */
  memo *memos;
  int32_t n_memos, cap_memos;
  sc_shard_source *src;
  int32_t n_src, cap_src;
  int32_t stage;     /* of the node being localized */
  bool at_every_run; /* it runs in every run of a step of several
                        (region's REGION_RUN) */
  bool *stored;      /* [g->n_values] a parameter split over the storage axis,
                        or its narrowing Cast (cast_first) */
  bool *cast_first;  /* [g->n_nodes] a Cast of a stored parameter run on its
                        shard: the low-precision copy is what is gathered */
  bool *kept;        /* [g->n_values] a stored value outside the blocks: its
                        forward gather serves the backward too */
  uint8_t *region;   /* [g->n_nodes] REGION_* bits */
  bool in_backward;  /* the walk has reached the backward */
  int32_t n_emitted; /* nodes made here: their names are "<origin>/<Op>_<k>" */
  const char *origin; /* its name, for new node names */
  sc_diag *d;
  sc_cutgraph *cg;   /* the pending sums and their reductions (the cut) */
  int32_t *pnode;    /* [g->n_values * n_axes]: a pending (value, axis)'s
                        node of cg, -1 */
  const bool *eager; /* [g->n_values * n_axes]: reduce there at once (the
                        second walk), or NULL */
} lz;

/* the node feeds the loss, a gradient; the loss or an accumulator
 * ("new:accum:P", an output each run of --grad-accum makes) */
enum { REGION_LOSS = 1, REGION_GRAD = 2, REGION_RUN = 4 };

static sc_status nomem(lz *z) {
  return sc_diag_set(z->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static sc_status lerr(lz *z) {
  *z->d = z->L->diag.status != SC_OK ? z->L->diag : z->g->diag;
  return z->d->status != SC_OK ? z->d->status : SC_ERR_INVALID;
}

static bool is_const(const sc_value *v) {
  return (v->flags & SC_VALUE_CONST) && v->producer < 0;
}

/* The constraint of a computed global value (step 4 above), or NULL. */
static const sc_sharding *constraint(const lz *z, int32_t gid) {
  const sc_value *v = &z->g->values[gid];
  if ((v->flags & SC_VALUE_INPUT) || is_const(v)) return NULL;
  return sc_graph_sharding(z->g, gid);
}

/* The sharding a graph output leaves under: its constraint, or replicated. */
static void output_sharding(const lz *z, int32_t gid, sc_sharding *s) {
  const sc_sharding *c = constraint(z, gid);
  if (c) *s = *c;
  else sc_sharding_replicated(s, z->g->values[gid].rank);
}

static sc_status local_dims(lz *z, const sc_value *gv, const sc_sharding *s, int64_t *out) {
  return sc_sharding_local_shape(s, z->m, gv->rank, gv->dims, out, gv->name, z->d);
}

static sc_status add_memo(lz *z, int32_t gid, const sc_sharding *s, int32_t lid) {
  if (z->n_memos == z->cap_memos) {
    int32_t cap = z->cap_memos ? z->cap_memos * 2 : 256;
    memo *m = sc_realloc(z->memos, (size_t)cap * sizeof *m);
    if (!m) return nomem(z);
    z->memos = m;
    z->cap_memos = cap;
  }
  memo *e = &z->memos[z->n_memos];
  e->gid = gid;
  e->stage = z->stage;
  e->backward = z->in_backward;
  e->s = *s;
  e->lid = lid;
  e->next = z->head[gid];
  z->head[gid] = z->n_memos++;
  return SC_OK;
}

/* Under sequence parallelism, whether s gathers the sequence of the
 * computed value gid (its current sharding splits dim 1 over tp, or dim 0
 * as a stride: the rows [b·S] a Reshape merged; s does not). The
 * backward gathers such a value again rather than read the forward's
 * gathered copy, as Megatron's column-parallel product does:
 * the step keeps the 1/tp piece for the backward (Korthikanti et al.'s
 * sbh·34/t), not the whole [b, s, h], at one more all-gather. */
static bool gathers_sequence(const lz *z, int32_t gid, const sc_sharding *s) {
  int32_t ax = z->p->tp_axis;
  const sc_sharding *c = &z->cur[gid];
  if (!z->p->sequence_parallel || ax < 0 || z->g->values[gid].producer < 0 || c->rank < 2 ||
      s->rank != c->rank)
    return false;
  /* dim 1, or a product's rows [b·S] carrying it as a stride b */
  int32_t d = sc_sharding_stride(c, 0) > 1 ? 0 : 1;
  bool had = false, has = false;
  for (int32_t k = 0; k < c->n_dim_axes[d]; k++) had |= c->dim_axes[d][k] == ax;
  for (int32_t k = 0; k < s->n_dim_axes[d]; k++) has |= s->dim_axes[d][k] == ax;
  return had && !has;
}

/* Whether `stage` is an update piece on another pipeline rank than the
 * update piece being localized. Each pipeline rank's update combines the
 * chunks' sums of squares itself (passes/partition/pipe_train.c); a sum
 * pending over tp that another rank's update piece reduced is reduced
 * again here (a scalar all-reduce) rather than handed over, which would
 * make this rank's update wait for that whole piece. */
static bool other_rank_update(const lz *z, int32_t stage) {
  int32_t C = z->p->n_chunks, P = z->p->n_stages;
  return C > 0 && P > 0 && z->stage >= 0 && stage != z->stage &&
         sc_pipe_piece_phase(C, z->stage) == SC_PIPE_UPDATE &&
         sc_pipe_piece_phase(C, stage) == SC_PIPE_UPDATE &&
         sc_pipe_piece_chunk(C, stage) % P != sc_pipe_piece_chunk(C, z->stage) % P;
}

/* A pipelined step's piece reshards a graph input (a parameter, state,
 * data) itself rather than reuse another piece's reshard: every piece
 * reads the input, and the reshard of another piece (a tp weight gathered
 * in the forward, read again by the backward) would be handed over per
 * microbatch, a weight-sized stash for each microbatch in flight. */
/* Whether the update piece being localized reads scalar gid (a chunk's
 * sum of squares): its reduction stays this piece's (other_rank_update). */
static bool per_rank_update_sum(const lz *z, int32_t gid) {
  int32_t C = z->p->n_chunks;
  return C > 0 && z->stage >= 0 && sc_value_numel(&z->g->values[gid]) == 1 &&
         sc_pipe_piece_phase(C, z->stage) == SC_PIPE_UPDATE;
}

static int32_t find_memo(lz *z, int32_t gid, const sc_sharding *s) {
  bool own = z->p->n_chunks > 0 && z->g->values[gid].producer < 0;
  for (int32_t i = z->head[gid]; i >= 0; i = z->memos[i].next)
    if (sc_sharding_equal(&z->memos[i].s, s) &&
        (!own || z->memos[i].stage == z->stage || z->memos[i].lid == z->lid[gid]) &&
        !(z->in_backward && !z->memos[i].backward && gathers_sequence(z, gid, s)) &&
        !other_rank_update(z, z->memos[i].stage))
      return z->memos[i].lid;
  return -1;
}

/* A new local value named after base with dtype and local dims, its
 * sharding recorded. */
static int32_t new_value(lz *z, const char *base, sc_dtype t, int32_t rank,
                         const int64_t *dims, const sc_sharding *s) {
  int32_t id = sc_graph_new_value(z->L, base);
  if (id < 0) return -1;
  if (sc_value_set_shape(z->L, id, t, rank, dims) != SC_OK) return -1;
  if (s && sc_graph_set_sharding(z->L, id, s) != SC_OK) return -1;
  return id;
}

static sc_status add_source(lz *z, const char *name, sc_dtype t, int32_t rank,
                            const int64_t *dims, const void *data, const sc_sharding *s) {
  if (z->n_src == z->cap_src) {
    int32_t cap = z->cap_src ? z->cap_src * 2 : 64;
    sc_shard_source *n = sc_realloc(z->src, (size_t)cap * sizeof *n);
    if (!n) return nomem(z);
    z->src = n;
    z->cap_src = cap;
  }
  sc_shard_source *e = &z->src[z->n_src++];
  memset(e, 0, sizeof *e);
  e->name = name;
  e->dtype = t;
  e->rank = rank;
  if (rank) memcpy(e->dims, dims, (size_t)rank * sizeof *dims);
  e->data = data;
  e->sharding = *s;
  return SC_OK;
}

/* A constant of the local graph under sharding s, from global contents
 * (dtype t, dims, data — NULL for an absent weight). Replicated: a plain
 * constant with borrowed data; else a sharded constant with a source. */
static int32_t make_const(lz *z, const char *base, sc_dtype t, int32_t rank,
                          const int64_t *dims, const void *data, bool param,
                          const sc_sharding *s) {
  int64_t loc[SC_MAX_RANK];
  if (sc_sharding_local_shape(s, z->m, rank, dims, loc, base, z->d) != SC_OK) return -1;
  int32_t id = new_value(z, base, t, rank, loc, s);
  if (id < 0) return lerr(z), -1;
  sc_value *v = sc_val(z->L, id);
  if (sc_sharding_is_replicated(s) && data) {
    int64_t n = sc_value_bytes(v);
    if (sc_value_set_data(z->L, id, t, rank, loc, data, (uint64_t)n, false) != SC_OK)
      return lerr(z), -1;
  }
  v->flags |= SC_VALUE_CONST | (param || !sc_sharding_is_replicated(s) ? SC_VALUE_PARAM : 0);
  if (!sc_sharding_is_replicated(s) &&
      add_source(z, v->name, t, rank, dims, data, s) != SC_OK)
    return -1;
  return id;
}

/* A replicated i64 constant of the local graph (data in its arena). */
static int32_t const_i64(lz *z, const char *base, int32_t rank, const int64_t *dims,
                         const int64_t *vals) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= dims[i];
  int32_t id = sc_graph_new_value(z->L, base);
  if (id < 0) return lerr(z), -1;
  if (sc_value_set_data(z->L, id, SC_DTYPE_I64, rank, dims, vals, (uint64_t)n * 8, true) !=
      SC_OK)
    return lerr(z), -1;
  sc_sharding r;
  sc_sharding_replicated(&r, rank);
  if (sc_graph_set_sharding(z->L, id, &r) != SC_OK) return lerr(z), -1;
  return id;
}

/* Adds a node of the current stage. */
static int32_t emit(lz *z, sc_op op, const int32_t *in, int32_t n_in, const int32_t *out,
                    int32_t n_out) {
  /* generated names ("Mul_20") could meet the model's own */
  char name[640];
  snprintf(name, sizeof name, "%s/%s_%d", z->origin, sc_op_name(op), (int)z->n_emitted++);
  int32_t nid = sc_graph_add_node(z->L, op, name, in, n_in, out, n_out);
  if (nid < 0) return lerr(z), -1;
  sc_attr *a = sc_node_add_attr(z->L, nid, "__stage", SC_ATTR_INT);
  if (!a) return nomem(z), -1;
  a->i = z->stage;
  return nid;
}

/* The `axes` of collective nid: axis, or with inner >= 0 the group over
 * axis and inner (the storage group, storage_group). */
static sc_status attr_group(lz *z, int32_t nid, int32_t axis, int32_t inner) {
  sc_attr *a = sc_node_add_attr(z->L, nid, "axes", SC_ATTR_STRINGS);
  if (!a) return nomem(z);
  int32_t n = inner >= 0 ? 2 : 1;
  const char **s = sc_arena_array(&z->L->arena, (size_t)n, sizeof *s);
  if (!s) return nomem(z);
  s[0] = z->m->axes[axis].name;
  if (inner >= 0) s[1] = z->m->axes[inner].name;
  a->strings = s;
  a->n = n;
  return SC_OK;
}

static sc_status attr_axes(lz *z, int32_t nid, int32_t axis) {
  return attr_group(z, nid, axis, -1);
}

/* Whether axes outer, inner, adjacent on one dim in that order (inner
 * innermost), are the storage group of a parameter outside the experts
 * (fsdp, then ep: train_seed.c), whose gathers and reduce-scatters run as
 * one collective over both: when fsdp comes first in the mesh, so that a
 * rank's key in the group (row-major over the axes in mesh order, ir/mesh.h)
 * is its piece's index on the dim. */
static bool storage_group(const lz *z, int32_t outer, int32_t inner) {
  const sc_partition *p = z->p;
  return p->fsdp_axis >= 0 && outer == p->fsdp_axis && inner == p->ep_axis &&
         p->fsdp_axis < p->ep_axis;
}

static sc_status attr_int(lz *z, int32_t nid, const char *name, int64_t v) {
  sc_attr *a = sc_node_add_attr(z->L, nid, name, SC_ATTR_INT);
  if (!a) return nomem(z);
  a->i = v;
  return SC_OK;
}

/* One collective over mesh axis `axis` (and `inner`, when >= 0: the group
 * over both, storage_group) on local value x (global value gv), giving
 * sharding s. op: AllReduce / AllGather / ReduceScatter; dim for the
 * latter two. */
static int32_t collective2(lz *z, sc_op op, int32_t x, const sc_value *gv, int32_t axis,
                           int32_t inner, int32_t dim, const sc_sharding *s) {
  int64_t loc[SC_MAX_RANK];
  if (local_dims(z, gv, s, loc) != SC_OK) return -1;
  const sc_value *xv = &z->L->values[x]; /* gv's dtype, or the reduce dtype (reshard) */
  int32_t y = new_value(z, xv->name, xv->dtype, gv->rank, loc, s);
  if (y < 0) return lerr(z), -1;
  int32_t nid = emit(z, op, &x, 1, &y, 1);
  if (nid < 0 || attr_group(z, nid, axis, inner) != SC_OK) return -1;
  if (op != SC_OP_ALL_REDUCE && attr_int(z, nid, "axis", dim) != SC_OK) return -1;
  return y;
}

static int32_t collective(lz *z, sc_op op, int32_t x, const sc_value *gv, int32_t axis,
                          int32_t dim, const sc_sharding *s) {
  return collective2(z, op, x, gv, axis, -1, dim, s);
}

/* AllGather of the innermost axis of a strided dim d: the local piece is
 * viewed as [stride, piece] so that the gathered pieces land in each block. */
static int32_t gather_strided(lz *z, int32_t x, const sc_value *gv, const sc_sharding *a,
                              int32_t d, int32_t axis, const sc_sharding *after) {
  int64_t k = sc_sharding_stride(a, d);
  int64_t in[SC_MAX_RANK], out[SC_MAX_RANK], v1[SC_MAX_RANK], v2[SC_MAX_RANK];
  if (local_dims(z, gv, a, in) != SC_OK || local_dims(z, gv, after, out) != SC_OK) return -1;
  int32_t r = gv->rank;
  for (int32_t i = 0, j = 0; i < r; i++) {
    if (i == d) {
      v1[j] = k;
      v2[j++] = k;
      v1[j] = in[i] / k;
      v2[j++] = out[i] / k;
    } else {
      v1[j] = in[i];
      v2[j++] = out[i];
    }
  }
  int32_t sh1 = const_i64(z, "shape", 1, (int64_t[]){r + 1}, v1);
  int32_t sh2 = const_i64(z, "shape", 1, (int64_t[]){r}, out);
  if (sh1 < 0 || sh2 < 0) return -1;
  int32_t t1 = new_value(z, z->L->values[x].name, gv->dtype, r + 1, v1, NULL);
  int32_t t2 = new_value(z, z->L->values[x].name, gv->dtype, r + 1, v2, NULL);
  int32_t y = new_value(z, z->L->values[x].name, gv->dtype, r, out, after);
  if (t1 < 0 || t2 < 0 || y < 0) return lerr(z), -1;
  if (emit(z, SC_OP_RESHAPE, (int32_t[]){x, sh1}, 2, &t1, 1) < 0) return -1;
  int32_t ag = emit(z, SC_OP_ALL_GATHER, &t1, 1, &t2, 1);
  if (ag < 0 || attr_axes(z, ag, axis) != SC_OK || attr_int(z, ag, "axis", d + 1) != SC_OK)
    return -1;
  if (emit(z, SC_OP_RESHAPE, (int32_t[]){t2, sh2}, 2, &y, 1) < 0) return -1;
  return y;
}

/* Comm-free slice of dim d from sharding a to b (b's axes on d extend a's):
 * Gather(x, rank's indices, axis d). */
static int32_t local_slice(lz *z, int32_t x, const sc_value *gv, const sc_sharding *a,
                           int32_t d, const sc_sharding *b) {
  int64_t in[SC_MAX_RANK], out[SC_MAX_RANK];
  if (local_dims(z, gv, a, in) != SC_OK || local_dims(z, gv, b, out) != SC_OK) return -1;
  int64_t n = in[d];
  int64_t *ar = sc_arena_array(&z->p->arena, (size_t)(n ? n : 1), sizeof *ar);
  if (!ar) return nomem(z), -1;
  for (int64_t i = 0; i < n; i++) ar[i] = i;
  sc_sharding is;
  sc_sharding_replicated(&is, 1);
  for (int32_t k = a->n_dim_axes[d]; k < b->n_dim_axes[d]; k++)
    sc_sharding_split(&is, 0, b->dim_axes[d][k]);
  is.stride[0] = b->stride[d]; /* a strided dim's local piece is [stride, piece] */
  char base[256];
  snprintf(base, sizeof base, "%s.index", gv->name);
  int32_t idx = make_const(z, base, SC_DTYPE_I64, 1, &n, ar, false, &is);
  sc_sharding next = *a;
  next.n_dim_axes[d] = b->n_dim_axes[d];
  memcpy(next.dim_axes[d], b->dim_axes[d], sizeof next.dim_axes[d]);
  next.stride[d] = b->stride[d];
  int64_t nd[SC_MAX_RANK];
  if (idx < 0 || local_dims(z, gv, &next, nd) != SC_OK) return -1;
  int32_t y = new_value(z, z->L->values[x].name, gv->dtype, gv->rank, nd, &next);
  if (y < 0) return lerr(z), -1;
  int32_t nid = emit(z, SC_OP_GATHER, (int32_t[]){x, idx}, 2, &y, 1);
  if (nid < 0 || attr_int(z, nid, "axis", d) != SC_OK) return -1;
  return y;
}

/* local_slice of dim d, and *a updated to b's axes on d. */
static int32_t slice_dim(lz *z, int32_t x, const sc_value *gv, sc_sharding *a, int32_t d,
                         const sc_sharding *b) {
  x = local_slice(z, x, gv, a, d, b);
  a->n_dim_axes[d] = b->n_dim_axes[d];
  memcpy(a->dim_axes[d], b->dim_axes[d], sizeof a->dim_axes[d]);
  a->stride[d] = b->stride[d];
  return x;
}

/* How many times the piece of the node being localized runs per step: M in
 * a pipelined step's forward, backward and weight pieces; K in an
 * unpipelined step of K runs (--grad-accum) for a node that feeds the loss
 * or a gradient (each run's), once for the gradients' mean and what reads
 * it (the last run's: passes/train.h); else once (the cut's weight on a
 * reduction there). */
static double runs_per_step(const lz *z) {
  const sc_partition *p = z->p;
  if (!p->n_chunks && p->train && p->train->runs > 1)
    return z->at_every_run ? (double)p->train->runs : 1.0;
  if (!p->n_chunks || p->microbatches <= 1) return 1.0;
  return sc_pipe_per_mb(sc_pipe_piece_phase(p->n_chunks, z->stage)) ? (double)p->microbatches
                                                                      : 1.0;
}

static bool is_prefix(const sc_sharding *a, const sc_sharding *b, int32_t d) {
  if (a->n_dim_axes[d] > b->n_dim_axes[d]) return false;
  for (int32_t k = 0; k < a->n_dim_axes[d]; k++)
    if (a->dim_axes[d][k] != b->dim_axes[d][k]) return false;
  if (a->n_dim_axes[d] == 0) return true;
  return sc_sharding_stride(a, d) == sc_sharding_stride(b, d);
}

static int32_t scalar_one(lz *z, sc_dtype t, sc_axes partial) {
  static const float f32 = 1.0f;
  static const double f64 = 1.0;
  static const uint16_t bf16 = 0x3f80, f16 = 0x3c00; /* 1.0 in bfloat16, in IEEE half */
  const void *data = t == SC_DTYPE_F32    ? (const void *)&f32
                     : t == SC_DTYPE_F64  ? (const void *)&f64
                     : t == SC_DTYPE_BF16 ? (const void *)&bf16
                     : t == SC_DTYPE_F16  ? (const void *)&f16
                                          : NULL;
  if (!data) {
    sc_diag_set(z->d, SC_ERR_UNSUPPORTED, NULL, NULL,
                "node '%s': a %s value cannot join a pending sum", z->origin,
                sc_dtype_name(t));
    return -1;
  }
  sc_sharding s;
  sc_sharding_replicated(&s, 0);
  s.partial = partial;
  return make_const(z, "one", t, 0, NULL, data, false, &s);
}

/* A Cast of local value x (sharding s) to dtype t. */
static int32_t cast_to(lz *z, int32_t x, sc_dtype t, const sc_sharding *s) {
  const sc_value v = z->L->values[x]; /* a copy: adding values moves the array */
  int32_t y = new_value(z, v.name, t, v.rank, v.dims, s);
  if (y < 0) return lerr(z), -1;
  int32_t nid = emit(z, SC_OP_CAST, &x, 1, &y, 1);
  if (nid < 0 || attr_int(z, nid, "to", sc_dtype_to_onnx(t)) != SC_OK) return -1;
  return y;
}

/* The dtype global value gv's reduce-scatter over a data axis runs in: the
 * plan's reduce dtype for an f32 gradient (a value the backward makes:
 * "grad:P", "grad:P.flat", what they are made of) under --reduce-dtype
 * bf16 or fp16, as FSDP's reduce_dtype and Megatron's distributed optimizer
 * with --grad-reduce-in-bf16 reduce-scatter it; else its own. */
static sc_dtype scatter_dtype(const lz *z, const sc_value *gv) {
  if (z->p->reduce_dtype != SC_DTYPE_UNDEF && gv->dtype == SC_DTYPE_F32 &&
      sc_partition_accum_mean_of(z->g, (int32_t)(gv - z->g->values)))
    return z->p->reduce_dtype;
  if (z->p->reduce_dtype == SC_DTYPE_UNDEF || gv->dtype != SC_DTYPE_F32 || !z->region ||
      gv->producer < 0 || (z->region[gv->producer] & (REGION_LOSS | REGION_GRAD)) != REGION_GRAD)
    return gv->dtype;
  return z->p->reduce_dtype;
}

/* Local value of global value gid under sharding b. */
static int32_t reshard(lz *z, int32_t gid, const sc_sharding *b) {
  const sc_value *gv = &z->g->values[gid];
  int32_t hit = find_memo(z, gid, b);
  if (hit >= 0) return hit;
  if (is_const(gv)) {
    sc_sharding want = *b;
    int32_t id = make_const(z, gv->name, gv->dtype, gv->rank, gv->dims, gv->data,
                            (gv->flags & SC_VALUE_PARAM) != 0, &want);
    if (id < 0 || add_memo(z, gid, b, id) != SC_OK) return -1;
    return id;
  }
  sc_sharding a = z->cur[gid];
  int32_t x = z->lid[gid];
  SC_ASSERT(x >= 0);
  /* 0. local slices that need no communication and no pending axis (a
   * slice commutes with the sum): before the reductions, so that they move
   * the piece, not the whole (a vocabulary-parallel embedding's gradient,
   * whole on every tensor-parallel rank, is all-reduced over dp as its
   * rank's rows: 1/tp of the bytes) */
  if (a.partial & ~b->partial)
    for (int32_t d = 0; d < gv->rank; d++) {
      if (a.n_dim_axes[d] == b->n_dim_axes[d] || !is_prefix(&a, b, d)) continue;
      bool pending = false, elsewhere = false;
      for (int32_t k = a.n_dim_axes[d]; k < b->n_dim_axes[d]; k++) {
        int32_t axis = b->dim_axes[d][k];
        pending |= (a.partial & (1u << axis)) != 0;
        /* an axis that still splits another dim of A is gathered there
         * first (b.), and the slice waits for c. */
        for (int32_t e = 0; e < gv->rank; e++)
          for (int32_t j = 0; j < a.n_dim_axes[e]; j++) elsewhere |= a.dim_axes[e][j] == axis;
      }
      if (pending || elsewhere) continue;
      if ((x = slice_dim(z, x, gv, &a, d, b)) < 0) return -1;
    }
  /* a. pending sums B does not keep: reduce-scatters first (each makes
   * the rest smaller: HSDP's reduce-scatter within the shard group, then
   * the all-reduce of the shard across replicas), then all-reduces, tp's
   * first (a sequence-parallel norm weight's gradient, pending over tp and
   * dp: its dp all-reduce is then the last, of "grad:P", and joins its
   * block's bucket, which nothing reads before the update; reduced over dp
   * first, the tp all-reduce read it at once and the backward waited for
   * the dp queue there, every block). A gradient's reduce-scatter over a
   * data axis and the data axes' reductions after it run in scatter_dtype:
   * cast before the first, cast back to f32 (the master's dtype) after the
   * last or before a tp reduction (tp's sums stay in the gradient's dtype) */
  sc_dtype low = scatter_dtype(z, gv);
  bool narrow = false; /* x is the cast to low */
  /* an accumulated gradient's mean: its all-reduce over a data axis too */
  bool mean = sc_partition_accum_mean_of(z->g, gid) != NULL;
  for (int pass = 0; pass < 2; pass++)
    for (int32_t at = -1; at < z->m->n_axes; at++) {
      int32_t tp = z->p->tp_axis, ax = at < 0 ? tp : at;
      if (ax < 0 || (at >= 0 && ax == tp && pass == 1) || (at < 0 && pass == 0)) continue;
      if (!(a.partial & ~b->partial & (1u << ax))) continue;
      int32_t dim = -1;
      for (int32_t d = 0; d < gv->rank; d++) {
        int32_t k = b->n_dim_axes[d];
        if (k > a.n_dim_axes[d] && b->dim_axes[d][a.n_dim_axes[d]] == ax &&
            sc_sharding_stride(b, d) == 1 && is_prefix(&a, b, d))
          dim = d;
      }
      if (pass == 0 && dim < 0) continue;
      sc_sharding next = a;
      next.partial &= ~(1u << ax);
      bool first_scatter = ax != tp && (dim >= 0 || mean) && !narrow, back = ax == tp && narrow;
      if (low != gv->dtype && (first_scatter || back)) {
        x = cast_to(z, x, narrow ? gv->dtype : low, &a);
        if (x < 0) return -1;
        narrow = !narrow;
      }
      /* what the reduction moves: 2M for an all-reduce, M for a
       * reduce-scatter (ring), M the local bytes; and a collective's latency */
      double bytes = (double)sc_value_numel(&z->L->values[x]) *
                     sc_dtype_size(z->L->values[x].dtype);
      sc_cut_reduce(z->cg, z->pnode[(size_t)gid * z->m->n_axes + ax],
                    runs_per_step(z) * ((dim >= 0 ? 1.0 : 2.0) * bytes + SC_CUT_LATENCY_BYTES));
      if (dim >= 0) {
        /* the storage group's reduce-scatter: one over both axes */
        int32_t k = a.n_dim_axes[dim], inner = -1;
        if (k + 1 < b->n_dim_axes[dim] && storage_group(z, ax, b->dim_axes[dim][k + 1]) &&
            (a.partial & ~b->partial & (1u << b->dim_axes[dim][k + 1])))
          inner = b->dim_axes[dim][k + 1];
        sc_sharding_split(&next, dim, ax);
        if (inner >= 0) {
          sc_sharding_split(&next, dim, inner);
          next.partial &= ~(1u << inner);
          sc_cut_reduce(z->cg, z->pnode[(size_t)gid * z->m->n_axes + inner],
                        runs_per_step(z) * SC_CUT_LATENCY_BYTES);
        }
        x = collective2(z, SC_OP_REDUCE_SCATTER, x, gv, ax, inner, dim, &next);
      } else {
        x = collective(z, SC_OP_ALL_REDUCE, x, gv, ax, 0, &next);
      }
      if (x < 0) return -1;
      a = next;
    }
  if (narrow && (x = cast_to(z, x, gv->dtype, &a)) < 0) return -1;
  /* b'. an axis moving from one dim to another: AllToAll */
  for (int32_t d = 0; d < gv->rank; d++) {
    int32_t k = a.n_dim_axes[d];
    if (k == 0 || is_prefix(&a, b, d) || sc_sharding_stride(&a, d) > 1) continue;
    int32_t ax = a.dim_axes[d][k - 1];
    for (int32_t e = 0; e < gv->rank; e++) {
      int32_t ke = b->n_dim_axes[e];
      if (e == d || ke == 0 || b->dim_axes[e][ke - 1] != ax || a.n_dim_axes[e] != ke - 1 ||
          sc_sharding_stride(b, e) > 1 || sc_sharding_stride(&a, e) > 1)
        continue;
      bool prefix = true;
      for (int32_t j = 0; j < ke - 1; j++) prefix &= a.dim_axes[e][j] == b->dim_axes[e][j];
      if (!prefix) continue;
      sc_sharding next = a;
      next.n_dim_axes[d]--;
      sc_sharding_split(&next, e, ax);
      int64_t loc[SC_MAX_RANK];
      if (local_dims(z, gv, &next, loc) != SC_OK) return -1;
      int32_t y = new_value(z, z->L->values[x].name, gv->dtype, gv->rank, loc, &next);
      if (y < 0) return lerr(z), -1;
      int32_t nid = emit(z, SC_OP_ALL_TO_ALL, &x, 1, &y, 1);
      if (nid < 0 || attr_axes(z, nid, ax) != SC_OK ||
          attr_int(z, nid, "split_axis", e) != SC_OK ||
          attr_int(z, nid, "concat_axis", d) != SC_OK)
        return -1;
      x = y;
      a = next;
      break;
    }
  }
  /* b. gathers */
  for (int32_t d = 0; d < gv->rank; d++) {
    while (!is_prefix(&a, b, d)) {
      sc_sharding next = a;
      int32_t ax = a.dim_axes[d][--next.n_dim_axes[d]], outer = -1;
      /* the storage group, both gathered: one gather over both */
      if (next.n_dim_axes[d] > 0 && sc_sharding_stride(&a, d) == 1 &&
          storage_group(z, next.dim_axes[d][next.n_dim_axes[d] - 1], ax) &&
          !is_prefix(&next, b, d))
        outer = next.dim_axes[d][--next.n_dim_axes[d]];
      if (next.n_dim_axes[d] == 0) next.stride[d] = 0;
      x = sc_sharding_stride(&a, d) > 1 ? gather_strided(z, x, gv, &a, d, ax, &next)
          : outer >= 0 ? collective2(z, SC_OP_ALL_GATHER, x, gv, outer, ax, d, &next)
                       : collective(z, SC_OP_ALL_GATHER, x, gv, ax, d, &next);
      if (x < 0) return -1;
      a = next;
    }
  }
  /* c. local slices */
  for (int32_t d = 0; d < gv->rank; d++) {
    if (a.n_dim_axes[d] == b->n_dim_axes[d]) continue;
    if ((x = slice_dim(z, x, gv, &a, d, b)) < 0) return -1;
  }
  /* d. joining a pending sum */
  sc_axes add = b->partial & ~a.partial;
  if (add) {
    int32_t one = scalar_one(z, gv->dtype, add);
    if (one < 0) return -1;
    sc_sharding next = a;
    next.partial |= add;
    int64_t loc[SC_MAX_RANK];
    if (local_dims(z, gv, &next, loc) != SC_OK) return -1;
    int32_t y = new_value(z, z->L->values[x].name, gv->dtype, gv->rank, loc, &next);
    if (y < 0 || emit(z, SC_OP_MUL, (int32_t[]){x, one}, 2, &y, 1) < 0) return lerr(z), -1;
    x = y;
    a = next;
  }
  SC_ASSERT(sc_sharding_equal(&a, b));
  if (add_memo(z, gid, b, x) != SC_OK) return -1;
  return x;
}

/* Replaces input `in` of local node nid by an i64 constant holding vals. */
static sc_status set_shape_input(lz *z, int32_t nid, int32_t in, int32_t n,
                                 const int64_t *vals) {
  char base[256];
  snprintf(base, sizeof base, "%s.local_shape", z->origin);
  int32_t c = const_i64(z, base, 1, (int64_t[]){n}, vals);
  if (c < 0) return z->d->status;
  z->L->nodes[nid].inputs[in] = c;
  return SC_OK;
}

/* Inputs that spell the output's shape get the local sizes. */
static sc_status fix_shape_inputs(lz *z, int32_t nid) {
  /* copies: adding constants may move the graph's value array */
  sc_node *n = &z->L->nodes[nid];
  const sc_value o_copy = z->L->values[n->outputs[0]], *o = &o_copy;
  switch (n->op) {
  case SC_OP_RESHAPE:
  case SC_OP_EXPAND:
    return set_shape_input(z, nid, 1, o->rank, o->dims);
  case SC_OP_CONSTANT_OF_SHAPE:
    return set_shape_input(z, nid, 0, o->rank, o->dims);
  case SC_OP_SPLIT: {
    if (n->n_inputs < 2 || n->inputs[1] < 0) return SC_OK; /* equal split: attribute-free */
    int64_t axis = sc_attr_int(z->L, n, "axis", 0);
    if (axis < 0) axis += o->rank;
    int64_t sizes[64];
    if (n->n_outputs > 64)
      return sc_diag_set(z->d, SC_ERR_LIMIT, NULL, NULL, "node '%s': too many outputs",
                         z->origin);
    for (int32_t j = 0; j < n->n_outputs; j++)
      sizes[j] = z->L->values[n->outputs[j]].dims[axis];
    return set_shape_input(z, nid, 1, n->n_outputs, sizes);
  }
  default:
    return SC_OK;
  }
}

/* The rank's view of ids into a table whose dim 0 is split (want: the
 * table's sharding): *ok, whether each id is a row the rank holds, and
 * *safe, that row less the rank's offset there, 0 elsewhere (i64, the ids'
 * local dims). Ids count against `total` rows (negative ones from its
 * end). With `check` (a lookup: `gn`'s name), the first node reading the
 * ids carries `__check_indices` = total and `__check_origin` = gn's name
 * (codegen/from_graph.c). */
static sc_status masked_rows(lz *z, const sc_node *gn, const sc_value *data,
                             const sc_sharding *want, int32_t ids, int64_t total, bool check,
                             int32_t *ok_out, int32_t *safe_out) {
  int64_t parts = sc_sharding_dim_parts(&want[0], z->m, 0);
  int64_t rows = data->dims[0] / parts;
  /* per-rank row offset: a [parts] arange * rows, split like dim 0 */
  int64_t *offs = sc_arena_array(&z->p->arena, (size_t)parts, sizeof *offs);
  if (!offs) return nomem(z);
  for (int64_t i = 0; i < parts; i++) offs[i] = i * rows;
  sc_sharding os;
  sc_sharding_replicated(&os, 1);
  os.n_dim_axes[0] = want[0].n_dim_axes[0];
  memcpy(os.dim_axes[0], want[0].dim_axes[0], sizeof os.dim_axes[0]);
  char base[256];
  snprintf(base, sizeof base, "%s.row_offset", data->name);
  int32_t off = make_const(z, base, SC_DTYPE_I64, 1, &parts, offs, false, &os);
  int32_t zero = const_i64(z, "zero", 0, NULL, (int64_t[]){0});
  int32_t lim = const_i64(z, "rows", 0, NULL, &rows);
  if (off < 0 || zero < 0 || lim < 0) return z->d->status;
  sc_value li_copy = z->L->values[ids], *li = &li_copy; /* the array may move */
  int32_t r = li->rank;
  /* the values made of the ids are split as they are (a later pass, the
   * tied gradient's split reduction in bucket.c, makes them by rows) */
  const sc_sharding *ls = sc_graph_sharding(z->L, ids);
  sc_sharding is;
  if (ls) is = *ls;
  else sc_sharding_replicated(&is, r);
  int32_t reader = -1; /* the first node reading the caller's ids */
  if (li->dtype != SC_DTYPE_I64) { /* int32 ids: compare in int64 */
    int32_t c = new_value(z, "index", SC_DTYPE_I64, r, li->dims, &is);
    int32_t cn = c < 0 ? -1 : emit(z, SC_OP_CAST, &ids, 1, &c, 1);
    if (cn < 0 || attr_int(z, cn, "to", sc_dtype_to_onnx(SC_DTYPE_I64)) != SC_OK)
      return c < 0 ? lerr(z) : z->d->status;
    ids = c;
    li->dtype = SC_DTYPE_I64;
    reader = cn;
  }
  int32_t rel = new_value(z, "rel_index", li->dtype, r, li->dims, &is);
  int32_t ge = new_value(z, "in_range", SC_DTYPE_BOOL, r, li->dims, &is);
  int32_t below = new_value(z, "below", SC_DTYPE_BOOL, r, li->dims, &is);
  int32_t lt = new_value(z, "in_range", SC_DTYPE_BOOL, r, li->dims, &is);
  int32_t ok = new_value(z, "in_range", SC_DTYPE_BOOL, r, li->dims, &is);
  int32_t safe = new_value(z, "safe_index", li->dtype, r, li->dims, &is);
  if (rel < 0 || ge < 0 || below < 0 || lt < 0 || ok < 0 || safe < 0) return lerr(z);
  /* negative ids count from the end of the whole table */
  int32_t vocab = const_i64(z, "rows", 0, NULL, &total);
  int32_t neg = new_value(z, "negative", SC_DTYPE_BOOL, r, li->dims, &is);
  int32_t wrapped = new_value(z, "wrapped", li->dtype, r, li->dims, &is);
  int32_t idx = new_value(z, "index", li->dtype, r, li->dims, &is);
  if (vocab < 0 || neg < 0 || wrapped < 0 || idx < 0) return lerr(z);
  int32_t less = emit(z, SC_OP_LESS, (int32_t[]){ids, zero}, 2, &neg, 1);
  if (less < 0) return z->d->status;
  if (reader < 0) reader = less;
  if (check) { /* (each attribute set at once: adding the next may move the array) */
    const char *origin = sc_arena_strdup(&z->L->arena, gn->name ? gn->name : "");
    if (!origin || attr_int(z, reader, "__check_indices", total) != SC_OK) return nomem(z);
    sc_attr *co = sc_node_add_attr(z->L, reader, "__check_origin", SC_ATTR_STRING);
    if (!co) return nomem(z);
    co->s = origin;
  }
  if (emit(z, SC_OP_ADD, (int32_t[]){ids, vocab}, 2, &wrapped, 1) < 0 ||
      emit(z, SC_OP_WHERE, (int32_t[]){neg, wrapped, ids}, 3, &idx, 1) < 0)
    return z->d->status;
  if (emit(z, SC_OP_SUB, (int32_t[]){idx, off}, 2, &rel, 1) < 0 ||
      /* rel >= 0 as not(rel < 0): Less and Not exist at every opset the
       * graph may be read at (GreaterOrEqual only from 12) */
      emit(z, SC_OP_LESS, (int32_t[]){rel, zero}, 2, &below, 1) < 0 ||
      emit(z, SC_OP_NOT, (int32_t[]){below}, 1, &ge, 1) < 0 ||
      emit(z, SC_OP_LESS, (int32_t[]){rel, lim}, 2, &lt, 1) < 0 ||
      emit(z, SC_OP_AND, (int32_t[]){ge, lt}, 2, &ok, 1) < 0 ||
      emit(z, SC_OP_WHERE, (int32_t[]){ok, rel, zero}, 3, &safe, 1) < 0)
    return z->d->status;
  *ok_out = ok;
  *safe_out = safe;
  return SC_OK;
}

/* Vocabulary-parallel Gather(data split on dim 0, indices): each rank
 * gathers the rows it holds and zeroes the rest; the result is partial.
 * Ids count against the whole vocabulary (the `__vocab` attribute of a
 * padded table: the size before padding): negative ones from its end, and
 * the program checks them before the lookup (masked_rows' `check`), so
 * that an id outside the vocabulary is the same error on every mesh
 * instead of a row of zeros. */
static sc_status masked_gather(lz *z, const sc_node *gn, const sc_sharding *want,
                               const int32_t *lin, int32_t out_lid) {
  const sc_value *data = &z->g->values[gn->inputs[0]];
  const sc_attr *voc = sc_node_attr(gn, "__vocab");
  int64_t total = voc && voc->kind == SC_ATTR_INT ? voc->i : data->dims[0];
  int32_t ok = -1, safe = -1;
  sc_status st = masked_rows(z, gn, data, want, lin[1], total, true, &ok, &safe);
  if (st != SC_OK) return st;
  sc_value li_copy = z->L->values[lin[1]], *li = &li_copy;
  int32_t r = li->rank;
  const sc_value lo_copy = z->L->values[out_lid], *lo = &lo_copy;
  int32_t gat = new_value(z, "gathered", lo->dtype, lo->rank, lo->dims, NULL);
  int32_t mf = new_value(z, "mask", lo->dtype, r, li->dims, NULL);
  int64_t ud[SC_MAX_RANK];
  memcpy(ud, li->dims, (size_t)r * sizeof *ud);
  for (int32_t i = r; i < lo->rank; i++) ud[i] = 1;
  int32_t mu = new_value(z, "mask", lo->dtype, lo->rank, ud, NULL);
  if (gat < 0 || mf < 0 || mu < 0) return lerr(z);
  int64_t axes[SC_MAX_RANK];
  for (int32_t i = r; i < lo->rank; i++) axes[i - r] = i;
  int32_t ax = const_i64(z, "axes", 1, (int64_t[]){lo->rank - r}, axes);
  if (ax < 0) return z->d->status;
  int32_t g1 = emit(z, SC_OP_GATHER, (int32_t[]){lin[0], safe}, 2, &gat, 1);
  int32_t c1 = emit(z, SC_OP_CAST, &ok, 1, &mf, 1);
  if (g1 < 0 || c1 < 0 || attr_int(z, g1, "axis", 0) != SC_OK ||
      attr_int(z, c1, "to", sc_dtype_to_onnx(lo->dtype)) != SC_OK)
    return z->d->status;
  if (emit(z, SC_OP_UNSQUEEZE, (int32_t[]){mf, ax}, 2, &mu, 1) < 0 ||
      emit(z, SC_OP_MUL, (int32_t[]){gat, mu}, 2, &out_lid, 1) < 0)
    return z->d->status;
  return SC_OK;
}

/* Vocabulary-parallel ScatterND(zeros split on dim 0, indices [.., 1],
 * updates [.., cols], reduction add): the gradient of a vocabulary-
 * parallel lookup (shard_rules.c, masked_scatter). Each rank adds the
 * updates whose row it holds at that row less its offset, into zeros of
 * its rows made here (an Expand: the global zeros, a constant or an
 * Expand, are not read, and their slice dies); the others' updates are
 * masked to zeros and added at its row 0. Ids count against the whole
 * data (a padded table's gradient wraps negative ids by the model's
 * vocabulary before, grad_rules.c). Every row gets the updates of its ids
 * in their order, as on one rank. */
static sc_status masked_scatter(lz *z, const sc_node *sn, const sc_sharding *want,
                                const int32_t *lin, int32_t out_lid) {
  const sc_value *data = &z->g->values[sn->inputs[0]];
  int32_t ok = -1, safe = -1;
  sc_status st = masked_rows(z, sn, data, want, lin[1], data->dims[0], false, &ok, &safe);
  if (st != SC_OK) return st;
  static const double zero_bytes = 0; /* 0 in any float dtype of up to 8 bytes */
  sc_sharding rep;
  sc_sharding_replicated(&rep, 0);
  const sc_value uv = z->L->values[lin[2]], ov = z->L->values[out_lid]; /* copies: values move */
  int32_t zero = make_const(z, "zero", uv.dtype, 0, NULL, &zero_bytes, false, &rep);
  int32_t dz = ov.dtype == uv.dtype ? zero  /* the data's zero, one constant when they agree */
                                    : make_const(z, "zero", ov.dtype, 0, NULL, &zero_bytes, false,
                                                 &rep);
  int32_t shape = const_i64(z, "shape", 1, (int64_t[]){ov.rank}, ov.dims);
  const sc_sharding *us = sc_graph_sharding(z->L, lin[2]);
  sc_sharding ushard;
  if (us) ushard = *us;
  else sc_sharding_replicated(&ushard, uv.rank);
  int32_t upd = new_value(z, "masked_updates", uv.dtype, uv.rank, uv.dims, &ushard);
  int32_t zeros = new_value(z, "zeros", ov.dtype, ov.rank, ov.dims, &want[0]);
  if (zero < 0 || dz < 0 || shape < 0) return z->d->status;
  if (upd < 0 || zeros < 0) return lerr(z);
  if (emit(z, SC_OP_WHERE, (int32_t[]){ok, lin[2], zero}, 3, &upd, 1) < 0 ||
      emit(z, SC_OP_EXPAND, (int32_t[]){dz, shape}, 2, &zeros, 1) < 0)
    return z->d->status;
  int32_t nid = emit(z, SC_OP_SCATTER_ND, (int32_t[]){zeros, safe, upd}, 3, &out_lid, 1);
  sc_attr *red = nid < 0 ? NULL : sc_node_add_attr(z->L, nid, "reduction", SC_ATTR_STRING);
  if (!red) return nid < 0 ? z->d->status : nomem(z);
  red->s = "add";
  return SC_OK;
}

/* Sequence parallelism's split of value v under sharding s into *r: dim 1
 * of a [B, S, ...] value split over tp, innermost: nested inside cp's
 * zig-zag split when that splits it already (each cp rank's S/cp tokens
 * split again over tp, S/(cp·tp) a rank; docs/context-parallel.md,
 * "Composition"). False when tp splits a dim of s already, dim 1 has
 * another split or a stride, or tp does not divide it. */
static bool sequence_split(const lz *z, const sc_value *v, const sc_sharding *s,
                           sc_sharding *r) {
  int32_t ax = z->p->tp_axis;
  if (ax < 0 || v->rank < 3 || (sc_sharding_dim_axes(s) & (1u << ax)) ||
      sc_sharding_stride(s, 1) > 1 ||
      (s->n_dim_axes[1] && (s->n_dim_axes[1] > 1 || s->dim_axes[1][0] != z->p->cp_axis)))
    return false;
  *r = *s;
  sc_sharding_split(r, 1, ax);
  return sc_shard_divides(r, z->m, 1, v->dims[1]);
}

/* Whether s is t but for dim 1, split over a prefix of t's axes there
 * (no pending sum): a value whose tokens t splits further, by slicing. */
static bool fewer_tokens(const sc_sharding *s, const sc_sharding *t) {
  if (s->rank != t->rank || s->partial || t->partial || !is_prefix(s, t, 1) ||
      sc_sharding_stride(s, 1) > 1)
    return false;
  for (int32_t d = 0; d < s->rank; d++)
    if (d != 1 && (s->n_dim_axes[d] != t->n_dim_axes[d] || !is_prefix(s, t, d)))
      return false;
  return true;
}

/* --sequence-parallel: before all-reducing a tp pending sum for a node,
 * try the node with that input reduce-scattered over the sequence (dim 1
 * of a [B,S,...] value, inside cp's split: sequence_split) instead: when
 * the op's rule accepts the split (LayerNorm, elementwise ops), the node
 * runs on 1/tp of the sequence and the next column-parallel product's
 * Reshape (or the product itself) all-gathers it over tp (Megatron's
 * sequence parallelism: reduce-scatter + all-gather in place of
 * all-reduce). */
static void seq_parallel(lz *z, sc_shard_ctx *c) {
  const sc_node *n = c->n;
  int32_t ax = z->p->tp_axis;
  sc_axes bit = 1u << ax;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    int32_t gid = n->inputs[i];
    if (gid < 0 || !(c->in[i].partial & bit) || (c->want[i].partial & bit)) continue;
    sc_sharding try;
    if (!sequence_split(z, &z->g->values[gid], &c->want[i], &try)) continue;
    int32_t ni = n->n_inputs, no = n->n_outputs;
    sc_sharding *buf = sc_calloc((size_t)(2 * ni + no), sizeof *buf);
    if (!buf) return;
    sc_sharding *in2 = buf, *want2 = buf + ni, *out2 = buf + 2 * ni;
    memcpy(in2, c->in, (size_t)ni * sizeof *in2);
    in2[i] = try;
    /* the same tokens held on fewer ranks (a residual split over cp
     * alone, or whole): offered the split too, a comm-free slice */
    for (int32_t j = 0; j < ni; j++)
      if (j != i && n->inputs[j] >= 0 && fewer_tokens(&c->want[j], &try)) in2[j] = try;
    memcpy(want2, in2, (size_t)ni * sizeof *want2);
    for (int32_t j = 0; j < no; j++) {
      const sc_value *o = n->outputs[j] >= 0 ? &z->g->values[n->outputs[j]] : NULL;
      sc_sharding_replicated(&out2[j], o && o->rank > 0 ? o->rank : 0);
    }
    sc_shard_ctx c2 = {z->g, n, z->m, in2, want2, out2, SC_SHARD_EXPAND_NONE};
    if (sc_shard_rule(n->op)(&c2) == SC_OK && c2.expand == SC_SHARD_EXPAND_NONE &&
        sc_sharding_equal(&want2[i], &try)) {
      memcpy(c->want, want2, (size_t)ni * sizeof *want2);
      memcpy(c->out, out2, (size_t)no * sizeof *out2);
    }
    sc_free(buf);
    return;
  }
}

/* A node where a split ends: an input arrives split over some axes but
 * the rule (or its checked fallback, shard_rules.c) wants it less split,
 * and no output leaves split or partial over any of the axes it loses, so
 * every rank of those axes gathers it and computes the whole node (an
 * output may stay split over others: a head reshape that tp's split cannot
 * cross, on a batch split over dp, is computed whole over tp), but for
 * sequence parallelism's gathers. Recorded as a fallback (partition.h) for
 * `shardc plan` to list. */
static sc_status note_rule_fallback(lz *z, const sc_node *n, const sc_sharding *in,
                                    const sc_sharding *want, const sc_sharding *out) {
  sc_axes kept = 0; /* the axes some output is split or partial over */
  for (int32_t j = 0; j < n->n_outputs; j++)
    if (n->outputs[j] >= 0) kept |= sc_sharding_dim_axes(&out[j]) | out[j].partial;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    sc_axes had = n->inputs[i] >= 0 ? sc_sharding_dim_axes(&in[i]) : 0;
    sc_axes lost = had & ~sc_sharding_dim_axes(&want[i]) & ~kept;
    /* sequence parallelism's all-gather of the tokens over tp (before a
     * column-parallel product, or in the backward of a reduce-scatter):
     * the plan's, the work after it split again */
    if (lost && gathers_sequence(z, n->inputs[i], &want[i])) lost &= ~(1u << z->p->tp_axis);
    if (!lost) continue;
    char axes[128] = "";
    size_t pos = 0;
    for (int32_t a = 0; a < z->m->n_axes; a++) {
      if (!(lost & (1u << a))) continue;
      int w = snprintf(axes + pos, sizeof axes - pos, "%s%s", pos ? "," : "", z->m->axes[a].name);
      if (w < 0 || (size_t)w >= sizeof axes - pos) break;
      pos += (size_t)w;
    }
    if (sc_partition_note_fallback(z->p, n->name, sc_op_name(n->op),
                                   "input '%s' split over %s is gathered: every rank computes "
                                   "the node whole", z->g->values[n->inputs[i]].name,
                                   axes) != SC_OK)
      return nomem(z);
    return SC_OK;
  }
  return SC_OK;
}

/* Drops every gathered copy of the stored parameters: the memo of each
 * keeps only its first entry, the input itself (storage axis, above). */
static void forget_gathered(lz *z) {
  for (int32_t gid = 0; gid < z->g->n_values; gid++) {
    if (!z->stored[gid] || z->kept[gid]) continue;
    int32_t i = z->head[gid];
    while (i >= 0 && z->memos[i].next >= 0) i = z->memos[i].next;
    z->head[gid] = i;
  }
}

/* s without its storage group: the fsdp axis and the axes after it on its
 * dim (ep for a parameter outside the experts: train_seed.c). */
static void without_storage(const lz *z, sc_sharding *s) {
  int32_t ax = z->p->fsdp_axis;
  for (int32_t d = 0; d < s->rank; d++)
    for (int32_t k = 0; k < s->n_dim_axes[d]; k++)
      if (s->dim_axes[d][k] == ax) {
        s->n_dim_axes[d] = (uint8_t)k;
        if (k == 0) s->stride[d] = 0;
        break;
      }
}

/* A reduction of local x over `axis`, keepdims (ReduceMax or ReduceSum),
 * then an AllReduce of the [.., 1] result over each axis splitting that dim
 * in s (op "max" or "sum"). */
static int32_t group_reduce(lz *z, sc_op op, int32_t x, int32_t axis, const sc_sharding *s,
                            const char *red) {
  sc_value xv = z->L->values[x]; /* a copy: values may move */
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, xv.dims, sizeof dims);
  dims[axis] = 1;
  sc_sharding r = *s;
  sc_shard_unsplit_dim(&r, axis);
  int32_t y = new_value(z, xv.name, xv.dtype, xv.rank, dims, &r);
  int32_t nid = y < 0 ? -1 : emit(z, op, &x, 1, &y, 1);
  if (nid < 0) return y < 0 ? (lerr(z), -1) : -1;
  if (attr_int(z, nid, "keepdims", 1) != SC_OK) return -1;
  sc_attr *a = sc_node_add_attr(z->L, nid, "axes", SC_ATTR_INTS); /* moves earlier ones */
  int64_t *ax = a ? sc_arena_array(&z->L->arena, 1, sizeof *ax) : NULL;
  if (!ax) return nomem(z), -1;
  ax[0] = axis;
  a->ints = ax;
  a->n = 1;
  for (int32_t k = 0; k < s->n_dim_axes[axis]; k++) {
    int32_t w = new_value(z, xv.name, xv.dtype, xv.rank, dims, &r);
    int32_t cn = w < 0 ? -1 : emit(z, SC_OP_ALL_REDUCE, &y, 1, &w, 1);
    if (cn < 0 || attr_axes(z, cn, s->dim_axes[axis][k]) != SC_OK) return w < 0 ? (lerr(z), -1) : -1;
    sc_attr *o = sc_node_add_attr(z->L, cn, "op", SC_ATTR_STRING);
    if (!o) return nomem(z), -1;
    o->s = red;
    y = w;
  }
  return y;
}

/* SC_SHARD_EXPAND_GROUP_REDUCE (shard_rule.h): the local ReduceMax /
 * ReduceMin y of gn's input (sharding s) joined over every axis splitting a
 * reduced dim, an AllReduce "max" / "min" each, into out. */
static sc_status group_extremum(lz *z, const sc_node *gn, const sc_sharding *s, int32_t y,
                                int32_t out) {
  bool red[SC_MAX_RANK], noop, keepdims;
  if (sc_reduce_axes(z->g, gn, red, &noop, &keepdims) != SC_OK)
    return sc_diag_set(z->d, SC_ERR_INVALID, gn->name, sc_op_name(gn->op), "its axes");
  int32_t axes[SC_MESH_MAX_AXES], n = 0;
  for (int32_t d = 0; d < s->rank; d++)
    for (int32_t k = 0; red[d] && k < s->n_dim_axes[d] && n < SC_MESH_MAX_AXES; k++)
      axes[n++] = s->dim_axes[d][k];
  const sc_value yv = z->L->values[y]; /* a copy: values may move */
  const sc_sharding r = *sc_graph_sharding(z->L, y);
  for (int32_t k = 0; k < n; k++) {
    int32_t w = k == n - 1 ? out : new_value(z, yv.name, yv.dtype, yv.rank, yv.dims, &r);
    int32_t cn = w < 0 ? -1 : emit(z, SC_OP_ALL_REDUCE, &y, 1, &w, 1);
    if (cn < 0 || attr_axes(z, cn, axes[k]) != SC_OK) return w < 0 ? lerr(z) : z->d->status;
    sc_attr *o = sc_node_add_attr(z->L, cn, "op", SC_ATTR_STRING);
    if (!o) return nomem(z);
    o->s = gn->op == SC_OP_REDUCE_MIN ? "min" : "max";
    y = w;
  }
  if (n == 0 && emit(z, SC_OP_IDENTITY, &y, 1, &out, 1) < 0) return z->d->status;
  return SC_OK;
}

/* SC_SHARD_EXPAND_SCALED_MEAN (shard_rule.h): the local ReduceMean y of
 * gn's input (sharding s) times 1/k, k the product of the sizes of the axes
 * splitting a reduced dim, into out (pending over those axes). */
static sc_status scaled_mean(lz *z, const sc_node *gn, const sc_sharding *s, int32_t y,
                             int32_t out) {
  bool red[SC_MAX_RANK], noop, keepdims;
  if (sc_reduce_axes(z->g, gn, red, &noop, &keepdims) != SC_OK)
    return sc_diag_set(z->d, SC_ERR_INVALID, gn->name, sc_op_name(gn->op), "its axes");
  int64_t k = 1;
  for (int32_t d = 0; d < s->rank; d++)
    for (int32_t a = 0; red[d] && a < s->n_dim_axes[d]; a++)
      k *= z->m->axes[s->dim_axes[d][a]].size;
  sc_dtype t = z->L->values[y].dtype;
  float f32 = (float)(1.0 / (double)k);
  double f64 = 1.0 / (double)k;
  int32_t c = sc_graph_new_value(z->L, "mean_scale");
  if (c < 0 || sc_value_set_data(z->L, c, t, 0, NULL, t == SC_DTYPE_F64 ? (void *)&f64 : &f32,
                                 t == SC_DTYPE_F64 ? sizeof f64 : sizeof f32, true) != SC_OK)
    return lerr(z);
  sc_sharding r;
  sc_sharding_replicated(&r, 0);
  if (sc_graph_set_sharding(z->L, c, &r) != SC_OK) return lerr(z);
  return emit(z, SC_OP_MUL, (int32_t[]){y, c}, 2, &out, 1) < 0 ? z->d->status : SC_OK;
}

/* SC_SHARD_EXPAND_SPLIT_SOFTMAX (shard_rule.h): x's pieces normalised over
 * the group: m = max, z = x - m, e = exp z, s = sum e; Softmax e / s,
 * LogSoftmax z - log s, into out. */
static sc_status split_softmax(lz *z, const sc_node *gn, const sc_sharding *s, int32_t x,
                               int32_t out) {
  sc_value xv = z->L->values[x];
  int32_t axis = (int32_t)sc_attr_int(z->g, gn, "axis", -1);
  if (axis < 0) axis += xv.rank;
  int32_t m = group_reduce(z, SC_OP_REDUCE_MAX, x, axis, s, "max");
  if (m < 0) return z->d->status ? z->d->status : SC_ERR_INVALID;
  int32_t d = new_value(z, xv.name, xv.dtype, xv.rank, xv.dims, s);
  int32_t e = new_value(z, xv.name, xv.dtype, xv.rank, xv.dims, s);
  if (d < 0 || e < 0 || emit(z, SC_OP_SUB, (int32_t[]){x, m}, 2, &d, 1) < 0 ||
      emit(z, SC_OP_EXP, &d, 1, &e, 1) < 0)
    return d < 0 || e < 0 ? lerr(z) : z->d->status;
  int32_t sum = group_reduce(z, SC_OP_REDUCE_SUM, e, axis, s, "sum");
  if (sum < 0) return z->d->status ? z->d->status : SC_ERR_INVALID;
  if (gn->op == SC_OP_SOFTMAX)
    return emit(z, SC_OP_DIV, (int32_t[]){e, sum}, 2, &out, 1) < 0 ? z->d->status : SC_OK;
  sc_value sv = z->L->values[sum];
  sc_sharding r = *sc_graph_sharding(z->L, sum);
  int32_t l = new_value(z, sv.name, sv.dtype, sv.rank, sv.dims, &r);
  if (l < 0 || emit(z, SC_OP_LOG, &sum, 1, &l, 1) < 0) return l < 0 ? lerr(z) : z->d->status;
  return emit(z, SC_OP_SUB, (int32_t[]){d, l}, 2, &out, 1) < 0 ? z->d->status : SC_OK;
}

/* SC_SHARD_EXPAND_RING_ATTENTION (shard_rule.h): the ring of ring.c on
 * the local q, k, v, its results copied into out[0] (o) and out[1] (lse);
 * for FusedAttentionGrad the backward's ring on the local q, k, v, o,
 * lse, d_o into out[0..2] (dq, dk, dv), its tags after the forward's
 * (tag_base 2n: the forward's end at 2n - 1).
 * Each step's halves (and, for a padded sequence, `cp_keys`, its key
 * masks) depend on the rank: sharded constants over cp whose global
 * contents hold every rank's piece in rank order. */
static sc_status ring_attention(lz *z, const sc_node *gn, const int32_t *lin,
                                const int32_t *lout) {
  int32_t cp = z->p->cp_axis;
  int64_t n = z->m->axes[cp].size, c = z->L->values[lin[0]].dims[2] / 2;
  int32_t *rows = sc_arena_array(&z->p->arena, (size_t)n, sizeof *rows);
  int32_t *place = sc_arena_array(&z->p->arena, (size_t)n, sizeof *place);
  int64_t *rg = sc_arena_array(&z->p->arena, (size_t)(n * c * (n - 1) + 1), sizeof *rg);
  int64_t *pg = sc_arena_array(&z->p->arena, (size_t)(n * 2 * c * (n - 1) + 1), sizeof *pg);
  if (!rows || !place || !rg || !pg) return nomem(z);
  sc_sharding s;
  sc_sharding_replicated(&s, 1);
  sc_sharding_split(&s, 0, cp);
  for (int32_t i = 1; i < n; i++) {
    int64_t *rw = rg + (i - 1) * n * c, *pl = pg + (i - 1) * n * 2 * c;
    for (int64_t r = 0; r < n; r++) {
      int64_t h = sc_cp_ring_half(r, sc_cp_ring_source(n, r, i));
      for (int64_t j = 0; j < c; j++) rw[r * c + j] = h * c + j;
      for (int64_t j = 0; j < 2 * c; j++) pl[r * 2 * c + j] = h ? (j + c) % (2 * c) : j;
    }
    char base[512];
    int64_t nr = n * c, np = n * 2 * c;
    snprintf(base, sizeof base, "%s/ring/rows_%d", gn->name, (int)i);
    rows[i] = make_const(z, base, SC_DTYPE_I64, 1, &nr, rw, false, &s);
    snprintf(base, sizeof base, "%s/ring/place_%d", gn->name, (int)i);
    place[i] = rows[i] < 0 ? -1 : make_const(z, base, SC_DTYPE_I64, 1, &np, pl, false, &s);
    if (place[i] < 0) return z->d->status ? z->d->status : SC_ERR_INVALID;
  }
  /* a padded sequence (cp.c: n contiguous blocks of `rows` rows, the
   * tokens first): each step's mask [n, 1, rows, rows] split over cp,
   * -1e30 on the keys of padding rows of the block in hand (rank s's) */
  int64_t keys = sc_attr_int(z->g, gn, "cp_keys", 0), nr = z->L->values[lin[0]].dims[2];
  int32_t *mask = NULL;
  if (keys > 0 && keys < n * nr) {
    sc_sharding ms;
    sc_sharding_replicated(&ms, 4);
    sc_sharding_split(&ms, 0, cp);
    if (!(mask = sc_arena_array(&z->p->arena, (size_t)n, sizeof *mask))) return nomem(z);
    for (int32_t i = 0; i < n; i++) {
      int64_t md[4] = {n, 1, nr, nr};
      float *mg = sc_arena_array(&z->p->arena, (size_t)(n * nr * nr), sizeof *mg);
      if (!mg) return nomem(z);
      for (int64_t r = 0; r < n; r++) {
        int64_t src = sc_cp_ring_source(n, r, i);
        for (int64_t e = 0; e < nr * nr; e++)
          mg[r * nr * nr + e] = src * nr + e % nr >= keys ? -1e30f : 0;
      }
      char base[512];
      snprintf(base, sizeof base, "%s/ring/key_mask_%d", gn->name, (int)i);
      mask[i] = make_const(z, base, SC_DTYPE_F32, 4, md, mg, false, &ms);
      if (mask[i] < 0) return z->d->status ? z->d->status : SC_ERR_INVALID;
    }
  }
  sc_cp_ring_args a = {.name = gn->name, .axis = z->m->axes[cp].name, .n = (int32_t)n,
                       .key_mask = mask,
                       .q = lin[0], .k = lin[1], .v = lin[2],
                       .scale = sc_attr_float(z->g, gn, "scale", 1.0),
                       .causal = sc_attr_int(z->g, gn, "causal", 0) != 0, .half_rows = rows,
                       .half_place = place, .tag_base = 0};
  bool grad = gn->op == SC_OP_FUSED_ATTENTION_GRAD;
  int32_t first = z->L->n_nodes, res[3];
  if (grad) a.tag_base = (int32_t)(2 * n);
  sc_status st = grad ? sc_partition_ring_attention_grad(z->L, &a, lin[3], lin[4], lin[5], &res[0],
                                                         &res[1], &res[2])
                      : sc_partition_ring_attention(z->L, &a, &res[0], &res[1]);
  if (st != SC_OK) return lerr(z);
  for (int32_t i = first; i < z->L->n_nodes; i++)
    if ((st = attr_int(z, i, "__stage", z->stage)) != SC_OK) return st;
  for (int32_t j = 0; j < (grad ? 3 : 2); j++)
    if (emit(z, SC_OP_IDENTITY, &res[j], 1, &lout[j], 1) < 0) return z->d->status;
  return SC_OK;
}

/* Under sequence parallelism, the sharding a tp pending sum s of value v
 * is reduced to where it is made: reduce-scattered onto the sequence
 * (dim 1 split over tp, inside cp's split: sequence_split), as the
 * forward's; false when that does not apply
 * (*r then s without the pending axis: an all-reduce). Not the value that
 * context parallelism's zig-zag permutation reads (the token embedding,
 * pending over tp when vocabulary-parallel): the permutation reorders
 * the whole sequence and would gather it back over tp to run whole; all-
 * reduced (the same bytes as the reduce-scatter and that gather), each
 * rank takes its cp rows of it and sequence parallelism its tp piece of
 * those, both comm-free slices (the permuted value's constraint, cp.c). */
static bool cut_target(const lz *z, const sc_value *v, int32_t ax, const sc_sharding *s,
                       sc_sharding *r) {
  *r = *s;
  r->partial &= ~(1u << ax);
  sc_sharding t;
  if (!z->p->sequence_parallel || ax != z->p->tp_axis ||
      (z->p->cp_seed >= 0 && v == &z->g->values[z->p->cp_seed]) ||
      !sequence_split(z, v, r, &t))
    return false;
  *r = t;
  return true;
}

/* Whether a pending sum of v over axis ax, made by a node feeding a
 * gradient (grad), may not be reduced where it is made: a gradient's sum
 * over a data axis (any but tp) in a low-precision float, unless the plan
 * reduces in the low precision (p->reduce_low). It is then reduced where
 * a reader needs it whole: after the Cast that widens a GEMM weight's
 * gradient back to the f32 weight's, "grad:P" (FSDP's reduce_dtype =
 * fp32, Megatron's gradients accumulated and reduced in fp32). */
static bool low_gradient_sum(const lz *z, const sc_value *v, int32_t ax, bool grad) {
  return grad && !z->p->reduce_low && ax != z->p->tp_axis &&
         (v->dtype == SC_DTYPE_BF16 || v->dtype == SC_DTYPE_F16);
}

/* The pending outputs of a node in the cut's graph: a pending axis flows
 * from the inputs that bring it pending and keep it (in and want partial),
 * or begins here; reducing it here would cost one all-reduce of it (never,
 * for low_gradient_sum). */
static void note_pending(lz *z, const sc_node *n, bool grad, const sc_sharding *in,
                         const sc_sharding *want, const sc_sharding *out) {
  int32_t na = z->m->n_axes;
  for (int32_t j = 0; j < n->n_outputs; j++) {
    int32_t gid = n->outputs[j];
    if (gid < 0) continue;
    for (int32_t ax = 0; ax < na; ax++) {
      size_t k = (size_t)gid * na + ax;
      z->pnode[k] = -1;
      if (!(out[j].partial & (1u << ax))) continue;
      const sc_value *v = &z->g->values[gid];
      int64_t loc[SC_MAX_RANK];
      if (local_dims(z, v, &out[j], loc) != SC_OK) return; /* the outputs' step reports it */
      double b = (double)sc_dtype_size(v->dtype);
      for (int32_t d = 0; d < v->rank; d++) b *= (double)loc[d];
      bool brought = false;
      for (int32_t i = 0; i < n->n_inputs; i++)
        brought |= n->inputs[i] >= 0 && (in[i].partial & want[i].partial & (1u << ax)) &&
                   z->pnode[(size_t)n->inputs[i] * na + ax] >= 0;
      /* a tie keeps the reduction where it was (+1); a reduce-scatter onto
       * the sequence moves M, an all-reduce 2M */
      sc_sharding r;
      double per = cut_target(z, v, ax, &out[j], &r) ? 1.0 : 2.0;
      double cost = low_gradient_sum(z, v, ax, grad)
                        ? SC_CUT_INF
                        : runs_per_step(z) * (per * b + SC_CUT_LATENCY_BYTES) + 1.0;
      int32_t node = sc_cut_node(z->cg, cost, !brought);
      z->pnode[k] = node;
      for (int32_t i = 0; brought && i < n->n_inputs; i++)
        if (n->inputs[i] >= 0 && (in[i].partial & want[i].partial & (1u << ax)))
          sc_cut_flow(z->cg, z->pnode[(size_t)n->inputs[i] * na + ax], node);
    }
  }
}

static sc_status localize_node(lz *z, int32_t nid) {
  const sc_node *n = &z->g->nodes[nid];
  z->stage = z->p->node_stage ? z->p->node_stage[nid] : 0;
  uint8_t region = z->region ? z->region[nid] & (REGION_LOSS | REGION_GRAD) : 0;
  z->at_every_run = z->region && (z->region[nid] & REGION_RUN);
  if (region == REGION_GRAD && !z->in_backward) {
    z->in_backward = true;
    if (z->p->zero_stage == 3 && !z->p->keep_after_forward) forget_gathered(z);
  }
  z->origin = n->name ? n->name : sc_op_name(n->op);
  int32_t ni = n->n_inputs, no = n->n_outputs;
  sc_sharding *in = sc_calloc((size_t)(2 * ni + no + 1), sizeof *in);
  int32_t *lin = sc_calloc((size_t)(ni + no + 1), sizeof *lin);
  if (!in || !lin) {
    sc_free(in);
    sc_free(lin);
    return nomem(z);
  }
  sc_sharding *want = in + ni, *out = in + 2 * ni;
  int32_t *lout = lin + ni;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < ni; i++) {
    int32_t gid = n->inputs[i];
    if (gid < 0) {
      sc_sharding_replicated(&in[i], 0);
      continue;
    }
    const sc_value *v = &z->g->values[gid];
    if (z->lid[gid] >= 0 || !is_const(v)) {
      in[i] = z->cur[gid];
    } else {
      const sc_sharding *seed = sc_graph_sharding(z->g, gid);
      if (seed) in[i] = *seed;
      else sc_sharding_replicated(&in[i], v->rank);
    }
    if (region && z->stored[gid] && !z->cast_first[nid])
      without_storage(z, &in[i]); /* used whole */
    want[i] = in[i];
  }
  for (int32_t j = 0; j < no; j++) {
    const sc_value *v = n->outputs[j] >= 0 ? &z->g->values[n->outputs[j]] : NULL;
    sc_sharding_replicated(&out[j], v && v->rank > 0 ? v->rank : 0);
  }
  sc_shard_ctx c = {z->g, n, z->m, in, want, out, SC_SHARD_EXPAND_NONE};
  st = sc_shard_rule(n->op)(&c);
  if (st != SC_OK) {
    *z->d = z->g->diag;
    goto done;
  }
  if (z->p->sequence_parallel) seq_parallel(z, &c);
  if ((st = note_rule_fallback(z, n, in, want, out)) != SC_OK) goto done;
  note_pending(z, n, (region & REGION_GRAD) != 0, in, want, out);
  /* inputs */
  for (int32_t i = 0; i < ni && st == SC_OK; i++) {
    int32_t gid = n->inputs[i];
    if (gid < 0) {
      lin[i] = -1;
      continue;
    }
    lin[i] = reshard(z, gid, &want[i]);
    if (lin[i] < 0) {
      st = z->d->status != SC_OK ? z->d->status : SC_ERR_INVALID;
      break;
    }
    /* once reduced, stays reduced: a pending sum summed for this reader
     * (its dims as they were) is what later readers get, so that a
     * decomposed norm's second use of it (x · rsqrt(mean(x²)), Llama's
     * RMSNorm) does not reduce it again */
    const sc_sharding *now = &z->cur[gid];
    bool same_dims = now->rank == want[i].rank;
    for (int32_t d = 0; same_dims && d < now->rank; d++)
      same_dims = now->n_dim_axes[d] == want[i].n_dim_axes[d] &&
                  sc_sharding_stride(now, d) == sc_sharding_stride(&want[i], d) &&
                  memcmp(now->dim_axes[d], want[i].dim_axes[d],
                         (size_t)now->n_dim_axes[d] * sizeof now->dim_axes[d][0]) == 0;
    if (same_dims && (now->partial & ~want[i].partial) && !(want[i].partial & ~now->partial) &&
        !is_const(&z->g->values[gid]) && !per_rank_update_sum(z, gid)) {
      z->cur[gid] = want[i];
      z->lid[gid] = lin[i];
    }
  }
  if (st != SC_OK) goto done;
  /* outputs */
  for (int32_t j = 0; j < no && st == SC_OK; j++) {
    int32_t gid = n->outputs[j];
    if (gid < 0) {
      lout[j] = -1;
      continue;
    }
    const sc_value *v = &z->g->values[gid];
    int64_t loc[SC_MAX_RANK];
    if ((st = local_dims(z, v, &out[j], loc)) != SC_OK) break;
    sc_sharding leaves;
    output_sharding(z, gid, &leaves);
    bool rename = (v->flags & SC_VALUE_OUTPUT) && !sc_sharding_equal(&out[j], &leaves);
    char base[512];
    snprintf(base, sizeof base, "%s%s", v->name, rename ? ".local" : "");
    int32_t id = sc_graph_find_value(z->L, base) < 0 ? sc_graph_add_value(z->L, base)
                                                       : sc_graph_new_value(z->L, base);
    if (id < 0 || sc_value_set_shape(z->L, id, v->dtype, v->rank, loc) != SC_OK ||
        sc_graph_set_sharding(z->L, id, &out[j]) != SC_OK) {
      st = lerr(z);
      break;
    }
    lout[j] = id;
    z->cur[gid] = out[j];
    z->lid[gid] = id;
    if ((st = add_memo(z, gid, &out[j], id)) != SC_OK) break;
  }
  if (st != SC_OK) goto done;
  if (c.expand == SC_SHARD_EXPAND_MASKED_GATHER) {
    st = masked_gather(z, n, want, lin, lout[0]);
    goto outputs;
  }
  if (c.expand == SC_SHARD_EXPAND_MASKED_SCATTER) {
    st = masked_scatter(z, n, want, lin, lout[0]);
    goto outputs;
  }
  if (c.expand == SC_SHARD_EXPAND_SPLIT_SOFTMAX) {
    st = split_softmax(z, n, &want[0], lin[0], lout[0]);
    goto outputs;
  }
  if (c.expand == SC_SHARD_EXPAND_RING_ATTENTION) {
    st = ring_attention(z, n, lin, lout);
    goto outputs;
  }
  {
    /* a group reduction reduces its piece into y, then over the group; a
     * scaled mean takes its piece's mean into y, then scales it */
    int32_t y = lout[0], *res = lout;
    if (c.expand == SC_SHARD_EXPAND_GROUP_REDUCE || c.expand == SC_SHARD_EXPAND_SCALED_MEAN) {
      const sc_value ov = z->L->values[lout[0]]; /* a copy: values may move */
      if ((y = new_value(z, ov.name, ov.dtype, ov.rank, ov.dims, &out[0])) < 0) {
        st = lerr(z);
        goto done;
      }
      res = &y;
    }
    int32_t lnid = sc_graph_add_node(z->L, n->op, n->name, lin, ni, res, no);
    if (lnid < 0) {
      st = lerr(z);
      goto done;
    }
    for (int32_t a = 0; a < n->n_attrs; a++) {
      if (strcmp(n->attrs[a].name, "__stage") == 0) continue;
      sc_attr *at = sc_node_add_attr(z->L, lnid, n->attrs[a].name, n->attrs[a].kind);
      if (!at) {
        st = nomem(z);
        goto done;
      }
      *at = z->g->nodes[nid].attrs[a];
    }
    sc_attr *sa = sc_node_add_attr(z->L, lnid, "__stage", SC_ATTR_INT);
    if (!sa) {
      st = nomem(z);
      goto done;
    }
    sa->i = z->stage;
    if ((st = fix_shape_inputs(z, lnid)) != SC_OK) goto done;
    if (c.expand == SC_SHARD_EXPAND_GROUP_REDUCE)
      st = group_extremum(z, n, &want[0], y, lout[0]);
    if (c.expand == SC_SHARD_EXPAND_SCALED_MEAN) st = scaled_mean(z, n, &want[0], y, lout[0]);
  }
outputs:
  if (st != SC_OK) goto done;
  /* the cut: a pending sum reduced where it begins (the second walk) */
  for (int32_t j = 0; z->eager && j < no; j++) {
    int32_t gid = n->outputs[j];
    if (gid < 0) continue;
    sc_sharding r = z->cur[gid];
    for (int32_t ax = 0; ax < z->m->n_axes; ax++)
      if (z->eager[(size_t)gid * z->m->n_axes + ax] && (r.partial & (1u << ax))) {
        sc_sharding t;
        cut_target(z, &z->g->values[gid], ax, &r, &t);
        r = t;
      }
    if (r.partial == z->cur[gid].partial) continue;
    int32_t x = reshard(z, gid, &r);
    if (x < 0) {
      st = z->d->status != SC_OK ? z->d->status : SC_ERR_INVALID;
      goto done;
    }
    z->cur[gid] = r;
    z->lid[gid] = x;
  }
  /* constraints, then graph outputs: under their constraint or whole */
  for (int32_t j = 0; j < no; j++) {
    int32_t gid = n->outputs[j];
    if (gid < 0) continue;
    const sc_sharding *cs = constraint(z, gid);
    sc_sharding r;
    if (cs) r = *cs;
    else if (z->g->values[gid].flags & SC_VALUE_OUTPUT) sc_sharding_replicated(&r, z->g->values[gid].rank);
    else continue;
    if (sc_sharding_equal(&z->cur[gid], &r)) continue;
    int32_t x = reshard(z, gid, &r);
    if (x < 0) {
      st = z->d->status != SC_OK ? z->d->status : SC_ERR_INVALID;
      goto done;
    }
    if (cs) { /* the value is under its constraint from here on */
      z->cur[gid] = r;
      z->lid[gid] = x;
    }
  }
done:
  sc_free(in);
  sc_free(lin);
  return st;
}

/* The replicated local value of each graph output takes the output's name:
 * the value made by its reshard is renamed (names are looked up through the
 * index, so the rename goes through a fresh value when needed). */
static sc_status bind_outputs(lz *z) {
  for (int32_t i = 0; i < z->g->n_outputs; i++) {
    int32_t gid = z->g->outputs[i];
    const sc_value *gv = &z->g->values[gid];
    sc_sharding r;
    output_sharding(z, gid, &r);
    int32_t x = -1;
    if (is_const(gv)) x = reshard(z, gid, &r);
    else { /* any piece's value, an update piece's too (other_rank_update) */
      int32_t stage = z->stage;
      z->stage = -1;
      x = find_memo(z, gid, &r);
      z->stage = stage;
    }
    if (x < 0)
      return sc_diag_set(z->d, SC_ERR_INVALID, NULL, NULL,
                         "output '%s' has no local value under its sharding", gv->name);
    if (strcmp(z->L->values[x].name, gv->name) != 0) {
      /* an Identity gives the output its global name */
      int32_t y = sc_graph_add_value(z->L, gv->name);
      int64_t loc[SC_MAX_RANK];
      if (local_dims(z, gv, &r, loc) != SC_OK) return z->d->status;
      if (y < 0 || sc_value_set_shape(z->L, y, gv->dtype, gv->rank, loc) != SC_OK ||
          sc_graph_set_sharding(z->L, y, &r) != SC_OK)
        return lerr(z);
      int32_t p = z->L->values[x].producer;
      z->stage = 0;
      if (p >= 0) {
        const sc_attr *sa = sc_node_attr(&z->L->nodes[p], "__stage");
        if (sa) z->stage = (int32_t)sa->i;
      }
      z->origin = gv->name;
      if (emit(z, SC_OP_IDENTITY, &x, 1, &y, 1) < 0) return z->d->status;
      x = y;
    }
    if (sc_graph_add_output(z->L, x) != SC_OK) return lerr(z);
  }
  return SC_OK;
}

/* Whether node n is a Cast of a float to a narrower float (mixed
 * precision's Cast of a parameter to bf16 or f16). */
static bool narrowing_cast(const sc_graph *g, const sc_node *n) {
  if (n->op != SC_OP_CAST || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
      n->outputs[0] < 0)
    return false;
  sc_dtype a = g->values[n->inputs[0]].dtype, b = g->values[n->outputs[0]].dtype;
  return sc_dtype_is_float(a) && sc_dtype_is_float(b) && sc_dtype_size(b) < sc_dtype_size(a);
}

/* A stored parameter that the forward and the backward read only through
 * narrowing Casts (mixed precision's, train.c) is cast on its shard and
 * the low-precision shard is what is gathered (FSDP's MixedPrecision
 * param_dtype): half the bytes of gathering f32 then casting. Those Casts
 * are marked cast_first and their outputs stored: used whole, gathered
 * before each use, forgotten at the backward unless keep_after_forward. */
static sc_status casts_first(lz *z) {
  const sc_graph *g = z->g;
  z->cast_first = sc_calloc((size_t)g->n_nodes + 1, sizeof *z->cast_first);
  bool *other = sc_calloc((size_t)g->n_values + 1, sizeof *other); /* read otherwise */
  if (!z->cast_first || !other) {
    sc_free(other);
    return nomem(z);
  }
  for (int pass = 0; pass < 2; pass++)
    for (int32_t nid = 0; nid < g->n_nodes; nid++) {
      const sc_node *n = &g->nodes[nid];
      if ((n->flags & SC_NODE_DEAD) || !(z->region[nid] & (REGION_LOSS | REGION_GRAD))) continue;
      bool cast = narrowing_cast(g, n);
      for (int32_t i = 0; i < n->n_inputs; i++) {
        int32_t v = n->inputs[i];
        if (v < 0 || !z->stored[v] || g->values[v].producer >= 0) continue;
        if (pass == 0 && !cast) other[v] = true;
        if (pass == 1 && cast && !other[v]) {
          z->cast_first[nid] = true;
          z->stored[n->outputs[0]] = true;
          z->kept[n->outputs[0]] = z->kept[v];
        }
      }
    }
  sc_free(other);
  return SC_OK;
}

/* Training: the regions of the nodes and the stored parameters (storage
 * axis, above). The node order is topological, so one backward sweep marks
 * what feeds the loss and what feeds a gradient. */
static sc_status training_regions(lz *z) {
  const sc_graph *g = z->g;
  size_t nv = (size_t)g->n_values + 1;
  z->stored = sc_calloc(nv, sizeof *z->stored);
  z->kept = sc_calloc(nv, sizeof *z->kept);
  z->region = sc_calloc((size_t)g->n_nodes + 1, sizeof *z->region);
  uint8_t *need = sc_calloc(nv, 1);
  if (!z->stored || !z->kept || !z->region || !need) {
    sc_free(need);
    return nomem(z);
  }
  sc_stats stats = {0};
  bool blocks = z->p->zero_stage == 3 && !z->p->keep_after_forward;
  if (blocks && sc_stats_begin(z->g, &stats) != SC_OK) {
    sc_free(need);
    sc_stats_free(&stats);
    *z->d = z->g->diag;
    return z->d->status;
  }
  int32_t ax = z->p->fsdp_axis;
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!v->name) continue;
    if (strcmp(v->name, "loss") == 0 && (v->flags & SC_VALUE_OUTPUT))
      need[i] |= REGION_LOSS | REGION_RUN;
    if (strncmp(v->name, "new:accum:", 10) == 0 && (v->flags & SC_VALUE_OUTPUT))
      need[i] |= REGION_RUN;
    if (strncmp(v->name, "grad:", 5) == 0 && constraint(z, i)) need[i] |= REGION_GRAD;
    const sc_sharding *s = sc_graph_sharding(g, i);
    /* the parameter lookup scans the parameters: only for split inputs */
    if (ax < 0 || !(v->flags & SC_VALUE_INPUT) || !s || !(sc_sharding_dim_axes(s) & (1u << ax)))
      continue;
    const char *param = sc_partition_param_of(z->p, v->name);
    z->stored[i] = param && strcmp(param, v->name) == 0;
    z->kept[i] = z->stored[i] && stats.block_key &&
                 sc_stats_block_of_name(stats.block_key, v->name) < 0;
  }
  sc_stats_free(&stats);
  for (int32_t nid = g->n_nodes - 1; nid >= 0; nid--) {
    const sc_node *n = &g->nodes[nid];
    if (n->flags & SC_NODE_DEAD) continue;
    uint8_t r = 0;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) r |= need[n->outputs[j]];
    z->region[nid] = r;
    for (int32_t i = 0; r && i < n->n_inputs; i++)
      if (n->inputs[i] >= 0) need[n->inputs[i]] |= r;
  }
  sc_free(need);
  return casts_first(z);
}

static int cmp_source(const void *a, const void *b) {
  return strcmp(((const sc_shard_source *)a)->name, ((const sc_shard_source *)b)->name);
}

static void free_walk(lz *z) {
  sc_free(z->cur);
  sc_free(z->lid);
  sc_free(z->head);
  sc_free(z->memos);
  sc_free(z->src);
  sc_free(z->stored);
  sc_free(z->cast_first);
  sc_free(z->kept);
  sc_free(z->region);
  sc_cut_destroy(z->cg);
  sc_free(z->pnode);
}

/* The minimum cut of this walk's pending sums (cut.c): cut[(value, axis)]
 * for those to reduce where they are made; their count. Out of memory: no
 * cut (the lazy walk stands). */
static int32_t choose_cut(const lz *z, bool *cut) {
  int32_t nn = 0, n = 0;
  bool *at = sc_calloc((size_t)sc_cut_count(z->cg) + 1, sizeof *at);
  if (!at || sc_cut_solve(z->cg, at, &nn) != SC_OK) {
    sc_free(at);
    return 0;
  }
  size_t nk = (size_t)z->g->n_values * (size_t)z->m->n_axes;
  for (size_t k = 0; k < nk; k++)
    if (z->pnode[k] >= 0 && at[z->pnode[k]]) {
      cut[k] = true;
      n++;
    }
  sc_free(at);
  return n;
}

/* One walk over the global graph (file comment); eager: the cut to make,
 * or NULL; cut (when not NULL): the cut this walk's reductions call for,
 * *n_cut its size. */
static sc_status walk(sc_partition *p, sc_diag *d, const bool *eager, bool *cut,
                      int32_t *n_cut) {
  sc_graph *g = p->global;
  lz z;
  memset(&z, 0, sizeof z);
  z.p = p;
  z.g = g;
  z.m = &p->mesh;
  z.d = d;
  z.eager = eager;
  p->n_fallbacks = p->n_seed_fallbacks; /* a second localize records its own */
  int32_t nv = g->n_values;
  size_t nk = (size_t)nv * (size_t)(p->mesh.n_axes > 0 ? p->mesh.n_axes : 1) + 1;
  z.cur = sc_calloc((size_t)nv + 1, sizeof *z.cur);
  z.lid = sc_malloc(((size_t)nv + 1) * sizeof *z.lid);
  z.head = sc_malloc(((size_t)nv + 1) * sizeof *z.head);
  z.pnode = sc_malloc(nk * sizeof *z.pnode);
  z.cg = sc_cut_create();
  sc_graph *L = sc_graph_create(g->name);
  sc_status st = SC_OK;
  if (!z.cur || !z.lid || !z.head || !z.pnode || !z.cg || !L) {
    st = nomem(&z);
    goto fail;
  }
  for (size_t k = 0; k < nk; k++) z.pnode[k] = -1;
  L->opset = g->opset;
  z.L = L;
  for (int32_t i = 0; i < nv; i++) z.lid[i] = z.head[i] = -1;
  if (p->training && (st = training_regions(&z)) != SC_OK) goto fail;
  if (sc_graph_attach_mesh(L, &p->mesh) != SC_OK) {
    st = lerr(&z);
    goto fail;
  }
  sc_graph_mark_local_shapes(L);
  /* graph inputs under their seeds */
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t gid = g->inputs[i];
    const sc_value *v = &g->values[gid];
    const sc_sharding *seed = sc_graph_sharding(g, gid);
    sc_sharding s;
    if (seed) s = *seed;
    else sc_sharding_replicated(&s, v->rank);
    int64_t loc[SC_MAX_RANK];
    if ((st = local_dims(&z, v, &s, loc)) != SC_OK) goto fail;
    int32_t id = sc_graph_add_value(L, v->name);
    if (id < 0 || sc_value_set_shape(L, id, v->dtype, v->rank, loc) != SC_OK ||
        sc_graph_set_sharding(L, id, &s) != SC_OK || sc_graph_add_input(L, id) != SC_OK) {
      st = lerr(&z);
      goto fail;
    }
    z.cur[gid] = s;
    z.lid[gid] = id;
    if ((st = add_memo(&z, gid, &s, id)) != SC_OK) goto fail;
    /* an input pending over an axis (an accumulator, each rank's own sum)
     * is a source of the cut that nothing reduces where it is made: the
     * reduction its readers need downstream serves whatever pending sum
     * joins it there (a gradient added into it), so the cut does not reduce
     * that sum on its own as well */
    for (int32_t ax = 0; ax < p->mesh.n_axes; ax++)
      if (s.partial & (1u << ax))
        z.pnode[(size_t)gid * p->mesh.n_axes + ax] = sc_cut_node(z.cg, SC_CUT_INF, true);
  }
  p->local_end = sc_arena_array(&p->arena, (size_t)(g->n_nodes ? g->n_nodes : 1),
                                sizeof *p->local_end);
  if (!p->local_end) {
    st = nomem(&z);
    goto fail;
  }
  for (int32_t nid = 0; nid < g->n_nodes; nid++) {
    if (!(g->nodes[nid].flags & SC_NODE_DEAD) && (st = localize_node(&z, nid)) != SC_OK)
      goto fail;
    p->local_end[nid] = L->n_nodes;
  }
  if ((st = bind_outputs(&z)) != SC_OK) goto fail;
  if (z.n_src) qsort(z.src, (size_t)z.n_src, sizeof *z.src, cmp_source);
  p->local = L;
  /* sources move into the partition's arena */
  p->sources = sc_arena_array(&p->arena, (size_t)(z.n_src ? z.n_src : 1), sizeof *p->sources);
  if (!p->sources) {
    p->local = NULL;
    st = nomem(&z);
    goto fail;
  }
  if (z.n_src) memcpy(p->sources, z.src, (size_t)z.n_src * sizeof *z.src);
  p->n_sources = z.n_src;
  if (cut) *n_cut = choose_cut(&z, cut);
  free_walk(&z);
  return SC_OK;
fail:
  if (d->status == SC_OK) sc_diag_set(d, st, NULL, NULL, "localize failed");
  sc_graph_destroy(L);
  free_walk(&z);
  return st;
}

sc_status sc_partition_localize(sc_partition *p, sc_diag *d) {
  size_t nk = (size_t)p->global->n_values * (size_t)(p->mesh.n_axes > 0 ? p->mesh.n_axes : 1);
  bool *cut = sc_calloc(nk + 1, sizeof *cut);
  if (!cut) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int32_t n_cut = 0;
  sc_status st = walk(p, d, NULL, cut, &n_cut);
  if (st == SC_OK && n_cut > 0) { /* again, reducing those where they begin */
    sc_graph_destroy(p->local);
    p->local = NULL;
    st = walk(p, d, cut, NULL, NULL);
  }
  sc_free(cut);
  return st;
}
