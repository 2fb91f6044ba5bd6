/* test_kir.c — the kernel IR (codegen/kir.c): hash-consing and
 * simplification in the builders, the verifier on broken kernels, the text
 * format against a golden string, and the reference interpreter against
 * plain C on seeded random data (broadcast add, row softmax, integer
 * division of negative numbers, f16/bf16 rounding, casts and rounding,
 * argmax ties, out-of-bounds accesses), plus the in-place legality helper. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/kir.h"

/* ---- fixtures ---- */

typedef struct fx {
  sc_arena a;
  sc_diag d;
} fx;

static int setup_fx(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  sc_arena_init(&f->a);
  sc_diag_clear(&f->d);
  *state = f;
  return 0;
}
static int teardown_fx(void **state) {
  fx *f = *state;
  sc_arena_free(&f->a);
  free(f);
  return 0;
}

static kir_kernel *mk_kernel(sc_arena *a, const char *name, int32_t rank, const int64_t *dims,
                             int64_t inner) {
  kir_kernel *k = kir_kernel_create(a, name);
  assert_non_null(k);
  k->outer_rank = rank;
  for (int32_t d = 0; d < rank; d++) k->outer_dims[d] = dims[d];
  k->inner = inner;
  return k;
}

static int32_t ci(fx *f, kir_kernel *k, int64_t v) { return kir_const_i(&f->a, k, SC_DTYPE_I64, v); }
static int32_t bin(fx *f, kir_kernel *k, kir_op op, int32_t x, int32_t y) {
  int32_t r = kir_binary(&f->a, k, op, x, y);
  assert_true(r >= 0);
  return r;
}

/* ---- builders ---- */

static void test_hash_cons(void **state) {
  fx *f = *state;
  int64_t dims[2] = {8, 64};
  kir_kernel *k = mk_kernel(&f->a, "hc", 2, dims, 1);
  int32_t p0 = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, 512, false);
  int32_t o0 = kir_var(&f->a, k, 0), o1 = kir_var(&f->a, k, 1);
  assert_int_not_equal(o0, o1);
  assert_int_equal(kir_var(&f->a, k, 0), o0);
  int32_t i1 = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 64)), o1);
  int32_t i2 = bin(f, k, KIR_ADD, o1, bin(f, k, KIR_MUL, ci(f, k, 64), o0)); /* commuted */
  assert_int_equal(i1, i2);
  int32_t l1 = kir_load(&f->a, k, p0, i1), l2 = kir_load(&f->a, k, p0, i2);
  assert_int_equal(l1, l2);
  int32_t n = k->n_exprs;
  assert_int_equal(kir_unary(&f->a, k, KIR_EXP, l1), kir_unary(&f->a, k, KIR_EXP, l2));
  assert_int_equal(k->n_exprs, n + 1);
  assert_int_equal(kir_const_f(&f->a, k, SC_DTYPE_F32, 0.1), kir_const_f(&f->a, k, SC_DTYPE_F32, 0.1));
  /* different dtype or value: different expressions */
  assert_int_not_equal(kir_const_f(&f->a, k, SC_DTYPE_F32, 1.0), kir_const_f(&f->a, k, SC_DTYPE_F64, 1.0));
  assert_int_not_equal(kir_const_f(&f->a, k, SC_DTYPE_F32, 0.0), kir_const_f(&f->a, k, SC_DTYPE_F32, -0.0));
  /* sub is not commutative */
  assert_int_not_equal(bin(f, k, KIR_SUB, o0, o1), bin(f, k, KIR_SUB, o1, o0));
  /* many expressions force the table and array to grow; ids stay stable */
  int32_t ids[300];
  for (int i = 0; i < 300; i++) ids[i] = bin(f, k, KIR_MUL, o0, ci(f, k, i + 2));
  for (int i = 0; i < 300; i++) assert_int_equal(bin(f, k, KIR_MUL, o0, ci(f, k, i + 2)), ids[i]);
  assert_int_equal(kir_verify(k, &f->d), SC_OK);
}

