/* cuda_gemm.c — matrix products on the CUDA device (cuda_gemm.h).
 *
 * cuBLASLt's types and constants are repeated here (as the driver's are in
 * cuda_driver.h), so that shardc builds without the toolkit's headers;
 * tests/unit/test_cuda_driver.c checks them against cublasLt.h. */
#define _GNU_SOURCE
#include "runtime/cuda_gemm.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/device_memory.h" /* sc_gemm_spans */
#include "runtime/cpu_gemm.h"
#include "runtime/cublaslt.h"
#include "runtime/device.h"

typedef sc_lt_api lt_api;


typedef struct gemm_entry {
  struct sc_gpu_gemm *e;
  const sc_gemm *g;
  sc_dtype t; /* f32 or bf16 */
  CUdeviceptr a, b, bias, c;
  CUdeviceptr d;  /* where the product goes: c, or act_out when fused */
  CUdeviceptr aux; /* fused with sc_gemm.act_aux: C, written too (GELU_AUX), else 0 */
  CUdeviceptr act_in; /* fused DGELU_TANH: the GELU's input (DGELU's aux input), else 0 */
  CUdeviceptr bgrad; /* fused sc_gemm.bgrad: where the bias gradient goes (BGRADA/B), else 0 */
  bool fused;     /* g->act or g->bgrad applied in the product (cuda_gemm.h) */
  bool fp8;       /* an FP8 matmul (sc_gpu_gemm_add_fp8): a, b are the FP8 copies */
  bool tf32;      /* f32 operands taken as TF32 (sc_gpu_gemm_allow_tf32) */
  sc_gpu_fp8 f8;
  CUdeviceptr scale_a, scale_b; /* an f32 product's scales (sc_gpu_gemm_set_scales), or 0 */
  int64_t bias_numel;
  /* cublaslt */
  sc_lt_desc desc;
  sc_lt_layout la, lb, lc, ld;
  sc_lt_algo algo;
  float alpha, beta;
  bool bias_as_c; /* a full bias: the C operand, beta 1 */
} gemm_entry;

struct sc_gpu_gemm {
  const sc_cu *cu;
  bool host;
  void *lib;
  lt_api lt;
  sc_lt_handle handle;
  CUdeviceptr ws;      /* the workspace: the arena's (set_workspace) or our own */
  size_t ws_bytes;
  bool ws_own;
  float *host_scratch; /* host: sc_host_gemm_bf16's, for the largest bf16 GEMM */
  int64_t host_scratch_numel;
  bool tf32;           /* f32 products added from now on take TF32 operands */
  float *tf32_ab[2];   /* host: A's and B's spans rounded to TF32, for the largest */
  int64_t tf32_numel[2];
  int32_t n, cap;
  gemm_entry *entries;
};

static sc_status lt_check(sc_gpu_gemm *e, sc_lt_status r, const char *call, sc_diag *diag) {
  if (r == 0) return SC_OK;
  const char *text = e->lt.status_string ? e->lt.status_string(r) : NULL;
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cuBLASLt: %s failed: %s (%d)", call,
                     text ? text : "?", (int)r);
}

#define LT(call, name)                                                  \
  do {                                                                  \
    sc_status s_ = lt_check(e, (call), name, diag);                     \
    if (s_ != SC_OK) return s_;                                         \
  } while (0)

static sc_status open_cublaslt(sc_gpu_gemm *e, sc_diag *diag) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                      "libcublasLt.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names && !e->lib; i++)
    e->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!e->lib)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: cuBLASLt (libcublasLt.so.13) cannot be loaded: %s",
                       dlerror());
#define SC_LT_RESOLVE(field, sym, params)                                              \
  if (!(*(void **)&e->lt.field = dlsym(e->lib, sym)))                                  \
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "cuBLASLt lacks %s", sym);
  SC_LT_ENTRY_POINTS(SC_LT_RESOLVE)
#undef SC_LT_RESOLVE
  *(void **)&e->lt.status_string = dlsym(e->lib, "cublasLtGetStatusString");
  LT(e->lt.create(&e->handle), "cublasLtCreate");
  return SC_OK;
}

