/* test_cuda.c — the CUDA emitter and the NVRTC driver (codegen/cuda).
 *
 * Builds kir kernels that cover the emitter's shapes (vectorised broadcast,
 * f16/bf16, i64 div/mod with zero divisors, a softmax row kernel, argmax in
 * block and thread mode, a gather with a data-dependent index, select,
 * saturating casts, a multi-tensor kernel of three segments), emits them, and compiles them through NVRTC for sm_80
 * and sm_90 (no GPU needed). Also: NVRTC errors come back with the log, bad
 * architecture strings are refused, a golden check of one kernel's text,
 * launch configurations, __restrict__ only on distinct buffers.
 *
 * With a GPU (libcuda loads and sees a device), test_gpu_matches_interpreter
 * runs every kernel on seeded random data through the CUDA driver API and
 * compares with kir_interpret; without one it is skipped, unless the
 * environment sets SC_CUDA_REQUIRE_GPU=1 (tests/gpu/test_gpu.sh does), which
 * turns a missing device into a failure. Tolerances there: integer and bool
 * outputs exact; f32 rtol 2e-5 + atol 1e-6 (CUDA's expf/erff/tanhf are
 * within 2 ulp where the interpreter rounds a double result, and block
 * reductions reassociate sums); f16 and bf16 one unit in the last place of
 * their own precision (the f32 values before rounding differ by a few f32
 * ulp, which can flip a rounding). A NaN matches only a NaN of the
 * interpreter's (k_cast feeds NaN in on purpose); NaN on one side fails.
 *
 * test_emulated_matches_interpreter runs the same check on the emulated
 * GPU (runtime/cuda_emu.h), the random data going through kir_interpret
 * first (so indices out of range fail there), so that the GPU-only test
 * can fail only on what the GPU computes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "codegen/kir.h"

#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#include "cuda_driver.h"
#include "runtime/cuda_emu.h"

/* ---------------------------------------------------------------- kernels -- */

typedef struct tk {
  kir_kernel *k;
} tk;

#define A arena
#define C(t, v) kir_const_i(A, k, t, v)
#define F(v) kir_const_f(A, k, SC_DTYPE_F32, v)

static kir_kernel *mk(sc_arena *arena, const char *name, int32_t rank, const int64_t *dims,
                      int64_t inner) {
  kir_kernel *k = kir_kernel_create(arena, name);
  assert_non_null(k);
  k->outer_rank = rank;
  for (int32_t d = 0; d < rank; d++) k->outer_dims[d] = dims[d];
  k->inner = inner;
  return k;
}

/* out[i,j] = tanh(a[i,j]) * b[j] + 0.5 (f32, outer [8,16]: vectorised) */
static kir_kernel *k_bcast(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_bcast", 2, (int64_t[]){8, 16}, 1);
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_F32, 128, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_F32, 16, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, 128, true);
  int32_t i = kir_var(A, k, 0), j = kir_var(A, k, 1);
  int32_t idx = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, i, C(SC_DTYPE_I64, 16)), j);
  int32_t v = kir_binary(A, k, KIR_MUL, kir_unary(A, k, KIR_TANH, kir_load(A, k, pa, idx)),
                         kir_load(A, k, pb, j));
  v = kir_binary(A, k, KIR_ADD, v, F(0.5));
  kir_add_store(A, k, po, idx, v);
  return k;
}

/* o16[i] = x16[i] * f16(y_bf16[i]) + 0.25; obf[i] = bf16(exp(x16[i])) */
static kir_kernel *k_half(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_half", 1, (int64_t[]){37}, 1);
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F16, 37, false);
  int32_t py = kir_add_param(A, k, 1, SC_DTYPE_BF16, 37, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F16, 37, true);
  int32_t pb = kir_add_param(A, k, 3, SC_DTYPE_BF16, 37, true);
  int32_t i = kir_var(A, k, 0);
  int32_t x = kir_load(A, k, px, i);
  int32_t y = kir_cast(A, k, SC_DTYPE_F16, kir_load(A, k, py, i));
  int32_t v = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, x, y),
                         kir_const_f(A, k, SC_DTYPE_F16, 0.25));
  kir_add_store(A, k, po, i, v);
  kir_add_store(A, k, pb, i, kir_cast(A, k, SC_DTYPE_BF16, kir_unary(A, k, KIR_EXP, x)));
  return k;
}

/* q[i] = a[i] / b[i], m[i] = a[i] % b[i] (i64; b holds zeros and -1) */
static kir_kernel *k_divmod(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_divmod", 1, (int64_t[]){64}, 1);
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_I64, 64, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_I64, 64, false);
  int32_t pq = kir_add_param(A, k, 2, SC_DTYPE_I64, 64, true);
  int32_t pm = kir_add_param(A, k, 3, SC_DTYPE_I64, 64, true);
  int32_t i = kir_var(A, k, 0);
  int32_t a = kir_load(A, k, pa, i), b = kir_load(A, k, pb, i);
  kir_add_store(A, k, pq, i, kir_binary(A, k, KIR_DIV, a, b));
  kir_add_store(A, k, pm, i, kir_binary(A, k, KIR_MOD, a, b));
  return k;
}

