/* search.h — the planner's search (docs/planner.md, "Search"): every
 * training strategy shardc runs, for a model on a cluster and a global
 * batch, costed from the block model (block_model.h) with the formulas of
 * cost.h, pruned, and ranked by predicted step time.
 *
 * Space: the cluster's devices N = pp x dp x fsdp x cp x ep x tp (cp
 * and ep never together; ep > 1 only for a model whose blocks have
 * experts, ep dividing their count); with fsdp > 1
 * the ZeRO stage 1, 2 or 3, and with dp > 1 as well the hybrid shard
 * degree (= fsdp); tp with and without sequence parallelism, and on a
 * model with experts with and without expert tensor parallelism (tp
 * dividing their hidden size); for pp > 1
 * the microbatch count M (dividing the replica's batch) and the schedule
 * (gpipe, 1f1b, zb-h1, interleaved with V virtual stages: V dividing the
 * blocks per stage, M a multiple of pp); recompute none, selective, full.
 * Stage boundaries are balanced by cost (the partitioner's default).
 *
 * Pruning, each counted: tp not dividing the heads, or a dim it splits
 * of a block's GEMM weight, or leaving the node
 * (the latter lifted when nothing fits), dp x fsdp not dividing the global
 * batch (dp x fsdp x ep: ep is a data axis), M not dividing the
 * replica's batch, the training state alone
 * (parameters, gradients, optimizer state after sharding) over the
 * device's memory or the budget, and the lower bound (compute,
 * recompute, optimizer and bubble: no communication) no better than the
 * 10th best full estimate.
 *
 * The estimates compose per rank what the exact path (codegen/dist_sim.h)
 * simulates per step: compute (forward, backward as twice the forward,
 * recompute, the optimizer), communication (tp per block, fsdp gathers
 * and reduce-scatters, dp all-reduce, pipeline sends, ep's all-to-alls
 * per MoE layer and the other gradients' reduction over dp x ep) added to it without
 * overlap (a pipeline's hand-offs but the first receive excepted: they
 * run beside the compute), and the pipeline's bubble (slots of the fill's
 * and drain's chain, each a microbatch's forward and backward piece
 * without its weight piece, with their communication). Memory: without a pipeline the state, the
 * values the backward keeps, one block's working values; a pipeline rank
 * as its exact count has it: its state, ONE arena (the largest of its
 * chunk's update, backward and forward pieces) and the larger of its stash
 * (microbatches in flight) and the step's values; on a GPU cluster the
 * arena's fixed bytes (docs/planner.md section 4 has every term and
 * constant). Pruned besides: fsdp not dividing the hidden size (the
 * partitioner would keep the parameters whole).
 * Activation offloading: a plan whose estimate is over the memory,
 * pipelined or not, is tried again with --offload-activations when the
 * cluster knows its host link (sc_cluster.host_link_bytes_per_s): the kept
 * values move to the host pool but for the blocks the backward is about
 * to read (in a pipeline: the stash but for the microbatches brought
 * back, SC_SEARCH_PIPE_OFFLOAD_HORIZON), and the copies, each way over
 * the host link, cost what the forward's and the backward's compute does
 * not hide.
 * Pure computation: no allocation, no state.
 * Inference (opts.goal SC_SEARCH_LATENCY or SC_SEARCH_THROUGHPUT): the
 * same machinery over what the inference path runs: meshes of D <= N
 * devices, D = dp x tp x pp (no fsdp, no ZeRO, no recompute); tp with and
 * without sequence parallelism; for pp > 1 the microbatch count M
 * dividing the replica's batch, GPipe (forward only). Latency: dp splits
 * one batch of global_batch examples, ranked by its step time.
 * Throughput: each of the dp replicas serves its own batch of
 * global_batch examples (a step of the mesh serves dp x global_batch),
 * ranked by seconds per batch served (step / dp), i.e. examples per
 * second. The estimate is the forward alone: compute, the pipeline's
 * fill (pp - 1 microbatch forwards on the last stage), tp's two
 * collectives per block and microbatch (and the vocabulary-parallel
 * embedding's all-reduce and LM head's all-gather of the logits), the
 * outputs' all-gather over dp, one pipeline send per microbatch; memory is the weights (in the graph's dtype) and one
 * block's values and the LM head's per microbatch.
 * Errors: SC_ERR_INVALID (a figure the cluster does not know, a model
 * without blocks), SC_ERR_USAGE (no data-parallel size divides the global
 * batch: the message names the batches that work). */
#ifndef SC_PLAN_SEARCH_H
#define SC_PLAN_SEARCH_H

#include "passes/plan/block_model.h"
#include "passes/plan/cluster.h"
#include "passes/plan/plan.h"

