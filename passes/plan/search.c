/* search.c — the planner's search (search.h): enumerate, prune, estimate
 * from the block model, keep the ten fastest that fit. Training and
 * inference share the context, the block times, the collectives, the
 * ranking and the lists; each has its own enumeration, estimate and
 * memory (infer_search, infer_estimate, infer_memory). */
#include "passes/plan/search.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/attention.h"
#include "ir/context_parallel.h"
#include "passes/partition/partition.h"
#include "passes/plan/cost.h"

/* Bytes a parameter element costs in the training state: its fp32 master
 * copy and gradient, and AdamW's two fp32 moments (SGD without momentum
 * keeps none). The optimizer step reads and writes them: AdamW reads the
 * gradient and reads and writes the parameter and both moments (28 bytes
 * an element), SGD reads the gradient and reads and writes the parameter
 * (12). */
enum { PARAM_B = 4, GRAD_B = 4, ADAM_B = 8, ADAM_STEP_B = 28, SGD_STEP_B = 12 };
/* The gradient norm (train:grad_norm, every step) reads each gradient
 * element once for its sum of squares; a step of several microbatches
 * first makes the mean of the accumulated sum (read 4, write 4 bytes an
 * element: a pipeline's norm pieces, Mul(new:accum:P, 1/M)). */
enum { NORM_B = 4, MEAN_B = 8 };
/* Mixed precision: a bf16 copy of every GEMM weight per microbatch (read
 * 4, write 2 bytes an element; kept for the backward: 2); gradient
 * accumulation per microbatch (read 4 + 4, write 4). */
enum { CAST_B = 6, CAST_KEEP_B = 2, ACCUM_B = 12 };
/* A GEMM weight's gradient, an element a microbatch, in the epilogue
 * kernel its weight-gradient product runs (a kernel of its own after the
 * product on a GPU too: cuda_device.c), beyond the product's own write
 * of it: a bf16 step's cast to f32 (read 2, write 4), or with several
 * microbatches its addition to the f32 sum (read 2 + 4, write 4; an f32
 * step's read 4 + 4, write 4); an f32 step with one microbatch writes the
 * gradient in the product. gpt_1p5b's MLP weights (10.24 M elements) at
 * 256 rows on an H100 (simulated): the product 9.2 us, its addition
 * 38.2 us. Until 2026-12-07 neither the simulator (a GPU without a kernel
 * model costed no epilogue) nor this estimate (which had the sum's 8 B
 * hidden under the product's FLOPs) counted it. */
enum { WGRAD_CAST_B = 6, WGRAD_SUM_LOW_B = 10, WGRAD_SUM_B = 12 };
/* The bucket copies of a step without a pipeline, an element of its
 * blocks' parameters a step: each gradient copied into its reduction's
 * bucket and out of it (f32: read and write 4, twice: 16 B), and under
 * fsdp what the shard and the gathers add, 17 B an element over fsdp.
 * Fitted 2026-12-07 on plan --train's simulated steps (SHARDC_SIM_STEPS,
 * the bucket/Concat and bucket/Slice kernels), gpt_1p5b on h100-sxm:8x1,
 * batch 64, bf16: dp=8 8.81 ms (15.2 B an element of all its 1.56 G, the
 * embedding reduced alone), fsdp=8 10.12 ms, fsdp=4,dp=2 11.36, fsdp=2,
 * dp=4 13.83 (ZeRO-1, 2 and 3 alike); the estimate had none of it. */
enum { BUCKET_COPY_B = 16, BUCKET_SHARD_B = 17 };
/* The bytes of an element of a GEMM product or a GEMM weight's gathered
 * copy or gradient in the collectives of a bf16 or fp16 step (its GEMM
 * dtype); every other value moves in fp32 (PARAM_B). Measured on plan
 * --train's collectives (Megatron 7.5B, a100-80g:8x16, batch 512, dp=32
 * tp=4, full recompute): the tp all-reduces move 49.1 GB a step, 0.42 of
 * the fp32 [mbs, seq, hidden] count (the LM head's and the loss's are
 * fp32); the dp all-reduce 4.61 GB for 1.87e9 elements, 2.47 B an element
 * (the GEMM weights' 2, the embedding's and norms' 4). */
enum { COMM_LOW_B = 2 };
/* The backward of a block's products costs twice their forward (a GEMM's
 * gradient is two GEMMs of its size): the usual 3x of a training step;
 * its kernels', MEM_BACKWARD_FACTOR. */
#define BACKWARD_FACTOR 2.0
/* The memory-bound kernels' backward moves about what their forward did
 * (the gradients of the elementwise chains fuse as the chains do; the
 * norms' fused gradients, docs/training.md): measured 2026-12-05 on plan
 * --train's simulated steps (SHARDC_SIM_STEPS), a block's kernels
 * forward and backward: the Megatron 7.1B shape at dp=12, tp=8 with
 * sequence parallelism 1.33 and 1.20-1.23 ms (without it 4.7-4.9 and
 * 6.9-7.2), samples/gpt_1p5b.onnx at dp=8 (batch 64) 42-49 and 56-58 us.
 * Twice the forward (the GEMMs' factor) charged them 1.8-2.4 times what
 * the step runs with sequence parallelism. */
#define MEM_BACKWARD_FACTOR 1.0
/* The loss's kernels (the forward graph has none: the training step adds
 * it), bytes an element of the logits [rows, vocab / tp] on a rank,
 * forward and backward, over HBM: the fused SoftmaxCrossEntropy of a step
 * without tensor parallelism reads the bf16 logits and writes their
 * gradient (gpt_1p5b at dp=8, batch 64: 38.4 and 76.8 us for 51.5 M
 * elements, 2 and 4 B); the decomposed form of a tensor-parallel step
 * (split_vocab_loss, passes/train.h; at tp = 1 too under --no-fuse-loss:
 * sc_block_model.loss_split) in f32, a pass an op (the Megatron
 * 7.1B shape at dp=12, tp=8: 9.6 and 47.3 ms for 1.07 G elements, 24 and
 * 118 B: 0.057 s of its 0.599 s of compute, which the estimate lacked).
 * Measured 2026-12-05 on plan --train's simulated steps. */
#define LOSS_FUSED_FWD_B 2.0
#define LOSS_FUSED_BWD_B 4.0
#define LOSS_SPLIT_FWD_B 24.0
#define LOSS_SPLIT_BWD_B 118.0
/* The decomposed form over the whole vocabulary (tp > 1 not dividing it:
 * the LM head is not vocabulary-parallel, its logits whole on every tp
 * rank; or tp = 1 under --no-fuse-loss, whose 1.7B H100 row measured 36 B
 * forward and backward, docs/planner.md): the GPT-175B shape (vocabulary 50,257) at pp=32, dp=4, tp=8, bf16,
 * 2026-12-06: 0.691 ms forward, 0.845 ms backward for 103 M elements a
 * microbatch (the logits' cast and the LM head's output gradient
 * included), 18 and 22 B an element at the simulator's 2.68 TB/s; the
 * split form's 24 and 118 B charged it 5 times its backward. */
/* The lookups' gradient (an embedding's), a microbatch, per element of
 * the whole table (block_model's lookup_elems): the compiled step builds
 * it dense in f32, zeroed (4 B), the rows scatter-added in place; a
 * tensor-parallel step only the rank's vocabulary shard (the masked
 * scatter, shard_rules.c: until 2026-12-07 the whole table, then sliced,
 * LOOKUP_SLICE_B more). Where the step adds that gradient to another one
 * (the accumulator of the microbatches, a tied LM head's gradient on the
 * same rank), passes/scatter_sum.c scatters the rows into that instead:
 * no table-sized pass at all. Simulated 2026-12-06 (SHARDC_SIM_STEPS), before
 * the scatter ran in place and before scatter-sum: the GPT-175B shape's
 * [50257, 12288] table at tp=8 3.15 ms a microbatch with its positions'
 * [2048, 12288] (16.4 and 12.2 B an element), gpt_1p5b's at tp=8 0.40 ms
 * (13.3 B), then charged 12 B (zeroed, the scatter's copy read and
 * written) and the slice. */
#define LOOKUP_ZERO_B 4.0
/* A tied table tp stores split on its hidden dim (one the vocabulary
 * padding does not reach, vocab_parallel false) has no dense gradient of its own:
 * its rows go into the weight gradient's reduce-scatter buckets, which
 * the estimate does not count apart. There it keeps the 16 B an element
 * it charged before scatter-sum, which its simulated step did not change
 * (models.test_time_estimate's vocabulary 65,537 at tp=8: compute 70.9
 * then 70.8 ms; 4 + 4 B put the estimate 8.2 % under, 16 B 6.2 %). */
#define LOOKUP_HIDDEN_SPLIT_B 16.0
#define LOSS_WHOLE_FWD_B 18.0
#define LOSS_WHOLE_BWD_B 22.0
/* The compiled step fuses elementwise chains into kernels, so its
 * memory-bound time is not the sum of its nodes' bytes at the step's
 * precision (a bf16 or fp16 step's low chains at half their f32 bytes:
 * sc_block_part.low_mem_bytes): the residual stream's kernels (norms,
 * residual additions, in f32, and their gradients) run at 0.88 of their
 * nodes' bytes a pass (FUSED_MEMORY_STREAM), the rest (the products'
 * bias and activation chains, fused) at 0.26 (FUSED_MEMORY), forward and
 * backward alike (MEM_BACKWARD_FACTOR). Fitted 2026-12-05 on plan
 * --train's simulated steps (SHARDC_SIM_STEPS), a block's kernels forward
 * and backward on the Megatron 7.1B shape at dp=12, tp=8 (bf16): 2.55 ms
 * with sequence parallelism (every kernel split by tp), 11.8 ms without
 * (the stream's whole on every rank), for 1.0 GB of the stream's node
 * bytes and 3.2 GB of the rest an example; samples/gpt_1p5b.onnx at dp=8
 * (batch 64): 98-107 us against 126 estimated. Was 0.45 of the f32 bytes
 * for every kernel and the backward twice the forward (the exact compute
 * less GEMMs and optimizer, gpt_1p5b, before the fused norms' gradients
 * and the bf16 low chains): the Megatron 32B's published plan (dp=48,
 * tp=8, sp) was estimated 0.798 s of compute against its exact 0.603,
 * the 7.1B at tp=8 without sp 17.2 ms a block against 11.8. A calibration
 * constant of this model, not of the cluster. */
#define FUSED_MEMORY 0.26
#define FUSED_MEMORY_STREAM 0.88
/* Memory the compiled step holds that the block model cannot see node by
 * node, measured 2026-12-05 on samples/gpt_1p5b.onnx (bf16, AdamW,
 * h100-sxm:8x1, batch 64) against the exact count (`plan --train --estimate
 * --json`: each pipeline rank's state, its one arena, the largest piece's,
 * with every phase's largest piece, its stash and step values; rank 0 of
 * pp=2 holds 24 blocks and the embedding, 818 M elements):
 *   PIPE_STATE_EXTRA_B: a pipeline rank's state beyond the parameter,
 *     gradient accumulator and moments (16.64 B an element against 16 at
 *     pp=2 dp=4, 10.40 against 10 under ZeRO-1 over 4, 7.28 against 7
 *     under ZeRO-2, 4.16 against 4 under ZeRO-3: 0.16-0.64 B; 1 keeps the
 *     estimate above each);
 *   PIPE_UPDATE_B: an update piece's arena beyond the chunk's state, which
 *     it holds (the state is copied into the arena on a GPU: 13.61 GB =
 *     the state at dp=4, 8.91 against 8.51 under ZeRO-1: 0.5 B);
 *   PIPE_GRAD_B, PIPE_GRAD_Z12_B: a backward or weight piece's arena
 *     beyond its microbatch's stash, per element of the chunk: 6.05 GB less
 *     the 2.60 GB stash is 4.2 B at dp=4; 8.53 GB under ZeRO-2 over 4 and
 *     7.60 under ZeRO-1, 7.1 and 6.1 B (the gradient whole and its
 *     reduce-scatter's); under ZeRO-3 over 4, 2.53 GB less the 1.58 GB
 *     stash of full recompute is 1.16 B = 4.6 B / 4;
 *   PIPE_STEP_B: the values kept once a step (the reduced gradients the
 *     norm and update pieces read, state copies): 4.16 B an element at
 *     dp=4, 4.55 under ZeRO-1 over 4 (whole), 4.16 / 4 under ZeRO-2 and 3
 *     (sharded with the gradient); not held with the stash (the stash
 *     empties with the last backward): the rank keeps the larger;
 *   SAVED_ONE: the fraction of a block's node outputs the one-program
 *     step keeps for its backward (8 MB of 57 MB an example: fused chains
 *     keep only what the gradients read) and SAVED_PIPE the fraction a
 *     pipeline stage's stash keeps without full recompute: the stash less
 *     the weights' casts, 1.13 GB a microbatch of 2 examples over 24
 *     blocks at pp=2 dp=4 (23.5 MB a block and example of 57: 0.41; 22.9
 *     at micro-batch 4 under GPipe), measured at 25.9 MB before the stash's
 *     fixes; 0.46 kept the estimate above. Both refitted when a bf16 step
 *     began to keep its low-precision chains in bf16 (passes/train.c) and
 *     the node outputs to count at the step's precision (52.4 MB of the
 *     57.3 MB a block and example are values such a step computes low:
 *     31.1 MB at bf16, 0.543 of the f32 count): the exact one-program
 *     saved values went from 16.4 to 13.1 MB a block and example (0.80:
 *     batch 16, one rank, AdamW), the stash less the weights' casts from
 *     24.1 to 17.3 MB (0.718: pp=2 dp=4 1F1B, M=8, batch 64), so 0.15 x
 *     0.80 / 0.543 = 0.22 and 0.46 x 0.718 / 0.543 = 0.61 keep the
 *     estimate where it was against the exact plan (fp32 steps, whose
 *     count is unchanged, are then estimated higher by the same factors:
 *     over, as the estimate means to be);
 *   SAVED_HEAD_PIPE: the fraction of the outside part's values (the LM
 *     head's logits and the loss's, 351 MB an example) the last pipeline
 *     rank keeps a microbatch: its stash exceeds a middle rank's by about
 *     1.9 GB a microbatch of 32 (pp=4 fsdp=2 ZeRO-3 GPipe, M=1), 0.17 of
 *     them; 0.25 keeps the estimate above;
 *   SAVED_PIPE_SP_TP: a pipeline stage's stash without full recompute
 *     under sequence parallelism is not split by tp (the backward reads
 *     the gathered stream) and grows with tp (the attention's values
 *     resharded between sequence and heads kept beside it): 24.2 GB
 *     against 23.0 without at tp=2 (the 7.5B, pp=4, selective), 500 GB
 *     against 229 at tp=8 (the 530B, pp=35, selective: it was estimated
 *     at 0.60 of its exact peak): 2.2 and 1.05 times; 1 + 0.2 (tp - 1)
 *     keeps the estimate above both, times the kept
 *     values without it. Both cores were unfused (the A100 rows); a fused
 *     core's stash splits with the stream: the H100 7.1B shape at pp=2,
 *     tp=8, recompute none stashes 5.88 GB with sp, 11.75 without, and
 *     this rule estimated its peak at 2.7 times the exact one;
 *   SAVED_FULL_PIPE, SAVED_FULL_PIPE_SP: a pipeline stage's stash under
 *     full recompute, in block inputs (whole, [seq, hidden] fp32, not
 *     split by tp): 1.09 of it on the Megatron 39B shape (pp=2 dp=8
 *     fsdp=4 tp=8 ZeRO-3, M=24: 7.0 GB for 2 microbatches of 2 examples
 *     over 24 blocks) and 5.13 with sequence parallelism (pp=4 dp=8
 *     fsdp=2 tp=8 ZeRO-1, M=32: 49.6 GB; the 7.5B at pp=4 tp=2 zb-h1:
 *     2.24); 1.2 and 6 keep the estimate above each.
 * The pipelined terms were a sum fitted when each piece had an arena of
 * its own (32 B a held gradient element and 6 B a stage element of
 * working memory, 2 B of state, two blocks' working values): with the
 * pieces sharing one arena that sum was 1.4-2.5 times the exact peak.
 * docs/planner.md, "The estimate", has the ratios before and after. */
