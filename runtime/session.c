/* session.c — binds a program to a device and runs it (runtime.h).
 *
 * Creating a session creates the device context, lets it compile the
 * program (CPU: JIT of every kernel), allocates ONE arena of exactly
 * program->arena_bytes (or borrows a shared one, or allocates one larger
 * for others to borrow: sc_session_opts.arena) and binds every buffer to
 * its address. Binding writes nothing into the arena (constants live
 * outside it), so sessions that run in turn can share one. A run then
 * validates the inputs (count, dtype, shape), copies them into their arena
 * slots, executes the steps in order and points the output views at their
 * buffers. A run allocates nothing: everything it touches was set up by
 * sc_session_create.
 *
 * Profiling: with SHARDC_PROFILE=1 in the environment (read when the
 * session is created), every step of every run is timed; when the session
 * is destroyed a table goes to stderr, steps sorted by total time: share,
 * total, mean and minimum time, the step (kernel name and its outer points
 * x inner extent, or GEMM with its shape and epilogue) and its origin. The
 * first run is left out when there are others (it pays cold caches and
 * page faults). The minimum is the figure to trust on a busy machine. The
 * timing buffers are allocated at creation: a run still allocates
 * nothing.
 *
 * Collectives: COMM steps are run here, not by the device, through the
 * communicator of the step's mesh-axis group. Session creation splits
 * opts->world once per distinct group, with color and key from ir/mesh.h.
 * The splits are collective, and pipeline stages run different programs:
 * every rank splits once per non-empty set of mesh axes, in mask order,
 * passing color -1 for the sets its program does not use (at most 255
 * calls; 7 for pp,dp,tp). The layout changes of gathers and scatters
 * along a non-leading dim (codegen/program.h: pack, unpack; a large
 * gather one bounded chunk of rows a call) are strided
 * host copies between arena buffers: right for the CPU device, whose
 * buffers are host memory (a CUDA device will need a copy kernel). A
 * failing communicator call fails the run with its status and message.
 *
 * Async collectives (codegen/overlap.c): a COMM step marked async is handed
 * to its communication queue, a thread that runs the handed steps one at a
 * time in the order they came; a WAIT step blocks until its start has run.
 * There is one queue per communicator (mesh-axis group) with async steps,
 * as NCCL gives each communicator its own stream, when every communicator
 * allows concurrent use from different threads (sc_comm_concurrent: local,
 * tcp, MPI under THREAD_MULTIPLE); else one queue for all. Every rank still
 * calls each communicator's collectives in program order. A synchronous
 * COMM step runs on the caller's thread when its queue has nothing in
 * flight (so a tensor-parallel all-reduce does not wait behind a
 * prefetched ZeRO-3 gather on another group), else it joins its queue and
 * is waited for at once (one thread uses a communicator at a time). The
 * queues are started with the session, only for programs with async steps
 * and communicators that allow it (sc_comm_any_thread); otherwise starts
 * run inline and waits do nothing. A start under 64 KiB also runs inline
 * when its queue is idle: on the CPU the hand-off to the thread costs more
 * than it takes. A run that fails waits for what is in flight before
 * returning, and a failed collective fails its wait (and every later one
 * of its queue) with its message.
 *
 * Runs read later (runtime.h: sc_session_launch, sc_session_collect): the
 * same validation and steps as a run, but the inputs that are not state
 * are staged through a pinned slot the device reserved, the device's
 * end_run_async replaces end_run, and the outputs that are not state are
 * copied into the slot behind the steps, with the slot's marker after
 * them; the collect waits for the marker. Only a device that fills the
 * "later" hooks of device.h offers it (CUDA).
 *
 * Offloaded activations (codegen/offload.c): a program with HOST buffers
 * gets a host pool of exactly program->host_bytes, allocated apart from
 * the arena. Its COPY steps go to one more queue, the copy queue, after
 * the communication queues (on a device whose arena is host memory; a GPU
 * orders them on its own copy stream), which runs them in program order
 * while later steps compute; each COPY's WAIT blocks until it has run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "device.h"
#include "ir/op_comm.h"
#include "runtime.h"

_Static_assert((int)SC_COMM_OP_SUM == (int)SC_REDUCE_SUM &&
                   (int)SC_COMM_OP_MAX == (int)SC_REDUCE_MAX &&
                   (int)SC_COMM_OP_MIN == (int)SC_REDUCE_MIN,
               "ir/op_comm.h reductions match runtime/comm.h");

struct sc_session {
  const sc_device_iface *dev;
  void *ctx;
  const sc_program *p;
  void *arena;
  int64_t arena_bytes; /* what was asked of the device (0: borrowed) */
  bool borrowed;       /* the arena is another session's (opts.arena) */
  int64_t rss_before, peak_before; /* the process's VmRSS and VmHWM after
                                      prepare, before the arena */
  double *prof_s;      /* SHARDC_PROFILE: seconds per step, summed over runs */
  double *prof_min;    /* per step: the fastest run */
  double *prof_first;  /* per step: the first run, kept apart */
  int64_t prof_runs;   /* runs, the first included */
  sc_comm *world;      /* borrowed (opts->world) */
  int32_t n_groups;
  sc_comm **groups;    /* owned: one per distinct axes mask of COMM steps */
  uint32_t *group_axes;
  sc_comm **step_comm; /* per step: its group's communicator, or NULL */
  int32_t *step_group; /* per step: index of its group in groups, or -1 */
  void *out_host;      /* a device without a host arena: the outputs' host copies */
  const void **outside; /* [n_buffers] const_data and the bound roots' storage, or NULL */
  void **out_slot;     /* [n_outputs] into out_host */
  /* the communication queues (module comment) */
  int32_t n_queues;
  struct cqueue *queues; /* [n_queues] */
  int32_t *step_queue; /* [n_steps]: a COMM step's queue, or -1: always inline */
  int64_t *seq;        /* [n_steps]: the number a start was queued as in its
                          queue; -1: it ran inline */
  /* runs read later (sc_session_launch): n_slots pinned slots, owned by
   * the device; in each, the inputs not paired with an output at
   * slot_off[i] and the outputs not paired with an input at
   * slot_off[n_inputs + j]; -1: paired (state kept on the device) */
  int32_t n_slots;
  void **slots;
  int64_t *slot_off;   /* [n_inputs + n_outputs] */
  void *host_pool;     /* program->host_bytes of host memory: the HOST
                          buffers (offloaded activations), or NULL */
  int64_t host_pool_bytes; /* what was allocated for it */
  bool partial;        /* the runs skip the steps in update_only */
  bool *update_only;   /* [n_steps] sc_program_update_steps(p, true), made
                          at the first sc_session_set_partial, or NULL */
};

/* A communication queue: a thread that runs the collectives handed to it
 * one at a time, in the order they came. */
typedef struct cqueue {
  sc_session *s;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work, done_cv;
  int32_t *ring;        /* [n_steps] step ids */
  int64_t issued, done; /* steps queued / finished, over all runs */
  bool stop, started;
  sc_status failed;     /* the first failure since the run began */
  sc_diag fail_diag;
} cqueue;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const double *prof_key; /* qsort has no context argument */
static int cmp_prof(const void *a, const void *b) {
  double x = prof_key[*(const int32_t *)a], y = prof_key[*(const int32_t *)b];
  return x > y ? -1 : x < y;
}

