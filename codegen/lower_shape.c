/* lower_shape.c — lowerings of the shape and data-movement ops: Transpose,
 * DepthToSpace, SpaceToDepth, Concat, Split, Slice, Gather, GatherElements,
 * GatherND, Expand, Tile, Range, ConstantOfShape, Trilu, Pad, OneHot, Resize
 * (POINT: an index function), the scatters ScatterND and ScatterElements
 * (KERNEL), and sc_lw_none for ops that never reach codegen (Shape, Size,
 * Constant, NonZero are folded).
 *
 * The reference semantics are the eval functions of ir/op_shape.c and
 * ir/op_move.c; a lowering computes the same element for every dtype.
 * Resize has no eval: its reference is ONNX's (onnx/reference/ops/
 * op_resize.py), whose per-axis neighbours and coefficients resize_taps
 * builds in f64, summing the product of the axes' weights over every
 * combination of taps (separable, so equal to the reference's axis by axis
 * passes up to rounding), then converting to the output dtype.
 * Invariants and deliberate differences:
 *   - every load is in bounds, even on the arm of a SELECT that is not
 *     taken (backends may evaluate both arms): indices feeding such loads
 *     are clamped into the input's range;
 *   - a data index read at run time (Gather*, Scatter*, OneHot) counts from
 *     the end when negative, as ONNX says. An index still out of range
 *     cannot be reported from inside a kernel: Gather* then read the
 *     clamped element, Scatter* ignore that update, OneHot gives an all-off
 *     row (as ONNX defines). Gather's indices are checked before its kernel
 *     by a CHECK step (codegen/from_graph.c), which ends the run with an
 *     error; constant indices are checked at compile time;
 *   - Range computes start + i * delta in the output dtype; ONNX defines it
 *     by accumulation, which can differ in the last bits for floats;
 *   - the scatters are one kernel over the output: for each output element,
 *     a REDUCE phase finds the LAST update that targets it (as eval applies
 *     them in order, the last one wins), then STORE takes that update or the
 *     data. Work is numel(data) x (updates per candidate position): small for
 *     ScatterElements (the indices' extent on the axis), and the number of
 *     index tuples for ScatterND. With a reduction (add, mul, max, min)
 *     the REDUCE combines every matching update instead (non-matching
 *     candidates give the op's identity) and STORE combines that with the
 *     data. */
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/op_util.h"

/* ---- small expression helpers ---- */

static int32_t C(sc_lower_ctx *cx, int64_t v) { return sc_lower_i64(cx, v); }
static int32_t bin(sc_lower_ctx *cx, kir_op op, int32_t a, int32_t b) {
  return kir_binary(cx->arena, cx->k, op, a, b);
}
static int32_t sel(sc_lower_ctx *cx, int32_t c, int32_t a, int32_t b) {
  return kir_select(cx->arena, cx->k, c, a, b);
}
static sc_dtype dtype_of(sc_lower_ctx *cx, int32_t e) { return cx->k->exprs[e].dtype; }
static int32_t as_i64(sc_lower_ctx *cx, int32_t e) {
  if (e < 0 || dtype_of(cx, e) == SC_DTYPE_I64) return e;
  return kir_cast(cx->arena, cx->k, SC_DTYPE_I64, e);
}
/* e clamped into [lo, hi] (hi >= lo). */
static int32_t clamp(sc_lower_ctx *cx, int32_t e, int64_t lo, int64_t hi) {
  if (hi < lo) hi = lo;
  return bin(cx, KIR_MAX, bin(cx, KIR_MIN, e, C(cx, hi)), C(cx, lo));
}
/* A constant of dtype t. */
static int32_t const_of(sc_lower_ctx *cx, sc_dtype t, double f, int64_t i) {
  if (sc_dtype_is_float(t)) return kir_const_f(cx->arena, cx->k, t, f);
  return kir_const_i(cx->arena, cx->k, t, i);
}
/* A run-time index e (any integer or float dtype) counted from the end when
 * negative: e < 0 ? e + dim : e, as i64. */
static int32_t wrap_index(sc_lower_ctx *cx, int32_t e, int64_t dim) {
  e = as_i64(cx, e);
  if (e < 0) return -1;
  return sel(cx, bin(cx, KIR_LT, e, C(cx, 0)), bin(cx, KIR_ADD, e, C(cx, dim)), e);
}
/* Wrapped and clamped into [0, dim): the element a Gather reads. */
static int32_t gather_index(sc_lower_ctx *cx, int32_t e, int64_t dim) {
  e = wrap_index(cx, e, dim);
  return e < 0 ? -1 : clamp(cx, e, 0, dim - 1);
}
/* lo <= e < hi as a bool expr. */
static int32_t in_range(sc_lower_ctx *cx, int32_t e, int64_t lo, int64_t hi) {
  return bin(cx, KIR_AND, bin(cx, KIR_GE, e, C(cx, lo)), bin(cx, KIR_LT, e, C(cx, hi)));
}
static int32_t and_or_true(sc_lower_ctx *cx, int32_t acc, int32_t c) {
  return acc < 0 ? c : bin(cx, KIR_AND, acc, c);
}

static sc_value *in_val(sc_lower_ctx *cx, const sc_node *n, int32_t i) {
  return sc_node_input(cx->g, n, i);
}
static sc_value *out_val(sc_lower_ctx *cx, const sc_node *n, int32_t i) {
  return sc_node_output(cx->g, n, i);
}

/* Turns a graph diagnostic (from reading attributes or constant inputs)
 * into a lowering error; returns -1 for point functions. */
static int32_t graph_failed(sc_lower_ctx *cx, const sc_node *n) {
  sc_status st = cx->g->diag.status != SC_OK ? cx->g->diag.status : SC_ERR_INVALID;
  sc_lower_error(cx, n, st, "%s", cx->g->diag.msg[0] ? cx->g->diag.msg : "bad attributes");
  return -1;
}

