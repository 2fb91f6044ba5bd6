/* shard_rules.c — every op's sharding rule (passes/partition/shard_rule.h).
 *
 * A rule reads the node's global shapes, attributes and constant inputs from
 * the global graph and rewrites c->want[] / c->out[] (see the contract in
 * shard_rule.h). Rules are written for the common case and stay simple: when
 * something is unusual (a non-constant axes input, a rank they do not
 * handle) they replicate everything, which is always correct.
 *
 * One place checks every result: the table built from ops.def's `shard`
 * column maps each op to a wrapper (checked_<ID>) that resets want/out to the
 * contract's entry state, runs the rule and validates what it produced —
 * each sharding valid on the mesh and of the value's rank, every split dim
 * dividing the global dim, want partial only ⊆ in partial (or a constant
 * input). A result that fails falls back to sc_shard_replicate_all, so the
 * partitioner never sees an invalid sharding from here.
 *
 * Shared patterns:
 *   carry    copy one dim's split (axes + stride) onto another sharding's
 *            dim unless an axis is already used there or it does not divide;
 *   partial  kept only through ops linear in the partial input(s).
 * ir/ ignores the column; this file is the only one expanding it. */
#include <string.h>

#include "ir/ir.h"
#include "ir/op_util.h"
#include "passes/partition/shard_rule.h"

/* Prototypes of every rule ops.def names. */
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  sc_status sc_##shard(sc_shard_ctx *c);
#include "ir/ops.def"
#undef OP

/* ---- helpers (exported ones are declared in shard_rule.h) ---- */

static sc_value *inv(const sc_shard_ctx *c, int32_t i) {
  return sc_node_input(c->g, c->n, i);
}
static sc_value *outv(const sc_shard_ctx *c, int32_t j) {
  return sc_node_output(c->g, c->n, j);
}

static sc_axes dim_mask(const sc_sharding *s, int32_t d) {
  sc_axes a = 0;
  for (int32_t k = 0; k < s->n_dim_axes[d]; k++) a |= 1u << s->dim_axes[d][k];
  return a;
}

/* Same axis list and stride on dim da of a and dim db of b. */
static bool same_dim(const sc_sharding *a, int32_t da, const sc_sharding *b, int32_t db) {
  if (a->n_dim_axes[da] != b->n_dim_axes[db]) return false;
  if (sc_sharding_stride(a, da) != sc_sharding_stride(b, db)) return false;
  for (int32_t k = 0; k < a->n_dim_axes[da]; k++)
    if (a->dim_axes[da][k] != b->dim_axes[db][k]) return false;
  return true;
}

sc_status sc_shard_replicate_all(sc_shard_ctx *c) {
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    sc_sharding_replicated(&c->want[i], v && v->rank > 0 ? v->rank : 0);
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *v = outv(c, j);
    sc_sharding_replicated(&c->out[j], v && v->rank > 0 ? v->rank : 0);
  }
  c->expand = SC_SHARD_EXPAND_NONE;
  return SC_OK;
}

bool sc_shard_divides(const sc_sharding *s, const sc_mesh *m, int32_t d, int64_t size) {
  int64_t parts = sc_sharding_dim_parts(s, m, d) * sc_sharding_stride(s, d);
  if (parts == 1) return true;
  return size >= 0 && size % parts == 0;
}

void sc_shard_copy_dim(sc_sharding *to, int32_t dst_d, const sc_sharding *from,
                       int32_t src_d) {
  to->n_dim_axes[dst_d] = from->n_dim_axes[src_d];
  memcpy(to->dim_axes[dst_d], from->dim_axes[src_d], sizeof to->dim_axes[dst_d]);
  to->stride[dst_d] = from->stride[src_d];
}

void sc_shard_unsplit_dim(sc_sharding *s, int32_t d) {
  s->n_dim_axes[d] = 0;
  memset(s->dim_axes[d], 0, sizeof s->dim_axes[d]);
  s->stride[d] = 0;
}

/* Copies dim src of `from` onto dim dst of `to` when it is split, uses no
 * axis in *used and divides `size`; adds its axes to *used. */
static bool carry(const sc_shard_ctx *c, sc_sharding *to, int32_t dst,
                  const sc_sharding *from, int32_t src, sc_axes *used, int64_t size) {
  sc_axes a = dim_mask(from, src);
  if (!a || (a & *used) || !sc_shard_divides(from, c->mesh, src, size)) return false;
  sc_shard_copy_dim(to, dst, from, src);
  *used |= a;
  return true;
}

/* carry, or else the outer axes of from's dim src up to the first one in
 * *used (the inner ones gathered): the tokens of a column-parallel
 * product's rows split over cp and, inside, over tp by sequence
 * parallelism keep cp's split when the columns take tp. */
static bool carry_outer(const sc_shard_ctx *c, sc_sharding *to, int32_t dst,
                        const sc_sharding *from, int32_t src, sc_axes *used, int64_t size) {
  if (carry(c, to, dst, from, src, used, size)) return true;
  int32_t k = 0;
  while (k < from->n_dim_axes[src] && !(*used & (1u << from->dim_axes[src][k]))) k++;
  if (k == 0 || k == from->n_dim_axes[src]) return false;
  sc_sharding outer = *from;
  outer.n_dim_axes[src] = (uint8_t)k;
  return carry(c, to, dst, &outer, src, used, size);
}

/* Want input i replicated (an operand every rank needs whole). */
static void want_whole(sc_shard_ctx *c, int32_t i) {
  const sc_value *v = inv(c, i);
  if (v) sc_sharding_replicated(&c->want[i], v->rank);
}

/* Ints of a constant integer tensor of rank <= 1; false when not one. */
static bool const_ints(const sc_value *v, int64_t *buf, int64_t cap, int64_t *count) {
  if (!v || !sc_value_has_data(v) || v->rank > 1) return false;
  int64_t n = sc_value_numel(v);
  if (n < 0 || n > cap) return false;
  for (int64_t k = 0; k < n; k++) {
    if (v->dtype == SC_DTYPE_I64) buf[k] = ((const int64_t *)v->data)[k];
    else if (v->dtype == SC_DTYPE_I32) buf[k] = ((const int32_t *)v->data)[k];
    else return false;
  }
  *count = n;
  return true;
}

/* axis normalised into [0, rank), or -1 when out of range. */
static int32_t norm_axis(int64_t axis, int32_t rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? (int32_t)axis : -1;
}

/* ---- unary elementwise ---- */

static bool dropout_training(const sc_shard_ctx *c) {
  const sc_value *t = inv(c, 2);
  if (!t) return false;
  if (!sc_value_has_data(t) || t->dtype != SC_DTYPE_BOOL || sc_value_numel(t) != 1) return true;
  return ((const uint8_t *)t->data)[0] != 0;
}

/* Whether the op is linear in input 0 (a pending sum passes through). */
static bool unary_linear(const sc_shard_ctx *c) {
  switch (c->n->op) {
  case SC_OP_NEG:
  case SC_OP_IDENTITY: return true;
  case SC_OP_CAST:
  case SC_OP_CAST_LIKE: {
    const sc_value *x = inv(c, 0), *y = outv(c, 0);
    return y && sc_dtype_is_float(x->dtype) && sc_dtype_is_float(y->dtype);
  }
  case SC_OP_DROPOUT: return !dropout_training(c);
  default: return false;
  }
}

/* Outputs follow input 0 (Dropout's mask: its dims, never partial). */
sc_status sc_shard_unary(sc_shard_ctx *c) {
  if (!unary_linear(c)) c->want[0].partial = 0;
  for (int32_t i = 1; i < c->n->n_inputs; i++) c->want[i].partial = 0;
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *o = outv(c, j);
    if (!o) continue;
    c->out[j] = c->want[0];
    if (j > 0) c->out[j].partial = 0;
  }
  return SC_OK;
}

