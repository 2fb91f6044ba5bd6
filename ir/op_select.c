/* op_select.c — ops whose output shape depends on input values: Unique and
 * NonMaxSuppression (NonZero is in op_shape.c, Compress a composite op that
 * needs only its condition).
 *
 * Their shape rules need those inputs constant (sc_require_const): a model
 * whose values reach them from graph inputs is refused at compile time
 * naming the input, and `shardc run`, given that input, specialises the
 * program to it (docs/runtime.md) — the op is then folded here. The
 * semantics are onnx's reference's (numpy's unique; the NMS of
 * onnx.reference, as onnxruntime's CPU kernel).
 *
 * The shape rule and the fold run the same computation (select_*): the
 * first for the output counts, the second for the values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_move.h"
#include "op_util.h"

/* ---- a stable merge sort of indices with a context ---- */

typedef int (*cmp_fn)(const void *ctx, int64_t a, int64_t b);

static void merge_sort(int64_t *v, int64_t *tmp, int64_t n, cmp_fn cmp, const void *ctx) {
  if (n < 2) return;
  int64_t h = n / 2;
  merge_sort(v, tmp, h, cmp, ctx);
  merge_sort(v + h, tmp, n - h, cmp, ctx);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = cmp(ctx, v[j], v[i]) < 0 ? v[j++] : v[i++];
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, (size_t)n * sizeof *v);
}

/* ---- Unique ---- */

/* x seen as `m` slices along an axis: slice j is the elements at j along it
 * (outer × inner of them); no axis: every element a slice of one. */
typedef struct slices {
  const sc_value *x;
  const uint8_t *data;
  int64_t m, outer, inner;
} slices;

static double slice_elem(const slices *s, int64_t j, int64_t e, bool *nan) {
  int64_t o = e / s->inner, i = e % s->inner;
  int64_t at = (o * s->m + j) * s->inner + i;
  double v = sc_load_f64(s->x->dtype, s->data, at); /* 64-bit integers: cmp_slices */
  *nan = isnan(v);
  return v;
}

