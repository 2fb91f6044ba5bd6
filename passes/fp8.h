/* fp8.h — FP8 linear layers of a training step (docs/training.md, "FP8").
 *
 * Transformer Engine's delayed scaling with its HYBRID format, on a step
 * already built in bf16 (to_low_precision and low_chains, then autodiff):
 * each linear layer's three products (the forward Y = X·W, the input
 * gradient dX = dY·Wᵀ, the weight gradient dW = Xᵀ·dY) read FP8 values of
 * their operands: X and W rounded to f8e4m3fn, dY to f8e5m2, each after
 * multiplication by its own scale, and each product's result is multiplied
 * by the inverses of its two operands' scales (and the bias added) in f32
 * before it is rounded to the bf16 value its readers had. The products
 * themselves read the FP8 values widened to f32 exactly, so they are f32
 * products of FP8 operands summed in f32, the reference a GPU's FP8 GEMM
 * is checked against.
 *
 * A linear layer is a forward MatMul of A [..., K] by a 2-D weight, or a
 * Gemm (transA 0, alpha 1, beta 1) by one, whose weight is a parameter or
 * initializer (read through its bf16 cast); its products are that node and the products autodiff named
 * "<node>/grad/<k>". One whose K or N is not a multiple of 16 (what FP8
 * GEMMs require) stays bf16 and the report lists it with the reason.
 *
 * Scaling meta of quantized tensor T (X, W, dY of each layer, named
 * "<node>/input", "/weight", "/grad"): inputs "T.fp8_amax_history" (f32
 * [history]) and "T.fp8_scale" (f32 scalar), optimizer-like state that
 * starts at zeros (a stored scale 0 is Transformer Engine's initial 1).
 * The step quantizes with the stored scale and computes amax = max |T|;
 * sc_fp8_update then builds the state's new values: history[0] = max(
 * history[0], amax); scale = fp8_max / max(history) (kept when that max is
 * 0 or not finite, the largest f32 when it overflows); the history rolled
 * by one towards index 0 and history[0] = 0 (TE's
 * _default_get_amax_and_update_history and delayed-scaling kernel, margin
 * 0, amax_compute_algo "max"). The caller guards those outputs like every
 * state output (a skipped step leaves them as they were). */
#ifndef SC_PASSES_FP8_H
#define SC_PASSES_FP8_H

#include <stdio.h>

#include "passes/grad_rule.h"

enum { SC_FP8_MAX_LISTED = 32, SC_FP8_DEFAULT_HISTORY = 1024 };

typedef struct sc_fp8_kept {
  char node[128]; /* the forward product's name */
  char why[160];
} sc_fp8_kept;

/* One quantized tensor's state: inputs and their new values (unguarded). */
typedef struct sc_fp8_meta {
  const char *name;        /* "<node>/input" ...: the state is name + suffix */
  int32_t history, scale;  /* the state inputs */
  int32_t new_history, new_scale; /* set by sc_fp8_update: the step applied */
  int32_t kept_history;    /* sc_fp8_update: the history when it is not */
  int32_t amax;            /* this step's max |T| (f32 scalar) */
  double fp8_max;          /* 448 (E4M3) or 57344 (E5M2) */
} sc_fp8_meta;

typedef struct sc_fp8_report {
  bool ran;                /* --precision fp8 */
  int32_t history;         /* the amax history's length */
  int32_t fp8;             /* linear layers in FP8 */
  int32_t kept;            /* linear layers left bf16 (all of them) */
  int32_t n_listed;
  sc_fp8_kept list[SC_FP8_MAX_LISTED];
  int32_t n_meta;
  sc_fp8_meta *meta;       /* in the graph's arena */
} sc_fp8_report;

/* Rewrites the linear layers of c->g (forward nodes [0, *n_fwd), backward
 * after; params[0 .. n_params) the step's parameter inputs) as above; r
 * receives what was done. The added nodes are placed among the forward's
 * and the backward's (the quantizations of X and W before their forward
 * product), so *n_fwd becomes the new index of the first backward node:
 * what recompute, offloading and the parameters' forward order take as
 * the forward. Errors: SC_ERR_NOMEM, a builder's failure naming the
 * layer. */
sc_status sc_fp8_rewrite(sc_grad_ctx *c, int32_t *n_fwd, const int32_t *params, int32_t n_params,
                         int32_t history, sc_fp8_report *r, sc_diag *d);
/* The new history and scale of every meta of r (graph values, unguarded),
 * and the history a step not applied leaves (as it was). A step of several
 * microbatches gives each meta's amax as the running max over them (the
 * accumulator "accum:T.fp8_amax", passes/train.c), so that the step's amax
 * is the max over its microbatches, as one run of the whole batch would
 * measure it, and the update, once a step, rolls the history. */
sc_status sc_fp8_update(sc_grad_ctx *c, sc_fp8_report *r, sc_diag *d);
/* "fp8: N linear layers in FP8 ..., M left bf16" and one line per listed one. */
void sc_fp8_print(const sc_fp8_report *r, FILE *f);

#endif
