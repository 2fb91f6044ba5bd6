/* test_comm.c — the communicators (runtime/comm*.c), local backend, plus
 * the TCP bootstrap of the NCCL backend.
 *
 * Ranks are threads of one local group of 1, 2, 3, 4 and 8. Every
 * collective runs on seeded random inputs (never zeros) in f32, f64, i64,
 * f16 and bf16 with sum, max and min, and is compared with what this file
 * computes itself from the inputs: integers and data movement exactly,
 * floating results within |got - want| <= rtol × sum|x_i| with rtol 1e-6
 * for f32/f64 (the local backend adds in rank order; another order may
 * differ by rounding, see docs/comm.md) and 1e-3 × |want| more for the
 * 16-bit types (one rounding to an 11-bit mantissa). NaN fails.
 *
 * Failure paths are timed: an abort on one rank ends the others' pending
 * collectives (also on a different sub-group) with that rank's message
 * within 2 s; a collective that a rank never joins fails after a tiny
 * SHARDC_COMM_TIMEOUT. Who may join a TCP bootstrap: HMAC-SHA-256 against
 * RFC 4231, the job's identity from the environment, the bound address
 * of a listener, the NCCL bootstrap past a silent socket, refusing
 * another token and another program hash. Threads never call cmocka (not thread-safe): each
 * records its first problem in a string that the main thread asserts. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "codegen/memplan.h"
#include "codegen/program.h"
#include "runtime/comm.h"
#include "runtime/runtime.h"

#define MAXR 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- running a function on every rank of a local group ---- */

typedef struct rank_res {
  char err[512];    /* first problem, "" if none */
  sc_status status; /* for failure tests */
  char msg[1024];
  double seconds;
} rank_res;

typedef struct job job;
typedef void (*rank_fn)(job *j, sc_comm *c, rank_res *res);
struct job {
  int size;
  rank_fn fn;
  void *ud;
  sc_comm *comms[MAXR];
  rank_res res[MAXR];
};

typedef struct targ {
  job *j;
  int r;
} targ;

static void *thread_main(void *p) {
  targ *a = p;
  a->j->fn(a->j, a->j->comms[a->r], &a->j->res[a->r]);
  return NULL;
}

static void run_job(job *j) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_local_create_group(j->size, j->comms, &d), SC_OK);
  pthread_t th[MAXR];
  targ a[MAXR];
  for (int r = 0; r < j->size; r++) {
    j->res[r].err[0] = 0;
    a[r] = (targ){j, r};
    assert_int_equal(pthread_create(&th[r], NULL, thread_main, &a[r]), 0);
  }
  for (int r = 0; r < j->size; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < j->size; r++) sc_comm_destroy(j->comms[r]);
}

