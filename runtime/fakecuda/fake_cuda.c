/* fake_cuda.c — the emulated CUDA driver: a libcuda.so.1 of our own.
 *
 * With SHARDC_CUDA_EMU=1, runtime/cuda_driver.c opens this library instead
 * of the system's driver, so that the whole GPU runtime (runtime/
 * cuda_device.c: modules, launches, two kinds of streams ordered by events,
 * CUDA graphs, the arena, copies) runs and is tested on machines without a
 * GPU. It exports the entry points of cuda_driver.h under the driver's
 * own names and ABI; the semantics follow the CUDA documentation where the
 * runtime relies on them, and are checked more strictly where a real GPU
 * would only misbehave sometimes:
 *
 *   devices   SHARDC_FAKE_CUDA_DEVICES (default 1) of compute capability
 *             9.0; one primary context each (a token: memory is shared).
 *             What a context synchronises (cuCtxSynchronize, the checks on
 *             free) is the calling host thread's streams: ranks that are
 *             threads of one process each drive their own GPU.
 *   memory    device memory is host memory (256-byte aligned); cuMemGetInfo
 *             counts what is allocated against 64 GiB.
 *   streams   each stream is a FIFO of operations run, in order, by a
 *             thread of its own: work is really asynchronous, so a missing
 *             event wait shows up as a wrong result or a race under
 *             ThreadSanitizer, as on a GPU. The NULL stream is one more such
 *             stream (no legacy implicit synchronisation).
 *   events    a record is an operation of its stream; a wait blocks the
 *             waiting stream's thread until the recorded point has run.
 *   modules   the image must be SC_CU_EMU_IMAGE + the unit's CUDA C, which
 *             is compiled by the host C++ compiler (runtime/cuda_emu.h);
 *             a PTX or CUBIN image is refused (CUDA_ERROR_INVALID_PTX, with
 *             the reason in the JIT error log): PTX does not run here.
 *   launches  a kernel's arguments are copied at the call, as the driver
 *             does; grids and blocks are one-dimensional as shardc's are.
 *             A kernel that fails (a deadlock, a barrier where none may be)
 *             makes the context's error sticky: every later synchronising
 *             call returns CUDA_ERROR_LAUNCH_FAILED, as after a GPU fault.
 *   graphs    cuStreamBeginCapture records every operation of the stream,
 *             and of every stream that waits on an event recorded during
 *             the capture, in call order; cuStreamEndCapture fails with
 *             CUDA_ERROR_STREAM_CAPTURE_UNJOINED when such a stream was not
 *             joined back. A replay runs the nodes in capture order (a
 *             valid order of the graph's dependencies) on the launching
 *             stream. While a capture is open, allocation, freeing and
 *             synchronisation are refused (CUDA_ERROR_STREAM_CAPTURE_
 *             UNSUPPORTED), as in the driver's global capture mode.
 *
 * The call log: with SHARDC_FAKE_CUDA_LOG=FILE every call and every
 * executed operation is appended to FILE, one line each, and a closing
 * `summary:` line gives the counts (launches from streams and from graph
 * replays, graphs, host functions, copies; the bytes the copies moved host
 * to device, htod_bytes, and device to host, dtoh_bytes, counted as they
 * run, graph replays included: each executed copy's line says
 * `copy N htod|dtoh|dtod`), the host's waits (host_syncs: each
 * cuStreamSynchronize, cuEventSynchronize and cuCtxSynchronize, also
 * logged as a `call` line) and `violations=N`: operations
 * that a real GPU would run in an undefined order or on freed memory —
 * races (two operations of different streams touching the same device
 * memory, one writing, with no event or host synchronisation ordering
 * them: see "the race check" below), memory freed, a stream, graph or
 * module destroyed while work that uses it is still queued, a capture not
 * joined back. Each violation is also a line `violation: ...` and is
 * printed to stderr. Tests read the log (or sc_fake_cuda_violations).
 *
 * Not emulated: timing, occupancy, the memory model between blocks,
 * peer access, IPC, the runtime API. cuBLASLt and NCCL cannot run on this
 * driver (they load their own GPU code); the runtime uses its host GEMM
 * (and for FP8 products its emulated cuBLASLt, runtime/cublaslt_emu.c)
 * and its CPU communicators instead when it sees the emulated driver. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda_driver.h"
#include "runtime/cuda_emu.h"

#define EXPORT __attribute__((visibility("default")))

/* every entry point, declared from the runtime's own list */
#define DECLARE(field, sym, ret, params) EXPORT ret sym params;
SC_CU_ENTRY_POINTS(DECLARE)
#undef DECLARE

enum { MAX_ARGS = 512, MAX_DEVICES = 64 };
static const size_t TOTAL_BYTES = (size_t)64 << 30;

/* ---- the log ---- */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static bool log_opened;
static struct {
  long launches, graph_launches, graphs, replays, host_fns, copies, violations, allocs;
  long host_syncs; /* the host waited: stream, event or context synchronise */
  long long htod_bytes, dtoh_bytes; /* copied between host and device, as run */
} count;

static void count_sync(void) {
  pthread_mutex_lock(&log_mu);
  count.host_syncs++;
  pthread_mutex_unlock(&log_mu);
}

static FILE *logf_(void) {
  if (!log_opened) {
    log_opened = true;
    const char *p = getenv("SHARDC_FAKE_CUDA_LOG");
    if (p && *p) log_file = fopen(p, "a");
  }
  return log_file;
}

__attribute__((format(printf, 1, 2))) static void logln(const char *fmt, ...) {
  pthread_mutex_lock(&log_mu);
  FILE *f = logf_();
  if (f) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
  }
  pthread_mutex_unlock(&log_mu);
}

__attribute__((format(printf, 1, 2))) static void violation(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_mu);
  count.violations++;
  pthread_mutex_unlock(&log_mu);
  fprintf(stderr, "fake libcuda: violation: %s\n", msg);
  logln("violation: %s", msg);
}

/* The violations so far (tests read it with dlsym). */
EXPORT long sc_fake_cuda_violations(void);
long sc_fake_cuda_violations(void) {
  pthread_mutex_lock(&log_mu);
  long n = count.violations;
  pthread_mutex_unlock(&log_mu);
  return n;
}

__attribute__((destructor)) static void write_summary(void) {
  pthread_mutex_lock(&log_mu);
  FILE *f = logf_();
  if (f) {
    fprintf(f,
            "summary: launches=%ld graph_launches=%ld graphs=%ld replays=%ld host_fns=%ld "
            "copies=%ld allocs=%ld violations=%ld htod_bytes=%lld dtoh_bytes=%lld "
            "host_syncs=%ld\n",
            count.launches, count.graph_launches, count.graphs, count.replays, count.host_fns,
            count.copies, count.allocs, count.violations, count.htod_bytes, count.dtoh_bytes,
            count.host_syncs);
    fclose(f);
    log_file = NULL;
  }
  pthread_mutex_unlock(&log_mu);
}

