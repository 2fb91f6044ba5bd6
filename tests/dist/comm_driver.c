/* comm_driver.c — a program run under mpirun by tests/dist/test_comm_mpi.sh
 * to exercise the `mpi` communicator (runtime/comm_mpi.c) in real processes,
 * and with SHARDC_TEST_COMM=tcp (started once per rank with RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT) by tests/dist/test_tcp.sh for the
 * `tcp` one (runtime/comm_tcp.c).
 *
 *   comm_driver collectives   every collective in f32, f64, i64, f16 with
 *                             sum, max and min, send/recv ring (and as
 *                             send_recv both ways), split of a 2×2 mesh
 *                             (size 4); each rank checks its
 *                             results against values it computes itself
 *                             from the other ranks' inputs (a hash of rank
 *                             and index, so every process can regenerate
 *                             them); prints "rank R: ok"
 *   comm_driver abort         rank 2 calls sc_comm_abort("bad input") while
 *                             the others wait in a barrier
 *   comm_driver kill          rank 1 SIGKILLs itself while the others wait
 *                             in collectives
 *
 * Tolerances as in tests/unit/test_comm.c: floating results within
 * 1e-6 × sum|x| (MPI's reduction order is its own), plus 1e-3 × |want| for
 * f16 (one rounding). A failed check aborts the job through sc_comm_abort,
 * so the script sees a non-zero exit and the message. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"

static sc_comm *world;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  char m[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  sc_comm_abort(world, m); /* does not return under MPI */
  exit(1);
}

/* Input element i of rank r: a hash mapped to [-4, 4], |v| >= 0.05. */
static double input(int r, int64_t i, unsigned salt) {
  uint64_t h = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xC2B2AE3D27D4EB4Full ^ salt;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  double u = (double)(h >> 11) / 9007199254740992.0;
  double v = -4.0 + 8.0 * u;
  return fabs(v) < 0.05 ? 0.5 : v;
}

static void fill(sc_dtype t, int r, void *buf, int64_t n, unsigned salt) {
  for (int64_t i = 0; i < n; i++) {
    double v = input(r, i, salt);
    if (t == SC_DTYPE_I64) sc_store_i64(t, buf, i, (int64_t)(v * 1e6) + 1);
    else sc_store_f64(t, buf, i, v);
  }
}

static double red(sc_reduce_op op, double a, double x) {
  return op == SC_REDUCE_SUM ? a + x : op == SC_REDUCE_MAX ? (x > a ? x : a) : (x < a ? x : a);
}

/* Checks element got_i of got against the reduction of element src_i of
 * every rank's input. */
static void check(const char *what, sc_dtype t, sc_reduce_op op, int size, void **in,
                  const void *got, int64_t got_i, int64_t src_i) {
  if (t == SC_DTYPE_I64) {
    int64_t want = sc_load_i64(t, in[0], src_i);
    for (int q = 1; q < size; q++) {
      int64_t x = sc_load_i64(t, in[q], src_i);
      want = op == SC_REDUCE_SUM ? want + x : op == SC_REDUCE_MAX ? (x > want ? x : want)
                                                                   : (x < want ? x : want);
    }
    int64_t g = sc_load_i64(t, got, got_i);
    if (g != want)
      die("%s i64 %s [%lld]: got %lld want %lld", what, sc_reduce_op_name(op),
          (long long)got_i, (long long)g, (long long)want);
    return;
  }
  double want = sc_load_f64(t, in[0], src_i), scale = fabs(want);
  for (int q = 1; q < size; q++) {
    double x = sc_load_f64(t, in[q], src_i);
    want = red(op, want, x);
    scale += fabs(x);
  }
  double g = sc_load_f64(t, got, got_i);
  double tol = 1e-6 * scale + (t == SC_DTYPE_F16 ? 1e-3 * fabs(want) : 0);
  if (!(fabs(g - want) <= tol))
    die("%s %s %s [%lld]: got %.9g want %.9g", what, sc_dtype_name(t), sc_reduce_op_name(op),
        (long long)got_i, g, want);
}

static void ok(sc_status st, const sc_diag *d, const char *what) {
  if (st) die("%s: %s", what, d->msg);
}

