/* op_reduce.c — reductions (family R of ops.def): Reduce{Mean,Sum,Max,Min,
 * Prod,L1,L2,SumSquare,LogSumExp}, ArgMax/ArgMin and CumSum: shape rules,
 * cost and constant evaluation.
 *
 * Cost rule (docs/ops.md copies it):
 *   flops = number of elements of input 0 (one operation per element read,
 *           whatever the reduction; CumSum and ArgMax/ArgMin alike);
 *   bytes = bytes of every present input + bytes of every present output
 *           (inputs of unknown size count 0).
 *
 * Axes of Reduce*: from the 'axes' attribute (ReduceSum before opset 13, the
 * others before opset 18) or from optional input 1, which must then be a
 * constant integer tensor (a computed one is SC_ERR_UNSUPPORTED: the output
 * shape would depend on data). Either source is accepted at any opset; both
 * at once is an error. Negative axes count from the end; a repeated axis is
 * an error. Empty axes reduce everything unless noop_with_empty_axes=1,
 * which makes the op an identity. Outputs keep the input dtype; ArgMax/ArgMin
 * give int64.
 *
 * Evaluation: floating-point types accumulate in double; integer types in
 * wrapping int64 (Sum, Prod, Max, Min, L1, SumSquare exact; Mean is the
 * integer sum divided with truncation; L2 and LogSumExp go through double).
 * Reductions over an empty axis give the identity of the reduction (0 for
 * sums, 1 for Prod, -inf / +inf (the integer dtype's min / max) for Max /
 * Min, NaN for Mean, -inf for LogSumExp). Max/Min propagate NaN. ArgMax/ArgMin over an
 * empty axis is an error; a NaN counts as the extreme value (as numpy). */
#include <math.h>
#include <string.h>

#include "op_util.h"

enum { MAX_AXES = 64 };

static sc_status attr_int(sc_graph *g, const sc_node *n, const char *name,
                          int64_t dflt, bool is_bool, int64_t *out) {
  int64_t v;
  sc_status st = sc_read_attr_int(g, n, name, dflt, &v);
  *out = dflt;
  if (st != SC_OK) return st;
  if (is_bool && v != 0 && v != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be 0 or 1, not %lld",
                         name, (long long)v);
  *out = v;
  return SC_OK;
}

static bool is_arith(sc_dtype t) { return sc_dtype_is_float(t) || sc_dtype_is_int(t); }

static sc_status check_arith(sc_graph *g, const sc_node *n, const sc_value *x) {
  if (!is_arith(x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has dtype %s; expects a numeric type",
                         x->name, sc_dtype_name(x->dtype));
  return SC_OK;
}

/* Checks the inputs; input 0 (returned in *x) has an arithmetic dtype. */
static sc_status arith_input(sc_graph *g, const sc_node *n, const sc_value **x) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  *x = sc_node_input(g, n, 0);
  return check_arith(g, n, *x);
}

static sc_status eval_check(sc_graph *g, const sc_node *n) {
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (v && !sc_value_has_data(v))
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has no constant data",
                           v->name);
  }
  const sc_value *o = sc_node_output(g, n, 0);
  if (!o || o->rank < 0 || sc_value_numel(o) < 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "output has no inferred shape");
  if (sc_value_numel(o) > SC_FOLD_MAX_ELEMENTS)
    return sc_node_error(g, n, SC_ERR_LIMIT, "output '%s' has %lld elements, too many to fold",
                         o->name, (long long)sc_value_numel(o));
  /* the loops below walk the input once; bound it too */
  const sc_value *x = sc_node_input(g, n, 0);
  if (!x || sc_value_numel(x) < 0 || sc_value_numel(x) > 16 * SC_FOLD_MAX_ELEMENTS)
    return sc_node_error(g, n, SC_ERR_LIMIT, "input too large to fold");
  return SC_OK;
}

static void *alloc_output(sc_graph *g, const sc_node *n, sc_status *st) {
  void *p = sc_eval_output(g, n, 0);
  if (!p) *st = g->diag.status != SC_OK
                    ? g->diag.status
                    : sc_node_error(g, n, SC_ERR_NOMEM, "cannot allocate the output");
  return p;
}

static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static bool ilt(sc_dtype t, int64_t a, int64_t b) {
  return t == SC_DTYPE_U64 ? (uint64_t)a < (uint64_t)b : a < b;
}

