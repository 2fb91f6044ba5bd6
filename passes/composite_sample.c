/* composite_sample.c — GridSample (opsets 16–22) as a composite op; the
 * semantics are onnx's reference (onnx/reference/ops/op_grid_sample.py).
 *
 * X is [N, C, D1..Dk] (k = 2 or 3), grid [N, O1..Ok, k] with the last axis
 * holding the coordinates in reverse order (x, y[, z]) normalised to [-1,
 * 1]. Per spatial axis i (length d):
 *   v = (g + 1) / 2 · (d − 1)            with align_corners,
 *       ((g + 1) · d − 1) / 2            without;
 *   nearest mode rounds v half to even;
 *   outside [lo, hi] (0 and d − 1 with align_corners, else −0.5 and
 *   d − 0.5), v is clamped to [0, d − 1] (padding "border") or reflected
 *   into [lo, hi] (padding "reflection");
 *   the taps: v itself (nearest), floor(v) + {0, 1} with weights 1 − t, t
 *   (linear, t = v − floor v), floor(v) + {−1, 0, 1, 2} with Keys' cubic
 *   weights of t, a = −0.75 (cubic);
 *   a tap index outside [0, d) reads 0 ("zeros"), the nearest edge
 *   ("border") or its reflection ("reflection", truncated to an integer).
 * The value is the sum over every combination of taps of the product of the
 * axes' weights and X at those indices: one GatherElements of X flattened
 * to [N, C, D1·..·Dk] per combination. Computed in f32 (f64 for f64 X), the
 * result cast to X's dtype. */
#include <math.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

enum { GS_MAX_AXES = 3, GS_MAX_TAPS = 4 };

typedef struct gs_axis {
  int64_t d;                /* length */
  double lo, hi;            /* the border */
  int32_t idx[GS_MAX_TAPS]; /* i64 indices into [0, d), [N, 1, Q] */
  int32_t w[GS_MAX_TAPS];   /* weights (-1: 1) */
  int32_t ok[GS_MAX_TAPS];  /* bool: inside (zeros padding; -1: always) */
} gs_axis;

/* x reflected into [lo, hi] by the nearer border, repeatedly (lo < hi). */
static int32_t reflect(sc_grad_ctx *c, sc_dtype t, int32_t x, double lo, double hi) {
  int32_t L = gb_scalar(c, t, lo), H = gb_scalar(c, t, hi), R = gb_scalar(c, t, hi - lo);
  int32_t two = gb_scalar(c, t, 2), one = gb_scalar(c, t, 1);
  int32_t below = gb_2(c, SC_OP_LESS, x, L);
  int32_t dx = gb_where(c, below, gb_2(c, SC_OP_SUB, L, x), gb_2(c, SC_OP_SUB, x, H));
  int32_t n = gb_1(c, SC_OP_FLOOR, gb_2(c, SC_OP_DIV, dx, R));
  int32_t r = gb_2(c, SC_OP_SUB, dx, gb_2(c, SC_OP_MUL, n, R));
  /* n odd: 2·floor(n / 2) differs from n */
  int32_t odd = gb_2(c, SC_OP_EQUAL,
                     gb_2(c, SC_OP_SUB, n,
                          gb_2(c, SC_OP_MUL, two, gb_1(c, SC_OP_FLOOR, gb_2(c, SC_OP_DIV, n, two)))),
                     one);
  int32_t from_lo = gb_2(c, SC_OP_ADD, L, r), from_hi = gb_2(c, SC_OP_SUB, H, r);
  int32_t y = gb_where(c, below, gb_where(c, odd, from_hi, from_lo),
                       gb_where(c, odd, from_lo, from_hi));
  int32_t out = gb_2(c, SC_OP_OR, below, gb_2(c, SC_OP_GREATER, x, H));
  return gb_where(c, out, y, x);
}