static void test_simplify(void **state) {
  fx *f = *state;
  int64_t dims[2] = {8, 64};
  kir_kernel *k = mk_kernel(&f->a, "simp", 2, dims, 1);
  int32_t o0 = kir_var(&f->a, k, 0), o1 = kir_var(&f->a, k, 1);
  int32_t zero = ci(f, k, 0), one = ci(f, k, 1);
  assert_int_equal(bin(f, k, KIR_ADD, o0, zero), o0);
  assert_int_equal(bin(f, k, KIR_ADD, zero, o0), o0);
  assert_int_equal(bin(f, k, KIR_SUB, o0, zero), o0);
  assert_int_equal(bin(f, k, KIR_MUL, o0, one), o0);
  assert_int_equal(bin(f, k, KIR_MUL, one, o0), o0);
  assert_int_equal(bin(f, k, KIR_MUL, o0, zero), zero);
  assert_int_equal(bin(f, k, KIR_DIV, o0, one), o0);
  assert_int_equal(bin(f, k, KIR_MOD, o0, one), zero);
  assert_int_equal(bin(f, k, KIR_SUB, o1, o1), zero);
  /* constant folding with C's truncating semantics */
  int32_t c = bin(f, k, KIR_ADD, ci(f, k, 3), ci(f, k, 4));
  assert_int_equal(k->exprs[c].op, KIR_CONST);
  assert_int_equal(k->exprs[c].i, 7);
  assert_int_equal(k->exprs[bin(f, k, KIR_DIV, ci(f, k, -7), ci(f, k, 2))].i, -3);
  assert_int_equal(k->exprs[bin(f, k, KIR_MOD, ci(f, k, -7), ci(f, k, 2))].i, -1);
  assert_int_equal(k->exprs[bin(f, k, KIR_MOD, ci(f, k, 7), ci(f, k, -2))].i, 1);
  assert_int_equal(k->exprs[bin(f, k, KIR_DIV, ci(f, k, 5), ci(f, k, 0))].i, 0);
  /* reassociation of constants: (o0 + 3) + 4 == o0 + 7 */
  assert_int_equal(bin(f, k, KIR_ADD, bin(f, k, KIR_ADD, o0, ci(f, k, 3)), ci(f, k, 4)),
                   bin(f, k, KIR_ADD, o0, ci(f, k, 7)));
  assert_int_equal(bin(f, k, KIR_MUL, bin(f, k, KIR_MUL, o0, ci(f, k, 3)), ci(f, k, 4)),
                   bin(f, k, KIR_MUL, o0, ci(f, k, 12)));
  /* range facts: o1 < 64, so (o0*64 + o1) / 64 == o0 and % 64 == o1 */
  int32_t lin = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 64)), o1);
  assert_int_equal(bin(f, k, KIR_DIV, lin, ci(f, k, 64)), o0);
  assert_int_equal(bin(f, k, KIR_MOD, lin, ci(f, k, 64)), o1);
  assert_int_equal(bin(f, k, KIR_DIV, o1, ci(f, k, 64)), zero);
  assert_int_equal(bin(f, k, KIR_MOD, o1, ci(f, k, 64)), o1);
  /* but not when the remainder part can reach the divisor */
  assert_int_equal(k->exprs[bin(f, k, KIR_DIV, lin, ci(f, k, 32))].op, KIR_DIV);
  assert_int_equal(k->exprs[bin(f, k, KIR_MOD, o1, ci(f, k, 63))].op, KIR_MOD);
  /* nor for a possibly negative quotient: (o0 - 4) * 64 + o1 */
  int32_t neg = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, bin(f, k, KIR_SUB, o0, ci(f, k, 4)), ci(f, k, 64)), o1);
  assert_int_equal(k->exprs[bin(f, k, KIR_DIV, neg, ci(f, k, 64))].op, KIR_DIV);
  /* x / x is not folded (x may be 0) */
  assert_int_equal(k->exprs[bin(f, k, KIR_DIV, o0, o0)].op, KIR_DIV);
  /* floats: x * 1 is x, x + 0 is kept (-0 + 0 is +0), unary math folds in f32 */
  int32_t p = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, 512, false);
  int32_t x = kir_load(&f->a, k, p, lin);
  assert_int_equal(bin(f, k, KIR_MUL, x, kir_const_f(&f->a, k, SC_DTYPE_F32, 1.0)), x);
  assert_int_equal(k->exprs[bin(f, k, KIR_ADD, x, kir_const_f(&f->a, k, SC_DTYPE_F32, 0.0))].op, KIR_ADD);
  int32_t e = kir_unary(&f->a, k, KIR_EXP, kir_const_f(&f->a, k, SC_DTYPE_F32, 1.0));
  assert_int_equal(k->exprs[e].op, KIR_CONST);
  assert_true(k->exprs[e].f == (double)(float)exp(1.0));
  int32_t s = kir_unary(&f->a, k, KIR_SQRT, kir_const_f(&f->a, k, SC_DTYPE_F32, 2.0));
  assert_true(k->exprs[s].f == (double)sqrtf(2.0f));
  /* casts, selects, double negation */
  assert_int_equal(kir_cast(&f->a, k, SC_DTYPE_F32, x), x);
  int32_t ce = kir_cast(&f->a, k, SC_DTYPE_I32, kir_const_f(&f->a, k, SC_DTYPE_F32, -3.75));
  assert_int_equal(k->exprs[ce].op, KIR_CONST);
  assert_int_equal(k->exprs[ce].i, -3);
  int32_t t = kir_const_i(&f->a, k, SC_DTYPE_BOOL, 1);
  int32_t y = kir_unary(&f->a, k, KIR_NEG, x);
  assert_int_equal(kir_select(&f->a, k, t, x, y), x);
  assert_int_equal(kir_select(&f->a, k, kir_unary(&f->a, k, KIR_NOT, t), x, y), y);
  assert_int_equal(kir_unary(&f->a, k, KIR_NEG, y), x);
  assert_int_equal(kir_verify(k, &f->d), SC_OK);
}

