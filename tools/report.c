/* report.c — `shardc report LOG.jsonl [LOG2.jsonl ...] [--html OUT.html]`:
 * the training logs `shardc train --log-json` writes, one or several runs,
 * summarised on stdout (a line per run) and, with --html, drawn on one
 * self-contained page (html_page.h's frame, the style and helpers of
 * `plan --html`): the loss, learning rate, gradient norm and throughput
 * (tokens/s) against the step, every run's curve overlaid in a colour of
 * its own, a legend naming the files, hover showing the run, step and
 * value (docs/report.md).
 *
 * Data flow: each file is read line by line (getline: no line length
 * limit); a line is one JSON object (jansson) with the integer "step" and
 * the numbers "lr" and "tokens_per_s", and "loss" and "grad_norm" numbers
 * or null (train writes null for a value that is not finite); other keys
 * (time_ms, skipped, loss_scale, ...) are allowed and ignored. Blank lines
 * are skipped. Anything else (not JSON, not an object, a key missing or of
 * another type, a step not above the one before) is an error naming the
 * file and the line (1-based), and no page is written. The page's data
 * (<script id="report-data">) holds, per run, the file as given and the
 * columns as read: JSON numbers printed with 9 significant digits
 * (html_page.c), which is what train writes, so the page's values are the
 * log's.
 *
 * Ownership: everything is freed before returning. No globals. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/html_page.h"

static const char *const USAGE = "shardc report LOG.jsonl [LOG2.jsonl ...] [--html OUT.html]";

enum { MAX_RUNS = 64 };

/* The columns of a run, in the order the page draws them; nullable: the
 * value may be null (not finite in the run). */
static const struct {
  const char *key;
  bool nullable;
} COLUMNS[] = {{"loss", true}, {"lr", false}, {"grad_norm", true}, {"tokens_per_s", false}};
enum { N_COLUMNS = sizeof COLUMNS / sizeof COLUMNS[0] };

/* One run: {"file", "step": [...], and each column: [...]}. */
typedef struct run_summary {
  int64_t n, first_step, last_step;
  double first_loss, last_loss, tokens_sum;
  bool have_loss;
} run_summary;

/* Reads path into a new run object *out: 0, or 1 after the error printed
 * ("shardc: error: FILE:LINE: ..."). */
static int read_log(const char *path, json_t **out, run_summary *s) {
  *out = NULL;
  memset(s, 0, sizeof *s);
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "shardc: error: %s: cannot read: %s\n", path, strerror(errno));
    return 1;
  }
  json_t *run = json_object(), *steps = json_array(), *cols[N_COLUMNS];
  json_t *name = json_string(path); /* NULL when the name is not UTF-8 */
  bool ok = run && steps;
  json_object_set_new(run, "file", name ? name : json_string("(a name that is not UTF-8)"));
  json_object_set_new(run, "step", steps);
  for (int c = 0; c < N_COLUMNS; c++) {
    cols[c] = json_array();
    ok = ok && cols[c];
    json_object_set_new(run, COLUMNS[c].key, cols[c]);
  }
  char *line = NULL;
  size_t cap = 0;
  int64_t lineno = 0;
  int rc = ok ? 0 : 1;
  if (!ok) fprintf(stderr, "shardc: error: out of memory\n");
  while (!rc && getline(&line, &cap, f) >= 0) {
    lineno++;
    const char *p = line;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    if (!*p) continue;
    json_error_t je;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &je);
    char why[256] = "";
    if (!o) snprintf(why, sizeof why, "not JSON: %s", je.text);
    else if (!json_is_object(o)) snprintf(why, sizeof why, "not a JSON object");
    json_t *step = o && !why[0] ? json_object_get(o, "step") : NULL;
    if (!why[0] && !json_is_integer(step))
      snprintf(why, sizeof why, "\"step\" %s", step ? "is not an integer" : "is missing");
    if (!why[0] && s->n && json_integer_value(step) <= s->last_step)
      snprintf(why, sizeof why, "step %lld after step %lld (the steps must increase)",
               (long long)json_integer_value(step), (long long)s->last_step);
    for (int c = 0; !why[0] && c < N_COLUMNS; c++) {
      json_t *v = json_object_get(o, COLUMNS[c].key);
      if (!v) snprintf(why, sizeof why, "\"%s\" is missing", COLUMNS[c].key);
      else if (!json_is_number(v) && !(COLUMNS[c].nullable && json_is_null(v)))
        snprintf(why, sizeof why, "\"%s\" is not a number%s", COLUMNS[c].key,
                 COLUMNS[c].nullable ? " or null" : "");
    }
    if (why[0]) {
      fprintf(stderr, "shardc: error: %s:%lld: %s (a line of shardc train --log-json)\n", path,
              (long long)lineno, why);
      json_decref(o);
      rc = 1;
      break;
    }
    int64_t st = json_integer_value(step);
    if (!s->n) s->first_step = st;
    s->last_step = st;
    s->n++;
    json_array_append(steps, step);
    for (int c = 0; c < N_COLUMNS; c++) json_array_append(cols[c], json_object_get(o, COLUMNS[c].key));
    json_t *loss = json_object_get(o, "loss");
    if (json_is_number(loss)) {
      if (!s->have_loss) s->first_loss = json_number_value(loss);
      s->last_loss = json_number_value(loss);
      s->have_loss = true;
    }
    s->tokens_sum += json_number_value(json_object_get(o, "tokens_per_s"));
    json_decref(o);
  }
  if (!rc && ferror(f)) {
    fprintf(stderr, "shardc: error: %s: cannot read: %s\n", path, strerror(errno));
    rc = 1;
  }
  if (!rc && !s->n) {
    fprintf(stderr, "shardc: error: %s: no steps (a log of shardc train --log-json has a JSON "
            "object per line)\n", path);
    rc = 1;
  }
  free(line);
  fclose(f);
  if (rc) json_decref(run);
  else *out = run;
  return rc;
}

