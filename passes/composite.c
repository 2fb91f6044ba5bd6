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
 *   RNN, GRU, LSTM (7–25)  unrolled over the sequence (its length is
 *       static): the input projection of every step as one MatMul, then per
 *       step the recurrent MatMul and the gates (RNN: f; GRU: z, r, h with
 *       either linear_before_reset; LSTM: i, o, f, c with peepholes and
 *       input_forget), the activations by name with their alpha/beta, clip,
 *       both directions, layout 1, initial states; sequence_lens keeps a
 *       sequence's state and writes zeros past its end (a reverse walk then
 *       starts each sequence at its own last element);
 *   ConvTranspose  a Conv (stride 1, the given dilations and group) over
 *       X with stride − 1 zeros between its elements, cropped where a pad
 *       exceeds the dilated kernel, padded by the rest (and output_padding,
 *       or what output_shape asks, at the end); the weights [C, M/g, k…]
 *       regrouped to [M, C/g, k…] and flipped in space (constant weights
 *       fold away); auto_pad SAME splits the padding as onnx's reference;
 *   TopK  k rounds, each taking the first untaken element equal to the
 *       largest (smallest) untaken value, so ties come out lower index
 *       first; always sorted; k a constant (input, or the attribute before
 *       opset 10); O(k·n) per row;
 *   Einsum  per operand, its repeated labels' diagonals and the sums of
 *       labels no one else needs; then each further operand joins the
 *       running product as one batched MatMul ([batch, m, k] @ [batch, k,
 *       n], the labels grouped by where they occur); the output's order by
 *       a Transpose; "..." broadcast as numpy does; an implicit output is
 *       the ellipsis and the labels used once, in alphabetical order;
 *   small ones, each above its expansion: Hardmax, LpNormalization,
 *       Swish, ReduceLogSum, MeanVarianceNormalization, EyeLike,
 *       CenterCropPad, LRN, the Hann/Hamming/Blackman windows;
 *   NegativeLogLikelihoodLoss  −input[n, t, d…] · weight[t] per element,
 *       0 where t = ignore_index; reduced by "none", "sum" or "mean" (the
 *       sum over the sum of the weights taken);
 *   SoftmaxCrossEntropyLoss  the same over LogSoftmax(scores, axis 1),
 *       which is output 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* ---- RNN, GRU, LSTM ---- */

/* One activation of the recurrence ops' `activations` list, by name
 * (ONNX's list; case-insensitive), with its alpha/beta. */
typedef struct rnn_act {
  const char *name;
  double alpha, beta;
} rnn_act;

static int32_t act(sc_grad_ctx *c, const rnn_act *f, int32_t x, sc_dtype t) {
  if (x < 0) return -1;
  const char *n = f->name;
  int32_t zero = gb_scalar(c, t, 0.0), a = gb_scalar(c, t, f->alpha);
  if (!strcasecmp(n, "Sigmoid")) return gb_1(c, SC_OP_SIGMOID, x);
  if (!strcasecmp(n, "Tanh")) return gb_1(c, SC_OP_TANH, x);
  if (!strcasecmp(n, "Relu")) return gb_2(c, SC_OP_MAX, x, zero);
  if (!strcasecmp(n, "Softplus")) return gb_1(c, SC_OP_SOFTPLUS, x);
  if (!strcasecmp(n, "Softsign"))
    return gb_2(c, SC_OP_DIV, x, gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0), gb_1(c, SC_OP_ABS, x)));
  if (!strcasecmp(n, "Affine"))
    return gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, a), gb_scalar(c, t, f->beta));
  if (!strcasecmp(n, "LeakyRelu"))
    return gb_where(c, gb_2(c, SC_OP_LESS, x, zero), gb_2(c, SC_OP_MUL, x, a), x);
  if (!strcasecmp(n, "ThresholdedRelu")) return gb_where(c, gb_2(c, SC_OP_GREATER, x, a), x, zero);
  if (!strcasecmp(n, "ScaledTanh"))
    return gb_2(c, SC_OP_MUL, a, gb_1(c, SC_OP_TANH, gb_2(c, SC_OP_MUL, x, gb_scalar(c, t, f->beta))));
  if (!strcasecmp(n, "HardSigmoid")) {
    int32_t y = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, a), gb_scalar(c, t, f->beta));
    return gb_2(c, SC_OP_MAX, zero, gb_2(c, SC_OP_MIN, gb_scalar(c, t, 1.0), y));
  }
  if (!strcasecmp(n, "Elu"))
    return gb_where(c, gb_2(c, SC_OP_LESS, x, zero),
                    gb_2(c, SC_OP_MUL, a, gb_2(c, SC_OP_SUB, gb_1(c, SC_OP_EXP, x),
                                                gb_scalar(c, t, 1.0))), x);
  sc_node_error(c->g, N(c), SC_ERR_UNSUPPORTED, "activation '%s' is not supported", n);
  return -1;
}

typedef struct rnn_spec {
  int gates;               /* RNN 1, GRU 3 (z r h), LSTM 4 (i o f c) */
  int n_act;               /* activations per direction */
  int64_t hidden, dirs, layout, input_forget, lbr;
  bool reverse;            /* direction "reverse" (one direction, walked backwards) */
  double clip;
  bool has_clip;
  rnn_act f[2][3];         /* per direction */
} rnn_spec;

static sc_status rnn_read(sc_grad_ctx *c, rnn_spec *s) {
  sc_graph *g = c->g;
  const sc_node *n = N(c);
  sc_op op = n->op;
  s->gates = op == SC_OP_RNN ? 1 : op == SC_OP_GRU ? 3 : 4;
  s->n_act = op == SC_OP_RNN ? 1 : op == SC_OP_GRU ? 2 : 3;
  static const char *const dirs[] = {"forward", "reverse", "bidirectional"};
  int dir = 0;
  sc_status st;
  if ((st = sc_read_attr_choice(g, n, "direction", "forward", dirs, 3, &dir)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "hidden_size", 0, &s->hidden)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "layout", 0, &s->layout)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "input_forget", 0, &s->input_forget)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "linear_before_reset", 0, &s->lbr)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "clip", 0.0, &s->clip)) != SC_OK)
    return st;
  s->has_clip = sc_node_attr(n, "clip") != NULL;
  s->dirs = dir == 2 ? 2 : 1;
  s->reverse = dir == 1;
  if (s->layout != 0 && s->layout != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "layout %lld is not 0 or 1", (long long)s->layout);
  if (s->has_clip && !(s->clip > 0))
    return sc_node_error(g, n, SC_ERR_INVALID, "clip must be positive");
  static const char *const dflt[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"},
                                         {"Sigmoid", "Tanh", "Tanh"}};
  const sc_attr *names = sc_node_attr(n, "activations");
  const double *al = NULL, *be = NULL;
  int64_t n_al = sc_attr_floats(g, n, "activation_alpha", &al);
  int64_t n_be = sc_attr_floats(g, n, "activation_beta", &be);
  int64_t want = s->n_act * s->dirs, ia = 0, ib = 0;
  if (names && (names->kind != SC_ATTR_STRINGS || names->n != want))
    return sc_node_error(g, n, SC_ERR_INVALID, "activations needs %lld names",
                         (long long)want);
  for (int64_t k = 0; k < want; k++) {
    rnn_act *f = &s->f[k / s->n_act][k % s->n_act];
    f->name = names ? names->strings[k] : dflt[s->gates == 1 ? 0 : s->gates == 3 ? 1 : 2]
                                              [k % s->n_act];
    /* alpha and beta: consumed in order by the functions that take them;
     * ONNX's operator defaults otherwise */
    bool ta = strcasecmp(f->name, "Sigmoid") && strcasecmp(f->name, "Tanh") &&
              strcasecmp(f->name, "Relu") && strcasecmp(f->name, "Softsign") &&
              strcasecmp(f->name, "Softplus");
    bool tb = !strcasecmp(f->name, "Affine") || !strcasecmp(f->name, "ScaledTanh") ||
              !strcasecmp(f->name, "HardSigmoid");
    f->alpha = !strcasecmp(f->name, "LeakyRelu") ? 0.01 : !strcasecmp(f->name, "HardSigmoid")
                                                              ? 0.2 : 1.0;
    f->beta = !strcasecmp(f->name, "HardSigmoid") ? 0.5 : !strcasecmp(f->name, "Affine")
                                                               ? 0.0 : 1.0;
    if (ta && ia < n_al) f->alpha = al[ia++];
    if (tb && ib < n_be) f->beta = be[ib++];
  }
  return SC_OK;
}

