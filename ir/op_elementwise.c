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
 * Evaluation follows ONNX semantics for every numeric dtype: floating-point
 * types are computed in double and rounded on store; integer types are
 * computed in 64-bit integer arithmetic (wrapping, never through double), so
 * int64 shape arithmetic is exact. Integer Div truncates toward zero; Mod
 * follows the 'fmod' attribute (0: sign of the divisor, 1: C fmod); Round is
 * half-to-even; Max/Min propagate NaN. Integer division by zero is reported
 * as an error rather than evaluated. Eval runs only after infer succeeded;
 * it still checks that inputs have data and that outputs are small enough
 * (SC_FOLD_MAX_ELEMENTS) and returns an error instead of crashing.
 * Training-mode Dropout (random) is never evaluated. */
#include <math.h>
#include <string.h>

#include "op_util.h"

/* ---- shared helpers ---- */

static bool is_arith(sc_dtype t) { return sc_dtype_is_float(t) || sc_dtype_is_int(t); }

/* Type classes an op accepts for its main inputs. */
typedef enum tclass { TC_ANY, TC_ARITH, TC_SIGNED, TC_FLOAT, TC_BOOL } tclass;

static sc_status check_type(sc_graph *g, const sc_node *n, const sc_value *v,
                            tclass c) {
  bool ok;
  const char *want;
  switch (c) {
  case TC_ARITH: ok = is_arith(v->dtype); want = "a numeric"; break;
  case TC_SIGNED:
    ok = sc_dtype_is_float(v->dtype) || sc_dtype_is_signed(v->dtype);
    want = "a signed numeric";
    break;
  case TC_FLOAT: ok = sc_dtype_is_float(v->dtype); want = "a floating-point"; break;
  case TC_BOOL: ok = v->dtype == SC_DTYPE_BOOL; want = "a bool"; break;
  default:
    ok = sc_dtype_is_numeric(v->dtype);
    want = "a numeric or bool";
    break;
  }
  if (!ok)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has dtype %s; expects %s type",
                         v->name, sc_dtype_name(v->dtype), want);
  return SC_OK;
}

static sc_status attr_bool01(sc_graph *g, const sc_node *n, const char *name,
                             int64_t dflt, int64_t *out) {
  sc_status st = sc_read_attr_int(g, n, name, dflt, out);
  if (st != SC_OK) return st;
  if (*out != 0 && *out != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be 0 or 1, not %lld",
                         name, (long long)*out);
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

/* Offset of output element idx in an input broadcast to the output shape. */
static int64_t in_off(const sc_value *out, const int64_t *idx, const sc_value *in) {
  return sc_bcast_offset(out->rank, idx, in->rank, in->dims);
}

/* Wrapping 64-bit integer arithmetic (no undefined behaviour). */
static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static int64_t wneg(int64_t a) { return (int64_t)(0 - (uint64_t)a); }

/* Integer less-than respecting U64's unsignedness. */
static bool ilt(sc_dtype t, int64_t a, int64_t b) {
  return t == SC_DTYPE_U64 ? (uint64_t)a < (uint64_t)b : a < b;
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
  case SC_OP_IDENTITY: case SC_OP_CAST: case SC_OP_CAST_LIKE: case SC_OP_DROPOUT:
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

static tclass unary_class(sc_op op) {
  switch (op) {
  case SC_OP_ABS: case SC_OP_RELU: case SC_OP_SIGN: return TC_ARITH;
  case SC_OP_NEG: return TC_SIGNED;
  case SC_OP_NOT: return TC_BOOL;
  case SC_OP_IDENTITY: return TC_ANY;
  default: return TC_FLOAT;
  }
}

static sc_status check_unary_attrs(sc_graph *g, const sc_node *n) {
  double f;
  int64_t i;
  sc_status st = SC_OK;
  switch (n->op) {
  case SC_OP_HARD_SIGMOID:
    st = sc_read_attr_float(g, n, "alpha", 0.2, &f);
    if (st == SC_OK) st = sc_read_attr_float(g, n, "beta", 0.5, &f);
    break;
  case SC_OP_LEAKY_RELU: st = sc_read_attr_float(g, n, "alpha", 0.01, &f); break;
  case SC_OP_ELU: st = sc_read_attr_float(g, n, "alpha", 1.0, &f); break;
  case SC_OP_SELU:
    st = sc_read_attr_float(g, n, "alpha", 1.67326319217681884765625, &f);
    if (st == SC_OK) st = sc_read_attr_float(g, n, "gamma", 1.05070102214813232421875, &f);
    break;
  case SC_OP_IS_INF:
    st = attr_bool01(g, n, "detect_negative", 1, &i);
    if (st == SC_OK) st = attr_bool01(g, n, "detect_positive", 1, &i);
    break;
  case SC_OP_GELU: {
    const sc_attr *a = sc_node_attr(n, "approximate");
    if (a && a->kind != SC_ATTR_STRING)
      return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'approximate' must be a string");
    if (a && strcmp(a->s, "none") != 0 && strcmp(a->s, "tanh") != 0)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "attribute 'approximate' is '%s' (expects \"none\" or \"tanh\")",
                           a->s);
    break;
  }
  default: break;
  }
  return st;
}

sc_status sc_op_infer_unary(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  /* Identity passes any dtype through (strings too; they are not folded) */
  if (n->op != SC_OP_IDENTITY && (st = check_type(g, n, x, unary_class(n->op))) != SC_OK)
    return st;
  if ((st = check_unary_attrs(g, n)) != SC_OK) return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_infer_unary_bool(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, TC_FLOAT)) != SC_OK) return st;
  if ((st = check_unary_attrs(g, n)) != SC_OK) return st;
  return sc_set_output(g, n, 0, SC_DTYPE_BOOL, x->rank, x->dims);
}

