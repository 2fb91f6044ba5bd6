/* fp8.c — FP8 linear layers of a training step (fp8.h, docs/training.md
 * "FP8").
 *
 * Runs on the bf16 step after autodiff. For each linear layer (fp8.h) in
 * forward order: its weight W and input X are quantized once
 * (Cast(Cast(X·s, f8e4m3fn), f32), the cast saturating at ±448), its output
 * gradient dY once (f8e5m2, ±57344), and every product of the layer reads
 * those in place of its bf16 operands (through the Reshape autodiff put in
 * between, rebuilt over the new operand); the backward products read a
 * widening of X's and W's FP8 values of their own, so that the FP8 value,
 * not its f32 widening, is what lives until the backward (codegen/fuse.c
 * keeps it a stored output). A product's result becomes a
 * new f32 value; its old value, which its readers keep reading, is now
 * Cast(product · (1/s_a · 1/s_b) [+ bias], old dtype). The bf16 casts the
 * products no longer read are left to dead-code elimination. The added
 * nodes are then placed next to what they serve (place_new), the forward
 * and the backward keeping their order; the caller learns where the
 * backward now begins (recompute and offloading take what comes before as
 * the forward). */
#include "passes/fp8.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

enum { Q_INPUT, Q_WEIGHT, Q_GRAD, Q_COUNT };
static const char *const Q_NAMES[Q_COUNT] = {"input", "weight", "grad"};

/* The f32 value a bf16 operand was cast from, else the operand itself. */
static int32_t source_of(const sc_graph *g, int32_t v) {
  int32_t p = g->values[v].producer;
  if (p >= 0 && g->nodes[p].op == SC_OP_CAST && g->nodes[p].n_inputs == 1 &&
      g->nodes[p].inputs[0] >= 0 && g->values[g->nodes[p].inputs[0]].dtype == SC_DTYPE_F32)
    return g->nodes[p].inputs[0];
  return v;
}

/* A weight: a parameter of the step (params[0 .. n)) or an initializer. */
static bool is_weight_source(const sc_graph *g, int32_t v, const int32_t *params, int32_t n) {
  for (int32_t k = 0; k < n; k++)
    if (params[k] == v) return true;
  const sc_value *x = &g->values[v];
  return (x->flags & SC_VALUE_PARAM) != 0 && x->producer < 0;
}

static bool has_prefix(const char *s, const char *prefix, size_t n) {
  return s && strncmp(s, prefix, n) == 0;
}

/* A new f32 graph input `name` of rank 0 or [n]. */
static int32_t state_in(sc_graph *g, const char *name, int32_t rank, int64_t n) {
  if (sc_graph_find_value(g, name) >= 0) return -1;
  int32_t v = sc_graph_add_value(g, name);
  if (v < 0 || sc_value_set_shape(g, v, SC_DTYPE_F32, rank, &n) != SC_OK ||
      sc_graph_add_input(g, v) != SC_OK)
    return -1;
  return v;
}

/* Quantized T (the f32 value src) for meta m: Cast(Cast(src·s, fmt), f32),
 * s the stored scale (0: 1); *inv receives 1/s. */
static int32_t quantize(sc_grad_ctx *c, int32_t src, sc_dtype fmt, const char *name,
                        int32_t history, sc_fp8_meta *m, int32_t *inv) {
  sc_graph *g = c->g;
  char nm[600];
  snprintf(nm, sizeof nm, "%s.fp8_amax_history", name);
  m->history = state_in(g, nm, 1, history);
  snprintf(nm, sizeof nm, "%s.fp8_scale", name);
  m->scale = m->history < 0 ? -1 : state_in(g, nm, 0, 0);
  if (m->scale < 0) return -1;
  m->name = sc_arena_strdup(&g->arena, name);
  m->fp8_max = sc_narrow_max(fmt);
  int32_t s = gb_where(c, gb_2(c, SC_OP_GREATER, m->scale, gb_scalar(c, SC_DTYPE_F32, 0.0)),
                       m->scale, gb_scalar(c, SC_DTYPE_F32, 1.0));
  int32_t x = gb_cast(c, src, SC_DTYPE_F32);
  m->amax = gb_reduce(c, SC_OP_REDUCE_MAX, gb_1(c, SC_OP_ABS, x), NULL, 0, false);
  *inv = gb_1(c, SC_OP_RECIPROCAL, s);
  return gb_cast(c, gb_cast(c, gb_2(c, SC_OP_MUL, x, s), fmt), SC_DTYPE_F32);
}

