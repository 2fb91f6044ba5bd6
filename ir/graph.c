/* graph.c — building, querying and reordering graphs.
 *
 * Values and nodes are kept in arrays grown by doubling; the name index is an
 * open-addressing hash table from value name to id, grown at 50% load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "name_index.h"
#include "sharding.h"

static sc_status grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return SC_OK;
  int64_t ncap = *cap ? (int64_t)*cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  if (ncap > INT32_MAX / 2) return SC_ERR_LIMIT;
  void *p = sc_realloc(*arr, (size_t)ncap * elem);
  if (!p) return SC_ERR_NOMEM;
  *arr = p;
  *cap = (int32_t)ncap;
  return SC_OK;
}

sc_graph *sc_graph_create(const char *name) {
  sc_graph *g = sc_calloc(1, sizeof *g);
  if (!g) return NULL;
  sc_arena_init(&g->arena);
  g->name = sc_arena_strdup(&g->arena, name ? name : "main");
  g->opset = SC_OPSET_MAX;
  g->want_const = -1;
  if (!g->name) {
    sc_free(g);
    return NULL;
  }
  return g;
}

void sc_graph_destroy(sc_graph *g) {
  if (!g) return;
  for (int32_t i = g->n_cleanups - 1; i >= 0; i--)
    g->cleanups[i].fn(g->cleanups[i].p);
  sc_free(g->cleanups);
  sc_free(g->values);
  sc_free(g->nodes);
  sc_free(g->inputs);
  sc_free(g->outputs);
  sc_free(g->name_index);
  sc_free(g->suffix);
  sc_arena_free(&g->arena);
  sc_free(g);
}

sc_status sc_graph_add_cleanup(sc_graph *g, sc_cleanup_fn fn, void *p) {
  if (grow((void **)&g->cleanups, &g->cap_cleanups, g->n_cleanups + 1,
           sizeof *g->cleanups) != SC_OK) {
    fn(p);
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }
  g->cleanups[g->n_cleanups].fn = fn;
  g->cleanups[g->n_cleanups].p = p;
  g->n_cleanups++;
  return SC_OK;
}

bool sc_graph_release(sc_graph *g, const void *p) {
  for (int32_t i = g->n_cleanups - 1; p && i >= 0; i--) {
    if (g->cleanups[i].p != p) continue;
    sc_cleanup_fn fn = g->cleanups[i].fn;
    void *q = g->cleanups[i].p;
    memmove(&g->cleanups[i], &g->cleanups[i + 1],
            (size_t)(g->n_cleanups - i - 1) * sizeof *g->cleanups);
    g->n_cleanups--;
    fn(q);
    return true;
  }
  return false;
}

/* ---- name index ---- */

static void index_insert(sc_graph *g, int32_t id) {
  uint32_t mask = g->name_index_cap - 1;
  uint32_t h = sc_name_hash(g->values[id].name) & mask;
  while (g->name_index[h] >= 0) h = (h + 1) & mask;
  g->name_index[h] = id;
}

static sc_status index_rebuild(sc_graph *g, uint32_t cap) {
  int32_t *idx = sc_malloc((size_t)cap * sizeof *idx);
  if (!idx) return SC_ERR_NOMEM;
  for (uint32_t i = 0; i < cap; i++) idx[i] = -1;
  sc_free(g->name_index);
  g->name_index = idx;
  g->name_index_cap = cap;
  for (int32_t i = 0; i < g->n_values; i++) index_insert(g, i);
  return SC_OK;
}

int32_t sc_graph_find_value(const sc_graph *g, const char *name) {
  if (!g->name_index_cap || !name) return -1;
  uint32_t mask = g->name_index_cap - 1;
  uint32_t h = sc_name_hash(name) & mask;
  for (;;) {
    int32_t id = g->name_index[h];
    if (id < 0) return -1;
    /* the same pointer: the verifier looks each value's own name up */
    if (g->values[id].name == name || strcmp(g->values[id].name, name) == 0) return id;
    h = (h + 1) & mask;
  }
}

