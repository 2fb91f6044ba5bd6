/* fuse_attention.c — the fuse-attention pass (fuse_attention.h): each
 * attention core, recognised from its Softmax by what it computes, becomes
 * one FusedAttention node (ir/attention.h) that the lowering turns into one
 * SC_STEP_ATTENTION (codegen/lower_attention.c), and whose gradient rule
 * is one FusedAttentionGrad (passes/grad_rules.c).
 *
 * Per Softmax over the last axis: sc_attention_core_chain walks back to
 * the score product; `classify` reads the chain from the product forward
 * (scale, mask, causal condition, casts); `probs_product` follows the
 * probabilities to the product with V. Only when all of it fits is the
 * graph changed: the new node is appended (Transposes for K where the
 * product did not read one), the second product's output becomes the new
 * node's, the core's nodes left without readers are flagged dead, and the
 * nodes are put back in topological order. */
#include "passes/fuse_attention.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ir/attention.h"
#include "passes/grad_rule.h"
#include "passes/pass.h"

static bool is_chain_op(sc_op op) {
  return op == SC_OP_ADD || op == SC_OP_SUB || op == SC_OP_MUL || op == SC_OP_DIV ||
         op == SC_OP_WHERE || op == SC_OP_CAST;
}

static bool same_shape(const sc_value *a, const sc_value *b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) == 0;
}

int32_t sc_attention_core_chain(const sc_graph *g, int32_t softmax, int32_t limit,
                                const int64_t *blk, int32_t *chain) {
  const sc_node *n = &g->nodes[softmax];
  int32_t nc = 0, v = n->inputs[0];
  while (v >= 0 && nc < SC_ATTENTION_CHAIN_MAX) {
    int32_t p = g->values[v].producer;
    if (p < 0 || p >= limit || (blk && blk[p] != blk[softmax]) ||
        (g->nodes[p].flags & SC_NODE_DEAD))
      return 0;
    chain[nc++] = p;
    if (g->nodes[p].op == SC_OP_MATMUL) return nc;
    if (!is_chain_op(g->nodes[p].op)) return 0;
    /* the scores: the first float input of the node's own shape computed
     * in scope (not a mask, a broadcast bias or a scale); in its own
     * dtype, except through a Cast (bf16 and fp16 steps cast the score
     * product's output back to fp32) */
    const sc_node *pn = &g->nodes[p];
    const sc_value *o = &g->values[pn->outputs[0]];
    int32_t next = -1;
    for (int32_t k = 0; k < pn->n_inputs && next < 0; k++) {
      int32_t x = pn->inputs[k];
      int32_t q = x >= 0 ? g->values[x].producer : -1;
      if (q >= 0 && q < limit && (!blk || blk[q] == blk[softmax]) &&
          (g->values[x].dtype == o->dtype || pn->op == SC_OP_CAST) && same_shape(&g->values[x], o))
        next = x;
    }
    v = next;
  }
  return 0;
}

/* ---- one core ---- */

typedef struct core {
  int32_t softmax, chain[SC_ATTENTION_CHAIN_MAX], n_chain;
  int32_t q, kt, k, v;      /* values; k -1 until a Transpose is needed */
  int32_t mask;             /* value or -1 */
  int32_t product;          /* the MatMul(P, V) node */
  int32_t probs_casts[4], n_probs_casts;
  double scale;
  bool causal;
  char why[160];
} core;