/* ---- objects ---- */
typedef struct fmodule fmodule;
typedef struct ffunc {
  fmodule *mod;
  char name[256];
  int n_args;
  sc_cuda_mode mode;
  int n_ptrs;              /* pointer args whose extents are known */
  const long long *extents; /* [n_ptrs] pairs: written, bytes (the unit's) */
  int max_dyn_shared;      /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (48 KiB
                              until set, as on a GPU) */
  struct ffunc *next;
} ffunc;

struct fmodule {
  sc_cuda_emu *emu;
  pthread_mutex_t mu; /* one launch at a time per emulator */
  pthread_mutex_t funcs_mu; /* guards funcs: threads of one context look up
                               functions of a shared module at once, as the
                               driver API allows */
  ffunc *funcs;
  atomic_long queued; /* launches of its functions not yet run */
};

typedef struct fstream fstream;
typedef struct fgraph fgraph;

typedef struct fevent {
  struct vclock *vc;     /* the recording stream's clock at the record (race_mu) */
  uint64_t issued, done; /* records made / run (ev_mu) */
  fgraph *captured;      /* recorded while capturing: into this graph */
  fstream *cap_stream;
  long cap_pos;          /* the graph's node count at the record */
  double t;              /* when its last record ran, in seconds (ev_mu) */
} fevent;

typedef struct range {
  uintptr_t lo, hi;
  bool write;
} range;

enum { OP_LAUNCH, OP_HOST, OP_COPY, OP_COPY2D, OP_SET, OP_RECORD, OP_WAIT, OP_GRAPH };
enum { COPY_HTOD, COPY_DTOH, COPY_DTOD };
static const char *const copy_dir[] = {"htod", "dtoh", "dtod"};

typedef struct gexec gexec;
typedef struct fop {
  int kind;
  struct fop *next;
  union {
    struct {
      ffunc *f;
      unsigned grid, block, shared;
      uint64_t *args;
    } launch;
    struct {
      CUhostFn fn;
      void *ud;
      int n_ranges; /* declared by sc_fake_cuda_host_access */
      range *ranges;
    } host;
    struct {
      void *dst;
      const void *src;
      size_t n;
      int dir; /* COPY_HTOD, COPY_DTOH, COPY_DTOD */
    } copy;
    sc_cu_memcpy2d c2d;
    struct {
      void *dst;
      unsigned char v;
      size_t n;
    } set;
    struct {
      fevent *e;
      uint64_t gen;
    } ev;
    gexec *graph;
  } u;
} fop;

struct fgraph {
  fop *nodes; /* [n] copies; launch args owned */
  long n, cap;
  bool invalid;
};

struct gexec {
  fop *nodes;
  long n;
  atomic_long inflight;
};

struct fstream {
  pthread_t thread;
  pthread_t owner;   /* the host thread that made it: its "context" */
  pthread_mutex_t mu;
  pthread_cond_t work, idle;
  fop *head, *tail;
  long pending;      /* queued or running */
  bool stop;
  int id;
  fgraph *capturing; /* the open capture this stream records into */
  bool origin;       /* the stream the capture began on */
  long last_node;    /* capture: index of its last node, -1 none */
  long joined_at;    /* capture: the largest cap_pos of its events the origin waited on */
  int vid;           /* its slot in vector clocks, or -1 (too many streams: not checked) */
  struct vclock *vc; /* what it has ordered after so far (race_mu) */
};

/* MAX_RANGES: the most ranges an operation is checked with — every pointer
 * a launch's 4 KiB of parameters can hold (a multi-tensor kernel's table,
 * codegen/multi_tensor.c: AdamW over GPT-2 passes 308); a graph launch is
 * checked with its first GRAPH_RANGES. */
enum { VC_SLOTS = 128, HISTORY = 8192, MAX_RANGES = 512, GRAPH_RANGES = 64 };
typedef struct vclock {
  uint32_t t[VC_SLOTS];
} vclock;
typedef struct access {
  range r;
  int vid, stream; /* its stream's clock slot and id */
  uint32_t clock;
} access;
static pthread_mutex_t race_mu = PTHREAD_MUTEX_INITIALIZER;
static range *allocs; /* live cuMemAlloc ranges: only device memory is checked */
static int n_allocs, cap_allocs;
static access history[HISTORY];
static int n_history, next_vid;
static __thread vclock host_vc;
static __thread range declared[MAX_RANGES]; /* for the next host function */
static __thread int n_declared;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* streams list, captures, memory */
static fstream **streams;
static int n_streams, cap_streams, next_stream_id = 1;
static int open_captures;
static size_t allocated;
static atomic_int sticky; /* a kernel failed: CUDA_ERROR_LAUNCH_FAILED from now on */
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER; /* cuInit's first call, whole */
static atomic_bool initialised; /* set once the NULL stream exists */
static int n_devices = 1;
static fstream *null_stream;

static const char *err_text(CUresult r) {
  switch (r) {
  case SC_CUDA_SUCCESS: return "no error";
  case SC_CUDA_ERROR_INVALID_VALUE: return "invalid argument";
  case SC_CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
  case SC_CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
  case SC_CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
  case SC_CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
  case SC_CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
  case SC_CUDA_ERROR_ILLEGAL_STATE: return "the operation cannot be performed in the present state";
  case SC_CUDA_ERROR_NOT_FOUND: return "named symbol not found";
  case SC_CUDA_ERROR_NOT_READY: return "device not ready";
  case SC_CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
  case SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    return "operation not permitted when stream is capturing";
  case SC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    return "operation failed due to a previous error during capture";
  case SC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    return "capture sequence contains a fork that was not joined to the primary stream";
  default: return NULL;
  }
}

/* ---- running operations ---- */
static void run_graph(gexec *x);

