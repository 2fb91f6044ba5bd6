/* placement.h — where a mesh's axes sit on its nodes (docs/planner.md).
 *
 * Ranks fill node 0, then node 1, ... (rank r is on node r / P, P the
 * mesh's ranks_per_node), and the mesh is row-major with its last axis
 * fastest, so an axis's stride in ranks decides whether its groups stay in
 * a node. sc_placement_compute describes each axis: its stride, whether its
 * groups stay in one node, how many nodes a group spans; it refuses a mesh
 * whose groups straddle nodes unevenly (tp=3 on nodes of 8 ranks).
 *
 * It is mesh arithmetic only, so that the planner (passes/plan: `shardc
 * plan --cluster`, the plan's JSON), the partitioned bundle's writer
 * (codegen/dist_bundle.c) and its reader (runtime/dist_load.c) derive the
 * same placement. sc_placement is a plain value; nothing here keeps state
 * or takes locks. Errors: SC_ERR_INVALID with the axis named in the diag. */
#ifndef SC_PLACEMENT_H
#define SC_PLACEMENT_H

#include "base.h"
#include "mesh.h"

typedef struct sc_placement_axis {
  char name[SC_MESH_NAME_MAX];
  int64_t size;          /* the axis's size */
  int64_t stride;        /* ranks between neighbours of a group */
  bool intra_node;       /* every group inside one node */
  int64_t nodes_spanned; /* nodes one group touches (1 when intra_node) */
} sc_placement_axis;

typedef struct sc_placement {
  int32_t n_axes;                            /* the mesh's, major to minor */
  sc_placement_axis axes[SC_MESH_MAX_AXES];
  int64_t ranks_per_node;                    /* the mesh's (>= 1) */
  int64_t nodes;                             /* nodes the mesh occupies */
} sc_placement;

/* Where each axis of m sits (m->ranks_per_node must be set): its stride,
 * whether its groups stay in a node and how many nodes a group spans.
 * Refuses an axis whose groups straddle nodes unevenly (tp=3 on nodes of
 * 8 ranks) naming it. */
sc_status sc_placement_compute(const sc_mesh *m, sc_placement *out, sc_diag *d);
/* "intra-node" or "cross-node": an axis's groups, as the JSON forms say. */
const char *sc_placement_groups_name(const sc_placement_axis *x);
/* "size 2, stride 4, cross-node, 2 nodes" into buf (n bytes), for
 * messages that say what an axis should be. */
void sc_placement_axis_describe(const sc_placement_axis *x, char *buf, size_t n);

#endif
