/* lower_norm.c — row kernels: Softmax, LogSoftmax, LayerNormalization,
 * RMSNormalization, InstanceNormalization, GroupNormalization, the
 * LayerNormGrad of the first two (KERNEL), and
 * inference
 * BatchNormalization (POINT).
 *
 * A row kernel's outer domain enumerates rows, its inner loop runs over one
 * row, and it is a few REDUCE phases followed by STOREs that read their
 * registers:
 *   Softmax     outer = every dim but `axis`, inner = the axis;
 *               m = max x; s = sum exp(x - m); y = exp(x - m) / s
 *               (LogSoftmax: y = (x - m) - log s)
 *   LayerNorm   outer = dims before `axis`, inner = the trailing dims;
 *               mean = sum x / N; var = sum (x - mean)^2 / N;
 *               y = (x - mean) * rsqrt(var + eps) * scale + bias; the
 *               optional Mean and InvStdDev outputs are stored too
 *   RMSNorm     outer and inner as LayerNorm; one REDUCE phase
 *               ss = sum x^2, then y = x * rsqrt(ss / N + eps) * scale
 *   InstanceNorm  the same over (N, C) rows of the spatial dims, with
 *               per-channel scale and bias
 *   GroupNorm   the same over (N, group) rows of C/G channels × spatial,
 *               scale and bias per channel (opset 21) or per group (18)
 *   LayerNormGrad  the backward of LayerNorm and RMSNorm: a row kernel for
 *               dX and a two-stage column sum for dScale and dB (below)
 *   SoftmaxCrossEntropy  the loss of a row of logits and its log-sum-exp,
 *               one row kernel; its gradient is a POINT op (below)
 * Statistics are computed in f32 (f64 for f64 inputs), as stash_type=1 asks;
 * the variance is the two-pass one (numerically stable), not E[x²]-E[x]².
 * BatchNormalization in inference mode is elementwise per channel:
 * (x - mean) / sqrt(var + eps) * scale + B; training mode is unsupported. */
#include <math.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/op_util.h"

#define UN(op, a) sc_lower_un(cx, KIR_##op, (a))
#define BIN(op, a, b) sc_lower_bin(cx, KIR_##op, (a), (b))
#define C(t, v) sc_lower_const(cx, (t), (v))

static sc_dtype compute_of(sc_dtype t) { return t == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32; }

static sc_status fail(sc_lower_ctx *cx) {
  return cx->diag->status != SC_OK
             ? cx->diag->status
             : sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static int32_t reduce(sc_lower_ctx *cx, kir_reduce_op rop, sc_dtype at, int32_t v) {
  if (v < 0) return -1;
  int32_t ph = kir_add_reduce(cx->arena, cx->k, rop, at, v);
  return ph < 0 ? -1 : kir_reg(cx->arena, cx->k, ph);
}

/* Input i of n (a per-row parameter such as scale) broadcast against x's
 * index xi (rank xr). */
static int32_t param_at(sc_lower_ctx *cx, const sc_node *n, int32_t i, int32_t xr,
                        const int32_t *xi, sc_dtype ct) {
  const sc_value *p = sc_node_input(cx->g, n, i);
  int32_t j[SC_MAX_RANK];
  sc_lower_bcast_index(cx, xr, xi, p->rank, p->dims, j);
  return sc_lower_cast(cx, ct, sc_lower_value_at(cx, n->inputs[i], j));
}

/* ---- Softmax, LogSoftmax ---- */

static sc_status softmax_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0);
  int64_t a = sc_attr_int(cx->g, n, "axis", -1);
  if (a < 0) a += x->rank;
  if (a < 0 || a >= x->rank) return sc_lower_error(cx, n, SC_ERR_INVALID, "axis out of range");
  int64_t od[SC_MAX_RANK];
  int32_t orank = 0;
  for (int32_t d = 0; d < x->rank; d++)
    if (d != a) od[orank++] = x->dims[d];
  sc_status st = sc_lower_begin_kernel(cx, n, orank, od, x->dims[a]);
  if (st != SC_OK) return st;
  int32_t xi[SC_MAX_RANK];
  for (int32_t d = 0, o = 0; d < x->rank; d++)
    xi[d] = d == a ? kir_var(cx->arena, cx->k, KIR_INNER) : kir_var(cx->arena, cx->k, o++);
  sc_dtype ct = compute_of(x->dtype);
  int32_t v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi));
  int32_t m = reduce(cx, KIR_RED_MAX, ct, v);
  int32_t d = BIN(SUB, v, m);
  int32_t s = reduce(cx, KIR_RED_SUM, ct, UN(EXP, d));
  int32_t y = n->op == SC_OP_LOG_SOFTMAX ? BIN(SUB, d, UN(LOG, s)) : BIN(DIV, UN(EXP, d), s);
  if (y < 0) return fail(cx);
  return sc_lower_store(cx, n, 0, xi, sc_lower_cast(cx, x->dtype, y));
}

