/* lower_reduce.c — lowerings of the reductions (family R of ops.def):
 * Reduce*, ArgMax/ArgMin (KERNEL) and CumSum (POINT).
 *
 * A reduction is one kernel: the outer domain is the output's shape (kept
 * dims of extent 1 included), the inner loop runs over the product of the
 * reduced extents, and the input index is the outer index on kept dims and
 * the inner index unflattened over the reduced dims. Accumulation is in f32
 * for f16/bf16/f32, f64 for f64, i64 for integers (u64 for u64): integer
 * sums and products wrap exactly as the evaluator's int64 arithmetic does
 * once narrowed. ReduceMean divides by the count (integers truncate);
 * ReduceL2 and ReduceLogSumExp of integers go through f64, as the evaluator
 * does. LogSumExp is max-shifted: REDUCE max, REDUCE sum exp(x - max), then
 * max + log(sum), or max itself when it is not finite. A reduction over an
 * empty axis stores the reduction's identity (0, 1, ∓inf or the integer
 * dtype's extremes, NaN for a float Mean).
 *
 * ArgMax/ArgMin reduce with KIR_RED_ARGMAX/ARGMIN (first extreme);
 * select_last_index walks the axis backwards and maps the index back.
 *
 * CumSum has no scan in kir: element i is a REDUCE phase over the whole
 * axis of the elements j <= i (j < i exclusive; j >= i, j > i with
 * `reverse`), the others selected to 0 — O(extent) per element, O(extent^2)
 * per line, any length, in the accumulator dtype (f32 for f16/bf16, i64 or
 * u64 for integers) and stored in the input's. */
#include <math.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/op_util.h"

#define UN(op, a) sc_lower_un(cx, KIR_##op, (a))
#define BIN(op, a, b) sc_lower_bin(cx, KIR_##op, (a), (b))
#define SEL(c, a, b) sc_lower_sel(cx, (c), (a), (b))
#define C(t, v) sc_lower_const(cx, (t), (v))

static sc_dtype acc_of(sc_dtype t) {
  if (sc_dtype_is_float(t)) return t == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32;
  return t == SC_DTYPE_U64 ? SC_DTYPE_U64 : SC_DTYPE_I64;
}

static sc_status fail(sc_lower_ctx *cx) {
  return cx->diag->status != SC_OK
             ? cx->diag->status
             : sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

/* Input index for a reduction over the dims in mask: kept dims from the
 * outer vars (output dim numbering: with keepdims every dim has one), the
 * reduced ones unflattened from `lin` (the inner index). */
static void reduce_index(sc_lower_ctx *cx, const sc_value *x, const bool *mask, bool keep,
                         int32_t lin, int32_t *xi) {
  int64_t rd[SC_MAX_RANK];
  int32_t nr = 0, ri[SC_MAX_RANK];
  for (int32_t d = 0; d < x->rank; d++)
    if (mask[d]) rd[nr++] = x->dims[d];
  sc_lower_unflatten(cx, lin, nr, rd, ri);
  int32_t o = 0, r = 0;
  for (int32_t d = 0; d < x->rank; d++) {
    if (mask[d]) {
      xi[d] = ri[r++];
      if (keep) o++;
    } else {
      xi[d] = kir_var(cx->arena, cx->k, o++);
    }
  }
}

/* Reads the axes of a Reduce* node into mask; *noop for an identity. The
 * op's own reader (ir/op_reduce.c) already accepted the node during shape
 * inference; a failure here is its diagnostic, put in the lowering's. */
static sc_status reduce_axes(sc_lower_ctx *cx, const sc_node *n, bool *mask, bool *noop,
                             bool *keep) {
  sc_status st = sc_reduce_axes(cx->g, n, mask, noop, keep);
  if (st != SC_OK) return sc_lower_error(cx, n, st, "%s", cx->g->diag.msg);
  return SC_OK;
}

/* The value of a reduction over an empty set, in dtype t. */
static int32_t empty_value(sc_lower_ctx *cx, const sc_node *n, sc_dtype t) {
  bool fl = sc_dtype_is_float(t);
  unsigned bits = 8 * sc_dtype_size(t);
  bool sgn = sc_dtype_is_signed(t);
  int64_t imin = sgn && bits < 64 ? -((int64_t)1 << (bits - 1)) : sgn ? INT64_MIN : 0;
  int64_t imax = bits >= 64 ? (sgn ? INT64_MAX : -1)
                 : sgn      ? ((int64_t)1 << (bits - 1)) - 1
                 : t == SC_DTYPE_BOOL ? 1 /* all of nothing: true */
                            : ((int64_t)1 << bits) - 1;
  switch (n->op) {
  case SC_OP_REDUCE_PROD: return C(t, 1);
  case SC_OP_REDUCE_MAX: return fl ? C(t, -INFINITY) : kir_const_i(cx->arena, cx->k, t, imin);
  case SC_OP_REDUCE_MIN: return fl ? C(t, INFINITY) : kir_const_i(cx->arena, cx->k, t, imax);
  case SC_OP_REDUCE_MEAN: return fl ? C(t, NAN) : C(t, 0);
  case SC_OP_REDUCE_LOG_SUM_EXP:
    if (fl) return C(t, -INFINITY);
    sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "integer ReduceLogSumExp over an empty axis");
    return -1;
  default: return C(t, 0);
  }
}