static double softplus(double x) {
  return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x));
}

typedef struct unary_params {
  double alpha, beta, gamma;
  bool gelu_tanh, inf_neg, inf_pos;
} unary_params;

static double unary_f(sc_op op, const unary_params *p, double x) {
  switch (op) {
  case SC_OP_ABS: return fabs(x);
  case SC_OP_NEG: return -x;
  case SC_OP_EXP: return exp(x);
  case SC_OP_LOG: return log(x);
  case SC_OP_SQRT: return sqrt(x);
  case SC_OP_RECIPROCAL: return 1.0 / x;
  case SC_OP_RELU: return x < 0 ? 0.0 : x; /* keeps NaN */
  case SC_OP_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
  case SC_OP_TANH: return tanh(x);
  case SC_OP_ERF: return erf(x);
  case SC_OP_SIN: return sin(x);
  case SC_OP_COS: return cos(x);
  case SC_OP_FLOOR: return floor(x);
  case SC_OP_CEIL: return ceil(x);
  case SC_OP_ROUND: return nearbyint(x); /* default mode: half to even */
  case SC_OP_SIGN: return isnan(x) ? x : (x > 0) - (x < 0);
  case SC_OP_SOFTPLUS: return softplus(x);
  case SC_OP_HARD_SIGMOID: return fmax(0.0, fmin(1.0, p->alpha * x + p->beta));
  case SC_OP_HARD_SWISH: return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
  case SC_OP_LEAKY_RELU: return x < 0 ? p->alpha * x : x;
  case SC_OP_ELU: return x < 0 ? p->alpha * (exp(x) - 1.0) : x;
  case SC_OP_SELU: return x <= 0 ? p->gamma * (p->alpha * exp(x) - p->alpha) : p->gamma * x;
  case SC_OP_MISH: return x * tanh(softplus(x));
  case SC_OP_GELU:
    if (p->gelu_tanh)
      return 0.5 * x *
             (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  case SC_OP_IS_NAN: return isnan(x) ? 1 : 0;
  case SC_OP_IS_INF:
    return isinf(x) && ((x > 0 && p->inf_pos) || (x < 0 && p->inf_neg)) ? 1 : 0;
  default: SC_ASSERT(!"not a float unary op"); return 0;
  }
}

/* Integer (and bool) unary ops: Abs, Neg, Relu, Sign, Not. */
static int64_t unary_i(sc_op op, sc_dtype t, int64_t x) {
  bool neg = t != SC_DTYPE_U64 && x < 0;
  switch (op) {
  case SC_OP_ABS: return neg ? wneg(x) : x;
  case SC_OP_NEG: return wneg(x);
  case SC_OP_RELU: return neg ? 0 : x;
  case SC_OP_SIGN: return neg ? -1 : x != 0;
  case SC_OP_NOT: return !x;
  default: SC_ASSERT(!"not an integer unary op"); return 0;
  }
}

sc_status sc_op_eval_unary(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  if (!x || !o || sc_value_numel(x) != m)
    return sc_node_error(g, n, SC_ERR_INVALID, "output shape does not match the input");
  if (n->op == SC_OP_IDENTITY) {
    if (sc_dtype_size(x->dtype) == 0 || x->dtype != o->dtype)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot fold dtype %s",
                           sc_dtype_name(x->dtype));
    void *out = alloc_output(g, n, 0, &st);
    if (!out) return st;
    if (m) memcpy(out, x->data, (size_t)sc_value_bytes(x));
    return SC_OK;
  }
  unary_params p = {0};
  int64_t dn = 1, dp = 1;
  switch (n->op) {
  case SC_OP_HARD_SIGMOID:
    sc_read_attr_float(g, n, "alpha", 0.2, &p.alpha);
    sc_read_attr_float(g, n, "beta", 0.5, &p.beta);
    break;
  case SC_OP_LEAKY_RELU: sc_read_attr_float(g, n, "alpha", 0.01, &p.alpha); break;
  case SC_OP_ELU: sc_read_attr_float(g, n, "alpha", 1.0, &p.alpha); break;
  case SC_OP_SELU:
    sc_read_attr_float(g, n, "alpha", 1.67326319217681884765625, &p.alpha);
    sc_read_attr_float(g, n, "gamma", 1.05070102214813232421875, &p.gamma);
    break;
  case SC_OP_IS_INF:
    sc_read_attr_int(g, n, "detect_negative", 1, &dn);
    sc_read_attr_int(g, n, "detect_positive", 1, &dp);
    break;
  case SC_OP_GELU: {
    const sc_attr *a = sc_node_attr(n, "approximate");
    p.gelu_tanh = a && a->kind == SC_ATTR_STRING && strcmp(a->s, "tanh") == 0;
    break;
  }
  default: break;
  }
  p.inf_neg = dn != 0;
  p.inf_pos = dp != 0;
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  bool int_path = !sc_dtype_is_float(x->dtype);
  if (int_path && unary_class(n->op) == TC_FLOAT)
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype %s is not floating-point",
                         sc_dtype_name(x->dtype));
  for (int64_t i = 0; i < m; i++) {
    if (int_path)
      sc_store_i64(o->dtype, out, i, unary_i(n->op, x->dtype, sc_load_i64(x->dtype, x->data, i)));
    else
      sc_store_f64(o->dtype, out, i, unary_f(n->op, &p, sc_load_f64(x->dtype, x->data, i)));
  }
  return SC_OK;
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
  int64_t sat;
  if ((st = sc_read_attr_int(g, n, "saturate", 1, &sat)) != SC_OK) return st;
  sc_dtype to;
  if ((st = cast_target(g, n, &to)) != SC_OK) return st;
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
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  bool src_float = sc_dtype_is_float(x->dtype) || x->dtype == SC_DTYPE_U64;
  for (int64_t i = 0; i < m; i++) {
    if (src_float) {
      sc_store_f64(to, out, i, sc_load_f64(x->dtype, x->data, i));
    } else {
      int64_t v = sc_load_i64(x->dtype, x->data, i);
      if (to == SC_DTYPE_F32)
        ((float *)out)[i] = (float)v; /* one rounding, not two through double */
      else
        sc_store_i64(to, out, i, v);
    }
  }
  return SC_OK;
}