static void run_op(fstream *s, fop *o) {
  switch (o->kind) {
  case OP_LAUNCH: {
    ffunc *f = o->u.launch.f;
    void *argv[MAX_ARGS];
    for (int i = 0; i < f->n_args; i++) argv[i] = &o->u.launch.args[i];
    sc_cuda_launch l = {.mode = f->mode, .block = (int)o->u.launch.block,
                        .grid = (int64_t)o->u.launch.grid,
                        .shared_bytes = (int)o->u.launch.shared};
    sc_diag d = {0};
    pthread_mutex_lock(&f->mod->mu);
    sc_status st = atomic_load(&sticky) ? SC_OK
                                        : sc_cuda_emu_launch(f->mod->emu, f->name, &l, argv, &d);
    pthread_mutex_unlock(&f->mod->mu);
    if (st != SC_OK) {
      atomic_store(&sticky, 1);
      fprintf(stderr, "fake libcuda: kernel %s failed: %s\n", f->name, d.msg);
      logln("fault: kernel %s: %s", f->name, d.msg);
    }
    logln("run stream=%d launch %s grid=%u block=%u", s->id, f->name, o->u.launch.grid,
          o->u.launch.block);
    break;
  }
  case OP_HOST:
    logln("run stream=%d host_fn", s->id);
    o->u.host.fn(o->u.host.ud);
    break;
  case OP_COPY:
    logln("run stream=%d copy %zu %s", s->id, o->u.copy.n, copy_dir[o->u.copy.dir]);
    pthread_mutex_lock(&log_mu);
    if (o->u.copy.dir == COPY_HTOD) count.htod_bytes += (long long)o->u.copy.n;
    if (o->u.copy.dir == COPY_DTOH) count.dtoh_bytes += (long long)o->u.copy.n;
    pthread_mutex_unlock(&log_mu);
    if (o->u.copy.n) memmove(o->u.copy.dst, o->u.copy.src, o->u.copy.n);
    break;
  case OP_COPY2D: {
    const sc_cu_memcpy2d *c = &o->u.c2d;
    logln("run stream=%d copy2d %zux%zu", s->id, c->WidthInBytes, c->Height);
    const char *src = (const char *)(uintptr_t)c->srcDevice + c->srcY * c->srcPitch + c->srcXInBytes;
    char *dst = (char *)(uintptr_t)c->dstDevice + c->dstY * c->dstPitch + c->dstXInBytes;
    for (size_t r = 0; r < c->Height; r++)
      memmove(dst + r * c->dstPitch, src + r * c->srcPitch, c->WidthInBytes);
    break;
  }
  case OP_SET:
    logln("run stream=%d memset %zu", s->id, o->u.set.n);
    memset(o->u.set.dst, o->u.set.v, o->u.set.n);
    break;
  case OP_RECORD: {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&ev_mu);
    o->u.ev.e->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (o->u.ev.gen > o->u.ev.e->done) o->u.ev.e->done = o->u.ev.gen;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
    logln("run stream=%d record %p gen=%llu", s->id, (void *)o->u.ev.e,
          (unsigned long long)o->u.ev.gen);
    break;
  }
  case OP_WAIT:
    pthread_mutex_lock(&ev_mu);
    while (o->u.ev.e->done < o->u.ev.gen) pthread_cond_wait(&ev_cv, &ev_mu);
    pthread_mutex_unlock(&ev_mu);
    logln("run stream=%d waited %p gen=%llu", s->id, (void *)o->u.ev.e,
          (unsigned long long)o->u.ev.gen);
    break;
  case OP_GRAPH:
    logln("run stream=%d graph %p (%ld nodes)", s->id, (void *)o->u.graph, o->u.graph->n);
    run_graph(o->u.graph);
    atomic_fetch_sub(&o->u.graph->inflight, 1);
    break;
  }
  if (o->kind == OP_LAUNCH) atomic_fetch_sub(&o->u.launch.f->mod->queued, 1);
}

static void run_graph(gexec *x) {
  static fstream replay = {.id = 0};
  for (long i = 0; i < x->n; i++) {
    fop *o = &x->nodes[i];
    if (o->kind == OP_RECORD || o->kind == OP_WAIT) continue; /* order is capture order */
    if (o->kind == OP_LAUNCH) {
      atomic_fetch_add(&o->u.launch.f->mod->queued, 1);
      pthread_mutex_lock(&log_mu);
      count.graph_launches++;
      pthread_mutex_unlock(&log_mu);
    }
    run_op(&replay, o);
  }
}

static void free_op(fop *o) {
  if (o->kind == OP_LAUNCH) free(o->u.launch.args);
  if (o->kind == OP_HOST) free(o->u.host.ranges);
  free(o);
}

static void *stream_main(void *arg) {
  fstream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && !s->head) pthread_cond_wait(&s->work, &s->mu);
    if (!s->head) break;
    fop *o = s->head;
    pthread_mutex_unlock(&s->mu);
    run_op(s, o);
    pthread_mutex_lock(&s->mu);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->pending--;
    free_op(o);
    pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static fstream *stream_of(CUstream h) { return h ? (fstream *)h : null_stream; }

static void enqueue(fstream *s, fop *o) {
  o->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->pending++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
}