static void fail_rank(rank_res *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_rank(rank_res *res, const char *fmt, ...) {
  if (res->err[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->err, sizeof res->err, fmt, ap);
  va_end(ap);
}

static void assert_ranks_ok(job *j) {
  for (int r = 0; r < j->size; r++)
    if (j->res[r].err[0]) fail_msg("size %d rank %d: %s", j->size, r, j->res[r].err);
}

/* ---- inputs and independent expectations ---- */

enum { COUNT = 37 }; /* not a multiple of any group size: uneven slices */

typedef struct coll_case {
  sc_dtype t;
  sc_reduce_op op;
  int64_t count;
  void *in[MAXR];   /* per rank: size × count elements */
} coll_case;

static void fill(sc_dtype t, void *buf, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = rnd_nz(-4.0, 4.0);
    if (t == SC_DTYPE_I64) sc_store_i64(t, buf, i, (int64_t)(v * 1e6) + (v > 0 ? 1 : -1));
    else sc_store_f64(t, buf, i, v); /* f16/bf16 round here: expectations use the rounded */
  }
}

/* want and the tolerance bound for reducing element i of chunk `chunk`. */
static double expect(const coll_case *k, int size, int64_t i, double *scale) {
  double acc = 0;
  *scale = 0;
  for (int q = 0; q < size; q++) {
    double x = k->t == SC_DTYPE_I64 ? (double)sc_load_i64(k->t, k->in[q], i)
                                    : sc_load_f64(k->t, k->in[q], i);
    *scale += fabs(x);
    if (q == 0) acc = x;
    else if (k->op == SC_REDUCE_SUM) acc += x;
    else if (k->op == SC_REDUCE_MAX) acc = x > acc ? x : acc;
    else acc = x < acc ? x : acc;
  }
  return acc;
}

static void check_elem(rank_res *res, const char *what, const coll_case *k, int size,
                       const void *got_buf, int64_t got_i, int64_t src_i) {
  double scale;
  if (k->t == SC_DTYPE_I64) {
    int64_t want = 0;
    for (int q = 0; q < size; q++) {
      int64_t x = sc_load_i64(k->t, k->in[q], src_i);
      if (q == 0) want = x;
      else if (k->op == SC_REDUCE_SUM) want += x;
      else if (k->op == SC_REDUCE_MAX) want = x > want ? x : want;
      else want = x < want ? x : want;
    }
    int64_t got = sc_load_i64(k->t, got_buf, got_i);
    if (got != want)
      fail_rank(res, "%s i64 %s [%lld]: got %lld want %lld", what, sc_reduce_op_name(k->op),
                (long long)got_i, (long long)got, (long long)want);
    return;
  }
  double want = expect(k, size, src_i, &scale);
  double got = sc_load_f64(k->t, got_buf, got_i);
  double tol = 1e-6 * scale;
  if (k->t == SC_DTYPE_F16) tol += 1e-3 * fabs(want);
  if (k->t == SC_DTYPE_BF16) tol += 8e-3 * fabs(want);
  if (!(fabs(got - want) <= tol)) /* NaN fails */
    fail_rank(res, "%s %s %s [%lld]: got %.9g want %.9g", what, sc_dtype_name(k->t),
              sc_reduce_op_name(k->op), (long long)got_i, got, want);
}

static void coll_rank(job *j, sc_comm *c, rank_res *res) {
  coll_case *k = j->ud;
  int r = sc_comm_rank(c), n = sc_comm_size(c);
  int64_t cnt = k->count;
  size_t sz = sc_dtype_size(k->t);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (r != c->rank || n != j->size) fail_rank(res, "rank/size %d/%d", r, n);
  char *buf = calloc((size_t)(n * cnt + 1), sz), *out = calloc((size_t)(n * cnt + 1), sz);
  /* all_reduce out of place, then in place on a copy */
  if (sc_comm_all_reduce(c, k->in[r], out, cnt, k->t, k->op, &d))
    fail_rank(res, "all_reduce: %s", d.msg);
  for (int64_t i = 0; i < cnt; i++) check_elem(res, "all_reduce", k, n, out, i, i);
  memcpy(buf, k->in[r], (size_t)cnt * sz);
  if (sc_comm_all_reduce(c, buf, buf, cnt, k->t, k->op, &d))
    fail_rank(res, "all_reduce in place: %s", d.msg);
  if (memcmp(buf, out, (size_t)cnt * sz))
    fail_rank(res, "in-place all_reduce differs from out-of-place");
  /* reduce_scatter: chunk r of everyone's size × count input */
  if (sc_comm_reduce_scatter(c, k->in[r], out, cnt, k->t, k->op, &d))
    fail_rank(res, "reduce_scatter: %s", d.msg);
  for (int64_t i = 0; i < cnt; i++) check_elem(res, "reduce_scatter", k, n, out, i, r * cnt + i);
  /* all_gather: rank q's first count elements at q × count (exact) */
  if (sc_comm_all_gather(c, k->in[r], out, cnt, k->t, &d))
    fail_rank(res, "all_gather: %s", d.msg);
  for (int q = 0; q < n; q++)
    if (memcmp(out + (size_t)(q * cnt) * sz, k->in[q], (size_t)cnt * sz))
      fail_rank(res, "all_gather: chunk %d is not rank %d's input", q, q);
  /* in place: own chunk already at r × count */
  memcpy(buf + (size_t)(r * cnt) * sz, k->in[r], (size_t)cnt * sz);
  if (sc_comm_all_gather(c, buf + (size_t)(r * cnt) * sz, buf, cnt, k->t, &d))
    fail_rank(res, "all_gather in place: %s", d.msg);
  if (memcmp(buf, out, (size_t)(n * cnt) * sz)) fail_rank(res, "in-place all_gather differs");
  /* all_to_all: chunk q of recv = chunk r of rank q's send */
  if (sc_comm_all_to_all(c, k->in[r], out, cnt, k->t, &d))
    fail_rank(res, "all_to_all: %s", d.msg);
  for (int q = 0; q < n; q++)
    if (memcmp(out + (size_t)(q * cnt) * sz, (char *)k->in[q] + (size_t)(r * cnt) * sz,
               (size_t)cnt * sz))
      fail_rank(res, "all_to_all: chunk %d wrong", q);
  /* send/recv ring, two tags sent in one order and received in the other */
  if (n > 1) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (sc_comm_send(c, k->in[r], cnt, k->t, next, 7, &d) ||
        sc_comm_send(c, (char *)k->in[r] + (size_t)cnt * sz, 1, k->t, next, 9, &d))
      fail_rank(res, "send: %s", d.msg);
    if (sc_comm_recv(c, out, 1, k->t, prev, 9, &d) ||
        sc_comm_recv(c, out + sz, cnt, k->t, prev, 7, &d))
      fail_rank(res, "recv: %s", d.msg);
    if (memcmp(out + sz, k->in[prev], (size_t)cnt * sz) ||
        memcmp(out, (char *)k->in[prev] + (size_t)cnt * sz, sz))
      fail_rank(res, "send/recv ring: wrong data from rank %d", prev);
    /* send_recv: every rank sends to r + s and receives from r − s at once
     * (shift 1, and n − 1: the other direction) */
    for (int s = 1; s < n; s += n - 2 > 0 ? n - 2 : 1) {
      int dst = (r + s) % n, src = (r + n - s) % n;
      if (sc_comm_send_recv(c, k->in[r], dst, out, src, cnt, k->t, 11, &d))
        fail_rank(res, "send_recv shift %d: %s", s, d.msg);
      else if (memcmp(out, k->in[src], (size_t)cnt * sz))
        fail_rank(res, "send_recv shift %d: wrong data from rank %d", s, src);
    }
  }
  if (sc_comm_barrier(c, &d)) fail_rank(res, "barrier: %s", d.msg);
  free(buf);
  free(out);
}