const sc_lowering sc_lw_softmax = {SC_LOWER_KERNEL, NULL, softmax_build};

/* ---- SoftmaxCrossEntropy, SoftmaxCrossEntropyGrad ---- */

/* The label of the row at outer index oi (rank of the labels), as an i64
 * expr; *at gets a class index safe to load (the label inside [0, V), else
 * 0) and *valid the compute-dtype 1/0 of label != ignore_index. */
static int32_t sce_label(sc_lower_ctx *cx, const sc_node *n, int32_t in, const int32_t *oi,
                         int64_t classes, sc_dtype ct, int32_t *at, int32_t *valid) {
  int32_t lab = sc_lower_input_at(cx, n, in, oi);
  int32_t inside = BIN(AND, BIN(GE, lab, sc_lower_i64(cx, 0)), BIN(LT, lab, sc_lower_i64(cx, classes)));
  *at = sc_lower_sel(cx, inside, lab, sc_lower_i64(cx, 0));
  int64_t ig = sc_attr_int(cx->g, n, "ignore_index", -100);
  *valid = sc_lower_cast(cx, ct, BIN(NE, lab, sc_lower_i64(cx, ig)));
  return lab;
}

/* The loss forward as one row kernel over the classes: m = max x,
 * s = Σ exp(x − m), lse = m + log s; the row's loss lse − x[label] (x
 * read once more at the label; 0 on an ignored row), and lse, stored per
 * row. No
 * [rows, V] value is written. */
static sc_status sce_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0);
  int32_t r = x->rank - 1;
  int64_t classes = x->dims[r];
  sc_status st = sc_lower_begin_kernel(cx, n, r, x->dims, classes);
  if (st != SC_OK) return st;
  int32_t xi[SC_MAX_RANK];
  sc_lower_outer_index(cx, xi);
  xi[r] = kir_var(cx->arena, cx->k, KIR_INNER);
  sc_dtype ct = compute_of(x->dtype);
  int32_t v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi));
  int32_t m = reduce(cx, KIR_RED_MAX, ct, v);
  int32_t lse = BIN(ADD, m, UN(LOG, reduce(cx, KIR_RED_SUM, ct, UN(EXP, BIN(SUB, v, m)))));
  int32_t at, valid;
  if (sce_label(cx, n, 1, xi, classes, ct, &at, &valid) < 0) return fail(cx);
  xi[r] = at;
  int32_t picked = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi));
  int32_t loss = sc_lower_sel(cx, BIN(NE, valid, C(ct, 0.0)), BIN(SUB, lse, picked), C(ct, 0.0));
  if (loss < 0) return fail(cx);
  if ((st = sc_lower_store(cx, n, 0, xi, loss)) != SC_OK) return st;
  return sc_lower_store(cx, n, 1, xi, lse);
}

const sc_lowering sc_lw_softmax_cross_entropy = {SC_LOWER_KERNEL, NULL, sce_build};

