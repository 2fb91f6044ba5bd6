/* comm_tcp.c — the `tcp` communicator: one rank per process over TCP
 * sockets, bootstrapped from the environment torchrun and Slurm set
 * (comm.h), so that a job runs across processes or machines without MPI.
 *
 * World. Rank 0 listens at MASTER_ADDR:MASTER_PORT (on that address when
 * it is this machine's: sc_comm_listen), and every rank r > 0 connects to
 * it, opens its own listening socket on the address that reached rank 0,
 * and passes the handshake (comm.h, runtime/comm_handshake.c: the job's
 * identity, the program's hash, the HMAC of SHARDC_JOB_TOKEN; a stranger
 * is refused and the wait goes on) saying its rank and port. Once every
 * rank has been admitted (or the timeout passed) rank 0 sends each the
 * table of every rank's address (the one rank 0 saw it connect from) and
 * port (or why the job cannot start); the connection stays as the link
 * r–0. Then each rank r > 0 connects to every rank 1 <= k < r and accepts
 * from every k > r, each connection through the handshake again: a full
 * mesh, one socket per pair. A rank that fails there tells the ranks it
 * has met why (an ABORT frame). Each phase is bounded by
 * SHARDC_COMM_TIMEOUT, each connection's handshake by
 * SHARDC_COMM_HANDSHAKE_TIMEOUT.
 *
 * Messages. A frame is a header (magic, kind, context, source, tag, bytes)
 * and the bytes. One receiver thread per process reads every socket and
 * files each data frame in a mailbox; recv takes the first message of
 * (context, source, tag), so a send never waits for its receive (the
 * pipelined step relies on it: comm.h). A frame of kind ABORT carries a
 * failing rank's message: every later operation then fails with "rank R
 * aborted: MESSAGE"; a socket that closes without a BYE frame (the peer
 * died) does the same with "the connection was lost", and the rank that
 * sees it first sends that as an ABORT to the others before it acts on it,
 * so that every rank names the rank that died (not one that ended because
 * of it). A close is acted on only after the frames already readable on
 * every socket, and a short grace (LOST_GRACE_S) for an ABORT still on its
 * way: a rank that ended because another aborted is not blamed for it. A rank that ends cleanly says BYE: only a wait for it fails
 * then. Waits are bounded.
 *
 * Communicators. A communicator is the world's sockets, a context id and
 * its members (world ranks, in its rank order). Collectives exchange
 * through the mailbox under tag -1 (point-to-point tags are >= 0), in the
 * order every member calls them; reductions sum the members' contributions
 * in rank order, so every rank gets the same bits, as on the local backend.
 * split all-gathers (color, key) and gives the members of each color a
 * context id derived from the parent's and the count of its splits: the
 * same on every member, distinct from every other. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"

enum { FRAME_DATA = 1, FRAME_ABORT = 2, FRAME_BYE = 3, COLL_TAG = -1 };
static const uint32_t MAGIC = 0x53435443; /* "SCTC" */

typedef struct frame {
  uint32_t magic, kind;
  uint64_t ctx;
  int32_t src, tag;
  int64_t bytes;
} frame;

typedef struct msg {
  struct msg *next;
  uint64_t ctx;
  int src, tag;
  int64_t bytes;
  char *data;
} msg;

typedef struct world {
  int rank, size;
  int *fd;                 /* [size] socket to each rank, -1 for this one */
  pthread_mutex_t *wmu;    /* [size] one writer at a time per socket */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  msg *head, *tail;
  bool aborted;
  char why[600];
  bool *gone;              /* [size] the rank said goodbye (a clean end) */
  bool stop;
  int wake[2];             /* stops the receiver's poll */
  pthread_t th;
  bool started;
  int refs;
} world;

typedef struct tcp_ctx {
  world *w;
  uint64_t ctx;
  int *members;            /* [size] world ranks */
  uint64_t splits;
} tcp_ctx;

static const sc_comm_iface tcp_iface;

static tcp_ctx *X(sc_comm *c) { return (tcp_ctx *)c->ctx; }

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "tcp communicator: out of memory");
}

/* ---- the receiver ---- */