static bool refuse(core *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool refuse(core *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
  return false;
}

/* A scalar constant's value (one element), or false. */
static bool scalar_const(const sc_value *v, double *out) {
  if (!sc_value_has_data(v) || sc_value_numel(v) != 1 || !sc_dtype_is_float(v->dtype))
    return false;
  *out = sc_load_f64(v->dtype, v->data, 0);
  return isfinite(*out) || *out == -INFINITY;
}

/* scalar_const of value id, or of a float Cast of one (a bf16 or fp16 step
 * casts the scale and the fill down to the scores' dtype before folding:
 * passes/train.c), rounded as the Cast rounds it. */
static bool scalar_const_cast(const sc_graph *g, int32_t id, double *out) {
  if (id < 0 || id >= g->n_values) return false;
  const sc_value *v = &g->values[id];
  if (scalar_const(v, out)) return true;
  int32_t p = v->producer;
  if (p < 0 || g->nodes[p].op != SC_OP_CAST || g->nodes[p].n_inputs < 1 ||
      !sc_dtype_is_float(v->dtype) || sc_value_numel(v) != 1)
    return false;
  int32_t in = g->nodes[p].inputs[0];
  if (in < 0 || !scalar_const(&g->values[in], out)) return false;
  unsigned char tmp[16];
  sc_store_f64(v->dtype, tmp, 0, *out);
  *out = sc_load_f64(v->dtype, tmp, 0);
  return isfinite(*out) || *out == -INFINITY;
}

/* Whether constant `cond` (broadcast to [.., sq, skv]) is exactly the
 * causal pattern (visible: true where key j <= i + skv - sq), or its
 * negation when `hidden`: every element read, row by row. */
static bool causal_scan(const sc_value *cond, int64_t sq, int64_t skv, bool hidden) {
  if (!sc_value_has_data(cond) || cond->rank < 2) return false;
  int64_t r = cond->dims[cond->rank - 2], cdim = cond->dims[cond->rank - 1];
  if ((r != sq && r != 1) || (cdim != skv && cdim != 1)) return false;
  if (r == 1 && sq > 1) return false; /* one row for every query: not causal */
  if (cdim == 1 && skv > 1) return false;
  int64_t n = sc_value_numel(cond), plane = r * cdim;
  const uint8_t *bytes = cond->dtype == SC_DTYPE_BOOL || cond->dtype == SC_DTYPE_U8
                             ? (const uint8_t *)cond->data
                             : NULL; /* a model's masks: read without sc_load_f64 */
  for (int64_t base = 0; plane > 0 && base < n; base += plane)
    for (int64_t i = 0, e = base; i < r; i++)
      for (int64_t j = 0; j < cdim; j++, e++) {
        bool visible = j <= i + (skv - sq);
        bool t = bytes ? bytes[e] != 0 : sc_load_f64(cond->dtype, cond->data, e) != 0;
        if (t != (visible != hidden)) return false;
      }
  return true;
}

/* The conditions causal_scan has answered in one run of the pass: a
 * model's layers share one mask constant, read once instead of once a
 * layer (the Megatron 70B sample's bool [4096, 4096] mask, read by each of
 * its 84 Wheres, was 7 of the 8 CPU seconds of one plan --train). */
#define CAUSAL_SEEN_MAX 8
typedef struct causal_seen {
  int32_t n;
  struct {
    int32_t cond;        /* value id */
    int64_t sq, skv;
    bool hidden, causal; /* the question and its answer */
  } e[CAUSAL_SEEN_MAX];
} causal_seen;

static bool causal_pattern(const sc_graph *g, int32_t cond, int64_t sq, int64_t skv, bool hidden,
                           causal_seen *seen) {
  if (cond < 0 || cond >= g->n_values) return false;
  for (int32_t k = 0; k < seen->n; k++)
    if (seen->e[k].cond == cond && seen->e[k].sq == sq && seen->e[k].skv == skv &&
        seen->e[k].hidden == hidden)
      return seen->e[k].causal;
  bool causal = causal_scan(&g->values[cond], sq, skv, hidden);
  if (seen->n < CAUSAL_SEEN_MAX) {
    int32_t k = seen->n++;
    seen->e[k].cond = cond;
    seen->e[k].sq = sq;
    seen->e[k].skv = skv;
    seen->e[k].hidden = hidden;
    seen->e[k].causal = causal;
  }
  return causal;
}

/* dep[value]: a gradient could flow from value to a parameter — a float
 * value computed from one through ops that have a gradient rule (Shape,
 * comparisons and the like carry none, so a causal mask built from an
 * activation's shape is not). */
static void mark_dependents(const sc_graph *g, const int32_t *params, int32_t n_params,
                            bool *dep) {
  for (int32_t k = 0; k < n_params; k++)
    if (params[k] >= 0) dep[params[k]] = true;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if ((n->flags & SC_NODE_DEAD) || !sc_grad_rule(n->op)) continue;
    bool any = false;
    for (int32_t k = 0; k < n->n_inputs; k++) any |= n->inputs[k] >= 0 && dep[n->inputs[k]];
    for (int32_t j = 0; any && j < n->n_outputs; j++)
      if (n->outputs[j] >= 0 && sc_dtype_is_float(g->values[n->outputs[j]].dtype))
        dep[n->outputs[j]] = true;
  }
}

/* Number of live readers of value v (users CSR), and the first one. */
static int32_t readers(const sc_graph *g, const int32_t *off, const int32_t *users, int32_t v,
                       int32_t *first) {
  int32_t n = 0;
  *first = -1;
  for (int32_t u = off[v]; u < off[v + 1]; u++) {
    if (g->nodes[users[u]].flags & SC_NODE_DEAD) continue;
    if (n++ == 0) *first = users[u];
  }
  return n;
}