static int cmp_slices(const void *ctx, int64_t a, int64_t b) {
  const slices *s = ctx;
  int64_t n = s->outer * s->inner;
  bool wide = s->x->dtype == SC_DTYPE_I64 || s->x->dtype == SC_DTYPE_U64;
  for (int64_t e = 0; e < n; e++) {
    if (wide) {
      int64_t o = e / s->inner, i = e % s->inner;
      int64_t pa = (o * s->m + a) * s->inner + i, pb = (o * s->m + b) * s->inner + i;
      int64_t x = ((const int64_t *)s->data)[pa], y = ((const int64_t *)s->data)[pb];
      if (s->x->dtype == SC_DTYPE_U64 ? (uint64_t)x != (uint64_t)y : x != y)
        return (s->x->dtype == SC_DTYPE_U64 ? (uint64_t)x < (uint64_t)y : x < y) ? -1 : 1;
      continue;
    }
    bool na, nb;
    double x = slice_elem(s, a, e, &na), y = slice_elem(s, b, e, &nb);
    if (na || nb) { /* NaN after every number, NaNs equal (numpy) */
      if (na != nb) return na ? 1 : -1;
      continue;
    }
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

/* Groups by their first index (ctx: the first indices). */
static int cmp_first(const void *ctx, int64_t a, int64_t b) {
  const int64_t *first = ctx;
  return first[a] < first[b] ? -1 : first[a] > first[b];
}

typedef struct unique_result {
  int64_t u;           /* unique slices */
  int64_t *first;      /* [u] the first index of each, in output order */
  int64_t *inverse;    /* [m] output position of each slice */
  int64_t *counts;     /* [u] */
} unique_result;

static void unique_free(unique_result *r) {
  free(r->first);
  free(r->inverse);
  free(r->counts);
}

static sc_status unique_read(sc_graph *g, const sc_node *n, slices *s, int32_t *axis_out) {
  const sc_value *x = sc_node_input(g, n, 0);
  sc_status st = sc_require_const(g, n, x);
  if (st != SC_OK) return st;
  if (!sc_dtype_is_numeric(x->dtype) || sc_dtype_is_narrow(x->dtype))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "Unique of %s", sc_dtype_name(x->dtype));
  const sc_attr *a = sc_node_attr(n, "axis");
  int32_t axis = -1;
  if (a) {
    int64_t v;
    if ((st = sc_read_attr_int(g, n, "axis", 0, &v)) != SC_OK) return st;
    if ((st = sc_norm_axis(g, n, v, x->rank, &axis)) != SC_OK) return st;
  }
  s->x = x;
  s->data = x->data;
  if (axis < 0) {
    s->m = sc_value_numel(x);
    s->outer = s->inner = 1;
  } else {
    s->m = x->dims[axis];
    s->outer = sc_move_prod(x->dims, 0, axis);
    s->inner = sc_move_prod(x->dims, axis + 1, x->rank);
  }
  *axis_out = axis;
  return SC_OK;
}

static sc_status select_unique(sc_graph *g, const sc_node *n, const slices *s, bool sorted,
                               unique_result *r) {
  memset(r, 0, sizeof *r);
  int64_t m = s->m;
  int64_t *ord = malloc((size_t)(m ? m : 1) * sizeof *ord);
  int64_t *tmp = malloc((size_t)(m ? m : 1) * sizeof *tmp);
  r->first = malloc((size_t)(m ? m : 1) * sizeof *r->first);
  r->inverse = malloc((size_t)(m ? m : 1) * sizeof *r->inverse);
  r->counts = malloc((size_t)(m ? m : 1) * sizeof *r->counts);
  if (!ord || !tmp || !r->first || !r->inverse || !r->counts) {
    free(ord);
    free(tmp);
    unique_free(r);
    return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
  }
  for (int64_t j = 0; j < m; j++) ord[j] = j;
  merge_sort(ord, tmp, m, cmp_slices, s); /* stable: each group starts at its first */
  int64_t u = 0;
  for (int64_t k = 0; k < m; k++) {
    if (k == 0 || cmp_slices(s, ord[k - 1], ord[k]) != 0) {
      r->first[u] = ord[k];
      r->counts[u] = 0;
      u++;
    }
    r->counts[u - 1]++;
    r->inverse[ord[k]] = u - 1;
  }
  r->u = u;
  if (!sorted) { /* groups in the order of their first occurrence */
    int64_t *pos = tmp; /* group (sorted order) → output position */
    for (int64_t k = 0; k < u; k++) ord[k] = k;
    merge_sort(ord, tmp, u, cmp_first, r->first); /* by first index; tmp is free until pos */
    int64_t *f = malloc((size_t)(u ? u : 1) * sizeof *f), *c = malloc((size_t)(u ? u : 1) * sizeof *c);
    if (!f || !c) {
      free(f);
      free(c);
      free(ord);
      free(tmp);
      unique_free(r);
      return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
    }
    for (int64_t k = 0; k < u; k++) {
      f[k] = r->first[ord[k]];
      c[k] = r->counts[ord[k]];
      pos[ord[k]] = k;
    }
    for (int64_t j = 0; j < m; j++) r->inverse[j] = pos[r->inverse[j]];
    free(r->first);
    free(r->counts);
    r->first = f;
    r->counts = c;
  }
  free(ord);
  free(tmp);
  return SC_OK;
}

/* n's input read, its `sorted` attribute applied: the unique slices. */
static sc_status unique_of(sc_graph *g, const sc_node *n, slices *s, int32_t *axis,
                           unique_result *r) {
  int64_t sorted;
  sc_status st;
  if ((st = unique_read(g, n, s, axis)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "sorted", 1, &sorted)) != SC_OK)
    return st;
  return select_unique(g, n, s, sorted != 0, r);
}

sc_status sc_op_infer_unique(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  slices s;
  int32_t axis;
  unique_result r;
  if ((st = unique_of(g, n, &s, &axis, &r)) != SC_OK) return st;
  int64_t u = r.u, d[SC_MAX_RANK];
  unique_free(&r);
  const sc_value *x = s.x;
  int32_t rank = axis < 0 ? 1 : x->rank;
  for (int32_t i = 0; i < rank; i++) d[i] = axis < 0 ? u : i == axis ? u : x->dims[i];
  if ((st = sc_set_output(g, n, 0, x->dtype, rank, d)) != SC_OK) return st;
  if ((st = sc_set_output(g, n, 1, SC_DTYPE_I64, 1, &u)) != SC_OK) return st;
  if ((st = sc_set_output(g, n, 2, SC_DTYPE_I64, 1, &s.m)) != SC_OK) return st;
  return sc_set_output(g, n, 3, SC_DTYPE_I64, 1, &u);
}

