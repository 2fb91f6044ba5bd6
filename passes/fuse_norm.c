/* fuse_norm.c — the fuse-norm pass: an RMS norm written out in elementary
 * ops becomes one RMSNormalization node (ir/op_nn.c), whose lowering is one
 * row kernel (codegen/lower_norm.c) and whose gradient is one LayerNormGrad
 * (passes/grad_rules.c), as for a model that wrote the op itself.
 *
 * Exporters of opset < 23 (Hugging Face's Llama, Mistral, T5 and the like,
 * through torch.onnx) write LlamaRMSNorm as
 *
 *   p = Pow(x, 2)              or Mul(x, x)
 *   m = ReduceMean(p)          over the last axis only, keepdims 1
 *   a = Add(m, eps)            eps a scalar constant >= 0 (either operand)
 *   s = Sqrt(a)
 *   r = Reciprocal(s)          or Div(1, s); then n = Mul(x, r) (either order)
 *   n = Div(x, s)              (the other form)
 *   n' = Cast(n)               any number of Casts to n's own dtype (no-ops)
 *   y = Mul(w, n')             w of shape [D] = x.shape[-1:] (either order)
 *
 * and the pass makes it y = RMSNormalization(x, w; axis -1, epsilon eps),
 * in x's dtype (f32, bf16 or f16, every value of the chain in it). Every
 * intermediate value (p .. n') must have exactly one reader and not be a
 * graph output, so nothing else sees the values that disappear. The node
 * that computed y (the Mul by w) becomes the RMSNormalization in place, so
 * the graph stays topologically ordered with no reordering (x and w are
 * read by nodes before it); the others are flagged dead and compacted
 * away. A chain without the final product by a weight is left as it is.
 *
 * Exactness: the fused row kernel computes x · (1/√(mean(x²) + ε)) · w,
 * the same operations as the chain, with the row's sum accumulated in f32
 * in its own order: the results agree to f32 rounding (docs/passes.md). */
#include <math.h>
#include <string.h>

#include "ir/op_util.h"
#include "passes/match.h"
#include "passes/pass.h"

/* The input of binary node n that is not `v` (-1 when both are v or n has
 * not two inputs). */
static int32_t other_input(const sc_node *n, int32_t v) {
  if (n->n_inputs != 2) return -1;
  if (n->inputs[0] == v && n->inputs[1] != v) return n->inputs[1];
  if (n->inputs[1] == v && n->inputs[0] != v) return n->inputs[0];
  return -1;
}

typedef struct chain {
  int32_t nodes[16], n; /* the nodes that go, in order */
  int32_t x, w, y_node;
  double eps;
} chain;

static int32_t out0(const sc_graph *g, int32_t node) { return g->nodes[node].outputs[0]; }

