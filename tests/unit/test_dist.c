/* test_dist.c — running a partitioned model (runtime/dist.h), and
 * sc_sharding_extract (ir/sharding.h) that cuts every rank's pieces.
 *
 * The partitions are built BY HAND (no partitioner involved): a global
 * graph in textual IR (for its input and output names), stage graphs in
 * textual IR with a `mesh` statement, whose sharded weight is a `param`
 * without data (CONST|PARAM, local shape), and part->sources holding the
 * weight's global data and sharding. Each stage graph is compiled with
 * sc_compile_graph, the distributed program linked with
 * sc_dist_program_link (driver/driver.h) and run with sc_dist_run_local.
 *
 *   extract     a [4,6] tensor under [dp,3*tp] and [_,tp] partial(dp) on a
 *               dp=2,tp=2 mesh: every rank's piece checked against values
 *               worked out by hand
 *   tp          Megatron row split on tp=2: Y = AllReduce(X_r @ W_r) ==
 *               X @ W; weight bytes and arena per rank
 *   pp x tp     pp=2,tp=2 with 2 microbatches: stage 0 the row split then
 *               Relu, Send; stage 1 Recv, Neg: Y == -Relu(X @ W) over the
 *               whole batch, rows of both microbatches in place
 *   failures    SHARDC_FAIL_RANK=1 reports "rank 1: injected failure"
 *               (not the others' "aborted" echo) within seconds; a weight
 *               without data, a wrong input shape and a missing input are
 *               errors naming the tensor.
 * Tolerance: |got - want| <= 1e-5 * sum_k |x_ik w_kj| + 1e-6: float
 * accumulation of K = 8 terms, in another order than the double reference.
 * Inputs are seeded random, never zero. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_util.h"

#include "driver/driver.h"
#include "ir/sharding.h"
#include "runtime/dist.h"

/* ---- sc_sharding_extract ---- */

static void extract_is(const char *text, const sc_mesh *m, const int64_t *coords,
                       const float *want, int64_t n) {
  enum { R = 4, C = 6 };
  float src[R * C], dst[R * C];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) src[i * C + j] = (float)(10 * i + j);
  sc_sharding s;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_sharding_parse(text, strlen(text), m, 2, &s, &d) != SC_OK) fail_msg("%s", d.msg);
  int64_t local[2];
  assert_int_equal(sc_sharding_local_shape(&s, m, 2, (int64_t[]){R, C}, local, "t", &d), SC_OK);
  assert_int_equal(local[0] * local[1], n);
  memset(dst, 0xff, sizeof dst);
  sc_sharding_extract(&s, m, coords, sizeof(float), (int64_t[]){R, C}, src, dst);
  for (int64_t i = 0; i < n; i++)
    if (dst[i] != want[i])
      fail_msg("%s at (%lld,%lld) element %lld: got %g want %g", text, (long long)coords[0],
               (long long)coords[1], (long long)i, (double)dst[i], (double)want[i]);
}

