/* test_ops_nn.c — shape rules, costs and constant evaluation of the
 * neural-network ops (ir/op_nn.c), called directly through sc_ops[].
 *
 * Expected shapes are worked out by hand in the comments next to each case
 * (from the ONNX formulas, not from the code under test). Evaluations are
 * compared against naive reference loops written here on seeded random
 * inputs in [-1,-0.1] U [0.1,1]. Tolerance: eval accumulates in double and
 * rounds once to f32, the reference accumulates in double; so the results
 * differ by at most half an f32 ulp of the result, and we allow
 * 1e-6 * (sum of |terms| + 1), a bound that absorbs that rounding and
 * nothing more. NaN fails every comparison. */
#include <stdio.h>

#include "ir/op_util.h"
#include "test_util.h"

/* ---- helpers ---- */

/* A constant f32 tensor filled with seeded random values; returns the id and
 * the data through *out (arena-owned). */
static int32_t const_f32(sc_graph *g, const char *name, int32_t rank, const int64_t *dims,
                         const float **out) {
  int64_t k = 1;
  for (int32_t i = 0; i < rank; i++) k *= dims[i];
  float *buf = sc_arena_array(&g->arena, (size_t)(k ? k : 1), sizeof *buf);
  for (int64_t i = 0; i < k; i++) buf[i] = rng_val();
  int32_t id = sc_graph_add_value(g, name);
  assert_true(id >= 0);
  assert_int_equal(sc_value_set_data(g, id, SC_DTYPE_F32, rank, dims, buf,
                                     (uint64_t)k * sizeof *buf, false),
                   SC_OK);
  if (out) *out = buf;
  return id;
}

/* A node with n_out fresh outputs; ins may contain -1 (omitted input). */
static int32_t node(sc_graph *g, sc_op op, const char *name, const int32_t *ins,
                    int32_t n_in, int32_t n_out) {
  int32_t outs[4];
  for (int32_t i = 0; i < n_out; i++) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s_out%d", name, i);
    outs[i] = sc_graph_add_value(g, buf);
    assert_true(outs[i] >= 0);
  }
  int32_t id = sc_graph_add_node(g, op, name, ins, n_in, outs, n_out);
  assert_true(id >= 0);
  return id;
}

/* An INTS attribute from `count` int64_t arguments. */
static void set_ints_va(sc_graph *g, int32_t nid, const char *name, int64_t count, ...) {
  sc_attr *a = sc_node_add_attr(g, nid, name, SC_ATTR_INTS);
  assert_non_null(a);
  a->n = count;
  a->ints = sc_arena_array(&g->arena, (size_t)(count ? count : 1), sizeof(int64_t));
  va_list ap;
  va_start(ap, count);
  for (int64_t i = 0; i < count; i++) a->ints[i] = va_arg(ap, int64_t);
  va_end(ap);
}
#define I64(x) ((int64_t)(x))

static sc_cost cost(sc_graph *g, int32_t nid) {
  sc_cost c = {-1, -1};
  sc_node *n = sc_nod(g, nid);
  sc_ops[n->op].cost(g, n, &c);
  return c;
}

/* Output idx of node nid has dtype t and the given shape. */
static void check_out(sc_graph *g, int32_t nid, int32_t idx, sc_dtype t, int32_t rank, ...) {
  const sc_value *v = sc_node_output(g, sc_nod(g, nid), idx);
  assert_non_null(v);
  assert_int_equal(v->dtype, t);
  assert_int_equal(v->rank, rank);
  va_list ap;
  va_start(ap, rank);
  for (int32_t i = 0; i < rank; i++) assert_int_equal(v->dims[i], va_arg(ap, int64_t));
  va_end(ap);
}

/* infer fails with status st, the diagnostic names the node and contains
 * every given fragment. */
static void check_error(sc_graph *g, int32_t nid, sc_status st, const char *frag1,
                        const char *frag2) {
  sc_diag_clear(&g->diag);
  assert_int_equal(infer(g, nid), st);
  assert_int_equal(g->diag.status, st);
  assert_string_equal(g->diag.node, sc_nod(g, nid)->name);
  if (frag1 && !strstr(g->diag.msg, frag1)) fail_msg("'%s' lacks '%s'", g->diag.msg, frag1);
  if (frag2 && !strstr(g->diag.msg, frag2)) fail_msg("'%s' lacks '%s'", g->diag.msg, frag2);
}

static void check_close(double got, double want, double scale) {
  if (isnan(got) || isnan(want) || fabs(got - want) > 1e-6 * (scale + 1.0))
    fail_msg("got %.9g, want %.9g (scale %g)", got, want, scale);
}

/* ---- MatMul ---- */

static void test_matmul_shapes(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  /* [8,64] x [64,128] -> [8,128] */
  int32_t a = shaped(g, "a", SC_DTYPE_F32, 2, (int64_t[]){8, 64});
  int32_t b = shaped(g, "b", SC_DTYPE_F32, 2, (int64_t[]){64, 128});
  int32_t mm = node(g, SC_OP_MATMUL, "mm", (int32_t[]){a, b}, 2, 1);
  assert_int_equal(infer(g, mm), SC_OK);
  check_out(g, mm, 0, SC_DTYPE_F32, 2, I64(8), I64(128));
  sc_cost c = cost(g, mm);
  assert_true(c.flops == 2.0 * 8 * 64 * 128);
  assert_true(c.bytes == 4.0 * (8 * 64 + 64 * 128 + 8 * 128));

  /* batch broadcast: [2,1,3,4] x [5,4,6] -> [2,5,3,6] */
  int32_t a2 = shaped(g, "a2", SC_DTYPE_F32, 4, (int64_t[]){2, 1, 3, 4});
  int32_t b2 = shaped(g, "b2", SC_DTYPE_F32, 3, (int64_t[]){5, 4, 6});
  int32_t mm2 = node(g, SC_OP_MATMUL, "mm2", (int32_t[]){a2, b2}, 2, 1);
  assert_int_equal(infer(g, mm2), SC_OK);
  check_out(g, mm2, 0, SC_DTYPE_F32, 4, I64(2), I64(5), I64(3), I64(6));
  /* flops = 2 * batch(2*5) * M(3) * K(4) * N(6) */
  assert_true(cost(g, mm2).flops == 2.0 * 10 * 3 * 4 * 6);

  /* 1-D x 2-D: [4] x [2,4,6] -> [2,6] */
  int32_t v4 = shaped(g, "v4", SC_DTYPE_I64, 1, (int64_t[]){4});
  int32_t b3 = shaped(g, "b3", SC_DTYPE_I64, 3, (int64_t[]){2, 4, 6});
  int32_t mm3 = node(g, SC_OP_MATMUL, "mm3", (int32_t[]){v4, b3}, 2, 1);
  assert_int_equal(infer(g, mm3), SC_OK);
  check_out(g, mm3, 0, SC_DTYPE_I64, 2, I64(2), I64(6));

  /* 2-D x 1-D: [3,4] x [4] -> [3] */
  int32_t a4 = shaped(g, "a4", SC_DTYPE_I64, 2, (int64_t[]){3, 4});
  int32_t mm4 = node(g, SC_OP_MATMUL, "mm4", (int32_t[]){a4, v4}, 2, 1);
  assert_int_equal(infer(g, mm4), SC_OK);
  check_out(g, mm4, 0, SC_DTYPE_I64, 1, I64(3));

  /* 1-D x 1-D: dot product, rank 0 */
  int32_t mm5 = node(g, SC_OP_MATMUL, "mm5", (int32_t[]){v4, v4}, 2, 1);
  assert_int_equal(infer(g, mm5), SC_OK);
  check_out(g, mm5, 0, SC_DTYPE_I64, 0);
  sc_graph_destroy(g);
}

