/* test_cuda_fp8_gemm.c — FP8 products through cuBLASLt's calls on the
 * emulated GPU (SHARDC_CUDA_EMU=1: runtime/cublaslt_emu.c behind
 * runtime/cuda_gemm.c's sc_gpu_gemm_add_fp8).
 *
 *   - an E5M2 x E4M3 product laid out "TN" (A [m,k], B [n,k], C = A·Bᵀ)
 *     with both per-tensor scale pointers, on seeded random codes (NaN codes
 *     left out): C equals the double-precision product of the decoded
 *     values times the scales within 1e-6 of Σ|a·b| per element (f32 sums
 *     of exact products; the scales are powers of two), and has no NaN;
 *   - the same operands laid out "NN" (B [k,n]) are refused with a reason
 *     and no entry, as are both operands E5M2 and a device before sm_89;
 *   - a product laid out "TT" in f32 (Xᵀ·dY) with transposed FP8 copies of
 *     both operands (sc_gemm.a8_tn, b8_tn) is one FP8 matmul within the
 *     same bound, refused without them; with scale pointers that are not
 *     powers of two, its D is the unscaled D times s_a·s_b bit for bit
 *     (k = 64 and 512);
 *   - a scaled FP8 product (sc_gemm.scaled) that runs as the f32 product
 *     of the widened values (an "NN" layout) with the dequantisation
 *     factors set on its entry (sc_gpu_gemm_set_scales): within the same
 *     bound of the scaled reference, as is the FP8 matmul with the scale
 *     pointers; an entry with one pointer is refused;
 *   - the emulated library itself refuses an FP8 "NN" matmul as cuBLASLt
 *     does: CUBLAS_STATUS_NOT_SUPPORTED from the heuristic. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cublaslt.h"
#include "runtime/cuda_gemm.h"

static const sc_cu *cu;

/* the emulated driver, which the FP8 matmuls' host functions run on */
static int setup(void **state) {
  (void)state;
  sc_diag d = {0};
  if (setenv("SHARDC_CUDA_EMU", "1", 1) == 0 && sc_cu_load(&cu, &d) == SC_OK) return 0;
  fprintf(stderr, "the emulated driver: %s\n", d.msg);
  return -1;
}

enum { M = 32, N = 48, K = 64 };

/* n random codes of t that are not NaN */
static void random_codes(sc_dtype t, uint8_t *x, int n, unsigned *seed) {
  for (int i = 0; i < n; i++) {
    uint8_t c;
    do c = (uint8_t)(rand_r(seed) & 0xff);
    while (isnan(sc_narrow_decode(t, c)) || isinf(sc_narrow_decode(t, c)));
    x[i] = c;
  }
}

/* The worst error of c (M x N) against scale · the double-precision
 * product of the decoded codes a [M, k] (type ta) and b [N, k] (tb), per
 * element relative to Σ|a·b|; c has no NaN. */
static double worst_error(sc_dtype ta, const uint8_t *a, sc_dtype tb, const uint8_t *b, int k,
                          const float *c, double scale) {
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int kk = 0; kk < k; kk++) {
        double p = (double)sc_narrow_decode(ta, a[i * k + kk]) * sc_narrow_decode(tb, b[j * k + kk]);
        ref += p, mag += fabs(p);
      }
      ref *= scale, mag *= scale;
      assert_false(isnan(c[i * N + j]));
      double err = fabs(c[i * N + j] - ref) / (mag > 0 ? mag : 1);
      if (err > worst) worst = err;
    }
  return worst;
}

