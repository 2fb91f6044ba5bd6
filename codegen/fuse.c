/* fuse.c — the fusion pass: assigns every node a fusion group, written as
 * the internal integer attribute `__group` (so --print-after=fuse shows the
 * groups in the textual IR, and the parser reads them back).
 * sc_program_from_graph (codegen/from_graph.c) lowers each group to one
 * kernel, or one library step with its epilogue kernel.
 *
 * Fusion needs each op's lowering kind (POINT, KERNEL, STEP, VIEW, NONE:
 * codegen/lower.h), the one place that says how an op becomes code; this is
 * the only pass that looks into codegen/.
 *
 * Nodes are visited in reverse topological order; a node either joins the
 * group of its consumers or starts a group of its own (its root). It joins
 * when none of its outputs is a graph output, it has consumers, and all of
 * them are in one group G, and:
 *   POINT   G is not a lone view and the node does not feed G's library call
 *           (a STEP reads buffers): chains of elementwise/broadcast ops
 *           become one group; producers of a reduction or row kernel inline
 *           as its prologue. The one exception: a Transpose that G's MatMul
 *           reads as a transposed operand (sc_lower_gemm_operand_transpose)
 *           joins, and the GEMM step takes it as trans_a / trans_b (its own
 *           producers then feed the library call, and stay out). A node
 *           that reads a Conv's output (its only use, same shape) does not
 *           join a group anchored by a kernel op: it stays for the Conv's
 *           epilogue (conv_epilogue: ResNet's ReLU before its max-pool).
 *           A node whose output is an FP8 value widened for a MatMul or
 *           Gemm (fp8_operand: an FP8 training step's quantized gradient)
 *           does not join: the FP8 value stays stored, one byte an element,
 *           for a device that multiplies FP8 values (sc_gemm.fp8);
 *   VIEW    as POINT, and only inside a POINT chain (its input comes from a
 *           POINT node, or a STEP one: the reshape between a GEMM and its
 *           activation, GPT-2's Conv1D): there the view becomes index
 *           arithmetic; anywhere else it stays alone and costs nothing (an
 *           aliased buffer);
 *   KERNEL, STEP   G has no kernel op yet, exactly one output of the node is
 *           used, and every member of G downstream of the node is an
 *           elementwise POINT op (or, after a STEP, a view: views reshape,
 *           keeping the elements' order) whose outputs have as many elements
 *           as that output: they become the reduction's epilogue, or the
 *           GEMM's (bias add, activation).
 * Because a node joins only when ALL its consumers are in the group, every
 * member but the root has all its users inside the group, so groups are
 * convex and the group graph stays acyclic.
 *
 * Then POINT groups merge into multi-output groups (merge_points): a POINT
 * group X merges into a POINT group Y that reads it when neither has an
 * anchor or is alone, every member value needed outside the two has the
 * shape of Y's root (so the merged group is one kernel, one pass over the
 * data; values used only inside may differ), Y reads X's values only
 * through elementwise members of that shape (no view or broadcast that
 * would compute X's value at other points), and no path leads from X to Y
 * through a third group (merging would make a cycle). This is what makes an
 * optimizer's update of one parameter one kernel: the new moments are read
 * by their own state outputs and by the weight's update, so the first pass
 * leaves each in a group of its own. A group does not merge into one that
 * reads an FP8 value of it (narrow float, reads_pointwise): the FP8
 * value is stored, one byte an element, and its reader widens it where it
 * runs, so an FP8 step's saved operands stay FP8 until the backward.
 *
 * Group ids are renumbered densely in order of each group's first node. */
#include <string.h>

#include "codegen/compile.h"
#include "codegen/lower.h"
#include "passes/pass.h"

typedef struct ginfo {
  int32_t anchor;    /* KERNEL/STEP member, or -1 */
  bool alone;        /* root is a VIEW or has no lowering: accepts no one */
} ginfo;


static bool live(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }

