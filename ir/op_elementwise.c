/* op_elementwise.c — elementwise ops (family E of ops.def): unary math,
 * Cast/CastLike, Clip, Dropout, binary arithmetic with numpy broadcasting,
 * comparisons, logical ops, variadic Max/Min/Sum/Mean and Where. For each:
 * the shape rule (infer), the cost and the constant evaluation (eval).
 *
 * Cost rule (docs/ops.md copies it):
 *   flops = 0 per output element for Identity, Cast, CastLike and Dropout
 *           (data movement only);
 *           (number of present inputs - 1) per output element for the variadic
 *           Max, Min, Sum, Mean (a single-input one counts 0);
 *           1 per output element for every other op, transcendental or not
 *           (Exp, Erf, Gelu, ... are not weighted);
 *   bytes = bytes of every present input + bytes of every present output,
 *           each tensor counted once (inputs of unknown size count 0).
 *
 * Evaluation (eval) computes every op from its formula in elementwise.def
 * (sc_ew_fold, ir/elementwise.c), the same formula the lowering expands
 * into kernel IR; attributes are parsed, with their defaults, by
 * sc_ew_attrs_read, which infer calls so that a bad attribute is reported
 * at shape inference. Eval runs only after infer succeeded; it still checks
 * that inputs have data and that outputs are small enough
 * (SC_FOLD_MAX_ELEMENTS) and returns an error instead of crashing.
 * Training-mode Dropout (random) is never evaluated. */
#include <math.h>
#include <string.h>

#include "elementwise.h"
#include "op_util.h"

/* ---- shared helpers ---- */

/* The type class of op's main inputs (elementwise.def). */
static sc_ew_class row_class(sc_op op) { return sc_ew_rows[op].cls; }

static sc_status check_type(sc_graph *g, const sc_node *n, const sc_value *v,
                            sc_ew_class c) {
  static const char *const want[] = {
      [SC_EW_ANY] = "a numeric or bool", [SC_EW_ARITH] = "a numeric",
      [SC_EW_SIGNED] = "a signed numeric", [SC_EW_FLOAT] = "a floating-point",
      [SC_EW_BOOL] = "a bool", [SC_EW_INT] = "an integer"};
  if (!sc_ew_class_accepts(c, v->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has dtype %s; expects %s type",
                         v->name, sc_dtype_name(v->dtype), want[c]);
  return SC_OK;
}

/* Checks that every present input has data and output 0 is small enough to
 * fold; returns its element count through *numel. */
static sc_status eval_check(sc_graph *g, const sc_node *n, int64_t *numel) {
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (v && !sc_value_has_data(v))
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has no constant data",
                           v->name);
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *o = sc_node_output(g, n, i);
    if (!o) continue;
    int64_t m = sc_value_numel(o);
    if (m < 0 || o->dtype == SC_DTYPE_UNDEF)
      return sc_node_error(g, n, SC_ERR_INVALID, "output '%s' has no inferred shape",
                           o->name);
    if (m > SC_FOLD_MAX_ELEMENTS)
      return sc_node_error(g, n, SC_ERR_LIMIT,
                           "output '%s' has %lld elements, too many to fold", o->name,
                           (long long)m);
    if (i == 0) *numel = m;
  }
  return SC_OK;
}

static void *alloc_output(sc_graph *g, const sc_node *n, int32_t idx, sc_status *st) {
  void *p = sc_eval_output(g, n, idx);
  if (!p) *st = g->diag.status != SC_OK ? g->diag.status
                                        : sc_node_error(g, n, SC_ERR_NOMEM,
                                                        "cannot allocate output %d", idx);
  return p;
}

/* Allocates output 0 and computes it from the op's formula. */
static sc_status fold(sc_graph *g, const sc_node *n) {
  sc_status st = SC_OK;
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  return sc_ew_fold(g, n, out);
}

/* ---- cost ---- */

void sc_op_cost_elementwise(sc_graph *g, const sc_node *n, sc_cost *c) {
  double bytes = 0, per = 1;
  int32_t present = 0;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (!v) continue;
    present++;
    int64_t b = sc_value_bytes(v);
    if (b > 0) bytes += (double)b;
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    int64_t b = v ? sc_value_bytes(v) : -1;
    if (b > 0) bytes += (double)b;
  }
  switch (n->op) {
  case SC_OP_IDENTITY: case SC_OP_CAST: case SC_OP_CAST_LIKE: case SC_OP_BIT_CAST:
  case SC_OP_DROPOUT:
    per = 0;
    break;
  case SC_OP_MAX: case SC_OP_MIN: case SC_OP_SUM: case SC_OP_MEAN:
    per = present > 1 ? present - 1 : 0;
    break;
  default: break;
  }
  const sc_value *o = sc_node_output(g, n, 0);
  int64_t m = o ? sc_value_numel(o) : -1;
  c->flops = m > 0 ? per * (double)m : 0;
  c->bytes = bytes;
}

