/* fold.c — the fold pass: constant folding.
 *
 * A live node whose outputs are all constants with data (infer-shapes
 * evaluated it) is removed: its outputs stay, as constants without a
 * producer. A node not evaluated yet whose inputs are all constants with data,
 * whose op has an eval function and whose outputs have known shapes of at
 * most SC_FOLD_MAX_ELEMENTS elements is evaluated here and removed. Nodes are
 * visited in topological order, so chains fold in one sweep. Constants the
 * folded nodes read are left for dce. A graph output that becomes constant
 * stays a graph output (a constant value). Ends with sc_graph_compact. */
#include "ir/op_util.h"
#include "passes/pass.h"


static bool outputs_constant(sc_graph *g, const sc_node *n) {
  bool any = false;
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    if (!v) continue;
    if (!sc_value_has_data(v)) return false;
    any = true;
  }
  return any;
}

sc_status sc_pass_fold(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sc_node *n = sc_nod(g, i);
    if (n->flags & SC_NODE_DEAD) continue;
    if (!outputs_constant(g, n)) {
      bool evaluated;
      sc_status st = sc_pass_try_eval(g, n, &evaluated);
      if (st != SC_OK) return st;
      if (!evaluated) continue;
    }
    n->flags |= SC_NODE_DEAD;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) sc_val(g, n->outputs[j])->producer = -1;
  }
  return sc_graph_compact(g);
}
