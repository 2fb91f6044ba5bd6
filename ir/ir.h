/* ir.h — the graph: values, nodes and attributes.
 *
 * A graph is SSA dataflow. Values and nodes live in growable arrays owned by
 * the graph and are referred to by index (value_id, node_id), never by
 * pointer across calls that may add values or nodes. Strings, attribute
 * payloads and folded constant data live in the graph's arena.
 *
 * Invariants (checked by sc_graph_verify):
 *  - g->nodes is in topological order: every input of node i is a graph
 *    input, a constant, or an output of a node before i;
 *  - each value has at most one producer; a value with data has none;
 *  - value names are unique (they are the ONNX names; "" is never used);
 *  - after shape inference every live value has a dtype and a static shape.
 *
 * Shapes are static after binding: symbolic dims of graph inputs (ONNX
 * dim_param, e.g. "batch") are bound with sc_graph_bind_dim before shape
 * inference; dim_param keeps the original names for printing.
 *
 * Constant data is either borrowed (from the mmapped model file or the
 * decoded protobuf, kept alive by the graph's cleanups) or owned by the
 * arena (folding results). A constant whose data is absent (--no-weights)
 * has SC_VALUE_CONST set and data == NULL: its shape and dtype are known,
 * its contents are not. */
#ifndef SC_IR_H
#define SC_IR_H

#include "base.h"
#include "dtype.h"
#include "ops.h"

enum { SC_MAX_RANK = 8 };

/* A dim not known yet: an unbound symbolic dim (dim_param set) or one
 * the model leaves open. Shape inference needs none left. */
#define SC_DIM_UNKNOWN ((int64_t)-1)

/* Largest element count of one tensor shardc accepts (2^50). */
#define SC_MAX_ELEMENTS ((int64_t)1 << 50)

enum sc_value_flags {
  SC_VALUE_INPUT = 1u << 0,  /* graph input (fed at run time) */
  SC_VALUE_OUTPUT = 1u << 1, /* graph output */
  SC_VALUE_CONST = 1u << 2,  /* constant: initializer, Constant or folded */
  SC_VALUE_PARAM = 1u << 3,  /* came from an initializer (a weight) */
  SC_VALUE_DEAD = 1u << 4,   /* removed; dropped by sc_graph_compact */
  /* a graph input given its value at compile time (the driver's specialise
   * step): now a constant, the same on every rank; a plan's sharding of it
   * is ignored */
  SC_VALUE_SPECIALISED = 1u << 5,
  /* in a subgraph: a value of the enclosing scope it reads (by name) */
  SC_VALUE_OUTER = 1u << 6,
};

typedef enum sc_data_kind {
  SC_DATA_NONE = 0, /* no data: a computed value, or an absent weight */
  SC_DATA_BORROWED, /* points into a mapping or decoded message */
  SC_DATA_ARENA,    /* owned by the graph arena */
} sc_data_kind;

typedef struct sc_value {
  const char *name;
  sc_dtype dtype;            /* SC_DTYPE_UNDEF until inferred */
  int32_t rank;              /* -1 until inferred */
  int64_t dims[SC_MAX_RANK];
  const char **dim_param;    /* per-dim symbolic name or NULL; NULL array if none */
  int32_t producer;          /* node id, -1 for inputs and constants */
  uint32_t flags;            /* sc_value_flags */
  const void *data;          /* constant contents, or NULL */
  uint64_t data_bytes;       /* == elements * dtype size when data != NULL */
  sc_data_kind data_kind;
  const char *ext_location;  /* external-data file name, for inspect/export */
  uint64_t ext_offset;       /* byte offset of the data in ext_location */
} sc_value;

typedef enum sc_attr_kind {
  SC_ATTR_UNDEF = 0,
  SC_ATTR_FLOAT,
  SC_ATTR_INT,
  SC_ATTR_STRING,
  SC_ATTR_TENSOR,
  SC_ATTR_GRAPH,
  SC_ATTR_FLOATS,
  SC_ATTR_INTS,
  SC_ATTR_STRINGS,
  SC_ATTR_TENSORS,
  SC_ATTR_GRAPHS,
  SC_ATTR_SPARSE_TENSOR,
  SC_ATTR_SPARSE_TENSORS,
  SC_ATTR_TYPE_PROTO,
  SC_ATTR_TYPE_PROTOS,
  SC_ATTR_KIND_COUNT
} sc_attr_kind;

/* A constant tensor held by an attribute (Constant's value, ConstantOfShape's
 * value). Data is in the graph arena, or borrowed. */
typedef struct sc_tensor {
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  const void *data;
  uint64_t data_bytes;
} sc_tensor;