/* ---- verifier ---- */

/* A valid row kernel: reduce max over a row, store x - max. */
static kir_kernel *row_kernel(fx *f, int64_t rows, int64_t cols) {
  kir_kernel *k = mk_kernel(&f->a, "rowmax", 1, &rows, cols);
  int32_t in = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, rows * cols, false);
  int32_t out = kir_add_param(&f->a, k, 1, SC_DTYPE_F32, rows * cols, true);
  int32_t idx = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, kir_var(&f->a, k, 0), ci(f, k, cols)),
                    kir_var(&f->a, k, KIR_INNER));
  int32_t x = kir_load(&f->a, k, in, idx);
  int32_t ph = kir_add_reduce(&f->a, k, KIR_RED_MAX, SC_DTYPE_F32, x);
  assert_int_equal(ph, 0);
  assert_true(kir_add_store(&f->a, k, out, idx, bin(f, k, KIR_SUB, x, kir_reg(&f->a, k, ph))) == 1);
  return k;
}

static void expect_invalid(fx *f, const kir_kernel *k, const char *needle) {
  sc_diag_clear(&f->d);
  assert_int_equal(kir_verify(k, &f->d), SC_ERR_INVALID);
  if (!strstr(f->d.msg, needle)) fail_msg("message '%s' lacks '%s'", f->d.msg, needle);
}

static void test_verify(void **state) {
  fx *f = *state;
  kir_kernel *k = row_kernel(f, 3, 7);
  assert_int_equal(kir_verify(k, &f->d), SC_OK);
  kir_expr saved;
  int32_t sub = k->phases[1].value;

  /* mixed operand dtypes */
  saved = k->exprs[sub];
  k->exprs[sub].b = k->exprs[k->exprs[sub].a].a; /* the i64 index */
  expect_invalid(f, k, "operand dtypes");
  k->exprs[sub] = saved;

  /* operand not earlier (breaks topological order) */
  k->exprs[sub].a = sub;
  expect_invalid(f, k, "not an earlier expression");
  k->exprs[sub] = saved;

  /* a register read in its own phase */
  int32_t reg = -1;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (k->exprs[i].op == KIR_REG) reg = i;
  assert_true(reg >= 0);
  int32_t v0 = k->phases[0].value;
  k->phases[0].value = reg;
  expect_invalid(f, k, "not an earlier phase");
  k->phases[0].value = v0;

  /* loop variable beyond the outer rank */
  int32_t var = -1;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (k->exprs[i].op == KIR_VAR && k->exprs[i].var == 0) var = i;
  k->exprs[var].var = 1;
  expect_invalid(f, k, "outer rank");
  k->exprs[var].var = 0;

  /* store to an input */
  k->params[1].written = false;
  expect_invalid(f, k, "not marked written");
  k->params[1].written = true;

  /* load from a param that does not exist */
  int32_t ld = -1;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (k->exprs[i].op == KIR_LOAD) ld = i;
  saved = k->exprs[ld];
  k->exprs[ld].var = 5;
  expect_invalid(f, k, "param 5 does not exist");
  k->exprs[ld] = saved;

  /* exp of an integer */
  int32_t mul = -1;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (k->exprs[i].op == KIR_MUL) mul = i;
  saved = k->exprs[mul];
  k->exprs[mul].op = KIR_EXP;
  k->exprs[mul].b = -1;
  expect_invalid(f, k, "needs a float dtype");
  k->exprs[mul] = saved;

  k->inner = 0;
  expect_invalid(f, k, "inner extent");
  k->inner = 7;
  sc_diag_clear(&f->d);
  assert_int_equal(kir_verify(k, &f->d), SC_OK);
}

/* ---- text format ---- */

