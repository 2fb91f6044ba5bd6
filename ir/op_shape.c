/* op_shape.c — shape computation and views: Shape, Size, Constant, Reshape,
 * Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand, Tile,
 * Range, ConstantOfShape and NonZero (ONNX opsets 13–25). The gathers,
 * scatters, Trilu, Pad and OneHot are in op_move.c.
 *
 * infer validates attributes and sets output shapes. An input that decides an
 * output's shape (Reshape's shape, Expand's shape, Slice's starts, ...) must be
 * a constant with data; otherwise the error is SC_ERR_UNSUPPORTED naming that
 * input. eval recomputes the same parameters from the node, trusts the output
 * shapes infer set, and copies elements by byte size, so it is exact for every
 * dtype with a size. eval refuses outputs above SC_FOLD_MAX_ELEMENTS
 * (SC_ERR_LIMIT) and inputs without data.
 *
 * Cost (copied into docs/ops.md):
 *   Shape, Size, Constant            flops 0, bytes 0 (known at compile time)
 *   Reshape, Flatten, Squeeze,
 *   Unsqueeze                        flops 0, bytes 0 (views of their input)
 *   every other data-movement op     flops 0, bytes = sum of the bytes of the
 *                                    inputs + bytes of the outputs */
#include <math.h>
#include <string.h>

#include "op_move.h"

/* ---- helpers shared with op_move.c ---- */

int64_t sc_move_prod(const int64_t *dims, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t i = from; i < to; i++) p *= dims[i]; /* shapes are checked */
  return p;
}

sc_status sc_move_check_fold(sc_graph *g, const sc_node *n) {
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    if (!v) continue;
    int64_t numel = sc_value_numel(v);
    if (numel < 0 || v->dtype == SC_DTYPE_UNDEF)
      return sc_node_error(g, n, SC_ERR_INVALID, "output '%s' has no inferred shape",
                           v->name);
    if (sc_dtype_size(v->dtype) == 0)
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot evaluate dtype %s",
                           sc_dtype_name(v->dtype));
    if (numel > SC_FOLD_MAX_ELEMENTS)
      return sc_node_error(g, n, SC_ERR_LIMIT,
                           "output '%s' has %lld elements (folding stops at %lld)",
                           v->name, (long long)numel, (long long)SC_FOLD_MAX_ELEMENTS);
  }
  return SC_OK;
}

sc_status sc_move_input_data(sc_graph *g, const sc_node *n, int32_t i,
                             const uint8_t **out) {
  const sc_value *v = sc_node_input(g, n, i);
  if (!v) return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", i);
  if (!sc_value_has_data(v))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "input '%s' is not a constant with data", v->name);
  if (sc_dtype_size(v->dtype) == 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "cannot evaluate dtype %s",
                         sc_dtype_name(v->dtype));
  *out = v->data;
  return SC_OK;
}

sc_status sc_move_output(sc_graph *g, const sc_node *n, int32_t i, uint8_t **out) {
  *out = NULL;
  if (!sc_node_output(g, n, i)) return SC_OK; /* omitted */
  *out = sc_eval_output(g, n, i);
  if (!*out)
    return g->diag.status != SC_OK ? g->diag.status
                                   : sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
  return SC_OK;
}

void sc_move_copy(uint8_t *dst, const uint8_t *src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

sc_status sc_move_ints(sc_graph *g, const sc_node *n, int32_t idx, const char *attr,
                       int64_t *buf, int64_t cap, int64_t *count, bool *present) {
  *present = false;
  *count = 0;
  if (sc_node_input(g, n, idx)) {
    *present = true;
    return sc_input_ints(g, n, idx, buf, cap, count);
  }
  if (!attr) return SC_OK;
  const int64_t *a = NULL;
  int64_t m = sc_attr_ints(g, n, attr, &a);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (m < 0) return SC_OK;
  if (m > cap)
    return sc_node_error(g, n, SC_ERR_LIMIT, "attribute '%s' has %lld values (at most %lld)",
                         attr, (long long)m, (long long)cap);
  *present = true;
  for (int64_t i = 0; i < m; i++) buf[i] = a[i];
  *count = m;
  return SC_OK;
}

/* ---- cost ---- */

void sc_op_cost_shape_op(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n;
  c->flops = 0;
  c->bytes = 0;
}

void sc_op_cost_move(sc_graph *g, const sc_node *n, sc_cost *c) {
  c->flops = 0;
  c->bytes = 0;
  if (n->op == SC_OP_RESHAPE || n->op == SC_OP_FLATTEN || n->op == SC_OP_SQUEEZE ||
      n->op == SC_OP_UNSQUEEZE)
    return;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    int64_t b = v ? sc_value_bytes(v) : -1;
    if (b > 0) c->bytes += (double)b;
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    int64_t b = v ? sc_value_bytes(v) : -1;
    if (b > 0) c->bytes += (double)b;
  }
}

/* ---- Shape, Size ---- */

static void shape_range(sc_graph *g, const sc_node *n, int32_t rank, int64_t *start,
                        int64_t *end) {
  int64_t s = sc_attr_int(g, n, "start", 0), e = sc_attr_int(g, n, "end", rank);
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  s = s < 0 ? 0 : s > rank ? rank : s;
  e = e < 0 ? 0 : e > rank ? rank : e;
  *start = s;
  *end = e < s ? s : e;
}

sc_status sc_op_infer_shape(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  int64_t s, e;
  shape_range(g, n, sc_node_input(g, n, 0)->rank, &s, &e);
  if (g->diag.status != SC_OK) return g->diag.status;
  int64_t k = e - s;
  return sc_set_output(g, n, 0, SC_DTYPE_I64, 1, &k);
}

