/* train.c — the training step as one graph (train.h, docs/training.md).
 *
 * In order: tied copies become a Transpose of their source (train.h);
 * parameters become inputs; static shapes (bind-dims,
 * infer-shapes, which can no longer fold anything derived from a weight);
 * each attention core fused (passes/fuse_attention.h); the loss; sc_autodiff; the global gradient norm and optional clipping;
 * the optimizer update. Every node added here is built with the gradient
 * builders (grad_rule.h), named "train/<k>", its shape inferred at once.
 * Formulas are PyTorch's (torch.nn.functional.cross_entropy,
 * torch.nn.utils.clip_grad_norm_, torch.optim.SGD, torch.optim.AdamW). */
#include "passes/train.h"

#include <float.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes/autodiff.h"
#include "passes/grad_rule.h"
#include "passes/partition/cp.h"
#include "passes/pass.h"

void sc_train_opts_init(sc_train_opts *o, sc_optimizer_kind optimizer) {
  memset(o, 0, sizeof *o);
  o->loss = SC_LOSS_CROSS_ENTROPY;
  o->ignore_index = -100;
  o->optimizer = optimizer;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->eps = 1e-8;
  o->weight_decay = optimizer == SC_OPTIMIZER_ADAMW ? 0.01 : 0.0;
  o->activation_loading_horizon = 2;
}

/* Whether node n is a recompute clone ("<name>/recompute", recompute.c). */
static bool recompute_clone(const sc_node *n) {
  static const char SUFFIX[] = "/recompute";
  size_t len = n->name ? strlen(n->name) : 0, k = sizeof SUFFIX - 1;
  return len >= k && strcmp(n->name + len - k, SUFFIX) == 0;
}

/* The saved activations to offload (sc_train_opts.offload_activations):
 * values a live forward node (index < n_fwd) makes, neither inputs nor
 * constants, that a node after the forward reads; with recompute only
 * those a recompute clone reads (the checkpointed block inputs: what
 * activation checkpointing keeps). Names in forward order, in g's arena. */
static sc_status offload_names(sc_graph *g, int32_t n_fwd, bool recompute, sc_train_info *info,
                               sc_diag *d) {
  bool *read_after = sc_calloc((size_t)g->n_values + 1, sizeof *read_after);
  if (!read_after) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = n_fwd; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if ((n->flags & SC_NODE_DEAD) || (recompute && !recompute_clone(n))) continue;
    for (int32_t k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) read_after[n->inputs[k]] = true;
  }
  int32_t cnt = 0;
  for (int32_t pass = 0; pass < 2; pass++) {
    cnt = 0;
    for (int32_t i = 0; i < n_fwd; i++) {
      const sc_node *n = &g->nodes[i];
      if (n->flags & SC_NODE_DEAD) continue;
      for (int32_t j = 0; j < n->n_outputs; j++) {
        int32_t v = n->outputs[j];
        if (v < 0 || !read_after[v] || !g->values[v].name ||
            (g->values[v].flags & (SC_VALUE_INPUT | SC_VALUE_CONST | SC_VALUE_OUTPUT)))
          continue;
        if (pass == 1) info->offload[cnt] = g->values[v].name;
        cnt++;
      }
    }
    if (pass == 0) {
      info->offload = sc_arena_array(&g->arena, (size_t)cnt + 1, sizeof *info->offload);
      if (!info->offload) {
        sc_free(read_after);
        return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      }
    }
  }
  info->n_offload = cnt;
  sc_free(read_after);
  return SC_OK;
}

int64_t sc_train_param_model_numel(const sc_train_param *p) {
  if (p->vocab <= 0 || p->vocab_dim >= p->rank || p->dims[p->vocab_dim] <= 0) return p->numel;
  return p->numel / p->dims[p->vocab_dim] * p->vocab;
}

/* The vocabulary padding of weight `name`, or NULL. */
static const sc_train_vocab_pad *vocab_pad_of(const sc_train_opts *o, const char *name) {
  for (int32_t i = 0; name && i < o->n_vocab_pads; i++)
    if (strcmp(o->vocab_pads[i].param, name) == 0) return &o->vocab_pads[i];
  return NULL;
}

/* Whether weight `name` is kept fixed: a --freeze glob matches it, or the
 * model's name of a vocabulary-padded copy. */
static bool frozen(const sc_train_opts *o, const char *name) {
  const sc_train_vocab_pad *vp = vocab_pad_of(o, name);
  for (int32_t i = 0; i < o->n_freeze; i++)
    if (o->freeze[i] && (fnmatch(o->freeze[i], name, 0) == 0 ||
                         (vp && fnmatch(o->freeze[i], vp->name, 0) == 0)))
      return true;
  return false;
}

static bool is_float(sc_dtype t) {
  return sc_dtype_is_float(t) || t == SC_DTYPE_BF16 || t == SC_DTYPE_F16;
}

/* A new graph input of dtype t and shape dims, named exactly `name`. */
static int32_t new_input(sc_graph *g, const char *name, sc_dtype t, int32_t rank,
                         const int64_t *dims, sc_diag *d) {
  if (sc_graph_find_value(g, name) >= 0) {
    sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "the model already has a value named '%s'", name);
    return -1;
  }
  int32_t v = sc_graph_add_value(g, name);
  if (v < 0 || sc_value_set_shape(g, v, t, rank, dims) != SC_OK ||
      sc_graph_add_input(g, v) != SC_OK) {
    sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_NOMEM, NULL, NULL, "%s",
                g->diag.msg);
    return -1;
  }
  return v;
}

/* A graph output named exactly `name`: op of the n inputs in (its node
 * named `name` too), so that the output is that node's own result (an
 * Identity of a computed value would be a copy: an output has its own
 * buffer). */
static int32_t new_output_op(sc_grad_ctx *c, const char *name, sc_op op, const int32_t *in,
                             int32_t n, sc_diag *d) {
  sc_graph *g = c->g;
  for (int32_t i = 0; i < n; i++)
    if (in[i] < 0) return -1;
  if (sc_graph_find_value(g, name) >= 0) {
    sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "the model already has a value named '%s'", name);
    return -1;
  }
  int32_t out = sc_graph_add_value(g, name);
  int32_t node = out < 0 ? -1 : sc_graph_add_node(g, op, name, in, n, &out, 1);
  if (node < 0 || sc_ops[op].infer(g, &g->nodes[node]) != SC_OK ||
      sc_graph_add_output(g, out) != SC_OK) {
    sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_NOMEM, NULL, NULL, "%s",
                g->diag.msg);
    return -1;
  }
  return out;
}

/* x as a graph output named exactly `name` (an Identity). */
static int32_t new_output(sc_grad_ctx *c, const char *name, int32_t x, sc_diag *d) {
  return new_output_op(c, name, SC_OP_IDENTITY, &x, 1, d);
}

/* Builder failures carry g->diag; name the step that failed. */
static sc_status built(sc_graph *g, int32_t v, const char *what, sc_diag *d) {
  if (v >= 0) return SC_OK;
  if (d->status != SC_OK) return d->status;
  return sc_diag_set(d, g->diag.status ? g->diag.status : SC_ERR_INVALID, NULL, NULL,
                     "training step: %s: %s", what, g->diag.msg);
}

/* A weight with data that could be a parameter: a named float initializer
 * (--freeze aside). */
static bool is_weight(const sc_value *x) {
  return (x->flags & SC_VALUE_PARAM) && (x->flags & SC_VALUE_CONST) && x->data &&
         is_float(x->dtype) && x->name;
}

/* A parameter of this step: a weight, or (shape_only) any named float
 * initializer, data or not. */
static bool is_param(const sc_train_opts *o, const sc_value *x) {
  if (o->shape_only)
    return (x->flags & SC_VALUE_PARAM) && (x->flags & SC_VALUE_CONST) && x->producer < 0 &&
           is_float(x->dtype) && x->name;
  return is_weight(x);
}

/* A weight that may be a tied copy or its source: 2-D, neither a graph
 * input nor output. */
static bool is_matrix_weight(const sc_value *x) {
  return is_weight(x) && x->rank == 2 && !(x->flags & (SC_VALUE_INPUT | SC_VALUE_OUTPUT));
}