/* x[d] of a [D, ...] operand (rank drops by one). */
static int32_t pick(sc_grad_ctx *c, int32_t x, int64_t d, int64_t axis) {
  if (x < 0) return -1;
  return gb_op_i(c, SC_OP_GATHER, (int32_t[]){x, gb_scalar(c, SC_DTYPE_I64, (double)d)}, 2,
                 "axis", axis);
}

static int32_t clip_(sc_grad_ctx *c, const rnn_spec *s, int32_t x, sc_dtype t) {
  if (!s->has_clip || x < 0) return x;
  return gb_op(c, SC_OP_CLIP, (int32_t[]){x, gb_scalar(c, t, -s->clip),
                                          gb_scalar(c, t, s->clip)}, 3);
}

/* One direction over all steps: ys[t] (each [B, H]) and the last H (and
 * C); reverse walks t from S-1 down. sequence_lens (lens, [B, 1] int64)
 * keeps H (and C) and writes zeros where t >= lens[b], so a reverse walk
 * starts each sequence at its own last element. */
static sc_status rnn_direction(sc_grad_ctx *c, const rnn_spec *s, int64_t d, bool reverse,
                               int32_t xs, int32_t lens, int32_t *ys, int32_t *h_out,
                               int32_t *c_out) {
  sc_op op = N(c)->op;
  sc_dtype t = V(c, xs)->dtype;
  int64_t S = V(c, xs)->dims[0], B = V(c, xs)->dims[1], H = s->hidden, G = s->gates;
  int32_t w = in_v(c, 1), r = in_v(c, 2), bias = in_v(c, 3), h0 = in_v(c, 5);
  int32_t c0 = op == SC_OP_LSTM ? in_v(c, 6) : -1, p = op == SC_OP_LSTM ? in_v(c, 7) : -1;
  const rnn_act *f = s->f[d];
  int32_t wt = gb_swap_last(c, pick(c, w, d, 0)); /* [I, G·H] */
  int32_t rt = gb_swap_last(c, pick(c, r, d, 0)); /* [H, G·H] */
  int32_t xw = gb_2(c, SC_OP_MATMUL, xs, wt);    /* [S, B, G·H]: every step's input part */
  int32_t rb = -1;
  if (bias >= 0) {
    int32_t bd = pick(c, bias, d, 0);
    xw = gb_2(c, SC_OP_ADD, xw, last_slice(c, bd, 0, G * H));
    rb = last_slice(c, bd, G * H, 2 * G * H);
  }
  int64_t hb[2] = {B, H};
  int32_t zero = gb_expand(c, gb_scalar(c, t, 0.0), 2, hb);
  int32_t hs = h0 >= 0 ? pick(c, h0, d, s->layout ? 1 : 0) : zero;
  int32_t cs = c0 >= 0 ? pick(c, c0, d, s->layout ? 1 : 0) : zero;
  int32_t pd = p >= 0 ? pick(c, p, d, 0) : -1;
  int32_t rth = op == SC_OP_GRU && !s->lbr ? last_slice(c, rt, 2 * H, 3 * H) : -1;
  for (int64_t k = 0; k < S; k++) {
    int64_t tt = reverse ? S - 1 - k : k;
    int32_t xt = pick(c, xw, tt, 0); /* [B, G·H] */
    int32_t hr = gb_2(c, SC_OP_MATMUL, hs, rt);
    int32_t h = -1, cc = -1;
#define GATE(v, j) last_slice(c, (v), (j) * H, ((j) + 1) * H)
    if (op == SC_OP_RNN) {
      int32_t a = gb_2(c, SC_OP_ADD, xt, hr);
      if (rb >= 0) a = gb_2(c, SC_OP_ADD, a, rb);
      h = act(c, &f[0], clip_(c, s, a, t), t);
    } else if (op == SC_OP_GRU) { /* gates z, r, h */
      int32_t rbz = rb >= 0 ? GATE(rb, 0) : -1, rbr = rb >= 0 ? GATE(rb, 1) : -1;
      int32_t rbh = rb >= 0 ? GATE(rb, 2) : -1;
      int32_t az = gb_2(c, SC_OP_ADD, GATE(xt, 0), GATE(hr, 0));
      int32_t ar = gb_2(c, SC_OP_ADD, GATE(xt, 1), GATE(hr, 1));
      if (rb >= 0) az = gb_2(c, SC_OP_ADD, az, rbz), ar = gb_2(c, SC_OP_ADD, ar, rbr);
      int32_t z = act(c, &f[0], clip_(c, s, az, t), t), rr = act(c, &f[0], clip_(c, s, ar, t), t);
      int32_t inner;
      if (s->lbr) {
        inner = GATE(hr, 2);
        if (rb >= 0) inner = gb_2(c, SC_OP_ADD, inner, rbh);
        inner = gb_2(c, SC_OP_MUL, rr, inner);
      } else {
        inner = gb_2(c, SC_OP_MATMUL, gb_2(c, SC_OP_MUL, rr, hs), rth);
        if (rb >= 0) inner = gb_2(c, SC_OP_ADD, inner, rbh);
      }
      int32_t hh = act(c, &f[1], clip_(c, s, gb_2(c, SC_OP_ADD, GATE(xt, 2), inner), t), t);
      /* (1 - z) hh + z H = hh + z (H - hh) */
      h = gb_2(c, SC_OP_ADD, hh, gb_2(c, SC_OP_MUL, z, gb_2(c, SC_OP_SUB, hs, hh)));
    } else { /* LSTM: gates i, o, f, c; peepholes i, o, f */
      int32_t a = gb_2(c, SC_OP_ADD, xt, hr);
      if (rb >= 0) a = gb_2(c, SC_OP_ADD, a, rb);
      int32_t ai = GATE(a, 0), ao = GATE(a, 1), af = GATE(a, 2), ac = GATE(a, 3);
      if (pd >= 0) {
        ai = gb_2(c, SC_OP_ADD, ai, gb_2(c, SC_OP_MUL, GATE(pd, 0), cs));
        af = gb_2(c, SC_OP_ADD, af, gb_2(c, SC_OP_MUL, GATE(pd, 2), cs));
      }
      int32_t ig = act(c, &f[0], clip_(c, s, ai, t), t);
      int32_t fg = s->input_forget ? gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), ig)
                                   : act(c, &f[0], clip_(c, s, af, t), t);
      int32_t ct = act(c, &f[1], clip_(c, s, ac, t), t);
      cc = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, fg, cs), gb_2(c, SC_OP_MUL, ig, ct));
      if (pd >= 0) ao = gb_2(c, SC_OP_ADD, ao, gb_2(c, SC_OP_MUL, GATE(pd, 1), cc));
      int32_t og = act(c, &f[0], clip_(c, s, ao, t), t);
      h = gb_2(c, SC_OP_MUL, og, act(c, &f[2], cc, t));
    }
