/* blocks.c — repeated blocks from the graph's structure, labelled by
 * names when they agree (blocks.h).
 *
 * Structure. An activation is a graph input or a value computed from one
 * (parameters and constants are not). A residual addition is an Add of two
 * activations of the output's dtype and shape where one (the skip) is an
 * ancestor of the other: x + f(x). Each residual addition's predecessor is
 * the last residual addition among its skip's ancestors; the longest chain
 * of predecessors is the main path R_1..R_m (the residual stream). Its
 * boundaries are B_0 = skip(R_1), B_i = skip(R_{i+1}) and B_m = R_m's
 * output (pre-norm layers: B_i is R_i's output; post-norm, R_i's output
 * through the norm). A node's segment is the largest boundary among its
 * ancestors: segment i (0 <= i < m) is group i, the nodes from B_i to
 * B_{i+1} (R_{i+1} included); before B_0 (embeddings, masks) and after B_m
 * (final norm, head, loss) is outside. Groups are compared by a multiset of
 * (op, arity, output dtypes and shapes); the smallest k dividing m with
 * m/k >= 2 such that group i equals group i+k for every i makes the blocks
 * (k groups each: GPT-2's attention and MLP halves, k = 2). The last group
 * may lack what a post-norm layer computes after its addition (BERT's
 * final LayerNorm, which follows B_m): the first nodes after B_m complete
 * it when they make it equal. Names are never read here.
 *
 * Names (passes/stats.h's rules, docs/inspect.md): a name is split into
 * components at '/' and '.', empty components dropped. A "candidate" is a
 * position where a component made of decimal digits follows a component
 * that is not; its prefix path is the components before the digits joined
 * by '.'. Two prefix paths are compatible when one is a whole-component
 * suffix of the other ("transformer.h" and "m.transformer.h"), so that node
 * names ("/m/transformer/h.3/attn/MatMul") and parameter names
 * ("transformer.h.3.attn.c_attn.weight") of the same layer agree. A leading
 * role ("grad:", "new:", "accum:": the training passes' names of what they
 * derive from parameter P) is dropped first, so that a training graph,
 * whose parameters are inputs (no longer SC_VALUE_PARAM) and whose update
 * nodes are named "new:P", keys its blocks by P's prefix as the model did. Names
 * label a structural block by the majority of the indices its nodes' and
 * parameters' names carry; the labels must rise from block to block. */
#include "passes/blocks.h"
#include "ir/name_index.h"

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

/* The name after a leading role prefix: "grad:P", "new:P", "accum:P" (the
 * training passes' names of a parameter's gradient, update and accumulator)
 * are P's. A role is the characters before the first ':' when no '/' or '.'
 * comes first and a second ':' does not follow ("onnx::" is no role). */
static const char *after_role(const char *name) {
  size_t r = strcspn(name, ":/.");
  return name[r] == ':' && name[r + 1] != ':' && r > 0 ? name + r + 1 : name;
}

