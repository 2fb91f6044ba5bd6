/* comm.c — the communicator interface: argument checks, dispatch to the
 * backend's table, and helpers shared by the backends (element-wise
 * reduction over dtypes, the SHARDC_COMM_TIMEOUT setting, the TCP bootstrap
 * that hands NCCL's unique id from rank 0 to the others, through the
 * handshake of runtime/comm_handshake.c).
 *
 * The wrappers validate once (counts, buffers, peers, tags, dtypes) so that
 * backends can assume well-formed calls; they do not check that the ranks
 * agree with each other (that would cost a collective). */
#define _GNU_SOURCE
#include "runtime/comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <netdb.h>
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

sc_comm *sc_comm_alloc(const sc_comm_iface *iface, void *ctx, int rank, int size) {
  sc_comm *c = sc_calloc(1, sizeof *c);
  if (!c) return NULL;
  c->iface = iface;
  c->ctx = ctx;
  c->rank = rank;
  c->size = size;
  c->any_thread = true;
  c->concurrent = true;
  c->capturable = true;
  return c;
}

double sc_comm_timeout_s(void) {
  const char *s = getenv("SHARDC_COMM_TIMEOUT");
  if (!s || !*s) return SC_COMM_DEFAULT_TIMEOUT_S;
  char *end;
  double v = strtod(s, &end);
  if (*end || !(v > 0) || v > 1e9) return SC_COMM_DEFAULT_TIMEOUT_S;
  return v;
}

static const sc_comm_choice KINDS[] = {
    {"local", false, NULL},
    {"cuda-local", false, "the thread-ranks share one GPU and its memory"},
    {"mpi", true, NULL},
    {"tcp", true, NULL},
    {"nccl", true, "NCCL moves GPU memory"},
};
enum { N_KINDS = sizeof KINDS / sizeof *KINDS };

const sc_comm_choice *sc_comm_choice_find(const char *name) {
  for (size_t i = 0; name && i < N_KINDS; i++)
    if (strcmp(KINDS[i].name, name) == 0) return &KINDS[i];
  return NULL;
}

static char kind_names[128];
static void fill_kind_names(void) {
  size_t at = 0;
  for (size_t i = 0; i < N_KINDS; i++)
    at += (size_t)snprintf(kind_names + at, sizeof kind_names - at, "%s'%s'",
                           i == 0 ? "" : i + 1 == N_KINDS ? " or " : ", ", KINDS[i].name);
}

const char *sc_comm_choice_names(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fill_kind_names);
  return kind_names;
}

sc_status sc_comm_world_create(const sc_comm_choice *k, const char *program_hash, sc_comm **world,
                               sc_diag *diag) {
  *world = NULL;
  if (!k || !k->world)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "comm '%s' is not one rank per process",
                       k ? k->name : "?");
  if (strcmp(k->name, "mpi") == 0) return sc_comm_mpi_create(world, diag);
  if (strcmp(k->name, "tcp") == 0) {
    sc_comm_tcp_opts o = {.program_hash = program_hash};
    return sc_comm_tcp_create(&o, world, diag);
  }
  bool mpirun = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
  sc_comm_nccl_opts o = {.bootstrap = mpirun ? "mpi" : "env", .device = -1,
                         .program_hash = program_hash};
  return sc_comm_nccl_create(&o, world, diag);
}

sc_status sc_comm_world_check(const sc_comm_choice *k, const char *option, const sc_comm *world,
                              int64_t n_ranks, sc_diag *diag) {
  int size = sc_comm_size(world);
  if (size == n_ranks) return SC_OK;
  char hint[256];
  if (strcmp(k->name, "mpi") == 0)
    snprintf(hint, sizeof hint, "start one process per rank with mpirun -np %lld",
             (long long)n_ranks);
  else
    snprintf(hint, sizeof hint, "start one process per rank, each with WORLD_SIZE=%lld, RANK, "
             "MASTER_ADDR and MASTER_PORT (torchrun and Slurm set them)", (long long)n_ranks);
  return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                     "%s: the mesh has %lld ranks but this job has %d process%s: %s (or "
                     "without it: ranks as threads of this process)",
                     option, (long long)n_ranks, size, size == 1 ? "" : "es", hint);
}