/* Reads the chain from the score product forward: Q, Kᵀ, scale, mask,
 * causal. */
static bool classify(const sc_graph *g, const bool *dep, causal_seen *seen, core *c) {
  const sc_node *mm = &g->nodes[c->chain[c->n_chain - 1]];
  const sc_value *a = &g->values[mm->inputs[0]], *b = &g->values[mm->inputs[1]];
  const sc_value *s = &g->values[mm->outputs[0]];
  if (a->rank != 4 || b->rank != 4)
    return refuse(c, "the score product's operands have rank %d and %d (4: [batch, heads, "
                  "seq, dim])", (int)a->rank, (int)b->rank);
  if (b->dims[0] != a->dims[0] || b->dims[1] != a->dims[1] || b->dims[2] != a->dims[3])
    return refuse(c, "the score product broadcasts its batch dims");
  c->q = mm->inputs[0];
  c->kt = mm->inputs[1];
  int64_t sq = s->dims[2], skv = s->dims[3];
  c->scale = 1.0;
  bool masked = false;
  int32_t cur = mm->outputs[0];
  for (int32_t k = c->n_chain - 2; k >= 0; k--) {
    const sc_node *n = &g->nodes[c->chain[k]];
    int32_t other = -1, pos = -1;
    for (int32_t i = 0; i < n->n_inputs; i++)
      if (n->inputs[i] == cur) pos = i;
    if (pos < 0) return refuse(c, "node '%s' on the scores' path is not elementwise in them",
                               n->name ? n->name : "?");
    if (n->n_inputs == 2) other = n->inputs[1 - pos];
    double x;
    switch (n->op) {
    case SC_OP_CAST:
      if (!sc_dtype_is_float(g->values[n->outputs[0]].dtype))
        return refuse(c, "Cast '%s' of the scores is not to a float type", n->name ? n->name : "?");
      break;
    case SC_OP_MUL:
    case SC_OP_DIV:
      if (!scalar_const_cast(g, other, &x) || !isfinite(x) || x == 0)
        return refuse(c, "the scale ('%s') is not a scalar constant", n->name ? n->name : "?");
      if (n->op == SC_OP_DIV && pos != 0)
        return refuse(c, "'%s' divides by the scores", n->name ? n->name : "?");
      if (masked)
        return refuse(c, "the scale ('%s') comes after the mask", n->name ? n->name : "?");
      c->scale *= n->op == SC_OP_MUL ? x : 1.0 / x;
      break;
    case SC_OP_ADD: {
      const sc_value *m = &g->values[other];
      int64_t sb, sh;
      if (masked) return refuse(c, "more than one additive mask");
      if (dep[other])
        return refuse(c, "the mask ('%s') is computed from a trained parameter",
                      m->name ? m->name : "?");
      if (m->dtype != a->dtype && m->dtype != SC_DTYPE_F32)
        return refuse(c, "the mask is %s (the products' dtype or f32)", sc_dtype_name(m->dtype));
      if (!sc_attention_mask_fits(m->rank, m->dims, a->dims[0], a->dims[1], sq, skv, &sb, &sh)) {
        char shape[96] = "";
        for (int32_t d = 0, w = 0; d < m->rank && w < (int)sizeof shape - 24; d++)
          w += snprintf(shape + w, sizeof shape - (size_t)w, "%s%lld", d ? "," : "",
                        (long long)m->dims[d]);
        return refuse(c, "the mask [%s] does not fit [%lld, %lld, %lld, %lld] (its last two dims "
                      "exact, the others 1 or whole)", shape, (long long)a->dims[0],
                      (long long)a->dims[1], (long long)sq, (long long)skv);
      }
      c->mask = other;
      masked = true;
      break;
    }
    case SC_OP_WHERE: {
      if (pos == 0 || n->n_inputs != 3)
        return refuse(c, "Where '%s' selects by the scores", n->name ? n->name : "?");
      if (c->causal) return refuse(c, "two causal conditions");
      if (!scalar_const_cast(g, n->inputs[3 - pos], &x) || x > -1e4)
        return refuse(c, "Where '%s' fills with something other than a constant <= -1e4",
                      n->name ? n->name : "?");
      if (!causal_pattern(g, n->inputs[0], sq, skv, pos == 2, seen))
        return refuse(c, "Where '%s''s condition is not a constant causal pattern",
                      n->name ? n->name : "?");
      c->causal = true;
      break;
    }
    default:
      return refuse(c, "'%s' (%s) between the score product and the Softmax",
                    n->name ? n->name : "?", sc_op_name(n->op));
    }
    cur = n->outputs[0];
  }
  if (!(c->scale > 0) || !isfinite(c->scale) || c->scale > 3.4e38)
    return refuse(c, "the scale %g is not a positive f32", c->scale);
  return true;
}

