/* test_autodiff.c — every gradient rule (passes/grad_rules.c) and the
 * autodiff pass (passes/autodiff.c) against central finite differences.
 *
 * Each case builds L = ReduceSum(op(p…) · r) over f64 parameters p (seeded
 * random values, never zero; kept away from kinks and outside domains
 * where the op needs it) and a seeded random constant r, runs sc_autodiff,
 * then folds the whole graph (infer-shapes evaluates every node, all
 * inputs being constants), so no backend is involved. Every element of
 * every parameter's gradient is compared with (L(p+h) − L(p−h)) / 2h,
 * h = 1e-6, within |got − want| <= 1e-6 · max(1, |want|) (f64: the
 * difference quotient's error is about h² · L''' + 1e-16 / h, far below
 * that; the Cast case goes through f32 and is allowed 1e-3 with h = 1e-2,
 * the function being linear there). NaN fails. Ops without constant
 * folding (Conv, the pools, the normalisations) get L(p±h) from a C
 * reference of their ONNX definition instead (the case's ref); their
 * rules are built from foldable ops (LayerNormGrad, the fused gradient of
 * LayerNorm and RMSNorm, folds in double), so the gradient itself still
 * folds.
 * Kinks (Relu, Clip's bounds, HardSwish's ±3, Max's ties) are where
 * random values land with probability 0; ties are checked apart.
 *
 * Also: Max's ties split evenly; the refused forms (a strided Slice,
 * training-mode Dropout, a reflect Pad, a ScatterElements with reduction
 * mul) named. And: fan-out sums (a parameter read three times), MatMul's input and
 * weight gradients as separate MatMul nodes, the gradient outputs' names,
 * a non-differentiable input left without a gradient (Where's condition,
 * Reshape's shape), and the errors: a node without a rule on the path
 * (named, with its op), a loss that is not a scalar.
 *
 * And a bf16 or fp16 training step (passes/train.c, low_chains) saves no
 * widened copy: no f32 value computed from low-precision products alone
 * (a widening Cast, and elementwise or data-moving ops of such values and
 * constants or smaller operands) is read by the backward, on the GPT-2 and
 * MLP samples; and it saves low-precision activations instead. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/onnx.h"
#include "passes/autodiff.h"
#include "passes/pass.h"
#include "passes/train.h"
#include "test_util.h"

enum { MAX_P = 4, MAX_E = 128 };

typedef struct gcase {
  const char *name;
  int n_params;
  int32_t rank[MAX_P];
  int64_t dims[MAX_P][4];
  double lo, hi;    /* parameter values in [lo, hi), |x| >= 0.1 */
  double tol;       /* 0: 1e-6 */
  int32_t (*fwd)(sc_graph *g, const int32_t *p);
  /* ops without constant folding (the normalisations, global pooling):
   * op(p…) computed here in C from the ONNX definition, for L(p±h) */
  void (*ref)(double (*pd)[MAX_E], double *y);
} gcase;

/* ---- building blocks of the forward graphs ---- */

static int32_t op1(sc_graph *g, sc_op op, int32_t a) {
  int32_t y;
  int32_t n = node1(g, op, NULL, &a, 1, &y);
  if (infer(g, n) != SC_OK) fail_msg("infer %s: %s", sc_op_name(op), g->diag.msg);
  return y;
}
static int32_t opn(sc_graph *g, sc_op op, const int32_t *in, int32_t nin, int32_t *node) {
  int32_t y;
  *node = node1(g, op, NULL, in, nin, &y);
  return y;
}
static int32_t done(sc_graph *g, int32_t node, int32_t y) {
  if (infer(g, node) != SC_OK) fail_msg("infer: %s", g->diag.msg);
  return y;
}
static int32_t op2(sc_graph *g, sc_op op, int32_t a, int32_t b) {
  int32_t n, y = opn(g, op, (int32_t[]){a, b}, 2, &n);
  return done(g, n, y);
}
static int32_t i64s(sc_graph *g, int32_t n, const int64_t *v) {
  int64_t d[1] = {n};
  return cst(g, SC_DTYPE_I64, 1, d, v);
}

#define F1(name, op)                                                      \
  static int32_t name(sc_graph *g, const int32_t *p) { return op1(g, op, p[0]); }
F1(f_neg, SC_OP_NEG)
F1(f_exp, SC_OP_EXP)
F1(f_log, SC_OP_LOG)
F1(f_sqrt, SC_OP_SQRT)
F1(f_reciprocal, SC_OP_RECIPROCAL)
F1(f_relu, SC_OP_RELU)
F1(f_sigmoid, SC_OP_SIGMOID)
F1(f_tanh, SC_OP_TANH)
F1(f_sin, SC_OP_SIN)
F1(f_cos, SC_OP_COS)
F1(f_abs, SC_OP_ABS)
F1(f_identity, SC_OP_IDENTITY)
#define F2(name, op)                                                      \
  static int32_t name(sc_graph *g, const int32_t *p) { return op2(g, op, p[0], p[1]); }
F2(f_add, SC_OP_ADD)
F2(f_sub, SC_OP_SUB)
F2(f_mul, SC_OP_MUL)
F2(f_div, SC_OP_DIV)
F2(f_pow, SC_OP_POW)
F2(f_matmul, SC_OP_MATMUL)

