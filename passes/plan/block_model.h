/* block_model.h — the planner's model of a transformer, built once from
 * the graph, from which the search composes every candidate's cost and
 * memory without compiling it (docs/planner.md, "Search").
 *
 * The repeated blocks are passes/blocks.h's (by structure first). The
 * first block is measured node by node and stands for all of them (the
 * detector only makes blocks of identical ops and output shapes); what is
 * outside every block (embedding, final norm, LM head, loss) is measured
 * once. Figures are per example (the graph is imported with its batch dim
 * bound to 1) in the graph's own dtypes:
 *   GEMM FLOPs, and outside the attention core each product's shape
 *     (m per example, n, k: for its efficiency under tp's split);
 *   memory-bound bytes: every other node's bytes read and written
 *     (ir/ops.h cost), which the roofline costs over HBM bandwidth;
 *   parameters (elements, tensors), and which of them the tensor-parallel
 *     split shards (GEMM weights of rank 2) and which stay whole; the
 *     tensors one by one in the order the forward reads them (what the
 *     compiled step's per-block collectives group);
 *   the values the backward keeps (every node output of the block: the
 *     forward values its gradients read), the part of them in the
 *     attention core (from the first rank-4 product to the second:
 *     scores, softmax, their shape-preserving neighbours) that selective
 *     recompute drops, and the block input that full recompute keeps;
 *   which of those values and kernels are the residual stream's (whole
 *     under tensor parallelism unless sequence parallel);
 *   the hidden size (the block output's last dim), the sequence length,
 *     the heads (dim 1 of the first rank-4 product's output; 0 unknown).
 * The graph has no loss (the training step adds it: passes/train.c); the
 * cross-entropy over the first output (the logits) keeps, per example,
 * what its two compiled forms keep beside the logits (loss_saved_bytes,
 * loss_split_saved_bytes below), for the search to add to the outside
 * part's kept values.
 * Invariants: plain data, no pointers; n_blocks 0 means no repeated block
 * was found (everything is "outside"). Errors: SC_ERR_NOMEM, and
 * SC_ERR_INVALID for a graph without a live node. */
#ifndef SC_PLAN_BLOCK_MODEL_H
#define SC_PLAN_BLOCK_MODEL_H

#include "ir/ir.h"

enum { SC_BLOCK_MODEL_TENSORS = 64 }; /* tensors a part lists (sc_block_part) */
enum { SC_BLOCK_MODEL_TIED = 4 };     /* tied parameters listed (sc_block_model) */
enum { SC_BLOCK_MODEL_GEMMS = 16 };   /* GEMM shapes a part lists (sc_block_part) */

/* One shape of the part's GEMMs outside the attention core, per example:
 * its products' FLOPs, m (the rows of one example), n (the output's last
 * dim), k; `weight`: it multiplies by a 2-D parameter, which tensor
 * parallelism splits (the search divides n by tp, or k when n is the
 * hidden size: tp.c's column- and row-parallel products). Products of the
 * same shape share one entry. */
typedef struct sc_block_gemm {
  double flops;
  int64_t m, n, k;
  bool weight;
} sc_block_gemm;

