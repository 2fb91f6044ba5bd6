/* manager.c — the pass registry and the pass manager.
 *
 * The registry below is the whole pipeline in one readable list: each pass's
 * name, function, what it requires and what it guarantees, in pipeline order.
 * sc_run_passes checks every name of a comma-separated list before running
 * any, then runs them in order; after each pass it optionally verifies the IR
 * (opts->verify), prints it (opts->print_after, "all" for every pass) and
 * records its wall time (opts->time_passes, reported as a table at the end,
 * like LLVM's -time-passes). The manager never changes the graph itself.
 *
 * Passes of a higher layer join the registry with sc_pass_register (codegen
 * registers "fuse": sc_codegen_register_passes), so that this module needs
 * nothing above it. Registration happens before passes run on several
 * threads (the compile entry points do it first, once). */
#include "passes/pass.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ir/text.h"

static const sc_pass_info registry[] = {
    {"bind-dims", sc_pass_bind_dims,
     "graph inputs' --dim bindings applied by the caller",
     "every graph-input dim is static (unbound ones get the default, 1)", false},
    {"infer-shapes", sc_pass_infer_shapes,
     "static input dims; nodes in topological order",
     "every value has a dtype and a static shape; nodes whose inputs are all "
     "constant were evaluated (their outputs carry data)", true},
    {"fold", sc_pass_fold,
     "nothing (folds more after infer-shapes)",
     "no node has only constant outputs; folded results are constants", false},
    {"fuse-attention", sc_pass_fuse_attention,
     "static shapes (infer-shapes), constants folded",
     "every attention core that qualifies is one FusedAttention node (passes/"
     "fuse_attention.h); the replaced nodes are dead, for dce", false},
    {"fuse-norm", sc_pass_fuse_norm,
     "static shapes (infer-shapes), constants folded",
     "every RMS norm written out (Pow, ReduceMean, Add, Sqrt, Div or Reciprocal, "
     "Mul, the product by a weight) is one RMSNormalization node (passes/fuse_norm.c)",
     false},
    {"fuse-gelu", sc_pass_fuse_gelu,
     "static shapes (infer-shapes), constants folded",
     "every GELU written out (0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) or "
     "0.5·x·(1 + erf(x/√2)), in Mul, Div, Pow, Add, Tanh or Erf) is one Gelu node "
     "(passes/fuse_gelu.c); off with SHARDC_NO_FUSE_GELU=1", false},
    {"dce", sc_pass_dce,
     "nothing",
     "every node and constant feeds a graph output; graph inputs kept", false},
    {"scatter-sum", sc_pass_scatter_sum,
     "static shapes (infer-shapes); run by compile after the canonical passes",
     "no Add reads a scatter-add into zeros that reaches it alone: the scatter adds "
     "into the other addend (passes/scatter_sum.c)", false},
    /* then those of higher layers, in registration order (fuse) */
};
enum { MAX_REGISTERED = 32 };
static sc_pass_info registry_all[MAX_REGISTERED + 1];
static int n_registry = -1; /* -1: registry_all not initialised */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static void registry_init_locked(void) {
  if (n_registry >= 0) return;
  n_registry = (int)(sizeof registry / sizeof *registry);
  memcpy(registry_all, registry, sizeof registry);
}

sc_status sc_pass_register(const sc_pass_info *p) {
  if (!p || !p->name || !p->run) return SC_ERR_USAGE;
  pthread_mutex_lock(&registry_lock);
  registry_init_locked();
  sc_status st = SC_OK;
  int k = 0;
  while (k < n_registry && strcmp(registry_all[k].name, p->name) != 0) k++;
  if (k < n_registry) st = registry_all[k].run == p->run ? SC_OK : SC_ERR_USAGE;
  else if (n_registry >= MAX_REGISTERED) st = SC_ERR_LIMIT;
  else registry_all[n_registry++] = *p;
  pthread_mutex_unlock(&registry_lock);
  return st;
}

const sc_pass_info *sc_pass_registry(void) {
  pthread_mutex_lock(&registry_lock);
  registry_init_locked();
  pthread_mutex_unlock(&registry_lock);
  return registry_all;
}

const sc_pass_info *sc_pass_find(const char *name) {
  if (!name) return NULL;
  for (const sc_pass_info *p = sc_pass_registry(); p->name; p++)
    if (strcmp(p->name, name) == 0) return p;
  return NULL;
}

void sc_pass_opts_init(sc_pass_opts *o) {
  memset(o, 0, sizeof *o);
  o->print_out = stdout;
  o->time_out = stderr;
  o->default_dim = 1;
#ifdef SHARDC_VERIFY_EACH_PASS
  o->verify = true;
#else
  o->verify = false;
#endif
}

static void known_passes(char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = 0;
  const sc_pass_info *all = sc_pass_registry();
  for (const sc_pass_info *p = all; p->name && pos < n; p++)
    pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", p == all ? "" : ", ", p->name);
}

/* Splits `list` at commas into names (spaces around a name are ignored).
 * Returns the number of names, or -1 when there are more than cap. */
