/* test_lower_linalg.c — the lowerings of MatMul, Gemm, Conv and the pools
 * (codegen/lower_linalg.c). Each test builds one node on seeded random
 * constant inputs, lowers it alone, runs the program (kernels through
 * kir_interpret, GEMM steps through a naive loop written here) and compares
 * with the op's constant evaluation (MatMul, Gemm) or with a direct
 * implementation written here (Conv, pools, which have no eval; convs are
 * checked on both paths, the direct kernel and im2col + GEMM, and the test
 * asserts which one each case takes). Tolerance:
 * rtol 1e-5 — f32 sums of at most a few hundred products of values in
 * [-1, 1], accumulated in another order than the reference's double. */
#include <stdio.h>
#include <stdlib.h>

#include "codegen/lower_internal.h"
#include "test_util.h"
#include "lower_harness.h"

static int32_t rand_t(sc_graph *g, sc_dtype t, int32_t rank, const int64_t *dims) {
  int64_t numel = 1;
  for (int32_t i = 0; i < rank; i++) numel *= dims[i];
  void *d = malloc(8 * (size_t)(numel ? numel : 1));
  for (int64_t i = 0; i < numel; i++) {
    if (sc_dtype_is_float(t)) sc_store_f64(t, d, i, rng_val());
    else sc_store_i64(t, d, i, (int64_t)(rng_val() * 20) | 1);
  }
  int32_t v = cst(g, t, rank, dims, d);
  free(d);
  return v;
}
static int32_t rand_f32(sc_graph *g, int32_t rank, const int64_t *dims) {
  return rand_t(g, SC_DTYPE_F32, rank, dims);
}

/* MatMul of A, B: checked against eval; returns the GEMM step count. */
static int matmul_case(sc_graph *g, sc_dtype t, int32_t ra, const int64_t *da, int32_t rb,
                       const int64_t *db) {
  int32_t y, ins[2] = {rand_t(g, t, ra, da), rand_t(g, t, rb, db)};
  lowered L = check_vs_eval(g, node1(g, SC_OP_MATMUL, "mm", ins, 2, &y),
                            sc_dtype_is_float(t) ? 1e-5 : 0);
  int c = count_steps(&L, SC_STEP_GEMM);
  lowered_free(&L);
  return c;
}

static void test_matmul(void **state) {
  sc_graph *g = *state;
  rng_seed(11);
  int64_t a[2] = {20, 24}, b[2] = {24, 18};
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 2, a, 2, b), 1); /* 2-D: a GEMM */
  int64_t a4[4] = {2, 1, 16, 12}, b4[4] = {1, 3, 12, 10};    /* both broadcast */
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 4, a4, 4, b4), 1);
  int64_t a3[3] = {3, 16, 12}, b2[2] = {12, 24};             /* B shared */
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 3, a3, 2, b2), 1);
  int64_t b3[3] = {3, 12, 24}, a2[2] = {16, 12};             /* A shared */
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 2, a2, 3, b3), 1);
  int64_t v1[1] = {64}, m1[2] = {64, 70};                    /* 1-D x 2-D, 2-D x 1-D */
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 1, v1, 2, m1), 1);
  int64_t m2[3] = {2, 70, 64};
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 3, m2, 1, v1), 1);
  int64_t s1[2] = {3, 4}, s2[2] = {4, 5};                    /* tiny: kir kernel */
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 2, s1, 2, s2), 0);
  assert_int_equal(matmul_case(g, SC_DTYPE_F32, 1, s2, 1, s2), 0);
  int64_t i1[3] = {2, 3, 5}, i2[2] = {5, 4};                 /* ints, f64: kir */
  assert_int_equal(matmul_case(g, SC_DTYPE_I32, 3, i1, 2, i2), 0);
  assert_int_equal(matmul_case(g, SC_DTYPE_I64, 3, i1, 2, i2), 0);
  assert_int_equal(matmul_case(g, SC_DTYPE_F64, 3, i1, 2, i2), 0);
}

