/* fuse_gelu.c — the fuse-gelu pass: a GELU written out in elementary ops
 * becomes one Gelu node (ir/op_elementwise.c), whose gradient reads only
 * its input (passes/grad_rules.c) and which a GPU's product may apply as
 * cuBLASLt's GELU epilogue (codegen/from_graph.c), as for a model that
 * wrote the op itself.
 *
 * Exporters write GPT-2's gelu_new and BERT's erf GELU as
 *
 *   y = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))   approximate "tanh"
 *   y = 0.5 · x · (1 + erf(x / √2))                          approximate "none"
 *
 * in Mul, Div, Pow, Add and Tanh or Erf nodes, in many orders. The pass
 * reads each such chain by what it computes rather than by its spelling:
 * from every Tanh or Erf node it reads products as a coefficient times
 * powers of values (a Mul of two factors, a Div by a scalar constant, a
 * Pow by a constant 2, 3 or 4; a scalar constant, or one cast to the
 * value's dtype by a Cast or CastLike, is a coefficient), so
 * that x³ may be Pow(x, 3) or x·x·x, 0.5 may multiply x, the sum or the
 * product, and any operand order is the same product. Accepted:
 *
 *   tanh's argument  k · (c₁·x + c₃·x³)  with k·c₁ = √(2/π), c₃/c₁ = 0.044715
 *                    (k may be 1: the sum itself, or distributed over it)
 *   erf's argument   c · x               with c = 1/√2
 *   then             a = Add(·, 1), either order, and the first product
 *                    above a that is h · x · a with h = 0.5 (products in
 *                    between read only a, x once and constants)
 *
 * each constant within its dtype's rounding (relative 1e-6 in f32, 1e-3 in
 * f16, 8e-3 in bf16: an export's constants are x's dtype). The result is
 * Gelu(x) with approximate "tanh" or "none", in x's dtype (f32, bf16 or
 * f16); every value of the chain must be in it with x's shape (no
 * broadcast), have exactly one reader and not be a graph output, so
 * nothing else sees the values that disappear. The node that computed y
 * becomes the Gelu in place (x is read by nodes before it: the order
 * stays topological); the others are flagged dead and compacted away.
 *
 * SHARDC_NO_FUSE_GELU=1 in the environment turns the pass off (the
 * chains stay as written: a comparison of the two, docs/passes.md).
 *
 * Exactness: the Gelu kernels evaluate the same formula with the exact
 * constants in f32; the chain's constants, rounded to x's dtype, differ
 * from them within the tolerance above. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/match.h"
#include "passes/pass.h"

enum { MAX_NODES = 32, MAX_VARS = 4, MAX_DEPTH = 16 };

typedef struct chain {
  int32_t nodes[MAX_NODES], n; /* the nodes that go (not the root) */
  int32_t x, root;             /* the GELU's input; the node that becomes it */
  bool tanh;
} chain;

/* coef · Π var[i]^pow[i] */
typedef struct product {
  double coef;
  int32_t var[MAX_VARS], pow[MAX_VARS], n_vars;
} product;

typedef struct matcher {
  const sc_graph *g;
  const int32_t *off, *users;
  int32_t stop; /* a value read as a factor, never looked into (x), or -1 */
  chain *c;
} matcher;

static bool take_node(chain *c, int32_t node) {
  if (c->n >= MAX_NODES) return false;
  c->nodes[c->n++] = node;
  return true;
}

static bool take_var(product *p, int32_t v, int32_t k) {
  for (int32_t i = 0; i < p->n_vars; i++)
    if (p->var[i] == v) {
      p->pow[i] += k;
      return true;
    }
  if (p->n_vars >= MAX_VARS) return false;
  p->var[p->n_vars] = v;
  p->pow[p->n_vars++] = k;
  return true;
}

/* A Pow's exponent: a one-element constant of any numeric dtype, or NAN. */
static double exponent(const sc_graph *g, int32_t v) {
  const sc_value *e = &g->values[v];
  if (!sc_value_has_data(e) || sc_value_numel(e) != 1) return NAN;
  return sc_load_f64(e->dtype, e->data, 0);
}

/* Value v's scalar constant, or NAN: a one-element float constant, or
 * one cast to v's dtype by a Cast or CastLike (the importer's FastGelu
 * writes its constants so). */
static double coefficient(const sc_graph *g, int32_t v) {
  double k = sc_match_scalar(g, v);
  int32_t pn = v >= 0 && isnan(k) ? g->values[v].producer : -1;
  if (pn < 0) return k;
  const sc_node *n = &g->nodes[pn];
  if ((n->flags & SC_NODE_DEAD) || (n->op != SC_OP_CAST && n->op != SC_OP_CAST_LIKE) ||
      !sc_dtype_is_float(g->values[v].dtype))
    return NAN;
  return sc_match_scalar(g, n->inputs[0]);
}

