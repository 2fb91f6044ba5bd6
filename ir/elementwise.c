/* elementwise.c — the elementwise table (elementwise.def) for ir/: its rows,
 * the attribute parser that applies every default, and constant folding of
 * any elementwise node from its formula.
 *
 * Folding expands each formula twice into static C functions, once on
 * double scalars (float compute dtypes; also Cast from u64) and once on
 * int64 scalars (integer and bool compute dtypes: wrapping arithmetic,
 * u64 compared and divided as unsigned), and wraps each in its own loop
 * over the output elements, so the formula is inlined into a tight loop
 * (inputs of the output's shape are read at the element's index, one-element
 * inputs at 0, other broadcasts through a running multi-index). Floats are
 * rounded once, when stored into the output dtype; integers into a float32
 * output are converted in one rounding (not through double). Rows of the
 * FLOAT class have no int64 expansion and rows of the BOOL class no double
 * one: shape inference has rejected those dtypes already.
 *
 * Where only moves values: it is folded on their bits (as unsigned integers
 * of their width), so every value, NaN payloads included, is kept exactly.
 *
 * Integer division or remainder by zero and 0 raised to a negative integer
 * power are errors here (kir defines them instead: docs/kir.md); the loop
 * notes the first one and sc_ew_fold reports it. */
#include <math.h>
#include <string.h>

#include "elementwise.h"
#include "op_util.h"

/* ---- the rows ---- */

const sc_ew_row sc_ew_rows[SC_OP_COUNT] = {
#define EW(id, kind, cls, f) [SC_OP_##id] = {true, SC_EW_##kind, SC_EW_##cls, #f},
#define EW_N(id, cls, step, finish) \
  [SC_OP_##id] = {true, SC_EW_VARIADIC, SC_EW_##cls, #step " then " #finish},
#define EW_ATTR(id, field, name, kind, dflt)
#include "elementwise.def"
#undef EW
#undef EW_N
#undef EW_ATTR
};

/* Every elementwise op of ops.def has a row (designated initializers catch
 * a duplicate; sc_ew_rows[op].defined is checked per op by the unit tests). */
enum {
  EW_OPS_IN_OPS_DEF = 0
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, \
           lower, shard, grad)                                                              \
  +(((flags) & SC_OPF_ELEMENTWISE) != 0)
#include "ops.def"
#undef OP
};
enum {
  EW_ROWS = 0
#define EW(id, kind, cls, f) +1
#define EW_N(id, cls, step, finish) +1
#define EW_ATTR(id, field, name, kind, dflt)
#include "elementwise.def"
#undef EW
#undef EW_N
#undef EW_ATTR
};
_Static_assert((int)EW_ROWS == (int)EW_OPS_IN_OPS_DEF,
               "elementwise.def needs one row per elementwise op of ops.def");

bool sc_ew_class_accepts(sc_ew_class c, sc_dtype t) {
  switch (c) {
  case SC_EW_ARITH: return sc_dtype_is_float(t) || sc_dtype_is_int(t);
  case SC_EW_SIGNED: return sc_dtype_is_float(t) || sc_dtype_is_signed(t);
  case SC_EW_FLOAT: return sc_dtype_is_float(t);
  case SC_EW_BOOL: return t == SC_DTYPE_BOOL;
  case SC_EW_INT: return sc_dtype_is_int(t);
  default: return sc_dtype_is_numeric(t);
  }
}

sc_dtype sc_ew_compute_dtype(sc_graph *g, const sc_node *n) {
  const sc_ew_row *r = &sc_ew_rows[n->op];
  SC_ASSERT(r->defined);
  const sc_value *x = sc_node_input(g, n, r->kind == SC_EW_WHERE ? 1 : 0);
  if (!x) return SC_DTYPE_UNDEF;
  if (sc_dtype_is_float(x->dtype) || r->kind != SC_EW_BINARY) return x->dtype;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (v && sc_dtype_is_float(v->dtype)) return SC_DTYPE_F64;
  }
  return x->dtype;
}

/* ---- attributes ---- */

