/* verify.c — the IR verifier: checks the invariants listed in ir.h.
 *
 * Run between passes (opts->verify) and by tests. It reads the graph and
 * never changes it; the first broken invariant is recorded in g->diag, naming
 * the node where there is one. Checked: ids in range; no DEAD flags (the
 * graph is compacted); op and arity within the ops table; each value has at
 * most one producer and value->producer agrees with the node's outputs;
 * initializers and graph inputs have no producer; node order is topological
 * (every input is a graph input, a constant or an output of an earlier node);
 * graph outputs are defined; names are non-empty and unique (values and
 * nodes); constant data has exactly numel * dtype-size bytes; with
 * require_shapes, every value has a dtype and a static shape.
 *
 * A value with data may still have a producer: infer-shapes evaluates nodes
 * whose inputs are constant and leaves their removal to fold. */
#include <string.h>

#include "ir.h"
#include "name_index.h"

/* Node names unique: open-addressing set of node ids. */
static sc_status check_node_names(sc_graph *g) {
  uint32_t cap = 16;
  while (cap < (uint32_t)g->n_nodes * 2 + 2) cap *= 2;
  int32_t *set = sc_malloc((size_t)cap * sizeof *set);
  if (!set) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < cap; i++) set[i] = -1;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < g->n_nodes && st == SC_OK; i++) {
    const sc_node *n = &g->nodes[i];
    uint32_t h = sc_name_hash(n->name) & (cap - 1);
    while (set[h] >= 0) {
      if (strcmp(g->nodes[set[h]].name, n->name) == 0) {
        st = sc_node_error(g, n, SC_ERR_INVALID, "node name used by nodes %d and %d",
                           set[h], i);
        break;
      }
      h = (h + 1) & (cap - 1);
    }
    set[h] = i;
  }
  sc_free(set);
  return st;
}

static sc_status check_shape(sc_graph *g, const sc_value *v) {
  const sc_node *p = v->producer >= 0 ? &g->nodes[v->producer] : NULL;
  const char *what = NULL;
  if (v->dtype == SC_DTYPE_UNDEF || (unsigned)v->dtype >= SC_DTYPE_COUNT)
    what = "has no dtype";
  else if (v->rank < 0)
    what = "has no shape";
  else
    for (int32_t d = 0; d < v->rank; d++)
      if (v->dims[d] < 0) what = "has an unknown dim";
  if (!what) return SC_OK;
  if (p) return sc_node_error(g, p, SC_ERR_INVALID, "output '%s' %s", v->name, what);
  return sc_graph_error(g, SC_ERR_INVALID, "value '%s' %s", v->name, what);
}

