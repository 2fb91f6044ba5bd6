/* train.c — `shardc train MODEL`: train a model, on one rank or a mesh.
 *
 * Parses the options, builds the training step (driver/driver.h with
 * sc_train_opts: loss, autodiff, optimizer; passes/train.h), reads the
 * data, runs --steps steps through runtime/trainer.h, and prints one line
 * per step — rewritten in place on a terminal — with examples per second
 * and the time left (and, with --log-json FILE, one JSON object per step:
 * step, loss, lr, grad_norm, time_ms, tokens_per_s; with --tensorboard DIR
 * the same values as TensorBoard scalars, runtime/tensorboard.h, both
 * written from one step_record). Data: every --data file's dim 0 counts
 * examples, and so does --labels' (or --targets'), the same count in
 * every file; step i takes examples (i−1)·B … i·B−1, wrapping around, B the
 * bound batch dim. Float data must be finite and labels each in [0,
 * classes) or the ignore index, checked before step 1. The JSON log is
 * created with its first line (a run that fails before leaves none).
 *
 * --grad-accum K: a step takes K·B examples, run as K microbatches.
 * --save DIR [--save-every N] writes checkpoints (runtime/checkpoint.h);
 * --resume DIR restores weights, optimizer state, step and data position,
 * so N steps, a resume, and N more equal 2N steps bit for bit.
 * A value that is not finite is written as null in the JSON log (a skipped
 * step also says "skipped": true).
 *
 * --init [GLOB=]SPEC... --seed N: parameters from an initialiser, each rank
 * writing its own pieces (runtime/param_init.h); the roles only the graph
 * knows (fan-in axis, residual projections: passes/init_roles.h) are found
 * here from the build and every parameter is checked before the trainer
 * is made. --no-weights: the model's external weights are not opened.
 * --steps 0 --save DIR saves the initial state.
 *
 * MODEL may be a training bundle (`shardc compile --train`, docs/bundle.md):
 * its program, its kernels (kernels.o; a cuda one's CUDA C, PTX and
 * CUBINs, trained on --device cuda), initial parameters and training manifest replace
 * the build; the options that shape the step (train_args.h, --dim) are
 * compiled into it and refused. Either way the trainer starts from a
 * training manifest (driver/train_bundle.h, runtime/train_bundle.h), so a
 * bundle trains bit for bit as the model it was compiled from. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver/train_bundle.h"
#include "passes/stats.h"
#include "runtime/bundle.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/dist_load.h"
#include "runtime/dist_train.h"
#include "runtime/npy.h"
#include "runtime/param_init.h"
#include "passes/init_roles.h"
#include "runtime/tensorboard.h"
#include "runtime/train_bundle.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/partition_args.h"
#include "tools/plan_auto.h"
#include "tools/train_args.h"

static const char *const USAGE =
    "shardc train (MODEL.onnx | BUNDLE) --data NAME=FILE.npy...\n"
    "                       (--labels FILE.npy | --targets FILE.npy)\n"
    "                       [--loss cross-entropy|mse|output:NAME] [--logits NAME]\n"
    "                       [--aux-loss NAME=COEF]...\n"
    "                       [--ignore-index N] [--dim NAME=V]... --steps N\n"
    "                       [--optimizer sgd|adamw] [--lr X] [--momentum M] [--nesterov]\n"
    "                       [--weight-decay W] [--betas B1,B2] [--eps E]\n"
    "                       [--clip-grad-norm X] [--lr-schedule constant|cosine|linear]\n"
    "                       [--warmup-steps W] [--min-lr X] [--on-nan stop|skip]\n"
    "                       [--grad-accum K] [--precision fp32|bf16|fp16] [--loss-scale S]\n"
    "                       [--save DIR [--save-every N]] [--resume DIR]\n"
    "                       [--freeze GLOB]... [--untie] [--no-fuse-loss]\n"
    "                       [--log-json FILE] [--log-every N]\n"
    "                       [--tensorboard DIR]\n"
    "                       [--init [GLOB=]SPEC]... [--seed N] [--init-residual-scale]\n"
    "                       [--no-weights]\n"
    "                       [--mesh dp=R,fsdp=S,tp=T,pp=P,cp=C] [--zero 1|2|3] [--no-overlap]\n"
    "                       [--hybrid-shard-degree S] [--no-reshard-after-forward]\n"
    "                       [--sequence-parallel] [--comm local|cuda-local|mpi|tcp|nccl]\n"
    "                       [--microbatches M] [--schedule gpipe|1f1b|interleaved|zb-h1]\n"
    "                       [--virtual-stages V]\n"
    "                       [--threads N] [--list-params] [--quiet]\n"
    "                       [--device cpu|cuda [--no-cuda-graph] [--no-allow-tf32]\n"
    "                        [--gpu-arch sm_NN]]\n"
    "                       [--sync-steps]";

enum { MAX_DATA = 64, MAX_ARGS = 1024 };

typedef struct train_args {
  const char *data_name[MAX_DATA], *data_file[MAX_DATA];
  char *data_buf[MAX_DATA];
  int n_data;
  const char *labels, *targets, *log_json, *save, *resume;
  const char *tensorboard;       /* --tensorboard DIR, or NULL */
  int64_t save_every;
  double loss_scale;             /* fp16: the first loss scale (0: 65536) */
  sc_train_args g;               /* the options compiled into the step */
  sc_partition_args pa;          /* --mesh and the other partition options */
  bool list_params, quiet;
  int64_t steps, warmup;
  int64_t log_every;             /* progress every N steps (0: every step) */
  double lr, min_lr;
  sc_lr_schedule schedule;
  bool skip_nan;                 /* --on-nan skip */
  bool sync_steps;               /* --sync-steps */
  int threads;
  sc_device_choice dev; /* --device, --no-cuda-graph, TF32, --gpu-arch */
  sc_param_init init;   /* --init rules, --seed */
  bool residual_scale;  /* --init-residual-scale */
  bool seed_given;      /* --seed */
} train_args;