static sc_status read_FLOAT(sc_graph *g, const sc_node *n, const char *name, double dflt,
                            double *out) {
  return sc_read_attr_float(g, n, name, dflt, out);
}

static sc_status read_BOOL01(sc_graph *g, const sc_node *n, const char *name, int64_t dflt,
                             bool *out) {
  int64_t v;
  sc_status st = sc_read_attr_int(g, n, name, dflt, &v);
  if (st != SC_OK) return st;
  if (v != 0 && v != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be 0 or 1, not %lld",
                         name, (long long)v);
  *out = v != 0;
  return SC_OK;
}

sc_status sc_ew_attrs_read(sc_graph *g, const sc_node *n, sc_ew_attrs *a) {
  memset(a, 0, sizeof *a);
  sc_status st = SC_OK;
#define EW(id, kind, cls, f)
#define EW_N(id, cls, step, finish)
#define EW_ATTR(id, field, name, kind, dflt) \
  if (st == SC_OK && n->op == SC_OP_##id) st = read_##kind(g, n, name, dflt, &a->field);
#include "elementwise.def"
#undef EW
#undef EW_N
#undef EW_ATTR
  if (st != SC_OK) return st;
  if (n->op == SC_OP_GELU) {
    const char *s;
    if ((st = sc_read_attr_string(g, n, "approximate", "none", &s)) != SC_OK) return st;
    if (strcmp(s, "none") != 0 && strcmp(s, "tanh") != 0)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "attribute 'approximate' is '%s' (expects \"none\" or \"tanh\")",
                           s);
    a->gelu_tanh = strcmp(s, "tanh") == 0;
  }
  if (n->op == SC_OP_CAST || n->op == SC_OP_CAST_LIKE) {
    const char *s;
    if ((st = sc_read_attr_string(g, n, "round_mode", "up", &s)) != SC_OK) return st;
    if (strcmp(s, "up") == 0) a->round_mode = SC_E8M0_UP;
    else if (strcmp(s, "down") == 0) a->round_mode = SC_E8M0_DOWN;
    else if (strcmp(s, "nearest") == 0) a->round_mode = SC_E8M0_NEAREST;
    else
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "attribute 'round_mode' is '%s' (expects \"up\", \"down\" or "
                           "\"nearest\")", s);
  }
  if (n->op == SC_OP_BIT_SHIFT) {
    const char *s;
    if ((st = sc_read_attr_string(g, n, "direction", "", &s)) != SC_OK) return st;
    if (strcmp(s, "LEFT") != 0 && strcmp(s, "RIGHT") != 0)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "attribute 'direction' is '%s' (expects \"LEFT\" or \"RIGHT\")", s);
    a->shift_left = strcmp(s, "LEFT") == 0;
  }
  if (n->op == SC_OP_CLIP && n->n_inputs == 1) {
    /* opset < 11: the bounds are attributes (inputs take precedence) */
    static const char *const names[2] = {"min", "max"};
    bool *has[2] = {&a->has_min, &a->has_max};
    double *val[2] = {&a->min, &a->max};
    for (int k = 0; k < 2; k++) {
      const sc_attr *at = sc_node_attr(n, names[k]);
      if (!at) continue;
      if (at->kind != SC_ATTR_FLOAT)
        return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be a float",
                             names[k]);
      *has[k] = true;
      *val[k] = at->f;
    }
  }
  return SC_OK;
}

/* ---- folding: operands and their loads ---- */

enum { ARG_SAME, ARG_SCALAR, ARG_BCAST };
enum { EW_ERR_NONE, EW_ERR_DIV0, EW_ERR_POW0 };

typedef struct ew_arg {
  const void *data;
  sc_dtype t;
  int mode;           /* ARG_*: element i, element 0, or broadcast */
  int32_t rank;
  const int64_t *dims;
} ew_arg;