/* Whether 2-D b is bit for bit the transpose of a (train.h): a not
 * constant-valued, b not a itself. */
static bool is_transpose_copy(const sc_value *a, const sc_value *b) {
  if (a->rank != 2 || b->rank != 2 || a->dtype != b->dtype || a->dims[0] != b->dims[1] ||
      a->dims[1] != b->dims[0])
    return false;
  int64_t m = a->dims[0], n = a->dims[1];
  size_t es = sc_dtype_size(a->dtype);
  const unsigned char *pa = a->data, *pb = b->data;
  if (m * n < 2 || (m == n && memcmp(pa, pb, (size_t)(m * n) * es) == 0)) return false;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      if (memcmp(pb + (size_t)(j * m + i) * es, pa + (size_t)(i * n + j) * es, es) != 0)
        return false;
  for (int64_t e = 1; e < m * n; e++)
    if (memcmp(pa + (size_t)e * es, pa, es) != 0) return true;
  return false; /* constant-valued: equal by coincidence */
}

sc_status sc_train_find_ties(sc_graph *g, sc_train_tie **ties, int32_t *n_ties, sc_diag *d) {
  *ties = NULL;
  *n_ties = 0;
  int32_t n = 0;
  for (int32_t v = 0; v < g->n_values; v++) n += is_matrix_weight(&g->values[v]);
  if (n < 2) return SC_OK;
  /* the 2-D weights, each tied (a copy) or not: -1 or its source */
  int32_t *w = sc_arena_array(&g->arena, (size_t)n, sizeof *w);
  int32_t *src = sc_arena_array(&g->arena, (size_t)n, sizeof *src);
  if (!w || !src) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  n = 0;
  for (int32_t v = 0; v < g->n_values; v++)
    if (is_matrix_weight(&g->values[v])) {
      src[n] = -1;
      w[n++] = v;
    }
  int32_t found = 0;
  for (int32_t i = 0; i < n; i++) /* the earlier one is the source */
    for (int32_t j = i + 1; j < n && src[i] < 0; j++)
      if (src[j] < 0 && is_transpose_copy(&g->values[w[i]], &g->values[w[j]]))
        src[j] = w[i], found++;
  if (!found) return SC_OK;
  *ties = sc_arena_array(&g->arena, (size_t)found, sizeof **ties);
  if (!*ties) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t j = 0; j < n; j++)
    if (src[j] >= 0)
      (*ties)[(*n_ties)++] = (sc_train_tie){.name = g->values[w[j]].name,
                                            .source = g->values[src[j]].name,
                                            .value = w[j], .source_value = src[j]};
  return SC_OK;
}

sc_status sc_train_tie_refresh(sc_graph *g, const sc_train_tie *t, sc_diag *d) {
  const sc_value *a = &g->values[t->source_value];
  int64_t m = a->dims[0], n = a->dims[1];
  size_t es = sc_dtype_size(a->dtype);
  unsigned char *b = sc_arena_alloc(&g->arena, (size_t)(m * n) * es + 1);
  if (!b) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  const unsigned char *pa = a->data;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      memcpy(b + (size_t)(j * m + i) * es, pa + (size_t)(i * n + j) * es, es);
  uint32_t flags = g->values[t->value].flags;
  sc_status st = sc_value_set_data(g, t->value, a->dtype, 2, (int64_t[]){n, m}, b,
                                   (uint64_t)(m * n) * es, false);
  g->values[t->value].flags |= flags & (SC_VALUE_CONST | SC_VALUE_PARAM);
  g->values[t->value].ext_location = NULL; /* embedded now */
  if (st != SC_OK) *d = g->diag;
  return st;
}

/* Each tied copy becomes the output of a new Transpose of its source: its
 * readers are unchanged, it is no weight any more, and no value id moves
 * (info's params keep theirs). */
static sc_status tie_weights(sc_graph *g, sc_train_info *info, sc_diag *d) {
  sc_status st = sc_train_find_ties(g, &info->ties, &info->n_ties, d);
  for (int32_t k = 0; st == SC_OK && k < info->n_ties; k++) {
    const sc_train_tie *t = &info->ties[k];
    sc_value *b = &g->values[t->value];
    const void *bytes = b->data;
    b->data = NULL;
    b->data_bytes = 0;
    b->data_kind = SC_DATA_NONE;
    b->flags &= ~(uint32_t)(SC_VALUE_CONST | SC_VALUE_PARAM);
    sc_graph_release(g, bytes); /* the copy's bytes, when the graph owns them apart */
    char name[512];
    snprintf(name, sizeof name, "train/tie/%s", t->name);
    int32_t x = t->source_value, y = t->value;
    int32_t n = sc_graph_add_node(g, SC_OP_TRANSPOSE, name, &x, 1, &y, 1);
    sc_attr *perm = n < 0 ? NULL : sc_node_add_attr(g, n, "perm", SC_ATTR_INTS);
    int64_t *axes = perm ? sc_arena_array(&g->arena, 2, sizeof *axes) : NULL;
    if (!axes) return built(g, -1, t->name, d);
    axes[0] = 1; /* the two axes swapped */
    axes[1] = 0;
    perm->ints = axes;
    perm->n = 2;
    if (sc_ops[SC_OP_TRANSPOSE].infer(g, &g->nodes[n]) != SC_OK) return built(g, -1, t->name, d);
  }
  if (st == SC_OK && info->n_ties && sc_graph_toposort(g) != SC_OK)
    return built(g, -1, "node order", d);
  return st;
}

/* A forward node op(in) named "<base>/<what>" (not a gradient's name, so
 * its values count as the forward's); its output value, or -1. */
static int32_t fwd_node(sc_graph *g, sc_op op, const char *base, const char *what,
                        const int32_t *in, int32_t n_in, int32_t *node) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s", base, what);
  int32_t out = sc_graph_new_value(g, name);
  *node = out < 0 ? -1 : sc_graph_add_node(g, op, name, in, n_in, &out, 1);
  return *node < 0 ? -1 : out;
}

/* MatMul(X [..., K], Transpose(W) [K, N]) with W 2-D (a tied LM head, a
 * Linear exported with its transpose) becomes Gemm(X as [R, K], W,
 * transB) viewed back as [..., N]: the library call reads W transposed,
 * so neither the forward nor the gradients (Gemm's rule) copy W
 * transposed. The MatMul node becomes the Reshape back, so its output
 * keeps its id and readers. */
static sc_status matmul_transposed(sc_grad_ctx *c, sc_diag *d) {
  sc_graph *g = c->g;
  int32_t nn = g->n_nodes;
  bool changed = false;
  for (int32_t i = 0; i < nn; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->op != SC_OP_MATMUL || (n->flags & SC_NODE_DEAD) || n->n_inputs != 2 ||
        n->n_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0)
      continue;
    int32_t x = n->inputs[0], bt = n->inputs[1], p = g->values[bt].producer;
    if (p < 0 || g->nodes[p].op != SC_OP_TRANSPOSE || g->values[bt].rank != 2 ||
        g->values[x].rank < 2 || g->nodes[p].n_inputs != 1 || g->nodes[p].inputs[0] < 0)
      continue;
    const sc_attr *perm = sc_node_attr(&g->nodes[p], "perm");
    if (perm && (perm->kind != SC_ATTR_INTS || perm->n != 2 || perm->ints[0] != 1))
      continue; /* (no perm: reversed, the same for 2-D) */
    sc_value xv = g->values[x], yv = g->values[n->outputs[0]];
    int32_t w = g->nodes[p].inputs[0];
    int64_t k = xv.dims[xv.rank - 1], rows = k ? sc_value_numel(&xv) / k : 0;
    if (k <= 0 || yv.rank < 2) continue;
    const char *base = n->name;
    int32_t rn, gn;
    int32_t rows_k = gb_ints(c, (int64_t[]){rows, k}, 2);
    int32_t x2 = fwd_node(g, SC_OP_RESHAPE, base, "rows", (int32_t[]){x, rows_k}, 2, &rn);
    if (x2 < 0 || sc_ops[SC_OP_RESHAPE].infer(g, &g->nodes[rn]) != SC_OK)
      return built(g, -1, base, d);
    int32_t y2 = fwd_node(g, SC_OP_GEMM, base, "gemm", (int32_t[]){x2, w}, 2, &gn);
    sc_attr *tb = y2 < 0 ? NULL : sc_node_add_attr(g, gn, "transB", SC_ATTR_INT);
    if (!tb) return built(g, -1, base, d);
    tb->i = 1;
    if (sc_ops[SC_OP_GEMM].infer(g, &g->nodes[gn]) != SC_OK) return built(g, -1, base, d);
    int32_t shape = gb_ints(c, yv.dims, yv.rank);
    if (shape < 0) return built(g, -1, base, d);
    sc_node *m = &g->nodes[i]; /* the MatMul, now the Reshape back */
    m->op = SC_OP_RESHAPE;
    m->inputs[0] = y2;
    m->inputs[1] = shape;
    if (sc_ops[SC_OP_RESHAPE].infer(g, m) != SC_OK) return built(g, -1, base, d);
    changed = true;
  }
  if (changed && sc_graph_toposort(g) != SC_OK) return built(g, -1, "node order", d);
  return SC_OK;
}

