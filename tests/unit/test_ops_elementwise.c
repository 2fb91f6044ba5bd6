/* test_ops_elementwise.c — shape rules, errors, cost and constant evaluation
 * of the elementwise ops (family E of ops.def), called directly through the
 * ops table on small hand-built graphs. Expected values are computed here
 * with plain C math on seeded pseudo-random inputs. Tolerances: f64 results
 * 1e-12 relative (the same double formulas, in a different order); f32
 * results 1e-6 relative (one float rounding); NaN always fails unless a NaN
 * is the expected value. */
#include <stdlib.h>

#include "ir/elementwise.h"
#include "ir/op_util.h"
#include "test_util.h"

/* ---- broadcasting and dtype errors ---- */

static void test_broadcast_shapes(void **state) {
  sc_graph *g = *state;
  rng_seed(1);
  int64_t da[] = {2, 3, 1, 5}, db[] = {4, 5};
  double a[30], b[20];
  for (int i = 0; i < 30; i++) a[i] = rnd_nz(-2, 2);
  for (int i = 0; i < 20; i++) b[i] = rnd_nz(-2, 2);
  int32_t ins[2] = {cst(g, SC_DTYPE_F64, 4, da, a), cst(g, SC_DTYPE_F64, 2, db, b)}, o;
  int32_t nid = node1(g, SC_OP_SUB, "sub", ins, 2, &o);
  run_ok(g, nid);
  int64_t want[] = {2, 3, 4, 5};
  check_shape(g, o, SC_DTYPE_F64, 4, want);
  const double *r = g->values[o].data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++)
        for (int l = 0; l < 5; l++)
          near(r[((i * 3 + j) * 4 + k) * 5 + l], a[(i * 3 + j) * 5 + l] - b[k * 5 + l], 0);

  int64_t d3[] = {3}, d4[] = {4};
  int32_t bad[2] = {inp(g, SC_DTYPE_F32, 1, d3), inp(g, SC_DTYPE_F32, 1, d4)};
  nid = node1(g, SC_OP_ADD, "add_bad", bad, 2, &o);
  expect_error(g, infer(g, nid), SC_ERR_INVALID, "add_bad", "broadcast");
}

static void test_dtype_mismatch(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {3};
  int32_t ins[2] = {inp(g, SC_DTYPE_F32, 1, d), inp(g, SC_DTYPE_I64, 1, d)}, o;
  int32_t nid = node1(g, SC_OP_MUL, "mul_mixed", ins, 2, &o);
  expect_error(g, infer(g, nid), SC_ERR_INVALID, "mul_mixed", "dtype");
}

static void test_pow_mixed_dtype_ok(void **state) {
  sc_graph *g = *state;
  rng_seed(2);
  int64_t d[] = {5};
  float base[5];
  int32_t e[5] = {2, 3, -1, 0, 4};
  for (int i = 0; i < 5; i++) base[i] = (float)rnd_nz(0.5, 2);
  int32_t ins[2] = {cst(g, SC_DTYPE_F32, 1, d, base), cst(g, SC_DTYPE_I32, 1, d, e)}, o;
  int32_t nid = node1(g, SC_OP_POW, "pow", ins, 2, &o);
  run_ok(g, nid);
  check_shape(g, o, SC_DTYPE_F32, 1, d);
  const float *r = g->values[o].data;
  for (int i = 0; i < 5; i++) {
    double w = 1;
    for (int k = 0; k < abs(e[i]); k++) w *= base[i];
    if (e[i] < 0) w = 1 / w;
    near(r[i], w, 1e-6);
  }
}

static void test_logical_needs_bool(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {2};
  int32_t ins[2] = {inp(g, SC_DTYPE_F32, 1, d), inp(g, SC_DTYPE_F32, 1, d)}, o;
  int32_t nid = node1(g, SC_OP_AND, "and_f", ins, 2, &o);
  expect_error(g, infer(g, nid), SC_ERR_INVALID, "and_f", "bool");
}

/* ---- unary ops ---- */

