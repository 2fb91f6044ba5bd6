/* cuda_nvrtc.c — compiling the emitted CUDA C to PTX (and CUBINs) with NVRTC.
 *
 * Every NVRTC call goes through NVRTC_CHECK, which turns an nvrtcResult into
 * an sc_status carrying the call's text and nvrtcGetErrorString's message.
 * A compile error returns SC_ERR_INVALID with the first lines of NVRTC's log
 * in the diagnostic and the whole log through `log`. No GPU is needed.
 *
 * Options: --gpu-architecture=ARCH, -default-device (every function is
 * __device__ unless marked), --std=c++17; no -use_fast_math (accuracy). The
 * emitted source includes no header, so no include path is passed.
 *
 * NVRTC is loaded when first needed (dlopen of libnvrtc.so, found on the
 * library path or under the CUDA toolkit this build was configured with),
 * not linked: a machine without the CUDA toolkit still runs everything that
 * does not compile CUDA (inspect, plan, the CPU paths). Without it, the
 * calls here fail with SC_ERR_UNSUPPORTED naming the library. */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nvrtc.h>

#include "codegen/cuda/cuda.h"
#include "ir/progress.h"

#ifndef SHARDC_CUDA_HOME
#define SHARDC_CUDA_HOME "/usr/local/cuda"
#endif

/* The NVRTC entry points used here, resolved once. */
static struct nvrtc_api {
  bool loaded;
  char error[256];
  nvrtcResult (*Version)(int *, int *);
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetPTX)(nvrtcProgram, char *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *); /* optional */
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
} api;

static void load_nvrtc(void) {
  static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                      SHARDC_CUDA_HOME "/lib64/libnvrtc.so"};
  void *h = NULL;
  for (size_t i = 0; !h && i < sizeof names / sizeof *names; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(api.error, sizeof api.error, "cannot load libnvrtc.so: %s", dlerror());
    return;
  }
#define SYM(f)                                                                  \
  if (!(*(void **)&api.f = dlsym(h, "nvrtc" #f))) {                             \
    snprintf(api.error, sizeof api.error, "libnvrtc.so lacks nvrtc" #f);         \
    return;                                                                     \
  }
  SYM(Version) SYM(GetErrorString) SYM(CreateProgram) SYM(CompileProgram)
  SYM(GetProgramLogSize) SYM(GetProgramLog) SYM(GetPTXSize) SYM(GetPTX) SYM(DestroyProgram)
#undef SYM
  *(void **)&api.GetCUBINSize = dlsym(h, "nvrtcGetCUBINSize");
  *(void **)&api.GetCUBIN = dlsym(h, "nvrtcGetCUBIN");
  api.loaded = true;
}

/* The loaded API, or NULL with the reason in diag (SC_ERR_UNSUPPORTED). */
static const struct nvrtc_api *nvrtc(sc_diag *diag) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_nvrtc);
  if (api.loaded) return &api;
  if (diag) sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "cuda: %s", api.error);
  return NULL;
}
#define nvrtcVersion api.Version
#define nvrtcGetErrorString api.GetErrorString
#define nvrtcCreateProgram api.CreateProgram
#define nvrtcCompileProgram api.CompileProgram
#define nvrtcGetProgramLogSize api.GetProgramLogSize
#define nvrtcGetProgramLog api.GetProgramLog
#define nvrtcGetPTXSize api.GetPTXSize
#define nvrtcGetPTX api.GetPTX
#define nvrtcDestroyProgram api.DestroyProgram

#define NVRTC_CHECK(call, diag)                                                   \
  do {                                                                            \
    nvrtcResult rc_ = (call);                                                     \
    if (rc_ != NVRTC_SUCCESS) {                                                   \
      st = sc_diag_set((diag), rc_ == NVRTC_ERROR_OUT_OF_MEMORY ? SC_ERR_NOMEM    \
                                                               : SC_ERR_INVALID, \
                       NULL, NULL, "nvrtc: %s: %s", #call,                        \
                       nvrtcGetErrorString(rc_));                                 \
      goto done;                                                                  \
    }                                                                             \
  } while (0)

