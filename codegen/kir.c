/* kir.c — the kernel IR: builders, verifier, printer and reference
 * interpreter (see codegen/kir.h for the model and docs/kir.md for the text
 * format and the exact semantics).
 *
 * Builders keep the expression array topological and hash-cons it: an open
 * addressing table in the kernel (hash_slots, rebuilt from `exprs` whenever
 * it is missing or too small) maps (op, dtype, a, b, c, var, bits of f, i)
 * to the id of an existing expression. Before interning, builders simplify:
 * an expression whose operands are all constants is evaluated with the very
 * functions the interpreter uses (so folding can never disagree with
 * execution), and a few identities that hold exactly are applied (integer
 * x+0, x-0, x-x, x*1, x*0, x/1, x%1, reassociation of integer constants,
 * float x*1 and x/1, neg(neg x), not(not x), casts to the same type,
 * selects on constants). For i64 index arithmetic a small range analysis
 * over the loop variables removes divisions and remainders that are provably
 * no-ops, e.g. (o0*64 + o1) / 64 -> o0 and (o0*64 + o1) % 64 -> o1 when
 * o1 < 64 and o0 >= 0. Nothing that could change a value is rewritten.
 *
 * Misuse of a builder (an operand id out of range, operand dtypes that do
 * not fit the op) is a bug in the caller: it is reported on stderr and
 * aborts through SC_ASSERT. kir_verify checks the same rules on any kernel,
 * however it was built, and reports through sc_diag.
 *
 * Constants of f16/bf16 dtype hold f32 values (the type values of those
 * dtypes are computed in); only CAST and STORE round to 16 bits. */
#include "codegen/kir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- op table ---- */

static const struct {
  const char *name;
  int arity;
} kir_ops[KIR_OP_COUNT] = {
#define X(e, s, n) {s, n},
    KIR_OPS(X)
#undef X
};
_Static_assert(sizeof kir_ops / sizeof kir_ops[0] == KIR_OP_COUNT,
               "kir op table matches enum");

const char *kir_op_name(kir_op op) {
  return (unsigned)op < KIR_OP_COUNT ? kir_ops[op].name : "?";
}
int kir_op_arity(kir_op op) {
  return (unsigned)op < KIR_OP_COUNT ? kir_ops[op].arity : -1;
}

static const char *const rop_names[KIR_RED_COUNT] = {"sum", "prod", "max",
                                                     "min", "argmax", "argmin"};

/* ---- values and exact scalar semantics (shared by folding and the
 * interpreter) ---- */

typedef struct kval {
  double f;  /* float dtypes */
  int64_t i; /* integer and bool dtypes (U64 as its bits) */
} kval;

static bool is_flt(sc_dtype t) { return sc_dtype_is_float(t); }
static bool is_intt(sc_dtype t) { return sc_dtype_is_int(t); }
static bool is_num(sc_dtype t) { return sc_dtype_is_numeric(t); }

/* A float result in the precision its dtype computes in. */
static double norm_f(sc_dtype t, double x) {
  return t == SC_DTYPE_F64 ? x : (double)(float)x;
}

/* An integer result wrapped to its dtype's width. */
static int64_t wrap_i(sc_dtype t, int64_t v) {
  switch (t) {
  case SC_DTYPE_I8: return (int8_t)v;
  case SC_DTYPE_U8: return (uint8_t)v;
  case SC_DTYPE_I16: return (int16_t)v;
  case SC_DTYPE_U16: return (uint16_t)v;
  case SC_DTYPE_I32: return (int32_t)v;
  case SC_DTYPE_U32: return (uint32_t)v;
  case SC_DTYPE_BOOL: return v != 0;
  case SC_DTYPE_I4: case SC_DTYPE_U4: case SC_DTYPE_I2: case SC_DTYPE_U2:
    return sc_narrow_wrap(t, v);
  default: return v;
  }
}

/* a < b in dtype t (U64 compares as unsigned; narrower unsigned values are
 * held non-negative). */
static bool lt_i(sc_dtype t, int64_t a, int64_t b) {
  if (t == SC_DTYPE_U64) return (uint64_t)a < (uint64_t)b;
  return a < b;
}

/* Conversion as ONNX Cast (and sc_store_f64/sc_store_i64) does it. */
static kval cast_val(sc_dtype to, sc_dtype from, kval v) {
  kval r = {0, 0};
  if (is_flt(from)) {
    double x = v.f;
    if (is_flt(to)) {
      switch (to) {
      case SC_DTYPE_F64: r.f = x; break;
      case SC_DTYPE_F16: r.f = sc_f16_to_f32(sc_f32_to_f16((float)x)); break;
      case SC_DTYPE_BF16: r.f = sc_bf16_to_f32(sc_f32_to_bf16((float)x)); break;
      default:
        r.f = sc_dtype_is_narrow(to) ? sc_narrow_round(to, (float)x) : (double)(float)x;
        break;
      }
    } else if (to == SC_DTYPE_BOOL) {
      r.i = x != 0;
    } else if (sc_dtype_is_narrow(to)) { /* through f32, as the backends */
      r.i = (int64_t)sc_narrow_round(to, (float)x);
    } else {
      int64_t y;
      if (isnan(x)) y = 0;
      else if (x >= 9.2233720368547758e18) y = INT64_MAX;
      else if (x <= -9.2233720368547758e18) y = INT64_MIN;
      else y = (int64_t)x;
      r.i = wrap_i(to, y);
    }
  } else {
    if (is_flt(to)) {
      kval d;
      d.f = from == SC_DTYPE_U64 ? (double)(uint64_t)v.i : (double)v.i;
      d.i = 0;
      return cast_val(to, SC_DTYPE_F64, d);
    }
    r.i = to == SC_DTYPE_BOOL ? v.i != 0 : wrap_i(to, v.i);
  }
  return r;
}

/* v's bits (dtype from) read as dtype to, of the same size, through memory
 * as a store and a load would. */
static kval bitcast_val(sc_dtype to, sc_dtype from, kval v) {
  uint8_t bytes[8] = {0};
  if (is_flt(from)) sc_store_f64(from, bytes, 0, v.f);
  else sc_store_i64(from, bytes, 0, v.i);
  kval r = {0, 0};
  if (is_flt(to)) r.f = sc_load_f64(to, bytes, 0);
  else r.i = to == SC_DTYPE_BOOL ? bytes[0] != 0 : sc_load_i64(to, bytes, 0);
  return r;
}

/* Unary op on operand of dtype ta, result of dtype t. */
static kval eval_unary(kir_op op, sc_dtype t, sc_dtype ta, kval a) {
  kval r = {0, 0};
  if (op == KIR_CAST) return cast_val(t, ta, a);
  if (op == KIR_BITCAST) return bitcast_val(t, ta, a);
  if (op == KIR_ISNAN) { r.i = is_flt(ta) && isnan(a.f); return r; }
  if (op == KIR_ISINF) { r.i = is_flt(ta) && isinf(a.f); return r; }
  if (op == KIR_NOT) { r.i = ta == SC_DTYPE_BOOL ? !a.i : wrap_i(t, ~a.i); return r; }
  if (is_flt(t)) {
    double x = a.f, y;
    switch (op) {
    case KIR_NEG: y = -x; break;
    case KIR_ABS: y = fabs(x); break;
    case KIR_EXP: y = exp(x); break;
    case KIR_LOG: y = log(x); break;
    case KIR_SQRT: y = sqrt(x); break;
    case KIR_RSQRT: y = 1.0 / sqrt(x); break;
    case KIR_TANH: y = tanh(x); break;
    case KIR_ATAN: y = atan(x); break;
    case KIR_ERF: y = erf(x); break;
    case KIR_SIN: y = sin(x); break;
    case KIR_COS: y = cos(x); break;
    case KIR_FLOOR: y = floor(x); break;
    case KIR_CEIL: y = ceil(x); break;
    case KIR_ROUND: y = rint(x); break; /* half to even (default mode) */
    case KIR_RECIP: y = 1.0 / x; break;
    case KIR_SIGMOID: y = 1.0 / (1.0 + exp(-x)); break;
    default: y = 0; break;
    }
    r.f = norm_f(t, y);
    return r;
  }
  int64_t x = a.i;
  switch (op) {
  case KIR_NEG: r.i = wrap_i(t, (int64_t)(0 - (uint64_t)x)); break;
  case KIR_ABS:
    r.i = (sc_dtype_is_signed(t) && x < 0) ? wrap_i(t, (int64_t)(0 - (uint64_t)x)) : x;
    break;
  case KIR_FLOOR: case KIR_CEIL: case KIR_ROUND: r.i = x; break;
  default: r.i = 0; break; /* float-only ops: rejected by kir_verify */
  }
  return r;
}

static int64_t ipow(sc_dtype t, int64_t a, int64_t b) {
  if (sc_dtype_is_signed(t) && b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b & 1) ? -1 : 1;
    return 0;
  }
  uint64_t base = (uint64_t)a, e = (uint64_t)b, r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return wrap_i(t, (int64_t)r);
}

