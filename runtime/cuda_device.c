/* cuda_device.c — the CUDA device: programs run on a GPU through the
 * driver API (runtime/cuda_driver.h), or on the emulated GPU.
 *
 * The device implements runtime/device.h's table, asynchronously:
 *
 *   create    loads the driver (sc_cu_load), picks the GPU (opts.rank's:
 *             LOCAL_RANK when set, else rank modulo the device count),
 *             retains its primary context (shared with cuBLASLt and NCCL)
 *             and makes one compute stream and, for the program's
 *             communicators, communication streams.
 *   prepare   emits the program's CUDA C (codegen/cuda), compiles it with
 *             NVRTC for the device's architecture (or opts.gpu_arch) and
 *             loads it: a CUBIN when NVRTC could make one for the exact
 *             architecture, else the PTX, through cuModuleLoadDataEx with
 *             the JIT's error and info logs shown on failure. On the
 *             emulated driver the image is the CUDA C itself
 *             (SC_CU_EMU_IMAGE). A bundle's code (opts.cuda) replaces
 *             the emitted CUDA C; one with CUBINs (a training bundle) is
 *             loaded as it is, NVRTC never called: its CUBIN for the
 *             architecture, else PTX that runs there, else refused.
 *             Launch geometry is the codegen's (sc_cuda_launch_config).
 *   arena     one cuMemAlloc of the memory plan's size: planned equals
 *             allocated on the GPU too. Constants (the weights) get one
 *             more allocation, filled once at bind through a pinned staging
 *             buffer of at most 64 MiB.
 *   steps     kernels are cuLaunchKernel on the compute stream with
 *             argument arrays built once at bind; GEMMs go to the GEMM
 *             engine (runtime/cuda_gemm.h: cuBLASLt on a GPU, the host GEMM
 *             on the emulated one), then their epilogue kernel (unless the
 *             engine applied its activation: sc_gemm.act). A GEMM step
 *             that is a convolution runs as the codegen's implicit-GEMM
 *             kernel for it (codegen/cuda/cuda.h: sc_cuda_conv, its dynamic
 *             shared memory above 48 KB allowed through
 *             cuFuncSetAttribute), and the steps of its im2col, padded copy
 *             and bias kernels are skipped; not with opts.im2col_convs or
 *             SHARDC_CUDA_CONV=im2col, nor for a bundle compiled without
 *             it, nor where the device offers too little shared memory:
 *             then as written (im2col kernels, one GEMM).
 *   comms     a COMM step is handed to its communicator's stream: an event
 *             recorded on the compute stream is waited for there, the
 *             layout change (pack) is a 2-D device copy, the collective
 *             runs, unpack, and an event recorded after it is what the
 *             compute stream waits on: at once for a synchronous step, at
 *             its WAIT step for an async start. The collective itself runs
 *             on that stream: NCCL and cuda-local (thread-ranks sharing
 *             this GPU, every rank's device on the same one) enqueue it
 *             there from the host thread (sc_comm_set_stream; a run's end
 *             then polls the communicators'
 *             asynchronous errors while it waits, against
 *             SHARDC_COMM_TIMEOUT); the CPU communicators (local, tcp, mpi),
 *             whose buffers must be host memory, run it as a host function
 *             on the stream: the emulated GPU's path.
 *   copies    a COPY step (an offloaded activation, codegen/offload.c)
 *             runs on the copy stream after an event of the compute stream,
 *             to or from the host pool, pinned (alloc_host); its WAIT makes
 *             the compute stream wait for an event recorded after it.
 *             SHARDC_CUDA_SKIP_COPY_WAITS=1 drops the waits for the copies
 *             back: a test hook for the emulated driver's race check.
 *   checks    a CHECK step (gather indices within their dim) copies the
 *             indices to pinned memory on the compute stream, checks them
 *             in a host function there, and copies them back with every bad
 *             one made 0, so that the kernels queued after it stay in
 *             bounds while the run fails at its end with the CPU's message.
 *   attention an ATTENTION step launches the codegen's fused forward kernel
 *             for its problem, an ATTENTION_GRAD step the dK/dV kernel and
 *             then the dQ kernel (codegen/cuda/cuda.h: sc_cuda_attn; steps
 *             with the same problem share kernels), on the compute stream,
 *             so they are captured into the graph like any kernel; their
 *             dynamic shared memory above 48 KB allowed through
 *             cuFuncSetAttribute. SHARDC_CUDA_ATTENTION=mma runs the
 *             forward on tensor cores where the problem has that kernel
 *             (bf16/f16, head dims multiples of 16).
 *   scatters  a SCATTER_ADD step (ScatterND with reduction add, embedding
 *             gradients) checks its indices the same way, copies data to
 *             out and runs the codegen's scatter kernel: one thread per
 *             column, tuples in order, so duplicates sum as on the CPU.
 *   graphs    the first run is issued step by step; the second is captured
 *             (cuStreamBeginCapture on the compute stream: the
 *             communication streams join through their events) and every
 *             later run replays that graph with one cuGraphLaunch; not with
 *             opts.no_graph (--no-cuda-graph).
 *   later     runs read later (device.h): pinned slots with an event each
 *             (reserve_async); a run ends without waiting (end_run_async),
 *             its outputs are copied into its slot and its event recorded
 *             (mark); wait_mark synchronises on that event only, and
 *             reports the first failure kept since the last report (a run's
 *             start does not clear one while a marker is outstanding).
 *
 * Errors: a failing driver call during a run is kept (the first one) and
 * returned by end_run with the call and the driver's text; so is a failed
 * collective. Without a driver or device, create fails with
 * SC_ERR_UNSUPPORTED and "no CUDA driver" / "no CUDA device". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cuda/cuda.h"
#include "codegen/device_memory.h"
#include "codegen/program_json.h"
#include "ir/fileio.h"
#include "runtime/comm.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_gemm.h"
#include "runtime/device.h"
#include "runtime/runtime.h"

enum { STAGING_BYTES = 64 << 20, CONST_ALIGN = SC_CUDA_CONST_ALIGN, RUN_TIMES = 4096 };

typedef struct cuda_ctx cuda_ctx;

/* a COMM step's work on its stream */
typedef struct comm_job {
  cuda_ctx *c;
  int32_t step;
  sc_comm *comm;
  sc_dtype t;
  const void *send;
  void *recv;
  int64_t k;           /* the call of a step in row chunks (sc_comm_step_chunk) */
} comm_job;

/* a CHECK step's work, or a SCATTER_ADD step's index check: the indices
 * copied to pinned memory, checked there by a host function, and (CHECK)
 * copied back with each bad one made 0, so that the kernels after it stay
 * in bounds while the run fails */
typedef struct check_job {
  cuda_ctx *c;
  int32_t step;
  int32_t buffer;  /* the indices */
  int64_t dim;     /* valid: [-dim, dim) */
  bool scatter;
  void *pinned;
  int64_t bytes;
} check_job;

/* a convolution run by its implicit-GEMM kernel (fn NULL: as written) */
typedef struct conv_job {
  CUfunction fn;
  sc_cuda_conv cfg;
  uint64_t vals[4]; /* x, w, bias (or 0), y */
  void *args[4];
} conv_job;

/* an ATTENTION step's forward kernel, or an ATTENTION_GRAD step's two
 * backward kernels (dK/dV, then dQ), with their one argument array */
typedef struct attn_job {
  int n;
  CUfunction fn[2];
  sc_cuda_attn_launch cfg[2];
  uint64_t vals[SC_CUDA_ATTN_ARGS]; /* q k v mask o lse d_o dq dk dv (0: none) */
  void *args[SC_CUDA_ATTN_ARGS];
} attn_job;

/* a SCATTER_ADD step's kernel and its arguments */
typedef struct scatter_job {
  CUfunction fn;
  uint64_t vals[6];
  void *args[6];
  unsigned grid;
} scatter_job;

struct cuda_ctx {
  const sc_cu *cu;
  sc_device_opts o;
  const sc_program *p;
  CUdevice dev;
  CUcontext cuctx;
  bool have_ctx;
  int cc_major, cc_minor;
  char arch[16];
  CUstream compute;
  CUstream copy;       /* the copy stream of COPY steps (offloaded
                          activations), or NULL when the program has none */
  bool skip_copy_waits; /* SHARDC_CUDA_SKIP_COPY_WAITS=1: a test hook that
                          drops the compute stream's waits for copies back
                          (the race check must catch it) */
  int32_t n_cstreams;
  CUstream *cstreams;  /* [n_cstreams] communication streams */
  int32_t *stream_of;  /* [n_comms] which communication stream */
  bool *on_stream;     /* [n_comms] the communicator enqueues on it (NCCL) */
  bool any_on_stream;
  CUmodule mod;
  CUfunction *fns;     /* [n_kernels] */
  sc_cuda_launch *launch;
  uint64_t **vals;     /* [n_kernels][n_params + 2]: argument values */
  void ***args;        /* [n_kernels][n_params + 2]: pointers to them */
  CUdeviceptr arena, consts;
  CUdeviceptr *ptrs;   /* [n_buffers] */
  sc_gpu_gemm *gemm;
  int32_t *gemm_id;    /* [n_steps] a GEMM step's entry in the engine */
  bool *gemm_fused;    /* [n_steps] it applies its activation: no epilogue kernel */
  int32_t n_fused;     /* how many do */
  int32_t n_fused_aux; /* of them, writing C too (sc_gemm.act_aux: GELU_AUX) */
  int32_t n_bgrad;     /* GEMMs computing their bias gradient (sc_gemm.bgrad: BGRADA/B) */
  int32_t n_fp8, n_fp8_asked; /* GEMMs with FP8 operands (sc_gemm.fp8): as FP8 matmuls, all */
  const char *fp8_why; /* why the first one that is not was not (static text) */
  conv_job *convs;     /* [n_steps] */
  int32_t n_convs;     /* convolutions run by their implicit-GEMM kernel */
  bool *skip;          /* [n_kernels] their prep and bias kernels: not launched */
  CUevent *ev_fork, *ev_done; /* [n_steps] per COMM step */
  comm_job *jobs;      /* [n_steps] */
  comm_job **chunk_jobs; /* [n_steps] a step in row chunks: one job a call, else NULL */
  check_job *checks;   /* [n_steps] */
  scatter_job *scatters; /* [n_steps] */
  attn_job *attns;     /* [n_steps] */
  int32_t n_attn_mma;  /* attention forwards on tensor cores */

