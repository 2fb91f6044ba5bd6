/* op_move.c — data movement by index: Gather, GatherElements, GatherND,
 * ScatterND, ScatterElements, and Trilu, Pad, OneHot (ONNX opsets 13–25),
 * and Resize (opset 11's form and later; Upsample and Resize-10 become it
 * in frontend/onnx_adapters.c).
 * Their cost function, cost_move, is in op_shape.c with the rest of the "S"
 * family.
 *
 * Every index read from data is bounds-checked in eval: a negative index
 * counts from the end (as ONNX says), and one outside [-dim, dim) is an
 * SC_ERR_INVALID diagnostic, never an out-of-bounds read or write. (OneHot is
 * the exception ONNX defines: an index out of range gives an all-off row.)
 * Scatter reductions (add, mul, max, min) compute in double for float types
 * (exact for one operation on f32/f16/bf16) and in 64-bit integers for
 * integer types, wrapping like the hardware would. */
#include <math.h>
#include <string.h>

#include "op_move.h"

/* Element i of an index tensor, normalised against dim; false when out of
 * range. */
static bool load_index(sc_dtype t, const void *p, int64_t i, int64_t dim,
                       int64_t *out) {
  int64_t v;
  *out = 0;
  if (t == SC_DTYPE_U64) {
    uint64_t u = ((const uint64_t *)p)[i];
    if (u > (uint64_t)INT64_MAX) return false;
    v = (int64_t)u;
  } else {
    v = sc_load_i64(t, p, i);
  }
  if (v < 0) v += dim;
  *out = v;
  return v >= 0 && v < dim;
}

static sc_status bad_index(sc_graph *g, const sc_node *n, sc_dtype t, const void *p,
                           int64_t i, int64_t dim) {
  if (t == SC_DTYPE_U64)
    return sc_node_error(g, n, SC_ERR_INVALID, "index %llu out of range [%lld, %lld)",
                         (unsigned long long)((const uint64_t *)p)[i],
                         -(long long)dim, (long long)dim);
  return sc_node_error(g, n, SC_ERR_INVALID, "index %lld out of range [%lld, %lld)",
                       (long long)sc_load_i64(t, p, i), -(long long)dim, (long long)dim);
}

/* Checks the first m indices (all of them, before anything is written)
 * against extent dim. */
static sc_status check_indices(sc_graph *g, const sc_node *n, sc_dtype t, const void *p,
                               int64_t m, int64_t dim) {
  for (int64_t j = 0; j < m; j++) {
    int64_t v;
    if (!load_index(t, p, j, dim, &v)) return bad_index(g, n, t, p, j, dim);
  }
  return SC_OK;
}

static sc_status need_int(sc_graph *g, const sc_node *n, int32_t i) {
  const sc_value *v = sc_node_input(g, n, i);
  if (!sc_dtype_is_int(v->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "indices '%s' must be integers, not %s",
                         v->name, sc_dtype_name(v->dtype));
  return SC_OK;
}

static sc_status need_same_dtype(sc_graph *g, const sc_node *n, int32_t a, int32_t b) {
  const sc_value *x = sc_node_input(g, n, a), *y = sc_node_input(g, n, b);
  if (x->dtype != y->dtype)
    return sc_node_error(g, n, SC_ERR_INVALID, "'%s' is %s but '%s' is %s", x->name,
                         sc_dtype_name(x->dtype), y->name, sc_dtype_name(y->dtype));
  return SC_OK;
}

/* Checks the inputs of a gather-like node: data x (input 0), integer
 * indices ind (input 1), and the int attribute attr (default 0). */
static sc_status data_indices(sc_graph *g, const sc_node *n, const char *attr,
                              const sc_value **x, const sc_value **ind, int64_t *val) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK || (st = need_int(g, n, 1)) != SC_OK) return st;
  *x = sc_node_input(g, n, 0);
  *ind = sc_node_input(g, n, 1);
  *val = sc_attr_int(g, n, attr, 0);
  return g->diag.status;
}

/* ---- Gather ---- */

sc_status sc_op_infer_gather(sc_graph *g, sc_node *n) {
  const sc_value *x, *ind;
  int64_t ax;
  sc_status st = data_indices(g, n, "axis", &x, &ind, &ax);
  if (st != SC_OK) return st;
  int32_t axis;
  if ((st = sc_norm_axis(g, n, ax, x->rank, &axis)) != SC_OK) return st;
  int32_t r = x->rank - 1 + ind->rank;
  if (r > SC_MAX_RANK)
    return sc_node_error(g, n, SC_ERR_LIMIT, "output rank %d (at most %d supported)", r,
                         SC_MAX_RANK);
  int64_t d[SC_MAX_RANK];
  int32_t k = 0;
  for (int32_t i = 0; i < axis; i++) d[k++] = x->dims[i];
  for (int32_t i = 0; i < ind->rank; i++) d[k++] = ind->dims[i];
  for (int32_t i = axis + 1; i < x->rank; i++) d[k++] = x->dims[i];
  return sc_set_output(g, n, 0, x->dtype, r, d);
}

