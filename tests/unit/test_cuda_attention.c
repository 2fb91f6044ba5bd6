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
 * multiple of 16, f32, bf16 and f16, and problems without keys or queries.
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
 * (grid-stride) must give the same bits. The reference's backward is
 * itself checked against central differences of its forward (problems 0
 * and 2, 6 elements of each of q, k, v).
 *
 * The CUDA device's errors between runs: a copy that fails outside a run
 * (a slot read into NULL, a slot written from NULL: the driver refuses
 * them, CUDA_ERROR_INVALID_VALUE) fails the next run, naming the call, and
 * only that one (the run after it passes). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#include "codegen/memplan.h"
#include "runtime/cuda_emu.h"
#include "runtime/runtime.h"

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
    /* no keys: o 0, lse -inf, dq 0 */
    {.dtype = SC_DTYPE_F32, .batch = 1, .heads = 2, .kv_heads = 1, .sq = 5, .skv = 0, .d = 16,
     .dv = 16, .scale = 0.25f},
    /* no queries: dk, dv 0 */
    {.dtype = SC_DTYPE_F32, .causal = true, .batch = 1, .heads = 2, .kv_heads = 1, .sq = 0,
     .skv = 7, .d = 16, .dv = 16, .scale = 0.25f},
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

static void *nan_filled(int64_t n, size_t size) {
  void *p = malloc((size_t)(n + 1) * size);
  assert_non_null(p);
  memset(p, 0xff, (size_t)(n + 1) * size);
  return p;
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

/* One NVRTC compile of the unit (a thread each: NVRTC is thread-safe, and
 * the two compiles and the host's run side by side). */
typedef struct nvrtc_job {
  const char *src, *arch;
  char *ptx, *log;
  sc_status st;
  sc_diag d;
} nvrtc_job;

static void *nvrtc_run(void *p) {
  nvrtc_job *j = p;
  size_t len = 0;
  j->st = sc_cuda_compile_ptx(j->src, j->arch, &j->ptx, &len, &j->log, &j->d);
  return NULL;
}

/* Every kernel of the problems in the job's PTX, tensor cores used. */
static void check_ptx(const nvrtc_job *j, const sc_cuda_attn *a, int32_t n) {
  if (j->st != SC_OK) fail_msg("%s: %s\n%s", j->arch, j->d.msg, j->log ? j->log : "");
  for (int32_t i = 0; i < n; i++)
    for (int pass = 0; pass < SC_CUDA_ATTN_PASSES; pass++) {
      if (pass == SC_CUDA_ATTN_FWD_MMA && !sc_cuda_attn_mma_ok(&a[i])) continue;
      sc_cuda_attn_launch l;
      sc_cuda_attn_launch_config(&a[i], i, (sc_cuda_attn_pass)pass, &l);
      char entry[96];
      snprintf(entry, sizeof entry, ".visible .entry %s(", l.name);
      if (!strstr(j->ptx, entry)) fail_msg("%s: no %s in the PTX", j->arch, entry);
      assert_true(l.shared_bytes <= 163 * 1024); /* sm_80's opt-in limit */
    }
  assert_non_null(strstr(j->ptx, "shfl.sync.bfly"));
  assert_non_null(strstr(j->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
  assert_non_null(strstr(j->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
}

static void check_results(const sc_cuda_attn *a, int id, const void *q, const void *k,
                          const void *v, const void *mask, const void *d_o, const void *o,
                          const float *lse, const void *dq, const void *dk, const void *dv);
static void *random_mask(const sc_cuda_attn *a);

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
  void *d_o = random_tensor(t, no), *mask = random_mask(a);
  /* outputs start as NaN (all bits set): an element a kernel leaves unwritten fails */
  void *o = nan_filled(no, esz(t)), *o2 = nan_filled(no, esz(t));
  float *lse = nan_filled(nl, 4), *lse2 = nan_filled(nl, 4);
  void *dq = nan_filled(nq, esz(t)), *dk = nan_filled(nk, esz(t)), *dv = nan_filled(nv, esz(t));
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

  check_results(a, id, q, k, v, mask, d_o, o, lse, dq, dk, dv);
  if (sc_cuda_attn_mma_ok(a)) { /* the tensor-core forward, against the same reference */
    void *ptr3[SC_CUDA_ATTN_ARGS] = {q, k, v, mask, o2, lse2, NULL, NULL, NULL, NULL};
    void *args3[SC_CUDA_ATTN_ARGS];
    memset(o2, 0xff, (size_t)no * esz(t));
    memset(lse2, 0xff, (size_t)nl * 4);
    for (int i = 0; i < SC_CUDA_ATTN_ARGS; i++) args3[i] = &ptr3[i];
    launch(e, a, id, SC_CUDA_ATTN_FWD_MMA, 0, args3);
    printf("[  ATTN    ] problem %d, forward on tensor cores:\n", id);
    check_results(a, id, q, k, v, mask, d_o, o2, lse2, dq, dk, dv);
  }
  free(q), free(k), free(v), free(d_o), free(mask), free(o), free(o2), free(lse), free(lse2);
  free(dq), free(dk), free(dv);
}

/* The kernels' results against the reference (tolerances: the top). */
static void check_results(const sc_cuda_attn *a, int id, const void *q, const void *k,
                          const void *v, const void *mask, const void *d_o, const void *o,
                          const float *lse, const void *dq, const void *dk, const void *dv) {
  int64_t B = a->batch, H = a->heads, HK = a->kv_heads, SQ = a->sq, SKV = a->skv;
  int64_t nq = B * H * SQ * a->d, nk = B * HK * SKV * a->d, nv = B * HK * SKV * a->dv,
          no = B * H * SQ * a->dv, nl = B * H * SQ;
  sc_dtype t = a->dtype;
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
}

static int64_t mask_numel(const sc_cuda_attn *a) {
  return (a->batch - 1) * a->mask_stride_b + (a->heads - 1) * a->mask_stride_h + a->sq * a->skv;
}

/* values in [-2, 0), one in ten -inf, and query row 5 of the first batch
 * and head masked wholly (LSE -inf, a zero row) */
static void *random_mask(const sc_cuda_attn *a) {
  if (!a->has_mask) return NULL;
  int64_t nm = mask_numel(a);
  void *mask = calloc((size_t)nm, esz(a->mask_dtype));
  assert_non_null(mask);
  for (int64_t i = 0; i < nm; i++)
    store(a->mask_dtype, mask, i, rng_unit() < 0.1 ? -INFINITY : (float)rnd(-2.0, 0.0));
  for (int64_t j = 0; j < a->skv; j++) store(a->mask_dtype, mask, 5 * a->skv + j, -INFINITY);
  return mask;
}

/* L = Σ dO · O of the reference forward. */
static double ref_loss(const sc_cuda_attn *a, const void *q, const void *k, const void *v,
                       const void *mask, const void *d_o) {
  ref r;
  reference(a, q, k, v, mask, d_o, &r);
  double l = 0;
  for (int64_t i = 0; i < a->batch * a->heads * a->sq * a->dv; i++)
    l += load(a->dtype, d_o, i) * r.o[i];
  free_ref(&r);
  return l;
}

/* The reference's backward against central differences of its forward
 * (dL/dx of L = Σ dO · O) at 6 elements of each of q, k and v of problems
 * 0 and 2 (f32; a mask, grouped heads, causal rows that see no key): the
 * kernels' gradients are checked against that backward, so this ties them
 * to the function the forward computes. Step 2^-10 in the stored f32 value
 * (the step taken is the stored difference); in f64 the truncation error
 * is ~1e-9 and the rounding ~1e-11: tolerance 1e-6 (|g| + max|g|). */
static void test_reference_gradient_finite_differences(void **state) {
  (void)state;
  for (int pi = 0; pi < N_PROBLEMS; pi++) {
    const sc_cuda_attn *a = &problems[pi];
    if (pi != 0 && pi != 2) continue;
    assert_true(a->dtype == SC_DTYPE_F32 && a->sq > 0 && a->skv > 0);
    int64_t B = a->batch, H = a->heads, HK = a->kv_heads;
    int64_t n[3] = {B * H * a->sq * a->d, B * HK * a->skv * a->d, B * HK * a->skv * a->dv};
    float *x[3];
    for (int w = 0; w < 3; w++) x[w] = random_tensor(SC_DTYPE_F32, n[w]);
    void *d_o = random_tensor(SC_DTYPE_F32, B * H * a->sq * a->dv), *mask = random_mask(a);
    ref r;
    reference(a, x[0], x[1], x[2], mask, d_o, &r);
    const double *grad[3] = {r.dq, r.dk, r.dv};
    const char *name[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
      double mx = 0, worst = 0;
      for (int64_t i = 0; i < n[w]; i++) mx = fmax(mx, fabs(grad[w][i]));
      assert_true(mx > 0);
      for (int s = 0; s < 6; s++) {
        int64_t at = (int64_t)((uint64_t)(s * 2654435761u + 17u * (unsigned)w) % (uint64_t)n[w]);
        float keep = x[w][at];
        x[w][at] = keep + 0x1p-10f;
        double up = (double)x[w][at] - keep, lp = ref_loss(a, x[0], x[1], x[2], mask, d_o);
        x[w][at] = keep - 0x1p-10f;
        double down = keep - (double)x[w][at], lm = ref_loss(a, x[0], x[1], x[2], mask, d_o);
        x[w][at] = keep;
        double fd = (lp - lm) / (up + down), err = fabs(fd - grad[w][at]);
        if (!(err <= 1e-6 * (fabs(grad[w][at]) + mx)))
          fail_msg("problem %d: %s[%lld] = %.12g, central difference %.12g", pi, name[w],
                   (long long)at, grad[w][at], fd);
        worst = fmax(worst, err / mx);
      }
      printf("problem %d: the reference's %s within %.2e of central differences (of max|%s|)\n",
             pi, name[w], worst, name[w]);
    }
    free_ref(&r);
    for (int w = 0; w < 3; w++) free(x[w]);
    free(d_o);
    free(mask);
  }
}

static void test_attention_compile_and_emulate(void **state) {
  (void)state;
  sc_diag d = {0};
  char *src = NULL;
  if (sc_cuda_attn_unit(problems, N_PROBLEMS, &src, &d) != SC_OK) fail_msg("%s", d.msg);
  nvrtc_job jobs[2] = {{.src = src, .arch = "sm_80"}, {.src = src, .arch = "sm_90"}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, nvrtc_run, &jobs[i]), 0);
  sc_cuda_emu *e = NULL;
  sc_status st = sc_cuda_emu_open(src, &e, &d);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  if (st != SC_OK) fail_msg("%s", d.msg);
  for (int i = 0; i < 2; i++) {
    check_ptx(&jobs[i], problems, N_PROBLEMS);
    sc_free(jobs[i].ptx);
    sc_free(jobs[i].log);
  }
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
  assert_int_equal(sc_cuda_attn_emit(&a, 0, SC_CUDA_ATTN_ALL, false, &text, &d), SC_ERR_UNSUPPORTED);
  assert_null(text);
}

static int32_t add_buffer(sc_program *p, const char *name, sc_buf_kind kind, sc_dtype t,
                          int32_t rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.kind = kind;
  b.dtype = t;
  b.rank = rank;
  int64_t dims[4] = {d0, d1, d2, d3};
  memcpy(b.dims, dims, sizeof dims);
  b.offset = -1;
  b.alias_of = -1;
  b.value = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  if (kind == SC_BUF_INPUT) assert_int_equal(sc_program_add_input(p, id), SC_OK);
  if (kind == SC_BUF_OUTPUT) assert_int_equal(sc_program_add_output(p, id), SC_OK);
  return id;
}

/* A program of an ATTENTION step and its ATTENTION_GRAD step for problem a,
 * built by hand: inputs q, k, v, (mask), d_o; outputs o, lse, dq, dk, dv. */
static sc_program *attention_program(const sc_cuda_attn *a, bool grad) {
  sc_program *p = sc_program_create();
  assert_non_null(p);
  sc_dtype t = a->dtype;
  int64_t B = a->batch, H = a->heads, HK = a->kv_heads;
  sc_attention_step x = {.mask = -1, .d_o = -1, .dq = -1, .dk = -1, .dv = -1};
  x.q = add_buffer(p, "q", SC_BUF_INPUT, t, 4, B, H, a->sq, a->d);
  x.k = add_buffer(p, "k", SC_BUF_INPUT, t, 4, B, HK, a->skv, a->d);
  x.v = add_buffer(p, "v", SC_BUF_INPUT, t, 4, B, HK, a->skv, a->dv);
  if (a->has_mask) x.mask = add_buffer(p, "mask", SC_BUF_INPUT, a->mask_dtype, 1, mask_numel(a), 0, 0, 0);
  int32_t d_o = grad ? add_buffer(p, "d_o", SC_BUF_INPUT, t, 4, B, H, a->sq, a->dv) : -1;
  x.o = add_buffer(p, "o", SC_BUF_OUTPUT, t, 4, B, H, a->sq, a->dv);
  x.lse = add_buffer(p, "lse", SC_BUF_OUTPUT, SC_DTYPE_F32, 3, B, H, a->sq, 0);
  x.batch = B, x.heads = H, x.kv_heads = HK, x.sq = a->sq, x.skv = a->skv;
  x.d = a->d, x.dv_dim = a->dv, x.scale = a->scale, x.causal = a->causal;
  x.mask_stride_b = a->mask_stride_b, x.mask_stride_h = a->mask_stride_h;
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_ATTENTION;
  s.kernel = -1;
  s.gemm.bias = -1;
  s.origin = "attention";
  s.attn = x;
  assert_null(sc_attention_problem(p, &s));
  assert_true(sc_program_add_step(p, &s) >= 0);
  if (!grad) goto plan;
  x.d_o = d_o;
  x.dq = add_buffer(p, "dq", SC_BUF_OUTPUT, t, 4, B, H, a->sq, a->d);
  x.dk = add_buffer(p, "dk", SC_BUF_OUTPUT, t, 4, B, HK, a->skv, a->d);
  x.dv = add_buffer(p, "dv", SC_BUF_OUTPUT, t, 4, B, HK, a->skv, a->dv);
  s.kind = SC_STEP_ATTENTION_GRAD;
  s.origin = "attention_grad";
  s.attn = x;
  assert_null(sc_attention_problem(p, &s));
  assert_true(sc_program_add_step(p, &s) >= 0);
plan:;
  sc_diag d = {0};
  assert_int_equal(sc_memplan_run(p, &d), SC_OK);
  assert_int_equal(sc_memplan_verify(p, &d), SC_OK);
  return p;
}

/* Seeded random inputs of an attention_program: data[5] (q, k, v, mask or
 * NULL, d_o; malloc'd) and their views, in the program's input order. */
static int32_t program_inputs(const sc_program *p, const sc_cuda_attn *a, void *data[5],
                              sc_tensor_view in[5]) {
  int64_t B = a->batch, H = a->heads, HK = a->kv_heads;
  sc_dtype t = a->dtype;
  data[0] = random_tensor(t, B * H * a->sq * a->d);
  data[1] = random_tensor(t, B * HK * a->skv * a->d);
  data[2] = random_tensor(t, B * HK * a->skv * a->dv);
  data[3] = random_mask(a);
  data[4] = random_tensor(t, B * H * a->sq * a->dv);
  int32_t n_in = 0;
  for (int i = 0; i < 5 && n_in < p->n_inputs; i++) {
    if (!data[i]) continue;
    const sc_buffer *b = &p->buffers[p->inputs[n_in]];
    in[n_in] = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank, .data = data[i]};
    memcpy(in[n_in].dims, b->dims, sizeof b->dims);
    n_in++;
  }
  assert_int_equal(n_in, p->n_inputs);
  return n_in;
}

/* A session of p on the CUDA device (the emulated driver: SHARDC_CUDA_EMU=1). */
static sc_session *cuda_session(const sc_program *p) {
  setenv("SHARDC_CUDA_EMU", "1", 1);
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.device.name = "cuda";
  sc_session *ss = NULL;
  sc_diag d = {0};
  if (sc_session_create(p, &o, &ss, &d) != SC_OK) fail_msg("session: %s", d.msg);
  return ss;
}

/* The CUDA device runs the steps (the emulated driver: SHARDC_CUDA_EMU=1):
 * run 0 step by step, run 1 captured into a graph, run 2 replayed; every
 * run's outputs match the reference and are the same bits. */
static void test_attention_steps_on_cuda_device(void **state) {
  (void)state;
  static const int which[] = {0, 3, 3}; /* the last on tensor cores */
  for (size_t w = 0; w < sizeof which / sizeof *which; w++) {
    const sc_cuda_attn *a = &problems[which[w]];
    if (w == 2) setenv("SHARDC_CUDA_ATTENTION", "mma", 1);
    sc_program *p = attention_program(a, true);
    sc_session *ss = cuda_session(p);
    sc_diag d = {0};
    rng_seed(w == 2 ? 8 : 7 + (uint64_t)w); /* the tensor-core run: run 1's inputs */
    void *data[5];
    sc_tensor_view in[5];
    int32_t n_in = program_inputs(p, a, data, in);
    void *first[5] = {0};
    static void *o_fma; /* problem 3's o on CUDA cores (kept for the tensor-core run) */
    for (int run = 0; run < 3; run++) {
      sc_tensor_view out[5];
      memset(out, 0, sizeof out);
      if (sc_session_run(ss, in, n_in, out, 5, &d) != SC_OK) fail_msg("run %d: %s", run, d.msg);
      if (run == 0) {
        check_results(a, which[w], data[0], data[1], data[2], data[3], data[4], out[0].data,
                      out[1].data, out[2].data, out[3].data, out[4].data);
        for (int i = 0; i < 5; i++) {
          size_t bytes = (size_t)p->buffers[p->outputs[i]].bytes;
          first[i] = malloc(bytes);
          memcpy(first[i], out[i].data, bytes);
        }
      } else {
        for (int i = 0; i < 5; i++)
          assert_memory_equal(first[i], out[i].data, (size_t)p->buffers[p->outputs[i]].bytes);
      }
    }
    printf("[  ATTN    ] problem %d as ATTENTION + ATTENTION_GRAD steps on the cuda device "
           "(emulated%s): 3 runs, graph replays equal\n", which[w],
           w == 2 ? ", SHARDC_CUDA_ATTENTION=mma" : "");
    size_t o_bytes = (size_t)p->buffers[p->outputs[0]].bytes;
    if (w == 2) { /* P rounded to bf16 in the product: some o differ, so mma ran */
      assert_non_null(o_fma);
      assert_true(memcmp(o_fma, first[0], o_bytes) != 0);
      free(o_fma);
      o_fma = NULL;
    } else if (w == 1) {
      o_fma = malloc(o_bytes);
      memcpy(o_fma, first[0], o_bytes);
    }
    for (int i = 0; i < 5; i++) free(first[i]), free(data[i]);
    sc_session_destroy(ss);
    sc_program_destroy(p);
  }
  unsetenv("SHARDC_CUDA_ATTENTION");
}

/* A failure between runs is not forgotten: the copy hooks return nothing,
 * so the next run (end_run) reports it, once. */
static void test_cuda_device_error_between_runs(void **state) {
  (void)state;
  const sc_cuda_attn *a = &problems[0];
  sc_program *p = attention_program(a, false);
  sc_session *ss = cuda_session(p);
  sc_diag d = {0};
  rng_seed(11);
  void *data[5];
  sc_tensor_view in[5], out[5];
  int32_t n_in = program_inputs(p, a, data, in);
  int32_t n_out = p->n_outputs;
  assert_int_equal(sc_session_run(ss, in, n_in, out, n_out, &d), SC_OK);
  void *slot = sc_session_state_slot(ss, 0); /* q's, on the device */
  assert_non_null(slot);
  int64_t bytes = p->buffers[p->inputs[0]].bytes;
  static const char *const calls[] = {"cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync"};
  for (int k = 0; k < 2; k++) {
    if (k == 0)
      sc_session_slot_read(ss, NULL, slot, bytes);
    else
      sc_session_slot_write(ss, slot, NULL, bytes);
    sc_diag_clear(&d);
    assert_int_not_equal(sc_session_run(ss, in, n_in, out, n_out, &d), SC_OK);
    if (!strstr(d.msg, calls[k])) fail_msg("the run after a failed %s: %s", calls[k], d.msg);
    sc_diag_clear(&d);
    if (sc_session_run(ss, in, n_in, out, n_out, &d) != SC_OK)
      fail_msg("the run after the reported %s: %s", calls[k], d.msg);
  }
  for (int i = 0; i < 5; i++) free(data[i]);
  sc_session_destroy(ss);
  sc_program_destroy(p);
}

/* The program's unit has the attention template and kernels only when it
 * has attention steps, the forward only for ATTENTION steps, and steps with
 * one problem share kernels (sc_cuda_attn_id). */
static void test_attention_in_program_source(void **state) {
  (void)state;
  sc_diag d = {0};
  char *src = NULL;
  sc_program *none = sc_program_create();
  assert_int_equal(sc_cuda_emit_source(none, &src, &d), SC_OK);
  assert_null(strstr(src, "sc_attn"));
  sc_free(src);
  sc_program_destroy(none);

  sc_program *fwd = attention_program(&problems[0], false);
  assert_int_equal(sc_cuda_emit_source(fwd, &src, &d), SC_OK);
  assert_non_null(strstr(src, "sc_attn0_fwd("));
  assert_null(strstr(src, "sc_attn0_bwd_kv("));
  sc_free(src);
  sc_program_destroy(fwd);

  sc_program *p = attention_program(&problems[0], true);
  sc_step again = p->steps[0]; /* the forward once more: the same problem */
  assert_true(sc_program_add_step(p, &again) >= 0);
  assert_int_equal(sc_cuda_attn_id(p, 2), 0);
  assert_int_equal(sc_cuda_attn_id(p, 1), 0);
  assert_int_equal(sc_cuda_emit_source(p, &src, &d), SC_OK);
  const char *f = strstr(src, "sc_attn0_fwd" SC_CUDA_EMU_SUFFIX "(");
  assert_non_null(f); /* one kernel (and its trampoline) for both forward steps */
  assert_null(strstr(f + 1, "sc_attn0_fwd" SC_CUDA_EMU_SUFFIX "("));
  assert_non_null(strstr(src, "sc_attn0_bwd_kv("));
  assert_non_null(strstr(src, "sc_attn0_bwd_q("));
  assert_null(strstr(src, "sc_attn2_"));
  sc_free(src);
  /* another scale is another problem */
  p->steps[2].attn.scale = 0.5f;
  assert_int_equal(sc_cuda_attn_id(p, 2), 2);
  sc_program_destroy(p);
}

/* ---- --compare: the CUDA device against the CPU device, timed ---- */

static sc_session *open_session(const sc_program *p, const char *device) {
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.device.name = device;
  sc_session *s = NULL;
  sc_diag d = {0};
  if (sc_session_create(p, &o, &s, &d) != SC_OK) {
    fprintf(stderr, "attention: %s session: %s\n", device, d.msg);
    return NULL;
  }
  return s;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* The median device time of `runs` runs after 2 warm-ups (ms), or -1. */
static double time_runs(sc_session *s, const sc_tensor_view *in, int32_t n_in, int32_t n_out,
                        int runs) {
  double t[64];
  sc_tensor_view out[5];
  sc_diag d = {0};
  if (runs > 64) runs = 64;
  for (int r = 0; r < runs + 2; r++) {
    if (sc_session_run(s, in, n_in, out, n_out, &d) != SC_OK) {
      fprintf(stderr, "attention: run: %s\n", d.msg);
      return -1;
    }
    if (r >= 2) t[r - 2] = sc_session_device_seconds(s) * 1e3;
  }
  qsort(t, (size_t)runs, sizeof *t, cmp_double);
  return t[runs / 2];
}

/* max |x - y| / max |y| over n elements of dtype t (NaN: infinity) */
static double rel_err(sc_dtype t, const void *x, const void *y, int64_t n) {
  double mx = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = load(t, x, i), b = load(t, y, i);
    if (isnan(a) || isnan(b)) return INFINITY;
    if (isinf(b) && a == b) continue; /* lse of a row that sees no key */
    mx = fabs(b) > mx ? fabs(b) : mx;
    e = fabs(a - b) > e ? fabs(a - b) : e;
  }
  return mx > 0 ? e / mx : e;
}

/* One shape "NAME:batch,heads,kv_heads,seq,d,causal,dtype": o, lse, dq, dk,
 * dv of the CUDA device against the CPU device's, then the CUDA device's
 * time of the forward (a program of one ATTENTION step) and of forward and
 * backward (ATTENTION + ATTENTION_GRAD; the backward is the difference).
 * Returns 0 when every output is within tolerance, 1 if not, 2 when the
 * shape could not run. */
static int compare_shape(const char *spec, int runs) {
  char name[64];
  long long b, h, hk, sq, d, causal;
  char dt[8];
  if (sscanf(spec, "%63[^:]:%lld,%lld,%lld,%lld,%lld,%lld,%7s", name, &b, &h, &hk, &sq, &d,
             &causal, dt) != 8) {
    fprintf(stderr, "attention: bad shape '%s' (NAME:batch,heads,kv_heads,seq,d,causal,dtype)\n", spec);
    return 2;
  }
  sc_cuda_attn a = {.dtype = strcmp(dt, "bf16") == 0 ? SC_DTYPE_BF16
                             : strcmp(dt, "f16") == 0 ? SC_DTYPE_F16 : SC_DTYPE_F32,
                    .causal = causal != 0, .batch = b, .heads = h, .kv_heads = hk, .sq = sq,
                    .skv = sq, .d = d, .dv = d, .scale = (float)(1.0 / sqrt((double)d))};
  if (sc_cuda_attn_problem(&a)) {
    fprintf(stderr, "attention: %s: %s\n", name, sc_cuda_attn_problem(&a));
    return 2;
  }
  sc_program *full = attention_program(&a, true), *fwd = attention_program(&a, false);
  sc_session *cpu = open_session(full, "cpu"), *gpu = open_session(full, "cuda");
  sc_session *gpu_fwd = open_session(fwd, "cuda");
  if (!cpu || !gpu || !gpu_fwd) return 2;
  rng_seed(1234);
  void *data[5];
  sc_tensor_view in[5], out_c[5], out_g[5];
  int32_t n_in = program_inputs(full, &a, data, in);
  sc_diag dg = {0};
  if (sc_session_run(cpu, in, n_in, out_c, 5, &dg) != SC_OK ||
      sc_session_run(gpu, in, n_in, out_g, 5, &dg) != SC_OK) {
    fprintf(stderr, "attention: %s: %s\n", name, dg.msg);
    return 2;
  }
  static const char *const what[5] = {"o", "lse", "dq", "dk", "dv"};
  /* both devices accumulate in f32 and round each result once: f32 2e-5;
   * bf16 and f16: two roundings of the largest value (2^-8, 2^-11), the
   * tensor-core forward's rounding of P (SHARDC_CUDA_ATTENTION=mma) and
   * the backward's cancellations through D = rowsum(dO o O): 2^-6, 2^-8 */
  double tol = a.dtype == SC_DTYPE_F32 ? 2e-5 : a.dtype == SC_DTYPE_BF16 ? 0x1p-6 : 0x1p-8;
  double err[5], worst = 0;
  char errs[256] = "";
  for (int i = 0; i < 5; i++) {
    const sc_buffer *ob = &full->buffers[full->outputs[i]];
    err[i] = rel_err(ob->dtype, out_g[i].data, out_c[i].data, ob->bytes / (int64_t)sc_dtype_size(ob->dtype));
    worst = err[i] > worst ? err[i] : worst;
    snprintf(errs + strlen(errs), sizeof errs - strlen(errs), "%s%s %.2g", i ? ", " : "", what[i], err[i]);
  }
  double ms_f = time_runs(gpu_fwd, in, n_in - 1, 2, runs), ms_all = time_runs(gpu, in, n_in, 5, runs);
  if (ms_f < 0 || ms_all < 0) return 2;
  double flop = 4.0 * (double)b * (double)h * (double)sq * (double)sq * (double)d * (a.causal ? 0.5 : 1.0);
  double ms_b = ms_all - ms_f;
  int bad = !(worst <= tol);
  printf("attention %s: b %lld h %lld (kv %lld) seq %lld d %lld%s %s: fwd %.3f ms %.2f TFLOP/s, "
         "bwd %.3f ms %.2f TFLOP/s (2.5x the forward's FLOPs); cuda vs cpu max err / max|cpu|: %s "
         "(tolerance %.2g) %s\n",
         name, b, h, hk, sq, d, a.causal ? " causal" : "", dt, ms_f, flop / (ms_f * 1e-3) / 1e12,
         ms_b, 2.5 * flop / (ms_b * 1e-3) / 1e12, errs, tol, bad ? "FAIL" : "ok");
  fflush(stdout);
  for (int i = 0; i < 5; i++) free(data[i]);
  sc_session_destroy(cpu), sc_session_destroy(gpu), sc_session_destroy(gpu_fwd);
  sc_program_destroy(full), sc_program_destroy(fwd);
  return bad;
}

int main(int argc, char **argv) {
  /* test_cuda_attention --compare [--runs N] SHAPE...: tests/gpu/run_all.py's
   * attention check (not a ctest) */
  if (argc > 1 && strcmp(argv[1], "--compare") == 0) {
    int runs = 10, i = 2, rc = 0;
    if (argc > 3 && strcmp(argv[2], "--runs") == 0) runs = atoi(argv[3]), i = 4;
    for (; i < argc; i++) {
      int r = compare_shape(argv[i], runs < 1 ? 1 : runs);
      rc = r > rc ? r : rc;
    }
    return rc;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_problems_refused),
      cmocka_unit_test(test_attention_in_program_source),
      cmocka_unit_test(test_attention_compile_and_emulate),
      cmocka_unit_test(test_attention_steps_on_cuda_device),
      cmocka_unit_test(test_cuda_device_error_between_runs),
      cmocka_unit_test(test_reference_gradient_finite_differences),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}

#else /* !SHARDC_HAVE_CUDA */

SC_TEST_MAIN_SKIPPED("built without NVRTC (SHARDC_CUDA=OFF)")
#endif