const char *sc_comm_backends(void) {
#if SHARDC_HAVE_MPI && SHARDC_HAVE_NCCL
  return "local,tcp,mpi,nccl";
#elif SHARDC_HAVE_MPI
  return "local,tcp,mpi";
#elif SHARDC_HAVE_NCCL
  return "local,tcp,nccl";
#else
  return "local,tcp";
#endif
}

const char *sc_reduce_op_name(sc_reduce_op op) {
  switch (op) {
  case SC_REDUCE_SUM: return "sum";
  case SC_REDUCE_MAX: return "max";
  case SC_REDUCE_MIN: return "min";
  default: return "?";
  }
}

bool sc_comm_can_reduce(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F32: case SC_DTYPE_F64: case SC_DTYPE_F16: case SC_DTYPE_BF16:
  case SC_DTYPE_I8: case SC_DTYPE_I16: case SC_DTYPE_I32: case SC_DTYPE_I64:
  case SC_DTYPE_U8: case SC_DTYPE_U16: case SC_DTYPE_U32: case SC_DTYPE_U64:
    return true;
  default:
    return false;
  }
}

/* ---- element-wise reduction ---- */

/* Floats: NaN propagates through max/min as through sum (a NaN anywhere
 * must show, never vanish). */
#define RED_FLOAT(T, ACC, LOAD, STORE)                                           \
  for (int64_t i = 0; i < count; i++) {                                          \
    ACC a = LOAD(((const T *)srcs[0])[i]);                                       \
    for (int s = 1; s < n_src; s++) {                                            \
      ACC b = LOAD(((const T *)srcs[s])[i]);                                     \
      if (op == SC_REDUCE_SUM) a = a + b;                                        \
      else if (b != b || a != a) a = a + b;                                      \
      else if (op == SC_REDUCE_MAX) a = b > a ? b : a;                           \
      else a = b < a ? b : a;                                                    \
    }                                                                            \
    ((T *)dst)[i] = STORE(a);                                                    \
  }
/* Integers: sums wrap (done in the unsigned type U: no undefined overflow). */
#define RED_INT(T, U)                                                            \
  for (int64_t i = 0; i < count; i++) {                                          \
    T a = ((const T *)srcs[0])[i];                                               \
    for (int s = 1; s < n_src; s++) {                                            \
      T b = ((const T *)srcs[s])[i];                                             \
      if (op == SC_REDUCE_SUM) a = (T)((U)a + (U)b);                             \
      else if (op == SC_REDUCE_MAX) a = b > a ? b : a;                           \
      else a = b < a ? b : a;                                                    \
    }                                                                            \
    ((T *)dst)[i] = a;                                                           \
  }
#define ID(x) (x)

void sc_comm_reduce_arrays(sc_dtype t, sc_reduce_op op, const void *const *srcs, int n_src,
                           void *dst, int64_t count) {
  SC_ASSERT(n_src >= 1 && sc_comm_can_reduce(t) && op < SC_REDUCE_COUNT);
  switch (t) {
  case SC_DTYPE_F32: RED_FLOAT(float, float, ID, ID) break;
  case SC_DTYPE_F64: RED_FLOAT(double, double, ID, ID) break;
  case SC_DTYPE_F16: RED_FLOAT(uint16_t, float, sc_f16_to_f32, sc_f32_to_f16) break;
  case SC_DTYPE_BF16: RED_FLOAT(uint16_t, float, sc_bf16_to_f32, sc_f32_to_bf16) break;
  case SC_DTYPE_I8: RED_INT(int8_t, uint8_t) break;
  case SC_DTYPE_I16: RED_INT(int16_t, uint16_t) break;
  case SC_DTYPE_I32: RED_INT(int32_t, uint32_t) break;
  case SC_DTYPE_I64: RED_INT(int64_t, uint64_t) break;
  case SC_DTYPE_U8: RED_INT(uint8_t, uint8_t) break;
  case SC_DTYPE_U16: RED_INT(uint16_t, uint16_t) break;
  case SC_DTYPE_U32: RED_INT(uint32_t, uint32_t) break;
  case SC_DTYPE_U64: RED_INT(uint64_t, uint64_t) break;
  default: SC_ASSERT(!"unreachable");
  }
}

