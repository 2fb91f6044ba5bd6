/* check.c — `shardc check MODEL`: the checks a CI job runs on a model and
 * its plan before a GPU is spent (docs/ci.md), each passed, failed (with
 * the reason) or skipped (with why):
 *   import        every node supported, all unsupported ones listed
 *                 (driver/check.h's sc_check_import)
 *   fits          every rank's exact memory (the plan's: arena, state,
 *                 stash, constants, the device's lines) within the
 *                 cluster's device memory, planned for that device as
 *                 `shardc plan --cluster` plans it (partition_args.h's
 *                 sc_partition_args_target: a GPU cluster's CUDA device);
 *                 skipped without --cluster
 *   performance   the predicted step (codegen/dist_sim.h, as `shardc plan
 *                 --cluster` predicts it) and every rank's memory against
 *                 --baseline, an earlier --report (driver/check.h compares
 *                 and names what grew); skipped without --cluster or
 *                 --baseline
 *   equivalence   with --train and a mesh: the partitioned step on
 *                 thread-ranks against one rank (api/check_run.h's
 *                 sc_check_equivalence); skipped without either, with
 *                 --no-weights, or when the ranks' memory, twice, is over
 *                 half of this host's
 *   reproducible  two builds written as `shardc compile` writes them, every
 *                 file's SHA-256 equal (sc_check_reproducible); skipped
 *                 with --no-weights
 * With --mesh auto (or --auto) the planner's search chooses the plan first
 * (plan_auto.h's sc_plan_auto_resolve, as run, compile and train do).
 * The report (driver/check.h) is printed (--format text|json|github) and
 * written (--report, --junit); --html writes the plan's page as `shardc
 * plan --html` does (plan_train.h / plan_html.h). Exit status: 0 nothing failed, 1 a check
 * failed, 2 usage. This file parses the options, makes the builds as the
 * other commands do (partition_args.h, train_args.h), gathers the figures
 * (plan_train.h's per-rank memory, the prediction), decides what is
 * skipped, and prints; the checks that run things and the report are the
 * library's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/check_run.h"
#include "codegen/dist_sim.h"
#include "driver/check.h"
#include "driver/plan_report.h"
#include "driver/train_memory.h"
#include "ir/fileio.h"
#include "ir/progress.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/partition_args.h"
#include "tools/plan_auto.h"
#include "tools/plan_train.h"
#include "tools/train_args.h"

static const char *const USAGE =
    "shardc check MODEL.onnx [--train] [--cluster C]\n"
    "                       [--mesh AXES | --plan FILE.json | --mesh auto]\n"
    "                       [--dim NAME=V]... [--baseline REPORT.json]\n"
    "                       [--max-time-regression P%] [--max-memory-regression P%]\n"
    "                       [--report OUT.json] [--junit OUT.xml] [--format text|json|github]\n"
    "                       [--html OUT.html] [--quiet]\n"
    "                       [--no-weights] (and the options of shardc plan)";

enum { MAX_ARGS = 1024 };

typedef enum out_format { FORMAT_TEXT, FORMAT_JSON, FORMAT_GITHUB } out_format;

typedef struct check_args {
  sc_partition_args pa;
  sc_train_args ta;
  bool train;
  const char *baseline, *report, *junit, *html;
  sc_check_thresholds th;
  out_format format;
  sc_device_target target; /* what the memory is planned for: the cluster's
                              GPU (partition_args.h's sc_partition_args_target,
                              as shardc plan), else this host's CPU */
} check_args;

/* "5%", "5" or "0.5%" as the fraction 0.05; 2 after a usage error. */
static int parse_percent(const char *opt, const char *v, double *out) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", v);
  size_t n = strlen(buf);
  if (n && buf[n - 1] == '%') buf[n - 1] = 0;
  double x;
  if (sc_cli_parse_number(opt, buf, &x)) return 2;
  if (x < 0 || x > 1e6) return sc_cli_usage_error("%s takes a percentage >= 0, not '%s'", opt, v);
  *out = x / 100;
  return 0;
}

/* This command's own options, each with a value (own_option's cases in
 * this order). */
static const char *const OWN_OPTIONS[] = {"--baseline", "--report", "--junit", "--format",
                                          "--max-time-regression", "--max-memory-regression",
                                          "--html"};
enum { N_OWN_OPTIONS = sizeof OWN_OPTIONS / sizeof OWN_OPTIONS[0] };

