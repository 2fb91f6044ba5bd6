/* dp.c — data-parallel seeds: the batch (dim 0 of every graph input whose
 * dim 0 divides) is split over the data axes (the plan's dp axis, then ep:
 * sc_partition_data_axes). Propagation carries the
 * split through the graph; weights stay replicated (ZeRO sharding of them is
 * training's work). A symbolic batch (an input's dim 0 bound with --dim)
 * that does not divide is an error naming the batches that would; a fixed
 * dim 0 that does not divide stays replicated (every rank reads all of it)
 * and is recorded as a fallback. */
#include "partition.h"

sc_status sc_partition_seed_dp(sc_partition *p, const sc_plan *plan) {
  (void)plan;
  sc_graph *g = p->global;
  const sc_mesh *m = sc_graph_mesh(g);
  int32_t axes[SC_MESH_MAX_AXES], n_axes = sc_partition_data_axes(p, axes);
  if (!n_axes || !m) return SC_OK;
  int64_t n = 1;
  for (int32_t k = 0; k < n_axes; k++) n *= m->axes[axes[k]].size;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t id = g->inputs[i];
    const sc_value *v = &g->values[id];
    if (v->rank < 1 || v->dims[0] <= 0) continue;
    if (v->dims[0] % n != 0) {
      if (v->dim_param && v->dim_param[0]) /* the user's batch: their mistake */
        return sc_partition_batch_error(p, v, axes, n_axes, n);
      if (sc_partition_note_fallback(p, v->name, "input",
                                     "dim 0 (%lld) does not divide by the %lld data-parallel "
                                     "ranks: not split",
                                     (long long)v->dims[0], (long long)n) != SC_OK)
        return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
      continue;
    }
    sc_sharding s;
    const sc_sharding *old = sc_graph_sharding(g, id);
    if (old) s = *old;
    else sc_sharding_replicated(&s, v->rank);
    sc_axes have = sc_sharding_dim_axes(&s);
    bool taken = s.n_dim_axes[0] != 0;
    for (int32_t k = 0; k < n_axes; k++) taken |= (have & (1u << axes[k])) != 0;
    if (taken) continue;
    for (int32_t k = 0; k < n_axes; k++) sc_sharding_split(&s, 0, axes[k]);
    sc_status st = sc_graph_set_sharding(g, id, &s);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}