static int split(const char *name, comp *c, int cap) {
  int n = 0;
  const char *p = after_role(name);
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

/* Names written by exporters for anonymous tensors ("onnx::MatMul_296"),
 * and the training passes' names of the nodes they build ("train/<k>", a
 * counter over the step: passes/grad_rules.c), say nothing about where
 * they belong. (An AdamW step's thousands of "train/<k>" nodes made
 * "train" the key of gpt_1p5b's step, so no parameter was in a block.) */
static bool is_generated(const char *name) {
  return strstr(name, "::") != NULL || strncmp(name, "train/", 6) == 0;
}

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

int64_t sc_blocks_index_of_name(const char *key, const char *name) {
  int64_t b = classify(key, name);
  return b >= 0 ? b : -1;
}

/* ---- the name key ---- */

typedef struct candidate {
  char *prefix;
  int64_t count;      /* names with this exact prefix */
  int64_t *indices;   /* distinct indices seen */
  int32_t n_indices, cap_indices;
} candidate;

typedef struct cand_set {
  candidate *c;
  int32_t n, cap;
  sc_name_index prefixes; /* c[k].prefix at position k */
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
    int32_t k = sc_name_index_find(&cs->prefixes, prefix);
    if (k >= 0) {
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
    if (!nc->prefix || sc_name_index_add(&cs->prefixes, nc->prefix) != SC_OK) {
      sc_free(nc->prefix);
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
  sc_name_index_free(&cs->prefixes);
}


static bool node_live(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }

sc_status sc_blocks_name_key(const sc_graph *g, int32_t n_nodes, char **key) {
  *key = NULL;
  cand_set cs = {0};
  for (int32_t i = 0; i < n_nodes && i < g->n_nodes; i++)
    if (node_live(&g->nodes[i])) observe(&cs, g->nodes[i].name);
  for (int32_t i = 0; i < g->n_values; i++)
    if (!(g->values[i].flags & SC_VALUE_DEAD) && (g->values[i].flags & SC_VALUE_PARAM))
      observe(&cs, g->values[i].name);
  bool nomem = cs.nomem;
  if (!nomem) *key = choose_key(&cs);
  cand_free(&cs);
  return nomem ? SC_ERR_NOMEM : SC_OK;
}

/* ---- structure ---- */

typedef struct finder {
  const sc_graph *g;
  int32_t n;          /* nodes considered */
  bool *param;        /* per value: a parameter or constant */
  bool *act;          /* per value: an activation */
  int32_t *stamp;     /* per node: the search that last visited it */
  int32_t *stack;     /* per node, for the searches */
  int32_t search;
} finder;

static bool same_shape(const sc_value *a, const sc_value *b) {
  return a->dtype == b->dtype && a->rank == b->rank && a->rank >= 1 &&
         memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) == 0;
}

/* Whether value a is an ancestor of value b (or b itself). Nodes before a's
 * producer cannot be on a path from a: the search stops there. */
static bool reaches(finder *f, int32_t a, int32_t b) {
  if (a == b) return true;
  int32_t lo = f->g->values[a].producer >= 0 ? f->g->values[a].producer : 0;
  int32_t p = f->g->values[b].producer, top = 0;
  if (p < 0 || p >= f->n) return false;
  f->search++;
  f->stack[top++] = p;
  f->stamp[p] = f->search;
  while (top > 0) {
    const sc_node *n = &f->g->nodes[f->stack[--top]];
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k];
      if (x < 0 || !f->act[x]) continue;
      if (x == a) return true;
      int32_t q = f->g->values[x].producer;
      if (q < lo || q >= f->n || f->stamp[q] == f->search) continue;
      f->stamp[q] = f->search;
      f->stack[top++] = q;
    }
  }
  return false;
}

/* The skip input of node i when it is a residual addition, else -1. */
static int32_t residual_skip(finder *f, int32_t i) {
  const sc_node *n = &f->g->nodes[i];
  if (n->op != SC_OP_ADD || n->n_inputs != 2 || n->n_outputs != 1 || !node_live(n)) return -1;
  int32_t a = n->inputs[0], b = n->inputs[1], y = n->outputs[0];
  if (a < 0 || b < 0 || y < 0 || a == b || !f->act[a] || !f->act[b]) return -1;
  const sc_value *va = &f->g->values[a], *vb = &f->g->values[b], *vy = &f->g->values[y];
  if (!same_shape(va, vb) || !same_shape(va, vy)) return -1;
  if (reaches(f, a, b)) return a;
  if (reaches(f, b, a)) return b;
  return -1;
}

static bool has_act_output(const finder *f, int32_t i) {
  const sc_node *n = &f->g->nodes[i];
  for (int32_t j = 0; j < n->n_outputs; j++)
    if (n->outputs[j] >= 0 && f->act[n->outputs[j]]) return true;
  return false;
}

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* A node's part of its group's signature: op, arity, outputs' types. */
static uint64_t node_sig(const sc_graph *g, const sc_node *n) {
  uint64_t h = mix(0x12345, (uint64_t)n->op);
  h = mix(h, (uint64_t)n->n_inputs);
  h = mix(h, (uint64_t)n->n_outputs);
  for (int32_t j = 0; j < n->n_outputs; j++) {
    if (n->outputs[j] < 0) continue;
    const sc_value *v = &g->values[n->outputs[j]];
    h = mix(h, (uint64_t)v->dtype);
    h = mix(h, (uint64_t)(v->rank + 1));
    for (int32_t k = 0; k < v->rank; k++) h = mix(h, (uint64_t)v->dims[k]);
  }
  return h;
}

typedef struct group_sig {
  int64_t count;
  uint64_t sum; /* of node_sig: a multiset, whatever the nodes' order */
} group_sig;

static bool sig_eq(group_sig a, group_sig b) { return a.count == b.count && a.sum == b.sum; }

/* Blocks from the residual chain into b (b->how stays NONE when there is
 * none). A node whose outputs are no activations (a Shape) joins the block
 * it reads from but is left out of the comparison. */