static void run_collectives(int size, sc_dtype t, sc_reduce_op op, int64_t count) {
  coll_case k = {.t = t, .op = op, .count = count};
  rng_seed(1000u * (unsigned)size + 10u * (unsigned)t + (unsigned)op);
  for (int r = 0; r < size; r++) {
    k.in[r] = calloc((size_t)(size * count + 1), sc_dtype_size(t));
    fill(t, k.in[r], size * count);
  }
  job j = {.size = size, .fn = coll_rank, .ud = &k};
  run_job(&j);
  for (int r = 0; r < size; r++) free(k.in[r]);
  assert_ranks_ok(&j);
}

static void test_collectives(void **state) {
  (void)state;
  static const int sizes[] = {1, 2, 3, 4, 8};
  static const sc_dtype types[] = {SC_DTYPE_F32, SC_DTYPE_F64, SC_DTYPE_I64, SC_DTYPE_F16,
                                   SC_DTYPE_BF16};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
      for (int op = 0; op < SC_REDUCE_COUNT; op++)
        run_collectives(sizes[s], types[t], (sc_reduce_op)op, COUNT);
  run_collectives(3, SC_DTYPE_F32, SC_REDUCE_SUM, 1);   /* fewer elements than ranks */
  run_collectives(4, SC_DTYPE_F32, SC_REDUCE_SUM, 0);   /* empty */
  run_collectives(2, SC_DTYPE_F32, SC_REDUCE_SUM, 5000); /* larger */
}

/* The reduction helper itself: rank order, wrapping int sums, NaN shows. */
static void test_reduce_arrays(void **state) {
  (void)state;
  int32_t a[2] = {INT32_MAX, 5}, b[2] = {1, -7}, out[2];
  const void *srcs[2] = {a, b};
  sc_comm_reduce_arrays(SC_DTYPE_I32, SC_REDUCE_SUM, srcs, 2, out, 2);
  assert_int_equal(out[0], INT32_MIN);
  assert_int_equal(out[1], -2);
  float x[2] = {NAN, 1.5f}, y[2] = {2.0f, NAN}, z[2];
  const void *fs[2] = {x, y};
  sc_comm_reduce_arrays(SC_DTYPE_F32, SC_REDUCE_MAX, fs, 2, z, 2);
  assert_true(isnan(z[0]) && isnan(z[1]));
  assert_false(sc_comm_can_reduce(SC_DTYPE_STRING));
  assert_false(sc_comm_can_reduce(SC_DTYPE_BOOL));
}

/* ---- split: a 2×2 mesh, rows and columns ---- */

static void split_rank(job *j, sc_comm *c, rank_res *res) {
  int r = sc_comm_rank(c), row = r / 2, col = r % 2;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_comm *rows = NULL, *cols = NULL, *none = NULL;
  /* key reverses the order within columns */
  if (sc_comm_split(c, row, col, &rows, &d) || sc_comm_split(c, col, -row, &cols, &d) ||
      sc_comm_split(c, r == 0 ? 5 : -1, 0, &none, &d)) {
    fail_rank(res, "split: %s", d.msg);
    return;
  }
  if (!rows || !cols) { fail_rank(res, "split gave NULL"); return; }
  if (sc_comm_size(rows) != 2 || sc_comm_rank(rows) != col)
    fail_rank(res, "row group: rank %d size %d", sc_comm_rank(rows), sc_comm_size(rows));
  if (sc_comm_size(cols) != 2 || sc_comm_rank(cols) != 1 - row)
    fail_rank(res, "col group: rank %d size %d", sc_comm_rank(cols), sc_comm_size(cols));
  if ((r == 0) != (none != NULL) || (none && sc_comm_size(none) != 1))
    fail_rank(res, "color -1 / singleton split wrong");
  /* values 10^rank: a sum shows exactly which ranks took part */
  int64_t v = 1, s = 0;
  for (int q = 0; q < r; q++) v *= 10;
  if (sc_comm_all_reduce(rows, &v, &s, 1, SC_DTYPE_I64, SC_REDUCE_SUM, &d))
    fail_rank(res, "row all_reduce: %s", d.msg);
  int64_t want_row = row == 0 ? 11 : 1100;
  if (s != want_row) fail_rank(res, "row sum %lld want %lld", (long long)s, (long long)want_row);
  int64_t g[2] = {0, 0};
  if (sc_comm_all_gather(cols, &v, g, 1, SC_DTYPE_I64, &d))
    fail_rank(res, "col all_gather: %s", d.msg);
  /* column col: ranks col (row 0) and col + 2 (row 1); new order is row 1 first */
  int64_t lo = col == 0 ? 1 : 10, hi = col == 0 ? 100 : 1000;
  if (g[0] != hi || g[1] != lo) fail_rank(res, "col gather %lld,%lld", (long long)g[0],
                                          (long long)g[1]);
  sc_comm_destroy(rows);
  sc_comm_destroy(cols);
  sc_comm_destroy(none);
}