/* Takes train's own options out of argv (the step's with train_args.h);
 * the rest go to sc_cli_parse. */
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
    int dv = sc_cli_device_option(argc, argv, &i, &a->dev);
    if (dv == 2) return 2;
    if (dv == 1) continue;
    int j = i, taken = sc_train_args_take(&a->g, argc, argv, &j);
    if (taken == 0) taken = sc_partition_args_take(&a->pa, argc, argv, &j, true);
    if (taken == 2) return 2;
    if (taken == 1) {
      i = j - 1; /* it moved past what it took; the loop steps once more */
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
    if (VALUE("--init")) {
      sc_diag d = {0};
      sc_diag_clear(&d);
      if (!missing && sc_param_init_add(&a->init, v, &d) != SC_OK)
        return sc_cli_usage_error("%s", d.msg);
    } else if (VALUE("--seed")) {
      int64_t seed;
      if (!missing && !sc_cli_parse_i64(v, 0, INT64_MAX, &seed))
        return sc_cli_usage_error("--seed expects a non-negative integer, got '%s'", v);
      if (!missing) a->init.seed = (uint64_t)seed;
      a->seed_given = true;
    } else if (strcmp(arg, "--init-residual-scale") == 0) {
      a->residual_scale = true;
    } else if (VALUE("--labels")) a->labels = v;
    else if (VALUE("--targets")) a->targets = v;
    else if (VALUE("--log-json")) a->log_json = v;
    else if (VALUE("--tensorboard")) a->tensorboard = v;
    else if (VALUE("--log-every")) {
      if (!missing && !sc_cli_parse_i64(v, 1, INT64_MAX / 2, &a->log_every))
        return sc_cli_usage_error("--log-every expects a positive integer, got '%s'", v);
    }
    else if (VALUE("--steps")) {
      if (!missing && !sc_cli_parse_i64(v, 0, INT64_MAX / 2, &a->steps))
        return sc_cli_usage_error("--steps expects a non-negative integer, got '%s'", v);
    } else if (VALUE("--loss-scale")) {
      if (!missing) rc = sc_cli_parse_number("--loss-scale", v, &a->loss_scale);
    } else if (VALUE("--save")) {
      a->save = v;
    } else if (VALUE("--resume")) {
      a->resume = v;
    } else if (VALUE("--save-every")) {
      if (!missing && !sc_cli_parse_i64(v, 1, INT64_MAX / 2, &a->save_every))
        return sc_cli_usage_error("--save-every expects a positive integer, got '%s'", v);
    } else if (VALUE("--threads")) {
      int64_t n;
      if (!missing && !sc_cli_parse_i64(v, 1, 4096, &n))
        return sc_cli_usage_error("--threads expects an integer in [1, 4096], got '%s'", v);
      if (!missing) a->threads = (int)n;
    } else if (VALUE("--lr")) {
      if (!missing) rc = sc_cli_parse_number("--lr", v, &a->lr);
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
      if (!missing) rc = sc_cli_parse_number("--min-lr", v, &a->min_lr);
    } else if (VALUE("--on-nan")) {
      if (!missing && strcmp(v, "stop") != 0 && strcmp(v, "skip") != 0)
        return sc_cli_usage_error("--on-nan expects stop or skip, got '%s'", v);
      if (!missing) a->skip_nan = strcmp(v, "skip") == 0;
    } else if (strcmp(arg, "--sync-steps") == 0) {
      a->sync_steps = true;
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
         "Trains the model (docs/training.md), on one rank or over a --mesh of ranks:\n"
         "the loss, reverse-mode autodiff over the graph and the optimizer update\n"
         "become one compiled step, run --steps times on the data. A mesh trains\n"
         "exactly as one rank does (ZeRO/FSDP, tensor and pipeline parallel,\n"
         "recompute). BUNDLE: a training bundle written by\n"
         "`shardc compile MODEL --train -o BUNDLE` (docs/bundle.md), the step and the\n"
         "options below marked * compiled into it (they are refused with it).\n\n"
         "  --data NAME=FILE.npy   the model input NAME: dim 0 counts examples\n"
         "  --labels FILE.npy      int64 class ids (cross-entropy); dim 0 examples\n"
         "  --targets FILE.npy     float targets (mse), the logits' shape per example\n"
         "  --dim NAME=V           * bind symbolic dim NAME; the batch dim is B\n"
         "  --steps N              train until step N (required)\n"
         "  --lr X                 learning rate (default 1e-3)\n"
         "  --lr-schedule KIND     constant (default), or cosine / linear decay to --min-lr\n"
         "                         (default 0) at --steps, after --warmup-steps W of\n"
         "                         linear warm-up from 0 (default 0)\n"
         "  --loss-scale S         fp16: the first loss scale (default 65536)\n"
         "  --on-nan stop|skip     a non-finite loss or gradient: end with an error naming\n"
         "                         the step (default), or skip that step's update\n"
         "  --sync-steps           cuda: wait for each step's loss before launching the\n"
         "                         next (by default it is read one step late)\n"
         "  --save DIR             write a checkpoint (docs/checkpoint.md) at the end, and\n"
         "                         every N steps with --save-every N; atomic\n"
         "  --resume DIR           continue from a checkpoint: its weights, optimizer state,\n"
         "                         step and data position (bit-exact); --steps is the\n"
         "                         step to reach, as without resuming\n"
         "  --log-json FILE        one JSON object per step\n"
         "  --tensorboard DIR      TensorBoard event files in DIR, written as the run goes\n"
         "                         (`tensorboard --logdir DIR`): the same values per step,\n"
         "                         and each rank's arena once\n"
         "  --log-every N          the progress line every N steps (and the first, the\n"
         "                         last and any skipped one; default every step)\n"
         "  --list-params          print the trainable parameters (and tied copies) and stop\n"
         "  --init [GLOB=]SPEC     parameters from an initialiser, not the model (repeatable;\n"
         "                         the first rule whose GLOB matches a name wins): normal:STD,\n"
         "                         uniform:A, zeros, ones, xavier (Glorot uniform), kaiming\n"
         "                         (He normal, fan-in, gain sqrt 2); each rank writes only its\n"
         "                         own shards, the values the same for any mesh\n"
         "  --seed N               the initialiser's seed (default 0)\n"
         "  --init-residual-scale  residual-branch output projections: std / sqrt(2 n_layers)\n"
         "  --no-weights           the model's weights are absent (shapes only): every float\n"
         "                         initializer is a parameter, each needs an --init rule\n"
         "  --threads N, --quiet\n"
         SC_CLI_DEVICE_USAGE "\n"
         "The step's options (*):\n",
         USAGE);
  sc_train_args_help(stdout);
  sc_partition_args_help(stdout, true, true);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct dataset {
  const char *name;
  const char *file;            /* the .npy file */
  char option[80];             /* how the command line named it: "--labels", "--data x" */
  sc_npy a;
  int64_t row_bytes;           /* bytes of one example */
  sc_tensor_view batch;        /* the program's view, data in buf */
  char *buf;
} dataset;

/* The program's data input b from file (option: how the command line
 * named it): dtype and per-example dims must match; dim 0 counts examples;
 * float data must be finite. A step takes accum microbatches of b's dim 0
 * examples each. Returns an exit status. */
static int load_data(const char *name, const char *option, const char *file, const sc_buffer *b,
                     int32_t accum, dataset *ds) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  ds->name = name;
  ds->file = file;
  snprintf(ds->option, sizeof ds->option, "%s", option);
  if (sc_npy_read(file, &ds->a, &d) != SC_OK) {
    fprintf(stderr, "shardc: error: %s: %s\n", option, d.msg);
    return 1;
  }
  char want[160], got[160], why[160] = "";
  sc_cli_format_type(b->dtype, b->rank, b->dims, want, sizeof want);
  sc_cli_format_type(ds->a.dtype, ds->a.rank, ds->a.dims, got, sizeof got);
  if (ds->a.dtype != b->dtype)
    snprintf(why, sizeof why, "the dtype differs");
  else if (ds->a.rank != b->rank || b->rank < 1)
    snprintf(why, sizeof why, "the rank differs");
  else if (ds->a.dims[0] < 1)
    snprintf(why, sizeof why, "it holds no examples");
  for (int32_t k = 1; !why[0] && k < b->rank; k++)
    if (ds->a.dims[k] != b->dims[k])
      snprintf(why, sizeof why, "dim %d is %lld, the model's is %lld (bind symbolic dims "
               "with --dim NAME=V)", (int)k, (long long)ds->a.dims[k], (long long)b->dims[k]);
  if (why[0]) {
    fprintf(stderr, "shardc: error: %s: '%s' takes examples of %s (dim 0 counts them), the file "
            "holds %s: %s\n", file, name, want, got, why);
    return 1;
  }
  if (sc_dtype_is_float(ds->a.dtype)) {
    int64_t n = 1;
    for (int32_t k = 0; k < ds->a.rank; k++) n *= ds->a.dims[k]; /* the file's size bounds it */
    for (int64_t e = 0; e < n; e++) {
      double v = sc_load_f64(ds->a.dtype, ds->a.data, e);
      if (!isfinite(v)) {
        fprintf(stderr, "shardc: error: %s: %s: element %lld (example %lld) is %g; training "
                "data must be finite\n", option, file, (long long)e,
                (long long)(e / (n / ds->a.dims[0])), v);
        return 1;
      }
    }
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

/* What is trained: a fresh build of MODEL, or a training bundle; either
 * way a program and its training manifest. */
typedef struct step_source {
  sc_build *build;              /* MODEL */
  sc_train_manifest *own;       /* MODEL: the build's manifest */
  sc_bundle *bundle;            /* BUNDLE (owns its manifest and kernels) */
  sc_dist_program *loaded;      /* a partitioned BUNDLE (owns its manifest) */
  const sc_program *p;
  const sc_train_manifest *m;
  const sc_dist_program *mesh;  /* the partitioned step, or NULL: one rank */
} step_source;

static void source_free(step_source *src) {
  sc_train_manifest_destroy(src->own);
  sc_build_destroy(src->build);
  sc_bundle_destroy(src->bundle);
  sc_dist_program_destroy(src->loaded);
}

static bool is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The parameters, shapes and counts of MODEL (those without a gradient
 * said so), as --list-params prints them. */
/* One --list-params line: name, dtype and shape, element count. */
static int64_t list_param(const char *name, sc_dtype t, int32_t rank, const int64_t *dims,
                          const char *note) {
  char shape[256] = "[", count[64];
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) {
    size_t n = strlen(shape);
    snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "," : "", (long long)dims[d]);
    numel *= dims[d];
  }
  strncat(shape, "]", sizeof shape - strlen(shape) - 1);
  sc_cli_format_count(numel, count, sizeof count);
  printf("%-48s %s%-20s %12s%s\n", name, sc_dtype_name(t), shape, count, note);
  return numel;
}