static double ref_unary(sc_op op, double x) {
  double sp = log(1 + exp(x));
  switch (op) {
  case SC_OP_ABS: return x < 0 ? -x : x;
  case SC_OP_NEG: return -x;
  case SC_OP_EXP: return exp(x);
  case SC_OP_LOG: return log(x);
  case SC_OP_SQRT: return sqrt(x);
  case SC_OP_RECIPROCAL: return 1 / x;
  case SC_OP_RELU: return x > 0 ? x : 0;
  case SC_OP_SIGMOID: return 1 / (1 + exp(-x));
  case SC_OP_TANH: return (exp(2 * x) - 1) / (exp(2 * x) + 1);
  case SC_OP_ERF: return erf(x);
  case SC_OP_SIN: return sin(x);
  case SC_OP_COS: return cos(x);
  case SC_OP_FLOOR: return floor(x);
  case SC_OP_CEIL: return ceil(x);
  case SC_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
  case SC_OP_SOFTPLUS: return sp;
  case SC_OP_HARD_SIGMOID: { double y = 0.2 * x + 0.5; return y < 0 ? 0 : y > 1 ? 1 : y; }
  case SC_OP_HARD_SWISH: { double y = x / 6 + 0.5; return x * (y < 0 ? 0 : y > 1 ? 1 : y); }
  case SC_OP_LEAKY_RELU: return x >= 0 ? x : 0.01 * x;
  case SC_OP_ELU: return x >= 0 ? x : exp(x) - 1;
  case SC_OP_SELU:
    return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * (exp(x) - 1));
  case SC_OP_MISH: return x * tanh(sp);
  case SC_OP_GELU: return x * 0.5 * (1 + erf(x * 0.70710678118654752440));
  default: fail_msg("no reference"); return 0;
  }
}

static void test_unary_eval(void **state) {
  sc_graph *g = *state;
  static const sc_op ops[] = {
      SC_OP_ABS,     SC_OP_NEG,        SC_OP_EXP,          SC_OP_LOG,        SC_OP_SQRT,
      SC_OP_RECIPROCAL, SC_OP_RELU,    SC_OP_SIGMOID,      SC_OP_TANH,       SC_OP_ERF,
      SC_OP_SIN,     SC_OP_COS,        SC_OP_FLOOR,        SC_OP_CEIL,       SC_OP_SIGN,
      SC_OP_SOFTPLUS, SC_OP_HARD_SIGMOID, SC_OP_HARD_SWISH, SC_OP_LEAKY_RELU, SC_OP_ELU,
      SC_OP_SELU,    SC_OP_MISH,       SC_OP_GELU};
  rng_seed(3);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    bool pos = ops[k] == SC_OP_LOG || ops[k] == SC_OP_SQRT;
    int64_t d[] = {4, 3};
    double x64[12];
    float x32[12];
    for (int i = 0; i < 12; i++) {
      x64[i] = pos ? rnd(0.1, 5) : rnd_nz(-4, 4);
      x32[i] = (float)x64[i];
    }
    /* f64 */
    int32_t in = cst(g, SC_DTYPE_F64, 2, d, x64), o;
    int32_t nid = node1(g, ops[k], NULL, &in, 1, &o);
    run_ok(g, nid);
    check_shape(g, o, SC_DTYPE_F64, 2, d);
    const double *r = g->values[o].data;
    for (int i = 0; i < 12; i++) near(r[i], ref_unary(ops[k], x64[i]), 1e-12);
    /* f32 */
    in = cst(g, SC_DTYPE_F32, 2, d, x32);
    nid = node1(g, ops[k], NULL, &in, 1, &o);
    run_ok(g, nid);
    check_shape(g, o, SC_DTYPE_F32, 2, d);
    const float *rf = g->values[o].data;
    for (int i = 0; i < 12; i++) near(rf[i], ref_unary(ops[k], x32[i]), 1e-6);
  }
}

static void test_unary_attrs_and_special(void **state) {
  sc_graph *g = *state;
  rng_seed(4);
  int64_t d[] = {6};
  double x[6];
  for (int i = 0; i < 6; i++) x[i] = rnd_nz(-3, 3);
  /* LeakyRelu alpha, Elu alpha, HardSigmoid alpha/beta, Gelu tanh */
  int32_t in = cst(g, SC_DTYPE_F64, 1, d, x), o1, o2, o3, o4;
  int32_t n1 = node1(g, SC_OP_LEAKY_RELU, "lr", &in, 1, &o1);
  set_float(g, n1, "alpha", 0.3);
  int32_t n2 = node1(g, SC_OP_ELU, "elu", &in, 1, &o2);
  set_float(g, n2, "alpha", 2.0);
  int32_t n3 = node1(g, SC_OP_HARD_SIGMOID, "hs", &in, 1, &o3);
  set_float(g, n3, "alpha", 0.4);
  set_float(g, n3, "beta", 0.25);
  int32_t n4 = node1(g, SC_OP_GELU, "gelu", &in, 1, &o4);
  set_string(g, n4, "approximate", "tanh");
  run_ok(g, n1), run_ok(g, n2), run_ok(g, n3), run_ok(g, n4);
  for (int i = 0; i < 6; i++) {
    near(((const double *)g->values[o1].data)[i], x[i] >= 0 ? x[i] : 0.3 * x[i], 1e-12);
    near(((const double *)g->values[o2].data)[i], x[i] >= 0 ? x[i] : 2 * (exp(x[i]) - 1),
         1e-12);
    double h = 0.4 * x[i] + 0.25;
    near(((const double *)g->values[o3].data)[i], h < 0 ? 0 : h > 1 ? 1 : h, 1e-12);
    double t = tanh(0.7978845608028654 * (x[i] + 0.044715 * pow(x[i], 3)));
    near(((const double *)g->values[o4].data)[i], 0.5 * x[i] * (1 + t), 1e-12);
  }
  int32_t o5, n5 = node1(g, SC_OP_GELU, "gelu_bad", &in, 1, &o5);
  set_string(g, n5, "approximate", "fast");
  expect_error(g, infer(g, n5), SC_ERR_INVALID, "gelu_bad", "approximate");
}