/* ---- argument checks and dispatch ---- */

static sc_status check_common(sc_comm *c, const char *what, int64_t count, sc_dtype t,
                              int64_t bytes_mult, sc_diag *diag) {
  if (!c) return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: NULL communicator", what);
  if (count < 0)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: negative count %lld", what,
                       (long long)count);
  if ((unsigned)t >= SC_DTYPE_COUNT || sc_dtype_size(t) == 0)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "%s: dtype %s cannot be sent",
                       what, (unsigned)t < SC_DTYPE_COUNT ? sc_dtype_name(t) : "?");
  int64_t n, bytes;
  if (!sc_mul_i64(count, bytes_mult, &n) || !sc_mul_i64(n, sc_dtype_size(t), &bytes))
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "%s: %lld elements overflow", what,
                       (long long)count);
  return SC_OK;
}

static sc_status check_reduce(const char *what, sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  if ((unsigned)op >= SC_REDUCE_COUNT)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: bad reduce op %d", what, (int)op);
  if (!sc_comm_can_reduce(t))
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "%s: cannot reduce dtype %s",
                       what, sc_dtype_name(t));
  return SC_OK;
}

static sc_status check_bufs(const char *what, int64_t count, const void *a, const void *b,
                            sc_diag *diag) {
  if (count > 0 && (!a || !b))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: NULL buffer", what);
  return SC_OK;
}

static bool overlap(const void *a, int64_t a_bytes, const void *b, int64_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes > 0 && b_bytes > 0 && x < y + (uintptr_t)b_bytes &&
         y < x + (uintptr_t)a_bytes;
}

/* ---- the trace (comm.h) ---- */
static const char *trace_dir(void) {
  const char *d = getenv("SHARDC_COMM_TRACE");
  return d && *d ? d : NULL;
}

static void trace(const sc_comm *c, const char *op, int64_t count, sc_dtype t, int peer,
                  int tag) {
  const char *dir = trace_dir();
  if (!dir) return;
  char path[4096], line[256];
  bool world = !c->trace_id[0];
  snprintf(path, sizeof path, "%s/rank%d.trace", dir, world ? c->rank : c->trace_rank);
  int n = peer >= 0 ? snprintf(line, sizeof line, "%s r%d %s %lld %s %d %d\n",
                               world ? "w" : c->trace_id, c->rank, op, (long long)count,
                               sc_dtype_name(t), peer, tag)
                    : snprintf(line, sizeof line, "%s r%d %s %lld %s\n", world ? "w" : c->trace_id,
                               c->rank, op, (long long)count, sc_dtype_name(t));
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (n > 0 && write(fd, line, (size_t)n) != n) { /* best effort: a test then fails */
  }
  close(fd);
}

sc_status sc_comm_set_stream(sc_comm *c, void *stream, sc_diag *diag) {
  if (!c->iface->set_stream)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "the %s communicator cannot enqueue on a CUDA stream", c->iface->name);
  return c->iface->set_stream(c, stream, diag);
}

bool sc_comm_has_streams(const sc_comm *c) { return c->iface->set_stream != NULL; }
bool sc_comm_capturable(const sc_comm *c) { return c->capturable; }

sc_status sc_comm_poll(sc_comm *c, sc_diag *diag) {
  return c->iface->poll ? c->iface->poll(c, diag) : SC_OK;
}

