/* ep.c — expert parallelism: the seeds of a mesh axis named ep
 * (docs/moe.md, "Expert parallelism").
 *
 * For every value and parameter outside the experts, ep is one more data
 * axis: the batch is split over it (dp.c, train_seed.c: the data axes are
 * dp, fsdp, then ep innermost), so their gradients are pending over ep and
 * reduced with the other data axes'; under fsdp their parameters are
 * stored over fsdp and ep together (train_seed.c). The experts are found
 * by the data
 * flow, not by name: an EXPERT PRODUCT is a MatMul of a rank-4 activation
 * [B, E, C, D] (the dispatched tokens: each expert's C slots of the batch's
 * tokens) by a rank-3 parameter [E, D, F] (the stacked expert weights,
 * broadcast over B, its dim 0 against the activation's dim 1), directly or
 * through a Transpose that keeps dim 0 (the backward's product by Wᵀ), a
 * Cast or an Identity. Then:
 *   - every such parameter is an EXPERT PARAMETER: split on dim 0 over ep
 *     (whatever the tensor-parallel seeds said: experts are replicated over
 *     tp, unless expert tensor parallelism, below), so each rank holds
 *     E/ep experts; its gradient, computed for the
 *     rank's experts from every rank's tokens, is not pending over ep and
 *     is reduced over the other data axes only (train_seed.c); fsdp shards
 *     it further on the dims that remain (dim 0 first);
 *   - the activation of every expert product gets a constraint: dim 0 over
 *     the other data axes, dim 1 (the experts) over ep. It arrives split on
 *     the batch, so localize moves ep from dim 0 to dim 1 with one
 *     AllToAll (ep innermost on both dims); the expert MatMuls and the
 *     element-wise ops between them keep that split;
 *   - the output of an expert product that leaves the experts (no reader
 *     of it is an expert product or element-wise: the combine's Reshape)
 *     gets a constraint back on the batch (dim 0 over every data axis, ep
 *     innermost): the inverse AllToAll, once, where it is made, so that
 *     every reader (the combine's product, and in a training step the
 *     gates' gradient through its Transpose) reads the same batch-split
 *     copy. In a training step the backward's products by Wᵀ are expert
 *     products too, so the gradient of the experts' output takes the same
 *     path in (its gradient leaves through an Add, so the dispatch's
 *     backward product moves it back); recomputed copies likewise.
 * Expert tensor parallelism (p->expert_tensor_parallel: the plan's option,
 * with a tp axis of size > 1) splits each expert's MLP over tp as tp.c
 * splits a dense one: the parameter of the product that leaves is
 * row-parallel (its in dim, F, over tp: the product's output is a sum
 * pending over tp, reduced by the exit's constraint before the inverse
 * AllToAll; under sequence parallelism the constraint keeps it pending,
 * and the cut reduce-scatters it onto the sequence after the combine),
 * the parameters of the products whose outputs reach that
 * product's activation through element-wise ops only (the SwiGLU) are
 * column-parallel (their out dim, F). A row-parallel product's activation
 * is constrained with its hidden dim over tp too, so the F-split SwiGLU
 * feeds it without a gather. The backward's products by Wᵀ follow their
 * parameter's split (a Transpose exchanging dims 1 and 2 swaps the roles
 * of its dims). Without ep, only the parameters are seeded; propagation
 * does the rest.
 * E not divisible by ep, or F by tp, is an error naming the sizes that
 * divide; ep or expert tensor parallelism on a model with no expert
 * product is an error (the axis would be dp; the option would do
 * nothing). */
#include <stdio.h>
#include <string.h>

#include "partition.h"

/* The parameter behind value id (through Transpose keeping dim 0, Cast,
 * Identity), or -1: a value without a producer that is_param accepts.
 * *swapped: whether an odd number of those Transposes exchange dims 1 and
 * 2 (the product multiplies by the parameter's transpose: the backward's
 * product by Wᵀ). */