  int64_t runs;
  CUevent ev_t0, ev_t1; /* a run's steps, from begin_run to end_run (timing) */
  float *run_ms;        /* [RUN_TIMES] the device time of each run, the first ones */
  int32_t n_run_ms;
  double last_run_s;    /* the last run's device time; < 0: not timed */
  /* runs read later (device.h): pinned slots, a marker event each */
  int32_t n_slots;
  void **slots;         /* [n_slots] */
  CUevent *marks;       /* [n_slots] */
  int64_t outstanding;  /* markers recorded and not yet waited for */
  bool capturing;
  CUgraph graph;
  CUgraphExec exec;
  bool partial_run;     /* this run skips steps (begin_run's whole false) */
  double compile_s;
  char image_kind[16]; /* what was loaded: "cubin", "ptx", "emulated",
                          "bundle cubin", "bundle ptx", "cached cubin" */
  char source_sha[65]; /* SHA-256 of the CUDA C (the cache's key), or "" */
  const char *cache;   /* SHARDC_CUDA_CACHE's word on it, or NULL */
  size_t free_at_create; /* cuMemGetInfo's free bytes before anything */
  int64_t const_bytes, arena_bytes;
  pthread_mutex_t mu;  /* err, from stream threads */
  sc_diag err;
};

/* Keeps the first failure since the last end_run (thread-safe): of a run's
 * steps, or of a copy between runs (copy_in before a run, copy_out after
 * one, zero, sync), which have no status of their own. end_run reports it
 * and clears it, so a failure between runs fails the next run and is
 * never dropped. */
static void fail(cuda_ctx *c, const sc_diag *d) {
  pthread_mutex_lock(&c->mu);
  if (c->err.status == SC_OK) c->err = *d;
  pthread_mutex_unlock(&c->mu);
}

/* A driver call during a run: a failure is kept for end_run. */
static void check_run(cuda_ctx *c, CUresult r, const char *call) {
  if (r == SC_CUDA_SUCCESS) return;
  sc_diag d = {0};
  sc_cu_check(c->cu, r, call, NULL, &d);
  fail(c, &d);
}

#define CK(call, what)                                                                  \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != SC_CUDA_SUCCESS) return sc_cu_check(c->cu, r_, #call, what, diag);        \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

sc_status sc_cuda_probe_device(sc_cuda_probe *out, sc_diag *diag) {
  memset(out, 0, sizeof *out);
#if !SHARDC_HAVE_CUDA
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "cuda device: shardc was built without the CUDA backend (NVRTC)");
#else
  const sc_cu *cu;
  sc_status st = sc_cu_load(&cu, diag);
  if (st != SC_OK) return st;
  int count = 0;
  CUdevice dev;
  CUcontext ctx;
  CUresult r = cu->device_count(&count);
  if (r == SC_CUDA_SUCCESS) r = cu->device_get(&dev, sc_cu_ordinal(0, count > 0 ? count : 1));
  if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuDeviceGet", "choosing the device", diag);
  cu->device_name(out->name, sizeof out->name, dev);
  int major = 0, minor = 0;
  cu->device_attribute(&major, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cu->device_attribute(&minor, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  snprintf(out->arch, sizeof out->arch, "sm_%d%d", major, minor);
  if ((r = cu->ctx_retain(&ctx, dev)) != SC_CUDA_SUCCESS)
    return sc_cu_check(cu, r, "cuDevicePrimaryCtxRetain", "the primary context", diag);
  size_t free_b = 0, total = 0;
  r = cu->ctx_set_current(ctx);
  if (r == SC_CUDA_SUCCESS) r = cu->mem_get_info(&free_b, &total);
  cu->ctx_release(dev);
  if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuMemGetInfo", NULL, diag);
  out->total_bytes = (int64_t)total;
  out->used_bytes = total > free_b ? (int64_t)(total - free_b) : 0;
  out->emulated = cu->emulated;
  return SC_OK;
#endif
}

static sc_status cuda_create(const sc_device_opts *o, void **out, sc_diag *diag) {
  *out = NULL;
  const sc_cu *cu;
#if !SHARDC_HAVE_CUDA
  (void)cu;
  (void)o;
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "cuda device: shardc was built without the CUDA backend (NVRTC)");
#endif
  sc_status st = sc_cu_load(&cu, diag);
  if (st != SC_OK) return st;
  cuda_ctx *c = sc_calloc(1, sizeof *c);
  if (!c) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  c->cu = cu;
  c->o = *o;
  pthread_mutex_init(&c->mu, NULL);
  sc_diag_clear(&c->err);
  *out = c;
  int count = 0;
  CK(cu->device_count(&count), "counting devices");
  /* cuda-local: every thread-rank of this process on one GPU (LOCAL_RANK's
   * or the first), so that they share its primary context and memory */
  bool shared_gpu = false;
  for (int32_t i = 0; i < o->n_comms; i++)
    shared_gpu |= strcmp(sc_comm_backend(o->comms[i]), "cuda-local") == 0;
  CK(cu->device_get(&c->dev, sc_cu_ordinal(shared_gpu ? 0 : o->rank, count)),
     "choosing the device");
  CK(cu->device_attribute(&c->cc_major, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev),
     NULL);
  CK(cu->device_attribute(&c->cc_minor, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev),
     NULL);
  snprintf(c->arch, sizeof c->arch, "sm_%d%d", c->cc_major, c->cc_minor);
  CK(cu->ctx_retain(&c->cuctx, c->dev), "the primary context");
  c->have_ctx = true;
  CK(cu->ctx_set_current(c->cuctx), NULL);
  size_t total = 0;
  CK(cu->mem_get_info(&c->free_at_create, &total), NULL);
  CK(cu->stream_create(&c->compute, SC_CU_STREAM_NON_BLOCKING), "the compute stream");
  CK(cu->event_create(&c->ev_t0, 0), "a timing event");
  CK(cu->event_create(&c->ev_t1, 0), "a timing event");
  c->run_ms = sc_malloc(RUN_TIMES * sizeof *c->run_ms);
  if (!c->run_ms) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  /* one stream per communicator when they may run at once, else one */
  bool concurrent = true;
  for (int32_t i = 0; i < o->n_comms; i++) {
    concurrent &= sc_comm_concurrent(o->comms[i]);
    if (!sc_comm_any_thread(o->comms[i]))
      return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "cuda device: the communicator must be usable from the stream's "
                         "thread (MPI without MPI_THREAD_MULTIPLE is not)");
  }
  c->n_cstreams = o->n_comms == 0 ? 0 : concurrent ? o->n_comms : 1;
  c->cstreams = sc_calloc((size_t)c->n_cstreams + 1, sizeof *c->cstreams);
  c->stream_of = sc_calloc((size_t)o->n_comms + 1, sizeof *c->stream_of);
  c->on_stream = sc_calloc((size_t)o->n_comms + 1, sizeof *c->on_stream);
  if (!c->cstreams || !c->stream_of || !c->on_stream)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < o->n_comms; i++) c->stream_of[i] = concurrent ? i : 0;
  for (int32_t i = 0; i < c->n_cstreams; i++)
    CK(cu->stream_create(&c->cstreams[i], SC_CU_STREAM_NON_BLOCKING), "a communication stream");
  /* NCCL and cuda-local enqueue on the communication streams; the CPU
   * communicators run as host functions there, on the emulated GPU only
   * (their buffers are host memory); NCCL needs a real GPU, cuda-local runs
   * on either (its copies and kernels go through this driver) */
  bool uncapturable = false;
  for (int32_t i = 0; i < o->n_comms; i++) {
    bool streams = sc_comm_has_streams(o->comms[i]);
    bool here = strcmp(sc_comm_backend(o->comms[i]), "cuda-local") == 0;
    if (streams == cu->emulated && !here)
      return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "cuda device: the %s communicator %s", sc_comm_backend(o->comms[i]),
                         cu->emulated ? "needs a real GPU (the emulated one has host memory)"
                                      : "works on host memory: a mesh on GPUs needs --comm "
                                        "nccl, or --comm cuda-local for thread-ranks on one GPU "
                                        "(or SHARDC_CUDA_EMU=1 for the emulated GPU)");
    uncapturable |= streams && !sc_comm_capturable(o->comms[i]);
    if (!streams) continue;
    if ((st = sc_comm_set_stream(o->comms[i], c->cstreams[c->stream_of[i]], diag)) != SC_OK)
      return st;
    c->on_stream[i] = c->any_on_stream = true;
  }
  if (uncapturable && !c->o.no_graph) { /* runtime/comm_cuda_local.c says why */
    c->o.no_graph = true;
    static atomic_flag said = ATOMIC_FLAG_INIT; /* once per process */
    if (!atomic_flag_test_and_set(&said))
      fprintf(stderr, "shardc: note: cuda: --comm cuda-local runs without CUDA graphs (each "
                      "rank's graph would wait on events of the other ranks' streams, which "
                      "a capture cannot order on replay)\n");
  }
  return SC_OK;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* SHARDC_CUDA_VERBOSE=1, at the end: the GPU's time for a run's steps (from
 * begin_run to end_run on the compute stream, by events), without the
 * copies of inputs in and outputs out that `shardc run --repeat` times. */
static void report_times(cuda_ctx *c) {
  const char *v = getenv("SHARDC_CUDA_VERBOSE");
  if (!v || strcmp(v, "1") != 0 || c->n_run_ms == 0) return;
  int32_t n = c->n_run_ms;
  qsort(c->run_ms, (size_t)n, sizeof *c->run_ms, cmp_float);
  fprintf(stderr,
          "shardc: cuda: rank %d: device time of a run's steps: median %.3f ms, min %.3f ms "
          "over %d runs\n",
          c->o.rank, (double)c->run_ms[n / 2], (double)c->run_ms[0], (int)n);
}

static void free_slots(cuda_ctx *c) {
  for (int32_t k = 0; k < c->n_slots; k++) {
    if (c->slots[k]) c->cu->mem_free_host(c->slots[k]);
    if (c->marks[k]) c->cu->event_destroy(c->marks[k]);
  }
  sc_free(c->slots);
  sc_free(c->marks);
  c->slots = NULL;
  c->marks = NULL;
  c->n_slots = 0;
}