enum { MAX_PIPELINE = 64, MAX_PASS_NAME = 64 };
static int split_list(const char *list, char names[][MAX_PASS_NAME], int cap,
                      bool *too_long) {
  int n = 0;
  *too_long = false;
  const char *s = list;
  while (*s) {
    const char *e = strchr(s, ',');
    if (!e) e = s + strlen(s);
    const char *a = s, *b = e;
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
    if (b > a) {
      if (n >= cap) return -1;
      size_t len = (size_t)(b - a);
      if (len >= MAX_PASS_NAME) {
        len = MAX_PASS_NAME - 1;
        *too_long = true;
      }
      memcpy(names[n], a, len);
      names[n][len] = 0;
      n++;
    }
    s = *e ? e + 1 : e;
  }
  return n;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One row per distinct pass name, in first-run order (LLVM aggregates by
 * pass too). */
static void print_timing(FILE *out, int n, char names[][MAX_PASS_NAME],
                         const double *ms) {
  double total = 0;
  for (int i = 0; i < n; i++) total += ms[i];
  fprintf(out,
          "===-------------------------------------------------------------------"
          "------===\n"
          "                     ... Pass execution timing report ...\n"
          "===-------------------------------------------------------------------"
          "------===\n");
  fprintf(out, "  Total Execution Time: %.4f ms\n\n", total);
  fprintf(out, "   ---Wall Time (ms)---  --- Name ---\n");
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++)
      if (strcmp(names[j], names[i]) == 0) seen = true;
    if (seen) continue;
    double sum = 0;
    for (int j = i; j < n; j++)
      if (strcmp(names[j], names[i]) == 0) sum += ms[j];
    fprintf(out, "   %10.4f (%5.1f%%)  %s\n", sum,
            total > 0 ? 100.0 * sum / total : 0.0, names[i]);
  }
  fprintf(out, "   %10.4f (%5.1f%%)  Total\n", total, 100.0);
}

/* Prefixes g->diag's message (set by the verifier) with the pass name. */
static void blame_pass(sc_graph *g, const char *pass) {
  char msg[sizeof g->diag.msg];
  snprintf(msg, sizeof msg, "IR invalid after pass '%.32s': %.960s", pass, g->diag.msg);
  memcpy(g->diag.msg, msg, sizeof msg);
}

bool sc_pass_is_partition_point(const char *name) {
  static const char *const points[] = {"seed", "localize", "pipeline-split"};
  for (size_t i = 0; i < sizeof points / sizeof *points; i++)
    if (strcmp(name, points[i]) == 0) return true;
  return false;
}

sc_status sc_run_passes(sc_graph *g, const char *list, const sc_pass_opts *opts) {
  sc_pass_opts dflt;
  if (!opts) {
    sc_pass_opts_init(&dflt);
    opts = &dflt;
  }
  char known[512];
  known_passes(known, sizeof known);
  char names[MAX_PIPELINE][MAX_PASS_NAME];
  bool too_long;
  int n = split_list(list ? list : "", names, MAX_PIPELINE, &too_long);
  if (n < 0)
    return sc_graph_error(g, SC_ERR_USAGE, "more than %d passes in one pipeline",
                          MAX_PIPELINE);
  const sc_pass_info *passes[MAX_PIPELINE];
  for (int i = 0; i < n; i++) {
    passes[i] = too_long ? NULL : sc_pass_find(names[i]);
    if (!passes[i])
      return sc_graph_error(g, SC_ERR_USAGE, "unknown pass '%s' (known passes: %s)",
                            names[i], known);
  }
  if (opts->print_after && strcmp(opts->print_after, "all") != 0 &&
      !sc_pass_find(opts->print_after) && !sc_pass_is_partition_point(opts->print_after))
    return sc_graph_error(g, SC_ERR_USAGE,
                          "--print-after: unknown pass '%s' (known passes: %s, all)",
                          opts->print_after, known);

  FILE *print_out = opts->print_out ? opts->print_out : stdout;
  FILE *time_out = opts->time_out ? opts->time_out : stderr;
  double ms[MAX_PIPELINE];
  bool shapes_known = false;
  sc_status st = SC_OK;
  int ran = 0;
  for (int i = 0; i < n; i++) {
    const sc_pass_info *p = passes[i];
    double t0 = now_ms();
    st = p->run(g, opts);
    ms[i] = now_ms() - t0;
    ran = i + 1;
    if (st != SC_OK) {
      if (g->diag.status == SC_OK)
        sc_graph_error(g, st, "pass '%s' failed", p->name);
      break;
    }
    if (p->infers_shapes) shapes_known = true;
    if (opts->verify) {
      st = sc_graph_verify(g, shapes_known);
      if (st != SC_OK) {
        blame_pass(g, p->name);
        break;
      }
    }
    if (opts->print_after && (strcmp(opts->print_after, "all") == 0 ||
                              strcmp(opts->print_after, p->name) == 0)) {
      fprintf(print_out, "// ----- IR after %s -----\n", p->name);
      st = sc_ir_print(g, print_out);
      if (st != SC_OK) break;
    }
  }
  if (opts->time_passes) print_timing(time_out, ran, names, ms);
  return st;
}