int32_t sc_graph_add_value(sc_graph *g, const char *name) {
  if (!name) return sc_graph_new_value(g, "t");
  if (!name[0]) {
    sc_graph_error(g, SC_ERR_INVALID, "empty value name");
    return -1;
  }
  if (sc_graph_find_value(g, name) >= 0) {
    sc_graph_error(g, SC_ERR_INVALID, "value '%s' defined twice", name);
    return -1;
  }
  if (grow((void **)&g->values, &g->cap_values, g->n_values + 1,
           sizeof *g->values) != SC_OK)
    goto nomem;
  if ((uint32_t)(g->n_values + 1) * 2 > g->name_index_cap &&
      index_rebuild(g, g->name_index_cap ? g->name_index_cap * 2 : 64) != SC_OK)
    goto nomem;
  sc_value *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = sc_arena_strdup(&g->arena, name);
  if (!v->name) goto nomem;
  v->rank = -1;
  v->producer = -1;
  int32_t id = g->n_values++;
  index_insert(g, id);
  return id;
nomem:
  sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  return -1;
}

/* The memo slot of base (found, or the empty one where it goes); NULL when
 * the table is full or cannot grow. */
static struct sc_suffix_memo *suffix_slot(sc_graph *g, const char *base) {
  if ((g->n_suffix + 1) * 2 > g->suffix_cap) {
    uint32_t cap = g->suffix_cap ? g->suffix_cap * 2 : 64;
    struct sc_suffix_memo *t = sc_calloc(cap, sizeof *t);
    if (!t) return NULL;
    for (uint32_t i = 0; i < g->suffix_cap; i++) {
      if (!g->suffix[i].base) continue;
      uint32_t h = sc_name_hash(g->suffix[i].base) & (cap - 1);
      while (t[h].base) h = (h + 1) & (cap - 1);
      t[h] = g->suffix[i];
    }
    sc_free(g->suffix);
    g->suffix = t;
    g->suffix_cap = cap;
  }
  uint32_t h = sc_name_hash(base) & (g->suffix_cap - 1);
  while (g->suffix[h].base && strcmp(g->suffix[h].base, base) != 0)
    h = (h + 1) & (g->suffix_cap - 1);
  return &g->suffix[h];
}

int32_t sc_graph_new_value(sc_graph *g, const char *base) {
  char stem[256], buf[300];
  snprintf(stem, sizeof stem, "%.250s", base && base[0] ? base : "t");
  if (sc_graph_find_value(g, stem) < 0) return sc_graph_add_value(g, stem);
  /* base_1, base_2, ...: the first free one, probed from the memo's */
  struct sc_suffix_memo *m = suffix_slot(g, stem);
  int64_t k = m && m->base ? m->next : 1;
  do snprintf(buf, sizeof buf, "%s_%lld", stem, (long long)k++);
  while (sc_graph_find_value(g, buf) >= 0);
  if (m && !m->base && (m->base = sc_arena_strdup(&g->arena, stem)) != NULL) g->n_suffix++;
  if (m && m->base) m->next = k;
  return sc_graph_add_value(g, buf);
}

int32_t sc_graph_add_node(sc_graph *g, sc_op op, const char *name,
                          const int32_t *inputs, int32_t n_inputs,
                          const int32_t *outputs, int32_t n_outputs) {
  if (n_inputs < 0 || n_outputs < 0) return -1;
  if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
           sizeof *g->nodes) != SC_OK)
    goto nomem;
  sc_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->name = name ? sc_arena_strdup(&g->arena, name)
                 : sc_arena_printf(&g->arena, "%s_%d", sc_op_name(op), g->n_nodes);
  n->inputs = sc_arena_array(&g->arena, (size_t)n_inputs, sizeof(int32_t));
  n->outputs = sc_arena_array(&g->arena, (size_t)n_outputs, sizeof(int32_t));
  if (!n->name || !n->inputs || !n->outputs) goto nomem;
  if (n_inputs) memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof(int32_t));
  if (n_outputs) memcpy(n->outputs, outputs, (size_t)n_outputs * sizeof(int32_t));
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  int32_t id = g->n_nodes++;
  for (int32_t i = 0; i < n_outputs; i++)
    if (outputs[i] >= 0) g->values[outputs[i]].producer = id;
  return id;
nomem:
  sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  return -1;
}