static void set_aborted(world *w, const char *why) {
  pthread_mutex_lock(&w->mu);
  if (!w->aborted) {
    w->aborted = true;
    snprintf(w->why, sizeof w->why, "%s", why);
  }
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Appends m to the mailbox and wakes the waiters. */
static void file_msg(world *w, msg *m) {
  pthread_mutex_lock(&w->mu);
  if (w->tail) w->tail->next = m;
  else w->head = m;
  w->tail = m;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Reads one frame from rank r's socket into the mailbox; false when the
 * socket is done (closed, broken). */
static bool read_frame(world *w, int r) {
  frame h;
  double deadline = sc_comm_now_s() + sc_comm_timeout_s();
  if (!sc_comm_io_all(w->fd[r], &h, sizeof h, false, deadline) || h.magic != MAGIC ||
      h.bytes < 0 || h.bytes > ((int64_t)1 << 40))
    return false;
  char *data = sc_malloc(h.bytes > 0 ? (size_t)h.bytes : 1);
  if (!data || !sc_comm_io_all(w->fd[r], data, (size_t)h.bytes, false, deadline)) {
    sc_free(data);
    return false;
  }
  if (h.kind == FRAME_BYE) {
    sc_free(data);
    pthread_mutex_lock(&w->mu);
    w->gone[r] = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return false; /* nothing more comes from it */
  }
  if (h.kind == FRAME_ABORT) {
    char why[600];
    snprintf(why, sizeof why, "rank %d aborted: %.*s", (int)r, (int)(h.bytes < 500 ? h.bytes : 500),
             data);
    sc_free(data);
    set_aborted(w, why);
    return true;
  }
  msg *m = sc_malloc(sizeof *m);
  if (!m) {
    sc_free(data);
    return false;
  }
  *m = (msg){.ctx = h.ctx, .src = r, .tag = h.tag, .bytes = h.bytes, .data = data};
  file_msg(w, m);
  return true;
}

static sc_status write_frame(world *w, int r, uint32_t kind, uint64_t ctx, int tag,
                             const void *buf, int64_t bytes, sc_diag *d);

/* A lost connection is often the consequence of another rank's abort
 * (rank 1 ends because rank 2 aborted): before blaming the lost rank, read
 * what the other open sockets hold for up to LOST_GRACE_S, so that an
 * ABORT frame already on its way names the rank that failed first. */
#define LOST_GRACE_S 0.25

static void drain_for_abort(world *w, struct pollfd *p, bool *open) {
  double until = sc_comm_now_s() + LOST_GRACE_S;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    bool done = w->aborted;
    pthread_mutex_unlock(&w->mu);
    double left = until - sc_comm_now_s();
    if (done || left <= 0) return;
    int n = 0;
    for (int r = 0; r < w->size; r++)
      p[n++] = (struct pollfd){.fd = open[r] ? w->fd[r] : -1, .events = POLLIN};
    if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) <= 0) continue;
    for (int r = 0; r < w->size; r++)
      if (open[r] && (p[r].revents & (POLLIN | POLLHUP | POLLERR)) && !read_frame(w, r))
        open[r] = false; /* another close: the loop below reports it */
  }
}