static void drain(fstream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->pending) pthread_cond_wait(&s->idle, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static long pending_of(fstream *s) {
  pthread_mutex_lock(&s->mu);
  long n = s->pending;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static fstream *new_stream(void) {
  fstream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  s->owner = pthread_self();
  s->vc = calloc(1, sizeof *s->vc);
  if (!s->vc) {
    free(s);
    return NULL;
  }
  pthread_mutex_lock(&race_mu);
  s->vid = next_vid < VC_SLOTS ? next_vid++ : -1;
  pthread_mutex_unlock(&race_mu);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  pthread_mutex_lock(&g_mu);
  s->id = next_stream_id++;
  if (n_streams == cap_streams) {
    int cap = cap_streams ? 2 * cap_streams : 16;
    fstream **a = realloc(streams, (size_t)cap * sizeof *a);
    if (a) {
      streams = a;
      cap_streams = cap;
    }
  }
  if (n_streams < cap_streams) streams[n_streams++] = s;
  pthread_mutex_unlock(&g_mu);
  return s;
}

/* The calling thread's context: the streams it made (and the NULL
 * stream). Ranks that are threads of one process each drive their own GPU,
 * so one rank's synchronisation never waits for another's work. */
static bool mine(const fstream *s) {
  return s == null_stream || pthread_equal(s->owner, pthread_self());
}

static long all_pending(void) {
  long n = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < n_streams; i++)
    if (mine(streams[i])) n += pending_of(streams[i]);
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void drain_all(void) {
  pthread_mutex_lock(&g_mu);
  int n = 0;
  fstream *copy[1024];
  for (int i = 0; i < n_streams && n < 1024; i++)
    if (mine(streams[i])) copy[n++] = streams[i];
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < n; i++) drain(copy[i]);
}

/* A capture open in the calling thread's context. */
static bool capturing_any(void) {
  pthread_mutex_lock(&g_mu);
  bool c = false;
  for (int i = 0; open_captures > 0 && i < n_streams && !c; i++)
    c = streams[i]->capturing && mine(streams[i]);
  pthread_mutex_unlock(&g_mu);
  return c;
}

/* Appends a copy of o to the stream's capture (taking o's launch args). */
static CUresult capture_node(fstream *s, fop *o) {
  fgraph *g = s->capturing;
  pthread_mutex_lock(&g_mu);
  if (g->n == g->cap) {
    long cap = g->cap ? 2 * g->cap : 64;
    fop *a = realloc(g->nodes, (size_t)cap * sizeof *a);
    if (!a) {
      pthread_mutex_unlock(&g_mu);
      free_op(o);
      return SC_CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->nodes = a;
    g->cap = cap;
  }
  s->last_node = g->n;
  g->nodes[g->n++] = *o;
  pthread_mutex_unlock(&g_mu);
  free(o); /* args now belong to the node */
  return SC_CUDA_SUCCESS;
}

/* ---- the race check ----
 * Happens-before by vector clocks, at submission (so it is deterministic,
 * whatever the threads' timing): a stream's operations are ordered among
 * themselves; an event carries its stream's clock to the streams that wait
 * on it; a host synchronisation carries the synchronised stream's clock to
 * what the host submits afterwards (per host thread). Each operation's
 * memory ranges (a kernel's pointer params with the extents its unit
 * exports, copies, memsets, and what the runtime declares for a host
 * function through sc_fake_cuda_host_access) are compared with the
 * ranges recent operations of other streams touched: two accesses, one a
 * write, with neither ordered before the other, are a violation: "race".
 * A graph launch counts as one operation with all its nodes' ranges. */
static void vc_merge(vclock *into, const vclock *from) {
  for (int i = 0; i < VC_SLOTS; i++)
    if (from->t[i] > into->t[i]) into->t[i] = from->t[i];
}

/* The ranges operation o touches (at most MAX_RANGES; a graph's beyond
 * its first GRAPH_RANGES are not checked). */
static int op_ranges(const fop *o, range *out) {
  int n = 0;
  switch (o->kind) {
  case OP_LAUNCH: {
    const ffunc *f = o->u.launch.f;
    for (int i = 0; i < f->n_ptrs && i < f->n_args && n < MAX_RANGES; i++) {
      uintptr_t p = (uintptr_t)o->u.launch.args[i];
      long long bytes = f->extents[2 * i + 1];
      if (bytes < 0 && -bytes - 1 < f->n_args) /* the value of argument -bytes - 1 */
        bytes = (long long)o->u.launch.args[-bytes - 1];
      if (p && bytes > 0) out[n++] = (range){p, p + (uintptr_t)bytes, f->extents[2 * i] != 0};
    }
    break;
  }
  case OP_COPY:
    if (o->u.copy.n) {
      out[n++] = (range){(uintptr_t)o->u.copy.dst, (uintptr_t)o->u.copy.dst + o->u.copy.n, true};
      out[n++] = (range){(uintptr_t)o->u.copy.src, (uintptr_t)o->u.copy.src + o->u.copy.n, false};
    }
    break;
  case OP_COPY2D: {
    const sc_cu_memcpy2d *c = &o->u.c2d;
    if (c->Height && c->WidthInBytes) {
      uintptr_t s = (uintptr_t)c->srcDevice + c->srcY * c->srcPitch + c->srcXInBytes;
      uintptr_t d = (uintptr_t)c->dstDevice + c->dstY * c->dstPitch + c->dstXInBytes;
      out[n++] = (range){d, d + (c->Height - 1) * c->dstPitch + c->WidthInBytes, true};
      out[n++] = (range){s, s + (c->Height - 1) * c->srcPitch + c->WidthInBytes, false};
    }
    break;
  }
  case OP_SET:
    if (o->u.set.n)
      out[n++] = (range){(uintptr_t)o->u.set.dst, (uintptr_t)o->u.set.dst + o->u.set.n, true};
    break;
  case OP_HOST:
    for (int i = 0; i < o->u.host.n_ranges; i++) out[n++] = o->u.host.ranges[i];
    break;
  case OP_GRAPH:
    for (long i = 0; i < o->u.graph->n && n < GRAPH_RANGES; i++) {
      range sub[MAX_RANGES];
      int k = op_ranges(&o->u.graph->nodes[i], sub);
      for (int j = 0; j < k && n < GRAPH_RANGES; j++) out[n++] = sub[j];
    }
    break;
  }
  return n;
}

static bool device_memory(uintptr_t p) {
  for (int i = 0; i < n_allocs; i++)
    if (p >= allocs[i].lo && p < allocs[i].hi) return true;
  return false;
}

/* Ticks s's clock for o and checks o's ranges (race_mu held). */
static void race_check(fstream *s, const fop *o) {
  if (s->vid < 0) return;
  vc_merge(s->vc, &host_vc);
  uint32_t now = ++s->vc->t[s->vid];
  range rs[MAX_RANGES];
  int n = 0, all = op_ranges(o, rs);
  for (int i = 0; i < all; i++) /* host memory is the host's business */
    if (device_memory(rs[i].lo)) rs[n++] = rs[i];
  for (int i = 0; i < n; i++) {
    for (int h = 0; h < n_history; h++) {
      access *a = &history[h];
      if (a->vid == s->vid || a->r.hi <= rs[i].lo || rs[i].hi <= a->r.lo) continue;
      if (!a->r.write && !rs[i].write) continue;
      if (a->clock <= s->vc->t[a->vid]) continue; /* ordered before */
      violation("race: stream %d %s [%#lx, +%lu) unordered with stream %d's %s of "
                "[%#lx, +%lu) (a missing event wait?)",
                s->id, rs[i].write ? "writes" : "reads", (unsigned long)rs[i].lo,
                (unsigned long)(rs[i].hi - rs[i].lo), a->stream, a->r.write ? "write" : "read",
                (unsigned long)a->r.lo, (unsigned long)(a->r.hi - a->r.lo));
      a->clock = 0; /* reported once */
    }
  }
  for (int i = 0; i < n; i++) { /* remember it; drop what it covers and follows */
    int w = 0;
    for (int h = 0; h < n_history; h++) {
      access *a = &history[h];
      bool covered = rs[i].write && a->r.lo >= rs[i].lo && a->r.hi <= rs[i].hi &&
                     a->clock <= s->vc->t[a->vid];
      if (!covered && a->clock != 0) history[w++] = *a;
    }
    n_history = w;
    if (n_history == HISTORY) { /* full: forget the oldest half */
      memmove(history, history + HISTORY / 2, (HISTORY / 2) * sizeof *history);
      n_history = HISTORY / 2;
    }
    history[n_history++] = (access){rs[i], s->vid, s->id, now};
  }
}

/* New device memory [lo, hi). */
static void race_alloc(uintptr_t lo, uintptr_t hi) {
  pthread_mutex_lock(&race_mu);
  if (n_allocs == cap_allocs) {
    int cap = cap_allocs ? 2 * cap_allocs : 64;
    range *a = realloc(allocs, (size_t)cap * sizeof *a);
    if (a) {
      allocs = a;
      cap_allocs = cap;
    }
  }
  if (n_allocs < cap_allocs) allocs[n_allocs++] = (range){lo, hi, false};
  pthread_mutex_unlock(&race_mu);
}

/* Forgets what touched [lo, hi) (the memory was freed). */
static void race_forget(uintptr_t lo, uintptr_t hi) {
  pthread_mutex_lock(&race_mu);
  for (int i = 0; i < n_allocs; i++)
    if (allocs[i].lo == lo) {
      allocs[i] = allocs[--n_allocs];
      break;
    }
  int w = 0;
  for (int h = 0; h < n_history; h++)
    if (history[h].r.hi <= lo || hi <= history[h].r.lo) history[w++] = history[h];
  n_history = w;
  pthread_mutex_unlock(&race_mu);
}

/* The host has waited for s (or e): what it submits next follows. */
static void race_host_waited(const vclock *vc) {
  pthread_mutex_lock(&race_mu);
  vc_merge(&host_vc, vc);
  pthread_mutex_unlock(&race_mu);
}

EXPORT void sc_fake_cuda_host_access(const void *p, size_t bytes, int write);
void sc_fake_cuda_host_access(const void *p, size_t bytes, int write) {
  if (p && bytes && n_declared < MAX_RANGES)
    declared[n_declared++] = (range){(uintptr_t)p, (uintptr_t)p + bytes, write != 0};
}

/* Queues o on s, or records it into s's capture. */
static CUresult submit(fstream *s, fop *o) {
  pthread_mutex_lock(&race_mu);
  race_check(s, o);
  pthread_mutex_unlock(&race_mu);
  if (atomic_load(&sticky) && !s->capturing) {
    free_op(o);
    return SC_CUDA_ERROR_LAUNCH_FAILED;
  }
  if (s->capturing) return capture_node(s, o);
  enqueue(s, o);
  return SC_CUDA_SUCCESS;
}

static fop *new_op(int kind) {
  fop *o = calloc(1, sizeof *o);
  if (o) o->kind = kind;
  return o;
}

/* ---- the entry points ---- */
EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return SC_CUDA_ERROR_INVALID_VALUE;
  /* threads may call it at once, as the driver allows: none returns before
   * the first call has made the NULL stream it then uses */
  CUresult r = SC_CUDA_SUCCESS;
  pthread_mutex_lock(&init_mu);
  if (!atomic_load(&initialised)) {
    const char *n = getenv("SHARDC_FAKE_CUDA_DEVICES");
    if (n && *n) {
      int v = atoi(n);
      n_devices = v < 0 ? 0 : v > MAX_DEVICES ? MAX_DEVICES : v;
    }
    null_stream = new_stream();
    if (null_stream) atomic_store(&initialised, true);
    else r = SC_CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&init_mu);
  if (r != SC_CUDA_SUCCESS) return r;
  logln("call cuInit");
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  if (!v) return SC_CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
  const char *t = err_text(r);
  if (!s || !t) return SC_CUDA_ERROR_INVALID_VALUE;
  *s = t;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!atomic_load(&initialised)) return SC_CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return SC_CUDA_ERROR_INVALID_VALUE;
  *n = n_devices;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!atomic_load(&initialised)) return SC_CUDA_ERROR_NOT_INITIALIZED;
  if (!d || ordinal < 0 || ordinal >= n_devices) return SC_CUDA_ERROR_INVALID_VALUE;
  *d = ordinal;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (!name || len < 1 || d < 0 || d >= n_devices) return SC_CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "shardc emulated GPU %d (fake libcuda)", d);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  if (!v || d < 0 || d >= n_devices) return SC_CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
  case SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
  case SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
  case SC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
  case SC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = SC_CU_SHARED_OPTIN_BYTES; break;
  default: *v = 0;
  }
  return SC_CUDA_SUCCESS;
}

