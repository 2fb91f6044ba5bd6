/* test_cpu.c — the CPU backend (codegen/cpu) against the reference
 * interpreter (kir_interpret).
 *
 * Every kernel is built by hand with the kir builders, JIT-compiled, run
 * over its whole outer range and again split into uneven [begin, end)
 * chunks (cut mid-row, as the thread pool may), and compared with
 * kir_interpret on the same seeded random inputs. Output buffers start
 * filled with the same byte pattern, so a write the interpreter does not do
 * (or a missed one) shows up too.
 *
 * Tolerances: integer, bool and f16/bf16 conversions and plain float
 * arithmetic must be bitwise equal (LLVM contracts nothing without
 * fast-math, and the interpreter's double-then-round equals f32 arithmetic
 * for + - * / sqrt); transcendentals use libm's f32 functions where the
 * interpreter rounds the f64 ones, so rtol 1e-6 (about 8 ulp); reductions
 * may be reassociated (vectorised), so rtol 1e-5. A NaN where the
 * interpreter has none fails, and so does the opposite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#include "codegen/cpu/cpu.h"
#include "codegen/kir.h"
#include "codegen/program.h"

/* ---- fixtures ---- */

typedef struct spec {
  double lo, hi;  /* input range (ints: inclusive, floats: [lo,hi)) */
  double special; /* probability of a special value (NaN/inf/0/extremes) */
} spec;


static sc_program *new_program(void) {
  sc_program *p = sc_program_create();
  assert_non_null(p);
  return p;
}

static kir_kernel *new_kernel(sc_program *p, const char *name) {
  kir_kernel *k = kir_kernel_create(&p->arena, name);
  assert_non_null(k);
  assert_true(sc_program_add_kernel(p, k) >= 0);
  return k;
}

static void fill(sc_dtype t, void *buf, int64_t n, spec s) {
  for (int64_t i = 0; i < n; i++) {
    double u = rng_unit();
    double v;
    if (sc_dtype_is_float(t)) {
      v = rnd(s.lo, s.hi);
      if (u < s.special) {
        double w = rng_unit();
        v = w < 0.3 ? NAN : w < 0.5 ? INFINITY : w < 0.7 ? -INFINITY : w < 0.85 ? 0.0 : -0.0;
      }
      sc_store_f64(t, buf, i, v);
    } else {
      int64_t x = (int64_t)floor(rnd(s.lo, s.hi + 1));
      if (u < s.special) {
        double w = rng_unit();
        x = w < 0.3 ? 0 : w < 0.6 ? -1 : w < 0.8 ? INT64_MIN : INT64_MAX;
      }
      sc_store_i64(t, buf, i, x);
    }
  }
}

/* Element i as a double (floats) or exactly (ints through bits). */
static void compare(const kir_param *p, const void *want, const void *got,
                    double rtol, double atol, const char *what) {
  for (int64_t i = 0; i < p->numel; i++) {
    if (sc_dtype_is_float(p->dtype)) {
      double w = sc_load_f64(p->dtype, want, i), g = sc_load_f64(p->dtype, got, i);
      if (isnan(w) || isnan(g)) {
        if (isnan(w) != isnan(g))
          fail_msg("%s: element %lld: want %.9g got %.9g (NaN mismatch)", what,
                   (long long)i, w, g);
        continue;
      }
      if (rtol == 0 && atol == 0) {
        if (memcmp(&w, &g, sizeof w) != 0)
          fail_msg("%s: element %lld: want %.9g got %.9g (bitwise)", what, (long long)i, w, g);
      } else if (!(fabs(w - g) <= rtol * fmax(fabs(w), fabs(g)) + atol) &&
                 !(isinf(w) && w == g)) {
        fail_msg("%s: element %lld: want %.9g got %.9g (rtol %g)", what, (long long)i, w, g,
                 rtol);
      }
    } else {
      size_t sz = sc_dtype_size(p->dtype);
      if (memcmp((const char *)want + (size_t)i * sz, (const char *)got + (size_t)i * sz, sz))
        fail_msg("%s: element %lld: want %lld got %lld", what, (long long)i,
                 (long long)sc_load_i64(p->dtype, want, i),
                 (long long)sc_load_i64(p->dtype, got, i));
    }
  }
}

static int64_t outer_total(const kir_kernel *k) {
  int64_t n = 1;
  for (int32_t d = 0; d < k->outer_rank; d++) n *= k->outer_dims[d];
  return n;
}

/* Runs kernel `kid` of p: interpreter, JIT over the whole range, JIT in
 * chunks; compares every written param. specs[i] for param i. */
static void check_kernel(const sc_program *p, const sc_cpu_module *m, int32_t kid,
                         const spec *specs, double rtol, double atol) {
  const kir_kernel *k = p->kernels[kid];
  assert_true(k->n_params <= 16);
  void *ref[16], *full[16], *chunk[16];
  for (int32_t i = 0; i < k->n_params; i++) {
    size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
    ref[i] = malloc(bytes ? bytes : 1);
    full[i] = malloc(bytes ? bytes : 1);
    chunk[i] = malloc(bytes ? bytes : 1);
    assert_true(ref[i] && full[i] && chunk[i]);
    if (k->params[i].written) memset(ref[i], 0xA5, bytes);
    else fill(k->params[i].dtype, ref[i], k->params[i].numel, specs[i]);
    memcpy(full[i], ref[i], bytes);
    memcpy(chunk[i], ref[i], bytes);
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = kir_interpret(k, ref, &d);
  if (st != SC_OK) fail_msg("kir_interpret(%s): %s", k->name, d.msg);

  sc_cpu_kernel_fn fn = sc_cpu_kernel(m, kid);
  assert_non_null(fn);
  int64_t total = outer_total(k);
  fn(full, 0, total);
  /* uneven chunks: cut points at random, mid-row included */
  int64_t at = 0;
  while (at < total) {
    int64_t len = 1 + (int64_t)(rng_unit() * (double)(total / 3 + 1));
    if (at + len > total) len = total - at;
    fn(chunk, at, at + len);
    at += len;
  }
  fn(chunk, total, total); /* empty range: no effect */
  for (int32_t i = 0; i < k->n_params; i++) {
    if (!k->params[i].written) continue;
    char what[160];
    snprintf(what, sizeof what, "%s p%d (whole range)", k->name, (int)i);
    compare(&k->params[i], ref[i], full[i], rtol, atol, what);
    snprintf(what, sizeof what, "%s p%d (chunks)", k->name, (int)i);
    compare(&k->params[i], ref[i], chunk[i], rtol, atol, what);
  }
  for (int32_t i = 0; i < k->n_params; i++) {
    free(ref[i]);
    free(full[i]);
    free(chunk[i]);
  }
}

static sc_cpu_module *jit_ok(const sc_program *p) {
  sc_cpu_opts o;
  sc_cpu_opts_init(&o);
  sc_cpu_module *m = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_cpu_jit(p, &o, &m, &d);
  if (st != SC_OK) fail_msg("sc_cpu_jit: %s", d.msg);
  assert_non_null(m);
  return m;
}

/* Shorthands. Z: the spec of an output param (unused). */
#define Z {0, 0, 0}
#define A (&p->arena)
static int32_t V(kir_kernel *k, sc_program *p, int32_t d) { return kir_var(A, k, d); }
static int32_t CI(kir_kernel *k, sc_program *p, int64_t v) {
  return kir_const_i(A, k, SC_DTYPE_I64, v);
}
static int32_t BIN(kir_kernel *k, sc_program *p, kir_op op, int32_t a, int32_t b) {
  return kir_binary(A, k, op, a, b);
}
/* Row-major linear index of outer vars over dims (rank n). */
static int32_t lin_index(kir_kernel *k, sc_program *p, int n, const int64_t *dims) {
  int32_t idx = V(k, p, 0);
  for (int d = 1; d < n; d++)
    idx = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, idx, CI(k, p, dims[d])), V(k, p, d));
  return idx;
}

