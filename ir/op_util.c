/* op_util.c — helpers shared by the op implementations. */
#include "op_util.h"

#include <string.h>

sc_status sc_check_inputs(sc_graph *g, const sc_node *n) {
  const sc_op_info *info = &sc_ops[n->op];
  if (n->n_inputs < info->min_in || (info->max_in >= 0 && n->n_inputs > info->max_in))
    return sc_node_error(g, n, SC_ERR_INVALID, "%d inputs (expects %d..%d)",
                         n->n_inputs, info->min_in, info->max_in);
  if (n->n_outputs < info->min_out ||
      (info->max_out >= 0 && n->n_outputs > info->max_out))
    return sc_node_error(g, n, SC_ERR_INVALID, "%d outputs (expects %d..%d)",
                         n->n_outputs, info->min_out, info->max_out);
  for (int32_t i = 0; i < n->n_inputs; i++) {
    if (n->inputs[i] < 0) {
      if (i < info->min_in)
        return sc_node_error(g, n, SC_ERR_INVALID, "required input %d is missing", i);
      continue;
    }
    const sc_value *v = &g->values[n->inputs[i]];
    if (v->rank < 0 || v->dtype == SC_DTYPE_UNDEF)
      return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has no known shape",
                           v->name);
    for (int32_t d = 0; d < v->rank; d++)
      if (v->dims[d] < 0)
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "input '%s' has unbound dim %d%s%s", v->name, d,
                             v->dim_param && v->dim_param[d] ? " " : "",
                             v->dim_param && v->dim_param[d] ? v->dim_param[d] : "");
  }
  return SC_OK;
}

sc_status sc_broadcast(sc_graph *g, const sc_node *n, int32_t ra,
                       const int64_t *da, int32_t rb, const int64_t *db,
                       int32_t *rout, int64_t *dout) {
  int32_t r = ra > rb ? ra : rb;
  for (int32_t i = 0; i < r; i++) {
    int64_t a = i < r - ra ? 1 : da[i - (r - ra)];
    int64_t b = i < r - rb ? 1 : db[i - (r - rb)];
    if (a == b || b == 1)
      dout[i] = a;
    else if (a == 1)
      dout[i] = b;
    else
      return sc_node_error(g, n, SC_ERR_INVALID,
                           "cannot broadcast dims %lld and %lld", (long long)a,
                           (long long)b);
  }
  *rout = r;
  return SC_OK;
}

sc_status sc_norm_axis(sc_graph *g, const sc_node *n, int64_t axis, int32_t rank,
                       int32_t *out) {
  if (axis < -(int64_t)rank || axis >= rank)
    return sc_node_error(g, n, SC_ERR_INVALID, "axis %lld out of range for rank %d",
                         (long long)axis, rank);
  *out = (int32_t)(axis < 0 ? axis + rank : axis);
  return SC_OK;
}

/* A graph input (not constant) that value vid is computed from, found
 * depth-first within a budget of visits, or -1. */
static int32_t input_ancestor(const sc_graph *g, int32_t vid, int32_t *budget) {
  if (vid < 0 || vid >= g->n_values || --*budget < 0) return -1;
  const sc_value *v = &g->values[vid];
  if (sc_value_is_const(v)) return -1;
  if (v->flags & SC_VALUE_INPUT) return vid;
  if (v->producer < 0 || v->producer >= g->n_nodes) return -1;
  const sc_node *p = &g->nodes[v->producer];
  for (int32_t i = 0; i < p->n_inputs; i++) {
    int32_t r = input_ancestor(g, p->inputs[i], budget);
    if (r >= 0) return r;
  }
  return -1;
}

sc_status sc_require_const(sc_graph *g, const sc_node *n, const sc_value *v) {
  if (!sc_value_is_const(v)) {
    /* the graph input it is (or is computed from): given a value, it may
     * make this one constant (`shardc run` specialises, docs/runtime.md) */
    int32_t budget = 4096;
    g->want_const = input_ancestor(g, (int32_t)(v - g->values), &budget);
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "input '%s' must be a constant (data-dependent shapes are "
                         "not supported)", v->name);
  }
  if (!sc_value_has_data(v))
    return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                         "input '%s' is a weight whose data is absent", v->name);
  return SC_OK;
}