/* The probabilities, through Casts, to the product with V. */
static bool probs_product(const sc_graph *g, const int32_t *off, const int32_t *users, core *c) {
  int32_t v = g->nodes[c->softmax].outputs[0], r;
  for (;;) {
    if (g->values[v].flags & SC_VALUE_OUTPUT)
      return refuse(c, "the probabilities are a graph output");
    int32_t n = readers(g, off, users, v, &r);
    if (n != 1) return refuse(c, "the probabilities are read by %d nodes", (int)n);
    const sc_node *u = &g->nodes[r];
    if (u->op == SC_OP_CAST && c->n_probs_casts < 4) {
      c->probs_casts[c->n_probs_casts++] = r;
      v = u->outputs[0];
      continue;
    }
    if (u->op == SC_OP_DROPOUT)
      return refuse(c, "dropout ('%s') between the Softmax and the product",
                    u->name ? u->name : "?");
    if (u->op != SC_OP_MATMUL || u->inputs[0] != v)
      return refuse(c, "the probabilities are read by '%s' (%s), not a product with V",
                    u->name ? u->name : "?", sc_op_name(u->op));
    c->product = r;
    break;
  }
  const sc_node *pv = &g->nodes[c->product];
  const sc_value *q = &g->values[c->q], *vv = &g->values[pv->inputs[1]];
  const sc_value *kt = &g->values[c->kt], *o = &g->values[pv->outputs[0]];
  if (vv->rank != 4 || vv->dims[0] != q->dims[0] || vv->dims[1] != kt->dims[1] ||
      vv->dims[2] != kt->dims[3] || o->rank != 4)
    return refuse(c, "V is not [batch, kv heads, %lld, dv]", (long long)kt->dims[3]);
  if (q->dtype != kt->dtype || vv->dtype != q->dtype || o->dtype != q->dtype ||
      (q->dtype != SC_DTYPE_F32 && q->dtype != SC_DTYPE_BF16 && q->dtype != SC_DTYPE_F16))
    return refuse(c, "the products' operands are %s, %s and %s (one of f32, bf16, f16)",
                  sc_dtype_name(q->dtype), sc_dtype_name(kt->dtype), sc_dtype_name(vv->dtype));
  c->v = pv->inputs[1];
  return true;
}

/* K from Kᵀ: when Kᵀ is Transpose(X, p), K is X transposed by p with its
 * last two entries swapped — X itself when that is the identity (Kᵀ a
 * transpose of K's last two axes), else one new Transpose of X (GPT-2's
 * Kᵀ = X [b,s,h,d] by (0,2,3,1): K = X by (0,2,1,3), a copy in place of
 * the Kᵀ copy, which then dies); otherwise a new Transpose of Kᵀ's last
 * two axes. -1 on failure (g->diag). */
static int32_t k_of(sc_graph *g, core *c) {
  int32_t p = g->values[c->kt].producer, src = c->kt;
  int64_t want[4] = {0, 1, 3, 2};
  if (p >= 0 && g->nodes[p].op == SC_OP_TRANSPOSE) {
    const int64_t *perm = NULL;
    int64_t np = sc_attr_ints(g, &g->nodes[p], "perm", &perm);
    if (np == 4) {
      want[0] = perm[0], want[1] = perm[1], want[2] = perm[3], want[3] = perm[2];
      if (want[0] == 0 && want[1] == 1 && want[2] == 2 && want[3] == 3)
        return g->nodes[p].inputs[0];
      src = g->nodes[p].inputs[0];
    } else {
      want[0] = 0, want[1] = 1, want[2] = 3, want[3] = 2;
    }
  }
  char name[256];
  snprintf(name, sizeof name, "%s/k", g->nodes[c->softmax].name ? g->nodes[c->softmax].name
                                                                : "attention");
  int32_t k = sc_graph_new_value(g, name);
  int32_t node = k < 0 ? -1 : sc_graph_add_node(g, SC_OP_TRANSPOSE, name, &src, 1, &k, 1);
  sc_attr *a = node < 0 ? NULL : sc_node_add_attr(g, node, "perm", SC_ATTR_INTS);
  int64_t *perm = a ? sc_arena_array(&g->arena, 4, sizeof *perm) : NULL;
  if (!perm) return -1;
  memcpy(perm, want, sizeof want);
  a->ints = perm;
  a->n = 4;
  return sc_ops[SC_OP_TRANSPOSE].infer(g, &g->nodes[node]) == SC_OK ? k : -1;
}