static char ctx_token[MAX_DEVICES];

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (!c || d < 0 || d >= n_devices) return SC_CUDA_ERROR_INVALID_VALUE;
  *c = (CUcontext)(void *)&ctx_token[d];
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  return d < 0 || d >= n_devices ? SC_CUDA_ERROR_INVALID_VALUE : SC_CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  (void)c;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
  if (capturing_any()) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  count_sync();
  logln("call cuCtxSynchronize");
  drain_all();
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < n_streams; i++)
    if (mine(streams[i])) race_host_waited(streams[i]->vc);
  pthread_mutex_unlock(&g_mu);
  return atomic_load(&sticky) ? SC_CUDA_ERROR_LAUNCH_FAILED : SC_CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  if (!free_bytes || !total) return SC_CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mu);
  *total = TOTAL_BYTES;
  *free_bytes = allocated < TOTAL_BYTES ? TOTAL_BYTES - allocated : 0;
  pthread_mutex_unlock(&g_mu);
  return SC_CUDA_SUCCESS;
}

/* Allocations carry their size in a 256-byte header. */
enum { HEADER = 256 };

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  if (!p || bytes == 0) return SC_CUDA_ERROR_INVALID_VALUE;
  if (capturing_any()) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  pthread_mutex_lock(&g_mu);
  bool room = bytes <= TOTAL_BYTES - allocated;
  if (room) allocated += bytes;
  count.allocs++;
  pthread_mutex_unlock(&g_mu);
  void *m = NULL;
  if (!room || posix_memalign(&m, HEADER, bytes + HEADER) != 0) {
    if (room) {
      pthread_mutex_lock(&g_mu);
      allocated -= bytes;
      pthread_mutex_unlock(&g_mu);
    }
    return SC_CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(size_t *)m = bytes;
  *p = (CUdeviceptr)(uintptr_t)((char *)m + HEADER);
  race_alloc((uintptr_t)*p, (uintptr_t)*p + bytes);
  logln("call cuMemAlloc %zu", bytes);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  if (!p) return SC_CUDA_SUCCESS;
  if (capturing_any()) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  long pending = all_pending();
  if (pending) {
    violation("cuMemFree with %ld operations still queued", pending);
    drain_all();
  }
  char *m = (char *)(uintptr_t)p - HEADER;
  race_forget((uintptr_t)p, (uintptr_t)p + *(size_t *)m);
  pthread_mutex_lock(&g_mu);
  allocated -= *(size_t *)m;
  pthread_mutex_unlock(&g_mu);
  logln("call cuMemFree");
  free(m);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
  if (!p) return SC_CUDA_ERROR_INVALID_VALUE;
  if (capturing_any()) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *p = NULL;
  if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
  if (capturing_any()) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  long pending = all_pending();
  if (pending) {
    violation("cuMemFreeHost with %ld operations still queued", pending);
    drain_all();
  }
  free(p);
  return SC_CUDA_SUCCESS;
}