sc_status sc_op_eval_unique(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  if (st != SC_OK) return st;
  slices s;
  int32_t axis;
  unique_result r;
  if ((st = unique_of(g, n, &s, &axis, &r)) != SC_OK) return st;
  const sc_value *y = sc_node_output(g, n, 0);
  if (!y || (axis < 0 ? y->dims[0] : y->dims[axis]) != r.u) {
    unique_free(&r);
    return sc_node_error(g, n, SC_ERR_INVALID, "input changed since inference");
  }
  uint8_t *out[4];
  for (int32_t i = 0; i < 4; i++)
    if ((st = sc_move_output(g, n, i, &out[i])) != SC_OK) {
      unique_free(&r);
      return st;
    }
  size_t es = sc_dtype_size(s.x->dtype), run = (size_t)s.inner * es;
  if (out[0])
    for (int64_t o = 0; o < s.outer; o++)
      for (int64_t k = 0; k < r.u; k++)
        memcpy(out[0] + ((size_t)(o * r.u + k) * run),
               s.data + ((size_t)(o * s.m + r.first[k]) * run), run);
  if (out[1]) memcpy(out[1], r.first, (size_t)r.u * 8);
  if (out[2]) memcpy(out[2], r.inverse, (size_t)s.m * 8);
  if (out[3]) memcpy(out[3], r.counts, (size_t)r.u * 8);
  unique_free(&r);
  return SC_OK;
}

/* ---- NonMaxSuppression ---- */

typedef struct nms_in {
  const sc_value *boxes, *scores;
  int64_t batches, classes, nboxes, max_out;
  float iou, score;
  bool has_score, center;
} nms_in;

/* Optional scalar input i as a double; `have` false when absent. */
static sc_status nms_scalar(sc_graph *g, const sc_node *n, int32_t i, double *v, bool *have) {
  const sc_value *x = sc_node_input(g, n, i);
  *have = false;
  if (!x) return SC_OK;
  sc_status st = sc_require_const(g, n, x);
  if (st != SC_OK) return st;
  if (sc_value_numel(x) == 0) return SC_OK;
  if (sc_value_numel(x) != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "'%s' must be a scalar or have one element",
                         x->name);
  *v = sc_load_f64(x->dtype, x->data, 0);
  *have = true;
  return SC_OK;
}

static sc_status nms_read(sc_graph *g, const sc_node *n, nms_in *p) {
  memset(p, 0, sizeof *p);
  p->boxes = sc_node_input(g, n, 0);
  p->scores = sc_node_input(g, n, 1);
  sc_status st;
  if ((st = sc_require_const(g, n, p->boxes)) != SC_OK ||
      (st = sc_require_const(g, n, p->scores)) != SC_OK)
    return st;
  const sc_value *b = p->boxes, *s = p->scores;
  if (b->rank != 3 || b->dims[2] != 4 || s->rank != 3 || s->dims[0] != b->dims[0] ||
      s->dims[2] != b->dims[1] || !sc_dtype_is_float(b->dtype) || !sc_dtype_is_float(s->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "boxes must be [B, N, 4] and scores [B, C, N], of a float type");
  p->batches = b->dims[0];
  p->nboxes = b->dims[1];
  p->classes = s->dims[1];
  double v;
  bool have;
  if ((st = nms_scalar(g, n, 2, &v, &have)) != SC_OK) return st;
  p->max_out = have && v > 0 ? (int64_t)v : 0;
  if ((st = nms_scalar(g, n, 3, &v, &have)) != SC_OK) return st;
  p->iou = have ? (float)v : 0.0f;
  if ((st = nms_scalar(g, n, 4, &v, &p->has_score)) != SC_OK) return st;
  p->score = p->has_score ? (float)v : 0.0f;
  /* the folding's work is at most (pairs of boxes compared) B·C·N·min(max, N):
   * bounded, so that a hostile file cannot make it run for hours */
  double pairs = (double)p->batches * (double)p->classes * (double)p->nboxes *
                 (double)(p->max_out < p->nboxes ? p->max_out : p->nboxes);
  if (pairs > 0x1p30)
    return sc_node_error(g, n, SC_ERR_LIMIT,
                         "%lld batches x %lld classes x %lld boxes: too many to fold (at most "
                         "2^30 box pairs compared)", (long long)p->batches,
                         (long long)p->classes, (long long)p->nboxes);
  int64_t c;
  if ((st = sc_read_attr_int(g, n, "center_point_box", 0, &c)) != SC_OK) return st;
  if (c != 0 && c != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "center_point_box is %lld (expects 0 or 1)",
                         (long long)c);
  p->center = c == 1;
  return SC_OK;
}

/* Corner form of box k: [y1, x1, y2, x2] ordered, or from the centre form. */
static void nms_box(const nms_in *p, int64_t bi, int64_t k, float *ymin, float *xmin,
                    float *ymax, float *xmax) {
  float v[4];
  for (int j = 0; j < 4; j++)
    v[j] = (float)sc_load_f64(p->boxes->dtype, p->boxes->data, (bi * p->nboxes + k) * 4 + j);
  if (p->center) {
    float w = v[2] / 2, h = v[3] / 2;
    *xmin = v[0] - w, *xmax = v[0] + w, *ymin = v[1] - h, *ymax = v[1] + h;
    return;
  }
  *ymin = fminf(v[0], v[2]), *ymax = fmaxf(v[0], v[2]);
  *xmin = fminf(v[1], v[3]), *xmax = fmaxf(v[1], v[3]);
}

static bool nms_suppress(const nms_in *p, int64_t bi, int64_t a, int64_t b) {
  float ay0, ax0, ay1, ax1, by0, bx0, by1, bx1;
  nms_box(p, bi, a, &ay0, &ax0, &ay1, &ax1);
  nms_box(p, bi, b, &by0, &bx0, &by1, &bx1);
  float ix0 = fmaxf(ax0, bx0), ix1 = fminf(ax1, bx1);
  if (ix1 <= ix0) return false;
  float iy0 = fmaxf(ay0, by0), iy1 = fminf(ay1, by1);
  if (iy1 <= iy0) return false;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0) return false;
  float a1 = (ax1 - ax0) * (ay1 - ay0), a2 = (bx1 - bx0) * (by1 - by0);
  float uni = a1 + a2 - inter;
  if (a1 <= 0 || a2 <= 0 || uni <= 0) return false;
  return inter / uni > p->iou;
}