int sc_cuda_nvrtc_version(void) {
  int major = 0, minor = 0;
  if (!nvrtc(NULL) || nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

/* "sm_80", "sm_90a", "compute_90" */
static bool arch_valid(const char *arch) {
  const char *d;
  if (!strncmp(arch, "sm_", 3)) d = arch + 3;
  else if (!strncmp(arch, "compute_", 8)) d = arch + 8;
  else return false;
  if (!isdigit((unsigned char)d[0]) || !isdigit((unsigned char)d[1])) return false;
  size_t n = strspn(d, "0123456789");
  if (n > 3) return false;
  return d[n] == 0 || ((d[n] == 'a' || d[n] == 'f') && d[n + 1] == 0);
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

sc_status sc_cuda_compile_ptx(const char *src, const char *arch, char **ptx,
                              size_t *ptx_len, char **log, sc_diag *diag) {
  return sc_cuda_compile(src, arch, false, ptx, ptx_len, log, diag);
}

/* One NVRTC compile of src for arch: its PTX into *ptx (NUL-terminated,
 * *ptx_len with the NUL) and, where cubin is not NULL, the CUBIN of the
 * same compile into *cubin (*cubin_len bytes of ELF; arch sm_NN). */
static sc_status compile_images(const char *src, const char *arch, char **ptx, size_t *ptx_len,
                                char **cubin, size_t *cubin_len, char **log, sc_diag *diag) {
  sc_status st = SC_OK;
  nvrtcProgram prog = NULL;
  bool created = false;
  char *lg = NULL, *out = NULL, *bin = NULL;
  if (ptx) *ptx = NULL, *ptx_len = 0;
  if (cubin) *cubin = NULL, *cubin_len = 0;
  if (log) *log = NULL;
  if (!src || !arch || !arch_valid(arch))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "cuda: bad GPU architecture '%s' (expected sm_NN or compute_NN)",
                       arch ? arch : "(null)");
  if (!nvrtc(diag)) return diag->status;
  if (cubin && (strncmp(arch, "sm_", 3) != 0 || !api.GetCUBIN || !api.GetCUBINSize))
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda: no CUBIN for '%s' (a real architecture sm_NN and NVRTC 11.1 or "
                       "later are needed)", arch);
  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  const char *opts[] = {arch_opt, "-default-device", "--std=c++17"};

  NVRTC_CHECK(nvrtcCreateProgram(&prog, src, "shardc_kernels.cu", 0, NULL, NULL), diag);
  created = true;
  sc_progress pr; /* one call, as long as it takes: said while it runs */
  sc_progress_begin(&pr, "NVRTC", 0, false);
  sc_progress_set(&pr, 0, arch);
  nvrtcResult crc = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  sc_progress_end(&pr);
  size_t log_n = 0;
  NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &log_n), diag);
  lg = sc_malloc(log_n + 1);
  if (!lg) { st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory"); goto done; }
  lg[0] = 0;
  if (log_n > 0) NVRTC_CHECK(nvrtcGetProgramLog(prog, lg), diag);
  lg[log_n] = 0;
  if (crc != NVRTC_SUCCESS) {
    /* the first ~600 bytes of the log, on one line per message */
    char head[600];
    snprintf(head, sizeof head, "%s", lg);
    st = sc_diag_set(diag, crc == NVRTC_ERROR_OUT_OF_MEMORY ? SC_ERR_NOMEM : SC_ERR_INVALID,
                     NULL, NULL, "nvrtc: compiling for %s failed (%s): %s", arch,
                     nvrtcGetErrorString(crc), head);
    goto done;
  }
  size_t n = 0;
  if (ptx) {
    NVRTC_CHECK(nvrtcGetPTXSize(prog, &n), diag);
    if (!(out = sc_malloc(n + 1))) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
      goto done;
    }
    NVRTC_CHECK(nvrtcGetPTX(prog, out), diag);
    out[n] = 0;
  }
  if (cubin) {
    NVRTC_CHECK(api.GetCUBINSize(prog, &n), diag);
    if (!(bin = sc_malloc(n + 1))) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
      goto done;
    }
    NVRTC_CHECK(api.GetCUBIN(prog, bin), diag);
    bin[n] = 0;
    *cubin = bin;
    *cubin_len = n;
    bin = NULL;
  }
  if (ptx) {
    *ptx = out;
    *ptx_len = strlen(out) + 1;
    out = NULL;
  }