typedef struct sc_attr {
  const char *name;
  sc_attr_kind kind;
  int64_t i;             /* INT */
  double f;              /* FLOAT (stored as read: a float widened) */
  const char *s;         /* STRING (NUL-terminated copy) */
  int64_t n;             /* element count of list kinds */
  int64_t *ints;         /* INTS */
  double *floats;        /* FLOATS */
  const char **strings;  /* STRINGS */
  sc_tensor *t;          /* TENSOR: one; TENSORS: n of them */
  /* GRAPH: the subgraph (If's branches, Loop's and Scan's body), a graph
   * of its own that the owner graph destroys (a cleanup); the values it
   * reads from the enclosing scope are SC_VALUE_OUTER values named as
   * there. `scope`: where those names are looked up when the node was
   * copied out of another subgraph (passes/composite_control.c), NULL at
   * the top. GRAPHS, SPARSE_TENSOR(S), TYPE_PROTO(S) are recorded by kind
   * only: no supported op uses them. */
  struct sc_graph *graph;
  const char *scope;
} sc_attr;

enum sc_node_flags {
  SC_NODE_DEAD = 1u << 0, /* removed; dropped by sc_graph_compact */
};

typedef struct sc_node {
  sc_op op;
  const char *name;      /* unique after import (generated when missing) */
  int32_t n_inputs;
  int32_t *inputs;       /* value ids; -1 for an omitted optional input */
  int32_t n_outputs;
  int32_t *outputs;      /* value ids; -1 for an omitted optional output */
  int32_t n_attrs;
  sc_attr *attrs;
  uint32_t flags;        /* sc_node_flags */
} sc_node;

typedef void (*sc_cleanup_fn)(void *p);

typedef struct sc_graph {
  sc_arena arena;
  const char *name;
  int64_t opset;          /* default-domain opset the graph was written for */
  int64_t ir_version;     /* from the ModelProto; 0 for text IR */
  const char *producer;   /* producer_name, or NULL */

  sc_value *values;
  int32_t n_values, cap_values;
  sc_node *nodes;
  int32_t n_nodes, cap_nodes;
  int32_t *inputs;        /* graph inputs in order (value ids) */
  int32_t n_inputs, cap_inputs;
  int32_t *outputs;       /* graph outputs in order (value ids) */
  int32_t n_outputs, cap_outputs;

  /* name → value id, open addressing; rebuilt by compaction */
  int32_t *name_index;
  uint32_t name_index_cap;
  /* sc_graph_new_value's memo: per base name, the suffix to probe first
   * (every smaller one is taken: names are only added, and compaction,
   * which frees some, clears it); open addressing, bases in the arena */
  struct sc_suffix_memo { const char *base; int64_t next; } *suffix;
  uint32_t suffix_cap, n_suffix;

  struct { sc_cleanup_fn fn; void *p; } *cleanups;
  int32_t n_cleanups, cap_cleanups;

  sc_diag diag;           /* first problem found */
  int32_t want_const;     /* value whose contents a shape depends on, or -1 */
  /* the graph inputs the driver made constants (SC_VALUE_SPECIALISED), by
   * name: the value may be folded away, the name still means "given" */
  const char **specialised;
  int32_t n_specialised;
  struct sc_shardings *shardings; /* per-value sharding, NULL until a plan assigns them (ir/sharding.h) */
} sc_graph;

/* ---- lifetime ---- */
sc_graph *sc_graph_create(const char *name);
void sc_graph_destroy(sc_graph *g); /* runs cleanups in reverse order */
sc_status sc_graph_add_cleanup(sc_graph *g, sc_cleanup_fn fn, void *p);
/* Runs the cleanup registered for p now (the last one, when several are)
 * and forgets it; false when no cleanup has p. For memory that only the
 * caller still uses and is done with: a weight's bytes once the trainer has
 * copied them (the ONNX importer owns each large raw_data block through its
 * own cleanup). Every value still pointing at p must have let go of it. */
bool sc_graph_release(sc_graph *g, const void *p);

/* ---- building ---- */
/* A new value with a unique name (name must not exist yet; NULL makes one
 * up). Returns the id, or -1 with g->diag set. */
int32_t sc_graph_add_value(sc_graph *g, const char *name);
int32_t sc_graph_find_value(const sc_graph *g, const char *name); /* -1 */
/* A fresh value named after base ("base", "base_1", ...). */
int32_t sc_graph_new_value(sc_graph *g, const char *base);
/* A node; inputs/outputs copied. Returns node id or -1. Node names are made
 * unique by the caller (the importer) or generated when NULL. */
int32_t sc_graph_add_node(sc_graph *g, sc_op op, const char *name,
                          const int32_t *inputs, int32_t n_inputs,
                          const int32_t *outputs, int32_t n_outputs);
sc_attr *sc_node_add_attr(sc_graph *g, int32_t node_id, const char *name,
                          sc_attr_kind kind);
/* Adds src's attributes to node node_id of the same graph (values shared,
 * not deep-copied; src may be a node of g or a copy of one).
 * SC_ERR_NOMEM on failure. */
