/* test_dist_sim.c — the simulated step of a distributed program
 * (codegen/dist_sim.h) on the h100-sxm preset (bf16 989.4 TFLOP/s at 80 %
 * for 1024^3 GEMMs; HBM 3.35 TB/s at 80 %; NVLink 450 GB/s, 3 us a hop).
 *
 * One program over tp=8 (a GEMM, a check, an all-reduce; two
 * microbatches): synchronous, the step is compute plus communication
 * summed (by hand, 1e-9 relative); with the all-reduce async and a WAIT
 * after a second GEMM, the step is max(GEMM, all-reduce) + the rest by
 * hand, at most the summed step and at least the compute and each queue's
 * busy time. Its optimizer steps (only "new:W" needs them, a gradient
 * "grad:W" being backward) and a recompute clone's step are attributed as
 * such. An f64 GEMM has no peak.
 *
 * Pipelines of equal stages (a pipelined training step built by hand: on
 * P = 4 ranks, chunk forward, backward and weight pieces of one GEMM each,
 * hand-offs of 4 bytes): GPipe and 1F1B with M = 8 microbatches idle
 * (P-1)/(M+P-1) of the step on the critical rank, interleaved 1F1B with V
 * = 2 chunks of half the work (P-1)/(V·M+P-1), both within 0.002 (the
 * hand-offs' 3 us latencies against GEMMs of 2.7 ms a unit of 1000
 * batches); with the weight gradients apart (F = B = W), 1F1B idles
 * (P-1)(F+B) and interleaved with V = 2 and 4 (P-1)(F+B)/V, the V-fold
 * shorter fill and drain of Megatron's schedule. ZB-H1 for P = 2, 4, 8 and M = 1 .. 16 with F = B = W and F =
 * B = 2W idles (P-1)(F+B) - (min(M, P)-1)·W ((P-1)(F+B-W) when M >= P, Qi
 * et al.), within 0.002 of the step, and its step is at most 1F1B's. On
 * every rank the five terms sum to its finish (1e-9 relative), and the step
 * is at least every rank's compute.
 *
 * Thread-ranks outnumbering the host's cores (test_busy_share): compute is
 * stretched by the share of the ranks busy at once, each rank busy for its
 * compute and the communication beside it.
 *
 * An async all-reduce under SC_ASYNC_INLINE_BYTES started with nothing in
 * flight on its queue runs on a CPU rank's compute thread (test_inline_start,
 * runtime/session.c): the step waits for all of it; at 64 KiB, behind
 * another start, or on a GPU it hides behind the GEMM after it.
 *
 * A profile's sync row with call_per_compute lengthens each meeting by
 * that rate times the compute since the one before (test_meeting_drift). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/dist_sim.h"
#include "codegen/pipe_schedule.h"
#include "passes/plan/cost.h"
#include "test_plan_util.h"

static int32_t add_buffer(sc_program *p, const char *name, sc_dtype t, int64_t n) {
  sc_buffer b = {.name = name, .kind = SC_BUF_TEMP, .dtype = t, .rank = 1, .dims = {n},
                 .bytes = n * (int64_t)sc_dtype_size(t), .offset = -1, .alias_of = -1,
                 .value = -1};
  return sc_program_add_buffer(p, &b);
}

static int32_t add_gemm(sc_program *p, int32_t a, int32_t b, int32_t c, int64_t batch,
                        const char *origin) {
  sc_step g = {.kind = SC_STEP_GEMM, .kernel = -1, .started = -1, .origin = origin};
  g.gemm = (sc_gemm){.a = a, .b = b, .c = c, .batch = batch, .m = 1024, .n = 1024, .k = 1024,
                     .alpha = 1, .bias = -1};
  int32_t k = sc_program_add_step(p, &g);
  assert_true(k >= 0);
  return k;
}

/* The five terms of every rank sum to its finish; the step is the last
 * finish and at least every rank's compute. */
static void check_terms(const sc_dist_sim *s) {
  double last = 0;
  for (int32_t q = 0; q < s->n_ranks; q++) {
    const sc_dist_sim_rank *r = &s->ranks[q];
    double exposed = 0;
    for (int32_t j = 0; j < r->n_comm; j++) exposed += r->comm[j].exposed_s;
    assert_close(exposed, r->exposed_comm_s);
    assert_close(r->compute_s + r->recompute_s + r->optimizer_s + r->exposed_comm_s + r->bubble_s,
                 r->finish_s);
    /* (a sum of K runs' terms is rounded otherwise than their finish) */
    assert_true(s->step_time_s >= (r->compute_s + r->recompute_s + r->optimizer_s) * (1 - 1e-12));
    if (r->finish_s > last) last = r->finish_s;
  }
  assert_close(s->step_time_s, last);
  assert_close(s->ranks[s->critical].finish_s, s->step_time_s);
}

static sc_dist_program *tp8_program(sc_cluster *c, int32_t *a_id) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_mesh m;
  assert_int_equal(sc_mesh_parse("tp=8", &m, &d), SC_OK);
  assert_int_equal(sc_cluster_fit_mesh(c, &m, &d), SC_OK);
  sc_dist_program *dp = sc_dist_program_create(&m, 1);
  assert_non_null(dp);
  dp->schedule.microbatches = 2;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  dp->stages[0].program = p;
  *a_id = add_buffer(p, "A", SC_DTYPE_BF16, 1024 * 1024);
  return dp;
}

/* C = A @ B, check i, all-reduce C over tp (sync, or async with a second
 * GEMM E = A @ B before its WAIT), then F = C @ B. */
static sc_dist_program *program(sc_cluster *c, bool async) {
  int32_t a;
  sc_dist_program *dp = tp8_program(c, &a);
  sc_program *p = dp->stages[0].program;
  int64_t mm = 1024 * 1024;
  int32_t b = add_buffer(p, "B", SC_DTYPE_BF16, mm), cc = add_buffer(p, "C", SC_DTYPE_BF16, mm),
          e = add_buffer(p, "E", SC_DTYPE_BF16, mm), f = add_buffer(p, "F", SC_DTYPE_BF16, mm),
          ix = add_buffer(p, "i", SC_DTYPE_I64, 1024);
  add_gemm(p, a, b, cc, 1, "MatMul_1");
  sc_step ck = {.kind = SC_STEP_CHECK, .kernel = -1, .started = -1, .check = {ix, 10}};
  assert_true(sc_program_add_step(p, &ck) >= 0);
  sc_step ar = {.kind = SC_STEP_COMM, .kernel = -1, .started = -1};
  ar.comm = (sc_comm_step){.kind = SC_COMM_ALL_REDUCE, .in = cc, .out = cc, .pack = -1,
                           .unpack = -1, .count = mm, .axes = 1u, .group_size = 8,
                           .async = async};
  int32_t k = sc_program_add_step(p, &ar);
  add_gemm(p, a, b, e, 1, "MatMul_2");
  if (async) {
    sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = k};
    assert_true(sc_program_add_step(p, &w) >= 0);
  }
  add_gemm(p, cc, b, f, 1, "MatMul_3");
  return dp;
}

