/* composite_control.c — control flow as composite ops: If, Loop and Scan
 * are expanded, once their inputs' shapes are known, into the ops of their
 * subgraphs (attr->graph: imported by the frontend into graphs of their
 * own, ir/ir.h), inlined:
 *
 *   If(cond; then_branch, else_branch): cond must be a constant (`shardc
 *     run` specialises to a given input, docs/runtime.md): the chosen
 *     branch's nodes, once;
 *   Scan(states..., scan inputs...; body, num_scan_inputs, axes,
 *     directions) (opset 8's batched form too): the body once per step of the scan
 *     axis (its length known from the shapes), the states threaded through,
 *     each scan input's step-t slice (a Gather), the scan outputs stacked
 *     along their axes (Unsqueeze + Concat), backwards where a direction
 *     says so;
 *   Loop(M?, cond?, v...; body): the body with the iteration number and
 *     the condition as constants, again and again while t < M and the
 *     condition holds — the body's condition output must fold to a
 *     constant each time (a loop whose exit depends on run-time data is
 *     refused); the scan outputs stacked along a new axis 0.
 *
 * An inlined node is named "<node>/<branch or step>/<its name>", its
 * values likewise; a value the subgraph reads from outside (SC_VALUE_OUTER)
 * is the enclosing graph's of that name — looked up first under the
 * prefixes the subgraph's own enclosing subgraphs were inlined with
 * (attr->scope), so nested control flow reads the right copy. Each node is
 * inferred (a composite one expanded in turn) and folded when its inputs
 * are constants as it is added, so that later nodes of the body, and the
 * loop's condition, see constants.
 *
 * Unrolling is bounded: at most CTL_MAX_STEPS steps and CTL_MAX_NODES
 * inlined nodes per op, and no inlining once the graph holds
 * CTL_MAX_GRAPH_NODES (nested loops), so that a hostile trip count cannot
 * exhaust memory (an error names the node). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/composite_internal.h"
#include "passes/pass.h"

enum { CTL_MAX_STEPS = 4096, CTL_MAX_NODES = 1 << 18, CTL_MAX_GRAPH_NODES = 1 << 21 };

typedef struct inliner {
  sc_grad_ctx *c;
  const sc_graph *sub;
  const char *scope;  /* the subgraph's attr->scope: prefixes, '\n'-separated */
  const char *prefix; /* the names this inlining makes: prefix + name */
  int32_t *map;       /* sub value id → value id here, -1 until resolved */
  int32_t *nodes;     /* nodes inlined so far (the op's running total) */
} inliner;

/* The value named `name` in the enclosing graph, through the scope's
 * prefixes (most specific first), then as it is. */
static int32_t outer_lookup(const inliner *in, const char *name) {
  sc_graph *g = in->c->g;
  char buf[1024];
  for (const char *p = in->scope; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int w = snprintf(buf, sizeof buf, "%.*s%s", (int)len, p, name);
    if (w > 0 && (size_t)w < sizeof buf) {
      int32_t v = sc_graph_find_value(g, buf);
      if (v >= 0) return v;
    }
    p = e ? e + 1 : p + len;
  }
  return sc_graph_find_value(g, name);
}

/* The value here of sub's value v: an actual input (set in map before),
 * an outer one, a copy of a constant, or a node's output inlined before. */
static int32_t resolve(inliner *in, int32_t v) {
  if (in->map[v] >= 0) return in->map[v];
  sc_graph *g = in->c->g;
  const sc_value *sv = &in->sub->values[v];
  int32_t r = -1;
  if (sv->flags & SC_VALUE_OUTER) {
    r = outer_lookup(in, sv->name);
    if (r < 0)
      sc_node_error(g, cx_node(in->c), SC_ERR_INVALID,
                    "the subgraph reads '%s', which no enclosing graph defines", sv->name);
  } else if (sc_value_is_const(sv)) {
    char name[600];
    snprintf(name, sizeof name, "%s%s", in->prefix, sv->name);
    r = sc_graph_new_value(g, name);
    if (r >= 0 && sc_value_set_data(g, r, sv->dtype, sv->rank, sv->dims, sv->data,
                                    sv->data ? (uint64_t)sc_value_bytes(sv) : 0, true) != SC_OK)
      r = -1;
  } else {
    sc_node_error(g, cx_node(in->c), SC_ERR_INVALID,
                  "the subgraph's value '%s' is read before it is made", sv->name);
  }
  return in->map[v] = r;
}