static void *receiver(void *arg) {
  world *w = arg;
  struct pollfd *p = sc_calloc((size_t)w->size + 1, sizeof *p);
  bool *open = sc_calloc((size_t)w->size + 1, sizeof *open);
  bool *lost = sc_calloc((size_t)w->size + 1, sizeof *lost);
  if (!p || !open || !lost) {
    set_aborted(w, "the receiver is out of memory");
    sc_free(p);
    sc_free(open);
    sc_free(lost);
    return NULL;
  }
  for (int r = 0; r < w->size; r++) open[r] = w->fd[r] >= 0;
  for (;;) {
    int n = 0;
    for (int r = 0; r < w->size; r++) p[n++] = (struct pollfd){.fd = open[r] ? w->fd[r] : -1,
                                                                .events = POLLIN};
    p[n++] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
    if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR) break;
    if (p[w->size].revents) break; /* destroy */
    /* every ready socket's frame first (an ABORT among them names the
     * failing rank), then the closes */
    int n_lost = 0;
    for (int r = 0; r < w->size; r++) {
      lost[r] = false;
      if (!open[r] || !(p[r].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (read_frame(w, r)) continue;
      open[r] = false;
      lost[r] = true;
      n_lost++;
    }
    if (n_lost) drain_for_abort(w, p, open);
    for (int r = 0; r < w->size; r++) {
      if (!lost[r]) continue;
      pthread_mutex_lock(&w->mu);
      bool stopping = w->stop || w->gone[r];
      pthread_mutex_unlock(&w->mu);
      if (!stopping) {
        char why[128];
        snprintf(why, sizeof why, "the connection to rank %d was lost (it ended or died)", r);
        /* the others hear it from here first, before this process learns
         * of it and may exit: every rank then names the rank that died,
         * not one that ended because of it */
        pthread_mutex_lock(&w->mu);
        bool first = !w->aborted;
        pthread_mutex_unlock(&w->mu);
        sc_diag d;
        sc_diag_clear(&d);
        for (int k = 0; first && k < w->size; k++)
          if (k != w->rank && k != r && open[k])
            write_frame(w, k, FRAME_ABORT, 0, 0, why, (int64_t)strlen(why), &d);
        set_aborted(w, why);
      }
    }
  }
  sc_free(p);
  sc_free(open);
  sc_free(lost);
  return NULL;
}

/* ---- point to point ---- */

static sc_status write_frame(world *w, int r, uint32_t kind, uint64_t ctx, int tag,
                             const void *buf, int64_t bytes, sc_diag *d) {
  frame h = {.magic = MAGIC, .kind = kind, .ctx = ctx, .src = w->rank, .tag = tag, .bytes = bytes};
  double deadline = sc_comm_now_s() + sc_comm_timeout_s();
  pthread_mutex_lock(&w->wmu[r]);
  bool ok = sc_comm_io_all(w->fd[r], &h, sizeof h, true, deadline) &&
            (bytes == 0 || sc_comm_io_all(w->fd[r], (void *)buf, (size_t)bytes, true, deadline));
  pthread_mutex_unlock(&w->wmu[r]);
  if (ok) return SC_OK;
  int e = errno;
  /* the peer is gone: its ABORT frame, or the end of its socket, tells why
   * (the receiver reads what came before the end) */
  double until = sc_comm_now_s() + 2.0;
  pthread_mutex_lock(&w->mu);
  while (!w->aborted && sc_comm_now_s() < until) {
    pthread_mutex_unlock(&w->mu);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&w->mu);
  }
  char why[600];
  snprintf(why, sizeof why, "%s", w->aborted ? w->why : "");
  pthread_mutex_unlock(&w->mu);
  if (why[0]) return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s", why);
  return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "rank %d: sending to rank %d failed: %s", w->rank,
                     r, e ? strerror(e) : "the connection closed");
}

/* Sends bytes to world rank r (to this rank: straight into the mailbox). */
static sc_status put(world *w, int r, uint64_t ctx, int tag, const void *buf, int64_t bytes,
                     sc_diag *d) {
  pthread_mutex_lock(&w->mu);
  char why[600] = "";
  if (w->aborted) snprintf(why, sizeof why, "%s", w->why);
  pthread_mutex_unlock(&w->mu);
  if (why[0]) return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s", why);
  if (r != w->rank) return write_frame(w, r, FRAME_DATA, ctx, tag, buf, bytes, d);
  msg *m = sc_malloc(sizeof *m);
  char *data = sc_malloc(bytes > 0 ? (size_t)bytes : 1);
  if (!m || !data) {
    sc_free(m);
    sc_free(data);
    return nomem(d);
  }
  if (bytes) memcpy(data, buf, (size_t)bytes);
  *m = (msg){.ctx = ctx, .src = r, .tag = tag, .bytes = bytes, .data = data};
  file_msg(w, m);
  return SC_OK;
}

/* Takes the first message of (ctx, world rank r, tag) into buf (exactly
 * bytes long). */
static sc_status take(world *w, int r, uint64_t ctx, int tag, void *buf, int64_t bytes,
                      sc_diag *d) {
  double deadline = sc_comm_now_s() + sc_comm_timeout_s();
  pthread_mutex_lock(&w->mu);
  for (;;) {
    if (w->aborted) { /* every operation after an abort fails (comm.h) */
      char why[600];
      snprintf(why, sizeof why, "%s", w->why);
      pthread_mutex_unlock(&w->mu);
      return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s", why);
    }
    msg *prev = NULL, *m = w->head;
    while (m && !(m->ctx == ctx && m->src == r && m->tag == tag)) prev = m, m = m->next;
    if (m) {
      if (prev) prev->next = m->next;
      else w->head = m->next;
      if (w->tail == m) w->tail = prev;
      pthread_mutex_unlock(&w->mu);
      sc_status st = SC_OK;
      if (m->bytes != bytes)
        st = sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "recv: rank %d expected %lld bytes from rank %d (tag %d), got %lld",
                         w->rank, (long long)bytes, r, tag, (long long)m->bytes);
      else if (bytes)
        memcpy(buf, m->data, (size_t)bytes);
      sc_free(m->data);
      sc_free(m);
      return st;
    }
    if (w->gone[r]) {
      pthread_mutex_unlock(&w->mu);
      return sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                         "rank %d: waits for rank %d (tag %d), which has ended", w->rank, r, tag);
    }
    double left = deadline - sc_comm_now_s();
    if (left <= 0) {
      pthread_mutex_unlock(&w->mu);
      return sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                         "rank %d: nothing from rank %d (tag %d) within %.0f s (SHARDC_COMM_TIMEOUT)",
                         w->rank, r, tag, sc_comm_timeout_s());
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = left < 1.0 ? left : 1.0;
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
}

