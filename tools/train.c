/* train.c — `shardc train MODEL`: train a model on one rank.
 *
 * Parses the options, builds the training step (driver/driver.h with
 * sc_train_opts: loss, autodiff, optimizer; passes/train.h), reads the
 * data, runs --steps steps through runtime/trainer.h, and prints one line
 * per step — rewritten in place on a terminal — with examples per second
 * and the time left (and, with --log-json FILE, one JSON object per step:
 * step, loss, lr, grad_norm, time_ms). Data: every --data file's dim 0 counts
 * examples, and so does --labels' (or --targets'); step i takes examples
 * (i−1)·B … i·B−1, wrapping around, B the bound batch dim. Labels are
 * checked before step 1: each in [0, classes) or the ignore index.
 *
 * --grad-accum K: a step takes K·B examples, run as K microbatches.
 * --save DIR [--save-every N] writes checkpoints (runtime/checkpoint.h);
 * --resume DIR restores weights, optimizer state, step and data position,
 * so N steps, a resume, and N more equal 2N steps bit for bit.
 * Not yet here (docs/training.md): export. A value that is not finite is written
 * as null in the JSON log (a skipped step also says "skipped": true). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "passes/stats.h"
#include "runtime/checkpoint.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/partition_args.h"

static const char *const USAGE =
    "shardc train MODEL.onnx --data NAME=FILE.npy... (--labels FILE.npy | --targets FILE.npy)\n"
    "                       [--loss cross-entropy|mse|output:NAME] [--logits NAME]\n"
    "                       [--ignore-index N] [--dim NAME=V]... [--steps N]\n"
    "                       [--optimizer sgd|adamw] [--lr X] [--momentum M] [--nesterov]\n"
    "                       [--weight-decay W] [--betas B1,B2] [--eps E]\n"
    "                       [--clip-grad-norm X] [--lr-schedule constant|cosine|linear]\n"
    "                       [--warmup-steps W] [--min-lr X] [--on-nan stop|skip]\n"
    "                       [--grad-accum K] [--precision fp32|bf16|fp16] [--loss-scale S]\n"
    "                       [--save DIR [--save-every N]] [--resume DIR]\n"
    "                       [--freeze GLOB]... [--log-json FILE]\n"
    "                       [--threads N] [--list-params] [--quiet]";

enum { MAX_DATA = 64, MAX_FREEZE = 64, MAX_ARGS = 1024 };

typedef struct train_args {
  const char *data_name[MAX_DATA], *data_file[MAX_DATA];
  char *data_buf[MAX_DATA];
  int n_data;
  const char *labels, *targets, *logits, *log_json, *save, *resume;
  int64_t save_every;
  double loss_scale;             /* fp16: the first loss scale (0: 65536) */
  const char *freeze[MAX_FREEZE];
  int n_freeze;
  sc_train_opts t;
  bool optimizer_given, wd_given, list_params, quiet;
  int64_t steps, warmup;
  double lr, min_lr;
  sc_lr_schedule schedule;
  bool skip_nan;                 /* --on-nan skip */
  int threads;
} train_args;

static int parse_double(const char *opt, const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x))
    return sc_cli_usage_error("%s expects a number, got '%s'", opt, v);
  *out = x;
  return 0;
}