static void collectives(sc_comm *c, sc_dtype t, sc_reduce_op op, int64_t cnt) {
  int r = sc_comm_rank(c), n = sc_comm_size(c);
  size_t sz = sc_dtype_size(t);
  unsigned salt = 31u * (unsigned)t + (unsigned)op;
  void *in[64];
  for (int q = 0; q < n; q++) {
    in[q] = calloc((size_t)(n * cnt + 1), sz);
    fill(t, q, in[q], n * cnt, salt);
  }
  char *out = calloc((size_t)(n * cnt + 1), sz), *buf = calloc((size_t)(n * cnt + 1), sz);
  sc_diag d = {0};
  sc_diag_clear(&d);
  ok(sc_comm_all_reduce(c, in[r], out, cnt, t, op, &d), &d, "all_reduce");
  for (int64_t i = 0; i < cnt; i++) check("all_reduce", t, op, n, in, out, i, i);
  memcpy(buf, in[r], (size_t)cnt * sz);
  ok(sc_comm_all_reduce(c, buf, buf, cnt, t, op, &d), &d, "all_reduce in place");
  for (int64_t i = 0; i < cnt; i++) check("all_reduce in place", t, op, n, in, buf, i, i);
  ok(sc_comm_reduce_scatter(c, in[r], out, cnt, t, op, &d), &d, "reduce_scatter");
  for (int64_t i = 0; i < cnt; i++) check("reduce_scatter", t, op, n, in, out, i, r * cnt + i);
  ok(sc_comm_all_gather(c, in[r], out, cnt, t, &d), &d, "all_gather");
  for (int q = 0; q < n; q++)
    if (memcmp(out + (size_t)(q * cnt) * sz, in[q], (size_t)cnt * sz))
      die("all_gather: chunk %d is not rank %d's input", q, q);
  ok(sc_comm_all_to_all(c, in[r], out, cnt, t, &d), &d, "all_to_all");
  for (int q = 0; q < n; q++)
    if (memcmp(out + (size_t)(q * cnt) * sz, (char *)in[q] + (size_t)(r * cnt) * sz,
               (size_t)cnt * sz))
      die("all_to_all: chunk %d wrong", q);
  if (n > 1) { /* ring: even ranks send first, odd ranks receive first (no cycle) */
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int phase = 0; phase < 2; phase++) {
      if ((phase == 0) == (r % 2 == 0))
        ok(sc_comm_send(c, in[r], cnt, t, next, 5, &d), &d, "send");
      else
        ok(sc_comm_recv(c, out, cnt, t, prev, 5, &d), &d, "recv");
    }
    if (memcmp(out, in[prev], (size_t)cnt * sz)) die("ring: wrong data from rank %d", prev);
    /* the same ring as one send_recv per rank, then the other direction */
    ok(sc_comm_send_recv(c, in[r], next, out, prev, cnt, t, 6, &d), &d, "send_recv");
    if (memcmp(out, in[prev], (size_t)cnt * sz)) die("send_recv: wrong data from rank %d", prev);
    ok(sc_comm_send_recv(c, in[r], prev, out, next, cnt, t, 6, &d), &d, "send_recv back");
    if (memcmp(out, in[next], (size_t)cnt * sz))
      die("send_recv back: wrong data from rank %d", next);
  }
  ok(sc_comm_barrier(c, &d), &d, "barrier");
  for (int q = 0; q < n; q++) free(in[q]);
  free(out);
  free(buf);
}

static void split_mesh(sc_comm *c) {
  int r = sc_comm_rank(c), row = r / 2, col = r % 2;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_comm *rows = NULL, *cols = NULL;
  ok(sc_comm_split(c, row, col, &rows, &d), &d, "split rows");
  ok(sc_comm_split(c, col, -row, &cols, &d), &d, "split cols");
  if (!rows || sc_comm_size(rows) != 2 || sc_comm_rank(rows) != col) die("row group wrong");
  if (!cols || sc_comm_size(cols) != 2 || sc_comm_rank(cols) != 1 - row) die("col group wrong");
  int64_t v = 1, s = 0, g[2];
  for (int q = 0; q < r; q++) v *= 10;
  ok(sc_comm_all_reduce(rows, &v, &s, 1, SC_DTYPE_I64, SC_REDUCE_SUM, &d), &d, "row sum");
  if (s != (row == 0 ? 11 : 1100)) die("row sum %lld", (long long)s);
  ok(sc_comm_all_gather(cols, &v, g, 1, SC_DTYPE_I64, &d), &d, "col gather");
  if (g[0] != (col == 0 ? 100 : 1000) || g[1] != (col == 0 ? 1 : 10))
    die("col gather %lld,%lld", (long long)g[0], (long long)g[1]);
  sc_comm_destroy(rows);
  sc_comm_destroy(cols);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "collectives";
  sc_diag d = {0};
  sc_diag_clear(&d);
  const char *backend = getenv("SHARDC_TEST_COMM"); /* "tcp": RANK, WORLD_SIZE, ... */
  /* SHARDC_TEST_PROGRAM: the program hash this rank says it runs */
  sc_comm_tcp_opts to = {.program_hash = getenv("SHARDC_TEST_PROGRAM")};
  if (backend && strcmp(backend, "tcp") == 0 ? sc_comm_tcp_create(&to, &world, &d)
                                             : sc_comm_mpi_create(&world, &d)) {
    fprintf(stderr, "comm_driver: %s\n", d.msg);
    return 2;
  }
  int r = sc_comm_rank(world);
  if (strcmp(mode, "collectives") == 0) {
    static const sc_dtype types[] = {SC_DTYPE_F32, SC_DTYPE_F64, SC_DTYPE_I64, SC_DTYPE_F16};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
      for (int op = 0; op < SC_REDUCE_COUNT; op++)
        collectives(world, types[t], (sc_reduce_op)op, 37);
    collectives(world, SC_DTYPE_F32, SC_REDUCE_SUM, 100000);
    if (sc_comm_size(world) == 4) split_mesh(world);
    printf("rank %d: ok\n", r);
  } else if (strcmp(mode, "abort") == 0) {
    if (r == 2) {
      usleep(200 * 1000);
      sc_comm_abort(world, "bad input");
    }
    sc_status st = sc_comm_barrier(world, &d); /* never completes: rank 2 never joins */
    fprintf(stderr, "rank %d: barrier returned %d: %s\n", r, (int)st, d.msg);
    return 3;
  } else if (strcmp(mode, "kill") == 0) {
    float x = 1.0f;
    for (int i = 0; i < 1000000; i++) {
      if (r == 1 && i == 10) raise(SIGKILL);
      if (sc_comm_all_reduce(world, &x, &x, 1, SC_DTYPE_F32, SC_REDUCE_MAX, &d)) {
        fprintf(stderr, "rank %d: %s\n", r, d.msg);
        return 3;
      }
    }
    return 3; /* never reached: rank 1 is gone */
  } else {
    fprintf(stderr, "comm_driver: unknown mode '%s'\n", mode);
  }
  sc_comm_destroy(world);
  return 0;
}