void sc_gpu_gemm_set_workspace(sc_gpu_gemm *e, CUdeviceptr ws, size_t bytes) {
  if (e->n > 0 || e->ws_own) return; /* planned with the one it has */
  e->ws = ws;
  e->ws_bytes = ws ? bytes : 0;
}

sc_status sc_gpu_gemm_create(const sc_cu *cu, sc_gpu_gemm **out, sc_diag *diag) {
  *out = NULL;
  sc_gpu_gemm *e = sc_calloc(1, sizeof *e);
  if (!e) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  e->cu = cu;
  /* SHARDC_CUDA_GEMM=cublaslt: every product through the emulated library */
  const char *lt = getenv("SHARDC_CUDA_GEMM");
  e->host = cu->emulated && !(lt && !strcmp(lt, "cublaslt"));
  sc_status st = SC_OK;
  if (cu->emulated) { /* the emulated cuBLASLt, for FP8 matmuls (all products without host) */
    sc_lt_emu_api(&e->lt);
    st = lt_check(e, e->lt.create(&e->handle), "cublasLtCreate", diag);
    if (st == SC_OK) sc_lt_emu_bind(e->handle, cu);
  } else {
    st = open_cublaslt(e, diag);
  }
  if (st != SC_OK) {
    sc_gpu_gemm_destroy(e);
    return st;
  }
  *out = e;
  return SC_OK;
}

/* Frees what plan_cublaslt made for x. */
static void unplan(sc_gpu_gemm *e, gemm_entry *x) {
  if (x->desc) e->lt.desc_destroy(x->desc);
  sc_lt_layout *ls[4] = {&x->la, &x->lb, &x->lc, &x->ld};
  for (int k = 0; k < 4; k++) {
    if (*ls[k]) e->lt.layout_destroy(*ls[k]);
    *ls[k] = NULL;
  }
  x->desc = NULL;
}

void sc_gpu_gemm_destroy(sc_gpu_gemm *e) {
  if (!e) return;
  for (int32_t i = 0; i < e->n; i++) unplan(e, &e->entries[i]);
  if (e->ws_own) e->cu->mem_free(e->ws);
  sc_free(e->host_scratch);
  sc_free(e->tf32_ab[0]);
  sc_free(e->tf32_ab[1]);
  if (e->handle) e->lt.destroy(e->handle);
  sc_free(e->entries);
  sc_free(e);
}

const char *sc_gpu_gemm_engine(const sc_gpu_gemm *e) { return e->host ? "host" : "cublaslt"; }

bool sc_gpu_gemm_own_workspace(const sc_gpu_gemm *e) { return e->ws_own; }

void sc_gpu_gemm_allow_tf32(sc_gpu_gemm *e, bool allow) { e->tf32 = allow; }

int32_t sc_gpu_gemm_n_tf32(const sc_gpu_gemm *e) {
  int32_t n = 0;
  for (int32_t i = 0; i < e->n; i++) n += e->entries[i].tf32;
  return n;
}

/* A column-major layout of rows x cols of type (SC_CUDA_R_*) with leading
 * dim ld, batched. */
static sc_status layout(sc_gpu_gemm *e, sc_lt_layout *l, int type, int64_t rows, int64_t cols,
                        int64_t ld, int64_t batch, int64_t stride, sc_diag *diag) {
  LT(e->lt.layout_create(l, type, (uint64_t)rows, (uint64_t)cols, ld > 0 ? ld : 1),
     "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    LT(e->lt.layout_set(*l, SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
       "cublasLtMatrixLayoutSetAttribute");
    LT(e->lt.layout_set(*l, SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                        sizeof stride),
       "cublasLtMatrixLayoutSetAttribute");
  }
  return SC_OK;
}

static int fp8_type(sc_dtype t) {
  return t == SC_DTYPE_F8E5M2 ? SC_CUDA_R_8F_E5M2 : SC_CUDA_R_8F_E4M3;
}