/* The page's script (html_page.h's frame: el, sv, section, showTip,
 * hideTip, table, row; D the data). One section per column, an SVG chart
 * in each: the axes with their ticks, one polyline per run
 * (class "curve", data-run its index) through its non-null values and a
 * dot per value (class "pt", hover: the file, step and value); a legend
 * with the files' names, colour for colour. */
static const char REPORT_SCRIPT[] =
    "var COLORS = ['#4e79a7', '#e15759', '#59a14f', '#f28e2b', '#b07aa1', '#76b7b2', '#edc948',\n"
    "  '#9c755f', '#ff9da7', '#bab0ac'];\n"
    "function color(i) { return COLORS[i % COLORS.length]; }\n"
    "function num(v) { if (v === 0) return '0'; var a = Math.abs(v);\n"
    "  return a >= 1e5 || a < 1e-3 ? v.toExponential(3) : String(+v.toPrecision(6)); }\n"
    "var sum = section('summary', 'Runs', 'The logs of shardc train --log-json, one colour each.');\n"
    "sum.appendChild(table('runs', ['', 'file', 'steps', 'loss (first, last)',\n"
    "  'mean tokens/s'], D.runs.map(function (r, i) {\n"
    "  var losses = r.loss.filter(function (v) { return v !== null; });\n"
    "  var tps = r.tokens_per_s.reduce(function (a, b) { return a + b; }, 0) / r.step.length;\n"
    "  var tr = row('run-row', ['', r.file, r.step.length, losses.length ? num(losses[0]) + ', ' +\n"
    "    num(losses[losses.length - 1]) : '-', Math.round(tps)]);\n"
    "  var sw = el('i', {style: 'background:' + color(i)});\n"
    "  tr.firstChild.appendChild(sw); tr.firstChild.className = 'legend'; return tr; })));\n"
    "var CHARTS = [['loss', 'Loss', 'The step\\'s batch loss, before its update.'],\n"
    "  ['lr', 'Learning rate', 'The rate the step\\'s update used.'],\n"
    "  ['grad_norm', 'Gradient norm', 'The global L2 norm of the step\\'s gradients.'],\n"
    "  ['tokens_per_s', 'Throughput (tokens/s)', 'The step\\'s tokens over its own time.']];\n"
    "CHARTS.forEach(function (c) {\n"
    "  var key = c[0], s = section('chart-' + key, c[1], c[2]);\n"
    "  var leg = el('div', {'class': 'legend'});\n"
    "  D.runs.forEach(function (r, i) { var sp = el('span', {'class': 'legend-run'});\n"
    "    sp.appendChild(el('i', {style: 'background:' + color(i)})); sp.appendChild(\n"
    "    document.createTextNode(r.file)); leg.appendChild(sp); });\n"
    "  s.appendChild(leg);\n"
    "  var W = 900, H = 300, L = 80, R = 20, T = 10, B = 40;\n"
    "  var x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;\n"
    "  D.runs.forEach(function (r) { r.step.forEach(function (st, j) { var v = r[key][j];\n"
    "    x0 = Math.min(x0, st); x1 = Math.max(x1, st);\n"
    "    if (v !== null) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); } }); });\n"
    "  if (!(y0 <= y1)) { s.appendChild(el('p', {'class': 'note'}, 'no finite values')); return; }\n"
    "  if (x0 === x1) { x0 -= 1; x1 += 1; }\n"
    "  if (y0 === y1) { var pad = Math.abs(y0) * 0.05 || 1; y0 -= pad; y1 += pad; }\n"
    "  var m = (y1 - y0) * 0.05; y0 -= m; y1 += m;\n"
    "  function X(st) { return L + (st - x0) / (x1 - x0) * (W - L - R); }\n"
    "  function Y(v) { return T + (y1 - v) / (y1 - y0) * (H - T - B); }\n"
    "  var svg = sv('svg', {width: W, height: H, 'class': 'chart', 'data-metric': key});\n"
    "  svg.appendChild(sv('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#888'}));\n"
    "  svg.appendChild(sv('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#888'}));\n"
    "  for (var k = 0; k <= 4; k++) { var yv = y0 + (y1 - y0) * k / 4, xv = x0 + (x1 - x0) * k / 4;\n"
    "    svg.appendChild(sv('text', {x: L - 6, y: Y(yv) + 4, 'text-anchor': 'end'}, num(yv)));\n"
    "    svg.appendChild(sv('line', {x1: L, y1: Y(yv), x2: W - R, y2: Y(yv), stroke: '#eee'}));\n"
    "    svg.appendChild(sv('text', {x: X(xv), y: H - B + 16, 'text-anchor': 'middle'},\n"
    "      String(Math.round(xv)))); }\n"
    "  svg.appendChild(sv('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle'}, 'step'));\n"
    "  D.runs.forEach(function (r, i) {\n"
    "    var pts = [];\n"
    "    r.step.forEach(function (st, j) { if (r[key][j] !== null)\n"
    "      pts.push(X(st).toFixed(2) + ',' + Y(r[key][j]).toFixed(2)); });\n"
    "    svg.appendChild(sv('polyline', {points: pts.join(' '), fill: 'none', stroke: color(i),\n"
    "      'stroke-width': 2, 'class': 'curve', 'data-run': i}));\n"
    "    r.step.forEach(function (st, j) { var v = r[key][j]; if (v === null) return;\n"
    "      var dot = sv('circle', {cx: X(st), cy: Y(v), r: 3.5, fill: color(i), 'class': 'pt',\n"
    "        'data-run': i});\n"
    "      dot.addEventListener('mousemove', function (ev) {\n"
    "        showTip(ev, r.file + '\\nstep ' + st + '\\n' + c[1] + ' ' + num(v)); });\n"
    "      dot.addEventListener('mouseleave', hideTip);\n"
    "      svg.appendChild(dot); }); });\n"
    "  var sc = el('div', {'class': 'scroll'}); sc.appendChild(svg); s.appendChild(sc);\n"
    "});\n";