/* ---- unary ---- */

sc_status sc_op_infer_unary(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  /* Identity passes any dtype through (strings too; they are not folded) */
  if (n->op != SC_OP_IDENTITY && (st = check_type(g, n, x, row_class(n->op))) != SC_OK)
    return st;
  sc_ew_attrs a;
  if ((st = sc_ew_attrs_read(g, n, &a)) != SC_OK) return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_infer_unary_bool(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, SC_EW_FLOAT)) != SC_OK) return st;
  sc_ew_attrs a;
  if ((st = sc_ew_attrs_read(g, n, &a)) != SC_OK) return st;
  return sc_set_output(g, n, 0, SC_DTYPE_BOOL, x->rank, x->dims);
}

sc_status sc_op_eval_unary(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if (!x || sc_value_numel(x) != m)
    return sc_node_error(g, n, SC_ERR_INVALID, "output shape does not match the input");
  if (!sc_dtype_is_float(x->dtype) && row_class(n->op) == SC_EW_FLOAT)
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype %s is not floating-point",
                         sc_dtype_name(x->dtype));
  return fold(g, n);
}

/* ---- Cast, CastLike ---- */

static sc_status cast_target(sc_graph *g, const sc_node *n, sc_dtype *to) {
  if (n->op == SC_OP_CAST_LIKE) {
    const sc_value *like = sc_node_input(g, n, 1);
    *to = like->dtype;
  } else {
    const sc_attr *a = sc_node_attr(n, "to");
    if (!a) return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'to' is missing");
    if (a->kind != SC_ATTR_INT)
      return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'to' must be an int");
    sc_dtype t = a->i >= INT32_MIN && a->i <= INT32_MAX
                     ? sc_dtype_from_onnx((int32_t)a->i)
                     : SC_DTYPE_COUNT;
    if (t == SC_DTYPE_COUNT || !sc_dtype_is_numeric(t))
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "unsupported 'to' type %lld",
                           (long long)a->i);
    *to = t;
  }
  if (!sc_dtype_is_numeric(*to))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "unsupported target dtype %s",
                         sc_dtype_name(*to));
  return SC_OK;
}

sc_status sc_op_infer_cast(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if (!sc_dtype_is_numeric(x->dtype))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot cast from dtype %s",
                         sc_dtype_name(x->dtype));
  sc_dtype to;
  if ((st = cast_target(g, n, &to)) != SC_OK) return st;
  sc_ew_attrs a;
  if ((st = sc_ew_attrs_read(g, n, &a)) != SC_OK) return st;
  if (to == SC_DTYPE_F8E8M0 && !sc_dtype_is_float(x->dtype) &&
      (a.round_mode != SC_E8M0_UP || !a.saturate))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "a cast of %s to f8e8m0 rounds up and saturates (round_mode 'up', "
                         "saturate 1) only", sc_dtype_name(x->dtype));
  return sc_set_output(g, n, 0, to, x->rank, x->dims);
}

