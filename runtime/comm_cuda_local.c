/* comm_cuda_local.c — the `cuda-local` communicator: thread-ranks of one
 * process sharing one CUDA device (docs/comm.md, "cuda-local").
 *
 * Each handle wraps a handle of a `local` group of the same ranks (the
 * host side: rendezvous, split, abort, and every operation while no stream
 * is set, on host memory, as the runtime's own bookkeeping calls them).
 * With a stream set (sc_comm_set_stream, by the CUDA device at create),
 * the buffers are device memory of the one context every rank shares, and
 * an operation only enqueues work on that stream and returns:
 *
 *   phase 1  each rank records its event `in` on its stream (its send is
 *            ready, its recv free) and posts its pointers; the ranks meet
 *            at a host barrier (so every record is enqueued before anyone
 *            waits on it); each stream waits on the others' `in` and reads
 *            the others' buffers directly: device-to-device copies
 *            (cuMemcpyDtoDAsync) and the reduction kernel (NVRTC, codegen
 *            sc_cuda_emit_reduce_source: contributions added in rank order
 *            0..size-1, f16/bf16 in f32, so every rank gets the same bits);
 *            then it records `mid`.
 *   phase 2  a second barrier; each stream waits on the others' `mid`
 *            (nobody reads its send, or its scratch, any more), and
 *            all_reduce copies the reduced slices out of their owners'
 *            scratch.
 *
 * all_reduce: rank r reduces slice r of the elements into its scratch
 * (phase 1) and gathers every slice from its owner's scratch (phase 2);
 * reduce_scatter reduces chunk r into recv; all_gather and all_to_all copy.
 * The host waits for no device work inside an operation: the barriers meet
 * the other ranks' host threads as they enqueue. Event and slot objects
 * are kept per parity of the operation's sequence number: a rank can be at
 * most one operation ahead of another (it cannot pass the next barrier
 * alone), so it never overwrites what another still reads.
 *
 * send is buffered as on `local`: the data is copied on the sender's
 * stream into a staging buffer of the group's pool, whose event `ready` is
 * recorded after it, and the message (which buffer, how many bytes) goes
 * through the host side's buffered send; recv takes it from the host
 * side's mailbox, makes its stream wait on `ready`, copies out, records the
 * staging buffer's `free` event and returns it to the pool; a sender
 * reusing it makes its stream wait on `free` first. So a send never waits
 * for its receiver, on the host or on the device.
 *
 * Scratch: each handle's own allocation, grown when an all_reduce needs
 * more. The world owns every device resource (scratch, events, staging,
 * the module) and frees them when its last handle goes, after every rank
 * has synchronised its streams: a rank that is done must not free what
 * another's stream still reads or waits on. The reduction module is
 * loaded once per world, from the first rank that reduces.
 *
 * CUDA graphs: not with this communicator (sc_comm.capturable false; the
 * CUDA device then runs every run step by step and says so at start-up).
 * Each rank's session captures its own streams into a graph of its own,
 * while a collective makes rank q's stream wait on an event recorded on
 * rank r's. During capture, a plain cuStreamWaitEvent on an event recorded
 * in r's capture would join two capture sequences, which the driver
 * refuses (CUDA_ERROR_STREAM_CAPTURE_ISOLATION: "a dependency would have
 * been created which crosses the capture sequence boundary"); with
 * CU_EVENT_WAIT_EXTERNAL it becomes an event-wait node of q's graph, which
 * on replay waits for the event's latest record when the node runs. r's
 * and q's replays are launched by their own host threads, without the host
 * rendezvous that orders each record before its wait when the operations
 * are issued, so that latest record may be the previous step's: the wait
 * would then order nothing, and q would read r's buffers while r still
 * writes them. (One graph for every rank would need one host thread to
 * launch them all.)
 *
 * Groups: at most SC_CUDA_REDUCE_SRCS ranks (the reduction kernel's
 * sources are arguments). Reductions on f32, f64, f16, bf16, i32, i64;
 * data movement on any dtype. Failures are the host side's (`local`: every
 * wait is a barrier or a receive there, bounded by SHARDC_COMM_TIMEOUT and
 * ended by an abort); a failed driver call aborts the world. The device
 * never waits on a record that is not already enqueued (every record
 * precedes the barrier before its waits), so its streams cannot hang on
 * another rank's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "runtime/comm.h"
#include "runtime/cuda_driver.h"

enum { MAX_GRID = 4096 };

typedef struct stage {
  struct stage *next;      /* in the world's list of every staging buffer */
  struct stage *pool_next; /* in its group's pool while not in flight */
  CUdeviceptr buf;
  size_t bytes;
  CUevent ready, free_ev;
  bool freed_once; /* free_ev recorded at least once */
} stage;