/* The SHARDC_PROFILE table (see the file comment). */
static void print_profile(const sc_session *s) {
  const sc_program *p = s->p;
  int32_t *order = sc_calloc(p->n_steps > 0 ? (size_t)p->n_steps : 1, sizeof *order);
  if (!order || s->prof_runs == 0) {
    sc_free(order);
    return;
  }
  int64_t runs = s->prof_runs - 1;
  if (runs == 0) { /* one run: show it */
    memcpy(s->prof_s, s->prof_first, (size_t)p->n_steps * sizeof *s->prof_s);
    runs = 1;
  }
  double total = 0, total_min = 0;
  for (int32_t i = 0; i < p->n_steps; i++) {
    order[i] = i;
    total += s->prof_s[i];
    total_min += s->prof_min[i];
  }
  prof_key = s->prof_s;
  qsort(order, (size_t)p->n_steps, sizeof *order, cmp_prof);
  fprintf(stderr,
          "SHARDC_PROFILE: %d steps, %lld runs (the first left out), mean %.3f ms per run, "
          "sum of step minima %.3f ms (%d threads)\n",
          (int)p->n_steps, (long long)runs, total * 1e3 / (double)runs, total_min * 1e3,
          s->dev->threads(s->ctx));
  fprintf(stderr, "  %%time   total ms  mean us   min us  step\n");
  for (int32_t r = 0; r < p->n_steps; r++) {
    int32_t i = order[r];
    const sc_step *st = &p->steps[i];
    char what[256];
    if (st->kind == SC_STEP_COMM) {
      snprintf(what, sizeof what, "comm %d%s, %lld elements x group of %lld", (int)st->comm.kind,
               st->comm.async ? " start" : "", (long long)st->comm.count,
               (long long)st->comm.group_size);
    } else if (st->kind == SC_STEP_WAIT) {
      snprintf(what, sizeof what, "wait for step %d", (int)st->started);
    } else if (st->kind == SC_STEP_COPY) {
      snprintf(what, sizeof what, "copy start, %lld bytes %s",
               (long long)p->buffers[st->copy.src].bytes,
               p->buffers[st->copy.dst].kind == SC_BUF_HOST ? "to the host" : "back");
    } else if (st->kind == SC_STEP_GEMM) {
      const sc_gemm *g = &st->gemm;
      snprintf(what, sizeof what, "gemm %lld x m%lld n%lld k%lld%s%s%s", (long long)g->batch,
               (long long)g->m, (long long)g->n, (long long)g->k, g->bias >= 0 ? " +bias" : "",
               st->kernel >= 0 ? " then " : "",
               st->kernel >= 0 ? p->kernels[st->kernel]->name : "");
    } else if (st->kind == SC_STEP_CHECK) {
      snprintf(what, sizeof what, "check b%d in [-%lld, %lld)", (int)st->check.buffer,
               (long long)st->check.dim, (long long)st->check.dim);
    } else if (st->kind == SC_STEP_ATTENTION || st->kind == SC_STEP_ATTENTION_GRAD) {
      const sc_attention_step *a = &st->attn;
      snprintf(what, sizeof what, "%s %lld x %lld heads (%lld kv) sq %lld skv %lld d %lld%s",
               st->kind == SC_STEP_ATTENTION ? "attention" : "attention_grad",
               (long long)a->batch, (long long)a->heads, (long long)a->kv_heads,
               (long long)a->sq, (long long)a->skv, (long long)a->d,
               a->causal ? " causal" : "");
    } else if (st->kind == SC_STEP_SCATTER_ADD) {
      snprintf(what, sizeof what, "scatter_add %lld rows of %lld into %lld",
               (long long)st->scatter.n, (long long)st->scatter.row,
               (long long)st->scatter.rows);
    } else {
      const kir_kernel *k = p->kernels[st->kernel];
      int64_t pts = 1;
      for (int32_t d = 0; d < k->outer_rank; d++) pts *= k->outer_dims[d];
      snprintf(what, sizeof what, "%s (%lld x %lld)", k->name, (long long)pts,
               (long long)k->inner);
    }
    const char *note = s->dev->step_note ? s->dev->step_note(s->ctx, i) : NULL;
    if (note) {
      size_t len = strlen(what);
      snprintf(what + len, sizeof what - len, " (%s)", note);
    }
    fprintf(stderr, "  %5.1f%% %10.3f %8.1f %8.1f  step %d: %s  [%s]\n",
            total > 0 ? 100.0 * s->prof_s[i] / total : 0.0, s->prof_s[i] * 1e3,
            s->prof_s[i] * 1e6 / (double)runs, s->prof_min[i] * 1e6, (int)i, what,
            st->origin ? st->origin : "");
  }
  sc_free(order);
}

void sc_session_opts_init(sc_session_opts *o) {
  memset(o, 0, sizeof *o);
  o->device.name = "cpu";
}

bool sc_device_choice_is_cpu(const sc_device_choice *c) {
  return !c || !c->name || strcmp(c->name, "cpu") == 0;
}

bool sc_device_choice_runs_attention(const sc_device_choice *c) {
  const sc_device_iface *dev = sc_device_find(c && c->name ? c->name : "cpu");
  return dev && dev->run_attention;
}

static void stop_queues(sc_session *s);

void sc_session_destroy(sc_session *s) {
  if (!s) return;
  stop_queues(s);
  if (s->prof_s) print_profile(s);
  sc_free(s->prof_s);
  sc_free(s->prof_min);
  sc_free(s->prof_first);
  if (s->arena && !s->borrowed) s->dev->free_arena(s->ctx, s->arena);
  if (s->host_pool && s->dev->free_host) { /* before the context that made it */
    s->dev->free_host(s->ctx, s->host_pool);
    s->host_pool = NULL;
  }
  if (s->ctx) s->dev->destroy(s->ctx);
  for (int32_t i = 0; i < s->n_groups; i++) sc_comm_destroy(s->groups[i]);
  sc_free(s->groups);
  sc_free(s->group_axes);
  sc_free(s->step_comm);
  sc_free(s->step_group);
  sc_free(s->out_host);
  if (!s->dev->free_host) sc_free(s->host_pool);
  sc_free(s->out_slot);
  sc_free(s->outside);
  sc_free(s->queues);
  sc_free(s->step_queue);
  sc_free(s->seq);
  sc_free(s->slots);
  sc_free(s->slot_off);
  sc_free(s->update_only);
  sc_free(s);
}

/* One sub-communicator of s->world per distinct group of the COMM steps
 * (module comment). The splits are collective over the world, and the
 * stages of a pipeline run different programs with different groups, so
 * every rank makes the same calls: one per non-empty set of mesh axes, in
 * increasing mask order, with color -1 for a set its program does not use. */
