/* test_cuda_attention.c — the fused attention kernels (codegen/cuda/
 * cuda_attention.c) without a GPU.
 *
 * Each problem's unit is compiled by NVRTC for sm_80 and sm_90 (every
 * kernel must appear in the PTX) and run on the emulated GPU
 * (runtime/cuda_emu.h): forward, then both backward kernels, on seeded
 * random q, k, v, mask and dO (values in [-1, 1), stored in the dtype),
 * against a double-precision reference computed here from the same stored
 * values. The problems cover grouped kv heads (4 query heads over 2), a
 * causal mask with sq < skv and sq > skv (rows that see no key: LSE -inf,
 * zero O), an additive mask broadcast over heads with a row masked out
 * wholly, head dims 32..256 (each tile choice), dv != d and dv not a
 * multiple of 16, and f32, bf16 and f16.
 *
 * Tolerances, against max|ref| of each tensor (an element's own relative
 * error is meaningless where softmax sums cancel):
 *   f32   |got - ref| <= 1e-5 (|ref| + max|ref|): f32 accumulation over at
 *         most 256 keys and features (observed errors are a few 1e-7).
 *   bf16  O 2^-7 (|ref| + max|ref|): one rounding of the stored result
 *         (2^-9 relative) plus the f32 path; the gradients 2^-6, because
 *         the backward also reads the rounded O (D = rowsum(dO o O)) and
 *         dS = P (dP - D) cancels.
 *   f16   2^-9 and 2^-8 on the same grounds (three more mantissa bits).
 *   LSE   1e-5 (|ref| + 1) in every dtype: f32 arithmetic on the same
 *         stored inputs. -inf exactly where the reference has -inf.
 * NaN fails everywhere. A second forward launch with a 2-block grid
 * (grid-stride) must give the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#include "runtime/cuda_emu.h"

static const sc_cuda_attn problems[] = {
    /* grouped heads, causal (sq < skv), f32 mask broadcast over heads */
    {.dtype = SC_DTYPE_F32, .mask_dtype = SC_DTYPE_F32, .has_mask = true, .causal = true,
     .batch = 2, .heads = 4, .kv_heads = 2, .sq = 70, .skv = 90, .d = 64, .dv = 64,
     .mask_stride_b = 70 * 90, .mask_stride_h = 0, .scale = 0.125f},
    /* no mask, not causal */
    {.dtype = SC_DTYPE_F32, .batch = 2, .heads = 4, .kv_heads = 2, .sq = 70, .skv = 90, .d = 64,
     .dv = 64, .scale = 0.125f},
    /* causal with sq > skv: the first rows see no key; dv != d, not a multiple of 16 */
    {.dtype = SC_DTYPE_F32, .causal = true, .batch = 1, .heads = 2, .kv_heads = 1, .sq = 40,
     .skv = 24, .d = 32, .dv = 40, .scale = 0.2f},
    /* bf16, bf16 mask per head, causal */
    {.dtype = SC_DTYPE_BF16, .mask_dtype = SC_DTYPE_BF16, .has_mask = true, .causal = true,
     .batch = 2, .heads = 4, .kv_heads = 2, .sq = 70, .skv = 90, .d = 64, .dv = 64,
     .mask_stride_b = 4 * 70 * 90, .mask_stride_h = 70 * 90, .scale = 0.125f},
    /* f16, head dim 128 (the smaller backward tiles), f32 mask */
    {.dtype = SC_DTYPE_F16, .mask_dtype = SC_DTYPE_F32, .has_mask = true, .batch = 1,
     .heads = 2, .kv_heads = 2, .sq = 50, .skv = 66, .d = 128, .dv = 128,
     .mask_stride_b = 0, .mask_stride_h = 0, .scale = 0.088388f},
    /* bf16, head dim 256 (the smallest tiles), causal */
    {.dtype = SC_DTYPE_BF16, .causal = true, .batch = 1, .heads = 2, .kv_heads = 1, .sq = 33,
     .skv = 40, .d = 256, .dv = 256, .scale = 0.0625f},
};
enum { N_PROBLEMS = sizeof problems / sizeof *problems };

static size_t esz(sc_dtype t) { return t == SC_DTYPE_F32 ? 4 : 2; }