static sc_status find_structure(finder *f, sc_blocks *b) {
  const sc_graph *g = f->g;
  int32_t n = f->n, nv = g->n_values;
  int32_t *skip = sc_malloc(((size_t)n + 1) * sizeof *skip);
  int32_t *pred = sc_malloc(((size_t)n + 1) * sizeof *pred);
  int32_t *len = sc_calloc((size_t)n + 1, sizeof *len);
  int32_t *last = sc_malloc(((size_t)nv + 1) * sizeof *last); /* per value */
  int32_t *seg = sc_malloc(((size_t)n + 1) * sizeof *seg);
  int32_t *chain = NULL, *bnd = NULL;
  group_sig *sig = NULL;
  sc_status st = skip && pred && len && last && seg ? SC_OK : SC_ERR_NOMEM;
  int32_t end = -1, m = 0;
  for (int32_t v = 0; st == SC_OK && v < nv; v++) last[v] = -1;
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    const sc_node *nd = &g->nodes[i];
    skip[i] = pred[i] = -1;
    if (!node_live(nd)) continue;
    int32_t lr = -1;
    for (int32_t k = 0; k < nd->n_inputs; k++)
      if (nd->inputs[k] >= 0 && f->act[nd->inputs[k]] && last[nd->inputs[k]] > lr)
        lr = last[nd->inputs[k]];
    skip[i] = residual_skip(f, i);
    if (skip[i] >= 0) {
      pred[i] = last[skip[i]];
      len[i] = (pred[i] >= 0 ? len[pred[i]] : 0) + 1;
      if (len[i] >= m) {
        m = len[i];
        end = i;
      }
      lr = i;
    }
    for (int32_t j = 0; j < nd->n_outputs; j++)
      if (nd->outputs[j] >= 0) last[nd->outputs[j]] = lr;
  }
  if (st != SC_OK || m < 2) goto done;
  chain = sc_malloc((size_t)m * sizeof *chain);
  bnd = sc_malloc(((size_t)nv + 1) * sizeof *bnd); /* per value: boundary index */
  sig = sc_calloc((size_t)m + 2, sizeof *sig);
  if (!chain || !bnd || !sig) {
    st = SC_ERR_NOMEM;
    goto done;
  }
  for (int32_t i = m - 1, r = end; i >= 0; i--, r = pred[r]) chain[i] = r;
  for (int32_t v = 0; v < nv; v++) bnd[v] = -1;
  for (int32_t i = 0; i < m; i++) bnd[skip[chain[i]]] = i;
  bnd[g->nodes[chain[m - 1]].outputs[0]] = m;
  for (int32_t v = 0; v < nv; v++) last[v] = bnd[v]; /* B_0 may be a graph input */
  for (int32_t i = 0; i < n; i++) { /* last: now the segment of each value */
    const sc_node *nd = &g->nodes[i];
    seg[i] = -1;
    if (!node_live(nd)) continue;
    for (int32_t k = 0; k < nd->n_inputs; k++)
      if (nd->inputs[k] >= 0 && f->act[nd->inputs[k]] && last[nd->inputs[k]] > seg[i])
        seg[i] = last[nd->inputs[k]];
    bool any = false;
    for (int32_t j = 0; j < nd->n_outputs; j++) {
      int32_t y = nd->outputs[j];
      if (y >= 0) last[y] = bnd[y] >= 0 ? bnd[y] : seg[i];
      if (y >= 0 && f->act[y]) any = true;
    }
    /* a shape's node is in its block but not in the comparison: the first
     * block may take a shape that the model reads at its end */
    if (any && seg[i] >= 0 && seg[i] < m) {
      sig[seg[i]].count++;
      sig[seg[i]].sum += node_sig(g, nd);
    }
  }
  /* the smallest period whose blocks are alike */
  for (int32_t k = 1; k <= m / 2; k++) {
    if (m % k) continue;
    bool ok = true;
    for (int32_t i = 0; i + k < m - 1 && ok; i++) ok = sig_eq(sig[i], sig[i + k]);
    if (!ok) continue;
    int32_t ext = 0; /* nodes after B_m that complete the last group */
    group_sig want = sig[m - 1 - k], have = sig[m - 1];
    if (!sig_eq(want, have) && want.count > have.count) {
      for (int32_t i = 0; i < n && have.count < want.count; i++)
        if (seg[i] == m && has_act_output(f, i)) {
          have.count++;
          have.sum += node_sig(g, &g->nodes[i]);
          ext++;
        }
    }
    if (!sig_eq(want, have)) continue;
    b->how = SC_BLOCKS_STRUCTURE;
    b->n_blocks = m / k;
    b->adds_per_block = k;
    for (int32_t i = 0; i < n; i++) {
      int32_t s = seg[i];
      if (s == m && ext > 0 && has_act_output(f, i)) {
        ext--;
        b->node_block[i] = b->n_blocks - 1;
      } else {
        b->node_block[i] = s >= 0 && s < m ? s / k : -1;
      }
    }
    break;
  }