static int print_help(void) {
  printf("usage: %s\n\n"
         "Summarises training logs (shardc train --log-json FILE), a line per run, and\n"
         "with --html draws them on one self-contained page: loss, learning rate,\n"
         "gradient norm and tokens/s against the step, the runs overlaid (a mesh against\n"
         "one rank, say), hover for a point's run, step and value (docs/report.md).\n"
         "  --html OUT.html   write the page\n", USAGE);
  return 0;
}

int sc_cmd_report(int argc, char **argv) {
  const char *html = NULL;
  const char *files[MAX_RUNS];
  int n = 0;
  bool only_files = false;
  for (int i = 1; i < argc; i++) {
    bool missing = false;
    if (!only_files && argv[i][0] == '-' && argv[i][1]) {
      if (strcmp(argv[i], "--") == 0) {
        only_files = true;
        continue;
      }
      if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return print_help();
      const char *v = sc_cli_opt_value(argc, argv, &i, "--html", &missing);
      if (!v) return sc_cli_usage_error("unknown option %s\nusage: %s", argv[i], USAGE);
      if (missing) return sc_cli_usage_error("--html needs a file");
      html = v;
      continue;
    }
    if (n == MAX_RUNS) return sc_cli_usage_error("at most %d logs", MAX_RUNS);
    files[n++] = argv[i];
  }
  if (!n) return sc_cli_usage_error("report needs a log (shardc train --log-json FILE)\nusage: %s",
                                    USAGE);
  json_t *runs = json_array(), *root = json_object();
  int rc = runs && root ? 0 : 1;
  if (rc) fprintf(stderr, "shardc: error: out of memory\n");
  char names[1024] = "";
  size_t len = 0;
  for (int k = 0; !rc && k < n; k++) {
    json_t *run = NULL;
    run_summary s;
    if ((rc = read_log(files[k], &run, &s)) != 0) break;
    json_array_append_new(runs, run);
    printf("%s: %lld steps (%lld..%lld)", files[k], (long long)s.n, (long long)s.first_step,
           (long long)s.last_step);
    if (s.have_loss) printf(", loss %.6g -> %.6g", s.first_loss, s.last_loss);
    printf(", mean %.6g tokens/s\n", s.tokens_sum / (double)s.n);
    int w = snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", files[k]);
    if (w > 0) len = len + (size_t)w < sizeof names ? len + (size_t)w : sizeof names - 1;
  }
  fflush(stdout);
  if (!rc && html) {
    json_object_set_new(root, "command", json_string("shardc report"));
    json_t *model = json_string(names); /* NULL: not UTF-8, or cut inside a character */
    json_object_set_new(root, "model", model ? model : json_sprintf("%d logs", n));
    json_object_set(root, "runs", runs);
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_html_page_write(html, "report-data", root, REPORT_SCRIPT, &d) != SC_OK)
      rc = sc_cli_report(&d, NULL);
  }
  json_decref(runs);
  json_decref(root);
  return rc;
}