/* what a send tells its receiver, through the host's mailbox */
typedef struct cl_msg {
  uint64_t stage; /* the staging buffer (a stage *) */
  uint64_t bytes;
} cl_msg;

/* device memory or an event the world frees when it goes */
typedef struct owned {
  struct owned *next;
  CUdeviceptr mem;
  CUevent ev;
} owned;

typedef struct slot {
  const void *send;
  void *recv;
  CUdeviceptr scratch;
  CUevent in, mid;
} slot;

typedef struct cl_world cl_world;

typedef struct cl_group {
  cl_world *w;
  struct cl_group *next; /* in w->groups */
  int size;
  slot *slots[2];        /* [parity][size] */
  stage *pool;           /* staging buffers not in flight (under w->mu) */
} cl_group;

struct cl_world {
  pthread_mutex_t mu;
  atomic_int refs;
  const sc_cu *cu;
  cl_group *groups;
  stage *stages;          /* every staging buffer of every group */
  owned *owned;           /* the handles' scratch and events */
  CUdevice dev;           /* the shared GPU and its primary context, retained */
  CUcontext ctx;          /* at the first set_stream (have_ctx) */
  bool have_ctx;
  bool loaded;            /* the reduction module (under mu) */
  CUmodule mod;
  sc_diag load_err;
};

typedef struct cl_ctx {
  sc_comm *host; /* the local handle of the same rank */
  cl_group *g;
  CUstream stream; /* NULL: host mode */
  CUevent ev[2][2]; /* [parity][in, mid], made at the first device operation */
  uint64_t seq;     /* operations so far (their parity picks the slots) */
  CUdeviceptr scratch; /* the world's (owned) */
  size_t scratch_bytes;
} cl_ctx;

static const sc_comm_iface cl_iface;

static cl_ctx *X(sc_comm *c) { return c->ctx; }

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "cuda-local: out of memory");
}

/* A failed driver call: its status, and the world aborted with it (the
 * host side's abort: every rank's next barrier or receive fails) so that no
 * rank waits for this one. */
static sc_status cu_fail(sc_comm *c, CUresult r, const char *call, sc_diag *d) {
  sc_status st = sc_cu_check(X(c)->g->w->cu, r, call, "cuda-local", d);
  X(c)->host->iface->abort(X(c)->host, d->msg);
  return st;
}