#define SAVED_HEAD_PIPE 0.25
#define SAVED_PIPE_SP_TP 0.2
#define PIPE_STATE_EXTRA_B 1.0
#define PIPE_UPDATE_B 0.5
#define PIPE_GRAD_B 4.6
#define PIPE_GRAD_Z12_B 7.5
#define PIPE_STEP_B 4.6
/* The one-program step (no pipeline) updates in place and frees each
 * gradient once reduced: its workspace per parameter element of the model
 * (not of the shard) is 0.5 bytes without ZeRO-3 (810 MB for 1.56e9
 * elements, gpt_1p5b dp=8; ZeRO-1/2 hold the whole gradient there, which
 * the state counts whole for ZeRO-1 and sharded for ZeRO-2, as the ZeRO
 * paper does) and 2.4 with it (3.73 GB: fsdp=8, the gathered blocks'
 * bf16 casts and the backward's temporaries). Measured against plan
 * --train's memory lines (bf16, AdamW, full recompute, h100-sxm:8x1). */
#define WORK_ONE 0.5
#define WORK_ONE_Z3 2.4
#define SAVED_ONE 0.22
#define SAVED_PIPE 0.61
#define SAVED_FULL_PIPE 1.2
#define SAVED_FULL_PIPE_SP 6.0
/* Activation offloading (docs/offload.md) keeps on the device, of the
 * values the backward reads, those of the blocks its copies back have
 * reached: the copy back starts activation_loading_horizon reload points
 * ahead (passes/train.c's default, 2), and the reload points are blocks
 * under full recompute (a block's input, first read by its recomputed
 * forward: 2 blocks ahead and the one running, 3), the saved values
 * themselves otherwise (finer than blocks: the block running, 1). */
#define OFFLOAD_RESIDENT_FULL 3.0
#define OFFLOAD_RESIDENT 1.0
/* In a pipeline the reload points are the rank's backward pieces, one a
 * microbatch (docs/offload.md, "Pipelines"): at horizon H a rank holds H
 * microbatches' offloaded values on the device (at least one), not its
 * microbatches in flight; the search offloads a pipeline at
 * SC_SEARCH_PIPE_OFFLOAD_HORIZON. */
#define OFFLOAD_RESIDENT_PIPE ((double)SC_SEARCH_PIPE_OFFLOAD_HORIZON)

const char *sc_search_goal_name(sc_search_goal g) {
  return g == SC_SEARCH_LATENCY ? "latency" : g == SC_SEARCH_THROUGHPUT ? "throughput" : "train";
}

const char *sc_search_recompute_name(sc_search_recompute k) {
  return k == SC_SEARCH_RECOMPUTE_FULL ? "full" : k == SC_SEARCH_RECOMPUTE_SELECTIVE ? "selective"
                                                                                     : "none";
}

void sc_search_mesh(const sc_search_cand *c, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = 0;
  const char *names[6] = {"pp", "dp", "fsdp", "cp", "ep", "tp"};
  int64_t sizes[6] = {c->pp, c->dp, c->fsdp, c->cp, c->ep, c->tp};
  for (int i = 0; i < 6 && pos < n; i++) {
    if (sizes[i] < 2) continue;
    int w = snprintf(buf + pos, n - pos, "%s%s=%lld", pos ? "," : "", names[i],
                     (long long)sizes[i]);
    if (w < 0) return;
    pos += (size_t)w;
  }
  if (!buf[0]) snprintf(buf, n, "dp=1");
}

bool sc_search_same_mesh(const sc_search_cand *a, const sc_search_cand *b) {
  int64_t x[6] = {a->pp, a->dp, a->fsdp, a->cp, a->ep, a->tp};
  int64_t y[6] = {b->pp, b->dp, b->fsdp, b->cp, b->ep, b->tp};
  for (int i = 0; i < 6; i++)
    if ((x[i] > 1 ? x[i] : 1) != (y[i] > 1 ? y[i] : 1)) return false;
  return true;
}

/* c's expert-parallel size (1 without ep) and its ranks. */
static int64_t ep_of(const sc_search_cand *c) { return c->ep > 1 ? c->ep : 1; }
/* The ranks one stacked expert weight is split over: ep, and tp too under
 * expert tensor parallelism (ep.c). */
static double expert_split(const sc_search_cand *c) {
  return (double)ep_of(c) * (c->expert_tensor_parallel ? (double)c->tp : 1);
}
static int64_t ranks_of(const sc_search_cand *c) {
  return c->dp * c->fsdp * c->tp * c->pp * (c->cp > 1 ? c->cp : 1) * ep_of(c);
}

/* The nodes a group of `size` ranks at `stride` spans on nodes of P
 * devices, or 0 when the placement would split it unevenly (placement.h). */
static int64_t span(int64_t stride, int64_t size, int64_t P) {
  if (size <= 1) return 1;
  if (P % (stride * size) == 0) return 1;
  if (stride % P == 0) return size;
  if (P % stride == 0 && (stride * size) % P == 0) return stride * size / P;
  return 0;
}

typedef struct ctx {
  const sc_block_model *bm;
  const sc_search_opts *o;
  const sc_cluster *c;
  int64_t limit;   /* bytes per rank */
  double hbm;      /* memory-bound bytes per second */
  double hbm_nodes; /* the same for the graph's nodes' bytes (fused) */
  double hbm_stream; /* and for the residual stream's nodes' */
} ctx;

static sc_status coll(const ctx *x, sc_coll_kind k, double bytes, int64_t ranks, int64_t nodes,
                      double ops, double *s, sc_diag *d) {
  if (ranks <= 1 || ops <= 0) return SC_OK;
  sc_coll_cost cc;
  /* ops collectives of bytes/ops each: the ring's time is linear in bytes,
   * so their sum is ops times one of the mean size */
  sc_status st = sc_cost_collective(x->c, k, bytes / ops, (sc_coll_group){ranks, nodes}, &cc, d);
  if (st == SC_OK) *s += ops * cc.seconds;
  return st;
}

/* GEMM time of flops moving bytes (read and written: the roofline's
 * other side), with one efficiency (the smallest dimension's). */
static sc_status gemm_bytes(const ctx *x, double flops, double bytes, int64_t m, int64_t n,
                            int64_t k, double *s, sc_diag *d) {
  if (flops <= 0) return SC_OK;
  double t = 0;
  sc_status st = sc_cost_gemm_time(x->c, x->o->dtype, flops, bytes,
                                   sc_cost_gemm_efficiency(m < 1 ? 1 : m, n < 1 ? 1 : n,
                                                           k < 1 ? 1 : k), &t, d);
  *s += t;
  return st;
}

static sc_status gemm(const ctx *x, double flops, int64_t m, int64_t n, int64_t k, double *s,
                      sc_diag *d) {
  return gemm_bytes(x, flops, 0, m, n, k, s, d);
}

static double gemm_comm_b(const ctx *x);

/* The bytes of flops of m x n x k products in the GEMM dtype: each reads
 * its two operands and writes its product once (the forward's A by a
 * weight, the input gradient's, the weight gradient's alike), which at a
 * microbatch of a few hundred rows is more time than its FLOPs (gpt_1p5b's
 * MLP at 256 rows: the bf16 weight's 20.5 MB, 9.2 us at H100 bandwidth,
 * 5.2 GFLOP). */
static double gemm_operand_bytes(const ctx *x, double flops, int64_t m, int64_t n, int64_t k) {
  double one = 2.0 * (double)m * (double)n * (double)k;
  if (!(one > 0)) return 0;
  return flops / one * gemm_comm_b(x) *
         ((double)m * (double)k + (double)k * (double)n + (double)m * (double)n);
}

/* Whether the LM head is vocabulary-parallel over tp: a vocabulary that
 * tp does not divide is padded to a multiple of it first (passes/
 * partition/vocab_pad.c: a trained one before the step is built, its
 * padded logits masked in the loss; docs/partitioning.md), so any tp > 1
 * splits it. A model whose logits the block model did not find (vocab 0)
 * is not. */
static bool vocab_parallel(const sc_block_model *bm, const sc_search_cand *c) {
  return bm->vocab > 0 && c->tp > 1;
}

/* What tensor parallelism divides the LM head's values by: V / (Vp / tp),
 * Vp the vocabulary padded to a multiple of tp (tp itself when tp divides
 * it), where it is vocabulary-parallel; else 1. */
static double vocab_split(const sc_block_model *bm, const sc_search_cand *c) {
  if (!vocab_parallel(bm, c)) return 1;
  int64_t per = (bm->vocab + c->tp - 1) / c->tp; /* the padded rows a rank */
  return (double)bm->vocab / (double)per;
}

/* The bytes a GEMM product's or GEMM weight's element moves in over the
 * step's collectives (COMM_LOW_B). */
static double gemm_comm_b(const ctx *x) {
  return x->o->dtype != SC_CLUSTER_FP32 ? COMM_LOW_B : PARAM_B;
}

/* Whether the embedding is tied to the LM head (a tied [vocab, hidden]). */
static bool tied_head(const sc_block_model *bm) {
  for (int32_t i = 0; i < bm->n_tied; i++)
    if (bm->tied_dims[i][0] == bm->vocab && bm->tied_dims[i][1] == bm->hidden) return true;
  return false;
}

/* tp's collectives in an inference step's blocks into c->tp_s: ops
 * all-reduces of act bytes each (act: one [mbs, seq, hidden] in the dtype
 * it moves in), or with sequence parallelism an all-gather and a
 * reduce-scatter in place of each, of those bytes. */
static sc_status tp_blocks(const ctx *x, sc_search_cand *c, double ops, double act, int64_t n_tp,
                           sc_diag *d) {
  if (!c->sequence_parallel)
    return coll(x, SC_COLL_ALL_REDUCE, ops * act, c->tp, n_tp, ops, &c->tp_s, d);
  sc_status st = coll(x, SC_COLL_ALL_GATHER, ops * act, c->tp, n_tp, ops, &c->tp_s, d);
  if (st == SC_OK) st = coll(x, SC_COLL_REDUCE_SCATTER, ops * act, c->tp, n_tp, ops, &c->tp_s, d);
  return st;
}

/* tp's collectives in a training step's blocks into c->tp_s, `blocks`
 * block passes (microbatches x the stage's blocks) of act bytes each
 * (one [mbs, seq, hidden] in the dtype it moves in), exposed as the
 * compiled step runs them (codegen/overlap.c). Megatron's count, two a
 * block forward (attention, MLP), two backward, two more when the forward
 * runs again: all-reduces, all exposed (the backward's wait at once: the
 * Megatron 7.1B shape at dp=12, tp=8 without sequence parallelism exposes
 * 0.268 s, the estimate 0.256); with sequence parallelism an all-gather
 * before each column-parallel product and a reduce-scatter after each
 * row-parallel one, and the backward's regathers of the column-parallel
 * inputs for the weight gradients (none under full recompute, whose
 * recomputed forward gathered them): there the forward's and the
 * gradients' all-gathers are synchronous, and the backward's
 * reduce-scatters and regathers start asynchronously beside the weight
 * gradients' products (`window` a block pass), exposed only beyond them
 * (the 7.1B with sp: 121 of 181 all-gathers and 60 of 123
 * reduce-scatters asynchronous, 0.211 s of its 0.32 s of tp exposed; the
 * 32B at dp=48 0.157 s; counted all exposed the estimate had 0.319 and
 * 0.229; plan --train, bf16, 2026-12-05). The compiled step moves
 * Megatron's volume (plan --train's collectives, Megatron 7.5B,
 * a100-80g:8x16, batch 512, dp=16 fsdp=4 tp=2 ZeRO-3, full recompute,
 * sequence parallel: each tp rank sends 27.4 GB a step over tp,
 * all-gathers 14.6 and reduce-scatters 12.8, against Megatron's 29.0,
 * 0.945: the recomputed forward's last reduce-scatter is not needed, the
 * block's output being kept). */
static sc_status tp_train(const ctx *x, sc_search_cand *c, double blocks, double act,
                          double window, int64_t n_tp, sc_diag *d) {
  bool full = c->recompute == SC_SEARCH_RECOMPUTE_FULL;
  double fwd = blocks * (full ? 4 : 2), bwd = blocks * 2, sync = 0, beside = 0;
  sc_status st;
  if (!c->sequence_parallel) {
    st = coll(x, SC_COLL_ALL_REDUCE, (fwd + bwd) * act, c->tp, n_tp, fwd + bwd, &sync, d);
  } else {
    double regather = full ? 0 : blocks * 2;
    st = coll(x, SC_COLL_ALL_GATHER, (fwd + bwd) * act, c->tp, n_tp, fwd + bwd, &sync, d);
    if (st == SC_OK) st = coll(x, SC_COLL_REDUCE_SCATTER, fwd * act, c->tp, n_tp, fwd, &sync, d);
    if (st == SC_OK)
      st = coll(x, SC_COLL_REDUCE_SCATTER, bwd * act, c->tp, n_tp, bwd, &beside, d);
    if (st == SC_OK)
      st = coll(x, SC_COLL_ALL_GATHER, regather * act, c->tp, n_tp, regather, &beside, d);
  }
  double hidden = blocks * window;
  c->tp_s += sync + (beside > hidden ? beside - hidden : 0);
  return st;
}

static double rank_mbs(const ctx *x, const sc_search_cand *c);

/* tp's collectives outside the blocks into c->tp_s, per microbatch (act:
 * one [mbs, seq, hidden] in the graph's dtype, as the compiled step moves
 * the stream there), with a vocabulary-parallel embedding and LM head:
 * the LM head input's gradient all-reduced (backward) and, on the first
 * pipeline rank (the critical one without a pipeline), the embedding's
 * output (forward); with sequence parallelism a reduce-scatter in place
 * of each, the LM head input's all-gather, and the embedding's output
 * gradient all-gathered for its masked scatter. Measured 2026-12-05 on
 * plan --train's simulated steps (a shape-only GPT of 4 blocks, hidden
 * 7168, vocabulary 65,536, sequence 4096, h100-sxm:8x1, tp=8 with
 * sequence parallelism, batch 4): 0.93 ms each of the stream's three, 3.67
 * ms the embedding's gradient (then a [vocab, hidden] reduce-scatter), 8.7
 * of the 19 ms exposed over tp; the estimate had none. */
static sc_status tp_outside(const ctx *x, sc_search_cand *c, double M, double act, int64_t n_tp,
                            sc_diag *d) {
  const sc_block_model *bm = x->bm;
  if (!vocab_parallel(bm, c)) return SC_OK; /* no LM head found */
  double first = c->pp == 1 ? 1 : 0; /* the embedding's, on the critical rank */
  double reduce = M * (1 + first);
  if (!c->sequence_parallel)
    return coll(x, SC_COLL_ALL_REDUCE, reduce * act, c->tp, n_tp, reduce, &c->tp_s, d);
  sc_status st = coll(x, SC_COLL_REDUCE_SCATTER, reduce * act, c->tp, n_tp, reduce, &c->tp_s, d);
  if (st == SC_OK) st = coll(x, SC_COLL_ALL_GATHER, M * act, c->tp, n_tp, M, &c->tp_s, d);
  /* the lookup's gradient: the tokens' gradient all-gathered for the
   * masked scatter (shard_rules.c) */
  if (st == SC_OK && first > 0)
    st = coll(x, SC_COLL_ALL_GATHER, M * act, c->tp, n_tp, M, &c->tp_s, d);
  return st;
}

/* Expert tensor parallelism's collectives over tp into c->tp_s
 * (docs/moe.md): per microbatch, each MoE layer's sum pending over tp
 * (the products that leave the experts, row-parallel), reduced in the
 * forward (twice under full recompute) where ep.c and the cut put it:
 * under sequence parallelism reduce-scattered onto the sequence of the
 * [mbs, seq, hidden] tokens after the combine, and the experts' input
 * gradient reduce-scattered likewise in the backward; without it, with
 * ep, all-reduced on the rank's capacity slots [mbs, E, C, D] before the
 * inverse all-to-all, and without ep on the tokens after the combine
 * (the input gradient joins the residual gradient's all-reduce). And
 * once a step a 4-byte sum per expert tensor (its share of the gradient
 * norm). act: one [mbs, seq, hidden] in the GEMM dtype; low: the GEMM
 * dtype's bytes over the graph's. */