static void cuda_destroy(void *ctx) {
  cuda_ctx *c = ctx;
  if (!c) return;
  const sc_cu *cu = c->cu;
  if (c->compute) cu->stream_synchronize(c->compute);
  for (int32_t i = 0; i < c->n_cstreams; i++)
    if (c->cstreams[i]) cu->stream_synchronize(c->cstreams[i]);
  if (c->copy) cu->stream_synchronize(c->copy);
  for (int32_t i = 0; c->on_stream && i < c->o.n_comms; i++)
    if (c->on_stream[i]) sc_comm_set_stream(c->o.comms[i], NULL, &(sc_diag){0});
  report_times(c);
  free_slots(c);
  if (c->ev_t0) cu->event_destroy(c->ev_t0);
  if (c->ev_t1) cu->event_destroy(c->ev_t1);
  sc_free(c->run_ms);
  if (c->exec) cu->graph_exec_destroy(c->exec);
  if (c->graph) cu->graph_destroy(c->graph);
  for (int32_t i = 0; c->p && i < c->p->n_steps; i++) {
    if (c->ev_fork && c->ev_fork[i]) cu->event_destroy(c->ev_fork[i]);
    if (c->ev_done && c->ev_done[i]) cu->event_destroy(c->ev_done[i]);
  }
  sc_gpu_gemm_destroy(c->gemm);
  if (c->consts) cu->mem_free(c->consts);
  if (c->mod) cu->module_unload(c->mod);
  for (int32_t i = 0; i < c->n_cstreams; i++)
    if (c->cstreams[i]) cu->stream_destroy(c->cstreams[i]);
  if (c->copy) cu->stream_destroy(c->copy);
  if (c->compute) cu->stream_destroy(c->compute);
  if (c->have_ctx) cu->ctx_release(c->dev);
  for (int32_t k = 0; c->p && k < c->p->n_kernels; k++) {
    if (c->vals) sc_free(c->vals[k]);
    if (c->args) sc_free(c->args[k]);
  }
  sc_free(c->vals);
  sc_free(c->args);
  sc_free(c->fns);
  sc_free(c->launch);
  sc_free(c->ptrs);
  sc_free(c->gemm_id);
  sc_free(c->gemm_fused);
  sc_free(c->convs);
  sc_free(c->skip);
  sc_free(c->ev_fork);
  sc_free(c->ev_done);
  for (int32_t i = 0; c->checks && c->p && i < c->p->n_steps; i++)
    if (c->checks[i].pinned) cu->mem_free_host(c->checks[i].pinned);
  sc_free(c->checks);
  sc_free(c->scatters);
  sc_free(c->attns);
  for (int32_t i = 0; c->chunk_jobs && c->p && i < c->p->n_steps; i++) sc_free(c->chunk_jobs[i]);
  sc_free(c->chunk_jobs);
  sc_free(c->jobs);
  sc_free(c->cstreams);
  sc_free(c->stream_of);
  sc_free(c->on_stream);
  pthread_mutex_destroy(&c->mu);
  sc_free(c);
}

static bool cuda_supports_step(void *ctx, const sc_program *p, const sc_step *s) {
  cuda_ctx *c = ctx;
  switch (s->kind) {
  case SC_STEP_KERNEL: return s->kernel >= 0 && s->kernel < p->n_kernels;
  case SC_STEP_GEMM: return sc_gemm_problem(p, s) == NULL;
  case SC_STEP_COMM:
  case SC_STEP_WAIT:
  case SC_STEP_COPY: return true; /* on the copy stream, pinned host memory */
  case SC_STEP_CHECK: return true; /* checked on the host, in stream order */
  case SC_STEP_SCATTER_ADD: { /* f32/f64 rows, i32/i64 indices (sc_cuda_scatter_kernel_name) */
    const sc_scatter_step *x = &s->scatter;
    sc_dtype vt = p->buffers[x->out].dtype, it = p->buffers[x->indices].dtype;
    (void)c;
    return (vt == SC_DTYPE_F32 || vt == SC_DTYPE_F64) &&
           (it == SC_DTYPE_I32 || it == SC_DTYPE_I64);
  }
  case SC_STEP_ATTENTION:
  case SC_STEP_ATTENTION_GRAD: { /* the codegen's fused attention kernels */
#if SHARDC_HAVE_CUDA
    if (sc_attention_problem(p, s)) return false;
    sc_cuda_attn a;
    sc_cuda_attn_of_step(p, s, &a);
    return sc_cuda_attn_problem(&a) == NULL;
#else
    return false;
#endif
  }
  default: return false;
  }
}

/* Loads one image; on failure the driver's JIT logs go into diag. */
static sc_status load_image(cuda_ctx *c, const void *image, const char *kind, sc_diag *diag) {
  const sc_cu *cu = c->cu;
  char err_log[8192] = "", info_log[8192] = "";
  int opts[4] = {SC_CU_JIT_ERROR_LOG_BUFFER, SC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                 SC_CU_JIT_INFO_LOG_BUFFER, SC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *vals[4] = {err_log, (void *)(uintptr_t)sizeof err_log, info_log,
                   (void *)(uintptr_t)sizeof info_log};
  CUresult r = cu->module_load(&c->mod, image, 4, opts, vals);
  if (r == SC_CUDA_SUCCESS) {
    snprintf(c->image_kind, sizeof c->image_kind, "%s", kind);
    return SC_OK;
  }
  c->mod = NULL;
  const char *text = NULL;
  cu->error_string(r, &text);
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                     "cuda device: loading the kernels (%s) failed: %s (%d): %s%s%s", kind,
                     text ? text : "?", (int)r, err_log, info_log[0] ? "; " : "", info_log);
}

/* Which images to try (SHARDC_CUDA_MODULE=cubin|ptx forces one): a CUBIN
 * for the architecture first, then the PTX. */
static bool want_image(const char *kind) {
  const char *m = getenv("SHARDC_CUDA_MODULE");
  return !m || !*m || strcmp(m, kind) == 0;
}

/* 90 for "sm_90" or "compute_90"; -1 for anything else, an arch-specific
 * "sm_90a" included (its PTX runs on that architecture only). */
static int arch_number(const char *arch) {
  const char *d = strncmp(arch, "sm_", 3) == 0 ? arch + 3
                  : strncmp(arch, "compute_", 8) == 0 ? arch + 8 : NULL;
  if (!d || !d[0] || strspn(d, "0123456789") != strlen(d) || strlen(d) > 3) return -1;
  return atoi(d);
}

/* A bundle compiled ahead with its CUBINs (a training bundle: the GPU
 * compiles nothing): the CUBIN for arch; where there is none for it, or the
 * driver refuses it (a driver older than the NVRTC that made it), the PTX
 * of the newest architecture not above arch, which the driver compiles
 * (PTX runs on its architecture and every later one; an arch-specific
 * sm_NNa only on its own). A GPU older than every architecture of the
 * bundle is refused, naming them; so is the emulated GPU (an sm_90), which
 * then runs the bundle's CUDA C (*emulate set). */
static sc_status load_bundle_code(cuda_ctx *c, const char *arch, bool *emulate, sc_diag *diag) {
  const sc_cuda_code *code = &c->o.cuda;
  int want = arch_number(arch);
  int32_t cubin = -1, ptx = -1;
  char have[256] = "";
  *emulate = false;
  for (int32_t i = 0; i < code->n_archs; i++) {
    size_t n = strlen(have);
    snprintf(have + n, sizeof have - n, "%s%s", n ? ", " : "", code->archs[i]);
    if (code->cubin[i] && strcmp(code->archs[i], arch) == 0) cubin = i;
    int v = arch_number(code->archs[i]);
    bool runs = strcmp(code->archs[i], arch) == 0 || (v >= 0 && want >= 0 && v <= want);
    if (runs && code->ptx[i] && (ptx < 0 || v > arch_number(code->archs[ptx]))) ptx = i;
  }
  if (cubin < 0 && ptx < 0)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: the bundle's kernels are compiled for %s, none of which "
                       "runs on this GPU, %s (a CUBIN runs on its own architecture, PTX on its "
                       "own and later ones): compile the model again with --gpu-arch %s",
                       have, arch, arch);
  if (c->cu->emulated) {
    *emulate = true;
    return SC_OK;
  }
  sc_diag cd = {0};
  sc_diag_clear(&cd);
  if (cubin >= 0 && want_image("cubin") &&
      load_image(c, code->cubin[cubin], "bundle cubin", &cd) == SC_OK)
    return SC_OK;
  if (ptx >= 0 && want_image("ptx")) return load_image(c, code->ptx[ptx], "bundle ptx", diag);
  if (cd.status != SC_OK) {
    *diag = cd;
    return cd.status;
  }
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "cuda device: SHARDC_CUDA_MODULE=%s leaves none of the bundle's images "
                     "for %s (it has %s%s)", getenv("SHARDC_CUDA_MODULE"), arch,
                     cubin >= 0 ? "a CUBIN" : "PTX", cubin >= 0 && ptx >= 0 ? " and PTX" : "");
}

/* SHARDC_CUDA_CACHE=DIR: CUBINs by content, DIR/<SHA-256 of the CUDA
 * C>.<arch>.cubin (tests/gpu/pack.sh puts the train-speed programs' there,
 * compiled ahead). The path of src's for arch (sc_malloc'd), or NULL when
 * the variable is unset or empty. */
static char *cache_path(cuda_ctx *c, const char *src, const char *arch) {
  const char *dir = getenv("SHARDC_CUDA_CACHE");
  if (!dir || !*dir) return NULL;
  sc_sha256_hex(src, strlen(src), c->source_sha);
  size_t n = strlen(dir) + strlen(c->source_sha) + strlen(arch) + 16;
  char *path = sc_malloc(n);
  if (path) snprintf(path, n, "%s/%s.%s.cubin", dir, c->source_sha, arch);
  return path;
}

/* The cached CUBIN at path (sc_malloc'd), or NULL when there is none or it
 * is not an ELF image (at most 1 GiB). */
static char *cache_read(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NULL;
  struct stat sb;
  char *data = NULL;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= 64 && sb.st_size < (1 << 30) &&
      (data = sc_malloc((size_t)sb.st_size))) {
    size_t got = 0;
    ssize_t r = 1;
    while (got < (size_t)sb.st_size && (r = read(fd, data + got, (size_t)sb.st_size - got)) > 0)
      got += (size_t)r;
    if (got != (size_t)sb.st_size || memcmp(data, "\x7f" "ELF", 4) != 0) {
      sc_free(data);
      data = NULL;
    }
  }
  close(fd);
  return data;
}

#if SHARDC_HAVE_CUDA
/* Keeps a CUBIN NVRTC made in the cache (ir/fileio.h's commit: written
 * aside, then renamed, so a reader never sees half of one); a folder that
 * cannot take it is left alone, the run goes on. */
static void cache_write(const char *path, const char *image, size_t len) {
  sc_file_commit fc;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_file_commit_begin(&fc, path, &d) != SC_OK) return;
  if (fwrite(image, 1, len, fc.f) != len)
    sc_file_commit_abort(&fc);
  else
    (void)sc_file_commit_end(&fc, &d);
}
#endif

/* Loads the module: the CUDA C on the emulated driver; a bundle's own
 * CUBIN (load_bundle_code) where it has CUBINs; else a CUBIN that
 * NVRTC makes for the architecture, falling back to a bundle's PTX for it
 * or the PTX NVRTC makes of the source (a driver older than the toolkit
 * refuses the CUBIN and may JIT the PTX). */