enum { SC_SEARCH_TOP = 10 };
/* A pipelined candidate offloads at --activation-loading-horizon 1: at the
 * default 2 a 1F1B rank at pp=2 keeps both its microbatches in flight on
 * the device and offloading saves nothing (docs/offload.md, "Pipelines");
 * at 1 it keeps one. Without a pipeline, the default. */
enum { SC_SEARCH_PIPE_OFFLOAD_HORIZON = 1 };

/* What the search ranks: a training step (its time), or an inference
 * batch (its latency, or the examples per second of the mesh). */
typedef enum sc_search_goal {
  SC_SEARCH_TRAIN, SC_SEARCH_LATENCY, SC_SEARCH_THROUGHPUT, SC_SEARCH_GOAL_COUNT
} sc_search_goal;

typedef enum sc_search_recompute {
  SC_SEARCH_RECOMPUTE_NONE, SC_SEARCH_RECOMPUTE_SELECTIVE, SC_SEARCH_RECOMPUTE_FULL
} sc_search_recompute;

/* One strategy, and its block-model figures. */
typedef struct sc_search_cand {
  int64_t dp, fsdp, tp, pp, cp; /* mesh sizes (cp: context parallel; its
                                   mesh places it between fsdp and tp:
                                   sc_search_mesh) */
  int64_t ep;                   /* expert parallel (docs/moe.md): a data
                                   axis that also splits the experts, placed
                                   between cp and tp; 0 or 1: none (only
                                   for a model with experts) */
  int32_t zero;                 /* 0 without fsdp, else 1..3 */
  int64_t hybrid_shard_degree;  /* fsdp when dp > 1 and fsdp > 1, else 0 */
  bool sequence_parallel;
  bool expert_tensor_parallel;  /* --expert-tensor-parallel (docs/moe.md):
                                   the experts' MLPs split over tp too;
                                   only with tp > 1 on a model with experts */
  const char *schedule;         /* "gpipe", "1f1b", "interleaved", "zb-h1"
                                   (static strings) */
  int32_t virtual_stages;       /* 1 unless interleaved */
  int32_t microbatches;
  int64_t micro_batch_size;     /* examples per microbatch per replica */
  sc_search_recompute recompute;
  bool offload_activations;     /* --offload-activations (docs/offload.md):
                                   only when the same plan without it is
                                   over the memory; under a pipeline at
                                   horizon SC_SEARCH_PIPE_OFFLOAD_HORIZON */
  /* the estimate */
  double step_s, compute_s, recompute_s, optimizer_s, bubble_s;
  double offload_s;             /* the offloading copies' time not hidden
                                   behind the compute (their own queue) */
  int64_t host_bytes;           /* the host pool offloading fills, per rank */
  double tp_s, fsdp_s, dp_s, pp_s; /* communication by axis group */
  double cp_s;                  /* cp's: the ring's sends and the gradients'
                                   reduction over cp */
  double ep_s;                  /* ep's all-to-alls (the tokens to their
                                   experts and back, forward and backward)
                                   and, without dp, the gradients'
                                   reduction over ep (with dp: dp_s's) */
  double mfu;
  int64_t peak_bytes;           /* the largest rank's estimate */
  int64_t peak_activation_bytes; /* of which activations (the rest: the
                                   training state and update's working memory) */
  int32_t peak_pipe_rank;       /* which pipeline rank it is */
  bool fits;
  bool inference;               /* an inference plan (no optimizer, forward only) */
  int64_t batch;                /* examples a step of the mesh serves (the global
                                   batch; throughput: dp x the batch) */
  double objective_s;           /* what the ranking compares, lower first:
                                   step_s, or under SC_SEARCH_THROUGHPUT
                                   step_s / dp (seconds per batch served) */
} sc_search_cand;

typedef struct sc_search_opts {
  const sc_cluster *cluster;
  sc_search_goal goal;          /* SC_SEARCH_TRAIN (0) or an inference objective */
  int64_t global_batch;         /* training: examples per optimizer step;
                                   inference: the batch of one request */
  sc_cluster_dtype dtype;       /* the GEMMs' (bf16, fp16 or fp32) */
  bool adamw;                   /* AdamW (two moments) or SGD without momentum */
  bool reduce_low;              /* a bf16 or fp16 step's gradient reductions
                                   in its dtype (--reduce-dtype bf16); false:
                                   in fp32, after their cast back */
  int64_t memory_budget;        /* per rank, 0: the device's memory */
  int64_t max_pp;               /* the most pipeline ranks a plan may have,
                                   0: no limit (the exact simulation's,
                                   codegen/dist_sim.h: a plan it cannot
                                   predict is not offered) */
  double activation_scale;      /* the estimates' activation memory (values
                                   kept for the backward, working values)
                                   times this (0: 1): what an exact plan
                                   measured against them; for plans without
                                   a pipeline */
  double activation_scale_pipe; /* the same for pipelined plans (pp > 1;
                                   0: 1): their activations are another
                                   term (the stash), so they are scaled
                                   apart */
  double activation_scales[6]; /* per kind, times the above: [3 x (pp > 1)
                                   + recompute] (0: 1), so that what one
                                   recompute's exact plans measured does
                                   not scale another's */
  int64_t arena_fixed_bytes;    /* bytes every rank's arena holds beside its
                                   values (cuBLASLt's workspace on a GPU:
                                   SC_GEMM_WORKSPACE_BYTES), added to each
                                   rank's estimate */
  double near_margin;           /* candidates whose estimated memory is over
                                   the limit by at most this fraction are
                                   kept apart (near, below): the estimate
                                   errs over, the exact plan may fit
                                   (0: none kept) */
} sc_search_opts;