typedef struct layer {
  int32_t node;            /* the forward product */
  int32_t op[2];           /* its bf16 operands X, W */
  int32_t q[Q_COUNT];      /* quantized X, W, dY (-1: not yet) */
  int32_t qb[Q_COUNT];     /* X, W widened again for the backward (-1: not yet) */
  int32_t inv[Q_COUNT];    /* their inverse scales */
  int32_t grad_src;        /* the bf16 dY the backward products read */
  int32_t history;
  sc_fp8_report *r;
} layer;

/* The quantized tensor k of L, made on first use from src. */
static int32_t quantized(sc_grad_ctx *c, layer *L, int k, int32_t src) {
  if (L->q[k] >= 0) return L->q[k];
  sc_graph *g = c->g;
  char name[512];
  snprintf(name, sizeof name, "%s/%s", g->nodes[L->node].name, Q_NAMES[k]);
  sc_fp8_meta *m = &L->r->meta[L->r->n_meta];
  int32_t q = quantize(c, source_of(g, src), k == Q_GRAD ? SC_DTYPE_F8E5M2 : SC_DTYPE_F8E4M3FN,
                       name, L->history, m, &L->inv[k]);
  if (q < 0 || L->inv[k] < 0 || m->amax < 0) return -1;
  L->r->n_meta++;
  return L->q[k] = q;
}

/* Which tensor operand value v of a product of L stands for (through a
 * Reshape of the layer's own backward): *base receives what it reshapes. */
static int kind_of(const sc_graph *g, const layer *L, int32_t v, const char *prefix, size_t n,
                   int32_t *base) {
  int32_t p = g->values[v].producer;
  *base = v;
  if (p >= 0 && g->nodes[p].op == SC_OP_RESHAPE && has_prefix(g->nodes[p].name, prefix, n))
    *base = g->nodes[p].inputs[0];
  if (*base == L->op[0]) return Q_INPUT;
  if (*base == L->op[1]) return Q_WEIGHT;
  return Q_GRAD;
}

/* Product node b of L reads the quantized operands; its old output is the
 * descaled result (+ bias) cast back. */
static sc_status rewrite_product(sc_grad_ctx *c, layer *L, int32_t b, const char *prefix,
                                 size_t n, sc_diag *d) {
  sc_graph *g = c->g;
  int32_t inv = -1, bias = -1;
  for (int j = 0; j < 2; j++) {
    int32_t base, v = g->nodes[b].inputs[j];
    int k = kind_of(g, L, v, prefix, n, &base);
    if (k == Q_GRAD) {
      if (L->grad_src >= 0 && L->grad_src != base)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, g->nodes[L->node].name,
                           "fp8: the layer's two gradient products read different gradients");
      L->grad_src = base;
    }
    int32_t q = quantized(c, L, k, base);
    if (q >= 0 && b != L->node && k != Q_GRAD) { /* the backward widens the FP8 value itself */
      if (L->qb[k] < 0) L->qb[k] = gb_cast(c, g->nodes[g->values[q].producer].inputs[0], SC_DTYPE_F32);
      q = L->qb[k];
    }
    if (q >= 0 && base != v) { /* the same Reshape over the quantized tensor */
      sc_value rv = g->values[v];
      q = gb_reshape(c, q, rv.rank, rv.dims);
    }
    if (q < 0) goto fail;
    g->nodes[b].inputs[j] = q;
    inv = inv < 0 ? L->inv[k] : gb_2(c, SC_OP_MUL, inv, L->inv[k]);
  }
  if (g->nodes[b].n_inputs > 2) { /* a Gemm's bias joins after the descaling */
    bias = g->nodes[b].inputs[2];
    g->nodes[b].n_inputs = 2;
  }
  int32_t old = g->nodes[b].outputs[0];
  sc_dtype t = g->values[old].dtype;
  int32_t y = sc_graph_new_value(g, "fp8_product");
  if (y < 0 || inv < 0) goto fail;
  g->nodes[b].outputs[0] = y;
  g->values[y].producer = b;
  g->values[old].producer = -1;
  if (sc_ops[g->nodes[b].op].infer(g, &g->nodes[b]) != SC_OK) goto fail;
  y = gb_2(c, SC_OP_MUL, y, inv);
  if (bias >= 0) y = gb_2(c, SC_OP_ADD, y, gb_cast(c, source_of(g, bias), SC_DTYPE_F32));
  if (y < 0) goto fail;
  char name[512];
  snprintf(name, sizeof name, "%s/fp8/%d", g->nodes[L->node].name, (int)(*c->counter)++);
  int32_t cn = sc_graph_add_node(g, SC_OP_CAST, name, &y, 1, &old, 1);
  sc_attr *to = cn < 0 ? NULL : sc_node_add_attr(g, cn, "to", SC_ATTR_INT);
  if (!to) goto fail;
  to->i = sc_dtype_to_onnx(t);
  if (sc_ops[SC_OP_CAST].infer(g, &g->nodes[cn]) != SC_OK) goto fail;
  return SC_OK;