/* The model's shape of manifest parameter q, whose global input is gv:
 * its own shape where ZeRO-3 stores it flat, else the input's; a
 * vocabulary-padded copy's with the model's rows. Returns the rank. */
static int32_t model_shape(const sc_train_manifest_param *q, const sc_dist_value *gv,
                           int64_t *dims) {
  int32_t rank = q->rank > 0 ? q->rank : gv->rank;
  memcpy(dims, q->rank > 0 ? q->dims : gv->dims, SC_MAX_RANK * sizeof *dims);
  if (q->vocab > 0 && q->vocab_dim < rank) dims[q->vocab_dim] = q->vocab;
  return rank;
}

/* The --list-params note of the model's tensor that the step holds as its
 * vocabulary-padded copy `step`, of `rows` rows. */
static void padded_note(char *note, size_t cap, const char *step, int64_t rows) {
  snprintf(note, cap, "  (the step's %s: %lld rows for tp)", step, (long long)rows);
}

static void list_model_params(const sc_build *b) {
  const sc_train_info *info = &b->train;
  int64_t total = 0;
  for (int32_t k = 0; k < info->n_params; k++) {
    const sc_train_param *p = &info->params[k];
    char note[600] = "";
    int64_t dims[SC_MAX_RANK];
    memcpy(dims, p->dims, sizeof dims);
    if (p->model_name && p->vocab_dim < p->rank) { /* the model's tensor, padded for tp */
      padded_note(note, sizeof note, p->name, dims[p->vocab_dim]);
      dims[p->vocab_dim] = p->vocab;
    }
    if (p->grad < 0)
      snprintf(note, sizeof note, "  (no gradient: the loss does not depend on it differentiably)");
    list_param(p->model_name ? p->model_name : p->name, p->dtype, p->rank, dims, note);
    if (p->grad >= 0) total += sc_train_param_model_numel(p);
  }
  for (int32_t k = 0; k < info->n_ties; k++)
    printf("%s: tied to %s (its transpose)\n", info->ties[k].name, info->ties[k].source);
  char count[64];
  sc_cli_format_count(total, count, sizeof count);
  printf("trainable: %s parameters in %d tensors\n", count, (int)info->n_trainable);
}

/* The same for a bundle: its manifest's parameters (all trainable). */
static void list_bundle_params(const sc_program *p, const sc_train_manifest *m) {
  int64_t total = 0;
  for (int32_t k = 0; k < m->n_params; k++) {
    const sc_buffer *b = &p->buffers[m->params[k].buffer];
    total += list_param(b->name, b->dtype, b->rank, b->dims, "");
  }
  char count[64];
  sc_cli_format_count(total, count, sizeof count);
  printf("trainable: %s parameters in %d tensors\n", count, (int)m->n_params);
}

/* MODEL built into a training step (or, with --list-params, listed). */
static int build_step(train_args *a, const sc_cli_opts *o, step_source *src) {
  a->g.budget_for_search = a->pa.auto_plan;
  int rc = sc_train_args_finish(&a->g);
  if (rc) return rc;
  /* --mesh auto: the planner chooses the mesh, ZeRO, schedule, recompute */
  if (a->pa.auto_plan && (rc = sc_plan_auto_resolve(&a->pa, o, &a->g)) != 0) return rc;
  if (o->no_weights && !a->init.n_rules)
    return sc_cli_usage_error("--no-weights needs --init rules: the parameters have no values");
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, &a->pa);
  bs.compile.quiet = true;
  /* shapes only: every float initializer is a parameter (none tied) */
  bs.build.no_weights = a->g.t.shape_only = o->no_weights;
  if (!sc_device_choice_is_cpu(&a->dev)) bs.compile.workspace_bytes = SC_GEMM_WORKSPACE_BYTES;
  bs.build.no_fuse_attention = !sc_device_choice_runs_attention(&a->dev);
  /* a pipeline rank's pieces read and update its state in place on the
   * CPU; a GPU's arena is device memory, the state is copied there */
  bs.compile.bind_state = sc_device_choice_is_cpu(&a->dev);
  if ((rc = sc_train_args_build(&a->g, &a->pa, o, &bs.build, &src->build)) != 0) return rc;
  if (a->list_params) {
    list_model_params(src->build);
    return -1; /* done */
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_build_train_manifest(src->build, &a->g.t, &src->own, &d) != SC_OK)
    return sc_cli_report(&d, o->file);
  if (src->build->part) sc_partition_print_fallbacks(src->build->part, stderr, "shardc: warning: ");
  src->p = src->build->program->stages[0].program;
  src->m = src->own;
  src->mesh = src->build->part ? src->build->program : NULL;
  return 0;
}