static void test_extract(void **state) {
  (void)state;
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("dp=2,tp=2", &m, &d), SC_OK);
  /* src[i][j] = 10i + j. [dp,3*tp]: rows split in halves over dp; the 6
   * columns are 3 blocks of 2 and tp takes one column of each block. */
  extract_is("[dp,3*tp]", &m, (int64_t[]){0, 0}, (float[]){0, 2, 4, 10, 12, 14}, 6);
  extract_is("[dp,3*tp]", &m, (int64_t[]){0, 1}, (float[]){1, 3, 5, 11, 13, 15}, 6);
  extract_is("[dp,3*tp]", &m, (int64_t[]){1, 0}, (float[]){20, 22, 24, 30, 32, 34}, 6);
  extract_is("[dp,3*tp]", &m, (int64_t[]){1, 1}, (float[]){21, 23, 25, 31, 33, 35}, 6);
  /* contiguous halves of the columns; partial over dp: dp 0 holds the data */
  extract_is("[_,tp] partial(dp)", &m, (int64_t[]){0, 1},
             (float[]){3, 4, 5, 13, 14, 15, 23, 24, 25, 33, 34, 35}, 12);
  extract_is("[_,tp] partial(dp)", &m, (int64_t[]){1, 1},
             (float[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 12);
  /* (tp,dp) on dim 0: tp the outer blocks of 2 rows, dp one row each */
  /* coords are (dp, tp): row tp * 2 + dp */
  extract_is("[(tp,dp),_]", &m, (int64_t[]){1, 0}, (float[]){10, 11, 12, 13, 14, 15}, 6);
  extract_is("[(tp,dp),_]", &m, (int64_t[]){0, 1}, (float[]){20, 21, 22, 23, 24, 25}, 6);
}

/* ---- hand-built partitions ---- */

enum { B = 4, K = 8, N = 6 }; /* X [B,K] @ W [K,N] */

typedef struct hand_part {
  sc_partition part;
  sc_graph *stages[2];
  sc_program *programs[2];     /* borrowed from dp */
  sc_dist_program *dp;
  sc_shard_source src;
  float *w;
} hand_part;

static sc_program *compile_ok(sc_graph *g) {
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  sc_program *p = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_compile_graph(g, &co, &p, &d) != SC_OK) fail_msg("compile: %s", d.msg);
  return p;
}

/* global: the whole model at microbatch size mb; stages[n_stages] the
 * stage graphs; the source of `w` is [K,N] split [tp,_]. */
static void hand_build(hand_part *h, const char *mesh, int32_t microbatches, const char *global,
                       const char *const *stages, int32_t n_stages) {
  memset(h, 0, sizeof *h);
  sc_partition *p = &h->part;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse(mesh, &p->mesh, &d), SC_OK);
  p->pp_axis = sc_mesh_find_axis(&p->mesh, "pp");
  p->dp_axis = sc_mesh_find_axis(&p->mesh, "dp");
  p->tp_axis = sc_mesh_find_axis(&p->mesh, "tp");
  p->n_stages = n_stages;
  p->n_graphs = n_stages;
  p->microbatches = microbatches;
  p->global = parse_ok(global);
  for (int32_t s = 0; s < n_stages; s++) {
    h->stages[s] = parse_ok(stages[s]);
    h->programs[s] = compile_ok(h->stages[s]);
  }
  p->stages = h->stages;
  h->w = malloc(sizeof(float) * K * N);
  for (int i = 0; i < K * N; i++) h->w[i] = rng_val();
  h->src = (sc_shard_source){.name = "w", .dtype = SC_DTYPE_F32, .rank = 2,
                             .dims = {K, N}, .data = h->w};
  assert_int_equal(sc_sharding_parse("[tp,_]", 6, &p->mesh, 2, &h->src.sharding, &d), SC_OK);
  p->sources = &h->src;
  p->n_sources = 1;
  sc_program **progs = sc_calloc((size_t)n_stages, sizeof *progs);
  assert_non_null(progs);
  for (int32_t s = 0; s < n_stages; s++) progs[s] = h->programs[s];
  if (sc_dist_program_link(p, progs, &h->dp, &d) != SC_OK) fail_msg("link: %s", d.msg);
}

static void hand_free(hand_part *h) {
  sc_dist_program_destroy(h->dp);
  for (int s = 0; s < 2; s++) sc_graph_destroy(h->stages[s]);
  sc_graph_destroy(h->part.global);
  free(h->w);
}

static sc_tensor_view xview(float *x, int64_t rows) {
  sc_tensor_view v = {.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {rows, K}, .data = x};
  return v;
}