/* ---- kernels ---- */

/* out[3,7,33] = relu(a[3,7,33] + b[7,33]) and out2 = a * b - a (f32). */
static void build_broadcast(sc_program *p, const char *name) {
  kir_kernel *k = new_kernel(p, name);
  int64_t dims[3] = {3, 7, 33};
  k->outer_rank = 3;
  memcpy(k->outer_dims, dims, sizeof dims);
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_F32, 3 * 7 * 33, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_F32, 7 * 33, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, 3 * 7 * 33, true);
  int32_t po2 = kir_add_param(A, k, 3, SC_DTYPE_F32, 3 * 7 * 33, true);
  int32_t i = lin_index(k, p, 3, dims);
  int32_t ib = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, V(k, p, 1), CI(k, p, 33)), V(k, p, 2));
  int32_t a = kir_load(A, k, pa, i), b = kir_load(A, k, pb, ib);
  int32_t s = BIN(k, p, KIR_ADD, a, b);
  int32_t r = BIN(k, p, KIR_MAX, s, kir_const_f(A, k, SC_DTYPE_F32, 0.0));
  kir_add_store(A, k, po, i, r);
  kir_add_store(A, k, po2, i, BIN(k, p, KIR_SUB, BIN(k, p, KIR_MUL, a, b), a));
}

