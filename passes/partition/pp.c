/* pp.c — pipeline parallelism: which stage each node runs in, and the split
 * of the local graph into one graph per stage (contract in pp.h).
 *
 * Stage assignment. With boundaries, stage k+1 starts at the node named
 * boundaries[k]. Balanced, it is a linear-partition problem on per-node
 * costs c[i] (FLOPs + w x (output bytes + bytes of the weights a node is
 * first to read), plus 1 so that free nodes still spread; w the FLOPs a
 * byte's time is worth on the cluster, sc_pp_byte_weight, or 1):
 *   1. B* = the smallest possible largest stage cost, by bisection on the
 *      greedy test "packing runs of cost <= B needs at most n_stages runs";
 *   2. among the partitions into exactly n_stages non-empty runs of cost <=
 *      1.05 B*, a dynamic program picks the one whose cuts carry the fewest
 *      bytes (values produced before a cut and read after it), ties broken
 *      by the cuts' distance from the ideal positions (k * total / n_stages).
 *      Both terms add up over cuts, so dp[j][i] (first i nodes in j runs)
 *      takes the minimum over a sliding window of earlier cut points, kept
 *      in a monotone deque: O(n_stages * n_nodes).
 *
 * Split. Tags are numbered first, in the order the sends are made (stage,
 * then producer order, then receiving stage): a value's sends have
 * consecutive tags, so tag(v, t) = first_tag[v] + the index of t among the
 * later stages that read v. Each stage graph is then built in one walk over
 * its nodes: the local inputs it reads first, constants on first use, a
 * Recv before the first reader of a value from an earlier stage, the node
 * itself, then a Send per later stage reading one of its outputs.
 *
 * Order of Send and Recv. A send may block until its receive starts
 * (runtime/comm.h), so every stage issues its Send/Recv in increasing tag
 * order: then the smallest tag not yet done always has both ends waiting
 * on it, and nothing deadlocks. A stage's receives have smaller tags than
 * its sends (earlier stages' sends are numbered first), so each stage
 * receives in tag order — a Recv needed early pulls those of smaller tags
 * forward with it — and all before its first Send. Per pair of stages this
 * is the match pp.h asks for (both sides by tag); it differs from "Recvs
 * in the order first needed" where that order would not be the tag order.
 *
 * Not handled: a local output that no node produces (a pass-through input
 * or a constant) is an output of no stage. */
#include "pp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/sharding.h"
#include "ir/op_comm.h" /* SC_COMM_TAG_MAX */
#include "passes/plan/cost.h"

/* ---- stage assignment ---- */

/* A DP score: bytes crossing the cuts, then distance from the ideal cuts. */
typedef struct score {
  double bytes, dev;
} score;

static bool better(score a, score b) {
  return a.bytes < b.bytes || (a.bytes == b.bytes && a.dev < b.dev);
}

static double finite_or_0(double x) { return isfinite(x) && x > 0 ? x : 0; }

static double bytes_of(const sc_value *v) { return finite_or_0((double)sc_value_bytes(v)); }

/* cost[i] and cross[i] (bytes live across the cut just before node i). */
static sc_status node_costs(sc_graph *g, double bw, double *cost, double *cross) {
  bool *charged = sc_calloc((size_t)g->n_values + 1, sizeof *charged);
  int32_t *last = sc_malloc(((size_t)g->n_values + 1) * sizeof *last);
  if (!charged || !last) {
    sc_free(charged);
    sc_free(last);
    return SC_ERR_NOMEM;
  }
  for (int32_t v = 0; v < g->n_values; v++) last[v] = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sc_node *n = &g->nodes[i];
    sc_cost c = {0, 0};
    if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost) sc_ops[n->op].cost(g, n, &c);
    double bytes = 0;
    for (int32_t k = 0; k < n->n_outputs; k++)
      if (n->outputs[k] >= 0) bytes += bytes_of(&g->values[n->outputs[k]]);
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t v = n->inputs[k];
      if (v < 0) continue;
      last[v] = i;
      if (sc_value_is_const(&g->values[v]) && g->values[v].producer < 0 && !charged[v]) {
        charged[v] = true;
        bytes += bytes_of(&g->values[v]);
      }
    }
    cost[i] = 1 + finite_or_0(c.flops) + bw * bytes;
  }
  /* a produced value read later crosses the cuts in (producer, last reader] */
  for (int32_t i = 0; i <= g->n_nodes; i++) cross[i] = 0;
  for (int32_t v = 0; v < g->n_values; v++) {
    int32_t p = g->values[v].producer;
    if (p < 0 || last[v] <= p) continue;
    double b = bytes_of(&g->values[v]);
    cross[p + 1] += b;
    cross[last[v] + 1] -= b;
  }
  for (int32_t i = 1; i <= g->n_nodes; i++) cross[i] += cross[i - 1];
  sc_free(charged);
  sc_free(last);
  return SC_OK;
}

