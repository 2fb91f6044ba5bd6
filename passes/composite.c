/* composite.c — the expansions of composite ops (SC_OPF_COMPOSITE in
 * ir/ops.def): ONNX ops that the IR defines by other ops of its table,
 * the way ONNX itself defines them by function bodies.
 *
 * infer-shapes calls sc_expand_composite when it reaches such a node, so
 * the inputs' dtypes and shapes are known: the expansion is written for
 * those shapes (a 3-D or 4-D Attention, a GQA head repeat, a causal mask
 * as a constant) instead of the shape arithmetic a function body needs.
 * It builds the new nodes with the gradient rules' builders (grad_rule.h;
 * names "<node>/def/<k>", shapes inferred at once), then makes the last
 * node of each output's computation write the composite's own output value,
 * so readers and graph outputs keep their values and names. The composite
 * node is marked dead; infer-shapes compacts and re-sorts the graph once at
 * its end. Because the expansion is ordinary ops, everything after import
 * (folding, fusion, sharding, autodiff, both backends) handles it with no
 * code of its own.
 *
 * The ops and their definitions (semantics: the ONNX operator docs):
 *   Attention (23–25)  Y = softmax(softcap(Q·√s @ (K·√s)ᵀ) + bias) @ V over
 *       [B, H, S, D] heads (3-D inputs split into q_num_heads /
 *       kv_num_heads and joined back), K and V after past_key/value along
 *       the sequence (outputs 1, 2), repeated for grouped-query heads; the
 *       bias is the float mask plus −∞ where a boolean mask, is_causal, the
 *       left/right windows or nonpad_kv_seqlen disallow a key (a mask
 *       shorter than the keys is padded with −∞ / false); a row with every
 *       key disallowed gives zeros; output 3 is the scores after the matmul,
 *       the softcap, the bias or the softmax (qk_matmul_output_mode 0–3);
 *   RotaryEmbedding (23)  per head, the first rotary_embedding_dim values
 *       (all by default) rotated in pairs (x1, x2) — the two halves, or
 *       neighbours when interleaved — by the cos and sin caches of the
 *       token's position: (cos x1 − sin x2, sin x1 + cos x2); the caches
 *       are [B, S, rot/2], or [positions, rot/2] read at position_ids
 *       ([B, S]; a 1-D [1] is onnxruntime's first position, the tokens
 *       following it);
 *   NegativeLogLikelihoodLoss  −input[n, t, d…] · weight[t] per element,
 *       0 where t = ignore_index; reduced by "none", "sum" or "mean" (the
 *       sum over the sum of the weights taken);
 *   SoftmaxCrossEntropyLoss  the same over LogSoftmax(scores, axis 1),
 *       which is output 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite.h"
#include "passes/grad_rule.h"

/* An expansion sets out[j] to the value computing output j (every
 * output the op has; the driver uses those the node asks for). */
typedef sc_status (*expand_fn)(sc_grad_ctx *c, int32_t *out);
enum { MAX_OUT = 8 };

static const sc_node *N(const sc_grad_ctx *c) { return &c->g->nodes[c->node]; }
static const sc_value *V(const sc_grad_ctx *c, int32_t v) { return &c->g->values[v]; }
static int32_t in_v(const sc_grad_ctx *c, int32_t i) {
  return i < N(c)->n_inputs ? N(c)->inputs[i] : -1;
}
/* A failed builder left g->diag set; NOMEM otherwise. */
static sc_status built(const sc_grad_ctx *c) {
  return c->g->diag.status ? c->g->diag.status : SC_ERR_NOMEM;
}

/* x with `dims` inserted before axis `at` as size-1 axes. */
static int32_t unsqueeze(sc_grad_ctx *c, int32_t x, int32_t at, int32_t n) {
  if (x < 0) return -1;
  const sc_value *v = V(c, x);
  int64_t d[SC_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < v->rank; i++) {
    if (i == at)
      for (int32_t k = 0; k < n; k++) d[r++] = 1;
    d[r++] = v->dims[i];
  }
  if (at == v->rank)
    for (int32_t k = 0; k < n; k++) d[r++] = 1;
  return gb_reshape(c, x, r, d);
}

static int32_t perm4(sc_grad_ctx *c, int32_t x, int64_t a, int64_t b, int64_t d, int64_t e) {
  return gb_transpose(c, x, (int64_t[]){a, b, d, e}, 4);
}