/* Parameters: float initializers with data, not frozen, become inputs. */
static sc_status take_params(sc_graph *g, const sc_train_opts *o, sc_train_info *info,
                             sc_diag *d) {
  int32_t n = 0;
  for (int32_t v = 0; v < g->n_values; v++) {
    const sc_value *x = &g->values[v];
    if (is_param(o, x) && !frozen(o, x->name)) n++;
  }
  info->params = sc_arena_array(&g->arena, (size_t)n + 1, sizeof *info->params);
  if (!info->params) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  info->n_params = 0;
  int32_t nv = g->n_values;
  for (int32_t v = 0; v < nv; v++) {
    sc_value *x = &g->values[v];
    if (!is_param(o, x) || frozen(o, x->name)) continue;
    sc_train_param *p = &info->params[info->n_params++];
    int64_t numel = 1;
    for (int32_t k = 0; k < x->rank; k++) numel *= x->dims[k];
    *p = (sc_train_param){.name = x->name, .input = v, .grad = -1, .init = x->data,
                          .numel = numel, .dtype = x->dtype, .rank = x->rank};
    memcpy(p->dims, x->dims, sizeof p->dims);
    const sc_train_vocab_pad *vp = vocab_pad_of(o, x->name);
    if (vp) {
      p->model_name = vp->name;
      p->vocab_dim = vp->dim;
      p->vocab = vp->vocab;
    }
    x->data = NULL; /* the initial value stays alive with the graph */
    x->data_bytes = 0;
    x->data_kind = SC_DATA_NONE;
    x->flags &= ~(uint32_t)(SC_VALUE_CONST | SC_VALUE_PARAM);
    if (sc_graph_add_input(g, v) != SC_OK)
      return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  return SC_OK;
}

static bool is_aux(const sc_train_opts *o, const char *name) {
  for (int32_t k = 0; name && k < o->n_aux; k++)
    if (strcmp(o->aux[k].name, name) == 0) return true;
  return false;
}

/* The output named `name`; NULL: the only output that no auxiliary loss
 * names (-1: none, or several). */
static int32_t find_output(const sc_graph *g, const sc_train_opts *o, const char *name) {
  if (!name) {
    int32_t found = -1, n = 0;
    for (int32_t i = 0; i < g->n_outputs; i++)
      if (!is_aux(o, g->values[g->outputs[i]].name)) found = g->outputs[i], n++;
    return n == 1 ? found : -1;
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const char *n = g->values[g->outputs[i]].name;
    if (n && strcmp(n, name) == 0) return g->outputs[i];
  }
  return -1;
}

/* Σ rows·valid / Σ valid over every row, valid = (label != ignore_index)
 * in the rows' dtype. */
static int32_t label_mean(sc_grad_ctx *c, int32_t rows, int32_t labels, const sc_train_opts *o) {
  sc_graph *g = c->g;
  int64_t ig = o->ignore_index;
  int32_t igc = sc_graph_new_value(g, "train_c");
  if (rows < 0 || igc < 0 ||
      sc_value_set_data(g, igc, SC_DTYPE_I64, 0, NULL, &ig, sizeof ig, true) != SC_OK)
    return -1;
  int32_t keep = gb_1(c, SC_OP_NOT, gb_2(c, SC_OP_EQUAL, labels, igc));
  int32_t valid = gb_cast(c, keep, g->values[rows].dtype);
  if (valid < 0) return -1;
  int32_t r = g->values[labels].rank;
  int64_t all[SC_MAX_RANK];
  for (int32_t k = 0; k < r; k++) all[k] = k;
  int32_t num = gb_reduce_sum(c, gb_2(c, SC_OP_MUL, rows, valid), all, r, false);
  int32_t den = gb_reduce_sum(c, valid, all, r, false);
  return gb_2(c, SC_OP_DIV, num, den);
}

/* The dtype's most negative finite value: what a padded logit is masked
 * to (finite, so that its log-probability times a one-hot zero is 0). */
static double lowest_finite(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F16: return -65504.0;
  case SC_DTYPE_BF16: return -0x1.fep127;
  case SC_DTYPE_F64: return -DBL_MAX;
  default: return -FLT_MAX;
  }
}

/* Logits [.., V] that are a vocabulary-padded product's, sliced back
 * (vocab_pad.c: "<product>/vocab_unpad", perhaps then widened by a Cast):
 * the padded logits [.., Vp] in the logits' dtype, plus a constant mask
 * [Vp] that is 0 below V and lowest_finite above, so that a softmax over
 * them is the one over V, their split over the vocabulary is kept (no
 * gather for the Slice), and the padded columns' gradient is exactly 0.
 * -1 (g's diag clear) when the logits are no such slice. */
static int32_t padded_logits(sc_grad_ctx *c, int32_t logits, const sc_train_opts *o) {
  sc_graph *g = c->g;
  if (o->n_vocab_pads == 0) return -1;
  static const char unpad[] = "/vocab_unpad";
  const sc_value *lv = &g->values[logits];
  sc_dtype lt = lv->dtype;
  int32_t v = logits;
  for (int32_t pn = lv->producer; pn >= 0; pn = g->values[v].producer) {
    const sc_node *n = &g->nodes[pn];
    if (n->op == SC_OP_CAST && n->n_inputs == 1) {
      v = n->inputs[0];
      continue;
    }
    size_t len = n->name ? strlen(n->name) : 0;
    if (n->op != SC_OP_SLICE || len < sizeof unpad - 1 ||
        strcmp(n->name + len - (sizeof unpad - 1), unpad) != 0)
      return -1;
    int32_t x = n->inputs[0];
    const sc_value *xv = &g->values[x];
    int32_t r = lv->rank;
    if (xv->rank != r || r < 1 || xv->dims[r - 1] <= lv->dims[r - 1]) return -1;
    for (int32_t k = 0; k + 1 < r; k++)
      if (xv->dims[k] != lv->dims[k]) return -1;
    int64_t vocab = lv->dims[r - 1], vp = xv->dims[r - 1];
    if (xv->dtype != lt && (x = gb_cast(c, x, lt)) < 0) return -1;
    size_t es = sc_dtype_size(lt);
    unsigned char *bytes = sc_arena_alloc(&g->arena, (size_t)vp * es);
    if (!bytes) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory"), -1;
    int32_t mask = sc_graph_new_value(g, "train/vocab_mask");
    if (mask < 0) return -1;
    for (int64_t e = 0; e < vp; e++)
      sc_store_f64(lt, bytes, e, e < vocab ? 0.0 : lowest_finite(lt));
    if (sc_value_set_data(g, mask, lt, 1, &vp, bytes, (uint64_t)vp * es, false) != SC_OK)
      return -1;
    return gb_2(c, SC_OP_ADD, x, mask);
  }
  return -1;
}

/* The decomposed form (split_vocab_loss): LogSoftmax, the label's
 * log-probability picked by a one-hot product of Range == label, its mean
 * over the rows whose label is not ignore_index, negated. */
