/* partition.h — from one global graph and a plan to per-stage SPMD graphs.
 *
 * Data flow (docs/partitioning.md):
 *   global graph (imported, dims bound to the MICROBATCH size, canonical
 *   passes run: static shapes, folded)
 *     → sc_graph_attach_mesh
 *     → seeds: data parallel (passes/partition/dp.c: graph inputs' dim 0
 *       over the dp axis), tensor parallel (tp.c: Megatron patterns on
 *       weights), the plan's per-initializer overrides
 *     → stages (pp.c: each global node's stage, balanced by cost or from
 *       the plan's boundaries)
 *     → localize (localize.c): the op rules (shard_rule.h) in topological
 *       order; every reshard becomes collective ops (AllReduce, AllGather,
 *       ReduceScatter, AllToAll) or a comm-free local slice; values get
 *       their LOCAL shapes; graph outputs end replicated. Result: one local
 *       graph holding all stages, each node tagged with an int attribute
 *       `__stage`, with the mesh and every value's sharding attached.
 *     → split (pp.c): one graph per stage; values crossing stages become
 *       Send (in the producer's stage) / Recv (in the consumer's) over the
 *       pp axis.
 *   Each stage graph then compiles like any graph (sc_compile_graph): one
 *   program per stage, shared by every rank of that stage.
 *
 * Sharded constants. A constant whose sharding splits it (a weight's
 * shard, a sliced constant) or is partial has, in the local and stage
 * graphs, its LOCAL shape and NO data (SC_DATA_NONE, flags CONST|PARAM), so
 * that folding never bakes one rank's piece into the shared program. Its
 * global contents are its "source" (sc_partition_source): the runtime cuts
 * each rank's piece from it with sc_sharding_extract. Replicated constants
 * keep their data.
 *
 * Ownership: sc_partition owns the local and stage graphs; the global
 * graph is borrowed (sources point into it) and must outlive it. */
#ifndef SC_PASSES_PARTITION_H
#define SC_PASSES_PARTITION_H

#include "ir/name_index.h"
#include "passes/pass.h"
#include "passes/plan/plan.h"
#include "passes/train.h"

/* A place where the partitioner kept something whole that the plan asked
 * to split: a weight whose dim does not divide by its axis (tp.c, dp.c: an
 * input's batch), or a node whose sharding rule could not carry a split
 * input, so every rank computes all of it (localize.c). The result is still
 * correct, only not smaller: `shardc plan` lists these, `run` and `compile`
 * warn on stderr. */
typedef struct sc_partition_fallback {
  const char *node;            /* global node (or graph input) name */
  const char *op;              /* its op name, "input" for a graph input */
  const char *what;            /* what stayed whole and why, one line */
} sc_partition_fallback;

/* A parameter that ZeRO-3 stores as its flat view (flat.c) while other
 * axes split it on one dim: its global input is [S, m_pad/S, parts], each
 * piece's elements in row-major order per stride block. The training
 * manifest carries it (sc_train_manifest_param) so that the runtime maps
 * initial values and checkpoints in the parameter's shape. */
typedef struct sc_partition_flat_split {
  const char *name;            /* the parameter (arena) */
  int32_t dim;                 /* the dim the other axes split */
  int64_t parts, stride;       /* into parts pieces; stride blocks (1: none) */
} sc_partition_flat_split;