static void test_split_mesh(void **state) {
  (void)state;
  job j = {.size = 4, .fn = split_rank};
  run_job(&j);
  assert_ranks_ok(&j);
}

/* ---- abort: rank 2 fails, everyone else is in a collective ---- */

static void abort_rank(job *j, sc_comm *c, rank_res *res) {
  int r = sc_comm_rank(c);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_comm *pair = NULL;
  if (sc_comm_split(c, r / 2, r, &pair, &d)) { fail_rank(res, "split: %s", d.msg); return; }
  double t0 = now_s();
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = (float)(r + 1) * 0.5f;
  if (r == 2) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sc_comm_abort(c, "bad input");
    res->status = SC_ERR_IO;
    snprintf(res->msg, sizeof res->msg, "rank 2 aborted: bad input");
  } else if (r == 3) {
    /* waits on the pair {2, 3}: a different group than the one aborted */
    res->status = sc_comm_all_reduce(pair, x, x, 16, SC_DTYPE_F32, SC_REDUCE_SUM, &d);
    snprintf(res->msg, sizeof res->msg, "%s", d.msg);
  } else {
    res->status = sc_comm_all_reduce(c, x, x, 16, SC_DTYPE_F32, SC_REDUCE_SUM, &d);
    snprintf(res->msg, sizeof res->msg, "%s", d.msg);
  }
  res->seconds = now_s() - t0;
  /* any later operation fails the same way, at once */
  sc_diag_clear(&d);
  if (sc_comm_barrier(c, &d) != SC_ERR_IO || !strstr(d.msg, "rank 2 aborted: bad input"))
    fail_rank(res, "barrier after abort: %s", d.msg);
  sc_comm_destroy(pair);
}

static void test_abort(void **state) {
  (void)state;
  job j = {.size = 4, .fn = abort_rank};
  double t0 = now_s();
  run_job(&j);
  assert_ranks_ok(&j);
  for (int r = 0; r < 4; r++) {
    assert_int_equal(j.res[r].status, SC_ERR_IO);
    assert_non_null(strstr(j.res[r].msg, "rank 2 aborted: bad input"));
    assert_true(j.res[r].seconds < 2.0);
  }
  assert_true(now_s() - t0 < 2.5);
}

/* ---- timeout: rank 1 never joins ---- */

static void timeout_rank(job *j, sc_comm *c, rank_res *res) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  double t0 = now_s();
  double x = 1.25;
  if (sc_comm_rank(c) == 0) res->status = sc_comm_all_reduce(c, &x, &x, 1, SC_DTYPE_F64,
                                                             SC_REDUCE_SUM, &d);
  else res->status = sc_comm_recv(c, &x, 1, SC_DTYPE_F64, 0, 3, &d); /* never sent */
  snprintf(res->msg, sizeof res->msg, "%s", d.msg);
  res->seconds = now_s() - t0;
}

static void test_timeout(void **state) {
  (void)state;
  setenv("SHARDC_COMM_TIMEOUT", "0.3", 1);
  assert_true(fabs(sc_comm_timeout_s() - 0.3) < 1e-12);
  job j = {.size = 2, .fn = timeout_rank};
  run_job(&j);
  unsetenv("SHARDC_COMM_TIMEOUT");
  assert_true(sc_comm_timeout_s() == SC_COMM_DEFAULT_TIMEOUT_S);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(j.res[r].status, SC_ERR_IO);
    assert_non_null(strstr(j.res[r].msg, "timed out after 0.3 s"));
    assert_true(j.res[r].seconds >= 0.25 && j.res[r].seconds < 2.0);
  }
}

/* ---- argument checks ---- */

static void test_bad_args(void **state) {
  (void)state;
  sc_comm *c[2];
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_local_create_group(0, c, &d), SC_ERR_USAGE);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_local_create_group(2, c, &d), SC_OK);
  float x[4] = {1, 2, 3, 4};
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_send(c[0], x, 1, SC_DTYPE_F32, 0, 0, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "peer 0"));
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_send(c[0], x, 1, SC_DTYPE_F32, 1, 40000, &d), SC_ERR_USAGE);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_all_reduce(c[0], x, x, 1, SC_DTYPE_STRING, SC_REDUCE_SUM, &d),
                   SC_ERR_UNSUPPORTED);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_all_reduce(c[0], x, x, -1, SC_DTYPE_F32, SC_REDUCE_SUM, &d),
                   SC_ERR_USAGE);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_all_to_all(c[0], x, x + 1, 1, SC_DTYPE_F32, &d), SC_ERR_USAGE);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_send_recv(c[0], x, 1, x + 1, 1, 2, SC_DTYPE_F32, 0, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "send_recv: send overlaps recv"));
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_send_recv(c[0], x, 1, x + 2, 0, 1, SC_DTYPE_F32, 0, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "peer 0"));
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_reduce_scatter(c[0], x, x + 1, 1, SC_DTYPE_F32, SC_REDUCE_SUM, &d),
                   SC_ERR_USAGE);
  /* recv of a different size than was sent (buffered send: no thread needed) */
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_send(c[0], x, 3, SC_DTYPE_F32, 1, 1, &d), SC_OK);
  assert_int_equal(sc_comm_recv(c[1], x, 2, SC_DTYPE_F32, 0, 1, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "expected 8 bytes"));
  sc_comm_destroy(c[0]);
  sc_comm_destroy(c[1]);
  assert_non_null(strstr(sc_comm_backends(), "local"));
  /* the NCCL env bootstrap names the missing variable (before any CUDA call) */
  unsetenv("WORLD_SIZE");
  sc_comm_nccl_opts o = {.bootstrap = "env", .device = -1};
  sc_comm *n = NULL;
  sc_diag_clear(&d);
  sc_status st = sc_comm_nccl_create(&o, &n, &d);
  assert_true(st == SC_ERR_USAGE || st == SC_ERR_UNSUPPORTED);
  if (st == SC_ERR_USAGE) assert_non_null(strstr(d.msg, "WORLD_SIZE"));
  assert_null(n);
}