static int32_t cross_entropy_split(sc_grad_ctx *c, int32_t logits, int32_t labels,
                                   const sc_train_opts *o) {
  sc_graph *g = c->g;
  int32_t padded = padded_logits(c, logits, o);
  if (padded < 0 && g->diag.status != SC_OK) return -1;
  if (padded >= 0) logits = padded;
  sc_value lv = g->values[logits];
  int64_t last = lv.rank - 1, minus1 = -1, v = lv.dims[last];
  int32_t logp = gb_op_i(c, SC_OP_LOG_SOFTMAX, &logits, 1, "axis", -1);
  if (logp < 0) return -1;
  int64_t zero = 0, one = 1;
  /* the class ids Range(0, V, 1) */
  int32_t r0 = sc_graph_new_value(g, "train_c"), r1 = sc_graph_new_value(g, "train_c"),
          r2 = sc_graph_new_value(g, "train_c");
  if (r0 < 0 || r1 < 0 || r2 < 0 ||
      sc_value_set_data(g, r0, SC_DTYPE_I64, 0, NULL, &zero, sizeof zero, true) != SC_OK ||
      sc_value_set_data(g, r1, SC_DTYPE_I64, 0, NULL, &v, sizeof v, true) != SC_OK ||
      sc_value_set_data(g, r2, SC_DTYPE_I64, 0, NULL, &one, sizeof one, true) != SC_OK)
    return -1;
  int32_t cls = gb_op(c, SC_OP_RANGE, (int32_t[]){r0, r1, r2}, 3);
  int32_t lab = gb_2(c, SC_OP_UNSQUEEZE, labels, gb_ints(c, &minus1, 1));
  int32_t hit = gb_2(c, SC_OP_EQUAL, lab, cls);
  int32_t onehot = gb_cast(c, hit, lv.dtype);
  if (onehot < 0) return -1;
  int32_t picked = gb_reduce_sum(c, gb_2(c, SC_OP_MUL, logp, onehot), &last, 1, false);
  return gb_1(c, SC_OP_NEG, label_mean(c, picked, labels, o));
}

/* PyTorch's cross_entropy(logits, labels, ignore_index), reduction mean:
 * one SoftmaxCrossEntropy node (ir/op_nn.c) gives each row's loss and its
 * log-sum-exp, the loss is their mean over the rows whose label is not
 * ignore_index (label_mean). Logits that are a
 * widening Cast of bf16 or f16 values (the low-precision step's), or a
 * reshape of one, are read before the Cast (reshaped alike: a view; the
 * kernel computes in f32 either way, exactly), so
 * neither an f32 copy of the logits nor one of their gradient is made.
 * With split_vocab_loss, the decomposed form above. */
static int32_t cross_entropy(sc_grad_ctx *c, int32_t logits, const sc_train_opts *o,
                             sc_diag *d) {
  sc_graph *g = c->g;
  sc_value lv = g->values[logits];
  if (lv.rank < 1 || !is_float(lv.dtype)) {
    sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                "cross-entropy: the logits '%s' must be a float tensor of rank >= 1",
                lv.name ? lv.name : "?");
    return -1;
  }
  int32_t labels = new_input(g, "labels", SC_DTYPE_I64, lv.rank - 1, lv.dims, d);
  if (labels < 0) return -1;
  if (o->split_vocab_loss) return cross_entropy_split(c, logits, labels, o);
  int32_t x = logits, v = logits;
  for (int32_t pn = lv.producer; pn >= 0 && v >= 0; pn = g->values[v].producer) {
    sc_op op = g->nodes[pn].op;
    if (op == SC_OP_CAST) {
      sc_dtype st = g->values[g->nodes[pn].inputs[0]].dtype;
      if (lv.dtype == SC_DTYPE_F32 && (st == SC_DTYPE_BF16 || st == SC_DTYPE_F16))
        x = gb_reshape(c, g->nodes[pn].inputs[0], lv.rank, lv.dims);
      break;
    }
    if (op != SC_OP_RESHAPE && op != SC_OP_FLATTEN && op != SC_OP_SQUEEZE &&
        op != SC_OP_UNSQUEEZE)
      break;
    v = g->nodes[pn].inputs[0];
  }
  if (x < 0) return -1;
  static const char *const suffix[2] = {"rows", "lse"};
  int32_t outs[2];
  int32_t node = gb_node(c, SC_OP_SOFTMAX_CROSS_ENTROPY, (int32_t[]){x, labels}, 2, 2, suffix, outs);
  sc_attr *a = node < 0 ? NULL : sc_node_add_attr(g, node, "ignore_index", SC_ATTR_INT);
  if (!a) return -1;
  a->i = o->ignore_index;
  if (sc_ops[SC_OP_SOFTMAX_CROSS_ENTROPY].infer(g, &g->nodes[node]) != SC_OK) return -1;
  return label_mean(c, outs[0], labels, o);
}

/* mean((logits − targets)²) over every element. */
static int32_t mse(sc_grad_ctx *c, int32_t y, sc_diag *d) {
  sc_graph *g = c->g;
  sc_value yv = g->values[y];
  int32_t t = new_input(g, "targets", yv.dtype, yv.rank, yv.dims, d);
  if (t < 0) return -1;
  int32_t diff = gb_2(c, SC_OP_SUB, y, t);
  int32_t n, m = gb_begin(c, SC_OP_REDUCE_MEAN, (int32_t[]){gb_2(c, SC_OP_MUL, diff, diff)}, 1, &n);
  sc_attr *k = m < 0 ? NULL : sc_node_add_attr(g, n, "keepdims", SC_ATTR_INT);
  if (!k) return -1;
  k->i = 0;
  return gb_end(c, n, m);
}

static int32_t scalar_input(sc_graph *g, const char *name, sc_dtype t, sc_diag *d) {
  return new_input(g, name, t, 0, NULL, d);
}

/* The state input S of parameter p (zeros at the start) and its output. */
static int32_t state_input(sc_graph *g, const sc_train_param *p, const char *suffix, sc_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", p->name, suffix);
  sc_value x = g->values[p->input]; /* a copy: adding a value may move the array */
  return new_input(g, name, x.dtype, x.rank, x.dims, d);
}

/* Output "new:<name>": the value v when the step is applied (ok), else
 * the old value x, so that a skipped step leaves the state as it was even
 * when it is updated in place. */
static sc_status guarded_output(sc_grad_ctx *c, const char *name, int32_t ok, int32_t v,
                                int32_t x, sc_diag *d) {
  char out[512];
  snprintf(out, sizeof out, "new:%s", name);
  if (new_output_op(c, out, SC_OP_WHERE, (int32_t[]){ok, v, x}, 3, d) >= 0) return SC_OK;
  return built(c->g, -1, name, d) != SC_OK ? d->status : SC_ERR_INVALID;
}

static sc_status state_output(sc_grad_ctx *c, const sc_train_param *p, const char *suffix,
                              int32_t ok, int32_t v, int32_t x, sc_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", p->name, suffix);
  return guarded_output(c, name, ok, v, x, d);
}

/* One parameter's update; gr its (clipped) gradient, ok the scalar that
 * says whether the step is applied. */