static sc_status tp_experts(const ctx *x, sc_search_cand *c, double M, int64_t Ls, double act,
                            double low, int64_t n_tp, sc_diag *d) {
  const sc_block_part *b = &x->bm->block, *ou = &x->bm->outside;
  double exits = M * ((double)Ls * b->expert_exits + ou->expert_exits);
  double fwd = exits * (c->recompute == SC_SEARCH_RECOMPUTE_FULL ? 2 : 1);
  double tensors = (double)Ls * b->expert_tensors + ou->expert_tensors;
  double per_exit = (double)Ls * b->expert_exits + ou->expert_exits;
  double slots = per_exit > 0 ? rank_mbs(x, c) * low *
                                    ((double)Ls * b->expert_exit_bytes + ou->expert_exit_bytes) /
                                    per_exit
                              : 0;
  sc_status st;
  if (c->sequence_parallel)
    st = coll(x, SC_COLL_REDUCE_SCATTER, (fwd + exits) * act, c->tp, n_tp, fwd + exits,
              &c->tp_s, d);
  else
    st = coll(x, SC_COLL_ALL_REDUCE, fwd * (ep_of(c) > 1 ? slots : act), c->tp, n_tp, fwd,
              &c->tp_s, d);
  if (st == SC_OK && tensors > 0)
    st = coll(x, SC_COLL_ALL_REDUCE, 4 * tensors, c->tp, n_tp, tensors, &c->tp_s, d);
  return st;
}

/* Bytes per table element of the lookups' gradient a microbatch (see
 * LOOKUP_ZERO_B): none where scatter-sum adds the rows into the
 * accumulator (the step accumulates microbatches, and ZeRO-3 does not
 * reduce-scatter each microbatch's gradient first) or into the tied LM
 * head's gradient (no pipeline: the head is on the same rank). */
static double lookup_grad_b(const ctx *x, const sc_search_cand *c) {
  if (c->tp > 1 && !vocab_parallel(x->bm, c)) return LOOKUP_HIDDEN_SPLIT_B;
  bool accumulates = c->microbatches > 1 && c->zero < 3;
  if (accumulates || (c->pp == 1 && tied_head(x->bm))) return 0;
  /* a vocabulary-parallel table's: the rank's rows (the masked scatter,
   * shard_rules.c) */
  return LOOKUP_ZERO_B / vocab_split(x->bm, c);
}

/* Per microbatch on one rank of the critical stage: one block's forward
 * and the recomputed part, and the outside part's forward. */
typedef struct mb_times {
  double block_fwd, block_re, outside_fwd;
  double block_bwd, outside_bwd; /* the backward: the GEMMs twice, the kernels once */
  double block_gemm;             /* the forward's GEMMs (= the weight gradients') */
  /* of the backward, the products by weights' gradients (a block's, the
   * LM head's): a pipeline's weight piece, which runs after the input's
   * gradient has been handed on (codegen/pipe_schedule.c) */
  double block_weight, outside_weight;
  /* the lookups' gradient: the first pipeline rank's (the embedding's),
   * where the last holds the LM head and the loss */
  double lookup_bwd;
} mb_times;

/* Thread-ranks outnumbering the host's cores compute time-sliced
 * (sc_cluster_core_share): what every compute term is multiplied by. */
static double core_share(const ctx *x, const sc_search_cand *c) {
  return sc_cluster_core_share(x->c, ranks_of(c));
}

/* Whether cp > 1 cuts the sequence into cp padded blocks rather than the
 * zig-zag's 2·cp chunks (cp.c's rule: no attention causal or masked, and
 * a sequence 2·cp does not divide), and in training the labels do not
 * keep the sequence (cp.c pads no sequence input). */
static bool cp_pads(const ctx *x, int64_t cp) {
  const sc_block_model *bm = x->bm;
  return cp > 1 && bm->seq % (2 * cp) != 0 && bm->attn_unmasked &&
         (x->o->goal != SC_SEARCH_TRAIN || !bm->token_outputs);
}

/* The sequence c's ranks compute between them: the model's, or padded to
 * the next multiple of cp (sc_cp_padded_sequence) where cp pads it. */
static int64_t cp_sequence(const ctx *x, const sc_search_cand *c) {
  int64_t seq = x->bm->seq;
  return cp_pads(x, c->cp) ? sc_cp_padded_sequence(seq, c->cp) : seq;
}

/* A microbatch's examples' worth of tokens one rank computes: cp splits
 * every sequence over its ranks (docs/context-parallel.md), so every
 * token-wise term (products, memory-bound kernels, kept values, the
 * [mbs, seq, hidden] that tp and pp move) is 1/cp of the microbatch's,
 * and so is the attention core's (the zig-zag layout gives every rank
 * 1/cp of the causal pairs, sc_cp_rank_pairs); a padded sequence's
 * tokens count with their padding (P/cp rows a rank for the model's S). */
static double rank_mbs(const ctx *x, const sc_search_cand *c) {
  double cp = (double)(c->cp > 1 ? c->cp : 1), seq = (double)x->bm->seq;
  return (double)c->micro_batch_size * ((double)cp_sequence(x, c) / seq) / cp;
}

/* The block's GEMMs outside the attention core on one rank, each shape at
 * its own efficiency (sc_block_part.gemms): a product by a 2-D weight has
 * tp split its n (column-parallel), or its k when n is the hidden size
 * (row-parallel: the attention's output and the MLP's down projection
 * write the residual stream; tp.c); its m is the rank's rows. One shape
 * for all (the rows, hidden / tp, hidden) timed the Megatron 32B's
 * products at tp=8 (hidden 7168: 896) at the efficiency of 896 where 11
 * of their 12 h² FLOPs have every dim above 1024 (docs/planner.md, "The
 * estimate"). FLOPs the list does not hold (a product of no known shape)
 * keep that one shape. */
static sc_status block_gemm(const ctx *x, const sc_search_cand *c, const sc_block_gemm *e,
                            double flops, double *s, sc_diag *d) {
  double mbs = rank_mbs(x, c);
  int64_t m = (int64_t)((double)e->m * mbs), n = e->n, k = e->k;
  if (e->weight && n == x->bm->hidden) k /= c->tp;
  else if (e->weight) n /= c->tp;
  double f = flops * mbs / (double)c->tp;
  return gemm_bytes(x, f, gemm_operand_bytes(x, f, m, n, k), m, n, k, s, d);
}

static sc_status block_gemms(const ctx *x, const sc_search_cand *c, const sc_block_part *b,
                             int64_t rows, double *s, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  double mbs = rank_mbs(x, c), tp = (double)c->tp, listed = 0;
  int64_t h = bm->hidden > 0 ? bm->hidden : 1;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < b->n_gemms && st == SC_OK; i++) {
    listed += b->gemms[i].flops;
    st = block_gemm(x, c, &b->gemms[i], b->gemms[i].flops, s, d);
  }
  /* the expert products are in no list (block_model.c): block_times
   * times them apart */
  double rest = b->gemm_flops - b->attn_flops - b->expert_flops - listed;
  if (st == SC_OK && rest > 0) st = gemm(x, rest * mbs / tp, rows, h / c->tp, h, s, d);
  return st;
}

static double low_fraction(const ctx *x);

static sc_status block_times(const ctx *x, const sc_search_cand *c, mb_times *t, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  const sc_block_part *b = &bm->block;
  double mbs = rank_mbs(x, c), tp = (double)c->tp;
  int64_t cp = c->cp > 1 ? c->cp : 1, seq = cp_sequence(x, c);
  int64_t rows = c->micro_batch_size * seq / cp;
  int64_t h = bm->hidden > 0 ? bm->hidden : 1;
  int64_t hd = bm->heads > 0 ? h / bm->heads : h;
  memset(t, 0, sizeof *t);
  double core = 0, core_bwd = 0, rest = 0;
  /* a padded sequence's core: its P/cp queries against all P keys */
  double keys = (double)seq / (double)bm->seq, core_flops = b->attn_flops * mbs * keys / tp;
  sc_status st = SC_OK;
  if (bm->attn_fused) { /* the fused kernel, timed as the simulator times it (cost.h) */
    st = sc_cost_fused_attention_time(x->c, x->o->dtype, core_flops, 0, seq / cp, seq, hd, false,
                                      &core, d);
    if (st == SC_OK)
      st = sc_cost_fused_attention_time(x->c, x->o->dtype, SC_ATTENTION_GRAD_FLOPS * core_flops, 0,
                                        seq / cp, seq, hd, true, &core_bwd, d);
  } else {
    st = gemm(x, core_flops, seq / cp, seq, hd, &core, d);
    core_bwd = BACKWARD_FACTOR * core;
  }
  if (st == SC_OK) st = block_gemms(x, c, b, rows, &rest, d);
  /* the experts: whole on every tp rank (ep.c), each of a rank's E/ep
   * experts over every ep rank's tokens (mbs x E x C slots a rank in all),
   * at the efficiency of one expert's product (its C rows); under expert
   * tensor parallelism 1/tp of it, its hidden size F split */
  if (st == SC_OK && b->expert_flops > 0) {
    bool etp = c->expert_tensor_parallel && c->tp > 1;
    int64_t en = b->expert_n, ek = b->expert_k, f = b->expert_hidden;
    if (etp && en == f) en /= c->tp;
    else if (etp && ek == f) ek /= c->tp;
    st = gemm(x, b->expert_flops * mbs / (etp ? tp : 1), b->expert_m, en, ek, &rest, d);
  }
  if (st != SC_OK) return st;
  /* memory-bound kernels: the residual stream's are whole on every tp rank
   * unless sequence parallel splits them; the rest (heads, the MLP's wide
   * values) are split */
  double lo = low_fraction(x);
  double whole = (b->whole_mem_bytes - lo * b->whole_low_mem_bytes) * mbs;
  double split = (b->mem_bytes - b->whole_mem_bytes -
                  lo * (b->low_mem_bytes - b->whole_low_mem_bytes)) * mbs;
  double stream = c->sequence_parallel ? whole / tp : whole;
  double mem = stream / x->hbm_stream + split / tp / x->hbm_nodes;
  double core_mem = b->attn_mem_bytes * mbs / tp / x->hbm_nodes;
  t->block_fwd = core + rest + mem;
  t->block_bwd = core_bwd + BACKWARD_FACTOR * rest + MEM_BACKWARD_FACTOR * mem;
  t->block_gemm = core + rest;
  t->block_weight = rest;
  /* full recompute reruns the forward but its last product, whose output
   * only feeds the residual addition that makes the block's output */
  double last = 0;
  if (st == SC_OK && c->recompute == SC_SEARCH_RECOMPUTE_FULL && b->last_gemm_flops > 0 &&
      b->last_gemm >= 0 && b->last_gemm < b->n_gemms)
    st = block_gemm(x, c, &b->gemms[b->last_gemm], b->last_gemm_flops, &last, d);
  if (st != SC_OK) return st;
  t->block_re = c->recompute == SC_SEARCH_RECOMPUTE_FULL        ? t->block_fwd - last
                : c->recompute == SC_SEARCH_RECOMPUTE_SELECTIVE && !bm->attn_fused
                    ? core + core_mem
                                                                : 0;
  const sc_block_part *ou = &bm->outside;
  double og = 0;
  /* the LM head's GEMM: vocabulary-parallel over tp (its padded rows) */
  double vs = vocab_split(bm, c);
  st = gemm(x, ou->gemm_flops * mbs / vs, rows, (int64_t)((double)bm->vocab / vs), h, &og, d);
  double omem = (ou->mem_bytes - lo * ou->low_mem_bytes) * mbs / vs / x->hbm_nodes;
  /* the loss over the logits' rows (loss_saved_bytes: 4 B a row): the
   * decomposed form (a tensor-parallel step's, or --no-fuse-loss's) over
   * the vocabulary's split, or over the whole vocabulary at tp 1 */
  double logits = bm->loss_saved_bytes / 4 * (double)bm->vocab * mbs / vs;
  bool decomposed = c->tp > 1 || bm->loss_split;
  bool vp = vocab_parallel(bm, c);
  double loss_fwd = !decomposed ? LOSS_FUSED_FWD_B : vp ? LOSS_SPLIT_FWD_B : LOSS_WHOLE_FWD_B;
  double loss_bwd = !decomposed ? LOSS_FUSED_BWD_B : vp ? LOSS_SPLIT_BWD_B : LOSS_WHOLE_BWD_B;
  /* the LM head's weight gradient: of the rank's shard of the weight,
   * which tp splits on its vocabulary; a model without a head found keeps
   * the outside's products whole on every tp rank, their weights split */
  double og_w = vp ? og : og / tp;
  t->outside_fwd = og + omem + logits * loss_fwd / x->hbm;
  t->outside_bwd = og + og_w + MEM_BACKWARD_FACTOR * omem + logits * loss_bwd / x->hbm;
  t->outside_weight = og_w;
  t->lookup_bwd = ou->lookup_elems * lookup_grad_b(x, c) / x->hbm;
  double share = core_share(x, c);
  t->block_fwd *= share, t->block_re *= share, t->outside_fwd *= share;
  t->block_bwd *= share, t->outside_bwd *= share, t->block_gemm *= share;
  t->block_weight *= share, t->outside_weight *= share, t->lookup_bwd *= share;
  return st;
}

/* Parameter elements one rank of the critical stage holds before ZeRO's
 * sharding: its blocks' (split by tp where tp splits them; the experts'
 * split by ep, whole over tp unless expert tensor parallelism splits them
 * over tp too: ep.c) and the outside's (vocabulary-parallel over tp). */
static double stage_params(const sc_block_model *bm, const sc_search_cand *c, int64_t blocks) {
  const sc_block_part *b = &bm->block;
  double per_block = (double)b->split_params / (double)c->tp +
                     (double)(b->params - b->split_params - b->expert_params) +
                     (double)b->expert_params / expert_split(c);
  return (double)blocks * per_block + (double)bm->outside.params / (double)c->tp;
}

/* Of stage_params, the GEMM weights (what tp splits). */
static double stage_split_params(const sc_block_model *bm, const sc_search_cand *c,
                                 int64_t blocks) {
  return ((double)blocks * (double)bm->block.split_params +
          (double)bm->outside.split_params) / (double)c->tp;
}

/* Of stage_params, the experts' (their rank's E/ep). */
static double stage_expert_params(const sc_block_model *bm, const sc_search_cand *c,
                                  int64_t blocks) {
  return (double)blocks * (double)bm->block.expert_params / expert_split(c);
}

/* The ranks the parameters outside the experts are stored over under
 * ZeRO: fsdp, and ep too under fsdp x ep without a pipeline (their storage
 * group, train_seed.c); the experts' are stored over fsdp alone. */
static double rest_storage(const sc_search_cand *c) {
  double f = c->fsdp > 1 ? (double)c->fsdp : 1;
  return c->fsdp > 1 && c->pp <= 1 ? f * (double)ep_of(c) : f;
}

/* Bytes of training state per rank for e parameter elements, e_exp of
 * them the experts'. */
static double state_bytes(const ctx *x, const sc_search_cand *c, double e, double e_exp) {
  double f = c->fsdp > 1 ? (double)c->fsdp : 1, fr = rest_storage(c), per[2];
  for (int part = 0; part < 2; part++) { /* an element's bytes: the experts', the rest's */
    double p = PARAM_B, g = GRAD_B, o = x->o->adamw ? ADAM_B : 0, n = part ? fr : f;
    if (c->zero >= 1) o /= n;
    if (c->zero >= 2) g /= n;
    if (c->zero >= 3) p /= n;
    per[part] = p + g + o;
  }
  return fr == f ? e * per[0] : e_exp * per[0] + (e - e_exp) * per[1];
}