static int32_t f_leaky(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_LEAKY_RELU, p, 1, &n);
  set_float(g, n, "alpha", 0.3);
  return done(g, n, y);
}
static int32_t f_cast(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CAST, p, 1, &n);
  set_int(g, n, "to", 1); /* f32 */
  y = done(g, n, y);
  int32_t m, z = opn(g, SC_OP_CAST, &y, 1, &m);
  set_int(g, m, "to", 11); /* back to f64 */
  return done(g, m, z);
}
static int32_t f_sum3(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_SUM, p, 3, &n);
  return done(g, n, y);
}
static int32_t f_gemm(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_GEMM, p, 3, &n);
  set_float(g, n, "alpha", 0.7);
  set_float(g, n, "beta", 1.3);
  return done(g, n, y);
}
static int32_t f_gemm_t(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_GEMM, p, 3, &n);
  set_int(g, n, "transA", 1);
  set_int(g, n, "transB", 1);
  set_float(g, n, "alpha", -1.5);
  return done(g, n, y);
}
static int32_t f_reduce_sum(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_REDUCE_SUM, p, 1, &n);
  set_ints(g, n, "axes", 1, (int64_t[]){1});
  set_int(g, n, "keepdims", 0);
  return done(g, n, y);
}
static int32_t f_reduce_mean(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_REDUCE_MEAN, p, 1, &n);
  set_ints(g, n, "axes", 2, (int64_t[]){0, 2});
  return done(g, n, y);
}
static int32_t f_softmax(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_SOFTMAX, p, 1, &n);
  set_int(g, n, "axis", -1);
  return done(g, n, y);
}
static int32_t f_log_softmax(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_LOG_SOFTMAX, p, 1, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
static int32_t f_reshape(sc_graph *g, const int32_t *p) {
  return op2(g, SC_OP_RESHAPE, p[0], i64s(g, 2, (int64_t[]){3, -1}));
}
static int32_t f_flatten(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_FLATTEN, p, 1, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
static int32_t f_unsqueeze(sc_graph *g, const int32_t *p) {
  int32_t u = op2(g, SC_OP_UNSQUEEZE, p[0], i64s(g, 1, (int64_t[]){1}));
  return op2(g, SC_OP_SQUEEZE, op1(g, SC_OP_EXP, u), i64s(g, 1, (int64_t[]){1}));
}
static int32_t f_transpose(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_TRANSPOSE, p, 1, &n);
  set_ints(g, n, "perm", 3, (int64_t[]){2, 0, 1});
  return done(g, n, y);
}
static int32_t f_transpose_default(sc_graph *g, const int32_t *p) {
  return op1(g, SC_OP_TRANSPOSE, p[0]);
}
static int32_t f_expand(sc_graph *g, const int32_t *p) {
  return op2(g, SC_OP_EXPAND, p[0], i64s(g, 3, (int64_t[]){2, 2, 3}));
}
static int32_t f_concat(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CONCAT, p, 2, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
static int32_t f_where(sc_graph *g, const int32_t *p) {
  uint8_t c[6] = {1, 0, 0, 1, 1, 0};
  int32_t cond = cst(g, SC_DTYPE_BOOL, 2, (int64_t[]){2, 3}, c);
  int32_t n, y = opn(g, SC_OP_WHERE, (int32_t[]){cond, p[0], p[1]}, 3, &n);
  return done(g, n, y);
}
/* fan-out: x·x + exp(x) − x reads x four times */
static int32_t f_fanout(sc_graph *g, const int32_t *p) {
  int32_t a = op2(g, SC_OP_MUL, p[0], p[0]);
  return op2(g, SC_OP_SUB, op2(g, SC_OP_ADD, a, op1(g, SC_OP_EXP, p[0])), p[0]);
}
/* a two-layer MLP: tanh(x·W1 + b1)·W2 */
static int32_t f_mlp(sc_graph *g, const int32_t *p) {
  int32_t h = op1(g, SC_OP_TANH, op2(g, SC_OP_ADD, op2(g, SC_OP_MATMUL, p[0], p[1]), p[2]));
  return op2(g, SC_OP_MATMUL, h, p[3]);
}


/* ---- the rules of the second batch ---- */
F1(f_erf, SC_OP_ERF)
F1(f_softplus, SC_OP_SOFTPLUS)
F1(f_mish, SC_OP_MISH)
F1(f_hard_swish, SC_OP_HARD_SWISH)
F1(f_selu, SC_OP_SELU)
F2(f_prelu, SC_OP_PRELU)
F2(f_min, SC_OP_MIN)

static int32_t f_gelu(sc_graph *g, const int32_t *p) {
  g->opset = 20;
  return op1(g, SC_OP_GELU, p[0]);
}
static int32_t f_gelu_tanh(sc_graph *g, const int32_t *p) {
  g->opset = 20;
  int32_t n, y = opn(g, SC_OP_GELU, p, 1, &n);
  set_string(g, n, "approximate", "tanh");
  return done(g, n, y);
}
static int32_t f_elu(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_ELU, p, 1, &n);
  set_float(g, n, "alpha", 0.7);
  return done(g, n, y);
}
static int32_t f_celu(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CELU, p, 1, &n);
  set_float(g, n, "alpha", 0.6);
  return done(g, n, y);
}
static int32_t f_thresholded_relu(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_THRESHOLDED_RELU, p, 1, &n);
  set_float(g, n, "alpha", 0.3);
  return done(g, n, y);
}
static int32_t f_shrink(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_SHRINK, p, 1, &n);
  set_float(g, n, "lambd", 0.4);
  set_float(g, n, "bias", 0.25);
  return done(g, n, y);
}
F1(f_softsign, SC_OP_SOFTSIGN)
F1(f_sinh, SC_OP_SINH)
F1(f_cosh, SC_OP_COSH)
F1(f_tan, SC_OP_TAN)
F1(f_asinh, SC_OP_ASINH)
static int32_t f_hard_sigmoid(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_HARD_SIGMOID, p, 1, &n);
  set_float(g, n, "alpha", 0.3);
  set_float(g, n, "beta", 0.4);
  return done(g, n, y);
}
static int32_t f64s(sc_graph *g, double v) { return cst(g, SC_DTYPE_F64, 0, NULL, &v); }
/* Clip(x, −0.5, 0.8) and Clip(x, , 0.3): values on both sides of each bound */
static int32_t f_clip(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CLIP, (int32_t[]){p[0], f64s(g, -0.5), f64s(g, 0.8)}, 3, &n);
  return done(g, n, y);
}
static int32_t f_clip_max(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CLIP, (int32_t[]){p[0], -1, f64s(g, 0.3)}, 3, &n);
  return done(g, n, y);
}
/* inference Dropout: ratio 0.3, training_mode false */
static int32_t f_dropout(sc_graph *g, const int32_t *p) {
  uint8_t no = 0;
  int32_t train = cst(g, SC_DTYPE_BOOL, 0, NULL, &no);
  int32_t n, y = opn(g, SC_OP_DROPOUT, (int32_t[]){p[0], f64s(g, 0.3), train}, 3, &n);
  return done(g, n, y);
}
static int32_t f_max3(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_MAX, p, 3, &n);
  return done(g, n, y);
}
static int32_t f_mean3(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_MEAN, p, 3, &n);
  return done(g, n, y);
}
static int32_t f_reduce_sum_square(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_REDUCE_SUM_SQUARE, p, 1, &n);
  set_ints(g, n, "axes", 1, (int64_t[]){1});
  set_int(g, n, "keepdims", 0);
  return done(g, n, y);
}
static int32_t f_reduce_l2(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_REDUCE_L2, p, 1, &n);
  set_ints(g, n, "axes", 2, (int64_t[]){0, 2});
  return done(g, n, y);
}
/* Gather along axis 1 with a repeated and a negative index (−1 ≡ 3) */
static int32_t f_gather_axis1(sc_graph *g, const int32_t *p) {
  int32_t idx = i64s(g, 4, (int64_t[]){0, -1, 3, 0});
  int32_t r = op2(g, SC_OP_RESHAPE, idx, i64s(g, 2, (int64_t[]){2, 2}));
  int32_t n, y = opn(g, SC_OP_GATHER, (int32_t[]){p[0], r}, 2, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
/* an embedding lookup: rows 1 and 3 (as −1) read twice, row 0 never */
static int32_t f_gather_rows(sc_graph *g, const int32_t *p) {
  return op2(g, SC_OP_GATHER, p[0], i64s(g, 5, (int64_t[]){1, 3, 1, -1, 2}));
}
/* a scalar index (−2 ≡ 2) along axis 1: [3, 4] → [3] */
static int32_t f_gather_scalar(sc_graph *g, const int32_t *p) {
  int64_t i = -2;
  int32_t n, y = opn(g, SC_OP_GATHER, (int32_t[]){p[0], cst(g, SC_DTYPE_I64, 0, NULL, &i)}, 2, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
static int32_t f_gather_elements(sc_graph *g, const int32_t *p) {
  int32_t idx = op2(g, SC_OP_RESHAPE, i64s(g, 4, (int64_t[]){2, 2, 0, -1}),
                    i64s(g, 2, (int64_t[]){2, 2}));
  int32_t n, y = opn(g, SC_OP_GATHER_ELEMENTS, (int32_t[]){p[0], idx}, 2, &n);
  set_int(g, n, "axis", 0);
  return done(g, n, y);
}
/* data [3, 4], updates [3, 2] written along axis 1 at distinct columns per
 * row (one negative): the overwritten elements of data get no gradient */
static int32_t f_scatter_elements(sc_graph *g, const int32_t *p) {
  int32_t idx = op2(g, SC_OP_RESHAPE, i64s(g, 6, (int64_t[]){0, 2, -1, 1, 1, 0}),
                    i64s(g, 2, (int64_t[]){3, 2}));
  int32_t n, y = opn(g, SC_OP_SCATTER_ELEMENTS, (int32_t[]){p[0], idx, p[1]}, 3, &n);
  set_int(g, n, "axis", 1);
  return done(g, n, y);
}
/* data [3, 2], updates [4, 2] added along axis 0, rows 0 and 2 twice */
static int32_t f_scatter_elements_add(sc_graph *g, const int32_t *p) {
  int32_t idx = op2(g, SC_OP_RESHAPE, i64s(g, 8, (int64_t[]){0, 2, 0, 1, 2, 2, 1, 0}),
                    i64s(g, 2, (int64_t[]){4, 2}));
  int32_t n, y = opn(g, SC_OP_SCATTER_ELEMENTS, (int32_t[]){p[0], idx, p[1]}, 3, &n);
  set_string(g, n, "reduction", "add");
  return done(g, n, y);
}
/* data [4, 3], updates [2, 3] written to rows 2 and 0 */
static int32_t f_scatter_nd(sc_graph *g, const int32_t *p) {
  int32_t idx = op2(g, SC_OP_RESHAPE, i64s(g, 2, (int64_t[]){2, 0}),
                    i64s(g, 2, (int64_t[]){2, 1}));
  int32_t n, y = opn(g, SC_OP_SCATTER_ND, (int32_t[]){p[0], idx, p[1]}, 3, &n);
  return done(g, n, y);
}
/* data [4, 3], updates [3] added at elements (1, 2) twice and (3, 0) */
static int32_t f_scatter_nd_add(sc_graph *g, const int32_t *p) {
  int32_t idx = op2(g, SC_OP_RESHAPE, i64s(g, 6, (int64_t[]){1, 2, 1, 2, 3, 0}),
                    i64s(g, 2, (int64_t[]){3, 2}));
  int32_t n, y = opn(g, SC_OP_SCATTER_ND, (int32_t[]){p[0], idx, p[1]}, 3, &n);
  set_string(g, n, "reduction", "add");
  return done(g, n, y);
}
/* x[1:3, −3:100] */
static int32_t f_slice(sc_graph *g, const int32_t *p) {
  int32_t in[4] = {p[0], i64s(g, 2, (int64_t[]){1, -3}), i64s(g, 2, (int64_t[]){3, 100}),
                   i64s(g, 2, (int64_t[]){0, 1})};
  int32_t n, y = opn(g, SC_OP_SLICE, in, 4, &n);
  return done(g, n, y);
}
/* Split [2, 6] into [2,1], [2,2], [2,3] along 1; the middle part is unused */
static int32_t f_split(sc_graph *g, const int32_t *p) {
  int32_t outs[3] = {outv(g), outv(g), outv(g)};
  int32_t in[2] = {p[0], i64s(g, 3, (int64_t[]){1, 2, 3})};
  int32_t n = sc_graph_add_node(g, SC_OP_SPLIT, NULL, in, 2, outs, 3);
  assert_true(n >= 0);
  set_int(g, n, "axis", 1);
  done(g, n, outs[0]);
  return op2(g, SC_OP_MUL, outs[0], op1(g, SC_OP_EXP, outs[2]));
}
/* Pad with an axes input (the last axis, as −1); Slice without axes */
static int32_t f_pad_axes(sc_graph *g, const int32_t *p) {
  int32_t in[4] = {p[0], i64s(g, 2, (int64_t[]){2, 1}), f64s(g, 0.5), i64s(g, 1, (int64_t[]){-1})};
  int32_t n, y = opn(g, SC_OP_PAD, in, 4, &n);
  return done(g, n, y);
}
static int32_t f_slice_all(sc_graph *g, const int32_t *p) {
  int32_t in[3] = {p[0], i64s(g, 2, (int64_t[]){0, 1}), i64s(g, 2, (int64_t[]){-1, 3})};
  int32_t n, y = opn(g, SC_OP_SLICE, in, 3, &n);
  return done(g, n, y);
}
static int32_t f_tile(sc_graph *g, const int32_t *p) {
  return op2(g, SC_OP_TILE, p[0], i64s(g, 3, (int64_t[]){2, 3, 1}));
}
static int32_t f_pad(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_PAD, (int32_t[]){p[0], i64s(g, 4, (int64_t[]){1, 0, 0, 2}),
                                                f64s(g, 0.25)}, 3, &n);
  return done(g, n, y);
}

/* LayerNormalization over [3, 4] of [2, 3, 4]: Scale [4], B [3, 4] */
static int32_t f_layer_norm(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_LAYER_NORM, p, 3, &n);
  set_int(g, n, "axis", 1);
  set_float(g, n, "epsilon", 1e-3);
  return done(g, n, y);
}
/* rows × cols rows of x normalised (ε 1e-3), times s[i % ns], plus b[i]
 * (i the index in a row) */
static void ln_ref(const double *x, int rows, int cols, const double *s, int ns, const double *b,
                   double *y) {
  for (int r = 0; r < rows; r++, x += cols, y += cols) {
    double m = 0, v = 0;
    for (int i = 0; i < cols; i++) m += x[i] / cols;
    for (int i = 0; i < cols; i++) v += (x[i] - m) * (x[i] - m) / cols;
    for (int i = 0; i < cols; i++) y[i] = (x[i] - m) / sqrt(v + 1e-3) * s[i % ns] + b[i];
  }
}
static void ref_layer_norm(double (*pd)[MAX_E], double *y) { ln_ref(pd[0], 2, 12, pd[1], 4, pd[2], y); }
/* LayerNormalization over the last axis of [3, 4]: Scale [4], B [4] (the
 * shapes the fused LayerNormGrad takes) */
static int32_t f_layer_norm_last(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_LAYER_NORM, p, 3, &n);
  set_float(g, n, "epsilon", 1e-3);
  return done(g, n, y);
}
static void ref_layer_norm_last(double (*pd)[MAX_E], double *y) {
  ln_ref(pd[0], 3, 4, pd[1], 4, pd[2], y);
}
/* SoftmaxCrossEntropy's per-row losses of logits [3, 5] (labels 4, -100
 * ignored, 0) */
static int32_t f_softmax_cross_entropy(sc_graph *g, const int32_t *p) {
  int32_t y[2], lab = i64s(g, 3, (int64_t[]){4, -100, 0});
  int32_t n = sc_graph_add_node(g, SC_OP_SOFTMAX_CROSS_ENTROPY, "sce", (int32_t[]){p[0], lab}, 2,
                                (int32_t[]){sc_graph_new_value(g, "rows"),
                                            sc_graph_new_value(g, "lse")}, 2);
  assert_true(n >= 0);
  y[0] = g->nodes[n].outputs[0];
  y[1] = g->nodes[n].outputs[1];
  done(g, n, y[0]);
  return y[0];
}
/* RMSNormalization over the last axis of [2, 5]: scale [5] */
static int32_t f_rms_norm(sc_graph *g, const int32_t *p) {
  g->opset = 23;
  int32_t n, y = opn(g, SC_OP_RMS_NORM, p, 2, &n);
  set_float(g, n, "epsilon", 1e-3);
  return done(g, n, y);
}
static void ref_rms_norm(double (*pd)[MAX_E], double *y) {
  for (int b = 0; b < 2; b++) {
    const double *x = pd[0] + 5 * b;
    double ms = 0;
    for (int i = 0; i < 5; i++) ms += x[i] * x[i] / 5;
    for (int i = 0; i < 5; i++) y[5 * b + i] = x[i] / sqrt(ms + 1e-3) * pd[1][i];
  }
}
/* inference BatchNormalization of [2, 3, 2]: scale, B; running mean, var */
static const double BN_MEAN[3] = {0.3, -0.2, 0.1}, BN_VAR[3] = {0.5, 1.5, 0.8};
static int32_t f_batch_norm(sc_graph *g, const int32_t *p) {
  int32_t m = cst(g, SC_DTYPE_F64, 1, (int64_t[]){3}, BN_MEAN);
  int32_t v = cst(g, SC_DTYPE_F64, 1, (int64_t[]){3}, BN_VAR);
  int32_t n, y = opn(g, SC_OP_BATCH_NORM, (int32_t[]){p[0], p[1], p[2], m, v}, 5, &n);
  set_float(g, n, "epsilon", 1e-2);
  return done(g, n, y);
}
static void ref_batch_norm(double (*pd)[MAX_E], double *y) {
  for (int i = 0; i < 12; i++) {
    int ch = (i / 2) % 3;
    y[i] = (pd[0][i] - BN_MEAN[ch]) / sqrt(BN_VAR[ch] + 1e-2) * pd[1][ch] + pd[2][ch];
  }
}
static int32_t f_global_avg(sc_graph *g, const int32_t *p) {
  return op1(g, SC_OP_GLOBAL_AVERAGE_POOL, p[0]);
}
static int32_t f_global_max(sc_graph *g, const int32_t *p) {
  return op1(g, SC_OP_GLOBAL_MAX_POOL, p[0]);
}
/* [2, 3, 2, 2] → [2, 3, 1, 1] */
static void ref_global_avg(double (*pd)[MAX_E], double *y) {
  for (int i = 0; i < 6; i++)
    y[i] = (pd[0][4 * i] + pd[0][4 * i + 1] + pd[0][4 * i + 2] + pd[0][4 * i + 3]) / 4;
}
static void ref_global_max(double (*pd)[MAX_E], double *y) {
  for (int i = 0; i < 6; i++)
    y[i] = fmax(fmax(pd[0][4 * i], pd[0][4 * i + 1]), fmax(pd[0][4 * i + 2], pd[0][4 * i + 3]));
}


/* ---- Conv and the pools: C references (NCHW) ---- */
typedef struct cfg2d {
  int n, c, h, w, m, group, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
} cfg2d;

/* Conv, or (m = 0) a pool: kind 'a' average (count_include_pad 0), 'm' max */
static void ref_window(const cfg2d *k, char kind, double (*pd)[MAX_E], double *y) {
  int mo = k->m ? k->m : k->c;
  for (int n = 0; n < k->n; n++)
    for (int o = 0; o < mo; o++)
      for (int oh = 0; oh < k->oh; oh++)
        for (int ow = 0; ow < k->ow; ow++) {
          double acc = kind == 'm' ? -INFINITY : 0;
          int cnt = 0, cg = k->c / k->group, mg = mo / k->group, g0 = (o / mg) * cg;
          for (int ci = 0; ci < (k->m ? cg : 1); ci++)
            for (int i = 0; i < k->kh; i++)
              for (int j = 0; j < k->kw; j++) {
                int r = oh * k->sh + i * k->dh - k->pt, q = ow * k->sw + j * k->dw - k->pl;
                if (r < 0 || r >= k->h || q < 0 || q >= k->w) continue;
                int ch = k->m ? g0 + ci : o;
                double xv = pd[0][((n * k->c + ch) * k->h + r) * k->w + q];
                if (k->m) acc += xv * pd[1][((o * cg + ci) * k->kh + i) * k->kw + j];
                else if (kind == 'm') acc = fmax(acc, xv);
                else acc += xv;
                cnt++;
              }
          if (kind == 'a') acc /= cnt;
          if (k->m && kind == 'b') acc += pd[2][o];
          y[((n * mo + o) * k->oh + oh) * k->ow + ow] = acc;
        }
}

/* group 2, strides 2, asymmetric pads, bias: [1,4,5,5] * [4,2,3,3] → [1,4,3,2] */
static const cfg2d CONV_A = {1, 4, 5, 5, 4, 2, 3, 3, 2, 2, 1, 1, 1, 0, 3, 2};
static int32_t f_conv_a(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CONV, p, 3, &n);
  set_int(g, n, "group", 2);
  set_ints(g, n, "strides", 2, (int64_t[]){2, 2});
  set_ints(g, n, "pads", 4, (int64_t[]){1, 0, 2, 1});
  return done(g, n, y);
}
static void ref_conv_a(double (*pd)[MAX_E], double *y) { ref_window(&CONV_A, 'b', pd, y); }
/* dilations 2, pads 1: [2,2,4,4] * [3,2,2,2] → [2,3,4,4] */
static const cfg2d CONV_B = {2, 2, 4, 4, 3, 1, 2, 2, 1, 1, 2, 2, 1, 1, 4, 4};
static int32_t f_conv_b(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CONV, p, 2, &n);
  set_ints(g, n, "dilations", 2, (int64_t[]){2, 2});
  set_ints(g, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  return done(g, n, y);
}
static void ref_conv_b(double (*pd)[MAX_E], double *y) { ref_window(&CONV_B, 'c', pd, y); }
/* auto_pad SAME_UPPER, strides 2: [1,1,5,5] * [2,1,3,3] → [1,2,3,3] (pads 1, 1) */
static const cfg2d CONV_C = {1, 1, 5, 5, 2, 1, 3, 3, 2, 2, 1, 1, 1, 1, 3, 3};
static int32_t f_conv_c(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_CONV, p, 2, &n);
  set_string(g, n, "auto_pad", "SAME_UPPER");
  set_ints(g, n, "strides", 2, (int64_t[]){2, 2});
  return done(g, n, y);
}
static void ref_conv_c(double (*pd)[MAX_E], double *y) { ref_window(&CONV_C, 'c', pd, y); }
/* AveragePool 3x3, strides 2, pads 1, count_include_pad 0: [1,2,5,5] → [1,2,3,3] */
static const cfg2d AVG = {1, 2, 5, 5, 0, 1, 3, 3, 2, 2, 1, 1, 1, 1, 3, 3};
static int32_t f_avg_pool(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_AVERAGE_POOL, p, 1, &n);
  set_ints(g, n, "kernel_shape", 2, (int64_t[]){3, 3});
  set_ints(g, n, "strides", 2, (int64_t[]){2, 2});
  set_ints(g, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  return done(g, n, y);
}
static void ref_avg_pool(double (*pd)[MAX_E], double *y) { ref_window(&AVG, 'a', pd, y); }
/* MaxPool 2x3, strides [2,1], dilations [1,2], pads [0,1,1,0]: [1,2,5,5] → [1,2,3,2] */
static const cfg2d MAXP = {1, 2, 5, 5, 0, 1, 2, 3, 2, 1, 1, 2, 0, 1, 3, 2};
static int32_t f_max_pool(sc_graph *g, const int32_t *p) {
  int32_t n, y = opn(g, SC_OP_MAX_POOL, p, 1, &n);
  set_ints(g, n, "kernel_shape", 2, (int64_t[]){2, 3});
  set_ints(g, n, "strides", 2, (int64_t[]){2, 1});
  set_ints(g, n, "dilations", 2, (int64_t[]){1, 2});
  set_ints(g, n, "pads", 4, (int64_t[]){0, 1, 1, 0});
  return done(g, n, y);
}
static void ref_max_pool(double (*pd)[MAX_E], double *y) { ref_window(&MAXP, 'm', pd, y); }