static sc_status update(sc_grad_ctx *c, const sc_train_opts *o, const sc_train_param *p,
                        int32_t gr, int32_t lr, int32_t bc1, int32_t bc2, int32_t ok,
                        sc_diag *d) {
  sc_graph *g = c->g;
  int32_t x = p->input;
  sc_dtype t = g->values[x].dtype;
  int32_t np = -1;
  if (o->optimizer == SC_OPTIMIZER_SGD) {
    if (o->weight_decay != 0)
      gr = gb_2(c, SC_OP_ADD, gr, gb_2(c, SC_OP_MUL, x, gb_scalar(c, t, o->weight_decay)));
    if (o->momentum != 0) {
      int32_t buf = state_input(g, p, "momentum_buffer", d);
      if (buf < 0) return d->status;
      int32_t nb = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, buf, gb_scalar(c, t, o->momentum)), gr);
      sc_status st = state_output(c, p, "momentum_buffer", ok, nb, buf, d);
      if (st != SC_OK) return st;
      gr = o->nesterov ? gb_2(c, SC_OP_ADD, gr, gb_2(c, SC_OP_MUL, nb, gb_scalar(c, t, o->momentum)))
                       : nb;
    }
    np = gb_2(c, SC_OP_SUB, x, gb_2(c, SC_OP_MUL, gr, lr));
  } else {
    int32_t m = state_input(g, p, "exp_avg", d), v = m < 0 ? -1 : state_input(g, p, "exp_avg_sq", d);
    if (v < 0) return d->status;
    int32_t decayed =
        o->weight_decay != 0
            ? gb_2(c, SC_OP_MUL, x,
                   gb_2(c, SC_OP_SUB, gb_scalar(c, t, 1.0),
                        gb_2(c, SC_OP_MUL, lr, gb_scalar(c, t, o->weight_decay))))
            : x;
    int32_t nm = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, m, gb_scalar(c, t, o->beta1)),
                      gb_2(c, SC_OP_MUL, gr, gb_scalar(c, t, 1.0 - o->beta1)));
    int32_t nv = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_MUL, v, gb_scalar(c, t, o->beta2)),
                      gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_MUL, gr, gr),
                           gb_scalar(c, t, 1.0 - o->beta2)));
    /* p −= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + eps) */
    int32_t denom = gb_2(c, SC_OP_ADD, gb_2(c, SC_OP_DIV, gb_1(c, SC_OP_SQRT, nv), gb_1(c, SC_OP_SQRT, bc2)),
                         gb_scalar(c, t, o->eps));
    int32_t stepv = gb_2(c, SC_OP_MUL, gb_2(c, SC_OP_DIV, lr, bc1), gb_2(c, SC_OP_DIV, nm, denom));
    np = gb_2(c, SC_OP_SUB, decayed, stepv);
    sc_status st = state_output(c, p, "exp_avg", ok, nm, m, d);
    if (st == SC_OK) st = state_output(c, p, "exp_avg_sq", ok, nv, v, d);
    if (st != SC_OK) return st;
  }
  if (built(g, np, p->name, d) != SC_OK) return d->status;
  return guarded_output(c, p->name, ok, np, x, d);
}

/* Whether the step is applied: loss and gradient norm finite (and, with
 * gradient accumulation, this run the step's last microbatch: the input
 * "train:apply"). Output "train:applied" says what the graph decided. */
static int32_t applied_flag(sc_grad_ctx *c, const sc_train_opts *o, int32_t loss, int32_t norm,
                            sc_diag *d) {
  /* non-finite when either is */
  int32_t s = o->pipeline ? norm : gb_2(c, SC_OP_ADD, loss, norm);
  int32_t ok = gb_1(c, SC_OP_NOT, gb_2(c, SC_OP_OR, gb_1(c, SC_OP_IS_NAN, s),
                                       gb_1(c, SC_OP_IS_INF, s)));
  if (ok >= 0 && o->grad_accum > 1 && !o->pipeline) {
    int32_t last = scalar_input(c->g, "train:apply", SC_DTYPE_BOOL, d);
    ok = last < 0 ? -1 : gb_2(c, SC_OP_AND, ok, last);
  }
  if (built(c->g, ok, "the step's finiteness check", d) != SC_OK) return -1;
  return new_output(c, "train:applied", ok, d) < 0 ? -1 : ok;
}

/* Value y (no producer now) becomes Cast(low value yl) to f32, a node
 * "train/bf16/<k>". */
static sc_status widen(sc_grad_ctx *c, int32_t yl, int32_t y, sc_diag *d) {
  sc_graph *g = c->g;
  char name[512];
  snprintf(name, sizeof name, "train/bf16/%d", (int)(*c->counter)++);
  int32_t cn = sc_graph_add_node(g, SC_OP_CAST, name, &yl, 1, &y, 1);
  sc_attr *to = cn < 0 ? NULL : sc_node_add_attr(g, cn, "to", SC_ATTR_INT);
  if (!to) return built(g, -1, "bf16 casts", d);
  to->i = sc_dtype_to_onnx(SC_DTYPE_F32);
  if (sc_ops[SC_OP_CAST].infer(g, &g->nodes[cn]) != SC_OK) return built(g, -1, "bf16 casts", d);
  return SC_OK;
}

/* Mixed precision: each f32 MatMul/Gemm of the forward graph computes in
 * low (bf16 or f16) between casts (train.h); the casts are appended, then
 * the node order is restored. */
static sc_status to_low_precision(sc_grad_ctx *c, sc_dtype low, sc_diag *d) {
  sc_graph *g = c->g;
  int32_t nn = g->n_nodes, nv = g->n_values;
  /* cast_of[x]: the one Cast of value x to low, made for its first product
   * reader; the others read it too (Llama's normed input feeds the q, k and
   * v products: one bf16 copy, computed and saved once, not three) */
  int32_t *cast_of = sc_malloc((size_t)nv * sizeof *cast_of);
  if (!cast_of) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t v = 0; v < nv; v++) cast_of[v] = -1;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < nn && st == SC_OK; i++) {
    const sc_node *n = &g->nodes[i];
    if ((n->op != SC_OP_MATMUL && n->op != SC_OP_GEMM) || (n->flags & SC_NODE_DEAD) ||
        n->n_outputs != 1 || g->values[n->outputs[0]].dtype != SC_DTYPE_F32)
      continue;
    int32_t ni = n->n_inputs, out = n->outputs[0];
    for (int32_t k = 0; k < ni && st == SC_OK; k++) {
      int32_t x = g->nodes[i].inputs[k];
      if (x < 0 || g->values[x].dtype != SC_DTYPE_F32) continue;
      int32_t xb = x < nv && cast_of[x] >= 0 ? cast_of[x] : gb_cast(c, x, low);
      if (xb < 0) st = built(g, -1, "bf16 casts", d);
      else g->nodes[i].inputs[k] = xb;
      if (xb >= 0 && x < nv) cast_of[x] = xb;
    }
    int32_t yb = st == SC_OK ? sc_graph_new_value(g, "bf16_product") : -1;
    if (st == SC_OK && yb < 0) st = built(g, -1, "bf16 casts", d);
    if (st != SC_OK) break;
    g->nodes[i].outputs[0] = yb;
    g->values[yb].producer = i;
    if (sc_ops[g->nodes[i].op].infer(g, &g->nodes[i]) != SC_OK) {
      st = built(g, -1, "bf16 product", d);
      break;
    }
    /* the old value, now the cast back to f32: its readers are unchanged */
    st = widen(c, yb, out, d);
  }
  sc_free(cast_of);
  if (st != SC_OK) return st;
  if (sc_graph_toposort(g) != SC_OK) return built(g, -1, "node order", d);
  return SC_OK;
}

/* Autocast's rule for what a low-precision product feeds (docs/training.md,
 * "Mixed precision"): a node that moves data (Reshape, Transpose, Split,
 * ...) or computes an activation-like elementwise function computes in
 * low when an input is a low value widened to f32 and every other float
 * input is a constant or smaller than the output (a bias, a scale, a
 * mask: cast to low). Such a node then reads the low values, writes a low
 * output, and its old f32 output becomes a Cast of that one, read only by
 * what stays f32: LayerNorm, Softmax, reductions, the loss, and the
 * residual stream (an Add of a full-size f32 value: bf16 + f32 is f32). A
 * Cast to low of a widened value is the low value itself, so a product
 * reads it directly. What the backward saves of such a chain (a GELU's
 * input and its pieces, the attention's scores, Q, K, V) is then low; the
 * widening Casts nothing reads die. Exp, Log, Sqrt, Reciprocal and
 * Softplus stay f32 (autocast's fp32 list). */
bool sc_train_low_op(sc_op op) {
  switch (op) {
    case SC_OP_RESHAPE: case SC_OP_TRANSPOSE: case SC_OP_SQUEEZE: case SC_OP_UNSQUEEZE:
    case SC_OP_FLATTEN: case SC_OP_IDENTITY: case SC_OP_SPLIT: case SC_OP_SLICE:
    case SC_OP_CONCAT: case SC_OP_EXPAND: case SC_OP_ADD: case SC_OP_SUB: case SC_OP_MUL:
    case SC_OP_DIV: case SC_OP_NEG: case SC_OP_POW: case SC_OP_TANH: case SC_OP_ERF:
    case SC_OP_SIGMOID: case SC_OP_RELU: case SC_OP_GELU: case SC_OP_LEAKY_RELU:
    case SC_OP_WHERE:
      return true;
    default:
      return false;
  }
}

/* A new value of dtype t named "<name of v>/<t>" (an activation's name,
 * so that the memory report counts it as one). */
