/* train.h — the training step as one graph (docs/training.md).
 *
 * sc_train_build turns an imported, dim-bound inference graph (before any
 * shape inference or folding, so that nothing derived from a weight is
 * folded into a constant) into the graph of one training step:
 *
 *   params     every float initializer with data, not matched by a
 *              --freeze glob, becomes a graph input (its initial value is
 *              kept in the info); after autodiff, those without a
 *              gradient (the loss does not reach them differentiably)
 *              are constants again
 *   loss       cross-entropy (PyTorch's: softmax over the last axis of the
 *              logits, mean over positions whose label is not
 *              ignore_index; labels a new int64 input "labels"), mse (mean
 *              of the squared difference with a new input "targets" of the
 *              logits' shape), or an existing scalar output; a graph
 *              output "loss"
 *   backward   sc_autodiff
 *   clipping   optional: every gradient scaled by min(1, max_norm /
 *              (‖g‖ + 1e-6)) over the global norm (torch's
 *              clip_grad_norm_); "train:grad_norm" is an output either way
 *   update     PyTorch's SGD (momentum, dampening 0, Nesterov, weight
 *              decay) or AdamW (bias correction, decoupled weight decay),
 *              composed of elementwise ops that fusion turns into one
 *              kernel per parameter. Scalar inputs "train:lr",
 *              "train:bc1" = 1 − β1^t and "train:bc2" = 1 − β2^t change per
 *              step without recompiling.
 *
 * Mixed precision (bf16): every f32 MatMul and Gemm of the forward graph
 * reads bf16 casts of its float inputs and its result is cast back to
 * f32, before autodiff; the gradient rules then run the backward products
 * in bf16 too, while the Cast rules bring every gradient back to f32: the
 * parameters (master weights), optimizer state, gradient sums and the
 * update stay f32, as with FSDP's param_dtype = bf16, reduce_dtype = f32.
 *
 * fp8 is bf16 with each linear layer's three products on FP8 operands
 * scaled by Transformer Engine's delayed scaling, after autodiff
 * (passes/fp8.h); its scaling state is "T.fp8_amax_history" and
 * "T.fp8_scale", updated like optimizer state.
 *
 * fp16 is the same with F16, plus dynamic loss scaling: autodiff starts
 * from loss · "train:loss_scale" (an input) and every gradient is
 * multiplied by "train:inv_scale" before it is used; an overflow shows as
 * a non-finite "train:grad_norm", which the runtime's scaler answers as
 * PyTorch's GradScaler does (runtime/trainer.h).
 *
 * Gradient accumulation (grad_accum K > 1): each run is one microbatch;
 * input "accum:P" holds the sum of P's gradients over the step's earlier
 * microbatches and output "new:accum:P" adds this one's; the update (and
 * the norm, and clipping) use that sum divided by K, PyTorch's loss / K
 * accumulated over K backward passes. Only the last microbatch's update
 * is applied (see below).
 *
 * Skipped steps: every state output is Where(ok, updated, old), ok = loss
 * and gradient norm finite (and "train:apply", a bool input, with gradient
 * accumulation: true on the last microbatch only); ok is the output
 * "train:applied". A step that is not applied leaves the state as it was,
 * which lets the compiled program update the state in place (the input's
 * arena slot is the new value's: codegen/program.h, p->updates).
 *
 * Tied weights: before the parameters are taken, a float initializer B
 * that is bit for bit the transpose of another, A (2-D, shapes swapped; A
 * not constant-valued; B not equal to A itself, so a symmetric matrix
 * does not count), is the exporter's copy of a weight PyTorch ties
 * (GPT-2's LM head, "W.T"): every read of B becomes a read of a new
 * Transpose of A, so B is no parameter and A's gradient sums both uses
 * (opts.untie turns this off). Identical copies are not tied: PyTorch's
 * exporter writes one initializer for one tensor, so two equal ones are
 * two parameters that happen to be equal (a fresh model's LayerNorm
 * weights, all ones). info->ties records the pairs; sc_train_find_ties
 * finds them in any graph (the export writes B back as A's transpose).
 *
 * Names: parameter P is input P and output "new:P"; its optimizer state S
 * ("P.momentum_buffer", "P.exp_avg", "P.exp_avg_sq") is input S (zero at
 * the start) and output "new:S". The forward graph's outputs stay outputs.
 * Errors name the node or value (the autodiff's, a missing logits output,
 * a loss that is not a scalar). */