/* ---- Attention ---- */

typedef struct attn_attrs {
  int64_t causal, q_heads, kv_heads, mode, precision, left, right;
  double scale, softcap;
  bool has_scale;
} attn_attrs;

static sc_status attn_read(sc_grad_ctx *c, attn_attrs *a) {
  sc_graph *g = c->g;
  const sc_node *n = N(c);
  sc_status st;
  if ((st = sc_read_attr_int(g, n, "is_causal", 0, &a->causal)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "q_num_heads", 0, &a->q_heads)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "kv_num_heads", 0, &a->kv_heads)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "qk_matmul_output_mode", 0, &a->mode)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "softmax_precision", 0, &a->precision)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "left_window_size", -1, &a->left)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "right_window_size", -1, &a->right)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "softcap", 0.0, &a->softcap)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "scale", 0.0, &a->scale)) != SC_OK)
    return st;
  a->has_scale = sc_node_attr(n, "scale") != NULL;
  if (a->mode < 0 || a->mode > 3)
    return sc_node_error(g, n, SC_ERR_INVALID, "qk_matmul_output_mode %lld is not 0..3",
                         (long long)a->mode);
  if (a->left < -1 || a->right < -1)
    return sc_node_error(g, n, SC_ERR_INVALID, "a window size below -1");
  return SC_OK;
}

/* A 3-D [B, S, H·D] operand as [B, H, S, D]; a 4-D one as it is. */
static int32_t heads(sc_grad_ctx *c, int32_t x, int64_t h, const char *what) {
  const sc_value *v = V(c, x);
  if (v->rank == 4) return x;
  if (h <= 0 || v->dims[2] % h != 0) {
    sc_node_error(c->g, N(c), SC_ERR_INVALID,
                  "3-D %s of hidden size %lld needs %s dividing it (got %lld)", what,
                  (long long)v->dims[2], what[0] == 'Q' ? "q_num_heads" : "kv_num_heads",
                  (long long)h);
    return -1;
  }
  int64_t d[4] = {v->dims[0], v->dims[1], h, v->dims[2] / h};
  return perm4(c, gb_reshape(c, x, 4, d), 0, 2, 1, 3);
}

/* [B, Hkv, T, D] repeated to [B, Hkv·G, T, D], head h reading kv head h / G. */
static int32_t repeat_heads(sc_grad_ctx *c, int32_t x, int64_t groups) {
  if (x < 0 || groups == 1) return x;
  const sc_value *v = V(c, x);
  int64_t b = v->dims[0], h = v->dims[1], t = v->dims[2], d = v->dims[3];
  int32_t e = gb_expand(c, unsqueeze(c, x, 2, 1), 5, (int64_t[]){b, h, groups, t, d});
  return gb_reshape(c, e, 4, (int64_t[]){b, h * groups, t, d});
}

/* An int64 constant of `rank` dims, all 1 but dims[axis] = n, holding
 * 0..n-1 along it. */
static int32_t iota(sc_grad_ctx *c, int64_t n, int32_t rank, int32_t axis) {
  int64_t *v = sc_arena_array(&c->g->arena, (size_t)(n ? n : 1), sizeof *v);
  if (!v) return -1;
  for (int64_t i = 0; i < n; i++) v[i] = i;
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < rank; i++) d[i] = i == axis ? n : 1;
  return gb_reshape(c, gb_ints(c, v, (int32_t)n), rank, d);
}

static int32_t and_(sc_grad_ctx *c, int32_t a, int32_t b) {
  return a < 0 ? b : gb_2(c, SC_OP_AND, a, b);
}

/* The keys each query may see, from is_causal, the windows and
 * nonpad_kv_seqlen: a bool broadcastable to [B, 1, Sq, T], or -1 when
 * nothing restricts them. Query i sits at p = i + offset, offset
 * the past length, or nonpad - Sq per batch with an external cache. */