static int32_t low_value(sc_graph *g, int32_t v, sc_dtype t) {
  char name[600];
  snprintf(name, sizeof name, "%s/%s", g->values[v].name ? g->values[v].name : "t",
           sc_dtype_name(t));
  return sc_graph_new_value(g, name);
}

/* twin[0 .. g->n_values), -1 for the values added since *cap was set. */
static bool twins_fit(const sc_graph *g, int32_t **twin, int32_t *cap) {
  if (g->n_values <= *cap) return true;
  int32_t n = g->n_values * 2;
  int32_t *t = sc_realloc(*twin, (size_t)n * sizeof *t);
  if (!t) return false;
  for (int32_t v = *cap; v < n; v++) t[v] = -1;
  *twin = t;
  *cap = n;
  return true;
}

/* The Casts nothing reads any more (the widenings of values now read low,
 * the casts to low of those) leave the graph now, last first, so that a product has
 * its one reader again for what follows the chain (the tensor-parallel
 * patterns, passes/partition/tp.c, follow a product to its only reader). */
static sc_status drop_unread_casts(sc_graph *g, sc_diag *d) {
  int32_t *readers = sc_calloc((size_t)g->n_values + 1, sizeof *readers);
  if (!readers) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; !(g->nodes[i].flags & SC_NODE_DEAD) && k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] >= 0) readers[g->nodes[i].inputs[k]]++;
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    sc_node *n = &g->nodes[i];
    int32_t y = n->n_outputs == 1 ? n->outputs[0] : -1;
    if (n->op != SC_OP_CAST || (n->flags & SC_NODE_DEAD) || y < 0 || readers[y] > 0 ||
        (g->values[y].flags & SC_VALUE_OUTPUT))
      continue;
    n->flags |= SC_NODE_DEAD;
    if (n->inputs[0] >= 0) readers[n->inputs[0]]--;
  }
  sc_free(readers);
  /* out of the node list (their outputs stay values nothing produces or
   * reads, until dce): no value id moves */
  int32_t k = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) g->values[n->outputs[j]].producer = n->flags & SC_NODE_DEAD ? -1 : k;
    if (!(n->flags & SC_NODE_DEAD)) g->nodes[k++] = *n;
  }
  g->n_nodes = k;
  return SC_OK;
}

/* The Casts added after node nn-1 move next to what they serve: a widening
 * Cast right after the node that made its input, a cast of a bias, a scale
 * or a mask right before its first reader. (A topological sort would hoist
 * every product's weight cast to the start, ahead of a later-made bias
 * cast: the casts would then all live from the start, and the parameters'
 * forward order, which the gradient norm's grouping follows, would
 * change.) */
static sc_status place_casts(sc_graph *g, int32_t nn, sc_diag *d) {
  int32_t total = g->n_nodes;
  int32_t *key = sc_malloc(((size_t)total + 1) * sizeof *key); /* 2 x slot (+1: after) */
  if (!key) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < nn; i++) key[i] = 2 * i + 1;
  for (int32_t i = nn; i < total; i++) {
    int32_t x = g->nodes[i].inputs[0], p = x >= 0 ? g->values[x].producer : -1;
    int32_t y = g->nodes[i].outputs[0], first = INT32_MAX;
    for (int32_t j = 0; j < nn && first == INT32_MAX; j++)
      for (int32_t k = 0; k < g->nodes[j].n_inputs; k++)
        if (g->nodes[j].inputs[k] == y) first = j;
    key[i] = p >= 0 && p < nn ? 2 * p + 2 : first < INT32_MAX ? 2 * first : 2 * nn + 2;
  }
  sc_status st = sc_graph_order_nodes(g, key);
  sc_free(key);
  return st == SC_OK ? SC_OK : sc_diag_set(d, st, NULL, NULL, "out of memory");
}

static sc_status low_chains(sc_grad_ctx *c, sc_dtype low, sc_diag *d) {
  sc_graph *g = c->g;
  int32_t nn = g->n_nodes, cap = 0, *twin = NULL; /* twin[v]: the low value f32 v widens */
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < nn; i++) {
    if (!twins_fit(g, &twin, &cap)) {
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      break;
    }
    sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    /* a Cast to low of a widened value is that value: its readers read it */
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k], p = x >= 0 ? g->values[x].producer : -1;
      if (p < 0 || g->nodes[p].op != SC_OP_CAST || g->values[x].dtype != low) continue;
      int32_t w = g->nodes[p].inputs[0];
      if (w >= 0 && twin[w] >= 0) n->inputs[k] = twin[w];
    }
    if (n->op == SC_OP_CAST) { /* widening: low -> f32, or f32 -> f32 of a widened value */
      int32_t x = n->inputs[0], y = n->outputs[0];
      if (x >= 0 && y >= 0 && g->values[y].dtype == SC_DTYPE_F32)
        twin[y] = g->values[x].dtype == low ? x : twin[x];
      continue;
    }
    if (!sc_train_low_op(n->op) || n->n_outputs < 1 || n->n_outputs > 64 || n->n_inputs > 64) continue;
    bool any = false, ok = true;
    int64_t out_numel = -1;
    for (int32_t j = 0; j < n->n_outputs && ok; j++) {
      int32_t y = n->outputs[j];
      ok = y >= 0 && g->values[y].dtype == SC_DTYPE_F32 && !(g->values[y].flags & SC_VALUE_OUTPUT);
      if (ok && sc_value_numel(&g->values[y]) > out_numel) out_numel = sc_value_numel(&g->values[y]);
    }
    for (int32_t k = 0; k < n->n_inputs && ok; k++) {
      int32_t x = n->inputs[k];
      if (x < 0 || g->values[x].dtype != SC_DTYPE_F32) continue;
      if (twin[x] >= 0) any = true;
      else ok = (g->values[x].flags & SC_VALUE_CONST) || sc_value_numel(&g->values[x]) < out_numel;
    }
    if (!any || !ok) continue;
    int32_t ni = n->n_inputs, no = n->n_outputs, old[64];
    for (int32_t k = 0; k < ni && st == SC_OK; k++) {
      int32_t x = g->nodes[i].inputs[k];
      if (x < 0 || g->values[x].dtype != SC_DTYPE_F32) continue;
      int32_t xl = twin[x] >= 0 ? twin[x] : gb_cast(c, x, low);
      if (xl < 0) st = built(g, -1, "low-precision chains", d);
      else g->nodes[i].inputs[k] = xl;
    }
    for (int32_t j = 0; j < no && st == SC_OK; j++) {
      old[j] = g->nodes[i].outputs[j];
      int32_t yl = low_value(g, old[j], low);
      if (yl < 0) st = built(g, -1, "low-precision chains", d);
      else {
        g->nodes[i].outputs[j] = yl;
        g->values[yl].producer = i;
      }
    }
    if (st == SC_OK && sc_ops[g->nodes[i].op].infer(g, &g->nodes[i]) != SC_OK)
      st = built(g, -1, "low-precision chains", d);
    if (st == SC_OK && !twins_fit(g, &twin, &cap))
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    /* each old output, now the widening Cast of the new one: what stays
     * f32 reads it unchanged */
    for (int32_t j = 0; j < no && st == SC_OK; j++) {
      int32_t yl = g->nodes[i].outputs[j];
      st = widen(c, yl, old[j], d);
      twin[old[j]] = yl;
    }
  }
  sc_free(twin);
  if (st == SC_OK) st = place_casts(g, nn, d);
  return st == SC_OK ? drop_unread_casts(g, d) : st;
}

/* order[0 .. n_params): the parameters by their first reader among the
 * forward's nodes (those never read last, in their own order), so that the
 * gradient norm's sum runs in the forward's order: pipeline stages are
 * runs of the forward, and each stage's partial sum follows the last
 * (passes/partition/pipe_train.c). */