/* The gradient, pointwise (so it fuses with what produces dLoss and what
 * reads dLogits): (exp(x − lse) − [class == label]) · dLoss · valid. */
static int32_t sce_grad_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                              const int32_t *idx) {
  const sc_value *x = sc_node_input(cx->g, n, 1);
  int32_t r = x->rank - 1;
  sc_dtype ct = compute_of(x->dtype);
  int32_t at, valid;
  int32_t lab = sce_label(cx, n, 2, idx, x->dims[r], ct, &at, &valid);
  int32_t p = UN(EXP, BIN(SUB, sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 1, idx)),
                          sc_lower_input_at(cx, n, 3, idx)));
  int32_t hit = sc_lower_cast(cx, ct, BIN(EQ, idx[r], lab));
  int32_t d = BIN(MUL, sc_lower_input_at(cx, n, 0, idx), valid);
  return sc_lower_cast(cx, x->dtype, BIN(MUL, BIN(SUB, p, hit), d));
}

const sc_lowering sc_lw_softmax_cross_entropy_grad = {SC_LOWER_POINT, sce_grad_point, NULL};

/* ---- shared: mean and inverse standard deviation of a row ---- */

typedef struct row_stats {
  int32_t v;    /* x at the row's inner index, in the compute dtype */
  int32_t mean; /* registers (compute dtype) */
  int32_t inv;  /* rsqrt(var + eps) */
} row_stats;

static sc_status stats(sc_lower_ctx *cx, const sc_node *n, int32_t in, const int32_t *xi,
                       int64_t count, double eps, sc_dtype ct, row_stats *rs) {
  rs->v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, in, xi));
  int32_t nn = C(ct, (double)count);
  rs->mean = BIN(DIV, reduce(cx, KIR_RED_SUM, ct, rs->v), nn);
  int32_t c = BIN(SUB, rs->v, rs->mean);
  int32_t var = BIN(DIV, reduce(cx, KIR_RED_SUM, ct, BIN(MUL, c, c)), nn);
  rs->inv = UN(RSQRT, BIN(ADD, var, C(ct, eps)));
  return rs->inv < 0 ? fail(cx) : SC_OK;
}

/* Starts the kernel of a norm over X's trailing dims from attribute axis:
 * outer = X.shape[:axis], inner = prod(X.shape[axis:]); xi gets X's index
 * (outer vars, then the inner var unflattened over the row). */
static sc_status begin_row_kernel(sc_lower_ctx *cx, const sc_node *n, const sc_value *x,
                                  int32_t *axis, int64_t *inner, double *eps, int32_t *xi) {
  int64_t a = sc_attr_int(cx->g, n, "axis", -1);
  if (a < 0) a += x->rank;
  if (a < 0 || a >= x->rank) return sc_lower_error(cx, n, SC_ERR_INVALID, "axis out of range");
  if (sc_norm_epsilon(cx->g, n, eps) != SC_OK)
    return sc_lower_error(cx, n, cx->g->diag.status, "%s", cx->g->diag.msg);
  *inner = 1;
  for (int32_t d = (int32_t)a; d < x->rank; d++)
    if (!sc_mul_i64(*inner, x->dims[d], inner))
      return sc_lower_error(cx, n, SC_ERR_LIMIT, "row too large");
  if (*inner == 0) return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "normalising empty rows");
  sc_status st = sc_lower_begin_kernel(cx, n, (int32_t)a, x->dims, *inner);
  if (st != SC_OK) return st;
  sc_lower_outer_index(cx, xi);
  sc_lower_unflatten(cx, kir_var(cx->arena, cx->k, KIR_INNER), x->rank - (int32_t)a,
                     x->dims + a, xi + a);
  *axis = (int32_t)a;
  return SC_OK;
}

/* ---- LayerNormalization ---- */

