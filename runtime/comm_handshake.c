/* comm_handshake.c — who may join a job: the handshake every connection of
 * a TCP bootstrap passes (comm.h, "who may join"; docs/comm.md,
 * "Security"), the job's identity it carries, HMAC-SHA-256, and the
 * listening and connecting sockets of the bootstraps.
 *
 * The exchange, on a fresh connection (C connects, A accepts):
 *   C -> A  hello    magic, version, rank, world size, job, program hash,
 *                    flags (token), nonce_c, arg (the tcp communicator's
 *                    listening port)
 *   A -> C  reply    the same of A's, status (0, or refused: reason),
 *                    nonce_a, mac_a = HMAC(token, "shardc accept" || hello
 *                    || reply up to mac_a)
 *   C -> A  confirm  status (0, or refused: reason), mac_c = HMAC(token,
 *                    "shardc connect" || hello || reply up to mac_a)
 *   A -> C  verdict  status (0: admitted, or refused: reason)
 * Both nonces are fresh random numbers in every exchange, so a recorded
 * MAC proves nothing later; the two labels keep either side's MAC from
 * being played back as the other's. Without a token the MACs are zero and
 * unchecked: the identity and program checks then guard against
 * accidents (a second job on the same port), not against an adversary.
 *
 * The accepting side polls its listening socket and every pending
 * connection together, each with its own deadline, so that no connection
 * can hold up another: a silent one is dropped when its deadline passes
 * while the real rank, arriving later, is admitted at once. Numbers are in
 * the machine's order (every rank of a job runs the same build). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "codegen/program_json.h" /* sc_sha256: the one SHA-256 (bundle manifests) */
#include "runtime/comm.h"

enum { HS_VERSION = 2, HS_MIN_PENDING = 32, HS_MAX_WARNINGS = 20, HS_REASON = 320 };
#define HS_DEFAULT_S 5.0

/* The first 16 bytes keep the layout of version 1's hello (magic, rank,
 * port, address 0), so that an old build's hello reads as version 0. */
typedef struct hs_hello {
  uint32_t magic;
  int32_t rank;
  int32_t arg;
  uint32_t version;
  int32_t size;
  uint32_t flags; /* HS_TOKEN */
  char job[SC_COMM_JOB_MAX];
  char program[SC_COMM_PROGRAM_MAX];
  uint8_t nonce[32];
} hs_hello;

typedef struct hs_reply {
  uint32_t magic, version;
  int32_t rank, size;
  uint32_t flags, status;
  char job[SC_COMM_JOB_MAX];
  char program[SC_COMM_PROGRAM_MAX];
  uint8_t nonce[32];
  uint8_t mac[32];
  char reason[HS_REASON];
} hs_reply;

typedef struct hs_msg { /* the confirmation and the verdict */
  uint32_t magic, status;
  uint8_t mac[32];
  char reason[HS_REASON];
} hs_msg;

_Static_assert(sizeof(hs_hello) == 24 + SC_COMM_JOB_MAX + SC_COMM_PROGRAM_MAX + 32,
               "hs_hello has no padding");
_Static_assert(sizeof(hs_reply) ==
                   24 + SC_COMM_JOB_MAX + SC_COMM_PROGRAM_MAX + 64 + HS_REASON,
               "hs_reply has no padding");
_Static_assert(sizeof(hs_msg) == 40 + HS_REASON, "hs_msg has no padding");

enum { HS_TOKEN = 1 };
static const char LABEL_ACCEPT[] = "shardc accept", LABEL_CONNECT[] = "shardc connect";

/* ---- HMAC-SHA-256 ---- */

void sc_hmac_sha256(const void *key, size_t key_bytes, const void *msg, size_t n,
                    uint8_t mac[32]) {
  uint8_t k[64] = {0}, pad[64], inner[32];
  sc_sha256 s;
  if (key_bytes > sizeof k) {
    sc_sha256_init(&s);
    sc_sha256_update(&s, key, key_bytes);
    sc_sha256_final(&s, k);
  } else if (key_bytes) {
    memcpy(k, key, key_bytes);
  }
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sc_sha256_init(&s);
  sc_sha256_update(&s, pad, sizeof pad);
  sc_sha256_update(&s, msg, n);
  sc_sha256_final(&s, inner);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sc_sha256_init(&s);
  sc_sha256_update(&s, pad, sizeof pad);
  sc_sha256_update(&s, inner, sizeof inner);
  sc_sha256_final(&s, mac);
}