/* For eval: the node can be folded and input 0's data is at *in. */
static sc_status fold_input0(sc_graph *g, const sc_node *n, const uint8_t **in) {
  sc_status st = sc_move_check_fold(g, n);
  if (st != SC_OK) return st;
  return sc_move_input_data(g, n, 0, in);
}

sc_status sc_op_eval_shape(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t s, e;
  shape_range(g, n, x->rank, &s, &e);
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  for (int64_t i = s; i < e; i++) ((int64_t *)out)[i - s] = x->dims[i];
  return SC_OK;
}

sc_status sc_op_infer_size(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  return sc_set_output(g, n, 0, SC_DTYPE_I64, 0, NULL);
}

sc_status sc_op_eval_size(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  if (st != SC_OK) return st;
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  *(int64_t *)out = sc_value_numel(sc_node_input(g, n, 0));
  return SC_OK;
}

/* ---- Constant ---- */

/* The one value attribute of a Constant node. */
static sc_status constant_attr(sc_graph *g, const sc_node *n, const sc_attr **out) {
  static const char *const names[] = {"value", "value_float", "value_floats",
                                      "value_int", "value_ints", "value_string",
                                      "value_strings", "sparse_value"};
  const sc_attr *found = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const sc_attr *a = sc_node_attr(n, names[i]);
    if (!a) continue;
    if (found)
      return sc_node_error(g, n, SC_ERR_INVALID, "has both '%s' and '%s'", found->name,
                           a->name);
    found = a;
  }
  if (!found) return sc_node_error(g, n, SC_ERR_INVALID, "has no value attribute");
  const char *name = found->name;
  sc_attr_kind want = strcmp(name, "value") == 0          ? SC_ATTR_TENSOR
                      : strcmp(name, "value_float") == 0  ? SC_ATTR_FLOAT
                      : strcmp(name, "value_floats") == 0 ? SC_ATTR_FLOATS
                      : strcmp(name, "value_int") == 0    ? SC_ATTR_INT
                      : strcmp(name, "value_ints") == 0   ? SC_ATTR_INTS
                                                          : SC_ATTR_UNDEF;
  if (want == SC_ATTR_UNDEF)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "attribute '%s' is not supported",
                         name);
  if (found->kind != want || (want == SC_ATTR_TENSOR && !found->t))
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' has the wrong type", name);
  *out = found;
  return SC_OK;
}

sc_status sc_op_infer_constant(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_attr *a;
  if ((st = constant_attr(g, n, &a)) != SC_OK) return st;
  switch (a->kind) {
  case SC_ATTR_TENSOR:
    return sc_set_output(g, n, 0, a->t->dtype, a->t->rank, a->t->dims);
  case SC_ATTR_FLOAT: return sc_set_output(g, n, 0, SC_DTYPE_F32, 0, NULL);
  case SC_ATTR_INT: return sc_set_output(g, n, 0, SC_DTYPE_I64, 0, NULL);
  case SC_ATTR_FLOATS: return sc_set_output(g, n, 0, SC_DTYPE_F32, 1, &a->n);
  default: return sc_set_output(g, n, 0, SC_DTYPE_I64, 1, &a->n);
  }
}

sc_status sc_op_eval_constant(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const sc_attr *a;
  if (st != SC_OK || (st = constant_attr(g, n, &a)) != SC_OK) return st;
  const sc_value *y = sc_node_output(g, n, 0);
  int64_t bytes = y ? sc_value_bytes(y) : 0;
  if (a->kind == SC_ATTR_TENSOR && (uint64_t)bytes != a->t->data_bytes)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "value tensor has no data");
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  switch (a->kind) {
  case SC_ATTR_TENSOR: sc_move_copy(out, a->t->data, bytes); break;
  case SC_ATTR_FLOAT: *(float *)out = (float)a->f; break;
  case SC_ATTR_INT: *(int64_t *)out = a->i; break;
  case SC_ATTR_FLOATS:
    for (int64_t i = 0; i < a->n; i++) ((float *)out)[i] = (float)a->floats[i];
    break;
  default:
    for (int64_t i = 0; i < a->n; i++) ((int64_t *)out)[i] = a->ints[i];
    break;
  }
  return SC_OK;
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze (views) ---- */

sc_status sc_op_infer_reshape(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t shape[SC_MAX_RANK], m;
  if ((st = sc_input_ints(g, n, 1, shape, SC_MAX_RANK, &m)) != SC_OK) return st;
  if (sc_node_input(g, n, 1)->rank != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "shape input must have rank 1");
  bool allowzero = sc_attr_int(g, n, "allowzero", 0) != 0;
  if (g->diag.status != SC_OK) return g->diag.status;
  int32_t infer_at = -1;
  int64_t known = 1;
  bool has_zero = false;
  for (int32_t i = 0; i < m; i++) {
    if (shape[i] == -1) {
      if (infer_at >= 0)
        return sc_node_error(g, n, SC_ERR_INVALID, "shape has more than one -1");
      infer_at = i;
      continue;
    }
    if (shape[i] < -1)
      return sc_node_error(g, n, SC_ERR_INVALID, "shape has negative dim %lld",
                           (long long)shape[i]);
    if (shape[i] == 0) {
      has_zero = true;
      if (!allowzero) {
        if (i >= x->rank)
          return sc_node_error(g, n, SC_ERR_INVALID,
                               "shape dim %d is 0 (copy) but the input has rank %d", i,
                               x->rank);
        shape[i] = x->dims[i];
      }
    }
    if (!sc_mul_i64(known, shape[i], &known) || known > SC_MAX_ELEMENTS)
      return sc_node_error(g, n, SC_ERR_LIMIT, "shape's element count overflows");
  }
  int64_t numel = sc_value_numel(x);
  if (infer_at >= 0) {
    if (allowzero && has_zero)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "shape has both -1 and 0 with allowzero=1");
    if (known == 0 || numel % known != 0)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "cannot infer the -1 dim: input has %lld elements, the "
                           "other dims give %lld",
                           (long long)numel, (long long)known);
    shape[infer_at] = numel / known;
    known = numel;
  }
  if (known != numel)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "input has %lld elements but the shape gives %lld",
                         (long long)numel, (long long)known);
  return sc_set_output(g, n, 0, x->dtype, (int32_t)m, shape);
}

