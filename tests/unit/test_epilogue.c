/* test_epilogue.c — library-call steps with fused epilogues, end to end:
 * graph -> sc_compile_graph (canonical passes, fuse, lowering, memory plan)
 * -> sc_session_* on the CPU device (LLVM kernels, OpenBLAS GEMMs).
 *
 * Cases: MatMul -> Add(bias) -> Relu, 2-D and batched with a shared B (one
 * tall GEMM), where fusion must attach Add+Relu to the GEMM step as its
 * epilogue kernel; the same with both operands coming out of Transposes
 * that swap their last two axes, which the GEMM must read in place
 * (trans_a, trans_b); Conv(bias) -> Relu through im2col + GEMM (groups with
 * N > 1, so the weight copy and the strided batch are exercised by the real
 * BLAS, and the bias prefill with beta 1), a 1x1 conv that reads its
 * input directly, an unpadded 3x3 whose im2col reads the input and padded
 * ones whose im2col reads the input's padded copy. Each is compared with
 * naive loops in double precision on seeded random inputs. Tolerance 1e-4
 * relative (absolute below 1): f32 sums of at most 75 products of values in
 * [-1, 1], in another order. */
#include <stdlib.h>

#include "test_util.h"

#include "codegen/program.h"
#include "codegen/compile.h"
#include "runtime/runtime.h"

static float *rand_buf(int64_t n) {
  float *d = malloc(sizeof(float) * (size_t)n);
  assert_non_null(d);
  for (int64_t i = 0; i < n; i++) d[i] = rng_val();
  return d;
}