static sc_status layernorm_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0);
  int32_t a, xi[SC_MAX_RANK], si[SC_MAX_RANK];
  int64_t inner;
  double eps;
  sc_status st = begin_row_kernel(cx, n, x, &a, &inner, &eps, xi);
  if (st != SC_OK) return st;
  sc_dtype ct = compute_of(x->dtype);
  row_stats rs;
  if ((st = stats(cx, n, 0, xi, inner, eps, ct, &rs)) != SC_OK) return st;
  int32_t y = BIN(MUL, BIN(MUL, BIN(SUB, rs.v, rs.mean), rs.inv),
                  param_at(cx, n, 1, x->rank, xi, ct));
  if (sc_node_input(cx->g, n, 2)) y = BIN(ADD, y, param_at(cx, n, 2, x->rank, xi, ct));
  if (y < 0) return fail(cx);
  if ((st = sc_lower_store(cx, n, 0, xi, sc_lower_cast(cx, x->dtype, y))) != SC_OK) return st;
  /* Mean and InvStdDev: one value per row (stored at each inner step) */
  for (int32_t d = a; d < x->rank; d++) si[d] = sc_lower_i64(cx, 0);
  for (int32_t d = 0; d < a; d++) si[d] = xi[d];
  for (int32_t out = 1; out <= 2; out++) {
    const sc_value *o = sc_node_output(cx->g, n, out);
    if (!o) continue;
    int32_t e = sc_lower_cast(cx, o->dtype, out == 1 ? rs.mean : rs.inv);
    if ((st = sc_lower_store(cx, n, out, si, e)) != SC_OK) return st;
  }
  return SC_OK;
}

const sc_lowering sc_lw_layernorm = {SC_LOWER_KERNEL, NULL, layernorm_build};

/* ---- RMSNormalization ---- */

static sc_status rmsnorm_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0);
  int32_t a, xi[SC_MAX_RANK];
  int64_t inner;
  double eps;
  sc_status st = begin_row_kernel(cx, n, x, &a, &inner, &eps, xi);
  if (st != SC_OK) return st;
  sc_dtype ct = compute_of(x->dtype);
  int32_t v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi));
  int32_t ss = reduce(cx, KIR_RED_SUM, ct, BIN(MUL, v, v));
  int32_t inv = UN(RSQRT, BIN(ADD, BIN(DIV, ss, C(ct, (double)inner)), C(ct, eps)));
  int32_t y = BIN(MUL, BIN(MUL, v, inv), param_at(cx, n, 1, x->rank, xi, ct));
  if (y < 0) return fail(cx);
  return sc_lower_store(cx, n, 0, xi, sc_lower_cast(cx, x->dtype, y));
}

const sc_lowering sc_lw_rmsnorm = {SC_LOWER_KERNEL, NULL, rmsnorm_build};

/* ---- LayerNormGrad ---- */

/* Rows of a column sum's first stage: the largest divisor of the row count
 * up to this, so each stage-one point sums a whole run of rows. 16 is
 * cuda.h's SC_CUDA_SERIAL_INNER_MAX: a kernel with so short an inner loop
 * runs a thread per point on the GPU, neighbouring threads on neighbouring
 * columns, so stage one's loads are coalesced; stage two (a block per
 * column) reads 1/16 of the data. */
enum { NORM_GRAD_CHUNK = 16 };

/* Kernel reading (row, col) of X's [rows, cols] view: X's index. */
static void row_col_index(sc_lower_ctx *cx, const sc_value *x, int32_t axis, int32_t row,
                          int32_t col, int32_t *xi) {
  sc_lower_unflatten(cx, row, axis, x->dims, xi);
  sc_lower_unflatten(cx, col, x->rank - axis, x->dims + axis, xi + axis);
}