/* ---- Clip ---- */

/* Reads Clip's bounds: inputs 1 and 2 (opset >= 11) or the 'min'/'max'
 * attributes (older opsets). *has_* false when a bound is absent. */
static sc_status clip_bounds(sc_graph *g, const sc_node *n, bool need_data, bool *has_lo,
                             double *lo_f, int64_t *lo_i, bool *has_hi, double *hi_f,
                             int64_t *hi_i) {
  const sc_value *x = sc_node_input(g, n, 0);
  bool *has[2] = {has_lo, has_hi};
  double *fv[2] = {lo_f, hi_f};
  int64_t *iv[2] = {lo_i, hi_i};
  const char *attr_names[2] = {"min", "max"};
  for (int k = 0; k < 2; k++) {
    *has[k] = false;
    const sc_value *b = sc_node_input(g, n, 1 + k);
    const sc_attr *a = sc_node_attr(n, attr_names[k]);
    if (b) {
      if (b->dtype != x->dtype)
        return sc_node_error(g, n, SC_ERR_INVALID, "'%s' bound '%s' has dtype %s, input has %s",
                             attr_names[k], b->name, sc_dtype_name(b->dtype),
                             sc_dtype_name(x->dtype));
      if (sc_value_numel(b) != 1)
        return sc_node_error(g, n, SC_ERR_INVALID, "'%s' bound '%s' must be a scalar",
                             attr_names[k], b->name);
      if (need_data) {
        if (!sc_value_has_data(b))
          return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has no constant data",
                               b->name);
        *fv[k] = sc_load_f64(b->dtype, b->data, 0);
        *iv[k] = sc_load_i64(b->dtype, b->data, 0);
      }
      *has[k] = true;
    } else if (a && n->n_inputs == 1) {
      if (a->kind != SC_ATTR_FLOAT)
        return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be a float",
                             attr_names[k]);
      *fv[k] = a->f;
      *iv[k] = (int64_t)a->f;
      *has[k] = true;
    }
  }
  return SC_OK;
}

