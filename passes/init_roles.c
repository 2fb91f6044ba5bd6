/* init_roles.c — fan-in axes and residual-branch projections of the
 * parameters (init_roles.h). One walk over the forward's products and
 * lookups; the
 * ancestor test walks producers backwards with a visit stamp per value,
 * so each test is linear in the graph. */
#include "passes/init_roles.h"

#include <string.h>

static bool live_forward(const sc_node *n) {
  return !(n->flags & SC_NODE_DEAD) && !(n->name && strstr(n->name, "/grad"));
}

/* The product (MatMul or Gemm of the forward with a 2-D weight B) that
 * makes v: directly, or through reshapes (a linear layer runs as a Gemm
 * over rows flattened and reshaped back) and at most one Add of a bias;
 * -1 when none. */
static int32_t product_of(const sc_graph *g, int32_t v) {
  bool bias = false;
  for (int hop = 0; hop < 8 && v >= 0; hop++) {
    int32_t p = g->values[v].producer;
    if (p < 0) return -1;
    const sc_node *n = &g->nodes[p];
    if (!live_forward(n) || n->n_inputs < 1) return -1;
    if ((n->op == SC_OP_MATMUL || n->op == SC_OP_GEMM) && n->n_inputs >= 2 &&
        n->inputs[1] >= 0 && g->values[n->inputs[1]].rank == 2)
      return p;
    if (n->op == SC_OP_RESHAPE || n->op == SC_OP_SQUEEZE || n->op == SC_OP_UNSQUEEZE ||
        n->op == SC_OP_FLATTEN || n->op == SC_OP_IDENTITY) {
      v = n->inputs[0];
      continue;
    }
    if (n->op != SC_OP_ADD || n->n_inputs != 2 || bias) return -1;
    /* a bias: the operand that no node makes (a weight, or an input) */
    int32_t a = n->inputs[0], b = n->inputs[1];
    if (a < 0 || b < 0) return -1;
    v = g->values[b].producer < 0 ? a : g->values[a].producer < 0 ? b : -1;
    bias = true;
  }
  return -1;
}

/* Whether value `anc` is `v` or one of its ancestors. stamp[] marks the
 * values seen in this test (mark); stack has room for every value. */
static bool is_ancestor(const sc_graph *g, int32_t anc, int32_t v, int32_t *stamp, int32_t mark,
                        int32_t *stack) {
  int32_t top = 0;
  stack[top++] = v;
  stamp[v] = mark;
  while (top > 0) {
    int32_t x = stack[--top];
    if (x == anc) return true;
    int32_t p = g->values[x].producer;
    if (p < 0) continue;
    const sc_node *n = &g->nodes[p];
    for (int32_t i = 0; i < n->n_inputs; i++) {
      int32_t u = n->inputs[i];
      if (u >= 0 && stamp[u] != mark) {
        stamp[u] = mark;
        stack[top++] = u;
      }
    }
  }
  return false;
}

/* The index in names of the weight v is, or is a Cast of (a bf16 step
 * reads its weights cast); -1 when none. */
static int32_t index_of(const sc_graph *g, const char *const *names, int32_t n, int32_t v) {
  int32_t p = g->values[v].producer;
  if (p >= 0 && g->nodes[p].op == SC_OP_CAST && g->nodes[p].n_inputs == 1 &&
      g->nodes[p].inputs[0] >= 0)
    v = g->nodes[p].inputs[0];
  const char *name = g->values[v].name;
  for (int32_t k = 0; name && k < n; k++)
    if (strcmp(names[k], name) == 0) return k;
  return -1;
}

/* The 2-D weight v is the transpose of (a Transpose of a 2-D value, perm
 * absent or [1, 0]); -1 when it is not one. */
