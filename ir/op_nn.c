/* op_nn.c — neural-network ops: MatMul, Gemm, Conv, pooling, the
 * normalisations and (Log)Softmax. Shape rules, cost and constant evaluation.
 *
 * Shape rules follow the ONNX specification (opsets 13..25) and, where ONNX
 * shape inference and onnxruntime disagree, onnxruntime: a ceil_mode pooling
 * window that would start in the end padding is dropped, as onnxruntime and
 * PyTorch do. Every size read from the model goes through checked
 * arithmetic; attributes of the wrong kind or length are errors, not
 * defaults.
 *
 * Cost rule (docs/ops.md copies this):
 *   bytes  = bytes of every present input + bytes of every present output.
 *   flops:
 *     MatMul       2 * batch * M * K * N  (a multiply-add counts 2)
 *     Gemm         2 * M * K * N, plus M * N for adding C when C is present
 *                  (alpha and beta scaling are not counted)
 *     Conv         2 * N * M * out_spatial * (C / group) * prod(kernel),
 *                  plus N * M * out_spatial bias adds when B is present
 *     MaxPool, AveragePool   prod(kernel_shape) * output elements
 *     GlobalAveragePool, GlobalMaxPool   input elements
 *     BatchNormalization     2 per element (scale and shift folded)
 *     InstanceNormalization, LayerNormalization, GroupNormalization
 *                  5 per element (mean, variance, normalise, scale, shift)
 *     RMSNormalization   4 per element (square, sum, normalise, scale)
 *     LayerNormGrad      9 per element of X (the statistics again, the
 *                  two row sums, dX; the column sums of dScale and dB)
 *     SoftmaxCrossEntropy  5 per logit (as Softmax); its gradient counts as
 *                  an elementwise op (one per element)
 *     Softmax, LogSoftmax   5 per element (max, subtract, exp, sum, divide
 *                  or log-subtract)
 *
 * Constant evaluation: MatMul (any float or integer dtype; floats are
 * accumulated in double and rounded once on store, integers wrap modulo
 * 2^64 before the store's conversion), Gemm (double arithmetic), Softmax and
 * LogSoftmax (double, max-subtracted), LayerNormGrad and
 * SoftmaxCrossEntropy(Grad) (double). An eval
 * returns SC_ERR_LIMIT, without recording a diagnostic, when an output has
 * more than SC_FOLD_MAX_ELEMENTS elements or the product needs more than
 * FOLD_MAX_MACS multiply-adds: the node is then simply left unfolded. Conv,
 * pools and the forward norms are never folded. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_util.h"

/* Largest number of multiply-adds a MatMul/Gemm fold may take (~0.3 s). */
#define FOLD_MAX_MACS ((int64_t)1 << 28)

/* ---- small helpers ---- */

/* "[8,64]" into buf. */
static const char *fmt_shape(char *buf, size_t cap, int32_t rank, const int64_t *dims) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int32_t i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

/* An INTS attribute of exactly `want` entries each >= min, or absent (then
 * every entry is dflt and *present is false). */
static sc_status attr_ints_n(sc_graph *g, const sc_node *n, const char *name,
                             int64_t want, int64_t dflt, int64_t min, int64_t *out,
                             bool *present) {
  const sc_attr *a = sc_node_attr(n, name);
  if (present) *present = a != NULL;
  if (!a) {
    for (int64_t i = 0; i < want; i++) out[i] = dflt;
    return SC_OK;
  }
  if (a->kind != SC_ATTR_INTS)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be a list of ints",
                         name);
  if (a->n != want)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "attribute '%s' has %lld values (expects %lld)", name,
                         (long long)a->n, (long long)want);
  for (int64_t i = 0; i < want; i++) {
    if (a->ints[i] < min)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "attribute '%s'[%lld] is %lld (must be >= %lld)", name,
                           (long long)i, (long long)a->ints[i], (long long)min);
    out[i] = a->ints[i];
  }
  return SC_OK;
}

static bool is_float_or_int(sc_dtype t) { return sc_dtype_is_float(t) || sc_dtype_is_int(t); }

static sc_status need_float(sc_graph *g, const sc_node *n, const sc_value *v) {
  if (!sc_dtype_is_float(v->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has dtype %s (expects a float type)",
                         v->name, sc_dtype_name(v->dtype));
  return SC_OK;
}

/* Input v has rank 1 and `want` elements. */
static sc_status need_vector(sc_graph *g, const sc_node *n, const sc_value *v,
                             const char *what, int64_t want) {
  char b[160];
  if (v->rank != 1 || v->dims[0] != want)
    return sc_node_error(g, n, SC_ERR_INVALID, "%s '%s' has shape %s (expects [%lld])",
                         what, v->name, fmt_shape(b, sizeof b, v->rank, v->dims),
                         (long long)want);
  return SC_OK;
}

/* v is unidirectionally broadcastable to (rank, dims). */
static sc_status need_bcast_to(sc_graph *g, const sc_node *n, const sc_value *v,
                               const char *what, int32_t rank, const int64_t *dims) {
  char b1[160], b2[160];
  bool ok = v->rank <= rank;
  for (int32_t i = 0; ok && i < v->rank; i++) {
    int64_t d = v->dims[i], t = dims[rank - v->rank + i];
    ok = d == 1 || d == t;
  }
  if (!ok)
    return sc_node_error(g, n, SC_ERR_INVALID, "%s '%s' of shape %s does not broadcast to %s",
                         what, v->name, fmt_shape(b1, sizeof b1, v->rank, v->dims),
                         fmt_shape(b2, sizeof b2, rank, dims));
  return SC_OK;
}

static double numel0(const sc_value *v) {
  int64_t k = v ? sc_value_numel(v) : -1;
  return k > 0 ? (double)k : 0.0;
}

/* Bytes of every present input and output. */
static double io_bytes(sc_graph *g, const sc_node *n) {
  double b = 0;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    int64_t k = v ? sc_value_bytes(v) : -1;
    if (k > 0) b += (double)k;
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    int64_t k = v ? sc_value_bytes(v) : -1;
    if (k > 0) b += (double)k;
  }
  return b;
}

