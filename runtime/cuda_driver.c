/* cuda_driver.c — loads the CUDA driver (cuda_driver.h).
 *
 * One table per process, filled under a lock on first use: dlopen of the
 * system's libcuda.so.1 (or of the fake driver, fakecuda/libcuda.so.1 on
 * the module search path, when SHARDC_CUDA_EMU=1), every entry point by
 * dlsym, cuInit(0), and a device count of at least one. A failure is kept
 * and given again to every later caller: the driver is not retried. */
#define _GNU_SOURCE
#include "runtime/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool tried;
static sc_cu table;
static sc_diag failure;

bool sc_cu_emulation_requested(void) {
  const char *e = getenv("SHARDC_CUDA_EMU");
  return e && strcmp(e, "1") == 0;
}

int sc_cu_ordinal(int rank, int count) {
  const char *lr = getenv("LOCAL_RANK");
  int r = lr && *lr ? atoi(lr) : rank;
  return r >= 0 && count > 0 ? r % count : 0;
}

sc_status sc_cu_check(const sc_cu *cu, CUresult r, const char *call, const char *what,
                      sc_diag *diag) {
  if (r == SC_CUDA_SUCCESS) return SC_OK;
  const char *text = NULL;
  if (!cu || !cu->error_string || cu->error_string(r, &text) != SC_CUDA_SUCCESS || !text)
    text = "unknown error";
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cuda%s%s: %s failed: %s (%d)",
                     what ? ": " : "", what ? what : "", call, text, (int)r);
}

static sc_status load(sc_diag *d) {
  table.emulated = sc_cu_emulation_requested();
  if (table.emulated) {
    sc_diag why = {0};
    table.lib = sc_module_open("fakecuda/libcuda.so.1", RTLD_NOW | RTLD_LOCAL, &why);
    if (!table.lib)
      return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "SHARDC_CUDA_EMU=1: the emulated CUDA driver: %s", why.msg);
    snprintf(table.path, sizeof table.path, "fakecuda/libcuda.so.1");
  } else {
    table.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!table.lib)
      return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "no CUDA driver: libcuda.so.1 cannot be loaded (%s); run on a "
                         "machine with an NVIDIA driver, or set SHARDC_CUDA_EMU=1 for the "
                         "emulated GPU",
                         dlerror());
    snprintf(table.path, sizeof table.path, "libcuda.so.1");
  }
#define SC_CU_RESOLVE(field, sym, ret, params)                                          \
  if (!(*(void **)&table.field = dlsym(table.lib, #sym)))                               \
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,                               \
                       "the CUDA driver %s lacks %s (too old a driver?)", table.path, #sym);
  SC_CU_ENTRY_POINTS(SC_CU_RESOLVE)
#undef SC_CU_RESOLVE
  if (table.emulated)
    *(void **)&table.host_access = dlsym(table.lib, "sc_fake_cuda_host_access");
  CUresult r = table.init(0);
  if (r != SC_CUDA_SUCCESS) {
    const char *text = NULL;
    if (table.error_string(r, &text) != SC_CUDA_SUCCESS || !text) text = "?";
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "no CUDA device: cuInit failed: %s (%d)", text, (int)r);
  }
  int n = 0;
  if (table.device_count(&n) != SC_CUDA_SUCCESS || n < 1)
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL, "no CUDA device: the driver sees none");
  return SC_OK;
}

sc_status sc_cu_load(const sc_cu **out, sc_diag *diag) {
  pthread_mutex_lock(&lock);
  if (!tried) {
    tried = true;
    sc_diag_clear(&failure);
    load(&failure); /* a failed load keeps its handle: others may share it */
  }
  pthread_mutex_unlock(&lock);
  *out = NULL;
  if (failure.status != SC_OK) {
    *diag = failure;
    return failure.status;
  }
  *out = &table;
  return SC_OK;
}
