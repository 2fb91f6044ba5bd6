/* cp.h — the sequence's zig-zag order for context parallelism, on a whole
 * graph (cp.c, docs/context-parallel.md). A header apart from the
 * partitioner's, for passes/train.c: a training step is ordered before
 * autodiff, so that its backward is the ordered forward's.
 *
 * sc_cp_prepare_graph(g, n, batch_split, seq_inputs, n_seq_inputs): every
 * attention's mask checked and folded into its causal flag, with
 * batch_split (dp or fsdp beside cp) the products whose rows merge the
 * batch and the sequence kept 3-D, the residual stream after
 * the token embedding permuted into the zig-zag order of n ranks (a Gather
 * marked cp_zigzag = n, which sc_partition_prepare_cp finds), the
 * seq_inputs (value ids of inputs whose dim 1 is the sequence: labels)
 * permuted alike, position tables read with the permuted values permuted
 * too, outputs with a sequence dim put back in order. g is changed in
 * place and toposorted. Errors (SC_ERR_USAGE, naming the node or input):
 * an unfused attention, unequal sequences, a length that does not divide
 * into 2n chunks (naming the nearest that do), a mask other than causal,
 * no [b, S, hidden] value, a sequence input without dim 1 of S. */
#ifndef SC_PASSES_PARTITION_CP_H
#define SC_PASSES_PARTITION_CP_H

#include "ir/ir.h"

sc_status sc_cp_prepare_graph(sc_graph *g, int64_t n, bool batch_split,
                              const int32_t *seq_inputs, int32_t n_seq_inputs);

#endif