/* The options of this command at argv[*i]: 1 taken, 0 not one, 2 usage. */
static int own_option(check_args *a, int argc, char **argv, int *i) {
  const char *const *names = OWN_OPTIONS;
  bool missing = false;
  for (size_t k = 0; k < N_OWN_OPTIONS; k++) {
    const char *v = sc_cli_opt_value(argc, argv, i, names[k], &missing);
    if (!v) continue;
    if (missing) return sc_cli_usage_error("%s needs a value", names[k]);
    (*i)++;
    switch (k) {
    case 0: a->baseline = v; break;
    case 1: a->report = v; break;
    case 2: a->junit = v; break;
    case 3:
      if (strcmp(v, "text") == 0) a->format = FORMAT_TEXT;
      else if (strcmp(v, "json") == 0) a->format = FORMAT_JSON;
      else if (strcmp(v, "github") == 0) a->format = FORMAT_GITHUB;
      else return sc_cli_usage_error("--format takes text, json or github, not '%s'", v);
      break;
    case 4: return parse_percent(names[k], v, &a->th.time) ? 2 : 1;
    case 5: return parse_percent(names[k], v, &a->th.memory) ? 2 : 1;
    default: a->html = v; break;
    }
    return 1;
  }
  return 0;
}

static int split_args(int argc, char **argv, check_args *a, char **rest, int *n_rest) {
  *n_rest = 0;
  rest[(*n_rest)++] = argv[0];
  bool only_files = false;
  for (int i = 1; i < argc;) {
    if (*n_rest >= MAX_ARGS - 1) return sc_cli_usage_error("too many arguments");
    if (!only_files && argv[i][0] == '-') {
      if (strcmp(argv[i], "--train") == 0) {
        a->train = true;
        i++;
        continue;
      }
      if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
        i++; /* no progress line (main.c) */
        continue;
      }
      if (strncmp(argv[i], "--global-batch", 14) == 0)
        return sc_cli_usage_error("check takes the global batch as the batch dim's --dim "
                                  "NAME=B (as run, compile and train with --mesh auto)");
      if (strncmp(argv[i], "--comm", 6) == 0)
        return sc_cli_usage_error("check runs its ranks as threads (no --comm)");
      int rc = own_option(a, argc, argv, &i);
      if (rc == 1) continue;
      if (rc) return rc;
      if ((rc = sc_partition_args_take(&a->pa, argc, argv, &i, false)) == 1) continue;
      if (rc) return rc;
      if ((rc = sc_train_args_take(&a->ta, argc, argv, &i)) == 1) continue;
      if (rc) return rc;
      if (strcmp(argv[i], "--") == 0) only_files = true;
    }
    rest[(*n_rest)++] = argv[i++];
  }
  return 0;
}

/* ---- the builds ---- */

/* The model's build with pa (NULL: one rank): 0, or the exit status
 * after the error printed. */
static int build(check_args *a, const sc_partition_args *pa, const sc_cli_opts *o,
                 sc_build **out) {
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, pa);
  bs.compile.quiet = true;
  sc_build_setup_target(&bs, &a->target); /* as shardc plan compiles for it */
  bs.build.no_weights = o->no_weights;
  bs.build.stats = true; /* the blocks' figures */
  *out = NULL;
  if (a->train) {
    a->ta.t.shape_only = o->no_weights;
    return sc_train_args_build(&a->ta, pa, o, &bs.build, out);
  }
  return sc_partition_args_build(pa, o, &bs.build, out, NULL);
}

static double elapsed(double t0) { return sc_cli_now_s() - t0; }

/* Check id begins: said on the progress line; its start time. */
static double start(sc_progress *pr, sc_check_id id) {
  sc_progress_set(pr, id, sc_check_name(id));
  return sc_cli_now_s();
}

/* ---- the figures: memory per rank, the predicted step, collectives ---- */

/* Each rank's memory on target t as shardc plan counts it: the training
 * step's (plan_train.h), else each stage's (plan_predict.h). */
static sc_status rank_memory(const check_args *a, const sc_build *b, const sc_device_target *t,
                             sc_rank_memory **out, int32_t *n, sc_diag *d) {
  return a->train ? sc_plan_train_rank_memory(b, t, out, n, d)
                  : sc_plan_stage_memory(b->program, t, out, n, d);
}

/* collective/<Op> <axes>: the bytes a rank sends in them, every stage
 * program run once. */
