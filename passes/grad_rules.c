/* grad_rules.c — the gradient rules the ops table names (grad_rule.h,
 * docs/training.md), and the builders they share.
 *
 * Every rule reads its forward node afresh through gb_fwd after building
 * (a builder may grow the node array), writes dx only for wanted inputs,
 * and builds nothing for an input that is not wanted. Formulas (y the
 * output, dy its gradient; broadcasts undone by gb_unbroadcast):
 *   Neg −dy · Exp dy·y · Log dy/x · Sqrt dy/(2y) · Reciprocal −dy·y² ·
 *   Relu dy where x>0 · Sigmoid dy·y·(1−y) · Tanh dy·(1−y²) · Sin dy·cos x ·
 *   Cos −dy·sin x · Abs dy·sign x · LeakyRelu dy where x>0, else α·dy ·
 *   Cast dy cast back · Identity dy
 *   Add dy, dy · Sub dy, −dy · Mul dy·b, dy·a · Div dy/b, −dy·y/b ·
 *   Pow dy·e·a^(e−1), dy·y·ln a · Sum dy for each input
 *   MatMul dA = dY·Bᵀ, dB = Aᵀ·dY (two separate nodes; 1-D operands are
 *   viewed as [1,K] / [K,1]) · Gemm likewise with transA/transB, alpha,
 *   and dC = β·dY
 *   ReduceSum dy expanded back · ReduceMean the same divided by the count
 *   Softmax y·(dy − Σ dy·y) · LogSoftmax dy − exp(y)·Σ dy (along the axis)
 *   Reshape / Flatten / Squeeze / Unsqueeze dy reshaped to x · Transpose dy
 *   by the inverse permutation · Expand dy unbroadcast · Concat slices of
 *   dy · Where dy where the condition holds (x), where it does not (y)
 *   Erf dy·2/√π·exp(−x²) · Gelu (none | tanh, the attribute read through
 *   sc_ew_attrs_read) · Softplus dy·σ(x) · Mish · Elu, Selu · HardSigmoid,
 *   HardSwish (PyTorch's regions) · Clip dy where min < x < max · Dropout
 *   (inference form) dy · PRelu x and slope · Max / Min dy to the selected
 *   input, ties split evenly · Mean dy/n · ReduceSumSquare 2x·dy ·
 *   ReduceL2 x/y·dy (0 where y = 0)
 *   Gather / GatherElements a scatter-add (ScatterND / ScatterElements,
 *   reduction "add") of dy into zeros · ScatterElements / ScatterND
 *   (reduction none, add) dy gathered at the indices for the updates, dy
 *   (add) or dy with zeros scattered there (none) for the data · Slice
 *   (step 1) dy padded with zeros · Pad (constant) a Slice of dy · Split a
 *   Concat of the outputs' gradients · Tile a sum over the tiles
 *   LayerNormalization, RMSNormalization (recomputed from X), inference
 *   BatchNormalization · GlobalAveragePool, GlobalMaxPool · Conv,
 *   AveragePool, MaxPool (2-D, through im2col / col2im below)
 * Non-differentiable inputs (indices, bounds, shapes, running statistics)
 * get none; forms a rule cannot handle are refused with SC_ERR_UNSUPPORTED
 * naming the node (Slice steps other than 1, scatters with reduction mul,
 * max or min, Pad modes other than constant or negative pads,
 * training-mode Dropout and BatchNormalization, paths
 * through LayerNorm's Mean/InvStdDev or MaxPool's Indices, 1-D and 3-D
 * windows, AveragePool with ceil_mode). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/elementwise.h"
#include "ir/op_util.h"
#include "passes/grad_rule.h"

/* Prototypes of every rule ops.def names. */
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                       \
  sc_status sc_##grad(sc_grad_ctx *c);
#include "ir/ops.def"
#undef OP

/* ---- builders ---- */

const sc_node *gb_fwd(const sc_grad_ctx *c) { return &c->g->nodes[c->node]; }

int32_t gb_begin(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, int32_t *node) {
  sc_graph *g = c->g;
  char name[512];
  if (c->node < 0) { /* a builder outside a rule: the training step's own nodes */
    snprintf(name, sizeof name, "train/%d", (int)(*c->counter)++);
  } else {
    const char *fwd = gb_fwd(c)->name;
    snprintf(name, sizeof name, "%s/%s/%d", fwd ? fwd : sc_op_name(gb_fwd(c)->op),
             c->tag ? c->tag : "grad", (int)(*c->counter)++);
  }
  int32_t out = sc_graph_new_value(g, name);
  if (out < 0) return -1;
  *node = sc_graph_add_node(g, op, name, in, n_in, &out, 1);
  return *node < 0 ? -1 : out;
}

int32_t gb_end(sc_grad_ctx *c, int32_t node, int32_t out) {
  if (out < 0 || node < 0) return -1;
  sc_graph *g = c->g;
  sc_node *n = &g->nodes[node];
  return sc_ops[n->op].infer(g, n) == SC_OK ? out : -1;
}

int32_t gb_node(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, int32_t n_out,
                const char *const *suffix, int32_t *outs) {
  sc_graph *g = c->g;
  for (int32_t i = 0; i < n_in; i++)
    if (in[i] < 0) return -1;
  if (n_out > 8) {
    sc_graph_error(g, SC_ERR_LIMIT, "a node of %d outputs", (int)n_out);
    return -1;
  }
  char name[512];
  const sc_node *f = c->node >= 0 ? gb_fwd(c) : NULL;
  snprintf(name, sizeof name, "%s/%s/%d", f && f->name ? f->name : f ? sc_op_name(f->op) : "train",
           c->tag ? c->tag : "grad", (int)(*c->counter)++);
  for (int32_t j = 0; j < n_out; j++) {
    char vn[600];
    snprintf(vn, sizeof vn, "%s:%s", name, suffix[j]);
    if ((outs[j] = sc_graph_new_value(g, vn)) < 0) return -1;
  }
  return sc_graph_add_node(g, op, name, in, n_in, outs, n_out);
}

int32_t gb_op(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in) {
  for (int32_t i = 0; i < n_in; i++)
    if (in[i] < 0) return -1;
  int32_t node = -1, out = gb_begin(c, op, in, n_in, &node);
  return gb_end(c, node, out);
}

int32_t gb_1(sc_grad_ctx *c, sc_op op, int32_t a) { return gb_op(c, op, &a, 1); }
int32_t gb_2(sc_grad_ctx *c, sc_op op, int32_t a, int32_t b) {
  return gb_op(c, op, (int32_t[]){a, b}, 2);
}

static int32_t new_const(sc_grad_ctx *c, sc_dtype t, int32_t rank, const int64_t *dims,
                         const void *data, uint64_t bytes) {
  sc_graph *g = c->g;
  int32_t v = sc_graph_new_value(g, "grad_const");
  if (v < 0 || sc_value_set_data(g, v, t, rank, dims, data, bytes, true) != SC_OK) return -1;
  return v;
}

int32_t gb_scalar(sc_grad_ctx *c, sc_dtype t, double v) {
  uint8_t buf[16] = {0};
  sc_store_f64(t, buf, 0, v);
  return new_const(c, t, 0, NULL, buf, sc_dtype_size(t));
}

int32_t gb_ints(sc_grad_ctx *c, const int64_t *v, int32_t n) {
  int64_t dims[1] = {n};
  return new_const(c, SC_DTYPE_I64, 1, dims, v, (uint64_t)n * sizeof(int64_t));
}

sc_attr *gb_ints_attr(sc_grad_ctx *c, int32_t node, const char *name, const int64_t *v,
                      int32_t n) {
  sc_graph *g = c->g;
  sc_attr *a = sc_node_add_attr(g, node, name, SC_ATTR_INTS);
  if (!a) return NULL;
  a->n = n;
  a->ints = sc_arena_array(&g->arena, (size_t)(n ? n : 1), sizeof(int64_t));
  if (!a->ints) return NULL;
  if (n) memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
  return a;
}

int32_t gb_reduce(sc_grad_ctx *c, sc_op op, int32_t x, const int64_t *axes, int32_t n,
                  bool keep) {
  if (x < 0) return -1;
  int32_t node = -1, out = gb_begin(c, op, &x, 1, &node);
  if (out < 0 || !gb_ints_attr(c, node, "axes", axes, n)) return -1;
  sc_attr *k = sc_node_add_attr(c->g, node, "keepdims", SC_ATTR_INT);
  if (!k) return -1;
  k->i = keep;
  return gb_end(c, node, out);
}

int32_t gb_op_i(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, const char *attr,
                int64_t v) {
  for (int32_t i = 0; i < n_in; i++)
    if (in[i] < 0) return -1;
  int32_t node = -1, out = gb_begin(c, op, in, n_in, &node);
  sc_attr *a = out < 0 ? NULL : sc_node_add_attr(c->g, node, attr, SC_ATTR_INT);
  if (!a) return -1;
  a->i = v;
  return gb_end(c, node, out);
}

int32_t gb_cast(sc_grad_ctx *c, int32_t x, sc_dtype t) {
  if (x >= 0 && c->g->values[x].dtype == t) return x;
  return gb_op_i(c, SC_OP_CAST, &x, 1, "to", sc_dtype_to_onnx(t));
}

int32_t gb_where(sc_grad_ctx *c, int32_t cond, int32_t a, int32_t b) {
  return gb_op(c, SC_OP_WHERE, (int32_t[]){cond, a, b}, 3);
}

int32_t gb_reduce_sum(sc_grad_ctx *c, int32_t x, const int64_t *axes, int32_t n, bool keep) {
  return n == 0 ? x : gb_reduce(c, SC_OP_REDUCE_SUM, x, axes, n, keep);
}

int32_t gb_reshape(sc_grad_ctx *c, int32_t x, int32_t rank, const int64_t *dims) {
  if (x < 0) return -1;
  const sc_value *v = &c->g->values[x];
  if (v->rank == rank && memcmp(v->dims, dims, (size_t)rank * sizeof *dims) == 0) return x;
  return gb_2(c, SC_OP_RESHAPE, x, gb_ints(c, dims, rank));
}

int32_t gb_transpose(sc_grad_ctx *c, int32_t x, const int64_t *perm, int32_t n) {
  if (x < 0) return -1;
  int32_t node = -1, out = gb_begin(c, SC_OP_TRANSPOSE, &x, 1, &node);
  if (out < 0 || !gb_ints_attr(c, node, "perm", perm, n)) return -1;
  return gb_end(c, node, out);
}