static sc_status make_groups(sc_session *s, const sc_mesh *split_mesh, sc_diag *diag) {
  const sc_program *p = s->p;
  int32_t n_comm = 0;
  for (int32_t i = 0; i < p->n_steps; i++) n_comm += p->steps[i].kind == SC_STEP_COMM;
  if (n_comm == 0 && !split_mesh) return SC_OK;
  const sc_mesh *m = p->mesh.n_axes > 0 || !split_mesh ? &p->mesh : split_mesh;
  if (!s->world)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "the program has %d collective steps over a %lld-rank mesh: the session "
                       "needs a communicator (sc_session_opts.world)",
                       (int)n_comm, (long long)m->n_ranks);
  if ((int64_t)sc_comm_size(s->world) != m->n_ranks)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "the program's mesh has %lld ranks, but the communicator has %d",
                       (long long)m->n_ranks, sc_comm_size(s->world));
  size_t n = (size_t)p->n_steps;
  s->step_comm = sc_calloc(n, sizeof *s->step_comm);
  s->step_group = sc_malloc(n * sizeof *s->step_group);
  s->groups = sc_calloc((size_t)n_comm + 1, sizeof *s->groups);
  s->group_axes = sc_calloc((size_t)n_comm + 1, sizeof *s->group_axes);
  if (!s->step_comm || !s->step_group || !s->groups || !s->group_axes)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *st = &p->steps[i];
    if (st->kind == SC_STEP_COMM && (st->comm.axes & ~sc_mesh_all_axes(m)))
      return sc_diag_set(diag, SC_ERR_INVALID, st->origin, NULL,
                         "step %d: group axes 0x%x are not axes of the mesh", (int)i,
                         (unsigned)st->comm.axes);
  }
  int64_t rank = sc_comm_rank(s->world);
  for (uint32_t axes = 1; axes <= sc_mesh_all_axes(m); axes++) {
    bool used = false;
    for (int32_t i = 0; i < p->n_steps && !used; i++)
      used = p->steps[i].kind == SC_STEP_COMM && p->steps[i].comm.axes == axes;
    int64_t color = used ? sc_mesh_group_color(m, axes, rank) : -1;
    int64_t key = sc_mesh_group_key(m, axes, rank);
    sc_comm *c = NULL;
    sc_status r = sc_comm_split(s->world, (int)color, (int)key, &c, diag);
    if (r != SC_OK) return r;
    if (!used) continue;
    s->groups[s->n_groups] = c;
    s->group_axes[s->n_groups++] = axes;
    if (sc_comm_size(c) != sc_mesh_group_size(m, axes))
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "group over axes 0x%x: %d ranks, expected %lld", (unsigned)axes,
                         sc_comm_size(c), (long long)sc_mesh_group_size(m, axes));
  }
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *st = &p->steps[i];
    s->step_group[i] = -1;
    if (st->kind != SC_STEP_COMM) continue;
    int32_t gi = 0;
    while (s->group_axes[gi] != st->comm.axes) gi++; /* every used set was split */
    if (st->comm.group_size != sc_comm_size(s->groups[gi]))
      return sc_diag_set(diag, SC_ERR_INVALID, st->origin, NULL,
                         "step %d: compiled for a group of %lld ranks, the mesh gives %d", (int)i,
                         (long long)st->comm.group_size, sc_comm_size(s->groups[gi]));
    s->step_comm[i] = s->groups[gi];
    s->step_group[i] = gi;
  }
  return SC_OK;
}

/* dst[q][o] = src[o][q] over [outer, n] blocks of `inner` bytes. */
static void chunk_pack(char *dst, const char *src, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t q = 0; q < n; q++)
      memcpy(dst + (q * outer + o) * inner, src + (o * n + q) * inner, (size_t)inner);
}

/* dst[o][q] = src[q][o] (the inverse of chunk_pack). */
static void chunk_unpack(char *dst, const char *src, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t q = 0; q < n; q++)
      memcpy(dst + (o * n + q) * inner, src + (q * outer + o) * inner, (size_t)inner);
}

/* A SEND's or RECV's peer: its key, or the one `shift` keys away from this
 * rank (codegen/program.h). */
static int step_peer(const sc_comm *comm, const sc_comm_step *c) {
  if (!c->shift) return c->peer;
  int n = sc_comm_size(comm), k = sc_comm_rank(comm);
  int s = c->kind == SC_COMM_RECV ? -c->shift : c->shift; /* SEND_RECV: its send's */
  return ((k + s) % n + n) % n;
}

sc_status sc_comm_step_call(sc_comm *comm, const sc_comm_step *c, sc_dtype t, const void *send,
                            void *recv, sc_diag *diag) {
  sc_reduce_op op = (sc_reduce_op)c->reduce;
  switch (c->kind) {
  case SC_COMM_ALL_REDUCE: return sc_comm_all_reduce(comm, send, recv, c->count, t, op, diag);
  case SC_COMM_ALL_GATHER: return sc_comm_all_gather(comm, send, recv, c->count, t, diag);
  case SC_COMM_REDUCE_SCATTER:
    return sc_comm_reduce_scatter(comm, send, recv, c->count, t, op, diag);
  case SC_COMM_ALL_TO_ALL: return sc_comm_all_to_all(comm, send, recv, c->count, t, diag);
  case SC_COMM_SEND: return sc_comm_send(comm, send, c->count, t, step_peer(comm, c), c->tag, diag);
  case SC_COMM_RECV: return sc_comm_recv(comm, recv, c->count, t, step_peer(comm, c), c->tag, diag);
  case SC_COMM_SEND_RECV: { /* one exchange: on NCCL one group (comm_nccl.c) */
    int n = sc_comm_size(comm), src = ((sc_comm_rank(comm) - c->shift) % n + n) % n;
    return sc_comm_send_recv(comm, send, step_peer(comm, c), recv, src, c->count, t, c->tag, diag);
  }
  default: return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "bad comm kind %d", (int)c->kind);
  }
}

static sc_status run_comm(sc_session *s, int32_t i, sc_diag *diag) {
  const sc_program *p = s->p;
  const sc_step *st = &p->steps[i];
  const sc_comm_step *c = &st->comm;
  sc_comm *comm = s->step_comm[i];
  void *in = c->in >= 0 ? s->dev->buffer_ptr(s->ctx, c->in) : NULL;
  void *out = c->out >= 0 ? s->dev->buffer_ptr(s->ctx, c->out) : NULL;
  void *pack = c->pack >= 0 ? s->dev->buffer_ptr(s->ctx, c->pack) : NULL;
  void *unpack = c->unpack >= 0 ? s->dev->buffer_ptr(s->ctx, c->unpack) : NULL;
  sc_dtype t = p->buffers[c->in >= 0 ? c->in : c->out].dtype;
  int64_t esz = (int64_t)sc_dtype_size(t), n = c->group_size;
  sc_status r = SC_OK;
  for (int64_t k = 0, calls = sc_comm_step_calls(c); r == SC_OK && k < calls; k++) {
    int64_t in_at, out_at; /* a step in row chunks: where this call's rows begin */
    sc_comm_step ck = sc_comm_step_chunk(c, k, &in_at, &out_at);
    const char *src = in_at ? (const char *)in + in_at * esz : in;
    char *dst = out_at ? (char *)out + out_at * esz : out;
    if (pack) chunk_pack(pack, src, ck.pack_outer, n, ck.pack_inner * esz);
    r = sc_comm_step_call(comm, &ck, t, pack ? pack : src, unpack ? unpack : dst, diag);
    if (r == SC_OK && unpack) chunk_unpack(dst, unpack, ck.unpack_outer, n, ck.unpack_inner * esz);
  }
  return r;
}