static sc_status collective_metrics(const sc_build *b, sc_check_report *r, sc_diag *d) {
  const sc_dist_program *dp = b->program;
  for (int32_t s = 0; b->part && s < dp->n_stages; s++) {
    sc_train_comm *cm = NULL;
    int32_t n = 0;
    sc_status st = sc_train_comm_of(dp->stages[s].program, &cm, &n, d);
    if (st != SC_OK) return st;
    for (int32_t i = 0; i < n; i++) {
      char axes[128], name[192];
      sc_cli_format_axes(&dp->mesh, cm[i].axes, axes, sizeof axes);
      snprintf(name, sizeof name, "collective/%s %s",
               (unsigned)cm[i].kind < SC_COMM_KIND_COUNT ? sc_comm_kind_names[cm[i].kind] : "?",
               axes);
      const double *old = sc_check_metric_get(r, name);
      sc_check_metric_set(r, name, (old ? *old : 0) + (double)cm[i].sent);
    }
    sc_free(cm);
  }
  return SC_OK;
}

/* block/<key>.<i>/flops and /param_bytes (and block/outside/...): each
 * repeated block's FLOPs (of the built graph: the training step's with
 * --train) and parameters (passes/stats.h's sc_stats_finish on the build's
 * global graph), what makes a step or a rank grow when the model does. */
static sc_status block_metrics(sc_build *b, sc_check_report *r) {
  if (!b->has_stats) return SC_OK;
  sc_status st = sc_stats_finish(b->graph, &b->stats); /* the build begins them */
  if (st != SC_OK) return st;
  const sc_stats *s = &b->stats;
  if (s->n_blocks == 0) return SC_OK; /* no repeated blocks: nothing to name */
  char name[160];
  for (int32_t i = 0; i <= s->n_blocks; i++) {
    const sc_block_stats *bs = i == s->n_blocks ? &s->outside : &s->blocks[i];
    char block[96];
    if (i == s->n_blocks) snprintf(block, sizeof block, "outside");
    else snprintf(block, sizeof block, "%s%s%lld", s->block_key ? s->block_key : "",
                  s->block_key ? "." : "", (long long)bs->index);
    snprintf(name, sizeof name, "block/%s/flops", block);
    sc_check_metric_set(r, name, bs->flops);
    snprintf(name, sizeof name, "block/%s/param_bytes", block);
    sc_check_metric_set(r, name, (double)bs->param_bytes);
  }
  return SC_OK;
}

static void fmt_bytes(int64_t b, char *buf, size_t n) { sc_stats_format_bytes((double)b, buf, n); }

/* ---- 2. fits ---- */

static void check_fits(sc_check_report *r, const sc_build *b, const sc_rank_memory *m, int32_t n) {
  const sc_plan *pl = b->plan;
  int64_t dev = pl && pl->cluster ? pl->cluster_figures.device_memory_bytes : 0;
  if (!pl || !pl->cluster) {
    sc_check_set(r, SC_CHECK_FITS, SC_CHECK_SKIPPED,
                 "no --cluster: the device's memory is unknown (the ranks' memory is in the "
                 "report's metrics)");
    return;
  }
  if (dev <= 0) {
    sc_check_set(r, SC_CHECK_FITS, SC_CHECK_SKIPPED, "the cluster %s does not say its device's "
                 "memory", pl->cluster);
    return;
  }
  /* a row stands for the ranks of its stage (or pipeline rank): alike */
  int64_t alike = n > 0 ? b->program->mesh.n_ranks / n : 1, over = 0;
  int32_t most = 0;
  for (int32_t i = 0; i < n; i++) {
    if (m[i].total > dev) over += alike;
    if (m[i].total > m[most].total) most = i;
  }
  char a[32], c[32], e[32];
  fmt_bytes(dev, c, sizeof c);
  if (!over) {
    fmt_bytes(m[most].total, a, sizeof a);
    fmt_bytes(dev - m[most].total, e, sizeof e);
    sc_check_set(r, SC_CHECK_FITS, SC_CHECK_PASSED, "every rank fits: the largest, %s, needs %s "
                 "of %s (%s to spare)", m[most].rank, a, c, e);
    return;
  }
  int64_t all = alike * n;
  sc_check_set(r, SC_CHECK_FITS, SC_CHECK_FAILED, "%lld of %lld rank%s do%s not fit the device's "
               "%s:", (long long)over, (long long)all, all == 1 ? "" : "s", over == 1 ? "es" : "",
               c);
  for (int32_t i = 0; i < n; i++) {
    if (m[i].total <= dev) continue;
    fmt_bytes(m[i].total, a, sizeof a);
    fmt_bytes(m[i].total - dev, e, sizeof e);
    char parts[1024] = "";
    size_t len = 0;
    for (int32_t k = 0; k < m[i].n_parts && len < sizeof parts; k++) {
      char pb[32];
      if (!m[i].parts[k].bytes) continue;
      fmt_bytes(m[i].parts[k].bytes, pb, sizeof pb);
      int w = snprintf(parts + len, sizeof parts - len, "%s%s %s", len ? ", " : "",
                       m[i].parts[k].name, pb);
      if (w > 0) len += (size_t)w;
    }
    char others[64] = "";
    if (alike > 1) snprintf(others, sizeof others, " (and the %lld rank%s alike)",
                            (long long)(alike - 1), alike == 2 ? "" : "s");
    sc_check_append(r, SC_CHECK_FITS, "  %s%s: %s, %s over (%s)", m[i].rank, others, a, e,
                    parts);
  }
}