typedef struct sc_partition {
  sc_mesh mesh;
  int32_t pp_axis;             /* mesh axis index of pp, or -1 */
  int32_t dp_axis, tp_axis;    /* or -1 */
  int32_t fsdp_axis;           /* training: batch split and state sharded
                                  (train_seed.c), or -1 */
  int32_t cp_axis;             /* the mesh axis named cp: the sequence split
                                  and attention run as a ring (cp.c), or -1 */
  int64_t cp_seq, cp_padded;   /* the sequence split over cp and the length
                                  it is padded to (cp.c; equal when it
                                  divides), 0 without cp */
  int32_t cp_seed;             /* the value the zig-zag permutation reads
                                  (the residual stream's first value), or -1 */
  int32_t ep_axis;             /* the mesh axis named ep: a data axis that
                                  also splits the experts (ep.c), or -1 */
  bool training;               /* the graph is a training step (passes/train.h) */
  const struct sc_train_info *train; /* its parameters (borrowed), or NULL */
  sc_name_index param_names;   /* train's parameters by name, in order
                                  (sc_partition_param_of; not built: scanned) */
  int32_t zero_stage;          /* training: 0 (no fsdp axis) or 1..3 */
  bool keep_after_forward;     /* ZeRO-3: no second all-gather in the backward */
  bool reduce_low;             /* training: a low-precision gradient pending
                                  over a data axis may be reduced in its
                                  dtype (the plan's reduce_dtype bf16 or
                                  fp16); false: only once widened to f32
                                  (localize.c, the cut) */
  sc_dtype reduce_dtype;       /* training under reduce_low: the dtype
                                  (bf16, fp16) an f32 gradient is cast to
                                  for its reduce-scatter over a data axis
                                  and the reductions after it (localize.c,
                                  reshard); SC_DTYPE_UNDEF: none */
  int32_t n_stages;            /* 1 without pp */
  int32_t microbatches;        /* >= 1 */
  /* Pipelined training (pipe_train.c, ir/pipe.h): the step is cut into
   * n_chunks = n_stages x virtual stages chunks and 4 phases, one graph per
   * piece; n_chunks is 0 otherwise. n_graphs: how many graphs `stages`
   * holds (n_stages, or 4 n_chunks pieces, in piece order). */
  int32_t n_chunks;
  int32_t n_graphs;
  /* Pipelined training: the forward nodes starting chunks 1 .. n_chunks-1,
   * where the plan's boundaries or the balancer cut (pipe_train.c; names
   * in arena): sc_partition_complete_plan writes them into the plan, so
   * that a replay cuts there whatever its cluster */
  const char **chunk_boundaries;
  int32_t schedule;            /* sc_schedule_kind (codegen/dist_program.h):
                                  0 gpipe, 1 1f1b, 2 interleaved, 3 zb-h1 */
  bool expert_tensor_parallel; /* the experts' MLPs split over tp as well
                                  (ep.c); false without a tp axis of size > 1 */
  bool sequence_parallel;      /* row-parallel sums reduce-scatter over the
                                  sequence (dim 1), all-gathered before the
                                  next column-parallel product */
  sc_graph *global;            /* borrowed */
  int32_t *node_stage;         /* [global->n_nodes] stage of each global node */
  int32_t *local_end;          /* [global->n_nodes] local graph's node count
                                  after localizing each global node: global
                                  node i became local nodes
                                  [local_end[i-1], local_end[i]) */
  sc_graph *local;             /* all stages, local shapes, `__stage` attrs */
  sc_graph **stages;           /* [n_stages] stage graphs */
  sc_shard_source *sources;    /* [n_sources], sorted by name */
  int32_t n_sources;
  sc_partition_fallback *fallbacks; /* [n_fallbacks]: seeds' first, then
                                       the last localize's; strings in arena */
  int32_t n_fallbacks, cap_fallbacks;
  int32_t n_seed_fallbacks;    /* how many come from the seeds */
  sc_partition_flat_split *flat_splits; /* [n_flat_splits] (flat.c) */
  int32_t n_flat_splits, cap_flat_splits;
  sc_arena arena;              /* owns node_stage, sources, stages array */
} sc_partition;

typedef struct sc_partition_opts {
  const sc_plan *plan;         /* mesh, axes, tp spec, boundaries, overrides */
  const sc_pass_opts *pass;    /* --print-after (pass names "seed",
                                  "localize", "pipeline-split"), verify */
  const struct sc_train_info *train; /* a training step's parameters
                                  (passes/train.h), or NULL */
  const char *plan_file;       /* the plan's file, named by errors about the
                                  plan (its names are checked against the
                                  graph here, after vocabulary padding), or
                                  NULL */
} sc_partition_opts;

/* Runs the whole chain above on g (already through the canonical passes).
 * Errors name the node or value and leave *out NULL. */
sc_status sc_partition_run(sc_graph *g, const sc_partition_opts *o, sc_partition **out,
                           sc_diag *d);
