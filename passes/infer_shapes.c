/* infer_shapes.c — the infer-shapes pass: a static dtype and shape for every
 * value, in node order (the graph is topologically sorted).
 *
 * For each live node: check that the graph's opset defines the op, then call
 * the op's shape rule (sc_ops[op].infer). When the op can be evaluated (it
 * has an eval function), every present input is a constant with data and
 * every output is small (at most SC_FOLD_MAX_ELEMENTS elements), the node is
 * evaluated right away: its outputs become constants with data, so that
 * data-dependent shapes downstream (Reshape's shape, Slice's starts, ...)
 * resolve. The node itself stays; the fold pass removes it.
 *
 * The first error stops the pass; the op's rule has set g->diag. An eval
 * that reports SC_ERR_UNSUPPORTED or SC_ERR_LIMIT (a dtype or size its kernel
 * does not handle) is not an error: the node is left unevaluated. Shape and
 * Size are evaluated from their input's static shape alone.
 *
 * A composite op (SC_OPF_COMPOSITE) is replaced by its expansion
 * (passes/composite.c), built for its inputs' shapes and appended to the
 * graph; the loop reaches the new nodes later (their shapes are already
 * set; constant ones are evaluated then), and the pass ends by compacting
 * and re-sorting the graph, so that no later pass sees the op. A composite
 * op, and the ops of an expansion, are not checked against the graph's
 * opset: they mean the same at every one. */

#include "ir/op_util.h"
#include "passes/composite.h"
#include "passes/pass.h"

/* True when node n can be evaluated now (shapes of its outputs known). */
static bool can_eval(sc_graph *g, const sc_node *n) {
  if (!sc_ops[n->op].eval) return false;
  /* Shape and Size read only their input's static shape, not its data: this
   * is what lets shape subgraphs (Shape -> Gather -> Concat -> Reshape)
   * fold away once the dims are bound. */
  bool shape_only = n->op == SC_OP_SHAPE || n->op == SC_OP_SIZE;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    if (!v) continue;
    if (shape_only ? sc_value_numel(v) < 0 : !sc_value_has_data(v)) return false;
  }
  bool any = false;
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    if (!v) continue;
    int64_t numel = sc_value_numel(v);
    if (numel < 0 || numel > SC_FOLD_MAX_ELEMENTS || v->dtype == SC_DTYPE_UNDEF ||
        sc_dtype_size(v->dtype) == 0)
      return false;
    any = true;
  }
  return any;
}

/* An eval that reports SC_ERR_UNSUPPORTED or SC_ERR_LIMIT (a dtype or size
 * its kernel does not handle) leaves the node unevaluated: partial results
 * are undone and the diagnostic cleared. */
sc_status sc_pass_try_eval(sc_graph *g, sc_node *n, bool *evaluated) {
  *evaluated = false;
  if (!can_eval(g, n)) return SC_OK;
  sc_status st = sc_ops[n->op].eval(g, n);
  if (st == SC_OK) {
    bool all = true;
    for (int32_t i = 0; i < n->n_outputs; i++) {
      const sc_value *v = sc_node_output(g, n, i);
      if (v && !sc_value_has_data(v)) all = false;
    }
    if (all) {
      *evaluated = true;
      return SC_OK;
    }
    /* an eval that declined without an error: treat as not evaluated */
  } else if (st != SC_ERR_UNSUPPORTED && st != SC_ERR_LIMIT) {
    if (g->diag.status == SC_OK) sc_node_error(g, n, st, "evaluation failed");
    return st;
  } else {
    sc_diag_clear(&g->diag);
  }
  for (int32_t i = 0; i < n->n_outputs; i++) {
    sc_value *v = sc_node_output(g, n, i);
    if (!v) continue;
    v->flags &= ~(uint32_t)SC_VALUE_CONST;
    v->data = NULL;
    v->data_bytes = 0;
    v->data_kind = SC_DATA_NONE;
  }
  return SC_OK;
}