static void test_round_half_even(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {7};
  float x[7] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.4f, -3.6f};
  float w[7] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, 2.0f, -4.0f};
  int32_t in = cst(g, SC_DTYPE_F32, 1, d, x), o;
  run_ok(g, node1(g, SC_OP_ROUND, "round", &in, 1, &o));
  const float *r = g->values[o].data;
  for (int i = 0; i < 7; i++) near(r[i], w[i], 0);
}

static void test_int_unary_and_not(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {4};
  int64_t x[4] = {-5, 7, INT64_MIN + 1, 3};
  int32_t in = cst(g, SC_DTYPE_I64, 1, d, x), oa, on, osg, orl;
  run_ok(g, node1(g, SC_OP_ABS, "abs", &in, 1, &oa));
  run_ok(g, node1(g, SC_OP_NEG, "neg", &in, 1, &on));
  run_ok(g, node1(g, SC_OP_SIGN, "sign", &in, 1, &osg));
  run_ok(g, node1(g, SC_OP_RELU, "relu", &in, 1, &orl));
  for (int i = 0; i < 4; i++) {
    assert_int_equal(((const int64_t *)g->values[oa].data)[i], x[i] < 0 ? -x[i] : x[i]);
    assert_int_equal(((const int64_t *)g->values[on].data)[i], -x[i]);
    assert_int_equal(((const int64_t *)g->values[osg].data)[i], x[i] < 0 ? -1 : 1);
    assert_int_equal(((const int64_t *)g->values[orl].data)[i], x[i] < 0 ? 0 : x[i]);
  }
  uint8_t b[3] = {1, 0, 1};
  int64_t d3[] = {3};
  int32_t bi = cst(g, SC_DTYPE_BOOL, 1, d3, b), ob;
  run_ok(g, node1(g, SC_OP_NOT, "not", &bi, 1, &ob));
  check_shape(g, ob, SC_DTYPE_BOOL, 1, d3);
  for (int i = 0; i < 3; i++) assert_int_equal(((const uint8_t *)g->values[ob].data)[i], !b[i]);
  /* Not on floats is an error; Exp on ints too */
  int32_t fi = inp(g, SC_DTYPE_F32, 1, d3), o;
  expect_error(g, infer(g, node1(g, SC_OP_NOT, "not_f", &fi, 1, &o)), SC_ERR_INVALID,
               "not_f", NULL);
  sc_diag_clear(&g->diag);
  expect_error(g, infer(g, node1(g, SC_OP_EXP, "exp_i", &in, 1, &o)), SC_ERR_INVALID,
               "exp_i", NULL);
}

static void test_isnan_isinf(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {5};
  float x[5] = {1.25f, NAN, INFINITY, -INFINITY, -3.5f};
  int32_t in = cst(g, SC_DTYPE_F32, 1, d, x), on, oi, oi2;
  run_ok(g, node1(g, SC_OP_IS_NAN, "isnan", &in, 1, &on));
  run_ok(g, node1(g, SC_OP_IS_INF, "isinf", &in, 1, &oi));
  int32_t n3 = node1(g, SC_OP_IS_INF, "isinf_pos", &in, 1, &oi2);
  set_int(g, n3, "detect_negative", 0);
  run_ok(g, n3);
  check_shape(g, on, SC_DTYPE_BOOL, 1, d);
  check_shape(g, oi, SC_DTYPE_BOOL, 1, d);
  const uint8_t *rn = g->values[on].data, *ri = g->values[oi].data, *rp = g->values[oi2].data;
  for (int i = 0; i < 5; i++) {
    assert_int_equal(rn[i], isnan(x[i]) ? 1 : 0);
    assert_int_equal(ri[i], isinf(x[i]) ? 1 : 0);
    assert_int_equal(rp[i], isinf(x[i]) && x[i] > 0 ? 1 : 0);
  }
}

/* ---- integer arithmetic ---- */