/* Takes train's own options out of argv; the rest go to sc_cli_parse. */
static int split_args(int argc, char **argv, train_args *a, char **rest, int *n_rest) {
  *n_rest = 0;
  rest[(*n_rest)++] = argv[0];
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v;
    bool missing = false;
    int rc = 0;
    if (*n_rest >= MAX_ARGS - 1) return sc_cli_usage_error("too many arguments");
#define VALUE(name) ((v = sc_cli_opt_value(argc, argv, &i, name, &missing)) != NULL)
    if (arg[0] != '-') {
      rest[(*n_rest)++] = argv[i];
      continue;
    }
    if (VALUE("--data")) {
      const char *eq = missing ? NULL : strchr(v, '=');
      if (missing || !eq || eq == v || !eq[1])
        return sc_cli_usage_error("--data expects NAME=FILE.npy");
      if (a->n_data == MAX_DATA) return sc_cli_usage_error("at most %d --data", MAX_DATA);
      char *name = sc_malloc((size_t)(eq - v) + 1);
      if (!name) return sc_cli_usage_error("out of memory");
      memcpy(name, v, (size_t)(eq - v));
      name[eq - v] = 0;
      for (int k = 0; k < a->n_data; k++)
        if (strcmp(a->data_name[k], name) == 0) {
          sc_free(name);
          return sc_cli_usage_error("--data %.*s given twice", (int)(eq - v), v);
        }
      a->data_buf[a->n_data] = name;
      a->data_name[a->n_data] = name;
      a->data_file[a->n_data++] = eq + 1;
      continue;
    }
    if (VALUE("--labels")) a->labels = v;
    else if (VALUE("--targets")) a->targets = v;
    else if (VALUE("--logits")) a->t.logits = v;
    else if (VALUE("--log-json")) a->log_json = v;
    else if (VALUE("--loss")) {
      if (missing) {
      } else if (strcmp(v, "cross-entropy") == 0) {
        a->t.loss = SC_LOSS_CROSS_ENTROPY;
      } else if (strcmp(v, "mse") == 0) {
        a->t.loss = SC_LOSS_MSE;
      } else if (strncmp(v, "output:", 7) == 0 && v[7]) {
        a->t.loss = SC_LOSS_OUTPUT;
        a->t.logits = v + 7;
      } else {
        return sc_cli_usage_error("--loss expects cross-entropy, mse or output:NAME, got '%s'", v);
      }
    } else if (VALUE("--optimizer")) {
      if (!missing && strcmp(v, "sgd") != 0 && strcmp(v, "adamw") != 0)
        return sc_cli_usage_error("--optimizer expects sgd or adamw, got '%s'", v);
      if (!missing) {
        sc_loss_kind loss = a->t.loss;
        const char *logits = a->t.logits;
        double m = a->t.momentum;
        bool nest = a->t.nesterov;
        sc_train_opts_init(&a->t, strcmp(v, "sgd") == 0 ? SC_OPTIMIZER_SGD : SC_OPTIMIZER_ADAMW);
        a->t.loss = loss, a->t.logits = logits, a->t.momentum = m, a->t.nesterov = nest;
        a->optimizer_given = true;
      }
    } else if (VALUE("--freeze")) {
      if (!missing && a->n_freeze == MAX_FREEZE)
        return sc_cli_usage_error("at most %d --freeze", MAX_FREEZE);
      if (!missing) a->freeze[a->n_freeze++] = v;
    } else if (VALUE("--steps")) {
      if (!missing && !sc_cli_parse_i64(v, 0, INT64_MAX / 2, &a->steps))
        return sc_cli_usage_error("--steps expects a non-negative integer, got '%s'", v);
    } else if (VALUE("--ignore-index")) {
      if (!missing && !sc_cli_parse_i64(v, INT64_MIN / 2, INT64_MAX / 2, &a->t.ignore_index))
        return sc_cli_usage_error("--ignore-index expects an integer, got '%s'", v);
    } else if (VALUE("--precision")) {
      if (!missing && strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0 &&
          strcmp(v, "fp16") != 0)
        return sc_cli_usage_error("--precision expects fp32, bf16 or fp16, got '%s'", v);
      if (!missing) {
        a->t.bf16 = strcmp(v, "bf16") == 0;
        a->t.fp16 = strcmp(v, "fp16") == 0;
      }
    } else if (VALUE("--loss-scale")) {
      if (!missing) rc = parse_double("--loss-scale", v, &a->loss_scale);
    } else if (VALUE("--save")) {
      a->save = v;
    } else if (VALUE("--resume")) {
      a->resume = v;
    } else if (VALUE("--save-every")) {
      if (!missing && !sc_cli_parse_i64(v, 1, INT64_MAX / 2, &a->save_every))
        return sc_cli_usage_error("--save-every expects a positive integer, got '%s'", v);
    } else if (VALUE("--grad-accum")) {
      int64_t k;
      if (!missing && !sc_cli_parse_i64(v, 1, 1 << 20, &k))
        return sc_cli_usage_error("--grad-accum expects a positive integer, got '%s'", v);
      if (!missing) a->t.grad_accum = (int32_t)k;
    } else if (VALUE("--threads")) {
      int64_t n;
      if (!missing && !sc_cli_parse_i64(v, 1, 4096, &n))
        return sc_cli_usage_error("--threads expects an integer in [1, 4096], got '%s'", v);
      if (!missing) a->threads = (int)n;
    } else if (VALUE("--lr")) {
      if (!missing) rc = parse_double("--lr", v, &a->lr);
    } else if (VALUE("--momentum")) {
      if (!missing) rc = parse_double("--momentum", v, &a->t.momentum);
    } else if (VALUE("--weight-decay")) {
      if (!missing) rc = parse_double("--weight-decay", v, &a->t.weight_decay);
      a->wd_given = true;
    } else if (VALUE("--eps")) {
      if (!missing) rc = parse_double("--eps", v, &a->t.eps);
    } else if (VALUE("--clip-grad-norm")) {
      if (!missing) rc = parse_double("--clip-grad-norm", v, &a->t.clip_grad_norm);
    } else if (VALUE("--betas")) {
      if (!missing && sscanf(v, "%lf,%lf", &a->t.beta1, &a->t.beta2) != 2)
        return sc_cli_usage_error("--betas expects B1,B2, got '%s'", v);
    } else if (VALUE("--lr-schedule")) {
      if (missing) {
      } else if (strcmp(v, "constant") == 0) {
        a->schedule = SC_LR_CONSTANT;
      } else if (strcmp(v, "cosine") == 0) {
        a->schedule = SC_LR_COSINE;
      } else if (strcmp(v, "linear") == 0) {
        a->schedule = SC_LR_LINEAR;
      } else {
        return sc_cli_usage_error("--lr-schedule expects constant, cosine or linear, got '%s'",
                                  v);
      }
    } else if (VALUE("--warmup-steps")) {
      if (!missing && !sc_cli_parse_i64(v, 0, INT64_MAX / 2, &a->warmup))
        return sc_cli_usage_error("--warmup-steps expects a non-negative integer, got '%s'", v);
    } else if (VALUE("--min-lr")) {
      if (!missing) rc = parse_double("--min-lr", v, &a->min_lr);
    } else if (VALUE("--on-nan")) {
      if (!missing && strcmp(v, "stop") != 0 && strcmp(v, "skip") != 0)
        return sc_cli_usage_error("--on-nan expects stop or skip, got '%s'", v);
      if (!missing) a->skip_nan = strcmp(v, "skip") == 0;
    } else if (strcmp(arg, "--nesterov") == 0) {
      a->t.nesterov = true;
    } else if (strcmp(arg, "--list-params") == 0) {
      a->list_params = true;
    } else if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
      a->quiet = true;
    } else {
      rest[(*n_rest)++] = argv[i];
    }