static double load(sc_dtype t, const void *p, int64_t i) {
  if (t == SC_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return t == SC_DTYPE_BF16 ? sc_bf16_to_f32(h) : sc_f16_to_f32(h);
}

static void store(sc_dtype t, void *p, int64_t i, float v) {
  if (t == SC_DTYPE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = t == SC_DTYPE_BF16 ? sc_f32_to_bf16(v) : sc_f32_to_f16(v);
}

static void *random_tensor(sc_dtype t, int64_t n) {
  void *p = calloc((size_t)n + 1, esz(t));
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++) store(t, p, i, (float)rnd(-1.0, 1.0));
  return p;
}

typedef struct ref {
  double *o, *lse, *dq, *dk, *dv;
} ref;

static double mask_at(const sc_cuda_attn *a, const void *mask, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
  if (!a->has_mask) return 0.0;
  return load(a->mask_dtype, mask, b * a->mask_stride_b + h * a->mask_stride_h + i * a->skv + j);
}

/* The reference, in double, from the stored inputs. */
static void reference(const sc_cuda_attn *a, const void *q, const void *k, const void *v,
                      const void *mask, const void *d_o, ref *r) {
  int64_t B = a->batch, H = a->heads, HK = a->kv_heads, SQ = a->sq, SKV = a->skv, D = a->d,
          DV = a->dv, grp = H / HK, off = SKV - SQ;
  sc_dtype t = a->dtype;
  r->o = calloc((size_t)(B * H * SQ * DV), sizeof(double));
  r->lse = calloc((size_t)(B * H * SQ), sizeof(double));
  r->dq = calloc((size_t)(B * H * SQ * D), sizeof(double));
  r->dk = calloc((size_t)(B * HK * SKV * D), sizeof(double));
  r->dv = calloc((size_t)(B * HK * SKV * DV), sizeof(double));
  double *s = calloc((size_t)SKV, sizeof(double)), *p = calloc((size_t)SKV, sizeof(double));
  double *dp = calloc((size_t)SKV, sizeof(double));
  assert_true(r->o && r->lse && r->dq && r->dk && r->dv && s && p && dp);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t bh = b * H + h, kvh = b * HK + h / grp;
      for (int64_t i = 0; i < SQ; i++) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < SKV; j++) {
          double x = -INFINITY;
          if (!a->causal || j <= i + off) {
            double dot = 0;
            for (int64_t c = 0; c < D; c++)
              dot += load(t, q, (bh * SQ + i) * D + c) * load(t, k, (kvh * SKV + j) * D + c);
            x = a->scale * dot + mask_at(a, mask, b, h, i, j);
          }
          s[j] = x;
          if (x > mx) mx = x;
        }
        double l = 0;
        for (int64_t j = 0; j < SKV; j++) l += (p[j] = mx == -INFINITY ? 0 : exp(s[j] - mx));
        double lse = l > 0 ? mx + log(l) : -INFINITY;
        r->lse[bh * SQ + i] = lse;
        for (int64_t c = 0; c < DV; c++) {
          double acc = 0;
          for (int64_t j = 0; j < SKV; j++) acc += p[j] * load(t, v, (kvh * SKV + j) * DV + c);
          r->o[(bh * SQ + i) * DV + c] = l > 0 ? acc / l : 0;
        }
        /* backward of row i */
        double Dr = 0;
        for (int64_t c = 0; c < DV; c++)
          Dr += load(t, d_o, (bh * SQ + i) * DV + c) * r->o[(bh * SQ + i) * DV + c];
        for (int64_t j = 0; j < SKV; j++) {
          double pj = l > 0 ? p[j] / l : 0, dpj = 0;
          for (int64_t c = 0; c < DV; c++)
            dpj += load(t, d_o, (bh * SQ + i) * DV + c) * load(t, v, (kvh * SKV + j) * DV + c);
          double ds = pj * (dpj - Dr);
          for (int64_t c = 0; c < DV; c++)
            r->dv[(kvh * SKV + j) * DV + c] += pj * load(t, d_o, (bh * SQ + i) * DV + c);
          for (int64_t c = 0; c < D; c++) {
            r->dq[(bh * SQ + i) * D + c] += a->scale * ds * load(t, k, (kvh * SKV + j) * D + c);
            r->dk[(kvh * SKV + j) * D + c] += a->scale * ds * load(t, q, (bh * SQ + i) * D + c);
          }
        }
      }
    }
  free(s);
  free(p);
  free(dp);
}

static void free_ref(ref *r) {
  free(r->o);
  free(r->lse);
  free(r->dq);
  free(r->dk);
  free(r->dv);
}

/* got (n elements of dtype t) against want; returns the largest error
 * relative to max|want| */
static double compare(const char *what, int pi, sc_dtype t, const void *got, const double *want,
                      int64_t n, double tol) {
  double mx = 0, worst = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs(want[i]) > mx) mx = fabs(want[i]);
  for (int64_t i = 0; i < n; i++) {
    double g = load(t, got, i), err = fabs(g - want[i]);
    if (isnan(g) || err > tol * (fabs(want[i]) + mx))
      fail_msg("problem %d: %s[%lld] = %.9g, reference %.9g (max %.3g, tol %.3g)", pi, what,
               (long long)i, g, want[i], mx, tol);
    if (mx > 0 && err / mx > worst) worst = err / mx;
  }
  return worst;
}

