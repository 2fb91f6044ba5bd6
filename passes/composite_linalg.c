/* composite_linalg.c — the expansions of ConvTranspose, TopK and Einsum,
 * composite ops of the IR (passes/composite.c says how expansions work).
 *
 * ConvTranspose: a Conv (stride 1, the given dilations and group) over X
 * with stride − 1 zeros between its elements, cropped where a pad exceeds
 * the dilated kernel, padded by the rest (and output_padding, or what
 * output_shape asks, at the end); the weights [C, M/g, k…] regrouped to [M,
 * C/g, k…] and flipped in space (constant weights fold away); auto_pad
 * SAME splits the padding as onnx's reference.
 *
 * TopK: k rounds, each taking the first untaken element equal to the
 * largest (smallest) untaken value, so ties come out lower index first;
 * always sorted; k a constant (input, or the attribute before opset 10);
 * O(k·n) per row.
 *
 * Einsum: per operand, its repeated labels' diagonals and the sums of
 * labels no one else needs; then each further operand joins the running
 * product as one batched MatMul ([batch, m, k] @ [batch, k, n], the labels
 * grouped by where they occur); the output's order by a Transpose; "..."
 * broadcast as numpy does; an implicit output is the ellipsis and the
 * labels used once, in alphabetical order. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"

/* ---- ConvTranspose ---- */

/* A Conv with stride 1 over x's zeros-dilated copy: x gets (stride - 1)
 * zeros between neighbours, is cropped where a pad is negative, and the
 * Conv pads it by k' - 1 - pad (k' the dilated kernel) at each side (plus
 * output_padding at the end); the weights [C, M/g, k...] become [M, C/g,
 * k...] per group, flipped in space (constant weights fold away). */
