/* composite_rnn.c — the expansion of RNN, GRU and LSTM (opsets 7–25),
 * composite ops of the IR (passes/composite.c says how expansions work).
 *
 * Unrolled over the sequence (its length is static): the input projection
 * of every step as one MatMul, then per step the recurrent MatMul and the
 * gates (RNN: f; GRU: z, r, h with either linear_before_reset; LSTM: i, o,
 * f, c with peepholes and input_forget), the activations by name with their
 * alpha/beta, clip, both directions, layout 1, initial states;
 * sequence_lens keeps a sequence's state and writes zeros past its end (a
 * reverse walk then starts each sequence at its own last element). The
 * graph grows by about 20 nodes per step and direction. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

/* ---- RNN, GRU, LSTM ---- */

/* One activation of the recurrence ops' `activations` list, by name
 * (ONNX's list; case-insensitive), with its alpha/beta. */
typedef struct rnn_act {
  const char *name;
  double alpha, beta;
} rnn_act;

static int32_t act(sc_grad_ctx *c, const rnn_act *f, int32_t x, sc_dtype t) {
  if (x < 0) return -1;
  const char *n = f->name;
  int32_t zero = gb_scalar(c, t, 0.0), a = gb_scalar(c, t, f->alpha);
  if (!strcasecmp(n, "Sigmoid")) return gb_1(c, SC_OP_SIGMOID, x);
  if (!strcasecmp(n, "Tanh")) return gb_1(c, SC_OP_TANH, x);
  if (!strcasecmp(n, "Relu")) return gb_2(c, SC_OP_MAX, x, zero);
  if (!strcasecmp(n, "Softplus")) return gb_1(c, SC_OP_SOFTPLUS, x);
  if (!strcasecmp(n, "Softsign"))
    return gb_2(c, SC_OP_DIV, x, gb_2(c, SC_OP_ADD, gb_scalar(c, t, 1.0), gb_1(c, SC_OP_ABS, x)));
  if (!strcasecmp(n, "Affine"))
    return gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, a), gb_scalar(c, t, f->beta));
  if (!strcasecmp(n, "LeakyRelu"))
    return gb_where(c, gb_2(c, SC_OP_LESS, x, zero), gb_2(c, SC_OP_MUL, x, a), x);
  if (!strcasecmp(n, "ThresholdedRelu")) return gb_where(c, gb_2(c, SC_OP_GREATER, x, a), x, zero);
  if (!strcasecmp(n, "ScaledTanh"))
    return gb_2(c, SC_OP_MUL, a, gb_1(c, SC_OP_TANH, gb_2(c, SC_OP_MUL, x, gb_scalar(c, t, f->beta))));
  if (!strcasecmp(n, "HardSigmoid")) {
    int32_t y = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, x, a), gb_scalar(c, t, f->beta));
    return gb_2(c, SC_OP_MAX, zero, gb_2(c, SC_OP_MIN, gb_scalar(c, t, 1.0), y));
  }
  if (!strcasecmp(n, "Elu"))
    return gb_where(c, gb_2(c, SC_OP_LESS, x, zero),
                    gb_2(c, SC_OP_MUL, a, gb_2(c, SC_OP_SUB, gb_1(c, SC_OP_EXP, x),
                                                gb_scalar(c, t, 1.0))), x);
  sc_node_error(c->g, cx_node(c), SC_ERR_UNSUPPORTED, "activation '%s' is not supported", n);
  return -1;
}

typedef struct rnn_spec {
  int gates;               /* RNN 1, GRU 3 (z r h), LSTM 4 (i o f c) */
  int n_act;               /* activations per direction */
  int64_t hidden, dirs, layout, input_forget, lbr;
  bool reverse;            /* direction "reverse" (one direction, walked backwards) */
  double clip;
  bool has_clip;
  rnn_act f[2][3];         /* per direction */
} rnn_spec;