typedef struct ew_job {
  const sc_ew_attrs *A;
  sc_dtype t;         /* compute dtype */
  bool is_float, is_signed;
  void *out;
  sc_dtype out_t;
  int64_t m;          /* output elements */
  int32_t rank;       /* output shape */
  const int64_t *dims;
  int64_t idx[SC_MAX_RANK]; /* multi-index of element i when bcast */
  bool bcast;         /* some operand is ARG_BCAST */
  bool present[3];    /* CLIP: bound k given */
  int32_t n_args;
  ew_arg *arg;
  int err;            /* EW_ERR_*: first error met */
} ew_job;

static inline int64_t arg_off(const ew_job *J, const ew_arg *a, int64_t i) {
  if (a->mode == ARG_SAME) return i;
  if (a->mode == ARG_SCALAR) return 0;
  return sc_bcast_offset(J->rank, J->idx, a->rank, a->dims);
}

static inline double ld_D(const ew_job *J, int32_t k, int64_t i) {
  const ew_arg *a = &J->arg[k];
  int64_t o = arg_off(J, a, i);
  if (a->t == SC_DTYPE_F32) return ((const float *)a->data)[o];
  return sc_load_f64(a->t, a->data, o);
}

static inline int64_t ld_I(const ew_job *J, int32_t k, int64_t i) {
  const ew_arg *a = &J->arg[k];
  int64_t o = arg_off(J, a, i);
  if (a->t == SC_DTYPE_I64) return ((const int64_t *)a->data)[o];
  return sc_load_i64(a->t, a->data, o);
}

static inline void st_D(ew_job *J, int64_t i, double v) {
  if (J->out_t == SC_DTYPE_F32) ((float *)J->out)[i] = (float)v;
  else sc_store_f64(J->out_t, J->out, i, v);
}

static inline void st_I(ew_job *J, int64_t i, int64_t v) {
  if (J->out_t == SC_DTYPE_F32) ((float *)J->out)[i] = (float)v; /* one rounding */
  else sc_store_i64(J->out_t, J->out, i, v);
}

/* ---- folding: the double vocabulary ---- */

static inline double d_max(double a, double b) { return isnan(a) || isnan(b) ? NAN : b > a ? b : a; }
static inline double d_min(double a, double b) { return isnan(a) || isnan(b) ? NAN : b < a ? b : a; }
static inline double d_sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}
static inline double d_bool(bool b) { return b ? 1.0 : 0.0; }
/* NARROW: see elementwise.def */
static inline double d_narrow(const ew_job *J, double x) {
  if (!sc_dtype_is_narrow(J->out_t) || !sc_dtype_is_float(J->out_t)) return x;
  if (J->out_t == SC_DTYPE_F8E8M0) return sc_e8m0_prepare((float)x, J->A->round_mode, J->A->saturate);
  double m = sc_narrow_max(J->out_t);
  return J->A->saturate ? d_min(d_max(x, -m), m) : x;
}

#define X0 x0
#define X1 x1
#define X2 x2
#define CONST(c) ((double)(c))
#define FALSE 0.0
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#define MOD(a, b) fmod((a), (b))
#define POW(a, b) pow((a), (b))
#define MIN(a, b) d_min((a), (b))
#define MAX(a, b) d_max((a), (b))
#define NEG(a) (-(a))
#define ABS(a) fabs(a)
#define EXP(a) exp(a)
#define LOG(a) log(a)
#define SQRT(a) sqrt(a)
#define RECIP(a) (1.0 / (a))
#define TANH(a) tanh(a)
#define ATAN(a) atan(a)
#define ERF(a) erf(a)
#define SIN(a) sin(a)
#define COS(a) cos(a)
#define FLOOR(a) floor(a)
#define CEIL(a) ceil(a)
#define ROUND(a) nearbyint(a) /* default rounding mode: half to even */
#define SIGMOID(a) d_sigmoid(a)
#define LOG1P(a) log1p(a)
#define EXPM1(a) expm1(a)
#define ISNAN(a) d_bool(isnan(a))
#define ISINF(a) d_bool(isinf(a))
#define EQ(a, b) d_bool((a) == (b))
#define NE(a, b) d_bool((a) != (b))
#define LT(a, b) d_bool((a) < (b))
#define LE(a, b) d_bool((a) <= (b))
#define GT(a, b) d_bool((a) > (b))
#define GE(a, b) d_bool((a) >= (b))
#define AND(a, b) d_bool((a) != 0 && (b) != 0)
#define OR(a, b) d_bool((a) != 0 || (b) != 0)
#define XOR(a, b) d_bool(((a) != 0) != ((b) != 0))
#define NOT(a) d_bool((a) == 0)
#define SELECT(c, a, b) ((c) != 0 ? (a) : (b))
#define IF(c, a, b) ((c) ? (a) : (b))
#define ATTR(f) (J->A->f)
#define N_INPUTS (J->n_args)
#define PRESENT(k) (J->present[k])
#define IS_FLOAT (J->is_float)
#define IS_SIGNED (J->is_signed)
#define NARROW(a) d_narrow(J, (a))