sc_status sc_op_eval_cast(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  sc_dtype to;
  if ((st = cast_target(g, n, &to)) != SC_OK) return st;
  if (to != o->dtype || sc_value_numel(x) != m || !sc_dtype_is_numeric(x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "output does not match the cast");
  return fold(g, n);
}

/* ---- BitCast (opset 26): the bytes read as another dtype of their width ---- */

static sc_status bitcast_target(sc_graph *g, const sc_node *n, sc_dtype *to) {
  const sc_value *x = sc_node_input(g, n, 0);
  sc_status st = cast_target(g, n, to);
  if (st != SC_OK) return st;
  if (!sc_dtype_is_numeric(x->dtype) && x->dtype != SC_DTYPE_BOOL)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot reinterpret dtype %s",
                         sc_dtype_name(x->dtype));
  if (sc_dtype_size(*to) != sc_dtype_size(x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "BitCast from %s to %s: the widths differ (%u and %u bytes)",
                         sc_dtype_name(x->dtype), sc_dtype_name(*to),
                         sc_dtype_size(x->dtype), sc_dtype_size(*to));
  return SC_OK;
}

sc_status sc_op_infer_bitcast(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  sc_dtype to;
  if ((st = bitcast_target(g, n, &to)) != SC_OK) return st;
  return sc_set_output(g, n, 0, to, x->rank, x->dims);
}

sc_status sc_op_eval_bitcast(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *o = sc_node_output(g, n, 0);
  sc_dtype to;
  if ((st = bitcast_target(g, n, &to)) != SC_OK) return st;
  if (to != o->dtype || sc_value_numel(x) != m)
    return sc_node_error(g, n, SC_ERR_INVALID, "output does not match the input");
  uint8_t *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  memcpy(out, x->data, (size_t)m * sc_dtype_size(to));
  if (to == SC_DTYPE_BOOL) /* a nonzero byte is true: shardc's bools are 0 and 1 */
    for (int64_t i = 0; i < m; i++) out[i] = out[i] != 0;
  return SC_OK;
}

/* ---- Clip ---- */

/* Checks Clip's bound inputs (1 and 2, opset >= 11): the input's dtype,
 * one element each. Bounds given as attributes (older opsets) are parsed by
 * sc_ew_attrs_read. */
static sc_status check_clip_bounds(sc_graph *g, const sc_node *n) {
  const sc_value *x = sc_node_input(g, n, 0);
  static const char *const names[2] = {"min", "max"};
  for (int k = 0; k < 2; k++) {
    const sc_value *b = sc_node_input(g, n, 1 + k);
    if (!b) continue;
    if (b->dtype != x->dtype)
      return sc_node_error(g, n, SC_ERR_INVALID, "'%s' bound '%s' has dtype %s, input has %s",
                           names[k], b->name, sc_dtype_name(b->dtype),
                           sc_dtype_name(x->dtype));
    if (sc_value_numel(b) != 1)
      return sc_node_error(g, n, SC_ERR_INVALID, "'%s' bound '%s' must be a scalar",
                           names[k], b->name);
  }
  return SC_OK;
}

sc_status sc_op_infer_clip(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, SC_EW_ARITH)) != SC_OK) return st;
  if ((st = check_clip_bounds(g, n)) != SC_OK) return st;
  sc_ew_attrs a;
  if ((st = sc_ew_attrs_read(g, n, &a)) != SC_OK) return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_clip(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  if ((st = check_clip_bounds(g, n)) != SC_OK) return st;
  return fold(g, n);
}

/* ---- Dropout ---- */

sc_status sc_op_infer_dropout(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, SC_EW_FLOAT)) != SC_OK) return st;
  const sc_value *ratio = sc_node_input(g, n, 1);
  const sc_value *train = sc_node_input(g, n, 2);
  if (ratio && (!sc_dtype_is_float(ratio->dtype) || sc_value_numel(ratio) != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "ratio '%s' must be a float scalar",
                         ratio->name);
  if (train && (train->dtype != SC_DTYPE_BOOL || sc_value_numel(train) != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "training_mode '%s' must be a bool scalar",
                         train->name);
  /* whether it drops anything must be known when compiling: training_mode,
   * then (in training) the ratio, are needed as constants (`shardc run`
   * specialises to given inputs); training with a ratio above 0 is random
   * and refused by the lowering */
  if (train && (st = sc_require_const(g, n, train)) != SC_OK) return st;
  if (train && sc_load_i64(train->dtype, train->data, 0) != 0 && ratio &&
      (st = sc_require_const(g, n, ratio)) != SC_OK)
    return st;
  int64_t seed;
  if ((st = sc_read_attr_int(g, n, "seed", 0, &seed)) != SC_OK) return st;
  if ((st = sc_same_as_input(g, n, 0, 0)) != SC_OK) return st;
  return sc_set_output(g, n, 1, SC_DTYPE_BOOL, x->rank, x->dims);
}

sc_status sc_op_eval_dropout(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *ratio = sc_node_input(g, n, 1);
  const sc_value *train = sc_node_input(g, n, 2);
  bool training = train && train->data && sc_load_i64(train->dtype, train->data, 0);
  double r = ratio && ratio->data ? sc_load_f64(ratio->dtype, ratio->data, 0) : 0.5;
  if (training && r != 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "training-mode Dropout is random and is not folded");
  if (sc_value_numel(x) != m)
    return sc_node_error(g, n, SC_ERR_INVALID, "output shape does not match the input");
  if ((st = fold(g, n)) != SC_OK) return st;
  if (sc_node_output(g, n, 1)) {
    uint8_t *mask = alloc_output(g, n, 1, &st);
    if (!mask) return st;
    memset(mask, 1, (size_t)m);
  }
  return SC_OK;
}

/* ---- binary ---- */

static sc_status infer_bcast2(sc_graph *g, sc_node *n, sc_dtype out_dtype) {
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  int32_t r;
  int64_t d[SC_MAX_RANK];
  sc_status st = sc_broadcast(g, n, a->rank, a->dims, b->rank, b->dims, &r, d);
  if (st != SC_OK) return st;
  return sc_set_output(g, n, 0, out_dtype, r, d);
}

static sc_status same_dtype(sc_graph *g, const sc_node *n, const sc_value *a,
                            const sc_value *b) {
  if (a->dtype != b->dtype)
    return sc_node_error(g, n, SC_ERR_INVALID, "inputs '%s' (%s) and '%s' (%s) differ in dtype",
                         a->name, sc_dtype_name(a->dtype), b->name, sc_dtype_name(b->dtype));
  return SC_OK;
}

sc_status sc_op_infer_binary(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, row_class(n->op))) != SC_OK)
    return st;
  if ((st = same_dtype(g, n, a, b)) != SC_OK) return st;
  sc_ew_attrs at;
  if ((st = sc_ew_attrs_read(g, n, &at)) != SC_OK) return st;
  if (n->op == SC_OP_PRELU) {
    /* slope broadcasts to X (unidirectionally): the output is X's shape */
    int32_t r;
    int64_t d[SC_MAX_RANK];
    if ((st = sc_broadcast(g, n, a->rank, a->dims, b->rank, b->dims, &r, d)) != SC_OK)
      return st;
    bool same = r == a->rank;
    for (int32_t i = 0; same && i < r; i++) same = d[i] == a->dims[i];
    if (!same)
      return sc_node_error(g, n, SC_ERR_INVALID, "slope '%s' does not broadcast to X '%s'",
                           b->name, a->name);
  }
  return infer_bcast2(g, n, a->dtype);
}