sc_status sc_op_infer_clip(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, TC_ARITH)) != SC_OK) return st;
  bool hl, hh;
  double lf, hf;
  int64_t li, hi;
  if ((st = clip_bounds(g, n, false, &hl, &lf, &li, &hh, &hf, &hi)) != SC_OK) return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_clip(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  const sc_value *o = sc_node_output(g, n, 0);
  bool hl, hh;
  double lf = 0, hf = 0;
  int64_t li = 0, hi = 0;
  if ((st = clip_bounds(g, n, true, &hl, &lf, &li, &hh, &hf, &hi)) != SC_OK) return st;
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  bool fl = sc_dtype_is_float(x->dtype);
  for (int64_t i = 0; i < m; i++) {
    if (fl) {
      double v = sc_load_f64(x->dtype, x->data, i); /* NaN stays NaN */
      if (hl && v < lf) v = lf;
      if (hh && v > hf) v = hf;
      sc_store_f64(o->dtype, out, i, v);
    } else {
      int64_t v = sc_load_i64(x->dtype, x->data, i);
      if (hl && ilt(x->dtype, v, li)) v = li;
      if (hh && ilt(x->dtype, hi, v)) v = hi;
      sc_store_i64(o->dtype, out, i, v);
    }
  }
  return SC_OK;
}

/* ---- Dropout ---- */

sc_status sc_op_infer_dropout(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = check_type(g, n, x, TC_FLOAT)) != SC_OK) return st;
  const sc_value *ratio = sc_node_input(g, n, 1);
  const sc_value *train = sc_node_input(g, n, 2);
  if (ratio && (!sc_dtype_is_float(ratio->dtype) || sc_value_numel(ratio) != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "ratio '%s' must be a float scalar",
                         ratio->name);
  if (train && (train->dtype != SC_DTYPE_BOOL || sc_value_numel(train) != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "training_mode '%s' must be a bool scalar",
                         train->name);
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
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  if (m) memcpy(out, x->data, (size_t)sc_value_bytes(x));
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
  if ((st = check_type(g, n, a, n->op == SC_OP_PRELU ? TC_SIGNED : TC_ARITH)) != SC_OK)
    return st;
  if ((st = same_dtype(g, n, a, b)) != SC_OK) return st;
  if (n->op == SC_OP_MOD) {
    int64_t fm;
    if ((st = attr_bool01(g, n, "fmod", 0, &fm)) != SC_OK) return st;
    if (fm == 0 && sc_dtype_is_float(a->dtype))
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "floating-point Mod needs attribute fmod=1");
  }
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
  if ((st = check_type(g, n, a, TC_ARITH)) != SC_OK) return st;
  if ((st = check_type(g, n, b, TC_ARITH)) != SC_OK) return st;
  return infer_bcast2(g, n, a->dtype);
}