static int32_t param_behind(sc_graph *g, int32_t id, sc_expert_param_fn is_param,
                            const void *ctx, bool *swapped) {
  *swapped = false;
  for (int32_t hops = 0; id >= 0 && hops < 4; hops++) {
    const sc_value *v = &g->values[id];
    if (v->producer < 0) return is_param(ctx, g, id) ? id : -1;
    const sc_node *n = &g->nodes[v->producer];
    if (n->op == SC_OP_TRANSPOSE) {
      const int64_t *perm;
      int32_t np = sc_attr_ints(g, n, "perm", &perm);
      if (np < 1 || perm[0] != 0) return -1;
      if (np == 3 && perm[1] == 2) *swapped = !*swapped;
    } else if (n->op != SC_OP_CAST && n->op != SC_OP_IDENTITY) {
      return -1;
    }
    id = n->n_inputs > 0 ? n->inputs[0] : -1;
  }
  return -1;
}

/* sc_expert_weight, with *swapped (param_behind's) */
static int32_t expert_weight(sc_graph *g, const sc_node *nd, sc_expert_param_fn is_param,
                             const void *ctx, bool *swapped) {
  *swapped = false;
  if ((nd->flags & SC_NODE_DEAD) || nd->op != SC_OP_MATMUL || nd->n_inputs != 2 ||
      nd->inputs[0] < 0 || nd->inputs[1] < 0)
    return -1;
  const sc_value *a = &g->values[nd->inputs[0]];
  int32_t wid = param_behind(g, nd->inputs[1], is_param, ctx, swapped);
  if (a->rank != 4 || wid < 0) return -1;
  const sc_value *w = &g->values[wid];
  return w->rank == 3 && w->dims[0] >= 2 && a->dims[1] == w->dims[0] ? wid : -1;
}

int32_t sc_expert_weight(sc_graph *g, const sc_node *nd, sc_expert_param_fn is_param,
                         const void *ctx) {
  bool swapped;
  return expert_weight(g, nd, is_param, ctx, &swapped);
}

/* A partition's parameter: an initializer with data (inference) or a
 * training step's parameter input. */
static bool partition_param(const void *ctx, const sc_graph *g, int32_t id) {
  const sc_partition *p = ctx;
  const sc_value *v = &g->values[id];
  if (v->flags & SC_VALUE_INPUT)
    return p->training && v->name && sc_partition_param_of(p, v->name) &&
           strcmp(sc_partition_param_of(p, v->name), v->name) == 0;
  return (v->flags & SC_VALUE_PARAM) && sc_value_has_data(v);
}

/* The sizes near n that divide e ("2 or 4"), into buf. */
static void sizes_that_divide(int64_t e, int64_t n, char *buf, size_t cap) {
  int64_t lo = 0, hi = 0;
  for (int64_t k = n - 1; k >= 2 && !lo; k--)
    if (e % k == 0) lo = k;
  for (int64_t k = n + 1; k <= e && !hi; k++)
    if (e % k == 0) hi = k;
  if (lo && hi) snprintf(buf, cap, "%lld or %lld", (long long)lo, (long long)hi);
  else if (lo || hi) snprintf(buf, cap, "%lld", (long long)(lo ? lo : hi));
  else snprintf(buf, cap, "none above 1");
}

/* Whether expert product i's output leaves the experts: no reader of it is
 * an expert product or element-wise (the combine's Reshape reads it). */
static bool leaves(const sc_graph *g, const bool *expert, const int32_t *off,
                   const int32_t *users, int32_t i) {
  int32_t o = g->nodes[i].outputs[0];
  if (o < 0 || (g->values[o].flags & SC_VALUE_OUTPUT) || off[o + 1] == off[o]) return false;
  for (int32_t u = off[o]; u < off[o + 1]; u++)
    if (expert[users[u]] || (sc_ops[g->nodes[users[u]].op].flags & SC_OPF_ELEMENTWISE))
      return false;
  return true;
}

/* Whether expert product i's output reaches, through element-wise ops
 * only (the SwiGLU), the activation of a product that leaves (exit[]): i
 * is a first product of an expert MLP. */
