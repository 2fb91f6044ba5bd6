/* plan_html.c — a plan as one self-contained HTML page (plan_html.h).
 *
 * The C side gathers the plan's data into one JSON object (jansson) and
 * writes it between a fixed head (CSS) and a fixed script (PAGE_SCRIPT)
 * that draws the page from it; nothing in the data is ever written as
 * markup. The JSON's strings are escaped for the <script> element it sits
 * in (put_script_json): jansson writes non-ASCII as \u escapes
 * (JSON_ENSURE_ASCII, so U+2028 too) and '<', '>' and '&' become \u003c,
 * \u003e and \u0026, which JSON.parse reads back as the same characters.
 *
 * The object (docs/report.md "The page's data"):
 *   command, model, summary [[key, value], ...]
 *   mesh {axes [{name, size, stride}], ranks, pp_axis}
 *   capacity (the device's bytes, 0 unknown), memory {parts, bars}
 *   timeline (null without a cluster; else the simulated step: ranks,
 *     queues, events as arrays [q, queue, kind, phase, chunk, mb, peer,
 *     comm, start, end, bytes, steps]), timeline_note
 *   collectives {priced, rows}, candidates (or null)
 * A timeline's size is O(P·A) events (dist_sim.h), so a page stays a few
 * hundred kilobytes for any mesh. */
#include "tools/plan_html.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "codegen/dist_sim.h"
#include "driver/plan_report.h"
#include "ir/placement.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/html_page.h"

static const char *const MEM_PARTS[SC_PLAN_HTML_MEM_COUNT] = {
    "parameters", "gradients", "optimizer state", "activations", "stash",
    "workspace",  "communication", "device runtime", "other"};

void sc_plan_html_field(sc_plan_html *h, const char *key, const char *fmt, ...) {
  if (h->n_fields >= SC_PLAN_HTML_MAX_FIELDS) return;
  snprintf(h->fields[h->n_fields].key, sizeof h->fields[0].key, "%s", key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->fields[h->n_fields].value, sizeof h->fields[0].value, fmt, ap);
  va_end(ap);
  h->n_fields++;
}

/* ---- the data ---- */

static void kv(json_t *rows, const char *key, const char *value) {
  json_array_append_new(rows, json_pack("[s, s]", key, value ? value : ""));
}

static void fmt_bytes(double b, char *buf, size_t n) { sc_stats_format_bytes(b, buf, n); }

