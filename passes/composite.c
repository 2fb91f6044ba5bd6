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
 * The ops, by file (each file opens with the definitions it implements;
 * the semantics are the ONNX operator docs'):
 *   composite_attention.c  Attention, RotaryEmbedding, LinearAttention;
 *   composite_rnn.c        RNN, GRU, LSTM;
 *   composite_linalg.c     ConvTranspose, TopK, Einsum;
 *   composite_sample.c     GridSample, DeformConv, RoiAlign;
 *   composite_signal.c     DFT, STFT;
 *   composite_control.c    If, Loop, Scan (their subgraphs inlined),
 *                          FlexAttention;
 *   composite_misc.c       Det, MelWeightMatrix, Binarizer,
 *                          ArrayFeatureExtractor, OptionalHasElement,
 *                          OptionalGetElement;
 *   composite_quant.c      QuantizeLinear, DequantizeLinear,
 *                          DynamicQuantizeLinear, MatMulInteger,
 *                          ConvInteger, QLinearMatMul, QLinearConv;
 *   here                   the losses (NegativeLogLikelihoodLoss:
 *       −input[n, t, d…] · weight[t] per element, 0 where t = ignore_index,
 *       reduced by "none", "sum" or "mean" — the sum over the sum of the
 *       weights taken; SoftmaxCrossEntropyLoss: the same over
 *       LogSoftmax(scores, axis 1), which is output 1) and the small ones,
 *       each above its expansion: Hardmax, LpNormalization, Swish, SwiGLU,
 *       ReduceLogSum, MeanVarianceNormalization, EyeLike, CenterCropPad,
 *       LRN, the Hann/Hamming/Blackman windows, CausalConvWithState,
 *       ReverseSequence, TensorScatter; and BatchNormalization in training
 *       mode (sc_expands_here). */
#include <math.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

enum { MAX_OUT = 64 }; /* outputs of a composite op, at most (Loop, Scan: checked) */

/* ---- shared builders (composite_internal.h) ---- */

/* composite_internal.h says what each of these does. */
int32_t cx_unsqueeze(sc_grad_ctx *c, int32_t x, int32_t at, int32_t n) {
  if (x < 0) return -1;
  const sc_value *v = cx_val(c, x);
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

/* An int64 constant of `rank` dims, all 1 but dims[axis] = n, holding
 * 0..n-1 along it. */
void *cx_const_data(sc_grad_ctx *c, const char *name, sc_dtype t, int32_t rank,
                    const int64_t *dims, int32_t *value) {
  sc_graph *g = c->g;
  int64_t bytes = (int64_t)sc_dtype_size(t);
  for (int32_t j = 0; j < rank; j++)
    if (dims[j] < 0 || !sc_mul_i64(bytes, dims[j], &bytes)) return NULL;
  void *p = sc_arena_alloc(&g->arena, bytes > 0 ? (size_t)bytes : 1);
  *value = p ? sc_graph_new_value(g, name) : -1;
  if (*value < 0) return NULL;
  memset(p, 0, (size_t)bytes);
  return sc_value_set_data(g, *value, t, rank, dims, p, (uint64_t)bytes, false) == SC_OK ? p
                                                                                         : NULL;
}

int32_t cx_iota(sc_grad_ctx *c, int64_t n, int32_t rank, int32_t axis) {
  int64_t *v = sc_arena_array(&c->g->arena, (size_t)(n ? n : 1), sizeof *v);
  if (!v) return -1;
  for (int64_t i = 0; i < n; i++) v[i] = i;
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < rank; i++) d[i] = i == axis ? n : 1;
  return gb_reshape(c, gb_ints(c, v, (int32_t)n), rank, d);
}

int32_t cx_clip(sc_grad_ctx *c, int32_t x, sc_dtype t, double lo, double hi) {
  if (x < 0) return -1;
  return gb_op(c, SC_OP_CLIP, (int32_t[]){x, gb_scalar(c, t, lo), gb_scalar(c, t, hi)}, 3);
}

/* x[..., a:b] along the last axis. */
int32_t cx_last_slice(sc_grad_ctx *c, int32_t x, int64_t a, int64_t b) {
  return cx_axis_slice(c, x, -1, a, b, 1);
}

/* x[.., a:b, ..] along `axis` (step 1, or -1 from a down to b exclusive). */
int32_t cx_axis_slice(sc_grad_ctx *c, int32_t x, int64_t axis, int64_t a, int64_t b,
                      int64_t step) {
  if (x < 0) return -1;
  return gb_op(c, SC_OP_SLICE, (int32_t[]){x, gb_ints(c, &a, 1), gb_ints(c, &b, 1),
                                           gb_ints(c, &axis, 1), gb_ints(c, &step, 1)}, 5);
}

/* ArgMax of x along axis, kept as a size-1 axis. */
int32_t cx_argmax_keep(sc_grad_ctx *c, int32_t x, int64_t axis) {
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

/* ---- small definitions ---- */

/* Hardmax(axis): 1 at the first maximum along axis, 0 elsewhere. */
static sc_status expand_hardmax(sc_grad_ctx *c, int32_t *out) {
  int64_t axis;
  sc_status st = sc_read_attr_int(c->g, cx_node(c), "axis", -1, &axis);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0), r = cx_val(c, x)->rank;
  if (axis < -r || axis >= r)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "axis %lld for rank %d", (long long)axis, r);
  if (axis < 0) axis += r;
  int32_t hit = gb_2(c, SC_OP_EQUAL, cx_iota(c, cx_val(c, x)->dims[axis], r, (int32_t)axis),
                     cx_argmax_keep(c, x, axis));
  out[0] = gb_cast(c, hit, cx_val(c, x)->dtype);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* LpNormalization(axis, p 1 or 2): x / ||x||_p along axis (0 where the
 * norm is 0, as onnx's reference). */
static sc_status expand_lp_norm(sc_grad_ctx *c, int32_t *out) {
  int64_t axis, pw;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, cx_node(c), "axis", -1, &axis)) != SC_OK ||
      (st = sc_read_attr_int(c->g, cx_node(c), "p", 2, &pw)) != SC_OK)
    return st;
  if (pw != 1 && pw != 2)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "p %lld is not 1 or 2", (long long)pw);
  int32_t x = cx_in(c, 0);
  int32_t nrm = gb_reduce(c, pw == 1 ? SC_OP_REDUCE_L1 : SC_OP_REDUCE_L2, x, &axis, 1, true);
  int32_t zero = gb_scalar(c, cx_val(c, x)->dtype, 0.0);
  out[0] = gb_where(c, gb_2(c, SC_OP_EQUAL, nrm, zero), zero, gb_2(c, SC_OP_DIV, x, nrm));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* Swish(alpha) = x sigmoid(alpha x); SwiGLU(a, b) = Swish(alpha)(a) b, a and
 * b of one shape (no broadcasting). */
