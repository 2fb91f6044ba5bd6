/* lower_elementwise.c — POINT lowerings of the elementwise family (E of
 * ops.def) and of the views (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity).
 *
 * The value of an output element is the op's formula from
 * ir/elementwise.def, expanded here into kir builder calls (the same
 * formula constant folding expands into C, so the two agree by
 * construction; the tests still compare them). The operands are the inputs
 * read at the broadcast index and converted to the compute dtype
 * (sc_ew_compute_dtype: the input's dtype, f64 for Pow with an integer base
 * and a float exponent); the result is converted to the output dtype.
 * Attributes come parsed, defaults applied, from sc_ew_attrs_read: nothing
 * here re-reads or re-defaults them. Vocabulary words without a kir op are
 * built here: LOG1P and EXPM1 from log and exp with the Goldberg/Kahan
 * correction (small arguments keep full precision); IF picks a side while
 * building, so only that side is in the kernel.
 * Dropout lowers to its input (inference only; training mode is refused).
 * Views: out index → row-major offset → input index (div/mod); when the
 * dims other than 1 agree in order (Squeeze, Unsqueeze, Identity, most
 * Flattens of leading 1s) the index maps straight through. */
#include <math.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/elementwise.h"

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

/* NARROW(x) of elementwise.def for node n's output dtype: the bounds of a
 * saturating Cast to float8/float4 (a bound beyond an integer T's range is
 * not needed), or f8e8m0's round_mode as sc_e8m0_prepare does it, on the
 * f32 bits. */
static int32_t narrow_e(sc_lower_ctx *cx, const sc_node *n, const sc_ew_attrs *A, sc_dtype T,
                        int32_t x) {
  sc_dtype to = sc_node_output(cx->g, n, 0)->dtype;
  if (x < 0 || !sc_dtype_is_narrow(to) || !sc_dtype_is_float(to)) return x;
  const sc_dtype I = SC_DTYPE_I32;
  if (to == SC_DTYPE_F8E8M0) {
    if (!sc_dtype_is_float(T)) return x; /* integers: round up only (infer_cast) */
    if (A->round_mode == SC_E8M0_UP && A->saturate) return x;
    int32_t u = kir_bitcast(cx->arena, cx->k, I, sc_lower_cast(cx, SC_DTYPE_F32, x));
    if (u < 0) return -1;
    int32_t e = BIN(AND, BIN(SHR, u, C(I, 23)), C(I, 0xff));
    int32_t frac = BIN(NE, BIN(AND, u, C(I, 0x7fffff)), C(I, 0));
    int32_t top = BIN(EQ, e, C(I, 0xfe));
    int32_t nan = C(SC_DTYPE_F32, NAN), pow2;
    switch (A->round_mode) {
    case SC_E8M0_UP: /* not saturating: past the top exponent is NaN */
      return SEL(BIN(AND, frac, top), nan, sc_lower_cast(cx, SC_DTYPE_F32, x));
    case SC_E8M0_DOWN:
      pow2 = e;
      break;
    default: { /* nearest, as to_float8e8m0: g && (r || s || e > 0) */
      int32_t g = BIN(NE, BIN(AND, u, C(I, 0x400000)), C(I, 0));
      int32_t rs = BIN(NE, BIN(AND, u, C(I, 0x3fffff)), C(I, 0));
      int32_t up = BIN(AND, g, BIN(OR, rs, BIN(GT, e, C(I, 0))));
      if (A->saturate) up = BIN(AND, up, UN(NOT, top));
      pow2 = BIN(ADD, e, sc_lower_cast(cx, I, up));
      break;
    }
    }
    int32_t v = kir_bitcast(cx->arena, cx->k, SC_DTYPE_F32, BIN(SHL, pow2, C(I, 23)));
    if (v < 0) return -1;
    /* NaN and inf (e == 0xff) stay: their code is 0xff either way */
    return SEL(BIN(EQ, e, C(I, 0xff)), sc_lower_cast(cx, SC_DTYPE_F32, x), v);
  }
  if (!A->saturate) return x;
  double m = sc_narrow_max(to);
  bool fl = sc_dtype_is_float(T);
  double tmax = fl ? INFINITY : sc_dtype_is_signed(T) ? ldexp(1, 8 * (int)sc_dtype_size(T) - 1) - 1
                                                   : ldexp(1, 8 * (int)sc_dtype_size(T)) - 1;
  if (m < tmax) x = BIN(MIN, x, C(T, m));
  if ((fl || sc_dtype_is_signed(T)) && m < tmax) x = BIN(MAX, x, C(T, -m));
  return x;
}