/* The cuBLASLt plan of entry x (cuda_gemm.h: Cᵀ = op(B)ᵀ op(A)ᵀ). */
static sc_status plan_cublaslt(sc_gpu_gemm *e, gemm_entry *x, sc_diag *diag) {
  sc_gemm g8 = sc_gemm_fp8_layout(x->g); /* an FP8 matmul's operands: their own layout */
  const sc_gemm *g = x->fp8 ? &g8 : x->g;
  if (g->batch > INT32_MAX)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "cuBLASLt: batch %lld too large",
                       (long long)g->batch);
  bool full_bias = x->bias && g->bias_full;
  if ((full_bias && g->beta != 0.0f) || g->k == 0)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: a GEMM with %s has no cuBLASLt plan yet",
                       g->k == 0 ? "k = 0" : "both beta and a full bias");
  x->alpha = g->alpha;
  x->beta = full_bias ? 1.0f : g->beta;
  x->bias_as_c = full_bias;
  LT(e->lt.desc_create(&x->desc, x->tf32 ? SC_CUBLAS_COMPUTE_32F_FAST_TF32 : SC_CUBLAS_COMPUTE_32F,
                       SC_CUDA_R_32F),
     "cublasLtMatmulDescCreate");
  int32_t ta = g->trans_b ? SC_CUBLAS_OP_T : SC_CUBLAS_OP_N; /* cuBLAS's A is our B */
  int32_t tb = g->trans_a ? SC_CUBLAS_OP_T : SC_CUBLAS_OP_N;
  LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  uint32_t epi = x->bias && !full_bias ? SC_CUBLASLT_EPILOGUE_BIAS : 0;
  if (x->bgrad) /* cuBLAS's A is our B: BGRADA sums our op(B), BGRADB our op(A) */
    epi = g->bgrad == SC_GEMM_BGRAD_B ? SC_CUBLASLT_EPILOGUE_BGRADA : SC_CUBLASLT_EPILOGUE_BGRADB;
  else if (x->fused)
    epi |= g->act == SC_GEMM_ACT_RELU        ? SC_CUBLASLT_EPILOGUE_RELU
           : g->act == SC_GEMM_ACT_DGELU_TANH ? SC_CUBLASLT_EPILOGUE_DGELU
                                              : SC_CUBLASLT_EPILOGUE_GELU;
  if (x->aux || x->act_in) { /* GELU_AUX: C, the GELU's input, is the aux output, laid out
                              * as D; DGELU: act_in, the GELU's input, its aux input */
    if (g->ldc % 8 || (g->batch > 1 && g->stride_c % 8))
      return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "cuBLASLt: GELU_AUX needs a leading dim and batch stride that are "
                         "multiples of 8 (%lld, %lld)", (long long)g->ldc,
                         (long long)g->stride_c);
    epi |= SC_CUBLASLT_EPILOGUE_AUX;
    void *ap = (void *)(uintptr_t)(x->aux ? x->aux : x->act_in);
    int64_t ald = g->ldc, astride = g->stride_c;
    LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap),
       "EPILOGUE_AUX_POINTER");
    LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof ald),
       "EPILOGUE_AUX_LD");
    if (g->batch > 1)
      LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &astride,
                        sizeof astride),
         "EPILOGUE_AUX_BATCH_STRIDE");
  }
  if (epi)
    LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
  if (x->bgrad || (x->bias && !full_bias)) { /* the bias gradient's output, or the bias */
    void *bp = (void *)(uintptr_t)(x->bgrad ? x->bgrad : x->bias);
    LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp), "BIAS");
  }
  /* column-major: our B [k,n] (or [n,k] transposed) is cuBLAS's A; bf16
   * operands (the bias too: its type defaults to D's) with f32 compute */
  int type = x->t == SC_DTYPE_BF16 ? SC_CUDA_R_16BF : SC_CUDA_R_32F;
  int type_a = x->fp8 ? fp8_type(x->f8.type_b) : type; /* cuBLAS's A is our B */
  int type_b = x->fp8 ? fp8_type(x->f8.type_a) : type;
  if (x->fp8) { /* the per-tensor scales multiply cuBLAS's A (our B) and B (our A) */
    void *sa = (void *)(uintptr_t)x->f8.scale_b, *sb = (void *)(uintptr_t)x->f8.scale_a;
    if (sa) LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
               "A_SCALE_POINTER");
    if (sb) LT(e->lt.desc_set(x->desc, SC_CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
               "B_SCALE_POINTER");
  }
  sc_status st =
      layout(e, &x->la, type_a, g->trans_b ? g->k : g->n, g->trans_b ? g->n : g->k, g->ldb,
             g->batch, g->stride_b, diag);
  if (st == SC_OK)
    st = layout(e, &x->lb, type_b, g->trans_a ? g->m : g->k, g->trans_a ? g->k : g->m, g->lda,
                g->batch, g->stride_a, diag);
  /* a full bias is [m, n] for every batch entry, or one per entry */
  int64_t bias_stride = x->bias_numel == g->m * g->n ? 0 : g->m * g->n;
  if (st == SC_OK)
    st = layout(e, &x->lc, type, g->n, g->m, full_bias ? g->n : g->ldc, g->batch,
                full_bias ? bias_stride : g->stride_c, diag);
  if (st == SC_OK)
    st = layout(e, &x->ld, type, g->n, g->m, g->ldc, g->batch, g->stride_c, diag);
  if (st != SC_OK) return st;
  sc_lt_pref pref = NULL;
  LT(e->lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = e->ws_bytes;
  sc_lt_status r = e->lt.pref_set(pref, SC_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                    sizeof ws);
  sc_lt_heuristic res;
  memset(&res, 0, sizeof res);
  int found = 0;
  if (r == 0)
    r = e->lt.heuristic(e->handle, x->desc, x->la, x->lb, x->lc, x->ld, pref, 1, &res, &found);
  e->lt.pref_destroy(pref);
  LT(r, "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuBLASLt has no algorithm for the GEMM %lld x m%lld n%lld k%lld",
                       (long long)g->batch, (long long)g->m, (long long)g->n, (long long)g->k);
  x->algo = res.algo;
  return SC_OK;
}