/* ---- 3. performance ---- */

static void predicted_metrics(sc_check_report *r, const sc_plan_predicted *p) {
  sc_check_metric_set(r, "step_time_s", p->step_time_s);
  if (p->tokens_per_s > 0) sc_check_metric_set(r, "tokens_per_s", p->tokens_per_s);
  sc_check_metric_set(r, "time/compute", p->compute_s);
  for (int32_t i = 0; i < p->n_comm; i++) {
    char name[96];
    snprintf(name, sizeof name, "time/comm %s", p->comm[i].axes);
    sc_check_metric_set(r, name, p->comm[i].seconds);
  }
  sc_check_metric_set(r, "time/bubble", p->bubble_s);
  sc_check_metric_set(r, "time/recompute", p->recompute_s);
  sc_check_metric_set(r, "time/optimizer", p->optimizer_s);
}

static void check_performance(sc_check_report *r, const sc_build *b, const check_args *a) {
  const sc_plan *pl = b->plan;
  if (!pl || !pl->cluster) {
    sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_SKIPPED,
                 "no --cluster: no step time is predicted");
    return;
  }
  const sc_plan_predicted *p = &pl->predicted;
  if (!p->on || p->unknown[0]) {
    sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_SKIPPED, "the step time is unknown on %s: %s",
                 pl->cluster, p->unknown[0] ? p->unknown : "the cluster's figures are unknown");
    return;
  }
  char st[64];
  sc_cli_format_seconds(p->step_time_s, st, sizeof st);
  if (!a->baseline) {
    char rate[64] = "";
    if (p->tokens_per_s > 0) snprintf(rate, sizeof rate, ", %.0f tokens/s", p->tokens_per_s);
    sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_SKIPPED,
                 "no --baseline to compare with (predicted step %s on %s%s; --report keeps the "
                 "figures for the next run)", st, pl->cluster, rate);
    return;
  }
  sc_check_report base;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_check_report_read(a->baseline, &base, &d) != SC_OK) {
    char msg[2048];
    sc_diag_format(&d, msg, sizeof msg);
    sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_FAILED, "the baseline cannot be read: %s", msg);
    return;
  }
  bool regressed = false;
  char *msg = NULL;
  if (sc_check_compare(&base, r, &a->th, &regressed, &msg) != SC_OK) {
    sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_FAILED, "out of memory");
  } else {
    sc_check_set(r, SC_CHECK_PERFORMANCE, regressed ? SC_CHECK_FAILED : SC_CHECK_PASSED,
                 "%s against %s (limits: time %.2f %%, memory %.2f %%):\n%s",
                 regressed ? "regressed" : "no regression", a->baseline, 100 * a->th.time,
                 100 * a->th.memory, msg);
    size_t n = strlen(r->checks[SC_CHECK_PERFORMANCE].message);
    if (n && r->checks[SC_CHECK_PERFORMANCE].message[n - 1] == '\n')
      r->checks[SC_CHECK_PERFORMANCE].message[n - 1] = 0;
  }
  sc_free(msg);
  sc_check_report_free(&base);
}

/* ---- 4. equivalence ---- */

static int64_t host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

