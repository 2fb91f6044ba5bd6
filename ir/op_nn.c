/* op_nn.c — neural-network ops (MatMul, Gemm, Conv, pooling, normalisations, softmax): shape rules, cost and constant evaluation.
 *
 * STUB: generated placeholders, to be replaced. */
#include "op_util.h"

/* MatMul */
sc_status sc_op_infer_matmul(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* MatMul */
void sc_op_cost_matmul(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* MatMul */
sc_status sc_op_eval_matmul(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Gemm */
sc_status sc_op_infer_gemm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Gemm */
void sc_op_cost_gemm(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* Gemm */
sc_status sc_op_eval_gemm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Conv */
sc_status sc_op_infer_conv(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Conv */
void sc_op_cost_conv(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* MaxPool, AveragePool */
sc_status sc_op_infer_pool(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool */
void sc_op_cost_pool(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* GlobalAveragePool, GlobalMaxPool */
sc_status sc_op_infer_global_pool(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* BatchNormalization */
sc_status sc_op_infer_batchnorm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization, Softmax, LogSoftmax */
void sc_op_cost_norm(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* InstanceNormalization */
sc_status sc_op_infer_instancenorm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* LayerNormalization */
sc_status sc_op_infer_layernorm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* GroupNormalization */
sc_status sc_op_infer_groupnorm(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Softmax, LogSoftmax */
sc_status sc_op_infer_softmax(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Softmax, LogSoftmax */
sc_status sc_op_eval_softmax(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}
