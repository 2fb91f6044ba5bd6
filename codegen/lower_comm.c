/* lower_comm.c — lowering of the collectives (ir/op_comm.h) to COMM steps.
 *
 * lw_comm is a STEP lowering: it resolves the node's group (a mask over the
 * graph's mesh axes and its size), takes the buffers of the input and the
 * output, and appends one SC_STEP_COMM step (codegen/program.h). It also
 * copies the graph's mesh into the program (p->mesh), which the session
 * needs to build the communicator of each group.
 *
 * Layouts: the communicators gather and scatter along the leading dim
 * (runtime/comm.h). For a non-leading dim d of a tensor X, view X as
 * [outer = prod dims[0..d), n, inner]: the step then carries `pack` /
 * `unpack` scratch TEMP buffers (planned by the memory plan like any other)
 * and the extents, and the runtime does the strided copies around the
 * communicator call. With outer = 1 the layouts agree and no scratch is
 * used. A gather's unpack and a reduce-scatter's pack hold at most
 * SC_COMM_SCRATCH_CAP_BYTES (at least one row of `outer`): the step gathers
 * or reduces that many rows a call (rows; chunk_scratch). Send's output is
 * a 0-element token and gets no buffer. */
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/op_comm.h"
#include "ir/sharding.h"

static int64_t prod(const int64_t *dims, int32_t lo, int32_t hi) {
  int64_t r = 1;
  for (int32_t d = lo; d < hi; d++) r *= dims[d]; /* bounded: numel was checked */
  return r;
}

static sc_status graph_error(sc_lower_ctx *cx, const sc_node *n) {
  return sc_lower_error(cx, n, cx->g->diag.status != SC_OK ? cx->g->diag.status : SC_ERR_INVALID,
                        "%s", cx->g->diag.msg[0] ? cx->g->diag.msg : "bad collective");
}

/* Normalised integer attribute `name` as an axis of rank r. */
static int32_t axis_attr(sc_lower_ctx *cx, const sc_node *n, const char *name, int32_t r) {
  int64_t v = sc_attr_int(cx->g, n, name, 0);
  if (v < 0) v += r;
  return v >= 0 && v < r ? (int32_t)v : -1;
}

/* The scratch `name` of a gather's unpack or a reduce-scatter's pack over
 * `outer` rows of n * inner elements of dtype t: as many rows a call as fit
 * SC_COMM_SCRATCH_CAP_BYTES, at least one (c->rows, 0 when all fit), and
 * a buffer of that many rows. Returns its id, or -1 out of memory. */
static int32_t chunk_scratch(sc_lower_ctx *cx, sc_comm_step *c, const char *name, sc_dtype t,
                             int64_t outer, int64_t inner) {
  int64_t row = c->group_size * inner * (int64_t)sc_dtype_size(t);
  int64_t rows = row > 0 ? SC_COMM_SCRATCH_CAP_BYTES / row : outer;
  if (rows < 1) rows = 1;
  c->rows = rows < outer ? rows : 0;
  int64_t total = (rows < outer ? rows : outer) * c->group_size * inner;
  return sc_lower_scratch(cx, name, t, 1, &total);
}