static sc_status expand_swish(sc_grad_ctx *c, int32_t *out) {
  double alpha;
  sc_status st = sc_read_attr_float(c->g, cx_node(c), "alpha", 1.0, &alpha);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0);
  if (cx_node(c)->op == SC_OP_SWIGLU) {
    const sc_value *a = cx_val(c, x), *b = cx_val(c, cx_in(c, 1));
    if (a->dtype != b->dtype || a->rank != b->rank ||
        memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) != 0)
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                           "gate '%s' and value '%s' must have one dtype and shape", a->name,
                           b->name);
  }
  out[0] = gb_2(c, SC_OP_MUL, x, gb_1(c, SC_OP_SIGMOID, gb_2(c, SC_OP_MUL, x,
                                                            gb_scalar(c, cx_val(c, x)->dtype, alpha))));
  if (cx_node(c)->op == SC_OP_SWIGLU) out[0] = gb_2(c, SC_OP_MUL, out[0], cx_in(c, 1));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ReduceLogSum = log(ReduceSum(...)), with the node's inputs and
 * attributes. */
static sc_status expand_reduce_log_sum(sc_grad_ctx *c, int32_t *out) {
  int32_t in[2] = {cx_in(c, 0), cx_in(c, 1)}, node = -1;
  int32_t s = gb_begin(c, SC_OP_REDUCE_SUM, in, in[1] >= 0 ? 2 : 1, &node);
  if (s < 0 || sc_node_copy_attrs(c->g, node, cx_node(c)) != SC_OK) return cx_built(c);
  out[0] = gb_1(c, SC_OP_LOG, gb_end(c, node, s));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* MeanVarianceNormalization(axes = 0, 2, 3): (x - E x) / (sqrt(E x^2 -
 * (E x)^2) + 1e-9), as ONNX's function body. */
static sc_status expand_mvn(sc_grad_ctx *c, int32_t *out) {
  const int64_t *ax = NULL, dflt[3] = {0, 2, 3};
  int64_t na = sc_attr_ints(c->g, cx_node(c), "axes", &ax);
  if (na < 0) ax = dflt, na = 3;
  int32_t x = cx_in(c, 0);
  sc_dtype t = cx_val(c, x)->dtype;
  int32_t m = gb_reduce(c, SC_OP_REDUCE_MEAN, x, ax, (int32_t)na, true);
  int32_t m2 = gb_reduce(c, SC_OP_REDUCE_MEAN, gb_2(c, SC_OP_MUL, x, x), ax, (int32_t)na, true);
  int32_t sd = gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_SUB, m2, gb_2(c, SC_OP_MUL, m, m)));
  out[0] = gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_SUB, x, m),
                gb_2(c, SC_OP_ADD, sd, gb_scalar(c, t, 1e-9)));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* EyeLike(dtype, k): the input's [rows, cols] shape, ones on diagonal k. */
static sc_status expand_eye_like(sc_grad_ctx *c, int32_t *out) {
  int64_t k, dt;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, cx_node(c), "k", 0, &k)) != SC_OK ||
      (st = sc_read_attr_int(c->g, cx_node(c), "dtype", 0, &dt)) != SC_OK)
    return st;
  int32_t x = cx_in(c, 0);
  if (cx_val(c, x)->rank != 2)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "the input must be 2-D");
  sc_dtype t = dt ? sc_dtype_from_onnx((int32_t)dt) : cx_val(c, x)->dtype;
  if (t == SC_DTYPE_COUNT)
    return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED, "dtype %lld", (long long)dt);
  int64_t rows = cx_val(c, x)->dims[0], cols = cx_val(c, x)->dims[1];
  int32_t i = cx_iota(c, rows, 2, 0), j = cx_iota(c, cols, 2, 1);
  int32_t on = gb_2(c, SC_OP_EQUAL, gb_2(c, SC_OP_ADD, i, gb_scalar(c, SC_DTYPE_I64, (double)k)),
                    j);
  out[0] = gb_cast(c, on, t);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* Compress(x, condition; axis?): the slices along axis (of x flattened
 * when there is none) whose condition entry is true, entries past the
 * condition's length false — a Gather of those positions. The condition
 * must be a constant (it gives the output's shape; `shardc run`
 * specialises to a given one); x may be computed. */
