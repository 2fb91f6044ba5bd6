/* composite_quant.c — linear quantization as composite ops (the semantics
 * are the ONNX operator docs' and onnx's reference, opsets 10–28):
 *
 *   QuantizeLinear(x, scale, zp?) = clip(round(x / scale) + zp) in the
 *     output type (zp's dtype, else `output_dtype`, else uint8), the division
 *     in `precision` (else scale's dtype), round half to even, the clip to
 *     the integer type's range;
 *   DequantizeLinear(x, scale, zp?) = (f32(x) − f32(zp)) · scale, computed in
 *     f32 and rounded to `output_dtype` (else scale's dtype);
 *   DynamicQuantizeLinear(x) = QuantizeLinear(x, s, z) with s = (max(0,
 *     max x) − min(0, min x)) / 255 and z = clip(round(−min(0, min x) / s))
 *     as uint8; outputs y, s, z.
 *
 * The scale and zero point give the granularity: a scalar (or one element)
 * for the whole tensor; a 1-D tensor of x's length along `axis` (per axis);
 * or, with `block_size` B, x's shape with ceil(Di / B) along `axis` (blocked:
 * each element repeated B times along it, the last block cut to Di).
 * Integers of 16, 8, 4 and 2 bits round and clip; float8 and float4 outputs
 * are x / scale converted by a Cast (nearest even, saturating unless
 * `saturate` is 0), a float8 zero point (which must be 0) ignored, a float4
 * one added, as onnx's reference does.
 *
 * The integer and quantized products (MatMulInteger, ConvInteger,
 * QLinearMatMul, QLinearConv) are at their definitions below. */
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

/* The output range of an integer quantized type; false for others. */
static bool quant_range(sc_dtype t, double *lo, double *hi) {
  switch (t) {
  case SC_DTYPE_U8: *lo = 0, *hi = 255; return true;
  case SC_DTYPE_I8: *lo = -128, *hi = 127; return true;
  case SC_DTYPE_U16: *lo = 0, *hi = 65535; return true;
  case SC_DTYPE_I16: *lo = -32768, *hi = 32767; return true;
  case SC_DTYPE_U4: case SC_DTYPE_I4: case SC_DTYPE_U2: case SC_DTYPE_I2:
    *hi = sc_narrow_max(t);
    *lo = sc_dtype_is_signed(t) ? -*hi - 1 : 0;
    return true;
  default: return false;
  }
}

/* v (the scale or the zero point) made to broadcast against x: as it is
 * when it has one element, reshaped to [1.., Di, 1..] per axis, repeated
 * block-wise along axis when block_size > 0. */
static int32_t granular(sc_grad_ctx *c, int32_t v, const sc_value *x, int64_t axis,
                        int64_t block) {
  if (v < 0) return -1;
  const sc_value sv = *cx_val(c, v), *s = &sv; /* a copy: the builders move values */
  int64_t numel = sc_value_numel(s);
  if (numel == 1) return s->rank == 0 ? v : gb_reshape(c, v, 0, NULL);
  int32_t a; /* the axis matters (and must be valid) only now */
  if (sc_norm_axis(c->g, cx_node(c), axis, x->rank, &a) != SC_OK) return -1;
  axis = a;
  const char *what = NULL;
  int64_t d[SC_MAX_RANK];
  if (block <= 0) {
    if (s->rank != 1 || s->dims[0] != x->dims[axis]) what = "a scalar or 1-D of the axis' length";
    for (int32_t i = 0; i < x->rank; i++) d[i] = i == axis ? x->dims[axis] : 1;
    if (!what) return gb_reshape(c, v, x->rank, d);
  } else {
    bool ok = s->rank == x->rank;
    for (int32_t i = 0; ok && i < x->rank; i++)
      ok = i == axis ? s->dims[i] == (x->dims[i] + block - 1) / block : s->dims[i] == x->dims[i];
    if (!ok) what = "x's shape with ceil(Di / block_size) along the axis";
  }
  if (what)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "'%s' must be %s", s->name, what), -1;
  /* blocked: [.., S, 1, ..] expanded to [.., S, B, ..], merged, cut to Di */
  int32_t r = 0;
  for (int32_t i = 0; i < s->rank; i++) {
    d[r++] = s->dims[i];
    if (i == axis) d[r++] = block;
  }
  int32_t y = gb_expand(c, cx_unsqueeze(c, v, axis + 1, 1), r, d);
  for (int32_t i = 0; i < s->rank; i++) d[i] = i == axis ? s->dims[i] * block : s->dims[i];
  y = gb_reshape(c, y, s->rank, d);
  if (d[axis] != x->dims[axis]) y = cx_axis_slice(c, y, axis, 0, x->dims[axis], 1);
  return y;
}