sc_status sc_input_ints(sc_graph *g, const sc_node *n, int32_t idx, int64_t *buf,
                        int64_t cap, int64_t *count) {
  const sc_value *v = sc_node_input(g, n, idx);
  if (!v) return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", idx);
  if (!sc_dtype_is_int(v->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' must be an integer tensor",
                         v->name);
  if (v->rank > 1)
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' must have rank 0 or 1",
                         v->name);
  sc_status st = sc_require_const(g, n, v);
  if (st != SC_OK) return st;
  int64_t m = sc_value_numel(v);
  if (m < 0 || m > cap)
    return sc_node_error(g, n, SC_ERR_LIMIT, "input '%s' has too many elements",
                         v->name);
  for (int64_t i = 0; i < m; i++) buf[i] = sc_load_i64(v->dtype, v->data, i);
  *count = m;
  return SC_OK;
}

sc_status sc_set_output(sc_graph *g, const sc_node *n, int32_t idx, sc_dtype dtype,
                        int32_t rank, const int64_t *dims) {
  if (idx >= n->n_outputs || n->outputs[idx] < 0) return SC_OK; /* omitted */
  sc_status st = sc_value_set_shape(g, n->outputs[idx], dtype, rank, dims);
  if (st != SC_OK) {
    /* re-attribute the problem to the node */
    char msg[sizeof g->diag.msg];
    memcpy(msg, g->diag.msg, sizeof msg);
    sc_diag_clear(&g->diag);
    return sc_node_error(g, n, st, "%s", msg);
  }
  return SC_OK;
}

sc_status sc_same_as_input(sc_graph *g, const sc_node *n, int32_t out, int32_t in) {
  const sc_value *v = sc_node_input(g, n, in);
  if (!v) return sc_node_error(g, n, SC_ERR_INVALID, "input %d is missing", in);
  return sc_set_output(g, n, out, v->dtype, v->rank, v->dims);
}

void *sc_eval_output(sc_graph *g, const sc_node *n, int32_t idx) {
  sc_value *v = sc_node_output(g, n, idx);
  if (!v) return NULL;
  int64_t bytes = sc_value_bytes(v);
  if (bytes < 0) return NULL;
  void *p = sc_arena_alloc(&g->arena, (size_t)(bytes ? bytes : 1));
  if (!p) {
    sc_node_error(g, n, SC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  v->flags |= SC_VALUE_CONST;
  v->data = p;
  v->data_bytes = (uint64_t)bytes;
  v->data_kind = SC_DATA_ARENA;
  return p;
}

void sc_strides(int32_t rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int32_t i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

int64_t sc_bcast_offset(int32_t rout, const int64_t *idx, int32_t rin,
                        const int64_t *din) {
  int64_t off = 0;
  for (int32_t i = 0; i < rin; i++) {
    int64_t k = idx[rout - rin + i];
    off = off * din[i] + (din[i] == 1 ? 0 : k);
  }
  return off;
}

bool sc_next_index(int32_t rank, const int64_t *dims, int64_t *idx) {
  for (int32_t i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

/* One reader per attribute kind, all of the same form. */
#define READ_ATTR(fn, type, want, field, what)                                        \
  sc_status fn(sc_graph *g, const sc_node *n, const char *name, type dflt, type *out) { \
    const sc_attr *a = sc_node_attr(n, name);                                         \
    *out = dflt;                                                                      \
    if (!a) return SC_OK;                                                             \
    if (a->kind != want)                                                              \
      return sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' must be " what, name); \
    *out = a->field;                                                                  \
    return SC_OK;                                                                     \
  }
READ_ATTR(sc_read_attr_int, int64_t, SC_ATTR_INT, i, "an int")
READ_ATTR(sc_read_attr_float, double, SC_ATTR_FLOAT, f, "a float")
READ_ATTR(sc_read_attr_string, const char *, SC_ATTR_STRING, s, "a string")
#undef READ_ATTR

sc_status sc_read_attr_choice(sc_graph *g, const sc_node *n, const char *name, const char *dflt,
                              const char *const *names, int count, int *out) {
  const char *s;
  sc_status st = sc_read_attr_string(g, n, name, dflt, &s);
  if (st != SC_OK) return st;
  for (int i = 0; i < count; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return SC_OK;
    }
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "%s '%s' is not supported", name, s);
}
