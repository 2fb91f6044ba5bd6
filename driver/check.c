/* check.c — the report of `shardc check` (check.h): results, figures and
 * hashes; the JSON written and read back; the comparison with a baseline.
 *
 * Invariants: metric names are unique in a report (sc_check_metric_set
 * replaces); the JSON's "metrics" object holds exactly the report's figures,
 * in the order they were set, so that a report read back compares equal to
 * the one written (checks' messages and figures round-trip: %.17g). */
#include "driver/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "frontend/onnx.h"
#include "ir/fileio.h"

static const char *const CHECK_NAMES[SC_CHECK_COUNT] = {"import", "fits", "performance",
                                                        "equivalence", "reproducible"};
static const char *const STATE_NAMES[SC_CHECK_STATE_COUNT] = {"not run", "passed", "failed",
                                                              "skipped"};

const char *sc_check_name(sc_check_id id) {
  return (unsigned)id < SC_CHECK_COUNT ? CHECK_NAMES[id] : "?";
}
const char *sc_check_state_name(sc_check_state s) {
  return (unsigned)s < SC_CHECK_STATE_COUNT ? STATE_NAMES[s] : "?";
}

void sc_check_report_init(sc_check_report *r) { memset(r, 0, sizeof *r); }

void sc_check_report_free(sc_check_report *r) {
  sc_free(r->model);
  sc_free(r->plan);
  sc_free(r->cluster);
  for (int i = 0; i < SC_CHECK_COUNT; i++) sc_free(r->checks[i].message);
  sc_free(r->metrics);
  sc_free(r->artifacts);
  memset(r, 0, sizeof *r);
}

static char *vformat(const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0) return NULL;
  char *s = sc_malloc((size_t)n + 1);
  if (s) vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

sc_status sc_check_set(sc_check_report *r, sc_check_id id, sc_check_state state,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = vformat(fmt, ap);
  va_end(ap);
  if (!s) return SC_ERR_NOMEM;
  sc_free(r->checks[id].message);
  r->checks[id].message = s;
  r->checks[id].state = state;
  return SC_OK;
}

sc_status sc_check_append(sc_check_report *r, sc_check_id id, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *line = vformat(fmt, ap);
  va_end(ap);
  if (!line) return SC_ERR_NOMEM;
  const char *old = r->checks[id].message ? r->checks[id].message : "";
  size_t n = strlen(old), m = strlen(line);
  char *s = sc_malloc(n + m + 2);
  if (!s) {
    sc_free(line);
    return SC_ERR_NOMEM;
  }
  snprintf(s, n + m + 2, "%s%s%s", old, n ? "\n" : "", line);
  sc_free(line);
  sc_free(r->checks[id].message);
  r->checks[id].message = s;
  return SC_OK;
}

static int32_t metric_index(const sc_check_report *r, const char *name) {
  for (int32_t i = 0; i < r->n_metrics; i++)
    if (strcmp(r->metrics[i].name, name) == 0) return i;
  return -1;
}

sc_status sc_check_metric_set(sc_check_report *r, const char *name, double value) {
  int32_t i = metric_index(r, name);
  if (i < 0) {
    if (r->n_metrics == r->cap_metrics) {
      int32_t cap = r->cap_metrics ? 2 * r->cap_metrics : 32;
      sc_check_metric *m = sc_realloc(r->metrics, (size_t)cap * sizeof *m);
      if (!m) return SC_ERR_NOMEM;
      r->metrics = m;
      r->cap_metrics = cap;
    }
    i = r->n_metrics++;
    snprintf(r->metrics[i].name, sizeof r->metrics[i].name, "%s", name);
  }
  r->metrics[i].value = value;
  return SC_OK;
}

const double *sc_check_metric_get(const sc_check_report *r, const char *name) {
  int32_t i = metric_index(r, name);
  return i < 0 ? NULL : &r->metrics[i].value;
}

