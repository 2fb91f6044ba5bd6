/* test_collective_ops.c — the collective ops (ir/op_comm.h): shape inference
 * under a mesh and its errors, then SPMD runs end to end: textual IR ->
 * sc_compile_graph -> one CPU session per thread-rank of a `local`
 * communicator group (sc_session_opts.world), on 2 and 4 ranks.
 *
 * Each rank feeds its shard of seeded random tensors; results are compared
 * with references computed here in double from the unsharded tensors:
 *   AllReduce      row-parallel MatMul (x column block, w row block)
 *                  == the full MatMul
 *   AllGather      column-parallel MatMul gathered on axis 1 (strided
 *                  unpack) == the full MatMul; and a gather on axis 0;
 *                  gathers on axes 1 and 2 larger than the unpack's cap go
 *                  in row chunks (a partial last one) through a scratch of
 *                  at most SC_COMM_SCRATCH_CAP_BYTES, equal to the shards
 *   ReduceScatter  the row-parallel partial products scattered on axis 1
 *                  (strided pack) and on axis 0 == blocks of the full MatMul;
 *                  scatters on axes 1 and 2 larger than the pack's cap go in
 *                  row chunks (a partial last one) through a scratch of at
 *                  most SC_COMM_SCRATCH_CAP_BYTES, equal to the two shards'
 *                  f32 sum
 *   AllToAll       split 1 / concat 0 and split 0 / concat 1
 *   Send / Recv    stage 0 sends Tanh(x), stage 1 receives it and adds 1;
 *                  with a shift: ring attention (passes/partition/ring.c) on
 *                  2, 3, 4 and 8 ranks, with and without a causal mask
 * Tolerance: |got − want| ≤ 1e-5 · Σ_k |x_ik w_kj| (+1e-6 for moves, which
 * are exact up to f32 rounding of the input): float accumulation over K ≤ 32
 * terms in a different order than the reference. NaN fails. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

#include "ir/sharding.h"
#include "ir/context_parallel.h"
#include "passes/pass.h"
#include "passes/partition/partition.h"
#include "runtime/comm.h"
#include "codegen/compile.h"
#include "codegen/cpu/cpu.h"
#include "runtime/runtime.h"

/* ---- shape inference ---- */

static sc_graph *inferred(const char *text, sc_status want) {
  sc_graph *g = parse_ok(text);
  sc_status st = sc_pass_infer_shapes(g, NULL);
  if (st != want) fail_msg("infer-shapes gave %d, want %d: %s", (int)st, (int)want, g->diag.msg);
  return g;
}

static void shape_is(sc_graph *g, const char *name, sc_dtype t, int32_t rank, const int64_t *d) {
  int32_t v = sc_graph_find_value(g, name);
  assert_true(v >= 0);
  check_shape(g, v, t, rank, d);
}