static void check_equivalence(sc_check_report *r, check_args *a, const sc_cli_opts *o,
                              sc_build *mesh_build) {
  const sc_check_id C = SC_CHECK_EQUIVALENCE;
  if (!a->train) {
    sc_check_set(r, C, SC_CHECK_SKIPPED, "it trains a few steps: give --train");
    return;
  }
  if (!mesh_build->part || mesh_build->program->mesh.n_ranks < 2) {
    sc_check_set(r, C, SC_CHECK_SKIPPED, "the plan has one rank: nothing is partitioned");
    return;
  }
  if (o->no_weights) {
    sc_check_set(r, C, SC_CHECK_SKIPPED, "--no-weights: the steps need the weights");
    return;
  }
  /* every rank's memory on this host's CPU, where the steps run (not the
   * cluster's GPU: no context, no NCCL buffers; a pipeline rank's stands for
   * its data and tensor parallel group) twice: the one-rank step needs
   * about as much */
  const sc_dist_program *dp = mesh_build->program;
  sc_device_target host_target;
  sc_runtime_target_host(&host_target);
  sc_rank_memory *mem = NULL;
  int32_t n_mem = 0;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (rank_memory(a, mesh_build, &host_target, &mem, &n_mem, &d) != SC_OK) {
    char msg[2048];
    sc_diag_format(&d, msg, sizeof msg);
    sc_check_set(r, C, SC_CHECK_FAILED, "the memory plan on this host failed: %s", msg);
    return;
  }
  int64_t per_row = n_mem > 0 ? dp->mesh.n_ranks / n_mem : 0, need = 0, host = host_memory();
  for (int32_t i = 0; i < n_mem; i++) need += mem[i].total * per_row;
  sc_free(mem);
  need *= 2;
  if (host <= 0 || need > host / 2) {
    char a1[32], a2[32];
    fmt_bytes(need, a1, sizeof a1);
    fmt_bytes(host / 2, a2, sizeof a2);
    sc_check_set(r, C, SC_CHECK_SKIPPED, "the steps need about %s, more than half of this host's "
                 "memory (%s): not run", a1, a2);
    return;
  }
  sc_build *one_build = NULL;
  sc_partition_args none;
  sc_partition_args_init(&none);
  none.no_fuse_attention = a->pa.no_fuse_attention; /* the same step, one rank */
  if (build(a, &none, o, &one_build) != 0) {
    sc_check_set(r, C, SC_CHECK_FAILED, "the one-rank step did not build (the error above)");
    return;
  }
  sc_check_equivalence(r, mesh_build, one_build, &a->ta.t);
  sc_build_destroy(one_build);
}

/* ---- 5. reproducible ---- */

static void check_reproducible(sc_check_report *r, check_args *a, const sc_cli_opts *o,
                               const sc_build *first) {
  const sc_check_id C = SC_CHECK_REPRODUCIBLE;
  if (o->no_weights) {
    sc_check_set(r, C, SC_CHECK_SKIPPED, "--no-weights: a bundle holds the weights");
    return;
  }
  sc_build *second = NULL;
  if (build(a, &a->pa, o, &second) != 0) {
    sc_check_set(r, C, SC_CHECK_FAILED, "the second build failed (the error above)");
    return;
  }
  sc_check_reproducible(r, first, second, a->train ? &a->ta.t : NULL, o->file);
  sc_build_destroy(second);
}

/* ---- output ---- */

static void print_text(const sc_check_report *r) {
  int counts[SC_CHECK_STATE_COUNT] = {0};
  printf("shardc check %s (%s%s%s%s)\n", r->model, r->train ? "training, " : "", r->plan,
         r->cluster ? " on " : "", r->cluster ? r->cluster : "");
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    const sc_check_result *c = &r->checks[i];
    counts[c->state]++;
    printf("  %-13s %-8s", sc_check_name((sc_check_id)i), sc_check_state_name(c->state));
    const char *m = c->message ? c->message : "";
    const char *nl = strchr(m, '\n');
    printf(" %.*s (%.2f s)\n", nl ? (int)(nl - m) : (int)strlen(m), m, c->seconds);
    for (; nl; nl = strchr(nl + 1, '\n')) {
      const char *e = strchr(nl + 1, '\n');
      printf("                %.*s\n", e ? (int)(e - nl - 1) : (int)strlen(nl + 1), nl + 1);
    }
  }
  printf("%d passed, %d failed, %d skipped\n", counts[SC_CHECK_PASSED], counts[SC_CHECK_FAILED],
         counts[SC_CHECK_SKIPPED]);
}

/* GitHub Actions' workflow commands: data escapes %, CR and LF; a
 * property value also : and ,. */
