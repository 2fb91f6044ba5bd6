/* ring.c — ring attention's forward and backward as graph nodes (docs/context-parallel.md,
 * "Ring attention in the IR"): what FusedAttention becomes on a rank whose
 * queries, keys and values hold its two chunks of the zig-zag layout
 * (ir/context_parallel.h).
 *
 * Emitted, for a ring of n ranks over the axis a->axis (c = rows / 2):
 *   step 0   (o, lse) = FusedAttention(q, k, v) with the node's causal flag
 *   step i   k_i, v_i = Send/Recv with shift 1 of k_{i-1}, v_{i-1} (tags
 *            tag_base + 2i, + 2i + 1); then
 *            causal:  X = FusedAttention(q[c:], k_i[:c], v_i[:c]) placed at
 *                     rows [c, 2c) (Concat after an empty block: o 0, lse
 *                     -inf); Y = FusedAttention of rows half_rows[i] of q,
 *                     k_i and v_i (Gather, axis 2) placed back by
 *                     Gather(Concat(Y, empty), half_place[i]); each merged;
 *            no mask: FusedAttention(q, k_i, v_i), merged; a padded
 *            sequence's blocks (no causal flag) read step i's key mask
 *            key_mask[i] (-1e30 on the keys of padding rows), step 0's too.
 *   merge    m = max(lse_a, lse_b); s = e^(lse_a-m) + e^(lse_b-m);
 *            lse = m + log s; o = o_a e^(lse_a-m)/s + o_b e^(lse_b-m)/s.
 * half_rows[i] and half_place[i] depend on the rank (h of
 * sc_cp_ring_half), so the caller gives them as values each rank holds its
 * own piece of (sharded constants, or inputs). The accumulator's lse is
 * finite after step 0 (each row sees at least its own key under the causal
 * layout; every key without a mask), so an empty block's -inf adds 0.
 *
 * The backward (sc_partition_ring_attention_grad) walks the same blocks
 * with FusedAttentionGrad and the forward's merged o and lse (each block's
 * probabilities are then its share of the exact softmax, so the blocks'
 * gradients add up): dq accumulates on the rank; the keys' and values'
 * gradient accumulators travel with them (four Send/Recv pairs per step),
 * each block's gradient placed back into its rows (Concat with zeros, and
 * the Gather by half_place for Y), and one more hop takes them home.
 *
 * New values get their shapes (each emitted node is inferred once the
 * whole ring is emitted; q, k, v, the halves and d_o must have theirs). Nodes are named
 * "<name>/ring/...". Errors: SC_ERR_NOMEM, or g->diag's status. */
#include <math.h>
#include <string.h>

#include "passes/partition/partition.h"

typedef struct ring {
  sc_graph *g;
  const sc_cp_ring_args *a;
} ring;

static int32_t fresh(ring *r, const char *what) {
  char *base = sc_arena_printf(&r->g->arena, "%s/ring/%s", r->a->name, what);
  return base ? sc_graph_new_value(r->g, base) : -1;
}

/* One node of op over ins, with n_out fresh outputs into outs. */
static int32_t node(ring *r, sc_op op, const char *what, const int32_t *ins, int32_t n_in,
                    int32_t *outs, int32_t n_out) {
  for (int32_t j = 0; j < n_out; j++)
    if ((outs[j] = fresh(r, what)) < 0) return -1;
  /* named after its first output, a fresh (unique) value name */
  return sc_graph_add_node(r->g, op, r->g->values[outs[0]].name, ins, n_in, outs, n_out);
}

static int32_t node1(ring *r, sc_op op, const char *what, const int32_t *ins, int32_t n_in) {
  int32_t out;
  return node(r, op, what, ins, n_in, &out, 1) < 0 ? -1 : out;
}

static bool attr_int(ring *r, int32_t nid, const char *name, int64_t v) {
  sc_attr *at = sc_node_add_attr(r->g, nid, name, SC_ATTR_INT);
  if (at) at->i = v;
  return at != NULL;
}

static int32_t constant(ring *r, const char *what, sc_dtype t, int32_t rank, const int64_t *dims,
                        const void *data, uint64_t bytes) {
  int32_t v = fresh(r, what);
  if (v < 0 || sc_value_set_data(r->g, v, t, rank, dims, data, bytes, true) != SC_OK) return -1;
  return v;
}

