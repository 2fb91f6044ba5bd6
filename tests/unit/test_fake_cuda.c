/* test_fake_cuda.c — the emulated CUDA driver (runtime/fakecuda/) on its
 * own, through the runtime's driver table (runtime/cuda_driver.h) with
 * SHARDC_CUDA_EMU=1: the semantics the CUDA device relies on, and the
 * misuses the fake driver must catch, each of which a real GPU would only
 * show sometimes.
 *
 * The module is the CUDA backend's prelude (sc_cuda_emit_kernels with no
 * kernel) plus two kernels written here in the emitter's style (an
 * exported __emu trampoline and __emu_info for each):
 *   bump(float *p, long long n)        p[i] += 1 over a grid-stride loop
 *   copy(const float *s, float *d, long long n)
 * Checked:
 *   - a stream's work really runs asynchronously and in order; a second
 *     stream that waits on an event recorded after 40 bumps of a buffer
 *     copies the buffer with all 40 done (every element 40), and the race
 *     check says nothing; the same copy without the wait is one race
 *     violation, at once; after a host synchronisation, none;
 *   - a capture of 3 bumps replays as 3 bumps per cuGraphLaunch, and the
 *     launch arguments were copied at the call (changed afterwards: no
 *     effect);
 *   - a capture whose forked stream is not joined back fails with
 *     CUDA_ERROR_STREAM_CAPTURE_UNJOINED, and allocating during a capture
 *     with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
 *   - freeing memory while work is queued counts a violation
 *     (sc_fake_cuda_violations);
 *   - a PTX image is refused with CUDA_ERROR_INVALID_PTX and the reason
 *     in the JIT error log;
 *   - dynamic shared memory: a block's threads share it (a kernel that
 *     reverses each block's 256 floats through it, across a barrier); a
 *     launch with more than 48 KiB is refused (CUDA_ERROR_INVALID_VALUE, one
 *     violation) until cuFuncSetAttribute allows that much, as on a GPU,
 *     and above 227 KiB it is refused always;
 *   - a launch is race-checked over all its pointer params, not its first
 *     64: a multi-tensor kernel (codegen/multi_tensor.c) of 30 segments
 *     of 4 params, whose last segment's output another stream copies
 *     without waiting, is one violation;
 *   - threads that look up one function of a fresh module at once all get
 *     the same handle (the driver API lets threads share a module; the
 *     lookup once appended racing copies and leaked them);
 *   - threads that call cuInit at once on a fresh copy of the driver (its
 *     own statics) all find the NULL stream made: each synchronises it
 *     right after (the first call once made it after the others had
 *     returned, and they used it NULL). */
#define _GNU_SOURCE /* dladdr */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include <dlfcn.h>

#include "codegen/cuda/cuda.h"
#include "codegen/kir.h"
#include "runtime/cuda_driver.h"

static const sc_cu *cu;
static CUmodule mod;
static char *image; /* the module's text, kept to load fresh copies */
static CUfunction f_bump, f_copy, f_rev;
static long (*violations)(void); /* the fake driver's count */

static const char KERNELS[] =
    "extern \"C\" __global__ void bump(float *p, long long n) {\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] += 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void copy(const float *s, float *d, long long n) {\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) d[i] = s[i];\n"
    "}\n"
    "extern \"C\" __global__ void rev(float *p) {\n"
    "#ifdef SC_CUDA_EMU\n"
    "  float *sh = (float *)sc_emu->current()->dyn;\n"
    "#else\n"
    "  extern __shared__ float sh[];\n"
    "#endif\n"
    "  unsigned t = threadIdx.x, n = blockDim.x;\n"
    "  float *q = p + blockIdx.x * n;\n"
    "  sh[t] = q[t];\n"
    "  __syncthreads();\n"
    "  q[t] = sh[n - 1 - t];\n"
    "}\n"
    "#ifdef SC_CUDA_EMU\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) void rev__emu(void **a) {\n"
    "  rev(*(float **)a[0]);\n"
    "}\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) const long long rev__emu_info[] = "
    "{1, 1, 1, 1, 262144};\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) void bump__emu(void **a) {\n"
    "  bump(*(float **)a[0], *(long long *)a[1]);\n"
    "}\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) const long long bump__emu_info[] = "
    "{2, 0, 1, 1, 262144};\n" /* N floats, written */
    "extern \"C\" __attribute__((visibility(\"default\"))) void copy__emu(void **a) {\n"
    "  copy(*(const float **)a[0], *(float **)a[1], *(long long *)a[2]);\n"
    "}\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) const long long copy__emu_info[] = "
    "{3, 0, 2, 0, 262144, 1, 262144};\n"
    "#endif\n";