static int64_t numel(int32_t rank, const int64_t *dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* Compiles g (inputs x and, when w is not NULL, w; one output), runs it
 * and returns the output (malloc'd copy). *prog_out keeps the program for
 * inspection. */
static float *compile_and_run2(sc_graph *g, const float *x, int32_t xrank, const int64_t *xdims,
                               const float *w, int32_t wrank, const int64_t *wdims,
                               sc_program **prog_out) {
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_program *p = NULL;
  if (sc_compile_graph(g, &co, &p, &d) != SC_OK) fail_msg("compile: %s", d.msg);
  sc_session_opts so;
  sc_session_opts_init(&so);
  so.threads = 2;
  sc_session *s = NULL;
  if (sc_session_create(p, &so, &s, &d) != SC_OK) fail_msg("session: %s", d.msg);
  sc_tensor_view in[2], out;
  memset(in, 0, sizeof in);
  memset(&out, 0, sizeof out);
  int32_t nin = w ? 2 : 1;
  for (int32_t i = 0; i < nin; i++) {
    in[i].dtype = SC_DTYPE_F32;
    in[i].rank = i ? wrank : xrank;
    memcpy(in[i].dims, i ? wdims : xdims, sizeof(int64_t) * (size_t)in[i].rank);
    in[i].data = (void *)(i ? w : x);
  }
  assert_int_equal(p->n_inputs, nin);
  assert_int_equal(p->n_outputs, 1);
  if (sc_session_run(s, in, nin, &out, 1, &d) != SC_OK) fail_msg("run: %s", d.msg);
  int64_t n = numel(out.rank, out.dims);
  float *y = malloc(sizeof(float) * (size_t)n);
  assert_non_null(y);
  memcpy(y, out.data, sizeof(float) * (size_t)n);
  sc_session_destroy(s);
  *prog_out = p;
  return y;
}

static float *compile_and_run(sc_graph *g, const float *x, int32_t xrank, const int64_t *xdims,
                              sc_program **prog_out) {
  return compile_and_run2(g, x, xrank, xdims, NULL, 0, NULL, prog_out);
}

/* The GEMM steps of p, and how many of them carry an epilogue kernel. */
static int gemm_steps(const sc_program *p, int *with_epilogue) {
  int c = 0;
  *with_epilogue = 0;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_GEMM) {
      c++;
      *with_epilogue += p->steps[i].kernel >= 0;
    }
  return c;
}

/* The graph output relu(a @ w + b): MatMul, Add, Relu. */
static void matmul_bias_relu(sc_graph *g, int32_t a, int32_t w, int32_t b) {
  int32_t mm, ad, y;
  int32_t ins[2] = {a, w};
  node1(g, SC_OP_MATMUL, "mm", ins, 2, &mm);
  int32_t ins2[2] = {mm, b};
  node1(g, SC_OP_ADD, "add", ins2, 2, &ad);
  node1(g, SC_OP_RELU, "relu", &ad, 1, &y);
  assert_int_equal(sc_graph_add_output(g, y), SC_OK);
}

/* Y = relu(X[batch?, M, K] @ W[K, N] + b[N]) */
static void matmul_case(int64_t batch, int64_t M, int64_t K, int64_t N) {
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  g->opset = 21;
  int64_t xd[3] = {batch, M, K}, wd[2] = {K, N}, bd[1] = {N};
  int32_t xr = batch ? 3 : 2;
  const int64_t *xdims = batch ? xd : xd + 1;
  float *X = rand_buf(numel(xr, xdims)), *W = rand_buf(K * N), *B = rand_buf(N);
  int32_t x = inp(g, SC_DTYPE_F32, xr, xdims);
  int32_t w = cst(g, SC_DTYPE_F32, 2, wd, W), b = cst(g, SC_DTYPE_F32, 1, bd, B);
  matmul_bias_relu(g, x, w, b);
  sc_program *p;
  float *got = compile_and_run(g, X, xr, xdims, &p);
  int epi, ng = gemm_steps(p, &epi);
  assert_int_equal(ng, 1);
  assert_int_equal(epi, 1); /* Add + Relu fused as the GEMM's epilogue */
  assert_int_equal(p->n_steps, 1);
  int64_t rows = (batch ? batch : 1) * M;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = B[j];
      for (int64_t k = 0; k < K; k++) acc += (double)X[i * K + k] * W[k * N + j];
      near(got[i * N + j], acc > 0 ? acc : 0, 1e-4);
    }
  free(got);
  free(X);
  free(W);
  free(B);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_matmul_bias_relu(void **state) {
  (void)state;
  rng_seed(21);
  matmul_case(0, 6, 32, 40);
  matmul_case(3, 7, 24, 33); /* B shared over the batch */
}

/* Y = relu(Transpose(-XT) @ Transpose(WT) + b), XT [batch?, K, M] and WT
 * [batch?, N, K] inputs (WT shared over the batch when wbatch is 0; an
 * input, as a constant's Transpose would be folded at compile time), both
 * transposed by a perm that swaps the last two axes (perm attribute given,
 * or the default at rank 2). Fusion puts both Transposes into the MatMul's
 * group and the GEMM reads XT and WT in place (trans_a, trans_b): one step,
 * no transposed copy. The Neg must stay out of that group (the GEMM reads
 * its output from a buffer). With perm_b3 (rank-3 WT, perm [2, 1, 0]: not a swap of
 * the last two axes), the Transpose of WT stays a kernel of its own. */
static void transposed_case(int64_t batch, int64_t wbatch, int64_t M, int64_t K, int64_t N,
                            bool perm_b3) {
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  g->opset = 21;
  int32_t xr = batch ? 3 : 2, wr = wbatch || perm_b3 ? 3 : 2;
  int64_t xd[3] = {batch, K, M}, wd[3] = {wbatch, N, K}, bd[1] = {N};
  if (perm_b3) wd[0] = N, wd[1] = K, wd[2] = 1; /* [N, K, 1] -> [1, K, N] */
  const int64_t *xdims = batch ? xd : xd + 1, *wdims = wbatch || perm_b3 ? wd : wd + 1;
  float *XT = rand_buf(numel(xr, xdims)), *WT = rand_buf(numel(wr, wdims)), *B = rand_buf(N);
  int32_t x = inp(g, SC_DTYPE_F32, xr, xdims);
  int32_t w = inp(g, SC_DTYPE_F32, wr, wdims), b = cst(g, SC_DTYPE_F32, 1, bd, B);
  int32_t xn, xt, wt;
  node1(g, SC_OP_NEG, "neg", &x, 1, &xn); /* its own kernel: the GEMM reads its output */
  int32_t tx = node1(g, SC_OP_TRANSPOSE, "tx", &xn, 1, &xt);
  int64_t perm3[3] = {0, 2, 1}, rev3[3] = {2, 1, 0};
  if (batch) set_ints(g, tx, "perm", 3, perm3);
  int32_t tw = node1(g, SC_OP_TRANSPOSE, "tw", &w, 1, &wt);
  if (perm_b3) set_ints(g, tw, "perm", 3, rev3);
  else if (wbatch) set_ints(g, tw, "perm", 3, perm3);
  matmul_bias_relu(g, xt, wt, b);
  sc_program *p;
  float *got = compile_and_run2(g, XT, xr, xdims, WT, wr, wdims, &p);
  int epi, ng = gemm_steps(p, &epi);
  assert_int_equal(ng, 1);
  assert_int_equal(epi, 1);
  const sc_gemm *gm = NULL;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_GEMM) gm = &p->steps[i].gemm;
  assert_true(gm->trans_a);
  assert_int_equal(gm->trans_b, !perm_b3);
  /* Neg's kernel, the GEMM, and the non-swap Transpose's kernel */
  assert_int_equal(p->n_steps, perm_b3 ? 3 : 2);
  int64_t nb = batch ? batch : 1;
  for (int64_t q = 0; q < nb; q++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = B[j];
        for (int64_t k = 0; k < K; k++) {
          double wv = WT[(wbatch ? q * N * K : 0) + j * K + k];
          acc -= (double)XT[q * K * M + k * M + i] * wv;
        }
        near(got[(q * M + i) * N + j], acc > 0 ? acc : 0, 1e-4);
      }
  free(got);
  free(XT);
  free(WT);
  free(B);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_matmul_transposed_operands(void **state) {
  (void)state;
  rng_seed(23);
  transposed_case(0, 0, 6, 32, 40, false); /* default perms at rank 2 */
  transposed_case(3, 3, 7, 24, 33, false); /* batched, perm [0, 2, 1] */
  transposed_case(3, 0, 5, 20, 36, false); /* B shared over the batch: no tall product */
  transposed_case(2, 0, 6, 16, 48, true);  /* [2, 1, 0] is no operand transpose */
}

/* Y = relu(conv(X[N, C, H, W], Wt[M, C/group, k, k], b[M])), square
 * stride/pad */
/* conv(X[N, C, H, H], Wt[M, C/group, k, k], b[M]) in double, square
 * stride/pad: out[N, M, OH, OH] (malloc'd), OH in *oh */
static double *conv_ref(const float *X, const float *Wt, const float *B, int64_t N, int64_t C,
                        int64_t H, int64_t M, int64_t group, int64_t k, int64_t stride,
                        int64_t pad, int64_t *oh_out) {
  int64_t cpg = C / group, mpg = M / group, OH = (H + 2 * pad - k) / stride + 1;
  double *out = malloc(sizeof(double) * (size_t)(N * M * OH * OH));
  assert_non_null(out);
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OH; ow++) {
          double acc = B[m];
          for (int64_t c = 0; c < cpg; c++)
            for (int64_t i = 0; i < k; i++)
              for (int64_t j = 0; j < k; j++) {
                int64_t ih = oh * stride - pad + i, iw = ow * stride - pad + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= H) continue;
                int64_t ci = (m / mpg) * cpg + c;
                acc += (double)X[((n * C + ci) * H + ih) * H + iw] *
                       Wt[((m * cpg + c) * k + i) * k + j];
              }
          out[((n * M + m) * OH + oh) * OH + ow] = acc;
        }
  *oh_out = OH;
  return out;
}