#define CU(call)                                                        \
  do {                                                                  \
    CUresult r_ = (call);                                               \
    if (r_ != SC_CUDA_SUCCESS) return cu_fail(c, r_, #call, diag);      \
  } while (0)

/* ---- groups and the world ---- */

static void group_free(cl_group *g) {
  sc_free(g->slots[0]);
  sc_free(g->slots[1]);
  sc_free(g);
}

/* The world owns every device resource its handles made, and frees them
 * when its last handle goes: by then every rank has synchronised its
 * streams (the CUDA device does before it lets go of its communicators), so
 * no stream still reads another rank's scratch or waits on its events.
 * Freed in the shared context, whichever thread comes last. */
static void world_release(cl_world *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  for (cl_group *g = w->groups, *n; g; g = n) {
    n = g->next;
    group_free(g);
  }
  const sc_cu *cu = w->cu;
  if (w->have_ctx) cu->ctx_set_current(w->ctx);
  for (stage *s = w->stages, *n; s; s = n) {
    n = s->next;
    if (s->ready) cu->event_destroy(s->ready);
    if (s->free_ev) cu->event_destroy(s->free_ev);
    if (s->buf) cu->mem_free(s->buf);
    sc_free(s);
  }
  for (owned *o = w->owned, *n; o; o = n) {
    n = o->next;
    if (o->ev) cu->event_destroy(o->ev);
    if (o->mem) cu->mem_free(o->mem);
    sc_free(o);
  }
  if (w->mod) cu->module_unload(w->mod);
  if (w->have_ctx) cu->ctx_release(w->dev);
  pthread_mutex_destroy(&w->mu);
  sc_free(w);
}

/* mem or ev (the other 0) for the world to free; false: no memory (then
 * freed here). */
static bool own(cl_world *w, CUdeviceptr mem, CUevent ev) {
  owned *o = sc_calloc(1, sizeof *o);
  if (!o) {
    if (mem) w->cu->mem_free(mem);
    if (ev) w->cu->event_destroy(ev);
    return false;
  }
  o->mem = mem;
  o->ev = ev;
  pthread_mutex_lock(&w->mu);
  o->next = w->owned;
  w->owned = o;
  pthread_mutex_unlock(&w->mu);
  return true;
}

static cl_group *group_new(cl_world *w, int size) {
  cl_group *g = sc_calloc(1, sizeof *g);
  if (!g) return NULL;
  g->w = w;
  g->size = size;
  g->slots[0] = sc_calloc((size_t)size, sizeof *g->slots[0]);
  g->slots[1] = sc_calloc((size_t)size, sizeof *g->slots[1]);
  if (!g->slots[0] || !g->slots[1]) {
    group_free(g);
    return NULL;
  }
  pthread_mutex_lock(&w->mu);
  g->next = w->groups;
  w->groups = g;
  pthread_mutex_unlock(&w->mu);
  return g;
}

static sc_comm *handle_new(cl_group *g, sc_comm *host, int rank) {
  cl_ctx *x = sc_calloc(1, sizeof *x);
  if (!x) return NULL;
  x->host = host;
  x->g = g;
  sc_comm *c = sc_comm_alloc(&cl_iface, x, rank, g->size);
  if (!c) {
    sc_free(x);
    return NULL;
  }
  c->capturable = false; /* the module comment */
  atomic_fetch_add(&g->w->refs, 1);
  return c;
}

static void cl_destroy(sc_comm *c) {
  cl_ctx *x = X(c);
  cl_world *w = x->g->w;
  if (x->stream) w->cu->stream_synchronize(x->stream);
  x->host->iface->destroy(x->host);
  sc_free(x);
  sc_free(c);
  world_release(w);
}

/* ---- device mode: set-up ---- */

static sc_status cl_set_stream(sc_comm *c, void *stream, sc_diag *diag) {
  cl_ctx *x = X(c);
  cl_world *w = x->g->w;
  pthread_mutex_lock(&w->mu);
  sc_status st = SC_OK;
  if (stream && !w->have_ctx) { /* every rank's device is this GPU (cuda_device.c) */
    int count = 0;
    CUresult r = SC_CUDA_SUCCESS;
    if ((st = sc_cu_load(&w->cu, diag)) == SC_OK &&
        ((r = w->cu->device_count(&count)) != SC_CUDA_SUCCESS ||
         (r = w->cu->device_get(&w->dev, sc_cu_ordinal(0, count))) != SC_CUDA_SUCCESS ||
         (r = w->cu->ctx_retain(&w->ctx, w->dev)) != SC_CUDA_SUCCESS))
      st = sc_cu_check(w->cu, r, "cuDevicePrimaryCtxRetain", "cuda-local", diag);
    w->have_ctx = st == SC_OK;
  }
  pthread_mutex_unlock(&w->mu);
  if (st != SC_OK) return st;
  if (x->g->size > SC_CUDA_REDUCE_SRCS)
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL,
                       "cuda-local: a group of %d ranks; at most %d share one GPU", x->g->size,
                       SC_CUDA_REDUCE_SRCS);
  x->stream = (CUstream)stream;
  return SC_OK;
}

