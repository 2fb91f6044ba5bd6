/* op_shape.c — shape computation and data movement (Shape, Reshape, Gather, Slice, Concat, ...): shape rules, cost and constant evaluation.
 *
 * STUB: generated placeholders, to be replaced. */
#include "op_util.h"

/* Shape */
sc_status sc_op_infer_shape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Shape, Size, Constant */
void sc_op_cost_shape_op(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* Shape */
sc_status sc_op_eval_shape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Size */
sc_status sc_op_infer_size(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Size */
sc_status sc_op_eval_size(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Constant */
sc_status sc_op_infer_constant(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Constant */
sc_status sc_op_eval_constant(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Reshape */
sc_status sc_op_infer_reshape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterND, ScatterElements, Expand, Tile, Range, ConstantOfShape, Trilu, Pad, NonZero, OneHot */
void sc_op_cost_move(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* Reshape, Flatten, Squeeze, Unsqueeze */
sc_status sc_op_eval_reshape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Flatten */
sc_status sc_op_infer_flatten(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Squeeze */
sc_status sc_op_infer_squeeze(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Unsqueeze */
sc_status sc_op_infer_unsqueeze(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Transpose */
sc_status sc_op_infer_transpose(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Transpose */
sc_status sc_op_eval_transpose(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Concat */
sc_status sc_op_infer_concat(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Concat */
sc_status sc_op_eval_concat(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Split */
sc_status sc_op_infer_split(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Split */
sc_status sc_op_eval_split(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Slice */
sc_status sc_op_infer_slice(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Slice */
sc_status sc_op_eval_slice(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Gather */
sc_status sc_op_infer_gather(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Gather */
sc_status sc_op_eval_gather(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* GatherElements */
sc_status sc_op_infer_gather_elements(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* GatherElements */
sc_status sc_op_eval_gather_elements(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* GatherND */
sc_status sc_op_infer_gather_nd(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* GatherND */
sc_status sc_op_eval_gather_nd(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ScatterND */
sc_status sc_op_infer_scatter_nd(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ScatterND */
sc_status sc_op_eval_scatter_nd(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ScatterElements */
sc_status sc_op_infer_scatter_elements(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ScatterElements */
sc_status sc_op_eval_scatter_elements(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Expand */
sc_status sc_op_infer_expand(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Expand */
sc_status sc_op_eval_expand(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Tile */
sc_status sc_op_infer_tile(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Tile */
sc_status sc_op_eval_tile(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Range */
sc_status sc_op_infer_range(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Range */
sc_status sc_op_eval_range(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ConstantOfShape */
sc_status sc_op_infer_constant_of_shape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ConstantOfShape */
sc_status sc_op_eval_constant_of_shape(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Trilu */
sc_status sc_op_infer_trilu(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Trilu */
sc_status sc_op_eval_trilu(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Pad */
sc_status sc_op_infer_pad(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Pad */
sc_status sc_op_eval_pad(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* NonZero */
sc_status sc_op_infer_nonzero(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* NonZero */
sc_status sc_op_eval_nonzero(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* OneHot */
sc_status sc_op_infer_onehot(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* OneHot */
sc_status sc_op_eval_onehot(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}
