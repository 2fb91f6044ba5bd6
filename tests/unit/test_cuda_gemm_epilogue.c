/* test_cuda_gemm_epilogue.c — a GEMM's tanh GELU in the product with the
 * product kept (sc_gemm.act_aux: cuBLASLt's GELU_AUX_BIAS) on the emulated
 * GPU, through both engines of runtime/cuda_gemm.c: the host engine, and
 * the engine's cuBLASLt plan on the emulated library (SHARDC_CUDA_GEMM=
 * cublaslt: runtime/cublaslt_emu.c's epilogues).
 *
 *   - f32 and bf16, seeded random operands and bias, C and act_out filled
 *     with NaN first: the entry is fused; C (the aux output) is a·b + bias
 *     and act_out the tanh GELU of it, against a double-precision reference
 *     within 1e-5 (f32) or 2^-7 (bf16, whose operands the reference takes
 *     as rounded) of Σ|a·b| + |bias| per element; no NaN left;
 *   - C's leading dim not a multiple of 8 (n = 60): the cuBLASLt plan has
 *     no GELU_AUX (cuBLASLt wants the aux ld a multiple of 8), so the entry
 *     is the plain product, not fused, act_out untouched (still NaN) and C
 *     within the same bound; the host engine fuses it;
 *   - the emulated library refuses as cuBLASLt does: GELU_AUX without an
 *     aux pointer or with an aux ld of 60, and BIAS without a bias pointer,
 *     with CUBLAS_STATUS_INVALID_VALUE; DGELU_BGRAD (not emulated) and an
 *     epilogue on FP8 operands with CUBLAS_STATUS_NOT_SUPPORTED; DGELU
 *     with its aux input accepted;
 *   - DGELU (sc_gemm act DGELU_TANH, act_in X): act_out = (A·B) ·
 *     gelu'(X) on both engines, f32 and bf16, against the double
 *     reference within the same bounds (of Σ|a·b| · max|gelu'|);
 *   - the bias gradient in the product (sc_gemm.bgrad: cuBLASLt's BGRADA
 *     for our B [k, n], BGRADB for our transposed A, stored [k, m]) of a
 *     weight gradient's shape, seeded random operands, C and the gradient
 *     filled with NaN first, on both engines, f32 and bf16: fused; C within
 *     the bounds above; each sum bit for bit the f32 sum of the stored
 *     values in order of k (a bf16 one that sum rounded once), and within
 *     1e-6 (f32) or 2^-8 (bf16) of Σ|x| of the double-precision sum; the
 *     emulated library refuses BGRADA/BGRADB without a bias pointer
 *     (CUBLAS_STATUS_INVALID_VALUE) and batched (NOT_SUPPORTED). */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cublaslt.h"
#include "runtime/cuda_gemm.h"

static const sc_cu *cu;

static int setup(void **state) {
  (void)state;
  sc_diag d = {0};
  if (setenv("SHARDC_CUDA_EMU", "1", 1) == 0 && sc_cu_load(&cu, &d) == SC_OK) return 0;
  fprintf(stderr, "the emulated driver: %s\n", d.msg);
  return -1;
}

enum { M = 24, K = 40 };