static sc_status rnn_read(sc_grad_ctx *c, rnn_spec *s) {
  sc_graph *g = c->g;
  const sc_node *n = cx_node(c);
  sc_op op = n->op;
  s->gates = op == SC_OP_RNN ? 1 : op == SC_OP_GRU ? 3 : 4;
  s->n_act = op == SC_OP_RNN ? 1 : op == SC_OP_GRU ? 2 : 3;
  static const char *const dirs[] = {"forward", "reverse", "bidirectional"};
  int dir = 0;
  sc_status st;
  if ((st = sc_read_attr_choice(g, n, "direction", "forward", dirs, 3, &dir)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "hidden_size", 0, &s->hidden)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "layout", 0, &s->layout)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "input_forget", 0, &s->input_forget)) != SC_OK ||
      (st = sc_read_attr_int(g, n, "linear_before_reset", 0, &s->lbr)) != SC_OK ||
      (st = sc_read_attr_float(g, n, "clip", 0.0, &s->clip)) != SC_OK)
    return st;
  s->has_clip = sc_node_attr(n, "clip") != NULL;
  s->dirs = dir == 2 ? 2 : 1;
  s->reverse = dir == 1;
  if (s->layout != 0 && s->layout != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "layout %lld is not 0 or 1", (long long)s->layout);
  if (s->has_clip && !(s->clip > 0))
    return sc_node_error(g, n, SC_ERR_INVALID, "clip must be positive");
  static const char *const dflt[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"},
                                         {"Sigmoid", "Tanh", "Tanh"}};
  const sc_attr *names = sc_node_attr(n, "activations");
  const double *al = NULL, *be = NULL;
  int64_t n_al = sc_attr_floats(g, n, "activation_alpha", &al);
  int64_t n_be = sc_attr_floats(g, n, "activation_beta", &be);
  int64_t want = s->n_act * s->dirs, ia = 0, ib = 0;
  if (names && (names->kind != SC_ATTR_STRINGS || names->n != want))
    return sc_node_error(g, n, SC_ERR_INVALID, "activations needs %lld names",
                         (long long)want);
  for (int64_t k = 0; k < want; k++) {
    rnn_act *f = &s->f[k / s->n_act][k % s->n_act];
    f->name = names ? names->strings[k] : dflt[s->gates == 1 ? 0 : s->gates == 3 ? 1 : 2]
                                              [k % s->n_act];
    /* alpha and beta: consumed in order by the functions that take them;
     * ONNX's operator defaults otherwise */
    bool ta = strcasecmp(f->name, "Sigmoid") && strcasecmp(f->name, "Tanh") &&
              strcasecmp(f->name, "Relu") && strcasecmp(f->name, "Softsign") &&
              strcasecmp(f->name, "Softplus");
    bool tb = !strcasecmp(f->name, "Affine") || !strcasecmp(f->name, "ScaledTanh") ||
              !strcasecmp(f->name, "HardSigmoid");
    f->alpha = !strcasecmp(f->name, "LeakyRelu") ? 0.01 : !strcasecmp(f->name, "HardSigmoid")
                                                              ? 0.2 : 1.0;
    f->beta = !strcasecmp(f->name, "HardSigmoid") ? 0.5 : !strcasecmp(f->name, "Affine")
                                                               ? 0.0 : 1.0;
    if (ta && ia < n_al) f->alpha = al[ia++];
    if (tb && ib < n_be) f->beta = be[ib++];
  }
  return SC_OK;
}

/* x[d] of a [D, ...] operand (rank drops by one). */
static int32_t pick(sc_grad_ctx *c, int32_t x, int64_t d, int64_t axis) {
  if (x < 0) return -1;
  return gb_op_i(c, SC_OP_GATHER, (int32_t[]){x, gb_scalar(c, SC_DTYPE_I64, (double)d)}, 2,
                 "axis", axis);
}

static int32_t clip_(sc_grad_ctx *c, const rnn_spec *s, int32_t x, sc_dtype t) {
  if (!s->has_clip || x < 0) return x;
  return cx_clip(c, x, t, -s->clip, s->clip);
}

/* One direction over all steps: ys[t] (each [B, H]) and the last H (and
 * C); reverse walks t from S-1 down. sequence_lens (lens, [B, 1] int64)
 * keeps H (and C) and writes zeros where t >= lens[b], so a reverse walk
 * starts each sequence at its own last element. */