/* Whether runs of cost <= b pack the nodes into at most k runs. */
static bool fits(const double *cost, int32_t n, int32_t k, double b) {
  int32_t runs = 1;
  double sum = 0;
  for (int32_t i = 0; i < n; i++) {
    if (cost[i] > b) return false;
    if (sum + cost[i] > b) {
      if (++runs > k) return false;
      sum = 0;
    }
    sum += cost[i];
  }
  return true;
}

sc_status sc_pp_node_costs(sc_graph *g, double byte_weight, double *cost) {
  double *cross = sc_malloc(((size_t)g->n_nodes + 1) * sizeof *cross);
  if (!cross) return SC_ERR_NOMEM;
  sc_status st = node_costs(g, byte_weight, cost, cross);
  sc_free(cross);
  return st;
}

double sc_pp_byte_weight(const sc_cluster *c, bool low_precision) {
  if (!c) return 1;
  double peak = c->peak_flops[low_precision ? SC_CLUSTER_BF16 : SC_CLUSTER_FP32];
  double hbm = c->memory_bytes_per_s * SC_COST_MEMORY_EFF;
  double w = peak * SC_COST_GEMM_BEST / hbm;
  return isfinite(w) && w > 0 ? w : 1;
}

/* The DP described at the top, writing node_stage. given: per-node costs
 * to use instead of g's own (NULL: node_costs). */
static sc_status balance(sc_graph *g, int32_t k, const double *given, int32_t *node_stage) {
  int32_t n = g->n_nodes;
  size_t n1 = (size_t)n + 1;
  double *cost = sc_malloc(n1 * sizeof *cost), *cross = sc_malloc(n1 * sizeof *cross);
  double *pre = sc_malloc(n1 * sizeof *pre);
  score *prev = sc_malloc(n1 * sizeof *prev), *cur = sc_malloc(n1 * sizeof *cur);
  int32_t *dq = sc_malloc(n1 * sizeof *dq);
  int32_t *from = sc_calloc((size_t)k * n1, sizeof *from); /* from[j*n1+i]: cut */
  sc_status st = SC_ERR_NOMEM;
  if (!cost || !cross || !pre || !prev || !cur || !dq || !from) goto done;
  if ((st = node_costs(g, 1, cost, cross)) != SC_OK) goto done;
  if (given) memcpy(cost, given, (size_t)n * sizeof *cost);
  pre[0] = 0;
  for (int32_t i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
  double lo = 0, hi = pre[n];
  for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (fits(cost, n, k, mid)) hi = mid;
    else lo = mid;
  }
  double limit = hi * 1.05;
  const score inf = {INFINITY, INFINITY};
  for (int32_t i = 0; i <= n; i++)
    prev[i] = i >= 1 && pre[i] <= limit ? (score){0, 0} : inf;
  for (int32_t j = 2; j <= k; j++) {
    /* cut p starts run j (1-based); its ideal position is (j-1)/k of the total */
    double ideal = pre[n] * (double)(j - 1) / (double)k;
    int32_t head = 0, tail = 0, next = j - 1;
    for (int32_t i = 0; i <= n; i++) {
      cur[i] = inf;
      if (i < j) continue;
      for (; next <= i - 1; next++) { /* push candidate cut `next` */
        if (isinf(prev[next].bytes)) continue;
        score c = {prev[next].bytes + cross[next], prev[next].dev + fabs(pre[next] - ideal)};
        while (tail > head) {
          int32_t q = dq[tail - 1];
          score cq = {prev[q].bytes + cross[q], prev[q].dev + fabs(pre[q] - ideal)};
          if (better(c, cq)) tail--;
          else break;
        }
        dq[tail++] = next;
      }
      while (head < tail && pre[i] - pre[dq[head]] > limit) head++;
      if (head == tail) continue;
      int32_t p = dq[head];
      cur[i] = (score){prev[p].bytes + cross[p], prev[p].dev + fabs(pre[p] - ideal)};
      from[(size_t)(j - 1) * n1 + (size_t)i] = p;
    }
    score *t = prev;
    prev = cur;
    cur = t;
  }
  /* runs of cost <= hi exist, and splitting them keeps that bound */
  SC_ASSERT(!isinf(prev[n].bytes));
  for (int32_t j = k, end = n; j >= 1; j--) {
    int32_t start = j == 1 ? 0 : from[(size_t)(j - 1) * n1 + (size_t)end];
    for (int32_t i = start; i < end; i++) node_stage[i] = j - 1;
    end = start;
  }
  st = SC_OK;
done:
  sc_free(cost);
  sc_free(cross);
  sc_free(pre);
  sc_free(prev);
  sc_free(cur);
  sc_free(dq);
  sc_free(from);
  return st;
}

