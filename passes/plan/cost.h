/* cost.h — the planner's cost formulas: how long a collective over a group
 * of ranks and a piece of computation take on a cluster (docs/planner.md,
 * "Cost model").
 *
 * Collectives follow NCCL's structure: time = latency + bytes moved per
 * rank / bandwidth, for each algorithm (ring for every collective; tree
 * too for all-reduce), the cheaper one chosen as NCCL's tuner would. The
 * link is the cluster's intra-node one when the group stays in a node, its
 * per-device network link when the group spans nodes; a step of a ring
 * waits for its slowest hop, so a ring that crosses nodes pays the network
 * latency at every step. Bytes moved per rank (B the whole buffer, n
 * ranks): ring all-reduce 2(n-1)/n B, all-gather and reduce-scatter
 * (n-1)/n B (B the gathered buffer, the scattered input), all-to-all
 * (n-1)/n B (B what one rank sends), broadcast and point-to-point B.
 * A group of one rank costs nothing and needs no figure.
 *
 * Computation is a roofline on one device: max(FLOPs / (peak[dtype] x
 * GEMM efficiency), bytes / (HBM bandwidth x memory efficiency)). The
 * efficiencies are the model's defaults (SC_COST_* below, their sources in
 * docs/planner.md) until calibration measures them.
 *
 * A cluster with a calibration profile (profile.h, docs/planner.md
 * section 5) is costed from it instead: a GEMM at the profile's rate
 * interpolated by shape and dtype (the efficiency argument is then not
 * used), a memory-bound step at the measured streaming bandwidth (no
 * efficiency on top), a collective inside a node with the fitted α, β and
 * per-call overhead of the profile's first communicator; and each compute
 * step (GEMM or memory-bound) includes sc_cost_step_overhead once — a
 * caller must not add it again.
 *
 * Invariants: a figure the cluster does not know (0) is never replaced:
 * a cost that needs it is an error naming it (cpu:local is uncalibrated:
 * "run shardc calibrate"). Pure functions; no state, no allocation.
 * Errors: SC_ERR_INVALID (an unknown figure, a negative size). */
#ifndef SC_PLAN_COST_H
#define SC_PLAN_COST_H

#include "passes/plan/cluster.h"

/* GEMM efficiency (achieved / peak), PLANNER.md section 2: H100 bf16
 * reaches ~80 % at the best shapes (every dimension at least
 * SC_COST_GEMM_LARGE), 52-78 % at others (SC_COST_GEMM_MID, their middle).
 * A dimension under one tensor-core tile (SC_COST_GEMM_TILE) fills only
 * that fraction of it: the lowest measured figure (52 %) times dim/tile. */
#define SC_COST_GEMM_BEST 0.80
#define SC_COST_GEMM_MID 0.65
#define SC_COST_GEMM_LOW 0.52
#define SC_COST_GEMM_LARGE 1024
#define SC_COST_GEMM_TILE 128
/* Memory-bound kernels (elementwise, reductions, copies): the fraction of
 * HBM bandwidth a streaming kernel reaches (the model's default, as
 * STREAM-like copies reach on these boards; to be calibrated). */
#define SC_COST_MEMORY_EFF 0.80

typedef enum sc_coll_kind {
  SC_COLL_ALL_REDUCE,
  SC_COLL_ALL_GATHER,
  SC_COLL_REDUCE_SCATTER,
  SC_COLL_ALL_TO_ALL,
  SC_COLL_BROADCAST,
  SC_COLL_SEND,          /* one point-to-point message (its receive is free) */
  SC_COLL_KIND_COUNT
} sc_coll_kind;

typedef enum sc_coll_algo { SC_COLL_RING, SC_COLL_TREE, SC_COLL_ALGO_COUNT } sc_coll_algo;

/* "all-reduce", ...; "ring", "tree". */
const char *sc_coll_kind_name(sc_coll_kind k);
const char *sc_coll_algo_name(sc_coll_algo a);

/* Where a group of ranks sits: its size and the nodes it spans (1: it
 * stays inside a node), evenly (the placement refuses uneven groups). */
typedef struct sc_coll_group {
  int64_t ranks; /* >= 1 */
  int64_t nodes; /* >= 1, dividing ranks */
} sc_coll_group;

typedef struct sc_coll_cost {
  sc_coll_algo algo;     /* the algorithm costed (or chosen) */
  double bytes_per_rank; /* moved through each rank's link */
  double latency_s;      /* the latency term */
  double transfer_s;     /* bytes_per_rank / bandwidth */
  double seconds;        /* latency_s + transfer_s */
} sc_coll_cost;

/* The cost of collective k of `bytes` (B above) over g on c with algorithm
 * a. SC_ERR_INVALID: a tree for anything but all-reduce, bytes < 0, a group
 * that is not whole (nodes not dividing ranks), a link figure c does not
 * know. */