/* The rewrite of one qualifying core. */
static sc_status rewrite(sc_graph *g, core *c) {
  int32_t k = k_of(g, c);
  if (k < 0) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  const char *sname = g->nodes[c->softmax].name;
  char name[256];
  snprintf(name, sizeof name, "%s/fused", sname ? sname : "attention");
  int32_t o = g->nodes[c->product].outputs[0];
  int32_t lse = sc_graph_new_value(g, name);
  int32_t in[4] = {c->q, k, c->v, c->mask};
  int32_t outs[2] = {o, lse};
  g->nodes[c->product].flags |= SC_NODE_DEAD;
  int32_t node = lse < 0 ? -1
                         : sc_graph_add_node(g, SC_OP_FUSED_ATTENTION, name, in,
                                             c->mask >= 0 ? 4 : 3, outs, 2);
  /* each set at once: adding an attribute may move the others */
  sc_attr *a = node < 0 ? NULL : sc_node_add_attr(g, node, "scale", SC_ATTR_FLOAT);
  if (a) a->f = (double)(float)c->scale;
  if (a && (a = sc_node_add_attr(g, node, "causal", SC_ATTR_INT))) a->i = c->causal;
  if (!a) return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  g->values[o].producer = node;
  sc_status st = sc_ops[SC_OP_FUSED_ATTENTION].infer(g, &g->nodes[node]);
  if (st != SC_OK) return st;
  /* the core's nodes: dead once nothing live reads them (the products'
   * operands' producers are not the core's) */
  g->nodes[c->softmax].flags |= SC_NODE_DEAD;
  for (int32_t i = 0; i < c->n_probs_casts; i++) g->nodes[c->probs_casts[i]].flags |= SC_NODE_DEAD;
  return SC_OK;
}

/* Flags dead every node of the chain that no live node reads any more
 * (a node whose result something else reads stays). */
static void sweep_chain(sc_graph *g, const core *c) {
  for (int32_t k = 0; k < c->n_chain; k++) {
    sc_node *n = &g->nodes[c->chain[k]];
    bool read = false;
    for (int32_t j = 0; j < n->n_outputs && !read; j++) {
      int32_t y = n->outputs[j];
      if (y < 0) continue;
      if (g->values[y].flags & SC_VALUE_OUTPUT) read = true;
      for (int32_t i = 0; i < g->n_nodes && !read; i++) {
        const sc_node *u = &g->nodes[i];
        if (u->flags & SC_NODE_DEAD) continue;
        for (int32_t x = 0; x < u->n_inputs; x++) read |= u->inputs[x] == y;
      }
    }
    if (!read) n->flags |= SC_NODE_DEAD;
  }
}

static void note_unfused(sc_fuse_attention_report *r, const char *node, const char *why) {
  r->unfused++;
  if (r->n_listed >= SC_FUSE_ATTENTION_MAX_UNFUSED) return;
  sc_attention_unfused *e = &r->list[r->n_listed++];
  snprintf(e->node, sizeof e->node, "%s", node ? node : "?");
  snprintf(e->why, sizeof e->why, "%s", why);
}

/* Puts the new nodes (ids nn and up) where they belong: each right before
 * the node whose place it takes (at[id - nn], an old node id), in creation
 * order, so that the rest keeps its order (a Kahn sort would move the
 * nodes no fused node feeds, a bf16 step's weight casts, ahead of them). */
static sc_status place_new_nodes(sc_graph *g, int32_t nn, const int32_t *at) {
  int32_t total = g->n_nodes, k = 0;
  sc_node *nodes = sc_malloc((size_t)total * sizeof *nodes);
  if (!nodes) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0; i < nn; i++) {
    for (int32_t j = nn; j < total; j++)
      if (at[j - nn] == i) nodes[k++] = g->nodes[j];
    nodes[k++] = g->nodes[i];
  }
  SC_ASSERT(k == total);
  memcpy(g->nodes, nodes, (size_t)total * sizeof *nodes);
  sc_free(nodes);
  return SC_OK; /* producers: sc_graph_compact sets them next */
}