/* The MAC of one side: label || hello || the reply up to its mac. */
static void hs_mac(const sc_comm_ident *id, const char *label, const hs_hello *h,
                   const hs_reply *r, uint8_t mac[32]) {
  uint8_t buf[sizeof LABEL_CONNECT + sizeof *h + offsetof(hs_reply, mac)];
  size_t n = strlen(label) + 1;
  memcpy(buf, label, n);
  memcpy(buf + n, h, sizeof *h);
  memcpy(buf + n + sizeof *h, r, offsetof(hs_reply, mac));
  sc_hmac_sha256(id->key, id->key_bytes, buf, n + sizeof *h + offsetof(hs_reply, mac), mac);
}

static bool same_mac(const uint8_t *a, const uint8_t *b) { /* in constant time */
  uint8_t x = 0;
  for (int i = 0; i < 32; i++) x |= (uint8_t)(a[i] ^ b[i]);
  return x == 0;
}

static bool nonce(uint8_t out[32]) {
  size_t got = 0;
  while (got < 32) {
    ssize_t k = getrandom(out + got, 32 - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  if (got == 32) return true;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, out, 32) == 32;
  if (fd >= 0) close(fd);
  return ok;
}

/* ---- the identity ---- */

sc_status sc_comm_ident_init(sc_comm_ident *id, const char *program_hash, double timeout_s,
                             sc_diag *diag) {
  memset(id, 0, sizeof *id);
  if (program_hash && *program_hash) {
    size_t n = strlen(program_hash);
    if (n >= SC_COMM_PROGRAM_MAX || strspn(program_hash, "0123456789abcdef") != n)
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                         "tcp bootstrap: the program hash '%.80s' is not lowercase hex digits "
                         "(at most %d)", program_hash, SC_COMM_PROGRAM_MAX - 1);
    memcpy(id->program, program_hash, n + 1);
  }
  const char *tok = getenv("SHARDC_JOB_TOKEN");
  if (tok) {
    size_t n = strlen(tok);
    if (n == 0)
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                         "SHARDC_JOB_TOKEN is set but empty (unset it, or give every rank the "
                         "same secret)");
    id->token = true;
    snprintf(id->job, sizeof id->job, "SHARDC_JOB_TOKEN");
    if (n > SC_COMM_KEY_MAX) { /* as HMAC does with a long key */
      sc_sha256 s;
      sc_sha256_init(&s);
      sc_sha256_update(&s, tok, n);
      sc_sha256_final(&s, id->key);
      id->key_bytes = 32;
    } else {
      memcpy(id->key, tok, n);
      id->key_bytes = n;
    }
  } else {
    /* the launcher's run id: the same on every rank of one job */
    const char *v, *step;
    if ((v = getenv("TORCHELASTIC_RUN_ID")) && *v)
      snprintf(id->job, sizeof id->job, "TORCHELASTIC_RUN_ID=%.120s", v);
    else if ((v = getenv("SLURM_JOB_ID")) && *v)
      snprintf(id->job, sizeof id->job, "SLURM_JOB_ID=%.60s.%.60s", v,
               (step = getenv("SLURM_STEP_ID")) && *step ? step : "-");
    else if ((v = getenv("OMPI_MCA_ess_base_jobid")) && *v)
      snprintf(id->job, sizeof id->job, "OMPI_MCA_ess_base_jobid=%.120s", v);
  }
  id->handshake_s = HS_DEFAULT_S;
  const char *s = getenv("SHARDC_COMM_HANDSHAKE_TIMEOUT");
  if (s && *s) {
    char *end;
    double v = strtod(s, &end);
    if (!*end && v > 0 && v < 1e9) id->handshake_s = v;
  }
  double all = timeout_s > 0 ? timeout_s : sc_comm_timeout_s();
  if (id->handshake_s > all) id->handshake_s = all;
  return SC_OK;
}

/* ---- sockets ---- */

static int try_listen(struct sockaddr_in *sa, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof *sa;
  if (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0 || listen(fd, backlog) < 0 ||
      getsockname(fd, (struct sockaddr *)sa, &len) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int sc_comm_listen(struct sockaddr_in *sa, int backlog, bool *all) {
  const char *e = getenv("SHARDC_BIND_ALL");
  bool want_all = e && strcmp(e, "1") == 0;
  struct sockaddr_in a = *sa;
  if (want_all) a.sin_addr.s_addr = htonl(INADDR_ANY);
  int fd = try_listen(&a, backlog);
  if (fd < 0 && !want_all && errno == EADDRNOTAVAIL) { /* not this machine's address */
    a = *sa;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    fd = try_listen(&a, backlog);
    want_all = true;
  }
  if (fd >= 0) *sa = a;
  if (all) *all = want_all;
  return fd;
}

static bool set_blocking(int fd, bool blocking) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return false;
  return fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK) == 0;
}

