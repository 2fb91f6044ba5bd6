/* stats.c — model statistics for `shardc inspect` and sc_model_stats.
 *
 * Two steps (see stats.h): sc_stats_begin on the imported graph counts
 * parameters (initializers) and finds the repeated-block key from names;
 * sc_stats_finish on the folded graph counts nodes, ops and FLOPs and fills
 * the per-block table. Nothing here changes the graph.
 *
 * Names are parsed without copying into the graph: a name is split into
 * components at '/' and '.', empty components dropped. A "candidate" is a
 * position where a component made of decimal digits follows a component that
 * is not; its prefix path is the components before the digits joined by '.'.
 * Two prefix paths are compatible when one is a whole-component suffix of the
 * other ("transformer.h" and "m.transformer.h"), so that node names
 * ("/m/transformer/h.3/attn/MatMul") and parameter names
 * ("transformer.h.3.attn.c_attn.weight") of the same layer agree. */
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_COMPONENTS = 64 };
/* classify() results besides a block index >= 0 */
enum { OUTSIDE = -1, UNKNOWN = -2 };

typedef struct comp {
  const char *s;
  size_t len;
} comp;

static int split(const char *name, comp *c, int cap) {
  int n = 0;
  const char *p = name;
  while (*p && n < cap) {
    while (*p == '/' || *p == '.') p++;
    if (!*p) break;
    const char *start = p;
    while (*p && *p != '/' && *p != '.') p++;
    c[n].s = start;
    c[n].len = (size_t)(p - start);
    n++;
  }
  return n;
}

static bool is_digits(const comp *c) {
  if (c->len == 0 || c->len > 9) return false; /* indices fit an int32 */
  for (size_t i = 0; i < c->len; i++)
    if (c->s[i] < '0' || c->s[i] > '9') return false;
  return true;
}

/* Writes components [0, end) joined by '.' into buf; false if too long. */
static bool join(const comp *c, int end, char *buf, size_t n) {
  size_t pos = 0;
  for (int i = 0; i < end; i++) {
    if (pos + c[i].len + 2 > n) return false;
    if (i) buf[pos++] = '.';
    memcpy(buf + pos, c[i].s, c[i].len);
    pos += c[i].len;
  }
  buf[pos] = 0;
  return true;
}

/* a is a whole-component suffix of b, or b of a. */
static bool compatible(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > lb) {
    const char *t = a;
    a = b;
    b = t;
    size_t tl = la;
    la = lb;
    lb = tl;
  }
  if (la == lb) return strcmp(a, b) == 0;
  return b[lb - la - 1] == '.' && strcmp(b + lb - la, a) == 0;
}

/* Names written by exporters for anonymous tensors ("onnx::MatMul_296") say
 * nothing about where they belong. */
static bool is_generated(const char *name) { return strstr(name, "::") != NULL; }

/* Block index of name under key; OUTSIDE when the name is a path (two or
 * more components) that is not in a block; UNKNOWN when it tells nothing. */
static int64_t classify(const char *key, const char *name) {
  if (!name || !key || is_generated(name)) return UNKNOWN;
  comp c[MAX_COMPONENTS];
  int n = split(name, c, MAX_COMPONENTS);
  char prefix[1024];
  for (int i = 1; i < n; i++) {
    if (!is_digits(&c[i]) || is_digits(&c[i - 1])) continue;
    if (!join(c, i, prefix, sizeof prefix)) break;
    if (compatible(prefix, key)) return strtoll(c[i].s, NULL, 10);
  }
  return n >= 2 ? OUTSIDE : UNKNOWN;
}

int64_t sc_stats_block_of_name(const char *key, const char *name) {
  int64_t b = classify(key, name);
  return b >= 0 ? b : -1;
}

/* ---- detection ---- */

typedef struct candidate {
  char *prefix;
  int64_t count;      /* names with this exact prefix */
  int64_t *indices;   /* distinct indices seen */
  int32_t n_indices, cap_indices;
} candidate;