static json_t *summary_json(const sc_plan_html *h) {
  json_t *rows = json_array();
  const sc_dist_program *dp = h->dp;
  const sc_plan *pl = h->plan;
  char buf[512], a[64], b[64];
  if (h->model_name && *h->model_name)
    snprintf(buf, sizeof buf, "%s (graph '%s')", h->model ? h->model : "", h->model_name);
  else snprintf(buf, sizeof buf, "%s", h->model ? h->model : "");
  kv(rows, "model", buf);
  kv(rows, "plan", h->kind);
  if (dp) {
    const sc_mesh *m = &dp->mesh;
    char mesh[256];
    sc_mesh_format(m, mesh, sizeof mesh);
    snprintf(buf, sizeof buf, "%s (%lld rank%s)", mesh[0] ? mesh : "one rank",
             (long long)m->n_ranks, m->n_ranks == 1 ? "" : "s");
    kv(rows, "mesh", buf);
    snprintf(buf, sizeof buf, "pipeline %s, data parallel %s, tensor parallel %s",
             dp->pp_axis >= 0 ? m->axes[dp->pp_axis].name : "-",
             dp->dp_axis >= 0 ? m->axes[dp->dp_axis].name : "-",
             dp->tp_axis >= 0 ? m->axes[dp->tp_axis].name : "-");
    kv(rows, "axis roles", buf);
    if (dp->pipe_chunks > 0)
      snprintf(buf, sizeof buf, "%s: %d pipeline ranks x %d chunks, %d microbatches",
               sc_schedule_name(dp->schedule.kind), (int)dp->pipe_ranks,
               (int)(dp->pipe_chunks / (dp->pipe_ranks ? dp->pipe_ranks : 1)),
               (int)dp->schedule.microbatches);
    else
      snprintf(buf, sizeof buf, "%d microbatch%s, one program per stage",
               (int)(dp->schedule.microbatches < 1 ? 1 : dp->schedule.microbatches),
               dp->schedule.microbatches > 1 ? "es" : "");
    kv(rows, "schedule", buf);
  }
  if (pl && pl->cluster) {
    snprintf(buf, sizeof buf, "%s (%lld node%s)", pl->cluster, (long long)pl->cluster_nodes,
             pl->cluster_nodes == 1 ? "" : "s");
    kv(rows, "cluster", buf);
    sc_placement p;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (dp && dp->mesh.n_axes && sc_placement_compute(&dp->mesh, &p, &d) == SC_OK) {
      size_t pos = 0;
      buf[0] = 0;
      for (int32_t i = 0; i < p.n_axes && pos < sizeof buf; i++) {
        char ax[128];
        sc_placement_axis_describe(&p.axes[i], ax, sizeof ax);
        int w = snprintf(buf + pos, sizeof buf - pos, "%s%s: %s", i ? "; " : "", p.axes[i].name,
                         ax);
        if (w < 0) break;
        pos += (size_t)w;
      }
      kv(rows, "placement", buf);
    }
  } else {
    kv(rows, "cluster", "none (give --cluster C for the predicted step and the timeline)");
  }
  const sc_plan_predicted *pr = pl && pl->predicted.on ? &pl->predicted : NULL;
  if (pr && pr->unknown[0]) kv(rows, "predicted step", pr->unknown);
  else if (pr) {
    sc_cli_format_seconds(pr->step_time_s, a, sizeof a);
    snprintf(buf, sizeof buf, "%s (%s; the last to finish: pipeline rank %d, rank %lld)", a,
             pr->source, (int)pr->pipe_rank, (long long)pr->rank);
    kv(rows, "predicted step time", buf);
    if (pr->tokens_per_s > 0) snprintf(buf, sizeof buf, "%.0f", pr->tokens_per_s);
    else snprintf(buf, sizeof buf, "unknown (no token ids among the inputs)");
    kv(rows, "tokens/s", buf);
    snprintf(buf, sizeof buf, "%.2f %% (%.2f TFLOP/s per GPU)", 100 * pr->mfu,
             pr->flops_per_s_per_gpu / 1e12);
    kv(rows, "MFU", buf);
  }
  int64_t cap = pl && pl->cluster ? pl->cluster_figures.device_memory_bytes : 0;
  if (pr && pr->peak_bytes_per_rank > 0) {
    fmt_bytes((double)pr->peak_bytes_per_rank, a, sizeof a);
    fmt_bytes((double)cap, b, sizeof b);
    if (cap > 0)
      snprintf(buf, sizeof buf, "%s: %s on the largest rank of %s (%.1f %%)",
               pr->fits ? "yes" : "no", a, b,
               100.0 * (double)pr->peak_bytes_per_rank / (double)cap);
    else snprintf(buf, sizeof buf, "unknown: %s on the largest rank, device memory unknown", a);
    kv(rows, "fits", buf);
  }
  for (int32_t i = 0; i < h->n_fields; i++) kv(rows, h->fields[i].key, h->fields[i].value);
  return rows;
}

static json_t *mesh_json(const sc_dist_program *dp) {
  json_t *axes = json_array();
  const sc_mesh *m = dp ? &dp->mesh : NULL;
  int64_t stride = 1;
  for (int32_t i = m ? m->n_axes - 1 : -1; i >= 0; i--) { /* major to minor */
    json_array_insert_new(axes, 0, json_pack("{s:s, s:I, s:I}", "name", m->axes[i].name, "size",
                                              (json_int_t)m->axes[i].size, "stride",
                                              (json_int_t)stride));
    stride *= m->axes[i].size;
  }
  return json_pack("{s:o, s:I, s:i}", "axes", axes, "ranks",
                   (json_int_t)(m && m->n_ranks > 0 ? m->n_ranks : 1), "pp_axis",
                   dp ? (int)dp->pp_axis : -1);
}

static json_t *memory_json(const sc_plan_html *h) {
  json_t *parts = json_array(), *bars = json_array();
  for (int i = 0; i < SC_PLAN_HTML_MEM_COUNT; i++) json_array_append_new(parts, json_string(MEM_PARTS[i]));
  for (int32_t i = 0; i < h->n_bars; i++) {
    const sc_plan_html_bar *b = &h->bars[i];
    json_t *v = json_array();
    for (int k = 0; k < SC_PLAN_HTML_MEM_COUNT; k++)
      json_array_append_new(v, json_integer((json_int_t)b->bytes[k]));
    json_array_append_new(bars, json_pack("{s:s, s:i, s:o}", "label", b->label, "pipe_rank",
                                          (int)b->pipe_rank, "bytes", v));
  }
  return json_pack("{s:o, s:o}", "parts", parts, "bars", bars);
}