static int32_t find_node(const sc_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return i;
  return -1;
}

static sc_status from_boundaries(sc_graph *g, int32_t k, const char *const *b, int32_t *stage,
                                 sc_diag *d) {
  int32_t prev = 0;
  for (int32_t j = 0; j < k - 1; j++) {
    const char *name = b[j] ? b[j] : "";
    int32_t at = find_node(g, name);
    if (at < 0)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "pipeline boundary '%s' is not a node of the graph", name);
    if (at == 0)
      return sc_diag_set(d, SC_ERR_INVALID, name, sc_op_name(g->nodes[at].op),
                         "pipeline boundary '%s' is the first node: stage 0 would be empty",
                         name);
    if (j > 0 && at <= prev)
      return sc_diag_set(d, SC_ERR_INVALID, name, sc_op_name(g->nodes[at].op),
                         "pipeline boundary '%s' (node %d) does not come after boundary "
                         "'%s' (node %d)",
                         name, (int)at, b[j - 1], (int)prev);
    for (int32_t i = prev; i < at; i++) stage[i] = j;
    prev = at;
  }
  for (int32_t i = prev; i < g->n_nodes; i++) stage[i] = k - 1;
  return SC_OK;
}

sc_status sc_pp_assign_stages(sc_graph *g, int32_t n_stages, const char *const *boundaries,
                              int32_t n_b, int32_t *node_stage, sc_diag *d) {
  return sc_pp_assign_stages_costed(g, n_stages, boundaries, n_b, NULL, node_stage, d);
}

sc_status sc_pp_assign_stages_costed(sc_graph *g, int32_t n_stages,
                                     const char *const *boundaries, int32_t n_b,
                                     const double *node_cost, int32_t *node_stage,
                                     sc_diag *d) {
  if (n_stages < 1)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "%d pipeline stages (at least 1)",
                       (int)n_stages);
  if (g->n_nodes < n_stages)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "%d pipeline stages but the graph has only %d nodes", (int)n_stages,
                       (int)g->n_nodes);
  if (n_b != 0 && n_b != n_stages - 1)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "%d pipeline boundaries for %d stages (want %d)", (int)n_b,
                       (int)n_stages, (int)n_stages - 1);
  if (n_b > 0) return from_boundaries(g, n_stages, boundaries, node_stage, d);
  if (n_stages == 1) {
    for (int32_t i = 0; i < g->n_nodes; i++) node_stage[i] = 0;
    return SC_OK;
  }
  sc_status st = balance(g, n_stages, node_cost, node_stage);
  if (st != SC_OK) return sc_diag_set(d, st, NULL, NULL, "out of memory");
  return SC_OK;
}

/* ---- split ---- */

typedef struct splitter {
  sc_graph *local;
  int32_t k;
  const char *axis;
  int32_t *stage;     /* [n_nodes] */
  int32_t *uoff, *users; /* sc_graph_users */
  int32_t *first_tag; /* [n_values]: tag of v's first send, or -1 */
  /* per stage graph being built */
  sc_graph *g;
  int32_t s;
  int32_t *vmap;      /* [n_values] local id -> stage id, or -1 */
  int32_t *rpos;      /* [n_values] index in recv[] of a value to receive, or -1 */
  int32_t *recv;      /* values to receive, by tag */
  int32_t n_recv;
  int64_t *key;       /* [n_values] scratch: tag << 32 | value id */
  int32_t next_recv;  /* recv[] before it are received */
  int32_t *io;        /* scratch for one node's inputs and outputs */
  bool handoff;       /* pieces (sc_pp_split_pieces): no Send/Recv */
  bool *is_out;       /* [n_values] handoff: already an output of sp->g */
} splitter;