/* LayerNormGrad (dY, X, Scale; attributes axis, epsilon, rms) as up to
 * three kernels, every sum in the compute dtype and in a fixed order (the
 * same bits every run):
 *   rows     outer = X.shape[:axis], inner = the row (N elements): the
 *            statistics again (LayerNorm: mean, then the two-pass variance;
 *            RMSNorm: the mean square), x̂ = (x − mean)·r, g = dy·Scale,
 *            dX = r·(g − x̂·Σ(g·x̂)/N − Σg/N) (RMSNorm without Σg), and the
 *            row's mean and r into two scratch [rows] vectors;
 *   columns  outer = [rows/c, N], inner = c rows (c: NORM_GRAD_CHUNK or the
 *            largest divisor of the row count below it): Σ dy·x̂ and Σ dy
 *            of each run of c rows into scratch [rows/c, N] partial sums;
 *   sum      outer = N, inner = rows/c: dScale and dB as the sums of the
 *            partials, in row order.
 * With a single run (rows <= c) the column kernel stores dScale and dB
 * itself; with neither dScale nor dB read, only the row kernel runs. */
static sc_status layernorm_grad_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 1), *sv = sc_node_input(cx->g, n, 2);
  bool rms = sc_attr_int(cx->g, n, "rms", 0) != 0;
  int32_t a, xi[SC_MAX_RANK], row_i[1];
  int64_t cols, rows = 1;
  double eps;
  sc_status st = begin_row_kernel(cx, n, x, &a, &cols, &eps, xi);
  if (st != SC_OK) return st;
  for (int32_t d = 0; d < a; d++) rows *= x->dims[d]; /* ≤ X's element count */
  sc_dtype ct = compute_of(x->dtype);
  int32_t mean_b = rms ? -1 : sc_lower_scratch(cx, "mean", ct, 1, &rows);
  int32_t rstd_b = sc_lower_scratch(cx, "rstd", ct, 1, &rows);
  if (rstd_b < 0 || (!rms && mean_b < 0)) return fail(cx);
  int32_t nn = C(ct, (double)cols), xhat, mean = -1, rstd;
  if (rms) {
    int32_t v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 1, xi));
    int32_t ss = reduce(cx, KIR_RED_SUM, ct, BIN(MUL, v, v));
    rstd = UN(RSQRT, BIN(ADD, BIN(DIV, ss, nn), C(ct, eps)));
    xhat = BIN(MUL, v, rstd);
  } else {
    row_stats rs;
    if ((st = stats(cx, n, 1, xi, cols, eps, ct, &rs)) != SC_OK) return st;
    mean = rs.mean;
    rstd = rs.inv;
    xhat = BIN(MUL, BIN(SUB, rs.v, mean), rstd);
  }
  int32_t gg = BIN(MUL, sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi)),
                   param_at(cx, n, 2, x->rank, xi, ct));
  int32_t t = BIN(SUB, gg, BIN(MUL, xhat, BIN(DIV, reduce(cx, KIR_RED_SUM, ct,
                                                              BIN(MUL, gg, xhat)), nn)));
  if (!rms) t = BIN(SUB, t, BIN(DIV, reduce(cx, KIR_RED_SUM, ct, gg), nn));
  int32_t dx = BIN(MUL, t, rstd);
  if (dx < 0) return fail(cx);
  if ((st = sc_lower_store(cx, n, 0, xi, sc_lower_cast(cx, x->dtype, dx))) != SC_OK) return st;
  row_i[0] = sc_lower_offset(cx, a, x->dims, xi);
  if ((!rms && (st = sc_lower_buffer_store(cx, mean_b, row_i, mean)) != SC_OK) ||
      (st = sc_lower_buffer_store(cx, rstd_b, row_i, rstd)) != SC_OK)
    return st;

  /* the column sums, when anything reads dScale or dB */
  int32_t n_sums = rms ? 1 : 2;
  bool read = false;
  for (int32_t j = 1; j <= n_sums; j++)
    read |= j < n->n_outputs && n->outputs[j] >= 0 && cx->value_buffer[n->outputs[j]] >= 0;
  if (!read || rows == 0) return SC_OK;
  int64_t chunk = rows < NORM_GRAD_CHUNK ? rows : NORM_GRAD_CHUNK;
  while (rows % chunk) chunk--;
  int64_t runs = rows / chunk, pd[2] = {runs, cols};
  bool direct = runs == 1;
  int32_t part[2] = {-1, -1};
  for (int32_t j = 0; j < n_sums && !direct; j++)
    if ((part[j] = sc_lower_scratch(cx, j ? "dbias_part" : "dscale_part", ct, 2, pd)) < 0)
      return fail(cx);
  if ((st = direct ? sc_lower_begin_kernel(cx, n, 1, &cols, chunk)
                   : sc_lower_begin_kernel(cx, n, 2, pd, chunk)) != SC_OK)
    return st;
  int32_t inner = kir_var(cx->arena, cx->k, KIR_INNER);
  int32_t run = direct ? sc_lower_i64(cx, 0) : kir_var(cx->arena, cx->k, 0);
  int32_t col = kir_var(cx->arena, cx->k, direct ? 0 : 1);
  int32_t row = BIN(ADD, BIN(MUL, run, sc_lower_i64(cx, chunk)), inner);
  row_col_index(cx, x, a, row, col, xi);
  int32_t r1[1] = {row};
  int32_t v = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 1, xi));
  if (!rms) v = BIN(SUB, v, sc_lower_buffer_at(cx, mean_b, r1));
  int32_t dy = sc_lower_cast(cx, ct, sc_lower_input_at(cx, n, 0, xi));
  int32_t sum[2];
  sum[0] = reduce(cx, KIR_RED_SUM, ct, BIN(MUL, dy, BIN(MUL, v, sc_lower_buffer_at(cx, rstd_b, r1))));
  sum[1] = rms ? -1 : reduce(cx, KIR_RED_SUM, ct, dy);
  int32_t si[SC_MAX_RANK], pi[2] = {run, col};
  sc_lower_unflatten(cx, col, sv->rank, sv->dims, si);
  for (int32_t j = 0; j < n_sums && st == SC_OK; j++)
    st = direct ? sc_lower_store(cx, n, j + 1, si, sc_lower_cast(cx, sv->dtype, sum[j]))
                : sc_lower_buffer_store(cx, part[j], pi, sum[j]);
  if (st != SC_OK || direct) return st;
  /* stage two: each column's partial sums, in row order */
  if ((st = sc_lower_begin_kernel(cx, n, 1, &cols, runs)) != SC_OK) return st;
  col = kir_var(cx->arena, cx->k, 0);
  pi[0] = kir_var(cx->arena, cx->k, KIR_INNER);
  pi[1] = col;
  sc_lower_unflatten(cx, col, sv->rank, sv->dims, si);
  for (int32_t j = 0; j < n_sums && st == SC_OK; j++) {
    int32_t s = reduce(cx, KIR_RED_SUM, ct, sc_lower_buffer_at(cx, part[j], pi));
    st = sc_lower_store(cx, n, j + 1, si, sc_lower_cast(cx, sv->dtype, s));
  }
  return st;
}