typedef struct cand_set {
  candidate *c;
  int32_t n, cap;
  bool nomem;
} cand_set;

static void add_index(cand_set *cs, candidate *c, int64_t idx) {
  for (int32_t i = 0; i < c->n_indices; i++)
    if (c->indices[i] == idx) return;
  if (c->n_indices == c->cap_indices) {
    int32_t cap = c->cap_indices ? c->cap_indices * 2 : 8;
    int64_t *p = sc_realloc(c->indices, (size_t)cap * sizeof *p);
    if (!p) {
      cs->nomem = true;
      return;
    }
    c->indices = p;
    c->cap_indices = cap;
  }
  c->indices[c->n_indices++] = idx;
}

/* Records the first candidate of name, if any. */
static void observe(cand_set *cs, const char *name) {
  if (!name || is_generated(name)) return;
  comp c[MAX_COMPONENTS];
  int n = split(name, c, MAX_COMPONENTS);
  char prefix[1024];
  for (int i = 1; i < n; i++) {
    if (!is_digits(&c[i]) || is_digits(&c[i - 1])) continue;
    if (!join(c, i, prefix, sizeof prefix)) return;
    int64_t idx = strtoll(c[i].s, NULL, 10);
    for (int32_t k = 0; k < cs->n; k++)
      if (strcmp(cs->c[k].prefix, prefix) == 0) {
        cs->c[k].count++;
        add_index(cs, &cs->c[k], idx);
        return;
      }
    if (cs->n == cs->cap) {
      int32_t cap = cs->cap ? cs->cap * 2 : 16;
      candidate *p = sc_realloc(cs->c, (size_t)cap * sizeof *p);
      if (!p) {
        cs->nomem = true;
        return;
      }
      cs->c = p;
      cs->cap = cap;
    }
    candidate *nc = &cs->c[cs->n];
    memset(nc, 0, sizeof *nc);
    nc->prefix = sc_strdup(prefix);
    if (!nc->prefix) {
      cs->nomem = true;
      return;
    }
    cs->n++;
    nc->count = 1;
    add_index(cs, nc, idx);
    return;
  }
}

/* Distinct indices over all candidates compatible with key. */
static int32_t distinct_compatible(const cand_set *cs, const char *key) {
  int32_t n = 0;
  int64_t seen[4096];
  for (int32_t k = 0; k < cs->n; k++) {
    if (!compatible(cs->c[k].prefix, key)) continue;
    for (int32_t i = 0; i < cs->c[k].n_indices; i++) {
      bool dup = false;
      for (int32_t j = 0; j < n && !dup; j++) dup = seen[j] == cs->c[k].indices[i];
      if (!dup && n < 4096) seen[n++] = cs->c[k].indices[i];
    }
  }
  return n;
}

/* The key: most names, then most distinct indices, then the shortest. At
 * least two distinct indices and twice as many names as indices. */
static char *choose_key(const cand_set *cs) {
  const char *best = NULL;
  int64_t best_count = 0;
  int32_t best_distinct = 0;
  for (int32_t k = 0; k < cs->n; k++) {
    int64_t count = 0;
    for (int32_t j = 0; j < cs->n; j++)
      if (compatible(cs->c[k].prefix, cs->c[j].prefix)) count += cs->c[j].count;
    int32_t distinct = distinct_compatible(cs, cs->c[k].prefix);
    if (distinct < 2 || count < 2 * (int64_t)distinct) continue;
    bool better = !best || count > best_count ||
                  (count == best_count && distinct > best_distinct) ||
                  (count == best_count && distinct == best_distinct &&
                   strlen(cs->c[k].prefix) < strlen(best));
    if (better) {
      best = cs->c[k].prefix;
      best_count = count;
      best_distinct = distinct;
    }
  }
  return best ? sc_strdup(best) : NULL;
}

static void cand_free(cand_set *cs) {
  for (int32_t k = 0; k < cs->n; k++) {
    sc_free(cs->c[k].prefix);
    sc_free(cs->c[k].indices);
  }
  sc_free(cs->c);
}

