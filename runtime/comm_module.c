/* comm_module.c — the mpi and nccl communicators, loaded when first used.
 *
 * runtime/comm_mpi.c and runtime/comm_nccl.c are built as modules of their
 * own (libshardc_comm_mpi.so, libshardc_comm_nccl.so), each linked with its
 * library (Open MPI; NCCL and cudart). sc_comm_mpi_create and
 * sc_comm_nccl_create below dlopen the module on first use and call its
 * entry point, so that the shardc library and every command that does not
 * use them (inspect, plan, a run on local ranks) start on a machine without
 * MPI or CUDA. The modules resolve the runtime's own functions (sc_comm_*,
 * sc_diag_*) from the library that loaded them.
 *
 * Where a module is looked for, in order: $SHARDC_MODULE_DIR; the folder
 * of the object that holds this code (the build tree keeps the modules
 * next to the shardc binary and libshardc.so), and its shardc/ and
 * ../lib/shardc/ subfolders; the install folder configured at build time
 * (SHARDC_MODULE_INSTALL_DIR). The same search finds the fake CUDA driver
 * (runtime/cuda_driver.c: sc_module_open, declared in comm.h). A module
 * that cannot be loaded is SC_ERR_UNSUPPORTED naming it and dlerror's
 * reason. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

#ifndef SHARDC_MODULE_INSTALL_DIR
#define SHARDC_MODULE_INSTALL_DIR "/usr/local/lib/shardc"
#endif

/* Opens module `file` (first match on the search path above) with dlopen
 * flags `mode`, or NULL with the reason in diag. Loaded modules stay
 * loaded for the life of the process (MPI cannot be initialised twice). */
void *sc_module_open(const char *file, int mode, sc_diag *diag) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  char dirs[5][PATH_MAX], path[PATH_MAX + 64], why[512] = "";
  int n = 0;
  const char *env = getenv("SHARDC_MODULE_DIR");
  if (env && *env) snprintf(dirs[n++], sizeof dirs[0], "%s", env);
  Dl_info info;
  if (dladdr((void *)&sc_module_open, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    int len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *base = slash ? info.dli_fname : ".";
    snprintf(dirs[n++], sizeof dirs[0], "%.*s", len, base);
    snprintf(dirs[n++], sizeof dirs[0], "%.*s/shardc", len, base);
    snprintf(dirs[n++], sizeof dirs[0], "%.*s/../lib/shardc", len, base);
  }
  snprintf(dirs[n++], sizeof dirs[0], "%s", SHARDC_MODULE_INSTALL_DIR);
  void *h = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; !h && i < n; i++) {
    snprintf(path, sizeof path, "%.*s/%s", (int)(PATH_MAX - 1), dirs[i], file);
    h = dlopen(path, mode);
    if (!h && !why[0]) {
      const char *e = dlerror();
      /* keep the first reason that is not "no such file" */
      if (e && !strstr(e, "No such file")) snprintf(why, sizeof why, "%s", e);
    }
  }
  pthread_mutex_unlock(&lock);
  if (!h)
    sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "cannot load %s: %s", file,
                why[0] ? why : "not found next to the shardc library (set SHARDC_MODULE_DIR)");
  return h;
}

/* Module `file`'s symbol `sym` (RTLD_GLOBAL: Open MPI's own plugins need
 * libmpi's symbols), or NULL with the reason in diag. */
static void *module_symbol(const char *file, const char *sym, sc_diag *diag) {
  void *h = sc_module_open(file, RTLD_NOW | RTLD_GLOBAL, diag);
  if (!h) return NULL;
  void *f = dlsym(h, sym);
  if (!f) sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "%s lacks %s", file, sym);
  return f;
}

sc_status sc_comm_mpi_create(sc_comm **out, sc_diag *diag) {
  *out = NULL;
#if SHARDC_HAVE_MPI
  sc_status (*create)(sc_comm **, sc_diag *);
  *(void **)&create = module_symbol("libshardc_comm_mpi.so", "sc_comm_mpi_module_create", diag);
  return create ? create(out, diag) : diag->status;
#else
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "mpi communicator: shardc was built without MPI");
#endif
}

sc_status sc_comm_nccl_create(const sc_comm_nccl_opts *o, sc_comm **out, sc_diag *diag) {
  *out = NULL;
#if SHARDC_HAVE_NCCL
  sc_status (*create)(const sc_comm_nccl_opts *, sc_comm **, sc_diag *);
  *(void **)&create =
      module_symbol("libshardc_comm_nccl.so", "sc_comm_nccl_module_create", diag);
  return create ? create(o, out, diag) : diag->status;
#else
  (void)o;
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "nccl communicator: shardc was built without NCCL");
#endif
}