const sc_lowering sc_lw_layernorm_grad = {SC_LOWER_KERNEL, NULL, layernorm_grad_build};

/* ---- InstanceNormalization, GroupNormalization ---- */

/* Rows of `groups` per sample: outer (N, groups), inner = C/groups × spatial.
 * per_group: scale/bias indexed by group instead of channel. */
static sc_status grouped_norm(sc_lower_ctx *cx, const sc_node *n, int64_t groups) {
  const sc_value *x = sc_node_input(cx->g, n, 0);
  double eps;
  if (sc_norm_epsilon(cx->g, n, &eps) != SC_OK)
    return sc_lower_error(cx, n, cx->g->diag.status, "%s", cx->g->diag.msg);
  int64_t ch = x->dims[1], spatial = 1;
  for (int32_t d = 2; d < x->rank; d++)
    if (!sc_mul_i64(spatial, x->dims[d], &spatial))
      return sc_lower_error(cx, n, SC_ERR_LIMIT, "row too large");
  if (groups < 1 || ch % groups != 0)
    return sc_lower_error(cx, n, SC_ERR_INVALID, "%lld groups do not divide %lld channels",
                          (long long)groups, (long long)ch);
  int64_t inner;
  if (!sc_mul_i64(ch / groups, spatial, &inner))
    return sc_lower_error(cx, n, SC_ERR_LIMIT, "row too large");
  if (inner == 0) return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED, "normalising empty rows");
  int64_t od[2] = {x->dims[0], groups};
  sc_status st = sc_lower_begin_kernel(cx, n, 2, od, inner);
  if (st != SC_OK) return st;
  /* x's linear offset is (n * groups + g) * inner + r */
  int32_t o0 = kir_var(cx->arena, cx->k, 0), o1 = kir_var(cx->arena, cx->k, 1);
  int32_t row = BIN(ADD, BIN(MUL, o0, sc_lower_i64(cx, groups)), o1);
  int32_t lin = BIN(ADD, BIN(MUL, row, sc_lower_i64(cx, inner)),
                    kir_var(cx->arena, cx->k, KIR_INNER));
  int32_t xi[SC_MAX_RANK];
  sc_lower_unflatten(cx, lin, x->rank, x->dims, xi);
  sc_dtype ct = compute_of(x->dtype);
  row_stats rs;
  if ((st = stats(cx, n, 0, xi, inner, eps, ct, &rs)) != SC_OK) return st;
  int32_t y = BIN(MUL, BIN(SUB, rs.v, rs.mean), rs.inv);
  for (int32_t i = 1; i <= 2; i++) {
    const sc_value *p = sc_node_input(cx->g, n, i);
    int32_t pi = p->dims[0] == ch ? xi[1] : o1;
    int32_t pv = sc_lower_cast(cx, ct, sc_lower_value_at(cx, n->inputs[i], &pi));
    y = i == 1 ? BIN(MUL, y, pv) : BIN(ADD, y, pv);
  }
  if (y < 0) return fail(cx);
  return sc_lower_store(cx, n, 0, xi, sc_lower_cast(cx, x->dtype, y));
}

