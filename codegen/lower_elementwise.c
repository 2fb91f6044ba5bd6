/* lower_elementwise.c — POINT lowerings of the elementwise family (E of
 * ops.def) and of the views (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity).
 *
 * Each lowering gives the value of an output element as a kir expression of
 * its inputs read at the broadcast index, and matches the op's constant
 * evaluation in ir/op_elementwise.c (the tests compare the two):
 *   - integer Div truncates (kir DIV); Mod with fmod=0 takes the sign of the
 *     divisor: r = a % b (C remainder), then r + b where r != 0 and the
 *     signs of r and b differ;
 *   - Pow: floats in the base's dtype (the exponent cast to it); an integer
 *     base with a float exponent goes through f64 and back (Cast rules);
 *     integer ** integer is kir's integer power;
 *   - Sign keeps NaN; Relu keeps NaN (x < 0 ? 0 : x); Round is half to even;
 *   - Softplus, Elu, Selu use log1p / expm1 built from log and exp with the
 *     Goldberg/Kahan correction, so small arguments keep full precision;
 *   - HardSigmoid follows C's fmin/fmax as the evaluator does (NaN → 1).
 * Views: out index → row-major offset → input index (div/mod); when the
 * dims other than 1 agree in order (Squeeze, Unsqueeze, Identity, most
 * Flattens of leading 1s) the index maps straight through. */
#include <math.h>
#include <string.h>

#include "codegen/lower_internal.h"

#define UN(op, a) sc_lower_un(cx, KIR_##op, (a))
#define BIN(op, a, b) sc_lower_bin(cx, KIR_##op, (a), (b))
#define SEL(c, a, b) sc_lower_sel(cx, (c), (a), (b))
#define C(t, v) sc_lower_const(cx, (t), (v))

static const sc_value *in_val(sc_lower_ctx *cx, const sc_node *n, int32_t i) {
  return sc_node_input(cx->g, n, i);
}
static const sc_value *out_val(sc_lower_ctx *cx, const sc_node *n, int32_t i) {
  return sc_node_output(cx->g, n, i);
}

/* Input i of n at the output index idx, broadcast (numpy rules). */
static int32_t bcast_in(sc_lower_ctx *cx, const sc_node *n, int32_t i, const int32_t *idx) {
  const sc_value *o = out_val(cx, n, 0), *v = in_val(cx, n, i);
  if (!v) {
    sc_lower_error(cx, n, SC_ERR_INVALID, "input %d is omitted", i);
    return -1;
  }
  int32_t j[SC_MAX_RANK];
  sc_lower_bcast_index(cx, o->rank, idx, v->rank, v->dims, j);
  return sc_lower_value_at(cx, n->inputs[i], j);
}

/* Scalar input i (any rank, one element). */
static int32_t scalar_in(sc_lower_ctx *cx, const sc_node *n, int32_t i) {
  const sc_value *v = in_val(cx, n, i);
  int32_t z[SC_MAX_RANK];
  for (int32_t d = 0; d < v->rank; d++) z[d] = sc_lower_i64(cx, 0);
  return sc_lower_value_at(cx, n->inputs[i], z);
}

static double fattr(sc_lower_ctx *cx, const sc_node *n, const char *name, double dflt) {
  return sc_attr_float(cx->g, n, name, dflt);
}

/* log1p(u) for u >= 0 without losing small u: w = 1 + u; u when w == 1,
 * else log(w) * u / (w - 1). */
static int32_t log1p_e(sc_lower_ctx *cx, sc_dtype t, int32_t u) {
  int32_t w = BIN(ADD, C(t, 1), u);
  int32_t wm1 = BIN(SUB, w, C(t, 1));
  int32_t r = BIN(DIV, BIN(MUL, UN(LOG, w), u), wm1);
  return SEL(BIN(EQ, w, C(t, 1)), u, r);
}

/* expm1(x): u = exp(x); x when u == 1, -1 when u - 1 == -1, else
 * (u - 1) * x / log(u). */
static int32_t expm1_e(sc_lower_ctx *cx, sc_dtype t, int32_t x) {
  int32_t u = UN(EXP, x);
  int32_t um1 = BIN(SUB, u, C(t, 1));
  int32_t r = BIN(DIV, BIN(MUL, um1, x), UN(LOG, u));
  return SEL(BIN(EQ, u, C(t, 1)), x, SEL(BIN(EQ, um1, C(t, -1)), C(t, -1), r));
}