static sc_status tcp_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                          int tag, sc_diag *diag) {
  tcp_ctx *x = X(c);
  return put(x->w, x->members[peer], x->ctx, tag, buf, count * (int64_t)sc_dtype_size(t), diag);
}

static sc_status tcp_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                          sc_diag *diag) {
  tcp_ctx *x = X(c);
  return take(x->w, x->members[peer], x->ctx, tag, buf, count * (int64_t)sc_dtype_size(t), diag);
}

/* ---- collectives ---- */

/* Member q's chunk of `chunk` bytes: send's q-th (scatter) or all of it. */
static sc_status exchange(sc_comm *c, const void *send, int64_t chunk, bool scatter,
                          char *got, sc_diag *d) {
  tcp_ctx *x = X(c);
  sc_status st = SC_OK;
  for (int q = 0; st == SC_OK && q < c->size; q++)
    if (q != c->rank)
      st = put(x->w, x->members[q], x->ctx, COLL_TAG,
               (const char *)send + (scatter ? (size_t)(q * chunk) : 0), chunk, d);
  for (int q = 0; st == SC_OK && q < c->size; q++) {
    char *dst = got + (size_t)(q * chunk);
    if (q == c->rank)
      memmove(dst, (const char *)send + (scatter ? (size_t)(q * chunk) : 0), (size_t)chunk);
    else
      st = take(x->w, x->members[q], x->ctx, COLL_TAG, dst, chunk, d);
  }
  return st;
}

static sc_status reduce_from(sc_comm *c, const char *got, int64_t chunk, sc_dtype t,
                             sc_reduce_op op, void *recv, int64_t count, sc_diag *d) {
  const void **srcs = sc_malloc((size_t)c->size * sizeof *srcs);
  if (!srcs) return nomem(d);
  for (int q = 0; q < c->size; q++) srcs[q] = got + (size_t)(q * chunk);
  sc_comm_reduce_arrays(t, op, srcs, c->size, recv, count);
  sc_free(srcs);
  return SC_OK;
}

/* Every member's contribution (all of send, or its chunk of it: scatter),
 * reduced in rank order into recv. */
static sc_status exchange_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_reduce_op op, bool scatter, sc_diag *diag) {
  int64_t chunk = count * (int64_t)sc_dtype_size(t);
  char *got = sc_malloc((size_t)(chunk * c->size) + 1);
  if (!got) return nomem(diag);
  sc_status st = exchange(c, send, chunk, scatter, got, diag);
  if (st == SC_OK) st = reduce_from(c, got, chunk, t, op, recv, count, diag);
  sc_free(got);
  return st;
}

static sc_status tcp_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  return exchange_reduce(c, send, recv, count, t, op, false, diag);
}

static sc_status tcp_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_diag *diag) {
  int64_t chunk = count * (int64_t)sc_dtype_size(t);
  char *mine = sc_malloc((size_t)chunk + 1); /* send may be recv's own chunk */
  if (!mine) return nomem(diag);
  memcpy(mine, send, (size_t)chunk);
  sc_status st = exchange(c, mine, chunk, false, recv, diag);
  sc_free(mine);
  return st;
}

static sc_status tcp_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                    sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  return exchange_reduce(c, send, recv, count, t, op, true, diag);
}

static sc_status tcp_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_diag *diag) {
  return exchange(c, send, count * (int64_t)sc_dtype_size(t), true, recv, diag);
}

static sc_status tcp_barrier(sc_comm *c, sc_diag *diag) {
  int32_t one = 1, sum = 0;
  return tcp_all_reduce(c, &one, &sum, 1, SC_DTYPE_I32, SC_REDUCE_SUM, diag);
}

