/* match.h — helpers of the passes that recognise a computation written out
 * in elementary ops and replace it by one node (fuse-norm, fuse-gelu): who
 * reads a value, and a scalar constant's value. They read the graph and a
 * users index from sc_graph_users; nodes flagged SC_NODE_DEAD are not
 * readers. */
#ifndef SC_PASSES_MATCH_H
#define SC_PASSES_MATCH_H

#include <math.h>

#include "ir/ir.h"

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

#endif