static bool feeds_exit(const sc_graph *g, const bool *expert, const bool *exit,
                       const int32_t *off, const int32_t *users, int32_t i) {
  int32_t todo[32], n_todo = 0;
  todo[n_todo++] = g->nodes[i].outputs[0];
  for (int32_t seen = 0; seen < n_todo; seen++) {
    int32_t v = todo[seen];
    if (v < 0) continue;
    for (int32_t u = off[v]; u < off[v + 1]; u++) {
      const sc_node *r = &g->nodes[users[u]];
      if (expert[users[u]] && exit[users[u]] && r->inputs[0] == v) return true;
      if ((sc_ops[r->op].flags & SC_OPF_ELEMENTWISE) && r->outputs[0] >= 0 && n_todo < 32)
        todo[n_todo++] = r->outputs[0];
    }
  }
  return false;
}

/* The sizes near n that divide e, and the error naming them (node nd, the
 * expert parameter w's dim). */
static sc_status not_dividing(sc_partition *p, const sc_node *nd, const sc_value *w, int32_t dim,
                              int32_t ax) {
  char near[64];
  int64_t n = p->mesh.axes[ax].size, e = w->dims[dim];
  sizes_that_divide(e, n, near, sizeof near);
  return sc_node_error(p->global, nd, SC_ERR_USAGE,
                       dim == 0 ? "the %lld experts (dim %d of '%s') do not divide by %s=%lld: "
                                  "expert parallel sizes that do: %s"
                                : "the experts' hidden size %lld (dim %d of '%s') does not "
                                  "divide by %s=%lld: tensor parallel sizes that do: %s",
                       (long long)e, (int)dim, w->name ? w->name : "?", p->mesh.axes[ax].name,
                       (long long)n, near);
}