/* A GEMM whose operands are FP8 values (sc_gemm.fp8) is timed at the FP8
 * peak on a GPU that has one (the H100's: 1978.9 TFLOP/s, twice bf16's)
 * when cuBLASLt takes its layout, reading its 1-byte operands (the bytes
 * bound this one); as the f32
 * product it runs as otherwise (the A100, no FP8 peak; a layout that is
 * not "TN"). */
static void test_fp8_rate(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  int64_t mm = 1024 * 1024;
  int32_t a = add_buffer(p, "A", SC_DTYPE_F32, mm), b = add_buffer(p, "B", SC_DTYPE_F32, mm),
          c = add_buffer(p, "C", SC_DTYPE_BF16, mm), a8 = add_buffer(p, "A8", SC_DTYPE_F8E4M3FN, mm),
          b8 = add_buffer(p, "B8", SC_DTYPE_F8E4M3FN, mm);
  int32_t k = add_gemm(p, a, b, c, 1, "MatMul");
  sc_gemm *g = &p->steps[k].gemm;
  g->trans_b = true;
  g->lda = g->ldb = g->ldc = 1024;
  g->fp8 = true;
  g->a8 = a8;
  g->b8 = b8;
  sc_diag d = {0};
  sc_diag_clear(&d);
  double t[3], f;
  sc_cluster h100 = preset("h100-sxm:8x1"), a100 = preset("a100-80g:8x1");
  assert_int_equal(sc_dist_step_compute_time(&h100, p, &p->steps[k], &t[0], &f, &d), SC_OK);
  assert_int_equal(sc_dist_step_compute_time(&a100, p, &p->steps[k], &t[1], &f, &d), SC_OK);
  g->trans_b = false; /* not "TN": the f32 product on the H100 too */
  assert_int_equal(sc_dist_step_compute_time(&h100, p, &p->steps[k], &t[2], &f, &d), SC_OK);
  double flops = 2.0 * mm * 1024;
  assert_close(f, flops);
  double eff = sc_cost_gemm_efficiency(1024, 1024, 1024);
  /* the FP8 product reads 1 + 1 and writes 2 bytes an element: at this
   * size the H100's memory bounds it */
  double tc = flops / (1978.9e12 * eff), tm = 4.0 * mm / (3.35e12 * SC_COST_MEMORY_EFF);
  assert_close(t[0], tc > tm ? tc : tm);
  assert_true(t[0] < 0.1 * t[2]);
  assert_close(t[1], flops / (19.5e12 * eff));
  assert_close(t[2], flops / (66.9e12 * eff));
  sc_program_destroy(p);
}

static void test_overlap(void **state) {
  (void)state;
  sc_cluster c = preset("h100-sxm:8x1");
  sc_diag d = {0};
  sc_diag_clear(&d);
  int64_t mm = 1024 * 1024;
  double gemm = 2.0 * mm * 1024 / (989.4e12 * 0.8), check = 8192 / (3.35e12 * 0.8);
  double comm = 2.0 * 7 / 8 * 2 * mm / 450e9 + 14 * 3e-6;
  assert_true(comm > gemm); /* the async all-reduce outlasts the GEMM it hides behind */

  /* synchronous: everything summed */
  sc_dist_program *dp = program(&c, false);
  sc_dist_sim s;
  assert_int_equal(sc_dist_sim_run(dp, &c, &s, &d), SC_OK);
  assert_int_equal(s.n_ranks, 1);
  const sc_dist_sim_rank *r = &s.ranks[0];
  assert_close(r->flops, 2 * 3 * 2.0 * mm * 1024);
  assert_close(r->compute_s, 2 * (3 * gemm + check));
  assert_int_equal(r->n_comm, 1);
  assert_int_equal(r->comm[0].axes, 1u);
  assert_int_equal(r->comm[0].ops, 2);
  assert_close(r->comm[0].busy_s, 2 * comm);
  assert_close(r->comm[0].exposed_s, 2 * comm);
  assert_close(s.step_time_s, r->compute_s + r->busy_comm_s);
  assert_close(s.step_time_s, 2 * (3 * gemm + check + comm));
  assert_true(s.tokens == 0); /* no token ids */
  check_terms(&s);
  double summed = s.step_time_s;
  sc_dist_program_destroy(dp);

  /* async: the all-reduce runs beside the second GEMM */
  dp = program(&c, true);
  assert_int_equal(sc_dist_sim_run(dp, &c, &s, &d), SC_OK);
  r = &s.ranks[0];
  assert_close(r->compute_s, 2 * (3 * gemm + check));
  assert_close(r->comm[0].busy_s, 2 * comm);
  assert_close(r->comm[0].exposed_s, 2 * (comm - gemm));
  assert_close(s.step_time_s, 2 * (gemm + check + comm + gemm));
  assert_true(s.step_time_s <= summed);
  assert_true(s.step_time_s >= r->compute_s && s.step_time_s >= r->comm[0].busy_s);
  check_terms(&s);

  /* an f64 GEMM has no peak: an error naming the dtype and the step */
  sc_program *p = dp->stages[0].program;
  p->buffers[0].dtype = SC_DTYPE_F64;
  sc_diag_clear(&d);
  assert_int_equal(sc_dist_sim_run(dp, &c, &s, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "f64"));
  assert_non_null(strstr(d.msg, "step 0"));
  sc_dist_program_destroy(dp);
}

/* A training program's optimizer (what only "new:W" needs) and a
 * recompute clone's step, attributed as such; MFU counts neither clone.
 * Run 3 times a step (gradient accumulation), every term triples; told
 * which run is the last (an input "train:apply") and accumulating its
 * gradient ("new:accum:W"), the runs before the last skip the update. */
