/* placement.c — a mesh put on a cluster (cluster.h): its axes ordered for
 * the cluster's links and its ranks a node set from the cluster. Where the
 * axes then sit (strides, intra- or cross-node) is ir/placement.c's
 * sc_placement_compute, shared with the partitioned bundle.
 *
 * The order rule (sc_cluster_order_mesh) is the usual one of Megatron-LM
 * and torchtitan, for the reasons docs/planner.md gives: tensor
 * parallelism's collectives sit on the critical path of every layer, so it
 * is innermost; fsdp gathers once a layer, dp reduces once a step, and
 * the pipeline sends one activation per microbatch, so pp is outermost. */
#include <string.h>

#include "cluster.h"

static int order_of(const char *name) {
  if (strcmp(name, "pp") == 0) return 0;
  if (strcmp(name, "dp") == 0) return 1;
  if (strcmp(name, "fsdp") == 0) return 2;
  if (strcmp(name, "tp") == 0) return 4;
  return 3;
}

void sc_cluster_order_mesh(sc_mesh *m) {
  for (int32_t i = 1; i < m->n_axes; i++) /* insertion sort: stable */
    for (int32_t j = i; j > 0 && order_of(m->axes[j - 1].name) > order_of(m->axes[j].name); j--) {
      sc_mesh_axis t = m->axes[j - 1];
      m->axes[j - 1] = m->axes[j];
      m->axes[j] = t;
    }
}

sc_status sc_cluster_fit_mesh(const sc_cluster *c, sc_mesh *m, sc_diag *d) {
  char text[256];
  sc_mesh_format(m, text, sizeof text);
  int64_t P = c->devices_per_node, total = sc_cluster_devices(c);
  if (m->ranks_per_node && m->ranks_per_node != P)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--ranks-per-node %lld disagrees with --cluster %s (%lld a node)",
                       (long long)m->ranks_per_node, c->name, (long long)P);
  if (m->n_ranks > total)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "mesh %s has %lld ranks; cluster %s has %lld (%lld nodes of %lld)",
                       text[0] ? text : "-", (long long)m->n_ranks, c->name, (long long)total,
                       (long long)c->nodes, (long long)P);
  if (m->n_ranks > P && m->n_ranks % P != 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "mesh %s has %lld ranks: not whole nodes of %lld on cluster %s",
                       text, (long long)m->n_ranks, (long long)P, c->name);
  return sc_mesh_set_ranks_per_node(m, P, d);
}