#define CU(call) assert_int_equal((call), SC_CUDA_SUCCESS)

static int setup(void **state) {
  (void)state;
  setenv("SHARDC_CUDA_EMU", "1", 1);
  sc_diag d = {0};
  if (sc_cu_load(&cu, &d) != SC_OK) {
    fprintf(stderr, "%s\n", d.msg);
    return -1;
  }
  char *prelude = NULL;
  if (sc_cuda_emit_kernels(NULL, 0, NULL, &prelude, &d) != SC_OK) return -1;
  size_t n = strlen(SC_CU_EMU_IMAGE) + strlen(prelude) + sizeof KERNELS;
  image = malloc(n);
  snprintf(image, n, "%s%s%s", SC_CU_EMU_IMAGE, prelude, KERNELS);
  sc_free(prelude);
  CUresult r = cu->module_load(&mod, image, 0, NULL, NULL);
  if (r != SC_CUDA_SUCCESS) return -1;
  *(void **)&violations = dlsym(cu->lib, "sc_fake_cuda_violations");
  if (!violations) return -1;
  if (cu->module_function(&f_bump, mod, "bump") != SC_CUDA_SUCCESS ||
      cu->module_function(&f_copy, mod, "copy") != SC_CUDA_SUCCESS ||
      cu->module_function(&f_rev, mod, "rev") != SC_CUDA_SUCCESS)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(image);
  return mod ? (cu->module_unload(mod) == SC_CUDA_SUCCESS ? 0 : -1) : 0;
}

enum { N = 1 << 16 };