/* ---- MatMul ---- */

/* numpy matmul: a 1-D A is [1,K] and a 1-D B is [K,1], the added dim
 * dropped from the result; the batch dims (all but the last two)
 * broadcast. */
typedef struct mm_dims {
  int64_t m, k, n;
  int32_t ra, rb;         /* batch ranks of A and B */
  const int64_t *da, *db; /* their batch dims */
  int32_t rbatch;         /* batch rank of the result */
  int64_t batch[SC_MAX_RANK];
  int32_t rout;
  int64_t out[SC_MAX_RANK];
} mm_dims;

static sc_status matmul_dims(sc_graph *g, const sc_node *n, const sc_value *a,
                             const sc_value *b, mm_dims *s) {
  char b1[160], b2[160];
  if (a->rank < 1 || b->rank < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' is a scalar (needs rank >= 1)",
                         a->rank < 1 ? a->name : b->name);
  int64_t ka;
  if (a->rank == 1) {
    s->m = 1, ka = a->dims[0], s->ra = 0;
  } else {
    s->m = a->dims[a->rank - 2], ka = a->dims[a->rank - 1], s->ra = a->rank - 2;
  }
  if (b->rank == 1) {
    s->k = b->dims[0], s->n = 1, s->rb = 0;
  } else {
    s->k = b->dims[b->rank - 2], s->n = b->dims[b->rank - 1], s->rb = b->rank - 2;
  }
  if (ka != s->k)
    return sc_node_error(g, n, SC_ERR_INVALID, "inner dims %lld and %lld differ (%s x %s)",
                         (long long)ka, (long long)s->k,
                         fmt_shape(b1, sizeof b1, a->rank, a->dims),
                         fmt_shape(b2, sizeof b2, b->rank, b->dims));
  s->da = a->dims, s->db = b->dims;
  sc_status st = sc_broadcast(g, n, s->ra, s->da, s->rb, s->db, &s->rbatch, s->batch);
  if (st != SC_OK) return st;
  s->rout = 0;
  for (int32_t i = 0; i < s->rbatch; i++) s->out[s->rout++] = s->batch[i];
  if (a->rank > 1) s->out[s->rout++] = s->m;
  if (b->rank > 1) s->out[s->rout++] = s->n;
  return SC_OK;
}

sc_status sc_op_infer_matmul(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if (a->dtype != b->dtype)
    return sc_node_error(g, n, SC_ERR_INVALID, "input dtypes %s and %s differ",
                         sc_dtype_name(a->dtype), sc_dtype_name(b->dtype));
  if (!is_float_or_int(a->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype %s is not supported (float or integer)",
                         sc_dtype_name(a->dtype));
  mm_dims s;
  st = matmul_dims(g, n, a, b, &s);
  if (st != SC_OK) return st;
  return sc_set_output(g, n, 0, a->dtype, s.rout, s.out);
}

void sc_op_cost_matmul(sc_graph *g, const sc_node *n, sc_cost *c) {
  const sc_value *a = sc_node_input(g, n, 0);
  const sc_value *y = sc_node_output(g, n, 0);
  double k = a && a->rank >= 1 ? (double)a->dims[a->rank - 1] : 0;
  c->flops = 2.0 * numel0(y) * k; /* numel(Y) = batch * M * N */
  c->bytes = io_bytes(g, n);
}

sc_status sc_op_eval_matmul(sc_graph *g, sc_node *n) {
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  mm_dims s;
  sc_status st = matmul_dims(g, n, a, b, &s);
  if (st != SC_OK) return st;
  int64_t total = sc_value_numel(sc_node_output(g, n, 0)), macs;
  if (total < 0 || total > SC_FOLD_MAX_ELEMENTS || !sc_mul_i64(total, s.k, &macs) ||
      macs > FOLD_MAX_MACS)
    return SC_ERR_LIMIT;
  sc_dtype t = a->dtype;
  void *y = sc_eval_output(g, n, 0);
  if (!y) return SC_ERR_NOMEM;
  if (total == 0) return SC_OK;
  SC_ASSERT(a->data && b->data);
  int64_t idx[SC_MAX_RANK] = {0};
  int64_t mk = s.m * s.k, kn = s.k * s.n, mn = s.m * s.n, yoff = 0;
  bool fl = sc_dtype_is_float(t);
  do {
    int64_t ao = sc_bcast_offset(s.rbatch, idx, s.ra, s.da) * mk;
    int64_t bo = sc_bcast_offset(s.rbatch, idx, s.rb, s.db) * kn;
    for (int64_t i = 0; i < s.m; i++)
      for (int64_t j = 0; j < s.n; j++) {
        if (fl) {
          double acc = 0;
          for (int64_t p = 0; p < s.k; p++)
            acc += sc_load_f64(t, a->data, ao + i * s.k + p) *
                   sc_load_f64(t, b->data, bo + p * s.n + j);
          sc_store_f64(t, y, yoff + i * s.n + j, acc);
        } else {
          uint64_t acc = 0; /* wraps, as fixed-width integer hardware does */
          for (int64_t p = 0; p < s.k; p++)
            acc += (uint64_t)sc_load_i64(t, a->data, ao + i * s.k + p) *
                   (uint64_t)sc_load_i64(t, b->data, bo + p * s.n + j);
          sc_store_i64(t, y, yoff + i * s.n + j, (int64_t)acc);
        }
      }
    yoff += mn;
  } while (sc_next_index(s.rbatch, s.batch, idx));
  return SC_OK;
}

/* ---- Gemm: Y = alpha * A' B' + beta * C ---- */

typedef struct gemm_attrs {
  int64_t trans_a, trans_b;
  double alpha, beta;
  int64_t m, k, n;
} gemm_attrs;

sc_status sc_gemm_read_attrs(sc_graph *g, const sc_node *n, bool *trans_a, bool *trans_b,
                             double *alpha, double *beta) {
  int64_t ta, tb;
  sc_status st;
  if ((st = sc_read_attr_int(g, n, "transA", 0, &ta)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "transB", 0, &tb)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "alpha", 1.0, alpha)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "beta", 1.0, beta)) != SC_OK)
    return st;
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return sc_node_error(g, n, SC_ERR_INVALID, "transA %lld / transB %lld must be 0 or 1",
                         (long long)ta, (long long)tb);
  *trans_a = ta != 0;
  *trans_b = tb != 0;
  return SC_OK;
}