static sc_status expand_compress(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), cond = cx_in(c, 1);
  const sc_value x0 = *cx_val(c, x), c0 = *cx_val(c, cond);
  sc_status st = sc_require_const(g, cx_node(c), cx_val(c, cond));
  if (st != SC_OK) return st;
  if (c0.rank != 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the condition must be 1-D");
  const sc_attr *a = sc_node_attr(cx_node(c), "axis");
  int32_t axis = 0;
  int64_t len = sc_value_numel(&x0);
  if (a) {
    int64_t v;
    if ((st = sc_read_attr_int(g, cx_node(c), "axis", 0, &v)) != SC_OK ||
        (st = sc_norm_axis(g, cx_node(c), v, x0.rank, &axis)) != SC_OK)
      return st;
    len = x0.dims[axis];
  } else {
    x = gb_reshape(c, x, 1, &len);
  }
  int64_t m = 0, n = c0.dims[0] < len ? c0.dims[0] : len;
  for (int64_t i = 0; i < n; i++) m += sc_load_i64(c0.dtype, c0.data, i) != 0;
  int32_t idx;
  int64_t *iv = cx_const_data(c, "compress_indices", SC_DTYPE_I64, 1, &m, &idx);
  if (!iv && m) return cx_built(c);
  for (int64_t i = 0, k = 0; i < n; i++)
    if (sc_load_i64(c0.dtype, c0.data, i) != 0) iv[k++] = i;
  out[0] = gb_op_i(c, SC_OP_GATHER, (int32_t[]){x, idx}, 2, "axis", axis);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* The optimizers of ai.onnx.preview.training, per tensor group i of their
 * inputs (R, T, X1..Xn, G1..Gn, then the state tensors), as onnx's
 * reference: g = norm_coefficient·x + grad, then
 *   Momentum: v' = α v + β' g (β' = β when T > 0, else 1);
 *     x' = x − R v' ("standard") or x − R (g + α v') ("nesterov");
 *   Adagrad: h' = h + g²; x' = x − R / (1 + T·decay) · g / (√h' + ε);
 *   Adam: v' = α v + (1 − α) g; h' = β h + (1 − β) g²; x' = (1 −
 *     norm_coefficient_post)(x − R' v' / (√h' + ε)), R' = R √(1 − β^T) /
 *     (1 − α^T) when T > 0, else R.
 * Outputs: the new X's, then each state's. Computed in f32. */
static sc_status expand_optimizer(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_node *n = cx_node(c); /* until the first builder moves the nodes */
  const sc_op op = n->op;
  int states = op == SC_OP_ADAM ? 2 : 1;
  int32_t groups = (n->n_inputs - 2) / (2 + states);
  if (groups < 1 || 2 + groups * (2 + states) != n->n_inputs ||
      n->n_outputs != groups * (1 + states) || n->n_outputs > MAX_OUT)
    return sc_node_error(g, n, SC_ERR_INVALID, "%d inputs and %d outputs do not make groups of "
                         "X, G and %d state(s)", n->n_inputs, n->n_outputs, states);
  double a = 0, b = 0, eps = 0, nc = 0, post = 0, decay = 0;
  sc_status st = sc_read_attr_float(g, n, "norm_coefficient", 0, &nc);
  bool nesterov = false;
  if (st == SC_OK && n->op == SC_OP_MOMENTUM) {
    const char *mode;
    if ((st = sc_read_attr_float(g, n, "alpha", 0, &a)) != SC_OK ||
        (st = sc_read_attr_float(g, n, "beta", 0, &b)) != SC_OK ||
        (st = sc_read_attr_string(g, n, "mode", "standard", &mode)) != SC_OK)
      return st;
    if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "mode '%s' (standard or nesterov)", mode);
    nesterov = mode[0] == 'n';
  } else if (st == SC_OK && n->op == SC_OP_ADAGRAD) {
    if ((st = sc_read_attr_float(g, n, "decay_factor", 0, &decay)) != SC_OK ||
        (st = sc_read_attr_float(g, n, "epsilon", 1e-6, &eps)) != SC_OK)
      return st;
  } else if (st == SC_OK) {
    if ((st = sc_read_attr_float(g, n, "alpha", 0.9, &a)) != SC_OK ||
        (st = sc_read_attr_float(g, n, "beta", 0.999, &b)) != SC_OK ||
        (st = sc_read_attr_float(g, n, "epsilon", 1e-6, &eps)) != SC_OK ||
        (st = sc_read_attr_float(g, n, "norm_coefficient_post", 0, &post)) != SC_OK)
      return st;
  }
  if (st != SC_OK) return st;
  const sc_dtype F = SC_DTYPE_F32;
#define K(v) gb_scalar(c, F, (v))
  int32_t r = gb_cast(c, cx_in(c, 0), F), t = gb_cast(c, cx_in(c, 1), F);
  int32_t started = gb_2(c, SC_OP_GREATER, t, K(0));
  for (int32_t i = 0; i < groups; i++) {
    int32_t x = cx_in(c, 2 + i), gr = cx_in(c, 2 + groups + i);
    int32_t s1 = cx_in(c, 2 + 2 * groups + i);
    int32_t gg = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, K(nc), x), gr), xn, s1n, s2n = -1;
    if (op == SC_OP_MOMENTUM) {
      int32_t bb = gb_where(c, started, K(b), K(1));
      s1n = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, K(a), s1), gb_2(c, SC_OP_MUL, bb, gg));
      int32_t step = nesterov ? gb_2(c, SC_OP_ADD, gg, gb_2(c, SC_OP_MUL, K(a), s1n)) : s1n;
      xn = gb_2(c, SC_OP_SUB, x, gb_2(c, SC_OP_MUL, r, step));
    } else if (op == SC_OP_ADAGRAD) {
      int32_t rr = gb_2(c, SC_OP_DIV, r, gb_2(c, SC_OP_ADD, K(1), gb_2(c, SC_OP_MUL, t, K(decay))));
      s1n = gb_2(c, SC_OP_ADD, s1, gb_2(c, SC_OP_MUL, gg, gg));
      int32_t den = gb_2(c, SC_OP_ADD, gb_1(c, SC_OP_SQRT, s1n), K(eps));
      xn = gb_2(c, SC_OP_SUB, x, gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_MUL, rr, gg), den));
    } else {
      int32_t s2 = cx_in(c, 2 + 3 * groups + i);
      s1n = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, K(a), s1), gb_2(c, SC_OP_MUL, K(1 - a), gg));
      s2n = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, K(b), s2),
                 gb_2(c, SC_OP_MUL, K(1 - b), gb_2(c, SC_OP_MUL, gg, gg)));
      int32_t corr = gb_2(c, SC_OP_DIV,
                          gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_SUB, K(1), gb_2(c, SC_OP_POW, K(b), t))),
                          gb_2(c, SC_OP_SUB, K(1), gb_2(c, SC_OP_POW, K(a), t)));
      int32_t rr = gb_where(c, started, gb_2(c, SC_OP_MUL, r, corr), r);
      int32_t den = gb_2(c, SC_OP_ADD, gb_1(c, SC_OP_SQRT, s2n), K(eps));
      xn = gb_2(c, SC_OP_SUB, x, gb_2(c, SC_OP_MUL, rr, gb_2(c, SC_OP_DIV, s1n, den)));
      xn = gb_2(c, SC_OP_MUL, K(1 - post), xn);
    }
    out[i] = xn;
    out[groups + i] = s1n;
    if (states == 2) out[2 * groups + i] = s2n;
    if (xn < 0 || s1n < 0 || (states == 2 && s2n < 0)) return cx_built(c);
  }
#undef K
  return SC_OK;
}

/* MaxUnpool(X, I[, output_shape]; kernel_shape, pads, strides): zeros of
 * the inferred shape ((in - 1) stride + kernel - pads per spatial dim)
 * with X's values at I's flat indices — a ScatterElements over the
 * flattened tensor — then, as onnx's reference, zero-padded at the end to
 * output_shape (a constant, no smaller). */