sc_status cx_expand_conv_transpose(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_node *n = cx_node(c);
  int32_t x = cx_in(c, 0), w = cx_in(c, 1), b = cx_in(c, 2);
  const sc_value x0 = *cx_val(c, x), w0 = *cx_val(c, w);
  int32_t r = x0.rank, ns = r - 2;
  if (r < 3 || r > 5 || w0.rank != r)
    return sc_node_error(g, n, SC_ERR_INVALID, "X and W must have one rank, 3 to 5");
  int64_t group;
  sc_status st = sc_read_attr_int(g, n, "group", 1, &group);
  if (st != SC_OK) return st;
  int64_t cin = x0.dims[1], mg = w0.dims[1];
  if (group < 1 || cin % group || w0.dims[0] != cin)
    return sc_node_error(g, n, SC_ERR_INVALID, "W [%lld, ...] does not match %lld input "
                         "channels in %lld groups", (long long)w0.dims[0], (long long)cin,
                         (long long)group);
  int64_t strides[3], dil[3], opad[3], pads[6], oshape[3], k[3];
  bool has_oshape = false;
  const int64_t *v;
  struct { const char *name; int64_t *dst; int64_t n, dflt; } lists[] = {
      {"strides", strides, ns, 1}, {"dilations", dil, ns, 1}, {"output_padding", opad, ns, 0},
      {"pads", pads, 2 * ns, 0}, {"kernel_shape", k, ns, -1}};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    int64_t cnt = sc_attr_ints(g, n, lists[i].name, &v);
    if (cnt >= 0 && cnt != lists[i].n)
      return sc_node_error(g, n, SC_ERR_INVALID, "%s has %lld values, expected %lld",
                           lists[i].name, (long long)cnt, (long long)lists[i].n);
    for (int64_t j = 0; j < lists[i].n; j++)
      lists[i].dst[j] = cnt >= 0 ? v[j] : lists[i].dflt == -1 ? w0.dims[2 + j] : lists[i].dflt;
  }
  bool has_pads = sc_node_attr(n, "pads") != NULL;
  int64_t cnt = sc_attr_ints(g, n, "output_shape", &v);
  if (cnt >= 0) { /* spatial dims, or the whole shape */
    if (cnt != ns && cnt != r)
      return sc_node_error(g, n, SC_ERR_INVALID, "output_shape has %lld values",
                           (long long)cnt);
    for (int32_t j = 0; j < ns; j++) oshape[j] = v[cnt - ns + j];
    has_oshape = true;
  }
  const char *ap;
  if ((st = sc_read_attr_string(g, n, "auto_pad", "NOTSET", &ap)) != SC_OK) return st;
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  for (int32_t j = 0; j < ns; j++) {
    if (strides[j] < 1 || dil[j] < 1 || k[j] != w0.dims[2 + j] || opad[j] < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "strides, dilations, kernel_shape or "
                           "output_padding of spatial dim %d", (int)j);
    int64_t full = strides[j] * (x0.dims[2 + j] - 1) + opad[j] + (k[j] - 1) * dil[j] + 1;
    if (!has_pads && same) { /* onnx's reference: the total padding split */
      int64_t want = has_oshape ? oshape[j] : x0.dims[2 + j] * strides[j];
      int64_t total = full - want;
      bool upper = !strcmp(ap, "SAME_UPPER");
      pads[j] = upper ? total / 2 : total - total / 2;
      pads[ns + j] = total - pads[j];
    } else if (!has_pads && !strcmp(ap, "VALID")) {
      pads[j] = pads[ns + j] = 0;
    }
    /* output_shape with explicit or no pads: the output is cut or extended
     * at the end */
    if (has_oshape && !same) pads[ns + j] = full - pads[j] - oshape[j];
  }
  /* zeros between the input's elements, along each strided dim: [.., L, ..]
   * -> [.., L, 1, ..] beside zeros [.., L, s-1, ..] -> [.., L·s, ..], cut to
   * (L-1)·s + 1 */
  int32_t xs = x;
  for (int32_t j = 0; j < ns && xs >= 0; j++) {
    if (strides[j] == 1) continue;
    int64_t s = strides[j], len = cx_val(c, xs)->dims[2 + j], d[SC_MAX_RANK + 1];
    int32_t col = cx_unsqueeze(c, xs, 3 + j, 1);
    if (col < 0) return cx_built(c);
    memcpy(d, cx_val(c, col)->dims, (size_t)(r + 1) * sizeof *d);
    d[3 + j] = s - 1;
    int32_t z = gb_expand(c, gb_scalar(c, x0.dtype, 0.0), r + 1, d);
    int32_t both = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){col, z}, 2, "axis", 3 + j);
    memcpy(d, cx_val(c, xs)->dims, (size_t)r * sizeof *d);
    d[2 + j] = len * s;
    xs = cx_axis_slice(c, gb_reshape(c, both, r, d), 2 + j, 0, (len - 1) * s + 1, 1);
  }
  if (xs < 0) return cx_built(c);
  /* the Conv's pads: k' - 1 - pad, cropping first where that is negative */
  int64_t cp[6];
  for (int32_t j = 0; j < ns; j++) {
    int64_t kk = (k[j] - 1) * dil[j], lo = kk - pads[j], hi = kk - pads[ns + j] + opad[j];
    int64_t len = cx_val(c, xs)->dims[2 + j];
    if (lo < 0 || hi < 0) {
      xs = cx_axis_slice(c, xs, 2 + j, lo < 0 ? -lo : 0, hi < 0 ? len + hi : len, 1);
      if (xs < 0) return cx_built(c);
    }
    cp[j] = lo > 0 ? lo : 0;
    cp[ns + j] = hi > 0 ? hi : 0;
  }
  /* weights: [C, M/g, k...] -> [g, C/g, M/g, k...] -> [g, M/g, C/g, k...] -> [M, C/g, k...],
   * flipped along every spatial axis */
  int64_t wd[SC_MAX_RANK + 1], perm[SC_MAX_RANK + 1];
  wd[0] = group;
  wd[1] = cin / group;
  wd[2] = mg;
  for (int32_t j = 0; j < ns; j++) wd[3 + j] = k[j];
  for (int32_t j = 0; j < r + 1; j++) perm[j] = j;
  perm[1] = 2;
  perm[2] = 1;
  int32_t wt = gb_transpose(c, gb_reshape(c, w, r + 1, wd), perm, r + 1);
  int64_t wn[SC_MAX_RANK];
  wn[0] = group * mg;
  wn[1] = cin / group;
  for (int32_t j = 0; j < ns; j++) wn[2 + j] = k[j];
  wt = gb_reshape(c, wt, r, wn);
  for (int32_t j = 0; j < ns; j++) wt = cx_axis_slice(c, wt, 2 + j, -1, INT64_MIN, -1);
  int32_t in[3] = {xs, wt, b}, node = -1;
  if (xs < 0 || wt < 0) return cx_built(c);
  int32_t y = gb_begin(c, SC_OP_CONV, in, b >= 0 ? 3 : 2, &node);
  sc_attr *ga = y < 0 ? NULL : sc_node_add_attr(g, node, "group", SC_ATTR_INT);
  if (!ga) return cx_built(c);
  ga->i = group; /* before more attributes move the array */
  if (!gb_ints_attr(c, node, "pads", cp, 2 * ns) || !gb_ints_attr(c, node, "dilations", dil, ns))
    return cx_built(c);
  out[0] = gb_end(c, node, y);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- Col2Im ---- */