/* A new entry of e (counted at once: destroy frees what a failed plan
 * made), or NULL when out of memory. */
static gemm_entry *new_entry(sc_gpu_gemm *e, sc_diag *diag) {
  if (e->n == e->cap) {
    int32_t cap = e->cap ? 2 * e->cap : 16;
    gemm_entry *n = sc_realloc(e->entries, (size_t)cap * sizeof *n);
    if (!n) {
      sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      return NULL;
    }
    e->entries = n;
    e->cap = cap;
  }
  gemm_entry *x = &e->entries[e->n++];
  memset(x, 0, sizeof *x);
  return x;
}

/* The workspace, on a GPU: the arena's, else one of our own. */
static sc_status need_workspace(sc_gpu_gemm *e, sc_diag *diag) {
  if (e->host || e->ws) return SC_OK;
  CUresult r = e->cu->mem_alloc(&e->ws, (size_t)SC_GEMM_WORKSPACE_BYTES);
  sc_status st = sc_cu_check(e->cu, r, "cuMemAlloc", "the cuBLASLt workspace", diag);
  if (st != SC_OK) return st;
  e->ws_bytes = (size_t)SC_GEMM_WORKSPACE_BYTES;
  e->ws_own = true;
  return SC_OK;
}

/* Why cuBLASLt's FP8 matmul cannot compute g on this device, or NULL. */
static const char *fp8_refusal(const sc_gemm *g, sc_dtype t, const sc_gpu_fp8 *f, int sm) {
  if (sm < 89) return "FP8 matmuls need sm_89 or later";
  sc_gemm v = sc_gemm_fp8_layout(g);
  return sc_gemm_fp8_refusal(&v, t, f->type_a, f->type_b);
}

