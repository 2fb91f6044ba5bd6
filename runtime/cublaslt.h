/* cublaslt.h — the few types and constants of cuBLASLt (cublasLt.h) that
 * runtime/cuda_gemm.c uses, repeated so that shardc builds without the
 * CUDA toolkit; tests/unit/test_cuda_abi.c checks them against the real
 * header where it is installed. The entry points the runtime calls are one
 * list (SC_LT_ENTRY_POINTS) and one table (sc_lt_api), filled either from
 * the library (dlsym) or by the emulated GPU's cuBLASLt (sc_lt_emu_api,
 * runtime/cublaslt_emu.c). Internal to the runtime. */
#ifndef SC_RUNTIME_CUBLASLT_H
#define SC_RUNTIME_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/cuda_driver.h"

typedef int sc_lt_status;
typedef struct cublasLtContext *sc_lt_handle;
typedef struct cublasLtMatmulDescOpaque *sc_lt_desc;
typedef struct cublasLtMatrixLayoutOpaque *sc_lt_layout;
typedef struct cublasLtMatmulPreferenceOpaque *sc_lt_pref;
typedef struct sc_lt_algo {
  uint64_t data[8];
} sc_lt_algo;
typedef struct sc_lt_heuristic {
  sc_lt_algo algo;
  size_t workspaceSize;
  sc_lt_status state;
  float wavesCount;
  int reserved[4];
} sc_lt_heuristic;

enum {
  SC_CUBLAS_STATUS_NOT_SUPPORTED = 15,
  SC_CUBLAS_STATUS_INVALID_VALUE = 7,
  SC_CUBLAS_COMPUTE_32F = 68,
  SC_CUBLAS_COMPUTE_32F_FAST_TF32 = 77, /* f32 operands rounded to TF32 on tensor cores */
  SC_CUDA_R_32F = 0,
  SC_CUDA_R_16BF = 14,
  SC_CUDA_R_8F_E4M3 = 28,
  SC_CUDA_R_8F_E5M2 = 29,
  SC_CUBLAS_OP_N = 0,
  SC_CUBLAS_OP_T = 1,
  SC_CUBLASLT_MATMUL_DESC_TRANSA = 3,
  SC_CUBLASLT_MATMUL_DESC_TRANSB = 4,
  SC_CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  SC_CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  SC_CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
  SC_CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
  SC_CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,
  SC_CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,
  SC_CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,
  SC_CUBLASLT_EPILOGUE_DEFAULT = 1,
  SC_CUBLASLT_EPILOGUE_BIAS = 4,
  SC_CUBLASLT_EPILOGUE_RELU = 2,
  SC_CUBLASLT_EPILOGUE_GELU = 32,
  SC_CUBLASLT_EPILOGUE_AUX = 128, /* with GELU: GELU_AUX, the input kept (ld a multiple of 8) */
  SC_CUBLASLT_EPILOGUE_DGELU = 64 | 128, /* D = product · gelu'(aux) */
  SC_CUBLASLT_EPILOGUE_BGRADA = 256, /* BIAS_POINTER = Σ over k of op(A): D's rows (our n) */
  SC_CUBLASLT_EPILOGUE_BGRADB = 512, /* BIAS_POINTER = Σ over k of op(B): D's columns (our m) */
  SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
  SC_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
};

#define SC_LT_ENTRY_POINTS(X)                                                              \
  X(create, "cublasLtCreate", (sc_lt_handle * h))                                          \
  X(destroy, "cublasLtDestroy", (sc_lt_handle h))                                          \
  X(desc_create, "cublasLtMatmulDescCreate", (sc_lt_desc * d, int compute, int sc))        \
  X(desc_destroy, "cublasLtMatmulDescDestroy", (sc_lt_desc d))                             \
  X(desc_set, "cublasLtMatmulDescSetAttribute",                                            \
    (sc_lt_desc d, int attr, const void *buf, size_t n))                                   \
  X(layout_create, "cublasLtMatrixLayoutCreate",                                           \
    (sc_lt_layout * l, int type, uint64_t rows, uint64_t cols, int64_t ld))                \
  X(layout_destroy, "cublasLtMatrixLayoutDestroy", (sc_lt_layout l))                       \
  X(layout_set, "cublasLtMatrixLayoutSetAttribute",                                        \
    (sc_lt_layout l, int attr, const void *buf, size_t n))                                 \
  X(pref_create, "cublasLtMatmulPreferenceCreate", (sc_lt_pref * p))                       \
  X(pref_destroy, "cublasLtMatmulPreferenceDestroy", (sc_lt_pref p))                       \
  X(pref_set, "cublasLtMatmulPreferenceSetAttribute",                                      \
    (sc_lt_pref p, int attr, const void *buf, size_t n))                                   \
  X(heuristic, "cublasLtMatmulAlgoGetHeuristic",                                           \
    (sc_lt_handle h, sc_lt_desc d, sc_lt_layout a, sc_lt_layout b, sc_lt_layout c,         \
     sc_lt_layout dd, sc_lt_pref p, int n, sc_lt_heuristic *out, int *found))              \
  X(matmul, "cublasLtMatmul",                                                              \
    (sc_lt_handle h, sc_lt_desc d, const void *alpha, const void *a, sc_lt_layout al,      \
     const void *b, sc_lt_layout bl, const void *beta, const void *c, sc_lt_layout cl,     \
     void *dd, sc_lt_layout dl, const sc_lt_algo *algo, void *ws, size_t ws_bytes,         \
     CUstream s))

typedef struct sc_lt_api {
#define SC_LT_FIELD(field, sym, params) sc_lt_status(*field) params;
  SC_LT_ENTRY_POINTS(SC_LT_FIELD)
#undef SC_LT_FIELD
  const char *(*status_string)(sc_lt_status s); /* optional */
} sc_lt_api;

/* The emulated GPU's cuBLASLt (runtime/cublaslt_emu.c): the same calls on
 * the fake driver, each matmul a host function on its stream. It
 * implements what the runtime uses — f32 and bf16 (f32 compute), FP8
 * operands (E4M3, E5M2; not both E5M2) with the A/B scale pointers, f32 or
 * bf16 D, the BIAS, RELU, GELU and GELU_AUX epilogues (and their BIAS
 * forms), DGELU, BGRADA and BGRADB on f32 and bf16 products — and refuses,
 * as the library does
 * (CUBLAS_STATUS_NOT_SUPPORTED from the heuristic and the matmul), an FP8
 * matmul that is not "TN" (A transposed, B not), whose A/B/D leading dims
 * or k are not multiples of 16, or that asks for an epilogue, C or D
 * scales or amax; GELU_AUX or DGELU without an aux pointer, or with an aux
 * leading dim (or batch stride) that is not a multiple of 8 or is below
 * D's rows; BGRADA or BGRADB without a bias pointer (INVALID_VALUE) or
 * batched (NOT_SUPPORTED: not assumed of the library);
 * any other epilogue. Decoding is exact
 * and the products are f32's (sc_host_gemm_f32 on the decoded operands), so
 * the result equals the f32 product of the FP8 values. sc_lt_emu_bind gives
 * a handle the driver whose streams it queues on (before any matmul). */
void sc_lt_emu_api(sc_lt_api *api);
void sc_lt_emu_bind(sc_lt_handle h, const sc_cu *cu);

#endif
