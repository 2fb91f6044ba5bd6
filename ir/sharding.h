/* sharding.h — GSPMD-style shardings of values over a mesh, and the
 * graph's per-value sharding table.
 *
 * A sharding of a rank-R value says, for each dim d, the ordered list of mesh
 * axes that split it (major to minor: [(dp,tp)] gives dp the outer blocks),
 * and the set of axes over which the value is a pending partial sum (every
 * rank of a group along those axes holds a summand; the true value is their
 * sum). No axes at all = replicated. Axes are indices into one sc_mesh; the
 * sharding is meaningless without it.
 *
 * Invariant (sc_sharding_validate): every axis appears at most once, across
 * all dims and the partial set together, and is an axis of the mesh.
 *
 * Text form (printing and parsing, used by the IR text, plan JSON and CLI):
 *   [dp,_]                    dim 0 split over dp, dim 1 whole
 *   [(dp,tp),_]               dim 0 split over dp, then each piece over tp
 *   [dp,_] partial(tp)        split over dp, pending sum over tp
 *   [] partial(tp)            a scalar, pending sum over tp
 * '_' = an unsplit dim; '(a,b)' = several axes on one dim; a one-axis list may
 * also be written '(a)'. Printing is canonical: one axis bare, several in
 * parentheses, partial axes in mesh order, no spaces except before
 * 'partial'.
 *
 * The table (sc_shardings) hangs off sc_graph.shardings: a copy of the mesh
 * and, per value id, whether a sharding is assigned and which. It is NULL
 * until a plan attaches one (sc_graph_attach_mesh); values added later have
 * none until set. sc_graph_compact remaps it. It is freed with the graph. */
#ifndef SC_SHARDING_H
#define SC_SHARDING_H

#include "ir.h"
#include "mesh.h"

typedef struct sc_sharding {
  int32_t rank;                                /* of the value it describes */
  uint8_t n_dim_axes[SC_MAX_RANK];             /* axes splitting each dim */
  int8_t dim_axes[SC_MAX_RANK][SC_MESH_MAX_AXES]; /* mesh axis ids, major first */
  sc_axes partial;                             /* pending-sum axes */
  /* stride[d] > 1: dim d is viewed as [stride, size/stride] and only the
   * inner part is split (each rank holds its piece of every one of the
   * stride blocks, in order): a fused QKV projection's columns split by heads
   * are [_,3*tp] (Megatron's partition stride). 0 or 1 = none. Text: `3*tp`,
   * `3*(dp,tp)`. Only on a split dim. */
  uint8_t stride[SC_MAX_RANK];
} sc_sharding;

/* stride of dim d, 1 when none. */
static inline int64_t sc_sharding_stride(const sc_sharding *s, int32_t d) {
  return s->stride[d] > 1 ? s->stride[d] : 1;
}

/* Replicated over every axis, for a value of the given rank. */
void sc_sharding_replicated(sc_sharding *s, int32_t rank);
bool sc_sharding_is_replicated(const sc_sharding *s);
/* Appends axis to dim d's list (no check: validate afterwards). */
void sc_sharding_split(sc_sharding *s, int32_t d, int32_t axis);
/* Axes used by dims (not partial). */
sc_axes sc_sharding_dim_axes(const sc_sharding *s);
/* Product of the sizes of the axes splitting dim d. */
int64_t sc_sharding_dim_parts(const sc_sharding *s, const sc_mesh *m, int32_t d);
bool sc_sharding_equal(const sc_sharding *a, const sc_sharding *b);

/* Checks the invariant against m. SC_ERR_INVALID naming the axis. */
sc_status sc_sharding_validate(const sc_sharding *s, const sc_mesh *m, sc_diag *d);
/* Local (per-rank) dims of a value with global dims[rank] under s: each dim
 * divided by the product of its axes' sizes. SC_ERR_INVALID when a dim is not
 * divisible (naming value, dim and axes), is unknown, or ranks differ.
 * value_name may be NULL. */
sc_status sc_sharding_local_shape(const sc_sharding *s, const sc_mesh *m,
                                  int32_t rank, const int64_t *dims, int64_t *local,
                                  const char *value_name, sc_diag *d);