sc_status sc_cost_collective_algo(const sc_cluster *c, sc_coll_kind k, sc_coll_algo a,
                                  double bytes, sc_coll_group g, sc_coll_cost *out, sc_diag *d);
/* The same with the cheaper algorithm (ring, or tree for an all-reduce). */
sc_status sc_cost_collective(const sc_cluster *c, sc_coll_kind k, double bytes, sc_coll_group g,
                             sc_coll_cost *out, sc_diag *d);
/* The nodes the group of set through rank 0 spans (m's ranks_per_node; 1
 * without one). */
int64_t sc_cost_group_nodes(const sc_mesh *m, sc_axes set);

/* GEMM efficiency of a batch of m x n x k products (above). */
double sc_cost_gemm_efficiency(int64_t m, int64_t n, int64_t k);
/* Roofline time of a GEMM of `flops` on `bytes` (read and written) in
 * dtype t, with efficiency eff; and of a memory-bound step moving `bytes`.
 * SC_ERR_INVALID when c does not know the peak of t or its HBM bandwidth
 * (the message names the figure). */
sc_status sc_cost_gemm_time(const sc_cluster *c, sc_cluster_dtype t, double flops, double bytes,
                            double eff, double *seconds, sc_diag *d);
sc_status sc_cost_memory_time(const sc_cluster *c, double bytes, double *seconds, sc_diag *d);
/* A kernel step of features f (profile.h: SC_PROFILE_KERNEL_TERMS of them,
 * on one thread; `split`: the pool runs it over the profile's threads)
 * moving `bytes`: with a profile that measured kernels, the larger of its
 * computing time and its memory time (at one thread's bandwidth when it is
 * not split and the profile measured that), plus the step overhead; else
 * sc_cost_memory_time. */
sc_status sc_cost_kernel_time(const sc_cluster *c, double bytes, const double *f, bool split,
                              double *seconds, sc_diag *d);
/* `flops` of a fused attention (one direction, grad: the backward) of
 * sq queries against skv keys, head dim hd, in dtype t, moving `bytes`;
 * what the simulator (sc_cost_attention_time, below) and the search's
 * estimate both time the kernel by (docs/planner.md, "Attention on a
 * GPU"): with a CUDA profile
 * that measured attention in t and this direction, at its measured rate
 * (profile.h); else at the rate of its per-head products (sq x skv x hd:
 * sc_cost_gemm_efficiency of the peak, or the profile's measured GEMM
 * rate for that shape), but no more than the cluster's
 * attention_efficiency of the peak (cluster.h; a profile's peak is its
 * best measured GEMM rate). Roofline against the bytes, plus the profile's
 * step overhead. Errors as sc_cost_gemm_time. */
sc_status sc_cost_fused_attention_time(const sc_cluster *c, sc_cluster_dtype t, double flops,
                                       double bytes, int64_t sq, int64_t skv, int64_t hd,
                                       bool grad, double *seconds, sc_diag *d);
/* A fused attention step (ir/attention.h) of shape s: its FLOPs
 * (sc_attention_flops: 4·b·h·sq·skv·d forward for dv = d, the visible
 * pairs only when causal; the backward 2.5 times) timed by
 * sc_cost_fused_attention_time, moving `bytes` (q, k, v, o, lse, mask and
 * the gradients, each once: no score matrix). With a CPU profile that
 * measured attention in t and this direction (profile.h,
 * sc_profile_attention) its computing time is that model's instead: the
 * features' seconds on one thread over the threads its work units keep
 * busy (min(threads, units)), the larger of that and the memory time,
 * plus the step overhead. *flops: the FLOPs counted. Errors as
 * sc_cost_gemm_time. */
struct sc_attention_shape;
sc_status sc_cost_attention_time(const sc_cluster *c, sc_cluster_dtype t,
                                 const struct sc_attention_shape *s, bool grad, double bytes,
                                 double *seconds, double *flops, sc_diag *d);
/* The GEMM of batch products m x n x k by its shape and layout (op(A) =
 * Aᵀ when trans_a, op(B) = Bᵀ when trans_b): with a profile, at the rate
 * measured for that shape and layout (sc_cost_gemm_time, which has only the
 * FLOPs, uses the cube of the same FLOPs); without, sc_cost_gemm_time with
 * sc_cost_gemm_efficiency(m, n, k). SC_ERR_INVALID: a dimension < 1, and
 * as sc_cost_gemm_time. */
sc_status sc_cost_gemm_shape_time(const sc_cluster *c, sc_cluster_dtype t, bool trans_a,
                                  bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                                  double bytes, double *seconds, sc_diag *d);
/* The fixed cost of one compute step (a kernel launch, a GEMM call):
 * the profile's measured step overhead; 0 without a profile, meaning not
 * modelled (the presets do not know it). Already inside the compute times
 * above. */
double sc_cost_step_overhead(const sc_cluster *c);

#endif