static int32_t allowed_keys(sc_grad_ctx *c, const attn_attrs *a, int64_t sq, int64_t t,
                            int64_t past, int32_t nonpad) {
  if (!a->causal && a->left < 0 && a->right < 0 && nonpad < 0) return -1;
  int32_t j = iota(c, t, 4, 3), pos = iota(c, sq, 4, 2), np = -1;
  if (nonpad >= 0) {
    int64_t nb = V(c, nonpad)->rank == 1 ? V(c, nonpad)->dims[0] : 1;
    np = gb_reshape(c, gb_cast(c, nonpad, SC_DTYPE_I64), 4, (int64_t[]){nb, 1, 1, 1});
  }
  if (past > 0) {
    pos = gb_2(c, SC_OP_ADD, pos, gb_scalar(c, SC_DTYPE_I64, (double)past));
  } else if (np >= 0) {
    pos = gb_2(c, SC_OP_ADD, pos, gb_2(c, SC_OP_SUB, np, gb_scalar(c, SC_DTYPE_I64, (double)sq)));
  }
  int32_t ok = -1;
  if (a->causal) ok = gb_2(c, SC_OP_LESS_EQUAL, j, pos);
  if (a->right >= 0)
    ok = and_(c, ok, gb_2(c, SC_OP_LESS_EQUAL, j,
                          gb_2(c, SC_OP_ADD, pos, gb_scalar(c, SC_DTYPE_I64, (double)a->right))));
  if (a->left >= 0)
    ok = and_(c, ok, gb_2(c, SC_OP_GREATER_EQUAL, j,
                          gb_2(c, SC_OP_SUB, pos, gb_scalar(c, SC_DTYPE_I64, (double)a->left))));
  if (np >= 0) ok = and_(c, ok, gb_2(c, SC_OP_LESS, j, np));
  return ok;
}

/* The mask input with its last axis padded to t: with `fill` (false or
 * -inf) when it is shorter. */
static int32_t pad_mask(sc_grad_ctx *c, int32_t m, int64_t t) {
  const sc_value v0 = *V(c, m), *v = &v0; /* builders move g->values */
  int64_t have = v->rank ? v->dims[v->rank - 1] : 1;
  if (have == t || have == 1) return m;
  if (have > t) {
    sc_node_error(c->g, N(c), SC_ERR_INVALID,
                  "attn_mask has %lld keys, more than the %lld of K (and the past)",
                  (long long)have, (long long)t);
    return -1;
  }
  int64_t d[SC_MAX_RANK];
  memcpy(d, v->dims, (size_t)v->rank * sizeof *d);
  d[v->rank - 1] = t - have;
  bool b = v->dtype == SC_DTYPE_BOOL;
  int32_t fill = gb_expand(c, gb_scalar(c, v->dtype, b ? 0.0 : -INFINITY), v->rank, d);
  return gb_op_i(c, SC_OP_CONCAT, (int32_t[]){m, fill}, 2, "axis", v->rank - 1);
}