typedef struct nms_ctx {
  const float *score;
} nms_ctx;

/* Higher score first; equal scores: lower box index first. */
static int cmp_score(const void *ctx, int64_t a, int64_t b) {
  const float *s = ((const nms_ctx *)ctx)->score;
  if (s[a] != s[b]) return s[a] > s[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* The selected [batch, class, box] triples (malloc'd, *count of them; NULL
 * out only counts). */
static sc_status select_nms(sc_graph *g, const sc_node *n, const nms_in *p, int64_t **out,
                            int64_t *count) {
  int64_t nb = p->nboxes, total = 0, cap = 0, *sel = NULL;
  int64_t *ord = malloc((size_t)(nb ? nb : 1) * sizeof *ord);
  int64_t *tmp = malloc((size_t)(nb ? nb : 1) * sizeof *tmp);
  int64_t *kept = malloc((size_t)(nb ? nb : 1) * sizeof *kept);
  float *sc = malloc((size_t)(nb ? nb : 1) * sizeof *sc);
  sc_status st = SC_OK;
  if (!ord || !tmp || !kept || !sc) st = sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
  for (int64_t bi = 0; st == SC_OK && bi < p->batches; bi++)
    for (int64_t ci = 0; st == SC_OK && ci < p->classes; ci++) {
      int64_t m = 0, nk = 0;
      for (int64_t k = 0; k < nb; k++) {
        sc[k] = (float)sc_load_f64(p->scores->dtype, p->scores->data,
                                   (bi * p->classes + ci) * nb + k);
        if (!p->has_score || sc[k] > p->score) ord[m++] = k;
      }
      nms_ctx ctx = {sc};
      merge_sort(ord, tmp, m, cmp_score, &ctx);
      for (int64_t k = 0; k < m && nk < p->max_out; k++) {
        bool keep = true;
        for (int64_t j = 0; j < nk && keep; j++) keep = !nms_suppress(p, bi, ord[k], kept[j]);
        if (!keep) continue;
        kept[nk++] = ord[k];
        if (out) {
          if (total == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *bigger = realloc(sel, (size_t)cap * 3 * sizeof *sel);
            if (!bigger) {
              st = sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
              break;
            }
            sel = bigger;
          }
          sel[3 * total] = bi, sel[3 * total + 1] = ci, sel[3 * total + 2] = ord[k];
        }
        total++;
      }
    }
  free(ord);
  free(tmp);
  free(kept);
  free(sc);
  if (st != SC_OK) {
    free(sel);
    return st;
  }
  if (out) *out = sel;
  *count = total;
  return SC_OK;
}

sc_status sc_op_infer_nms(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  nms_in p;
  int64_t count;
  if ((st = nms_read(g, n, &p)) != SC_OK || (st = select_nms(g, n, &p, NULL, &count)) != SC_OK)
    return st;
  int64_t d[2] = {count, 3};
  return sc_set_output(g, n, 0, SC_DTYPE_I64, 2, d);
}

sc_status sc_op_eval_nms(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  if (st != SC_OK) return st;
  nms_in p;
  int64_t count, *sel = NULL;
  if ((st = nms_read(g, n, &p)) != SC_OK || (st = select_nms(g, n, &p, &sel, &count)) != SC_OK)
    return st;
  const sc_value *y = sc_node_output(g, n, 0);
  uint8_t *out = NULL;
  if (y->dims[0] != count) st = sc_node_error(g, n, SC_ERR_INVALID, "input changed since inference");
  else st = sc_move_output(g, n, 0, &out);
  if (st == SC_OK && out && count) memcpy(out, sel, (size_t)count * 3 * sizeof *sel);
  free(sel);
  return st;
}