sc_status sc_check_artifact_add(sc_check_report *r, const char *path, const char *sha256) {
  if (r->n_artifacts == r->cap_artifacts) {
    int32_t cap = r->cap_artifacts ? 2 * r->cap_artifacts : 16;
    sc_check_artifact *a = sc_realloc(r->artifacts, (size_t)cap * sizeof *a);
    if (!a) return SC_ERR_NOMEM;
    r->artifacts = a;
    r->cap_artifacts = cap;
  }
  sc_check_artifact *a = &r->artifacts[r->n_artifacts++];
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->sha256, sizeof a->sha256, "%s", sha256);
  return SC_OK;
}

bool sc_check_any_failed(const sc_check_report *r) {
  for (int i = 0; i < SC_CHECK_COUNT; i++)
    if (r->checks[i].state == SC_CHECK_FAILED) return true;
  return false;
}

/* ---- the import check ---- */

void sc_check_import(sc_check_report *r, const char *file) {
  sc_import_unsupported u = {0};
  sc_import_opts io = {.no_weights = true, .unsupported = &u}; /* the ops only */
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_onnx_import(file, &io, &g, &d);
  if (st == SC_OK) {
    sc_check_set(r, SC_CHECK_IMPORT, SC_CHECK_PASSED, "every node of the %d is supported",
                 (int)g->n_nodes);
    sc_graph_destroy(g);
  } else if (u.n > 0) {
    sc_check_set(r, SC_CHECK_IMPORT, SC_CHECK_FAILED, "%d node%s with an unsupported op:",
                 (int)u.n, u.n == 1 ? "" : "s");
    for (int32_t i = 0; i < u.n; i++)
      sc_check_append(r, SC_CHECK_IMPORT, "  node '%s' (%s%s%s)", u.items[i].node,
                      u.items[i].domain, u.items[i].domain[0] ? "." : "", u.items[i].op);
  } else {
    sc_diag_set_file(&d, file);
    char msg[2048];
    sc_diag_format(&d, msg, sizeof msg);
    sc_check_set(r, SC_CHECK_IMPORT, SC_CHECK_FAILED, "%s", msg);
  }
  sc_import_unsupported_free(&u);
}

/* ---- JSON ---- */

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *sc_check_report_json(const sc_check_report *r) {
  json_t *root = json_object(), *checks = json_array(), *metrics = json_object(),
         *arts = json_object();
  if (!root || !checks || !metrics || !arts) goto fail;
  json_object_set_new(root, "format", json_string("shardc-check-report"));
  json_object_set_new(root, "version", json_integer(SC_CHECK_REPORT_VERSION));
  json_object_set_new(root, "model", str_or_null(r->model));
  json_object_set_new(root, "train", json_boolean(r->train));
  json_object_set_new(root, "plan", str_or_null(r->plan));
  json_object_set_new(root, "cluster", str_or_null(r->cluster));
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    const sc_check_result *c = &r->checks[i];
    json_array_append_new(checks, json_pack("{s:s, s:s, s:s, s:f}", "name", CHECK_NAMES[i],
                                            "status", STATE_NAMES[c->state], "message",
                                            c->message ? c->message : "", "seconds", c->seconds));
  }
  for (int32_t i = 0; i < r->n_metrics; i++)
    json_object_set_new(metrics, r->metrics[i].name, json_real(r->metrics[i].value));
  for (int32_t i = 0; i < r->n_artifacts; i++)
    json_object_set_new(arts, r->artifacts[i].path, json_string(r->artifacts[i].sha256));
  json_object_set_new(root, "checks", checks);
  json_object_set_new(root, "metrics", metrics);
  json_object_set_new(root, "artifacts", arts);
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s) return NULL;
  char *out = sc_strdup(s);
  free(s);
  return out;
fail:
  json_decref(root);
  json_decref(checks);
  json_decref(metrics);
  json_decref(arts);
  return NULL;
}