/* Where COPY step operand b lives: the host pool for a HOST buffer, else
 * the device's address. */
static void *copy_ptr(sc_session *s, int32_t b) {
  const sc_buffer *x = &s->p->buffers[b];
  return x->kind == SC_BUF_HOST ? (char *)s->host_pool + x->offset : s->dev->buffer_ptr(s->ctx, b);
}

/* A COPY step (program.h): device arena to host pool or back, through the
 * device's copies (the CPU's: memcpy). */
static void run_copy(sc_session *s, int32_t i) {
  const sc_copy_step *c = &s->p->steps[i].copy;
  void *dst = copy_ptr(s, c->dst);
  const void *src = copy_ptr(s, c->src);
  int64_t bytes = s->p->buffers[c->src].bytes;
  if (s->p->buffers[c->dst].kind == SC_BUF_HOST)
    s->dev->copy_out(s->ctx, dst, src, bytes);
  else
    s->dev->copy_in(s->ctx, dst, src, bytes);
}

/* A queued step: a collective, or a copy (the copy queue). */
static sc_status run_queued(sc_session *s, int32_t i, sc_diag *diag) {
  if (s->p->steps[i].kind == SC_STEP_COPY) {
    run_copy(s, i);
    return SC_OK;
  }
  return run_comm(s, i, diag);
}

static void *comm_thread(void *arg) {
  cqueue *q = arg;
  int32_t n = q->s->p->n_steps;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->stop && q->done == q->issued) pthread_cond_wait(&q->work, &q->mu);
    if (q->done == q->issued) break; /* stopping, nothing left */
    int32_t i = q->ring[q->done % n];
    bool skip = q->failed != SC_OK;
    pthread_mutex_unlock(&q->mu);
    sc_diag d;
    sc_diag_clear(&d);
    sc_status r = skip ? SC_OK : run_queued(q->s, i, &d);
    pthread_mutex_lock(&q->mu);
    if (r != SC_OK && q->failed == SC_OK) {
      q->failed = r;
      q->fail_diag = d;
    }
    q->done++;
    pthread_cond_broadcast(&q->done_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* The queues (module comment): none without async steps or when a
 * communicator must stay on its creating thread; one per group with async
 * steps when every group's communicator allows concurrent use
 * (sc_comm_concurrent), else one for all. */
static sc_status start_queues(sc_session *s, sc_diag *diag) {
  const sc_program *p = s->p;
  bool any_async = false, concurrent = true, copies = false;
  for (int32_t i = 0; i < p->n_steps; i++) {
    any_async |= p->steps[i].kind == SC_STEP_COMM && p->steps[i].comm.async;
    copies |= p->steps[i].kind == SC_STEP_COPY;
  }
  copies &= s->dev->host_arena; /* else the device's copy stream orders them */
  if (s->dev->run_comm) any_async = false; /* the device orders them */
  for (int32_t i = 0; any_async && i < p->n_steps; i++)
    if (s->step_comm && s->step_comm[i] && !sc_comm_any_thread(s->step_comm[i]))
      any_async = false; /* starts run inline */
  if (!any_async && !copies) return SC_OK;
  for (int32_t g = 0; g < s->n_groups; g++) concurrent &= sc_comm_concurrent(s->groups[g]);
  size_t n = (size_t)p->n_steps;
  s->step_queue = sc_malloc(n * sizeof *s->step_queue);
  s->seq = sc_calloc(n, sizeof *s->seq);
  int32_t *of_group = sc_calloc((size_t)s->n_groups + 1, sizeof *of_group);
  if (!s->step_queue || !s->seq || !of_group) {
    sc_free(of_group);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  /* step_queue[i] holds step i's group first (-1: no communicator), then
   * its queue */
  for (int32_t g = 0; g < s->n_groups; g++) of_group[g] = -1;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *st = &p->steps[i];
    int32_t g = 0;
    while (g < s->n_groups && (!s->step_comm || s->groups[g] != s->step_comm[i])) g++;
    s->step_queue[i] = any_async && st->kind == SC_STEP_COMM && g < s->n_groups
                           ? (concurrent ? g : 0)
                           : -1;
    if (s->step_queue[i] >= 0 && st->comm.async && of_group[s->step_queue[i]] < 0)
      of_group[s->step_queue[i]] = s->n_queues++;
  }
  for (int32_t i = 0; i < p->n_steps; i++)
    if (s->step_queue[i] >= 0) s->step_queue[i] = of_group[s->step_queue[i]];
  sc_free(of_group);
  if (copies) { /* the copy queue, after the communication queues */
    for (int32_t i = 0; i < p->n_steps; i++)
      if (p->steps[i].kind == SC_STEP_COPY) s->step_queue[i] = s->n_queues;
    s->n_queues++;
  }
  s->queues = sc_calloc((size_t)s->n_queues, sizeof *s->queues);
  if (!s->queues) {
    s->n_queues = 0;
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  for (int32_t k = 0; k < s->n_queues; k++) {
    cqueue *q = &s->queues[k];
    q->s = s;
    if (!(q->ring = sc_malloc(n * sizeof *q->ring)))
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    if (pthread_create(&q->thread, NULL, comm_thread, q) != 0)
      return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cannot start a communication thread");
    q->started = true;
  }
  return SC_OK;
}

static void stop_queues(sc_session *s) {
  for (int32_t k = 0; k < s->n_queues; k++) {
    cqueue *q = &s->queues[k];
    if (q->started) {
      pthread_mutex_lock(&q->mu);
      q->stop = true;
      pthread_cond_signal(&q->work);
      pthread_mutex_unlock(&q->mu);
      pthread_join(q->thread, NULL);
    }
    if (q->ring) {
      pthread_cond_destroy(&q->done_cv);
      pthread_cond_destroy(&q->work);
      pthread_mutex_destroy(&q->mu);
    }
    sc_free(q->ring);
  }
  s->n_queues = 0;
}

/* Queues step i on q; returns its number there. */
static int64_t enqueue(cqueue *q, int32_t i) {
  pthread_mutex_lock(&q->mu);
  int64_t k = q->issued++;
  q->ring[k % q->s->p->n_steps] = i;
  q->s->seq[i] = k;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->mu);
  return k;
}

/* Blocks until q's step number k has run; q's first failure since the run
 * began, with its message. */
static sc_status wait_for(cqueue *q, int64_t k, sc_diag *diag) {
  pthread_mutex_lock(&q->mu);
  while (q->done <= k) pthread_cond_wait(&q->done_cv, &q->mu);
  sc_status r = q->failed;
  if (r != SC_OK) *diag = q->fail_diag;
  pthread_mutex_unlock(&q->mu);
  return r;
}

/* The larger of a COMM step's input and output, in bytes. */
static int64_t comm_bytes(const sc_program *p, const sc_comm_step *c) {
  int64_t in = c->in >= 0 ? p->buffers[c->in].bytes : 0;
  int64_t out = c->out >= 0 ? p->buffers[c->out].bytes : 0;
  return in > out ? in : out;
}

/* A COMM step (module comment). An async start smaller than
 * SC_ASYNC_INLINE_BYTES (codegen/program.h) runs inline when nothing is in
 * flight (its wait then has nothing to wait for): handing it to the
 * thread costs more than it takes. */
static sc_status comm_step(sc_session *s, int32_t i, sc_diag *diag) {
  if (!s->n_queues || s->step_queue[i] < 0) {
    if (s->seq) s->seq[i] = -1;
    return run_comm(s, i, diag);
  }
  cqueue *q = &s->queues[s->step_queue[i]];
  const sc_comm_step *c = &s->p->steps[i].comm;
  pthread_mutex_lock(&q->mu);
  bool idle = q->done == q->issued;
  pthread_mutex_unlock(&q->mu);
  if (c->async && !(idle && comm_bytes(s->p, c) < SC_ASYNC_INLINE_BYTES)) {
    enqueue(q, i);
    return SC_OK;
  }
  if (idle) {
    s->seq[i] = -1; /* done: its wait returns at once */
    return run_comm(s, i, diag);
  }
  return wait_for(q, enqueue(q, i), diag);
}

/* A COPY step: started on the copy queue (its WAIT completes it), or run
 * here when the session has none (seq -1: the wait has nothing to do). */
static void copy_step(sc_session *s, int32_t i) {
  if (s->dev->run_copy) { /* the device's copy stream */
    const sc_copy_step *c = &s->p->steps[i].copy;
    const sc_buffer *h = &s->p->buffers[c->dst];
    if (h->kind != SC_BUF_HOST) h = &s->p->buffers[c->src];
    s->dev->run_copy(s->ctx, i, (char *)s->host_pool + h->offset);
    return;
  }
  if (s->n_queues && s->step_queue[i] >= 0) {
    enqueue(&s->queues[s->step_queue[i]], i);
    return;
  }
  if (s->seq) s->seq[i] = -1;
  run_copy(s, i);
}

/* Waits for everything queued (a run's end, or its failure). */
static sc_status drain(sc_session *s, sc_status r, sc_diag *diag) {
  for (int32_t k = 0; k < s->n_queues; k++) {
    sc_diag d;
    sc_diag_clear(&d);
    sc_status w = wait_for(&s->queues[k], s->queues[k].issued - 1, &d);
    if (r == SC_OK && w != SC_OK) {
      *diag = d;
      r = w;
    }
  }
  return r;
}

/* The storage outside the arena the device binds, per buffer (its
 * const_data): the caller's constants and each bound input's storage
 * (opts->bound) at its root and at that of the output paired with it. */
static sc_status bind_outside(sc_session *s, const sc_device_iface *dev, const sc_session_opts *o,
                              sc_diag *diag) {
  const sc_program *p = s->p;
  if (!dev->host_arena)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "the %s device keeps every input in its arena: a program with inputs "
                       "bound outside it (compiled for the CPU) cannot run there",
                       dev->name);
  s->outside = sc_calloc((size_t)p->n_buffers + 1, sizeof *s->outside);
  if (!s->outside) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t b = 0; o->const_data && b < p->n_buffers; b++) s->outside[b] = o->const_data[b];
  for (int32_t i = 0; i < p->n_inputs; i++) {
    if (!p->bound[i]) continue;
    const sc_buffer *x = &p->buffers[p->inputs[i]];
    if (!o->bound || !o->bound[i])
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                         "input %d ('%s') is bound outside the arena and was given no storage",
                         (int)i, x->name ? x->name : "?");
    s->outside[p->inputs[i]] = o->bound[i];
  }
  for (int32_t j = 0; p->updates && j < p->n_outputs; j++)
    if (p->updates[j] >= 0 && p->bound[p->updates[j]])
      s->outside[p->outputs[j]] = o->bound[p->updates[j]];
  return SC_OK;
}

