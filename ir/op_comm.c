/* op_comm.c — shape rules and costs of the collectives (family C of
 * ops.def; attributes and semantics in ir/op_comm.h). They are internal ops:
 * the importer rejects their names in ONNX files, constant folding never
 * evaluates them (NOEVAL), and codegen lowers them to COMM steps
 * (codegen/lower_comm.c) that the runtime runs through a communicator.
 *
 * Cost rule (docs/ops.md copies it): flops 0; bytes = bytes each rank sends
 * with the ring algorithms, n = group size, S = the tensor's bytes:
 *   AllReduce      2 (n-1)/n · S
 *   AllGather      (n-1)/n · S_out   (the gathered tensor)
 *   ReduceScatter  (n-1)/n · S_in    (the tensor before scattering)
 *   AllToAll       (n-1)/n · S_in
 *   Send           S_in;   Recv  S_out (what it receives: a stage's traffic)
 * A group of one rank moves nothing. Without a mesh the cost is 0. */
#include "op_comm.h"

#include <string.h>

#include "op_util.h"
#include "sharding.h"

sc_status sc_op_comm_group(sc_graph *g, const sc_node *n, sc_axes *axes, int64_t *size) {
  *axes = 0;
  *size = 1;
  const sc_mesh *m = sc_graph_mesh(g);
  if (!m) return sc_node_error(g, n, SC_ERR_INVALID, "collective needs a mesh");
  const sc_attr *a = sc_node_attr(n, "axes");
  const char *one = NULL;
  const char *const *names = NULL;
  int64_t count = 0;
  bool p2p = n->op == SC_OP_SEND || n->op == SC_OP_RECV;
  if (!a) {
    if (!p2p) return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'axes' is required");
    one = "pp";
    names = &one;
    count = 1;
  } else if (a->kind == SC_ATTR_STRING) {
    one = a->s;
    names = &one;
    count = 1;
  } else if (a->kind == SC_ATTR_STRINGS) {
    names = a->strings;
    count = a->n;
  } else {
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'axes' must be a list of axis names");
  }
  if (count > SC_MESH_MAX_AXES)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'axes' has %lld names (at most %d)",
                         (long long)count, SC_MESH_MAX_AXES);
  for (int64_t i = 0; i < count; i++) {
    int32_t id = sc_mesh_find_axis(m, names[i] ? names[i] : "");
    if (id < 0) {
      char buf[256];
      sc_mesh_format(m, buf, sizeof buf);
      return sc_node_error(g, n, SC_ERR_INVALID, "axis '%s' is not an axis of the mesh [%s]",
                           names[i] ? names[i] : "", buf);
    }
    if (*axes & (1u << id))
      return sc_node_error(g, n, SC_ERR_INVALID, "axis '%s' is repeated in 'axes'", names[i]);
    *axes |= 1u << id;
  }
  *size = sc_mesh_group_size(m, *axes);
  return SC_OK;
}

sc_status sc_op_comm_reduce(sc_graph *g, const sc_node *n, int32_t *op) {
  const char *s;
  sc_status st = sc_read_attr_string(g, n, "op", "sum", &s);
  if (st != SC_OK) return st;
  if (strcmp(s, "sum") == 0) *op = SC_COMM_OP_SUM;
  else if (strcmp(s, "max") == 0) *op = SC_COMM_OP_MAX;
  else if (strcmp(s, "min") == 0) *op = SC_COMM_OP_MIN;
  else
    return sc_node_error(g, n, SC_ERR_INVALID, "op '%s' is not sum, max or min", s);
  return SC_OK;
}

/* Checks inputs and the group; *x = input 0 (NULL for Recv). */
static sc_status start(sc_graph *g, sc_node *n, const sc_value **x, int64_t *size) {
  sc_status st = sc_check_inputs(g, n);
  if (st != SC_OK) return st;
  sc_axes axes;
  if ((st = sc_op_comm_group(g, n, &axes, size)) != SC_OK) return st;
  *x = n->n_inputs > 0 ? sc_node_input(g, n, 0) : NULL;
  return SC_OK;
}