#undef GATE
    if (h < 0) return built(c);
    if (lens >= 0) { /* steps past a sequence's end keep the state, output 0 */
      int32_t live = gb_2(c, SC_OP_LESS, gb_scalar(c, SC_DTYPE_I64, (double)tt), lens);
      ys[tt] = gb_where(c, live, h, zero);
      h = gb_where(c, live, h, hs);
      if (cc >= 0) cc = gb_where(c, live, cc, cs);
    } else {
      ys[tt] = h;
    }
    hs = h;
    if (cc >= 0) cs = cc;
  }
  *h_out = hs;
  *c_out = cs;
  return hs < 0 || cs < 0 ? built(c) : SC_OK;
}

static sc_status expand_rnn(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  rnn_spec s;
  sc_status st = rnn_read(c, &s);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), w = in_v(c, 1), lens = in_v(c, 4);
  const sc_value x0 = *V(c, x), w0 = *V(c, w);
  if (x0.rank != 3 || w0.rank != 3 || !sc_dtype_is_float(x0.dtype))
    return sc_node_error(g, N(c), SC_ERR_INVALID, "X and W must be 3-D float tensors");
  if (!s.hidden) s.hidden = w0.dims[1] / s.gates;
  if (w0.dims[0] != s.dirs || w0.dims[1] != s.gates * s.hidden)
    return sc_node_error(g, N(c), SC_ERR_INVALID,
                         "W is [%lld, %lld, ...], expected [%lld, %lld, ...]",
                         (long long)w0.dims[0], (long long)w0.dims[1], (long long)s.dirs,
                         (long long)(s.gates * s.hidden));
  /* [S, B, I] */
  int32_t xs = s.layout ? gb_transpose(c, x, (int64_t[]){1, 0, 2}, 3) : x;
  int64_t S = V(c, xs)->dims[0], B = V(c, xs)->dims[1];
  if (S > 65536)
    return sc_node_error(g, N(c), SC_ERR_LIMIT, "%lld steps: the expansion unrolls every step "
                         "(at most 65536)", (long long)S);
  if (lens >= 0)
    lens = gb_reshape(c, gb_cast(c, lens, SC_DTYPE_I64), 2, (int64_t[]){B, 1});
  int32_t *ys = sc_arena_array(&g->arena, (size_t)(S ? S : 1) * 2, sizeof *ys);
  int32_t hl[2], cl[2], yd[2];
  if (!ys) return built(c);
  for (int64_t d = 0; d < s.dirs; d++) {
    bool reverse = d == 1 || s.reverse;
    if ((st = rnn_direction(c, &s, d, reverse, xs, lens, ys + d * S, &hl[d], &cl[d])) != SC_OK)
      return st;
    /* Y of this direction: [S, 1, B, H] */
    int32_t *parts = ys + d * S;
    for (int64_t k = 0; k < S; k++) parts[k] = unsqueeze(c, parts[k], 0, 2);
    yd[d] = S == 1 ? parts[0] : gb_op_i(c, SC_OP_CONCAT, parts, (int32_t)S, "axis", 0);
  }
  int32_t y = s.dirs == 1 ? yd[0] : gb_op_i(c, SC_OP_CONCAT, yd, 2, "axis", 1);
  int32_t yh = s.dirs == 1 ? unsqueeze(c, hl[0], 0, 1)
                           : gb_op_i(c, SC_OP_CONCAT, (int32_t[]){unsqueeze(c, hl[0], 0, 1),
                                                                  unsqueeze(c, hl[1], 0, 1)},
                                     2, "axis", 0);
  int32_t yc = s.dirs == 1 ? unsqueeze(c, cl[0], 0, 1)
                           : gb_op_i(c, SC_OP_CONCAT, (int32_t[]){unsqueeze(c, cl[0], 0, 1),
                                                                  unsqueeze(c, cl[1], 0, 1)},
                                     2, "axis", 0);
  if (s.layout) {
    y = gb_transpose(c, y, (int64_t[]){2, 0, 1, 3}, 4);
    yh = gb_transpose(c, yh, (int64_t[]){1, 0, 2}, 3);
    yc = gb_transpose(c, yc, (int64_t[]){1, 0, 2}, 3);
  }
  out[0] = y;
  out[1] = yh;
  out[2] = N(c)->op == SC_OP_LSTM ? yc : -1;
  return y < 0 || yh < 0 || yc < 0 ? built(c) : SC_OK;
}

/* ---- ConvTranspose ---- */

/* x[.., a:b, ..] along `axis` (step 1, or -1 from a down to b exclusive). */
static int32_t axis_slice(sc_grad_ctx *c, int32_t x, int64_t axis, int64_t a, int64_t b,
                          int64_t step) {
  if (x < 0) return -1;
  return gb_op(c, SC_OP_SLICE, (int32_t[]){x, gb_ints(c, &a, 1), gb_ints(c, &b, 1),
                                           gb_ints(c, &axis, 1), gb_ints(c, &step, 1)}, 5);
}

/* A Conv with stride 1 over x's zeros-dilated copy: x gets (stride - 1)
 * zeros between neighbours, is cropped where a pad is negative, and the
 * Conv pads it by k' - 1 - pad (k' the dilated kernel) at each side (plus
 * output_padding at the end); the weights [C, M/g, k...] become [M, C/g,
 * k...] per group, flipped in space (constant weights fold away). */