/* The `axis` (default 1; normalised by granular, where it matters) and
 * `block_size`. */
static sc_status quant_axis(sc_grad_ctx *c, int64_t *axis, int64_t *block) {
  sc_status st;
  if ((st = sc_read_attr_int(c->g, cx_node(c), "axis", 1, axis)) != SC_OK ||
      (st = sc_read_attr_int(c->g, cx_node(c), "block_size", 0, block)) != SC_OK)
    return st;
  if (*block < 0)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "block_size %lld is negative",
                         (long long)*block);
  return SC_OK;
}

/* A dtype attribute (ONNX's enum), or `dflt` when absent or 0. */
static sc_status dtype_attr(sc_grad_ctx *c, const char *name, sc_dtype dflt, sc_dtype *t) {
  int64_t v;
  sc_status st = sc_read_attr_int(c->g, cx_node(c), name, 0, &v);
  if (st != SC_OK) return st;
  *t = dflt;
  if (v == 0) return SC_OK;
  *t = v > 0 && v <= INT32_MAX ? sc_dtype_from_onnx((int32_t)v) : SC_DTYPE_COUNT;
  if (*t == SC_DTYPE_COUNT)
    return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "%s %lld is not an element type shardc has", name, (long long)v);
  return SC_OK;
}

/* clip(round(x / scale) + zp) as t: the division in p, the rest in f32 (or
 * f64 when p is f64), which holds every integer of the range exactly. */
static int32_t quantize(sc_grad_ctx *c, int32_t x, int32_t scale, int32_t zp, sc_dtype p,
                        sc_dtype t, bool saturate) {
  double lo, hi;
  bool narrow_float = sc_dtype_is_narrow(t) && sc_dtype_is_float(t) && t != SC_DTYPE_F8E8M0;
  if (!quant_range(t, &lo, &hi) && !narrow_float)
    return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "quantizing to %s: shardc quantizes to 16-, 8-, 4- and 2-bit "
                         "integers, float8 and float4", sc_dtype_name(t)), -1;
  sc_dtype w = p == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32;
  int32_t q = gb_cast(c, gb_2(c, SC_OP_DIV, gb_cast(c, x, p), gb_cast(c, scale, p)), w);
  if (narrow_float) {
    /* x / scale converted (nearest even, saturating unless told not to);
     * a float8 zero point must be 0 and is not added (onnx's reference),
     * float4's is */
    if (zp >= 0 && t == SC_DTYPE_F4E2M1) q = gb_2(c, SC_OP_ADD, q, gb_cast(c, zp, w));
    int32_t node = -1, out = q < 0 ? -1 : gb_begin(c, SC_OP_CAST, &q, 1, &node);
    sc_attr *a = out < 0 ? NULL : sc_node_add_attr(c->g, node, "to", SC_ATTR_INT);
    if (!a) return -1;
    a->i = sc_dtype_to_onnx(t); /* before the next attribute moves the array */
    if (!(a = sc_node_add_attr(c->g, node, "saturate", SC_ATTR_INT))) return -1;
    a->i = saturate;
    return gb_end(c, node, out);
  }
  q = gb_1(c, SC_OP_ROUND, q);
  if (zp >= 0) q = gb_2(c, SC_OP_ADD, q, gb_cast(c, zp, w));
  return gb_cast(c, cx_clip(c, q, w, lo, hi), t);
}

sc_status cx_expand_quantize(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0), scale = cx_in(c, 1), zp = cx_in(c, 2);
  /* a copy of x's value: the builders may move the value array */
  const sc_value xc = *cx_val(c, x), *xv = &xc, *sv = cx_val(c, scale);
  int64_t axis, block;
  sc_status st = quant_axis(c, &axis, &block);
  sc_dtype t, p;
  if (st != SC_OK || (st = dtype_attr(c, "output_dtype", SC_DTYPE_U8, &t)) != SC_OK ||
      (st = dtype_attr(c, "precision", sv->dtype, &p)) != SC_OK)
    return st;
  if (zp >= 0) {
    const sc_value *zv = cx_val(c, zp);
    if (sc_node_attr(cx_node(c), "output_dtype") && t != zv->dtype)
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                           "output_dtype %s differs from the zero point's %s", sc_dtype_name(t),
                           sc_dtype_name(zv->dtype));
    t = zv->dtype;
    /* one shape; a scalar and a [1] (onnx's own tests mix them) are one */
    if ((zv->rank != sv->rank && sc_value_numel(zv) != 1) ||
        sc_value_numel(zv) != sc_value_numel(sv))
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                           "the zero point and the scale must have one shape");
  }
  if (!sc_dtype_is_float(p))
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "precision %s is not a float type",
                         sc_dtype_name(p));
  scale = granular(c, scale, xv, axis, block);
  if (zp >= 0) zp = granular(c, zp, xv, axis, block);
  int64_t saturate;
  if ((st = sc_read_attr_int(c->g, cx_node(c), "saturate", 1, &saturate)) != SC_OK) return st;
  out[0] = scale < 0 ? -1 : quantize(c, x, scale, zp, p, t, saturate != 0);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

