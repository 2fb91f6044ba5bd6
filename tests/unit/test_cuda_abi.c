/* test_cuda_abi.c — shardc's copies of the CUDA driver's and cuBLASLt's
 * types, constants and versioned entry-point names (runtime/cuda_driver.h,
 * runtime/cublaslt.h) against the toolkit's own headers, where they are
 * installed (the build passes SC_HAVE_CUDA_H). shardc never includes
 * cuda.h or cublasLt.h itself, so that it builds without the toolkit; a
 * wrong value there would only show on a GPU. Compiled against cuda.h:
 *   - every constant equals the header's (static assertions: a mismatch
 *     fails the build, and so the suite);
 *   - the 2-D copy descriptor and the heuristic result have the header's
 *     size and field offsets;
 *   - every symbol the runtime resolves with dlsym names a function the
 *     header declares (taking its address fails to compile otherwise), so
 *     the _v2 names are the ones the CUDA 13 API maps to. */
#include "test_util.h"

#if SC_HAVE_CUDA_H
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#include <cuda.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#define SC_CU_SYSTEM_HEADERS 1
#include "runtime/cublaslt.h"
#include "runtime/cuda_driver.h"

#define SAME(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #ours)
SAME(SC_CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(SC_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(SC_CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(SC_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(SC_CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_PTX);
SAME(SC_CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME(SC_CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_ILLEGAL_STATE);
SAME(SC_CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
SAME(SC_CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(SC_CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED);
SAME(SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
SAME(SC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
SAME(SC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
SAME(SC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
SAME(SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME(SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME(SC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
     CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
SAME(SC_CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER);
SAME(SC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
SAME(SC_CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER);
SAME(SC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
SAME(SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
SAME(SC_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(SC_CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(SC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SAME(0, CU_STREAM_CAPTURE_MODE_GLOBAL); /* cuda_device.c begins captures with 0 */
SAME(SC_CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME(SC_CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F);
SAME(SC_CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_TF32);
SAME(SC_CUDA_R_32F, CUDA_R_32F);
SAME(SC_CUDA_R_16BF, CUDA_R_16BF);
SAME(SC_CUBLAS_OP_N, CUBLAS_OP_N);
SAME(SC_CUBLAS_OP_T, CUBLAS_OP_T);
SAME(SC_CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSA);
SAME(SC_CUBLASLT_MATMUL_DESC_TRANSB, CUBLASLT_MATMUL_DESC_TRANSB);
SAME(SC_CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_MATMUL_DESC_EPILOGUE);
SAME(SC_CUBLASLT_MATMUL_DESC_BIAS_POINTER, CUBLASLT_MATMUL_DESC_BIAS_POINTER);
SAME(SC_CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DEFAULT);
SAME(SC_CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BIAS);
SAME(SC_CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU);
SAME(SC_CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU);
SAME(SC_CUBLASLT_EPILOGUE_RELU | SC_CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS);
SAME(SC_CUBLASLT_EPILOGUE_GELU | SC_CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS);
SAME(SC_CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
SAME(SC_CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
SAME(SC_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
SAME(SC_CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED);
SAME(SC_CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_INVALID_VALUE);
SAME(SC_CUDA_R_8F_E4M3, CUDA_R_8F_E4M3);
SAME(SC_CUDA_R_8F_E5M2, CUDA_R_8F_E5M2);
SAME(SC_CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER);
SAME(SC_CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER);
SAME(SC_CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER);
SAME(SC_CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER);
SAME(SC_CUBLASLT_MATMUL_DESC_FAST_ACCUM, CUBLASLT_MATMUL_DESC_FAST_ACCUM);

/* every dlsym'd name is a function cuda.h declares (sizeof: nothing is
 * linked, and an undeclared name does not compile) */
#define IS_FUNCTION(field, sym, ret, params)                                      \
  _Static_assert(sizeof(&sym) == sizeof(void (*)(void)), #sym);
SC_CU_ENTRY_POINTS(IS_FUNCTION)

#define FIELD(t1, t2, f1, f2)                                                   \
  assert_int_equal(offsetof(t1, f1), offsetof(t2, f2));                         \
  assert_int_equal(sizeof(((t1 *)0)->f1), sizeof(((t2 *)0)->f2))

static void test_structs_match(void **state) {
  (void)state;
  typedef struct sc_cu_memcpy2d_st ours;
  assert_int_equal(sizeof(ours), sizeof(CUDA_MEMCPY2D));
  FIELD(ours, CUDA_MEMCPY2D, srcXInBytes, srcXInBytes);
  FIELD(ours, CUDA_MEMCPY2D, srcMemoryType, srcMemoryType);
  FIELD(ours, CUDA_MEMCPY2D, srcDevice, srcDevice);
  FIELD(ours, CUDA_MEMCPY2D, srcPitch, srcPitch);
  FIELD(ours, CUDA_MEMCPY2D, dstXInBytes, dstXInBytes);
  FIELD(ours, CUDA_MEMCPY2D, dstMemoryType, dstMemoryType);
  FIELD(ours, CUDA_MEMCPY2D, dstDevice, dstDevice);
  FIELD(ours, CUDA_MEMCPY2D, dstPitch, dstPitch);
  FIELD(ours, CUDA_MEMCPY2D, WidthInBytes, WidthInBytes);
  FIELD(ours, CUDA_MEMCPY2D, Height, Height);
  assert_int_equal(sizeof(sc_lt_heuristic), sizeof(cublasLtMatmulHeuristicResult_t));
  FIELD(sc_lt_heuristic, cublasLtMatmulHeuristicResult_t, algo, algo);
  FIELD(sc_lt_heuristic, cublasLtMatmulHeuristicResult_t, workspaceSize, workspaceSize);
  FIELD(sc_lt_heuristic, cublasLtMatmulHeuristicResult_t, state, state);
  FIELD(sc_lt_heuristic, cublasLtMatmulHeuristicResult_t, wavesCount, wavesCount);
}
int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_structs_match)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
SC_TEST_MAIN_SKIPPED("no cuda.h and cublasLt.h to compare with")
#endif