static sc_status expand_conv_transpose(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_node *n = N(c);
  int32_t x = in_v(c, 0), w = in_v(c, 1), b = in_v(c, 2);
  const sc_value x0 = *V(c, x), w0 = *V(c, w);
  int32_t r = x0.rank, ns = r - 2;
  if (r < 3 || r > 5 || w0.rank != r)
    return sc_node_error(g, n, SC_ERR_INVALID, "X and W must have one rank, 3 to 5");
  int64_t group;
  sc_status st = sc_read_attr_int(g, n, "group", 1, &group);
  if (st != SC_OK) return st;
  int64_t cin = x0.dims[1], mg = w0.dims[1];
  if (group < 1 || cin % group || w0.dims[0] != cin)
    return sc_node_error(g, n, SC_ERR_INVALID, "W [%lld, ...] does not match %lld input "
                         "channels in %lld groups", (long long)w0.dims[0], (long long)cin,
                         (long long)group);
  int64_t strides[3], dil[3], opad[3], pads[6], oshape[3], k[3];
  bool has_oshape = false;
  const int64_t *v;
  struct { const char *name; int64_t *dst; int64_t n, dflt; } lists[] = {
      {"strides", strides, ns, 1}, {"dilations", dil, ns, 1}, {"output_padding", opad, ns, 0},
      {"pads", pads, 2 * ns, 0}, {"kernel_shape", k, ns, -1}};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    int64_t cnt = sc_attr_ints(g, n, lists[i].name, &v);
    if (cnt >= 0 && cnt != lists[i].n)
      return sc_node_error(g, n, SC_ERR_INVALID, "%s has %lld values, expected %lld",
                           lists[i].name, (long long)cnt, (long long)lists[i].n);
    for (int64_t j = 0; j < lists[i].n; j++)
      lists[i].dst[j] = cnt >= 0 ? v[j] : lists[i].dflt == -1 ? w0.dims[2 + j] : lists[i].dflt;
  }
  bool has_pads = sc_node_attr(n, "pads") != NULL;
  int64_t cnt = sc_attr_ints(g, n, "output_shape", &v);
  if (cnt >= 0) { /* spatial dims, or the whole shape */
    if (cnt != ns && cnt != r)
      return sc_node_error(g, n, SC_ERR_INVALID, "output_shape has %lld values",
                           (long long)cnt);
    for (int32_t j = 0; j < ns; j++) oshape[j] = v[cnt - ns + j];
    has_oshape = true;
  }
  const char *ap;
  if ((st = sc_read_attr_string(g, n, "auto_pad", "NOTSET", &ap)) != SC_OK) return st;
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  for (int32_t j = 0; j < ns; j++) {
    if (strides[j] < 1 || dil[j] < 1 || k[j] != w0.dims[2 + j] || opad[j] < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "strides, dilations, kernel_shape or "
                           "output_padding of spatial dim %d", (int)j);
    int64_t full = strides[j] * (x0.dims[2 + j] - 1) + opad[j] + (k[j] - 1) * dil[j] + 1;
    if (!has_pads && same) { /* onnx's reference: the total padding split */
      int64_t want = has_oshape ? oshape[j] : x0.dims[2 + j] * strides[j];
      int64_t total = full - want;
      bool upper = !strcmp(ap, "SAME_UPPER");
      pads[j] = upper ? total / 2 : total - total / 2;
      pads[ns + j] = total - pads[j];
    } else if (!has_pads && !strcmp(ap, "VALID")) {
      pads[j] = pads[ns + j] = 0;
    }
    /* output_shape with explicit or no pads: the output is cut or extended
     * at the end */
    if (has_oshape && !same) pads[ns + j] = full - pads[j] - oshape[j];
  }
  /* zeros between the input's elements, along each strided dim: [.., L, ..]
   * -> [.., L, 1, ..] beside zeros [.., L, s-1, ..] -> [.., L·s, ..], cut to
   * (L-1)·s + 1 */
  int32_t xs = x;
  for (int32_t j = 0; j < ns && xs >= 0; j++) {
    if (strides[j] == 1) continue;
    int64_t s = strides[j], len = V(c, xs)->dims[2 + j], d[SC_MAX_RANK + 1];
    int32_t col = unsqueeze(c, xs, 3 + j, 1);
    if (col < 0) return built(c);
    memcpy(d, V(c, col)->dims, (size_t)(r + 1) * sizeof *d);
    d[3 + j] = s - 1;
    int32_t z = gb_expand(c, gb_scalar(c, x0.dtype, 0.0), r + 1, d);
    int32_t both = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){col, z}, 2, "axis", 3 + j);
    memcpy(d, V(c, xs)->dims, (size_t)r * sizeof *d);
    d[2 + j] = len * s;
    xs = axis_slice(c, gb_reshape(c, both, r, d), 2 + j, 0, (len - 1) * s + 1, 1);
  }
  if (xs < 0) return built(c);
  /* the Conv's pads: k' - 1 - pad, cropping first where that is negative */
  int64_t cp[6];
  for (int32_t j = 0; j < ns; j++) {
    int64_t kk = (k[j] - 1) * dil[j], lo = kk - pads[j], hi = kk - pads[ns + j] + opad[j];
    int64_t len = V(c, xs)->dims[2 + j];
    if (lo < 0 || hi < 0) {
      xs = axis_slice(c, xs, 2 + j, lo < 0 ? -lo : 0, hi < 0 ? len + hi : len, 1);
      if (xs < 0) return built(c);
    }
    cp[j] = lo > 0 ? lo : 0;
    cp[ns + j] = hi > 0 ? hi : 0;
  }
  /* weights: [C, M/g, k...] -> [g, C/g, M/g, k...] -> [g, M/g, C/g, k...] -> [M, C/g, k...],
   * flipped along every spatial axis */
  int64_t wd[SC_MAX_RANK + 1], perm[SC_MAX_RANK + 1];
  wd[0] = group;
  wd[1] = cin / group;
  wd[2] = mg;
  for (int32_t j = 0; j < ns; j++) wd[3 + j] = k[j];
  for (int32_t j = 0; j < r + 1; j++) perm[j] = j;
  perm[1] = 2;
  perm[2] = 1;
  int32_t wt = gb_transpose(c, gb_reshape(c, w, r + 1, wd), perm, r + 1);
  int64_t wn[SC_MAX_RANK];
  wn[0] = group * mg;
  wn[1] = cin / group;
  for (int32_t j = 0; j < ns; j++) wn[2 + j] = k[j];
  wt = gb_reshape(c, wt, r, wn);
  for (int32_t j = 0; j < ns; j++) wt = axis_slice(c, wt, 2 + j, -1, INT64_MIN, -1);
  int32_t in[3] = {xs, wt, b}, node = -1;
  if (xs < 0 || wt < 0) return built(c);
  int32_t y = gb_begin(c, SC_OP_CONV, in, b >= 0 ? 3 : 2, &node);
  sc_attr *ga = y < 0 ? NULL : sc_node_add_attr(g, node, "group", SC_ATTR_INT);
  if (!ga) return built(c);
  ga->i = group; /* before more attributes move the array */
  if (!gb_ints_attr(c, node, "pads", cp, 2 * ns) || !gb_ints_attr(c, node, "dilations", dil, ns))
    return built(c);
  out[0] = gb_end(c, node, y);
  return out[0] < 0 ? built(c) : SC_OK;
}

/* ---- TopK ---- */

/* ArgMax of x along axis, kept as a size-1 axis. */
static int32_t argmax_keep(sc_grad_ctx *c, int32_t x, int64_t axis) {
  if (x < 0) return -1;
  int32_t node = -1, y = gb_begin(c, SC_OP_ARG_MAX, &x, 1, &node);
  sc_attr *a = y < 0 ? NULL : sc_node_add_attr(c->g, node, "axis", SC_ATTR_INT);
  if (!a) return -1;
  a->i = axis; /* before another attribute moves the array */
  sc_attr *k = sc_node_add_attr(c->g, node, "keepdims", SC_ATTR_INT);
  if (!k) return -1;
  k->i = 1;
  return gb_end(c, node, y);
}

/* k rounds, each taking the first not-yet-taken element equal to the
 * largest (smallest) of those left: m = max over the untaken, then the
 * first untaken index holding m (an ArgMax over a 0/1 mask). Exact for
 * ties (lower index first) and any value; O(k n) per row. Outputs: the
 * values gathered at the indices. */
