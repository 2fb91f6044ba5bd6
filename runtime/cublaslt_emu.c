/* cublaslt_emu.c — the emulated GPU's cuBLASLt (cublaslt.h: sc_lt_emu_api).
 *
 * The calls of cublasLt.h that runtime/cuda_gemm.c makes, with the
 * library's semantics where the runtime relies on them: column-major
 * layouts (rows, cols, leading dim, strided batches), D = alpha ·
 * scale_a · scale_b · op(A) op(B) + beta · C with f32 compute, and the
 * checks that make the real library refuse a call. A matmul is a host
 * function on the stream (the fake driver runs it in stream order and in
 * graph replays); what it computes is kept in the matmul descriptor, which
 * a GEMM owns for the session, so a captured graph replays it.
 *
 * Refused as cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED, from the
 * heuristic and the matmul alike): an FP8 operand (CUDA_R_8F_E4M3 or
 * _E5M2) with the other operand not FP8 or both E5M2; an FP8 matmul that
 * is not "TN" (TRANSA = T, TRANSB = N), whose A, B or D leading dim or k
 * is not a multiple of 16, or whose D is not f32 or bf16; D, C scale or amax
 * pointers; an epilogue on FP8 operands; an epilogue other than BIAS,
 * RELU, GELU, GELU_AUX and their BIAS forms, DGELU, BGRADA and BGRADB;
 * BIAS, BGRADA or BGRADB without a bias pointer (INVALID_VALUE); BGRADA or
 * BGRADB on a batched product (the library's batched bias gradient is not
 * assumed); GELU_AUX or DGELU without an aux pointer, or with an aux leading dim below D's
 * rows or not a multiple of 8, or (batched) an aux batch stride that is
 * not a multiple of 8. Shapes that do not agree with the layouts are
 * CUBLAS_STATUS_INVALID_VALUE.
 *
 * The epilogues as the library computes them, in f32 on the finished sum:
 * v = alpha · sum + beta · C + bias[row of D] (the bias of D's type), aux
 * = v (GELU_AUX: the GELU's input, of D's type, at aux + batch · stride +
 * col · ld), D = act(v) with act ReLU or the tanh GELU, 0.5 v (1 +
 * tanh(0.7978845608 (v + 0.044715 v³))); DGELU: D = v · gelu'(aux) (aux
 * the GELU's input, read); a bf16 D and aux are rounded once, from those
 * f32 values. BGRADA (BGRADB): the bias pointer, of D's type, receives
 * the sums over k of op(A) (op(B)) as stored (f32 values not rounded to
 * TF32), one per row (column) of D, summed in f32 in order of k and a bf16
 * one rounded once; D is the plain product.
 *
 * Exact where the GPU is exact: FP8 and bf16 operands are decoded to f32
 * (exact), the products and sums are f32's (sc_host_gemm_f32, the CPU
 * device's GEMM), the scales multiply the finished sum once (alpha ·
 * scale_a · scale_b), and a bf16 D is rounded once, at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cublaslt.h"
#include "runtime/device.h"

struct cublasLtContext {
  const sc_cu *cu;
};

struct cublasLtMatrixLayoutOpaque {
  int type;
  int64_t rows, cols, ld;
  int32_t batch;
  int64_t stride;
};

struct cublasLtMatmulPreferenceOpaque {
  uint64_t ws_bytes;
};

/* the operands of the last matmul made with a descriptor */
typedef struct emu_call {
  struct cublasLtMatrixLayoutOpaque la, lb, ld;
  const void *a, *b;
  void *d;
  float alpha, beta;
  sc_gemm g;            /* the row-major product: Dᵀ = op(B)ᵀ op(A)ᵀ */
  int64_t span[3];      /* sc_gemm_spans of g: what B, A and D cover */
} emu_call;

struct cublasLtMatmulDescOpaque {
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;     /* BIAS_POINTER: D's type */
  void *aux;            /* EPILOGUE_AUX_POINTER: D's type (GELU_AUX) */
  int64_t aux_ld, aux_stride;
  const float *scale_a, *scale_b;
  const void *scale_d, *amax_d;
  int8_t fast_accum;    /* accepted; products are summed in f32 either way */
  bool tf32;            /* CUBLAS_COMPUTE_32F_FAST_TF32: f32 operands rounded to TF32 */
  emu_call call;
  float *wa, *wb, *wd;  /* decoded A, B and a bf16 D's f32 product */
  int64_t na, nb, nd;
};

