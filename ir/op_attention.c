/* op_attention.c — shape inference and cost of the fused attention ops
 * (ir/attention.h; family A of ops.def). Internal ops: made by
 * passes/fuse_attention.c and by their gradient rule, never imported, never
 * folded. */
#include "ir/attention.h"

#include <math.h>
#include <string.h>

#include "ir/op_util.h"

bool sc_attention_mask_fits(int32_t rank, const int64_t *dims, int64_t b, int64_t h, int64_t sq,
                            int64_t skv, int64_t *sb, int64_t *sh) {
  if (rank < 2 || rank > 4 || dims[rank - 2] != sq || dims[rank - 1] != skv) return false;
  int64_t mb = rank == 4 ? dims[0] : 1, mh = rank >= 3 ? dims[rank - 3] : 1;
  if ((mb != 1 && mb != b) || (mh != 1 && mh != h)) return false;
  *sh = mh == 1 ? 0 : sq * skv;
  *sb = mb == 1 ? 0 : mh * sq * skv;
  return true;
}

static bool attn_float(sc_dtype t) {
  return t == SC_DTYPE_F32 || t == SC_DTYPE_BF16 || t == SC_DTYPE_F16;
}

sc_status sc_attention_read(sc_graph *g, const sc_node *n, sc_attention_shape *s) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  bool grad = n->op == SC_OP_FUSED_ATTENTION_GRAD;
  const sc_value *q = sc_node_input(g, n, 0), *k = sc_node_input(g, n, 1);
  const sc_value *v = sc_node_input(g, n, 2);
  const sc_value *m = sc_node_input(g, n, grad ? 6 : 3);
  int64_t causal;
  memset(s, 0, sizeof *s);
  if ((st = sc_read_attr_float(g, n, "scale", 1.0, &s->scale)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "causal", 0, &causal)) != SC_OK)
    return st;
  if (causal != 0 && causal != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "causal = %lld (0 or 1)", (long long)causal);
  if (!isfinite(s->scale) || fabs(s->scale) > 3.4e38)
    return sc_node_error(g, n, SC_ERR_INVALID, "scale %g is not a finite f32", s->scale);
  s->causal = causal;
  if (q->rank != 4 || k->rank != 4 || v->rank != 4)
    return sc_node_error(g, n, SC_ERR_INVALID, "q, k and v have rank 4 ([batch, heads, seq, "
                         "dim]), not %d, %d, %d", (int)q->rank, (int)k->rank, (int)v->rank);
  s->t = q->dtype;
  if (!attn_float(s->t) || k->dtype != s->t || v->dtype != s->t)
    return sc_node_error(g, n, SC_ERR_INVALID, "q, k, v are %s, %s, %s (one of f32, bf16, f16)",
                         sc_dtype_name(q->dtype), sc_dtype_name(k->dtype),
                         sc_dtype_name(v->dtype));
  s->b = q->dims[0], s->h = q->dims[1], s->sq = q->dims[2], s->d = q->dims[3];
  s->kvh = k->dims[1], s->skv = k->dims[2], s->dv = v->dims[3];
  if (k->dims[0] != s->b || v->dims[0] != s->b || v->dims[1] != s->kvh || v->dims[2] != s->skv ||
      k->dims[3] != s->d || s->kvh < 1 || s->h % s->kvh != 0 || s->d < 1 || s->dv < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "q [%lld,%lld,%lld,%lld], k [%lld,%lld,%lld,%lld] "
                         "and v [%lld,%lld,%lld,%lld] do not fit one attention",
                         (long long)q->dims[0], (long long)q->dims[1], (long long)q->dims[2],
                         (long long)q->dims[3], (long long)k->dims[0], (long long)k->dims[1],
                         (long long)k->dims[2], (long long)k->dims[3], (long long)v->dims[0],
                         (long long)v->dims[1], (long long)v->dims[2], (long long)v->dims[3]);
  if (m) {
    s->has_mask = true;
    s->mask_t = m->dtype;
    if (m->dtype != s->t && m->dtype != SC_DTYPE_F32)
      return sc_node_error(g, n, SC_ERR_INVALID, "the mask is %s (q's dtype or f32)",
                           sc_dtype_name(m->dtype));
    if (!sc_attention_mask_fits(m->rank, m->dims, s->b, s->h, s->sq, s->skv, &s->mask_stride_b,
                                &s->mask_stride_h))
      return sc_node_error(g, n, SC_ERR_INVALID, "the mask's shape does not fit [%lld, %lld, "
                           "%lld, %lld] (last two dims exact, the others 1 or whole)",
                           (long long)s->b, (long long)s->h, (long long)s->sq, (long long)s->skv);
  }
  if (grad) {
    const sc_value *o = sc_node_input(g, n, 3), *lse = sc_node_input(g, n, 4);
    const sc_value *d_o = sc_node_input(g, n, 5);
    int64_t od[4] = {s->b, s->h, s->sq, s->dv};
    bool ok = o->rank == 4 && d_o->rank == 4 && o->dtype == s->t && d_o->dtype == s->t &&
              lse->rank == 3 && lse->dtype == SC_DTYPE_F32 && lse->dims[0] == s->b &&
              lse->dims[1] == s->h && lse->dims[2] == s->sq;
    for (int32_t i = 0; ok && i < 4; i++) ok = o->dims[i] == od[i] && d_o->dims[i] == od[i];
    if (!ok)
      return sc_node_error(g, n, SC_ERR_INVALID, "o and d_o are not [%lld, %lld, %lld, %lld] "
                           "of q's dtype, or lse not [%lld, %lld, %lld] f32",
                           (long long)s->b, (long long)s->h, (long long)s->sq, (long long)s->dv,
                           (long long)s->b, (long long)s->h, (long long)s->sq);
  }
  return SC_OK;
}