static void test_terms(void **state) {
  (void)state;
  sc_cluster c = preset("h100-sxm:8x1");
  sc_diag d = {0};
  sc_diag_clear(&d);
  int32_t a;
  sc_dist_program *dp = tp8_program(&c, &a);
  dp->schedule.microbatches = 1;
  sc_program *p = dp->stages[0].program;
  int64_t mm = 1024 * 1024;
  int32_t w = add_buffer(p, "W", SC_DTYPE_BF16, mm), y = add_buffer(p, "y", SC_DTYPE_BF16, mm),
          yr = add_buffer(p, "y/recompute", SC_DTYPE_BF16, mm),
          loss = add_buffer(p, "loss", SC_DTYPE_BF16, mm),
          gw = add_buffer(p, "grad:W", SC_DTYPE_BF16, mm),
          nw = add_buffer(p, "new:W", SC_DTYPE_BF16, mm);
  assert_int_equal(sc_program_add_input(p, a), SC_OK);
  assert_int_equal(sc_program_add_input(p, w), SC_OK);
  add_gemm(p, a, w, y, 1, "fwd");
  add_gemm(p, a, w, yr, 1, "fwd/recompute");
  add_gemm(p, yr, y, loss, 1, "bwd");
  add_gemm(p, yr, a, gw, 1, "bwd/w"); /* a gradient: backward, though only new:W reads it */
  add_gemm(p, w, gw, nw, 1, "train/7");
  assert_int_equal(sc_program_add_output(p, loss), SC_OK);
  assert_int_equal(sc_program_add_output(p, nw), SC_OK);
  sc_dist_sim s;
  assert_int_equal(sc_dist_sim_run(dp, &c, &s, &d), SC_OK);
  double gemm = 2.0 * mm * 1024 / (989.4e12 * 0.8);
  const sc_dist_sim_rank *r = &s.ranks[0];
  assert_close(r->compute_s, 3 * gemm);
  assert_close(r->recompute_s, gemm);
  assert_close(r->optimizer_s, gemm);
  assert_close(r->flops, 5 * 2.0 * mm * 1024);
  assert_close(r->model_flops, 4 * 2.0 * mm * 1024);
  assert_close(s.model_flops, 8 * 4 * 2.0 * mm * 1024); /* tp=8: eight GPUs */
  assert_close(sc_dist_sim_mfu(&s, &c, SC_CLUSTER_BF16),
               s.model_flops / (s.step_time_s * 8 * 989.4e12));
  check_terms(&s);

  /* gradient accumulation over 3 runs: every term 3 times, the rates
   * and the MFU unchanged */
  dp->schedule.runs = 3;
  sc_dist_sim s3;
  assert_int_equal(sc_dist_sim_run(dp, &c, &s3, &d), SC_OK);
  assert_close(s3.step_time_s, 3 * s.step_time_s);
  assert_close(s3.ranks[0].compute_s, 3 * r->compute_s);
  assert_close(s3.ranks[0].recompute_s, 3 * r->recompute_s);
  assert_close(s3.ranks[0].optimizer_s, 3 * r->optimizer_s);
  assert_close(s3.model_flops, 3 * s.model_flops);
  assert_close(s3.flops_per_s_per_gpu, s.flops_per_s_per_gpu);
  assert_close(sc_dist_sim_mfu(&s3, &c, SC_CLUSTER_BF16), sc_dist_sim_mfu(&s, &c, SC_CLUSTER_BF16));
  check_terms(&s3);

  int32_t apply = add_buffer(p, "train:apply", SC_DTYPE_BOOL, 1),
          acc = add_buffer(p, "new:accum:W", SC_DTYPE_BF16, mm);
  assert_int_equal(sc_program_add_input(p, apply), SC_OK);
  add_gemm(p, gw, a, acc, 1, "train/3");
  assert_int_equal(sc_program_add_output(p, acc), SC_OK);
  sc_dist_sim sa;
  assert_int_equal(sc_dist_sim_run(dp, &c, &sa, &d), SC_OK);
  /* every run: fwd, bwd, bwd/w, the accumulation; the update once */
  assert_close(sa.ranks[0].compute_s, 3 * 4 * gemm);
  assert_close(sa.ranks[0].recompute_s, 3 * gemm);
  assert_close(sa.ranks[0].optimizer_s, gemm);
  assert_close(sa.step_time_s, 3 * 5 * gemm + gemm);
  check_terms(&sa);
  sc_dist_program_destroy(dp);
}

/* ---- pipelines of equal stages ---- */

/* A pipelined training step by hand: C = P·V chunks; F_c reads a<c> (the
 * model's input x for c = 0) and makes a<c+1>; B_c reads a<C> (c = C-1)
 * or g<c+1> and makes g<c> (c > 0) and w<c>; W_c reads w<c>; each runs one
 * bf16 1024^3 GEMM of batch[phase - FORWARD] (0: none); the prepare, norm and
 * update pieces are empty. */
static sc_dist_program *pipeline(sc_cluster *c, sc_schedule_kind kind, int32_t P, int32_t V,
                                 int32_t M, const int64_t batch[3]) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  char spec[32];
  snprintf(spec, sizeof spec, "pp=%d", (int)P);
  sc_mesh m;
  assert_int_equal(sc_mesh_parse(spec, &m, &d), SC_OK);
  assert_int_equal(sc_cluster_fit_mesh(c, &m, &d), SC_OK);
  int32_t C = P * V;
  sc_dist_program *dp = sc_dist_program_create(&m, SC_PIPE_PHASES * C);
  assert_non_null(dp);
  sc_dist_program_set_roles(dp, 0, -1, -1);
  dp->pipe_chunks = C;
  dp->pipe_ranks = P;
  dp->schedule.kind = kind;
  dp->schedule.microbatches = M;
  dp->inputs = sc_arena_array(&dp->arena, 1, sizeof *dp->inputs);
  assert_non_null(dp->inputs);
  dp->inputs[0] = (sc_dist_value){.name = "x", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {1}};
  dp->n_inputs = 1;
  for (int32_t s = 0; s < dp->n_stages; s++) {
    sc_program *p = sc_program_create();
    assert_non_null(p);
    dp->stages[s].program = p;
    sc_pipe_phase ph = sc_pipe_piece_phase(C, s);
    int32_t k = sc_pipe_piece_chunk(C, s);
    if (ph != SC_PIPE_FORWARD && ph != SC_PIPE_BACKWARD && ph != SC_PIPE_WEIGHT) continue;
    char in[32], out1[32], out2[32] = "";
    if (ph == SC_PIPE_FORWARD) {
      snprintf(in, sizeof in, k ? "a%d" : "x", (int)k);
      snprintf(out1, sizeof out1, "a%d", (int)k + 1);
    } else if (ph == SC_PIPE_BACKWARD) {
      snprintf(in, sizeof in, k == C - 1 ? "a%d" : "g%d", (int)k + 1);
      snprintf(out1, sizeof out1, "w%d", (int)k);
      if (k > 0) snprintf(out2, sizeof out2, "g%d", (int)k);
    } else {
      snprintf(in, sizeof in, "w%d", (int)k);
      out1[0] = 0;
    }
    int64_t mm = 1024 * 1024;
    int32_t x = add_buffer(p, sc_arena_strdup(&dp->arena, in), SC_DTYPE_F32, 1);
    int32_t a = add_buffer(p, "A", SC_DTYPE_BF16, mm), b = add_buffer(p, "B", SC_DTYPE_BF16, mm),
            cc = add_buffer(p, "C", SC_DTYPE_BF16, mm);
    assert_int_equal(sc_program_add_input(p, x), SC_OK);
    int64_t n = batch[ph - SC_PIPE_FORWARD];
    if (n) add_gemm(p, a, b, cc, n, "piece");
    const char *outs[2] = {out1, out2};
    for (int i = 0; i < 2; i++)
      if (outs[i][0]) {
        int32_t o = add_buffer(p, sc_arena_strdup(&dp->arena, outs[i]), SC_DTYPE_F32, 1);
        assert_int_equal(sc_program_add_output(p, o), SC_OK);
      }
  }
  return dp;
}

/* The critical rank's bubble over the step. F, B, W of a chunk cost
 * batch[] GEMMs each. */