int32_t gb_swap_last(sc_grad_ctx *c, int32_t x) {
  if (x < 0) return -1;
  int32_t r = c->g->values[x].rank;
  int64_t perm[SC_MAX_RANK];
  for (int32_t i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return gb_transpose(c, x, perm, r);
}

int32_t gb_expand(sc_grad_ctx *c, int32_t x, int32_t rank, const int64_t *dims) {
  return gb_2(c, SC_OP_EXPAND, x, gb_ints(c, dims, rank));
}

int32_t gb_unbroadcast(sc_grad_ctx *c, int32_t gr, int32_t to) {
  if (gr < 0 || to < 0) return -1;
  sc_value gv = c->g->values[gr], tv = c->g->values[to];
  int64_t axes[SC_MAX_RANK];
  int32_t n = 0, lead = gv.rank - tv.rank;
  for (int32_t d = 0; d < gv.rank; d++)
    if (d < lead || (tv.dims[d - lead] == 1 && gv.dims[d] != 1)) axes[n++] = d;
  int32_t s = gb_reduce_sum(c, gr, axes, n, true);
  return gb_reshape(c, s, tv.rank, tv.dims);
}

/* ---- helpers of the rules ---- */

static int32_t in_v(const sc_grad_ctx *c, int32_t i) {
  const sc_node *n = gb_fwd(c);
  return i < n->n_inputs ? n->inputs[i] : -1;
}
static int32_t out_v(const sc_grad_ctx *c, int32_t j) { return gb_fwd(c)->outputs[j]; }
static sc_dtype dtype_of(const sc_grad_ctx *c, int32_t v) { return c->g->values[v].dtype; }

/* dx[0] = f(dy) for a unary op, built only when wanted. */
#define UNARY_RULE(name, expr)                                  \
  sc_status sc_##name(sc_grad_ctx *c) {                         \
    if (!c->want[0] || c->dy[0] < 0) return SC_OK;              \
    int32_t x = in_v(c, 0), y = out_v(c, 0), dy = c->dy[0];     \
    sc_dtype t = dtype_of(c, x);                                \
    (void)y;                                                    \
    (void)t;                                                    \
    c->dx[0] = (expr);                                          \
    return c->dx[0] < 0 ? c->g->diag.status : SC_OK;            \
  }

UNARY_RULE(grad_neg, gb_1(c, SC_OP_NEG, dy))
UNARY_RULE(grad_exp, gb_2(c, SC_OP_MUL, dy, y))
UNARY_RULE(grad_log, gb_2(c, SC_OP_DIV, dy, x))
UNARY_RULE(grad_sqrt, gb_2(c, SC_OP_DIV, dy, gb_2(c, SC_OP_MUL, y, gb_scalar(c, t, 2.0))))
UNARY_RULE(grad_reciprocal,
           gb_1(c, SC_OP_NEG, gb_2(c, SC_OP_MUL, dy, gb_2(c, SC_OP_MUL, y, y))))
UNARY_RULE(grad_relu, gb_op(c, SC_OP_WHERE,
                            (int32_t[]){gb_2(c, SC_OP_GREATER, x, gb_scalar(c, t, 0.0)), dy,
                                        gb_scalar(c, t, 0.0)},
                            3))
UNARY_RULE(grad_sigmoid,
           gb_2(c, SC_OP_MUL, dy,
                gb_2(c, SC_OP_MUL, y, gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), y))))
UNARY_RULE(grad_tanh, gb_2(c, SC_OP_MUL, dy,
                           gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), gb_2(c, SC_OP_MUL, y, y))))
UNARY_RULE(grad_sin, gb_2(c, SC_OP_MUL, dy, gb_1(c, SC_OP_COS, x)))
UNARY_RULE(grad_cos, gb_1(c, SC_OP_NEG, gb_2(c, SC_OP_MUL, dy, gb_1(c, SC_OP_SIN, x))))
UNARY_RULE(grad_abs, gb_2(c, SC_OP_MUL, dy, gb_1(c, SC_OP_SIGN, x)))
UNARY_RULE(grad_identity, dy)

sc_status sc_grad_leaky_relu(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a); /* alpha's default lives there */
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t pos = gb_2(c, SC_OP_GREATER, x, gb_scalar(c, t, 0.0));
  c->dx[0] = gb_op(c, SC_OP_WHERE,
                   (int32_t[]){pos, dy, gb_2(c, SC_OP_MUL, dy, gb_scalar(c, t, a.alpha))}, 3);
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

sc_status sc_grad_cast(sc_grad_ctx *c) {
  int32_t x = in_v(c, 0);
  if (!c->want[0] || c->dy[0] < 0 || !sc_dtype_is_float(dtype_of(c, x))) return SC_OK;
  c->dx[0] = gb_cast(c, c->dy[0], dtype_of(c, x));
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

/* dx[i] = unbroadcast(g_i) for the wanted inputs of a binary op. */
static sc_status set_binary(sc_grad_ctx *c, int32_t ga, int32_t gb) {
  int32_t a = in_v(c, 0), b = in_v(c, 1);
  if (c->want[0] && (c->dx[0] = gb_unbroadcast(c, ga, a)) < 0) return c->g->diag.status;
  if (c->want[1] && (c->dx[1] = gb_unbroadcast(c, gb, b)) < 0) return c->g->diag.status;
  return SC_OK;
}

sc_status sc_grad_add(sc_grad_ctx *c) {
  if (c->dy[0] < 0) return SC_OK;
  return set_binary(c, c->dy[0], c->dy[0]);
}

sc_status sc_grad_sub(sc_grad_ctx *c) {
  if (c->dy[0] < 0) return SC_OK;
  return set_binary(c, c->dy[0], c->want[1] ? gb_1(c, SC_OP_NEG, c->dy[0]) : -1);
}

sc_status sc_grad_mul(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], a = in_v(c, 0), b = in_v(c, 1);
  if (dy < 0) return SC_OK;
  return set_binary(c, c->want[0] ? gb_2(c, SC_OP_MUL, dy, b) : -1,
                    c->want[1] ? gb_2(c, SC_OP_MUL, dy, a) : -1);
}

sc_status sc_grad_div(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], b = in_v(c, 1), y = out_v(c, 0);
  if (dy < 0) return SC_OK;
  int32_t ga = c->want[0] ? gb_2(c, SC_OP_DIV, dy, b) : -1;
  int32_t gb = c->want[1]
                   ? gb_1(c, SC_OP_NEG, gb_2(c, SC_OP_MUL, dy, gb_2(c, SC_OP_DIV, y, b)))
                   : -1;
  return set_binary(c, ga, gb);
}

sc_status sc_grad_pow(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], a = in_v(c, 0), e = in_v(c, 1), y = out_v(c, 0);
  if (dy < 0) return SC_OK;
  sc_dtype t = dtype_of(c, a);
  int32_t ga = -1, ge = -1;
  if (c->want[0]) { /* dy · e · a^(e−1): e cast to a's dtype when it differs */
    int32_t ef = gb_cast(c, e, t);
    if (ef < 0) return c->g->diag.status;
    int32_t em1 = gb_2(c, SC_OP_SUB, ef, gb_scalar(c, t, 1.0));
    ga = gb_2(c, SC_OP_MUL, dy, gb_2(c, SC_OP_MUL, ef, gb_2(c, SC_OP_POW, a, em1)));
  }
  if (c->want[1]) /* dy · y · ln a (a > 0) */
    ge = gb_2(c, SC_OP_MUL, dy, gb_2(c, SC_OP_MUL, y, gb_1(c, SC_OP_LOG, a)));
  return set_binary(c, ga, ge);
}

sc_status sc_grad_sum(sc_grad_ctx *c) {
  if (c->dy[0] < 0) return SC_OK;
  int32_t n = gb_fwd(c)->n_inputs;
  for (int32_t i = 0; i < n; i++)
    if (c->want[i] && (c->dx[i] = gb_unbroadcast(c, c->dy[0], in_v(c, i))) < 0)
      return c->g->diag.status;
  return SC_OK;
}

/* x viewed with at least 2 dims: [K] → [1,K] (row) or [K,1] (column). */
static int32_t as_matrix(sc_grad_ctx *c, int32_t x, bool row) {
  const sc_value *v = &c->g->values[x];
  if (v->rank >= 2) return x;
  int64_t dims[2] = {row ? 1 : v->dims[0], row ? v->dims[0] : 1};
  return gb_reshape(c, x, 2, dims);
}

/* dY viewed with the dims a 1-D operand dropped put back: A [K] dropped
 * M ([..., N] → [..., 1, N]), B [K] dropped N ([..., M] → [..., M, 1]). */
static int32_t dy_matrix(sc_grad_ctx *c, int32_t dy, int32_t a, int32_t b) {
  sc_value av = c->g->values[a], bv = c->g->values[b], yv = c->g->values[dy];
  if (av.rank >= 2 && bv.rank >= 2) return dy;
  int64_t dims[SC_MAX_RANK + 2];
  int32_t r = yv.rank;
  memcpy(dims, yv.dims, (size_t)r * sizeof *dims);
  if (av.rank < 2 && bv.rank < 2) {
    dims[0] = dims[1] = 1;
    r = 2;
  } else if (av.rank < 2) {
    dims[r] = dims[r - 1];
    dims[r - 1] = 1;
    r++;
  } else {
    dims[r++] = 1;
  }
  return gb_reshape(c, dy, r, dims);
}

/* A column result [..., K, 1] of a 1-D B without its last dim. */
static int32_t drop_column(sc_grad_ctx *c, int32_t x) {
  if (x < 0) return -1;
  sc_value v = c->g->values[x];
  return gb_reshape(c, x, v.rank - 1, v.dims);
}

/* Gemm(a, b) with transA / transB: the library call reads the operands
 * transposed, so no transposed copy is written (2-D a and b). */
/* x read through a 2-D Transpose: its input, and *t flipped (a product
 * reading Transpose(W) transposed reads W), so that a backward product does
 * not keep the forward's transposed copy alive (the 3-D MatMul(x,
 * Transpose(W)) of a tied LM head under dp beside cp, passes/partition/cp.c:
 * the copy would be saved for the backward). */
static int32_t untransposed(const sc_grad_ctx *c, int32_t x, bool *t) {
  if (x < 0 || c->g->values[x].rank != 2) return x;
  int32_t p = c->g->values[x].producer;
  if (p < 0 || c->g->nodes[p].op != SC_OP_TRANSPOSE || (c->g->nodes[p].flags & SC_NODE_DEAD))
    return x;
  const int64_t *perm = NULL;
  int64_t np = sc_attr_ints(c->g, &c->g->nodes[p], "perm", &perm);
  if (np >= 0 && (np != 2 || perm[0] != 1 || perm[1] != 0)) return x; /* none: reversed */
  *t = !*t;
  return c->g->nodes[p].inputs[0];
}

static int32_t gemm_t(sc_grad_ctx *c, int32_t a, int32_t b, bool ta, bool tb) {
  if (a < 0 || b < 0) return -1;
  a = untransposed(c, a, &ta);
  b = untransposed(c, b, &tb);
  int32_t node = -1, out = gb_begin(c, SC_OP_GEMM, (int32_t[]){a, b}, 2, &node);
  if (out < 0) return -1;
  const char *names[2] = {"transA", "transB"};
  bool on[2] = {ta, tb};
  for (int k = 0; k < 2; k++) {
    if (!on[k]) continue;
    sc_attr *t = sc_node_add_attr(c->g, node, names[k], SC_ATTR_INT);
    if (!t) return -1;
    t->i = 1;
  }
  return gb_end(c, node, out);
}

/* A linear layer, A [..., K] · B [K, N]: its gradients as 2-D Gemms over
 * the flattened rows R of A, dA = dY·Bᵀ ([R, N]·[K, N]ᵀ, reshaped back)
 * and dB = Aᵀ·dY ([R, K]ᵀ·[R, N]: one product over every row, however
 * many batch dims). */