sc_status sc_op_eval_gather(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *ip;
  uint8_t *out;
  if (st != SC_OK || (st = sc_move_input_data(g, n, 0, &in)) != SC_OK ||
      (st = sc_move_input_data(g, n, 1, &ip)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int32_t axis;
  if ((st = sc_norm_axis(g, n, sc_attr_int(g, n, "axis", 0), x->rank, &axis)) != SC_OK)
    return st;
  int64_t outer = sc_move_prod(x->dims, 0, axis), dim = x->dims[axis];
  int64_t inner = sc_move_prod(x->dims, axis + 1, x->rank) * sc_dtype_size(x->dtype);
  int64_t m = sc_value_numel(ind);
  if ((st = check_indices(g, n, ind->dtype, ip, m, dim)) != SC_OK) return st;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t v = 0;
      load_index(ind->dtype, ip, j, dim, &v);
      sc_move_copy(out, in + (o * dim + v) * inner, inner);
      out += inner;
    }
  return SC_OK;
}

/* ---- GatherElements, ScatterElements ---- */

/* Shared checks: indices (input 1) have data's rank, and each non-axis dim
 * no larger than data's. */
static sc_status elements_check(sc_graph *g, const sc_node *n, int32_t *axis) {
  sc_status st = need_int(g, n, 1);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int64_t ax = sc_attr_int(g, n, "axis", 0);
  if (g->diag.status != SC_OK) return g->diag.status;
  if ((st = sc_norm_axis(g, n, ax, x->rank, axis)) != SC_OK) return st;
  if (ind->rank != x->rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "indices have rank %d, data %d",
                         ind->rank, x->rank);
  for (int32_t i = 0; i < x->rank; i++)
    if (i != *axis && ind->dims[i] > x->dims[i])
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "indices dim %d is %lld, larger than data's %lld", i,
                           (long long)ind->dims[i], (long long)x->dims[i]);
  return SC_OK;
}

sc_status sc_op_infer_gather_elements(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  int32_t axis;
  if (st != SC_OK || (st = elements_check(g, n, &axis)) != SC_OK) return st;
  const sc_value *ind = sc_node_input(g, n, 1);
  return sc_set_output(g, n, 0, sc_node_input(g, n, 0)->dtype, ind->rank, ind->dims);
}

