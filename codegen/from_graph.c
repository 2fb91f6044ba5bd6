/* from_graph.c — sc_program_from_graph: a graph (after the canonical passes
 * and, optionally, `fuse`) becomes a program of buffers, kernels and steps.
 *
 * Groups: the fuse pass writes each node's group into its internal
 * attribute `__group` (passes/fuse.c); without it every node is its own
 * group. A group holds at most one KERNEL or STEP node (its anchor); the
 * other members are POINT ops (and VIEW ops, lowered as index arithmetic
 * inside a group). Groups are lowered in a topological order of the group
 * graph (an error if the grouping has a cycle):
 *   POINT group   one kernel per distinct output shape (normally one: the
 *                 root's), inner 1, storing every member output that has a
 *                 buffer; members inline into each other
 *   KERNEL group  the anchor's build function; POINT producers inline as its
 *                 prologue, POINT consumers run as its epilogue (lower.c)
 *   STEP group    the anchor's build function (library steps), then the
 *                 POINT members as one kernel attached to the last GEMM step
 *                 as its epilogue (or as a KERNEL step after it); a member
 *                 Transpose the MatMul reads as a transposed operand
 *                 (sc_lower_gemm_operand_transpose) is not lowered: the
 *                 GEMM reads its input with trans_a / trans_b; an FP8
 *                 product's descaling goes into the GEMM step
 *                 (take_descale: sc_gemm.scaled)
 *   VIEW alone    no code: the output buffer is a VIEW of the input's; when
 *                 the output is a graph output, a copy kernel instead
 * Buffers: INPUT for graph inputs, OUTPUT for graph outputs (a graph output
 * that is an input or a constant gets its own OUTPUT buffer and a copy
 * kernel), CONST for constants that kernels load (created on first read;
 * data borrowed; scalars are inlined as kir constants instead), TEMP for
 * values read by another group, and for every output of a STEP node.
 * Kernel names are C identifiers made of the root node's index and the
 * members' op names: k3_add_relu. Every kernel is checked with kir_verify.
 * Index checks: a kernel cannot report an error, so before each group a
 * CHECK step (program.h) validates the indices of every Gather member that
 * come from a buffer (a graph input or another group's output) against the
 * gathered extent: the internal attribute `__vocab` when present (the
 * vocabulary before tensor-parallel padding, passes/partition/vocab_pad.c),
 * else the data's dim. A node with the internal attribute
 * `__check_indices` = N (the vocabulary-parallel lookup of
 * passes/partition/localize.c) gets the same check of its input 0 against
 * N, reported as its `__check_origin` Gather. Constant indices are checked
 * here, at compile time; indices computed inside the Gather's own group are
 * not (the kernel reads the clamped element, lower_shape.c). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/elementwise.h"
#include "ir/op_util.h"

typedef struct fg {
  sc_graph *g;
  sc_program *p;
  sc_diag *diag;
  int32_t n_groups;
  int32_t *node_group; /* node -> dense group id, -1 for dead nodes */
  int32_t *goff, *gmem; /* members of each group (CSR, ascending node ids) */
  int32_t *anchor;      /* per group: KERNEL/STEP node or -1 */
  int32_t *uoff, *users; /* graph users (CSR over values) */
  bool *is_gout;        /* per value: a graph output */
} fg;

static bool node_live(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }


static sc_status node_err(fg *f, const sc_node *n, sc_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sc_status node_err(fg *f, const sc_node *n, sc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(f->diag, st, n ? n->name : NULL, n ? sc_op_name(n->op) : NULL, fmt, ap);
  va_end(ap);
  return st;
}

static sc_status nomem(fg *f) {
  return sc_diag_set(f->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory lowering the graph");
}

/* ---- checks and groups ---- */

static sc_status check_values(fg *f) {
  sc_graph *g = f->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!node_live(n)) continue;
    for (int32_t s = 0; s < n->n_inputs + n->n_outputs; s++) {
      int32_t v = s < n->n_inputs ? n->inputs[s] : n->outputs[s - n->n_inputs];
      if (v < 0) continue;
      const sc_value *val = &g->values[v];
      if (val->rank < 0 || sc_value_numel(val) < 0)
        return node_err(f, n, SC_ERR_INVALID,
                        "value '%s' has no static shape (run infer-shapes first)", val->name);
      if (!sc_dtype_is_numeric(val->dtype))
        return node_err(f, n, SC_ERR_UNSUPPORTED, "value '%s' has dtype %s, which codegen "
                        "does not handle", val->name, sc_dtype_name(val->dtype));
    }
  }
  return SC_OK;
}

static sc_status assign_groups(fg *f) {
  sc_graph *g = f->g;
  int32_t nn = g->n_nodes;
  int64_t cap = (int64_t)nn * 2 + 16;
  int32_t *label_map = sc_calloc((size_t)cap, sizeof *label_map);
  if (!label_map) return nomem(f);
  for (int64_t i = 0; i < cap; i++) label_map[i] = -1;
  sc_status st = SC_OK;
  f->n_groups = 0;
  for (int32_t i = 0; i < nn && st == SC_OK; i++) {
    const sc_node *n = &g->nodes[i];
    f->node_group[i] = -1;
    if (!node_live(n)) continue;
    const sc_attr *a = sc_node_attr(n, "__group");
    if (!a) {
      f->node_group[i] = f->n_groups++;
      continue;
    }
    if (a->kind != SC_ATTR_INT || a->i < 0 || a->i >= cap) {
      st = node_err(f, n, SC_ERR_INVALID, "bad fusion group attribute __group");
      break;
    }
    if (label_map[a->i] < 0) label_map[a->i] = f->n_groups++;
    f->node_group[i] = label_map[a->i];
  }
  sc_free(label_map);
  if (st != SC_OK) return st;
  /* members (CSR) and anchors */
  f->goff = sc_calloc((size_t)f->n_groups + 1, sizeof *f->goff);
  f->gmem = sc_calloc((size_t)nn + 1, sizeof *f->gmem);
  f->anchor = sc_calloc((size_t)f->n_groups + 1, sizeof *f->anchor);
  if (!f->goff || !f->gmem || !f->anchor) return nomem(f);
  for (int32_t i = 0; i < nn; i++)
    if (f->node_group[i] >= 0) f->goff[f->node_group[i] + 1]++;
  for (int32_t k = 0; k < f->n_groups; k++) f->goff[k + 1] += f->goff[k];
  int32_t *fill = sc_calloc((size_t)f->n_groups + 1, sizeof *fill);
  if (!fill) return nomem(f);
  for (int32_t i = 0; i < nn; i++) {
    int32_t k = f->node_group[i];
    if (k >= 0) f->gmem[f->goff[k] + fill[k]++] = i;
  }
  sc_free(fill);
  for (int32_t k = 0; k < f->n_groups; k++) {
    f->anchor[k] = -1;
    for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
      const sc_node *n = &g->nodes[f->gmem[j]];
      const sc_lowering *lw = sc_lowering_of(n->op);
      sc_lower_kind kd = sc_lower_kind_of(g, n);
      if (kd == SC_LOWER_NONE) {
        if (lw == &sc_lw_none)
          return node_err(f, n, SC_ERR_UNSUPPORTED, "op %s should have been folded",
                          sc_op_name(n->op));
        return node_err(f, n, SC_ERR_UNSUPPORTED, "op %s has no lowering yet",
                        sc_op_name(n->op));
      }
      if (kd == SC_LOWER_KERNEL || kd == SC_LOWER_STEP) {
        if (f->anchor[k] >= 0)
          return node_err(f, n, SC_ERR_INVALID,
                          "fusion group holds two kernel ops ('%s' and this one)",
                          g->nodes[f->anchor[k]].name);
        f->anchor[k] = f->gmem[j];
      }
    }
    int32_t a = f->anchor[k];
    if (a >= 0 && sc_lower_kind_of(g, &g->nodes[a]) == SC_LOWER_STEP) {
      const sc_node *an = &g->nodes[a];
      for (int32_t i = 0; i < an->n_inputs; i++) {
        int32_t v = an->inputs[i];
        int32_t pn = v >= 0 ? g->values[v].producer : -1;
        bool operand = pn >= 0 && sc_lower_gemm_operand_transpose(g, an, i) == pn;
        if (operand) { /* a fused transposed operand: the GEMM reads its input */
          int32_t src = g->values[g->nodes[pn].inputs[0]].producer;
          operand = src < 0 || f->node_group[src] != k;
        }
        if (pn >= 0 && f->node_group[pn] == k && !operand)
          return node_err(f, an, SC_ERR_INVALID,
                          "a producer of this library call is fused into its group");
      }
    }
  }
  return SC_OK;
}