/* Keys' cubic convolution weight k of offset t (a = −0.75). */
static int32_t cubic_w(sc_grad_ctx *c, sc_dtype t, int32_t tt, int k) {
  const double A = -0.75;
  int32_t one = gb_scalar(c, t, 1);
  int32_t s = k == 0 ? gb_2(c, SC_OP_ADD, tt, one)
              : k == 1 ? tt
              : k == 2 ? gb_2(c, SC_OP_SUB, one, tt)
                       : gb_2(c, SC_OP_SUB, gb_scalar(c, t, 2), tt);
  if (k == 1 || k == 2) /* ((a + 2) s − (a + 3)) s² + 1 */
    return gb_2(c, SC_OP_ADD,
                gb_2(c, SC_OP_MUL,
                     gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, gb_scalar(c, t, A + 2), s),
                          gb_scalar(c, t, A + 3)),
                     gb_2(c, SC_OP_MUL, s, s)),
                one);
  /* ((a s − 5a) s + 8a) s − 4a */
  int32_t p = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, gb_scalar(c, t, A), s), gb_scalar(c, t, 5 * A));
  p = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, p, s), gb_scalar(c, t, 8 * A));
  return gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, p, s), gb_scalar(c, t, 4 * A));
}

/* Axis a's taps from its coordinate v ([N, 1, Q] in t). */
static void axis_taps(sc_grad_ctx *c, sc_dtype t, int mode, int pad, gs_axis *ax, int32_t v) {
  static const int n_taps[3] = {1, 2, 4};
  if (mode == 1) v = gb_1(c, SC_OP_ROUND, v);
  if (pad == 1) {
    int32_t out = gb_2(c, SC_OP_OR, gb_2(c, SC_OP_LESS, v, gb_scalar(c, t, ax->lo)),
                       gb_2(c, SC_OP_GREATER, v, gb_scalar(c, t, ax->hi)));
    v = gb_where(c, out, cx_clip(c, v, t, 0, (double)(ax->d - 1)), v);
  } else if (pad == 2 && ax->hi > ax->lo) {
    v = reflect(c, t, v, ax->lo, ax->hi);
  }
  int32_t base = mode == 1 ? v : gb_1(c, SC_OP_FLOOR, v);
  int32_t frac = mode == 1 ? -1 : gb_2(c, SC_OP_SUB, v, base);
  for (int k = 0; k < n_taps[mode == 1 ? 0 : mode == 0 ? 1 : 2]; k++) {
    double off = mode == 2 ? k - 1 : k;
    int32_t j = off == 0 ? base : gb_2(c, SC_OP_ADD, base, gb_scalar(c, t, off));
    ax->ok[k] = -1;
    if (pad == 0)
      ax->ok[k] = gb_2(c, SC_OP_AND, gb_2(c, SC_OP_GREATER_EQUAL, j, gb_scalar(c, t, 0)),
                       gb_2(c, SC_OP_LESS, j, gb_scalar(c, t, (double)ax->d)));
    else if (pad == 2 && ax->hi > ax->lo)
      j = reflect(c, t, j, ax->lo, ax->hi);
    /* an integer index (truncating, as the reference's int()), kept in range */
    ax->idx[k] = gb_cast(c, cx_clip(c, j, t, 0, (double)(ax->d - 1)), SC_DTYPE_I64);
    if (mode == 1) ax->w[k] = -1;
    else if (mode == 0) ax->w[k] = k == 0 ? gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1), frac) : frac;
    else ax->w[k] = cubic_w(c, t, frac, k);
  }
}