static sc_status rnn_direction(sc_grad_ctx *c, const rnn_spec *s, int64_t d, bool reverse,
                               int32_t xs, int32_t lens, int32_t *ys, int32_t *h_out,
                               int32_t *c_out) {
  sc_op op = cx_node(c)->op;
  sc_dtype t = cx_val(c, xs)->dtype;
  int64_t S = cx_val(c, xs)->dims[0], B = cx_val(c, xs)->dims[1], H = s->hidden, G = s->gates;
  int32_t w = cx_in(c, 1), r = cx_in(c, 2), bias = cx_in(c, 3), h0 = cx_in(c, 5);
  int32_t c0 = op == SC_OP_LSTM ? cx_in(c, 6) : -1, p = op == SC_OP_LSTM ? cx_in(c, 7) : -1;
  const rnn_act *f = s->f[d];
  int32_t wt = gb_swap_last(c, pick(c, w, d, 0)); /* [I, G·H] */
  int32_t rt = gb_swap_last(c, pick(c, r, d, 0)); /* [H, G·H] */
  int32_t xw = gb_2(c, SC_OP_MATMUL, xs, wt);    /* [S, B, G·H]: every step's input part */
  int32_t rb = -1;
  if (bias >= 0) {
    int32_t bd = pick(c, bias, d, 0);
    xw = gb_2(c, SC_OP_ADD, xw, cx_last_slice(c, bd, 0, G * H));
    rb = cx_last_slice(c, bd, G * H, 2 * G * H);
  }
  int64_t hb[2] = {B, H};
  int32_t zero = gb_expand(c, gb_scalar(c, t, 0.0), 2, hb);
  int32_t hs = h0 >= 0 ? pick(c, h0, d, s->layout ? 1 : 0) : zero;
  int32_t cs = c0 >= 0 ? pick(c, c0, d, s->layout ? 1 : 0) : zero;
  int32_t pd = p >= 0 ? pick(c, p, d, 0) : -1;
  int32_t rth = op == SC_OP_GRU && !s->lbr ? cx_last_slice(c, rt, 2 * H, 3 * H) : -1;
  for (int64_t k = 0; k < S; k++) {
    int64_t tt = reverse ? S - 1 - k : k;
    int32_t xt = pick(c, xw, tt, 0); /* [B, G·H] */
    int32_t hr = gb_2(c, SC_OP_MATMUL, hs, rt);
    int32_t h = -1, cc = -1;
#define GATE(v, j) cx_last_slice(c, (v), (j) * H, ((j) + 1) * H)
    if (op == SC_OP_RNN) {
      int32_t a = gb_2(c, SC_OP_ADD, xt, hr);
      if (rb >= 0) a = gb_2(c, SC_OP_ADD, a, rb);
      h = act(c, &f[0], clip_(c, s, a, t), t);
    } else if (op == SC_OP_GRU) { /* gates z, r, h */
      int32_t rbz = rb >= 0 ? GATE(rb, 0) : -1, rbr = rb >= 0 ? GATE(rb, 1) : -1;
      int32_t rbh = rb >= 0 ? GATE(rb, 2) : -1;
      int32_t az = gb_2(c, SC_OP_ADD, GATE(xt, 0), GATE(hr, 0));
      int32_t ar = gb_2(c, SC_OP_ADD, GATE(xt, 1), GATE(hr, 1));
      if (rb >= 0) az = gb_2(c, SC_OP_ADD, az, rbz), ar = gb_2(c, SC_OP_ADD, ar, rbr);
      int32_t z = act(c, &f[0], clip_(c, s, az, t), t), rr = act(c, &f[0], clip_(c, s, ar, t), t);
      int32_t inner;
      if (s->lbr) {
        inner = GATE(hr, 2);
        if (rb >= 0) inner = gb_2(c, SC_OP_ADD, inner, rbh);
        inner = gb_2(c, SC_OP_MUL, rr, inner);
      } else {
        inner = gb_2(c, SC_OP_MATMUL, gb_2(c, SC_OP_MUL, rr, hs), rth);
        if (rb >= 0) inner = gb_2(c, SC_OP_ADD, inner, rbh);
      }
      int32_t hh = act(c, &f[1], clip_(c, s, gb_2(c, SC_OP_ADD, GATE(xt, 2), inner), t), t);
      /* (1 - z) hh + z H = hh + z (H - hh) */
      h = gb_2(c, SC_OP_ADD, hh, gb_2(c, SC_OP_MUL, z, gb_2(c, SC_OP_SUB, hs, hh)));
    } else { /* LSTM: gates i, o, f, c; peepholes i, o, f */
      int32_t a = gb_2(c, SC_OP_ADD, xt, hr);
      if (rb >= 0) a = gb_2(c, SC_OP_ADD, a, rb);
      int32_t ai = GATE(a, 0), ao = GATE(a, 1), af = GATE(a, 2), ac = GATE(a, 3);
      if (pd >= 0) {
        ai = gb_2(c, SC_OP_ADD, ai, gb_2(c, SC_OP_MUL, GATE(pd, 0), cs));
        af = gb_2(c, SC_OP_ADD, af, gb_2(c, SC_OP_MUL, GATE(pd, 2), cs));
      }
      int32_t ig = act(c, &f[0], clip_(c, s, ai, t), t);
      int32_t fg = s->input_forget ? gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0), ig)
                                   : act(c, &f[0], clip_(c, s, af, t), t);
      int32_t ct = act(c, &f[1], clip_(c, s, ac, t), t);
      cc = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, fg, cs), gb_2(c, SC_OP_MUL, ig, ct));
      if (pd >= 0) ao = gb_2(c, SC_OP_ADD, ao, gb_2(c, SC_OP_MUL, GATE(pd, 1), cc));
      int32_t og = act(c, &f[0], clip_(c, s, ao, t), t);
      h = gb_2(c, SC_OP_MUL, og, act(c, &f[2], cc, t));
    }
