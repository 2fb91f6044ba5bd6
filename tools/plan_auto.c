/* plan_auto.c — `shardc plan MODEL [--train] --auto` and `--mesh auto` in
 * run, compile and train (plan_auto.h).
 *
 * Data flow: the model is built once as a forward graph of one example
 * (shapes only, no plan, no codegen) and measured into a block model
 * (passes/plan/block_model.h); the search (passes/plan/search.h) ranks
 * every strategy from it. The fastest that fits is then built for real
 * through the same options as `plan --train --cluster C --mesh ...`
 * (sc_train_args_build) and its step predicted by the same call
 * (sc_plan_train_predict), and so are the next few (EXACT_TOP, a fixed
 * count); the fastest of them, exactly, that fits is chosen. Its
 * "predicted" is the exact one, so the prediction of a mesh is the same
 * whether --auto reached it or --mesh gave it. When none of them fits,
 * the block model's activation memory is scaled and the search runs
 * again, and the report says so. The exactly evaluated candidates show
 * their exact figures ("[exact]"); the others' are the block model's
 * ("source": "estimate").
 *
 * Inference (no --train) takes the same path with the search's inference
 * goal (latency or throughput, search.h): each candidate is built as
 * `plan --cluster C --mesh ...` builds it (sc_partition_args_build) and
 * predicted by the same call (sc_plan_infer_predict: the largest rank's
 * exact memory), at the batch the candidate serves. choose() is the whole
 * search; `plan --auto` prints it, sc_plan_auto_resolve hands the chosen
 * plan to run, compile and train. --html FILE writes the chosen plan's page
 * with the table's rows and why each lost (sc_plan_train_html, or for
 * inference sc_plan_infer_html), from the build, options and target the
 * exact check used: the page `plan [--train] --mesh <chosen> --html`
 * draws. `plan --train --estimate --mesh ...` (estimate_one) builds one
 * plan as plan --train does and prints the search's estimate of it against
 * its exact figures, per pipeline rank. */
#include "tools/plan_auto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/calibrate.h"
#include "codegen/dist_sim.h"
#include "driver/train_memory.h"
#include "frontend/onnx.h"
#include "ir/pipe.h"
#include "passes/partition/partition.h"
#include "passes/plan/search.h"
#include "runtime/runtime.h"
#include "tools/cli.h"
#include "tools/partition_args.h"
#include "tools/plan_predict.h"
#include "tools/plan_train.h"
#include "tools/train_args.h"

static const char *const USAGE =
    "shardc plan MODEL.onnx --train --auto --cluster C (--global-batch B | --dim batch=B)\n"
    "                      [--memory-budget BYTES|P%] [--precision fp32|bf16|fp16]\n"
    "                      [--optimizer sgd|adamw] [--dim NAME=V]... [--json]\n"
    "                      [--html FILE]\n"
    "       shardc plan MODEL.onnx --auto --cluster C [--batch B | --dim batch=B]\n"
    "                      [--objective latency|throughput] [--memory-budget BYTES|P%]\n"
    "                      [--dim NAME=V]... [--json]";

/* Searches at most: each one after the exact plan of the previous best
 * did not fit. */
enum { MAX_ARGS = 1024, MAX_ROUNDS = 4 };
/* The candidates compiled and predicted exactly: the best EXACT_TOP by
 * the estimate each round (the best, then the best of each other mesh),
 * at most EXACT_MAX in the command; a round after one whose plans were
 * over the memory compiles at least its best. A count, not a time, so
 * that the chosen plan does not depend on the machine's load: the same
 * command gives the same plan. The block model ranks within about 10 %
 * (docs/planner.md section 4), so its best few hold the exact best; each
 * takes 0.2 s (gpt_1p5b) to 3 s (the Megatron 1T row) of CPU to compile (shapes only;
 * docs/planner.md, "The exact check", has the measured times).
 * EXACT_GUARD_S is a safety net only: once the exact evaluation has
 * taken that long, no further candidate after a round's first is
 * compiled, and the report says so ("exact_cut"). */
enum { EXACT_TOP = 4, EXACT_MAX = 8 };
/* The smaller cluster of the "more GPUs" check (docs/planner.md, "More
 * GPUs"): its best EXACT_FEWER by the same rule are compiled on it. */
enum { EXACT_FEWER = 2 };
#define EXACT_GUARD_S 600.0
/* Plans faster than the chosen one but over the memory, shown first in the
 * table (at most). */
enum { SHOWN_OVER = 3 };
/* Plans over the memory by at most this fraction by the estimate, and
 * faster than the tenth that fits, compete for the exact evaluation with
 * the plans that fit (merge_near): the estimate's memory errs over the
 * exact plan's, on a pipeline's largest rank by 0-57 % (docs/planner.md,
 * "The estimate", tests/models/test_search_estimate.py), without a
 * pipeline by up to 70 % at sequence 2048; a published Megatron plan's
 * exact peak is its row's budget, which its estimate exceeds by a few
 * per cent (the 1T row's by 2 %). When they take
 * EXACT_TOP places, as many more that fit by the estimate (FIT_EXTRA at
 * most) are compiled after them (add_fitting; the 1.7B row: three near plans
 * compiled, all over, and the plans that fit not). */
#define NEAR_MARGIN 0.25
enum { FIT_EXTRA = 2 };
/* When the candidates picked are all pipelined, or all without a
 * pipeline, the fastest that fits of the other kind by the estimate is
 * compiled too (add_kind): the estimate errs most between the kinds (its
 * terms differ: a stash and a bubble against one program's activations;
 * on the Megatron 3.6B row a ZeRO-3 plan without a pipeline is exactly
 * 8 % faster than the pipelined best ten, estimated 6 % slower). */
enum { KIND_EXTRA = 1 };
/* A round compiles EXACT_TOP and the extra ones, then (unruled_after)
 * each candidate that fits by the estimate and that the estimate's error
 * measured on them cannot rule out, EXACT_MAX in the command at most. */

/* The near margin of a search: NEAR_MARGIN for training; 0 for inference
 * (its memory, weights and one block's values, is what the exact plan
 * holds: no near plans). */
static double near_margin(sc_search_goal goal) {
  return goal == SC_SEARCH_TRAIN ? NEAR_MARGIN : 0;
}

bool sc_plan_auto_asked(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return false;
    if (strcmp(argv[i], "--auto") == 0 || strcmp(argv[i], "--mesh=auto") == 0 ||
        strcmp(argv[i], "--estimate") == 0 ||
        (strcmp(argv[i], "--mesh") == 0 && i + 1 < argc && strcmp(argv[i + 1], "auto") == 0))
      return true;
  }
  return false;
}

typedef struct auto_args {
  bool train;               /* --train: a training step, else inference */
  int64_t global_batch;     /* --global-batch (training) or --batch (inference) */
  char train_opts[512];     /* the training options given, as written (for the replay) */
  const char *batch_option; /* which of them was given, or NULL */
  const char *budget;       /* --memory-budget's text */
  int64_t budget_bytes;     /* or */
  double budget_fraction;   /* of the device's memory (P%) */
  const char *html;         /* --html FILE: the chosen plan's page, with the table */
  bool estimate;            /* --estimate: one plan's estimate against its exact
                               figures (estimate_one), no search */
  const char *reduce_dtype; /* --reduce-dtype as given, or NULL: a numerics
                               choice of the step (like --precision), which
                               --auto keeps rather than chooses */
  bool no_fuse_attention;   /* --no-fuse-attention: the block model and every
                               candidate built with the attention cores
                               unfused, as the step is (kept, not chosen) */
} auto_args;

/* --memory-budget: BYTES with an optional K, M, G suffix, or P% of the
 * device's memory. */
static int parse_budget(const char *v, auto_args *a) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (!end || end == v || !isfinite(x) || x <= 0)
    return sc_cli_usage_error("--memory-budget takes BYTES (K, M, G suffixes) or P%%, not '%s'",
                              v);
  if (strcmp(end, "%") == 0) {
    if (x > 100) return sc_cli_usage_error("--memory-budget %s: at most 100%%", v);
    a->budget_fraction = x / 100;
    return 0;
  }
  double unit = !*end ? 1 : strcmp(end, "K") == 0 ? 1024.0 : strcmp(end, "M") == 0 ? 1048576.0
                        : strcmp(end, "G") == 0 ? 1073741824.0 : 0;
  if (unit == 0)
    return sc_cli_usage_error("--memory-budget takes BYTES (K, M, G suffixes) or P%%, not '%s'",
                              v);
  a->budget_bytes = (int64_t)(x * unit);
  return 0;
}

static int split_args(int argc, char **argv, auto_args *a, sc_partition_args *p,
                      sc_train_args *ta, char **rest, int *n_rest) {
  *n_rest = 0;
  rest[(*n_rest)++] = argv[0];
  bool train = false, asked = false;
  for (int i = 1; i < argc;) {
    if (*n_rest >= MAX_ARGS - 1) return sc_cli_usage_error("too many arguments");
    bool missing = false;
    const char *v;
    if (strcmp(argv[i], "--auto") == 0 || strcmp(argv[i], "--train") == 0) {
      train |= argv[i][2] == 't';
      asked |= argv[i][2] == 'a';
      i++;
      continue;
    }
    const char *opt = strncmp(argv[i], "--global-batch", 14) == 0 ? "--global-batch" : "--batch";
    if ((v = sc_cli_opt_value(argc, argv, &i, opt, &missing))) {
      if (missing) return sc_cli_usage_error("%s needs a value", opt);
      if (!sc_cli_parse_i64(v, 1, (int64_t)1 << 40, &a->global_batch))
        return sc_cli_usage_error("%s takes a count >= 1, not '%s'", opt, v);
      a->batch_option = opt;
      i++;
      continue;
    }
    if (strcmp(argv[i], "--estimate") == 0) {
      a->estimate = true;
      i++;
      continue;
    }
    if ((v = sc_cli_opt_value(argc, argv, &i, "--html", &missing))) {
      if (missing) return sc_cli_usage_error("--html needs a file");
      a->html = v;
      i++;
      continue;
    }
    if ((v = sc_cli_opt_value(argc, argv, &i, "--memory-budget", &missing))) {
      if (missing) return sc_cli_usage_error("--memory-budget needs a value");
      a->budget = v;
      if (parse_budget(v, a)) return 2;
      i++;
      continue;
    }
    int rc = sc_partition_args_take(p, argc, argv, &i, false);
    if (rc == 1) continue;
    if (rc) return rc;
    int at = i;
    if ((rc = sc_train_args_take(ta, argc, argv, &i)) == 1) {
      for (int k = at; k < i; k++) {
        size_t len = strlen(a->train_opts);
        snprintf(a->train_opts + len, sizeof a->train_opts - len, " %s", argv[k]);
      }
      continue;
    }
    if (rc) return rc;
    rest[(*n_rest)++] = argv[i++];
  }
  a->train = train;
  a->reduce_dtype = p->reduce_dtype;
  a->no_fuse_attention = p->no_fuse_attention;
  if (p->reduce_dtype && asked) { /* in the replay, as the training options are */
    size_t len = strlen(a->train_opts);
    snprintf(a->train_opts + len, sizeof a->train_opts - len, " --reduce-dtype %s",
             p->reduce_dtype);
  }
  if (p->no_fuse_attention && asked) {
    size_t len = strlen(a->train_opts);
    snprintf(a->train_opts + len, sizeof a->train_opts - len, " --no-fuse-attention");
  }
  if (a->estimate) {
    if (asked || p->auto_plan) return sc_cli_usage_error("--estimate takes one plan (--mesh ...), "
                                                         "not --auto");
    if (!train || !p->mesh || !p->cluster || a->html || a->budget || a->batch_option)
      return sc_cli_usage_error("--estimate takes --train, --cluster C, --mesh and the plan's "
                                "options, the batch as --dim NAME=B (no --global-batch, "
                                "--memory-budget or --html)");
    return 0;
  }
  if (a->batch_option && (strcmp(a->batch_option, "--global-batch") == 0) != train)
    return sc_cli_usage_error(train ? "--auto --train takes --global-batch B (examples per "
                                      "optimizer step), not --batch"
                                    : "--global-batch is the training step's (with --train); "
                                      "inference takes --batch B or --dim NAME=B");
  if (train && p->objective)
    return sc_cli_usage_error("--objective ranks inference plans; --train ranks by step time");
  if (!train && ta->first)
    return sc_cli_usage_error("%s is a training option: it needs --train", ta->first);
  sc_partition_args others = *p;
  others.cluster = NULL;
  others.auto_plan = false;
  others.objective = NULL;
  others.reduce_dtype = NULL; /* the step's numerics, kept (auto_args.reduce_dtype) */
  if (sc_partition_args_any(&others))
    return sc_cli_usage_error("--auto chooses the mesh and every partitioning option itself: "
                              "give only --cluster (not --mesh, --plan, --zero, --schedule, ...)");
  if (ta->recompute_auto) return sc_cli_usage_error("--auto chooses the recompute itself");
  if (ta->t.offload_activations)
    return sc_cli_usage_error("--auto chooses the activation offloading itself");
  if (!p->cluster) return sc_cli_usage_error("--auto needs --cluster C (the devices to plan for)");
  return 0;
}