static sc_status grad_linear(sc_grad_ctx *c, int32_t dy, int32_t a, int32_t b) {
  sc_value av = c->g->values[a], bv = c->g->values[b];
  int64_t k = bv.dims[0], n = bv.dims[1], rows = k ? sc_value_numel(&av) / k : 0;
  int32_t dy2 = gb_reshape(c, dy, 2, (int64_t[]){rows, n});
  if (c->want[0]) {
    int32_t g = gemm_t(c, dy2, b, false, true);
    if ((c->dx[0] = gb_reshape(c, g, av.rank, av.dims)) < 0) return c->g->diag.status;
  }
  if (c->want[1]) {
    int32_t a2 = gb_reshape(c, a, 2, (int64_t[]){rows, k});
    if ((c->dx[1] = gemm_t(c, a2, dy2, true, false)) < 0) return c->g->diag.status;
  }
  return SC_OK;
}

/* The input gradient and the weight gradient of Y = A·B: two separate
 * product nodes (a zero-bubble schedule runs them apart), Gemms for a
 * linear layer, MatMuls otherwise. A product marked cp_rows (context
 * parallelism beside a batch split, passes/partition/cp.c) keeps its rows'
 * dims [b, S] in both: dA = dY·Bᵀ as a batched MatMul, dB the sum over b
 * of the batched Aᵀ·dY, each split over the batch and the sequence as the
 * forward is (their merge into one dim of rows cannot hold both splits). */
sc_status sc_grad_matmul(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], a = in_v(c, 0), b = in_v(c, 1);
  if (dy < 0) return SC_OK;
  bool rows = sc_attr_int(c->g, gb_fwd(c), "cp_rows", 0) != 0;
  if (c->g->values[b].rank == 2 && c->g->values[a].rank >= 2 && c->g->values[b].dims[0] > 0 &&
      !rows)
    return grad_linear(c, dy, a, b);
  bool da = c->want[0]; /* dA still to build */
  if (rows && da && c->g->values[b].rank == 2) {
    /* dA = dY · Bᵀ, B read untransposed when it is a Transpose (a tied LM
     * head's weight): its forward copy is then not kept for the backward */
    bool t = true;
    int32_t w = untransposed(c, b, &t);
    if ((c->dx[0] = gb_2(c, SC_OP_MATMUL, dy, t ? gb_swap_last(c, w) : w)) < 0)
      return c->g->diag.status;
    da = false;
  }
  int32_t am = as_matrix(c, a, true), bm = as_matrix(c, b, false);
  int32_t dym = dy_matrix(c, dy, a, b);
  if (da) { /* dA = dY · Bᵀ */
    int32_t g = gb_2(c, SC_OP_MATMUL, dym, gb_swap_last(c, bm));
    if ((c->dx[0] = gb_unbroadcast(c, g, a)) < 0) return c->g->diag.status;
  }
  if (c->want[1]) { /* dB = Aᵀ · dY */
    int32_t g = gb_2(c, SC_OP_MATMUL, gb_swap_last(c, am), dym);
    if (c->g->values[b].rank < 2) g = drop_column(c, g);
    if ((c->dx[1] = gb_unbroadcast(c, g, b)) < 0) return c->g->diag.status;
  }
  return SC_OK;
}

static int32_t scaled(sc_grad_ctx *c, int32_t x, double s) {
  if (x < 0 || s == 1.0) return x;
  return gb_2(c, SC_OP_MUL, x, gb_scalar(c, dtype_of(c, x), s));
}

/* Y = α·A'·B' + β·C with A' = Aᵀ when transA, B' = Bᵀ when transB. */
sc_status sc_grad_gemm(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], a = in_v(c, 0), b = in_v(c, 1), cc = in_v(c, 2);
  if (dy < 0) return SC_OK;
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  bool ta = sc_attr_int(g, n, "transA", 0) != 0, tb = sc_attr_int(g, n, "transB", 0) != 0;
  double alpha = sc_attr_float(g, n, "alpha", 1.0), beta = sc_attr_float(g, n, "beta", 1.0);
  /* as Gemms with trans flags, so that no operand is copied transposed */
  if (c->want[0]) { /* dA' = α dY·B'ᵀ; dA = dA'ᵀ = B'·dYᵀ when transA */
    int32_t r = ta ? gemm_t(c, b, dy, tb, true) : gemm_t(c, dy, b, false, !tb);
    if ((c->dx[0] = scaled(c, r, alpha)) < 0) return g->diag.status;
  }
  if (c->want[1]) { /* dB' = α A'ᵀ·dY; dB = dB'ᵀ = dYᵀ·A' when transB */
    int32_t r = tb ? gemm_t(c, dy, a, true, ta) : gemm_t(c, a, dy, !ta, false);
    if ((c->dx[1] = scaled(c, r, alpha)) < 0) return g->diag.status;
  }
  if (cc >= 0 && c->want[2] && (c->dx[2] = gb_unbroadcast(c, scaled(c, dy, beta), cc)) < 0)
    return g->diag.status;
  return SC_OK;
}

/* dy of a reduction brought back to x's shape: keepdims restored, then
 * expanded; divided by the count for a mean. */
static sc_status reduce_back(sc_grad_ctx *c, bool mean) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  bool mask[SC_MAX_RANK], noop, keep;
  sc_status st = sc_reduce_axes(g, gb_fwd(c), mask, &noop, &keep);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  if (noop) {
    c->dx[0] = dy;
    return SC_OK;
  }
  sc_value xv = g->values[x];
  int64_t kd[SC_MAX_RANK], count = 1;
  for (int32_t d = 0; d < xv.rank; d++) {
    kd[d] = mask[d] ? 1 : xv.dims[d];
    if (mask[d]) count *= xv.dims[d];
  }
  int32_t r = gb_expand(c, gb_reshape(c, dy, xv.rank, kd), xv.rank, xv.dims);
  if (mean) r = scaled(c, r, 1.0 / (double)(count ? count : 1));
  c->dx[0] = r;
  return r < 0 ? g->diag.status : SC_OK;
}

sc_status sc_grad_reduce_sum(sc_grad_ctx *c) { return reduce_back(c, false); }
sc_status sc_grad_reduce_mean(sc_grad_ctx *c) { return reduce_back(c, true); }

/* The softmax axis, normalised; opsets before 13 flatten to 2-D around
 * the axis, which matches the per-axis form only for the last axis. */
static sc_status softmax_axis(sc_grad_ctx *c, int64_t *axis) {
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  int32_t r = g->values[in_v(c, 0)].rank;
  int64_t a = sc_attr_int(g, n, "axis", g->opset >= 13 ? -1 : 1);
  if (a < 0) a += r;
  if (g->opset < 13 && a != r - 1)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "gradient of the opset-%lld form over axis %lld of rank %d",
                         (long long)g->opset, (long long)a, (int)r);
  *axis = a;
  return SC_OK;
}