static void test_print_golden(void **state) {
  fx *f = *state;
  int64_t dims[2] = {4, 5};
  kir_kernel *k = mk_kernel(&f->a, "add_relu_3", 2, dims, 1);
  k->origin = "Add_3+Relu_4";
  int32_t a = kir_add_param(&f->a, k, 3, SC_DTYPE_F32, 20, false);
  int32_t b = kir_add_param(&f->a, k, 4, SC_DTYPE_F32, 5, false);
  int32_t y = kir_add_param(&f->a, k, 5, SC_DTYPE_F16, 20, true);
  int32_t o0 = kir_var(&f->a, k, 0), o1 = kir_var(&f->a, k, 1);
  int32_t idx = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 5)), o1);
  int32_t la = kir_load(&f->a, k, a, idx); /* separate statements: a fixed order */
  int32_t lb = kir_load(&f->a, k, b, o1);
  int32_t s = bin(f, k, KIR_ADD, la, lb);
  int32_t r = bin(f, k, KIR_MAX, s, kir_const_f(&f->a, k, SC_DTYPE_F32, 0.5));
  assert_true(kir_add_store(&f->a, k, y, idx, kir_cast(&f->a, k, SC_DTYPE_F16, r)) == 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  assert_non_null(mem);
  kir_print(k, mem);
  fclose(mem);
  const char *want =
      "kernel add_relu_3 outer [4,5] inner 1\n"
      "  origin Add_3+Relu_4\n"
      "  p0 = buf 3 f32 numel 20 in\n"
      "  p1 = buf 4 f32 numel 5 in\n"
      "  p2 = buf 5 f16 numel 20 out\n"
      "  %0 = var.i64 o0\n"
      "  %1 = var.i64 o1\n"
      "  %2 = const.i64 5\n"
      "  %3 = mul.i64 %0, %2\n"
      "  %4 = add.i64 %1, %3\n"
      "  %5 = load.f32 p0[%4]\n"
      "  %6 = load.f32 p1[%1]\n"
      "  %7 = add.f32 %5, %6\n"
      "  %8 = const.f32 0.5\n"
      "  %9 = max.f32 %7, %8\n"
      "  %10 = cast.f16 %9\n"
      "  phase 0: store p2[%4] = %10\n";
  if (strcmp(buf, want) != 0) fail_msg("kir_print gave:\n%s\nwant:\n%s", buf, want);
  free(buf);
}

/* ---- interpreter ---- */

static void interpret_ok(fx *f, const kir_kernel *k, void *const *bufs) {
  sc_diag_clear(&f->d);
  sc_status st = kir_interpret(k, bufs, &f->d);
  if (st != SC_OK) fail_msg("kir_interpret: %s", f->d.msg);
}

/* (a) y[4,5] = a[4,5] + b[5] */
static void test_interp_broadcast_add(void **state) {
  fx *f = *state;
  int64_t dims[2] = {4, 5};
  kir_kernel *k = mk_kernel(&f->a, "bcast_add", 2, dims, 1);
  int32_t pa = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, 20, false);
  int32_t pb = kir_add_param(&f->a, k, 1, SC_DTYPE_F32, 5, false);
  int32_t py = kir_add_param(&f->a, k, 2, SC_DTYPE_F32, 20, true);
  int32_t o0 = kir_var(&f->a, k, 0), o1 = kir_var(&f->a, k, 1);
  int32_t idx = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 5)), o1);
  kir_add_store(&f->a, k, py, idx,
                bin(f, k, KIR_ADD, kir_load(&f->a, k, pa, idx), kir_load(&f->a, k, pb, o1)));
  float a[20], b[5], y[20];
  rng_seed(11);
  for (int i = 0; i < 20; i++) a[i] = rng_val(), y[i] = NAN;
  for (int i = 0; i < 5; i++) b[i] = rng_val();
  void *bufs[3] = {a, b, y};
  interpret_ok(f, k, bufs);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) assert_true(y[i * 5 + j] == a[i * 5 + j] + b[j]);
}