static void test_int64_exact(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {4};
  const int64_t p53 = (int64_t)1 << 53;
  int64_t a[4] = {p53 + 1, p53 + 3, -(p53 + 5), (int64_t)3037000493};
  int64_t b[4] = {2, -(p53 + 1), 7, (int64_t)3037000453};
  int32_t ins[2] = {cst(g, SC_DTYPE_I64, 1, d, a), cst(g, SC_DTYPE_I64, 1, d, b)};
  int32_t oa, os, om;
  run_ok(g, node1(g, SC_OP_ADD, "add", ins, 2, &oa));
  run_ok(g, node1(g, SC_OP_SUB, "sub", ins, 2, &os));
  run_ok(g, node1(g, SC_OP_MUL, "mul", ins, 2, &om));
  const int64_t *ra = g->values[oa].data, *rs = g->values[os].data, *rm = g->values[om].data;
  assert_int_equal(ra[0], p53 + 3);
  assert_int_equal(ra[1], 2);
  assert_int_equal(ra[2], -(p53 - 2));
  assert_int_equal(rs[0], p53 - 1);
  assert_int_equal(rs[1], 2 * p53 + 4);
  assert_int_equal(rm[0], 2 * p53 + 2);
  assert_int_equal(rm[2], -(7 * p53 + 35));
  /* 3037000493 * 3037000453: exact value, well above 2^53 */
  assert_int_equal(rm[3], (int64_t)((__int128)a[3] * b[3]));
  assert_true((__int128)a[3] * b[3] > ((__int128)1 << 62)); /* no wrap involved */
  /* integer Pow exact: 3^39 */
  int64_t three[1] = {3}, e39[1] = {39}, one[] = {1};
  int32_t pins[2] = {cst(g, SC_DTYPE_I64, 1, one, three), cst(g, SC_DTYPE_I64, 1, one, e39)};
  int32_t op;
  run_ok(g, node1(g, SC_OP_POW, "pow_i", pins, 2, &op));
  int64_t w = 1;
  for (int i = 0; i < 39; i++) w *= 3;
  assert_int_equal(((const int64_t *)g->values[op].data)[0], w);
}

static void test_int_div_mod_signs(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {8};
  int32_t a[8] = {7, -7, 7, -7, 9, -9, 6, -1};
  int32_t b[8] = {2, 2, -2, -2, 4, 4, -3, 5};
  int32_t ins[2] = {cst(g, SC_DTYPE_I32, 1, d, a), cst(g, SC_DTYPE_I32, 1, d, b)};
  int32_t od, om, of;
  run_ok(g, node1(g, SC_OP_DIV, "div", ins, 2, &od));
  run_ok(g, node1(g, SC_OP_MOD, "mod", ins, 2, &om));
  int32_t nf = node1(g, SC_OP_MOD, "fmod", ins, 2, &of);
  set_int(g, nf, "fmod", 1);
  run_ok(g, nf);
  check_shape(g, od, SC_DTYPE_I32, 1, d);
  const int32_t *rd = g->values[od].data, *rm = g->values[om].data, *rf = g->values[of].data;
  for (int i = 0; i < 8; i++) {
    double q = (double)a[i] / b[i];
    assert_int_equal(rd[i], (int32_t)trunc(q));                  /* toward zero */
    assert_int_equal(rm[i], (int32_t)(a[i] - floor(q) * b[i]));  /* Python */
    assert_int_equal(rf[i], (int32_t)fmod(a[i], b[i]));          /* C */
  }
  /* float Mod with fmod=0 (opset 28): x - floor(x / y) y, the sign of y; a
   * zero result takes y's sign; a finite x over an infinite y of the other
   * sign gives y */
  float fa[8] = {5.5f, -5.5f, 5.5f, -5.5f, 0.0f, 3.0f, -3.0f, 7.0f};
  float fb[8] = {2.0f, 2.0f, -2.0f, -2.0f, -3.0f, INFINITY, INFINITY, -INFINITY};
  float fw[8] = {1.5f, 0.5f, -0.5f, -1.5f, -0.0f, 3.0f, INFINITY, -INFINITY};
  int32_t fins[2] = {cst(g, SC_DTYPE_F32, 1, d, fa), cst(g, SC_DTYPE_F32, 1, d, fb)}, o;
  run_ok(g, node1(g, SC_OP_MOD, "mod_f", fins, 2, &o));
  const float *rff = g->values[o].data;
  for (int i = 0; i < 8; i++) {
    assert_true(rff[i] == fw[i]);
    assert_int_equal(signbit(rff[i]) != 0, signbit(fw[i]) != 0);
  }
  /* integer division by zero is an error, not a crash */
  int32_t z[8] = {1, 2, 3, 4, 5, 6, 0, 8};
  int32_t zins[2] = {ins[0], cst(g, SC_DTYPE_I32, 1, d, z)};
  int32_t nz = node1(g, SC_OP_DIV, "div0", zins, 2, &o);
  assert_int_equal(infer(g, nz), SC_OK);
  expect_error(g, eval(g, nz), SC_ERR_INVALID, "div0", "zero");
}

/* ---- Cast ---- */