/* The reduction module, loaded once per world (the context is the same for
 * every rank: the device's primary one). */
static sc_status load_module(sc_comm *c, sc_diag *diag) {
  cl_world *w = X(c)->g->w;
  pthread_mutex_lock(&w->mu);
  if (w->loaded) {
    sc_status st = w->load_err.status;
    if (st != SC_OK) *diag = w->load_err;
    pthread_mutex_unlock(&w->mu);
    return st;
  }
  w->loaded = true;
  sc_diag d = {0};
  sc_status st = SC_OK;
#if SHARDC_HAVE_CUDA
  const sc_cu *cu = w->cu;
  char *src = NULL, *image = NULL, *log = NULL;
  size_t len = 0;
  st = sc_cuda_emit_reduce_source(&src, &d);
  if (st == SC_OK && cu->emulated) {
    size_t hl = strlen(SC_CU_EMU_IMAGE), sl = strlen(src);
    if (!(image = sc_malloc(hl + sl + 1))) st = nomem(&d);
    if (image) {
      memcpy(image, SC_CU_EMU_IMAGE, hl);
      memcpy(image + hl, src, sl + 1);
    }
  } else if (st == SC_OK) { /* a CUBIN for the device's architecture, else PTX */
    int major = 0, minor = 0;
    char arch[16];
    cu->device_attribute(&major, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, w->dev);
    cu->device_attribute(&minor, SC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, w->dev);
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    if (sc_cuda_compile(src, arch, true, &image, &len, &log, &d) != SC_OK) {
      sc_free(log);
      log = NULL;
      sc_diag_clear(&d);
      st = sc_cuda_compile_ptx(src, arch, &image, &len, &log, &d);
    }
  }
  if (st == SC_OK) {
    CUresult r = cu->module_load(&w->mod, image, 0, NULL, NULL);
    if (r != SC_CUDA_SUCCESS) {
      w->mod = NULL;
      st = sc_cu_check(cu, r, "cuModuleLoadDataEx", "cuda-local: the reduction kernels", &d);
    }
  }
  sc_free(src);
  sc_free(image);
  sc_free(log);
#else
  st = sc_diag_set(&d, SC_ERR_UNSUPPORTED, NULL, NULL,
                   "cuda-local: shardc was built without the CUDA backend (NVRTC)");
#endif
  w->load_err = d;
  pthread_mutex_unlock(&w->mu);
  if (st != SC_OK) *diag = d;
  return st;
}

static sc_status ensure_events(sc_comm *c, sc_diag *diag) {
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  for (int p = 0; p < 2; p++)
    for (int k = 0; k < 2; k++)
      if (!x->ev[p][k]) {
        CU(cu->event_create(&x->ev[p][k], SC_CU_EVENT_DISABLE_TIMING));
        if (!own(x->g->w, 0, x->ev[p][k])) {
          x->ev[p][k] = NULL;
          return nomem(diag);
        }
      }
  return SC_OK;
}

/* This rank's scratch of at least bytes (the outgrown one stays the
 * world's until it goes: the other ranks' streams may still read it).
 * Called before phase 1's record, so the new allocation is in place
 * before anyone reads it. */
static sc_status ensure_scratch(sc_comm *c, size_t bytes, sc_diag *diag) {
  cl_ctx *x = X(c);
  if (bytes <= x->scratch_bytes) return SC_OK;
  const sc_cu *cu = x->g->w->cu;
  size_t want = bytes < 4096 ? 4096 : bytes;
  CUdeviceptr p = 0;
  CU(cu->mem_alloc(&p, want));
  if (!own(x->g->w, p, NULL)) return nomem(diag);
  x->scratch = p;
  x->scratch_bytes = want;
  return SC_OK;
}