/* softplus(x) = max(x, 0) + log1p(exp(-|x|)) (NaN propagates). */
static int32_t softplus_e(sc_lower_ctx *cx, sc_dtype t, int32_t x) {
  return BIN(ADD, BIN(MAX, x, C(t, 0)), log1p_e(cx, t, UN(EXP, UN(NEG, UN(ABS, x)))));
}

/* ---- unary ---- */

static int32_t unary_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  (void)out;
  int32_t x = sc_lower_input_at(cx, n, 0, idx);
  if (x < 0) return -1;
  sc_dtype t = in_val(cx, n, 0)->dtype;
  bool fl = sc_dtype_is_float(t), sgn = fl || sc_dtype_is_signed(t);
  switch (n->op) {
  case SC_OP_ABS: return fl ? UN(ABS, x) : sgn ? SEL(BIN(LT, x, C(t, 0)), UN(NEG, x), x) : x;
  case SC_OP_NEG: return UN(NEG, x);
  case SC_OP_EXP: return UN(EXP, x);
  case SC_OP_LOG: return UN(LOG, x);
  case SC_OP_SQRT: return UN(SQRT, x);
  case SC_OP_RECIPROCAL: return UN(RECIP, x);
  case SC_OP_RELU: return sgn ? SEL(BIN(LT, x, C(t, 0)), C(t, 0), x) : x;
  case SC_OP_SIGMOID: return UN(SIGMOID, x);
  case SC_OP_TANH: return UN(TANH, x);
  case SC_OP_ERF: return UN(ERF, x);
  case SC_OP_SIN: return UN(SIN, x);
  case SC_OP_COS: return UN(COS, x);
  case SC_OP_FLOOR: return UN(FLOOR, x);
  case SC_OP_CEIL: return UN(CEIL, x);
  case SC_OP_ROUND: return UN(ROUND, x);
  case SC_OP_SIGN: {
    int32_t zero = fl ? SEL(UN(ISNAN, x), x, C(t, 0)) : C(t, 0);
    int32_t neg = sgn ? SEL(BIN(LT, x, C(t, 0)), C(t, -1), zero) : zero;
    return SEL(BIN(GT, x, C(t, 0)), C(t, 1), neg);
  }
  case SC_OP_NOT: return UN(NOT, x);
  case SC_OP_SOFTPLUS: return softplus_e(cx, t, x);
  case SC_OP_HARD_SIGMOID: {
    int32_t y = BIN(ADD, BIN(MUL, C(t, fattr(cx, n, "alpha", 0.2)), x),
                    C(t, fattr(cx, n, "beta", 0.5)));
    /* fmax(0, fmin(1, y)): fmin ignores a NaN operand, giving 1 */
    return SEL(UN(ISNAN, y), C(t, 1), BIN(MAX, C(t, 0), BIN(MIN, C(t, 1), y)));
  }
  case SC_OP_HARD_SWISH: {
    int32_t y = BIN(ADD, BIN(DIV, x, C(t, 6)), C(t, 0.5));
    return BIN(MUL, x, BIN(MAX, C(t, 0), BIN(MIN, C(t, 1), y)));
  }
  case SC_OP_LEAKY_RELU:
    return SEL(BIN(LT, x, C(t, 0)), BIN(MUL, C(t, fattr(cx, n, "alpha", 0.01)), x), x);
  case SC_OP_ELU:
    return SEL(BIN(LT, x, C(t, 0)),
               BIN(MUL, C(t, fattr(cx, n, "alpha", 1.0)), expm1_e(cx, t, x)), x);
  case SC_OP_SELU: {
    double alpha = fattr(cx, n, "alpha", 1.67326319217681884765625);
    double gamma = fattr(cx, n, "gamma", 1.05070102214813232421875);
    int32_t neg = BIN(MUL, C(t, gamma), BIN(MUL, C(t, alpha), expm1_e(cx, t, x)));
    return SEL(BIN(LE, x, C(t, 0)), neg, BIN(MUL, C(t, gamma), x));
  }
  case SC_OP_MISH: return BIN(MUL, x, UN(TANH, softplus_e(cx, t, x)));
  case SC_OP_GELU: {
    const sc_attr *a = sc_node_attr(n, "approximate");
    bool tanh_mode = a && a->kind == SC_ATTR_STRING && a->s && strcmp(a->s, "tanh") == 0;
    int32_t inner;
    if (tanh_mode) {
      int32_t x3 = BIN(MUL, BIN(MUL, x, x), x);
      int32_t arg = BIN(MUL, C(t, sqrt(2.0 / M_PI)), BIN(ADD, x, BIN(MUL, C(t, 0.044715), x3)));
      inner = UN(TANH, arg);
    } else {
      inner = UN(ERF, BIN(DIV, x, C(t, sqrt(2.0))));
    }
    return BIN(MUL, BIN(MUL, C(t, 0.5), x), BIN(ADD, C(t, 1), inner));
  }
  case SC_OP_IS_NAN: return UN(ISNAN, x);
  case SC_OP_IS_INF: {
    bool neg = sc_attr_int(cx->g, n, "detect_negative", 1) != 0;
    bool pos = sc_attr_int(cx->g, n, "detect_positive", 1) != 0;
    int32_t inf = UN(ISINF, x);
    if (neg && pos) return inf;
    if (pos) return BIN(AND, inf, BIN(GT, x, C(t, 0)));
    if (neg) return BIN(AND, inf, BIN(LT, x, C(t, 0)));
    return C(SC_DTYPE_BOOL, 0);
  }
  default:
    sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "no unary lowering for this op");
    return -1;
  }
}