static void test_cast(void **state) {
  sc_graph *g = *state;
  rng_seed(5);
  int64_t d[] = {6};
  float x[6] = {-2.75f, 3.5f, 0.0f, 1.0f, -0.25f, 2.25f};
  int32_t in = cst(g, SC_DTYPE_F32, 1, d, x), oi, ob, oh, ob2;
  int32_t n1 = node1(g, SC_OP_CAST, "to_i64", &in, 1, &oi);
  set_int(g, n1, "to", 7);
  int32_t n2 = node1(g, SC_OP_CAST, "to_bool", &in, 1, &ob);
  set_int(g, n2, "to", 9);
  int32_t n3 = node1(g, SC_OP_CAST, "to_f16", &in, 1, &oh);
  set_int(g, n3, "to", 10);
  run_ok(g, n1), run_ok(g, n2), run_ok(g, n3);
  check_shape(g, oi, SC_DTYPE_I64, 1, d);
  check_shape(g, ob, SC_DTYPE_BOOL, 1, d);
  check_shape(g, oh, SC_DTYPE_F16, 1, d);
  const int64_t *ri = g->values[oi].data;
  const uint8_t *rb = g->values[ob].data;
  for (int i = 0; i < 6; i++) {
    assert_int_equal(ri[i], (int64_t)truncf(x[i]));
    assert_int_equal(rb[i], x[i] != 0);
  }
  /* f16 back to f32: these values are exact in f16 */
  int32_t n4 = node1(g, SC_OP_CAST, "back", &oh, 1, &ob2);
  set_int(g, n4, "to", 1);
  run_ok(g, n4);
  for (int i = 0; i < 6; i++) near(((const float *)g->values[ob2].data)[i], x[i], 0);
  /* random values to f16 and back: within half an f16 ulp (2^-11 relative) */
  float y[16];
  int64_t d16[] = {16};
  for (int i = 0; i < 16; i++) y[i] = (float)rnd_nz(-100, 100);
  int32_t yi = cst(g, SC_DTYPE_F32, 1, d16, y), yh, yb;
  int32_t n5 = node1(g, SC_OP_CAST, NULL, &yi, 1, &yh);
  set_int(g, n5, "to", 10);
  run_ok(g, n5);
  int32_t likein[2] = {yh, yi};
  run_ok(g, node1(g, SC_OP_CAST_LIKE, "like", likein, 2, &yb));
  check_shape(g, yb, SC_DTYPE_F32, 1, d16);
  for (int i = 0; i < 16; i++)
    near(((const float *)g->values[yb].data)[i], y[i], 1.0 / 2048 * fabs(y[i]) / fmax(1, fabs(y[i])));
  /* bool to float: 0/1 */
  int32_t fb;
  int32_t n6 = node1(g, SC_OP_CAST, "b2f", &ob, 1, &fb);
  set_int(g, n6, "to", 1);
  run_ok(g, n6);
  for (int i = 0; i < 6; i++)
    near(((const float *)g->values[fb].data)[i], x[i] != 0 ? 1.0 : 0.0, 0);
  /* unsupported target */
  int32_t os, n7 = node1(g, SC_OP_CAST, "to_string", &in, 1, &os);
  set_int(g, n7, "to", 8);
  expect_error(g, infer(g, n7), SC_ERR_UNSUPPORTED, "to_string", "unsupported 'to' type 8");
}

/* ---- Where, Clip, Dropout, comparisons, variadic ---- */

static void test_where_broadcast(void **state) {
  sc_graph *g = *state;
  rng_seed(6);
  int64_t dc[] = {2, 1}, dx[] = {1, 3};
  uint8_t c[2] = {1, 0};
  float x[3], y[1] = {(float)rnd_nz(-5, 5)};
  for (int i = 0; i < 3; i++) x[i] = (float)rnd_nz(-5, 5);
  int32_t ins[3] = {cst(g, SC_DTYPE_BOOL, 2, dc, c), cst(g, SC_DTYPE_F32, 2, dx, x),
                    cst(g, SC_DTYPE_F32, 0, NULL, y)};
  int32_t o;
  run_ok(g, node1(g, SC_OP_WHERE, "where", ins, 3, &o));
  int64_t want[] = {2, 3};
  check_shape(g, o, SC_DTYPE_F32, 2, want);
  const float *r = g->values[o].data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) near(r[i * 3 + j], c[i] ? x[j] : y[0], 0);
  /* condition must be bool */
  int32_t bad[3] = {ins[1], ins[1], ins[2]};
  expect_error(g, infer(g, node1(g, SC_OP_WHERE, "where_bad", bad, 3, &o)), SC_ERR_INVALID,
               "where_bad", "bool");
}