static void test_matmul_errors(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t a = shaped(g, "a", SC_DTYPE_F32, 2, (int64_t[]){8, 64});
  int32_t b = shaped(g, "b", SC_DTYPE_F32, 2, (int64_t[]){32, 16});
  int32_t mm = node(g, SC_OP_MATMUL, "MatMul_12", (int32_t[]){a, b}, 2, 1);
  check_error(g, mm, SC_ERR_INVALID, "inner dims 64 and 32 differ", NULL);
  assert_string_equal(g->diag.node, "MatMul_12");
  assert_string_equal(g->diag.op, "MatMul");

  /* batch dims 3 and 4 do not broadcast */
  int32_t a2 = shaped(g, "a2", SC_DTYPE_F32, 3, (int64_t[]){3, 2, 5});
  int32_t b2 = shaped(g, "b2", SC_DTYPE_F32, 3, (int64_t[]){4, 5, 2});
  int32_t mm2 = node(g, SC_OP_MATMUL, "mm2", (int32_t[]){a2, b2}, 2, 1);
  check_error(g, mm2, SC_ERR_INVALID, "3", "4");

  /* dtypes differ */
  int32_t c = shaped(g, "c", SC_DTYPE_F16, 2, (int64_t[]){64, 16});
  int32_t mm3 = node(g, SC_OP_MATMUL, "mm3", (int32_t[]){a, c}, 2, 1);
  check_error(g, mm3, SC_ERR_INVALID, "f32", "f16");

  /* scalar operand */
  int32_t s = shaped(g, "s", SC_DTYPE_F32, 0, NULL);
  int32_t mm4 = node(g, SC_OP_MATMUL, "mm4", (int32_t[]){s, a}, 2, 1);
  check_error(g, mm4, SC_ERR_INVALID, "scalar", NULL);
  sc_graph_destroy(g);
}

/* Reference: C[b] = A[b mod batchA] x B[b mod batchB], explicit loops. */
static void test_matmul_eval(void **state) {
  (void)state;
  rng_seed(11);
  sc_graph *g = sc_graph_create("t");
  /* [2,1,3,4] x [3,4,5] -> [2,3,3,5] */
  const float *A, *B;
  int32_t a = const_f32(g, "a", 4, (int64_t[]){2, 1, 3, 4}, &A);
  int32_t b = const_f32(g, "b", 3, (int64_t[]){3, 4, 5}, &B);
  int32_t mm = node(g, SC_OP_MATMUL, "mm", (int32_t[]){a, b}, 2, 1);
  assert_int_equal(infer(g, mm), SC_OK);
  assert_int_equal(eval(g, mm), SC_OK);
  const sc_value *y = sc_node_output(g, sc_nod(g, mm), 0);
  assert_true(sc_value_has_data(y));
  const float *Y = y->data;
  for (int i0 = 0; i0 < 2; i0++)
    for (int i1 = 0; i1 < 3; i1++)
      for (int m = 0; m < 3; m++)
        for (int nn = 0; nn < 5; nn++) {
          double acc = 0, scale = 0;
          for (int k = 0; k < 4; k++) {
            double t = (double)A[i0 * 12 + m * 4 + k] * B[i1 * 20 + k * 5 + nn];
            acc += t;
            scale += fabs(t);
          }
          check_close(Y[((i0 * 3 + i1) * 3 + m) * 5 + nn], acc, scale);
        }

  /* 2-D [7,9] x [9,6] */
  const float *A2, *B2;
  int32_t a2 = const_f32(g, "a2", 2, (int64_t[]){7, 9}, &A2);
  int32_t b2 = const_f32(g, "b2", 2, (int64_t[]){9, 6}, &B2);
  int32_t mm2 = node(g, SC_OP_MATMUL, "mm2", (int32_t[]){a2, b2}, 2, 1);
  assert_int_equal(infer(g, mm2), SC_OK);
  assert_int_equal(eval(g, mm2), SC_OK);
  const float *Y2 = sc_node_output(g, sc_nod(g, mm2), 0)->data;
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < 6; j++) {
      double acc = 0, scale = 0;
      for (int k = 0; k < 9; k++) {
        acc += (double)A2[i * 9 + k] * B2[k * 6 + j];
        scale += fabs((double)A2[i * 9 + k] * B2[k * 6 + j]);
      }
      check_close(Y2[i * 6 + j], acc, scale);
    }

  /* 1-D [9] x [9,6] -> [6]: row 0 of a2 as a vector */
  int32_t v = sc_graph_add_value(g, "v");
  assert_int_equal(sc_value_set_data(g, v, SC_DTYPE_F32, 1, (int64_t[]){9}, A2,
                                     9 * sizeof(float), true), SC_OK);
  int32_t mm3 = node(g, SC_OP_MATMUL, "mm3", (int32_t[]){v, b2}, 2, 1);
  assert_int_equal(infer(g, mm3), SC_OK);
  assert_int_equal(eval(g, mm3), SC_OK);
  const float *Y3 = sc_node_output(g, sc_nod(g, mm3), 0)->data;
  for (int j = 0; j < 6; j++) check_close(Y3[j], Y2[j], 10);

  /* int32: [2,3] x [3,2], exact */
  int32_t ia[6], ib[6];
  for (int i = 0; i < 6; i++) {
    ia[i] = (int32_t)(rng_val() * 100);
    ib[i] = (int32_t)(rng_val() * 100);
  }
  int32_t ai = sc_graph_add_value(g, "ai"), bi = sc_graph_add_value(g, "bi");
  assert_int_equal(sc_value_set_data(g, ai, SC_DTYPE_I32, 2, (int64_t[]){2, 3}, ia,
                                     sizeof ia, true), SC_OK);
  assert_int_equal(sc_value_set_data(g, bi, SC_DTYPE_I32, 2, (int64_t[]){3, 2}, ib,
                                     sizeof ib, true), SC_OK);
  int32_t mmi = node(g, SC_OP_MATMUL, "mmi", (int32_t[]){ai, bi}, 2, 1);
  assert_int_equal(infer(g, mmi), SC_OK);
  assert_int_equal(eval(g, mmi), SC_OK);
  const int32_t *Yi = sc_node_output(g, sc_nod(g, mmi), 0)->data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      assert_int_equal(Yi[i * 2 + j],
                       ia[i * 3] * ib[j] + ia[i * 3 + 1] * ib[2 + j] + ia[i * 3 + 2] * ib[4 + j]);
  sc_graph_destroy(g);
}