/* Copies sub node k: its inputs resolved, new outputs, the attributes
 * shared (a GRAPH one's scope gains this prefix); inferred, folded. */
static sc_status inline_node(inliner *in, const sc_node *sn) {
  sc_grad_ctx *c = in->c;
  sc_graph *g = c->g;
  if (++*in->nodes > CTL_MAX_NODES || g->n_nodes > CTL_MAX_GRAPH_NODES)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT,
                         "unrolled, it makes more than %d nodes (or the graph more than %d)",
                         CTL_MAX_NODES, CTL_MAX_GRAPH_NODES);
  int32_t ins[64], outs[64];
  if (sn->n_inputs > 64 || sn->n_outputs > 64)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "subgraph node '%s' has over 64 operands",
                         sn->name);
  for (int32_t j = 0; j < sn->n_inputs; j++) {
    ins[j] = sn->inputs[j] < 0 ? -1 : resolve(in, sn->inputs[j]);
    if (sn->inputs[j] >= 0 && ins[j] < 0) return cx_built(c);
  }
  char name[600];
  for (int32_t j = 0; j < sn->n_outputs; j++) {
    outs[j] = -1;
    if (sn->outputs[j] < 0) continue;
    snprintf(name, sizeof name, "%s%s", in->prefix, in->sub->values[sn->outputs[j]].name);
    if ((outs[j] = sc_graph_new_value(g, name)) < 0) return cx_built(c);
    in->map[sn->outputs[j]] = outs[j];
  }
  snprintf(name, sizeof name, "%s%s", in->prefix, sn->name);
  int32_t id = sc_graph_add_node(g, sn->op, name, ins, sn->n_inputs, outs, sn->n_outputs);
  if (id < 0 || sc_node_copy_attrs(g, id, sn) != SC_OK) return cx_built(c);
  sc_node *n = &g->nodes[id];
  for (int32_t a = 0; a < n->n_attrs; a++) {
    sc_attr *at = &n->attrs[a];
    if (at->kind != SC_ATTR_GRAPH) continue;
    at->scope = sc_arena_printf(&g->arena, "%s\n%s", in->prefix, in->scope ? in->scope : "");
    if (!at->scope) return SC_ERR_NOMEM;
  }
  const sc_op_info *info = &sc_ops[n->op];
  if ((info->flags & SC_OPF_COMPOSITE) || sc_expands_here(g, n))
    return sc_expand_composite(g, id);
  sc_status st = info->infer(g, n);
  if (st != SC_OK) return st;
  bool evaluated;
  return sc_pass_try_eval(g, &g->nodes[id], &evaluated);
}

/* Inlines sub with actual inputs (n of them, -1 for an absent one) under
 * prefix; outs: the values of its outputs. */
static sc_status inline_graph(sc_grad_ctx *c, const sc_attr *at, const int32_t *actual, int32_t n,
                              const char *prefix, int32_t *outs, int32_t *nodes) {
  const sc_graph *sub = at->graph;
  sc_graph *g = c->g;
  if (sub->n_inputs != n)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "its %s takes %d inputs, not %d",
                         at->name, sub->n_inputs, n);
  int32_t *map = sc_arena_array(&g->arena, (size_t)sub->n_values + 1, sizeof *map);
  if (!map) return SC_ERR_NOMEM;
  for (int32_t v = 0; v < sub->n_values; v++) map[v] = -1;
  for (int32_t k = 0; k < n; k++) map[sub->inputs[k]] = actual[k];
  inliner in = {c, sub, at->scope, prefix, map, nodes};
  for (int32_t k = 0; k < sub->n_nodes; k++) {
    const sc_node *sn = &sub->nodes[k];
    if (sn->flags & SC_NODE_DEAD) continue;
    sc_status st = inline_node(&in, sn);
    if (st != SC_OK) return st;
  }
  for (int32_t k = 0; k < sub->n_outputs; k++)
    if ((outs[k] = resolve(&in, sub->outputs[k])) < 0) return cx_built(c);
  return SC_OK;
}