static int32_t stage_of_value(const splitter *sp, int32_t v) {
  int32_t p = sp->local->values[v].producer;
  return p < 0 ? -1 : sp->stage[p];
}

/* The tag of v's send to stage t (t > v's stage, t reads v). */
static int32_t tag_of(const splitter *sp, int32_t v, int32_t t) {
  int32_t tag = sp->first_tag[v], last = stage_of_value(sp, v);
  for (int32_t u = sp->uoff[v]; u < sp->uoff[v + 1]; u++) {
    int32_t su = sp->stage[sp->users[u]];
    if (su <= last) continue;
    if (su == t) return tag;
    tag++;
    last = su;
  }
  SC_ASSERT(!"tag_of: t does not read v");
  return -1;
}

/* Reads `__stage` of every node into sp->stage, checking range and order. */
static sc_status read_stages(splitter *sp, sc_diag *d) {
  sc_graph *l = sp->local;
  for (int32_t i = 0; i < l->n_nodes; i++) {
    const sc_node *n = &l->nodes[i];
    const sc_attr *a = sc_node_attr(n, "__stage");
    if (!a || a->kind != SC_ATTR_INT)
      return sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                         "no int attribute '__stage'");
    if (a->i < 0 || a->i >= sp->k)
      return sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                         "__stage %lld is outside [0, %d)", (long long)a->i, (int)sp->k);
    if (!sp->handoff && i > 0 && a->i < sp->stage[i - 1])
      return sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                         "__stage %lld comes after a node of stage %d", (long long)a->i,
                         (int)sp->stage[i - 1]);
    sp->stage[i] = (int32_t)a->i;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      if (v >= 0 && l->values[v].producer >= i)
        return sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                           "input '%s' is produced later", l->values[v].name);
      if (sp->handoff && v >= 0 && l->values[v].producer >= 0 &&
          sp->stage[l->values[v].producer] > a->i)
        return sc_diag_set(d, SC_ERR_INVALID, n->name, sc_op_name(n->op),
                           "input '%s' comes from piece %d, after this node's piece %lld",
                           l->values[v].name, (int)sp->stage[l->values[v].producer],
                           (long long)a->i);
    }
  }
  return SC_OK;
}

/* Numbers the sends: first_tag[v] for each value read by a later stage. */
static sc_status number_tags(splitter *sp, sc_diag *d) {
  sc_graph *l = sp->local;
  int32_t tag = 0;
  for (int32_t v = 0; v < l->n_values; v++) sp->first_tag[v] = -1;
  for (int32_t i = 0; i < l->n_nodes; i++) {
    const sc_node *n = &l->nodes[i];
    for (int32_t j = 0; j < n->n_outputs; j++) {
      int32_t v = n->outputs[j];
      if (v < 0) continue;
      int32_t last = sp->stage[i];
      for (int32_t u = sp->uoff[v]; u < sp->uoff[v + 1]; u++) {
        int32_t su = sp->stage[sp->users[u]];
        if (su <= last) continue;
        if (sp->first_tag[v] < 0) sp->first_tag[v] = tag;
        if (tag > SC_COMM_TAG_MAX)
          return sc_diag_set(d, SC_ERR_LIMIT, n->name, sc_op_name(n->op),
                             "pipeline split needs more than %d tags", SC_COMM_TAG_MAX + 1);
        tag++;
        last = su;
      }
    }
  }
  return SC_OK;
}

/* A copy of local value lv in the stage graph (data and constant flags
 * unless received), with its sharding. -1 on error (g->diag). */
static int32_t copy_value(splitter *sp, int32_t lv, bool received) {
  const sc_value *x = &sp->local->values[lv];
  sc_graph *g = sp->g;
  int32_t id = sc_graph_add_value(g, x->name);
  if (id < 0) return -1;
  sc_status st = SC_OK;
  if (!received && x->data)
    st = sc_value_set_data(g, id, x->dtype, x->rank, x->dims, x->data, x->data_bytes, false);
  else if (x->rank >= 0)
    st = sc_value_set_shape(g, id, x->dtype, x->rank, x->dims);
  else
    g->values[id].dtype = x->dtype;
  if (st != SC_OK) return -1;
  sc_value *y = &g->values[id];
  if (!received) {
    y->flags |= x->flags & (SC_VALUE_CONST | SC_VALUE_PARAM);
    y->ext_location = x->ext_location; /* the local graph outlives g */
    y->ext_offset = x->ext_offset;
  }
  const sc_sharding *sh = sc_graph_sharding(sp->local, lv);
  if (sh && sc_graph_set_sharding(g, id, sh) != SC_OK) return -1;
  sp->vmap[lv] = id;
  return id;
}