static void test_matmul_eval_limit(void **state) {
  (void)state;
  rng_seed(5);
  sc_graph *g = sc_graph_create("t");
  /* [2048,1] x [1,1024]: 2^21 output elements > SC_FOLD_MAX_ELEMENTS */
  int32_t a = const_f32(g, "a", 2, (int64_t[]){2048, 1}, NULL);
  int32_t b = const_f32(g, "b", 2, (int64_t[]){1, 1024}, NULL);
  int32_t mm = node(g, SC_OP_MATMUL, "mm", (int32_t[]){a, b}, 2, 1);
  assert_int_equal(infer(g, mm), SC_OK);
  assert_int_equal(eval(g, mm), SC_ERR_LIMIT);
  assert_false(sc_value_has_data(sc_node_output(g, sc_nod(g, mm), 0)));
  sc_graph_destroy(g);
}

/* ---- Gemm ---- */

static void test_gemm_shapes(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  /* A^T: A is [K=5, M=3]; B^T: B is [N=4, K=5] -> Y [3,4] */
  int32_t a = shaped(g, "a", SC_DTYPE_F32, 2, (int64_t[]){5, 3});
  int32_t b = shaped(g, "b", SC_DTYPE_F32, 2, (int64_t[]){4, 5});
  int32_t c4 = shaped(g, "c4", SC_DTYPE_F32, 1, (int64_t[]){4});
  int32_t c31 = shaped(g, "c31", SC_DTYPE_F32, 2, (int64_t[]){3, 1});
  int32_t c3 = shaped(g, "c3", SC_DTYPE_F32, 1, (int64_t[]){3});
  int32_t ge = node(g, SC_OP_GEMM, "ge", (int32_t[]){a, b, c4}, 3, 1);
  set_int(g, ge, "transA", 1);
  set_int(g, ge, "transB", 1);
  assert_int_equal(infer(g, ge), SC_OK);
  check_out(g, ge, 0, SC_DTYPE_F32, 2, I64(3), I64(4));
  sc_cost c = cost(g, ge);
  assert_true(c.flops == 2.0 * 3 * 5 * 4 + 3 * 4);
  assert_true(c.bytes == 4.0 * (15 + 20 + 4 + 12));

  int32_t ge2 = node(g, SC_OP_GEMM, "ge2", (int32_t[]){a, b, c31}, 3, 1);
  set_int(g, ge2, "transA", 1);
  set_int(g, ge2, "transB", 1);
  assert_int_equal(infer(g, ge2), SC_OK);

  /* C [3] aligns with N=4: not broadcastable */
  int32_t ge3 = node(g, SC_OP_GEMM, "ge3", (int32_t[]){a, b, c3}, 3, 1);
  set_int(g, ge3, "transA", 1);
  set_int(g, ge3, "transB", 1);
  check_error(g, ge3, SC_ERR_INVALID, "[3]", "[3,4]");

  /* without transposes, [5,3] x [4,5]: inner 3 vs 4 */
  int32_t ge4 = node(g, SC_OP_GEMM, "ge4", (int32_t[]){a, b}, 2, 1);
  check_error(g, ge4, SC_ERR_INVALID, "inner dims 3 and 4 differ", NULL);

  /* no C: flops have no add term */
  int32_t ge5 = node(g, SC_OP_GEMM, "ge5", (int32_t[]){a, b, -1}, 3, 1);
  set_int(g, ge5, "transA", 1);
  set_int(g, ge5, "transB", 1);
  assert_int_equal(infer(g, ge5), SC_OK);
  assert_true(cost(g, ge5).flops == 2.0 * 3 * 5 * 4);

  /* rank-3 A */
  int32_t a3 = shaped(g, "a3", SC_DTYPE_F32, 3, (int64_t[]){1, 5, 3});
  int32_t ge6 = node(g, SC_OP_GEMM, "ge6", (int32_t[]){a3, b}, 2, 1);
  check_error(g, ge6, SC_ERR_INVALID, "rank 2", NULL);
  sc_graph_destroy(g);
}

static void test_gemm_eval(void **state) {
  (void)state;
  rng_seed(23);
  sc_graph *g = sc_graph_create("t");
  const int M = 3, K = 5, N = 4;
  const float *A, *B, *C;
  int32_t a = const_f32(g, "a", 2, (int64_t[]){K, M}, &A);  /* transA */
  int32_t b = const_f32(g, "b", 2, (int64_t[]){K, N}, &B);  /* no transB */
  int32_t c = const_f32(g, "c", 2, (int64_t[]){1, N}, &C);  /* row broadcast */
  int32_t ge = node(g, SC_OP_GEMM, "ge", (int32_t[]){a, b, c}, 3, 1);
  set_int(g, ge, "transA", 1);
  set_float(g, ge, "alpha", 0.75);
  set_float(g, ge, "beta", -2.0);
  assert_int_equal(infer(g, ge), SC_OK);
  check_out(g, ge, 0, SC_DTYPE_F32, 2, I64(M), I64(N));
  assert_int_equal(eval(g, ge), SC_OK);
  const float *Y = sc_node_output(g, sc_nod(g, ge), 0)->data;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0, scale = 0;
      for (int k = 0; k < K; k++) {
        acc += (double)A[k * M + i] * B[k * N + j];
        scale += fabs((double)A[k * M + i] * B[k * N + j]);
      }
      double want = 0.75 * acc - 2.0 * C[j];
      check_close(Y[i * N + j], want, scale + 2.0 * fabs(C[j]));
    }

  /* transB with a [M,1] column C */
  const float *B2, *C2;
  int32_t a2 = const_f32(g, "a2", 2, (int64_t[]){M, K}, NULL);
  const float *A2 = sc_val(g, a2)->data;
  int32_t b2 = const_f32(g, "b2", 2, (int64_t[]){N, K}, &B2);
  int32_t c2 = const_f32(g, "c2", 2, (int64_t[]){M, 1}, &C2);
  int32_t ge2 = node(g, SC_OP_GEMM, "ge2", (int32_t[]){a2, b2, c2}, 3, 1);
  set_int(g, ge2, "transB", 1);
  assert_int_equal(infer(g, ge2), SC_OK);
  assert_int_equal(eval(g, ge2), SC_OK);
  const float *Y2 = sc_node_output(g, sc_nod(g, ge2), 0)->data;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = C2[i], scale = fabs(C2[i]);
      for (int k = 0; k < K; k++) {
        acc += (double)A2[i * K + k] * B2[j * K + k];
        scale += fabs((double)A2[i * K + k] * B2[j * K + k]);
      }
      check_close(Y2[i * N + j], acc, scale);
    }
  sc_graph_destroy(g);
}

