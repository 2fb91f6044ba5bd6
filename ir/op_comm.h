/* op_comm.h — the collective ops (family C of ops.def): AllReduce,
 * AllGather, ReduceScatter, AllToAll, Send, Recv.
 *
 * Each runs over the group of a set of mesh axes: its `axes` attribute
 * (names of axes of the graph's mesh, sc_graph_mesh; Send and Recv default
 * to ["pp"]). The group size is the product of their sizes. A graph without
 * a mesh cannot hold collectives: shape inference fails with "collective
 * needs a mesh". Attributes:
 *
 *   AllReduce(x)     {axes, op = "sum"|"max"|"min"}           same shape
 *   AllGather(x)     {axes, axis = 0}            dim axis × group size
 *   ReduceScatter(x) {axes, axis = 0, op}        dim axis ÷ group size
 *   AllToAll(x)      {axes, split_axis = 0, concat_axis = 0}
 *                    dim split_axis ÷ n, then dim concat_axis × n
 *   Send(x)          {axes = ["pp"], peer_stage, tag = 0}
 *                    one dummy output of x's dtype and shape [0]: a token
 *                    (the IR needs outputs for ordering); SC_OPF_SIDE_EFFECT
 *                    keeps it from dce
 *   Recv()           {axes = ["pp"], peer_stage, tag = 0, dtype = "f32",
 *                    shape = [...]}   output of that dtype and shape
 *
 * peer_stage is the peer's position (key) in the group along `axes`; tags
 * are in [0, SC_COMM_TAG_MAX]. In place of peer_stage, `shift = s` (0 < |s|
 * < group size) names the peer relative to the rank's own key k: Send goes
 * to (k + s) mod n and Recv comes from (k − s) mod n, so that one program,
 * shared by every rank of the group, moves each rank's block one step
 * around a ring (context parallelism's ring attention,
 * docs/context-parallel.md). A Recv with a shift follows its Send in the
 * node order (sends are buffered on local, tcp and MPI; see runtime/comm.h). This header is what codegen's lowering (codegen/
 * lower_comm.c) reads back from a node whose shapes were inferred. */
#ifndef SC_OP_COMM_H
#define SC_OP_COMM_H

#include "ir.h"
#include "mesh.h"

/* Reduction of AllReduce / ReduceScatter: the order of runtime/comm.h's
 * sc_reduce_op (a static_assert in runtime/session.c keeps them equal). */
enum { SC_COMM_OP_SUM, SC_COMM_OP_MAX, SC_COMM_OP_MIN };

/* Largest Send/Recv tag: MPI guarantees at least this MPI_TAG_UB. The
 * pipeline split numbers its tags below it; every communicator accepts
 * [0, SC_COMM_TAG_MAX]. */
#define SC_COMM_TAG_MAX 32767

/* The node's group: mask of its axes in the graph's mesh and the group
 * size. Errors (on n, in g->diag): no mesh, unknown axis, repeated axis,
 * axes not a list of strings. */
sc_status sc_op_comm_group(sc_graph *g, const sc_node *n, sc_axes *axes, int64_t *size);
/* The `op` attribute as SC_COMM_OP_*; error for another name. */
sc_status sc_op_comm_reduce(sc_graph *g, const sc_node *n, int32_t *op);

#endif
