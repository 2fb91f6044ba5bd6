/* placement.c — where a mesh's axes sit on its nodes (placement.h).
 *
 * Ranks fill node 0, then node 1, ... (rank r is on node r / P, P the ranks
 * a node), and the mesh is row-major with its last axis fastest: an axis's
 * stride s is the product of the sizes of the axes after it, and its group
 * through rank r is r + k*s for k < size. A group of size n and stride s
 * covers a block of s*n ranks, so it stays in one node when s*n divides P;
 * it is spread evenly over nodes when P divides s (one member a node) or
 * when s divides P and P divides s*n (P/s members in each of s*n/P nodes).
 * Anything else puts different counts of a group on different nodes (tp=3
 * on nodes of 8): such a mesh is refused rather than costed wrongly. */
#include "placement.h"

#include <stdio.h>
#include <string.h>

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

const char *sc_placement_groups_name(const sc_placement_axis *x) {
  return x->intra_node ? "intra-node" : "cross-node";
}

void sc_placement_axis_describe(const sc_placement_axis *x, char *buf, size_t n) {
  snprintf(buf, n, "size %lld, stride %lld, %s, %lld node%s", (long long)x->size,
           (long long)x->stride, sc_placement_groups_name(x), (long long)x->nodes_spanned,
           x->nodes_spanned == 1 ? "" : "s");
}