static void test_tn_product(void **state) {
  (void)state;
  unsigned seed = 42;
  uint8_t a[M * K], b[N * K];
  random_codes(SC_DTYPE_F8E5M2, a, M * K, &seed);
  random_codes(SC_DTYPE_F8E4M3FN, b, N * K, &seed);
  float scales[2] = {0.5f, 0.125f};
  CUdeviceptr da, db, dc, ds;
  assert_int_equal(cu->mem_alloc(&da, sizeof a), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&db, sizeof b), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&dc, M * N * sizeof(float)), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&ds, sizeof scales), SC_CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(da, a, sizeof a, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(db, b, sizeof b, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(ds, scales, sizeof scales, s), SC_CUDA_SUCCESS);
  sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = -1, .trans_b = true,
               .batch = 1, .m = M, .n = N, .k = K, .lda = K, .ldb = K, .ldc = N,
               .alpha = 1.0f};
  sc_diag d = {0};
  sc_gpu_gemm *e = NULL;
  assert_int_equal(sc_gpu_gemm_create(cu, &e, &d), SC_OK);
  sc_gpu_fp8 f = {.type_a = SC_DTYPE_F8E5M2, .type_b = SC_DTYPE_F8E4M3FN, .a = da, .b = db,
                  .scale_a = ds, .scale_b = ds + sizeof(float)};
  int32_t id = -1;
  const char *why = "?";
  assert_int_equal(sc_gpu_gemm_add_fp8(e, &g, SC_DTYPE_F32, &f, 90, dc, &id, &why, &d), SC_OK);
  assert_null(why);
  assert_true(id >= 0);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &d), SC_OK);
  float c[M * N];
  assert_int_equal(cu->memcpy_dtoh(c, dc, sizeof c, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  double worst = worst_error(SC_DTYPE_F8E5M2, a, SC_DTYPE_F8E4M3FN, b, K, c,
                             (double)scales[0] * scales[1]);
  printf("FP8 E5M2 x E4M3 TN %dx%dx%d with scale pointers: worst error %.2e of sum |a.b|\n", M,
         N, K, worst);
  assert_true(worst <= 1e-6);

  /* "NN": B [k, n] is refused with a reason, and nothing is added */
  sc_gemm nn = g;
  nn.trans_b = false, nn.ldb = N;
  why = NULL;
  assert_int_equal(sc_gpu_gemm_add_fp8(e, &nn, SC_DTYPE_F32, &f, 90, dc, &id, &why, &d), SC_OK);
  assert_int_equal(id, -1);
  assert_non_null(why);
  assert_non_null(strstr(why, "TN"));
  sc_gpu_fp8 both = f;
  both.type_b = SC_DTYPE_F8E5M2;
  why = NULL;
  assert_int_equal(sc_gpu_gemm_add_fp8(e, &g, SC_DTYPE_F32, &both, 90, dc, &id, &why, &d),
                   SC_OK);
  assert_true(id == -1 && why && strstr(why, "E5M2"));
  why = NULL;
  assert_int_equal(sc_gpu_gemm_add_fp8(e, &g, SC_DTYPE_F32, &f, 80, dc, &id, &why, &d), SC_OK);
  assert_true(id == -1 && why && strstr(why, "sm_89"));
  sc_gpu_gemm_destroy(e);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dc), cu->mem_free(ds);
}

/* D (m x n f32) of g as one FP8 matmul of the codes a8, b8 (types ta,
 * tb, in g's FP8 layout: sc_gemm_fp8_layout) with the scale pointers
 * scales[0], scales[1] when scales is not NULL. */
static void fp8_product(const sc_gemm *g, sc_dtype ta, const uint8_t *a8, size_t na,
                        sc_dtype tb, const uint8_t *b8, size_t nb, const float *scales,
                        float *d) {
  CUdeviceptr da, db, dc, ds = 0;
  size_t nd = (size_t)(g->m * g->n) * sizeof(float);
  assert_int_equal(cu->mem_alloc(&da, na), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&db, nb), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&dc, nd), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&ds, 2 * sizeof(float)), SC_CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(da, a8, na, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(db, b8, nb, s), SC_CUDA_SUCCESS);
  if (scales)
    assert_int_equal(cu->memcpy_htod(ds, scales, 2 * sizeof(float), s), SC_CUDA_SUCCESS);
  sc_diag d0 = {0};
  sc_gpu_gemm *e = NULL;
  assert_int_equal(sc_gpu_gemm_create(cu, &e, &d0), SC_OK);
  sc_gpu_fp8 f = {.type_a = ta, .type_b = tb, .a = da, .b = db,
                  .scale_a = scales ? ds : 0, .scale_b = scales ? ds + sizeof(float) : 0};
  int32_t id = -1;
  const char *why = "?";
  assert_int_equal(sc_gpu_gemm_add_fp8(e, g, SC_DTYPE_F32, &f, 90, dc, &id, &why, &d0), SC_OK);
  if (why) fprintf(stderr, "refused: %s\n", why);
  assert_null(why);
  assert_true(id >= 0);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &d0), SC_OK);
  assert_int_equal(cu->memcpy_dtoh(d, dc, nd, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  sc_gpu_gemm_destroy(e);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dc), cu->mem_free(ds);
}

/* A product whose f32 operands are laid out "TT" (A stored [k, m], B
 * [k, n]: an FP8 step's weight gradient Xᵀ·dY) with transposed FP8 copies
 * (a8_tn, b8_tn: [m, k] and [n, k]) is one FP8 matmul, and equals the
 * product of the decoded values; without the copies it is refused. Then
 * the scales: the per-tensor scale inverses (not powers of two, as delayed
 * scaling's are) through the A and B scale pointers give, bit for bit, the
 * unscaled matmul's D times (s_a · s_b) rounded once, as the step's
 * epilogue descales it, at k = 64 and at k = 512 (two blocks of the
 * emulated engine, which applies its alpha per block: the scales are
 * applied once, after the sum, as the library's epilogue does). */