/* ---- device mode: the two phases ---- */

typedef struct op_ctx {
  slot *mine, *all;
  int parity;
} op_ctx;

/* Phase 1's start: the event `in` recorded, the pointers posted, the
 * barrier passed, and the stream ordered after every other rank's `in`. */
static sc_status phase1(sc_comm *c, const void *send, void *recv, op_ctx *o, sc_diag *diag) {
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  sc_status st = ensure_events(c, diag);
  if (st != SC_OK) return st;
  o->parity = (int)(x->seq++ & 1);
  o->all = x->g->slots[o->parity];
  o->mine = &o->all[c->rank];
  *o->mine = (slot){.send = send, .recv = recv, .scratch = x->scratch,
                    .in = x->ev[o->parity][0], .mid = x->ev[o->parity][1]};
  CU(cu->event_record(o->mine->in, x->stream));
  if ((st = x->host->iface->barrier(x->host, diag)) != SC_OK) return st;
  for (int q = 0; q < c->size; q++)
    if (q != c->rank) CU(cu->stream_wait_event(x->stream, o->all[q].in, 0));
  return SC_OK;
}

/* Phase 1's end and phase 2's start: `mid` recorded, the barrier, and the
 * stream ordered after every other rank's `mid`. */
static sc_status phase2(sc_comm *c, op_ctx *o, sc_diag *diag) {
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  CU(cu->event_record(o->mine->mid, x->stream));
  sc_status st = x->host->iface->barrier(x->host, diag);
  if (st != SC_OK) return st;
  for (int q = 0; q < c->size; q++)
    if (q != c->rank) CU(cu->stream_wait_event(x->stream, o->all[q].mid, 0));
  return SC_OK;
}

static sc_status dtod(sc_comm *c, void *dst, const void *src, size_t bytes, sc_diag *diag) {
  if (bytes == 0 || dst == src) return SC_OK;
  const sc_cu *cu = X(c)->g->w->cu;
  CU(cu->memcpy_dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
                     X(c)->stream));
  return SC_OK;
}

/* dst[i] = the reduction over every rank q of all[q].send + off (count
 * elements), in rank order, on this rank's stream. */
static sc_status reduce(sc_comm *c, const op_ctx *o, int64_t off, int64_t count, void *dst,
                        sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  if (count <= 0) return SC_OK;
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  char name[64];
  CUfunction fn = NULL;
  sc_cuda_reduce_kernel_name(t, (int)op, name, sizeof name);
  CU(cu->module_function(&fn, x->g->w->mod, name));
  size_t esz = sc_dtype_size(t);
  uint64_t vals[SC_CUDA_REDUCE_SRCS + 4] = {0};
  void *args[SC_CUDA_REDUCE_SRCS + 4];
  vals[0] = (uint64_t)(uintptr_t)dst;
  for (int q = 0; q < c->size; q++)
    vals[1 + q] = (uint64_t)(uintptr_t)((const char *)o->all[q].send + (size_t)off * esz);
  vals[SC_CUDA_REDUCE_SRCS + 1] = (uint64_t)count;
  vals[SC_CUDA_REDUCE_SRCS + 2] = (uint64_t)c->size;
  vals[SC_CUDA_REDUCE_SRCS + 3] = (uint64_t)count * esz;
  for (int i = 0; i < SC_CUDA_REDUCE_SRCS + 4; i++) args[i] = &vals[i];
  int64_t grid = (count + SC_CUDA_REDUCE_BLOCK - 1) / SC_CUDA_REDUCE_BLOCK;
  if (grid > MAX_GRID) grid = MAX_GRID;
  CU(cu->launch_kernel(fn, (unsigned)grid, 1, 1, SC_CUDA_REDUCE_BLOCK, 1, 1, 0, x->stream, args,
                       NULL));
  return SC_OK;
}