static CUresult copy_op(void *dst, const void *src, size_t n, int dir, CUstream h) {
  fop *o = new_op(OP_COPY);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  o->u.copy.dst = dst;
  o->u.copy.src = src;
  o->u.copy.n = n;
  o->u.copy.dir = dir;
  pthread_mutex_lock(&log_mu);
  count.copies++;
  pthread_mutex_unlock(&log_mu);
  return submit(stream_of(h), o);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  if ((!dst || !src) && n) return SC_CUDA_ERROR_INVALID_VALUE;
  return copy_op((void *)(uintptr_t)dst, src, n, COPY_HTOD, s);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  if ((!dst || !src) && n) return SC_CUDA_ERROR_INVALID_VALUE;
  return copy_op(dst, (const void *)(uintptr_t)src, n, COPY_DTOH, s);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if ((!dst || !src) && n) return SC_CUDA_ERROR_INVALID_VALUE;
  return copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, COPY_DTOD, s);
}

EXPORT CUresult cuMemcpy2DAsync_v2(const sc_cu_memcpy2d *c, CUstream s) {
  if (!c || c->srcMemoryType != SC_CU_MEMORYTYPE_DEVICE ||
      c->dstMemoryType != SC_CU_MEMORYTYPE_DEVICE || c->WidthInBytes > c->srcPitch ||
      c->WidthInBytes > c->dstPitch || (!c->srcDevice || !c->dstDevice))
    return SC_CUDA_ERROR_INVALID_VALUE; /* device to device only, as shardc uses it */
  fop *o = new_op(OP_COPY2D);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  o->u.c2d = *c;
  pthread_mutex_lock(&log_mu);
  count.copies++;
  pthread_mutex_unlock(&log_mu);
  return submit(stream_of(s), o);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  if (!dst && n) return SC_CUDA_ERROR_INVALID_VALUE;
  fop *o = new_op(OP_SET);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  o->u.set.dst = (void *)(uintptr_t)dst;
  o->u.set.v = v;
  o->u.set.n = n;
  return submit(stream_of(s), o);
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned flags) {
  (void)flags;
  if (!out) return SC_CUDA_ERROR_INVALID_VALUE;
  fstream *s = new_stream();
  if (!s) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  *out = (CUstream)s;
  logln("call cuStreamCreate -> stream=%d", s->id);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fstream *s = (fstream *)h;
  if (s->capturing) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  long pending = pending_of(s);
  if (pending) violation("cuStreamDestroy of stream %d with %ld operations queued", s->id, pending);
  drain(s); /* the driver finishes the work first, too */
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < n_streams; i++)
    if (streams[i] == s) {
      streams[i] = streams[--n_streams];
      break;
    }
  pthread_mutex_unlock(&g_mu);
  logln("call cuStreamDestroy stream=%d", s->id);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->idle);
  pthread_mutex_destroy(&s->mu);
  free(s->vc);
  free(s);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream h) {
  fstream *s = stream_of(h);
  if (s->capturing) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  count_sync();
  logln("call cuStreamSynchronize stream=%d", s->id);
  drain(s);
  race_host_waited(s->vc);
  return atomic_load(&sticky) ? SC_CUDA_ERROR_LAUNCH_FAILED : SC_CUDA_SUCCESS;
}

EXPORT CUresult cuStreamQuery(CUstream h) {
  fstream *s = stream_of(h);
  if (s->capturing) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (atomic_load(&sticky)) return SC_CUDA_ERROR_LAUNCH_FAILED;
  if (pending_of(s)) return SC_CUDA_ERROR_NOT_READY;
  race_host_waited(s->vc);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned flags) {
  (void)flags;
  if (!out) return SC_CUDA_ERROR_INVALID_VALUE;
  fevent *e = calloc(1, sizeof *e);
  if (e && !(e->vc = calloc(1, sizeof *e->vc))) {
    free(e);
    e = NULL;
  }
  if (!e) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  *out = (CUevent)e;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fevent *e = (fevent *)h;
  pthread_mutex_lock(&ev_mu);
  bool queued = e->done < e->issued;
  pthread_mutex_unlock(&ev_mu);
  if (queued) {
    violation("cuEventDestroy of an event whose record is still queued");
    drain_all();
  }
  free(e->vc);
  free(e);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent h, CUstream sh) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fevent *e = (fevent *)h;
  fstream *s = stream_of(sh);
  logln("call cuEventRecord %p stream=%d%s", (void *)e, s->id, s->capturing ? " (captured)" : "");
  if (s->capturing) {
    fop *o = new_op(OP_RECORD);
    if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
    o->u.ev.e = e;
    CUresult r = capture_node(s, o);
    pthread_mutex_lock(&race_mu);
    *e->vc = *s->vc;
    pthread_mutex_unlock(&race_mu);
    pthread_mutex_lock(&g_mu);
    e->captured = s->capturing;
    e->cap_stream = s;
    e->cap_pos = s->last_node + 1; /* a wait on it joins everything s captured so far */
    pthread_mutex_unlock(&g_mu);
    return r;
  }
  fop *o = new_op(OP_RECORD);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&ev_mu);
  e->captured = NULL;
  o->u.ev.e = e;
  o->u.ev.gen = ++e->issued;
  pthread_mutex_unlock(&ev_mu);
  CUresult r = submit(s, o);
  pthread_mutex_lock(&race_mu);
  *e->vc = *s->vc;
  pthread_mutex_unlock(&race_mu);
  return r;
}

EXPORT CUresult cuStreamWaitEvent(CUstream sh, CUevent h, unsigned flags) {
  (void)flags;
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fevent *e = (fevent *)h;
  fstream *s = stream_of(sh);
  logln("call cuStreamWaitEvent stream=%d on %p", s->id, (void *)e);
  pthread_mutex_lock(&race_mu);
  vc_merge(s->vc, e->vc);
  pthread_mutex_unlock(&race_mu);
  pthread_mutex_lock(&g_mu);
  fgraph *g = e->captured;
  if (g) {
    if (!s->capturing) { /* s joins the capture (a fork) */
      s->capturing = g;
      s->origin = false;
      s->last_node = -1;
      s->joined_at = -1;
    } else if (s->capturing != g) {
      pthread_mutex_unlock(&g_mu);
      return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* two captures merged */
    }
    fstream *from = e->cap_stream;
    if (from != s && e->cap_pos > from->joined_at) from->joined_at = e->cap_pos;
    pthread_mutex_unlock(&g_mu);
    fop *o = new_op(OP_WAIT);
    if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
    o->u.ev.e = e;
    return capture_node(s, o);
  }
  pthread_mutex_unlock(&g_mu);
  if (s->capturing) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* outside event: the
                                                                         fake cannot order */
  fop *o = new_op(OP_WAIT);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&ev_mu);
  o->u.ev.e = e;
  o->u.ev.gen = e->issued; /* never recorded: 0, done at once */
  pthread_mutex_unlock(&ev_mu);
  return submit(s, o);
}