done:
  sc_free(skip);
  sc_free(pred);
  sc_free(len);
  sc_free(last);
  sc_free(seg);
  sc_free(chain);
  sc_free(bnd);
  sc_free(sig);
  return st;
}

/* ---- names ---- */

/* A name's vote for node i's block: its own name, then those of the
 * parameters and constants it reads. */
static int64_t name_index(const finder *f, const char *key, int32_t i, bool own) {
  const sc_node *n = &f->g->nodes[i];
  int64_t b = own ? classify(key, n->name) : UNKNOWN;
  if (b != UNKNOWN) return b;
  bool outside = false;
  for (int32_t k = 0; k < n->n_inputs; k++) {
    int32_t x = n->inputs[k];
    if (x < 0 || !f->param[x]) continue;
    int64_t c = classify(key, f->g->values[x].name);
    if (c >= 0 && c > b) b = c;
    if (c == OUTSIDE) outside = true;
  }
  return b == UNKNOWN && outside ? OUTSIDE : b;
}

/* Labels of structural blocks from the names: per block, the index most of
 * its named nodes and parameters carry (a majority vote), rising from block
 * to block. False when the names do not agree. */
static bool label_by_names(const finder *f, const char *key, sc_blocks *b) {
  int32_t nb = b->n_blocks;
  for (int32_t blk = 0; blk < nb; blk++) {
    int64_t cand = -1, votes = 0, agree = 0, total = 0;
    for (int pass = 0; pass < 2; pass++)
      for (int32_t i = 0; i < f->n; i++) {
        if (b->node_block[i] != blk || !node_live(&f->g->nodes[i])) continue;
        int64_t x = name_index(f, key, i, true);
        if (x == UNKNOWN) continue;
        if (pass == 0) { /* Boyer-Moore */
          if (votes == 0) cand = x;
          votes += x == cand ? 1 : -1;
        } else {
          total++;
          agree += x == cand;
        }
      }
    if (cand < 0 || 2 * agree <= total) return false;
    if (blk > 0 && cand <= b->label[blk - 1]) return false;
    b->label[blk] = cand;
  }
  return true;
}

/* The first position of the sorted a[0..n) not below x. */
static int32_t lower_bound(const int64_t *a, int32_t n, int64_t x) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = (lo + hi) / 2;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Blocks from names alone: each node's index from its own name, the
 * constants it reads, then its producers (the largest); indices become
 * positions in rising order. */
static sc_status find_by_names(const finder *f, const char *key, sc_blocks *b) {
  const sc_graph *g = f->g;
  int64_t *vidx = sc_malloc(((size_t)g->n_values + 1) * sizeof *vidx);
  int64_t *nidx = sc_malloc(((size_t)f->n + 1) * sizeof *nidx);
  if (!vidx || !nidx) {
    sc_free(vidx);
    sc_free(nidx);
    return SC_ERR_NOMEM;
  }
  for (int32_t v = 0; v < g->n_values; v++) vidx[v] = OUTSIDE;
  int32_t n_labels = 0;
  for (int32_t i = 0; i < f->n; i++) {
    const sc_node *n = &g->nodes[i];
    nidx[i] = OUTSIDE;
    if (!node_live(n)) continue;
    int64_t x = name_index(f, key, i, true);
    if (x == UNKNOWN)
      for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && vidx[n->inputs[k]] > x) x = vidx[n->inputs[k]];
    nidx[i] = x >= 0 ? x : OUTSIDE;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) vidx[n->outputs[j]] = nidx[i];
  }
  /* distinct indices, in rising order, into b->label */
  for (int32_t i = 0; i < f->n; i++) {
    if (nidx[i] < 0) continue;
    int32_t lo = lower_bound(b->label, n_labels, nidx[i]);
    if (lo < n_labels && b->label[lo] == nidx[i]) continue;
    memmove(&b->label[lo + 1], &b->label[lo], (size_t)(n_labels - lo) * sizeof *b->label);
    b->label[lo] = nidx[i];
    n_labels++;
  }
  if (n_labels >= 2) {
    b->how = SC_BLOCKS_NAMES;
    b->n_blocks = n_labels;
    for (int32_t i = 0; i < f->n; i++) {
      b->node_block[i] = -1;
      if (nidx[i] < 0) continue;
      b->node_block[i] = lower_bound(b->label, n_labels, nidx[i]);
    }
  }
  sc_free(vidx);
  sc_free(nidx);
  return SC_OK;
}