sc_status cx_expand_dequantize(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0), scale = cx_in(c, 1), zp = cx_in(c, 2);
  /* a copy of x's value: the builders may move the value array */
  const sc_value xc = *cx_val(c, x), *xv = &xc, *sv = cx_val(c, scale);
  int64_t axis, block;
  sc_status st = quant_axis(c, &axis, &block);
  sc_dtype t;
  if (st != SC_OK || (st = dtype_attr(c, "output_dtype", sv->dtype, &t)) != SC_OK) return st;
  if (!sc_dtype_is_float(t) || !sc_dtype_is_float(sv->dtype))
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                         "the scale (%s) and the output (%s) must be float types",
                         sc_dtype_name(sv->dtype), sc_dtype_name(t));
  if (zp >= 0 && cx_val(c, zp)->dtype != xv->dtype)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                         "the zero point's dtype %s is not x's %s",
                         sc_dtype_name(cx_val(c, zp)->dtype), sc_dtype_name(xv->dtype));
  int32_t d = gb_cast(c, x, SC_DTYPE_F32);
  if (zp >= 0) d = gb_2(c, SC_OP_SUB, d, gb_cast(c, granular(c, zp, xv, axis, block), SC_DTYPE_F32));
  scale = gb_cast(c, granular(c, scale, xv, axis, block), SC_DTYPE_F32);
  out[0] = gb_cast(c, gb_2(c, SC_OP_MUL, d, scale), t);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

sc_status cx_expand_dynamic_quantize(sc_grad_ctx *c, int32_t *out) {
  int32_t x = cx_in(c, 0);
  const sc_value x0 = *cx_val(c, x), *xv = &x0; /* a copy: the builders move values */
  if (xv->dtype != SC_DTYPE_F32)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "x must be float32, not %s",
                         sc_dtype_name(xv->dtype));
  int64_t axes[SC_MAX_RANK];
  for (int32_t i = 0; i < xv->rank; i++) axes[i] = i;
  int32_t zero = gb_scalar(c, SC_DTYPE_F32, 0);
  int32_t mx = gb_2(c, SC_OP_MAX, gb_reduce(c, SC_OP_REDUCE_MAX, x, axes, xv->rank, false), zero);
  int32_t mn = gb_2(c, SC_OP_MIN, gb_reduce(c, SC_OP_REDUCE_MIN, x, axes, xv->rank, false), zero);
  int32_t s = gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_SUB, mx, mn), gb_scalar(c, SC_DTYPE_F32, 255));
  int32_t z = quantize(c, gb_1(c, SC_OP_NEG, mn), s, -1, SC_DTYPE_F32, SC_DTYPE_U8, true);
  out[0] = quantize(c, x, s, z, SC_DTYPE_F32, SC_DTYPE_U8, true);
  out[1] = s;
  out[2] = z;
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- integer and quantized products ----
 *   MatMulInteger(A, B, azp?, bzp?) = (A − azp) @ (B − bzp) in int32, azp
 *     per tensor or per row of A ([M]), bzp per tensor or per column;
 *   ConvInteger(x, w, xzp?, wzp?) = Conv(x − xzp, w − wzp) in int32, wzp
 *     per tensor or per output channel;
 *   QLinearMatMul, QLinearConv: the same integer product (QLinearConv plus
 *     its int32 bias), times a_scale · b_scale / y_scale (in the scales'
 *     type), plus y_zero_point, rounded half to even and clipped to the
 *     output type (y_zero_point's).
 * Integer products run as int32 MatMul; convolutions in f64, exact for
 * any sum of 8-bit products shardc can hold. */

/* x − zp in t (zp: -1 for none); a 1-D zp of several values lies along
 * x's axis `ax` (a MatMul's rows, a Conv's output channels), or along the
 * last axis when ax < 0. */
static int32_t centred(sc_grad_ctx *c, int32_t x, int32_t zp, sc_dtype t, int32_t ax) {
  const sc_value xv = *cx_val(c, x);
  int32_t y = gb_cast(c, x, t);
  if (zp < 0) return y;
  const sc_value zv = *cx_val(c, zp);
  int32_t z = gb_cast(c, zp, t);
  if (ax >= 0 && ax < xv.rank && zv.rank == 1 && sc_value_numel(&zv) > 1) {
    int64_t d[SC_MAX_RANK];
    for (int32_t i = 0; i < xv.rank; i++) d[i] = 1;
    d[ax] = zv.dims[0];
    z = gb_reshape(c, z, xv.rank, d);
  }
  return gb_2(c, SC_OP_SUB, y, z);
}

/* The Conv (attributes of the node) of x and w, and bias if given. */
static int32_t conv_like(sc_grad_ctx *c, int32_t x, int32_t w, int32_t bias) {
  int32_t in[3] = {x, w, bias}, node = -1;
  int32_t y = gb_begin(c, SC_OP_CONV, in, bias >= 0 ? 3 : 2, &node);
  if (y < 0 || sc_node_copy_attrs(c->g, node, cx_node(c)) != SC_OK) return -1;
  return gb_end(c, node, y);
}

/* round(p · a_scale · b_scale / y_scale + yzp) clipped to yzp's type; p an
 * exact integer product in f64, the scales per tensor or per channel
 * (wshape: the shape b_scale takes, NULL as it is). */
static int32_t requantize(sc_grad_ctx *c, int32_t p, int32_t as, int32_t bs, int32_t ys,
                          int32_t yzp, int32_t brank, const int64_t *bshape) {
  double lo, hi;
  sc_dtype t = cx_val(c, yzp)->dtype;
  if (!quant_range(t, &lo, &hi))
    return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "y_zero_point of %s: shardc quantizes to 8- and 16-bit integers",
                         sc_dtype_name(t)), -1;
  if (bshape) bs = gb_reshape(c, bs, brank, bshape);
  int32_t m = gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_MUL, as, bs), ys);
  int32_t d = gb_2(c, SC_OP_MUL, gb_cast(c, p, SC_DTYPE_F64), gb_cast(c, m, SC_DTYPE_F64));
  d = gb_2(c, SC_OP_ADD, d, gb_cast(c, yzp, SC_DTYPE_F64));
  return gb_cast(c, cx_clip(c, gb_1(c, SC_OP_ROUND, d), SC_DTYPE_F64, lo, hi), t);
}