/* BUNDLE, a training bundle: the options it has compiled in are refused. */
static int open_bundle(const train_args *a, const sc_cli_opts *o, step_source *src) {
  int rc = sc_train_args_refuse_with_bundle(&a->g, o->file);
  if (rc) return rc;
  if (a->residual_scale || o->no_weights)
    return sc_cli_usage_error("%s: %s needs the model (a bundle has its weights and not the "
                              "graph)", o->file,
                              a->residual_scale ? "--init-residual-scale" : "--no-weights");
  if (sc_partition_args_any(&a->pa))
    return sc_cli_usage_error("%s: the mesh and its options are compiled into the bundle "
                              "(give them to shardc compile --train)", o->file);
  if (o->n_dims > 0)
    return sc_cli_usage_error("%s: --dim is compiled into the bundle (give it to shardc "
                              "compile --train)", o->file);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_dist_bundle_is_dir(o->file)) { /* partitioned */
    if (sc_dist_program_load(o->file, &src->loaded, &d) != SC_OK ||
        sc_bundle_kind_check(src->loaded->train != NULL, true, &d) != SC_OK)
      return sc_cli_report(&d, o->file);
    src->mesh = src->loaded;
    src->m = src->loaded->train;
    src->p = src->loaded->stages[0].program;
    if (a->list_params) {
      int64_t total = 0;
      for (int32_t k = 0; k < src->m->n_params; k++) {
        const sc_train_manifest_param *q = &src->m->params[k];
        int32_t gi = sc_dist_find_input(src->mesh, q->name);
        const sc_dist_value *v = &src->mesh->inputs[gi]; /* the manifest's are inputs */
        char model[1024], note[1100] = "";
        int64_t dims[SC_MAX_RANK];
        int32_t rank = model_shape(q, v, dims);
        const sc_train_manifest_param *same = NULL;
        bool padded = q->vocab > 0 && q->vocab_dim < rank &&
                      sc_train_vocab_model_name(src->m, q->name, model, sizeof model, &same);
        if (padded) /* the model's tensor, padded for tp */
          padded_note(note, sizeof note, q->name, (q->rank > 0 ? q->dims : v->dims)[q->vocab_dim]);
        total += list_param(padded ? model : v->name, v->dtype, rank, dims, note);
      }
      char count[64], mesh[256];
      sc_cli_format_count(total, count, sizeof count);
      sc_mesh_format(&src->mesh->mesh, mesh, sizeof mesh);
      printf("trainable: %s parameters in %d tensors (mesh %s)\n", count, (int)src->m->n_params,
             mesh);
      return -1;
    }
    return 0;
  }
  if (sc_bundle_load(o->file, &src->bundle, &d) != SC_OK ||
      sc_bundle_check_kind(src->bundle, true, &d) != SC_OK)
    return sc_cli_report(&d, o->file);
  bool cuda = strcmp(src->bundle->target, "cuda") == 0;
  if (cuda != !sc_device_choice_is_cpu(&a->dev) && (a->dev.name || !cuda))
    return sc_cli_usage_error("%s: a %s training bundle trains on --device %s (compile the "
                              "model with --target %s to train on the %s)", o->file,
                              src->bundle->target, src->bundle->target,
                              cuda ? "cpu" : "cuda", cuda ? "CPU" : "GPU");
  src->p = src->bundle->program;
  src->m = src->bundle->train;
  if (a->list_params) {
    list_bundle_params(src->p, src->m);
    return -1;
  }
  return 0;
}

/* --init: each parameter's role from the build's graph (fan-in axis, a
 * residual branch's projection, a padded copy's logical name and dims)
 * into roles[m->n_params] (the caller frees it), then every parameter
 * checked: an initialiser that cannot apply, or a parameter without a
 * value and without a rule, ends the run before anything is allocated.
 * Prints how many parameters the rules give. */
static int setup_init(train_args *a, const sc_cli_opts *o, const step_source *src,
                      sc_param_init_role **roles_out) {
  const sc_train_manifest *m = src->m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  /* the roles, then the model names of vocabulary-padded copies, in one
   * block (the caller frees it) */
  size_t room = ((size_t)m->n_params + 1) * sizeof(sc_param_init_role), name_bytes = 0;
  for (int32_t k = 0; k < m->n_params; k++)
    if (m->params[k].vocab > 0) name_bytes += strlen(m->params[k].name) + 1;
  sc_param_init_role *roles = sc_calloc(room + name_bytes + 1, 1);
  char *model_names = roles ? (char *)roles + room : NULL;
  const char **names = sc_calloc((size_t)m->n_params + 1, sizeof *names);
  *roles_out = roles;
  if (!roles || !names) {
    sc_free(names);
    return sc_cli_usage_error("out of memory");
  }
  sc_init_roles found = {0};
  int rc = 0;
  for (int32_t k = 0; k < m->n_params; k++) names[k] = m->params[k].name;
  if (src->build && sc_init_roles_find(src->build->graph, names, m->n_params, &found, &d) != SC_OK)
    rc = sc_cli_report(&d, o->file);
  int64_t n_layers = found.n_residual / 2;
  if (!rc && a->residual_scale && (found.n_residual == 0 || found.n_residual % 2))
    rc = sc_cli_usage_error("%s: --init-residual-scale: found %d residual-branch projections "
                            "(a MatMul whose output is added back to the stream it reads), "
                            "not two per block", o->file, (int)found.n_residual);
  for (int32_t k = 0; !rc && k < m->n_params; k++) {
    sc_param_init_role *r = &roles[k];
    r->name = names[k];
    r->fan_in_last = found.fan_in_last && found.fan_in_last[k];
    if (a->residual_scale && found.residual && found.residual[k])
      r->scale = 1.0 / sqrt(2.0 * (double)n_layers);
    const sc_train_manifest_param *q = &m->params[k];
    if (q->vocab > 0) { /* a vocabulary-padded copy: hashed and indexed as the model's tensor */
      const sc_train_manifest_param *same = NULL;
      int32_t gi = src->mesh ? sc_dist_find_input(src->mesh, q->name) : -1;
      const sc_dist_value *gv = gi >= 0 ? &src->mesh->inputs[gi] : NULL;
      if ((q->rank <= 0 && !gv) || /* padding is a mesh's: never without one */
          !sc_train_vocab_model_name(m, q->name, model_names, strlen(q->name) + 1, &same))
        continue;
      r->logical = model_names;
      model_names += strlen(model_names) + 1;
      r->rank = model_shape(q, gv, r->dims);
    }
  }
  sc_init_roles_free(&found);
  sc_free(names);
  if (rc) return rc;
  a->init.roles = roles;
  a->init.n_roles = m->n_params;
  int32_t n_init = 0;
  if (sc_param_init_check_params(&a->init, m, src->p, src->mesh, &n_init, &d) != SC_OK)
    return sc_cli_report(&d, o->file);
  if (!a->quiet)
    printf("init: %d of %d parameter tensors from --init (seed %llu%s), the others from the "
           "model\n", (int)n_init, (int)m->n_params, (unsigned long long)a->init.seed,
           a->residual_scale ? "; residual projections scaled" : "");
  return 0;
}