sc_status sc_op_infer_flatten(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t axis = sc_attr_int(g, n, "axis", 1);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (axis < -(int64_t)x->rank || axis > x->rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis %lld out of range for rank %d",
                         (long long)axis, x->rank);
  if (axis < 0) axis += x->rank;
  int64_t d[2] = {sc_move_prod(x->dims, 0, (int32_t)axis),
                  sc_move_prod(x->dims, (int32_t)axis, x->rank)};
  return sc_set_output(g, n, 0, x->dtype, 2, d);
}

sc_status sc_op_infer_squeeze(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t axes[SC_MAX_RANK], m;
  bool present, drop[SC_MAX_RANK] = {false};
  if ((st = sc_move_ints(g, n, 1, "axes", axes, SC_MAX_RANK, &m, &present)) != SC_OK)
    return st;
  if (!present) {
    for (int32_t i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
  } else {
    for (int64_t i = 0; i < m; i++) {
      int32_t a;
      if ((st = sc_norm_axis(g, n, axes[i], x->rank, &a)) != SC_OK) return st;
      if (drop[a])
        return sc_node_error(g, n, SC_ERR_INVALID, "axis %d is repeated", a);
      if (x->dims[a] != 1)
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "cannot squeeze axis %d of size %lld", a,
                             (long long)x->dims[a]);
      drop[a] = true;
    }
  }
  int64_t d[SC_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < x->rank; i++)
    if (!drop[i]) d[r++] = x->dims[i];
  return sc_set_output(g, n, 0, x->dtype, r, d);
}

sc_status sc_op_infer_unsqueeze(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t axes[SC_MAX_RANK], m;
  bool present, add[SC_MAX_RANK] = {false};
  if ((st = sc_move_ints(g, n, 1, "axes", axes, SC_MAX_RANK, &m, &present)) != SC_OK)
    return st;
  if (!present) return sc_node_error(g, n, SC_ERR_INVALID, "axes are missing");
  int64_t rout = x->rank + m;
  if (rout > SC_MAX_RANK)
    return sc_node_error(g, n, SC_ERR_LIMIT, "output rank %lld (at most %d supported)",
                         (long long)rout, SC_MAX_RANK);
  for (int64_t i = 0; i < m; i++) {
    int32_t a;
    if ((st = sc_norm_axis(g, n, axes[i], (int32_t)rout, &a)) != SC_OK) return st;
    if (add[a]) return sc_node_error(g, n, SC_ERR_INVALID, "axis %d is repeated", a);
    add[a] = true;
  }
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0, j = 0; i < rout; i++) d[i] = add[i] ? 1 : x->dims[j++];
  return sc_set_output(g, n, 0, x->dtype, (int32_t)rout, d);
}

sc_status sc_op_eval_reshape(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  uint8_t *out;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  int64_t bytes = sc_value_bytes(sc_node_input(g, n, 0));
  if (bytes != sc_value_bytes(sc_node_output(g, n, 0)))
    return sc_node_error(g, n, SC_ERR_INVALID, "output size differs from the input's");
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  sc_move_copy(out, in, bytes);
  return SC_OK;
}

/* ---- Transpose ---- */