static void gemm_case(sc_graph *g, int ta, int tb, int32_t rc, const int64_t *dc,
                      double alpha, double beta, int64_t m, int64_t k, int64_t n,
                      int want_gemm) {
  int64_t da[2] = {ta ? k : m, ta ? m : k}, db[2] = {tb ? n : k, tb ? k : n};
  int32_t y, ins[3] = {rand_f32(g, 2, da), rand_f32(g, 2, db), rc >= 0 ? rand_f32(g, rc, dc) : -1};
  int32_t nid = node1(g, SC_OP_GEMM, "gemm", ins, rc >= 0 ? 3 : 2, &y);
  set_int(g, nid, "transA", ta);
  set_int(g, nid, "transB", tb);
  set_float(g, nid, "alpha", alpha);
  set_float(g, nid, "beta", beta);
  lowered L = check_vs_eval(g, nid, 1e-5);
  assert_int_equal(count_steps(&L, SC_STEP_GEMM), want_gemm);
  lowered_free(&L);
}

static void test_gemm(void **state) {
  sc_graph *g = *state;
  rng_seed(12);
  int64_t m = 17, k = 24, n = 19;
  int64_t cn[1] = {19}, cmn[2] = {17, 19}, cm1[2] = {17, 1}, c11[1] = {1};
  gemm_case(g, 0, 0, -1, NULL, 1.0, 1.0, m, k, n, 1);
  gemm_case(g, 1, 0, 1, cn, 0.5, 1.0, m, k, n, 1);   /* C [N]: row bias */
  gemm_case(g, 0, 1, 2, cmn, 1.0, 1.0, m, k, n, 1);  /* C [M,N]: full bias */
  gemm_case(g, 1, 1, 2, cm1, 1.5, -0.75, m, k, n, 1); /* C [M,1], beta: copied */
  gemm_case(g, 0, 0, 1, c11, 2.0, 0.5, m, k, n, 1);
  int64_t c31[2] = {3, 1};
  gemm_case(g, 1, 1, 2, c31, 1.5, -0.75, 3, 4, 5, 0); /* tiny: kir */
  gemm_case(g, 0, 1, 1, cn, 1.0, 1.0, 3, 4, 19, 0);
}

/* ---- Conv and pools against direct loops (2-D, NCHW) ---- */

typedef struct win2 {
  int64_t kh, kw, sh, sw, dh, dw, ph0, pw0, ph1, pw1;
} win2;

static void set_win(sc_graph *g, int32_t nid, const win2 *w, bool kernel_attr) {
  int64_t k[2] = {w->kh, w->kw}, s[2] = {w->sh, w->sw}, d[2] = {w->dh, w->dw},
          p[4] = {w->ph0, w->pw0, w->ph1, w->pw1};
  if (kernel_attr) set_ints(g, nid, "kernel_shape", 2, k);
  set_ints(g, nid, "strides", 2, s);
  if (w->dh != 1 || w->dw != 1) set_ints(g, nid, "dilations", 2, d);
  set_ints(g, nid, "pads", 4, p);
}

static const float *fdata(sc_graph *g, int32_t v) { return g->values[v].data; }

/* Kernels of the program whose name contains `part`. */
static int count_kernels(const lowered *L, const char *part) {
  int c = 0;
  for (int32_t i = 0; i < L->p->n_kernels; i++) c += strstr(L->p->kernels[i]->name, part) != NULL;
  return c;
}

/* Conv checked against direct loops; want_gemm / want_im2col: the GEMM
 * steps and im2col kernels the lowering must use (-1: don't care). */
