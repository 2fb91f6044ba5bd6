/* train_args.c — the training-step options of `shardc train` and `shardc
 * compile --train` (train_args.h): parsed here once, checked once, and
 * refused once when a training bundle already has them compiled in.
 * Errors are printed (sc_cli_usage_error) and come back as exit status 2. */
#include "tools/train_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/train_memory.h"
#include "passes/blocks.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/partition_args.h"
#include "tools/smp_config.h"

void sc_train_args_init(sc_train_args *a) {
  memset(a, 0, sizeof *a);
  sc_train_opts_init(&a->t, SC_OPTIMIZER_SGD);
}

/* The options without a value. */
static bool take_flag(sc_train_args *a, const char *arg) {
  bool *flag = strcmp(arg, "--nesterov") == 0              ? &a->t.nesterov
               : strcmp(arg, "--untie") == 0               ? &a->t.untie
               : strcmp(arg, "--offload-activations") == 0 ? &a->t.offload_activations
               : strcmp(arg, "--no-fuse-loss") == 0        ? &a->t.no_fuse_loss
                                                           : NULL;
  if (flag) *flag = true;
  return flag != NULL;
}

static int take_loss(sc_train_args *a, const char *v) {
  if (strcmp(v, "cross-entropy") == 0) {
    a->t.loss = SC_LOSS_CROSS_ENTROPY;
  } else if (strcmp(v, "mse") == 0) {
    a->t.loss = SC_LOSS_MSE;
  } else if (strncmp(v, "output:", 7) == 0 && v[7]) {
    a->t.loss = SC_LOSS_OUTPUT;
    a->t.logits = v + 7;
  } else {
    return sc_cli_usage_error("--loss expects cross-entropy, mse or output:NAME, got '%s'", v);
  }
  return 0;
}

static int take_choice(sc_train_args *a, const char *opt, const char *v) {
  if (strcmp(opt, "--optimizer") == 0) {
    if (strcmp(v, "sgd") != 0 && strcmp(v, "adamw") != 0)
      return sc_cli_usage_error("--optimizer expects sgd or adamw, got '%s'", v);
    a->t.optimizer = strcmp(v, "sgd") == 0 ? SC_OPTIMIZER_SGD : SC_OPTIMIZER_ADAMW;
    return 0;
  }
  /* --precision */
  if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0 && strcmp(v, "fp16") != 0 &&
      strcmp(v, "fp8") != 0)
    return sc_cli_usage_error("--precision expects fp32, bf16, fp16 or fp8, got '%s'", v);
  a->t.bf16 = strcmp(v, "bf16") == 0;
  a->t.fp16 = strcmp(v, "fp16") == 0;
  a->t.fp8 = strcmp(v, "fp8") == 0;
  return 0;
}