static sc_status transpose_perm(sc_graph *g, const sc_node *n, int32_t rank,
                                int32_t *perm) {
  const int64_t *p;
  int64_t m = sc_attr_ints(g, n, "perm", &p);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (m < 0) {
    for (int32_t i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    return SC_OK;
  }
  if (m != rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "perm has %lld entries for rank %d",
                         (long long)m, rank);
  bool seen[SC_MAX_RANK] = {false};
  for (int32_t i = 0; i < rank; i++) {
    if (p[i] < 0 || p[i] >= rank || seen[p[i]])
      return sc_node_error(g, n, SC_ERR_INVALID, "perm is not a permutation of 0..%d",
                           rank - 1);
    seen[p[i]] = true;
    perm[i] = (int32_t)p[i];
  }
  return SC_OK;
}

sc_status sc_op_infer_transpose(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t perm[SC_MAX_RANK];
  if ((st = transpose_perm(g, n, x->rank, perm)) != SC_OK) return st;
  int64_t d[SC_MAX_RANK];
  for (int32_t i = 0; i < x->rank; i++) d[i] = x->dims[perm[i]];
  return sc_set_output(g, n, 0, x->dtype, x->rank, d);
}

/* The fold of a node whose output is its input 0, viewed with dims xd
 * (rank r <= SC_MAX_RANK, the same elements), transposed by perm:
 * Transpose itself, and DepthToSpace/SpaceToDepth on their 6-D view. */
_Static_assert(SC_MAX_RANK >= 6, "DepthToSpace's view has rank 6");
static sc_status eval_permuted(sc_graph *g, sc_node *n, int32_t r, const int64_t *xd,
                               const int32_t *perm) {
  const uint8_t *in;
  uint8_t *out;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (sc_value_numel(sc_node_output(g, n, 0)) == 0) return SC_OK;
  size_t es = sc_dtype_size(sc_node_input(g, n, 0)->dtype);
  int64_t xs[SC_MAX_RANK], yd[SC_MAX_RANK], idx[SC_MAX_RANK] = {0}, o = 0;
  sc_strides(r, xd, xs);
  for (int32_t i = 0; i < r; i++) yd[i] = xd[perm[i]];
  do {
    int64_t off = 0;
    for (int32_t i = 0; i < r; i++) off += idx[i] * xs[perm[i]];
    memcpy(out + (size_t)o++ * es, in + (size_t)off * es, es);
  } while (sc_next_index(r, yd, idx));
  return SC_OK;
}

sc_status sc_op_eval_transpose(sc_graph *g, sc_node *n) {
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t perm[SC_MAX_RANK];
  sc_status st = transpose_perm(g, n, x->rank, perm);
  return st != SC_OK ? st : eval_permuted(g, n, x->rank, x->dims, perm);
}

/* ---- DepthToSpace, SpaceToDepth ---- */

sc_status sc_op_depth_space_view(sc_graph *g, const sc_node *n, int64_t *d6, int32_t *perm) {
  const sc_value *x = sc_node_input(g, n, 0);
  if (x->rank != 4)
    return sc_node_error(g, n, SC_ERR_INVALID, "input must be 4-D [N, C, H, W], got rank %d",
                         x->rank);
  if (!sc_node_attr(n, "blocksize"))
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'blocksize' is missing");
  int64_t b = sc_attr_int(g, n, "blocksize", 0);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (b < 1 || b > (int64_t)1 << 20)
    return sc_node_error(g, n, SC_ERR_INVALID, "blocksize %lld is not positive", (long long)b);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  static const char *const modes[] = {"DCR", "CRD"}; /* SpaceToDepth's since opset 28 */
  int crd;
  sc_status st = sc_read_attr_choice(g, n, "mode", "DCR", modes, 2, &crd);
  if (st != SC_OK) return st;
  if (n->op == SC_OP_DEPTH_TO_SPACE) {
    if (C % (b * b) != 0)
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "channels %lld are not a multiple of blocksize^2 = %lld",
                           (long long)C, (long long)(b * b));
    int64_t c = C / (b * b);
    static const int32_t dcr[6] = {0, 3, 4, 1, 5, 2}, crdp[6] = {0, 1, 4, 2, 5, 3};
    int64_t dd[6] = {N, b, b, c, H, W}, dc[6] = {N, c, b, b, H, W};
    memcpy(d6, crd ? dc : dd, sizeof dd);
    memcpy(perm, crd ? crdp : dcr, sizeof dcr);
    return SC_OK;
  }
  if (H % b != 0 || W % b != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "height %lld and width %lld are not multiples of blocksize %lld",
                         (long long)H, (long long)W, (long long)b);
  static const int32_t s2d[6] = {0, 3, 5, 1, 2, 4}, s2d_crd[6] = {0, 1, 3, 5, 2, 4};
  int64_t ds[6] = {N, C, H / b, b, W / b, b};
  memcpy(d6, ds, sizeof ds);
  memcpy(perm, crd ? s2d_crd : s2d, sizeof s2d);
  return SC_OK;
}

sc_status sc_op_infer_depth_space(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t d6[6];
  int32_t perm[6];
  if ((st = sc_op_depth_space_view(g, n, d6, perm)) != SC_OK) return st;
  int64_t d[4] = {x->dims[0], 0, 0, 0};
  if (n->op == SC_OP_DEPTH_TO_SPACE) {
    int64_t b = d6[perm[3]];
    d[1] = x->dims[1] / (b * b), d[2] = x->dims[2] * b, d[3] = x->dims[3] * b;
  } else {
    int64_t b = d6[3];
    d[1] = x->dims[1] * b * b, d[2] = x->dims[2] / b, d[3] = x->dims[3] / b;
  }
  return sc_set_output(g, n, 0, x->dtype, 4, d);
}

sc_status sc_op_eval_depth_space(sc_graph *g, sc_node *n) {
  int64_t d6[6];
  int32_t perm[6];
  sc_status st = sc_op_depth_space_view(g, n, d6, perm);
  return st != SC_OK ? st : eval_permuted(g, n, 6, d6, perm);
}

/* ---- Concat ---- */

static sc_status concat_axis(sc_graph *g, const sc_node *n, int32_t *axis) {
  const sc_value *x0 = sc_node_input(g, n, 0);
  const sc_attr *a = sc_node_attr(n, "axis");
  if (!a) return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'axis' is missing");
  int64_t ax = sc_attr_int(g, n, "axis", 0);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (x0->rank == 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "cannot concatenate scalars");
  return sc_norm_axis(g, n, ax, x0->rank, axis);
}

sc_status sc_op_infer_concat(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < n->n_inputs; i++)
    if (!sc_node_input(g, n, i))
      return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", i);
  int32_t axis;
  if ((st = concat_axis(g, n, &axis)) != SC_OK) return st;
  const sc_value *x0 = sc_node_input(g, n, 0);
  int64_t d[SC_MAX_RANK];
  memcpy(d, x0->dims, sizeof d);
  d[axis] = 0;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *x = sc_node_input(g, n, i);
    if (x->dtype != x0->dtype)
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' is %s, input '%s' is %s",
                           x->name, sc_dtype_name(x->dtype), x0->name,
                           sc_dtype_name(x0->dtype));
    if (x->rank != x0->rank)
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has rank %d, input '%s' %d",
                           x->name, x->rank, x0->name, x0->rank);
    for (int32_t j = 0; j < x->rank; j++)
      if (j != axis && x->dims[j] != x0->dims[j])
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "input '%s' has dim %d of %lld, input '%s' %lld", x->name,
                             j, (long long)x->dims[j], x0->name, (long long)x0->dims[j]);
    if (!sc_add_i64(d[axis], x->dims[axis], &d[axis]))
      return sc_node_error(g, n, SC_ERR_LIMIT, "output dim overflows");
  }
  return sc_set_output(g, n, 0, x0->dtype, x0->rank, d);
}