/* The steps run on one rank (a trainer) or on every rank of a mesh (a
 * distributed trainer, runtime/dist_train.h: the same calls with global
 * data and whole state). */
typedef struct runner {
  sc_trainer *one;
  sc_dist_trainer *dist;
} runner;

static int32_t run_n_data(const runner *r) {
  return r->dist ? sc_dist_trainer_n_data(r->dist) : sc_trainer_n_data(r->one);
}
static const sc_buffer *run_data(const runner *r, int32_t i) {
  return r->dist ? sc_dist_trainer_data(r->dist, i) : sc_trainer_data(r->one, i);
}
static double run_loss_scale(const runner *r, int64_t *growth) {
  return r->dist ? sc_dist_trainer_loss_scale(r->dist, growth)
                 : sc_trainer_loss_scale(r->one, growth);
}

/* One step's figures as --log-json and --tensorboard write them: both
 * from this record, so the two logs cannot differ. */
typedef struct step_record {
  int64_t step;
  double loss;                 /* the step's batch loss, before its update */
  double lr, grad_norm;
  double time_ms;              /* the step's own time */
  double tokens_per_s;         /* its tokens (tokens_per_step) / time_ms */
  double loss_scale;           /* fp16: the scale after the step */
  bool fp16, skipped;
} step_record;

/* Tokens a step takes: the elements of the model's first integer input
 * (token ids, [B, S] for a language model), else its examples. */
static int64_t tokens_per_step(const dataset *ds, int32_t n_ds, int64_t examples) {
  for (int32_t i = 0; i < n_ds; i++) {
    if (strcmp(ds[i].name, "labels") == 0 || strcmp(ds[i].name, "targets") == 0 ||
        !sc_dtype_is_int(ds[i].batch.dtype))
      continue;
    int64_t n = 1;
    for (int32_t k = 0; k < ds[i].batch.rank; k++) n *= ds[i].batch.dims[k];
    return n;
  }
  return examples;
}

/* A line of the JSON log, flushed (JSON has no NaN or infinity: null).
 * false when the write failed (errno set). */
static bool write_json_step(FILE *log, const step_record *r) {
  char ls[32] = "null", ns[32] = "null", scale[64] = "";
  if (isfinite(r->loss)) snprintf(ls, sizeof ls, "%.9g", r->loss);
  if (isfinite(r->grad_norm)) snprintf(ns, sizeof ns, "%.9g", r->grad_norm);
  if (r->fp16) snprintf(scale, sizeof scale, ", \"loss_scale\": %.17g", r->loss_scale);
  fprintf(log, "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
          "\"time_ms\": %.4f, \"tokens_per_s\": %.9g%s%s}\n", (long long)r->step, ls, r->lr, ns,
          r->time_ms, r->tokens_per_s, r->skipped ? ", \"skipped\": true" : "", scale);
  return fflush(log) == 0; /* a line per step as it ends, for whoever follows the file */
}

/* The step's scalars, one TensorBoard event (docs/training.md lists the
 * tags). */
static sc_status write_tensorboard_step(sc_tensorboard *tb, const step_record *r, sc_diag *d) {
  const sc_tensorboard_scalar s[] = {
      {"train/loss", r->loss},           {"train/learning_rate", r->lr},
      {"train/grad_norm", r->grad_norm}, {"train/tokens_per_second", r->tokens_per_s},
      {"train/step_time_ms", r->time_ms}, {"train/loss_scale", r->loss_scale}};
  return sc_tensorboard_write_scalars(tb, r->step, s, r->fp16 ? 6 : 5, d);
}

/* --tensorboard DIR: this process's event file, opened before step 1 (an
 * unwritable DIR ends the run before any step), with the arena of each
 * rank the process runs (memory/rank_R/arena_bytes), once, at step
 * `first`. */
static sc_status open_tensorboard(const char *dir, const runner *tr, bool per_process,
                                  int64_t first, sc_tensorboard **tb, sc_diag *d) {
  int64_t n = tr->dist && !per_process ? sc_dist_trainer_ranks(tr->dist) : 1;
  int64_t rank = tr->dist ? sc_dist_trainer_rank(tr->dist) : 0; /* of index 0 */
  sc_tensorboard_scalar *s = sc_calloc((size_t)n, sizeof *s);
  char(*tags)[64] = sc_calloc((size_t)n, sizeof *tags);
  sc_status st = s && tags ? SC_OK : sc_diag_nomem(d, (uint64_t)n * (sizeof *s + sizeof *tags),
                                                         "TensorBoard tags");
  for (int64_t r = 0; st == SC_OK && r < n; r++) {
    snprintf(tags[r], sizeof tags[r], "memory/rank_%lld/arena_bytes", (long long)(rank + r));
    s[r].tag = tags[r];
    s[r].value = (double)(tr->dist ? sc_dist_trainer_arena_bytes(tr->dist, r)
                                   : sc_trainer_arena_bytes(tr->one));
  }
  if (st == SC_OK) st = sc_tensorboard_open(dir, tb, d);
  if (st == SC_OK) st = sc_tensorboard_write_scalars(*tb, first, s, (int32_t)n, d);
  sc_free(s);
  sc_free(tags);
  return st;
}

/* Every data input of the step from its file (--data, --labels,
 * --targets); every --data names one. */
static int load_all_data(const train_args *a, const sc_cli_opts *o, const runner *tr,
                         int32_t accum, dataset *ds, int32_t *n_ds) {
  for (int32_t i = 0; i < run_n_data(tr); i++) {
    const sc_buffer *db = run_data(tr, i);
    const char *file = NULL;
    if (strcmp(db->name, "labels") == 0) file = a->labels;
    else if (strcmp(db->name, "targets") == 0) file = a->targets;
    for (int k = 0; !file && k < a->n_data; k++)
      if (strcmp(a->data_name[k], db->name) == 0) file = a->data_file[k];
    if (!file) return sc_cli_usage_error("%s: missing --data %s=FILE.npy", o->file, db->name);
    char option[80];
    if (file == a->labels || file == a->targets)
      snprintf(option, sizeof option, "--%s", db->name);
    else
      snprintf(option, sizeof option, "--data %.60s", db->name);
    int rc = load_data(db->name, option, file, db, accum, &ds[(*n_ds)++]);
    if (rc) return rc;
    const dataset *x = &ds[0], *y = &ds[*n_ds - 1];
    if (x->a.dims[0] != y->a.dims[0]) {
      fprintf(stderr, "shardc: error: %s (%s) holds %lld examples but %s (%s) %lld; every data "
              "file needs one row per example\n", x->option, x->file, (long long)x->a.dims[0],
              y->option, y->file, (long long)y->a.dims[0]);
      return 1;
    }
  }
  for (int k = 0; k < a->n_data; k++) {
    bool used = false;
    for (int32_t i = 0; i < *n_ds; i++) used |= strcmp(ds[i].name, a->data_name[k]) == 0;
    if (!used)
      return sc_cli_usage_error("%s: --data %s: the model has no input named '%s'", o->file,
                                a->data_name[k], a->data_name[k]);
  }
  return 0;
}