sc_status sc_grad_softmax(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int64_t axis;
  sc_status st = softmax_axis(c, &axis);
  if (st != SC_OK) return st;
  int32_t y = out_v(c, 0), dy = c->dy[0];
  int32_t s = gb_reduce_sum(c, gb_2(c, SC_OP_MUL, dy, y), &axis, 1, true);
  c->dx[0] = gb_2(c, SC_OP_MUL, y, gb_2(c, SC_OP_SUB, dy, s));
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

sc_status sc_grad_log_softmax(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int64_t axis;
  sc_status st = softmax_axis(c, &axis);
  if (st != SC_OK) return st;
  int32_t y = out_v(c, 0), dy = c->dy[0];
  int32_t s = gb_reduce_sum(c, dy, &axis, 1, true);
  c->dx[0] = gb_2(c, SC_OP_SUB, dy, gb_2(c, SC_OP_MUL, gb_1(c, SC_OP_EXP, y), s));
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

/* SoftmaxCrossEntropy (ir/op_nn.c): the logits get one
 * SoftmaxCrossEntropyGrad node, computed from the logits and the saved
 * per-row lse (nothing of [rows, V] is saved); the labels get none, and
 * neither does lse (only this rule reads it: a gradient reaching it is an
 * error). */
sc_status sc_grad_softmax_cross_entropy(sc_grad_ctx *c) {
  sc_graph *g = c->g;
  if (c->dy[1] >= 0)
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "the log-sum-exp output of a softmax cross-entropy has no gradient");
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int64_t ig = sc_attr_int(g, gb_fwd(c), "ignore_index", -100);
  int32_t in[4] = {c->dy[0], in_v(c, 0), in_v(c, 1), out_v(c, 1)}, out;
  static const char *const suffix[1] = {"dlogits"};
  int32_t node = gb_node(c, SC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, in, 4, 1, suffix, &out);
  sc_attr *a = node < 0 ? NULL : sc_node_add_attr(g, node, "ignore_index", SC_ATTR_INT);
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  a->i = ig;
  sc_status st = sc_ops[SC_OP_SOFTMAX_CROSS_ENTROPY_GRAD].infer(g, &g->nodes[node]);
  if (st == SC_OK) c->dx[0] = out;
  return st;
}

/* Reshape, Flatten, Squeeze, Unsqueeze: the data input gets dy reshaped;
 * the shape / axes inputs get none. */
sc_status sc_grad_reshape(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_value xv = c->g->values[in_v(c, 0)];
  c->dx[0] = gb_reshape(c, c->dy[0], xv.rank, xv.dims);
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

sc_status sc_grad_transpose(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  int32_t r = g->values[in_v(c, 0)].rank;
  const int64_t *perm = NULL;
  int64_t np = sc_attr_ints(g, gb_fwd(c), "perm", &perm), inv[SC_MAX_RANK];
  for (int32_t d = 0; d < r; d++) {
    int64_t p = np == r ? perm[d] : r - 1 - d; /* default: reversed */
    inv[p] = d;
  }
  c->dx[0] = gb_transpose(c, c->dy[0], inv, r);
  return c->dx[0] < 0 ? g->diag.status : SC_OK;
}

sc_status sc_grad_expand(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  c->dx[0] = gb_unbroadcast(c, c->dy[0], in_v(c, 0));
  return c->dx[0] < 0 ? c->g->diag.status : SC_OK;
}

/* Each input gets its slice of dy along the axis. */
sc_status sc_grad_concat(sc_grad_ctx *c) {
  if (c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  int32_t n = gb_fwd(c)->n_inputs, r = g->values[out_v(c, 0)].rank;
  int64_t axis = sc_attr_int(g, gb_fwd(c), "axis", 0), off = 0;
  if (axis < 0) axis += r;
  for (int32_t i = 0; i < n; i++) {
    int64_t len = g->values[in_v(c, i)].dims[axis];
    if (c->want[i]) {
      int64_t s = off, e = off + len;
      int32_t in[4] = {c->dy[0], gb_ints(c, &s, 1), gb_ints(c, &e, 1), gb_ints(c, &axis, 1)};
      if ((c->dx[i] = gb_op(c, SC_OP_SLICE, in, 4)) < 0) return g->diag.status;
    }
    off += len;
  }
  return SC_OK;
}

/* Where(cond, x, y): x gets dy where cond holds, y where it does not;
 * cond gets none. */
sc_status sc_grad_where(sc_grad_ctx *c) {
  int32_t dy = c->dy[0];
  if (dy < 0) return SC_OK;
  int32_t cond = in_v(c, 0), zero = gb_scalar(c, dtype_of(c, dy), 0.0);
  if (c->want[1]) {
    int32_t g = gb_op(c, SC_OP_WHERE, (int32_t[]){cond, dy, zero}, 3);
    if ((c->dx[1] = gb_unbroadcast(c, g, in_v(c, 1))) < 0) return c->g->diag.status;
  }
  if (c->want[2]) {
    int32_t g = gb_op(c, SC_OP_WHERE, (int32_t[]){cond, zero, dy}, 3);
    if ((c->dx[2] = gb_unbroadcast(c, g, in_v(c, 2))) < 0) return c->g->diag.status;
  }
  return SC_OK;
}

/* ---- activations and elementwise ops with attributes ---- */

static int32_t mul3(sc_grad_ctx *c, int32_t a, int32_t b, int32_t d) {
  return gb_2(c, SC_OP_MUL, a, gb_2(c, SC_OP_MUL, b, d));
}
static sc_status done_dx0(sc_grad_ctx *c) { return c->dx[0] < 0 ? c->g->diag.status : SC_OK; }

/* dy · 2/√π · exp(−x²) */
UNARY_RULE(grad_erf,
           mul3(c, dy, gb_scalar(c, t, 1.1283791670955126),
                gb_1(c, SC_OP_EXP, gb_1(c, SC_OP_NEG, gb_2(c, SC_OP_MUL, x, x)))))
/* dy · sigmoid(x) */
UNARY_RULE(grad_softplus, gb_2(c, SC_OP_MUL, dy, gb_1(c, SC_OP_SIGMOID, x)))
/* dy · (tanh(sp) + x · (1 − tanh²(sp)) · sigmoid(x)), sp = softplus(x) */
sc_status sc_grad_mish(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t th = gb_1(c, SC_OP_TANH, gb_1(c, SC_OP_SOFTPLUS, x));
  int32_t sech2 = gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), gb_2(c, SC_OP_MUL, th, th));
  int32_t d = gb_2(c, SC_OP_ADD, th, mul3(c, x, sech2, gb_1(c, SC_OP_SIGMOID, x)));
  c->dx[0] = gb_2(c, SC_OP_MUL, dy, d);
  return done_dx0(c);
}

/* Gelu, approximate "none": dy · (Φ(x) + x·φ(x)), Φ(x) = (1 + erf(x/√2))/2,
 * φ(x) = exp(−x²/2)/√(2π); "tanh": with u = √(2/π)(x + 0.044715x³),
 * th = tanh u: dy · (½(1 + th) + ½x(1 − th²)·√(2/π)(1 + 3·0.044715x²)).
 * A bf16 or f16 Gelu's gradient computes in f32, as autocast's opmath
 * does: x and dy widened, the constants f32, the result narrowed once to
 * x's dtype (the fused kernel widens its loads anyway, so the casts cost
 * nothing; in a backward product's epilogue the formula is cuBLASLt's
 * DGELU: codegen/from_graph.c's epilogue_act). */
sc_status sc_grad_gelu(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype xt = dtype_of(c, x);
  sc_dtype t = xt == SC_DTYPE_BF16 || xt == SC_DTYPE_F16 ? SC_DTYPE_F32 : xt;
  x = gb_cast(c, x, t);
  dy = gb_cast(c, dy, t);
  int32_t x2 = gb_2(c, SC_OP_MUL, x, x), half = gb_scalar(c, t, 0.5), d;
  if (a.gelu_tanh) {
    const double k = 0.7978845608028654, b = 0.044715; /* √(2/π) */
    int32_t inner = gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0),
                         gb_2(c, SC_OP_MUL, gb_scalar(c, t, b), x2));
    int32_t th = gb_1(c, SC_OP_TANH, mul3(c, gb_scalar(c, t, k), x, inner));
    int32_t du = gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0),
                      gb_2(c, SC_OP_MUL, gb_scalar(c, t, 3 * b), x2));
    int32_t sech2 = gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), gb_2(c, SC_OP_MUL, th, th));
    int32_t left = gb_2(c, SC_OP_MUL, half, gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0), th));
    int32_t right = mul3(c, gb_scalar(c, t, 0.5 * k), x, gb_2(c, SC_OP_MUL, sech2, du));
    d = gb_2(c, SC_OP_ADD, left, right);
  } else {
    int32_t cdf = gb_2(c, SC_OP_MUL, half,
                       gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0),
                            gb_1(c, SC_OP_ERF, gb_2(c, SC_OP_MUL, x,
                                                    gb_scalar(c, t, 0.7071067811865476)))));
    int32_t pdf = gb_2(c, SC_OP_MUL, gb_scalar(c, t, 0.3989422804014327),
                       gb_1(c, SC_OP_EXP, gb_2(c, SC_OP_MUL, x2, gb_scalar(c, t, -0.5))));
    d = gb_2(c, SC_OP_ADD, cdf, gb_2(c, SC_OP_MUL, x, pdf));
  }
  c->dx[0] = gb_cast(c, gb_2(c, SC_OP_MUL, dy, d), xt);
  return done_dx0(c);
}

/* Elu: dy·α·exp(x) where x < 0, else dy (the forward's select). Selu:
 * dy·γ·α·exp(x) where x <= 0, else dy·γ. */
sc_status sc_grad_elu(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a);
  if (st != SC_OK) return st;
  bool selu = gb_fwd(c)->op == SC_OP_SELU;
  double gamma = selu ? a.gamma : 1.0;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t neg = gb_2(c, selu ? SC_OP_LESS_EQUAL : SC_OP_LESS, x, gb_scalar(c, t, 0.0));
  int32_t dn = mul3(c, dy, gb_scalar(c, t, gamma * a.alpha), gb_1(c, SC_OP_EXP, x));
  c->dx[0] = gb_where(c, neg, dn, scaled(c, dy, gamma));
  return done_dx0(c);
}

/* Celu: dy·exp(x/α) where x < 0, else dy. ThresholdedRelu: dy where
 * x > α, else 0. Shrink: dy where |x| > λ, else 0. */
sc_status sc_grad_gated(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t zero = gb_scalar(c, t, 0.0);
  switch (gb_fwd(c)->op) {
  case SC_OP_CELU:
    c->dx[0] = gb_where(c, gb_2(c, SC_OP_LESS, x, zero),
                        gb_2(c, SC_OP_MUL, dy, gb_1(c, SC_OP_EXP, gb_2(c, SC_OP_DIV, x,
                                                                       gb_scalar(c, t, a.alpha)))),
                        dy);
    break;
  case SC_OP_THRESHOLDED_RELU:
    c->dx[0] = gb_where(c, gb_2(c, SC_OP_GREATER, x, gb_scalar(c, t, a.alpha)), dy, zero);
    break;
  default: /* Shrink */
    c->dx[0] = gb_where(c, gb_2(c, SC_OP_GREATER, gb_1(c, SC_OP_ABS, x), gb_scalar(c, t, a.lambd)),
                        dy, zero);
  }
  return done_dx0(c);
}

/* Sinh: dy·cosh x. Cosh: dy·sinh x. Tan: dy·(1 + tan² x). Asinh:
 * dy / sqrt(x² + 1). */
sc_status sc_grad_smooth(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), dy = c->dy[0], d;
  sc_dtype t = dtype_of(c, x);
  int32_t one = gb_scalar(c, t, 1.0);
  switch (gb_fwd(c)->op) {
  case SC_OP_SINH: d = gb_1(c, SC_OP_COSH, x); break;
  case SC_OP_COSH: d = gb_1(c, SC_OP_SINH, x); break;
  case SC_OP_TAN: {
    int32_t y = gb_1(c, SC_OP_TAN, x);
    d = gb_2(c, SC_OP_ADD, one, gb_2(c, SC_OP_MUL, y, y));
    break;
  }
  default: /* Asinh */
    d = gb_1(c, SC_OP_RECIPROCAL,
             gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, x), one)));
  }
  c->dx[0] = gb_2(c, SC_OP_MUL, dy, d);
  return done_dx0(c);
}

/* Softsign: dy / (1 + |x|)². */
sc_status sc_grad_softsign(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t d = gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0), gb_1(c, SC_OP_ABS, x));
  c->dx[0] = gb_2(c, SC_OP_DIV, dy, gb_2(c, SC_OP_MUL, d, d));
  return done_dx0(c);
}

/* HardSigmoid: dy·α where 0 < αx + β < 1, else 0. */
sc_status sc_grad_hard_sigmoid(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t z = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, gb_scalar(c, t, a.alpha)),
                   gb_scalar(c, t, a.beta));
  int32_t in = gb_2(c, SC_OP_AND, gb_2(c, SC_OP_GREATER, z, gb_scalar(c, t, 0.0)),
                    gb_2(c, SC_OP_LESS, z, gb_scalar(c, t, 1.0)));
  c->dx[0] = gb_where(c, in, scaled(c, dy, a.alpha), gb_scalar(c, t, 0.0));
  return done_dx0(c);
}

/* HardSwish (as PyTorch): 0 where x < −3, dy·(x/3 + ½) where x <= 3, else
 * dy. */
sc_status sc_grad_hard_swish(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int32_t mid = gb_2(c, SC_OP_MUL, dy,
                     gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_DIV, x, gb_scalar(c, t, 3.0)),
                          gb_scalar(c, t, 0.5)));
  int32_t hi = gb_where(c, gb_2(c, SC_OP_LESS_EQUAL, x, gb_scalar(c, t, 3.0)), mid, dy);
  c->dx[0] = gb_where(c, gb_2(c, SC_OP_LESS, x, gb_scalar(c, t, -3.0)), gb_scalar(c, t, 0.0),
                      hi);
  return done_dx0(c);
}

/* Clip: dy where min < x < max (strict: at a bound the gradient is 0, as
 * PyTorch's hardtanh); the bounds, inputs or (opset < 11) attributes, get
 * none. */
sc_status sc_grad_clip(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_ew_attrs a;
  sc_status st = sc_ew_attrs_read(c->g, gb_fwd(c), &a);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), lo = in_v(c, 1), hi = in_v(c, 2), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  if (lo < 0 && a.has_min) lo = gb_scalar(c, t, a.min);
  if (hi < 0 && a.has_max) hi = gb_scalar(c, t, a.max);
  int32_t in = -1;
  if (lo >= 0) in = gb_2(c, SC_OP_GREATER, x, lo);
  if (hi >= 0) {
    int32_t below = gb_2(c, SC_OP_LESS, x, hi);
    in = in >= 0 ? gb_2(c, SC_OP_AND, in, below) : below;
  }
  c->dx[0] = in < 0 ? dy : gb_where(c, in, dy, gb_scalar(c, t, 0.0));
  return done_dx0(c);
}

/* Dropout in its inference form (training_mode absent or false, or ratio
 * 0): output 0 is x, so x gets dy; the mask has no gradient. The random
 * training form is refused. */
sc_status sc_grad_dropout(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  const sc_value *ratio = sc_node_input(g, n, 1), *train = sc_node_input(g, n, 2);
  bool zero_ratio = ratio && ratio->data && sc_load_f64(ratio->dtype, ratio->data, 0) == 0.0;
  if (train && !zero_ratio && (!train->data || sc_load_i64(train->dtype, train->data, 0)))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "gradient of training-mode Dropout (training_mode '%s' is not a "
                         "constant false and the ratio is not 0)",
                         train->name ? train->name : "?");
  c->dx[0] = c->dy[0];
  return SC_OK;
}

/* PRelu: x gets dy where x >= 0, dy·slope where x < 0; the slope gets
 * dy·x where x < 0, summed over the axes it broadcasts along. */