/* The offset and extent, in the global dim d of size `size`, of the piece
 * held by the rank with mesh coordinates coords, for each of the
 * sc_sharding_stride(s, d) blocks: block b's piece starts at
 * b * (size / stride) + *offset and has *extent elements. */
void sc_sharding_piece(const sc_sharding *s, const sc_mesh *m, int32_t d, int64_t size,
                       const int64_t *coords, int64_t *offset, int64_t *extent);
/* Copies rank coords' local piece of the global tensor src (dtype size esz,
 * global dims dims[s->rank]) to dst (packed, local shape). Pending-sum
 * (partial) axes: the rank whose coordinate along every partial axis is 0
 * gets the data, the others zeros (so the sum is the value, exactly). */
void sc_sharding_extract(const sc_sharding *s, const sc_mesh *m, const int64_t *coords,
                         size_t esz, const int64_t *dims, const void *src, void *dst);

/* The inverse: copies the packed local piece src of rank coords into its
 * place in the global tensor dst (partial axes are ignored: any rank of a
 * replica group writes the same piece). */
void sc_sharding_insert(const sc_sharding *s, const sc_mesh *m, const int64_t *coords,
                        size_t esz, const int64_t *dims, const void *src, void *dst);

/* Canonical text form into buf; returns the length needed (like snprintf). */
size_t sc_sharding_format(const sc_sharding *s, const sc_mesh *m, char *buf, size_t n);
/* Parses text[0..len) (whitespace allowed between tokens). rank >= 0 checks
 * the number of dims; -1 takes it from the text. The result is validated.
 * SC_ERR_PARSE for syntax, SC_ERR_INVALID for unknown or repeated axes. */
sc_status sc_sharding_parse(const char *text, size_t len, const sc_mesh *m,
                            int32_t rank, sc_sharding *out, sc_diag *d);

/* ---- the graph's table ---- */
/* The global contents of a sharded constant: what every rank's piece is
 * cut from (sc_sharding_extract at the rank's coordinates). The partition
 * passes produce them; the distributed program (codegen/dist_program.h)
 * cuts each rank's weight shards from them. */
typedef struct sc_shard_source {
  const char *name;          /* value name in the local / stage graphs */
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK]; /* global dims */
  const void *data;          /* global data (borrowed), NULL with --no-weights */
  sc_sharding sharding;      /* how it is cut */
} sc_shard_source;

typedef struct sc_shardings {
  sc_mesh mesh;
  bool local_shapes;  /* values carry LOCAL shapes (a partitioned graph):
                         sc_graph_set_sharding does not check divisibility */
  int32_t n;          /* entries allocated (may be < g->n_values) */
  uint8_t *set;       /* set[id]: a sharding is assigned to value id */
  sc_sharding *of;    /* of[id], meaningful when set[id] */
} sc_shardings;

/* Gives g a sharding table over mesh (replacing the mesh and clearing every
 * sharding when it has one). SC_ERR_NOMEM. */
sc_status sc_graph_attach_mesh(sc_graph *g, const sc_mesh *mesh);
/* Marks g's values as holding local shapes (passes/partition): shardings
 * then describe how each local piece sits in its global value. Needs a mesh. */
void sc_graph_mark_local_shapes(sc_graph *g);
/* The mesh, or NULL when none is attached. */
const sc_mesh *sc_graph_mesh(const sc_graph *g);
/* Value id's sharding, or NULL when none is assigned (or no table). */
const sc_sharding *sc_graph_sharding(const sc_graph *g, int32_t value_id);
/* Assigns (s != NULL, validated against the mesh, and against the value's
 * rank and static dims when known: each split dim divisible) or clears (s == NULL). Needs an attached mesh (SC_ERR_USAGE).
 * Errors go to g->diag. */
sc_status sc_graph_set_sharding(sc_graph *g, int32_t value_id, const sc_sharding *s);
/* For sc_graph_compact: vmap[old id] = new id or -1; n_old ids. */
void sc_shardings_remap(sc_shardings *t, const int32_t *vmap, int32_t n_old);

#endif