static void launch_bump(CUstream s, CUdeviceptr p, long long n) {
  void *args[2] = {&p, &n};
  CU(cu->launch_kernel(f_bump, 64, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static float *host_copy(CUdeviceptr p, CUstream s) {
  float *h = malloc(N * sizeof *h);
  CU(cu->memcpy_dtoh(h, p, N * sizeof *h, s));
  CU(cu->stream_synchronize(s));
  return h;
}

static void test_event_orders_streams(void **state) {
  (void)state;
  assert_true(cu->emulated);
  long before = violations();
  CUstream s1, s2;
  CUevent e;
  CUdeviceptr a, b;
  CU(cu->stream_create(&s1, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->stream_create(&s2, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->event_create(&e, SC_CU_EVENT_DISABLE_TIMING));
  CU(cu->mem_alloc(&a, N * sizeof(float)));
  CU(cu->mem_alloc(&b, N * sizeof(float)));
  CU(cu->memset_d8(a, 0, N * sizeof(float), s1));
  for (int i = 0; i < 40; i++) launch_bump(s1, a, N);
  CU(cu->event_record(e, s1));
  CU(cu->stream_wait_event(s2, e, 0));
  long long n = N;
  void *args[3] = {&a, &b, &n};
  CU(cu->launch_kernel(f_copy, 64, 1, 1, 256, 1, 1, 0, s2, args, NULL));
  float *h = host_copy(b, s2);
  for (int i = 0; i < N; i++)
    if (h[i] != 40.0f) fail_msg("b[%d] = %g: the copy did not wait for the bumps", i, h[i]);
  free(h);
  assert_int_equal(violations(), before); /* ordered by the event: no race */

  /* the same without the event wait: the race check sees it at once,
   * whatever the timing */
  CU(cu->stream_synchronize(s1));
  for (int i = 0; i < 3; i++) launch_bump(s1, a, N);
  CU(cu->launch_kernel(f_copy, 64, 1, 1, 256, 1, 1, 0, s2, args, NULL));
  assert_int_equal(violations(), before + 1);
  /* a host synchronisation orders what the host submits after it */
  CU(cu->stream_synchronize(s1));
  CU(cu->stream_synchronize(s2));
  launch_bump(s1, a, N);
  CU(cu->stream_synchronize(s1));
  CU(cu->launch_kernel(f_copy, 64, 1, 1, 256, 1, 1, 0, s2, args, NULL));
  CU(cu->stream_synchronize(s2));
  assert_int_equal(violations(), before + 1);
  CU(cu->stream_synchronize(s1));
  CU(cu->mem_free(a));
  CU(cu->mem_free(b));
  CU(cu->event_destroy(e));
  CU(cu->stream_destroy(s1));
  CU(cu->stream_destroy(s2));
}

static void test_graph_replays(void **state) {
  (void)state;
  CUstream s;
  CUdeviceptr a;
  CU(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->mem_alloc(&a, N * sizeof(float)));
  CU(cu->memset_d8(a, 0, N * sizeof(float), s));
  CU(cu->stream_synchronize(s));
  CU(cu->stream_begin_capture(s, 0));
  long long n = N;
  CUdeviceptr p = a;
  void *args[2] = {&p, &n};
  for (int i = 0; i < 3; i++) CU(cu->launch_kernel(f_bump, 64, 1, 1, 256, 1, 1, 0, s, args, NULL));
  n = 1; /* arguments are copied at the call */
  CUgraph g;
  CUgraphExec x;
  CU(cu->stream_end_capture(s, &g));
  CU(cu->graph_instantiate(&x, g, 0));
  float *h = host_copy(a, s);
  assert_true(h[0] == 0.0f && h[N - 1] == 0.0f); /* capturing ran nothing */
  free(h);
  CU(cu->graph_launch(x, s));
  CU(cu->graph_launch(x, s));
  h = host_copy(a, s);
  for (int i = 0; i < N; i++)
    if (h[i] != 6.0f) fail_msg("a[%d] = %g after two replays of 3 bumps", i, h[i]);
  free(h);
  CU(cu->graph_exec_destroy(x));
  CU(cu->graph_destroy(g));
  CU(cu->mem_free(a));
  CU(cu->stream_destroy(s));
}

static void test_capture_misuse(void **state) {
  (void)state;
  CUstream s1, s2;
  CUevent e;
  CUdeviceptr a, extra = 0;
  CU(cu->stream_create(&s1, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->stream_create(&s2, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->event_create(&e, SC_CU_EVENT_DISABLE_TIMING));
  CU(cu->mem_alloc(&a, N * sizeof(float)));
  CU(cu->stream_begin_capture(s1, 0));
  assert_int_equal(cu->mem_alloc(&extra, 1024), SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cu->stream_synchronize(s1), SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  launch_bump(s1, a, N);
  CU(cu->event_record(e, s1));
  CU(cu->stream_wait_event(s2, e, 0)); /* s2 forks from the capture ... */
  launch_bump(s2, a, N);                /* ... and is never joined back */
  CUgraph g = NULL;
  assert_int_equal(cu->stream_end_capture(s1, &g), SC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  assert_null(g);
  /* joined back, the same capture succeeds */
  CUevent back;
  CU(cu->event_create(&back, SC_CU_EVENT_DISABLE_TIMING));
  CU(cu->stream_begin_capture(s1, 0));
  launch_bump(s1, a, N);
  CU(cu->event_record(e, s1));
  CU(cu->stream_wait_event(s2, e, 0));
  launch_bump(s2, a, N);
  CU(cu->event_record(back, s2));
  CU(cu->stream_wait_event(s1, back, 0));
  CU(cu->stream_end_capture(s1, &g));
  assert_non_null(g);
  CU(cu->graph_destroy(g));
  CU(cu->mem_free(a));
  CU(cu->event_destroy(e));
  CU(cu->event_destroy(back));
  CU(cu->stream_destroy(s1));
  CU(cu->stream_destroy(s2));
}

static void nap(void *ud) {
  (void)ud;
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

static void test_free_while_queued(void **state) {
  (void)state;
  long before = violations();
  CUstream s;
  CUdeviceptr a;
  CU(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->mem_alloc(&a, N * sizeof(float)));
  CU(cu->launch_host_func(s, nap, NULL)); /* holds the stream 0.3 s */
  launch_bump(s, a, N);
  CU(cu->mem_free(a)); /* the bump is still queued: a GPU may run it on freed memory */
  assert_int_equal(violations(), before + 1);
  CU(cu->stream_destroy(s));
}

static void test_ptx_refused(void **state) {
  (void)state;
  char log[512] = "";
  int opts[2] = {SC_CU_JIT_ERROR_LOG_BUFFER, SC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule m = NULL;
  assert_int_equal(cu->module_load(&m, ".version 8.8\n.target sm_90\n", 2, opts, vals),
                   SC_CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(log, "runs no PTX"));
  CUfunction f;
  assert_int_equal(cu->module_function(&f, mod, "no_such_kernel"), SC_CUDA_ERROR_NOT_FOUND);
}

enum { LOOKERS = 8 };

typedef struct {
  CUmodule m;
  pthread_barrier_t *go;
  CUfunction f;
  CUresult rc;
} lookup_arg;

static void *look_up(void *p) {
  lookup_arg *a = p;
  pthread_barrier_wait(a->go);
  a->rc = cu->module_function(&a->f, a->m, "bump");
  return NULL;
}

static void test_concurrent_lookup(void **state) {
  (void)state;
  for (int round = 0; round < 20; round++) {
    CUmodule m = NULL;
    CU(cu->module_load(&m, image, 0, NULL, NULL));
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, LOOKERS);
    pthread_t th[LOOKERS];
    lookup_arg a[LOOKERS];
    for (int i = 0; i < LOOKERS; i++) {
      a[i] = (lookup_arg){.m = m, .go = &go};
      assert_int_equal(pthread_create(&th[i], NULL, look_up, &a[i]), 0);
    }
    for (int i = 0; i < LOOKERS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < LOOKERS; i++) {
      CU(a[i].rc);
      assert_ptr_equal(a[i].f, a[0].f);
    }
    CU(cu->module_unload(m));
  }
}

enum { INITS = 8 };

typedef struct {
  CUresult (*init)(unsigned);
  CUresult (*sync)(CUstream);
  pthread_barrier_t *go;
  CUresult rc;
} init_arg;

static void *init_then_sync(void *p) {
  init_arg *a = p;
  pthread_barrier_wait(a->go);
  a->rc = a->init(0);
  if (a->rc == SC_CUDA_SUCCESS) a->rc = a->sync(NULL);
  return NULL;
}

/* A copy of the fake driver under another name: dlopen loads it as a
 * library of its own, not yet initialised. */
static void *fresh_driver(const char *dir, int round) {
  Dl_info info;
  void *sym = dlsym(cu->lib, "cuInit");
  assert_non_null(sym);
  assert_true(dladdr(sym, &info) && info.dli_fname);
  char path[4096];
  snprintf(path, sizeof path, "%s/libcuda-%d.so", dir, round);
  FILE *in = fopen(info.dli_fname, "rb"), *out = fopen(path, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;)
    assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) fprintf(stderr, "%s\n", dlerror());
  assert_non_null(h);
  unlink(path); /* mapped: the file may go */
  return h; /* never closed: its NULL stream's thread runs until exit */
}

static void test_concurrent_init(void **state) {
  (void)state;
  char dir[] = "/tmp/sc_fake_init_XXXXXX";
  assert_non_null(mkdtemp(dir));
  for (int round = 0; round < 8; round++) {
    void *h = fresh_driver(dir, round);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, INITS);
    pthread_t th[INITS];
    init_arg a[INITS];
    for (int i = 0; i < INITS; i++) {
      a[i] = (init_arg){.go = &go};
      *(void **)&a[i].init = dlsym(h, "cuInit");
      *(void **)&a[i].sync = dlsym(h, "cuStreamSynchronize");
      assert_true(a[i].init && a[i].sync);
      assert_int_equal(pthread_create(&th[i], NULL, init_then_sync, &a[i]), 0);
    }
    for (int i = 0; i < INITS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < INITS; i++) CU(a[i].rc);
  }
  rmdir(dir);
}

static void test_dynamic_shared(void **state) {
  (void)state;
  CUstream s;
  CUdeviceptr a;
  CU(cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->mem_alloc(&a, N * sizeof(float)));
  float *h = malloc(N * sizeof *h);
  for (int i = 0; i < N; i++) h[i] = (float)i;
  CU(cu->memcpy_htod(a, h, N * sizeof *h, s));
  void *args[1] = {&a};
  CU(cu->launch_kernel(f_rev, 4, 1, 1, 256, 1, 1, 256 * sizeof(float), s, args, NULL));
  CU(cu->stream_synchronize(s)); /* the copy in reads h */
  free(h);
  h = host_copy(a, s);
  for (int b = 0; b < 4; b++)
    for (int t = 0; t < 256; t++) assert_float_equal(h[b * 256 + t], (float)(b * 256 + 255 - t), 0);
  assert_float_equal(h[1024], 1024.0f, 0); /* past the grid: untouched */
  free(h);
  long before = violations();
  assert_int_equal(cu->launch_kernel(f_rev, 1, 1, 1, 256, 1, 1, 64 << 10, s, args, NULL),
                   SC_CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(violations(), before + 1);
  CU(cu->func_set_attribute(f_rev, SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
  CU(cu->launch_kernel(f_rev, 1, 1, 1, 256, 1, 1, 64 << 10, s, args, NULL));
  assert_int_equal(cu->launch_kernel(f_rev, 1, 1, 1, 256, 1, 1, 228 << 10, s, args, NULL),
                   SC_CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cu->func_set_attribute(f_rev, SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          228 << 10),
                   SC_CUDA_ERROR_INVALID_VALUE);
  CU(cu->stream_synchronize(s));
  CU(cu->mem_free(a));
  CU(cu->stream_destroy(s));
}

/* o = x * 2 + g, in 30 segments of 64 elements (x, g, scalar s unused but
 * for its pointer, o): 120 pointer params. */
static kir_kernel *wide_kernel(sc_arena *A) {
  enum { SEGS = 30, LEN = 64 };
  kir_kernel *k = kir_kernel_create(A, "wide");
  assert_non_null(k);
  k->outer_rank = 1;
  k->outer_dims[0] = SEGS * LEN;
  k->n_segs = SEGS;
  k->seg_params = 4;
  k->seg_start = sc_arena_array(A, SEGS + 1, sizeof *k->seg_start);
  assert_non_null(k->seg_start);
  for (int32_t s = 0; s < SEGS; s++) {
    kir_add_param(A, k, 4 * s, SC_DTYPE_F32, LEN, false);
    kir_add_param(A, k, 4 * s + 1, SC_DTYPE_F32, LEN, false);
    kir_add_param(A, k, 4 * s + 2, SC_DTYPE_F32, 1, false);
    kir_add_param(A, k, 4 * s + 3, SC_DTYPE_F32, LEN, true);
    k->seg_start[s + 1] = (s + 1) * LEN;
  }
  int32_t i = kir_var(A, k, 0);
  int32_t v = kir_binary(A, k, KIR_MUL, kir_load(A, k, 0, i), kir_const_f(A, k, SC_DTYPE_F32, 2));
  kir_add_store(A, k, 3, i, kir_binary(A, k, KIR_ADD, v, kir_load(A, k, 1, i)));
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (kir_verify(k, &d) != SC_OK) fail_msg("%s", d.msg);
  return k;
}

static void test_wide_launch_checked(void **state) {
  (void)state;
  sc_arena A;
  sc_arena_init(&A);
  kir_kernel *k = wide_kernel(&A);
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *src = NULL;
  if (sc_cuda_emit_kernels(&k, 1, NULL, &src, &d) != SC_OK) fail_msg("%s", d.msg);
  size_t n = strlen(SC_CU_EMU_IMAGE) + strlen(src) + 1;
  char *text = malloc(n);
  snprintf(text, n, "%s%s", SC_CU_EMU_IMAGE, src);
  CUmodule m;
  CUfunction f;
  CU(cu->module_load(&m, text, 0, NULL, NULL));
  CU(cu->module_function(&f, m, "wide"));
  CUstream s1, s2;
  CU(cu->stream_create(&s1, SC_CU_STREAM_NON_BLOCKING));
  CU(cu->stream_create(&s2, SC_CU_STREAM_NON_BLOCKING));
  CUdeviceptr bufs[120], last;
  void *args[122];
  /* N floats each, the extent copy's __emu_info declares: its read of
   * bufs[119] meets no other buffer */
  for (int i = 0; i < 120; i++) {
    CU(cu->mem_alloc(&bufs[i], N * sizeof(float)));
    CU(cu->memset_d8(bufs[i], 0, N * sizeof(float), s1));
    args[i] = &bufs[i];
  }
  CU(cu->mem_alloc(&last, N * sizeof(float)));
  CU(cu->stream_synchronize(s1));
  long long begin = 0, end = 30 * 64;
  args[120] = &begin;
  args[121] = &end;
  long before = violations();
  CU(cu->launch_kernel(f, 8, 1, 1, 256, 1, 1, 0, s1, args, NULL));
  long long count = 64;
  void *cargs[3] = {&bufs[119], &last, &count}; /* the last segment's o, unordered */
  CU(cu->launch_kernel(f_copy, 1, 1, 1, 64, 1, 1, 0, s2, cargs, NULL));
  assert_int_equal(violations(), before + 1);
  CU(cu->stream_synchronize(s1));
  CU(cu->stream_synchronize(s2));
  for (int i = 0; i < 120; i++) CU(cu->mem_free(bufs[i]));
  CU(cu->mem_free(last));
  CU(cu->stream_destroy(s1));
  CU(cu->stream_destroy(s2));
  CU(cu->module_unload(m));
  free(text);
  sc_free(src);
  sc_arena_free(&A);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dynamic_shared),
      cmocka_unit_test(test_event_orders_streams), cmocka_unit_test(test_graph_replays),
      cmocka_unit_test(test_capture_misuse),       cmocka_unit_test(test_free_while_queued),
      cmocka_unit_test(test_ptx_refused),
      cmocka_unit_test(test_wide_launch_checked),
      cmocka_unit_test(test_concurrent_lookup),
      cmocka_unit_test(test_concurrent_init),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
#else
SC_TEST_MAIN_SKIPPED("built without the CUDA backend (NVRTC)")
#endif