void sc_op_cost_reduce(sc_graph *g, const sc_node *n, sc_cost *c) {
  double bytes = 0;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    int64_t b = v ? sc_value_bytes(v) : -1;
    if (b > 0) bytes += (double)b;
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    int64_t b = v ? sc_value_bytes(v) : -1;
    if (b > 0) bytes += (double)b;
  }
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t m = x ? sc_value_numel(x) : -1;
  c->flops = m > 0 ? (double)m : 0;
  c->bytes = bytes;
}

/* ---- Reduce* ---- */

sc_status sc_reduce_axes(sc_graph *g, const sc_node *n, bool *mask, bool *noop,
                         bool *keep) {
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t kd, noop_empty;
  sc_status st = attr_int(g, n, "keepdims", 1, true, &kd);
  if (st == SC_OK) st = attr_int(g, n, "noop_with_empty_axes", 0, true, &noop_empty);
  if (st != SC_OK) return st;
  *keep = kd != 0;
  int64_t axes[MAX_AXES], count = 0;
  const sc_attr *a = sc_node_attr(n, "axes");
  const sc_value *ax_in = sc_node_input(g, n, 1);
  if (a && ax_in)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "axes given both as attribute and as input '%s'", ax_in->name);
  if (a) {
    if (a->kind != SC_ATTR_INTS)
      return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'axes' must be ints");
    if (a->n > MAX_AXES)
      return sc_node_error(g, n, SC_ERR_INVALID, "%lld axes for rank %d",
                           (long long)a->n, x->rank);
    count = a->n;
    for (int64_t i = 0; i < count; i++) axes[i] = a->ints[i];
  } else if (ax_in) {
    if ((st = sc_input_ints(g, n, 1, axes, MAX_AXES, &count)) != SC_OK) return st;
  }
  for (int32_t d = 0; d < SC_MAX_RANK; d++) mask[d] = false;
  *noop = false;
  if (count == 0) {
    if (noop_empty) *noop = true;
    else
      for (int32_t d = 0; d < x->rank; d++) mask[d] = true;
    return SC_OK;
  }
  for (int64_t i = 0; i < count; i++) {
    int32_t ax;
    if ((st = sc_norm_axis(g, n, axes[i], x->rank, &ax)) != SC_OK) return st;
    if (mask[ax])
      return sc_node_error(g, n, SC_ERR_INVALID, "axis %lld is repeated", (long long)axes[i]);
    mask[ax] = true;
  }
  return SC_OK;
}

/* ReduceMax/ReduceMin take bool since opset 20 (max is any, min is all). */
static bool reduce_bool_ok(const sc_graph *g, const sc_node *n, sc_dtype t) {
  return t == SC_DTYPE_BOOL && g->opset >= 20 &&
         (n->op == SC_OP_REDUCE_MAX || n->op == SC_OP_REDUCE_MIN);
}

sc_status sc_op_infer_reduce(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if (!reduce_bool_ok(g, n, x->dtype) && (st = check_arith(g, n, x)) != SC_OK) return st;
  bool mask[SC_MAX_RANK], noop, keep;
  if ((st = sc_reduce_axes(g, n, mask, &noop, &keep)) != SC_OK) return st;
  if (noop) return sc_same_as_input(g, n, 0, 0);
  int64_t d[SC_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < x->rank; i++) {
    if (!mask[i]) d[r++] = x->dims[i];
    else if (keep) d[r++] = 1;
  }
  return sc_set_output(g, n, 0, x->dtype, r, d);
}