/* y[i][j] (want) against sign * f(sum_k x w), f = relu when relu. */
static void check_y(const sc_dist_output *y, const float *x, const float *w, int64_t rows,
                    double sign, bool relu) {
  assert_int_equal(y->dtype, SC_DTYPE_F32);
  assert_int_equal(y->rank, 2);
  assert_int_equal(y->dims[0], rows);
  assert_int_equal(y->dims[1], N);
  const float *got = y->data;
  for (int64_t i = 0; i < rows; i++)
    for (int j = 0; j < N; j++) {
      double s = 0, a = 0;
      for (int k = 0; k < K; k++) {
        s += (double)x[i * K + k] * w[k * N + j];
        a += fabs((double)x[i * K + k] * w[k * N + j]);
      }
      double want = sign * (relu && s < 0 ? 0 : s);
      double g = got[i * N + j];
      if (isnan(g) || !(fabs(g - want) <= 1e-5 * a + 1e-6))
        fail_msg("y[%lld][%d]: got %.9g want %.9g", (long long)i, j, g, want);
    }
}

static const char *TP_GLOBAL =
    "shardc.ir 1 graph \"g\" opset 18 {\n input %x : f32[4,8]\n param %w : f32[8,6]\n"
    " %y = MatMul(%x, %w) \"mm\"\n output %y\n}\n";
static const char *TP_STAGE =
    "shardc.ir 1 graph \"s0\" opset 18 {\n mesh [tp=2]\n"
    " input %x : f32[4,4] shard<[_,tp]>\n param %w : f32[4,6] shard<[tp,_]>\n"
    " %p = MatMul(%x, %w) \"mm\"\n %y = AllReduce(%p) {axes = [\"tp\"]} \"ar\"\n"
    " output %y\n}\n";

static sc_status run_tp(hand_part *h, const float *x_data, int64_t x_rows, sc_dist_output *y,
                        sc_dist_rank_stats *stats, sc_diag *d) {
  sc_tensor_view x = xview((float *)x_data, x_rows);
  sc_dist_opts o;
  sc_dist_opts_init(&o);
  o.threads = 1;
  sc_diag_clear(d);
  return sc_dist_run_local(h->dp, &o, &x, 1, y, 1, stats, d);
}

static void test_tp(void **state) {
  (void)state;
  rng_seed(11);
  hand_part h;
  hand_build(&h, "tp=2", 1, TP_GLOBAL, &TP_STAGE, 1);
  float x[B * K];
  for (int i = 0; i < B * K; i++) x[i] = rng_val();
  sc_dist_output y;
  sc_dist_rank_stats stats[2];
  sc_diag d = {0};
  sc_status st = run_tp(&h, x, B, &y, stats, &d);
  if (st != SC_OK) fail_msg("run: %s", d.msg);
  assert_string_equal(y.name, "y");
  check_y(&y, x, h.w, B, 1.0, false);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(stats[r].stage, 0);
    assert_int_equal(stats[r].weight_bytes, 4 * N * 4); /* W's [4,6] f32 shard */
    assert_int_equal(stats[r].arena_bytes, h.programs[0]->arena_bytes);
    assert_true(stats[r].arena_bytes >= (B * 4 + B * N) * 4); /* x shard and y at least */
  }
  sc_free(y.data);
  hand_free(&h);
}