static json_t *timeline_json(const sc_dist_program *dp, const sc_dist_sim *s,
                             const sc_dist_sim_trace *tr) {
  json_t *ranks = json_array(), *queues = json_array(), *ev = json_array(),
         *kinds = json_array(), *comm = json_array();
  char axes[128];
  for (int32_t q = 0; q < s->n_ranks; q++) {
    const sc_dist_sim_rank *r = &s->ranks[q];
    json_array_append_new(
        ranks, json_pack("{s:i, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "pipe_rank",
                         (int)r->pipe_rank, "rank", (json_int_t)r->rank, "finish_s", r->finish_s,
                         "compute_s", r->compute_s, "bubble_s", r->bubble_s, "exposed_s",
                         r->exposed_comm_s, "recompute_s", r->recompute_s, "optimizer_s",
                         r->optimizer_s));
  }
  for (int32_t g = 0; g < tr->n_groups; g++) {
    sc_cli_format_axes(&dp->mesh, tr->axes[g], axes, sizeof axes);
    json_array_append_new(queues, json_string(axes));
  }
  for (int k = 0; k < SC_DIST_SIM_EV_KIND_COUNT; k++)
    json_array_append_new(kinds, json_string(sc_dist_sim_event_kind_name((sc_dist_sim_event_kind)k)));
  for (int k = 0; k < SC_COMM_KIND_COUNT; k++)
    json_array_append_new(comm, json_string(sc_comm_kind_names[k]));
  for (int64_t i = 0; i < tr->n; i++) {
    const sc_dist_sim_event *e = &tr->events[i];
    json_array_append_new(ev, json_pack("[i,i,i,i,i,i,i,i,f,f,f,i]", (int)e->pipe_rank,
                                        (int)e->queue, (int)e->kind, (int)e->phase,
                                        (int)e->chunk, (int)e->mb, (int)e->peer, (int)e->comm,
                                        e->start_s, e->end_s, e->bytes, (int)e->steps));
  }
  return json_pack("{s:f, s:i, s:o, s:o, s:o, s:o, s:o}", "step_s", s->step_time_s, "critical",
                   (int)s->critical, "ranks", ranks, "queues", queues, "kinds", kinds, "comm",
                   comm, "events", ev);
}

/* Priced: each simulated rank's groups (dist_sim.h's comm rows). */
static json_t *priced_collectives(const sc_dist_program *dp, const sc_dist_sim *s) {
  json_t *rows = json_array();
  char axes[128];
  for (int32_t q = 0; q < s->n_ranks; q++) {
    const sc_dist_sim_rank *r = &s->ranks[q];
    for (int32_t j = 0; j < r->n_comm; j++) {
      const sc_dist_sim_comm *c = &r->comm[j];
      sc_cli_format_axes(&dp->mesh, c->axes, axes, sizeof axes);
      json_array_append_new(rows, json_pack("{s:i, s:I, s:s, s:I, s:f, s:f, s:f}", "pipe_rank",
                                            (int)r->pipe_rank, "rank", (json_int_t)r->rank,
                                            "axes", axes, "count", (json_int_t)c->ops, "bytes",
                                            c->bytes, "busy_s", c->busy_s, "exposed_s",
                                            c->exposed_s));
    }
  }
  return rows;
}

/* Unpriced (no cluster): each stage program's COMM steps by (kind, axes):
 * their count and bytes (the larger of input and output) per run. */
