/* cut.c — where pending sums are reduced: a minimum cut (partition.h,
 * sc_cut_*; the model is localize.c's "the cut").
 *
 * Nodes are pending values (a value and a mesh axis). Pending flows from a
 * node's inputs to its outputs along flow edges; it begins at source nodes;
 * a reduction downstream costs what it moves. Reducing a node where it is
 * made costs its cut cost and stops everything that flows through it. The
 * cheapest set of nodes to reduce, against the reductions left, is a
 * minimum S-T cut of:
 *
 *   S -> in(v)        for a source v            (unbounded)
 *   in(v) -> out(v)   v's cut cost
 *   out(u) -> in(v)   a flow edge u -> v         (unbounded)
 *   out(v) -> T       the reductions of v        (their cost)
 *
 * solved by Dinic's max-flow (breadth-first levels, depth-first blocking
 * flows, iterative). The cut nodes are those whose in(v) is reachable from
 * S in the residual graph and out(v) is not. */
#include <string.h>

#include "partition.h"

typedef struct edge {
  int32_t to, next;
  double cap;
} edge;

typedef struct vnode {
  double cut_cost;
  double reduce_cost;   /* its reductions, summed */
  bool source;
} vnode;

struct sc_cutgraph {
  vnode *nodes;         /* value nodes; flow nodes are 2 per value + S, T */
  int32_t n_nodes, cap_nodes;
  int32_t (*flow)[2];   /* flow edges between value nodes: from, to */
  int32_t n_flow, cap_flow;
  bool nomem;
};

sc_cutgraph *sc_cut_create(void) { return sc_calloc(1, sizeof(sc_cutgraph)); }

void sc_cut_destroy(sc_cutgraph *g) {
  if (!g) return;
  sc_free(g->nodes);
  sc_free(g->flow);
  sc_free(g);
}

int32_t sc_cut_node(sc_cutgraph *g, double cut_cost, bool source) {
  if (g->n_nodes == g->cap_nodes) {
    int32_t nc = g->cap_nodes ? 2 * g->cap_nodes : 256;
    vnode *a = sc_realloc(g->nodes, (size_t)nc * sizeof *a);
    if (!a) {
      g->nomem = true;
      return -1;
    }
    g->nodes = a;
    g->cap_nodes = nc;
  }
  g->nodes[g->n_nodes] = (vnode){cut_cost, 0, source};
  return g->n_nodes++;
}

void sc_cut_flow(sc_cutgraph *g, int32_t from, int32_t to) {
  if (from < 0 || to < 0) return;
  if (g->n_flow == g->cap_flow) {
    int32_t nc = g->cap_flow ? 2 * g->cap_flow : 256;
    int32_t(*a)[2] = sc_realloc(g->flow, (size_t)nc * sizeof *a);
    if (!a) {
      g->nomem = true;
      return;
    }
    g->flow = a;
    g->cap_flow = nc;
  }
  g->flow[g->n_flow][0] = from;
  g->flow[g->n_flow++][1] = to;
}

void sc_cut_reduce(sc_cutgraph *g, int32_t node, double cost) {
  if (node >= 0 && node < g->n_nodes) g->nodes[node].reduce_cost += cost;
}

int32_t sc_cut_count(const sc_cutgraph *g) { return g->n_nodes; }

typedef struct flow {
  edge *e;
  int32_t n_e, cap_e;
  int32_t *head, *level, *it, *queue;
  int32_t n;
} flow;

static bool add_edge(flow *f, int32_t u, int32_t v, double cap) {
  if (f->n_e + 2 > f->cap_e) {
    int32_t nc = f->cap_e ? 2 * f->cap_e : 1024;
    edge *x = sc_realloc(f->e, (size_t)nc * sizeof *x);
    if (!x) return false;
    f->e = x;
    f->cap_e = nc;
  }
  f->e[f->n_e] = (edge){v, f->head[u], cap};
  f->head[u] = f->n_e++;
  f->e[f->n_e] = (edge){u, f->head[v], 0};
  f->head[v] = f->n_e++;
  return true;
}