/* The GRAPH attribute `name` of the node being expanded. */
static const sc_attr *body_attr(sc_grad_ctx *c, const char *name) {
  const sc_attr *at = sc_node_attr(cx_node(c), name);
  if (!at || at->kind != SC_ATTR_GRAPH || !at->graph) {
    sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "attribute '%s' (a graph) is missing", name);
    return NULL;
  }
  return at;
}

static char *step_prefix(sc_grad_ctx *c, const char *what, int64_t t) {
  const char *nm = cx_node(c)->name;
  return t < 0 ? sc_arena_printf(&c->g->arena, "%s/%s/", nm, what)
               : sc_arena_printf(&c->g->arena, "%s/%s%lld/", nm, what, (long long)t);
}

/* ---- If ---- */

sc_status cx_expand_if(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t cond = cx_in(c, 0);
  sc_status st = sc_require_const(g, cx_node(c), cx_val(c, cond));
  if (st != SC_OK) return st;
  if (sc_value_numel(cx_val(c, cond)) != 1)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the condition has %lld elements, not 1",
                         (long long)sc_value_numel(cx_val(c, cond)));
  bool taken = sc_load_i64(cx_val(c, cond)->dtype, cx_val(c, cond)->data, 0) != 0;
  const sc_attr *at = body_attr(c, taken ? "then_branch" : "else_branch");
  if (!at) return g->diag.status;
  if (at->graph->n_outputs != cx_node(c)->n_outputs)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "its %s has %d outputs, the node %d",
                         at->name, at->graph->n_outputs, cx_node(c)->n_outputs);
  int32_t nodes = 0;
  char *prefix = step_prefix(c, taken ? "then" : "else", -1);
  return prefix ? inline_graph(c, at, NULL, 0, prefix, out, &nodes) : SC_ERR_NOMEM;
}

/* ---- stacking the scan outputs ---- */

/* elems[t] (T of them, one shape) stacked along a new axis `axis` (of
 * rank + 1), in reverse when `reverse`. */
static int32_t stack(sc_grad_ctx *c, const int32_t *elems, int64_t T, int64_t axis, bool reverse) {
  int32_t *parts = sc_arena_array(&c->g->arena, (size_t)T, sizeof *parts);
  if (!parts || T <= 0) return -1;
  int32_t rank = cx_val(c, elems[0])->rank;
  if (axis < 0) axis += rank + 1;
  if (axis < 0 || axis > rank) {
    sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "scan output axis out of range");
    return -1;
  }
  for (int64_t t = 0; t < T; t++) {
    parts[t] = cx_unsqueeze(c, elems[reverse ? T - 1 - t : t], (int32_t)axis, 1);
    if (parts[t] < 0) return -1;
  }
  return T == 1 ? parts[0] : gb_op_i(c, SC_OP_CONCAT, parts, (int32_t)T, "axis", axis);
}

/* ---- Scan (opset 9 and later) ---- */

static int64_t ints_at(const sc_node *n, const char *name, int64_t k, int64_t dflt) {
  const sc_attr *a = sc_node_attr(n, name);
  return a && a->kind == SC_ATTR_INTS && k < a->n ? a->ints[k] : dflt;
}

/* The scan proper: n_state states, m scan inputs xs (scanned along axes,
 * backwards where in_dir), the scan outputs stacked along out_axis
 * (reversed where out_dir); outs: the final states, then those. */
typedef struct scan_spec {
  const sc_attr *body;
  int32_t n_state, m, n_scan_out;
  int32_t state[64], xs[64], axes[64];
  bool in_dir[64], out_dir[64];
  int64_t out_axis[64];
  const char *tag; /* the steps' prefix */
} scan_spec;