done:
  if (created) nvrtcDestroyProgram(&prog);
  sc_free(out);
  sc_free(bin);
  if (log) *log = lg;
  else sc_free(lg);
  return st;
}

sc_status sc_cuda_compile(const char *src, const char *arch, bool cubin, char **image,
                          size_t *len, char **log, sc_diag *diag) {
  return cubin ? compile_images(src, arch, NULL, NULL, image, len, log, diag)
               : compile_images(src, arch, image, len, NULL, NULL, log, diag);
}

void sc_cuda_build_destroy(sc_cuda_build *b) {
  if (!b) return;
  sc_free(b->source);
  for (int32_t i = 0; i < b->n_archs; i++) {
    sc_free(b->archs[i].ptx);
    sc_free(b->archs[i].cubin);
  }
  sc_free(b->archs);
  sc_free(b->launch);
  sc_free(b);
}

static sc_status build(kir_kernel *const *kernels, int32_t n_kernels,
                       const sc_program *p, const char *archs, bool cubins,
                       sc_cuda_build **out, sc_diag *diag) {
  *out = NULL;
  if (!archs) archs = SC_CUDA_DEFAULT_ARCHS;
  sc_cuda_build *b = sc_calloc(1, sizeof *b);
  if (!b) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
  /* a program's unit also has the kernels its steps use (scatter-adds,
   * implicit-GEMM convolutions): the one cuda_device.c emits */
  sc_status st = p && kernels == p->kernels ? sc_cuda_emit_source(p, &b->source, diag)
                                            : sc_cuda_emit_kernels(kernels, n_kernels, p,
                                                                   &b->source, diag);
  if (st != SC_OK) goto fail;
  b->n_kernels = n_kernels;
  b->launch = sc_calloc((size_t)(n_kernels > 0 ? n_kernels : 1), sizeof *b->launch);
  if (!b->launch) { st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory"); goto fail; }
  for (int32_t i = 0; i < n_kernels; i++) sc_cuda_launch_config(kernels[i], &b->launch[i]);

  int32_t n_archs = 1;
  for (const char *s = archs; *s; s++) n_archs += *s == ',';
  b->archs = sc_calloc((size_t)n_archs, sizeof *b->archs);
  if (!b->archs) { st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory"); goto fail; }
  double t0 = now_seconds();
  for (const char *s = archs; *s;) {
    size_t len = strcspn(s, ",");
    if (len == 0 || len >= sizeof b->archs[0].arch) {
      st = sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "cuda: bad GPU architecture list '%s'", archs);
      goto fail;
    }
    sc_cuda_arch_ptx *a = &b->archs[b->n_archs];
    memcpy(a->arch, s, len);
    a->arch[len] = 0;
    bool real = cubins && strncmp(a->arch, "sm_", 3) == 0;
    st = compile_images(b->source, a->arch, &a->ptx, &a->ptx_len, real ? &a->cubin : NULL,
                        real ? &a->cubin_len : NULL, NULL, diag);
    if (st != SC_OK) goto fail;
    b->n_archs++;
    s += len;
    if (*s == ',') s++;
  }
  if (b->n_archs == 0) {
    st = sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "cuda: empty GPU architecture list");
    goto fail;
  }
  b->compile_seconds = now_seconds() - t0;
  *out = b;
  return SC_OK;
fail:
  sc_cuda_build_destroy(b);
  return st;
}

sc_status sc_cuda_build_program(const sc_program *p, const char *archs,
                                sc_cuda_build **out, sc_diag *diag) {
  return build(p->kernels, p->n_kernels, p, archs, false, out, diag);
}

sc_status sc_cuda_build_program_cubins(const sc_program *p, const char *archs,
                                       sc_cuda_build **out, sc_diag *diag) {
  return build(p->kernels, p->n_kernels, p, archs, true, out, diag);
}

sc_status sc_cuda_build_kernels(kir_kernel *const *kernels, int32_t n_kernels,
                                const char *archs, sc_cuda_build **out,
                                sc_diag *diag) {
  return build(kernels, n_kernels, NULL, archs, false, out, diag);
}