/* (b) row softmax over [6, 33] */
static void test_interp_softmax(void **state) {
  fx *f = *state;
  enum { R = 6, C = 33 };
  int64_t rows = R;
  kir_kernel *k = mk_kernel(&f->a, "softmax", 1, &rows, C);
  int32_t px = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, R * C, false);
  int32_t py = kir_add_param(&f->a, k, 1, SC_DTYPE_F32, R * C, true);
  int32_t idx = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, kir_var(&f->a, k, 0), ci(f, k, C)),
                    kir_var(&f->a, k, KIR_INNER));
  int32_t x = kir_load(&f->a, k, px, idx);
  int32_t pmax = kir_add_reduce(&f->a, k, KIR_RED_MAX, SC_DTYPE_F32, x);
  int32_t ex = kir_unary(&f->a, k, KIR_EXP, bin(f, k, KIR_SUB, x, kir_reg(&f->a, k, pmax)));
  int32_t psum = kir_add_reduce(&f->a, k, KIR_RED_SUM, SC_DTYPE_F32, ex);
  kir_add_store(&f->a, k, py, idx, bin(f, k, KIR_DIV, ex, kir_reg(&f->a, k, psum)));
  assert_int_equal(kir_verify(k, &f->d), SC_OK);
  float xs[R * C], ys[R * C];
  rng_seed(12);
  for (int i = 0; i < R * C; i++) xs[i] = (float)rnd_nz(-6, 6), ys[i] = NAN;
  void *bufs[2] = {xs, ys};
  interpret_ok(f, k, bufs);
  for (int r = 0; r < R; r++) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < C; c++) m = fmax(m, xs[r * C + c]);
    for (int c = 0; c < C; c++) s += exp(xs[r * C + c] - m);
    double tot = 0;
    for (int c = 0; c < C; c++) {
      near(ys[r * C + c], exp(xs[r * C + c] - m) / s, 1e-5); /* f32 arithmetic */
      tot += ys[r * C + c];
    }
    near(tot, 1.0, 1e-5);
  }
}

/* (c) int64 q = a / b, m = a % b with negative operands and b == 0 */
static void test_interp_int_divmod(void **state) {
  fx *f = *state;
  enum { N = 10 };
  int64_t n = N;
  kir_kernel *k = mk_kernel(&f->a, "divmod", 1, &n, 1);
  int32_t pa = kir_add_param(&f->a, k, 0, SC_DTYPE_I64, N, false);
  int32_t pb = kir_add_param(&f->a, k, 1, SC_DTYPE_I64, N, false);
  int32_t pq = kir_add_param(&f->a, k, 2, SC_DTYPE_I64, N, true);
  int32_t pm = kir_add_param(&f->a, k, 3, SC_DTYPE_I64, N, true);
  int32_t o = kir_var(&f->a, k, 0);
  int32_t a = kir_load(&f->a, k, pa, o), b = kir_load(&f->a, k, pb, o);
  kir_add_store(&f->a, k, pq, o, bin(f, k, KIR_DIV, a, b));
  kir_add_store(&f->a, k, pm, o, bin(f, k, KIR_MOD, a, b));
  int64_t av[N] = {-7, 7, -7, 7, -1, 123456789012LL, INT64_MIN, INT64_MIN, 5, -9};
  int64_t bv[N] = {2, -2, -2, 2, 3, -1000, -1, 0, 0, 4};
  /* C99 truncating division, worked by hand; x/0 and x%0 are defined as 0 */
  int64_t wq[N] = {-3, -3, 3, 3, 0, -123456789, INT64_MIN, 0, 0, -2};
  int64_t wm[N] = {-1, 1, -1, 1, -1, 12, 0, 0, 0, -1};
  int64_t q[N], m[N];
  for (int i = 0; i < N; i++) q[i] = m[i] = 77;
  void *bufs[4] = {av, bv, q, m};
  interpret_ok(f, k, bufs);
  for (int i = 0; i < N; i++) {
    if (q[i] != wq[i] || m[i] != wm[i])
      fail_msg("%lld / %lld: got %lld rem %lld, want %lld rem %lld", (long long)av[i],
               (long long)bv[i], (long long)q[i], (long long)m[i], (long long)wq[i], (long long)wm[i]);
  }
}