/* Reads an int attribute (checked by infer already). */
static int64_t attr_int(sc_lower_ctx *cx, const sc_node *n, const char *name, int64_t d) {
  return sc_attr_int(cx->g, n, name, d);
}

/* Axis attribute normalised against rank. */
static int32_t norm_axis(sc_lower_ctx *cx, const sc_node *n, int64_t axis, int32_t rank) {
  int32_t a;
  if (sc_norm_axis(cx->g, n, axis, rank, &a) != SC_OK) return graph_failed(cx, n);
  return a;
}

/* ---- Transpose ---- */

static int32_t transpose_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                               const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0);
  int32_t r = x->rank, xi[SC_MAX_RANK];
  const int64_t *perm;
  int64_t m = sc_attr_ints(cx->g, n, "perm", &perm);
  if (cx->g->diag.status != SC_OK) return graph_failed(cx, n);
  for (int32_t i = 0; i < r; i++) {
    int64_t p = m < 0 ? r - 1 - i : perm[i];
    SC_ASSERT(p >= 0 && p < r); /* checked by infer */
    xi[p] = idx[i];
  }
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_transpose = {SC_LOWER_POINT, transpose_point, NULL};

/* ---- DepthToSpace, SpaceToDepth: a Transpose of a 6-D view ---- */

static int32_t depth_space_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                                 const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *y = out_val(cx, n, 0);
  int64_t d6[6], o6[6];
  int32_t perm[6], i6[6], x6[6], xi[4];
  if (sc_op_depth_space_view(cx->g, n, d6, perm) != SC_OK) return graph_failed(cx, n);
  for (int32_t i = 0; i < 6; i++) o6[i] = d6[perm[i]];
  sc_lower_unflatten(cx, sc_lower_offset(cx, 4, y->dims, idx), 6, o6, i6);
  for (int32_t i = 0; i < 6; i++) x6[perm[i]] = i6[i];
  sc_lower_unflatten(cx, sc_lower_offset(cx, 6, d6, x6), 4, x->dims, xi);
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_depth_space = {SC_LOWER_POINT, depth_space_point, NULL};

/* ---- Resize ---- */

/* One axis of a Resize: its taps (input index, f64 weight; weight -1:
 * exactly 1; sc_resize_taps of them) and, for tf_crop_and_resize, the
 * "outside the roi" flag. */
typedef struct resize_axis {
  int32_t n, idx[SC_RESIZE_MAX_TAPS], w[SC_RESIZE_MAX_TAPS], outside;
} resize_axis;

static int32_t f64c(sc_lower_ctx *cx, double v) {
  return kir_const_f(cx->arena, cx->k, SC_DTYPE_F64, v);
}

/* The source coordinate of output index y along axis d, as the ONNX
 * reference computes it (f64). */
static int32_t resize_source(sc_lower_ctx *cx, const sc_resize *r, int32_t d, int64_t in,
                             int32_t y, int32_t *outside) {
  double s = r->scale[d], width = s * (double)in; /* the output width as a real */
  int32_t yf = kir_cast(cx->arena, cx->k, SC_DTYPE_F64, y);
  int32_t shifted = bin(cx, KIR_ADD, yf, f64c(cx, 0.5));
  int32_t half = bin(cx, KIR_SUB, bin(cx, KIR_DIV, shifted, f64c(cx, s)), f64c(cx, 0.5));
  *outside = -1;
  switch (r->coord) {
  case SC_RESIZE_HALF_PIXEL: return half;
  case SC_RESIZE_HALF_PIXEL_SYMMETRIC: {
    double adjust = (double)r->out[d] / width, center = (double)in / 2.0;
    return bin(cx, KIR_ADD, f64c(cx, center * (1.0 - adjust)), half);
  }
  case SC_RESIZE_PYTORCH_HALF_PIXEL: return width == 1.0 ? f64c(cx, -0.5) : half;
  case SC_RESIZE_ALIGN_CORNERS:
    if (width == 1.0) return f64c(cx, 0.0);
    return bin(cx, KIR_DIV, bin(cx, KIR_MUL, yf, f64c(cx, (double)(in - 1))),
               f64c(cx, width - 1.0));
  case SC_RESIZE_ASYMMETRIC: return bin(cx, KIR_DIV, yf, f64c(cx, s));
  case SC_RESIZE_TF_CROP_AND_RESIZE: {
    double span = (r->roi_end[d] - r->roi_start[d]) * (double)(in - 1);
    int32_t x = width == 1.0 ? f64c(cx, span / 2.0)
                             : bin(cx, KIR_DIV, bin(cx, KIR_MUL, yf, f64c(cx, span)),
                                   f64c(cx, width - 1.0));
    x = bin(cx, KIR_ADD, x, f64c(cx, r->roi_start[d] * (double)(in - 1)));
    *outside = bin(cx, KIR_OR, bin(cx, KIR_LT, x, f64c(cx, 0.0)),
                   bin(cx, KIR_GT, x, f64c(cx, (double)(in - 1))));
    return x;
  }
  }
  return -1;
}

/* The taps of axis d for output index y: the reference's neighbours of the
 * source coordinate x (the n nearest, the left one preferred, so with
 * base = ceil(x) - 1 they are base + 1 - n/2 .. base + n/2), edge-clamped,
 * weighted by the mode's coefficients of ratio = x - base (in (0, 1]). */