static sc_status load_module(cuda_ctx *c, const char *src, sc_diag *diag) {
  const sc_cu *cu = c->cu;
  const sc_cuda_code *code = &c->o.cuda;
  char *image = NULL;
  sc_status st = SC_OK;
  const char *arch = c->o.gpu_arch ? c->o.gpu_arch : c->arch;
  const char *given = NULL;
  bool cubins = false, emulate = false;
  for (int32_t i = 0; i < code->n_archs; i++) {
    if (!cu->emulated && strcmp(code->archs[i], arch) == 0) given = code->ptx[i];
    cubins |= code->cubin && code->cubin[i];
  }
  if (cubins && ((st = load_bundle_code(c, arch, &emulate, diag)) != SC_OK || !emulate))
    return st;
  char *cpath = cubins ? NULL : cache_path(c, src, arch);
  char *cached = cpath ? cache_read(cpath) : NULL;
  c->cache = !cpath ? NULL : cached ? "in SHARDC_CUDA_CACHE" : "not in SHARDC_CUDA_CACHE";
  bool loaded = false; /* the cached CUBIN, else NVRTC's (the emulated GPU: the CUDA C) */
  if (cached && !cu->emulated && want_image("cubin")) {
    loaded = load_image(c, cached, "cached cubin", &(sc_diag){0}) == SC_OK;
    if (!loaded) c->cache = "SHARDC_CUDA_CACHE's CUBIN refused by the driver";
  }
  sc_free(cached);
  if (loaded) {
    sc_free(cpath);
    return SC_OK;
  }
#if SHARDC_HAVE_CUDA
  size_t len = 0;
  if (!cu->emulated && want_image("cubin")) {
    sc_diag cd = {0};
    char *log = NULL;
    if (sc_cuda_compile(src, arch, true, &image, &len, &log, &cd) == SC_OK) {
      st = load_image(c, image, "cubin", &cd);
      if (st == SC_OK && cpath) cache_write(cpath, image, len);
      sc_free(image);
      image = NULL;
    }
    sc_free(log);
    if (cd.status == SC_OK) {
      sc_free(cpath);
      return SC_OK;
    }
    if (!want_image("ptx")) {
      sc_free(cpath);
      *diag = cd;
      return cd.status;
    }
    st = SC_OK; /* on to the PTX */
  }
#endif
  sc_free(cpath);
  if (given) {
    image = sc_strdup(given);
    if (!image) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  } else if (cu->emulated) {
    size_t hl = strlen(SC_CU_EMU_IMAGE), sl = strlen(src);
    image = sc_malloc(hl + sl + 1);
    if (!image) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    memcpy(image, SC_CU_EMU_IMAGE, hl);
    memcpy(image + hl, src, sl + 1);
  } else {
#if SHARDC_HAVE_CUDA
    char *log = NULL;
    st = sc_cuda_compile_ptx(src, arch, &image, &len, &log, diag);
    sc_free(log);
    if (st != SC_OK) return st;
#else
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda device: built without NVRTC, so kernels for %s cannot be "
                       "compiled here (a cuda bundle with PTX for it can run)", arch);
#endif
  }
  st = load_image(c, image, cu->emulated ? "emulated" : "ptx", diag);
  sc_free(image);
  return st;
}

/* Whether GEMM g may apply its activation in the product (sc_gemm.act):
 * act_out is then written during the product, so it must be C's own
 * storage or apart from every operand (the memory plan may give it the
 * storage of an operand that dies before the epilogue kernel would run).
 * With act_aux C is written too (GELU_AUX: tanh GELU only), so act_out
 * must be apart from C. */
static bool act_in_product(const sc_program *p, const sc_gemm *g) {
  if (g->act == SC_GEMM_ACT_NONE || g->act_out < 0 || g->act_out >= p->n_buffers) return false;
  if (g->act_aux && g->act != SC_GEMM_ACT_GELU_TANH) return false;
  if (g->act == SC_GEMM_ACT_DGELU_TANH && /* DGELU reads act_in during the product */
      (g->act_in < 0 || g->act_in >= p->n_buffers || g->bias >= 0 ||
       !sc_program_disjoint(p, g->act_out, g->act_in)))
    return false;
  if (!g->act_aux && sc_program_same_address(p, g->act_out, g->c)) return true;
  return sc_program_disjoint(p, g->act_out, g->a) && sc_program_disjoint(p, g->act_out, g->b) &&
         (g->bias < 0 || sc_program_disjoint(p, g->act_out, g->bias)) &&
         sc_program_disjoint(p, g->act_out, g->c);
}

/* Whether GEMM g may compute its bias gradient in the product (sc_gemm.bgrad):
 * bgrad_out is then written while the operands are read and C written, so
 * it must be apart from them (the memory plan keeps it so). */
static bool bgrad_in_product(const sc_program *p, const sc_gemm *g) {
  if (g->bgrad == SC_GEMM_BGRAD_NONE || g->act != SC_GEMM_ACT_NONE || g->bgrad_out < 0 ||
      g->bgrad_out >= p->n_buffers)
    return false;
  return sc_program_disjoint(p, g->bgrad_out, g->a) && sc_program_disjoint(p, g->bgrad_out, g->b) &&
         sc_program_disjoint(p, g->bgrad_out, g->c);
}

/* The convolutions that run as the codegen's implicit-GEMM kernels (see the
 * top of the file). */
static sc_status prepare_convs(cuda_ctx *c, sc_diag *diag) {
#if SHARDC_HAVE_CUDA
  const sc_program *p = c->p;
  const sc_cu *cu = c->cu;
  const char *mode = getenv("SHARDC_CUDA_CONV");
  if (c->o.im2col_convs || (mode && strcmp(mode, "im2col") == 0)) return SC_OK;
  int optin = SC_CU_SHARED_DEFAULT_BYTES;
  if (cu->device_attribute(&optin, SC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                           c->dev) != SC_CUDA_SUCCESS)
    optin = SC_CU_SHARED_DEFAULT_BYTES;
  for (int32_t i = 0; i < p->n_steps; i++) {
    conv_job *j = &c->convs[i];
    if (!sc_cuda_conv_config(p, i, &j->cfg) || j->cfg.shared_bytes > optin) continue;
    CUfunction fn = NULL;
    if (cu->module_function(&fn, c->mod, j->cfg.name) != SC_CUDA_SUCCESS)
      continue; /* a bundle's source from before: as written */
    if (j->cfg.shared_bytes > SC_CU_SHARED_DEFAULT_BYTES) {
      CUresult r = cu->func_set_attribute(fn, SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          j->cfg.shared_bytes);
      if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuFuncSetAttribute", j->cfg.name, diag);
    }
    j->fn = fn;
    for (int a = 0; a < 4; a++) j->args[a] = &j->vals[a];
    const sc_conv_geom *v = &p->steps[i].gemm.conv;
    int32_t ks[3] = {v->prep[0], v->prep[1], v->bias_kernel};
    for (int q = 0; q < 3; q++)
      if (ks[q] >= 0 && ks[q] < p->n_kernels) c->skip[ks[q]] = true;
    c->n_convs++;
  }
#else
  (void)c;
  (void)diag;
#endif
  return SC_OK;
}

/* The fused attention steps' kernels (codegen/cuda/cuda.h: sc_cuda_attn),
 * each kernel's dynamic shared memory limit raised above 48 KB where it
 * needs more; a device that offers less than a kernel needs is an error. */
static sc_status prepare_attention(cuda_ctx *c, sc_diag *diag) {
#if SHARDC_HAVE_CUDA
  const sc_program *p = c->p;
  const sc_cu *cu = c->cu;
  int optin = -1;
  const char *mode = getenv("SHARDC_CUDA_ATTENTION");
  bool mma = mode && strcmp(mode, "mma") == 0;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_ATTENTION && s->kind != SC_STEP_ATTENTION_GRAD) continue;
    attn_job *j = &c->attns[i];
    sc_cuda_attn a;
    sc_cuda_attn_of_step(p, s, &a);
    int32_t id = sc_cuda_attn_id(p, i);
    j->n = s->kind == SC_STEP_ATTENTION ? 1 : 2;
    for (int k = 0; k < j->n; k++) {
      sc_cuda_attn_pass pass = s->kind == SC_STEP_ATTENTION ? SC_CUDA_ATTN_FWD
                               : k == 0                     ? SC_CUDA_ATTN_BWD_KV
                                                            : SC_CUDA_ATTN_BWD_Q;
      if (pass == SC_CUDA_ATTN_FWD && mma && sc_cuda_attn_mma_ok(&a)) {
        pass = SC_CUDA_ATTN_FWD_MMA;
        c->n_attn_mma++;
      }
      sc_cuda_attn_launch *l = &j->cfg[k];
      sc_cuda_attn_launch_config(&a, id, pass, l);
      CUresult r = cu->module_function(&j->fn[k], c->mod, l->name);
      if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuModuleGetFunction", l->name, diag);
      if (l->shared_bytes <= SC_CU_SHARED_DEFAULT_BYTES) continue;
      if (optin < 0 &&
          cu->device_attribute(&optin, SC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                               c->dev) != SC_CUDA_SUCCESS)
        optin = SC_CU_SHARED_DEFAULT_BYTES;
      if (l->shared_bytes > optin)
        return sc_diag_set(diag, SC_ERR_UNSUPPORTED, s->origin, NULL,
                           "cuda device: step %d: %s needs %d bytes of shared memory, the device "
                           "offers %d",
                           (int)i, l->name, l->shared_bytes, optin);
      r = cu->func_set_attribute(j->fn[k], SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 l->shared_bytes);
      if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuFuncSetAttribute", l->name, diag);
    }
    for (int k = 0; k < SC_CUDA_ATTN_ARGS; k++) j->args[k] = &j->vals[k];
  }
#else
  (void)c;
  (void)diag;
#endif
  return SC_OK;
}