sc_status sc_partition_seed_ep(sc_partition *p) {
  sc_graph *g = p->global;
  int32_t ep = p->ep_axis >= 0 && p->mesh.axes[p->ep_axis].size > 1 ? p->ep_axis : -1;
  int32_t tp = p->expert_tensor_parallel ? p->tp_axis : -1;
  if (ep < 0 && tp < 0) return SC_OK;
  /* the other data axes split the activation's batch, as the inputs' */
  int32_t axes[SC_MESH_MAX_AXES], n_axes = sc_partition_data_axes(p, axes);
  int64_t others = 1, parts = 1;
  for (int32_t k = 0; k < n_axes; k++) {
    parts *= p->mesh.axes[axes[k]].size;
    if (axes[k] != ep) others *= p->mesh.axes[axes[k]].size;
  }
  int32_t found = 0, *off = NULL, *users = NULL;
  if (sc_graph_users(g, &off, &users) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  bool *expert = sc_calloc((size_t)g->n_nodes + 1, sizeof *expert);
  bool *swapped = sc_calloc((size_t)g->n_nodes + 1, sizeof *swapped);
  bool *exit = sc_calloc((size_t)g->n_nodes + 1, sizeof *exit);
  int32_t *weight = sc_calloc((size_t)g->n_nodes + 1, sizeof *weight);
  int8_t *tp_dim = sc_calloc((size_t)g->n_values + 1, sizeof *tp_dim); /* 0: whole */
  sc_status st = SC_OK;
  if (!expert || !swapped || !exit || !weight || !tp_dim) {
    st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    goto done;
  }
  /* the expert products, and each one's parameter */
  for (int32_t i = 0; st == SC_OK && i < g->n_nodes; i++) {
    const sc_node *nd = &g->nodes[i];
    int32_t wid = expert_weight(g, nd, partition_param, p, &swapped[i]);
    if (wid < 0) continue;
    const sc_value *w = &g->values[wid];
    if (ep >= 0 && w->dims[0] % p->mesh.axes[ep].size != 0) {
      st = not_dividing(p, nd, w, 0, ep);
      break;
    }
    expert[i] = true;
    weight[i] = wid;
    found++;
  }
  if (st != SC_OK) goto done;
  if (!found) {
    st = sc_graph_error(g, SC_ERR_USAGE,
                        "%s%s=%lld splits experts, and the model has none (no MatMul of a "
                        "dispatched [batch, experts, capacity, hidden] activation by stacked "
                        "[experts, in, out] weights)%s",
                        ep >= 0 ? "the mesh axis " : "--expert-tensor-parallel over ",
                        p->mesh.axes[ep >= 0 ? ep : tp].name,
                        (long long)p->mesh.axes[ep >= 0 ? ep : tp].size,
                        ep >= 0 ? ": split the batch with dp" : "");
    goto done;
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    exit[i] = expert[i] && leaves(g, expert, off, users, i);
  /* Expert tensor parallelism: the product that leaves multiplies by a
   * row-parallel parameter (its in dim split), the products feeding it
   * through element-wise ops by column-parallel ones (their out dim);
   * first seen wins. The backward's products by Wᵀ neither leave nor feed
   * a product that does: they follow their parameter's split. */
  for (int32_t i = 0; tp >= 0 && i < g->n_nodes; i++) {
    if (!expert[i] || tp_dim[weight[i]]) continue;
    bool row = exit[i];
    if (!row && !feeds_exit(g, expert, exit, off, users, i)) continue;
    int32_t dim = row != swapped[i] ? 1 : 2;
    const sc_value *w = &g->values[weight[i]];
    if (w->dims[dim] % p->mesh.axes[tp].size != 0) {
      st = not_dividing(p, &g->nodes[i], w, dim, tp);
      goto done;
    }
    tp_dim[weight[i]] = (int8_t)dim;
  }
  for (int32_t i = 0; st == SC_OK && i < g->n_nodes; i++) {
    if (!expert[i]) continue;
    const sc_node *nd = &g->nodes[i];
    int32_t wid = weight[i];
    sc_sharding s;
    sc_sharding_replicated(&s, 3);
    if (ep >= 0) sc_sharding_split(&s, 0, ep);
    if (tp_dim[wid]) sc_sharding_split(&s, tp_dim[wid], tp);
    if ((st = sc_graph_set_sharding(g, wid, &s)) != SC_OK) break;
    /* the activation: the experts over ep, the batch over the other data
     * axes, and its hidden dim over tp where the product sums over a dim
     * of the parameter split over tp (a row-parallel product) */
    const sc_value *a = &g->values[nd->inputs[0]];
    if (ep < 0 || (a->flags & SC_VALUE_INPUT) || sc_value_has_data(a)) continue;
    sc_sharding_replicated(&s, 4);
    if (a->dims[0] > 0 && a->dims[0] % others == 0)
      for (int32_t k = 0; k < n_axes; k++)
        if (axes[k] != ep) sc_sharding_split(&s, 0, axes[k]);
    sc_sharding_split(&s, 1, ep);
    if (tp_dim[wid] && (tp_dim[wid] == 1) != swapped[i]) sc_sharding_split(&s, 3, tp);
    st = sc_graph_set_sharding(g, nd->inputs[0], &s);
  }
  /* the outputs that leave, back on the batch over every data axis, ep
   * innermost: the inverse AllToAll, once, where they are made. A
   * row-parallel expert product's sum pending over tp is reduced first
   * (an all-reduce of the capacity slots), except under sequence
   * parallelism: there it travels pending through the AllToAll and the
   * combine (both linear) and the cut reduce-scatters it onto the
   * sequence of the [B, S, D] tokens, as a dense row-parallel layer's */
  for (int32_t i = 0; ep >= 0 && st == SC_OK && i < g->n_nodes; i++) {
    if (!exit[i]) continue;
    int32_t o = g->nodes[i].outputs[0];
    const sc_value *v = &g->values[o];
    if (v->dims[0] <= 0 || v->dims[0] % parts != 0) continue;
    sc_sharding s;
    sc_sharding_replicated(&s, v->rank);
    for (int32_t k = 0; k < n_axes; k++) sc_sharding_split(&s, 0, axes[k]);
    if (p->sequence_parallel && tp_dim[weight[i]] && (tp_dim[weight[i]] == 1) != swapped[i])
      s.partial |= (sc_axes)(1u << tp);
    st = sc_graph_set_sharding(g, o, &s);
  }
done:
  sc_free(off);
  sc_free(users);
  sc_free(expert);
  sc_free(swapped);
  sc_free(exit);
  sc_free(weight);
  sc_free(tp_dim);
  return st;
}