static sc_status expand_attention(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  attn_attrs a;
  sc_status st = attn_read(c, &a);
  if (st != SC_OK) return st;
  int32_t q = in_v(c, 0), k = in_v(c, 1), v = in_v(c, 2), mask = in_v(c, 3);
  int32_t pk = in_v(c, 4), pv = in_v(c, 5), nonpad = in_v(c, 6);
  int32_t r = V(c, q)->rank;
  sc_dtype t = V(c, q)->dtype;
  if ((r != 3 && r != 4) || V(c, k)->rank != r || V(c, v)->rank != r)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "Q, K and V must all be 3-D or all 4-D");
  if (!sc_dtype_is_float(t) || V(c, k)->dtype != t || V(c, v)->dtype != t)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "Q, K and V must have one float dtype");
  if ((pk < 0) != (pv < 0))
    return sc_node_error(g, N(c), SC_ERR_INVALID, "past_key and past_value go together");
  int32_t q4 = heads(c, q, a.q_heads, "Q"), k4 = heads(c, k, a.kv_heads, "K");
  int32_t v4 = heads(c, v, a.kv_heads, "V");
  if (q4 < 0 || k4 < 0 || v4 < 0) return built(c);
  int64_t b = V(c, q4)->dims[0], hq = V(c, q4)->dims[1], sq = V(c, q4)->dims[2];
  int64_t dk = V(c, q4)->dims[3], hkv = V(c, k4)->dims[1], dv = V(c, v4)->dims[3];
  if (V(c, k4)->dims[3] != dk || V(c, k4)->dims[0] != b || V(c, v4)->dims[0] != b ||
      V(c, v4)->dims[1] != hkv || V(c, v4)->dims[2] != V(c, k4)->dims[2])
    return sc_node_error(g, N(c), SC_ERR_INVALID, "Q, K and V disagree on batch, heads, "
                         "key length or head size");
  if (hkv <= 0 || hq % hkv != 0)
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "%lld query heads are not a multiple of %lld key/value heads",
                         (long long)hq, (long long)hkv);
  int64_t past = 0;
  if (pk >= 0) {
    past = V(c, pk)->rank == 4 ? V(c, pk)->dims[2] : -1;
    k4 = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){pk, k4}, 2, "axis", 2);
    v4 = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){pv, v4}, 2, "axis", 2);
    if (past < 0 || k4 < 0 || v4 < 0)
      return past < 0 ? sc_node_error(g, N(c), SC_ERR_INVALID, "past_key must be 4-D")
                      : built(c);
  }
  out[1] = k4;
  out[2] = v4;
  int64_t tk = V(c, k4)->dims[2];
  double s = a.has_scale ? a.scale : 1.0 / sqrt((double)dk);
  int32_t root = gb_scalar(c, t, sqrt(s));
  int32_t kt = gb_swap_last(c, repeat_heads(c, k4, hq / hkv));
  int32_t qk = gb_2(c, SC_OP_MATMUL, gb_2(c, SC_OP_MUL, q4, root), gb_2(c, SC_OP_MUL, kt, root));
  int32_t stage[4] = {qk, qk, qk, -1};
  if (a.softcap > 0) {
    int32_t cap = gb_scalar(c, t, a.softcap);
    qk = gb_2(c, SC_OP_MUL, gb_1(c, SC_OP_TANH, gb_2(c, SC_OP_DIV, qk, cap)), cap);
    stage[1] = stage[2] = qk;
  }
  /* the bias: the float mask, plus -inf where a key is not allowed */
  int32_t ok = allowed_keys(c, &a, sq, tk, past, nonpad), bias = -1;
  if (mask >= 0) {
    int32_t m = pad_mask(c, mask, tk);
    if (m < 0) return built(c);
    if (V(c, m)->dtype == SC_DTYPE_BOOL)
      ok = and_(c, ok, m);
    else
      bias = gb_cast(c, m, t);
  }
  if (ok >= 0) {
    int32_t inf = gb_where(c, ok, gb_scalar(c, t, 0.0), gb_scalar(c, t, -INFINITY));
    bias = bias < 0 ? inf : gb_2(c, SC_OP_ADD, bias, inf);
  }
  if (bias >= 0) qk = stage[2] = gb_2(c, SC_OP_ADD, qk, bias);
  /* softmax in the requested precision; rows with every key masked: 0 */
  sc_dtype pt = a.precision ? sc_dtype_from_onnx((int32_t)a.precision) : t;
  if (pt == SC_DTYPE_COUNT || !sc_dtype_is_float(pt))
    return sc_node_error(g, N(c), SC_ERR_INVALID, "softmax_precision %lld is not a float type",
                         (long long)a.precision);
  int32_t p = gb_cast(c, gb_op_i(c, SC_OP_SOFTMAX, (int32_t[]){gb_cast(c, qk, pt)}, 1, "axis",
                                 -1), t);
  if (bias >= 0) {
    int32_t row = gb_reduce(c, SC_OP_REDUCE_MAX, bias, (int64_t[]){-1}, 1, true);
    int32_t dead = gb_2(c, SC_OP_EQUAL, row, gb_scalar(c, t, -INFINITY));
    p = gb_where(c, dead, gb_scalar(c, t, 0.0), p);
  }
  stage[3] = p;
  int32_t y = gb_2(c, SC_OP_MATMUL, p, repeat_heads(c, v4, hq / hkv));
  if (r == 3) y = gb_reshape(c, perm4(c, y, 0, 2, 1, 3), 3, (int64_t[]){b, sq, hq * dv});
  out[0] = y;
  out[3] = stage[a.mode];
  return y < 0 || stage[a.mode] < 0 ? built(c) : SC_OK;
}

/* ---- RotaryEmbedding ---- */

/* x[..., a:b] along the last axis. */
static int32_t last_slice(sc_grad_ctx *c, int32_t x, int64_t a, int64_t b) {
  if (x < 0) return -1;
  int64_t axis = -1;
  return gb_op(c, SC_OP_SLICE, (int32_t[]){x, gb_ints(c, &a, 1), gb_ints(c, &b, 1),
                                           gb_ints(c, &axis, 1)}, 4);
}