/* ---- the TCP bootstrap (NCCL env), on loopback ---- */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t len = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &len);
  close(fd);
  return ntohs(sa.sin_port);
}

typedef struct boot_arg {
  int port, rank, size;
  const char *program; /* the program hash, NULL for none */
  double timeout_s;    /* 0: 5 s */
  unsigned char id[128];
  sc_status st;
  char msg[1024];
} boot_arg;

static void *boot_thread(void *p) {
  boot_arg *a = p;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (a->rank > 1) usleep(100 * 1000); /* late ranks: rank 0 must wait for them */
  a->st = sc_comm_bootstrap_tcp("127.0.0.1", a->port, a->rank, a->size, a->program, a->id,
                                sizeof a->id, a->timeout_s > 0 ? a->timeout_s : 5.0, &d);
  snprintf(a->msg, sizeof a->msg, "%s", d.msg);
  return NULL;
}

static void test_bootstrap_tcp(void **state) {
  (void)state;
  enum { N = 4 };
  boot_arg a[N];
  pthread_t th[N];
  int port = free_port();
  rng_seed(77);
  unsigned char want[128];
  for (int i = 0; i < 128; i++) want[i] = (unsigned char)(1 + rng_unit() * 254);
  for (int r = N - 1; r >= 0; r--) { /* clients start before the server */
    a[r] = (boot_arg){.port = port, .rank = r, .size = N};
    if (r == 0) memcpy(a[r].id, want, sizeof want);
    assert_int_equal(pthread_create(&th[r], NULL, boot_thread, &a[r]), 0);
    if (r == 1) usleep(300 * 1000); /* rank 1 retries while nobody listens */
  }
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < N; r++) {
    if (a[r].st) fail_msg("rank %d: %s", r, a[r].msg);
    assert_memory_equal(a[r].id, want, sizeof want);
  }
  /* nobody listening: a bounded failure naming the address */
  sc_diag d = {0};
  sc_diag_clear(&d);
  unsigned char id[128];
  double t0 = now_s();
  assert_int_equal(sc_comm_bootstrap_tcp("127.0.0.1", free_port(), 1, 2, NULL, id, sizeof id, 0.5, &d),
                   SC_ERR_IO);
  assert_true(now_s() - t0 < 2.0);
  assert_non_null(strstr(d.msg, "127.0.0.1"));
  /* rank 0 alone: the others never come */
  sc_diag_clear(&d);
  t0 = now_s();
  assert_int_equal(sc_comm_bootstrap_tcp("127.0.0.1", free_port(), 0, 3, NULL, id, sizeof id, 0.4, &d),
                   SC_ERR_IO);
  assert_true(now_s() - t0 < 2.0);
  assert_non_null(strstr(d.msg, "only 1 of 3 ranks"));
  /* the environment as torchrun sets it */
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "3", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  int rank, size, p;
  char addr[64];
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_env_read(&rank, &size, addr, sizeof addr, &p, &d), SC_OK);
  assert_int_equal(rank, 3);
  assert_int_equal(size, 4);
  assert_int_equal(p, 29500);
  assert_string_equal(addr, "127.0.0.1");
  setenv("RANK", "4", 1);
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_env_read(&rank, &size, addr, sizeof addr, &p, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "RANK"));
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
}

/* ---- who may join (runtime/comm_handshake.c) ---- */