sc_attr *sc_node_add_attr(sc_graph *g, int32_t node_id, const char *name,
                          sc_attr_kind kind) {
  sc_node *n = &g->nodes[node_id];
  sc_attr *a = sc_arena_array(&g->arena, (size_t)n->n_attrs + 1, sizeof *a);
  if (!a) return NULL;
  if (n->n_attrs) memcpy(a, n->attrs, (size_t)n->n_attrs * sizeof *a);
  n->attrs = a;
  a = &n->attrs[n->n_attrs++];
  a->name = sc_arena_strdup(&g->arena, name);
  a->kind = kind;
  return a->name ? a : NULL;
}

sc_status sc_node_copy_attrs(sc_graph *g, int32_t node_id, const sc_node *src) {
  int32_t na = src->n_attrs;
  const sc_attr *from = src->attrs; /* adding to node_id does not move these */
  for (int32_t k = 0; k < na; k++) {
    sc_attr *a = sc_node_add_attr(g, node_id, from[k].name, from[k].kind);
    if (!a) return SC_ERR_NOMEM;
    const char *name = a->name;
    *a = from[k];
    a->name = name;
  }
  return SC_OK;
}

sc_status sc_graph_add_input(sc_graph *g, int32_t value_id) {
  if (grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1,
           sizeof *g->inputs) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  g->inputs[g->n_inputs++] = value_id;
  g->values[value_id].flags |= SC_VALUE_INPUT;
  return SC_OK;
}

sc_status sc_graph_add_output(sc_graph *g, int32_t value_id) {
  if (grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1,
           sizeof *g->outputs) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  g->outputs[g->n_outputs++] = value_id;
  g->values[value_id].flags |= SC_VALUE_OUTPUT;
  return SC_OK;
}

sc_status sc_value_set_shape(sc_graph *g, int32_t value_id, sc_dtype dtype,
                             int32_t rank, const int64_t *dims) {
  sc_value *v = &g->values[value_id];
  if (rank < 0 || rank > SC_MAX_RANK)
    return sc_graph_error(g, SC_ERR_LIMIT, "value '%s': rank %d (at most %d supported)",
                          v->name, rank, SC_MAX_RANK);
  int64_t numel = 1;
  for (int32_t i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return sc_graph_error(g, SC_ERR_INVALID, "value '%s': negative dim %lld",
                            v->name, (long long)dims[i]);
    if (!sc_mul_i64(numel, dims[i], &numel) || numel > SC_MAX_ELEMENTS)
      return sc_graph_error(g, SC_ERR_LIMIT,
                            "value '%s': element count overflows", v->name);
  }
  v->dtype = dtype;
  v->rank = rank;
  for (int32_t i = 0; i < rank; i++) v->dims[i] = dims[i];
  return SC_OK;
}

sc_status sc_value_set_data(sc_graph *g, int32_t value_id, sc_dtype dtype,
                            int32_t rank, const int64_t *dims,
                            const void *data, uint64_t data_bytes, bool copy) {
  sc_status st = sc_value_set_shape(g, value_id, dtype, rank, dims);
  if (st != SC_OK) return st;
  sc_value *v = &g->values[value_id];
  int64_t want = sc_value_bytes(v);
  if (data && (want < 0 || (uint64_t)want != data_bytes))
    return sc_graph_error(g, SC_ERR_INVALID,
                          "value '%s': %llu data bytes for shape needing %lld",
                          v->name, (unsigned long long)data_bytes, (long long)want);
  v->flags |= SC_VALUE_CONST;
  v->data_bytes = data ? data_bytes : 0;
  if (!data) {
    v->data = NULL;
    v->data_kind = SC_DATA_NONE;
  } else if (copy) {
    void *p = sc_arena_alloc(&g->arena, (size_t)data_bytes);
    if (!p) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    memcpy(p, data, (size_t)data_bytes);
    v->data = p;
    v->data_kind = SC_DATA_ARENA;
  } else {
    v->data = data;
    v->data_kind = SC_DATA_BORROWED;
  }
  return SC_OK;
}

/* ---- reading ---- */

int64_t sc_value_numel(const sc_value *v) {
  if (v->rank < 0) return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < v->rank; i++)
    if (!sc_mul_i64(n, v->dims[i], &n)) return -1;
  return n;
}

