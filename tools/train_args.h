/* train_args.h — the options that shape the compiled training step, shared
 * by `shardc train MODEL` and `shardc compile MODEL --train` (one table:
 * each subcommand takes them out of argv with sc_train_args_take before its
 * own parsing, as partition_args.h does for the partitioning options).
 *
 *   --loss cross-entropy|mse|output:NAME   --logits NAME   --ignore-index N
 *   --optimizer sgd|adamw   --momentum M   --nesterov   --weight-decay W
 *   --betas B1,B2   --eps E   --clip-grad-norm X   --grad-accum K
 *   --precision fp32|bf16|fp16|fp8   --fp8-amax-history N   --freeze GLOB (repeatable)
 *
 * These are compiled into a training bundle: `shardc train BUNDLE` refuses
 * them (sc_train_args_refuse_with_bundle). The options of a run (--steps,
 * --lr, schedules, data, checkpoints, --loss-scale, ...) are train.c's.
 * Defaults are PyTorch's (sc_train_opts_init); the weight decay's default
 * follows the optimizer (SGD 0, AdamW 0.01) whatever the options' order. */
#ifndef SC_TOOLS_TRAIN_ARGS_H
#define SC_TOOLS_TRAIN_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "driver/driver.h"
#include "passes/train.h"

enum { SC_TRAIN_ARGS_MAX_FREEZE = 64 };

typedef struct sc_train_args {
  sc_train_opts t;             /* complete after sc_train_args_finish */
  const char *freeze[SC_TRAIN_ARGS_MAX_FREEZE];
  int32_t n_freeze;
  sc_aux_loss aux[SC_TRAIN_MAX_AUX]; /* --aux-loss NAME=COEF, in order; each
                                  name points into aux_names */
  char aux_names[SC_TRAIN_MAX_AUX][256]; /* NAME, the text before '=' (at
                                  most 255 bytes), copied out of argv */
  int32_t n_aux;
  bool wd_given;               /* --weight-decay appeared */
  bool recompute_auto;         /* --recompute auto */
  int64_t memory_budget;       /* --memory-budget BYTES (0: none) */
  bool horizon_given;          /* --activation-loading-horizon appeared */
  bool budget_for_search;      /* set by the caller before finishing: --mesh
                                  auto's search reads memory_budget too */
  const char *smp_config;      /* --smp-config FILE.json, or NULL */
  const char *first;           /* the first of these options given, or NULL */
} sc_train_args;

void sc_train_args_init(sc_train_args *a);
/* If argv[*i] is one of the options above, consumes it (and its value),
 * advancing *i to the next unread argument, and returns 1; 0 when it is not
 * one (*i unchanged); 2 after printing a usage error. */
int sc_train_args_take(sc_train_args *a, int argc, char **argv, int *i);
/* Fills in the optimizer's defaults and checks the ranges PyTorch checks
 * (a negative weight decay, a beta outside [0, 1), ...). 0, or 2 after
 * printing a usage error. a->t.freeze then points into a. */
int sc_train_args_finish(sc_train_args *a);
/* With a training bundle: 0 when none of the options was given, else 2
 * after a usage error naming the first ("compiled into the bundle"). */
int sc_train_args_refuse_with_bundle(const sc_train_args *a, const char *bundle);
/* The build the options ask for (partition_args.h's sc_partition_args_build
 * with bo->train = &a->t), with a warning when --recompute finds no
 * blocks; with --recompute auto, the first of none, selective and full
 * whose step memory per rank (arena and constants) fits --memory-budget,
 * then (without --offload-activations given) full, or none without
 * blocks, with activation offloading; each try and the choice said on
 * stderr. 0, 1 (error printed: even the last try does not fit, with what
 * would), 2 (usage). */
struct sc_partition_args;
struct sc_cli_opts;
int sc_train_args_build(sc_train_args *a, const struct sc_partition_args *pa,
                        const struct sc_cli_opts *o, sc_build_opts *bo, sc_build **out);
/* The options' lines of --help. */
void sc_train_args_help(FILE *f);

#endif