/* Host memory for the outputs of a device whose arena the caller cannot
 * read: one block, each output 64-byte aligned. */
static sc_status host_outputs(sc_session *s, sc_diag *diag) {
  const sc_program *p = s->p;
  int64_t total = 0;
  for (int32_t i = 0; i < p->n_outputs; i++)
    total += (p->buffers[p->outputs[i]].bytes + 63) / 64 * 64;
  s->out_slot = sc_calloc((size_t)p->n_outputs + 1, sizeof *s->out_slot);
  if (!s->out_slot || posix_memalign(&s->out_host, 64, (size_t)(total > 0 ? total : 64)) != 0)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int64_t off = 0;
  for (int32_t i = 0; i < p->n_outputs; i++) {
    s->out_slot[i] = (char *)s->out_host + off;
    off += (p->buffers[p->outputs[i]].bytes + 63) / 64 * 64;
  }
  return SC_OK;
}

sc_status sc_session_create(const sc_program *p, const sc_session_opts *o, sc_session **out,
                            sc_diag *diag) {
  *out = NULL;
  sc_session_opts defaults;
  if (!o) {
    sc_session_opts_init(&defaults);
    o = &defaults;
  }
  const char *name = o->device.name ? o->device.name : "cpu";
  const sc_device_iface *dev = sc_device_find(name);
  if (!dev)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "unknown device '%s' (known: %s)",
                       name, sc_device_names());
  if (o->threads < 0)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "thread count must be positive");
  if (p->arena_bytes < 0)
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "the program has no memory plan (arena_bytes < 0)");
  sc_session *s = sc_calloc(1, sizeof *s);
  if (!s) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  s->dev = dev;
  s->rss_before = s->peak_before = -1;
  s->p = p;
  s->world = o->world;
  sc_status st = make_groups(s, o->split_mesh, diag);
  if (st == SC_OK && p->bound) st = bind_outside(s, dev, o, diag);
  sc_device_opts dopts = {.threads = o->threads,
                          .cpu_module = o->cpu_module,
                          .const_data = s->outside ? s->outside : o->const_data,
                          .rank = s->world ? sc_comm_rank(s->world) : 0,
                          .no_graph = o->device.no_graph,
                          .no_tf32 = o->device.no_tf32,
                          .im2col_convs = o->im2col_convs,
                          .gpu_arch = o->device.gpu_arch,
                          .n_comms = s->n_groups,
                          .comms = s->groups,
                          .comm_of = s->step_group,
                          .cuda = o->cuda};
  for (int32_t g = 0; st == SC_OK && dev->host_arena && g < s->n_groups; g++)
    if (sc_comm_has_streams(s->groups[g]))
      st = sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "the %s communicator moves GPU memory: run on --device cuda",
                       sc_comm_backend(s->groups[g]));
  if (st == SC_OK) st = dev->create(&dopts, &s->ctx, diag);
  if (st == SC_OK) st = dev->prepare(s->ctx, p, diag);
  if (st == SC_OK) sc_process_memory(&s->rss_before, &s->peak_before);
  if (st == SC_OK && o->arena) { /* shared: borrowed from another session */
    if (o->arena_bytes < p->arena_bytes)
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "the shared arena (%lld bytes) is smaller than the program's %lld",
                       (long long)o->arena_bytes, (long long)p->arena_bytes);
    s->arena = o->arena;
    s->borrowed = true;
  } else if (st == SC_OK) {
    int64_t bytes = o->arena_bytes > p->arena_bytes ? o->arena_bytes : p->arena_bytes;
    s->arena = dev->alloc_arena(s->ctx, bytes);
    s->arena_bytes = bytes;
    if (!s->arena)
      st = sc_diag_nomem(diag, (uint64_t)bytes, "the %s device's tensor arena", dev->name);
  }
  if (st == SC_OK && p->host_bytes > 0) { /* the host pool: a second arena */
    if (dev->alloc_host ? !(s->host_pool = dev->alloc_host(s->ctx, p->host_bytes))
                        : posix_memalign(&s->host_pool, 64, (size_t)p->host_bytes) != 0) {
      s->host_pool = NULL;
      st = sc_diag_nomem(diag, (uint64_t)p->host_bytes, "the host pool of offloaded activations");
    } else {
      s->host_pool_bytes = p->host_bytes;
    }
  }
  if (st == SC_OK) st = dev->bind(s->ctx, s->arena, diag);
  if (st == SC_OK) st = start_queues(s, diag);
  if (st == SC_OK && !dev->host_arena) st = host_outputs(s, diag);
  const char *prof = getenv("SHARDC_PROFILE");
  if (st == SC_OK && prof && *prof && strcmp(prof, "0") != 0) {
    size_t n = p->n_steps > 0 ? (size_t)p->n_steps : 1;
    s->prof_s = sc_calloc(n, sizeof *s->prof_s);
    s->prof_min = sc_calloc(n, sizeof *s->prof_min);
    s->prof_first = sc_calloc(n, sizeof *s->prof_first);
    if (!s->prof_s || !s->prof_min || !s->prof_first) st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  if (st != SC_OK) {
    sc_session_destroy(s);
    return st;
  }
  *out = s;
  return SC_OK;
}