/* ---- Conv ---- */

/* Builds Conv(X, W[, B]) with X and W shapes given; returns the node. */
static int32_t conv(sc_graph *g, const char *name, int32_t rank, const int64_t *xd,
                    const int64_t *wd, bool bias) {
  char nb[80];
  snprintf(nb, sizeof nb, "%s_x", name);
  int32_t x = shaped(g, nb, SC_DTYPE_F32, rank, xd);
  snprintf(nb, sizeof nb, "%s_w", name);
  int32_t w = shaped(g, nb, SC_DTYPE_F32, rank, wd);
  int32_t b = -1;
  if (bias) {
    snprintf(nb, sizeof nb, "%s_b", name);
    b = shaped(g, nb, SC_DTYPE_F32, 1, (int64_t[]){wd[0]});
  }
  return node(g, SC_OP_CONV, name, (int32_t[]){x, w, b}, bias ? 3 : 2, 1);
}

static void test_conv_shapes(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  /* 3x3 pad 1 stride 1 keeps 32x32 */
  int32_t c1 = conv(g, "c1", 4, (int64_t[]){1, 3, 32, 32}, (int64_t[]){16, 3, 3, 3}, true);
  set_ints_va(g, c1, "pads", 4, I64(1), I64(1), I64(1), I64(1));
  assert_int_equal(infer(g, c1), SC_OK);
  check_out(g, c1, 0, SC_DTYPE_F32, 4, I64(1), I64(16), I64(32), I64(32));

  /* stride 2, no pad: floor((32-3)/2)+1 = 15 */
  int32_t c2 = conv(g, "c2", 4, (int64_t[]){1, 3, 32, 32}, (int64_t[]){16, 3, 3, 3}, false);
  set_ints_va(g, c2, "strides", 2, I64(2), I64(2));
  assert_int_equal(infer(g, c2), SC_OK);
  check_out(g, c2, 0, SC_DTYPE_F32, 4, I64(1), I64(16), I64(15), I64(15));

  /* dilation 2 (effective kernel 5), pad 2: 32+4-5+1 = 32; W side dilation 1,
   * pad 0: 20-3+1 = 18 */
  int32_t c3 = conv(g, "c3", 4, (int64_t[]){2, 3, 32, 20}, (int64_t[]){4, 3, 3, 3}, false);
  set_ints_va(g, c3, "dilations", 2, I64(2), I64(1));
  set_ints_va(g, c3, "pads", 4, I64(2), I64(0), I64(2), I64(0));
  assert_int_equal(infer(g, c3), SC_OK);
  check_out(g, c3, 0, SC_DTYPE_F32, 4, I64(2), I64(4), I64(32), I64(18));

  /* groups: C=8, group=4, W [4,2,3,3] -> [2,4,8,8] */
  int32_t c4 = conv(g, "c4", 4, (int64_t[]){2, 8, 10, 10}, (int64_t[]){4, 2, 3, 3}, false);
  set_int(g, c4, "group", 4);
  assert_int_equal(infer(g, c4), SC_OK);
  check_out(g, c4, 0, SC_DTYPE_F32, 4, I64(2), I64(4), I64(8), I64(8));

  /* SAME_UPPER, strides [2,3]: ceil(7/2)=4, ceil(9/3)=3 */
  int32_t c5 = conv(g, "c5", 4, (int64_t[]){1, 1, 7, 9}, (int64_t[]){2, 1, 3, 3}, false);
  set_string(g, c5, "auto_pad", "SAME_UPPER");
  set_ints_va(g, c5, "strides", 2, I64(2), I64(3));
  assert_int_equal(infer(g, c5), SC_OK);
  check_out(g, c5, 0, SC_DTYPE_F32, 4, I64(1), I64(2), I64(4), I64(3));

  /* VALID, stride 2: floor((7-3)/2)+1 = 3 */
  int32_t c5v = conv(g, "c5v", 4, (int64_t[]){1, 1, 7, 9}, (int64_t[]){2, 1, 3, 3}, false);
  set_string(g, c5v, "auto_pad", "VALID");
  set_ints_va(g, c5v, "strides", 2, I64(2), I64(2));
  assert_int_equal(infer(g, c5v), SC_OK);
  check_out(g, c5v, 0, SC_DTYPE_F32, 4, I64(1), I64(2), I64(3), I64(4));

  /* 1-D: (20 + 2 + 1 - 5) / 3 + 1 = 7 */
  int32_t c6 = conv(g, "c6", 3, (int64_t[]){1, 4, 20}, (int64_t[]){6, 4, 5}, false);
  set_ints_va(g, c6, "strides", 1, I64(3));
  set_ints_va(g, c6, "pads", 2, I64(2), I64(1));
  assert_int_equal(infer(g, c6), SC_OK);
  check_out(g, c6, 0, SC_DTYPE_F32, 3, I64(1), I64(6), I64(7));

  /* 3-D: 5-2+1, 6-3+1, 7-3+1 */
  int32_t c7 = conv(g, "c7", 5, (int64_t[]){1, 2, 5, 6, 7}, (int64_t[]){3, 2, 2, 3, 3}, true);
  assert_int_equal(infer(g, c7), SC_OK);
  check_out(g, c7, 0, SC_DTYPE_F32, 5, I64(1), I64(3), I64(4), I64(4), I64(5));

  /* asymmetric pads [h_begin, w_begin, h_end, w_end] = [1,0,2,1]:
   * H 10+1+2-3+1 = 11, W 10+0+1-3+1 = 9 */
  int32_t c8 = conv(g, "c8", 4, (int64_t[]){1, 1, 10, 10}, (int64_t[]){1, 1, 3, 3}, false);
  set_ints_va(g, c8, "pads", 4, I64(1), I64(0), I64(2), I64(1));
  assert_int_equal(infer(g, c8), SC_OK);
  check_out(g, c8, 0, SC_DTYPE_F32, 4, I64(1), I64(1), I64(11), I64(9));

  /* cost: X [1,3,8,8], W [4,3,3,3], B, pad 1 -> Y [1,4,8,8] (256 elements):
   * 2 * 256 * 3 * 9 MAC flops + 256 bias adds */
  int32_t c9 = conv(g, "c9", 4, (int64_t[]){1, 3, 8, 8}, (int64_t[]){4, 3, 3, 3}, true);
  set_ints_va(g, c9, "pads", 4, I64(1), I64(1), I64(1), I64(1));
  assert_int_equal(infer(g, c9), SC_OK);
  sc_cost c = cost(g, c9);
  assert_true(c.flops == 2.0 * 256 * 3 * 9 + 256);
  assert_true(c.bytes == 4.0 * (192 + 108 + 4 + 256));
  sc_graph_destroy(g);
}