static sc_status add_p2p_attrs(splitter *sp, int32_t nid, int32_t peer, int32_t tag) {
  sc_graph *g = sp->g;
  sc_attr *a = sc_node_add_attr(g, nid, "axes", SC_ATTR_STRINGS);
  if (!a || !(a->strings = sc_arena_array(&g->arena, 1, sizeof *a->strings)) ||
      !(a->strings[0] = sc_arena_strdup(&g->arena, sp->axis)))
    return SC_ERR_NOMEM;
  a->n = 1;
  if (!(a = sc_node_add_attr(g, nid, "peer_stage", SC_ATTR_INT))) return SC_ERR_NOMEM;
  a->i = peer;
  if (!(a = sc_node_add_attr(g, nid, "tag", SC_ATTR_INT))) return SC_ERR_NOMEM;
  a->i = tag;
  return SC_OK;
}

/* Recv of recv[idx] (a value produced in an earlier stage). */
static sc_status emit_recv(splitter *sp, int32_t idx) {
  int32_t lv = sp->recv[idx], from = stage_of_value(sp, lv);
  sc_graph *g = sp->g;
  const sc_value *x = &sp->local->values[lv];
  int32_t out = copy_value(sp, lv, true);
  if (out < 0) return g->diag.status;
  char *name = sc_arena_printf(&g->arena, "%s.recv_from_%d", x->name, (int)from);
  int32_t nid = name ? sc_graph_add_node(g, SC_OP_RECV, name, NULL, 0, &out, 1) : -1;
  if (nid < 0 || add_p2p_attrs(sp, nid, from, tag_of(sp, lv, sp->s)) != SC_OK)
    return SC_ERR_NOMEM;
  sc_attr *a = sc_node_add_attr(g, nid, "dtype", SC_ATTR_STRING);
  if (!a || !(a->s = sc_arena_strdup(&g->arena, sc_dtype_name(x->dtype)))) return SC_ERR_NOMEM;
  if (!(a = sc_node_add_attr(g, nid, "shape", SC_ATTR_INTS))) return SC_ERR_NOMEM;
  a->n = x->rank > 0 ? x->rank : 0;
  if (!(a->ints = sc_arena_array(&g->arena, SC_MAX_RANK, sizeof *a->ints))) return SC_ERR_NOMEM;
  for (int32_t i = 0; i < a->n; i++) a->ints[i] = x->dims[i];
  return SC_OK;
}