static int32_t transposed_of(const sc_graph *g, int32_t v) {
  int32_t p = g->values[v].producer;
  if (p < 0 || g->nodes[p].op != SC_OP_TRANSPOSE || g->nodes[p].n_inputs != 1 ||
      g->nodes[p].inputs[0] < 0 || g->values[g->nodes[p].inputs[0]].rank != 2)
    return -1;
  const int64_t *perm = NULL;
  int64_t np = sc_attr_ints((sc_graph *)g, &g->nodes[p], "perm", &perm);
  if (np >= 0 && !(np == 2 && perm[0] == 1 && perm[1] == 0)) return -1;
  return g->nodes[p].inputs[0];
}

/* Whether node n reads a 2-D weight in PyTorch's [out, in] layout (fan-in
 * on its last axis), and which value: a Gemm's B with transB = 1, a
 * MatMul's (or Gemm's with transB = 0) B that is a Transpose of it (the
 * form context parallelism gives a transB Gemm beside a batch split,
 * passes/partition/cp.c), or the table of a Gather on axis 0 (an
 * embedding, PyTorch's [num, dim], whose fan-in is its last axis). -1
 * when none: each form of a tied weight's readers (the lookup, the LM
 * head as either product) gives the same axis, whatever the mesh made of
 * the head. */
static int32_t fan_in_last_weight(const sc_graph *g, const sc_node *n) {
  if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return -1;
  if (n->op == SC_OP_GATHER)
    return sc_attr_int((sc_graph *)g, n, "axis", 0) == 0 && g->values[n->inputs[0]].rank == 2
               ? n->inputs[0]
               : -1;
  if (n->op != SC_OP_GEMM && n->op != SC_OP_MATMUL) return -1;
  if (n->op == SC_OP_GEMM && sc_attr_int((sc_graph *)g, n, "transB", 0)) return n->inputs[1];
  int32_t c = g->values[n->inputs[1]].producer, w = n->inputs[1];
  if (c >= 0 && g->nodes[c].op == SC_OP_CAST && g->nodes[c].n_inputs == 1 &&
      g->nodes[c].inputs[0] >= 0)
    w = g->nodes[c].inputs[0]; /* a bf16 step's cast of the transpose */
  return transposed_of(g, w);
}

sc_status sc_init_roles_find(const sc_graph *g, const char *const *names, int32_t n,
                             sc_init_roles *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  out->n = n;
  out->fan_in_last = sc_calloc((size_t)n + 1, sizeof *out->fan_in_last);
  out->residual = sc_calloc((size_t)n + 1, sizeof *out->residual);
  int32_t *stamp = sc_calloc((size_t)g->n_values + 1, sizeof *stamp);
  int32_t *stack = sc_calloc((size_t)g->n_values + 1, sizeof *stack);
  if (!out->fan_in_last || !out->residual || !stamp || !stack) {
    sc_free(stamp);
    sc_free(stack);
    sc_init_roles_free(out);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  int32_t mark = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n_ = &g->nodes[i];
    if (!live_forward(n_)) continue;
    int32_t w = fan_in_last_weight(g, n_);
    if (w >= 0) {
      int32_t k = index_of(g, names, n, w);
      if (k >= 0) out->fan_in_last[k] = true;
    }
    if (n_->op != SC_OP_ADD || n_->n_inputs != 2 || n_->inputs[0] < 0 || n_->inputs[1] < 0)
      continue;
    for (int side = 0; side < 2; side++) {
      int32_t p = product_of(g, n_->inputs[side]), other = n_->inputs[1 - side];
      if (p < 0 || g->values[other].producer < 0) continue;
      const sc_node *prod = &g->nodes[p];
      int32_t k = index_of(g, names, n, prod->inputs[1]);
      if (k < 0 || out->residual[k] || prod->inputs[0] < 0) continue;
      if (is_ancestor(g, other, prod->inputs[0], stamp, ++mark, stack)) {
        out->residual[k] = true;
        out->n_residual++;
      }
    }
  }
  sc_free(stamp);
  sc_free(stack);
  return SC_OK;
}

void sc_init_roles_free(sc_init_roles *r) {
  sc_free(r->fan_in_last);
  sc_free(r->residual);
  memset(r, 0, sizeof *r);
}