const sc_lowering sc_lw_unary = {SC_LOWER_POINT, unary_point, NULL};

/* ---- binary ---- */

static int32_t binary_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                            const int32_t *idx) {
  (void)out;
  int32_t a = bcast_in(cx, n, 0, idx), b = bcast_in(cx, n, 1, idx);
  if (a < 0 || b < 0) return -1;
  sc_dtype ta = in_val(cx, n, 0)->dtype, tb = in_val(cx, n, 1)->dtype;
  bool fl = sc_dtype_is_float(ta);
  switch (n->op) {
  case SC_OP_ADD: return BIN(ADD, a, b);
  case SC_OP_SUB: return BIN(SUB, a, b);
  case SC_OP_MUL: return BIN(MUL, a, b);
  case SC_OP_DIV: return BIN(DIV, a, b);
  case SC_OP_PRELU: return SEL(BIN(LT, a, C(ta, 0)), BIN(MUL, a, b), a);
  case SC_OP_POW:
    if (fl) return BIN(POW, a, sc_lower_cast(cx, ta, b));
    if (sc_dtype_is_float(tb)) {
      int32_t r = BIN(POW, sc_lower_cast(cx, SC_DTYPE_F64, a), sc_lower_cast(cx, SC_DTYPE_F64, b));
      return sc_lower_cast(cx, ta, r);
    }
    /* integer ** integer: the exponent's value in the base's dtype (the
     * evaluator reads both as int64) */
    return BIN(POW, a, sc_lower_cast(cx, ta, b));
  case SC_OP_MOD: {
    int32_t r = BIN(MOD, a, b);
    bool fmod_mode = sc_attr_int(cx->g, n, "fmod", 0) != 0;
    if (fmod_mode || !sc_dtype_is_signed(ta)) return r;
    int32_t differ = BIN(XOR, BIN(LT, r, C(ta, 0)), BIN(LT, b, C(ta, 0)));
    return SEL(BIN(AND, BIN(NE, r, C(ta, 0)), differ), BIN(ADD, r, b), r);
  }
  case SC_OP_EQUAL: return BIN(EQ, a, b);
  case SC_OP_LESS: return BIN(LT, a, b);
  case SC_OP_LESS_EQUAL: return BIN(LE, a, b);
  case SC_OP_GREATER: return BIN(GT, a, b);
  case SC_OP_GREATER_EQUAL: return BIN(GE, a, b);
  case SC_OP_AND: return BIN(AND, a, b);
  case SC_OP_OR: return BIN(OR, a, b);
  case SC_OP_XOR: return BIN(XOR, a, b);
  default:
    sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "no binary lowering for this op");
    return -1;
  }
}

const sc_lowering sc_lw_binary = {SC_LOWER_POINT, binary_point, NULL};

/* ---- variadic Max, Min, Sum, Mean ---- */

static int32_t variadic_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                              const int32_t *idx) {
  (void)out;
  int32_t acc = -1;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    int32_t x = bcast_in(cx, n, i, idx);
    if (x < 0) return -1;
    if (i == 0) {
      acc = x;
      continue;
    }
    switch (n->op) {
    case SC_OP_MAX: acc = BIN(MAX, acc, x); break;
    case SC_OP_MIN: acc = BIN(MIN, acc, x); break;
    default: acc = BIN(ADD, acc, x); break;
    }
  }
  if (n->op == SC_OP_MEAN && n->n_inputs > 1)
    acc = BIN(DIV, acc, C(out_val(cx, n, 0)->dtype, (double)n->n_inputs));
  return acc;
}