static void hex_of(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

/* RFC 4231's test cases 1, 2 and 6 (a key longer than a block). */
static void test_hmac_sha256(void **state) {
  (void)state;
  uint8_t key[131], mac[32];
  char hex[65];
  memset(key, 0x0b, 20);
  sc_hmac_sha256(key, 20, "Hi There", 8, mac);
  hex_of(mac, 32, hex);
  assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  sc_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
  hex_of(mac, 32, hex);
  assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(key, 0xaa, sizeof key);
  const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
  sc_hmac_sha256(key, sizeof key, m, strlen(m), mac);
  hex_of(mac, 32, hex);
  assert_string_equal(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

/* The job's identity: the token wins, else the launcher's run id. */
static void test_comm_ident(void **state) {
  (void)state;
  static const char *vars[] = {"SHARDC_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                               "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
                               "SHARDC_COMM_HANDSHAKE_TIMEOUT"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  sc_comm_ident id;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_comm_ident_init(&id, NULL, 0, &d), SC_OK);
  assert_string_equal(id.job, "");
  assert_false(id.token);
  assert_true(id.handshake_s == 5.0);
  setenv("OMPI_MCA_ess_base_jobid", "123456", 1);
  assert_int_equal(sc_comm_ident_init(&id, "00ff", 2.0, &d), SC_OK);
  assert_string_equal(id.job, "OMPI_MCA_ess_base_jobid=123456");
  assert_string_equal(id.program, "00ff");
  assert_true(id.handshake_s == 2.0); /* at most the whole timeout */
  setenv("SLURM_JOB_ID", "77", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  assert_int_equal(sc_comm_ident_init(&id, NULL, 0, &d), SC_OK);
  assert_string_equal(id.job, "SLURM_JOB_ID=77.3");
  setenv("TORCHELASTIC_RUN_ID", "run-9", 1);
  setenv("SHARDC_COMM_HANDSHAKE_TIMEOUT", "0.5", 1);
  assert_int_equal(sc_comm_ident_init(&id, NULL, 0, &d), SC_OK);
  assert_string_equal(id.job, "TORCHELASTIC_RUN_ID=run-9");
  assert_true(id.handshake_s == 0.5);
  setenv("SHARDC_JOB_TOKEN", "secret", 1);
  assert_int_equal(sc_comm_ident_init(&id, NULL, 0, &d), SC_OK);
  assert_string_equal(id.job, "SHARDC_JOB_TOKEN"); /* never the token itself */
  assert_true(id.token && id.key_bytes == 6 && memcmp(id.key, "secret", 6) == 0);
  setenv("SHARDC_JOB_TOKEN", "", 1);
  assert_int_equal(sc_comm_ident_init(&id, NULL, 0, &d), SC_ERR_USAGE);
  sc_diag_clear(&d);
  unsetenv("SHARDC_JOB_TOKEN");
  assert_int_equal(sc_comm_ident_init(&id, "not hex", 0, &d), SC_ERR_USAGE);
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

/* A listener for 127.0.0.1 is bound to it alone; with SHARDC_BIND_ALL=1
 * to every interface. */
static void test_comm_listen(void **state) {
  (void)state;
  unsetenv("SHARDC_BIND_ALL");
  for (int all = 0; all < 2; all++) {
    if (all) setenv("SHARDC_BIND_ALL", "1", 1);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool every = !all;
    int fd = sc_comm_listen(&sa, 4, &every);
    assert_true(fd >= 0);
    struct sockaddr_in got;
    socklen_t len = sizeof got;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&got, &len), 0);
    assert_int_equal(ntohl(got.sin_addr.s_addr), all ? INADDR_ANY : INADDR_LOOPBACK);
    assert_int_equal(every, all);
    assert_int_equal(got.sin_port, sa.sin_port);
    assert_true(ntohs(got.sin_port) > 0);
    close(fd);
  }
  unsetenv("SHARDC_BIND_ALL");
}

/* The NCCL env bootstrap passes the handshake too: a silent connection
 * does not hold rank 0 up, and a rank with another token is refused. */
static void test_bootstrap_strangers(void **state) {
  (void)state;
  enum { N = 2 };
  boot_arg a[N];
  pthread_t th[N];
  int port = free_port();
  setenv("SHARDC_COMM_HANDSHAKE_TIMEOUT", "1", 1);
  a[0] = (boot_arg){.port = port, .rank = 0, .size = N};
  memset(a[0].id, 7, sizeof a[0].id);
  assert_int_equal(pthread_create(&th[0], NULL, boot_thread, &a[0]), 0);
  usleep(100 * 1000);
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(silent, (struct sockaddr *)&sa, sizeof sa), 0);
  double t0 = now_s();
  a[1] = (boot_arg){.port = port, .rank = 1, .size = N};
  assert_int_equal(pthread_create(&th[1], NULL, boot_thread, &a[1]), 0);
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  close(silent);
  for (int r = 0; r < N; r++)
    if (a[r].st) fail_msg("rank %d: %s", r, a[r].msg);
  assert_true(now_s() - t0 < 1.0); /* not after the silent one's deadline */
  assert_int_equal(a[1].id[0], 7);
  /* another token: refused, both sides saying why (the token is read by
   * each call: rank 1 gets its own before rank 0 starts) */
  setenv("SHARDC_JOB_TOKEN", "the-token-of-rank-1", 1);
  sc_diag d = {0};
  sc_diag_clear(&d);
  port = free_port();
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sa.sin_port = htons((uint16_t)port);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(ls, 4), 0);
  sc_comm_ident other;
  setenv("SHARDC_JOB_TOKEN", "the-token-of-rank-0", 1);
  assert_int_equal(sc_comm_ident_init(&other, NULL, 2.0, &d), SC_OK);
  setenv("SHARDC_JOB_TOKEN", "the-token-of-rank-1", 1);
  a[1] = (boot_arg){.port = port, .rank = 1, .size = N};
  assert_int_equal(pthread_create(&th[1], NULL, boot_thread, &a[1]), 0);
  sc_comm_hs_server *srv = sc_comm_hs_server_create(ls, &other, 0x44494353, 0, N, "rank 0");
  bool taken[N] = {false};
  int peer;
  int32_t arg;
  struct sockaddr_in from;
  assert_int_equal(sc_comm_hs_accept(srv, 1, taken, now_s() + 1.5, &peer, &arg, &from), -1);
  assert_non_null(strstr(sc_comm_hs_refusal(srv), "authentication failed"));
  sc_comm_hs_server_destroy(srv);
  close(ls);
  pthread_join(th[1], NULL);
  assert_int_equal(a[1].st, SC_ERR_IO);
  assert_non_null(strstr(a[1].msg, "authentication failed"));
  unsetenv("SHARDC_JOB_TOKEN");
  unsetenv("SHARDC_COMM_HANDSHAKE_TIMEOUT");
}

/* The NCCL env bootstrap checks the program as the tcp communicator does:
 * ranks with one hash get the id; a rank running another program is
 * refused, both sides naming both hashes, and never gets the id. */
static void test_bootstrap_program(void **state) {
  (void)state;
  enum { N = 2 };
  setenv("SHARDC_COMM_HANDSHAKE_TIMEOUT", "1", 1);
  static const char *progs[2][N] = {{"00ab", "00ab"}, {"00ab", "00cd"}};
  for (int c = 0; c < 2; c++) {
    boot_arg a[N];
    pthread_t th[N];
    int port = free_port();
    for (int r = 0; r < N; r++) {
      a[r] = (boot_arg){.port = port, .rank = r, .size = N, .program = progs[c][r],
                        .timeout_s = 1.5}; /* rank 0 waits it out when rank 1 is refused */
      memset(a[r].id, r == 0 ? 9 : 0, sizeof a[r].id);
    }
    for (int r = 0; r < N; r++)
      assert_int_equal(pthread_create(&th[r], NULL, boot_thread, &a[r]), 0);
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
    if (c == 0) {
      for (int r = 0; r < N; r++)
        if (a[r].st) fail_msg("rank %d: %s", r, a[r].msg);
      assert_int_equal(a[1].id[0], 9);
      continue;
    }
    assert_int_equal(a[1].st, SC_ERR_IO);
    assert_non_null(strstr(a[1].msg, "program differs"));
    assert_non_null(strstr(a[1].msg, "00cd"));
    assert_non_null(strstr(a[1].msg, "00ab"));
    assert_int_equal(a[1].id[0], 0);
    assert_int_equal(a[0].st, SC_ERR_IO);
    assert_non_null(strstr(a[0].msg, "program differs"));
  }
  unsetenv("SHARDC_COMM_HANDSHAKE_TIMEOUT");
}

/* ---- one communication queue per communicator (runtime/session.c) ----
 *
 * A session's program on a 2x2 mesh (axes a, b): an async all-gather over
 * a (128 KiB: never run inline), then a synchronous all-reduce over b,
 * then the gather's wait. The communicators are a local group wrapped so
 * that a rank's all-gather waits (at most GATE_S) until that rank's
 * all-reduce has returned. With one queue per communicator the all-reduce
 * runs at once beside the gather in flight, and no gather waits its full
 * GATE_S; behind a single queue, the all-reduce would wait for the gather. */

#define GATE_S 3.0
typedef struct gate {
  atomic_int reduced[MAXR]; /* per world rank: its all-reduce returned */
  double waited[MAXR];      /* how long its all-gather waited */
} gate;
typedef struct gated {
  sc_comm *inner;
  gate *g;
  int world_rank;
} gated;

static const sc_comm_iface gated_iface;
static gated *GT(sc_comm *c) { return c->ctx; }

static sc_comm *gated_wrap(sc_comm *inner, gate *g, int world_rank) {
  gated *x = calloc(1, sizeof *x);
  *x = (gated){inner, g, world_rank};
  return sc_comm_alloc(&gated_iface, x, sc_comm_rank(inner), sc_comm_size(inner));
}
static sc_status gated_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                  sc_dtype t, sc_reduce_op op, sc_diag *d) {
  sc_status st = sc_comm_all_reduce(GT(c)->inner, send, recv, count, t, op, d);
  atomic_store(&GT(c)->g->reduced[GT(c)->world_rank], 1);
  return st;
}
static sc_status gated_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                                  sc_dtype t, sc_diag *d) {
  double t0 = now_s();
  while (!atomic_load(&GT(c)->g->reduced[GT(c)->world_rank]) && now_s() - t0 < GATE_S)
    usleep(1000);
  GT(c)->g->waited[GT(c)->world_rank] = now_s() - t0;
  return sc_comm_all_gather(GT(c)->inner, send, recv, count, t, d);
}
static sc_status gated_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *d) {
  sc_comm *child = NULL;
  sc_status st = sc_comm_split(GT(c)->inner, color, key, &child, d);
  *out = st == SC_OK && child ? gated_wrap(child, GT(c)->g, GT(c)->world_rank) : NULL;
  return st;
}
static void gated_abort(sc_comm *c, const char *msg) { sc_comm_abort(GT(c)->inner, msg); }
static void gated_destroy(sc_comm *c) {
  sc_comm_destroy(GT(c)->inner);
  free(c->ctx);
  free(c);
}
static const sc_comm_iface gated_iface = {.name = "gated",
                                          .all_reduce = gated_all_reduce,
                                          .all_gather = gated_all_gather,
                                          .split = gated_split,
                                          .abort = gated_abort,
                                          .destroy = gated_destroy};