static sc_status expand_topk(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t axis, largest, kv[1], nk = 0;
  sc_status st;
  if ((st = sc_read_attr_int(g, N(c), "axis", -1, &axis)) != SC_OK ||
      (st = sc_read_attr_int(g, N(c), "largest", 1, &largest)) != SC_OK)
    return st;
  if (in_v(c, 1) >= 0) {
    if ((st = sc_input_ints(g, N(c), 1, kv, 1, &nk)) != SC_OK) return st;
  } else { /* before opset 10: the k attribute */
    if ((st = sc_read_attr_int(g, N(c), "k", -1, kv)) != SC_OK) return st;
    nk = 1;
  }
  int32_t x = in_v(c, 0);
  const sc_value x0 = *V(c, x);
  if (x0.rank < 1) return sc_node_error(g, N(c), SC_ERR_INVALID, "X must have rank >= 1");
  if (axis < -x0.rank || axis >= x0.rank)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "axis %lld for rank %d", (long long)axis,
                         x0.rank);
  if (axis < 0) axis += x0.rank;
  int64_t len = x0.dims[axis], k = kv[0];
  if (nk != 1 || k < 0 || k > len)
    return sc_node_error(g, N(c), SC_ERR_INVALID, "k must be one value in 0..%lld",
                         (long long)len);
  if (k > 4096)
    return sc_node_error(g, N(c), SC_ERR_LIMIT, "k %lld: the expansion takes one round per "
                         "element (at most 4096)", (long long)k);
  if (k == 0)
    return sc_node_error(g, N(c), SC_ERR_UNSUPPORTED, "k = 0 (empty outputs)");
  /* the taken elements read as the row's smallest (largest) value, which
   * is no greater (less) than any untaken one: no sentinel of the dtype */
  int32_t fill = gb_reduce(c, largest ? SC_OP_REDUCE_MIN : SC_OP_REDUCE_MAX, x,
                           (int64_t[]){axis}, 1, true);
  int32_t pos = iota(c, len, x0.rank, (int32_t)axis), taken = -1, *idx;
  idx = sc_arena_array(&g->arena, (size_t)k, sizeof *idx);
  if (!idx || pos < 0) return built(c);
  for (int64_t r = 0; r < k; r++) {
    int32_t left = taken < 0 ? x : gb_where(c, taken, fill, x);
    int32_t m = gb_reduce(c, largest ? SC_OP_REDUCE_MAX : SC_OP_REDUCE_MIN, left,
                          (int64_t[]){axis}, 1, true);
    int32_t hit = gb_2(c, SC_OP_EQUAL, x, m);
    if (taken >= 0) hit = gb_2(c, SC_OP_AND, hit, gb_1(c, SC_OP_NOT, taken));
    idx[r] = argmax_keep(c, gb_cast(c, hit, SC_DTYPE_I32), axis);
    int32_t now = gb_2(c, SC_OP_EQUAL, pos, idx[r]);
    taken = taken < 0 ? now : gb_2(c, SC_OP_OR, taken, now);
    if (taken < 0) return built(c);
  }
  int32_t ind = k == 1 ? idx[0] : gb_op_i(c, SC_OP_CONCAT, idx, (int32_t)k, "axis", axis);
  out[0] = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){x, ind}, 2, "axis", axis);
  out[1] = ind;
  return out[0] < 0 ? built(c) : SC_OK;
}

/* ---- Einsum ---- */

enum { EIN_MAX_IN = 8, EIN_ELL = 52 }; /* labels: a-z 0..25, A-Z 26..51, "..." dims 52.. */

typedef struct ein_term {
  int32_t n;                /* labels, one per axis */
  int8_t l[SC_MAX_RANK];
} ein_term;

/* One term of the equation ("bij", "...ii", ""), its ellipsis expanded to
 * `rank` axes labelled EIN_ELL, EIN_ELL + 1, ... (the caller right-aligns
 * them once every operand's count is known, as numpy broadcasts); rank <
 * 0: the output's, whose ellipsis spans *ell labels. *ell becomes the
 * largest ellipsis of the operands. */
static bool ein_parse(const char **p, int32_t rank, int32_t *ell, ein_term *t) {
  int32_t letters = 0, at = -1;
  int8_t raw[SC_MAX_RANK + 1];
  for (;;) {
    char ch = **p;
    if (ch == ' ') { (*p)++; continue; }
    if (ch == '.') {
      if (at >= 0 || strncmp(*p, "...", 3) != 0) return false;
      at = letters;
      *p += 3;
      continue;
    }
    int8_t id = ch >= 'a' && ch <= 'z' ? (int8_t)(ch - 'a') : ch >= 'A' && ch <= 'Z'
                                                                ? (int8_t)(26 + ch - 'A') : -1;
    if (id < 0) break;
    if (letters >= SC_MAX_RANK) return false;
    raw[letters++] = id;
    (*p)++;
  }
  int32_t e = at < 0 ? 0 : rank >= 0 ? rank - letters : *ell;
  if (e < 0 || (rank >= 0 && at < 0 && letters != rank) || letters + e > SC_MAX_RANK)
    return false;
  if (rank >= 0 && e > *ell) *ell = e;
  t->n = 0;
  for (int32_t i = 0; i <= letters; i++) {
    if (i == at)
      for (int32_t k = 0; k < e; k++) t->l[t->n++] = (int8_t)(EIN_ELL + k);
    if (i < letters) t->l[t->n++] = raw[i];
  }
  return true;
}

static int32_t ein_find(const ein_term *t, int8_t l) {
  for (int32_t i = 0; i < t->n; i++)
    if (t->l[i] == l) return i;
  return -1;
}

/* x's term without repeated labels: each repeat's diagonal (x times an
 * identity over the two axes, summed over the second). */
static int32_t ein_diagonal(sc_grad_ctx *c, int32_t x, ein_term *t) {
  for (int32_t q = 1; q < t->n && x >= 0; q++) {
    int32_t p = -1;
    for (int32_t i = 0; i < q; i++)
      if (t->l[i] == t->l[q]) p = i;
    if (p < 0) continue;
    int64_t n = V(c, x)->dims[p], d[SC_MAX_RANK];
    if (V(c, x)->dims[q] != n) return -1;
    int64_t *eye = sc_arena_array(&c->g->arena, (size_t)(n > 0 ? n * n : 1), sizeof *eye);
    if (!eye) return -1;
    for (int64_t i = 0; i < n * n; i++) eye[i] = i / n == i % n;
    for (int32_t i = 0; i < t->n; i++) d[i] = i == p || i == q ? n : 1;
    int32_t mask = gb_cast(c, gb_reshape(c, gb_ints(c, eye, (int32_t)(n * n)), t->n, d),
                           V(c, x)->dtype);
    x = gb_reduce(c, SC_OP_REDUCE_SUM, gb_2(c, SC_OP_MUL, x, mask), (int64_t[]){q}, 1, false);
    memmove(t->l + q, t->l + q + 1, (size_t)(t->n - q - 1));
    t->n--;
    q--;
  }
  return x;
}

/* Sums out the axes of x whose labels `keep` does not hold. */
static int32_t ein_sum_out(sc_grad_ctx *c, int32_t x, ein_term *t, const bool *keep) {
  int64_t axes[SC_MAX_RANK];
  int32_t na = 0, m = 0;
  for (int32_t i = 0; i < t->n; i++)
    if (!keep[t->l[i]]) axes[na++] = i;
    else t->l[m++] = t->l[i];
  t->n = m;
  return na ? gb_reduce(c, SC_OP_REDUCE_SUM, x, axes, na, false) : x;
}

/* x (term t) transposed to the label order `to`, then reshaped to dims
 * (the groups' products). */
static int32_t ein_arrange(sc_grad_ctx *c, int32_t x, const ein_term *t, const int8_t *to,
                           int32_t n, int32_t rank, const int64_t *dims) {
  int64_t perm[SC_MAX_RANK];
  bool id = true;
  for (int32_t i = 0; i < n; i++) {
    perm[i] = ein_find(t, to[i]);
    id = id && perm[i] == i;
  }
  if (!id) x = gb_transpose(c, x, perm, n);
  return gb_reshape(c, x, rank, dims);
}