static void test_infer(void **state) {
  (void)state;
  sc_graph *g = inferred("shardc.ir 1 graph \"t\" opset 18 {\n"
                         " mesh [dp=3, tp=4]\n"
                         " input %x : f32[12,8]\n"
                         " %a = AllReduce(%x) {axes = [\"tp\"], op = \"max\"}\n"
                         " %b = AllGather(%x) {axes = [\"tp\", \"dp\"], axis = -1}\n"
                         " %c = ReduceScatter(%x) {axes = [\"dp\"], axis = 0}\n"
                         " %d = AllToAll(%x) {axes = [\"tp\"], split_axis = 1, concat_axis = 0}\n"
                         " %e = Send(%x) {axes = [\"dp\"], peer_stage = 2, tag = 9}\n"
                         " %f = Recv() {axes = [\"dp\"], peer_stage = 0, dtype = \"i32\", shape = [3]}\n"
                         " output %a\n output %b\n output %c\n output %d\n output %f\n}\n",
                         SC_OK);
  shape_is(g, "a", SC_DTYPE_F32, 2, (int64_t[]){12, 8});
  shape_is(g, "b", SC_DTYPE_F32, 2, (int64_t[]){12, 96});
  shape_is(g, "c", SC_DTYPE_F32, 2, (int64_t[]){4, 8});
  shape_is(g, "d", SC_DTYPE_F32, 2, (int64_t[]){48, 2});
  shape_is(g, "e", SC_DTYPE_F32, 1, (int64_t[]){0});
  shape_is(g, "f", SC_DTYPE_I32, 1, (int64_t[]){3});
  /* cost: ring formulas, n = 4 for tp */
  sc_cost c;
  const sc_node *ar = &g->nodes[g->values[sc_graph_find_value(g, "a")].producer];
  sc_ops[ar->op].cost(g, ar, &c);
  assert_true(c.flops == 0);
  near(c.bytes, 2.0 * 3.0 / 4.0 * 12 * 8 * 4, 1e-12);
  const sc_node *ag = &g->nodes[g->values[sc_graph_find_value(g, "b")].producer];
  sc_ops[ag->op].cost(g, ag, &c);
  near(c.bytes, 11.0 / 12.0 * 12 * 96 * 4, 1e-12);
  sc_graph_destroy(g);

  struct { const char *body, *node, *needle; } bad[] = {
      {" %y = AllReduce(%x) {axes = [\"tp\"]} \"n\"\n", "n", "collective needs a mesh"},
      {" mesh [tp=4]\n %y = ReduceScatter(%x) {axes = [\"tp\"], axis = 1} \"n\"\n", "n",
       "not divisible by the group size 4"},
      {" mesh [tp=4]\n %y = AllToAll(%x) {axes = [\"tp\"], split_axis = 1} \"n\"\n", "n",
       "not divisible"},
      {" mesh [tp=4]\n %y = AllReduce(%x) {axes = [\"pp\"]} \"n\"\n", "n", "not an axis"},
      {" mesh [tp=4]\n %y = AllReduce(%x) {axes = [\"tp\"], op = \"avg\"} \"n\"\n", "n",
       "not sum, max or min"},
      {" mesh [tp=4]\n %y = AllGather(%x) \"n\"\n", "n", "'axes' is required"},
      {" mesh [pp=2]\n %y = Send(%x) {peer_stage = 2} \"n\"\n", "n", "outside the group"},
      {" mesh [pp=2]\n %y = Recv() {peer_stage = 1, tag = 40000, shape = [2]} \"n\"\n", "n",
       "tag 40000"},
      {" mesh [cp=3]\n %y = Send(%x) {axes = [\"cp\"], shift = 3} \"n\"\n", "n",
       "shift 3 is not in (-3, 3)"},
      {" mesh [cp=3]\n %y = Send(%x) {axes = [\"cp\"], shift = 0} \"n\"\n", "n",
       "shift 0 is not in"},
      {" mesh [cp=3]\n %y = Send(%x) {axes = [\"cp\"], shift = 1, peer_stage = 0} \"n\"\n",
       "n", "exclude each other"},
      {" mesh [cp=3]\n %y = Send(%x) {axes = [\"cp\"]} \"n\"\n", "n",
       "'peer_stage' (or 'shift') is required"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[512];
    snprintf(text, sizeof text,
             "shardc.ir 1 graph \"t\" opset 18 {\n input %%x : f32[6,6]\n%s output %%y\n}\n",
             bad[i].body);
    sc_graph *b = parse_ok(text);
    sc_status st = sc_pass_infer_shapes(b, NULL);
    expect_error(b, st, SC_ERR_INVALID, bad[i].node, bad[i].needle);
    sc_graph_destroy(b);
  }
}

/* ---- SPMD runs ---- */

enum { MAXR = 8, MAXIO = 20 };

typedef struct rank_job {
  const sc_program *p;
  const sc_cpu_module *module; /* p's kernels (run_ranks JITs them once) */
  sc_comm *comm;
  int n_in, n_out;
  sc_tensor_view in[MAXIO];
  float *out[MAXIO]; /* copies of the outputs (malloc'd by the thread) */
  int64_t out_n[MAXIO];
  char err[1200];
} rank_job;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.threads = 1;
  o.world = j->comm;
  o.cpu_module = j->module;
  sc_session *s = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_tensor_view outs[MAXIO];
  if (sc_session_create(j->p, &o, &s, &d) != SC_OK ||
      sc_session_run(s, j->in, j->n_in, outs, j->n_out, &d) != SC_OK) {
    snprintf(j->err, sizeof j->err, "rank %d: %s", sc_comm_rank(j->comm), d.msg);
    sc_comm_abort(j->comm, "test rank failed");
  } else {
    for (int i = 0; i < j->n_out; i++) {
      int64_t n = 1;
      for (int32_t k = 0; k < outs[i].rank; k++) n *= outs[i].dims[k];
      j->out_n[i] = n;
      j->out[i] = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
      if (n > 0) memcpy(j->out[i], outs[i].data, sizeof(float) * (size_t)n);
    }
  }
  sc_session_destroy(s);
  return NULL;
}

/* Runs jobs[0..n) on a local group of n thread-ranks; fails on any error. */
static void run_ranks(rank_job *jobs, int n) {
  sc_comm *comms[MAXR];
  sc_diag d = {0};
  sc_diag_clear(&d);
  /* the ranks' one program compiled once (each session would JIT it
   * again: 8 ranks of the ring took 48 s on 2 cores, LLVM's almost all) */
  bool one = true;
  for (int r = 1; r < n; r++) one &= jobs[r].p == jobs[0].p;
  sc_cpu_module *m = NULL;
  if (one) {
    sc_cpu_opts co;
    sc_cpu_opts_init(&co);
    if (sc_cpu_jit(jobs[0].p, &co, &m, &d) != SC_OK) fail_msg("jit: %s", d.msg);
  }
  for (int r = 0; r < n; r++) jobs[r].module = m;
  assert_int_equal(sc_comm_local_create_group(n, comms, &d), SC_OK);
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    jobs[r].comm = comms[r];
    jobs[r].err[0] = 0;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) sc_comm_destroy(comms[r]);
  sc_cpu_module_destroy(m);
  for (int r = 0; r < n; r++)
    if (jobs[r].err[0]) fail_msg("%s", jobs[r].err);
}

static void free_jobs(rank_job *jobs, int n) {
  for (int r = 0; r < n; r++)
    for (int i = 0; i < MAXIO; i++) free(jobs[r].out[i]);
}

static sc_program *compile_graph(sc_graph *g, const char *text) {
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  sc_program *p = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_compile_graph(g, &co, &p, &d) != SC_OK) fail_msg("compile: %s\n%s", d.msg, text);
  return p;
}

static sc_program *compile_text(const char *text, sc_graph **gout) {
  *gout = parse_ok(text);
  return compile_graph(*gout, text);
}