enum { QN = 32768 }; /* f32 elements per rank: 128 KiB */

static int32_t qbuf(sc_program *p, const char *name, sc_buf_kind kind, int64_t n) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.kind = kind;
  b.dtype = SC_DTYPE_F32;
  b.rank = 1;
  b.dims[0] = n;
  b.bytes = n * 4;
  b.offset = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  if (kind == SC_BUF_INPUT) sc_program_add_input(p, id);
  if (kind == SC_BUF_OUTPUT) sc_program_add_output(p, id);
  return id;
}

static void qcomm(sc_program *p, sc_comm_kind kind, int32_t in, int32_t out, uint32_t axes,
                  bool async) {
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_COMM;
  s.kernel = -1;
  s.origin = kind == SC_COMM_ALL_GATHER ? "gather" : "reduce";
  s.comm = (sc_comm_step){.kind = kind, .in = in, .out = out, .pack = -1, .unpack = -1,
                          .count = QN, .axes = axes, .group_size = 2, .peer = -1,
                          .async = async};
  assert_true(sc_program_add_step(p, &s) >= 0);
}

typedef struct queue_job {
  sc_program *p;
  gate g;
} queue_job;

static void queue_rank(job *j, sc_comm *c, rank_res *res) {
  queue_job *q = j->ud;
  int r = sc_comm_rank(c);
  sc_comm *world = gated_wrap(c, &q->g, r);
  j->comms[r] = NULL; /* the wrapper owns it now */
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.world = world;
  o.threads = 1;
  sc_session *s = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  float *w = malloc(QN * sizeof *w), *x = malloc(QN * sizeof *x);
  for (int k = 0; k < QN; k++) {
    w[k] = (float)(r * QN + k);
    x[k] = (float)(r + 1) * 0.5f + (float)k;
  }
  sc_tensor_view in[2] = {{.name = "w", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {QN}, .data = w},
                          {.name = "x", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {QN}, .data = x}};
  sc_tensor_view out[2];
  if (sc_session_create(q->p, &o, &s, &d) != SC_OK ||
      sc_session_run(s, in, 2, out, 2, &d) != SC_OK) {
    fail_rank(res, "%s", d.msg);
  } else {
    /* axis a is the major one: rank r's a-group is {r % 2, r % 2 + 2}, its
     * b-group {r & ~1, r | 1} */
    const float *gv = out[0].data, *rv = out[1].data;
    int a0 = r % 2, b0 = r & ~1;
    for (int k = 0; k < 2 * QN && !res->err[0]; k++) {
      int src = k < QN ? a0 : a0 + 2;
      if (gv[k] != (float)(src * QN + k % QN)) fail_rank(res, "gather[%d] = %g", k, gv[k]);
    }
    for (int k = 0; k < QN && !res->err[0]; k++) {
      float want = (float)(b0 + 1) * 0.5f + (float)(b0 + 2) * 0.5f + 2.0f * (float)k;
      if (rv[k] != want) fail_rank(res, "all-reduce[%d] = %g, want %g", k, rv[k], want);
    }
  }
  sc_session_destroy(s);
  sc_comm_destroy(world);
  free(w);
  free(x);
}