sc_status sc_op_eval_concat(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  int32_t axis;
  if (st != SC_OK || (st = concat_axis(g, n, &axis)) != SC_OK) return st;
  const sc_value *x0 = sc_node_input(g, n, 0);
  size_t es = sc_dtype_size(x0->dtype);
  int64_t outer = sc_move_prod(x0->dims, 0, axis);
  int64_t inner = sc_move_prod(x0->dims, axis + 1, x0->rank) * (int64_t)es;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const uint8_t *in;
    if ((st = sc_move_input_data(g, n, i, &in)) != SC_OK) return st;
  }
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  for (int64_t o = 0; o < outer; o++)
    for (int32_t i = 0; i < n->n_inputs; i++) {
      const sc_value *x = sc_node_input(g, n, i);
      int64_t chunk = x->dims[axis] * inner;
      sc_move_copy(out, (const uint8_t *)x->data + o * chunk, chunk);
      out += chunk;
    }
  return SC_OK;
}

/* ---- Split ---- */

/* Sizes of the n->n_outputs chunks along *axis, into sizes (caller frees). */
static sc_status split_sizes(sc_graph *g, const sc_node *n, int32_t *axis,
                             int64_t **sizes_out) {
  *sizes_out = NULL;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t ax = sc_attr_int(g, n, "axis", 0);
  int64_t num = sc_attr_int(g, n, "num_outputs", 0);
  if (g->diag.status != SC_OK) return g->diag.status;
  sc_status st = sc_norm_axis(g, n, ax, x->rank, axis);
  if (st != SC_OK) return st;
  int32_t k = n->n_outputs;
  int64_t dim = x->dims[*axis], m = 0;
  int64_t *sizes = sc_calloc((size_t)k, sizeof *sizes);
  if (!sizes) return sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
  bool present;
  st = sc_move_ints(g, n, 1, "split", sizes, k, &m, &present);
  if (st == SC_ERR_LIMIT) {
    sc_diag_clear(&g->diag);
    st = sc_node_error(g, n, SC_ERR_INVALID, "split has more entries than %d outputs", k);
  }
  if (st != SC_OK) goto fail;
  if (present) {
    if (num != 0) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "has both split and num_outputs");
      goto fail;
    }
    if (m != k) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "split has %lld entries for %d outputs",
                         (long long)m, k);
      goto fail;
    }
    int64_t sum = 0;
    for (int32_t i = 0; i < k; i++) {
      if (sizes[i] < 0 || !sc_add_i64(sum, sizes[i], &sum)) {
        st = sc_node_error(g, n, SC_ERR_INVALID, "split entry %d is %lld", i,
                           (long long)sizes[i]);
        goto fail;
      }
    }
    if (sum != dim) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "split sums to %lld, axis has %lld",
                         (long long)sum, (long long)dim);
      goto fail;
    }
  } else if (num != 0) {
    if (num != k) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "num_outputs is %lld but node has %d",
                         (long long)num, k);
      goto fail;
    }
    int64_t chunk = (dim + k - 1) / k, last = dim - chunk * (k - 1);
    if (last < 0) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "cannot split %lld into %d chunks of %lld",
                         (long long)dim, k, (long long)chunk);
      goto fail;
    }
    for (int32_t i = 0; i < k; i++) sizes[i] = i == k - 1 ? last : chunk;
  } else {
    if (dim % k != 0) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "axis of %lld does not split evenly in %d",
                         (long long)dim, k);
      goto fail;
    }
    for (int32_t i = 0; i < k; i++) sizes[i] = dim / k;
  }
  *sizes_out = sizes;
  return SC_OK;
fail:
  sc_free(sizes);
  return st;
}

sc_status sc_op_infer_split(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t axis;
  int64_t *sizes;
  if ((st = split_sizes(g, n, &axis, &sizes)) != SC_OK) return st;
  int64_t d[SC_MAX_RANK];
  memcpy(d, x->dims, sizeof d);
  for (int32_t i = 0; i < n->n_outputs && st == SC_OK; i++) {
    d[axis] = sizes[i];
    st = sc_set_output(g, n, i, x->dtype, x->rank, d);
  }
  sc_free(sizes);
  return st;
}

sc_status sc_op_eval_split(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t axis;
  int64_t *sizes;
  if ((st = split_sizes(g, n, &axis, &sizes)) != SC_OK) return st;
  int64_t outer = sc_move_prod(x->dims, 0, axis);
  int64_t inner = sc_move_prod(x->dims, axis + 1, x->rank) * sc_dtype_size(x->dtype);
  int64_t row = x->dims[axis] * inner, at = 0;
  for (int32_t i = 0; i < n->n_outputs; i++) {
    uint8_t *out;
    if ((st = sc_move_output(g, n, i, &out)) != SC_OK) break;
    int64_t chunk = sizes[i] * inner;
    if (out)
      for (int64_t o = 0; o < outer; o++)
        sc_move_copy(out + o * chunk, in + o * row + at, chunk);
    at += chunk;
  }
  sc_free(sizes);
  return st;
}