static sc_status gemm_parse(sc_graph *g, const sc_node *n, gemm_attrs *ga) {
  bool ta, tb;
  sc_status st = sc_gemm_read_attrs(g, n, &ta, &tb, &ga->alpha, &ga->beta);
  if (st != SC_OK) return st;
  ga->trans_a = ta, ga->trans_b = tb;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  if (a->rank != 2 || b->rank != 2)
    return sc_node_error(g, n, SC_ERR_INVALID, "A and B must have rank 2 (got %d and %d)",
                         a->rank, b->rank);
  ga->m = a->dims[ga->trans_a ? 1 : 0];
  ga->k = a->dims[ga->trans_a ? 0 : 1];
  int64_t kb = b->dims[ga->trans_b ? 1 : 0];
  ga->n = b->dims[ga->trans_b ? 0 : 1];
  if (ga->k != kb)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "inner dims %lld and %lld differ (transA=%lld, transB=%lld)",
                         (long long)ga->k, (long long)kb, (long long)ga->trans_a,
                         (long long)ga->trans_b);
  return SC_OK;
}

sc_status sc_op_infer_gemm(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  const sc_value *cv = sc_node_input(g, n, 2);
  if (a->dtype != b->dtype || (cv && cv->dtype != a->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input dtypes %s, %s%s%s differ",
                         sc_dtype_name(a->dtype), sc_dtype_name(b->dtype), cv ? ", " : "",
                         cv ? sc_dtype_name(cv->dtype) : "");
  if (!is_float_or_int(a->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype %s is not supported (float or integer)",
                         sc_dtype_name(a->dtype));
  gemm_attrs ga;
  if ((st = gemm_parse(g, n, &ga)) != SC_OK) return st;
  int64_t out[2] = {ga.m, ga.n};
  if (cv && (st = need_bcast_to(g, n, cv, "C", 2, out)) != SC_OK) return st;
  return sc_set_output(g, n, 0, a->dtype, 2, out);
}

void sc_op_cost_gemm(sc_graph *g, const sc_node *n, sc_cost *c) {
  const sc_value *a = sc_node_input(g, n, 0);
  const sc_value *y = sc_node_output(g, n, 0);
  const sc_attr *ta = sc_node_attr(n, "transA");
  bool trans_a = ta && ta->kind == SC_ATTR_INT && ta->i;
  double k = a && a->rank == 2 ? (double)a->dims[trans_a ? 0 : 1] : 0;
  double mn = numel0(y);
  c->flops = 2.0 * mn * k + (sc_node_input(g, n, 2) ? mn : 0.0);
  c->bytes = io_bytes(g, n);
}

sc_status sc_op_eval_gemm(sc_graph *g, sc_node *n) {
  gemm_attrs ga;
  sc_status st = gemm_parse(g, n, &ga);
  if (st != SC_OK) return st;
  const sc_value *a = sc_node_input(g, n, 0), *b = sc_node_input(g, n, 1);
  const sc_value *cv = sc_node_input(g, n, 2);
  int64_t total, macs;
  if (!sc_mul_i64(ga.m, ga.n, &total) || total > SC_FOLD_MAX_ELEMENTS ||
      !sc_mul_i64(total, ga.k, &macs) || macs > FOLD_MAX_MACS)
    return SC_ERR_LIMIT;
  sc_dtype t = a->dtype;
  void *y = sc_eval_output(g, n, 0);
  if (!y) return SC_ERR_NOMEM;
  if (total == 0) return SC_OK;
  SC_ASSERT((a->data || ga.k == 0) && (b->data || ga.k == 0) && (!cv || cv->data));
  for (int64_t i = 0; i < ga.m; i++)
    for (int64_t j = 0; j < ga.n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < ga.k; p++) {
        int64_t ai = ga.trans_a ? p * ga.m + i : i * ga.k + p;
        int64_t bi = ga.trans_b ? j * ga.k + p : p * ga.n + j;
        acc += sc_load_f64(t, a->data, ai) * sc_load_f64(t, b->data, bi);
      }
      double v = ga.alpha * acc;
      if (cv) {
        int64_t idx[2] = {i, j};
        v += ga.beta * sc_load_f64(t, cv->data, sc_bcast_offset(2, idx, cv->rank, cv->dims));
      }
      sc_store_f64(t, y, i * ga.n + j, v);
    }
  return SC_OK;
}

/* ---- sliding windows: Conv and the pools ---- */

enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };

typedef struct window {
  int32_t nsp;                     /* spatial dims */
  int64_t kernel[SC_MAX_RANK];
  int64_t strides[SC_MAX_RANK];
  int64_t dilations[SC_MAX_RANK];
  int64_t pads[2 * SC_MAX_RANK];   /* begins, then ends (ONNX order) */
  int auto_pad;
  bool ceil_mode;
} window;

/* Reads kernel_shape (required when w_kernel is NULL; else checked against
 * it), strides, dilations, pads and auto_pad. */
