/* mesh.h — the device mesh: named axes over physical ranks.
 *
 * A mesh is an ordered list of named axes with sizes, major to minor, e.g.
 * `pp=2,dp=2,tp=2`. It has n_ranks = product of the sizes ranks, and rank r
 * has coordinates row-major over the axes in the given order (the last axis
 * varies fastest): for pp=2,dp=2,tp=2 rank 5 = (pp 1, dp 0, tp 1).
 *
 * A set of axes is an sc_axes bit mask (bit i = axis i). The group of a rank
 * along a set of axes is the ranks whose coordinates differ from its own only
 * in those axes; it is what a collective over those axes runs on (a tp
 * all-reduce runs on the rank's tp group). Groups along one set partition
 * the ranks; each has a color (its index among the groups, row-major over the
 * other axes) and each rank a key (its position in its group, row-major over
 * the set's axes): MPI_Comm_split(color, key) builds the communicator.
 *
 * ranks_per_node N says which ranks share a node: r and s do iff
 * r / N == s / N (0 = not given: all ranks on one node). A set of axes is
 * intra-node when every group along it lies within one node: its collectives
 * run over the fast links.
 *
 * sc_mesh is a plain value (no pointers): copy it freely. Functions take no
 * locks and keep no state. Errors are SC_ERR_PARSE / SC_ERR_INVALID /
 * SC_ERR_LIMIT with a message in the diag. */
#ifndef SC_MESH_H
#define SC_MESH_H

#include "base.h"

enum {
  SC_MESH_MAX_AXES = 8,  /* most axes in a mesh */
  SC_MESH_NAME_MAX = 32, /* axis name bytes, NUL included */
};
/* Most ranks a mesh may have (2^20). */
#define SC_MESH_MAX_RANKS ((int64_t)1 << 20)

typedef uint32_t sc_axes; /* set of mesh axes: bit i = axis i */

typedef struct sc_mesh_axis {
  char name[SC_MESH_NAME_MAX]; /* identifier: [A-Za-z_][A-Za-z0-9_]* */
  int64_t size;                /* >= 1 */
} sc_mesh_axis;

typedef struct sc_mesh {
  int32_t n_axes;                        /* 0 = the trivial one-rank mesh */
  sc_mesh_axis axes[SC_MESH_MAX_AXES];   /* major to minor */
  int64_t n_ranks;                       /* product of the sizes (1 if none) */
  int64_t ranks_per_node;                /* 0 = not given: one node */
} sc_mesh;

/* The one-rank mesh with no axes. */
void sc_mesh_init(sc_mesh *m);
/* Parses "pp=2,dp=2,tp=2" (spaces around tokens allowed). Checks names are
 * identifiers and unique, sizes >= 1, product <= SC_MESH_MAX_RANKS. An empty
 * string is an error. On failure *m is the trivial mesh. */
sc_status sc_mesh_parse(const char *spec, sc_mesh *m, sc_diag *d);
/* Appends one axis (same checks as parse). */
sc_status sc_mesh_add_axis(sc_mesh *m, const char *name, int64_t size, sc_diag *d);
/* n >= 1 and <= SC_MESH_MAX_RANKS; 0 clears it. */
sc_status sc_mesh_set_ranks_per_node(sc_mesh *m, int64_t n, sc_diag *d);
/* "pp=2,dp=2,tp=2" ("" for no axes) into buf; returns the length it needed. */
size_t sc_mesh_format(const sc_mesh *m, char *buf, size_t n);
bool sc_mesh_equal(const sc_mesh *a, const sc_mesh *b);

/* The axis names that take a role when a mesh comes from the command line
 * (--mesh): dp (batch split), fsdp (batch split with the training state
 * sharded: ZeRO/FSDP), tp (Megatron tensor parallelism), pp (pipeline
 * stages), cp (context parallelism: the sequence split, attention as a
 * ring; docs/context-parallel.md), ep (expert parallelism: the batch split
 * as by dp, mixture-of-experts layers' experts split; docs/moe.md).
 * NULL-terminated. */
extern const char *const sc_mesh_role_names[];
/* Checks that every axis of m is named after a role (sc_mesh_role_names):
 * an axis no pass uses would only multiply the ranks, each pair computing
 * the same thing. SC_ERR_USAGE naming the axis and listing the known ones.
 * (Axes of a plan file may have other names: its shardings use them.) */
sc_status sc_mesh_check_roles(const sc_mesh *m, sc_diag *d);

/* Axis index of name, or -1. */
int32_t sc_mesh_find_axis(const sc_mesh *m, const char *name);
/* Size of an axis by name; 1 when the mesh has no such axis. */
int64_t sc_mesh_axis_size(const sc_mesh *m, const char *name);

/* Coordinates of rank (0 <= rank < n_ranks) into coords[n_axes]. */
void sc_mesh_rank_to_coords(const sc_mesh *m, int64_t rank, int64_t *coords);
/* The rank at coords (each within its axis). */
int64_t sc_mesh_coords_to_rank(const sc_mesh *m, const int64_t *coords);

/* Axis mask for names ("tp", or several); false if one is unknown. */
bool sc_mesh_axes_of(const sc_mesh *m, const char *const *names, int32_t n,
                     sc_axes *out);
/* All axes of the mesh. */
sc_axes sc_mesh_all_axes(const sc_mesh *m);
/* Product of the sizes of the axes in set (1 for the empty set). */
int64_t sc_mesh_group_size(const sc_mesh *m, sc_axes set);
/* The group of rank along set, in key order, into out[group_size]. */
void sc_mesh_group_ranks(const sc_mesh *m, sc_axes set, int64_t rank, int64_t *out);
/* Which group along set rank is in: 0 .. n_ranks/group_size - 1. */
int64_t sc_mesh_group_color(const sc_mesh *m, sc_axes set, int64_t rank);
/* Rank's position within its group: 0 .. group_size - 1. */
int64_t sc_mesh_group_key(const sc_mesh *m, sc_axes set, int64_t rank);

/* Node of rank (0 when ranks_per_node is not given). */
int64_t sc_mesh_node_of(const sc_mesh *m, int64_t rank);
/* Whether every group along set lies within one node. */
bool sc_mesh_is_intra_node(const sc_mesh *m, sc_axes set);

#endif