static sc_status expand_max_unpool(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), ind = cx_in(c, 1);
  const sc_value x0 = *cx_val(c, x);
  int32_t r = x0.rank, ns = r - 2;
  int64_t od[SC_MAX_RANK], want[SC_MAX_RANK], n = 0, total = 1, flat = sc_value_numel(&x0);
  const int64_t *ks, *pv, *sv;
  int64_t nk = sc_attr_ints(g, cx_node(c), "kernel_shape", &ks);
  int64_t np = sc_attr_ints(g, cx_node(c), "pads", &pv);
  int64_t nst = sc_attr_ints(g, cx_node(c), "strides", &sv);
  if (r < 3 || cx_val(c, ind)->rank != r || nk != ns || (np >= 0 && np != 2 * ns) ||
      (nst >= 0 && nst != ns))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "X and I must be [N, C, ...] alike, "
                         "and kernel_shape, pads and strides match their spatial dims");
  od[0] = x0.dims[0];
  od[1] = x0.dims[1];
  for (int32_t j = 0; j < ns; j++)
    od[2 + j] = (x0.dims[2 + j] - 1) * (nst >= 0 ? sv[j] : 1) + ks[j] -
                (np >= 0 ? pv[j] + pv[ns + j] : 0);
  for (int32_t j = 0; j < r; j++) {
    if (od[j] < 1 || !sc_mul_i64(total, od[j], &total))
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "output dim %d is %lld", (int)j,
                           (long long)od[j]);
  }
  sc_status st = SC_OK;
  bool pad = false;
  if (cx_in(c, 2) >= 0) {
    if ((st = sc_input_ints(g, cx_node(c), 2, want, SC_MAX_RANK, &n)) != SC_OK) return st;
    for (int32_t j = 0; j < r && n == r; j++) {
      if (want[j] < od[j]) n = -1;
      pad |= want[j] != od[j];
    }
    if (n != r)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "output_shape must have %d values, "
                           "none below the inferred shape", r);
  }
  int32_t zeros = gb_expand(c, gb_scalar(c, x0.dtype, 0.0), 1, &total);
  int32_t in[3] = {zeros, gb_reshape(c, gb_cast(c, ind, SC_DTYPE_I64), 1, &flat),
                   gb_reshape(c, x, 1, &flat)};
  int32_t y = in[0] < 0 || in[1] < 0 || in[2] < 0 ? -1
                                                   : gb_op_i(c, SC_OP_SCATTER_ELEMENTS, in, 3,
                                                             "axis", 0);
  y = gb_reshape(c, y, r, od);
  if (pad) {
    int64_t pads[2 * SC_MAX_RANK] = {0};
    for (int32_t j = 0; j < r; j++) pads[r + j] = want[j] - od[j];
    y = gb_2(c, SC_OP_PAD, y, gb_ints(c, pads, 2 * r));
  }
  out[0] = y;
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* AffineGrid(theta [N, k, k+1], size [N, C, (D,) H, W]; align_corners):
 * the sampling grid [N, (D,) H, W, k] = theta applied to each output
 * point's normalised coordinates (x along W, y along H, z along D, then
 * 1): one MatMul of the constant [points, k+1] grid by theta transposed.
 * A coordinate i of n is -1 + 2i/(n-1) with align_corners (-1 when n is
 * 1), else -1 + (2i+1)/n, as onnx's reference. size must be a constant. */
static sc_status expand_affine_grid(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t align, size[5], ns = 0;
  sc_status st = sc_read_attr_int(g, cx_node(c), "align_corners", 0, &align);
  if (st == SC_OK) st = sc_input_ints(g, cx_node(c), 1, size, 5, &ns);
  if (st != SC_OK) return st;
  int32_t theta = cx_in(c, 0);
  const sc_value t0 = *cx_val(c, theta);
  int64_t k = ns - 2, pts = 1;
  if ((ns != 4 && ns != 5) || t0.rank != 3 || t0.dims[0] != size[0] || t0.dims[1] != k ||
      t0.dims[2] != k + 1 || !sc_dtype_is_float(t0.dtype))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "theta must be float [N, %lld, %lld] "
                         "for size [N, C, ...] of 4 or 5 values", (long long)k,
                         (long long)k + 1);
  for (int64_t j = 2; j < ns; j++)
    if (size[j] < 1 || !sc_mul_i64(pts, size[j], &pts) || pts > (1 << 24))
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "size %lld of dim %lld",
                           (long long)size[j], (long long)j);
  int64_t bd[2] = {pts, k + 1}, od[SC_MAX_RANK];
  int32_t b;
  void *base = cx_const_data(c, "affine_grid_base", t0.dtype, 2, bd, &b);
  if (!base) return cx_built(c);
  for (int64_t p = 0; p < pts; p++) {
    int64_t rest = p;
    for (int64_t j = 0; j < k; j++) { /* component j runs along spatial dim k - 1 - j */
      int64_t n = size[ns - 1 - j], i = rest % n;
      rest /= n;
      double v = align ? (n == 1 ? -1.0 : -1.0 + 2.0 * (double)i / (double)(n - 1))
                       : -1.0 + (2.0 * (double)i + 1.0) / (double)n;
      sc_store_f64(t0.dtype, base, p * (k + 1) + j, v);
    }
    sc_store_f64(t0.dtype, base, p * (k + 1) + k, 1.0);
  }
  od[0] = size[0];
  for (int64_t j = 2; j < ns; j++) od[j - 1] = size[j];
  od[ns - 1] = k;
  out[0] = gb_reshape(c, gb_2(c, SC_OP_MATMUL, b, gb_swap_last(c, theta)), (int32_t)ns, od);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* CenterCropPad(input, shape[, axes]): each axis cut or zero-padded to its
 * size around the centre (the odd element at the end), as onnx's
 * reference. */