static void gh_escape(const char *s, bool property) {
  for (; s && *s; s++) {
    if (*s == '%') fputs("%25", stdout);
    else if (*s == '\r') fputs("%0D", stdout);
    else if (*s == '\n') fputs("%0A", stdout);
    else if (property && *s == ':') fputs("%3A", stdout);
    else if (property && *s == ',') fputs("%2C", stdout);
    else putchar(*s);
  }
}

static void print_github(const sc_check_report *r) {
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    const sc_check_result *c = &r->checks[i];
    const char *level = c->state == SC_CHECK_FAILED    ? "error"
                        : c->state == SC_CHECK_SKIPPED ? "warning"
                                                       : "notice";
    printf("::%s file=", level);
    gh_escape(r->model, true);
    printf(",title=");
    char title[128];
    snprintf(title, sizeof title, "shardc check %s %s", sc_check_name((sc_check_id)i),
             sc_check_state_name(c->state));
    gh_escape(title, true);
    printf("::");
    gh_escape(c->message, false);
    printf("\n");
  }
}

static void xml_escape(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\n': fputs("&#10;", f); break;
    default:
      if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
    }
  }
}

/* JUnit XML: one testsuite, one testcase per check; a failure a
 * <failure>, a skip a <skipped>, each with the first line as message and
 * the whole text. */
static void write_junit(FILE *f, const sc_check_report *r) {
  int failures = 0, skipped = 0;
  double total = 0;
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    failures += r->checks[i].state == SC_CHECK_FAILED;
    skipped += r->checks[i].state == SC_CHECK_SKIPPED;
    total += r->checks[i].seconds;
  }
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"shardc check\" "
          "tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.3f\">\n",
          SC_CHECK_COUNT, failures, skipped, total);
  fprintf(f, "  <testsuite name=\"");
  xml_escape(f, r->model);
  fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.3f\">\n",
          SC_CHECK_COUNT, failures, skipped, total);
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    const sc_check_result *c = &r->checks[i];
    fprintf(f, "    <testcase classname=\"shardc.check\" name=\"%s\" time=\"%.3f\"",
            sc_check_name((sc_check_id)i), c->seconds);
    const char *m = c->message ? c->message : "";
    if (c->state != SC_CHECK_FAILED && c->state != SC_CHECK_SKIPPED) {
      fprintf(f, ">\n      <system-out>");
      xml_escape(f, m);
      fprintf(f, "</system-out>\n    </testcase>\n");
      continue;
    }
    const char *tag = c->state == SC_CHECK_FAILED ? "failure" : "skipped";
    const char *nl = strchr(m, '\n');
    char first[512];
    snprintf(first, sizeof first, "%.*s", nl ? (int)(nl - m) : (int)strlen(m), m);
    fprintf(f, ">\n      <%s message=\"", tag);
    xml_escape(f, first);
    fprintf(f, "\"%s>", c->state == SC_CHECK_FAILED ? " type=\"shardc.check\"" : "");
    xml_escape(f, m);
    fprintf(f, "</%s>\n    </testcase>\n", tag);
  }
  fprintf(f, "  </testsuite>\n</testsuites>\n");
}

/* Writes the report JSON or the JUnit XML to path (replaced whole). */
static int write_file(const char *path, const sc_check_report *r, bool junit) {
  sc_file_commit c;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_file_commit_begin(&c, path, &d) != SC_OK) return sc_cli_report(&d, path);
  if (junit) write_junit(c.f, r);
  else {
    char *s = sc_check_report_json(r);
    if (s) fprintf(c.f, "%s\n", s);
    else {
      sc_file_commit_abort(&c);
      fprintf(stderr, "shardc: error: out of memory\n");
      return 1;
    }
    sc_free(s);
  }
  if (ferror(c.f)) {
    sc_file_commit_abort(&c);
    fprintf(stderr, "shardc: error: %s: cannot write\n", path);
    return 1;
  }
  if (sc_file_commit_end(&c, &d) != SC_OK) return sc_cli_report(&d, path);
  return 0;
}

/* --html: the page of the plan the checks built, as `shardc plan --html`
 * writes it (plan_train.h's sc_plan_train_html with --train, plan_html.h's
 * sc_plan_infer_html otherwise). */
static int write_html(const check_args *a, const sc_build *b, const char *file) {
  sc_diag d = {0}; /* the memory planned as the fits check planned it */
  sc_diag_clear(&d);
  sc_status st = a->train ? sc_plan_train_html(b, &a->ta.t, &a->target, file,
                                               "shardc check --train", NULL, 0, a->html, &d)
                          : sc_plan_infer_html(b, &a->target, file, "shardc check", NULL, 0,
                                               a->html, &d);
  return st == SC_OK ? 0 : sc_cli_report(&d, file);
}