/* softmax over rows of 100: max, sum of exp, store (block per row) */
static kir_kernel *k_softmax(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_softmax", 1, (int64_t[]){6}, 100);
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, 600, false);
  int32_t po = kir_add_param(A, k, 1, SC_DTYPE_F32, 600, true);
  int32_t idx = kir_binary(A, k, KIR_ADD,
                           kir_binary(A, k, KIR_MUL, kir_var(A, k, 0), C(SC_DTYPE_I64, 100)),
                           kir_var(A, k, KIR_INNER));
  int32_t x = kir_load(A, k, px, idx);
  int32_t p0 = kir_add_reduce(A, k, KIR_RED_MAX, SC_DTYPE_F32, x);
  int32_t e = kir_unary(A, k, KIR_EXP, kir_binary(A, k, KIR_SUB, x, kir_reg(A, k, p0)));
  int32_t p1 = kir_add_reduce(A, k, KIR_RED_SUM, SC_DTYPE_F32, e);
  kir_add_store(A, k, po, idx, kir_binary(A, k, KIR_DIV, e, kir_reg(A, k, p1)));
  return k;
}

/* argmax over rows of `inner` (i64 result); ties appear (values rounded) */
static kir_kernel *k_argmax(sc_arena *arena, const char *name, int64_t rows, int64_t inner) {
  kir_kernel *k = mk(arena, name, 1, (int64_t[]){rows}, inner);
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, rows * inner, false);
  int32_t po = kir_add_param(A, k, 1, SC_DTYPE_I64, rows, true);
  int32_t idx = kir_binary(A, k, KIR_ADD,
                           kir_binary(A, k, KIR_MUL, kir_var(A, k, 0), C(SC_DTYPE_I64, inner)),
                           kir_var(A, k, KIR_INNER));
  int32_t p0 = kir_add_reduce(A, k, KIR_RED_ARGMAX, SC_DTYPE_F32, kir_load(A, k, px, idx));
  kir_add_store(A, k, po, kir_var(A, k, 0), kir_reg(A, k, p0));
  return k;
}

/* out[i,j] = data[norm(ind[i]), j]: data [10,6], ind [5] (i64, negatives) */
static kir_kernel *k_gather(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_gather", 2, (int64_t[]){5, 6}, 1);
  int32_t pd = kir_add_param(A, k, 0, SC_DTYPE_F32, 60, false);
  int32_t pi = kir_add_param(A, k, 1, SC_DTYPE_I64, 5, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, 30, true);
  int32_t i = kir_var(A, k, 0), j = kir_var(A, k, 1);
  int32_t ix = kir_load(A, k, pi, i);
  ix = kir_select(A, k, kir_binary(A, k, KIR_LT, ix, C(SC_DTYPE_I64, 0)),
                  kir_binary(A, k, KIR_ADD, ix, C(SC_DTYPE_I64, 10)), ix);
  int32_t src = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, ix, C(SC_DTYPE_I64, 6)), j);
  int32_t dst = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, i, C(SC_DTYPE_I64, 6)), j);
  kir_add_store(A, k, po, dst, kir_load(A, k, pd, src));
  return k;
}

/* out = x > 0 ? x : max(y, -0.1) * 0.1; flag[i] = isnan(x) || x < y (bool) */
static kir_kernel *k_select(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_select", 1, (int64_t[]){50}, 1);
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, 50, false);
  int32_t py = kir_add_param(A, k, 1, SC_DTYPE_F32, 50, false);
  int32_t po = kir_add_param(A, k, 2, SC_DTYPE_F32, 50, true);
  int32_t pf = kir_add_param(A, k, 3, SC_DTYPE_BOOL, 50, true);
  int32_t i = kir_var(A, k, 0);
  int32_t x = kir_load(A, k, px, i), y = kir_load(A, k, py, i);
  int32_t neg = kir_binary(A, k, KIR_MUL, kir_binary(A, k, KIR_MAX, y, F(-0.1)), F(0.1));
  kir_add_store(A, k, po, i, kir_select(A, k, kir_binary(A, k, KIR_GT, x, F(0)), x, neg));
  kir_add_store(A, k, pf, i,
                kir_binary(A, k, KIR_OR, kir_unary(A, k, KIR_ISNAN, x),
                           kir_binary(A, k, KIR_LT, x, y)));
  return k;
}

/* o32[i] = i32(x[i] * 1e10) (saturating), o8[i] = i8(x[i] * 300) (wraps),
 * r[i] = round(x[i] * 4) + erf(x) (half to even); bits[i] = x's bits as
 * i32, h[i] = f16(x * 3) through its i16 bits and back */