fail:
  return sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_NOMEM, NULL,
                     g->nodes[L->node].name, "fp8: %s", g->diag.msg);
}

/* Whether forward node i is a linear layer: *why empty when it runs in
 * FP8, else the reason it stays bf16. */
static bool linear_layer(sc_graph *g, int32_t i, const int32_t *params, int32_t n_params,
                         char *why, size_t why_n) {
  const sc_node *n = &g->nodes[i];
  why[0] = 0;
  if ((n->op != SC_OP_MATMUL && n->op != SC_OP_GEMM) || (n->flags & SC_NODE_DEAD) ||
      n->n_inputs < 2 || n->n_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0 ||
      g->values[n->outputs[0]].dtype != SC_DTYPE_BF16)
    return false;
  const sc_value *a = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  if (w->rank != 2 || a->rank < 2 || !is_weight_source(g, source_of(g, n->inputs[1]), params, n_params))
    return false;
  bool tb = false;
  if (n->op == SC_OP_GEMM) {
    tb = sc_attr_int(g, n, "transB", 0) != 0;
    if (sc_attr_int(g, n, "transA", 0) != 0 || sc_attr_float(g, n, "alpha", 1.0) != 1.0 ||
        (n->n_inputs > 2 && sc_attr_float(g, n, "beta", 1.0) != 1.0)) {
      snprintf(why, why_n, "a Gemm with transA, alpha or beta");
      return true;
    }
  }
  int64_t k = a->dims[a->rank - 1], nn = w->dims[tb ? 0 : 1];
  if (k % 16 || nn % 16)
    snprintf(why, why_n, "K=%lld, N=%lld: not multiples of 16", (long long)k, (long long)nn);
  return true;
}