sc_status sc_op_infer_compare(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, n->op == SC_OP_EQUAL ? TC_ANY : TC_ARITH)) != SC_OK)
    return st;
  if ((st = same_dtype(g, n, a, b)) != SC_OK) return st;
  return infer_bcast2(g, n, SC_DTYPE_BOOL);
}

sc_status sc_op_infer_logical(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if ((st = check_type(g, n, a, TC_BOOL)) != SC_OK) return st;
  if ((st = check_type(g, n, b, TC_BOOL)) != SC_OK) return st;
  return infer_bcast2(g, n, SC_DTYPE_BOOL);
}

/* Integer power by squaring, wrapping; exponent < 0 per integer truncation
 * of 1 / base^-e. Error only for 0 to a negative power. */
static bool ipow(int64_t b, int64_t e, int64_t *out) {
  if (e < 0) {
    if (b == 0) return false;
    *out = b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    return true;
  }
  int64_t r = 1;
  while (e) {
    if (e & 1) r = wmul(r, b);
    b = wmul(b, b);
    e >>= 1;
  }
  *out = r;
  return true;
}

/* One element of an integer binary op; false on division by zero. */
static bool binary_i(sc_op op, sc_dtype t, bool fmod_mode, int64_t a, int64_t b,
                     int64_t *r) {
  bool u = t == SC_DTYPE_U64;
  switch (op) {
  case SC_OP_ADD: *r = wadd(a, b); return true;
  case SC_OP_SUB: *r = wsub(a, b); return true;
  case SC_OP_MUL: *r = wmul(a, b); return true;
  case SC_OP_PRELU: *r = a < 0 ? wmul(a, b) : a; return true;
  case SC_OP_DIV:
    if (b == 0) return false;
    if (u) *r = (int64_t)((uint64_t)a / (uint64_t)b);
    else *r = (b == -1) ? wneg(a) : a / b; /* C truncation toward zero */
    return true;
  case SC_OP_MOD: {
    if (b == 0) return false;
    if (u) { *r = (int64_t)((uint64_t)a % (uint64_t)b); return true; }
    int64_t m = b == -1 ? 0 : a % b; /* sign of the dividend */
    if (!fmod_mode && m != 0 && ((m < 0) != (b < 0))) m += b; /* sign of divisor */
    *r = m;
    return true;
  }
  case SC_OP_POW: return ipow(a, b, r);
  case SC_OP_EQUAL: *r = a == b; return true;
  case SC_OP_LESS: *r = ilt(t, a, b); return true;
  case SC_OP_LESS_EQUAL: *r = !ilt(t, b, a); return true;
  case SC_OP_GREATER: *r = ilt(t, b, a); return true;
  case SC_OP_GREATER_EQUAL: *r = !ilt(t, a, b); return true;
  case SC_OP_AND: *r = a && b; return true;
  case SC_OP_OR: *r = a || b; return true;
  case SC_OP_XOR: *r = (a != 0) != (b != 0); return true;
  default: SC_ASSERT(!"not a binary op"); return false;
  }
}