/* Binary op on operands of dtype ta; result dtype t (ta, or BOOL for
 * comparisons). */
static kval eval_binary(kir_op op, sc_dtype t, sc_dtype ta, kval a, kval b) {
  kval r = {0, 0};
  if (is_flt(ta)) {
    double x = a.f, y = b.f, z;
    switch (op) {
    case KIR_EQ: r.i = x == y; return r;
    case KIR_NE: r.i = x != y; return r;
    case KIR_LT: r.i = x < y; return r;
    case KIR_LE: r.i = x <= y; return r;
    case KIR_GT: r.i = x > y; return r;
    case KIR_GE: r.i = x >= y; return r;
    case KIR_ADD: z = x + y; break;
    case KIR_SUB: z = x - y; break;
    case KIR_MUL: z = x * y; break;
    case KIR_DIV: z = x / y; break;
    case KIR_MOD: z = fmod(x, y); break;
    case KIR_MIN: z = (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y); break;
    case KIR_MAX: z = (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y); break;
    case KIR_POW: z = pow(x, y); break;
    default: z = 0; break;
    }
    r.f = norm_f(t, z);
    return r;
  }
  int64_t x = a.i, y = b.i;
  bool uns = ta == SC_DTYPE_U64;
  switch (op) {
  case KIR_EQ: r.i = x == y; return r;
  case KIR_NE: r.i = x != y; return r;
  case KIR_LT: r.i = lt_i(ta, x, y); return r;
  case KIR_LE: r.i = !lt_i(ta, y, x); return r;
  case KIR_GT: r.i = lt_i(ta, y, x); return r;
  case KIR_GE: r.i = !lt_i(ta, x, y); return r;
  case KIR_AND: r.i = x & y; break; /* bools are 0/1: logic is bitwise */
  case KIR_OR: r.i = x | y; break;
  case KIR_XOR: r.i = x ^ y; break;
  case KIR_SHL: case KIR_SHR: { /* SHR of a signed type is arithmetic; a
                                    * negative count reads as a huge one */
    uint64_t bits = 8u * sc_dtype_size(ta);
    bool sgn = sc_dtype_is_signed(ta);
    if ((uint64_t)y >= bits) r.i = op == KIR_SHR && sgn && x < 0 ? -1 : 0;
    else if (op == KIR_SHL) r.i = (int64_t)((uint64_t)x << y);
    else r.i = sgn ? x >> y : (int64_t)((uint64_t)x >> y);
    break;
  }
  case KIR_ADD: r.i = (int64_t)((uint64_t)x + (uint64_t)y); break;
  case KIR_SUB: r.i = (int64_t)((uint64_t)x - (uint64_t)y); break;
  case KIR_MUL: r.i = (int64_t)((uint64_t)x * (uint64_t)y); break;
  case KIR_DIV: /* truncating; division by zero gives 0 */
    if (y == 0) r.i = 0;
    else if (uns) r.i = (int64_t)((uint64_t)x / (uint64_t)y);
    else if (x == INT64_MIN && y == -1) r.i = INT64_MIN;
    else r.i = x / y;
    break;
  case KIR_MOD: /* C remainder (sign of the dividend); x % 0 gives 0 */
    if (y == 0) r.i = 0;
    else if (uns) r.i = (int64_t)((uint64_t)x % (uint64_t)y);
    else if (y == -1) r.i = 0;
    else r.i = x % y;
    break;
  case KIR_MIN: r.i = lt_i(ta, y, x) ? y : x; break;
  case KIR_MAX: r.i = lt_i(ta, x, y) ? y : x; break;
  case KIR_POW: r.i = ipow(ta, x, y); break;
  default: r.i = 0; break;
  }
  r.i = wrap_i(t, r.i);
  return r;
}

/* ---- structural rules (shared by builders and kir_verify) ---- */

static bool is_float_math(kir_op op) {
  switch (op) {
  case KIR_EXP: case KIR_LOG: case KIR_SQRT: case KIR_RSQRT: case KIR_TANH:
  case KIR_ERF: case KIR_SIN: case KIR_COS: case KIR_ATAN: case KIR_RECIP: case KIR_SIGMOID:
    return true;
  default: return false;
  }
}
static bool is_cmp(kir_op op) { return op >= KIR_EQ && op <= KIR_GE; }
static bool is_logic(kir_op op) { return op >= KIR_AND && op <= KIR_NOT; }
static bool is_shift(kir_op op) { return op == KIR_SHL || op == KIR_SHR; }
static bool is_commutative(kir_op op) {
  switch (op) {
  case KIR_ADD: case KIR_MUL: case KIR_MIN: case KIR_MAX: case KIR_EQ:
  case KIR_NE: case KIR_AND: case KIR_OR: case KIR_XOR:
    return true;
  default: return false;
  }
}

/* dtype of the register phase p defines. */
static sc_dtype reg_dtype(const kir_phase *ph) {
  return (ph->rop == KIR_RED_ARGMAX || ph->rop == KIR_RED_ARGMIN) ? SC_DTYPE_I64
                                                                  : ph->acc_dtype;
}

/* Checks expression e (at position id, with `n_phases` phases visible)
 * against the kernel; writes a reason into msg and returns false when it
 * breaks a rule. */
static bool check_expr(const kir_kernel *k, int32_t id, const kir_expr *e,
                       int32_t n_phases, char *msg, size_t n) {
  if ((unsigned)e->op >= KIR_OP_COUNT) {
    snprintf(msg, n, "unknown op %d", (int)e->op);
    return false;
  }
  const char *on = kir_op_name(e->op);
  int ar = kir_op_arity(e->op);
  int32_t ops[3] = {e->a, e->b, e->c};
  for (int j = 0; j < 3; j++) {
    if (j < ar) {
      if (ops[j] < 0 || ops[j] >= id) {
        snprintf(msg, n, "%s: operand %d is %%%d, not an earlier expression", on,
                 j, (int)ops[j]);
        return false;
      }
    } else if (ops[j] != -1) {
      snprintf(msg, n, "%s: unused operand %d is %d, not -1", on, j, (int)ops[j]);
      return false;
    }
  }
  sc_dtype t = e->dtype;
  if (!is_num(t)) {
    snprintf(msg, n, "%s: result dtype %s is not numeric", on, sc_dtype_name(t));
    return false;
  }
  sc_dtype ta = ar > 0 ? k->exprs[e->a].dtype : SC_DTYPE_UNDEF;
  sc_dtype tb = ar > 1 ? k->exprs[e->b].dtype : SC_DTYPE_UNDEF;
  sc_dtype tc = ar > 2 ? k->exprs[e->c].dtype : SC_DTYPE_UNDEF;
  switch (e->op) {
  case KIR_CONST: return true;
  case KIR_VAR:
    if (t != SC_DTYPE_I64) { snprintf(msg, n, "var: dtype %s, not i64", sc_dtype_name(t)); return false; }
    if (e->var != KIR_INNER && (e->var < 0 || e->var >= k->outer_rank)) {
      snprintf(msg, n, "var: dim %d outside the outer rank %d", (int)e->var, (int)k->outer_rank);
      return false;
    }
    return true;
  case KIR_REG:
    if (e->var < 0 || e->var >= n_phases) {
      snprintf(msg, n, "reg: phase %d does not exist", (int)e->var);
      return false;
    }
    if (k->phases[e->var].kind != KIR_PHASE_REDUCE) {
      snprintf(msg, n, "reg: phase %d is not a reduce phase", (int)e->var);
      return false;
    }
    if (t != reg_dtype(&k->phases[e->var])) {
      snprintf(msg, n, "reg: dtype %s, phase %d holds %s", sc_dtype_name(t), (int)e->var,
               sc_dtype_name(reg_dtype(&k->phases[e->var])));
      return false;
    }
    return true;
  case KIR_LOAD:
    if (e->var < 0 || e->var >= (k->n_segs > 0 ? k->seg_params : k->n_params)) {
      snprintf(msg, n, "load: param %d does not exist", (int)e->var);
      return false;
    }
    if (t != k->params[e->var].dtype) {
      snprintf(msg, n, "load: dtype %s, param %d is %s", sc_dtype_name(t), (int)e->var,
               sc_dtype_name(k->params[e->var].dtype));
      return false;
    }
    if (ta != SC_DTYPE_I64) {
      snprintf(msg, n, "load: index %%%d is %s, not i64", (int)e->a, sc_dtype_name(ta));
      return false;
    }
    return true;
  case KIR_CAST:
    return true;
  case KIR_BITCAST:
    if (sc_dtype_size(t) != sc_dtype_size(ta) || t == ta) {
      snprintf(msg, n, "bitcast: %s to %s (sizes must match, dtypes differ)", sc_dtype_name(ta),
               sc_dtype_name(t));
      return false;
    }
    return true;
  case KIR_SELECT:
    if (ta != SC_DTYPE_BOOL) {
      snprintf(msg, n, "select: condition %%%d is %s, not bool", (int)e->a, sc_dtype_name(ta));
      return false;
    }
    if (tb != t || tc != t) {
      snprintf(msg, n, "select: operands %s and %s, result %s", sc_dtype_name(tb),
               sc_dtype_name(tc), sc_dtype_name(t));
      return false;
    }
    return true;
  default: break;
  }
  if (e->op == KIR_ISNAN || e->op == KIR_ISINF) {
    if (t != SC_DTYPE_BOOL || !is_flt(ta)) {
      snprintf(msg, n, "%s: needs a float operand and a bool result", on);
      return false;
    }
    return true;
  }
  if (is_logic(e->op)) {
    if ((t != SC_DTYPE_BOOL && !is_intt(t)) || ta != t || (ar > 1 && tb != t)) {
      snprintf(msg, n, "%s: operands and result must be bool or one integer dtype", on);
      return false;
    }
    return true;
  }
  if (is_shift(e->op)) {
    if (!is_intt(t) || ta != t || tb != t) {
      snprintf(msg, n, "%s: operands and result must be one integer dtype", on);
      return false;
    }
    return true;
  }
  if (is_cmp(e->op)) {
    if (t != SC_DTYPE_BOOL) { snprintf(msg, n, "%s: result %s, not bool", on, sc_dtype_name(t)); return false; }
    if (ta != tb) {
      snprintf(msg, n, "%s: operand dtypes %s and %s differ", on, sc_dtype_name(ta), sc_dtype_name(tb));
      return false;
    }
    return true;
  }
  /* arithmetic: operands of the result dtype, not bool */
  if (t == SC_DTYPE_BOOL) { snprintf(msg, n, "%s: arithmetic on bool", on); return false; }
  if (ta != t || (ar > 1 && tb != t)) {
    if (ar > 1)
      snprintf(msg, n, "%s.%s: operand dtypes %s and %s", on, sc_dtype_name(t), sc_dtype_name(ta),
               sc_dtype_name(tb));
    else
      snprintf(msg, n, "%s.%s: operand dtype %s", on, sc_dtype_name(t), sc_dtype_name(ta));
    return false;
  }
  if (is_float_math(e->op) && !is_flt(t)) {
    snprintf(msg, n, "%s: needs a float dtype, not %s", on, sc_dtype_name(t));
    return false;
  }
  return true;
}