static const int64_t *sort_keys;
static int cmp_key(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  if (sort_keys[a] != sort_keys[b]) return sort_keys[a] < sort_keys[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* The nodes added since node nn-1 move next to what they serve, the
 * others keeping their order: one read (through other added nodes) by an
 * existing node goes right before its first such reader (the quantization
 * before its product, the descaling before the product's old readers);
 * one read by none (an amax) right after the last node it reads. A
 * topological sort would move every backward node that reads forward
 * values alone into the forward, where its result would live until the
 * backward. Keys: existing node j 3j+1, before it 3j, after it 3j+2; ties
 * in creation order. *mark, an existing node's index, becomes its new one. */
static sc_status place_new(sc_graph *g, int32_t nn, int32_t *mark, sc_diag *d) {
  int32_t total = g->n_nodes;
  int64_t *key = sc_malloc(((size_t)total + 1) * sizeof *key);
  int32_t *anchor = sc_malloc(((size_t)total + 1) * sizeof *anchor);
  int32_t *order = sc_malloc(((size_t)total + 1) * sizeof *order);
  sc_node *nodes = sc_malloc(((size_t)total + 1) * sizeof *nodes);
  sc_status st = key && anchor && order && nodes
                     ? SC_OK
                     : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; st == SC_OK && i < total; i++) anchor[i] = INT32_MAX;
  /* the existing readers first, then the added nodes last to first: an
   * added node's readers are existing or added after it */
  for (int32_t q = 0; st == SC_OK && q < total; q++) {
    int32_t r = q < nn ? q : total - 1 - (q - nn);
    int32_t a = r < nn ? r : anchor[r];
    for (int32_t k = 0; a != INT32_MAX && k < g->nodes[r].n_inputs; k++) {
      int32_t v = g->nodes[r].inputs[k], p = v >= 0 ? g->values[v].producer : -1;
      if (p >= nn && a < anchor[p]) anchor[p] = a;
    }
  }
  for (int32_t i = 0; st == SC_OK && i < total; i++) {
    if (i < nn || anchor[i] != INT32_MAX) {
      key[i] = i < nn ? 3 * (int64_t)i + 1 : 3 * (int64_t)anchor[i];
      continue;
    }
    key[i] = 0;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
      int32_t v = g->nodes[i].inputs[k], p = v >= 0 ? g->values[v].producer : -1;
      int64_t after = p < 0 ? 0 : p < nn ? 3 * (int64_t)p + 2 : key[p];
      if (after > key[i]) key[i] = after;
    }
  }
  if (st == SC_OK) {
    for (int32_t i = 0; i < total; i++) order[i] = i;
    sort_keys = key;
    qsort(order, (size_t)total, sizeof *order, cmp_key);
    int32_t moved = *mark;
    for (int32_t i = 0; i < total; i++) {
      nodes[i] = g->nodes[order[i]];
      if (order[i] == moved) *mark = i;
    }
    memcpy(g->nodes, nodes, (size_t)total * sizeof *nodes);
    for (int32_t i = 0; i < total; i++)
      for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
        if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
    for (int32_t i = 0; st == SC_OK && i < total; i++) /* every input made before */
      for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
        int32_t v = g->nodes[i].inputs[k];
        SC_ASSERT(v < 0 || g->values[v].producer < i);
      }
  }
  sc_free(key);
  sc_free(anchor);
  sc_free(order);
  sc_free(nodes);
  return st;
}

sc_status sc_fp8_rewrite(sc_grad_ctx *c, int32_t *n_fwd_io, const int32_t *params,
                         int32_t n_params, int32_t history, sc_fp8_report *r, sc_diag *d) {
  sc_graph *g = c->g;
  int32_t n_fwd = *n_fwd_io;
  memset(r, 0, sizeof *r);
  r->ran = true;
  r->history = history;
  int32_t n_products = 0;
  for (int32_t i = 0; i < n_fwd; i++)
    n_products += g->nodes[i].op == SC_OP_MATMUL || g->nodes[i].op == SC_OP_GEMM;
  r->meta = sc_arena_array(&g->arena, (size_t)n_products * Q_COUNT + 1, sizeof *r->meta);
  if (!r->meta) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int32_t saved_node = c->node, nn0 = g->n_nodes;
  const char *saved_tag = c->tag;
  c->tag = "fp8";
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < n_fwd; i++) {
    char why[160];
    if (!linear_layer(g, i, params, n_params, why, sizeof why)) continue;
    if (why[0]) {
      if (r->n_listed < SC_FP8_MAX_LISTED) {
        sc_fp8_kept *e = &r->list[r->n_listed++];
        snprintf(e->node, sizeof e->node, "%s", g->nodes[i].name ? g->nodes[i].name : "?");
        snprintf(e->why, sizeof e->why, "%s", why);
      }
      r->kept++;
      continue;
    }
    layer L = {.node = i, .op = {g->nodes[i].inputs[0], g->nodes[i].inputs[1]},
               .q = {-1, -1, -1}, .qb = {-1, -1, -1}, .inv = {-1, -1, -1}, .grad_src = -1, .history = history,
               .r = r};
    c->node = i;
    char prefix[512];
    int pn = snprintf(prefix, sizeof prefix, "%s/grad/", g->nodes[i].name ? g->nodes[i].name : "");
    size_t n = pn > 0 && (size_t)pn < sizeof prefix ? (size_t)pn : 0;
    int32_t nn = g->n_nodes; /* the layer's own new nodes are not its products */
    st = rewrite_product(c, &L, i, prefix, n, d);
    for (int32_t b = n_fwd; st == SC_OK && n && b < nn; b++)
      if ((g->nodes[b].op == SC_OP_GEMM || g->nodes[b].op == SC_OP_MATMUL) &&
          !(g->nodes[b].flags & SC_NODE_DEAD) && has_prefix(g->nodes[b].name, prefix, n))
        st = rewrite_product(c, &L, b, prefix, n, d);
    r->fp8++;
  }
  c->node = saved_node;
  c->tag = saved_tag;
  /* the first backward node's new index: the forward's nodes, the added
   * ones placed among them included, come before it */
  int32_t first_bwd = n_fwd < nn0 ? n_fwd : -1;
  if (st == SC_OK) st = place_new(g, nn0, &first_bwd, d);
  if (st == SC_OK) *n_fwd_io = n_fwd < nn0 ? first_bwd : g->n_nodes;
  return st;
}