static sc_status wrap(world *w, uint64_t ctx, int *members, int rank, int size, sc_comm **out,
                      sc_diag *d) {
  tcp_ctx *x = sc_calloc(1, sizeof *x);
  sc_comm *c = x ? sc_comm_alloc(&tcp_iface, x, rank, size) : NULL;
  if (!c) {
    sc_free(x);
    sc_free(members);
    return nomem(d);
  }
  x->w = w;
  x->ctx = ctx;
  x->members = members;
  pthread_mutex_lock(&w->mu);
  w->refs++;
  pthread_mutex_unlock(&w->mu);
  *out = c;
  return SC_OK;
}

static sc_status tcp_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  tcp_ctx *x = X(c);
  int32_t mine[2] = {color, key}, *all = sc_malloc((size_t)c->size * sizeof mine);
  if (!all) return nomem(diag);
  sc_status st = tcp_all_gather(c, mine, all, 2, SC_DTYPE_I32, diag);
  uint64_t ctx = (x->ctx * 1000003u + ++x->splits) * 1000033u + (uint64_t)(color + 1);
  if (st != SC_OK || color < 0) {
    sc_free(all);
    return st;
  }
  int n = 0, me = 0;
  int *members = sc_malloc((size_t)c->size * sizeof *members);
  if (!members) {
    sc_free(all);
    return nomem(diag);
  }
  for (int q = 0; q < c->size; q++) /* by (key, rank): insertion sort */
    if (all[2 * q] == color) {
      int k = n++;
      while (k > 0 && (all[2 * members[k - 1] + 1] > all[2 * q + 1])) {
        members[k] = members[k - 1];
        k--;
      }
      members[k] = q;
    }
  for (int k = 0; k < n; k++) {
    if (members[k] == c->rank) me = k;
    members[k] = x->members[members[k]]; /* world ranks */
  }
  sc_free(all);
  return wrap(x->w, ctx, members, me, n, out, diag);
}

static void tcp_abort(sc_comm *c, const char *text) {
  world *w = X(c)->w;
  sc_diag d;
  sc_diag_clear(&d);
  for (int r = 0; r < w->size; r++)
    if (r != w->rank && w->fd[r] >= 0)
      write_frame(w, r, FRAME_ABORT, 0, 0, text, (int64_t)strlen(text), &d);
  char why[600];
  snprintf(why, sizeof why, "rank %d aborted: %s", w->rank, text);
  set_aborted(w, why);
}

static void world_free(world *w) {
  if (w->started) { /* goodbye: a clean end, not a death */
    sc_diag d;
    sc_diag_clear(&d);
    for (int r = 0; r < w->size; r++)
      if (r != w->rank && w->fd[r] >= 0) write_frame(w, r, FRAME_BYE, 0, 0, NULL, 0, &d);
  }
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    char b = 1;
    if (write(w->wake[1], &b, 1) < 0) { /* the receiver may be gone already */
    }
    pthread_join(w->th, NULL);
  }
  for (int r = 0; w->fd && r < w->size; r++)
    if (w->fd[r] >= 0) close(w->fd[r]);
  for (int r = 0; w->wmu && r < w->size; r++) pthread_mutex_destroy(&w->wmu[r]);
  if (w->wake[0] >= 0) close(w->wake[0]);
  if (w->wake[1] >= 0) close(w->wake[1]);
  for (msg *m = w->head, *n; m; m = n) {
    n = m->next;
    sc_free(m->data);
    sc_free(m);
  }
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  sc_free(w->fd);
  sc_free(w->wmu);
  sc_free(w->gone);
  sc_free(w);
}

static void tcp_destroy(sc_comm *c) {
  tcp_ctx *x = X(c);
  world *w = x->w;
  pthread_mutex_lock(&w->mu);
  bool last = --w->refs == 0;
  pthread_mutex_unlock(&w->mu);
  if (last) world_free(w);
  sc_free(x->members);
  sc_free(x);
  sc_free(c);
}

static const sc_comm_iface tcp_iface = {
    .name = "tcp",
    .all_reduce = tcp_all_reduce,
    .all_gather = tcp_all_gather,
    .reduce_scatter = tcp_reduce_scatter,
    .all_to_all = tcp_all_to_all,
    .send = tcp_send,
    .recv = tcp_recv,
    .barrier = tcp_barrier,
    .split = tcp_split,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
};

