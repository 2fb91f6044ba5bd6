/* vocab_pad.c — vocabulary padding for tensor parallelism (Megatron's
 * --make-vocab-size-divisible-by): a vocabulary that does not divide by the
 * tp size would leave the embedding and the LM head whole on every rank.
 *
 * For each 2-D weight W whose every reader is one of
 *   Gather(W, ids)            axis 0: the vocabulary is W's dim 0
 *   MatMul(h, W)              the vocabulary is W's dim 1 (N)
 *   Gemm(h, W) without C      dim 1, or dim 0 with transB
 *   Transpose(W) [1,0] read only as MatMul's B   (a tied LM head)
 * and that agree on which dim is the vocabulary V (V % tp != 0), W is
 * replaced by "<W>.vocab_padded" with that dim rounded up to a multiple of
 * tp, the new rows or columns zero. The lookup is unchanged (ids < V never
 * reach a padded row; the Gather gets the internal attribute `__vocab` = V,
 * the extent its ids are checked against and negative ids count from, see
 * codegen/from_graph.c and localize.c); each product gets the padded logits, and a Slice
 * back to V (node "<product>/vocab_unpad") gives the original value, so
 * the graph computes exactly what it did. Propagation then splits the
 * padded dim like any other and all-gathers before the Slice.
 *
 * The padded weight's data is a copy (in the graph's arena) of W's plus the
 * zeros; a weight without data (--no-weights) stays without. Runs on the
 * global graph before the plan is validated (a replayed plan names the
 * padded weights). A trained weight is read by its optimizer too, so on a
 * training step's graph it matches no pattern: a training build pads the
 * model before the step is built instead (sc_partition_pad_vocab_train,
 * driver.c), the padded copies becoming the step's parameters, recorded
 * for passes/train.c (the masked loss, the model's names) and the runtime
 * (docs/partitioning.md, "A trained vocabulary"). There the products'
 * shapes may not be inferred yet: the padded logits get theirs when the
 * step is built. */
#include <string.h>

#include "partition.h"

typedef struct use {
  int32_t node;    /* reader of W */
  int32_t product; /* the MatMul/Gemm whose output carries V, or -1 (Gather) */
} use;

/* The vocabulary dim of W as `n` reads it, or -1 when n is not a pattern. */
static int32_t vocab_dim(const sc_graph *g, const int32_t *off, const int32_t *users,
                         int32_t w, const sc_node *n, int32_t *product) {
  *product = -1;
  if (n->op == SC_OP_GATHER && n->n_inputs == 2 && n->inputs[0] == w &&
      n->inputs[1] != w && sc_attr_int((sc_graph *)g, n, "axis", 0) == 0)
    return 0;
  if (n->op == SC_OP_MATMUL && n->n_inputs == 2 && n->inputs[1] == w && n->inputs[0] != w) {
    *product = (int32_t)(n - g->nodes);
    return 1;
  }
  if (n->op == SC_OP_GEMM && n->n_inputs == 2 && n->inputs[1] == w && n->inputs[0] != w &&
      sc_attr_int((sc_graph *)g, n, "transA", 0) == 0) {
    *product = (int32_t)(n - g->nodes);
    return sc_attr_int((sc_graph *)g, n, "transB", 0) ? 0 : 1;
  }
  if (n->op == SC_OP_TRANSPOSE && n->n_outputs == 1) {
    const int64_t *perm = NULL;
    int64_t np = sc_attr_ints((sc_graph *)g, n, "perm", &perm);
    if (!(np < 0 || (np == 2 && perm[0] == 1 && perm[1] == 0))) return -1;
    int32_t t = n->outputs[0];
    if (off[t + 1] - off[t] != 1) return -1;
    const sc_node *m = &g->nodes[users[off[t]]];
    if (m->op != SC_OP_MATMUL || m->n_inputs != 2 || m->inputs[1] != t || m->inputs[0] == t)
      return -1;
    *product = users[off[t]];
    return 0;
  }
  return -1;
}

static int32_t const_i64(sc_graph *g, const char *base, int64_t v) {
  int32_t id = sc_graph_new_value(g, base);
  if (id < 0 ||
      sc_value_set_data(g, id, SC_DTYPE_I64, 1, (int64_t[]){1}, &v, sizeof v, true) != SC_OK)
    return -1;
  return id;
}