/* ---- buffers ---- */

static bool crosses_group(fg *f, int32_t v, int32_t grp) {
  for (int32_t u = f->uoff[v]; u < f->uoff[v + 1]; u++) {
    int32_t un = f->users[u];
    if (node_live(&f->g->nodes[un]) && f->node_group[un] != grp) return true;
  }
  return false;
}

static bool has_users(fg *f, int32_t v) {
  for (int32_t u = f->uoff[v]; u < f->uoff[v + 1]; u++)
    if (node_live(&f->g->nodes[f->users[u]])) return true;
  return false;
}

static int32_t group_size(fg *f, int32_t k) { return f->goff[k + 1] - f->goff[k]; }

static sc_status assign_buffers(fg *f, sc_lower_ctx *cx) {
  sc_graph *g = f->g;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    if (v < 0 || (g->values[v].flags & SC_VALUE_DEAD)) continue;
    if (g->values[v].rank < 0)
      return sc_diag_set(f->diag, SC_ERR_INVALID, NULL, NULL,
                         "graph input '%s' has no static shape", g->values[v].name);
    int32_t b = cx->value_buffer[v] >= 0 ? cx->value_buffer[v]
                                         : sc_lower_value_buffer(cx, v, SC_BUF_INPUT, -1);
    if (b < 0 || sc_program_add_input(f->p, b) != SC_OK) return nomem(f);
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!node_live(n)) continue;
    int32_t k = f->node_group[i];
    sc_lower_kind kd = sc_lower_kind_of(g, n);
    bool view_alone = kd == SC_LOWER_VIEW && group_size(f, k) == 1;
    for (int32_t o = 0; o < n->n_outputs; o++) {
      int32_t v = n->outputs[o];
      if (v < 0 || cx->value_buffer[v] >= 0) continue;
      bool gout = f->is_gout[v];
      bool need = gout || crosses_group(f, v, k) ||
                  (kd == SC_LOWER_STEP && has_users(f, v));
      if (!need) continue;
      int32_t b;
      if (gout) {
        b = sc_lower_value_buffer(cx, v, SC_BUF_OUTPUT, -1);
      } else if (view_alone) {
        int32_t src = sc_lower_buffer_of(cx, n->inputs[0]);
        if (src < 0) return f->diag->status != SC_OK ? f->diag->status : nomem(f);
        b = sc_lower_value_buffer(cx, v, SC_BUF_VIEW, src);
      } else {
        b = sc_lower_value_buffer(cx, v, SC_BUF_TEMP, -1);
      }
      if (b < 0) return f->diag->status != SC_OK ? f->diag->status : nomem(f);
    }
  }
  return SC_OK;
}

/* ---- group order ---- */

/* Whether node n is a ReduceSum over every axis of its input but the last
 * (a bias gradient's, sc_gemm.bgrad): *v its input, *o its output. */
static bool bias_grad_sum(sc_graph *g, const sc_node *n, int32_t *v, int32_t *o) {
  if (n->op != SC_OP_REDUCE_SUM || n->n_inputs < 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
      n->outputs[0] < 0)
    return false;
  const sc_value *x = &g->values[n->inputs[0]];
  bool mask[SC_MAX_RANK] = {false}, noop = false, keep = false;
  if (x->rank < 2 || sc_reduce_axes(g, n, mask, &noop, &keep) != SC_OK || noop ||
      mask[x->rank - 1])
    return false;
  for (int32_t i = 0; i + 1 < x->rank; i++)
    if (!mask[i]) return false;
  *v = n->inputs[0];
  *o = n->outputs[0];
  return true;
}

/* The group in order (pos) after t, the latest so far or -1, anchored by a
 * MatMul or Gemm that reads value v, or a view of it (through up to depth
 * view ops: a Reshape of dY to the product's rows), other than group k. */
static int32_t last_product_reader(fg *f, const int32_t *pos, int32_t k, int32_t v, int32_t t,
                                   int depth) {
  sc_graph *g = f->g;
  for (int32_t u = f->uoff[v]; u < f->uoff[v + 1]; u++) {
    int32_t un = f->users[u], h = f->node_group[un];
    const sc_node *n = &g->nodes[un];
    if (h < 0 || h == k || !node_live(n)) continue;
    if (f->anchor[h] == un && (n->op == SC_OP_MATMUL || n->op == SC_OP_GEMM) &&
        (t < 0 || pos[h] > pos[t]))
      t = h;
    else if (depth > 0 && sc_lower_kind_of(g, n) == SC_LOWER_VIEW && n->n_outputs == 1 &&
             n->outputs[0] >= 0)
      t = last_product_reader(f, pos, k, n->outputs[0], t, depth - 1);
  }
  return t;
}

/* Whether group h is a view op alone whose output is a view buffer (the
 * lowering runs nothing for it). */
static bool view_group(fg *f, const sc_lower_ctx *cx, int32_t h) {
  const sc_node *n = &f->g->nodes[f->gmem[f->goff[h]]];
  if (group_size(f, h) != 1 || sc_lower_kind_of(f->g, n) != SC_LOWER_VIEW || n->n_outputs != 1 ||
      n->outputs[0] < 0)
    return false;
  int32_t b = cx->value_buffer[n->outputs[0]];
  return b < 0 || f->p->buffers[b].kind == SC_BUF_VIEW;
}

/* Marks in mv the view groups (view_group) at or before position last
 * that read value o, through views (depth), and returns false if any
 * other group there does. */
static bool readers_after(fg *f, const sc_lower_ctx *cx, const int32_t *pos, int32_t last,
                          int32_t o, bool *mv, int depth) {
  for (int32_t u = f->uoff[o]; u < f->uoff[o + 1]; u++) {
    int32_t un = f->users[u], h = f->node_group[un];
    if (h < 0 || !node_live(&f->g->nodes[un]) || pos[h] > last) continue;
    if (depth <= 0 || !view_group(f, cx, h) ||
        !readers_after(f, cx, pos, last, f->g->nodes[un].outputs[0], mv, depth - 1))
      return false;
    mv[h] = true;
  }
  return true;
}

/* Moves each group that is one bias-gradient ReduceSum of a value dY
 * (bias_grad_sum) to right after the last group in order anchored by a
 * MatMul or Gemm that reads dY or a view of it (the weight gradient's
 * product, dW = Xᵀ·dY), with the views of the sum that come before it,
 * when no other group between them reads the sum: the lowering may then
 * make it that GEMM step's epilogue kernel (take_bias_grad). The order
 * stays topological (the sum's inputs come earlier still, its readers
 * later). */