static sc_status window_parse(sc_graph *g, const sc_node *n, int32_t nsp,
                              const int64_t *w_kernel, window *w) {
  sc_status st;
  bool have_k, have_pads;
  w->nsp = nsp;
  if ((st = attr_ints_n(g, n, "kernel_shape", nsp, 1, 1, w->kernel, &have_k)) != SC_OK)
    return st;
  if (!w_kernel && !have_k)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'kernel_shape' is required");
  if (w_kernel)
    for (int32_t i = 0; i < nsp; i++) {
      if (have_k && w->kernel[i] != w_kernel[i])
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "kernel_shape[%d] is %lld but W has %lld", i,
                             (long long)w->kernel[i], (long long)w_kernel[i]);
      w->kernel[i] = w_kernel[i];
    }
  if ((st = attr_ints_n(g, n, "strides", nsp, 1, 1, w->strides, NULL)) != SC_OK ||
      (st = attr_ints_n(g, n, "dilations", nsp, 1, 1, w->dilations, NULL)) != SC_OK ||
      (st = attr_ints_n(g, n, "pads", 2 * nsp, 0, 0, w->pads, &have_pads)) != SC_OK)
    return st;
  const char *ap;
  if ((st = sc_read_attr_string(g, n, "auto_pad", "NOTSET", &ap)) != SC_OK) return st;
  if (!strcmp(ap, "NOTSET") || !ap[0])
    w->auto_pad = PAD_NOTSET;
  else if (!strcmp(ap, "SAME_UPPER"))
    w->auto_pad = PAD_SAME_UPPER;
  else if (!strcmp(ap, "SAME_LOWER"))
    w->auto_pad = PAD_SAME_LOWER;
  else if (!strcmp(ap, "VALID"))
    w->auto_pad = PAD_VALID;
  else
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", ap);
  if (w->auto_pad != PAD_NOTSET && have_pads)
    for (int32_t i = 0; i < 2 * nsp; i++)
      if (w->pads[i] != 0)
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "explicit pads cannot be combined with auto_pad %s", ap);
  w->ceil_mode = false;
  return SC_OK;
}

/* Output spatial dims of a window over input spatial dims in. */
static sc_status window_out(sc_graph *g, const sc_node *n, const window *w,
                            const int64_t *in, int64_t *out) {
  for (int32_t i = 0; i < w->nsp; i++) {
    int64_t s = w->strides[i], eff, padded, pb, pe;
    if (!sc_mul_i64(w->dilations[i], w->kernel[i] - 1, &eff) || !sc_add_i64(eff, 1, &eff))
      return sc_node_error(g, n, SC_ERR_LIMIT, "dilated kernel size overflows in spatial dim %d", i);
    if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) {
      out[i] = in[i] / s + (in[i] % s != 0); /* ceil(in / stride) */
      continue;
    }
    pb = w->auto_pad == PAD_VALID ? 0 : w->pads[i];
    pe = w->auto_pad == PAD_VALID ? 0 : w->pads[w->nsp + i];
    if (!sc_add_i64(in[i], pb, &padded) || !sc_add_i64(padded, pe, &padded))
      return sc_node_error(g, n, SC_ERR_LIMIT, "padded size overflows in spatial dim %d", i);
    if (padded < eff)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "spatial dim %d: padded input %lld is smaller than the "
                           "(dilated) kernel %lld", i, (long long)padded, (long long)eff);
    int64_t span = padded - eff;
    int64_t o = (w->ceil_mode ? span / s + (span % s != 0) : span / s) + 1;
    /* a ceil_mode window must start inside the input or the begin padding */
    int64_t start;
    if (w->ceil_mode && (!sc_mul_i64(o - 1, s, &start) || start >= in[i] + pb)) o--;
    out[i] = o;
  }
  return SC_OK;
}

sc_status sc_op_infer_conv(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *wt = sc_node_input(g, n, 1);
  const sc_value *bias = sc_node_input(g, n, 2);
  char b1[160], b2[160];
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  if (wt->dtype != x->dtype || (bias && bias->dtype != x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "X, W%s dtypes differ (%s, %s%s%s)",
                         bias ? ", B" : "", sc_dtype_name(x->dtype), sc_dtype_name(wt->dtype),
                         bias ? ", " : "", bias ? sc_dtype_name(bias->dtype) : "");
  if (x->rank < 3 || x->rank > 5)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "X has rank %d (1-D, 2-D and 3-D convolutions: rank 3..5)", x->rank);
  if (wt->rank != x->rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "W %s and X %s differ in rank",
                         fmt_shape(b1, sizeof b1, wt->rank, wt->dims),
                         fmt_shape(b2, sizeof b2, x->rank, x->dims));
  int64_t group;
  if ((st = sc_read_attr_int(g, n, "group", 1, &group)) != SC_OK) return st;
  int64_t c = x->dims[1], m = wt->dims[0];
  if (group < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "group %lld must be >= 1", (long long)group);
  if (c % group != 0 || m % group != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "group %lld does not divide input channels %lld and output "
                         "channels %lld", (long long)group, (long long)c, (long long)m);
  if (wt->dims[1] != c / group)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "W %s has %lld input channels per group; X has %lld channels "
                         "in %lld groups (expects %lld)",
                         fmt_shape(b1, sizeof b1, wt->rank, wt->dims),
                         (long long)wt->dims[1], (long long)c, (long long)group,
                         (long long)(c / group));
  if (bias && (st = need_vector(g, n, bias, "bias", m)) != SC_OK) return st;
  window w;
  if ((st = window_parse(g, n, x->rank - 2, wt->dims + 2, &w)) != SC_OK) return st;
  int64_t out[SC_MAX_RANK];
  out[0] = x->dims[0];
  out[1] = m;
  if ((st = window_out(g, n, &w, x->dims + 2, out + 2)) != SC_OK) return st;
  return sc_set_output(g, n, 0, x->dtype, x->rank, out);
}

void sc_op_cost_conv(sc_graph *g, const sc_node *n, sc_cost *c) {
  const sc_value *x = sc_node_input(g, n, 0), *wt = sc_node_input(g, n, 1);
  const sc_value *y = sc_node_output(g, n, 0);
  /* W is (M, C/group, k...): one output element takes prod(W dims 1..) MACs */
  double per = 0;
  if (x && wt && wt->rank >= 3) {
    per = 1;
    for (int32_t i = 1; i < wt->rank; i++) per *= (double)wt->dims[i];
  }
  double ny = numel0(y);
  c->flops = 2.0 * ny * per + (sc_node_input(g, n, 2) ? ny : 0.0);
  c->bytes = io_bytes(g, n);
}

/* Checks the inputs; X (input 0) is a float tensor (N, C, spatial...) with
 * at least one spatial dim. */