/* The product's output gets the padded size on its last dim; a Slice gives
 * the original value back. */
static sc_status unpad(sc_graph *g, int32_t product, int64_t v, int64_t vp) {
  int32_t y = g->nodes[product].outputs[0];
  sc_value yv = g->values[y];
  char name[512];
  snprintf(name, sizeof name, "%s.vocab_padded", yv.name);
  int32_t yp = sc_graph_new_value(g, name);
  if (yp < 0) return g->diag.status;
  if (yv.rank > 0) yv.dims[yv.rank - 1] = vp;
  bool known = yv.rank > 0; /* a model not yet inferred (a training step's):
                               inferred when the step is built */
  for (int32_t k = 0; k < yv.rank; k++) known = known && yv.dims[k] >= 0;
  sc_status st = known ? sc_value_set_shape(g, yp, yv.dtype, yv.rank, yv.dims) : SC_OK;
  if (st != SC_OK) return st;
  g->nodes[product].outputs[0] = yp;
  g->values[yp].producer = product;
  g->values[y].producer = -1;
  int32_t s = const_i64(g, "vocab_start", 0), e = const_i64(g, "vocab_end", v),
          a = const_i64(g, "vocab_axis", -1);
  if (s < 0 || e < 0 || a < 0) return g->diag.status;
  snprintf(name, sizeof name, "%s/vocab_unpad",
           g->nodes[product].name ? g->nodes[product].name : "product");
  if (sc_graph_add_node(g, SC_OP_SLICE, name, (int32_t[]){yp, s, e, a}, 4, &y, 1) < 0)
    return g->diag.status;
  return SC_OK;
}

/* Pads weight w (dim vd from v to vp) and rewires its readers. */
static sc_status pad_weight(sc_graph *g, int32_t w, int32_t vd, int64_t vp, const use *u,
                            int32_t nu) {
  sc_value wv = g->values[w];
  int64_t v = wv.dims[vd];
  char name[512];
  snprintf(name, sizeof name, "%s.vocab_padded", wv.name);
  int32_t wp = sc_graph_new_value(g, name);
  if (wp < 0) return g->diag.status;
  int64_t dims[2] = {wv.dims[0], wv.dims[1]};
  dims[vd] = vp;
  sc_status st;
  if (wv.data) {
    size_t es = sc_dtype_size(wv.dtype);
    size_t bytes = (size_t)(dims[0] * dims[1]) * es;
    char *buf = sc_calloc(bytes ? bytes : 1, 1);
    if (!buf) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    size_t row = (size_t)wv.dims[1] * es, prow = (size_t)dims[1] * es;
    for (int64_t r = 0; r < wv.dims[0]; r++)
      memcpy(buf + (size_t)r * prow, (const char *)wv.data + (size_t)r * row, row);
    st = sc_value_set_data(g, wp, wv.dtype, 2, dims, buf, bytes, true);
    sc_free(buf);
  } else {
    st = sc_value_set_shape(g, wp, wv.dtype, 2, dims);
  }
  if (st != SC_OK) return st;
  g->values[wp].flags |= SC_VALUE_CONST | SC_VALUE_PARAM;
  for (int32_t i = 0; i < nu; i++) {
    sc_node *n = &g->nodes[u[i].node];
    for (int32_t k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] == w) n->inputs[k] = wp;
    if (n->op == SC_OP_TRANSPOSE) { /* its output is [other, vp] now */
      int32_t t = n->outputs[0];
      int64_t td[2] = {dims[1], dims[0]};
      sc_value *tv = &g->values[t];
      if (tv->data) { /* folded at import: computed from the padded weight now */
        tv->data = NULL;
        tv->data_bytes = 0;
        tv->data_kind = SC_DATA_NONE;
        tv->flags &= ~(uint32_t)SC_VALUE_CONST;
      }
      if ((st = sc_value_set_shape(g, t, wv.dtype, 2, td)) != SC_OK) return st;
    }
    bool gather = n->op == SC_OP_GATHER;
    /* unpad adds nodes: n may move, so it is not used after this */
    if (u[i].product >= 0 && (st = unpad(g, u[i].product, v, vp)) != SC_OK) return st;
    if (gather) { /* ids are still checked against V, not vp */
      sc_attr *a = sc_node_add_attr(g, u[i].node, "__vocab", SC_ATTR_INT);
      if (!a) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
      a->i = v;
    }
  }
  return SC_OK;
}

