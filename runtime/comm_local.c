/* comm_local.c — the `local` communicator: ranks are threads of one process.
 *
 * A group is shared state (a mutex, a condition variable, a generation
 * barrier, per-rank slots where each rank posts the address of its buffers,
 * a mailbox for send/recv). A collective posts pointers, meets the others at
 * a barrier, then reads the other ranks' buffers directly (no copies in
 * between), and meets them again before anyone returns, so no buffer is
 * reused while another rank still reads it. Reductions are computed by rank
 * r for its slice of the elements, summing contributions in rank order
 * 0..size-1, so every rank gets bit-identical results.
 *
 * Failure: all groups split from one world share a `world` object holding
 * the abort flag and message. Every wait is a timed wait in short slices
 * that checks that flag, and gives up at the SHARDC_COMM_TIMEOUT deadline
 * (aborting the world with a timeout message), so an abort on any rank or
 * a stuck peer ends every rank's pending operation within a slice; nothing
 * waits forever. After an abort the group is unusable: every operation
 * fails with "rank R aborted: MESSAGE".
 *
 * Ownership: the world owns every group made in it (the first and each
 * split's) and frees them all when its last handle is destroyed, so a
 * split that an abort cut half-way leaves nothing unfreed and nothing
 * freed that another rank may still read.
 *
 * send is buffered (the message is copied into the mailbox and send
 * returns); recv waits for the first message from (peer, tag). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"

#define SLICE_NS (20 * 1000 * 1000) /* abort flag checked every 20 ms */

typedef struct world {
  pthread_mutex_t mu;
  atomic_int aborted;
  char msg[1100];     /* "rank R aborted: MESSAGE" (set once) */
  atomic_int refs;    /* handles (sc_comm) alive, over all its groups */
  struct group *groups; /* every group made in this world (under mu) */
} world;

typedef struct msg {
  struct msg *next;
  int src, tag;
  int64_t bytes;
  char data[];
} msg;

typedef struct group {
  world *w;
  struct group *next;       /* in w->groups */
  int size;
  double timeout_s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;              /* barrier: ranks arrived in this generation */
  uint64_t gen;
  const void **send_ptr;    /* [size] posted by each rank */
  void **tmp_ptr;           /* [size] each rank's reduced slice */
  int *color, *key;         /* [size] split arguments */
  struct group **split_out; /* [size] the new group a leader made */
  msg **inbox;              /* [size] messages to each rank, FIFO */
} group;

typedef struct local_ctx {
  group *g;
} local_ctx;

static const sc_comm_iface local_iface;

static group *G(sc_comm *c) { return ((local_ctx *)c->ctx)->g; }

static void group_free(group *g);

/* The world owns its groups: they are freed together when its last handle
 * goes, so a split that failed half-way (an abort) leaves no group that
 * nobody frees, and no member frees a group another may still read. */
static void world_free(world *w) {
  for (group *g = w->groups, *n; g; g = n) {
    n = g->next;
    group_free(g);
  }
  pthread_mutex_destroy(&w->mu);
  sc_free(w);
}

static void world_release(world *w) {
  if (atomic_fetch_sub(&w->refs, 1) == 1) world_free(w);
}

static void world_abort(world *w, const char *text) {
  pthread_mutex_lock(&w->mu);
  if (!atomic_load(&w->aborted)) {
    snprintf(w->msg, sizeof w->msg, "%s", text);
    atomic_store(&w->aborted, 1);
  }
  pthread_mutex_unlock(&w->mu);
}

static sc_status aborted_status(group *g, sc_diag *diag) {
  char m[sizeof g->w->msg];
  pthread_mutex_lock(&g->w->mu);
  memcpy(m, g->w->msg, sizeof m);
  pthread_mutex_unlock(&g->w->mu);
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s", m);
}

static void group_free(group *g) {
  for (int r = 0; g->inbox && r < g->size; r++)
    for (msg *m = g->inbox[r], *n; m; m = n) {
      n = m->next;
      sc_free(m);
    }
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  sc_free(g->send_ptr);
  sc_free(g->tmp_ptr);
  sc_free(g->color);
  sc_free(g->key);
  sc_free(g->split_out);
  sc_free(g->inbox);
  sc_free(g);
}