#ifndef SC_PASSES_TRAIN_H
#define SC_PASSES_TRAIN_H

#include "ir/ir.h"
#include "passes/fp8.h"
#include "passes/fuse_attention.h"
#include "passes/recompute.h"

typedef enum sc_loss_kind { SC_LOSS_CROSS_ENTROPY, SC_LOSS_MSE, SC_LOSS_OUTPUT } sc_loss_kind;
typedef enum sc_optimizer_kind { SC_OPTIMIZER_SGD, SC_OPTIMIZER_ADAMW } sc_optimizer_kind;

/* A scalar output of the model added to the loss times a coefficient (a
 * mixture-of-experts model's load-balancing loss: `--aux-loss NAME=COEF`,
 * docs/moe.md). */
enum { SC_TRAIN_MAX_AUX = 16 }; /* auxiliary losses a step takes at most */
typedef struct sc_aux_loss {
  const char *name;             /* the model output (float, rank 0) */
  double coef;                  /* its weight in the loss */
} sc_aux_loss;

/* A weight whose vocabulary the step pads (passes/partition/vocab_pad.c,
 * sc_partition_pad_vocab_train; docs/partitioning.md, "A trained
 * vocabulary"): the parameter `param` ("W.vocab_padded") stands for the
 * model's `name`, dim `dim` padded from `vocab` with zero rows or columns
 * that stay zero. */
typedef struct sc_train_vocab_pad {
  const char *param, *name;
  int32_t dim;
  int64_t vocab;
} sc_train_vocab_pad;

typedef struct sc_train_opts {
  sc_loss_kind loss;
  const char *logits;           /* output read by the loss (NULL: the only
                                   output); the loss itself for
                                   SC_LOSS_OUTPUT */
  int64_t ignore_index;         /* cross-entropy; PyTorch's default −100 */
  const sc_aux_loss *aux;       /* loss = the loss + Σ coef · output (borrowed) */
  int32_t n_aux;
  const char *const *freeze;    /* globs (fnmatch) of initializers kept fixed */
  int32_t n_freeze;
  sc_optimizer_kind optimizer;
  double momentum, weight_decay; /* SGD: 0, 0; AdamW weight_decay 0.01 */
  bool nesterov;
  double beta1, beta2, eps;     /* AdamW: 0.9, 0.999, 1e-8 */
  double clip_grad_norm;        /* 0: no clipping */
  int32_t grad_accum;           /* microbatches per optimizer step (>= 1;
                                   0 counts as 1) */
  bool bf16;                    /* mixed precision: matrix products in bf16 */
  bool fp16;                    /* ... in fp16, with dynamic loss scaling */
  bool fp8;                     /* bf16, and the linear layers' products in
                                   FP8 with delayed scaling (passes/fp8.h) */
  int32_t fp8_history;          /* fp8: the amax history's length (0: 1024) */
  sc_recompute_kind recompute;  /* activation checkpointing (recompute.h) */
  bool offload_activations;     /* park saved activations in host memory
                                   between forward and backward (with
                                   recompute: the checkpointed block inputs;
                                   without: every saved activation):
                                   info->offload names them, the codegen
                                   moves them (codegen/offload.c) */
  int32_t activation_loading_horizon; /* reload points ahead of the backward
                                   that a copy back starts (>= 0; default 2,
                                   SMP v2's examples) */
  int64_t cp;                   /* > 1: the mesh's context-parallel size; the
                                   sequence is put in its zig-zag order
                                   before autodiff (passes/partition/cp.h) */
  bool cp_batch_split;          /* with cp: the batch is split too (dp or
                                   fsdp > 1) */
  bool no_fuse_attention;       /* leave attention cores unfused (else each
                                   becomes one FusedAttention node before
                                   autodiff: passes/fuse_attention.h) */
  bool split_vocab_loss;        /* the cross-entropy as LogSoftmax and a
                                   one-hot product, which keep logits split
                                   over the vocabulary split (a tensor-
                                   parallel step: Megatron's vocabulary-
                                   parallel cross-entropy); else one
                                   SoftmaxCrossEntropy node, whose rows
                                   need the whole vocabulary */
  bool no_fuse_loss;            /* the cross-entropy in that decomposed
                                   form at any tensor-parallel size (as
                                   PyTorch's unfused cross-entropy and
                                   Megatron-LM's vocabulary-parallel one
                                   run it: passes over f32 logits), not
                                   one fused SoftmaxCrossEntropy on the
                                   low-precision logits (--no-fuse-loss) */
  bool shape_only;              /* the model has shapes, no weights (`plan
                                   --train --no-weights`): every float
                                   initializer is a parameter, nothing is
                                   tied; such a step is planned, or run
                                   from an initialiser's values
                                   (`train --no-weights --init`) */
  bool untie;                   /* train transposed copies as parameters of
                                   their own (no tie detection) */
  const sc_train_vocab_pad *vocab_pads; /* the weights padded before the
                                   step is built (borrowed): their params
                                   carry the model's names, and a
                                   cross-entropy over their sliced logits
                                   reads the padded ones, masked */
  int32_t n_vocab_pads;
  bool pipeline;                /* a pipelined step (passes/partition/
                                   pipe_train.c): with grad_accum > 1 the
                                   update runs once after the last
                                   microbatch's backward (no "train:apply"),
                                   and "ok" is the gradient norm's finiteness
                                   alone (the loss lives on the last stage
                                   only; a non-finite loss makes a non-finite
                                   gradient) */
} sc_train_opts;
/* PyTorch's defaults for opt's optimizer (call after setting it). */
void sc_train_opts_init(sc_train_opts *o, sc_optimizer_kind optimizer);