static sc_status cuda_prepare(void *ctx, const sc_program *p, sc_diag *diag) {
  cuda_ctx *c = ctx;
  const sc_cu *cu = c->cu;
  c->p = p;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (cuda_supports_step(c, p, s)) continue;
    const char *why = s->kind == SC_STEP_GEMM ? sc_gemm_problem(p, s) : "unsupported";
    if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
      why = sc_attention_problem(p, s);
#if SHARDC_HAVE_CUDA
      sc_cuda_attn a;
      if (!why) sc_cuda_attn_of_step(p, s, &a), why = sc_cuda_attn_problem(&a);
#else
      why = "built without NVRTC";
#endif
    }
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, s->origin, NULL, "cuda device: step %d: %s",
                       (int)i, why ? why : "unsupported");
  }
  size_t nk = (size_t)(p->n_kernels > 0 ? p->n_kernels : 1);
  size_t ns = (size_t)(p->n_steps > 0 ? p->n_steps : 1);
  c->fns = sc_calloc(nk, sizeof *c->fns);
  c->launch = sc_calloc(nk, sizeof *c->launch);
  c->vals = sc_calloc(nk, sizeof *c->vals);
  c->args = sc_calloc(nk, sizeof *c->args);
  c->ptrs = sc_calloc((size_t)(p->n_buffers > 0 ? p->n_buffers : 1), sizeof *c->ptrs);
  c->ev_fork = sc_calloc(ns, sizeof *c->ev_fork);
  c->ev_done = sc_calloc(ns, sizeof *c->ev_done);
  c->jobs = sc_calloc(ns, sizeof *c->jobs);
  c->chunk_jobs = sc_calloc(ns, sizeof *c->chunk_jobs);
  c->gemm_id = sc_calloc(ns, sizeof *c->gemm_id);
  c->gemm_fused = sc_calloc(ns, sizeof *c->gemm_fused);
  c->convs = sc_calloc(ns, sizeof *c->convs);
  c->skip = sc_calloc((size_t)p->n_kernels + 1, sizeof *c->skip);
  c->checks = sc_calloc(ns, sizeof *c->checks);
  c->scatters = sc_calloc(ns, sizeof *c->scatters);
  c->attns = sc_calloc(ns, sizeof *c->attns);
  if (!c->attns || !c->gemm_id || !c->gemm_fused || !c->convs || !c->skip || !c->checks || !c->scatters || !c->fns || !c->launch || !c->vals || !c->args || !c->ptrs || !c->ev_fork || !c->ev_done ||
      !c->jobs || !c->chunk_jobs)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < p->n_steps; i++) {
    if (p->steps[i].kind != SC_STEP_COPY) continue;
    if (!c->copy) {
      CK(cu->stream_create(&c->copy, SC_CU_STREAM_NON_BLOCKING), "the copy stream");
      const char *skip = getenv("SHARDC_CUDA_SKIP_COPY_WAITS");
      c->skip_copy_waits = skip && strcmp(skip, "1") == 0;
    }
    CK(cu->event_create(&c->ev_fork[i], SC_CU_EVENT_DISABLE_TIMING), NULL);
    CK(cu->event_create(&c->ev_done[i], SC_CU_EVENT_DISABLE_TIMING), NULL);
  }
  for (int32_t i = 0; i < p->n_steps; i++) {
    if (p->steps[i].kind != SC_STEP_COMM) continue;
    if (!c->o.comm_of || c->o.comm_of[i] < 0 || c->o.comm_of[i] >= c->o.n_comms)
      return sc_diag_set(diag, SC_ERR_INVALID, p->steps[i].origin, NULL,
                         "cuda device: step %d has no communicator", (int)i);
    CK(cu->event_create(&c->ev_fork[i], SC_CU_EVENT_DISABLE_TIMING), NULL);
    CK(cu->event_create(&c->ev_done[i], SC_CU_EVENT_DISABLE_TIMING), NULL);
  }
  bool any_gemm = false;
  for (int32_t i = 0; i < p->n_steps; i++) any_gemm |= p->steps[i].kind == SC_STEP_GEMM;
  if (any_gemm) {
    sc_status st = sc_gpu_gemm_create(cu, &c->gemm, diag);
    if (st != SC_OK) return st;
    sc_gpu_gemm_allow_tf32(c->gemm, !c->o.no_tf32);
  }
  bool any_scatter = false; /* or attention: a step whose kernel is the codegen's own */
  for (int32_t i = 0; i < p->n_steps; i++)
    any_scatter |= p->steps[i].kind == SC_STEP_SCATTER_ADD ||
                   p->steps[i].kind == SC_STEP_ATTENTION ||
                   p->steps[i].kind == SC_STEP_ATTENTION_GRAD;
  if (p->n_kernels == 0 && !any_scatter) return SC_OK;
  char *src = NULL;
  sc_status st = SC_OK;
  if (!c->o.cuda.source) {
#if SHARDC_HAVE_CUDA
    st = sc_cuda_emit_source(p, &src, diag);
#else
    st = SC_ERR_UNSUPPORTED;
#endif
  }
  if (st != SC_OK) return st;
  double t0 = now_s();
  st = load_module(c, c->o.cuda.source ? c->o.cuda.source : src, diag);
  sc_free(src);
  c->compile_s = now_s() - t0;
  if (st != SC_OK) return st;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const kir_kernel *kk = p->kernels[k];
    CUresult r = cu->module_function(&c->fns[k], c->mod, kk->name);
    if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuModuleGetFunction", kk->name, diag);
#if SHARDC_HAVE_CUDA
    sc_cuda_launch_config(kk, &c->launch[k]);
#endif
    if (c->launch[k].grid > 0x7fffffff) c->launch[k].grid = 0x7fffffff; /* grid-stride */
    size_t n = (size_t)kk->n_params + 2;
    c->vals[k] = sc_calloc(n, sizeof **c->vals);
    c->args[k] = sc_calloc(n, sizeof **c->args);
    if (!c->vals[k] || !c->args[k])
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) c->args[k][i] = &c->vals[k][i];
  }
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_SCATTER_ADD) continue;
    char name[64] = "";
#if SHARDC_HAVE_CUDA
    sc_cuda_scatter_kernel_name(p->buffers[s->scatter.out].dtype,
                                p->buffers[s->scatter.indices].dtype, name, sizeof name);
#endif
    CUresult r = cu->module_function(&c->scatters[i].fn, c->mod, name);
    if (r != SC_CUDA_SUCCESS) return sc_cu_check(cu, r, "cuModuleGetFunction", name, diag);
  }
  if ((st = prepare_attention(c, diag)) != SC_OK) return st;
  return prepare_convs(c, diag);
}

static void *cuda_alloc_arena(void *ctx, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes < 0) return NULL;
  CUdeviceptr d = 0;
  if (c->cu->mem_alloc(&d, (size_t)(bytes > 0 ? bytes : CONST_ALIGN)) != SC_CUDA_SUCCESS)
    return NULL;
  c->arena = d;
  c->arena_bytes = bytes;
  return (void *)(uintptr_t)d;
}

static void cuda_free_arena(void *ctx, void *arena) {
  cuda_ctx *c = ctx;
  c->cu->ctx_synchronize();
  c->cu->mem_free((CUdeviceptr)(uintptr_t)arena);
  if (c->arena == (CUdeviceptr)(uintptr_t)arena) c->arena = 0;
}

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

static const void *const_data(const cuda_ctx *c, int32_t r) {
  const sc_buffer *rb = &c->p->buffers[r];
  return c->o.const_data && c->o.const_data[r] ? c->o.const_data[r] : rb->data;
}

/* Uploads every constant into one allocation, through pinned staging. */
static sc_status upload_consts(cuda_ctx *c, sc_diag *diag) {
  const sc_program *p = c->p;
  const sc_cu *cu = c->cu;
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *rb = &p->buffers[b];
    if (rb->kind == SC_BUF_CONST && !const_data(c, b) && rb->bytes > 0)
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "constant '%s' has no data (loaded with --no-weights?)",
                         rb->name ? rb->name : "?");
  }
  int64_t total = sc_cuda_const_bytes(p); /* the plan's size of this allocation */
  if (total < 0) return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "the weights overflow");
  if (total == 0) return SC_OK;
  CK(cu->mem_alloc(&c->consts, (size_t)total), "the weights");
  c->const_bytes = total;
  void *stage = NULL;
  size_t stage_bytes = total < STAGING_BYTES ? (size_t)total : STAGING_BYTES;
  CK(cu->mem_alloc_host(&stage, stage_bytes), "the pinned staging buffer");
  sc_status st = SC_OK;
  int64_t off = 0;
  for (int32_t b = 0; b < p->n_buffers && st == SC_OK; b++) {
    const sc_buffer *rb = &p->buffers[b];
    if (rb->kind != SC_BUF_CONST) continue;
    off = align_up(off, CONST_ALIGN);
    c->ptrs[b] = c->consts + (CUdeviceptr)off;
    const char *src = const_data(c, b);
    for (int64_t done = 0; done < rb->bytes && st == SC_OK;) {
      size_t n = (size_t)(rb->bytes - done) < stage_bytes ? (size_t)(rb->bytes - done)
                                                          : stage_bytes;
      memcpy(stage, src + done, n);
      CUresult r = cu->memcpy_htod(c->ptrs[b] + (CUdeviceptr)done, stage, n, c->compute);
      if (r == SC_CUDA_SUCCESS) r = cu->stream_synchronize(c->compute);
      st = sc_cu_check(cu, r, "cuMemcpyHtoDAsync", "uploading the weights", diag);
      done += (int64_t)n;
    }
    off += rb->bytes;
  }
  cu->mem_free_host(stage);
  return st;
}

/* SHARDC_CUDA_VERBOSE=1: one line on what the session holds on the GPU. */
static void report(cuda_ctx *c) {
  const char *v = getenv("SHARDC_CUDA_VERBOSE");
  if (!v || strcmp(v, "1") != 0) return;
  char name[128] = "?";
  c->cu->device_name(name, sizeof name, c->dev);
  int32_t n_attention = 0;
  for (int32_t i = 0; i < c->p->n_steps; i++) n_attention += c->attns[i].n > 0;
  size_t free_now = 0, total = 0;
  c->cu->mem_get_info(&free_now, &total);
  if (c->cache) /* the key tests/gpu/pack.sh's CUBINs are filed under */
    fprintf(stderr, "shardc: cuda: rank %d kernels: the CUBIN of CUDA C %s is %s\n", c->o.rank,
            c->source_sha, c->cache);
  fprintf(stderr,
          "shardc: cuda: rank %d on %s (%s), kernels %s, GEMM engine %s (%d activations "
          "in the product, %d keeping the pre-activation, %d bias gradients in the product, workspace %s, %d f32 products with TF32 operands), %d of %d FP8 "
          "products as cuBLASLt FP8 matmuls%s%s%s, "
          "%d convolutions as implicit GEMMs, %d fused "
          "attention steps (%d forwards on tensor cores); arena %lld bytes "
          "(the plan's %lld), weights %lld bytes; device memory taken since the context: %lld "
          "bytes\n",
          c->o.rank, name, c->arch, c->image_kind[0] ? c->image_kind : "none",
          c->gemm ? sc_gpu_gemm_engine(c->gemm) : "none", (int)c->n_fused, (int)c->n_fused_aux,
          (int)c->n_bgrad,
          !c->gemm || !strcmp(sc_gpu_gemm_engine(c->gemm), "host") ? "none"
          : sc_gpu_gemm_own_workspace(c->gemm) ? "allocated" : "in the arena",
          c->gemm ? (int)sc_gpu_gemm_n_tf32(c->gemm) : 0,
          (int)c->n_fp8, (int)c->n_fp8_asked, c->fp8_why ? " (the others f32: " : "",
          c->fp8_why ? c->fp8_why : "", c->fp8_why ? ")" : "", (int)c->n_convs, (int)n_attention, (int)c->n_attn_mma,
          (long long)c->arena_bytes,
          (long long)c->p->arena_bytes, (long long)c->const_bytes,
          (long long)c->free_at_create - (long long)free_now);
}

/* The lines the device allocates itself beside the arena
 * (codegen/device_memory.h), planned with the same functions the device
 * sizes them with: cuBLASLt's workspace when the arena does not hold it
 * (none on the emulated GPU, whose GEMMs run on the host), the weights'
 * padding. The context and NCCL's buffers are the driver's and NCCL's, not
 * the device's: they are planned for a cluster (shardc plan), not here. */