sc_status sc_op_eval_reduce(sc_graph *g, sc_node *n) {
  sc_status st = eval_check(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  bool mask[SC_MAX_RANK], noop, keep;
  if ((st = sc_reduce_axes(g, n, mask, &noop, &keep)) != SC_OK) return st;
  if (o->dtype != x->dtype || !(is_arith(x->dtype) || reduce_bool_ok(g, n, x->dtype)))
    return sc_node_error(g, n, SC_ERR_INVALID, "output dtype does not match the input");
  int64_t m = sc_value_numel(o), xn = sc_value_numel(x);
  void *out = alloc_output(g, n, &st);
  if (!out) return st;
  if (noop) {
    if (m != xn) return sc_node_error(g, n, SC_ERR_INVALID, "output shape mismatch");
    if (m) memcpy(out, x->data, (size_t)sc_value_bytes(x));
    return SC_OK;
  }
  /* output strides over the input's rank (reduced dims stride 0) */
  int64_t kd[SC_MAX_RANK], ks[SC_MAX_RANK];
  int64_t km = 1;
  for (int32_t i = 0; i < x->rank; i++) {
    kd[i] = mask[i] ? 1 : x->dims[i];
    km *= kd[i];
  }
  if (km != m) return sc_node_error(g, n, SC_ERR_INVALID, "output shape mismatch");
  sc_strides(x->rank, kd, ks);
  for (int32_t i = 0; i < x->rank; i++)
    if (mask[i]) ks[i] = 0;
  int64_t cnt = m ? xn / m : 0; /* elements per output */
  bool fl = sc_dtype_is_float(x->dtype);
  sc_dtype t = x->dtype;
  sc_op op = n->op;
  bool int_acc = !fl && op != SC_OP_REDUCE_L2 && op != SC_OP_REDUCE_LOG_SUM_EXP;
  size_t mm = m ? (size_t)m : 1;
  double *af = sc_calloc(mm, sizeof *af), *mx = sc_calloc(mm, sizeof *mx);
  int64_t *ai = sc_calloc(mm, sizeof *ai);
  if (!af || !mx || !ai) {
    sc_free(af), sc_free(mx), sc_free(ai);
    return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
  }
  /* initial values; imin/imax: the extremes of the integer dtype t */
  unsigned bits = 8 * sc_dtype_size(t);
  bool sgn = sc_dtype_is_signed(t);
  int64_t imin = sgn && bits < 64 ? -((int64_t)1 << (bits - 1)) : sgn ? INT64_MIN : 0;
  int64_t imax = bits >= 64 ? (sgn ? INT64_MAX : -1 /* all ones: U64 max */)
                 : sgn      ? ((int64_t)1 << (bits - 1)) - 1
                            : ((int64_t)1 << bits) - 1;
  if (t == SC_DTYPE_BOOL) imax = 1;
  for (int64_t j = 0; j < m; j++) {
    switch (op) {
    case SC_OP_REDUCE_PROD: af[j] = 1; ai[j] = 1; break;
    case SC_OP_REDUCE_MAX: af[j] = -INFINITY; ai[j] = imin; break;
    case SC_OP_REDUCE_MIN: af[j] = INFINITY; ai[j] = imax; break;
    default: break;
    }
    mx[j] = -INFINITY;
  }
  int64_t idx[SC_MAX_RANK] = {0};
  /* LogSumExp needs each output's max first */
  if (op == SC_OP_REDUCE_LOG_SUM_EXP) {
    for (int64_t i = 0; i < xn; i++) {
      int64_t j = 0;
      for (int32_t d = 0; d < x->rank; d++) j += idx[d] * ks[d];
      double v = sc_load_f64(t, x->data, i);
      if (isnan(v) || isnan(mx[j])) mx[j] = NAN;
      else if (v > mx[j]) mx[j] = v;
      sc_next_index(x->rank, x->dims, idx);
    }
    memset(idx, 0, sizeof idx);
  }
  for (int64_t i = 0; i < xn; i++) {
    int64_t j = 0;
    for (int32_t d = 0; d < x->rank; d++) j += idx[d] * ks[d];
    if (int_acc) {
      int64_t v = sc_load_i64(t, x->data, i), av = v;
      if (t != SC_DTYPE_U64 && v < 0) av = (int64_t)(0 - (uint64_t)v);
      switch (op) {
      case SC_OP_REDUCE_SUM: case SC_OP_REDUCE_MEAN: ai[j] = wadd(ai[j], v); break;
      case SC_OP_REDUCE_PROD: ai[j] = wmul(ai[j], v); break;
      case SC_OP_REDUCE_MAX: if (ilt(t, ai[j], v)) ai[j] = v; break;
      case SC_OP_REDUCE_MIN: if (ilt(t, v, ai[j])) ai[j] = v; break;
      case SC_OP_REDUCE_L1: ai[j] = wadd(ai[j], av); break;
      case SC_OP_REDUCE_SUM_SQUARE: ai[j] = wadd(ai[j], wmul(v, v)); break;
      default: SC_ASSERT(!"not a reduce op");
      }
    } else {
      double v = sc_load_f64(t, x->data, i);
      switch (op) {
      case SC_OP_REDUCE_SUM: case SC_OP_REDUCE_MEAN: af[j] += v; break;
      case SC_OP_REDUCE_PROD: af[j] *= v; break;
      case SC_OP_REDUCE_MAX:
        af[j] = isnan(v) || isnan(af[j]) ? NAN : (v > af[j] ? v : af[j]);
        break;
      case SC_OP_REDUCE_MIN:
        af[j] = isnan(v) || isnan(af[j]) ? NAN : (v < af[j] ? v : af[j]);
        break;
      case SC_OP_REDUCE_L1: af[j] += fabs(v); break;
      case SC_OP_REDUCE_L2: case SC_OP_REDUCE_SUM_SQUARE: af[j] += v * v; break;
      case SC_OP_REDUCE_LOG_SUM_EXP:
        if (isfinite(mx[j])) af[j] += exp(v - mx[j]);
        break;
      default: SC_ASSERT(!"not a reduce op");
      }
    }
    sc_next_index(x->rank, x->dims, idx);
  }
  for (int64_t j = 0; j < m; j++) {
    if (int_acc) {
      int64_t v = ai[j];
      if (op == SC_OP_REDUCE_MEAN) {
        if (cnt == 0) v = 0;
        else if (t == SC_DTYPE_U64) v = (int64_t)((uint64_t)v / (uint64_t)cnt);
        else v = v / cnt;
      }
      sc_store_i64(t, out, j, v);
    } else {
      double v = af[j];
      if (op == SC_OP_REDUCE_MEAN) v = v / (double)cnt;
      else if (op == SC_OP_REDUCE_L2) v = sqrt(v);
      else if (op == SC_OP_REDUCE_LOG_SUM_EXP)
        v = isfinite(mx[j]) ? mx[j] + log(v) : mx[j];
      sc_store_f64(t, out, j, v);
    }
  }
  sc_free(af), sc_free(mx), sc_free(ai);
  return SC_OK;
}

/* ---- ArgMax, ArgMin ---- */

static sc_status argminmax_attrs(sc_graph *g, const sc_node *n, int32_t *axis, bool *keep,
                                 bool *last) {
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t a, kd, sl;
  sc_status st = attr_int(g, n, "axis", 0, false, &a);
  if (st == SC_OK) st = attr_int(g, n, "keepdims", 1, true, &kd);
  if (st == SC_OK) st = attr_int(g, n, "select_last_index", 0, true, &sl);
  if (st == SC_OK) st = sc_norm_axis(g, n, a, x->rank, axis);
  if (st != SC_OK) return st;
  *keep = kd != 0;
  *last = sl != 0;
  return SC_OK;
}

sc_status sc_op_infer_argminmax(sc_graph *g, sc_node *n) {
  const sc_value *x;
  sc_status st = arith_input(g, n, &x);
  if (st != SC_OK) return st;
  int32_t axis;
  bool keep, last;
  if ((st = argminmax_attrs(g, n, &axis, &keep, &last)) != SC_OK) return st;
  if (x->dims[axis] == 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis %d of input '%s' is empty", axis,
                         x->name);
  int64_t d[SC_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < x->rank; i++) {
    if (i != axis) d[r++] = x->dims[i];
    else if (keep) d[r++] = 1;
  }
  return sc_set_output(g, n, 0, SC_DTYPE_I64, r, d);
}

/* Outer/axis/inner split of a shape around axis. */
static void split_axis(const sc_value *x, int32_t axis, int64_t *outer, int64_t *len,
                       int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int32_t i = 0; i < axis; i++) *outer *= x->dims[i];
  for (int32_t i = axis + 1; i < x->rank; i++) *inner *= x->dims[i];
  *len = x->dims[axis];
}