sc_status sc_node_copy_attrs(sc_graph *g, int32_t node_id, const sc_node *src);
sc_status sc_graph_add_input(sc_graph *g, int32_t value_id);
sc_status sc_graph_add_output(sc_graph *g, int32_t value_id);

/* Makes v a constant with the given contents (copied into the arena when
 * copy is true, else borrowed: the caller keeps data alive via a cleanup). */
sc_status sc_value_set_data(sc_graph *g, int32_t value_id, sc_dtype dtype,
                            int32_t rank, const int64_t *dims,
                            const void *data, uint64_t data_bytes, bool copy);
/* Sets dtype and shape (rank <= SC_MAX_RANK; dims >= 0; checked). */
sc_status sc_value_set_shape(sc_graph *g, int32_t value_id, sc_dtype dtype,
                             int32_t rank, const int64_t *dims);

/* Whether `name` was a graph input the driver made a constant (given at
 * compile time: g->specialised), even if it has been folded away since. */
bool sc_graph_was_specialised(const sc_graph *g, const char *name);

/* ---- reading ---- */
static inline sc_value *sc_val(sc_graph *g, int32_t id) { return &g->values[id]; }
static inline sc_node *sc_nod(sc_graph *g, int32_t id) { return &g->nodes[id]; }
/* Number of elements of v's shape; -1 when unknown or overflowing. */
int64_t sc_value_numel(const sc_value *v);
/* Bytes of v's shape and dtype; -1 when unknown or overflowing. */
int64_t sc_value_bytes(const sc_value *v);
bool sc_value_is_const(const sc_value *v);   /* flags & CONST */
bool sc_value_has_data(const sc_value *v);   /* const with data present */
/* Whether n bytes are all 0 (+0.0 in any float type, integer 0). */
bool sc_bytes_zero(const void *data, uint64_t n);
/* Whether v is a constant whose data holds zeros only. */
bool sc_value_zeros(const sc_value *v);
/* Optional input i of node n, or NULL when absent (out of range or -1). */
sc_value *sc_node_input(sc_graph *g, const sc_node *n, int32_t i);
sc_value *sc_node_output(sc_graph *g, const sc_node *n, int32_t i);

/* Attributes; NULL / default when absent. The typed getters also check the
 * kind and record a diagnostic on a mismatch (then return the default). */
const sc_attr *sc_node_attr(const sc_node *n, const char *name);
int64_t sc_attr_int(sc_graph *g, const sc_node *n, const char *name, int64_t dflt);
double sc_attr_float(sc_graph *g, const sc_node *n, const char *name, double dflt);
const char *sc_attr_string(sc_graph *g, const sc_node *n, const char *name,
                           const char *dflt);
/* INTS: returns count (or -1 when absent) and the array through *out. */
int64_t sc_attr_ints(sc_graph *g, const sc_node *n, const char *name,
                     const int64_t **out);
int64_t sc_attr_floats(sc_graph *g, const sc_node *n, const char *name,
                       const double **out);
const sc_tensor *sc_attr_tensor(sc_graph *g, const sc_node *n, const char *name);

/* Records a problem about node n in g->diag (with its name and op type) and
 * returns status. */
sc_status sc_node_error(sc_graph *g, const sc_node *n, sc_status status,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
sc_status sc_graph_error(sc_graph *g, sc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- whole-graph operations ---- */
/* Orders nodes topologically (stable where possible); SC_ERR_INVALID with a
 * diagnostic naming a node on the cycle, or a node whose input has no
 * producer and is neither an input nor a constant. */
sc_status sc_graph_toposort(sc_graph *g);
/* Puts node order[k] at k (order a permutation of the nodes; scratch room
 * for n_nodes nodes) and renumbers the producers. */
void sc_graph_permute_nodes(sc_graph *g, const int32_t *order, sc_node *scratch);
/* Orders the nodes by key[node] (stable: equal keys keep their order);
 * the caller's keys keep every producer before its readers. SC_ERR_NOMEM. */
sc_status sc_graph_order_nodes(sc_graph *g, const int32_t *key);
/* Drops values and nodes flagged DEAD, renumbering ids everywhere. */
sc_status sc_graph_compact(sc_graph *g);
/* Binds every dim_param named `name` on graph inputs to `value`. Returns the
 * number of dims bound. */
int sc_graph_bind_dim(sc_graph *g, const char *name, int64_t value);
/* Users: for each value, the nodes that read it (CSR arrays, caller frees
 * with sc_free: *offsets has n_values+1 entries). */
sc_status sc_graph_users(const sc_graph *g, int32_t **offsets, int32_t **users);

/* Checks the invariants listed at the top; with require_shapes also that
 * every live value has dtype and shape. SC_OK or a diagnostic. */
sc_status sc_graph_verify(sc_graph *g, bool require_shapes);

#endif