static void test_broadcast_relu(void **state) {
  (void)state;
  rng_seed(11);
  sc_program *p = new_program();
  build_broadcast(p, "bcast_relu");
  sc_cpu_module *m = jit_ok(p);
  spec s[4] = {{-2, 2, 0.05}, {-2, 2, 0.05}, Z, Z};
  check_kernel(p, m, 0, s, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* f16 and bf16 in and out: out16 = a + cast<f16>(b); outb = cast<bf16>(a) *
 * b + 0.1; outf = a / b (f32 from f16 operands through casts). */
static void test_half_types(void **state) {
  (void)state;
  rng_seed(12);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "halfs");
  int64_t n = 5 * 37;
  k->outer_rank = 2;
  k->outer_dims[0] = 5;
  k->outer_dims[1] = 37;
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_F16, n, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_BF16, n, false);
  int32_t p16 = kir_add_param(A, k, 2, SC_DTYPE_F16, n, true);
  int32_t pbf = kir_add_param(A, k, 3, SC_DTYPE_BF16, n, true);
  int32_t pf = kir_add_param(A, k, 4, SC_DTYPE_F32, n, true);
  int64_t dims[2] = {5, 37};
  int32_t i = lin_index(k, p, 2, dims);
  int32_t a = kir_load(A, k, pa, i), b = kir_load(A, k, pb, i);
  kir_add_store(A, k, p16, i, BIN(k, p, KIR_ADD, a, kir_cast(A, k, SC_DTYPE_F16, b)));
  int32_t ab = kir_cast(A, k, SC_DTYPE_BF16, a);
  kir_add_store(A, k, pbf, i,
                BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, ab, b),
                    kir_const_f(A, k, SC_DTYPE_BF16, 0.1)));
  kir_add_store(A, k, pf, i,
                BIN(k, p, KIR_DIV, kir_cast(A, k, SC_DTYPE_F32, a),
                    kir_cast(A, k, SC_DTYPE_F32, b)));
  sc_cpu_module *m = jit_ok(p);
  /* wide range: f16 overflow to inf and subnormals both occur */
  spec s[5] = {{-70000, 70000, 0.05}, {-3e5, 3e5, 0.05}, Z, Z, Z};
  check_kernel(p, m, 0, s, 0, 0);
  spec s2[5] = {{-1e-4, 1e-4, 0.0}, {-1e-3, 1e-3, 0.0}, Z, Z, Z};
  check_kernel(p, m, 0, s2, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Integer index math: i64 DIV/MOD with negative operands, zero and -1
 * divisors and INT64_MIN; i8 wrap-around; i32 MIN/MAX/POW; u8 DIV. */
static void test_int_math(void **state) {
  (void)state;
  rng_seed(13);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "intmath");
  int64_t n = 257;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_I64, n, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_I64, n, false);
  int32_t pc = kir_add_param(A, k, 2, SC_DTYPE_I8, n, false);
  int32_t pd = kir_add_param(A, k, 3, SC_DTYPE_I32, n, false);
  int32_t pu = kir_add_param(A, k, 4, SC_DTYPE_U8, n, false);
  int32_t o1 = kir_add_param(A, k, 5, SC_DTYPE_I64, n, true);
  int32_t o2 = kir_add_param(A, k, 6, SC_DTYPE_I8, n, true);
  int32_t o3 = kir_add_param(A, k, 7, SC_DTYPE_I32, n, true);
  int32_t o4 = kir_add_param(A, k, 8, SC_DTYPE_U8, n, true);
  int32_t o5 = kir_add_param(A, k, 9, SC_DTYPE_BOOL, n, true);
  int32_t i = V(k, p, 0);
  int32_t a = kir_load(A, k, pa, i), b = kir_load(A, k, pb, i);
  int32_t q = BIN(k, p, KIR_DIV, a, b), r = BIN(k, p, KIR_MOD, a, b);
  int32_t mixed = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, q, CI(k, p, 7)), r);
  /* (a - 3) / 4 and % -5 with constants: the folded path */
  mixed = BIN(k, p, KIR_SUB, mixed,
              BIN(k, p, KIR_DIV, BIN(k, p, KIR_SUB, a, CI(k, p, 3)), CI(k, p, 4)));
  mixed = BIN(k, p, KIR_ADD, mixed, BIN(k, p, KIR_MOD, a, CI(k, p, -5)));
  kir_add_store(A, k, o1, i, mixed);
  int32_t c = kir_load(A, k, pc, i);
  int32_t c2 = kir_cast(A, k, SC_DTYPE_I8, b);
  int32_t e8 = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, c, c), BIN(k, p, KIR_DIV, c, c2));
  e8 = BIN(k, p, KIR_SUB, e8, BIN(k, p, KIR_MOD, c, c2));
  e8 = BIN(k, p, KIR_ADD, e8, kir_unary(A, k, KIR_ABS, c));
  kir_add_store(A, k, o2, i, e8);
  int32_t dd = kir_load(A, k, pd, i);
  int32_t d3 = kir_cast(A, k, SC_DTYPE_I32, c);
  int32_t e32 = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MIN, dd, d3), BIN(k, p, KIR_MAX, dd, d3));
  int32_t ex = BIN(k, p, KIR_MOD, d3, kir_const_i(A, k, SC_DTYPE_I32, 7));
  e32 = BIN(k, p, KIR_ADD, e32, BIN(k, p, KIR_POW, d3, ex));
  e32 = BIN(k, p, KIR_SUB, e32, kir_unary(A, k, KIR_NEG, dd));
  kir_add_store(A, k, o3, i, e32);
  int32_t u = kir_load(A, k, pu, i);
  int32_t u2 = kir_cast(A, k, SC_DTYPE_U8, c);
  kir_add_store(A, k, o4, i,
                BIN(k, p, KIR_ADD, BIN(k, p, KIR_DIV, u, u2), BIN(k, p, KIR_MOD, u2, u)));
  int32_t lt = BIN(k, p, KIR_LT, u, u2);
  int32_t ge = BIN(k, p, KIR_GE, a, b);
  kir_add_store(A, k, o5, i,
                BIN(k, p, KIR_XOR, lt, BIN(k, p, KIR_AND, ge, kir_unary(A, k, KIR_NOT, lt))));
  sc_cpu_module *m = jit_ok(p);
  spec s[10] = {{-1000, 1000, 0.1}, {-9, 9, 0.15}, {-128, 127, 0.05},
                {-100000, 100000, 0.05}, {0, 255, 0.05}};
  check_kernel(p, m, 0, s, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Bitwise and, or, xor, not on i16 and u64, shifts of u8, u32 and u64 by
 * counts from 0 to 70 (a count of the width or more gives 0): the JIT
 * against kir_interpret. */
static void test_bitwise(void **state) {
  (void)state;
  rng_seed(17);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "bitwise");
  int64_t n = 263;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t ps = kir_add_param(A, k, 0, SC_DTYPE_I16, n, false);
  int32_t pt = kir_add_param(A, k, 1, SC_DTYPE_I16, n, false);
  int32_t pu = kir_add_param(A, k, 2, SC_DTYPE_U64, n, false);
  int32_t pc = kir_add_param(A, k, 3, SC_DTYPE_U8, n, false);
  int32_t o1 = kir_add_param(A, k, 4, SC_DTYPE_I16, n, true);
  int32_t o2 = kir_add_param(A, k, 5, SC_DTYPE_U64, n, true);
  int32_t o3 = kir_add_param(A, k, 6, SC_DTYPE_U8, n, true);
  int32_t o4 = kir_add_param(A, k, 7, SC_DTYPE_U32, n, true);
  int32_t i = V(k, p, 0);
  int32_t a = kir_load(A, k, ps, i), b = kir_load(A, k, pt, i);
  int32_t u = kir_load(A, k, pu, i), c = kir_load(A, k, pc, i);
  int32_t e16 = BIN(k, p, KIR_XOR, BIN(k, p, KIR_AND, a, b), kir_unary(A, k, KIR_NOT, b));
  kir_add_store(A, k, o1, i, BIN(k, p, KIR_OR, e16, BIN(k, p, KIR_AND, a, kir_const_i(A, k, SC_DTYPE_I16, 0x0f0f))));
  int32_t c64 = kir_cast(A, k, SC_DTYPE_U64, c);
  int32_t e64 = BIN(k, p, KIR_XOR, BIN(k, p, KIR_SHL, u, c64), kir_unary(A, k, KIR_NOT, u));
  kir_add_store(A, k, o2, i, BIN(k, p, KIR_OR, e64, BIN(k, p, KIR_SHR, u, c64)));
  int32_t c8 = BIN(k, p, KIR_SHL, c, kir_const_i(A, k, SC_DTYPE_U8, 3));
  kir_add_store(A, k, o3, i, BIN(k, p, KIR_OR, c8, BIN(k, p, KIR_SHR, c, c)));
  int32_t u32 = kir_cast(A, k, SC_DTYPE_U32, u), c32 = kir_cast(A, k, SC_DTYPE_U32, c);
  kir_add_store(A, k, o4, i,
                BIN(k, p, KIR_AND, BIN(k, p, KIR_SHL, u32, c32), BIN(k, p, KIR_SHR, u32, c32)));
  /* signed: SHR is arithmetic; counts from -20 (negative: every bit out)
   * through the width and past it */
  int32_t o5 = kir_add_param(A, k, 8, SC_DTYPE_I16, n, true);
  int32_t o6 = kir_add_param(A, k, 9, SC_DTYPE_I16, n, true);
  int32_t o7 = kir_add_param(A, k, 10, SC_DTYPE_I64, n, true);
  int32_t s16 = BIN(k, p, KIR_SUB, kir_cast(A, k, SC_DTYPE_I16, c), kir_const_i(A, k, SC_DTYPE_I16, 20));
  kir_add_store(A, k, o5, i, BIN(k, p, KIR_SHR, a, s16));
  kir_add_store(A, k, o6, i, BIN(k, p, KIR_SHL, a, s16));
  int32_t a64 = kir_cast(A, k, SC_DTYPE_I64, a), s64 = kir_cast(A, k, SC_DTYPE_I64, s16);
  kir_add_store(A, k, o7, i,
                BIN(k, p, KIR_XOR, BIN(k, p, KIR_SHR, a64, BIN(k, p, KIR_ADD, s64, s64)),
                    BIN(k, p, KIR_SHL, a64, s64)));
  sc_cpu_module *m = jit_ok(p);
  spec s[11] = {{-30000, 30000, 0}, {-30000, 30000, 0}, {0, 4e18, 0}, {0, 70, 0}};
  check_kernel(p, m, 0, s, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* BitCast: f32 ↔ i32, u16 bits as f16 and bf16 (their register form is
 * f32), f16 back to i16, bytes as bool, i64 as f64; against kir_interpret. */
static void test_bitcast(void **state) {
  (void)state;
  rng_seed(23);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "bitcast");
  int64_t n = 157;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t pf = kir_add_param(A, k, 0, SC_DTYPE_F32, n, false);
  int32_t ph = kir_add_param(A, k, 1, SC_DTYPE_U16, n, false);
  int32_t pb = kir_add_param(A, k, 2, SC_DTYPE_U8, n, false);
  int32_t pl = kir_add_param(A, k, 3, SC_DTYPE_I64, n, false);
  static const sc_dtype od[] = {SC_DTYPE_I32, SC_DTYPE_F16, SC_DTYPE_F32, SC_DTYPE_I16,
                                SC_DTYPE_BOOL, SC_DTYPE_F64, SC_DTYPE_F32};
  int32_t o[7];
  for (int32_t j = 0; j < 7; j++) o[j] = kir_add_param(A, k, 4 + j, od[j], n, true);
  int32_t i = V(k, p, 0);
  int32_t f = kir_load(A, k, pf, i), h = kir_load(A, k, ph, i);
  int32_t u8 = kir_load(A, k, pb, i), l = kir_load(A, k, pl, i);
  kir_add_store(A, k, o[0], i, kir_bitcast(A, k, SC_DTYPE_I32, f));
  int32_t hf = kir_bitcast(A, k, SC_DTYPE_F16, h);
  kir_add_store(A, k, o[1], i, hf);
  kir_add_store(A, k, o[2], i, BIN(k, p, KIR_MUL, kir_cast(A, k, SC_DTYPE_F32, hf),
                                   kir_cast(A, k, SC_DTYPE_F32, kir_bitcast(A, k, SC_DTYPE_BF16, h))));
  kir_add_store(A, k, o[3], i, kir_bitcast(A, k, SC_DTYPE_I16, kir_cast(A, k, SC_DTYPE_F16, f)));
  kir_add_store(A, k, o[4], i, kir_bitcast(A, k, SC_DTYPE_BOOL, u8));
  kir_add_store(A, k, o[5], i, kir_bitcast(A, k, SC_DTYPE_F64, l));
  kir_add_store(A, k, o[6], i,
                kir_bitcast(A, k, SC_DTYPE_F32, BIN(k, p, KIR_ADD, kir_bitcast(A, k, SC_DTYPE_I32, f),
                                                    kir_const_i(A, k, SC_DTYPE_I32, 1))));
  sc_cpu_module *m = jit_ok(p);
  /* finite f16 and bf16 patterns, both signs (NaN payloads are not kept) */
  spec s[11] = {{-1e4, 1e4, 0}, {0, 31743, 0}, {0, 3, 0}, {0, 4.6e18, 0}};
  check_kernel(p, m, 0, s, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* The narrow types (float8, float4, 4/2-bit integers): casts from f32
 * (wide and tiny values, specials), f16 and i32 into each, stored (the
 * store encodes) and widened back to f32 in registers; loads of each (the
 * decode) cast to f32 and f16 — the JIT against the interpreter, bitwise
 * (ir/dtype.c is the reference both follow, checked against ml_dtypes by
 * models.test_narrow_dtypes). */
static void test_narrow_casts(void **state) {
  (void)state;
  rng_seed(41);
  static const sc_dtype nt[] = {SC_DTYPE_F8E4M3FN, SC_DTYPE_F8E4M3FNUZ, SC_DTYPE_F8E5M2,
                                SC_DTYPE_F8E5M2FNUZ, SC_DTYPE_F4E2M1, SC_DTYPE_F8E8M0,
                                SC_DTYPE_I4, SC_DTYPE_U4, SC_DTYPE_I2, SC_DTYPE_U2};
  enum { NT = sizeof nt / sizeof nt[0] };
  for (int32_t j = 0; j < NT; j++) {
    sc_program *p = new_program();
    char name[64];
    snprintf(name, sizeof name, "narrow_%s", sc_dtype_name(nt[j]));
    kir_kernel *k = new_kernel(p, name);
    int64_t n = 997;
    k->outer_rank = 1;
    k->outer_dims[0] = n;
    int32_t pw = kir_add_param(A, k, 0, SC_DTYPE_F32, n, false);
    int32_t ps = kir_add_param(A, k, 1, SC_DTYPE_F32, n, false);
    int32_t ph = kir_add_param(A, k, 2, SC_DTYPE_F16, n, false);
    int32_t pi = kir_add_param(A, k, 3, SC_DTYPE_I32, n, false);
    int32_t pn = kir_add_param(A, k, 4, nt[j], n, false);
    int32_t i = V(k, p, 0);
    int32_t src[4] = {kir_load(A, k, pw, i), kir_load(A, k, ps, i), kir_load(A, k, ph, i),
                      kir_load(A, k, pi, i)};
    int32_t o = 5;
    for (int32_t s = 0; s < 4; s++) {
      int32_t c = kir_cast(A, k, nt[j], src[s]);
      kir_add_store(A, k, kir_add_param(A, k, o, nt[j], n, true), i, c);
      kir_add_store(A, k, kir_add_param(A, k, o + 1, SC_DTYPE_F32, n, true), i,
                    kir_cast(A, k, SC_DTYPE_F32, c));
      o += 2;
    }
    int32_t x = kir_load(A, k, pn, i);
    kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_F32, n, true), i,
                  kir_cast(A, k, SC_DTYPE_F32, x));
    kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_F16, n, true), i,
                  kir_cast(A, k, SC_DTYPE_F16, x));
    kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_I32, n, true), i,
                  kir_cast(A, k, SC_DTYPE_I32, x));
    sc_cpu_module *m = jit_ok(p);
    spec sp[16] = {{-700, 700, 0.1}, {-0.02, 0.02, 0.1}, {-70000, 70000, 0.1}, {-40, 40, 0},
                   {-600, 600, 0.05}};
    check_kernel(p, m, 0, sp, 0, 0);
    sc_cpu_module_destroy(m);
    sc_program_destroy(p);
  }
}