/* Pads every pattern's weight of g to a multiple of tp; each one padded is
 * recorded in *pads (g's arena; n_pads counted) when pads is not NULL. */
static sc_status pad_all(sc_graph *g, int64_t tp, sc_train_vocab_pad **pads, int32_t *n_pads) {
  int32_t *off = NULL, *users = NULL;
  sc_status st = sc_graph_users(g, &off, &users);
  if (st != SC_OK) return st;
  use *u = NULL;
  bool changed = false;
  int32_t nv = g->n_values; /* padding adds values: look at the original ones */
  for (int32_t w = 0; w < nv && st == SC_OK; w++) {
    const sc_value *wv = &g->values[w];
    /* initializers and constants folded from them (a tied LM head) */
    if (!(wv->flags & SC_VALUE_CONST) || wv->producer >= 0 ||
        (wv->flags & (SC_VALUE_DEAD | SC_VALUE_OUTPUT)) || wv->rank != 2)
      continue;
    int32_t nu = off[w + 1] - off[w];
    if (nu == 0) continue;
    sc_free(u);
    u = sc_calloc((size_t)nu, sizeof *u);
    if (!u) {
      st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
      break;
    }
    int32_t vd = -2;
    for (int32_t i = 0; i < nu && vd != -1; i++) {
      u[i].node = users[off[w] + i];
      int32_t d = vocab_dim(g, off, users, w, &g->nodes[u[i].node], &u[i].product);
      vd = d < 0 || (vd >= 0 && d != vd) ? -1 : d;
    }
    if (vd < 0) continue;
    int64_t v = g->values[w].dims[vd];
    if (v <= 0 || v % tp == 0) continue;
    int64_t vp = (v + tp - 1) / tp * tp;
    int32_t before = g->n_values;
    st = pad_weight(g, w, vd, vp, u, nu);
    changed = true;
    if (st == SC_OK && pads) {
      sc_train_vocab_pad *y = sc_arena_array(&g->arena, (size_t)*n_pads + 1, sizeof *y);
      if (!y) {
        st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
        break;
      }
      if (*n_pads) memcpy(y, *pads, (size_t)*n_pads * sizeof *y);
      /* the padded weight is the first value pad_weight made; the runtime
       * finds the model's name by its suffix (train_manifest.h) */
      const char *pn = g->values[before].name, *wn = g->values[w].name;
      size_t wl = strlen(wn);
      if (strncmp(pn, wn, wl) != 0 || strcmp(pn + wl, ".vocab_padded") != 0) {
        st = sc_graph_error(g, SC_ERR_UNSUPPORTED,
                            "the padded copy of '%s' cannot be named '%s.vocab_padded': the "
                            "model has a value of that name",
                            wn, wn);
        break;
      }
      y[*n_pads] = (sc_train_vocab_pad){.param = g->values[before].name,
                                        .name = g->values[w].name, .dim = vd, .vocab = v};
      *pads = y;
      ++*n_pads;
    }
  }
  sc_free(u);
  sc_free(off);
  sc_free(users);
  if (st == SC_OK && changed) {
    sc_pass_opts po;
    sc_pass_opts_init(&po);
    po.quiet = true;
    st = sc_graph_toposort(g);
    if (st == SC_OK) st = sc_run_passes(g, "dce", &po);
  }
  return st;
}

/* pad_all at the plan's tp, when its vocabulary is parallel over one. */
static sc_status pad_plan(sc_graph *g, const sc_plan *plan, sc_train_vocab_pad **pads,
                          int32_t *n_pads) {
  if (!plan->tp_axis || !plan->vocab_parallel) return SC_OK;
  int64_t tp = sc_mesh_axis_size(&plan->mesh, plan->tp_axis);
  return tp > 1 ? pad_all(g, tp, pads, n_pads) : SC_OK;
}

sc_status sc_partition_pad_vocab(sc_graph *g, const sc_plan *plan) {
  return pad_plan(g, plan, NULL, NULL);
}

sc_status sc_partition_pad_vocab_train(sc_graph *g, const sc_plan *plan,
                                       sc_train_vocab_pad **pads, int32_t *n_pads) {
  *pads = NULL;
  *n_pads = 0;
  return pad_plan(g, plan, pads, n_pads);
}
