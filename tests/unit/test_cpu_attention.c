/* test_cpu_attention.c — the CPU device's fused attention kernels
 * (runtime/cpu_attention.h) against a naive reference in double precision
 * that materialises the scores: softmax(scale·Q·Kᵀ + mask), causal
 * bottom-right aligned, grouped kv heads.
 *
 * The reference backward is the textbook one (P, dP = dO·Vᵀ, dS = P ∘ (dP
 * − rowsum(dO ∘ O)), dQ = scale·dS·K, dK = scale·dSᵀ·Q summed over the
 * heads of a kv head, dV = Pᵀ·dO); it is itself checked against central
 * finite differences of the reference forward on a small case (step 1e-6
 * in f64: error ~1e-9, tolerance 1e-6).
 *
 * Tolerances, |got − ref| <= tol·(1 + |ref|):
 *   f32 1e-5, forward and backward: sums of at most 150 f32 products of
 *     values in [-1, 1] and an f32 softmax; dK and dV sum up to 2 heads x
 *     130 rows of such terms (measured: at most 3e-7);
 *   bf16 8e-3, forward and backward: inputs are rounded to bf16 first for
 *     the reference too, so what differs is the output's rounding to bf16
 *     (2^-8 relative: 3.9e-3) and f32 accumulation against f64 — two bf16
 *     rounding steps (measured: at most 1.8e-3).
 * Every value checked is finite (NaN fails). Inputs are seeded random. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "ir/dtype.h"
#include "runtime/cpu_attention.h"

typedef struct shape {
  int64_t b, h, kvh, sq, skv, d, dv;
  bool causal, mask, mask_per_batch;
  int64_t masked_row; /* a query row whose every key is masked with -inf, or -1 */
} shape;

typedef struct tensors {
  shape s;
  float scale;
  int64_t nq, nk, nv, no, nl, nm, msb, msh;
  double *q, *k, *v, *mask, *d_o;              /* the inputs (as rounded) */
  double *o, *lse, *dq, *dk, *dv;              /* the reference */
} tensors;

static double *alloc_d(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
  assert_non_null(p);
  return p;
}

static double round_to(sc_dtype t, double x) {
  return t == SC_DTYPE_BF16 ? sc_bf16_to_f32(sc_f32_to_bf16((float)x)) : (float)x;
}

/* The scores' element (i, j) of head (b, h) as the kernel defines them. */
static double score(const tensors *x, int64_t b, int64_t h, int64_t i, int64_t j) {
  const shape *s = &x->s;
  int64_t kh = h / (s->h / s->kvh);
  if (s->causal && j > i + (s->skv - s->sq)) return -INFINITY;
  double acc = 0;
  for (int64_t c = 0; c < s->d; c++)
    acc += x->q[((b * s->h + h) * s->sq + i) * s->d + c] *
           x->k[((b * s->kvh + kh) * s->skv + j) * s->d + c];
  acc *= (double)x->scale;
  if (x->mask) acc += x->mask[b * x->msb + h * x->msh + i * s->skv + j];
  return acc;
}

/* P of row (b, h, i) into p[skv]; returns the row's lse (-inf: none). */
static double probs(const tensors *x, int64_t b, int64_t h, int64_t i, double *p) {
  const shape *s = &x->s;
  double mx = -INFINITY;
  for (int64_t j = 0; j < s->skv; j++) {
    p[j] = score(x, b, h, i, j);
    if (p[j] > mx) mx = p[j];
  }
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < s->skv; j++) p[j] = 0;
    return -INFINITY;
  }
  double sum = 0;
  for (int64_t j = 0; j < s->skv; j++) sum += p[j] = exp(p[j] - mx);
  for (int64_t j = 0; j < s->skv; j++) p[j] /= sum;
  return mx + log(sum);
}

static void reference_forward(tensors *x) {
  const shape *s = &x->s;
  double *p = alloc_d(s->skv);
  for (int64_t b = 0; b < s->b; b++)
    for (int64_t h = 0; h < s->h; h++) {
      int64_t kh = h / (s->h / s->kvh);
      for (int64_t i = 0; i < s->sq; i++) {
        int64_t row = (b * s->h + h) * s->sq + i;
        x->lse[row] = probs(x, b, h, i, p);
        for (int64_t c = 0; c < s->dv; c++) {
          double acc = 0;
          for (int64_t j = 0; j < s->skv; j++)
            acc += p[j] * x->v[((b * s->kvh + kh) * s->skv + j) * s->dv + c];
          x->o[row * s->dv + c] = acc;
        }
      }
    }
  free(p);
}