/* Casts: f32 → i8, u8, i32, u64, bool (saturate to i64, NaN → 0, then
 * wrap, as ONNX Cast in sc_store_f64), i64 → f32 / f16 / f64, bool → f32. */
static void test_casts(void **state) {
  (void)state;
  rng_seed(14);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "casts");
  int64_t n = 301;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t pf = kir_add_param(A, k, 0, SC_DTYPE_F32, n, false);
  int32_t pi = kir_add_param(A, k, 1, SC_DTYPE_I64, n, false);
  sc_dtype outs[] = {SC_DTYPE_I8, SC_DTYPE_U8, SC_DTYPE_I32, SC_DTYPE_U64, SC_DTYPE_BOOL};
  int32_t i = V(k, p, 0);
  int32_t f = kir_load(A, k, pf, i), x = kir_load(A, k, pi, i);
  for (size_t j = 0; j < sizeof outs / sizeof *outs; j++) {
    int32_t po = kir_add_param(A, k, 2 + (int32_t)j, outs[j], n, true);
    kir_add_store(A, k, po, i, kir_cast(A, k, outs[j], f));
  }
  int32_t q1 = kir_add_param(A, k, 10, SC_DTYPE_F32, n, true);
  int32_t q2 = kir_add_param(A, k, 11, SC_DTYPE_F16, n, true);
  int32_t q3 = kir_add_param(A, k, 12, SC_DTYPE_F64, n, true);
  int32_t q4 = kir_add_param(A, k, 13, SC_DTYPE_I8, n, true);
  kir_add_store(A, k, q1, i, kir_cast(A, k, SC_DTYPE_F32, x));
  kir_add_store(A, k, q2, i, kir_cast(A, k, SC_DTYPE_F16, x));
  int32_t isn = kir_unary(A, k, KIR_ISNAN, f);
  kir_add_store(A, k, q3, i,
                BIN(k, p, KIR_ADD, kir_cast(A, k, SC_DTYPE_F64, x),
                    kir_cast(A, k, SC_DTYPE_F64, isn)));
  kir_add_store(A, k, q4, i, kir_cast(A, k, SC_DTYPE_I8, x));
  sc_cpu_module *m = jit_ok(p);
  spec s[14] = {{-400, 400, 0.1}, {-1e15, 1e15, 0.1}};
  check_kernel(p, m, 0, s, 0, 0);
  spec s2[14] = {{-1e20, 1e20, 0.05}, {-300, 300, 0.0}};
  check_kernel(p, m, 0, s2, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* A softmax row kernel over [rows, cols] with `outs` written params (1 +
 * i): its row index, x - max (d), exp(d) (e) and the row's sum of e (s). */
typedef struct softmax_parts {
  kir_kernel *k;
  int32_t out[2], i, d, e, s;
} softmax_parts;

static softmax_parts softmax_of(sc_program *p, const char *name, int64_t rows, int64_t cols,
                                int outs) {
  softmax_parts r;
  kir_kernel *k = r.k = new_kernel(p, name);
  k->outer_rank = 1;
  k->outer_dims[0] = rows;
  k->inner = cols;
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, rows * cols, false);
  for (int o = 0; o < outs; o++)
    r.out[o] = kir_add_param(A, k, 1 + o, SC_DTYPE_F32, rows * cols, true);
  r.i = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, V(k, p, 0), CI(k, p, cols)), V(k, p, KIR_INNER));
  int32_t x = kir_load(A, k, px, r.i);
  int32_t mx = kir_add_reduce(A, k, KIR_RED_MAX, SC_DTYPE_F32, x);
  r.d = BIN(k, p, KIR_SUB, x, kir_reg(A, k, mx));
  r.e = kir_unary(A, k, KIR_EXP, r.d);
  r.s = kir_reg(A, k, kir_add_reduce(A, k, KIR_RED_SUM, SC_DTYPE_F32, r.e));
  return r;
}

/* Softmax over rows of [5,129]: max, sum of exp, normalise. */
static void build_softmax(sc_program *p, const char *name, int64_t rows, int64_t cols) {
  softmax_parts r = softmax_of(p, name, rows, cols, 1);
  kir_add_store(A, r.k, r.out[0], r.i, BIN(r.k, p, KIR_DIV, r.e, r.s));
}