sc_status sc_op_eval_gather_elements(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *ip;
  uint8_t *out;
  int32_t axis;
  if (st != SC_OK || (st = elements_check(g, n, &axis)) != SC_OK ||
      (st = sc_move_input_data(g, n, 0, &in)) != SC_OK ||
      (st = sc_move_input_data(g, n, 1, &ip)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int64_t m = sc_value_numel(ind), xs[SC_MAX_RANK], idx[SC_MAX_RANK] = {0};
  if ((st = check_indices(g, n, ind->dtype, ip, m, x->dims[axis])) != SC_OK) return st;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  size_t es = sc_dtype_size(x->dtype);
  sc_strides(x->rank, x->dims, xs);
  for (int64_t j = 0; j < m; j++) {
    int64_t v = 0, off = 0;
    load_index(ind->dtype, ip, j, x->dims[axis], &v);
    for (int32_t i = 0; i < x->rank; i++) off += (i == axis ? v : idx[i]) * xs[i];
    memcpy(out + (size_t)j * es, in + (size_t)off * es, es);
    sc_next_index(ind->rank, ind->dims, idx);
  }
  return SC_OK;
}

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } red_kind;

static sc_status reduction_attr(sc_graph *g, const sc_node *n, red_kind *r) {
  const char *s = sc_attr_string(g, n, "reduction", "none");
  if (g->diag.status != SC_OK) return g->diag.status;
  if (strcmp(s, "none") == 0) *r = RED_NONE;
  else if (strcmp(s, "add") == 0) *r = RED_ADD;
  else if (strcmp(s, "mul") == 0) *r = RED_MUL;
  else if (strcmp(s, "max") == 0) *r = RED_MAX;
  else if (strcmp(s, "min") == 0) *r = RED_MIN;
  else return sc_node_error(g, n, SC_ERR_INVALID, "unknown reduction '%s'", s);
  return SC_OK;
}

/* dst[di] = dst[di] (r) src[si]. */
static void combine(sc_dtype t, uint8_t *dst, int64_t di, const uint8_t *src,
                    int64_t si, red_kind r) {
  size_t es = sc_dtype_size(t);
  if (r == RED_NONE) {
    memcpy(dst + (size_t)di * es, src + (size_t)si * es, es);
  } else if (sc_dtype_is_float(t)) {
    double a = sc_load_f64(t, dst, di), b = sc_load_f64(t, src, si);
    double v = r == RED_ADD ? a + b : r == RED_MUL ? a * b : r == RED_MAX ? (a > b ? a : b)
                                                                         : (a < b ? a : b);
    sc_store_f64(t, dst, di, v);
  } else if (t == SC_DTYPE_U64) {
    uint64_t a = ((uint64_t *)dst)[di], b = ((const uint64_t *)src)[si];
    ((uint64_t *)dst)[di] = r == RED_ADD   ? a + b
                            : r == RED_MUL ? a * b
                            : r == RED_MAX ? (a > b ? a : b)
                                           : (a < b ? a : b);
  } else {
    int64_t a = sc_load_i64(t, dst, di), b = sc_load_i64(t, src, si);
    int64_t v = r == RED_ADD   ? (int64_t)((uint64_t)a + (uint64_t)b)
                : r == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                : r == RED_MAX ? (a > b ? a : b)
                               : (a < b ? a : b);
    sc_store_i64(t, dst, di, v);
  }
}

sc_status sc_op_infer_scatter_elements(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  int32_t axis;
  red_kind r;
  if (st != SC_OK || (st = elements_check(g, n, &axis)) != SC_OK ||
      (st = need_same_dtype(g, n, 0, 2)) != SC_OK || (st = reduction_attr(g, n, &r)) != SC_OK)
    return st;
  const sc_value *ind = sc_node_input(g, n, 1), *upd = sc_node_input(g, n, 2);
  bool same = ind->rank == upd->rank;
  for (int32_t i = 0; same && i < ind->rank; i++) same = ind->dims[i] == upd->dims[i];
  if (!same)
    return sc_node_error(g, n, SC_ERR_INVALID, "updates' shape differs from indices'");
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_scatter_elements(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *ip, *up;
  uint8_t *out;
  int32_t axis;
  red_kind r;
  if (st != SC_OK || (st = elements_check(g, n, &axis)) != SC_OK ||
      (st = reduction_attr(g, n, &r)) != SC_OK ||
      (st = sc_move_input_data(g, n, 0, &in)) != SC_OK ||
      (st = sc_move_input_data(g, n, 1, &ip)) != SC_OK ||
      (st = sc_move_input_data(g, n, 2, &up)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int64_t m = sc_value_numel(ind), xs[SC_MAX_RANK], idx[SC_MAX_RANK] = {0};
  if ((st = check_indices(g, n, ind->dtype, ip, m, x->dims[axis])) != SC_OK) return st;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  sc_move_copy(out, in, sc_value_bytes(x));
  sc_strides(x->rank, x->dims, xs);
  for (int64_t j = 0; j < m; j++) {
    int64_t v = 0, off = 0;
    load_index(ind->dtype, ip, j, x->dims[axis], &v);
    for (int32_t i = 0; i < x->rank; i++) off += (i == axis ? v : idx[i]) * xs[i];
    combine(x->dtype, out, off, up, j, r);
    sc_next_index(ind->rank, ind->dims, idx);
  }
  return SC_OK;
}

/* ---- GatherND, ScatterND ---- */

sc_status sc_op_infer_gather_nd(sc_graph *g, sc_node *n) {
  const sc_value *x, *ind;
  int64_t b;
  sc_status st = data_indices(g, n, "batch_dims", &x, &ind, &b);
  if (st != SC_OK) return st;
  if (x->rank < 1 || ind->rank < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "data and indices need rank >= 1");
  if (b < 0 || b >= x->rank || b >= ind->rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "batch_dims %lld out of range",
                         (long long)b);
  int64_t m = ind->dims[ind->rank - 1];
  if (m < 1 || m > x->rank - b)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "indices' last dim is %lld, must be in [1, %lld]", (long long)m,
                         (long long)(x->rank - b));
  for (int32_t i = 0; i < b; i++)
    if (x->dims[i] != ind->dims[i])
      return sc_node_error(g, n, SC_ERR_INVALID, "batch dim %d differs (%lld, %lld)", i,
                           (long long)x->dims[i], (long long)ind->dims[i]);
  int64_t d[2 * SC_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < ind->rank - 1; i++) d[r++] = ind->dims[i];
  for (int32_t i = (int32_t)(b + m); i < x->rank; i++) d[r++] = x->dims[i];
  if (r > SC_MAX_RANK)
    return sc_node_error(g, n, SC_ERR_LIMIT, "output rank %d (at most %d supported)", r,
                         SC_MAX_RANK);
  return sc_set_output(g, n, 0, x->dtype, r, d);
}

/* Offsets (in elements of data) of the slices that the index tuples of
 * ind select; data has batch dims [0, b) shared with ind. NULL on error. */
static int64_t *nd_offsets(sc_graph *g, const sc_node *n, const sc_value *x,
                           const sc_value *ind, const uint8_t *ip, int32_t b,
                           int64_t *n_tuples, int64_t *slice) {
  int32_t m = (int32_t)ind->dims[ind->rank - 1];
  int64_t batches = sc_move_prod(x->dims, 0, b);
  int64_t per_batch = sc_move_prod(ind->dims, b, ind->rank - 1);
  int64_t batch_elems = sc_move_prod(x->dims, b, x->rank);
  int64_t xs[SC_MAX_RANK];
  sc_strides(x->rank, x->dims, xs);
  *n_tuples = batches * per_batch;
  *slice = sc_move_prod(x->dims, b + m, x->rank);
  int64_t *offs = sc_calloc((size_t)(*n_tuples ? *n_tuples : 1), sizeof *offs);
  if (!offs) {
    sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  for (int64_t t = 0; t < *n_tuples; t++) {
    int64_t off = (t / (per_batch ? per_batch : 1)) * batch_elems;
    for (int32_t k = 0; k < m; k++) {
      int64_t v, dim = x->dims[b + k];
      if (!load_index(ind->dtype, ip, t * m + k, dim, &v)) {
        bad_index(g, n, ind->dtype, ip, t * m + k, dim);
        sc_free(offs);
        return NULL;
      }
      off += v * xs[b + k];
    }
    offs[t] = off;
  }
  return offs;
}

sc_status sc_op_eval_gather_nd(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *ip;
  uint8_t *out;
  if (st != SC_OK || (st = sc_move_input_data(g, n, 0, &in)) != SC_OK ||
      (st = sc_move_input_data(g, n, 1, &ip)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int32_t b = (int32_t)sc_attr_int(g, n, "batch_dims", 0);
  int64_t nt, slice;
  int64_t *offs = nd_offsets(g, n, x, ind, ip, b, &nt, &slice);
  if (!offs) return g->diag.status;
  if ((st = sc_move_output(g, n, 0, &out)) == SC_OK && out) {
    int64_t es = sc_dtype_size(x->dtype);
    for (int64_t t = 0; t < nt; t++)
      sc_move_copy(out + t * slice * es, in + offs[t] * es, slice * es);
  }
  sc_free(offs);
  return st;
}

sc_status sc_op_infer_scatter_nd(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  red_kind r;
  if (st != SC_OK || (st = need_int(g, n, 1)) != SC_OK ||
      (st = need_same_dtype(g, n, 0, 2)) != SC_OK || (st = reduction_attr(g, n, &r)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1),
                 *upd = sc_node_input(g, n, 2);
  if (x->rank < 1 || ind->rank < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "data and indices need rank >= 1");
  int64_t m = ind->dims[ind->rank - 1];
  if (m < 1 || m > x->rank)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "indices' last dim is %lld, must be in [1, %d]", (long long)m,
                         x->rank);
  int64_t d[2 * SC_MAX_RANK];
  int32_t k = 0;
  for (int32_t i = 0; i < ind->rank - 1; i++) d[k++] = ind->dims[i];
  for (int32_t i = (int32_t)m; i < x->rank; i++) d[k++] = x->dims[i];
  bool same = upd->rank == k;
  for (int32_t i = 0; same && i < k; i++) same = upd->dims[i] == d[i];
  if (!same)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "updates' shape must be indices.shape[:-1] + data.shape[%lld:]",
                         (long long)m);
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_scatter_nd(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *ip, *up;
  uint8_t *out;
  red_kind r;
  if (st != SC_OK || (st = reduction_attr(g, n, &r)) != SC_OK ||
      (st = sc_move_input_data(g, n, 0, &in)) != SC_OK ||
      (st = sc_move_input_data(g, n, 1, &ip)) != SC_OK ||
      (st = sc_move_input_data(g, n, 2, &up)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *ind = sc_node_input(g, n, 1);
  int64_t nt, slice;
  int64_t *offs = nd_offsets(g, n, x, ind, ip, 0, &nt, &slice);
  if (!offs) return g->diag.status;
  if ((st = sc_move_output(g, n, 0, &out)) == SC_OK && out) {
    sc_move_copy(out, in, sc_value_bytes(x));
    for (int64_t t = 0; t < nt; t++)
      for (int64_t e = 0; e < slice; e++)
        combine(x->dtype, out, offs[t] + e, up, t * slice + e, r);
  }
  sc_free(offs);
  return st;
}

/* ---- Trilu ---- */

sc_status sc_op_infer_trilu(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *k = sc_node_input(g, n, 1);
  sc_attr_int(g, n, "upper", 1);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (x->rank < 2)
    return sc_node_error(g, n, SC_ERR_INVALID, "input has rank %d, needs >= 2", x->rank);
  if (k && (!sc_dtype_is_int(k->dtype) || sc_value_numel(k) != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "k must be one integer");
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_trilu(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in;
  uint8_t *out;
  if (st != SC_OK || (st = sc_move_input_data(g, n, 0, &in)) != SC_OK) return st;
  int64_t k = 0, cnt;
  if (sc_node_input(g, n, 1) && (st = sc_input_ints(g, n, 1, &k, 1, &cnt)) != SC_OK)
    return st;
  bool upper = sc_attr_int(g, n, "upper", 1) != 0;
  int64_t lim = (int64_t)1 << 52; /* beyond any dim: keeps j - i vs k exact */
  k = k < -lim ? -lim : k > lim ? lim : k;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
  int64_t mats = sc_move_prod(x->dims, 0, x->rank - 2);
  size_t es = sc_dtype_size(x->dtype);
  for (int64_t b = 0; b < mats; b++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep) {
          size_t off = (size_t)((b * rows + i) * cols + j) * es;
          memcpy(out + off, in + off, es);
        }
      }
  return SC_OK;
}

/* ---- Pad ---- */

typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP } pad_mode;

typedef struct pad_params {
  pad_mode mode;
  int64_t begin[SC_MAX_RANK], end[SC_MAX_RANK]; /* per dim, may be negative */
  int64_t dout[SC_MAX_RANK];
} pad_params;

static sc_status pad_parse(sc_graph *g, const sc_node *n, pad_params *p) {
  const sc_value *x = sc_node_input(g, n, 0), *cv = sc_node_input(g, n, 2);
  const char *mode = sc_attr_string(g, n, "mode", "constant");
  if (g->diag.status != SC_OK) return g->diag.status;
  if (strcmp(mode, "constant") == 0) p->mode = PAD_CONSTANT;
  else if (strcmp(mode, "reflect") == 0) p->mode = PAD_REFLECT;
  else if (strcmp(mode, "edge") == 0) p->mode = PAD_EDGE;
  else if (strcmp(mode, "wrap") == 0) p->mode = PAD_WRAP;
  else return sc_node_error(g, n, SC_ERR_INVALID, "unknown mode '%s'", mode);
  if (cv && (cv->dtype != x->dtype || sc_value_numel(cv) > 1))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "constant_value must be one %s (or empty)",
                         sc_dtype_name(x->dtype));
  int64_t pads[2 * SC_MAX_RANK], np, axes[SC_MAX_RANK], na = x->rank;
  sc_status st = sc_input_ints(g, n, 1, pads, 2 * SC_MAX_RANK, &np);
  if (st != SC_OK) return st;
  bool has_axes = sc_node_input(g, n, 3) != NULL;
  if (has_axes && (st = sc_input_ints(g, n, 3, axes, SC_MAX_RANK, &na)) != SC_OK)
    return st;
  if (np != 2 * na)
    return sc_node_error(g, n, SC_ERR_INVALID, "pads has %lld entries for %lld axes",
                         (long long)np, (long long)na);
  bool seen[SC_MAX_RANK] = {false};
  for (int32_t i = 0; i < x->rank; i++) {
    p->begin[i] = p->end[i] = 0;
    p->dout[i] = x->dims[i];
  }
  for (int64_t i = 0; i < na; i++) {
    int32_t a;
    if ((st = sc_norm_axis(g, n, has_axes ? axes[i] : i, x->rank, &a)) != SC_OK) return st;
    if (seen[a]) return sc_node_error(g, n, SC_ERR_INVALID, "axis %d is repeated", a);
    seen[a] = true;
    int64_t dim = x->dims[a], b = pads[i], e = pads[i + na], d;
    if (!sc_add_i64(dim, b, &d) || !sc_add_i64(d, e, &d) || d < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "pads %lld, %lld on axis %d of %lld",
                           (long long)b, (long long)e, a, (long long)dim);
    if (p->mode != PAD_CONSTANT && (b > 0 || e > 0)) {
      if (dim == 0)
        return sc_node_error(g, n, SC_ERR_INVALID, "cannot pad empty axis %d in mode %s",
                             a, mode);
      if (p->mode == PAD_REFLECT && (b > dim - 1 || e > dim - 1))
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "reflect pads %lld, %lld exceed axis %d of %lld minus 1",
                             (long long)b, (long long)e, a, (long long)dim);
    }
    p->begin[a] = b;
    p->end[a] = e;
    p->dout[a] = d;
  }
  return SC_OK;
}

sc_status sc_op_infer_pad(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  pad_params p;
  if (st != SC_OK || (st = pad_parse(g, n, &p)) != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  return sc_set_output(g, n, 0, x->dtype, x->rank, p.dout);
}

static int64_t pos_mod(int64_t a, int64_t m) {
  int64_t r = a % m;
  return r < 0 ? r + m : r;
}

sc_status sc_op_eval_pad(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const uint8_t *in, *cv = NULL;
  uint8_t *out;
  pad_params p;
  if (st != SC_OK || (st = pad_parse(g, n, &p)) != SC_OK ||
      (st = sc_move_input_data(g, n, 0, &in)) != SC_OK)
    return st;
  const sc_value *x = sc_node_input(g, n, 0), *cval = sc_node_input(g, n, 2);
  if (cval && sc_value_numel(cval) == 1 &&
      (st = sc_move_input_data(g, n, 2, &cv)) != SC_OK)
    return st;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (sc_move_prod(p.dout, 0, x->rank) == 0) return SC_OK;
  size_t es = sc_dtype_size(x->dtype);
  int64_t xs[SC_MAX_RANK], idx[SC_MAX_RANK] = {0}, o = 0;
  sc_strides(x->rank, x->dims, xs);
  do {
    int64_t off = 0;
    bool outside = false;
    for (int32_t a = 0; a < x->rank && !outside; a++) {
      int64_t i = idx[a] - p.begin[a], dim = x->dims[a];
      if (i < 0 || i >= dim) {
        switch (p.mode) {
        case PAD_CONSTANT: outside = true; break;
        case PAD_EDGE: i = i < 0 ? 0 : dim - 1; break;
        case PAD_WRAP: i = pos_mod(i, dim); break;
        case PAD_REFLECT:
          if (dim == 1) {
            i = 0;
          } else {
            i = pos_mod(i, 2 * (dim - 1));
            if (i >= dim) i = 2 * (dim - 1) - i;
          }
          break;
        }
      }
      off += i * xs[a];
    }
    if (!outside) memcpy(out + (size_t)o * es, in + (size_t)off * es, es);
    else if (cv) memcpy(out + (size_t)o * es, cv, es);
    o++; /* else stays zero */
  } while (sc_next_index(x->rank, p.dout, idx));
  return SC_OK;
}

/* ---- OneHot ---- */

static sc_status onehot_parse(sc_graph *g, const sc_node *n, int64_t *depth,
                              int32_t *axis) {
  const sc_value *ind = sc_node_input(g, n, 0), *dv = sc_node_input(g, n, 1),
                 *vals = sc_node_input(g, n, 2);
  int64_t ax = sc_attr_int(g, n, "axis", -1);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (!sc_dtype_is_numeric(ind->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "indices must be numeric");
  if (sc_value_numel(vals) != 2)
    return sc_node_error(g, n, SC_ERR_INVALID, "values must have 2 elements (off, on)");
  if (sc_value_numel(dv) != 1 || !sc_dtype_is_numeric(dv->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "depth must be one number");
  sc_status cst = sc_require_const(g, n, dv);
  if (cst != SC_OK) return cst;
  double d = sc_load_f64(dv->dtype, dv->data, 0);
  if (!(d >= 1) || d > (double)SC_MAX_ELEMENTS)
    return sc_node_error(g, n, SC_ERR_INVALID, "depth %g is out of range", d);
  *depth = (int64_t)d;
  sc_status st = sc_norm_axis(g, n, ax, ind->rank + 1, axis);
  if (st == SC_OK && ind->rank + 1 > SC_MAX_RANK)
    st = sc_node_error(g, n, SC_ERR_LIMIT, "output rank %d (at most %d supported)",
                       ind->rank + 1, SC_MAX_RANK);
  return st;
}

sc_status sc_op_infer_onehot(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  int64_t depth;
  int32_t axis;
  if (st != SC_OK || (st = onehot_parse(g, n, &depth, &axis)) != SC_OK) return st;
  const sc_value *ind = sc_node_input(g, n, 0);
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0, j = 0; i <= ind->rank; i++) d[i] = i == axis ? depth : ind->dims[j++];
  return sc_set_output(g, n, 0, sc_node_input(g, n, 2)->dtype, ind->rank + 1, d);
}

sc_status sc_op_eval_onehot(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  int64_t depth;
  int32_t axis;
  const uint8_t *ip, *vp;
  uint8_t *out;
  if (st != SC_OK || (st = onehot_parse(g, n, &depth, &axis)) != SC_OK ||
      (st = sc_move_input_data(g, n, 0, &ip)) != SC_OK ||
      (st = sc_move_input_data(g, n, 2, &vp)) != SC_OK)
    return st;
  const sc_value *ind = sc_node_input(g, n, 0), *vals = sc_node_input(g, n, 2);
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  size_t es = sc_dtype_size(vals->dtype);
  int64_t outer = sc_move_prod(ind->dims, 0, axis);
  int64_t inner = sc_move_prod(ind->dims, axis, ind->rank);
  int64_t total = outer * depth * inner;
  for (int64_t i = 0; i < total; i++) memcpy(out + (size_t)i * es, vp, es);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t v = sc_load_i64(ind->dtype, ip, o * inner + i);
      if (ind->dtype == SC_DTYPE_U64 && v < 0) continue;
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue; /* all off */
      memcpy(out + (size_t)((o * depth + v) * inner + i) * es, vp + es, es);
    }
  return SC_OK;
}

/* ---- Resize ---- */

static const char *const RESIZE_MODE[] = {"nearest", "linear", "cubic"};
static const char *const RESIZE_COORD[] = {"half_pixel",    "half_pixel_symmetric",
                                           "pytorch_half_pixel", "align_corners",
                                           "asymmetric",    "tf_crop_and_resize"};
static const char *const RESIZE_NEAREST_MODE[] = {"round_prefer_floor", "round_prefer_ceil",
                                                  "floor", "ceil"};
static const char *const RESIZE_POLICY[] = {"stretch", "not_larger", "not_smaller"};

/* The elements of float input idx (omitted or empty: *count 0). */
static sc_status resize_floats(sc_graph *g, const sc_node *n, int32_t idx, double *buf,
                               int64_t cap, int64_t *count) {
  *count = 0;
  const sc_value *v = sc_node_input(g, n, idx);
  if (!v || sc_value_numel(v) == 0) return SC_OK;
  if (!sc_dtype_is_float(v->dtype) || v->rank != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' must be a 1-D float tensor",
                         v->name);
  sc_status st = sc_require_const(g, n, v);
  if (st != SC_OK) return st;
  int64_t m = sc_value_numel(v);
  if (m > cap)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has %lld entries, more than %lld",
                         v->name, (long long)m, (long long)cap);
  for (int64_t i = 0; i < m; i++) buf[i] = sc_load_f64(v->dtype, v->data, i);
  *count = m;
  return SC_OK;
}

sc_status sc_resize_params(sc_graph *g, const sc_node *n, sc_resize *r) {
  memset(r, 0, sizeof *r);
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t rank = r->rank = x->rank;
  int mode = 0, coord = 0, nearest = 0, policy = 0;
  int64_t antialias = 0, exclude = 0;
  sc_status st;
  if ((st = sc_read_attr_choice(g, n, "mode", "nearest", RESIZE_MODE, 3, &mode)) != SC_OK ||
      (st = sc_read_attr_choice(g, n, "coordinate_transformation_mode", "half_pixel",
                                RESIZE_COORD, 6, &coord)) != SC_OK ||
      (st = sc_read_attr_choice(g, n, "nearest_mode", "round_prefer_floor",
                                RESIZE_NEAREST_MODE, 4, &nearest)) != SC_OK ||
      (st = sc_read_attr_choice(g, n, "keep_aspect_ratio_policy", "stretch", RESIZE_POLICY, 3,
                                &policy)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "cubic_coeff_a", -0.75, &r->cubic_a)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "extrapolation_value", 0.0, &r->extrapolation)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "exclude_outside", 0, &exclude)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "antialias", 0, &antialias)) != SC_OK)
    return st;
  r->mode = (sc_resize_mode)mode;
  r->coord = (sc_resize_coord)coord;
  r->nearest = (sc_resize_nearest)nearest;
  r->exclude_outside = exclude != 0;
  r->antialias = antialias != 0 && r->mode != SC_RESIZE_NEAREST;
  if (r->mode != SC_RESIZE_NEAREST && !sc_dtype_is_float(x->dtype))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "%s mode on %s needs a float input",
                         RESIZE_MODE[mode], sc_dtype_name(x->dtype));
  /* the axes the scales, sizes and roi speak of */
  int32_t axes[SC_MAX_RANK], na = rank;
  for (int32_t d = 0; d < rank; d++) axes[d] = d;
  const int64_t *av;
  int64_t m = sc_attr_ints(g, n, "axes", &av);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (m >= 0) {
    bool seen[SC_MAX_RANK] = {false};
    if (m > rank) return sc_node_error(g, n, SC_ERR_INVALID, "axes has %lld entries for rank %d",
                                       (long long)m, rank);
    na = (int32_t)m;
    for (int32_t i = 0; i < na; i++) {
      if ((st = sc_norm_axis(g, n, av[i], rank, &axes[i])) != SC_OK) return st;
      if (seen[axes[i]]) return sc_node_error(g, n, SC_ERR_INVALID, "axes repeat %lld",
                                              (long long)av[i]);
      seen[axes[i]] = true;
    }
  }
  double roi[2 * SC_MAX_RANK], scales[SC_MAX_RANK];
  int64_t sizes[SC_MAX_RANK], nroi = 0, nsc = 0, nsz = 0;
  if ((st = resize_floats(g, n, 1, roi, 2 * SC_MAX_RANK, &nroi)) != SC_OK ||
      (st = resize_floats(g, n, 2, scales, SC_MAX_RANK, &nsc)) != SC_OK)
    return st;
  const sc_value *sv = sc_node_input(g, n, 3);
  if (sv && sc_value_numel(sv) != 0 &&
      (st = sc_input_ints(g, n, 3, sizes, SC_MAX_RANK, &nsz)) != SC_OK)
    return st;
  if ((nsc > 0) == (nsz > 0))
    return sc_node_error(g, n, SC_ERR_INVALID, "exactly one of scales and sizes must be given");
  if ((nsc ? nsc : nsz) != na)
    return sc_node_error(g, n, SC_ERR_INVALID, "%s has %lld entries for %d axes",
                         nsc ? "scales" : "sizes", (long long)(nsc ? nsc : nsz), na);
  for (int32_t d = 0; d < rank; d++) {
    r->out[d] = x->dims[d];
    r->scale[d] = 1.0;
    r->roi_start[d] = 0.0, r->roi_end[d] = 1.0;
  }
  if (r->coord == SC_RESIZE_TF_CROP_AND_RESIZE) {
    if (nroi != 2 * na)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "tf_crop_and_resize needs a roi of %d entries, got %lld", 2 * na,
                           (long long)nroi);
    for (int32_t i = 0; i < na; i++)
      r->roi_start[axes[i]] = roi[i], r->roi_end[axes[i]] = roi[na + i];
  }
  for (int32_t i = 0; i < na; i++)
    if (x->dims[axes[i]] <= 0)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "resizing an axis of extent %lld",
                           (long long)x->dims[axes[i]]);
  if (nsc) {
    for (int32_t i = 0; i < na; i++) {
      int32_t d = axes[i];
      double o = (double)x->dims[d] * (r->roi_end[d] - r->roi_start[d]) * scales[i];
      if (!(scales[i] > 0.0) || !(o >= 0.0) || o > 1e15)
        return sc_node_error(g, n, SC_ERR_INVALID, "scale %g on axis %d is not usable",
                             scales[i], d);
      r->scale[d] = scales[i];
      r->out[d] = (int64_t)floor(o);
    }
    return SC_OK;
  }
  double keep = policy == 1 ? INFINITY : 0.0;
  for (int32_t i = 0; i < na; i++) {
    if (sizes[i] < 0 || sizes[i] > ((int64_t)1 << 40))
      return sc_node_error(g, n, SC_ERR_INVALID, "size %lld on axis %d is out of range",
                           (long long)sizes[i], axes[i]);
    double s = (double)sizes[i] / (double)x->dims[axes[i]];
    if (policy == 0) r->scale[axes[i]] = s, r->out[axes[i]] = sizes[i];
    else keep = policy == 1 ? fmin(keep, s) : fmax(keep, s);
  }
  if (policy != 0)
    for (int32_t i = 0; i < na; i++) { /* round half up, as the reference */
      r->scale[axes[i]] = keep;
      r->out[axes[i]] = (int64_t)(keep * (double)x->dims[axes[i]] + 0.5);
    }
  return SC_OK;
}