static void test_transposed_copies_and_scales(void **state) {
  (void)state;
  enum { KB = 512 };
  static uint8_t a[M * KB], b[N * KB];
  static float d0[M * N], d1[M * N];
  for (int ki = 0; ki < 2; ki++) {
    int k = ki ? KB : K;
    unsigned seed = 7 + (unsigned)k;
    random_codes(SC_DTYPE_F8E4M3FN, a, M * k, &seed);
    random_codes(SC_DTYPE_F8E5M2, b, N * k, &seed);
    sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = -1, .trans_a = true,
                 .batch = 1, .m = M, .n = N, .k = k, .lda = M, .ldb = N, .ldc = N,
                 .alpha = 1.0f, .fp8 = true, .a8 = 3, .b8 = 4};
    sc_gemm v = sc_gemm_fp8_layout(&g);
    assert_non_null(sc_gemm_fp8_refusal(&v, SC_DTYPE_F32, SC_DTYPE_F8E4M3FN, SC_DTYPE_F8E5M2));
    g.a8_tn = g.b8_tn = true;
    v = sc_gemm_fp8_layout(&g);
    assert_true(!v.trans_a && v.trans_b && v.lda == k && v.ldb == k);
    assert_null(sc_gemm_fp8_refusal(&v, SC_DTYPE_F32, SC_DTYPE_F8E4M3FN, SC_DTYPE_F8E5M2));
    fp8_product(&g, SC_DTYPE_F8E4M3FN, a, (size_t)(M * k), SC_DTYPE_F8E5M2, b,
                (size_t)(N * k), NULL, d0);
    double worst = worst_error(SC_DTYPE_F8E4M3FN, a, SC_DTYPE_F8E5M2, b, k, d0, 1.0);
    /* 1 / delayed scaling's scales: 448 / amax and 57344 / amax */
    float scales[2] = {1.0f / (448.0f / 3.7f), 1.0f / (57344.0f / 0.0123f)};
    fp8_product(&g, SC_DTYPE_F8E4M3FN, a, (size_t)(M * k), SC_DTYPE_F8E5M2, b,
                (size_t)(N * k), scales, d1);
    float inv = scales[0] * scales[1];
    int differ = 0;
    for (int i = 0; i < M * N; i++) {
      float want = d0[i] * inv;
      assert_false(isnan(d1[i]));
      differ += d1[i] != want;
    }
    printf("FP8 E4M3 x E5M2 through transposed copies %dx%dx%d: worst error %.2e of sum |a.b|; "
           "scale pointers against the epilogue's descaling: %d of %d differ\n",
           M, N, k, worst, differ, M * N);
    assert_true(worst <= 1e-6);
    assert_int_equal(differ, 0);
  }
}

/* A scaled FP8 product (sc_gemm.scaled) where no FP8 matmul runs: the f32
 * product of the widened values laid out "NN" (refused as an FP8 matmul),
 * with the dequantisation factors 1/s_a, 1/s_b (not powers of two) set on
 * the entry (sc_gpu_gemm_set_scales), equals the double-precision product
 * of the decoded values times them within 1e-6 of Σ|a·b| (times the
 * factors) per element, and no element is NaN; the same codes through the
 * FP8 matmul with the scale pointers (TN) are within the same bound.
 * An entry without both pointers is refused. */