/* Cross-entropy's labels: each in [0, classes) or the ignore index, before
 * step 1. */
static int check_labels(const train_args *a, const sc_train_manifest *m, const dataset *ds,
                        int32_t n_ds) {
  for (int32_t i = 0; i < n_ds && strcmp(m->loss, "cross-entropy") == 0; i++) {
    if (strcmp(ds[i].name, "labels") != 0) continue;
    int64_t n = 1;
    for (int32_t k = 0; k < ds[i].a.rank; k++) n *= ds[i].a.dims[k];
    for (int64_t e = 0; e < n; e++) {
      int64_t l = sc_load_i64(ds[i].a.dtype, ds[i].a.data, e);
      if ((l < 0 || l >= m->classes) && l != m->ignore_index) {
        fprintf(stderr, "shardc: error: %s: label %lld at element %lld is not a class id in "
                "[0, %lld) nor the ignore index %lld\n", a->labels, (long long)l, (long long)e,
                (long long)m->classes, (long long)m->ignore_index);
        return 1;
      }
    }
  }
  return 0;
}

/* A checkpoint's error: its messages name the folder already (the
 * trainer's may not). */
static int report_ckpt(sc_diag *d, const char *dir) {
  size_t n = strlen(dir);
  bool named = strncmp(d->msg, dir, n) == 0 && d->msg[n] == ':';
  return sc_cli_report(d, named || d->file[0] ? NULL : dir);
}

/* --resume: the trainer's state, step and data position from a
 * checkpoint of the same optimizer. */
static int resume(const train_args *a, runner *tr, const char *opt_name, int64_t *first,
                  int64_t *pos) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_ckpt *ck = NULL;
  if (sc_ckpt_load(a->resume, &ck, &d) != SC_OK) return report_ckpt(&d, a->resume);
  const sc_ckpt_state *cs = sc_ckpt_state_of(ck);
  sc_status st = strcmp(cs->optimizer, opt_name) != 0
                     ? sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL,
                                   "the checkpoint was trained with %s, not %s", cs->optimizer,
                                   opt_name)
                 : tr->dist ? sc_dist_trainer_restore(tr->dist, ck, &d)
                            : sc_trainer_restore(tr->one, ck, &d);
  *first = cs->step + 1;
  *pos = cs->data_position;
  if (tr->dist) sc_dist_trainer_set_loss_scale(tr->dist, cs->loss_scale, cs->loss_scale_growth);
  else sc_trainer_set_loss_scale(tr->one, cs->loss_scale, cs->loss_scale_growth);
  sc_ckpt_destroy(ck);
  if (st != SC_OK) return report_ckpt(&d, a->resume);
  if (!a->quiet) printf("resumed from %s at step %lld\n", a->resume, (long long)(*first - 1));
  return 0;
}

/* A checkpoint of the state after `step` into dir; an exit status. */
static int save_at(const char *dir, const runner *tr, const char *optimizer, const char *hyper,
                   int64_t step, int64_t pos, bool per_process) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  int64_t growth = 0;
  double scale = run_loss_scale(tr, &growth);
  sc_ckpt_state cs = {.step = step, .data_position = pos, .schedule_position = step,
                      .loss_scale = scale, .loss_scale_growth = growth, .optimizer = optimizer,
                      .optimizer_json = hyper};
  if ((tr->dist ? sc_dist_trainer_save(tr->dist, dir, &cs, &d)
                : sc_trainer_save(tr->one, dir, &cs, &d)) == SC_OK)
    return 0;
  int rc = report_ckpt(&d, dir);
  if (per_process) sc_dist_trainer_abort(tr->dist, d.msg); /* the others wait in a step */
  return rc;
}

/* The usage errors found before anything is read. */
static int check_run_args(const train_args *a) {
  /* PyTorch refuses these too ("Invalid learning rate", ...) */
  if (!(a->lr >= 0)) return sc_cli_usage_error("--lr must be >= 0, got %g", a->lr);
  if (a->min_lr < 0) return sc_cli_usage_error("--min-lr must be >= 0");
  if (a->loss_scale < 0) return sc_cli_usage_error("--loss-scale must be > 0");
  if (a->save_every && !a->save) return sc_cli_usage_error("--save-every needs --save DIR");
  if (a->steps < 0 && !a->list_params)
    return sc_cli_usage_error("--steps N is required: the step to train until (with --resume, "
                              "the step to reach)");
  return 0;
}