sc_status sc_op_infer_pow(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, SC_EW_ARITH)) != SC_OK) return st;
  if ((st = check_type(g, n, b, SC_EW_ARITH)) != SC_OK) return st;
  return infer_bcast2(g, n, a->dtype);
}

sc_status sc_op_infer_compare(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, row_class(n->op))) != SC_OK)
    return st;
  if ((st = same_dtype(g, n, a, b)) != SC_OK) return st;
  return infer_bcast2(g, n, SC_DTYPE_BOOL);
}

sc_status sc_op_infer_logical(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, SC_EW_BOOL)) != SC_OK) return st;
  if ((st = check_type(g, n, b, SC_EW_BOOL)) != SC_OK) return st;
  return infer_bcast2(g, n, SC_DTYPE_BOOL);
}

sc_status sc_op_eval_binary(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  if (!sc_node_input(g, n, 0) || !sc_node_input(g, n, 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "missing input or output");
  return fold(g, n);
}

/* ---- variadic Max, Min, Sum, Mean ---- */

sc_status sc_op_infer_variadic(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *first = NULL;
  int32_t r = 0;
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (!v) return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", i);
    if (!first) {
      first = v;
      if ((st = check_type(g, n, v, row_class(n->op))) != SC_OK)
        return st;
      r = v->rank;
      memcpy(d, v->dims, sizeof(int64_t) * (size_t)r);
      continue;
    }
    if ((st = same_dtype(g, n, first, v)) != SC_OK) return st;
    int64_t prev[SC_MAX_RANK];
    memcpy(prev, d, sizeof prev);
    if ((st = sc_broadcast(g, n, r, prev, v->rank, v->dims, &r, d)) != SC_OK) return st;
  }
  return sc_set_output(g, n, 0, first->dtype, r, d);
}

sc_status sc_op_eval_variadic(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  for (int32_t k = 0; k < n->n_inputs; k++)
    if (!sc_node_input(g, n, k))
      return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", k);
  return fold(g, n);
}

/* ---- Where ---- */

sc_status sc_op_infer_where(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *c = sc_node_input(g, n, 0), *x = sc_node_input(g, n, 1),
                 *y = sc_node_input(g, n, 2);
  if ((st = check_type(g, n, c, SC_EW_BOOL)) != SC_OK) return st;
  if ((st = check_type(g, n, x, SC_EW_ANY)) != SC_OK) return st;
  if ((st = same_dtype(g, n, x, y)) != SC_OK) return st;
  int32_t r1, r;
  int64_t d1[SC_MAX_RANK], d[SC_MAX_RANK];
  if ((st = sc_broadcast(g, n, c->rank, c->dims, x->rank, x->dims, &r1, d1)) != SC_OK)
    return st;
  if ((st = sc_broadcast(g, n, r1, d1, y->rank, y->dims, &r, d)) != SC_OK) return st;
  return sc_set_output(g, n, 0, x->dtype, r, d);
}

sc_status sc_op_eval_where(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *c = sc_node_input(g, n, 0), *x = sc_node_input(g, n, 1),
                 *y = sc_node_input(g, n, 2);
  const sc_value *o = sc_node_output(g, n, 0);
  if (!c || !x || !y || sc_dtype_size(o->dtype) == 0 || x->dtype != o->dtype ||
      y->dtype != o->dtype)
    return sc_node_error(g, n, SC_ERR_INVALID, "inputs do not match the output");
  return fold(g, n);
}