/* sc_search_param_collectives (search.h): block 0's tensors grouped by
 * bucket.c's rule, sc_partition_bucket_count, the gradients' in the order
 * the backward meets them (last first). */
static double stage_collectives(const ctx *x, const sc_search_cand *c, int64_t blocks,
                                sc_search_grouping how) {
  const sc_block_part *b = &x->bm->block;
  double outside = (double)x->bm->outside.param_tensors;
  if (how == SC_SEARCH_GROUP_TENSOR || b->n_listed == 0)
    return (double)blocks * b->param_tensors + outside;
  int64_t bytes[SC_BLOCK_MODEL_TENSORS];
  int32_t dtype[SC_BLOCK_MODEL_TENSORS];
  bool low_step = x->o->dtype != SC_CLUSTER_FP32, low = low_step && x->o->reduce_low;
  for (int32_t i = 0; i < b->n_listed; i++) {
    int32_t k = b->n_listed - 1 - i; /* the backward's order */
    /* the GEMM weights' gathers in the GEMM dtype, their gradients' DDP
     * reductions in it under --reduce-dtype bf16: a group per dtype */
    bool l = b->tensor_split[k] && (how == SC_SEARCH_GROUP_GATHER ? low_step
                                    : how == SC_SEARCH_GROUP_DDP && low);
    dtype[i] = l;
    double e = (double)b->tensor_elems[k] / (b->tensor_split[k] ? (double)c->tp : 1);
    bytes[i] = (int64_t)(e * (l ? COMM_LOW_B : PARAM_B));
  }
  int32_t per_block = sc_partition_bucket_count(bytes, dtype, b->n_listed, how == SC_SEARCH_GROUP_DDP);
  return (double)blocks * per_block + outside;
}

sc_status sc_search_estimate(const sc_block_model *bm, const sc_search_opts *o,
                             sc_search_cand *c, sc_diag *d);

static void init_ctx(ctx *x, const sc_block_model *bm, const sc_search_opts *o) {
  x->bm = bm;
  x->o = o;
  x->c = o->cluster;
  x->limit = o->memory_budget > 0 ? o->memory_budget : o->cluster->device_memory_bytes;
  x->hbm = o->cluster->memory_bytes_per_s * SC_COST_MEMORY_EFF;
  x->hbm_nodes = x->hbm / FUSED_MEMORY;
  x->hbm_stream = x->hbm / FUSED_MEMORY_STREAM;
}

double sc_search_param_collectives(const sc_block_model *bm, const sc_search_opts *o,
                                   const sc_search_cand *c, sc_search_grouping how) {
  ctx x;
  init_ctx(&x, bm, o);
  return stage_collectives(&x, c, (bm->n_blocks + c->pp - 1) / c->pp, how);
}

/* Under fsdp x ep (rest_storage), the gathers over fsdp alone a region of
 * `blocks` blocks has, the experts': one a block under ZeRO-3 (their
 * bucket), one a stacked weight under ZeRO-1/2 (gathered a tensor); else
 * 0. */
static double expert_gathers(const ctx *x, const sc_search_cand *c, int64_t blocks) {
  const sc_block_part *b = &x->bm->block;
  if (b->expert_params <= 0 || rest_storage(c) <= (double)c->fsdp) return 0;
  return (double)blocks * (c->zero >= 3 ? 1 : b->expert_tensors);
}

/* The all-gathers over fsdp of a step of c's stage of `blocks` blocks
 * (sc_search_step_gathers): *fwd a microbatch's forward's, *bwd its
 * backward's, *times how many microbatches gather. */
static void stage_gathers(const ctx *x, const sc_search_cand *c, int64_t blocks, double *fwd,
                          double *bwd, double *times) {
  *fwd = *bwd = *times = 0;
  if (c->fsdp <= 1) return;
  *times = c->zero >= 3 || c->pp > 1 ? c->microbatches : 1;
  if (c->zero < 3) {
    *fwd = stage_collectives(x, c, blocks, SC_SEARCH_GROUP_TENSOR);
    return;
  }
  /* under fsdp x ep a block's experts are a bucket of their own, over
   * fsdp alone (rest_storage) */
  *fwd = stage_collectives(x, c, blocks, SC_SEARCH_GROUP_GATHER) + expert_gathers(x, c, blocks);
  *bwd = *fwd - (double)x->bm->outside.param_tensors;
}

double sc_search_step_gathers(const sc_block_model *bm, const sc_search_opts *o,
                              const sc_search_cand *c) {
  ctx x;
  init_ctx(&x, bm, o);
  double fwd, bwd, times;
  stage_gathers(&x, c, (bm->n_blocks + c->pp - 1) / c->pp, &fwd, &bwd, &times);
  return times * (fwd + bwd);
}

/* The reduce-scatters over fsdp a tied parameter's gradient takes beyond
 * the one stage_collectives counts: the compiled step reduce-scatters the
 * sum's two parts apart, each in sc_partition_split_chunks's chunks of
 * rows (sc_partition_split_grad_sums), where the parameter is sharded
 * (train_seed.c: on its first dim whose piece fsdp divides, the rows a
 * vocabulary-parallel tp leaves a rank first), its gradient has
 * SC_PARTITION_SPLIT_MIN_BYTES or more and both parts are made on one
 * stage (not in a pipeline, which hands a tied gradient over), and the
 * sum is reduce-scattered in fp32 (under --reduce-dtype bf16 its cast
 * comes between: not split). The gpt_1p5b sample at fsdp=2: its [50257,
 * 1600] embedding sharded on dim 1, 2 x 13 chunks in place of one. */
static double tied_scatters(const ctx *x, const sc_search_cand *c) {
  const sc_block_model *bm = x->bm;
  if (c->fsdp <= 1 || c->pp > 1 || x->o->reduce_low) return 0;
  double extra = 0;
  int64_t S = (int64_t)rest_storage(c), es = bm->param_bytes > 0 ? bm->param_bytes : 4;
  for (int32_t i = 0; i < bm->n_tied; i++) {
    int64_t rows = bm->tied_dims[i][0], cols = bm->tied_dims[i][1];
    if (vocab_parallel(bm, c) && rows == bm->vocab) rows = (rows + c->tp - 1) / c->tp;
    int64_t axis = rows % S == 0 ? 0 : cols % S == 0 ? 1 : -1, per = 0;
    if (axis < 0 || rows * cols * es < SC_PARTITION_SPLIT_MIN_BYTES) continue;
    extra += 2.0 * (double)sc_partition_split_chunks(rows, rows * cols * es, axis, &per) - 1;
  }
  return extra;
}

double sc_search_step_scatters(const sc_block_model *bm, const sc_search_opts *o,
                               const sc_search_cand *c) {
  ctx x;
  init_ctx(&x, bm, o);
  if (c->fsdp <= 1) return 0;
  double times = c->zero >= 3 || c->pp > 1 ? c->microbatches : 1;
  return times * (stage_collectives(&x, c, (bm->n_blocks + c->pp - 1) / c->pp,
                                    SC_SEARCH_GROUP_BLOCK) + tied_scatters(&x, c));
}

/* The estimate, with the lower bound first: *bound is compute alone;
 * when it is not below cutoff the rest is skipped (returns with *cut). */
static sc_status infer_estimate(const ctx *x, sc_search_cand *c, double cutoff, bool *cut,
                                sc_diag *d);

static void block_values(const ctx *x, const sc_search_cand *c, double *all, double *keep);
static double outside_saved(const ctx *x, const sc_search_cand *c);

/* The exposed part of c's gradient reductions that keep their queue
 * `busy` in ops collectives. In a step without a pipeline and without
 * ZeRO-3 each bucket's collective starts when the backward has made its
 * gradients and runs on its communicator's queue beside the rest of the
 * backward (the last microbatch's: hide), so what is exposed is what the
 * backward does not hide, never less than the last bucket's (it waits
 * for the backward's end); otherwise all of it. Counted whole everywhere
 * until 2026-12-07: gpt_1p5b at dp=8 (h100-sxm:8x1, batch 64) had 32.5 ms
 * of dp estimated, the queue's busy time, against 12.6 exposed
 * (simulated); at fsdp=8 ZeRO-1 32.3 ms of fsdp against 14.5. */
static double behind_backward(const sc_search_cand *c, double busy, double hide, double ops) {
  if (c->pp > 1 || c->zero >= 3) return busy;
  double last = busy / (ops > 1 ? ops : 1);
  return busy - hide > last ? busy - hide : last;
}