/* (d) f16 and bf16: loads widen, arithmetic in f32, stores round to even */
static void test_interp_f16(void **state) {
  fx *f = *state;
  enum { N = 64 };
  int64_t n = N;
  kir_kernel *k = mk_kernel(&f->a, "half", 1, &n, 1);
  int32_t ph = kir_add_param(&f->a, k, 0, SC_DTYPE_F16, N, false);
  int32_t py = kir_add_param(&f->a, k, 1, SC_DTYPE_F16, N, true);
  int32_t pf = kir_add_param(&f->a, k, 2, SC_DTYPE_F32, N, false);
  int32_t pz = kir_add_param(&f->a, k, 3, SC_DTYPE_F16, N, true);
  int32_t pb = kir_add_param(&f->a, k, 4, SC_DTYPE_BF16, N, true);
  int32_t o = kir_var(&f->a, k, 0);
  int32_t x = kir_load(&f->a, k, ph, o);
  /* x * 3 + 1/3 in f32, one rounding to f16 at the store */
  int32_t v = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, x, kir_const_f(&f->a, k, SC_DTYPE_F16, 3.0)),
                  kir_const_f(&f->a, k, SC_DTYPE_F16, 1.0 / 3.0));
  kir_add_store(&f->a, k, py, o, v);
  int32_t fl = kir_load(&f->a, k, pf, o);
  kir_add_store(&f->a, k, pz, o, fl);
  kir_add_store(&f->a, k, pb, o, fl);
  uint16_t h[N], y[N], z[N], bz[N];
  float fs[N];
  rng_seed(13);
  for (int i = 0; i < N; i++) h[i] = sc_f32_to_f16(rng_val() * 4), fs[i] = rng_val();
  /* exact ties: 1 + 2^-11 lies halfway between f16 1.0 and 1+2^-10 (even: 1.0);
   * 1 + 3*2^-11 halfway between 1+2^-10 and 1+2^-9 (even: 1+2^-9) */
  fs[0] = 1.0f + 0x1p-11f;
  fs[1] = 1.0f + 3 * 0x1p-11f;
  fs[2] = 65520.0f;                 /* rounds to inf in f16 */
  fs[3] = 1.0f + 0x1p-8f;           /* bf16: halfway between 1 and 1+2^-7 → 1 */
  void *bufs[5] = {h, y, fs, z, bz};
  interpret_ok(f, k, bufs);
  assert_int_equal(z[0], 0x3C00);
  assert_int_equal(z[1], 0x3C02);
  assert_int_equal(z[2], 0x7C00);
  assert_int_equal(bz[3], 0x3F80);
  for (int i = 0; i < N; i++) {
    float want = (float)((double)sc_f16_to_f32(h[i]) * 3.0) + (float)(1.0 / 3.0);
    assert_int_equal(y[i], sc_f32_to_f16(want));
    /* the f16 result is within half an f16 ulp of the f32 value */
    near(sc_f16_to_f32(y[i]), want, 1.0 / 1024);
    if (i >= 4) {
      near(sc_f16_to_f32(z[i]), fs[i], 1.0 / 1024);
      near(sc_bf16_to_f32(bz[i]), fs[i], 1.0 / 128);
    }
  }
}

/* casts per ONNX, rounding half to even, NaN-propagating max, argmax ties */
static void test_interp_cast_round_argmax(void **state) {
  fx *f = *state;
  enum { N = 6 };
  int64_t n = N;
  kir_kernel *k = mk_kernel(&f->a, "misc", 1, &n, 1);
  int32_t px = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, N, false);
  int32_t pi = kir_add_param(&f->a, k, 1, SC_DTYPE_I32, N, true);
  int32_t pr = kir_add_param(&f->a, k, 2, SC_DTYPE_F32, N, true);
  int32_t pbool = kir_add_param(&f->a, k, 3, SC_DTYPE_BOOL, N, true);
  int32_t pm = kir_add_param(&f->a, k, 4, SC_DTYPE_F32, N, true);
  int32_t o = kir_var(&f->a, k, 0);
  int32_t x = kir_load(&f->a, k, px, o);
  kir_add_store(&f->a, k, pi, o, kir_cast(&f->a, k, SC_DTYPE_I32, x));
  kir_add_store(&f->a, k, pr, o, kir_unary(&f->a, k, KIR_ROUND, x));
  kir_add_store(&f->a, k, pbool, o, kir_cast(&f->a, k, SC_DTYPE_BOOL, x));
  kir_add_store(&f->a, k, pm, o, bin(f, k, KIR_MAX, x, kir_const_f(&f->a, k, SC_DTYPE_F32, 0.0)));
  float xs[N] = {2.5f, 3.5f, -2.5f, -3.9f, NAN, 0.0f};
  int32_t iv[N];
  float rv[N], mv[N];
  uint8_t bv[N];
  void *bufs[5] = {xs, iv, rv, bv, mv};
  interpret_ok(f, k, bufs);
  int32_t wi[N] = {2, 3, -2, -3, 0, 0};
  float wr[N] = {2, 4, -2, -4, NAN, 0};
  uint8_t wb[N] = {1, 1, 1, 1, 1, 0};
  for (int i = 0; i < N; i++) {
    assert_int_equal(iv[i], wi[i]);
    near(rv[i], wr[i], 0);
    assert_int_equal(bv[i], wb[i]);
  }
  assert_true(isnan(mv[4]));
  near(mv[3], 0.0, 0);
  near(mv[0], 2.5, 0);

  /* argmax / argmin over rows of [3, 5] with ties: first index wins */
  int64_t rows = 3;
  kir_kernel *ka = mk_kernel(&f->a, "argmax", 1, &rows, 5);
  int32_t qx = kir_add_param(&f->a, ka, 0, SC_DTYPE_F32, 15, false);
  int32_t qa = kir_add_param(&f->a, ka, 1, SC_DTYPE_I64, 3, true);
  int32_t qb = kir_add_param(&f->a, ka, 2, SC_DTYPE_I64, 3, true);
  int32_t row = kir_var(&f->a, ka, 0);
  int32_t idx = bin(f, ka, KIR_ADD, bin(f, ka, KIR_MUL, row, ci(f, ka, 5)), kir_var(&f->a, ka, KIR_INNER));
  int32_t v = kir_load(&f->a, ka, qx, idx);
  int32_t p0 = kir_add_reduce(&f->a, ka, KIR_RED_ARGMAX, SC_DTYPE_F32, v);
  int32_t p1 = kir_add_reduce(&f->a, ka, KIR_RED_ARGMIN, SC_DTYPE_F32, v);
  kir_add_store(&f->a, ka, qa, row, kir_reg(&f->a, ka, p0));
  kir_add_store(&f->a, ka, qb, row, kir_reg(&f->a, ka, p1));
  float m[15] = {1, 3, 3, -2, -2, /**/ 0.5f, 0.25f, 0.5f, 0.25f, 0.1f, /**/ -1, -1, -1, -1, -1};
  int64_t am[3], an[3];
  void *abufs[3] = {m, am, an};
  interpret_ok(f, ka, abufs);
  int64_t wam[3] = {1, 0, 0}, wan[3] = {3, 4, 0};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(am[i], wam[i]);
    assert_int_equal(an[i], wan[i]);
  }
}