/* FusedAttention(q, k, v[, mask]) into *o, *lse; mask < 0: none. */
static bool attend(ring *r, int32_t q, int32_t k, int32_t v, int32_t mask, bool causal,
                   int32_t *o, int32_t *lse) {
  int32_t outs[2];
  int32_t nid = node(r, SC_OP_FUSED_ATTENTION, "attn", (int32_t[]){q, k, v, mask},
                     mask >= 0 ? 4 : 3, outs, 2);
  if (nid < 0 || !attr_int(r, nid, "causal", causal)) return false;
  sc_attr *at = sc_node_add_attr(r->g, nid, "scale", SC_ATTR_FLOAT);
  if (!at) return false;
  at->f = r->a->scale;
  *o = outs[0], *lse = outs[1];
  return true;
}

/* x of the previous rank: Send(x) to key + 1, Recv from key - 1; like:
 * the value whose dtype and shape x has (k or v: x itself may have none
 * yet). */
static int32_t pass_on(ring *r, int32_t x, int32_t like, int32_t tag) {
  sc_graph *g = r->g;
  int32_t tok, y;
  int32_t s = node(r, SC_OP_SEND, "send", &x, 1, &tok, 1);
  int32_t t = s < 0 ? -1 : node(r, SC_OP_RECV, "recv", NULL, 0, &y, 1);
  if (t < 0) return -1;
  for (int32_t k = 0; k < 2; k++) {
    int32_t nid = k ? t : s;
    sc_attr *at = sc_node_add_attr(g, nid, "axes", SC_ATTR_STRINGS);
    if (!at || !(at->strings = sc_arena_array(&g->arena, 1, sizeof *at->strings)) ||
        !(at->strings[0] = sc_arena_strdup(&g->arena, r->a->axis)))
      return -1;
    at->n = 1;
    if (!attr_int(r, nid, "shift", 1) || !attr_int(r, nid, "tag", tag)) return -1;
  }
  const sc_value *xv = &g->values[like];
  sc_dtype dt = xv->dtype;
  int32_t rank = xv->rank;
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, xv->dims, sizeof dims);
  sc_attr *at = sc_node_add_attr(g, t, "dtype", SC_ATTR_STRING);
  if (!at || !(at->s = sc_arena_strdup(&g->arena, sc_dtype_name(dt)))) return -1;
  if (!(at = sc_node_add_attr(g, t, "shape", SC_ATTR_INTS)) ||
      !(at->ints = sc_arena_array(&g->arena, SC_MAX_RANK, sizeof *at->ints)))
    return -1;
  at->n = rank;
  memcpy(at->ints, dims, (size_t)rank * sizeof *at->ints);
  return y;
}

/* x (f32) as dtype t: itself when t is f32, else a Cast to t. */
static int32_t cast_to(ring *r, int32_t x, sc_dtype t) {
  if (t == SC_DTYPE_F32) return x;
  int32_t out;
  int32_t nid = node(r, SC_OP_CAST, "weight", &x, 1, &out, 1);
  return nid < 0 || !attr_int(r, nid, "to", sc_dtype_to_onnx(t)) ? -1 : out;
}

/* (o, lse) merged with (ob, lb) by log-sum-exp; axis3: an i64 [1] = [3].
 * The weights are computed from lse (f32) and cast to o's dtype (q's: a
 * bf16 or fp16 attention's outputs are of it) before they scale o. */
static bool merge(ring *r, int32_t *o, int32_t *lse, int32_t ob, int32_t lb, int32_t axis3) {
  int32_t m = node1(r, SC_OP_MAX, "max", (int32_t[]){*lse, lb}, 2);
  int32_t da = m < 0 ? -1 : node1(r, SC_OP_SUB, "sub", (int32_t[]){*lse, m}, 2);
  int32_t db = da < 0 ? -1 : node1(r, SC_OP_SUB, "sub", (int32_t[]){lb, m}, 2);
  int32_t ea = db < 0 ? -1 : node1(r, SC_OP_EXP, "exp", &da, 1);
  int32_t eb = ea < 0 ? -1 : node1(r, SC_OP_EXP, "exp", &db, 1);
  int32_t s = eb < 0 ? -1 : node1(r, SC_OP_ADD, "sum", (int32_t[]){ea, eb}, 2);
  int32_t ls = s < 0 ? -1 : node1(r, SC_OP_LOG, "log", &s, 1);
  int32_t l = ls < 0 ? -1 : node1(r, SC_OP_ADD, "lse", (int32_t[]){m, ls}, 2);
  int32_t fa = l < 0 ? -1 : node1(r, SC_OP_DIV, "weight", (int32_t[]){ea, s}, 2);
  int32_t fb = fa < 0 ? -1 : node1(r, SC_OP_DIV, "weight", (int32_t[]){eb, s}, 2);
  sc_dtype t = r->g->values[r->a->q].dtype;
  int32_t ca = fb < 0 ? -1 : cast_to(r, fa, t);
  int32_t cb = ca < 0 ? -1 : cast_to(r, fb, t);
  int32_t wa = cb < 0 ? -1 : node1(r, SC_OP_UNSQUEEZE, "weight", (int32_t[]){ca, axis3}, 2);
  int32_t wb = wa < 0 ? -1 : node1(r, SC_OP_UNSQUEEZE, "weight", (int32_t[]){cb, axis3}, 2);
  int32_t pa = wb < 0 ? -1 : node1(r, SC_OP_MUL, "part", (int32_t[]){*o, wa}, 2);
  int32_t pb = pa < 0 ? -1 : node1(r, SC_OP_MUL, "part", (int32_t[]){ob, wb}, 2);
  int32_t on = pb < 0 ? -1 : node1(r, SC_OP_ADD, "o", (int32_t[]){pa, pb}, 2);
  if (on < 0) return false;
  *o = on, *lse = l;
  return true;
}