static void test_pp_tp(void **state) {
  (void)state;
  rng_seed(12);
  const char *global =
      "shardc.ir 1 graph \"g\" opset 18 {\n input %x : f32[2,8]\n param %w : f32[8,6]\n"
      " %h = MatMul(%x, %w) \"mm\"\n %z = Relu(%h) \"relu\"\n %y = Neg(%z) \"neg\"\n"
      " output %y\n}\n";
  const char *stages[2] = {
      "shardc.ir 1 graph \"s0\" opset 18 {\n mesh [pp=2, tp=2]\n"
      " input %x : f32[2,4] shard<[_,tp]>\n param %w : f32[4,6] shard<[tp,_]>\n"
      " %p = MatMul(%x, %w) \"mm\"\n %h = AllReduce(%p) {axes = [\"tp\"]} \"ar\"\n"
      " %z = Relu(%h) \"relu\"\n"
      " %tok = Send(%z) {axes = [\"pp\"], peer_stage = 1, tag = 3} \"send\"\n}\n",
      "shardc.ir 1 graph \"s1\" opset 18 {\n mesh [pp=2, tp=2]\n"
      " %z = Recv() {axes = [\"pp\"], peer_stage = 0, tag = 3, shape = [2, 6]} \"recv\"\n"
      " %y = Neg(%z) \"neg\"\n output %y\n}\n"};
  hand_part h;
  hand_build(&h, "pp=2,tp=2", 2, global, stages, 2);
  float x[B * K];
  for (int i = 0; i < B * K; i++) x[i] = rng_val();
  sc_tensor_view xv = xview(x, B);
  sc_dist_output y;
  sc_dist_rank_stats stats[4];
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_dist_run_local(h.dp, NULL, &xv, 1, &y, 1, stats, &d);
  if (st != SC_OK) fail_msg("run: %s", d.msg);
  check_y(&y, x, h.w, B, -1.0, true);
  for (int r = 0; r < 4; r++) {
    assert_int_equal(stats[r].stage, r / 2);
    assert_int_equal(stats[r].weight_bytes, r < 2 ? 4 * N * 4 : 0);
    assert_int_equal(stats[r].arena_bytes, h.programs[r / 2]->arena_bytes);
  }
  sc_free(y.data);
  hand_free(&h);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void expect_fail(hand_part *h, const float *x, int64_t rows, const char *a,
                        const char *b) {
  sc_dist_output y = {.data = (void *)1};
  sc_diag d = {0};
  sc_status st = run_tp(h, x, rows, &y, NULL, &d);
  assert_int_not_equal(st, SC_OK);
  assert_null(y.data);
  if (!strstr(d.msg, a) || (b && !strstr(d.msg, b)))
    fail_msg("message '%s' lacks '%s' or '%s'", d.msg, a, b ? b : "");
}

static void test_failures(void **state) {
  (void)state;
  rng_seed(13);
  setenv("SHARDC_COMM_TIMEOUT", "20", 1); /* a bug fails the test, never hangs it */
  hand_part h;
  hand_build(&h, "tp=2", 1, TP_GLOBAL, &TP_STAGE, 1);
  float x[B * K];
  for (int i = 0; i < B * K; i++) x[i] = rng_val();

  /* rank 1 fails after its session exists: rank 0 waits in the all-reduce
   * and must be released by the abort */
  setenv("SHARDC_FAIL_RANK", "1", 1);
  double t0 = now_s();
  expect_fail(&h, x, B, "rank 1: ", "injected failure");
  unsetenv("SHARDC_FAIL_RANK");
  double dt = now_s() - t0;
  if (dt > 10) fail_msg("the failure took %.1f s to report", dt);

  /* the same partition still runs */
  sc_dist_output y;
  sc_diag d = {0};
  if (run_tp(&h, x, B, &y, NULL, &d) != SC_OK) fail_msg("run: %s", d.msg);
  sc_free(y.data);

  expect_fail(&h, x, 3, "input 'x': [3,8] cuts to [3,4] per rank", "stage 0 takes [4,4]");
  sc_tensor_view other = xview(x, B);
  other.name = "other";
  sc_dist_opts o;
  sc_dist_opts_init(&o);
  sc_diag_clear(&d);
  y.data = NULL;
  assert_int_not_equal(sc_dist_run_local(h.dp, &o, &other, 1, &y, 1, NULL, &d), SC_OK);
  if (!strstr(d.msg, "input 'x' is missing")) fail_msg("%s", d.msg);
  assert_null(y.data);
  h.dp->sources[0].data = NULL; /* --no-weights */
  expect_fail(&h, x, B, "'w'", "no data");
  hand_free(&h);
  unsetenv("SHARDC_COMM_TIMEOUT");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_extract),
      cmocka_unit_test(test_tp),
      cmocka_unit_test(test_pp_tp),
      cmocka_unit_test(test_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