int sc_comm_connect_retry(const struct sockaddr_in *sa, double deadline, int *err) {
  *err = 0;
  while (sc_comm_now_s() < deadline) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      *err = errno;
      return -1;
    }
    int e = 0;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
      e = errno;
      if (e == EINPROGRESS) { /* bounded: an unreachable host does not hang us */
        e = ETIMEDOUT;
        for (;;) {
          double left = deadline - sc_comm_now_s();
          if (left <= 0) break;
          struct pollfd p = {.fd = fd, .events = POLLOUT};
          int r = poll(&p, 1, (int)(left * 1000) + 1);
          if (r < 0 && errno == EINTR) continue;
          if (r > 0) {
            socklen_t len = sizeof e;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0) e = errno;
          }
          break;
        }
      }
    }
    if (e == 0 && set_blocking(fd, true)) return fd;
    *err = e ? e : errno;
    close(fd);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL); /* the peer may not listen yet */
  }
  if (!*err) *err = ETIMEDOUT;
  return -1;
}

/* ---- shared checks ---- */

/* Strings from the wire: terminated, printable. */
static void clean(char *s, size_t n) {
  s[n - 1] = 0;
  for (char *p = s; *p; p++)
    if ((unsigned char)*p < 32 || (unsigned char)*p > 126) *p = '?';
}

static const char *shown(const char *s) { return *s ? s : "(none)"; }

/* Why a rank `cr` (the connecting one) with (csize, cflags, cjob, cprog)
 * and a rank `ar` (the accepting one) with ours cannot be one job; false
 * when they agree. */
static bool differs(int cr, int32_t csize, uint32_t cflags, const char *cjob,
                    const char *cprog, int ar, int32_t asize, uint32_t aflags, const char *ajob,
                    const char *aprog, char *why, size_t n) {
  if (csize != asize)
    snprintf(why, n, "world size differs: rank %d has WORLD_SIZE=%d but rank %d has %d", cr,
             (int)csize, ar, (int)asize);
  else if ((cflags & HS_TOKEN) != (aflags & HS_TOKEN))
    snprintf(why, n, "rank %d %s SHARDC_JOB_TOKEN but rank %d %s", cr,
             cflags & HS_TOKEN ? "has" : "has no", ar, aflags & HS_TOKEN ? "has" : "has none");
  else if (strcmp(cjob, ajob) != 0)
    snprintf(why, n, "job id differs: rank %d has '%s' but rank %d has '%s' (another job on "
             "this port?)", cr, shown(cjob), ar, shown(ajob));
  else if (strcmp(cprog, aprog) != 0)
    snprintf(why, n, "program differs: rank %d runs program %.16s%s but rank %d runs %.16s%s",
             cr, shown(cprog), strlen(cprog) > 16 ? "..." : "", ar, shown(aprog),
             strlen(aprog) > 16 ? "..." : "");
  else
    return false;
  return true;
}

/* ---- the accepting side ---- */

typedef struct hs_conn {
  int fd;
  double deadline;
  int phase; /* 0: reading the hello, 1: reading the confirmation */
  size_t got;
  hs_hello hello;
  hs_reply reply;
  hs_msg confirm;
  char from_text[48];
  struct sockaddr_in from;
} hs_conn;

struct sc_comm_hs_server {
  int ls;
  const sc_comm_ident *id;
  uint32_t magic;
  int rank, size;
  char where[160];
  hs_conn *conn;   /* [cap] pending connections */
  int n, cap;      /* room for every rank at once, and HS_MIN_PENDING strangers */
  struct pollfd *p; /* [cap + 1] */
  int n_warned;
  char refusal[HS_REASON + 96];
};

sc_comm_hs_server *sc_comm_hs_server_create(int ls, const sc_comm_ident *id, uint32_t magic,
                                            int rank, int size, const char *where) {
  sc_comm_hs_server *s = sc_calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cap = size + HS_MIN_PENDING;
  s->conn = sc_calloc((size_t)s->cap, sizeof *s->conn);
  s->p = sc_calloc((size_t)s->cap + 1, sizeof *s->p);
  if (!s->conn || !s->p) {
    sc_comm_hs_server_destroy(s);
    return NULL;
  }
  s->ls = ls;
  s->id = id;
  s->magic = magic;
  s->rank = rank;
  s->size = size;
  snprintf(s->where, sizeof s->where, "%s", where);
  return s;
}