sc_status sc_blocks_find(const sc_graph *g, int32_t n_nodes, const char *name_key,
                         const int32_t *params, int32_t n_params, sc_blocks *b, sc_diag *d) {
  memset(b, 0, sizeof *b);
  int32_t n = n_nodes < g->n_nodes ? n_nodes : g->n_nodes;
  if (n < 0) n = 0;
  b->n_nodes = n;
  finder f = {.g = g, .n = n};
  size_t nv = (size_t)g->n_values + 1;
  b->node_block = sc_malloc(((size_t)n + 1) * sizeof *b->node_block);
  b->label = sc_malloc(((size_t)n + 1) * sizeof *b->label);
  f.param = sc_calloc(nv, sizeof *f.param);
  f.act = sc_calloc(nv, sizeof *f.act);
  f.stamp = sc_calloc((size_t)n + 1, sizeof *f.stamp);
  f.stack = sc_malloc(((size_t)n + 1) * sizeof *f.stack);
  sc_status st = b->node_block && b->label && f.param && f.act && f.stamp && f.stack
                     ? SC_OK : SC_ERR_NOMEM;
  if (st == SC_OK) {
    for (int32_t i = 0; i < n; i++) b->node_block[i] = -1;
    for (int32_t v = 0; v < g->n_values; v++)
      f.param[v] = (g->values[v].flags & (SC_VALUE_CONST | SC_VALUE_PARAM)) != 0;
    for (int32_t k = 0; k < n_params; k++)
      if (params[k] >= 0 && params[k] < g->n_values) f.param[params[k]] = true;
    for (int32_t k = 0; k < g->n_inputs; k++) f.act[g->inputs[k]] = !f.param[g->inputs[k]];
    for (int32_t i = 0; i < n; i++) {
      const sc_node *nd = &g->nodes[i];
      if (!node_live(nd)) continue;
      bool any = false; /* a shape is no activation: it says nothing of values */
      for (int32_t k = 0; k < nd->n_inputs && nd->op != SC_OP_SHAPE && nd->op != SC_OP_SIZE; k++)
        if (nd->inputs[k] >= 0 && f.act[nd->inputs[k]]) any = true;
      for (int32_t j = 0; j < nd->n_outputs; j++)
        if (nd->outputs[j] >= 0) f.act[nd->outputs[j]] = any && !f.param[nd->outputs[j]];
    }
    st = find_structure(&f, b);
  }
  if (st == SC_OK && b->how == SC_BLOCKS_STRUCTURE) {
    if (name_key && label_by_names(&f, name_key, b)) {
      b->key = sc_strdup(name_key);
      if (!b->key) st = SC_ERR_NOMEM;
    } else {
      for (int32_t k = 0; k < b->n_blocks; k++) b->label[k] = k;
    }
  } else if (st == SC_OK && name_key) {
    st = find_by_names(&f, name_key, b);
    if (st == SC_OK && b->how == SC_BLOCKS_NAMES) {
      b->key = sc_strdup(name_key);
      if (!b->key) st = SC_ERR_NOMEM;
    }
  }
  sc_free(f.param);
  sc_free(f.act);
  sc_free(f.stamp);
  sc_free(f.stack);
  if (st != SC_OK) {
    sc_blocks_free(b);
    return sc_diag_set(d, st, NULL, NULL, "out of memory");
  }
  return SC_OK;
}

void sc_blocks_free(sc_blocks *b) {
  sc_free(b->node_block);
  sc_free(b->label);
  sc_free(b->key);
  memset(b, 0, sizeof *b);
}

void sc_blocks_describe(const sc_blocks *b, char *buf, size_t n) {
  if (b->how == SC_BLOCKS_STRUCTURE)
    snprintf(buf, n, "by structure (%d residual addition%s each)", (int)b->adds_per_block,
             b->adds_per_block == 1 ? "" : "s");
  else if (b->how == SC_BLOCKS_NAMES)
    snprintf(buf, n, "by names alone (no repeated residual structure)");
  else
    snprintf(buf, n, "none");
}