static double bubble_fraction(sc_schedule_kind kind, int32_t P, int32_t V, int32_t M,
                              const int64_t batch[3], sc_dist_sim *s) {
  sc_cluster c = preset("h100-sxm:8x1");
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_dist_program *dp = pipeline(&c, kind, P, V, M, batch);
  if (sc_dist_sim_run(dp, &c, s, &d) != SC_OK) fail_msg("%s", d.msg);
  sc_dist_program_destroy(dp);
  assert_int_equal(s->n_ranks, P);
  check_terms(s);
  const sc_dist_sim_rank *r = &s->ranks[s->critical];
  return r->bubble_s / s->step_time_s;
}

static void test_bubbles(void **state) {
  (void)state;
  const int32_t P = 4, M = 8;
  const double tol = 0.002;
  sc_dist_sim s;
  double want = (double)(P - 1) / (M + P - 1);
  /* a backward twice the forward, the weight gradients in it (the
   * formulas' model: one backward unit handed on when done); V chunks
   * share the same work */
  const int64_t one[3] = {2000, 4000, 0}, half[3] = {1000, 2000, 0},
                split[3] = {2000, 2000, 2000};
  double gpipe = bubble_fraction(SC_SCHEDULE_GPIPE, P, 1, M, one, &s);
  double gpipe_step = s.step_time_s;
  printf("gpipe: bubble %.5f of the step (formula %.5f)\n", gpipe, want);
  assert_true(gpipe > want - tol && gpipe < want + tol);
  double f1b1 = bubble_fraction(SC_SCHEDULE_1F1B, P, 1, M, one, &s);
  double f1b1_step = s.step_time_s;
  printf("1f1b: bubble %.5f of the step (formula %.5f)\n", f1b1, want);
  assert_true(f1b1 > want - tol && f1b1 < want + tol);
  /* the same bubble (1F1B saves memory, not time), up to the hand-offs */
  assert_true(f1b1_step < gpipe_step * (1 + 1e-3) && f1b1_step > gpipe_step * (1 - 1e-3));
  double want_v = (double)(P - 1) / (2 * M + P - 1);
  double inter = bubble_fraction(SC_SCHEDULE_INTERLEAVED, P, 2, M, half, &s);
  printf("interleaved V=2: bubble %.5f of the step (formula %.5f)\n", inter, want_v);
  assert_true(inter < f1b1);
  assert_true(inter > want_v - tol && inter < want_v + tol);
  /* the weight gradients apart, F = B = W = one unit t: a backward piece
   * hands its input gradient on before its W runs, so 1F1B's cool-down
   * chain passes B pieces only: bubble (P-1)(F+B) of a step M(F+B+W) +
   * (P-1)(F+B) (worked by hand for P = 4, M = 8: 30 t) */
  double split_1f1b = bubble_fraction(SC_SCHEDULE_1F1B, P, 1, M, split, &s);
  double want_1f1b = 2.0 * (P - 1) / (3.0 * M + 2.0 * (P - 1));
  printf("1f1b, W apart: bubble %.5f (formula %.5f)\n", split_1f1b, want_1f1b);
  assert_true(split_1f1b > want_1f1b - tol && split_1f1b < want_1f1b + tol);
  /* interleaved with the weight gradients apart, V chunks of 1/V the
   * work: the chain passes chunk B pieces only, as in 1F1B, and the
   * bubble is (P-1)(F+B)/V of a step M(F+B+W) + (P-1)(F+B)/V (Megatron's
   * (P-1)/(V·M), the W pieces not on it): 30 t for 1F1B, 27 t at V = 2,
   * 25.5 t at V = 4 (P = 4, M = 8) */
  for (int32_t V = 2; V <= 4; V += 2) {
    const int64_t part[3] = {2000 / V, 2000 / V, 2000 / V};
    double inter_w = bubble_fraction(SC_SCHEDULE_INTERLEAVED, P, V, M, part, &s);
    double want_w = 2.0 * (P - 1) / V / (3.0 * M + 2.0 * (P - 1) / V);
    printf("interleaved V=%d, W apart: bubble %.5f (formula %.5f)\n", (int)V, inter_w, want_w);
    assert_true(inter_w > want_w - tol && inter_w < want_w + tol);
  }
}

/* ZB-H1 (pipe_schedule.h) against 1F1B with the weight gradients apart, in
 * units t of one GEMM: F = B = W = t, and F = B = 2W. With B >= W its
 * bubble is (P-1)(F+B) - (min(M, P)-1)·W: the last rank holds its W pieces
 * to fill the waits of the steady state and runs without a gap from its
 * first forward, so for M >= P it is (P-1)(F+B-W) (Qi et al.: (P-1)F for
 * equal pieces, a third of the (P-1)(F+B+W) of 1F1B with the backward
 * whole), against 1F1B's (P-1)(F+B); never more than 1F1B's. */
static void test_zero_bubble(void **state) {
  (void)state;
  const double tol = 0.002;
  static const int32_t cases[][2] = {{2, 4}, {4, 4}, {4, 8}, {4, 16}, {8, 8}, {8, 16}, {4, 2},
                                     {8, 3}, {4, 1}};
  static const int64_t pieces[][3] = {{2000, 2000, 2000}, {2000, 2000, 1000}};
  sc_dist_sim s;
  for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      int32_t P = cases[i][0], M = cases[i][1];
      double F = (double)pieces[k][0], B = (double)pieces[k][1], W = (double)pieces[k][2];
      double work = M * (F + B + W);
      double zb = bubble_fraction(SC_SCHEDULE_ZB_H1, P, 1, M, pieces[k], &s);
      double zb_step = s.step_time_s;
      double f1b1 = bubble_fraction(SC_SCHEDULE_1F1B, P, 1, M, pieces[k], &s);
      double idle = (P - 1) * (F + B) - ((M < P ? M : P) - 1) * W;
      double want = idle / (work + idle);
      double want_1f1b = (P - 1) * (F + B) / (work + (P - 1) * (F + B));
      printf("F:B:W %g:%g:%g P %d M %d: zb-h1 bubble %.5f (formula %.5f), 1f1b %.5f (%.5f)\n",
             F, B, W, (int)P, (int)M, zb, want, f1b1, want_1f1b);
      assert_true(zb > want - tol && zb < want + tol);
      assert_true(f1b1 > want_1f1b - tol && f1b1 < want_1f1b + tol);
      assert_true(zb_step <= s.step_time_s * (1 + 1e-9));
      if (M >= P && k == 0) /* the paper's figure: (P-1)F, a third of (P-1)(F+B+W) */
        assert_true(zb < (P - 1) * F / (work + (P - 1) * F) + tol);
    }
}

/* The events of a traced run (sc_dist_sim_run_traced): each rank's
 * compute-queue events tile [0, finish] (no gap, no overlap), their sums
 * by kind are the rank's terms (the bubble among them), every forward and
 * backward piece of every microbatch is one event, a queue's transfers do
 * not overlap, and the figures are those of the run without a trace. */
