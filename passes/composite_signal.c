/* composite_signal.c — DFT (opsets 17, 20) and STFT (17) as composite ops:
 * one MatMul of the signal by a constant matrix of cosines and sines (the
 * semantics are numpy.fft's, as onnx's reference uses them).
 *
 * DFT: x is [..., n, ...][c] with c = 1 (real) or 2 (real, imaginary) and
 * the transform along `axis` (opset 17: an attribute, default 1; opset 20:
 * input 2, default −2). With L = dft_length (input 1; default n, or 2(n − 1)
 * for the inverse one-sided case), the signal is cut to or zero-padded to L:
 *   forward:  y[k] = Σt x[t] e^{−2πi kt/L}, k < L (onesided: k ≤ L/2);
 *   inverse:  x[t] = 1/L Σk y[k] e^{+2πi kt/L};
 *   inverse onesided (numpy's irfft): the spectrum's first L/2 + 1 bins
 *     extended by conjugate symmetry, a real output of length L.
 * The signal's axis is moved last and its real and imaginary parts joined
 * ([.., 2n]); the matrix W [2n, 2K] = [[C, −S], [S, C]] (signs by direction)
 * gives [re | im] of the K outputs in one MatMul; the result goes back to
 * [..., K, ...][2] (or [1] for irfft).
 *
 * STFT: frames of frame_length samples every frame_step (one Gather of a
 * constant index [frames, frame_length]), times the window, then the DFT of
 * each frame along its samples, onesided by default: [B, frames, K, 2]. */
#include <math.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

/* The DFT of x ([.., n at axis, ..][c], c = 1 or 2) of length L along axis
 * (0 <= axis < rank - 1) into out. */
static sc_status dft(sc_grad_ctx *c, int32_t x, int32_t axis, int64_t L, bool inverse,
                     bool onesided, int32_t *out) {
  sc_graph *g = c->g;
  const sc_value xv = *cx_val(c, x); /* a copy: the builders may move the values */
  int32_t r = xv.rank;
  int64_t cplx = xv.dims[r - 1], n = xv.dims[axis];
  if (r < 2 || (cplx != 1 && cplx != 2) || axis < 0 || axis >= r - 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "the input must be [..., signal, 1 or 2] with the axis a signal axis");
  if (L < 1 || L > (1 << 16))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "dft_length %lld is not in [1, 65536]",
                         (long long)L);
  bool irfft = inverse && onesided;
  if (onesided && !inverse && cplx != 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "a onesided forward DFT takes a real input");
  int64_t K = irfft ? L : onesided ? L / 2 + 1 : L; /* outputs */
  int64_t m = irfft ? (n < L / 2 + 1 ? n : L / 2 + 1) : (n < L ? n : L); /* inputs used */
  int64_t oc = irfft ? 1 : 2;                                       /* output parts */
  /* the signal: axis last, parts joined: [P.., cplx·m] */
  int64_t perm[SC_MAX_RANK];
  int32_t k = 0;
  for (int32_t i = 0; i < r - 1; i++)
    if (i != axis) perm[k++] = i;
  perm[k++] = r - 1;
  perm[k++] = axis;
  int32_t xs = m < n ? cx_axis_slice(c, x, axis, 0, m, 1) : x;
  int32_t xt = gb_transpose(c, xs, perm, r); /* [P.., cplx, m] */
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < r - 2; i++) d[i] = xv.dims[perm[i]];
  d[r - 2] = cplx * m;
  xt = gb_reshape(c, xt, r - 1, d);
  /* W: rows t (re, then im), columns k (re, then im) */
  int64_t wd[2] = {cplx * m, oc * K};
  int32_t w;
  void *wp = cx_const_data(c, "dft_matrix", xv.dtype, 2, wd, &w);
  if (!wp) return cx_built(c);
  double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / (double)L : 1.0;
  for (int64_t t = 0; t < m; t++)
    for (int64_t q = 0; q < K; q++) {
      /* irfft: row t is the bin, column q the sample; a bin other than 0
       * and L/2 stands for itself and its conjugate */
      int64_t kk = irfft ? t : q, tt = irfft ? q : t;
      double f = irfft && t != 0 && 2 * t != L ? 2.0 : 1.0;
      double a = 2.0 * M_PI * (double)((kk * tt) % L) / (double)L;
      double cs = cos(a) * scale * f, sn = sign * sin(a) * scale * f;
      /* (re + i im)(cs + i sn) = re cs − im sn + i (re sn + im cs) */
      sc_store_f64(xv.dtype, wp, t * wd[1] + q, cs);
      if (!irfft) sc_store_f64(xv.dtype, wp, t * wd[1] + K + q, sn);
      if (cplx == 2) {
        sc_store_f64(xv.dtype, wp, (m + t) * wd[1] + q, -sn);
        if (!irfft) sc_store_f64(xv.dtype, wp, (m + t) * wd[1] + K + q, cs);
      }
    }
  int32_t y = gb_2(c, SC_OP_MATMUL, xt, w); /* [P.., oc·K] */
  d[r - 2] = oc, d[r - 1] = K;
  y = gb_reshape(c, y, r, d); /* [P.., oc, K] */
  /* back: P before axis, K, P after, oc */
  int64_t back[SC_MAX_RANK];
  for (int32_t i = 0, p = 0; i < r - 1; i++) back[i] = i == axis ? r - 1 : p++;
  back[r - 1] = r - 2;
  out[0] = gb_transpose(c, y, back, r);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* An optional scalar integer input, or dflt. */