typedef struct sc_block_part {
  double gemm_flops;        /* forward GEMM FLOPs per example */
  double attn_flops;        /* of which in the attention core */
  double mem_bytes;         /* forward memory-bound bytes per example */
  double attn_mem_bytes;    /* of which in the attention core */
  /* its GEMMs outside the attention core by shape (the first
   * SC_BLOCK_MODEL_GEMMS shapes; the rest's FLOPs added to the last): each
   * is timed at its own shape's efficiency, which tp changes (a row- or
   * column-parallel product's split dim) */
  int32_t n_gemms;
  sc_block_gemm gemms[SC_BLOCK_MODEL_GEMMS];
  int64_t params;           /* parameter elements */
  int64_t split_params;     /* of which tensor parallelism splits */
  int32_t param_tensors;    /* parameter tensors */
  /* the part's parameter tensors in the order the forward first reads
   * them (the first SC_BLOCK_MODEL_TENSORS; the rest's elements added to
   * the last): what the compiled step's collectives group per block
   * (passes/partition/bucket.c's rule, sc_partition_bucket_count) */
  int32_t n_listed;
  int64_t tensor_elems[SC_BLOCK_MODEL_TENSORS];
  bool tensor_split[SC_BLOCK_MODEL_TENSORS]; /* a GEMM weight tp splits */
  double saved_bytes;       /* values the backward keeps, per example */
  double attn_saved_bytes;  /* of which in the attention core */
  double input_bytes;       /* the block's input, per example */
  double whole_saved_bytes; /* of saved_bytes, the residual stream's values
                               ([seq, hidden]: norms, residual adds, the
                               projections' outputs), which tensor
                               parallelism without sequence parallelism
                               keeps whole on every rank */
  double whole_mem_bytes;   /* of mem_bytes, the kernels writing them */
  /* of whole_mem_bytes and whole_low_mem_bytes, the row kernels' (norms:
   * SC_OPF_NORM), which read whole rows of the stream: a tensor-parallel
   * step keeps the stream split over tp between the products and gathers
   * it for them unless sequence parallelism splits them too */
  double row_mem_bytes, row_low_mem_bytes;
  /* the part's last product outside the attention core in the forward's
   * order (not an expert's): its entry of gemms and its FLOPs per example
   * (0: none). Full recompute does not rerun it: its output only feeds the
   * residual addition that makes the part's output, which the next part
   * keeps */
  int32_t last_gemm;
  double last_gemm_flops;
  /* elements of the 2-D parameters the part looks rows up in (a Gather's
   * data: the embeddings), whose gradient the compiled step computes
   * whole, a dense [rows, dim] scatter-add in f32, a microbatch */
  double lookup_elems;
  /* of saved_bytes, attn_saved_bytes and whole_saved_bytes (counted in the
   * graph's f32): the values a bf16 or fp16 training step computes in that
   * type, at half the bytes: the GEMM products and the data-moving and
   * elementwise chains they feed (sc_train_low_op, passes/train.c) */
  double low_saved_bytes, attn_low_saved_bytes, whole_low_saved_bytes;
  /* of mem_bytes and whole_mem_bytes, the kernels of those low values,
   * which such a step runs reading and writing half the bytes */
  double low_mem_bytes, whole_low_mem_bytes;
  /* mixture of experts (docs/moe.md): the experts of its expert products
   * (sc_expert_weight, passes/partition/partition.h: the products ep.c
   * splits), E (0: none; the largest when the part has several), the
   * elements of their stacked weights (of params: what expert parallelism
   * divides by ep), and the forward's all-to-alls under ep per example:
   * one for each dispatched activation entering the experts (the
   * activation of an expert product not made by another expert product or
   * an element-wise op) and one for each expert product's output that
   * leaves them (no reader is an expert product or element-wise), a2a_bytes
   * the bytes of those buffers whole ([1, E, C, D] each) */
  int64_t experts;
  int64_t expert_params;
  /* of gemm_flops, the expert products' (per example), and the shape of
   * one expert's product of them, the least wide: m (its C slots), n, k.
   * Each runs whole on every tp rank (ep.c: experts are replicated over
   * tp, unless expert tensor parallelism splits F), at the efficiency of
   * that shape, not the stream's */
  double expert_flops;
  int64_t expert_m, expert_n, expert_k;
  int32_t a2a_count;
  double a2a_bytes;
  /* expert tensor parallelism (docs/moe.md): the expert products that
   * leave the experts (one a MoE layer: their sums are pending over tp
   * when the experts are split over it), their outputs' bytes per example
   * ([1, E, C, D] each), the hidden size F such a product sums over (what
   * tp splits; 0: none), and the stacked weights' count */
  int32_t expert_exits;
  double expert_exit_bytes;
  int64_t expert_hidden;
  int32_t expert_tensors;
} sc_block_part;

typedef struct sc_block_model {
  int32_t n_blocks;         /* repeated blocks (layers) */
  int64_t seq;              /* tokens per example (dim 1 of the token ids) */
  int64_t hidden;           /* the block output's last dim */
  int64_t heads;            /* attention heads, 0: unknown */
  bool attn_fused;          /* the core is one FusedAttention node: its
                               saved values are o and lse (attn_saved_bytes
                               0), selective recompute has nothing to do */
  double kv_bytes;          /* block 0's fused attention's keys and values
                               (its inputs 1 and 2) per example: what
                               context parallelism's ring passes on per hop
                               (docs/context-parallel.md); 0 without a
                               fused attention (no cp plan then) */
  bool attn_unmasked;       /* every fused attention has causal 0 and no
                               mask input: context parallelism cuts a
                               sequence that does not divide into 2·cp
                               chunks into cp padded blocks (cp.c) */
  bool token_outputs;       /* the first output keeps the sequence (rank 3
                               or more, dim 1 = seq): a training step's
                               labels then do too, which cp does not pad */
  int64_t vocab;            /* the last dim of the first output (logits) */
  int32_t param_bytes;      /* bytes of a parameter element in the graph */
  sc_block_part block;      /* one block */
  sc_block_part outside;    /* everything else */
  /* The cross-entropy's kept values per example beside the logits (0:
   * no logits of rank >= 2). The fused SoftmaxCrossEntropy (a step
   * without tensor parallelism) keeps each row's log-sum-exp: rows x 4
   * bytes (f32). The decomposed form (a tensor-parallel step:
   * split_vocab_loss, passes/train.h) keeps the log-probabilities and the
   * labels' one-hot, both [rows, vocab] in the logits' dtype, which the
   * vocabulary-parallel LM head splits over tp. */
  double loss_saved_bytes, loss_split_saved_bytes;
  /* The step decomposes the cross-entropy at every tp (train
   * --no-fuse-loss; set by the caller, not by sc_block_model_build): the
   * search times and keeps its decomposed form at tp = 1 too. */
  bool loss_split;
  /* The 2-D parameters outside the blocks that two nodes or more read (a
   * tied embedding: the lookup and the LM head), the first
   * SC_BLOCK_MODEL_TIED: their dims. A training step's gradient of one is
   * a sum of two parts, which the compiled step reduce-scatters over fsdp
   * part by part (sc_partition_split_grad_sums, passes/partition/
   * partition.h): the search counts those collectives. */
  int32_t n_tied;
  int64_t tied_dims[SC_BLOCK_MODEL_TIED][2];
  char found[96];           /* how the blocks were found (sc_blocks_describe) */
} sc_block_model;

/* The model of g (a forward graph after the canonical passes, batch 1). */
sc_status sc_block_model_build(sc_graph *g, sc_block_model *bm, sc_diag *d);
/* Parameters of the whole model (elements). */
int64_t sc_block_model_params(const sc_block_model *bm);
/* Forward FLOPs per example (every GEMM). */
double sc_block_model_flops(const sc_block_model *bm);

#endif