static sc_status estimate(const ctx *x, sc_search_cand *c, double cutoff, bool *cut,
                          sc_diag *d) {
  if (c->inference) return infer_estimate(x, c, cutoff, cut, d);
  const sc_block_model *bm = x->bm;
  const sc_block_part *b = &bm->block;
  int64_t L = bm->n_blocks, P = x->c->devices_per_node;
  int64_t Ls = (L + c->pp - 1) / c->pp;
  double M = c->microbatches, V = c->virtual_stages;
  *cut = false;
  mb_times t;
  sc_status st = block_times(x, c, &t, d);
  if (st != SC_OK) return st;
  /* the critical stage: of a pipeline's ends the busier a microbatch, the
   * last (its blocks and the LM head and loss) or the first (its blocks
   * and the lookups' gradient); without a pipeline one rank has both */
  bool last = c->pp == 1 || t.outside_fwd + t.outside_bwd >= t.lookup_bwd;
  bool first = c->pp == 1 || !last;
  double fwd = (double)Ls * t.block_fwd + (last ? t.outside_fwd : 0);
  double bwd = (double)Ls * t.block_bwd + (last ? t.outside_bwd : 0) + (first ? t.lookup_bwd : 0);
  double re = (double)Ls * t.block_re;
  double e_stage = stage_params(bm, c, Ls);
  c->compute_s = M * (fwd + bwd);
  c->recompute_s = M * re;
  double e_exp = stage_expert_params(bm, c, Ls);
  double e_opt = c->zero < 1                         ? e_stage
                 : rest_storage(c) == (double)c->fsdp ? e_stage / (double)c->fsdp
                                                      : e_exp / (double)c->fsdp +
                                                            (e_stage - e_exp) / rest_storage(c);
  c->optimizer_s = e_opt *
                   ((x->o->adamw ? ADAM_STEP_B : SGD_STEP_B) + NORM_B + (M > 1 ? MEAN_B : 0)) /
                   x->hbm;
  /* per microbatch, the stage's parameters are read again: their bf16
   * casts for the GEMMs (read 4, write 2 bytes an element) and the
   * gradient accumulation (read the new, read and write the sum: 12) of
   * all but the blocks' GEMM weights, whose weight-gradient products
   * write their own dtype (in the products' bytes, gemm_operand_bytes)
   * and an epilogue kernel after each takes it into the gradient
   * (WGRAD_CAST_B, WGRAD_SUM_B) */
  bool low = x->o->dtype != SC_CLUSTER_FP32;
  double e_cast = e_stage * (low ? CAST_B : 0) / x->hbm;
  double e_gemm_w = (double)Ls * (double)b->split_params / (double)c->tp;
  double wgrad_b = M > 1 ? (low ? WGRAD_SUM_LOW_B : WGRAD_SUM_B) : (low ? WGRAD_CAST_B : 0);
  double e_pass = e_cast + (e_stage - e_gemm_w) * ACCUM_B / x->hbm + e_gemm_w * wgrad_b / x->hbm;
  c->optimizer_s *= core_share(x, c);
  e_pass *= core_share(x, c);
  e_cast *= core_share(x, c);
  /* a pipelined step casts once, in each chunk's prepare piece before its
   * first forward (ir/pipe.h): gpt_1p5b at pp=8, dp=2, 1F1B, M=32 spent
   * 436 us a microbatch in its first rank's casts (21.6 of its 63.6 ms of
   * compute with the tied embedding's copy) when each forward cast */
  c->compute_s += c->pp > 1 ? M * (e_pass - e_cast) + e_cast : M * e_pass;
  /* a step without a pipeline groups its blocks' gradient reductions
   * (over every data axis: dp, fsdp, ep, cp) and (under fsdp) parameter
   * gathers into buckets (passes/partition/bucket.c): each tensor is
   * copied into its bucket and out of it, once a step (BUCKET_COPY_B,
   * BUCKET_SHARD_B) */
  if (c->pp == 1 && ranks_of(c) > c->tp) {
    double e_blocks = e_stage - (double)bm->outside.params / (double)c->tp;
    double per = BUCKET_COPY_B + (c->fsdp > 1 ? BUCKET_SHARD_B / (double)c->fsdp : 0);
    c->compute_s += e_blocks * per / x->hbm * core_share(x, c);
  }
  c->bubble_s = 0;
  double slots = 0; /* hand-off chain times the critical rank idles */
  if (c->pp > 1) {
    /* the fill and drain pass a microbatch's forward and its backward
     * piece from rank to rank; the backward piece hands the input's
     * gradient on before the weight piece runs (the weight gradients and
     * their accumulation), so a rank ends at M(F+B+W) + (P-1)(F+B)
     * (codegen/pipe_schedule.c), and zero-bubble H1, which holds weight
     * pieces back to fill the waits, at M(F+B+W) + (P-1)(F+B) -
     * (min(M, P)-1)W: (P-1)(F+B-W) when M >= P (Qi et al. 2023;
     * docs/planner.md, section 3). Interleaved (Megatron's order, V chunks
     * a rank) passes chunk pieces, 1/V of the stage's: (P-1)(F+B)/V, its
     * W pieces off the chain as 1F1B's (test_dist_sim's equal pieces: the
     * simulated bubble within 0.002 of the step at V = 2, 4). A chunk that
     * recomputes has no weight pieces (its backward piece computes its
     * weight gradients: ir/pipe.h), so under full recompute the chain
     * carries them and zb-h1's lists are 1F1B's (the Megatron 145B at
     * pp=12 fsdp=16: the same simulated step). Until 2026-12-06 every slot
     * was a whole microbatch, F+B+W, and zb-h1 a third of it: the H100
     * 462B (pp=16, M=64, 1F1B) had 2.82 s of bubble estimated against
     * 0.82 s simulated. The pieces of the chain are the other ranks':
     * the critical stage waits for a microbatch's forward through the
     * P - 1 ranks before it and for its backward back through them, each
     * with its blocks alone (the outside part is the critical stage's);
     * until 2026-12-06 each slot was the critical stage's, the LM head's
     * and loss's time with it (the GPT-175B shape at pp=32, tp=8, M=384
     * under full recompute: 1.53 s of bubble estimated, a slot 41 ms of
     * compute against a middle rank's 17.9 ms simulated) */
    slots = (double)(c->pp - 1) / (V > 1 ? V : 1);
    double e_out = (double)bm->outside.params / (double)c->tp * core_share(x, c);
    double accum_out = e_out * ACCUM_B / x->hbm;
    double w = (double)Ls * t.block_weight, accum = e_pass - e_cast - accum_out;
    double chain = (double)Ls * (t.block_fwd + t.block_bwd) + re + accum;
    if (c->recompute != SC_SEARCH_RECOMPUTE_FULL) {
      chain -= w + accum;
      if (strcmp(c->schedule, "zb-h1") == 0) {
        double held = (double)(c->microbatches < c->pp ? c->microbatches : c->pp) - 1;
        chain -= w * held / (double)(c->pp - 1);
      }
    }
    c->bubble_s = slots * (chain > 0 ? chain : 0);
  }
  double bound = c->compute_s + c->recompute_s + c->optimizer_s + c->bubble_s;
  if (bound >= cutoff) {
    *cut = true;
    return SC_OK;
  }
  /* communication: tp (stride 1), ep (stride tp), cp (stride tp ep),
   * fsdp (stride tp ep cp), dp (stride tp ep cp fsdp), pp (stride tp ep
   * cp fsdp dp): sc_search_mesh's order */
  int64_t cp = c->cp > 1 ? c->cp : 1, ep = ep_of(c), te = c->tp * ep;
  int64_t n_tp = span(1, c->tp, P), n_ep = span(c->tp, ep, P), n_cp = span(te, cp, P),
          n_fs = span(te * cp, c->fsdp, P), n_dp = span(te * cp * c->fsdp, c->dp, P),
          n_pp = span(te * cp * c->fsdp * c->dp, c->pp, P);
  double act = rank_mbs(x, c) * b->input_bytes; /* one [mbs, seq / cp, hidden] */
  /* what the compiled step moves (its collectives' bytes, plan --train's
   * "collectives"): the GEMM products in the GEMM dtype, so the tp
   * reductions of [mbs, seq, hidden] and the GEMM weights' gathers in it
   * (and their data-parallel gradient reductions under --reduce-dtype
   * bf16: rbytes); the rest in the graph's */
  double cb = gemm_comm_b(x);
  double gb = (double)(bm->param_bytes > 0 ? bm->param_bytes : PARAM_B);
  double act_tp = cb < gb ? act * cb / gb : act;
  c->tp_s = c->fsdp_s = c->dp_s = c->pp_s = c->cp_s = c->ep_s = 0;
  if (c->tp > 1) {
    /* Megatron: two all-reduces forward (attention, MLP), two backward,
     * two more when the forward runs again; sequence parallel: an
     * all-gather and a reduce-scatter in place of each */
    st = tp_train(x, c, M * (double)Ls, act_tp, t.block_gemm, n_tp, d);
    if (st == SC_OK) st = tp_outside(x, c, M, act, n_tp, d);
    if (st == SC_OK && c->expert_tensor_parallel)
      st = tp_experts(x, c, M, Ls, act_tp, cb < gb ? cb / gb : 1, n_tp, d);
    if (st != SC_OK) return st;
  }
  /* the count of each kind of collective, as the compiled step groups
   * them per block (stage_collectives): their latencies */
  double per_block = stage_collectives(x, c, Ls, SC_SEARCH_GROUP_BLOCK);
  double pbytes = e_stage * PARAM_B;
  /* the last microbatch's backward, with its recompute and its weight
   * gradients' epilogues: what a step without a pipeline hides its
   * gradient reductions behind (behind_backward) */
  double bwd_hide = bwd + re + (e_pass - e_cast);
  double e_split = stage_split_params(bm, c, Ls);
  double lbytes = e_split * cb + (e_stage - e_split) * PARAM_B; /* GEMM weights in cb */
  /* the gradients' reductions over the data axes: all in fp32 after
   * their cast back, or under --reduce-dtype bf16 the GEMM weights' in cb
   * (plain dp), and under fsdp every gradient's reduce-scatter and the
   * shard's reductions over the other data axes in cb (cast before, the
   * shard cast back to fp32 after: localize.c's reshard); rsize an
   * element's bytes there */
  bool all_low = x->o->reduce_low && c->fsdp > 1;
  double rbytes = all_low ? e_stage * cb : x->o->reduce_low ? lbytes : pbytes;
  double rsize = all_low ? cb : PARAM_B;
  if (c->fsdp > 1) {
    /* ZeRO-3 gathers the parameters for every microbatch and
     * reduce-scatters their gradients; so does every stage of a pipeline
     * (each microbatch's backward piece reduces its gradients); ZeRO-1/2
     * without one reduce-scatter the gradients and gather the updated
     * parameters once a step */
    double times, fwd_gathers, bwd_gathers;
    stage_gathers(x, c, Ls, &fwd_gathers, &bwd_gathers, &times);
    /* ZeRO-3 (Rajbhandari et al. 2020, section 7.2.3) frees the gathered
     * parameters after their forward use and gathers them again for the
     * backward: 3 psi a step against ZeRO-1/2's 2 psi; a bf16 step
     * gathers a block's GEMM weights and its fp32 rest apart (two
     * latencies a block) */
    /* under fsdp x ep the rest's gathers and reduce-scatters run over
     * fsdp and ep at once (ep at stride tp, fsdp at tp ep: cp is 1 beside
     * ep), the experts' over fsdp, a bucket a block of each */
    bool both = rest_storage(c) > (double)c->fsdp;
    double xbytes = both ? e_exp * PARAM_B : 0, xred = both ? e_exp * rsize : 0;
    /* the experts' reduce-scatters (a bucket a block) and gathers */
    double xops = xbytes > 0 ? (double)Ls : 0, xg = expert_gathers(x, c, Ls);
    int64_t gr = both ? c->fsdp * ep : c->fsdp, n_gr = both ? span(c->tp, gr, P) : n_fs;
    double ag = 0, ag_bwd = 0;
    st = coll(x, SC_COLL_ALL_GATHER, times * (lbytes - xbytes), gr, n_gr,
              times * (fwd_gathers - xg), &ag, d);
    if (st == SC_OK)
      st = coll(x, SC_COLL_ALL_GATHER, times * xbytes, c->fsdp, n_fs, times * xg, &ag, d);
    if (st == SC_OK && bwd_gathers > 0) {
      /* the backward's gathers, block by block, the next prefetched while
       * the current one's backward computes: exposed is what exceeds a
       * microbatch's backward compute; the blocks' parameters only */
      double o_e = (double)bm->outside.params / (double)c->tp,
             o_split = (double)bm->outside.split_params / (double)c->tp;
      double bbytes = (e_split - o_split) * cb + (e_stage - o_e - (e_split - o_split)) * PARAM_B;
      st = coll(x, SC_COLL_ALL_GATHER, times * (bbytes - xbytes), gr, n_gr,
                times * (bwd_gathers - xg), &ag_bwd, d);
      if (st == SC_OK)
        st = coll(x, SC_COLL_ALL_GATHER, times * xbytes, c->fsdp, n_fs, times * xg, &ag_bwd, d);
      ag_bwd = ag_bwd / times > bwd ? times * (ag_bwd / times - bwd) : 0;
    }
    ag += ag_bwd;
    c->fsdp_s += ag;
    double rs = 0, rs_ops = times * (per_block + tied_scatters(x, c));
    if (st == SC_OK)
      st = coll(x, SC_COLL_REDUCE_SCATTER, times * (rbytes - xred), gr, n_gr, rs_ops, &rs, d);
    /* ZeRO-1 and 2 without a pipeline reduce-scatter once a step, behind
     * the last microbatch's backward (behind_backward); ZeRO-3's share
     * its queue with the backward's gathers and count whole (the
     * GPT-175B shape at dp=8, fsdp=16, tp=8, h100-sxm:8x128: 3.40 s of
     * its fsdp queue's 3.68 s exposed, simulated) */
    c->fsdp_s += behind_backward(c, rs, bwd_hide, rs_ops);
    if (st == SC_OK)
      st = coll(x, SC_COLL_REDUCE_SCATTER, times * xred, c->fsdp, n_fs, times * xops, &c->fsdp_s,
                d);
    if (st != SC_OK) return st;
  }
  /* ep is a data axis for every parameter but the experts (ep.c): their
   * gradients are reduced over dp and ep together (under fsdp x ep
   * without a pipeline the reduce-scatter above took ep: their shard over
   * dp alone), the experts' (each rank's E/ep, computed from every ep
   * rank's tokens) over dp alone */
  double ebytes = e_exp * rsize;
  if (ep > 1) {
    double times = c->pp > 1 && c->fsdp > 1 ? M : 1;
    double bytes = (rbytes - ebytes) / rest_storage(c);
    double ops = c->fsdp > 1 ? per_block : stage_collectives(x, c, Ls, SC_SEARCH_GROUP_DDP);
    bool stored = rest_storage(c) > (double)c->fsdp; /* ep in the storage group */
    /* the group: ep's ranks at stride tp and dp's at stride tp ep cp fsdp
     * (the exact step names it by its first axis: dp's, or ep's alone) */
    st = coll(x, SC_COLL_ALL_REDUCE, times * bytes, c->dp * (stored ? 1 : ep),
              stored ? n_dp : n_dp * n_ep, times * ops, c->dp > 1 ? &c->dp_s : &c->ep_s, d);
    if (st == SC_OK && c->dp > 1)
      st = coll(x, SC_COLL_ALL_REDUCE, times * ebytes / (double)(c->fsdp > 1 ? c->fsdp : 1),
                c->dp, n_dp, times * (double)Ls, &c->dp_s, d);
    /* the all-to-alls: per MoE layer and microbatch the forward's (the
     * tokens to their experts, their outputs back), as many in the
     * backward (the gradients' way back), and the forward's again under
     * full recompute, each of the rank's whole buffer [mbs, E, C, D]
     * (sc_cost_collective sends (ep - 1)/ep of it: docs/moe.md, "The
     * all-to-all bytes"), in the GEMM dtype (the dispatch is a product) */
    const sc_block_part *ou = &bm->outside;
    double n_a2a = (double)Ls * b->a2a_count + ou->a2a_count;
    double a2a = (double)Ls * b->a2a_bytes + ou->a2a_bytes;
    double passes = 2 + (c->recompute == SC_SEARCH_RECOMPUTE_FULL ? 1 : 0);
    double buf = rank_mbs(x, c) * (cb < gb ? a2a * cb / gb : a2a);
    if (st == SC_OK)
      st = coll(x, SC_COLL_ALL_TO_ALL, M * passes * buf, ep, n_ep, M * passes * n_a2a,
                &c->ep_s, d);
    if (st != SC_OK) return st;
  } else if (c->dp > 1) {
    /* the gradients (their fsdp shard under hybrid sharding), once a
     * step: a pipeline stage accumulates them pending over dp and reduces
     * the sum once (docs/training.md); under hybrid sharding its backward
     * piece reduce-scatters them every microbatch and the shard's dp
     * all-reduce follows each (plan --train, gpt_1p5b pp=2: pp=2,dp=8
     * sends 6.03 GB a step at M=2 and at M=8; pp=2,dp=2,fsdp=4 15.4 and
     * 51.6 GB) */
    double times = c->pp > 1 && c->fsdp > 1 ? M : 1;
    /* under hybrid sharding the shard the reduce-scatter made, in its
     * dtype (rbytes: fp32 unless --reduce-dtype bf16; the Megatron 16B
     * shape at dp=24, fsdp=2, tp=4 ZeRO-3 sp in fp32: 8.48 GB a step
     * all-reduced over dp, the shard's 2.0 G elements at 4 B;
     * counted in the GEMM dtype the estimate had 0.165 s of dp against
     * 0.361 exposed, and --auto chose that plan over the published one,
     * 1.111 s exact against 1.001; plan --train, 2026-12-05) */
    double bytes = rbytes / (double)(c->fsdp > 1 ? c->fsdp : 1);
    /* under hybrid sharding each all-reduce rides its block's
     * reduce-scatter; alone, DDP's buckets */
    double ops = c->fsdp > 1 ? per_block : stage_collectives(x, c, Ls, SC_SEARCH_GROUP_DDP);
    double ar = 0;
    st = coll(x, SC_COLL_ALL_REDUCE, times * bytes, c->dp, n_dp, times * ops, &ar, d);
    if (st != SC_OK) return st;
    c->dp_s += behind_backward(c, ar, bwd_hide, times * ops);
  }
  double ring = 0; /* cp's ring, every microbatch's on each stage */
  if (cp > 1) {
    /* the ring (docs/context-parallel.md, "Costs for the planner"): per
     * block and microbatch the forward passes each rank's keys and values
     * on cp - 1 times, the backward 2 cp - 1 times (their gradients one
     * hop further), as 2 (cp - 1) and 4 (cp - 1) + 2 sends of a block of
     * kv_bytes / cp an example (in the GEMM dtype, as tp's values), the
     * forward again under full recompute; each hop is a send to the next
     * rank and a receive from the previous at once, inter-node when the
     * cp group spans nodes; not overlapped with the blocks' compute */
    double kv = rank_mbs(x, c) * (cb < gb ? bm->kv_bytes * cb / gb : bm->kv_bytes);
    double fwd_hops = (double)(cp - 1) * (c->recompute == SC_SEARCH_RECOMPUTE_FULL ? 2 : 1);
    double hops = fwd_hops + (double)(2 * cp - 1);
    double sends = 2 * fwd_hops + 4 * (double)(cp - 1) + 2;
    st = coll(x, SC_COLL_SEND, M * (double)Ls * hops * kv, 2, n_cp > 1 ? 2 : 1,
              M * (double)Ls * sends, &ring, d);
    c->cp_s += ring;
    /* every cp rank holds a partial gradient of every weight from its
     * tokens: reduced over cp as over dp (their shard under fsdp), once a
     * step */
    double gbytes = rbytes / (double)(c->fsdp > 1 ? c->fsdp : 1);
    double ops = c->fsdp > 1 ? per_block : stage_collectives(x, c, Ls, SC_SEARCH_GROUP_DDP);
    if (st == SC_OK) st = coll(x, SC_COLL_ALL_REDUCE, gbytes, cp, n_cp, ops, &c->cp_s, d);
    if (st != SC_OK) return st;
  }
  double chain_sends = 0; /* the hand-offs of a slot of the bubble's chain */
  if (c->pp > 1) {
    /* a hand-off is the residual stream, split by tp under sequence
     * parallelism (the pieces hand on their shard), sent on the
     * point-to-point queue while the sender goes on: the receiver waits
     * for its first one whole, and for each of the others (two a
     * microbatch and chunk) what the piece it runs meanwhile, about a
     * chunk's forward, does not hide; the fill's and drain's transfers,
     * two a chunk a slot, are the bubble's. Until 2026-12-06 every
     * hand-off counted exposed whole, of the stream whole: the H100 462B
     * (pp=16, tp=8 sp, M=64) 0.77 s of pp estimated against 0.001 s
     * simulated (its hand-offs 37.7 MB, not 302) */
    double hand = c->sequence_parallel ? act / (double)c->tp : act, one = 0;
    st = coll(x, SC_COLL_SEND, hand, 2, n_pp > 1 ? 2 : 1, 1, &one, d);
    double hide = fwd / V, wait = one > hide ? one - hide : 0;
    c->pp_s = one + (2 * M * V - 1) * wait;
    chain_sends = 2 * V * one;
    if (st != SC_OK) return st;
  }
  /* each slot of the bubble's chain has its communication too (tp's, and
   * the per-microbatch gathers, reductions of a pipeline stage, cp's ring,
   * the slot's hand-offs): the neighbour waits for all of it (the
   * Megatron 145B at pp=12 fsdp=16 ZeRO-3: 27.1 s of bubble simulated,
   * 0.6 s estimated from compute alone; docs/planner.md, "The estimate") */
  if (c->pp > 1) {
    double per_mb_comm =
        (c->tp_s + c->fsdp_s + c->ep_s + ring + (c->fsdp > 1 ? c->dp_s : 0)) / M + chain_sends;
    c->bubble_s += slots * per_mb_comm;
  }
  c->offload_s = 0;
  c->host_bytes = 0;
  if (c->offload_activations) {
    /* every block's kept values go to the host pool during the forward
     * and come back during the backward, over the host link, on the copy
     * queue beside the compute: what each pass's compute does not hide */
    double all, keep;
    block_values(x, c, &all, &keep);
    double mbs = rank_mbs(x, c);
    /* the critical rank's: a pipeline's last stage, its blocks' stash */
    double bytes = M * (double)Ls * keep * mbs;
    if (c->recompute != SC_SEARCH_RECOMPUTE_FULL) /* the LM head's and loss's values too */
      bytes += M * outside_saved(x, c) * (c->pp > 1 ? SAVED_HEAD_PIPE : 1) * mbs /
               vocab_split(bm, c);
    double copy = bytes / x->c->host_link_bytes_per_s;
    double fwd_s = M * fwd, bwd_s = M * (bwd + re);
    c->offload_s = (copy > fwd_s ? copy - fwd_s : 0) + (copy > bwd_s ? copy - bwd_s : 0);
    c->host_bytes = (int64_t)bytes;
  }
  c->step_s = c->compute_s + c->recompute_s + c->optimizer_s + c->bubble_s + c->tp_s +
              c->fsdp_s + c->dp_s + c->pp_s + c->cp_s + c->ep_s + c->offload_s;
  c->objective_s = c->step_s;
  return SC_OK;
}

/* What the inference objective compares for a time t of one step of c:
 * the step (latency), or the seconds per batch served (throughput: the
 * dp replicas serve dp batches a step). */