/* ---- hash-consing ---- */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}
static uint64_t expr_hash(const kir_expr *e) {
  uint64_t fb;
  memcpy(&fb, &e->f, sizeof fb);
  uint64_t h = mix(0x12345, (uint64_t)e->op);
  h = mix(h, (uint64_t)e->dtype);
  h = mix(h, (uint64_t)(uint32_t)e->a);
  h = mix(h, (uint64_t)(uint32_t)e->b);
  h = mix(h, (uint64_t)(uint32_t)e->c);
  h = mix(h, (uint64_t)(uint32_t)e->var);
  h = mix(h, fb);
  h = mix(h, (uint64_t)e->i);
  return h ^ (h >> 29);
}
static bool expr_eq(const kir_expr *x, const kir_expr *y) {
  return x->op == y->op && x->dtype == y->dtype && x->a == y->a && x->b == y->b &&
         x->c == y->c && x->var == y->var && memcmp(&x->f, &y->f, sizeof x->f) == 0 &&
         x->i == y->i;
}

static void hash_insert(kir_kernel *k, int32_t id) {
  uint32_t mask = (uint32_t)k->cap_hash - 1;
  uint32_t s = (uint32_t)expr_hash(&k->exprs[id]) & mask;
  while (k->hash_slots[s]) s = (s + 1) & mask;
  k->hash_slots[s] = id + 1;
}

/* Makes room for one more expression in the table (rebuilding it from the
 * expression array when absent or more than half full). */
static bool hash_reserve(sc_arena *arena, kir_kernel *k) {
  if (k->hash_slots && (int64_t)(k->n_exprs + 1) * 2 <= k->cap_hash) return true;
  int64_t cap = 64;
  while (cap < (int64_t)(k->n_exprs + 1) * 4) cap *= 2;
  if (cap > INT32_MAX / 2) return false;
  int32_t *slots = sc_arena_array(arena, (size_t)cap, sizeof *slots);
  if (!slots) return false;
  k->hash_slots = slots;
  k->cap_hash = (int32_t)cap;
  for (int32_t i = 0; i < k->n_exprs; i++) hash_insert(k, i);
  return true;
}

static _Noreturn void builder_misuse(const kir_kernel *k, const char *msg) {
  fprintf(stderr, "kir: kernel '%s': builder misuse: %s\n", k->name ? k->name : "?", msg);
  sc_assert_fail(__FILE__, __LINE__, "well-formed kir builder call");
}

/* Returns the id of an expression equal to *e, appending it if new. */
static int32_t intern(sc_arena *arena, kir_kernel *k, const kir_expr *e) {
  char msg[256];
  if (!check_expr(k, k->n_exprs, e, k->n_phases, msg, sizeof msg)) builder_misuse(k, msg);
  if (!hash_reserve(arena, k)) return -1;
  uint32_t mask = (uint32_t)k->cap_hash - 1;
  uint32_t s = (uint32_t)expr_hash(e) & mask;
  while (k->hash_slots[s]) {
    int32_t id = k->hash_slots[s] - 1;
    if (id < k->n_exprs && expr_eq(&k->exprs[id], e)) return id;
    s = (s + 1) & mask;
  }
  if (k->n_exprs >= k->cap_exprs) {
    int64_t cap = k->cap_exprs < 16 ? 32 : (int64_t)k->cap_exprs * 2;
    if (cap > INT32_MAX) return -1;
    kir_expr *ne = sc_arena_array(arena, (size_t)cap, sizeof *ne);
    if (!ne) return -1;
    if (k->n_exprs) memcpy(ne, k->exprs, (size_t)k->n_exprs * sizeof *ne);
    k->exprs = ne;
    k->cap_exprs = (int32_t)cap;
  }
  int32_t id = k->n_exprs++;
  k->exprs[id] = *e;
  k->hash_slots[s] = id + 1;
  return id;
}

static kir_expr mk(kir_op op, sc_dtype t, int32_t a, int32_t b, int32_t c) {
  kir_expr e;
  memset(&e, 0, sizeof e);
  e.op = op;
  e.dtype = t;
  e.a = a;
  e.b = b;
  e.c = c;
  return e;
}

static void check_id(const kir_kernel *k, int32_t id) {
  if (id < 0 || id >= k->n_exprs) {
    char msg[96];
    snprintf(msg, sizeof msg, "operand %%%d out of range (%d exprs)", (int)id, (int)k->n_exprs);
    builder_misuse(k, msg);
  }
}

static kval const_val(const kir_expr *e) {
  kval v = {e->f, e->i};
  return v;
}
static bool is_const(const kir_kernel *k, int32_t id) { return k->exprs[id].op == KIR_CONST; }
static bool is_const_i(const kir_kernel *k, int32_t id, int64_t v) {
  const kir_expr *e = &k->exprs[id];
  return e->op == KIR_CONST && !is_flt(e->dtype) && e->i == v;
}
static bool is_const_f(const kir_kernel *k, int32_t id, double v) {
  const kir_expr *e = &k->exprs[id];
  return e->op == KIR_CONST && is_flt(e->dtype) && e->f == v;
}

/* A constant holding v (already in t's compute precision). */
static int32_t const_val_expr(sc_arena *arena, kir_kernel *k, sc_dtype t, kval v) {
  kir_expr e = mk(KIR_CONST, t, -1, -1, -1);
  if (is_flt(t)) {
    e.f = v.f == 0 ? (signbit(v.f) ? -0.0 : 0.0) : v.f;
  } else {
    e.i = wrap_i(t, v.i);
  }
  return intern(arena, k, &e);
}

/* ---- building ---- */

kir_kernel *kir_kernel_create(sc_arena *arena, const char *name) {
  kir_kernel *k = sc_arena_alloc(arena, sizeof *k);
  if (!k) return NULL;
  k->name = sc_arena_strdup(arena, name ? name : "kernel");
  if (!k->name) return NULL;
  k->inner = 1;
  return k;
}

int32_t kir_add_param(sc_arena *arena, kir_kernel *k, int32_t buffer, sc_dtype dtype,
                      int64_t numel, bool written) {
  int32_t n = k->n_params;
  if (n == 0 || (n >= 4 && (n & (n - 1)) == 0)) { /* full at 4, 8, 16, ... */
    int32_t cap = n < 4 ? 4 : n * 2;
    kir_param *np = sc_arena_array(arena, (size_t)cap, sizeof *np);
    if (!np) return -1;
    if (n) memcpy(np, k->params, (size_t)n * sizeof *np);
    k->params = np;
  }
  kir_param *p = &k->params[n];
  p->buffer = buffer;
  p->dtype = dtype;
  p->numel = numel;
  p->written = written;
  return k->n_params++;
}

int32_t kir_const_f(sc_arena *arena, kir_kernel *k, sc_dtype t, double v) {
  kval x = {v, 0};
  if (is_flt(t)) x.f = norm_f(t, v);
  else x = cast_val(t, SC_DTYPE_F64, x);
  return const_val_expr(arena, k, t, x);
}