static bool device_reducible(sc_dtype t) {
  char name[64];
  return sc_cuda_reduce_kernel_name(t, 0, name, sizeof name);
}

static sc_status check_reducible(sc_comm *c, const char *what, sc_dtype t, sc_diag *diag) {
  if (!device_reducible(t))
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "cuda-local: %s of %s: the GPU reduces f32, f64, f16, bf16, i32 and i64",
                       what, sc_dtype_name(t));
  return load_module(c, diag);
}

/* Elements [lo, hi) of rank r's slice when count is cut into size parts. */
static void slice_of(int64_t count, int size, int r, int64_t *lo, int64_t *hi) {
  *lo = count * r / size;
  *hi = count * (r + 1) / size;
}

static sc_status dev_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  size_t esz = sc_dtype_size(t);
  if (c->size == 1) return dtod(c, recv, send, (size_t)count * esz, diag);
  sc_status st = check_reducible(c, "all_reduce", t, diag);
  int64_t lo, hi;
  slice_of(count, c->size, c->rank, &lo, &hi);
  if (st == SC_OK) st = ensure_scratch(c, (size_t)(hi - lo) * esz, diag);
  op_ctx o;
  if (st == SC_OK) st = phase1(c, send, recv, &o, diag);
  if (st == SC_OK) st = reduce(c, &o, lo, hi - lo, (void *)(uintptr_t)o.mine->scratch, t, op, diag);
  if (st == SC_OK) st = phase2(c, &o, diag);
  for (int q = 0; st == SC_OK && q < c->size; q++) {
    int64_t qlo, qhi;
    slice_of(count, c->size, q, &qlo, &qhi);
    st = dtod(c, (char *)recv + (size_t)qlo * esz, (const void *)(uintptr_t)o.all[q].scratch,
              (size_t)(qhi - qlo) * esz, diag);
  }
  return st;
}

static sc_status dev_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                    sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  if (c->size == 1) return dtod(c, recv, send, (size_t)count * sc_dtype_size(t), diag);
  sc_status st = check_reducible(c, "reduce_scatter", t, diag);
  op_ctx o;
  if (st == SC_OK) st = phase1(c, send, recv, &o, diag);
  if (st == SC_OK) st = reduce(c, &o, count * c->rank, count, recv, t, op, diag);
  if (st == SC_OK) st = phase2(c, &o, diag);
  return st;
}

/* all_gather (all_to_all false) and all_to_all: chunk q of recv is rank
 * q's send (all_to_all: its chunk r). */
static sc_status dev_exchange(sc_comm *c, const void *send, void *recv, int64_t count,
                              sc_dtype t, bool all_to_all, sc_diag *diag) {
  size_t chunk = (size_t)count * sc_dtype_size(t);
  op_ctx o;
  sc_status st = phase1(c, send, recv, &o, diag);
  for (int q = 0; st == SC_OK && q < c->size; q++) {
    const char *src = (const char *)o.all[q].send + (all_to_all ? (size_t)c->rank * chunk : 0);
    st = dtod(c, (char *)recv + (size_t)q * chunk, src, chunk, diag);
  }
  if (st == SC_OK) st = phase2(c, &o, diag);
  return st;
}

/* s back in its group's pool (its last reader's copy recorded in free_ev). */
static void stage_put(cl_group *g, stage *s) {
  pthread_mutex_lock(&g->w->mu);
  s->pool_next = g->pool;
  g->pool = s;
  pthread_mutex_unlock(&g->w->mu);
}

/* A staging buffer of at least bytes from the group's pool (or a new one),
 * the sender's stream ordered after its last reader's copy. */