/* ---- broadcasting n-ary ---- */

/* Pending sums through a broadcasting op: want[i].partial and out partial. */
static void broadcast_partial(sc_shard_ctx *c, sc_axes used) {
  sc_axes p = 0, all = 0, keep = 0;
  int32_t n_partial = 0;
  bool same = true, rest_const = true, add_like = false;
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    if (!v) continue;
    sc_axes pi = c->in[i].partial;
    if (pi) {
      if (n_partial++ && pi != p) same = false;
      p = pi;
      all |= pi;
    } else if (!sc_value_has_data(v)) {
      rest_const = false;
    }
  }
  switch (c->n->op) {
  case SC_OP_ADD:
  case SC_OP_SUB:
  case SC_OP_SUM:
  case SC_OP_MEAN: /* linear: constants join the sum as partial constants */
    add_like = true;
    /* sums pending over different axes stay pending over all of them, each
     * joining the axes it lacks (a tied embedding's gradient: the LM
     * head's pending over dp, the lookup's scatter over dp and tp), so
     * that one reduction, of the piece its reader keeps, follows */
    if (n_partial && rest_const) keep = same ? p : all;
    break;
  case SC_OP_MUL:
    if (n_partial == 1) keep = p;
    break;
  case SC_OP_DIV:
    if (n_partial == 1 && c->in[0].partial) keep = p;
    break;
  default: break;
  }
  if (keep & used) {
    /* an axis splitting the output is reduced onto that split; sums that
     * pended over different axes keep the others pending (a tied vocabulary-
     * parallel embedding's gradients under sequence parallelism: the LM
     * head's rows pending over dp, the lookup's scatter over dp and tp,
     * reduce-scattered over tp onto the rows, then one dp reduction), unless
     * an operand would both reduce some axes and join others */
    sc_axes rest = same ? 0 : keep & ~used;
    for (int32_t i = 0; rest && i < c->n->n_inputs; i++) {
      sc_axes pi = inv(c, i) ? c->in[i].partial : 0;
      if (pi && (rest & ~pi) && (pi & ~rest)) rest = 0;
    }
    keep = rest;
  }
  for (int32_t i = 0; i < c->n->n_inputs; i++)
    if (inv(c, i)) c->want[i].partial = !keep ? 0 : add_like ? keep : c->in[i].partial;
  c->out[0].partial = keep;
}

/* numpy broadcasting: each output dim takes the split of the first input
 * that has it whole-size and split; inputs follow, broadcast dims whole. */
sc_status sc_shard_broadcast(sc_shard_ctx *c) {
  const sc_value *o = outv(c, 0);
  int32_t r = o->rank;
  sc_sharding *out = &c->out[0];
  sc_axes used = 0;
  for (int32_t od = 0; od < r; od++)
    for (int32_t i = 0; i < c->n->n_inputs; i++) {
      const sc_value *v = inv(c, i);
      int32_t id = v ? od - (r - v->rank) : -1;
      if (id < 0 || v->dims[id] != o->dims[od] || !c->in[i].n_dim_axes[id]) continue;
      carry(c, out, od, &c->in[i], id, &used, o->dims[od]);
      break;
    }
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    if (!v) continue;
    sc_sharding_replicated(&c->want[i], v->rank);
    for (int32_t id = 0; id < v->rank; id++) {
      int32_t od = id + r - v->rank;
      if (v->dims[id] == o->dims[od]) sc_shard_copy_dim(&c->want[i], id, out, od);
    }
  }
  broadcast_partial(c, used);
  return SC_OK;
}

/* ---- reductions ---- */

/* Output sharding of a reduction of want[0] over red[] (keepdims or not). */
static void reduce_out(sc_shard_ctx *c, const bool *red, bool keepdims) {
  const sc_sharding *w = &c->want[0];
  int32_t od = 0;
  for (int32_t d = 0; d < w->rank; d++) {
    if (red[d] && !keepdims) continue;
    if (!red[d]) sc_shard_copy_dim(&c->out[0], od, w, d);
    od++;
  }
}

sc_status sc_shard_reduce(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  bool linear = c->n->op == SC_OP_REDUCE_SUM || c->n->op == SC_OP_REDUCE_MEAN;
  bool red[SC_MAX_RANK], noop, keepdims;
  /* the op's own reader; shape inference accepted the node with it */
  if (sc_reduce_axes(c->g, c->n, red, &noop, &keepdims) != SC_OK)
    return sc_shard_replicate_all(c);
  if (inv(c, 1)) want_whole(c, 1);
  if (!linear) c->want[0].partial = 0;
  if (noop) { /* identity */
    c->out[0] = c->want[0];
    return SC_OK;
  }
  /* a sum over a split dim is the sum of the pieces' sums: pending over
   * that dim's axes (the batch of a loss, a bias gradient, a norm) */
  bool sums = c->n->op == SC_OP_REDUCE_SUM || c->n->op == SC_OP_REDUCE_SUM_SQUARE;
  /* a max or min over a split dim: the pieces' extrema, then the group's
   * (shard_rule.h) */
  bool group = (c->n->op == SC_OP_REDUCE_MAX || c->n->op == SC_OP_REDUCE_MIN) &&
               x->dtype == SC_DTYPE_F32;
  /* a mean over a split dim: each piece's mean scaled by 1/(the pieces),
   * pending over its axes (shard_rule.h; a mean over the tokens split by
   * cp: ViT's pooling) */
  bool mean = c->n->op == SC_OP_REDUCE_MEAN &&
              (x->dtype == SC_DTYPE_F32 || x->dtype == SC_DTYPE_F64);
  sc_axes pending = 0;
  for (int32_t d = 0; d < x->rank; d++) {
    if (!red[d]) continue;
    for (int32_t k = 0; (sums || mean) && k < c->want[0].n_dim_axes[d]; k++)
      pending |= 1u << c->want[0].dim_axes[d][k];
    if (group && c->want[0].n_dim_axes[d] > 0) c->expand = SC_SHARD_EXPAND_GROUP_REDUCE;
    else if (!sums && !mean) sc_shard_unsplit_dim(&c->want[0], d);
  }
  if (mean && pending) c->expand = SC_SHARD_EXPAND_SCALED_MEAN;
  reduce_out(c, red, keepdims);
  c->out[0].partial = c->want[0].partial | pending;
  return SC_OK;
}

sc_status sc_shard_argminmax(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", 0), x->rank);
  if (axis < 0) return sc_shard_replicate_all(c);
  bool red[SC_MAX_RANK] = {false};
  red[axis] = true;
  c->want[0].partial = 0;
  sc_shard_unsplit_dim(&c->want[0], axis);
  reduce_out(c, red, sc_attr_int(c->g, c->n, "keepdims", 1) != 0);
  return SC_OK;
}

/* CumSum is linear: the pending sum passes; the scanned dim is whole. */
sc_status sc_shard_cumsum(sc_shard_ctx *c) {
  int64_t axis, count;
  if (!const_ints(inv(c, 1), &axis, 1, &count) || count != 1)
    return sc_shard_replicate_all(c);
  int32_t d = norm_axis(axis, inv(c, 0)->rank);
  if (d < 0) return sc_shard_replicate_all(c);
  want_whole(c, 1);
  sc_shard_unsplit_dim(&c->want[0], d);
  c->out[0] = c->want[0];
  return SC_OK;
}

/* ---- MatMul, Gemm ---- */

/* Dims of A (M, K) and B (K, N) in their own ranks. */
typedef struct mm_dims {
  int32_t am, ak, bk, bn;
} mm_dims;