static void reference_backward(tensors *x) {
  const shape *s = &x->s;
  double *p = alloc_d(s->skv), *ds = alloc_d(s->skv);
  memset(x->dq, 0, (size_t)x->nq * sizeof *x->dq);
  memset(x->dk, 0, (size_t)x->nk * sizeof *x->dk);
  memset(x->dv, 0, (size_t)x->nv * sizeof *x->dv);
  for (int64_t b = 0; b < s->b; b++)
    for (int64_t h = 0; h < s->h; h++) {
      int64_t kh = b * s->kvh + h / (s->h / s->kvh);
      for (int64_t i = 0; i < s->sq; i++) {
        int64_t row = (b * s->h + h) * s->sq + i;
        probs(x, b, h, i, p);
        double dd = 0;
        for (int64_t c = 0; c < s->dv; c++) dd += x->d_o[row * s->dv + c] * x->o[row * s->dv + c];
        for (int64_t j = 0; j < s->skv; j++) {
          double dp = 0;
          for (int64_t c = 0; c < s->dv; c++)
            dp += x->d_o[row * s->dv + c] * x->v[(kh * s->skv + j) * s->dv + c];
          ds[j] = p[j] * (dp - dd);
          for (int64_t c = 0; c < s->dv; c++)
            x->dv[(kh * s->skv + j) * s->dv + c] += p[j] * x->d_o[row * s->dv + c];
          for (int64_t c = 0; c < s->d; c++) {
            x->dq[row * s->d + c] += x->scale * ds[j] * x->k[(kh * s->skv + j) * s->d + c];
            x->dk[(kh * s->skv + j) * s->d + c] += x->scale * ds[j] * x->q[row * s->d + c];
          }
        }
      }
    }
  free(p);
  free(ds);
}

static void make(tensors *x, const shape *s, sc_dtype t, uint64_t seed) {
  memset(x, 0, sizeof *x);
  x->s = *s;
  x->scale = (float)(1.0 / sqrt((double)s->d));
  x->nq = s->b * s->h * s->sq * s->d;
  x->nk = s->b * s->kvh * s->skv * s->d;
  x->nv = s->b * s->kvh * s->skv * s->dv;
  x->no = s->b * s->h * s->sq * s->dv;
  x->nl = s->b * s->h * s->sq;
  rng_seed(seed);
  x->q = alloc_d(x->nq);
  x->k = alloc_d(x->nk);
  x->v = alloc_d(x->nv);
  x->d_o = alloc_d(x->no);
  for (int64_t i = 0; i < x->nq; i++) x->q[i] = round_to(t, rnd(-1, 1));
  for (int64_t i = 0; i < x->nk; i++) x->k[i] = round_to(t, rnd(-1, 1));
  for (int64_t i = 0; i < x->nv; i++) x->v[i] = round_to(t, rnd(-1, 1));
  for (int64_t i = 0; i < x->no; i++) x->d_o[i] = round_to(t, rnd(-1, 1));
  if (s->mask || s->masked_row >= 0) {
    x->msb = s->mask_per_batch ? s->sq * s->skv : 0;
    x->nm = (s->mask_per_batch ? s->b : 1) * s->sq * s->skv;
    x->mask = alloc_d(x->nm);
    for (int64_t i = 0; i < x->nm; i++)
      x->mask[i] = s->mask ? round_to(t, rnd(-2, 0)) : 0;
    for (int64_t b = 0; s->masked_row >= 0 && b < (s->mask_per_batch ? s->b : 1); b++)
      for (int64_t j = 0; j < s->skv; j++) x->mask[b * x->msb + s->masked_row * s->skv + j] = -INFINITY;
  }
  x->o = alloc_d(x->no);
  x->lse = alloc_d(x->nl);
  x->dq = alloc_d(x->nq);
  x->dk = alloc_d(x->nk);
  x->dv = alloc_d(x->nv);
  reference_forward(x);
  reference_backward(x);
}

static void drop(tensors *x) {
  free(x->q), free(x->k), free(x->v), free(x->mask), free(x->d_o);
  free(x->o), free(x->lse), free(x->dq), free(x->dk), free(x->dv);
}