static sc_status spatial_input(sc_graph *g, const sc_node *n, const sc_value **x) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  *x = sc_node_input(g, n, 0);
  /* MaxPool (since opset 12) and GlobalMaxPool also take 8-bit integers */
  bool ints = (n->op == SC_OP_MAX_POOL || n->op == SC_OP_GLOBAL_MAX_POOL) &&
              ((*x)->dtype == SC_DTYPE_I8 || (*x)->dtype == SC_DTYPE_U8);
  if (!ints && (st = need_float(g, n, *x)) != SC_OK) return st;
  if ((*x)->rank < 3)
    return sc_node_error(g, n, SC_ERR_INVALID, "X has rank %d (expects N, C and >= 1 spatial dim)",
                         (*x)->rank);
  return SC_OK;
}

sc_status sc_op_infer_pool(sc_graph *g, sc_node *n) {
  const sc_value *x;
  sc_status st = spatial_input(g, n, &x);
  if (st != SC_OK) return st;
  window w;
  if ((st = window_parse(g, n, x->rank - 2, NULL, &w)) != SC_OK) return st;
  int64_t ceil_mode, extra;
  if ((st = sc_read_attr_int(g, n, "ceil_mode", 0, &ceil_mode)) != SC_OK) return st;
  if (ceil_mode != 0 && ceil_mode != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "ceil_mode %lld must be 0 or 1",
                         (long long)ceil_mode);
  w.ceil_mode = ceil_mode == 1;
  const char *flag = n->op == SC_OP_MAX_POOL ? "storage_order" : "count_include_pad";
  if ((st = sc_read_attr_int(g, n, flag, 0, &extra)) != SC_OK) return st;
  if (extra != 0 && extra != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "%s %lld must be 0 or 1", flag,
                         (long long)extra);
  int64_t out[SC_MAX_RANK];
  out[0] = x->dims[0];
  out[1] = x->dims[1];
  if ((st = window_out(g, n, &w, x->dims + 2, out + 2)) != SC_OK) return st;
  if ((st = sc_set_output(g, n, 0, x->dtype, x->rank, out)) != SC_OK) return st;
  /* MaxPool's optional Indices: flat positions into X, int64 */
  return sc_set_output(g, n, 1, SC_DTYPE_I64, x->rank, out);
}

void sc_op_cost_pool(sc_graph *g, const sc_node *n, sc_cost *c) {
  if (n->op == SC_OP_GLOBAL_AVERAGE_POOL || n->op == SC_OP_GLOBAL_MAX_POOL) {
    c->flops = numel0(sc_node_input(g, n, 0));
  } else {
    const sc_attr *k = sc_node_attr(n, "kernel_shape");
    double ks = 1;
    if (k && k->kind == SC_ATTR_INTS)
      for (int64_t i = 0; i < k->n; i++) ks *= (double)k->ints[i];
    c->flops = ks * numel0(sc_node_output(g, n, 0));
  }
  c->bytes = io_bytes(g, n);
}

sc_status sc_op_infer_global_pool(sc_graph *g, sc_node *n) {
  const sc_value *x;
  sc_status st = spatial_input(g, n, &x);
  if (st != SC_OK) return st;
  int64_t out[SC_MAX_RANK];
  for (int32_t i = 0; i < x->rank; i++) out[i] = i < 2 ? x->dims[i] : 1;
  return sc_set_output(g, n, 0, x->dtype, x->rank, out);
}

/* ---- normalisations ---- */

sc_status sc_norm_epsilon(sc_graph *g, const sc_node *n, double *eps) {
  return sc_read_attr_float(g, n, "epsilon", 1e-5, eps);
}

sc_status sc_op_infer_batchnorm(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  if (x->rank < 2)
    return sc_node_error(g, n, SC_ERR_INVALID, "X has rank %d (expects N, C, ...)", x->rank);
  double eps, momentum;
  int64_t training;
  if ((st = sc_norm_epsilon(g, n, &eps)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "momentum", 0.9, &momentum)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "training_mode", 0, &training)) != SC_OK)
    return st;
  if (training != 0 && training != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "training_mode %lld must be 0 or 1",
                         (long long)training);
  static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
  int64_t ch = x->dims[1];
  for (int32_t i = 1; i < 5; i++) {
    const sc_value *p = sc_node_input(g, n, i);
    if ((st = need_float(g, n, p)) != SC_OK ||
        (st = need_vector(g, n, p, names[i], ch)) != SC_OK)
      return st;
  }
  if ((st = sc_same_as_input(g, n, 0, 0)) != SC_OK) return st;
  /* running_mean / running_var (training mode): shape (C) */
  const sc_value *mean = sc_node_input(g, n, 3);
  if ((st = sc_set_output(g, n, 1, mean->dtype, 1, &ch)) != SC_OK) return st;
  return sc_set_output(g, n, 2, mean->dtype, 1, &ch);
}

void sc_op_cost_norm(sc_graph *g, const sc_node *n, sc_cost *c) {
  double per = n->op == SC_OP_BATCH_NORM          ? 2.0
               : n->op == SC_OP_RMS_NORM          ? 4.0
               : n->op == SC_OP_LAYER_NORM_GRAD   ? 9.0
                                                  : 5.0;
  c->flops = per * numel0(sc_node_input(g, n, 0));
  c->bytes = io_bytes(g, n);
}

sc_status sc_op_infer_instancenorm(sc_graph *g, sc_node *n) {
  const sc_value *x;
  sc_status st = spatial_input(g, n, &x);
  if (st != SC_OK) return st;
  double eps;
  if ((st = sc_norm_epsilon(g, n, &eps)) != SC_OK) return st;
  const sc_value *scale = sc_node_input(g, n, 1), *bias = sc_node_input(g, n, 2);
  if ((st = need_float(g, n, scale)) != SC_OK || (st = need_float(g, n, bias)) != SC_OK ||
      (st = need_vector(g, n, scale, "scale", x->dims[1])) != SC_OK ||
      (st = need_vector(g, n, bias, "B", x->dims[1])) != SC_OK)
    return st;
  return sc_same_as_input(g, n, 0, 0);
}