/* Splits of a contraction out[...,M,N] = A · B (inputs 0 and 1), batch dims
 * broadcast from the right. Sets want[0], want[1] and out[0] with partials;
 * returns the K axes when K stays split on both sides (0 otherwise). */
static sc_axes contract(sc_shard_ctx *c, mm_dims p) {
  const sc_value *va = inv(c, 0), *vb = inv(c, 1), *vo = outv(c, 0);
  const sc_sharding *a = &c->in[0], *b = &c->in[1];
  sc_sharding *wa = &c->want[0], *wb = &c->want[1], *o = &c->out[0];
  int32_t r = vo->rank;
  sc_axes used = 0, kaxes = 0;
  sc_sharding_replicated(wa, va->rank);
  sc_sharding_replicated(wb, vb->rank);
  /* K stays split over the axes both sides' lists begin with (the whole
   * list when they are the same): a side split further (the sequence
   * parallel output gradient [b, (cp,tp), n] against the input's [b, k, cp]
   * in a weight's gradient under cp) is gathered over the rest alone */
  int32_t kn = 0;
  if (sc_sharding_stride(a, p.ak) == sc_sharding_stride(b, p.bk))
    while (kn < a->n_dim_axes[p.ak] && kn < b->n_dim_axes[p.bk] &&
           a->dim_axes[p.ak][kn] == b->dim_axes[p.bk][kn])
      kn++;
  if (kn > 0 && ((kn == a->n_dim_axes[p.ak] && kn == b->n_dim_axes[p.bk]) ||
                 sc_sharding_stride(a, p.ak) == 1)) {
    sc_shard_copy_dim(wa, p.ak, a, p.ak);
    sc_shard_copy_dim(wb, p.bk, b, p.bk);
    wa->n_dim_axes[p.ak] = wb->n_dim_axes[p.bk] = (uint8_t)kn;
    kaxes = dim_mask(wa, p.ak);
    used = kaxes;
  }
  for (int32_t od = 0; od < r - 2; od++) { /* batch dims: first split wins */
    int32_t ia = od - (r - va->rank), ib = od - (r - vb->rank);
    if (ia >= 0 && va->dims[ia] == vo->dims[od] && a->n_dim_axes[ia])
      carry(c, o, od, a, ia, &used, vo->dims[od]);
    else if (ib >= 0 && vb->dims[ib] == vo->dims[od] && b->n_dim_axes[ib])
      carry(c, o, od, b, ib, &used, vo->dims[od]);
  }
  for (int32_t ia = 0; ia < va->rank - 2; ia++) {
    int32_t od = ia + r - va->rank;
    if (va->dims[ia] == vo->dims[od]) sc_shard_copy_dim(wa, ia, o, od);
  }
  for (int32_t ib = 0; ib < vb->rank - 2; ib++) {
    int32_t od = ib + r - vb->rank;
    if (vb->dims[ib] == vo->dims[od]) sc_shard_copy_dim(wb, ib, o, od);
  }
  /* M and N split over one axis: a matrix B (rank 2: a layer's weight,
   * or the gradient a weight's product reads) keeps its columns and A's
   * rows are gathered, as Megatron's column-parallel product under
   * sequence parallelism all-gathers its input; a batched B gives way */
  bool n_first = vb->rank == 2 && (dim_mask(a, p.am) & dim_mask(b, p.bn));
  if (n_first && carry(c, o, r - 1, b, p.bn, &used, vo->dims[r - 1]))
    sc_shard_copy_dim(wb, p.bn, o, r - 1);
  /* A's rows split over the axis a batched B is pending over: gathering
   * the rows moves A once, reducing B moves it twice (an all-reduce); the
   * smaller is done and the product stays pending (the experts' output,
   * pending over tp under expert tensor parallelism, read by the gates'
   * gradient with the sequence-split output gradient: docs/moe.md) */
  bool keep_b = vb->rank > 2 && !a->partial && (b->partial & dim_mask(a, p.am)) &&
                !(b->partial & (sc_sharding_dim_axes(b) | kaxes)) &&
                (double)sc_value_numel(va) < 2.0 * (double)sc_value_numel(vb);
  if (!keep_b && carry_outer(c, o, r - 2, a, p.am, &used, vo->dims[r - 2]))
    sc_shard_copy_dim(wa, p.am, o, r - 2);
  if (!n_first && carry(c, o, r - 1, b, p.bn, &used, vo->dims[r - 1]))
    sc_shard_copy_dim(wb, p.bn, o, r - 1);
  /* pending sums: one side's passes through (both: B is reduced first);
   * none may share an axis with the output's splits */
  sc_axes dims = sc_sharding_dim_axes(o), pa = a->partial, pb = b->partial;
  if (pa && pb) pb = 0;
  if (pa & (dims | sc_sharding_dim_axes(wa))) pa = 0;
  if (pb & (dims | sc_sharding_dim_axes(wb))) pb = 0;
  wa->partial = pa;
  wb->partial = pb;
  o->partial = pa | pb | kaxes;
  return kaxes;
}

sc_status sc_shard_matmul(sc_shard_ctx *c) {
  int32_t ra = inv(c, 0)->rank, rb = inv(c, 1)->rank;
  if (ra < 2 || rb < 2) return sc_shard_replicate_all(c);
  contract(c, (mm_dims){ra - 2, ra - 1, rb - 2, rb - 1});
  return SC_OK;
}

/* Whether v (sharding in) may be asked to be pending over the axes want:
 * a constant (its data goes to the group's first rank), or a float value
 * the partitioner multiplies by a partial 1 (a training step's bias, an
 * input of the step like any computed value; in a mixed-precision step the
 * bias's bf16 or f16 cast: x·1 and x·0 are exact in every float type),
 * not pending now or pending over some of want's axes only (it joins the
 * others; a sum pending over axes want lacks is not reduced here). */
static bool can_join_sum(const sc_value *v, const sc_sharding *in, sc_axes want) {
  return sc_value_has_data(v) ||
         ((in->partial & ~want) == 0 && (v->dtype == SC_DTYPE_F32 || v->dtype == SC_DTYPE_F64 ||
                                         v->dtype == SC_DTYPE_BF16 || v->dtype == SC_DTYPE_F16));
}

/* Y = alpha·A'·B' + beta·C: C joins a pending sum (or already is one over
 * the same axes); otherwise no pending sum. */
sc_status sc_shard_gemm(sc_shard_ctx *c) {
  const sc_value *va = inv(c, 0), *vb = inv(c, 1), *vc = inv(c, 2), *vo = outv(c, 0);
  if (va->rank != 2 || vb->rank != 2 || vo->rank != 2) return sc_shard_replicate_all(c);
  bool ta = sc_attr_int(c->g, c->n, "transA", 0) != 0;
  bool tb = sc_attr_int(c->g, c->n, "transB", 0) != 0;
  mm_dims p = {ta ? 1 : 0, ta ? 0 : 1, tb ? 1 : 0, tb ? 0 : 1};
  sc_axes kaxes = contract(c, p);
  if (!vc) return SC_OK;
  sc_sharding *wc = &c->want[2], *o = &c->out[0];
  sc_axes part = o->partial;
  if (part && c->in[2].partial != part && !can_join_sum(vc, &c->in[2], part)) {
    /* C cannot join the pending sum: contract whole */
    if (kaxes) {
      sc_shard_unsplit_dim(&c->want[0], p.ak);
      sc_shard_unsplit_dim(&c->want[1], p.bk);
    }
    c->want[0].partial = c->want[1].partial = 0;
    o->partial = part = 0;
  }
  sc_sharding_replicated(wc, vc->rank);
  wc->partial = part;
  if (vc->rank == 2 && vc->dims[0] == vo->dims[0]) sc_shard_copy_dim(wc, 0, o, 0);
  if (vc->rank >= 1 && vc->dims[vc->rank - 1] == vo->dims[1])
    sc_shard_copy_dim(wc, vc->rank - 1, o, 1);
  return SC_OK;
}

