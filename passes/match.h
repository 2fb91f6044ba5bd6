/* match.h — what the passes that recognise a computation written out in
 * elementary ops and replace it by one node (fuse-norm, fuse-gelu) share:
 * who reads a value, a scalar constant's value, the rewrite's last step
 * and the pass's loop. They read the graph and a users index from
 * sc_graph_users; nodes flagged SC_NODE_DEAD are not readers. */
#ifndef SC_PASSES_MATCH_H
#define SC_PASSES_MATCH_H

#include <math.h>

#include "ir/ir.h"
#include "passes/pass.h"

/* The one live reader of value v (its node id), or -1 when it has none,
 * several, or is a graph output. */
static inline int32_t sc_match_only_reader(const sc_graph *g, const int32_t *off,
                                           const int32_t *users, int32_t v) {
  if (v < 0 || (g->values[v].flags & SC_VALUE_OUTPUT)) return -1;
  int32_t r = -1;
  for (int32_t u = off[v]; u < off[v + 1]; u++) {
    if (g->nodes[users[u]].flags & SC_NODE_DEAD) continue;
    if (r >= 0 && r != users[u]) return -1;
    r = users[u];
  }
  return r;
}

/* Value v's scalar constant (one element, float), or NAN. */
static inline double sc_match_scalar(const sc_graph *g, int32_t v) {
  if (v < 0) return NAN;
  const sc_value *c = &g->values[v];
  if (!sc_value_has_data(c) || sc_value_numel(c) != 1 || !sc_dtype_is_float(c->dtype)) return NAN;
  return sc_load_f64(c->dtype, c->data, 0);
}

/* Finishes a rewrite in place: node `root`, its op, inputs and the op's
 * attributes set, is marked SC_ATTR_DERIVED (the op may be newer than the
 * model's opset) and its outputs inferred; nodes[0 .. n) are flagged dead
 * (their values stay, unread, for dce: value ids do not change). */
static inline sc_status sc_match_replace(sc_graph *g, int32_t root, const int32_t *nodes,
                                         int32_t n) {
  sc_attr *a = sc_node_add_attr(g, root, SC_ATTR_DERIVED, SC_ATTR_INT);
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  a->i = 1;
  sc_status st = sc_ops[g->nodes[root].op].infer(g, &g->nodes[root]);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < n; i++) g->nodes[nodes[i]].flags |= SC_NODE_DEAD;
  return SC_OK;
}

/* Tries node `node` (live) of g: matches a chain there and rewrites it,
 * returning true and the rewrite's status in *st; false when nothing
 * matched. off, users: sc_graph_users of g before the pass began. */
typedef bool (*sc_match_fn)(sc_graph *g, const int32_t *off, const int32_t *users,
                            int32_t node, sc_status *st);

/* A fusing pass's loop: fn at every live node in order, then the graph
 * compacted when anything was rewritten. */
static inline sc_status sc_match_each(sc_graph *g, sc_match_fn fn) {
  int32_t *off = NULL, *users = NULL;
  if (sc_graph_users(g, &off, &users) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  sc_status st = SC_OK;
  int32_t fused = 0;
  for (int32_t i = 0; i < g->n_nodes && st == SC_OK; i++)
    if (!(g->nodes[i].flags & SC_NODE_DEAD) && fn(g, off, users, i, &st)) fused += st == SC_OK;
  sc_free(off);
  sc_free(users);
  if (st == SC_OK && fused > 0) st = sc_graph_compact(g);
  return st;
}

#endif