/* rows [from, from + n) of x along axis 2 */
static int32_t rows(ring *r, int32_t x, int64_t from, int64_t n) {
  int64_t one = 1, start = from, end = from + n, axis = 2;
  int32_t vs = constant(r, "start", SC_DTYPE_I64, 1, &one, &start, sizeof start);
  int32_t ve = vs < 0 ? -1 : constant(r, "end", SC_DTYPE_I64, 1, &one, &end, sizeof end);
  int32_t va = ve < 0 ? -1 : constant(r, "axes", SC_DTYPE_I64, 1, &one, &axis, sizeof axis);
  return va < 0 ? -1 : node1(r, SC_OP_SLICE, "rows", (int32_t[]){x, vs, ve, va}, 4);
}

static int32_t concat2(ring *r, int32_t a, int32_t b) {
  int32_t out;
  int32_t nid = node(r, SC_OP_CONCAT, "place", (int32_t[]){a, b}, 2, &out, 1);
  return nid < 0 || !attr_int(r, nid, "axis", 2) ? -1 : out;
}

static int32_t gather_rows(ring *r, int32_t x, int32_t idx) {
  int32_t out;
  int32_t nid = node(r, SC_OP_GATHER, "half", (int32_t[]){x, idx}, 2, &out, 1);
  return nid < 0 || !attr_int(r, nid, "axis", 2) ? -1 : out;
}

/* A constant [b, h, c, w] of dtype t, zero (lse false), or [b, h, c] f32
 * of -inf (lse true): an empty block's o or lse, a gradient block's zeros. */
static int32_t empty(ring *r, const char *what, sc_dtype t, int64_t b, int64_t h, int64_t c,
                     int64_t w, bool lse) {
  int64_t dims[4] = {b, h, c, w}, n = b * h * c * (lse ? 1 : w);
  size_t esz = lse ? sizeof(float) : sc_dtype_size(t);
  char *data = sc_calloc((size_t)(n > 0 ? n : 1), esz);
  if (!data) return -1;
  for (int64_t i = 0; lse && i < n; i++) ((float *)data)[i] = -INFINITY;
  int32_t v = constant(r, what, lse ? SC_DTYPE_F32 : t, lse ? 3 : 4, dims, data,
                       (uint64_t)n * esz);
  sc_free(data);
  return v;
}

/* Checks the shapes (q, k, v of rank 4, an even sequence, the halves when
 * causal); *c the chunk's rows. */
static sc_status check(ring *r, int64_t *c) {
  sc_graph *g = r->g;
  const sc_cp_ring_args *a = r->a;
  const sc_value *qv = &g->values[a->q];
  if (qv->rank != 4 || (a->causal && qv->dims[2] % 2 != 0) || a->n < 1 ||
      g->values[a->k].rank != 4 || g->values[a->v].rank != 4 ||
      (a->causal && a->n > 1 && (!a->half_rows || !a->half_place || a->key_mask)))
    return sc_graph_error(g, SC_ERR_INVALID,
                          "%s: ring attention needs q, k, v of rank 4 and, causal, an even "
                          "sequence, each step's halves and no key mask",
                          a->name);
  *c = qv->dims[2] / 2;
  return SC_OK;
}

/* Step i's key mask, or -1 (none). */
static int32_t key_mask(const sc_cp_ring_args *a, int32_t i) {
  return a->key_mask ? a->key_mask[i] : -1;
}

static sc_status failed(ring *r) {
  return r->g->diag.status != SC_OK ? r->g->diag.status : SC_ERR_NOMEM;
}