/* Receives recv[next_recv .. upto). */
static sc_status recv_until(splitter *sp, int32_t upto) {
  for (; sp->next_recv < upto; sp->next_recv++) {
    sc_status st = emit_recv(sp, sp->next_recv);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

/* Sends of local value lv (produced in this stage) to each later reader,
 * after every Recv of the stage (see the top). */
static sc_status emit_sends(splitter *sp, int32_t lv) {
  sc_graph *g = sp->g;
  if (sp->handoff) { /* an output, once, if another piece reads it */
    for (int32_t u = sp->uoff[lv]; !sp->is_out[lv] && u < sp->uoff[lv + 1]; u++)
      if (sp->stage[sp->users[u]] != sp->s) {
        sp->is_out[lv] = true;
        sc_status st = sc_graph_add_output(g, sp->vmap[lv]);
        if (st != SC_OK) return st;
      }
    return SC_OK;
  }
  const sc_value *x = &sp->local->values[lv];
  int32_t last = sp->s;
  for (int32_t u = sp->uoff[lv]; u < sp->uoff[lv + 1]; u++) {
    int32_t t = sp->stage[sp->users[u]];
    if (t <= last) continue;
    last = t;
    sc_status st = recv_until(sp, sp->n_recv);
    if (st != SC_OK) return st;
    char *tok = sc_arena_printf(&g->arena, "%s.sent_to_%d", x->name, (int)t);
    char *name = sc_arena_printf(&g->arena, "%s.send_to_%d", x->name, (int)t);
    if (!tok || !name) return SC_ERR_NOMEM;
    if (sc_graph_find_value(sp->local, tok) >= 0)
      return sc_graph_error(g, SC_ERR_INVALID, "value name '%s' is taken", tok);
    int32_t out = sc_graph_add_value(g, tok), in = sp->vmap[lv];
    int64_t zero = 0;
    if (out < 0 || sc_value_set_shape(g, out, x->dtype, 1, &zero) != SC_OK)
      return g->diag.status;
    int32_t nid = sc_graph_add_node(g, SC_OP_SEND, name, &in, 1, &out, 1);
    if (nid < 0 || add_p2p_attrs(sp, nid, t, tag_of(sp, lv, t)) != SC_OK) return SC_ERR_NOMEM;
  }
  return SC_OK;
}

/* Deep copy of node n's attributes onto stage node nid. */
static sc_status copy_attrs(sc_graph *g, int32_t nid, const sc_node *n) {
  if (n->n_attrs == 0) return SC_OK;
  sc_attr *a = sc_arena_array(&g->arena, (size_t)n->n_attrs, sizeof *a);
  if (!a) return SC_ERR_NOMEM;
  sc_arena *ar = &g->arena;
  for (int32_t i = 0; i < n->n_attrs; i++) {
    const sc_attr *x = &n->attrs[i];
    a[i] = *x;
    size_t cnt = (size_t)(x->n > 0 ? x->n : 0);
    if (!(a[i].name = sc_arena_strdup(ar, x->name))) return SC_ERR_NOMEM;
    if (x->s && !(a[i].s = sc_arena_strdup(ar, x->s))) return SC_ERR_NOMEM;
    if (x->ints && !(a[i].ints = sc_arena_array(ar, cnt + 1, sizeof *x->ints)))
      return SC_ERR_NOMEM;
    if (x->ints && cnt) memcpy(a[i].ints, x->ints, cnt * sizeof *x->ints);
    if (x->floats && !(a[i].floats = sc_arena_array(ar, cnt + 1, sizeof *x->floats)))
      return SC_ERR_NOMEM;
    if (x->floats && cnt) memcpy(a[i].floats, x->floats, cnt * sizeof *x->floats);
    if (x->strings) {
      if (!(a[i].strings = sc_arena_array(ar, cnt + 1, sizeof *x->strings))) return SC_ERR_NOMEM;
      for (size_t j = 0; j < cnt; j++)
        if (x->strings[j] && !(a[i].strings[j] = sc_arena_strdup(ar, x->strings[j])))
          return SC_ERR_NOMEM;
    }
    if (x->t) { /* tensor data stays borrowed from the local graph */
      size_t nt = x->kind == SC_ATTR_TENSORS ? cnt : 1;
      if (!(a[i].t = sc_arena_array(ar, nt + 1, sizeof *x->t))) return SC_ERR_NOMEM;
      memcpy(a[i].t, x->t, nt * sizeof *x->t);
    }
  }
  g->nodes[nid].attrs = a;
  g->nodes[nid].n_attrs = n->n_attrs;
  return SC_OK;
}


static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Fills recv[] with the values stage s reads from earlier stages, in tag
 * order, and rpos[] with their positions. */
static void plan_recvs(splitter *sp) {
  sc_graph *l = sp->local;
  sp->n_recv = 0;
  for (int32_t i = 0; i < l->n_nodes; i++) {
    if (sp->stage[i] != sp->s) continue;
    const sc_node *n = &l->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      if (v < 0 || sp->rpos[v] >= 0) continue;
      int32_t from = stage_of_value(sp, v);
      if (from < 0 || from >= sp->s) continue;
      sp->rpos[v] = 0; /* seen */
      sp->key[sp->n_recv++] = ((int64_t)tag_of(sp, v, sp->s) << 32) | v;
    }
  }
  qsort(sp->key, (size_t)sp->n_recv, sizeof *sp->key, cmp_i64);
  sp->next_recv = 0;
  for (int32_t i = 0; i < sp->n_recv; i++) {
    int32_t v = (int32_t)(sp->key[i] & 0xffffffff);
    sp->recv[i] = v;
    sp->rpos[v] = i;
  }
}

/* Maps local value v for a reader in this stage: a Recv (after those of
 * smaller tags), or a copy of a constant. */
static sc_status need(splitter *sp, int32_t v) {
  if (sp->vmap[v] >= 0) return SC_OK;
  int32_t from = stage_of_value(sp, v);
  if (sp->handoff && from >= 0 && from != sp->s) { /* an input handed over */
    int32_t id = copy_value(sp, v, true);
    return id < 0 ? sp->g->diag.status : sc_graph_add_input(sp->g, id);
  }
  if (sp->rpos[v] >= 0) return recv_until(sp, sp->rpos[v] + 1);
  /* a constant (a value of no producer that is not a graph input) */
  return copy_value(sp, v, false) < 0 ? sp->g->diag.status : SC_OK;
}

static bool stage_reads(const splitter *sp, int32_t v) {
  for (int32_t u = sp->uoff[v]; u < sp->uoff[v + 1]; u++)
    if (sp->stage[sp->users[u]] == sp->s) return true;
  return false;
}

/* Builds stage sp->s into sp->g (created by the caller). */
static sc_status build_stage(splitter *sp) {
  sc_graph *l = sp->local, *g = sp->g;
  sc_status st = SC_OK;
  for (int32_t v = 0; v < l->n_values; v++) sp->vmap[v] = sp->rpos[v] = -1;
  if (sp->handoff) memset(sp->is_out, 0, (size_t)l->n_values * sizeof *sp->is_out);
  else plan_recvs(sp);
  for (int32_t i = 0; i < l->n_inputs && st == SC_OK; i++) {
    int32_t v = l->inputs[i];
    if (!stage_reads(sp, v)) continue;
    int32_t id = copy_value(sp, v, false);
    st = id < 0 ? g->diag.status : sc_graph_add_input(g, id);
  }
  for (int32_t i = 0; i < l->n_nodes && st == SC_OK; i++) {
    if (sp->stage[i] != sp->s) continue;
    const sc_node *n = &l->nodes[i];
    int32_t *ins = sp->io, *outs = sp->io + n->n_inputs;
    for (int32_t j = 0; j < n->n_inputs && st == SC_OK; j++) {
      int32_t v = n->inputs[j];
      if (v >= 0) st = need(sp, v);
      ins[j] = v >= 0 ? sp->vmap[v] : -1;
    }
    for (int32_t j = 0; j < n->n_outputs && st == SC_OK; j++) {
      int32_t v = n->outputs[j];
      outs[j] = v >= 0 ? copy_value(sp, v, false) : -1;
      if (v >= 0 && outs[j] < 0) st = g->diag.status;
    }
    if (st != SC_OK) break;
    int32_t nid = sc_graph_add_node(g, n->op, n->name, ins, n->n_inputs, outs, n->n_outputs);
    if (nid < 0) return g->diag.status;
    if ((st = copy_attrs(g, nid, n)) != SC_OK) break;
    for (int32_t j = 0; j < n->n_outputs && st == SC_OK; j++)
      if (n->outputs[j] >= 0) st = emit_sends(sp, n->outputs[j]);
  }
  for (int32_t i = 0; i < l->n_outputs && st == SC_OK; i++) {
    int32_t v = l->outputs[i];
    int32_t so = stage_of_value(sp, v);
    if (so < 0) { /* a constant or a graph input: stage 0 gives it out */
      if (sp->s != 0) continue;
      if (sp->vmap[v] < 0) {
        int32_t id = copy_value(sp, v, false);
        if (id < 0) return g->diag.status;
        if ((l->values[v].flags & SC_VALUE_INPUT) && (st = sc_graph_add_input(g, id)) != SC_OK)
          break;
      }
      so = 0;
    }
    if (so == sp->s && !(sp->handoff && sp->is_out[v])) st = sc_graph_add_output(g, sp->vmap[v]);
  }
  if (st == SC_OK) st = sc_graph_verify(g, true);
  return st;
}

/* The stage graph's diagnostic into d, or a plain message. */
static sc_status report(sc_graph *g, sc_status st, sc_diag *d) {
  if (g && g->diag.status != SC_OK) {
    if (d->status == SC_OK) *d = g->diag;
    return st;
  }
  return sc_diag_set(d, st, NULL, NULL, "pipeline split: %s",
                     st == SC_ERR_NOMEM ? "out of memory" : sc_status_name(st));
}

static sc_status check_mesh(const sc_graph *l, int32_t k, const char *axis, sc_diag *d) {
  if (k == 1) return SC_OK;
  const sc_mesh *m = sc_graph_mesh(l);
  if (!m)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "pipeline split needs a mesh");
  int32_t a = sc_mesh_find_axis(m, axis ? axis : "");
  if (a < 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "pipeline axis '%s' is not in the mesh",
                       axis ? axis : "");
  if (m->axes[a].size != k)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "pipeline axis '%s' has size %lld but there are %d stages", axis,
                       (long long)m->axes[a].size, (int)k);
  return SC_OK;
}