static json_t *program_collectives(const sc_dist_program *dp) {
  json_t *rows = json_array();
  char axes[128];
  for (int32_t s = 0; dp && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    if (!p) continue;
    for (int kind = 0; kind < SC_COMM_KIND_COUNT; kind++) {
      sc_axes seen[SC_DIST_SIM_MAX_GROUPS * 2];
      int32_t n_seen = 0;
      for (int32_t k = 0; k < p->n_steps; k++) {
        const sc_step *st = &p->steps[k];
        if (st->kind != SC_STEP_COMM || (int)st->comm.kind != kind) continue;
        bool dup = false;
        for (int32_t i = 0; i < n_seen; i++) dup |= seen[i] == st->comm.axes;
        if (dup || n_seen == (int32_t)(sizeof seen / sizeof seen[0])) continue;
        seen[n_seen++] = st->comm.axes;
        int64_t count = 0;
        double bytes = 0;
        for (int32_t j = k; j < p->n_steps; j++) {
          const sc_step *x = &p->steps[j];
          if (x->kind != SC_STEP_COMM || (int)x->comm.kind != kind || x->comm.axes != st->comm.axes)
            continue;
          count++;
          int64_t in = x->comm.in >= 0 ? p->buffers[x->comm.in].bytes : 0;
          int64_t out = x->comm.out >= 0 ? p->buffers[x->comm.out].bytes : 0;
          bytes += (double)(in > out ? in : out);
        }
        sc_cli_format_axes(&dp->mesh, st->comm.axes, axes, sizeof axes);
        json_array_append_new(rows, json_pack("{s:i, s:s, s:s, s:I, s:f}", "stage", (int)s, "op",
                                              sc_comm_kind_names[kind], "axes", axes, "count",
                                              (json_int_t)count, "bytes", bytes));
      }
    }
  }
  return rows;
}

static json_t *candidates_json(const sc_plan_html *h) {
  if (!h->candidates) return json_null();
  json_t *rows = json_array();
  for (int32_t i = 0; i < h->n_candidates; i++) {
    const sc_plan_html_candidate *c = &h->candidates[i];
    json_array_append_new(
        rows, json_pack("{s:s, s:f, s:f, s:f, s:I, s:b, s:b, s:b, s:s}", "plan", c->plan,
                        "step_s", c->step_s, "tokens_per_s", c->tokens_per_s, "mfu", c->mfu,
                        "peak_bytes", (json_int_t)c->peak_bytes, "fits", c->fits, "chosen",
                        c->chosen, "exact", c->exact, "why", c->why));
  }
  return rows;
}

static json_t *page_json(const sc_plan_html *h) {
  const sc_plan *pl = h->plan;
  json_t *root = json_pack("{s:s, s:s, s:o, s:o, s:I, s:o, s:o}", "command",
                           h->command ? h->command : "shardc plan", "model",
                           h->model ? h->model : "", "summary", summary_json(h), "mesh",
                           mesh_json(h->dp), "capacity",
                           (json_int_t)(pl && pl->cluster ? pl->cluster_figures.device_memory_bytes
                                                          : 0),
                           "memory", memory_json(h), "candidates", candidates_json(h));
  if (!root) return NULL;
  json_t *timeline = json_null(), *coll = NULL;
  char note[512] = "";
  if (h->dp && pl && pl->cluster && pl->cluster_figures.nodes >= 1) {
    sc_dist_sim s;
    sc_dist_sim_trace tr;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_dist_sim_run_traced(h->dp, &pl->cluster_figures, &s, &tr, &d) == SC_OK) {
      json_decref(timeline);
      timeline = timeline_json(h->dp, &s, &tr);
      coll = json_pack("{s:b, s:o}", "priced", 1, "rows", priced_collectives(h->dp, &s));
    } else {
      char why[300];
      sc_diag_format(&d, why, sizeof why);
      snprintf(note, sizeof note, "the step could not be simulated: %s", why);
    }
    sc_dist_sim_trace_free(&tr);
  } else {
    snprintf(note, sizeof note, "no cluster: give --cluster C to simulate the step");
  }
  if (!coll) coll = json_pack("{s:b, s:o}", "priced", 0, "rows", program_collectives(h->dp));
  json_object_set_new(root, "timeline", timeline);
  json_object_set_new(root, "timeline_note", json_string(note));
  json_object_set_new(root, "collectives", coll);
  return root;
}

/* ---- the page ---- */

/* The plan's script, inside html_page.h's frame (its helpers: el, sv,
 * bytes, secs, section, showTip, table, row; D the data). */