int32_t kir_const_i(sc_arena *arena, kir_kernel *k, sc_dtype t, int64_t v) {
  kval x = {0, v};
  if (is_flt(t)) {
    x = cast_val(SC_DTYPE_F64, SC_DTYPE_I64, x);
    x.f = norm_f(t, x.f);
  }
  return const_val_expr(arena, k, t, x);
}

int32_t kir_var(sc_arena *arena, kir_kernel *k, int32_t var) {
  kir_expr e = mk(KIR_VAR, SC_DTYPE_I64, -1, -1, -1);
  e.var = var;
  return intern(arena, k, &e);
}

int32_t kir_reg(sc_arena *arena, kir_kernel *k, int32_t phase) {
  if (phase < 0 || phase >= k->n_phases) builder_misuse(k, "reg of a phase not yet added");
  kir_expr e = mk(KIR_REG, reg_dtype(&k->phases[phase]), -1, -1, -1);
  e.var = phase;
  return intern(arena, k, &e);
}

int32_t kir_load(sc_arena *arena, kir_kernel *k, int32_t param, int32_t index) {
  check_id(k, index);
  if (param < 0 || param >= k->n_params) builder_misuse(k, "load of a param that does not exist");
  kir_expr e = mk(KIR_LOAD, k->params[param].dtype, index, -1, -1);
  e.var = param;
  return intern(arena, k, &e);
}

int32_t kir_cast(sc_arena *arena, kir_kernel *k, sc_dtype to, int32_t a) {
  check_id(k, a);
  const kir_expr *x = &k->exprs[a];
  if (x->dtype == to) return a;
  if (x->op == KIR_CONST) return const_val_expr(arena, k, to, cast_val(to, x->dtype, const_val(x)));
  kir_expr e = mk(KIR_CAST, to, a, -1, -1);
  return intern(arena, k, &e);
}

int32_t kir_bitcast(sc_arena *arena, kir_kernel *k, sc_dtype to, int32_t a) {
  check_id(k, a);
  const kir_expr *x = &k->exprs[a];
  if (x->dtype == to) return a;
  if (x->op == KIR_CONST) return const_val_expr(arena, k, to, bitcast_val(to, x->dtype, const_val(x)));
  kir_expr e = mk(KIR_BITCAST, to, a, -1, -1);
  char msg[256];
  if (!check_expr(k, k->n_exprs, &e, k->n_phases, msg, sizeof msg)) builder_misuse(k, msg);
  return intern(arena, k, &e);
}

int32_t kir_unary(sc_arena *arena, kir_kernel *k, kir_op op, int32_t a) {
  check_id(k, a);
  if (kir_op_arity(op) != 1 || op == KIR_LOAD) builder_misuse(k, "kir_unary with a non-unary op");
  if (op == KIR_CAST || op == KIR_BITCAST) builder_misuse(k, "use kir_cast, kir_bitcast");
  const kir_expr *x = &k->exprs[a];
  sc_dtype t = (op == KIR_ISNAN || op == KIR_ISINF) ? SC_DTYPE_BOOL : x->dtype;
  kir_expr e = mk(op, t, a, -1, -1);
  char msg[256];
  if (!check_expr(k, k->n_exprs, &e, k->n_phases, msg, sizeof msg)) builder_misuse(k, msg);
  if (x->op == KIR_CONST) return const_val_expr(arena, k, t, eval_unary(op, t, x->dtype, const_val(x)));
  if ((op == KIR_NEG || op == KIR_NOT) && x->op == op) return x->a;
  if (is_intt(t) && (op == KIR_FLOOR || op == KIR_CEIL || op == KIR_ROUND)) return a;
  if (!sc_dtype_is_signed(t) && is_intt(t) && op == KIR_ABS) return a;
  return intern(arena, k, &e);
}

/* ---- range analysis of i64 index expressions ---- */

typedef struct range {
  int64_t lo, hi;
} range;

static bool expr_range(const kir_kernel *k, int32_t id, int depth, range *out) {
  const kir_expr *e = &k->exprs[id];
  if (e->dtype != SC_DTYPE_I64 || depth > 12) return false;
  range a, b;
  switch (e->op) {
  case KIR_CONST: out->lo = out->hi = e->i; return true;
  case KIR_VAR: {
    int64_t ext = e->var == KIR_INNER ? k->inner
                  : (e->var >= 0 && e->var < k->outer_rank) ? k->outer_dims[e->var] : 0;
    if (ext < 1) return false;
    out->lo = 0;
    out->hi = ext - 1;
    return true;
  }
  case KIR_ADD:
    if (!expr_range(k, e->a, depth + 1, &a) || !expr_range(k, e->b, depth + 1, &b)) return false;
    return sc_add_i64(a.lo, b.lo, &out->lo) && sc_add_i64(a.hi, b.hi, &out->hi);
  case KIR_MUL: {
    if (!expr_range(k, e->a, depth + 1, &a) || !expr_range(k, e->b, depth + 1, &b)) return false;
    int64_t p[4];
    if (!sc_mul_i64(a.lo, b.lo, &p[0]) || !sc_mul_i64(a.lo, b.hi, &p[1]) ||
        !sc_mul_i64(a.hi, b.lo, &p[2]) || !sc_mul_i64(a.hi, b.hi, &p[3]))
      return false;
    out->lo = out->hi = p[0];
    for (int j = 1; j < 4; j++) {
      if (p[j] < out->lo) out->lo = p[j];
      if (p[j] > out->hi) out->hi = p[j];
    }
    return true;
  }
  case KIR_DIV:
    if (!is_const(k, e->b) || k->exprs[e->b].i <= 0) return false;
    if (!expr_range(k, e->a, depth + 1, &a) || a.lo < 0) return false;
    out->lo = a.lo / k->exprs[e->b].i;
    out->hi = a.hi / k->exprs[e->b].i;
    return true;
  case KIR_MOD:
    if (!is_const(k, e->b) || k->exprs[e->b].i <= 0) return false;
    if (!expr_range(k, e->a, depth + 1, &a) || a.lo < 0) return false;
    out->lo = 0;
    out->hi = a.hi < k->exprs[e->b].i - 1 ? a.hi : k->exprs[e->b].i - 1;
    return true;
  case KIR_MIN: case KIR_MAX:
    if (!expr_range(k, e->a, depth + 1, &a) || !expr_range(k, e->b, depth + 1, &b)) return false;
    if (e->op == KIR_MIN) {
      out->lo = a.lo < b.lo ? a.lo : b.lo;
      out->hi = a.hi < b.hi ? a.hi : b.hi;
    } else {
      out->lo = a.lo > b.lo ? a.lo : b.lo;
      out->hi = a.hi > b.hi ? a.hi : b.hi;
    }
    return true;
  case KIR_SELECT:
    if (!expr_range(k, e->b, depth + 1, &a) || !expr_range(k, e->c, depth + 1, &b)) return false;
    out->lo = a.lo < b.lo ? a.lo : b.lo;
    out->hi = a.hi > b.hi ? a.hi : b.hi;
    return true;
  default: return false;
  }
}

/* x / c or x % c with x = q*c + r (i64, c > 0), q >= 0 and r in [0, c):
 * finds q and r when x is (q*c) + r or r + (q*c) or q*c. */
static bool split_multiple(const kir_kernel *k, int32_t x, int64_t c, int32_t *q, int32_t *r) {
  const kir_expr *e = &k->exprs[x];
  if (e->op == KIR_MUL && is_const_i(k, e->b, c)) {
    *q = e->a;
    *r = -1;
    return true;
  }
  if (e->op != KIR_ADD) return false;
  for (int side = 0; side < 2; side++) {
    int32_t m = side ? e->b : e->a, rest = side ? e->a : e->b;
    const kir_expr *me = &k->exprs[m];
    if (me->op == KIR_MUL && is_const_i(k, me->b, c)) {
      *q = me->a;
      *r = rest;
      return true;
    }
  }
  return false;
}

