/* cuda_driver.h — the few CUDA driver API entry points the GPU tests use
 * (test_cuda.c, test_cuda_samples.c), loaded with dlopen so that the test
 * binaries build, link and start without libcuda.
 *
 * cuda_load() opens libcuda.so.1, resolves the symbols into `cu`, calls
 * cuInit and checks that a device exists; on failure it writes the reason
 * to `why` and returns false (the caller skips, or fails when the
 * environment sets SC_CUDA_REQUIRE_GPU=1: cuda_gpu_required()). CU(call)
 * fails the current cmocka test with the driver's error string. Everything
 * is static, so each test binary that includes this header gets its own
 * copy; include test_util.h (cmocka) first. */
#ifndef SC_TEST_CUDA_DRIVER_H
#define SC_TEST_CUDA_DRIVER_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUres;
typedef unsigned long long CUdptr;
static struct {
  void *lib;
  CUres (*init)(unsigned);
  CUres (*device_count)(int *);
  CUres (*device_get)(int *, int);
  CUres (*device_attr)(int *, int, int);
  CUres (*ctx_retain)(void **, int);
  CUres (*ctx_release)(int);
  CUres (*ctx_set)(void *);
  CUres (*mod_load)(void **, const void *);
  CUres (*mod_unload)(void *);
  CUres (*mod_fn)(void **, void *, const char *);
  CUres (*mem_alloc)(CUdptr *, size_t);
  CUres (*mem_free)(CUdptr);
  CUres (*htod)(CUdptr, const void *, size_t);
  CUres (*dtoh)(void *, CUdptr, size_t);
  CUres (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                  unsigned, void *, void **, void **);
  CUres (*sync)(void);
  CUres (*err_str)(CUres, const char **);
} cu;

enum { CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

static inline bool cuda_load(char *why, size_t n) {
  if (!cu.lib) cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib) { snprintf(why, n, "libcuda.so.1 not found"); return false; }
#define SYM(f, name)                                                       \
  *(void **)&cu.f = dlsym(cu.lib, name);                                   \
  if (!cu.f) { snprintf(why, n, "libcuda lacks %s", name); return false; }
  SYM(init, "cuInit") SYM(device_count, "cuDeviceGetCount") SYM(device_get, "cuDeviceGet")
  SYM(device_attr, "cuDeviceGetAttribute") SYM(ctx_retain, "cuDevicePrimaryCtxRetain")
  SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2") SYM(ctx_set, "cuCtxSetCurrent")
  SYM(mod_load, "cuModuleLoadData") SYM(mod_unload, "cuModuleUnload")
  SYM(mod_fn, "cuModuleGetFunction") SYM(mem_alloc, "cuMemAlloc_v2")
  SYM(mem_free, "cuMemFree_v2") SYM(htod, "cuMemcpyHtoD_v2") SYM(dtoh, "cuMemcpyDtoH_v2")
  SYM(launch, "cuLaunchKernel") SYM(sync, "cuCtxSynchronize") SYM(err_str, "cuGetErrorString")
#undef SYM
  if (cu.init(0) != 0) { snprintf(why, n, "cuInit failed (no driver or no device)"); return false; }
  int count = 0;
  if (cu.device_count(&count) != 0 || count < 1) { snprintf(why, n, "no CUDA device"); return false; }
  return true;
}

/* SC_CUDA_REQUIRE_GPU=1: a missing device is a failure, not a skip. */
static inline bool cuda_gpu_required(void) {
  const char *req = getenv("SC_CUDA_REQUIRE_GPU");
  return req && !strcmp(req, "1");
}

#define CU(call)                                                              \
  do {                                                                        \
    CUres r_ = (call);                                                        \
    if (r_ != 0) {                                                            \
      const char *s_ = "?";                                                   \
      cu.err_str(r_, &s_);                                                    \
      fail_msg("%s: %s (%d)", #call, s_, r_);                                 \
    }                                                                         \
  } while (0)

#endif