static void test_softmax(void **state) {
  (void)state;
  rng_seed(15);
  sc_program *p = new_program();
  build_softmax(p, "softmax", 5, 129);
  sc_cpu_module *m = jit_ok(p);
  spec s[2] = {{-8, 8, 0}};
  check_kernel(p, m, 0, s, 1e-5, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Reductions over axis 1 of x[4,50,6] (strided inner loop): ARGMAX and
 * ARGMIN (ties likely: values quantised), MAX and MIN with NaNs (propagate),
 * SUM and PROD; a total sum of i32 into i64 with outer rank 0. */
static void test_reductions(void **state) {
  (void)state;
  rng_seed(16);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "reduce_axis1");
  k->outer_rank = 2;
  k->outer_dims[0] = 4;
  k->outer_dims[1] = 6;
  k->inner = 50;
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, 4 * 50 * 6, false);
  int32_t pn = kir_add_param(A, k, 1, SC_DTYPE_F32, 4 * 50 * 6, false);
  int32_t oi = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, V(k, p, 0), CI(k, p, 6)), V(k, p, 1));
  int32_t xi = BIN(k, p, KIR_ADD,
                   BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, V(k, p, 0), CI(k, p, 300)),
                       BIN(k, p, KIR_MUL, V(k, p, KIR_INNER), CI(k, p, 6))),
                   V(k, p, 1));
  /* quantise to multiples of 0.25 so that ties happen */
  int32_t x = kir_load(A, k, px, xi);
  int32_t q = BIN(k, p, KIR_MUL,
                  kir_unary(A, k, KIR_ROUND, BIN(k, p, KIR_MUL, x, kir_const_f(A, k, SC_DTYPE_F32, 4))),
                  kir_const_f(A, k, SC_DTYPE_F32, 0.25));
  int32_t xn = kir_load(A, k, pn, xi);
  kir_reduce_op rops[] = {KIR_RED_ARGMAX, KIR_RED_ARGMIN, KIR_RED_MAX, KIR_RED_MIN,
                          KIR_RED_ARGMAX, KIR_RED_SUM, KIR_RED_PROD};
  int32_t vals[] = {q, q, xn, xn, xn, x, BIN(k, p, KIR_ADD, x, kir_const_f(A, k, SC_DTYPE_F32, 1.0))};
  for (int j = 0; j < 7; j++) {
    int32_t ph = kir_add_reduce(A, k, rops[j], SC_DTYPE_F32, vals[j]);
    bool arg = rops[j] == KIR_RED_ARGMAX || rops[j] == KIR_RED_ARGMIN;
    int32_t po = kir_add_param(A, k, 2 + j, arg ? SC_DTYPE_I64 : SC_DTYPE_F32, 24, true);
    kir_add_store(A, k, po, oi, kir_reg(A, k, ph));
  }
  /* outer rank 0: sum of all of an i32 buffer into i64, max too */
  kir_kernel *t = new_kernel(p, "total_sum");
  t->inner = 1000;
  int32_t pt = kir_add_param(A, t, 0, SC_DTYPE_I32, 1000, false);
  int32_t po = kir_add_param(A, t, 1, SC_DTYPE_I64, 2, true);
  int32_t v = kir_cast(A, t, SC_DTYPE_I64, kir_load(A, t, pt, kir_var(A, t, KIR_INNER)));
  int32_t s0 = kir_add_reduce(A, t, KIR_RED_SUM, SC_DTYPE_I64, v);
  int32_t s1 = kir_add_reduce(A, t, KIR_RED_MAX, SC_DTYPE_I64, v);
  kir_add_store(A, t, po, kir_const_i(A, t, SC_DTYPE_I64, 0), kir_reg(A, t, s0));
  kir_add_store(A, t, po, kir_const_i(A, t, SC_DTYPE_I64, 1), kir_reg(A, t, s1));

  /* MAX and MIN over rows longer than 16 first fold integer keys, and
   * fall back to the in-order loop on a NaN or a zero result (emit.c
   * fast_minmax): rows of [-1, 0] with zeros of both signs and -inf, whose
   * maximum (and the minimum of their negation) is +0 or -0 as the last
   * zero in the row is; bitwise. reduce_axis1 covers the fast path. */
  kir_kernel *z = new_kernel(p, "minmax_zeros");
  z->outer_rank = 1;
  z->outer_dims[0] = 30;
  z->inner = 40;
  int32_t pz = kir_add_param(A, z, 0, SC_DTYPE_F32, 1200, false);
  int32_t zi = BIN(z, p, KIR_ADD, BIN(z, p, KIR_MUL, V(z, p, 0), CI(z, p, 40)), V(z, p, KIR_INNER));
  int32_t zx = kir_load(A, z, pz, zi);
  int32_t bad = kir_binary(A, z, KIR_OR, kir_binary(A, z, KIR_NE, zx, zx),
                           BIN(z, p, KIR_GT, zx, kir_const_f(A, z, SC_DTYPE_F32, 0)));
  int32_t zv = kir_select(A, z, bad, kir_const_f(A, z, SC_DTYPE_F32, -0.5), zx);
  int32_t zmax = kir_add_reduce(A, z, KIR_RED_MAX, SC_DTYPE_F32, zv);
  int32_t zmin = kir_add_reduce(A, z, KIR_RED_MIN, SC_DTYPE_F32, kir_unary(A, z, KIR_NEG, zv));
  int32_t zo = kir_add_param(A, z, 1, SC_DTYPE_F32, 60, true);
  int32_t zo0 = BIN(z, p, KIR_MUL, V(z, p, 0), CI(z, p, 2));
  kir_add_store(A, z, zo, zo0, kir_reg(A, z, zmax));
  kir_add_store(A, z, zo, BIN(z, p, KIR_ADD, zo0, CI(z, p, 1)), kir_reg(A, z, zmin));

  sc_cpu_module *m = jit_ok(p);
  /* pn: NaNs in some columns (special 3%: about 1/3 of them NaN) */
  spec s[9] = {{-2, 2, 0}, {-2, 2, 0.03}};
  check_kernel(p, m, 0, s, 1e-5, 0);
  spec s2[2] = {{-2000000, 2000000, 0.01}};
  check_kernel(p, m, 1, s2, 0, 0);
  spec s3[2] = {{-1, 0, 0.4}};
  check_kernel(p, m, 2, s3, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Gather with data-dependent indices (negative ones wrap, as Gather's
 * lowering builds them) and SELECT: out[i, j] = data[idx[i] mod n, j], and
 * where it is negative, -out. Plus elementwise MAX/MIN with NaNs. */
static void test_gather_select(void **state) {
  (void)state;
  rng_seed(17);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "gather");
  int64_t rows = 13, cols = 19, n = 11;
  k->outer_rank = 2;
  k->outer_dims[0] = rows;
  k->outer_dims[1] = cols;
  int32_t pd = kir_add_param(A, k, 0, SC_DTYPE_F32, n * cols, false);
  int32_t pi = kir_add_param(A, k, 1, SC_DTYPE_I64, rows, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, rows * cols, true);
  int32_t ix = kir_load(A, k, pi, V(k, p, 0));
  int32_t neg = BIN(k, p, KIR_LT, ix, CI(k, p, 0));
  int32_t j = kir_select(A, k, neg, BIN(k, p, KIR_ADD, ix, CI(k, p, n)), ix);
  int32_t g = kir_load(A, k, pd, BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, j, CI(k, p, cols)),
                                     V(k, p, 1)));
  int32_t sel = kir_select(A, k, BIN(k, p, KIR_LT, g, kir_const_f(A, k, SC_DTYPE_F32, 0)),
                           kir_unary(A, k, KIR_NEG, g), g);
  int64_t dims[2] = {rows, cols};
  kir_add_store(A, k, po, lin_index(k, p, 2, dims), sel);

  kir_kernel *mm = new_kernel(p, "nan_minmax");
  mm->outer_rank = 1;
  mm->outer_dims[0] = 200;
  int32_t pa = kir_add_param(A, mm, 0, SC_DTYPE_F32, 200, false);
  int32_t pb = kir_add_param(A, mm, 1, SC_DTYPE_F32, 200, false);
  int32_t o1 = kir_add_param(A, mm, 2, SC_DTYPE_F32, 200, true);
  int32_t o2 = kir_add_param(A, mm, 3, SC_DTYPE_F32, 200, true);
  int32_t o3 = kir_add_param(A, mm, 4, SC_DTYPE_BOOL, 200, true);
  int32_t i = kir_var(A, mm, 0);
  int32_t a = kir_load(A, mm, pa, i), b = kir_load(A, mm, pb, i);
  kir_add_store(A, mm, o1, i, kir_binary(A, mm, KIR_MAX, a, b));
  kir_add_store(A, mm, o2, i, kir_binary(A, mm, KIR_MIN, a, b));
  kir_add_store(A, mm, o3, i,
                kir_binary(A, mm, KIR_OR, kir_unary(A, mm, KIR_ISINF, a),
                           kir_binary(A, mm, KIR_NE, a, b)));

  sc_cpu_module *m = jit_ok(p);
  spec s[3] = {{-1, 1, 0}, {-(double)n, (double)n - 1, 0}};
  check_kernel(p, m, 0, s, 0, 0);
  spec s2[5] = {{-1, 1, 0.2}, {-1, 1, 0.2}};
  check_kernel(p, m, 1, s2, 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Math functions (f32 and f64): libm vs the interpreter's f64 libm. */
static void test_math(void **state) {
  (void)state;
  rng_seed(18);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "mathfns");
  int64_t n = 203;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, n, false);
  int32_t pd = kir_add_param(A, k, 1, SC_DTYPE_F64, n, false);
  kir_op ops[] = {KIR_EXP, KIR_LOG, KIR_SQRT, KIR_RSQRT, KIR_TANH, KIR_ERF, KIR_SIN,
                  KIR_COS, KIR_ATAN, KIR_FLOOR, KIR_CEIL, KIR_ROUND, KIR_RECIP, KIR_SIGMOID, KIR_ABS};
  int nops = (int)(sizeof ops / sizeof *ops);
  int32_t i = V(k, p, 0);
  int32_t x = kir_load(A, k, px, i), xd = kir_load(A, k, pd, i);
  int32_t ax = kir_unary(A, k, KIR_ABS, x), axd = kir_unary(A, k, KIR_ABS, xd);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, n * (nops + 2), true);
  int32_t pod = kir_add_param(A, k, 3, SC_DTYPE_F64, n * nops, true);
  for (int j = 0; j < nops; j++) {
    bool pos = ops[j] == KIR_LOG || ops[j] == KIR_SQRT || ops[j] == KIR_RSQRT;
    int32_t at = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, i, CI(k, p, nops + 2)), CI(k, p, j));
    kir_add_store(A, k, po, at, kir_unary(A, k, ops[j], pos ? ax : x));
    int32_t atd = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, i, CI(k, p, nops)), CI(k, p, j));
    kir_add_store(A, k, pod, atd, kir_unary(A, k, ops[j], pos ? axd : xd));
  }
  int32_t at = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, i, CI(k, p, nops + 2)), CI(k, p, nops));
  kir_add_store(A, k, po, at, BIN(k, p, KIR_POW, ax, x));
  at = BIN(k, p, KIR_ADD, at, CI(k, p, 1));
  kir_add_store(A, k, po, at, BIN(k, p, KIR_MOD, x, kir_const_f(A, k, SC_DTYPE_F32, 0.7)));
  sc_cpu_module *m = jit_ok(p);
  /* atol 1e-7: sin/cos/erf/tanh near their zeros are tiny absolute values */
  spec s[4] = {{-6, 6, 0}, {-6, 6, 0}};
  check_kernel(p, m, 0, s, 1e-6, 1e-7);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* The inline f32 approximations of emit.c (exp, tanh, erf, sigmoid, and
 * x^2, x^3 by multiplication) over their whole range: overflow to inf,
 * results down to the subnormals, saturation of tanh/erf, NaN, ±inf, ±0.
 * rtol 1e-6 (about 8 ulp: the approximations are within 1 ulp for exp and
 * tanh, 6 ulp for erf, docs/cpu-backend.md); atol 1e-44 (a few subnormal
 * steps: exp of large negative x). Also checks that the kernel's loop is
 * vectorised, i.e. no libm call is left in it. */