/* p's steps as printed (--print-after=program) into buf[n]. */
static void print_program(const sc_program *p, char *buf, size_t n) {
  memset(buf, 0, n);
  FILE *f = fmemopen(buf, n - 1, "w");
  assert_non_null(f);
  sc_program_print(p, f);
  fclose(f);
}

static sc_tensor_view view(float *data, int32_t rank, int64_t d0, int64_t d1) {
  sc_tensor_view v;
  memset(&v, 0, sizeof v);
  v.dtype = SC_DTYPE_F32;
  v.rank = rank;
  v.dims[0] = d0;
  v.dims[1] = d1;
  v.data = data;
  return v;
}

static float *random_f32(int64_t n) {
  float *a = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) a[i] = rng_val();
  return a;
}

/* Sub-block [r0, r0+nr) x [c0, c0+nc) of a row-major [*, ld] matrix. */
static float *block(const float *a, int64_t ld, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  float *b = malloc(sizeof(float) * (size_t)(nr * nc));
  for (int64_t i = 0; i < nr; i++)
    for (int64_t j = 0; j < nc; j++) b[i * nc + j] = a[(r0 + i) * ld + c0 + j];
  return b;
}

static void check_close(const float *got, double want, double scale, double tol, const char *what,
                        int r, int64_t i) {
  if (isnan(got[i]) || !(fabs(got[i] - want) <= tol * scale + 1e-6))
    fail_msg("%s rank %d element %lld: got %.9g want %.9g", what, r, (long long)i,
             (double)got[i], want);
}

enum { M = 8, K = 16, N = 8 };

/* full[i][j] = Σ_k x[i][k] w[k][j] and the scale Σ_k |x w| (double). */
static void matmul_ref(const float *x, const float *w, double *full, double *scale) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0, a = 0;
      for (int k = 0; k < K; k++) {
        s += (double)x[i * K + k] * w[k * N + j];
        a += fabs((double)x[i * K + k] * w[k * N + j]);
      }
      full[i * N + j] = s;
      scale[i * N + j] = a;
    }
}

/* Row-parallel: AllReduce(MatMul(x_r, w_r)), ReduceScatter on axes 1 and 0. */
static void row_parallel(int n) {
  char text[1024];
  snprintf(text, sizeof text,
           "shardc.ir 1 graph \"row\" opset 18 {\n mesh [tp=%d]\n"
           " input %%x : f32[%d,%d]\n input %%w : f32[%d,%d]\n"
           " %%p = MatMul(%%x, %%w) \"mm\"\n"
           " %%y = AllReduce(%%p) {axes = [\"tp\"], op = \"sum\"} \"ar\"\n"
           " %%s1 = ReduceScatter(%%p) {axes = [\"tp\"], axis = 1} \"rs1\"\n"
           " %%s0 = ReduceScatter(%%p) {axes = [\"tp\"], axis = 0, op = \"sum\"} \"rs0\"\n"
           " output %%y\n output %%s1\n output %%s0\n}\n",
           n, M, K / n, K / n, N);
  sc_graph *g;
  sc_program *p = compile_text(text, &g);
  int comm_steps = 0;
  for (int32_t i = 0; i < p->n_steps; i++) comm_steps += p->steps[i].kind == SC_STEP_COMM;
  assert_int_equal(comm_steps, 3);
  float *x = random_f32(M * K), *w = random_f32(K * N);
  double full[M * N], scale[M * N];
  matmul_ref(x, w, full, scale);
  rank_job jobs[MAXR];
  memset(jobs, 0, sizeof jobs);
  float *shards[MAXR][2];
  int kb = K / n;
  for (int r = 0; r < n; r++) {
    shards[r][0] = block(x, K, 0, M, r * kb, kb);
    shards[r][1] = block(w, N, r * kb, kb, 0, N);
    jobs[r] = (rank_job){.p = p, .n_in = 2, .n_out = 3};
    jobs[r].in[0] = view(shards[r][0], 2, M, kb);
    jobs[r].in[1] = view(shards[r][1], 2, kb, N);
  }
  run_ranks(jobs, n);
  int nb = N / n, mb = M / n;
  for (int r = 0; r < n; r++) {
    assert_int_equal(jobs[r].out_n[0], M * N);
    assert_int_equal(jobs[r].out_n[1], M * nb);
    assert_int_equal(jobs[r].out_n[2], mb * N);
    for (int64_t i = 0; i < M * N; i++)
      check_close(jobs[r].out[0], full[i], scale[i], 1e-5, "AllReduce", r, i);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < nb; j++) {
        int64_t f = i * N + r * nb + j;
        check_close(jobs[r].out[1], full[f], scale[f], 1e-5, "ReduceScatter axis 1", r,
                    i * nb + j);
      }
    for (int i = 0; i < mb; i++)
      for (int j = 0; j < N; j++) {
        int64_t f = (r * mb + i) * N + j;
        check_close(jobs[r].out[2], full[f], scale[f], 1e-5, "ReduceScatter axis 0", r,
                    i * N + j);
      }
    free(shards[r][0]);
    free(shards[r][1]);
  }
  free_jobs(jobs, n);
  free(x);
  free(w);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