static void bias_grad_order(fg *f, const sc_lower_ctx *cx, int32_t *order) {
  sc_graph *g = f->g;
  int32_t G = f->n_groups;
  int32_t *pos = sc_calloc((size_t)G + 1, sizeof *pos), *seg = sc_calloc((size_t)G + 1, sizeof *seg);
  bool *mv = sc_calloc((size_t)G + 1, sizeof *mv);
  if (!pos || !seg || !mv) goto done; /* an optimisation only: the order stays as it is */
  for (int32_t i = 0; i < G; i++) pos[order[i]] = i;
  for (int32_t k = 0; k < G; k++) {
    int32_t v, o, t;
    if (group_size(f, k) != 1 || !bias_grad_sum(g, &g->nodes[f->gmem[f->goff[k]]], &v, &o))
      continue;
    t = last_product_reader(f, pos, k, v, -1, 4);
    if (t < 0 || pos[t] < pos[k]) continue;
    int32_t from = pos[k], to = pos[t], n = 0;
    memset(mv, 0, (size_t)G * sizeof *mv);
    if (!readers_after(f, cx, pos, to, o, mv, 4)) continue;
    mv[k] = true;
    for (int32_t i = from; i <= to; i++) /* the others, then the sum and its views */
      if (!mv[order[i]]) seg[n++] = order[i];
    for (int32_t i = from; i <= to; i++)
      if (mv[order[i]]) seg[n++] = order[i];
    memcpy(order + from, seg, (size_t)n * sizeof *order);
    for (int32_t i = from; i <= to; i++) pos[order[i]] = i;
  }
done:
  sc_free(pos);
  sc_free(seg);
  sc_free(mv);
}

static sc_status group_order(fg *f, int32_t *order) {
  sc_graph *g = f->g;
  int32_t G = f->n_groups;
  /* edges producer group -> consumer group, one per (member input) */
  int64_t ne = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (f->node_group[i] >= 0) ne += g->nodes[i].n_inputs;
  int32_t *eoff = sc_calloc((size_t)G + 1, sizeof *eoff);
  int32_t *edst = sc_calloc((size_t)ne + 1, sizeof *edst);
  int32_t *indeg = sc_calloc((size_t)G + 1, sizeof *indeg);
  int32_t *fill = sc_calloc((size_t)G + 1, sizeof *fill);
  sc_status st = SC_OK;
  if (!eoff || !edst || !indeg || !fill) {
    st = nomem(f);
    goto done;
  }
  for (int pass = 0; pass < 2; pass++) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
      int32_t k = f->node_group[i];
      if (k < 0) continue;
      const sc_node *n = &g->nodes[i];
      for (int32_t j = 0; j < n->n_inputs; j++) {
        int32_t v = n->inputs[j];
        int32_t pn = v >= 0 ? g->values[v].producer : -1;
        int32_t h = pn >= 0 ? f->node_group[pn] : -1;
        if (h < 0 || h == k) continue;
        if (pass == 0) {
          eoff[h + 1]++;
          indeg[k]++;
        } else {
          edst[eoff[h] + fill[h]++] = k;
        }
      }
    }
    if (pass == 0)
      for (int32_t k = 0; k < G; k++) eoff[k + 1] += eoff[k];
  }
  /* Kahn, always taking the ready group that comes first in the graph
   * (the smallest id: order of first members), so the graph's own order is
   * kept wherever the groups allow it. (A FIFO would run every group that
   * reads only inputs first — all of a ZeRO-3 step's all-gathers, each
   * gathered parameter then live from the start.) ready is a min-heap. */
  int32_t *ready = fill; /* reused: the edges are built */
  int32_t n_ready = 0, tail = 0;
  for (int32_t k = 0; k < G; k++)
    if (indeg[k] == 0) ready[n_ready++] = k; /* ascending: already a heap */
  while (n_ready > 0) {
    int32_t h = ready[0];
    order[tail++] = h;
    ready[0] = ready[--n_ready];
    for (int32_t i = 0;;) { /* sift down */
      int32_t l = 2 * i + 1, r = l + 1, m = i;
      if (l < n_ready && ready[l] < ready[m]) m = l;
      if (r < n_ready && ready[r] < ready[m]) m = r;
      if (m == i) break;
      int32_t t = ready[i];
      ready[i] = ready[m];
      ready[m] = t;
      i = m;
    }
    for (int32_t e = eoff[h]; e < eoff[h + 1]; e++) {
      if (--indeg[edst[e]] != 0) continue;
      int32_t i = n_ready++; /* sift up */
      ready[i] = edst[e];
      while (i > 0 && ready[(i - 1) / 2] > ready[i]) {
        int32_t q = (i - 1) / 2, t = ready[i];
        ready[i] = ready[q];
        ready[q] = t;
        i = q;
      }
    }
  }
  if (tail != G) {
    int32_t k = 0;
    while (k < G && indeg[k] == 0) k++;
    st = node_err(f, k < G ? &g->nodes[f->gmem[f->goff[k]]] : NULL, SC_ERR_INVALID,
                  "the fusion groups form a cycle (a group both feeds and reads another)");
  }
done:
  sc_free(eoff);
  sc_free(edst);
  sc_free(indeg);
  sc_free(fill);
  return st;
}

/* ---- names ---- */

/* "LayerNormalization" -> "layer_normalization", appended to buf. */
static void append_snake(char *buf, size_t cap, const char *s) {
  size_t len = strlen(buf);
  for (size_t i = 0; s[i] && len + 2 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (isupper(c) && i > 0 && (islower((unsigned char)s[i - 1]) ||
                                (s[i + 1] && islower((unsigned char)s[i + 1]) &&
                                 isupper((unsigned char)s[i - 1]))))
      buf[len++] = '_';
    buf[len++] = isalnum(c) ? (char)tolower(c) : '_';
  }
  buf[len] = 0;
}

static void name_group(fg *f, sc_lower_ctx *cx, int32_t k, sc_lower_group *grp) {
  sc_graph *g = f->g;
  int32_t root = f->gmem[f->goff[k + 1] - 1];
  char name[64];
  snprintf(name, sizeof name, "k%d", (int)root);
  for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
    if (strlen(name) + 2 >= 48) break;
    strcat(name, "_");
    append_snake(name, 48, sc_op_name(g->nodes[f->gmem[j]].op));
  }
  grp->kname = sc_arena_strdup(cx->arena, name);
  size_t olen = 0;
  for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
    const char *nm = g->nodes[f->gmem[j]].name;
    olen += strlen(nm ? nm : "?") + 1;
  }
  char *origin = sc_arena_alloc(cx->arena, olen + 1);
  if (origin) {
    origin[0] = 0;
    for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
      const char *nm = g->nodes[f->gmem[j]].name;
      if (j > f->goff[k]) strcat(origin, ",");
      strcat(origin, nm ? nm : "?");
    }
  }
  grp->origin = origin;
}

/* ---- lowering groups ---- */