int32_t kir_binary(sc_arena *arena, kir_kernel *k, kir_op op, int32_t a, int32_t b) {
  check_id(k, a);
  check_id(k, b);
  if (kir_op_arity(op) != 2) builder_misuse(k, "kir_binary with a non-binary op");
  sc_dtype ta = k->exprs[a].dtype;
  sc_dtype t = is_cmp(op) ? SC_DTYPE_BOOL : ta;
  if (is_commutative(op)) {
    /* canonical order: a constant second, otherwise by id */
    bool ca = is_const(k, a), cb = is_const(k, b);
    if ((ca && !cb) || (ca == cb && a > b)) {
      int32_t s = a;
      a = b;
      b = s;
    }
  }
  kir_expr e = mk(op, t, a, b, -1);
  char msg[256];
  if (!check_expr(k, k->n_exprs, &e, k->n_phases, msg, sizeof msg)) builder_misuse(k, msg);
  const kir_expr *x = &k->exprs[a], *y = &k->exprs[b];
  if (x->op == KIR_CONST && y->op == KIR_CONST)
    return const_val_expr(arena, k, t, eval_binary(op, t, ta, const_val(x), const_val(y)));
  if (is_intt(ta)) {
    switch (op) {
    case KIR_ADD:
      if (is_const_i(k, b, 0)) return a;
      /* (p + c1) + c2 -> p + (c1 + c2): exact in wrapping arithmetic */
      if (y->op == KIR_CONST && x->op == KIR_ADD && is_const(k, x->b)) {
        int32_t c = const_val_expr(arena, k, ta,
                                   eval_binary(KIR_ADD, ta, ta, const_val(&k->exprs[x->b]),
                                               const_val(y)));
        if (c < 0) return -1;
        return kir_binary(arena, k, KIR_ADD, k->exprs[a].a, c);
      }
      break;
    case KIR_SUB:
      if (is_const_i(k, b, 0)) return a;
      if (a == b) return kir_const_i(arena, k, ta, 0);
      if (y->op == KIR_CONST && sc_dtype_is_signed(ta)) { /* p - c -> p + (-c) */
        int32_t c = const_val_expr(arena, k, ta, eval_unary(KIR_NEG, ta, ta, const_val(y)));
        if (c < 0) return -1;
        return kir_binary(arena, k, KIR_ADD, a, c);
      }
      break;
    case KIR_MUL:
      if (is_const_i(k, b, 1)) return a;
      if (is_const_i(k, b, 0)) return b;
      if (y->op == KIR_CONST && x->op == KIR_MUL && is_const(k, x->b)) {
        int32_t c = const_val_expr(arena, k, ta,
                                   eval_binary(KIR_MUL, ta, ta, const_val(&k->exprs[x->b]),
                                               const_val(y)));
        if (c < 0) return -1;
        return kir_binary(arena, k, KIR_MUL, k->exprs[a].a, c);
      }
      break;
    case KIR_DIV:
    case KIR_MOD: {
      if (is_const_i(k, b, 1)) return op == KIR_DIV ? a : kir_const_i(arena, k, ta, 0);
      if (op == KIR_MOD && is_const_i(k, b, -1) && sc_dtype_is_signed(ta))
        return kir_const_i(arena, k, ta, 0);
      if (is_const_i(k, a, 0)) return a; /* 0 / y and 0 % y are 0 (y == 0 too) */
      if (ta != SC_DTYPE_I64 || y->op != KIR_CONST || y->i <= 0) break;
      int64_t c = y->i;
      range ra;
      if (expr_range(k, a, 0, &ra) && ra.lo >= 0 && ra.hi < c)
        return op == KIR_DIV ? kir_const_i(arena, k, ta, 0) : a;
      int32_t q, r;
      range rq, rr;
      if (split_multiple(k, a, c, &q, &r) && expr_range(k, q, 0, &rq) && rq.lo >= 0 &&
          expr_range(k, a, 0, &ra) &&
          (r < 0 || (expr_range(k, r, 0, &rr) && rr.lo >= 0 && rr.hi < c))) {
        /* (q*c + r) with q >= 0, 0 <= r < c and no overflow (range known) */
        if (op == KIR_DIV) return q;
        return r < 0 ? kir_const_i(arena, k, ta, 0) : r;
      }
      break;
    }
    default: break;
    }
  } else if (is_flt(ta)) {
    if ((op == KIR_MUL || op == KIR_DIV) && is_const_f(k, b, 1.0)) return a;
  }
  return intern(arena, k, &e);
}

int32_t kir_select(sc_arena *arena, kir_kernel *k, int32_t c, int32_t a, int32_t b) {
  check_id(k, c);
  check_id(k, a);
  check_id(k, b);
  kir_expr e = mk(KIR_SELECT, k->exprs[a].dtype, c, a, b);
  char msg[256];
  if (!check_expr(k, k->n_exprs, &e, k->n_phases, msg, sizeof msg)) builder_misuse(k, msg);
  if (is_const(k, c)) return k->exprs[c].i ? a : b;
  if (a == b) return a;
  return intern(arena, k, &e);
}

static bool phase_reserve(sc_arena *arena, kir_kernel *k) {
  if (k->n_phases < k->cap_phases) return true;
  int32_t cap = k->cap_phases < 4 ? 4 : k->cap_phases * 2;
  kir_phase *np = sc_arena_array(arena, (size_t)cap, sizeof *np);
  if (!np) return false;
  if (k->n_phases) memcpy(np, k->phases, (size_t)k->n_phases * sizeof *np);
  k->phases = np;
  k->cap_phases = cap;
  return true;
}

int32_t kir_add_reduce(sc_arena *arena, kir_kernel *k, kir_reduce_op rop, sc_dtype acc,
                       int32_t value) {
  check_id(k, value);
  if ((unsigned)rop >= KIR_RED_COUNT) builder_misuse(k, "unknown reduce op");
  if (!is_num(acc) || acc == SC_DTYPE_BOOL) builder_misuse(k, "reduce accumulator must be numeric");
  if (!phase_reserve(arena, k)) return -1;
  kir_phase *ph = &k->phases[k->n_phases];
  memset(ph, 0, sizeof *ph);
  ph->kind = KIR_PHASE_REDUCE;
  ph->rop = rop;
  ph->acc_dtype = acc;
  ph->value = value;
  ph->out_param = -1;
  ph->out_index = -1;
  return k->n_phases++;
}

int32_t kir_add_store(sc_arena *arena, kir_kernel *k, int32_t param, int32_t index,
                      int32_t value) {
  check_id(k, index);
  check_id(k, value);
  if (param < 0 || param >= k->n_params) builder_misuse(k, "store to a param that does not exist");
  if (!k->params[param].written) builder_misuse(k, "store to a param not marked written");
  if (k->exprs[index].dtype != SC_DTYPE_I64) builder_misuse(k, "store index is not i64");
  if (!phase_reserve(arena, k)) return -1;
  kir_phase *ph = &k->phases[k->n_phases];
  memset(ph, 0, sizeof *ph);
  ph->kind = KIR_PHASE_STORE;
  ph->value = value;
  ph->out_param = param;
  ph->out_index = index;
  return k->n_phases++;
}

/* ---- verification ---- */

static sc_status vfail(const kir_kernel *k, sc_diag *diag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status vfail(const kir_kernel *k, sc_diag *diag, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "kernel '%s': %s",
                     k->name ? k->name : "?", buf);
}