/* ---- Slice ---- */

/* Per-dim start and step of the slice, and the output dims (declared in
 * op_util.h: codegen's Slice lowering uses the same clamping). */
sc_status sc_op_slice_params(sc_graph *g, const sc_node *n, int64_t *start,
                             int64_t *step, int64_t *dout) {
  const sc_value *x = sc_node_input(g, n, 0);
  int32_t r = x->rank;
  int64_t starts[SC_MAX_RANK], ends[SC_MAX_RANK], axes[SC_MAX_RANK], steps[SC_MAX_RANK];
  int64_t ns, ne, na, nst;
  bool has_axes, has_steps;
  sc_status st;
  if ((st = sc_input_ints(g, n, 1, starts, SC_MAX_RANK, &ns)) != SC_OK ||
      (st = sc_input_ints(g, n, 2, ends, SC_MAX_RANK, &ne)) != SC_OK ||
      (st = sc_move_ints(g, n, 3, NULL, axes, SC_MAX_RANK, &na, &has_axes)) != SC_OK ||
      (st = sc_move_ints(g, n, 4, NULL, steps, SC_MAX_RANK, &nst, &has_steps)) != SC_OK)
    return st;
  if (ne != ns || (has_axes && na != ns) || (has_steps && nst != ns))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "starts, ends, axes and steps differ in length");
  bool seen[SC_MAX_RANK] = {false};
  for (int32_t i = 0; i < r; i++) {
    start[i] = 0;
    step[i] = 1;
    dout[i] = x->dims[i];
  }
  for (int64_t i = 0; i < ns; i++) {
    int32_t a;
    if ((st = sc_norm_axis(g, n, has_axes ? axes[i] : i, r, &a)) != SC_OK) return st;
    if (seen[a]) return sc_node_error(g, n, SC_ERR_INVALID, "axis %d is repeated", a);
    seen[a] = true;
    int64_t dim = x->dims[a], s = starts[i], e = ends[i], k = has_steps ? steps[i] : 1;
    if (k == 0) return sc_node_error(g, n, SC_ERR_INVALID, "step is 0 on axis %d", a);
    if (s < 0) s += dim; /* no overflow: dim >= 0 */
    if (e < 0) e += dim;
    int64_t cnt;
    if (k > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      cnt = e > s ? (e - s - 1) / k + 1 : 0;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      cnt = s > e ? (s - e - 1) / (k == INT64_MIN ? INT64_MAX : -k) + 1 : 0;
    }
    start[a] = s;
    step[a] = k;
    dout[a] = cnt;
  }
  return SC_OK;
}

sc_status sc_op_infer_slice(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t start[SC_MAX_RANK], step[SC_MAX_RANK], d[SC_MAX_RANK];
  if ((st = sc_op_slice_params(g, n, start, step, d)) != SC_OK) return st;
  return sc_set_output(g, n, 0, x->dtype, x->rank, d);
}

sc_status sc_op_eval_slice(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t start[SC_MAX_RANK], step[SC_MAX_RANK], d[SC_MAX_RANK], xs[SC_MAX_RANK];
  if ((st = sc_op_slice_params(g, n, start, step, d)) != SC_OK) return st;
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (sc_move_prod(d, 0, x->rank) == 0) return SC_OK;
  size_t es = sc_dtype_size(x->dtype);
  int64_t idx[SC_MAX_RANK] = {0}, o = 0;
  sc_strides(x->rank, x->dims, xs);
  do {
    int64_t off = 0;
    for (int32_t i = 0; i < x->rank; i++) off += (start[i] + idx[i] * step[i]) * xs[i];
    memcpy(out + (size_t)o++ * es, in + (size_t)off * es, es);
  } while (sc_next_index(x->rank, d, idx));
  return SC_OK;
}

/* ---- Expand, Tile ---- */

static sc_status expand_shape(sc_graph *g, const sc_node *n, int32_t *r, int64_t *d) {
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t shape[SC_MAX_RANK], m;
  sc_status st = sc_input_ints(g, n, 1, shape, SC_MAX_RANK, &m);
  if (st != SC_OK) return st;
  for (int64_t i = 0; i < m; i++)
    if (shape[i] < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "shape has negative dim %lld",
                           (long long)shape[i]);
  return sc_broadcast(g, n, x->rank, x->dims, (int32_t)m, shape, r, d);
}

sc_status sc_op_infer_expand(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  int32_t r;
  int64_t d[SC_MAX_RANK];
  if ((st = expand_shape(g, n, &r, d)) != SC_OK) return st;
  return sc_set_output(g, n, 0, sc_node_input(g, n, 0)->dtype, r, d);
}

sc_status sc_op_eval_expand(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  uint8_t *out;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *y = sc_node_output(g, n, 0);
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (sc_value_numel(y) == 0) return SC_OK;
  size_t es = sc_dtype_size(x->dtype);
  int64_t idx[SC_MAX_RANK] = {0}, o = 0;
  do {
    int64_t off = sc_bcast_offset(y->rank, idx, x->rank, x->dims);
    memcpy(out + (size_t)o++ * es, in + (size_t)off * es, es);
  } while (sc_next_index(y->rank, y->dims, idx));
  return SC_OK;
}