/* Whether ReduceMean node `rm` starts an RMS norm; fills c. */
static bool match(sc_graph *g, const int32_t *off, const int32_t *users, int32_t rm, chain *c) {
  const sc_node *r = &g->nodes[rm];
  int32_t pv = r->inputs[0], pn = pv >= 0 ? g->values[pv].producer : -1;
  if (pn < 0 || (g->nodes[pn].flags & SC_NODE_DEAD)) return false;
  const sc_node *p = &g->nodes[pn];
  int32_t x;
  if (p->op == SC_OP_POW && p->n_inputs == 2 && sc_match_scalar(g, p->inputs[1]) == 2.0)
    x = p->inputs[0];
  else if (p->op == SC_OP_MUL && p->n_inputs == 2 && p->inputs[0] == p->inputs[1])
    x = p->inputs[0];
  else
    return false;
  const sc_value *xv = &g->values[x];
  sc_dtype dt = xv->dtype;
  if (xv->rank < 1 || (dt != SC_DTYPE_F32 && dt != SC_DTYPE_BF16 && dt != SC_DTYPE_F16))
    return false;
  bool mask[SC_MAX_RANK], noop, keep;
  if (sc_reduce_axes(g, r, mask, &noop, &keep) != SC_OK) return false; /* infer-shapes read them */
  for (int32_t i = 0; i < xv->rank; i++)
    if (mask[i] != (i == xv->rank - 1)) return false;
  if (noop || !keep || sc_match_only_reader(g, off, users, pv) != rm) return false;
  c->n = 0;
  c->nodes[c->n++] = pn;
  c->nodes[c->n++] = rm;
  c->x = x;
  /* Add(m, eps) → Sqrt */
  int32_t v = out0(g, rm), a = sc_match_only_reader(g, off, users, v);
  if (a < 0 || g->nodes[a].op != SC_OP_ADD) return false;
  c->eps = sc_match_scalar(g, other_input(&g->nodes[a], v));
  if (!(c->eps >= 0) || !isfinite(c->eps)) return false;
  c->nodes[c->n++] = a;
  v = out0(g, a);
  int32_t s = sc_match_only_reader(g, off, users, v);
  if (s < 0 || g->nodes[s].op != SC_OP_SQRT) return false;
  c->nodes[c->n++] = s;
  v = out0(g, s);
  /* 1/s then x·(1/s), or x/s */
  int32_t d = sc_match_only_reader(g, off, users, v), nn;
  if (d < 0) return false;
  const sc_node *dn = &g->nodes[d];
  if (dn->op == SC_OP_DIV && dn->n_inputs == 2 && dn->inputs[1] == v && dn->inputs[0] == x) {
    nn = d;
  } else {
    bool recip = dn->op == SC_OP_RECIPROCAL ||
                 (dn->op == SC_OP_DIV && dn->n_inputs == 2 && dn->inputs[1] == v &&
                  sc_match_scalar(g, dn->inputs[0]) == 1.0);
    if (!recip) return false;
    c->nodes[c->n++] = d;
    v = out0(g, d);
    nn = sc_match_only_reader(g, off, users, v);
    if (nn < 0 || g->nodes[nn].op != SC_OP_MUL || other_input(&g->nodes[nn], v) != x) return false;
  }
  c->nodes[c->n++] = nn;
  v = out0(g, nn);
  /* Casts to its own dtype, then the product by w */
  for (;;) {
    int32_t u = sc_match_only_reader(g, off, users, v);
    if (u < 0) return false;
    const sc_node *un = &g->nodes[u];
    if (un->op == SC_OP_CAST && g->values[out0(g, u)].dtype == dt && c->n < 15) {
      c->nodes[c->n++] = u;
      v = out0(g, u);
      continue;
    }
    if (un->op != SC_OP_MUL) return false;
    c->w = other_input(un, v);
    c->y_node = u;
    break;
  }
  const sc_value *wv = c->w >= 0 ? &g->values[c->w] : NULL;
  if (!wv || wv->dtype != dt || wv->rank != 1 || wv->dims[0] != xv->dims[xv->rank - 1])
    return false;
  /* every value of the chain in x's dtype and shape (no broadcast) */
  for (int32_t i = 0; i < c->n; i++) {
    const sc_value *o = &g->values[out0(g, c->nodes[i])];
    if (o->dtype != dt) return false;
  }
  const sc_value *y = &g->values[out0(g, c->y_node)];
  return y->dtype == dt && y->rank == xv->rank &&
         memcmp(y->dims, xv->dims, (size_t)xv->rank * sizeof *xv->dims) == 0;
}

/* The product by w becomes the RMSNormalization; the chain goes. */
static sc_status rewrite(sc_graph *g, const chain *c) {
  sc_node *y = &g->nodes[c->y_node];
  y->op = SC_OP_RMS_NORM;
  y->inputs[0] = c->x;
  y->inputs[1] = c->w;
  y->n_attrs = 0;
  /* each set at once: adding an attribute may move the others; the
   * op is opset 23 and the model may be older (SC_ATTR_DERIVED) */
  sc_attr *a = sc_node_add_attr(g, c->y_node, "axis", SC_ATTR_INT);
  if (a) a->i = -1;
  if (a && (a = sc_node_add_attr(g, c->y_node, "epsilon", SC_ATTR_FLOAT))) a->f = c->eps;
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  return sc_match_replace(g, c->y_node, c->nodes, c->n);
}

static bool fuse_at(sc_graph *g, const int32_t *off, const int32_t *users, int32_t node,
                    sc_status *st) {
  chain c;
  if (g->nodes[node].op != SC_OP_REDUCE_MEAN || !match(g, off, users, node, &c)) return false;
  *st = rewrite(g, &c);
  return true;
}

sc_status sc_pass_fuse_norm(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  return sc_match_each(g, fuse_at);
}