#undef VALUE
    if (missing) return sc_cli_usage_error("option '%s' needs a value", arg);
    if (rc) return rc;
  }
  rest[*n_rest] = NULL;
  return 0;
}

static void print_help(void) {
  printf("usage: %s\n\n"
         "Trains the model on one rank (docs/training.md): the loss, reverse-mode\n"
         "autodiff over the graph and the optimizer update become one compiled\n"
         "step, run --steps times on the data.\n\n"
         "  --data NAME=FILE.npy   the model input NAME: dim 0 counts examples\n"
         "  --labels FILE.npy      int64 class ids (cross-entropy); dim 0 examples\n"
         "  --targets FILE.npy     float targets (mse), the logits' shape per example\n"
         "  --loss KIND            cross-entropy (default: softmax over the last axis,\n"
         "                         mean over labels not equal to --ignore-index, -100),\n"
         "                         mse, or output:NAME (the model computes the loss)\n"
         "  --logits NAME          the output the loss reads (default: the only one)\n"
         "  --dim NAME=V           bind symbolic dim NAME; the batch dim is B\n"
         "  --steps N              train until step N (default 0)\n"
         "  --optimizer sgd|adamw  PyTorch's torch.optim.SGD / AdamW (default sgd)\n"
         "  --lr X                 learning rate (default 1e-3)\n"
         "  --momentum M, --nesterov, --weight-decay W (sgd 0, adamw 0.01),\n"
         "  --betas B1,B2 (0.9,0.999), --eps E (1e-8)\n"
         "  --clip-grad-norm X     scale gradients to a global norm of at most X\n"
         "  --lr-schedule KIND     constant (default), or cosine / linear decay to --min-lr\n"
         "                         (default 0) at --steps, after --warmup-steps W of\n"
         "                         linear warm-up from 0 (default 0)\n"
         "  --precision fp32|bf16|fp16  bf16/fp16: matrix products (forward and backward)\n"
         "                         in that type, weights, optimizer state and gradient\n"
         "                         sums in fp32; fp16 adds dynamic loss scaling as\n"
         "                         PyTorch's GradScaler (--loss-scale S: the first scale,\n"
         "                         default 65536): an overflowing step is skipped\n"
         "  --grad-accum K         K microbatches of B examples per optimizer step: their\n"
         "                         gradients are averaged (the loss logged is their mean)\n"
         "  --on-nan stop|skip     a non-finite loss or gradient: end with an error naming\n"
         "                         the step (default), or skip that step's update\n"
         "  --freeze GLOB          keep matching initializers fixed (repeatable)\n"
         "  --save DIR             write a checkpoint (docs/checkpoint.md) at the end, and\n"
         "                         every N steps with --save-every N; atomic\n"
         "  --resume DIR           continue from a checkpoint: its weights, optimizer state,\n"
         "                         step and data position (bit-exact); --steps is the\n"
         "                         step to reach, as without resuming\n"
         "  --log-json FILE        one JSON object per step\n"
         "  --list-params          print the trainable parameters and stop\n"
         "  --threads N, --quiet\n",
         USAGE);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct dataset {
  const char *name;
  sc_npy a;
  int64_t row_bytes;           /* bytes of one example */
  sc_tensor_view batch;        /* the program's view, data in buf */
  char *buf;
} dataset;

/* The program's data input b from file: dtype and per-example dims must
 * match; dim 0 counts examples. A step takes accum microbatches of b's
 * dim 0 examples each. Returns an exit status. */
static int load_data(const char *name, const char *file, const sc_buffer *b, int32_t accum,
                     dataset *ds) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  ds->name = name;
  if (sc_npy_read(file, &ds->a, &d) != SC_OK) {
    fprintf(stderr, "shardc: error: --data %s: %s\n", name, d.msg);
    return 1;
  }
  bool ok = ds->a.dtype == b->dtype && ds->a.rank == b->rank && b->rank >= 1 && ds->a.dims[0] >= 1;
  for (int32_t k = 1; ok && k < b->rank; k++) ok = ds->a.dims[k] == b->dims[k];
  if (!ok) {
    fprintf(stderr, "shardc: error: %s: '%s' takes %s of rank %d with per-example dims as the "
            "model's (bind the batch with --dim), the file holds %s of rank %d\n",
            file, name, sc_dtype_name(b->dtype), (int)b->rank, sc_dtype_name(ds->a.dtype),
            (int)ds->a.rank);
    return 1;
  }
  ds->row_bytes = b->bytes / (b->dims[0] > 0 ? b->dims[0] : 1);
  ds->buf = sc_malloc(b->bytes > 0 ? (size_t)b->bytes * (size_t)accum : 1);
  if (!ds->buf) return 1;
  ds->batch = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank, .data = ds->buf};
  memcpy(ds->batch.dims, b->dims, sizeof ds->batch.dims);
  ds->batch.dims[0] *= accum;
  return 0;
}