/* The block with this index, created (kept sorted) when missing; NULL on
 * allocation failure. index < 0 is "outside". */
static sc_block_stats *block_get(sc_stats *s, int64_t index) {
  if (index < 0) return &s->outside;
  int32_t lo = 0, hi = s->n_blocks;
  while (lo < hi) {
    int32_t mid = (lo + hi) / 2;
    if (s->blocks[mid].index < index) lo = mid + 1;
    else hi = mid;
  }
  if (lo < s->n_blocks && s->blocks[lo].index == index) return &s->blocks[lo];
  sc_block_stats *p = sc_realloc(s->blocks, (size_t)(s->n_blocks + 1) * sizeof *p);
  if (!p) return NULL;
  s->blocks = p;
  memmove(&p[lo + 1], &p[lo], (size_t)(s->n_blocks - lo) * sizeof *p);
  memset(&p[lo], 0, sizeof *p);
  p[lo].index = index;
  s->n_blocks++;
  return &p[lo];
}

static bool is_live_node(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }
static bool is_live_value(const sc_value *v) { return !(v->flags & SC_VALUE_DEAD); }

sc_status sc_stats_begin(sc_graph *g, sc_stats *s) {
  memset(s, 0, sizeof *s);
  s->outside.index = -1;
  s->largest_value = -1;

  for (int32_t i = 0; i < g->n_nodes; i++)
    if (is_live_node(&g->nodes[i])) s->n_nodes_before_fold++;

  /* Parameters: every initializer, data present or not. */
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!is_live_value(v) || !(v->flags & SC_VALUE_PARAM)) continue;
    int64_t numel = sc_value_numel(v);
    int64_t bytes = sc_value_bytes(v);
    if (numel < 0 || bytes < 0)
      return sc_graph_error(g, SC_ERR_INVALID, "parameter '%s' has no known size",
                            v->name);
    unsigned dt = (unsigned)v->dtype < SC_DTYPE_COUNT ? (unsigned)v->dtype : 0;
    if (!sc_add_i64(s->params, numel, &s->params) ||
        !sc_add_i64(s->param_bytes, bytes, &s->param_bytes) ||
        !sc_add_i64(s->params_by_dtype[dt], numel, &s->params_by_dtype[dt]) ||
        !sc_add_i64(s->param_bytes_by_dtype[dt], bytes, &s->param_bytes_by_dtype[dt]))
      return sc_graph_error(g, SC_ERR_LIMIT, "parameter count overflows");
    s->n_params++;
  }

  /* Block key from node and parameter names. */
  cand_set cs = {0};
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (is_live_node(&g->nodes[i])) observe(&cs, g->nodes[i].name);
  for (int32_t i = 0; i < g->n_values; i++)
    if (is_live_value(&g->values[i]) && (g->values[i].flags & SC_VALUE_PARAM))
      observe(&cs, g->values[i].name);
  bool nomem = cs.nomem;
  if (!nomem) s->block_key = choose_key(&cs);
  cand_free(&cs);
  if (nomem) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  if (!s->block_key) return SC_OK;

  /* Parameters of each block: by the parameter's own name, else by the
   * name of the first node reading it, else outside. */
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!is_live_value(v) || !(v->flags & SC_VALUE_PARAM)) continue;
    int64_t b = classify(s->block_key, v->name);
    if (b == UNKNOWN) {
      for (int32_t k = 0; k < g->n_nodes && b == UNKNOWN; k++) {
        const sc_node *n = &g->nodes[k];
        if (!is_live_node(n)) continue;
        for (int32_t j = 0; j < n->n_inputs; j++)
          if (n->inputs[j] == i) {
            b = classify(s->block_key, n->name);
            if (b == UNKNOWN) b = OUTSIDE;
            break;
          }
      }
    }
    sc_block_stats *bs = block_get(s, b);
    if (!bs) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    bs->params += sc_value_numel(v); /* bounded by s->params, checked above */
    bs->param_bytes += sc_value_bytes(v);
  }
  return SC_OK;
}