static bool factor(matcher *m, int32_t v, int32_t reader, int depth, product *p);

/* Multiplies p by what node pn (a Mul, a Div by a scalar constant or a Pow
 * by 2, 3 or 4) computes, pn joining the chain; false for another node. */
static bool factor_node(matcher *m, int32_t pn, int depth, product *p) {
  const sc_graph *g = m->g;
  const sc_node *n = &g->nodes[pn];
  if ((n->flags & SC_NODE_DEAD) || n->n_inputs != 2 || n->n_outputs != 1 || depth > MAX_DEPTH)
    return false;
  if (n->op == SC_OP_MUL)
    return take_node(m->c, pn) && factor(m, n->inputs[0], pn, depth + 1, p) &&
           factor(m, n->inputs[1], pn, depth + 1, p);
  if (n->op == SC_OP_DIV) {
    double d = coefficient(g, n->inputs[1]);
    if (!isfinite(d) || d == 0) return false;
    p->coef /= d;
    return take_node(m->c, pn) && factor(m, n->inputs[0], pn, depth + 1, p);
  }
  if (n->op == SC_OP_POW) {
    double e = exponent(g, n->inputs[1]);
    if (e != 2 && e != 3 && e != 4) return false;
    int32_t b = n->inputs[0];
    if (b < 0 || sc_value_has_data(&g->values[b])) return false;
    return take_node(m->c, pn) && take_var(p, b, (int32_t)e);
  }
  return false;
}

/* Multiplies p by value v, read by node `reader`: a scalar constant
 * multiplies the coefficient; a value whose only reader is `reader` and
 * whose producer factor_node takes is looked into; any other value is a
 * factor of its own. */
static bool factor(matcher *m, int32_t v, int32_t reader, int depth, product *p) {
  const sc_graph *g = m->g;
  if (v < 0) return false;
  double k = coefficient(g, v);
  if (!isnan(k)) {
    p->coef *= k;
    return true;
  }
  int32_t pn = g->values[v].producer;
  if (v != m->stop && pn >= 0 && sc_match_only_reader(g, m->off, m->users, v) == reader) {
    int32_t n0 = m->c->n;
    product q = *p;
    if (factor_node(m, pn, depth, p)) return true;
    m->c->n = n0; /* not a product: v is a factor */
    *p = q;
  }
  return take_var(p, v, 1);
}

/* What value v, read by node `reader`, computes as a product. */
static bool product_of(matcher *m, int32_t v, int32_t reader, product *p) {
  p->coef = 1;
  p->n_vars = 0;
  return factor(m, v, reader, 0, p);
}

static double tolerance(sc_dtype t) {
  return t == SC_DTYPE_F32 ? 1e-6 : t == SC_DTYPE_F16 ? 1e-3 : 8e-3;
}

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

static int32_t out0(const sc_graph *g, int32_t node) { return g->nodes[node].outputs[0]; }

/* The tanh form's argument u (read by node t): k · (c₁·x + c₃·x³); sets
 * c->x. */
static bool tanh_argument(matcher *m, int32_t u, int32_t t) {
  const sc_graph *g = m->g;
  product pu, ps[2];
  if (!product_of(m, u, t, &pu) || pu.n_vars != 1 || pu.pow[0] != 1) return false;
  int32_t s = pu.var[0], sn = g->values[s].producer;
  if (sn < 0 || sc_match_only_reader(g, m->off, m->users, s) < 0) return false;
  const sc_node *a = &g->nodes[sn];
  if (a->op != SC_OP_ADD || a->n_inputs != 2 || a->n_outputs != 1 || (a->flags & SC_NODE_DEAD) ||
      !take_node(m->c, sn))
    return false;
  for (int i = 0; i < 2; i++)
    if (!product_of(m, a->inputs[i], sn, &ps[i]) || ps[i].n_vars != 1) return false;
  int one = ps[0].pow[0] == 1 ? 0 : 1; /* the x term */
  if (ps[0].var[0] != ps[1].var[0] || ps[one].pow[0] != 1 || ps[1 - one].pow[0] != 3)
    return false;
  m->c->x = ps[0].var[0];
  double tol = tolerance(g->values[m->c->x].dtype), c1 = ps[one].coef, c3 = ps[1 - one].coef;
  return c1 != 0 && near(pu.coef * c1, sqrt(2.0 / M_PI), tol) && near(c3 / c1, 0.044715, tol);
}

