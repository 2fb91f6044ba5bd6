/* ring.c — ring attention's forward as graph nodes (docs/context-parallel.md,
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
 *            no mask: FusedAttention(q, k_i, v_i), merged.
 *   merge    m = max(lse_a, lse_b); s = e^(lse_a-m) + e^(lse_b-m);
 *            lse = m + log s; o = o_a e^(lse_a-m)/s + o_b e^(lse_b-m)/s.
 * half_rows[i] and half_place[i] depend on the rank (h of
 * sc_cp_ring_half), so the caller gives them as values each rank holds its
 * own piece of (sharded constants, or inputs). The accumulator's lse is
 * finite after step 0 (each row sees at least its own key under the causal
 * layout; every key without a mask), so an empty block's -inf adds 0.
 *
 * New values get no shapes: infer-shapes gives them (q, k and v must have
 * theirs: the empty blocks are constants of q's shape). Nodes are named
 * "<name>/ring/...". Errors: SC_ERR_NOMEM, or g->diag's status. */
#include <math.h>
#include <string.h>

#include "passes/partition/partition.h"

typedef struct ring {
  sc_graph *g;
  const sc_cp_ring_args *a;
  int32_t n_nodes; /* emitted so far, for unique names */
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
  char *name = sc_arena_printf(&r->g->arena, "%s/ring/%s_%d", r->a->name, what, (int)r->n_nodes++);
  return name ? sc_graph_add_node(r->g, op, name, ins, n_in, outs, n_out) : -1;
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

/* FusedAttention(q, k, v) into *o, *lse. */
static bool attend(ring *r, int32_t q, int32_t k, int32_t v, bool causal, int32_t *o,
                   int32_t *lse) {
  int32_t outs[2];
  int32_t nid = node(r, SC_OP_FUSED_ATTENTION, "attn", (int32_t[]){q, k, v}, 3, outs, 2);
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

/* (o, lse) merged with (ob, lb) by log-sum-exp; axis3: an i64 [1] = [3]. */
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
  int32_t wa = fb < 0 ? -1 : node1(r, SC_OP_UNSQUEEZE, "weight", (int32_t[]){fa, axis3}, 2);
  int32_t wb = wa < 0 ? -1 : node1(r, SC_OP_UNSQUEEZE, "weight", (int32_t[]){fb, axis3}, 2);
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

sc_status sc_partition_ring_attention(sc_graph *g, const sc_cp_ring_args *a, int32_t *o_out,
                                      int32_t *lse_out) {
  ring R = {g, a, 0}, *r = &R;
  const sc_value *qv = &g->values[a->q];
  if (qv->rank != 4 || qv->dims[2] % 2 != 0 || a->n < 1 || g->values[a->k].rank != 4 ||
      g->values[a->v].rank != 4 ||
      (a->causal && a->n > 1 && (!a->half_rows || !a->half_place)))
    return sc_graph_error(g, SC_ERR_INVALID, "%s: ring attention needs q, k, v of rank 4 with an "
                          "even sequence and, causal, each step's halves", a->name);
  int64_t b = qv->dims[0], h = qv->dims[1], c = qv->dims[2] / 2, dv_dim = g->values[a->v].dims[3];
  /* the empty block: o = 0 [b, h, c, dv], lse = -inf [b, h, c] */
  int32_t eo = -1, el = -1, axis3;
  int64_t one = 1, three = 3;
  if ((axis3 = constant(r, "axis", SC_DTYPE_I64, 1, &one, &three, sizeof three)) < 0) goto fail;
  if (a->causal && a->n > 1) {
    int64_t n_o = b * h * c * dv_dim, n_l = b * h * c;
    float *zo = sc_calloc((size_t)(n_o > 0 ? n_o : 1), sizeof *zo);
    float *nl = sc_calloc((size_t)(n_l > 0 ? n_l : 1), sizeof *nl);
    if (zo && nl) {
      for (int64_t i = 0; i < n_l; i++) nl[i] = -INFINITY;
      eo = constant(r, "empty_o", SC_DTYPE_F32, 4, (int64_t[]){b, h, c, dv_dim}, zo,
                    (uint64_t)n_o * sizeof *zo);
      el = eo < 0 ? -1
                  : constant(r, "empty_lse", SC_DTYPE_F32, 3, (int64_t[]){b, h, c}, nl,
                             (uint64_t)n_l * sizeof *nl);
    }
    sc_free(zo);
    sc_free(nl);
    if (el < 0) goto fail;
  }
  int32_t o, lse, k = a->k, v = a->v;
  if (!attend(r, a->q, k, v, a->causal, &o, &lse)) goto fail;
  for (int32_t i = 1; i < a->n; i++) {
    if ((k = pass_on(r, k, a->k, a->tag_base + 2 * i)) < 0 ||
        (v = pass_on(r, v, a->v, a->tag_base + 2 * i + 1)) < 0)
      goto fail;
    int32_t ob, lb;
    if (!a->causal) {
      if (!attend(r, a->q, k, v, false, &ob, &lb) || !merge(r, &o, &lse, ob, lb, axis3))
        goto fail;
      continue;
    }
    /* X: queries H1 against keys H0, placed at rows [c, 2c) */
    int32_t qx = rows(r, a->q, c, c), kx = qx < 0 ? -1 : rows(r, k, 0, c);
    int32_t vx = kx < 0 ? -1 : rows(r, v, 0, c);
    if (vx < 0 || !attend(r, qx, kx, vx, false, &ob, &lb)) goto fail;
    if ((ob = concat2(r, eo, ob)) < 0 || (lb = concat2(r, el, lb)) < 0 ||
        !merge(r, &o, &lse, ob, lb, axis3))
      goto fail;
    /* Y: queries Hh against keys Hh, placed back at half h */
    int32_t idx = a->half_rows[i], place = a->half_place[i];
    int32_t qy = gather_rows(r, a->q, idx), ky = qy < 0 ? -1 : gather_rows(r, k, idx);
    int32_t vy = ky < 0 ? -1 : gather_rows(r, v, idx);
    if (vy < 0 || !attend(r, qy, ky, vy, false, &ob, &lb)) goto fail;
    if ((ob = concat2(r, ob, eo)) < 0 || (lb = concat2(r, lb, el)) < 0 ||
        (ob = gather_rows(r, ob, place)) < 0 || (lb = gather_rows(r, lb, place)) < 0 ||
        !merge(r, &o, &lse, ob, lb, axis3))
      goto fail;
  }
  *o_out = o, *lse_out = lse;
  return SC_OK;
fail:
  return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
}
