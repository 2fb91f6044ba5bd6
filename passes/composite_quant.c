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
 * shardc's integer dtypes only: the float8, float4 and 2/4-bit types have no
 * dtype here and are refused by the importer. */
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
  default: return false;
  }
}

/* v (the scale or the zero point) made to broadcast against x: as it is
 * when it has one element, reshaped to [1.., Di, 1..] per axis, repeated
 * block-wise along axis when block_size > 0. */
static int32_t granular(sc_grad_ctx *c, int32_t v, const sc_value *x, int64_t axis,
                        int64_t block) {
  if (v < 0) return -1;
  const sc_value *s = cx_val(c, v);
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
                        sc_dtype t) {
  double lo, hi;
  if (!quant_range(t, &lo, &hi))
    return sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "quantizing to %s: shardc quantizes to int8, uint8, int16 and uint16",
                         sc_dtype_name(t)), -1;
  sc_dtype w = p == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32;
  int32_t q = gb_cast(c, gb_2(c, SC_OP_DIV, gb_cast(c, x, p), gb_cast(c, scale, p)), w);
  q = gb_1(c, SC_OP_ROUND, q);
  if (zp >= 0) q = gb_2(c, SC_OP_ADD, q, gb_cast(c, zp, w));
  q = gb_op(c, SC_OP_CLIP, (int32_t[]){q, gb_scalar(c, w, lo), gb_scalar(c, w, hi)}, 3);
  return gb_cast(c, q, t);
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
    if (zv->rank != sv->rank || sc_value_numel(zv) != sc_value_numel(sv))
      return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID,
                           "the zero point and the scale must have one shape");
  }
  if (!sc_dtype_is_float(p))
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "precision %s is not a float type",
                         sc_dtype_name(p));
  scale = granular(c, scale, xv, axis, block);
  if (zp >= 0) zp = granular(c, zp, xv, axis, block);
  out[0] = scale < 0 ? -1 : quantize(c, x, scale, zp, p, t);
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
  const sc_value *xv = cx_val(c, x);
  if (xv->dtype != SC_DTYPE_F32)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "x must be float32, not %s",
                         sc_dtype_name(xv->dtype));
  int64_t axes[SC_MAX_RANK];
  for (int32_t i = 0; i < xv->rank; i++) axes[i] = i;
  int32_t zero = gb_scalar(c, SC_DTYPE_F32, 0);
  int32_t mx = gb_2(c, SC_OP_MAX, gb_reduce(c, SC_OP_REDUCE_MAX, x, axes, xv->rank, false), zero);
  int32_t mn = gb_2(c, SC_OP_MIN, gb_reduce(c, SC_OP_REDUCE_MIN, x, axes, xv->rank, false), zero);
  int32_t s = gb_2(c, SC_OP_DIV, gb_2(c, SC_OP_SUB, mx, mn), gb_scalar(c, SC_DTYPE_F32, 255));
  int32_t z = quantize(c, gb_1(c, SC_OP_NEG, mn), s, -1, SC_DTYPE_F32, SC_DTYPE_U8);
  out[0] = quantize(c, x, s, z, SC_DTYPE_F32, SC_DTYPE_U8);
  out[1] = s;
  out[2] = z;
  return out[0] < 0 ? cx_built(c) : SC_OK;
}