/* A report's size limit: a plan's (passes/plan/plan_json.c); a report is
 * some kilobytes (its figures grow with the ranks and blocks). */
enum { REPORT_MAX_BYTES = 64 << 20 };

static sc_status bad(sc_diag *d, const char *path, const char *key, const char *what) {
  sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "not a shardc check report: key '%s' %s", key, what);
  sc_diag_set_file(d, path);
  return SC_ERR_INVALID;
}

static sc_status dup_str(json_t *v, char **out) {
  *out = NULL;
  if (!json_is_string(v)) return SC_OK;
  *out = sc_strdup(json_string_value(v));
  return *out ? SC_OK : SC_ERR_NOMEM;
}

sc_status sc_check_report_read(const char *path, sc_check_report *out, sc_diag *d) {
  sc_check_report_init(out);
  /* a regular file of at most REPORT_MAX_BYTES: a FIFO or a device is
   * refused at once, not waited on or read until memory runs out */
  char *buf = NULL;
  size_t len = 0;
  sc_status rs = sc_file_read_all(path, NULL, REPORT_MAX_BYTES, &buf, &len, d);
  if (rs != SC_OK) {
    sc_diag_set_file(d, path);
    return rs;
  }
  json_error_t je;
  json_t *root = json_loadb(buf, len, 0, &je);
  sc_free(buf);
  if (!root) {
    sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "not valid JSON: %s (line %d)", je.text, je.line);
    sc_diag_set_file(d, path);
    return SC_ERR_PARSE;
  }
  sc_status st = SC_OK;
  json_t *v;
  if (!json_is_object(root)) {
    st = bad(d, path, "(top level)", "must be an object");
    goto done;
  }
  v = json_object_get(root, "format");
  if (!json_is_string(v) || strcmp(json_string_value(v), "shardc-check-report") != 0) {
    st = bad(d, path, "format", "must be \"shardc-check-report\"");
    goto done;
  }
  v = json_object_get(root, "version");
  if (!json_is_integer(v) || json_integer_value(v) != SC_CHECK_REPORT_VERSION) {
    st = bad(d, path, "version", "must be 1");
    goto done;
  }
  if ((st = dup_str(json_object_get(root, "model"), &out->model)) != SC_OK ||
      (st = dup_str(json_object_get(root, "plan"), &out->plan)) != SC_OK ||
      (st = dup_str(json_object_get(root, "cluster"), &out->cluster)) != SC_OK)
    goto nomem;
  out->train = json_is_true(json_object_get(root, "train"));
  json_t *checks = json_object_get(root, "checks");
  if (checks && !json_is_array(checks)) {
    st = bad(d, path, "checks", "must be an array");
    goto done;
  }
  size_t i;
  json_array_foreach(checks, i, v) {
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *status = json_string_value(json_object_get(v, "status"));
    const char *msg = json_string_value(json_object_get(v, "message"));
    int id = 0, s = 0;
    while (name && id < SC_CHECK_COUNT && strcmp(CHECK_NAMES[id], name) != 0) id++;
    while (status && s < SC_CHECK_STATE_COUNT && strcmp(STATE_NAMES[s], status) != 0) s++;
    if (!name || id == SC_CHECK_COUNT || !status || s == SC_CHECK_STATE_COUNT) {
      st = bad(d, path, "checks", "holds an entry without a known name and status");
      goto done;
    }
    if ((st = sc_check_set(out, (sc_check_id)id, (sc_check_state)s, "%s", msg ? msg : "")) !=
        SC_OK)
      goto nomem;
    out->checks[id].seconds = json_number_value(json_object_get(v, "seconds"));
  }
  json_t *metrics = json_object_get(root, "metrics");
  if (!json_is_object(metrics)) {
    st = bad(d, path, "metrics", "must be an object of numbers");
    goto done;
  }
  const char *key;
  json_object_foreach(metrics, key, v) {
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
      char k[200];
      snprintf(k, sizeof k, "metrics.%.160s", key);
      st = bad(d, path, k, "must be a finite number");
      goto done;
    }
    if ((st = sc_check_metric_set(out, key, json_number_value(v))) != SC_OK) goto nomem;
  }
  json_t *arts = json_object_get(root, "artifacts");
  json_object_foreach(arts, key, v) {
    if (!json_is_string(v)) {
      st = bad(d, path, "artifacts", "must map paths to hashes");
      goto done;
    }
    if ((st = sc_check_artifact_add(out, key, json_string_value(v))) != SC_OK) goto nomem;
  }
  goto done;