static void test_scaled_f32_product(void **state) {
  (void)state;
  static uint8_t a[M * K], b[N * K];
  static float af[M * K], bf[K * N], d[M * N];
  unsigned seed = 99;
  random_codes(SC_DTYPE_F8E4M3FN, a, M * K, &seed);
  random_codes(SC_DTYPE_F8E5M2, b, N * K, &seed);
  for (int i = 0; i < M * K; i++) af[i] = sc_narrow_decode(SC_DTYPE_F8E4M3FN, a[i]);
  for (int j = 0; j < N; j++) /* B stored [k, n]: "NN" */
    for (int kk = 0; kk < K; kk++) bf[kk * N + j] = sc_narrow_decode(SC_DTYPE_F8E5M2, b[j * K + kk]);
  float scales[2] = {1.0f / (448.0f / 2.9f), 1.0f / (57344.0f / 0.031f)};
  double scale = (double)(scales[0] * scales[1]);
  CUdeviceptr da, db, dc, ds;
  assert_int_equal(cu->mem_alloc(&da, sizeof af), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&db, sizeof bf), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&dc, sizeof d), SC_CUDA_SUCCESS);
  assert_int_equal(cu->mem_alloc(&ds, sizeof scales), SC_CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(da, af, sizeof af, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(db, bf, sizeof bf, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_htod(ds, scales, sizeof scales, s), SC_CUDA_SUCCESS);
  sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = -1, .batch = 1, .m = M, .n = N,
               .k = K, .lda = K, .ldb = N, .ldc = N, .alpha = 1.0f, .fp8 = true, .a8 = 3,
               .b8 = 4, .scaled = true, .a8_scale = 5, .b8_scale = 6};
  sc_gemm v = sc_gemm_fp8_layout(&g);
  assert_non_null(sc_gemm_fp8_refusal(&v, SC_DTYPE_F32, SC_DTYPE_F8E4M3FN, SC_DTYPE_F8E5M2));
  sc_diag dg = {0};
  sc_gpu_gemm *e = NULL;
  assert_int_equal(sc_gpu_gemm_create(cu, &e, &dg), SC_OK);
  int32_t id = -1;
  bool fused = true;
  assert_int_equal(sc_gpu_gemm_add(e, &g, SC_DTYPE_F32, da, db, 0, 0, dc, 0, 0, 0, &id, &fused, &dg),
                   SC_OK);
  assert_true(id >= 0 && !fused);
  assert_int_equal(sc_gpu_gemm_set_scales(e, id, ds, 0, &dg), SC_ERR_UNSUPPORTED);
  sc_diag_clear(&dg);
  assert_int_equal(sc_gpu_gemm_set_scales(e, id, ds, ds + sizeof(float), &dg), SC_OK);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &dg), SC_OK);
  assert_int_equal(cu->memcpy_dtoh(d, dc, sizeof d, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  double worst = worst_error(SC_DTYPE_F8E4M3FN, a, SC_DTYPE_F8E5M2, b, K, d, scale);
  /* the FP8 matmul of the same codes, TN (B's codes [n, k]) with the pointers */
  sc_gemm tn = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = -1, .trans_b = true,
                .batch = 1, .m = M, .n = N, .k = K, .lda = K, .ldb = K, .ldc = N,
                .alpha = 1.0f};
  static float d8[M * N];
  fp8_product(&tn, SC_DTYPE_F8E4M3FN, a, sizeof a, SC_DTYPE_F8E5M2, b, sizeof b, scales, d8);
  double worst8 = worst_error(SC_DTYPE_F8E4M3FN, a, SC_DTYPE_F8E5M2, b, K, d8, scale);
  printf("scaled FP8 product %dx%dx%d as the f32 product with the scales set: worst error "
         "%.2e of sum |a.b|; as the FP8 matmul with the scale pointers: %.2e\n",
         M, N, K, worst, worst8);
  assert_true(worst <= 1e-6);
  assert_true(worst8 <= 1e-6);
  sc_gpu_gemm_destroy(e);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dc), cu->mem_free(ds);
}

/* The emulated library's own check: an FP8 matmul that is not TN. */
static void test_library_refuses_nn(void **state) {
  (void)state;
  sc_lt_api lt;
  sc_lt_emu_api(&lt);
  sc_lt_handle h;
  sc_lt_desc desc;
  sc_lt_layout la, lb, lc;
  assert_int_equal(lt.create(&h), 0);
  sc_lt_emu_bind(h, cu);
  assert_int_equal(lt.desc_create(&desc, SC_CUBLAS_COMPUTE_32F, SC_CUDA_R_32F), 0);
  int32_t op = SC_CUBLAS_OP_N; /* A not transposed: "NN" */
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op), 0);
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op), 0);
  assert_int_equal(lt.layout_create(&la, SC_CUDA_R_8F_E4M3, M, K, M), 0);
  assert_int_equal(lt.layout_create(&lb, SC_CUDA_R_8F_E4M3, K, N, K), 0);
  assert_int_equal(lt.layout_create(&lc, SC_CUDA_R_32F, M, N, M), 0);
  sc_lt_heuristic res;
  int found = -1;
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(found, 0);
  op = SC_CUBLAS_OP_T; /* A [k, m] transposed: "TN", accepted */
  sc_lt_layout lt_a;
  assert_int_equal(lt.layout_create(&lt_a, SC_CUDA_R_8F_E4M3, K, M, K), 0);
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op), 0);
  assert_int_equal(lt.heuristic(h, desc, lt_a, lb, lc, lc, NULL, 1, &res, &found), 0);
  assert_int_equal(found, 1);
  lt.layout_destroy(lt_a), lt.layout_destroy(la), lt.layout_destroy(lb);
  lt.layout_destroy(lc);
  lt.desc_destroy(desc);
  lt.destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_tn_product),
                                     cmocka_unit_test(test_transposed_copies_and_scales),
                                     cmocka_unit_test(test_scaled_f32_product),
                                     cmocka_unit_test(test_library_refuses_nn)};
  return cmocka_run_group_tests(tests, setup, NULL);
}