static void compile_archs(const char *src, const sc_cuda_attn *a, int32_t n) {
  static const char *archs[] = {"sm_80", "sm_90"};
  for (int ai = 0; ai < 2; ai++) {
    sc_diag d = {0};
    char *ptx = NULL, *log = NULL;
    size_t len = 0;
    if (sc_cuda_compile_ptx(src, archs[ai], &ptx, &len, &log, &d) != SC_OK)
      fail_msg("%s: %s\n%s", archs[ai], d.msg, log ? log : "");
    for (int32_t i = 0; i < n; i++)
      for (int pass = 0; pass < SC_CUDA_ATTN_PASSES; pass++) {
        sc_cuda_attn_launch l;
        sc_cuda_attn_launch_config(&a[i], i, (sc_cuda_attn_pass)pass, &l);
        char entry[96];
        snprintf(entry, sizeof entry, ".visible .entry %s(", l.name);
        if (!strstr(ptx, entry)) fail_msg("%s: no %s in the PTX", archs[ai], entry);
        assert_true(l.shared_bytes <= 163 * 1024); /* sm_80's opt-in limit */
      }
    assert_non_null(strstr(ptx, "shfl.sync.bfly"));
    sc_free(ptx);
    sc_free(log);
  }
}

static void launch(sc_cuda_emu *e, const sc_cuda_attn *a, int32_t id, sc_cuda_attn_pass pass,
                   int64_t grid, void **args) {
  sc_cuda_attn_launch cfg;
  sc_cuda_attn_launch_config(a, id, pass, &cfg);
  sc_cuda_launch l = {.mode = SC_CUDA_BLOCK_PER_POINT, .block = cfg.block, .grid = grid ? grid : cfg.grid,
                      .points = cfg.grid, .shared_bytes = cfg.shared_bytes};
  sc_diag d = {0};
  if (sc_cuda_emu_launch(e, cfg.name, &l, args, &d) != SC_OK) fail_msg("%s: %s", cfg.name, d.msg);
}