/* ---- row ops: softmax, norms; batch-only ops ---- */

sc_status sc_shard_softmax(sc_shard_ctx *c) {
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", -1), inv(c, 0)->rank);
  if (axis < 0) return sc_shard_replicate_all(c);
  c->want[0].partial = 0;
  bool f32 = inv(c, 0)->dtype == SC_DTYPE_F32;
  if (f32 && (c->n->op == SC_OP_SOFTMAX || c->n->op == SC_OP_LOG_SOFTMAX) &&
      c->want[0].n_dim_axes[axis] > 0 && sc_sharding_stride(&c->want[0], axis) == 1) {
    c->out[0] = c->want[0]; /* normalised across the group (shard_rule.h) */
    c->expand = SC_SHARD_EXPAND_SPLIT_SOFTMAX;
    return SC_OK;
  }
  sc_shard_unsplit_dim(&c->want[0], axis);
  c->out[0] = c->want[0];
  return SC_OK;
}

/* LayerNormalization / RMSNormalization: dims axis.. are normalised. */
sc_status sc_shard_layernorm(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", -1), x->rank);
  if (axis < 0) return sc_shard_replicate_all(c);
  c->want[0].partial = 0;
  for (int32_t d = axis; d < x->rank; d++) sc_shard_unsplit_dim(&c->want[0], d);
  for (int32_t i = 1; i < c->n->n_inputs; i++) want_whole(c, i);
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *o = outv(c, j);
    if (!o || o->rank != x->rank) continue;
    for (int32_t d = 0; d < axis; d++) sc_shard_copy_dim(&c->out[j], d, &c->want[0], d);
  }
  return SC_OK;
}

/* LayerNormGrad (dY, X, Scale -> dX, dScale[, dB]): rows (the dims before
 * axis) are independent, so they keep dY's split, and a row dim dY has
 * whole takes X's split there (X is the forward's input, split as the
 * forward ran: a context-parallel step's sequence over cp, where the
 * gradient out of a cp_3d Gemm arrives whole over cp — slicing dY is free,
 * gathering X is not, and dX must stay split for the ops after it, the
 * embedding's ScatterND among them); X is asked for the same. A row's
 * normalised dims stay whole, and Scale too. dX is split like the rows;
 * dScale and dB sum over the rows, so each rank's are a pending sum over
 * the axes that split the rows. */
sc_status sc_shard_layernorm_grad(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 1);
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", -1), x->rank);
  if (axis < 0 || inv(c, 0)->rank != x->rank) return sc_shard_replicate_all(c);
  c->want[0].partial = 0;
  for (int32_t d = axis; d < x->rank; d++) sc_shard_unsplit_dim(&c->want[0], d);
  for (int32_t d = 0; d < axis; d++)
    if (!c->want[0].n_dim_axes[d] && dim_mask(&c->in[1], d) &&
        !(dim_mask(&c->in[1], d) & sc_sharding_dim_axes(&c->want[0])))
      sc_shard_copy_dim(&c->want[0], d, &c->in[1], d);
  c->want[1] = c->want[0];
  want_whole(c, 2);
  sc_axes rows = 0;
  for (int32_t d = 0; d < axis; d++) {
    sc_shard_copy_dim(&c->out[0], d, &c->want[0], d);
    rows |= dim_mask(&c->want[0], d);
  }
  for (int32_t j = 1; j < c->n->n_outputs; j++)
    if (outv(c, j)) c->out[j].partial = rows;
  return SC_OK;
}

/* SoftmaxCrossEntropy (logits, labels -> loss, lse) and its gradient
 * (dLoss, logits, labels, lse -> dLogits): rows (every dim of the logits
 * but the last) are independent, so they keep the logits' split and every
 * per-row input is asked for the same; the classes stay whole (a logits
 * split over the vocabulary is gathered). */
sc_status sc_shard_softmax_cross_entropy(sc_shard_ctx *c) {
  bool grad = c->n->op == SC_OP_SOFTMAX_CROSS_ENTROPY_GRAD;
  int32_t xi = grad ? 1 : 0;
  const sc_value *x = inv(c, xi);
  int32_t r = x->rank - 1;
  if (r < 0) return sc_shard_replicate_all(c);
  sc_sharding rows = c->in[xi];
  rows.partial = 0;
  sc_shard_unsplit_dim(&rows, r);
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    sc_sharding_replicated(&c->want[i], v->rank);
    for (int32_t d = 0; d < r && d < v->rank; d++) sc_shard_copy_dim(&c->want[i], d, &rows, d);
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++)
    for (int32_t d = 0; d < r; d++) sc_shard_copy_dim(&c->out[j], d, &rows, d);
  return SC_OK;
}

/* Conv, pools, Batch/Instance/GroupNormalization: samples are independent,
 * so only the batch dim (0) of input 0 may stay split. */
sc_status sc_shard_batch(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  if (x->rank < 1) return sc_shard_replicate_all(c);
  if (c->n->op == SC_OP_BATCH_NORM && sc_attr_int(c->g, c->n, "training_mode", 0))
    return sc_shard_replicate_all(c); /* batch statistics */
  if (c->n->op == SC_OP_MAX_POOL && outv(c, 1))
    return sc_shard_replicate_all(c); /* Indices are flat over the whole input */
  sc_sharding keep = c->in[0];
  for (int32_t i = 0; i < c->n->n_inputs; i++) want_whole(c, i);
  sc_shard_copy_dim(&c->want[0], 0, &keep, 0);
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *o = outv(c, j);
    if (o && o->rank == x->rank && o->dims[0] == x->dims[0])
      sc_shard_copy_dim(&c->out[j], 0, &keep, 0);
  }
  return SC_OK;
}

/* ---- shape ops ---- */

sc_status sc_shard_transpose(sc_shard_ctx *c) {
  int32_t r = inv(c, 0)->rank;
  int32_t perm[SC_MAX_RANK];
  const int64_t *p = NULL;
  int64_t n = sc_attr_ints(c->g, c->n, "perm", &p);
  bool seen[SC_MAX_RANK] = {false};
  for (int32_t i = 0; i < r; i++) {
    int64_t v = n < 0 ? r - 1 - i : n == r ? p[i] : -1;
    if (v < 0 || v >= r || seen[v]) return sc_shard_replicate_all(c);
    seen[v] = true;
    perm[i] = (int32_t)v;
  }
  for (int32_t i = 0; i < r; i++) sc_shard_copy_dim(&c->out[0], i, &c->want[0], perm[i]);
  c->out[0].partial = c->want[0].partial;
  return SC_OK;
}

/* Whether dim d of s is split over the axis named cp first. */
static bool cp_outer(const sc_shard_ctx *c, const sc_sharding *s, int32_t d) {
  int32_t cp = sc_mesh_find_axis(c->mesh, "cp");
  return cp >= 0 && s->n_dim_axes[d] >= 1 && s->dim_axes[d][0] == cp;
}

/* A Reshape group, input dims [i0, i1) and output dims [j0, j1), whose one
 * split is on a dim after the group's first (the sequence of [b, S, ..]:
 * context parallelism's, or sequence parallelism's over tp): merging
 * [b, S/n, ..] into one dim carries it as a stride b (each of the b blocks
 * split: `b*cp`, `b*tp`), and splitting a dim of stride b back into
 * [b, S, ..] lands it, unstrided, on the dim after those whose product is
 * b — so the sequence stays split through the rows of a product, which
 * gathers them itself where it must (docs/context-parallel.md,
 * docs/partitioning.md). Under cp the merge gathers the axes inside cp's
 * on that dim: sequence parallelism's tp split of each cp rank's tokens,
 * gathered before a column-parallel product. */