static kir_kernel *k_cast(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_cast", 1, (int64_t[]){40}, 1);
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, 40, false);
  int32_t p32 = kir_add_param(A, k, 1, SC_DTYPE_I64, 40, true);
  int32_t p8 = kir_add_param(A, k, 2, SC_DTYPE_I8, 40, true);
  int32_t pr = kir_add_param(A, k, 3, SC_DTYPE_F32, 40, true);
  int32_t i = kir_var(A, k, 0);
  int32_t x = kir_load(A, k, px, i);
  kir_add_store(A, k, p32, i, kir_cast(A, k, SC_DTYPE_I64,
                                       kir_binary(A, k, KIR_MUL, x, F(1e20))));
  kir_add_store(A, k, p8, i, kir_cast(A, k, SC_DTYPE_I8, kir_binary(A, k, KIR_MUL, x, F(300))));
  int32_t r = kir_unary(A, k, KIR_ROUND, kir_binary(A, k, KIR_MUL, x, F(4)));
  kir_add_store(A, k, pr, i, kir_binary(A, k, KIR_ADD, r, kir_unary(A, k, KIR_ERF, x)));
  int32_t pbits = kir_add_param(A, k, 4, SC_DTYPE_I32, 40, true);
  int32_t ph = kir_add_param(A, k, 5, SC_DTYPE_F32, 40, true);
  kir_add_store(A, k, pbits, i, kir_bitcast(A, k, SC_DTYPE_I32, x));
  int32_t h = kir_cast(A, k, SC_DTYPE_F16, kir_binary(A, k, KIR_MUL, x, F(3)));
  kir_add_store(A, k, ph, i,
                kir_bitcast(A, k, SC_DTYPE_F16, kir_bitcast(A, k, SC_DTYPE_I16, h)));
  return k;
}

/* in-place: x[i] = x[i] * 2 (both params the same buffer: no restrict) */
static kir_kernel *k_inplace(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_inplace", 1, (int64_t[]){16}, 1);
  int32_t pi = kir_add_param(A, k, 7, SC_DTYPE_F32, 16, false);
  int32_t po = kir_add_param(A, k, 7, SC_DTYPE_F32, 16, true);
  int32_t i = kir_var(A, k, 0);
  kir_add_store(A, k, po, i, kir_binary(A, k, KIR_MUL, kir_load(A, k, pi, i), F(2)));
  return k;
}

/* bitwise on u16 and i32, shifts of u8 and u64 by counts that cross the
 * width: o16 = (a & b) ^ ~b | (a >> 3); o8 = c << c | c >> 2; o64 = (w << c)
 * | (w >> c); o32 = (x >> x) ^ ~((x << x) | 0x5a5a) (signed: arithmetic >>,
 * negative counts) */
static kir_kernel *k_bits(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_bits", 1, (int64_t[]){67}, 1);
  int32_t pa = kir_add_param(A, k, 0, SC_DTYPE_U16, 67, false);
  int32_t pb = kir_add_param(A, k, 1, SC_DTYPE_U16, 67, false);
  int32_t pc = kir_add_param(A, k, 2, SC_DTYPE_U8, 67, false);
  int32_t pw = kir_add_param(A, k, 3, SC_DTYPE_U64, 67, false);
  int32_t px = kir_add_param(A, k, 4, SC_DTYPE_I32, 67, false);
  int32_t o16 = kir_add_param(A, k, 5, SC_DTYPE_U16, 67, true);
  int32_t o8 = kir_add_param(A, k, 6, SC_DTYPE_U8, 67, true);
  int32_t o64 = kir_add_param(A, k, 7, SC_DTYPE_U64, 67, true);
  int32_t o32 = kir_add_param(A, k, 8, SC_DTYPE_I32, 67, true);
  int32_t i = kir_var(A, k, 0);
  int32_t a = kir_load(A, k, pa, i), b = kir_load(A, k, pb, i), c = kir_load(A, k, pc, i);
  int32_t w = kir_load(A, k, pw, i), x = kir_load(A, k, px, i);
  int32_t v = kir_binary(A, k, KIR_XOR, kir_binary(A, k, KIR_AND, a, b), kir_unary(A, k, KIR_NOT, b));
  v = kir_binary(A, k, KIR_OR, v, kir_binary(A, k, KIR_SHR, a, C(SC_DTYPE_U16, 3)));
  kir_add_store(A, k, o16, i, v);
  kir_add_store(A, k, o8, i,
                kir_binary(A, k, KIR_OR, kir_binary(A, k, KIR_SHL, c, c),
                           kir_binary(A, k, KIR_SHR, c, C(SC_DTYPE_U8, 2))));
  int32_t c64 = kir_cast(A, k, SC_DTYPE_U64, c);
  kir_add_store(A, k, o64, i,
                kir_binary(A, k, KIR_OR, kir_binary(A, k, KIR_SHL, w, c64),
                           kir_binary(A, k, KIR_SHR, w, c64)));
  kir_add_store(A, k, o32, i,
                kir_binary(A, k, KIR_XOR, kir_binary(A, k, KIR_SHR, x, x),
                           kir_unary(A, k, KIR_NOT,
                                     kir_binary(A, k, KIR_OR, kir_binary(A, k, KIR_SHL, x, x),
                                                C(SC_DTYPE_I32, 0x5a5a)))));
  return k;
}

/* the narrow types: x scaled into each one's range, cast and stored (the
 * encode), cast back to f32 (the rounding in registers); a float8 and an
 * int4 input loaded (the decode) */