/* x with its last axis of size 2k seen as [k, 2], element j of each pair,
 * as [..., k]. */
static int32_t pair_part(sc_grad_ctx *c, int32_t x, int64_t j) {
  const sc_value *v = V(c, x);
  int64_t d[SC_MAX_RANK + 1];
  memcpy(d, v->dims, (size_t)v->rank * sizeof *d);
  int32_t r = v->rank;
  d[r - 1] /= 2;
  d[r] = 2;
  int32_t part = last_slice(c, gb_reshape(c, x, r + 1, d), j, j + 1);
  return gb_reshape(c, part, r, d);
}

static sc_status expand_rotary(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t inter, heads, rdim;
  sc_status st;
  if ((st = sc_read_attr_int(g, N(c), "interleaved", 0, &inter)) != SC_OK ||
      (st = sc_read_attr_int(g, N(c), "num_heads", 0, &heads)) != SC_OK ||
      (st = sc_read_attr_int(g, N(c), "rotary_embedding_dim", 0, &rdim)) != SC_OK)
    return st;
  int32_t x = in_v(c, 0), cs = in_v(c, 1), sn = in_v(c, 2), pos = in_v(c, 3);
  const sc_value x0 = *V(c, x), *xv = &x0; /* builders move g->values */
  int32_t r = xv->rank;
  if (r != 3 && r != 4)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "X must be 3-D or 4-D");
  int64_t b = xv->dims[0], s = xv->dims[r == 4 ? 2 : 1], hidden = xv->dims[r - 1];
  if (r == 3 && (heads <= 0 || hidden % heads != 0))
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "3-D X of hidden size %lld needs num_heads dividing it",
                         (long long)hidden);
  int64_t hd = r == 4 ? hidden : hidden / heads, rot = rdim ? rdim : hd;
  if (rot <= 0 || rot > hd || rot % 2 != 0)
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "rotary_embedding_dim %lld must be even and at most the head size "
                         "%lld", (long long)rot, (long long)hd);
  /* the caches per token: [B, S, rot/2] */
  if (pos >= 0 && V(c, pos)->rank == 1) { /* onnxruntime's form: [1], the first position */
    int32_t offs = gb_cast(c, pos, SC_DTYPE_I64);
    pos = gb_2(c, SC_OP_ADD, gb_reshape(c, offs, 2, (int64_t[]){1, 1}), iota(c, s, 2, 1));
  }
  if (pos >= 0) {
    cs = gb_op_i(c, SC_OP_GATHER, (int32_t[]){cs, pos}, 2, "axis", 0);
    sn = gb_op_i(c, SC_OP_GATHER, (int32_t[]){sn, pos}, 2, "axis", 0);
  }
  if (cs < 0 || sn < 0) return built(c);
  const sc_value c0 = *V(c, cs), *cv = &c0;
  if (cv->rank != 3 || cv->dims[2] != rot / 2 || V(c, sn)->rank != 3 ||
      memcmp(V(c, sn)->dims, cv->dims, 3 * sizeof *cv->dims) != 0)
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "the cos and sin caches must give [batch, sequence, %lld] values",
                         (long long)(rot / 2));
  /* heads in X's own layout: [B, N, S, H], or [B, S, N, H] for 3-D */
  int64_t cd[4] = {cv->dims[0], 1, cv->dims[1], rot / 2};
  int32_t xh = x;
  if (r == 3) {
    xh = gb_reshape(c, x, 4, (int64_t[]){b, s, heads, hd});
    cd[1] = cv->dims[1];
    cd[2] = 1;
  }
  cs = gb_cast(c, gb_reshape(c, cs, 4, cd), xv->dtype);
  sn = gb_cast(c, gb_reshape(c, sn, 4, cd), xv->dtype);
  int32_t xr = rot == hd ? xh : last_slice(c, xh, 0, rot);
  int32_t x1 = inter ? pair_part(c, xr, 0) : last_slice(c, xr, 0, rot / 2);
  int32_t x2 = inter ? pair_part(c, xr, 1) : last_slice(c, xr, rot / 2, rot);
  int32_t re = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, cs, x1), gb_2(c, SC_OP_MUL, sn, x2));
  int32_t im = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, sn, x1), gb_2(c, SC_OP_MUL, cs, x2));
  int32_t y;
  if (inter) {
    int32_t both = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){unsqueeze(c, re, 4, 1),
                                                        unsqueeze(c, im, 4, 1)}, 2, "axis", 4);
    int64_t d[4];
    if (both >= 0) memcpy(d, V(c, xr)->dims, sizeof d);
    y = both < 0 ? -1 : gb_reshape(c, both, 4, d);
  } else {
    y = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){re, im}, 2, "axis", 3);
  }
  if (rot < hd) y = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){y, last_slice(c, xh, rot, hd)}, 2,
                            "axis", 3);
  if (r == 3) y = gb_reshape(c, y, 3, xv->dims);
  out[0] = y;
  return y < 0 ? built(c) : SC_OK;
}