static void conv_case_path(sc_graph *g, int64_t N, int64_t Cin, int64_t H, int64_t W,
                           int64_t M, int64_t group, const win2 *w, bool bias, int want_gemm,
                           int want_im2col) {
  int64_t dx[4] = {N, Cin, H, W}, dw[4] = {M, Cin / group, w->kh, w->kw}, db[1] = {M};
  int32_t y, ins[3] = {rand_f32(g, 4, dx), rand_f32(g, 4, dw), bias ? rand_f32(g, 1, db) : -1};
  int32_t nid = node1(g, SC_OP_CONV, "conv", ins, bias ? 3 : 2, &y);
  set_win(g, nid, w, false);
  set_int(g, nid, "group", group);
  if (infer(g, nid) != SC_OK) fail_msg("infer: %s", g->diag.msg);
  lowered L;
  if (lower_node(g, nid, &L) != SC_OK) fail_msg("lower: %s", L.diag.msg);
  execute(&L);
  const sc_value *yv = &g->values[y];
  const float *X = fdata(g, ins[0]), *Wt = fdata(g, ins[1]), *B = bias ? fdata(g, ins[2]) : NULL;
  const float *got = L.bufs[L.vb[y]];
  int64_t OH = yv->dims[2], OW = yv->dims[3], cpg = Cin / group, mpg = M / group;
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = B ? B[m] : 0;
          for (int64_t c = 0; c < cpg; c++)
            for (int64_t i = 0; i < w->kh; i++)
              for (int64_t j = 0; j < w->kw; j++) {
                int64_t ih = oh * w->sh - w->ph0 + i * w->dh, iw = ow * w->sw - w->pw0 + j * w->dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t ci = (m / mpg) * cpg + c;
                acc += (double)X[((n * Cin + ci) * H + ih) * W + iw] *
                       Wt[((m * cpg + c) * w->kh + i) * w->kw + j];
              }
          near(got[((n * M + m) * OH + oh) * OW + ow], acc, 1e-5);
        }
  if (want_gemm >= 0) assert_int_equal(count_steps(&L, SC_STEP_GEMM), want_gemm);
  if (want_im2col >= 0) assert_int_equal(count_kernels(&L, "im2col"), want_im2col);
  lowered_free(&L);
}

static void conv_case(sc_graph *g, int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t M,
                      int64_t group, const win2 *w, bool bias) {
  conv_case_path(g, N, Cin, H, W, M, group, w, bias, -1, -1);
}

static void test_conv(void **state) {
  sc_graph *g = *state;
  rng_seed(13);
  win2 plain = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  conv_case(g, 2, 3, 6, 7, 4, 1, &plain, true);
  win2 strided = {3, 2, 2, 3, 2, 1, 2, 0, 1, 2}; /* stride, dilation, asymmetric pads */
  conv_case(g, 1, 4, 9, 8, 6, 2, &strided, true);
  win2 dw = {3, 3, 1, 2, 1, 1, 0, 1, 0, 1}; /* depthwise, no bias */
  conv_case(g, 1, 4, 5, 6, 4, 4, &dw, false);
}

/* Convs big enough for im2col + GEMM (conv_gemm in lower_linalg.c): one
 * GEMM step each, an im2col kernel unless the conv is 1x1, stride 1,
 * unpadded; the tiny and depthwise ones stay direct kernels. */