sc_status kir_verify(const kir_kernel *k, sc_diag *diag) {
  if (!k->name || !k->name[0]) return vfail(k, diag, "no name");
  if (k->outer_rank < 0 || k->outer_rank > SC_MAX_RANK)
    return vfail(k, diag, "outer rank %d outside [0, %d]", (int)k->outer_rank, SC_MAX_RANK);
  for (int32_t d = 0; d < k->outer_rank; d++)
    if (k->outer_dims[d] < 0)
      return vfail(k, diag, "outer dim %d is %lld", (int)d, (long long)k->outer_dims[d]);
  if (k->inner < 1) return vfail(k, diag, "inner extent %lld < 1", (long long)k->inner);
  if (k->n_params < 0 || k->n_exprs < 0 || k->n_phases < 0)
    return vfail(k, diag, "negative counts");
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *p = &k->params[i];
    if (!is_num(p->dtype))
      return vfail(k, diag, "param %d: dtype %s is not numeric", (int)i, sc_dtype_name(p->dtype));
    if (p->numel < 0) return vfail(k, diag, "param %d: numel %lld", (int)i, (long long)p->numel);
  }
  if (k->n_segs < 0) return vfail(k, diag, "%d segments", (int)k->n_segs);
  if (k->n_segs > 0) {
    if (!k->seg_start || k->seg_params < 1 || k->n_params / k->seg_params != k->n_segs ||
        k->n_params % k->seg_params != 0)
      return vfail(k, diag, "%d params are not %d segments of %d", (int)k->n_params,
                   (int)k->n_segs, (int)k->seg_params);
    if (k->outer_rank != 1 || (!k->seg_inner && k->inner != 1) || k->seg_start[0] != 0 ||
        k->seg_start[k->n_segs] != k->outer_dims[0])
      return vfail(k, diag, "a multi-tensor kernel's domain is 1-D, inner 1, its segments' sum");
    for (int32_t s = 0; s < k->n_segs; s++)
      if (k->seg_start[s + 1] <= k->seg_start[s])
        return vfail(k, diag, "segment %d is empty or its start decreases", (int)s);
    int64_t most = 1;
    for (int32_t s = 0; k->seg_inner && s < k->n_segs; s++) {
      if (k->seg_start[s] != s || k->seg_inner[s] < 1)
        return vfail(k, diag, "reduction segment %d: start %lld, inner %lld (one point, inner >= 1)",
                     (int)s, (long long)k->seg_start[s], (long long)k->seg_inner[s]);
      if (k->seg_inner[s] > most) most = k->seg_inner[s];
    }
    if (k->seg_inner && k->inner != most)
      return vfail(k, diag, "a multi-tensor reduction's inner %lld is not its segments' largest %lld",
                   (long long)k->inner, (long long)most);
    for (int32_t i = k->seg_params; i < k->n_params; i++) {
      const kir_param *t = &k->params[i % k->seg_params];
      if (k->params[i].dtype != t->dtype || k->params[i].written != t->written)
        return vfail(k, diag, "param %d differs from template param %d in dtype or direction",
                     (int)i, (int)(i % k->seg_params));
    }
  }
  char msg[256];
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (!check_expr(k, i, &k->exprs[i], k->n_phases, msg, sizeof msg))
      return vfail(k, diag, "%%%d: %s", (int)i, msg);
  /* REG only after its phase: the latest phase an expression reads */
  int32_t *maxreg = sc_calloc((size_t)(k->n_exprs ? k->n_exprs : 1), sizeof *maxreg);
  if (!maxreg) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *e = &k->exprs[i];
    int32_t m = e->op == KIR_REG ? e->var : -1;
    int32_t ops[3] = {e->a, e->b, e->c};
    for (int j = 0; j < kir_op_arity(e->op); j++)
      if (maxreg[ops[j]] > m) m = maxreg[ops[j]];
    maxreg[i] = m;
  }
  sc_status st = SC_OK;
  for (int32_t p = 0; p < k->n_phases && st == SC_OK; p++) {
    const kir_phase *ph = &k->phases[p];
    if (ph->value < 0 || ph->value >= k->n_exprs) {
      st = vfail(k, diag, "phase %d: value %%%d does not exist", (int)p, (int)ph->value);
      break;
    }
    if (maxreg[ph->value] >= p) {
      st = vfail(k, diag, "phase %d: reads reg of phase %d, not an earlier phase", (int)p,
                 (int)maxreg[ph->value]);
      break;
    }
    if (ph->kind == KIR_PHASE_REDUCE) {
      if ((unsigned)ph->rop >= KIR_RED_COUNT) st = vfail(k, diag, "phase %d: bad reduce op", (int)p);
      else if (!is_num(ph->acc_dtype) || ph->acc_dtype == SC_DTYPE_BOOL)
        st = vfail(k, diag, "phase %d: accumulator dtype %s", (int)p, sc_dtype_name(ph->acc_dtype));
    } else if (ph->kind == KIR_PHASE_STORE) {
      if (ph->out_param < 0 ||
          ph->out_param >= (k->n_segs > 0 ? k->seg_params : k->n_params))
        st = vfail(k, diag, "phase %d: store to param %d that does not exist", (int)p,
                   (int)ph->out_param);
      else if (!k->params[ph->out_param].written)
        st = vfail(k, diag, "phase %d: store to param %d not marked written", (int)p,
                   (int)ph->out_param);
      else if (ph->out_index < 0 || ph->out_index >= k->n_exprs)
        st = vfail(k, diag, "phase %d: index %%%d does not exist", (int)p, (int)ph->out_index);
      else if (k->exprs[ph->out_index].dtype != SC_DTYPE_I64)
        st = vfail(k, diag, "phase %d: index %%%d is %s, not i64", (int)p, (int)ph->out_index,
                   sc_dtype_name(k->exprs[ph->out_index].dtype));
      else if (maxreg[ph->out_index] >= p)
        st = vfail(k, diag, "phase %d: index reads reg of phase %d, not an earlier phase", (int)p,
                   (int)maxreg[ph->out_index]);
    } else {
      st = vfail(k, diag, "phase %d: unknown kind %d", (int)p, (int)ph->kind);
    }
  }
  sc_free(maxreg);
  return st;
}

/* ---- printing ---- */

static void print_const(const kir_expr *e, FILE *out) {
  if (!is_flt(e->dtype)) {
    fprintf(out, "%lld", (long long)e->i);
    return;
  }
  if (isnan(e->f)) fputs("nan", out);
  else if (isinf(e->f)) fputs(e->f > 0 ? "inf" : "-inf", out);
  else fprintf(out, e->dtype == SC_DTYPE_F64 ? "%.17g" : "%.9g", e->f);
}

void kir_print(const kir_kernel *k, FILE *out) {
  fprintf(out, "kernel %s outer [", k->name ? k->name : "?");
  for (int32_t d = 0; d < k->outer_rank; d++)
    fprintf(out, "%s%lld", d ? "," : "", (long long)k->outer_dims[d]);
  fprintf(out, "] inner %lld\n", (long long)k->inner);
  if (k->origin) fprintf(out, "  origin %s\n", k->origin);
  if (k->n_segs > 0) {
    fprintf(out, "  segments %d of %d params, starts", (int)k->n_segs, (int)k->seg_params);
    for (int32_t s = 0; s <= k->n_segs; s++) fprintf(out, " %lld", (long long)k->seg_start[s]);
    if (k->seg_inner) {
      fprintf(out, ", inners");
      for (int32_t s = 0; s < k->n_segs; s++) fprintf(out, " %lld", (long long)k->seg_inner[s]);
    }
    fputc('\n', out);
  }
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *p = &k->params[i];
    fprintf(out, "  p%d = buf %d %s numel %lld %s\n", (int)i, (int)p->buffer,
            sc_dtype_name(p->dtype), (long long)p->numel, p->written ? "out" : "in");
  }
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *e = &k->exprs[i];
    fprintf(out, "  %%%d = %s.%s ", (int)i, kir_op_name(e->op), sc_dtype_name(e->dtype));
    switch (e->op) {
    case KIR_CONST: print_const(e, out); break;
    case KIR_VAR:
      if (e->var == KIR_INNER) fputs("r", out);
      else fprintf(out, "o%d", (int)e->var);
      break;
    case KIR_REG: fprintf(out, "phase%d", (int)e->var); break;
    case KIR_LOAD: fprintf(out, "p%d[%%%d]", (int)e->var, (int)e->a); break;
    default: {
      int ar = kir_op_arity(e->op);
      int32_t ops[3] = {e->a, e->b, e->c};
      for (int j = 0; j < ar; j++) fprintf(out, "%s%%%d", j ? ", " : "", (int)ops[j]);
    }
    }
    fputc('\n', out);
  }
  for (int32_t p = 0; p < k->n_phases; p++) {
    const kir_phase *ph = &k->phases[p];
    if (ph->kind == KIR_PHASE_REDUCE)
      fprintf(out, "  phase %d: reduce.%s acc %s %%%d\n", (int)p,
              (unsigned)ph->rop < KIR_RED_COUNT ? rop_names[ph->rop] : "?",
              sc_dtype_name(ph->acc_dtype), (int)ph->value);
    else
      fprintf(out, "  phase %d: store p%d[%%%d] = %%%d\n", (int)p, (int)ph->out_param,
              (int)ph->out_index, (int)ph->value);
  }
}

/* ---- the reference interpreter ---- */

/* Marks the expressions phase value/index roots reach. */
static void mark_needed(const kir_kernel *k, int32_t root, uint8_t *need) {
  if (root < 0) return;
  need[root] = 1;
  for (int32_t i = root; i >= 0; i--) {
    if (!need[i]) continue;
    const kir_expr *e = &k->exprs[i];
    int32_t ops[3] = {e->a, e->b, e->c};
    for (int j = 0; j < kir_op_arity(e->op); j++) need[ops[j]] = 1;
  }
}

typedef struct interp {
  const kir_kernel *k;
  void *const *bufs;
  sc_diag *diag;
  kval *vals;
  kval *regs;
  int64_t outer[SC_MAX_RANK];
  int64_t r;
  int32_t base; /* segment s's first param (s * seg_params), 0 when none */
} interp;

static sc_status oob(interp *s, const char *what, int32_t param, int64_t idx) {
  const kir_kernel *k = s->k;
  char pt[256];
  size_t n = 0;
  pt[0] = 0;
  for (int32_t d = 0; d < k->outer_rank && n < sizeof pt - 24; d++)
    n += (size_t)snprintf(pt + n, sizeof pt - n, "%s%lld", d ? "," : "", (long long)s->outer[d]);
  return sc_diag_set(s->diag, SC_ERR_INVALID, NULL, NULL,
                     "kernel '%s': %s of param %d at element %lld outside [0, %lld) "
                     "(outer point [%s], inner %lld)",
                     k->name, what, (int)param, (long long)idx,
                     (long long)k->params[param].numel, pt, (long long)s->r);
}

