/* blocks.h — the repeated blocks of a model (transformer layers, residual
 * stages), found from the graph's structure; one detector for `inspect`'s
 * per-block table (passes/stats.h) and for activation recompute
 * (passes/recompute.h). An analysis: it never changes the graph.
 *
 * sc_blocks_find classifies nodes [0, n_nodes) of a topologically ordered
 * graph (dead nodes are skipped). By structure first: the residual
 * additions on the main path (an Add of two same-shaped activations, one
 * an ancestor of the other) cut the forward into groups, and k consecutive
 * groups make a block when every block's nodes have the same ops and
 * output shapes (blocks.c has the rules; docs/inspect.md the reader's
 * version). Names never decide a structural block; when the names of the
 * block's nodes and parameters agree with it ("transformer.h.3...") they
 * label it (its index, the key). Failing structure, names alone: the
 * prefix path shared by the most names with at least two indices (the
 * "key") and each node's index from its own name, the constants it reads
 * or its producers — the rule `inspect` has always used.
 *
 * Parameters are constants (SC_VALUE_PARAM) plus, in a training graph
 * whose weights are inputs, the values listed in params. sc_blocks owns
 * its arrays (sc_blocks_free). Errors: SC_ERR_NOMEM. */
#ifndef SC_PASSES_BLOCKS_H
#define SC_PASSES_BLOCKS_H

#include "ir/ir.h"

typedef enum sc_blocks_how {
  SC_BLOCKS_NONE,      /* no repeated blocks */
  SC_BLOCKS_STRUCTURE, /* residual additions, isomorphic groups */
  SC_BLOCKS_NAMES      /* names alone (no structure found) */
} sc_blocks_how;

typedef struct sc_blocks {
  sc_blocks_how how;
  int32_t n_blocks;
  int32_t adds_per_block; /* residual additions per block (structure), else 0 */
  int32_t n_nodes;        /* nodes classified */
  int32_t *node_block;    /* per node: 0..n_blocks-1, or -1 outside every block */
  int64_t *label;         /* per block: its index in the names, else its position */
  char *key;              /* the name prefix that labels the blocks, or NULL */
} sc_blocks;

/* The name key of nodes [0, n_nodes) and parameter names ("transformer.h"),
 * NULL when the names have none; *key owned by the caller. */
sc_status sc_blocks_name_key(const sc_graph *g, int32_t n_nodes, char **key);
/* Block index of a name under key ("transformer.h", "/h.3/attn/MatMul" ->
 * 3), or -1. */
int64_t sc_blocks_index_of_name(const char *key, const char *name);

/* Blocks of nodes [0, n_nodes); name_key from sc_blocks_name_key (may be
 * NULL: no labels, no names fallback); params (n_params of them, may be
 * NULL) are value ids to treat as parameters. */
sc_status sc_blocks_find(const sc_graph *g, int32_t n_nodes, const char *name_key,
                         const int32_t *params, int32_t n_params, sc_blocks *b, sc_diag *d);
void sc_blocks_free(sc_blocks *b);
/* "by structure (2 residual additions each)", "by names alone (...)" or
 * "none": how b was found, for reports. */
void sc_blocks_describe(const sc_blocks *b, char *buf, size_t n);

#endif