/* ---- the formulas of elementwise.def as kir ---- */

#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define CONST(c) C(T, (c))
#define FALSE C(SC_DTYPE_BOOL, 0)
#define ADD(a, b) BIN(ADD, a, b)
#define SUB(a, b) BIN(SUB, a, b)
#define MUL(a, b) BIN(MUL, a, b)
#define DIV(a, b) BIN(DIV, a, b)
#define MOD(a, b) BIN(MOD, a, b)
#define POW(a, b) BIN(POW, a, b)
#define MIN(a, b) BIN(MIN, a, b)
#define MAX(a, b) BIN(MAX, a, b)
#define NEG(a) UN(NEG, a)
#define ABS(a) UN(ABS, a)
#define EXP(a) UN(EXP, a)
#define LOG(a) UN(LOG, a)
#define SQRT(a) UN(SQRT, a)
#define RECIP(a) UN(RECIP, a)
#define TANH(a) UN(TANH, a)
#define ATAN(a) UN(ATAN, a)
#define ERF(a) UN(ERF, a)
#define SIN(a) UN(SIN, a)
#define COS(a) UN(COS, a)
#define FLOOR(a) UN(FLOOR, a)
#define CEIL(a) UN(CEIL, a)
#define ROUND(a) UN(ROUND, a)
#define SIGMOID(a) UN(SIGMOID, a)
#define LOG1P(a) log1p_e(cx, T, a)
#define EXPM1(a) expm1_e(cx, T, a)
#define ISNAN(a) UN(ISNAN, a)
#define ISINF(a) UN(ISINF, a)
#define EQ(a, b) BIN(EQ, a, b)
#define NE(a, b) BIN(NE, a, b)
#define LT(a, b) BIN(LT, a, b)
#define LE(a, b) BIN(LE, a, b)
#define GT(a, b) BIN(GT, a, b)
#define GE(a, b) BIN(GE, a, b)
#define AND(a, b) BIN(AND, a, b)
#define OR(a, b) BIN(OR, a, b)
#define XOR(a, b) BIN(XOR, a, b)
#define NOT(a) UN(NOT, a)
#define BAND(a, b) BIN(AND, a, b)
#define BOR(a, b) BIN(OR, a, b)
#define BXOR(a, b) BIN(XOR, a, b)
#define BNOT(a) UN(NOT, a)
#define SHL(a, b) BIN(SHL, a, b)
#define SHR(a, b) BIN(SHR, a, b)
#define SELECT(c, a, b) SEL(c, a, b)
#define IF(c, a, b) ((c) ? (a) : (b))
#define ATTR(f) (A->f)
#define N_INPUTS (n->n_inputs)
#define PRESENT(k) (present[k])
#define IS_FLOAT sc_dtype_is_float(T)
#define IS_SIGNED (sc_dtype_is_float(T) || sc_dtype_is_signed(T))
#define NARROW(a) narrow_e(cx, n, A, T, (a))

/* One builder per row: the formula over operands x (kir exprs of dtype T,
 * WHERE's condition bool); for variadic rows the step and the finish. */
typedef int32_t (*ew_build_fn)(sc_lower_ctx *cx, const sc_node *n, const sc_ew_attrs *A,
                               sc_dtype T, const bool *present, const int32_t *x);

#define EW_BUILD(name, f)                                                               \
  static int32_t name(sc_lower_ctx *cx, const sc_node *n, const sc_ew_attrs *A,         \
                      sc_dtype T, const bool *present, const int32_t *x) {              \
    return f;                                                                           \
  }
#define EW(id, kind, cls, f) EW_BUILD(build_##id, f)
#define EW_N(id, cls, step, finish) EW_BUILD(build_##id, step) EW_BUILD(finish_##id, finish)
#define EW_ATTR(id, field, name, kind, dflt)
#include "ir/elementwise.def"
#undef EW
#undef EW_N

