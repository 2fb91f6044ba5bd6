/* autodiff.c — reverse-mode autodiff (autodiff.h, docs/training.md).
 *
 * Three sweeps over the node list, which is in topological order:
 *   forward   requires[v]: v is a parameter, or a float output of a node
 *             with an input that requires a gradient;
 *   backward  reaches[v]: v is the loss, or an input requiring a gradient
 *             of a node with an output that reaches the loss; a node with
 *             such an output is on the path;
 *   backward  for each node on the path, last first: the gradient of each
 *             output is the sum of its readers' contributions (acc[v]), the
 *             rule turns them into input gradients, which are added to the
 *             inputs' sums.
 * A value's readers all come after it, so its sum is complete before its
 * producer's rule runs. New nodes are appended: the order stays
 * topological, and the sweep (over the forward node count) never visits
 * them. */
#include "passes/autodiff.h"

#include <stdio.h>
#include <string.h>

#include "passes/grad_rule.h"

static bool is_float(const sc_value *v) {
  return sc_dtype_is_float(v->dtype) || v->dtype == SC_DTYPE_BF16 || v->dtype == SC_DTYPE_F16;
}

/* The error of node n, with the rule's message (g->diag). */
static sc_status node_fail(sc_graph *g, int32_t node, sc_diag *d) {
  const sc_node *n = &g->nodes[node];
  sc_status st = g->diag.status != SC_OK ? g->diag.status : SC_ERR_INVALID;
  char msg[sizeof g->diag.msg];
  snprintf(msg, sizeof msg, "gradient: %.1000s", g->diag.msg[0] ? g->diag.msg : "failed");
  return sc_diag_set(d, st, n->name, sc_op_name(n->op), "%s", msg);
}

/* acc[v] += gr (a new Add when v has a sum already). */
static sc_status accumulate(sc_grad_ctx *c, int32_t *acc, int32_t v, int32_t gr) {
  if (acc[v] < 0) {
    acc[v] = gr;
    return SC_OK;
  }
  acc[v] = gb_2(c, SC_OP_ADD, acc[v], gr);
  return acc[v] < 0 ? c->g->diag.status : SC_OK;
}

/* Parameter p's accumulated gradient as the graph output "grad:<p>"
 * (nothing when it has none). */
static sc_status grad_output(sc_grad_ctx *c, int32_t p, const int32_t *acc, int32_t *grad,
                             sc_diag *d) {
  sc_graph *g = c->g;
  if (p < 0 || p >= g->n_values || acc[p] < 0) return SC_OK;
  char name[512];
  snprintf(name, sizeof name, "grad:%s", g->values[p].name ? g->values[p].name : "?");
  int32_t out = sc_graph_add_value(g, name);
  c->node = g->values[acc[p]].producer >= 0 ? g->values[acc[p]].producer : 0;
  int32_t node = out < 0 ? -1 : sc_graph_add_node(g, SC_OP_IDENTITY, name, &acc[p], 1, &out, 1);
  if (node < 0 || sc_ops[SC_OP_IDENTITY].infer(g, &g->nodes[node]) != SC_OK ||
      sc_graph_add_output(g, out) != SC_OK)
    return sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_NOMEM, NULL, NULL,
                       "autodiff: %s", g->diag.msg);
  *grad = out;
  return SC_OK;
}