static void test_conv_errors(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  /* group 4, C=8 needs W dim 1 == 2, has 3 */
  int32_t c1 = conv(g, "c1", 4, (int64_t[]){2, 8, 10, 10}, (int64_t[]){4, 3, 3, 3}, false);
  set_int(g, c1, "group", 4);
  check_error(g, c1, SC_ERR_INVALID, "3 input channels per group", "expects 2");
  /* group does not divide C */
  int32_t c2 = conv(g, "c2", 4, (int64_t[]){2, 6, 10, 10}, (int64_t[]){4, 2, 3, 3}, false);
  set_int(g, c2, "group", 4);
  check_error(g, c2, SC_ERR_INVALID, "group 4", "6");
  /* bias of the wrong size */
  int32_t x = shaped(g, "x", SC_DTYPE_F32, 4, (int64_t[]){1, 3, 8, 8});
  int32_t w = shaped(g, "w", SC_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3});
  int32_t b = shaped(g, "b5", SC_DTYPE_F32, 1, (int64_t[]){5});
  int32_t c3 = node(g, SC_OP_CONV, "c3", (int32_t[]){x, w, b}, 3, 1);
  check_error(g, c3, SC_ERR_INVALID, "[5]", "[4]");
  /* kernel larger than the input */
  int32_t c4 = conv(g, "c4", 4, (int64_t[]){1, 1, 2, 8}, (int64_t[]){1, 1, 3, 3}, false);
  check_error(g, c4, SC_ERR_INVALID, "padded input 2", "kernel 3");
  /* kernel_shape disagreeing with W */
  int32_t c5 = conv(g, "c5", 4, (int64_t[]){1, 1, 8, 8}, (int64_t[]){1, 1, 3, 3}, false);
  set_ints_va(g, c5, "kernel_shape", 2, I64(3), I64(5));
  check_error(g, c5, SC_ERR_INVALID, "kernel_shape[1] is 5", NULL);
  /* strides of the wrong length */
  int32_t c6 = conv(g, "c6", 4, (int64_t[]){1, 1, 8, 8}, (int64_t[]){1, 1, 3, 3}, false);
  set_ints_va(g, c6, "strides", 1, I64(2));
  check_error(g, c6, SC_ERR_INVALID, "strides", "1 values");
  /* unknown auto_pad */
  int32_t c7 = conv(g, "c7", 4, (int64_t[]){1, 1, 8, 8}, (int64_t[]){1, 1, 3, 3}, false);
  set_string(g, c7, "auto_pad", "SAME");
  check_error(g, c7, SC_ERR_INVALID, "auto_pad 'SAME'", NULL);
  /* attribute of the wrong kind */
  int32_t c8 = conv(g, "c8", 4, (int64_t[]){1, 1, 8, 8}, (int64_t[]){1, 1, 3, 3}, false);
  set_float(g, c8, "group", 1.0);
  check_error(g, c8, SC_ERR_INVALID, "'group'", NULL);
  sc_graph_destroy(g);
}

/* ---- pools ---- */

static int32_t pool(sc_graph *g, sc_op op, const char *name, int32_t rank,
                    const int64_t *xd, int32_t n_out) {
  char nb[80];
  snprintf(nb, sizeof nb, "%s_x", name);
  int32_t x = shaped(g, nb, SC_DTYPE_F32, rank, xd);
  return node(g, op, name, (int32_t[]){x}, 1, n_out);
}