/* ---- the losses ---- */

static sc_status nll(sc_grad_ctx *c, int32_t x, int32_t *out) {
  sc_graph *g = c->g;
  int64_t ignore = 0;
  static const char *const reductions[] = {"none", "sum", "mean"};
  int which = 2;
  sc_status st = sc_read_attr_choice(g, N(c), "reduction", "mean", reductions, 3, &which);
  if (st != SC_OK) return st;
  bool has_ignore = sc_node_attr(N(c), "ignore_index") != NULL;
  if (has_ignore && (st = sc_read_attr_int(g, N(c), "ignore_index", 0, &ignore)) != SC_OK)
    return st;
  int32_t tgt = in_v(c, 1), w = in_v(c, 2);
  const sc_value x0 = *V(c, x), t0 = *V(c, tgt), *xv = &x0, *tv = &t0; /* builders move
                                                                        g->values */
  sc_dtype t = xv->dtype;
  if (xv->rank < 2 || tv->rank != xv->rank - 1 || tv->dims[0] != xv->dims[0])
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "the input must be [N, C, d...] and the target [N, d...]");
  for (int32_t i = 1; i < tv->rank; i++)
    if (tv->dims[i] != xv->dims[i + 1])
      return sc_node_error(g, N(c), SC_ERR_INVALID, "target dim %d is %lld, the input's %lld",
                           i, (long long)tv->dims[i], (long long)xv->dims[i + 1]);
  if (tv->dtype != SC_DTYPE_I64 && tv->dtype != SC_DTYPE_I32)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "the target must be int32 or int64");
  int32_t tr = tv->rank;
  int64_t tdims[SC_MAX_RANK];
  memcpy(tdims, tv->dims, (size_t)tr * sizeof *tdims);
  /* ignored targets read class 0 and weigh 0 */
  int32_t skip = -1, safe = tgt;
  if (has_ignore) {
    skip = gb_2(c, SC_OP_EQUAL, tgt, gb_scalar(c, tv->dtype, (double)ignore));
    safe = gb_where(c, skip, gb_scalar(c, tv->dtype, 0.0), tgt);
  }
  int32_t picked = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){x, unsqueeze(c, safe, 1, 1)}, 2,
                           "axis", 1);
  int32_t loss = gb_1(c, SC_OP_NEG, gb_reshape(c, picked, tr, tdims));
  int32_t wt = -1;
  if (w >= 0) wt = gb_op_i(c, SC_OP_GATHER, (int32_t[]){w, safe}, 2, "axis", 0);
  if (skip >= 0)
    wt = gb_where(c, skip, gb_scalar(c, t, 0.0), wt >= 0 ? wt : gb_scalar(c, t, 1.0));
  if (wt >= 0) loss = gb_2(c, SC_OP_MUL, loss, wt);
  if (which == 1) {
    loss = gb_reduce(c, SC_OP_REDUCE_SUM, loss, NULL, 0, false);
  } else if (which == 2) {
    loss = wt < 0 ? gb_reduce(c, SC_OP_REDUCE_MEAN, loss, NULL, 0, false)
                  : gb_2(c, SC_OP_DIV, gb_reduce(c, SC_OP_REDUCE_SUM, loss, NULL, 0, false),
                         gb_reduce(c, SC_OP_REDUCE_SUM,
                                   gb_expand(c, wt, tr, tdims), NULL, 0, false));
  }
  out[0] = loss;
  return loss < 0 ? built(c) : SC_OK;
}

static sc_status expand_nll_loss(sc_grad_ctx *c, int32_t *out) {
  return nll(c, in_v(c, 0), out);
}