void sc_partition_destroy(sc_partition *p);
/* The split of parameter `name` stored flat in pieces, or NULL (not stored
 * flat, or in one piece). */
const sc_partition_flat_split *sc_partition_flat_split_of(const sc_partition *p,
                                                          const char *name);
/* The source of the sharded constant `name`, or NULL (a replicated value). */
const sc_shard_source *sc_partition_source(const sc_partition *p, const char *name);
/* Records a fallback (see sc_partition_fallback); what is printf-formatted.
 * SC_ERR_NOMEM only. */
sc_status sc_partition_note_fallback(sc_partition *p, const char *node, const char *op,
                                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The error for a batch that a data-parallel split does not divide: input
 * v's dim 0 over `parts` ranks of the axes `axes` (their names and sizes are
 * printed, e.g. "dp=2 x fsdp=2"), naming the nearest batches that divide.
 * Records it in the global graph's diagnostic; returns SC_ERR_USAGE. */
sc_status sc_partition_batch_error(sc_partition *p, const sc_value *v, const int32_t *axes,
                                   int32_t n_axes, int64_t parts);
/* The nearest batches to b that `parts` divides ("12 or 16", or "4" when
 * the lower one is 0), into buf: the words of sc_partition_batch_error,
 * shared with the planner's search. */
void sc_partition_batches_that_divide(int64_t b, int64_t parts, char *buf, size_t n);
/* The most nodes computed whole that sc_partition_print_fallbacks names
 * (the JSON plans list every one). */
#define SC_FALLBACK_NODES_SHOWN 12
/* Prints the fallbacks, one per line, each line starting with prefix (e.g.
 * "shardc: warning: "), after a first line saying how many there are: every
 * value not split, the first SC_FALLBACK_NODES_SHOWN nodes computed whole
 * and a line counting the rest; nothing when there are none. */
void sc_partition_print_fallbacks(const sc_partition *p, FILE *f, const char *prefix);
/* Prints "PREFIXsequence 17 padded to 18 for cp=2: 1 masked key" when the
 * sequence split over cp is padded (cp.c); nothing otherwise. */
void sc_partition_print_cp_padding(const sc_partition *p, FILE *f, const char *prefix);

/* The sharding of initializer name in the partition: its source's, else
 * the local graph's; NULL = replicated. */
const sc_sharding *sc_partition_param_sharding(const sc_partition *p, const char *name);
/* Completes plan (the one the partition was made with) so that it replays
 * the same partition: the stage of every live node and the chosen sharding
 * of every split initializer, as overrides (`shardc plan --json`). */
sc_status sc_partition_complete_plan(const sc_partition *p, sc_plan *plan, sc_diag *d);

/* ---- the pieces (one file each) ---- */
/* vocab_pad.c: a vocabulary that does not divide by the tp size is padded
 * (embedding rows / LM head columns, zeros) and the logits sliced back, so
 * that it can be split. Runs first (a replayed plan names padded weights). */
sc_status sc_partition_pad_vocab(sc_graph *g, const sc_plan *plan);
/* The same on a model before its training step is built (driver.c): the
 * padded weights become the step's parameters, each recorded in *pads
 * (g's arena, *n_pads of them; NULL and 0 when none) for sc_train_opts.
 * vocab_pads. */
sc_status sc_partition_pad_vocab_train(sc_graph *g, const sc_plan *plan,
                                       sc_train_vocab_pad **pads, int32_t *n_pads);
/* dp.c: graph inputs of rank >= 1 whose dim 0 divides get dim 0 split over
 * the data axes (dp, then ep: sc_partition_data_axes; the others are
 * recorded in p's fallbacks). */
sc_status sc_partition_seed_dp(sc_partition *p, const sc_plan *plan);
/* tp.c: Megatron patterns on weights (column/row, fused QKV stride,
 * vocabulary-parallel embedding and LM head), then the plan's overrides.
 * A matched weight whose dim does not divide is recorded in p's fallbacks. */