static void check_trace(sc_schedule_kind kind, int32_t P, int32_t V, int32_t M) {
  sc_cluster c = preset("h100-sxm:8x1");
  sc_diag d = {0};
  sc_diag_clear(&d);
  const int64_t split[3] = {2000, 2000, 2000};
  sc_dist_program *dp = pipeline(&c, kind, P, V, M, split);
  sc_dist_sim plain, s;
  sc_dist_sim_trace tr;
  if (sc_dist_sim_run(dp, &c, &plain, &d) != SC_OK) fail_msg("%s", d.msg);
  if (sc_dist_sim_run_traced(dp, &c, &s, &tr, &d) != SC_OK) fail_msg("%s", d.msg);
  assert_true(s.step_time_s == plain.step_time_s);
  assert_true(tr.n > 0);
  const double eps = 1e-9 * s.step_time_s;
  for (int32_t q = 0; q < P; q++) {
    const sc_dist_sim_rank *r = &s.ranks[q];
    double at = 0, sums[SC_DIST_SIM_EV_KIND_COUNT] = {0}, qend[SC_DIST_SIM_MAX_GROUPS + 1] = {0};
    int32_t forwards = 0, backwards = 0;
    for (int64_t i = 0; i < tr.n; i++) {
      const sc_dist_sim_event *e = &tr.events[i];
      if (e->pipe_rank != q) continue;
      assert_true(e->end_s > e->start_s);
      if (e->queue != SC_DIST_SIM_QUEUE_COMPUTE) { /* a transfer queue: in order, apart */
        int32_t k = e->queue == SC_DIST_SIM_QUEUE_P2P ? 0 : 1 + e->queue;
        assert_true(k >= 0 && k <= tr.n_groups);
        assert_true(e->start_s >= qend[k] - eps);
        qend[k] = e->end_s;
        assert_true(e->kind == SC_DIST_SIM_EV_SEND || e->kind == SC_DIST_SIM_EV_COLLECTIVE);
        assert_true(e->bytes > 0);
        continue;
      }
      assert_true(e->start_s > at - eps && e->start_s < at + eps); /* no gap, no overlap */
      at = e->end_s;
      sums[e->kind] += e->end_s - e->start_s;
      if (e->kind == SC_DIST_SIM_EV_COMPUTE && e->phase == SC_PIPE_FORWARD) forwards++;
      if (e->kind == SC_DIST_SIM_EV_COMPUTE && e->phase == SC_PIPE_BACKWARD) backwards++;
      if (e->kind == SC_DIST_SIM_EV_COMPUTE) assert_true(e->mb >= 0 && e->mb < M);
    }
    printf("%s P %d V %d M %d rank %d: compute %.6g s, bubble %.6g s, finish %.6g s\n",
           sc_schedule_name(kind), (int)P, (int)V, (int)M, (int)q,
           sums[SC_DIST_SIM_EV_COMPUTE], sums[SC_DIST_SIM_EV_BUBBLE], r->finish_s);
    assert_true(at > r->finish_s - eps && at < r->finish_s + eps);
    assert_true(fabs(sums[SC_DIST_SIM_EV_COMPUTE] - r->compute_s) < eps);
    assert_true(fabs(sums[SC_DIST_SIM_EV_BUBBLE] - r->bubble_s) < eps);
    assert_true(fabs(sums[SC_DIST_SIM_EV_EXPOSED] - r->exposed_comm_s) < eps);
    assert_true(fabs(sums[SC_DIST_SIM_EV_COMPUTE] + sums[SC_DIST_SIM_EV_BUBBLE] +
                     sums[SC_DIST_SIM_EV_EXPOSED] + sums[SC_DIST_SIM_EV_RECOMPUTE] +
                     sums[SC_DIST_SIM_EV_OPTIMIZER] - r->finish_s) < eps);
    assert_int_equal(forwards, M * V);
    assert_int_equal(backwards, M * V);
    if (q < P - 1) assert_true(sums[SC_DIST_SIM_EV_BUBBLE] > 0); /* the warm-up's wait */
  }
  assert_true(fabs(s.ranks[s.critical].finish_s - s.step_time_s) < eps);
  sc_dist_sim_trace_free(&tr);
  assert_null(tr.events);
  sc_dist_program_destroy(dp);
}

static void test_trace(void **state) {
  (void)state;
  check_trace(SC_SCHEDULE_1F1B, 4, 1, 8);
  check_trace(SC_SCHEDULE_INTERLEAVED, 4, 2, 8);
  check_trace(SC_SCHEDULE_ZB_H1, 2, 1, 4);
}


/* Thread-ranks sharing the host's cores (the h100-sxm preset with 2 host
 * cores: 8 tp ranks, a share of 4, no profile): a program of GEMMs alone
 * keeps every rank computing the whole step, so its compute is 4 times
 * the unshared (exactly: the fixed point does not move). With a
 * synchronous all-reduce of 1 GiB after each of the three GEMMs (8.4 ms
 * each against the GEMMs' 5.4 ms alone), the ranks sleep through the
 * all-reduces and compute only part of the step: compute is stretched by
 * the share of the ranks busy at once, sc_cluster_core_share_busy(1 + 7u)
 * with u the rank's busy fraction of the step (within 3 %: the fixed
 * point stops when no stretch moves by 0.5 %), between 1 and 4 times
 * alone (2.76 here; 4 before the share counted the busy ranks). Started
 * asynchronously and waited for after a shorter GEMM (0.54 ms), an
 * all-reduce runs partly beside the compute, and that part counts as
 * busy: the stretch is that of the busy fraction counting it (3.40). */
static sc_dist_program *shared_program(sc_cluster *c, int n_comm, bool async) {
  int32_t a;
  sc_dist_program *dp = tp8_program(c, &a);
  sc_program *p = dp->stages[0].program;
  int64_t mm = 1024 * 1024, big = 512 * mm;
  int32_t b = add_buffer(p, "B", SC_DTYPE_BF16, mm), g = add_buffer(p, "G", SC_DTYPE_BF16, big);
  for (int i = 0; i < 3; i++) {
    int32_t out = add_buffer(p, i == 0 ? "C0" : i == 1 ? "C1" : "C2", SC_DTYPE_BF16, mm);
    add_gemm(p, a, b, out, 1000, "MatMul");
    if (i >= n_comm) continue;
    sc_step ar = {.kind = SC_STEP_COMM, .kernel = -1, .started = -1};
    ar.comm = (sc_comm_step){.kind = SC_COMM_ALL_REDUCE, .in = g, .out = g, .pack = -1,
                             .unpack = -1, .count = big, .axes = 1u, .group_size = 8,
                             .async = async};
    int32_t k = sc_program_add_step(p, &ar);
    assert_true(k >= 0);
    if (async) {
      add_gemm(p, a, b, out, 100, "MatMul_beside");
      sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = k};
      assert_true(sc_program_add_step(p, &w) >= 0);
    }
  }
  return dp;
}