static sc_status scan_core(sc_grad_ctx *c, scan_spec *sp, int32_t *outs, int32_t *nodes) {
  sc_graph *g = c->g;
  int64_t T = -1;
  for (int32_t j = 0; j < sp->m; j++) {
    const sc_value *x = cx_val(c, sp->xs[j]);
    if (T >= 0 && x->dims[sp->axes[j]] != T)
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the scan inputs' lengths differ");
    T = x->dims[sp->axes[j]];
  }
  if (T < 1 || T > CTL_MAX_STEPS)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "a scan of %lld steps (unrolled: 1 to %d)",
                         (long long)T, CTL_MAX_STEPS);
  int32_t *elems = sc_arena_array(&g->arena, (size_t)(T * (sp->n_scan_out ? sp->n_scan_out : 1)),
                                  sizeof *elems);
  if (!elems) return SC_ERR_NOMEM;
  int32_t actual[128], bo[128], state[64];
  int32_t n_in = sp->n_state + sp->m;
  memcpy(state, sp->state, sizeof state);
  for (int64_t t = 0; t < T; t++) {
    for (int32_t j = 0; j < sp->n_state; j++) actual[j] = state[j];
    for (int32_t j = 0; j < sp->m; j++) {
      /* step t's slice, the scan axis dropped (a Slice and a Reshape:
       * plain data movement wherever the input is sharded) */
      int64_t at = sp->in_dir[j] ? T - 1 - t : t, d[SC_MAX_RANK];
      const sc_value *xv = cx_val(c, sp->xs[j]);
      int32_t r = 0;
      for (int32_t i = 0; i < xv->rank; i++)
        if (i != sp->axes[j]) d[r++] = xv->dims[i];
      actual[sp->n_state + j] =
          gb_reshape(c, cx_axis_slice(c, sp->xs[j], sp->axes[j], at, at + 1, 1), r, d);
      if (actual[sp->n_state + j] < 0) return cx_built(c);
    }
    char *prefix = step_prefix(c, sp->tag, t);
    if (!prefix) return SC_ERR_NOMEM;
    sc_status st = inline_graph(c, sp->body, actual, n_in, prefix, bo, nodes);
    if (st != SC_OK) return st;
    for (int32_t j = 0; j < sp->n_state; j++) state[j] = bo[j];
    for (int32_t k = 0; k < sp->n_scan_out; k++) elems[k * T + t] = bo[sp->n_state + k];
  }
  for (int32_t j = 0; j < sp->n_state; j++) outs[j] = state[j];
  for (int32_t k = 0; k < sp->n_scan_out; k++) {
    outs[sp->n_state + k] = stack(c, &elems[k * T], T, sp->out_axis[k], sp->out_dir[k]);
    if (outs[sp->n_state + k] < 0) return cx_built(c);
  }
  return SC_OK;
}

/* Scan: from opset 9 the inputs are the states then the scan inputs, with
 * per-input axes and directions; at opset 8 input 0 is the optional
 * sequence_lens (every sequence full length only), every input has a
 * batch axis 0 that the body does not see (scanned along axis 1): the
 * scan is done per batch element and its outputs stacked along axis 0. */