EXPORT CUresult cuEventSynchronize(CUevent h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fevent *e = (fevent *)h;
  if (e->captured) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  count_sync();
  logln("call cuEventSynchronize %p", (void *)e);
  pthread_mutex_lock(&ev_mu);
  uint64_t gen = e->issued;
  while (e->done < gen) pthread_cond_wait(&ev_cv, &ev_mu);
  pthread_mutex_unlock(&ev_mu);
  race_host_waited(e->vc);
  return atomic_load(&sticky) ? SC_CUDA_ERROR_LAUNCH_FAILED : SC_CUDA_SUCCESS;
}

/* The milliseconds between two events' last records (host clock), as the
 * driver: NOT_READY while either is still queued or was never recorded. */
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent h0, CUevent h1) {
  if (!ms || !h0 || !h1) return SC_CUDA_ERROR_INVALID_HANDLE;
  fevent *a = (fevent *)h0, *b = (fevent *)h1;
  pthread_mutex_lock(&ev_mu);
  bool ready = a->issued > 0 && b->issued > 0 && a->done == a->issued && b->done == b->issued;
  *ms = ready ? (float)((b->t - a->t) * 1e3) : 0.0f;
  pthread_mutex_unlock(&ev_mu);
  logln("call cuEventElapsedTime %p %p%s", (void *)a, (void *)b, ready ? "" : " (not ready)");
  return ready ? SC_CUDA_SUCCESS : SC_CUDA_ERROR_NOT_READY;
}

/* Writes msg into the JIT error log option, if the caller gave one. */
static void jit_error(unsigned n, const int *opts, void **values, const char *msg) {
  char *buf = NULL;
  size_t size = 0;
  for (unsigned i = 0; opts && values && i < n; i++) {
    if (opts[i] == SC_CU_JIT_ERROR_LOG_BUFFER) buf = values[i];
    if (opts[i] == SC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) size = (size_t)(uintptr_t)values[i];
  }
  if (buf && size) snprintf(buf, size, "%s", msg);
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned n_opts, int *opts,
                                   void **values) {
  if (!out || !image) return SC_CUDA_ERROR_INVALID_VALUE;
  const char *text = image;
  size_t hl = strlen(SC_CU_EMU_IMAGE);
  if (strncmp(text, SC_CU_EMU_IMAGE, hl) != 0) {
    jit_error(n_opts, opts, values,
              "the emulated CUDA driver runs no PTX or CUBIN: it takes shardc's CUDA C "
              "(SC_CU_EMU_IMAGE), compiled for the host");
    return SC_CUDA_ERROR_INVALID_PTX;
  }
  fmodule *m = calloc(1, sizeof *m);
  if (!m) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  sc_diag d = {0};
  if (sc_cuda_emu_open(text + hl, &m->emu, &d) != SC_OK) {
    jit_error(n_opts, opts, values, d.msg);
    free(m);
    return SC_CUDA_ERROR_INVALID_PTX;
  }
  pthread_mutex_init(&m->mu, NULL);
  pthread_mutex_init(&m->funcs_mu, NULL);
  *out = (CUmodule)m;
  logln("call cuModuleLoadDataEx (%.1f s host compile)", sc_cuda_emu_compile_seconds(m->emu));
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fmodule *m = (fmodule *)h;
  if (atomic_load(&m->queued)) {
    violation("cuModuleUnload with %ld launches of it still queued", atomic_load(&m->queued));
    drain_all();
  }
  for (ffunc *f = m->funcs, *next; f; f = next) {
    next = f->next;
    free(f);
  }
  sc_cuda_emu_close(m->emu);
  pthread_mutex_destroy(&m->mu);
  pthread_mutex_destroy(&m->funcs_mu);
  free(m);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name) {
  if (!out || !h || !name) return SC_CUDA_ERROR_INVALID_VALUE;
  fmodule *m = (fmodule *)h;
  CUresult rc = SC_CUDA_SUCCESS;
  pthread_mutex_lock(&m->funcs_mu);
  ffunc *f = m->funcs;
  while (f && strcmp(f->name, name) != 0) f = f->next;
  if (!f) {
    f = calloc(1, sizeof *f);
    if (!f) {
      rc = SC_CUDA_ERROR_OUT_OF_MEMORY;
    } else if (strlen(name) >= sizeof f->name ||
               !sc_cuda_emu_kernel_info(m->emu, name, &f->n_args, &f->mode, &f->n_ptrs,
                                        &f->extents) ||
               f->n_args < 0 || f->n_args > MAX_ARGS) {
      free(f);
      f = NULL;
      rc = SC_CUDA_ERROR_NOT_FOUND;
    } else {
      snprintf(f->name, sizeof f->name, "%s", name);
      f->max_dyn_shared = SC_CU_SHARED_DEFAULT_BYTES;
      f->mod = m;
      f->next = m->funcs;
      m->funcs = f;
    }
  }
  pthread_mutex_unlock(&m->funcs_mu);
  if (f) *out = (CUfunction)f;
  return rc;
}

EXPORT CUresult cuFuncSetAttribute(CUfunction h, int attr, int value) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  if (attr == SC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > SC_CU_SHARED_OPTIN_BYTES) return SC_CUDA_ERROR_INVALID_VALUE;
    ((ffunc *)h)->max_dyn_shared = value;
    logln("call cuFuncSetAttribute %s max_dynamic_shared=%d", ((ffunc *)h)->name, value);
  }
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared_bytes, CUstream sh,
                               void **params, void **extra) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  ffunc *f = (ffunc *)h;
  if (gx < 1 || gy != 1 || gz != 1 || bx < 1 || bx > 1024 || by != 1 || bz != 1 || extra ||
      shared_bytes > SC_CU_SHARED_OPTIN_BYTES || (f->n_args > 0 && !params))
    return SC_CUDA_ERROR_INVALID_VALUE;
  if ((int)shared_bytes > f->max_dyn_shared) { /* a GPU's answer too */
    violation("launch of %s with %u bytes of dynamic shared memory, above the %d its "
              "attribute allows (cuFuncSetAttribute)", f->name, shared_bytes, f->max_dyn_shared);
    return SC_CUDA_ERROR_INVALID_VALUE;
  }
  fop *o = new_op(OP_LAUNCH);
  uint64_t *args = malloc((size_t)(f->n_args > 0 ? f->n_args : 1) * sizeof *args);
  if (!o || !args) {
    free(o);
    free(args);
    return SC_CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < f->n_args; i++) memcpy(&args[i], params[i], sizeof args[i]);
  o->u.launch.f = f;
  o->u.launch.grid = gx;
  o->u.launch.block = bx;
  o->u.launch.shared = shared_bytes;
  o->u.launch.args = args;
  fstream *s = stream_of(sh);
  logln("call cuLaunchKernel %s stream=%d%s", f->name, s->id, s->capturing ? " (captured)" : "");
  if (!s->capturing) {
    atomic_fetch_add(&f->mod->queued, 1);
    pthread_mutex_lock(&log_mu);
    count.launches++;
    pthread_mutex_unlock(&log_mu);
  }
  CUresult r = submit(s, o);
  if (r != SC_CUDA_SUCCESS && !s->capturing) atomic_fetch_sub(&f->mod->queued, 1);
  return r;
}

