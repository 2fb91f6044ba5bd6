/* composite_misc.c — composite ops of the smaller families:
 *
 *   Det(X): the determinant of each trailing n × n matrix, by Gaussian
 *     elimination with partial pivoting, unrolled over the n columns (n
 *     known from the shape): the pivot row is the one of largest |value|
 *     in the column (ArgMax), swapped in by a GatherElements (each swap
 *     flips the sign), its value multiplied in, the rows below it reduced
 *     by the pivot row; a zero pivot makes the determinant 0;
 *   MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
 *     upper_edge_hertz): every operand decides the shape, so they must be
 *     constants (`shardc run` specialises to given inputs); the matrix, the
 *     triangular filters of onnx's reference (bins on the mel scale,
 *     2595 log10(1 + f/700)), is computed here into a constant;
 *   Binarizer(X; threshold) (ai.onnx.ml): 1 where X > threshold, else 0,
 *     in X's dtype;
 *   ArrayFeatureExtractor(X, Y) (ai.onnx.ml): X's elements at indices Y
 *     along its last axis (a Gather; Y may be computed), shaped
 *     X.shape[:-1] + [numel(Y)] ([1, numel(Y)] for a 1-D X);
 *   OptionalHasElement(x?), OptionalGetElement(x) of a tensor (the only
 *     values shardc has; optional and sequence types are refused at
 *     import): whether the input is given, a constant; the input itself. */
#include <math.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

enum { DET_MAX_N = 64 }; /* unrolled columns */

/* x[..., a:b, c:d] of the trailing two axes */
static int32_t corner(sc_grad_ctx *c, int32_t x, int64_t a, int64_t b, int64_t cc, int64_t d) {
  int32_t r = cx_val(c, x)->rank;
  return cx_axis_slice(c, cx_axis_slice(c, x, r - 2, a, b, 1), r - 1, cc, d, 1);
}

sc_status cx_expand_det(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0);
  const sc_value xv = *cx_val(c, x);
  int32_t r = xv.rank;
  if (r < 2 || xv.dims[r - 1] != xv.dims[r - 2] || !sc_dtype_is_float(xv.dtype) ||
      sc_dtype_is_narrow(xv.dtype))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "X must be [..., n, n] of a float type");
  int64_t n = xv.dims[r - 1];
  if (n < 1 || n > DET_MAX_N)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "%lld x %lld matrices (unrolled: at most "
                         "%d)", (long long)n, (long long)n, DET_MAX_N);
  sc_dtype t = xv.dtype;
  int32_t a = x, det = gb_scalar(c, t, 1);
  int32_t rows = cx_iota(c, n, r, r - 2); /* [1.., n, 1] */
  for (int64_t k = 0; k < n && a >= 0; k++) {
    /* the pivot: the largest |a[i, k]| for i >= k, at row k + p */
    int32_t col = corner(c, a, k, n, k, k + 1);              /* [..., n-k, 1] */
    int32_t p = gb_op_i(c, SC_OP_ARG_MAX, (int32_t[]){gb_1(c, SC_OP_ABS, col)}, 1, "axis", r - 2);
    int32_t kp = gb_2(c, SC_OP_ADD, p, gb_scalar(c, SC_DTYPE_I64, (double)k)); /* [..., 1, 1] */
    /* row i reads row: k+p at k, k at k+p, i elsewhere */
    int32_t at_k = gb_2(c, SC_OP_EQUAL, rows, gb_scalar(c, SC_DTYPE_I64, (double)k));
    int32_t at_kp = gb_2(c, SC_OP_EQUAL, rows, kp);
    int32_t src = gb_where(c, at_k, kp, gb_where(c, at_kp, gb_scalar(c, SC_DTYPE_I64, (double)k),
                                                    rows));
    int64_t full[SC_MAX_RANK];
    memcpy(full, xv.dims, sizeof full);
    src = gb_expand(c, src, r, full);
    a = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){a, src}, 2, "axis", r - 2);
    int32_t flip = gb_where(c, gb_2(c, SC_OP_EQUAL, p, gb_scalar(c, SC_DTYPE_I64, 0)),
                            gb_scalar(c, t, 1), gb_scalar(c, t, -1));
    int32_t piv = corner(c, a, k, k + 1, k, k + 1); /* [..., 1, 1] */
    det = gb_2(c, SC_OP_MUL, det, gb_2(c, SC_OP_MUL, flip, piv));
    if (k + 1 == n) break;
    /* rows below k: minus (a[i, k] / pivot) times row k (a zero pivot: det
     * is 0 already; divide by 1 to keep the rest finite) */
    int32_t safe = gb_where(c, gb_2(c, SC_OP_EQUAL, piv, gb_scalar(c, t, 0)), gb_scalar(c, t, 1),
                            piv);
    int32_t below = gb_cast(c, gb_2(c, SC_OP_GREATER, rows, gb_scalar(c, SC_DTYPE_I64, (double)k)),
                            t);
    int32_t f = gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_DIV, corner(c, a, 0, n, k, k + 1), safe), below);
    a = gb_2(c, SC_OP_SUB, a, gb_2(c, SC_OP_MUL, f, corner(c, a, k, k + 1, 0, n)));
  }
  /* det is [..., 1, 1]: drop the two axes */
  int64_t od[SC_MAX_RANK];
  for (int32_t i = 0; i < r - 2; i++) od[i] = xv.dims[i];
  out[0] = gb_reshape(c, det, r - 2, od);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- MelWeightMatrix ---- */