/* The batch dim: dim 0's symbolic name of the first integer input of rank
 * >= 2 (token ids), else of the first input of rank >= 3 (a vision
 * transformer's images [batch, C, H, W]), or NULL. */
static const char *batch_dim(sc_graph *g) {
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < g->n_inputs; i++) {
      const sc_value *v = &g->values[g->inputs[i]];
      bool ok = pass ? v->rank >= 3 : sc_dtype_is_int(v->dtype) && v->rank >= 2;
      if (ok && v->dim_param && v->dim_param[0]) return v->dim_param[0];
    }
  return NULL;
}

/* ---- the exact evaluation of one candidate ---- */

typedef struct exact {
  sc_build *b;
  double seconds;
} exact;

/* Builds candidate c on cluster as `plan [--train] --cluster C --mesh ...`
 * builds it for target (the cluster's device: sc_device_target_of_cluster):
 * training through sc_plan_train_setup, plan --train's own options;
 * inference with cuBLASLt's workspace in the arena on a GPU, as plan
 * does. ta->t takes c's recompute: the options c was built with. */
/* The --activation-loading-horizon c's step offloads at: a pipeline's
 * (search.h), else the default. */
static int32_t offload_horizon(const sc_search_cand *c) {
  if (c->offload_activations && c->pp > 1) return SC_SEARCH_PIPE_OFFLOAD_HORIZON;
  sc_train_opts d;
  sc_train_opts_init(&d, SC_OPTIMIZER_SGD);
  return d.activation_loading_horizon;
}

static int compile(const sc_search_cand *c, const char *cluster, const sc_cluster *loaded,
                   const sc_device_target *target, const sc_cli_opts *base, const char *dim,
                   const auto_args *a, sc_train_args *ta, exact *out) {
  char mesh[128];
  int64_t batch = c->batch;
  sc_search_mesh(c, mesh, sizeof mesh);
  sc_partition_args p;
  sc_partition_args_init(&p);
  p.mesh = mesh;
  p.cluster = cluster;
  p.cluster_loaded = loaded;
  p.zero = c->zero;
  p.microbatches = c->microbatches;
  p.schedule = c->pp > 1 ? c->schedule : NULL;
  p.virtual_stages = c->virtual_stages > 1 ? c->virtual_stages : 0;
  p.sequence_parallel = c->sequence_parallel;
  if (!c->inference) p.reduce_dtype = a->reduce_dtype;
  p.no_fuse_attention = a->no_fuse_attention;
  p.expert_tensor_parallel = c->expert_tensor_parallel;
  sc_cli_opts o = *base; /* its weights or shapes only: choose() */
  int k = 0;
  while (k < o.n_dims && strcmp(o.dims[k].name, dim) != 0) k++;
  if (k == o.n_dims) {
    if (k == SC_CLI_MAX_DIMS) return sc_cli_usage_error("too many --dim");
    o.n_dims++;
  }
  snprintf(o.dims[k].name, sizeof o.dims[k].name, "%s", dim);
  o.dims[k].value = batch;
  if (!c->inference) {
    ta->t.recompute = (sc_recompute_kind)c->recompute;
    ta->t.offload_activations = c->offload_activations;
    ta->t.activation_loading_horizon = offload_horizon(c);
    ta->t.shape_only = o.no_weights;
  }
  sc_build_setup bs;
  sc_build_setup_init(&bs, &o, &p);
  bs.compile.quiet = true;
  if (!c->inference) sc_plan_train_setup(&bs, target);
  else sc_build_setup_target(&bs, target);
  bs.pass.quiet = true;
  bs.build.no_weights = o.no_weights;
  double t0 = sc_cli_now_s();
  int rc = c->inference ? sc_partition_args_build(&p, &o, &bs.build, &out->b, NULL)
                        : sc_train_args_build(ta, &p, &o, &bs.build, &out->b);
  out->seconds = sc_cli_now_s() - t0;
  return rc;
}

/* The exact prediction of a built candidate into its plan's predicted:
 * plan --train's (sc_plan_train_predict), or plan --mesh's for inference
 * (the simulated step and the largest rank's exact memory). */
static sc_status predict(const sc_search_cand *c, sc_build *b, const sc_train_args *ta,
                         const sc_device_target *target, sc_diag *d) {
  if (!c->inference) return sc_plan_train_predict(b, &ta->t, target, d);
  sc_plan_infer_predict(b, target);
  return SC_OK;
}

/* What the goal compares of an exact prediction of c, lower first: the
 * step, or (throughput) the seconds per batch served. */
static double exact_objective(const sc_search_cand *c, const sc_plan_predicted *pr,
                              sc_search_goal goal) {
  return goal == SC_SEARCH_THROUGHPUT ? pr->step_time_s / (double)c->dp : pr->step_time_s;
}

/* The smallest exact/estimate ratio of the objective among the n
 * compiled candidates top[0 .. n) (exact_of[i] top[i]'s) of c's kind
 * (pipelined or not: the estimate errs most between the kinds), or of all
 * of them when none is of c's kind; 1 when none was compiled. c's exact
 * objective is taken to be at least its estimate times this: a plan not
 * compiled is ruled out (unruled_after) when that bound is no better than
 * the chosen plan's exact objective. On gpt_1p5b at h100-sxm:8x2 (batch
 * 64, bf16) the pipelined plans compiled are 0.89-1.09 of their estimate,
 * the ZeRO-3 plan without a pipeline 0.76. */
static double exact_ratio(const sc_search_cand *top, const sc_plan_predicted *exact_of, int32_t n,
                          const sc_search_cand *c, sc_search_goal goal) {
  double lo[2] = {INFINITY, INFINITY}; /* [0]: c's kind, [1]: any */
  for (int32_t i = 0; i < n; i++) {
    if (!(top[i].objective_s > 0) || exact_of[i].unknown[0]) continue;
    double q = exact_objective(&top[i], &exact_of[i], goal) / top[i].objective_s;
    if ((top[i].pp > 1) == (c->pp > 1) && q < lo[0]) lo[0] = q;
    if (q < lo[1]) lo[1] = q;
  }
  return isfinite(lo[0]) ? lo[0] : isfinite(lo[1]) ? lo[1] : 1.0;
}

/* The first of top[from .. n_top) that fits by the estimate whose exact
 * objective exact_ratio cannot put at or above best_obj (the chosen
 * plan's exact one), or -1. */
static int32_t unruled_after(const sc_search_cand *top, int32_t n_top, int32_t from,
                             const sc_plan_predicted *exact_of, int32_t n_exact, double best_obj,
                             sc_search_goal goal) {
  for (int32_t j = from; j < n_top; j++)
    if (top[j].fits &&
        top[j].objective_s * exact_ratio(top, exact_of, n_exact, &top[j], goal) < best_obj)
      return j;
  return -1;
}

/* ---- printing ---- */

static void fmt_bytes(double b, char *buf, size_t n) { sc_stats_format_bytes(b, buf, n); }

/* The candidate's estimate as a predicted object (source "estimate"). */
static void estimate_predicted(const sc_search_cand *c, int64_t seq, sc_plan_predicted *pr) {
  double tokens = (double)c->batch * (double)seq; /* the examples the step serves */
  memset(pr, 0, sizeof *pr);
  pr->on = true;
  snprintf(pr->source, sizeof pr->source, "estimate");
  pr->pipe_rank = c->pp > 1 ? (int32_t)(c->pp - 1) : 0;
  pr->step_time_s = c->step_s;
  pr->tokens_per_s = c->step_s > 0 ? tokens / c->step_s : 0;
  pr->mfu = c->mfu;
  pr->peak_bytes_per_rank = c->peak_bytes;
  pr->fits = c->fits;
  pr->compute_s = c->compute_s;
  pr->bubble_s = c->bubble_s;
  pr->recompute_s = c->recompute_s;
  pr->optimizer_s = c->optimizer_s;
  const char *names[6] = {"tp", "fsdp", "dp", "pp", "cp", "ep"};
  double secs[6] = {c->tp_s, c->fsdp_s, c->dp_s, c->pp_s, c->cp_s, c->ep_s};
  for (int i = 0; i < 6; i++)
    if (secs[i] > 0) {
      snprintf(pr->comm[pr->n_comm].axes, sizeof pr->comm[0].axes, "%s", names[i]);
      pr->comm[pr->n_comm++].seconds = secs[i];
    }
}

/* c's options as plan --train takes them. */
static void cand_options(const sc_search_cand *c, char *buf, size_t n) {
  char mesh[128];
  sc_search_mesh(c, mesh, sizeof mesh);
  size_t pos = 0;
  int w = snprintf(buf, n, "--mesh %s", mesh);
#define ADD(...)                                                        \
  do {                                                                  \
    if (w >= 0 && (pos += (size_t)w) < n) w = snprintf(buf + pos, n - pos, __VA_ARGS__); \
  } while (0)
  if (c->inference) { /* plan --mesh's options: GPipe, no recompute */
    if (c->microbatches > 1) ADD(" --microbatches %d", c->microbatches);
    if (c->sequence_parallel) ADD(" --sequence-parallel");
    return;
  }
  if (c->zero) ADD(" --zero %d", c->zero);
  if (c->pp > 1) ADD(" --schedule %s", c->schedule);
  if (c->virtual_stages > 1) ADD(" --virtual-stages %d", c->virtual_stages);
  ADD(" --microbatches %d --recompute %s", c->microbatches,
      sc_search_recompute_name(c->recompute));
  if (c->offload_activations) ADD(" --offload-activations");
  if (c->offload_activations && c->pp > 1)
    ADD(" --activation-loading-horizon %d", SC_SEARCH_PIPE_OFFLOAD_HORIZON);
  if (c->sequence_parallel) ADD(" --sequence-parallel");
  if (c->expert_tensor_parallel) ADD(" --expert-tensor-parallel");
#undef ADD
}

/* Where the built pipelined step part cut its chunks, as
 * --stage-boundaries takes them ("A,B"; the cut depends on the cluster: a
 * replay without it cuts there too): sc_malloc'd, or NULL where it was
 * not cut, a chunk starts at an unnamed node, a name has a comma
 * (--stage-boundaries splits at commas: the plan file's
 * pipeline.boundaries names it), or memory ran out. */
static char *cut_string(const sc_partition *part) {
  if (!part || part->n_chunks < 2 || !part->chunk_boundaries) return NULL;
  size_t len = 1;
  for (int32_t i = 0; i < part->n_chunks - 1; i++) {
    if (strchr(part->chunk_boundaries[i], ',')) return NULL;
    len += strlen(part->chunk_boundaries[i]) + 1;
  }
  char *s = sc_malloc(len);
  if (!s) return NULL;
  size_t pos = 0;
  for (int32_t i = 0; i < part->n_chunks - 1; i++)
    pos += (size_t)snprintf(s + pos, len - pos, "%s%s", i ? "," : "", part->chunk_boundaries[i]);
  return s;
}

static void free_cuts(char **cuts) {
  for (int32_t i = 0; i < EXACT_MAX; i++) {
    sc_free(cuts[i]);
    cuts[i] = NULL;
  }
}

/* c's options (cand_options) with its cut (cut_string's, or NULL) as
 * --stage-boundaries, for a pipelined training plan: sc_malloc'd, NULL
 * where there is nothing to add (or memory ran out). */
static char *options_with_cut(const sc_search_cand *c, const char *cut) {
  if (c->inference || c->pp < 2 || !cut) return NULL;
  char opts[384];
  cand_options(c, opts, sizeof opts);
  size_t n = strlen(opts) + strlen(cut) + 32;
  char *buf = sc_malloc(n);
  if (buf) snprintf(buf, n, "%s --stage-boundaries %s", opts, cut);
  return buf;
}

/* c's JSON (cand_json) with its cut (cut_string's, or NULL): its
 * "boundaries" (null where it is not known: not compiled) and its
 * options' --stage-boundaries. */