static void format_shape(sc_dtype t, int32_t rank, const int64_t *dims, char *buf, size_t n) {
  size_t pos = 0;
  int w = snprintf(buf, n, "%s[", sc_dtype_name(t));
  if (w < 0 || (size_t)w >= n) return;
  pos = (size_t)w;
  for (int32_t d = 0; d < rank && d < SC_MAX_RANK; d++) {
    w = snprintf(buf + pos, n - pos, "%s%lld", d ? "," : "", (long long)dims[d]);
    if (w < 0 || (size_t)w >= n - pos) return;
    pos += (size_t)w;
  }
  snprintf(buf + pos, n - pos, "]");
}

static sc_status check_input(const sc_buffer *b, int32_t i, const sc_tensor_view *v,
                             sc_diag *diag) {
  const char *name = b->name ? b->name : "?";
  if (v->name && b->name && strcmp(v->name, b->name) != 0)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "input %d is '%s', but a tensor named '%s' was given", (int)i, name,
                       v->name);
  bool same = v->dtype == b->dtype && v->rank == b->rank;
  for (int32_t d = 0; same && d < b->rank; d++) same = v->dims[d] == b->dims[d];
  if (!same || v->rank < 0 || v->rank > SC_MAX_RANK) {
    char want[256], got[256];
    format_shape(b->dtype, b->rank, b->dims, want, sizeof want);
    format_shape(v->dtype, v->rank, v->dims, got, sizeof got);
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "input '%s': expected %s, got %s",
                       name, want, got);
  }
  if (!v->data && b->bytes > 0)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "input '%s': no data", name);
  return SC_OK;
}

/* A SCATTER_ADD step (program.h), on the host: the device keeps its arena
 * there (cpu_supports_step). */
static sc_status run_scatter_add(sc_session *s, const sc_step *st, sc_diag *diag) {
  const sc_scatter_step *c = &st->scatter;
  const sc_program *p = s->p;
  const sc_buffer *ob = &p->buffers[c->out], *ib = &p->buffers[c->indices];
  void *out = s->dev->buffer_ptr(s->ctx, c->out);
  const void *data = s->dev->buffer_ptr(s->ctx, c->data);
  if (data != out) memmove(out, data, (size_t)ob->bytes);
  const void *ind = s->dev->buffer_ptr(s->ctx, c->indices);
  bool wide = ib->dtype == SC_DTYPE_I64;
  int64_t bad = sc_scatter_add_rows(c, ob->dtype, ib->dtype, out, ind,
                                    s->dev->buffer_ptr(s->ctx, c->updates));
  if (bad >= 0)
    return sc_diag_set(diag, SC_ERR_INVALID, st->origin, "ScatterND",
                       "index %lld (tuple %lld of '%s') out of range [%lld, %lld)",
                       (long long)(wide ? ((const int64_t *)ind)[bad]
                                        : ((const int32_t *)ind)[bad]),
                       (long long)bad, ib->name ? ib->name : "?", -(long long)c->rows,
                       (long long)c->rows);
  return SC_OK;
}

int64_t sc_check_indices(sc_dtype t, const void *data, int64_t n, int64_t dim,
                         long long *shown) {
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    long long v;
    if (t == SC_DTYPE_U64) {
      uint64_t u = ((const uint64_t *)data)[i];
      ok = u < (uint64_t)dim;
      v = (long long)(u > (uint64_t)INT64_MAX ? INT64_MAX : u);
    } else {
      v = (long long)sc_load_i64(t, data, i);
      ok = v >= -dim && v < dim;
    }
    if (!ok) {
      *shown = v;
      return i;
    }
  }
  return -1;
}

sc_status sc_check_step_error(const sc_program *p, const sc_step *st, long long shown,
                              sc_diag *diag) {
  const sc_buffer *b = &p->buffers[st->check.buffer];
  return sc_diag_set(diag, SC_ERR_INVALID, st->origin, "Gather",
                     "index %lld out of range [%lld, %lld) in '%s'", shown,
                     -(long long)st->check.dim, (long long)st->check.dim,
                     b->name ? b->name : "?");
}

/* A CHECK step: every index in the buffer within [-dim, dim). The buffer
 * is copied out through the device in small pieces (no allocation: a run
 * allocates nothing). */
static sc_status run_check(sc_session *s, const sc_step *st, sc_diag *diag) {
  const sc_buffer *b = &s->p->buffers[st->check.buffer];
  int64_t esize = sc_dtype_size(b->dtype), numel = esize > 0 ? b->bytes / esize : 0;
  const uint8_t *src = s->dev->buffer_ptr(s->ctx, st->check.buffer);
  _Alignas(8) uint8_t piece[4096];
  int64_t per = (int64_t)sizeof piece / (esize > 0 ? esize : 1);
  for (int64_t i0 = 0; i0 < numel; i0 += per) {
    int64_t n = numel - i0 < per ? numel - i0 : per;
    s->dev->copy_out(s->ctx, piece, src + i0 * esize, n * esize);
    long long shown;
    if (sc_check_indices(b->dtype, piece, n, st->check.dim, &shown) >= 0)
      return sc_check_step_error(s->p, st, shown, diag);
  }
  return SC_OK;
}

/* Output j is paired with an input (p->updates) given as its own arena
 * slot: the state stays in the arena, the output is not copied out. */
static bool resident(const sc_session *s, const sc_tensor_view *inputs, int32_t j) {
  int32_t i = sc_program_updates(s->p, j);
  return i >= 0 && inputs[i].data == s->dev->buffer_ptr(s->ctx, s->p->inputs[i]);
}