static void cuda_memory(void *ctx, sc_device_memory *planned, sc_device_memory *allocated) {
  cuda_ctx *c = ctx;
  const sc_program *p = c->p;
  int64_t raw = 0;
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == SC_BUF_CONST) raw += p->buffers[b].bytes;
  bool host_gemm = !c->gemm || strcmp(sc_gpu_gemm_engine(c->gemm), "host") == 0;
  if (planned) {
    sc_device_target t;
    sc_device_target_cuda(&t, 0, 0, 0);
    t.im2col_convs = c->n_convs == 0;
    sc_device_memory m;
    sc_diag d = {0};
    if (sc_device_memory_plan(p, &t, &m, &d) == SC_OK) {
      planned->bytes[SC_MEM_CUDA_WORKSPACE] = host_gemm ? 0 : m.bytes[SC_MEM_CUDA_WORKSPACE];
      planned->bytes[SC_MEM_CUDA_PADDING] = m.bytes[SC_MEM_CUDA_PADDING];
    }
  }
  if (allocated) {
    allocated->bytes[SC_MEM_CUDA_WORKSPACE] =
        c->gemm && sc_gpu_gemm_own_workspace(c->gemm) ? SC_GEMM_WORKSPACE_BYTES : 0;
    allocated->bytes[SC_MEM_CUDA_PADDING] = c->const_bytes > raw ? c->const_bytes - raw : 0;
  }
}

/* The device time of the last run's steps (events on the compute
 * stream), or a negative number when it was not timed. */
static double cuda_last_run_seconds(void *ctx) {
  cuda_ctx *c = ctx;
  return c->runs > 0 ? c->last_run_s : -1.0;
}

static sc_status cuda_bind(void *ctx, void *arena, sc_diag *diag) {
  cuda_ctx *c = ctx;
  const sc_program *p = c->p;
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)arena;
  sc_status st = upload_consts(c, diag);
  if (st != SC_OK) return st;
  for (int32_t b = 0; b < p->n_buffers; b++) {
    int32_t r;
    int64_t off;
    if ((st = sc_buffer_binding(p, b, &r, &off, diag)) != SC_OK) return st;
    c->ptrs[b] = off >= 0 ? base + (CUdeviceptr)off : c->ptrs[r];
  }
  if ((st = sc_check_kernel_params(p, diag)) != SC_OK) return st;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 0; i < kk->n_params; i++) c->vals[k][i] = c->ptrs[kk->params[i].buffer];
    c->vals[k][kk->n_params] = 0;                                   /* begin */
    c->vals[k][kk->n_params + 1] = (uint64_t)c->launch[k].points; /* end */
  }
  /* cuBLASLt's workspace: the arena's top, where the memory plan reserved it */
  if (c->gemm && sc_cuda_workspace_in_arena(p))
    sc_gpu_gemm_set_workspace(c->gemm, base + (CUdeviceptr)p->workspace_offset,
                              (size_t)p->workspace_bytes);
  c->n_fused = c->n_fused_aux = c->n_bgrad = 0;
  c->n_fp8 = c->n_fp8_asked = 0;
  c->fp8_why = NULL;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind == SC_STEP_GEMM && c->convs[i].fn) {
      const sc_gemm *g = &s->gemm;
      conv_job *j = &c->convs[i];
      j->vals[0] = c->ptrs[g->conv.x];
      j->vals[1] = c->ptrs[g->a];
      j->vals[2] = j->cfg.bias_bytes ? c->ptrs[g->conv.bias] : 0;
      j->vals[3] = c->ptrs[g->c];
    } else if (s->kind == SC_STEP_GEMM) {
      const sc_gemm *g = &s->gemm;
      sc_dtype t = p->buffers[g->c].dtype; /* sc_gemm_problem: A, B, bias alike */
      c->gemm_fused[i] = false;
      c->gemm_id[i] = -1;
      if (g->fp8) { /* one cuBLASLt FP8 matmul, if it can be */
        sc_gpu_fp8 f = {.type_a = p->buffers[g->a8].dtype, .type_b = p->buffers[g->b8].dtype,
                        .a = c->ptrs[g->a8], .b = c->ptrs[g->b8],
                        .scale_a = g->scaled ? c->ptrs[g->a8_scale] : 0,
                        .scale_b = g->scaled ? c->ptrs[g->b8_scale] : 0};
        const char *why = NULL;
        st = sc_gpu_gemm_add_fp8(c->gemm, g, t, &f, c->cc_major * 10 + c->cc_minor,
                                 c->ptrs[g->c], &c->gemm_id[i], &why, diag);
        if (st != SC_OK) return st;
        c->n_fp8_asked++;
        c->n_fp8 += c->gemm_id[i] >= 0;
        if (why && !c->fp8_why) c->fp8_why = why;
      }
      if (c->gemm_id[i] < 0) {
        st = sc_gpu_gemm_add(c->gemm, g, t, c->ptrs[g->a], c->ptrs[g->b],
                           g->bias >= 0 ? c->ptrs[g->bias] : 0,
                           g->bias >= 0 ? p->buffers[g->bias].bytes / (int64_t)sc_dtype_size(t)
                                        : 0,
                           c->ptrs[g->c], act_in_product(p, g) ? c->ptrs[g->act_out] : 0,
                           act_in_product(p, g) && g->act == SC_GEMM_ACT_DGELU_TANH
                               ? c->ptrs[g->act_in] : 0,
                           bgrad_in_product(p, g) ? c->ptrs[g->bgrad_out] : 0,
                           &c->gemm_id[i], &c->gemm_fused[i], diag);
        if (st == SC_OK && g->scaled) /* the f32 product of the widened values, then the scales */
          st = sc_gpu_gemm_set_scales(c->gemm, c->gemm_id[i], c->ptrs[g->a8_scale],
                                      c->ptrs[g->b8_scale], diag);
      }
      if (st != SC_OK) return st;
      c->n_fused += c->gemm_fused[i] && g->act != SC_GEMM_ACT_NONE;
      c->n_fused_aux += c->gemm_fused[i] && g->act_aux;
      c->n_bgrad += c->gemm_fused[i] && g->bgrad != SC_GEMM_BGRAD_NONE;
    }
    if (s->kind == SC_STEP_CHECK || s->kind == SC_STEP_SCATTER_ADD) {
      check_job *j = &c->checks[i];
      j->c = c;
      j->step = i;
      j->scatter = s->kind == SC_STEP_SCATTER_ADD;
      j->buffer = j->scatter ? s->scatter.indices : s->check.buffer;
      j->dim = j->scatter ? s->scatter.rows : s->check.dim;
      j->bytes = p->buffers[j->buffer].bytes;
      if (j->bytes > 0 && !j->pinned)
        CK(c->cu->mem_alloc_host(&j->pinned, (size_t)j->bytes), "an index check's buffer");
    }
    if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
      const sc_attention_step *x = &s->attn;
      int32_t ids[SC_CUDA_ATTN_ARGS] = {x->q, x->k, x->v, x->mask, x->o, x->lse,
                                        x->d_o, x->dq, x->dk, x->dv};
      for (int k = 0; k < SC_CUDA_ATTN_ARGS; k++)
        c->attns[i].vals[k] = ids[k] >= 0 ? c->ptrs[ids[k]] : 0;
    }
    if (s->kind == SC_STEP_SCATTER_ADD) {
      const sc_scatter_step *x = &s->scatter;
      scatter_job *j = &c->scatters[i];
      uint64_t v[6] = {c->ptrs[x->out], c->ptrs[x->indices], c->ptrs[x->updates],
                       (uint64_t)x->rows, (uint64_t)x->row, (uint64_t)x->n};
      memcpy(j->vals, v, sizeof v);
      for (int k = 0; k < 6; k++) j->args[k] = &j->vals[k];
      int64_t grid = (x->row + 255) / 256;
      j->grid = (unsigned)(grid < 1 ? 1 : grid > 65535 ? 65535 : grid);
    }
    if (s->kind != SC_STEP_COMM) continue;
    const sc_comm_step *cs = &s->comm;
    comm_job *j = &c->jobs[i];
    j->c = c;
    j->step = i;
    j->comm = c->o.comms[c->o.comm_of[i]];
    j->t = p->buffers[cs->in >= 0 ? cs->in : cs->out].dtype;
    j->send = (const void *)(uintptr_t)(cs->pack >= 0 ? c->ptrs[cs->pack]
                                        : cs->in >= 0 ? c->ptrs[cs->in] : 0);
    j->recv = (void *)(uintptr_t)(cs->unpack >= 0 ? c->ptrs[cs->unpack]
                                  : cs->out >= 0 ? c->ptrs[cs->out] : 0);
    int64_t calls = sc_comm_step_calls(cs);
    if (calls == 1) continue;
    if (!(c->chunk_jobs[i] = sc_calloc((size_t)calls, sizeof *c->chunk_jobs[i])))
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    for (int64_t k = 0; k < calls; k++) {
      c->chunk_jobs[i][k] = *j;
      c->chunk_jobs[i][k].k = k;
    }
  }
  report(c);
  return SC_OK;
}

static void *cuda_buffer_ptr(void *ctx, int32_t b) {
  return (void *)(uintptr_t)((cuda_ctx *)ctx)->ptrs[b];
}

static void cuda_copy_in(void *ctx, void *dst, const void *src, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes > 0)
    check_run(c, c->cu->memcpy_htod((CUdeviceptr)(uintptr_t)dst, src, (size_t)bytes, c->compute),
              "cuMemcpyHtoDAsync");
}

static void cuda_copy_out(void *ctx, void *dst, const void *src, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes <= 0) return;
  check_run(c, c->cu->memcpy_dtoh(dst, (CUdeviceptr)(uintptr_t)src, (size_t)bytes, c->compute),
            "cuMemcpyDtoHAsync");
  check_run(c, c->cu->stream_synchronize(c->compute), "cuStreamSynchronize");
}

/* State kept in the arena across runs (trainer.c): a gradient accumulator
 * zeroed on the device, before the run's steps, instead of copied in. */
static void cuda_zero(void *ctx, void *dst, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes > 0)
    check_run(c, c->cu->memset_d8((CUdeviceptr)(uintptr_t)dst, 0, (size_t)bytes, c->compute),
              "cuMemsetD8Async");
}

static void cuda_copy_device(void *ctx, void *dst, const void *src, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes > 0)
    check_run(c,
              c->cu->memcpy_dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                 (size_t)bytes, c->compute),
              "cuMemcpyDtoDAsync");
}

static void launch_kernel(cuda_ctx *c, int32_t k) {
  const sc_cuda_launch *l = &c->launch[k];
  if (l->points <= 0) return;
  check_run(c,
            c->cu->launch_kernel(c->fns[k], (unsigned)l->grid, 1, 1, (unsigned)l->block, 1, 1, 0,
                                 c->compute, c->args[k], NULL),
            "cuLaunchKernel");
}

static void cuda_run_kernel(void *ctx, const sc_step *s) {
  cuda_ctx *c = ctx;
  if (!c->skip[s->kernel]) launch_kernel(c, s->kernel);
}