double sc_attention_pairs(int64_t sq, int64_t skv, bool causal) {
  if (!causal) return (double)sq * (double)skv;
  /* row i sees min(skv, max(0, i + skv - sq + 1)) keys */
  double pairs = 0;
  int64_t off = skv - sq;
  int64_t first = -off > 0 ? -off : 0;              /* first row that sees a key */
  int64_t full = skv - 1 - off;                     /* from here rows see all skv */
  if (full < first) full = first;
  if (full > sq) full = sq;
  for (int64_t i = first; i < full; i++) pairs += (double)(i + off + 1);
  pairs += (double)(sq - full) * (double)skv;
  return pairs;
}

double sc_attention_flops(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d, int64_t dv,
                          bool causal, bool grad) {
  double f = 2.0 * (double)b * (double)h * sc_attention_pairs(sq, skv, causal) *
             (double)(d + dv);
  return grad ? SC_ATTENTION_GRAD_FLOPS * f : f;
}

sc_status sc_op_infer_attention(sc_graph *g, sc_node *n) {
  sc_attention_shape s;
  sc_status st = sc_attention_read(g, n, &s);
  if (st != SC_OK) return st;
  if (n->op == SC_OP_FUSED_ATTENTION_GRAD) {
    for (int32_t j = 0; j < 3; j++)
      if ((st = sc_same_as_input(g, n, j, j)) != SC_OK) return st;
    return SC_OK;
  }
  int64_t od[4] = {s.b, s.h, s.sq, s.dv};
  if ((st = sc_set_output(g, n, 0, s.t, 4, od)) != SC_OK) return st;
  return n->n_outputs > 1 ? sc_set_output(g, n, 1, SC_DTYPE_F32, 3, od) : SC_OK;
}

void sc_op_cost_attention(sc_graph *g, const sc_node *n, sc_cost *c) {
  c->flops = c->bytes = 0;
  sc_attention_shape s;
  sc_diag keep = g->diag;
  if (sc_attention_read(g, n, &s) != SC_OK) {
    g->diag = keep;
    return;
  }
  c->flops = sc_attention_flops(s.b, s.h, s.sq, s.skv, s.d, s.dv, s.causal,
                                n->op == SC_OP_FUSED_ATTENTION_GRAD);
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    int64_t k = v ? sc_value_bytes(v) : -1;
    if (k > 0) c->bytes += (double)k;
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    int64_t k = v ? sc_value_bytes(v) : -1;
    if (k > 0) c->bytes += (double)k;
  }
}