const sc_lowering sc_lw_variadic = {SC_LOWER_POINT, variadic_point, NULL};

/* ---- Where ---- */

static int32_t where_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                           const int32_t *idx) {
  (void)out;
  return SEL(bcast_in(cx, n, 0, idx), bcast_in(cx, n, 1, idx), bcast_in(cx, n, 2, idx));
}

const sc_lowering sc_lw_where = {SC_LOWER_POINT, where_point, NULL};

/* ---- Cast, CastLike ---- */

static int32_t cast_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                          const int32_t *idx) {
  (void)out;
  return sc_lower_cast(cx, out_val(cx, n, 0)->dtype, sc_lower_input_at(cx, n, 0, idx));
}

const sc_lowering sc_lw_cast = {SC_LOWER_POINT, cast_point, NULL};

/* ---- Clip ---- */

static int32_t clip_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                          const int32_t *idx) {
  (void)out;
  int32_t x = sc_lower_input_at(cx, n, 0, idx);
  sc_dtype t = in_val(cx, n, 0)->dtype;
  static const char *const names[2] = {"min", "max"};
  for (int k = 0; k < 2 && x >= 0; k++) {
    int32_t bound = -1;
    if (in_val(cx, n, 1 + k)) {
      bound = scalar_in(cx, n, 1 + k);
    } else if (n->n_inputs == 1) {
      const sc_attr *a = sc_node_attr(n, names[k]);
      if (a && a->kind == SC_ATTR_FLOAT)
        bound = sc_dtype_is_float(t) ? C(t, a->f) : C(t, (double)(int64_t)a->f);
    }
    if (bound < 0) {
      if (cx->diag->status != SC_OK) return -1;
      continue;
    }
    /* v < lo → lo, then v > hi → hi (NaN stays NaN) */
    x = k == 0 ? SEL(BIN(LT, x, bound), bound, x) : SEL(BIN(GT, x, bound), bound, x);
  }
  return x;
}

const sc_lowering sc_lw_clip = {SC_LOWER_POINT, clip_point, NULL};

/* ---- Dropout (inference only) ---- */

static int32_t dropout_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                             const int32_t *idx) {
  const sc_value *ratio = in_val(cx, n, 1), *train = in_val(cx, n, 2);
  if (train) {
    if (!sc_value_has_data(train)) {
      sc_lower_error(cx, n, SC_ERR_UNSUPPORTED,
                     "training_mode '%s' is computed; only inference Dropout is supported",
                     train->name);
      return -1;
    }
    bool training = sc_load_i64(train->dtype, train->data, 0) != 0;
    double r = 0.5;
    if (ratio && sc_value_has_data(ratio)) r = sc_load_f64(ratio->dtype, ratio->data, 0);
    else if (ratio) r = 1; /* unknown ratio: treat as random */
    if (training && r != 0) {
      sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "training-mode Dropout is not supported");
      return -1;
    }
  }
  if (out == 1) return C(SC_DTYPE_BOOL, 1); /* the mask keeps everything */
  return sc_lower_input_at(cx, n, 0, idx);
}

const sc_lowering sc_lw_dropout = {SC_LOWER_POINT, dropout_point, NULL};

/* ---- views ---- */

static int32_t view_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                          const int32_t *idx) {
  (void)out;
  const sc_value *x = in_val(cx, n, 0), *o = out_val(cx, n, 0);
  int32_t j[SC_MAX_RANK];
  /* straight through when the non-1 dims agree in order */
  int32_t a = 0, b = 0;
  bool direct = true;
  for (;;) {
    while (a < x->rank && x->dims[a] == 1) j[a++] = sc_lower_i64(cx, 0);
    while (b < o->rank && o->dims[b] == 1) b++;
    if (a == x->rank || b == o->rank) {
      direct = a == x->rank && b == o->rank;
      break;
    }
    if (x->dims[a] != o->dims[b]) {
      direct = false;
      break;
    }
    j[a++] = idx[b++];
  }
  if (!direct) {
    int32_t lin = sc_lower_offset(cx, o->rank, o->dims, idx);
    sc_lower_unflatten(cx, lin, x->rank, x->dims, j);
  }
  return sc_lower_value_at(cx, n->inputs[0], j);
}

const sc_lowering sc_lw_view = {SC_LOWER_VIEW, view_point, NULL};