static void cuda_run_gemm(void *ctx, const sc_step *s) {
  cuda_ctx *c = ctx;
  sc_diag d = {0};
  const conv_job *j = &c->convs[s - c->p->steps];
  if (j->fn)
    check_run(c,
              c->cu->launch_kernel(j->fn, (unsigned)j->cfg.grid, 1, 1, (unsigned)j->cfg.block, 1,
                                   1, (unsigned)j->cfg.shared_bytes, c->compute,
                                   (void **)j->args, NULL),
              "cuLaunchKernel");
  else if (sc_gpu_gemm_enqueue(c->gemm, c->gemm_id[s - c->p->steps], c->compute, &d) != SC_OK)
    fail(c, &d);
  /* the product applied the activation (the step's kernel) or summed the bias
   * gradient (bgrad_kernel: the step's own kernel still runs) */
  bool fused = c->gemm_fused[s - c->p->steps];
  if (s->gemm.bgrad != SC_GEMM_BGRAD_NONE && !fused) launch_kernel(c, s->gemm.bgrad_kernel);
  if (s->kernel >= 0 && !(fused && s->gemm.act != SC_GEMM_ACT_NONE)) launch_kernel(c, s->kernel);
}

/* ATTENTION: the forward kernel; ATTENTION_GRAD: dK/dV, then dQ (they
 * write different buffers and read the same ones) */
static void cuda_run_attention(void *ctx, const sc_step *s) {
  cuda_ctx *c = ctx;
  attn_job *j = &c->attns[s - c->p->steps];
  for (int k = 0; k < j->n; k++)
    check_run(c,
              c->cu->launch_kernel(j->fn[k], (unsigned)j->cfg[k].grid, 1, 1,
                                   (unsigned)j->cfg[k].block, 1, 1,
                                   (unsigned)j->cfg[k].shared_bytes, c->compute, j->args, NULL),
              "cuLaunchKernel");
}

static int cuda_threads(void *ctx) {
  (void)ctx;
  return 1;
}

static double cuda_compile_seconds(void *ctx) { return ((cuda_ctx *)ctx)->compile_s; }

/* ---- runs: graphs ---- */
static bool cuda_begin_run(void *ctx, bool whole) {
  cuda_ctx *c = ctx; /* c->err is kept: a copy of the inputs may have failed */
  check_run(c, c->cu->event_record(c->ev_t0, c->compute), "cuEventRecord");
  c->partial_run = !whole; /* issued step by step, neither captured nor counted */
  if (!whole) return false;
  if (c->exec) {
    check_run(c, c->cu->graph_launch(c->exec, c->compute), "cuGraphLaunch");
    return true;
  }
  if (c->runs == 1 && !c->o.no_graph && c->p->n_steps > 0) {
    CUresult r = c->cu->stream_begin_capture(c->compute, 0 /* global */);
    c->capturing = r == SC_CUDA_SUCCESS;
    check_run(c, r, "cuStreamBeginCapture");
  }
  return false;
}

static void nap(void) {
  struct timespec ts = {0, 50 * 1000};
  nanosleep(&ts, NULL);
}

/* Waits for stream s. With NCCL on the communication streams a peer that
 * failed would leave it waiting for ever: then it polls, asking every
 * communicator for its asynchronous error, until SHARDC_COMM_TIMEOUT, and
 * aborts the communicators on a failure or the timeout (the peers' own
 * collectives then fail too). */
static void wait_stream(cuda_ctx *c, CUstream s) {
  const sc_cu *cu = c->cu;
  if (!c->any_on_stream) {
    check_run(c, cu->stream_synchronize(s), "cuStreamSynchronize");
    return;
  }
  const char *env = getenv("SHARDC_COMM_TIMEOUT");
  double limit = env && atof(env) > 0 ? atof(env) : SC_COMM_DEFAULT_TIMEOUT_S;
  double deadline = now_s() + limit;
  for (;;) {
    CUresult r = cu->stream_query(s);
    if (r == SC_CUDA_SUCCESS) return;
    if (r != SC_CUDA_ERROR_NOT_READY) {
      check_run(c, r, "cuStreamQuery");
      return;
    }
    for (int32_t i = 0; i < c->o.n_comms; i++) {
      sc_diag d = {0};
      if (c->on_stream[i] && sc_comm_poll(c->o.comms[i], &d) != SC_OK) {
        fail(c, &d);
        return;
      }
    }
    if (now_s() > deadline) {
      sc_diag d = {0};
      sc_diag_set(&d, SC_ERR_IO, NULL, NULL,
                  "cuda device: rank %d: the step's collectives did not finish in %g s "
                  "(SHARDC_COMM_TIMEOUT)", c->o.rank, limit);
      fail(c, &d);
      for (int32_t i = 0; i < c->o.n_comms; i++)
        if (c->on_stream[i]) sc_comm_abort(c->o.comms[i], "a collective timed out");
      return;
    }
    nap();
  }
}

/* The end of a run's steps, waited for or not: the capture (the second
 * run) ends and its graph is launched once, for this run. */
static void end_issue(cuda_ctx *c) {
  const sc_cu *cu = c->cu;
  if (c->capturing) {
    c->capturing = false;
    check_run(c, cu->stream_end_capture(c->compute, &c->graph), "cuStreamEndCapture");
    if (c->graph) check_run(c, cu->graph_instantiate(&c->exec, c->graph, 0),
                            "cuGraphInstantiateWithFlags");
    if (c->exec) check_run(c, cu->graph_launch(c->exec, c->compute), "cuGraphLaunch");
  }
  check_run(c, cu->event_record(c->ev_t1, c->compute), "cuEventRecord");
  if (!c->partial_run) c->runs++;
}

/* The first failure since it was last cleared, into diag. */
static sc_status take_failure(cuda_ctx *c, sc_diag *diag) {
  pthread_mutex_lock(&c->mu);
  sc_diag e = c->err;
  sc_diag_clear(&c->err);
  pthread_mutex_unlock(&c->mu);
  if (e.status == SC_OK) return SC_OK;
  *diag = e;
  return e.status;
}