/* Col2Im(input [N, C·K, L], image_shape, block_shape; dilations, pads,
 * strides) -> [N, C, image...]: every column's K values added into the
 * image at their block positions — a ConvTranspose (expanded as above) of
 * the input viewed as [N, C·K, blocks...], in C groups, with one-hot
 * weights [C·K, 1, block...] (column k of a group lands at kernel position
 * k), its output_padding making up what the strides leave uncovered at the
 * end. image_shape and block_shape must be constants. */
sc_status cx_expand_col2im(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t img[3], blk[3], ni = 0, nb = 0;
  sc_status st = sc_input_ints(g, cx_node(c), 1, img, 3, &ni);
  if (st == SC_OK) st = sc_input_ints(g, cx_node(c), 2, blk, 3, &nb);
  if (st != SC_OK) return st;
  int32_t x = cx_in(c, 0);
  const sc_value x0 = *cx_val(c, x);
  int32_t ns = (int32_t)ni;
  if (ns < 1 || nb != ni || x0.rank != 3)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "Col2Im needs input [N, C*K, L] and "
                         "image_shape and block_shape of 1 to 3 equal lengths");
  int64_t strides[3], dil[3], pads[6], opad[3], k = 1, blocks = 1, bd[3];
  const int64_t *v;
  struct { const char *name; int64_t *dst; int64_t n, dflt; } lists[] = {
      {"strides", strides, ns, 1}, {"dilations", dil, ns, 1}, {"pads", pads, 2 * ns, 0}};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    int64_t cnt = sc_attr_ints(g, cx_node(c), lists[i].name, &v);
    if (cnt >= 0 && cnt != lists[i].n)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "%s has %lld values, expected %lld",
                           lists[i].name, (long long)cnt, (long long)lists[i].n);
    for (int64_t j = 0; j < lists[i].n; j++) lists[i].dst[j] = cnt >= 0 ? v[j] : lists[i].dflt;
  }
  for (int32_t j = 0; j < ns; j++) {
    int64_t span = img[j] + pads[j] + pads[ns + j] - dil[j] * (blk[j] - 1) - 1;
    if (blk[j] < 1 || strides[j] < 1 || dil[j] < 1 || span < 0)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "block, strides or dilations of "
                           "spatial dim %d do not fit the image", (int)j);
    bd[j] = span / strides[j] + 1;
    opad[j] = span % strides[j];
    k *= blk[j];
    blocks *= bd[j];
  }
  if (x0.dims[1] % k || x0.dims[2] != blocks)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "input [%lld, %lld, %lld] is not [N, "
                         "C*%lld, %lld]", (long long)x0.dims[0], (long long)x0.dims[1],
                         (long long)x0.dims[2], (long long)k, (long long)blocks);
  int64_t ch = x0.dims[1] / k, xd[SC_MAX_RANK] = {x0.dims[0], x0.dims[1]}, wd[SC_MAX_RANK];
  wd[0] = x0.dims[1];
  wd[1] = 1;
  for (int32_t j = 0; j < ns; j++) xd[2 + j] = bd[j], wd[2 + j] = blk[j];
  /* one-hot weights: W[c*K + q, 0, q's position] = 1 */
  int32_t w;
  void *wb = cx_const_data(c, "col2im_weights", x0.dtype, 2 + ns, wd, &w);
  if (!wb) return cx_built(c);
  for (int64_t q = 0; q < x0.dims[1]; q++) sc_store_f64(x0.dtype, wb, q * k + q % k, 1.0);
  int32_t in[2] = {gb_reshape(c, x, 2 + ns, xd), w}, node = -1;
  int32_t y = in[0] < 0 ? -1 : gb_begin(c, SC_OP_CONV_TRANSPOSE, in, 2, &node);
  sc_attr *ga = y < 0 ? NULL : sc_node_add_attr(g, node, "group", SC_ATTR_INT);
  if (!ga) return cx_built(c);
  ga->i = ch; /* before more attributes move the array */
  if (!gb_ints_attr(c, node, "strides", strides, ns) ||
      !gb_ints_attr(c, node, "dilations", dil, ns) || !gb_ints_attr(c, node, "pads", pads, 2 * ns) ||
      !gb_ints_attr(c, node, "output_padding", opad, ns))
    return cx_built(c);
  out[0] = cx_expand_nested(c, node, cx_expand_conv_transpose);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- TopK ---- */