sc_status sc_partition_seed_tp(sc_partition *p, const sc_plan *plan);
/* train_seed.c: a training step (an output "train:applied") is seeded by
 * sc_partition_seed_train_data instead of seed_dp (its data inputs split
 * over dp and fsdp; parameters and state are not batches), and after the
 * tensor-parallel seeds by sc_partition_seed_train_state: parameters,
 * optimizer state and accumulators, their "new:" outputs and the "grad:P"
 * values get the shardings ZeRO's stage says (train_seed.c). A sharding on
 * a computed value is a constraint: localize reshards it there at once, and
 * a graph output leaves under it instead of replicated. */
bool sc_partition_is_training(const sc_graph *g);
/* When value v of a training step is the mean of an accumulated gradient,
 * Mul("new:accum:P", a scalar) (passes/train.c), P (in the accumulator's
 * name), else NULL. */
const char *sc_partition_accum_mean_of(const sc_graph *g, int32_t v);
/* The parameter (its name, from p->train) whose state input `name` is:
 * the parameter itself, "P.<state>" or "accum:P"; NULL for none. */
const char *sc_partition_param_of(const sc_partition *p, const char *name);
/* The data axes of size > 1 into axes[]: dp and fsdp in mesh order, then
 * ep last (innermost on the batch, so that ep.c's AllToAll moves it alone);
 * returns their count. The batch of the data inputs is split over them. */
int32_t sc_partition_data_axes(const sc_partition *p, int32_t *axes);
sc_status sc_partition_seed_train_data(sc_partition *p);
/* pipe_train.c: the phase and chunk of every node of a training step with
 * a pipeline axis: p->node_stage (allocated here) gets each node's piece
 * (ir/pipe.h), after g's nodes are reordered by piece (tied state read on
 * another pipeline rank is first read through an Identity copy). */
sc_status sc_partition_pipe_pieces(sc_partition *p, const sc_plan *plan, sc_diag *d);
sc_status sc_partition_seed_train_state(sc_partition *p);
/* flat.c: under ZeRO >= 1, parameter input `param` (seed base, a parameter
 * no dim of which divides by the fsdp degree) rewritten so that its
 * optimizer state and update run on its flat view padded to a multiple of
 * the degree (Megatron's distributed optimizer); *state gets the state's
 * sharding (dim 0 over fsdp), set on the gradient's flat view too. Under
 * ZeRO-3 (unpipelined, P split over no other axis) P itself becomes its
 * flat view, read back in its shape by the forward and the backward;
 * forward (NULL under keep_after_forward): [n_forward] whether each node
 * of g before the rewrites feeds the loss, so that the backward reads its
 * own copy.
 * *done false: the parameter is left as it was (it cannot be viewed so).
 * The caller orders g's nodes again once it is done (sc_partition_flat_order,
 * with the places recorded in *order). */
typedef struct sc_flat_order {
  int32_t *node, *after;       /* node[k] goes right after node after[k] (-1: first) */
  int32_t n, cap;
} sc_flat_order;
sc_status sc_partition_flatten_param(sc_partition *p, int32_t param, const sc_sharding *base,
                                     const bool *forward, int32_t n_forward,
                                     sc_sharding *state, sc_flat_order *order, bool *done);
/* flat.c: g's nodes in order again after sc_partition_flatten_param: each
 * gradient's view right after the gradient (its reduce-scatter overlaps
 * the rest of the backward), the other new nodes where they are first
 * needed (sc_graph_toposort). */
sc_status sc_partition_flat_order(sc_graph *g, sc_flat_order *order);
/* bucket.c: a reduce-scattered gradient that is the sum of two parts,
 * grad:P = a + b (a parameter read twice: a tied embedding's LM head and
 * lookup), whose earlier part has SC_PARTITION_SPLIT_MIN_BYTES or more and
 * would wait for the other across another collective, is reduce-scattered
 * part by part: a right where it is made, b where the sum was, and the two
 * shards added (the reduction is linear; one more reduce-scatter of P, and
 * the whole-size a dies at its own); along a dim other than 0 in chunks of
 * rows of at most SC_PARTITION_BUCKET_CAP_BYTES. On p->local, before the
 * buckets. Below 1 MiB a collective's time is mostly its latency (about
 * 10 us against 1 MB at 100 GB/s), so a smaller part is not split. */