int sc_comm_rank(const sc_comm *c) { return c->rank; }
bool sc_comm_any_thread(const sc_comm *c) { return c->any_thread; }
bool sc_comm_concurrent(const sc_comm *c) { return c->concurrent; }
int sc_comm_size(const sc_comm *c) { return c->size; }
const char *sc_comm_backend(const sc_comm *c) { return c->iface->name; }

sc_status sc_comm_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  sc_status st;
  if ((st = check_common(c, "all_reduce", count, t, 1, diag)) ||
      (st = check_reduce("all_reduce", t, op, diag)) ||
      (st = check_bufs("all_reduce", count, send, recv, diag)))
    return st;
  trace(c, "all_reduce", count, t, -1, 0);
  return c->iface->all_reduce(c, send, recv, count, t, op, diag);
}

sc_status sc_comm_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_diag *diag) {
  sc_status st;
  if ((st = check_common(c, "all_gather", count, t, c ? c->size : 1, diag)) ||
      (st = check_bufs("all_gather", count, send, recv, diag)))
    return st;
  int64_t sz = sc_dtype_size(t), chunk = count * sz;
  const char *own = (const char *)recv + (int64_t)c->rank * chunk;
  if (send != (const void *)own && overlap(send, chunk, recv, chunk * c->size))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "all_gather: send overlaps recv other than at this rank's chunk");
  trace(c, "all_gather", count, t, -1, 0);
  return c->iface->all_gather(c, send, recv, count, t, diag);
}

sc_status sc_comm_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  sc_status st;
  if ((st = check_common(c, "reduce_scatter", count, t, c ? c->size : 1, diag)) ||
      (st = check_reduce("reduce_scatter", t, op, diag)) ||
      (st = check_bufs("reduce_scatter", count, send, recv, diag)))
    return st;
  int64_t chunk = count * (int64_t)sc_dtype_size(t);
  if (overlap(send, chunk * c->size, recv, chunk))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "reduce_scatter: send overlaps recv");
  trace(c, "reduce_scatter", count, t, -1, 0);
  return c->iface->reduce_scatter(c, send, recv, count, t, op, diag);
}

sc_status sc_comm_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_diag *diag) {
  sc_status st;
  if ((st = check_common(c, "all_to_all", count, t, c ? c->size : 1, diag)) ||
      (st = check_bufs("all_to_all", count, send, recv, diag)))
    return st;
  int64_t bytes = count * (int64_t)sc_dtype_size(t) * c->size;
  if (overlap(send, bytes, recv, bytes))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "all_to_all: send overlaps recv");
  trace(c, "all_to_all", count, t, -1, 0);
  return c->iface->all_to_all(c, send, recv, count, t, diag);
}

static sc_status check_p2p(sc_comm *c, const char *what, const void *buf, int64_t count,
                           sc_dtype t, int peer, int tag, sc_diag *diag) {
  sc_status st;
  if ((st = check_common(c, what, count, t, 1, diag)) ||
      (st = check_bufs(what, count, buf, buf, diag)))
    return st;
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "%s: peer %d is not another rank of a group of %d (this is rank %d)",
                       what, peer, c->size, c->rank);
  if (tag < 0 || tag > SC_COMM_TAG_MAX)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: tag %d outside [0, %d]", what,
                       tag, SC_COMM_TAG_MAX);
  return SC_OK;
}

sc_status sc_comm_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                       int tag, sc_diag *diag) {
  sc_status st = check_p2p(c, "send", buf, count, t, peer, tag, diag);
  if (st == SC_OK) trace(c, "send", count, t, peer, tag);
  return st ? st : c->iface->send(c, buf, count, t, peer, tag, diag);
}

sc_status sc_comm_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                       sc_diag *diag) {
  sc_status st = check_p2p(c, "recv", buf, count, t, peer, tag, diag);
  if (st == SC_OK) trace(c, "recv", count, t, peer, tag);
  return st ? st : c->iface->recv(c, buf, count, t, peer, tag, diag);
}