static double infer_objective(const ctx *x, const sc_search_cand *c, double t) {
  return x->o->goal == SC_SEARCH_THROUGHPUT ? t / (double)c->dp : t;
}

/* The inference estimate (search.h): the forward of every microbatch on
 * the critical (last) stage, the pipeline's fill, tp's collectives and
 * the pipeline's sends; the lower bound is compute and fill. */
static sc_status infer_estimate(const ctx *x, sc_search_cand *c, double cutoff, bool *cut,
                                sc_diag *d) {
  const sc_block_model *bm = x->bm;
  int64_t Ls = (bm->n_blocks + c->pp - 1) / c->pp, P = x->c->devices_per_node;
  double M = c->microbatches;
  *cut = false;
  mb_times t;
  sc_status st = block_times(x, c, &t, d);
  if (st != SC_OK) return st;
  double fwd = (double)Ls * t.block_fwd + t.outside_fwd;
  c->compute_s = M * fwd;
  c->recompute_s = c->optimizer_s = 0;
  /* GPipe forward only: the last stage's first microbatch arrives after
   * pp - 1 stages' forwards */
  c->bubble_s = c->pp > 1 ? (double)(c->pp - 1) * fwd : 0;
  double bound = c->compute_s + c->bubble_s;
  if (infer_objective(x, c, bound) >= cutoff) {
    *cut = true;
    return SC_OK;
  }
  /* sc_search_mesh's order: tp (stride 1), ep (tp), cp (tp ep), dp (tp
   * ep cp), pp (tp ep cp dp) */
  int64_t cp = c->cp > 1 ? c->cp : 1, ep = ep_of(c), te = c->tp * ep;
  int64_t n_tp = span(1, c->tp, P), n_ep = span(c->tp, ep, P), n_cp = span(te, cp, P),
          n_dp = span(te * cp, c->dp, P), n_pp = span(te * cp * c->dp, c->pp, P);
  double act = rank_mbs(x, c) * bm->block.input_bytes; /* one [mbs, seq / cp, hidden] */
  /* the logits of a microbatch on a rank: [mbs, seq / cp, vocab] in the
   * graph's dtype */
  double logits = rank_mbs(x, c) * (double)bm->seq * (double)bm->vocab * (double)bm->param_bytes;
  c->tp_s = c->fsdp_s = c->dp_s = c->pp_s = c->cp_s = c->ep_s = 0;
  if (c->tp > 1) {
    /* Megatron's forward: two all-reduces a block (attention, MLP), or an
     * all-gather and a reduce-scatter in place of each; the
     * vocabulary-parallel embedding's all-reduce (on the first stage) and
     * the LM head's all-gather of the logits */
    double ops = M * (double)Ls * 2;
    if (c->pp == 1 && vocab_parallel(bm, c))
      st = coll(x, SC_COLL_ALL_REDUCE, M * act, c->tp, n_tp, M, &c->tp_s, d);
    if (st == SC_OK && vocab_parallel(bm, c))
      st = coll(x, SC_COLL_ALL_GATHER, M * logits, c->tp, n_tp, M, &c->tp_s, d);
    if (st == SC_OK) st = tp_blocks(x, c, ops, act, n_tp, d);
    if (st != SC_OK) return st;
  }
  if (c->dp > 1) {
    /* the outputs gathered over the replicas, per microbatch */
    st = coll(x, SC_COLL_ALL_GATHER, M * logits * (double)c->dp, c->dp, n_dp, M, &c->dp_s, d);
    if (st != SC_OK) return st;
  }
  if (cp > 1) {
    /* the forward's ring (docs/context-parallel.md, "Costs for the
     * planner"): per block and microbatch each rank's keys and values
     * passed on cp - 1 times, 2 (cp - 1) sends of kv_bytes / cp an
     * example; then the logits' sequence gathered over cp */
    double kv = rank_mbs(x, c) * bm->kv_bytes;
    st = coll(x, SC_COLL_SEND, M * (double)Ls * (double)(cp - 1) * kv, 2, n_cp > 1 ? 2 : 1,
              M * (double)Ls * 2 * (double)(cp - 1), &c->cp_s, d);
    if (st == SC_OK)
      st = coll(x, SC_COLL_ALL_GATHER, M * logits * (double)cp, cp, n_cp, M, &c->cp_s, d);
    if (st != SC_OK) return st;
  }
  if (ep > 1) {
    /* ep's forward all-to-alls per MoE layer and microbatch (the tokens to
     * their experts, their outputs back), each of the rank's whole buffer */
    const sc_block_part *b = &bm->block, *ou = &bm->outside;
    double n_a2a = (double)Ls * b->a2a_count + ou->a2a_count;
    double buf = rank_mbs(x, c) * ((double)Ls * b->a2a_bytes + ou->a2a_bytes);
    st = coll(x, SC_COLL_ALL_TO_ALL, M * buf, ep, n_ep, M * n_a2a, &c->ep_s, d);
    if (st != SC_OK) return st;
  }
  if (c->pp > 1) {
    /* the last stage receives each microbatch's activation once */
    st = coll(x, SC_COLL_SEND, M * act, 2, n_pp > 1 ? 2 : 1, M, &c->pp_s, d);
    if (st != SC_OK) return st;
  }
  c->step_s = bound + c->tp_s + c->dp_s + c->pp_s + c->cp_s + c->ep_s;
  c->objective_s = infer_objective(x, c, c->step_s);
  return SC_OK;
}

/* The activation scale of c's kind (search.h: activation_scale,
 * activation_scale_pipe, activation_scales). */
static double act_scale(const ctx *x, const sc_search_cand *c) {
  double scale = c->pp > 1 ? x->o->activation_scale_pipe : x->o->activation_scale;
  if (scale <= 0) scale = 1;
  double kind = x->o->activation_scales[3 * (c->pp > 1) + (int)c->recompute];
  if (kind > 0) scale *= kind;
  return scale;
}

/* The part of a low value's f32 bytes a training step in the search's
 * dtype does not keep: half in bf16 or fp16 (the block model counts the
 * values such a step computes low, sc_block_part.low_saved_bytes), none in
 * fp32. */
static double low_fraction(const ctx *x) {
  return x->o->dtype == SC_CLUSTER_FP32 || x->o->dtype == SC_CLUSTER_TF32 ? 0.0 : 0.5;
}

/* The LM head's and loss's kept values an example, at the step's
 * precision; the loss's as c's step compiles it (block_model.h: the
 * decomposed form under tensor parallelism, else the fused one). */
static double outside_saved(const ctx *x, const sc_search_cand *c) {
  const sc_block_model *bm = x->bm;
  const sc_block_part *o = &bm->outside;
  double loss = c->tp > 1 || bm->loss_split ? bm->loss_split_saved_bytes : bm->loss_saved_bytes;
  return o->saved_bytes - low_fraction(x) * o->low_saved_bytes + loss;
}

/* Per block and example on one tp rank: every value of the block (*all:
 * the residual stream's whole unless sequence parallel) and the part of
 * them the backward keeps (*keep) for c's recompute, in a pipeline's stash
 * or one program's arena. */
static void block_values(const ctx *x, const sc_search_cand *c, double *all, double *keep) {
  const sc_block_part *b = &x->bm->block;
  double tp = (double)c->tp;
  /* at the step's precision (a bf16 or fp16 step keeps its low values at
   * half the bytes) */
  double lo = low_fraction(x);
  double whole = b->whole_saved_bytes - lo * b->whole_low_saved_bytes;
  double split = b->saved_bytes - b->whole_saved_bytes -
                 lo * (b->low_saved_bytes - b->whole_low_saved_bytes);
  /* a pipeline's stash keeps the stream whole under sequence parallelism
   * too, and more (SAVED_PIPE_SP_TP), where the attention core is unfused;
   * a fused core's stash splits with the stream as the one program's does
   * (docs/planner.md, "The estimate") */
  bool fused = x->bm->attn_fused;
  bool sp = c->sequence_parallel && (c->pp == 1 || fused);
  *all = sp ? (whole + split) / tp : whole + split / tp;
  double k = *all;
  if (c->recompute == SC_SEARCH_RECOMPUTE_SELECTIVE)
    k -= (b->attn_saved_bytes - lo * b->attn_low_saved_bytes) / tp;
  if (c->recompute == SC_SEARCH_RECOMPUTE_FULL && c->pp > 1) /* the stash: whole, not split by tp */
    k = b->input_bytes * (c->sequence_parallel ? SAVED_FULL_PIPE_SP : SAVED_FULL_PIPE);
  else if (c->recompute == SC_SEARCH_RECOMPUTE_FULL)
    k = c->sequence_parallel ? b->input_bytes / tp : b->input_bytes;
  else if (c->pp > 1) /* sequence parallelism adds copies to an unfused core's stash */
    k *= SAVED_PIPE * (c->sequence_parallel && !fused ? 1 + SAVED_PIPE_SP_TP * (tp - 1) : 1);
  else
    k *= SAVED_ONE;
  *keep = k;
}

/* Microbatches of a stage's blocks whose values pipeline rank q keeps at
 * once (GPipe M, 1F1B min(pp - q, M), interleaved Megatron's warm-up
 * chunks over V); M without a pipeline. zb-h1 runs rank q's weight pieces
 * up to q microbatches late (codegen/pipe_schedule.h), each keeping what
 * it reads: min(pp, M) on every rank (the Megatron 18B at pp=8: rank 6
 * keeps 39 GB against rank 0's 68.5, not 2/8 of it); under full recompute
 * there are no weight pieces: 1F1B's. */
static double in_flight_of(const sc_search_cand *c, int64_t q) {
  if (c->pp == 1 || strcmp(c->schedule, "gpipe") == 0) return c->microbatches;
  if (strcmp(c->schedule, "zb-h1") == 0 && c->recompute != SC_SEARCH_RECOMPUTE_FULL)
    q = 0;
  if (strcmp(c->schedule, "interleaved") == 0) {
    double V = c->virtual_stages, chunks = (double)((c->pp - q - 1) * 2 + (V - 1) * c->pp + 1);
    if (chunks > c->microbatches * V) chunks = c->microbatches * V;
    return chunks / V;
  }
  return (double)(c->pp - q) < c->microbatches ? (double)(c->pp - q) : c->microbatches;
}

/* Memory of the one program (no pipeline): the state, the update's
 * working memory, a gathered block and the next under ZeRO-3, the values
 * kept for the backward, the weights' casts, one block's working values
 * and the LM head's values, the activations times s. */
static double one_memory(const ctx *x, const sc_search_cand *c, double s) {
  const sc_block_model *bm = x->bm;
  int64_t L = bm->n_blocks;
  double mbs = rank_mbs(x, c), tp = (double)c->tp;
  double e = stage_params(bm, c, L);
  double mem = state_bytes(x, c, e, stage_expert_params(bm, c, L)) +
               e * (c->zero >= 3 ? WORK_ONE_Z3 : WORK_ONE);
  if (c->zero >= 3)
    mem += 2.0 * stage_params(bm, c, 1) * PARAM_B; /* a gathered block and the next, prefetched */
  double all, keep;
  block_values(x, c, &all, &keep);
  double M = c->microbatches;
  /* the GEMM weights' bf16 casts: every block's, kept for the backward;
   * under ZeRO-3 those of the gathered block and the next only (the step
   * casts each block's gathered weights and frees them with it: the
   * Megatron 7.5B at dp=16 fsdp=8 was estimated 92.6 GB against 35.2
   * exact, 29 GB of it the whole model's casts twice) */
  double cast_blocks = c->zero >= 3 ? 2.0 : (M + 1) * (double)L;
  if (x->o->dtype != SC_CLUSTER_FP32)
    mem += cast_blocks * (double)bm->block.split_params / tp * CAST_KEEP_B;
  /* offloading: the blocks the backward's copies back have reached */
  double kept_blocks = M * (double)L;
  if (c->offload_activations) {
    double resident =
        c->recompute == SC_SEARCH_RECOMPUTE_FULL ? OFFLOAD_RESIDENT_FULL : OFFLOAD_RESIDENT;
    if (resident < kept_blocks) kept_blocks = resident;
  }
  /* without full recompute every saved activation is offloaded, the LM
   * head's and the loss's too */
  double outside = M * outside_saved(x, c) * mbs / vocab_split(bm, c);
  if (c->offload_activations && c->recompute != SC_SEARCH_RECOMPUTE_FULL) outside = 0;
  double act = kept_blocks * keep * mbs + all * mbs + outside;
  return mem + act * s;
}

/* Memory of pipeline rank q of a pipelined plan, from the quantities the
 * exact count adds (tools/plan_train.c, docs/training.md "A pipeline
 * rank's memory"): its state, ONE arena shared by its pieces (the largest
 * piece's: they run in turn), and the most handed-over values it keeps at
 * once, the activations times s. The rank holds its stage's blocks (the
 * first and the last rank also the outside part: the embedding, the LM
 * head) in V chunks; for the chunk that holds the most:
 *   update piece: the chunk's state, copied into the arena, and
 *     PIPE_UPDATE_B an element;
 *   backward (and weight) piece: one microbatch's stash of the chunk, its
 *     gradient (PIPE_GRAD_B an element; PIPE_GRAD_Z12_B under ZeRO-1/2,
 *     which reduce-scatter it whole; PIPE_GRAD_B / fsdp under ZeRO-3), one
 *     block's values;
 *   forward piece: the chunk's parameters (their shard under ZeRO-3), its
 *     weights' casts in an fp32 step (the gathered weights under ZeRO-3),
 *     one microbatch's stash, one block's values;
 *   prepare piece (mixed precision): the chunk's parameters and their
 *     casts, made once a step.
 * Kept: the larger (they are not held together: the step's values are
 * made after the last backward) of the stash, the microbatches in flight
 * times the stage's kept values (the LM head's values on the last rank)
 * and the stage's weights' casts once (per microbatch in flight where the
 * forward hands them over: fp32 under ZeRO-3), and the step's values,
 * PIPE_STEP_B a parameter element (sharded with the gradient under
 * ZeRO-2/3). */
static double pipe_memory(const ctx *x, const sc_search_cand *c, int64_t q, double s) {
  const sc_block_model *bm = x->bm;
  const sc_block_part *b = &bm->block;
  int64_t Ls = (bm->n_blocks + c->pp - 1) / c->pp;
  int64_t V = c->virtual_stages > 1 ? c->virtual_stages : 1;
  int64_t Lc = (Ls + V - 1) / V; /* blocks of the largest chunk */
  double mbs = rank_mbs(x, c), tp = (double)c->tp;
  double f = c->fsdp > 1 ? (double)c->fsdp : 1;
  bool ends = q == 0 || q == c->pp - 1; /* holds the outside part */
  double out_e = ends ? (double)bm->outside.params / tp : 0;
  double out_split = ends ? (double)bm->outside.split_params / tp : 0;
  double blk_e = stage_params(bm, c, 1) - (double)bm->outside.params / tp;
  double blk_split = (double)b->split_params / tp;
  double e = (double)Ls * blk_e + out_e, e_c = (double)Lc * blk_e + out_e;
  /* the weights the backward reads from the forward: their casts (whole,
   * also under ZeRO-3: the gathered weights', made once a step), or the
   * gathered fp32 weights under ZeRO-3, handed over per microbatch */
  double wb = x->o->dtype != SC_CLUSTER_FP32 ? CAST_KEEP_B : c->zero >= 3 ? PARAM_B : 0;
  double casts = ((double)Ls * blk_split + out_split) * wb;
  double casts_c = ((double)Lc * blk_split + out_split) * wb;
  double all, keep;
  block_values(x, c, &all, &keep);
  double head = q == c->pp - 1 ? outside_saved(x, c) * SAVED_HEAD_PIPE * mbs /
                                     vocab_split(bm, c) : 0;
  double stash_mb = ((double)Ls * keep * mbs + head) * s;      /* the stage's, one microbatch */
  double stash_mb_c = ((double)Lc * keep * mbs + head) * s;    /* one chunk's */
  double work = all * mbs * s;                                 /* one block's values */
  /* pipelined: the rest stored over fsdp as the experts (rest_storage) */
  double state = state_bytes(x, c, e, stage_expert_params(bm, c, Ls)) + e * PIPE_STATE_EXTRA_B;
  double update = state_bytes(x, c, e_c, stage_expert_params(bm, c, Lc)) + e_c * PIPE_UPDATE_B;
  double grad_b = c->zero >= 3 ? PIPE_GRAD_B / f : c->zero >= 1 ? PIPE_GRAD_Z12_B : PIPE_GRAD_B;
  /* the casts are made once a step, in the prepare piece, and kept for
   * the step's forwards and backwards, outside the other pieces' arena */
  bool prep = x->o->dtype != SC_CLUSTER_FP32;
  double params_c = e_c * (c->zero >= 3 ? PARAM_B / f : PARAM_B);
  double backward = stash_mb_c + (prep ? 0 : casts_c) + e_c * grad_b + work;
  double forward = params_c + (prep ? 0 : casts_c) + stash_mb_c + work;
  double prepare = prep ? params_c + casts_c : 0;
  double arena = update > backward ? update : backward;
  if (forward > arena) arena = forward;
  if (prepare > arena) arena = prepare;
  double in_flight = in_flight_of(c, q);
  double stash = in_flight * (stash_mb + (prep ? 0 : casts)) + (prep ? casts : 0);
  if (c->offload_activations) {
    /* offloaded (the blocks' stash; without full recompute the LM head's
     * too): on the device only for the microbatches brought back */
    double off_mb = (double)Ls * keep * mbs * s +
                    (c->recompute != SC_SEARCH_RECOMPUTE_FULL ? head * s : 0);
    double resident = in_flight < OFFLOAD_RESIDENT_PIPE ? in_flight : OFFLOAD_RESIDENT_PIPE;
    stash -= (in_flight - resident) * off_mb;
  }
  double step = e * (c->zero >= 2 ? PIPE_STEP_B / f : PIPE_STEP_B);
  return state + arena + (stash > step ? stash : step);
}

