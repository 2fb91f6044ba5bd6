/* dce.c — the dce pass: dead-code elimination by mark and sweep.
 *
 * Marks, walking nodes backwards from the graph outputs, every node one of
 * whose outputs is needed, every node whose op has side effects
 * (SC_OPF_SIDE_EFFECT: Send, Recv — the peer rank waits for them), and
 * every value such a node reads. Sweeps: unmarked
 * nodes get SC_NODE_DEAD; values that are neither graph inputs, graph
 * outputs, read by a live node nor produced by one get SC_VALUE_DEAD (all
 * outputs of a live node stay, even unused ones: a Split keeps its arity).
 * Graph inputs are kept even when unused: they are the program's interface.
 * Ends with sc_graph_compact. */
#include "passes/pass.h"

sc_status sc_pass_dce(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  uint8_t *live = sc_calloc((size_t)g->n_values + 1, 1);
  if (!live) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = 1;
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    sc_node *n = sc_nod(g, i);
    bool needed = !(n->flags & SC_NODE_DEAD) && (unsigned)n->op < SC_OP_COUNT &&
                  (sc_ops[n->op].flags & SC_OPF_SIDE_EFFECT);
    if (!(n->flags & SC_NODE_DEAD))
      for (int32_t j = 0; j < n->n_outputs; j++)
        if (n->outputs[j] >= 0 && live[n->outputs[j]]) needed = true;
    if (!needed) {
      n->flags |= SC_NODE_DEAD;
      continue;
    }
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) live[n->inputs[j]] = 1;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) live[n->outputs[j]] = 1;
  }
  for (int32_t i = 0; i < g->n_values; i++) {
    sc_value *v = sc_val(g, i);
    if (live[i] || (v->flags & SC_VALUE_INPUT)) continue;
    v->flags |= SC_VALUE_DEAD;
  }
  sc_free(live);
  return sc_graph_compact(g);
}