/* ---- bootstrap ---- */

/* Rank 0's answer once everyone has met (or the timeout passed): status 0
 * and the table of every rank's listening address, or status 1 and why
 * the job cannot start. */
typedef struct table_head {
  uint32_t magic, status;
  int32_t size, pad;
  char reason[512];
} table_head;
typedef struct peer_addr {
  int32_t rank, port;
  uint32_t addr; /* network order, as rank 0 saw the rank connect */
} peer_addr;
static const uint32_t TABLE_MAGIC = 0x53435442; /* "SCTB" */

static sc_status io_err(sc_diag *d, int rank, const char *what) {
  return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: %s: %s", rank, what,
                     errno ? strerror(errno) : "timed out or closed");
}

static void addr_text(uint32_t addr, int port, char *out, size_t n) {
  char ip[INET_ADDRSTRLEN] = "?";
  struct in_addr a = {.s_addr = addr};
  inet_ntop(AF_INET, &a, ip, sizeof ip);
  snprintf(out, n, "%s:%d", ip, port);
}

/* "2, 3" of the ranks in [lo, size) not taken. */
static void missing_list(const bool *taken, int lo, int size, char *out, size_t n) {
  size_t k = 0;
  int shown = 0;
  out[0] = 0;
  for (int r = lo; r < size && k + 16 < n; r++)
    if (!taken[r]) {
      if (shown++ == 8) {
        k += (size_t)snprintf(out + k, n - k, ", ...");
        break;
      }
      k += (size_t)snprintf(out + k, n - k, "%s%d", k ? ", " : "", r);
    }
}

/* A rank that fails after it has met others tells them why (an ABORT
 * frame, before the receiver thread runs: the frame waits in the socket),
 * so that rank 0 names this rank and the cause, not a lost connection. */
static void tell_failure(world *w, const char *text) {
  size_t n = strlen(text);
  frame h = {.magic = MAGIC, .kind = FRAME_ABORT, .src = w->rank, .bytes = (int64_t)n};
  double deadline = sc_comm_now_s() + 1.0;
  for (int r = 0; r < w->size; r++)
    if (r != w->rank && w->fd[r] >= 0 && sc_comm_io_all(w->fd[r], &h, sizeof h, true, deadline))
      sc_comm_io_all(w->fd[r], (void *)text, n, true, deadline);
}

/* Rank 0: admits every other rank at MASTER_ADDR:MASTER_PORT through the
 * handshake, then sends each the table (or why the job cannot start). */
static sc_status meet(world *w, const struct sockaddr_in *master, const char *addr, int port,
                      const sc_comm_ident *id, sc_diag *d) {
  double deadline = sc_comm_now_s() + sc_comm_timeout_s();
  struct sockaddr_in sa = *master;
  int ms = sc_comm_listen(&sa, w->size + 16, NULL);
  if (ms < 0)
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank 0 cannot listen on %s:%d: %s",
                       addr, port, strerror(errno));
  char where[320];
  snprintf(where, sizeof where, "rank 0 at %s:%d", addr, port);
  sc_comm_hs_server *srv = sc_comm_hs_server_create(ms, id, MAGIC, 0, w->size, where);
  peer_addr *table = sc_calloc((size_t)w->size, sizeof *table);
  bool *taken = sc_calloc((size_t)w->size, sizeof *taken);
  sc_status st = srv && table && taken ? SC_OK : nomem(d);
  for (int met = 1; st == SC_OK && met < w->size; met++) {
    int peer;
    int32_t arg;
    struct sockaddr_in from;
    int fd = sc_comm_hs_accept(srv, 1, taken, deadline, &peer, &arg, &from);
    if (fd < 0) {
      char missing[128];
      const char *why = sc_comm_hs_refusal(srv);
      missing_list(taken, 1, w->size, missing, sizeof missing);
      st = sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: %s: %d of %d ranks met within %.0f s (SHARDC_COMM_TIMEOUT);"
                       " missing: rank %s%s%s", where, met, w->size, sc_comm_timeout_s(), missing,
                       why[0] ? "; last refused: " : "", why);
      break;
    }
    w->fd[peer] = fd;
    taken[peer] = true;
    table[peer] = (peer_addr){.rank = peer, .port = arg, .addr = from.sin_addr.s_addr};
  }
  sc_comm_hs_server_destroy(srv);
  close(ms); /* nobody joins later */
  table_head head = {.magic = TABLE_MAGIC, .status = st != SC_OK, .size = w->size};
  if (st != SC_OK) /* rank 0's own message, less the prefix the rank adds */
    snprintf(head.reason, sizeof head.reason, "%.500s",
             d->msg + (strncmp(d->msg, "tcp bootstrap: ", 15) == 0 ? 15 : 0));
  for (int r = 1; taken && r < w->size; r++) {
    if (w->fd[r] < 0) continue;
    bool ok = sc_comm_io_all(w->fd[r], &head, sizeof head, true, deadline + 5) &&
              (st != SC_OK || sc_comm_io_all(w->fd[r], table, (size_t)w->size * sizeof *table,
                                             true, deadline + 5));
    if (!ok && st == SC_OK) {
      char what[64];
      snprintf(what, sizeof what, "sending the table to rank %d", r);
      st = io_err(d, 0, what);
    }
  }
  sc_free(table);
  sc_free(taken);
  return st;
}