sc_status cx_expand_grid_sample(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_node *n = cx_node(c);
  static const char *const modes[] = {"linear", "nearest", "cubic", "bilinear", "bicubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  int mode, pad;
  int64_t align;
  sc_status st;
  if ((st = sc_read_attr_choice(g, n, "mode", g->opset < 20 ? "bilinear" : "linear", modes, 5,
                                &mode)) != SC_OK ||
      (st = sc_read_attr_choice(g, n, "padding_mode", "zeros", pads, 3, &pad)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "align_corners", 0, &align)) != SC_OK)
    return st;
  if (mode == 3) mode = 0;
  if (mode == 4) mode = 2;
  int32_t x = cx_in(c, 0), grid = cx_in(c, 1);
  const sc_value xv = *cx_val(c, x), gv = *cx_val(c, grid); /* copies: values may move */
  int32_t k = xv.rank - 2;
  if (k < 1 || k > GS_MAX_AXES || gv.rank != k + 2 || gv.dims[0] != xv.dims[0] ||
      gv.dims[k + 1] != k || !sc_dtype_is_float(gv.dtype) || !sc_dtype_is_numeric(xv.dtype))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "X must be [N, C, D1..Dk] (k 1 to 3) and grid [N, O1..Ok, k] of floats");
  if (mode == 2 && k != 2)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cubic GridSample is defined for 4-D inputs");
  sc_dtype t = xv.dtype == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32;
  int64_t N = xv.dims[0], C = xv.dims[1], P = 1, Q = 1;
  for (int32_t i = 0; i < k; i++) P *= xv.dims[2 + i], Q *= gv.dims[1 + i];
  gs_axis ax[GS_MAX_AXES];
  int32_t gf = gb_cast(c, grid, t), one = gb_scalar(c, t, 1);
  for (int32_t i = 0; i < k; i++) {
    gs_axis *a = &ax[i];
    a->d = xv.dims[2 + i];
    a->lo = align ? 0.0 : -0.5;
    a->hi = align ? (double)a->d - 1 : (double)a->d - 0.5;
    /* axis i's coordinates: grid[..., k - 1 - i] as [N, 1, Q] */
    int32_t gi = gb_reshape(c, cx_axis_slice(c, gf, k + 1, k - 1 - i, k - i, 1), 3,
                            (int64_t[]){N, 1, Q});
    int32_t v = align ? gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_ADD, gi, one),
                             gb_scalar(c, t, ((double)a->d - 1) / 2))
                      : gb_2(c, SC_OP_DIV,
                             gb_2(c, SC_OP_SUB,
                                  gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_ADD, gi, one),
                                       gb_scalar(c, t, (double)a->d)),
                                  one),
                             gb_scalar(c, t, 2));
    axis_taps(c, t, mode, pad, a, v);
  }
  int32_t xf = gb_reshape(c, gb_cast(c, x, t), 3, (int64_t[]){N, C, P});
  int32_t taps = mode == 1 ? 1 : mode == 0 ? 2 : 4, combos = 1, y = -1;
  for (int32_t i = 0; i < k; i++) combos *= taps;
  for (int32_t m = 0; m < combos; m++) {
    int32_t lin = -1, w = -1, ok = -1;
    int64_t stride = 1;
    for (int32_t i = k - 1, r = m; i >= 0; i--, r /= taps) { /* the last axis varies fastest */
      int j = r % taps;
      int32_t term = stride == 1 ? ax[i].idx[j]
                                 : gb_2(c, SC_OP_MUL, ax[i].idx[j],
                                        gb_scalar(c, SC_DTYPE_I64, (double)stride));
      lin = lin < 0 ? term : gb_2(c, SC_OP_ADD, lin, term);
      stride *= ax[i].d;
      if (ax[i].w[j] >= 0) w = w < 0 ? ax[i].w[j] : gb_2(c, SC_OP_MUL, w, ax[i].w[j]);
      if (ax[i].ok[j] >= 0) ok = ok < 0 ? ax[i].ok[j] : gb_2(c, SC_OP_AND, ok, ax[i].ok[j]);
    }
    int32_t ix = gb_expand(c, lin, 3, (int64_t[]){N, C, Q});
    int32_t val = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){xf, ix}, 2, "axis", 2);
    if (w >= 0) val = gb_2(c, SC_OP_MUL, val, w);
    if (ok >= 0) val = gb_where(c, ok, val, gb_scalar(c, t, 0));
    y = y < 0 ? val : gb_2(c, SC_OP_ADD, y, val);
    if (y < 0) return cx_built(c);
  }
  int64_t od[SC_MAX_RANK] = {N, C};
  for (int32_t i = 0; i < k; i++) od[2 + i] = gv.dims[1 + i];
  out[0] = gb_cast(c, gb_reshape(c, y, k + 2, od), xv.dtype);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* DeformConv(X, W, offset[, B[, mask]]) (2-D, group 1): a convolution whose
 * taps read X at positions moved by `offset`, as onnx's reference
 * computes it — for each offset group g and kernel tap (a, b), X's channels
 * of that group sampled bilinearly (zeros outside) at (−pad + stride·i +
 * dilation·a + Δy, likewise x): a GridSample with align_corners on the
 * positions normalised to [−1, 1]; times the tap's mask; then the taps of
 * every channel, [N, C·kh·kw, oh·ow], multiplied by W as [oc, C·kh·kw]
 * (a MatMul), plus B. */