static void *to_dtype(sc_dtype t, const double *src, int64_t n) {
  size_t es = t == SC_DTYPE_F32 ? 4 : 2;
  void *p = calloc((size_t)(n > 0 ? n : 1), es);
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++) {
    if (t == SC_DTYPE_F32)
      ((float *)p)[i] = (float)src[i];
    else
      ((uint16_t *)p)[i] = sc_f32_to_bf16((float)src[i]);
  }
  return p;
}

static double at(sc_dtype t, const void *p, int64_t i) {
  return t == SC_DTYPE_F32 ? ((const float *)p)[i] : sc_bf16_to_f32(((const uint16_t *)p)[i]);
}

static void expect_close(const char *what, sc_dtype t, const void *got, const double *ref,
                         int64_t n, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = at(t, got, i);
    if (isinf(ref[i]) && g == ref[i]) continue; /* an lse of -inf */
    if (!isfinite(g)) fail_msg("%s[%lld] = %g (reference %g)", what, (long long)i, g, ref[i]);
    double e = fabs(g - ref[i]) / (1 + fabs(ref[i]));
    if (e > worst) worst = e;
    if (e > tol)
      fail_msg("%s[%lld] = %.9g, reference %.9g (error %.3g > %.3g)", what, (long long)i, g,
               ref[i], e, tol);
  }
  print_message("  %-4s worst relative error %.3g (tolerance %.3g)\n", what, worst, tol);
}

/* Runs both kernels (pool: NULL or a pool) and checks them against x. */
static void run_and_check(const tensors *x, sc_dtype t, sc_thread_pool *pool, double tol_f,
                          double tol_b) {
  const shape *s = &x->s;
  sc_attention_step a = {.batch = s->b, .heads = s->h, .kv_heads = s->kvh, .sq = s->sq,
                         .skv = s->skv, .d = s->d, .dv_dim = s->dv, .mask_stride_b = x->msb,
                         .mask_stride_h = x->msh, .scale = x->scale, .causal = s->causal};
  void *q = to_dtype(t, x->q, x->nq), *k = to_dtype(t, x->k, x->nk), *v = to_dtype(t, x->v, x->nv);
  void *d_o = to_dtype(t, x->d_o, x->no);
  float *mask = NULL;
  if (x->mask) {
    mask = malloc((size_t)x->nm * sizeof *mask);
    assert_non_null(mask);
    for (int64_t i = 0; i < x->nm; i++) mask[i] = (float)x->mask[i];
  }
  size_t es = t == SC_DTYPE_F32 ? 4 : 2;
  void *o = calloc((size_t)x->no, es), *dq = calloc((size_t)x->nq, es);
  void *dk = calloc((size_t)x->nk, es), *dv = calloc((size_t)x->nv, es);
  float *lse = calloc((size_t)x->nl, sizeof *lse);
  assert_true(o && dq && dk && dv && lse);
  sc_cpu_attention_io io = {.a = &a, .t = t, .mask_t = SC_DTYPE_F32, .q = q, .k = k, .v = v,
                            .mask = mask, .o = o, .lse = lse, .d_o = d_o, .dq = dq, .dk = dk,
                            .dv = dv};
  assert_true(sc_cpu_attention_forward(pool, &io));
  expect_close("o", t, o, x->o, x->no, tol_f);
  expect_close("lse", SC_DTYPE_F32, lse, x->lse, x->nl, tol_f);
  /* the backward reads the kernel's own o: the reference's O is within
   * tol_f of it, and D = rowsum(dO ∘ O) moves by as much */
  assert_true(sc_cpu_attention_backward(pool, &io));
  expect_close("dq", t, dq, x->dq, x->nq, tol_b);
  expect_close("dk", t, dk, x->dk, x->nk, tol_b);
  expect_close("dv", t, dv, x->dv, x->nv, tol_b);
  if (s->masked_row >= 0)
    for (int64_t b = 0; b < s->b; b++)
      for (int64_t h = 0; h < s->h; h++) {
        int64_t row = (b * s->h + h) * s->sq + s->masked_row;
        assert_true(lse[row] == -INFINITY);
        for (int64_t c = 0; c < s->dv; c++) assert_true(at(t, o, row * s->dv + c) == 0.0);
        for (int64_t c = 0; c < s->d; c++) assert_true(at(t, dq, row * s->d + c) == 0.0);
      }
  free(q), free(k), free(v), free(d_o), free(mask), free(o), free(dq), free(dk), free(dv);
  free(lse);
}