typedef struct sc_search_result {
  int64_t evaluated;            /* candidates whose estimate was computed */
  int64_t pruned;               /* candidates dropped before it */
  int64_t pruned_heads, pruned_node, pruned_batch, pruned_microbatch, pruned_state,
      pruned_bound;
  int64_t pruned_split;         /* tp dividing the heads but not the dim it
                                   splits of a block's GEMM weight (tp.c
                                   would keep it whole: its product computed
                                   whole on every tp rank) */
  int64_t pruned_fsdp;          /* fsdp not dividing the hidden size (the
                                   parameters would stay whole) */
  int64_t pruned_cp;            /* cp > 1 where the sequence does not divide
                                   into 2 cp chunks, the model has no fused
                                   attention or has experts (their capacity
                                   dispatch scans the tokens: cp.c refuses
                                   it), or beside a pipeline (not searched
                                   together) */
  int64_t pruned_ep;            /* ep > 1 not dividing the experts, or beside
                                   cp (not searched together) */
  bool tp_left_node;            /* nothing fitted with tp inside a node */
  int64_t batch_parts;          /* the smallest dp x fsdp refused for the batch */
  int32_t n_top;
  sc_search_cand top[SC_SEARCH_TOP]; /* fitting, fastest first */
  int32_t n_over;
  sc_search_cand over[SC_SEARCH_TOP]; /* over the memory, fastest first (what
                                   the report shows when they beat the chosen) */
  int32_t n_near;
  sc_search_cand near[SC_SEARCH_TOP]; /* over the memory by at most
                                   near_margin, fastest first */
  bool have_kind_best[2];
  sc_search_cand kind_best[2];  /* the fastest that fits without a pipeline
                                   [0] and with one [1] (the estimate errs
                                   most between them: the exact check
                                   compiles the best of each) */
  bool have_closest;
  sc_search_cand closest;       /* when nothing fits: the least over */
  double model_flops;           /* per step (6 N tokens-like: 3 x forward GEMMs) */
} sc_search_result;

/* Searches (above). */
sc_status sc_search_run(const sc_block_model *bm, const sc_search_opts *o, sc_search_result *r,
                        sc_diag *d);
/* Costs one candidate c (its strategy fields set) into its estimate
 * fields; what sc_search_run does for every survivor. */
sc_status sc_search_estimate(const sc_block_model *bm, const sc_search_opts *o,
                             sc_search_cand *c, sc_diag *d);
/* The estimated memory of pipeline rank q (0 .. c->pp - 1) of training
 * candidate c, the terms sc_search_estimate's peak_bytes is the largest
 * of (search.c, rank_memory); *activation_bytes: of which activations
 * (scaled as the options say). */
int64_t sc_search_rank_memory(const sc_block_model *bm, const sc_search_opts *o,
                              const sc_search_cand *c, int64_t q, int64_t *activation_bytes);
/* How the compiled step groups one kind of the parameters' collectives
 * (passes/partition/bucket.c): each tensor alone (ZeRO-1/2's gathers of
 * the updated parameters); a block's tensors in one (the reduce-scatters
 * over fsdp and the dp all-reduces that ride them); a block's tensors in
 * one per dtype (ZeRO-3's gathers: a bf16 or fp16 step gathers the GEMM
 * weights in its dtype and the rest in fp32, two a block);
 * or the gradients' all-reduces alone in DDP's capped buckets, of each
 * gradient's dtype (a bf16 or fp16 step under --reduce-dtype bf16 reduces
 * the GEMM weights' in it, the rest in fp32: a bucket per dtype; by default
 * all in fp32). Tensors outside
 * the blocks are alone in every kind. */