static sc_status check_reducible(sc_graph *g, const sc_node *n, const sc_value *x) {
  int32_t op;
  sc_status st = sc_op_comm_reduce(g, n, &op);
  if (st != SC_OK) return st;
  if (!sc_dtype_is_float(x->dtype) && !sc_dtype_is_int(x->dtype))
    return sc_node_error(g, n, SC_ERR_INVALID, "input '%s' has dtype %s, which cannot be reduced",
                         x->name, sc_dtype_name(x->dtype));
  return SC_OK;
}

/* The attribute `name` (default 0) as an axis of a rank-r value. */
static sc_status read_axis(sc_graph *g, const sc_node *n, const char *name, int32_t r,
                           int32_t *axis) {
  int64_t v;
  sc_status st = sc_read_attr_int(g, n, name, 0, &v);
  if (st != SC_OK) return st;
  if (r == 0) return sc_node_error(g, n, SC_ERR_INVALID, "a scalar has no axis to split");
  return sc_norm_axis(g, n, v, r, axis);
}

sc_status sc_op_infer_all_reduce(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = check_reducible(g, n, x);
  if (st != SC_OK) return st;
  return sc_same_as_input(g, n, 0, 0);
}

sc_status sc_op_infer_all_gather(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  int32_t axis;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = read_axis(g, n, "axis", x->rank, &axis);
  if (st != SC_OK) return st;
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  if (!sc_mul_i64(dims[axis], size, &dims[axis]))
    return sc_node_error(g, n, SC_ERR_LIMIT, "gathered dim %d overflows", (int)axis);
  return sc_set_output(g, n, 0, x->dtype, x->rank, dims);
}

sc_status sc_op_infer_reduce_scatter(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  int32_t axis;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = check_reducible(g, n, x);
  if (st == SC_OK) st = read_axis(g, n, "axis", x->rank, &axis);
  if (st != SC_OK) return st;
  if (x->dims[axis] % size != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "dim %d of '%s' (%lld) is not divisible by the group size %lld",
                         (int)axis, x->name, (long long)x->dims[axis], (long long)size);
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] /= size;
  return sc_set_output(g, n, 0, x->dtype, x->rank, dims);
}

sc_status sc_op_infer_all_to_all(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  int32_t split, concat;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = read_axis(g, n, "split_axis", x->rank, &split);
  if (st == SC_OK) st = read_axis(g, n, "concat_axis", x->rank, &concat);
  if (st != SC_OK) return st;
  if (x->dims[split] % size != 0)
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "split dim %d of '%s' (%lld) is not divisible by the group size %lld",
                         (int)split, x->name, (long long)x->dims[split], (long long)size);
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[split] /= size;
  if (!sc_mul_i64(dims[concat], size, &dims[concat]))
    return sc_node_error(g, n, SC_ERR_LIMIT, "concatenated dim %d overflows", (int)concat);
  return sc_set_output(g, n, 0, x->dtype, x->rank, dims);
}

/* peer_stage in [0, size), or shift with 0 < |shift| < size; tag in
 * [0, 32767]. */
static sc_status check_p2p(sc_graph *g, const sc_node *n, int64_t size) {
  int64_t peer, tag, shift;
  sc_status st = sc_read_attr_int(g, n, "peer_stage", -1, &peer);
  if (st == SC_OK) st = sc_read_attr_int(g, n, "tag", 0, &tag);
  if (st == SC_OK) st = sc_read_attr_int(g, n, "shift", 0, &shift);
  if (st != SC_OK) return st;
  bool has_peer = sc_node_attr(n, "peer_stage") != NULL;
  if (has_peer && sc_node_attr(n, "shift"))
    return sc_node_error(g, n, SC_ERR_INVALID, "attributes 'peer_stage' and 'shift' exclude "
                                               "each other");
  if (sc_node_attr(n, "shift") && (shift == 0 || shift <= -size || shift >= size))
    return sc_node_error(g, n, SC_ERR_INVALID,
                         "shift %lld is not in (-%lld, %lld) without 0 (a group of %lld)",
                         (long long)shift, (long long)size, (long long)size, (long long)size);
  if (!has_peer && !sc_node_attr(n, "shift"))
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'peer_stage' (or 'shift') is required");
  if (has_peer && (peer < 0 || peer >= size))
    return sc_node_error(g, n, SC_ERR_INVALID, "peer_stage %lld is outside the group (size %lld)",
                         (long long)peer, (long long)size);
  if (tag < 0 || tag > 32767)
    return sc_node_error(g, n, SC_ERR_INVALID, "tag %lld is outside [0, 32767]", (long long)tag);
  return SC_OK;
}