static double gelu(double v) {
  return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

static float uniform(unsigned *seed) { return (float)rand_r(seed) / (float)RAND_MAX * 4 - 2; }

/* The stored value i of x (f32 or bf16) as a double. */
static double at(sc_dtype t, const void *x, int64_t i) {
  return t == SC_DTYPE_BF16 ? sc_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* n values of t from f */
static void store(sc_dtype t, void *x, const float *f, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (t == SC_DTYPE_BF16) ((uint16_t *)x)[i] = sc_f32_to_bf16(f[i]);
    else ((float *)x)[i] = f[i];
}

/* Device memory of `bytes`, holding host's bytes (copied on s) unless host
 * is NULL. */
static CUdeviceptr upload(const void *host, size_t bytes, CUstream s) {
  CUdeviceptr d = 0;
  assert_int_equal(cu->mem_alloc(&d, bytes), SC_CUDA_SUCCESS);
  if (host) assert_int_equal(cu->memcpy_htod(d, host, bytes, s), SC_CUDA_SUCCESS);
  return d;
}

/* The GEMM engine `lt` ("cublaslt", or NULL: host) on the emulated GPU. */
static sc_gpu_gemm *engine(const char *lt) {
  if (lt) assert_int_equal(setenv("SHARDC_CUDA_GEMM", lt, 1), 0);
  else assert_int_equal(unsetenv("SHARDC_CUDA_GEMM"), 0);
  sc_diag d = {0};
  sc_gpu_gemm *e = NULL;
  assert_int_equal(sc_gpu_gemm_create(cu, &e, &d), SC_OK);
  return e;
}

/* C = A [M, K] · B [K, n] + bias [n] with act_aux, through engine `lt`
 * ("cublaslt" or NULL: host), in dtype t; checks C and act_out as the
 * module comment says; returns whether the entry was fused. */
static bool gelu_aux(sc_dtype t, int n, const char *lt) {
  unsigned seed = 7u + (unsigned)n + (t == SC_DTYPE_BF16);
  size_t es = sc_dtype_size(t);
  float *fa = malloc(sizeof *fa * M * K), *fb = malloc(sizeof *fb * K * n),
        *fbias = malloc(sizeof *fbias * n), *nan_fill = malloc(sizeof *nan_fill * M * n);
  void *a = malloc(es * M * K), *b = malloc(es * K * n), *bias = malloc(es * n),
       *c = malloc(es * M * n), *y = malloc(es * M * n);
  assert_true(fa && fb && fbias && nan_fill && a && b && bias && c && y);
  for (int i = 0; i < M * K; i++) fa[i] = uniform(&seed);
  for (int i = 0; i < K * n; i++) fb[i] = uniform(&seed) / 4;
  for (int i = 0; i < n; i++) fbias[i] = uniform(&seed);
  for (int i = 0; i < M * n; i++) nan_fill[i] = NAN;
  store(t, a, fa, M * K), store(t, b, fb, K * n), store(t, bias, fbias, n);
  store(t, c, nan_fill, M * n);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  CUdeviceptr da = upload(a, es * M * K, s), db = upload(b, es * K * n, s),
              dbias = upload(bias, es * n, s), dc = upload(c, es * M * n, s),
              dy = upload(c, es * M * n, s);
  sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = 3, .act_out = 4, .act = SC_GEMM_ACT_GELU_TANH,
               .act_aux = true, .batch = 1, .m = M, .n = n, .k = K, .lda = K, .ldb = n,
               .ldc = n, .alpha = 1.0f};
  sc_diag d = {0};
  sc_gpu_gemm *e = engine(lt);
  assert_string_equal(sc_gpu_gemm_engine(e), lt ? "cublaslt" : "host");
  int32_t id = -1;
  bool fused = false;
  assert_int_equal(sc_gpu_gemm_add(e, &g, t, da, db, dbias, n, dc, dy, 0, 0, &id, &fused, &d), SC_OK);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &d), SC_OK);
  assert_int_equal(cu->memcpy_dtoh(c, dc, es * M * n, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_dtoh(y, dy, es * M * n, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  double tol = t == SC_DTYPE_BF16 ? 1.0 / 128 : 1e-5, worst_c = 0, worst_y = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < n; j++) {
      double ref = at(t, bias, j), mag = fabs(ref);
      for (int k = 0; k < K; k++) {
        double p = at(t, a, i * K + k) * at(t, b, k * n + j);
        ref += p, mag += fabs(p);
      }
      double got_c = at(t, c, i * n + j), got_y = at(t, y, i * n + j);
      assert_false(isnan(got_c));
      worst_c = fmax(worst_c, fabs(got_c - ref) / mag);
      if (fused) {
        assert_false(isnan(got_y));
        worst_y = fmax(worst_y, fabs(got_y - gelu(ref)) / mag);
      } else {
        assert_true(isnan(got_y)); /* the caller's kernel writes it */
      }
    }
  printf("%s %s n %d: %s, C %.2e, GELU %.2e of sum |a.b| + |bias|\n",
         t == SC_DTYPE_BF16 ? "bf16" : "f32", lt ? lt : "host", n,
         fused ? "activation in the product, C kept" : "plain product", worst_c, worst_y);
  assert_true(worst_c <= tol && worst_y <= tol);
  sc_gpu_gemm_destroy(e);
  assert_int_equal(unsetenv("SHARDC_CUDA_GEMM"), 0);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dbias), cu->mem_free(dc), cu->mem_free(dy);
  free(fa), free(fb), free(fbias), free(nan_fill), free(a), free(b), free(bias), free(c), free(y);
  return fused;
}