static sc_status expand_center_crop_pad(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0), r = cx_val(c, x)->rank;
  int64_t shape[SC_MAX_RANK], ns = 0, axes[SC_MAX_RANK];
  sc_status st = sc_input_ints(c->g, cx_node(c), 1, shape, SC_MAX_RANK, &ns);
  if (st != SC_OK) return st;
  const int64_t *ax = NULL;
  int64_t na = sc_attr_ints(c->g, cx_node(c), "axes", &ax);
  if (na < 0)
    for (na = 0; na < r; na++) axes[na] = na;
  else
    for (int64_t i = 0; i < na; i++) axes[i] = ax[i] < 0 ? ax[i] + r : ax[i];
  if (na != ns)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "%lld sizes for %lld axes", (long long)ns,
                         (long long)na);
  int64_t pads[2 * SC_MAX_RANK] = {0};
  bool pad = false;
  for (int64_t i = 0; i < na && x >= 0; i++) {
    if (axes[i] < 0 || axes[i] >= r || shape[i] < 0)
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "axis or size %lld", (long long)i);
    int64_t dim = cx_val(c, x)->dims[axes[i]], want = shape[i];
    if (want < dim) {
      int64_t lo = (dim - want) / 2;
      x = cx_axis_slice(c, x, axes[i], lo, lo + want, 1);
    } else if (want > dim) {
      pads[axes[i]] = (want - dim) / 2;
      pads[r + axes[i]] = want - dim - pads[axes[i]];
      pad = true;
    }
  }
  if (pad) x = gb_2(c, SC_OP_PAD, x, gb_ints(c, pads, 2 * r));
  out[0] = x;
  return x < 0 ? cx_built(c) : SC_OK;
}

/* CausalConvWithState(x [B, C, L], w [C, 1, k], bias [C]?, past [B, C,
 * k-1]?): padded = past (zeros when absent) followed by x along the length;
 * output = the depthwise Conv of padded (group C, no padding), then SiLU
 * when activation is "silu" or "swish"; present_state = padded's last k-1
 * positions. */
static sc_status expand_causal_conv(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  static const char *const acts[] = {"none", "silu", "swish"};
  int act;
  sc_status st = sc_read_attr_choice(g, cx_node(c), "activation", "none", acts, 3, &act);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0), w = cx_in(c, 1), bias = cx_in(c, 2), past = cx_in(c, 3);
  const sc_value *xv = cx_val(c, x), *wv = cx_val(c, w);
  if (xv->rank != 3 || wv->rank != 3 || wv->dims[0] != xv->dims[1] || wv->dims[1] != 1 ||
      wv->dims[2] < 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "input must be [B, C, L] and weight [C, 1, k]");
  int64_t B = xv->dims[0], C = xv->dims[1], L = xv->dims[2], k = wv->dims[2];
  if (past >= 0) {
    const sc_value *pv = cx_val(c, past);
    if (pv->rank != 3 || pv->dims[0] != B || pv->dims[1] != C || pv->dims[2] != k - 1)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "past_state '%s' must be [%lld, %lld, %lld]",
                           pv->name, (long long)B, (long long)C, (long long)(k - 1));
  }
  int32_t padded = x;
  if (past >= 0) padded = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){past, x}, 2, "axis", 2);
  else if (k > 1) padded = gb_2(c, SC_OP_PAD, x, gb_ints(c, (int64_t[]){0, 0, k - 1, 0, 0, 0}, 6));
  int32_t in[3] = {padded, w, bias};
  int32_t y = padded < 0 ? -1 : gb_op_i(c, SC_OP_CONV, in, bias >= 0 ? 3 : 2, "group", C);
  if (act) y = gb_2(c, SC_OP_MUL, y, gb_1(c, SC_OP_SIGMOID, y));
  out[0] = y;
  out[1] = cx_axis_slice(c, padded, 2, L, L + k - 1, 1);
  return y < 0 || out[1] < 0 ? cx_built(c) : SC_OK;
}

/* ReverseSequence(x, lens; batch_axis, time_axis): along the time axis,
 * position t < lens[b] reads lens[b] − 1 − t, the others themselves: one
 * GatherElements of computed indices. */
static sc_status expand_reverse_sequence(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t ba, ta;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "batch_axis", 1, &ba)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "time_axis", 0, &ta)) != SC_OK)
    return st;
  int32_t x = cx_in(c, 0), lens = cx_in(c, 1);
  const sc_value xv = *cx_val(c, x), lv = *cx_val(c, lens);
  if (xv.rank < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)) || lv.rank != 1 ||
      lv.dims[0] != xv.dims[ba] || !sc_dtype_is_int(lv.dtype))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "needs rank >= 2, batch and time axes 0 and 1, and one integer length "
                         "per batch row");
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < xv.rank; i++) d[i] = i == ba ? xv.dims[ba] : 1;
  int32_t len = gb_reshape(c, gb_cast(c, lens, SC_DTYPE_I64), xv.rank, d);
  int32_t t = cx_iota(c, xv.dims[ta], xv.rank, (int32_t)ta);
  int32_t rev = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_SUB, len, gb_scalar(c, SC_DTYPE_I64, 1)), t);
  int32_t idx = gb_where(c, gb_2(c, SC_OP_LESS, t, len), rev, t);
  idx = gb_expand(c, idx, xv.rank, xv.dims);
  out[0] = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){x, idx}, 2, "axis", ta);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* TensorScatter(past, update, write_indices?; axis, mode): past with
 * update written along the sequence axis from write_indices[b] (0 when
 * absent), modulo the axis' length in "circular" mode: one
 * ScatterElements of computed indices. */