/* The reference backward against central differences of the reference
 * forward, L = sum(dO ∘ O), on a small causal grouped case with a mask. */
static void test_reference_gradient(void **state) {
  (void)state;
  shape s = {.b = 1, .h = 2, .kvh = 1, .sq = 3, .skv = 5, .d = 4, .dv = 3, .causal = true,
             .mask = true, .masked_row = -1};
  tensors x;
  make(&x, &s, SC_DTYPE_F32, 11);
  double *o0 = alloc_d(x.no);
  double *arrays[3] = {x.q, x.k, x.v}, *grads[3] = {x.dq, x.dk, x.dv};
  int64_t sizes[3] = {x.nq, x.nk, x.nv};
  for (int a = 0; a < 3; a++)
    for (int64_t i = 0; i < sizes[a]; i++) {
      double keep = arrays[a][i], eps = 1e-6, lp = 0, lm = 0;
      memcpy(o0, x.o, (size_t)x.no * sizeof *o0);
      arrays[a][i] = keep + eps;
      reference_forward(&x);
      for (int64_t j = 0; j < x.no; j++) lp += x.d_o[j] * x.o[j];
      arrays[a][i] = keep - eps;
      reference_forward(&x);
      for (int64_t j = 0; j < x.no; j++) lm += x.d_o[j] * x.o[j];
      arrays[a][i] = keep;
      memcpy(x.o, o0, (size_t)x.no * sizeof *o0);
      double fd = (lp - lm) / (2 * eps);
      if (fabs(fd - grads[a][i]) > 1e-6 * (1 + fabs(fd)))
        fail_msg("input %d element %lld: finite difference %.12g, reference %.12g", a,
                 (long long)i, fd, grads[a][i]);
    }
  free(o0);
  drop(&x);
}

static const shape CASES[] = {
    /* grouped kv heads, a mask broadcast over batch and heads, blocks cut */
    {.b = 2, .h = 4, .kvh = 2, .sq = 70, .skv = 130, .d = 40, .dv = 24, .mask = true,
     .masked_row = -1},
    /* causal with sq < skv (bottom-right aligned), one kv head */
    {.b = 1, .h = 3, .kvh = 1, .sq = 100, .skv = 150, .d = 32, .dv = 32, .causal = true,
     .masked_row = -1},
    /* causal with sq > skv: the first 30 rows see no key at all */
    {.b = 2, .h = 2, .kvh = 2, .sq = 80, .skv = 50, .d = 16, .dv = 8, .causal = true,
     .masked_row = -1},
    /* a per-batch mask with one fully masked row */
    {.b = 2, .h = 2, .kvh = 1, .sq = 65, .skv = 64, .d = 8, .dv = 8, .mask = true,
     .mask_per_batch = true, .masked_row = 5},
};

static void test_f32(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    print_message("f32 case %d\n", (int)c);
    tensors x;
    make(&x, &CASES[c], SC_DTYPE_F32, 100 + c);
    run_and_check(&x, SC_DTYPE_F32, NULL, 1e-5, 1e-5);
    drop(&x);
  }
}

static void test_bf16(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    print_message("bf16 case %d\n", (int)c);
    tensors x;
    make(&x, &CASES[c], SC_DTYPE_BF16, 200 + c);
    run_and_check(&x, SC_DTYPE_BF16, NULL, 8e-3, 8e-3);
    drop(&x);
  }
}

/* On a pool of 3 threads: the same tolerances (the units' boundaries are
 * the shapes', so the results are those of one thread). */
static void test_threads(void **state) {
  (void)state;
  sc_thread_pool *tp = NULL;
  sc_diag d = {0};
  assert_int_equal(sc_thread_pool_create(3, &tp, &d), SC_OK);
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    tensors x;
    make(&x, &CASES[c], SC_DTYPE_F32, 300 + c);
    run_and_check(&x, SC_DTYPE_F32, tp, 1e-5, 1e-5);
    drop(&x);
  }
  sc_thread_pool_destroy(tp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_gradient),
      cmocka_unit_test(test_f32),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