static double binary_f(sc_op op, bool fmod_mode, double a, double b) {
  switch (op) {
  case SC_OP_ADD: return a + b;
  case SC_OP_SUB: return a - b;
  case SC_OP_MUL: return a * b;
  case SC_OP_DIV: return a / b;
  case SC_OP_PRELU: return a < 0 ? a * b : a;
  case SC_OP_MOD: {
    double m = fmod(a, b);
    if (!fmod_mode && m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
  }
  case SC_OP_POW: return pow(a, b);
  case SC_OP_EQUAL: return a == b;
  case SC_OP_LESS: return a < b;
  case SC_OP_LESS_EQUAL: return a <= b;
  case SC_OP_GREATER: return a > b;
  case SC_OP_GREATER_EQUAL: return a >= b;
  default: SC_ASSERT(!"not a float binary op"); return 0;
  }
}

sc_status sc_op_eval_binary(sc_graph *g, sc_node *n) {
  int64_t m = 0;
  sc_status st = eval_check(g, n, &m);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  const sc_value *o = sc_node_output(g, n, 0);
  if (!a || !b || !o) return sc_node_error(g, n, SC_ERR_INVALID, "missing input or output");
  int64_t fm = 0;
  if (n->op == SC_OP_MOD && (st = sc_read_attr_int(g, n, "fmod", 0, &fm)) != SC_OK) return st;
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  /* integer path when the operands are integers or bools: for Pow, both */
  bool int_path = !sc_dtype_is_float(a->dtype) &&
                  (n->op != SC_OP_POW || !sc_dtype_is_float(b->dtype));
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < m; i++) {
    int64_t ia = in_off(o, idx, a), ib = in_off(o, idx, b);
    if (int_path) {
      int64_t r;
      if (!binary_i(n->op, a->dtype, fm != 0, sc_load_i64(a->dtype, a->data, ia),
                    sc_load_i64(b->dtype, b->data, ib), &r))
        return sc_node_error(g, n, SC_ERR_INVALID, "integer %s by zero",
                             n->op == SC_OP_POW ? "power of zero" : "division");
      sc_store_i64(o->dtype, out, i, r);
    } else {
      double r = binary_f(n->op, fm != 0, sc_load_f64(a->dtype, a->data, ia),
                          sc_load_f64(b->dtype, b->data, ib));
      sc_store_f64(o->dtype, out, i, r);
    }
    sc_next_index(o->rank, o->dims, idx);
  }
  return SC_OK;
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
      if ((st = check_type(g, n, v, n->op == SC_OP_MEAN ? TC_FLOAT : TC_ARITH)) != SC_OK)
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
  const sc_value *o = sc_node_output(g, n, 0);
  for (int32_t k = 0; k < n->n_inputs; k++)
    if (!sc_node_input(g, n, k))
      return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", k);
  void *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  sc_dtype t = o->dtype;
  bool fl = sc_dtype_is_float(t);
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < m; i++) {
    double af = 0;
    int64_t ai = 0;
    for (int32_t k = 0; k < n->n_inputs; k++) {
      const sc_value *v = sc_node_input(g, n, k);
      int64_t off = in_off(o, idx, v);
      if (fl) {
        double x = sc_load_f64(v->dtype, v->data, off);
        if (k == 0) af = x;
        else if (n->op == SC_OP_MAX) af = isnan(af) || isnan(x) ? NAN : (x > af ? x : af);
        else if (n->op == SC_OP_MIN) af = isnan(af) || isnan(x) ? NAN : (x < af ? x : af);
        else af += x;
      } else {
        int64_t x = sc_load_i64(v->dtype, v->data, off);
        if (k == 0) ai = x;
        else if (n->op == SC_OP_MAX) ai = ilt(t, ai, x) ? x : ai;
        else if (n->op == SC_OP_MIN) ai = ilt(t, x, ai) ? x : ai;
        else ai = wadd(ai, x);
      }
    }
    if (fl) {
      if (n->op == SC_OP_MEAN) af /= n->n_inputs;
      sc_store_f64(t, out, i, af);
    } else {
      sc_store_i64(t, out, i, ai);
    }
    sc_next_index(o->rank, o->dims, idx);
  }
  return SC_OK;
}

/* ---- Where ---- */

sc_status sc_op_infer_where(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *c = sc_node_input(g, n, 0), *x = sc_node_input(g, n, 1),
                 *y = sc_node_input(g, n, 2);
  if ((st = check_type(g, n, c, TC_BOOL)) != SC_OK) return st;
  if ((st = check_type(g, n, x, TC_ANY)) != SC_OK) return st;
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
  size_t es = sc_dtype_size(o->dtype);
  if (!c || !x || !y || es == 0 || x->dtype != o->dtype || y->dtype != o->dtype)
    return sc_node_error(g, n, SC_ERR_INVALID, "inputs do not match the output");
  uint8_t *out = alloc_output(g, n, 0, &st);
  if (!out) return st;
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < m; i++) {
    bool take_x = sc_load_i64(c->dtype, c->data, in_off(o, idx, c)) != 0;
    const sc_value *src = take_x ? x : y;
    int64_t off = in_off(o, idx, src);
    memcpy(out + (size_t)i * es, (const uint8_t *)src->data + (size_t)off * es, es);
    sc_next_index(o->rank, o->dims, idx);
  }
  return SC_OK;
}