static void test_pool_shapes(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  /* k3 s2 on 32: floor(29/2)+1 = 15; with Indices output */
  int32_t p1 = pool(g, SC_OP_MAX_POOL, "p1", 4, (int64_t[]){2, 3, 32, 32}, 2);
  set_ints_va(g, p1, "kernel_shape", 2, I64(3), I64(3));
  set_ints_va(g, p1, "strides", 2, I64(2), I64(2));
  assert_int_equal(infer(g, p1), SC_OK);
  check_out(g, p1, 0, SC_DTYPE_F32, 4, I64(2), I64(3), I64(15), I64(15));
  check_out(g, p1, 1, SC_DTYPE_I64, 4, I64(2), I64(3), I64(15), I64(15));
  sc_cost c = cost(g, p1);
  assert_true(c.flops == 9.0 * 2 * 3 * 15 * 15);
  assert_true(c.bytes == 4.0 * 2 * 3 * 32 * 32 + 12.0 * 2 * 3 * 15 * 15);

  /* ceil_mode: ceil(29/2)+1 = 16 (last window starts at 30 < 32) */
  int32_t p2 = pool(g, SC_OP_MAX_POOL, "p2", 4, (int64_t[]){1, 1, 32, 32}, 1);
  set_ints_va(g, p2, "kernel_shape", 2, I64(3), I64(3));
  set_ints_va(g, p2, "strides", 2, I64(2), I64(2));
  set_int(g, p2, "ceil_mode", 1);
  assert_int_equal(infer(g, p2), SC_OK);
  check_out(g, p2, 0, SC_DTYPE_F32, 4, I64(1), I64(1), I64(16), I64(16));

  /* ceil_mode, 1-D in 5, k2 s2 pads [1,1]: ceil((7-2)/2)+1 = 4, but the 4th
   * window would start at 6 >= 5+1, inside the end padding: dropped -> 3
   * (onnxruntime and PyTorch agree) */
  int32_t p3 = pool(g, SC_OP_MAX_POOL, "p3", 3, (int64_t[]){1, 1, 5}, 1);
  set_ints_va(g, p3, "kernel_shape", 1, I64(2));
  set_ints_va(g, p3, "strides", 1, I64(2));
  set_ints_va(g, p3, "pads", 2, I64(1), I64(1));
  set_int(g, p3, "ceil_mode", 1);
  assert_int_equal(infer(g, p3), SC_OK);
  check_out(g, p3, 0, SC_DTYPE_F32, 3, I64(1), I64(1), I64(3));

  /* AveragePool SAME_LOWER k [3,2] s [2,3] on 7x10: ceil(7/2)=4, ceil(10/3)=4 */
  int32_t p4 = pool(g, SC_OP_AVERAGE_POOL, "p4", 4, (int64_t[]){1, 2, 7, 10}, 1);
  set_ints_va(g, p4, "kernel_shape", 2, I64(3), I64(2));
  set_ints_va(g, p4, "strides", 2, I64(2), I64(3));
  set_string(g, p4, "auto_pad", "SAME_LOWER");
  set_int(g, p4, "count_include_pad", 1);
  assert_int_equal(infer(g, p4), SC_OK);
  check_out(g, p4, 0, SC_DTYPE_F32, 4, I64(1), I64(2), I64(4), I64(4));
  assert_true(cost(g, p4).flops == 6.0 * 2 * 16);

  /* AveragePool with pads: (8+1+1-3)/1+1 = 8 */
  int32_t p5 = pool(g, SC_OP_AVERAGE_POOL, "p5", 4, (int64_t[]){1, 2, 8, 8}, 1);
  set_ints_va(g, p5, "kernel_shape", 2, I64(3), I64(3));
  set_ints_va(g, p5, "pads", 4, I64(1), I64(1), I64(1), I64(1));
  assert_int_equal(infer(g, p5), SC_OK);
  check_out(g, p5, 0, SC_DTYPE_F32, 4, I64(1), I64(2), I64(8), I64(8));

  /* errors: missing kernel_shape, ceil_mode 2, pads of wrong length */
  int32_t e1 = pool(g, SC_OP_MAX_POOL, "e1", 4, (int64_t[]){1, 1, 8, 8}, 1);
  check_error(g, e1, SC_ERR_INVALID, "kernel_shape", "required");
  int32_t e2 = pool(g, SC_OP_MAX_POOL, "e2", 4, (int64_t[]){1, 1, 8, 8}, 1);
  set_ints_va(g, e2, "kernel_shape", 2, I64(2), I64(2));
  set_int(g, e2, "ceil_mode", 2);
  check_error(g, e2, SC_ERR_INVALID, "ceil_mode 2", NULL);
  int32_t e3 = pool(g, SC_OP_AVERAGE_POOL, "e3", 4, (int64_t[]){1, 1, 8, 8}, 1);
  set_ints_va(g, e3, "kernel_shape", 2, I64(2), I64(2));
  set_ints_va(g, e3, "pads", 2, I64(1), I64(1));
  check_error(g, e3, SC_ERR_INVALID, "'pads' has 2 values", "expects 4");
  int32_t e4 = pool(g, SC_OP_MAX_POOL, "e4", 4, (int64_t[]){1, 1, 8, 8}, 1);
  set_ints_va(g, e4, "kernel_shape", 2, I64(0), I64(2));
  check_error(g, e4, SC_ERR_INVALID, "kernel_shape", ">= 1");

  /* global pools: spatial dims become 1; cost = input elements */
  int32_t g1 = pool(g, SC_OP_GLOBAL_AVERAGE_POOL, "g1", 4, (int64_t[]){2, 3, 7, 5}, 1);
  assert_int_equal(infer(g, g1), SC_OK);
  check_out(g, g1, 0, SC_DTYPE_F32, 4, I64(2), I64(3), I64(1), I64(1));
  assert_true(cost(g, g1).flops == 2.0 * 3 * 7 * 5);
  int32_t g2 = pool(g, SC_OP_GLOBAL_MAX_POOL, "g2", 5, (int64_t[]){1, 4, 2, 3, 6}, 1);
  assert_int_equal(infer(g, g2), SC_OK);
  check_out(g, g2, 0, SC_DTYPE_F32, 5, I64(1), I64(4), I64(1), I64(1), I64(1));
  int32_t g3 = pool(g, SC_OP_GLOBAL_MAX_POOL, "g3", 2, (int64_t[]){1, 4}, 1);
  check_error(g, g3, SC_ERR_INVALID, "rank 2", NULL);
  sc_graph_destroy(g);
}

/* ---- normalisations ---- */

static void test_batchnorm(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t x = shaped(g, "x", SC_DTYPE_F32, 4, (int64_t[]){2, 3, 4, 4});
  int32_t p[4], q;
  const char *names[] = {"s", "b", "m", "v"};
  for (int i = 0; i < 4; i++) p[i] = shaped(g, names[i], SC_DTYPE_F32, 1, (int64_t[]){3});
  q = shaped(g, "q", SC_DTYPE_F32, 1, (int64_t[]){4});
  int32_t bn = node(g, SC_OP_BATCH_NORM, "bn", (int32_t[]){x, p[0], p[1], p[2], p[3]}, 5, 1);
  set_float(g, bn, "epsilon", 1e-3);
  assert_int_equal(infer(g, bn), SC_OK);
  check_out(g, bn, 0, SC_DTYPE_F32, 4, I64(2), I64(3), I64(4), I64(4));
  sc_cost c = cost(g, bn);
  assert_true(c.flops == 2.0 * 96);
  assert_true(c.bytes == 4.0 * (96 * 2 + 4 * 3));

  /* training mode: running_mean / running_var of shape (C) */
  int32_t bt = node(g, SC_OP_BATCH_NORM, "bt", (int32_t[]){x, p[0], p[1], p[2], p[3]}, 5, 3);
  set_int(g, bt, "training_mode", 1);
  assert_int_equal(infer(g, bt), SC_OK);
  check_out(g, bt, 1, SC_DTYPE_F32, 1, I64(3));
  check_out(g, bt, 2, SC_DTYPE_F32, 1, I64(3));

  /* input_var of the wrong size */
  int32_t b2 = node(g, SC_OP_BATCH_NORM, "b2", (int32_t[]){x, p[0], p[1], p[2], q}, 5, 1);
  check_error(g, b2, SC_ERR_INVALID, "input_var", "[3]");
  sc_graph_destroy(g);
}