/* Memory of pipeline rank q (the one program's when c has no pipeline);
 * *act_out: of which activations (what the activation scale multiplies:
 * the memory less its value at scale 0). */
static double rank_memory(const ctx *x, const sc_search_cand *c, int64_t q, double *act_out) {
  double s = act_scale(x, c);
  double m = c->pp > 1 ? pipe_memory(x, c, q, s) : one_memory(x, c, s);
  double fixed = c->pp > 1 ? pipe_memory(x, c, q, 0) : one_memory(x, c, 0);
  *act_out = m - fixed;
  return m + (double)x->o->arena_fixed_bytes;
}

/* Inference memory of the last pipeline rank (it holds the LM head): its
 * weights in the graph's dtype, one block's values for a microbatch
 * (every value of the block: what the forward's arena can hold at once)
 * and the LM head's. */
static void infer_memory(const ctx *x, sc_search_cand *c) {
  const sc_block_model *bm = x->bm;
  const sc_block_part *b = &bm->block;
  int64_t Ls = (bm->n_blocks + c->pp - 1) / c->pp;
  double mbs = rank_mbs(x, c), tp = (double)c->tp;
  double weights = stage_params(bm, c, Ls) * (double)bm->param_bytes;
  double whole = b->whole_saved_bytes, split = b->saved_bytes - b->whole_saved_bytes;
  double act = (c->sequence_parallel ? (whole + split) / tp : whole + split / tp) * mbs +
               bm->outside.saved_bytes * mbs / vocab_split(bm, c);
  double scale = act_scale(x, c);
  c->peak_activation_bytes = (int64_t)(act * scale);
  c->peak_bytes = (int64_t)(weights + act * scale) + x->o->arena_fixed_bytes;
  c->peak_pipe_rank = (int32_t)(c->pp - 1);
  c->fits = c->peak_bytes <= x->limit;
}

static void memory(const ctx *x, sc_search_cand *c) {
  if (c->inference) {
    infer_memory(x, c);
    return;
  }
  c->peak_bytes = 0;
  c->peak_pipe_rank = 0;
  int64_t qs[2] = {0, c->pp - 1};
  for (int i = 0; i < (c->pp > 1 ? 2 : 1); i++) {
    double act;
    double m = rank_memory(x, c, qs[i], &act);
    if ((int64_t)m > c->peak_bytes) {
      c->peak_bytes = (int64_t)m;
      c->peak_activation_bytes = (int64_t)act;
      c->peak_pipe_rank = (int32_t)qs[i];
    }
  }
  c->fits = c->peak_bytes <= x->limit;
}

static void finish(const ctx *x, sc_search_cand *c, double model_flops) {
  if (c->inference) /* the forward of the examples the step serves */
    model_flops = sc_block_model_flops(x->bm) * (double)c->batch;
  double peak = x->c->peak_flops[x->o->dtype];
  int64_t N = ranks_of(c);
  c->mfu = c->step_s > 0 && peak > 0 ? model_flops / (c->step_s * (double)N * peak) : 0;
}

sc_status sc_search_estimate(const sc_block_model *bm, const sc_search_opts *o,
                             sc_search_cand *c, sc_diag *d) {
  ctx x;
  init_ctx(&x, bm, o);
  bool cut;
  sc_status st = estimate(&x, c, INFINITY, &cut, d);
  if (st != SC_OK) return st;
  memory(&x, c);
  finish(&x, c, 3.0 * sc_block_model_flops(bm) * (double)o->global_batch);
  return SC_OK;
}

int64_t sc_search_rank_memory(const sc_block_model *bm, const sc_search_opts *o,
                              const sc_search_cand *c, int64_t q, int64_t *activation_bytes) {
  ctx x;
  init_ctx(&x, bm, o);
  double act;
  double m = rank_memory(&x, c, q, &act);
  *activation_bytes = (int64_t)act;
  return (int64_t)m;
}

/* Faster first; at the same time, the smaller memory (more headroom). */
static bool before(const sc_search_cand *a, const sc_search_cand *b) {
  return a->objective_s < b->objective_s ||
         (a->objective_s == b->objective_s && a->peak_bytes < b->peak_bytes);
}

/* Inserts c into list (n of it kept, SC_SEARCH_TOP at most), best first. */
static void keep_best(sc_search_cand *list, int32_t *n, const sc_search_cand *c) {
  int32_t i = *n;
  if (i == SC_SEARCH_TOP) {
    if (!before(c, &list[i - 1])) return;
    i--;
  } else {
    (*n)++;
  }
  while (i > 0 && before(c, &list[i - 1])) {
    list[i] = list[i - 1];
    i--;
  }
  list[i] = *c;
}

static void keep_top(sc_search_result *r, const sc_search_cand *c) {
  keep_best(r->top, &r->n_top, c);
}

static double cutoff_of(const sc_search_result *r) {
  return r->n_top == SC_SEARCH_TOP ? r->top[SC_SEARCH_TOP - 1].objective_s : INFINITY;
}

/* One candidate c (its strategy set): over the memory, into the list of
 * those over and the closest; else estimated against the 10th best (the
 * bound may cut it) and kept when among the best. */
static sc_status consider(const ctx *x, sc_search_cand *c, sc_search_result *r, sc_diag *d) {
  memory(x, c);
  bool cut;
  if (!c->fits) {
    r->evaluated++;
    sc_status st = estimate(x, c, INFINITY, &cut, d);
    if (st != SC_OK) return st;
    finish(x, c, r->model_flops);
    keep_best(r->over, &r->n_over, c);
    /* near: over by at most the estimate's margin (search.h) */
    if (x->o->near_margin > 0 &&
        (double)c->peak_bytes <= (double)x->limit * (1 + x->o->near_margin))
      keep_best(r->near, &r->n_near, c);
    if (!r->have_closest || c->peak_bytes < r->closest.peak_bytes) {
      r->closest = *c;
      r->have_closest = true;
    }
    return SC_OK;
  }
  sc_status st = estimate(x, c, cutoff_of(r), &cut, d);
  if (st != SC_OK) return st;
  if (cut) {
    r->pruned_bound++;
    return SC_OK;
  }
  r->evaluated++;
  finish(x, c, r->model_flops);
  keep_top(r, c);
  int k = c->pp > 1;
  if (!r->have_kind_best[k] || before(c, &r->kind_best[k])) {
    r->kind_best[k] = *c;
    r->have_kind_best[k] = true;
  }
  return SC_OK;
}

/* c (a plan whose state alone is over the memory, in its least-memory
 * form) as the closest when it is less over than the closest so far. */
static sc_status closest(const ctx *x, sc_search_cand *c, sc_search_result *r, sc_diag *d) {
  memory(x, c);
  if (r->have_closest && c->peak_bytes >= r->closest.peak_bytes) return SC_OK;
  bool cut;
  sc_status st = estimate(x, c, INFINITY, &cut, d);
  if (st != SC_OK) return st;
  finish(x, c, r->model_flops);
  r->closest = *c;
  r->have_closest = true;
  return SC_OK;
}

static const char *const SCHEDULES[] = {"gpipe", "1f1b", "zb-h1", "interleaved"};

/* Every microbatch count, schedule and recompute of one mesh and ZeRO
 * choice. */
static sc_status search_mesh(const ctx *x, sc_search_cand base, int64_t batch,
                             sc_search_result *r, sc_diag *d) {
  int64_t L = x->bm->n_blocks;
  for (int64_t M = 1; M <= batch; M++) {
    if (batch % M) {
      if (base.pp > 1) r->pruned_microbatch++;
      continue;
    }
    if (base.pp == 1 && M > 1) break; /* microbatches pipeline stages */
    if (base.cp > 1 && (batch / M) % base.cp == 0) {
      /* a micro-batch cp divides: the mesh with cp's ranks given to dp
       * runs the same tokens a rank in the same microbatches without the
       * ring (estimated no slower, in the same memory) */
      r->pruned_cp++;
      continue;
    }
    /* one microbatch: every schedule is GPipe's (one forward, one backward) */
    for (int s = 0; s < (base.pp > 1 && M > 1 ? 4 : 1); s++) {
      int32_t vmax = 1;
      if (s == 3) {
        if (M % base.pp) {
          r->pruned_microbatch++;
          continue;
        }
        vmax = (int32_t)(L / base.pp);
      }
      for (int32_t V = s == 3 ? 2 : 1; V <= vmax; V *= 2) {
        for (int k = 0; k < 3; k++) {
          sc_search_cand c = base;
          c.schedule = base.pp > 1 ? SCHEDULES[s] : "gpipe";
          c.virtual_stages = V;
          c.microbatches = (int32_t)M;
          c.micro_batch_size = batch / M;
          c.recompute = (sc_search_recompute)k;
          c.offload_activations = false;
          sc_status st = consider(x, &c, r, d);
          if (st != SC_OK) return st;
          /* over the memory: the same plan with its activations offloaded
           * (pipelined or not; not under selective recompute, whose
           * offloading moves only the values its recomputed cores read,
           * which the block model does not separate: gpt2 at batch 256
           * kept 142.5 MiB with it, 84.4 without recompute) */
          if (!c.fits && x->c->host_link_bytes_per_s > 0 &&
              c.recompute != SC_SEARCH_RECOMPUTE_SELECTIVE) {
            c.offload_activations = true;
            st = consider(x, &c, r, d);
            if (st != SC_OK) return st;
          }
        }
      }
    }
  }
  return SC_OK;
}

/* Whether tp leaves a block's GEMM weight whole: the dim it splits (n of
 * a column-parallel product, k of a row-parallel one, which writes the
 * hidden size: block_gemms' rule) does not divide by tp, so tp.c keeps
 * the weight whole and every tp rank computes its product whole (a
 * fallback, plan's "fallbacks"), which the estimate would count split. */
static bool tp_splits_unevenly(const sc_block_model *bm, int64_t tp) {
  const sc_block_part *b = &bm->block;
  for (int32_t i = 0; i < b->n_gemms; i++) {
    const sc_block_gemm *e = &b->gemms[i];
    int64_t dim = e->n == bm->hidden ? e->k : e->n;
    if (e->weight && dim > 0 && dim % tp) return true;
  }
  return false;
}

/* Whether tp is left out (counted): it does not divide the heads, or a
 * dim it splits of a block's GEMM weight (tp_splits_unevenly), or it
 * leaves a node in the first pass; the second pass (tp_anywhere) takes
 * only what the first left out. */
static bool tp_skipped(const ctx *x, int64_t tp, bool tp_anywhere, sc_search_result *r) {
  const sc_block_model *bm = x->bm;
  int64_t P = x->c->devices_per_node;
  if (bm->heads > 0 ? bm->heads % tp : (bm->hidden > 0 && bm->hidden % tp)) {
    r->pruned_heads++;
    return true;
  }
  if (tp_splits_unevenly(bm, tp)) {
    r->pruned_split++;
    return true;
  }
  if (!tp_anywhere && tp > P) {
    r->pruned_node++;
    return true;
  }
  return tp_anywhere && tp <= P;
}

/* Whether cp (> 1) is left out (counted): the sequence does not divide
 * into 2 cp chunks (sc_cp_check_sequence's rule) and cp does not pad it
 * (cp_pads), the model has no fused attention to run as a ring, or it has
 * experts. Beside a pipeline and tp's sequence parallelism (its split
 * nested inside cp's), for training and inference alike. */
static bool cp_skipped(const ctx *x, int64_t cp, sc_search_result *r) {
  if (cp == 1) return false;
  /* a model with experts: their capacity dispatch scans the tokens
   * (CumSum), which cp.c refuses in its zig-zag order */
  bool experts = x->bm->block.experts >= 2 || x->bm->outside.experts >= 2;
  bool splits = x->bm->seq % (2 * cp) == 0 || cp_pads(x, cp);
  if (x->bm->kv_bytes <= 0 || !splits || experts) {
    r->pruned_cp++;
    return true;
  }
  return false;
}

/* Whether ep (> 1) is left out: the model's blocks have no experts (no
 * candidate then, not counted: a dense model has no ep), ep does not
 * divide their count E (ep.c refuses it), or beside cp (cp.c refuses a
 * model whose capacity dispatch scans the tokens: cp_skipped leaves cp
 * out on a model with experts first). */
static bool ep_skipped(const ctx *x, int64_t ep, int64_t cp, sc_search_result *r) {
  if (ep == 1) return false;
  int64_t e = x->bm->block.experts;
  if (e < 2) return true;
  if (e % ep || cp > 1) {
    r->pruned_ep++;
    return true;
  }
  return false;
}

/* Every data-parallel split (dp x fsdp, ZeRO, sequence parallelism) of
 * the mesh of tp, pp, cp and ep: the ranks left, dp x fsdp, split the
 * batch with ep (a data axis). */