int64_t sc_value_bytes(const sc_value *v) {
  int64_t n = sc_value_numel(v), b;
  if (n < 0 || !sc_mul_i64(n, (int64_t)sc_dtype_size(v->dtype), &b)) return -1;
  return b;
}

bool sc_value_is_const(const sc_value *v) { return (v->flags & SC_VALUE_CONST) != 0; }
bool sc_value_has_data(const sc_value *v) {
  return (v->flags & SC_VALUE_CONST) && (v->data != NULL || sc_value_numel(v) == 0);
}

bool sc_bytes_zero(const void *data, uint64_t n) {
  const unsigned char *b = data;
  for (uint64_t i = 0; i < n; i++)
    if (b[i]) return false;
  return true;
}

bool sc_value_zeros(const sc_value *v) {
  return sc_value_has_data(v) && v->data && sc_bytes_zero(v->data, v->data_bytes);
}

sc_value *sc_node_input(sc_graph *g, const sc_node *n, int32_t i) {
  if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0) return NULL;
  return &g->values[n->inputs[i]];
}

sc_value *sc_node_output(sc_graph *g, const sc_node *n, int32_t i) {
  if (i < 0 || i >= n->n_outputs || n->outputs[i] < 0) return NULL;
  return &g->values[n->outputs[i]];
}

const sc_attr *sc_node_attr(const sc_node *n, const char *name) {
  for (int32_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

static const sc_attr *typed_attr(sc_graph *g, const sc_node *n, const char *name,
                                 sc_attr_kind kind) {
  const sc_attr *a = sc_node_attr(n, name);
  if (!a) return NULL;
  /* an empty list prints and parses as ints; accept it for any list kind */
  bool empty_list = a->kind == SC_ATTR_INTS && a->n == 0 &&
                    (kind == SC_ATTR_FLOATS || kind == SC_ATTR_STRINGS);
  if (a->kind != kind && !empty_list) {
    sc_node_error(g, n, SC_ERR_INVALID, "attribute '%s' has the wrong type", name);
    return NULL;
  }
  return a;
}

int64_t sc_attr_int(sc_graph *g, const sc_node *n, const char *name, int64_t dflt) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_INT);
  return a ? a->i : dflt;
}
double sc_attr_float(sc_graph *g, const sc_node *n, const char *name, double dflt) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_FLOAT);
  return a ? a->f : dflt;
}
const char *sc_attr_string(sc_graph *g, const sc_node *n, const char *name,
                           const char *dflt) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_STRING);
  return a ? a->s : dflt;
}
int64_t sc_attr_ints(sc_graph *g, const sc_node *n, const char *name,
                     const int64_t **out) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_INTS);
  *out = a ? a->ints : NULL;
  return a ? a->n : -1;
}
int64_t sc_attr_floats(sc_graph *g, const sc_node *n, const char *name,
                       const double **out) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_FLOATS);
  *out = a ? a->floats : NULL;
  return a ? a->n : -1;
}
const sc_tensor *sc_attr_tensor(sc_graph *g, const sc_node *n, const char *name) {
  const sc_attr *a = typed_attr(g, n, name, SC_ATTR_TENSOR);
  return a ? a->t : NULL;
}

sc_status sc_node_error(sc_graph *g, const sc_node *n, sc_status status,
                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(&g->diag, status, n->name, sc_op_name(n->op), fmt, ap);
  va_end(ap);
  return status;
}

sc_status sc_graph_error(sc_graph *g, sc_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(&g->diag, status, NULL, NULL, fmt, ap);
  va_end(ap);
  return status;
}

/* ---- whole graph ---- */