static void add_cut_json(json_t *cj, const sc_search_cand *c, const char *cut) {
  if (c->inference || c->pp < 2) return;
  json_t *a = cut ? json_array() : NULL;
  for (const char *s = cut; a && s;) {
    const char *e = strchr(s, ',');
    json_array_append_new(a, e ? json_stringn(s, (size_t)(e - s)) : json_string(s));
    s = e ? e + 1 : NULL;
  }
  json_object_set_new(cj, "boundaries", a ? a : json_null());
  char *opts = options_with_cut(c, cut);
  if (opts) json_object_set_new(cj, "options", json_string(opts));
  sc_free(opts);
}

static json_t *cand_json(const sc_search_cand *c, const sc_plan_predicted *pr, const char *why) {
  json_t *pj = sc_plan_predicted_json(pr);
  json_t *o = json_pack("{s:{s:I,s:I,s:I,s:I,s:I,s:I}, s:i, s:I, s:b, s:s, s:i, s:i, s:I, s:s}",
                        "mesh", "dp", (json_int_t)c->dp, "fsdp", (json_int_t)c->fsdp, "tp",
                        (json_int_t)c->tp, "pp", (json_int_t)c->pp, "cp", (json_int_t)c->cp,
                        "ep", (json_int_t)(c->ep > 1 ? c->ep : 1),
                        "zero", c->zero, "hybrid_shard_degree",
                        (json_int_t)c->hybrid_shard_degree, "sequence_parallel",
                        c->sequence_parallel, "schedule", c->schedule, "virtual_stages",
                        c->virtual_stages, "microbatches", c->microbatches, "micro_batch_size",
                        (json_int_t)c->micro_batch_size, "recompute",
                        sc_search_recompute_name(c->recompute));
  if (!c->inference) {
    json_object_set_new(o, "expert_tensor_parallel", json_boolean(c->expert_tensor_parallel));
    json_object_set_new(o, "offload_activations", json_boolean(c->offload_activations));
    json_object_set_new(o, "host_bytes", json_integer((json_int_t)c->host_bytes));
  }
  json_object_set_new(o, "predicted", pj);
  char opts[384];
  cand_options(c, opts, sizeof opts);
  json_object_set_new(o, "options", json_string(opts));
  if (why) json_object_set_new(o, "why", json_string(why));
  return o;
}

static void cand_line(int i, const sc_search_cand *c, const sc_plan_predicted *pr,
                      const char *why) {
  char mesh[128], t[32], mem[32];
  sc_search_mesh(c, mesh, sizeof mesh);
  if (c->expert_tensor_parallel) /* the experts split over tp too */
    strncat(mesh, " etp", sizeof mesh - strlen(mesh) - 1);
  sc_cli_format_seconds(pr->step_time_s, t, sizeof t);
  fmt_bytes((double)pr->peak_bytes_per_rank, mem, sizeof mem);
  char sched[32];
  if (c->pp > 1 && c->virtual_stages > 1)
    snprintf(sched, sizeof sched, "%s/%d", c->schedule, c->virtual_stages);
  else snprintf(sched, sizeof sched, "%s", c->pp > 1 ? c->schedule : "-");
  char rc[24]; /* the recompute, "+offload" with activation offloading */
  snprintf(rc, sizeof rc, "%s%s", sc_search_recompute_name(c->recompute),
           c->offload_activations ? "+offload" : "");
  printf("  %2d  %-22s %4d %3s  %-14s %4d %5lld  %-17s %12s %6.1f%% %11s  %s%s\n", i, mesh,
         c->zero, c->sequence_parallel ? "on" : "-", sched, c->microbatches,
         (long long)c->micro_batch_size, rc, t,
         100 * pr->mfu, mem, strcmp(pr->source, "estimate") ? "[exact] " : "", why);
}

/* The spec of the smaller cluster f of the preset spec "NAME:GxN[@P]"
 * (its devices a node and nodes), into buf; false for a cluster file
 * (nothing to halve by name: the comparison stays the estimate's). */
static bool half_spec(const char *spec, const sc_search_fewer *f, char *buf, size_t n) {
  const char *colon = spec ? strchr(spec, ':') : NULL;
  if (!colon || f->devices_per_node < 1 || f->nodes < 1) return false;
  long long g = 0, k = 0;
  int used = 0;
  if (sscanf(colon + 1, "%lldx%lld%n", &g, &k, &used) != 2 || g < 1 || k < 1) return false;
  const char *rest = colon + 1 + used;
  if (*rest && *rest != '@') return false;
  int w = snprintf(buf, n, "%.*s:%lldx%lld%s", (int)(colon - spec), spec,
                   (long long)f->devices_per_node, (long long)f->nodes, rest);
  return w > 0 && (size_t)w < n;
}

/* Which of top[0 .. n) are evaluated exactly: the best, then the best of
 * each other mesh, then the rest in order (the candidates of one mesh
 * differ least; the block model errs most between meshes); moved to the
 * front, n_want of them. */
static void exact_order(sc_search_cand *top, int32_t n, int32_t n_want) {
  for (int32_t i = 1; i < n_want; i++) {
    int32_t pick = -1;
    for (int32_t j = i; j < n && pick < 0; j++) {
      bool seen = false;
      for (int32_t k = 0; k < i; k++)
        seen |= sc_search_same_mesh(&top[j], &top[k]);
      if (!seen) pick = j;
    }
    if (pick < 0) break;
    sc_search_cand c = top[pick];
    memmove(&top[i + 1], &top[i], (size_t)(pick - i) * sizeof c);
    top[i] = c;
  }
}

/* The plans the estimate puts over the memory by less than its own error
 * (NEAR_MARGIN) and faster than the tenth that fits join r->top after its
 * best, by estimated objective (the step), for the exact evaluation to decide: their exact
 * memory may fit (the estimate errs over: docs/planner.md, "The
 * estimate"). The best that fits stays first; when none fits, the near
 * ones are the list. */
static void merge_near(sc_search_result *r) {
  if (r->n_top == 0) { /* none fits by the estimate: the near ones, in order */
    memcpy(r->top, r->near, (size_t)r->n_near * sizeof *r->near);
    r->n_top = r->n_near;
    return;
  }
  sc_search_cand all[2 * SC_SEARCH_TOP];
  int32_t n = 0;
  for (int32_t i = 1; i < r->n_top; i++) all[n++] = r->top[i];
  double last = r->n_top == SC_SEARCH_TOP ? r->top[r->n_top - 1].objective_s : INFINITY;
  for (int32_t i = 0; i < r->n_near; i++)
    if (r->near[i].objective_s < last) all[n++] = r->near[i];
  /* insertion sort by objective (stable: the top's order kept at a tie) */
  for (int32_t i = 1; i < n; i++) {
    sc_search_cand c = all[i];
    int32_t j = i;
    while (j > 0 && all[j - 1].objective_s > c.objective_s) {
      all[j] = all[j - 1];
      j--;
    }
    all[j] = c;
  }
  if (n > SC_SEARCH_TOP - 1) n = SC_SEARCH_TOP - 1;
  memcpy(&r->top[1], all, (size_t)n * sizeof *all);
  r->n_top = n + 1;
}

/* After the n picked of r->top, up to `room` more that fit by the
 * estimate (first the best of each mesh no fitting one picked has, then
 * the next in order), moved up to follow them, so
 * that near plans do not leave the ones that fit out of the exact
 * evaluation. Returns how many. */
static int32_t add_fitting(sc_search_result *r, int32_t n, int32_t room) {
  int32_t k = 0;
  /* first those of a mesh no fitting one picked has, then any */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t j = n + k; j < r->n_top && k < room; j++) {
      if (!r->top[j].fits) continue;
      bool seen = false;
      for (int32_t i = 0; i < n + k && pass == 0; i++)
        seen |= r->top[i].fits && sc_search_same_mesh(&r->top[i], &r->top[j]);
      if (seen) continue;
      sc_search_cand c = r->top[j];
      memmove(&r->top[n + k + 1], &r->top[n + k], (size_t)(j - n - k) * sizeof c);
      r->top[n + k] = c;
      k++;
    }
  return k;
}

/* When none of the n picked of r->top that fit by the estimate is of one
 * kind (pipelined or not; a near plan does not count: the exact plan may
 * be over) and the search kept a plan of that kind that fits
 * (r->kind_best), it
 * joins them at n (from its place in r->top, or in place of the last);
 * returns 1 when added, else 0. At most one kind is missing: top[0] is
 * of one. */
static int32_t add_kind(sc_search_result *r, int32_t n, int32_t room) {
  if (room < 1 || n < 1 || r->n_top <= 0) return 0;
  for (int k = 0; k < 2; k++) {
    bool seen = false;
    for (int32_t i = 0; i < n; i++) seen |= r->top[i].fits && (r->top[i].pp > 1) == (k == 1);
    if (seen || !r->have_kind_best[k]) continue;
    int32_t at = -1; /* already in the list, after the picked */
    for (int32_t j = n; j < r->n_top && at < 0; j++)
      if (!memcmp(&r->top[j], &r->kind_best[k], sizeof r->top[j])) at = j;
    if (at < 0) {
      at = r->n_top < SC_SEARCH_TOP ? r->n_top++ : SC_SEARCH_TOP - 1;
      if (at < n) return 0;
      r->top[at] = r->kind_best[k];
    }
    sc_search_cand c = r->top[at];
    memmove(&r->top[n + 1], &r->top[n], (size_t)(at - n) * sizeof c);
    r->top[n] = c;
    return 1;
  }
  return 0;
}

/* c with its figures replaced by the exact prediction pr (step, memory,
 * the critical rank's terms; each exposed communication group counted
 * under its first axis), so that sc_search_why compares exact with exact. */
static sc_search_cand exact_view(const sc_search_cand *c, const sc_plan_predicted *pr,
                                 int64_t limit, sc_search_goal goal) {
  sc_search_cand v = *c;
  v.step_s = pr->step_time_s;
  v.objective_s = exact_objective(c, pr, goal);
  v.mfu = pr->mfu;
  v.peak_bytes = pr->peak_bytes_per_rank;
  v.peak_pipe_rank = pr->pipe_rank;
  v.fits = pr->peak_bytes_per_rank <= limit;
  v.compute_s = pr->compute_s;
  v.bubble_s = pr->bubble_s;
  v.recompute_s = pr->recompute_s;
  v.optimizer_s = pr->optimizer_s;
  v.tp_s = v.fsdp_s = v.dp_s = v.pp_s = v.cp_s = v.ep_s = v.offload_s = 0;
  for (int32_t i = 0; i < pr->n_comm; i++) {
    const char *ax = pr->comm[i].axes;
    size_t n = strcspn(ax, ",");
    double *t = strcmp(ax, "host") == 0                 ? &v.offload_s /* the copies */
                : n == 2 && strncmp(ax, "tp", 2) == 0   ? &v.tp_s
                : n == 4 && strncmp(ax, "fsdp", 4) == 0 ? &v.fsdp_s
                : n == 2 && strncmp(ax, "pp", 2) == 0   ? &v.pp_s
                : n == 2 && strncmp(ax, "cp", 2) == 0   ? &v.cp_s
                : n == 2 && strncmp(ax, "ep", 2) == 0 && pr->comm[i].axes[n] == 0 ? &v.ep_s
                                                        : &v.dp_s;
    *t += pr->comm[i].seconds;
  }
  return v;
}

/* When nothing fits: which rank of the least-over candidate is over, by
 * how much, and what would make it fit. */
static int no_fit(const sc_search_result *r, int64_t limit, const char *file, bool all_over,
                  bool bf16) {
  char over[32], lim[32];
  fmt_bytes((double)limit, lim, sizeof lim);
  if (!r->have_closest) {
    fprintf(stderr, "shardc: error: %s: plan --auto: no plan fits %s per rank\n", file, lim);
    return 1;
  }
  const sc_search_cand *c = &r->closest;
  fmt_bytes((double)(c->peak_bytes - limit), over, sizeof over);
  char opts[384];
  cand_options(c, opts, sizeof opts);
  if (c->inference) {
    fprintf(stderr, "shardc: error: %s: plan --auto: no inference plan fits %s per rank%s; the "
            "closest, %s (micro-batch %lld), is over on pipeline rank %d by %s (%lld bytes, "
            "block-model estimate); what would make it fit: more devices (a larger --cluster)"
            "%s\n", file, lim, all_over ? " (after the exact plans above)" : "", opts,
            (long long)c->micro_batch_size, (int)c->peak_pipe_rank, over,
            (long long)(c->peak_bytes - limit),
            c->micro_batch_size > 1 ? ", a smaller batch" : "");
    return 1;
  }
  fprintf(stderr, "shardc: error: %s: plan --auto: no plan fits %s per rank%s; the closest, "
          "%s (micro-batch %lld), is over on pipeline rank %d by %s (%lld bytes, block-model "
          "estimate); what would make it fit: more GPUs (a larger --cluster)%s%s%s%s\n", file,
          lim, all_over ? " (after the exact plans above)" : "", opts,
          (long long)c->micro_batch_size, (int)c->peak_pipe_rank, over,
          (long long)(c->peak_bytes - limit),
          c->zero < 3 ? ", a larger ZeRO stage (--zero 3 over more fsdp ranks)" : "",
          c->recompute != SC_SEARCH_RECOMPUTE_FULL ? ", full recompute" : "",
          c->micro_batch_size > 1 ? ", a smaller micro-batch (a smaller --global-batch)" : "",
          bf16 ? "" : ", --precision bf16");
  return 1;
}

