/* op_elementwise.c — elementwise unary, binary (broadcasting) and n-ary ops: shape rules, cost and constant evaluation.
 *
 * STUB: generated placeholders, to be replaced. */
#include "op_util.h"

/* Abs, Neg, Exp, Log, Sqrt, Reciprocal, Relu, Sigmoid, Tanh, Erf, Sin, Cos, Floor, Ceil, Round, Sign, Not, Identity, Softplus, HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Mish, Gelu */
sc_status sc_op_infer_unary(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Abs, Neg, Exp, Log, Sqrt, Reciprocal, Relu, Sigmoid, Tanh, Erf, Sin, Cos, Floor, Ceil, Round, Sign, Not, Identity, Softplus, HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Mish, Gelu, IsNaN, IsInf, Cast, CastLike, Clip, Dropout, Add, Sub, Mul, Div, Pow, Mod, PRelu, Max, Min, Sum, Mean, Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Where */
void sc_op_cost_elementwise(sc_graph *g, const sc_node *n, sc_cost *c) {
  (void)g; (void)n; c->flops = 0; c->bytes = 0;
}

/* Abs, Neg, Exp, Log, Sqrt, Reciprocal, Relu, Sigmoid, Tanh, Erf, Sin, Cos, Floor, Ceil, Round, Sign, Not, Identity, Softplus, HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Mish, Gelu, IsNaN, IsInf */
sc_status sc_op_eval_unary(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* IsNaN, IsInf */
sc_status sc_op_infer_unary_bool(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Cast, CastLike */
sc_status sc_op_infer_cast(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Cast, CastLike */
sc_status sc_op_eval_cast(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Clip */
sc_status sc_op_infer_clip(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Clip */
sc_status sc_op_eval_clip(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Dropout */
sc_status sc_op_infer_dropout(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Dropout */
sc_status sc_op_eval_dropout(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Add, Sub, Mul, Div, Mod, PRelu */
sc_status sc_op_infer_binary(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Add, Sub, Mul, Div, Pow, Mod, PRelu, Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor */
sc_status sc_op_eval_binary(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Pow */
sc_status sc_op_infer_pow(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Max, Min, Sum, Mean */
sc_status sc_op_infer_variadic(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Max, Min, Sum, Mean */
sc_status sc_op_eval_variadic(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Equal, Less, LessOrEqual, Greater, GreaterOrEqual */
sc_status sc_op_infer_compare(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* And, Or, Xor */
sc_status sc_op_infer_logical(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Where */
sc_status sc_op_infer_where(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}

/* Where */
sc_status sc_op_eval_where(sc_graph *g, sc_node *n) {
  return sc_node_error(g, n, SC_ERR_UNSUPPORTED, "not implemented yet");
}