static void forward_order(const sc_graph *g, int32_t n_fwd, const sc_train_info *info,
                          int32_t *order) {
  int32_t n = info->n_params;
  for (int32_t k = 0; k < n; k++) order[k] = k;
  int32_t *first = sc_malloc(((size_t)g->n_values + 1) * sizeof *first);
  if (!first) return; /* the parameters' own order: correct, only not pipelined */
  for (int32_t v = 0; v < g->n_values; v++) first[v] = INT32_MAX;
  for (int32_t i = n_fwd - 1; i >= 0; i--)
    for (int32_t j = 0; j < g->nodes[i].n_inputs; j++)
      if (g->nodes[i].inputs[j] >= 0) first[g->nodes[i].inputs[j]] = i;
  for (int32_t a = 1; a < n; a++) { /* insertion sort: stable */
    int32_t k = order[a], fk = first[info->params[k].input], b = a;
    for (; b > 0 && first[info->params[order[b - 1]].input] > fk; b--) order[b] = order[b - 1];
    order[b] = k;
  }
  sc_free(first);
}

/* loss + Σ coef_k · aux_k over o->aux: each a float scalar output of the
 * model; added in the loss's dtype, in the order given. loss NULL: only
 * checks them (before the loss is looked for, so that a misspelt name is
 * what the error names). */
static sc_status add_aux_losses(sc_grad_ctx *c, const sc_train_opts *o, int32_t *loss,
                                sc_diag *d) {
  sc_graph *g = c->g;
  for (int32_t k = 0; k < o->n_aux; k++) {
    const sc_aux_loss *a = &o->aux[k];
    int32_t v = find_output(g, o, a->name);
    if (v < 0)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "--aux-loss %s: the model has no output named '%s'", a->name, a->name);
    const sc_value *x = &g->values[v];
    if (x->rank != 0 || !is_float(x->dtype))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "--aux-loss %s: the output must be a float scalar, it is %s of rank %d",
                         a->name, sc_dtype_name(x->dtype), (int)x->rank);
    if (!isfinite(a->coef))
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "--aux-loss %s: coefficient %g",
                         a->name, a->coef);
    if (!loss) continue;
    sc_dtype t = g->values[*loss].dtype;
    int32_t term = gb_2(c, SC_OP_MUL, gb_cast(c, v, t), gb_scalar(c, t, a->coef));
    *loss = term < 0 ? -1 : gb_2(c, SC_OP_ADD, *loss, term);
    sc_status st = built(g, *loss, "an auxiliary loss", d);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