sc_status sc_op_eval_argminmax(sc_graph *g, sc_node *n) {
  sc_status st = eval_check(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  int32_t axis;
  bool keep, last;
  if ((st = argminmax_attrs(g, n, &axis, &keep, &last)) != SC_OK) return st;
  int64_t outer, len, inner;
  split_axis(x, axis, &outer, &len, &inner);
  if (len == 0 || o->dtype != SC_DTYPE_I64 || sc_value_numel(o) != outer * inner)
    return sc_node_error(g, n, SC_ERR_INVALID, "output does not match the input");
  int64_t *out = alloc_output(g, n, &st);
  if (!out) return st;
  bool is_max = n->op == SC_OP_ARG_MAX, fl = sc_dtype_is_float(x->dtype);
  sc_dtype t = x->dtype;
  for (int64_t p = 0; p < outer; p++)
    for (int64_t q = 0; q < inner; q++) {
      int64_t base = p * len * inner + q, best = 0;
      for (int64_t k = 1; k < len; k++) {
        int64_t i = base + k * inner, b = base + best * inner;
        bool better, tie;
        if (fl) {
          double v = sc_load_f64(t, x->data, i), bv = sc_load_f64(t, x->data, b);
          if (isnan(bv)) better = false, tie = isnan(v);
          else if (isnan(v)) better = true, tie = false;
          else better = is_max ? v > bv : v < bv, tie = v == bv;
        } else {
          int64_t v = sc_load_i64(t, x->data, i), bv = sc_load_i64(t, x->data, b);
          better = is_max ? ilt(t, bv, v) : ilt(t, v, bv);
          tie = v == bv;
        }
        if (better || (last && tie)) best = k;
      }
      out[p * inner + q] = best;
    }
  return SC_OK;
}

/* ---- CumSum, CumProd ---- */

static sc_status cumsum_attrs(sc_graph *g, const sc_node *n, bool *excl, bool *rev) {
  int64_t e = 0, r = 0;
  sc_status st = attr_int(g, n, "exclusive", 0, true, &e);
  if (st == SC_OK) st = attr_int(g, n, "reverse", 0, true, &r);
  *excl = e != 0;
  *rev = r != 0;
  return st;
}

static sc_status cumsum_axis(sc_graph *g, const sc_node *n, int32_t *axis) {
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t a[2], count;
  sc_status st = sc_input_ints(g, n, 1, a, 1, &count);
  if (st != SC_OK) return st;
  if (count != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis input must hold one value");
  return sc_norm_axis(g, n, a[0], x->rank, axis);
}

sc_status sc_op_infer_cumsum(sc_graph *g, sc_node *n) {
  const sc_value *x;
  sc_status st = arith_input(g, n, &x);
  if (st != SC_OK) return st;
  const sc_value *ax = sc_node_input(g, n, 1);
  if (ax->dtype != SC_DTYPE_I32 && ax->dtype != SC_DTYPE_I64)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis '%s' must be int32 or int64", ax->name);
  if (sc_value_numel(ax) != 1 || ax->rank > 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis '%s' must be a scalar", ax->name);
  bool excl, rev;
  if ((st = cumsum_attrs(g, n, &excl, &rev)) != SC_OK) return st;
  if (x->rank == 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' must have rank >= 1", x->name);
  /* the output shape does not depend on the axis, but the lowering needs it
   * constant: a graph input axis is reported (sc_input_ints sets want_const,
   * so `shardc run` can specialise); a computed one is checked when known */
  if (sc_value_has_data(ax) || (ax->flags & SC_VALUE_INPUT)) {
    int32_t axis;
    if ((st = cumsum_axis(g, n, &axis)) != SC_OK) return st;
  }
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_cumsum(sc_graph *g, sc_node *n) {
  sc_status st = eval_check(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  int32_t axis;
  bool excl, rev;
  if ((st = cumsum_attrs(g, n, &excl, &rev)) != SC_OK) return st;
  if ((st = cumsum_axis(g, n, &axis)) != SC_OK) return st;
  if (o->dtype != x->dtype || sc_value_numel(o) != sc_value_numel(x) || !is_arith(x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "output does not match the input");
  void *out = alloc_output(g, n, &st);
  if (!out) return st;
  int64_t outer, len, inner;
  split_axis(x, axis, &outer, &len, &inner);
  sc_dtype t = x->dtype;
  bool fl = sc_dtype_is_float(t), prod = n->op == SC_OP_CUM_PROD;
  for (int64_t p = 0; p < outer; p++)
    for (int64_t q = 0; q < inner; q++) {
      double sf = prod ? 1 : 0;
      int64_t si = prod ? 1 : 0;
      for (int64_t s = 0; s < len; s++) {
        int64_t k = rev ? len - 1 - s : s;
        int64_t i = p * len * inner + k * inner + q;
        if (fl) {
          double v = sc_load_f64(t, x->data, i), next = prod ? sf * v : sf + v;
          sc_store_f64(t, out, i, excl ? sf : next);
          sf = next;
        } else {
          int64_t v = sc_load_i64(t, x->data, i), next = prod ? wmul(si, v) : wadd(si, v);
          sc_store_i64(t, out, i, excl ? si : next);
          si = next;
        }
      }
    }
  return SC_OK;
}