static sc_status stage_get(sc_comm *c, size_t bytes, stage **out, sc_diag *diag) {
  cl_ctx *x = X(c);
  cl_group *g = x->g;
  cl_world *w = g->w;
  const sc_cu *cu = w->cu;
  stage *s = NULL;
  pthread_mutex_lock(&w->mu);
  for (stage **p = &g->pool; *p; p = &(*p)->pool_next)
    if ((*p)->bytes >= bytes) {
      s = *p;
      *p = s->pool_next;
      break;
    }
  pthread_mutex_unlock(&w->mu);
  if (s) {
    if (s->freed_once) CU(cu->stream_wait_event(x->stream, s->free_ev, 0));
    *out = s;
    return SC_OK;
  }
  if (!(s = sc_calloc(1, sizeof *s))) return nomem(diag);
  pthread_mutex_lock(&w->mu); /* the world frees it, whatever happens next */
  s->next = w->stages;
  w->stages = s;
  pthread_mutex_unlock(&w->mu);
  s->bytes = bytes < 256 ? 256 : bytes;
  CU(cu->mem_alloc(&s->buf, s->bytes));
  CU(cu->event_create(&s->ready, SC_CU_EVENT_DISABLE_TIMING));
  CU(cu->event_create(&s->free_ev, SC_CU_EVENT_DISABLE_TIMING));
  *out = s;
  return SC_OK;
}

/* The data is staged on this rank's stream and the message (the staging
 * buffer and its size) goes through the host side's buffered send. */
static sc_status dev_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                          int tag, sc_diag *diag) {
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  size_t bytes = (size_t)count * sc_dtype_size(t);
  stage *s = NULL;
  sc_status st = stage_get(c, bytes, &s, diag);
  if (st != SC_OK) return st;
  if (bytes) {
    CU(cu->memcpy_dtod(s->buf, (CUdeviceptr)(uintptr_t)buf, bytes, x->stream));
    CU(cu->event_record(s->ready, x->stream));
  }
  cl_msg m = {.stage = (uint64_t)(uintptr_t)s, .bytes = bytes};
  st = x->host->iface->send(x->host, &m, 2, SC_DTYPE_U64, peer, tag, diag);
  if (st != SC_OK) stage_put(x->g, s);
  return st;
}

/* Waits (host, through the host side: bounded, and failing on an abort)
 * for the message from (peer, tag). A send is enqueued before its message
 * is posted, so this waits for the sender's host thread only, never for
 * device work. */
static sc_status dev_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                          sc_diag *diag) {
  cl_ctx *x = X(c);
  const sc_cu *cu = x->g->w->cu;
  size_t bytes = (size_t)count * sc_dtype_size(t);
  cl_msg m;
  sc_status st = x->host->iface->recv(x->host, &m, 2, SC_DTYPE_U64, peer, tag, diag);
  if (st != SC_OK) return st;
  stage *s = (stage *)(uintptr_t)m.stage;
  if (m.bytes != bytes)
    st = sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                     "recv: rank %d expected %lld bytes from rank %d (tag %d), got %lld",
                     c->rank, (long long)bytes, peer, tag, (long long)m.bytes);
  if (st == SC_OK && bytes) {
    CU(cu->stream_wait_event(x->stream, s->ready, 0));
    CU(cu->memcpy_dtod((CUdeviceptr)(uintptr_t)buf, s->buf, bytes, x->stream));
    CU(cu->event_record(s->free_ev, x->stream));
    s->freed_once = true;
  }
  stage_put(x->g, s);
  return st;
}

/* ---- the operations: device mode with a stream, else the host's ---- */

static sc_status cl_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                               sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_all_reduce(c, send, recv, count, t, op, diag)
                      : h->iface->all_reduce(h, send, recv, count, t, op, diag);
}

static sc_status cl_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                   sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_reduce_scatter(c, send, recv, count, t, op, diag)
                      : h->iface->reduce_scatter(h, send, recv, count, t, op, diag);
}

static sc_status cl_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                               sc_dtype t, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_exchange(c, send, recv, count, t, false, diag)
                      : h->iface->all_gather(h, send, recv, count, t, diag);
}