static void resize_taps(sc_lower_ctx *cx, const sc_resize *r, const int64_t *in_dims, int32_t d,
                        int32_t y, resize_axis *ax) {
  int64_t in = in_dims[d];
  int32_t x = resize_source(cx, r, d, in, y, &ax->outside);
  int32_t fl = kir_unary(cx->arena, cx->k, KIR_FLOOR, x);
  int32_t is_int = bin(cx, KIR_EQ, x, fl);
  int32_t base = bin(cx, KIR_SUB, as_i64(cx, fl), sel(cx, is_int, C(cx, 1), C(cx, 0)));
  int32_t t = sel(cx, is_int, f64c(cx, 1.0), bin(cx, KIR_SUB, x, fl)); /* ratio */
  if (r->mode == SC_RESIZE_NEAREST) {
    int32_t up; /* whether the right neighbour (base + 1) is the nearest */
    switch (r->nearest) {
    case SC_RESIZE_PREFER_FLOOR: up = bin(cx, KIR_GT, t, f64c(cx, 0.5)); break;
    case SC_RESIZE_PREFER_CEIL: up = bin(cx, KIR_GE, t, f64c(cx, 0.5)); break;
    case SC_RESIZE_FLOOR: up = is_int; break;
    default: up = kir_const_i(cx->arena, cx->k, SC_DTYPE_BOOL, 1); break;
    }
    ax->n = 1;
    ax->idx[0] = clamp(cx, bin(cx, KIR_ADD, base, sel(cx, up, C(cx, 1), C(cx, 0))), 0, in - 1);
    ax->w[0] = -1;
    return;
  }
  int32_t one = f64c(cx, 1.0), u = bin(cx, KIR_SUB, one, t);
  int32_t first;
  ax->n = sc_resize_taps(r, in_dims, d, &first); /* 2 linear, 4 cubic, or antialias's */
  if (r->antialias) { /* the reference's filters at scale min(s, 1), normalised */
    double s = r->scale[d] < 1.0 ? r->scale[d] : 1.0, A = r->cubic_a;
    for (int32_t i = 0; i < ax->n; i++) {
      /* |(first + i - t) s| */
      int32_t a = kir_unary(cx->arena, cx->k, KIR_ABS,
                            bin(cx, KIR_MUL, bin(cx, KIR_SUB, f64c(cx, (double)(first + i)), t),
                                f64c(cx, s)));
      if (r->mode == SC_RESIZE_LINEAR) {
        ax->w[i] = bin(cx, KIR_MAX, bin(cx, KIR_SUB, one, a), f64c(cx, 0.0));
      } else { /* the cubic kernel: (A+2)a^3 - (A+3)a^2 + 1 below 1,
                * A a^3 - 5A a^2 + 8A a - 4A below 2, else 0 */
        int32_t a2 = bin(cx, KIR_MUL, a, a), a3 = bin(cx, KIR_MUL, a2, a);
        int32_t near = bin(cx, KIR_ADD,
                           bin(cx, KIR_SUB, bin(cx, KIR_MUL, f64c(cx, A + 2), a3),
                               bin(cx, KIR_MUL, f64c(cx, A + 3), a2)), one);
        int32_t far = bin(cx, KIR_SUB,
                          bin(cx, KIR_ADD,
                              bin(cx, KIR_SUB, bin(cx, KIR_MUL, f64c(cx, A), a3),
                                  bin(cx, KIR_MUL, f64c(cx, 5 * A), a2)),
                              bin(cx, KIR_MUL, f64c(cx, 8 * A), a)), f64c(cx, 4 * A));
        ax->w[i] = sel(cx, bin(cx, KIR_LE, a, one), near,
                       sel(cx, bin(cx, KIR_LT, a, f64c(cx, 2.0)), far, f64c(cx, 0.0)));
      }
    }
  } else if (r->mode == SC_RESIZE_LINEAR) { /* taps base, base + 1 */
    ax->w[0] = u, ax->w[1] = t;
  } else { /* cubic, taps base - 1 .. base + 2, A = cubic_coeff_a: the
            * reference's four polynomials */
    double A = r->cubic_a;
    int32_t t1 = bin(cx, KIR_ADD, t, one), u1 = bin(cx, KIR_ADD, u, one);
    for (int32_t i = 0; i < 4; i++) {
      int32_t v = i == 0 ? t1 : i == 1 ? t : i == 2 ? u : u1;
      if (i == 0 || i == 3) /* ((A v - 5A) v + 8A) v - 4A */
        ax->w[i] = bin(cx, KIR_SUB,
                       bin(cx, KIR_MUL,
                           bin(cx, KIR_ADD,
                               bin(cx, KIR_MUL, bin(cx, KIR_SUB, bin(cx, KIR_MUL, f64c(cx, A), v),
                                                    f64c(cx, 5 * A)), v),
                               f64c(cx, 8 * A)), v),
                       f64c(cx, 4 * A));
      else /* ((A + 2) v - (A + 3)) v v + 1 */
        ax->w[i] = bin(cx, KIR_ADD,
                       bin(cx, KIR_MUL,
                           bin(cx, KIR_MUL,
                               bin(cx, KIR_SUB, bin(cx, KIR_MUL, f64c(cx, A + 2), v),
                                   f64c(cx, A + 3)), v), v),
                       one);
    }
  }
  int32_t sum = -1;
  for (int32_t i = 0; i < ax->n; i++) {
    int32_t j = bin(cx, KIR_ADD, base, C(cx, first + i));
    if (r->exclude_outside) /* taps outside the input weigh 0, the rest renormalised */
      ax->w[i] = sel(cx, in_range(cx, j, 0, in), ax->w[i], f64c(cx, 0.0));
    sum = sum < 0 ? ax->w[i] : bin(cx, KIR_ADD, sum, ax->w[i]);
    ax->idx[i] = clamp(cx, j, 0, in - 1);
  }
  if (r->exclude_outside || r->antialias)
    for (int32_t i = 0; i < ax->n; i++) ax->w[i] = bin(cx, KIR_DIV, ax->w[i], sum);
}

