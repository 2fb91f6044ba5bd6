/* stats.c — model statistics for `shardc inspect` and sc_model_stats.
 *
 * Two steps (see stats.h): sc_stats_begin on the imported graph counts
 * parameters (initializers) and takes the name key (passes/blocks.h) from
 * the names before folding; sc_stats_finish on the folded graph counts
 * nodes, ops and FLOPs and fills the per-block table from the blocks that
 * passes/blocks.c finds (structure first, the names as labels). Nothing
 * here changes the graph. */
#include "stats.h"

#include "passes/blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_live_node(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }
static bool is_live_value(const sc_value *v) { return !(v->flags & SC_VALUE_DEAD); }

typedef struct named_value {
  const char *name;
  int32_t id;
} named_value;

static int by_name(const void *a, const void *b) {
  return strcmp(((const named_value *)a)->name, ((const named_value *)b)->name);
}

/* The per-block table: blocks by passes/blocks.h on the folded graph;
 * nodes and FLOPs by the block of each node; a parameter by the block its
 * own name says when names label the blocks, else by its readers (all in
 * one block: that block; otherwise, or none live, outside). */
static sc_status block_table(sc_graph *g, sc_stats *s) {
  sc_free(s->blocks);
  s->blocks = NULL;
  s->n_blocks = 0;
  memset(&s->outside, 0, sizeof s->outside);
  s->outside.index = -1;
  s->found_by = SC_BLOCKS_NONE;
  s->adds_per_block = 0;
  sc_blocks bl;
  sc_diag d;
  sc_diag_clear(&d);
  if (sc_blocks_find(g, g->n_nodes, s->block_key, NULL, 0, &bl, &d) != SC_OK)
    return sc_graph_error(g, d.status, "out of memory");
  s->found_by = bl.how;
  s->adds_per_block = bl.adds_per_block;
  /* the key shown is the one that labels the blocks */
  sc_free(s->block_key);
  s->block_key = bl.key;
  bl.key = NULL;
  sc_status st = SC_OK;
  int32_t *pblock = NULL;
  if (bl.n_blocks > 0) {
    s->blocks = sc_calloc((size_t)bl.n_blocks, sizeof *s->blocks);
    pblock = sc_malloc(((size_t)g->n_values + 1) * sizeof *pblock);
    if (!s->blocks || !pblock) st = SC_ERR_NOMEM;
  }
  if (st == SC_OK && bl.n_blocks > 0) {
    s->n_blocks = bl.n_blocks;
    for (int32_t k = 0; k < bl.n_blocks; k++) s->blocks[k].index = bl.label[k];
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sc_node *n = &g->nodes[i];
      if (!is_live_node(n)) continue;
      sc_block_stats *bs = bl.node_block[i] >= 0 ? &s->blocks[bl.node_block[i]] : &s->outside;
      bs->n_nodes++;
      sc_cost c = {0, 0};
      if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost) sc_ops[n->op].cost(g, n, &c);
      if (c.flops > 0) bs->flops += c.flops;
    }
    /* -2: not read yet, -1: outside or read from several blocks */
    for (int32_t v = 0; v < g->n_values; v++) pblock[v] = -2;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sc_node *n = &g->nodes[i];
      if (!is_live_node(n)) continue;
      for (int32_t k = 0; k < n->n_inputs; k++) {
        int32_t x = n->inputs[k];
        if (x < 0 || !(g->values[x].flags & SC_VALUE_PARAM)) continue;
        pblock[x] = pblock[x] == -2 || pblock[x] == bl.node_block[i] ? bl.node_block[i] : -1;
      }
    }
    /* the parameters counted in begin: those still here by their readers,
     * all by their names when names label the blocks */
    named_value *live = sc_malloc(((size_t)g->n_values + 1) * sizeof *live);
    int32_t n_live = 0;
    if (!live) st = SC_ERR_NOMEM;
    for (int32_t v = 0; st == SC_OK && v < g->n_values; v++)
      if ((g->values[v].flags & SC_VALUE_PARAM) && g->values[v].name)
        live[n_live++] = (named_value){g->values[v].name, v};
    if (st == SC_OK) qsort(live, (size_t)n_live, sizeof *live, by_name);
    for (int64_t p = 0; st == SC_OK && p < s->n_params; p++) {
      const sc_stats_param *x = &s->param_list[p];
      int32_t b = -1, lo = 0, hi = n_live;
      while (x->name && lo < hi) {
        int32_t mid = (lo + hi) / 2, c = strcmp(live[mid].name, x->name);
        if (c == 0) {
          b = pblock[live[mid].id] >= 0 ? pblock[live[mid].id] : -1;
          break;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
      }
      int64_t named = s->block_key ? sc_blocks_index_of_name(s->block_key, x->name) : -1;
      for (int32_t k = 0; named >= 0 && k < bl.n_blocks; k++)
        if (bl.label[k] == named) b = k;
      sc_block_stats *bs = b >= 0 ? &s->blocks[b] : &s->outside;
      bs->params += x->numel; /* bounded by s->params, checked in begin */
      bs->param_bytes += x->bytes;
    }
    sc_free(live);
  }
  sc_free(pblock);
  sc_blocks_free(&bl);
  return st == SC_OK ? SC_OK : sc_graph_error(g, st, "out of memory");
}

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
  /* each one's name and size, for the block table (folding may remove it) */
  s->param_list = sc_calloc((size_t)s->n_params + 1, sizeof *s->param_list);
  if (!s->param_list) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0, k = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!is_live_value(v) || !(v->flags & SC_VALUE_PARAM)) continue;
    s->param_list[k++] = (sc_stats_param){v->name, sc_value_numel(v), sc_value_bytes(v)};
  }

  /* The name key, from the names before folding (node names that folding
   * removes still tell where the layers are). */
  sc_status st = sc_blocks_name_key(g, g->n_nodes, &s->block_key);
  if (st != SC_OK) return sc_graph_error(g, st, "out of memory");
  return SC_OK;
}

sc_status sc_stats_finish(sc_graph *g, sc_stats *s) {
  s->n_nodes = 0;
  memset(s->op_count, 0, sizeof s->op_count);
  s->flops = 0;
  s->largest_name = NULL;
  s->largest_value = -1;
  s->largest_bytes = 0;

  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!is_live_node(n)) continue;
    s->n_nodes++;
    if ((unsigned)n->op < SC_OP_COUNT) s->op_count[n->op]++;
    sc_cost c = {0, 0};
    if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost)
      sc_ops[n->op].cost(g, n, &c);
    if (c.flops > 0) s->flops += c.flops;
  }
  sc_status st = block_table(g, s);
  if (st != SC_OK) return st;

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
  sc_free(s->param_list);
  s->param_list = NULL;
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

int64_t sc_stats_block_of_name(const char *key, const char *name) {
  return sc_blocks_index_of_name(key, name);
}