/* D = (A [M, K] · B [K, 64]) · gelu'(X [M, 64]) (DGELU_TANH) through
 * engine lt (NULL: host) in dtype t, against the double reference. */
static void dgelu(sc_dtype t, const char *lt) {
  enum { N = 64 };
  unsigned seed = 11u + (t == SC_DTYPE_BF16);
  size_t es = sc_dtype_size(t);
  float fa[M * K], fb[K * N], fx[M * N], nan_fill[M * N];
  void *a = malloc(es * M * K), *b = malloc(es * K * N), *x = malloc(es * M * N),
       *y = malloc(es * M * N);
  assert_true(a && b && x && y);
  for (int i = 0; i < M * K; i++) fa[i] = uniform(&seed);
  for (int i = 0; i < K * N; i++) fb[i] = uniform(&seed) / 4;
  for (int i = 0; i < M * N; i++) fx[i] = uniform(&seed) * 2, nan_fill[i] = NAN;
  store(t, a, fa, M * K), store(t, b, fb, K * N), store(t, x, fx, M * N), store(t, y, nan_fill, M * N);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  CUdeviceptr da = upload(a, es * M * K, s), db = upload(b, es * K * N, s),
              dx = upload(x, es * M * N, s), dc = upload(NULL, es * M * N, s),
              dy = upload(y, es * M * N, s);
  sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = 4, .act_in = 3,
               .act = SC_GEMM_ACT_DGELU_TANH, .batch = 1, .m = M, .n = N, .k = K, .lda = K,
               .ldb = N, .ldc = N, .alpha = 1.0f};
  sc_diag d = {0};
  sc_gpu_gemm *e = engine(lt);
  int32_t id = -1;
  bool fused = false;
  assert_int_equal(sc_gpu_gemm_add(e, &g, t, da, db, 0, 0, dc, dy, dx, 0, &id, &fused, &d), SC_OK);
  assert_true(fused);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &d), SC_OK);
  assert_int_equal(cu->memcpy_dtoh(y, dy, es * M * N, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0, xv = at(t, x, i * N + j);
      for (int k = 0; k < K; k++) {
        double p = at(t, a, i * K + k) * at(t, b, k * N + j);
        ref += p, mag += fabs(p);
      }
      double th = tanh(0.7978845608028654 * (xv + 0.044715 * xv * xv * xv));
      double dg = 0.5 * (1 + th) + 0.5 * xv * (1 - th * th) * 0.7978845608028654 *
                                       (1 + 3 * 0.044715 * xv * xv);
      double got = at(t, y, i * N + j);
      assert_false(isnan(got));
      worst = fmax(worst, fabs(got - ref * dg) / (mag * fmax(1.0, fabs(dg))));
    }
  printf("%s %s DGELU: %.2e of sum |a.b| max(1, |gelu'|)\n", t == SC_DTYPE_BF16 ? "bf16" : "f32",
         lt ? lt : "host", worst);
  assert_true(worst <= (t == SC_DTYPE_BF16 ? 1.0 / 128 : 1e-5));
  sc_gpu_gemm_destroy(e);
  assert_int_equal(unsetenv("SHARDC_CUDA_GEMM"), 0);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dx), cu->mem_free(dc), cu->mem_free(dy);
  free(a), free(b), free(x), free(y);
}