#define D(...) {__VA_ARGS__}
static const gcase CASES[] = {
    {"Neg", 1, {2}, {D(2, 3)}, -2, 2, 0, f_neg, NULL},
    {"Exp", 1, {2}, {D(2, 3)}, -2, 2, 0, f_exp, NULL},
    {"Log", 1, {2}, {D(2, 3)}, 0.2, 3, 0, f_log, NULL},
    {"Sqrt", 1, {2}, {D(2, 3)}, 0.2, 3, 0, f_sqrt, NULL},
    {"Reciprocal", 1, {2}, {D(2, 3)}, 0.3, 3, 0, f_reciprocal, NULL},
    {"Relu", 1, {2}, {D(2, 3)}, -2, 2, 0, f_relu, NULL},
    {"Sigmoid", 1, {2}, {D(2, 3)}, -3, 3, 0, f_sigmoid, NULL},
    {"Tanh", 1, {2}, {D(2, 3)}, -2, 2, 0, f_tanh, NULL},
    {"Sin", 1, {2}, {D(2, 3)}, -3, 3, 0, f_sin, NULL},
    {"Cos", 1, {2}, {D(2, 3)}, -3, 3, 0, f_cos, NULL},
    {"Abs", 1, {2}, {D(2, 3)}, -2, 2, 0, f_abs, NULL},
    {"Identity", 1, {2}, {D(2, 3)}, -2, 2, 0, f_identity, NULL},
    {"LeakyRelu", 1, {2}, {D(2, 3)}, -2, 2, 0, f_leaky, NULL},
    {"Cast f64>f32>f64", 1, {2}, {D(2, 3)}, -2, 2, 1e-3, f_cast, NULL},
    {"Add broadcast", 2, {2, 1}, {D(2, 3), D(3)}, -2, 2, 0, f_add, NULL},
    {"Sub broadcast", 2, {2, 2}, {D(2, 3), D(2, 1)}, -2, 2, 0, f_sub, NULL},
    {"Mul broadcast", 2, {2, 2}, {D(2, 3), D(1, 3)}, -2, 2, 0, f_mul, NULL},
    {"Div broadcast", 2, {2, 1}, {D(2, 3), D(3)}, 0.3, 2, 0, f_div, NULL},
    {"Pow base and exponent", 2, {2, 1}, {D(2, 3), D(3)}, 0.3, 2, 0, f_pow, NULL},
    {"Sum of 3", 3, {2, 1, 0}, {D(2, 3), D(3), D(0)}, -2, 2, 0, f_sum3, NULL},
    {"MatMul", 2, {2, 2}, {D(2, 3), D(3, 4)}, -2, 2, 0, f_matmul, NULL},
    {"MatMul batched, broadcast weight", 2, {3, 2}, {D(2, 2, 3), D(3, 4)}, -2, 2, 0, f_matmul, NULL},
    {"MatMul batched both", 2, {3, 3}, {D(2, 2, 3), D(1, 3, 2)}, -2, 2, 0, f_matmul, NULL},
    {"MatMul 1-D A", 2, {1, 2}, {D(3), D(3, 4)}, -2, 2, 0, f_matmul, NULL},
    {"MatMul 1-D B", 2, {2, 1}, {D(2, 3), D(3)}, -2, 2, 0, f_matmul, NULL},
    {"MatMul 1-D both", 2, {1, 1}, {D(3), D(3)}, -2, 2, 0, f_matmul, NULL},
    {"Gemm alpha beta", 3, {2, 2, 1}, {D(2, 3), D(3, 4), D(4)}, -2, 2, 0, f_gemm, NULL},
    {"Gemm transA transB", 3, {2, 2, 2}, {D(3, 2), D(4, 3), D(2, 4)}, -2, 2, 0, f_gemm_t, NULL},
    {"ReduceSum", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_reduce_sum, NULL},
    {"ReduceMean keepdims", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_reduce_mean, NULL},
    {"Softmax", 1, {2}, {D(2, 4)}, -2, 2, 0, f_softmax, NULL},
    {"LogSoftmax middle axis", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_log_softmax, NULL},
    {"Reshape", 1, {2}, {D(2, 3)}, -2, 2, 0, f_reshape, NULL},
    {"Flatten", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_flatten, NULL},
    {"Unsqueeze, Squeeze", 1, {2}, {D(2, 3)}, -2, 2, 0, f_unsqueeze, NULL},
    {"Transpose", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_transpose, NULL},
    {"Transpose default", 1, {3}, {D(2, 3, 4)}, -2, 2, 0, f_transpose_default, NULL},
    {"Expand", 1, {2}, {D(1, 3)}, -2, 2, 0, f_expand, NULL},
    {"Concat", 2, {2, 2}, {D(2, 1), D(2, 2)}, -2, 2, 0, f_concat, NULL},
    {"Where", 2, {2, 1}, {D(2, 3), D(3)}, -2, 2, 0, f_where, NULL},
    {"Erf", 1, {2}, {D(2, 3)}, -2, 2, 0, f_erf, NULL},
    {"Gelu", 1, {2}, {D(2, 3)}, -3, 3, 0, f_gelu, NULL},
    {"Gelu tanh", 1, {2}, {D(2, 3)}, -3, 3, 0, f_gelu_tanh, NULL},
    {"Softplus", 1, {2}, {D(2, 3)}, -3, 3, 0, f_softplus, NULL},
    {"Mish", 1, {2}, {D(2, 3)}, -3, 3, 0, f_mish, NULL},
    {"Elu alpha", 1, {2}, {D(2, 3)}, -2, 2, 0, f_elu, NULL},
    {"Selu", 1, {2}, {D(2, 3)}, -2, 2, 0, f_selu, NULL},
    {"Celu alpha", 1, {2}, {D(2, 3)}, -2, 2, 0, f_celu, NULL},
    {"ThresholdedRelu alpha", 1, {2}, {D(2, 3)}, -2, 2, 0, f_thresholded_relu, NULL},
    {"Shrink lambd bias", 1, {2}, {D(2, 3)}, -2, 2, 0, f_shrink, NULL},
    {"Softsign", 1, {2}, {D(2, 3)}, -2, 2, 0, f_softsign, NULL},
    {"Sinh", 1, {2}, {D(2, 3)}, -2, 2, 0, f_sinh, NULL},
    {"Cosh", 1, {2}, {D(2, 3)}, -2, 2, 0, f_cosh, NULL},
    {"Tan", 1, {2}, {D(2, 3)}, -1.2, 1.2, 0, f_tan, NULL},
    {"Asinh", 1, {2}, {D(2, 3)}, -2, 2, 0, f_asinh, NULL},
    {"HardSigmoid alpha beta", 1, {2}, {D(2, 4)}, -2.5, 2.5, 0, f_hard_sigmoid, NULL},
    {"HardSwish", 1, {2}, {D(2, 4)}, -4.5, 4.5, 0, f_hard_swish, NULL},
    {"Clip min max", 1, {2}, {D(2, 4)}, -2, 2, 0, f_clip, NULL},
    {"Clip max only", 1, {2}, {D(2, 4)}, -2, 2, 0, f_clip_max, NULL},
    {"Dropout inference", 1, {2}, {D(2, 3)}, -2, 2, 0, f_dropout, NULL},
    {"PRelu slope broadcast", 2, {2, 1}, {D(2, 3), D(3)}, -2, 2, 0, f_prelu, NULL},
    {"Max of 3 broadcast", 3, {2, 1, 2}, {D(2, 3), D(3), D(2, 1)}, -2, 2, 0, f_max3, NULL},
    {"Min broadcast", 2, {2, 2}, {D(2, 3), D(1, 3)}, -2, 2, 0, f_min, NULL},
    {"Mean of 3 broadcast", 3, {2, 1, 0}, {D(2, 3), D(3), D(0)}, -2, 2, 0, f_mean3, NULL},
    {"ReduceSumSquare", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_reduce_sum_square, NULL},
    {"ReduceL2 keepdims", 1, {3}, {D(2, 3, 2)}, -2, 2, 0, f_reduce_l2, NULL},
    {"Gather axis 1, repeated and negative", 1, {2}, {D(3, 4)}, -2, 2, 0, f_gather_axis1, NULL},
    {"Gather rows (embedding)", 1, {2}, {D(4, 3)}, -2, 2, 0, f_gather_rows, NULL},
    {"Gather scalar index", 1, {2}, {D(3, 4)}, -2, 2, 0, f_gather_scalar, NULL},
    {"GatherElements repeated", 1, {2}, {D(3, 2)}, -2, 2, 0, f_gather_elements, NULL},
    {"ScatterElements axis 1", 2, {2, 2}, {D(3, 4), D(3, 2)}, -2, 2, 0, f_scatter_elements,
     NULL},
    {"ScatterElements add repeated", 2, {2, 2}, {D(3, 2), D(4, 2)}, -2, 2, 0,
     f_scatter_elements_add, NULL},
    {"ScatterND rows", 2, {2, 2}, {D(4, 3), D(2, 3)}, -2, 2, 0, f_scatter_nd, NULL},
    {"ScatterND add repeated elements", 2, {2, 1}, {D(4, 3), D(3)}, -2, 2, 0, f_scatter_nd_add,
     NULL},
    {"Slice negative start, clamped end", 1, {2}, {D(3, 4)}, -2, 2, 0, f_slice, NULL},
    {"Split, an output unused", 1, {2}, {D(2, 6)}, -1, 1, 0, f_split, NULL},
    {"Pad axes input", 1, {2}, {D(2, 3)}, -2, 2, 0, f_pad_axes, NULL},
    {"Slice default axes", 1, {2}, {D(3, 4)}, -2, 2, 0, f_slice_all, NULL},
    {"Tile", 1, {3}, {D(2, 1, 3)}, -2, 2, 0, f_tile, NULL},
    {"Pad constant", 1, {2}, {D(2, 3)}, -2, 2, 0, f_pad, NULL},
    {"LayerNormalization axis 1", 3, {3, 1, 2}, {D(2, 3, 4), D(4), D(3, 4)}, -2, 2, 0,
     f_layer_norm, ref_layer_norm},
    {"LayerNormalization last axis", 3, {2, 1, 1}, {D(3, 4), D(4), D(4)}, -2, 2, 0,
     f_layer_norm_last, ref_layer_norm_last},
    {"RMSNormalization", 2, {2, 1}, {D(2, 5), D(5)}, -2, 2, 0, f_rms_norm, ref_rms_norm},
    {"SoftmaxCrossEntropy", 1, {2}, {D(3, 5)}, -2, 2, 0, f_softmax_cross_entropy, NULL},
    {"BatchNormalization inference", 3, {3, 1, 1}, {D(2, 3, 2), D(3), D(3)}, -2, 2, 0,
     f_batch_norm, ref_batch_norm},
    {"GlobalAveragePool", 1, {4}, {D(2, 3, 2, 2)}, -2, 2, 0, f_global_avg, ref_global_avg},
    {"GlobalMaxPool", 1, {4}, {D(2, 3, 2, 2)}, -2, 2, 0, f_global_max, ref_global_max},
    {"Conv group 2, strides 2, pads, bias", 3, {4, 4, 1}, {D(1, 4, 5, 5), D(4, 2, 3, 3), D(4)},
     -1, 1, 0, f_conv_a, ref_conv_a},
    {"Conv dilations 2", 2, {4, 4}, {D(2, 2, 4, 4), D(3, 2, 2, 2)}, -1, 1, 0, f_conv_b,
     ref_conv_b},
    {"Conv SAME_UPPER strides 2", 2, {4, 4}, {D(1, 1, 5, 5), D(2, 1, 3, 3)}, -1, 1, 0, f_conv_c,
     ref_conv_c},
    {"AveragePool strides pads", 1, {4}, {D(1, 2, 5, 5)}, -2, 2, 0, f_avg_pool, ref_avg_pool},
    {"MaxPool strides dilations pads", 1, {4}, {D(1, 2, 5, 5)}, -2, 2, 0, f_max_pool,
     ref_max_pool},
    {"fan-out", 1, {2}, {D(2, 3)}, -1, 1, 0, f_fanout, NULL},
    {"MLP", 4, {2, 2, 1, 2}, {D(2, 3), D(3, 4), D(4), D(4, 2)}, -1, 1, 0, f_mlp, NULL},
};