/* Column-parallel: AllGather(MatMul(x, w_r), axis 1); AllGather(w_r, axis 0). */
static void col_parallel(int n) {
  char text[1024];
  int nb = N / n;
  snprintf(text, sizeof text,
           "shardc.ir 1 graph \"col\" opset 18 {\n mesh [tp=%d]\n"
           " input %%x : f32[%d,%d]\n input %%w : f32[%d,%d]\n"
           " %%p = MatMul(%%x, %%w) \"mm\"\n"
           " %%y = AllGather(%%p) {axes = [\"tp\"], axis = 1} \"ag1\"\n"
           " %%z = AllGather(%%w) {axes = [\"tp\"], axis = 0} \"ag0\"\n"
           " output %%y\n output %%z\n}\n",
           n, M, K, K, nb);
  sc_graph *g;
  sc_program *p = compile_text(text, &g);
  float *x = random_f32(M * K), *w = random_f32(K * N);
  double full[M * N], scale[M * N];
  matmul_ref(x, w, full, scale);
  rank_job jobs[MAXR];
  memset(jobs, 0, sizeof jobs);
  float *ws[MAXR];
  for (int r = 0; r < n; r++) {
    ws[r] = block(w, N, 0, K, r * nb, nb);
    jobs[r] = (rank_job){.p = p, .n_in = 2, .n_out = 2};
    jobs[r].in[0] = view(x, 2, M, K);
    jobs[r].in[1] = view(ws[r], 2, K, nb);
  }
  run_ranks(jobs, n);
  for (int r = 0; r < n; r++) {
    assert_int_equal(jobs[r].out_n[0], M * N);
    for (int64_t i = 0; i < M * N; i++)
      check_close(jobs[r].out[0], full[i], scale[i], 1e-5, "AllGather axis 1", r, i);
    assert_int_equal(jobs[r].out_n[1], n * K * nb);
    for (int q = 0; q < n; q++)
      for (int64_t i = 0; i < K * nb; i++)
        check_close(jobs[r].out[1], ws[q][i], 0, 0, "AllGather axis 0", r, q * K * nb + i);
  }
  for (int r = 0; r < n; r++) free(ws[r]);
  free_jobs(jobs, n);
  free(x);
  free(w);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

/* AllToAll of x_r [R, C]: split 1 / concat 0 and split 0 / concat 1. */
static void all_to_all(int n) {
  enum { R = 8, C = 8 };
  char text[1024];
  snprintf(text, sizeof text,
           "shardc.ir 1 graph \"a2a\" opset 18 {\n mesh [tp=%d]\n"
           " input %%x : f32[%d,%d]\n"
           " %%a = AllToAll(%%x) {axes = [\"tp\"], split_axis = 1, concat_axis = 0} \"a\"\n"
           " %%b = AllToAll(%%x) {axes = [\"tp\"], split_axis = 0, concat_axis = 1} \"b\"\n"
           " output %%a\n output %%b\n}\n",
           n, R, C);
  sc_graph *g;
  sc_program *p = compile_text(text, &g);
  rank_job jobs[MAXR];
  memset(jobs, 0, sizeof jobs);
  float *xs[MAXR];
  for (int r = 0; r < n; r++) {
    xs[r] = random_f32(R * C);
    jobs[r] = (rank_job){.p = p, .n_in = 1, .n_out = 2};
    jobs[r].in[0] = view(xs[r], 2, R, C);
  }
  run_ranks(jobs, n);
  int cb = C / n, rb = R / n;
  for (int r = 0; r < n; r++) {
    /* a: [n*R, C/n], a[q*R + i][j] = x_q[i][r*cb + j] */
    for (int q = 0; q < n; q++)
      for (int i = 0; i < R; i++)
        for (int j = 0; j < cb; j++)
          check_close(jobs[r].out[0], xs[q][i * C + r * cb + j], 0, 0, "AllToAll 1->0", r,
                      (q * R + i) * cb + j);
    /* b: [R/n, n*C], b[i][q*C + j] = x_q[r*rb + i][j] */
    for (int q = 0; q < n; q++)
      for (int i = 0; i < rb; i++)
        for (int j = 0; j < C; j++)
          check_close(jobs[r].out[1], xs[q][(r * rb + i) * C + j], 0, 0, "AllToAll 0->1", r,
                      i * n * C + q * C + j);
  }
  for (int r = 0; r < n; r++) free(xs[r]);
  free_jobs(jobs, n);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

enum { CHUNK_RANKS = 2 };

/* `op` (AllGather or ReduceScatter) over tp of CHUNK_RANKS ranks along the
 * last axis of x_r f32[d0, d1, last] (d0 = 1: 2-D), whose scratch (the
 * gather's unpack, the scatter's pack) would exceed
 * SC_COMM_SCRATCH_CAP_BYTES, compiled: the step goes in `calls` chunks of
 * rows of c elements a rank through a scratch within the cap, printed "by
 * R rows", and the plan holds io_bytes (the input and output) and the
 * bounded scratch. Each rank's input, seeded random, through xs (free). */
static sc_program *chunked_run(const char *op, int64_t d0, int64_t d1, int64_t last, int64_t c,
                               int64_t calls, int64_t io_bytes, sc_graph **g, rank_job *jobs,
                               float **xs) {
  enum { n = CHUNK_RANKS };
  char text[1024], dims[64];
  if (d0 > 1)
    snprintf(dims, sizeof dims, "%lld,%lld,%lld", (long long)d0, (long long)d1, (long long)last);
  else
    snprintf(dims, sizeof dims, "%lld,%lld", (long long)d1, (long long)last);
  snprintf(text, sizeof text,
           "shardc.ir 1 graph \"chunks\" opset 18 {\n mesh [tp=%d]\n input %%x : f32[%s]\n"
           " %%y = %s(%%x) {axes = [\"tp\"], axis = -1} \"c\"\n output %%y\n}\n",
           n, dims, op);
  sc_program *p = compile_text(text, g);
  int32_t comm = -1;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_COMM) comm = i;
  assert_true(comm >= 0);
  const sc_comm_step *cs = &p->steps[comm].comm;
  int32_t scratch = cs->kind == SC_COMM_REDUCE_SCATTER ? cs->pack : cs->unpack;
  assert_true(d0 * d1 * n * c * 4 > SC_COMM_SCRATCH_CAP_BYTES);
  assert_int_equal(sc_comm_step_calls(cs), calls);
  assert_true(scratch >= 0 && p->buffers[scratch].bytes <= SC_COMM_SCRATCH_CAP_BYTES);
  assert_int_equal(p->buffers[scratch].bytes, cs->rows * n * c * 4);
  assert_true(p->arena_bytes <= io_bytes + SC_COMM_SCRATCH_CAP_BYTES + 4096);
  char printed[4096];
  print_program(p, printed, sizeof printed);
  char want[64];
  snprintf(want, sizeof want, "by %lld rows", (long long)cs->rows);
  if (!strstr(printed, want)) fail_msg("no '%s' in\n%s", want, printed);
  memset(jobs, 0, MAXR * sizeof *jobs);
  for (int r = 0; r < n; r++) {
    xs[r] = random_f32(d0 * d1 * last);
    jobs[r] = (rank_job){.p = p, .n_in = 1, .n_out = 1};
    jobs[r].in[0] = view(xs[r], d0 > 1 ? 3 : 2, d0 > 1 ? d0 : d1, d0 > 1 ? d1 : last);
    jobs[r].in[0].dims[2] = last;
  }
  run_ranks(jobs, n);
  return p;
}

/* AllGather(x_r, axis = rank - 1) of x_r f32[d0, d1, c] (chunked_run):
 * every element equals its rank's shard (a move: exact). */
static void chunked_gather(int64_t d0, int64_t d1, int64_t c, int64_t calls) {
  enum { n = CHUNK_RANKS };
  int64_t outer = d0 * d1;
  rank_job jobs[MAXR];
  float *xs[n];
  sc_graph *g;
  sc_program *p = chunked_run("AllGather", d0, d1, c, c, calls, outer * c * 4 * (1 + n), &g,
                              jobs, xs);
  for (int r = 0; r < n; r++) {
    assert_int_equal(jobs[r].out_n[0], outer * n * c);
    for (int64_t o = 0; o < outer; o++)
      for (int q = 0; q < n; q++)
        for (int64_t j = 0; j < c; j++)
          if (!(jobs[r].out[0][(o * n + q) * c + j] == xs[q][o * c + j]))
            fail_msg("rank %d row %lld part %d element %lld: got %.9g want %.9g", r,
                     (long long)o, q, (long long)j, (double)jobs[r].out[0][(o * n + q) * c + j],
                     (double)xs[q][o * c + j]);
  }
  for (int r = 0; r < n; r++) free(xs[r]);
  free_jobs(jobs, n);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_gather_chunks(void **state) {
  (void)state;
  rng_seed(5);
  chunked_gather(1, 1031, 2048, 2); /* 1,024 rows a call, then 7 */
  chunked_gather(3, 700, 2048, 3);  /* outer 2,100: 1,024, 1,024, 52 */
}

/* ReduceScatter(x_r, axis = rank - 1) of x_r f32[d0, d1, n·c]
 * (chunked_run): every element equals x_0 + x_1 of its piece, the sum the
 * step in one call makes (a sum of two f32 values: exact in either
 * order). */
static void chunked_scatter(int64_t d0, int64_t d1, int64_t c, int64_t calls) {
  enum { n = CHUNK_RANKS };
  int64_t outer = d0 * d1;
  rank_job jobs[MAXR];
  float *xs[n];
  sc_graph *g;
  sc_program *p = chunked_run("ReduceScatter", d0, d1, n * c, c, calls,
                              outer * c * 4 * (1 + n), &g, jobs, xs);
  for (int r = 0; r < n; r++) {
    assert_int_equal(jobs[r].out_n[0], outer * c);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < c; j++) {
        int64_t at = (o * n + r) * c + j;
        float want_v = xs[0][at] + xs[1][at];
        if (!(jobs[r].out[0][o * c + j] == want_v))
          fail_msg("rank %d row %lld element %lld: got %.9g want %.9g", r, (long long)o,
                   (long long)j, (double)jobs[r].out[0][o * c + j], (double)want_v);
      }
  }
  for (int r = 0; r < n; r++) free(xs[r]);
  free_jobs(jobs, n);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_scatter_chunks(void **state) {
  (void)state;
  rng_seed(6);
  chunked_scatter(1, 1031, 2048, 2); /* 1,024 rows a call, then 7 */
  chunked_scatter(3, 700, 2048, 3);  /* outer 2,100: 1,024, 1,024, 52 */
}

static void test_spmd_2(void **state) {
  (void)state;
  rng_seed(2);
  row_parallel(2);
  col_parallel(2);
  all_to_all(2);
}

static void test_spmd_4(void **state) {
  (void)state;
  rng_seed(4);
  row_parallel(4);
  col_parallel(4);
  all_to_all(4);
}

/* Two pipeline stages: stage 0 sends Tanh(x) (its token is unused: dce must
 * keep the Send), stage 1 receives it and adds 1. */
static void test_send_recv(void **state) {
  (void)state;
  rng_seed(7);
  const char *s0 = "shardc.ir 1 graph \"s0\" opset 18 {\n mesh [pp=2]\n input %x : f32[3,5]\n"
                   " %h = Tanh(%x) \"tanh\"\n"
                   " %tok = Send(%h) {peer_stage = 1, tag = 11} \"send\"\n"
                   " %y = Neg(%x) \"neg\"\n output %y\n}\n";
  const char *s1 = "shardc.ir 1 graph \"s1\" opset 18 {\n mesh [pp=2]\n input %x : f32[3,5]\n"
                   " %r = Recv() {peer_stage = 0, tag = 11, shape = [3, 5]} \"recv\"\n"
                   " const %one : f32[] = [1.0]\n"
                   " %y = Add(%r, %one) \"add\"\n output %y\n}\n";
  sc_graph *g0, *g1;
  sc_program *p0 = compile_text(s0, &g0), *p1 = compile_text(s1, &g1);
  float *x0 = random_f32(15), *x1 = random_f32(15);
  rank_job jobs[2];
  memset(jobs, 0, sizeof jobs);
  jobs[0] = (rank_job){.p = p0, .n_in = 1, .n_out = 1};
  jobs[0].in[0] = view(x0, 2, 3, 5);
  jobs[1] = (rank_job){.p = p1, .n_in = 1, .n_out = 1};
  jobs[1].in[0] = view(x1, 2, 3, 5);
  run_ranks(jobs, 2);
  for (int i = 0; i < 15; i++) {
    check_close(jobs[0].out[0], -(double)x0[i], 0, 0, "stage 0", 0, i);
    check_close(jobs[1].out[0], tanh((double)x0[i]) + 1.0, 1, 1e-6, "stage 1", 1, i);
  }
  free_jobs(jobs, 2);
  free(x0);
  free(x1);
  sc_program_destroy(p0);
  sc_program_destroy(p1);
  sc_graph_destroy(g0);
  sc_graph_destroy(g1);
}

/* Send/Recv with a shift: ring attention over n cp ranks, forward and
 * backward, one program for all, as passes/partition/ring.c emits it
 * (docs/context-parallel.md). Each rank holds its two chunks (of RING_C
 * rows) of the zig-zag layout of q, k, v and d_o [1, H, 2·RING_C, D]; with
 * a causal mask, its per-step halves (half_rows, half_place) are inputs of
 * its own. Every rank's o, lse, dq, dk and dv must be those of its rows of
 * the whole attention, computed here in double (the textbook backward: P,
 * dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O)), dQ = scale·dS·K, dK = scale·dSᵀ·Q,
 * dV = Pᵀ·dO). Tolerance 1e-5 (+1e-6): f32 softmax sums of at most
 * 16·RING_C terms of values in [-1, 1], two roundings of exp/log per merge,
 * and gradient sums over at most 16·RING_C rows (measured: below 1e-6).
 * pad > 0 (no causal mask): a padded sequence's layout (passes/partition/
 * cp.c): n contiguous blocks, the last pad rows padding, each step's key
 * mask (-1e30 on the padding keys of the block in hand) an input of each
 * rank's own; the whole attention then sees only the S − pad real keys
 * (every query row, padding rows too, against them), and the padding keys'
 * dk and dv are 0. */
enum { RING_H = 2, RING_C = 3, RING_D = 8 };

static void ring_attention(int n, bool causal, int pad) {
  const int64_t L = 2 * RING_C, S = (int64_t)n * L, per = RING_H * L * RING_D;
  char text[1024];
  snprintf(text, sizeof text,
           "shardc.ir 1 graph \"ring\" opset 18 {\n mesh [cp=%d]\n"
           " input %%q : f32[1,%d,%lld,%d]\n input %%k : f32[1,%d,%lld,%d]\n"
           " input %%v : f32[1,%d,%lld,%d]\n}\n",
           n, RING_H, (long long)L, RING_D, RING_H, (long long)L, RING_D, RING_H, (long long)L,
           RING_D);
  sc_graph *g = parse_ok(text);
  int32_t d_o = sc_graph_add_value(g, "d_o");
  assert_int_equal(sc_value_set_shape(g, d_o, SC_DTYPE_F32, 4, (int64_t[]){1, RING_H, L, RING_D}),
                   SC_OK);
  assert_int_equal(sc_graph_add_input(g, d_o), SC_OK);
  int32_t rows_in[MAXR] = {-1}, place_in[MAXR] = {-1};
  for (int i = 1; causal && i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "rows%d", i);
    rows_in[i] = sc_graph_add_value(g, name);
    snprintf(name, sizeof name, "place%d", i);
    place_in[i] = sc_graph_add_value(g, name);
    assert_int_equal(sc_value_set_shape(g, rows_in[i], SC_DTYPE_I64, 1, (int64_t[]){RING_C}), SC_OK);
    assert_int_equal(sc_value_set_shape(g, place_in[i], SC_DTYPE_I64, 1, (int64_t[]){L}), SC_OK);
    assert_int_equal(sc_graph_add_input(g, rows_in[i]), SC_OK);
    assert_int_equal(sc_graph_add_input(g, place_in[i]), SC_OK);
  }
  int32_t mask_in[MAXR];
  for (int i = 0; pad && i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "mask%d", i);
    mask_in[i] = sc_graph_add_value(g, name);
    assert_int_equal(sc_value_set_shape(g, mask_in[i], SC_DTYPE_F32, 4, (int64_t[]){1, 1, L, L}),
                     SC_OK);
    assert_int_equal(sc_graph_add_input(g, mask_in[i]), SC_OK);
  }
  sc_cp_ring_args ra = {.name = "attn", .axis = "cp", .n = n, .q = sc_graph_find_value(g, "q"),
                        .key_mask = pad ? mask_in : NULL,
                        .k = sc_graph_find_value(g, "k"), .v = sc_graph_find_value(g, "v"),
                        .scale = 0.35355339, .causal = causal, .half_rows = rows_in,
                        .half_place = place_in, .tag_base = 100};
  int32_t o, lse;
  assert_int_equal(sc_partition_ring_attention(g, &ra, &o, &lse), SC_OK);
  int32_t grads[3];
  ra.tag_base = 200;
  assert_int_equal(
      sc_partition_ring_attention_grad(g, &ra, o, lse, d_o, &grads[0], &grads[1], &grads[2]),
      SC_OK);
  /* the emitted values carry their (local) shapes */
  check_shape(g, o, SC_DTYPE_F32, 4, (int64_t[]){1, RING_H, L, RING_D});
  check_shape(g, lse, SC_DTYPE_F32, 3, (int64_t[]){1, RING_H, L});
  for (int t = 0; t < 3; t++) check_shape(g, grads[t], SC_DTYPE_F32, 4, (int64_t[]){1, RING_H, L, RING_D});
  assert_int_equal(sc_graph_add_output(g, o), SC_OK);
  assert_int_equal(sc_graph_add_output(g, lse), SC_OK);
  for (int t = 0; t < 3; t++) assert_int_equal(sc_graph_add_output(g, grads[t]), SC_OK);
  sc_program *p = compile_graph(g, "the ring");
  /* the steps carry the shift, not a peer */
  static char buf[1 << 17];
  print_program(p, buf, sizeof buf);
  if (n > 1 && (!strstr(buf, "group cp (") || !strstr(buf, ") shift 1 tag 103")))
    fail_msg("program print:\n%s", buf);

  /* the global tensors, and each rank's rows of them */
  float *q = random_f32(per * n), *k = random_f32(per * n), *v = random_f32(per * n);
  float *dout = random_f32(per * n);
  float *lq[MAXR], *lk[MAXR], *lv[MAXR], *ldo[MAXR];
  int64_t idx[MAXR][2 * MAXR][2 * RING_C];
  static float masks[MAXR][MAXR][4 * RING_C * RING_C];
  /* the global position of rank r's row j */
#define RING_POS(r, j) (pad ? (int64_t)(r) * L + (j) : sc_cp_position(S, n, (r), (j)))
  rank_job jobs[MAXR];
  memset(jobs, 0, sizeof jobs);
  for (int r = 0; r < n; r++) {
    float *src[4] = {q, k, v, dout}, **dst[4] = {&lq[r], &lk[r], &lv[r], &ldo[r]};
    jobs[r] = (rank_job){.p = p, .n_in = 4, .n_out = 5};
    for (int t = 0; t < 4; t++) {
      *dst[t] = malloc(sizeof(float) * (size_t)per);
      for (int h = 0; h < RING_H; h++)
        for (int64_t j = 0; j < L; j++)
          memcpy(*dst[t] + (h * L + j) * RING_D,
                 src[t] + (h * S + RING_POS(r, j)) * RING_D, sizeof(float) * RING_D);
      jobs[r].in[t] = view(*dst[t], 4, 1, RING_H);
      jobs[r].in[t].dims[2] = L;
      jobs[r].in[t].dims[3] = RING_D;
    }
    for (int i = 0; pad && i < n; i++) {
      int64_t from = sc_cp_ring_source(n, r, i);
      for (int64_t e = 0; e < L * L; e++) masks[r][i][e] = from * L + e % L >= S - pad ? -1e30f : 0;
      sc_tensor_view *iv = &jobs[r].in[jobs[r].n_in++];
      *iv = view(masks[r][i], 4, 1, 1);
      iv->dims[2] = iv->dims[3] = L;
    }
    for (int i = 1; causal && i < n; i++) {
      int64_t hh = sc_cp_ring_half(r, sc_cp_ring_source(n, r, i));
      int64_t *rw = idx[r][2 * i], *pl = idx[r][2 * i + 1];
      for (int64_t j = 0; j < RING_C; j++) rw[j] = hh * RING_C + j;
      for (int64_t j = 0; j < L; j++) pl[j] = hh ? (j + RING_C) % L : j;
      for (int t = 0; t < 2; t++) {
        sc_tensor_view *iv = &jobs[r].in[jobs[r].n_in++];
        *iv = view((float *)(t ? pl : rw), 1, t ? L : RING_C, 0);
        iv->dtype = SC_DTYPE_I64;
      }
    }
  }
  run_ranks(jobs, n);
  /* the whole attention and its gradients, [H, S, ·] in double */
  double *ro = calloc((size_t)(per * n), sizeof *ro), *rl = calloc((size_t)(RING_H * S), sizeof *rl);
  double *rq = calloc((size_t)(per * n), sizeof *rq), *rk = calloc((size_t)(per * n), sizeof *rk);
  double *rv = calloc((size_t)(per * n), sizeof *rv);
  assert_true(ro && rl && rq && rk && rv);
  for (int h = 0; h < RING_H; h++)
    for (int64_t i = 0; i < S; i++) {
      double pr[2 * MAXR * RING_C], mx = -INFINITY, sum = 0, dd = 0;
      const float *qi = q + (h * S + i) * RING_D, *di = dout + (h * S + i) * RING_D;
      for (int64_t j = 0; j < S; j++) {
        double acc = 0;
        for (int c = 0; c < RING_D; c++) acc += (double)qi[c] * k[(h * S + j) * RING_D + c];
        pr[j] = (causal && j > i) || j >= S - pad ? -INFINITY : acc * 0.35355339;
        if (pr[j] > mx) mx = pr[j];
      }
      for (int64_t j = 0; j < S; j++) sum += pr[j] = exp(pr[j] - mx);
      rl[h * S + i] = mx + log(sum);
      double *oi = ro + (h * S + i) * RING_D;
      for (int64_t j = 0; j < S; j++) {
        pr[j] /= sum;
        for (int c = 0; c < RING_D; c++) oi[c] += pr[j] * v[(h * S + j) * RING_D + c];
      }
      for (int c = 0; c < RING_D; c++) dd += di[c] * oi[c];
      for (int64_t j = 0; j < S; j++) {
        double dp = 0;
        for (int c = 0; c < RING_D; c++) dp += di[c] * v[(h * S + j) * RING_D + c];
        double ds = pr[j] * (dp - dd) * 0.35355339;
        for (int c = 0; c < RING_D; c++) {
          rq[(h * S + i) * RING_D + c] += ds * k[(h * S + j) * RING_D + c];
          rk[(h * S + j) * RING_D + c] += ds * qi[c];
          rv[(h * S + j) * RING_D + c] += pr[j] * di[c];
        }
      }
    }
  for (int r = 0; r < n; r++) {
    const double *ref[5] = {ro, rl, rq, rk, rv};
    static const char *const what[5] = {"ring o", "ring lse", "ring dq", "ring dk", "ring dv"};
    for (int t = 0; t < 5; t++) {
      int64_t width = t == 1 ? 1 : RING_D;
      assert_int_equal(jobs[r].out_n[t], RING_H * L * width);
      for (int h = 0; h < RING_H; h++)
        for (int64_t i = 0; i < L; i++)
          for (int64_t c = 0; c < width; c++) {
            int64_t gp = RING_POS(r, i);
            check_close(jobs[r].out[t], ref[t][(h * S + gp) * width + c], 1, 1e-5, what[t], r,
                        (h * L + i) * width + c);
          }
    }
  }
#undef RING_POS
  free(ro), free(rl), free(rq), free(rk), free(rv);
  for (int r = 0; r < n; r++) free(lq[r]), free(lk[r]), free(lv[r]), free(ldo[r]);
  free(q), free(k), free(v), free(dout);
  free_jobs(jobs, n);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_ring_shift(void **state) {
  (void)state;
  rng_seed(41);
  for (int n = 2; n <= 4; n++) {
    ring_attention(n, false, 0);
    ring_attention(n, true, 0);
    ring_attention(n, false, n - 1);
  }
  /* above 4, what the planner searches (docs/planner.md): the causal
   * ring and the padded one, its last rank's keys all but one padding */
  ring_attention(MAXR, true, 0);
  ring_attention(MAXR, false, MAXR - 1);
}

/* A program with collectives needs a communicator of the mesh's size. */
static void test_session_errors(void **state) {
  (void)state;
  sc_graph *g;
  sc_program *p = compile_text("shardc.ir 1 graph \"e\" opset 18 {\n mesh [tp=2]\n"
                               " input %x : f32[4]\n"
                               " %y = AllReduce(%x) {axes = [\"tp\"]} \"ar\"\n output %y\n}\n",
                               &g);
  /* the step as printed (--print-after=program) */
  char buf[8192];
  print_program(p, buf, sizeof buf);
  if (!strstr(buf, "comm all_reduce sum in=b0 out=b1 count 4 group tp (2)"))
    fail_msg("program print:\n%s", buf);
  sc_session_opts o;
  sc_session_opts_init(&o);
  sc_session *s = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_session_create(p, &o, &s, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "needs a communicator"));
  assert_null(s);
  sc_comm *one[1];
  assert_int_equal(sc_comm_local_create_group(1, one, &d), SC_OK);
  o.world = one[0];
  sc_diag_clear(&d);
  assert_int_equal(sc_session_create(p, &o, &s, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "mesh has 2 ranks, but the communicator has 1"));
  sc_comm_destroy(one[0]);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_infer),       cmocka_unit_test(test_spmd_2),
      cmocka_unit_test(test_spmd_4),      cmocka_unit_test(test_send_recv),
      cmocka_unit_test(test_session_errors), cmocka_unit_test(test_ring_shift),
      cmocka_unit_test(test_gather_chunks),
      cmocka_unit_test(test_scatter_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