sc_status sc_graph_users(const sc_graph *g, int32_t **offsets_out,
                         int32_t **users_out) {
  int32_t *off = sc_calloc((size_t)g->n_values + 1, sizeof *off);
  if (!off) return SC_ERR_NOMEM;
  int64_t total = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) { off[n->inputs[j] + 1]++; total++; }
  }
  for (int32_t i = 0; i < g->n_values; i++) off[i + 1] += off[i];
  int32_t *users = sc_calloc((size_t)total + 1, sizeof *users);
  int32_t *fill = sc_calloc((size_t)g->n_values + 1, sizeof *fill);
  if (!users || !fill) {
    sc_free(off); sc_free(users); sc_free(fill);
    return SC_ERR_NOMEM;
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      if (v < 0) continue;
      /* a node reading a value twice is listed once */
      bool seen = false;
      for (int32_t k = off[v]; k < off[v] + fill[v]; k++)
        if (users[k] == i) seen = true;
      if (!seen) users[off[v] + fill[v]++] = i;
    }
  }
  /* compact duplicates out: rebuild offsets from fill */
  int32_t pos = 0;
  for (int32_t v = 0; v < g->n_values; v++) {
    int32_t start = off[v];
    off[v] = pos;
    memmove(users + pos, users + start, (size_t)fill[v] * sizeof *users);
    pos += fill[v];
  }
  off[g->n_values] = pos;
  sc_free(fill);
  *offsets_out = off;
  *users_out = users;
  return SC_OK;
}

void sc_graph_permute_nodes(sc_graph *g, const int32_t *order, sc_node *scratch) {
  int32_t total = g->n_nodes;
  for (int32_t i = 0; i < total; i++) scratch[i] = g->nodes[order[i]];
  memcpy(g->nodes, scratch, (size_t)total * sizeof *scratch);
  for (int32_t i = 0; i < total; i++)
    for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
      if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
}

sc_status sc_graph_order_nodes(sc_graph *g, const int32_t *key) {
  int32_t total = g->n_nodes;
  int32_t *order = sc_malloc(((size_t)total + 1) * sizeof *order);
  sc_node *nodes = sc_malloc(((size_t)total + 1) * sizeof *nodes);
  if (!order || !nodes) {
    sc_free(order);
    sc_free(nodes);
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }
  for (int32_t i = 0; i < total; i++) order[i] = i;
  for (int32_t a = 1; a < total; a++) { /* insertion sort by key: stable */
    int32_t v = order[a], b = a;
    for (; b > 0 && key[order[b - 1]] > key[v]; b--) order[b] = order[b - 1];
    order[b] = v;
  }
  sc_graph_permute_nodes(g, order, nodes);
  sc_free(order);
  sc_free(nodes);
  return SC_OK;
}

/* Kahn's algorithm, taking ready nodes in their current order so that an
 * already sorted graph keeps its order. */
sc_status sc_graph_toposort(sc_graph *g) {
  int32_t nn = g->n_nodes;
  if (nn == 0) return SC_OK;
  int32_t *off = NULL, *users = NULL;
  int32_t *pending = sc_calloc((size_t)nn, sizeof *pending);
  int32_t *order = sc_calloc((size_t)nn, sizeof *order);
  int32_t *heap = sc_calloc((size_t)nn, sizeof *heap);
  sc_status st = SC_OK;
  if (!pending || !order || !heap || sc_graph_users(g, &off, &users) != SC_OK) {
    st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int32_t i = 0; i < nn; i++) {
    const sc_node *n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      if (v < 0) continue;
      bool dup = false;
      for (int32_t k = 0; k < j; k++)
        if (n->inputs[k] == v) dup = true;
      if (dup) continue;
      const sc_value *val = &g->values[v];
      if (val->producer >= 0) {
        pending[i]++;
      } else if (!(val->flags & (SC_VALUE_INPUT | SC_VALUE_CONST | SC_VALUE_OUTER))) {
        st = sc_node_error(g, n, SC_ERR_INVALID,
                           "input '%s' is not produced by any node, nor a graph "
                           "input or initializer", val->name);
        goto done;
      }
    }
  }
  /* min-heap of ready node ids */
  int32_t hn = 0, n_out = 0;