#undef GATE
    if (h < 0) return cx_built(c);
    if (lens >= 0) { /* steps past a sequence's end keep the state, output 0 */
      int32_t live = gb_2(c, SC_OP_LESS, gb_scalar(c, SC_DTYPE_I64, (double)tt), lens);
      ys[tt] = gb_where(c, live, h, zero);
      h = gb_where(c, live, h, hs);
      if (cc >= 0) cc = gb_where(c, live, cc, cs);
    } else {
      ys[tt] = h;
    }
    hs = h;
    if (cc >= 0) cs = cc;
  }
  *h_out = hs;
  *c_out = cs;
  return hs < 0 || cs < 0 ? cx_built(c) : SC_OK;
}

sc_status cx_expand_rnn(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  rnn_spec s;
  sc_status st = rnn_read(c, &s);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0), w = cx_in(c, 1), lens = cx_in(c, 4);
  const sc_value x0 = *cx_val(c, x), w0 = *cx_val(c, w);
  if (x0.rank != 3 || w0.rank != 3 || !sc_dtype_is_float(x0.dtype))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "X and W must be 3-D float tensors");
  if (!s.hidden) s.hidden = w0.dims[1] / s.gates;
  if (w0.dims[0] != s.dirs || w0.dims[1] != s.gates * s.hidden)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "W is [%lld, %lld, ...], expected [%lld, %lld, ...]",
                         (long long)w0.dims[0], (long long)w0.dims[1], (long long)s.dirs,
                         (long long)(s.gates * s.hidden));
  /* [S, B, I] */
  int32_t xs = s.layout ? gb_transpose(c, x, (int64_t[]){1, 0, 2}, 3) : x;
  int64_t S = cx_val(c, xs)->dims[0], B = cx_val(c, xs)->dims[1];
  if (S > 65536)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "%lld steps: the expansion unrolls every step "
                         "(at most 65536)", (long long)S);
  if (lens >= 0)
    lens = gb_reshape(c, gb_cast(c, lens, SC_DTYPE_I64), 2, (int64_t[]){B, 1});
  int32_t *ys = sc_arena_array(&g->arena, (size_t)(S ? S : 1) * 2, sizeof *ys);
  int32_t hl[2], cl[2], yd[2];
  if (!ys) return cx_built(c);
  for (int64_t d = 0; d < s.dirs; d++) {
    bool reverse = d == 1 || s.reverse;
    if ((st = rnn_direction(c, &s, d, reverse, xs, lens, ys + d * S, &hl[d], &cl[d])) != SC_OK)
      return st;
    /* Y of this direction: [S, 1, B, H] */
    int32_t *parts = ys + d * S;
    for (int64_t k = 0; k < S; k++) parts[k] = cx_unsqueeze(c, parts[k], 0, 2);
    yd[d] = S == 1 ? parts[0] : gb_op_i(c, SC_OP_CONCAT, parts, (int32_t)S, "axis", 0);
  }
  int32_t y = s.dirs == 1 ? yd[0] : gb_op_i(c, SC_OP_CONCAT, yd, 2, "axis", 1);
  int32_t yh = s.dirs == 1 ? cx_unsqueeze(c, hl[0], 0, 1)
                           : gb_op_i(c, SC_OP_CONCAT, (int32_t[]){cx_unsqueeze(c, hl[0], 0, 1),
                                                                  cx_unsqueeze(c, hl[1], 0, 1)},
                                     2, "axis", 0);
  int32_t yc = s.dirs == 1 ? cx_unsqueeze(c, cl[0], 0, 1)
                           : gb_op_i(c, SC_OP_CONCAT, (int32_t[]){cx_unsqueeze(c, cl[0], 0, 1),
                                                                  cx_unsqueeze(c, cl[1], 0, 1)},
                                     2, "axis", 0);
  if (s.layout) {
    y = gb_transpose(c, y, (int64_t[]){2, 0, 1, 3}, 4);
    yh = gb_transpose(c, yh, (int64_t[]){1, 0, 2}, 3);
    yc = gb_transpose(c, yc, (int64_t[]){1, 0, 2}, 3);
  }
  out[0] = y;
  out[1] = yh;
  out[2] = cx_node(c)->op == SC_OP_LSTM ? yc : -1;
  return y < 0 || yh < 0 || yc < 0 ? cx_built(c) : SC_OK;
}

