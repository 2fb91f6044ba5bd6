/* composite.h — expanding composite ops (SC_OPF_COMPOSITE in ir/ops.def)
 * into the ops that define them; called by the infer-shapes pass when it
 * reaches such a node, its inputs' shapes known (passes/composite.c). */
#ifndef SC_PASSES_COMPOSITE_H
#define SC_PASSES_COMPOSITE_H

#include "ir/ir.h"

/* Appends node `node`'s expansion to g (shapes inferred), makes it write
 * the node's output values, and marks the node dead, its outputs cleared.
 * g's node order is then not topological until sc_graph_toposort. Errors
 * (a malformed node: ranks, heads, attributes) name the node. */
sc_status sc_expand_composite(sc_graph *g, int32_t node);

/* Whether node n is expanded like a composite op although its op is not
 * one: a BatchNormalization in training mode (batch statistics and the
 * running ones; in inference it is a kernel of its own). */
bool sc_expands_here(const sc_graph *g, const sc_node *n);

#endif