/* (e) a load or store outside its param is an error, never an access */
static void test_interp_out_of_bounds(void **state) {
  fx *f = *state;
  int64_t n = 4;
  kir_kernel *k = mk_kernel(&f->a, "oob", 1, &n, 1);
  int32_t px = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, 4, false);
  int32_t py = kir_add_param(&f->a, k, 1, SC_DTYPE_F32, 4, true);
  int32_t o = kir_var(&f->a, k, 0);
  kir_add_store(&f->a, k, py, o, kir_load(&f->a, k, px, bin(f, k, KIR_ADD, o, ci(f, k, 1))));
  /* guard cells around the buffers catch any stray access */
  float xs[6] = {-99, 1, 2, 3, 4, -99}, ys[6] = {-99, 0.5f, 0.5f, 0.5f, 0.5f, -99};
  void *bufs[2] = {xs + 1, ys + 1};
  sc_diag_clear(&f->d);
  assert_int_equal(kir_interpret(k, bufs, &f->d), SC_ERR_INVALID);
  assert_non_null(strstr(f->d.msg, "load of param 0 at element 4 outside [0, 4)"));
  assert_true(ys[0] == -99 && ys[5] == -99);
  assert_true(ys[1] == 2 && ys[3] == 4); /* points before the bad one ran */

  kir_kernel *k2 = mk_kernel(&f->a, "oob_store", 1, &n, 1);
  px = kir_add_param(&f->a, k2, 0, SC_DTYPE_F32, 4, false);
  py = kir_add_param(&f->a, k2, 1, SC_DTYPE_F32, 4, true);
  o = kir_var(&f->a, k2, 0);
  kir_add_store(&f->a, k2, py, bin(f, k2, KIR_SUB, o, ci(f, k2, 1)), kir_load(&f->a, k2, px, o));
  sc_diag_clear(&f->d);
  assert_int_equal(kir_interpret(k2, bufs, &f->d), SC_ERR_INVALID);
  assert_non_null(strstr(f->d.msg, "store of param 1 at element -1"));
  assert_true(ys[0] == -99);
}

/* ---- in-place legality ---- */