static bool seq_merge(sc_shard_ctx *c, int32_t i0, int32_t i1, int32_t j0, int32_t j1) {
  const sc_value *x = inv(c, 0), *o = outv(c, 0);
  sc_sharding *w = &c->want[0], *out = &c->out[0];
  int32_t split = -1;
  for (int32_t d = i0; d < i1; d++)
    if (w->n_dim_axes[d]) {
      if (split >= 0) return false;
      split = d;
    }
  if (split < 0) return false;
  int64_t stride = sc_sharding_stride(w, split), before = 1;
  if (i1 - i0 > 1 && j1 - j0 == 1 && stride == 1 && split > i0) {
    /* merge: [b, S, ..] -> [b·S·..] */
    for (int32_t d = i0; d < split; d++) before *= x->dims[d];
    if (before < 2 || before > 255) return false;
    if (cp_outer(c, w, split))
      w->n_dim_axes[split] = 1; /* cp's split alone: the axes inside it gathered */
    sc_sharding merged = *out;
    sc_shard_copy_dim(&merged, j0, w, split);
    merged.stride[j0] = (uint8_t)before;
    if (!sc_shard_divides(&merged, c->mesh, j0, o->dims[j0])) return false;
    *out = merged;
    return true;
  }
  if (i1 - i0 == 1 && j1 - j0 > 1 && stride > 1) {
    /* split back: [b·S·..] -> [b, S, ..] */
    for (int32_t d = j0; d < j1 && before < stride; d++) {
      before *= o->dims[d];
      if (before == stride && d + 1 < j1) {
        sc_sharding back = *out;
        sc_shard_copy_dim(&back, d + 1, w, split);
        back.stride[d + 1] = 0;
        if (!sc_shard_divides(&back, c->mesh, d + 1, o->dims[d + 1])) return false;
        *out = back;
        return true;
      }
    }
  }
  return false;
}

/* Reshape, Flatten, Squeeze, Unsqueeze: input and output dims (both global,
 * size-1 dims aside) group into runs of equal products. A group's split on
 * its first input dim lands on its first output dim (the same contiguous
 * blocks of the group's row-major range); one on a later dim, or a stride
 * split back, is seq_merge's; otherwise a stride only survives a
 * one-dim-to-one-dim group. Other splits are unsplit. */
sc_status sc_shard_reshape(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0), *o = outv(c, 0);
  sc_sharding *w = &c->want[0], *out = &c->out[0];
  for (int32_t i = 1; i < c->n->n_inputs; i++) want_whole(c, i);
  int32_t ri = x->rank, ro = o->rank, i = 0, j = 0;
  if (sc_value_numel(x) <= 0) {
    for (int32_t d = 0; d < ri; d++) sc_shard_unsplit_dim(w, d);
    out->partial = w->partial;
    return SC_OK;
  }
  while (i < ri || j < ro) {
    if (i < ri && x->dims[i] == 1) {
      sc_shard_unsplit_dim(w, i++);
      continue;
    }
    if (j < ro && o->dims[j] == 1) {
      j++;
      continue;
    }
    if (i >= ri || j >= ro) return sc_shard_replicate_all(c);
    int32_t i0 = i, j0 = j;
    int64_t pi = x->dims[i++], pj = o->dims[j++];
    while (pi != pj) {
      if (pi < pj && i < ri) pi *= x->dims[i++];
      else if (pj < pi && j < ro) pj *= o->dims[j++];
      else return sc_shard_replicate_all(c);
    }
    if (seq_merge(c, i0, i, j0, j)) continue;
    for (int32_t d = i0 + 1; d < i; d++) sc_shard_unsplit_dim(w, d);
    if (!w->n_dim_axes[i0]) continue;
    bool one = i - i0 == 1 && j - j0 == 1;
    if (sc_shard_divides(w, c->mesh, i0, o->dims[j0]) && (one || sc_sharding_stride(w, i0) == 1))
      sc_shard_copy_dim(out, j0, w, i0);
    else
      sc_shard_unsplit_dim(w, i0);
  }
  out->partial = w->partial;
  return SC_OK;
}

/* Concat: the axis whole everywhere; each other dim takes the first split
 * among the inputs. Pending sums pass when every input has the same. */
sc_status sc_shard_concat(sc_shard_ctx *c) {
  const sc_value *o = outv(c, 0);
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", 0), o->rank);
  if (axis < 0) return sc_shard_replicate_all(c);
  sc_axes used = 0, p = c->in[0].partial;
  for (int32_t d = 0; d < o->rank; d++) {
    if (d == axis) continue;
    for (int32_t i = 0; i < c->n->n_inputs; i++) {
      if (!inv(c, i) || !c->in[i].n_dim_axes[d]) continue;
      carry(c, &c->out[0], d, &c->in[i], d, &used, o->dims[d]);
      break;
    }
  }
  for (int32_t i = 0; i < c->n->n_inputs; i++)
    if (!inv(c, i) || c->in[i].partial != p) p = 0;
  if (p & used) p = 0;
  c->out[0].partial = p;
  /* the inverse of Split's strided case: n equal inputs split alike along
   * the axis (the gradients of a fused QKV projection's q, k and v, each
   * split by heads) concatenate into that dim with n times their stride */
  int32_t n = c->n->n_inputs;
  bool alike = n > 1 && c->in[0].n_dim_axes[axis] > 0 && !(dim_mask(&c->in[0], axis) & (used | p));
  for (int32_t i = 0; alike && i < n; i++)
    alike = inv(c, i) && inv(c, i)->dims[axis] == inv(c, 0)->dims[axis] &&
            same_dim(&c->in[i], axis, &c->in[0], axis);
  int64_t k = sc_sharding_stride(&c->in[0], axis) * n;
  if (alike && k <= 255) {
    sc_shard_copy_dim(&c->out[0], axis, &c->in[0], axis);
    c->out[0].stride[axis] = (uint8_t)k;
  }
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    if (!inv(c, i)) continue;
    c->want[i] = c->out[0];
    if (alike && k <= 255) c->want[i].stride[axis] = c->in[0].stride[axis];
  }
  return SC_OK;
}

/* Split: other dims pass. The axis stays split only when it has a stride
 * that is a multiple of the number of (equal) outputs: each output is then
 * whole blocks of the strided view. */
sc_status sc_shard_split(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", 0), x->rank);
  if (axis < 0) return sc_shard_replicate_all(c);
  if (inv(c, 1)) want_whole(c, 1);
  int32_t n_out = c->n->n_outputs;
  const sc_value *first = outv(c, 0);
  bool equal = first != NULL;
  for (int32_t j = 0; j < n_out && equal; j++) {
    const sc_value *o = outv(c, j);
    if (!o || o->rank != x->rank || o->dims[axis] != first->dims[axis]) equal = false;
  }
  sc_sharding *w = &c->want[0];
  int64_t k = sc_sharding_stride(w, axis);
  bool strided = w->n_dim_axes[axis] && equal && k % n_out == 0;
  if (!strided) sc_shard_unsplit_dim(w, axis);
  for (int32_t j = 0; j < n_out; j++) {
    if (!outv(c, j)) continue;
    c->out[j] = *w;
    if (strided) c->out[j].stride[axis] = (uint8_t)(k / n_out > 1 ? k / n_out : 0);
  }
  return SC_OK;
}