/* The attributes LayerNormalization and RMSNormalization share: axis
 * (normalised against X's rank), epsilon (validated as a float) and
 * stash_type (must name a float type). */
static sc_status row_norm_attrs(sc_graph *g, const sc_node *n, const sc_value *x,
                                int32_t *axis, sc_dtype *stash_t) {
  int64_t axis_attr, stash;
  double eps;
  sc_status st;
  if ((st = sc_read_attr_int(g, n, "axis", -1, &axis_attr)) != SC_OK ||
      (st = sc_norm_epsilon(g, n, &eps)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "stash_type", 1, &stash)) != SC_OK)
    return st;
  if ((st = sc_norm_axis(g, n, axis_attr, x->rank, axis)) != SC_OK) return st;
  *stash_t = stash >= INT32_MIN && stash <= INT32_MAX ? sc_dtype_from_onnx((int32_t)stash)
                                                      : SC_DTYPE_COUNT;
  if (*stash_t == SC_DTYPE_COUNT || !sc_dtype_is_float(*stash_t))
    return sc_node_error(g, n, SC_ERR_INVALID, "stash_type %lld is not a float type",
                         (long long)stash);
  return SC_OK;
}

sc_status sc_op_infer_layernorm(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  int32_t axis;
  sc_dtype stash_t;
  if ((st = row_norm_attrs(g, n, x, &axis, &stash_t)) != SC_OK) return st;
  const sc_value *scale = sc_node_input(g, n, 1), *bias = sc_node_input(g, n, 2);
  if ((st = need_float(g, n, scale)) != SC_OK ||
      (st = need_bcast_to(g, n, scale, "Scale", x->rank, x->dims)) != SC_OK)
    return st;
  if (bias && ((st = need_float(g, n, bias)) != SC_OK ||
               (st = need_bcast_to(g, n, bias, "B", x->rank, x->dims)) != SC_OK))
    return st;
  if ((st = sc_same_as_input(g, n, 0, 0)) != SC_OK) return st;
  /* Mean, InvStdDev: X's shape with the normalised dims set to 1 */
  int64_t red[SC_MAX_RANK];
  for (int32_t i = 0; i < x->rank; i++) red[i] = i < axis ? x->dims[i] : 1;
  if ((st = sc_set_output(g, n, 1, stash_t, x->rank, red)) != SC_OK) return st;
  return sc_set_output(g, n, 2, stash_t, x->rank, red);
}

/* RMSNormalization (opset 23): Y = X / sqrt(mean(X^2 over axes >= axis) + eps)
 * * scale; scale broadcasts to the normalised shape X.shape[axis:]. */
sc_status sc_op_infer_rmsnorm(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  if (x->rank < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' is a scalar (needs rank >= 1)",
                         x->name);
  int32_t axis;
  sc_dtype stash_t;
  if ((st = row_norm_attrs(g, n, x, &axis, &stash_t)) != SC_OK) return st;
  const sc_value *scale = sc_node_input(g, n, 1);
  if ((st = need_float(g, n, scale)) != SC_OK ||
      (st = need_bcast_to(g, n, scale, "scale", x->rank - axis, x->dims + axis)) != SC_OK)
    return st;
  return sc_same_as_input(g, n, 0, 0);
}

/* LayerNormGrad (internal; passes/grad_rules.c emits it for
 * LayerNormalization and RMSNormalization): inputs dY, X, Scale, attributes
 * axis, epsilon and rms (1: RMSNormalization, no mean and no dB); outputs
 * dX (X's shape and dtype), dScale (Scale's) and, unless rms, dB (Scale's
 * shape and dtype). Scale must be exactly X.shape[axis:]: the rule keeps the
 * decomposed gradient for a Scale that broadcasts. */
sc_status sc_op_infer_layernorm_grad(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *dy = sc_node_input(g, n, 0), *x = sc_node_input(g, n, 1),
                 *scale = sc_node_input(g, n, 2);
  if ((st = need_float(g, n, dy)) != SC_OK || (st = need_float(g, n, x)) != SC_OK ||
      (st = need_float(g, n, scale)) != SC_OK)
    return st;
  int64_t axis_attr, rms;
  double eps;
  int32_t axis;
  if ((st = sc_read_attr_int(g, n, "axis", -1, &axis_attr)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "rms", 0, &rms)) != SC_OK ||
      (st = sc_norm_epsilon(g, n, &eps)) != SC_OK ||
      (st = sc_norm_axis(g, n, axis_attr, x->rank, &axis)) != SC_OK)
    return st;
  char b1[160], b2[160];
  if (dy->rank != x->rank || memcmp(dy->dims, x->dims, sizeof(int64_t) * (size_t)x->rank))
    return sc_node_error(g, n, SC_ERR_INVALID, "dY '%s' has shape %s, X '%s' %s", dy->name,
                         fmt_shape(b1, sizeof b1, dy->rank, dy->dims), x->name,
                         fmt_shape(b2, sizeof b2, x->rank, x->dims));
  if (scale->rank != x->rank - axis ||
      memcmp(scale->dims, x->dims + axis, sizeof(int64_t) * (size_t)scale->rank))
    return sc_node_error(g, n, SC_ERR_INVALID, "Scale '%s' has shape %s (expects %s)",
                         scale->name, fmt_shape(b1, sizeof b1, scale->rank, scale->dims),
                         fmt_shape(b2, sizeof b2, x->rank - axis, x->dims + axis));
  if (rms != 0 && rms != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "rms is %lld (expects 0 or 1)", (long long)rms);
  if (rms && n->n_outputs > 2 && n->outputs[2] >= 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "an RMS norm's gradient has no dB output");
  if ((st = sc_set_output(g, n, 0, x->dtype, x->rank, x->dims)) != SC_OK ||
      (st = sc_set_output(g, n, 1, scale->dtype, scale->rank, scale->dims)) != SC_OK)
    return st;
  return rms ? SC_OK : sc_set_output(g, n, 2, scale->dtype, scale->rank, scale->dims);
}