static int32_t resize_point(sc_lower_ctx *cx, const sc_node *n, int32_t out, const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *y = out_val(cx, n, 0);
  sc_resize r;
  if (sc_resize_params(cx->g, n, &r) != SC_OK) return graph_failed(cx, n);
  resize_axis ax[SC_MAX_RANK];
  int32_t outside = -1;
  int64_t combos = 1;
  for (int32_t d = 0; d < x->rank; d++) {
    if (sc_resize_keeps(&r, x->dims, d)) { /* an axis not resized is read where it is */
      ax[d].n = 1, ax[d].idx[0] = idx[d], ax[d].w[0] = -1, ax[d].outside = -1;
    } else {
      resize_taps(cx, &r, x->dims, d, idx[d], &ax[d]);
    }
    if (ax[d].outside >= 0)
      outside = outside < 0 ? ax[d].outside : bin(cx, KIR_OR, outside, ax[d].outside);
    combos *= ax[d].n;
  }
  /* the sum over every combination of taps of the product of their weights
   * times the input there, in f64 (nearest: the one input element) */
  int32_t acc = -1;
  for (int64_t c = 0; c < combos; c++) {
    int32_t xi[SC_MAX_RANK], w = -1;
    int64_t rest = c;
    for (int32_t d = x->rank - 1; d >= 0; d--) {
      int32_t tap = (int32_t)(rest % ax[d].n);
      rest /= ax[d].n;
      xi[d] = ax[d].idx[tap];
      int32_t wd = ax[d].w[tap];
      if (wd >= 0) w = w < 0 ? wd : bin(cx, KIR_MUL, w, wd);
    }
    int32_t v = sc_lower_input_at(cx, n, 0, xi);
    if (v < 0) return -1;
    if (w < 0) {
      acc = v; /* nearest or no axis resized: one tap, weight 1 */
      continue;
    }
    int32_t term = bin(cx, KIR_MUL, kir_cast(cx->arena, cx->k, SC_DTYPE_F64, v), w);
    acc = acc < 0 ? term : bin(cx, KIR_ADD, acc, term);
  }
  if (acc < 0) return -1;
  int32_t res = kir_cast(cx->arena, cx->k, y->dtype, acc);
  if (outside >= 0)
    res = sel(cx, outside, const_of(cx, y->dtype, r.extrapolation, (int64_t)r.extrapolation), res);
  return res;
}
const sc_lowering sc_lw_resize = {SC_LOWER_POINT, resize_point, NULL};

/* ---- Concat ---- */

static int32_t concat_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                            const int32_t *idx) {
  (void)out;
  const sc_value *x0 = in_val(cx, n, 0);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), x0->rank);
  if (axis < 0) return -1;
  int32_t xi[SC_MAX_RANK];
  memcpy(xi, idx, sizeof(int32_t) * (size_t)x0->rank);
  /* value = idx[axis] < end0 ? in0 : idx[axis] < end1 ? in1 : ... : in_last,
   * built from the last input backwards. */
  int64_t starts[256];
  int32_t ni = n->n_inputs;
  if (ni > 256)
    return sc_lower_error(cx, n, SC_ERR_LIMIT, "Concat of %d inputs (at most 256)", ni), -1;
  int64_t at = 0;
  for (int32_t i = 0; i < ni; i++) {
    starts[i] = at;
    at += in_val(cx, n, i)->dims[axis];
  }
  int32_t v = -1;
  bool any = false; /* an input with elements: v < 0 then is a builder failure */
  for (int32_t i = ni - 1; i >= 0; i--) {
    int64_t dim = in_val(cx, n, i)->dims[axis];
    if (dim == 0) continue;
    xi[axis] = clamp(cx, bin(cx, KIR_SUB, idx[axis], C(cx, starts[i])), 0, dim - 1);
    int32_t e = sc_lower_input_at(cx, n, i, xi);
    if (e < 0) return -1;
    v = !any ? e : sel(cx, bin(cx, KIR_LT, idx[axis], C(cx, starts[i] + dim)), e, v);
    any = true;
    if (v < 0) return -1;
  }
  if (!any) sc_lower_error(cx, n, SC_ERR_INVALID, "Concat of empty inputs has no elements");
  return v;
}

/* A Concat whose inputs are each one contiguous run of the output
 * (sc_lower_kind_of: every dim before the axis is 1) as a STEP: one copy
 * kernel per input with elements, over the input's shape, storing at the
 * input's offset along the axis. Each output element is written once, by
 * a load and a store, where concat_point selects among all the inputs. */
static sc_status concat_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *y = sc_node_output(cx->g, n, 0);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), y->rank);
  if (axis < 0) return cx->diag->status ? cx->diag->status : SC_ERR_INVALID;
  int32_t buf = sc_lower_buffer_of(cx, n->outputs[0]);
  if (buf < 0) return cx->diag->status ? cx->diag->status : SC_ERR_INVALID;
  int64_t shift[SC_MAX_RANK] = {0};
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *x = in_val(cx, n, i);
    if (x->dims[axis] == 0) continue;
    char name[32];
    snprintf(name, sizeof name, "cat%d", (int)i);
    sc_status st = sc_lower_copy_input(cx, name, buf, n, i, shift);
    if (st != SC_OK) return st;
    shift[axis] += x->dims[axis];
  }
  return SC_OK;
}
const sc_lowering sc_lw_concat = {SC_LOWER_POINT, concat_point, concat_build};

/* ---- Split ---- */

static int32_t split_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  const sc_value *x = in_val(cx, n, 0);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), x->rank);
  if (axis < 0) return -1;
  int64_t off = 0;
  for (int32_t i = 0; i < out; i++) {
    const sc_value *y = out_val(cx, n, i);
    if (!y)
      return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED,
                            "Split with omitted output %d before output %d", i, out),
             -1;
    off += y->dims[axis];
  }
  int32_t xi[SC_MAX_RANK];
  memcpy(xi, idx, sizeof(int32_t) * (size_t)x->rank);
  xi[axis] = bin(cx, KIR_ADD, idx[axis], C(cx, off));
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_split = {SC_LOWER_POINT, split_point, NULL};

/* ---- Slice ---- */