/* ---- the harness ---- */

static int64_t numel(int32_t rank, const int64_t *dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* The case's graph with parameter data pd; L as a graph output. With
 * grads: autodiff too. The graph is folded; *loss gets L. */
static sc_graph *build(const gcase *k, double (*pd)[MAX_E], int32_t *grads, double *loss) {
  sc_graph *g = sc_graph_create("grad");
  assert_non_null(g);
  g->opset = 18;
  int32_t p[MAX_P];
  for (int i = 0; i < k->n_params; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    p[i] = sc_graph_add_value(g, name);
    assert_true(p[i] >= 0);
    int64_t n = numel(k->rank[i], k->dims[i]);
    assert_int_equal(sc_value_set_data(g, p[i], SC_DTYPE_F64, k->rank[i], k->dims[i], pd[i],
                                       (uint64_t)n * sizeof(double), true),
                     SC_OK);
    g->values[p[i]].flags |= SC_VALUE_PARAM;
  }
  int32_t y = k->fwd(g, p);
  const sc_value *yv = &g->values[y];
  double r[MAX_E];
  uint64_t save = *tu_rng_state();
  rng_seed(99);
  int64_t ny = numel(yv->rank, yv->dims);
  assert_true(ny <= MAX_E);
  for (int64_t i = 0; i < ny; i++) r[i] = rnd_nz(-1, 1);
  *tu_rng_state() = save;
  int32_t rv = cst(g, SC_DTYPE_F64, yv->rank, yv->dims, r);
  int32_t prod = op2(g, SC_OP_MUL, y, rv);
  int32_t n, l = opn(g, SC_OP_REDUCE_SUM, &prod, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, l);
  assert_int_equal(sc_graph_add_output(g, l), SC_OK);
  if (grads) {
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_autodiff(g, l, p, k->n_params, grads, &d) != SC_OK)
      fail_msg("%s: autodiff: %s", k->name, d.msg);
  }
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  if (sc_run_passes(g, "infer-shapes", &po) != SC_OK) fail_msg("%s: fold: %s", k->name, g->diag.msg);
  const sc_value *lv = &g->values[l];
  if (k->ref) { /* the op does not fold: L from the C reference */
    double yr[MAX_E];
    k->ref(pd, yr);
    *loss = 0;
    for (int64_t i = 0; i < ny; i++) *loss += yr[i] * r[i];
    return g;
  }
  assert_non_null(lv->data);
  *loss = sc_load_f64(lv->dtype, lv->data, 0);
  return g;
}

