/* cuda_driver.h — the CUDA driver API, loaded at run time.
 *
 * shardc never links libcuda: the binary must start, and say "no CUDA
 * driver" cleanly, on machines without one (../shared/GPU.md). sc_cu_load
 * opens the driver once per process with dlopen and resolves every entry
 * point the runtime uses into one table, under the versioned names the
 * CUDA 12/13 headers map the API to (cuMemAlloc → cuMemAlloc_v2, ...).
 *
 * Which driver: "libcuda.so.1" from the system; with SHARDC_CUDA_EMU=1 in
 * the environment, the project's fake driver instead (runtime/fakecuda/:
 * device memory is host memory, kernels are the host-compiled twins of the
 * generated CUDA C, streams are queues run by threads). The runtime code
 * above this table is the same either way; only the module image differs
 * (PTX or CUBIN for a real device, the CUDA C source for the fake: see
 * SC_CU_EMU_IMAGE) and the matrix products and collectives, which the fake
 * cannot run from cuBLASLt or NCCL, go through their host versions.
 *
 * The types and constants below are the driver's own (cuda.h); they are
 * repeated here so that the runtime builds without the toolkit, and
 * tests/unit/test_cuda_driver.c checks each against cuda.h where it is
 * installed. Threading: the table is filled once (sc_cu_load is
 * thread-safe) and read-only after. */
#ifndef SC_RUNTIME_CUDA_DRIVER_H
#define SC_RUNTIME_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base.h"

/* CUDA_MEMCPY2D (cuda.h), device-to-device use only */
struct sc_cu_memcpy2d_st {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  unsigned long long srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  unsigned long long dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
};

#ifdef SC_CU_SYSTEM_HEADERS /* the ABI test: cuda.h's own types */
typedef CUDA_MEMCPY2D sc_cu_memcpy2d;
#else
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *user_data);
typedef struct sc_cu_memcpy2d_st sc_cu_memcpy2d;
#endif

enum {
  SC_CUDA_SUCCESS = 0,
  SC_CUDA_ERROR_INVALID_VALUE = 1,
  SC_CUDA_ERROR_OUT_OF_MEMORY = 2,
  SC_CUDA_ERROR_NOT_INITIALIZED = 3,
  SC_CUDA_ERROR_NO_DEVICE = 100,
  SC_CUDA_ERROR_INVALID_PTX = 218,
  SC_CUDA_ERROR_INVALID_HANDLE = 400,
  SC_CUDA_ERROR_ILLEGAL_STATE = 401,
  SC_CUDA_ERROR_NOT_FOUND = 500,
  SC_CUDA_ERROR_NOT_READY = 600,
  SC_CUDA_ERROR_LAUNCH_FAILED = 719,
  SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  SC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  SC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
};
enum {
  SC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  SC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  SC_CU_JIT_INFO_LOG_BUFFER = 3,
  SC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  SC_CU_JIT_ERROR_LOG_BUFFER = 5,
  SC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  SC_CU_STREAM_NON_BLOCKING = 1,
  SC_CU_EVENT_DISABLE_TIMING = 2,
  SC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  SC_CU_MEMORYTYPE_DEVICE = 2,
};
/* Dynamic shared memory per block: what a kernel may use before
 * cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) raises its limit, and
 * the most a block may opt in to on Hopper (the emulated device's). */
enum { SC_CU_SHARED_DEFAULT_BYTES = 48 * 1024, SC_CU_SHARED_OPTIN_BYTES = 227 * 1024 };

/* The module image the fake driver takes: this line, then the CUDA C of
 * the unit (codegen/cuda/cuda.h), which it compiles with the host C++
 * compiler (runtime/cuda_emu.h). A real driver rejects it as bad PTX. */
#define SC_CU_EMU_IMAGE "//shardc-emulated-module\n"

/* X(field, symbol, return, params): every entry point, in one list (the
 * fake driver declares its functions from it, so their types match). */