nomem:
  sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
done:
  json_decref(root);
  if (st != SC_OK) sc_check_report_free(out);
  return st;
}

/* ---- the comparison ---- */

/* A growable string of lines. */
typedef struct text {
  char *s;
  size_t n, cap;
  bool nomem;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *line = vformat(fmt, ap);
  va_end(ap);
  if (!line) {
    t->nomem = true;
    return;
  }
  size_t m = strlen(line);
  if (t->n + m + 2 > t->cap) {
    size_t cap = (t->n + m + 2) * 2;
    char *s = sc_realloc(t->s, cap);
    if (!s) {
      sc_free(line);
      t->nomem = true;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
  memcpy(t->s + t->n, line, m);
  t->n += m;
  t->s[t->n++] = '\n';
  t->s[t->n] = 0;
  sc_free(line);
}

static bool starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A figure in its unit: seconds as ms, bytes as MiB, else as is. */
static void show(const char *name, double v, char *buf, size_t n) {
  if (strcmp(name, "step_time_s") == 0 || starts(name, "time/"))
    snprintf(buf, n, "%.4g ms", v * 1e3);
  else if (starts(name, "memory/") || starts(name, "collective/"))
    snprintf(buf, n, "%.6g MiB", v / (1024.0 * 1024.0));
  else snprintf(buf, n, "%.6g", v);
}

typedef struct growth {
  const char *name;
  double from, to;
} growth;

static int cmp_growth(const void *a, const void *b) {
  const growth *x = a, *y = b;
  double dx = x->to - x->from, dy = y->to - y->from;
  return dx < dy ? 1 : dx > dy ? -1 : strcmp(x->name, y->name);
}

/* The figures under prefix that grew from base to cur (new ones from 0),
 * most first, as lines "    NAME: A -> B (+X %)". */
static void explain(text *t, const sc_check_report *base, const sc_check_report *cur,
                    const char *prefix, const char *skip) {
  growth *g = sc_calloc((size_t)cur->n_metrics + 1, sizeof *g);
  if (!g) {
    t->nomem = true;
    return;
  }
  int32_t n = 0;
  for (int32_t i = 0; i < cur->n_metrics; i++) {
    const sc_check_metric *m = &cur->metrics[i];
    if (!starts(m->name, prefix) || (skip && strcmp(m->name, skip) == 0)) continue;
    const double *b = sc_check_metric_get(base, m->name);
    double from = b ? *b : 0;
    if (m->value > from) g[n++] = (growth){m->name, from, m->value};
  }
  qsort(g, (size_t)n, sizeof *g, cmp_growth);
  for (int32_t i = 0; i < n; i++) {
    char a[64], b[64];
    show(g[i].name, g[i].from, a, sizeof a);
    show(g[i].name, g[i].to, b, sizeof b);
    if (g[i].from > 0)
      put(t, "    grew: %s: %s -> %s (+%.1f %%)", g[i].name, a, b,
          100 * (g[i].to - g[i].from) / g[i].from);
    else put(t, "    grew: %s: new, %s", g[i].name, b);
  }
  if (n == 0) put(t, "    (no figure under %s grew)", prefix);
  sc_free(g);
}

/* One gate: NAME in base and cur; worse when it went up (or down, for
 * less_is_worse) by more than limit. */
static bool gate(text *t, const sc_check_report *base, const sc_check_report *cur,
                 const char *name, bool less_is_worse, double limit) {
  const double *b = sc_check_metric_get(base, name), *c = sc_check_metric_get(cur, name);
  if (!b && !c) return false; /* neither has one (tokens/s without token ids) */
  if (!b || !c) {
    put(t, "  %s: not compared (%s)", name, !b ? "the baseline has none" : "this run has none");
    return false;
  }
  char a[64], bb[64];
  show(name, *b, a, sizeof a);
  show(name, *c, bb, sizeof bb);
  double change = *b != 0 ? (*c - *b) / fabs(*b) : (*c != 0 ? INFINITY : 0);
  bool worse = less_is_worse ? change < -limit : change > limit;
  put(t, "  %s: %s -> %s (%+.2f %%, limit %s%.2f %%)%s", name, a, bb, 100 * change,
      less_is_worse ? "-" : "+", 100 * limit, worse ? ": REGRESSED" : "");
  return worse;
}

sc_status sc_check_compare(const sc_check_report *base, const sc_check_report *cur,
                           const sc_check_thresholds *th, bool *regressed, char **message) {
  text t = {0};
  *regressed = false;
  *message = NULL;
  /* a baseline of another model, plan or cluster is compared all the same
   * (a plan change is what a gate is for), and said */
  const char *what[3] = {"model", "plan", "cluster"};
  const char *was[3] = {base->model, base->plan, base->cluster};
  const char *now[3] = {cur->model, cur->plan, cur->cluster};
  for (int k = 0; k < 3; k++)
    if ((was[k] || now[k]) && (!was[k] || !now[k] || strcmp(was[k], now[k]) != 0))
      put(&t, "  the baseline's %s was %s (this run: %s)", what[k], was[k] ? was[k] : "none",
          now[k] ? now[k] : "none");
  bool time_worse = gate(&t, base, cur, "step_time_s", false, th->time);
  if (time_worse) {
    explain(&t, base, cur, "time/", NULL);
    explain(&t, base, cur, "collective/", NULL);
  }
  bool rate_worse = gate(&t, base, cur, "tokens_per_s", true, th->time);
  if (rate_worse && !time_worse) {
    explain(&t, base, cur, "time/", NULL);
    explain(&t, base, cur, "collective/", NULL);
  }
  *regressed = time_worse || rate_worse;
  /* every rank's peak, and the parts of the ones that grew */
  int32_t n_peaks = 0;
  for (int32_t i = 0; i < cur->n_metrics; i++) {
    const char *name = cur->metrics[i].name;
    size_t len = strlen(name);
    if (!starts(name, "memory/") || len < 5 || strcmp(name + len - 5, "/peak") != 0) continue;
    n_peaks++;
    if (gate(&t, base, cur, name, false, th->memory)) {
      *regressed = true;
      char prefix[sizeof cur->metrics[i].name];
      snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 4), name); /* "memory/<rank>/" */
      explain(&t, base, cur, prefix, name);
    }
  }
  if (n_peaks == 0) put(&t, "  memory: not compared (this run has no per-rank memory)");
  for (int32_t i = 0; i < base->n_metrics; i++) { /* a rank the baseline had and this run has not */
    const char *name = base->metrics[i].name;
    size_t len = strlen(name);
    if (starts(name, "memory/") && len >= 5 && strcmp(name + len - 5, "/peak") == 0 &&
        !sc_check_metric_get(cur, name))
      put(&t, "  %s: in the baseline only (a different plan?)", name);
  }
  if (*regressed) { /* and which of the model's blocks grew, if any did */
    put(&t, "  the model's blocks:");
    explain(&t, base, cur, "block/", NULL);
  }
  if (t.nomem) {
    sc_free(t.s);
    return SC_ERR_NOMEM;
  }
  *message = t.s;
  return SC_OK;
}