/* LayerNormGrad folded in double arithmetic, rounded once on store: the
 * formulas of passes/grad_rules.c's sc_grad_row_norm (the same as the
 * lowering's, codegen/lower_norm.c). */
sc_status sc_op_eval_layernorm_grad(sc_graph *g, sc_node *n) {
  const sc_value *dy = sc_node_input(g, n, 0), *x = sc_node_input(g, n, 1),
                 *sv = sc_node_input(g, n, 2);
  int32_t axis;
  double eps;
  sc_status st = sc_norm_axis(g, n, sc_attr_int(g, n, "axis", -1), x->rank, &axis);
  if (st == SC_OK) st = sc_norm_epsilon(g, n, &eps);
  if (st != SC_OK) return st;
  bool rms = sc_attr_int(g, n, "rms", 0) != 0;
  int64_t total = sc_value_numel(x), cols = sc_value_numel(sv);
  if (total < 0 || total > SC_FOLD_MAX_ELEMENTS || cols <= 0) return SC_ERR_LIMIT;
  void *dx = sc_eval_output(g, n, 0), *ds = sc_eval_output(g, n, 1);
  bool has_db = !rms && n->n_outputs > 2 && n->outputs[2] >= 0;
  void *db = has_db ? sc_eval_output(g, n, 2) : NULL;
  if (!dx || !ds || (has_db && !db)) return SC_ERR_NOMEM;
  if (total == 0) return SC_OK;
  SC_ASSERT(x->data && dy->data && sv->data);
  double *acc = sc_calloc((size_t)cols * 2, sizeof(double));
  if (!acc) return SC_ERR_NOMEM;
  for (int64_t r = 0; r < total / cols; r++) {
    int64_t base = r * cols;
    double mean = 0, var = 0, s1 = 0, s2 = 0;
    for (int64_t k = 0; k < cols && !rms; k++) mean += sc_load_f64(x->dtype, x->data, base + k);
    mean /= (double)cols;
    for (int64_t k = 0; k < cols; k++) {
      double c = sc_load_f64(x->dtype, x->data, base + k) - mean;
      var += c * c;
    }
    double rstd = 1.0 / sqrt(var / (double)cols + eps);
    for (int64_t k = 0; k < cols; k++) {
      double xh = (sc_load_f64(x->dtype, x->data, base + k) - mean) * rstd;
      double d = sc_load_f64(dy->dtype, dy->data, base + k);
      double gg = d * sc_load_f64(sv->dtype, sv->data, k);
      s1 += gg;
      s2 += gg * xh;
      acc[k] += d * xh;
      acc[cols + k] += d;
    }
    for (int64_t k = 0; k < cols; k++) {
      double xh = (sc_load_f64(x->dtype, x->data, base + k) - mean) * rstd;
      double gg = sc_load_f64(dy->dtype, dy->data, base + k) * sc_load_f64(sv->dtype, sv->data, k);
      double t = gg - xh * s2 / (double)cols - (rms ? 0.0 : s1 / (double)cols);
      sc_store_f64(x->dtype, dx, base + k, t * rstd);
    }
  }
  for (int64_t k = 0; k < cols; k++) {
    sc_store_f64(sv->dtype, ds, k, acc[k]);
    if (db) sc_store_f64(sv->dtype, db, k, acc[cols + k]);
  }
  sc_free(acc);
  return SC_OK;
}

/* SoftmaxCrossEntropy (internal; passes/train.c's cross-entropy loss):
 * inputs logits [.., V] (float) and labels [..] (int64), attribute
 * ignore_index; outputs, per row, the loss lse − logits[label] (0 where the
 * label is ignore_index) and lse = log Σ exp(logits), both in the compute
 * dtype (f64 for f64 logits, else f32). SoftmaxCrossEntropyGrad: inputs
 * dLoss [..] (the loss's dtype), logits, labels and lse; output dLogits
 * (the logits' shape and dtype) = (exp(logits − lse) − onehot(label)) ·
 * dLoss, 0 on an ignored row. */
sc_status sc_op_infer_softmax_cross_entropy(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  bool grad = n->op == SC_OP_SOFTMAX_CROSS_ENTROPY_GRAD;
  const sc_value *x = sc_node_input(g, n, grad ? 1 : 0), *lab = sc_node_input(g, n, grad ? 2 : 1);
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  int64_t ig;
  if ((st = sc_read_attr_int(g, n, "ignore_index", -100, &ig)) != SC_OK) return st;
  char b1[160], b2[160];
  if (x->rank < 1 || lab->dtype != SC_DTYPE_I64 || lab->rank != x->rank - 1 ||
      memcmp(lab->dims, x->dims, sizeof(int64_t) * (size_t)lab->rank))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "labels '%s' (%s %s) are not int64 of the logits' shape %s without "
                         "the last dim",
                         lab->name, sc_dtype_name(lab->dtype),
                         fmt_shape(b1, sizeof b1, lab->rank, lab->dims),
                         fmt_shape(b2, sizeof b2, x->rank, x->dims));
  sc_dtype ct = x->dtype == SC_DTYPE_F64 ? SC_DTYPE_F64 : SC_DTYPE_F32;
  if (!grad) {
    if ((st = sc_set_output(g, n, 0, ct, lab->rank, lab->dims)) != SC_OK) return st;
    return sc_set_output(g, n, 1, ct, lab->rank, lab->dims);
  }
  for (int32_t i = 0; i < 4; i += 3) {
    const sc_value *r = sc_node_input(g, n, i);
    if (r->dtype != ct || r->rank != lab->rank ||
        memcmp(r->dims, lab->dims, sizeof(int64_t) * (size_t)r->rank))
      return sc_node_error(g, n, SC_ERR_INVALID, "%s '%s' is %s %s (expects %s %s)",
                           i ? "lse" : "dLoss", r->name, sc_dtype_name(r->dtype),
                           fmt_shape(b1, sizeof b1, r->rank, r->dims), sc_dtype_name(ct),
                           fmt_shape(b2, sizeof b2, lab->rank, lab->dims));
  }
  return sc_set_output(g, n, 0, x->dtype, x->rank, x->dims);
}