typedef struct sc_train_param {
  const char *name;             /* the initializer's (and input's) name */
  int32_t input;                /* its input value */
  int32_t grad;                 /* its gradient, -1: the loss does not reach it */
  const void *init;             /* its initial data (borrowed from the model) */
  int64_t numel;
  sc_dtype dtype;               /* and shape, as taken (value ids change when
                                   later passes compact the graph) */
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  /* A vocabulary-padded parameter (sc_train_vocab_pad): the model's name
   * and its vocabulary extent on dim vocab_dim (dims[vocab_dim] is the
   * padded one); NULL and 0 for any other. */
  const char *model_name;
  int32_t vocab_dim;
  int64_t vocab;
} sc_train_param;
/* p's element count as the model has it (a padded copy's: its vocabulary's
 * rows). */
int64_t sc_train_param_model_numel(const sc_train_param *p);

typedef struct sc_train_tie {
  const char *name;             /* the copy B: no parameter, its reads are
                                   a Transpose of the source */
  const char *source;           /* A, of which B is the transpose */
  int32_t value, source_value;  /* their value ids in the graph searched,
                                   when it was searched */
} sc_train_tie;

/* The tied copies among g's float initializers (above), in g's arena (NULL
 * when none); a copy is never a source. Errors: SC_ERR_NOMEM. */
sc_status sc_train_find_ties(sc_graph *g, sc_train_tie **ties, int32_t *n_ties, sc_diag *d);
/* Sets the data of t's copy to the transpose of its source's data now (a
 * copy in g's arena). */
sc_status sc_train_tie_refresh(sc_graph *g, const sc_train_tie *t, sc_diag *d);

typedef struct sc_train_info {
  int32_t n_params;
  sc_train_param *params;       /* in the graph's arena */
  int32_t n_trainable;          /* params with a gradient */
  int64_t trainable_numel;
  int64_t classes;              /* cross-entropy: the logits' last dim */
  sc_recompute_report recompute; /* what --recompute cloned */
  sc_fuse_attention_report attention; /* what fuse-attention fused and not */
  int32_t n_offload;
  const char **offload;         /* with opts.offload_activations: the names of
                                   the saved activations to offload, in
                                   forward order (in the graph's arena) */
  sc_fp8_report fp8;            /* fp8: the layers in FP8 and those left bf16 */
  int32_t n_ties;
  sc_train_tie *ties;           /* tied copies, read through their source
                                   (in the graph's arena) */
  int32_t runs;                 /* the step's runs of its program: grad_accum
                                   without a pipeline (each run one
                                   microbatch; the update and the gradients'
                                   reductions in the last only), else 1 */
} sc_train_info;

/* Whether a bf16 or fp16 step computes op in the low type when it reads a
 * low value (a product, or what such an op made of one) and otherwise only
 * constants or smaller operands: data movement and activation-like
 * elementwise ops (autocast's rule; Exp, Log, Sqrt, Reciprocal, Softplus,
 * norms, Softmax and reductions stay f32). The planner's block model
 * counts those activations at 2 bytes with it (passes/plan/block_model.c). */
bool sc_train_low_op(sc_op op);

sc_status sc_train_build(sc_graph *g, const sc_train_opts *o, sc_train_info *info, sc_diag *d);

#endif