static sc_status scalar_in(sc_grad_ctx *c, int32_t i, int64_t dflt, int64_t *v) {
  *v = dflt;
  if (cx_in(c, i) < 0) return SC_OK;
  int64_t buf[2], count;
  sc_status st = sc_input_ints(c->g, cx_node(c), i, buf, 1, &count);
  if (st != SC_OK) return st;
  if (count != 1)
    return sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "input %d must be a scalar", (int)i);
  *v = buf[0];
  return SC_OK;
}

sc_status cx_expand_dft(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), r = cx_val(c, x)->rank;
  int64_t inverse, onesided, axis, L, n;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "inverse", 0, &inverse)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "onesided", 0, &onesided)) != SC_OK)
    return st;
  if (g->opset < 20) st = sc_read_attr_int(g, cx_node(c), "axis", 1, &axis);
  else st = scalar_in(c, 2, -2, &axis);
  if (st != SC_OK) return st;
  if (axis < -r || axis >= r - 1 || (axis < 0 && axis > -2))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "axis %lld is not a signal axis",
                         (long long)axis);
  if (axis < 0) axis += r;
  n = cx_val(c, x)->dims[axis];
  if ((st = scalar_in(c, 1, inverse && onesided ? 2 * (n - 1) : n, &L)) != SC_OK) return st;
  return dft(c, x, (int32_t)axis, L, inverse != 0, onesided != 0, out);
}

sc_status cx_expand_stft(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t x = cx_in(c, 0), win = cx_in(c, 2);
  const sc_value xv = *cx_val(c, x);
  int64_t onesided, step, len;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "onesided", 1, &onesided)) != SC_OK ||
      (st = scalar_in(c, 1, 0, &step)) != SC_OK)
    return st;
  if (xv.rank != 3 || (xv.dims[2] != 1 && xv.dims[2] != 2))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the signal must be [B, length, 1 or 2]");
  int64_t wl = win >= 0 ? cx_val(c, win)->dims[0] : xv.dims[1];
  if (win >= 0 && cx_val(c, win)->rank != 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the window must be 1-D");
  if ((st = scalar_in(c, 3, wl, &len)) != SC_OK) return st;
  if (win >= 0 && len != wl)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "frame_length %lld differs from the window's %lld", (long long)len,
                         (long long)wl);
  if (step < 1 || len < 1 || len > xv.dims[1])
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "frame_step %lld, frame_length %lld for a signal of %lld", (long long)step,
                         (long long)len, (long long)xv.dims[1]);
  if (onesided && xv.dims[2] == 2) onesided = 0; /* complex: the full spectrum */
  int64_t frames = (xv.dims[1] - len) / step + 1;
  int64_t id[2] = {frames, len};
  int32_t idx;
  void *ip = cx_const_data(c, "stft_frames", SC_DTYPE_I64, 2, id, &idx);
  if (!ip) return cx_built(c);
  for (int64_t f = 0; f < frames; f++)
    for (int64_t s = 0; s < len; s++) ((int64_t *)ip)[f * len + s] = f * step + s;
  int32_t fr = gb_op_i(c, SC_OP_GATHER, (int32_t[]){x, idx}, 2, "axis", 1); /* [B, F, len, c] */
  if (win >= 0)
    fr = gb_2(c, SC_OP_MUL, fr,
              gb_reshape(c, gb_cast(c, win, xv.dtype), 4, (int64_t[]){1, 1, len, 1}));
  if (fr < 0) return cx_built(c);
  return dft(c, fr, 2, len, false, onesided != 0, out);
}