static int32_t slice_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0);
  int64_t start[SC_MAX_RANK], step[SC_MAX_RANK], d[SC_MAX_RANK];
  if (sc_op_slice_params(cx->g, n, start, step, d) != SC_OK) return graph_failed(cx, n);
  int32_t xi[SC_MAX_RANK];
  for (int32_t i = 0; i < x->rank; i++)
    xi[i] = bin(cx, KIR_ADD, bin(cx, KIR_MUL, idx[i], C(cx, step[i])), C(cx, start[i]));
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_slice = {SC_LOWER_POINT, slice_point, NULL};

/* ---- Gather, GatherElements, GatherND ---- */

static int32_t gather_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                            const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *ind = in_val(cx, n, 1);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), x->rank);
  if (axis < 0) return -1;
  int32_t q = ind->rank, xi[SC_MAX_RANK];
  int32_t e = sc_lower_input_at(cx, n, 1, idx + axis);
  if (e < 0) return -1;
  for (int32_t i = 0; i < axis; i++) xi[i] = idx[i];
  xi[axis] = gather_index(cx, e, x->dims[axis]);
  for (int32_t i = axis + 1; i < x->rank; i++) xi[i] = idx[i - 1 + q];
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_gather = {SC_LOWER_POINT, gather_point, NULL};

static int32_t gather_elements_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                                     const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), x->rank);
  if (axis < 0) return -1;
  int32_t e = sc_lower_input_at(cx, n, 1, idx), xi[SC_MAX_RANK];
  if (e < 0) return -1;
  memcpy(xi, idx, sizeof(int32_t) * (size_t)x->rank);
  xi[axis] = gather_index(cx, e, x->dims[axis]);
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_gather_elements = {SC_LOWER_POINT, gather_elements_point, NULL};

static int32_t gather_nd_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                               const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *ind = in_val(cx, n, 1);
  int32_t b = (int32_t)attr_int(cx, n, "batch_dims", 0);
  int32_t ri = ind->rank, m = (int32_t)ind->dims[ri - 1];
  int32_t ii[SC_MAX_RANK], xi[SC_MAX_RANK];
  /* output dims: ind dims [0, ri-1) (the first b are batch), then x dims
   * [b+m, rank) */
  for (int32_t i = 0; i < ri - 1; i++) ii[i] = idx[i];
  for (int32_t i = 0; i < b; i++) xi[i] = idx[i];
  for (int32_t k = 0; k < m; k++) {
    ii[ri - 1] = C(cx, k);
    int32_t e = sc_lower_input_at(cx, n, 1, ii);
    if (e < 0) return -1;
    xi[b + k] = gather_index(cx, e, x->dims[b + k]);
  }
  for (int32_t i = b + m; i < x->rank; i++) xi[i] = idx[ri - 1 + i - (b + m)];
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_gather_nd = {SC_LOWER_POINT, gather_nd_point, NULL};

/* ---- ScatterND, ScatterElements ---- */

/* The scatter's reduction attribute: *rop is KIR_RED_COUNT for "none", else
 * the REDUCE op combining all matching updates (add, mul, max, min). */
static sc_status scatter_reduction(sc_lower_ctx *cx, const sc_node *n, kir_reduce_op *rop) {
  const char *s = sc_attr_string(cx->g, n, "reduction", "none");
  if (cx->g->diag.status != SC_OK) return (void)graph_failed(cx, n), cx->diag->status;
  static const struct { const char *name; kir_reduce_op rop; } red[] = {
      {"none", KIR_RED_COUNT}, {"add", KIR_RED_SUM}, {"mul", KIR_RED_PROD},
      {"max", KIR_RED_MAX},    {"min", KIR_RED_MIN}};
  for (size_t i = 0; i < sizeof red / sizeof red[0]; i++)
    if (strcmp(s, red[i].name) == 0) {
      *rop = red[i].rop;
      return SC_OK;
    }
  return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "reduction '%s' is not supported", s);
}

/* With a reduction: the output element is data (op) every matching update,
 * in the accumulator dtype (f32 for 16-bit floats, i64/u64 for integers),
 * a non-matching candidate contributing the op's identity. The update at
 * candidate `inner` is read at ui (which depends on the inner var). Floats:
 * the updates are combined first, then with data (a sum may round
 * differently from ONNX's in-order application). */
static sc_status scatter_reduce_finish(sc_lower_ctx *cx, const sc_node *n, const int32_t *idx,
                                       int32_t match, const int32_t *ui, kir_reduce_op rop) {
  sc_dtype t = in_val(cx, n, 0)->dtype;
  bool fl = sc_dtype_is_float(t);
  sc_dtype at = fl ? (t == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32)
                   : (t == SC_DTYPE_U64 ? SC_DTYPE_U64 : SC_DTYPE_I64);
  bool sgn = at != SC_DTYPE_U64;
  int32_t ident;
  switch (rop) {
  case KIR_RED_PROD: ident = const_of(cx, at, 1, 1); break;
  case KIR_RED_MAX: ident = const_of(cx, at, -INFINITY, sgn ? INT64_MIN : 0); break;
  case KIR_RED_MIN: ident = const_of(cx, at, INFINITY, sgn ? INT64_MAX : -1); break;
  default: ident = const_of(cx, at, 0, 0); break;
  }
  int32_t u = sc_lower_input_at(cx, n, 2, ui);
  int32_t d = sc_lower_input_at(cx, n, 0, idx);
  if (u < 0 || d < 0) return cx->diag->status != SC_OK ? cx->diag->status : SC_ERR_INVALID;
  u = kir_cast(cx->arena, cx->k, at, u);
  d = kir_cast(cx->arena, cx->k, at, d);
  int32_t ph = kir_add_reduce(cx->arena, cx->k, rop, at, sel(cx, match, u, ident));
  if (ph < 0) return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  int32_t r = kir_reg(cx->arena, cx->k, ph);
  kir_op op = rop == KIR_RED_SUM ? KIR_ADD : rop == KIR_RED_PROD ? KIR_MUL
              : rop == KIR_RED_MAX ? KIR_MAX : KIR_MIN;
  int32_t v = kir_cast(cx->arena, cx->k, t, bin(cx, op, d, r));
  return sc_lower_store(cx, n, 0, idx, v);
}