sc_status cx_expand_scan(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  bool batched = g->opset < 9;
  const sc_attr *body = body_attr(c, "body");
  if (!body) return g->diag.status;
  int64_t m;
  sc_status st = sc_read_attr_int(g, cx_node(c), "num_scan_inputs", 0, &m);
  if (st != SC_OK) return st;
  int32_t first = batched ? 1 : 0;
  int32_t n_in = cx_node(c)->n_inputs - first, n_state = n_in - (int32_t)m;
  int32_t n_out = cx_node(c)->n_outputs, n_scan_out = body->graph->n_outputs - n_state;
  if (m < 1 || n_state < 0 || n_scan_out < 0 || n_out != n_state + n_scan_out ||
      body->graph->n_inputs != n_in || n_out > 64 || n_in > 64)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "num_scan_inputs %lld does not fit its %d inputs, %d outputs and body",
                         (long long)m, n_in, n_out);
  scan_spec sp = {.body = body, .n_state = n_state, .m = (int32_t)m, .n_scan_out = n_scan_out,
                  .tag = "step"};
  for (int32_t k = 0; k < n_scan_out; k++) {
    sp.out_axis[k] = batched ? 0 : ints_at(cx_node(c), "scan_output_axes", k, 0);
    sp.out_dir[k] = !batched && ints_at(cx_node(c), "scan_output_directions", k, 0) != 0;
  }
  for (int32_t j = 0; j < m; j++)
    sp.in_dir[j] = ints_at(cx_node(c), batched ? "directions" : "scan_input_directions", j, 0) != 0;
  if (!batched) {
    for (int32_t j = 0; j < n_state; j++) sp.state[j] = cx_in(c, j);
    for (int32_t j = 0; j < m; j++) {
      sp.xs[j] = cx_in(c, n_state + j);
      int32_t a;
      if ((st = sc_norm_axis(g, cx_node(c), ints_at(cx_node(c), "scan_input_axes", j, 0),
                             cx_val(c, sp.xs[j])->rank, &a)) != SC_OK)
        return st;
      sp.axes[j] = a;
    }
    int32_t nodes = 0;
    return scan_core(c, &sp, out, &nodes);
  }
  if (cx_in(c, 0) >= 0) /* sequence_lens: only all of full length */
    return sc_node_error(g, cx_node(c), SC_ERR_UNSUPPORTED,
                         "Scan (opset 8) with sequence_lens is not supported");
  int64_t B = cx_val(c, cx_in(c, first))->dims[0];
  if (B < 1 || B > CTL_MAX_STEPS)
    return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "a batch of %lld (1 to %d)", (long long)B,
                         CTL_MAX_STEPS);
  int32_t *per = sc_arena_array(&g->arena, (size_t)(B * n_out), sizeof *per);
  if (!per) return SC_ERR_NOMEM;
  int32_t nodes = 0;
  for (int64_t b = 0; b < B; b++) {
    int32_t idx = gb_scalar(c, SC_DTYPE_I64, (double)b);
    for (int32_t j = 0; j < n_in; j++) {
      int32_t v = gb_op_i(c, SC_OP_GATHER, (int32_t[]){cx_in(c, first + j), idx}, 2, "axis", 0);
      if (v < 0) return cx_built(c);
      if (j < n_state) sp.state[j] = v;
      else sp.xs[j - n_state] = v, sp.axes[j - n_state] = 0;
    }
    sp.tag = sc_arena_printf(&g->arena, "b%lld/step", (long long)b);
    if (!sp.tag) return SC_ERR_NOMEM;
    if ((st = scan_core(c, &sp, &per[b * n_out], &nodes)) != SC_OK) return st;
  }
  int32_t *col = sc_arena_array(&g->arena, (size_t)B, sizeof *col);
  if (!col) return SC_ERR_NOMEM;
  for (int32_t k = 0; k < n_out; k++) {
    for (int64_t b = 0; b < B; b++) col[b] = per[b * n_out + k];
    if ((out[k] = stack(c, col, B, 0, false)) < 0) return cx_built(c);
  }
  return SC_OK;
}

/* ---- Loop ---- */

/* The one element of constant v as a bool/int; false when v is not a
 * constant with one element. */
static bool const_scalar(const sc_value *v, int64_t *x) {
  if (!sc_value_is_const(v) || !sc_value_has_data(v) || sc_value_numel(v) != 1) return false;
  *x = sc_load_i64(v->dtype, v->data, 0);
  return true;
}