/* Slice: a sliced dim is whole unless the slice keeps it all (step 1). */
sc_status sc_shard_slice(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0), *o = outv(c, 0);
  int64_t starts[SC_MAX_RANK], ends[SC_MAX_RANK], axes[SC_MAX_RANK], steps[SC_MAX_RANK];
  int64_t ns, ne, na, nt;
  if (!const_ints(inv(c, 1), starts, SC_MAX_RANK, &ns) ||
      !const_ints(inv(c, 2), ends, SC_MAX_RANK, &ne) || ns != ne)
    return sc_shard_replicate_all(c);
  if (!inv(c, 3)) {
    na = ns;
    for (int64_t k = 0; k < na; k++) axes[k] = k;
  } else if (!const_ints(inv(c, 3), axes, SC_MAX_RANK, &na) || na != ns) {
    return sc_shard_replicate_all(c);
  }
  if (!inv(c, 4)) {
    for (int64_t k = 0; k < ns; k++) steps[k] = 1;
  } else if (!const_ints(inv(c, 4), steps, SC_MAX_RANK, &nt) || nt != ns) {
    return sc_shard_replicate_all(c);
  }
  for (int32_t i = 1; i < c->n->n_inputs; i++) want_whole(c, i);
  for (int64_t k = 0; k < na; k++) {
    int32_t d = norm_axis(axes[k], x->rank);
    if (d < 0) return sc_shard_replicate_all(c);
    if (steps[k] != 1 || o->dims[d] != x->dims[d]) sc_shard_unsplit_dim(&c->want[0], d);
  }
  c->out[0] = c->want[0];
  return SC_OK;
}

/* Pad (constant mode, constant pads): a padded dim is whole, the others
 * keep their split; a pending sum stays pending when the fill is 0 (the
 * ranks' pieces then sum to the padded sum: Slice's gradient). */
sc_status sc_shard_pad(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0);
  int64_t pads[2 * SC_MAX_RANK], axes[SC_MAX_RANK], np, na;
  const char *mode = sc_attr_string(c->g, c->n, "mode", "constant");
  if (!x || strcmp(mode, "constant") != 0 || !const_ints(inv(c, 1), pads, 2 * SC_MAX_RANK, &np) ||
      np % 2 != 0)
    return sc_shard_replicate_all(c);
  na = np / 2;
  if (inv(c, 3)) {
    int64_t nx;
    if (!const_ints(inv(c, 3), axes, SC_MAX_RANK, &nx) || nx != na)
      return sc_shard_replicate_all(c);
  } else {
    if (na != x->rank) return sc_shard_replicate_all(c);
    for (int64_t k = 0; k < na; k++) axes[k] = k;
  }
  for (int32_t i = 1; i < c->n->n_inputs; i++) want_whole(c, i);
  for (int64_t k = 0; k < na; k++) {
    int32_t d = norm_axis(axes[k], x->rank);
    if (d < 0) return sc_shard_replicate_all(c);
    if (pads[k] != 0 || pads[k + na] != 0) sc_shard_unsplit_dim(&c->want[0], d);
  }
  const sc_value *fill = inv(c, 2);
  bool zero = !fill || (sc_value_has_data(fill) && sc_value_numel(fill) == 1 &&
                        sc_load_f64(fill->dtype, fill->data, 0) == 0.0);
  if (!zero) c->want[0].partial = 0;
  c->out[0] = c->want[0];
  return SC_OK;
}

/* Gather: out = data[:axis] + indices + data[axis+1:]. A split (stride 1)
 * gathered dim 0 with non-partial int64 indices becomes the masked gather:
 * out is partial over that dim's axes. Indices' splits carry when their axes are
 * free. */
sc_status sc_shard_gather(sc_shard_ctx *c) {
  const sc_value *data = inv(c, 0), *idx = inv(c, 1);
  int32_t r = data->rank, q = idx->rank;
  int32_t axis = norm_axis(sc_attr_int(c->g, c->n, "axis", 0), r);
  if (axis < 0) return sc_shard_replicate_all(c);
  sc_sharding *wd = &c->want[0], *wi = &c->want[1], *out = &c->out[0];
  wd->partial = wi->partial = 0;
  sc_axes masked = 0;
  /* the partitioner's masked form (localize.c) gathers rows: axis 0, int64
   * indices of rank 1 or more (a scalar index drops the axis: gathered whole) */
  if (axis == 0 && wd->n_dim_axes[0] && sc_sharding_stride(wd, 0) == 1 && !c->in[1].partial &&
      idx->dtype == SC_DTYPE_I64 && q >= 1) {
    c->expand = SC_SHARD_EXPAND_MASKED_GATHER;
    masked = dim_mask(wd, axis);
  } else {
    sc_shard_unsplit_dim(wd, axis);
  }
  sc_axes used = sc_sharding_dim_axes(wd);
  for (int32_t d = 0; d < r; d++)
    if (d != axis) sc_shard_copy_dim(out, d < axis ? d : d - 1 + q, wd, d);
  for (int32_t k = 0; k < q; k++) {
    if (!carry(c, out, axis + k, &c->in[1], k, &used, idx->dims[k]))
      sc_shard_unsplit_dim(wi, k);
  }
  out->partial = masked;
  return SC_OK;
}

/* Expand: broadcast dims whole, the others pass (linear: partial passes). */
sc_status sc_shard_expand_to(sc_shard_ctx *c) {
  const sc_value *x = inv(c, 0), *o = outv(c, 0);
  want_whole(c, 1);
  for (int32_t id = 0; id < x->rank; id++) {
    int32_t od = id + o->rank - x->rank;
    if (od < 0) return sc_shard_replicate_all(c);
    if (x->dims[id] == o->dims[od]) sc_shard_copy_dim(&c->out[0], od, &c->want[0], id);
    else sc_shard_unsplit_dim(&c->want[0], id);
  }
  c->out[0].partial = c->want[0].partial;
  return SC_OK;
}

/* Trilu: the matrix (last two dims) whole; leading dims pass; linear. */
sc_status sc_shard_trilu(sc_shard_ctx *c) {
  int32_t r = inv(c, 0)->rank;
  if (r < 2) return sc_shard_replicate_all(c);
  if (inv(c, 1)) want_whole(c, 1);
  sc_shard_unsplit_dim(&c->want[0], r - 1);
  sc_shard_unsplit_dim(&c->want[0], r - 2);
  c->out[0] = c->want[0];
  return SC_OK;
}

/* ---- the table and its check ---- */

/* s fits value v (NULL: an absent operand, rank-0 replicated). */
static bool fits(const sc_sharding *s, const sc_mesh *m, const sc_value *v) {
  if (!v) return s->rank == 0 && sc_sharding_is_replicated(s);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (s->rank != v->rank || sc_sharding_validate(s, m, &d) != SC_OK) return false;
  for (int32_t k = 0; k < s->rank; k++)
    if (!sc_shard_divides(s, m, k, v->dims[k])) return false;
  return true;
}