#define HEAP_PUSH(x)                                                  \
  do {                                                                \
    int32_t c_ = hn++;                                                \
    heap[c_] = (x);                                                   \
    while (c_ > 0 && heap[(c_ - 1) / 2] > heap[c_]) {                 \
      int32_t p_ = (c_ - 1) / 2, t_ = heap[p_];                       \
      heap[p_] = heap[c_]; heap[c_] = t_; c_ = p_;                    \
    }                                                                 \
  } while (0)
  for (int32_t i = 0; i < nn; i++)
    if (pending[i] == 0) HEAP_PUSH(i);
  while (hn > 0) {
    int32_t top = heap[0];
    heap[0] = heap[--hn];
    for (int32_t c = 0;;) {
      int32_t l = 2 * c + 1, r = l + 1, m = c;
      if (l < hn && heap[l] < heap[m]) m = l;
      if (r < hn && heap[r] < heap[m]) m = r;
      if (m == c) break;
      int32_t t = heap[m]; heap[m] = heap[c]; heap[c] = t; c = m;
    }
    order[n_out++] = top;
    const sc_node *n = &g->nodes[top];
    for (int32_t j = 0; j < n->n_outputs; j++) {
      int32_t v = n->outputs[j];
      if (v < 0) continue;
      for (int32_t k = off[v]; k < off[v + 1]; k++)
        if (--pending[users[k]] == 0) HEAP_PUSH(users[k]);
    }
  }
#undef HEAP_PUSH
  if (n_out < nn) {
    for (int32_t i = 0; i < nn; i++)
      if (pending[i] > 0) {
        st = sc_node_error(g, &g->nodes[i], SC_ERR_INVALID,
                           "graph has a cycle through this node");
        break;
      }
    goto done;
  }
  {
    sc_node *sorted = sc_calloc((size_t)nn, sizeof *sorted);
    if (!sorted) {
      st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
      goto done;
    }
    for (int32_t i = 0; i < nn; i++) sorted[i] = g->nodes[order[i]];
    sc_free(g->nodes);
    g->nodes = sorted;
    g->cap_nodes = nn;
    for (int32_t i = 0; i < nn; i++)
      for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
        if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
  }
done:
  sc_free(pending); sc_free(order); sc_free(heap); sc_free(off); sc_free(users);
  return st;
}

sc_status sc_graph_compact(sc_graph *g) {
  int32_t *vmap = sc_malloc(((size_t)g->n_values + 1) * sizeof *vmap);
  if (!vmap) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  int32_t nv = 0;
  for (int32_t i = 0; i < g->n_values; i++) {
    if (g->values[i].flags & SC_VALUE_DEAD) {
      vmap[i] = -1;
    } else {
      vmap[i] = nv;
      g->values[nv++] = g->values[i];
    }
  }
  int32_t nn = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].flags & SC_NODE_DEAD) continue;
    sc_node *n = &g->nodes[nn];
    *n = g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) n->inputs[j] = vmap[n->inputs[j]];
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) n->outputs[j] = vmap[n->outputs[j]];
    nn++;
  }
  int32_t k = 0;
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (vmap[g->inputs[i]] >= 0) g->inputs[k++] = vmap[g->inputs[i]];
  g->n_inputs = k;
  k = 0;
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (vmap[g->outputs[i]] >= 0) g->outputs[k++] = vmap[g->outputs[i]];
  g->n_outputs = k;
  if (g->shardings) sc_shardings_remap(g->shardings, vmap, g->n_values);
  g->n_values = nv;
  g->n_nodes = nn;
  sc_free(vmap);
  for (int32_t i = 0; i < nv; i++) g->values[i].producer = -1;
  for (int32_t i = 0; i < nn; i++)
    for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
      if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
  uint32_t cap = 64;
  while (cap < (uint32_t)nv * 2 + 2) cap *= 2;
  sc_free(g->suffix); /* names were freed: probe from 1 again */
  g->suffix = NULL;
  g->suffix_cap = g->n_suffix = 0;
  if (index_rebuild(g, cap) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  return SC_OK;
}

int sc_graph_bind_dim(sc_graph *g, const char *name, int64_t value) {
  int count = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    sc_value *v = &g->values[g->inputs[i]];
    if (!v->dim_param) continue;
    for (int32_t d = 0; d < v->rank; d++)
      if (v->dim_param[d] && strcmp(v->dim_param[d], name) == 0) {
        v->dims[d] = value;
        count++;
      }
  }
  return count;
}

bool sc_graph_was_specialised(const sc_graph *g, const char *name) {
  for (int32_t k = 0; g && k < g->n_specialised; k++)
    if (strcmp(g->specialised[k], name) == 0) return true;
  return false;
}