static int print_help(void) {
  printf("usage: %s\n\n"
         "Runs the checks a CI job gates a model and its plan on, and reports each\n"
         "as passed, failed (with the reason) or skipped (with why):\n"
         "  import        every node is supported (all unsupported ones listed)\n"
         "  fits          every rank's exact memory fits its device (--cluster)\n"
         "  performance   the predicted step time, tokens/s and per-rank memory\n"
         "                against --baseline (--cluster)\n"
         "  equivalence   --train with a mesh: %d steps of the partitioned step on\n"
         "                thread-ranks equal one rank's (losses, weights)\n"
         "  reproducible  two compiles give byte-identical bundles (SHA-256)\n\n"
         "  --train                 check the training step (the options of shardc train\n"
         "                          that shape it: --optimizer, --loss, ...)\n"
         "  --mesh AXES, --plan FILE.json, --cluster C, ...  the plan (shardc plan's)\n"
         "  --mesh auto (--auto)    the plan the search chooses (shardc plan --auto's; the\n"
         "                          global batch is the batch dim's --dim), said on stderr\n"
         "  --baseline REPORT.json  an earlier run's --report to compare with\n"
         "  --max-time-regression P%%    how much step time may grow (default 5%%)\n"
         "  --max-memory-regression P%%  how much a rank's memory may grow (default 2%%)\n"
         "  --report OUT.json       write the report (docs/ci.md): results, figures, hashes\n"
         "  --junit OUT.xml         write JUnit XML, one testcase per check\n"
         "  --format text|json|github  what is printed (github: workflow annotations)\n"
         "  --html OUT.html         write the page of the plan checked (shardc plan --html's)\n"
         "  --quiet, -q             no progress line on a terminal's stderr (docs/cli.md)\n"
         "Exit status: 0 nothing failed, 1 a check failed, 2 usage (docs/ci.md).\n",
         USAGE, SC_CHECK_EQUIV_STEPS);
  return 0;
}