sc_status sc_stats_finish(sc_graph *g, sc_stats *s) {
  s->n_nodes = 0;
  memset(s->op_count, 0, sizeof s->op_count);
  s->flops = 0;
  s->largest_name = NULL;
  s->largest_value = -1;
  s->largest_bytes = 0;

  int64_t *node_block = NULL;
  if (s->block_key && g->n_nodes > 0) {
    node_block = sc_calloc((size_t)g->n_nodes, sizeof *node_block);
    if (!node_block) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }

  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!is_live_node(n)) continue;
    s->n_nodes++;
    if ((unsigned)n->op < SC_OP_COUNT) s->op_count[n->op]++;
    sc_cost c = {0, 0};
    if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost)
      sc_ops[n->op].cost(g, n, &c);
    if (c.flops > 0) s->flops += c.flops;
    if (!node_block) continue;

    /* Own name, then the constants read, then the producers. */
    int64_t b = classify(s->block_key, n->name);
    if (b == UNKNOWN) {
      bool outside = false;
      for (int32_t j = 0; j < n->n_inputs; j++) {
        const sc_value *in = sc_node_input(g, n, j);
        if (!in || !sc_value_is_const(in)) continue;
        int64_t cb = classify(s->block_key, in->name);
        if (cb >= 0 && cb > b) b = cb;
        if (cb == OUTSIDE) outside = true;
      }
      if (b == UNKNOWN && outside) b = OUTSIDE;
    }
    if (b == UNKNOWN) {
      b = OUTSIDE;
      for (int32_t j = 0; j < n->n_inputs; j++) {
        const sc_value *in = sc_node_input(g, n, j);
        if (!in || in->producer < 0 || in->producer >= i) continue;
        if (node_block[in->producer] > b) b = node_block[in->producer];
      }
    }
    node_block[i] = b;
    sc_block_stats *bs = block_get(s, b);
    if (!bs) {
      sc_free(node_block);
      return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    }
    bs->n_nodes++;
    if (c.flops > 0) bs->flops += c.flops;
  }
  sc_free(node_block);

  /* Activations: graph inputs and values computed from them (a value computed
   * from constants only, e.g. a transposed weight that could not be folded
   * because its data is absent, is not an activation). */
  bool *act = g->n_values > 0 ? sc_calloc((size_t)g->n_values, sizeof *act) : NULL;
  if (g->n_values > 0 && !act) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0; i < g->n_inputs; i++) act[g->inputs[i]] = true;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!is_live_node(n)) continue;
    bool any = false;
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0 && act[n->inputs[j]]) any = true;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) act[n->outputs[j]] = any;
  }
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!act[i] || !is_live_value(v) || sc_value_is_const(v) || v->rank < 0) continue;
    int64_t bytes = sc_value_bytes(v);
    if (bytes > s->largest_bytes || (s->largest_value < 0 && bytes >= 0)) {
      s->largest_bytes = bytes;
      s->largest_value = i;
      s->largest_name = v->name;
    }
  }
  sc_free(act);
  return SC_OK;
}

void sc_stats_free(sc_stats *s) {
  sc_free(s->block_key);
  sc_free(s->blocks);
  s->block_key = NULL;
  s->blocks = NULL;
  s->n_blocks = 0;
}

void sc_stats_format_si(double v, const char *unit, char *buf, size_t n) {
  static const char *const prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int p = 0;
  double x = v;
  while (fabs(x) >= 1000.0 && p < 6) {
    x /= 1000.0;
    p++;
  }
  if (p == 0) snprintf(buf, n, "%.0f %s", x, unit);
  else snprintf(buf, n, "%.2f %s%s", x, prefixes[p], unit);
}

void sc_stats_format_bytes(double v, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int p = 0;
  double x = v;
  while (fabs(x) >= 1024.0 && p < 5) {
    x /= 1024.0;
    p++;
  }
  if (p == 0) snprintf(buf, n, "%.0f B", x);
  else snprintf(buf, n, "%.2f %s", x, units[p]);
}