static group *group_new(world *w, int size, double timeout_s) {
  group *g = sc_calloc(1, sizeof *g);
  if (!g) return NULL;
  g->w = w;
  g->size = size;
  g->timeout_s = timeout_s;
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  g->send_ptr = sc_calloc((size_t)size, sizeof *g->send_ptr);
  g->tmp_ptr = sc_calloc((size_t)size, sizeof *g->tmp_ptr);
  g->color = sc_calloc((size_t)size, sizeof *g->color);
  g->key = sc_calloc((size_t)size, sizeof *g->key);
  g->split_out = sc_calloc((size_t)size, sizeof *g->split_out);
  g->inbox = sc_calloc((size_t)size, sizeof *g->inbox);
  if (!g->send_ptr || !g->tmp_ptr || !g->color || !g->key || !g->split_out || !g->inbox) {
    group_free(g);
    return NULL;
  }
  pthread_mutex_lock(&w->mu);
  g->next = w->groups;
  w->groups = g;
  pthread_mutex_unlock(&w->mu);
  return g;
}

static struct timespec ts_after(double s) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  int64_t ns = (int64_t)t.tv_nsec + (int64_t)(s * 1e9);
  t.tv_sec += ns / 1000000000;
  t.tv_nsec = ns % 1000000000;
  return t;
}

static bool ts_before(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* One slice of waiting on g->cv (mutex held). SC_OK to keep waiting, or a
 * failure: the world aborted, or the deadline passed (then it aborts the
 * world so that the other ranks stop too). */
static sc_status wait_slice(sc_comm *c, const struct timespec *deadline, const char *what,
                            sc_diag *diag) {
  group *g = G(c);
  if (atomic_load(&g->w->aborted)) return aborted_status(g, diag);
  struct timespec now, t = ts_after(SLICE_NS * 1e-9);
  if (ts_before(deadline, &t)) t = *deadline;
  pthread_cond_timedwait(&g->cv, &g->mu, &t);
  if (atomic_load(&g->w->aborted)) return aborted_status(g, diag);
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!ts_before(&now, deadline)) {
    char m[512];
    snprintf(m, sizeof m,
             "rank %d aborted: %s timed out after %g s waiting for the other %d ranks "
             "(SHARDC_COMM_TIMEOUT)",
             c->rank, what, g->timeout_s, g->size - 1);
    world_abort(g->w, m);
    pthread_cond_broadcast(&g->cv);
    return aborted_status(g, diag);
  }
  return SC_OK;
}

static sc_status barrier(sc_comm *c, const char *what, sc_diag *diag) {
  group *g = G(c);
  if (atomic_load(&g->w->aborted)) return aborted_status(g, diag);
  if (g->size == 1) return SC_OK;
  struct timespec deadline = ts_after(g->timeout_s);
  sc_status st = SC_OK;
  pthread_mutex_lock(&g->mu);
  uint64_t gen = g->gen;
  if (++g->arrived == g->size) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (g->gen == gen && !(st = wait_slice(c, &deadline, what, diag))) {
    }
  }
  pthread_mutex_unlock(&g->mu);
  return st;
}

static sc_status local_barrier(sc_comm *c, sc_diag *diag) {
  return barrier(c, "barrier", diag);
}

/* Elements [lo, hi) of rank r's slice when count is cut into size parts. */
static void slice_of(int64_t count, int size, int r, int64_t *lo, int64_t *hi) {
  *lo = count * r / size;
  *hi = count * (r + 1) / size;
}

/* Reduces elements [lo, hi) of every rank's posted send buffer (offset by
 * base elements) into dst. */
static void reduce_posted(group *g, sc_dtype t, sc_reduce_op op, int64_t base, int64_t lo,
                          int64_t hi, void *dst, const void **srcs) {
  size_t sz = sc_dtype_size(t);
  for (int q = 0; q < g->size; q++)
    srcs[q] = (const char *)g->send_ptr[q] + (size_t)(base + lo) * sz;
  sc_comm_reduce_arrays(t, op, srcs, g->size, dst, hi - lo);
}