sc_status sc_op_infer_tile(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  int64_t rep[SC_MAX_RANK], m, d[SC_MAX_RANK];
  if ((st = sc_input_ints(g, n, 1, rep, SC_MAX_RANK, &m)) != SC_OK) return st;
  if (m != x->rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "repeats has %lld entries for rank %d",
                         (long long)m, x->rank);
  for (int32_t i = 0; i < x->rank; i++) {
    if (rep[i] < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "repeats[%d] is %lld", i,
                           (long long)rep[i]);
    if (!sc_mul_i64(x->dims[i], rep[i], &d[i]))
      return sc_node_error(g, n, SC_ERR_LIMIT, "output dim %d overflows", i);
  }
  return sc_set_output(g, n, 0, x->dtype, x->rank, d);
}

sc_status sc_op_eval_tile(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  uint8_t *out;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *y = sc_node_output(g, n, 0);
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (sc_value_numel(y) == 0) return SC_OK;
  size_t es = sc_dtype_size(x->dtype);
  int64_t idx[SC_MAX_RANK] = {0}, xs[SC_MAX_RANK], o = 0;
  sc_strides(x->rank, x->dims, xs);
  do {
    int64_t off = 0;
    for (int32_t i = 0; i < x->rank; i++) off += (idx[i] % x->dims[i]) * xs[i];
    memcpy(out + (size_t)o++ * es, in + (size_t)off * es, es);
  } while (sc_next_index(y->rank, y->dims, idx));
  return SC_OK;
}

/* ---- Range ---- */

/* The type a float16 or bfloat16 Range computes in (attribute stash_type,
 * opset 27: FLOAT, the default, or DOUBLE): start + i * delta there, each
 * rounded to T. */
static sc_status range_stash(sc_graph *g, const sc_node *n, sc_dtype *stash) {
  int64_t s = sc_attr_int(g, n, "stash_type", 1);
  if (g->diag.status != SC_OK) return g->diag.status;
  if (s != 1 && s != 11)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "stash_type %lld: Range computes in FLOAT (1) or DOUBLE (11)",
                         (long long)s);
  *stash = s == 1 ? SC_DTYPE_F32 : SC_DTYPE_F64;
  return SC_OK;
}

static sc_status range_count(sc_graph *g, const sc_node *n, int64_t *count) {
  const sc_value *s = sc_node_input(g, n, 0);
  sc_dtype t = s->dtype;
  for (int32_t i = 0; i < 3; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (v->dtype != t)
      return sc_node_error(g, n, SC_ERR_INVALID, "inputs have different dtypes (%s, %s)",
                           sc_dtype_name(t), sc_dtype_name(v->dtype));
    if (sc_value_numel(v) != 1)
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' must be a scalar", v->name);
    sc_status st = sc_require_const(g, n, v);
    if (st != SC_OK) return st;
  }
  const void *ps = s->data, *pl = sc_node_input(g, n, 1)->data,
             *pd = sc_node_input(g, n, 2)->data;
  double q;
  if (t == SC_DTYPE_F32) {
    float fs = *(const float *)ps, fl = *(const float *)pl, fd = *(const float *)pd;
    if (fd == 0) return sc_node_error(g, n, SC_ERR_INVALID, "delta is 0");
    q = ceil((double)((fl - fs) / fd)); /* in float, as ONNX and onnxruntime do */
  } else if (t == SC_DTYPE_F64) {
    double ds = *(const double *)ps, dl = *(const double *)pl, dd = *(const double *)pd;
    if (dd == 0) return sc_node_error(g, n, SC_ERR_INVALID, "delta is 0");
    q = ceil((dl - ds) / dd);
  } else if (t == SC_DTYPE_F16 || t == SC_DTYPE_BF16) {
    sc_dtype stash;
    sc_status st = range_stash(g, n, &stash);
    if (st != SC_OK) return st;
    double ds = sc_load_f64(t, ps, 0), dl = sc_load_f64(t, pl, 0), dd = sc_load_f64(t, pd, 0);
    if (dd == 0) return sc_node_error(g, n, SC_ERR_INVALID, "delta is 0");
    q = ceil((dl - ds) / dd);
  } else if (t == SC_DTYPE_I16 || t == SC_DTYPE_I32 || t == SC_DTYPE_I64) {
    __int128 is = sc_load_i64(t, ps, 0), il = sc_load_i64(t, pl, 0),
             id = sc_load_i64(t, pd, 0);
    if (id == 0) return sc_node_error(g, n, SC_ERR_INVALID, "delta is 0");
    __int128 diff = il - is, c = diff / id;
    if (diff % id != 0 && (diff > 0) == (id > 0)) c++;
    q = c < 0 ? 0 : (double)c;
  } else {
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype %s is not supported by Range",
                         sc_dtype_name(t));
  }
  if (isnan(q))
    return sc_node_error(g, n, SC_ERR_INVALID, "start, limit and delta give no count");
  if (q > (double)SC_MAX_ELEMENTS)
    return sc_node_error(g, n, SC_ERR_LIMIT, "output would have %g elements", q);
  *count = q < 0 ? 0 : (int64_t)q;
  return SC_OK;
}

sc_status sc_op_infer_range(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  int64_t k;
  if (st != SC_OK || (st = range_count(g, n, &k)) != SC_OK) return st;
  return sc_set_output(g, n, 0, sc_node_input(g, n, 0)->dtype, 1, &k);
}