/* ---- the search, exactly checked ---- */

/* One search: what it is asked (in) and what it chose (out). */
typedef struct auto_search {
  sc_search_goal goal;
  auto_args args;               /* global_batch 0: the batch dim's --dim, else 1 */
  const sc_cli_opts *o;         /* the command's model and dims */
  sc_train_args *ta;            /* the step's options (training), or NULL */
  const char *cluster_spec;     /* --cluster as given (the replay's) */
  const sc_cluster *cluster;    /* loaded */
  bool dim_refused;             /* plan --train --auto --global-batch: it sets
                                   the batch dim, --dim may not */
  bool batch_required;          /* plan --train --auto: the global batch given,
                                   by --global-batch or the batch dim's --dim */
  bool fewer_check;             /* training: compare the chosen plan with the
                                   best on half the devices (plan --auto's
                                   report; docs/planner.md, "More GPUs") */
  /* out, after choose() returned 0 */
  sc_block_model bm;
  char dim_name[128];
  sc_search_result *r;          /* sc_free */
  exact ex;                     /* the chosen plan built (sc_build_destroy) */
  sc_train_opts ex_train;       /* the training options it was built with (its
                                   recompute) */
  sc_device_target target;      /* what every candidate was built and its
                                   memory planned for (the cluster's device) */
  int32_t chosen;               /* its index in r->top */
  sc_plan_predicted exact_of[EXACT_MAX]; /* of r->top[0 .. n_exact) */
  char *cut_of[EXACT_MAX];      /* their cuts (cut_string; free_cuts) */
  int32_t n_exact;              /* the last round's */
  int32_t n_exact_all;          /* the command's (at most EXACT_MAX) */
  char exact_cut[256];          /* why the guard cut the exact evaluation, or "" */
  char skipped[MAX_ROUNDS][768];
  int32_t n_skipped;
  bool shapes_only;              /* the candidates built from the model's shapes
                                   (--no-weights, or its weight files absent) */
  int64_t evaluated, pruned, limit;
  double t_model, t_search, t_exact;
  double scales[6];             /* the activation scales per kind: 3 x (pp > 1)
                                   + recompute */
  /* fewer_check's: the search on half the devices, and its best
   * EXACT_FEWER compiled there (fewer_exact: their fastest that fits is
   * fewer_c, fewer_pr) */
  sc_search_fewer fewer;
  bool fewer_exact;
  int32_t n_fewer_exact;
  sc_search_cand fewer_c;
  sc_plan_predicted fewer_pr;
} auto_search;

/* The batch dim's --dim in o, taken out of it into *batch (the search
 * sets the dim per candidate); a --batch given too must agree. */
static sc_status batch_from_dims(sc_cli_opts *o, const char *dim, int64_t *batch, sc_diag *d) {
  for (int k = 0; k < o->n_dims; k++) {
    if (strcmp(o->dims[k].name, dim) != 0) continue;
    if (*batch && *batch != o->dims[k].value)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "plan --auto: the batch %lld and --dim %s=%lld differ", (long long)*batch,
                         dim, (long long)o->dims[k].value);
    *batch = o->dims[k].value;
    memmove(&o->dims[k], &o->dims[k + 1], (size_t)(o->n_dims - k - 1) * sizeof o->dims[0]);
    o->n_dims--;
    break;
  }
  if (!*batch) *batch = 1; /* as the driver binds a batch dim left unbound */
  return SC_OK;
}

/* More devices should not be slower (docs/planner.md, "More GPUs"): the
 * search so on half of x's devices, by the estimate, and then exactly:
 * the smaller cluster's best EXACT_FEWER by the same rule, compiled on it,
 * their fastest that fits against the chosen plan (x->fewer and the
 * fewer_ fields). 0, or an exit status after printing the error (x's
 * outputs freed). */
static int fewer_devices(auto_search *x, const sc_search_opts *so, const sc_cli_opts *o,
                         sc_train_args *ta, const sc_device_target *target) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  const sc_search_cand *ch = &x->r->top[x->chosen];
  sc_search_fewer *fewer = &x->fewer;
  double t0 = sc_cli_now_s();
  sc_status st = sc_search_fewer_devices(&x->bm, so, ch, fewer, &d);
  x->t_search += sc_cli_now_s() - t0;
  if (st != SC_OK) {
    sc_build_destroy(x->ex.b);
    sc_free(x->r);
    free_cuts(x->cut_of);
    return sc_cli_report(&d, o->file);
  }
  char half[160];
  if (fewer->have && half_spec(x->cluster_spec, fewer, half, sizeof half)) {
    sc_recompute_kind keep = ta->t.recompute;
    int32_t nw = fewer->n_top < EXACT_FEWER ? fewer->n_top : EXACT_FEWER;
    exact_order(fewer->top, fewer->n_top, nw);
    for (int32_t i = 0; i < nw; i++) {
      exact e = {0};
      int frc = compile(&fewer->top[i], half, NULL, target, o, x->dim_name, &x->args, ta, &e);
      x->t_exact += e.seconds;
      if (frc) break;
      t0 = sc_cli_now_s();
      st = predict(&fewer->top[i], e.b, ta, target, &d);
      x->t_exact += sc_cli_now_s() - t0;
      if (st == SC_OK) {
        x->n_fewer_exact++;
        const sc_plan_predicted *pr = &e.b->plan->predicted;
        if (!pr->unknown[0] && pr->peak_bytes_per_rank <= x->limit &&
            (!x->fewer_exact || pr->step_time_s < x->fewer_pr.step_time_s)) {
          x->fewer_exact = true;
          x->fewer_c = fewer->top[i];
          x->fewer_pr = *pr;
        }
      }
      sc_build_destroy(e.b);
      if (st != SC_OK) break;
    }
    ta->t.recompute = keep;
  }
  const sc_plan_predicted *exact_pr = &x->ex.b->plan->predicted;
  if (x->fewer_exact && !exact_pr->unknown[0]) {
    sc_search_cand av = exact_view(&x->fewer_c, &x->fewer_pr, x->limit, x->goal);
    sc_search_cand bv = exact_view(ch, exact_pr, x->limit, x->goal);
    fewer->slower = bv.step_s > av.step_s;
    sc_search_fewer_why(&av, &bv, fewer->devices, x->args.global_batch, "exact", fewer->why,
                        sizeof fewer->why);
  }
  return 0;
}

/* The block model of x's model (o: its options, the batch dim's --dim
 * taken out of it into *batch unless x->dim_refused) from the forward
 * graph of one example, shapes only; dim_name: the batch dim. 0, or an
 * exit status after printing the error. */
static int model_of(const auto_search *x, sc_cli_opts *o, int64_t *batch, sc_block_model *bm,
                    char *dim_name, size_t n_dim_name) {
  int rc;
  sc_diag d = {0};
  sc_diag_clear(&d);
  int32_t n_dims = o->n_dims;
  sc_partition_args none;
  sc_partition_args_init(&none);
  none.no_fuse_attention = x->args.no_fuse_attention; /* the step's cores, as it builds them */
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, NULL);
  bs.compile.quiet = true;
  bs.pass.quiet = true; /* the batch dim left unbound is 1, without a note */
  bs.build.no_weights = true;
  bs.build.codegen = false;
  sc_build *fb = NULL;
  if ((rc = sc_partition_args_build(&none, o, &bs.build, &fb, NULL)) != 0) return rc;
  const char *dim = batch_dim(fb->graph);
  sc_status st = SC_OK;
  if (!dim)
    st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL,
                     "plan --auto: the token ids (the first integer input of rank >= 2) or "
                     "images (an input of rank >= 3) have no symbolic batch dim for the batch "
                     "to set (the search plans transformers)");
  for (int k = 0; st == SC_OK && k < o->n_dims; k++)
    if (strcmp(o->dims[k].name, dim) == 0 && x->dim_refused)
      st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL,
                       "plan --auto: --global-batch sets the batch dim '%s'; give no --dim %s",
                       dim, dim);
  bool given = *batch > 0;
  if (st == SC_OK && !x->dim_refused) st = batch_from_dims(o, dim, batch, &d);
  if (st == SC_OK && x->batch_required && !given && o->n_dims == n_dims)
    st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL,
                     "plan --auto needs the global batch (examples per optimizer step): "
                     "--global-batch B or --dim %s=B", dim);
  char dim_kept[128];
  if (st == SC_OK && o->n_dims < n_dims) { /* the block model is of one example */
    snprintf(dim_kept, sizeof dim_kept, "%s", dim);
    dim = dim_kept;
    sc_build_destroy(fb);
    fb = NULL;
    if ((rc = sc_partition_args_build(&none, o, &bs.build, &fb, NULL)) != 0) return rc;
  }
  if (st == SC_OK) {
    snprintf(dim_name, n_dim_name, "%s", dim);
    st = sc_block_model_build(fb->graph, bm, &d);
    bm->loss_split = x->ta && x->ta->t.no_fuse_loss; /* the step's loss, as it builds it */
  }
  sc_build_destroy(fb);
  if (st == SC_ERR_USAGE) return sc_cli_usage_error("%s", d.msg);
  if (st != SC_OK) return sc_cli_report(&d, o->file);
  return 0;
}

/* The search's options for goal on cluster: the global batch, budget and
 * step options of a and t (the graph's own dtype for inference). */
static sc_search_opts search_opts_of(sc_search_goal goal, const auto_args *a,
                                     const sc_train_opts *t, const sc_block_model *bm,
                                     const sc_cluster *cluster) {
  sc_search_opts so = {.cluster = cluster,
                       .goal = goal,
                       .global_batch = a->global_batch,
                       .dtype = t->bf16 ? SC_CLUSTER_BF16 : t->fp16 ? SC_CLUSTER_FP16
                                                                   : SC_CLUSTER_FP32,
                       .adamw = t->optimizer != SC_OPTIMIZER_SGD,
                       .reduce_low = a->reduce_dtype && strcmp(a->reduce_dtype, "fp32") != 0,
                       .memory_budget = a->budget_bytes,
                       .max_pp = SC_DIST_SIM_MAX_RANKS,
                       .near_margin = near_margin(goal)};
  if (goal != SC_SEARCH_TRAIN) /* the graph's own dtype: no mixed precision */
    so.dtype = bm->param_bytes == 2 ? SC_CLUSTER_BF16 : SC_CLUSTER_FP32;
  if (a->budget_fraction > 0)
    so.memory_budget = (int64_t)(a->budget_fraction * (double)cluster->device_memory_bytes);
  if (sc_cluster_is_gpu(cluster)) /* the arena holds cuBLASLt's workspace (compile()) */
    so.arena_fixed_bytes = SC_GEMM_WORKSPACE_BYTES;
  return so;
}

/* Whether the model at path imports with its weights (its external data
 * files there); quietly, as the build that follows reports any error. */
static bool weights_present(const char *path) {
  sc_import_opts io = {.no_weights = false};
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_onnx_import(path, &io, &g, &d) != SC_OK) return false;
  sc_graph_destroy(g);
  return true;
}

/* The block model, the search, the exact check of the best few (above);
 * 0 with x's outputs set, or an exit status after printing the error (1:
 * the model, the cluster, no plan fits; 2: usage). */