static const char PAGE_SCRIPT[] =
    "/* summary */\n"
    "var sum = section('summary', 'Summary');\n"
    "sum.appendChild(table('kv', ['', ''], D.summary.map(function (kv) {\n"
    "  var tr = el('tr', {'class': 'sum-row'}); tr.appendChild(el('th', {}, kv[0]));\n"
    "  tr.appendChild(el('td', {}, kv[1])); return tr; })));\n"
    "/* rank picker */\n"
    "var T = D.timeline, pick = el('div', {'class': 'controls', id: 'picker'});\n"
    "var lab = el('label', {}, 'Pick any rank (0 to ' + (D.mesh.ranks - 1) + '): ');\n"
    "var inp = el('input', {id: 'rank-pick', type: 'number', min: 0, max: D.mesh.ranks - 1,\n"
    "  value: 0, style: 'width:7em'});\n"
    "lab.appendChild(inp); pick.appendChild(lab);\n"
    "var info = el('span', {id: 'rank-info'}); pick.appendChild(info); sum.appendChild(pick);\n"
    "function coords(r) { return D.mesh.axes.map(function (a) {\n"
    "  return Math.floor(r / a.stride) % a.size; }); }\n"
    "function pickRank(r) { r = Math.max(0, Math.min(D.mesh.ranks - 1, r | 0));\n"
    "  var c = coords(r), q = D.mesh.pp_axis >= 0 ? c[D.mesh.pp_axis] : 0;\n"
    "  var where = D.mesh.axes.map(function (a, i) { return a.name + '=' + c[i]; }).join(', ');\n"
    "  var rep = T && T.ranks[q] ? T.ranks[q].rank : null;\n"
    "  info.textContent = 'rank ' + r + (where ? ' (' + where + ')' : '') +\n"
    "    ' runs pipeline rank ' + q + \"'s programs\" + (rep !== null ?\n"
    "    '; its lanes show rank ' + rep + ', which runs the same steps' : '');\n"
    "  document.querySelectorAll('.picked').forEach(function (e) { e.classList.remove('picked'); });\n"
    "  document.querySelectorAll('[data-pipe-rank]').forEach(function (e) {\n"
    "    var p = +e.getAttribute('data-pipe-rank'); if (p === q || p === -1) e.classList.add('picked'); });\n"
    "}\n"
    "inp.addEventListener('input', function () { pickRank(+inp.value); });\n"
    "/* memory */\n"
    "var COLORS = ['#4e79a7', '#59a14f', '#b07aa1', '#f28e2b', '#edc948', '#76b7b2', '#e15759',\n"
    "  '#9c755f', '#bab0ac'];\n"
    "var M = D.memory, cap = D.capacity;\n"
    "var mem = section('memory', 'Memory per rank', cap > 0 ?\n"
    "  'Each bar is one rank of its group (the ranks of a stage or pipeline rank hold the same);'\n"
    "  + ' the dashed line is the device\\'s memory, ' + bytes(cap) + '.' :\n"
    "  'Each bar is one rank of its group; the device\\'s memory is unknown (no cluster).');\n"
    "(function () {\n"
    "  var lg = el('div', {'class': 'legend'});\n"
    "  M.parts.forEach(function (p, i) { var s = el('span'); s.appendChild(el('i', {style:\n"
    "    'background:' + COLORS[i]})); s.appendChild(document.createTextNode(p)); lg.appendChild(s); });\n"
    "  mem.appendChild(lg);\n"
    "  var most = cap; M.bars.forEach(function (b) { var t = b.bytes.reduce(function (x, y) {\n"
    "    return x + y; }, 0); if (t > most) most = t; });\n"
    "  if (!(most > 0)) most = 1;\n"
    "  var W = 900, L = 190, R = 120, H = 26, h = M.bars.length * H + 30;\n"
    "  var svg = sv('svg', {width: W, height: h, viewBox: '0 0 ' + W + ' ' + h, id: 'memory-svg'});\n"
    "  var sx = (W - L - R) / most;\n"
    "  M.bars.forEach(function (b, i) { var y = 10 + i * H, x = L, tot = 0;\n"
    "    var g = sv('g', {'class': 'mem-bar', 'data-pipe-rank': b.pipe_rank});\n"
    "    g.appendChild(sv('rect', {'class': 'barbg', x: 0, y: y - 2, width: W, height: H, fill: 'none'}));\n"
    "    g.appendChild(sv('text', {x: 4, y: y + 15}, b.label));\n"
    "    b.bytes.forEach(function (v, k) { if (!(v > 0)) return; tot += v;\n"
    "      var r = sv('rect', {'class': 'mem-seg', 'data-part': M.parts[k], x: x, y: y,\n"
    "        width: Math.max(v * sx, 0.5), height: H - 6, fill: COLORS[k]});\n"
    "      r.addEventListener('mousemove', function (e) { showTip(e, b.label + '\\n' + M.parts[k] +\n"
    "        ': ' + bytes(v) + ' (' + v + ' bytes)' + (cap > 0 ? '\\n' + (100 * v / cap).toFixed(1) +\n"
    "        ' % of the device' : '')); });\n"
    "      r.addEventListener('mouseleave', hideTip); g.appendChild(r); x += v * sx; });\n"
    "    g.appendChild(sv('text', {x: x + 6, y: y + 15}, bytes(tot) + (cap > 0 ? ' (' +\n"
    "      (100 * tot / cap).toFixed(1) + ' %)' : '')));\n"
    "    svg.appendChild(g); });\n"
    "  if (cap > 0) { var cx = L + cap * sx;\n"
    "    svg.appendChild(sv('line', {'class': 'capacity', x1: cx, x2: cx, y1: 4, y2: h - 16,\n"
    "      stroke: '#c00', 'stroke-dasharray': '5,4', 'stroke-width': 1.5}));\n"
    "    svg.appendChild(sv('text', {x: Math.min(cx, W - 150) , y: h - 4, fill: '#c00'},\n"
    "      'device ' + bytes(cap))); }\n"
    "  var box = el('div', {'class': 'scroll'}); box.appendChild(svg); mem.appendChild(box);\n"
    "})();\n"
    "/* timeline */\n"
    "var PH = ['P', 'F', 'B', 'W', 'N', 'U'], PHN = ['prepare', 'forward', 'backward',\n"
    "  'weight gradients', 'gradient norm', 'optimizer update'];\n"
    "var KC = {compute: '#4e79a7', recompute: '#f28e2b', optimizer: '#b07aa1', bubble: '#e8e8e8',\n"
    "  exposed: '#e15759', collective: '#edc948', send: '#9c755f', copy: '#76b7b2'};\n"
    "var PC = ['#86bcb6', '#4e79a7', '#59a14f', '#76b7b2', '#b07aa1', '#b07aa1'];\n"
    "var tl = section('timeline', 'Schedule timeline', T ? 'The simulated step (' + secs(T.step_s)\n"
    "  + '): one compute lane per pipeline rank (prepare, forward, backward, weight-gradient and'\n"
    "  + ' optimizer pieces, named as --schedule-table names them: F1.3 is the forward of chunk 1,'\n"
    "  + ' microbatch 3;'\n"
    "  + ' grey: the bubble, waiting for a neighbour; red: waiting for communication) and'\n"
    "  + ' its communication queues below it. Hover a block for its step, microbatch, bytes and time.'\n"
    "  : D.timeline_note);\n"
    "function evColor(e) { var k = T.kinds[e[2]];\n"
    "  if (k === 'compute' && e[3] >= 0) return PC[e[3]]; return KC[k] || '#888'; }\n"
    "function evText(e) { var k = T.kinds[e[2]], q = e[0], r = T.ranks[q], lines = [];\n"
    "  var what = k === 'compute' && e[3] >= 0 ? PHN[e[3]] : k === 'collective' ? 'collective ' +\n"
    "    T.comm[e[7]] : k === 'send' ? 'send to pipeline rank ' + e[6] : k === 'bubble' ?\n"
    "    'bubble: waiting for pipeline rank ' + e[6] : k === 'exposed' ? 'waiting for communication'\n"
    "    : k === 'copy' ? 'an offloaded value to or from the host pool' : k;\n"
    "  lines.push('pipeline rank ' + q + ' (rank ' + r.rank + '), ' + (e[1] === -1 ? 'compute' :\n"
    "    e[1] === -2 ? 'point-to-point' : e[1] === -3 ? 'copy' : T.queues[e[1]] + ' queue'));\n"
    "  lines.push(what + (e[3] >= 0 ? ': piece ' + PH[e[3]] + ' chunk ' + e[4] : ''));\n"
    "  lines.push('microbatch ' + (e[5] >= 0 ? e[5] : '- (once a step)') + (e[11] > 1 ? ', ' +\n"
    "    e[11] + ' steps' : ', 1 step'));\n"
    "  lines.push(secs(e[8]) + ' to ' + secs(e[9]) + ': ' + secs(e[9] - e[8]));\n"
    "  if (e[10] > 0) lines.push(bytes(e[10]) + ' (' + Math.round(e[10]) + ' bytes)');\n"
    "  return lines.join('\\n'); }\n"
    "function drawTimeline(zoom) {\n"
    "  var old = document.getElementById('timeline-box'); if (old) old.remove();\n"
    "  var L = 200, W = Math.max(900, (tl.clientWidth - 40)) * zoom, sx = (W - L - 60) / T.step_s;\n"
    "  var lanes = []; T.ranks.forEach(function (r, q) { lanes.push({q: q, queue: -1});\n"
    "    var used = {}; T.events.forEach(function (e) { if (e[0] === q && e[1] !== -1) used[e[1]] = 1; });\n"
    "    Object.keys(used).map(Number).sort(function (a, b) { return b - a; }).forEach(function (u) {\n"
    "      lanes.push({q: q, queue: u}); }); });\n"
    "  var y = 24, idx = {}; lanes.forEach(function (ln) { ln.y = y; ln.h = ln.queue === -1 ? 26 : 16;\n"
    "    y += ln.h + 4; idx[ln.q + ':' + ln.queue] = ln; });\n"
    "  var svg = sv('svg', {width: W, height: y + 10, id: 'timeline-svg'});\n"
    "  for (var t = 0, n = 10; t <= n; t++) { var x = L + (W - L - 60) * t / n;\n"
    "    svg.appendChild(sv('line', {x1: x, x2: x, y1: 16, y2: y, stroke: '#eee'}));\n"
    "    svg.appendChild(sv('text', {x: x - 10, y: 12}, secs(T.step_s * t / n))); }\n"
    "  lanes.forEach(function (ln) { var r = T.ranks[ln.q];\n"
    "    var g = sv('g', {'class': 'lane', 'data-rank': ln.q, 'data-pipe-rank': ln.q, 'data-queue':\n"
    "      ln.queue === -1 ? 'compute' : ln.queue === -2 ? 'p2p' : ln.queue === -3 ? 'copy' :\n"
    "      T.queues[ln.queue]});\n"
    "    g.appendChild(sv('rect', {'class': 'lanebg', x: 0, y: ln.y - 2, width: W, height: ln.h + 4,\n"
    "      fill: ln.queue === -1 ? '#f7f7f7' : 'none'}));\n"
    "    g.appendChild(sv('text', {x: ln.queue === -1 ? 4 : 18, y: ln.y + ln.h - 5}, ln.queue === -1 ?\n"
    "      'pp ' + ln.q + ' (rank ' + r.rank + ')' + (ln.q === T.critical ? ' *' : '') :\n"
    "      (ln.queue === -2 ? 'point-to-point' : ln.queue === -3 ? 'host link copies' :\n"
    "       T.queues[ln.queue] + ' collectives')));\n"
    "    ln.g = g; svg.appendChild(g); });\n"
    "  T.events.forEach(function (e, i) { var ln = idx[e[0] + ':' + e[1]]; if (!ln) return;\n"
    "    var x = L + e[8] * sx, w = Math.max((e[9] - e[8]) * sx, 0.6);\n"
    "    var rc = sv('rect', {'class': 'block', 'data-kind': T.kinds[e[2]], 'data-i': i, x: x,\n"
    "      y: ln.y, width: w, height: ln.h, fill: evColor(e)});\n"
    "    if (T.kinds[e[2]] === 'bubble') rc.setAttribute('stroke', '#bbb');\n"
    "    rc.addEventListener('mousemove', function (ev) { showTip(ev, evText(e)); });\n"
    "    rc.addEventListener('mouseleave', hideTip); ln.g.appendChild(rc);\n"
    "    if (e[1] === -1 && T.kinds[e[2]] === 'compute' && e[3] >= 0 && e[5] >= 0 && w > 28)\n"
    "      ln.g.appendChild(sv('text', {'class': 'blabel', x: x + 3, y: ln.y + ln.h - 8},\n"
    "        PH[e[3]] + e[4] + '.' + e[5])); });\n"
    "  var box = el('div', {'class': 'scroll', id: 'timeline-box'}); box.appendChild(svg);\n"
    "  tl.appendChild(box); pickRank(+inp.value); }\n"
    "if (T) {\n"
    "  var lg = el('div', {'class': 'legend'});\n"
    "  [['prepare', PC[0]], ['forward', PC[1]], ['backward', PC[2]], ['weight gradients', PC[3]],\n"
    "   ['optimizer', KC.optimizer], ['recompute', KC.recompute], ['bubble', KC.bubble],\n"
    "   ['exposed wait', KC.exposed], ['collective', KC.collective], ['send', KC.send],\n"
    "   ['copy', KC.copy]]\n"
    "  .forEach(function (p) {\n"
    "    var s = el('span'); s.appendChild(el('i', {style: 'background:' + p[1]}));\n"
    "    s.appendChild(document.createTextNode(p[0])); lg.appendChild(s); });\n"
    "  tl.appendChild(lg);\n"
    "  var zc = el('div', {'class': 'controls'}), zl = el('label', {}, 'Zoom: ');\n"
    "  var z = el('input', {id: 'zoom', type: 'range', min: 1, max: 40, value: 1});\n"
    "  zl.appendChild(z); zc.appendChild(zl); tl.appendChild(zc);\n"
    "  z.addEventListener('change', function () { drawTimeline(+z.value); });\n"
    "  drawTimeline(1);\n"
    "  var br = section('breakdown', 'Step breakdown per pipeline rank',\n"
    "    'Every advance of a rank\\'s clock is one of these terms; they sum to its finish.');\n"
    "  br.appendChild(table('breakdown', ['pipeline rank', 'rank', 'compute', 'recompute',\n"
    "    'optimizer', 'bubble', 'exposed communication', 'finish'], T.ranks.map(function (r) {\n"
    "    var tr = row('br-row', [r.pipe_rank, r.rank, secs(r.compute_s), secs(r.recompute_s),\n"
    "      secs(r.optimizer_s), secs(r.bubble_s), secs(r.exposed_s), secs(r.finish_s)]);\n"
    "    tr.setAttribute('data-pipe-rank', r.pipe_rank); return tr; })));\n"
    "}\n"
    "/* collectives */\n"
    "var C = D.collectives;\n"
    "var cs = section('collectives', 'Collectives per axis', C.priced ?\n"
    "  'Per step, on each pipeline rank\\'s representative: the transfers on each group\\'s queue '\n"
    "  + '(point-to-point hand-offs under the pipeline\\'s axes), their time on the queue, what '\n"
    "  + 'compute waited for (exposed) and what ran behind compute (overlapped).' :\n"
    "  'Per run of each stage program (no cluster: not priced).');\n"
    "if (!C.rows.length) cs.appendChild(el('p', {}, 'none'));\n"
    "else if (C.priced) cs.appendChild(table('coll', ['pipeline rank', 'rank', 'axes', 'count',\n"
    "  'bytes', 'time', 'exposed', 'overlapped'], C.rows.map(function (c) {\n"
    "  var tr = row('coll-row', [c.pipe_rank, c.rank, c.axes, c.count, bytes(c.bytes), secs(c.busy_s),\n"
    "    secs(c.exposed_s), secs(Math.max(c.busy_s - c.exposed_s, 0))]);\n"
    "  tr.setAttribute('data-pipe-rank', c.pipe_rank); return tr; })));\n"
    "else cs.appendChild(table('coll', ['stage', 'op', 'axes', 'count', 'bytes'], C.rows.map(\n"
    "  function (c) { var tr = row('coll-row', [c.stage, c.op, c.axes, c.count, bytes(c.bytes)]);\n"
    "  tr.setAttribute('data-pipe-rank', c.stage); return tr; })));\n"
    "/* candidates */\n"
    "if (D.candidates) {\n"
    "  var ca = section('candidates', 'Candidates (plan --auto)', 'The search\\'s best plans: '\n"
    "    + 'exact ones compiled and simulated, the others the block model\\'s estimate; why each '\n"
    "    + 'lost against the chosen one.');\n"
    "  ca.appendChild(table('cand', ['#', 'plan', 'step', 'tokens/s', 'MFU', 'peak/rank', 'fits',\n"
    "    'how', 'why'], D.candidates.map(function (c, i) {\n"
    "    var tr = row('cand-row' + (c.chosen ? ' chosen' : ''), [i + 1, c.plan, secs(c.step_s),\n"
    "      Math.round(c.tokens_per_s), (100 * c.mfu).toFixed(1) + ' %', bytes(c.peak_bytes),\n"
    "      c.fits ? 'yes' : 'no', c.exact ? 'exact' : 'estimate', c.why]); return tr; })));\n"
    "}\n"
    "pickRank(0);\n";

sc_status sc_plan_html_write(const sc_plan_html *h, const char *path, sc_diag *d) {
  json_t *root = page_json(h);
  if (!root) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_html_page_write(path, "plan-data", root, PAGE_SCRIPT, d);
  json_decref(root);
  return st;
}