/* Arity of the formula's operands per kind (VARIADIC loops over all). */
#define EW_ARITY_UNARY 1
#define EW_ARITY_BINARY 2
#define EW_ARITY_WHERE 3
#define EW_ARITY_CLIP 3
#define EW_ARITY_CONVERT 1
#define EW_ARITY_COPY 1

/* Which classes get which expansion (D: double, I: int64). */
#define EW_D_ANY(x) x
#define EW_D_ARITH(x) x
#define EW_D_SIGNED(x) x
#define EW_D_FLOAT(x) x
#define EW_D_BOOL(x)
#define EW_D_INT(x)
#define EW_I_INT(x) x
#define EW_I_ANY(x) x
#define EW_I_ARITH(x) x
#define EW_I_SIGNED(x) x
#define EW_I_FLOAT(x)
#define EW_I_BOOL(x) x

/* f_<dom>_<ID>: the formula on scalars; loop_<dom>_<ID>: over all elements. */
#define EW_FN(dom, type, id, kind, f)                                               \
  static inline type f_##dom##_##id(ew_job *J, type x0, type x1, type x2) {         \
    (void)J, (void)x0, (void)x1, (void)x2;                                          \
    return f;                                                                       \
  }                                                                                 \
  static void loop_##dom##_##id(ew_job *J) {                                        \
    for (int64_t i = 0; i < J->m; i++) {                                            \
      type x[3] = {0, 0, 0};                                                        \
      for (int32_t k = 0; k < EW_ARITY_##kind; k++) x[k] = ld_##dom(J, k, i);       \
      st_##dom(J, i, f_##dom##_##id(J, x[0], x[1], x[2]));                          \
      if (J->bcast) sc_next_index(J->rank, J->dims, J->idx);                        \
    }                                                                               \
  }
#define EW_FN_N(dom, type, id, step, finish)                                        \
  static inline type f_##dom##_##id(ew_job *J, type x0, type x1) {                  \
    (void)J;                                                                        \
    return step;                                                                    \
  }                                                                                 \
  static inline type fin_##dom##_##id(ew_job *J, type x0) {                         \
    (void)J;                                                                        \
    return finish;                                                                  \
  }                                                                                 \
  static void loop_##dom##_##id(ew_job *J) {                                        \
    for (int64_t i = 0; i < J->m; i++) {                                            \
      type acc = ld_##dom(J, 0, i);                                                 \
      for (int32_t k = 1; k < J->n_args; k++)                                       \
        acc = f_##dom##_##id(J, acc, ld_##dom(J, k, i));                            \
      st_##dom(J, i, fin_##dom##_##id(J, acc));                                     \
      if (J->bcast) sc_next_index(J->rank, J->dims, J->idx);                        \
    }                                                                               \
  }

#define EW(id, kind, cls, f) EW_D_##cls(EW_FN(D, double, id, kind, f))
#define EW_N(id, cls, step, finish) EW_D_##cls(EW_FN_N(D, double, id, step, finish))
#define EW_ATTR(id, field, name, kind, dflt)
#include "elementwise.def"
#undef EW
#undef EW_N

/* ---- folding: the int64 vocabulary ---- */