static kir_kernel *k_narrow(sc_arena *arena) {
  kir_kernel *k = mk(arena, "k_narrow", 1, (int64_t[]){53}, 1);
  static const struct { sc_dtype t; double scale; } to[] = {
      {SC_DTYPE_F8E4M3FN, 600}, {SC_DTYPE_F8E4M3FNUZ, 0.05}, {SC_DTYPE_F8E5M2, 7e4},
      {SC_DTYPE_F8E5M2FNUZ, 1e-4}, {SC_DTYPE_F4E2M1, 8}, {SC_DTYPE_F8E8M0, 5},
      {SC_DTYPE_I4, 20}, {SC_DTYPE_U2, 6}};
  int32_t px = kir_add_param(A, k, 0, SC_DTYPE_F32, 53, false);
  int32_t pf8 = kir_add_param(A, k, 1, SC_DTYPE_F8E5M2, 53, false);
  int32_t pi4 = kir_add_param(A, k, 2, SC_DTYPE_I4, 53, false);
  int32_t i = kir_var(A, k, 0);
  int32_t x = kir_load(A, k, px, i), o = 3;
  for (size_t j = 0; j < sizeof to / sizeof *to; j++) {
    int32_t c = kir_cast(A, k, to[j].t, kir_binary(A, k, KIR_MUL, x, F(to[j].scale)));
    kir_add_store(A, k, kir_add_param(A, k, o++, to[j].t, 53, true), i, c);
    kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_F32, 53, true), i,
                  kir_cast(A, k, SC_DTYPE_F32, c));
  }
  kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_F32, 53, true), i,
                kir_cast(A, k, SC_DTYPE_F32, kir_load(A, k, pf8, i)));
  kir_add_store(A, k, kir_add_param(A, k, o++, SC_DTYPE_F16, 53, true), i,
                kir_cast(A, k, SC_DTYPE_F16, kir_load(A, k, pi4, i)));
  return k;
}

enum { N_KERNELS = 12 };
/* Every test kernel (N_KERNELS), in the fresh arena `arena`, verified. */
/* A multi-tensor kernel (kir.h, n_segs): o = x * s[0] - sqrt(|g|) * 0.125
 * (f32; s a scalar of each segment's own) over three segments of 40, 12
 * and 64 elements, each with its own x, g, s and o: starts mid-warp and at
 * lengths that are no multiple of 4, so not vectorised. */
static kir_kernel *k_multi(sc_arena *arena) {
  static const int64_t len[3] = {40, 12, 64};
  kir_kernel *k = mk(arena, "k_multi", 1, (int64_t[]){116}, 1);
  k->n_segs = 3;
  k->seg_params = 4;
  k->seg_start = sc_arena_array(arena, 4, sizeof *k->seg_start);
  assert_non_null(k->seg_start);
  for (int32_t s = 0; s < 3; s++) {
    kir_add_param(A, k, 10 + 4 * s, SC_DTYPE_F32, len[s], false);
    kir_add_param(A, k, 11 + 4 * s, SC_DTYPE_F32, len[s], false);
    kir_add_param(A, k, 12 + 4 * s, SC_DTYPE_F32, 1, false);
    kir_add_param(A, k, 13 + 4 * s, SC_DTYPE_F32, len[s], true);
    k->seg_start[s + 1] = k->seg_start[s] + len[s];
  }
  int32_t i = kir_var(A, k, 0);
  int32_t v = kir_binary(A, k, KIR_MUL, kir_load(A, k, 0, i), kir_load(A, k, 2, C(SC_DTYPE_I64, 0)));
  int32_t r = kir_unary(A, k, KIR_SQRT, kir_unary(A, k, KIR_ABS, kir_load(A, k, 1, i)));
  kir_add_store(A, k, 3, i, kir_binary(A, k, KIR_SUB, v, kir_binary(A, k, KIR_MUL, r, F(0.125))));
  return k;
}

static void build_all(sc_arena *arena, kir_kernel **ks) {
  sc_arena_init(arena);
  ks[0] = k_bcast(arena);
  ks[1] = k_half(arena);
  ks[2] = k_divmod(arena);
  ks[3] = k_softmax(arena);
  ks[4] = k_argmax(arena, "k_argmax_block", 5, 300);
  ks[5] = k_argmax(arena, "k_argmax_thread", 7, 5);
  ks[6] = k_gather(arena);
  ks[7] = k_select(arena);
  ks[8] = k_cast(arena);
  ks[9] = k_bits(arena);
  ks[10] = k_narrow(arena);
  ks[11] = k_multi(arena);
  sc_diag d = {0};
  for (int i = 0; i < N_KERNELS; i++) {
    sc_diag_clear(&d);
    if (kir_verify(ks[i], &d) != SC_OK) fail_msg("%s: %s", ks[i]->name, d.msg);
  }
}

#undef A
#undef C
#undef F

/* ------------------------------------------------------------------ tests -- */