/* C [M, 64] = op(A) · B [K, 64] with the bias gradient of B (side B: A
 * [M, K]) or of A (side A: A stored [K, M], transposed) through engine lt
 * (NULL: host) in dtype t, as the module comment says. */
static void bgrad(sc_dtype t, sc_gemm_bgrad side, const char *lt) {
  enum { N = 64 };
  unsigned seed = 13u + (t == SC_DTYPE_BF16) + 2u * side;
  size_t es = sc_dtype_size(t);
  bool on_a = side == SC_GEMM_BGRAD_A;
  int len = on_a ? M : N;
  float fa[M * K], fb[K * N], nan_fill[M * N];
  void *a = malloc(es * M * K), *b = malloc(es * K * N), *c = malloc(es * M * N),
       *bg = malloc(es * N);
  assert_true(a && b && c && bg);
  for (int i = 0; i < M * K; i++) fa[i] = uniform(&seed);
  for (int i = 0; i < K * N; i++) fb[i] = uniform(&seed) / 4;
  for (int i = 0; i < M * N; i++) nan_fill[i] = NAN;
  store(t, a, fa, M * K), store(t, b, fb, K * N), store(t, c, nan_fill, M * N);
  store(t, bg, nan_fill, N);
  CUstream s;
  assert_int_equal(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING), SC_CUDA_SUCCESS);
  CUdeviceptr da = upload(a, es * M * K, s), db = upload(b, es * K * N, s),
              dc = upload(c, es * M * N, s), dg = upload(bg, es * N, s);
  sc_gemm g = {.a = 0, .b = 1, .c = 2, .bias = -1, .act_out = -1, .act_in = -1,
               .bgrad = side, .bgrad_out = 3, .trans_a = on_a, .batch = 1, .m = M, .n = N,
               .k = K, .lda = on_a ? M : K, .ldb = N, .ldc = N, .alpha = 1.0f};
  sc_diag d = {0};
  sc_gpu_gemm *e = engine(lt);
  int32_t id = -1;
  bool fused = false;
  assert_int_equal(sc_gpu_gemm_add(e, &g, t, da, db, 0, 0, dc, 0, 0, dg, &id, &fused, &d), SC_OK);
  assert_true(fused);
  assert_int_equal(sc_gpu_gemm_enqueue(e, id, s, &d), SC_OK);
  assert_int_equal(cu->memcpy_dtoh(c, dc, es * M * N, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->memcpy_dtoh(bg, dg, es * N, s), SC_CUDA_SUCCESS);
  assert_int_equal(cu->stream_synchronize(s), SC_CUDA_SUCCESS);
  double tol = t == SC_DTYPE_BF16 ? 1.0 / 128 : 1e-5, worst_c = 0, worst_g = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        double p = at(t, a, on_a ? k * M + i : i * K + k) * at(t, b, k * N + j);
        ref += p, mag += fabs(p);
      }
      double got = at(t, c, i * N + j);
      assert_false(isnan(got));
      worst_c = fmax(worst_c, fabs(got - ref) / mag);
    }
  for (int j = 0; j < len; j++) { /* the plain reduction over k of the stored operand */
    float f32 = 0.0f;
    double ref = 0, mag = 0;
    for (int k = 0; k < K; k++) {
      double x = on_a ? at(t, a, k * M + j) : at(t, b, k * N + j);
      f32 += (float)x, ref += x, mag += fabs(x);
    }
    double got = at(t, bg, j);
    assert_false(isnan(got));
    if (t == SC_DTYPE_BF16) assert_int_equal(((uint16_t *)bg)[j], sc_f32_to_bf16(f32));
    else assert_true(((float *)bg)[j] == f32);
    worst_g = fmax(worst_g, fabs(got - ref) / mag);
  }
  printf("%s %s BGRAD%s: C %.2e of sum |a.b|, bias gradient %.2e of sum |x| (%d values)\n",
         t == SC_DTYPE_BF16 ? "bf16" : "f32", lt ? lt : "host", on_a ? "B (our A)" : "A (our B)",
         worst_c, worst_g, len);
  assert_true(worst_c <= tol && worst_g <= (t == SC_DTYPE_BF16 ? 1.0 / 256 : 1e-6));
  sc_gpu_gemm_destroy(e);
  assert_int_equal(unsetenv("SHARDC_CUDA_GEMM"), 0);
  assert_int_equal(cu->stream_destroy(s), SC_CUDA_SUCCESS);
  cu->mem_free(da), cu->mem_free(db), cu->mem_free(dc), cu->mem_free(dg);
  free(a), free(b), free(c), free(bg);
}