sc_status sc_grad_prelu(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], x = in_v(c, 0), s = in_v(c, 1);
  if (dy < 0) return SC_OK;
  sc_dtype t = dtype_of(c, x);
  int32_t neg = gb_2(c, SC_OP_LESS, x, gb_scalar(c, t, 0.0)), zero = gb_scalar(c, t, 0.0);
  int32_t gx = c->want[0] ? gb_where(c, neg, gb_2(c, SC_OP_MUL, dy, s), dy) : -1;
  int32_t gs = c->want[1] ? gb_where(c, neg, gb_2(c, SC_OP_MUL, dy, x), zero) : -1;
  return set_binary(c, gx, gs);
}

/* Mean: each input gets dy / n, unbroadcast. */
sc_status sc_grad_mean(sc_grad_ctx *c) {
  if (c->dy[0] < 0) return SC_OK;
  int32_t n = gb_fwd(c)->n_inputs;
  int32_t d = scaled(c, c->dy[0], 1.0 / n);
  for (int32_t i = 0; i < n; i++)
    if (c->want[i] && (c->dx[i] = gb_unbroadcast(c, d, in_v(c, i))) < 0)
      return c->g->diag.status;
  return SC_OK;
}

/* Max / Min: dy goes to the input that was selected; where k inputs tie
 * for it, each gets dy/k (PyTorch's torch.maximum / torch.minimum split a
 * tie between their two inputs evenly; this is the same for n inputs). */
sc_status sc_grad_max(sc_grad_ctx *c) {
  int32_t dy = c->dy[0], y = out_v(c, 0);
  if (dy < 0) return SC_OK;
  int32_t n = gb_fwd(c)->n_inputs;
  if (n == 1) {
    if (c->want[0]) c->dx[0] = dy;
    return SC_OK;
  }
  sc_dtype t = dtype_of(c, y);
  int32_t one = gb_scalar(c, t, 1.0), zero = gb_scalar(c, t, 0.0), hit[64], cnt = -1;
  for (int32_t i = 0; i < n; i++) { /* hit[i] = (x_i == y), as 0/1 in y's shape */
    hit[i] = gb_where(c, gb_2(c, SC_OP_EQUAL, in_v(c, i), y), one, zero);
    cnt = i == 0 ? hit[i] : gb_2(c, SC_OP_ADD, cnt, hit[i]);
  }
  int32_t share = gb_2(c, SC_OP_DIV, dy, cnt);
  for (int32_t i = 0; i < n; i++)
    if (c->want[i] &&
        (c->dx[i] = gb_unbroadcast(c, gb_2(c, SC_OP_MUL, share, hit[i]), in_v(c, i))) < 0)
      return c->g->diag.status;
  return SC_OK;
}

/* ---- reductions of squares ---- */

/* v (a reduction's output, or its gradient) reshaped to keepdims and
 * expanded back to x's shape; v itself for a no-op reduction. */
static int32_t reduce_expand(sc_grad_ctx *c, int32_t v, const bool *mask, bool noop) {
  if (noop || v < 0) return v;
  sc_value xv = c->g->values[in_v(c, 0)];
  int64_t kd[SC_MAX_RANK];
  for (int32_t d = 0; d < xv.rank; d++) kd[d] = mask[d] ? 1 : xv.dims[d];
  return gb_expand(c, gb_reshape(c, v, xv.rank, kd), xv.rank, xv.dims);
}

/* ReduceSumSquare: 2x·dy; ReduceL2 (y = √Σx²): x/y·dy, 0 where y = 0 (as
 * PyTorch's norm). A no-op reduction (noop_with_empty_axes) copies x. */
sc_status sc_grad_reduce_square(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  bool mask[SC_MAX_RANK], noop, keep;
  sc_status st = sc_reduce_axes(c->g, gb_fwd(c), mask, &noop, &keep);
  if (st != SC_OK) return st;
  int32_t x = in_v(c, 0), y = out_v(c, 0);
  sc_dtype t = dtype_of(c, x);
  int32_t dy = reduce_expand(c, c->dy[0], mask, noop);
  if (noop) {
    c->dx[0] = dy;
    return SC_OK;
  }
  if (gb_fwd(c)->op == SC_OP_REDUCE_SUM_SQUARE) {
    c->dx[0] = mul3(c, dy, x, gb_scalar(c, t, 2.0));
  } else {
    int32_t ye = reduce_expand(c, y, mask, noop), zero = gb_scalar(c, t, 0.0);
    int32_t is0 = gb_2(c, SC_OP_EQUAL, ye, zero);
    int32_t safe = gb_where(c, is0, gb_scalar(c, t, 1.0), ye);
    c->dx[0] = gb_where(c, is0, zero, gb_2(c, SC_OP_MUL, dy, gb_2(c, SC_OP_DIV, x, safe)));
  }
  return done_dx0(c);
}

/* ---- data movement ---- */

/* Zeros of dtype t and shape dims: a scalar 0 expanded (no large
 * constant). */
static int32_t zeros(sc_grad_ctx *c, sc_dtype t, int32_t rank, const int64_t *dims) {
  return gb_expand(c, gb_scalar(c, t, 0.0), rank, dims);
}

static bool string_attr(sc_grad_ctx *c, int32_t node, const char *name, const char *v) {
  sc_attr *a = sc_node_add_attr(c->g, node, name, SC_ATTR_STRING);
  char *s = a ? sc_arena_array(&c->g->arena, strlen(v) + 1, 1) : NULL;
  if (!s) return false;
  memcpy(s, v, strlen(v) + 1);
  a->s = s;
  return true;
}

/* Gather(data, indices, axis a): data gets dy scatter-added at the
 * gathered rows. Built as ScatterND with reduction "add" into zeros, with
 * the axis moved to the front (data [N, pre…, post…]; dy [I…, pre…,
 * post…]; indices [I…, 1]), then moved back: a repeated index (an
 * embedding row read twice) gets the sum of its rows' gradients, which a
 * plain ScatterND or OneHot-free copy would not; negative indices count
 * from the end, as in Gather. The indices get none. */
sc_status sc_grad_gather(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  int32_t data = in_v(c, 0), idx = in_v(c, 1), dy = c->dy[0], ax;
  sc_value dv = g->values[data], iv = g->values[idx];
  sc_status st = sc_norm_axis(g, gb_fwd(c), sc_attr_int(g, gb_fwd(c), "axis", 0), dv.rank, &ax);
  if (st != SC_OK) return st;
  int32_t r = dv.rank, q = iv.rank, ry = r - 1 + q;
  int64_t perm[SC_MAX_RANK], inv[SC_MAX_RANK], tdims[SC_MAX_RANK], yperm[SC_MAX_RANK];
  int64_t idims[SC_MAX_RANK + 1];
  perm[0] = ax;
  for (int32_t d = 0, k = 1; d < r; d++)
    if (d != ax) perm[k++] = d;
  for (int32_t d = 0; d < r; d++) {
    inv[perm[d]] = d;
    tdims[d] = dv.dims[perm[d]];
  }
  int32_t k = 0; /* dy [pre, I, post] → [I, pre, post] */
  for (int32_t d = 0; d < q; d++) yperm[k++] = ax + d;
  for (int32_t d = 0; d < ax; d++) yperm[k++] = d;
  for (int32_t d = ax + q; d < ry; d++) yperm[k++] = d;
  memcpy(idims, iv.dims, (size_t)q * sizeof *idims);
  idims[q] = 1;
  if (q + 1 > SC_MAX_RANK)
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "gradient: indices of rank %d leave no room for ScatterND's index "
                         "dim", (int)q);
  int32_t upd = ax == 0 ? dy : gb_transpose(c, dy, yperm, ry);
  /* a vocabulary-padded table (passes/partition/vocab_pad.c: `__vocab`,
   * the model's rows): negative ids count from the end of the vocabulary,
   * not of the padded table, so they are wrapped here, before the scatter
   * (which would wrap them by its data's rows) */
  const sc_attr *voc = sc_node_attr(gb_fwd(c), "__vocab");
  if (voc && voc->kind == SC_ATTR_INT && ax == 0) {
    int32_t neg = gb_2(c, SC_OP_LESS, idx, gb_scalar(c, iv.dtype, 0.0));
    int32_t wrapped = gb_2(c, SC_OP_ADD, idx, gb_scalar(c, iv.dtype, (double)voc->i));
    idx = neg < 0 || wrapped < 0 ? -1 : gb_op(c, SC_OP_WHERE, (int32_t[]){neg, wrapped, idx}, 3);
    if (idx < 0) return g->diag.status;
  }
  int32_t in[3] = {zeros(c, dv.dtype, r, tdims), gb_reshape(c, idx, q + 1, idims), upd};
  for (int32_t i = 0; i < 3; i++)
    if (in[i] < 0) return g->diag.status;
  int32_t node = -1, out = gb_begin(c, SC_OP_SCATTER_ND, in, 3, &node);
  if (out < 0 || !string_attr(c, node, "reduction", "add")) return g->diag.status;
  out = gb_end(c, node, out);
  c->dx[0] = ax == 0 ? out : gb_transpose(c, out, inv, r);
  return done_dx0(c);
}

/* GatherElements: data gets ScatterElements(zeros, indices, dy, axis,
 * reduction "add") (repeated indices sum); the indices get none. */
sc_status sc_grad_gather_elements(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  sc_value dv = g->values[in_v(c, 0)];
  int64_t axis = sc_attr_int(g, gb_fwd(c), "axis", 0);
  int32_t in[3] = {zeros(c, dv.dtype, dv.rank, dv.dims), in_v(c, 1), c->dy[0]};
  if (in[0] < 0) return g->diag.status;
  int32_t node = -1, out = gb_begin(c, SC_OP_SCATTER_ELEMENTS, in, 3, &node);
  sc_attr *ax = out < 0 || !string_attr(c, node, "reduction", "add")
                   ? NULL
                   : sc_node_add_attr(g, node, "axis", SC_ATTR_INT);
  if (!ax) return g->diag.status;
  ax->i = axis;
  c->dx[0] = gb_end(c, node, out);
  return done_dx0(c);
}

/* ScatterElements / ScatterND (data, indices, updates), reduction none or
 * add. updates get dy read back at the indices (GatherElements with the
 * axis, GatherND); data gets dy itself under add (every element passes
 * through, summed), and under none dy with zeros scattered at the indices
 * (an overwritten element does not reach the output). With repeated
 * indices under none, which ONNX leaves undefined, each update gets the
 * gradient of the element it names. mul, max and min are refused; the
 * indices get none. */