static sc_status search_data(const ctx *x, int64_t tp, int64_t pp, int64_t cp, int64_t ep,
                             sc_search_result *r, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  int64_t N = sc_cluster_devices(x->c), P = x->c->devices_per_node, B = x->o->global_batch;
  int64_t dd = N / tp / pp / cp / ep, te = tp * ep;
  for (int64_t fsdp = 1; fsdp <= dd; fsdp++) {
    if (dd % fsdp) continue;
    int64_t dp = dd / fsdp, data = dd * ep;
    if (B % data) {
      r->pruned_batch++;
      if (!r->batch_parts || data < r->batch_parts) r->batch_parts = data;
      continue;
    }
    if (!span(1, tp, P) || !span(tp, ep, P) || !span(te, cp, P) || !span(te * cp, fsdp, P) ||
        !span(te * cp * fsdp, dp, P) || !span(te * cp * fsdp * dp, pp, P)) {
      r->pruned_node++;
      continue;
    }
    if (fsdp > 1 && bm->hidden > 0 && bm->hidden % fsdp) {
      /* the partitioner shards a parameter on its first dim that fsdp
       * divides (passes/partition/train_seed.c) and keeps it whole
       * when none does (a fallback): with fsdp not dividing the hidden
       * size the blocks' weights stay whole, a dp mesh by another
       * name whose estimate would count shards and gathers it has not */
      r->pruned_fsdp++;
      continue;
    }
    /* expert tensor parallelism where tp divides the experts' hidden size
     * (ep.c refuses the rest) */
    int64_t f = bm->block.expert_hidden;
    int n_etp = tp > 1 && bm->block.experts >= 2 && f > 0 && f % tp == 0 ? 2 : 1;
    for (int32_t zero = fsdp > 1 ? 1 : 0; zero <= (fsdp > 1 ? 3 : 0); zero++) {
      for (int k = 0; k < (tp > 1 ? 2 : 1) * n_etp; k++) {
        int sp = k % 2;
        sc_search_cand base = {.dp = dp, .fsdp = fsdp, .tp = tp, .pp = pp, .cp = cp, .ep = ep,
                               .zero = zero, .sequence_parallel = sp == 1,
                               .expert_tensor_parallel = k >= 2, .batch = B,
                               .hybrid_shard_degree = dp > 1 && fsdp > 1 ? fsdp : 0};
        /* the training state alone, at the largest stage */
        base.micro_batch_size = 0;
        int64_t blocks = (bm->n_blocks + pp - 1) / pp;
        double e = stage_params(bm, &base, blocks);
        if (state_bytes(x, &base, e, stage_expert_params(bm, &base, blocks)) > (double)x->limit) {
          r->pruned_state++;
          /* still a candidate for the closest when nothing fits: its
           * least memory (full recompute, the smallest micro-batch) */
          sc_search_cand c = base;
          c.schedule = pp > 1 ? "1f1b" : "gpipe";
          c.virtual_stages = 1;
          c.microbatches = pp > 1 ? (int32_t)(B / data) : 1;
          c.micro_batch_size = pp > 1 ? 1 : B / data;
          c.recompute = SC_SEARCH_RECOMPUTE_FULL;
          sc_status st = closest(x, &c, r, d);
          if (st != SC_OK) return st;
          continue;
        }
        sc_status st = search_mesh(x, base, B / data, r, d);
        if (st != SC_OK) return st;
      }
    }
  }
  return SC_OK;
}

static sc_status search(const ctx *x, bool tp_anywhere, sc_search_result *r, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  int64_t N = sc_cluster_devices(x->c);
  for (int64_t tp = 1; tp <= N; tp++) {
    if (N % tp || tp_skipped(x, tp, tp_anywhere, r)) continue;
    for (int64_t pp = 1; pp <= N / tp && pp <= bm->n_blocks && (!x->o->max_pp || pp <= x->o->max_pp);
         pp++) {
      if ((N / tp) % pp) continue;
      for (int64_t cp = 1; cp <= N / tp / pp; cp++) {
        if ((N / tp / pp) % cp || cp_skipped(x, cp, r)) continue;
        for (int64_t ep = 1; ep <= N / tp / pp / cp; ep++) {
          if ((N / tp / pp / cp) % ep || ep_skipped(x, ep, cp, r)) continue;
          sc_status st = search_data(x, tp, pp, cp, ep, r, d);
          if (st != SC_OK) return st;
        }
      }
    }
  }
  return SC_OK;
}

/* The inference candidates of the mesh of tp, pp, cp, ep and dp: each
 * sequence parallelism and microbatch count. */
static sc_status infer_mesh(const ctx *x, int64_t tp, int64_t pp, int64_t cp, int64_t ep,
                            int64_t dp, sc_search_result *r, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  int64_t P = x->c->devices_per_node, B = x->o->global_batch, te = tp * ep;
  bool latency = x->o->goal == SC_SEARCH_LATENCY;
  /* latency: dp and ep split the one batch; throughput: each of the dp
   * replicas serves a batch of its own, which ep splits */
  int64_t parts = latency ? dp * ep : ep;
  if (B % parts) {
    r->pruned_batch++;
    if (!r->batch_parts || parts < r->batch_parts) r->batch_parts = parts;
    return SC_OK;
  }
  if (!span(1, tp, P) || !span(tp, ep, P) || !span(te, cp, P) || !span(te * cp, dp, P) ||
      !span(te * cp * dp, pp, P)) {
    r->pruned_node++;
    return SC_OK;
  }
  int64_t rb = latency ? B / dp / ep : B / ep; /* a rank's batch */
  for (int sp = 0; sp < (tp > 1 ? 2 : 1); sp++) {
    sc_search_cand base = {.dp = dp, .fsdp = 1, .tp = tp, .pp = pp, .cp = cp, .ep = ep,
                           .sequence_parallel = sp == 1, .schedule = "gpipe",
                           .virtual_stages = 1, .microbatches = 1,
                           .micro_batch_size = rb, .inference = true,
                           .batch = latency ? B : dp * B};
    double w = stage_params(bm, &base, (bm->n_blocks + pp - 1) / pp) * (double)bm->param_bytes;
    if (w > (double)x->limit) {
      r->pruned_state++;
      sc_search_cand c = base; /* its least memory: micro-batches of 1 */
      c.micro_batch_size = pp > 1 ? 1 : rb;
      c.microbatches = pp > 1 ? (int32_t)rb : 1;
      sc_status st = closest(x, &c, r, d);
      if (st != SC_OK) return st;
      continue;
    }
    for (int64_t M = 1; M <= rb && (pp > 1 || M == 1); M++) {
      if (rb % M) {
        r->pruned_microbatch++;
        continue;
      }
      sc_search_cand c = base;
      c.microbatches = (int32_t)M;
      c.micro_batch_size = rb / M;
      sc_status st = consider(x, &c, r, d);
      if (st != SC_OK) return st;
    }
  }
  return SC_OK;
}

/* The inference space (search.h): every mesh of D <= N devices, D = dp x
 * cp x ep x tp x pp, with the same pruning as training's (heads, nodes and
 * uneven placement, the batch, cp's sequence, ep's experts, the
 * microbatches, the weights alone over the memory, the bound). ep splits
 * the batch with dp (a data axis); cp splits every sequence. */
static sc_status infer_search(const ctx *x, bool tp_anywhere, sc_search_result *r, sc_diag *d) {
  const sc_block_model *bm = x->bm;
  int64_t N = sc_cluster_devices(x->c);
  for (int64_t D = 1; D <= N; D++) {
    for (int64_t tp = 1; tp <= D; tp++) {
      if (D % tp || tp_skipped(x, tp, tp_anywhere, r)) continue;
      for (int64_t pp = 1; pp <= D / tp && pp <= bm->n_blocks &&
                           (!x->o->max_pp || pp <= x->o->max_pp); pp++) {
        if ((D / tp) % pp) continue;
        for (int64_t cp = 1; cp <= D / tp / pp; cp++) {
          if ((D / tp / pp) % cp || cp_skipped(x, cp, r)) continue;
          for (int64_t ep = 1; ep <= D / tp / pp / cp; ep++) {
            if ((D / tp / pp / cp) % ep || ep_skipped(x, ep, cp, r)) continue;
            sc_status st = infer_mesh(x, tp, pp, cp, ep, D / tp / pp / cp / ep, r, d);
            if (st != SC_OK) return st;
          }
        }
      }
    }
  }
  return SC_OK;
}

sc_status sc_search_run(const sc_block_model *bm, const sc_search_opts *o, sc_search_result *r,
                        sc_diag *d) {
  memset(r, 0, sizeof *r);
  if (bm->n_blocks < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan --auto: no repeated blocks found in the model (the search composes "
                       "plans from its transformer blocks); give --mesh instead");
  if (o->global_batch < 1)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "plan --auto: --global-batch must be >= 1");
  ctx x;
  init_ctx(&x, bm, o);
  if (x.limit <= 0 || x.hbm <= 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan --auto: cluster %s: the device's memory and HBM bandwidth must be "
                       "known (uncalibrated: run shardc calibrate)", o->cluster->name);
  bool infer = o->goal != SC_SEARCH_TRAIN;
  r->model_flops = (infer ? 1.0 : 3.0) * sc_block_model_flops(bm) * (double)o->global_batch;
  sc_status st = infer ? infer_search(&x, false, r, d) : search(&x, false, r, d);
  if (st == SC_OK && r->n_top == 0) {
    r->tp_left_node = true;
    st = infer ? infer_search(&x, true, r, d) : search(&x, true, r, d);
  }
  if (st != SC_OK) return st;
  r->pruned = r->pruned_heads + r->pruned_node + r->pruned_batch + r->pruned_microbatch +
              r->pruned_state + r->pruned_bound + r->pruned_fsdp + r->pruned_cp + r->pruned_ep +
              r->pruned_split;
  if (r->n_top == 0 && !r->have_closest && r->pruned_batch > 0) {
    /* no data-parallel size divides the batch: name the batches that do
     * for the smallest one refused */
    int64_t N = sc_cluster_devices(o->cluster);
    char works[96];
    sc_partition_batches_that_divide(o->global_batch, r->batch_parts, works, sizeof works);
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "plan --auto: the global batch %lld does not divide by the data-parallel "
                       "size (dp x fsdp) of any plan on %lld devices; batches that do: %s",
                       (long long)o->global_batch, (long long)N, works);
  }
  return SC_OK;
}

static const char *dominant_comm(const sc_search_cand *a, const sc_search_cand *b) {
  double diff[8] = {b->tp_s - a->tp_s,         b->fsdp_s - a->fsdp_s, b->dp_s - a->dp_s,
                    b->pp_s - a->pp_s,         b->bubble_s - a->bubble_s, b->cp_s - a->cp_s,
                    b->ep_s - a->ep_s,         b->offload_s - a->offload_s};
  double more[3] = {b->compute_s - a->compute_s, b->recompute_s - a->recompute_s,
                    b->optimizer_s - a->optimizer_s};
  static const char *const names[11] = {"more exposed tp comm", "more exposed fsdp comm",
                                        "more exposed dp comm", "more pipeline p2p",
                                        "a larger pipeline bubble", "more exposed cp comm",
                                        "more ep all-to-all",
                                        "waiting for offloaded activations' copies",
                                        "more compute per rank", "more recompute",
                                        "a longer optimizer step"};
  int best = 0;
  double bv = diff[0];
  for (int i = 1; i < 11; i++) {
    double v = i < 8 ? diff[i] : more[i - 8];
    if (v > bv) {
      bv = v;
      best = i;
    }
  }
  return names[best];
}

void sc_search_why(const sc_search_cand *a, const sc_search_cand *b, int64_t limit, char *buf,
                   size_t n) {
  if (!b->fits) {
    snprintf(buf, n, "does not fit: pipeline rank %d over by %.2f GiB", (int)b->peak_pipe_rank,
             (double)(b->peak_bytes - limit) / (1024.0 * 1024.0 * 1024.0));
    return;
  }
  if (a == b) {
    snprintf(buf, n, "chosen");
    return;
  }
  double pct = a->objective_s > 0 ? 100.0 * (b->objective_s - a->objective_s) / a->objective_s
                                   : 0;
  if (b->objective_s != b->step_s && b->step_s <= a->step_s && pct >= 0.05) {
    /* throughput: a step as short or shorter, over fewer replicas */
    snprintf(buf, n, "%.1f %% slower per batch served: %lld replica%s against %lld", pct,
             (long long)b->dp, b->dp == 1 ? "" : "s", (long long)a->dp);
    return;
  }
  if (pct < 0.05) {
    snprintf(buf, n, "as fast (%+.3f %%), %.2f GiB %s memory per rank", pct,
             fabs((double)(b->peak_bytes - a->peak_bytes)) / (1024.0 * 1024.0 * 1024.0),
             b->peak_bytes >= a->peak_bytes ? "more" : "less");
    return;
  }
  snprintf(buf, n, "%.1f %% slower: %s", pct, dominant_comm(a, b));
}

/* The terms of a candidate's estimate, in dominant_comm's order of names. */
static void terms_of(const sc_search_cand *c, double t[10]) {
  double v[10] = {c->tp_s, c->fsdp_s,    c->dp_s,        c->pp_s,        c->bubble_s,
                  c->cp_s, c->ep_s,      c->compute_s,   c->recompute_s, c->optimizer_s};
  memcpy(t, v, sizeof v);
}

void sc_search_fewer_why(const sc_search_cand *a, const sc_search_cand *b, int64_t devices_a,
                         int64_t global_batch, const char *basis, char *buf, size_t n) {
  double pct = a->step_s > 0 ? 100.0 * (b->step_s - a->step_s) / a->step_s : 0;
  if (b->step_s <= a->step_s) {
    snprintf(buf, n, "%.1f %% faster than the best on %lld devices (%s)", -pct,
             (long long)devices_a, basis);
    return;
  }
  /* the two terms that grew most, compute per rank, the batch per GPU */
  static const char *const names[10] = {
      "more tp comm",      "more fsdp comm",          "more dp comm",  "more pipeline p2p",
      "a larger pipeline bubble", "more cp comm", "more ep all-to-all", "more compute per rank",
      "more recompute", "a longer optimizer step"};
  double ta[10], tb[10];
  terms_of(a, ta);
  terms_of(b, tb);
  int i1 = -1, i2 = -1;
  for (int i = 0; i < 10; i++) {
    double g = tb[i] - ta[i];
    if (g <= 0) continue;
    if (i1 < 0 || g > tb[i1] - ta[i1]) {
      i2 = i1;
      i1 = i;
    } else if (i2 < 0 || g > tb[i2] - ta[i2]) {
      i2 = i;
    }
  }
  int64_t N = ranks_of(b);
  size_t pos = (size_t)snprintf(buf, n, "%.1f %% slower than the best on %lld devices (%s)",
                                pct, (long long)devices_a, basis);
  if (i1 >= 0 && pos < n)
    pos += (size_t)snprintf(buf + pos, n - pos, ": %s (+%.3g s)%s", names[i1],
                            tb[i1] - ta[i1], i2 >= 0 ? "," : "");
  if (i2 >= 0 && pos < n)
    pos += (size_t)snprintf(buf + pos, n - pos, " %s (+%.3g s)", names[i2],
                            tb[i2] - ta[i2]);
  if (pos < n)
    snprintf(buf + pos, n - pos,
             "; compute per rank %.3g s against %.3g s; %.3g examples a GPU against %.3g "
             "(micro-batch %lld against %lld)",
             b->compute_s, a->compute_s, (double)global_batch / (double)N,
             (double)global_batch / (double)devices_a, (long long)b->micro_batch_size,
             (long long)a->micro_batch_size);
}

sc_status sc_search_fewer_devices(const sc_block_model *bm, const sc_search_opts *o,
                                  const sc_search_cand *chosen, sc_search_fewer *f, sc_diag *d) {
  memset(f, 0, sizeof *f);
  sc_cluster half = *o->cluster;
  if (half.nodes > 1 && half.nodes % 2 == 0) half.nodes /= 2;
  else if (half.nodes == 1 && half.devices_per_node % 2 == 0) half.devices_per_node /= 2;
  else {
    snprintf(f->why, sizeof f->why, "not compared: %lld nodes of %lld devices do not halve",
             (long long)half.nodes, (long long)half.devices_per_node);
    return SC_OK;
  }
  f->nodes = half.nodes;
  f->devices_per_node = half.devices_per_node;
  f->devices = sc_cluster_devices(&half);
  sc_search_opts ho = *o;
  ho.cluster = &half;
  sc_search_result *r = sc_calloc(1, sizeof *r);
  if (!r) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "plan --auto: out of memory");
  sc_diag hd = {0};
  sc_diag_clear(&hd);
  sc_status st = sc_search_run(bm, &ho, r, &hd);
  f->searched = st == SC_OK || st == SC_ERR_USAGE;
  if (st == SC_ERR_USAGE) {
    snprintf(f->why, sizeof f->why, "not compared: on %lld devices: %.200s",
             (long long)f->devices, hd.msg);
    st = SC_OK;
  } else if (st != SC_OK) {
    *d = hd;
  } else if (r->n_top == 0) {
    snprintf(f->why, sizeof f->why, "no plan fits on %lld devices", (long long)f->devices);
  } else {
    f->have = true;
    f->best = r->top[0];
    f->n_top = r->n_top;
    memcpy(f->top, r->top, (size_t)r->n_top * sizeof *r->top);
    f->slower = chosen->step_s > f->best.step_s;
    sc_search_fewer_why(&f->best, chosen, f->devices, o->global_batch, "estimates", f->why,
                        sizeof f->why);
  }
  sc_free(r);
  return st;
}