static double busy_of(const sc_dist_sim *s) {
  const sc_dist_sim_rank *r = &s->ranks[0];
  double beside = r->busy_comm_s - r->exposed_comm_s;
  double u = (r->compute_s + r->optimizer_s + (beside > 0 ? beside : 0)) / s->step_time_s;
  return u < 1 ? u : 1;
}

static void test_busy_share(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  for (int n_comm = 0; n_comm <= 3; n_comm += 3)
    for (int async = 0; async <= (n_comm > 0); async++) {
      sc_cluster alone = preset("h100-sxm:8x1"), shared = alone;
      shared.host_cores = 2;
      assert_close(sc_cluster_core_share(&shared, 8), 4);
      sc_dist_program *dp = shared_program(&alone, n_comm, async);
      sc_dist_sim a, s;
      assert_int_equal(sc_dist_sim_run(dp, &alone, &a, &d), SC_OK);
      assert_int_equal(sc_dist_sim_run(dp, &shared, &s, &d), SC_OK);
      check_terms(&s);
      double stretch = s.ranks[0].compute_s / a.ranks[0].compute_s;
      if (n_comm == 0) {
        assert_close(stretch, 4);
      } else {
        double u = busy_of(&s), want = sc_cluster_core_share_busy(&shared, 1 + 7 * u);
        assert_true(u > 0.1 && u < 0.9);
        assert_true(fabs(stretch - want) < 0.03 * want);
        assert_true(stretch > 1.05 && stretch < 3.95);
        if (async) /* the hidden all-reduces count: more busy than the compute alone */
          assert_true(u > 1.05 * s.ranks[0].compute_s / s.step_time_s);
      }
      sc_dist_program_destroy(dp);
    }
}

/* [G async all-reduce of `big` f32 (0: none),] S async all-reduce of
 * `small` f32, E = A @ B 1000 times (a GEMM far longer than either),
 * WAIT S[, WAIT G]. */
static sc_dist_program *inline_program(sc_cluster *c, int64_t small, int64_t big) {
  int32_t a;
  sc_dist_program *dp = tp8_program(c, &a);
  sc_program *p = dp->stages[0].program;
  int64_t mm = 1024 * 1024, n[2] = {big, small};
  int32_t b = add_buffer(p, "B", SC_DTYPE_BF16, mm), e = add_buffer(p, "E", SC_DTYPE_BF16, mm),
          k[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    if (!n[i]) continue;
    int32_t g = add_buffer(p, i ? "S" : "G", SC_DTYPE_F32, n[i]);
    sc_step ar = {.kind = SC_STEP_COMM, .kernel = -1, .started = -1};
    ar.comm = (sc_comm_step){.kind = SC_COMM_ALL_REDUCE, .in = g, .out = g, .pack = -1,
                             .unpack = -1, .count = n[i], .axes = 1u, .group_size = 8,
                             .async = true};
    k[i] = sc_program_add_step(p, &ar);
    assert_true(k[i] >= 0);
  }
  add_gemm(p, a, b, e, 1000, "MatMul"); /* 2.7 ms */
  for (int i = 1; i >= 0; i--) {
    if (k[i] < 0) continue;
    sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = k[i]};
    assert_true(sc_program_add_step(p, &w) >= 0);
  }
  return dp;
}

static void test_inline_start(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cluster gpu = preset("h100-sxm:8x1"), cpu = gpu;
  snprintf(cpu.device_name, sizeof cpu.device_name, "cpu"); /* the CPU device's sessions */
  assert_false(sc_cluster_is_gpu(&cpu));
  int64_t under = SC_ASYNC_INLINE_BYTES / 4 - 1, at = SC_ASYNC_INLINE_BYTES / 4;
  struct {
    const sc_cluster *c;
    int64_t small, big;
    bool exposed; /* the small all-reduce runs on the compute thread */
  } cases[] = {{&cpu, under, 0, true},   {&cpu, at, 0, false}, {&gpu, under, 0, false},
               {&cpu, under, at, false}, {&cpu, 1, 0, true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sc_dist_program *dp = inline_program(&gpu, cases[i].small, cases[i].big);
    const sc_program *p = dp->stages[0].program;
    int32_t s = cases[i].big ? 1 : 0; /* the small start's step */
    assert_int_equal(sc_dist_async_inline(cases[i].c, p, &p->steps[s].comm),
                     cases[i].c == &cpu && cases[i].small < at);
    sc_dist_sim r;
    assert_int_equal(sc_dist_sim_run(dp, cases[i].c, &r, &d), SC_OK);
    check_terms(&r);
    const sc_dist_sim_rank *w = &r.ranks[0];
    assert_true(w->busy_comm_s > 0 && w->compute_s > 10 * w->busy_comm_s);
    if (cases[i].exposed) { /* the whole all-reduce, then the GEMM */
      assert_close(w->exposed_comm_s, w->busy_comm_s);
      assert_close(r.step_time_s, w->compute_s + w->busy_comm_s);
    } else { /* hidden behind the GEMM (behind G's when queued after it) */
      assert_true(w->exposed_comm_s == 0);
      assert_close(r.step_time_s, w->compute_s);
    }
    /* the synchronous step of the same program is never shorter */
    sc_program *q = dp->stages[0].program;
    for (int32_t k = 0; k < q->n_steps; k++)
      if (q->steps[k].kind == SC_STEP_COMM) q->steps[k].comm.async = false;
    assert_false(sc_dist_async_inline(&cpu, q, &q->steps[s].comm));
    sc_dist_sim y;
    assert_int_equal(sc_dist_sim_run(dp, cases[i].c, &y, &d), SC_OK);
    assert_close(y.step_time_s, w->compute_s + w->busy_comm_s);
    assert_true(y.step_time_s >= r.step_time_s * (1 - 1e-12));
    sc_dist_program_destroy(dp);
  }
}

/* A profile's sync row with call_per_compute: each meeting of thread-ranks
 * costs that many seconds more per second computed since the previous
 * one (program() over tp=8, one synchronous all-reduce a run: its gap is
 * the GEMM and check before it and the two GEMMs after it in the run
 * before, the whole run's compute), so the step grows by the rate times
 * the compute, or by call_max_s a meeting when that is less; no row for
 * the mesh's rank count, no change. */
static void test_meeting_drift(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cluster c = preset("h100-sxm:8x1");
  snprintf(c.device_name, sizeof c.device_name, "cpu"); /* thread-ranks' sessions */
  c.host_cores = 8;
  c.profile.threads = 1; /* what each of 8 ranks gets on 8 cores */
  c.profile.n_sync = 1;
  c.profile.sync[0] = (sc_profile_sync){.ranks = 8, .call_s = 1e-12, .stretch = 1};
  sc_dist_program *dp = program(&c, false);
  sc_dist_sim base, drift;
  assert_int_equal(sc_dist_sim_run(dp, &c, &base, &d), SC_OK);
  c.profile.sync[0].call_per_compute = 0.5;
  assert_int_equal(sc_dist_sim_run(dp, &c, &drift, &d), SC_OK);
  check_terms(&drift);
  const sc_dist_sim_rank *r = &drift.ranks[0];
  assert_true(r->compute_s > 0);
  assert_close(r->compute_s, base.ranks[0].compute_s);
  assert_close(drift.step_time_s - base.step_time_s, 0.5 * r->compute_s);
  assert_close(r->comm[0].busy_s - base.ranks[0].comm[0].busy_s, 0.5 * r->compute_s);
  c.profile.sync[0].call_max_s = 1e-6; /* the term capped: 1 us a meeting, two runs */
  sc_dist_sim capped;
  assert_int_equal(sc_dist_sim_run(dp, &c, &capped, &d), SC_OK);
  assert_true(0.5 * r->compute_s > 2e-6);
  assert_close(capped.step_time_s - base.step_time_s, 2e-6);
  c.profile.sync[0].ranks = 4; /* a row for another rank count: not used */
  sc_dist_sim other;
  assert_int_equal(sc_dist_sim_run(dp, &c, &other, &d), SC_OK);
  assert_true(other.step_time_s < drift.step_time_s);
  sc_dist_program_destroy(dp);
}

/* Thread-ranks outnumbering the host's cores: a collective among some of
 * them (4 of 8 on 2 cores) has its transfer stretched by the share of all
 * eight over the group's own (4 / 2 = 2): its copies and reductions are
 * the meeting ranks' work, time-sliced with the others' compute, where
 * the communicator's fit timed the group alone. The latency term is not
 * stretched; the whole group's collective, a host with cores for every
 * rank, and a cluster of devices are as the fit says. */
static void test_meet_share(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cluster alone = preset("h100-sxm:8x1"), shared = alone, roomy = alone;
  shared.host_cores = 2;
  roomy.host_cores = 8;
  assert_close(sc_cluster_meet_share(&shared, 8, 4), 2);
  assert_close(sc_cluster_meet_share(&shared, 8, 8), 1);
  assert_close(sc_cluster_meet_share(&roomy, 8, 4), 1);
  assert_close(sc_cluster_meet_share(&alone, 8, 4), 1);
  sc_dist_program *dp = program(&alone, false);
  sc_program *p = dp->stages[0].program;
  int32_t k = -1;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_COMM) k = i;
  assert_true(k >= 0);
  for (int64_t group = 8; group >= 4; group -= 4) {
    p->steps[k].comm.group_size = group;
    sc_coll_cost cc;
    double bytes = 2.0 * 1024 * 1024; /* C: 1 Mi bf16 */
    assert_int_equal(sc_cost_collective(&alone, SC_COLL_ALL_REDUCE, bytes,
                                        (sc_coll_group){group, 1}, &cc, &d),
                     SC_OK);
    assert_true(cc.transfer_s > 0 && cc.latency_s > 0);
    sc_dist_sim a, s, r;
    assert_int_equal(sc_dist_sim_run(dp, &alone, &a, &d), SC_OK);
    assert_int_equal(sc_dist_sim_run(dp, &shared, &s, &d), SC_OK);
    assert_int_equal(sc_dist_sim_run(dp, &roomy, &r, &d), SC_OK);
    check_terms(&s);
    double runs = dp->schedule.microbatches; /* one all-reduce a run */
    assert_close(a.ranks[0].comm[0].busy_s, runs * cc.seconds);
    assert_close(r.ranks[0].comm[0].busy_s, runs * cc.seconds);
    double want = group == 8 ? cc.seconds : cc.latency_s + 2 * cc.transfer_s;
    assert_close(s.ranks[0].comm[0].busy_s, runs * want);
  }
  sc_dist_program_destroy(dp);
}