static sc_status scatter_back(sc_grad_ctx *c, bool nd) {
  if (c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  const char *red = sc_attr_string(g, gb_fwd(c), "reduction", "none");
  bool add = strcmp(red, "add") == 0;
  if (!add && strcmp(red, "none") != 0)
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "gradient: reduction '%s' (only none and add)", red);
  int64_t axis = nd ? 0 : sc_attr_int(g, gb_fwd(c), "axis", 0);
  int32_t idx = in_v(c, 1), dy = c->dy[0];
  sc_op gather = nd ? SC_OP_GATHER_ND : SC_OP_GATHER_ELEMENTS;
  if (c->want[2]) {
    c->dx[2] = nd ? gb_2(c, gather, dy, idx)
                  : gb_op_i(c, gather, (int32_t[]){dy, idx}, 2, "axis", axis);
    if (c->dx[2] < 0) return g->diag.status;
  }
  if (!c->want[0]) return SC_OK;
  if (add) {
    c->dx[0] = dy;
    return SC_OK;
  }
  sc_value uv = g->values[in_v(c, 2)];
  int32_t in[3] = {dy, idx, zeros(c, uv.dtype, uv.rank, uv.dims)};
  if (in[2] < 0) return g->diag.status;
  int32_t node = -1, out = gb_begin(c, nd ? SC_OP_SCATTER_ND : SC_OP_SCATTER_ELEMENTS, in, 3,
                                    &node);
  if (out < 0) return g->diag.status;
  if (!nd) {
    sc_attr *ax = sc_node_add_attr(g, node, "axis", SC_ATTR_INT);
    if (!ax) return g->diag.status;
    ax->i = axis;
  }
  c->dx[0] = gb_end(c, node, out);
  return done_dx0(c);
}

sc_status sc_grad_scatter_elements(sc_grad_ctx *c) { return scatter_back(c, false); }
sc_status sc_grad_scatter_nd(sc_grad_ctx *c) { return scatter_back(c, true); }

/* A Pad of x (constant 0) by begin/end per dim. */
static int32_t pad_zeros(sc_grad_ctx *c, int32_t x, int32_t r, const int64_t *begin,
                         const int64_t *end) {
  int64_t pads[2 * SC_MAX_RANK];
  memcpy(pads, begin, (size_t)r * sizeof *pads);
  memcpy(pads + r, end, (size_t)r * sizeof *pads);
  return gb_2(c, SC_OP_PAD, x, gb_ints(c, pads, 2 * r));
}

/* Slice: data gets dy padded with zeros back to its shape (steps 1 only;
 * other steps are refused); starts, ends, axes and steps get none. */
sc_status sc_grad_slice(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  sc_value xv = g->values[in_v(c, 0)];
  int64_t start[SC_MAX_RANK], step[SC_MAX_RANK], dout[SC_MAX_RANK], end[SC_MAX_RANK];
  sc_status st = sc_op_slice_params(g, gb_fwd(c), start, step, dout);
  if (st != SC_OK) return st;
  for (int32_t d = 0; d < xv.rank; d++) {
    if (step[d] != 1 && dout[d] > 1)
      return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                           "gradient of a Slice with step %lld on axis %d (only step 1)",
                           (long long)step[d], (int)d);
    if (dout[d] == 0) start[d] = 0;
    end[d] = xv.dims[d] - start[d] - dout[d];
  }
  c->dx[0] = pad_zeros(c, c->dy[0], xv.rank, start, end);
  return done_dx0(c);
}

/* Pad (mode "constant", pads >= 0): x gets its window of dy (a Slice);
 * pads, constant_value and axes get none. */
sc_status sc_grad_pad(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  sc_value xv = g->values[in_v(c, 0)];
  const char *mode = sc_attr_string(g, n, "mode", "constant");
  if (strcmp(mode, "constant") != 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "gradient of Pad in mode '%s' (only constant)",
                         mode);
  int64_t pads[2 * SC_MAX_RANK], np, axes[SC_MAX_RANK], na = xv.rank;
  sc_status st = sc_input_ints(g, n, 1, pads, 2 * SC_MAX_RANK, &np);
  bool has_axes = sc_node_input(g, n, 3) != NULL;
  if (st == SC_OK && has_axes) st = sc_input_ints(g, n, 3, axes, SC_MAX_RANK, &na);
  if (st != SC_OK) return st;
  if (np != 2 * na)
    return sc_node_error(g, n, SC_ERR_INVALID, "pads has %lld entries for %lld axes",
                         (long long)np, (long long)na);
  int64_t s[SC_MAX_RANK], e[SC_MAX_RANK], a[SC_MAX_RANK];
  for (int64_t i = 0; i < na; i++) {
    int32_t d;
    if ((st = sc_norm_axis(g, n, has_axes ? axes[i] : i, xv.rank, &d)) != SC_OK) return st;
    if (pads[i] < 0 || pads[i + na] < 0)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                           "gradient of a Pad with negative pads on axis %d", (int)d);
    a[i] = d;
    s[i] = pads[i];
    e[i] = pads[i] + xv.dims[d];
  }
  int32_t in[4] = {c->dy[0], gb_ints(c, s, (int32_t)na), gb_ints(c, e, (int32_t)na),
                   gb_ints(c, a, (int32_t)na)};
  c->dx[0] = gb_op(c, SC_OP_SLICE, in, 4);
  return done_dx0(c);
}

/* Split: x gets the Concat of the outputs' gradients, zeros for an output
 * that does not reach the loss; the split sizes get none. */
sc_status sc_grad_split(sc_grad_ctx *c) {
  if (!c->want[0]) return SC_OK;
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  int32_t m = n->n_outputs, parts[64];
  int64_t axis = sc_attr_int(g, n, "axis", 0);
  for (int32_t j = 0; j < m; j++) {
    sc_value ov = g->values[out_v(c, j)];
    parts[j] = c->dy[j] >= 0 ? c->dy[j] : zeros(c, ov.dtype, ov.rank, ov.dims);
    if (parts[j] < 0) return g->diag.status;
  }
  c->dx[0] = gb_op_i(c, SC_OP_CONCAT, parts, m, "axis", axis);
  return done_dx0(c);
}

/* Tile: dy viewed as [r0, d0, r1, d1, …] (a dim repeated once kept
 * whole), summed over the repeat dims; the repeats get none. */
sc_status sc_grad_tile(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  sc_value xv = g->values[in_v(c, 0)], yv = g->values[out_v(c, 0)];
  int64_t dims[SC_MAX_RANK], axes[SC_MAX_RANK];
  int32_t r = 0, na = 0;
  for (int32_t d = 0; d < xv.rank; d++) {
    int64_t rep = xv.dims[d] ? yv.dims[d] / xv.dims[d] : 1;
    if (rep != 1) {
      if (r + 2 > SC_MAX_RANK)
        return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                             "gradient of a Tile repeating more dims than rank %d allows",
                             SC_MAX_RANK);
      axes[na++] = r;
      dims[r++] = rep;
    }
    dims[r++] = xv.dims[d];
  }
  int32_t v = gb_reshape(c, c->dy[0], r, dims);
  c->dx[0] = gb_reshape(c, gb_reduce_sum(c, v, axes, na, false), xv.rank, xv.dims);
  return done_dx0(c);
}

/* ---- normalisations and pooling ---- */

static int32_t mean_keep(sc_grad_ctx *c, int32_t x, const int64_t *axes, int32_t n) {
  return gb_reduce(c, SC_OP_REDUCE_MEAN, x, axes, n, true);
}

/* 1/√(v + ε) */
static int32_t inv_std(sc_grad_ctx *c, int32_t v, double eps) {
  return gb_1(c, SC_OP_RECIPROCAL,
              gb_1(c, SC_OP_SQRT, gb_2(c, SC_OP_ADD, v, gb_scalar(c, dtype_of(c, v), eps))));
}

/* One LayerNormGrad node (ir/op_nn.c) for a LayerNormalization or
 * RMSNormalization whose Scale (and B) are exactly X.shape[axis:], the
 * usual form: dX in one pass over each row, dScale and dB as column sums
 * (codegen/lower_norm.c). Returns -1 when the shapes are another form (the
 * caller then builds the decomposed gradient), else the rule's status. */
static int32_t row_norm_fused(sc_grad_ctx *c, bool rms, int32_t axis, double eps) {
  sc_graph *g = c->g;
  int32_t x = in_v(c, 0), s = in_v(c, 1), b = rms ? -1 : in_v(c, 2);
  sc_value xv = g->values[x];
  for (int32_t i = 0; i < 2; i++) {
    int32_t p = i == 0 ? s : b;
    if (p < 0) continue;
    const sc_value *pv = &g->values[p];
    if (pv->rank != xv.rank - axis ||
        memcmp(pv->dims, xv.dims + axis, sizeof(int64_t) * (size_t)pv->rank))
      return -1;
  }
  static const char *const suffix[3] = {"dx", "dscale", "dbias"};
  int32_t n_out = rms ? 2 : 3, outs[3], in[3] = {gb_cast(c, c->dy[0], xv.dtype), x, s};
  int32_t node = gb_node(c, SC_OP_LAYER_NORM_GRAD, in, 3, n_out, suffix, outs);
  if (node < 0) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  /* each set at once: adding an attribute may move the others */
  sc_attr *a = sc_node_add_attr(g, node, "axis", SC_ATTR_INT);
  if (a) a->i = axis;
  if (a && (a = sc_node_add_attr(g, node, "epsilon", SC_ATTR_FLOAT))) a->f = eps;
  if (a && (a = sc_node_add_attr(g, node, "rms", SC_ATTR_INT))) a->i = rms;
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  sc_status st = sc_ops[SC_OP_LAYER_NORM_GRAD].infer(g, &g->nodes[node]);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < n_out; i++)
    if (c->want[i]) c->dx[i] = outs[i];
  return SC_OK;
}

/* LayerNormalization and RMSNormalization over the axes from `axis` on:
 * the fused LayerNormGrad above where the shapes allow; otherwise
 * recomputed from X (x̂ the normalised x, r = 1/σ, g = dy·Scale, means
 * over the normalised axes):
 *   LayerNorm  dX = r·(g − mean g − x̂·mean(g·x̂)), dScale = Σ dy·x̂, dB = Σ dy
 *   RMSNorm    dX = r·(g − x̂·mean(g·x̂)),          dScale = Σ dy·x̂
 * (Σ over the axes Scale and B broadcast along). LayerNorm's Mean and
 * InvStdDev outputs carry no gradient: a path through them is refused. */
sc_status sc_grad_row_norm(sc_grad_ctx *c) {
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  bool rms = n->op == SC_OP_RMS_NORM;
  for (int32_t j = 1; j < n->n_outputs; j++)
    if (c->dy[j] >= 0)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                           "gradient through output %d (Mean / InvStdDev)", (int)j);
  if (c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), s = in_v(c, 1), b = rms ? -1 : in_v(c, 2), dy = c->dy[0], axis;
  int32_t r = g->values[x].rank;
  double eps;
  sc_status st = sc_norm_axis(g, n, sc_attr_int(g, n, "axis", -1), r, &axis);
  if (st == SC_OK) st = sc_norm_epsilon(g, n, &eps);
  if (st != SC_OK) return st;
  int32_t fused = row_norm_fused(c, rms, axis, eps);
  if (fused >= 0) return (sc_status)fused;
  int64_t axes[SC_MAX_RANK];
  int32_t na = 0;
  for (int32_t d = axis; d < r; d++) axes[na++] = d;
  int32_t xc = rms ? x : gb_2(c, SC_OP_SUB, x, mean_keep(c, x, axes, na));
  int32_t rstd = inv_std(c, mean_keep(c, gb_2(c, SC_OP_MUL, xc, xc), axes, na), eps);
  int32_t xhat = gb_2(c, SC_OP_MUL, xc, rstd);
  if (b >= 0 && c->want[2] && (c->dx[2] = gb_unbroadcast(c, dy, b)) < 0) return g->diag.status;
  if (c->want[1] && (c->dx[1] = gb_unbroadcast(c, gb_2(c, SC_OP_MUL, dy, xhat), s)) < 0)
    return g->diag.status;
  if (c->want[0]) {
    int32_t gg = gb_2(c, SC_OP_MUL, dy, s);
    int32_t t = gb_2(c, SC_OP_MUL, xhat, mean_keep(c, gb_2(c, SC_OP_MUL, gg, xhat), axes, na));
    int32_t inner = gb_2(c, SC_OP_SUB, gg, t);
    if (!rms) inner = gb_2(c, SC_OP_SUB, inner, mean_keep(c, gg, axes, na));
    if ((c->dx[0] = gb_2(c, SC_OP_MUL, inner, rstd)) < 0) return g->diag.status;
  }
  return SC_OK;
}