#define SC_PARTITION_SPLIT_MIN_BYTES ((int64_t)1 << 20)
sc_status sc_partition_split_grad_sums(sc_partition *p, sc_diag *d);
/* bucket.c: the chunks of rows sc_partition_split_grad_sums reduce-
 * scatters one part of `rows` rows and `bytes` bytes in along `axis`: one
 * along dim 0, else as few as hold at most SC_PARTITION_BUCKET_CAP_BYTES
 * each (at most a row each); *per: the rows of each but the last. */
int64_t sc_partition_split_chunks(int64_t rows, int64_t bytes, int64_t axis, int64_t *per);
/* bucket.c: ZeRO-3's parameter all-gathers grouped per block and piece
 * into one collective each (copy-in, gather, copy-out), on p->local. */
sc_status sc_partition_bucket_gathers(sc_partition *p, sc_diag *d);
/* bucket.c: the gradients' reduce-scatters over fsdp (then their HSDP
 * all-reduce), or without one their all-reduces (plain data parallel),
 * grouped per block and piece likewise, at the last member; a group of
 * all-reduces alone takes members until it holds
 * SC_PARTITION_BUCKET_CAP_BYTES or more (DDP's default bucket_cap_mb,
 * 25 MiB: torch.nn.parallel.DistributedDataParallel). */
#define SC_PARTITION_BUCKET_CAP_BYTES ((int64_t)25 << 20)
sc_status sc_partition_bucket_reductions(sc_partition *p, sc_diag *d);
/* bucket.c's grouping rule, for the passes above and for the planner's
 * estimate (passes/plan/search.c), which counts the collectives the
 * compiled step runs without compiling it. One block's members in the
 * order the step meets them: whether an open group holding open_bytes
 * takes one more (capped: all-reduces alone, DDP's cap; else a block is
 * one group); and the count of collectives n members make, bytes[i] and
 * dtype[i] each (one open group per dtype, closed by the cap). */
bool sc_partition_bucket_takes(int64_t open_bytes, bool capped);
int32_t sc_partition_bucket_count(const int64_t *bytes, const int32_t *dtype, int32_t n,
                                  bool capped);
/* cut.c: a minimum cut over pending sums (localize.c's "the cut"). Nodes
 * are pending values, each with the cost of reducing it where it is made
 * (source: its pending sum begins there); flow edges say where a pending
 * sum flows on; sc_cut_reduce adds what a reduction of a node's sum costs.
 * sc_cut_solve sets cut[node] for the cheapest set of nodes to reduce
 * (ties: none), *n_cut their count; SC_ERR_NOMEM. Costs are bytes moved; a
 * collective also costs SC_CUT_LATENCY_BYTES, its latency as bytes. */
#define SC_CUT_LATENCY_BYTES 4096.0
#define SC_CUT_INF 1e300 /* a cut cost: never reduced there */
typedef struct sc_cutgraph sc_cutgraph;
sc_cutgraph *sc_cut_create(void);
void sc_cut_destroy(sc_cutgraph *g);
int32_t sc_cut_node(sc_cutgraph *g, double cut_cost, bool source); /* -1: out of memory */
void sc_cut_flow(sc_cutgraph *g, int32_t from, int32_t to);
void sc_cut_reduce(sc_cutgraph *g, int32_t node, double cost);
int32_t sc_cut_count(const sc_cutgraph *g); /* nodes */
sc_status sc_cut_solve(sc_cutgraph *g, bool *cut, int32_t *n_cut);
/* cp.c: under a cp axis, the global graph's residual stream in the
 * zig-zag order (for inference put there now, by cp.h's
 * sc_cp_prepare_graph; a training step was ordered before autodiff) and
 * split over cp (a constraint, the batch split beside it as the data
 * inputs'), every FusedAttention and FusedAttentionGrad marked `cp_ring` =
 * the cp size (cp.c's header). Errors name the node (SC_ERR_USAGE). */