/* ---- runs read later (device.h): pinned slots and their markers ---- */
static sc_status cuda_reserve_async(void *ctx, int32_t n_slots, int64_t slot_bytes, void **slots,
                                    sc_diag *diag) {
  cuda_ctx *c = ctx;
  const sc_cu *cu = c->cu;
  free_slots(c);
  c->slots = sc_calloc((size_t)n_slots + 1, sizeof *c->slots);
  c->marks = sc_calloc((size_t)n_slots + 1, sizeof *c->marks);
  if (!c->slots || !c->marks) {
    free_slots(c);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  c->n_slots = n_slots;
  for (int32_t k = 0; k < n_slots; k++) {
    CUresult r = cu->mem_alloc_host(&c->slots[k], (size_t)(slot_bytes > 0 ? slot_bytes : 64));
    if (r == SC_CUDA_SUCCESS) r = cu->event_create(&c->marks[k], 0);
    if (r != SC_CUDA_SUCCESS) {
      sc_status st = sc_cu_check(cu, r, "cuMemAllocHost / cuEventCreate",
                                 "a pinned slot for a run's outputs", diag);
      free_slots(c);
      return st;
    }
    slots[k] = c->slots[k];
  }
  return SC_OK;
}

static void cuda_end_run_async(void *ctx) {
  cuda_ctx *c = ctx;
  end_issue(c);
  c->last_run_s = -1.0; /* its events are re-recorded before anyone waits */
}

static void cuda_copy_out_async(void *ctx, void *dst, const void *src, int64_t bytes) {
  cuda_ctx *c = ctx;
  if (bytes > 0)
    check_run(c, c->cu->memcpy_dtoh(dst, (CUdeviceptr)(uintptr_t)src, (size_t)bytes, c->compute),
              "cuMemcpyDtoHAsync");
}

static void cuda_mark(void *ctx, int32_t k) {
  cuda_ctx *c = ctx;
  check_run(c, c->cu->event_record(c->marks[k], c->compute), "cuEventRecord");
  c->outstanding++;
}

/* With collectives on the communication streams (NCCL, cuda-local) the
 * wait polls as end_run's does (wait_stream): all that is queued. */
static sc_status cuda_wait_mark(void *ctx, int32_t k, sc_diag *diag) {
  cuda_ctx *c = ctx;
  if (c->any_on_stream) {
    wait_stream(c, c->compute);
    for (int32_t i = 0; i < c->n_cstreams; i++) wait_stream(c, c->cstreams[i]);
  } else {
    check_run(c, c->cu->event_synchronize(c->marks[k]), "cuEventSynchronize");
  }
  if (c->outstanding > 0) c->outstanding--;
  return take_failure(c, diag);
}

static sc_status cuda_end_run(void *ctx, sc_diag *diag) {
  cuda_ctx *c = ctx;
  const sc_cu *cu = c->cu;
  end_issue(c);
  wait_stream(c, c->compute);
  for (int32_t i = 0; i < c->n_cstreams; i++) wait_stream(c, c->cstreams[i]);
  sc_status st = take_failure(c, diag); /* reported once, here */
  float ms = 0;
  c->last_run_s = -1.0;
  if (st == SC_OK && cu->event_elapsed(&ms, c->ev_t0, c->ev_t1) == SC_CUDA_SUCCESS) {
    c->last_run_s = 1e-3 * (double)ms;
    if (c->n_run_ms < RUN_TIMES) c->run_ms[c->n_run_ms++] = ms;
  }
  return st;
}

static void cuda_sync(void *ctx) {
  cuda_ctx *c = ctx;
  check_run(c, c->cu->stream_synchronize(c->compute), "cuStreamSynchronize");
}

/* ---- collectives ---- */
/* Job j's call of COMM step cs: the whole step, or call j->k of a step in
 * row chunks (its rows of the input, else the pack; of the output, else
 * the unpack). */
static sc_status comm_job_call(const comm_job *j, const sc_comm_step *cs, sc_diag *d) {
  int64_t in_at, out_at, esz = (int64_t)sc_dtype_size(j->t);
  sc_comm_step ck = sc_comm_step_chunk(cs, j->k, &in_at, &out_at);
  if (cs->pack >= 0) in_at = 0;
  if (cs->unpack >= 0) out_at = 0;
  const void *send = in_at ? (const char *)j->send + in_at * esz : j->send;
  return sc_comm_step_call(j->comm, &ck, j->t, send,
                           out_at ? (char *)j->recv + out_at * esz : j->recv, d);
}

static void comm_host_fn(void *ud) {
  comm_job *j = ud;
  const sc_step *s = &j->c->p->steps[j->step];
  sc_diag d = {0};
  pthread_mutex_lock(&j->c->mu);
  bool failed = j->c->err.status != SC_OK;
  pthread_mutex_unlock(&j->c->mu);
  if (failed) return; /* after a failure, later collectives of the run are skipped */
  if (comm_job_call(j, &s->comm, &d) != SC_OK) fail(j->c, &d);
}

/* dst viewed as [n, outer, inner] = src viewed as [outer, n, inner]
 * (pack), or back (unpack): one 2-D copy per chunk. */
static void transpose_chunks(cuda_ctx *c, CUstream s, CUdeviceptr dst, CUdeviceptr src,
                             int64_t outer, int64_t n, int64_t inner, bool pack) {
  for (int64_t q = 0; q < n; q++) {
    sc_cu_memcpy2d m = {.srcMemoryType = SC_CU_MEMORYTYPE_DEVICE,
                        .dstMemoryType = SC_CU_MEMORYTYPE_DEVICE,
                        .WidthInBytes = (size_t)inner, .Height = (size_t)outer};
    if (pack) { /* src [o][q] -> dst [q][o] */
      m.srcDevice = src + (CUdeviceptr)(q * inner);
      m.srcPitch = (size_t)(n * inner);
      m.dstDevice = dst + (CUdeviceptr)(q * outer * inner);
      m.dstPitch = (size_t)inner;
    } else { /* src [q][o] -> dst [o][q] */
      m.srcDevice = src + (CUdeviceptr)(q * outer * inner);
      m.srcPitch = (size_t)inner;
      m.dstDevice = dst + (CUdeviceptr)(q * inner);
      m.dstPitch = (size_t)(n * inner);
    }
    check_run(c, c->cu->memcpy_2d(&m, s), "cuMemcpy2DAsync");
  }
}

static void cuda_run_comm(void *ctx, int32_t i) {
  cuda_ctx *c = ctx;
  const sc_cu *cu = c->cu;
  const sc_comm_step *cs = &c->p->steps[i].comm;
  CUstream s = c->cstreams[c->stream_of[c->o.comm_of[i]]];
  int64_t esz = (int64_t)sc_dtype_size(c->jobs[i].t), n = cs->group_size;
  check_run(c, cu->event_record(c->ev_fork[i], c->compute), "cuEventRecord");
  check_run(c, cu->stream_wait_event(s, c->ev_fork[i], 0), "cuStreamWaitEvent");
  for (int64_t k = 0, calls = sc_comm_step_calls(cs); k < calls; k++) {
    comm_job *j = calls > 1 ? &c->chunk_jobs[i][k] : &c->jobs[i];
    int64_t in_at, out_at; /* a step in row chunks: where this call's rows begin */
    sc_comm_step ck = sc_comm_step_chunk(cs, k, &in_at, &out_at);
    if (cs->pack >= 0)
      transpose_chunks(c, s, c->ptrs[cs->pack], c->ptrs[cs->in] + (CUdeviceptr)(in_at * esz),
                       ck.pack_outer, n, ck.pack_inner * esz, true);
    if (c->on_stream[c->o.comm_of[i]]) { /* NCCL: enqueued on s from here */
      sc_diag d = {0};
      if (comm_job_call(j, cs, &d) != SC_OK) fail(c, &d);
    } else {
      if (cu->host_access) { /* the fake driver's race check: what the collective touches */
        const sc_program *p = c->p;
        int32_t sb = cs->pack >= 0 ? cs->pack : cs->in;
        int32_t rb = cs->unpack >= 0 ? cs->unpack : cs->out;
        int64_t sent = ck.count * (cs->kind == SC_COMM_REDUCE_SCATTER ? n : 1);
        int64_t got = ck.count * (cs->kind == SC_COMM_ALL_GATHER ? n : 1);
        if (sb >= 0)
          cu->host_access((const char *)j->send + (cs->pack >= 0 ? 0 : in_at * esz),
                          (size_t)(calls > 1 && cs->pack < 0 ? sent * esz : p->buffers[sb].bytes),
                          0);
        if (rb >= 0)
          cu->host_access((char *)j->recv + (cs->unpack >= 0 ? 0 : out_at * esz),
                          (size_t)(calls > 1 && cs->unpack < 0 ? got * esz : p->buffers[rb].bytes),
                          1);
      }
      check_run(c, cu->launch_host_func(s, comm_host_fn, j), "cuLaunchHostFunc");
    }
    if (cs->unpack >= 0)
      transpose_chunks(c, s, c->ptrs[cs->out] + (CUdeviceptr)(out_at * esz), c->ptrs[cs->unpack],
                       ck.unpack_outer, n, ck.unpack_inner * esz, false);
  }
  check_run(c, cu->event_record(c->ev_done[i], s), "cuEventRecord");
  if (!cs->async)
    check_run(c, cu->stream_wait_event(c->compute, c->ev_done[i], 0), "cuStreamWaitEvent");
}

static void cuda_wait_comm(void *ctx, int32_t started) {
  cuda_ctx *c = ctx;
  const sc_step *s = &c->p->steps[started];
  if (c->skip_copy_waits && s->kind == SC_STEP_COPY &&
      c->p->buffers[s->copy.dst].kind != SC_BUF_HOST)
    return; /* the test hook: a missing wait */
  check_run(c, c->cu->stream_wait_event(c->compute, c->ev_done[started], 0),
            "cuStreamWaitEvent");
}

/* A COPY step: on the copy stream, after what the compute stream has
 * queued so far (its source written, its destination's previous readers
 * done), to or from pinned host memory; ev_done[i] marks its end, which
 * its WAIT makes the compute stream wait for. */
static void cuda_run_copy(void *ctx, int32_t i, void *host) {
  cuda_ctx *c = ctx;
  const sc_cu *cu = c->cu;
  const sc_copy_step *cs = &c->p->steps[i].copy;
  bool out = c->p->buffers[cs->dst].kind == SC_BUF_HOST;
  size_t bytes = (size_t)c->p->buffers[cs->src].bytes;
  check_run(c, cu->event_record(c->ev_fork[i], c->compute), "cuEventRecord");
  check_run(c, cu->stream_wait_event(c->copy, c->ev_fork[i], 0), "cuStreamWaitEvent");
  if (out)
    check_run(c, cu->memcpy_dtoh(host, c->ptrs[cs->src], bytes, c->copy), "cuMemcpyDtoHAsync");
  else
    check_run(c, cu->memcpy_htod(c->ptrs[cs->dst], host, bytes, c->copy), "cuMemcpyHtoDAsync");
  check_run(c, cu->event_record(c->ev_done[i], c->copy), "cuEventRecord");
}

static void *cuda_alloc_host(void *ctx, int64_t bytes) {
  cuda_ctx *c = ctx;
  void *p = NULL;
  if (c->cu->mem_alloc_host(&p, (size_t)(bytes > 0 ? bytes : 1)) != SC_CUDA_SUCCESS) return NULL;
  return p;
}

static void cuda_free_host(void *ctx, void *p) {
  cuda_ctx *c = ctx;
  if (c->copy) c->cu->stream_synchronize(c->copy);
  c->cu->mem_free_host(p);
}

/* ---- index checks, scatter-adds ---- */
static void check_host_fn(void *ud) {
  check_job *j = ud;
  const sc_program *p = j->c->p;
  const sc_step *st = &p->steps[j->step];
  const sc_buffer *b = &p->buffers[j->buffer];
  int64_t esz = (int64_t)sc_dtype_size(b->dtype), n = esz > 0 ? j->bytes / esz : 0;
  long long shown;
  int64_t bad = sc_check_indices(b->dtype, j->pinned, n, j->dim, &shown);
  if (bad < 0) return;
  sc_diag d = {0};
  if (j->scatter) /* as the session's run_scatter_add says it */
    sc_diag_set(&d, SC_ERR_INVALID, st->origin, "ScatterND",
                "index %lld (tuple %lld of '%s') out of range [%lld, %lld)", shown,
                (long long)bad, b->name ? b->name : "?", -(long long)j->dim, (long long)j->dim);
  else
    sc_check_step_error(p, st, shown, &d);
  fail(j->c, &d);
  for (int64_t i = bad; !j->scatter && i < n; i++) { /* keep later kernels in bounds */
    long long v;
    if (sc_check_indices(b->dtype, (char *)j->pinned + i * esz, 1, j->dim, &v) >= 0)
      memset((char *)j->pinned + i * esz, 0, (size_t)esz);
  }
}

/* The indices of step i checked on the host, in stream order. */
static void queue_check(cuda_ctx *c, int32_t i, bool write_back) {
  check_job *j = &c->checks[i];
  if (j->bytes <= 0) return;
  CUdeviceptr idx = c->ptrs[j->buffer];
  check_run(c, c->cu->memcpy_dtoh(j->pinned, idx, (size_t)j->bytes, c->compute),
            "cuMemcpyDtoHAsync");
  check_run(c, c->cu->launch_host_func(c->compute, check_host_fn, j), "cuLaunchHostFunc");
  if (write_back)
    check_run(c, c->cu->memcpy_htod(idx, j->pinned, (size_t)j->bytes, c->compute),
              "cuMemcpyHtoDAsync");
}

static void cuda_run_check(void *ctx, int32_t i) { queue_check(ctx, i, true); }

/* out = data, then every tuple's row added (the kernel stops at a bad
 * index, which the check reports). */
static void cuda_run_scatter(void *ctx, int32_t i) {
  cuda_ctx *c = ctx;
  const sc_scatter_step *x = &c->p->steps[i].scatter;
  queue_check(c, i, false);
  CUdeviceptr out = c->ptrs[x->out], data = c->ptrs[x->data];
  if (out != data)
    check_run(c, c->cu->memcpy_dtod(out, data, (size_t)c->p->buffers[x->out].bytes, c->compute),
              "cuMemcpyDtoDAsync");
  scatter_job *j = &c->scatters[i];
  if (x->n > 0 && x->row > 0)
    check_run(c, c->cu->launch_kernel(j->fn, j->grid, 1, 1, 256, 1, 1, 0, c->compute, j->args,
                                      NULL),
              "cuLaunchKernel");
}

const sc_device_iface sc_device_cuda = {
    .name = "cuda",
    .host_arena = false,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .prepare = cuda_prepare,
    .supports_step = cuda_supports_step,
    .alloc_arena = cuda_alloc_arena,
    .free_arena = cuda_free_arena,
    .bind = cuda_bind,
    .buffer_ptr = cuda_buffer_ptr,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .zero = cuda_zero,
    .copy_device = cuda_copy_device,
    .run_kernel = cuda_run_kernel,
    .run_gemm = cuda_run_gemm,
    .run_attention = cuda_run_attention,
    .threads = cuda_threads,
    .compile_seconds = cuda_compile_seconds,
    .begin_run = cuda_begin_run,
    .end_run = cuda_end_run,
    .sync = cuda_sync,
    .run_comm = cuda_run_comm,
    .wait_comm = cuda_wait_comm,
    .run_copy = cuda_run_copy,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .run_check = cuda_run_check,
    .run_scatter = cuda_run_scatter,
    .memory = cuda_memory,
    .last_run_seconds = cuda_last_run_seconds,
    .reserve_async = cuda_reserve_async,
    .end_run_async = cuda_end_run_async,
    .copy_out_async = cuda_copy_out_async,
    .mark = cuda_mark,
    .wait_mark = cuda_wait_mark,
};