/* BatchNormalization in its inference form (training_mode 0, as
 * exported): y = (x − mean)·r·scale + B per channel (dim 1), r =
 * 1/√(var + ε). dX = dy·scale·r, dScale = Σ dy·(x − mean)·r, dB = Σ dy
 * (Σ over every dim but 1). The running mean and var get none; training
 * mode is refused. */
sc_status sc_grad_batch_norm(sc_grad_ctx *c) {
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  if (sc_attr_int(g, n, "training_mode", 0) != 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "gradient of training-mode BatchNormalization (batch statistics)");
  for (int32_t j = 1; j < n->n_outputs; j++)
    if (c->dy[j] >= 0)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "gradient through output %d", (int)j);
  if (c->dy[0] < 0) return SC_OK;
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_value xv = g->values[x];
  double eps;
  sc_status st = sc_norm_epsilon(g, n, &eps);
  if (st != SC_OK) return st;
  int64_t cd[SC_MAX_RANK], axes[SC_MAX_RANK];
  int32_t na = 0;
  for (int32_t d = 0; d < xv.rank - 1; d++) cd[d] = d == 0 ? xv.dims[1] : 1;
  for (int32_t d = 0; d < xv.rank; d++)
    if (d != 1) axes[na++] = d;
  int32_t cr = xv.rank - 1; /* [C, 1, …] broadcasts against [N, C, …] */
  int32_t rstd = inv_std(c, gb_reshape(c, in_v(c, 4), cr, cd), eps);
  if (c->want[0])
    c->dx[0] = mul3(c, dy, gb_reshape(c, in_v(c, 1), cr, cd), rstd);
  if (c->want[1]) {
    int32_t xhat = gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_SUB, x, gb_reshape(c, in_v(c, 3), cr, cd)),
                        rstd);
    c->dx[1] = gb_reduce_sum(c, gb_2(c, SC_OP_MUL, dy, xhat), axes, na, false);
  }
  if (c->want[2]) c->dx[2] = gb_reduce_sum(c, dy, axes, na, false);
  for (int32_t i = 0; i < 3; i++)
    if (c->want[i] && c->dx[i] < 0) return g->diag.status;
  return SC_OK;
}

/* GlobalAveragePool: dy spread evenly over the spatial dims.
 * GlobalMaxPool: dy to the maximum of each channel (recomputed from X),
 * split evenly between ties. */
sc_status sc_grad_global_pool(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  int32_t x = in_v(c, 0);
  sc_value xv = g->values[x];
  int64_t axes[SC_MAX_RANK], count = 1;
  int32_t na = 0;
  for (int32_t d = 2; d < xv.rank; d++) {
    axes[na++] = d;
    count *= xv.dims[d];
  }
  int32_t e = gb_expand(c, c->dy[0], xv.rank, xv.dims);
  if (gb_fwd(c)->op == SC_OP_GLOBAL_AVERAGE_POOL) {
    c->dx[0] = scaled(c, e, 1.0 / (double)(count ? count : 1));
  } else {
    sc_dtype t = xv.dtype;
    int32_t hit = gb_where(c, gb_2(c, SC_OP_EQUAL, x, gb_reduce(c, SC_OP_REDUCE_MAX, x, axes, na, true)),
                           gb_scalar(c, t, 1.0), gb_scalar(c, t, 0.0));
    int32_t cnt = gb_reduce(c, SC_OP_REDUCE_SUM, hit, axes, na, true);
    c->dx[0] = gb_2(c, SC_OP_MUL, e, gb_2(c, SC_OP_DIV, hit, cnt));
  }
  return done_dx0(c);
}

/* ---- Conv and the windowed pools (2-D) ----
 * The IR has no ConvTranspose, and Conv does not fold, so the gradients
 * are built from movement ops and one MatMul each: im2col gathers the
 * K = KH·KW strided windows of the padded x as [N, C, K, OH, OW] (one
 * Slice per kernel offset, a Concat); col2im is its adjoint: each offset's
 * [N, C, OH, OW] is spread out by the strides (Reshape, Pad), placed at its
 * offset in the padded grid (Pad), the K of them summed (Sum), the padding
 * cut off (Slice). Only 2-D windows (rank-4 X) are handled. */

typedef struct win2d {
  int64_t n, c, h, w, oh, ow;   /* X [N, C, H, W] → [N, ·, OH, OW] */
  int64_t k[2], s[2], d[2];     /* kernel, strides, dilations */
  int64_t p[2];                 /* begin pads (top, left) */
  int64_t hp, wp;               /* the padded grid, big enough for every window */
} win2d;

static sc_status attr_pair(sc_grad_ctx *c, const char *name, int64_t dflt, int64_t *v) {
  const int64_t *a = NULL;
  int64_t na = sc_attr_ints(c->g, gb_fwd(c), name, &a);
  v[0] = v[1] = dflt;
  if (na <= 0) return SC_OK; /* absent (-1) or empty */
  if (na != 2)
    return sc_node_error(c->g, gb_fwd(c), SC_ERR_INVALID, "%s has %lld entries (2 expected)",
                         name, (long long)na);
  v[0] = a[0];
  v[1] = a[1];
  return SC_OK;
}

/* The window of the forward node: the kernel from W (Conv) or
 * kernel_shape; the output dims from its inferred output. */
static sc_status win_read(sc_grad_ctx *c, const int64_t *kernel, win2d *w) {
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  sc_value xv = g->values[in_v(c, 0)], yv = g->values[out_v(c, 0)];
  if (xv.rank != 4)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "gradient of a %d-D window (only 2-D: X of rank 4)", (int)xv.rank - 2);
  w->n = xv.dims[0], w->c = xv.dims[1], w->h = xv.dims[2], w->w = xv.dims[3];
  w->oh = yv.dims[2], w->ow = yv.dims[3];
  int64_t pads[4] = {0, 0, 0, 0};
  sc_status st = SC_OK;
  if (kernel) memcpy(w->k, kernel, sizeof w->k);
  else st = attr_pair(c, "kernel_shape", 1, w->k);
  if (st == SC_OK) st = attr_pair(c, "strides", 1, w->s);
  if (st == SC_OK) st = attr_pair(c, "dilations", 1, w->d);
  if (st != SC_OK) return st;
  const int64_t *pa = NULL;
  int64_t np = sc_attr_ints(g, n, "pads", &pa);
  if (np == 4) memcpy(pads, pa, sizeof pads);
  const char *ap = sc_attr_string(g, n, "auto_pad", "NOTSET");
  int64_t in[2] = {w->h, w->w}, out[2] = {w->oh, w->ow};
  for (int i = 0; i < 2; i++) {
    int64_t span = (out[i] - 1) * w->s[i] + (w->k[i] - 1) * w->d[i] + 1;
    int64_t total = span > in[i] ? span - in[i] : 0;
    if (!strcmp(ap, "SAME_UPPER")) w->p[i] = total / 2;
    else if (!strcmp(ap, "SAME_LOWER")) w->p[i] = total - total / 2;
    else if (!strcmp(ap, "VALID")) w->p[i] = 0;
    else w->p[i] = pads[i];
    int64_t grid = w->p[i] + in[i] + (strcmp(ap, "NOTSET") && ap[0] ? total : pads[i + 2]);
    if (grid < span) grid = span; /* ceil_mode: a last window past the pads */
    if (i == 0) w->hp = grid;
    else w->wp = grid;
  }
  return SC_OK;
}

/* x [N, C, H, W] padded (with value pad) to the grid. */
static int32_t win_pad(sc_grad_ctx *c, int32_t x, const win2d *w, double pad) {
  int64_t pads[8] = {0, 0, w->p[0], w->p[1], 0, 0, w->hp - w->p[0] - w->h,
                     w->wp - w->p[1] - w->w};
  int32_t in[3] = {x, gb_ints(c, pads, 8), gb_scalar(c, dtype_of(c, x), pad)};
  return gb_op(c, SC_OP_PAD, in, 3);
}

static int32_t gb_slice(sc_grad_ctx *c, int32_t x, int32_t n, const int64_t *starts,
                        const int64_t *ends, const int64_t *axes, const int64_t *steps) {
  int32_t in[5] = {x, gb_ints(c, starts, n), gb_ints(c, ends, n), gb_ints(c, axes, n),
                   steps ? gb_ints(c, steps, n) : -1};
  return gb_op(c, SC_OP_SLICE, in, steps ? 5 : 4);
}

/* The K windows of the padded xp: [N, C, K, OH, OW], K in row-major
 * (kernel row, kernel column) order. */
static int32_t im2col(sc_grad_ctx *c, int32_t xp, const win2d *w) {
  int32_t parts[256], k = 0;
  if (w->k[0] * w->k[1] > 256) return -1;
  int64_t axes[2] = {2, 3}, dims[5] = {w->n, w->c, 1, w->oh, w->ow};
  for (int64_t i = 0; i < w->k[0]; i++)
    for (int64_t j = 0; j < w->k[1]; j++) {
      int64_t st[2] = {i * w->d[0], j * w->d[1]};
      int64_t en[2] = {st[0] + (w->oh - 1) * w->s[0] + 1, st[1] + (w->ow - 1) * w->s[1] + 1};
      parts[k++] = gb_reshape(c, gb_slice(c, xp, 2, st, en, axes, w->s), 5, dims);
    }
  return k == 1 ? parts[0] : gb_op_i(c, SC_OP_CONCAT, parts, k, "axis", 2);
}

/* The adjoint of im2col (without padding): col [N, C, K, OH, OW] → the
 * gradient of X [N, C, H, W], overlapping windows summed. */
static int32_t col2im(sc_grad_ctx *c, int32_t col, const win2d *w) {
  int32_t parts[256], k = 0;
  if (w->k[0] * w->k[1] > 256) return -1;
  int64_t ax1[1] = {2}, spread[6] = {w->n, w->c, w->oh, 1, w->ow, 1};
  int64_t wide[4] = {w->n, w->c, w->oh * w->s[0], w->ow * w->s[1]};
  int64_t lh = (w->oh - 1) * w->s[0] + 1, lw = (w->ow - 1) * w->s[1] + 1;
  for (int64_t i = 0; i < w->k[0]; i++)
    for (int64_t j = 0; j < w->k[1]; j++, k++) {
      int64_t st = k, en = k + 1;
      int32_t v = gb_reshape(c, gb_slice(c, col, 1, &st, &en, ax1, NULL), 6, spread);
      if (w->s[0] > 1 || w->s[1] > 1) { /* spread out by the strides */
        int64_t sp[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, w->s[0] - 1, 0, w->s[1] - 1};
        v = gb_reshape(c, gb_2(c, SC_OP_PAD, v, gb_ints(c, sp, 12)), 4, wide);
        int64_t s0[2] = {0, 0}, e0[2] = {lh, lw}, a0[2] = {2, 3};
        v = gb_slice(c, v, 2, s0, e0, a0, NULL);
      } else {
        v = gb_reshape(c, v, 4, (int64_t[]){w->n, w->c, w->oh, w->ow});
      }
      int64_t b[4] = {0, 0, i * w->d[0], j * w->d[1]};
      int64_t e[4] = {0, 0, w->hp - b[2] - lh, w->wp - b[3] - lw};
      parts[k] = pad_zeros(c, v, 4, b, e);
      if (parts[k] < 0) return -1;
    }
  int32_t sum = k == 1 ? parts[0] : gb_op(c, SC_OP_SUM, parts, k);
  int64_t s0[2] = {w->p[0], w->p[1]}, e0[2] = {w->p[0] + w->h, w->p[1] + w->w}, a0[2] = {2, 3};
  return gb_slice(c, sum, 2, s0, e0, a0, NULL);
}