/* The counts, dtypes and shapes of a run's inputs. */
static sc_status check_run_args(sc_session *s, const sc_tensor_view *inputs, int32_t n_inputs,
                                int32_t n_outputs, sc_diag *diag) {
  const sc_program *p = s->p;
  if (n_inputs != p->n_inputs)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "the program takes %d inputs, %d given",
                       (int)p->n_inputs, (int)n_inputs);
  if (n_outputs != p->n_outputs)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "the program has %d outputs, room for %d given", (int)p->n_outputs,
                       (int)n_outputs);
  for (int32_t i = 0; i < n_inputs; i++) {
    sc_status st = check_input(&p->buffers[p->inputs[i]], i, &inputs[i], diag);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

/* The steps of a run, its inputs copied in: issued (an asynchronous
 * device: queued, or one graph replayed), and on the CPU run. A failure
 * waits for what is queued. */
static sc_status issue_steps(sc_session *s, sc_diag *diag) {
  const sc_program *p = s->p;
  for (int32_t k = 0; k < s->n_queues; k++) {
    pthread_mutex_lock(&s->queues[k].mu);
    s->queues[k].failed = SC_OK; /* the last run drained its queue */
    pthread_mutex_unlock(&s->queues[k].mu);
  }
  const sc_device_iface *dev = s->dev;
  const bool *skip = s->partial ? s->update_only : NULL;
  bool replayed = dev->begin_run ? dev->begin_run(s->ctx, !skip) : false;
  for (int32_t i = 0; i < p->n_steps && !replayed; i++) {
    const sc_step *st = &p->steps[i];
    if (skip && skip[i]) continue;
    double t0 = s->prof_s ? now_s() : 0.0;
    sc_status r = SC_OK;
    if (st->kind == SC_STEP_COMM) {
      if (dev->run_comm)
        dev->run_comm(s->ctx, i);
      else
        r = comm_step(s, i, diag);
    } else if (st->kind == SC_STEP_COPY) {
      copy_step(s, i);
    } else if (st->kind == SC_STEP_WAIT) {
      int32_t k = st->started;
      if (dev->wait_comm)
        dev->wait_comm(s->ctx, k);
      else if (s->n_queues && s->step_queue[k] >= 0 && s->seq[k] >= 0)
        r = wait_for(&s->queues[s->step_queue[k]], s->seq[k], diag);
    } else if (st->kind == SC_STEP_CHECK) {
      if (dev->run_check)
        dev->run_check(s->ctx, i);
      else
        r = run_check(s, st, diag);
    } else if (st->kind == SC_STEP_SCATTER_ADD) {
      if (dev->run_scatter)
        dev->run_scatter(s->ctx, i);
      else
        r = run_scatter_add(s, st, diag);
    } else if (st->kind == SC_STEP_GEMM) {
      dev->run_gemm(s->ctx, st);
    } else if (st->kind == SC_STEP_ATTENTION || st->kind == SC_STEP_ATTENTION_GRAD) {
      dev->run_attention(s->ctx, st);
    } else {
      dev->run_kernel(s->ctx, st);
    }
    if (r != SC_OK) {
      if (dev->end_run) dev->end_run(s->ctx, &(sc_diag){0}); /* waits for what is queued */
      return drain(s, r, diag);
    }
    if (s->prof_s) {
      double dt = now_s() - t0;
      if (s->prof_runs == 0) {
        s->prof_first[i] = dt;
      } else {
        s->prof_s[i] += dt;
        if (s->prof_runs == 1 || dt < s->prof_min[i]) s->prof_min[i] = dt;
      }
    }
  }
  return SC_OK;
}

/* Output view j's name, dtype and shape, pointing at data. */
static void output_view(const sc_program *p, int32_t j, void *data, sc_tensor_view *v) {
  const sc_buffer *b = &p->buffers[p->outputs[j]];
  v->name = b->name;
  v->dtype = b->dtype;
  v->rank = b->rank;
  memcpy(v->dims, b->dims, sizeof v->dims);
  v->data = data;
}

sc_status sc_session_run(sc_session *s, const sc_tensor_view *inputs, int32_t n_inputs,
                         sc_tensor_view *outputs, int32_t n_outputs, sc_diag *diag) {
  const sc_program *p = s->p;
  sc_status r = check_run_args(s, inputs, n_inputs, n_outputs, diag);
  if (r != SC_OK) return r;
  for (int32_t i = 0; i < n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    void *slot = s->dev->buffer_ptr(s->ctx, p->inputs[i]);
    if (slot != inputs[i].data) s->dev->copy_in(s->ctx, slot, inputs[i].data, b->bytes);
  }
  if ((r = issue_steps(s, diag)) != SC_OK) return r;
  if (s->dev->end_run) {
    r = s->dev->end_run(s->ctx, diag);
    if (r != SC_OK) return drain(s, r, diag);
  }
  r = drain(s, SC_OK, diag); /* the program waited for all: defensive */
  if (r != SC_OK) return r;
  if (s->prof_s) s->prof_runs++;
  for (int32_t i = 0; i < n_outputs; i++) {
    const sc_buffer *b = &p->buffers[p->outputs[i]];
    sc_tensor_view *v = &outputs[i];
    output_view(p, i, s->dev->buffer_ptr(s->ctx, p->outputs[i]), v);
    if (s->out_slot && resident(s, inputs, i)) continue; /* state kept on the device */
    if (s->out_slot) { /* device memory: copied out (copy_out waits for it) */
      s->dev->copy_out(s->ctx, s->out_slot[i], v->data, b->bytes);
      v->data = s->out_slot[i];
    }
  }
  return SC_OK;
}

/* ---- runs read later ---- */
sc_status sc_session_set_partial(sc_session *s, bool partial, sc_diag *diag) {
  if (partial && !s->update_only) {
    s->update_only = sc_calloc((size_t)s->p->n_steps + 1, sizeof *s->update_only);
    if (!s->update_only || sc_program_update_steps(s->p, true, s->update_only) < 0) {
      sc_free(s->update_only);
      s->update_only = NULL;
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    }
  }
  s->partial = partial;
  return SC_OK;
}

sc_status sc_session_reserve_async(sc_session *s, int32_t n_slots, sc_diag *diag) {
  const sc_program *p = s->p;
  if (!s->dev->reserve_async)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "the %s device waits for every run", s->dev->name);
  if (n_slots < 1 || n_slots > SC_SESSION_MAX_SLOTS)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%d slots (1 to %d)", (int)n_slots,
                       (int)SC_SESSION_MAX_SLOTS);
  int32_t n = p->n_inputs + p->n_outputs;
  if (!s->slot_off && !(s->slot_off = sc_calloc((size_t)n + 1, sizeof *s->slot_off)))
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int64_t bytes = 0;
  for (int32_t i = 0; i < n; i++) s->slot_off[i] = 0;
  for (int32_t j = 0; j < p->n_outputs; j++) {
    int32_t i = sc_program_updates(p, j);
    if (i >= 0) s->slot_off[i] = s->slot_off[p->n_inputs + j] = -1;
  }
  for (int32_t i = 0; i < n; i++) {
    if (s->slot_off[i] < 0) continue;
    const sc_buffer *b = &p->buffers[i < p->n_inputs ? p->inputs[i] : p->outputs[i - p->n_inputs]];
    s->slot_off[i] = bytes;
    bytes += (b->bytes + 63) / 64 * 64;
  }
  void **slots = sc_calloc((size_t)n_slots, sizeof *slots);
  if (!slots) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status r = s->dev->reserve_async(s->ctx, n_slots, bytes, slots, diag);
  sc_free(s->slots);
  s->slots = r == SC_OK ? slots : NULL;
  s->n_slots = r == SC_OK ? n_slots : 0;
  if (r != SC_OK) sc_free(slots);
  return r;
}