sc_status sc_gpu_gemm_add_fp8(sc_gpu_gemm *e, const sc_gemm *g, sc_dtype t,
                              const sc_gpu_fp8 *f, int sm, CUdeviceptr c, int32_t *id,
                              const char **why, sc_diag *diag) {
  *id = -1;
  *why = fp8_refusal(g, t, f, sm);
  if (*why) return SC_OK;
  if (g->batch > INT32_MAX || g->k == 0) {
    *why = "a batch or k cuBLASLt does not take";
    return SC_OK;
  }
  sc_status st = need_workspace(e, diag);
  if (st != SC_OK) return st;
  gemm_entry *x = new_entry(e, diag);
  if (!x) return diag->status;
  *x = (gemm_entry){.e = e, .g = g, .t = t, .a = f->a, .b = f->b, .c = c, .d = c,
                    .fp8 = true, .f8 = *f};
  st = plan_cublaslt(e, x, diag);
  if (st == SC_ERR_UNSUPPORTED || st == SC_ERR_IO) { /* refused by cuBLASLt: the f32 path */
    unplan(e, x);
    e->n--;
    *why = "cuBLASLt has no FP8 algorithm for it";
    sc_diag_clear(diag);
    return SC_OK;
  }
  if (st == SC_OK) *id = e->n - 1;
  return st;
}

/* A host scratch *p of *numel floats grown to hold need (kept when it
 * does); false when out of memory, *p unchanged. */
static bool grow_scratch(float **p, int64_t *numel, int64_t need) {
  if (need <= *numel) return true;
  float *s = sc_realloc(*p, (size_t)need * sizeof *s);
  if (!s) return false;
  *p = s;
  *numel = need;
  return true;
}

sc_status sc_gpu_gemm_add(sc_gpu_gemm *e, const sc_gemm *g, sc_dtype t, CUdeviceptr a,
                          CUdeviceptr b, CUdeviceptr bias, int64_t bias_numel, CUdeviceptr c,
                          CUdeviceptr act_out, CUdeviceptr act_in, CUdeviceptr bgrad,
                          int32_t *id, bool *fused, sc_diag *diag) {
  if (t != SC_DTYPE_F32 && t != SC_DTYPE_BF16)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: a GEMM on %s (f32 and bf16 only)", sc_dtype_name(t));
  int64_t need = t == SC_DTYPE_BF16 && e->host
                     ? sc_gemm_bf16_scratch_numel(g, bias_numel, sc_gemm_engine_get())
                     : 0;
  if (!grow_scratch(&e->host_scratch, &e->host_scratch_numel, need))
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  bool tf32 = e->tf32 && t == SC_DTYPE_F32;
  if (tf32 && e->host) { /* room for A's and B's rounded copies */
    int64_t span[3] = {0, 0, 0};
    sc_gemm_spans(g, span);
    for (int k = 0; k < 2; k++)
      if (!grow_scratch(&e->tf32_ab[k], &e->tf32_numel[k], span[k]))
        return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  gemm_entry *x = new_entry(e, diag);
  if (!x) return diag->status;
  /* the activation goes into the product where C is not read (beta 0, no
   * full bias as the C operand); with act_aux C is written too: GELU_AUX */
  bool fuse = g->act > SC_GEMM_ACT_NONE && g->act < SC_GEMM_ACT_COUNT && act_out &&
              g->beta == 0.0f && !(bias && g->bias_full) &&
              (!g->act_aux || g->act == SC_GEMM_ACT_GELU_TANH) &&
              (g->act != SC_GEMM_ACT_DGELU_TANH || (act_in && !bias && !g->act_aux));
  /* the bias gradient of one operand (sc_gemm.bgrad): BGRADA or BGRADB */
  bool fuse_bgrad = g->bgrad > SC_GEMM_BGRAD_NONE && g->bgrad < SC_GEMM_BGRAD_COUNT && bgrad &&
                    g->act == SC_GEMM_ACT_NONE && !bias && g->batch == 1;
  *x = (gemm_entry){.e = e, .g = g, .t = t, .a = a, .b = b, .bias = bias, .c = c,
                    .d = fuse ? act_out : c, .aux = fuse && g->act_aux ? c : 0,
                    .act_in = fuse && g->act == SC_GEMM_ACT_DGELU_TANH ? act_in : 0,
                    .bgrad = fuse_bgrad ? bgrad : 0, .fused = fuse || fuse_bgrad,
                    .tf32 = tf32, .bias_numel = bias_numel};
  fuse = x->fused;
  *id = e->n - 1;
  *fused = fuse;
  if (e->host) return SC_OK;
  sc_status st = need_workspace(e, diag);
  if (st == SC_OK) st = plan_cublaslt(e, x, diag);
  if (st != SC_OK && fuse) { /* no algorithm with the epilogue: plan it without */
    unplan(e, x);
    x->fused = *fused = false;
    x->d = c;
    x->aux = x->act_in = x->bgrad = 0;
    sc_diag_clear(diag);
    st = plan_cublaslt(e, x, diag);
  }
  return st;
}

sc_status sc_gpu_gemm_set_scales(sc_gpu_gemm *e, int32_t id, CUdeviceptr scale_a,
                                 CUdeviceptr scale_b, sc_diag *diag) {
  gemm_entry *x = &e->entries[id];
  if (!e->host || x->fp8 || x->t != SC_DTYPE_F32 || x->fused || !scale_a || !scale_b)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: an FP8 product whose GEMM step applies the scales "
                       "(sc_gemm.scaled) runs as a cuBLASLt FP8 matmul only (%s)",
                       e->host ? "not an f32 product" : "cuBLASLt takes scale pointers "
                       "for FP8 operands only");
  x->scale_a = scale_a;
  x->scale_b = scale_b;
  return SC_OK;
}