static int choose(auto_search *x) {
  int rc = 0;
  auto_args a = x->args;
  sc_cli_opts o = *x->o;
  /* the candidates are built with the model's weights where it has them,
   * so that tied weights are found from their bytes as `shardc train`
   * finds them and a mesh is predicted as `plan --mesh` predicts it;
   * from its shapes under --no-weights or when its weight files are
   * absent (a shape-only model: the replay then says --no-weights) */
  if (!o.no_weights && !weights_present(o.file)) o.no_weights = true;
  x->shapes_only = o.no_weights;
  sc_train_args ta;
  if (x->ta) {
    ta = *x->ta;
  } else { /* inference: compile() and predict() do not read it */
    sc_train_args_init(&ta);
    if ((rc = sc_train_args_finish(&ta)) != 0) return rc;
  }
  const sc_cluster cluster = *x->cluster;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_device_target target;
  sc_runtime_target_host(&target);
  sc_device_target_of_cluster(&cluster, &target); /* a GPU's: the CUDA device's lines */

  /* 1. the block model, from the forward graph of one example */
  double t0 = sc_cli_now_s();
  sc_block_model bm;
  char dim_name[128] = "";
  if ((rc = model_of(x, &o, &a.global_batch, &bm, dim_name, sizeof dim_name)) != 0) return rc;
  double t_model = sc_cli_now_s() - t0;
  sc_status st = SC_OK;

  /* 2. the search */
  sc_search_opts so = search_opts_of(x->goal, &a, &ta.t, &bm, &cluster);
  int64_t limit = so.memory_budget > 0 ? so.memory_budget : cluster.device_memory_bytes;
  sc_search_result *r = sc_calloc(1, sizeof *r);
  if (!r) {
    fprintf(stderr, "shardc: error: out of memory\n");
    return 1;
  }
  /* 2 and 3: search, then compile the best few by the estimate and
   * choose the fastest of them, exactly, that fits; when none fits, the
   * block model's memory is scaled by what the best's exact plan measured
   * (exact / estimate, never down) and the search runs again */
  exact ex = {0};
  int32_t chosen = -1;
  /* the activation scales per kind: 3 x (pp > 1) + recompute */
  double t_search = 0, t_exact = 0, scales[6] = {1, 1, 1, 1, 1, 1};
  char skipped[MAX_ROUNDS][768];
  int32_t n_skipped = 0;
  int64_t evaluated = 0, pruned = 0;
  sc_plan_predicted exact_of[EXACT_MAX]; /* of r->top[0 .. n_exact) */
  char *cut_of[EXACT_MAX] = {0};        /* their cuts (cut_string) */
  int32_t n_exact = 0, n_exact_all = 0; /* this round's, the command's */
  char exact_cut[256] = ""; /* why the guard cut the exact evaluation, or "" */
  for (int32_t round = 0; round < MAX_ROUNDS && chosen < 0; round++) {
    memcpy(so.activation_scales, scales, sizeof scales);
    t0 = sc_cli_now_s();
    st = sc_search_run(&bm, &so, r, &d);
    t_search += sc_cli_now_s() - t0;
    if (st != SC_OK) {
      sc_free(r);
      free_cuts(cut_of);
      return st == SC_ERR_USAGE ? (fprintf(stderr, "shardc: error: %s: %s\n", o.file, d.msg), 2)
                                : sc_cli_report(&d, o.file);
    }
    evaluated += r->evaluated;
    pruned += r->pruned;
    if (r->n_top == 0 && r->n_near == 0) break;
    merge_near(r);
    n_exact = 0;
    double t_round = 0;
    /* which: the best, then the best of each other mesh, then the rest in
     * order (the candidates of one mesh differ least; the block model
     * errs most between meshes); moved to the front of r->top so that
     * exact_of[i] is r->top[i]'s */
    int32_t room = EXACT_MAX - n_exact_all;
    if (room < 1) room = 1;
    int32_t n_want = r->n_top < EXACT_TOP ? r->n_top : EXACT_TOP;
    if (n_want > room) n_want = room;
    exact_order(r->top, r->n_top, n_want);
    int32_t n_near = 0; /* picked that do not fit by the estimate */
    for (int32_t i = 0; i < n_want; i++) n_near += !r->top[i].fits;
    if (n_near > FIT_EXTRA) n_near = FIT_EXTRA;
    n_want += add_fitting(r, n_want, room - n_want < n_near ? room - n_want : n_near);
    n_want += add_kind(r, n_want, room - n_want);
    for (int32_t i = 0; i < n_want; i++) {
      if (i > 0 && t_exact + t_round >= EXACT_GUARD_S) {
        snprintf(exact_cut, sizeof exact_cut,
                 "the exact evaluation took %.1f s, over the %.0f s guard: round %d compiled "
                 "%d of its %d candidates", t_exact + t_round, EXACT_GUARD_S, (int)round + 1,
                 (int)i, (int)n_want);
        break;
      }
      exact e = {0};
      rc = compile(&r->top[i], x->cluster_spec, x->cluster, &target, &o, dim_name, &a, &ta, &e);
      t_round += e.seconds;
      if (!rc) {
        t0 = sc_cli_now_s();
        st = predict(&r->top[i], e.b, &ta, &target, &d);
        t_round += sc_cli_now_s() - t0;
        if (st != SC_OK) {
          sc_build_destroy(e.b);
          rc = sc_cli_report(&d, o.file);
        }
      }
      if (rc) {
        /* the estimate's best is the plan --auto stands on: its failure
         * is the command's; a runner-up's ends the exact evaluation (the
         * ones before it stay, exact_of[i] being r->top[i]'s) */
        if (i > 0) {
          fprintf(stderr, "shardc: note: candidate %d did not build (above); the exact "
                  "evaluation stops at the %d before it\n", (int)i + 1, (int)i);
          rc = 0;
        }
        break;
      }
      sc_free(cut_of[n_exact]);
      cut_of[n_exact] = cut_string(e.b->part);
      exact_of[n_exact++] = e.b->plan->predicted;
      n_exact_all++;
      const sc_plan_predicted *pr = &e.b->plan->predicted;
      /* the exact fastest that fits; at the same time the smaller memory */
      const sc_plan_predicted *best = chosen >= 0 ? &exact_of[chosen] : NULL;
      double obj = exact_objective(&r->top[i], pr, so.goal),
             best_obj = best ? exact_objective(&r->top[chosen], best, so.goal) : 0;
      bool better = pr->peak_bytes_per_rank <= limit &&
                    (!best || (!pr->unknown[0] &&
                               (best->unknown[0] || obj < best_obj ||
                                (obj == best_obj &&
                                 pr->peak_bytes_per_rank < best->peak_bytes_per_rank))));
      if (better) {
        sc_build_destroy(ex.b);
        ex = e;
        x->ex_train = ta.t;
        chosen = i;
      } else {
        sc_build_destroy(e.b);
      }
      /* the round's picks done and one fits: a candidate after them that
       * fits by the estimate and that exact_ratio cannot rule out (its
       * estimate's error, as measured on this round's compiled plans,
       * may put it below the chosen one exactly) is compiled next, while
       * the command's count allows (EXACT_MAX) */
      if (i + 1 == n_want && chosen >= 0 && n_exact_all < EXACT_MAX && n_want < r->n_top) {
        int32_t j = unruled_after(r->top, r->n_top, n_want, exact_of, n_exact,
                                  exact_objective(&r->top[chosen], &exact_of[chosen], so.goal),
                                  so.goal);
        if (j >= 0) {
          sc_search_cand c = r->top[j];
          memmove(&r->top[n_want + 1], &r->top[n_want], (size_t)(j - n_want) * sizeof c);
          r->top[n_want++] = c;
        }
      }
    }
    t_exact += t_round;
    if (rc || chosen >= 0 || n_exact == 0) break;
    const sc_plan_predicted *pr = &exact_of[0];
    char opts[384], over[32];
    cand_options(&r->top[0], opts, sizeof opts);
    fmt_bytes((double)(pr->peak_bytes_per_rank - limit), over, sizeof over);
    /* per kind (without a pipeline, pipelined; each recompute), from
     * each plan of it compiled: what the exact plan says the activations
     * take (its peak less the estimate's state and working memory)
     * against the estimate's; never down, at least 10 % up */
    double next[6];
    memcpy(next, scales, sizeof next);
    for (int32_t i = 0; i < n_exact; i++) {
      const sc_search_cand *t = &r->top[i];
      int kind = 3 * (t->pp > 1) + (int)t->recompute;
      double est_act = (double)t->peak_activation_bytes / scales[kind];
      double fixed = (double)(t->peak_bytes - t->peak_activation_bytes);
      double want = (double)exact_of[i].peak_bytes_per_rank - fixed;
      double s1 = est_act > 0 && want > (double)t->peak_activation_bytes ? want / est_act : 0;
      if (s1 < scales[kind] * 1.1) s1 = scales[kind] * 1.1;
      if (s1 > next[kind]) next[kind] = s1;
    }
    memcpy(scales, next, sizeof scales);
    const sc_search_cand *t = &r->top[0];
    snprintf(skipped[n_skipped++], sizeof skipped[0],
             "the best %d by the estimate compiled are over the memory; the first, %s, by %s on "
             "its largest rank (%lld bytes exact, %lld estimated): the block model's "
             "activation memory scaled by %.3g, %.3g, %.3g (without a pipeline; no, selective, "
             "full recompute) and %.3g, %.3g, %.3g (pipelined) and searched again",
             (int)n_exact, opts, over, (long long)pr->peak_bytes_per_rank,
             (long long)t->peak_bytes, scales[0], scales[1], scales[2], scales[3], scales[4],
             scales[5]);
  }
  if (rc || chosen < 0) {
    for (int32_t i = 0; i < n_skipped; i++)
      fprintf(stderr, "shardc: note: %s\n", skipped[i]);
    if (exact_cut[0]) fprintf(stderr, "shardc: note: %s\n", exact_cut);
    fprintf(stderr, "shardc: note: %lld candidates evaluated, %lld pruned; block model %.6f s, "
            "search %.6f s, exact evaluation %.6f s\n", (long long)evaluated, (long long)pruned,
            t_model, t_search, t_exact);
    if (!rc) rc = no_fit(r, limit, o.file, n_skipped > 0, ta.t.bf16 || ta.t.fp16);
    sc_build_destroy(ex.b);
    sc_free(r);
    free_cuts(cut_of);
    return rc;
  }
  x->args = a;
  x->bm = bm;
  snprintf(x->dim_name, sizeof x->dim_name, "%s", dim_name);
  x->r = r;
  x->ex = ex;
  x->target = target;
  x->chosen = chosen;
  memcpy(x->exact_of, exact_of, sizeof exact_of);
  memcpy(x->cut_of, cut_of, sizeof cut_of);
  x->n_exact = n_exact;
  memcpy(x->skipped, skipped, sizeof skipped);
  x->n_skipped = n_skipped;
  x->evaluated = evaluated;
  x->pruned = pruned;
  x->limit = limit;
  x->t_model = t_model;
  x->t_search = t_search;
  x->t_exact = t_exact;
  memcpy(x->scales, scales, sizeof scales);
  x->n_exact_all = n_exact_all;
  snprintf(x->exact_cut, sizeof x->exact_cut, "%s", exact_cut);
  x->fewer = (sc_search_fewer){0};
  x->fewer_exact = false;
  x->n_fewer_exact = 0;
  if (x->fewer_check && x->goal == SC_SEARCH_TRAIN)
    return fewer_devices(x, &so, &o, &ta, &target);
  return 0;
}

/* ---- plan --train --estimate: one plan, estimated and exact ---- */

/* The axis size of role `axis` (an index into part's mesh, or -1: 1). */
static int64_t axis_size(const sc_partition *part, int32_t axis) {
  return axis >= 0 ? part->mesh.axes[axis].size : 1;
}

/* `shardc plan MODEL --train --estimate --cluster C --mesh ... [plan
 * options] --dim BATCH=B`: the plan built as plan --train builds it
 * (sc_plan_train_setup, shapes only), its exact step and every pipeline
 * rank's memory (sc_plan_train_predict, sc_plan_train_rank_memory), and
 * the search's estimate of the same strategy, read back from the build
 * (its mesh roles, ZeRO stage, schedule, chunks, microbatches, sequence
 * parallelism, recompute) so that nothing is parsed twice: the estimate's
 * memory per pipeline rank (sc_search_rank_memory) against the exact
 * one's, without the device's lines (the estimate has none), and the two
 * steps' terms. What docs/planner.md's estimate/exact ratios are measured
 * with (tests/models/test_search_estimate.py). 0, 1 (the model, the
 * cluster, a mesh with axes the search does not model), 2 (usage). */