EXPORT CUresult cuLaunchHostFunc(CUstream sh, CUhostFn fn, void *ud) {
  if (!fn) return SC_CUDA_ERROR_INVALID_VALUE;
  fop *o = new_op(OP_HOST);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  o->u.host.fn = fn;
  o->u.host.ud = ud;
  if (n_declared > 0 && (o->u.host.ranges = malloc((size_t)n_declared * sizeof(range)))) {
    memcpy(o->u.host.ranges, declared, (size_t)n_declared * sizeof(range));
    o->u.host.n_ranges = n_declared;
  }
  n_declared = 0;
  pthread_mutex_lock(&log_mu);
  count.host_fns++;
  pthread_mutex_unlock(&log_mu);
  return submit(stream_of(sh), o);
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream sh, int mode) {
  (void)mode;
  fstream *s = stream_of(sh);
  if (!sh || s->capturing) return SC_CUDA_ERROR_ILLEGAL_STATE;
  fgraph *g = calloc(1, sizeof *g);
  if (!g) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_mu);
  s->capturing = g;
  s->origin = true;
  s->last_node = -1;
  s->joined_at = -1;
  open_captures++;
  pthread_mutex_unlock(&g_mu);
  logln("call cuStreamBeginCapture stream=%d", s->id);
  return SC_CUDA_SUCCESS;
}

static void free_nodes(fop *nodes, long n) {
  for (long i = 0; i < n; i++) {
    if (nodes[i].kind == OP_LAUNCH) free(nodes[i].u.launch.args);
    if (nodes[i].kind == OP_HOST) free(nodes[i].u.host.ranges);
  }
  free(nodes);
}

EXPORT CUresult cuStreamEndCapture(CUstream sh, CUgraph *out) {
  fstream *s = stream_of(sh);
  if (!out || !s->capturing || !s->origin) return SC_CUDA_ERROR_ILLEGAL_STATE;
  fgraph *g = s->capturing;
  CUresult r = SC_CUDA_SUCCESS;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < n_streams; i++) {
    fstream *x = streams[i];
    if (x->capturing != g) continue;
    if (x != s && x->last_node >= 0 && x->last_node >= x->joined_at) {
      r = SC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
      violation("capture: stream %d forked from stream %d was not joined back", x->id, s->id);
    }
    x->capturing = NULL;
    x->origin = false;
  }
  open_captures--;
  for (long i = 0; i < g->n; i++) /* events recorded inside are plain again */
    if (g->nodes[i].kind == OP_RECORD) g->nodes[i].u.ev.e->captured = NULL;
  pthread_mutex_unlock(&g_mu);
  logln("call cuStreamEndCapture stream=%d (%ld nodes)", s->id, g->n);
  if (r != SC_CUDA_SUCCESS || g->invalid) {
    free_nodes(g->nodes, g->n);
    free(g);
    *out = NULL;
    return r != SC_CUDA_SUCCESS ? r : SC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  pthread_mutex_lock(&log_mu);
  count.graphs++;
  pthread_mutex_unlock(&log_mu);
  *out = (CUgraph)g;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h,
                                            unsigned long long flags) {
  (void)flags;
  if (!out || !h) return SC_CUDA_ERROR_INVALID_VALUE;
  fgraph *g = (fgraph *)h;
  gexec *x = calloc(1, sizeof *x);
  fop *nodes = calloc((size_t)(g->n > 0 ? g->n : 1), sizeof *nodes);
  if (!x || !nodes) {
    free(x);
    free(nodes);
    return SC_CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (long i = 0; i < g->n; i++) {
    nodes[i] = g->nodes[i];
    if (nodes[i].kind == OP_HOST) {
      nodes[i].u.host.ranges = NULL;
      int k = g->nodes[i].u.host.n_ranges;
      if (k > 0 && (nodes[i].u.host.ranges = malloc((size_t)k * sizeof(range))))
        memcpy(nodes[i].u.host.ranges, g->nodes[i].u.host.ranges, (size_t)k * sizeof(range));
      if (!nodes[i].u.host.ranges) nodes[i].u.host.n_ranges = 0;
    }
    if (nodes[i].kind != OP_LAUNCH) continue;
    int n = nodes[i].u.launch.f->n_args;
    uint64_t *a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    if (!a) {
      free_nodes(nodes, i);
      free(x);
      return SC_CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(a, g->nodes[i].u.launch.args, (size_t)n * sizeof *a);
    nodes[i].u.launch.args = a;
  }
  x->nodes = nodes;
  x->n = g->n;
  *out = (CUgraphExec)x;
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec h, CUstream sh) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  gexec *x = (gexec *)h;
  fstream *s = stream_of(sh);
  if (s->capturing) return SC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fop *o = new_op(OP_GRAPH);
  if (!o) return SC_CUDA_ERROR_OUT_OF_MEMORY;
  o->u.graph = x;
  atomic_fetch_add(&x->inflight, 1);
  pthread_mutex_lock(&log_mu);
  count.replays++;
  pthread_mutex_unlock(&log_mu);
  logln("call cuGraphLaunch stream=%d (%ld nodes)", s->id, x->n);
  CUresult r = submit(s, o);
  if (r != SC_CUDA_SUCCESS) atomic_fetch_sub(&x->inflight, 1);
  return r;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  gexec *x = (gexec *)h;
  if (atomic_load(&x->inflight)) {
    violation("cuGraphExecDestroy of a graph still queued or running");
    drain_all();
  }
  free_nodes(x->nodes, x->n);
  free(x);
  return SC_CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph h) {
  if (!h) return SC_CUDA_ERROR_INVALID_HANDLE;
  fgraph *g = (fgraph *)h;
  free_nodes(g->nodes, g->n);
  free(g);
  return SC_CUDA_SUCCESS;
}