static sc_status expand_sce_loss(sc_grad_ctx *c, int32_t *out) {
  int32_t x = in_v(c, 0);
  if (V(c, x)->rank < 2)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "the scores must be [N, C, d...]");
  int32_t lp = gb_op_i(c, SC_OP_LOG_SOFTMAX, &x, 1, "axis", 1);
  if (lp < 0) return built(c);
  out[1] = lp;
  return nll(c, lp, out);
}

static expand_fn expansion(sc_op op) {
  switch (op) {
  case SC_OP_ATTENTION: return expand_attention;
  case SC_OP_NLL_LOSS: return expand_nll_loss;
  case SC_OP_SCE_LOSS: return expand_sce_loss;
  case SC_OP_ROTARY_EMBEDDING: return expand_rotary;
  default: return NULL;
  }
}

/* ---- the driver ---- */

/* Makes output value `to` the result of the expansion's value `from`: the
 * node of the expansion that made `from` writes `to` instead (its readers
 * in the expansion follow), or, when `from` is not the expansion's own (an
 * input passed through) or with `copy` (another output's value), an
 * Identity copies it. */
static sc_status retarget(sc_grad_ctx *c, int32_t first, int32_t from, int32_t to, bool copy) {
  sc_graph *g = c->g;
  int32_t p = g->values[from].producer;
  if (!copy && p >= first) {
    sc_node *pn = &g->nodes[p];
    for (int32_t j = 0; j < pn->n_outputs; j++)
      if (pn->outputs[j] == from) pn->outputs[j] = to;
    for (int32_t i = first; i < g->n_nodes; i++)
      for (int32_t j = 0; j < g->nodes[i].n_inputs; j++)
        if (g->nodes[i].inputs[j] == from) g->nodes[i].inputs[j] = to;
    sc_value *tv = &g->values[to], *fv = &g->values[from];
    tv->producer = p;
    tv->dtype = fv->dtype;
    tv->rank = fv->rank;
    memcpy(tv->dims, fv->dims, sizeof tv->dims);
    fv->flags |= SC_VALUE_DEAD;
    fv->producer = -1;
    return SC_OK;
  }
  char name[512];
  snprintf(name, sizeof name, "%s/def/%d", N(c)->name ? N(c)->name : sc_op_name(N(c)->op),
           (int)(*c->counter)++);
  int32_t id = sc_graph_add_node(g, SC_OP_IDENTITY, name, &from, 1, &to, 1);
  if (id < 0) return built(c);
  return sc_ops[SC_OP_IDENTITY].infer(g, &g->nodes[id]);
}

sc_status sc_expand_composite(sc_graph *g, int32_t node) {
  sc_op op = g->nodes[node].op;
  expand_fn fn = expansion(op);
  if (!fn)
    return sc_node_error(g, &g->nodes[node], SC_ERR_INVALID,
                         "composite op %s has no expansion", sc_op_name(op));
  int32_t counter = 0, first = g->n_nodes;
  int32_t out[MAX_OUT];
  for (int32_t j = 0; j < MAX_OUT; j++) out[j] = -1;
  sc_grad_ctx c = {.g = g, .node = node, .counter = &counter, .tag = "def"};
  sc_status st = fn(&c, out);
  if (st != SC_OK) {
    if (g->diag.status == SC_OK) sc_node_error(g, &g->nodes[node], st, "expansion failed");
    return st;
  }
  int32_t n_out = g->nodes[node].n_outputs;
  for (int32_t j = 0; j < n_out && st == SC_OK; j++) {
    int32_t to = g->nodes[node].outputs[j];
    if (to < 0) continue;
    if (out[j] < 0)
      return sc_node_error(g, &g->nodes[node], SC_ERR_UNSUPPORTED, "output %d is not computed",
                           (int)j);
    int32_t from = out[j];
    bool copy = false;
    for (int32_t i = 0; i < j && !copy; i++) /* a value two outputs share: copy the first */
      if (out[i] == out[j] && g->nodes[node].outputs[i] >= 0)
        from = g->nodes[node].outputs[i], copy = true;
    st = retarget(&c, first, from, to, copy);
  }
  if (st != SC_OK) return st;
  sc_node *n = &g->nodes[node];
  n->flags |= SC_NODE_DEAD;
  for (int32_t j = 0; j < n->n_outputs; j++) n->outputs[j] = -1;
  return SC_OK;
}