static bool result_ok(const sc_shard_ctx *c) {
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    if (!fits(&c->want[i], c->mesh, v)) return false;
    if (v && (c->want[i].partial & ~c->in[i].partial) &&
        !can_join_sum(v, &c->in[i], c->want[i].partial))
      return false;
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++)
    if (!fits(&c->out[j], c->mesh, outv(c, j))) return false;
  return c->expand == SC_SHARD_EXPAND_NONE ||
         (c->expand == SC_SHARD_EXPAND_MASKED_GATHER && c->n->op == SC_OP_GATHER) ||
         (c->expand == SC_SHARD_EXPAND_MASKED_SCATTER && c->n->op == SC_OP_SCATTER_ND) ||
         (c->expand == SC_SHARD_EXPAND_SPLIT_SOFTMAX &&
          (c->n->op == SC_OP_SOFTMAX || c->n->op == SC_OP_LOG_SOFTMAX)) ||
         (c->expand == SC_SHARD_EXPAND_GROUP_REDUCE &&
          (c->n->op == SC_OP_REDUCE_MAX || c->n->op == SC_OP_REDUCE_MIN)) ||
         (c->expand == SC_SHARD_EXPAND_SCALED_MEAN && c->n->op == SC_OP_REDUCE_MEAN) ||
         (c->expand == SC_SHARD_EXPAND_RING_ATTENTION &&
          (c->n->op == SC_OP_FUSED_ATTENTION || c->n->op == SC_OP_FUSED_ATTENTION_GRAD));
}

/* Sets the contract's entry state, runs rule and checks its result. */
static sc_status run_checked(sc_shard_ctx *c, sc_shard_fn rule) {
  bool shaped = true;
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    if (v && (v->rank < 0 || c->in[i].rank != v->rank)) shaped = false;
    c->want[i] = c->in[i];
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *v = outv(c, j);
    if (v && v->rank < 0) shaped = false;
    sc_sharding_replicated(&c->out[j], v && v->rank > 0 ? v->rank : 0);
  }
  c->expand = SC_SHARD_EXPAND_NONE;
  if (!shaped || (c->n->n_inputs > 0 && !inv(c, 0))) return sc_shard_replicate_all(c);
  sc_status st = rule(c);
  if (st != SC_OK) return st;
  if (result_ok(c)) return SC_OK;
  /* an attention in the zig-zag order runs as a ring or not at all */
  if (sc_attr_int(c->g, c->n, "cp_ring", 0) > 1)
    return sc_node_error(c->g, c->n, SC_ERR_USAGE,
                         "context parallelism: this attention cannot run as a ring here (its "
                         "operands do not split over cp)");
  return sc_shard_replicate_all(c);
}

#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  static sc_status checked_##id(sc_shard_ctx *c) { return run_checked(c, sc_##shard); }
#include "ir/ops.def"
#undef OP