static sc_status expand_einsum(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const char *eq;
  sc_status st = sc_read_attr_string(g, N(c), "equation", NULL, &eq);
  if (st != SC_OK) return st;
  int32_t nin = N(c)->n_inputs, ell = 0, x[EIN_MAX_IN];
  ein_term t[EIN_MAX_IN], o;
  if (!eq || nin > EIN_MAX_IN)
    return sc_node_error(g, N(c), SC_ERR_INVALID, eq ? "more than %d operands" :
                         "needs an equation", EIN_MAX_IN);
  const char *p = eq;
  for (int32_t i = 0; i < nin; i++) {
    x[i] = in_v(c, i);
    while (*p == ' ') p++;
    if (x[i] < 0 || !ein_parse(&p, V(c, x[i])->rank, &ell, &t[i]) ||
        (i + 1 < nin ? *p++ != ',' : false))
      return sc_node_error(g, N(c), SC_ERR_INVALID, "equation '%s' does not match operand %d "
                           "(rank %d)", eq, (int)i, x[i] < 0 ? -1 : V(c, x[i])->rank);
  }
  /* the ellipsis of a shorter operand takes the last of the ellipsis labels */
  for (int32_t i = 0; i < nin; i++) {
    int32_t e = 0;
    for (int32_t k = 0; k < t[i].n; k++) e += t[i].l[k] >= EIN_ELL;
    for (int32_t k = 0; k < t[i].n; k++)
      if (t[i].l[k] >= EIN_ELL) t[i].l[k] = (int8_t)(t[i].l[k] + ell - e);
  }
  while (*p == ' ') p++;
  int32_t count[EIN_ELL + SC_MAX_RANK] = {0};
  for (int32_t i = 0; i < nin; i++)
    for (int32_t k = 0; k < t[i].n; k++) count[t[i].l[k]]++;
  if (p[0] == '-' && p[1] == '>') {
    p += 2;
    if (!ein_parse(&p, -1, &ell, &o) || *p)
      return sc_node_error(g, N(c), SC_ERR_INVALID, "equation '%s': bad output term", eq);
  } else if (*p) {
    return sc_node_error(g, N(c), SC_ERR_INVALID, "equation '%s' is malformed", eq);
  } else { /* implicit: the ellipsis, then the labels used once, in order */
    o.n = 0;
    for (int32_t k = 0; k < ell; k++) o.l[o.n++] = (int8_t)(EIN_ELL + k);
    for (int8_t l = 0; l < EIN_ELL; l++)
      if (count[l] == 1 && o.n < SC_MAX_RANK) o.l[o.n++] = l;
  }
  int64_t size[EIN_ELL + SC_MAX_RANK];
  for (int32_t i = 0; i < EIN_ELL + SC_MAX_RANK; i++) size[i] = 1;
  for (int32_t i = 0; i < nin; i++)
    for (int32_t k = 0; k < t[i].n; k++) {
      int64_t d = V(c, x[i])->dims[k];
      if (d != 1 && size[t[i].l[k]] != 1 && size[t[i].l[k]] != d)
        return sc_node_error(g, N(c), SC_ERR_INVALID, "label '%c' has sizes %lld and %lld",
                             t[i].l[k] < 26 ? 'a' + t[i].l[k] : t[i].l[k] < EIN_ELL
                             ? 'A' + t[i].l[k] - 26 : '.', (long long)size[t[i].l[k]],
                             (long long)d);
      if (d != 1) size[t[i].l[k]] = d;
    }
  for (int32_t k = 0; k < o.n; k++)
    if (!count[o.l[k]] || ein_find(&o, o.l[k]) != k)
      return sc_node_error(g, N(c), SC_ERR_INVALID, "equation '%s': an output label is not an "
                           "input's, or repeats", eq);
  /* operands one by one into the running product r */
  int32_t r = -1;
  ein_term rt = {0};
  for (int32_t i = 0; i < nin; i++) {
    int32_t xi = ein_diagonal(c, x[i], &t[i]);
    if (xi < 0) return built(c);
    /* labels needed later: the output's and the remaining operands' */
    bool later[EIN_ELL + SC_MAX_RANK] = {false};
    for (int32_t k = 0; k < o.n; k++) later[o.l[k]] = true;
    for (int32_t j = i + 1; j < nin; j++)
      for (int32_t k = 0; k < t[j].n; k++) later[t[j].l[k]] = true;
    bool keep[EIN_ELL + SC_MAX_RANK];
    for (int32_t k = 0; k < EIN_ELL + SC_MAX_RANK; k++)
      keep[k] = later[k] || (r >= 0 && ein_find(&rt, (int8_t)k) >= 0);
    xi = ein_sum_out(c, xi, &t[i], keep);
    if (r < 0) {
      r = xi;
      rt = t[i];
      continue;
    }
    /* r [batch, m, k] @ xi [batch, k, n]: batch in both and needed later,
     * k in both and not, m / n in one only */
    int8_t bl[SC_MAX_RANK], ml[SC_MAX_RANK], kl[SC_MAX_RANK], nl[SC_MAX_RANK];
    int32_t nb = 0, nm = 0, nk = 0, nn = 0;
    for (int32_t k = 0; k < rt.n; k++) {
      bool both = ein_find(&t[i], rt.l[k]) >= 0;
      if (both && later[rt.l[k]]) bl[nb++] = rt.l[k];
      else if (both) kl[nk++] = rt.l[k];
      else ml[nm++] = rt.l[k];
    }
    for (int32_t k = 0; k < t[i].n; k++)
      if (ein_find(&rt, t[i].l[k]) < 0) nl[nn++] = t[i].l[k];
    /* size-1 axes meeting larger ones broadcast first */
    int32_t *ops[2] = {&r, &xi};
    ein_term *terms[2] = {&rt, &t[i]};
    for (int32_t s2 = 0; s2 < 2; s2++) {
      int64_t d[SC_MAX_RANK];
      bool grow = false;
      for (int32_t k = 0; k < terms[s2]->n; k++) {
        d[k] = size[terms[s2]->l[k]];
        grow = grow || (d[k] != V(c, *ops[s2])->dims[k] && (ein_find(terms[1 - s2], terms[s2]->l[k]) >= 0));
        if (ein_find(terms[1 - s2], terms[s2]->l[k]) < 0) d[k] = V(c, *ops[s2])->dims[k];
      }
      if (grow) *ops[s2] = gb_expand(c, *ops[s2], terms[s2]->n, d);
    }
    int64_t B = 1, M = 1, K = 1, Nn = 1;
    for (int32_t k = 0; k < nb; k++) B *= size[bl[k]];
    for (int32_t k = 0; k < nm; k++) M *= V(c, r)->dims[ein_find(&rt, ml[k])];
    for (int32_t k = 0; k < nk; k++) K *= size[kl[k]];
    for (int32_t k = 0; k < nn; k++) Nn *= V(c, xi)->dims[ein_find(&t[i], nl[k])];
    int8_t ao[SC_MAX_RANK * 2], bo[SC_MAX_RANK * 2];
    int32_t na = 0, nbo = 0;
    for (int32_t k = 0; k < nb; k++) ao[na++] = bl[k], bo[nbo++] = bl[k];
    for (int32_t k = 0; k < nm; k++) ao[na++] = ml[k];
    for (int32_t k = 0; k < nk; k++) ao[na++] = kl[k], bo[nbo++] = kl[k];
    for (int32_t k = 0; k < nn; k++) bo[nbo++] = nl[k];
    ein_term nt = {0};
    int64_t rd[SC_MAX_RANK];
    for (int32_t k = 0; k < nb; k++) nt.l[nt.n] = bl[k], rd[nt.n++] = size[bl[k]];
    for (int32_t k = 0; k < nm; k++) nt.l[nt.n] = ml[k], rd[nt.n++] = V(c, r)->dims[ein_find(&rt, ml[k])];
    for (int32_t k = 0; k < nn; k++) nt.l[nt.n] = nl[k], rd[nt.n++] = V(c, xi)->dims[ein_find(&t[i], nl[k])];
    if (nt.n > SC_MAX_RANK)
      return sc_node_error(g, N(c), SC_ERR_LIMIT, "an intermediate product has rank %d",
                           (int)nt.n);
    int32_t a3 = ein_arrange(c, r, &rt, ao, na, 3, (int64_t[]){B, M, K});
    int32_t b3 = ein_arrange(c, xi, &t[i], bo, nbo, 3, (int64_t[]){B, K, Nn});
    r = gb_reshape(c, gb_2(c, SC_OP_MATMUL, a3, b3), nt.n, rd);
    rt = nt;
    if (r < 0) return built(c);
  }
  bool keep[EIN_ELL + SC_MAX_RANK] = {false};
  for (int32_t k = 0; k < o.n; k++) keep[o.l[k]] = true;
  r = ein_sum_out(c, r, &rt, keep);
  int64_t od[SC_MAX_RANK];
  for (int32_t k = 0; k < o.n; k++) od[k] = r < 0 ? 0 : V(c, r)->dims[ein_find(&rt, o.l[k])];
  out[0] = r < 0 ? -1 : ein_arrange(c, r, &rt, o.l, o.n, o.n, od);
  return out[0] < 0 ? built(c) : SC_OK;
}

