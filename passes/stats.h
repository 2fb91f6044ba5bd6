/* stats.h — model statistics: parameters, FLOPs, op histogram, the largest
 * activation and a per-block table. An analysis: it reads the graph and never
 * changes it.
 *
 * Statistics are gathered in two steps because folding changes the graph:
 *   sc_stats_begin  right after import (before any pass): node count before
 *                   folding, parameters (every SC_VALUE_PARAM value, i.e. every
 *                   initializer, whether its data is present or absent), the
 *                   name key of the blocks (passes/blocks.h) in block_key;
 *   sc_stats_finish after the canonical passes: node count, op histogram,
 *                   forward FLOPs (sum of sc_ops[op].cost over live nodes),
 *                   largest activation, the repeated blocks (passes/blocks.h:
 *                   by structure, labelled by names when they agree, else by
 *                   names alone) with the nodes, FLOPs and parameters of each.
 * Constant-node tensors and folded constants are not parameters.
 *
 * Block detection: docs/inspect.md. A parameter belongs to the block its own
 * name says when names label the blocks, else to the block of all its
 * readers, else "outside blocks". After sc_stats_finish block_key is the key
 * that labels the blocks (NULL when the blocks are found by structure and
 * the names do not agree, or when there are none).
 *
 * Not thread-safe with respect to the graph; sc_stats owns its memory (free
 * with sc_stats_free). */
#ifndef SC_PASSES_STATS_H
#define SC_PASSES_STATS_H

#include "ir/ir.h"

typedef struct sc_block_stats {
  int64_t index;   /* block index from the names; -1 for "outside blocks" */
  int64_t n_nodes; /* live nodes after folding */
  int64_t params;  /* parameter elements */
  int64_t param_bytes;
  double flops;
} sc_block_stats;

typedef struct sc_stats_param {
  const char *name; /* graph-owned */
  int64_t numel, bytes;
} sc_stats_param;

typedef struct sc_stats {
  int64_t n_nodes_before_fold;
  int64_t n_nodes;                          /* after the passes */
  int64_t op_count[SC_OP_COUNT];            /* after the passes */
  int64_t n_params;                         /* parameter tensors */
  int64_t params;                           /* parameter elements */
  int64_t param_bytes;
  int64_t params_by_dtype[SC_DTYPE_COUNT];  /* elements */
  int64_t param_bytes_by_dtype[SC_DTYPE_COUNT];
  double flops;                             /* forward, one execution */
  const char *largest_name;                 /* largest activation: a graph input or a
                                               value computed from one (graph-owned) */
  int32_t largest_value;                    /* its value id after the passes, or -1 */
  int64_t largest_bytes;

  char *block_key;        /* e.g. "transformer.h" (owned), NULL if none */
  int32_t n_blocks;
  sc_block_stats *blocks; /* in graph order: index is the name label, else the
                             position (owned) */
  int32_t found_by;       /* sc_blocks_how (passes/blocks.h) */
  int32_t adds_per_block; /* residual additions per block (by structure) */
  sc_stats_param *param_list; /* the n_params parameters of begin (owned) */
  sc_block_stats outside; /* nodes and params in no block (index -1) */
} sc_stats;

/* After import, before any pass. SC_ERR_LIMIT on overflowing counts,
 * SC_ERR_NOMEM; diagnostics in g->diag. */
sc_status sc_stats_begin(sc_graph *g, sc_stats *s);
/* After the passes (shapes known). */
sc_status sc_stats_finish(sc_graph *g, sc_stats *s);
void sc_stats_free(sc_stats *s);

/* Block index of a name under key ("transformer.h"), or -1
 * (sc_blocks_index_of_name). */
int64_t sc_stats_block_of_name(const char *key, const char *name);

/* "1.23 GFLOP" style: value scaled by 1000s with the unit after. */
void sc_stats_format_si(double v, const char *unit, char *buf, size_t n);
/* "1.50 GiB" style for bytes (1024s). */
void sc_stats_format_bytes(double v, char *buf, size_t n);

#endif