/* Evaluates the marked expressions at the current point. */
static sc_status eval_point(interp *s, const int32_t *list, int32_t n) {
  const kir_kernel *k = s->k;
  for (int32_t li = 0; li < n; li++) {
    int32_t i = list[li];
    const kir_expr *e = &k->exprs[i];
    kval v = {0, 0};
    switch (e->op) {
    case KIR_CONST: v = const_val(e); break;
    case KIR_VAR: v.i = e->var == KIR_INNER ? s->r : s->outer[e->var]; break;
    case KIR_REG: v = s->regs[e->var]; break;
    case KIR_LOAD: {
      int64_t idx = s->vals[e->a].i;
      int32_t pi = s->base + e->var;
      const kir_param *p = &k->params[pi];
      if (idx < 0 || idx >= p->numel) return oob(s, "load", pi, idx);
      if (is_flt(p->dtype)) v.f = norm_f(p->dtype, sc_load_f64(p->dtype, s->bufs[pi], idx));
      else v.i = sc_load_i64(p->dtype, s->bufs[pi], idx);
      break;
    }
    case KIR_SELECT: v = s->vals[e->a].i ? s->vals[e->b] : s->vals[e->c]; break;
    default:
      if (kir_op_arity(e->op) == 1)
        v = eval_unary(e->op, e->dtype, k->exprs[e->a].dtype, s->vals[e->a]);
      else
        v = eval_binary(e->op, e->dtype, k->exprs[e->a].dtype, s->vals[e->a], s->vals[e->b]);
      break;
    }
    s->vals[i] = v;
  }
  return SC_OK;
}

static bool kval_isnan(sc_dtype t, kval v) { return is_flt(t) && isnan(v.f); }
/* x better than best for argmax (want_max) / argmin: first NaN wins, then
 * strictly greater (less) values; ties keep the first index. */
static bool arg_better(sc_dtype t, kval x, kval best, bool want_max) {
  if (kval_isnan(t, best)) return false;
  if (kval_isnan(t, x)) return true;
  kval c = eval_binary(want_max ? KIR_GT : KIR_LT, SC_DTYPE_BOOL, t, x, best);
  return c.i != 0;
}

sc_status kir_interpret(const kir_kernel *k, void *const *bufs, sc_diag *diag) {
  sc_status st = kir_verify(k, diag);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < k->n_params; i++)
    if (!bufs[i] && k->params[i].numel > 0)
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "kernel '%s': no buffer for param %d",
                         k->name, (int)i);
  int64_t total = 1;
  for (int32_t d = 0; d < k->outer_rank; d++)
    if (!sc_mul_i64(total, k->outer_dims[d], &total))
      return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "kernel '%s': outer domain overflows",
                         k->name);
  size_t ne = (size_t)(k->n_exprs ? k->n_exprs : 1), np = (size_t)(k->n_phases ? k->n_phases : 1);
  interp s;
  memset(&s, 0, sizeof s);
  s.k = k;
  s.bufs = bufs;
  s.diag = diag;
  s.vals = sc_calloc(ne, sizeof *s.vals);
  s.regs = sc_calloc(np, sizeof *s.regs);
  uint8_t *need = sc_calloc(ne * np, 1);
  int32_t *lists = sc_calloc(ne * np, sizeof *lists);
  int32_t *counts = sc_calloc(np, sizeof *counts);
  if (!s.vals || !s.regs || !need || !lists || !counts) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    goto done;
  }
  for (int32_t p = 0; p < k->n_phases; p++) {
    uint8_t *nd = need + (size_t)p * ne;
    mark_needed(k, k->phases[p].value, nd);
    if (k->phases[p].kind == KIR_PHASE_STORE) mark_needed(k, k->phases[p].out_index, nd);
    for (int32_t i = 0; i < k->n_exprs; i++)
      if (nd[i]) lists[(size_t)p * ne + (size_t)counts[p]++] = i;
  }
  for (int64_t o = 0; o < total && st == SC_OK; o++) {
    int64_t rem = o, inner = k->inner;
    if (k->n_segs > 0) { /* the segment's element, its params and its inner extent */
      int32_t sg = kir_segment_of(k, o);
      rem = o - k->seg_start[sg];
      s.base = sg * k->seg_params;
      inner = kir_seg_inner(k, sg);
    }
    for (int32_t d = k->outer_rank - 1; d >= 0; d--) {
      s.outer[d] = k->n_segs > 0 ? rem : rem % k->outer_dims[d];
      rem /= k->outer_dims[d];
    }
    for (int32_t p = 0; p < k->n_phases && st == SC_OK; p++) {
      const kir_phase *ph = &k->phases[p];
      const int32_t *list = lists + (size_t)p * ne;
      sc_dtype vt = k->exprs[ph->value].dtype;
      kval acc = {0, 0}, best = {0, 0};
      int64_t best_i = 0;
      if (ph->kind == KIR_PHASE_REDUCE) {
        if (ph->rop == KIR_RED_SUM) acc = cast_val(ph->acc_dtype, SC_DTYPE_I64, (kval){0, 0});
        if (ph->rop == KIR_RED_PROD) acc = cast_val(ph->acc_dtype, SC_DTYPE_I64, (kval){0, 1});
      }
      for (s.r = 0; s.r < inner; s.r++) {
        st = eval_point(&s, list, counts[p]);
        if (st != SC_OK) break;
        kval v = s.vals[ph->value];
        if (ph->kind == KIR_PHASE_STORE) {
          int32_t pi = s.base + ph->out_param;
          const kir_param *pp = &k->params[pi];
          int64_t idx = s.vals[ph->out_index].i;
          if (idx < 0 || idx >= pp->numel) {
            st = oob(&s, "store", pi, idx);
            break;
          }
          kval y = cast_val(pp->dtype, vt, v);
          if (is_flt(pp->dtype)) sc_store_f64(pp->dtype, bufs[pi], idx, y.f);
          else sc_store_i64(pp->dtype, bufs[pi], idx, y.i);
          continue;
        }
        sc_dtype at = ph->acc_dtype;
        kval x = cast_val(at, vt, v);
        switch (ph->rop) {
        case KIR_RED_SUM: acc = eval_binary(KIR_ADD, at, at, acc, x); break;
        case KIR_RED_PROD: acc = eval_binary(KIR_MUL, at, at, acc, x); break;
        case KIR_RED_MAX: acc = s.r ? eval_binary(KIR_MAX, at, at, acc, x) : x; break;
        case KIR_RED_MIN: acc = s.r ? eval_binary(KIR_MIN, at, at, acc, x) : x; break;
        case KIR_RED_ARGMAX: case KIR_RED_ARGMIN:
          if (s.r == 0 || arg_better(at, x, best, ph->rop == KIR_RED_ARGMAX)) {
            best = x;
            best_i = s.r;
          }
          break;
        default: break;
        }
      }
      if (ph->kind == KIR_PHASE_REDUCE) {
        if (ph->rop == KIR_RED_ARGMAX || ph->rop == KIR_RED_ARGMIN) {
          s.regs[p].f = 0;
          s.regs[p].i = best_i;
        } else {
          s.regs[p] = acc;
        }
      }
    }
  }
done:
  sc_free(s.vals);
  sc_free(s.regs);
  sc_free(need);
  sc_free(lists);
  sc_free(counts);
  return st;
}

/* ---- in-place legality (for passes/memplan.c) ---- */

/* Decomposes i64 expression id into sum(coef[v] * var v) + c (v = outer
 * dims, then the inner index at slot outer_rank); c is added to *cst when
 * cst is not NULL. */
static bool affine(const kir_kernel *k, int32_t id, int64_t scale, int64_t *coef, int64_t *cst,
                   int depth) {
  if (id < 0 || id >= k->n_exprs || depth > 64) return false;
  const kir_expr *e = &k->exprs[id];
  if (e->dtype != SC_DTYPE_I64) return false;
  int64_t t;
  switch (e->op) {
  case KIR_CONST: /* constants shift, never break injectivity */
    return !cst || (sc_mul_i64(scale, e->i, &t) && sc_add_i64(*cst, t, cst));
  case KIR_VAR: {
    if (e->var != KIR_INNER && (e->var < 0 || e->var >= k->outer_rank)) return false;
    int32_t slot = e->var == KIR_INNER ? k->outer_rank : e->var;
    return sc_add_i64(coef[slot], scale, &coef[slot]);
  }
  case KIR_ADD:
    return affine(k, e->a, scale, coef, cst, depth + 1) &&
           affine(k, e->b, scale, coef, cst, depth + 1);
  case KIR_MUL: /* by a constant, on either side */
    if (is_const(k, e->b))
      return sc_mul_i64(scale, k->exprs[e->b].i, &t) && affine(k, e->a, t, coef, cst, depth + 1);
    if (is_const(k, e->a))
      return sc_mul_i64(scale, k->exprs[e->a].i, &t) && affine(k, e->b, t, coef, cst, depth + 1);
    return false;
  default: return false;
  }
}

bool kir_affine(const kir_kernel *k, int32_t id, int64_t *coef, int64_t *cst) {
  return affine(k, id, 1, coef, cst, 0);
}