/* The narrow dtypes (float8, float4, 4/2-bit integers: ir/dtype.h) are
 * storage types: ONNX lets only casts, quantization (composite: expanded
 * into casts) and data movement take them, and so does shardc (the
 * collectives that move bytes too: a partitioned graph gathers them). */
static bool takes_narrow(sc_op op) {
  switch (op) {
  case SC_OP_CAST: case SC_OP_CAST_LIKE: case SC_OP_BIT_CAST: case SC_OP_IDENTITY:
  case SC_OP_CONSTANT: case SC_OP_CONSTANT_OF_SHAPE: case SC_OP_SHAPE: case SC_OP_SIZE:
  case SC_OP_RESHAPE: case SC_OP_FLATTEN: case SC_OP_SQUEEZE: case SC_OP_UNSQUEEZE:
  case SC_OP_TRANSPOSE: case SC_OP_CONCAT: case SC_OP_SPLIT: case SC_OP_SLICE:
  case SC_OP_GATHER: case SC_OP_GATHER_ELEMENTS: case SC_OP_GATHER_ND: case SC_OP_EXPAND:
  case SC_OP_TILE: case SC_OP_PAD: case SC_OP_WHERE:
  case SC_OP_ALL_GATHER: case SC_OP_ALL_TO_ALL: case SC_OP_SEND: case SC_OP_RECV: /* bytes */
    return true;
  default:
    return false;
  }
}

static sc_status check_narrow(sc_graph *g, const sc_node *n) {
  if (takes_narrow(n->op)) return SC_OK;
  for (int32_t j = 0; j < n->n_inputs + n->n_outputs; j++) {
    const sc_value *v = j < n->n_inputs ? sc_node_input(g, n, j)
                                        : sc_node_output(g, n, j - n->n_inputs);
    if (v && sc_dtype_is_narrow(v->dtype))
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                           "%s of %s ('%s'): only casts, quantization and data movement "
                           "take the float8, float4 and 4/2-bit integer types",
                           sc_ops[n->op].name, sc_dtype_name(v->dtype), v->name);
  }
  return SC_OK;
}

sc_status sc_pass_infer_shapes(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  bool expanded = false;
  int32_t n0 = g->n_nodes; /* nodes from n0 on are expansions' */
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sc_node *n = sc_nod(g, i);
    if (n->flags & SC_NODE_DEAD) continue;
    if ((unsigned)n->op >= SC_OP_COUNT)
      return sc_node_error(g, n, SC_ERR_INVALID, "unknown op %d", (int)n->op);
    const sc_op_info *info = &sc_ops[n->op];
    if (info->since > g->opset && i < n0 && !(info->flags & SC_OPF_COMPOSITE) &&
        !sc_node_attr(n, SC_ATTR_DERIVED))
      return sc_node_error(g, n, SC_ERR_UNSUPPORTED,
                           "%s needs opset %d or later; the graph is opset %lld",
                           info->name, info->since, (long long)g->opset);
    if ((info->flags & SC_OPF_COMPOSITE) || sc_expands_here(g, n)) {
      /* its expansion is appended (shapes inferred) and visited again below */
      sc_status st = sc_expand_composite(g, i);
      if (st != SC_OK) return st;
      expanded = true;
      continue;
    }
    sc_status st = info->infer(g, n);
    if (st == SC_OK) st = check_narrow(g, n);
    if (st != SC_OK) {
      if (g->diag.status == SC_OK) sc_node_error(g, n, st, "shape inference failed");
      return st;
    }
    for (int32_t j = 0; j < n->n_outputs; j++) {
      const sc_value *v = sc_node_output(g, n, j);
      if (v && (v->rank < 0 || v->dtype == SC_DTYPE_UNDEF))
        return sc_node_error(g, n, SC_ERR_INVALID,
                             "shape rule left output '%s' without a shape", v->name);
    }
    bool evaluated;
    st = sc_pass_try_eval(g, n, &evaluated);
    if (st != SC_OK) return st;
  }
  if (!expanded) return SC_OK;
  sc_status st = sc_graph_compact(g);
  return st == SC_OK ? sc_graph_toposort(g) : st;
}