static void run_problem(sc_cuda_emu *e, const sc_cuda_attn *a, int32_t id) {
  int64_t B = a->batch, H = a->heads, HK = a->kv_heads, SQ = a->sq, SKV = a->skv;
  int64_t nq = B * H * SQ * a->d, nk = B * HK * SKV * a->d, nv = B * HK * SKV * a->dv,
          no = B * H * SQ * a->dv, nl = B * H * SQ;
  sc_dtype t = a->dtype;
  void *q = random_tensor(t, nq), *k = random_tensor(t, nk), *v = random_tensor(t, nv);
  void *d_o = random_tensor(t, no), *mask = NULL;
  if (a->has_mask) {
    int64_t nm = (B - 1) * a->mask_stride_b + (H - 1) * a->mask_stride_h + SQ * SKV;
    mask = calloc((size_t)nm, esz(a->mask_dtype));
    assert_non_null(mask);
    for (int64_t i = 0; i < nm; i++)
      store(a->mask_dtype, mask, i, rng_unit() < 0.1 ? -INFINITY : (float)rnd(-2.0, 0.0));
    for (int64_t j = 0; j < SKV; j++) store(a->mask_dtype, mask, 5 * SKV + j, -INFINITY);
  }
  void *o = calloc((size_t)no, esz(t)), *o2 = calloc((size_t)no, esz(t));
  float *lse = calloc((size_t)nl, 4), *lse2 = calloc((size_t)nl, 4);
  void *dq = calloc((size_t)nq, esz(t)), *dk = calloc((size_t)nk, esz(t)),
       *dv = calloc((size_t)nv, esz(t));
  assert_true(o && o2 && lse && lse2 && dq && dk && dv);
  void *ptr[SC_CUDA_ATTN_ARGS] = {q, k, v, mask, o, lse, d_o, dq, dk, dv};
  void *args[SC_CUDA_ATTN_ARGS];
  for (int i = 0; i < SC_CUDA_ATTN_ARGS; i++) args[i] = &ptr[i];
  launch(e, a, id, SC_CUDA_ATTN_FWD, 0, args);
  launch(e, a, id, SC_CUDA_ATTN_BWD_KV, 0, args);
  launch(e, a, id, SC_CUDA_ATTN_BWD_Q, 0, args);
  /* the same forward over a 2-block grid (grid-stride): the same bits */
  void *ptr2[SC_CUDA_ATTN_ARGS] = {q, k, v, mask, o2, lse2, NULL, NULL, NULL, NULL};
  void *args2[SC_CUDA_ATTN_ARGS];
  for (int i = 0; i < SC_CUDA_ATTN_ARGS; i++) args2[i] = &ptr2[i];
  launch(e, a, id, SC_CUDA_ATTN_FWD, 2, args2);
  assert_memory_equal(o, o2, (size_t)no * esz(t));
  assert_memory_equal(lse, lse2, (size_t)nl * 4);

  ref r;
  reference(a, q, k, v, mask, d_o, &r);
  double to = t == SC_DTYPE_F32 ? 1e-5 : t == SC_DTYPE_BF16 ? 0x1p-7 : 0x1p-9;
  double tg = t == SC_DTYPE_F32 ? 1e-5 : t == SC_DTYPE_BF16 ? 0x1p-6 : 0x1p-8;
  int64_t dead = 0;
  for (int64_t i = 0; i < nl; i++) {
    if (r.lse[i] == -INFINITY) {
      dead++;
      if (lse[i] != -INFINITY) fail_msg("problem %d: lse[%lld] = %g, reference -inf", id, (long long)i, lse[i]);
      for (int64_t c = 0; c < a->dv; c++)
        if (load(t, o, i * a->dv + c) != 0.0) fail_msg("problem %d: row %lld sees no key but o != 0", id, (long long)i);
    } else if (isnan(lse[i]) || fabs(lse[i] - r.lse[i]) > 1e-5 * (fabs(r.lse[i]) + 1)) {
      fail_msg("problem %d: lse[%lld] = %.9g, reference %.9g", id, (long long)i, lse[i], r.lse[i]);
    }
  }
  double eo = compare("o", id, t, o, r.o, no, to);
  double eq = compare("dq", id, t, dq, r.dq, nq, tg);
  double ek = compare("dk", id, t, dk, r.dk, nk, tg);
  double ev = compare("dv", id, t, dv, r.dv, nv, tg);
  printf("[  ATTN    ] problem %d (%s d=%lld dv=%lld%s%s): max err / max|ref|: o %.2g dq %.2g "
         "dk %.2g dv %.2g; %lld rows see no key\n",
         id, sc_dtype_name(t), (long long)a->d, (long long)a->dv, a->causal ? " causal" : "",
         a->has_mask ? " mask" : "", eo, eq, ek, ev, (long long)dead);
  if (a->causal && SQ > SKV) assert_true(dead > 0);
  if (a->has_mask && id == 0) assert_true(dead > 0);
  free_ref(&r);
  free(q), free(k), free(v), free(d_o), free(mask), free(o), free(o2), free(lse), free(lse2);
  free(dq), free(dk), free(dv);
}

static void test_attention_compile_and_emulate(void **state) {
  (void)state;
  sc_diag d = {0};
  char *src = NULL;
  if (sc_cuda_attn_unit(problems, N_PROBLEMS, &src, &d) != SC_OK) fail_msg("%s", d.msg);
  compile_archs(src, problems, N_PROBLEMS);
  sc_cuda_emu *e = NULL;
  if (sc_cuda_emu_open(src, &e, &d) != SC_OK) fail_msg("%s", d.msg);
  rng_seed(20261205);
  for (int32_t i = 0; i < N_PROBLEMS; i++) run_problem(e, &problems[i], i);
  sc_cuda_emu_close(e);
  sc_free(src);
}

static void test_attention_problems_refused(void **state) {
  (void)state;
  sc_cuda_attn a = problems[0];
  assert_null(sc_cuda_attn_problem(&a));
  a.d = 512;
  assert_non_null(sc_cuda_attn_problem(&a));
  a = problems[0], a.kv_heads = 3;
  assert_non_null(sc_cuda_attn_problem(&a));
  a = problems[0], a.dtype = SC_DTYPE_F64;
  assert_non_null(sc_cuda_attn_problem(&a));
  a = problems[0], a.mask_dtype = SC_DTYPE_BF16; /* neither f32 nor the dtype */
  assert_non_null(sc_cuda_attn_problem(&a));
  a = problems[0], a.scale = NAN;
  assert_non_null(sc_cuda_attn_problem(&a));
  char *text = NULL;
  sc_diag d = {0};
  assert_int_equal(sc_cuda_attn_emit(&a, 0, false, &text, &d), SC_ERR_UNSUPPORTED);
  assert_null(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_problems_refused),
      cmocka_unit_test(test_attention_compile_and_emulate),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}

#else /* !SHARDC_HAVE_CUDA */

SC_TEST_MAIN_SKIPPED("built without NVRTC (SHARDC_CUDA=OFF)")
#endif