static int estimate_one(const auto_args *a, sc_partition_args *p, sc_train_args *ta,
                        const sc_cli_opts *o, const sc_cluster *cluster) {
  auto_search x = {.goal = SC_SEARCH_TRAIN, .args = *a, .o = o, .ta = ta,
                   .cluster_spec = p->cluster, .cluster = cluster};
  sc_cli_opts fo = *o;
  int64_t batch = 0;
  sc_block_model bm;
  char dim[128];
  int rc = model_of(&x, &fo, &batch, &bm, dim, sizeof dim);
  if (rc) return rc;
  sc_device_target target;
  sc_runtime_target_host(&target);
  sc_device_target_of_cluster(cluster, &target);
  p->cluster_loaded = cluster;
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, p);
  bs.compile.quiet = true;
  sc_plan_train_setup(&bs, &target);
  bs.build.no_weights = true;
  ta->t.shape_only = true;
  sc_build *b = NULL;
  if ((rc = sc_train_args_build(ta, p, o, &bs.build, &b)) != 0) return rc;
  const sc_partition *part = b->part;
  const sc_dist_program *dp = b->program;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_search_cand c = {.pp = axis_size(part, part->pp_axis), .dp = axis_size(part, part->dp_axis),
                      .fsdp = axis_size(part, part->fsdp_axis),
                      .tp = axis_size(part, part->tp_axis),
                      .cp = sc_mesh_axis_size(&part->mesh, "cp"),
                      .ep = sc_mesh_axis_size(&part->mesh, "ep"), .zero = part->zero_stage,
                      .sequence_parallel = part->sequence_parallel,
                      .expert_tensor_parallel = part->expert_tensor_parallel,
                      .microbatches = dp->schedule.microbatches > 0 ? dp->schedule.microbatches : 1,
                      .recompute = (sc_search_recompute)ta->t.recompute, .batch = batch,
                      .offload_activations = ta->t.offload_activations};
  c.hybrid_shard_degree = c.dp > 1 && c.fsdp > 1 ? c.fsdp : 0;
  c.schedule = c.pp > 1 ? sc_schedule_name(dp->schedule.kind) : "gpipe";
  c.virtual_stages = dp->pipe_chunks > 0 ? dp->pipe_chunks / dp->pipe_ranks : 1;
  int64_t parts = c.dp * c.fsdp * c.ep * c.microbatches;
  sc_status st = SC_OK;
  if (c.pp * c.dp * c.fsdp * c.cp * c.ep * c.tp != part->mesh.n_ranks || batch % parts)
    st = sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL,
                     "--estimate: the search models meshes of pp, dp, fsdp, cp, ep and tp axes whose "
                     "data-parallel size times the microbatches (%lld) divides the batch %lld",
                     (long long)parts, (long long)batch);
  c.micro_batch_size = parts > 0 ? batch / parts : 0;
  auto_args sa = *a;
  sa.global_batch = batch;
  sc_search_opts so = search_opts_of(SC_SEARCH_TRAIN, &sa, &ta->t, &bm, cluster);
  if (st == SC_OK) st = sc_search_estimate(&bm, &so, &c, &d);
  if (st == SC_OK) st = sc_plan_train_predict(b, &ta->t, &target, &d);
  sc_rank_memory *rows = NULL;
  int32_t n_rows = 0;
  if (st == SC_OK) st = sc_plan_train_rank_memory(b, &target, &rows, &n_rows, &d);
  if (st != SC_OK) {
    sc_build_destroy(b);
    return sc_cli_report(&d, o->file);
  }
  sc_plan_predicted est;
  estimate_predicted(&c, bm.seq, &est);
  char opts[384];
  cand_options(&c, opts, sizeof opts);
  json_t *ranks = json_array();
  double worst = 0, peak_exact = 0;
  for (int32_t q = 0; q < n_rows; q++) {
    int64_t act, mem = sc_search_rank_memory(&bm, &so, &c, q, &act), device = 0;
    for (int32_t k = 0; k < rows[q].n_parts; k++)
      if (!strcmp(rows[q].parts[k].name, "device")) device += rows[q].parts[k].bytes;
    double exact_b = (double)(rows[q].total - device);
    double ratio = exact_b > 0 ? (double)mem / exact_b : 0;
    if (q == 0 || ratio < worst) worst = ratio;
    if (exact_b > peak_exact) peak_exact = exact_b;
    json_t *rj = json_pack("{s:i, s:I, s:I, s:I, s:I, s:f}", "pipe_rank", (int)q,
                           "estimate_bytes", (json_int_t)mem, "estimate_activation_bytes",
                           (json_int_t)act, "exact_bytes", (json_int_t)rows[q].total,
                           "exact_device_bytes", (json_int_t)device, "ratio", ratio);
    json_t *parts_j = json_object();
    for (int32_t k = 0; k < rows[q].n_parts; k++)
      json_object_set_new(parts_j, rows[q].parts[k].name, json_integer(rows[q].parts[k].bytes));
    json_object_set_new(rj, "exact_parts", parts_j);
    if (dp->pipe_chunks > 0) { /* the largest piece's arena of each phase */
      json_t *ph = json_object();
      int64_t most[SC_PIPE_PHASES] = {0};
      for (int32_t st_i = 0; st_i < dp->n_stages; st_i++)
        if (sc_pipe_piece_chunk(dp->pipe_chunks, st_i) % dp->pipe_ranks == q) {
          sc_pipe_phase f = sc_pipe_piece_phase(dp->pipe_chunks, st_i);
          if (dp->stages[st_i].program->arena_bytes > most[f])
            most[f] = dp->stages[st_i].program->arena_bytes;
        }
      for (int f = 0; f < SC_PIPE_PHASES; f++)
        json_object_set_new(ph, sc_pipe_phase_name((sc_pipe_phase)f), json_integer(most[f]));
      json_object_set_new(rj, "exact_arena_by_phase", ph);
    }
    json_array_append_new(ranks, rj);
    if (!o->json) {
      char e1[32], e2[32];
      fmt_bytes((double)mem, e1, sizeof e1);
      fmt_bytes(exact_b, e2, sizeof e2);
      if (q == 0) printf("memory per rank (the search's estimate against the exact plan):\n");
      printf("  %s: estimate %s, exact %s (without the device's lines), %.3f\n", rows[q].rank,
             e1, e2, ratio);
    }
  }
  /* the all-gathers and reduce-scatters over fsdp (alone or with ep: the
   * storage group of the parameters outside the experts under fsdp x ep):
   * the estimate's counts against the compiled step's (an unpipelined
   * plan: one program) */
  double est_gathers = sc_search_step_gathers(&bm, &so, &c);
  double est_scatters = sc_search_step_scatters(&bm, &so, &c);
  int64_t exact_gathers = -1, exact_scatters = -1;
  if (dp->n_stages == 1 && part->fsdp_axis >= 0) {
    sc_train_comm *cm = NULL;
    int32_t n_cm = 0;
    if (sc_train_comm_of(dp->stages[0].program, &cm, &n_cm, &d) != SC_OK) {
      sc_free(rows);
      json_decref(ranks);
      sc_build_destroy(b);
      return sc_cli_report(&d, o->file);
    }
    exact_gathers = exact_scatters = 0;
    for (int32_t i = 0; i < n_cm; i++) {
      if (!(cm[i].axes & (1u << part->fsdp_axis))) continue;
      if (cm[i].kind == SC_COMM_ALL_GATHER) exact_gathers += cm[i].ops;
      if (cm[i].kind == SC_COMM_REDUCE_SCATTER) exact_scatters += cm[i].ops;
    }
    sc_free(cm);
  }
  const sc_plan_predicted *ex = &b->plan->predicted;
  double peak_ratio = peak_exact > 0 ? (double)c.peak_bytes / peak_exact : 0;
  if (o->json) {
    json_t *root = json_pack("{s:s, s:I, s:o, s:o, s:o, s:f, s:f}", "options", opts, "batch",
                             (json_int_t)batch, "estimate", sc_plan_predicted_json(&est),
                             "exact", sc_plan_predicted_json(ex), "ranks", ranks,
                             "peak_ratio", peak_ratio, "lowest_rank_ratio", worst);
    if (root && exact_gathers >= 0) {
      json_object_set_new(root, "fsdp_gathers",
                          json_pack("{s:f, s:I}", "estimate", est_gathers, "exact",
                                    (json_int_t)exact_gathers));
      json_object_set_new(root, "fsdp_scatters",
                          json_pack("{s:f, s:I}", "estimate", est_scatters, "exact",
                                    (json_int_t)exact_scatters));
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(root);
  } else {
    json_decref(ranks);
    char t1[32], t2[32];
    sc_cli_format_seconds(c.step_s, t1, sizeof t1);
    sc_cli_format_seconds(ex->step_time_s, t2, sizeof t2);
    printf("  the largest: estimate over exact %.3f (the lowest rank's %.3f)\n", peak_ratio,
           worst);
    printf("step: estimate %s, exact %s (%+.1f %%)\n", t1, t2,
           ex->step_time_s > 0 ? 100 * (c.step_s - ex->step_time_s) / ex->step_time_s : 0.0);
    printf("  %s\n", opts);
    if (exact_gathers >= 0) {
      printf("all-gathers over fsdp a step: estimate %.0f, exact %lld\n", est_gathers,
             (long long)exact_gathers);
      printf("reduce-scatters over fsdp a step: estimate %.0f, exact %lld\n", est_scatters,
             (long long)exact_scatters);
    }
  }
  sc_free(rows);
  sc_build_destroy(b);
  return 0;
}