/* k rounds, each taking the first not-yet-taken element equal to the
 * largest (smallest) of those left: m = max over the untaken, then the
 * first untaken index holding m (an ArgMax over a 0/1 mask). Exact for
 * ties (lower index first) and any value; O(k n) per row. Outputs: the
 * values gathered at the indices. */
sc_status cx_expand_topk(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int64_t axis, largest, kv[1], nk = 0;
  sc_status st;
  if ((st = sc_read_attr_int(g, cx_node(c), "axis", -1, &axis)) != SC_OK ||
      (st = sc_read_attr_int(g, cx_node(c), "largest", 1, &largest)) != SC_OK)
    return st;
  if (cx_in(c, 1) >= 0) {
    if ((st = sc_input_ints(g, cx_node(c), 1, kv, 1, &nk)) != SC_OK) return st;
  } else { /* before opset 10: the k attribute */
    if ((st = sc_read_attr_int(g, cx_node(c), "k", -1, kv)) != SC_OK) return st;
    nk = 1;
  }
  int32_t x = cx_in(c, 0);
  const sc_value x0 = *cx_val(c, x);
  if (x0.rank < 1) return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "X must have rank >= 1");
  if (axis < -x0.rank || axis >= x0.rank)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "axis %lld for rank %d", (long long)axis,
                         x0.rank);
  if (axis < 0) axis += x0.rank;
  int64_t len = x0.dims[axis], k = kv[0];
  if (nk != 1 || k < 0 || k > len)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "k must be one value in 0..%lld",
                         (long long)len);
  if (k > 4096)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "k %lld: the expansion takes one round per "
                         "element (at most 4096)", (long long)k);
  if (k == 0)
    return sc_node_error(g, cx_node(c), SC_ERR_UNSUPPORTED, "k = 0 (empty outputs)");
  /* the taken elements read as the row's smallest (largest) value, which
   * is no greater (less) than any untaken one: no sentinel of the dtype */
  int32_t fill = gb_reduce(c, largest ? SC_OP_REDUCE_MIN : SC_OP_REDUCE_MAX, x,
                           (int64_t[]){axis}, 1, true);
  int32_t pos = cx_iota(c, len, x0.rank, (int32_t)axis), taken = -1, *idx;
  idx = sc_arena_array(&g->arena, (size_t)k, sizeof *idx);
  if (!idx || pos < 0) return cx_built(c);
  for (int64_t r = 0; r < k; r++) {
    int32_t left = taken < 0 ? x : gb_where(c, taken, fill, x);
    int32_t m = gb_reduce(c, largest ? SC_OP_REDUCE_MAX : SC_OP_REDUCE_MIN, left,
                          (int64_t[]){axis}, 1, true);
    int32_t hit = gb_2(c, SC_OP_EQUAL, x, m);
    if (taken >= 0) hit = gb_2(c, SC_OP_AND, hit, gb_1(c, SC_OP_NOT, taken));
    idx[r] = cx_argmax_keep(c, gb_cast(c, hit, SC_DTYPE_I32), axis);
    int32_t now = gb_2(c, SC_OP_EQUAL, pos, idx[r]);
    taken = taken < 0 ? now : gb_2(c, SC_OP_OR, taken, now);
    if (taken < 0) return cx_built(c);
  }
  int32_t ind = k == 1 ? idx[0] : gb_op_i(c, SC_OP_CONCAT, idx, (int32_t)k, "axis", axis);
  out[0] = gb_op_i(c, SC_OP_GATHER_ELEMENTS, (int32_t[]){x, ind}, 2, "axis", axis);
  out[1] = ind;
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