/* ---- small definitions ---- */

/* The node's attributes copied onto a node made by gb_begin. */
static bool copy_attrs(sc_grad_ctx *c, int32_t node) {
  int32_t na = N(c)->n_attrs;
  for (int32_t k = 0; k < na; k++) {
    sc_attr a = N(c)->attrs[k]; /* a copy: adding moves the array */
    sc_attr *b = sc_node_add_attr(c->g, node, a.name, a.kind);
    if (!b) return false;
    const char *name = b->name;
    *b = a;
    b->name = name;
  }
  return true;
}

/* Hardmax(axis): 1 at the first maximum along axis, 0 elsewhere. */
static sc_status expand_hardmax(sc_grad_ctx *c, int32_t *out) {
  int64_t axis;
  sc_status st = sc_read_attr_int(c->g, N(c), "axis", -1, &axis);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), r = V(c, x)->rank;
  if (axis < -r || axis >= r)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "axis %lld for rank %d", (long long)axis, r);
  if (axis < 0) axis += r;
  int32_t hit = gb_2(c, SC_OP_EQUAL, iota(c, V(c, x)->dims[axis], r, (int32_t)axis),
                     argmax_keep(c, x, axis));
  out[0] = gb_cast(c, hit, V(c, x)->dtype);
  return out[0] < 0 ? built(c) : SC_OK;
}

/* LpNormalization(axis, p 1 or 2): x / ||x||_p along axis (0 where the
 * norm is 0, as onnx's reference). */
static sc_status expand_lp_norm(sc_grad_ctx *c, int32_t *out) {
  int64_t axis, pw;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, N(c), "axis", -1, &axis)) != SC_OK ||
      (st = sc_read_attr_int(c->g, N(c), "p", 2, &pw)) != SC_OK)
    return st;
  if (pw != 1 && pw != 2)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "p %lld is not 1 or 2", (long long)pw);
  int32_t x = in_v(c, 0);
  int32_t nrm = gb_reduce(c, pw == 1 ? SC_OP_REDUCE_L1 : SC_OP_REDUCE_L2, x, &axis, 1, true);
  int32_t zero = gb_scalar(c, V(c, x)->dtype, 0.0);
  out[0] = gb_where(c, gb_2(c, SC_OP_EQUAL, nrm, zero), zero, gb_2(c, SC_OP_DIV, x, nrm));
  return out[0] < 0 ? built(c) : SC_OK;
}

/* Swish(alpha) = x sigmoid(alpha x). */
static sc_status expand_swish(sc_grad_ctx *c, int32_t *out) {
  double alpha;
  sc_status st = sc_read_attr_float(c->g, N(c), "alpha", 1.0, &alpha);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0);
  out[0] = gb_2(c, SC_OP_MUL, x, gb_1(c, SC_OP_SIGMOID, gb_2(c, SC_OP_MUL, x,
                                                            gb_scalar(c, V(c, x)->dtype, alpha))));
  return out[0] < 0 ? built(c) : SC_OK;
}

/* ReduceLogSum = log(ReduceSum(...)), with the node's inputs and
 * attributes. */
static sc_status expand_reduce_log_sum(sc_grad_ctx *c, int32_t *out) {
  int32_t in[2] = {in_v(c, 0), in_v(c, 1)}, node = -1;
  int32_t s = gb_begin(c, SC_OP_REDUCE_SUM, in, in[1] >= 0 ? 2 : 1, &node);
  if (s < 0 || !copy_attrs(c, node)) return built(c);
  out[0] = gb_1(c, SC_OP_LOG, gb_end(c, node, s));
  return out[0] < 0 ? built(c) : SC_OK;
}

/* MeanVarianceNormalization(axes = 0, 2, 3): (x - E x) / (sqrt(E x^2 -
 * (E x)^2) + 1e-9), as ONNX's function body. */
static sc_status expand_mvn(sc_grad_ctx *c, int32_t *out) {
  const int64_t *ax = NULL, dflt[3] = {0, 2, 3};
  int64_t na = sc_attr_ints(c->g, N(c), "axes", &ax);
  if (na < 0) ax = dflt, na = 3;
  int32_t x = in_v(c, 0);
  sc_dtype t = V(c, x)->dtype;
  int32_t m = gb_reduce(c, SC_OP_REDUCE_MEAN, x, ax, (int32_t)na, true);
  int32_t m2 = gb_reduce(c, SC_OP_REDUCE_MEAN, gb_2(c, SC_OP_MUL, x, x), ax, (int32_t)na, true);
  int32_t sd = gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_SUB, m2, gb_2(c, SC_OP_MUL, m, m)));
  out[0] = gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_SUB, x, m),
                gb_2(c, SC_OP_ADD, sd, gb_scalar(c, t, 1e-9)));
  return out[0] < 0 ? built(c) : SC_OK;
}