/* Rank r > 0: joins rank 0 through the handshake, receives the table,
 * then meets every other rank: connects to the ranks 1..r-1, accepts the
 * ranks above (each connection through the handshake again). */
static sc_status join(world *w, const struct sockaddr_in *master, const char *addr, int port,
                      const sc_comm_ident *id, sc_diag *d) {
  double t = sc_comm_timeout_s(), deadline = sc_comm_now_s() + t;
  char where[320];
  snprintf(where, sizeof where, "rank 0 at %s:%d", addr, port);
  int err;
  if ((w->fd[0] = sc_comm_connect_retry(master, deadline, &err)) < 0)
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: rank %d cannot reach %s within %.0f s "
                       "(SHARDC_COMM_TIMEOUT): %s", w->rank, where, t, strerror(err));
  /* this rank's listener for the ranks above: on the address that reaches
   * rank 0 (the one rank 0 sees, and tells them), or every interface with
   * SHARDC_BIND_ALL=1 */
  int ls = -1;
  int32_t my_port = 0;
  struct sockaddr_in me = {0};
  socklen_t len = sizeof me;
  if (w->rank < w->size - 1) {
    if (getsockname(w->fd[0], (struct sockaddr *)&me, &len) < 0) return io_err(d, w->rank, "getsockname");
    me.sin_port = 0;
    if ((ls = sc_comm_listen(&me, w->size + 16, NULL)) < 0) return io_err(d, w->rank, "cannot listen");
    my_port = ntohs(me.sin_port);
  }
  double hs = sc_comm_now_s() + id->handshake_s;
  sc_status st = sc_comm_hs_connect(w->fd[0], id, MAGIC, w->rank, w->size, 0, my_port, where,
                                    hs < deadline ? hs : deadline, d);
  /* admitted: rank 0 answers when every rank has met, or when its own
   * timeout (which began before this admission) has passed */
  table_head head;
  peer_addr *table = st == SC_OK ? sc_calloc((size_t)w->size, sizeof *table) : NULL;
  if (st == SC_OK && !table) st = nomem(d);
  double wait = sc_comm_now_s() + t + 2;
  errno = 0;
  if (st == SC_OK && !sc_comm_io_all(w->fd[0], &head, sizeof head, false, wait))
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                     "tcp bootstrap: rank %d: %s admitted it but sent no table (%s)", w->rank,
                     where, errno ? strerror(errno) : "rank 0 ended or timed out");
  if (st == SC_OK && (head.magic != TABLE_MAGIC || head.size != w->size))
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: %s sent a bad table",
                     w->rank, where);
  if (st == SC_OK && head.status != 0) {
    head.reason[sizeof head.reason - 1] = 0;
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: rank 0 gave up: %s",
                     w->rank, head.reason);
  }
  if (st == SC_OK &&
      !sc_comm_io_all(w->fd[0], table, (size_t)w->size * sizeof *table, false, wait))
    st = io_err(d, w->rank, "receiving the table");
  bool met = st == SC_OK; /* from here a failure is told to the ranks met */
  /* the mesh: everyone is there now; a fresh bound */
  deadline = sc_comm_now_s() + t;
  for (int k = 1; st == SC_OK && k < w->rank; k++) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = table[k].addr,
                             .sin_port = htons((uint16_t)table[k].port)};
    char at[64];
    addr_text(table[k].addr, table[k].port, at, sizeof at);
    snprintf(where, sizeof where, "rank %d at %s", k, at);
    int fd = sc_comm_connect_retry(&to, deadline, &err);
    if (fd < 0) {
      st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d cannot reach %s: %s",
                       w->rank, where, strerror(err));
      break;
    }
    w->fd[k] = fd;
    st = sc_comm_hs_connect(fd, id, MAGIC, w->rank, w->size, k, 0, where, deadline, d);
  }
  if (st == SC_OK && ls >= 0) {
    char at[64];
    addr_text(me.sin_addr.s_addr, my_port, at, sizeof at);
    snprintf(where, sizeof where, "rank %d at %s", w->rank, at);
    sc_comm_hs_server *srv = sc_comm_hs_server_create(ls, id, MAGIC, w->rank, w->size, where);
    bool *taken = sc_calloc((size_t)w->size, sizeof *taken);
    if (!srv || !taken) st = nomem(d);
    for (int k = w->rank + 1; st == SC_OK && k < w->size; k++) {
      int peer;
      int32_t arg;
      struct sockaddr_in from;
      int fd = sc_comm_hs_accept(srv, w->rank + 1, taken, deadline, &peer, &arg, &from);
      if (fd < 0) {
        char missing[128];
        const char *why = sc_comm_hs_refusal(srv);
        missing_list(taken, w->rank + 1, w->size, missing, sizeof missing);
        st = sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                         "tcp bootstrap: %s: rank %s did not connect within %.0f s%s%s", where,
                         missing, t, why[0] ? "; last refused: " : "", why);
        break;
      }
      w->fd[peer] = fd;
      taken[peer] = true;
    }
    sc_free(taken);
    sc_comm_hs_server_destroy(srv);
  }
  if (ls >= 0) close(ls);
  sc_free(table);
  if (st != SC_OK && met) tell_failure(w, d->msg);
  return st;
}