/* Whether Tanh or Erf node `act` is the heart of a GELU; fills c. */
static bool match(matcher *m, int32_t act) {
  const sc_graph *g = m->g;
  chain *c = m->c;
  const sc_node *an = &g->nodes[act];
  if (an->n_inputs != 1 || an->n_outputs != 1) return false;
  c->n = 0;
  c->x = c->root = -1;
  c->tanh = an->op == SC_OP_TANH;
  m->stop = -1;
  if (!take_node(c, act)) return false;
  if (c->tanh) {
    if (!tanh_argument(m, an->inputs[0], act)) return false;
  } else {
    product pu;
    if (!product_of(m, an->inputs[0], act, &pu) || pu.n_vars != 1 || pu.pow[0] != 1) return false;
    c->x = pu.var[0];
    if (!near(pu.coef, sqrt(0.5), tolerance(g->values[c->x].dtype))) return false;
  }
  const sc_value *xv = &g->values[c->x];
  sc_dtype dt = xv->dtype;
  double tol = tolerance(dt);
  if (dt != SC_DTYPE_F32 && dt != SC_DTYPE_BF16 && dt != SC_DTYPE_F16) return false;
  /* 1 + the activation */
  int32_t a = sc_match_only_reader(g, m->off, m->users, out0(g, act));
  if (a < 0) return false;
  const sc_node *ad = &g->nodes[a];
  if (ad->op != SC_OP_ADD || ad->n_inputs != 2 || ad->n_outputs != 1) return false;
  int32_t other = ad->inputs[0] == out0(g, act) ? ad->inputs[1] : ad->inputs[0];
  if (!near(coefficient(g, other), 1.0, tol) || !take_node(c, a)) return false;
  /* the first product above it that is 0.5 · x · (1 + ...) */
  int32_t av = out0(g, a), cur = av;
  m->stop = c->x;
  for (int depth = 0; depth < MAX_DEPTH && c->root < 0; depth++) {
    int32_t r = sc_match_only_reader(g, m->off, m->users, cur), n0 = c->n;
    product p = {.coef = 1};
    if (r < 0 || !factor_node(m, r, 0, &p)) return false;
    int32_t px = 0, pa = 0;
    for (int32_t i = 0; i < p.n_vars; i++) {
      if (p.var[i] == c->x) px = p.pow[i];
      else if (p.var[i] == av) pa = p.pow[i];
      else return false;
    }
    if (px > 1 || pa != 1) return false;
    if (px == 1 && near(p.coef, 0.5, tol)) { /* the root: it leaves the nodes that go */
      c->root = r;
      memmove(&c->nodes[n0], &c->nodes[n0 + 1], (size_t)(c->n - n0 - 1) * sizeof *c->nodes);
      c->n--;
    } else { /* not yet: the next product above walks this one again */
      c->n = n0;
      cur = out0(g, r);
    }
  }
  if (c->root < 0) return false;
  /* every value of the chain (and y) in x's dtype and shape */
  for (int32_t i = 0; i <= c->n; i++) {
    int32_t node = i < c->n ? c->nodes[i] : c->root;
    const sc_value *o = &g->values[out0(g, node)];
    if (o->dtype != dt || o->rank != xv->rank ||
        memcmp(o->dims, xv->dims, (size_t)xv->rank * sizeof *xv->dims) != 0)
      return false;
  }
  return true;
}

/* The root becomes Gelu(x); the chain goes. */
static sc_status rewrite(sc_graph *g, const chain *c) {
  sc_node *y = &g->nodes[c->root];
  y->op = SC_OP_GELU;
  y->inputs[0] = c->x;
  y->n_inputs = 1;
  y->n_attrs = 0;
  /* each set at once: adding an attribute may move the others */
  sc_attr *a = sc_node_add_attr(g, c->root, "approximate", SC_ATTR_STRING);
  if (a && !(a->s = sc_arena_strdup(&g->arena, c->tanh ? "tanh" : "none"))) a = NULL;
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  return sc_match_replace(g, c->root, c->nodes, c->n);
}

static bool fuse_at(sc_graph *g, const int32_t *off, const int32_t *users, int32_t node,
                    sc_status *st) {
  chain c;
  matcher m = {.g = g, .off = off, .users = users, .stop = -1, .c = &c};
  sc_op op = g->nodes[node].op;
  if ((op != SC_OP_TANH && op != SC_OP_ERF) || !match(&m, node)) return false;
  *st = rewrite(g, &c);
  return true;
}

sc_status sc_pass_fuse_gelu(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  const char *off_env = getenv("SHARDC_NO_FUSE_GELU");
  if (off_env && *off_env && strcmp(off_env, "0") != 0) return SC_OK;
  return sc_match_each(g, fuse_at);
}