sc_status cx_expand_deform_conv(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), w = cx_in(c, 1), off = cx_in(c, 2), b = cx_in(c, 3), msk = cx_in(c, 4);
  const sc_value xv = *cx_val(c, x), wv = *cx_val(c, w), ov = *cx_val(c, off);
  int64_t grp, og;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "group", 1, &grp)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "offset_group", 1, &og)) != SC_OK)
    return st;
  if (xv.rank != 4 || wv.rank != 4 || ov.rank != 4 || grp != 1 || og < 1 ||
      xv.dims[1] % og != 0 || wv.dims[1] != xv.dims[1] || ov.dims[0] != xv.dims[0])
    return sc_node_error(g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "DeformConv: 2-D X [N, C, H, W], W [oc, C, kh, kw] (group 1), offset "
                         "[N, offset_group·kh·kw·2, oh, ow] are supported");
  int64_t kh = wv.dims[2], kw = wv.dims[3], oh = ov.dims[2], ow = ov.dims[3];
  int64_t N = xv.dims[0], C = xv.dims[1], H = xv.dims[2], W = xv.dims[3], cg = C / og;
  if (og * kh * kw > 1024)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "%lld offset groups x %lld x %lld taps "
                         "(at most 1024 sampled)", (long long)og, (long long)kh, (long long)kw);
  if (ov.dims[1] != og * kh * kw * 2)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "offset has %lld channels, not %lld",
                         (long long)ov.dims[1], (long long)(og * kh * kw * 2));
  const int64_t *pv = NULL, *sv = NULL, *dv = NULL;
  int64_t np = sc_attr_ints(g, cx_node(c), "pads", &pv), ns = sc_attr_ints(g, cx_node(c), "strides", &sv);
  int64_t nd = sc_attr_ints(g, cx_node(c), "dilations", &dv);
  int64_t pt = np == 4 ? pv[0] : 0, pl = np == 4 ? pv[1] : 0;
  int64_t sh = ns == 2 ? sv[0] : 1, sw = ns == 2 ? sv[1] : 1;
  int64_t dh = nd == 2 ? dv[0] : 1, dw = nd == 2 ? dv[1] : 1;
  sc_dtype t = xv.dtype;
  /* the unmoved positions: rows -pt + sh·i as [oh, 1], columns as [1, ow] */
  int64_t dr[2] = {oh, 1}, dc[2] = {1, ow};
  int32_t rows, cols;
  void *rd = cx_const_data(c, "deform_rows", t, 2, dr, &rows);
  void *cd = cx_const_data(c, "deform_cols", t, 2, dc, &cols);
  if (!rd || !cd) return cx_built(c);
  for (int64_t i = 0; i < oh; i++) sc_store_f64(t, rd, i, (double)(-pt + sh * i));
  for (int64_t j = 0; j < ow; j++) sc_store_f64(t, cd, j, (double)(-pl + sw * j));
  int64_t taps = kh * kw, one[4] = {N, 1, oh, ow};
  int32_t *per_group = sc_arena_array(&g->arena, (size_t)og, sizeof *per_group);
  int32_t *tap = sc_arena_array(&g->arena, (size_t)taps, sizeof *tap);
  if (!per_group || !tap) return SC_ERR_NOMEM;
  for (int64_t q = 0; q < og; q++) {
    int32_t xq = og == 1 ? x : cx_axis_slice(c, x, 1, q * cg, (q + 1) * cg, 1);
    for (int64_t a = 0; a < kh; a++)
      for (int64_t bb = 0; bb < kw; bb++) {
        int64_t k = (q * kh + a) * kw + bb;
        int32_t dy = gb_reshape(c, cx_axis_slice(c, off, 1, 2 * k, 2 * k + 1, 1), 3, (int64_t[]){N, oh, ow});
        int32_t dx = gb_reshape(c, cx_axis_slice(c, off, 1, 2 * k + 1, 2 * k + 2, 1), 3, (int64_t[]){N, oh, ow});
        int32_t py = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_ADD, rows, gb_scalar(c, t, (double)(a * dh))), dy);
        int32_t px = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_ADD, cols, gb_scalar(c, t, (double)(bb * dw))), dx);
        /* align_corners: v / (d − 1) · 2 − 1 */
        int32_t gy = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, py, gb_scalar(c, t, 2.0 / (double)(H - 1))),
                          gb_scalar(c, t, 1));
        int32_t gx = gb_2(c, SC_OP_SUB, gb_2(c, SC_OP_MUL, px, gb_scalar(c, t, 2.0 / (double)(W - 1))),
                          gb_scalar(c, t, 1));
        int32_t grid = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){cx_unsqueeze(c, gx, 3, 1),
                                                             cx_unsqueeze(c, gy, 3, 1)}, 2, "axis", 3);
        int32_t node = -1, gs = grid < 0 ? -1 : gb_begin(c, SC_OP_GRID_SAMPLE, (int32_t[]){xq, grid}, 2, &node);
        sc_attr *ac = gs < 0 ? NULL : sc_node_add_attr(g, node, "align_corners", SC_ATTR_INT);
        if (!ac) return cx_built(c);
        ac->i = 1;
        int32_t s = cx_expand_nested(c, node, cx_expand_grid_sample); /* [N, cg, oh, ow] */
        if (msk >= 0)
          s = gb_2(c, SC_OP_MUL, s, gb_reshape(c, cx_axis_slice(c, msk, 1, k, k + 1, 1), 4, one));
        tap[a * kw + bb] = cx_unsqueeze(c, s, 2, 1);
        if (tap[a * kw + bb] < 0) return cx_built(c);
      }
    per_group[q] = taps == 1 ? tap[0] : gb_op_i(c, SC_OP_CONCAT, tap, (int32_t)taps, "axis", 2);
  }
  int32_t all = og == 1 ? per_group[0] : gb_op_i(c, SC_OP_CONCAT, per_group, (int32_t)og, "axis", 1);
  int64_t kk = C * taps, cd3[3] = {N, kk, oh * ow}, wd[2] = {wv.dims[0], kk};
  int32_t y = gb_2(c, SC_OP_MATMUL, gb_reshape(c, w, 2, wd), gb_reshape(c, all, 3, cd3));
  y = gb_reshape(c, y, 4, (int64_t[]){N, wv.dims[0], oh, ow});
  if (b >= 0) y = gb_2(c, SC_OP_ADD, y, gb_reshape(c, b, 4, (int64_t[]){1, wv.dims[0], 1, 1}));
  out[0] = y;
  return y < 0 ? cx_built(c) : SC_OK;
}