static void test_fast_math(void **state) {
  (void)state;
  rng_seed(19);
  sc_program *p = new_program();
  kir_kernel *k = new_kernel(p, "fastmath");
  int64_t n = 4001;
  k->outer_rank = 1;
  k->outer_dims[0] = n;
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, n, false);
  kir_op ops[] = {KIR_EXP, KIR_TANH, KIR_ERF, KIR_SIGMOID};
  int nops = (int)(sizeof ops / sizeof *ops), nout = nops + 2;
  int32_t po = kir_add_param(A, k, 1, SC_DTYPE_F32, n * nout, true);
  int32_t i = V(k, p, 0);
  int32_t x = kir_load(A, k, px, i);
  for (int j = 0; j < nout; j++) {
    int32_t at = BIN(k, p, KIR_ADD, BIN(k, p, KIR_MUL, i, CI(k, p, nout)), CI(k, p, j));
    int32_t v = j < nops ? kir_unary(A, k, ops[j], x)
                         : BIN(k, p, KIR_POW, x, kir_const_f(A, k, SC_DTYPE_F32, j - nops + 2));
    kir_add_store(A, k, po, at, v);
  }
  sc_cpu_module *m = jit_ok(p);
  spec wide[2] = {{-110, 110, 0.05}};
  check_kernel(p, m, 0, wide, 1e-6, 1e-44);
  spec narrow[2] = {{-5, 5, 0.05}};
  check_kernel(p, m, 0, narrow, 1e-6, 1e-44);
  sc_cpu_module_destroy(m);
  char *ir = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&ir, &len);
  assert_non_null(f);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cpu_opts o;
  sc_cpu_opts_init(&o);
  sc_status st = sc_cpu_emit_llvm_ir(p, &o, f, &d);
  fclose(f);
  if (st != SC_OK) fail_msg("emit_llvm_ir: %s", d.msg);
  assert_null(strstr(ir, "@tanhf"));
  assert_null(strstr(ir, "@erff"));
  assert_null(strstr(ir, "@expf"));
  assert_null(strstr(ir, "@powf"));
  assert_null(strstr(ir, "@llvm.pow"));
  assert_non_null(strstr(ir, " x float>")); /* vector code */
  free(ir);
  sc_program_destroy(p);
}

/* The optimised IR: kernels are defined and the elementwise loop is
 * vectorised for the host (every x86-64 has at least SSE2: <4 x float>). */
/* The optimised module's text (sc_cpu_emit_llvm_ir). */
static char *llvm_text(const sc_program *p) {
  sc_cpu_opts o;
  sc_cpu_opts_init(&o);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_cpu_emit_llvm_ir(p, &o, f, &d);
  fclose(f);
  if (st != SC_OK) fail_msg("emit_llvm_ir: %s", d.msg);
  return text;
}