static sc_status build_world(world *w, const char *addr, int port, const sc_comm_ident *id,
                             sc_diag *d) {
  struct sockaddr_in master;
  sc_status st = sc_comm_resolve(addr, port, &master, d);
  if (st == SC_OK)
    st = w->rank == 0 ? meet(w, &master, addr, port, id, d) : join(w, &master, addr, port, id, d);
  for (int r = 0; st == SC_OK && r < w->size; r++)
    if (w->fd[r] >= 0) {
      int one = 1;
      setsockopt(w->fd[r], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  return st;
}

/* RANK and WORLD_SIZE, or Slurm's SLURM_PROCID and SLURM_NTASKS. */
static void slurm_env(void) {
  const char *r = getenv("SLURM_PROCID"), *n = getenv("SLURM_NTASKS");
  if (!getenv("RANK") && r) setenv("RANK", r, 0);
  if (!getenv("WORLD_SIZE") && n) setenv("WORLD_SIZE", n, 0);
}

sc_status sc_comm_tcp_create(const sc_comm_tcp_opts *opts, sc_comm **out, sc_diag *diag) {
  *out = NULL;
  slurm_env();
  int rank, size, port;
  char addr[256];
  sc_comm_ident id;
  sc_status st = sc_comm_env_read(&rank, &size, addr, sizeof addr, &port, diag);
  if (st || (st = sc_comm_ident_init(&id, opts ? opts->program_hash : NULL, 0, diag))) return st;
  world *w = sc_calloc(1, sizeof *w);
  if (!w) return nomem(diag);
  w->rank = rank;
  w->size = size;
  w->wake[0] = w->wake[1] = -1;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->fd = sc_malloc((size_t)size * sizeof *w->fd);
  w->wmu = sc_calloc((size_t)size, sizeof *w->wmu);
  w->gone = sc_calloc((size_t)size, sizeof *w->gone);
  int *members = sc_malloc((size_t)size * sizeof *members);
  if (!w->fd || !w->wmu || !w->gone || !members || pipe(w->wake) < 0) {
    sc_free(members);
    world_free(w);
    return nomem(diag);
  }
  for (int r = 0; r < size; r++) {
    w->fd[r] = -1;
    members[r] = r;
    pthread_mutex_init(&w->wmu[r], NULL);
  }
  st = build_world(w, addr, port, &id, diag);
  if (st == SC_OK && pthread_create(&w->th, NULL, receiver, w) != 0)
    st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "tcp communicator: cannot start its thread");
  w->started = st == SC_OK;
  if (st != SC_OK) {
    sc_free(members);
    world_free(w);
    return st;
  }
  return wrap(w, 1, members, rank, size, out, diag);
}