/* RoiAlign(X, rois, batch_indices): onnx's reference (onnxruntime's) — each
 * roi's bins sampled on a grid of sampling_ratio² points (else
 * ceil(roi size / output size) each way), each point bilinear from four
 * pixels (a point beyond [−1, size] counts 0; one below 0 is clamped),
 * their average or their maximum (of each point's largest weighted
 * corner). The rois decide the grid, so they and the batch indices must be
 * constants (`shardc run` specialises to given ones); the pixel indices
 * and weights are computed here into constants, and the expansion is one
 * Gather of X's pixels, a product with the weights and a reduction. */
sc_status cx_expand_roi_align(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), ro = cx_in(c, 1), bi = cx_in(c, 2);
  sc_status st;
  if ((st = sc_require_const(g, cx_node(c), cx_val(c, ro))) != SC_OK ||
      (st = sc_require_const(g, cx_node(c), cx_val(c, bi))) != SC_OK)
    return st;
  const sc_value xv = *cx_val(c, x), rv = *cx_val(c, ro), bv = *cx_val(c, bi);
  if (xv.rank != 4 || rv.rank != 2 || rv.dims[1] != 4 || bv.rank != 1 || bv.dims[0] != rv.dims[0])
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "X must be [N, C, H, W], rois [R, 4], batch_indices [R]");
  int64_t oh, ow, sr;
  double scale;
  const char *ctm, *mode;
  if ((st = sc_read_attr_int(g, cx_node(c), "output_height", 1, &oh)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "output_width", 1, &ow)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "sampling_ratio", 0, &sr)) != SC_OK ||
      (st = sc_read_attr_float(g, cx_node(c), "spatial_scale", 1.0, &scale)) != SC_OK ||
      (st = sc_read_attr_string(g, cx_node(c), "mode", "avg", &mode)) != SC_OK ||
      (st = sc_read_attr_string(g, cx_node(c), "coordinate_transformation_mode",
                                g->opset < 16 ? "output_half_pixel" : "half_pixel", &ctm)) != SC_OK)
    return st;
  bool half = strcmp(ctm, "half_pixel") == 0, is_max = strcmp(mode, "max") == 0;
  if ((!half && strcmp(ctm, "output_half_pixel") != 0) || (!is_max && strcmp(mode, "avg") != 0) ||
      oh < 1 || ow < 1 || sr < 0)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "mode '%s', coordinate_transformation_mode "
                         "'%s', output %lld x %lld or sampling_ratio %lld", mode, ctm,
                         (long long)oh, (long long)ow, (long long)sr);
  int64_t R = rv.dims[0], N = xv.dims[0], C = xv.dims[1], H = xv.dims[2], W = xv.dims[3];
  /* the grid of each roi, and the largest */
  int64_t smax = 1;
  double *geo = sc_arena_array(&g->arena, (size_t)(R ? R : 1) * 6, sizeof *geo);
  if (!geo) return SC_ERR_NOMEM;
  for (int64_t r = 0; r < R; r++) {
    double off = half ? 0.5 : 0.0, *q = &geo[r * 6];
    double sw = sc_load_f64(rv.dtype, rv.data, r * 4) * scale - off;
    double sh = sc_load_f64(rv.dtype, rv.data, r * 4 + 1) * scale - off;
    double rw = sc_load_f64(rv.dtype, rv.data, r * 4 + 2) * scale - off - sw;
    double rh = sc_load_f64(rv.dtype, rv.data, r * 4 + 3) * scale - off - sh;
    if (!half) rw = fmax(rw, 1.0), rh = fmax(rh, 1.0);
    double gh = sr > 0 ? (double)sr : ceil(rh / (double)oh);
    double gw = sr > 0 ? (double)sr : ceil(rw / (double)ow);
    if (!(gh >= 0 && gw >= 0 && gh * gw <= 4096))
      return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "roi %lld samples %g x %g points a bin",
                           (long long)r, gh, gw);
    q[0] = sh, q[1] = sw, q[2] = rh / (double)oh, q[3] = rw / (double)ow, q[4] = gh, q[5] = gw;
    if (gh * gw > (double)smax) smax = (int64_t)(gh * gw);
  }
  int64_t per = smax * 4, total = R * oh * ow * per;
  if (total > SC_FOLD_MAX_ELEMENTS)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "%lld sampled pixels (at most %lld)",
                         (long long)total, (long long)SC_FOLD_MAX_ELEMENTS);
  int64_t id[1] = {total}, wd[5] = {R, oh, ow, smax, 4};
  int32_t iv, wvid;
  int64_t *idx = cx_const_data(c, "roi_pixels", SC_DTYPE_I64, 1, id, &iv);
  void *wt = cx_const_data(c, "roi_weights", xv.dtype, 5, wd, &wvid);
  if (!idx || !wt) return cx_built(c);
  for (int64_t r = 0; r < R; r++) {
    const double *q = &geo[r * 6];
    int64_t b = sc_load_i64(bv.dtype, bv.data, r), gh = (int64_t)q[4], gw = (int64_t)q[5];
    if (b < 0 || b >= N)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "batch index %lld of roi %lld is not "
                           "in [0, %lld)", (long long)b, (long long)r, (long long)N);
    double count = (double)(gh * gw > 1 ? gh * gw : 1);
    for (int64_t ph = 0; ph < oh; ph++)
      for (int64_t pw = 0; pw < ow; pw++) {
        int64_t base = ((r * oh + ph) * ow + pw) * per, s = 0;
        for (int64_t iy = 0; iy < gh; iy++)
          for (int64_t ix = 0; ix < gw; ix++, s++) {
            double y = q[0] + (double)ph * q[2] + ((double)iy + 0.5) * q[2] / (double)gh;
            double xx = q[1] + (double)pw * q[3] + ((double)ix + 0.5) * q[3] / (double)gw;
            int64_t pos[4] = {0, 0, 0, 0};
            double w4[4] = {0, 0, 0, 0};
            if (!(y < -1.0 || y > (double)H || xx < -1.0 || xx > (double)W)) {
              y = fmax(y, 0), xx = fmax(xx, 0);
              int64_t yl = (int64_t)y, xl = (int64_t)xx, yh, xh;
              if (yl >= H - 1) yh = yl = H - 1, y = (double)yl;
              else yh = yl + 1;
              if (xl >= W - 1) xh = xl = W - 1, xx = (double)xl;
              else xh = xl + 1;
              double ly = y - (double)yl, lx = xx - (double)xl, hy = 1 - ly, hx = 1 - lx;
              int64_t o = b * H * W;
              pos[0] = o + yl * W + xl, pos[1] = o + yl * W + xh;
              pos[2] = o + yh * W + xl, pos[3] = o + yh * W + xh;
              w4[0] = hy * hx, w4[1] = hy * lx, w4[2] = ly * hx, w4[3] = ly * lx;
            }
            for (int k = 0; k < 4; k++) {
              idx[base + s * 4 + k] = pos[k];
              sc_store_f64(xv.dtype, wt, base + s * 4 + k, is_max ? w4[k] : w4[k] / count);
            }
          }
        /* the grid's unused slots: no weight (avg), or the first point again
         * (max: a repeat does not change a maximum) */
        for (; s < smax; s++)
          for (int k = 0; k < 4; k++) {
            idx[base + s * 4 + k] = is_max && gh * gw != 0 ? idx[base + k] : 0;
            sc_store_f64(xv.dtype, wt, base + s * 4 + k,
                         is_max && gh * gw != 0 ? sc_load_f64(xv.dtype, wt, base + k) : 0);
          }
      }
  }
  /* X as [C, N·H·W], its pixels gathered, weighted, reduced */
  int64_t flat[2] = {C, N * H * W}, g6[6] = {C, R, oh, ow, smax, 4};
  int32_t xf = gb_reshape(c, gb_transpose(c, x, (const int64_t[]){1, 0, 2, 3}, 4), 2, flat);
  int32_t v = gb_reshape(c, gb_op_i(c, SC_OP_GATHER, (int32_t[]){xf, iv}, 2, "axis", 1), 6, g6);
  v = gb_2(c, SC_OP_MUL, v, wvid);
  if (is_max) {
    v = gb_reduce(c, SC_OP_REDUCE_MAX, v, (const int64_t[]){5}, 1, false);
    v = gb_reduce(c, SC_OP_REDUCE_MAX, v, (const int64_t[]){4}, 1, false);
  } else {
    v = gb_reduce(c, SC_OP_REDUCE_SUM, v, (const int64_t[]){4, 5}, 2, false);
  }
  out[0] = gb_transpose(c, v, (const int64_t[]){1, 0, 2, 3}, 4);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}