static const sc_shard_fn table[SC_OP_COUNT] = {
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  [SC_OP_##id] = checked_##id,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof table / sizeof table[0] == SC_OP_COUNT, "one sharding rule per op");

sc_shard_fn sc_shard_rule(sc_op op) {
  return (unsigned)op < SC_OP_COUNT ? table[op] : NULL;
}

/* ---- ScatterND ---- */

/* The masked form (SC_SHARD_EXPAND_MASKED_SCATTER) of a ScatterND marked
 * `__rows_axis` = axis by tp.c (a vocabulary-parallel lookup's gradient,
 * into zeros [rows, cols]; indices [.., 1], updates [.., cols]): the zeros
 * split on their rows over axis, like the table. The indices and updates
 * are gathered over that axis (every rank sees every id; under sequence
 * parallelism the tokens' gradient is all-gathered over tp, where the
 * unmasked scatter left a whole table pending over tp, reduce-scattered
 * each microbatch), their rows kept split alike over other axes, over
 * which the result is pending (the batch's rows over dp: reduced once a
 * step), the updates' columns split like the data's. Updates pending over
 * other axes keep the result pending over them; over the rows' own axis
 * they are reduced first. Megatron's VocabParallelEmbedding backward. */
static sc_status masked_scatter(sc_shard_ctx *c, int32_t lead, int32_t axis) {
  const sc_value *idx = inv(c, 1), *upd = inv(c, 2);
  sc_shard_unsplit_dim(&c->want[0], 0);
  sc_sharding_split(&c->want[0], 0, axis);
  sc_axes own = dim_mask(&c->want[0], 0), cols = dim_mask(&c->want[0], 1), rows = 0;
  /* updates pending (over cp: a ring attention's gradient) stay pending */
  sc_axes pend = c->in[2].partial & ~own;
  c->want[2].partial = pend;
  sc_shard_unsplit_dim(&c->want[2], lead);
  sc_shard_copy_dim(&c->want[2], lead, &c->want[0], 1);
  for (int32_t d = 0; d < lead; d++) {
    sc_axes ax = dim_mask(&c->in[2], d);
    bool alike = !c->in[1].n_dim_axes[d] || same_dim(&c->in[1], d, &c->in[2], d);
    if (ax && !(ax & (own | cols | rows | pend)) && alike &&
        sc_sharding_stride(&c->in[2], d) == 1 && idx->dims[d] == upd->dims[d]) {
      sc_shard_copy_dim(&c->want[1], d, &c->in[2], d); /* whole indices: sliced alike */
      rows |= ax;
      continue;
    }
    sc_shard_unsplit_dim(&c->want[1], d); /* gathered */
    sc_shard_unsplit_dim(&c->want[2], d);
  }
  sc_shard_unsplit_dim(&c->want[1], lead);
  c->want[0].partial = rows | pend;
  c->out[0] = c->want[0];
  c->expand = SC_SHARD_EXPAND_MASKED_SCATTER;
  return SC_OK;
}

/* With reduction "add" (an embedding's gradient: dy's rows added into
 * zeros) whose indices and updates arrive split the same way over their
 * leading (row) dims (whole indices are sliced like the updates: a
 * permutation's gradient under cp): each rank adds its rows into its own
 * copy, and the sum over those axes is the whole — the output is pending
 * over them, the data joins the pending sum (its first rank holds it). The
 * updates' trailing dims follow the data's (whole data takes the updates'
 * split there: those dims are not indexed). With "add", the scatter is linear in
 * the data and the updates: updates pending over some axes (the gradient
 * of a position embedding read with constant indices: the batch's rows
 * summed, pending over the data axes) keep it pending, whole, the data
 * joining the sum, so a pipelined step reduces it once per step, not per
 * microbatch. A ScatterND tp.c marks `__rows_axis` (a vocabulary-parallel
 * lookup's gradient) takes the masked form above. Anything else is
 * computed whole. */
sc_status sc_shard_scatter_nd(sc_shard_ctx *c) {
  const sc_value *data = inv(c, 0), *idx = inv(c, 1), *upd = inv(c, 2);
  const char *red = sc_attr_string(c->g, c->n, "reduction", "none");
  if (!data || !idx || !upd || strcmp(red, "add") != 0 || idx->rank < 1 ||
      idx->dims[idx->rank - 1] < 0)
    return sc_shard_replicate_all(c);
  int32_t lead = idx->rank - 1, k = (int32_t)idx->dims[idx->rank - 1];
  int64_t own = sc_attr_int(c->g, c->n, "__rows_axis", -1); /* tp.c, mark_lookup_grads */
  if (own >= 0 && own < c->mesh->n_axes && k == 1 && data->rank == 2 && upd->rank == lead + 1 &&
      data->dims[0] % c->mesh->axes[own].size == 0 && !c->in[0].partial && !c->in[1].partial &&
      !(dim_mask(&c->in[0], 1) & (1u << own)) && sc_sharding_stride(&c->in[0], 1) == 1)
    return masked_scatter(c, lead, (int32_t)own);
  sc_axes pend = c->in[2].partial;
  if (pend && !c->in[1].partial && !(c->in[0].partial & ~pend)) {
    sc_sharding_replicated(&c->want[0], data->rank);
    sc_sharding_replicated(&c->want[1], idx->rank);
    sc_sharding_replicated(&c->want[2], upd->rank);
    /* updates' rows split too (a position table's gradient under fsdp x
     * cp: pending over fsdp, its rows over cp) stay split, whole indices
     * sliced alike, and the sum pends over their axes as well */
    sc_axes rows = 0;
    for (int32_t d = 0; d < idx->rank - 1 && d < upd->rank; d++) {
      sc_axes ax = dim_mask(&c->in[2], d);
      /* indices whole there, or split as the updates are (the batch's
       * rows over dp of a gradient pending over cp) */
      bool alike = !c->in[1].n_dim_axes[d] || same_dim(&c->in[1], d, &c->in[2], d);
      if (!ax || (ax & (pend | rows)) || !alike || sc_sharding_stride(&c->in[2], d) != 1 ||
          idx->dims[d] != upd->dims[d])
        continue;
      sc_shard_copy_dim(&c->want[1], d, &c->in[2], d);
      sc_shard_copy_dim(&c->want[2], d, &c->in[2], d);
      rows |= ax;
    }
    c->want[0].partial = pend | rows;
    c->want[2].partial = pend;
    c->out[0] = c->want[0];
    return SC_OK;
  }
  if (upd->rank != lead + data->rank - k || c->in[0].partial || c->in[1].partial ||
      c->in[2].partial)
    return sc_shard_replicate_all(c);
  sc_axes rows = 0;
  bool same = true;
  for (int32_t d = 0; d < lead; d++) {
    if (!c->in[1].n_dim_axes[d] && c->in[2].n_dim_axes[d] && sc_sharding_stride(&c->in[2], d) == 1)
      sc_shard_copy_dim(&c->want[1], d, &c->in[2], d); /* whole indices: sliced alike */
    same &= c->want[1].n_dim_axes[d] == c->in[2].n_dim_axes[d] &&
            sc_sharding_stride(&c->want[1], d) == 1 && sc_sharding_stride(&c->in[2], d) == 1;
    for (int32_t j = 0; same && j < c->in[2].n_dim_axes[d]; j++) {
      same &= c->want[1].dim_axes[d][j] == c->in[2].dim_axes[d][j];
      rows |= 1u << c->in[2].dim_axes[d][j];
    }
  }
  if (!same || !rows) return sc_shard_replicate_all(c);
  sc_shard_unsplit_dim(&c->want[1], lead); /* the index tuples whole */
  /* the data: whole over its indexed dims; its trailing dims as they are,
   * and the updates' trailing dims like them */
  for (int32_t d = 0; d < k; d++) sc_shard_unsplit_dim(&c->want[0], d);
  for (int32_t d = k; d < data->rank; d++) { /* whole data: sliced like the updates */
    sc_axes ax = 0;
    for (int32_t j = 0; j < c->in[2].n_dim_axes[lead + d - k]; j++)
      ax |= 1u << c->in[2].dim_axes[lead + d - k][j];
    if (ax && !c->want[0].n_dim_axes[d] && !(ax & (rows | sc_sharding_dim_axes(&c->want[0]))))
      sc_shard_copy_dim(&c->want[0], d, &c->in[2], lead + d - k);
  }
  if (sc_sharding_dim_axes(&c->want[0]) & rows) return sc_shard_replicate_all(c);
  for (int32_t d = k; d < data->rank; d++) sc_shard_copy_dim(&c->want[2], lead + d - k, &c->want[0], d);
  c->want[0].partial = rows;
  c->out[0] = c->want[0];
  return SC_OK;
}

/* ---- fused attention ---- */

/* A FusedAttention or FusedAttentionGrad marked `cp_ring`
 * (passes/partition/cp.c): its rows are in the zig-zag order, so it must
 * run as a ring, with q's sequence (dim 2) split over cp and nothing else
 * on that dim: k and v (the backward's o, lse and d_o) then split alike,
 * the outputs (o and lse; dq, dk and dv) on dim 2 too. Anything else is an error, never a whole
 * attention under the wrong mask. */
static sc_status ring_rule(sc_shard_ctx *c, const sc_sharding *lead, bool grad) {
  if (sc_attr_int(c->g, c->n, "cp_ring", 0) <= 1) return SC_OK;
  int32_t cp = sc_mesh_find_axis(c->mesh, "cp");
  if (cp < 0 || lead->n_dim_axes[2] != 1 || lead->dim_axes[2][0] != cp ||
      sc_sharding_stride(lead, 2) != 1)
    return sc_node_error(c->g, c->n, SC_ERR_USAGE,
                         "context parallelism: the sequence split over cp did not reach this "
                         "attention's queries (an op on the way gathers it)");
  for (int32_t i = 0; i < (grad ? 6 : 3); i++) { /* q, k, v (o, lse, d_o) */
    sc_shard_unsplit_dim(&c->want[i], 2);
    sc_sharding_split(&c->want[i], 2, cp);
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    sc_shard_unsplit_dim(&c->out[j], 2);
    sc_sharding_split(&c->out[j], 2, cp);
  }
  c->expand = SC_SHARD_EXPAND_RING_ATTENTION;
  return SC_OK;
}

/* FusedAttention(q, k, v[, mask]) -> (o, lse) and FusedAttentionGrad(q, k,
 * v, o, lse, d_o[, mask]) -> (dq, dk, dv) (ir/attention.h): batches and
 * heads are independent. The batch dim (0) keeps q's split; the heads dim
 * (1) keeps q's split when it has no stride and divides both the heads and
 * the kv heads (then local head i still reads local kv head i / (h / kvh)).
 * Every operand's dims 0 and 1 follow (a mask's only where it is whole on
 * that dim, rank 4 or the heads' dim of rank 3); every other dim, and every
 * pending sum, is gathered. */
sc_status sc_shard_attention(sc_shard_ctx *c) {
  const sc_value *q = inv(c, 0), *k = inv(c, 1);
  if (q->rank != 4 || k->rank != 4) return sc_shard_replicate_all(c);
  bool grad = c->n->op == SC_OP_FUSED_ATTENTION_GRAD;
  sc_sharding lead = c->in[0];
  sc_sharding_replicated(&c->want[0], 4);
  sc_axes used = 0;
  bool batch = carry(c, &c->want[0], 0, &lead, 0, &used, q->dims[0]);
  bool heads = sc_sharding_stride(&lead, 1) == 1 &&
               carry(c, &c->want[0], 1, &lead, 1, &used, q->dims[1]) &&
               sc_shard_divides(&lead, c->mesh, 1, k->dims[1]);
  if (!heads) sc_shard_unsplit_dim(&c->want[0], 1);
  int32_t mask_in = grad ? 6 : 3;
  for (int32_t i = 0; i < c->n->n_inputs; i++) {
    const sc_value *v = inv(c, i);
    if (!v) continue;
    sc_sharding_replicated(&c->want[i], v->rank);
    if (i == mask_in) { /* dims of size 1 broadcast: stay whole */
      int32_t bd = v->rank == 4 ? 0 : -1, hd = v->rank >= 3 ? v->rank - 3 : -1;
      if (batch && bd >= 0 && v->dims[bd] == q->dims[0]) sc_shard_copy_dim(&c->want[i], bd, &lead, 0);
      if (heads && hd >= 0 && v->dims[hd] == q->dims[1]) sc_shard_copy_dim(&c->want[i], hd, &lead, 1);
      continue;
    }
    if (batch && v->rank >= 1) sc_shard_copy_dim(&c->want[i], 0, &lead, 0);
    if (heads && v->rank >= 2) sc_shard_copy_dim(&c->want[i], 1, &lead, 1);
  }
  for (int32_t j = 0; j < c->n->n_outputs; j++) {
    const sc_value *o = outv(c, j);
    if (!o) continue;
    if (batch && o->rank >= 1) sc_shard_copy_dim(&c->out[j], 0, &lead, 0);
    if (heads && o->rank >= 2) sc_shard_copy_dim(&c->out[j], 1, &lead, 1);
  }
  return ring_rule(c, &lead, grad);
}