static void test_instancenorm(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t x = shaped(g, "x", SC_DTYPE_F16, 3, (int64_t[]){2, 5, 9});
  int32_t s = shaped(g, "s", SC_DTYPE_F16, 1, (int64_t[]){5});
  int32_t b = shaped(g, "b", SC_DTYPE_F16, 1, (int64_t[]){5});
  int32_t s6 = shaped(g, "s6", SC_DTYPE_F16, 1, (int64_t[]){6});
  int32_t in = node(g, SC_OP_INSTANCE_NORM, "in", (int32_t[]){x, s, b}, 3, 1);
  assert_int_equal(infer(g, in), SC_OK);
  check_out(g, in, 0, SC_DTYPE_F16, 3, I64(2), I64(5), I64(9));
  assert_true(cost(g, in).flops == 5.0 * 90);
  int32_t bad = node(g, SC_OP_INSTANCE_NORM, "bad", (int32_t[]){x, s6, b}, 3, 1);
  check_error(g, bad, SC_ERR_INVALID, "scale", "[6]");
  sc_graph_destroy(g);
}

static void test_layernorm(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t x = shaped(g, "x", SC_DTYPE_F16, 3, (int64_t[]){2, 5, 8});
  int32_t s = shaped(g, "s", SC_DTYPE_F16, 1, (int64_t[]){8});
  int32_t b = shaped(g, "b", SC_DTYPE_F16, 1, (int64_t[]){8});
  /* axis -1 with Mean and InvStdDev: [2,5,1], f32 (stash_type default 1) */
  int32_t ln = node(g, SC_OP_LAYER_NORM, "ln", (int32_t[]){x, s, b}, 3, 3);
  assert_int_equal(infer(g, ln), SC_OK);
  check_out(g, ln, 0, SC_DTYPE_F16, 3, I64(2), I64(5), I64(8));
  check_out(g, ln, 1, SC_DTYPE_F32, 3, I64(2), I64(5), I64(1));
  check_out(g, ln, 2, SC_DTYPE_F32, 3, I64(2), I64(5), I64(1));
  assert_true(cost(g, ln).flops == 5.0 * 80);

  /* axis 1, scale [5,8], no B, stash_type f64 (11): stats [2,1,1] f64 */
  int32_t s58 = shaped(g, "s58", SC_DTYPE_F16, 2, (int64_t[]){5, 8});
  int32_t ln2 = node(g, SC_OP_LAYER_NORM, "ln2", (int32_t[]){x, s58}, 2, 3);
  set_int(g, ln2, "axis", 1);
  set_int(g, ln2, "stash_type", 11);
  assert_int_equal(infer(g, ln2), SC_OK);
  check_out(g, ln2, 1, SC_DTYPE_F64, 3, I64(2), I64(1), I64(1));

  /* only Y and InvStdDev requested (Mean omitted) */
  int32_t outs[3];
  outs[0] = sc_graph_add_value(g, "ln3_y");
  outs[1] = -1;
  outs[2] = sc_graph_add_value(g, "ln3_inv");
  int32_t ln3 = sc_graph_add_node(g, SC_OP_LAYER_NORM, "ln3", (int32_t[]){x, s, b}, 3, outs, 3);
  assert_int_equal(infer(g, ln3), SC_OK);
  check_out(g, ln3, 2, SC_DTYPE_F32, 3, I64(2), I64(5), I64(1));

  /* errors: scale [7]; axis 3 out of range; integer stash_type */
  int32_t s7 = shaped(g, "s7", SC_DTYPE_F16, 1, (int64_t[]){7});
  int32_t e1 = node(g, SC_OP_LAYER_NORM, "e1", (int32_t[]){x, s7}, 2, 1);
  check_error(g, e1, SC_ERR_INVALID, "[7]", "[2,5,8]");
  int32_t e2 = node(g, SC_OP_LAYER_NORM, "e2", (int32_t[]){x, s}, 2, 1);
  set_int(g, e2, "axis", 3);
  check_error(g, e2, SC_ERR_INVALID, "axis 3", NULL);
  int32_t e3 = node(g, SC_OP_LAYER_NORM, "e3", (int32_t[]){x, s}, 2, 1);
  set_int(g, e3, "stash_type", 7);
  check_error(g, e3, SC_ERR_INVALID, "stash_type 7", NULL);
  sc_graph_destroy(g);
}

static void test_rmsnorm(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t x = shaped(g, "x", SC_DTYPE_F16, 3, (int64_t[]){2, 5, 8});
  int32_t s = shaped(g, "s", SC_DTYPE_F16, 1, (int64_t[]){8});
  /* axis -1, scale [8]: Y is X's shape and dtype */
  int32_t r = node(g, SC_OP_RMS_NORM, "r", (int32_t[]){x, s}, 2, 1);
  assert_int_equal(infer(g, r), SC_OK);
  check_out(g, r, 0, SC_DTYPE_F16, 3, I64(2), I64(5), I64(8));
  assert_true(cost(g, r).flops == 4.0 * 80);
  /* axis 1: scale [5,1] and [1,8] broadcast to the normalised shape [5,8] */
  int32_t s51 = shaped(g, "s51", SC_DTYPE_F16, 2, (int64_t[]){5, 1});
  int32_t r2 = node(g, SC_OP_RMS_NORM, "r2", (int32_t[]){x, s51}, 2, 1);
  set_int(g, r2, "axis", 1);
  assert_int_equal(infer(g, r2), SC_OK);
  check_out(g, r2, 0, SC_DTYPE_F16, 3, I64(2), I64(5), I64(8));

  /* errors: scale [2,5,8] has more dims than the normalised shape [8];
   * scale [5] against [8]; axis -4 out of range; integer X; stash_type 7 */
  int32_t s258 = shaped(g, "s258", SC_DTYPE_F16, 3, (int64_t[]){2, 5, 8});
  int32_t e0 = node(g, SC_OP_RMS_NORM, "e0", (int32_t[]){x, s258}, 2, 1);
  check_error(g, e0, SC_ERR_INVALID, "[2,5,8]", "does not broadcast to [8]");
  int32_t s5 = shaped(g, "s5", SC_DTYPE_F16, 1, (int64_t[]){5});
  int32_t e1 = node(g, SC_OP_RMS_NORM, "e1", (int32_t[]){x, s5}, 2, 1);
  check_error(g, e1, SC_ERR_INVALID, "[5]", "[8]");
  int32_t e2 = node(g, SC_OP_RMS_NORM, "e2", (int32_t[]){x, s}, 2, 1);
  set_int(g, e2, "axis", -4);
  check_error(g, e2, SC_ERR_INVALID, "axis -4", NULL);
  int32_t xi = shaped(g, "xi", SC_DTYPE_I32, 2, (int64_t[]){2, 8});
  int32_t e3 = node(g, SC_OP_RMS_NORM, "e3", (int32_t[]){xi, s}, 2, 1);
  check_error(g, e3, SC_ERR_INVALID, "'xi'", "float");
  int32_t e4 = node(g, SC_OP_RMS_NORM, "e4", (int32_t[]){x, s}, 2, 1);
  set_int(g, e4, "stash_type", 7);
  check_error(g, e4, SC_ERR_INVALID, "stash_type 7", NULL);
  sc_graph_destroy(g);
}