int sc_cmd_plan_auto(int argc, char **argv) {
  auto_args a = {0};
  sc_partition_args p;
  sc_partition_args_init(&p);
  sc_train_args ta;
  sc_train_args_init(&ta);
  char *rest[MAX_ARGS];
  int n_rest = 0;
  int rc = split_args(argc, argv, &a, &p, &ta, rest, &n_rest);
  if (rc) return rc;
  sc_cli_opts o;
  rc = sc_cli_parse(n_rest, rest, SC_CLI_DIM | SC_CLI_NO_WEIGHTS | SC_CLI_JSON, USAGE, &o);
  if (rc) return rc;
  if (o.help) {
    printf("usage: %s\n\nSearches every training plan (--train) or inference plan shardc runs on the cluster (docs/"
           "planner.md, section 4) and prints the chosen one, evaluated exactly, and the ten "
           "best with why each loses.\n", USAGE);
    return 0;
  }
  if ((rc = sc_train_args_finish(&ta)) != 0) return rc;
  sc_diag cd = {0};
  sc_diag_clear(&cd);
  sc_cluster cluster;
  if (sc_cluster_load(p.cluster, &cluster, &cd) != SC_OK) return sc_cli_report(&cd, NULL);
  if (a.estimate) return estimate_one(&a, &p, &ta, &o, &cluster);
  auto_search x = {.goal = !a.train ? (p.objective && strcmp(p.objective, "throughput") == 0
                                           ? SC_SEARCH_THROUGHPUT
                                           : SC_SEARCH_LATENCY)
                                    : SC_SEARCH_TRAIN,
                   .args = a, .o = &o, .ta = &ta, .cluster_spec = p.cluster,
                   .cluster = &cluster, .dim_refused = a.train && a.global_batch > 0,
                   .batch_required = a.train, .fewer_check = a.train};
  if ((rc = choose(&x)) != 0) return rc;
  a = x.args;
  sc_search_result *r = x.r;
  exact ex = x.ex;
  int32_t chosen = x.chosen, n_exact = x.n_exact, n_skipped = x.n_skipped;
  const char *chosen_cut = x.cut_of[chosen]; /* where its chunks were cut, or NULL */
  const sc_plan_predicted *exact_of = x.exact_of;
  char(*skipped)[768] = x.skipped;
  int64_t evaluated = x.evaluated, pruned = x.pruned, limit = x.limit;
  double t_model = x.t_model, t_search = x.t_search, t_exact = x.t_exact;
  const double *scales = x.scales;
  const sc_block_model bm = x.bm;
  const char *dim_name = x.dim_name;
  r->evaluated = evaluated;
  r->pruned = pruned;
  const sc_search_cand *ch = &r->top[chosen];
  const sc_search_fewer fewer = x.fewer;
  const bool fewer_exact = x.fewer_exact;
  const sc_search_cand fewer_c = x.fewer_c;
  const sc_plan_predicted fewer_pr = x.fewer_pr;
  const sc_plan_predicted *exact_pr = &ex.b->plan->predicted;
  double err = ch->step_s > 0 && exact_pr->step_time_s > 0
                   ? (ch->step_s - exact_pr->step_time_s) / exact_pr->step_time_s
                   : 0;
  /* the table: up to SHOWN_OVER plans faster (by the estimate) than the
   * chosen one that do not fit (why they lose: memory), then the fastest
   * that fit; shown_exact: the row's index in exact_of, or -1 */
  sc_search_cand shown[SC_SEARCH_TOP];
  int32_t shown_exact[SC_SEARCH_TOP];
  int32_t n_shown = 0;
  for (int32_t i = 0; i < r->n_over && n_shown < SHOWN_OVER; i++)
    if (r->over[i].objective_s < r->top[0].objective_s &&
        (double)r->over[i].peak_bytes > (double)limit * (1 + near_margin(x.goal))) {
      /* (the near ones are in r->top) */
      shown_exact[n_shown] = -1;
      shown[n_shown++] = r->over[i];
    }
  int32_t chosen_at = n_shown + chosen;
  for (int32_t i = 0; i < r->n_top && n_shown < SC_SEARCH_TOP; i++) {
    shown_exact[n_shown] = i < n_exact ? i : -1;
    shown[n_shown++] = r->top[i];
  }
  char why[SC_SEARCH_TOP][320];
  sc_search_cand ch_exact = exact_view(ch, exact_pr, limit, x.goal);
  for (int32_t i = 0; i < n_shown; i++) {
    if (i == chosen_at) {
      snprintf(why[i], sizeof why[i], "chosen");
    } else if (shown_exact[i] >= 0) {
      /* exact against exact */
      sc_search_cand v = exact_view(&shown[i], &exact_of[shown_exact[i]], limit, x.goal);
      sc_search_why(&ch_exact, &v, limit, why[i], sizeof why[i]);
    } else if (shown[i].fits && shown[i].objective_s < ch->objective_s) {
      /* faster by the estimate than the chosen one, not compiled: its
       * estimate times the smallest exact/estimate ratio of its kind
       * (exact_ratio) against the chosen one's exact objective; below it
       * only when EXACT_MAX stopped the exact evaluation */
      double q = exact_ratio(r->top, exact_of, n_exact, &shown[i], x.goal);
      double bound = shown[i].objective_s * q, best = ch_exact.objective_s;
      if (bound >= best)
        snprintf(why[i], sizeof why[i],
                 "%.1f %% slower at least: estimated %.1f %% faster, its kind's plans compiled "
                 "%.3g of their estimate at least", 100.0 * (bound - best) / best,
                 100.0 * (ch->objective_s - shown[i].objective_s) / ch->objective_s, q);
      else
        snprintf(why[i], sizeof why[i], "estimated %.1f %% faster; not evaluated exactly",
                 100.0 * (ch->objective_s - shown[i].objective_s) / ch->objective_s);
    } else {
      sc_search_why(ch, &shown[i], limit, why[i], sizeof why[i]);
    }
  }
  sc_plan_predicted shown_pr[SC_SEARCH_TOP];
  for (int32_t i = 0; i < n_shown; i++) {
    if (i == chosen_at) shown_pr[i] = *exact_pr;
    else if (shown_exact[i] >= 0) shown_pr[i] = exact_of[shown_exact[i]];
    else estimate_predicted(&shown[i], bm.seq, &shown_pr[i]);
  }

  if (o.json) {
    json_t *cands = json_array();
    for (int32_t i = 0; i < n_shown; i++) {
      json_t *cj1 = cand_json(&shown[i], &shown_pr[i], why[i]);
      add_cut_json(cj1, &shown[i], shown_exact[i] >= 0 ? x.cut_of[shown_exact[i]] : NULL);
      json_object_set_new(cj1, "exact", json_boolean(shown_exact[i] >= 0));
      if (shown_exact[i] >= 0) { /* its estimate too, to compare */
        sc_plan_predicted est;
        estimate_predicted(&shown[i], bm.seq, &est);
        json_object_set_new(cj1, "estimate", sc_plan_predicted_json(&est));
      }
      json_array_append_new(cands, cj1);
    }
    json_t *cj = cand_json(ch, exact_pr, NULL);
    sc_plan_predicted est;
    estimate_predicted(ch, bm.seq, &est);
    json_t *ej = sc_plan_predicted_json(&est);
    json_object_set_new(cj, "estimate", ej);
    json_object_set_new(cj, "estimate_error", json_real(err));
    /* the plan file of the chosen plan: `--plan` replays it */
    sc_diag pd = {0};
    sc_diag_clear(&pd);
    char *plan_text = NULL;
    if (sc_partition_complete_plan(ex.b->part, ex.b->plan, &pd) == SC_OK)
      plan_text = sc_plan_write_json_string(ex.b->plan, &pd);
    json_t *plan = plan_text ? json_loads(plan_text, 0, NULL) : NULL;
    sc_free(plan_text);
    json_object_set_new(cj, "plan", plan ? plan : json_null());
    add_cut_json(cj, ch, chosen_cut);
    /* its options (the cut with them) as a part of the replay */
    const char *opts = json_string_value(json_object_get(cj, "options"));
    size_t n_replay = strlen(p.cluster) + strlen(opts) + strlen(a.train_opts) +
                      (size_t)(o.n_dims + 1) * (sizeof o.dims[0].name + 32) + 64;
    char *replay = sc_malloc(n_replay);
    if (!replay) {
      json_decref(cj);
      json_decref(cands);
      fprintf(stderr, "shardc: error: out of memory\n");
      sc_build_destroy(ex.b);
      sc_free(r);
      free_cuts(x.cut_of);
      return 1;
    }
    size_t pos = (size_t)snprintf(replay, n_replay, "%s--cluster %s %s%s",
                                  a.train ? "--train " : "", p.cluster, opts, a.train_opts);
    for (int k = 0; k < o.n_dims && pos < n_replay; k++)
      if (strcmp(o.dims[k].name, dim_name) != 0)
        pos += (size_t)snprintf(replay + pos, n_replay - pos, " --dim %s=%lld",
                                o.dims[k].name, (long long)o.dims[k].value);
    if (pos < n_replay)
      snprintf(replay + pos, n_replay - pos, " --dim %s=%lld%s", dim_name,
               (long long)ch->batch, x.shapes_only ? " --no-weights" : "");
    json_object_set_new(cj, "replay", json_string(replay));
    sc_free(replay);
    json_t *root = json_pack(
        "{s:{s:f, s:f, s:f, s:i, s:I, s:I, s:o, s:o, s:o}}", "auto", "time_s",
        t_model + t_search + t_exact, "search_time_s", t_search, "exact_time_s", t_exact,
        "exact_evaluated", (int)n_exact,
        "candidates_evaluated", (json_int_t)r->evaluated, "candidates_pruned",
        (json_int_t)r->pruned,
        "pruned", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "heads",
                            (json_int_t)r->pruned_heads, "split", (json_int_t)r->pruned_split,
                            "node", (json_int_t)r->pruned_node,
                            "batch", (json_int_t)r->pruned_batch, "microbatches",
                            (json_int_t)r->pruned_microbatch, "state",
                            (json_int_t)r->pruned_state, "bound", (json_int_t)r->pruned_bound,
                            "fsdp", (json_int_t)r->pruned_fsdp, "cp", (json_int_t)r->pruned_cp,
                            "ep", (json_int_t)r->pruned_ep),
        "chosen", cj, "candidates", cands);
    json_t *au = json_object_get(root, "auto");
    json_object_set_new(au, "block_model_time_s", json_real(t_model));
    const sc_block_part *bp = &bm.block;
    json_object_set_new(
        au, "block_model",
        json_pack("{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:{s:f, s:f, s:f, s:I, s:I, s:f, s:f, "
                  "s:f, s:f, s:f, s:f, s:f}, s:{s:f, s:f, s:I, s:f, s:f, s:f}, s:f, s:f}",
                  "blocks", bm.n_blocks, "found", bm.found, "hidden", (json_int_t)bm.hidden,
                  "heads", (json_int_t)bm.heads, "seq", (json_int_t)bm.seq, "vocab",
                  (json_int_t)bm.vocab, "parameters", (json_int_t)sc_block_model_params(&bm),
                  "block", "gemm_flops", bp->gemm_flops, "attention_flops", bp->attn_flops,
                  "memory_bytes", bp->mem_bytes, "params", (json_int_t)bp->params,
                  "split_params", (json_int_t)bp->split_params, "saved_bytes",
                  bp->saved_bytes, "attention_saved_bytes", bp->attn_saved_bytes,
                  "stream_saved_bytes", bp->whole_saved_bytes, "input_bytes", bp->input_bytes,
                  "low_saved_bytes", bp->low_saved_bytes, "stream_row_memory_bytes",
                  bp->row_mem_bytes, "last_product_flops", bp->last_gemm_flops,
                  "outside", "gemm_flops", bm.outside.gemm_flops, "memory_bytes",
                  bm.outside.mem_bytes, "params", (json_int_t)bm.outside.params, "saved_bytes",
                  bm.outside.saved_bytes, "low_saved_bytes", bm.outside.low_saved_bytes,
                  "lookup_elements", bm.outside.lookup_elems, "loss_saved_bytes", bm.loss_saved_bytes, "loss_split_saved_bytes",
                  bm.loss_split_saved_bytes));
    json_object_set_new(au, "memory_limit_bytes", json_integer(limit));
    json_object_set_new(au, "objective", json_string(sc_search_goal_name(x.goal)));
    json_object_set_new(au, "tp_left_node", json_boolean(r->tp_left_node));
    json_t *sk = json_array();
    for (int32_t i = 0; i < n_skipped; i++) json_array_append_new(sk, json_string(skipped[i]));
    json_object_set_new(au, "rounds", sk);
    json_t *fj = json_pack("{s:b, s:I, s:I, s:I, s:b, s:s}", "searched", fewer.searched,
                           "devices", (json_int_t)fewer.devices, "nodes",
                           (json_int_t)fewer.nodes, "devices_per_node",
                           (json_int_t)fewer.devices_per_node, "slower", fewer.slower, "why",
                           fewer.why);
    if (fewer.have) {
      sc_plan_predicted fp;
      estimate_predicted(&fewer.best, bm.seq, &fp);
      json_object_set_new(fj, "best", cand_json(&fewer.best, &fp, NULL));
    }
    json_object_set_new(fj, "basis", json_string(fewer_exact ? "exact" : "estimates"));
    json_object_set_new(fj, "exact_compiled", json_integer(x.n_fewer_exact));
    if (fewer_exact) json_object_set_new(fj, "exact_best", cand_json(&fewer_c, &fewer_pr, NULL));
    json_object_set_new(fj, "chosen_estimate_s", json_real(ch->step_s));
    if (x.goal == SC_SEARCH_TRAIN) json_object_set_new(au, "fewer_devices", fj);
    else json_decref(fj);
    json_object_set_new(au, "exact_evaluated_total", json_integer(x.n_exact_all));
    json_object_set_new(au, "exact_limits",
                        json_pack("{s:i, s:i, s:f}", "per_round", EXACT_TOP, "total", EXACT_MAX,
                                  "guard_s", EXACT_GUARD_S));
    json_object_set_new(au, "exact_cut", x.exact_cut[0] ? json_string(x.exact_cut) : json_null());
    double most[2] = {1, 1};
    json_t *sj = json_object();
    for (int k = 0; k < 6; k++) {
      if (scales[k] > most[k / 3]) most[k / 3] = scales[k];
      char key[32];
      snprintf(key, sizeof key, "%s%s", k < 3 ? "" : "pipe_",
               sc_search_recompute_name((sc_search_recompute)(k % 3)));
      json_object_set_new(sj, key, json_real(scales[k]));
    }
    json_object_set_new(au, "activation_scale", json_real(most[0]));
    json_object_set_new(au, "activation_scale_pipe", json_real(most[1]));
    json_object_set_new(au, "activation_scales", sj);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (text) printf("%s\n", text);
    free(text);
    json_decref(root);
  } else {
    char lim[32], t1[32], t2[32], t3[32], count[32];
    fmt_bytes((double)limit, lim, sizeof lim);
    sc_cli_format_count(sc_block_model_params(&bm), count, sizeof count);
    if (x.goal == SC_SEARCH_TRAIN)
      printf("plan --auto: %s on %s (%lld devices), global batch %lld, %s, memory per rank %s\n",
             o.file, cluster.name, (long long)sc_cluster_devices(&cluster),
             (long long)a.global_batch, ta.t.bf16 ? "bf16" : ta.t.fp16 ? "fp16" : "fp32", lim);
    else
      printf("plan --auto (inference, %s): %s on %s (%lld devices), batch %lld%s, %s, memory "
             "per rank %s\n", sc_search_goal_name(x.goal), o.file, cluster.name,
             (long long)sc_cluster_devices(&cluster), (long long)a.global_batch,
             x.goal == SC_SEARCH_THROUGHPUT ? " per replica" : "",
             bm.param_bytes == 2 ? "bf16" : "fp32", lim);
    printf("block model: %d blocks found %s; hidden %lld, heads %lld, sequence %lld, %s "
           "parameters\n", (int)bm.n_blocks, bm.found, (long long)bm.hidden,
           (long long)bm.heads, (long long)bm.seq, count);
    sc_cli_format_seconds(t_model, t1, sizeof t1);
    sc_cli_format_seconds(t_search, t2, sizeof t2);
    sc_cli_format_seconds(t_exact, t3, sizeof t3);
    printf("searched: %lld candidates evaluated, %lld pruned (tp not dividing the heads %lld, "
           "tp not dividing a weight's split dim %lld, tp leaving a node or uneven placement "
           "%lld, batch not dividing %lld, microbatches %lld, %s over memory %lld, lower bound "
           "no better than the 10th %lld, fsdp not "
           "dividing the hidden size %lld, cp not dividing the sequence %lld, ep not dividing "
           "the experts or beside cp %lld)\n",
           (long long)r->evaluated, (long long)r->pruned, (long long)r->pruned_heads,
           (long long)r->pruned_split, (long long)r->pruned_node, (long long)r->pruned_batch,
           (long long)r->pruned_microbatch,
           x.goal == SC_SEARCH_TRAIN ? "training state" : "weights", (long long)r->pruned_state,
           (long long)r->pruned_bound, (long long)r->pruned_fsdp, (long long)r->pruned_cp,
           (long long)r->pruned_ep);
    if (r->tp_left_node) printf("  (nothing fitted with tp inside a node: tp may span nodes)\n");
    printf("time: block model %s, search %s, exact evaluation %s\n", t1, t2, t3);
    for (int32_t i = 0; i < n_skipped; i++) printf("note: %s\n", skipped[i]);
    if (x.exact_cut[0]) printf("note: %s\n", x.exact_cut);
    if (fewer.slower) {
      char fo[384];
      cand_options(fewer_exact ? &fewer_c : &fewer.best, fo, sizeof fo);
      printf("note: more devices, a slower plan: the chosen one is %s (the best there: %s)\n",
             fewer.why, fo);
    }
    char mesh[128], et[32], xt[32], pk[32];
    sc_search_mesh(ch, mesh, sizeof mesh);
    sc_cli_format_seconds(exact_pr->step_time_s, xt, sizeof xt);
    sc_cli_format_seconds(ch->step_s, et, sizeof et);
    fmt_bytes((double)exact_pr->peak_bytes_per_rank, pk, sizeof pk);
    char opts[384];
    cand_options(ch, opts, sizeof opts);
    printf("\nchosen: %s%s%s (micro-batch %lld per replica)\n", opts,
           chosen_cut ? " --stage-boundaries " : "", chosen_cut ? chosen_cut : "",
           (long long)ch->micro_batch_size);
    if (exact_pr->unknown[0]) printf("  exact: unknown: %s\n", exact_pr->unknown);
    else
      printf("  exact (compiled, as plan %s--mesh): step %s, MFU %.1f%%, peak %s per "
             "rank (%lld bytes), %s", a.train ? "--train " : "", xt, 100 * exact_pr->mfu, pk,
             (long long)exact_pr->peak_bytes_per_rank, exact_pr->fits ? "fits" : "over");
    if (!exact_pr->unknown[0] && x.goal == SC_SEARCH_THROUGHPUT)
      printf(", %.4g examples/s (batch %lld a step)", (double)ch->batch / exact_pr->step_time_s,
             (long long)ch->batch);
    if (!exact_pr->unknown[0]) printf("\n");
    printf("  estimate (block model): step %s (%+.1f %% against the exact)\n", et, 100 * err);
    printf("\nbest %d (block-model estimates; [exact]: compiled and predicted exactly, the "
           "chosen one the fastest of those that fit):\n", (int)n_shown);
    printf("  %2s  %-22s %4s %3s  %-14s %4s %5s  %-17s %12s %7s %11s  %s\n", "#", "mesh", "zero",
           "sp", "schedule", "M", "mb", "recompute", "step", "MFU", "peak/rank", "why");
    for (int32_t i = 0; i < n_shown; i++) cand_line(i + 1, &shown[i], &shown_pr[i], why[i]);
  }
  fflush(stdout);
  if (a.html) {
    sc_plan_html_candidate cands[SC_SEARCH_TOP];
    for (int32_t i = 0; i < n_shown; i++) {
      const sc_plan_predicted *pr = &shown_pr[i];
      cands[i] = (sc_plan_html_candidate){.step_s = pr->step_time_s,
                                          .tokens_per_s = pr->tokens_per_s, .mfu = pr->mfu,
                                          .peak_bytes = pr->peak_bytes_per_rank,
                                          .fits = strcmp(pr->source, "estimate") != 0 ? pr->fits
                                                                                 : shown[i].fits,
                                          .chosen = i == chosen_at,
                                          .exact = strcmp(pr->source, "estimate") != 0};
      char *with_cut =
          options_with_cut(&shown[i], shown_exact[i] >= 0 ? x.cut_of[shown_exact[i]] : NULL);
      if (with_cut) snprintf(cands[i].plan, sizeof cands[i].plan, "%s", with_cut);
      else cand_options(&shown[i], cands[i].plan, sizeof cands[i].plan);
      sc_free(with_cut);
      snprintf(cands[i].why, sizeof cands[i].why, "%s", why[i]);
    }
    sc_diag hd = {0};
    sc_diag_clear(&hd);
    /* the chosen plan's page as plan [--train] --mesh ... --html draws it:
     * the build, its options and the target choose() predicted it for, so
     * that the page's bars, timeline and prediction are the table's exact
     * ones (tests/lit/plan/html_auto_train.test) */
    sc_status hs = a.train ? sc_plan_train_html(ex.b, &x.ex_train, &x.target, o.file,
                                                "shardc plan --auto", cands, n_shown, a.html, &hd)
                           : sc_plan_infer_html(ex.b, &x.target, o.file, "shardc plan --auto",
                                                cands, n_shown, a.html, &hd);
    if (hs != SC_OK) {
      sc_build_destroy(ex.b);
      sc_free(r);
      free_cuts(x.cut_of);
      return sc_cli_report(&hd, o.file);
    }
  }
  sc_build_destroy(ex.b);
  sc_free(r);
  free_cuts(x.cut_of);
  return 0;
}