static void test_emit_llvm(void **state) {
  (void)state;
  sc_program *p = new_program();
  build_broadcast(p, "bcast_ir");
  build_softmax(p, "softmax_ir", 8, 256);
  char *text = llvm_text(p);
  assert_non_null(strstr(text, "define void @bcast_ir("));
  assert_non_null(strstr(text, "define void @softmax_ir("));
  assert_non_null(strstr(text, " x float>"));
  free(text);
  sc_program_destroy(p);
}

/* The memory plan's disjoint params become scoped-noalias metadata
 * (codegen/cpu/emit.c alias_scopes); params it may overlap get none, and
 * neither does a program whose kernels name no buffers. build_broadcast's
 * params are buffers 0 (a), 1 (b), 2 (out), 3 (out2): a, out and out2 in
 * the arena (placed or not), out2 overlapping a's range; b a constant. The
 * kernel still matches the interpreter. */
static void test_alias_scopes(void **state) {
  (void)state;
  rng_seed(12);
  for (int planned = 0; planned < 2; planned++) {
    sc_program *p = new_program();
    static const float bvals[7 * 33];
    const int64_t n = 3 * 7 * 33, bytes = n * 4;
    const int64_t offs[4] = {0, -1, 2 * bytes, 64};
    for (int i = 0; i < 4; i++) {
      sc_buffer b = {.name = "x", .kind = i == 1 ? SC_BUF_CONST : SC_BUF_TEMP,
                     .dtype = SC_DTYPE_F32, .rank = 1, .dims = {i == 1 ? 7 * 33 : n},
                     .bytes = i == 1 ? 7 * 33 * 4 : bytes, .offset = planned ? offs[i] : -1,
                     .data = i == 1 ? bvals : NULL, .alias_of = -1, .value = -1};
      assert_true(sc_program_add_buffer(p, &b) == i);
    }
    build_broadcast(p, "alias_md");
    assert_int_equal(sc_program_disjoint(p, 0, 2), planned);
    assert_true(sc_program_disjoint(p, 0, 1)); /* a constant: planned or not */
    assert_false(sc_program_disjoint(p, 0, 3)); /* [0, bytes) and [64, 64 + bytes) */
    assert_false(sc_program_disjoint(p, 2, 2));
    char *text = llvm_text(p);
    /* planned or not, a and b (a constant) are apart: the kernel's scope
     * domain (named after it) is there; the text is the optimised module,
     * where the vectoriser adds scopes of its own ("LVerDomain") to loops
     * it guards with run-time checks */
    assert_non_null(strstr(text, "!noalias"));
    assert_non_null(strstr(text, "!\"alias_md\"}"));
    free(text);
    sc_cpu_module *m = jit_ok(p);
    spec sp[4] = {{-2, 2, 0.05}, {-2, 2, 0.05}, Z, Z};
    check_kernel(p, m, 0, sp, 0, 0);
    sc_cpu_module_destroy(m);
    sc_program_destroy(p);
  }
  /* nothing apart: no metadata */
  sc_program *p = new_program();
  build_broadcast(p, "alias_none");
  char *text = llvm_text(p);
  assert_null(strstr(text, "!\"alias_none\"}"));
  free(text);
  sc_program_destroy(p);
}

/* sc_program_pointwise_after on the broadcast kernel (out = relu(a + b[j]),
 * out2 = a * b[j] - a over a [3, 7, 33] a) as the epilogue of a's
 * producer: a read at the point's element, b at a column, the outputs at
 * the point's element; it holds only while every param is at a's address
 * or apart from a, and a param at a's address is read at the point's own
 * element. */
static void test_pointwise_after(void **state) {
  (void)state;
  const int64_t n = 3 * 7 * 33, bytes = n * 4;
  struct {
    int64_t off[4];
    bool b_const, want;
  } cases[] = {
      {{0, -1, 2 * bytes, 3 * bytes}, true, true},  /* all apart */
      {{0, -1, 2 * bytes, 0}, true, true},          /* out2 in place of a */
      {{0, -1, 2 * bytes, 64}, true, false},        /* out2 overlaps a, shifted */
      {{0, 0, 2 * bytes, 3 * bytes}, false, false}, /* b at a's address, read at a column */
      {{0, -1, -1, 3 * bytes}, true, false},        /* out not placed: not known apart */
  };
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    sc_program *p = new_program();
    static const float bvals[7 * 33];
    for (int i = 0; i < 4; i++) {
      bool cst = i == 1 && cases[t].b_const;
      sc_buffer b = {.name = "x", .kind = cst ? SC_BUF_CONST : SC_BUF_TEMP,
                     .dtype = SC_DTYPE_F32, .rank = 1, .dims = {i == 1 ? 7 * 33 : n},
                     .bytes = i == 1 ? 7 * 33 * 4 : bytes, .offset = cases[t].off[i],
                     .data = cst ? bvals : NULL, .alias_of = -1, .value = -1};
      assert_true(sc_program_add_buffer(p, &b) == i);
    }
    build_broadcast(p, "pw");
    if (sc_program_pointwise_after(p, 0, 0) != cases[t].want) fail_msg("case %zu", t);
    /* b is no whole output of the kernel's points */
    assert_false(sc_program_pointwise_after(p, 0, 1));
    sc_program_destroy(p);
  }
}

/* Row caches (codegen/cpu/emit.c): softmax's exp(x - max), used by its sum
 * and its store phase, is kept by the first and loaded by the second; in a
 * kernel where it feeds two store phases and x - max also feeds one
 * directly (log-softmax's d - log s), the same. The optimised IR has the
 * cache; the outputs equal the interpreter's and, bit for bit, those of
 * the kernels compiled without caches (SHARDC_ROW_CACHE=0); a row longer
 * than ROW_CACHE_MAX (4096) has none. */
static void build_two_stores(sc_program *p, const char *name, int64_t rows, int64_t cols) {
  softmax_parts r = softmax_of(p, name, rows, cols, 2);
  kir_kernel *k = r.k;
  kir_add_store(A, k, r.out[0], r.i, BIN(k, p, KIR_SUB, r.d, kir_unary(A, k, KIR_LOG, r.s)));
  kir_add_store(A, k, r.out[1], r.i, BIN(k, p, KIR_MUL, r.e, kir_unary(A, k, KIR_RECIP, r.s)));
}

/* Runs every kernel of p over its whole range on the same seeded inputs
 * with m; returns the written params' bytes, one malloc'd block each. */
static void run_all(const sc_program *p, const sc_cpu_module *m, void **outs) {
  for (int32_t kid = 0; kid < p->n_kernels; kid++) {
    const kir_kernel *k = p->kernels[kid];
    void *bufs[16];
    assert_true(k->n_params <= 16);
    rng_seed(40 + (uint64_t)kid);
    for (int32_t i = 0; i < k->n_params; i++) {
      size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
      bufs[i] = malloc(bytes);
      assert_non_null(bufs[i]);
      if (k->params[i].written) memset(bufs[i], 0xA5, bytes);
      else fill(k->params[i].dtype, bufs[i], k->params[i].numel, (spec){-8, 8, 0.02});
    }
    sc_cpu_kernel(m, kid)(bufs, 0, outer_total(k));
    for (int32_t i = 0; i < k->n_params; i++)
      if (k->params[i].written) *outs++ = bufs[i];
      else free(bufs[i]);
  }
}

/* Whether the body of function `fn` in module text has `needle`. */
static bool body_has(const char *text, const char *fn, const char *needle) {
  char head[128];
  snprintf(head, sizeof head, "define void @%s(", fn);
  const char *at = strstr(text, head);
  assert_non_null(at);
  const char *end = strstr(at, "\n}\n");
  const char *hit = strstr(at, needle);
  return hit && (!end || hit < end);
}