static void test_conv_im2col(void **state) {
  sc_graph *g = *state;
  rng_seed(16);
  win2 plain = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  conv_case_path(g, 2, 3, 8, 8, 4, 1, &plain, true, 1, 1); /* batch N, A shared */
  win2 strided = {3, 2, 2, 3, 2, 1, 2, 0, 1, 2}; /* stride, dilation, asymmetric pads */
  conv_case_path(g, 2, 6, 13, 13, 6, 2, &strided, true, 1, 1);  /* groups x N: W copied */
  conv_case_path(g, 1, 6, 17, 17, 6, 2, &strided, false, 1, 1); /* groups, N = 1 */
  win2 one = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  conv_case_path(g, 2, 8, 8, 8, 8, 2, &one, true, 1, 0); /* 1x1: cols = input */
  conv_case_path(g, 2, 8, 8, 8, 8, 1, &one, false, 1, 0);
  win2 one_s2 = {1, 1, 2, 2, 1, 1, 0, 0, 0, 0};
  conv_case_path(g, 2, 8, 16, 16, 8, 1, &one_s2, true, 1, 1); /* 1x1 strided: im2col */
  win2 one_pad = {1, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  conv_case_path(g, 1, 8, 12, 12, 8, 1, &one_pad, true, 1, 1); /* 1x1 padded: im2col */
  win2 dw = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  conv_case_path(g, 1, 8, 16, 16, 8, 8, &dw, true, 0, 0); /* depthwise: direct */
  conv_case_path(g, 1, 2, 4, 4, 2, 1, &plain, true, 0, 0); /* tiny: direct */
}

/* with_indices: MaxPool's Indices too, each the flat position in X of the
 * first tap (row-major window order) holding the maximum; kernels > 0: the
 * lowering's kernel count (a MaxPool read at clamped edges: its inside
 * columns and its edge columns, no padded copy; else fill, copy, maximum) */
static void pool_case(sc_graph *g, sc_op op, const win2 *w, int include_pad, bool with_indices,
                      int32_t kernels) {
  int64_t N = 2, C = 3, H = 7, W = 6, dx[4] = {N, C, H, W};
  int32_t y, x = rand_f32(g, 4, dx), outs[2] = {outv(g), outv(g)};
  int32_t nid = with_indices ? sc_graph_add_node(g, op, "pool_idx", &x, 1, outs, 2)
                             : node1(g, op, "pool", &x, 1, &y);
  if (with_indices) y = outs[0];
  set_win(g, nid, w, true);
  if (op == SC_OP_AVERAGE_POOL) set_int(g, nid, "count_include_pad", include_pad);
  if (infer(g, nid) != SC_OK) fail_msg("infer: %s", g->diag.msg);
  lowered L;
  if (lower_node(g, nid, &L) != SC_OK) fail_msg("lower: %s", L.diag.msg);
  if (kernels > 0 && L.p->n_kernels != kernels)
    fail_msg("%d kernels, want %d", (int)L.p->n_kernels, (int)kernels);
  /* a max-pool read at clamped edges (no dilation, no Indices): its last
   * step carries the pool (sc_pool_geom), the other kernel as prep[0] */
  bool geom = op == SC_OP_MAX_POOL && !with_indices && w->dh == 1 && w->dw == 1;
  for (int32_t i = 0; i < L.p->n_steps; i++)
    assert_int_equal(L.p->steps[i].pool.on, geom && i == L.p->n_steps - 1);
  if (geom) {
    const sc_pool_geom *v = &L.p->steps[L.p->n_steps - 1].pool;
    const sc_value *yv = &g->values[y];
    assert_int_equal(v->x, L.vb[x]);
    assert_int_equal(v->y, L.vb[y]);
    assert_int_equal(v->prep[0], L.p->n_kernels == 2 ? 0 : -1);
    assert_int_equal(v->prep[1], -1);
    int64_t want[] = {N, C, H, W, w->kh, w->kw, w->sh, w->sw, w->ph0, w->pw0, yv->dims[2],
                      yv->dims[3]};
    int64_t got[] = {v->n, v->c, v->h, v->w, v->kh, v->kw, v->sh, v->sw, v->pt, v->pl, v->oh,
                     v->ow};
    assert_memory_equal(got, want, sizeof want);
    /* the far padding the last window reaches: ONNX's sizes with it */
    assert_true(v->pb >= 0 && v->pb < v->kh && v->pr >= 0 && v->pr < v->kw);
    assert_int_equal((v->h + v->pt + v->pb - v->kh) / v->sh + 1, v->oh);
    assert_int_equal((v->w + v->pl + v->pr - v->kw) / v->sw + 1, v->ow);
  }
  execute(&L);
  const sc_value *yv = &g->values[y];
  const float *X = fdata(g, x), *got = L.bufs[L.vb[y]];
  const int64_t *got_i = with_indices ? L.bufs[L.vb[outs[1]]] : NULL;
  int64_t OH = yv->dims[2], OW = yv->dims[3];
  for (int64_t nc = 0; nc < N * C; nc++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        double sum = 0, mx = -INFINITY, cnt = 0, cnt_pad = 0;
        int64_t at = -1;
        for (int64_t i = 0; i < w->kh; i++)
          for (int64_t j = 0; j < w->kw; j++) {
            int64_t ih = oh * w->sh - w->ph0 + i * w->dh, iw = ow * w->sw - w->pw0 + j * w->dw;
            if (ih >= -w->ph0 && ih < H + w->ph1 && iw >= -w->pw0 && iw < W + w->pw1) cnt_pad++;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double v = X[(nc * H + ih) * W + iw];
            sum += v;
            cnt++;
            if (v > mx) mx = v, at = (nc * H + ih) * W + iw;
          }
        double want = op == SC_OP_MAX_POOL ? mx : sum / (include_pad ? cnt_pad : cnt);
        near(got[(nc * OH + oh) * OW + ow], want, 1e-5);
        if (got_i) assert_int_equal(got_i[(nc * OH + oh) * OW + ow], at);
      }
  lowered_free(&L);
}

static void test_pools(void **state) {
  sc_graph *g = *state;
  rng_seed(14);
  win2 w = {3, 2, 2, 1, 1, 1, 1, 0, 1, 1};
  pool_case(g, SC_OP_MAX_POOL, &w, 0, false, 2); /* clamped: columns 0..4, then 5 */
  pool_case(g, SC_OP_AVERAGE_POOL, &w, 0, false, 0);
  pool_case(g, SC_OP_AVERAGE_POOL, &w, 1, false, 0);
  win2 resnet = {3, 3, 2, 2, 1, 1, 1, 1, 1, 1}; /* 3x3 / 2, padding 1 */
  pool_case(g, SC_OP_MAX_POOL, &resnet, 0, false, 2);
  win2 wide = {2, 7, 1, 1, 1, 1, 1, 1, 0, 1}; /* a 7-wide window on 6 columns: no inside */
  pool_case(g, SC_OP_MAX_POOL, &wide, 0, false, 1);
  win2 dil = {2, 2, 1, 2, 2, 1, 1, 1, 0, 1};
  pool_case(g, SC_OP_MAX_POOL, &dil, 0, false, 3); /* dilated: the padded copy */
  /* MaxPool's Indices: pads, strides, dilations */
  pool_case(g, SC_OP_MAX_POOL, &w, 0, true, 0);
  pool_case(g, SC_OP_MAX_POOL, &dil, 0, true, 0);
}

static void test_global_pools(void **state) {
  sc_graph *g = *state;
  rng_seed(15);
  int64_t dx[4] = {2, 3, 5, 4};
  int32_t x = rand_f32(g, 4, dx);
  for (int op = 0; op < 2; op++) {
    int32_t y, nid = node1(g, op ? SC_OP_GLOBAL_MAX_POOL : SC_OP_GLOBAL_AVERAGE_POOL, "gp",
                           &x, 1, &y);
    assert_int_equal(infer(g, nid), SC_OK);
    lowered L;
    if (lower_node(g, nid, &L) != SC_OK) fail_msg("lower: %s", L.diag.msg);
    execute(&L);
    const float *X = fdata(g, x), *got = L.bufs[L.vb[y]];
    for (int64_t nc = 0; nc < 6; nc++) {
      double sum = 0, mx = -INFINITY;
      for (int64_t i = 0; i < 20; i++) {
        sum += X[nc * 20 + i];
        if (X[nc * 20 + i] > mx) mx = X[nc * 20 + i];
      }
      near(got[nc], op ? mx : sum / 20, 1e-6);
    }
    lowered_free(&L);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_matmul, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_gemm, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_conv, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_conv_im2col, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_pools, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_global_pools, setup_graph, teardown_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