static sc_status split(sc_graph *local, int32_t n_stages, const char *pp_axis, bool handoff,
                       sc_graph **stages_out, sc_diag *d) {
  if (n_stages < 1)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "%d pipeline stages (at least 1)",
                       (int)n_stages);
  for (int32_t s = 0; s < n_stages; s++) stages_out[s] = NULL;
  sc_status st = handoff ? SC_OK : check_mesh(local, n_stages, pp_axis, d);
  if (st != SC_OK) return st;
  size_t nv = (size_t)local->n_values + 1;
  splitter sp = {.local = local, .k = n_stages, .axis = pp_axis, .handoff = handoff};
  sp.is_out = sc_calloc(nv, sizeof *sp.is_out);
  sp.stage = sc_malloc(((size_t)local->n_nodes + 1) * sizeof *sp.stage);
  sp.first_tag = sc_malloc(nv * sizeof *sp.first_tag);
  sp.vmap = sc_malloc(nv * sizeof *sp.vmap);
  sp.rpos = sc_malloc(nv * sizeof *sp.rpos);
  sp.recv = sc_malloc(nv * sizeof *sp.recv);
  sp.key = sc_malloc(nv * sizeof *sp.key);
  size_t io = 1;
  for (int32_t i = 0; i < local->n_nodes; i++)
    if ((size_t)local->nodes[i].n_inputs + (size_t)local->nodes[i].n_outputs > io)
      io = (size_t)local->nodes[i].n_inputs + (size_t)local->nodes[i].n_outputs;
  sp.io = sc_malloc(io * sizeof *sp.io);
  if (!sp.io || !sp.is_out || !sp.stage || !sp.first_tag || !sp.vmap || !sp.rpos || !sp.recv || !sp.key ||
      sc_graph_users(local, &sp.uoff, &sp.users) != SC_OK) {
    st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    goto done;
  }
  if ((st = read_stages(&sp, d)) != SC_OK || (!handoff && (st = number_tags(&sp, d)) != SC_OK))
    goto done;
  const sc_mesh *mesh = sc_graph_mesh(local);
  for (sp.s = 0; sp.s < n_stages; sp.s++) {
    char name[600];
    snprintf(name, sizeof name, "%s.%s%d", local->name ? local->name : "graph",
             handoff ? "piece" : "stage", (int)sp.s);
    sp.g = stages_out[sp.s] = sc_graph_create(name);
    if (!sp.g) {
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      goto done;
    }
    sp.g->opset = local->opset;
    sp.g->ir_version = local->ir_version;
    sp.g->producer = local->producer; /* the local graph outlives its stages */
    st = mesh ? sc_graph_attach_mesh(sp.g, mesh) : SC_OK;
    if (st == SC_OK && mesh && local->shardings->local_shapes) sc_graph_mark_local_shapes(sp.g);
    if (st == SC_OK) st = build_stage(&sp);
    if (st != SC_OK) {
      report(sp.g, st, d);
      goto done;
    }
  }
done:
  if (st != SC_OK)
    for (int32_t s = 0; s < n_stages; s++) {
      sc_graph_destroy(stages_out[s]);
      stages_out[s] = NULL;
    }
  sc_free(sp.stage);
  sc_free(sp.first_tag);
  sc_free(sp.vmap);
  sc_free(sp.rpos);
  sc_free(sp.recv);
  sc_free(sp.key);
  sc_free(sp.io);
  sc_free(sp.is_out);
  sc_free(sp.uoff);
  sc_free(sp.users);
  return st;
}

sc_status sc_pp_split(sc_graph *local, int32_t n_stages, const char *pp_axis,
                      sc_graph **stages_out, sc_diag *d) {
  return split(local, n_stages, pp_axis, false, stages_out, d);
}

sc_status sc_pp_split_pieces(sc_graph *local, int32_t n_pieces, sc_graph **pieces_out,
                             sc_diag *d) {
  return split(local, n_pieces, NULL, true, pieces_out, d);
}