int32_t kir_segment_of(const kir_kernel *k, int64_t o) {
  int32_t lo = 0, hi = k->n_segs > 0 ? k->n_segs - 1 : 0;
  while (lo < hi) { /* the last segment starting at or before o */
    int32_t mid = lo + (hi - lo + 1) / 2;
    if (k->seg_start[mid] <= o) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

bool kir_is_point_index(const kir_kernel *k, int32_t id) {
  if (id < 0 || id >= k->n_exprs || k->n_segs > 0) return false;
  int64_t coef[SC_MAX_RANK + 1] = {0}, cst = 0, stride = 1;
  if (!affine(k, id, 1, coef, &cst, 0) || cst != 0) return false;
  if (k->inner > 1 && coef[k->outer_rank] != 0) return false;
  for (int32_t d = k->outer_rank - 1; d >= 0; d--) {
    if (k->outer_dims[d] > 1 && coef[d] != stride) return false;
    if (!sc_mul_i64(stride, k->outer_dims[d], &stride)) return false;
  }
  return true;
}

/* One digit of the inner index: scale * ((r / div) % mod), mod 0 for none. */
typedef struct digit {
  int64_t scale, div, mod;
} digit;
enum { MAX_DIGITS = 2 * SC_MAX_RANK + 2 };

/* Adds i64 expression id, times scale, to the sum of digits d[0 .. *n) (d
 * holding cap) and constant *cst; false when it is not such a sum or has
 * more digits than cap. */
static bool digits(const kir_kernel *k, int32_t id, int64_t scale, digit *d, int *n, int cap,
                   int64_t *cst, int depth) {
  if (id < 0 || id >= k->n_exprs || depth > 64) return false;
  const kir_expr *e = &k->exprs[id];
  if (e->dtype != SC_DTYPE_I64) return false;
  int64_t t;
  switch (e->op) {
  case KIR_CONST: return sc_mul_i64(scale, e->i, &t) && sc_add_i64(*cst, t, cst);
  case KIR_VAR:
    if (e->var != KIR_INNER) /* an outer dim of extent 1 is 0 */
      return e->var >= 0 && e->var < k->outer_rank && k->outer_dims[e->var] == 1;
    if (*n >= cap) return false;
    d[(*n)++] = (digit){scale, 1, 0};
    return true;
  case KIR_ADD:
    return digits(k, e->a, scale, d, n, cap, cst, depth + 1) &&
           digits(k, e->b, scale, d, n, cap, cst, depth + 1);
  case KIR_MUL:
    if (is_const(k, e->b))
      return sc_mul_i64(scale, k->exprs[e->b].i, &t) &&
             digits(k, e->a, t, d, n, cap, cst, depth + 1);
    if (is_const(k, e->a))
      return sc_mul_i64(scale, k->exprs[e->a].i, &t) &&
             digits(k, e->b, t, d, n, cap, cst, depth + 1);
    return false;
  case KIR_DIV: case KIR_MOD: { /* of one whole digit by a positive constant */
    digit x;
    int nx = 0;
    int64_t c = 0, by = is_const(k, e->b) ? k->exprs[e->b].i : 0;
    if (by < 1 || !digits(k, e->a, 1, &x, &nx, 1, &c, depth + 1) || nx != 1 || c != 0 ||
        x.scale != 1 || *n >= cap)
      return false;
    if (e->op == KIR_DIV) {
      /* ((r / div) % mod) / by is (r / (div * by)) % (mod / by) when by divides mod */
      if ((x.mod != 0 && x.mod % by != 0) || !sc_mul_i64(x.div, by, &x.div)) return false;
      if (x.mod != 0) x.mod /= by;
    } else {
      if (x.mod != 0 && x.mod % by != 0) return false;
      x.mod = by;
    }
    x.scale = scale;
    d[(*n)++] = x;
    return true;
  }
  default: return false;
  }
}

bool kir_is_inner_index(const kir_kernel *k, int32_t id) {
  if (id < 0 || id >= k->n_exprs || k->n_segs > 0) return false;
  for (int32_t v = 0; v < k->outer_rank; v++)
    if (k->outer_dims[v] != 1) return false;
  digit d[MAX_DIGITS];
  int n = 0, m = 0;
  int64_t cst = 0, t;
  if (!digits(k, id, 1, d, &n, MAX_DIGITS, &cst, 0) || cst != 0) return false;
  for (int i = 0; i < n; i++) { /* r < inner: a digit from inner up is 0, a mod reaching it none */
    if (d[i].div >= k->inner) continue;
    if (d[i].mod != 0 && (!sc_mul_i64(d[i].div, d[i].mod, &t) || t >= k->inner)) d[i].mod = 0;
    d[m++] = d[i];
  }
  for (int i = 1; i < m; i++) /* by div */
    for (int j = i; j > 0 && d[j].div < d[j - 1].div; j--) {
      digit x = d[j];
      d[j] = d[j - 1];
      d[j - 1] = x;
    }
  int64_t next = 1; /* the digits must tile r: div 1, then each div the one below times its mod */
  for (int i = 0; i < m; i++) {
    if (d[i].div != next || d[i].scale != d[i].div || (d[i].mod == 0 && i + 1 < m)) return false;
    if (d[i].mod != 0 && !sc_mul_i64(next, d[i].mod, &next)) return false;
  }
  return m == 0 ? k->inner == 1 : d[m - 1].mod == 0;
}

/* True when index expression id takes a distinct value at every point of
 * the domain (outer x inner). */
static bool injective(const kir_kernel *k, int32_t id) {
  int64_t coef[SC_MAX_RANK + 1] = {0};
  if (!affine(k, id, 1, coef, NULL, 0)) return false;
  int32_t nv = k->outer_rank + 1;
  int64_t ext[SC_MAX_RANK + 1];
  for (int32_t v = 0; v < k->outer_rank; v++) ext[v] = k->outer_dims[v];
  ext[k->outer_rank] = k->inner;
  bool used[SC_MAX_RANK + 1] = {false};
  int64_t span = 0; /* largest offset the variables taken so far reach */
  for (;;) {
    int32_t best = -1;
    for (int32_t v = 0; v < nv; v++) {
      if (used[v] || ext[v] <= 1) continue;
      if (coef[v] <= 0) return false;
      if (best < 0 || coef[v] < coef[best]) best = v;
    }
    if (best < 0) return true;
    used[best] = true;
    if (coef[best] <= span) return false;
    int64_t reach;
    if (!sc_mul_i64(coef[best], ext[best] - 1, &reach) || !sc_add_i64(span, reach, &span))
      return false;
  }
}

/* Whether index expressions a and b take the same value at every point:
 * the same expression, or affine ones with the same constant and the same
 * coefficient for every variable whose extent is above 1 (a view's
 * reshape reads an element through other arithmetic than the store's). */
static bool same_index(const kir_kernel *k, int32_t a, int32_t b) {
  if (a == b) return true;
  int64_t ca[SC_MAX_RANK + 1] = {0}, cb[SC_MAX_RANK + 1] = {0}, ka = 0, kb = 0;
  if (!affine(k, a, 1, ca, &ka, 0) || !affine(k, b, 1, cb, &kb, 0) || ka != kb) return false;
  for (int32_t v = 0; v <= k->outer_rank; v++) {
    int64_t ext = v < k->outer_rank ? k->outer_dims[v] : k->inner;
    if (ext > 1 && ca[v] != cb[v]) return false;
  }
  return true;
}

bool kir_reads_aligned(const kir_kernel *k, int32_t param, int32_t out_param) {
  if (param < 0 || param >= k->n_params || out_param < 0 || out_param >= k->n_params ||
      param == out_param)
    return false;
  const kir_param *pi = &k->params[param], *po = &k->params[out_param];
  if (!po->written || pi->written || pi->numel != po->numel || pi->numel <= 0 ||
      sc_dtype_size(pi->dtype) != sc_dtype_size(po->dtype))
    return false;
  if (k->n_segs > 0) { /* within one segment, where the template's params are aligned */
    if (param / k->seg_params != out_param / k->seg_params) return false;
    param %= k->seg_params;
    out_param %= k->seg_params;
  }
  int32_t store_phase = -1;
  for (int32_t p = 0; p < k->n_phases; p++) {
    const kir_phase *ph = &k->phases[p];
    if (ph->kind != KIR_PHASE_STORE || ph->out_param != out_param) continue;
    if (store_phase >= 0) return false;
    store_phase = p;
  }
  if (store_phase < 0) return false;
  int32_t index = k->phases[store_phase].out_index;
  if (index < 0 || index >= k->n_exprs || !injective(k, index)) return false;
  /* every load of param uses `index` */
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *e = &k->exprs[i];
    if (e->op == KIR_LOAD && e->var == param && !same_index(k, e->a, index)) return false;
  }
  /* no phase after the store reads param */
  if (k->n_exprs == 0) return true;
  uint8_t *need = sc_calloc((size_t)k->n_exprs, 1);
  if (!need) return false;
  bool ok = true;
  for (int32_t p = store_phase + 1; p < k->n_phases && ok; p++) {
    memset(need, 0, (size_t)k->n_exprs);
    mark_needed(k, k->phases[p].value, need);
    if (k->phases[p].kind == KIR_PHASE_STORE) mark_needed(k, k->phases[p].out_index, need);
    for (int32_t i = 0; i < k->n_exprs && ok; i++)
      if (need[i] && k->exprs[i].op == KIR_LOAD && k->exprs[i].var == param) ok = false;
  }
  sc_free(need);
  return ok;
}