static void test_compile_all_archs(void **state) {
  (void)state;
  sc_arena arena;
  kir_kernel *ks[N_KERNELS];
  build_all(&arena, ks);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cuda_build *b = NULL;
  sc_status st = sc_cuda_build_kernels(ks, N_KERNELS, "sm_80,sm_90", &b, &d);
  if (st != SC_OK) fail_msg("%s", d.msg);
  const char *dump = getenv("SC_CUDA_DUMP"); /* write the source there (debugging) */
  if (dump) {
    FILE *f = fopen(dump, "w");
    if (f) { fputs(b->source, f); fclose(f); }
  }
  assert_int_equal(b->n_archs, 2);
  assert_string_equal(b->archs[0].arch, "sm_80");
  assert_string_equal(b->archs[1].arch, "sm_90");
  for (int a = 0; a < 2; a++) {
    const char *ptx = b->archs[a].ptx;
    assert_int_equal(strlen(ptx) + 1, b->archs[a].ptx_len);
    char target[64];
    snprintf(target, sizeof target, ".target %s", b->archs[a].arch);
    assert_non_null(strstr(ptx, target));
    for (int i = 0; i < N_KERNELS; i++) {
      char entry[128];
      snprintf(entry, sizeof entry, ".visible .entry %s(", ks[i]->name);
      if (!strstr(ptx, entry)) fail_msg("%s: no entry for %s", b->archs[a].arch, ks[i]->name);
    }
  }
  /* the vectorised kernel really uses 16-byte accesses; the block kernels
     use warp shuffles */
  assert_non_null(strstr(b->source, "const float4 "));
  assert_non_null(strstr(b->archs[1].ptx, "ld.global.nc.v4.f32"));
  assert_non_null(strstr(b->archs[1].ptx, "shfl.sync.down"));
  assert_true(b->compile_seconds > 0);
  assert_int_equal(b->n_kernels, N_KERNELS);
  sc_cuda_build_destroy(b);
  sc_arena_free(&arena);
}

static void test_launch_config(void **state) {
  (void)state;
  sc_arena arena;
  kir_kernel *ks[N_KERNELS];
  build_all(&arena, ks);
  sc_cuda_launch c;
  sc_cuda_launch_config(ks[0], &c); /* bcast [8,16]: vectorised */
  assert_int_equal(c.mode, SC_CUDA_THREAD_PER_POINT);
  assert_int_equal(c.points_per_thread, 4);
  assert_int_equal(c.points, 128);
  assert_int_equal(c.grid, 1);
  sc_cuda_launch_config(ks[1], &c); /* f16: 37 points, scalar */
  assert_int_equal(c.points_per_thread, 1);
  sc_cuda_launch_config(ks[3], &c); /* softmax rows of 100 */
  assert_int_equal(c.mode, SC_CUDA_BLOCK_PER_POINT);
  assert_int_equal(c.block, 128);
  assert_int_equal(c.grid, 6);
  sc_cuda_launch_config(ks[4], &c); /* argmax rows of 300 */
  assert_int_equal(c.block, 256);
  sc_cuda_launch_config(ks[5], &c); /* argmax rows of 5: serial */
  assert_int_equal(c.mode, SC_CUDA_THREAD_PER_POINT);
  assert_int_equal(c.points_per_thread, 1);
  sc_cuda_launch_config(ks[6], &c); /* gather: last dim 6, not vectorised */
  assert_int_equal(c.points_per_thread, 1);
  sc_cuda_launch_config(ks[11], &c); /* multi-tensor: 116 points, one a thread */
  assert_int_equal(c.points, 116);
  assert_int_equal(c.points_per_thread, 1);
  sc_arena_free(&arena);
}

static void test_nvrtc_error_log(void **state) {
  (void)state;
  const char *bad = "extern \"C\" __global__ void broken(float *p) { p[0] = undefined_thing; }\n";
  char *ptx = NULL, *log = NULL;
  size_t n = 0;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_cuda_compile_ptx(bad, "sm_80", &ptx, &n, &log, &d);
  assert_int_equal(st, SC_ERR_INVALID);
  assert_null(ptx);
  assert_non_null(log);
  assert_non_null(strstr(log, "undefined_thing"));
  assert_non_null(strstr(d.msg, "nvrtc"));
  assert_non_null(strstr(d.msg, "undefined_thing"));
  sc_free(log);

  sc_diag_clear(&d);
  st = sc_cuda_compile_ptx(bad, "sm80", &ptx, &n, NULL, &d);
  assert_int_equal(st, SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "sm80"));

  /* an arch list with an empty entry */
  sc_arena arena;
  sc_arena_init(&arena);
  kir_kernel *k = k_inplace(&arena);
  sc_cuda_build *b = NULL;
  sc_diag_clear(&d);
  st = sc_cuda_build_kernels(&k, 1, "sm_80,,sm_90", &b, &d);
  assert_int_equal(st, SC_ERR_USAGE);
  assert_null(b);
  /* a good compile: PTX from a single kernel */
  sc_diag_clear(&d);
  st = sc_cuda_build_kernels(&k, 1, NULL, &b, &d);
  if (st != SC_OK) fail_msg("%s", d.msg);
  assert_int_equal(b->n_archs, 2); /* the default list */
  sc_cuda_build_destroy(b);
  sc_arena_free(&arena);
  assert_true(sc_cuda_nvrtc_version() >= 12000);

  /* a CUBIN for a real architecture (what the CUDA device loads first):
   * an ELF image; none for a virtual one */
  const char *good = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= 2.0f; }\n";
  char *cubin = NULL;
  sc_diag_clear(&d);
  st = sc_cuda_compile(good, "sm_90", true, &cubin, &n, NULL, &d);
  if (st != SC_OK) fail_msg("%s", d.msg);
  assert_true(n > 4);
  assert_memory_equal(cubin, "\x7f" "ELF", 4);
  sc_free(cubin);
  sc_diag_clear(&d);
  assert_int_equal(sc_cuda_compile(good, "compute_90", true, &cubin, &n, NULL, &d),
                   SC_ERR_UNSUPPORTED);
}