sc_status sc_graph_verify(sc_graph *g, bool require_shapes) {
  int32_t nv = g->n_values;
  /* values */
  for (int32_t i = 0; i < nv; i++) {
    const sc_value *v = &g->values[i];
    if (!v->name || !v->name[0])
      return sc_graph_error(g, SC_ERR_INVALID, "value %d has no name", i);
    if (sc_graph_find_value(g, v->name) != i)
      return sc_graph_error(g, SC_ERR_INVALID,
                            "value name '%s' is not unique (or the name index is "
                            "stale)", v->name);
    if (v->flags & SC_VALUE_DEAD)
      return sc_graph_error(g, SC_ERR_INVALID,
                            "value '%s' is flagged dead but was not compacted away",
                            v->name);
    if (v->producer < -1 || v->producer >= g->n_nodes)
      return sc_graph_error(g, SC_ERR_INVALID, "value '%s': producer %d out of range",
                            v->name, v->producer);
    if (v->rank > SC_MAX_RANK || v->rank < -1)
      return sc_graph_error(g, SC_ERR_INVALID, "value '%s': rank %d out of range",
                            v->name, v->rank);
    if ((v->flags & (SC_VALUE_INPUT | SC_VALUE_PARAM)) && v->producer >= 0)
      return sc_node_error(g, &g->nodes[v->producer], SC_ERR_INVALID,
                           "writes '%s', which is a graph input or initializer",
                           v->name);
    if (v->data) {
      int64_t want = sc_value_bytes(v);
      if (!(v->flags & SC_VALUE_CONST))
        return sc_graph_error(g, SC_ERR_INVALID, "value '%s' has data but is not "
                              "flagged constant", v->name);
      if (want < 0 || (uint64_t)want != v->data_bytes)
        return sc_graph_error(g, SC_ERR_INVALID,
                              "constant '%s' has %llu data bytes; its shape needs %lld",
                              v->name, (unsigned long long)v->data_bytes,
                              (long long)want);
    } else if (v->data_bytes != 0) {
      return sc_graph_error(g, SC_ERR_INVALID, "value '%s': data_bytes without data",
                            v->name);
    }
    if (require_shapes) {
      sc_status st = check_shape(g, v);
      if (st != SC_OK) return st;
    }
  }
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (g->inputs[i] < 0 || g->inputs[i] >= nv ||
        !(g->values[g->inputs[i]].flags & SC_VALUE_INPUT))
      return sc_graph_error(g, SC_ERR_INVALID, "graph input %d is not a valid input",
                            i);
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] < 0 || g->outputs[i] >= nv)
      return sc_graph_error(g, SC_ERR_INVALID, "graph output %d out of range", i);

  /* nodes: arity, producers, order */
  uint8_t *defined = sc_calloc((size_t)nv + 1, 1);
  if (!defined) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  sc_status st = SC_OK;
  for (int32_t i = 0; i < nv; i++) {
    const sc_value *v = &g->values[i];
    if (v->producer < 0 && (v->flags & (SC_VALUE_INPUT | SC_VALUE_CONST | SC_VALUE_OUTER))) defined[i] = 1;
  }
  for (int32_t i = 0; i < g->n_nodes && st == SC_OK; i++) {
    const sc_node *n = &g->nodes[i];
    if (!n->name || !n->name[0]) {
      st = sc_graph_error(g, SC_ERR_INVALID, "node %d has no name", i);
      break;
    }
    if ((unsigned)n->op >= SC_OP_COUNT) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "unknown op %d", (int)n->op);
      break;
    }
    if (n->flags & SC_NODE_DEAD) {
      st = sc_node_error(g, n, SC_ERR_INVALID,
                         "flagged dead but was not compacted away");
      break;
    }
    const sc_op_info *info = &sc_ops[n->op];
    if (n->n_inputs < info->min_in || (info->max_in >= 0 && n->n_inputs > info->max_in)) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "%d inputs (the op takes %d..%d)",
                         n->n_inputs, info->min_in, info->max_in);
      break;
    }
    if (n->n_outputs < info->min_out ||
        (info->max_out >= 0 && n->n_outputs > info->max_out)) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "%d outputs (the op gives %d..%d)",
                         n->n_outputs, info->min_out, info->max_out);
      break;
    }
    if (n->n_attrs < 0 || (n->n_attrs > 0 && !n->attrs)) {
      st = sc_node_error(g, n, SC_ERR_INVALID, "bad attribute list");
      break;
    }
    for (int32_t j = 0; j < n->n_inputs && st == SC_OK; j++) {
      int32_t id = n->inputs[j];
      if (id == -1) {
        if (j < info->min_in)
          st = sc_node_error(g, n, SC_ERR_INVALID, "required input %d is missing", j);
      } else if (id < -1 || id >= nv) {
        st = sc_node_error(g, n, SC_ERR_INVALID, "input %d: value id %d out of range",
                           j, id);
      } else if (!defined[id]) {
        const sc_value *v = &g->values[id];
        if (v->producer >= i)
          st = sc_node_error(g, n, SC_ERR_INVALID,
                             "input '%s' is produced by node '%s', which comes later "
                             "(nodes are not in topological order)",
                             v->name, g->nodes[v->producer].name);
        else
          st = sc_node_error(g, n, SC_ERR_INVALID,
                             "input '%s' is not produced by any node, nor a graph "
                             "input or constant", v->name);
      }
    }
    for (int32_t j = 0; j < n->n_outputs && st == SC_OK; j++) {
      int32_t id = n->outputs[j];
      if (id == -1) continue;
      if (id < -1 || id >= nv) {
        st = sc_node_error(g, n, SC_ERR_INVALID, "output %d: value id %d out of range",
                           j, id);
      } else if (defined[id]) {
        const sc_value *v = &g->values[id];
        st = sc_node_error(g, n, SC_ERR_INVALID,
                           "output '%s' already has a producer (or is an input or "
                           "constant)", v->name);
      } else if (g->values[id].producer != i) {
        int32_t p = g->values[id].producer;
        bool both = false;
        if (p >= 0)
          for (int32_t k = 0; k < g->nodes[p].n_outputs; k++)
            if (g->nodes[p].outputs[k] == id) both = true;
        if (both)
          st = sc_node_error(g, n, SC_ERR_INVALID,
                             "output '%s' is also produced by node '%s' (a value has "
                             "at most one producer)", g->values[id].name,
                             g->nodes[p].name);
        else
          st = sc_node_error(g, n, SC_ERR_INVALID,
                           "output '%s' records producer %d, not this node (%d)",
                           g->values[id].name, g->values[id].producer, i);
      } else {
        defined[id] = 1;
      }
    }
  }
  for (int32_t i = 0; i < nv && st == SC_OK; i++) {
    const sc_value *v = &g->values[i];
    if (v->producer >= 0 && !defined[i])
      st = sc_graph_error(g, SC_ERR_INVALID,
                          "value '%s' names node %d as producer, which does not "
                          "output it", v->name, v->producer);
  }
  for (int32_t i = 0; i < g->n_outputs && st == SC_OK; i++)
    if (!defined[g->outputs[i]])
      st = sc_graph_error(g, SC_ERR_INVALID, "graph output '%s' is never defined",
                          g->values[g->outputs[i]].name);
  sc_free(defined);
  if (st == SC_OK) st = check_node_names(g);
  return st;
}