static void check_case(const gcase *k) {
  static double pd[MAX_P][MAX_E];
  for (int i = 0; i < k->n_params; i++) {
    int64_t n = numel(k->rank[i], k->dims[i]);
    assert_true(n <= MAX_E);
    for (int64_t e = 0; e < n; e++) {
      double v;
      do v = rnd(k->lo, k->hi);
      while (fabs(v) < 0.1);
      pd[i][e] = v;
    }
  }
  int32_t grads[MAX_P];
  double l0;
  sc_graph *g = build(k, pd, grads, &l0);
  assert_false(isnan(l0));
  /* a loose case goes through f32: a step far above its rounding (the
   * function is linear there, so the quotient stays exact) */
  double tol = k->tol > 0 ? k->tol : 1e-6, h = k->tol > 0 ? 1e-2 : 1e-6;
  for (int i = 0; i < k->n_params; i++) {
    if (grads[i] < 0) fail_msg("%s: no gradient for p%d", k->name, i);
    const sc_value *gv = &g->values[grads[i]];
    char want_name[32];
    snprintf(want_name, sizeof want_name, "grad:p%d", i);
    assert_string_equal(gv->name, want_name);
    assert_int_equal(gv->rank, k->rank[i]);
    if (!gv->data) fail_msg("%s: the gradient of p%d did not fold", k->name, i);
    int64_t n = numel(k->rank[i], k->dims[i]);
    for (int64_t e = 0; e < n; e++) {
      double keep = pd[i][e], lp, lm;
      pd[i][e] = keep + h;
      sc_graph_destroy(build(k, pd, NULL, &lp));
      pd[i][e] = keep - h;
      sc_graph_destroy(build(k, pd, NULL, &lm));
      pd[i][e] = keep;
      double fd = (lp - lm) / (2 * h), got = sc_load_f64(gv->dtype, gv->data, e);
      if (isnan(got) || !(fabs(got - fd) <= tol * fmax(1.0, fabs(fd))))
        fail_msg("%s: dL/dp%d[%lld] = %.12g, finite differences %.12g", k->name, i,
                 (long long)e, got, fd);
    }
  }
  sc_graph_destroy(g);
}

