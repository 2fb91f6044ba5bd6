/* op_reduce.c — reductions (Reduce*, ArgMax/ArgMin, CumSum): shape rules, cost and constant evaluation.
 *
 * STUB: generated placeholders, to be replaced. */
#include "op_util.h"

/* ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp */
sc_status sc_op_infer_reduce(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp, ArgMax, ArgMin, CumSum */
void sc_op_cost_reduce(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp */
sc_status sc_op_eval_reduce(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ArgMax, ArgMin */
sc_status sc_op_infer_argminmax(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* ArgMax, ArgMin */
sc_status sc_op_eval_argminmax(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* CumSum */
sc_status sc_op_infer_cumsum(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* CumSum */
sc_status sc_op_eval_cumsum(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}