static void test_restrict_and_const(void **state) {
  (void)state;
  sc_arena arena;
  sc_arena_init(&arena);
  kir_kernel *ks[2] = {k_inplace(&arena), k_gather(&arena)};
  char *src = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_cuda_emit_kernels(ks, 2, NULL, &src, &d), SC_OK);
  assert_non_null(strstr(src, "k_inplace(const float *p0, float *p1, long long begin"));
  assert_non_null(strstr(src, "k_gather(const float *__restrict__ p0, const long long "
                              "*__restrict__ p1, float *__restrict__ p2, long long begin"));
  sc_free(src);
  sc_arena_free(&arena);
}

/* The whole emitted text of a small kernel (everything after the prelude).
 * Regenerate by printing `got` when the emitter changes on purpose, and
 * review the diff. */
static void test_golden_kernel(void **state) {
  (void)state;
  sc_arena arena;
  sc_arena_init(&arena);
  kir_kernel *k = k_divmod(&arena);
  char *src = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_cuda_emit_kernels(&k, 1, NULL, &src, &d), SC_OK);
  const char *got = strstr(src, "// k_divmod");
  assert_non_null(got);
  const char *want =
      "// k_divmod\n"
      "// outer [64] inner 1: thread per point, block 256, 1 point(s)/thread\n"
      "extern \"C\" __global__ void __launch_bounds__(256) k_divmod(const long long "
      "*__restrict__ p0, const long long *__restrict__ p1, long long *__restrict__ p2, "
      "long long *__restrict__ p3, long long begin, long long end) {\n"
      "  for (long long o = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; "
      "o < end; o += (long long)gridDim.x * blockDim.x) {\n"
      "    long long rem = o;\n"
      "    const long long v0 = rem;\n"
      "    (void)rem;\n"
      "    {\n"
      "      // phase 0: store\n"
      "      const long long e0 = (long long)v0;\n"
      "      const long long e1 = p0[e0];\n"
      "      const long long e2 = p1[e0];\n"
      "      const long long e3 = sc_idiv<long long>(e1, e2);\n"
      "      {\n"
      "      const long long r = 0; (void)r;\n"
      "      p2[e0] = e3;\n"
      "      }\n"
      "      // phase 1: store\n"
      "      const long long e4 = sc_imod<long long>(e1, e2);\n"
      "      {\n"
      "      const long long r = 0; (void)r;\n"
      "      p3[e0] = e4;\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n"
      "#ifdef SC_CUDA_EMU\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) void k_divmod__emu(void **a) {\n"
      "  k_divmod(*(const long long **)a[0], *(const long long **)a[1], *(long long **)a[2], "
      "*(long long **)a[3], *(long long *)a[4], *(long long *)a[5]);\n"
      "}\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) const long long k_divmod__emu_info[] "
      "= {6, 0, 4, 0, 512ll, 0, 512ll, 1, 512ll, 1, 512ll};\n"
      "#endif\n"
      "\n";
  if (strcmp(got, want) != 0) fail_msg("golden mismatch; emitted:\n%s", got);
  sc_free(src);
  sc_arena_free(&arena);
}

/* ------------------------------------------------------ GPU (if present) -- */

enum { MAX_PARAMS = 32 }; /* k_narrow has 21 */

/* Random contents for param p of kernel k (by name: integer data the kernel
 * can use as indices or divisors). */
static void fill(const kir_kernel *k, int32_t p, void *buf) {
  const kir_param *pp = &k->params[p];
  for (int64_t i = 0; i < pp->numel; i++) {
    double v = rng_val();
    if (!strcmp(k->name, "k_gather") && p == 1) { /* rows of a [10,6] table, negatives too */
      sc_store_i64(pp->dtype, buf, i, (int64_t)(rng_unit() * 20) - 10);
      continue;
    } else if (!strcmp(k->name, "k_divmod")) {
      int64_t x = (int64_t)(rng_unit() * 2001) - 1000;
      if (p == 1 && i % 7 == 0) x = 0;
      if (p == 1 && i % 11 == 0) x = -1;
      if (p == 0 && i == 5) x = INT64_MIN;
      sc_store_i64(pp->dtype, buf, i, x);
      continue;
    } else if (!strncmp(k->name, "k_argmax", 8)) {
      v = floor(v * 8) / 8; /* ties */
      if (i == 17) v = NAN;  /* NaN wins its row */
    } else if (!strcmp(k->name, "k_cast") && i % 5 == 0) {
      v = (i % 10 == 0) ? NAN : 0.125 * (double)(i % 7) - 0.375; /* halves, NaN */
    } else if (!strcmp(k->name, "k_select") && p == 0 && i % 9 == 0) {
      v = NAN;
    } else if (!strcmp(k->name, "k_softmax")) {
      v *= 20;
    }
    if (sc_dtype_is_float(pp->dtype)) sc_store_f64(pp->dtype, buf, i, v);
    else sc_store_i64(pp->dtype, buf, i, (int64_t)(v * 100));
  }
}