static void test_reads_aligned(void **state) {
  fx *f = *state;
  int64_t dims[2] = {4, 6};
  /* elementwise: y = relu(a) + b[bcast]; a aligned, b (broadcast) not */
  kir_kernel *k = mk_kernel(&f->a, "ew", 2, dims, 1);
  int32_t pa = kir_add_param(&f->a, k, 0, SC_DTYPE_F32, 24, false);
  int32_t pb = kir_add_param(&f->a, k, 1, SC_DTYPE_F32, 6, false);
  int32_t pc = kir_add_param(&f->a, k, 2, SC_DTYPE_I32, 24, false);
  int32_t py = kir_add_param(&f->a, k, 3, SC_DTYPE_F32, 24, true);
  int32_t o0 = kir_var(&f->a, k, 0), o1 = kir_var(&f->a, k, 1);
  int32_t idx = bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 6)), o1);
  int32_t v = bin(f, k, KIR_ADD, kir_load(&f->a, k, pa, idx), kir_load(&f->a, k, pb, o1));
  v = bin(f, k, KIR_ADD, v, kir_cast(&f->a, k, SC_DTYPE_F32, kir_load(&f->a, k, pc, idx)));
  kir_add_store(&f->a, k, py, idx, v);
  assert_true(kir_reads_aligned(k, pa, py));
  assert_false(kir_reads_aligned(k, pb, py)); /* other numel, other index */
  assert_true(kir_reads_aligned(k, pc, py));  /* same element size (i32 vs f32) */
  assert_false(kir_reads_aligned(k, py, pa)); /* wrong direction */

  /* transpose: y[j,i] = x[i,j] over outer [4,6] */
  kir_kernel *t = mk_kernel(&f->a, "tr", 2, dims, 1);
  int32_t tx = kir_add_param(&f->a, t, 0, SC_DTYPE_F32, 24, false);
  int32_t ty = kir_add_param(&f->a, t, 1, SC_DTYPE_F32, 24, true);
  o0 = kir_var(&f->a, t, 0);
  o1 = kir_var(&f->a, t, 1);
  int32_t in = bin(f, t, KIR_ADD, bin(f, t, KIR_MUL, o0, ci(f, t, 6)), o1);
  int32_t on = bin(f, t, KIR_ADD, bin(f, t, KIR_MUL, o1, ci(f, t, 4)), o0);
  kir_add_store(&f->a, t, ty, on, kir_load(&f->a, t, tx, in));
  assert_false(kir_reads_aligned(t, tx, ty));

  /* same index expression but not injective (o1 * 0 ... o0 + o1): never aligned */
  kir_kernel *u = mk_kernel(&f->a, "noninj", 2, dims, 1);
  int32_t ux = kir_add_param(&f->a, u, 0, SC_DTYPE_F32, 24, false);
  int32_t uy = kir_add_param(&f->a, u, 1, SC_DTYPE_F32, 24, true);
  int32_t ui = bin(f, u, KIR_ADD, kir_var(&f->a, u, 0), kir_var(&f->a, u, 1));
  kir_add_store(&f->a, u, uy, ui, kir_load(&f->a, u, ux, ui));
  assert_false(kir_reads_aligned(u, ux, uy));

  /* a row kernel reading x in reduce phases and storing at the same index */
  kir_kernel *r = row_kernel(f, 3, 7);
  assert_true(kir_reads_aligned(r, 0, 1));

  /* the row-major index of the outer point, and what is not */
  assert_true(kir_is_point_index(k, idx));     /* o0 * 6 + o1 over [4, 6] */
  assert_false(kir_is_point_index(k, o1));     /* a column only */
  assert_false(kir_is_point_index(t, on));     /* the transpose's o1 * 4 + o0 */
  assert_false(kir_is_point_index(u, ui));     /* o0 + o1 */
  assert_false(kir_is_point_index(k, bin(f, k, KIR_ADD, idx, ci(f, k, 1)))); /* shifted */
  int64_t d3[3] = {4, 1, 6};                   /* an axis of extent 1: any coefficient */
  kir_kernel *w = mk_kernel(&f->a, "unit", 3, d3, 1);
  int32_t w0 = kir_var(&f->a, w, 0), w1 = kir_var(&f->a, w, 1), w2 = kir_var(&f->a, w, 2);
  int32_t wi = bin(f, w, KIR_ADD, bin(f, w, KIR_MUL, w0, ci(f, w, 6)),
                   bin(f, w, KIR_ADD, bin(f, w, KIR_MUL, w1, ci(f, w, 5)), w2));
  assert_true(kir_is_point_index(w, wi));
  assert_false(kir_is_point_index(w, bin(f, w, KIR_MUL, wi, ci(f, w, 2))));

  /* the affine form itself: 3 * (o1 + 2) + o0 * 6 - 1, constants on either side */
  int32_t left = bin(f, k, KIR_MUL, ci(f, k, 3), bin(f, k, KIR_ADD, o1, ci(f, k, 2)));
  int32_t ex = bin(f, k, KIR_ADD, left,
                   bin(f, k, KIR_ADD, bin(f, k, KIR_MUL, o0, ci(f, k, 6)), ci(f, k, -1)));
  int64_t coef[SC_MAX_RANK + 1] = {0}, cst = 0;
  assert_true(kir_affine(k, ex, coef, &cst));
  assert_int_equal(coef[0], 6);
  assert_int_equal(coef[1], 3);
  assert_int_equal(coef[2], 0); /* the inner index */
  assert_int_equal(cst, 5);
  assert_false(kir_affine(k, bin(f, k, KIR_MUL, o0, o1), coef, &cst)); /* not affine */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_hash_cons, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_simplify, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_verify, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_print_golden, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_broadcast_add, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_softmax, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_int_divmod, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_f16, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_cast_round_argmax, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_interp_out_of_bounds, setup_fx, teardown_fx),
      cmocka_unit_test_setup_teardown(test_reads_aligned, setup_fx, teardown_fx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