/* Common tail: r = REDUCE MAX over the inner loop of (match ? inner : -1);
 * stores (r >= 0 ? update at upd_idx(r) : data at idx). */
static sc_status scatter_finish(sc_lower_ctx *cx, const sc_node *n, const int32_t *idx,
                                int32_t match, int32_t *ui, int32_t r_slot,
                                int64_t r_dim) {
  int32_t inner = kir_var(cx->arena, cx->k, KIR_INNER);
  int32_t cand = sel(cx, match, inner, C(cx, -1));
  int32_t ph = kir_add_reduce(cx->arena, cx->k, KIR_RED_MAX, SC_DTYPE_I64, cand);
  if (ph < 0) return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  int32_t r = kir_reg(cx->arena, cx->k, ph);
  ui[r_slot] = clamp(cx, r, 0, r_dim - 1);
  int32_t u = sc_lower_input_at(cx, n, 2, ui);
  int32_t d = sc_lower_input_at(cx, n, 0, idx);
  if (u < 0 || d < 0) return cx->diag->status != SC_OK ? cx->diag->status : SC_ERR_INVALID;
  int32_t v = sel(cx, bin(cx, KIR_GE, r, C(cx, 0)), u, d);
  return sc_lower_store(cx, n, 0, idx, v);
}

/* ScatterElements: output element idx takes updates[j] for the last j with
 * j[d] == idx[d] (d != axis) and wrap(indices[j]) == idx[axis]; the inner
 * loop runs over j[axis]. */
