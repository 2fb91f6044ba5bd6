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