/* Levels from s over edges with capacity left; whether t is reached. */
static bool levels(flow *f, int32_t s, int32_t t) {
  for (int32_t i = 0; i < f->n; i++) f->level[i] = -1;
  int32_t qh = 0, qt = 0;
  f->level[s] = 0;
  f->queue[qt++] = s;
  while (qh < qt) {
    int32_t u = f->queue[qh++];
    for (int32_t k = f->head[u]; k >= 0; k = f->e[k].next)
      if (f->e[k].cap > 0 && f->level[f->e[k].to] < 0) {
        f->level[f->e[k].to] = f->level[u] + 1;
        f->queue[qt++] = f->e[k].to;
      }
  }
  return f->level[t] >= 0;
}

/* One augmenting path along the levels (iterative depth-first search with
 * per-node edge iterators); the flow pushed, 0 when none is left. */
static double augment(flow *f, int32_t s, int32_t t, int32_t *path) {
  int32_t depth = 0, u = s;
  for (;;) {
    if (u == t) {
      double push = SC_CUT_INF;
      for (int32_t i = 0; i < depth; i++)
        if (f->e[path[i]].cap < push) push = f->e[path[i]].cap;
      for (int32_t i = 0; i < depth; i++) {
        f->e[path[i]].cap -= push;
        f->e[path[i] ^ 1].cap += push;
      }
      return push;
    }
    int32_t k = f->it[u];
    while (k >= 0 && !(f->e[k].cap > 0 && f->level[f->e[k].to] == f->level[u] + 1))
      k = f->e[k].next;
    f->it[u] = k;
    if (k >= 0) {
      path[depth++] = k;
      u = f->e[k].to;
      continue;
    }
    if (depth == 0) return 0;
    f->level[u] = -1; /* dead end */
    u = f->e[path[--depth] ^ 1].to;
    f->it[u] = f->e[f->it[u]].next;
  }
}

sc_status sc_cut_solve(sc_cutgraph *g, bool *cut, int32_t *n_cut) {
  *n_cut = 0;
  if (g->nomem) return SC_ERR_NOMEM;
  int32_t nv = g->n_nodes, S = 2 * nv, T = 2 * nv + 1;
  flow f = {0};
  f.n = 2 * nv + 2;
  f.head = sc_malloc((size_t)f.n * sizeof *f.head);
  f.level = sc_malloc((size_t)f.n * sizeof *f.level);
  f.it = sc_malloc((size_t)f.n * sizeof *f.it);
  f.queue = sc_malloc((size_t)f.n * sizeof *f.queue);
  int32_t *path = sc_malloc((size_t)f.n * sizeof *path);
  sc_status st = f.head && f.level && f.it && f.queue && path ? SC_OK : SC_ERR_NOMEM;
  for (int32_t i = 0; st == SC_OK && i < f.n; i++) f.head[i] = -1;
  for (int32_t v = 0; st == SC_OK && v < nv; v++) {
    const vnode *x = &g->nodes[v];
    if ((x->source && !add_edge(&f, S, 2 * v, SC_CUT_INF)) ||
        !add_edge(&f, 2 * v, 2 * v + 1, x->cut_cost) ||
        (x->reduce_cost > 0 && !add_edge(&f, 2 * v + 1, T, x->reduce_cost)))
      st = SC_ERR_NOMEM;
  }
  for (int32_t k = 0; st == SC_OK && k < g->n_flow; k++)
    if (!add_edge(&f, 2 * g->flow[k][0] + 1, 2 * g->flow[k][1], SC_CUT_INF)) st = SC_ERR_NOMEM;
  while (st == SC_OK && levels(&f, S, T)) {
    memcpy(f.it, f.head, (size_t)f.n * sizeof *f.it);
    while (augment(&f, S, T, path) > 0) {
    }
  }
  if (st == SC_OK) {
    levels(&f, S, T); /* reachable from S in the residual graph */
    for (int32_t v = 0; v < nv; v++) {
      cut[v] = f.level[2 * v] >= 0 && f.level[2 * v + 1] < 0;
      *n_cut += cut[v];
    }
  }
  sc_free(f.e);
  sc_free(f.head);
  sc_free(f.level);
  sc_free(f.it);
  sc_free(f.queue);
  sc_free(path);
  return st;
}