#undef CONST
#undef FALSE
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef MOD
#undef POW
#undef MIN
#undef MAX
#undef NEG
#undef ABS
#undef EXP
#undef LOG
#undef SQRT
#undef RECIP
#undef TANH
#undef ATAN
#undef ERF
#undef SIN
#undef COS
#undef FLOOR
#undef CEIL
#undef ROUND
#undef SIGMOID
#undef LOG1P
#undef EXPM1
#undef ISNAN
#undef ISINF
#undef EQ
#undef NE
#undef LT
#undef LE
#undef GT
#undef GE
#undef AND
#undef OR
#undef XOR
#undef NOT
#undef SELECT

/* Wrapping 64-bit integer arithmetic (no undefined behaviour). */
static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t wneg(int64_t a) { return (int64_t)(0 - (uint64_t)a); }

/* Less-than in the compute dtype (u64 unsigned). */
static inline bool ilt(const ew_job *J, int64_t a, int64_t b) {
  return J->t == SC_DTYPE_U64 ? (uint64_t)a < (uint64_t)b : a < b;
}

static inline int64_t i_err(ew_job *J, int e) {
  if (J->err == EW_ERR_NONE) J->err = e;
  return 0;
}

/* Truncating division; division by zero is an error. */
static inline int64_t i_div(ew_job *J, int64_t a, int64_t b) {
  if (b == 0) return i_err(J, EW_ERR_DIV0);
  if (J->t == SC_DTYPE_U64) return (int64_t)((uint64_t)a / (uint64_t)b);
  return b == -1 ? wneg(a) : a / b;
}

/* C remainder (sign of the dividend); remainder by zero is an error. */
static inline int64_t i_mod(ew_job *J, int64_t a, int64_t b) {
  if (b == 0) return i_err(J, EW_ERR_DIV0);
  if (J->t == SC_DTYPE_U64) return (int64_t)((uint64_t)a % (uint64_t)b);
  return b == -1 ? 0 : a % b;
}

/* Power by squaring, wrapping; a negative exponent truncates 1 / b^-e. */
static inline int64_t i_pow(ew_job *J, int64_t b, int64_t e) {
  if (e < 0) {
    if (b == 0) return i_err(J, EW_ERR_POW0);
    return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
  }
  int64_t r = 1;
  while (e) {
    if (e & 1) r = wmul(r, b);
    b = wmul(b, b);
    e >>= 1;
  }
  return r;
}

/* a << b, a >> b (arithmetic for a signed T). Narrow values are held
 * sign-extended (signed T) or zero-extended, so a negative count of a signed
 * T reads as a huge unsigned one; a count of the width or more shifts every
 * bit out. The store truncates a left shift to T. */
static inline int64_t i_shift(const ew_job *J, int64_t a, int64_t b, bool left) {
  uint64_t bits = 8u * sc_dtype_size(J->t);
  bool sgn = sc_dtype_is_signed(J->t);
  if ((uint64_t)b >= bits) return left || !sgn || a >= 0 ? 0 : -1;
  if (left) return (int64_t)((uint64_t)a << b);
  return sgn ? a >> b : (int64_t)((uint64_t)a >> b);
}

/* NARROW of an integer: limited to a narrow float output's range (f8e8m0's
 * is beyond any int64; its round_mode of integers is refused by Cast's
 * shape rule) */
static inline int64_t i_narrow(const ew_job *J, int64_t x) {
  if (!sc_dtype_is_narrow(J->out_t) || !sc_dtype_is_float(J->out_t) || !J->A->saturate ||
      J->out_t == SC_DTYPE_F8E8M0)
    return x;
  int64_t m = (int64_t)sc_narrow_max(J->out_t);
  if (J->t == SC_DTYPE_U64) return (uint64_t)x > (uint64_t)m ? m : x;
  return x > m ? m : x < -m ? -m : x;
}

