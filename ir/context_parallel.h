/* context_parallel.h — the sequence layout of a `cp` mesh axis and what
 * follows from it: each rank's global positions, the sequence lengths that
 * split, each ring-attention step's block pair, the ring's bytes and the
 * attention work per rank (docs/context-parallel.md).
 *
 * The layout: a sequence of S tokens over N cp ranks is cut into 2N chunks
 * of c = S / (2N) tokens; the rank with cp coordinate r holds chunks r and
 * 2N−1−r, in that order (local rows [0, c) and [c, 2c): its halves H0 and
 * H1). Under a causal mask every rank then does the same work.
 *
 * Ring attention on this layout (rank r, step i = 0 .. N−1, keys and values
 * of rank s = (r − i) mod N in hand):
 *   step 0:  the local block, causal over the 2c local rows (chunk r comes
 *            before chunk 2N−1−r, so the local mask is the global one);
 *   step i:  two unmasked c × c blocks: X = (queries H1, keys H0) and
 *            Y = (queries Hh, keys Hh) with h = sc_cp_ring_half(r, s):
 *            0 when s < r (both query chunks see chunk s), 1 when s > r
 *            (only chunk 2N−1−r sees s's chunks, both of them).
 *
 * Plain functions of their arguments: no state, no locks, no allocation. */
#ifndef SC_IR_CONTEXT_PARALLEL_H
#define SC_IR_CONTEXT_PARALLEL_H

#include "ir/base.h"

/* Checks that a sequence of seq tokens splits into 2·cp chunks (cp >= 1).
 * SC_ERR_USAGE otherwise, the message naming the nearest lengths that do:
 * "sequence length 18 does not divide into 2·cp = 4 chunks (cp=2); lengths
 * that do: 16 or 20". what (may be NULL) names the value the length is of
 * and becomes the diagnostic's prefix. */
sc_status sc_cp_check_sequence(int64_t seq, int64_t cp, const char *what, sc_diag *d);

/* The length a sequence of seq tokens is padded to over cp ranks without a
 * causal mask when it does not divide into 2·cp chunks: the next multiple
 * of cp (seq itself when cp divides it). The cp contiguous blocks then hold
 * seq / cp rounded up rows each, the last cp − 1 rows at most padding. */
int64_t sc_cp_padded_sequence(int64_t seq, int64_t cp);

/* The global position of local row j (0 <= j < seq / cp) of cp rank r
 * (0 <= r < cp); seq must have passed sc_cp_check_sequence. */
int64_t sc_cp_position(int64_t seq, int64_t cp, int64_t r, int64_t j);

/* The cp rank whose keys and values rank r holds at ring step i:
 * (r − i) mod cp. */
int64_t sc_cp_ring_source(int64_t cp, int64_t r, int64_t i);

/* The half h of block Y at a ring step where rank r holds rank s's keys
 * (s != r): 0 when s < r, 1 when s > r. */
int32_t sc_cp_ring_half(int64_t r, int64_t s);

/* (query, key) pairs one head of rank r computes over the whole causal
 * ring for a sequence of seq tokens: c(2c + 1) at step 0 and 2c² at each
 * of the cp − 1 others, c = seq / (2 cp) — the same for every rank.
 * Without a causal mask: (seq / cp)·seq. */
double sc_cp_rank_pairs(int64_t seq, int64_t cp, bool causal);

/* Bytes one rank sends around the ring for one attention layer: the keys
 * and values of b sequences, kvh kv heads, head dims d and dv, elem_bytes
 * each, seq / cp rows; the forward moves them cp − 1 hops, the backward
 * (grad) moves them cp − 1 hops and their gradients cp hops (home):
 * (cp − 1) or (2 cp − 1) times b·kvh·(seq / cp)·(d + dv)·elem_bytes.
 * 0 when cp is 1. */
double sc_cp_ring_bytes(int64_t b, int64_t kvh, int64_t seq, int64_t d, int64_t dv,
                        int64_t elem_bytes, int64_t cp, bool grad);

#endif