/* The activations as cuBLASLt's epilogues compute them (in f32); DGELU's
 * factor gelu'(x) at the GELU's input x. */
static float host_act(sc_gemm_act a, float v) {
  if (a == SC_GEMM_ACT_RELU) return v > 0.0f ? v : 0.0f;
  return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

static float host_dgelu(float x) {
  float th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608f *
                                  (1.0f + 3.0f * 0.044715f * x * x);
}

/* Operand k (0: A, 1: B) of entry x rounded to TF32 in the engine's
 * scratch: what tensor cores take from f32 operands (the sum stays f32,
 * the bias is added in f32, as cuBLASLt's epilogue adds it). */
static const float *to_tf32(const gemm_entry *x, int k) {
  int64_t span[3] = {0, 0, 0};
  sc_gemm_spans(x->g, span);
  const float *in = (const float *)(uintptr_t)(k == 0 ? x->a : x->b);
  float *out = x->e->tf32_ab[k];
  for (int64_t i = 0; i < span[k]; i++) out[i] = sc_f32_to_tf32(in[i]);
  return out;
}

static void host_gemm(void *ud) {
  const gemm_entry *x = ud;
  const sc_gemm *g = x->g;
  CUdeviceptr p = x->aux ? x->aux : x->d; /* the product: into C when kept */
  if (x->t == SC_DTYPE_BF16)
    sc_host_gemm_bf16(g, (const uint16_t *)(uintptr_t)x->a, (const uint16_t *)(uintptr_t)x->b,
                      x->bias ? (const uint16_t *)(uintptr_t)x->bias : NULL, x->bias_numel,
                      (uint16_t *)(uintptr_t)p, NULL, x->e->host_scratch, NULL);
  else
    sc_host_gemm_f32(g, x->tf32 ? to_tf32(x, 0) : (const float *)(uintptr_t)x->a,
                     x->tf32 ? to_tf32(x, 1) : (const float *)(uintptr_t)x->b,
                     x->bias ? (const float *)(uintptr_t)x->bias : NULL, x->bias_numel,
                     (float *)(uintptr_t)p, NULL, NULL, NULL, NULL);
  if (x->scale_a) /* f32: the factor rounded once, multiplied into the sum once */
    sc_host_gemm_scale(g, (float *)(uintptr_t)p,
                       *(const float *)(uintptr_t)x->scale_a * *(const float *)(uintptr_t)x->scale_b);
  if (x->bgrad) /* as the emulated cuBLASLt's BGRADA/BGRADB */
    sc_host_gemm_bgrad(g, g->bgrad, (const void *)(uintptr_t)(g->bgrad == SC_GEMM_BGRAD_B ? x->b : x->a),
                       x->t == SC_DTYPE_BF16, (void *)(uintptr_t)x->bgrad);
  if (!x->fused || x->bgrad) return;
  /* the activation over D's m x n elements of each batch entry, from the
   * product into D (in bf16 on the rounded product, as the epilogue kernel
   * reads C: cuBLASLt rounds once, after the activation) */
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->m; i++) {
      int64_t row = b * g->stride_c + i * g->ldc;
      if (x->t == SC_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)(uintptr_t)p + row;
        const uint16_t *in = (const uint16_t *)(uintptr_t)x->act_in + row;
        uint16_t *d = (uint16_t *)(uintptr_t)x->d + row;
        for (int64_t j = 0; j < g->n; j++)
          d[j] = sc_f32_to_bf16(x->act_in ? sc_bf16_to_f32(s[j]) * host_dgelu(sc_bf16_to_f32(in[j]))
                                          : host_act(g->act, sc_bf16_to_f32(s[j])));
      } else {
        const float *s = (const float *)(uintptr_t)p + row;
        const float *in = (const float *)(uintptr_t)x->act_in + row;
        float *d = (float *)(uintptr_t)x->d + row;
        for (int64_t j = 0; j < g->n; j++)
          d[j] = x->act_in ? s[j] * host_dgelu(in[j]) : host_act(g->act, s[j]);
      }
    }
}