/* Examples pos … pos + B − 1 of every dataset into its batch buffer,
 * wrapping around. */
static void fill_batch(dataset *ds, int32_t n, int64_t pos) {
  for (int32_t i = 0; i < n; i++) {
    int64_t count = ds[i].a.dims[0], bsz = ds[i].batch.dims[0];
    for (int64_t r = 0; r < bsz; r++) {
      int64_t src = (pos % count + r) % count;
      memcpy(ds[i].buf + r * ds[i].row_bytes, (char *)ds[i].a.data + src * ds[i].row_bytes,
             (size_t)ds[i].row_bytes);
    }
  }
}

int sc_cmd_train(int argc, char **argv) {
  train_args a;
  memset(&a, 0, sizeof a);
  sc_train_opts_init(&a.t, SC_OPTIMIZER_SGD);
  a.lr = 1e-3;
  char *rest[MAX_ARGS];
  int n_rest = 0, rc = split_args(argc, argv, &a, rest, &n_rest);
  sc_cli_opts o;
  if (!rc) rc = sc_cli_parse(n_rest, rest, SC_CLI_DIM | SC_CLI_TIME_PASSES, USAGE, &o);
  dataset ds[MAX_DATA + 1];
  memset(ds, 0, sizeof ds);
  int32_t n_ds = 0;
  sc_build *b = NULL;
  sc_trainer *tr = NULL;
  FILE *log = NULL;
  if (!rc && o.help) {
    print_help();
    goto done;
  }
  if (!rc && a.t.loss == SC_LOSS_CROSS_ENTROPY && !a.labels && !a.list_params)
    rc = sc_cli_usage_error("cross-entropy needs --labels FILE.npy");
  if (!rc && a.t.loss == SC_LOSS_MSE && !a.targets && !a.list_params)
    rc = sc_cli_usage_error("mse needs --targets FILE.npy");
  /* PyTorch refuses these too ("Invalid learning rate", ...) */
  if (!rc && !(a.lr >= 0)) rc = sc_cli_usage_error("--lr must be >= 0, got %g", a.lr);
  if (!rc && a.t.weight_decay < 0) rc = sc_cli_usage_error("--weight-decay must be >= 0");
  if (!rc && a.t.momentum < 0) rc = sc_cli_usage_error("--momentum must be >= 0");
  if (!rc && a.t.nesterov && a.t.momentum <= 0)
    rc = sc_cli_usage_error("--nesterov needs a --momentum > 0 (as torch.optim.SGD)");
  if (!rc && (a.t.beta1 < 0 || a.t.beta1 >= 1 || a.t.beta2 < 0 || a.t.beta2 >= 1))
    rc = sc_cli_usage_error("--betas must be in [0, 1)");
  if (!rc && a.t.eps < 0) rc = sc_cli_usage_error("--eps must be >= 0");
  if (!rc && a.t.clip_grad_norm < 0) rc = sc_cli_usage_error("--clip-grad-norm must be >= 0");
  if (!rc && a.min_lr < 0) rc = sc_cli_usage_error("--min-lr must be >= 0");
  if (!rc && a.loss_scale < 0) rc = sc_cli_usage_error("--loss-scale must be > 0");
  if (!rc && a.save_every && !a.save) rc = sc_cli_usage_error("--save-every needs --save DIR");
  if (rc) goto done;

  a.t.freeze = a.freeze;
  a.t.n_freeze = a.n_freeze;
  sc_partition_args none;
  sc_partition_args_init(&none);
  sc_build_setup bs;
  sc_build_setup_init(&bs, &o);
  bs.compile.quiet = true;
  bs.build.train = &a.t;
  if ((rc = sc_partition_args_build(&none, &o, &bs.build, &b, NULL)) != 0) goto done;
  const sc_train_info *info = &b->train;
  if (a.list_params) {
    int64_t total = 0;
    for (int32_t k = 0; k < info->n_params; k++) {
      const sc_train_param *p = &info->params[k];
      const sc_value *v = &b->graph->values[p->input];
      char shape[256], count[64];
      sc_cli_format_shape(b->graph, v, shape, sizeof shape);
      sc_cli_format_count(p->numel, count, sizeof count);
      printf("%-48s %s%-20s %12s%s\n", p->name, sc_dtype_name(v->dtype), shape, count,
             p->grad < 0 ? "  (no gradient: the loss does not depend on it differentiably)" : "");
      if (p->grad >= 0) total += p->numel;
    }
    char count[64];
    sc_cli_format_count(total, count, sizeof count);
    printf("trainable: %s parameters in %d tensors\n", count, (int)info->n_trainable);
    goto done;
  }

  /* data: the program's data inputs, each from its file */
  const sc_program *p = b->program->stages[0].program;
  sc_tensor_view init[4096];
  int32_t n_init = 0;
  for (int32_t k = 0; k < info->n_params && n_init < 4096; k++) {
    const sc_value *v = &b->graph->values[info->params[k].input];
    init[n_init] = (sc_tensor_view){.name = info->params[k].name, .dtype = v->dtype,
                                    .rank = v->rank, .data = (void *)info->params[k].init};
    memcpy(init[n_init].dims, v->dims, sizeof init[n_init].dims);
    n_init++;
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_trainer_opts to = {.threads = a.threads, .beta1 = a.t.beta1, .beta2 = a.t.beta2,
                        .loss_scale = a.loss_scale};
  if (sc_trainer_create(p, init, n_init, &to, &tr, &d) != SC_OK) {
    rc = sc_cli_report(&d, o.file);
    goto done;
  }
  for (int32_t i = 0; i < sc_trainer_n_data(tr); i++) {
    const sc_buffer *db = sc_trainer_data(tr, i);
    const char *file = NULL;
    if (strcmp(db->name, "labels") == 0) file = a.labels;
    else if (strcmp(db->name, "targets") == 0) file = a.targets;
    for (int k = 0; !file && k < a.n_data; k++)
      if (strcmp(a.data_name[k], db->name) == 0) file = a.data_file[k];
    if (!file) {
      rc = sc_cli_usage_error("%s: missing --data %s=FILE.npy", o.file, db->name);
      goto done;
    }
    int32_t accum = a.t.grad_accum > 1 ? a.t.grad_accum : 1;
    if ((rc = load_data(db->name, file, db, accum, &ds[n_ds++])) != 0) goto done;
  }
  for (int k = 0; k < a.n_data; k++) {
    bool used = false;
    for (int32_t i = 0; i < n_ds; i++) used |= strcmp(ds[i].name, a.data_name[k]) == 0;
    if (!used) {
      rc = sc_cli_usage_error("%s: --data %s: the model has no input named '%s'", o.file,
                              a.data_name[k], a.data_name[k]);
      goto done;
    }
  }
  /* labels: in [0, classes) or the ignore index, before step 1 */
  for (int32_t i = 0; i < n_ds && a.t.loss == SC_LOSS_CROSS_ENTROPY; i++) {
    if (strcmp(ds[i].name, "labels") != 0) continue;
    int32_t y = -1;
    for (int32_t j = 0; j < b->graph->n_outputs && y < 0; j++)
      if (!a.t.logits || strcmp(b->graph->values[b->graph->outputs[j]].name, a.t.logits) == 0)
        y = b->graph->outputs[j];
    int64_t classes = y >= 0 ? b->graph->values[y].dims[b->graph->values[y].rank - 1] : 0;
    int64_t n = 1;
    for (int32_t k = 0; k < ds[i].a.rank; k++) n *= ds[i].a.dims[k];
    for (int64_t e = 0; e < n; e++) {
      int64_t l = sc_load_i64(ds[i].a.dtype, ds[i].a.data, e);
      if ((l < 0 || l >= classes) && l != a.t.ignore_index) {
        fprintf(stderr, "shardc: error: %s: label %lld at element %lld is not a class id in "
                "[0, %lld) nor the ignore index %lld\n", a.labels, (long long)l, (long long)e,
                (long long)classes, (long long)a.t.ignore_index);
        rc = 1;
        goto done;
      }
    }
  }
  if (a.log_json && !(log = fopen(a.log_json, "w"))) {
    fprintf(stderr, "shardc: error: %s: cannot write the log\n", a.log_json);
    rc = 1;
    goto done;
  }
  if (!a.quiet)
    printf("training %lld parameters in %d tensors, %s, lr %g, %lld steps\n",
           (long long)info->trainable_numel, (int)info->n_trainable,
           a.t.optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw", a.lr, (long long)a.steps);
  if (!a.quiet) {
    int32_t in_place, n_state = sc_trainer_state_count(tr, &in_place);
    char arena[32];
    sc_stats_format_bytes((double)sc_trainer_arena_bytes(tr), arena, sizeof arena);
    printf("memory: arena %s, allocated once; %d of %d state tensors updated in place\n", arena,
           (int)in_place, (int)n_state);
  }
  sc_tensor_view batch[MAX_DATA + 1];
  for (int32_t i = 0; i < n_ds; i++) batch[i] = ds[i].batch;
  int64_t first = 1, pos = 0, per_step = n_ds ? ds[0].batch.dims[0] : 0;
  const char *opt_name = a.t.optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw";
  char hyper[512];
  snprintf(hyper, sizeof hyper,
           "{\"momentum\": %.17g, \"nesterov\": %s, \"weight_decay\": %.17g, \"betas\": "
           "[%.17g, %.17g], \"eps\": %.17g, \"grad_accum\": %d, \"bf16\": %s, \"fp16\": %s}",
           a.t.momentum, a.t.nesterov ? "true" : "false", a.t.weight_decay, a.t.beta1,
           a.t.beta2, a.t.eps, a.t.grad_accum > 1 ? a.t.grad_accum : 1,
           a.t.bf16 ? "true" : "false", a.t.fp16 ? "true" : "false");
  if (a.resume) {
    sc_ckpt *ck = NULL;
    if (sc_ckpt_load(a.resume, &ck, &d) != SC_OK) {
      rc = sc_cli_report(&d, a.resume);
      goto done;
    }
    const sc_ckpt_state *cs = sc_ckpt_state_of(ck);
    sc_status st = strcmp(cs->optimizer, opt_name) != 0
                       ? sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL,
                                     "the checkpoint was trained with %s, not %s", cs->optimizer,
                                     opt_name)
                       : sc_trainer_restore(tr, ck, &d);
    first = cs->step + 1;
    pos = cs->data_position;
    sc_trainer_set_loss_scale(tr, cs->loss_scale, cs->loss_scale_growth);
    sc_ckpt_destroy(ck);
    if (st != SC_OK) {
      if (!d.file[0]) sc_diag_set_file(&d, a.resume);
      rc = sc_cli_report(&d, a.resume);
      goto done;
    }
    if (!a.quiet)
      printf("resumed from %s at step %lld\n", a.resume, (long long)(first - 1));
  }
  /* progress: one line rewritten in place on a terminal, plain lines
   * otherwise; examples per second and the time left from the mean step */
  bool live = !a.quiet && isatty(STDOUT_FILENO);
  double t_start = now_ms();
  int64_t examples = per_step;
  for (int32_t i = 0; i < n_ds; i++)
    if (strcmp(ds[i].name, "labels") != 0 && strcmp(ds[i].name, "targets") != 0) {
      examples = ds[i].batch.dims[0]; /* the model's own input: examples per step */
      break;
    }
  for (int64_t step = first; step <= a.steps; step++) {
    fill_batch(ds, n_ds, pos);
    pos += per_step;
    double loss = 0, norm = 0, t0 = now_ms();
    double lr = sc_lr_at(a.schedule, a.lr, a.min_lr, a.warmup, a.steps, step);
    bool applied = true;
    if (sc_trainer_step(tr, batch, n_ds, lr, step, &loss, &norm, &applied, &d) != SC_OK) {
      rc = sc_cli_report(&d, o.file);
      goto done;
    }
    double ms = now_ms() - t0;
    bool overflow = !applied && a.t.fp16 && isfinite(loss); /* the scaler's skip */
    if (!applied && !overflow && !a.skip_nan) {
      fprintf(stderr, "shardc: error: step %lld: the loss is %g and the gradient norm %g "
              "(--on-nan skip skips such steps)\n", (long long)step, loss, norm);
      rc = 1;
      goto done;
    }
    if (!a.quiet) {
      double spent = (now_ms() - t_start) / 1e3, per = spent / (double)(step - first + 1);
      double eta = per * (double)(a.steps - step);
      printf("%sstep %lld/%lld  loss %.6f  lr %.3g  grad_norm %.4g  %.2f ms  %.0f examples/s  "
             "ETA %.0f s%s%s",
             live ? "\r" : "", (long long)step, (long long)a.steps, loss, lr, norm, ms,
             per > 0 ? (double)examples / per : 0.0, eta,
             applied ? "" : overflow ? "  (skipped: fp16 overflow, loss scale halved)"
                                     : "  (skipped: not finite)",
             live ? (step == a.steps ? "\n" : "\033[K") : "\n");
      if (live) fflush(stdout);
    }
    if (log) { /* JSON has no NaN or infinity: null */
      char ls[32] = "null", ns[32] = "null";
      if (isfinite(loss)) snprintf(ls, sizeof ls, "%.9g", loss);
      if (isfinite(norm)) snprintf(ns, sizeof ns, "%.9g", norm);
      char scale[64] = "";
      if (a.t.fp16)
        snprintf(scale, sizeof scale, ", \"loss_scale\": %.17g", sc_trainer_loss_scale(tr, NULL));
      fprintf(log, "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
              "\"time_ms\": %.4f%s%s}\n", (long long)step, ls, lr, ns, ms,
              applied ? "" : ", \"skipped\": true", scale);
    }
    if (a.save && ((a.save_every && step % a.save_every == 0) || step == a.steps)) {
      int64_t growth = 0;
      double scale = sc_trainer_loss_scale(tr, &growth);
      sc_ckpt_state cs = {.step = step, .data_position = pos, .schedule_position = step,
                          .loss_scale = scale, .loss_scale_growth = growth,
                          .optimizer = opt_name, .optimizer_json = hyper};
      if (sc_trainer_save(tr, a.save, &cs, &d) != SC_OK) {
        rc = sc_cli_report(&d, a.save);
        goto done;
      }
    }
  }
done:
  if (log && fclose(log) != 0 && !rc) {
    fprintf(stderr, "shardc: error: %s: cannot write the log\n", a.log_json);
    rc = 1;
  }
  fflush(stdout);
  sc_trainer_destroy(tr);
  for (int32_t i = 0; i < n_ds; i++) {
    sc_npy_free(&ds[i].a);
    sc_free(ds[i].buf);
  }
  sc_build_destroy(b);
  for (int k = 0; k < a.n_data; k++) sc_free(a.data_buf[k]);
  return rc;
}