sc_status cx_expand_loop(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  const sc_attr *body = body_attr(c, "body");
  if (!body) return g->diag.status;
  int32_t n_v = cx_node(c)->n_inputs - 2, n_scan = body->graph->n_outputs - 1 - n_v;
  if (n_v < 0 || n_scan < 0 || body->graph->n_inputs != n_v + 2 ||
      cx_node(c)->n_outputs != n_v + n_scan || cx_node(c)->n_outputs > 64)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "its %d inputs, %d outputs and body (%d in, %d out) do not fit",
                         cx_node(c)->n_inputs, cx_node(c)->n_outputs, body->graph->n_inputs, body->graph->n_outputs);
  int64_t trip = -1, cond = 1;
  sc_status st;
  if (cx_in(c, 0) >= 0) {
    if ((st = sc_require_const(g, cx_node(c), cx_val(c, cx_in(c, 0)))) != SC_OK) return st;
    if (!const_scalar(cx_val(c, cx_in(c, 0)), &trip))
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the trip count M must have one element");
  }
  if (cx_in(c, 1) >= 0) {
    if ((st = sc_require_const(g, cx_node(c), cx_val(c, cx_in(c, 1)))) != SC_OK) return st;
    if (!const_scalar(cx_val(c, cx_in(c, 1)), &cond))
      return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "the condition must have one element");
  }
  int32_t v[64], bo[64], actual[64], nodes = 0;
  for (int32_t j = 0; j < n_v; j++) v[j] = cx_in(c, 2 + j);
  int32_t *elems = sc_arena_array(&g->arena, (size_t)CTL_MAX_STEPS * (n_scan ? n_scan : 1),
                                  sizeof *elems);
  if (!elems) return SC_ERR_NOMEM;
  int64_t t = 0;
  for (; cond && (trip < 0 || t < trip); t++) {
    if (t >= CTL_MAX_STEPS)
      return sc_node_error(g, cx_node(c), SC_ERR_LIMIT, "the loop runs more than %d steps (unrolled)",
                           CTL_MAX_STEPS);
    actual[0] = gb_scalar(c, SC_DTYPE_I64, (double)t);
    actual[1] = gb_scalar(c, SC_DTYPE_BOOL, 1);
    for (int32_t j = 0; j < n_v; j++) actual[2 + j] = v[j];
    char *prefix = step_prefix(c, "iter", t);
    if (!prefix || actual[0] < 0 || actual[1] < 0) return cx_built(c);
    if ((st = inline_graph(c, body, actual, n_v + 2, prefix, bo, &nodes)) != SC_OK) return st;
    if (!const_scalar(cx_val(c, bo[0]), &cond))
      return sc_node_error(g, cx_node(c), SC_ERR_UNSUPPORTED,
                           "the loop's condition ('%s') is computed from run-time data: only "
                           "loops whose steps are known when compiling are unrolled",
                           cx_val(c, bo[0])->name);
    for (int32_t j = 0; j < n_v; j++) v[j] = bo[1 + j];
    for (int32_t k = 0; k < n_scan; k++) elems[k * CTL_MAX_STEPS + t] = bo[1 + n_v + k];
  }
  for (int32_t j = 0; j < n_v; j++) out[j] = v[j];
  for (int32_t k = 0; k < n_scan; k++) {
    if (t == 0)
      return sc_node_error(g, cx_node(c), SC_ERR_UNSUPPORTED,
                           "a loop that runs no step has empty scan outputs (not supported)");
    out[n_v + k] = stack(c, &elems[k * CTL_MAX_STEPS], t, 0, false);
    if (out[n_v + k] < 0) return cx_built(c);
  }
  return SC_OK;
}

/* ---- FlexAttention (ai.onnx.preview): attention with subgraph modifiers ----
 *
 * As onnx's reference: S = (Q·√scale)(K·√scale)ᵀ in Q's dtype (scale
 * 1/√E by default), K and V heads repeated for grouped queries; S in the
 * softmax precision (softmax_precision, else f32 for 16-bit inputs, else
 * the input's), score_mod(S) inlined, Softmax over the last axis,
 * prob_mod(P) inlined, P·V in that precision, cast to V's dtype. */