sc_status sc_gpu_gemm_enqueue(sc_gpu_gemm *e, int32_t id, CUstream s, sc_diag *diag) {
  gemm_entry *x = &e->entries[id];
  const sc_gemm *g = x->g;
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0) return SC_OK;
  if (e->host && !x->fp8) {
    if (e->cu->host_access) { /* the fake driver's race check: what it touches */
      int64_t span[3] = {0, 0, 0};
      sc_gemm_spans(g, span); /* checked at prepare (sc_gemm_problem) */
      size_t es = sc_dtype_size(x->t);
      e->cu->host_access((const void *)(uintptr_t)x->a, (size_t)span[0] * es, 0);
      e->cu->host_access((const void *)(uintptr_t)x->b, (size_t)span[1] * es, 0);
      if (x->bias)
        e->cu->host_access((const void *)(uintptr_t)x->bias, (size_t)x->bias_numel * es, 0);
      if (x->scale_a) {
        e->cu->host_access((const void *)(uintptr_t)x->scale_a, sizeof(float), 0);
        e->cu->host_access((const void *)(uintptr_t)x->scale_b, sizeof(float), 0);
      }
      e->cu->host_access((const void *)(uintptr_t)x->d, (size_t)span[2] * es, 1);
      if (x->aux) e->cu->host_access((const void *)(uintptr_t)x->aux, (size_t)span[2] * es, 1);
      if (x->act_in)
        e->cu->host_access((const void *)(uintptr_t)x->act_in, (size_t)span[2] * es, 0);
      if (x->bgrad)
        e->cu->host_access((const void *)(uintptr_t)x->bgrad,
                           (size_t)(g->bgrad == SC_GEMM_BGRAD_B ? g->n : g->m) * es, 1);
    }
    return sc_cu_check(e->cu, e->cu->launch_host_func(s, host_gemm, x), "cuLaunchHostFunc",
                       "the host GEMM", diag);
  }
  /* beta is 0 when fused: C is not read, D is act_out */
  const void *cop = (const void *)(uintptr_t)(x->bias_as_c ? x->bias : x->d);
  LT(e->lt.matmul(e->handle, x->desc, &x->alpha, (const void *)(uintptr_t)x->b, x->la,
                  (const void *)(uintptr_t)x->a, x->lb, &x->beta, cop, x->lc,
                  (void *)(uintptr_t)x->d, x->ld, &x->algo, (void *)(uintptr_t)e->ws,
                  e->ws_bytes, s),
     "cublasLtMatmul");
  return SC_OK;
}