static void conv_case(int64_t N, int64_t C, int64_t H, int64_t M, int64_t group, int64_t k,
                      int64_t stride, int64_t pad) {
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  g->opset = 21;
  int64_t cpg = C / group;
  int64_t xd[4] = {N, C, H, H}, wd[4] = {M, cpg, k, k}, bd[1] = {M};
  float *X = rand_buf(numel(4, xd)), *Wt = rand_buf(numel(4, wd)), *B = rand_buf(M);
  int32_t x = inp(g, SC_DTYPE_F32, 4, xd);
  int32_t ins[3] = {x, cst(g, SC_DTYPE_F32, 4, wd, Wt), cst(g, SC_DTYPE_F32, 1, bd, B)};
  int32_t cv, y;
  int32_t nid = node1(g, SC_OP_CONV, "conv", ins, 3, &cv);
  int64_t ks[2] = {k, k}, st[2] = {stride, stride}, pd[4] = {pad, pad, pad, pad};
  set_ints(g, nid, "kernel_shape", 2, ks);
  set_ints(g, nid, "strides", 2, st);
  set_ints(g, nid, "pads", 4, pd);
  set_int(g, nid, "group", group);
  node1(g, SC_OP_RELU, "relu", &cv, 1, &y);
  assert_int_equal(sc_graph_add_output(g, y), SC_OK);
  sc_program *p;
  float *got = compile_and_run(g, X, 4, xd, &p);
  int epi, ng = gemm_steps(p, &epi);
  assert_int_equal(ng, 1);   /* im2col + GEMM, not the direct kernel */
  assert_int_equal(epi, 1);  /* Relu fused as the GEMM's epilogue */
  int64_t OH;
  double *want = conv_ref(X, Wt, B, N, C, H, M, group, k, stride, pad, &OH);
  for (int64_t i = 0; i < N * M * OH * OH; i++) near(got[i], want[i] > 0 ? want[i] : 0, 1e-4);
  free(want);
  free(got);
  free(X);
  free(Wt);
  free(B);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

/* Conv(bias) -> Relu -> MaxPool 3x3 / 2, pads 1 (ResNet's stem): the Relu
 * is the convolution's epilogue (fusion leaves it to the Conv rather than
 * inlining it into the max-pool kernel), and the max-pool's last step
 * carries the pool (sc_pool_geom) on the Relu's output buffer. Then
 * MaxPool(Relu(c) + c): the convolution's output has two uses, the Relu
 * and the Add join the max-pool kernel as its producers, and that kernel
 * carries no pool. */
static void conv_relu_pool_case(bool twice) {
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  g->opset = 21;
  int64_t N = 2, C = 3, H = 9, M = 4, PH = 5;
  int64_t xd[4] = {N, C, H, H}, wd[4] = {M, C, 3, 3}, bd[1] = {M};
  float *X = rand_buf(numel(4, xd)), *Wt = rand_buf(numel(4, wd)), *B = rand_buf(M);
  int32_t x = inp(g, SC_DTYPE_F32, 4, xd);
  int32_t ins[3] = {x, cst(g, SC_DTYPE_F32, 4, wd, Wt), cst(g, SC_DTYPE_F32, 1, bd, B)};
  int32_t cv, r, y;
  int32_t nid = node1(g, SC_OP_CONV, "conv", ins, 3, &cv);
  int64_t k3[2] = {3, 3}, s1[2] = {1, 1}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
  set_ints(g, nid, "kernel_shape", 2, k3);
  set_ints(g, nid, "strides", 2, s1);
  set_ints(g, nid, "pads", 4, p1);
  node1(g, SC_OP_RELU, "relu", &cv, 1, &r);
  if (twice) {
    int32_t rc[2] = {r, cv};
    node1(g, SC_OP_ADD, "add", rc, 2, &r);
  }
  int32_t pid = node1(g, SC_OP_MAX_POOL, "pool", &r, 1, &y);
  set_ints(g, pid, "kernel_shape", 2, k3);
  set_ints(g, pid, "strides", 2, s2);
  set_ints(g, pid, "pads", 4, p1);
  assert_int_equal(sc_graph_add_output(g, y), SC_OK);
  sc_program *p;
  float *got = compile_and_run(g, X, 4, xd, &p);
  int epi, ng = gemm_steps(p, &epi);
  assert_int_equal(ng, 1);
  assert_int_equal(epi, twice ? 0 : 1);
  int pools = 0;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_KERNEL && p->steps[i].pool.on) {
      pools++;
      assert_int_equal(p->steps[i].pool.c, M);
      assert_int_equal(p->steps[i].pool.oh, PH);
    }
  assert_int_equal(pools, twice ? 0 : 1);
  int64_t OH;
  double *c = conv_ref(X, Wt, B, N, C, H, M, 1, 3, 1, 1, &OH);
  for (int64_t i = 0; i < N * M * OH * OH; i++) /* the max-pool's input */
    c[i] = (c[i] > 0 ? c[i] : 0) + (twice ? c[i] : 0);
  for (int64_t nm = 0; nm < N * M; nm++)
    for (int64_t ph = 0; ph < PH; ph++)
      for (int64_t pw = 0; pw < PH; pw++) {
        double mx = -INFINITY;
        for (int64_t i = 0; i < 3; i++)
          for (int64_t j = 0; j < 3; j++) {
            int64_t ih = 2 * ph - 1 + i, iw = 2 * pw - 1 + j;
            if (ih >= 0 && ih < OH && iw >= 0 && iw < OH && c[(nm * OH + ih) * OH + iw] > mx)
              mx = c[(nm * OH + ih) * OH + iw];
          }
        near(got[(nm * PH + ph) * PH + pw], mx, 1e-4);
      }
  free(c);
  free(got);
  free(X);
  free(Wt);
  free(B);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_conv_relu_max_pool(void **state) {
  (void)state;
  rng_seed(31);
  conv_relu_pool_case(false);
  conv_relu_pool_case(true);
}

static void test_conv_bias_relu(void **state) {
  (void)state;
  rng_seed(22);
  conv_case(2, 6, 9, 8, 2, 3, 2, 1); /* groups x batch: W copied, im2col */
  conv_case(3, 4, 10, 6, 1, 3, 1, 1); /* batch over N, W shared */
  conv_case(2, 8, 8, 12, 2, 1, 1, 0); /* 1x1: the input is the GEMM's B */
  conv_case(2, 4, 11, 6, 1, 3, 2, 0); /* unpadded 3x3: im2col reads x directly */
  conv_case(1, 3, 7, 4, 1, 5, 1, 2); /* 5x5, pad 2: im2col reads the padded copy */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_bias_relu),
      cmocka_unit_test(test_matmul_transposed_operands),
      cmocka_unit_test(test_conv_bias_relu),
      cmocka_unit_test(test_conv_relu_max_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