/* Shapes of the nodes emitted from node `first` on, in order (each reads
 * only values made before it). */
static sc_status infer_from(ring *r, int32_t first) {
  for (int32_t i = first; i < r->g->n_nodes; i++) {
    sc_status st = sc_ops[r->g->nodes[i].op].infer(r->g, &r->g->nodes[i]);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

sc_status sc_partition_ring_attention(sc_graph *g, const sc_cp_ring_args *a, int32_t *o_out,
                                      int32_t *lse_out) {
  ring R = {g, a}, *r = &R;
  int32_t first = g->n_nodes;
  int64_t c;
  sc_status st = check(r, &c);
  if (st != SC_OK) return st;
  const sc_value *qv = &g->values[a->q];
  int64_t b = qv->dims[0], h = qv->dims[1], dv_dim = g->values[a->v].dims[3];
  sc_dtype t = qv->dtype;
  /* the empty block: o = 0 [b, h, c, dv], lse = -inf [b, h, c] */
  int32_t eo = -1, el = -1, axis3;
  int64_t one = 1, three = 3;
  if ((axis3 = constant(r, "axis", SC_DTYPE_I64, 1, &one, &three, sizeof three)) < 0)
    return failed(r);
  if (a->causal && a->n > 1 && ((eo = empty(r, "empty_o", t, b, h, c, dv_dim, false)) < 0 ||
                                (el = empty(r, "empty_lse", t, b, h, c, 1, true)) < 0))
    return failed(r);
  int32_t o, lse, k = a->k, v = a->v;
  if (!attend(r, a->q, k, v, key_mask(a, 0), a->causal, &o, &lse)) return failed(r);
  for (int32_t i = 1; i < a->n; i++) {
    if ((k = pass_on(r, k, a->k, a->tag_base + 2 * i)) < 0 ||
        (v = pass_on(r, v, a->v, a->tag_base + 2 * i + 1)) < 0)
      return failed(r);
    int32_t ob, lb;
    if (!a->causal) {
      if (!attend(r, a->q, k, v, key_mask(a, i), false, &ob, &lb) ||
          !merge(r, &o, &lse, ob, lb, axis3))
        return failed(r);
      continue;
    }
    /* X: queries H1 against keys H0, placed at rows [c, 2c) */
    int32_t qx = rows(r, a->q, c, c), kx = qx < 0 ? -1 : rows(r, k, 0, c);
    int32_t vx = kx < 0 ? -1 : rows(r, v, 0, c);
    if (vx < 0 || !attend(r, qx, kx, vx, -1, false, &ob, &lb)) return failed(r);
    if ((ob = concat2(r, eo, ob)) < 0 || (lb = concat2(r, el, lb)) < 0 ||
        !merge(r, &o, &lse, ob, lb, axis3))
      return failed(r);
    /* Y: queries Hh against keys Hh, placed back at half h */
    int32_t idx = a->half_rows[i], place = a->half_place[i];
    int32_t qy = gather_rows(r, a->q, idx), ky = qy < 0 ? -1 : gather_rows(r, k, idx);
    int32_t vy = ky < 0 ? -1 : gather_rows(r, v, idx);
    if (vy < 0 || !attend(r, qy, ky, vy, -1, false, &ob, &lb)) return failed(r);
    if ((ob = concat2(r, ob, eo)) < 0 || (lb = concat2(r, lb, el)) < 0 ||
        (ob = gather_rows(r, ob, place)) < 0 || (lb = gather_rows(r, lb, place)) < 0 ||
        !merge(r, &o, &lse, ob, lb, axis3))
      return failed(r);
  }
  *o_out = o, *lse_out = lse;
  return infer_from(r, first);
}

/* FusedAttentionGrad of one block into g3[3] (dq, dk, dv), under the
 * additive mask `mask` (< 0: none). */
static bool attend_grad(ring *r, const int32_t in[6], int32_t mask, bool causal, int32_t g3[3]) {
  int32_t all[7] = {in[0], in[1], in[2], in[3], in[4], in[5], mask};
  int32_t nid = node(r, SC_OP_FUSED_ATTENTION_GRAD, "attn_grad", all, mask >= 0 ? 7 : 6, g3, 3);
  if (nid < 0 || !attr_int(r, nid, "causal", causal)) return false;
  sc_attr *at = sc_node_add_attr(r->g, nid, "scale", SC_ATTR_FLOAT);
  if (!at) return false;
  at->f = r->a->scale;
  return true;
}

/* *acc += x */
static bool accumulate(ring *r, int32_t *acc, int32_t x) {
  return (*acc = node1(r, SC_OP_ADD, "acc", (int32_t[]){*acc, x}, 2)) >= 0;
}

sc_status sc_partition_ring_attention_grad(sc_graph *g, const sc_cp_ring_args *a, int32_t o,
                                           int32_t lse, int32_t d_o, int32_t *dq_out,
                                           int32_t *dk_out, int32_t *dv_out) {
  ring R = {g, a}, *r = &R;
  int32_t first = g->n_nodes;
  int64_t c;
  sc_status st = check(r, &c);
  if (st != SC_OK) return st;
  const sc_value *qv = &g->values[a->q], *kv = &g->values[a->k];
  int64_t b = qv->dims[0], h = qv->dims[1], kvh = kv->dims[1], d = qv->dims[3];
  int64_t dv_dim = g->values[a->v].dims[3];
  sc_dtype t = qv->dtype;
  int32_t zq = -1, zk = -1, zv = -1;
  if (a->causal && a->n > 1 && ((zq = empty(r, "zero_dq", t, b, h, c, d, false)) < 0 ||
                                (zk = empty(r, "zero_dk", t, b, kvh, c, d, false)) < 0 ||
                                (zv = empty(r, "zero_dv", t, b, kvh, c, dv_dim, false)) < 0))
    return failed(r);
  int32_t g3[3];
  if (!attend_grad(r, (int32_t[]){a->q, a->k, a->v, o, lse, d_o}, key_mask(a, 0), a->causal, g3))
    return failed(r);
  int32_t dq = g3[0], dk = g3[1], dv = g3[2], k = a->k, v = a->v;
  for (int32_t i = 1; i < a->n; i++) {
    int32_t tag = a->tag_base + 4 * i;
    if ((k = pass_on(r, k, a->k, tag)) < 0 || (v = pass_on(r, v, a->v, tag + 1)) < 0 ||
        (dk = pass_on(r, dk, a->k, tag + 2)) < 0 || (dv = pass_on(r, dv, a->v, tag + 3)) < 0)
      return failed(r);
    if (!a->causal) {
      if (!attend_grad(r, (int32_t[]){a->q, k, v, o, lse, d_o}, key_mask(a, i), false, g3) ||
          !accumulate(r, &dq, g3[0]) || !accumulate(r, &dk, g3[1]) || !accumulate(r, &dv, g3[2]))
        return failed(r);
      continue;
    }
    /* X: query rows H1 (q, o, lse, d_o) against key rows H0; dq placed at
     * H1, dk and dv at H0 */
    int32_t in[6] = {rows(r, a->q, c, c), rows(r, k, 0, c), rows(r, v, 0, c),
                     rows(r, o, c, c), rows(r, lse, c, c), rows(r, d_o, c, c)};
    for (int32_t j = 0; j < 6; j++)
      if (in[j] < 0) return failed(r);
    if (!attend_grad(r, in, -1, false, g3)) return failed(r);
    int32_t pq = concat2(r, zq, g3[0]), pk = pq < 0 ? -1 : concat2(r, g3[1], zk);
    int32_t pv = pk < 0 ? -1 : concat2(r, g3[2], zv);
    if (pv < 0 || !accumulate(r, &dq, pq) || !accumulate(r, &dk, pk) || !accumulate(r, &dv, pv))
      return failed(r);
    /* Y: rows Hh of all six, each gradient placed back at half h */
    int32_t idx = a->half_rows[i], place = a->half_place[i];
    const int32_t from[6] = {a->q, k, v, o, lse, d_o};
    for (int32_t j = 0; j < 6; j++)
      if ((in[j] = gather_rows(r, from[j], idx)) < 0) return failed(r);
    if (!attend_grad(r, in, -1, false, g3)) return failed(r);
    const int32_t zero[3] = {zq, zk, zv};
    int32_t *acc[3] = {&dq, &dk, &dv};
    for (int32_t j = 0; j < 3; j++) {
      int32_t p = concat2(r, g3[j], zero[j]);
      if (p < 0 || (p = gather_rows(r, p, place)) < 0 || !accumulate(r, acc[j], p))
        return failed(r);
    }
  }
  /* the gradients of the keys and values in hand go home: one more hop */
  if (a->n > 1 && ((dk = pass_on(r, dk, a->k, a->tag_base + 4 * a->n)) < 0 ||
                   (dv = pass_on(r, dv, a->v, a->tag_base + 4 * a->n + 1)) < 0))
    return failed(r);
  *dq_out = dq, *dk_out = dk, *dv_out = dv;
  return infer_from(r, first);
}