static double ulp_tol(sc_dtype t, double ref) {
  double m = fabs(ref);
  switch (t) {
  case SC_DTYPE_F16: return fmax(m * 0x1p-10, 0x1p-24);
  case SC_DTYPE_BF16: return fmax(m * 0x1p-7, 0x1p-133);
  default: return 2e-5 * m + 1e-6;
  }
}

static void compare(const kir_kernel *k, int32_t p, const void *want, const void *got,
                    const char *what) {
  const kir_param *pp = &k->params[p];
  for (int64_t i = 0; i < pp->numel; i++) {
    if (sc_dtype_is_float(pp->dtype)) {
      double w = sc_load_f64(pp->dtype, want, i), g = sc_load_f64(pp->dtype, got, i);
      if (isnan(w) && !strcmp(k->name, "k_select")) continue; /* not produced */
      if (isnan(w) && isnan(g)) continue; /* a NaN input's NaN, on both sides */
      if (isnan(w) || isnan(g) || fabs(w - g) > ulp_tol(pp->dtype, w))
        fail_msg("%s %s: param %d element %lld: gpu %.9g, interpreter %.9g", k->name, what,
                 (int)p, (long long)i, g, w);
    } else {
      int64_t w = sc_load_i64(pp->dtype, want, i), g = sc_load_i64(pp->dtype, got, i);
      if (w != g)
        fail_msg("%s %s: param %d element %lld: gpu %lld, interpreter %lld", k->name, what,
                 (int)p, (long long)i, (long long)g, (long long)w);
    }
  }
}

/* Where the kernels run: the GPU through the driver API (module), or the
 * emulated GPU (runtime/cuda_emu.h: the same CUDA C compiled by the host
 * compiler, device memory being host memory). */
typedef struct target {
  void *module;
  sc_cuda_emu *emu;
} target;

static void *t_alloc(const target *t, size_t bytes) {
  if (t->emu) return calloc(1, bytes);
  CUdptr p = 0;
  CU(cu.mem_alloc(&p, bytes));
  return (void *)(uintptr_t)p;
}

static void t_copy(const target *t, void *dst, const void *src, size_t bytes, bool to_dev) {
  if (t->emu) memcpy(dst, src, bytes);
  else if (to_dev) CU(cu.htod((CUdptr)(uintptr_t)dst, src, bytes));
  else CU(cu.dtoh(dst, (CUdptr)(uintptr_t)src, bytes));
}

static void t_free(const target *t, void *p) {
  if (t->emu) free(p);
  else CU(cu.mem_free((CUdptr)(uintptr_t)p));
}

static void t_launch(const target *t, const kir_kernel *k, const sc_cuda_launch *c,
                     unsigned grid, void **args) {
  if (t->emu) {
    sc_cuda_launch l = *c;
    l.grid = grid;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_cuda_emu_launch(t->emu, k->name, &l, args, &d) != SC_OK)
      fail_msg("%s: emulated launch: %s", k->name, d.msg);
    return;
  }
  void *fn = NULL;
  CU(cu.mod_fn(&fn, t->module, k->name));
  CU(cu.launch(fn, grid, 1, 1, (unsigned)c->block, 1, 1, 0, NULL, args, NULL));
}

/* Kernel k on seeded random data (fill) on target t, in three launches
 * (the full grid, 2 blocks striding, the range split in two), each checked
 * against kir_interpret. */