static sc_status reduce_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *o = sc_node_output(cx->g, n, 0);
  bool mask[SC_MAX_RANK], noop, keep;
  sc_status st = reduce_axes(cx, n, mask, &noop, &keep);
  if (st != SC_OK) return st;
  sc_dtype t = x->dtype;
  int32_t oidx[SC_MAX_RANK];
  if (noop) {
    if ((st = sc_lower_begin_kernel(cx, n, o->rank, o->dims, 1)) != SC_OK) return st;
    sc_lower_outer_index(cx, oidx);
    return sc_lower_store(cx, n, 0, oidx, sc_lower_input_at(cx, n, 0, oidx));
  }
  int64_t inner = 1;
  for (int32_t d = 0; d < x->rank; d++)
    if (mask[d] && !sc_mul_i64(inner, x->dims[d], &inner))
      return sc_lower_error(cx, n, SC_ERR_LIMIT, "reduction too large");
  if (inner == 0) {
    if ((st = sc_lower_begin_kernel(cx, n, o->rank, o->dims, 1)) != SC_OK) return st;
    sc_lower_outer_index(cx, oidx);
    return sc_lower_store(cx, n, 0, oidx, empty_value(cx, n, t));
  }
  if ((st = sc_lower_begin_kernel(cx, n, o->rank, o->dims, inner)) != SC_OK) return st;
  sc_lower_outer_index(cx, oidx);
  int32_t xi[SC_MAX_RANK];
  reduce_index(cx, x, mask, keep, kir_var(cx->arena, cx->k, KIR_INNER), xi);
  bool fl = sc_dtype_is_float(t);
  bool via_f64 = !fl && (n->op == SC_OP_REDUCE_L2 || n->op == SC_OP_REDUCE_LOG_SUM_EXP);
  sc_dtype at = via_f64 ? SC_DTYPE_F64 : acc_of(t);
  int32_t v = sc_lower_cast(cx, at, sc_lower_input_at(cx, n, 0, xi));
  if (v < 0) return fail(cx);
  kir_reduce_op rop = KIR_RED_SUM;
  int32_t val = v;
  switch (n->op) {
  case SC_OP_REDUCE_MAX: rop = KIR_RED_MAX; break;
  case SC_OP_REDUCE_MIN: rop = KIR_RED_MIN; break;
  case SC_OP_REDUCE_PROD: rop = KIR_RED_PROD; break;
  case SC_OP_REDUCE_L1: val = UN(ABS, v); break;
  case SC_OP_REDUCE_L2: case SC_OP_REDUCE_SUM_SQUARE: val = BIN(MUL, v, v); break;
  case SC_OP_REDUCE_LOG_SUM_EXP: rop = KIR_RED_MAX; break;
  default: break;
  }
  if (val < 0) return fail(cx);
  int32_t ph = kir_add_reduce(cx->arena, cx->k, rop, at, val);
  if (ph < 0) return fail(cx);
  int32_t r = kir_reg(cx->arena, cx->k, ph);
  switch (n->op) {
  case SC_OP_REDUCE_MEAN: r = BIN(DIV, r, C(at, (double)inner)); break;
  case SC_OP_REDUCE_L2: r = UN(SQRT, r); break;
  case SC_OP_REDUCE_LOG_SUM_EXP: {
    int32_t m = r;
    int32_t e = UN(EXP, BIN(SUB, v, m));
    if (e < 0) return fail(cx);
    int32_t ph2 = kir_add_reduce(cx->arena, cx->k, KIR_RED_SUM, at, e);
    if (ph2 < 0) return fail(cx);
    int32_t s = kir_reg(cx->arena, cx->k, ph2);
    int32_t finite = UN(NOT, BIN(OR, UN(ISINF, m), UN(ISNAN, m)));
    r = SEL(finite, BIN(ADD, m, UN(LOG, s)), m);
    break;
  }
  default: break;
  }
  return sc_lower_store(cx, n, 0, oidx, sc_lower_cast(cx, o->dtype, r));
}