static int32_t repeat_heads(sc_grad_ctx *c, int32_t x, int64_t rep) {
  if (rep == 1 || x < 0) return x;
  const sc_value v = *cx_val(c, x);
  int64_t d5[5] = {v.dims[0], v.dims[1], rep, v.dims[2], v.dims[3]};
  int64_t d4[4] = {v.dims[0], v.dims[1] * rep, v.dims[2], v.dims[3]};
  return gb_reshape(c, gb_expand(c, cx_unsqueeze(c, x, 2, 1), 5, d5), 4, d4);
}

/* The modifier subgraph `name` applied to x, when the node has it. */
static int32_t modify(sc_grad_ctx *c, const char *name, int32_t x, int32_t *nodes) {
  const sc_attr *at = sc_node_attr(cx_node(c), name);
  if (!at || x < 0) return x;
  if (at->kind != SC_ATTR_GRAPH || !at->graph) {
    sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "attribute '%s' is not a graph", name);
    return -1;
  }
  int32_t y = -1;
  char *prefix = step_prefix(c, name, -1);
  if (!prefix || at->graph->n_outputs != 1 ||
      inline_graph(c, at, &x, 1, prefix, &y, nodes) != SC_OK) {
    if (prefix && at->graph->n_outputs != 1)
      sc_node_error(c->g, cx_node(c), SC_ERR_INVALID, "its %s has %d outputs, not 1", name,
                    at->graph->n_outputs);
    return -1;
  }
  return y;
}

sc_status cx_expand_flex_attention(sc_grad_ctx *c, int32_t *out) {
  sc_graph *g = c->g;
  int32_t q = cx_in(c, 0), k = cx_in(c, 1), v = cx_in(c, 2);
  const sc_value qv = *cx_val(c, q), kv = *cx_val(c, k), vv = *cx_val(c, v);
  if (qv.rank != 4 || kv.rank != 4 || vv.rank != 4 || kv.dims[1] != vv.dims[1] ||
      kv.dims[2] != vv.dims[2] || kv.dims[3] != qv.dims[3] || kv.dims[1] <= 0 ||
      qv.dims[1] % kv.dims[1] != 0)
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID,
                         "Q, K, V must be [B, Hq, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev] with "
                         "Hq a multiple of Hkv");
  const sc_attr *sa = sc_node_attr(cx_node(c), "scale");
  double scale = sa ? sa->f : 1.0 / sqrt((double)qv.dims[3]);
  int64_t prec;
  sc_status st = sc_read_attr_int(g, cx_node(c), "softmax_precision", 0, &prec);
  if (st != SC_OK) return st;
  sc_dtype p = prec ? sc_dtype_from_onnx((int32_t)prec)
               : sc_dtype_size(qv.dtype) < 4 ? SC_DTYPE_F32 : qv.dtype;
  if (!sc_dtype_is_float(p) || sc_dtype_is_narrow(p))
    return sc_node_error(g, cx_node(c), SC_ERR_INVALID, "softmax_precision %lld is not a float type",
                         (long long)prec);
  int64_t rep = qv.dims[1] / kv.dims[1];
  int32_t ss = gb_scalar(c, qv.dtype, sqrt((double)(float)scale));
  int32_t kt = gb_transpose(c, gb_2(c, SC_OP_MUL, repeat_heads(c, k, rep), ss),
                            (const int64_t[]){0, 1, 3, 2}, 4);
  int32_t s = gb_cast(c, gb_2(c, SC_OP_MATMUL, gb_2(c, SC_OP_MUL, q, ss), kt), p);
  int32_t nodes = 0;
  s = modify(c, "score_mod", s, &nodes);
  int32_t pr = s < 0 ? -1 : gb_op_i(c, SC_OP_SOFTMAX, &s, 1, "axis", -1);
  pr = modify(c, "prob_mod", pr, &nodes);
  int32_t y = gb_2(c, SC_OP_MATMUL, pr, gb_cast(c, repeat_heads(c, v, rep), p));
  out[0] = gb_cast(c, y, vv.dtype);
  return out[0] < 0 ? cx_built(c) : SC_OK;
}