static bool is_fp8(int t) { return t == SC_CUDA_R_8F_E4M3 || t == SC_CUDA_R_8F_E5M2; }

static size_t type_size(int t) {
  return t == SC_CUDA_R_32F ? 4 : t == SC_CUDA_R_16BF ? 2 : 1;
}

static sc_lt_status emu_create(sc_lt_handle *h) {
  *h = sc_calloc(1, sizeof **h);
  return *h ? 0 : SC_CUBLAS_STATUS_NOT_SUPPORTED;
}

static sc_lt_status emu_destroy(sc_lt_handle h) {
  sc_free(h);
  return 0;
}

static sc_lt_status emu_desc_create(sc_lt_desc *d, int compute, int scale_type) {
  if ((compute != SC_CUBLAS_COMPUTE_32F && compute != SC_CUBLAS_COMPUTE_32F_FAST_TF32) ||
      scale_type != SC_CUDA_R_32F)
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  *d = sc_calloc(1, sizeof **d);
  if (!*d) return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  (*d)->tf32 = compute == SC_CUBLAS_COMPUTE_32F_FAST_TF32;
  (*d)->transa = (*d)->transb = SC_CUBLAS_OP_N;
  (*d)->epilogue = SC_CUBLASLT_EPILOGUE_DEFAULT;
  return 0;
}

static sc_lt_status emu_desc_destroy(sc_lt_desc d) {
  if (d) {
    sc_free(d->wa);
    sc_free(d->wb);
    sc_free(d->wd);
  }
  sc_free(d);
  return 0;
}