/* Both folded in double arithmetic, rounded once on store (the formulas
 * above; a label outside [0, V) reads class 0, as the kernels do: the
 * step's label check refuses such labels before they get here). */
sc_status sc_op_eval_softmax_cross_entropy(sc_graph *g, sc_node *n) {
  bool grad = n->op == SC_OP_SOFTMAX_CROSS_ENTROPY_GRAD;
  const sc_value *x = sc_node_input(g, n, grad ? 1 : 0), *lab = sc_node_input(g, n, grad ? 2 : 1);
  int64_t total = sc_value_numel(x), v = x->dims[x->rank - 1];
  if (total < 0 || total > SC_FOLD_MAX_ELEMENTS || v <= 0) return SC_ERR_LIMIT;
  int64_t ig = sc_attr_int(g, n, "ignore_index", -100);
  void *y0 = sc_eval_output(g, n, 0), *y1 = grad ? y0 : sc_eval_output(g, n, 1);
  if (!y0 || !y1) return SC_ERR_NOMEM;
  if (total == 0) return SC_OK;
  const sc_value *dl = grad ? sc_node_input(g, n, 0) : NULL, *ls = grad ? sc_node_input(g, n, 3) : NULL;
  const sc_value *o0 = sc_node_output(g, n, 0);
  for (int64_t r = 0; r < total / v; r++) {
    int64_t l = sc_load_i64(SC_DTYPE_I64, lab->data, r), at = l >= 0 && l < v ? l : 0;
    bool valid = l != ig;
    if (grad) {
      double lse = sc_load_f64(ls->dtype, ls->data, r), d = sc_load_f64(dl->dtype, dl->data, r);
      for (int64_t k = 0; k < v; k++) {
        double p = exp(sc_load_f64(x->dtype, x->data, r * v + k) - lse) - (k == l ? 1.0 : 0.0);
        sc_store_f64(x->dtype, y0, r * v + k, valid ? p * d : 0.0);
      }
      continue;
    }
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < v; k++) {
      double e = sc_load_f64(x->dtype, x->data, r * v + k);
      if (e > m || isnan(e)) m = e;
    }
    for (int64_t k = 0; k < v; k++) s += exp(sc_load_f64(x->dtype, x->data, r * v + k) - m);
    double lse = m + log(s);
    sc_store_f64(o0->dtype, y0, r, valid ? lse - sc_load_f64(x->dtype, x->data, r * v + at) : 0.0);
    sc_store_f64(o0->dtype, y1, r, lse);
  }
  return SC_OK;
}

sc_status sc_op_infer_groupnorm(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  if ((st = need_float(g, n, x)) != SC_OK) return st;
  if (x->rank < 2)
    return sc_node_error(g, n, SC_ERR_INVALID, "X has rank %d (expects N, C, ...)", x->rank);
  if (!sc_node_attr(n, "num_groups"))
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'num_groups' is required");
  int64_t groups, stash;
  double eps;
  if ((st = sc_read_attr_int(g, n, "num_groups", 0, &groups)) != SC_OK ||
      (st = sc_norm_epsilon(g, n, &eps)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "stash_type", 1, &stash)) != SC_OK)
    return st;
  int64_t ch = x->dims[1];
  if (groups < 1 || ch % groups != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "num_groups %lld does not divide the %lld channels",
                         (long long)groups, (long long)ch);
  /* opset 21: scale and bias per channel (C); opset 18: per group */
  static const char *const names[] = {"X", "scale", "bias"};
  for (int32_t i = 1; i < 3; i++) {
    const sc_value *p = sc_node_input(g, n, i);
    char b[160];
    if ((st = need_float(g, n, p)) != SC_OK) return st;
    if (p->rank != 1 || (p->dims[0] != ch && p->dims[0] != groups))
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "%s '%s' has shape %s (expects [%lld] channels or [%lld] groups)",
                           names[i], p->name, fmt_shape(b, sizeof b, p->rank, p->dims),
                           (long long)ch, (long long)groups);
  }
  return sc_same_as_input(g, n, 0, 0);
}

/* ---- Softmax, LogSoftmax ---- */

static sc_status softmax_axis(sc_graph *g, const sc_node *n, int32_t *axis) {
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t a;
  sc_status st = sc_read_attr_int(g, n, "axis", -1, &a);
  if (st != SC_OK) return st;
  if (x->rank < 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' is a scalar (needs rank >= 1)",
                         x->name);
  return sc_norm_axis(g, n, a, x->rank, axis);
}

sc_status sc_op_infer_softmax(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  int32_t axis;
  if ((st = need_float(g, n, sc_node_input(g, n, 0))) != SC_OK ||
      (st = softmax_axis(g, n, &axis)) != SC_OK)
    return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_eval_softmax(sc_graph *g, sc_node *n) {
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t axis;
  sc_status st = softmax_axis(g, n, &axis);
  if (st != SC_OK) return st;
  int64_t total = sc_value_numel(x);
  if (total < 0 || total > SC_FOLD_MAX_ELEMENTS) return SC_ERR_LIMIT;
  void *y = sc_eval_output(g, n, 0);
  if (!y) return SC_ERR_NOMEM;
  if (total == 0) return SC_OK;
  SC_ASSERT(x->data);
  int64_t len = x->dims[axis], inner = 1;
  for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
  int64_t outer = total / (len * inner);
  bool log_out = n->op == SC_OP_LOG_SOFTMAX;
  sc_dtype t = x->dtype;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < len; k++) {
        double v = sc_load_f64(t, x->data, base + k * inner);
        if (v > mx || isnan(v)) mx = v;
      }
      for (int64_t k = 0; k < len; k++)
        sum += exp(sc_load_f64(t, x->data, base + k * inner) - mx);
      double lsum = log(sum);
      for (int64_t k = 0; k < len; k++) {
        double d = sc_load_f64(t, x->data, base + k * inner) - mx;
        sc_store_f64(t, y, base + k * inner, log_out ? d - lsum : exp(d) / sum);
      }
    }
  return SC_OK;
}