static sc_status instancenorm_build(sc_lower_ctx *cx, const sc_node *n) {
  return grouped_norm(cx, n, sc_node_input(cx->g, n, 0)->dims[1]);
}

static sc_status groupnorm_build(sc_lower_ctx *cx, const sc_node *n) {
  return grouped_norm(cx, n, sc_attr_int(cx->g, n, "num_groups", 0));
}

const sc_lowering sc_lw_instancenorm = {SC_LOWER_KERNEL, NULL, instancenorm_build};
const sc_lowering sc_lw_groupnorm = {SC_LOWER_KERNEL, NULL, groupnorm_build};

/* ---- BatchNormalization (inference) ---- */

static int32_t batchnorm_point(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                               const int32_t *idx) {
  if (out != 0 || sc_attr_int(cx->g, n, "training_mode", 0) != 0) {
    sc_lower_error(cx, n, SC_ERR_UNSUPPORTED,
                   "training-mode BatchNormalization (running statistics) is not supported");
    return -1;
  }
  const sc_value *x = sc_node_input(cx->g, n, 0);
  sc_dtype t = x->dtype;
  int32_t c = idx[1];
  int32_t p[5];
  p[0] = sc_lower_input_at(cx, n, 0, idx);
  for (int32_t i = 1; i < 5; i++)
    p[i] = sc_lower_cast(cx, t, sc_lower_input_at(cx, n, i, &c));
  double eps;
  if (sc_norm_epsilon(cx->g, n, &eps) != SC_OK) {
    sc_lower_error(cx, n, cx->g->diag.status, "%s", cx->g->diag.msg);
    return -1;
  }
  int32_t den = UN(SQRT, BIN(ADD, p[4], C(t, eps)));
  return BIN(ADD, BIN(MUL, BIN(DIV, BIN(SUB, p[0], p[3]), den), p[1]), p[2]);
}

const sc_lowering sc_lw_batchnorm = {SC_LOWER_POINT, batchnorm_point, NULL};