static sc_status local_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                  sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  group *g = G(c);
  size_t sz = sc_dtype_size(t);
  int64_t lo, hi;
  slice_of(count, g->size, c->rank, &lo, &hi);
  void *tmp = sc_malloc((size_t)(hi - lo) * sz + 1);
  const void **srcs = sc_calloc((size_t)g->size, sizeof *srcs);
  if (!tmp || !srcs) {
    sc_free(tmp);
    sc_free(srcs);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "all_reduce: out of memory");
  }
  g->send_ptr[c->rank] = send;
  sc_status st = barrier(c, "all_reduce", diag);
  if (!st) {
    reduce_posted(g, t, op, 0, lo, hi, tmp, srcs);
    g->tmp_ptr[c->rank] = tmp;
    st = barrier(c, "all_reduce", diag); /* every send read: recv may be written */
  }
  if (!st) {
    for (int q = 0; q < g->size; q++) {
      int64_t qlo, qhi;
      slice_of(count, g->size, q, &qlo, &qhi);
      memcpy((char *)recv + (size_t)qlo * sz, g->tmp_ptr[q], (size_t)(qhi - qlo) * sz);
    }
    st = barrier(c, "all_reduce", diag); /* every tmp read */
  }
  sc_free(tmp);
  sc_free(srcs);
  return st;
}

static sc_status local_reduce_scatter(sc_comm *c, const void *send, void *recv,
                                      int64_t count, sc_dtype t, sc_reduce_op op,
                                      sc_diag *diag) {
  group *g = G(c);
  const void **srcs = sc_calloc((size_t)g->size, sizeof *srcs);
  if (!srcs) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "reduce_scatter: no memory");
  g->send_ptr[c->rank] = send;
  sc_status st = barrier(c, "reduce_scatter", diag);
  if (!st) reduce_posted(g, t, op, count * c->rank, 0, count, recv, srcs);
  if (!st) st = barrier(c, "reduce_scatter", diag);
  sc_free(srcs);
  return st;
}

static sc_status local_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                                  sc_dtype t, sc_diag *diag) {
  group *g = G(c);
  size_t chunk = (size_t)count * sc_dtype_size(t);
  g->send_ptr[c->rank] = send;
  sc_status st = barrier(c, "all_gather", diag);
  if (!st) {
    /* in place, a rank's own chunk is where it is: copying it onto itself
     * would write it while the other ranks read it */
    for (int q = 0; q < g->size; q++)
      if ((char *)recv + (size_t)q * chunk != (const char *)g->send_ptr[q])
        memmove((char *)recv + (size_t)q * chunk, g->send_ptr[q], chunk);
    st = barrier(c, "all_gather", diag);
  }
  return st;
}

static sc_status local_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                                  sc_dtype t, sc_diag *diag) {
  group *g = G(c);
  size_t chunk = (size_t)count * sc_dtype_size(t);
  g->send_ptr[c->rank] = send;
  sc_status st = barrier(c, "all_to_all", diag);
  if (!st) {
    for (int q = 0; q < g->size; q++)
      memcpy((char *)recv + (size_t)q * chunk,
             (const char *)g->send_ptr[q] + (size_t)c->rank * chunk, chunk);
    st = barrier(c, "all_to_all", diag);
  }
  return st;
}

static sc_status local_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                            int tag, sc_diag *diag) {
  group *g = G(c);
  if (atomic_load(&g->w->aborted)) return aborted_status(g, diag);
  int64_t bytes = count * (int64_t)sc_dtype_size(t);
  msg *m = sc_malloc(sizeof *m + (size_t)bytes);
  if (!m) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "send: out of memory");
  m->next = NULL;
  m->src = c->rank;
  m->tag = tag;
  m->bytes = bytes;
  if (bytes) memcpy(m->data, buf, (size_t)bytes);
  pthread_mutex_lock(&g->mu);
  msg **p = &g->inbox[peer];
  while (*p) p = &(*p)->next;
  *p = m;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  return SC_OK;
}