/* The CPU's kernel features (sc_dist_kernel_features) of two hand-built
 * kernels, and their time through a profile's kernel model. */
static void test_kernel_features(void **state) {
  (void)state;
  sc_arena ar;
  sc_arena_init(&ar);
  sc_arena *A = &ar;
  /* softmax over rows of [64, 32]: three phases (max, sum of exp, store),
   * each a loop of 64 x 32 visits; max is 1 op, exp(v - m) 1 op + 1 exp,
   * the store e / s 2 ops (v - m again: each loop re-emits it) but not the
   * exp (the first loop keeps it in a row cache for the later ones) */
  kir_kernel *k = kir_kernel_create(A, "softmax_rows");
  k->outer_rank = 1;
  k->outer_dims[0] = 64;
  k->inner = 32;
  int32_t pin = kir_add_param(A, k, 0, SC_DTYPE_F32, 2048, false);
  int32_t pout = kir_add_param(A, k, 1, SC_DTYPE_F32, 2048, true);
  int32_t o = kir_var(A, k, 0), r = kir_var(A, k, KIR_INNER);
  int32_t idx = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, o, kir_const_i(A, k, SC_DTYPE_I64, 32)), r);
  int32_t v = kir_load(A, k, pin, idx);
  int32_t ph0 = kir_add_reduce(A, k, KIR_RED_MAX, SC_DTYPE_F32,
                               kir_binary(A, k, KIR_MAX, v, kir_const_f(A, k, SC_DTYPE_F32, -INFINITY)));
  int32_t e = kir_unary(A, k, KIR_EXP, kir_binary(A, k, KIR_SUB, v, kir_reg(A, k, ph0)));
  int32_t ph1 = kir_add_reduce(A, k, KIR_RED_SUM, SC_DTYPE_F32, e);
  assert_true(kir_add_store(A, k, pout, idx, kir_binary(A, k, KIR_DIV, e, kir_reg(A, k, ph1))) >= 0);
  double f[SC_PROFILE_KERNEL_TERMS];
  bool split;
  sc_dist_kernel_features(k, f, &split);
  assert_true(f[SC_PROFILE_KERNEL_ROW] == 3 * 64);
  assert_true(f[SC_PROFILE_KERNEL_OP] == (1 + 1 + 2) * 2048);
  assert_true(f[SC_PROFILE_KERNEL_TRANSCENDENTAL] == 2048);
  assert_true(f[SC_PROFILE_KERNEL_GATHER] == 0); /* unit stride along the inner index */
  assert_true(split == (3 * 2048 >= KIR_SPLIT_MIN_WORK));

  /* a transpose of [16, 64] into [64, 16], one element an outer point: the
   * load steps by 64 elements along the innermost loop (outer dim 1) */
  kir_kernel *t = kir_kernel_create(A, "transpose");
  t->outer_rank = 2;
  t->outer_dims[0] = 64;
  t->outer_dims[1] = 16;
  t->inner = 1;
  int32_t tin = kir_add_param(A, t, 0, SC_DTYPE_F32, 1024, false);
  int32_t tout = kir_add_param(A, t, 1, SC_DTYPE_F32, 1024, true);
  int32_t i0 = kir_var(A, t, 0), i1 = kir_var(A, t, 1);
  int32_t src = kir_binary(A, t, KIR_ADD, kir_binary(A, t, KIR_MUL, i1, kir_const_i(A, t, SC_DTYPE_I64, 64)), i0);
  int32_t dst = kir_binary(A, t, KIR_ADD, kir_binary(A, t, KIR_MUL, i0, kir_const_i(A, t, SC_DTYPE_I64, 16)), i1);
  assert_true(kir_add_store(A, t, tout, dst, kir_load(A, t, tin, src)) >= 0);
  sc_dist_kernel_features(t, f, &split);
  assert_true(f[SC_PROFILE_KERNEL_ROW] == 0 && f[SC_PROFILE_KERNEL_OP] == 0); /* no row */
  assert_true(f[SC_PROFILE_KERNEL_GATHER] == 1024);
  assert_false(split);

  /* a sum of squares over a [1000, 64] buffer read as one row of 64000:
   * the index (r mod 64) + (r div 64) * 64 is r again, a unit stride, no
   * gather (a gradient norm's kernel); with another divisor in the product
   * it is not */
  kir_kernel *q = kir_kernel_create(A, "sum_squares");
  q->outer_rank = 0;
  q->inner = 64000;
  int32_t qin = kir_add_param(A, q, 0, SC_DTYPE_F32, 64000, false);
  int32_t qout = kir_add_param(A, q, 1, SC_DTYPE_F32, 1, true);
  int32_t qr = kir_var(A, q, KIR_INNER), c64 = kir_const_i(A, q, SC_DTYPE_I64, 64);
  int32_t whole = kir_binary(A, q, KIR_ADD, kir_binary(A, q, KIR_MOD, qr, c64),
                             kir_binary(A, q, KIR_MUL, kir_binary(A, q, KIR_DIV, qr, c64), c64));
  int32_t qv = kir_load(A, q, qin, whole);
  int32_t qph = kir_add_reduce(A, q, KIR_RED_SUM, SC_DTYPE_F32, kir_binary(A, q, KIR_MUL, qv, qv));
  assert_true(kir_add_store(A, q, qout, kir_const_i(A, q, SC_DTYPE_I64, 0), kir_reg(A, q, qph)) >= 0);
  sc_dist_kernel_features(q, f, &split);
  assert_true(f[SC_PROFILE_KERNEL_GATHER] == 0);
  assert_true(f[SC_PROFILE_KERNEL_OP] == 64000);
  assert_false(split); /* one outer point */
  kir_kernel *q2 = kir_kernel_create(A, "sum_squares_strided");
  q2->outer_rank = 0;
  q2->inner = 64000;
  qin = kir_add_param(A, q2, 0, SC_DTYPE_F32, 128000, false);
  qout = kir_add_param(A, q2, 1, SC_DTYPE_F32, 1, true);
  qr = kir_var(A, q2, KIR_INNER), c64 = kir_const_i(A, q2, SC_DTYPE_I64, 64);
  int32_t c128 = kir_const_i(A, q2, SC_DTYPE_I64, 128);
  int32_t rows = kir_binary(A, q2, KIR_ADD, kir_binary(A, q2, KIR_MOD, qr, c64),
                            kir_binary(A, q2, KIR_MUL, kir_binary(A, q2, KIR_DIV, qr, c64), c128));
  qv = kir_load(A, q2, qin, rows);
  qph = kir_add_reduce(A, q2, KIR_RED_SUM, SC_DTYPE_F32, kir_binary(A, q2, KIR_MUL, qv, qv));
  assert_true(kir_add_store(A, q2, qout, kir_const_i(A, q2, SC_DTYPE_I64, 0), kir_reg(A, q2, qph)) >= 0);
  double f2[SC_PROFILE_KERNEL_TERMS];
  bool split2;
  sc_dist_kernel_features(q2, f2, &split2);
  assert_true(f2[SC_PROFILE_KERNEL_GATHER] == 64000);
  sc_dist_kernel_features(t, f, &split); /* the transpose's again, for the times below */

  /* the time: computing (1024 gathers x 1 ns = 1.024 us on one thread) above the
   * bytes (8 KiB / 1e10 = 0.82 us), plus the step overhead */
  sc_cluster c;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_preset("cpu:local", &c, &d), SC_OK);
  sc_profile p;
  memset(&p, 0, sizeof p);
  p.present = true;
  p.threads = 2;
  p.memory_bytes_per_s = 1e10;
  p.step_overhead_s = 1e-7;
  p.n_gemms = 1;
  p.gemms[0] = (sc_profile_gemm){.m = 1, .n = 1, .k = 1, .dtype = SC_CLUSTER_FP32,
                                 .seconds = 1e-6, .flops_per_s = 2e6};
  sc_cluster_apply_profile(&c, &p);
  double sec;
  /* without a kernel model: bytes alone */
  assert_int_equal(sc_cost_kernel_time(&c, 8192, f, split, &sec, &d), SC_OK);
  assert_true(fabs(sec - (8192 / 1e10 + 1e-7)) < 1e-15);
  c.profile.has_kernel = true;
  c.profile.kernel_s[SC_PROFILE_KERNEL_ROW] = 1e-12;
  c.profile.kernel_s[SC_PROFILE_KERNEL_OP] = 1e-12;
  c.profile.kernel_s[SC_PROFILE_KERNEL_TRANSCENDENTAL] = 1e-12;
  c.profile.kernel_s[SC_PROFILE_KERNEL_GATHER] = 1e-9;
  assert_int_equal(sc_cost_kernel_time(&c, 8192, f, split, &sec, &d), SC_OK);
  assert_true(fabs(sec - (1024 * 1e-9 + 1e-7)) < 1e-15);
  /* split over the pool: half the computing time, the bytes now longer */
  assert_int_equal(sc_cost_kernel_time(&c, 8192, f, true, &sec, &d), SC_OK);
  assert_true(fabs(sec - (8192 / 1e10 + 1e-7)) < 1e-15);
  /* one thread's measured bandwidth (4e9): what an unsplit kernel streams
   * at, 8 KiB / 4e9 = 2.048 us above the 1.024 us of gathers; a split one
   * keeps the pool's */
  c.profile.memory_thread_bytes_per_s = 4e9;
  assert_int_equal(sc_cost_kernel_time(&c, 8192, f, false, &sec, &d), SC_OK);
  assert_true(fabs(sec - (8192 / 4e9 + 1e-7)) < 1e-15);
  assert_int_equal(sc_cost_kernel_time(&c, 8192, f, true, &sec, &d), SC_OK);
  assert_true(fabs(sec - (8192 / 1e10 + 1e-7)) < 1e-15);
  sc_arena_free(&ar);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp8_rate),
      cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_meeting_drift),
      cmocka_unit_test(test_meet_share),
      cmocka_unit_test(test_terms),
      cmocka_unit_test(test_bubbles),
      cmocka_unit_test(test_zero_bubble),
      cmocka_unit_test(test_trace),
      cmocka_unit_test(test_busy_share),
      cmocka_unit_test(test_inline_start),
      cmocka_unit_test(test_kernel_features),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