static void test_clip(void **state) {
  sc_graph *g = *state;
  rng_seed(7);
  int64_t d[] = {10};
  double x[10];
  for (int i = 0; i < 10; i++) x[i] = rnd_nz(-4, 4);
  double lo = -1.5, hi = 2.0;
  int32_t xi = cst(g, SC_DTYPE_F64, 1, d, x);
  int32_t ins[3] = {xi, cst(g, SC_DTYPE_F64, 0, NULL, &lo), cst(g, SC_DTYPE_F64, 0, NULL, &hi)};
  int32_t o1, o2;
  run_ok(g, node1(g, SC_OP_CLIP, "clip", ins, 3, &o1));
  int32_t ins2[3] = {xi, -1, ins[2]}; /* no min */
  run_ok(g, node1(g, SC_OP_CLIP, "clip_max", ins2, 3, &o2));
  for (int i = 0; i < 10; i++) {
    near(((const double *)g->values[o1].data)[i], fmin(hi, fmax(lo, x[i])), 0);
    near(((const double *)g->values[o2].data)[i], fmin(hi, x[i]), 0);
  }
  /* int clip */
  int64_t xi64[4] = {-9, 3, 12, 5}, l = 0, h = 10;
  int64_t d4[] = {4};
  int32_t ii[3] = {cst(g, SC_DTYPE_I64, 1, d4, xi64), cst(g, SC_DTYPE_I64, 0, NULL, &l),
                   cst(g, SC_DTYPE_I64, 0, NULL, &h)};
  int32_t o3;
  run_ok(g, node1(g, SC_OP_CLIP, "clip_i", ii, 3, &o3));
  for (int i = 0; i < 4; i++)
    assert_int_equal(((const int64_t *)g->values[o3].data)[i],
                     xi64[i] < l ? l : xi64[i] > h ? h : xi64[i]);
}

static void test_dropout(void **state) {
  sc_graph *g = *state;
  rng_seed(8);
  int64_t d[] = {2, 3};
  float x[6];
  for (int i = 0; i < 6; i++) x[i] = (float)rnd_nz(-3, 3);
  int32_t xi = cst(g, SC_DTYPE_F32, 2, d, x);
  int32_t outs[2] = {outv(g), outv(g)};
  int32_t nid = sc_graph_add_node(g, SC_OP_DROPOUT, "drop", &xi, 1, outs, 2);
  run_ok(g, nid);
  check_shape(g, outs[0], SC_DTYPE_F32, 2, d);
  check_shape(g, outs[1], SC_DTYPE_BOOL, 2, d);
  for (int i = 0; i < 6; i++) {
    near(((const float *)g->values[outs[0]].data)[i], x[i], 0);
    assert_int_equal(((const uint8_t *)g->values[outs[1]].data)[i], 1);
  }
  /* training mode with a non-zero ratio is random: not folded */
  float ratio = 0.5f;
  uint8_t train = 1;
  int32_t ins[3] = {xi, cst(g, SC_DTYPE_F32, 0, NULL, &ratio), cst(g, SC_DTYPE_BOOL, 0, NULL, &train)};
  int32_t o;
  int32_t n2 = node1(g, SC_OP_DROPOUT, "drop_train", ins, 3, &o);
  assert_int_equal(infer(g, n2), SC_OK);
  expect_error(g, eval(g, n2), SC_ERR_UNSUPPORTED, "drop_train", "training");
}

static void test_compare_and_logical(void **state) {
  sc_graph *g = *state;
  rng_seed(9);
  int64_t da[] = {3, 4}, db[] = {4};
  double a[12], b[4];
  for (int i = 0; i < 12; i++) a[i] = (double)(int)rnd(-3, 3);
  for (int i = 0; i < 4; i++) b[i] = (double)(int)rnd(-3, 3);
  int32_t ins[2] = {cst(g, SC_DTYPE_F64, 2, da, a), cst(g, SC_DTYPE_F64, 1, db, b)};
  static const sc_op ops[] = {SC_OP_EQUAL, SC_OP_LESS, SC_OP_LESS_EQUAL, SC_OP_GREATER,
                              SC_OP_GREATER_EQUAL};
  for (int k = 0; k < 5; k++) {
    int32_t o;
    run_ok(g, node1(g, ops[k], NULL, ins, 2, &o));
    check_shape(g, o, SC_DTYPE_BOOL, 2, da);
    const uint8_t *r = g->values[o].data;
    for (int i = 0; i < 12; i++) {
      double x = a[i], y = b[i % 4];
      int w = k == 0 ? x == y : k == 1 ? x < y : k == 2 ? x <= y : k == 3 ? x > y : x >= y;
      assert_int_equal(r[i], w);
    }
  }
  uint8_t p[4] = {0, 0, 1, 1}, q[4] = {0, 1, 0, 1};
  int64_t d4[] = {4};
  int32_t bins[2] = {cst(g, SC_DTYPE_BOOL, 1, d4, p), cst(g, SC_DTYPE_BOOL, 1, d4, q)};
  int32_t oa, oo, ox;
  run_ok(g, node1(g, SC_OP_AND, "and", bins, 2, &oa));
  run_ok(g, node1(g, SC_OP_OR, "or", bins, 2, &oo));
  run_ok(g, node1(g, SC_OP_XOR, "xor", bins, 2, &ox));
  for (int i = 0; i < 4; i++) {
    assert_int_equal(((const uint8_t *)g->values[oa].data)[i], p[i] & q[i]);
    assert_int_equal(((const uint8_t *)g->values[oo].data)[i], p[i] | q[i]);
    assert_int_equal(((const uint8_t *)g->values[ox].data)[i], p[i] ^ q[i]);
  }
}