static sc_status local_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer,
                            int tag, sc_diag *diag) {
  group *g = G(c);
  if (atomic_load(&g->w->aborted)) return aborted_status(g, diag);
  struct timespec deadline = ts_after(g->timeout_s);
  int64_t bytes = count * (int64_t)sc_dtype_size(t);
  sc_status st = SC_OK;
  msg *m = NULL;
  pthread_mutex_lock(&g->mu);
  for (;;) {
    msg **p = &g->inbox[c->rank];
    while (*p && ((*p)->src != peer || (*p)->tag != tag)) p = &(*p)->next;
    if (*p) {
      m = *p;
      *p = m->next;
      break;
    }
    if ((st = wait_slice(c, &deadline, "recv", diag))) break;
  }
  pthread_mutex_unlock(&g->mu);
  if (!m) return st;
  if (m->bytes != bytes)
    st = sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                     "recv: rank %d expected %lld bytes from rank %d (tag %d), got %lld",
                     c->rank, (long long)bytes, peer, tag, (long long)m->bytes);
  else if (bytes)
    memcpy(buf, m->data, (size_t)bytes);
  sc_free(m);
  return st;
}

static sc_comm *local_handle(group *g, int rank) {
  local_ctx *x = sc_calloc(1, sizeof *x);
  if (!x) return NULL;
  x->g = g;
  sc_comm *c = sc_comm_alloc(&local_iface, x, rank, g->size);
  if (!c) sc_free(x);
  else atomic_fetch_add(&g->w->refs, 1);
  return c;
}

static void local_destroy(sc_comm *c) {
  world *w = G(c)->w;
  sc_free(c->ctx);
  sc_free(c);
  world_release(w);
}

static sc_status local_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  group *g = G(c);
  g->color[c->rank] = color;
  g->key[c->rank] = key;
  g->split_out[c->rank] = NULL;
  sc_status st = barrier(c, "split", diag);
  if (st) return st;
  /* Members of my color in (key, rank) order; the first is the leader. */
  int n = 0, my_new = 0, leader = -1;
  if (color >= 0) {
    for (int q = 0; q < g->size; q++) {
      if (g->color[q] != color) continue;
      if (leader < 0) leader = q;
      if (g->key[q] < key || (g->key[q] == key && q < c->rank)) my_new++;
      n++;
    }
    if (leader == c->rank) {
      g->split_out[c->rank] = group_new(g->w, n, g->timeout_s);
      /* NULL (no memory) is seen by every member below */
    }
  }
  st = barrier(c, "split", diag);
  group *ng = (color >= 0) ? g->split_out[leader] : NULL;
  sc_status st2 = barrier(c, "split", diag); /* split_out read by all */
  if (st || st2) return st ? st : st2; /* ng, if made, is the world's */
  if (color < 0) return SC_OK;
  if (!ng) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "split: out of memory");
  *out = local_handle(ng, my_new);
  if (!*out) {
    world_abort(g->w, "split: out of memory");
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "split: out of memory");
  }
  return SC_OK;
}

static void local_abort(sc_comm *c, const char *text) {
  group *g = G(c);
  char m[1100];
  snprintf(m, sizeof m, "rank %d aborted: %s", c->rank, text);
  world_abort(g->w, m);
  pthread_mutex_lock(&g->mu);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static const sc_comm_iface local_iface = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .all_gather = local_all_gather,
    .reduce_scatter = local_reduce_scatter,
    .all_to_all = local_all_to_all,
    .send = local_send,
    .recv = local_recv,
    .barrier = local_barrier,
    .split = local_split,
    .abort = local_abort,
    .destroy = local_destroy,
};

sc_status sc_comm_local_create_group(int size, sc_comm **comms, sc_diag *diag) {
  if (size < 1 || size > (1 << 16) || !comms)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "local communicator: size %d outside [1, 65536]", size);
  world *w = sc_calloc(1, sizeof *w);
  if (!w) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "local communicator: no memory");
  pthread_mutex_init(&w->mu, NULL);
  atomic_store(&w->refs, 1); /* held here until the handles exist */
  group *g = group_new(w, size, sc_comm_timeout_s());
  if (!g) {
    world_release(w);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "local communicator: no memory");
  }
  for (int r = 0; r < size; r++) {
    comms[r] = local_handle(g, r);
    if (!comms[r]) {
      for (int q = 0; q < r; q++) local_destroy(comms[q]);
      world_release(w);
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "local communicator: no memory");
    }
  }
  world_release(w); /* now held by the handles only */
  return SC_OK;
}
