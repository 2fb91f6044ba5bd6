/* recompute.h — activation checkpointing of a training step, in the graph.
 *
 * sc_recompute rewrites a graph that autodiff has just extended (nodes
 * [0, n_fwd) are the forward and the loss, the rest the backward): a set of
 * forward nodes per repeated block (passes/blocks.h: by structure) is cloned and the backward reads the
 * clones, which run right before the backward first needs them, so that
 * the forward's own values die in the forward (recompute.c says which
 * nodes: full, every node of each block; selective, each attention core).
 * The graph stays topologically ordered; nothing else changes: the memory
 * plan, fusion and the partitioner see ordinary nodes. The report says how
 * many blocks were found and how, and counts the clones and their FLOPs
 * (the ops table's cost of one execution); no blocks, no clones. params
 * (n_params value ids) are the step's weights, which are graph inputs.
 * Errors: SC_ERR_NOMEM, SC_ERR_LIMIT (a node of more than 64 inputs or
 * outputs). */
#ifndef SC_PASSES_RECOMPUTE_H
#define SC_PASSES_RECOMPUTE_H

#include "ir/ir.h"

typedef enum sc_recompute_kind {
  SC_RECOMPUTE_NONE,
  SC_RECOMPUTE_SELECTIVE,
  SC_RECOMPUTE_FULL
} sc_recompute_kind;

typedef struct sc_recompute_report {
  int32_t blocks;         /* repeated blocks found (0: nothing recomputed) */
  int32_t found_by;       /* sc_blocks_how */
  int32_t adds_per_block; /* residual additions per block (by structure) */
  int32_t nodes;          /* forward nodes cloned */
  double flops;           /* their FLOPs, one execution */
} sc_recompute_report;

sc_status sc_recompute(sc_graph *g, sc_recompute_kind kind, int32_t n_fwd, const int32_t *params,
                       int32_t n_params, sc_recompute_report *r, sc_diag *d);

#endif