#define CONST(c) ((int64_t)(c))
#define FALSE ((int64_t)0)
#define ADD(a, b) wadd((a), (b))
#define SUB(a, b) wsub((a), (b))
#define MUL(a, b) wmul((a), (b))
#define DIV(a, b) i_div(J, (a), (b))
#define MOD(a, b) i_mod(J, (a), (b))
#define POW(a, b) i_pow(J, (a), (b))
#define MIN(a, b) (ilt(J, (b), (a)) ? (b) : (a))
#define MAX(a, b) (ilt(J, (a), (b)) ? (b) : (a))
#define NEG(a) wneg(a)
#define ABS(a) (ilt(J, (a), 0) ? wneg(a) : (a))
#define ISNAN(a) ((void)(a), (int64_t)0)
#define EQ(a, b) ((int64_t)((a) == (b)))
#define NE(a, b) ((int64_t)((a) != (b)))
#define LT(a, b) ((int64_t)ilt(J, (a), (b)))
#define LE(a, b) ((int64_t)!ilt(J, (b), (a)))
#define GT(a, b) ((int64_t)ilt(J, (b), (a)))
#define GE(a, b) ((int64_t)!ilt(J, (a), (b)))
#define AND(a, b) ((int64_t)((a) != 0 && (b) != 0))
#define OR(a, b) ((int64_t)((a) != 0 || (b) != 0))
#define XOR(a, b) ((int64_t)(((a) != 0) != ((b) != 0)))
#define NOT(a) ((int64_t)((a) == 0))
#define BAND(a, b) ((a) & (b))
#define BOR(a, b) ((a) | (b))
#define BXOR(a, b) ((a) ^ (b))
#define BNOT(a) (~(a))
#define SHL(a, b) i_shift(J, (a), (b), true)
#define SHR(a, b) i_shift(J, (a), (b), false)
#define SELECT(c, a, b) ((c) != 0 ? (a) : (b))
#undef NARROW
#define NARROW(a) i_narrow(J, (a))

#define EW(id, kind, cls, f) EW_I_##cls(EW_FN(I, int64_t, id, kind, f))
#define EW_N(id, cls, step, finish) EW_I_##cls(EW_FN_N(I, int64_t, id, step, finish))
#include "elementwise.def"
#undef EW
#undef EW_N

/* ---- folding: dispatch ---- */

typedef void (*ew_loop)(ew_job *J);

#define EW_ENTRY(dom, id) [SC_OP_##id] = loop_##dom##_##id,
static const ew_loop loops_D[SC_OP_COUNT] = {
#define EW(id, kind, cls, f) EW_D_##cls(EW_ENTRY(D, id))
#define EW_N(id, cls, step, finish) EW_D_##cls(EW_ENTRY(D, id))
#include "elementwise.def"
#undef EW
#undef EW_N
};
static const ew_loop loops_I[SC_OP_COUNT] = {
#define EW(id, kind, cls, f) EW_I_##cls(EW_ENTRY(I, id))
#define EW_N(id, cls, step, finish) EW_I_##cls(EW_ENTRY(I, id))
#include "elementwise.def"
#undef EW
#undef EW_N
#undef EW_ATTR
};

static void set_arg(ew_job *J, ew_arg *a, const sc_value *v) {
  a->data = v->data;
  a->t = v->dtype;
  a->rank = v->rank;
  a->dims = v->dims;
  int64_t nv = sc_value_numel(v);
  bool same = v->rank == J->rank;
  for (int32_t d = 0; same && d < v->rank; d++) same = v->dims[d] == J->dims[d];
  a->mode = same ? ARG_SAME : nv == 1 ? ARG_SCALAR : ARG_BCAST;
  if (a->mode == ARG_BCAST) J->bcast = true;
}

/* The unsigned integer dtype of t's width: Where only moves its operands,
 * so it is folded on their bits (exact for every value, NaN payloads too). */
static sc_dtype bits_dtype(sc_dtype t) {
  switch (sc_dtype_size(t)) {
  case 2: return SC_DTYPE_U16;
  case 4: return SC_DTYPE_U32;
  case 8: return SC_DTYPE_U64;
  default: return t;
  }
}