static sc_status comm_build(sc_lower_ctx *cx, const sc_node *n) {
  sc_graph *g = cx->g;
  sc_axes axes;
  int64_t size;
  if (sc_op_comm_group(g, n, &axes, &size) != SC_OK) return graph_error(cx, n);
  const sc_mesh *m = sc_graph_mesh(g);
  if (cx->p->mesh.n_axes == 0) cx->p->mesh = *m;
  else if (!sc_mesh_equal(&cx->p->mesh, m))
    return sc_lower_error(cx, n, SC_ERR_INVALID, "collectives over two different meshes");
  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_COMM;
  st.kernel = -1;
  st.origin = n->name;
  sc_comm_step *c = &st.comm;
  c->in = c->out = c->pack = c->unpack = -1;
  c->axes = axes;
  c->group_size = size;
  const sc_value *x = n->n_inputs > 0 ? sc_node_input(g, n, 0) : NULL;
  const sc_value *y = sc_node_output(g, n, 0);
  if (x && (c->in = sc_lower_buffer_of(cx, n->inputs[0])) < 0)
    return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  if (n->op != SC_OP_SEND && (c->out = sc_lower_buffer_of(cx, n->outputs[0])) < 0)
    return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  int32_t reduce = SC_COMM_OP_SUM;
  if ((n->op == SC_OP_ALL_REDUCE || n->op == SC_OP_REDUCE_SCATTER) &&
      sc_op_comm_reduce(g, n, &reduce) != SC_OK)
    return graph_error(cx, n);
  c->reduce = reduce;
  int64_t numel_x = x ? sc_value_numel(x) : 0;
  switch (n->op) {
  case SC_OP_ALL_REDUCE:
    c->kind = SC_COMM_ALL_REDUCE;
    c->count = numel_x;
    break;
  case SC_OP_ALL_GATHER: {
    c->kind = SC_COMM_ALL_GATHER;
    c->count = numel_x;
    int32_t d = axis_attr(cx, n, "axis", x->rank);
    if (d < 0) return sc_lower_error(cx, n, SC_ERR_INVALID, "bad axis");
    c->unpack_outer = prod(x->dims, 0, d);
    c->unpack_inner = prod(x->dims, d, x->rank);
    if (c->unpack_outer > 1 &&
        (c->unpack = chunk_scratch(cx, c, "gather", y->dtype, c->unpack_outer,
                                   c->unpack_inner)) < 0)
      return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
    break;
  }
  case SC_OP_REDUCE_SCATTER: {
    c->kind = SC_COMM_REDUCE_SCATTER;
    c->count = numel_x / size;
    int32_t d = axis_attr(cx, n, "axis", x->rank);
    if (d < 0) return sc_lower_error(cx, n, SC_ERR_INVALID, "bad axis");
    c->pack_outer = prod(x->dims, 0, d);
    c->pack_inner = x->dims[d] / size * prod(x->dims, d + 1, x->rank);
    if (c->pack_outer > 1 &&
        (c->pack = chunk_scratch(cx, c, "scatter", x->dtype, c->pack_outer, c->pack_inner)) < 0)
      return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
    break;
  }
  case SC_OP_ALL_TO_ALL: {
    c->kind = SC_COMM_ALL_TO_ALL;
    c->count = numel_x / size;
    int32_t s = axis_attr(cx, n, "split_axis", x->rank);
    int32_t t = axis_attr(cx, n, "concat_axis", x->rank);
    if (s < 0 || t < 0) return sc_lower_error(cx, n, SC_ERR_INVALID, "bad axis");
    int64_t chunk[SC_MAX_RANK];
    memcpy(chunk, x->dims, sizeof chunk);
    chunk[s] /= size;
    c->pack_outer = prod(x->dims, 0, s);
    c->pack_inner = prod(chunk, s, x->rank);
    c->unpack_outer = prod(chunk, 0, t);
    c->unpack_inner = prod(chunk, t, x->rank);
    /* all_to_all needs send and recv apart: in and out are both live here */
    if (c->pack_outer > 1 &&
        (c->pack = sc_lower_scratch(cx, "a2a_send", x->dtype, 1, &numel_x)) < 0)
      return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
    if (c->unpack_outer > 1 &&
        (c->unpack = sc_lower_scratch(cx, "a2a_recv", x->dtype, 1, &numel_x)) < 0)
      return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
    break;
  }
  case SC_OP_SEND:
  case SC_OP_RECV:
    c->kind = n->op == SC_OP_SEND ? SC_COMM_SEND : SC_COMM_RECV;
    c->count = n->op == SC_OP_SEND ? numel_x : sc_value_numel(y);
    c->shift = (int32_t)sc_attr_int(g, n, "shift", 0);
    c->peer = c->shift ? -1 : (int32_t)sc_attr_int(g, n, "peer_stage", 0);
    c->tag = (int32_t)sc_attr_int(g, n, "tag", 0);
    break;
  default:
    return sc_lower_error(cx, n, SC_ERR_INVALID, "not a collective");
  }
  return sc_lower_add_step(cx, &st);
}

const sc_lowering sc_lw_comm = {SC_LOWER_STEP, NULL, comm_build};