/* ---- Einsum ---- */

enum { EIN_MAX_IN = 8, EIN_ELL = 52 }; /* labels: a-z 0..25, A-Z 26..51, "..." dims 52.. */

typedef struct ein_term {
  int32_t n;                /* labels, one per axis */
  int8_t l[SC_MAX_RANK];
} ein_term;

/* One term of the equation ("bij", "...ii", ""), its ellipsis expanded to
 * `rank` axes labelled EIN_ELL, EIN_ELL + 1, ... (the caller right-aligns
 * them once every operand's count is known, as numpy broadcasts); rank <
 * 0: the output's, whose ellipsis spans *ell labels. *ell becomes the
 * largest ellipsis of the operands. */
static bool ein_parse(const char **p, int32_t rank, int32_t *ell, ein_term *t) {
  int32_t letters = 0, at = -1;
  int8_t raw[SC_MAX_RANK + 1];
  for (;;) {
    char ch = **p;
    if (ch == ' ') { (*p)++; continue; }
    if (ch == '.') {
      if (at >= 0 || strncmp(*p, "...", 3) != 0) return false;
      at = letters;
      *p += 3;
      continue;
    }
    int8_t id = ch >= 'a' && ch <= 'z' ? (int8_t)(ch - 'a') : ch >= 'A' && ch <= 'Z'
                                                                ? (int8_t)(26 + ch - 'A') : -1;
    if (id < 0) break;
    if (letters >= SC_MAX_RANK) return false;
    raw[letters++] = id;
    (*p)++;
  }
  int32_t e = at < 0 ? 0 : rank >= 0 ? rank - letters : *ell;
  if (e < 0 || (rank >= 0 && at < 0 && letters != rank) || letters + e > SC_MAX_RANK)
    return false;
  if (rank >= 0 && e > *ell) *ell = e;
  t->n = 0;
  for (int32_t i = 0; i <= letters; i++) {
    if (i == at)
      for (int32_t k = 0; k < e; k++) t->l[t->n++] = (int8_t)(EIN_ELL + k);
    if (i < letters) t->l[t->n++] = raw[i];
  }
  return true;
}

static int32_t ein_find(const ein_term *t, int8_t l) {
  for (int32_t i = 0; i < t->n; i++)
    if (t->l[i] == l) return i;
  return -1;
}

/* x's term without repeated labels: each repeat's diagonal (x times an
 * identity over the two axes, summed over the second). */
