/* composite_attention.c — the expansions of Attention (opsets 23–25) and
 * RotaryEmbedding (23), composite ops of the IR (passes/composite.c says
 * how expansions work). onnxruntime's com.microsoft MultiHeadAttention,
 * Attention and RotaryEmbedding reach these through the frontend's
 * adapters.
 *
 * Attention: Y = softmax(softcap(Q·√s @ (K·√s)ᵀ) + bias) @ V over [B, H, S,
 * D] heads (3-D inputs split into q_num_heads / kv_num_heads and joined
 * back), K and V after past_key/value along the sequence (outputs 1, 2),
 * repeated for grouped-query heads; the bias is the float mask plus −∞
 * where a boolean mask, is_causal, the left/right windows or
 * nonpad_kv_seqlen disallow a key (a mask shorter than the keys is padded
 * with −∞ / false); a row with every key disallowed gives zeros; output 3
 * is the scores after the matmul, the softcap, the bias or the softmax
 * (qk_matmul_output_mode 0–3); softmax_precision casts around the softmax.
 *
 * RotaryEmbedding: per head, the first rotary_embedding_dim values (all by
 * default) rotated in pairs (x1, x2) — the two halves, or neighbours when
 * interleaved — by the cos and sin caches of the token's position: (cos x1
 * − sin x2, sin x1 + cos x2); the caches are [B, S, rot/2], or [positions,
 * rot/2] read at position_ids ([B, S]; a 1-D [1] is onnxruntime's first
 * position, the tokens following it).
 *
 * LinearAttention (27): the recurrence of each update rule unrolled over
 * the tokens (at its definition below). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

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
  const sc_node *n = cx_node(c);
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
  const sc_value *v = cx_val(c, x);
  if (v->rank == 4) return x;
  if (h <= 0 || v->dims[2] % h != 0) {
    sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
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
  const sc_value *v = cx_val(c, x);
  int64_t b = v->dims[0], h = v->dims[1], t = v->dims[2], d = v->dims[3];
  int32_t e = gb_expand(c, cx_unsqueeze(c, x, 2, 1), 5, (int64_t[]){b, h, groups, t, d});
  return gb_reshape(c, e, 4, (int64_t[]){b, h * groups, t, d});
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
  int32_t j = cx_iota(c, t, 4, 3), pos = cx_iota(c, sq, 4, 2), np = -1;
  if (nonpad >= 0) {
    int64_t nb = cx_val(c, nonpad)->rank == 1 ? cx_val(c, nonpad)->dims[0] : 1;
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
  const sc_value v0 = *cx_val(c, m), *v = &v0; /* builders move g->values */
  int64_t have = v->rank ? v->dims[v->rank - 1] : 1;
  if (have == t || have == 1) return m;
  if (have > t) {
    sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
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

sc_status cx_expand_attention(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  attn_attrs a;
  sc_status st = attn_read(c, &a);
  if (st != SC_OK) return st;
  int32_t q = cx_in(c, 0), k = cx_in(c, 1), v = cx_in(c, 2), mask = cx_in(c, 3);
  int32_t pk = cx_in(c, 4), pv = cx_in(c, 5), nonpad = cx_in(c, 6);
  int32_t r = cx_val(c, q)->rank;
  sc_dtype t = cx_val(c, q)->dtype;
  if ((r != 3 && r != 4) || cx_val(c, k)->rank != r || cx_val(c, v)->rank != r)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "Q, K and V must all be 3-D or all 4-D");
  if (!sc_dtype_is_float(t) || cx_val(c, k)->dtype != t || cx_val(c, v)->dtype != t)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "Q, K and V must have one float dtype");
  if ((pk < 0) != (pv < 0))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "past_key and past_value go together");
  int32_t q4 = heads(c, q, a.q_heads, "Q"), k4 = heads(c, k, a.kv_heads, "K");
  int32_t v4 = heads(c, v, a.kv_heads, "V");
  if (q4 < 0 || k4 < 0 || v4 < 0) return cx_built(c);
  int64_t b = cx_val(c, q4)->dims[0], hq = cx_val(c, q4)->dims[1], sq = cx_val(c, q4)->dims[2];
  int64_t dk = cx_val(c, q4)->dims[3], hkv = cx_val(c, k4)->dims[1], dv = cx_val(c, v4)->dims[3];
  if (cx_val(c, k4)->dims[3] != dk || cx_val(c, k4)->dims[0] != b || cx_val(c, v4)->dims[0] != b ||
      cx_val(c, v4)->dims[1] != hkv || cx_val(c, v4)->dims[2] != cx_val(c, k4)->dims[2])
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "Q, K and V disagree on batch, heads, "
                         "key length or head size");
  if (hkv <= 0 || hq % hkv != 0)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "%lld query heads are not a multiple of %lld key/value heads",
                         (long long)hq, (long long)hkv);
  int64_t past = 0;
  if (pk >= 0) {
    past = cx_val(c, pk)->rank == 4 ? cx_val(c, pk)->dims[2] : -1;
    k4 = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){pk, k4}, 2, "axis", 2);
    v4 = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){pv, v4}, 2, "axis", 2);
    if (past < 0 || k4 < 0 || v4 < 0)
      return past < 0 ? sc_node_error(g, cx_node(c), SC_ERR_INVALID, "past_key must be 4-D")
                      : cx_built(c);
  }
  out[1] = k4;
  out[2] = v4;
  int64_t tk = cx_val(c, k4)->dims[2];
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
    if (m < 0) return cx_built(c);
    if (cx_val(c, m)->dtype == SC_DTYPE_BOOL)
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
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "softmax_precision %lld is not a float type",
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
  return y < 0 || stage[a.mode] < 0 ? cx_built(c) : SC_OK;
}