static sc_status expand_tensor_scatter(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  static const char *const modes[] = {"linear", "circular"};
  int circ;
  int64_t axis;
  sc_status st;
  if ((st = sc_read_attr_choice(g, cx_node(c), "mode", "linear", modes, 2, &circ)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "axis", -2, &axis)) != SC_OK)
    return st;
  int32_t past = cx_in(c, 0), up = cx_in(c, 1), wi = cx_in(c, 2);
  const sc_value pv = *cx_val(c, past), uv = *cx_val(c, up);
  int32_t a;
  if ((st = sc_norm_axis(g, cx_node(c), axis, pv.rank, &a)) != SC_OK) return st;
  bool ok = a > 0 && uv.rank == pv.rank && uv.dtype == pv.dtype && uv.dims[a] <= pv.dims[a];
  for (int32_t i = 0; ok && i < pv.rank; i++) ok = i == a || uv.dims[i] == pv.dims[i];
  if (!ok)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "the update must have the cache's shape but a shorter sequence axis "
                         "(not 0)");
  int64_t d[SC_MAX_RANK], S = pv.dims[a];
  int32_t idx = cx_iota(c, uv.dims[a], pv.rank, a);
  if (wi >= 0) {
    for (int32_t i = 0; i < pv.rank; i++) d[i] = i == 0 ? pv.dims[0] : 1;
    idx = gb_2(c, SC_OP_ADD, idx, gb_reshape(c, gb_cast(c, wi, SC_DTYPE_I64), pv.rank, d));
  }
  if (circ) idx = gb_2(c, SC_OP_MOD, idx, gb_scalar(c, SC_DTYPE_I64, (double)S));
  idx = gb_expand(c, idx, uv.rank, uv.dims);
  out[0] = idx < 0 ? -1
                   : gb_op_i(c, SC_OP_SCATTER_ELEMENTS, (int32_t[]){past, idx, up}, 3, "axis", a);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* BatchNormalization in training mode (opsets 14+: training_mode 1): Y =
 * scale (x − μ) / sqrt(σ² + ε) + B with μ and σ² the batch statistics over
 * every axis but the channels (σ² the population variance), and the running
 * statistics input_mean · momentum + μ (1 − momentum), likewise for the
 * variance, as outputs 1 and 2. */
static sc_status expand_bn_training(sc_grad_ctx *c, int32_t *out) {
  double eps, momentum;
  sc_status st;
  if ((st = sc_norm_epsilon(c->g, cx_node(c), &eps)) != SC_OK ||
      (st = sc_read_attr_float(c->g, cx_node(c), "momentum", 0.9, &momentum)) != SC_OK)
    return st;
  int32_t x = cx_in(c, 0);
  const sc_value xv = *cx_val(c, x);
  if (xv.rank < 2 || !sc_dtype_is_float(xv.dtype))
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "X must be a float [N, C, ...]");
  for (int32_t i = 1; i < 5; i++) {
    const sc_value *p = cx_val(c, cx_in(c, i));
    if (p->rank != 1 || p->dims[0] != xv.dims[1] || !sc_dtype_is_float(p->dtype))
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                           "input %d '%s' must be a float [%lld]", (int)i, p->name,
                           (long long)xv.dims[1]);
  }
  int64_t axes[SC_MAX_RANK], d[SC_MAX_RANK];
  int32_t na = 0;
  for (int32_t i = 0; i < xv.rank; i++) {
    if (i != 1) axes[na++] = i;
    d[i] = i == 1 ? xv.dims[1] : 1;
  }
  sc_dtype t = xv.dtype, st_t = cx_val(c, cx_in(c, 3))->dtype;
  int64_t ch = xv.dims[1];
  int32_t mu = gb_reduce(c, SC_OP_REDUCE_MEAN, x, axes, na, true);
  int32_t dx = gb_2(c, SC_OP_SUB, x, mu);
  int32_t var = gb_reduce(c, SC_OP_REDUCE_MEAN, gb_2(c, SC_OP_MUL, dx, dx), axes, na, true);
  int32_t inv = gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_ADD, var, gb_scalar(c, t, eps)));
  int32_t sc = gb_reshape(c, gb_cast(c, cx_in(c, 1), t), xv.rank, d);
  int32_t b = gb_reshape(c, gb_cast(c, cx_in(c, 2), t), xv.rank, d);
  out[0] = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_MUL, dx, sc), inv), b);
  for (int k = 0; k < 2; k++) { /* running mean, running variance */
    int32_t batch = gb_cast(c, gb_reshape(c, k ? var : mu, 1, &ch), st_t);
    int32_t run = gb_2(c, SC_OP_MUL, cx_in(c, 3 + k), gb_scalar(c, st_t, momentum));
    out[1 + k] = gb_2(c, SC_OP_ADD, run, gb_2(c, SC_OP_MUL, batch, gb_scalar(c, st_t, 1 - momentum)));
  }
  return out[0] < 0 || out[1] < 0 || out[2] < 0 ? cx_built(c) : SC_OK;
}

bool sc_expands_here(const sc_graph *g, const sc_node *n) {
  if (n->op != SC_OP_BATCH_NORM) return false;
  const sc_attr *a = sc_node_attr(n, "training_mode");
  (void)g;
  return a && a->kind == SC_ATTR_INT && a->i == 1;
}

/* LRN(size, alpha, beta, bias) over channels: x / (bias + alpha / size *
 * sum of x^2 over [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta. */
static sc_status expand_lrn(sc_grad_ctx *c, int32_t *out) {
  int64_t size;
  double alpha, beta, bias;
  sc_status st;
  if ((st = sc_read_attr_int(c->g, cx_node(c), "size", 0, &size)) != SC_OK ||
      (st = sc_read_attr_float(c->g, cx_node(c), "alpha", 1e-4, &alpha)) != SC_OK ||
      (st = sc_read_attr_float(c->g, cx_node(c), "beta", 0.75, &beta)) != SC_OK ||
      (st = sc_read_attr_float(c->g, cx_node(c), "bias", 1.0, &bias)) != SC_OK)
    return st;
  int32_t x = cx_in(c, 0), r = cx_val(c, x)->rank;
  sc_dtype t = cx_val(c, x)->dtype;
  if (size < 1 || r < 3)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "size must be >= 1 and X [N, C, ...]");
  int64_t ch = cx_val(c, x)->dims[1], lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t pads[2 * SC_MAX_RANK] = {0};
  pads[1] = lo;
  pads[r + 1] = hi;
  int32_t sq = gb_2(c, SC_OP_PAD, gb_2(c, SC_OP_MUL, x, x), gb_ints(c, pads, 2 * r));
  int32_t sum = -1;
  for (int64_t k = 0; k < size; k++) {
    int32_t part = cx_axis_slice(c, sq, 1, k, k + ch, 1);
    sum = sum < 0 ? part : gb_2(c, SC_OP_ADD, sum, part);
  }
  int32_t den = gb_2(c, SC_OP_ADD, gb_scalar(c, t, bias),
                     gb_2(c, SC_OP_MUL, gb_scalar(c, t, alpha / (double)size), sum));
  out[0] = gb_2(c, SC_OP_DIV, x, gb_2(c, SC_OP_POW, den, gb_scalar(c, t, beta)));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* LpPool(p; the pooling window attributes): (the sum over each window of
 * |x|^p)^(1/p), an AveragePool of |x|^p with the same window and
 * count_include_pad = 1 (padding holds zeros), times the window's size. */