typedef enum sc_search_grouping {
  SC_SEARCH_GROUP_TENSOR, SC_SEARCH_GROUP_BLOCK, SC_SEARCH_GROUP_DDP, SC_SEARCH_GROUP_GATHER
} sc_search_grouping;
/* The collectives of one kind the estimate counts on c's critical
 * pipeline stage (its latencies): what the compiled step runs. */
double sc_search_param_collectives(const sc_block_model *bm, const sc_search_opts *o,
                                   const sc_search_cand *c, sc_search_grouping how);
/* The all-gathers over fsdp the estimate counts in a step of c (its
 * critical pipeline stage; each a latency): under ZeRO-3 every
 * microbatch's forward gathers (SC_SEARCH_GROUP_GATHER: a block's per
 * dtype, the tensors outside the blocks alone) and its backward's again,
 * the blocks' only (the forward's copies of the tensors outside serve the
 * backward); under ZeRO-1/2 the updated parameters once, a tensor each
 * (pipelined: every microbatch); 0 without fsdp. What `plan --train`
 * counts in the compiled step's AllGather row. */
double sc_search_step_gathers(const sc_block_model *bm, const sc_search_opts *o,
                              const sc_search_cand *c);
/* The gradients' reduce-scatters over fsdp the estimate counts in a step
 * of c (its critical pipeline stage; each a latency): a block's in one
 * (SC_SEARCH_GROUP_BLOCK), the tensors outside the blocks alone, a tied
 * parameter's sum in its two parts' chunks (sc_partition_split_grad_sums),
 * every microbatch under ZeRO-3 or in a pipeline, else once; 0 without
 * fsdp. What `plan --train` counts in the compiled step's ReduceScatter
 * row. */
double sc_search_step_scatters(const sc_block_model *bm, const sc_search_opts *o,
                               const sc_search_cand *c);
/* The mesh of c as --mesh takes it, axes of size 1 left out ("pp=2,dp=4,
 * tp=8"; "dp=1" for one rank). */
void sc_search_mesh(const sc_search_cand *c, char *buf, size_t n);

/* Whether a and b have the same mesh: the same size of every axis (pp,
 * dp, fsdp, cp, ep, tp; 0 and 1 alike), whatever their other strategies. */
bool sc_search_same_mesh(const sc_search_cand *a, const sc_search_cand *b);
/* "train", "latency", "throughput". */
const char *sc_search_goal_name(sc_search_goal g);
/* "none", "selective", "full". */
const char *sc_search_recompute_name(sc_search_recompute k);
/* The same search on fewer devices (docs/planner.md, "More GPUs"): half
 * the nodes when they are even, else half of one node's devices when
 * there is one node; what the chosen plan on the whole cluster is
 * compared with, by the estimate on both sides. */
typedef struct sc_search_fewer {
  bool searched;                /* a smaller cluster was searched */
  int64_t devices;              /* its devices (0: none smaller: why_not) */
  int64_t nodes, devices_per_node; /* its shape */
  bool have;                    /* a plan fits on it */
  sc_search_cand best;          /* its best by the estimate (when have) */
  bool slower;                  /* the chosen plan's estimate is slower than best's */
  char why[320];                /* when slower: by how much and why, from the
                                   breakdown; else what was compared or why not */
  int32_t n_top;
  sc_search_cand top[SC_SEARCH_TOP]; /* the smaller cluster's best that fit
                                   (best = top[0]), for an exact check */
} sc_search_fewer;

/* Searches o's model on the smaller cluster (above) with the same global
 * batch and options and compares its best with chosen (a candidate of the
 * whole cluster, its estimate computed). A smaller cluster that the batch
 * does not divide, or on which nothing fits, is not slower (said in why).
 * Errors: those of sc_search_run other than SC_ERR_USAGE. */
sc_status sc_search_fewer_devices(const sc_block_model *bm, const sc_search_opts *o,
                                  const sc_search_cand *chosen, sc_search_fewer *f, sc_diag *d);

/* The comparison's words into buf: b (the chosen plan on the whole
 * cluster) against a (the best on `devices_a`, fewer, devices), by the
 * figures of `basis` ("estimates", "exact"): "X % faster than ..." or "X %
 * slower than the best on N devices (basis): more T1 (+s), more T2 (+s);
 * compute per rank ..; E examples a GPU against .. (micro-batch ..)". */
void sc_search_fewer_why(const sc_search_cand *a, const sc_search_cand *b, int64_t devices_a,
                         int64_t global_batch, const char *basis, char *buf, size_t n);

/* Why b loses against the chosen a, in words ("2.1 % slower: more exposed
 * tp comm", "does not fit: pipeline rank 3 over by 1.2 GiB"). */
void sc_search_why(const sc_search_cand *a, const sc_search_cand *b, int64_t limit, char *buf,
                   size_t n);

#endif