static void test_row_cache(void **state) {
  (void)state;
  rng_seed(16);
  sc_program *p = new_program();
  build_softmax(p, "rc_softmax", 7, 131);
  build_two_stores(p, "rc_two", 5, 67);
  build_softmax(p, "rc_long", 2, 4100);
  char *text = llvm_text(p);
  assert_true(body_has(text, "rc_softmax", "rowcache"));
  assert_true(body_has(text, "rc_two", "rowcache"));
  assert_false(body_has(text, "rc_long", "rowcache"));
  free(text);
  sc_cpu_module *m = jit_ok(p);
  spec s[3] = {{-8, 8, 0}, Z, Z};
  for (int32_t kid = 0; kid < 3; kid++) check_kernel(p, m, kid, s, 1e-5, 1e-6);
  void *with[4], *without[4];
  run_all(p, m, with);
  sc_cpu_module_destroy(m);
  setenv("SHARDC_ROW_CACHE", "0", 1);
  text = llvm_text(p);
  assert_null(strstr(text, "rowcache"));
  free(text);
  m = jit_ok(p);
  unsetenv("SHARDC_ROW_CACHE");
  run_all(p, m, without);
  int64_t sizes[4] = {7 * 131, 5 * 67, 5 * 67, 2 * 4100};
  for (int i = 0; i < 4; i++) {
    if (memcmp(with[i], without[i], (size_t)sizes[i] * 4) != 0)
      fail_msg("output %d differs with and without row caches", i);
    free(with[i]);
    free(without[i]);
  }
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* Two kernels with one name is an error, not a crash. */
static void test_duplicate_name(void **state) {
  (void)state;
  sc_program *p = new_program();
  build_broadcast(p, "same");
  build_broadcast(p, "same");
  sc_cpu_module *m = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_cpu_jit(p, NULL, &m, &d), SC_ERR_INVALID);
  assert_null(m);
  assert_non_null(strstr(d.msg, "same"));
  sc_program_destroy(p);
}

/* 50 kernels: JIT time is reported; each kernel runs and is right. */
static void test_jit_many(void **state) {
  (void)state;
  rng_seed(19);
  sc_program *p = new_program();
  for (int j = 0; j < 50; j++) {
    char name[32];
    snprintf(name, sizeof name, "k%02d", j);
    if (j % 5 == 4) build_softmax(p, name, 3, 40 + j);
    else build_broadcast(p, name);
  }
  sc_cpu_module *m = jit_ok(p);
  printf("[ INFO     ] JIT of 50 kernels: %.3f s\n", sc_cpu_compile_seconds(m));
  assert_true(sc_cpu_compile_seconds(m) > 0);
  spec s[4] = {{-2, 2, 0}, {-2, 2, 0}};
  for (int j = 0; j < 50; j += 7) check_kernel(p, m, j, s, j % 5 == 4 ? 1e-5 : 0, 0);
  sc_cpu_module_destroy(m);
  sc_program_destroy(p);
}

/* The object-file path: emit an object, link it with a small C driver using
 * the system compiler, run it on inputs written by this test and compare
 * its outputs with the interpreter's. Skipped where there is no `cc`. */
static void test_object_file(void **state) {
  (void)state;
  if (system("cc --version > /dev/null 2>&1") != 0)
    SC_SKIP("no system C compiler (cc) to link the object file with");
  rng_seed(20);
  sc_program *p = new_program();
  build_broadcast(p, "obj_bcast");
  build_softmax(p, "obj_softmax", 5, 129);
  char dir[] = "/tmp/sc_cpu_objXXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[512], cmd[2048];
  snprintf(path, sizeof path, "%s/kernels.o", dir);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_cpu_emit_object(p, NULL, path, &d);
  if (st != SC_OK) fail_msg("emit_object: %s", d.msg);

  /* the driver: reads in.bin (all params of both kernels, in order), runs
   * obj_bcast over [0,693) and obj_softmax in two chunks, writes out.bin */
  snprintf(path, sizeof path, "%s/driver.c", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
        "void obj_bcast(void *const *, int64_t, int64_t);\n"
        "void obj_softmax(void *const *, int64_t, int64_t);\n"
        "static float a[693], b[231], o1[693], o2[693], x[645], y[645];\n"
        "int main(int argc, char **argv) {\n"
        "  FILE *f = fopen(argv[1], \"rb\");\n"
        "  if (!f || fread(a, 4, 693, f) != 693 || fread(b, 4, 231, f) != 231 ||\n"
        "      fread(x, 4, 645, f) != 645) return 2;\n"
        "  fclose(f);\n"
        "  void *k1[4] = {a, b, o1, o2}, *k2[2] = {x, y};\n"
        "  obj_bcast(k1, 0, 693);\n"
        "  obj_softmax(k2, 0, 2); obj_softmax(k2, 2, 5);\n"
        "  f = fopen(argv[2], \"wb\");\n"
        "  if (!f || fwrite(o1, 4, 693, f) != 693 || fwrite(o2, 4, 693, f) != 693 ||\n"
        "      fwrite(y, 4, 645, f) != 645) return 3;\n"
        "  (void)argc; return fclose(f) != 0;\n}\n",
        f);
  fclose(f);

  float a[693], b[231], x[645];
  spec s = {-3, 3, 0};
  fill(SC_DTYPE_F32, a, 693, s);
  fill(SC_DTYPE_F32, b, 231, s);
  fill(SC_DTYPE_F32, x, 645, s);
  snprintf(path, sizeof path, "%s/in.bin", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(a, 4, 693, f), 693);
  assert_int_equal(fwrite(b, 4, 231, f), 231);
  assert_int_equal(fwrite(x, 4, 645, f), 645);
  fclose(f);

  snprintf(cmd, sizeof cmd,
           "cd %s && cc -O1 -o driver driver.c kernels.o -lm && ./driver in.bin out.bin", dir);
  int rc = system(cmd);
  assert_int_equal(rc, 0);

  float o1[693], o2[693], y[645], r1[693], r2[693], ry[645];
  snprintf(path, sizeof path, "%s/out.bin", dir);
  f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(o1, 4, 693, f), 693);
  assert_int_equal(fread(o2, 4, 693, f), 693);
  assert_int_equal(fread(y, 4, 645, f), 645);
  fclose(f);
  void *k1[4] = {a, b, r1, r2}, *k2[2] = {x, ry};
  assert_int_equal(kir_interpret(p->kernels[0], k1, &d), SC_OK);
  assert_int_equal(kir_interpret(p->kernels[1], k2, &d), SC_OK);
  compare(&p->kernels[0]->params[2], r1, o1, 0, 0, "object obj_bcast out");
  compare(&p->kernels[0]->params[3], r2, o2, 0, 0, "object obj_bcast out2");
  compare(&p->kernels[1]->params[1], ry, y, 1e-5, 0, "object obj_softmax");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  sc_program_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcast_relu), cmocka_unit_test(test_half_types),
      cmocka_unit_test(test_int_math),       cmocka_unit_test(test_bitwise),
      cmocka_unit_test(test_bitcast),
      cmocka_unit_test(test_narrow_casts),
      cmocka_unit_test(test_casts),
      cmocka_unit_test(test_softmax),        cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_row_cache),
      cmocka_unit_test(test_gather_select),  cmocka_unit_test(test_math),
      cmocka_unit_test(test_fast_math),
      cmocka_unit_test(test_emit_llvm),      cmocka_unit_test(test_alias_scopes),
      cmocka_unit_test(test_pointwise_after),
      cmocka_unit_test(test_duplicate_name),
      cmocka_unit_test(test_jit_many),       cmocka_unit_test(test_object_file),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