sc_status sc_train_build(sc_graph *g, const sc_train_opts *o, sc_train_info *info, sc_diag *d) {
  memset(info, 0, sizeof *info);
  sc_status st = o->untie || o->shape_only ? SC_OK : tie_weights(g, info, d);
  if (st == SC_OK) st = take_params(g, o, info, d);
  if (st != SC_OK) return st;
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  /* fuse-norm and fuse-gelu before the precision casts and autodiff, as
   * the import's pipeline runs them (a norm or GELU the model wrote as one
   * op is one here too: its backward saves only its inputs) */
  if (sc_run_passes(g, "bind-dims,infer-shapes,fuse-norm,fuse-gelu", &po) != SC_OK) {
    *d = g->diag;
    return d->status;
  }
  int32_t counter = 0;
  sc_grad_ctx c = {.g = g, .node = -1, .counter = &counter};
  if ((st = matmul_transposed(&c, d)) != SC_OK) return st;
  if ((o->bf16 || o->fp16 || o->fp8) &&
      ((st = to_low_precision(&c, o->fp16 ? SC_DTYPE_F16 : SC_DTYPE_BF16, d)) != SC_OK ||
       (st = low_chains(&c, o->fp16 ? SC_DTYPE_F16 : SC_DTYPE_BF16, d)) != SC_OK))
    return st;
  /* after the casts (the fused node computes in the products' dtype),
   * before autodiff (its gradient is the fused rule's) */
  if (!o->no_fuse_attention) {
    int32_t *pv = sc_calloc((size_t)info->n_params + 1, sizeof *pv);
    if (!pv) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    for (int32_t k = 0; k < info->n_params; k++) pv[k] = info->params[k].input;
    st = sc_fuse_attention(g, pv, info->n_params, &info->attention);
    sc_free(pv);
    if (st != SC_OK) {
      *d = g->diag;
      return st;
    }
  }
  if ((st = add_aux_losses(&c, o, NULL, d)) != SC_OK) return st;
  int32_t y = find_output(g, o, o->logits);
  if (y < 0 && o->logits)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "the model has no output named '%s'",
                       o->logits);
  if (y < 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the model has %d outputs: name the one the loss reads (--logits NAME)",
                       (int)g->n_outputs);
  int32_t loss = o->loss == SC_LOSS_CROSS_ENTROPY ? cross_entropy(&c, y, o, d)
                 : o->loss == SC_LOSS_MSE         ? mse(&c, y, d)
                                                  : y;
  if ((st = built(g, loss, "the loss", d)) != SC_OK) return st;
  if ((st = add_aux_losses(&c, o, &loss, d)) != SC_OK) return st;
  if (o->loss == SC_LOSS_CROSS_ENTROPY && g->values[y].rank > 0)
    info->classes = g->values[y].dims[g->values[y].rank - 1];
  /* the model's own outputs are not the step's: nothing reads them, and a
   * partitioned step would gather them (the logits) every step */
  for (int32_t i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].flags &= ~(uint32_t)SC_VALUE_OUTPUT;
  g->n_outputs = 0;
  int32_t loss_out = new_output(&c, "loss", loss, d);
  if ((st = built(g, loss_out, "the loss output", d)) != SC_OK) return st;
  /* context parallelism: the forward and the loss in the sequence's
   * zig-zag order (the labels or targets with it), before autodiff */
  if (o->cp > 1) {
    int32_t seq_in = sc_graph_find_value(g, o->loss == SC_LOSS_CROSS_ENTROPY ? "labels"
                                            : o->loss == SC_LOSS_MSE         ? "targets"
                                                                             : "");
    if (sc_cp_prepare_graph(g, o->cp, o->cp_batch_split, &seq_in,
                            seq_in >= 0 && g->values[seq_in].rank >= 2) !=
        SC_OK) {
      *d = g->diag;
      return d->status;
    }
  }

  int32_t *params = sc_arena_array(&g->arena, (size_t)info->n_params + 1, sizeof *params);
  int32_t *grads = sc_arena_array(&g->arena, (size_t)info->n_params + 1, sizeof *grads);
  if (!params || !grads) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t k = 0; k < info->n_params; k++) params[k] = info->params[k].input;
  int32_t seed_loss = loss, inv_scale = -1;
  if (o->fp16) { /* dynamic loss scaling: differentiate loss · scale */
    sc_dtype lt = g->values[loss].dtype;
    int32_t scale = scalar_input(g, "train:loss_scale", lt, d);
    inv_scale = scale < 0 ? -1 : scalar_input(g, "train:inv_scale", lt, d);
    if (inv_scale < 0) return d->status;
    seed_loss = gb_2(&c, SC_OP_MUL, loss, scale);
    if ((st = built(g, seed_loss, "loss scaling", d)) != SC_OK) return st;
  }
  int32_t n_fwd = g->n_nodes; /* the forward and the loss; autodiff appends the backward */
  if ((st = sc_autodiff(g, seed_loss, params, info->n_params, grads, d)) != SC_OK) return st;
  if (o->fp8 && (st = sc_fp8_rewrite(&c, &n_fwd, params, info->n_params,
                                     o->fp8_history > 0 ? o->fp8_history : SC_FP8_DEFAULT_HISTORY,
                                     &info->fp8, d)) != SC_OK)
    return st;
  if ((st = sc_recompute(g, o->recompute, n_fwd, params, info->n_params, &info->recompute, d)) !=
      SC_OK)
    return st;
  if (o->offload_activations &&
      (st = offload_names(g, n_fwd, o->recompute != SC_RECOMPUTE_NONE, info, d)) != SC_OK)
    return st;
  /* the gradients "grad:P" stay values (the update reads them) but are not
   * outputs: an output keeps its own buffer to the end of the step */
  for (int32_t k = 0; k < info->n_params; k++)
    for (int32_t i = 0; grads[k] >= 0 && i < g->n_outputs; i++)
      if (g->outputs[i] == grads[k]) {
        memmove(g->outputs + i, g->outputs + i + 1,
                (size_t)(g->n_outputs - i - 1) * sizeof *g->outputs);
        g->n_outputs--;
        g->values[grads[k]].flags &= ~(uint32_t)SC_VALUE_OUTPUT;
        break;
      }
  for (int32_t k = 0; inv_scale >= 0 && k < info->n_params; k++)
    if (grads[k] >= 0 && (st = built(g, grads[k] = gb_2(&c, SC_OP_MUL, grads[k], inv_scale),
                                     "loss scaling", d)) != SC_OK)
      return st;

  /* the global gradient norm, and clipping by it. The squares are summed
   * in forward order, NORM_GROUP parameters at a time, and the groups'
   * sums then added up: a pipelined step keeps a group inside its chunk
   * and hands the last chunk one scalar per group, not one per parameter
   * (passes/partition/pipe_train.c, "norm") */
  enum { NORM_GROUP = 16 };
  int32_t norm2 = -1, part = -1, in_part = 0;
  sc_dtype t = g->values[loss].dtype;
  int32_t accum = o->grad_accum > 1 ? o->grad_accum : 1;
  info->runs = accum > 1 && !o->pipeline ? accum : 1;
  int32_t *order = sc_arena_array(&g->arena, (size_t)info->n_params + 1, sizeof *order);
  if (!order) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  forward_order(g, n_fwd, info, order);
  for (int32_t kk = 0; kk < info->n_params; kk++) {
    int32_t k = order[kk];
    if (grads[k] >= 0 && accum > 1) { /* the step's sum so far, this one added, mean of K */
      const sc_train_param *p = &info->params[k];
      char name[512];
      snprintf(name, sizeof name, "accum:%s", p->name);
      sc_value x = g->values[p->input]; /* a copy: adding a value may move the array */
      int32_t acc = new_input(g, name, x.dtype, x.rank, x.dims, d);
      if (acc < 0) return d->status;
      snprintf(name, sizeof name, "new:accum:%s", p->name);
      int32_t sum = new_output_op(&c, name, SC_OP_ADD, (int32_t[]){acc, grads[k]}, 2, d);
      if ((st = built(g, sum, "gradient accumulation", d)) != SC_OK) return st;
      grads[k] = gb_2(&c, SC_OP_MUL, sum, gb_scalar(&c, x.dtype, 1.0 / accum));
      if ((st = built(g, grads[k], "gradient accumulation", d)) != SC_OK) return st;
    }
    info->params[k].grad = grads[k];
    if (grads[k] < 0) continue;
    info->n_trainable++;
    info->trainable_numel += sc_train_param_model_numel(&info->params[k]);
    sc_value gv = g->values[grads[k]]; /* a copy: builders may move the array */
    int64_t axes[SC_MAX_RANK];
    for (int32_t a = 0; a < gv.rank; a++) axes[a] = a;
    int32_t sq = gb_2(&c, SC_OP_MUL, grads[k], grads[k]);
    int32_t s = gb_reduce_sum(&c, sq, axes, gv.rank, false);
    s = gb_cast(&c, s, t); /* s is gv.dtype: a Cast only when that is not t */
    part = part < 0 ? s : gb_2(&c, SC_OP_ADD, part, s);
    if ((st = built(g, part, "gradient norm", d)) != SC_OK) return st;
    if (++in_part == NORM_GROUP) { /* the group's sum joins the total */
      norm2 = norm2 < 0 ? part : gb_2(&c, SC_OP_ADD, norm2, part);
      if ((st = built(g, norm2, "gradient norm", d)) != SC_OK) return st;
      part = -1;
      in_part = 0;
    }
  }
  if (part >= 0) {
    norm2 = norm2 < 0 ? part : gb_2(&c, SC_OP_ADD, norm2, part);
    if ((st = built(g, norm2, "gradient norm", d)) != SC_OK) return st;
  }
  /* parameters without a gradient (the loss does not reach them, or only
   * through non-differentiable inputs such as running statistics) are
   * constants again: nothing feeds or updates them */
  for (int32_t k = 0; k < info->n_params; k++) {
    const sc_train_param *p = &info->params[k];
    if (p->grad >= 0) continue;
    sc_value *v = &g->values[p->input];
    uint64_t bytes = (uint64_t)p->numel * sc_dtype_size(v->dtype);
    v->data = p->init;
    v->data_bytes = bytes;
    v->data_kind = SC_DATA_BORROWED;
    v->flags = (v->flags & ~(uint32_t)SC_VALUE_INPUT) | SC_VALUE_CONST | SC_VALUE_PARAM;
    for (int32_t i = 0; i < g->n_inputs; i++)
      if (g->inputs[i] == p->input) {
        memmove(g->inputs + i, g->inputs + i + 1, (size_t)(g->n_inputs - i - 1) * sizeof *g->inputs);
        g->n_inputs--;
        break;
      }
  }
  if (info->n_trainable == 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "no trainable parameter: the loss depends on no float initializer "
                       "(or all are frozen)");
  int32_t norm = gb_1(&c, SC_OP_SQRT, norm2);
  if ((st = built(g, new_output(&c, "train:grad_norm", norm, d), "gradient norm", d)) != SC_OK)
    return st;
  int32_t coef = -1;
  if (o->clip_grad_norm > 0) {
    int32_t q = gb_2(&c, SC_OP_DIV, gb_scalar(&c, t, o->clip_grad_norm),
                     gb_2(&c, SC_OP_ADD, norm, gb_scalar(&c, t, 1e-6)));
    coef = gb_op(&c, SC_OP_MIN, (int32_t[]){q, gb_scalar(&c, t, 1.0)}, 2);
    if ((st = built(g, coef, "clipping", d)) != SC_OK) return st;
  }
  int32_t lr = scalar_input(g, "train:lr", t, d);
  int32_t bc1 = lr < 0 ? -1 : scalar_input(g, "train:bc1", t, d);
  int32_t bc2 = bc1 < 0 ? -1 : scalar_input(g, "train:bc2", t, d);
  int32_t ok = bc2 < 0 ? -1 : applied_flag(&c, o, loss, norm, d);
  if (ok < 0) return d->status ? d->status : SC_ERR_INVALID;
  for (int32_t k = 0; k < info->n_params; k++) {
    const sc_train_param *p = &info->params[k];
    if (p->grad < 0) continue;
    int32_t gr = p->grad;
    if (coef >= 0) gr = gb_2(&c, SC_OP_MUL, gr, coef);
    if ((st = update(&c, o, p, gr, lr, bc1, bc2, ok, d)) != SC_OK) return st;
  }
  /* a step of several microbatches (a pipeline's, or --grad-accum's runs)
   * runs the forward and backward once for each: each amax joins a running
   * max, the accumulator "accum:T.fp8_amax" (zeroed at the step's start, as
   * the gradients'), and the update, once a step, reads the last
   * microbatch's: the step's max. Nothing else of the scaling state is
   * written before the last run, so a run before it skips the update's
   * steps, the finiteness check and the reductions it reads among them
   * (sc_program_update_steps) */
  for (int32_t k = 0; o->fp8 && accum > 1 && k < info->fp8.n_meta; k++) {
    sc_fp8_meta *m = &info->fp8.meta[k];
    char name[512];
    snprintf(name, sizeof name, "accum:%s.fp8_amax", m->name);
    int32_t acc = new_input(g, name, SC_DTYPE_F32, 0, NULL, d);
    if (acc < 0) return d->status;
    snprintf(name, sizeof name, "new:accum:%s.fp8_amax", m->name);
    m->amax = new_output_op(&c, name, SC_OP_MAX, (int32_t[]){acc, m->amax}, 2, d);
    if ((st = built(g, m->amax, "fp8 amax accumulation", d)) != SC_OK) return st;
  }
  if (o->fp8 && (st = sc_fp8_update(&c, &info->fp8, d)) != SC_OK) return st;
  for (int32_t k = 0; o->fp8 && k < info->fp8.n_meta; k++) {
    const sc_fp8_meta *m = &info->fp8.meta[k];
    char name[512];
    snprintf(name, sizeof name, "%s.fp8_amax_history", m->name);
    if ((st = guarded_output(&c, name, ok, m->new_history, m->kept_history, d)) != SC_OK)
      return st;
    snprintf(name, sizeof name, "%s.fp8_scale", m->name);
    if ((st = guarded_output(&c, name, ok, m->new_scale, m->scale, d)) != SC_OK) return st;
  }
  return SC_OK;
}