sc_status sc_op_eval_range(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  int64_t k;
  if (st != SC_OK || (st = range_count(g, n, &k)) != SC_OK) return st;
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  sc_dtype t = sc_node_input(g, n, 0)->dtype;
  const void *ps = sc_node_input(g, n, 0)->data, *pd = sc_node_input(g, n, 2)->data;
  /* ONNX defines Range by accumulation: x_0 = start, x_{i+1} = x_i + delta,
   * in the output type. */
  if (t == SC_DTYPE_F32) {
    float v = *(const float *)ps, d = *(const float *)pd;
    for (int64_t i = 0; i < k; i++, v += d) ((float *)out)[i] = v;
  } else if (t == SC_DTYPE_F64) {
    double v = *(const double *)ps, d = *(const double *)pd;
    for (int64_t i = 0; i < k; i++, v += d) ((double *)out)[i] = v;
  } else if (t == SC_DTYPE_F16 || t == SC_DTYPE_BF16) {
    sc_dtype stash;
    if ((st = range_stash(g, n, &stash)) != SC_OK) return st;
    double s = sc_load_f64(t, ps, 0), d = sc_load_f64(t, pd, 0);
    for (int64_t i = 0; i < k; i++) {
      double v = stash == SC_DTYPE_F32 ? (double)((float)s + (float)i * (float)d) : s + (double)i * d;
      sc_store_f64(t, out, i, v);
    }
  } else {
    int64_t v = sc_load_i64(t, ps, 0), d = sc_load_i64(t, pd, 0);
    for (int64_t i = 0; i < k; i++, v = (int64_t)((uint64_t)v + (uint64_t)d))
      sc_store_i64(t, out, i, v); /* the step after the last may wrap: unused */
  }
  return SC_OK;
}

/* ---- ConstantOfShape ---- */

static sc_status cos_value(sc_graph *g, const sc_node *n, const sc_tensor **out) {
  *out = NULL;
  const sc_attr *a = sc_node_attr(n, "value");
  if (!a) return SC_OK;
  const sc_tensor *t = sc_attr_tensor(g, n, "value");
  if (!t) return g->diag.status != SC_OK ? g->diag.status
                                         : sc_node_error(g, n, SC_ERR_INVALID, "bad value");
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; i++) numel *= t->dims[i];
  if (numel != 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "value must have one element, has %lld",
                         (long long)numel);
  if (sc_dtype_size(t->dtype) == 0)
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "value of dtype %s",
                         sc_dtype_name(t->dtype));
  *out = t;
  return SC_OK;
}

sc_status sc_op_infer_constant_of_shape(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  int64_t d[SC_MAX_RANK], m;
  const sc_tensor *t;
  if ((st = sc_input_ints(g, n, 0, d, SC_MAX_RANK, &m)) != SC_OK ||
      (st = cos_value(g, n, &t)) != SC_OK)
    return st;
  for (int64_t i = 0; i < m; i++)
    if (d[i] < 0)
      return sc_node_error(g, n, SC_ERR_INVALID, "shape has negative dim %lld",
                           (long long)d[i]);
  return sc_set_output(g, n, 0, t ? t->dtype : SC_DTYPE_F32, (int32_t)m, d);
}

sc_status sc_op_eval_constant_of_shape(sc_graph *g, sc_node *n) {
  sc_status st = sc_move_check_fold(g, n);
  const sc_tensor *t;
  if (st != SC_OK || (st = cos_value(g, n, &t)) != SC_OK) return st;
  const sc_value *y = sc_node_output(g, n, 0);
  size_t es = sc_dtype_size(y->dtype);
  if (t && (!t->data || t->data_bytes != es))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "value tensor has no data");
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  if (!t) return SC_OK; /* zeroed f32 */
  int64_t numel = sc_value_numel(y);
  for (int64_t i = 0; i < numel; i++) memcpy(out + (size_t)i * es, t->data, es);
  return SC_OK;
}

/* ---- NonZero ---- */

static bool elem_nonzero(sc_dtype t, const void *data, int64_t i) {
  if (sc_dtype_is_float(t)) return sc_load_f64(t, data, i) != 0; /* NaN counts */
  if (t == SC_DTYPE_U64) return ((const uint64_t *)data)[i] != 0;
  return sc_load_i64(t, data, i) != 0;
}

sc_status sc_op_infer_nonzero(sc_graph *g, sc_node *n) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0);
  /* the output shape is the count of nonzeros: x must be known (`shardc
   * run` specialises to the given input, docs/runtime.md) */
  if ((st = sc_require_const(g, n, x)) != SC_OK) return st;
  if (!sc_dtype_is_numeric(x->dtype))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "input of dtype %s",
                         sc_dtype_name(x->dtype));
  int64_t numel = sc_value_numel(x), cnt = 0;
  for (int64_t i = 0; i < numel; i++) cnt += elem_nonzero(x->dtype, x->data, i);
  int64_t d[2] = {x->rank > 0 ? x->rank : 1, cnt};
  return sc_set_output(g, n, 0, SC_DTYPE_I64, 2, d);
}

sc_status sc_op_eval_nonzero(sc_graph *g, sc_node *n) {
  const uint8_t *in;
  sc_status st = fold_input0(g, n, &in);
  if (st != SC_OK) return st;
  const sc_value *x = sc_node_input(g, n, 0), *y = sc_node_output(g, n, 0);
  int64_t numel = sc_value_numel(x), cnt = y->dims[1];
  uint8_t *out;
  if ((st = sc_move_output(g, n, 0, &out)) != SC_OK || !out) return st;
  int64_t *o = (int64_t *)out, j = 0, idx[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < numel; i++) {
    if (elem_nonzero(x->dtype, in, i)) {
      if (j >= cnt)
        return sc_node_error(g, n, SC_ERR_INVALID, "input changed since inference");
      for (int32_t a = 0; a < x->rank; a++) o[a * cnt + j] = idx[a];
      j++; /* rank 0: the one coordinate row stays 0 */
    }
    sc_next_index(x->rank, x->dims, idx);
  }
  if (j != cnt)
    return sc_node_error(g, n, SC_ERR_INVALID, "input changed since inference");
  return SC_OK;
}