static int32_t ein_diagonal(sc_grad_ctx *c, int32_t x, ein_term *t) {
  for (int32_t q = 1; q < t->n && x >= 0; q++) {
    int32_t p = -1;
    for (int32_t i = 0; i < q; i++)
      if (t->l[i] == t->l[q]) p = i;
    if (p < 0) continue;
    int64_t n = cx_val(c, x)->dims[p], d[SC_MAX_RANK];
    if (cx_val(c, x)->dims[q] != n) {
      sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "a repeated label spans sizes %lld and "
                    "%lld", (long long)n, (long long)cx_val(c, x)->dims[q]);
      return -1;
    }
    int64_t *eye = sc_arena_array(&c->g->arena, (size_t)(n > 0 ? n * n : 1), sizeof *eye);
    if (!eye) return -1;
    for (int64_t i = 0; i < n * n; i++) eye[i] = i / n == i % n;
    for (int32_t i = 0; i < t->n; i++) d[i] = i == p || i == q ? n : 1;
    int32_t mask = gb_cast(c, gb_reshape(c, gb_ints(c, eye, (int32_t)(n * n)), t->n, d),
                           cx_val(c, x)->dtype);
    x = gb_reduce(c, SC_OP_REDUCE_SUM, gb_2(c, SC_OP_MUL, x, mask), (int64_t[]){q}, 1, false);
    memmove(t->l + q, t->l + q + 1, (size_t)(t->n - q - 1));
    t->n--;
    q--;
  }
  return x;
}

/* Sums out the axes of x whose labels `keep` does not hold. */
static int32_t ein_sum_out(sc_grad_ctx *c, int32_t x, ein_term *t, const bool *keep) {
  int64_t axes[SC_MAX_RANK];
  int32_t na = 0, m = 0;
  for (int32_t i = 0; i < t->n; i++)
    if (!keep[t->l[i]]) axes[na++] = i;
    else t->l[m++] = t->l[i];
  t->n = m;
  return na ? gb_reduce(c, SC_OP_REDUCE_SUM, x, axes, na, false) : x;
}

/* x (term t) transposed to the label order `to`, then reshaped to dims
 * (the groups' products). */
static int32_t ein_arrange(sc_grad_ctx *c, int32_t x, const ein_term *t, const int8_t *to,
                           int32_t n, int32_t rank, const int64_t *dims) {
  int64_t perm[SC_MAX_RANK];
  bool id = true;
  for (int32_t i = 0; i < n; i++) {
    perm[i] = ein_find(t, to[i]);
    id = id && perm[i] == i;
  }
  if (!id) x = gb_transpose(c, x, perm, n);
  return gb_reshape(c, x, rank, dims);
}