static bool same_shape(const sc_value *a, const sc_value *b) {
  if (a->rank != b->rank) return false;
  for (int32_t d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Whether value v (users[uoff[v] .. uoff[v+1])) reads as a narrow float
 * (FP8) value that a Cast widens to f32 for a MatMul or Gemm (through
 * Reshapes): such a value stays stored, so that a device with FP8 products
 * can read it in place of the widening (sc_gemm.fp8). */
static bool fp8_operand(const sc_graph *g, int32_t v, const int32_t *uoff, const int32_t *users) {
  if (!sc_dtype_is_narrow(g->values[v].dtype) || !sc_dtype_is_float(g->values[v].dtype))
    return false;
  for (int32_t u = uoff[v]; u < uoff[v + 1]; u++) {
    const sc_node *c = &g->nodes[users[u]];
    if (!live(c) || c->op != SC_OP_CAST || c->n_outputs < 1 || c->outputs[0] < 0 ||
        g->values[c->outputs[0]].dtype != SC_DTYPE_F32)
      continue;
    int32_t w = c->outputs[0];
    for (int32_t r = uoff[w]; r < uoff[w + 1]; r++) {
      const sc_node *x = &g->nodes[users[r]];
      while (live(x) && x->op == SC_OP_RESHAPE && x->n_outputs > 0 && x->outputs[0] >= 0 &&
             uoff[x->outputs[0] + 1] - uoff[x->outputs[0]] == 1)
        x = &g->nodes[users[uoff[x->outputs[0]]]];
      if (live(x) && (x->op == SC_OP_MATMUL || x->op == SC_OP_GEMM)) return true;
    }
  }
  return false;
}

/* Whether node i feeds the STEP anchor of group k: directly, or through a
 * transposed operand in k (gemm_operand below), whose input the GEMM reads
 * from a buffer too. */
static bool feeds_step(sc_graph *g, const ginfo *gi, const int32_t *group, int32_t k,
                       int32_t i) {
  int32_t a = gi[k].anchor;
  if (a < 0 || sc_lower_kind_of(g, &g->nodes[a]) != SC_LOWER_STEP) return false;
  const sc_node *an = &g->nodes[a];
  for (int32_t j = 0; j < an->n_inputs; j++) {
    int32_t v = an->inputs[j];
    if (v >= 0 && g->values[v].producer == i) return true;
    int32_t t = j < 2 ? sc_lower_gemm_operand_transpose(g, an, j) : -1;
    if (t >= 0 && group[t] == k && g->values[g->nodes[t].inputs[0]].producer == i) return true;
  }
  return false;
}

/* Whether POINT node i, bound for group k whose anchor is a kernel op (a
 * max-pool, a reduction), is better left to a convolution that only it
 * reads, as that Conv's epilogue: an input of i of i's own shape is the
 * Conv's output, used by i alone and not a graph output. A convolution's epilogue runs on each
 * tile as the tile ends (the CPU device's direct convolutions), and the
 * kernel op then reads a buffer, not an expression (so a max-pool can run
 * as a library pooling: docs/runtime.md#max-pools). */
static bool conv_epilogue(sc_graph *g, const ginfo *gi, int32_t k, int32_t i,
                          const int32_t *uoff, const int32_t *users, const bool *gout) {
  int32_t a = gi[k].anchor;
  const sc_node *n = &g->nodes[i];
  if (a < 0 || sc_lower_kind_of(g, &g->nodes[a]) != SC_LOWER_KERNEL || n->n_outputs < 1 ||
      n->outputs[0] < 0)
    return false;
  for (int32_t j = 0; j < n->n_inputs; j++) {
    int32_t v = n->inputs[j];
    int32_t pn = v >= 0 ? g->values[v].producer : -1;
    if (pn < 0 || g->nodes[pn].op != SC_OP_CONV || !live(&g->nodes[pn]) || gout[v] ||
        !same_shape(&g->values[v], &g->values[n->outputs[0]]))
      continue;
    int32_t uses = 0;
    for (int32_t u = uoff[v]; u < uoff[v + 1]; u++) uses += live(&g->nodes[users[u]]);
    if (uses == 1) return true;
  }
  return false;
}

/* Whether node i is a Transpose that group k's STEP anchor (a MatMul) reads
 * as a transposed operand (sc_lower_gemm_operand_transpose) and that has no
 * other live consumer: it joins the group and costs nothing. */
static bool gemm_operand(sc_graph *g, const ginfo *gi, int32_t k, int32_t i,
                         const int32_t *uoff, const int32_t *users) {
  int32_t a = gi[k].anchor;
  if (a < 0 || sc_lower_kind_of(g, &g->nodes[a]) != SC_LOWER_STEP) return false;
  const sc_node *an = &g->nodes[a];
  bool reads = false;
  for (int32_t in = 0; in < 2 && in < an->n_inputs; in++)
    reads |= sc_lower_gemm_operand_transpose(g, an, in) == i;
  if (!reads) return false;
  int32_t v = g->nodes[i].outputs[0];
  for (int32_t u = uoff[v]; u < uoff[v + 1]; u++)
    if (users[u] != a && live(&g->nodes[users[u]])) return false;
  return true;
}

/* Whether kernel op i can anchor group k with the members downstream of it
 * as its epilogue. mark is scratch (n_nodes). */
static bool epilogue_ok(sc_graph *g, const int32_t *group, const int32_t *uoff,
                        const int32_t *users, int32_t i, int32_t k, bool *mark) {
  const sc_node *n = &g->nodes[i];
  int32_t fused = -1;
  for (int32_t o = 0; o < n->n_outputs; o++) {
    int32_t v = n->outputs[o];
    if (v < 0) continue;
    bool used = false;
    for (int32_t u = uoff[v]; u < uoff[v + 1]; u++) used |= live(&g->nodes[users[u]]);
    if (!used) continue;
    if (fused >= 0) return false;
    fused = v;
  }
  if (fused < 0) return false;
  const sc_value *fv = &g->values[fused];
  bool step = sc_lower_kind_of(g, n) == SC_LOWER_STEP;
  bool ok = true;
  mark[i] = true;
  for (int32_t j = i + 1; j < g->n_nodes; j++) {
    if (group[j] != k) continue;
    const sc_node *m = &g->nodes[j];
    bool down = false;
    for (int32_t q = 0; q < m->n_inputs && !down; q++) {
      int32_t v = m->inputs[q];
      int32_t pn = v >= 0 ? g->values[v].producer : -1;
      down = pn >= 0 && mark[pn];
    }
    if (!down) continue;
    mark[j] = true;
    sc_lower_kind mk = sc_lower_kind_of(g, m);
    bool view = mk == SC_LOWER_VIEW && step; /* a GEMM's epilogue reads C through it */
    if (!view && (mk != SC_LOWER_POINT || !(sc_ops[m->op].flags & SC_OPF_ELEMENTWISE)))
      ok = false;
    /* a view (a reshape) keeps the elements' order, so members of the
     * fused value's element count are elementwise over its elements,
     * whatever their shape */
    for (int32_t o = 0; o < m->n_outputs && ok; o++)
      if (m->outputs[o] >= 0 && sc_value_numel(&g->values[m->outputs[o]]) != sc_value_numel(fv)) ok = false;
  }
  for (int32_t j = i; j < g->n_nodes; j++) mark[j] = false;
  return ok;
}

static sc_status set_group(sc_graph *g, int32_t i, int64_t id) {
  sc_node *n = &g->nodes[i];
  for (int32_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].name && strcmp(n->attrs[a].name, "__group") == 0) {
      n->attrs[a].kind = SC_ATTR_INT;
      n->attrs[a].i = id;
      return SC_OK;
    }
  sc_attr *a = sc_node_add_attr(g, i, "__group", SC_ATTR_INT);
  if (!a) return g->diag.status != SC_OK ? g->diag.status
                                         : sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  a->i = id;
  return SC_OK;
}

/* ---- multi-output POINT groups (see the header) ---- */

typedef struct merger {
  sc_graph *g;
  const int32_t *uoff, *users; /* value -> live and dead users (CSR) */
  int32_t *group;              /* node -> group (a union-find element) */
  int32_t *parent;             /* union-find over groups */
  int32_t *first, *next;       /* members of each representative: a chain */
  int32_t *lo, *hi;            /* per representative: lowest, highest node */
  int32_t *shape;              /* per group: its root's output (the shape) */
  const bool *gout;            /* per value: a graph output */
  int32_t *seen;               /* per group: BFS stamp */
  int32_t *queue;
  int32_t stamp;
} merger;

static int32_t find(merger *m, int32_t k) {
  while (m->parent[k] != k) k = m->parent[k] = m->parent[m->parent[k]];
  return k;
}

/* Whether every value of x's and y's members that is needed outside the
 * two (a graph output, or read by another group) has the shape of value
 * `shape`: those are the values the merged group's kernel stores, and one
 * shape makes it one kernel. Values used only inside may differ (a scalar
 * inlined into every point). */
static bool exports_one_shape(merger *m, int32_t x, int32_t y, int32_t shape) {
  const sc_value *sv = &m->g->values[shape];
  for (int32_t pass = 0; pass < 2; pass++)
    for (int32_t i = m->first[pass ? y : x]; i >= 0; i = m->next[i]) {
      const sc_node *n = &m->g->nodes[i];
      for (int32_t o = 0; o < n->n_outputs; o++) {
        int32_t v = n->outputs[o];
        if (v < 0 || same_shape(&m->g->values[v], sv)) continue;
        if (m->gout[v]) return false;
        for (int32_t u = m->uoff[v]; u < m->uoff[v + 1]; u++) {
          int32_t un = m->users[u];
          if (!live(&m->g->nodes[un]) || m->group[un] < 0) continue;
          int32_t z = find(m, m->group[un]);
          if (z != x && z != y) return false;
        }
      }
    }
  return true;
}

/* Whether some group other than x and y is reachable from x and reaches y
 * (groups are reached through their members' outputs; a group whose first
 * node comes after y's last cannot feed y and is not followed). */
static bool path_through_third(merger *m, int32_t x, int32_t y) {
  int32_t head = 0, tail = 0;
  m->stamp++;
  m->seen[x] = m->stamp;
  m->queue[tail++] = x;
  while (head < tail) {
    int32_t k = m->queue[head++];
    for (int32_t i = m->first[k]; i >= 0; i = m->next[i]) {
      const sc_node *n = &m->g->nodes[i];
      for (int32_t o = 0; o < n->n_outputs; o++) {
        int32_t v = n->outputs[o];
        for (int32_t u = v < 0 ? 0 : m->uoff[v]; v >= 0 && u < m->uoff[v + 1]; u++) {
          int32_t un = m->users[u];
          if (!live(&m->g->nodes[un]) || m->group[un] < 0) continue;
          int32_t z = find(m, m->group[un]);
          if (z == y) {
            if (k != x) return true;
            continue; /* the direct edge */
          }
          if (m->seen[z] == m->stamp || m->lo[z] > m->hi[y]) continue;
          m->seen[z] = m->stamp;
          m->queue[tail++] = z;
        }
      }
    }
  }
  return false;
}

/* Whether every member of y that reads an output of x is an elementwise
 * POINT op with that output's shape, and no output it reads is of a
 * narrow float type (FP8): such a value stays x's stored output, so that
 * what is kept of it for later readers (an FP8 training step's saved
 * operands) is one byte an element, not the wider value y makes of it. */
static bool reads_pointwise(merger *m, int32_t x, int32_t y) {
  for (int32_t i = m->first[y]; i >= 0; i = m->next[i]) {
    const sc_node *n = &m->g->nodes[i];
    for (int32_t q = 0; q < n->n_inputs; q++) {
      int32_t v = n->inputs[q];
      int32_t pn = v >= 0 ? m->g->values[v].producer : -1;
      if (pn < 0 || m->group[pn] < 0 || find(m, m->group[pn]) != x) continue;
      sc_dtype t = m->g->values[v].dtype;
      if (sc_lower_kind_of(m->g, n) != SC_LOWER_POINT ||
          !(sc_ops[n->op].flags & SC_OPF_ELEMENTWISE) ||
          (sc_dtype_is_narrow(t) && sc_dtype_is_float(t)))
        return false;
      for (int32_t o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0 && !same_shape(&m->g->values[n->outputs[o]], &m->g->values[v]))
          return false;
    }
  }
  return true;
}

static void unite(merger *m, int32_t x, int32_t y) {
  m->parent[x] = y;
  int32_t last = m->first[y];
  while (m->next[last] >= 0) last = m->next[last];
  m->next[last] = m->first[x];
  m->first[x] = -1;
  if (m->lo[x] < m->lo[y]) m->lo[y] = m->lo[x];
  if (m->hi[x] > m->hi[y]) m->hi[y] = m->hi[x];
}

static sc_status merge_points(sc_graph *g, const int32_t *uoff, const int32_t *users,
                              const bool *gout, int32_t *group, const ginfo *gi,
                              int32_t n_groups) {
  int32_t nn = g->n_nodes;
  size_t ng = (size_t)n_groups + 1;
  merger m = {.g = g, .uoff = uoff, .users = users, .group = group, .gout = gout};
  m.parent = sc_calloc(ng, sizeof *m.parent);
  m.first = sc_calloc(ng, sizeof *m.first);
  m.lo = sc_calloc(ng, sizeof *m.lo);
  m.hi = sc_calloc(ng, sizeof *m.hi);
  m.shape = sc_calloc(ng, sizeof *m.shape);
  m.seen = sc_calloc(ng, sizeof *m.seen);
  m.queue = sc_calloc(ng, sizeof *m.queue);
  m.next = sc_calloc((size_t)nn + 1, sizeof *m.next);
  sc_status st = SC_OK;
  if (!m.parent || !m.first || !m.lo || !m.hi || !m.shape || !m.seen || !m.queue || !m.next) {
    st = sc_graph_error(g, SC_ERR_NOMEM, "fuse: out of memory");
    goto done;
  }
  for (int32_t k = 0; k < n_groups; k++) {
    m.parent[k] = k;
    m.first[k] = -1;
    m.lo[k] = INT32_MAX;
    m.hi[k] = -1;
  }
  for (int32_t i = nn - 1; i >= 0; i--) { /* chains in ascending node order */
    m.next[i] = -1;
    int32_t k = group[i];
    if (k < 0) continue;
    m.next[i] = m.first[k];
    m.first[k] = i;
    if (i < m.lo[k]) m.lo[k] = i;
    if (i > m.hi[k]) m.hi[k] = i;
  }
  for (int32_t k = 0; k < n_groups; k++) {
    const sc_node *root = m.hi[k] >= 0 ? &g->nodes[m.hi[k]] : NULL;
    m.shape[k] = root && root->n_outputs > 0 ? root->outputs[0] : -1;
  }
  for (int32_t i = 0; i < nn; i++) {
    const sc_node *n = &g->nodes[i];
    if (group[i] < 0 || sc_lower_kind_of(g, n) != SC_LOWER_POINT) continue;
    for (int32_t q = 0; q < n->n_inputs; q++) {
      int32_t v = n->inputs[q];
      int32_t pn = v >= 0 ? g->values[v].producer : -1;
      if (pn < 0 || group[pn] < 0) continue;
      int32_t y = find(&m, group[i]), x = find(&m, group[pn]);
      if (x == y || gi[x].anchor >= 0 || gi[y].anchor >= 0 || gi[x].alone || gi[y].alone)
        continue;
      int32_t sx = m.shape[x], sy = m.shape[y];
      if (sx < 0 || sy < 0 || !same_shape(&g->values[sx], &g->values[sy]) ||
          !exports_one_shape(&m, x, y, sy) || !reads_pointwise(&m, x, y) ||
          path_through_third(&m, x, y))
        continue;
      unite(&m, x, y);
    }
  }
  for (int32_t i = 0; i < nn; i++)
    if (group[i] >= 0) group[i] = find(&m, group[i]);
done:
  sc_free(m.parent);
  sc_free(m.first);
  sc_free(m.lo);
  sc_free(m.hi);
  sc_free(m.shape);
  sc_free(m.seen);
  sc_free(m.queue);
  sc_free(m.next);
  return st;
}

sc_status sc_pass_fuse(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  int32_t nn = g->n_nodes;
  int32_t *uoff = NULL, *users = NULL;
  int32_t *group = sc_calloc((size_t)nn + 1, sizeof *group);
  int32_t *renum = sc_calloc((size_t)nn + 1, sizeof *renum);
  ginfo *gi = sc_calloc((size_t)nn + 1, sizeof *gi);
  bool *mark = sc_calloc((size_t)nn + 1, sizeof *mark);
  bool *gout = sc_calloc((size_t)g->n_values + 1, sizeof *gout);
  sc_status st = SC_OK;
  if (!group || !renum || !gi || !mark || !gout ||
      sc_graph_users(g, &uoff, &users) != SC_OK) {
    st = sc_graph_error(g, SC_ERR_NOMEM, "fuse: out of memory");
    goto done;
  }
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] >= 0) gout[g->outputs[i]] = true;
  int32_t n_groups = 0;
  for (int32_t i = nn - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    group[i] = -1;
    if (!live(n)) continue;
    sc_lower_kind kd = sc_lower_kind_of(g, n);
    int32_t cg = -1;
    bool any = false, same = true, is_out = false;
    for (int32_t o = 0; o < n->n_outputs; o++) {
      int32_t v = n->outputs[o];
      if (v < 0) continue;
      if (gout[v]) is_out = true;
      for (int32_t u = uoff[v]; u < uoff[v + 1]; u++) {
        int32_t un = users[u];
        if (!live(&g->nodes[un])) continue;
        if (!any) cg = group[un];
        else if (group[un] != cg) same = false;
        any = true;
      }
    }
    bool join = false;
    if (any && same && !is_out && cg >= 0 && !gi[cg].alone) {
      switch (kd) {
      case SC_LOWER_POINT:
        join = ((!feeds_step(g, gi, group, cg, i) &&
                 !conv_epilogue(g, gi, cg, i, uoff, users, gout)) ||
                gemm_operand(g, gi, cg, i, uoff, users)) &&
               !(n->n_outputs == 1 && n->outputs[0] >= 0 &&
                 fp8_operand(g, n->outputs[0], uoff, users));
        break;
      case SC_LOWER_VIEW: {
        int32_t src = n->n_inputs > 0 ? n->inputs[0] : -1;
        int32_t pn = src >= 0 ? g->values[src].producer : -1;
        sc_lower_kind pk = pn >= 0 ? sc_lower_kind_of(g, &g->nodes[pn]) : SC_LOWER_NONE;
        join = (pk == SC_LOWER_POINT || pk == SC_LOWER_STEP) &&
               !feeds_step(g, gi, group, cg, i);
        break;
      }
      case SC_LOWER_KERNEL: case SC_LOWER_STEP:
        join = gi[cg].anchor < 0 && epilogue_ok(g, group, uoff, users, i, cg, mark);
        break;
      default: break;
      }
    }
    if (join) {
      group[i] = cg;
      if (kd == SC_LOWER_KERNEL || kd == SC_LOWER_STEP) gi[cg].anchor = i;
    } else {
      int32_t k = n_groups++;
      group[i] = k;
      gi[k].anchor = (kd == SC_LOWER_KERNEL || kd == SC_LOWER_STEP) ? i : -1;
      gi[k].alone = kd == SC_LOWER_VIEW || kd == SC_LOWER_NONE;
    }
  }
  st = merge_points(g, uoff, users, gout, group, gi, n_groups);
  /* dense ids in order of first member */
  for (int32_t k = 0; k < n_groups; k++) renum[k] = -1;
  int32_t next = 0;
  for (int32_t i = 0; i < nn && st == SC_OK; i++) {
    if (group[i] < 0) continue;
    if (renum[group[i]] < 0) renum[group[i]] = next++;
    st = set_group(g, i, renum[group[i]]);
  }
done:
  sc_free(group);
  sc_free(renum);
  sc_free(gi);
  sc_free(mark);
  sc_free(gout);
  sc_free(uoff);
  sc_free(users);
  return st;
}