int sc_cmd_check(int argc, char **argv) {
  check_args a;
  memset(&a, 0, sizeof a);
  sc_partition_args_init(&a.pa);
  sc_train_args_init(&a.ta);
  a.th.time = 0.05;
  a.th.memory = 0.02;
  char *rest[MAX_ARGS];
  int n_rest = 0;
  int rc = split_args(argc, argv, &a, rest, &n_rest);
  if (rc) return rc;
  sc_cli_opts o;
  if ((rc = sc_cli_parse(n_rest, rest, SC_CLI_DIM | SC_CLI_NO_WEIGHTS, USAGE, &o)) != 0) return rc;
  if (o.help) return print_help();
  if (!a.train && a.ta.first) return sc_cli_usage_error("%s needs --train", a.ta.first);
  a.ta.budget_for_search = a.pa.auto_plan;
  if (a.train && (rc = sc_train_args_finish(&a.ta)) != 0) return rc;
  /* --mesh auto (--auto): the search chooses the plan, said on stderr,
   * then built as --mesh builds it (plan_auto.h) */
  if (a.pa.auto_plan && (rc = sc_plan_auto_resolve(&a.pa, &o, a.train ? &a.ta : NULL)) != 0)
    return rc;
  if (a.html && !a.train && !sc_partition_args_active(&a.pa))
    return sc_cli_usage_error("--html draws an inference plan's stages: give --mesh, --plan or "
                              "--mesh auto (or --train)");
  if (a.baseline && access(a.baseline, R_OK) != 0)
    return sc_cli_usage_error("--baseline %s: no such file", a.baseline);
  /* the memory of the cluster's device, as shardc plan plans it */
  sc_runtime_target_host(&a.target);
  sc_partition_args_target(&a.pa, &a.target);

  sc_check_report r;
  sc_check_report_init(&r);
  r.model = sc_strdup(o.file);
  r.train = a.train;
  r.plan = sc_strdup(a.pa.plan_file ? a.pa.plan_file : a.pa.mesh ? a.pa.mesh : "one rank");
  r.cluster = a.pa.cluster ? sc_strdup(a.pa.cluster) : NULL;
  sc_build *b = NULL;
  sc_rank_memory *mem = NULL;
  int32_t n_mem = 0;
  sc_progress pr; /* which check of how many (ir/progress.h): a terminal's line */
  sc_progress_begin(&pr, "check", SC_CHECK_COUNT, false);
  double t0 = start(&pr, SC_CHECK_IMPORT);
  sc_check_import(&r, o.file);
  r.checks[SC_CHECK_IMPORT].seconds = elapsed(t0);
  const char *why = NULL;
  if (r.checks[SC_CHECK_IMPORT].state == SC_CHECK_FAILED) why = "the model does not import";
  t0 = start(&pr, SC_CHECK_FITS);
  if (!why && (rc = build(&a, &a.pa, &o, &b)) != 0) {
    if (rc == 2) goto done; /* a usage error, printed */
    sc_check_set(&r, SC_CHECK_FITS, SC_CHECK_FAILED, "the plan does not build: %s",
                 "the error printed above");
    why = "the plan does not build";
  }
  if (!why) {
    sc_diag d = {0};
    sc_diag_clear(&d);
    sc_status st = rank_memory(&a, b, &a.target, &mem, &n_mem, &d);
    int64_t peak = 0;
    for (int32_t i = 0; st == SC_OK && i < n_mem; i++) {
      char name[160];
      snprintf(name, sizeof name, "memory/%s/peak", mem[i].rank);
      sc_check_metric_set(&r, name, (double)mem[i].total);
      for (int32_t k = 0; k < mem[i].n_parts; k++) {
        snprintf(name, sizeof name, "memory/%s/%s", mem[i].rank, mem[i].parts[k].name);
        sc_check_metric_set(&r, name, (double)mem[i].parts[k].bytes);
      }
      if (mem[i].total > peak) peak = mem[i].total;
    }
    if (st == SC_OK) st = collective_metrics(b, &r, &d);
    if (st == SC_OK && (st = block_metrics(b, &r)) != SC_OK && d.status == SC_OK)
      sc_diag_set(&d, st, NULL, NULL, "the blocks' figures: %s", b->graph->diag.msg);
    if (st == SC_OK && a.train) st = sc_plan_train_predict(b, &a.ta.t, &a.target, &d);
    else if (st == SC_OK && b->plan && b->plan->cluster) sc_build_predict(b, NULL, peak);
    if (st != SC_OK) {
      char msg[2048];
      sc_diag_format(&d, msg, sizeof msg);
      sc_check_set(&r, SC_CHECK_FITS, SC_CHECK_FAILED, "the memory plan failed: %s", msg);
      why = "the memory plan failed";
    } else {
      if (b->plan && b->plan->predicted.on && !b->plan->predicted.unknown[0])
        predicted_metrics(&r, &b->plan->predicted);
      check_fits(&r, b, mem, n_mem);
    }
  }
  r.checks[SC_CHECK_FITS].seconds = elapsed(t0);
  if (!why) {
    t0 = start(&pr, SC_CHECK_PERFORMANCE);
    check_performance(&r, b, &a);
    r.checks[SC_CHECK_PERFORMANCE].seconds = elapsed(t0);
    t0 = start(&pr, SC_CHECK_EQUIVALENCE);
    check_equivalence(&r, &a, &o, b);
    r.checks[SC_CHECK_EQUIVALENCE].seconds = elapsed(t0);
    t0 = start(&pr, SC_CHECK_REPRODUCIBLE);
    check_reproducible(&r, &a, &o, b);
    r.checks[SC_CHECK_REPRODUCIBLE].seconds = elapsed(t0);
  }
  sc_progress_end(&pr); /* erased before the report is printed */
  for (int i = 0; i < SC_CHECK_COUNT; i++) /* never silently passed */
    if (r.checks[i].state == SC_CHECK_NOT_RUN)
      sc_check_set(&r, (sc_check_id)i, SC_CHECK_SKIPPED, "not run: %s", why ? why : "?");
  fflush(stdout);
  if (a.format == FORMAT_TEXT) print_text(&r);
  else if (a.format == FORMAT_GITHUB) print_github(&r);
  else {
    char *s = sc_check_report_json(&r);
    if (s) printf("%s\n", s);
    sc_free(s);
  }
  fflush(stdout);
  rc = sc_check_any_failed(&r) ? 1 : 0;
  if (a.report && write_file(a.report, &r, false)) rc = 1;
  if (a.junit && write_file(a.junit, &r, true)) rc = 1;
  if (a.html && !why && write_html(&a, b, o.file)) rc = 1;
done:
  sc_progress_end(&pr);
  sc_free(mem);
  sc_build_destroy(b);
  sc_check_report_free(&r);
  return rc;
}