sc_status sc_ew_fold(sc_graph *g, const sc_node *n, void *out) {
  const sc_ew_row *r = &sc_ew_rows[n->op];
  SC_ASSERT(r->defined);
  const sc_value *o = sc_node_output(g, n, 0);
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t m = sc_value_numel(o);
  if (r->kind == SC_EW_COPY) {
    if (sc_dtype_size(x->dtype) == 0 || x->dtype != o->dtype || sc_value_numel(x) != m)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot fold dtype %s",
                           sc_dtype_name(x->dtype));
    if (m) memcpy(out, x->data, (size_t)sc_value_bytes(x));
    return SC_OK;
  }
  sc_ew_attrs A;
  sc_status st = sc_ew_attrs_read(g, n, &A);
  if (st != SC_OK) return st;
  ew_job J;
  memset(&J, 0, sizeof J);
  J.A = &A;
  J.t = sc_ew_compute_dtype(g, n);
  J.is_float = sc_dtype_is_float(J.t);
  J.is_signed = J.is_float || sc_dtype_is_signed(J.t);
  J.out = out;
  J.out_t = o->dtype;
  J.m = m;
  J.rank = o->rank;
  J.dims = o->dims;
  int32_t n_args = r->kind == SC_EW_VARIADIC ? n->n_inputs
                   : r->kind == SC_EW_BINARY ? 2
                   : r->kind == SC_EW_WHERE || r->kind == SC_EW_CLIP ? 3
                   : 1;
  ew_arg args_small[8];
  ew_arg *args = n_args <= 8 ? args_small : sc_malloc(sizeof *args * (size_t)n_args);
  if (!args) return sc_node_error(g, n, SC_ERR_NOMEM, "cannot allocate %d operands", n_args);
  J.arg = args;
  J.n_args = n_args;
  /* Clip bounds given as attributes: one-element operands of f64 (float x)
   * or i64 (integer x, the attribute truncated) */
  double bound_f[3] = {0, 0, 0};
  int64_t bound_i[3] = {0, 0, 0};
  for (int32_t k = 0; k < n_args; k++) {
    const sc_value *v = sc_node_input(g, n, k);
    if (v) {
      if (!sc_value_has_data(v)) {
        st = sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has no constant data", v->name);
        goto done;
      }
      set_arg(&J, &args[k], v);
      if (r->kind == SC_EW_CLIP && k > 0) args[k].mode = ARG_SCALAR;
      if (k < 3) J.present[k] = true;
      continue;
    }
    /* an absent CLIP bound: the attribute, or unused (PRESENT(k) false) */
    bool has = k == 1 ? A.has_min : k == 2 ? A.has_max : false;
    double b = k == 1 ? A.min : A.max;
    bound_f[k] = b;
    bound_i[k] = has ? (int64_t)b : 0;
    args[k].data = J.is_float ? (const void *)&bound_f[k] : (const void *)&bound_i[k];
    args[k].t = J.is_float ? SC_DTYPE_F64 : SC_DTYPE_I64;
    args[k].mode = ARG_SCALAR;
    if (k < 3) J.present[k] = has;
  }
  if (r->kind == SC_EW_WHERE) {
    J.t = J.out_t = bits_dtype(J.t);
    J.is_float = false;
    for (int32_t k = 1; k < 3; k++) args[k].t = bits_dtype(args[k].t);
  }
  /* doubles for float compute dtypes, and for conversions from u64 (read as
   * an unsigned value) */
  bool dbl = J.is_float || (r->kind == SC_EW_CONVERT && J.t == SC_DTYPE_U64);
  ew_loop loop = dbl ? loops_D[n->op] : loops_I[n->op];
  if (!loop) {
    st = sc_node_error(g, n, SC_ERR_INVALID, "cannot evaluate %s on dtype %s",
                       sc_op_name(n->op), sc_dtype_name(J.t));
    goto done;
  }
  loop(&J);
  if (J.err == EW_ERR_DIV0)
    st = sc_node_error(g, n, SC_ERR_INVALID, "integer division by zero");
  else if (J.err == EW_ERR_POW0)
    st = sc_node_error(g, n, SC_ERR_INVALID, "integer power of zero by zero");
done:
  if (args != args_small) sc_free(args);
  return st;
}