/* One option with its value v; -1 when opt is not one of them. */
static int take_value(sc_train_args *a, const char *opt, const char *v) {
  int64_t n;
  if (strcmp(opt, "--loss") == 0) return take_loss(a, v);
  if (strcmp(opt, "--optimizer") == 0 || strcmp(opt, "--precision") == 0)
    return take_choice(a, opt, v);
  if (strcmp(opt, "--logits") == 0) {
    a->t.logits = v;
    return 0;
  }
  if (strcmp(opt, "--smp-config") == 0) {
    a->smp_config = v;
    return 0;
  }
  if (strcmp(opt, "--memory-budget") == 0) {
    char *end;
    double x = strtod(v, &end);
    double unit = *end == 0 ? 1 : strcmp(end, "K") == 0 || strcmp(end, "KiB") == 0 ? 1024.0
                  : strcmp(end, "M") == 0 || strcmp(end, "MiB") == 0   ? 1048576.0
                  : strcmp(end, "G") == 0 || strcmp(end, "GiB") == 0   ? 1073741824.0
                                                                       : -1;
    if (end == v || unit < 0 || !(x > 0) || x * unit > 9e18)
      return sc_cli_usage_error("--memory-budget expects bytes (a number, or with K, M or G), "
                                "got '%s'", v);
    a->memory_budget = (int64_t)(x * unit);
    return 0;
  }
  if (strcmp(opt, "--recompute") == 0) {
    if (strcmp(v, "auto") == 0) {
      a->recompute_auto = true;
      return 0;
    }
    static const char *const kinds[] = {"none", "selective", "full"};
    for (int k = 0; k < 3; k++)
      if (strcmp(v, kinds[k]) == 0) {
        a->t.recompute = (sc_recompute_kind)k;
        return 0;
      }
    return sc_cli_usage_error("--recompute expects none, selective, full or auto, got '%s'", v);
  }
  if (strcmp(opt, "--activation-loading-horizon") == 0) {
    if (!sc_cli_parse_i64(v, 0, 1 << 20, &n))
      return sc_cli_usage_error("--activation-loading-horizon expects a non-negative integer, "
                                "got '%s'", v);
    a->t.activation_loading_horizon = (int32_t)n;
    a->horizon_given = true;
    return 0;
  }
  if (strcmp(opt, "--freeze") == 0) {
    if (a->n_freeze == SC_TRAIN_ARGS_MAX_FREEZE)
      return sc_cli_usage_error("at most %d --freeze", SC_TRAIN_ARGS_MAX_FREEZE);
    a->freeze[a->n_freeze++] = v;
    return 0;
  }
  if (strcmp(opt, "--aux-loss") == 0) {
    const char *eq = strchr(v, '=');
    size_t len = eq ? (size_t)(eq - v) : 0;
    char *end = NULL;
    double coef = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || len == 0 || len >= sizeof a->aux_names[0] || end == eq + 1 || *end ||
        !isfinite(coef))
      return sc_cli_usage_error("--aux-loss expects NAME=COEF (a model output and a finite "
                                "number), got '%s'", v);
    if (a->n_aux == SC_TRAIN_MAX_AUX)
      return sc_cli_usage_error("at most %d --aux-loss", SC_TRAIN_MAX_AUX);
    for (int32_t k = 0; k < a->n_aux; k++)
      if (strlen(a->aux_names[k]) == len && strncmp(a->aux_names[k], v, len) == 0)
        return sc_cli_usage_error("--aux-loss %.*s given twice", (int)len, v);
    memcpy(a->aux_names[a->n_aux], v, len);
    a->aux_names[a->n_aux][len] = 0;
    a->aux[a->n_aux].coef = coef;
    a->n_aux++;
    return 0;
  }
  if (strcmp(opt, "--ignore-index") == 0) {
    if (!sc_cli_parse_i64(v, INT64_MIN / 2, INT64_MAX / 2, &a->t.ignore_index))
      return sc_cli_usage_error("--ignore-index expects an integer, got '%s'", v);
    return 0;
  }
  if (strcmp(opt, "--grad-accum") == 0) {
    if (!sc_cli_parse_i64(v, 1, 1 << 20, &n))
      return sc_cli_usage_error("--grad-accum expects a positive integer, got '%s'", v);
    a->t.grad_accum = (int32_t)n;
    return 0;
  }
  if (strcmp(opt, "--fp8-amax-history") == 0) {
    if (!sc_cli_parse_i64(v, 1, 1 << 20, &n))
      return sc_cli_usage_error("--fp8-amax-history expects a positive integer, got '%s'", v);
    a->t.fp8_history = (int32_t)n;
    return 0;
  }
  if (strcmp(opt, "--betas") == 0) {
    char tail;
    if (sscanf(v, "%lf,%lf%c", &a->t.beta1, &a->t.beta2, &tail) != 2)
      return sc_cli_usage_error("--betas expects B1,B2, got '%s'", v);
    return 0;
  }
  if (strcmp(opt, "--weight-decay") == 0) a->wd_given = true;
  double *x = strcmp(opt, "--momentum") == 0         ? &a->t.momentum
              : strcmp(opt, "--weight-decay") == 0   ? &a->t.weight_decay
              : strcmp(opt, "--eps") == 0            ? &a->t.eps
              : strcmp(opt, "--clip-grad-norm") == 0 ? &a->t.clip_grad_norm
                                                     : NULL;
  return x ? sc_cli_parse_number(opt, v, x) : -1;
}

static const char *const VALUE_OPTIONS[] = {
    "--loss", "--logits", "--ignore-index", "--optimizer", "--momentum", "--weight-decay",
    "--betas", "--eps", "--clip-grad-norm", "--grad-accum", "--precision", "--freeze",
    "--fp8-amax-history", "--recompute", "--memory-budget", "--smp-config",
    "--activation-loading-horizon", "--aux-loss", NULL};