static const ew_build_fn ew_build[SC_OP_COUNT] = {
#define EW(id, kind, cls, f) [SC_OP_##id] = build_##id,
#define EW_N(id, cls, step, finish) [SC_OP_##id] = build_##id,
#include "ir/elementwise.def"
#undef EW
#undef EW_N
};
static const ew_build_fn ew_finish[SC_OP_COUNT] = {
#define EW(id, kind, cls, f)
#define EW_N(id, cls, step, finish) [SC_OP_##id] = finish_##id,
#include "ir/elementwise.def"
#undef EW
#undef EW_N
#undef EW_ATTR
};

/* The value of output 0 of elementwise node n at output index idx. */
static int32_t ew_point(sc_lower_ctx *cx, const sc_node *n, int32_t out, const int32_t *idx) {
  (void)out;
  const sc_ew_row *row = &sc_ew_rows[n->op];
  SC_ASSERT(row->defined && row->kind != SC_EW_COPY);
  sc_ew_attrs A;
  if (sc_ew_attrs_read(cx->g, n, &A) != SC_OK) {
    sc_lower_error(cx, n, cx->g->diag.status, "%s", cx->g->diag.msg);
    return -1;
  }
  sc_dtype T = sc_ew_compute_dtype(cx->g, n);
  sc_dtype out_t = out_val(cx, n, 0)->dtype;
  bool present[3] = {true, false, false};
  int32_t x[3] = {-1, -1, -1};
  switch (row->kind) {
  case SC_EW_UNARY: case SC_EW_CONVERT:
    x[0] = sc_lower_input_at(cx, n, 0, idx);
    break;
  case SC_EW_CLIP: {
    x[0] = sc_lower_input_at(cx, n, 0, idx);
    const bool has_attr[3] = {false, A.has_min, A.has_max};
    const double attr[3] = {0, A.min, A.max};
    for (int32_t k = 1; k < 3; k++) {
      present[k] = in_val(cx, n, k) != NULL || has_attr[k];
      if (in_val(cx, n, k)) x[k] = scalar_in(cx, n, k);
      else if (has_attr[k])
        x[k] = C(T, sc_dtype_is_float(T) ? attr[k] : (double)(int64_t)attr[k]);
    }
    break;
  }
  case SC_EW_VARIADIC: {
    int32_t acc = sc_lower_cast(cx, T, bcast_in(cx, n, 0, idx));
    for (int32_t i = 1; i < n->n_inputs && acc >= 0; i++) {
      int32_t step[2] = {acc, sc_lower_cast(cx, T, bcast_in(cx, n, i, idx))};
      acc = step[1] < 0 ? -1 : ew_build[n->op](cx, n, &A, T, present, step);
    }
    if (acc < 0) return -1;
    return sc_lower_cast(cx, out_t, ew_finish[n->op](cx, n, &A, T, present, &acc));
  }
  default: /* BINARY, WHERE */
    for (int32_t k = 0; k < (row->kind == SC_EW_WHERE ? 3 : 2); k++) {
      x[k] = bcast_in(cx, n, k, idx);
      present[k] = true;
    }
    break;
  }
  for (int32_t k = 0; k < 3; k++) {
    if (present[k] && x[k] < 0) return -1;
    if (x[k] >= 0 && !(row->kind == SC_EW_WHERE && k == 0)) x[k] = sc_lower_cast(cx, T, x[k]);
  }
  return sc_lower_cast(cx, out_t, ew_build[n->op](cx, n, &A, T, present, x));
}

const sc_lowering sc_lw_unary = {SC_LOWER_POINT, ew_point, NULL};
const sc_lowering sc_lw_binary = {SC_LOWER_POINT, ew_point, NULL};
const sc_lowering sc_lw_variadic = {SC_LOWER_POINT, ew_point, NULL};
const sc_lowering sc_lw_where = {SC_LOWER_POINT, ew_point, NULL};
const sc_lowering sc_lw_cast = {SC_LOWER_POINT, ew_point, NULL};
const sc_lowering sc_lw_clip = {SC_LOWER_POINT, ew_point, NULL};

/* BitCast: kir's bitcast of the input element. */
static int32_t bitcast_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                             const int32_t *idx) {
  (void)out;
  int32_t x = sc_lower_input_at(cx, n, 0, idx);
  if (x < 0) return -1;
  return kir_bitcast(cx->arena, cx->k, sc_node_output(cx->g, n, 0)->dtype, x);
}

const sc_lowering sc_lw_bitcast = {SC_LOWER_POINT, bitcast_point, NULL};

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