static void test_groupnorm(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int32_t x = shaped(g, "x", SC_DTYPE_F32, 4, (int64_t[]){2, 6, 4, 4});
  int32_t s6 = shaped(g, "s6", SC_DTYPE_F32, 1, (int64_t[]){6});
  int32_t s3 = shaped(g, "s3", SC_DTYPE_F32, 1, (int64_t[]){3});
  int32_t s4 = shaped(g, "s4", SC_DTYPE_F32, 1, (int64_t[]){4});
  /* opset 21: per channel */
  int32_t g1 = node(g, SC_OP_GROUP_NORM, "g1", (int32_t[]){x, s6, s6}, 3, 1);
  set_int(g, g1, "num_groups", 3);
  assert_int_equal(infer(g, g1), SC_OK);
  check_out(g, g1, 0, SC_DTYPE_F32, 4, I64(2), I64(6), I64(4), I64(4));
  assert_true(cost(g, g1).flops == 5.0 * 192);
  /* opset 18: per group */
  int32_t g2 = node(g, SC_OP_GROUP_NORM, "g2", (int32_t[]){x, s3, s3}, 3, 1);
  set_int(g, g2, "num_groups", 3);
  assert_int_equal(infer(g, g2), SC_OK);
  /* neither */
  int32_t g3 = node(g, SC_OP_GROUP_NORM, "g3", (int32_t[]){x, s4, s6}, 3, 1);
  set_int(g, g3, "num_groups", 3);
  check_error(g, g3, SC_ERR_INVALID, "[4]", "[6]");
  /* 4 groups do not divide 6 channels */
  int32_t g4 = node(g, SC_OP_GROUP_NORM, "g4", (int32_t[]){x, s4, s4}, 3, 1);
  set_int(g, g4, "num_groups", 4);
  check_error(g, g4, SC_ERR_INVALID, "num_groups 4", "6 channels");
  /* num_groups missing */
  int32_t g5 = node(g, SC_OP_GROUP_NORM, "g5", (int32_t[]){x, s6, s6}, 3, 1);
  check_error(g, g5, SC_ERR_INVALID, "num_groups", "required");
  sc_graph_destroy(g);
}

/* ---- Softmax, LogSoftmax ---- */

/* Reference without max subtraction: exp(x_i) / sum_j exp(x_j); inputs are
 * in [-1,1] so this cannot overflow. */
static void check_softmax(sc_graph *g, sc_op op, int64_t axis_attr, bool set_axis) {
  static int counter;
  char nm[32];
  snprintf(nm, sizeof nm, "sm%d", counter++);
  const float *X;
  char xn[40];
  snprintf(xn, sizeof xn, "%s_x", nm);
  /* [3,4,5] */
  int32_t x = const_f32(g, xn, 3, (int64_t[]){3, 4, 5}, &X);
  int32_t sm = node(g, op, nm, (int32_t[]){x}, 1, 1);
  if (set_axis) set_int(g, sm, "axis", axis_attr);
  assert_int_equal(infer(g, sm), SC_OK);
  check_out(g, sm, 0, SC_DTYPE_F32, 3, I64(3), I64(4), I64(5));
  assert_true(cost(g, sm).flops == 5.0 * 60);
  assert_int_equal(eval(g, sm), SC_OK);
  const float *Y = sc_node_output(g, sc_nod(g, sm), 0)->data;
  int axis = (int)(axis_attr < 0 ? axis_attr + 3 : axis_attr);
  int64_t dims[3] = {3, 4, 5}, st[3] = {20, 5, 1};
  for (int64_t i0 = 0; i0 < 3; i0++)
    for (int64_t i1 = 0; i1 < 4; i1++)
      for (int64_t i2 = 0; i2 < 5; i2++) {
        int64_t idx[3] = {i0, i1, i2};
        if (idx[axis] != 0) continue; /* one visit per row */
        double sum = 0, ysum = 0;
        for (int64_t k = 0; k < dims[axis]; k++) {
          idx[axis] = k;
          sum += exp((double)X[idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2]]);
        }
        for (int64_t k = 0; k < dims[axis]; k++) {
          idx[axis] = k;
          int64_t off = idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2];
          double want = exp((double)X[off]) / sum;
          if (op == SC_OP_LOG_SOFTMAX) {
            check_close(Y[off], log(want), 2);
            ysum += exp((double)Y[off]);
          } else {
            check_close(Y[off], want, 1);
            ysum += Y[off];
          }
        }
        check_close(ysum, 1.0, (double)dims[axis]);
      }
}

static void test_softmax(void **state) {
  (void)state;
  rng_seed(42);
  sc_graph *g = sc_graph_create("t");
  check_softmax(g, SC_OP_SOFTMAX, -1, false); /* default axis -1 */
  check_softmax(g, SC_OP_SOFTMAX, 0, true);
  check_softmax(g, SC_OP_SOFTMAX, 1, true);
  check_softmax(g, SC_OP_LOG_SOFTMAX, -1, false);
  check_softmax(g, SC_OP_LOG_SOFTMAX, -2, true);
  /* axis out of range; integer input */
  int32_t x = shaped(g, "x", SC_DTYPE_F32, 2, (int64_t[]){2, 3});
  int32_t e1 = node(g, SC_OP_SOFTMAX, "e1", (int32_t[]){x}, 1, 1);
  set_int(g, e1, "axis", 2);
  check_error(g, e1, SC_ERR_INVALID, "axis 2", NULL);
  int32_t xi = shaped(g, "xi", SC_DTYPE_I32, 2, (int64_t[]){2, 3});
  int32_t e2 = node(g, SC_OP_SOFTMAX, "e2", (int32_t[]){xi}, 1, 1);
  check_error(g, e2, SC_ERR_INVALID, "i32", NULL);
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_shapes),  cmocka_unit_test(test_matmul_errors),
      cmocka_unit_test(test_matmul_eval),    cmocka_unit_test(test_matmul_eval_limit),
      cmocka_unit_test(test_gemm_shapes),    cmocka_unit_test(test_gemm_eval),
      cmocka_unit_test(test_conv_shapes),    cmocka_unit_test(test_conv_errors),
      cmocka_unit_test(test_pool_shapes),    cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_instancenorm),   cmocka_unit_test(test_layernorm), cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_groupnorm),      cmocka_unit_test(test_softmax),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