sc_status cx_expand_int_product(sc_grad_ctx *c, int32_t *out) {
  sc_op op = cx_node(c)->op;
  bool conv = op == SC_OP_CONV_INTEGER || op == SC_OP_QLINEAR_CONV;
  bool q = op == SC_OP_QLINEAR_MATMUL || op == SC_OP_QLINEAR_CONV;
  /* operand positions: (a, azp, b, bzp) */
  int32_t a = cx_in(c, 0), b = cx_in(c, q ? 3 : 1);
  int32_t azp = cx_in(c, 2), bzp = cx_in(c, q ? 5 : 3);
  for (int32_t k = 0; k < 2; k++) {
    const sc_value *v = cx_val(c, k ? b : a);
    if (v->dtype != SC_DTYPE_I8 && v->dtype != SC_DTYPE_U8)
      return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED,
                           "'%s' is %s: shardc's integer products take int8 and uint8", v->name,
                           sc_dtype_name(v->dtype));
  }
  sc_dtype t = conv ? SC_DTYPE_F64 : SC_DTYPE_I32;
  /* per row of a MatMul's A, per output channel of a Conv's w */
  int32_t ar = cx_val(c, a)->rank;
  int32_t ca = centred(c, a, azp, t, conv ? -1 : ar >= 2 ? ar - 2 : -1);
  int32_t cb = centred(c, b, bzp, t, conv ? 0 : -1);
  int32_t p;
  if (conv) {
    int32_t bias = op == SC_OP_QLINEAR_CONV ? cx_in(c, 8) : -1;
    p = conv_like(c, ca, cb, bias >= 0 ? gb_cast(c, bias, t) : -1);
  } else {
    p = gb_2(c, SC_OP_MATMUL, ca, cb);
  }
  if (!q) {
    out[0] = gb_cast(c, p, SC_DTYPE_I32);
    return out[0] < 0 ? cx_built(c) : SC_OK;
  }
  int32_t as = cx_in(c, 1), bs = cx_in(c, 4), ys = cx_in(c, 6), yzp = cx_in(c, 7);
  int64_t shape[SC_MAX_RANK];
  const sc_value bsv = *cx_val(c, bs);
  int32_t r = cx_val(c, p)->rank;
  bool per_channel = conv && bsv.rank == 1 && bsv.dims[0] > 1;
  for (int32_t i = 0; per_channel && i < r; i++) shape[i] = i == 1 ? bsv.dims[0] : 1;
  out[0] = p < 0 ? -1 : requantize(c, p, as, bs, ys, yzp, r, per_channel ? shape : NULL);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}