static bool same_shape(const sc_value *a, const sc_value *b) {
  if (a->rank != b->rank) return false;
  for (int32_t d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Kernels computing every output (with a buffer) of the given POINT
 * members: one kernel per distinct shape. *n_kernels counts them. */
static sc_status lower_points(fg *f, sc_lower_ctx *cx, const int32_t *mem, int32_t n_mem,
                              int32_t *n_kernels) {
  sc_graph *g = f->g;
  int32_t cap = 0;
  for (int32_t j = 0; j < n_mem; j++) cap += g->nodes[mem[j]].n_outputs;
  int32_t *vals = sc_calloc((size_t)cap + 1, sizeof *vals);
  bool *done = sc_calloc((size_t)cap + 1, sizeof *done);
  sc_status st = SC_OK;
  if (!vals || !done) {
    st = nomem(f);
    goto out;
  }
  int32_t nv = 0;
  for (int32_t j = 0; j < n_mem; j++) {
    const sc_node *n = &g->nodes[mem[j]];
    for (int32_t o = 0; o < n->n_outputs; o++) {
      int32_t v = n->outputs[o];
      if (v >= 0 && cx->value_buffer[v] >= 0 &&
          f->p->buffers[cx->value_buffer[v]].kind != SC_BUF_VIEW)
        vals[nv++] = v;
    }
  }
  *n_kernels = 0;
  for (int32_t i = 0; i < nv && st == SC_OK; i++) {
    if (done[i]) continue;
    const sc_value *shape = &g->values[vals[i]];
    const sc_node *pn = &g->nodes[shape->producer];
    st = sc_lower_begin_kernel(cx, pn, shape->rank, shape->dims, 1);
    if (st != SC_OK) break;
    (*n_kernels)++;
    int32_t idx[SC_MAX_RANK];
    sc_lower_outer_index(cx, idx);
    for (int32_t j = i; j < nv && st == SC_OK; j++) {
      if (done[j] || !same_shape(&g->values[vals[j]], shape)) continue;
      done[j] = true;
      int32_t e = sc_lower_value_at(cx, vals[j], idx);
      st = sc_lower_store_value(cx, vals[j], idx, e);
    }
  }
out:
  sc_free(vals);
  sc_free(done);
  return st;
}

/* A KERNEL anchor's epilogue: the members downstream of it. */
static sc_status setup_epilogue(fg *f, sc_lower_ctx *cx, int32_t k, int32_t a,
                                sc_lower_group *grp, int32_t *down) {
  sc_graph *g = f->g;
  const sc_node *an = &g->nodes[a];
  int32_t nd = 0, fused = -1;
  /* members in ascending order: a member is downstream when one of its
   * inputs comes from the anchor or from a downstream member */
  for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
    int32_t m = f->gmem[j];
    if (m <= a) continue;
    const sc_node *mn = &g->nodes[m];
    bool is_down = false;
    for (int32_t i = 0; i < mn->n_inputs; i++) {
      int32_t v = mn->inputs[i];
      int32_t pn = v >= 0 ? g->values[v].producer : -1;
      if (pn == a) {
        if (fused >= 0 && fused != v)
          return node_err(f, an, SC_ERR_INVALID,
                          "two outputs of this op feed its fused epilogue");
        fused = v;
        is_down = true;
      }
      for (int32_t q = 0; q < nd && !is_down; q++)
        if (pn == down[q]) is_down = true;
    }
    if (is_down) down[nd++] = m;
  }
  if (nd == 0) return SC_OK;
  const sc_value *fv = &g->values[fused];
  int32_t cap = 0;
  for (int32_t q = 0; q < nd; q++) cap += g->nodes[down[q]].n_outputs;
  int32_t *stored = sc_arena_array(cx->arena, (size_t)cap + 1, sizeof *stored);
  if (!stored) return nomem(f);
  int32_t ns = 0;
  for (int32_t q = 0; q < nd; q++) {
    const sc_node *mn = &g->nodes[down[q]];
    if (sc_lower_kind_of(g, mn) != SC_LOWER_POINT || !(sc_ops[mn->op].flags & SC_OPF_ELEMENTWISE))
      return node_err(f, mn, SC_ERR_INVALID,
                      "only elementwise ops can be fused after '%s'", an->name);
    for (int32_t o = 0; o < mn->n_outputs; o++) {
      int32_t v = mn->outputs[o];
      if (v < 0) continue;
      if (!same_shape(&g->values[v], fv))
        return node_err(f, mn, SC_ERR_INVALID,
                        "fused after '%s' but its output shape differs", an->name);
      if (cx->value_buffer[v] >= 0) stored[ns++] = v;
    }
  }
  /* members not downstream must not be needed outside the group */
  for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
    int32_t m = f->gmem[j];
    bool is_down = m == a;
    for (int32_t q = 0; q < nd && !is_down; q++) is_down = down[q] == m;
    if (is_down) continue;
    const sc_node *mn = &g->nodes[m];
    for (int32_t o = 0; o < mn->n_outputs; o++)
      if (mn->outputs[o] >= 0 && cx->value_buffer[mn->outputs[o]] >= 0)
        return node_err(f, mn, SC_ERR_INVALID,
                        "fused as a prologue but its output is needed outside the group");
  }
  grp->anchor = a;
  grp->fused_value = fused;
  grp->stored = stored;
  grp->n_stored = ns;
  return SC_OK;
}

/* ---- a GEMM epilogue that is one activation (sc_gemm.act) ---- */

enum { ACT_PROBES = 96 };