const sc_lowering sc_lw_reduce = {SC_LOWER_KERNEL, NULL, reduce_build};

/* ---- ArgMax, ArgMin ---- */

static sc_status argminmax_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *o = sc_node_output(cx->g, n, 0);
  int64_t a = sc_attr_int(cx->g, n, "axis", 0);
  if (a < 0) a += x->rank;
  if (a < 0 || a >= x->rank) return sc_lower_error(cx, n, SC_ERR_INVALID, "axis out of range");
  bool keep = sc_attr_int(cx->g, n, "keepdims", 1) != 0;
  bool last = sc_attr_int(cx->g, n, "select_last_index", 0) != 0;
  int64_t len = x->dims[a];
  if (len < 1) return sc_lower_error(cx, n, SC_ERR_INVALID, "axis %lld is empty", (long long)a);
  sc_status st = sc_lower_begin_kernel(cx, n, o->rank, o->dims, len);
  if (st != SC_OK) return st;
  int32_t oidx[SC_MAX_RANK], xi[SC_MAX_RANK];
  sc_lower_outer_index(cx, oidx);
  bool mask[SC_MAX_RANK] = {false};
  mask[a] = true;
  int32_t r = kir_var(cx->arena, cx->k, KIR_INNER);
  int32_t last_i = sc_lower_i64(cx, len - 1);
  reduce_index(cx, x, mask, keep, last ? BIN(SUB, last_i, r) : r, xi);
  sc_dtype at = acc_of(x->dtype);
  int32_t v = sc_lower_cast(cx, at, sc_lower_input_at(cx, n, 0, xi));
  if (v < 0) return fail(cx);
  int32_t ph = kir_add_reduce(cx->arena, cx->k,
                              n->op == SC_OP_ARG_MAX ? KIR_RED_ARGMAX : KIR_RED_ARGMIN, at, v);
  if (ph < 0) return fail(cx);
  int32_t best = kir_reg(cx->arena, cx->k, ph);
  if (last) best = BIN(SUB, last_i, best);
  return sc_lower_store(cx, n, 0, oidx, best);
}

const sc_lowering sc_lw_argminmax = {SC_LOWER_KERNEL, NULL, argminmax_build};

/* ---- CumSum, CumProd: per output element, a masked sum (product) over
 * the axis ---- */

static sc_status cumsum_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *ax = sc_node_input(cx->g, n, 1);
  const sc_value *o = sc_node_output(cx->g, n, 0);
  if (!ax || !sc_value_has_data(ax) || sc_value_numel(ax) != 1)
    return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "%s with a computed axis",
                          sc_op_name(n->op));
  int64_t a = sc_load_i64(ax->dtype, ax->data, 0);
  if (a < 0) a += x->rank;
  if (a < 0 || a >= x->rank) return sc_lower_error(cx, n, SC_ERR_INVALID, "axis out of range");
  bool excl = sc_attr_int(cx->g, n, "exclusive", 0) != 0;
  bool rev = sc_attr_int(cx->g, n, "reverse", 0) != 0;
  int64_t len = x->dims[a];
  int32_t oidx[SC_MAX_RANK], xi[SC_MAX_RANK];
  sc_status st = sc_lower_begin_kernel(cx, n, o->rank, o->dims, len > 0 ? len : 1);
  if (st != SC_OK) return st;
  sc_lower_outer_index(cx, oidx);
  if (len == 0) return SC_OK; /* nothing to store */
  memcpy(xi, oidx, sizeof(int32_t) * (size_t)x->rank);
  int32_t i = oidx[a], k = kir_var(cx->arena, cx->k, KIR_INNER);
  xi[a] = k;
  int32_t take = rev ? (excl ? BIN(GT, k, i) : BIN(GE, k, i))
                     : (excl ? BIN(LT, k, i) : BIN(LE, k, i));
  sc_dtype at = acc_of(x->dtype);
  int32_t v = sc_lower_cast(cx, at, sc_lower_input_at(cx, n, 0, xi));
  bool prod = n->op == SC_OP_CUM_PROD;
  int32_t val = v < 0 || take < 0 ? -1 : SEL(take, v, C(at, prod ? 1 : 0));
  if (val < 0) return fail(cx);
  int32_t ph = kir_add_reduce(cx->arena, cx->k, prod ? KIR_RED_PROD : KIR_RED_SUM, at, val);
  if (ph < 0) return fail(cx);
  return sc_lower_store(cx, n, 0, oidx,
                        sc_lower_cast(cx, o->dtype, kir_reg(cx->arena, cx->k, ph)));
}

const sc_lowering sc_lw_cumsum = {SC_LOWER_KERNEL, NULL, cumsum_build};