int sc_train_args_take(sc_train_args *a, int argc, char **argv, int *i) {
  const char *arg = argv[*i];
  if (take_flag(a, arg)) {
    if (!a->first) a->first = arg;
    (*i)++;
    return 1;
  }
  for (int k = 0; VALUE_OPTIONS[k]; k++) {
    bool missing = false;
    const char *v = sc_cli_opt_value(argc, argv, i, VALUE_OPTIONS[k], &missing);
    if (!v) continue;
    if (missing) return sc_cli_usage_error("option '%s' needs a value", arg);
    if (!a->first) a->first = VALUE_OPTIONS[k];
    int rc = take_value(a, VALUE_OPTIONS[k], v);
    (*i)++;
    return rc ? 2 : 1;
  }
  return 0;
}

int sc_train_args_finish(sc_train_args *a) {
  if (!a->wd_given) {
    sc_train_opts d;
    sc_train_opts_init(&d, a->t.optimizer);
    a->t.weight_decay = d.weight_decay;
  }
  a->t.freeze = a->freeze;
  a->t.n_freeze = a->n_freeze;
  for (int32_t k = 0; k < a->n_aux; k++) a->aux[k].name = a->aux_names[k];
  a->t.aux = a->aux;
  a->t.n_aux = a->n_aux;
  /* PyTorch refuses these too ("Invalid weight_decay value", ...) */
  const sc_train_opts *t = &a->t;
  if (t->weight_decay < 0) return sc_cli_usage_error("--weight-decay must be >= 0");
  if (t->momentum < 0) return sc_cli_usage_error("--momentum must be >= 0");
  if (t->nesterov && t->momentum <= 0)
    return sc_cli_usage_error("--nesterov needs a --momentum > 0 (as torch.optim.SGD)");
  if (t->beta1 < 0 || t->beta1 >= 1 || t->beta2 < 0 || t->beta2 >= 1)
    return sc_cli_usage_error("--betas must be in [0, 1)");
  if (t->eps < 0) return sc_cli_usage_error("--eps must be >= 0");
  if (t->clip_grad_norm < 0) return sc_cli_usage_error("--clip-grad-norm must be >= 0");
  if (a->horizon_given && !t->offload_activations)
    return sc_cli_usage_error("--activation-loading-horizon goes with --offload-activations");
  if (a->recompute_auto && !a->memory_budget)
    return sc_cli_usage_error("--recompute auto needs --memory-budget BYTES (per rank)");
  if (a->memory_budget && !a->recompute_auto && !a->budget_for_search)
    return sc_cli_usage_error("--memory-budget goes with --recompute auto or --mesh auto");
  return 0;
}

/* Arena and constants of a build's (first stage's) program. */
static int64_t step_memory(const sc_build *b) {
  const sc_program *p = b->program->stages[0].program;
  int64_t m = p->arena_bytes;
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (p->buffers[i].kind == SC_BUF_CONST) m += p->buffers[i].bytes;
  return m;
}

static const char *const recompute_names[] = {"none", "selective", "full"};

/* A warning when --recompute found no block to recompute: never nothing
 * silently. */
static void warn_no_blocks(const sc_build *b, const sc_train_opts *t, const char *file) {
  if (t->recompute == SC_RECOMPUTE_NONE || b->train.recompute.blocks > 0) return;
  fprintf(stderr, "shardc: warning: %s: --recompute %s: no repeated blocks found (no chain of "
          "residual additions whose groups repeat, nor layer indices in the names): nothing is "
          "recomputed\n", file, recompute_names[t->recompute]);
}

/* One line of --recompute auto's tries: recompute k, with offloading or
 * not. */
static void note_try(const sc_build *b, int k, bool offload, int64_t need, int64_t budget) {
  sc_train_memory m;
  sc_diag d;
  sc_diag_clear(&d);
  char step[32], saved[32] = "?", act[32] = "?", by[64];
  sc_stats_format_bytes((double)need, step, sizeof step);
  if (sc_train_memory_of(b->program->stages[0].program, &m, &d) == SC_OK) {
    sc_stats_format_bytes((double)m.saved, saved, sizeof saved);
    sc_stats_format_bytes((double)m.live[SC_MEM_ACTIVATIONS], act, sizeof act);
  }
  sc_stats_format_bytes((double)(need > budget ? need - budget : budget - need), by, sizeof by);
  char what[64] = "";
  if (k > 0)
    snprintf(what, sizeof what, "; %d blocks, %d nodes recomputed", (int)b->train.recompute.blocks,
             (int)b->train.recompute.nodes);
  char name[32];
  snprintf(name, sizeof name, "%s%s", recompute_names[k], offload ? "+offload" : "");
  fprintf(stderr, "  %-14s step %s per rank (activations saved for the backward %s, live at "
          "the peak %s%s): %s by %s\n",
          name, step, saved, act, what, need <= budget ? "fits" : "over", by);
}