static sc_status const_scalar_in(sc_grad_ctx *c, int32_t i, double *v) {
  int32_t x = cx_in(c, i);
  sc_status st = sc_require_const(c->g, cx_node(c), cx_val(c, x));
  if (st != SC_OK) return st;
  const sc_value *xv = cx_val(c, x);
  if (sc_value_numel(xv) != 1)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "'%s' must be a scalar", xv->name);
  *v = sc_load_f64(xv->dtype, xv->data, 0);
  return SC_OK;
}

sc_status cx_expand_mel(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  double v[5];
  sc_status st;
  for (int32_t i = 0; i < 5; i++)
    if ((st = const_scalar_in(c, i, &v[i])) != SC_OK) return st;
  int64_t dt;
  if ((st = sc_read_attr_int(g, cx_node(c), "output_datatype", 1, &dt)) != SC_OK) return st;
  sc_dtype t = sc_dtype_from_onnx((int32_t)dt);
  int64_t bins = (int64_t)v[0], dft = (int64_t)v[1], rate = (int64_t)v[2];
  if (t == SC_DTYPE_COUNT || !sc_dtype_is_numeric(t) || sc_dtype_is_narrow(t) || bins < 1 ||
      bins > 1 << 16 || dft < 1 || dft > 1 << 20 || rate < 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "num_mel_bins %lld, dft_length %lld, sample_rate %lld or the output "
                         "type are out of range", (long long)bins, (long long)dft, (long long)rate);
  int64_t spec = dft / 2 + 1, dims[2] = {spec, bins};
  if (spec * bins > SC_FOLD_MAX_ELEMENTS)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "a %lld x %lld matrix is too large",
                         (long long)spec, (long long)bins);
  /* as the reference: the mel bounds in f32 (its inputs' type), the rest
   * in f64, the bin edges floored to integers */
  float lo = 2595.0f * log1pf((float)v[3] / 700.0f) / (float)log(10.0);
  float hi = 2595.0f * log1pf((float)v[4] / 700.0f) / (float)log(10.0);
  float step = (hi - lo) / (float)(bins + 2);
  int64_t *edge = sc_arena_array(&g->arena, (size_t)bins + 2, sizeof *edge);
  int32_t y;
  void *data = cx_const_data(c, "mel_weights", t, 2, dims, &y);
  if (!edge || !data) return cx_built(c);
  for (int64_t i = 0; i < bins + 2; i++) {
    double f = 700.0 * expm1(((double)i * (double)step + (double)lo) / 2595.0 * log(10.0));
    edge[i] = (int64_t)floor((double)(dft + 1) * f / (double)rate);
  }
  for (int64_t i = 0; i < bins; i++) {
    int64_t l = edge[i], m = edge[i + 1], h = edge[i + 2];
    if (l < 0 || h >= spec || m < 0 || m >= spec)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                           "the mel bands reach past the spectrum (upper_edge_hertz above half "
                           "the sample rate?)");
    if (m == l) sc_store_f64(t, data, m * bins + i, 1);
    else
      for (int64_t j = l; j <= m; j++) sc_store_f64(t, data, j * bins + i, (double)(j - l) / (double)(m - l));
    if (h > m)
      for (int64_t j = m; j < h; j++) sc_store_f64(t, data, j * bins + i, (double)(h - j) / (double)(h - m));
  }
  out[0] = y;
  return SC_OK;
}

/* ---- ai.onnx.ml ---- */

sc_status cx_expand_binarizer(sc_grad_ctx *c, int32_t *out) {
  double th;
  sc_status st = sc_read_attr_float(c->g, cx_node(c), "threshold", 0, &th);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0);
  sc_dtype t = cx_val(c, x)->dtype;
  out[0] = gb_cast(c, gb_2(c, SC_OP_GREATER, x, gb_scalar(c, t, th)), t);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

sc_status cx_expand_array_feature_extractor(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0), y = cx_in(c, 1);
  const sc_value xv = *cx_val(c, x);
  int64_t m = sc_value_numel(cx_val(c, y)), d[SC_MAX_RANK];
  if (xv.rank < 1 || m < 1)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "X must have a rank, Y elements");
  int32_t idx = gb_reshape(c, y, 1, &m);
  int32_t r = xv.rank == 1 ? 2 : xv.rank;
  for (int32_t i = 0; i < r - 1; i++) d[i] = xv.rank == 1 ? 1 : xv.dims[i];
  d[r - 1] = m;
  out[0] = gb_reshape(c, gb_op_i(c, SC_OP_GATHER, (int32_t[]){x, idx}, 2, "axis", xv.rank - 1),
                      r, d);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- optionals of tensors ---- */

sc_status cx_expand_optional(sc_grad_ctx *c, int32_t *out) {
  if (cx_node(c)->op == SC_OP_OPTIONAL_GET_ELEMENT) {
    out[0] = cx_in(c, 0);
    return SC_OK;
  }
  out[0] = gb_scalar(c, SC_DTYPE_BOOL, cx_in(c, 0) >= 0);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}