static sc_status scatter_elements_build(sc_lower_ctx *cx, const sc_node *n) {
  kir_reduce_op rop;
  sc_status st = scatter_reduction(cx, n, &rop);
  if (st != SC_OK) return st;
  const sc_value *x = in_val(cx, n, 0), *ind = in_val(cx, n, 1);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", 0), x->rank);
  if (axis < 0) return cx->diag->status;
  int64_t extent = ind->dims[axis];
  if ((st = sc_lower_begin_kernel(cx, n, x->rank, x->dims, extent > 0 ? extent : 1)) != SC_OK)
    return st;
  int32_t idx[SC_MAX_RANK], ii[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  int32_t inner = kir_var(cx->arena, cx->k, KIR_INNER), ok = -1;
  for (int32_t d = 0; d < x->rank; d++) {
    if (d == axis) {
      ii[d] = inner;
      continue;
    }
    /* positions beyond the indices' extent have no update */
    if (ind->dims[d] < x->dims[d]) ok = and_or_true(cx, ok, bin(cx, KIR_LT, idx[d], C(cx, ind->dims[d])));
    ii[d] = clamp(cx, idx[d], 0, ind->dims[d] - 1);
  }
  int32_t match;
  if (extent == 0 || sc_value_numel(ind) == 0) {
    match = kir_const_i(cx->arena, cx->k, SC_DTYPE_BOOL, 0);
  } else {
    int32_t e = sc_lower_input_at(cx, n, 1, ii);
    if (e < 0) return cx->diag->status;
    match = bin(cx, KIR_EQ, wrap_index(cx, e, x->dims[axis]), idx[axis]);
    if (ok >= 0) match = bin(cx, KIR_AND, ok, match);
  }
  if (rop != KIR_RED_COUNT) return scatter_reduce_finish(cx, n, idx, match, ii, rop);
  return scatter_finish(cx, n, idx, match, ii, axis, extent > 0 ? extent : 1);
}
const sc_lowering sc_lw_scatter_elements = {SC_LOWER_KERNEL, NULL, scatter_elements_build};

/* ScatterND: data [d_0 .. d_{m-1}, rest], indices [T..., m], updates
 * [T..., rest]; output element idx takes the last tuple t (flattened over
 * T...) whose wrapped index equals idx[0..m), at rest = idx[m..]. */
static sc_status scatter_nd_build(sc_lower_ctx *cx, const sc_node *n) {
  kir_reduce_op rop;
  sc_status st = scatter_reduction(cx, n, &rop);
  if (st != SC_OK) return st;
  const sc_value *x = in_val(cx, n, 0), *ind = in_val(cx, n, 1);
  int32_t ri = ind->rank, m = (int32_t)ind->dims[ri - 1];
  int64_t tuples = 1;
  for (int32_t i = 0; i < ri - 1; i++) tuples *= ind->dims[i]; /* <= numel(ind) */
  if ((st = sc_lower_begin_kernel(cx, n, x->rank, x->dims, tuples > 0 ? tuples : 1)) != SC_OK)
    return st;
  int32_t idx[SC_MAX_RANK], ii[SC_MAX_RANK], ui[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  int32_t inner = kir_var(cx->arena, cx->k, KIR_INNER);
  sc_lower_unflatten(cx, inner, ri - 1, ind->dims, ii);
  int32_t match = -1;
  if (tuples == 0) {
    match = kir_const_i(cx->arena, cx->k, SC_DTYPE_BOOL, 0);
  } else {
    for (int32_t k = 0; k < m; k++) {
      ii[ri - 1] = C(cx, k);
      int32_t e = sc_lower_input_at(cx, n, 1, ii);
      if (e < 0) return cx->diag->status;
      match = and_or_true(cx, match, bin(cx, KIR_EQ, wrap_index(cx, e, x->dims[k]), idx[k]));
    }
  }
  if (rop != KIR_RED_COUNT) {
    int32_t cand = clamp(cx, inner, 0, (tuples > 0 ? tuples : 1) - 1);
    sc_lower_unflatten(cx, cand, ri - 1, ind->dims, ui);
    for (int32_t i = m; i < x->rank; i++) ui[ri - 1 + i - m] = idx[i];
    return scatter_reduce_finish(cx, n, idx, match, ui, rop);
  }
  int32_t ph = kir_add_reduce(cx->arena, cx->k, KIR_RED_MAX, SC_DTYPE_I64,
                              sel(cx, match, inner, C(cx, -1)));
  if (ph < 0) return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  int32_t r = kir_reg(cx->arena, cx->k, ph);
  int32_t rc = clamp(cx, r, 0, (tuples > 0 ? tuples : 1) - 1);
  sc_lower_unflatten(cx, rc, ri - 1, ind->dims, ui);
  for (int32_t i = m; i < x->rank; i++) ui[ri - 1 + i - m] = idx[i];
  int32_t u = sc_lower_input_at(cx, n, 2, ui);
  int32_t d = sc_lower_input_at(cx, n, 0, idx);
  if (u < 0 || d < 0) return cx->diag->status != SC_OK ? cx->diag->status : SC_ERR_INVALID;
  return sc_lower_store(cx, n, 0, idx, sel(cx, bin(cx, KIR_GE, r, C(cx, 0)), u, d));
}
/* ScatterND with reduction "add" of whole rows (indices [T..., 1]) into
 * f32 or f64 data (an embedding's gradient): a SCATTER_ADD step, linear in
 * the data and the updates; any other ScatterND: the kernel above. */
static sc_status scatter_nd_step(sc_lower_ctx *cx, const sc_node *n) {
  kir_reduce_op rop;
  sc_status st = scatter_reduction(cx, n, &rop);
  if (st != SC_OK) return st;
  const sc_value *x = in_val(cx, n, 0), *ind = in_val(cx, n, 1), *u = in_val(cx, n, 2);
  int32_t ri = ind->rank;
  bool rows = rop == KIR_RED_SUM && ri >= 1 && ind->dims[ri - 1] == 1 && x->rank >= 1 &&
              x->dims[0] >= 1 && (x->dtype == SC_DTYPE_F32 || x->dtype == SC_DTYPE_F64) &&
              u->dtype == x->dtype &&
              (ind->dtype == SC_DTYPE_I64 || ind->dtype == SC_DTYPE_I32);
  if (!rows) return scatter_nd_build(cx, n);
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_SCATTER_ADD;
  s.kernel = -1;
  sc_scatter_step *c = &s.scatter;
  c->rows = x->dims[0];
  c->row = sc_value_numel(x) / x->dims[0];
  c->n = sc_value_numel(ind);
  if ((c->data = sc_lower_buffer_of(cx, n->inputs[0])) < 0 ||
      (c->indices = sc_lower_buffer_of(cx, n->inputs[1])) < 0 ||
      (c->updates = sc_lower_buffer_of(cx, n->inputs[2])) < 0 ||
      (c->out = sc_lower_buffer_of(cx, n->outputs[0])) < 0)
    return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  return sc_lower_add_step(cx, &s);
}
const sc_lowering sc_lw_scatter_nd = {SC_LOWER_STEP, NULL, scatter_nd_step};

/* ---- Expand, Tile ---- */

static int32_t expand_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                            const int32_t *idx) {
  const sc_value *x = in_val(cx, n, 0), *y = out_val(cx, n, out);
  int32_t xi[SC_MAX_RANK];
  sc_lower_bcast_index(cx, y->rank, idx, x->rank, x->dims, xi);
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_expand = {SC_LOWER_POINT, expand_point, NULL};

static int32_t tile_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                          const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *y = out_val(cx, n, 0);
  int32_t xi[SC_MAX_RANK];
  for (int32_t i = 0; i < x->rank; i++)
    xi[i] = y->dims[i] == x->dims[i] ? idx[i] : bin(cx, KIR_MOD, idx[i], C(cx, x->dims[i]));
  return sc_lower_input_at(cx, n, 0, xi);
}
const sc_lowering sc_lw_tile = {SC_LOWER_POINT, tile_point, NULL};

/* ---- Range, ConstantOfShape ---- */

static int32_t range_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  (void)out;
  sc_dtype t = out_val(cx, n, 0)->dtype;
  int32_t zero[1] = {C(cx, 0)};
  int32_t s = sc_lower_input_at(cx, n, 0, in_val(cx, n, 0)->rank ? zero : NULL);
  int32_t d = sc_lower_input_at(cx, n, 2, in_val(cx, n, 2)->rank ? zero : NULL);
  if (s < 0 || d < 0) return -1;
  int32_t i = kir_cast(cx->arena, cx->k, t, idx[0]);
  return bin(cx, KIR_ADD, s, bin(cx, KIR_MUL, i, d));
}
const sc_lowering sc_lw_range = {SC_LOWER_POINT, range_point, NULL};

static int32_t constant_of_shape_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                                       const int32_t *idx) {
  (void)out;
  (void)idx;
  const sc_value *y = out_val(cx, n, 0);
  const sc_attr *a = sc_node_attr(n, "value");
  if (!a) return const_of(cx, y->dtype, 0, 0);
  const sc_tensor *t = sc_attr_tensor(cx->g, n, "value");
  if (!t || !t->data || t->data_bytes != sc_dtype_size(t->dtype))
    return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "ConstantOfShape value has no data"), -1;
  if (sc_dtype_is_float(t->dtype))
    return kir_const_f(cx->arena, cx->k, t->dtype, sc_load_f64(t->dtype, t->data, 0));
  if (t->dtype == SC_DTYPE_U64)
    return kir_const_i(cx->arena, cx->k, t->dtype, (int64_t) * (const uint64_t *)t->data);
  return kir_const_i(cx->arena, cx->k, t->dtype, sc_load_i64(t->dtype, t->data, 0));
}
const sc_lowering sc_lw_constant_of_shape = {SC_LOWER_POINT, constant_of_shape_point, NULL};

/* ---- Trilu ---- */

