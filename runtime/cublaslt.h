/* cublaslt.h — the few types and constants of cuBLASLt (cublasLt.h) that
 * runtime/cuda_gemm.c uses, repeated so that shardc builds without the
 * CUDA toolkit; tests/unit/test_cuda_abi.c checks them against the real
 * header where it is installed. Internal to the runtime. */
#ifndef SC_RUNTIME_CUBLASLT_H
#define SC_RUNTIME_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

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
  SC_CUBLAS_COMPUTE_32F = 68,
  SC_CUDA_R_32F = 0,
  SC_CUDA_R_16BF = 14,
  SC_CUBLAS_OP_N = 0,
  SC_CUBLAS_OP_T = 1,
  SC_CUBLASLT_MATMUL_DESC_TRANSA = 3,
  SC_CUBLASLT_MATMUL_DESC_TRANSB = 4,
  SC_CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  SC_CUBLASLT_EPILOGUE_DEFAULT = 1,
  SC_CUBLASLT_EPILOGUE_BIAS = 4,
  SC_CUBLASLT_EPILOGUE_RELU = 2,
  SC_CUBLASLT_EPILOGUE_GELU = 32,
  SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
  SC_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
};

#endif
