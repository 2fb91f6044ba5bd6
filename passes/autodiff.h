/* autodiff.h — reverse-mode automatic differentiation over the IR
 * (docs/training.md).
 *
 * sc_autodiff(g, loss, params): from the scalar float value `loss`, in
 * reverse topological order, each node on a path from a parameter to the
 * loss gets its gradient rule (grad_rule.h) called; gradients of values
 * read by several nodes are summed; each parameter's gradient is a new
 * graph output named "grad:<param name>" (grads[k], or -1 when the loss
 * does not depend on parameter k differentiably).
 *
 * The graph must have static shapes (after the canonical passes). The
 * forward part is left as it was: only nodes and constants are added,
 * after it. An input its rule declares non-differentiable (indices,
 * shapes, running statistics) passes nothing back: a parameter reached
 * only through such inputs gets no gradient (grads[k] = -1). Errors name the node: a node on the path whose op has no
 * gradient rule (SC_ERR_UNSUPPORTED, "no gradient rule for Op"), a rule's
 * own failure, a loss that is not a scalar float. */
#ifndef SC_PASSES_AUTODIFF_H
#define SC_PASSES_AUTODIFF_H

#include "ir/ir.h"

sc_status sc_autodiff(sc_graph *g, int32_t loss, const int32_t *params, int32_t n_params,
                      int32_t *grads, sc_diag *d);

#endif
