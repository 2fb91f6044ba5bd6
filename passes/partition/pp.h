/* pp.h — pipeline parallelism: stage assignment and the split into stages.
 *
 * Stage assignment works on the GLOBAL graph (global shapes, after the
 * canonical passes, nodes in topological order). Stages are contiguous in
 * the node order: stage(n) is non-decreasing along g->nodes.
 *   balanced (no boundaries): cut the node list into n_stages runs so that
 *     the largest run's cost is as small as possible, where a node's cost is
 *     its FLOPs (sc_ops[op].cost) plus a memory term (bytes of its outputs
 *     and of the weights it reads, weighted so that a weight byte counts like
 *     one FLOP); weights are charged to the first node that reads them.
 *     Cuts prefer points where few bytes cross (the residual stream between
 *     transformer blocks) among cuts of near-equal balance (within 5%).
 *     Every stage gets at least one node; fewer nodes than stages is an
 *     error naming both counts.
 *   boundaries: the user's n_stages-1 node names; node `boundaries[k]`
 *     starts stage k+1. Unknown names or names out of order are errors.
 *
 * Split works on the LOCAL graph built by localize.c: every node carries an
 * int attribute `__stage` (non-decreasing in node order), values have local
 * shapes, g has a mesh and a sharding table, and sharded constants have no
 * data. For each stage s it builds a new graph holding
 *   - the nodes of stage s (same names, attributes copied, `__stage` too),
 *   - every value they read or write (same names, dtypes, local shapes,
 *     flags, data — replicated constants' data is borrowed from the local
 *     graph, which outlives the stage graphs — and shardings),
 *   - as inputs: the local graph's inputs that stage s reads, in the local
 *     graph's input order; as outputs: the local graph's outputs that stage s
 *     produces, in output order,
 *   - for each value v produced in stage s and read by a later stage t:
 *     `Send(v) {axes = [pp], peer_stage = t, tag = T}` in s (after v's
 *     producer, its dummy output named "<v>.sent_to_<t>"), and in t
 *     `v = Recv() {axes = [pp], peer_stage = s, tag = T, dtype, shape}`
 *     (the same name v) placed before v's first reader; T is a per-(v,t)
 *     tag unique in the whole program (0, 1, 2, ... in the order the sends
 *     are made). Sends in s are issued in the order their values are
 *     produced. Recvs in t come in tag order, each before its first reader,
 *     all before t's first Send: a send may block until its receive starts
 *     (runtime/comm.h), and this order cannot deadlock; by tag, s's sends
 *     to t and t's receives from s match one to one.
 *   A local-graph output produced in stage s that a later stage also reads is
 *   both an output of s and sent.
 * The stage graph gets the same mesh (sc_graph_attach_mesh) and each
 * value's sharding from the local graph. Every stage graph passes
 * sc_graph_verify(g, true). */
#ifndef SC_PASSES_PP_H
#define SC_PASSES_PP_H

#include "ir/ir.h"
#include "passes/plan/cluster.h"

/* node_stage[g->n_nodes]: filled. boundaries may be NULL when n_b == 0. */
sc_status sc_pp_assign_stages(sc_graph *g, int32_t n_stages, const char *const *boundaries,
                              int32_t n_b, int32_t *node_stage, sc_diag *d);
/* The same with given per-node costs (node_cost[g->n_nodes], e.g. what
 * each node costs ONE rank once tensor and data parallelism have split
 * it: partition.c measures them on a first localized graph); NULL: g's
 * own. The bytes crossing each cut still come from g. */
sc_status sc_pp_assign_stages_costed(sc_graph *g, int32_t n_stages,
                                     const char *const *boundaries, int32_t n_b,
                                     const double *node_cost, int32_t *node_stage,
                                     sc_diag *d);
/* Each node's cost as the balancer counts it (FLOPs, plus byte_weight
 * times its bytes: its outputs' and the constants' it is first to read,
 * + 1) into cost[g->n_nodes]. byte_weight: the FLOPs a byte's time is
 * worth (sc_pp_byte_weight), or 1 where no cluster is known. */
sc_status sc_pp_node_costs(sc_graph *g, double byte_weight, double *cost);
/* The FLOPs one byte of memory traffic costs in time on cluster c (its
 * GEMM peak in the step's dtype at SC_COST_GEMM_BEST over its HBM
 * bandwidth at SC_COST_MEMORY_EFF: 153 on an A100 in bf16, 295 on an
 * H100), so that a stage's cost is its predicted time; 1 when c is NULL or
 * does not know either figure. */
double sc_pp_byte_weight(const sc_cluster *c, bool low_precision);

/* stages_out[n_stages]: new graphs (caller destroys). pp_axis: the mesh
 * axis name the Send/Recv ops use (any string when n_stages == 1: no
 * Send/Recv then). */
sc_status sc_pp_split(sc_graph *local, int32_t n_stages, const char *pp_axis,
                      sc_graph **stages_out, sc_diag *d);

/* The pieces of a pipelined training step (ir/pipe.h): the same split of a
 * local graph whose `__stage` is each node's piece, but a value read by
 * another piece is not sent: it is an output of its producer's piece (once)
 * and an input (same name) of each piece that reads it, which the runtime
 * hands over (runtime/pipe_rank.c: kept on the rank, or sent to the rank
 * that runs the reader). Pieces need not be in node order; every value
 * must flow to the same or a later piece (an error naming the node
 * otherwise). */
sc_status sc_pp_split_pieces(sc_graph *local, int32_t n_pieces, sc_graph **pieces_out,
                             sc_diag *d);

#endif