int sc_cmd_train(int argc, char **argv) {
  train_args a;
  memset(&a, 0, sizeof a);
  sc_train_args_init(&a.g);
  sc_partition_args_init(&a.pa);
  a.lr = 1e-3;
  a.steps = -1; /* required */
  char *rest[MAX_ARGS];
  int n_rest = 0, rc = split_args(argc, argv, &a, rest, &n_rest);
  sc_cli_opts o;
  if (!rc) rc = sc_cli_parse(n_rest, rest, SC_CLI_DIM | SC_CLI_TIME_PASSES | SC_CLI_NO_WEIGHTS,
                           USAGE, &o);
  dataset ds[MAX_DATA + 1];
  memset(ds, 0, sizeof ds);
  int32_t n_ds = 0;
  step_source src = {0};
  runner run = {0}, *tr = &run;
  sc_param_init_role *roles = NULL; /* --init's, borrowed by a.init */
  sc_comm *world = NULL; /* --comm mpi: this process is one rank */
  FILE *log = NULL;
  sc_tensorboard *tb = NULL;
  sc_diag tb_diag = {0}; /* the event file's close */
  if (!rc && o.help) {
    print_help();
    goto done;
  }
  if (!rc) rc = check_run_args(&a);
  if (!rc) rc = is_dir(o.file) ? open_bundle(&a, &o, &src) : build_step(&a, &o, &src);
  if (!rc && src.bundle && strcmp(src.bundle->target, "cuda") == 0)
    a.dev.name = "cuda"; /* its default device, as `shardc run`'s */
  if (rc) {
    if (rc < 0) rc = 0; /* --list-params */
    goto done;
  }
  const sc_train_manifest *m = src.m;
  bool fp16 = strcmp(m->precision, "fp16") == 0;
  if (strcmp(m->loss, "cross-entropy") == 0 && !a.labels)
    rc = sc_cli_usage_error("cross-entropy needs --labels FILE.npy");
  if (strcmp(m->loss, "mse") == 0 && !a.targets)
    rc = sc_cli_usage_error("mse needs --targets FILE.npy");
  if (!rc && (a.init.n_rules || a.residual_scale || a.seed_given))
    rc = a.init.n_rules ? setup_init(&a, &o, &src, &roles)
                        : sc_cli_usage_error("%s goes with --init rules",
                                             a.residual_scale ? "--init-residual-scale"
                                                              : "--seed");
  if (rc) goto done;

  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_trainer_opts to = {.threads = a.threads, .device = a.dev, .loss_scale = a.loss_scale,
                        .sync_steps = a.sync_steps,
                        .cpu_module = src.bundle ? src.bundle->kernels : NULL,
                        .cuda = sc_bundle_cuda_code(src.bundle),
                        .init = a.init.n_rules ? &a.init : NULL};
  bool per_process = sc_partition_comm_is_world(a.pa.comm);
  if (per_process && !src.mesh) {
    rc = sc_cli_usage_error("--comm %s needs --mesh AXES (one rank per process)", a.pa.comm);
    goto done;
  }
  if ((rc = sc_partition_comm_device_check(a.pa.comm, &a.dev)) != 0) goto done;
  to.device.comm_on_device = sc_partition_comm_on_device(a.pa.comm);
  if (per_process && (sc_partition_world(a.pa.comm, src.mesh, m, &world, &d) != SC_OK ||
                      sc_partition_world_check(a.pa.comm, world, src.mesh->mesh.n_ranks, &d) !=
                          SC_OK)) {
    rc = sc_cli_report(&d, o.file);
    goto done;
  }
  if (src.mesh ? sc_dist_trainer_create(src.mesh, m, &to, world, &run.dist, &d) != SC_OK
          : sc_trainer_create_manifest(src.p, m, &to, &run.one, &d) != SC_OK) {
    rc = sc_cli_report(&d, o.file);
    goto done;
  }
  bool speaks = !run.dist || sc_dist_trainer_rank(run.dist) == 0;
  if (!speaks) { /* rank 0 speaks and logs */
    a.quiet = true;
    a.log_json = NULL;
  }
  for (int32_t k = 0; src.build && k < src.build->train.n_ties && !a.quiet; k++)
    fprintf(stderr, "shardc: note: %s is the transpose of %s: trained as that one parameter "
            "(tied, as in PyTorch; --untie trains it apart)\n", src.build->train.ties[k].name,
            src.build->train.ties[k].source);
  /* the trainer holds the weights now: the model's copy goes (the memory
   * of the step is then the plan's) */
  if (src.build) sc_build_release_initial_weights(src.build, src.own);
  if ((rc = load_all_data(&a, &o, tr, m->grad_accum, ds, &n_ds)) != 0 ||
      (rc = check_labels(&a, m, ds, n_ds)) != 0)
    goto done;
  if (n_ds && !a.quiet && ds[0].a.dims[0] < ds[0].batch.dims[0] * m->grad_accum)
    fprintf(stderr, "shardc: note: the data hold %lld examples, fewer than the %lld a step "
            "takes: examples repeat within each step\n", (long long)ds[0].a.dims[0],
            (long long)(ds[0].batch.dims[0] * m->grad_accum));
  if (!a.quiet) {
    int64_t numel = 0;
    for (int32_t k = 0; k < m->n_params; k++) {
      const sc_dist_program *dp = src.mesh;
      int32_t gi = dp ? sc_dist_find_input(dp, m->params[k].name) : -1;
      int64_t n = 1;
      for (int32_t i = 0; gi >= 0 && i < dp->inputs[gi].rank; i++) n *= dp->inputs[gi].dims[i];
      const sc_buffer *pb = &src.p->buffers[m->params[k].buffer];
      n = gi >= 0 ? n : pb->bytes / (int64_t)sc_dtype_size(pb->dtype);
      if (m->params[k].vocab > 0 && gi >= 0) { /* a padded copy: the model's tensor */
        int64_t md[SC_MAX_RANK];
        int32_t r = model_shape(&m->params[k], &dp->inputs[gi], md);
        n = 1;
        for (int32_t i = 0; i < r; i++) n *= md[i];
      }
      numel += n;
    }
    printf("training %lld parameters in %d tensors, %s, lr %g, %lld steps\n", (long long)numel,
           (int)m->n_params, m->optimizer, a.lr, (long long)a.steps);
    int32_t in_place, n_state = run.dist ? sc_dist_trainer_state_count(run.dist, 0, &in_place)
                                         : sc_trainer_state_count(run.one, &in_place);
    int64_t bytes = run.dist ? sc_dist_trainer_arena_bytes(run.dist, 0) : sc_trainer_arena_bytes(run.one);
    char arena[32];
    sc_stats_format_bytes((double)bytes, arena, sizeof arena);
    if (run.dist) printf("mesh: %lld ranks (%s); per rank:\n",
                         (long long)sc_dist_trainer_ranks(run.dist),
                         world ? "one per process" : "threads of this process");
    printf("memory: arena %s (%lld bytes), allocated once; %d of %d state tensors updated in "
           "place\n",
           arena, (long long)bytes, (int)in_place, (int)n_state);
    int64_t host = run.dist ? sc_dist_trainer_host_pool_bytes(run.dist, 0)
                            : sc_trainer_host_pool_bytes(run.one);
    if (host > 0) {
      sc_stats_format_bytes((double)host, arena, sizeof arena);
      printf("memory: host pool %s (%lld bytes) of offloaded activations, apart from the "
             "arena\n", arena, (long long)host);
    }
    if (run.dist && src.mesh->pipe_chunks > 0) {
      printf("pipeline: one arena per pipeline rank, shared by its pieces:");
      for (int32_t q = 0; q < (world ? 1 : src.mesh->pipe_ranks); q++)
        printf(" %lld", (long long)sc_dist_trainer_pipe_arena_bytes(run.dist, q));
      printf(" bytes%s (planned by shardc plan --train)\n", world ? " (this process's)" : "");
    }
  }
  sc_tensor_view batch[MAX_DATA + 1];
  for (int32_t i = 0; i < n_ds; i++) batch[i] = ds[i].batch;
  int64_t first = 1, pos = 0, per_step = n_ds ? ds[0].batch.dims[0] : 0;
  char hyper[512];
  snprintf(hyper, sizeof hyper,
           "{\"momentum\": %.17g, \"nesterov\": %s, \"weight_decay\": %.17g, \"betas\": "
           "[%.17g, %.17g], \"eps\": %.17g, \"grad_accum\": %d, \"bf16\": %s, \"fp16\": %s}",
           m->momentum, m->nesterov ? "true" : "false", m->weight_decay, m->beta1, m->beta2,
           m->eps, m->grad_accum, strcmp(m->precision, "bf16") == 0 ? "true" : "false",
           fp16 ? "true" : "false");
  if (a.resume && (rc = resume(&a, tr, m->optimizer, &first, &pos)) != 0) goto done;
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
  int64_t tokens = tokens_per_step(ds, n_ds, examples);
  if (a.tensorboard &&
      open_tensorboard(a.tensorboard, tr, world != NULL, first, &tb, &d) != SC_OK) {
    rc = sc_cli_report(&d, NULL);
    if (world) sc_dist_trainer_abort(run.dist, d.msg); /* the others wait in step 1 */
    goto done;
  }
  /* Steps are launched one ahead where the trainer can (sc_trainer_launch,
   * docs/training.md): step k is reported after step k+1 was launched, and
   * the step before a save, and the last, are waited for. A mesh's steps
   * are waited for at once. Each step's time runs from its launch, or from
   * the report before it when that came later, to its report. */
  struct launched {
    int64_t step;
    double lr, t0;
    double loss, norm; /* a mesh's results, kept at launch */
    bool applied;
  } q[SC_TRAINER_IN_FLIGHT];
  int nq = 0, q0 = 0;
  double t_report = now_ms();
  for (int64_t next = first; next <= a.steps; next++) {
    fill_batch(ds, n_ds, pos);
    pos += per_step;
    struct launched *l = &q[(q0 + nq) % SC_TRAINER_IN_FLIGHT];
    *l = (struct launched){.step = next, .t0 = now_ms(), .applied = true,
                           .lr = sc_lr_at(a.schedule, a.lr, a.min_lr, a.warmup, a.steps, next)};
    sc_status sst = run.dist ? sc_dist_trainer_step(run.dist, batch, n_ds, l->lr, next, &l->loss,
                                                    &l->norm, &l->applied, &d)
                             : sc_trainer_launch(run.one, batch, n_ds, l->lr, next, &d);
    if (sst != SC_OK) {
      rc = sc_cli_report(&d, o.file);
      goto done;
    }
    nq++;
    bool saves = a.save && ((a.save_every && next % a.save_every == 0) || next == a.steps);
    bool ahead = run.one && sc_trainer_async(run.one);
    while (nq > (saves || next == a.steps || !ahead ? 0 : 1)) {
      struct launched *k = &q[q0];
      q0 = (q0 + 1) % SC_TRAINER_IN_FLIGHT;
      nq--;
      int64_t step = k->step;
      double loss = k->loss, norm = k->norm, lr = k->lr;
      bool applied = k->applied;
      if (!run.dist &&
          sc_trainer_collect(run.one, &step, &loss, &norm, &applied, &d) != SC_OK) {
        rc = sc_cli_report(&d, o.file);
        goto done;
      }
      double t_now = now_ms();
      double ms = t_now - (k->t0 > t_report ? k->t0 : t_report);
      t_report = t_now;
      bool overflow = !applied && fp16 && isfinite(loss); /* the scaler's skip */
      if (!applied && !overflow && !a.skip_nan) {
        /* a NaN prints as "nan" whatever its sign bit (which the last op
         * that made it decides) */
        fprintf(stderr, "shardc: error: step %lld: the loss is %g and the gradient norm %g "
                "(--on-nan skip skips such steps)\n", (long long)step,
                isnan(loss) ? fabs(loss) : loss, isnan(norm) ? fabs(norm) : norm);
        rc = 1;
        goto done;
      }
      bool shown = !a.log_every || step % a.log_every == 0 || step == first ||
                   step == a.steps || !applied;
      if (!a.quiet && shown) {
        double spent = (now_ms() - t_start) / 1e3, per = spent / (double)(step - first + 1);
        double eta = per * (double)(a.steps - step);
        double rate = per > 0 ? (double)examples / per : 0.0;
        char rs[32]; /* whole examples, or two decimals below 10 (slow steps) */
        snprintf(rs, sizeof rs, rate >= 10 ? "%.0f" : "%.2f", rate);
        printf("%sstep %lld/%lld  loss %.6f  lr %.3g  grad_norm %.4g  %.2f ms  %s examples/s  "
               "ETA %.0f s%s%s",
               live ? "\r" : "", (long long)step, (long long)a.steps, loss, lr, norm, ms, rs, eta,
               applied ? "" : overflow ? "  (skipped: fp16 overflow, loss scale halved)"
                                       : "  (skipped: not finite)",
               live ? (step == a.steps ? "\n" : "\033[K") : "\n");
        if (live) fflush(stdout);
      }
      /* the log is created with its first line: a run that fails before
       * leaves none, one that fails later a log of the steps it ran */
      if (a.log_json && !log && !(log = fopen(a.log_json, "w"))) {
        fprintf(stderr, "shardc: error: %s: cannot write the log: %s\n", a.log_json,
                strerror(errno));
        rc = 1;
        goto done;
      }
      step_record rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .time_ms = ms,
                         .tokens_per_s = ms > 0 ? (double)tokens / (ms / 1e3) : 0.0,
                         .loss_scale = fp16 ? run_loss_scale(tr, NULL) : 1.0, .fp16 = fp16,
                         .skipped = !applied};
      if (log && !write_json_step(log, &rec)) {
        fprintf(stderr, "shardc: error: %s: cannot write the log: %s\n", a.log_json,
                strerror(errno));
        rc = 1;
        goto done;
      }
      /* rank 0 logs the steps (other processes' files hold their ranks' arenas) */
      if (tb && speaks && write_tensorboard_step(tb, &rec, &d) != SC_OK) {
        rc = sc_cli_report(&d, NULL);
        if (world) sc_dist_trainer_abort(run.dist, d.msg);
        goto done;
      }
      if (!a.quiet && step == a.steps && run.dist && src.mesh->pipe_chunks > 0) {
        printf("pipeline: stashed values (handed over per microbatch) kept at once, per pipeline "
               "rank:");
        for (int32_t r = 0; r < (world ? 1 : src.mesh->pipe_ranks); r++)
          printf(" %lld", (long long)sc_dist_trainer_stash_bytes(run.dist, r));
        printf(" bytes%s (planned by shardc plan --train)\n", world ? " (this process's)" : "");
        if (src.mesh->schedule.n_offload > 0) {
          printf("pipeline: host pool of offloaded activations held at once, per pipeline "
                 "rank:");
          for (int32_t r = 0; r < (world ? 1 : src.mesh->pipe_ranks); r++)
            printf(" %lld", (long long)sc_dist_trainer_pipe_host_bytes(run.dist, r));
          printf(" bytes%s\n", world ? " (this process's)" : "");
        }
      }
      /* nothing after this step was launched (saves above) */
      if (a.save && ((a.save_every && step % a.save_every == 0) || step == a.steps) &&
          (rc = save_at(a.save, tr, m->optimizer, hyper, step, pos, world != NULL)) != 0)
        goto done;
    }
  }
  /* --steps 0: the initial state (the model's, or --init's) */
  if (a.save && a.steps == 0 && first == 1 &&
      (rc = save_at(a.save, tr, m->optimizer, hyper, 0, pos, world != NULL)) != 0)
    goto done;
done:
  sc_diag_clear(&tb_diag);
  if (tb && sc_tensorboard_close(tb, &tb_diag) != SC_OK && !rc) rc = sc_cli_report(&tb_diag, NULL);
  if (log && fclose(log) != 0 && !rc) {
    fprintf(stderr, "shardc: error: %s: cannot write the log: %s\n", a.log_json,
            strerror(errno));
    rc = 1;
  }
  fflush(stdout);
  sc_trainer_destroy(run.one);
  sc_dist_trainer_destroy(run.dist);
  sc_comm_destroy(world);
  for (int32_t i = 0; i < n_ds; i++) {
    sc_npy_free(&ds[i].a);
    sc_free(ds[i].buf);
  }
  source_free(&src);
  sc_free(roles);
  for (int k = 0; k < a.n_data; k++) sc_free(a.data_buf[k]);
  return rc;
}