sc_status cx_expand_einsum(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const char *eq;
  sc_status st = sc_read_attr_string(g, cx_node(c), "equation", NULL, &eq);
  if (st != SC_OK) return st;
  int32_t nin = cx_node(c)->n_inputs, ell = 0, x[EIN_MAX_IN];
  ein_term t[EIN_MAX_IN], o;
  if (!eq || nin > EIN_MAX_IN)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, eq ? "more than %d operands" :
                         "needs an equation", EIN_MAX_IN);
  const char *p = eq;
  for (int32_t i = 0; i < nin; i++) {
    x[i] = cx_in(c, i);
    while (*p == ' ') p++;
    if (x[i] < 0 || !ein_parse(&p, cx_val(c, x[i])->rank, &ell, &t[i]) ||
        (i + 1 < nin ? *p++ != ',' : false))
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "equation '%s' does not match operand %d "
                           "(rank %d)", eq, (int)i, x[i] < 0 ? -1 : cx_val(c, x[i])->rank);
  }
  /* the ellipsis of a shorter operand takes the last of the ellipsis labels */
  for (int32_t i = 0; i < nin; i++) {
    int32_t e = 0;
    for (int32_t k = 0; k < t[i].n; k++) e += t[i].l[k] >= EIN_ELL;
    for (int32_t k = 0; k < t[i].n; k++)
      if (t[i].l[k] >= EIN_ELL) t[i].l[k] = (int8_t)(t[i].l[k] + ell - e);
  }
  while (*p == ' ') p++;
  int32_t count[EIN_ELL + SC_MAX_RANK] = {0};
  for (int32_t i = 0; i < nin; i++)
    for (int32_t k = 0; k < t[i].n; k++) count[t[i].l[k]]++;
  if (p[0] == '-' && p[1] == '>') {
    p += 2;
    if (!ein_parse(&p, -1, &ell, &o) || *p)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "equation '%s': bad output term", eq);
  } else if (*p) {
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "equation '%s' is malformed", eq);
  } else { /* implicit: the ellipsis, then the labels used once, in ASCII
            * order (numpy's: A-Z before a-z) */
    o.n = 0;
    for (int32_t k = 0; k < ell; k++) o.l[o.n++] = (int8_t)(EIN_ELL + k);
    for (int32_t k = 0; k < EIN_ELL; k++) {
      int8_t l = (int8_t)((k + 26) % EIN_ELL);
      if (count[l] == 1 && o.n < SC_MAX_RANK) o.l[o.n++] = l;
    }
  }
  int64_t size[EIN_ELL + SC_MAX_RANK];
  for (int32_t i = 0; i < EIN_ELL + SC_MAX_RANK; i++) size[i] = 1;
  for (int32_t i = 0; i < nin; i++)
    for (int32_t k = 0; k < t[i].n; k++) {
      int64_t d = cx_val(c, x[i])->dims[k];
      if (d != 1 && size[t[i].l[k]] != 1 && size[t[i].l[k]] != d)
        return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "label '%c' has sizes %lld and %lld",
                             t[i].l[k] < 26 ? 'a' + t[i].l[k] : t[i].l[k] < EIN_ELL
                             ? 'A' + t[i].l[k] - 26 : '.', (long long)size[t[i].l[k]],
                             (long long)d);
      if (d != 1) size[t[i].l[k]] = d;
    }
  for (int32_t k = 0; k < o.n; k++)
    if (!count[o.l[k]] || ein_find(&o, o.l[k]) != k)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "equation '%s': an output label is not an "
                           "input's, or repeats", eq);
  /* operands one by one into the running product r */
  int32_t r = -1;
  ein_term rt = {0};
  for (int32_t i = 0; i < nin; i++) {
    int32_t xi = ein_diagonal(c, x[i], &t[i]);
    if (xi < 0) return cx_built(c);
    /* labels needed later: the output's and the remaining operands' */
    bool later[EIN_ELL + SC_MAX_RANK] = {false};
    for (int32_t k = 0; k < o.n; k++) later[o.l[k]] = true;
    for (int32_t j = i + 1; j < nin; j++)
      for (int32_t k = 0; k < t[j].n; k++) later[t[j].l[k]] = true;
    bool keep[EIN_ELL + SC_MAX_RANK];
    for (int32_t k = 0; k < EIN_ELL + SC_MAX_RANK; k++)
      keep[k] = later[k] || (r >= 0 && ein_find(&rt, (int8_t)k) >= 0);
    xi = ein_sum_out(c, xi, &t[i], keep);
    if (r < 0) {
      r = xi;
      rt = t[i];
      continue;
    }
    /* r [batch, m, k] @ xi [batch, k, n]: batch in both and needed later,
     * k in both and not, m / n in one only */
    int8_t bl[SC_MAX_RANK], ml[SC_MAX_RANK], kl[SC_MAX_RANK], nl[SC_MAX_RANK];
    int32_t nb = 0, nm = 0, nk = 0, nn = 0;
    for (int32_t k = 0; k < rt.n; k++) {
      bool both = ein_find(&t[i], rt.l[k]) >= 0;
      if (both && later[rt.l[k]]) bl[nb++] = rt.l[k];
      else if (both) kl[nk++] = rt.l[k];
      else ml[nm++] = rt.l[k];
    }
    for (int32_t k = 0; k < t[i].n; k++)
      if (ein_find(&rt, t[i].l[k]) < 0) nl[nn++] = t[i].l[k];
    /* size-1 axes meeting larger ones broadcast first */
    int32_t *ops[2] = {&r, &xi};
    ein_term *terms[2] = {&rt, &t[i]};
    for (int32_t s2 = 0; s2 < 2; s2++) {
      int64_t d[SC_MAX_RANK];
      bool grow = false;
      for (int32_t k = 0; k < terms[s2]->n; k++) {
        d[k] = size[terms[s2]->l[k]];
        grow = grow || (d[k] != cx_val(c, *ops[s2])->dims[k] && (ein_find(terms[1 - s2], terms[s2]->l[k]) >= 0));
        if (ein_find(terms[1 - s2], terms[s2]->l[k]) < 0) d[k] = cx_val(c, *ops[s2])->dims[k];
      }
      if (grow) *ops[s2] = gb_expand(c, *ops[s2], terms[s2]->n, d);
    }
    int64_t B = 1, M = 1, K = 1, Nn = 1;
    for (int32_t k = 0; k < nb; k++) B *= size[bl[k]];
    for (int32_t k = 0; k < nm; k++) M *= cx_val(c, r)->dims[ein_find(&rt, ml[k])];
    for (int32_t k = 0; k < nk; k++) K *= size[kl[k]];
    for (int32_t k = 0; k < nn; k++) Nn *= cx_val(c, xi)->dims[ein_find(&t[i], nl[k])];
    int8_t ao[SC_MAX_RANK * 2], bo[SC_MAX_RANK * 2];
    int32_t na = 0, nbo = 0;
    for (int32_t k = 0; k < nb; k++) ao[na++] = bl[k], bo[nbo++] = bl[k];
    for (int32_t k = 0; k < nm; k++) ao[na++] = ml[k];
    for (int32_t k = 0; k < nk; k++) ao[na++] = kl[k], bo[nbo++] = kl[k];
    for (int32_t k = 0; k < nn; k++) bo[nbo++] = nl[k];
    ein_term nt = {0};
    int64_t rd[SC_MAX_RANK];
    for (int32_t k = 0; k < nb; k++) nt.l[nt.n] = bl[k], rd[nt.n++] = size[bl[k]];
    for (int32_t k = 0; k < nm; k++) nt.l[nt.n] = ml[k], rd[nt.n++] = cx_val(c, r)->dims[ein_find(&rt, ml[k])];
    for (int32_t k = 0; k < nn; k++) nt.l[nt.n] = nl[k], rd[nt.n++] = cx_val(c, xi)->dims[ein_find(&t[i], nl[k])];
    if (nt.n > SC_MAX_RANK)
      return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "an intermediate product has rank %d",
                           (int)nt.n);
    int32_t a3 = ein_arrange(c, r, &rt, ao, na, 3, (int64_t[]){B, M, K});
    int32_t b3 = ein_arrange(c, xi, &t[i], bo, nbo, 3, (int64_t[]){B, K, Nn});
    r = gb_reshape(c, gb_2(c, SC_OP_MATMUL, a3, b3), nt.n, rd);
    rt = nt;
    if (r < 0) return cx_built(c);
  }
  bool keep[EIN_ELL + SC_MAX_RANK] = {false};
  for (int32_t k = 0; k < o.n; k++) keep[o.l[k]] = true;
  r = ein_sum_out(c, r, &rt, keep);
  int64_t od[SC_MAX_RANK];
  for (int32_t k = 0; k < o.n; k++) od[k] = r < 0 ? 0 : cx_val(c, r)->dims[ein_find(&rt, o.l[k])];
  out[0] = r < 0 ? -1 : ein_arrange(c, r, &rt, o.l, o.n, o.n, od);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}