sc_status sc_fp8_update(sc_grad_ctx *c, sc_fp8_report *r, sc_diag *d) {
  sc_graph *g = c->g;
  for (int32_t k = 0; k < r->n_meta; k++) {
    sc_fp8_meta *m = &r->meta[k];
    int64_t n = r->history;
    const sc_dtype f = SC_DTYPE_F32;
    /* max over the history with this step's amax at index 0 */
    int32_t mx = gb_2(c, SC_OP_MAX, gb_reduce(c, SC_OP_REDUCE_MAX, m->history, NULL, 0, false),
                      m->amax);
    int32_t sf = gb_op(c, SC_OP_MIN, (int32_t[]){gb_2(c, SC_OP_DIV, gb_scalar(c, f, m->fp8_max), mx),
                                                 gb_scalar(c, f, FLT_MAX)}, 2);
    int32_t valid = gb_2(c, SC_OP_AND, gb_2(c, SC_OP_GREATER, mx, gb_scalar(c, f, 0.0)),
                         gb_1(c, SC_OP_NOT, gb_1(c, SC_OP_IS_INF, mx)));
    m->new_scale = gb_where(c, valid, sf, m->scale);
    /* rolled towards 0, index 0 zeroed: [0, h[2..n), max(h[0], amax)] */
    int32_t zero = gb_reshape(c, gb_scalar(c, f, 0.0), 1, (int64_t[]){1});
    int32_t h0 = gb_2(c, SC_OP_MAX, gb_op(c, SC_OP_SLICE,
                                           (int32_t[]){m->history, gb_ints(c, (int64_t[]){0}, 1),
                                                       gb_ints(c, (int64_t[]){1}, 1)}, 3),
                      gb_reshape(c, m->amax, 1, (int64_t[]){1}));
    m->kept_history = m->history; /* not applied: as it was */
    if (n == 1) {
      m->new_history = zero;
    } else if (n == 2) {
      m->new_history = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){zero, h0}, 2, "axis", 0);
    } else {
      int32_t mid = gb_op(c, SC_OP_SLICE,
                          (int32_t[]){m->history, gb_ints(c, (int64_t[]){2}, 1),
                                      gb_ints(c, (int64_t[]){n}, 1)}, 3);
      m->new_history = gb_op_i(c, SC_OP_CONCAT, (int32_t[]){zero, mid, h0}, 3, "axis", 0);
    }
    if (m->new_scale < 0 || m->new_history < 0 || m->kept_history < 0)
      return sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_NOMEM, NULL, NULL,
                         "fp8: the scaling update of '%s': %s", m->name, g->diag.msg);
  }
  return SC_OK;
}

void sc_fp8_print(const sc_fp8_report *r, FILE *f) {
  if (!r->ran) return;
  fprintf(f, "fp8: %d linear layer%s in FP8 (E4M3 forward, E5M2 gradients, amax history %d), "
             "%d left bf16\n",
          (int)r->fp8, r->fp8 == 1 ? "" : "s", (int)r->history, (int)r->kept);
  for (int32_t i = 0; i < r->n_listed; i++)
    fprintf(f, "  bf16 '%s': %s\n", r->list[i].node, r->list[i].why);
  if (r->kept > r->n_listed) fprintf(f, "  (and %d more)\n", (int)(r->kept - r->n_listed));
}