static void run_checked(const kir_kernel *k, const target *t) {
  int32_t np = k->n_params;
  void *host[MAX_PARAMS], *ref[MAX_PARAMS], *dev[MAX_PARAMS];
  assert_true(np <= MAX_PARAMS);
  for (int32_t p = 0; p < np; p++) {
    size_t bytes = (size_t)k->params[p].numel * sc_dtype_size(k->params[p].dtype);
    host[p] = calloc(1, bytes + 16);
    ref[p] = calloc(1, bytes + 16);
    fill(k, p, host[p]);
    memcpy(ref[p], host[p], bytes);
    dev[p] = t_alloc(t, bytes + 16);
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (kir_interpret(k, ref, &d) != SC_OK) fail_msg("interpreter: %s", d.msg);
  sc_cuda_launch c;
  sc_cuda_launch_config(k, &c);
  /* the full grid, then 2 blocks (grid-stride), then the range in two
     launches split at a multiple of points_per_thread */
  for (int variant = 0; variant < 3; variant++) {
    for (int32_t p = 0; p < np; p++) {
      size_t bytes = (size_t)k->params[p].numel * sc_dtype_size(k->params[p].dtype);
      t_copy(t, dev[p], host[p], bytes, true);
    }
    long long ranges[2][2] = {{0, c.points}, {0, 0}};
    int n_ranges = 1;
    if (variant == 2 && c.points >= 2 * c.points_per_thread) {
      long long mid = (c.points / 2) / c.points_per_thread * c.points_per_thread;
      ranges[0][1] = mid;
      ranges[1][0] = mid;
      ranges[1][1] = c.points;
      n_ranges = 2;
    }
    for (int r = 0; r < n_ranges; r++) {
      void *args[MAX_PARAMS + 2];
      for (int32_t p = 0; p < np; p++) args[p] = &dev[p];
      args[np] = &ranges[r][0];
      args[np + 1] = &ranges[r][1];
      t_launch(t, k, &c, variant == 1 ? 2u : (unsigned)c.grid, args);
    }
    if (!t->emu) CU(cu.sync());
    for (int32_t p = 0; p < np; p++) {
      if (!k->params[p].written) continue;
      size_t bytes = (size_t)k->params[p].numel * sc_dtype_size(k->params[p].dtype);
      void *got = calloc(1, bytes + 16);
      t_copy(t, got, dev[p], bytes, false);
      compare(k, p, ref[p], got, variant == 0 ? "full grid" : variant == 1 ? "grid 2" : "split");
      free(got);
    }
  }
  for (int32_t p = 0; p < np; p++) {
    t_free(t, dev[p]);
    free(host[p]);
    free(ref[p]);
  }
}

/* Every kernel on the emulated GPU against kir_interpret, the same check
 * as test_gpu_matches_interpreter's: no GPU needed. */
static void test_emulated_matches_interpreter(void **state) {
  (void)state;
  sc_arena arena;
  kir_kernel *ks[N_KERNELS];
  build_all(&arena, ks);
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *src = NULL;
  if (sc_cuda_emit_kernels(ks, N_KERNELS, NULL, &src, &d) != SC_OK) fail_msg("%s", d.msg);
  target t = {0};
  if (sc_cuda_emu_open(src, &t.emu, &d) != SC_OK) fail_msg("%s", d.msg);
  rng_seed(20240607);
  for (int i = 0; i < N_KERNELS; i++) run_checked(ks[i], &t);
  printf("[  EMU     ] %d kernels, emulated, match kir_interpret\n", N_KERNELS);
  sc_cuda_emu_close(t.emu);
  sc_free(src);
  sc_arena_free(&arena);
}

static void test_gpu_matches_interpreter(void **state) {
  (void)state;
  bool require = cuda_gpu_required();
  char why[128];
  if (!cuda_load(why, sizeof why)) {
    if (require) fail_msg("SC_CUDA_REQUIRE_GPU=1 but %s", why);
    SC_SKIP("no GPU: %s", why);
  }
  int dev = 0, major = 0, minor = 0;
  CU(cu.device_get(&dev, 0));
  CU(cu.device_attr(&major, CU_ATTR_CC_MAJOR, dev));
  CU(cu.device_attr(&minor, CU_ATTR_CC_MINOR, dev));
  char arch[32];
  snprintf(arch, sizeof arch, "compute_%d%d", major, minor);
  void *ctx = NULL;
  CU(cu.ctx_retain(&ctx, dev));
  CU(cu.ctx_set(ctx));

  sc_arena arena;
  kir_kernel *ks[N_KERNELS + 1];
  build_all(&arena, ks);
  ks[N_KERNELS] = k_inplace(&arena);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cuda_build *b = NULL;
  sc_status st = sc_cuda_build_kernels(ks, N_KERNELS + 1, arch, &b, &d);
  if (st != SC_OK) {
    /* a device newer than this NVRTC: its newest PTX, JIT-compiled by the driver */
    sc_diag_clear(&d);
    st = sc_cuda_build_kernels(ks, N_KERNELS + 1, "compute_90", &b, &d);
  }
  if (st != SC_OK) fail_msg("%s", d.msg);
  target t = {0};
  CU(cu.mod_load(&t.module, b->archs[0].ptx));
  rng_seed(20240607);
  for (int i = 0; i < N_KERNELS; i++) run_checked(ks[i], &t);
  printf("[  GPU     ] %d kernels match kir_interpret on sm_%d%d\n", N_KERNELS, major, minor);
  CU(cu.mod_unload(t.module));
  sc_cuda_build_destroy(b);
  sc_arena_free(&arena);
  cu.ctx_release(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_all_archs),
      cmocka_unit_test(test_launch_config),
      cmocka_unit_test(test_nvrtc_error_log),
      cmocka_unit_test(test_restrict_and_const),
      cmocka_unit_test(test_golden_kernel),
      cmocka_unit_test(test_emulated_matches_interpreter),
      cmocka_unit_test(test_gpu_matches_interpreter),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}

#else /* !SHARDC_HAVE_CUDA */

SC_TEST_MAIN_SKIPPED("built without NVRTC (SHARDC_CUDA=OFF)")
#endif