static void test_variadic(void **state) {
  sc_graph *g = *state;
  rng_seed(10);
  int64_t d1[] = {2, 3}, d2[] = {3}, d3[] = {2, 1};
  double a[6], b[3], c[2];
  for (int i = 0; i < 6; i++) a[i] = rnd_nz(-5, 5);
  for (int i = 0; i < 3; i++) b[i] = rnd_nz(-5, 5);
  for (int i = 0; i < 2; i++) c[i] = rnd_nz(-5, 5);
  int32_t ins[3] = {cst(g, SC_DTYPE_F64, 2, d1, a), cst(g, SC_DTYPE_F64, 1, d2, b),
                    cst(g, SC_DTYPE_F64, 2, d3, c)};
  int32_t omax, omin, osum, omean;
  int32_t nmax = node1(g, SC_OP_MAX, "max", ins, 3, &omax);
  run_ok(g, nmax);
  run_ok(g, node1(g, SC_OP_MIN, "min", ins, 3, &omin));
  int32_t nsum = node1(g, SC_OP_SUM, "sum", ins, 3, &osum);
  run_ok(g, nsum);
  run_ok(g, node1(g, SC_OP_MEAN, "mean", ins, 3, &omean));
  check_shape(g, omax, SC_DTYPE_F64, 2, d1);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      double x = a[i * 3 + j], y = b[j], z = c[i];
      near(((const double *)g->values[omax].data)[i * 3 + j], fmax(x, fmax(y, z)), 0);
      near(((const double *)g->values[omin].data)[i * 3 + j], fmin(x, fmin(y, z)), 0);
      near(((const double *)g->values[osum].data)[i * 3 + j], x + y + z, 1e-15);
      near(((const double *)g->values[omean].data)[i * 3 + j], (x + y + z) / 3, 1e-15);
    }
  /* cost: Sum of 3 inputs = 2 flops per output element; bytes in + out */
  sc_cost cost;
  sc_ops[SC_OP_SUM].cost(g, &g->nodes[nsum], &cost);
  near(cost.flops, 2 * 6, 0);
  near(cost.bytes, 8 * (6 + 3 + 2 + 6), 0);
  /* NaN propagates through Max and Min */
  float nan_one[2] = {NAN, 2.5f}, one[2] = {1.0f, -1.0f};
  int64_t dd[] = {2};
  int32_t nins[2] = {cst(g, SC_DTYPE_F32, 1, dd, nan_one), cst(g, SC_DTYPE_F32, 1, dd, one)};
  int32_t nmx, nmn;
  run_ok(g, node1(g, SC_OP_MAX, "max_nan", nins, 2, &nmx));
  int32_t rev[2] = {nins[1], nins[0]};
  run_ok(g, node1(g, SC_OP_MIN, "min_nan", rev, 2, &nmn));
  assert_true(isnan(((const float *)g->values[nmx].data)[0]));
  assert_true(isnan(((const float *)g->values[nmn].data)[0]));
  near(((const float *)g->values[nmx].data)[1], 2.5, 0);
  near(((const float *)g->values[nmn].data)[1], -1.0, 0);
}

static void test_cost_binary_and_identity(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {2, 3}, d1[] = {3};
  int32_t ins[2] = {inp(g, SC_DTYPE_F32, 2, d), inp(g, SC_DTYPE_F32, 1, d1)}, o, oi;
  int32_t na = node1(g, SC_OP_ADD, "add", ins, 2, &o);
  int32_t ni = node1(g, SC_OP_IDENTITY, "id", ins, 1, &oi);
  assert_int_equal(infer(g, na), SC_OK);
  assert_int_equal(infer(g, ni), SC_OK);
  sc_cost c;
  sc_ops[SC_OP_ADD].cost(g, &g->nodes[na], &c);
  near(c.flops, 6, 0);
  near(c.bytes, 4 * (6 + 3 + 6), 0);
  sc_ops[SC_OP_IDENTITY].cost(g, &g->nodes[ni], &c);
  near(c.flops, 0, 0);
  near(c.bytes, 4 * (6 + 6), 0);
}