static void test_queue_per_communicator(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("a=2,b=2", &p->mesh, &d), SC_OK);
  int32_t w = qbuf(p, "w", SC_BUF_INPUT, QN), x = qbuf(p, "x", SC_BUF_INPUT, QN);
  int32_t g = qbuf(p, "g", SC_BUF_OUTPUT, 2 * QN), r = qbuf(p, "r", SC_BUF_OUTPUT, QN);
  qcomm(p, SC_COMM_ALL_GATHER, w, g, 1u << 0, true);
  qcomm(p, SC_COMM_ALL_REDUCE, x, r, 1u << 1, false);
  sc_step wt;
  memset(&wt, 0, sizeof wt);
  wt.kind = SC_STEP_WAIT;
  wt.kernel = -1;
  wt.started = 0;
  assert_true(sc_program_add_step(p, &wt) >= 0);
  if (sc_memplan_run(p, &d) != SC_OK) fail_msg("memplan: %s", d.msg);
  queue_job q = {.p = p};
  job j = {.size = 4, .fn = queue_rank, .ud = &q};
  run_job(&j);
  assert_ranks_ok(&j);
  for (int k = 0; k < 4; k++)
    if (q.g.waited[k] >= GATE_S)
      fail_msg("rank %d: the gather waited %.1f s for the all-reduce: it ran behind it", k,
               q.g.waited[k]);
  sc_program_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_arrays), cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_split_mesh),    cmocka_unit_test(test_abort),
      cmocka_unit_test(test_timeout),       cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_bootstrap_tcp), cmocka_unit_test(test_bootstrap_program), cmocka_unit_test(test_queue_per_communicator),
      cmocka_unit_test(test_hmac_sha256),   cmocka_unit_test(test_comm_ident),
      cmocka_unit_test(test_comm_listen),   cmocka_unit_test(test_bootstrap_strangers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