const char *sc_comm_hs_refusal(const sc_comm_hs_server *s) { return s->refusal; }

static void drop(sc_comm_hs_server *s, int i) {
  close(s->conn[i].fd);
  s->conn[i] = s->conn[--s->n];
}

/* Remembers and warns about a refusal of connection i, then drops it. */
static void refuse(sc_comm_hs_server *s, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(sc_comm_hs_server *s, int i, const char *fmt, ...) {
  char why[HS_REASON];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(s->refusal, sizeof s->refusal, "connection from %s: %s", s->conn[i].from_text, why);
  if (s->n_warned < HS_MAX_WARNINGS)
    fprintf(stderr, "shardc: warning: %s refused a connection from %s: %s\n", s->where,
            s->conn[i].from_text, why);
  else if (s->n_warned == HS_MAX_WARNINGS)
    fprintf(stderr, "shardc: warning: %s: further refused connections are not shown\n",
            s->where);
  s->n_warned++;
  fflush(stderr);
  drop(s, i);
}

/* Sends an answer on a pending connection (a few hundred bytes into a
 * fresh socket's buffer: it does not wait on the peer). */
static bool answer(hs_conn *c, const void *buf, size_t n) {
  return sc_comm_io_all(c->fd, (void *)buf, n, true, c->deadline);
}

static void refuse_with(sc_comm_hs_server *s, int i, bool verdict, const char *why) {
  hs_conn *c = &s->conn[i];
  if (verdict) {
    hs_msg v = {.magic = s->magic, .status = 1};
    snprintf(v.reason, sizeof v.reason, "%s", why);
    answer(c, &v, sizeof v);
  } else {
    c->reply.status = 1;
    snprintf(c->reply.reason, sizeof c->reply.reason, "%s", why);
    answer(c, &c->reply, sizeof c->reply);
  }
  refuse(s, i, "%s", why);
}

/* The hello of connection i is in: refuse it, or answer and wait for the
 * confirmation. */
static void on_hello(sc_comm_hs_server *s, int i, int lo, const bool *taken) {
  hs_conn *c = &s->conn[i];
  hs_hello *h = &c->hello;
  const sc_comm_ident *id = s->id;
  if (h->magic != s->magic) {
    refuse(s, i, "not a shardc hello (bad magic 0x%08x)", (unsigned)h->magic);
    return;
  }
  clean(h->job, sizeof h->job);
  clean(h->program, sizeof h->program);
  hs_reply *r = &c->reply;
  *r = (hs_reply){.magic = s->magic, .version = HS_VERSION, .rank = s->rank, .size = s->size,
                  .flags = id->token ? HS_TOKEN : 0};
  memcpy(r->job, id->job, sizeof r->job);
  memcpy(r->program, id->program, sizeof r->program);
  char why[HS_REASON];
  if (differs(h->rank, h->size, h->flags, h->job, h->program, s->rank, s->size, r->flags,
              id->job, id->program, why, sizeof why)) {
  } else if (h->rank < lo || h->rank >= s->size || h->rank == s->rank) {
    if (lo == s->size - 1)
      snprintf(why, sizeof why, "the hello says rank %d, but rank %d expects only rank %d",
               (int)h->rank, s->rank, lo);
    else
      snprintf(why, sizeof why, "the hello says rank %d, but rank %d expects ranks %d..%d",
               (int)h->rank, s->rank, lo, s->size - 1);
  } else if (taken[h->rank]) {
    snprintf(why, sizeof why, "rank %d has joined already: a second process claims it",
             (int)h->rank);
  } else if (!nonce(r->nonce)) {
    snprintf(why, sizeof why, "rank %d has no random numbers for the challenge", s->rank);
  } else {
    if (id->token) hs_mac(id, LABEL_ACCEPT, h, r, r->mac);
    if (!answer(c, r, sizeof *r)) {
      refuse(s, i, "rank %d: the connection closed before the answer", (int)h->rank);
      return;
    }
    c->phase = 1;
    c->got = 0;
    return;
  }
  refuse_with(s, i, false, why);
}

/* The confirmation of connection i is in: returns whether it is admitted
 * (the verdict sent), else it is refused and dropped. */
static bool on_confirm(sc_comm_hs_server *s, int i, const bool *taken) {
  hs_conn *c = &s->conn[i];
  int peer = c->hello.rank;
  if (c->confirm.magic != s->magic) {
    refuse(s, i, "rank %d: not a shardc confirmation", peer);
    return false;
  }
  if (c->confirm.status != 0) {
    clean(c->confirm.reason, sizeof c->confirm.reason);
    refuse(s, i, "rank %d refused rank %d: %s", peer, s->rank, c->confirm.reason);
    return false;
  }
  char why[HS_REASON];
  uint8_t want[32];
  if (s->id->token) hs_mac(s->id, LABEL_CONNECT, &c->hello, &c->reply, want);
  if (s->id->token && !same_mac(want, c->confirm.mac)) {
    snprintf(why, sizeof why, "authentication failed: rank %d does not prove that it holds "
             "rank %d's SHARDC_JOB_TOKEN (the tokens differ)", peer, s->rank);
  } else if (taken[peer]) {
    snprintf(why, sizeof why, "rank %d has joined already: a second process claims it", peer);
  } else {
    hs_msg v = {.magic = s->magic, .status = 0};
    if (!answer(c, &v, sizeof v)) {
      refuse(s, i, "rank %d: the connection closed before the verdict", peer);
      return false;
    }
    return true;
  }
  refuse_with(s, i, true, why);
  return false;
}

/* Reads what connection i has; returns whether it is admitted. */
static bool on_readable(sc_comm_hs_server *s, int i, int lo, const bool *taken) {
  hs_conn *c = &s->conn[i];
  char *buf = c->phase == 0 ? (char *)&c->hello : (char *)&c->confirm;
  size_t want = c->phase == 0 ? sizeof c->hello : sizeof c->confirm;
  ssize_t k = recv(c->fd, buf + c->got, want - c->got, 0);
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (k <= 0) {
    if (c->phase == 0 && c->got >= 4 && c->hello.magic != s->magic)
      refuse(s, i, "not a shardc hello (bad magic 0x%08x)", (unsigned)c->hello.magic);
    else
      refuse(s, i, "closed during the handshake (%zu of %zu bytes of its %s)", c->got, want,
             c->phase == 0 ? "hello" : "confirmation");
    return false;
  }
  c->got += (size_t)k;
  if (c->phase == 0 && c->got >= 4 && c->hello.magic != s->magic) { /* garbage: no wait */
    refuse(s, i, "not a shardc hello (bad magic 0x%08x)", (unsigned)c->hello.magic);
    return false;
  }
  if (c->phase == 0 && c->got >= offsetof(hs_hello, size) && c->hello.version != HS_VERSION) {
    /* another build's hello (version 1's is 16 bytes, then it waits) */
    refuse(s, i, "protocol version %u, but rank %d speaks %u (another shardc build?)",
           (unsigned)c->hello.version, s->rank, (unsigned)HS_VERSION);
    return false;
  }
  if (c->got < want) return false;
  if (c->phase == 0) {
    on_hello(s, i, lo, taken);
    return false;
  }
  return on_confirm(s, i, taken);
}

int sc_comm_hs_accept(sc_comm_hs_server *s, int lo, const bool *taken, double deadline,
                      int *peer, int32_t *arg, struct sockaddr_in *from) {
  struct pollfd *p = s->p;
  for (;;) {
    double now = sc_comm_now_s();
    for (int i = s->n - 1; i >= 0; i--)
      if (s->conn[i].deadline <= now)
        refuse(s, i, "no complete %s within %.1f s (SHARDC_COMM_HANDSHAKE_TIMEOUT)",
               s->conn[i].phase == 0 ? "hello" : "confirmation", s->id->handshake_s);
    if (now >= deadline) return -1;
    double until = deadline;
    for (int i = 0; i < s->n; i++)
      if (s->conn[i].deadline < until) until = s->conn[i].deadline;
    p[0] = (struct pollfd){.fd = s->ls, .events = POLLIN};
    for (int i = 0; i < s->n; i++) p[i + 1] = (struct pollfd){.fd = s->conn[i].fd, .events = POLLIN};
    int n = s->n;
    int r = poll(p, (nfds_t)n + 1, (int)((until - now) * 1000) + 1);
    if (r < 0 && errno != EINTR) return -1;
    if (r <= 0) continue;
    /* the pending ones first (their indices move as they go), newest last */
    for (int i = n - 1; i >= 0; i--) {
      if (!(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (!on_readable(s, i, lo, taken)) continue;
      hs_conn c = s->conn[i];
      s->conn[i] = s->conn[--s->n];
      set_blocking(c.fd, true);
      *peer = c.hello.rank;
      *arg = c.hello.arg;
      *from = c.from;
      return c.fd;
    }
    if (p[0].revents & POLLIN) {
      struct sockaddr_in a;
      socklen_t len = sizeof a;
      int fd = accept4(s->ls, (struct sockaddr *)&a, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;
      if (s->n == s->cap) { /* a flood: the oldest goes */
        int oldest = 0;
        for (int i = 1; i < s->n; i++)
          if (s->conn[i].deadline < s->conn[oldest].deadline) oldest = i;
        refuse(s, oldest, "too many connections at once (%d pending)", s->cap);
      }
      hs_conn *c = &s->conn[s->n++];
      memset(c, 0, sizeof *c);
      c->fd = fd;
      c->from = a;
      double d = sc_comm_now_s() + s->id->handshake_s;
      c->deadline = d < deadline ? d : deadline;
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
      snprintf(c->from_text, sizeof c->from_text, "%s:%d", ip, ntohs(a.sin_port));
    }
  }
}

void sc_comm_hs_server_destroy(sc_comm_hs_server *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) close(s->conn[i].fd);
  sc_free(s->conn);
  sc_free(s->p);
  sc_free(s);
}

/* ---- the connecting side ---- */

sc_status sc_comm_hs_connect(int fd, const sc_comm_ident *id, uint32_t magic, int rank,
                             int size, int peer, int32_t arg, const char *where,
                             double deadline, sc_diag *diag) {
  hs_hello h = {.magic = magic, .rank = rank, .arg = arg, .version = HS_VERSION,
                .size = size, .flags = id->token ? HS_TOKEN : 0};
  memcpy(h.job, id->job, sizeof h.job);
  memcpy(h.program, id->program, sizeof h.program);
  if (!nonce(h.nonce))
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: rank %d: no random numbers for the challenge", rank);
  hs_reply r;
  errno = 0;
  if (!sc_comm_io_all(fd, &h, sizeof h, true, deadline) ||
      !sc_comm_io_all(fd, &r, sizeof r, false, deadline))
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: rank %d: %s did not answer the handshake (%s)", rank,
                       where, errno == 0 || errno == EAGAIN ? "timed out or closed" : strerror(errno));
  if (r.magic != magic || r.version != HS_VERSION)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: rank %d: %s does not answer as a shardc rank of this "
                       "protocol (version %u here)", rank, where, (unsigned)HS_VERSION);
  clean(r.job, sizeof r.job);
  clean(r.program, sizeof r.program);
  clean(r.reason, sizeof r.reason);
  if (r.status != 0)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: %s refused it: %s",
                       rank, where, r.reason);
  hs_msg c = {.magic = magic, .status = 1};
  if (r.rank != peer)
    snprintf(c.reason, sizeof c.reason, "rank %d expected rank %d there, but rank %d answered",
             rank, peer, (int)r.rank);
  else if (differs(rank, size, h.flags, id->job, id->program, peer, r.size, r.flags, r.job,
                   r.program, c.reason, sizeof c.reason)) {
  } else if (id->token) {
    uint8_t want[32];
    hs_mac(id, LABEL_ACCEPT, &h, &r, want);
    if (!same_mac(want, r.mac))
      snprintf(c.reason, sizeof c.reason, "authentication failed: rank %d does not prove that "
               "it holds rank %d's SHARDC_JOB_TOKEN (the tokens differ)", peer, rank);
  }
  if (!c.reason[0]) {
    c.status = 0;
    if (id->token) hs_mac(id, LABEL_CONNECT, &h, &r, c.mac);
  }
  bool sent = sc_comm_io_all(fd, &c, sizeof c, true, deadline);
  if (c.status != 0)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: refused %s: %s",
                       rank, where, c.reason);
  hs_msg v;
  if (!sent || !sc_comm_io_all(fd, &v, sizeof v, false, deadline) || v.magic != magic)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "tcp bootstrap: rank %d: %s gave no verdict on the handshake (timed out "
                       "or closed)", rank, where);
  clean(v.reason, sizeof v.reason);
  if (v.status != 0)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "tcp bootstrap: rank %d: %s refused it: %s",
                       rank, where, v.reason);
  return SC_OK;
}