/* ---- RotaryEmbedding ---- */

/* x with its last axis of size 2k seen as [k, 2], element j of each pair,
 * as [..., k]. */
static int32_t pair_part(sc_grad_ctx *c, int32_t x, int64_t j) {
  const sc_value *v = cx_val(c, x);
  int64_t d[SC_MAX_RANK + 1];
  memcpy(d, v->dims, (size_t)v->rank * sizeof *d);
  int32_t r = v->rank;
  d[r - 1] /= 2;
  d[r] = 2;
  int32_t part = cx_last_slice(c, gb_reshape(c, x, r + 1, d), j, j + 1);
  return gb_reshape(c, part, r, d);
}

sc_status cx_expand_rotary(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t inter, heads, rdim;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "interleaved", 0, &inter)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "num_heads", 0, &heads)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "rotary_embedding_dim", 0, &rdim)) != SC_OK)
    return st;
  int32_t x = cx_in(c, 0), cs = cx_in(c, 1), sn = cx_in(c, 2), pos = cx_in(c, 3);
  const sc_value x0 = *cx_val(c, x), *xv = &x0; /* builders move g->values */
  int32_t r = xv->rank;
  if (r != 3 && r != 4)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "X must be 3-D or 4-D");
  int64_t b = xv->dims[0], s = xv->dims[r == 4 ? 2 : 1], hidden = xv->dims[r - 1];
  if (r == 3 && (heads <= 0 || hidden % heads != 0))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "3-D X of hidden size %lld needs num_heads dividing it",
                         (long long)hidden);
  int64_t hd = r == 4 ? hidden : hidden / heads, rot = rdim ? rdim : hd;
  if (rot <= 0 || rot > hd || rot % 2 != 0)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "rotary_embedding_dim %lld must be even and at most the head size "
                         "%lld", (long long)rot, (long long)hd);
  /* the caches per token: [B, S, rot/2] */
  if (pos >= 0 && cx_val(c, pos)->rank == 1) { /* onnxruntime's form: [1], the first position */
    int32_t offs = gb_cast(c, pos, SC_DTYPE_I64);
    pos = gb_2(c, SC_OP_ADD, gb_reshape(c, offs, 2, (int64_t[]){1, 1}), cx_iota(c, s, 2, 1));
  }
  if (pos >= 0) {
    cs = gb_op_i(c, SC_OP_GATHER, (int32_t[]){cs, pos}, 2, "axis", 0);
    sn = gb_op_i(c, SC_OP_GATHER, (int32_t[]){sn, pos}, 2, "axis", 0);
  }
  if (cs < 0 || sn < 0) return cx_built(c);
  const sc_value c0 = *cx_val(c, cs), *cv = &c0;
  if (cv->rank != 3 || cv->dims[2] != rot / 2 || cx_val(c, sn)->rank != 3 ||
      memcmp(cx_val(c, sn)->dims, cv->dims, 3 * sizeof *cv->dims) != 0)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
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
  int32_t xr = rot == hd ? xh : cx_last_slice(c, xh, 0, rot);
  int32_t x1 = inter ? pair_part(c, xr, 0) : cx_last_slice(c, xr, 0, rot / 2);
  int32_t x2 = inter ? pair_part(c, xr, 1) : cx_last_slice(c, xr, rot / 2, rot);
  int32_t re = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, cs, x1), gb_2(c, SC_OP_MUL, sn, x2));
  int32_t im = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, sn, x1), gb_2(c, SC_OP_MUL, cs, x2));
  int32_t y;
  if (inter) {
    int32_t both = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){cx_unsqueeze(c, re, 4, 1),
                                                        cx_unsqueeze(c, im, 4, 1)}, 2, "axis", 4);
    int64_t d[4];
    if (both >= 0) memcpy(d, cx_val(c, xr)->dims, sizeof d);
    y = both < 0 ? -1 : gb_reshape(c, both, 4, d);
  } else {
    y = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){re, im}, 2, "axis", 3);
  }
  if (rot < hd) y = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){y, cx_last_slice(c, xh, rot, hd)}, 2,
                            "axis", 3);
  if (r == 3) y = gb_reshape(c, y, 3, xv->dims);
  out[0] = y;
  return y < 0 ? cx_built(c) : SC_OK;
}