static void test_rules(void **state) {
  (void)state;
  rng_seed(7);
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i]);
}

/* A LayerNormalization or RMSNormalization whose Scale (and B) are the
 * row's shape gets one LayerNormGrad node (its gradients checked against
 * finite differences in test_rules); one whose Scale broadcasts (axis 1
 * of [2, 3, 4] with Scale [4]) keeps the decomposed gradient. */
static void test_fused_norm_grad(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int32_t fused;
  } want[] = {{"LayerNormalization last axis", 1}, {"RMSNormalization", 1},
              {"LayerNormalization axis 1", 0}};
  for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
    const gcase *k = NULL;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
      if (strcmp(CASES[i].name, want[w].name) == 0) k = &CASES[i];
    assert_non_null(k);
    static double pd[MAX_P][MAX_E];
    for (int i = 0; i < k->n_params; i++)
      for (int64_t e = 0; e < numel(k->rank[i], k->dims[i]); e++) pd[i][e] = rnd_nz(-2, 2);
    int32_t grads[MAX_P], fused = 0, reduces = 0;
    double l;
    sc_graph *g = build(k, pd, grads, &l);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      fused += g->nodes[i].op == SC_OP_LAYER_NORM_GRAD;
      reduces += g->nodes[i].op == SC_OP_REDUCE_MEAN;
    }
    assert_int_equal(fused, want[w].fused);
    if (!want[w].fused) assert_true(reduces > 0);
    sc_graph_destroy(g);
  }
}