static sc_lt_status emu_desc_set(sc_lt_desc d, int attr, const void *buf, size_t n) {
  switch (attr) {
  case SC_CUBLASLT_MATMUL_DESC_TRANSA:
  case SC_CUBLASLT_MATMUL_DESC_TRANSB:
    if (n != sizeof(int32_t)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    memcpy(attr == SC_CUBLASLT_MATMUL_DESC_TRANSA ? &d->transa : &d->transb, buf, n);
    return 0;
  case SC_CUBLASLT_MATMUL_DESC_EPILOGUE:
    if (n != sizeof(uint32_t)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&d->epilogue, buf, n);
    return 0;
  case SC_CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
  case SC_CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
  case SC_CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
  case SC_CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: {
    if (n != sizeof(void *)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    const void *p;
    memcpy(&p, buf, n);
    if (attr == SC_CUBLASLT_MATMUL_DESC_A_SCALE_POINTER) d->scale_a = p;
    else if (attr == SC_CUBLASLT_MATMUL_DESC_B_SCALE_POINTER) d->scale_b = p;
    else if (attr == SC_CUBLASLT_MATMUL_DESC_D_SCALE_POINTER) d->scale_d = p;
    else d->amax_d = p;
    return 0;
  }
  case SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER:
  case SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    if (n != sizeof(void *)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    if (attr == SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER) memcpy(&d->bias, buf, n);
    else memcpy(&d->aux, buf, n);
    return 0;
  case SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
  case SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
    if (n != sizeof(int64_t)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    memcpy(attr == SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD ? &d->aux_ld : &d->aux_stride, buf, n);
    return 0;
  case SC_CUBLASLT_MATMUL_DESC_FAST_ACCUM:
    if (n != sizeof(int8_t)) return SC_CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&d->fast_accum, buf, n);
    return 0;
  default:
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

static sc_lt_status emu_layout_create(sc_lt_layout *l, int type, uint64_t rows, uint64_t cols,
                                      int64_t ld) {
  if (type != SC_CUDA_R_32F && type != SC_CUDA_R_16BF && !is_fp8(type))
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (rows > INT64_MAX || cols > INT64_MAX || ld < (int64_t)(rows > 0 ? rows : 1))
    return SC_CUBLAS_STATUS_INVALID_VALUE;
  *l = sc_calloc(1, sizeof **l);
  if (!*l) return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  **l = (struct cublasLtMatrixLayoutOpaque){.type = type, .rows = (int64_t)rows,
                                            .cols = (int64_t)cols, .ld = ld, .batch = 1};
  return 0;
}

static sc_lt_status emu_layout_destroy(sc_lt_layout l) {
  sc_free(l);
  return 0;
}

static sc_lt_status emu_layout_set(sc_lt_layout l, int attr, const void *buf, size_t n) {
  if (attr == SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == sizeof(int32_t)) {
    memcpy(&l->batch, buf, n);
    return l->batch >= 1 ? 0 : SC_CUBLAS_STATUS_INVALID_VALUE;
  }
  if (attr == SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == sizeof(int64_t)) {
    memcpy(&l->stride, buf, n);
    return 0;
  }
  return SC_CUBLAS_STATUS_NOT_SUPPORTED;
}

static sc_lt_status emu_pref_create(sc_lt_pref *p) {
  *p = sc_calloc(1, sizeof **p);
  return *p ? 0 : SC_CUBLAS_STATUS_NOT_SUPPORTED;
}

static sc_lt_status emu_pref_destroy(sc_lt_pref p) {
  sc_free(p);
  return 0;
}

static sc_lt_status emu_pref_set(sc_lt_pref p, int attr, const void *buf, size_t n) {
  if (attr != SC_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || n != sizeof(uint64_t))
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  memcpy(&p->ws_bytes, buf, n);
  return 0;
}

/* The epilogue's bits without BIAS (0: none), or -1 for one the emulated
 * library does not compute. */
static int epilogue_kind(uint32_t e) {
  if (e == 0 || e == SC_CUBLASLT_EPILOGUE_DEFAULT) return 0;
  if (e == SC_CUBLASLT_EPILOGUE_DGELU || e == SC_CUBLASLT_EPILOGUE_BGRADA ||
      e == SC_CUBLASLT_EPILOGUE_BGRADB)
    return (int)e; /* no BIAS forms (DGELU_BGRAD: not emulated) */
  e &= ~(uint32_t)SC_CUBLASLT_EPILOGUE_BIAS;
  if (e == 0 || e == SC_CUBLASLT_EPILOGUE_RELU || e == SC_CUBLASLT_EPILOGUE_GELU ||
      e == (SC_CUBLASLT_EPILOGUE_GELU | SC_CUBLASLT_EPILOGUE_AUX))
    return (int)e;
  return -1;
}

static bool is_bgrad(int k) {
  return k == SC_CUBLASLT_EPILOGUE_BGRADA || k == SC_CUBLASLT_EPILOGUE_BGRADB;
}

/* Whether the library takes d's epilogue for D's layout dd. */
static sc_lt_status check_epilogue(const struct cublasLtMatmulDescOpaque *d,
                                   const struct cublasLtMatrixLayoutOpaque *dd) {
  int k = epilogue_kind(d->epilogue);
  if (k < 0) return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->epilogue != SC_CUBLASLT_EPILOGUE_DEFAULT && (d->epilogue & SC_CUBLASLT_EPILOGUE_BIAS) &&
      !d->bias)
    return SC_CUBLAS_STATUS_INVALID_VALUE;
  if (is_bgrad(k) && !d->bias) return SC_CUBLAS_STATUS_INVALID_VALUE;
  if (is_bgrad(k) && dd->batch > 1) return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (k & SC_CUBLASLT_EPILOGUE_AUX) {
    if (!d->aux || d->aux_ld < dd->rows || d->aux_ld % 8 ||
        (dd->batch > 1 && d->aux_stride % 8))
      return SC_CUBLAS_STATUS_INVALID_VALUE;
  }
  return 0;
}

/* Whether cuBLASLt would run D = op(A) op(B) (+ C) as described; on
 * success *g is the row-major product it computes. */
static sc_lt_status check(const struct cublasLtMatmulDescOpaque *d, sc_lt_layout a,
                          sc_lt_layout b, sc_lt_layout c, sc_lt_layout dd, sc_gemm *g) {
  bool ta = d->transa == SC_CUBLAS_OP_T, tb = d->transb == SC_CUBLAS_OP_T;
  if ((d->transa != SC_CUBLAS_OP_N && !ta) || (d->transb != SC_CUBLAS_OP_N && !tb))
    return SC_CUBLAS_STATUS_INVALID_VALUE;
  int64_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
  int64_t kb = tb ? b->cols : b->rows, n = tb ? b->rows : b->cols;
  if (kb != k || dd->rows != m || dd->cols != n || c->rows != m || c->cols != n ||
      c->type != dd->type || a->batch != b->batch || a->batch != dd->batch ||
      c->batch != dd->batch || c->ld != dd->ld)
    return SC_CUBLAS_STATUS_INVALID_VALUE;
  sc_lt_status r = check_epilogue(d, dd);
  if (r != 0) return r;
  if (d->epilogue != SC_CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != 0 &&
      (is_fp8(a->type) || is_fp8(b->type)))
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->scale_d || d->amax_d) return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (dd->type != SC_CUDA_R_32F && dd->type != SC_CUDA_R_16BF)
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  if (is_fp8(a->type) || is_fp8(b->type)) {
    if (!is_fp8(a->type) || !is_fp8(b->type) ||
        (a->type == SC_CUDA_R_8F_E5M2 && b->type == SC_CUDA_R_8F_E5M2))
      return SC_CUBLAS_STATUS_NOT_SUPPORTED;
    if (!ta || tb || a->ld % 16 || b->ld % 16 || dd->ld % 16 || k % 16) /* "TN" only */
      return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  } else if (a->type != b->type || a->type != dd->type || d->scale_a || d->scale_b) {
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  }
  /* column-major D (m x n) is row-major Dᵀ (n x m) = op(B)ᵀ op(A)ᵀ */
  memset(g, 0, sizeof *g);
  g->a = g->b = g->c = g->bias = g->act_out = -1;
  g->trans_a = tb, g->trans_b = ta;
  g->batch = dd->batch, g->m = n, g->n = m, g->k = k;
  g->lda = b->ld, g->ldb = a->ld, g->ldc = dd->ld;
  g->stride_a = b->stride, g->stride_b = a->stride, g->stride_c = dd->stride;
  g->alpha = 1.0f;
  return 0;
}

static sc_lt_status emu_heuristic(sc_lt_handle h, sc_lt_desc d, sc_lt_layout a, sc_lt_layout b,
                                  sc_lt_layout c, sc_lt_layout dd, sc_lt_pref p, int n,
                                  sc_lt_heuristic *out, int *found) {
  (void)h, (void)p;
  sc_gemm g;
  *found = 0;
  sc_lt_status r = check(d, a, b, c, dd, &g);
  if (r != 0) return r;
  if (n >= 1) {
    memset(out, 0, sizeof *out);
    out->wavesCount = 1.0f;
    *found = 1;
  }
  return 0;
}

/* x's span of n elements of type t, as f32 in *w (grown to n); f32 rounded
 * to TF32 (sc_f32_to_tf32) where tf32. */
static const float *widen(int t, const void *x, int64_t n, bool tf32, float **w, int64_t *cap) {
  if (t == SC_CUDA_R_32F && !tf32) return x;
  if (n > *cap) {
    float *q = sc_realloc(*w, (size_t)n * sizeof *q);
    if (!q) return NULL;
    *w = q;
    *cap = n;
  }
  float *o = *w;
  if (t == SC_CUDA_R_32F) {
    const float *s = x;
    for (int64_t i = 0; i < n; i++) o[i] = sc_f32_to_tf32(s[i]);
  } else if (t == SC_CUDA_R_16BF) {
    const uint16_t *s = x;
    for (int64_t i = 0; i < n; i++) o[i] = sc_bf16_to_f32(s[i]);
  } else {
    sc_dtype dt = t == SC_CUDA_R_8F_E4M3 ? SC_DTYPE_F8E4M3FN : SC_DTYPE_F8E5M2;
    float table[256];
    for (int c = 0; c < 256; c++) table[c] = sc_narrow_decode(dt, (uint8_t)c);
    const uint8_t *s = x;
    for (int64_t i = 0; i < n; i++) o[i] = table[s[i]];
  }
  return o;
}

/* The tanh GELU as the library's epilogue computes it, in f32, and its
 * derivative (DGELU). */
static float gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

static float dgelu(float v) {
  float th = tanhf(0.7978845608f * (v + 0.044715f * v * v * v));
  return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * 0.7978845608f *
                                  (1.0f + 3.0f * 0.044715f * v * v);
}

/* d's epilogue on the finished f32 product D (row-major g: D's rows of
 * cuBLAS's column-major D are g's columns): the bias, the aux output, the
 * activation. */
static void epilogue(const struct cublasLtMatmulDescOpaque *d, const sc_gemm *g, int type,
                     float *D) {
  int k = epilogue_kind(d->epilogue);
  bool bias = k >= 0 && d->epilogue != SC_CUBLASLT_EPILOGUE_DEFAULT &&
              (d->epilogue & SC_CUBLASLT_EPILOGUE_BIAS);
  if ((k <= 0 || is_bgrad(k)) && !bias) return;
  bool bf16 = type == SC_CUDA_R_16BF;
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        float *v = &D[b * g->stride_c + i * g->ldc + j];
        if (bias) *v += bf16 ? sc_bf16_to_f32(((const uint16_t *)d->bias)[j])
                             : ((const float *)d->bias)[j];
        int64_t at = b * d->aux_stride + i * d->aux_ld + j;
        if (k == SC_CUBLASLT_EPILOGUE_DGELU) { /* the aux input: GELU's input */
          *v *= dgelu(bf16 ? sc_bf16_to_f32(((const uint16_t *)d->aux)[at])
                           : ((const float *)d->aux)[at]);
          continue;
        }
        if (k & SC_CUBLASLT_EPILOGUE_AUX) { /* GELU_AUX's output: GELU's input */
          if (bf16) ((uint16_t *)d->aux)[at] = sc_f32_to_bf16(*v);
          else ((float *)d->aux)[at] = *v;
        }
        if (k & SC_CUBLASLT_EPILOGUE_RELU) *v = *v > 0.0f ? *v : 0.0f;
        else if (k & SC_CUBLASLT_EPILOGUE_GELU) *v = gelu(*v);
      }
}

static void emu_run(void *ud) {
  struct cublasLtMatmulDescOpaque *d = ud;
  emu_call *x = &d->call;
  sc_gemm g = x->g;
  /* alpha · scale_a · scale_b multiplies the finished f32 sum, once, as the
   * library's epilogue does (the engine applies its alpha to each block of
   * k it sums: k > 256 would round more often) */
  float scale = x->alpha * (d->scale_a ? *d->scale_a : 1.0f) * (d->scale_b ? *d->scale_b : 1.0f);
  bool after = scale != x->alpha && x->beta == 0.0f;
  g.alpha = after ? 1.0f : scale;
  g.beta = x->beta;
  const float *A = widen(x->lb.type, x->b, x->span[0], d->tf32, &d->wb, &d->nb); /* Dᵀ's A is B */
  const float *B = widen(x->la.type, x->a, x->span[1], d->tf32, &d->wa, &d->na);
  bool f32 = x->ld.type == SC_CUDA_R_32F;
  float *D = f32 ? x->d : NULL;
  if (!f32 && x->span[2] > d->nd) {
    float *q = sc_realloc(d->wd, (size_t)x->span[2] * sizeof *q);
    if (q) d->wd = q, d->nd = x->span[2];
  }
  if (!f32 && x->span[2] <= d->nd) D = d->wd;
  if (!A || !B || !D) return; /* out of host memory: D is left as it was */
  sc_host_gemm_f32(&g, A, B, NULL, 0, D, NULL, NULL, NULL, NULL);
  if (after) sc_host_gemm_scale(&g, D, scale);
  epilogue(d, &g, x->ld.type, D);
  if (is_bgrad(epilogue_kind(d->epilogue))) /* cuBLAS's A is g's B */
    sc_host_gemm_bgrad(&g, d->epilogue == SC_CUBLASLT_EPILOGUE_BGRADA ? SC_GEMM_BGRAD_B
                                                                      : SC_GEMM_BGRAD_A,
                       d->epilogue == SC_CUBLASLT_EPILOGUE_BGRADA ? x->a : x->b,
                       x->ld.type == SC_CUDA_R_16BF, (void *)(uintptr_t)d->bias);
  if (f32) return;
  uint16_t *o = x->d; /* only D's m x n elements of each batch entry */
  for (int64_t b = 0; b < g.batch; b++)
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++) {
        int64_t at = b * g.stride_c + i * g.ldc + j;
        o[at] = sc_f32_to_bf16(D[at]);
      }
}

static sc_lt_status emu_matmul(sc_lt_handle h, sc_lt_desc d, const void *alpha, const void *a,
                               sc_lt_layout al, const void *b, sc_lt_layout bl,
                               const void *beta, const void *c, sc_lt_layout cl, void *dd,
                               sc_lt_layout dl, const sc_lt_algo *algo, void *ws,
                               size_t ws_bytes, CUstream s) {
  (void)algo, (void)ws, (void)ws_bytes;
  if (!h->cu) return SC_CUBLAS_STATUS_NOT_SUPPORTED; /* sc_lt_emu_bind first */
  emu_call x;
  memset(&x, 0, sizeof x);
  sc_lt_status r = check(d, al, bl, cl, dl, &x.g);
  if (r != 0) return r;
  x.alpha = *(const float *)alpha;
  x.beta = *(const float *)beta;
  /* beta reads C in place: C must be D (or beta 0), and a bf16 D has none */
  if (x.beta != 0.0f && (c != dd || dl->type != SC_CUDA_R_32F))
    return SC_CUBLAS_STATUS_NOT_SUPPORTED;
  x.la = *al, x.lb = *bl, x.ld = *dl;
  x.a = a, x.b = b, x.d = dd;
  sc_gemm_spans(&x.g, x.span);
  d->call = x;
  if (h->cu->host_access) { /* the fake driver's race check */
    h->cu->host_access(b, (size_t)x.span[0] * type_size(bl->type), 0);
    h->cu->host_access(a, (size_t)x.span[1] * type_size(al->type), 0);
    h->cu->host_access(dd, (size_t)x.span[2] * type_size(dl->type), 1);
    int k = epilogue_kind(d->epilogue);
    if (d->epilogue != SC_CUBLASLT_EPILOGUE_DEFAULT && (d->epilogue & SC_CUBLASLT_EPILOGUE_BIAS))
      h->cu->host_access(d->bias, (size_t)x.g.n * type_size(dl->type), 0);
    if (is_bgrad(k)) /* written: one value per row (BGRADA) or column (BGRADB) of D */
      h->cu->host_access(d->bias, (size_t)(k == SC_CUBLASLT_EPILOGUE_BGRADA ? x.g.n : x.g.m) *
                                      type_size(dl->type), 1);
    if (k > 0 && (k & SC_CUBLASLT_EPILOGUE_AUX)) /* DGELU reads it, GELU_AUX writes it */
      h->cu->host_access(d->aux, (size_t)((x.g.batch - 1) * d->aux_stride +
                                          (x.g.m - 1) * d->aux_ld + x.g.n) *
                                     type_size(dl->type), k != SC_CUBLASLT_EPILOGUE_DGELU);
  }
  return h->cu->launch_host_func(s, emu_run, d) == SC_CUDA_SUCCESS
             ? 0
             : SC_CUBLAS_STATUS_NOT_SUPPORTED;
}

void sc_lt_emu_api(sc_lt_api *api) {
  *api = (sc_lt_api){.create = emu_create, .destroy = emu_destroy,
                     .desc_create = emu_desc_create, .desc_destroy = emu_desc_destroy,
                     .desc_set = emu_desc_set, .layout_create = emu_layout_create,
                     .layout_destroy = emu_layout_destroy, .layout_set = emu_layout_set,
                     .pref_create = emu_pref_create, .pref_destroy = emu_pref_destroy,
                     .pref_set = emu_pref_set, .heuristic = emu_heuristic,
                     .matmul = emu_matmul, .status_string = NULL};
}

void sc_lt_emu_bind(sc_lt_handle h, const sc_cu *cu) { h->cu = cu; }