static sc_status cl_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                               sc_dtype t, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_exchange(c, send, recv, count, t, true, diag)
                      : h->iface->all_to_all(h, send, recv, count, t, diag);
}

static sc_status cl_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                         int tag, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_send(c, buf, count, t, peer, tag, diag)
                      : h->iface->send(h, buf, count, t, peer, tag, diag);
}

static sc_status cl_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                         sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return X(c)->stream ? dev_recv(c, buf, count, t, peer, tag, diag)
                      : h->iface->recv(h, buf, count, t, peer, tag, diag);
}

static sc_status cl_barrier(sc_comm *c, sc_diag *diag) {
  sc_comm *h = X(c)->host;
  return h->iface->barrier(h, diag);
}

/* The host handles split; the members of each new group then share one
 * cl_group, made by its rank 0 and handed to the others by an all_gather
 * of its address over the new host group. */
static sc_status cl_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  cl_ctx *x = X(c);
  sc_comm *nh = NULL;
  sc_status st = x->host->iface->split(x->host, color, key, &nh, diag);
  if (st != SC_OK || !nh) return st;
  int n = nh->size;
  uint64_t mine = 0, *all = sc_calloc((size_t)n, sizeof *all);
  if (!all) {
    x->host->iface->abort(x->host, "split: out of memory");
    nh->iface->destroy(nh);
    return nomem(diag);
  }
  if (nh->rank == 0) mine = (uint64_t)(uintptr_t)group_new(x->g->w, n); /* 0: no memory */
  st = nh->iface->all_gather(nh, &mine, all, 1, SC_DTYPE_U64, diag);
  cl_group *ng = st == SC_OK ? (cl_group *)(uintptr_t)all[0] : NULL;
  sc_free(all);
  if (st == SC_OK && !ng) st = nomem(diag);
  if (st == SC_OK && !(*out = handle_new(ng, nh, nh->rank))) st = nomem(diag);
  if (st != SC_OK) nh->iface->destroy(nh);
  return st;
}

static void cl_abort(sc_comm *c, const char *text) {
  X(c)->host->iface->abort(X(c)->host, text);
}

static const sc_comm_iface cl_iface = {
    .name = "cuda-local",
    .all_reduce = cl_all_reduce,
    .all_gather = cl_all_gather,
    .reduce_scatter = cl_reduce_scatter,
    .all_to_all = cl_all_to_all,
    .send = cl_send,
    .recv = cl_recv,
    .barrier = cl_barrier,
    .split = cl_split,
    .set_stream = cl_set_stream,
    .abort = cl_abort,
    .destroy = cl_destroy,
};

sc_status sc_comm_cuda_local_create_group(int size, sc_comm **comms, sc_diag *diag) {
  sc_comm **hosts = sc_calloc((size_t)(size > 0 ? size : 1), sizeof *hosts);
  if (!hosts) return nomem(diag);
  sc_status st = sc_comm_local_create_group(size, hosts, diag);
  if (st != SC_OK) {
    sc_free(hosts);
    return st;
  }
  cl_world *w = sc_calloc(1, sizeof *w);
  cl_group *g = NULL;
  if (w) {
    pthread_mutex_init(&w->mu, NULL);
    atomic_store(&w->refs, 1); /* held here until the handles exist */
    g = group_new(w, size);
  }
  int made = 0;
  for (; g && made < size; made++)
    if (!(comms[made] = handle_new(g, hosts[made], made))) break;
  if (made == size) {
    sc_free(hosts);
    world_release(w);
    return SC_OK;
  }
  for (int r = 0; r < made; r++) {
    sc_free(comms[r]->ctx);
    sc_free(comms[r]);
    atomic_fetch_sub(&w->refs, 1);
  }
  for (int r = 0; r < size; r++) sc_comm_destroy(hosts[r]);
  sc_free(hosts);
  if (w) world_release(w);
  return nomem(diag);
}