/* MatMul's two gradients are two separate product nodes (Gemms with trans
 * flags for a linear layer: no Transpose node, no transposed copy), and
 * only the wanted one is built; the result verifies. */
static void test_structure(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("s");
  assert_non_null(g);
  g->opset = 18;
  int32_t a = inp(g, SC_DTYPE_F32, 2, (int64_t[]){2, 3});
  float w[12];
  for (int i = 0; i < 12; i++) w[i] = 0.1f * (float)(i + 1);
  int32_t wv = cst(g, SC_DTYPE_F32, 2, (int64_t[]){3, 4}, w);
  g->values[wv].flags |= SC_VALUE_PARAM;
  int32_t y = op2(g, SC_OP_MATMUL, a, wv);
  int32_t n, loss = opn(g, SC_OP_REDUCE_SUM, &y, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, loss);
  int32_t before = g->n_nodes, gw;
  sc_diag d = {0};
  sc_diag_clear(&d);
  /* the graph input a is not a parameter: only W needs a gradient */
  assert_int_equal(sc_autodiff(g, loss, &wv, 1, &gw, &d), SC_OK);
  assert_true(gw >= 0);
  check_shape(g, gw, SC_DTYPE_F32, 2, (int64_t[]){3, 4});
  int mm_nodes = 0, transposes = 0;
  for (int32_t i = before; i < g->n_nodes; i++) {
    mm_nodes += g->nodes[i].op == SC_OP_MATMUL || g->nodes[i].op == SC_OP_GEMM;
    transposes += g->nodes[i].op == SC_OP_TRANSPOSE;
  }
  assert_int_equal(mm_nodes, 1); /* only dW: the input needs no gradient */
  assert_int_equal(transposes, 0);
  sc_graph_destroy(g);

  /* both: two separate nodes */
  g = sc_graph_create("s2");
  g->opset = 18;
  float av[6] = {1, 2, 3, 4, 5, 6};
  int32_t ac = cst(g, SC_DTYPE_F32, 2, (int64_t[]){2, 3}, av);
  g->values[ac].flags |= SC_VALUE_PARAM;
  wv = cst(g, SC_DTYPE_F32, 2, (int64_t[]){3, 4}, w);
  g->values[wv].flags |= SC_VALUE_PARAM;
  y = op2(g, SC_OP_MATMUL, ac, wv);
  loss = opn(g, SC_OP_REDUCE_SUM, &y, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, loss);
  before = g->n_nodes;
  int32_t two[2] = {ac, wv}, g2[2];
  assert_int_equal(sc_autodiff(g, loss, two, 2, g2, &d), SC_OK);
  mm_nodes = 0;
  for (int32_t i = before; i < g->n_nodes; i++) {
    mm_nodes += g->nodes[i].op == SC_OP_MATMUL || g->nodes[i].op == SC_OP_GEMM;
    transposes += g->nodes[i].op == SC_OP_TRANSPOSE;
  }
  assert_int_equal(mm_nodes, 2);
  assert_int_equal(transposes, 0);
  assert_int_equal(sc_graph_verify(g, true), SC_OK);
  sc_graph_destroy(g);
}

static void test_errors(void **state) {
  (void)state;
  /* Floor has no rule: the error names the node and the op */
  sc_graph *g = sc_graph_create("e");
  g->opset = 18;
  double x[4] = {0.5, 1.5, -2.5, 3.5};
  int32_t p = cst(g, SC_DTYPE_F64, 1, (int64_t[]){4}, x);
  g->values[p].flags |= SC_VALUE_PARAM;
  int32_t fl;
  int32_t fn = node1(g, SC_OP_FLOOR, "the_floor", &p, 1, &fl);
  assert_int_equal(infer(g, fn), SC_OK);
  int32_t n, loss = opn(g, SC_OP_REDUCE_SUM, &fl, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, loss);
  int32_t gr;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_autodiff(g, loss, &p, 1, &gr, &d), SC_ERR_UNSUPPORTED);
  assert_string_equal(d.node, "the_floor");
  assert_string_equal(d.op, "Floor");
  assert_non_null(strstr(d.msg, "no gradient rule"));
  /* a loss that is not a scalar */
  sc_diag_clear(&d);
  assert_int_equal(sc_autodiff(g, fl, &p, 1, &gr, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "scalar"));
  sc_graph_destroy(g);
}


/* Max / Min give a tied element's gradient to every tied input, split
 * evenly (PyTorch's torch.maximum gives each of its two inputs half). */
static void test_ties(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  g->opset = 18;
  double av[3] = {1, 2, 3}, bv[3] = {1, 0, 3}, cv[3] = {1, -1, 0.5};
  int32_t p[3] = {cst(g, SC_DTYPE_F64, 1, (int64_t[]){3}, av),
                  cst(g, SC_DTYPE_F64, 1, (int64_t[]){3}, bv),
                  cst(g, SC_DTYPE_F64, 1, (int64_t[]){3}, cv)};
  for (int i = 0; i < 3; i++) g->values[p[i]].flags |= SC_VALUE_PARAM;
  int32_t n, y = opn(g, SC_OP_MAX, p, 3, &n);
  done(g, n, y);
  int32_t loss = opn(g, SC_OP_REDUCE_SUM, &y, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, loss);
  int32_t gr[3];
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_autodiff(g, loss, p, 3, gr, &d), SC_OK);
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  assert_int_equal(sc_run_passes(g, "infer-shapes", &po), SC_OK);
  /* element 0: a three-way tie; 1: a alone; 2: a and b */
  const double want[3][3] = {{1.0 / 3, 1, 0.5}, {1.0 / 3, 0, 0.5}, {1.0 / 3, 0, 0}};
  for (int i = 0; i < 3; i++) {
    assert_non_null(g->values[gr[i]].data);
    for (int e = 0; e < 3; e++)
      assert_true(fabs(((const double *)g->values[gr[i]].data)[e] - want[i][e]) < 1e-15);
  }
  sc_graph_destroy(g);
}

/* The refused forms name the node: a Slice with step 2, training-mode
 * Dropout, a Pad in reflect mode, a ScatterElements multiplying. */
static void expect_refused(sc_graph *g, int32_t p, int32_t y, const char *node, const char *what) {
  int32_t n, loss = opn(g, SC_OP_REDUCE_SUM, &y, 1, &n);
  set_int(g, n, "keepdims", 0);
  done(g, n, loss);
  int32_t gr;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_autodiff(g, loss, &p, 1, &gr, &d), SC_ERR_UNSUPPORTED);
  assert_string_equal(d.node, node);
  if (!strstr(d.msg, what)) fail_msg("'%s' does not say '%s'", d.msg, what);
}