sc_status sc_pass_fuse_attention(sc_graph *g, const sc_pass_opts *opts) {
  if (opts->no_fuse_attention) {
    if (opts->attention_report) memset(opts->attention_report, 0, sizeof *opts->attention_report);
    return SC_OK;
  }
  return sc_fuse_attention(g, NULL, 0, opts->attention_report);
}

sc_status sc_fuse_attention(sc_graph *g, const int32_t *params, int32_t n_params,
                            sc_fuse_attention_report *r) {
  sc_fuse_attention_report local;
  if (!r) r = &local;
  memset(r, 0, sizeof *r);
  r->ran = true;
  int32_t nn = g->n_nodes;
  bool *dep = sc_calloc((size_t)g->n_values + 1, sizeof *dep);
  int32_t *off = NULL, *users = NULL;
  if (!dep || sc_graph_users(g, &off, &users) != SC_OK) {
    sc_free(dep);
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }
  mark_dependents(g, params, n_params, dep);
  causal_seen seen = {0};
  sc_status st = SC_OK;
  int32_t *at = NULL, cap_at = 0; /* new node id - nn -> the old node it precedes */
  for (int32_t i = 0; i < nn && st == SC_OK; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->op != SC_OP_SOFTMAX || (n->flags & SC_NODE_DEAD)) continue;
    const sc_value *x = &g->values[n->inputs[0]];
    int64_t axis = sc_attr_int(g, n, "axis", -1);
    if (x->rank < 1 || (axis != -1 && axis != x->rank - 1)) continue; /* not attention's */
    core c;
    memset(&c, 0, sizeof c);
    c.softmax = i;
    c.mask = c.k = -1;
    c.n_chain = sc_attention_core_chain(g, i, nn, NULL, c.chain);
    bool ok = c.n_chain > 0 ? classify(g, dep, &seen, &c) && probs_product(g, off, users, &c)
                            : refuse(&c, "no score product (MatMul) before it");
    if (!ok) {
      note_unfused(r, n->name, c.why);
      continue;
    }
    int32_t first_new = g->n_nodes;
    st = rewrite(g, &c);
    if (st == SC_OK && g->n_nodes - nn > cap_at) {
      int32_t cap = 2 * (g->n_nodes - nn) + 8;
      int32_t *grown = sc_realloc(at, (size_t)cap * sizeof *at);
      if (!grown) st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
      else at = grown, cap_at = cap;
    }
    if (st == SC_OK) {
      for (int32_t j = first_new; j < g->n_nodes; j++) at[j - nn] = c.product;
      sweep_chain(g, &c);
      r->fused++;
    }
  }
  sc_free(dep);
  sc_free(off);
  sc_free(users);
  /* the new nodes take the places of the products they replace, then the
   * replaced nodes go (value ids stay: no value is flagged dead) */
  if (st == SC_OK && r->fused > 0) st = place_new_nodes(g, nn, at);
  if (st == SC_OK && r->fused > 0) st = sc_graph_compact(g);
  sc_free(at);
  return st;
}

json_t *sc_fuse_attention_json(const sc_fuse_attention_report *r) {
  json_t *o = json_object(), *a = json_array();
  if (!o || !a) {
    json_decref(o);
    json_decref(a);
    return NULL;
  }
  json_object_set_new(o, "fused", json_integer(r->fused));
  json_object_set_new(o, "unfused", json_integer(r->unfused));
  for (int32_t i = 0; i < r->n_listed; i++)
    json_array_append_new(a, json_pack("{s:s, s:s}", "node", r->list[i].node, "why",
                                       r->list[i].why));
  json_object_set_new(o, "cores", a);
  return o;
}

void sc_fuse_attention_print(const sc_fuse_attention_report *r, FILE *f, const char *indent) {
  if (!r->ran) {
    fprintf(f, "%sattention: not fused (--no-fuse-attention)\n", indent);
    return;
  }
  fprintf(f, "%sattention: %d core%s fused, %d left unfused\n", indent, (int)r->fused,
          r->fused == 1 ? "" : "s", (int)r->unfused);
  for (int32_t i = 0; i < r->n_listed; i++)
    fprintf(f, "%s  unfused '%s': %s\n", indent, r->list[i].node, r->list[i].why);
  if (r->unfused > r->n_listed)
    fprintf(f, "%s  (and %d more)\n", indent, (int)(r->unfused - r->n_listed));
}