/* ---- --mesh auto in run, compile and train ---- */

/* The ranks a job of one process per rank has (mpirun's, torchrun's or
 * Slurm's variables), or 0. */
static int64_t world_ranks(const char *comm) {
  if (!sc_partition_comm_is_world(comm)) return 0;
  const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    int64_t n;
    if (v && sc_cli_parse_i64(v, 1, SC_CLUSTER_MAX_PER_NODE, &n)) return n;
  }
  return 0;
}

/* The cluster --mesh auto plans for: --cluster's, or this machine
 * (cpu:local) with the ranks the command runs (a job's processes, else
 * the cores), measured now when it has no figures (thread-ranks only:
 * the processes of a job would each measure, and might choose apart);
 * one line on stderr says what was assumed. */
static int auto_cluster(sc_partition_args *p) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (p->cluster) {
    if (sc_cluster_load(p->cluster, &p->auto_cluster, &d) != SC_OK) return sc_cli_report(&d, NULL);
    p->cluster_loaded = &p->auto_cluster;
    return 0;
  }
  sc_cluster *c = &p->auto_cluster;
  if (sc_cluster_load("cpu:local", c, &d) != SC_OK) return sc_cli_report(&d, NULL);
  int64_t ranks = world_ranks(p->comm);
  const char *whose = ranks ? "this job's processes" : "this machine's cores";
  if (!ranks) ranks = c->devices_per_node;
  double seconds = 0;
  if (c->memory_bytes_per_s <= 0 && sc_partition_comm_is_world(p->comm))
    return sc_cli_usage_error("--mesh auto --comm %s: the processes would each measure this "
                              "machine and might choose apart; measure it once (shardc "
                              "calibrate -o PROFILE.json) and give --cluster "
                              "cpu:local@PROFILE.json", p->comm);
  if (c->memory_bytes_per_s <= 0) {
    sc_calibrate_opts co;
    sc_calibrate_opts_init(&co);
    co.quick = true;
    sc_profile *prof = sc_malloc(sizeof *prof);
    if (!prof) {
      fprintf(stderr, "shardc: error: out of memory\n");
      return 1;
    }
    double t0 = sc_cli_now_s();
    sc_status st = sc_calibrate(&co, prof, &d);
    seconds = sc_cli_now_s() - t0;
    if (st == SC_OK) sc_cluster_apply_profile(c, prof);
    sc_free(prof);
    if (st != SC_OK) return sc_cli_report(&d, NULL);
  }
  c->devices_per_node = ranks;
  p->cluster = "cpu:local";
  p->cluster_loaded = c;
  fprintf(stderr, "shardc: note: --mesh auto without --cluster: planning for cpu:local, %lld "
          "ranks (%s)%s", (long long)ranks, whose, seconds > 0 ? ", its figures measured now" : "");
  if (seconds > 0) fprintf(stderr, " (shardc calibrate --quick, %.1f s)", seconds);
  fprintf(stderr, "\n");
  return 0;
}

int sc_plan_auto_resolve(sc_partition_args *p, const sc_cli_opts *o, sc_train_args *ta) {
  SC_ASSERT(p->auto_plan);
  sc_partition_args others = *p;
  others.auto_plan = false;
  others.objective = NULL;
  others.cluster = NULL;
  others.comm = "local";
  others.reduce_dtype = NULL; /* the step's numerics, kept */
  if (p->mesh || p->plan_file || sc_partition_args_any(&others))
    return sc_cli_usage_error("--mesh auto chooses the mesh and every partitioning option "
                              "itself: give only --cluster (not --mesh, --plan, --zero, "
                              "--microbatches, ...)");
  if (ta && p->objective)
    return sc_cli_usage_error("--objective ranks inference plans; a training step is ranked by "
                              "its time");
  if (p->objective && strcmp(p->objective, "throughput") == 0)
    return sc_cli_usage_error("--objective throughput: each dp replica serves a batch of its "
                              "own, which one run does not; plan it with shardc plan --auto "
                              "--objective throughput");
  if (ta && ta->recompute_auto)
    return sc_cli_usage_error("--mesh auto chooses the recompute itself (no --recompute auto)");
  if (ta && ta->t.offload_activations)
    return sc_cli_usage_error("--mesh auto chooses the activation offloading itself (no "
                              "--offload-activations)");
  int rc = auto_cluster(p);
  if (rc) return rc;
  /* the exact count fixed (EXACT_TOP, EXACT_MAX): the processes of a job,
   * and compile and run of one model, choose the same plan */
  auto_search x = {.goal = ta ? SC_SEARCH_TRAIN : SC_SEARCH_LATENCY, .o = o, .ta = ta,
                   .cluster_spec = p->cluster, .cluster = p->cluster_loaded};
  if (ta) x.args.budget_bytes = ta->memory_budget;
  x.args.reduce_dtype = p->reduce_dtype;
  x.args.no_fuse_attention = p->no_fuse_attention;
  if ((rc = choose(&x)) != 0) return rc;
  const sc_search_cand *c = &x.r->top[x.chosen];
  const sc_plan_predicted *pr = &x.ex.b->plan->predicted;
  sc_search_mesh(c, p->auto_mesh, sizeof p->auto_mesh);
  p->mesh = p->auto_mesh;
  p->microbatches = c->microbatches > 1 ? c->microbatches : 0;
  p->sequence_parallel = c->sequence_parallel;
  p->expert_tensor_parallel = c->expert_tensor_parallel;
  if (!c->inference) {
    p->zero = c->zero;
    p->schedule = c->pp > 1 ? c->schedule : NULL;
    p->virtual_stages = c->virtual_stages > 1 ? c->virtual_stages : 0;
    ta->t.recompute = (sc_recompute_kind)c->recompute;
    ta->t.offload_activations = c->offload_activations;
    ta->t.activation_loading_horizon = offload_horizon(c);
  }
  char opts[384], t[32], mem[32];
  cand_options(c, opts, sizeof opts);
  sc_cli_format_seconds(pr->step_time_s, t, sizeof t);
  fmt_bytes((double)pr->peak_bytes_per_rank, mem, sizeof mem);
  const char *cut = x.cut_of[x.chosen];
  fprintf(stderr, "shardc: note: --mesh auto chose --cluster %s %s%s%s\n", p->cluster, opts,
          cut ? " --stage-boundaries " : "", cut ? cut : "");
  fprintf(stderr, "shardc: note: predicted %s %s, peak %s per rank (%lld candidates evaluated, "
          "%lld pruned, %d compiled, %.2f s)\n", c->inference ? "batch" : "step",
          pr->unknown[0] ? "unknown" : t, mem, (long long)x.evaluated, (long long)x.pruned,
          (int)x.n_exact, x.t_model + x.t_search + x.t_exact);
  sc_build_destroy(x.ex.b);
  sc_free(x.r);
  free_cuts(x.cut_of);
  return 0;
}
