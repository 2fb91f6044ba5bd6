/* train_args.c — the training-step options of `shardc train` and `shardc
 * compile --train` (train_args.h): parsed here once, checked once, and
 * refused once when a training bundle already has them compiled in.
 * Errors are printed (sc_cli_usage_error) and come back as exit status 2. */
#include "tools/train_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  bool *flag = strcmp(arg, "--nesterov") == 0 ? &a->t.nesterov
               : strcmp(arg, "--untie") == 0  ? &a->t.untie
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
  if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0 && strcmp(v, "fp16") != 0)
    return sc_cli_usage_error("--precision expects fp32, bf16 or fp16, got '%s'", v);
  a->t.bf16 = strcmp(v, "bf16") == 0;
  a->t.fp16 = strcmp(v, "fp16") == 0;
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
  if (strcmp(opt, "--freeze") == 0) {
    if (a->n_freeze == SC_TRAIN_ARGS_MAX_FREEZE)
      return sc_cli_usage_error("at most %d --freeze", SC_TRAIN_ARGS_MAX_FREEZE);
    a->freeze[a->n_freeze++] = v;
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
    "--recompute", "--memory-budget", "--smp-config", NULL};

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
  if (a->recompute_auto && !a->memory_budget)
    return sc_cli_usage_error("--recompute auto needs --memory-budget BYTES (per rank)");
  if (a->memory_budget && !a->recompute_auto)
    return sc_cli_usage_error("--memory-budget goes with --recompute auto");
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
  if (!a->recompute_auto) return sc_partition_args_build(pa, o, bo, out, NULL);
  static const char *const names[] = {"none", "selective", "full"};
  int64_t need[3] = {0};
  char text[3][32];
  for (int k = 0; k < 3; k++) {
    a->t.recompute = (sc_recompute_kind)k;
    int rc = sc_partition_args_build(pa, o, bo, out, NULL);
    if (rc) return rc;
    need[k] = step_memory(*out);
    sc_stats_format_bytes((double)need[k], text[k], sizeof text[k]);
    if (need[k] <= a->memory_budget) {
      char budget[32], tried[160] = "";
      sc_stats_format_bytes((double)a->memory_budget, budget, sizeof budget);
      for (int j = 0; j < k; j++) {
        size_t n = strlen(tried);
        snprintf(tried + n, sizeof tried - n, "%s%s needs %s", j ? ", " : "; ", names[j], text[j]);
      }
      fprintf(stderr, "shardc: note: --recompute auto: %s, the least recompute whose step fits "
              "--memory-budget %s per rank (it needs %s%s)\n", names[k], budget, text[k], tried);
      return 0;
    }
    if (k < 2) {
      sc_build_destroy(*out);
      *out = NULL;
    }
  }
  sc_build_destroy(*out);
  *out = NULL;
  fprintf(stderr, "shardc: error: %s: --memory-budget %lld bytes per rank: even full recompute "
          "needs %lld (none %lld, selective %lld)\n", o->file, (long long)a->memory_budget,
          (long long)need[2], (long long)need[0], (long long)need[1]);
  return 1;
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
        "  --precision fp32|bf16|fp16  bf16/fp16: matrix products (forward and backward)\n"
        "                         in that type, weights, optimizer state and gradient\n"
        "                         sums in fp32; fp16 adds dynamic loss scaling as\n"
        "                         PyTorch's GradScaler: an overflowing step is skipped\n"
        "  --grad-accum K         K microbatches of B examples per optimizer step: their\n"
        "                         gradients are averaged (the loss logged is their mean)\n"
        "  --freeze GLOB          keep matching initializers fixed (repeatable)\n"
        "  --recompute KIND       none (default), selective (each block's attention core:\n"
        "                         scores, softmax, weighted sum) or full (each block from\n"
        "                         its input): recomputed before the backward needs them;\n"
        "                         auto: the least of these whose step fits\n"
        "  --memory-budget BYTES  per rank (K, M, G suffixes), for --recompute auto\n"
        "  --smp-config FILE.json SageMaker model parallelism v2 keys (hybrid_shard_degree,\n"
        "                         tensor_parallel_degree, activation_checkpointing, ...)\n"
        "                         over the world of --mesh dp=N\n"
        "  --untie                train an initializer that is another's exact transpose\n"
        "                         (an exported tied weight, GPT-2's LM head) as a\n"
        "                         parameter of its own (default: tied to that one)\n",
        f);
}