static int32_t trilu_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *kv = in_val(cx, n, 1);
  bool upper = attr_int(cx, n, "upper", 1) != 0;
  int32_t k = C(cx, 0);
  if (kv) {
    int32_t zero[1] = {C(cx, 0)};
    k = as_i64(cx, sc_lower_input_at(cx, n, 1, kv->rank ? zero : NULL));
    if (k < 0) return -1;
  }
  int32_t diff = bin(cx, KIR_SUB, idx[x->rank - 1], idx[x->rank - 2]);
  int32_t keep = bin(cx, upper ? KIR_GE : KIR_LE, diff, k);
  int32_t v = sc_lower_input_at(cx, n, 0, idx);
  if (v < 0) return -1;
  return sel(cx, keep, v, const_of(cx, x->dtype, 0, 0));
}
const sc_lowering sc_lw_trilu = {SC_LOWER_POINT, trilu_point, NULL};

/* ---- Pad ---- */

typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP } pad_mode;

/* ((a % m) + m) % m for m > 0. */
static int32_t pos_mod(sc_lower_ctx *cx, int32_t a, int64_t m) {
  return bin(cx, KIR_MOD, bin(cx, KIR_ADD, bin(cx, KIR_MOD, a, C(cx, m)), C(cx, m)), C(cx, m));
}

static int32_t pad_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                         const int32_t *idx) {
  (void)out;
  sc_graph *g = cx->g;
  const sc_value *x = in_val(cx, n, 0), *cv = in_val(cx, n, 2);
  const char *ms = sc_attr_string(g, n, "mode", "constant");
  if (g->diag.status != SC_OK) return graph_failed(cx, n);
  pad_mode mode = !strcmp(ms, "reflect") ? PAD_REFLECT
                  : !strcmp(ms, "edge")  ? PAD_EDGE
                  : !strcmp(ms, "wrap")  ? PAD_WRAP
                                         : PAD_CONSTANT;
  int64_t pads[2 * SC_MAX_RANK], np, axes[SC_MAX_RANK], na = x->rank;
  if (sc_input_ints(g, n, 1, pads, 2 * SC_MAX_RANK, &np) != SC_OK) return graph_failed(cx, n);
  bool has_axes = sc_node_input(g, n, 3) != NULL;
  if (has_axes && sc_input_ints(g, n, 3, axes, SC_MAX_RANK, &na) != SC_OK)
    return graph_failed(cx, n);
  int64_t begin[SC_MAX_RANK] = {0}, end[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < na && 2 * na == np; i++) {
    int32_t a = norm_axis(cx, n, has_axes ? axes[i] : i, x->rank);
    if (a < 0) return -1;
    begin[a] = pads[i];
    end[a] = pads[i + na];
  }
  int32_t xi[SC_MAX_RANK], inside = -1;
  for (int32_t a = 0; a < x->rank; a++) {
    int64_t dim = x->dims[a];
    if (begin[a] == 0 && end[a] == 0) {
      xi[a] = idx[a];
      continue;
    }
    int32_t i = bin(cx, KIR_SUB, idx[a], C(cx, begin[a]));
    switch (mode) {
    case PAD_CONSTANT:
      if (begin[a] > 0 || end[a] > 0) inside = and_or_true(cx, inside, in_range(cx, i, 0, dim));
      i = clamp(cx, i, 0, dim - 1);
      break;
    case PAD_EDGE: i = clamp(cx, i, 0, dim - 1); break;
    case PAD_WRAP: i = pos_mod(cx, i, dim); break;
    case PAD_REFLECT:
      if (dim == 1) {
        i = C(cx, 0);
      } else {
        int32_t t = pos_mod(cx, i, 2 * (dim - 1));
        i = sel(cx, bin(cx, KIR_GE, t, C(cx, dim)), bin(cx, KIR_SUB, C(cx, 2 * (dim - 1)), t), t);
      }
      break;
    }
    xi[a] = i;
  }
  int32_t v = sc_value_numel(x) > 0 ? sc_lower_input_at(cx, n, 0, xi) : -2;
  if (v == -1) return -1;
  if (inside < 0 && v >= 0) return v;
  int32_t c;
  if (cv && sc_value_numel(cv) == 1) {
    int32_t zero[SC_MAX_RANK];
    for (int32_t i = 0; i < cv->rank; i++) zero[i] = C(cx, 0);
    c = sc_lower_input_at(cx, n, 2, zero);
    if (c < 0) return -1;
  } else {
    c = const_of(cx, x->dtype, 0, 0);
  }
  return v < 0 ? c : sel(cx, inside, v, c);
}
const sc_lowering sc_lw_pad = {SC_LOWER_POINT, pad_point, NULL};

/* ---- OneHot ---- */

static int32_t onehot_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                            const int32_t *idx) {
  (void)out;
  const sc_value *ind = in_val(cx, n, 0), *y = out_val(cx, n, 0);
  int32_t axis = norm_axis(cx, n, attr_int(cx, n, "axis", -1), ind->rank + 1);
  if (axis < 0) return -1;
  int64_t depth = y->dims[axis];
  int32_t ii[SC_MAX_RANK];
  for (int32_t i = 0, j = 0; i <= ind->rank; i++)
    if (i != axis) ii[j++] = idx[i];
  int32_t e = sc_lower_input_at(cx, n, 0, ii);
  if (e < 0) return -1;
  e = wrap_index(cx, e, depth);
  int32_t c0[1] = {C(cx, 0)}, c1[1] = {C(cx, 1)};
  const sc_value *vals = in_val(cx, n, 2);
  int32_t off = sc_lower_input_at(cx, n, 2, vals->rank ? c0 : NULL);
  int32_t on = sc_lower_input_at(cx, n, 2, vals->rank ? c1 : NULL);
  if (off < 0 || on < 0) return -1;
  return sel(cx, bin(cx, KIR_EQ, e, idx[axis]), on, off);
}
const sc_lowering sc_lw_onehot = {SC_LOWER_POINT, onehot_point, NULL};

/* ---- ops that never reach code generation ---- */

const sc_lowering sc_lw_none = {SC_LOWER_NONE, NULL, NULL};