sc_status sc_comm_send_recv(sc_comm *c, const void *send, int dst, void *recv, int src,
                            int64_t count, sc_dtype t, int tag, sc_diag *diag) {
  sc_status st;
  if ((st = check_p2p(c, "send_recv", send, count, t, dst, tag, diag)) ||
      (st = check_p2p(c, "send_recv", recv, count, t, src, tag, diag)))
    return st;
  int64_t bytes = count * (int64_t)sc_dtype_size(t);
  if (overlap(send, bytes, recv, bytes))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "send_recv: send overlaps recv");
  trace(c, "send", count, t, dst, tag);
  trace(c, "recv", count, t, src, tag);
  if (c->iface->send_recv)
    return c->iface->send_recv(c, send, dst, recv, src, count, t, tag, diag);
  if ((st = c->iface->send(c, send, count, t, dst, tag, diag)) != SC_OK) return st;
  return c->iface->recv(c, recv, count, t, src, tag, diag);
}

sc_status sc_comm_barrier(sc_comm *c, sc_diag *diag) {
  if (!c) return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "barrier: NULL communicator");
  trace(c, "barrier", 0, SC_DTYPE_U8, -1, 0);
  return c->iface->barrier(c, diag);
}

sc_status sc_comm_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  if (!c || !out)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "split: NULL argument");
  *out = NULL;
  int nth = c->n_splits++;
  sc_status st = c->iface->split(c, color, key, out, diag);
  if (st == SC_OK && *out) {
    bool world = !c->trace_id[0];
    snprintf((*out)->trace_id, sizeof (*out)->trace_id, "%.60s.%d:%d", world ? "w" : c->trace_id,
             nth, color);
    (*out)->trace_rank = world ? c->rank : c->trace_rank;
  }
  return st;
}

void sc_comm_abort(sc_comm *c, const char *msg) {
  if (!c) return;
  fprintf(stderr, "shardc: error: rank %d: %s\n", c->rank, msg ? msg : "aborted");
  fflush(stderr);
  c->iface->abort(c, msg ? msg : "aborted");
}

void sc_comm_destroy(sc_comm *c) {
  if (c) c->iface->destroy(c);
}

/* ---- environment (torchrun / Slurm) ---- */

static bool env_int(const char *name, long lo, long hi, int *out) {
  const char *s = getenv(name);
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

sc_status sc_comm_env_read(int *rank, int *size, char *addr, size_t addr_bytes, int *port,
                           sc_diag *diag) {
  if (!env_int("WORLD_SIZE", 1, 1 << 20, size))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "WORLD_SIZE is unset or not a positive integer");
  if (!env_int("RANK", 0, *size - 1, rank))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "RANK is unset or not in [0, WORLD_SIZE=%d)", *size);
  const char *a = getenv("MASTER_ADDR");
  if (!a || !*a || strlen(a) >= addr_bytes)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "MASTER_ADDR is unset or too long");
  snprintf(addr, addr_bytes, "%s", a);
  if (!env_int("MASTER_PORT", 1, 65535, port))
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "MASTER_PORT is unset or not a port number");
  return SC_OK;
}

/* ---- TCP bootstrap ---- */

double sc_comm_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until fd is ready for events (bounded by deadline). */
static bool wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - sc_comm_now_s();
    if (left <= 0) return false;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool sc_comm_io_all(int fd, void *buf, size_t n, bool writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    if (!wait_fd(fd, writing ? POLLOUT : POLLIN, deadline)) return false;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static const uint32_t BOOT_MAGIC = 0x44494353; /* "SCID" */

sc_status sc_comm_resolve(const char *addr, int port, struct sockaddr_in *sa, sc_diag *diag) {
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, addr, &sa->sin_addr) == 1) return SC_OK;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(addr, NULL, &hints, &res);
  if (rc || !res)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "bootstrap: cannot resolve '%s': %s",
                       addr, gai_strerror(rc));
  sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return SC_OK;
}

