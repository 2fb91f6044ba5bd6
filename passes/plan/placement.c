/* placement.c — where a mesh's axes sit on a cluster (cluster.h).
 *
 * Ranks fill node 0, then node 1, ... (rank r is on node r / P, P the ranks
 * a node), and the mesh is row-major with its last axis fastest: an axis's
 * stride s is the product of the sizes of the axes after it, and its group
 * through rank r is r + k*s for k < size. A group of size n and stride s
 * covers a block of s*n ranks, so it stays in one node when s*n divides P;
 * it is spread evenly over nodes when P divides s (one member a node) or
 * when s divides P and P divides s*n (P/s members in each of s*n/P nodes).
 * Anything else puts different counts of a group on different nodes (tp=3
 * on nodes of 8): such a mesh is refused rather than costed wrongly.
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

sc_status sc_placement_compute(const sc_mesh *m, sc_placement *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  int64_t P = m->ranks_per_node;
  SC_ASSERT(P >= 1);
  out->n_axes = m->n_axes;
  out->ranks_per_node = P;
  out->nodes = (m->n_ranks + P - 1) / P;
  int64_t s = 1; /* sizes are bounded by SC_MESH_MAX_RANKS: no overflow */
  for (int32_t a = m->n_axes - 1; a >= 0; a--) {
    sc_placement_axis *x = &out->axes[a];
    int64_t n = m->axes[a].size, block = s * n;
    memcpy(x->name, m->axes[a].name, sizeof x->name);
    x->size = n;
    x->stride = s;
    if (P % block == 0 || n == 1 || m->n_ranks <= P) { /* all in one node */
      x->intra_node = true;
      x->nodes_spanned = 1;
    } else if (s % P == 0) {
      x->nodes_spanned = n;
    } else if (P % s == 0 && block % P == 0) {
      x->nodes_spanned = block / P;
    } else {
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "mesh axis '%s' (size %lld, stride %lld): its groups straddle nodes "
                         "of %lld ranks unevenly",
                         x->name, (long long)n, (long long)s, (long long)P);
    }
    s = block;
  }
  return SC_OK;
}