static void test_bgrad(void **state) {
  (void)state;
  sc_dtype types[2] = {SC_DTYPE_F32, SC_DTYPE_BF16};
  sc_gemm_bgrad sides[2] = {SC_GEMM_BGRAD_B, SC_GEMM_BGRAD_A};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) bgrad(types[i], sides[j], NULL), bgrad(types[i], sides[j], "cublaslt");
}

static void test_dgelu(void **state) {
  (void)state;
  dgelu(SC_DTYPE_F32, NULL), dgelu(SC_DTYPE_F32, "cublaslt");
  dgelu(SC_DTYPE_BF16, NULL), dgelu(SC_DTYPE_BF16, "cublaslt");
}

static void test_gelu_aux(void **state) {
  (void)state;
  sc_dtype types[2] = {SC_DTYPE_F32, SC_DTYPE_BF16};
  for (int i = 0; i < 2; i++) {
    assert_true(gelu_aux(types[i], 64, NULL));
    assert_true(gelu_aux(types[i], 64, "cublaslt"));
    /* an aux ld of 60: cuBLASLt has no GELU_AUX for it, the host engine does */
    assert_false(gelu_aux(types[i], 60, "cublaslt"));
    assert_true(gelu_aux(types[i], 60, NULL));
  }
}

static void test_library_refusals(void **state) {
  (void)state;
  sc_lt_api lt;
  sc_lt_emu_api(&lt);
  sc_lt_handle h;
  sc_lt_desc desc;
  sc_lt_layout la, lb, lc;
  assert_int_equal(lt.create(&h), 0);
  sc_lt_emu_bind(h, cu);
  assert_int_equal(lt.desc_create(&desc, SC_CUBLAS_COMPUTE_32F, SC_CUDA_R_32F), 0);
  assert_int_equal(lt.layout_create(&la, SC_CUDA_R_32F, 64, K, 64), 0);
  assert_int_equal(lt.layout_create(&lb, SC_CUDA_R_32F, K, M, K), 0);
  assert_int_equal(lt.layout_create(&lc, SC_CUDA_R_32F, 64, M, 64), 0);
  sc_lt_heuristic res;
  int found = -1;
  uint32_t epi = SC_CUBLASLT_EPILOGUE_GELU | SC_CUBLASLT_EPILOGUE_AUX;
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_INVALID_VALUE); /* no aux pointer */
  float aux_buf[64 * M];
  void *aux = aux_buf;
  int64_t ld = 60;
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                               sizeof aux), 0);
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_INVALID_VALUE); /* ld 60: not a multiple of 8 */
  ld = 64;
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found), 0);
  assert_int_equal(found, 1);
  epi |= SC_CUBLASLT_EPILOGUE_BIAS; /* GELU_AUX_BIAS without a bias pointer */
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_INVALID_VALUE);
  epi = SC_CUBLASLT_EPILOGUE_DGELU; /* with its aux input: accepted */
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found), 0);
  epi = SC_CUBLASLT_EPILOGUE_DGELU | 16; /* DGELU_BGRAD: not emulated */
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.heuristic(h, desc, la, lb, lc, lc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_NOT_SUPPORTED);
  /* BGRADA, BGRADB: a bias pointer (the gradient's output), one batch entry */
  float grad_buf[64];
  void *gp = grad_buf;
  sc_lt_layout ba, bb, bc;
  int32_t two = 2;
  int64_t sa = 64 * K, sb = K * M, sc = 64 * M;
  assert_int_equal(lt.layout_create(&ba, SC_CUDA_R_32F, 64, K, 64), 0);
  assert_int_equal(lt.layout_create(&bb, SC_CUDA_R_32F, K, M, K), 0);
  assert_int_equal(lt.layout_create(&bc, SC_CUDA_R_32F, 64, M, 64), 0);
  sc_lt_layout bl[3] = {ba, bb, bc};
  int64_t bs[3] = {sa, sb, sc};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(lt.layout_set(bl[i], SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two), 0);
    assert_int_equal(lt.layout_set(bl[i], SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bs[i],
                                   sizeof bs[i]), 0);
  }
  uint32_t bgr[2] = {SC_CUBLASLT_EPILOGUE_BGRADA, SC_CUBLASLT_EPILOGUE_BGRADB};
  for (int i = 0; i < 2; i++) {
    sc_lt_desc x;
    assert_int_equal(lt.desc_create(&x, SC_CUBLAS_COMPUTE_32F, SC_CUDA_R_32F), 0);
    assert_int_equal(lt.desc_set(x, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &bgr[i], sizeof bgr[i]), 0);
    assert_int_equal(lt.heuristic(h, x, la, lb, lc, lc, NULL, 1, &res, &found),
                     SC_CUBLAS_STATUS_INVALID_VALUE); /* no bias pointer */
    assert_int_equal(lt.desc_set(x, SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER, &gp, sizeof gp), 0);
    assert_int_equal(lt.heuristic(h, x, la, lb, lc, lc, NULL, 1, &res, &found), 0);
    assert_int_equal(found, 1);
    assert_int_equal(lt.heuristic(h, x, ba, bb, bc, bc, NULL, 1, &res, &found),
                     SC_CUBLAS_STATUS_NOT_SUPPORTED); /* batched */
    lt.desc_destroy(x);
  }
  lt.layout_destroy(ba), lt.layout_destroy(bb), lt.layout_destroy(bc);
  /* an epilogue on FP8 operands ("TN", multiples of 16) */
  sc_lt_layout fa, fb;
  epi = SC_CUBLASLT_EPILOGUE_RELU;
  int32_t op = SC_CUBLAS_OP_T;
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op), 0);
  assert_int_equal(lt.layout_create(&fa, SC_CUDA_R_8F_E4M3, 48, 64, 48), 0);
  assert_int_equal(lt.layout_create(&fb, SC_CUDA_R_8F_E4M3, 48, 32, 48), 0);
  sc_lt_layout fc;
  assert_int_equal(lt.layout_create(&fc, SC_CUDA_R_32F, 64, 32, 64), 0);
  assert_int_equal(lt.heuristic(h, desc, fa, fb, fc, fc, NULL, 1, &res, &found),
                   SC_CUBLAS_STATUS_NOT_SUPPORTED);
  epi = SC_CUBLASLT_EPILOGUE_DEFAULT; /* the same FP8 matmul without it: accepted */
  assert_int_equal(lt.desc_set(desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
  assert_int_equal(lt.heuristic(h, desc, fa, fb, fc, fc, NULL, 1, &res, &found), 0);
  lt.layout_destroy(fa), lt.layout_destroy(fb), lt.layout_destroy(fc);
  lt.layout_destroy(la), lt.layout_destroy(lb), lt.layout_destroy(lc);
  lt.desc_destroy(desc);
  lt.destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_gelu_aux), cmocka_unit_test(test_dgelu),
                                     cmocka_unit_test(test_bgrad),
                                     cmocka_unit_test(test_library_refusals)};
  return cmocka_run_group_tests(tests, setup, NULL);
}