/* Conv (2-D, any group, strides, pads, dilations), with G groups of Cg
 * input and Mg output channels and cols = im2col(x) viewed [G, Cg·K, N·L]
 * (L = OH·OW), dy viewed [G, Mg, N·L]:
 *   dW = dy · colsᵀ  (one batched MatMul over the groups),
 *   dX = col2im(Wᵀ · dy)  (W viewed [G, Mg, Cg·K]),
 *   dB = Σ dy over N, OH, OW. */
sc_status sc_grad_conv(sc_grad_ctx *c) {
  int32_t dy = c->dy[0];
  if (dy < 0) return SC_OK;
  sc_graph *g = c->g;
  int32_t x = in_v(c, 0), wt = in_v(c, 1), b = in_v(c, 2);
  sc_value wv = g->values[wt];
  win2d w;
  sc_status st = wv.rank == 4 ? win_read(c, wv.dims + 2, &w)
                              : sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                                              "gradient of a %d-D Conv (only 2-D)",
                                              (int)wv.rank - 2);
  if (st != SC_OK) return st;
  int64_t grp = sc_attr_int(g, gb_fwd(c), "group", 1), m = wv.dims[0], cg = wv.dims[1];
  int64_t mg = m / grp, kk = w.k[0] * w.k[1], l = w.oh * w.ow;
  if (kk > 256)
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "gradient of a Conv with a kernel of %lld > 256 taps", (long long)kk);
  /* dy [N, M, OH, OW] → [N, G, Mg, L] */
  int32_t dy4 = gb_reshape(c, dy, 4, (int64_t[]){w.n, grp, mg, l});
  if (b >= 0 && c->want[2] && (c->dx[2] = gb_reduce_sum(c, dy, (int64_t[]){0, 2, 3}, 3, false)) < 0)
    return g->diag.status;
  if (c->want[1]) {
    int32_t cols = im2col(c, win_pad(c, x, &w, 0.0), &w); /* [N, C, K, OH, OW] */
    cols = gb_reshape(c, cols, 5, (int64_t[]){w.n, grp, cg * kk, l, 1});
    cols = gb_transpose(c, cols, (int64_t[]){1, 0, 3, 4, 2}, 5); /* [G, N, L, 1, CgK] */
    cols = gb_reshape(c, cols, 3, (int64_t[]){grp, w.n * l, cg * kk});
    int32_t dyg = gb_transpose(c, dy4, (int64_t[]){1, 2, 0, 3}, 4); /* [G, Mg, N, L] */
    dyg = gb_reshape(c, dyg, 3, (int64_t[]){grp, mg, w.n * l});
    int32_t dw = gb_2(c, SC_OP_MATMUL, dyg, cols); /* [G, Mg, CgK] */
    if ((c->dx[1] = gb_reshape(c, dw, 4, wv.dims)) < 0) return g->diag.status;
  }
  if (c->want[0]) {
    int32_t wg = gb_reshape(c, wt, 3, (int64_t[]){grp, mg, cg * kk});
    int32_t col = gb_2(c, SC_OP_MATMUL, gb_swap_last(c, wg), dy4); /* [N, G, CgK, L] */
    col = gb_reshape(c, col, 5, (int64_t[]){w.n, w.c, kk, w.oh, w.ow});
    if ((c->dx[0] = col2im(c, col, &w)) < 0) return g->diag.status;
  }
  return SC_OK;
}

/* AveragePool (2-D, ceil_mode 0): each window's dy divided by its count
 * (the kernel size, or with count_include_pad 0 the window's cells inside
 * X: a constant [OH, OW]) goes to every cell of the window. MaxPool: dy
 * goes to the window's maximum (ties split evenly; padding is −∞; PyTorch
 * gives a tie to one cell). */
sc_status sc_grad_pool(sc_grad_ctx *c) {
  if (!c->want[0] || c->dy[0] < 0) return SC_OK;
  sc_graph *g = c->g;
  const sc_node *n = gb_fwd(c);
  bool maxp = n->op == SC_OP_MAX_POOL;
  if (maxp && n->n_outputs > 1 && c->dy[1] >= 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "gradient through the Indices output");
  win2d w;
  sc_status st = win_read(c, NULL, &w);
  if (st != SC_OK) return st;
  int64_t kk = w.k[0] * w.k[1];
  if (kk > 256)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "gradient of a pool with a window of %lld > 256 cells", (long long)kk);
  int32_t x = in_v(c, 0), dy = c->dy[0];
  sc_dtype t = dtype_of(c, x);
  int64_t d5[5] = {w.n, w.c, 1, w.oh, w.ow}, full[5] = {w.n, w.c, kk, w.oh, w.ow};
  int32_t dy5 = gb_reshape(c, dy, 5, d5), col;
  if (maxp) {
    int32_t cols = im2col(c, win_pad(c, x, &w, -INFINITY), &w);
    /* the maxima recomputed from the windows (folds where X does) */
    int32_t mx = gb_reduce(c, SC_OP_REDUCE_MAX, cols, (int64_t[]){2}, 1, true);
    int32_t hit = gb_where(c, gb_2(c, SC_OP_EQUAL, cols, mx),
                           gb_scalar(c, t, 1.0), gb_scalar(c, t, 0.0));
    int32_t cnt = gb_reduce(c, SC_OP_REDUCE_SUM, hit, (int64_t[]){2}, 1, true);
    col = gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_DIV, dy5, cnt), hit);
  } else {
    if (sc_attr_int(g, n, "ceil_mode", 0))
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "gradient of AveragePool with ceil_mode 1");
    int64_t cells = w.oh * w.ow;
    if (cells > (1 << 20))
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "gradient of an AveragePool this large");
    double *cnt = sc_malloc((size_t)(cells ? cells : 1) * sizeof *cnt);
    if (!cnt) return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
    bool incl = sc_attr_int(g, n, "count_include_pad", 0) != 0;
    for (int64_t oh = 0; oh < w.oh; oh++)
      for (int64_t ow = 0; ow < w.ow; ow++) {
        int64_t k = 0;
        for (int64_t i = 0; i < w.k[0]; i++)
          for (int64_t j = 0; j < w.k[1]; j++) {
            int64_t r = oh * w.s[0] + i * w.d[0] - w.p[0], q = ow * w.s[1] + j * w.d[1] - w.p[1];
            k += incl || (r >= 0 && r < w.h && q >= 0 && q < w.w);
          }
        cnt[oh * w.ow + ow] = k ? 1.0 / (double)k : 0.0;
      }
    uint8_t *buf = sc_malloc((size_t)(cells ? cells : 1) * sc_dtype_size(t));
    if (!buf) {
      sc_free(cnt);
      return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < cells; i++) sc_store_f64(t, buf, i, cnt[i]);
    int32_t inv = new_const(c, t, 2, (int64_t[]){w.oh, w.ow}, buf,
                            (uint64_t)cells * sc_dtype_size(t));
    sc_free(cnt);
    sc_free(buf);
    col = gb_expand(c, gb_2(c, SC_OP_MUL, dy5, inv), 5, full);
  }
  c->dx[0] = col2im(c, col, &w);
  return done_dx0(c);
}

/* The marker of ops without a rule; never called through sc_grad_rule. */
sc_status sc_no_grad(sc_grad_ctx *c) {
  return sc_node_error(c->g, gb_fwd(c), SC_ERR_UNSUPPORTED, "no gradient rule");
}

static const sc_grad_fn table[SC_OP_COUNT] = {
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                       \
  [SC_OP_##id] = sc_##grad,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof table / sizeof table[0] == SC_OP_COUNT, "one gradient column per op");

sc_grad_fn sc_grad_rule(sc_op op) {
  sc_grad_fn f = (unsigned)op < SC_OP_COUNT ? table[op] : NULL;
  return f == sc_no_grad ? NULL : f;
}

/* FusedAttention (ir/attention.h): one FusedAttentionGrad node computes
 * dq, dk and dv from q, k, v, the forward's o and lse, and d_o (in q's
 * dtype), recomputing the probabilities from lse — nothing of [b, h, sq,
 * skv] is saved. The additive mask gets no gradient: passes/
 * fuse_attention.c fuses only constant masks and graph inputs that are not
 * trained, and a gradient wanted for it is an error; so is one that reaches
 * lse (only this rule reads it). */
sc_status sc_grad_attention(sc_grad_ctx *c) {
  int32_t dy = c->dy[0];
  sc_graph *g = c->g;
  if (c->dy[1] >= 0)
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "the log-sum-exp output of a fused attention has no gradient");
  if (gb_fwd(c)->n_inputs > 3 && c->want[3])
    return sc_node_error(g, gb_fwd(c), SC_ERR_UNSUPPORTED,
                         "the mask of a fused attention has no gradient (run with "
                         "--no-fuse-attention)");
  if (dy < 0 || (!c->want[0] && !c->want[1] && !c->want[2])) return SC_OK;
  int32_t q = in_v(c, 0);
  int32_t d_o = gb_cast(c, dy, dtype_of(c, q));
  if (d_o < 0) return g->diag.status;
  int32_t in[7] = {q, in_v(c, 1), in_v(c, 2), out_v(c, 0), out_v(c, 1), d_o, in_v(c, 3)};
  int32_t n_in = gb_fwd(c)->n_inputs > 3 ? 7 : 6;
  int32_t outs[3];
  static const char *const suffix[3] = {"dq", "dk", "dv"};
  int32_t node = gb_node(c, SC_OP_FUSED_ATTENTION_GRAD, in, n_in, 3, suffix, outs);
  if (node < 0) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  /* each set at once: adding an attribute may move the others */
  double scale = sc_attr_float(g, gb_fwd(c), "scale", 1.0);
  int64_t causal = sc_attr_int(g, gb_fwd(c), "causal", 0);
  sc_attr *a = sc_node_add_attr(g, node, "scale", SC_ATTR_FLOAT);
  if (a) a->f = scale;
  if (a && (a = sc_node_add_attr(g, node, "causal", SC_ATTR_INT))) a->i = causal;
  if (!a) return SC_ERR_NOMEM;
  sc_status st = sc_ops[SC_OP_FUSED_ATTENTION_GRAD].infer(g, &g->nodes[node]);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < 3; i++)
    if (c->want[i]) c->dx[i] = outs[i];
  return SC_OK;
}