static void test_refused(void **state) {
  (void)state;
  double x[8] = {0.5, 1.5, -2.5, 3.5, 0.25, -0.75, 1.25, 2};
  sc_graph *g = sc_graph_create("r");
  g->opset = 18;
  int32_t p = cst(g, SC_DTYPE_F64, 1, (int64_t[]){8}, x), y;
  g->values[p].flags |= SC_VALUE_PARAM;
  int32_t in[5] = {p, i64s(g, 1, (int64_t[]){0}), i64s(g, 1, (int64_t[]){8}),
                   i64s(g, 1, (int64_t[]){0}), i64s(g, 1, (int64_t[]){2})};
  assert_int_equal(infer(g, node1(g, SC_OP_SLICE, "strided", in, 5, &y)), SC_OK);
  expect_refused(g, p, y, "strided", "step 2");
  sc_graph_destroy(g);

  g = sc_graph_create("r");
  g->opset = 18;
  p = cst(g, SC_DTYPE_F64, 1, (int64_t[]){8}, x);
  g->values[p].flags |= SC_VALUE_PARAM;
  uint8_t yes = 1;
  double ratio = 0.5;
  int32_t din[3] = {p, cst(g, SC_DTYPE_F64, 0, NULL, &ratio), cst(g, SC_DTYPE_BOOL, 0, NULL, &yes)};
  int32_t dn = node1(g, SC_OP_DROPOUT, "drop", din, 3, &y);
  sc_ops[SC_OP_DROPOUT].infer(g, &g->nodes[dn]); /* folding it is refused: it is random */
  expect_refused(g, p, y, "drop", "training-mode");
  sc_graph_destroy(g);

  g = sc_graph_create("r");
  g->opset = 18;
  p = cst(g, SC_DTYPE_F64, 1, (int64_t[]){8}, x);
  g->values[p].flags |= SC_VALUE_PARAM;
  int32_t pin[2] = {p, i64s(g, 2, (int64_t[]){1, 2})};
  int32_t pn = node1(g, SC_OP_PAD, "reflect", pin, 2, &y);
  set_string(g, pn, "mode", "reflect");
  assert_int_equal(infer(g, pn), SC_OK);
  expect_refused(g, p, y, "reflect", "mode 'reflect'");
  sc_graph_destroy(g);

  g = sc_graph_create("r");
  g->opset = 18;
  p = cst(g, SC_DTYPE_F64, 1, (int64_t[]){8}, x);
  g->values[p].flags |= SC_VALUE_PARAM;
  double u[2] = {0.5, -1.5};
  int32_t scat[3] = {p, i64s(g, 2, (int64_t[]){1, 6}), cst(g, SC_DTYPE_F64, 1, (int64_t[]){2}, u)};
  int32_t sn = node1(g, SC_OP_SCATTER_ELEMENTS, "scatter_mul", scat, 3, &y);
  set_string(g, sn, "reduction", "mul");
  assert_int_equal(infer(g, sn), SC_OK);
  expect_refused(g, p, y, "scatter_mul", "reduction 'mul'");
  sc_graph_destroy(g);
}

/* The forward values of the built step g the backward reads ("saved":
 * produced before the first node named ".../grad/...", read after it) of
 * rank >= 2: *widened counts the f32 ones computed from low values alone,
 * *low the low ones. */
static void saved_by_dtype(const sc_graph *g, sc_dtype low, int *widened, int *n_low) {
  int32_t first_bwd = g->n_nodes;
  for (int32_t i = 0; i < g->n_nodes && first_bwd == g->n_nodes; i++)
    if (g->nodes[i].name && strstr(g->nodes[i].name, "/grad/")) first_bwd = i;
  assert_true(first_bwd < g->n_nodes);
  bool *wide = calloc((size_t)g->n_values + 1, sizeof *wide);
  assert_non_null(wide);
  for (int32_t i = 0; i < first_bwd; i++) {
    const sc_node *n = &g->nodes[i];
    uint32_t f = (unsigned)n->op < SC_OP_COUNT ? sc_ops[n->op].flags : 0;
    if (n->flags & SC_NODE_DEAD) continue;
    if (!(f & (SC_OPF_ELEMENTWISE | SC_OPF_SHAPE)) || n->n_outputs < 1 || n->outputs[0] < 0)
      continue;
    const sc_value *o = &g->values[n->outputs[0]];
    if (o->dtype != SC_DTYPE_F32) continue;
    bool any = false, ok = true;
    for (int32_t k = 0; k < n->n_inputs && ok; k++) {
      int32_t x = n->inputs[k];
      if (x < 0 || (g->values[x].dtype != SC_DTYPE_F32 && g->values[x].dtype != low)) continue;
      if (g->values[x].dtype == low || wide[x]) any = true;
      else ok = (g->values[x].flags & SC_VALUE_CONST) || sc_value_numel(&g->values[x]) < sc_value_numel(o);
    }
    if (n->op == SC_OP_CAST) ok = true;
    for (int32_t j = 0; any && ok && j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) wide[n->outputs[j]] = true;
  }
  *widened = *n_low = 0;
  bool *counted = calloc((size_t)g->n_values + 1, sizeof *counted);
  assert_non_null(counted);
  for (int32_t i = first_bwd; i < g->n_nodes; i++)
    for (int32_t k = 0; !(g->nodes[i].flags & SC_NODE_DEAD) && k < g->nodes[i].n_inputs; k++) {
      int32_t x = g->nodes[i].inputs[k], p = x >= 0 ? g->values[x].producer : -1;
      if (p < 0 || p >= first_bwd || counted[x] || g->values[x].rank < 2) continue;
      counted[x] = true;
      if (wide[x]) {
        print_message("saved widened: %s\n", g->values[x].name ? g->values[x].name : "?");
        (*widened)++;
      }
      if (g->values[x].dtype == low) (*n_low)++;
    }
  free(wide);
  free(counted);
}

/* The gradient of each Gelu of the low-precision step g computes in f32
 * (autocast's opmath): its nodes (named "<Gelu>/grad/N") read no constant
 * of dtype low, and exactly one of them narrows, a Cast to low (the
 * result). Returns the number of Gelu nodes. */
static int gelu_grads_f32(const sc_graph *g, sc_dtype low) {
  int n_gelu = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *fw = &g->nodes[i];
    if (fw->op != SC_OP_GELU || !fw->name || strstr(fw->name, "/grad/")) continue;
    n_gelu++;
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/grad/", fw->name);
    int nodes = 0, narrow = 0, low_consts = 0;
    for (int32_t j = 0; j < g->n_nodes; j++) {
      const sc_node *n = &g->nodes[j];
      if (!n->name || strncmp(n->name, prefix, strlen(prefix)) != 0) continue;
      nodes++;
      for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && (g->values[n->inputs[k]].flags & SC_VALUE_CONST) &&
            g->values[n->inputs[k]].dtype == low)
          low_consts++;
      if (n->op == SC_OP_CAST && n->n_outputs > 0 && n->outputs[0] >= 0 &&
          g->values[n->outputs[0]].dtype == low)
        narrow++;
    }
    print_message("%s: %d gradient nodes, %d narrowing casts, %d low constants\n", fw->name, nodes,
                  narrow, low_consts);
    assert_true(nodes > 10);
    assert_int_equal(narrow, 1);
    assert_int_equal(low_consts, 0);
  }
  return n_gelu;
}

static void check_low_saved(const char *model, bool fp16) {
  char path[1024];
  snprintf(path, sizeof path, "%s/samples/%s", SC_SOURCE_DIR, model);
  sc_import_opts io = {0};
  sc_graph *g = NULL;
  sc_diag d = {0};
  if (sc_onnx_import(path, &io, &g, &d) != SC_OK) fail_msg("%s: %s", path, d.msg);
  sc_graph_bind_dim(g, "batch", 2);
  sc_train_opts o;
  sc_train_opts_init(&o, SC_OPTIMIZER_ADAMW);
  o.bf16 = !fp16;
  o.fp16 = fp16;
  sc_train_info info;
  if (sc_train_build(g, &o, &info, &d) != SC_OK) fail_msg("%s: %s", model, d.msg);
  int widened, n_low;
  saved_by_dtype(g, fp16 ? SC_DTYPE_F16 : SC_DTYPE_BF16, &widened, &n_low);
  print_message("%s %s: %d low activations saved, %d widened\n", model, fp16 ? "fp16" : "bf16",
                n_low, widened);
  assert_int_equal(widened, 0);
  assert_true(n_low > 0);
  if (strcmp(model, "gpt2.onnx") == 0) /* its two tanh GELUs, one Gelu each after fuse-gelu */
    assert_int_equal(gelu_grads_f32(g, fp16 ? SC_DTYPE_F16 : SC_DTYPE_BF16), 2);
  sc_graph_destroy(g);
}

static void test_low_precision_saved(void **state) {
  (void)state;
  check_low_saved("gpt2.onnx", false);
  check_low_saved("gpt2.onnx", true);
  check_low_saved("mlp.onnx", false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_structure),
      cmocka_unit_test(test_fused_norm_grad),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_ties),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_low_precision_saved),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