/* What would fit when even full recompute does not: ZeRO-3 over N ranks
 * divides the parameters, gradients and optimizer state by N (an estimate:
 * the communication buffers it adds are not counted), else a smaller
 * batch. */
static void suggest(const sc_build *b, int64_t need, int64_t budget) {
  sc_train_memory m;
  sc_diag d;
  sc_diag_clear(&d);
  char over[32];
  sc_stats_format_bytes((double)(need - budget), over, sizeof over);
  fprintf(stderr, "shardc: note: the last try needs %s more than the budget", over);
  if (sc_train_memory_of(b->program->stages[0].program, &m, &d) == SC_OK) {
    int64_t states = m.live[SC_MEM_PARAMS] + m.live[SC_MEM_OPTIMIZER] + m.live[SC_MEM_GRADIENTS];
    int64_t n = 2;
    while (n <= 4096 && states - states / n < need - budget) n *= 2;
    if (n <= 4096 && b->part == NULL) {
      fprintf(stderr, "; try --mesh fsdp=%lld (ZeRO-3 shards the %lld bytes of parameters, "
              "gradients and optimizer state: about %lld per rank), a smaller batch (--dim) or "
              "--precision bf16\n", (long long)n, (long long)states, (long long)(states / n));
      return;
    }
  }
  fprintf(stderr, "; try a smaller batch (--dim), more ranks (--mesh fsdp=N, tp=N, pp=N) or "
          "--precision bf16\n");
}

int sc_train_args_build(sc_train_args *a, const sc_partition_args *pa, const sc_cli_opts *o,
                        sc_build_opts *bo, sc_build **out) {
  bo->train = &a->t;
  sc_partition_args with = *pa;
  char mesh[256];
  if (a->smp_config) {
    int rc = sc_smp_config_apply(a->smp_config, &with, a, mesh, sizeof mesh);
    if (rc) return rc;
    if (a->recompute_auto && !a->memory_budget)
      return sc_cli_usage_error("--recompute auto (activation_checkpointing \"auto\") needs "
                                "--memory-budget BYTES (per rank)");
    pa = &with;
  }
  if (!a->recompute_auto) {
    int rc = sc_partition_args_build(pa, o, bo, out, NULL);
    if (rc == 0) warn_no_blocks(*out, &a->t, o->file);
    return rc;
  }
  /* tries: none, selective, full, then (unless every try offloads
   * already) the most recompute found with activation offloading: full,
   * or none when no blocks were found (then every saved activation) */
  bool offload_given = a->t.offload_activations;
  int n_tries = offload_given ? 3 : 4;
  int64_t need[4] = {0};
  bool blocks = true;
  char budget[32];
  sc_stats_format_bytes((double)a->memory_budget, budget, sizeof budget);
  fprintf(stderr, "shardc: note: --recompute auto, --memory-budget %s (%lld bytes) per rank, "
          "tries:\n", budget, (long long)a->memory_budget);
  for (int k = 0; k < n_tries; k++) {
    if (k == 2 && !blocks) continue; /* full would recompute nothing either */
    bool offload = k == 3;
    a->t.recompute = offload ? (blocks ? SC_RECOMPUTE_FULL : SC_RECOMPUTE_NONE)
                             : (sc_recompute_kind)k;
    a->t.offload_activations = offload_given || offload;
    int rc = sc_partition_args_build(pa, o, bo, out, NULL);
    if (rc) return rc;
    need[k] = step_memory(*out);
    note_try(*out, a->t.recompute, offload, need[k], a->memory_budget);
    if (k == 1 && (*out)->train.recompute.blocks == 0) {
      blocks = false;
      fprintf(stderr, "  (no repeated blocks found: full recompute would recompute nothing "
              "either)\n");
    }
    bool last = k == n_tries - 1 || (k == 1 && !blocks && n_tries == 3);
    if (need[k] <= a->memory_budget) {
      char how[160] = "";
      if (a->t.recompute != SC_RECOMPUTE_NONE) {
        const sc_recompute_report *r = &(*out)->train.recompute;
        sc_blocks bl = {.how = (sc_blocks_how)r->found_by, .n_blocks = r->blocks,
                        .adds_per_block = r->adds_per_block};
        char d[128];
        sc_blocks_describe(&bl, d, sizeof d);
        snprintf(how, sizeof how, ": %d blocks found %s", (int)r->blocks, d);
      }
      if (offload)
        fprintf(stderr, "shardc: note: --recompute auto chose %s with --offload-activations: "
                "no recompute alone fits, the step does with its saved activations in host "
                "memory%s\n", recompute_names[a->t.recompute], how);
      else
        fprintf(stderr, "shardc: note: --recompute auto chose %s, the least recompute whose "
                "step fits%s\n", recompute_names[k], how);
      warn_no_blocks(*out, &a->t, o->file);
      return 0;
    }
    if (last) {
      fprintf(stderr, "shardc: error: %s: --memory-budget %lld bytes per rank: no recompute fits "
              "(none %lld, selective %lld, full %lld bytes", o->file,
              (long long)a->memory_budget, (long long)need[0], (long long)need[1],
              (long long)(blocks ? need[2] : need[1]));
      if (n_tries == 4)
        fprintf(stderr, "; %s with activation offloading %lld", blocks ? "full" : "none",
                (long long)need[3]);
      fprintf(stderr, ")\n");
      suggest(*out, need[k], a->memory_budget);
      sc_build_destroy(*out);
      *out = NULL;
      return 1;
    }
    sc_build_destroy(*out);
    *out = NULL;
  }
  return 1; /* not reached: the last try returns */
}

