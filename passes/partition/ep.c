/* ep.c — expert parallelism: the seeds of a mesh axis named ep
 * (docs/moe.md, "Expert parallelism").
 *
 * For every value and parameter outside the experts, ep is one more data
 * axis: the batch is split over it (dp.c, train_seed.c: the data axes are
 * dp, fsdp, then ep innermost), so their gradients are pending over ep and
 * reduced with the other data axes'. The experts are found by the data
 * flow, not by name: an EXPERT PRODUCT is a MatMul of a rank-4 activation
 * [B, E, C, D] (the dispatched tokens: each expert's C slots of the batch's
 * tokens) by a rank-3 parameter [E, D, F] (the stacked expert weights,
 * broadcast over B, its dim 0 against the activation's dim 1), directly or
 * through a Transpose that keeps dim 0 (the backward's product by Wᵀ), a
 * Cast or an Identity. Then:
 *   - every such parameter is an EXPERT PARAMETER: split on dim 0 over ep
 *     (whatever the tensor-parallel seeds said: experts are replicated over
 *     tp), so each rank holds E/ep experts; its gradient, computed for the
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
 * E not divisible by ep is an error naming the sizes that divide; ep on a
 * model with no expert product is an error (the axis would be dp). */
#include <stdio.h>
#include <string.h>

#include "partition.h"

/* The parameter behind value id (through Transpose keeping dim 0, Cast,
 * Identity), or -1: a value without a producer that is_param accepts. */
static int32_t param_behind(sc_graph *g, int32_t id, sc_expert_param_fn is_param,
                            const void *ctx) {
  for (int32_t hops = 0; id >= 0 && hops < 4; hops++) {
    const sc_value *v = &g->values[id];
    if (v->producer < 0) return is_param(ctx, g, id) ? id : -1;
    const sc_node *n = &g->nodes[v->producer];
    if (n->op == SC_OP_TRANSPOSE) {
      const int64_t *perm;
      if (sc_attr_ints(g, n, "perm", &perm) < 1 || perm[0] != 0) return -1;
    } else if (n->op != SC_OP_CAST && n->op != SC_OP_IDENTITY) {
      return -1;
    }
    id = n->n_inputs > 0 ? n->inputs[0] : -1;
  }
  return -1;
}

int32_t sc_expert_weight(sc_graph *g, const sc_node *nd, sc_expert_param_fn is_param,
                         const void *ctx) {
  if ((nd->flags & SC_NODE_DEAD) || nd->op != SC_OP_MATMUL || nd->n_inputs != 2 ||
      nd->inputs[0] < 0 || nd->inputs[1] < 0)
    return -1;
  const sc_value *a = &g->values[nd->inputs[0]];
  int32_t wid = param_behind(g, nd->inputs[1], is_param, ctx);
  if (a->rank != 4 || wid < 0) return -1;
  const sc_value *w = &g->values[wid];
  return w->rank == 3 && w->dims[0] >= 2 && a->dims[1] == w->dims[0] ? wid : -1;
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

/* The outputs of expert products that leave the experts (ep.c's header)
 * constrained to the batch split over every data axis (axes[n_axes], ep
 * last). */
static sc_status constrain_exits(sc_partition *p, const bool *expert, const int32_t *axes,
                                 int32_t n_axes) {
  sc_graph *g = p->global;
  int32_t *off = NULL, *users = NULL;
  if (sc_graph_users(g, &off, &users) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  int64_t parts = 1;
  for (int32_t k = 0; k < n_axes; k++) parts *= p->mesh.axes[axes[k]].size;
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < g->n_nodes; i++) {
    if (!expert[i] || g->nodes[i].outputs[0] < 0) continue;
    int32_t o = g->nodes[i].outputs[0];
    const sc_value *v = &g->values[o];
    bool leaves = off[o + 1] > off[o] && !(v->flags & SC_VALUE_OUTPUT);
    for (int32_t u = off[o]; leaves && u < off[o + 1]; u++) {
      const sc_node *r = &g->nodes[users[u]];
      leaves = !expert[users[u]] && !(sc_ops[r->op].flags & SC_OPF_ELEMENTWISE);
    }
    if (!leaves || v->dims[0] <= 0 || v->dims[0] % parts != 0) continue;
    sc_sharding s;
    sc_sharding_replicated(&s, v->rank);
    for (int32_t k = 0; k < n_axes; k++) sc_sharding_split(&s, 0, axes[k]);
    st = sc_graph_set_sharding(g, o, &s);
  }
  sc_free(off);
  sc_free(users);
  return st;
}

sc_status sc_partition_seed_ep(sc_partition *p) {
  sc_graph *g = p->global;
  int32_t ep = p->ep_axis;
  int64_t n = p->mesh.axes[ep].size;
  if (n == 1) return SC_OK;
  /* the other data axes split the activation's batch, as the inputs' */
  int32_t axes[SC_MESH_MAX_AXES], n_axes = sc_partition_data_axes(p, axes);
  int64_t others = 1;
  for (int32_t k = 0; k < n_axes; k++)
    if (axes[k] != ep) others *= p->mesh.axes[axes[k]].size;
  int32_t found = 0;
  bool *expert = sc_calloc((size_t)g->n_nodes + 1, sizeof *expert);
  if (!expert) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < g->n_nodes; i++) {
    const sc_node *nd = &g->nodes[i];
    int32_t wid = sc_expert_weight(g, nd, partition_param, p);
    if (wid < 0) continue;
    const sc_value *a = &g->values[nd->inputs[0]];
    const sc_value *w = &g->values[wid];
    int64_t e = w->dims[0];
    if (e % n != 0) {
      char near[64];
      sizes_that_divide(e, n, near, sizeof near);
      st = sc_node_error(g, nd, SC_ERR_USAGE,
                         "the %lld experts (dim 0 of '%s') do not divide by %s=%lld: expert "
                         "parallel sizes that do: %s",
                         (long long)e, w->name ? w->name : "?", p->mesh.axes[ep].name,
                         (long long)n, near);
      break;
    }
    expert[i] = true;
    found++;
    sc_sharding s;
    sc_sharding_replicated(&s, 3);
    sc_sharding_split(&s, 0, ep);
    if ((st = sc_graph_set_sharding(g, wid, &s)) != SC_OK) break;
    if ((a->flags & SC_VALUE_INPUT) || sc_value_has_data(a)) continue;
    sc_sharding_replicated(&s, 4);
    if (a->dims[0] > 0 && a->dims[0] % others == 0)
      for (int32_t k = 0; k < n_axes; k++)
        if (axes[k] != ep) sc_sharding_split(&s, 0, axes[k]);
    sc_sharding_split(&s, 1, ep);
    st = sc_graph_set_sharding(g, nd->inputs[0], &s);
  }
  if (st == SC_OK && found) st = constrain_exits(p, expert, axes, n_axes);
  sc_free(expert);
  if (st != SC_OK) return st;
  if (!found)
    return sc_graph_error(g, SC_ERR_USAGE,
                          "the mesh axis %s=%lld splits experts, and the model has none (no "
                          "MatMul of a dispatched [batch, experts, capacity, hidden] activation "
                          "by stacked [experts, in, out] weights): split the batch with dp",
                          p->mesh.axes[ep].name, (long long)n);
  return SC_OK;
}