static void test_fold_limit(void **state) {
  sc_graph *g = *state;
  int64_t big = SC_FOLD_MAX_ELEMENTS + 1;
  float *x = sc_malloc((size_t)big * sizeof(float));
  assert_non_null(x);
  for (int64_t i = 0; i < big; i++) x[i] = 1.0f + (float)(i & 7);
  int64_t d[] = {big};
  int32_t in = cst(g, SC_DTYPE_F32, 1, d, x), o;
  sc_free(x);
  int32_t nid = node1(g, SC_OP_NEG, "neg_big", &in, 1, &o);
  assert_int_equal(infer(g, nid), SC_OK);
  expect_error(g, eval(g, nid), SC_ERR_LIMIT, "neg_big", NULL);
}

/* Where moves values bit for bit: an f16 NaN payload and -0 survive. */
static void test_where_bits(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {4};
  uint8_t c[4] = {1, 0, 1, 0};
  uint16_t x[4] = {0x7c01, 0x3c00, 0x8000, 0x3c00}, y[4] = {0, 0xfe03, 0, 0x8000};
  int32_t ins[3] = {cst(g, SC_DTYPE_BOOL, 1, d, c), cst(g, SC_DTYPE_F16, 1, d, x),
                    cst(g, SC_DTYPE_F16, 1, d, y)}, o;
  int32_t nid = node1(g, SC_OP_WHERE, "where_bits", ins, 3, &o);
  run_ok(g, nid);
  const uint16_t *r = g->values[o].data;
  static const uint16_t want[4] = {0x7c01, 0xfe03, 0x8000, 0x8000};
  for (int i = 0; i < 4; i++) assert_int_equal(r[i], want[i]);
}

/* ---- the elementwise table (ir/elementwise.def) ---- */

/* Every op flagged elementwise in ops.def has a row, and no other op has. */
static void test_table_complete(void **state) {
  (void)state;
  for (int op = 0; op < SC_OP_COUNT; op++) {
    bool ew = (sc_ops[op].flags & SC_OPF_ELEMENTWISE) != 0;
    if (sc_ew_rows[op].defined != ew)
      fail_msg("%s: elementwise in ops.def: %d, row in elementwise.def: %d",
               sc_op_name((sc_op)op), ew, sc_ew_rows[op].defined);
    if (ew) assert_non_null(sc_ew_rows[op].formula);
  }
}

/* Nodes without attributes get ONNX's defaults, from the one parser. */
static void test_attr_defaults(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {3};
  double x[3] = {-1, 0.5, 2};
  int32_t in = cst(g, SC_DTYPE_F64, 1, d, x), o;
  sc_ew_attrs a;
  int32_t nid = node1(g, SC_OP_SELU, "selu", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  near(a.alpha, 1.67326319217681884765625, 0);
  near(a.gamma, 1.05070102214813232421875, 0);
  nid = node1(g, SC_OP_HARD_SIGMOID, "hs", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  near(a.alpha, 0.2, 0);
  near(a.beta, 0.5, 0);
  nid = node1(g, SC_OP_LEAKY_RELU, "lr", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  near(a.alpha, 0.01, 0);
  nid = node1(g, SC_OP_ELU, "elu", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  near(a.alpha, 1.0, 0);
  nid = node1(g, SC_OP_IS_INF, "isinf", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  assert_true(a.detect_negative && a.detect_positive);
  nid = node1(g, SC_OP_GELU, "gelu", &in, 1, &o);
  assert_int_equal(sc_ew_attrs_read(g, &g->nodes[nid], &a), SC_OK);
  assert_false(a.gelu_tanh);
  /* a flag outside 0/1 is refused by shape inference */
  nid = node1(g, SC_OP_IS_INF, "isinf_bad", &in, 1, &o);
  set_int(g, nid, "detect_negative", 2);
  expect_error(g, infer(g, nid), SC_ERR_INVALID, "isinf_bad", "detect_negative");
  /* the folded values use those defaults */
  nid = node1(g, SC_OP_SELU, "selu2", &in, 1, &o);
  run_ok(g, nid);
  const double *r = g->values[o].data;
  near(r[0], 1.05070102214813232421875 * 1.67326319217681884765625 * expm1(-1.0), 1e-15);
  near(r[2], 1.05070102214813232421875 * 2, 1e-15);
  nid = node1(g, SC_OP_HARD_SIGMOID, "hs2", &in, 1, &o);
  run_ok(g, nid);
  r = g->values[o].data;
  near(r[0], 0.3, 1e-15);
  near(r[2], 0.9, 1e-15);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_broadcast_shapes, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_dtype_mismatch, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_pow_mixed_dtype_ok, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_logical_needs_bool, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_unary_eval, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_unary_attrs_and_special, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_round_half_even, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_int_unary_and_not, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_isnan_isinf, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_int64_exact, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_int_div_mod_signs, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_cast, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_where_broadcast, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_clip, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_dropout, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_compare_and_logical, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_variadic, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_cost_binary_and_identity, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_fold_limit, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_where_bits, setup_graph, teardown_graph),
      cmocka_unit_test(test_table_complete),
      cmocka_unit_test_setup_teardown(test_attr_defaults, setup_graph, teardown_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