bool sc_resize_keeps(const sc_resize *r, const int64_t *in_dims, int32_t d) {
  return r->scale[d] == 1.0 && r->out[d] == in_dims[d] && r->coord != SC_RESIZE_TF_CROP_AND_RESIZE;
}

int32_t sc_resize_taps(const sc_resize *r, const int64_t *in_dims, int32_t d, int32_t *start) {
  *start = 0;
  if (sc_resize_keeps(r, in_dims, d) || r->mode == SC_RESIZE_NEAREST) return 1;
  *start = r->mode == SC_RESIZE_CUBIC ? -1 : 0;
  if (r->antialias) {
    double s = r->scale[d] < 1.0 ? r->scale[d] : 1.0;
    double st = floor((r->mode == SC_RESIZE_CUBIC ? -2.0 : -1.0) / s) + 1.0;
    if (st < -(double)SC_RESIZE_MAX_TAPS) st = -(double)SC_RESIZE_MAX_TAPS;
    *start = (int32_t)st;
  }
  return 2 - 2 * *start;
}

sc_status sc_op_infer_resize(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  sc_resize r;
  if ((st = sc_resize_params(g, n, &r)) != SC_OK) return st;
  int64_t reads = 1;
  for (int32_t d = 0; d < x->rank; d++) {
    int32_t start, taps = sc_resize_taps(&r, x->dims, d, &start);
    reads *= taps;
    if (taps > SC_RESIZE_MAX_TAPS || reads > SC_RESIZE_MAX_READS)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                           "an antialiased downscale by %g reads %d elements along axis %d "
                           "(at most %d per axis and %d in all are supported)",
                           r.scale[d], taps, d, SC_RESIZE_MAX_TAPS, SC_RESIZE_MAX_READS);
  }
  return sc_set_output(g, n, 0, x->dtype, x->rank, r.out);
}
