/* ops.c — expands ops.def into the ops table and looks ops up by name. */
#include "ops.h"

#include <string.h>

#include "op_util.h"

#define sc_op_NOEVAL NULL
const sc_op_info sc_ops[SC_OP_COUNT] = {
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  [SC_OP_##id] = {name,          since,  min_in,        max_in, min_out,               \
                  max_out,       flags,  sc_op_##infer, sc_op_##cost,                  \
                  sc_op_##eval},
#include "ops.def"
#undef OP
};
#undef sc_op_NOEVAL

/* A composite op (SC_OPF_COMPOSITE) has no shape rule of its own: the
 * infer-shapes pass expands it before it would be asked. */
sc_status sc_op_infer_composite(struct sc_graph *g, struct sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                       "%s is expanded into other ops by the infer-shapes pass and has no "
                       "shape rule of its own", sc_op_name(n->op));
}

sc_op sc_op_lookup(const char *onnx_name) {
  for (int i = 0; i < SC_OP_COUNT; i++)
    if (strcmp(sc_ops[i].name, onnx_name) == 0) return (sc_op)i;
  return SC_OP_COUNT;
}