/* ---- LinearAttention (opset 27) ----
 * The recurrence unrolled over the T tokens, in f32, the state S [B, Hkv,
 * dk, dv] starting at past_state (zeros when absent); per token t:
 *   gated rules: S = exp(g_t) · S (g_t per head or per key dim);
 *   delta rules: v_t = β_t · (v_t − Sᵀ k_t) (with the decayed S);
 *   S = S + k_t ⊗ v_t;  o_t = scale · q_tᵀ S,
 * each key/value head serving q_num_heads / kv_num_heads query heads in a
 * row (heads h = kv · G + g). Output [B, T, Hq·dv] in the query's dtype;
 * present_state the last S in past_state's dtype (else the query's). */
sc_status cx_expand_linear_attention(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_node *n = cx_node(c);
  static const char *const rules[] = {"linear", "gated", "delta", "gated_delta"};
  int rule;
  int64_t hq, hkv;
  double scale;
  sc_status st;
  if ((st = sc_read_attr_choice(g, n, "update_rule", "gated_delta", rules, 4, &rule)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "q_num_heads", 0, &hq)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "kv_num_heads", 0, &hkv)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "scale", 0.0, &scale)) != SC_OK)
    return st;
  bool gated = rule == 1 || rule == 3, delta = rule >= 2;
  int32_t q = cx_in(c, 0), k = cx_in(c, 1), v = cx_in(c, 2), past = cx_in(c, 3);
  int32_t decay = cx_in(c, 4), beta = cx_in(c, 5);
  const sc_value *qv = cx_val(c, q), *kv = cx_val(c, k), *vv = cx_val(c, v);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "q_num_heads %lld must be a positive multiple of kv_num_heads %lld",
                         (long long)hq, (long long)hkv);
  if (qv->rank != 3 || kv->rank != 3 || vv->rank != 3 || qv->dims[2] % hq != 0 ||
      kv->dims[2] % hkv != 0 || vv->dims[2] % hkv != 0 || kv->dims[2] / hkv != qv->dims[2] / hq)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "query, key and value must be [B, T, heads * dim], the key's dim the "
                         "query's");
  if (gated != (decay >= 0) || delta != (beta >= 0))
    return sc_node_error(g, n, SC_ERR_INVALID, "update_rule '%s' %s decay and %s beta",
                         rules[rule], gated ? "needs" : "takes no", delta ? "needs" : "takes no");
  int64_t B = qv->dims[0], T = qv->dims[1], dk = qv->dims[2] / hq, dv = vv->dims[2] / hkv;
  int64_t G = hq / hkv;
  sc_dtype out_t = qv->dtype, state_t = past >= 0 ? cx_val(c, past)->dtype : out_t;
  /* (qv, kv, vv point into the value array, which the builders below may
   * move: only the copies above are used from here) */
  if (T > 65536)
    return sc_node_error(g, n, SC_ERR_LIMIT, "%lld tokens: the expansion unrolls every one "
                         "(at most 65536)", (long long)T);
  if (scale == 0.0) scale = 1.0 / sqrt((double)dk);
  /* [B, T, H·D] → f32 [B, H, T, D] */
  int32_t q4 = perm4(c, gb_reshape(c, gb_cast(c, q, SC_DTYPE_F32), 4, (int64_t[]){B, T, hq, dk}),
                     0, 2, 1, 3);
  int32_t k4 = perm4(c, gb_reshape(c, gb_cast(c, k, SC_DTYPE_F32), 4, (int64_t[]){B, T, hkv, dk}),
                     0, 2, 1, 3);
  int32_t v4 = perm4(c, gb_reshape(c, gb_cast(c, v, SC_DTYPE_F32), 4, (int64_t[]){B, T, hkv, dv}),
                     0, 2, 1, 3);
  int32_t eg = -1, b4 = -1;
  int64_t gl = 0, bl = 0;
  if (gated) { /* exp(decay) as [B, Hkv, T, 1 or dk] */
    const sc_value *dv_ = cx_val(c, decay);
    gl = dv_->rank == 3 ? dv_->dims[2] : 0;
    if (dv_->rank != 3 || dv_->dims[0] != B || dv_->dims[1] != T || (gl != hkv && gl != hkv * dk))
      return sc_node_error(g, n, SC_ERR_INVALID, "decay '%s' must be [B, T, kv_num_heads (* dk)]",
                           dv_->name);
    gl /= hkv;
    eg = gb_1(c, SC_OP_EXP, perm4(c, gb_reshape(c, gb_cast(c, decay, SC_DTYPE_F32), 4,
                                                (int64_t[]){B, T, hkv, gl}), 0, 2, 1, 3));
  }
  if (delta) { /* [B, Hkv or 1, T, 1] */
    const sc_value *bv = cx_val(c, beta);
    bl = bv->rank == 3 ? bv->dims[2] : 0;
    if (bv->rank != 3 || bv->dims[0] != B || bv->dims[1] != T || (bl != hkv && bl != 1))
      return sc_node_error(g, n, SC_ERR_INVALID, "beta '%s' must be [B, T, kv_num_heads or 1]",
                           bv->name);
    b4 = perm4(c, gb_reshape(c, gb_cast(c, beta, SC_DTYPE_F32), 4, (int64_t[]){B, T, bl, 1}),
               0, 2, 1, 3);
  }
  int64_t sd[4] = {B, hkv, dk, dv};
  int32_t s;
  if (past >= 0) {
    const sc_value *pv = cx_val(c, past);
    if (pv->rank != 4 || memcmp(pv->dims, sd, sizeof sd) != 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "past_state '%s' must be [%lld, %lld, %lld, %lld]",
                           pv->name, (long long)B, (long long)hkv, (long long)dk, (long long)dv);
    s = gb_cast(c, past, SC_DTYPE_F32);
  } else {
    s = gb_expand(c, gb_scalar(c, SC_DTYPE_F32, 0), 4, sd);
  }
  int32_t *ys = sc_arena_array(&g->arena, (size_t)(T ? T : 1), sizeof *ys);
  if (!ys) return cx_built(c);
  int32_t sc = gb_scalar(c, SC_DTYPE_F32, scale);
  for (int64_t t = 0; t < T; t++) {
    int32_t kt = cx_axis_slice(c, k4, 2, t, t + 1, 1); /* [B, Hkv, 1, dk] */
    int32_t vt = cx_axis_slice(c, v4, 2, t, t + 1, 1); /* [B, Hkv, 1, dv] */
    if (gated) /* [B, Hkv, 1, gl] as a column */
      s = gb_2(c, SC_OP_MUL, s,
               gb_reshape(c, cx_axis_slice(c, eg, 2, t, t + 1, 1), 4, (int64_t[]){B, hkv, gl, 1}));
    if (delta)
      vt = gb_2(c, SC_OP_MUL, cx_axis_slice(c, b4, 2, t, t + 1, 1),
                gb_2(c, SC_OP_SUB, vt, gb_2(c, SC_OP_MATMUL, kt, s)));
    s = gb_2(c, SC_OP_ADD, s, gb_2(c, SC_OP_MATMUL,
                                   gb_reshape(c, kt, 4, (int64_t[]){B, hkv, dk, 1}), vt));
    int32_t qt = gb_reshape(c, cx_axis_slice(c, q4, 2, t, t + 1, 1), 4, (int64_t[]){B, hkv, G, dk});
    int32_t ot = gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_MATMUL, qt, s), sc); /* [B, Hkv, G, dv] */
    ys[t] = gb_reshape(c, ot, 4, (int64_t[]){B, hq, 1, dv});
    if (s < 0 || ys[t] < 0) return cx_built(c);
  }
  int32_t y = T == 1 ? ys[0] : gb_op_i(c, SC_OP_CONCAT, ys, (int32_t)T, "axis", 2);
  y = gb_reshape(c, perm4(c, y, 0, 2, 1, 3), 3, (int64_t[]){B, T, hq * dv});
  out[0] = gb_cast(c, y, out_t);
  out[1] = gb_cast(c, s, state_t);
  return out[0] < 0 || out[1] < 0 ? cx_built(c) : SC_OK;
}