sc_status sc_partition_prepare_cp(sc_partition *p);
/* ep.c: under an ep axis, the expert parameters (found by the data flow:
 * rank-3 [E, in, out] parameters multiplying a rank-4 [B, E, C, D]
 * activation) split on dim 0 over ep, and every such activation
 * constrained to the experts split over ep (the batch over the other data
 * axes), so localize moves the tokens by AllToAll (ep.c's header). Errors
 * (SC_ERR_USAGE): E not divisible by ep, naming the node and the sizes
 * that divide; no expert product in the model. With expert_tensor_parallel
 * the experts' MLPs are split over tp as well (the first products' weights
 * on their out dim, the last one's on its in dim); F not divisible by tp is
 * an error likewise. Runs when there is an ep axis or that option. */
sc_status sc_partition_seed_ep(sc_partition *p);
/* ep.c: whether node n of g is an expert product (docs/moe.md, "Expert
 * parallelism"): a MatMul of a rank-4 activation [B, E, C, D] by a rank-3
 * weight [E, D, F], E >= 2 and lined up with the activation's dim 1, the
 * weight reached directly or through a Transpose keeping dim 0, a Cast or
 * an Identity; is_param(ctx, g, id) says whether a value without a
 * producer is a parameter. Returns the weight's value id, or -1. The
 * partitioner's ep seeds and the planner's block model (which finds the
 * experts the search may split over ep) both use it. */
typedef bool (*sc_expert_param_fn)(const void *ctx, const sc_graph *g, int32_t id);
int32_t sc_expert_weight(sc_graph *g, const sc_node *n, sc_expert_param_fn is_param,
                         const void *ctx);
/* ring.c: ring attention's forward over a context-parallel axis as nodes
 * of g (docs/context-parallel.md): FusedAttention per block, the keys and
 * values passed on by Send/Recv with shift 1, the blocks' results merged by
 * log-sum-exp. q [b, h, 2c, d], k, v: the rank's two chunks of the zig-zag
 * layout (ir/context_parallel.h), with shapes. Causal (n > 1): half_rows[i]
 * (i64 [c]: the rows h·c + 0..c-1) and half_place[i] (i64 [2c]: 0..2c-1 when
 * h = 0, then c..2c-1, 0..c-1 when h = 1), for i = 1..n-1, h =
 * sc_cp_ring_half of the rank and step i's source: values whose contents
 * differ per rank. *o and *lse: the merged result (every new value with
 * its shape). SC_ERR_NOMEM, or SC_ERR_INVALID for shapes that do not fit. */
typedef struct sc_cp_ring_args {
  const char *name;            /* the attention's node name: nodes are
                                  "<name>/ring/..." */
  const char *axis;            /* the ring's mesh axis ("cp") */
  int32_t n;                   /* its size */
  int32_t q, k, v;             /* value ids */
  double scale;
  bool causal;
  const int32_t *half_rows, *half_place; /* [n] (index 0 unused); causal only */
  const int32_t *key_mask;     /* [n] or NULL: step i's additive mask
                                  [1, 1, rows, rows] (0 or -1e30 on the keys
                                  of padding rows), not causal only */
  int32_t tag_base;            /* Send/Recv tags from tag_base + 2 (the
                                  forward: to + 2n - 1; the backward: to
                                  + 4n + 1) */
} sc_cp_ring_args;
sc_status sc_partition_ring_attention(sc_graph *g, const sc_cp_ring_args *a, int32_t *o,
                                      int32_t *lse);
/* ring.c: its backward, FusedAttentionGrad's ring: o, lse (the forward's
 * merged results) and d_o of the rank's rows; the keys and values travel as
 * in the forward, their gradients' accumulators with them (tags tag_base +
 * 4i .. + 4i + 3 at step i), and one more hop takes those home (tags
 * tag_base + 4n, + 4n + 1). *dq, *dk, *dv: the rank's rows' gradients. */
sc_status sc_partition_ring_attention_grad(sc_graph *g, const sc_cp_ring_args *a, int32_t o,
                                           int32_t lse, int32_t d_o, int32_t *dq, int32_t *dk,
                                           int32_t *dv);
/* localize.c: see above. node_stage: per global node (NULL = all stage 0). */
sc_status sc_partition_localize(sc_partition *p, sc_diag *d);

#endif