int32_t sc_session_async_slots(const sc_session *s) { return s->n_slots; }

sc_status sc_session_launch(sc_session *s, const sc_tensor_view *inputs, int32_t n_inputs,
                            int32_t slot, sc_diag *diag) {
  const sc_program *p = s->p;
  if (slot < 0 || slot >= s->n_slots)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "slot %d of %d reserved", (int)slot,
                       (int)s->n_slots);
  sc_status r = check_run_args(s, inputs, n_inputs, p->n_outputs, diag);
  if (r != SC_OK) return r;
  char *stage = s->slots[slot];
  for (int32_t i = 0; i < n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    void *dst = s->dev->buffer_ptr(s->ctx, p->inputs[i]);
    if (dst == inputs[i].data) continue;
    if (s->slot_off[i] < 0)
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                         "input '%s' is state kept on the device: a launched run takes its "
                         "slot (sc_session_state_slot)", b->name ? b->name : "");
    /* the host's copy into pinned memory: the caller may change its data
     * once this returns, and the device copies without the host waiting */
    memcpy(stage + s->slot_off[i], inputs[i].data, (size_t)b->bytes);
    s->dev->copy_in(s->ctx, dst, stage + s->slot_off[i], b->bytes);
  }
  if ((r = issue_steps(s, diag)) != SC_OK) return r;
  s->dev->end_run_async(s->ctx);
  for (int32_t j = 0; j < p->n_outputs; j++)
    if (s->slot_off[p->n_inputs + j] >= 0)
      s->dev->copy_out_async(s->ctx, stage + s->slot_off[p->n_inputs + j],
                             s->dev->buffer_ptr(s->ctx, p->outputs[j]),
                             p->buffers[p->outputs[j]].bytes);
  s->dev->mark(s->ctx, slot);
  if (s->prof_s) s->prof_runs++;
  return SC_OK;
}

sc_status sc_session_collect(sc_session *s, int32_t slot, sc_tensor_view *outputs,
                             int32_t n_outputs, sc_diag *diag) {
  const sc_program *p = s->p;
  if (slot < 0 || slot >= s->n_slots || n_outputs != p->n_outputs)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "slot %d of %d reserved, room for %d of %d outputs", (int)slot,
                       (int)s->n_slots, (int)n_outputs, (int)p->n_outputs);
  sc_status r = s->dev->wait_mark(s->ctx, slot, diag);
  if (r != SC_OK) return r;
  for (int32_t j = 0; j < n_outputs; j++) {
    int64_t off = s->slot_off[p->n_inputs + j];
    output_view(p, j,
                off >= 0 ? (char *)s->slots[slot] + off
                         : s->dev->buffer_ptr(s->ctx, p->outputs[j]),
                &outputs[j]);
  }
  return SC_OK;
}

void *sc_session_input_slot(sc_session *s, int32_t i) {
  if (i < 0 || i >= s->p->n_inputs || !s->dev->host_arena) return NULL;
  return s->dev->buffer_ptr(s->ctx, s->p->inputs[i]);
}

/* ---- state kept in the arena across runs (runtime.h) ---- */
void *sc_session_state_slot(sc_session *s, int32_t i) {
  if (i < 0 || i >= s->p->n_inputs) return NULL;
  int32_t b = s->p->inputs[i];
  if (s->p->bound && s->p->bound[i]) return NULL; /* the caller's storage, not a slot */
  return s->p->buffers[b].bytes > 0 ? s->dev->buffer_ptr(s->ctx, b) : NULL;
}

bool sc_session_host_arena(const sc_session *s) { return s->dev->host_arena; }

void sc_session_slot_write(sc_session *s, void *slot, const void *src, int64_t bytes) {
  s->dev->copy_in(s->ctx, slot, src, bytes);
  if (s->dev->sync) s->dev->sync(s->ctx); /* src may change once this returns */
}

void sc_session_slot_read(sc_session *s, void *dst, const void *slot, int64_t bytes) {
  s->dev->copy_out(s->ctx, dst, slot, bytes); /* copy_out waits for it */
}

void sc_session_slot_zero(sc_session *s, void *slot, int64_t bytes) {
  s->dev->zero(s->ctx, slot, bytes);
}

void sc_session_slot_copy(sc_session *s, void *dst, const void *src, int64_t bytes) {
  if (s->dev->copy_device)
    s->dev->copy_device(s->ctx, dst, src, bytes);
  else if (bytes > 0)
    memmove(dst, src, (size_t)bytes);
}

void sc_session_sync(sc_session *s) {
  if (s->dev->sync) s->dev->sync(s->ctx);
}

void *sc_session_output_slot(sc_session *s, int32_t j) {
  if (j < 0 || j >= s->p->n_outputs) return NULL;
  return s->dev->buffer_ptr(s->ctx, s->p->outputs[j]);
}

int64_t sc_session_arena_bytes(const sc_session *s) { return s->arena_bytes; }
int64_t sc_session_host_pool_bytes(const sc_session *s) { return s->host_pool_bytes; }
void *sc_session_arena(const sc_session *s) { return s->arena; }

double sc_session_device_seconds(const sc_session *s) {
  return s->dev->last_run_seconds ? s->dev->last_run_seconds(s->ctx) : -1.0;
}

void sc_session_memory(const sc_session *s, sc_device_memory *planned,
                       sc_device_memory *allocated, int64_t *rss_before,
                       int64_t *peak_before) {
  sc_device_memory arena = {.bytes = {[SC_MEM_ARENA] = s->arena_bytes}};
  if (planned) *planned = arena;
  if (allocated) *allocated = arena;
  if (s->dev->memory) s->dev->memory(s->ctx, planned, allocated);
  if (allocated) allocated->bytes[SC_MEM_ARENA] = s->arena_bytes; /* shared: 0 or all of it */
  if (rss_before) *rss_before = s->rss_before;
  if (peak_before) *peak_before = s->peak_before;
}

/* "VmRSS:    1234 kB" -> bytes */
static int64_t status_kib(const char *line, const char *key) {
  size_t n = strlen(key);
  if (strncmp(line, key, n) != 0) return -1;
  long long kib = -1;
  return sscanf(line + n, " %lld", &kib) == 1 && kib >= 0 ? (int64_t)kib * 1024 : -1;
}

bool sc_process_memory(int64_t *rss, int64_t *peak) {
  int64_t r = -1, h = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      int64_t v;
      if ((v = status_kib(line, "VmRSS:")) >= 0) r = v;
      if ((v = status_kib(line, "VmHWM:")) >= 0) h = v;
    }
    fclose(f);
  }
  if (rss) *rss = r;
  if (peak) *peak = h;
  return r >= 0 && h >= 0;
}

double sc_session_compile_seconds(const sc_session *s) {
  return s->dev->compile_seconds(s->ctx);
}

int sc_session_threads(const sc_session *s) { return s->dev->threads(s->ctx); }