int sc_train_args_refuse_with_bundle(const sc_train_args *a, const char *bundle) {
  if (!a->first) return 0;
  return sc_cli_usage_error("%s: %s is compiled into the bundle (give it to shardc compile "
                            "--train)", bundle, a->first);
}

void sc_train_args_help(FILE *f) {
  fputs("  --loss KIND            cross-entropy (default: softmax over the last axis,\n"
        "                         mean over labels not equal to --ignore-index, -100),\n"
        "                         mse, or output:NAME (the model computes the loss)\n"
        "  --logits NAME          the output the loss reads (default: the only one)\n"
        "  --optimizer sgd|adamw  PyTorch's torch.optim.SGD / AdamW (default sgd)\n"
        "  --momentum M, --nesterov, --weight-decay W (sgd 0, adamw 0.01),\n"
        "  --betas B1,B2 (0.9,0.999), --eps E (1e-8)\n"
        "  --clip-grad-norm X     scale gradients to a global norm of at most X\n"
        "  --precision fp32|bf16|fp16|fp8  bf16/fp16: matrix products (forward and backward)\n"
        "                         in that type, weights, optimizer state and gradient\n"
        "                         sums in fp32; fp16 adds dynamic loss scaling as\n"
        "                         PyTorch's GradScaler: an overflowing step is skipped;\n"
        "                         fp8: bf16, and each linear layer's products on FP8\n"
        "                         operands (E4M3 forward, E5M2 gradients), delayed\n"
        "                         scaling (docs/training.md, FP8)\n"
        "  --fp8-amax-history N   fp8: the amax history's length (default 1024)\n"
        "  --grad-accum K         K microbatches of B examples per optimizer step: their\n"
        "                         gradients are averaged (the loss logged is their mean)\n"
        "  --freeze GLOB          keep matching initializers fixed (repeatable)\n"
        "  --recompute KIND       none (default), selective (each block's attention core:\n"
        "                         scores, softmax, weighted sum) or full (each block from\n"
        "                         its input): recomputed before the backward needs them;\n"
        "                         auto: the least of these whose step fits, else full\n"
        "                         with --offload-activations if that fits\n"
        "  --memory-budget BYTES  per rank (K, M, G suffixes), for --recompute auto\n"
        "  --offload-activations  park saved activations in host memory between forward\n"
        "                         and backward (with recompute: the checkpointed block\n"
        "                         inputs; without: every saved activation), copied\n"
        "                         back ahead of the backward on a copy queue\n"
        "  --activation-loading-horizon H  start each copy back H blocks ahead of the\n"
        "                         backward that reads it (default 2)\n"
        "  --smp-config FILE.json SageMaker model parallelism v2 keys (hybrid_shard_degree,\n"
        "                         tensor_parallel_degree, activation_checkpointing, ...)\n"
        "                         over the world of --mesh dp=N\n"
        "  --untie                train an initializer that is another's exact transpose\n"
        "                         (an exported tied weight, GPT-2's LM head) as a\n"
        "                         parameter of its own (default: tied to that one)\n"
        "  --no-fuse-loss         the cross-entropy as LogSoftmax and a one-hot product\n"
        "                         over f32 logits (as a tensor-parallel step has it;\n"
        "                         PyTorch's unfused loss), not one fused kernel\n",
        f);
}