/* ONNX's Gelu with approximate="tanh" (cuBLASLt's GELU epilogue). */
static double gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* Its derivative: ½(1 + th) + ½x(1 − th²)·√(2/π)(1 + 3·0.044715x²). */
static double dgelu_tanh(double x) {
  const double k = 0.7978845608028654, b = 0.044715;
  double th = tanh(k * (x + b * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * b * x * x);
}

/* The value of member output v at x (the GEMM's output value c there) and
 * x2 (value c2's, or -1: none), in double, or NAN when v is not computed by
 * the ops below from c, c2 and one-element constants. val[] caches the
 * members' values (NAN: not yet). A Cast to f32 is exact here (the kernel
 * widens its loads: a low-precision gradient's f32 arithmetic); one to
 * bf16 or f16 rounds, unless it makes v itself (depth 0), which the kernel
 * and cuBLASLt's epilogue both round once when they store it. */
static double act_eval(const sc_graph *g, int32_t c, int32_t c2, int32_t v, double x, double x2,
                       const bool *member, double *val, int depth) {
  if (v == c) return x;
  if (v == c2) return x2;
  const sc_value *vv = &g->values[v];
  if (sc_value_is_const(vv)) return vv->data && sc_value_numel(vv) == 1
                                        ? sc_load_f64(vv->dtype, vv->data, 0) : NAN;
  int32_t pn = vv->producer;
  if (pn < 0 || !member[pn] || depth > 64) return NAN;
  if (!isnan(val[pn])) return val[pn];
  const sc_node *n = &g->nodes[pn];
  double a = n->n_inputs > 0 && n->inputs[0] >= 0
                 ? act_eval(g, c, c2, n->inputs[0], x, x2, member, val, depth + 1) : NAN;
  double b = n->n_inputs > 1 && n->inputs[1] >= 0
                 ? act_eval(g, c, c2, n->inputs[1], x, x2, member, val, depth + 1) : NAN;
  double r = NAN;
  switch (n->op) {
  case SC_OP_IDENTITY: case SC_OP_RESHAPE: case SC_OP_FLATTEN: case SC_OP_SQUEEZE:
  case SC_OP_UNSQUEEZE: r = a; break;
  case SC_OP_ADD: r = a + b; break;
  case SC_OP_SUB: r = a - b; break;
  case SC_OP_MUL: r = a * b; break;
  case SC_OP_DIV: r = a / b; break;
  case SC_OP_POW: r = pow(a, b); break;
  case SC_OP_TANH: r = tanh(a); break;
  case SC_OP_RELU: r = a > 0 ? a : 0; break;
  case SC_OP_CAST: /* a widening is exact; a narrowing rounds, except the stored value's */
    if (vv->dtype == SC_DTYPE_F32 || vv->dtype == SC_DTYPE_F64 ||
        ((vv->dtype == SC_DTYPE_BF16 || vv->dtype == SC_DTYPE_F16) && depth == 0)) {
      r = a;
    } else if (vv->dtype == SC_DTYPE_BF16 || vv->dtype == SC_DTYPE_F16) {
      uint16_t h;
      sc_store_f64(vv->dtype, &h, 0, a);
      r = sc_load_f64(vv->dtype, &h, 0);
    }
    break;
  case SC_OP_GELU: {
    sc_ew_attrs at;
    if (sc_ew_attrs_read((sc_graph *)g, n, &at) == SC_OK && at.gelu_tanh) r = gelu_tanh(a);
    break;
  }
  default: break;
  }
  val[pn] = r;
  return r;
}

/* The activation GEMM step s's epilogue kernel computes (sc_gemm.act), the
 * kernel's members mem[0..nm) over the GEMM's output value c: NONE unless
 * the kernel reads only C and writes only one buffer, of C's dtype, and
 * that buffer's value, computed by the members from c and scalar
 * constants, equals the activation at every probe point in [-12, 12]
 * (ReLU exactly, tanh GELU within 1e-6 of max(1, |x|): erf GELU differs
 * from it by up to 2e-4, so it is not taken for it). *aux: c is also read
 * outside the members or is a graph output (sc_gemm.act_aux): then the
 * tanh GELU only, and not for an FP8 product. A kernel that also reads one
 * more buffer, of C's dtype, holding a value x2 from outside the members
 * of C's numel, may compute DGELU_TANH, C · gelu_tanh'(x2) (probed at C =
 * 1 and -0.625, within 1e-6 of max(1, |value|)), for a GEMM without a bias
 * whose C is contiguous; *in_buf is then that buffer. The members may read
 * C through a whole view of it (a Reshape of the product, as GPT-2's MLP
 * reads it): then C is also kept (*aux) unless that Reshape is the
 * product's only reader. */
static bool is_product(const sc_program *p, int32_t b, int32_t c) {
  return b == c || (b >= 0 && p->buffers[b].kind == SC_BUF_VIEW && p->buffers[b].alias_of == c &&
                    p->buffers[b].bytes == p->buffers[c].bytes);
}

static sc_gemm_act epilogue_act(fg *f, sc_lower_ctx *cx, const sc_step *s, int32_t c,
                                const int32_t *mem, int32_t nm, int32_t *out_buf, bool *aux,
                                int32_t *in_buf) {
  const sc_graph *g = f->g;
  const sc_program *p = f->p;
  const kir_kernel *k = p->kernels[s->kernel];
  const sc_gemm *gm = &s->gemm;
  int32_t w = -1, xb = -1, n_c = 0;
  for (int32_t i = 0; i < k->n_params; i++) {
    int32_t b = k->params[i].buffer;
    if (k->params[i].written) {
      if (w >= 0) return SC_GEMM_ACT_NONE;
      w = i;
    } else if (is_product(p, b, gm->c)) {
      n_c++;
    } else {
      if (xb >= 0) return SC_GEMM_ACT_NONE;
      xb = b;
    }
  }
  if (w < 0 || n_c != 1 || k->n_params != (xb >= 0 ? 3 : 2) ||
      p->buffers[k->params[w].buffer].dtype != p->buffers[gm->c].dtype)
    return SC_GEMM_ACT_NONE;
  if (xb >= 0 && (p->buffers[xb].dtype != p->buffers[gm->c].dtype || gm->bias >= 0 ||
                  gm->fp8 || gm->ldc != gm->n || (gm->batch > 1 && gm->stride_c != gm->m * gm->n)))
    return SC_GEMM_ACT_NONE;
  int32_t ob = k->params[w].buffer, ov = -1, c2 = -1;
  bool *member = sc_calloc((size_t)g->n_nodes + 1, sizeof *member);
  double *val = sc_calloc((size_t)g->n_nodes + 1, sizeof *val);
  sc_gemm_act act = SC_GEMM_ACT_NONE;
  if (!member || !val) goto done;
  for (int32_t j = 0; j < nm; j++) member[mem[j]] = true;
  *aux = f->is_gout[c];
  for (int32_t u = f->uoff[c]; u < f->uoff[c + 1]; u++)
    if (node_live(&g->nodes[f->users[u]]) && !member[f->users[u]]) *aux = true;
  int32_t pv = p->buffers[gm->c].value; /* the product's own value, read through a view */
  if (cx->value_buffer[c] != gm->c) {
    if (pv < 0 || f->is_gout[pv]) *aux = true;
    for (int32_t u = pv >= 0 ? f->uoff[pv] : 0; pv >= 0 && u < f->uoff[pv + 1]; u++)
      if (node_live(&g->nodes[f->users[u]]) && f->users[u] != g->values[c].producer) *aux = true;
  }
  for (int32_t j = 0; j < nm; j++) { /* exactly one member output has a buffer: ob's */
    const sc_node *n = &g->nodes[mem[j]];
    for (int32_t o = 0; o < n->n_outputs; o++) {
      int32_t v = n->outputs[o];
      if (v < 0 || cx->value_buffer[v] < 0) continue;
      if (cx->value_buffer[v] != ob || ov >= 0) goto done;
      ov = v;
    }
  }
  if (ov < 0 || sc_value_numel(&g->values[ov]) != sc_value_numel(&g->values[c])) goto done;
  if (xb >= 0) { /* the outside value the other buffer holds */
    for (int32_t j = 0; j < nm; j++) {
      const sc_node *n = &g->nodes[mem[j]];
      for (int32_t i = 0; i < n->n_inputs; i++) {
        int32_t v = n->inputs[i];
        if (v < 0 || v == c || sc_value_is_const(&g->values[v]) ||
            (g->values[v].producer >= 0 && member[g->values[v].producer]))
          continue;
        if (cx->value_buffer[v] != xb || (c2 >= 0 && c2 != v)) goto done;
        c2 = v;
      }
    }
    if (c2 < 0 || sc_value_numel(&g->values[c2]) != sc_value_numel(&g->values[c])) goto done;
  }
  bool relu = xb < 0, gelu = xb < 0, dgelu = xb >= 0;
  for (int i = 0; i <= ACT_PROBES && (relu || gelu || dgelu); i++) {
    double x = -12.0 + 24.0 * i / ACT_PROBES + (i % 2 ? 1e-3 : 0);
    for (int r = 0; r < (dgelu ? 2 : 1); r++) {
      double cv = r ? -0.625 : 1.0;
      for (int32_t j = 0; j < nm; j++) val[mem[j]] = NAN; /* only members are cached */
      double y = dgelu ? act_eval(g, c, c2, ov, cv, x, member, val, 0)
                       : act_eval(g, c, -1, ov, x, 0, member, val, 0);
      double want = cv * dgelu_tanh(x);
      relu = relu && y == (x > 0 ? x : 0);
      gelu = gelu && fabs(y - gelu_tanh(x)) <= 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
      dgelu = dgelu && fabs(y - want) <= 1e-6 * (fabs(want) > 1 ? fabs(want) : 1);
    }
  }
  act = relu ? SC_GEMM_ACT_RELU : gelu ? SC_GEMM_ACT_GELU_TANH
        : dgelu ? SC_GEMM_ACT_DGELU_TANH : SC_GEMM_ACT_NONE;
  /* C kept: only GELU_AUX keeps it (no epilogue gives back ReLU's input), and
   * not for an FP8 product (whose matmul takes no epilogue) */
  if (*aux && (act != SC_GEMM_ACT_GELU_TANH || s->gemm.fp8)) act = SC_GEMM_ACT_NONE;
  *in_buf = act == SC_GEMM_ACT_DGELU_TANH ? xb : -1;
  *out_buf = ob;
done:
  sc_free(member);
  sc_free(val);
  return act;
}

/* A one-element f32 value that has a buffer (another group's output). */
static bool scale_buffer(const fg *f, const sc_lower_ctx *cx, int32_t v) {
  const sc_value *x = &f->g->values[v];
  return x->dtype == SC_DTYPE_F32 && sc_value_numel(x) == 1 && cx->value_buffer[v] >= 0;
}

/* Takes an FP8 product's descaling into its GEMM step gs (sc_gemm.scaled)
 * when the step's FP8 layout meets cuBLASLt's constraints
 * (sc_gemm_fp8_refusal: a GPU of sm_89 or later runs it as an FP8 matmul
 * with the scale pointers), the only reader of the product c (anchor an's
 * output) is a member Mul(c, Mul(d_a, d_b)) whose value is read only inside
 * the group, and d_a, d_b are one-element f32 values of other groups
 * (passes/fp8.c's 1/s_a · 1/s_b, in the product's operand order): the step
 * multiplies by *d_a · *d_b and the members read c where they read the Mul
 * (grp's alias). The factor is rounded once and the product multiplied
 * once, as the Mul computed it, so the numbers do not change. */
static void take_descale(fg *f, sc_lower_ctx *cx, const sc_node *an, sc_step *gs,
                         sc_lower_group *grp) {
  const sc_graph *g = f->g;
  sc_gemm *gm = &gs->gemm;
  if (!gm->fp8 || gm->conv.on || gm->alpha != 1.0f || gm->beta != 0.0f || gm->bias >= 0 ||
      an->n_outputs < 1 || an->outputs[0] < 0)
    return;
  const sc_buffer *bufs = f->p->buffers;
  sc_gemm l = sc_gemm_fp8_layout(gm); /* only a product a GPU runs as an FP8 matmul */
  if (sc_gemm_fp8_refusal(&l, bufs[gm->c].dtype, bufs[gm->a8].dtype, bufs[gm->b8].dtype)) return;
  int32_t c = an->outputs[0], u = -1;
  if (f->is_gout[c] || g->values[c].dtype != SC_DTYPE_F32) return;
  for (int32_t j = f->uoff[c]; j < f->uoff[c + 1]; j++) {
    if (!node_live(&g->nodes[f->users[j]])) continue;
    if (u >= 0 && u != f->users[j]) return;
    u = f->users[j];
  }
  if (u < 0 || f->node_group[u] != cx->group) return;
  const sc_node *un = &g->nodes[u];
  if (un->op != SC_OP_MUL || un->n_inputs != 2 || un->n_outputs != 1 || un->outputs[0] < 0)
    return;
  int32_t y = un->outputs[0], d = un->inputs[0] == c ? un->inputs[1] : un->inputs[0];
  if ((un->inputs[0] == c) == (un->inputs[1] == c) || d < 0 || f->is_gout[y] ||
      cx->value_buffer[y] >= 0 || g->values[y].dtype != SC_DTYPE_F32 ||
      sc_value_numel(&g->values[d]) != 1)
    return;
  int32_t pd = g->values[d].producer;
  if (pd < 0 || f->node_group[pd] != cx->group) return;
  const sc_node *dn = &g->nodes[pd];
  if (dn->op != SC_OP_MUL || dn->n_inputs != 2 || dn->inputs[0] < 0 || dn->inputs[1] < 0 ||
      !scale_buffer(f, cx, dn->inputs[0]) || !scale_buffer(f, cx, dn->inputs[1]))
    return;
  gm->scaled = true;
  gm->a8_scale = cx->value_buffer[dn->inputs[0]];
  gm->b8_scale = cx->value_buffer[dn->inputs[1]];
  grp->alias_value = y;
  grp->alias_of = c;
}

/* A group of its own whose one kernel (step ks) reads only the product of
 * the GEMM step right before it and computes one activation of it (as
 * epilogue_act finds): the grouping keeps such a group apart when the
 * product is read elsewhere too (training: the backward pass reads the
 * pre-activation), so the kernel becomes that GEMM step's epilogue kernel,
 * with sc_gemm.act and act_aux, and a device may apply the activation in
 * the product (cuBLASLt's GELU_AUX). The tanh GELU only: no epilogue keeps
 * a ReLU's input (RELU_AUX keeps a bit mask). Any other kernel stays a
 * step. */
static void take_activation(fg *f, sc_lower_ctx *cx, const int32_t *mem, int32_t nm,
                            int32_t ks) {
  sc_program *p = f->p;
  if (ks < 1 || p->steps[ks].kind != SC_STEP_KERNEL) return;
  sc_step *gs = &p->steps[ks - 1];
  if (gs->kind != SC_STEP_GEMM || gs->kernel >= 0 || gs->gemm.conv.on || gs->gemm.fp8) return;
  int32_t c = -1; /* the one value from outside the group the members read */
  for (int32_t j = 0; j < nm; j++) {
    const sc_node *n = &f->g->nodes[mem[j]];
    for (int32_t i = 0; i < n->n_inputs; i++) {
      int32_t v = n->inputs[i];
      if (v < 0 || sc_value_is_const(&f->g->values[v])) continue;
      int32_t pn = f->g->values[v].producer;
      if (pn >= 0 && f->node_group[pn] == cx->group) continue;
      if (c >= 0 && c != v) return;
      c = v;
    }
  }
  if (c < 0 || !is_product(p, cx->value_buffer[c], gs->gemm.c)) return;
  int32_t out = -1, in = -1;
  bool aux = false;
  gs->kernel = p->steps[ks].kernel; /* what epilogue_act reads */
  sc_gemm_act act = epilogue_act(f, cx, gs, c, mem, nm, &out, &aux, &in);
  if (act != SC_GEMM_ACT_GELU_TANH) {
    gs->kernel = -1;
    return;
  }
  gs->gemm.act = act;
  gs->gemm.act_out = out;
  gs->gemm.act_aux = aux;
  p->n_steps--;
}

/* A group of its own whose one kernel (step ks) is one ReduceSum, over
 * every axis but the last, of the output gradient dY that is an operand of
 * the GEMM step right before it, dW = Xᵀ·dY (B, not transposed, read as
 * [k, n]) or dWᵀ = dYᵀ·X (A, transposed, read as [k, m]): the kernel
 * becomes that step's bias-gradient kernel (sc_gemm.bgrad, bgrad_kernel),
 * beside the step's own epilogue kernel if it has one (a bf16 step's cast
 * of dW to f32), and a device may compute the bias gradient in the product
 * (cuBLASLt's BGRADA or BGRADB). Only where the step has no activation,
 * bias, batch, FP8 operands or convolution, alpha 1 and beta 0, its own
 * epilogue kernel (run after the sum) neither writes dY nor touches the
 * sum, and the sum, dY and C have one dtype. Any other kernel stays a
 * step. */
static void take_bias_grad(fg *f, sc_lower_ctx *cx, const int32_t *mem, int32_t nm,
                           int32_t ks) {
  sc_program *p = f->p;
  sc_graph *g = f->g;
  if (ks < 1 || nm != 1 || p->steps[ks].kind != SC_STEP_KERNEL) return;
  sc_step *gs = &p->steps[ks - 1];
  sc_gemm *gm = &gs->gemm;
  if (gs->kind != SC_STEP_GEMM || gm->bgrad != SC_GEMM_BGRAD_NONE || gm->conv.on || gm->fp8 ||
      gm->act != SC_GEMM_ACT_NONE || gm->bias >= 0 || gm->batch != 1 || gm->alpha != 1.0f ||
      gm->beta != 0.0f)
    return;
  int32_t v, o;
  if (!bias_grad_sum(g, &g->nodes[mem[0]], &v, &o)) return;
  const sc_value *dy = &g->values[v];
  int32_t vb = cx->value_buffer[v], ob = cx->value_buffer[o];
  const kir_kernel *kk = p->kernels[p->steps[ks].kernel];
  if (vb < 0 || ob < 0 || kk->n_params != 2) return;
  for (int32_t i = 0; i < kk->n_params; i++)
    if (kk->params[i].buffer != (kk->params[i].written ? ob : vb)) return;
  if (gs->kernel >= 0) { /* the step's own epilogue kernel runs after the sum */
    const kir_kernel *ek = p->kernels[gs->kernel];
    int32_t vr = sc_program_root(p, vb), orr = sc_program_root(p, ob);
    for (int32_t i = 0; i < ek->n_params; i++) {
      int32_t r = sc_program_root(p, ek->params[i].buffer);
      if (r == orr || (ek->params[i].written && r == vr)) return;
    }
  }
  sc_dtype t = p->buffers[gm->c].dtype;
  if (p->buffers[vb].dtype != t || p->buffers[ob].dtype != t || g->values[o].dtype != t) return;
  /* which operand dY is, read as [k, len] row-major */
  sc_gemm_bgrad side = SC_GEMM_BGRAD_NONE;
  int64_t len = dy->dims[dy->rank - 1];
  if (!gm->trans_b && gm->ldb == gm->n && len == gm->n && sc_program_same_address(p, vb, gm->b))
    side = SC_GEMM_BGRAD_B;
  else if (gm->trans_a && gm->lda == gm->m && len == gm->m &&
           sc_program_same_address(p, vb, gm->a))
    side = SC_GEMM_BGRAD_A;
  if (side == SC_GEMM_BGRAD_NONE || sc_value_numel(dy) != gm->k * len ||
      sc_value_numel(&g->values[o]) != len)
    return;
  gm->bgrad_kernel = p->steps[ks].kernel;
  gm->bgrad = side;
  gm->bgrad_out = ob;
  p->n_steps--;
}

static sc_status lower_group(fg *f, sc_lower_ctx *cx, int32_t k) {
  sc_graph *g = f->g;
  sc_lower_group grp;
  memset(&grp, 0, sizeof grp);
  grp.anchor = -1;
  grp.fused_value = -1;
  grp.sub_value = -1;
  grp.alias_value = grp.alias_of = -1;
  name_group(f, cx, k, &grp);
  if (!grp.kname) return nomem(f);
  cx->grp = &grp;
  cx->group = k;
  cx->k = NULL;
  const int32_t *mem = f->gmem + f->goff[k];
  int32_t n_mem = group_size(f, k);
  int32_t a = f->anchor[k];
  sc_status st = SC_OK;
  int32_t nk = 0;
  if (a < 0) {
    int32_t first_step = f->p->n_steps;
    st = lower_points(f, cx, mem, n_mem, &nk);
    if (st == SC_OK && nk == 1 && f->p->n_steps == first_step + 1)
      take_activation(f, cx, mem, n_mem, first_step);
    if (st == SC_OK && nk == 1 && f->p->n_steps == first_step + 1)
      take_bias_grad(f, cx, mem, n_mem, first_step);
  } else if (sc_lower_kind_of(g, &g->nodes[a]) == SC_LOWER_STEP) {
    const sc_node *an = &g->nodes[a];
    int32_t gemm_step = f->p->n_steps;
    st = sc_lowering_of(an->op)->build(cx, an);
    cx->k = NULL;
    sc_program *p = f->p;
    if (st == SC_OK && p->n_steps > gemm_step && p->steps[p->n_steps - 1].kind == SC_STEP_GEMM)
      take_descale(f, cx, an, &p->steps[p->n_steps - 1], &grp);
    if (st == SC_OK && n_mem > 1) {
      int32_t *rest = sc_calloc((size_t)n_mem, sizeof *rest);
      if (!rest) return nomem(f);
      int32_t nr = 0;
      for (int32_t j = 0; j < n_mem; j++) /* the GEMM reads its fused operand transposes */
        if (mem[j] != a && sc_lower_gemm_operand_transpose(g, an, 0) != mem[j] &&
            sc_lower_gemm_operand_transpose(g, an, 1) != mem[j])
          rest[nr++] = mem[j];
      int32_t first_step = f->p->n_steps;
      st = lower_points(f, cx, rest, nr, &nk);
      /* one epilogue kernel right after a GEMM step: attach it there */
      if (st == SC_OK && nk == 1 && first_step >= 1 && p->n_steps == first_step + 1 &&
          p->steps[first_step - 1].kind == SC_STEP_GEMM && p->steps[first_step - 1].kernel < 0) {
        sc_step *gs = &p->steps[first_step - 1];
        gs->kernel = p->steps[first_step].kernel;
        p->n_steps--;
        int32_t c = an->n_outputs > 0 ? an->outputs[0] : -1;
        if (c >= 0 && !gs->gemm.conv.on)
          gs->gemm.act = epilogue_act(f, cx, gs, c, rest, nr, &gs->gemm.act_out,
                                      &gs->gemm.act_aux, &gs->gemm.act_in);
      }
      sc_free(rest);
    }
  } else {
    const sc_node *an = &g->nodes[a];
    int32_t *down = sc_calloc((size_t)n_mem + 1, sizeof *down);
    if (!down) return nomem(f);
    st = setup_epilogue(f, cx, k, a, &grp, down);
    sc_free(down);
    int32_t first_step = f->p->n_steps;
    if (st == SC_OK) st = sc_lowering_of(an->op)->build(cx, an);
    if (st == SC_OK && grp.anchor >= 0 && grp.n_stored > 0 && grp.n_epilogue_stores == 0)
      st = node_err(f, an, SC_ERR_INVALID,
                    "the lowering never stored the output its fused epilogue reads");
    if (st == SC_OK && f->p->n_steps == first_step + 1)
      take_bias_grad(f, cx, mem, n_mem, first_step);
  }
  if (st != SC_OK && f->diag->status == SC_OK)
    st = node_err(f, &g->nodes[mem[n_mem - 1]], st, "lowering failed");
  cx->grp = NULL;
  cx->k = NULL;
  return st;
}

/* One index check (see the header): indices value v against [-dim, dim)
 * for the Gather named origin. */
static sc_status check_indices(fg *f, sc_lower_ctx *cx, int32_t v, int64_t dim,
                               const char *origin) {
  const sc_value *iv = &f->g->values[v];
  if (!sc_dtype_is_int(iv->dtype)) return SC_OK; /* shape inference refused it */
  if (sc_value_is_const(iv)) { /* known now: checked now */
    if (!iv->data) return SC_OK;     /* no weights loaded: nothing to check */
    int64_t n = sc_value_numel(iv);
    for (int64_t i = 0; i < n; i++) {
      bool ok;
      long long shown;
      if (iv->dtype == SC_DTYPE_U64) {
        uint64_t u = ((const uint64_t *)iv->data)[i];
        ok = u < (uint64_t)dim;
        shown = (long long)(u > (uint64_t)INT64_MAX ? INT64_MAX : u);
      } else {
        int64_t x = sc_load_i64(iv->dtype, iv->data, i);
        ok = x >= -dim && x < dim;
        shown = (long long)x;
      }
      if (!ok)
        return sc_diag_set(f->diag, SC_ERR_INVALID, origin, "Gather",
                           "index %lld out of range [%lld, %lld) in '%s'", shown,
                           -(long long)dim, (long long)dim, iv->name);
    }
    return SC_OK;
  }
  int32_t b = cx->value_buffer[v];
  if (b < 0) return SC_OK; /* computed inside the group: clamped by the kernel */
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_CHECK;
  s.kernel = -1;
  s.check.buffer = b;
  s.check.dim = dim;
  s.origin = sc_arena_strdup(&f->p->arena, origin ? origin : "");
  if (!s.origin || sc_program_add_step(f->p, &s) < 0) return nomem(f);
  return SC_OK;
}

/* The CHECK steps that go before group k. */
static sc_status group_checks(fg *f, sc_lower_ctx *cx, int32_t k) {
  sc_graph *g = f->g;
  for (int32_t j = f->goff[k]; j < f->goff[k + 1]; j++) {
    const sc_node *n = &g->nodes[f->gmem[j]];
    sc_status st = SC_OK;
    const sc_attr *ck = sc_node_attr(n, "__check_indices");
    if (ck && ck->kind == SC_ATTR_INT && n->n_inputs >= 1 && n->inputs[0] >= 0) {
      const sc_attr *o = sc_node_attr(n, "__check_origin");
      st = check_indices(f, cx, n->inputs[0], ck->i,
                         o && o->kind == SC_ATTR_STRING ? o->s : n->name);
    }
    if (st == SC_OK && n->op == SC_OP_GATHER && n->n_inputs == 2 && n->inputs[0] >= 0 &&
        n->inputs[1] >= 0) {
      const sc_value *x = &g->values[n->inputs[0]];
      int64_t axis = sc_attr_int(g, n, "axis", 0);
      if (axis < 0) axis += x->rank;
      if (axis < 0 || axis >= x->rank) continue; /* shape inference refused it */
      const sc_attr *voc = sc_node_attr(n, "__vocab");
      int64_t dim = voc && voc->kind == SC_ATTR_INT ? voc->i : x->dims[axis];
      st = check_indices(f, cx, n->inputs[1], dim, n->name);
    }
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

/* Copies a graph output that is an input or constant into its own OUTPUT
 * buffer. */
typedef struct copy_ud {
  int32_t value;
} copy_ud;

static int32_t copy_value(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  return sc_lower_value_at(cx, ((copy_ud *)ud)->value, idx);
}

static sc_status output_copy(fg *f, sc_lower_ctx *cx, int32_t v, int32_t *out_buf) {
  const sc_value *val = &f->g->values[v];
  sc_lower_group grp;
  memset(&grp, 0, sizeof grp);
  grp.anchor = -1;
  grp.fused_value = -1;
  grp.sub_value = -1;
  grp.alias_value = grp.alias_of = -1;
  char name[64] = "copy_";
  append_snake(name, 40, val->name ? val->name : "out");
  grp.kname = sc_arena_strdup(cx->arena, name);
  grp.origin = val->name;
  cx->grp = &grp;
  cx->group = -1;
  int32_t src = cx->value_buffer[v];
  int32_t id = sc_lower_value_buffer(cx, v, SC_BUF_OUTPUT, -1);
  cx->value_buffer[v] = src; /* the copy reads the source */
  if (id < 0) return f->diag->status;
  if (!grp.kname) return nomem(f);
  copy_ud ud = {v};
  sc_status st = sc_lower_pointwise_kernel(cx, NULL, id, copy_value, &ud);
  cx->value_buffer[v] = src; /* readers keep using the source */
  cx->grp = NULL;
  *out_buf = id;
  return st;
}

sc_status sc_program_from_graph(sc_graph *g, sc_program **out, sc_diag *diag) {
  *out = NULL;
  fg f;
  memset(&f, 0, sizeof f);
  f.g = g;
  f.diag = diag;
  sc_lower_ctx cx;
  memset(&cx, 0, sizeof cx);
  sc_program *p = sc_program_create();
  int32_t *order = NULL;
  sc_status st = SC_OK;
  if (!p) return nomem(&f);
  f.p = p;
  f.node_group = sc_calloc((size_t)g->n_nodes + 1, sizeof *f.node_group);
  f.is_gout = sc_calloc((size_t)g->n_values + 1, sizeof *f.is_gout);
  cx.value_buffer = sc_calloc((size_t)g->n_values + 1, sizeof *cx.value_buffer);
  if (!f.node_group || !f.is_gout || !cx.value_buffer) {
    st = nomem(&f);
    goto done;
  }
  for (int32_t v = 0; v < g->n_values; v++) cx.value_buffer[v] = -1;
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] >= 0) f.is_gout[g->outputs[i]] = true;
  cx.g = g;
  cx.p = p;
  cx.arena = &p->arena;
  cx.node_group = f.node_group;
  cx.group = -1;
  cx.diag = diag;
  if ((st = check_values(&f)) != SC_OK) goto done;
  if ((st = assign_groups(&f)) != SC_OK) goto done;
  if ((st = sc_graph_users(g, &f.uoff, &f.users)) != SC_OK) {
    st = nomem(&f);
    goto done;
  }
  if ((st = assign_buffers(&f, &cx)) != SC_OK) goto done;
  order = sc_calloc((size_t)f.n_groups + 1, sizeof *order);
  if (!order) {
    st = nomem(&f);
    goto done;
  }
  if ((st = group_order(&f, order)) != SC_OK) goto done;
  bias_grad_order(&f, &cx, order);
  for (int32_t i = 0; i < f.n_groups && st == SC_OK; i++) {
    int32_t k = order[i];
    const sc_node *first = &g->nodes[f.gmem[f.goff[k]]];
    /* a VIEW alone whose output aliases its input: nothing to run */
    if (group_size(&f, k) == 1 && sc_lower_kind_of(g, first) == SC_LOWER_VIEW) {
      int32_t v = first->outputs[0];
      if (v < 0 || cx.value_buffer[v] < 0 ||
          p->buffers[cx.value_buffer[v]].kind == SC_BUF_VIEW)
        continue;
    }
    st = group_checks(&f, &cx, k);
    if (st == SC_OK) st = lower_group(&f, &cx, k);
  }
  for (int32_t i = 0; i < g->n_outputs && st == SC_OK; i++) {
    int32_t v = g->outputs[i];
    if (v < 0) continue;
    int32_t b = cx.value_buffer[v];
    if (g->values[v].producer < 0 || b < 0) {
      if (b < 0 && sc_value_is_const(&g->values[v])) b = sc_lower_buffer_of(&cx, v);
      if (b < 0) {
        st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "graph output '%s' is never computed", g->values[v].name);
        break;
      }
      if ((st = output_copy(&f, &cx, v, &b)) != SC_OK) break;
    }
    if (sc_program_add_output(p, b) != SC_OK) st = nomem(&f);
  }
  for (int32_t i = 0; i < p->n_kernels && st == SC_OK; i++)
    st = kir_verify(p->kernels[i], diag);
done:
  sc_free(order);
  sc_free(f.node_group);
  sc_free(f.is_gout);
  sc_free(f.goff);
  sc_free(f.gmem);
  sc_free(f.anchor);
  sc_free(f.uoff);
  sc_free(f.users);
  sc_free(cx.value_buffer);
  sc_lower_ctx_release(&cx);
  if (st != SC_OK) {
    sc_program_destroy(p);
    return st;
  }
  *out = p;
  return SC_OK;
}