static sc_status expand_lp_pool(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t pw;
  sc_status st = sc_read_attr_int(g, cx_node(c), "p", 2, &pw);
  if (st != SC_OK) return st;
  const sc_attr *ks = sc_node_attr(cx_node(c), "kernel_shape");
  if (pw < 1 || !ks || ks->kind != SC_ATTR_INTS)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "LpPool needs p >= 1 and kernel_shape");
  double size = 1;
  for (int64_t j = 0; j < ks->n; j++) size *= (double)ks->ints[j];
  int32_t x = cx_in(c, 0);
  sc_dtype t = cx_val(c, x)->dtype;
  int32_t ax = pw == 2 ? gb_2(c, SC_OP_MUL, x, x) : gb_1(c, SC_OP_ABS, x);
  if (pw > 2) ax = gb_2(c, SC_OP_POW, ax, gb_scalar(c, t, (double)pw));
  int32_t node = -1, avg = ax < 0 ? -1 : gb_begin(c, SC_OP_AVERAGE_POOL, &ax, 1, &node);
  if (avg < 0) return cx_built(c);
  static const char *const keep[] = {"kernel_shape", "strides", "pads", "auto_pad",
                                     "dilations", "ceil_mode"};
  for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
    const sc_attr *a = sc_node_attr(cx_node(c), keep[k]);
    sc_attr *b = a ? sc_node_add_attr(g, node, keep[k], a->kind) : NULL;
    if (a && !b) return cx_built(c);
    if (b) *b = *a; /* values shared, as sc_node_copy_attrs shares them */
  }
  sc_attr *inc = sc_node_add_attr(g, node, "count_include_pad", SC_ATTR_INT);
  if (!inc) return cx_built(c);
  inc->i = 1;
  int32_t sum = gb_2(c, SC_OP_MUL, gb_end(c, node, avg), gb_scalar(c, t, size));
  out[0] = pw == 1 ? sum
           : pw == 2 ? gb_1(c, SC_OP_SQRT, sum)
                     : gb_2(c, SC_OP_POW, sum, gb_scalar(c, t, 1.0 / (double)pw));
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* Hann, Hamming and Blackman windows of a constant size, made here. */
static sc_status expand_window(sc_grad_ctx *c, int32_t *out) {
  int64_t size = 0, n = 0, periodic, dt;
  sc_status st;
  if ((st = sc_input_ints(c->g, cx_node(c), 0, &size, 1, &n)) != SC_OK ||
      (st = sc_read_attr_int(c->g, cx_node(c), "periodic", 1, &periodic)) != SC_OK ||
      (st = sc_read_attr_int(c->g, cx_node(c), "output_datatype", 1, &dt)) != SC_OK)
    return st;
  sc_dtype t = sc_dtype_from_onnx((int32_t)dt);
  if (n != 1 || size < 1 || size > (1 << 24) || t == SC_DTYPE_COUNT)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "size must be one value in 1..2^24 and "
                         "output_datatype a dtype shardc has");
  int32_t v;
  double *w = cx_const_data(c, "window", SC_DTYPE_F64, 1, &size, &v);
  if (!w) return cx_built(c);
  double den = (double)(periodic ? size : size - 1), pi2 = 2.0 * M_PI;
  sc_op op = cx_node(c)->op;
  for (int64_t i = 0; i < size; i++) {
    double a = den > 0 ? pi2 * (double)i / den : 0.0;
    w[i] = op == SC_OP_HANN_WINDOW      ? 0.5 - 0.5 * cos(a)
           : op == SC_OP_HAMMING_WINDOW ? 25.0 / 46.0 - (21.0 / 46.0) * cos(a)
                                        : 0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a);
  }
  out[0] = gb_cast(c, v, t);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- the losses ---- */

static sc_status nll(sc_grad_ctx *c, int32_t x, int32_t *out) {
  sc_graph *g = c->g;
  int64_t ignore = 0;
  static const char *const reductions[] = {"none", "sum", "mean"};
  int which = 2;
  sc_status st = sc_read_attr_choice(g, cx_node(c), "reduction", "mean", reductions, 3, &which);
  if (st != SC_OK) return st;
  bool has_ignore = sc_node_attr(cx_node(c), "ignore_index") != NULL;
  if (has_ignore && (st = sc_read_attr_int(g, cx_node(c), "ignore_index", 0, &ignore)) != SC_OK)
    return st;
  int32_t tgt = cx_in(c, 1), w = cx_in(c, 2);
  const sc_value x0 = *cx_val(c, x), t0 = *cx_val(c, tgt), *xv = &x0, *tv = &t0; /* builders move
                                                                        g->values */
  sc_dtype t = xv->dtype;
  if (xv->rank < 2 || tv->rank != xv->rank - 1 || tv->dims[0] != xv->dims[0])
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "the input must be [N, C, d...] and the target [N, d...]");
  for (int32_t i = 1; i < tv->rank; i++)
    if (tv->dims[i] != xv->dims[i + 1])
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "target dim %d is %lld, the input's %lld",
                           i, (long long)tv->dims[i], (long long)xv->dims[i + 1]);
  if (tv->dtype != SC_DTYPE_I64 && tv->dtype != SC_DTYPE_I32)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the target must be int32 or int64");
  int32_t tr = tv->rank;
  int64_t tdims[SC_MAX_RANK];
  memcpy(tdims, tv->dims, (size_t)tr * sizeof *tdims);
  /* ignored targets read class 0 and weigh 0 */
  int32_t skip = -1, safe = tgt;
  if (has_ignore) {
    skip = gb_2(c, SC_OP_EQUAL, tgt, gb_scalar(c, tv->dtype, (double)ignore));
    safe = gb_where(c, skip, gb_scalar(c, tv->dtype, 0.0), tgt);
  }
  int32_t picked = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){x, cx_unsqueeze(c, safe, 1, 1)}, 2,
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
  return loss < 0 ? cx_built(c) : SC_OK;
}

static sc_status expand_nll_loss(sc_grad_ctx *c, int32_t *out) {
  return nll(c, cx_in(c, 0), out);
}

static sc_status expand_sce_loss(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0);
  if (cx_val(c, x)->rank < 2)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "the scores must be [N, C, d...]");
  int32_t lp = gb_op_i(c, SC_OP_LOG_SOFTMAX, &x, 1, "axis", 1);
  if (lp < 0) return cx_built(c);
  out[1] = lp;
  return nll(c, lp, out);
}