sc_status sc_autodiff(sc_graph *g, int32_t loss, const int32_t *params, int32_t n_params,
                      int32_t *grads, sc_diag *d) {
  for (int32_t k = 0; k < n_params; k++) grads[k] = -1;
  if (loss < 0 || loss >= g->n_values)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "autodiff: no loss value");
  const sc_value *lv = &g->values[loss];
  if (!is_float(lv) || lv->rank != 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "autodiff: the loss '%s' must be a float scalar, it is %s of rank %d",
                       lv->name ? lv->name : "?", sc_dtype_name(lv->dtype), (int)lv->rank);
  int32_t nv = g->n_values, nn = g->n_nodes;
  bool *requires = sc_calloc((size_t)nv + 1, sizeof *requires);
  bool *reaches = sc_calloc((size_t)nv + 1, sizeof *reaches);
  int32_t *acc = sc_malloc(((size_t)nv + 1) * sizeof *acc);
  sc_status st = requires && reaches && acc ? SC_OK
                                            : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL,
                                                          "out of memory");
  for (int32_t v = 0; st == SC_OK && v < nv; v++) acc[v] = -1;
  for (int32_t k = 0; st == SC_OK && k < n_params; k++)
    if (params[k] >= 0 && params[k] < nv && is_float(&g->values[params[k]]))
      requires[params[k]] = true;

  /* forward: requires-grad */
  for (int32_t i = 0; st == SC_OK && i < nn; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    bool any = false;
    for (int32_t k = 0; k < n->n_inputs; k++) any |= n->inputs[k] >= 0 && requires[n->inputs[k]];
    for (int32_t j = 0; any && j < n->n_outputs; j++)
      if (n->outputs[j] >= 0 && is_float(&g->values[n->outputs[j]]))
        requires[n->outputs[j]] = true;
  }
  /* backward: reaches the loss; and the node after whose rule each
   * parameter's gradient is complete, its first reader on the path (the
   * walk is in reverse) */
  int32_t *done_at = st == SC_OK ? sc_malloc(((size_t)nv + 1) * sizeof *done_at) : NULL;
  if (st == SC_OK && !done_at) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t v = 0; st == SC_OK && v < nv; v++) done_at[v] = -1;
  if (st == SC_OK) reaches[loss] = requires[loss];
  for (int32_t i = nn - 1; st == SC_OK && i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    bool on = false;
    for (int32_t j = 0; j < n->n_outputs; j++) on |= n->outputs[j] >= 0 && reaches[n->outputs[j]];
    for (int32_t k = 0; on && k < n->n_inputs; k++)
      if (n->inputs[k] >= 0 && requires[n->inputs[k]]) {
        reaches[n->inputs[k]] = true;
        done_at[n->inputs[k]] = i;
      }
  }
  int32_t counter = 0;
  sc_grad_ctx c = {.g = g, .counter = &counter};
  /* the seed: dL/dL = 1 */
  if (st == SC_OK && reaches[loss]) {
    c.node = lv->producer >= 0 ? lv->producer : 0;
    if ((acc[loss] = gb_scalar(&c, g->values[loss].dtype, 1.0)) < 0)
      st = sc_diag_set(d, g->diag.status, NULL, NULL, "autodiff: %s", g->diag.msg);
  }
  int32_t dy[64], dx[64];
  bool want[64];
  for (int32_t i = nn - 1; st == SC_OK && i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    bool on = false;
    for (int32_t j = 0; j < n->n_outputs; j++)
      on |= n->outputs[j] >= 0 && reaches[n->outputs[j]] && acc[n->outputs[j]] >= 0;
    if (!on) continue;
    if (n->n_outputs > 64 || n->n_inputs > 64) {
      st = sc_diag_set(d, SC_ERR_LIMIT, n->name, sc_op_name(n->op),
                       "gradient: more than 64 inputs or outputs");
      break;
    }
    sc_grad_fn rule = sc_grad_rule(n->op);
    if (!rule) {
      st = sc_diag_set(d, SC_ERR_UNSUPPORTED, n->name, sc_op_name(n->op),
                       "no gradient rule for %s, on the path from a trainable weight to the "
                       "loss",
                       sc_op_name(n->op));
      break;
    }
    int32_t ni = n->n_inputs;
    for (int32_t j = 0; j < n->n_outputs; j++)
      dy[j] = n->outputs[j] >= 0 && reaches[n->outputs[j]] ? acc[n->outputs[j]] : -1;
    for (int32_t k = 0; k < ni; k++) {
      want[k] = n->inputs[k] >= 0 && reaches[n->inputs[k]];
      dx[k] = -1;
    }
    c.node = i;
    c.dy = dy;
    c.want = want;
    c.dx = dx;
    sc_diag_clear(&g->diag);
    if (rule(&c) != SC_OK) {
      st = node_fail(g, i, d);
      break;
    }
    for (int32_t k = 0; st == SC_OK && k < ni; k++) {
      n = &g->nodes[i]; /* the rule, and accumulate, add nodes: the array moves */
      int32_t x = n->inputs[k];
      /* an input the rule leaves without a gradient is not differentiable
       * (indices, shapes, BatchNorm's running statistics, Clip's bounds):
       * nothing flows back through it; rules are checked to give every
       * differentiable input one (unit.test_autodiff) */
      if (!want[k] || dx[k] < 0) continue;
      const sc_value *xv = &g->values[x], *gv = &g->values[dx[k]];
      if (gv->dtype != xv->dtype || gv->rank != xv->rank ||
          memcmp(gv->dims, xv->dims, (size_t)xv->rank * sizeof *xv->dims) != 0) {
        st = sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                         "gradient of input %d has the wrong type or shape", (int)k);
        break;
      }
      if (accumulate(&c, acc, x, dx[k]) != SC_OK) st = node_fail(g, i, d);
    }
    /* gradients complete here become outputs now, so that what reads them
     * (a partitioned step's reduce-scatter) can run, and the whole
     * gradient die, before the rest of the backward */
    for (int32_t k = 0; st == SC_OK && k < n_params; k++)
      if (grads[k] < 0 && params[k] >= 0 && params[k] < nv && done_at[params[k]] == i)
        st = grad_output(&c, params[k], acc, &grads[k], d);
  }
  /* the rest (a parameter read only by nodes whose rule gave it nothing) */
  for (int32_t k = 0; st == SC_OK && k < n_params; k++)
    if (grads[k] < 0) st = grad_output(&c, params[k], acc, &grads[k], d);
  sc_free(requires);
  sc_free(reaches);
  sc_free(acc);
  sc_free(done_at);
  return st;
}