#define SC_CU_ENTRY_POINTS(X)                                                                 \
  X(init, cuInit, CUresult, (unsigned flags))                                               \
  X(driver_version, cuDriverGetVersion, CUresult, (int *version))                           \
  X(error_string, cuGetErrorString, CUresult, (CUresult r, const char **s))                 \
  X(device_count, cuDeviceGetCount, CUresult, (int *count))                                 \
  X(device_get, cuDeviceGet, CUresult, (CUdevice *dev, int ordinal))                        \
  X(device_name, cuDeviceGetName, CUresult, (char *name, int len, CUdevice dev))            \
  X(device_attribute, cuDeviceGetAttribute, CUresult, (int *v, int attr, CUdevice dev))     \
  X(ctx_retain, cuDevicePrimaryCtxRetain, CUresult, (CUcontext * ctx, CUdevice dev))        \
  X(ctx_release, cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                    \
  X(ctx_set_current, cuCtxSetCurrent, CUresult, (CUcontext ctx))                            \
  X(ctx_synchronize, cuCtxSynchronize, CUresult, (void))                                    \
  X(mem_get_info, cuMemGetInfo_v2, CUresult, (size_t * free_bytes, size_t *total))          \
  X(mem_alloc, cuMemAlloc_v2, CUresult, (CUdeviceptr * p, size_t bytes))                    \
  X(mem_free, cuMemFree_v2, CUresult, (CUdeviceptr p))                                      \
  X(mem_alloc_host, cuMemAllocHost_v2, CUresult, (void **p, size_t bytes))                  \
  X(mem_free_host, cuMemFreeHost, CUresult, (void *p))                                      \
  X(memcpy_htod, cuMemcpyHtoDAsync_v2, CUresult,                                            \
    (CUdeviceptr dst, const void *src, size_t n, CUstream s))                                 \
  X(memcpy_dtoh, cuMemcpyDtoHAsync_v2, CUresult,                                            \
    (void *dst, CUdeviceptr src, size_t n, CUstream s))                                       \
  X(memcpy_dtod, cuMemcpyDtoDAsync_v2, CUresult,                                            \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))                                 \
  X(memcpy_2d, cuMemcpy2DAsync_v2, CUresult, (const sc_cu_memcpy2d *c, CUstream s))         \
  X(memset_d8, cuMemsetD8Async, CUresult,                                                   \
    (CUdeviceptr dst, unsigned char v, size_t n, CUstream s))                                 \
  X(stream_create, cuStreamCreate, CUresult, (CUstream * s, unsigned flags))                \
  X(stream_destroy, cuStreamDestroy_v2, CUresult, (CUstream s))                             \
  X(stream_synchronize, cuStreamSynchronize, CUresult, (CUstream s))                        \
  X(stream_query, cuStreamQuery, CUresult, (CUstream s))                                      \
  X(stream_wait_event, cuStreamWaitEvent, CUresult, (CUstream s, CUevent e, unsigned f))    \
  X(event_create, cuEventCreate, CUresult, (CUevent * e, unsigned flags))                   \
  X(event_destroy, cuEventDestroy_v2, CUresult, (CUevent e))                                \
  X(event_record, cuEventRecord, CUresult, (CUevent e, CUstream s))                         \
  X(event_synchronize, cuEventSynchronize, CUresult, (CUevent e))                           \
  X(event_elapsed, cuEventElapsedTime, CUresult, (float *ms, CUevent start, CUevent end))   \
  X(module_load, cuModuleLoadDataEx, CUresult,                                              \
    (CUmodule * m, const void *image, unsigned n_opts, int *opts, void **values))             \
  X(module_unload, cuModuleUnload, CUresult, (CUmodule m))                                  \
  X(module_function, cuModuleGetFunction, CUresult,                                         \
    (CUfunction * f, CUmodule m, const char *name))                                           \
  X(func_set_attribute, cuFuncSetAttribute, CUresult, (CUfunction f, int attr, int value))  \
  X(launch_kernel, cuLaunchKernel, CUresult,                                                \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,           \
     unsigned bz, unsigned shared_bytes, CUstream s, void **params, void **extra))            \
  X(launch_host_func, cuLaunchHostFunc, CUresult, (CUstream s, CUhostFn fn, void *ud))      \
  X(stream_begin_capture, cuStreamBeginCapture_v2, CUresult, (CUstream s, int mode))        \
  X(stream_end_capture, cuStreamEndCapture, CUresult, (CUstream s, CUgraph * g))            \
  X(graph_instantiate, cuGraphInstantiateWithFlags, CUresult,                               \
    (CUgraphExec * e, CUgraph g, unsigned long long flags))                                   \
  X(graph_launch, cuGraphLaunch, CUresult, (CUgraphExec e, CUstream s))                     \
  X(graph_exec_destroy, cuGraphExecDestroy, CUresult, (CUgraphExec e))                      \
  X(graph_destroy, cuGraphDestroy, CUresult, (CUgraph g))

typedef struct sc_cu {
  void *lib;
  bool emulated; /* the fake driver (SHARDC_CUDA_EMU=1) */
  char path[512]; /* what was opened */
#define SC_CU_FIELD(field, sym, ret, params) ret(*field) params;
  SC_CU_ENTRY_POINTS(SC_CU_FIELD)
#undef SC_CU_FIELD
  /* the fake driver only: declares a range the next cuLaunchHostFunc of
   * this thread reads or writes (for its race check); NULL otherwise */
  void (*host_access)(const void *p, size_t bytes, int write);
} sc_cu;

/* The driver table, loaded and cuInit'ed on first call (thread-safe), with
 * at least one device. SC_ERR_UNSUPPORTED: no driver ("no CUDA driver:
 * libcuda.so.1 not found ..."), a driver lacking an entry point, or no
 * device; the same answer every call. */
sc_status sc_cu_load(const sc_cu **out, sc_diag *diag);

/* The ordinal of the GPU rank `rank` uses among count: LOCAL_RANK when set,
 * else rank, modulo count. */
int sc_cu_ordinal(int rank, int count);

/* Whether SHARDC_CUDA_EMU=1 is set (the fake driver is used). */
bool sc_cu_emulation_requested(void);

/* A failed driver call as SC_ERR_IO: "cuda: CALL failed: <driver's text>
 * (code)", prefixed with what was being done. SC_OK when r is success. */
sc_status sc_cu_check(const sc_cu *cu, CUresult r, const char *call, const char *what,
                      sc_diag *diag);

#endif