static cx_expand_fn expansion(sc_op op) {
  switch (op) {
  case SC_OP_ATTENTION: return cx_expand_attention;
  case SC_OP_NLL_LOSS: return expand_nll_loss;
  case SC_OP_SCE_LOSS: return expand_sce_loss;
  case SC_OP_ROTARY_EMBEDDING: return cx_expand_rotary;
  case SC_OP_LINEAR_ATTENTION: return cx_expand_linear_attention;
  case SC_OP_RNN: case SC_OP_GRU: case SC_OP_LSTM: return cx_expand_rnn;
  case SC_OP_CONV_TRANSPOSE: return cx_expand_conv_transpose;
  case SC_OP_COL2IM: return cx_expand_col2im;
  case SC_OP_TOP_K: return cx_expand_topk;
  case SC_OP_EINSUM: return cx_expand_einsum;
  case SC_OP_QUANTIZE_LINEAR: return cx_expand_quantize;
  case SC_OP_DFT: return cx_expand_dft;
  case SC_OP_STFT: return cx_expand_stft;
  case SC_OP_GRID_SAMPLE: return cx_expand_grid_sample;
  case SC_OP_DEQUANTIZE_LINEAR: return cx_expand_dequantize;
  case SC_OP_DYNAMIC_QUANTIZE_LINEAR: return cx_expand_dynamic_quantize;
  case SC_OP_MATMUL_INTEGER: case SC_OP_CONV_INTEGER: case SC_OP_QLINEAR_MATMUL:
  case SC_OP_QLINEAR_CONV:
    return cx_expand_int_product;
  case SC_OP_HARDMAX: return expand_hardmax;
  case SC_OP_LP_NORM: return expand_lp_norm;
  case SC_OP_SWISH: case SC_OP_SWIGLU: return expand_swish;
  case SC_OP_REDUCE_LOG_SUM: return expand_reduce_log_sum;
  case SC_OP_MVN: return expand_mvn;
  case SC_OP_EYE_LIKE: return expand_eye_like;
  case SC_OP_CENTER_CROP_PAD: return expand_center_crop_pad;
  case SC_OP_LRN: return expand_lrn;
  case SC_OP_LP_POOL: return expand_lp_pool;
  case SC_OP_BATCH_NORM: return expand_bn_training; /* only in training mode */
  case SC_OP_REVERSE_SEQUENCE: return expand_reverse_sequence;
  case SC_OP_COMPRESS: return expand_compress;
  case SC_OP_IF: return cx_expand_if;
  case SC_OP_DET: return cx_expand_det;
  case SC_OP_OPTIONAL_HAS_ELEMENT: case SC_OP_OPTIONAL_GET_ELEMENT: return cx_expand_optional;
  case SC_OP_DEFORM_CONV: return cx_expand_deform_conv;
  case SC_OP_ROI_ALIGN: return cx_expand_roi_align;
  case SC_OP_MEL_WEIGHT_MATRIX: return cx_expand_mel;
  case SC_OP_BINARIZER: return cx_expand_binarizer;
  case SC_OP_ARRAY_FEATURE_EXTRACTOR: return cx_expand_array_feature_extractor;
  case SC_OP_FLEX_ATTENTION: return cx_expand_flex_attention;
  case SC_OP_MOMENTUM: case SC_OP_ADAGRAD: case SC_OP_ADAM: return expand_optimizer;
  case SC_OP_LOOP: return cx_expand_loop;
  case SC_OP_SCAN: return cx_expand_scan;
  case SC_OP_TENSOR_SCATTER: return expand_tensor_scatter;
  case SC_OP_CAUSAL_CONV_WITH_STATE: return expand_causal_conv;
  case SC_OP_MAX_UNPOOL: return expand_max_unpool;
  case SC_OP_AFFINE_GRID: return expand_affine_grid;
  case SC_OP_HANN_WINDOW: case SC_OP_HAMMING_WINDOW: case SC_OP_BLACKMAN_WINDOW:
    return expand_window;
  default: return NULL;
  }
}

int32_t cx_expand_nested(sc_grad_ctx *c, int32_t node, cx_expand_fn fn) {
  if (node < 0) return -1;
  int32_t out[MAX_OUT];
  for (int32_t j = 0; j < MAX_OUT; j++) out[j] = -1;
  sc_grad_ctx nc = *c;
  nc.node = node;
  sc_status st = fn(&nc, out);
  sc_node *n = &c->g->nodes[node];
  n->flags |= SC_NODE_DEAD;
  for (int32_t j = 0; j < n->n_outputs; j++) { /* its values, never given a type, go too */
    if (n->outputs[j] >= 0) c->g->values[n->outputs[j]].flags |= SC_VALUE_DEAD;
    n->outputs[j] = -1;
  }
  return st == SC_OK ? out[0] : -1;
}

/* ---- the driver ---- */

/* Makes output value `to` the result of the expansion's value `from`: the
 * node of the expansion that made `from` writes `to` instead (its readers
 * in the expansion follow), or, when `from` is not the expansion's own (an
 * input passed through) or with `copy` (another output's value), an
 * Identity copies it; a constant `from` (folded) makes `to` that constant. */
static sc_status retarget(sc_grad_ctx *c, int32_t first, int32_t from, int32_t to, bool copy) {
  sc_graph *g = c->g;
  const sc_value *fc = &g->values[from];
  if (sc_value_is_const(fc) && sc_value_has_data(fc)) {
    /* folded (an inlined branch's constant): `to` is that constant, so
     * that the nodes reading it, already placed, see one */
    const sc_value f = *fc;
    sc_status st = sc_value_set_data(g, to, f.dtype, f.rank, f.dims, f.data,
                                     (uint64_t)sc_value_bytes(&f), true);
    if (st != SC_OK) return st;
    g->values[to].producer = -1;
    return SC_OK;
  }
  if (copy || g->values[from].producer < first) {
    from = gb_1(c, SC_OP_IDENTITY, from);
    if (from < 0) return cx_built(c);
  }
  int32_t p = g->values[from].producer;
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

sc_status sc_expand_composite(sc_graph *g, int32_t node) {
  sc_op op = g->nodes[node].op;
  cx_expand_fn fn = expansion(op);
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