static sc_status serve_id(const struct sockaddr_in *master, const char *addr, int port,
                          int size, const void *id, size_t id_bytes, const sc_comm_ident *who,
                          double deadline, sc_diag *diag) {
  struct sockaddr_in sa = *master;
  int ls = sc_comm_listen(&sa, 128, NULL);
  if (ls < 0)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "bootstrap: rank 0 cannot listen on %s:%d: %s",
                       addr, port, strerror(errno));
  char where[320];
  snprintf(where, sizeof where, "rank 0 at %s:%d", addr, port);
  sc_comm_hs_server *srv = sc_comm_hs_server_create(ls, who, BOOT_MAGIC, 0, size, where);
  bool *taken = sc_calloc((size_t)size, sizeof *taken);
  sc_status st = srv && taken ? SC_OK
                              : sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "bootstrap: out of memory");
  int served = 0;
  while (st == SC_OK && served < size - 1) {
    int peer;
    int32_t arg;
    struct sockaddr_in from;
    int fd = sc_comm_hs_accept(srv, 1, taken, deadline, &peer, &arg, &from);
    if (fd < 0) {
      const char *why = sc_comm_hs_refusal(srv);
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "bootstrap: rank 0 at %s:%d: only %d of %d ranks connected before "
                       "the timeout%s%s", addr, port, served + 1, size,
                       why[0] ? "; last refused: " : "", why);
      break;
    }
    if (sc_comm_io_all(fd, (void *)id, id_bytes, true, deadline)) {
      taken[peer] = true;
      served++;
    }
    close(fd);
  }
  sc_free(taken);
  sc_comm_hs_server_destroy(srv);
  close(ls);
  return st;
}

static sc_status fetch_id(const struct sockaddr_in *sa, const char *addr, int port, int rank,
                          int size, void *id, size_t id_bytes, const sc_comm_ident *who,
                          double deadline, sc_diag *diag) {
  int err;
  int fd = sc_comm_connect_retry(sa, deadline, &err);
  if (fd < 0)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "bootstrap: rank %d cannot reach rank 0 at %s:%d before the timeout: %s",
                       rank, addr, port, strerror(err));
  char where[320];
  snprintf(where, sizeof where, "rank 0 at %s:%d", addr, port);
  double hs = sc_comm_now_s() + who->handshake_s;
  sc_status st = sc_comm_hs_connect(fd, who, BOOT_MAGIC, rank, size, 0, 0, where,
                                    hs < deadline ? hs : deadline, diag);
  if (st == SC_OK && !sc_comm_io_all(fd, id, id_bytes, false, deadline))
    st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                     "bootstrap: rank %d: connection to %s:%d closed before the id came", rank,
                     addr, port);
  close(fd);
  return st;
}

sc_status sc_comm_bootstrap_tcp(const char *addr, int port, int rank, int size,
                                const char *program_hash, void *id, size_t id_bytes,
                                double timeout_s, sc_diag *diag) {
  if (!addr || !id || id_bytes == 0 || id_bytes > 4096 || size < 1 || rank < 0 ||
      rank >= size || port < 1 || port > 65535)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "bootstrap: bad arguments");
  if (size == 1) return SC_OK;
  struct sockaddr_in sa;
  sc_comm_ident who;
  sc_status st = sc_comm_resolve(addr, port, &sa, diag);
  if (st || (st = sc_comm_ident_init(&who, program_hash, timeout_s, diag))) return st;
  double deadline = sc_comm_now_s() + (timeout_s > 0 ? timeout_s : sc_comm_timeout_s());
  if (rank == 0) return serve_id(&sa, addr, port, size, id, id_bytes, &who, deadline, diag);
  return fetch_id(&sa, addr, port, rank, size, id, id_bytes, &who, deadline, diag);
}