sc_status sc_op_infer_send(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = check_p2p(g, n, size);
  if (st != SC_OK) return st;
  int64_t zero = 0;
  return sc_set_output(g, n, 0, x->dtype, 1, &zero);
}

sc_status sc_op_infer_recv(sc_graph *g, sc_node *n) {
  const sc_value *x;
  int64_t size;
  sc_status st = start(g, n, &x, &size);
  if (st == SC_OK) st = check_p2p(g, n, size);
  const char *tname;
  if (st == SC_OK) st = sc_read_attr_string(g, n, "dtype", "f32", &tname);
  if (st != SC_OK) return st;
  sc_dtype t = sc_dtype_parse(tname);
  if (t == SC_DTYPE_COUNT || t == SC_DTYPE_UNDEF || sc_dtype_size(t) == 0)
    return sc_node_error(g, n, SC_ERR_INVALID, "dtype '%s' is not a dtype with a size", tname);
  const sc_attr *a = sc_node_attr(n, "shape");
  if (a && a->kind != SC_ATTR_INTS)
    return sc_node_error(g, n, SC_ERR_INVALID, "attribute 'shape' must be a list of ints");
  int64_t rank = a ? a->n : 0;
  if (rank > SC_MAX_RANK)
    return sc_node_error(g, n, SC_ERR_LIMIT, "shape has rank %lld (at most %d)", (long long)rank,
                         SC_MAX_RANK);
  return sc_set_output(g, n, 0, t, (int32_t)rank, a ? a->ints : NULL);
}

static double bytes_of(const sc_value *v) {
  int64_t b = v ? sc_value_bytes(v) : -1;
  return b > 0 ? (double)b : 0.0;
}

void sc_op_cost_comm(sc_graph *g, const sc_node *n, sc_cost *c) {
  c->flops = 0;
  c->bytes = 0;
  const sc_mesh *m = sc_graph_mesh(g);
  if (!m) return;
  sc_axes axes = 0;
  const sc_attr *a = sc_node_attr(n, "axes");
  if (a && a->kind == SC_ATTR_STRINGS) {
    for (int64_t i = 0; i < a->n; i++) {
      int32_t id = sc_mesh_find_axis(m, a->strings[i] ? a->strings[i] : "");
      if (id >= 0) axes |= 1u << id;
    }
  } else if (a && a->kind == SC_ATTR_STRING) {
    int32_t id = sc_mesh_find_axis(m, a->s ? a->s : "");
    if (id >= 0) axes |= 1u << id;
  } else if (!a) {
    int32_t id = sc_mesh_find_axis(m, "pp");
    if (id >= 0) axes |= 1u << id;
  }
  double nr = (double)sc_mesh_group_size(m, axes);
  const sc_value *x = n->n_inputs > 0 ? sc_node_input((sc_graph *)g, n, 0) : NULL;
  const sc_value *y = sc_node_output((sc_graph *)g, n, 0);
  double f = (nr - 1.0) / nr;
  switch (n->op) {
  case SC_OP_ALL_REDUCE: c->bytes = 2.0 * f * bytes_of(x); break;
  case SC_OP_ALL_GATHER: c->bytes = f * bytes_of(y); break;
  case SC_OP_REDUCE_SCATTER: c->bytes = f * bytes_of(x); break;
  case SC_OP_ALL_TO_ALL: c->bytes = f * bytes_of(x); break;
  case SC_OP_SEND: c->bytes = bytes_of(x); break;
  case SC_OP_RECV: c->bytes = bytes_of(y); break;
  default: break;
  }
}