/* EyeLike(dtype, k): the input's [rows, cols] shape, ones on diagonal k. */
static sc_status expand_eye_like(sc_grad_ctx *c, int32_t *out) {
  int64_t k, dt;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, N(c), "k", 0, &k)) != SC_OK ||
      (st = sc_read_attr_int(c->g, N(c), "dtype", 0, &dt)) != SC_OK)
    return st;
  int32_t x = in_v(c, 0);
  if (V(c, x)->rank != 2)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "the input must be 2-D");
  sc_dtype t = dt ? sc_dtype_from_onnx((int32_t)dt) : V(c, x)->dtype;
  if (t == SC_DTYPE_COUNT)
    return sc_node_error(c->g, N(c), SC_ERR_UNSUPPORTED, "dtype %lld", (long long)dt);
  int64_t rows = V(c, x)->dims[0], cols = V(c, x)->dims[1];
  int32_t i = iota(c, rows, 2, 0), j = iota(c, cols, 2, 1);
  int32_t on = gb_2(c, SC_OP_EQUAL, gb_2(c, SC_OP_ADD, i, gb_scalar(c, SC_DTYPE_I64, (double)k)),
                    j);
  out[0] = gb_cast(c, on, t);
  return out[0] < 0 ? built(c) : SC_OK;
}

/* CenterCropPad(input, shape[, axes]): each axis cut or zero-padded to its
 * size around the centre (the odd element at the end), as onnx's
 * reference. */
static sc_status expand_center_crop_pad(sc_grad_ctx *c, int32_t *out) {
  int32_t x = in_v(c, 0), r = V(c, x)->rank;
  int64_t shape[SC_MAX_RANK], ns = 0, axes[SC_MAX_RANK];
  sc_status st = sc_input_ints(c->g, N(c), 1, shape, SC_MAX_RANK, &ns);
  if (st != SC_OK) return st;
  const int64_t *ax = NULL;
  int64_t na = sc_attr_ints(c->g, N(c), "axes", &ax);
  if (na < 0)
    for (na = 0; na < r; na++) axes[na] = na;
  else
    for (int64_t i = 0; i < na; i++) axes[i] = ax[i] < 0 ? ax[i] + r : ax[i];
  if (na != ns)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "%lld sizes for %lld axes", (long long)ns,
                         (long long)na);
  int64_t pads[2 * SC_MAX_RANK] = {0};
  bool pad = false;
  for (int64_t i = 0; i < na && x >= 0; i++) {
    if (axes[i] < 0 || axes[i] >= r || shape[i] < 0)
      return sc_node_error(c->g, N(c), SC_ERR_INVALID, "axis or size %lld", (long long)i);
    int64_t dim = V(c, x)->dims[axes[i]], want = shape[i];
    if (want < dim) {
      int64_t lo = (dim - want) / 2;
      x = axis_slice(c, x, axes[i], lo, lo + want, 1);
    } else if (want > dim) {
      pads[axes[i]] = (want - dim) / 2;
      pads[r + axes[i]] = want - dim - pads[axes[i]];
      pad = true;
    }
  }
  if (pad) x = gb_2(c, SC_OP_PAD, x, gb_ints(c, pads, 2 * r));
  out[0] = x;
  return x < 0 ? built(c) : SC_OK;
}

/* LRN(size, alpha, beta, bias) over channels: x / (bias + alpha / size *
 * sum of x^2 over [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta. */
static sc_status expand_lrn(sc_grad_ctx *c, int32_t *out) {
  int64_t size;
  double alpha, beta, bias;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, N(c), "size", 0, &size)) != SC_OK ||
      (st = sc_read_attr_float(c->g, N(c), "alpha", 1e-4, &alpha)) != SC_OK ||
      (st = sc_read_attr_float(c->g, N(c), "beta", 0.75, &beta)) != SC_OK ||
      (st = sc_read_attr_float(c->g, N(c), "bias", 1.0, &bias)) != SC_OK)
    return st;
  int32_t x = in_v(c, 0), r = V(c, x)->rank;
  sc_dtype t = V(c, x)->dtype;
  if (size < 1 || r < 3)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "size must be >= 1 and X [N, C, ...]");
  int64_t ch = V(c, x)->dims[1], lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t pads[2 * SC_MAX_RANK] = {0};
  pads[1] = lo;
  pads[r + 1] = hi;
  int32_t sq = gb_2(c, SC_OP_PAD, gb_2(c, SC_OP_MUL, x, x), gb_ints(c, pads, 2 * r));
  int32_t sum = -1;
  for (int64_t k = 0; k < size; k++) {
    int32_t part = axis_slice(c, sq, 1, k, k + ch, 1);
    sum = sum < 0 ? part : gb_2(c, SC_OP_ADD, sum, part);
  }
  int32_t den = gb_2(c, SC_OP_ADD, gb_scalar(c, t, bias),
                     gb_2(c, SC_OP_MUL, gb_scalar(c, t, alpha / (double)size), sum));
  out[0] = gb_2(c, SC_OP_DIV, x, gb_2(c, SC_OP_POW, den, gb_scalar(c, t, beta)));
  return out[0] < 0 ? built(c) : SC_OK;
}

/* Hann, Hamming and Blackman windows of a constant size, made here. */
static sc_status expand_window(sc_grad_ctx *c, int32_t *out) {
  int64_t size = 0, n = 0, periodic, dt;
  sc_status st;
  if ((st = sc_input_ints(c->g, N(c), 0, &size, 1, &n)) != SC_OK ||
      (st = sc_read_attr_int(c->g, N(c), "periodic", 1, &periodic)) != SC_OK ||
      (st = sc_read_attr_int(c->g, N(c), "output_datatype", 1, &dt)) != SC_OK)
    return st;
  sc_dtype t = sc_dtype_from_onnx((int32_t)dt);
  if (n != 1 || size < 1 || size > (1 << 24) || t == SC_DTYPE_COUNT)
    return sc_node_error(c->g, N(c), SC_ERR_INVALID, "size must be one value in 1..2^24 and "
                         "output_datatype a dtype shardc has");
  double *w = sc_arena_array(&c->g->arena, (size_t)size, sizeof *w);
  if (!w) return built(c);
  double den = (double)(periodic ? size : size - 1), pi2 = 2.0 * M_PI;
  sc_op op = N(c)->op;
  for (int64_t i = 0; i < size; i++) {
    double a = den > 0 ? pi2 * (double)i / den : 0.0;
    w[i] = op == SC_OP_HANN_WINDOW      ? 0.5 - 0.5 * cos(a)
           : op == SC_OP_HAMMING_WINDOW ? 25.0 / 46.0 - (21.0 / 46.0) * cos(a)
                                        : 0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a);
  }
  int32_t v = sc_graph_new_value(c->g, "window");
  if (v < 0 || sc_value_set_data(c->g, v, SC_DTYPE_F64, 1, &size, w,
                                 (uint64_t)size * sizeof *w, false) != SC_OK)
    return built(c);
  out[0] = gb_cast(c, v, t);
  return out[0] < 0 ? built(c) : SC_OK;
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
  case SC_OP_RNN: case SC_OP_GRU: case SC_OP_LSTM: return expand_rnn;
  case SC_OP_CONV_TRANSPOSE: return expand_conv_transpose;
  case SC_OP_TOP_K: return expand_topk;
  case SC_OP_EINSUM: return expand_einsum;
  case SC_OP_HARDMAX: return expand_hardmax;
  case SC_OP_LP_NORM: return expand_lp_norm;
  case SC_OP_SWISH: return expand_swish;
  case SC_OP_REDUCE_LOG_SUM: return expand_reduce_log_sum;
  case SC_OP_MVN: return expand_mvn;
  case SC_OP_EYE_LIKE: return expand_eye_like;
  case SC_OP_CENTER_CROP_PAD: return expand_center_crop_pad;
  case SC_OP_LRN: return expand_lrn;
  case SC_OP_HANN_WINDOW: case SC_OP_HAMMING_WINDOW: case SC_OP_BLACKMAN_WINDOW:
    return expand_window;
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
