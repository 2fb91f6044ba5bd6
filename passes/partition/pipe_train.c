/* pipe_train.c — the pieces of a pipelined training step (partition.h,
 * ir/pipe.h): which phase and chunk every node of the global step is in.
 *
 * Phases, from the step's outputs (passes/train.h names them):
 *   FORWARD   ancestors of the output "loss", less those of PREPARE;
 *   PREPARE   forward nodes that read only parameters, constants and
 *             each other (prepare_phase): once per step;
 *   BACKWARD  the other ancestors of the gradients "grad:P" and of the
 *             accumulators "new:accum:P" that a lower chunk's backward
 *             needs (the input gradients: see weight_phase), and all of
 *             them in a chunk whose backward recomputes;
 *   WEIGHT    the rest of them (weight gradients, accumulation);
 *   NORM      the other ancestors of "train:grad_norm" and "train:applied";
 *   UPDATE    the rest (each parameter's update, the clipping factor).
 * Ancestors of a phase's seeds that are already in an earlier phase stay
 * there, so every value flows forward → backward → norm → update.
 *
 * Chunks:
 *   forward   the forward nodes (moved ahead of the others: ancestors of
 *             the loss depend on nothing else) cut into C runs, balanced by
 *             cost or at the plan's boundaries (pp.c);
 *   owner(X)  a state input X (it has an output "new:X"): the chunk of the
 *             first forward reader of its parameter; a state of no
 *             parameter that no forward node reads (FP8 scaling state,
 *             passes/fp8.h) the smallest chunk among its backward readers,
 *             else that of another state of the same tensor (the name up
 *             to its last '.'): resolve_owners;
 *   backward  in topological order, the largest chunk among the forward
 *             values and state it reads (where the forward node it
 *             differentiates runs), but at most the smallest chunk of the
 *             backward values it reads: gradients flow from larger chunks
 *             to smaller ones;
 *   norm      the largest chunk among its inputs' (each chunk reduces its
 *             own gradients and sums their squares), except a node that
 *             reads only scalars (the sums of the squares, the square
 *             root, the decision): it stays in its inputs' chunk when they
 *             all come from one; one that combines several chunks' (or
 *             reads such a combination) moves to the update phase
 *             (meets()). The train pass sums the squares in forward order
 *             in groups of 16 parameters and then adds the groups' sums
 *             (passes/train.c): a group inside a chunk is summed there,
 *             and a chunk's norm piece sends one scalar per group (per
 *             parameter only where a group straddles a cut). A running
 *             sum passed from chunk to chunk instead would make each
 *             chunk's norm piece wait for the one before (a piece receives
 *             its inputs before it runs), so the pieces' gradient
 *             reductions would run one after another; so would a norm
 *             piece that combined the others' sums before its own
 *             reductions;
 *   update    in reverse order, the owner of the state it writes ("new:X"),
 *             else the smallest chunk among its readers: the combined
 *             norm and the step's decision, which every chunk's update
 *             reads, in chunk 0's update piece (rank 0 runs the step's
 *             last backward in 1F1B and the interleaved schedule, so its
 *             norm piece is the last to finish anyway), and a copy of
 *             them in each other pipeline rank's first update piece
 *             (clone_shared_per_rank), which its updates read.
 * A state input read on another pipeline rank than its owner's (a tied
 * embedding read by the LM head) is read there through an Identity in the
 * owner's prepare piece: the owner sends the current value once a step,
 * and the gradient of the copy flows back to the owner.
 * The prepare nodes keep the chunk the forward's cut gave them (their
 * cost weighs in the balance at 1/M: they run once a step).
 *
 * Finally every value must flow from a piece to the same or a later one
 * (an error naming the node otherwise), and the nodes are reordered by
 * piece (stable: a topological order), so that localize walks them in the
 * order the pieces run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "ir/pipe.h"
#include "partition.h"
#include "pp.h"

/* owner[v] of a state input whose chunk is known only once the backward's
 * are (resolve_owners) */
enum { OWNER_PENDING = -2 };

typedef struct pipe_ctx {
  sc_partition *p;
  sc_graph *g;
  int32_t C, P;
  int8_t *phase;  /* [n_nodes] */
  int32_t *chunk; /* [n_nodes] */
  int32_t *owner; /* [n_values] owner chunk of a state input, or -1 */
  sc_diag *d;
} pipe_ctx;

static void prepare_marks(pipe_ctx *c, bool *mark);

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static bool has_prefix(const char *s, const char *pre) {
  return s && strncmp(s, pre, strlen(pre)) == 0;
}

/* The value named prefix+name, or -1. */
static int32_t named(const sc_graph *g, const char *prefix, const char *name) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "%s%s", prefix, name ? name : "");
  return w > 0 && (size_t)w < sizeof buf ? sc_graph_find_value(g, buf) : -1;
}

static int32_t output_named(const sc_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const char *n = g->values[g->outputs[i]].name;
    if (n && strcmp(n, name) == 0) return g->outputs[i];
  }
  return -1;
}

/* Marks with phase ph every node still unmarked (-1) that is an ancestor of
 * a value with need[v] set (need is consumed). */
static void mark(pipe_ctx *c, bool *need, int8_t ph) {
  sc_graph *g = c->g;
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    bool wanted = false;
    for (int32_t j = 0; j < n->n_outputs && !wanted; j++)
      wanted = n->outputs[j] >= 0 && need[n->outputs[j]];
    if (!wanted || c->phase[i] >= 0) continue;
    c->phase[i] = ph;
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) need[n->inputs[j]] = true;
  }
  memset(need, 0, (size_t)g->n_values * sizeof *need);
}

static sc_status classify(pipe_ctx *c) {
  sc_graph *g = c->g;
  bool *need = sc_calloc((size_t)g->n_values + 1, sizeof *need);
  if (!need) return nomem(c->d);
  for (int32_t i = 0; i < g->n_nodes; i++) c->phase[i] = -1;
  int32_t loss = output_named(g, "loss");
  if (loss < 0) {
    sc_free(need);
    return sc_diag_set(c->d, SC_ERR_INVALID, NULL, NULL,
                       "pipelined training: the step has no output 'loss'");
  }
  need[loss] = true;
  mark(c, need, SC_PIPE_FORWARD);
  const sc_train_info *t = c->p->train;
  for (int32_t k = 0; t && k < t->n_params; k++) {
    int32_t v = named(g, "grad:", t->params[k].name);
    if (v >= 0) need[v] = true;
  }
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (has_prefix(g->values[g->outputs[i]].name, "new:accum:")) need[g->outputs[i]] = true;
  mark(c, need, SC_PIPE_BACKWARD);
  const char *decisions[] = {"train:grad_norm", "train:applied"};
  for (size_t k = 0; k < 2; k++) {
    int32_t v = output_named(g, decisions[k]);
    if (v >= 0) need[v] = true;
  }
  mark(c, need, SC_PIPE_NORM);
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (c->phase[i] < 0) c->phase[i] = SC_PIPE_UPDATE;
  sc_free(need);
  return SC_OK;
}

/* Reorders g's nodes to order[] (a permutation), carrying the per-node
 * arrays along. */
static sc_status permute(pipe_ctx *c, const int32_t *order) {
  sc_graph *g = c->g;
  size_t n = (size_t)g->n_nodes;
  sc_node *nodes = sc_malloc((n + 1) * sizeof *nodes);
  int8_t *ph = sc_malloc(n + 1);
  int32_t *ch = sc_malloc((n + 1) * sizeof *ch);
  if (!nodes || !ph || !ch) {
    sc_free(nodes);
    sc_free(ph);
    sc_free(ch);
    return nomem(c->d);
  }
  for (size_t k = 0; k < n; k++) {
    nodes[k] = g->nodes[order[k]];
    ph[k] = c->phase[order[k]];
    ch[k] = c->chunk[order[k]];
  }
  memcpy(g->nodes, nodes, n * sizeof *nodes);
  memcpy(c->phase, ph, n);
  memcpy(c->chunk, ch, n * sizeof *ch);
  sc_free(nodes);
  sc_free(ph);
  sc_free(ch);
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
      if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
  return SC_OK;
}

/* Stable order by key[i] (small ranges: a counting sort). */
static sc_status sort_by(pipe_ctx *c, const int32_t *key, int32_t n_keys) {
  int32_t n = c->g->n_nodes;
  int32_t *count = sc_calloc((size_t)n_keys + 1, sizeof *count);
  int32_t *order = sc_malloc(((size_t)n + 1) * sizeof *order);
  sc_status st = count && order ? SC_OK : nomem(c->d);
  for (int32_t i = 0; st == SC_OK && i < n; i++) count[key[i] + 1]++;
  for (int32_t k = 0; st == SC_OK && k < n_keys; k++) count[k + 1] += count[k];
  for (int32_t i = 0; st == SC_OK && i < n; i++) order[count[key[i]]++] = i;
  if (st == SC_OK) st = permute(c, order);
  sc_free(count);
  sc_free(order);
  return st;
}

/* The forward's chunks (the forward first in node order). */
static sc_status forward_chunks(pipe_ctx *c, const sc_plan *plan) {
  sc_graph *g = c->g;
  int32_t n = g->n_nodes;
  int32_t *key = sc_malloc(((size_t)n + 1) * sizeof *key);
  double *cost = sc_malloc(((size_t)n + 1) * sizeof *cost);
  sc_status st = key && cost ? SC_OK : nomem(c->d);
  for (int32_t i = 0; st == SC_OK && i < n; i++) key[i] = c->phase[i] == SC_PIPE_FORWARD ? 0 : 1;
  if (st == SC_OK) st = sort_by(c, key, 2);
  /* a byte weighs what its time is worth in FLOPs on the plan's cluster:
   * the chunks balance predicted time (docs/planner.md, "Stage
   * boundaries") */
  bool low = false; /* the products in bf16 or fp16 (mixed precision) */
  for (int32_t i = 0; i < n && !low; i++) {
    const sc_node *x = &g->nodes[i];
    if ((unsigned)x->op < SC_OP_COUNT && (sc_ops[x->op].flags & SC_OPF_MATMUL) &&
        x->n_outputs > 0 && x->outputs[0] >= 0) {
      sc_dtype t = g->values[x->outputs[0]].dtype;
      low = t == SC_DTYPE_BF16 || t == SC_DTYPE_F16;
    }
  }
  double bw = sc_pp_byte_weight(plan->cluster && plan->cluster_figures.nodes >= 1
                                    ? &plan->cluster_figures : NULL,
                                low);
  if (st == SC_OK && sc_pp_node_costs(g, bw, cost) != SC_OK) st = nomem(c->d);
  /* the prepare phase's nodes run once a step, not per microbatch */
  bool *once = st == SC_OK ? sc_malloc((size_t)n + 1) : NULL;
  if (st == SC_OK && !once) st = nomem(c->d);
  if (st == SC_OK) prepare_marks(c, once);
  double per_mb = 1.0 / (plan->microbatches > 1 ? plan->microbatches : 1);
  int32_t n_fwd = 0;
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    if (c->phase[i] == SC_PIPE_FORWARD) n_fwd++;
    else cost[i] = 0;
    if (once[i]) cost[i] *= per_mb;
  }
  sc_free(once);
  if (st == SC_OK && n_fwd < c->C)
    st = sc_diag_set(c->d, SC_ERR_INVALID, NULL, NULL,
                     "pipelined training: %d forward nodes cannot fill %d pipeline chunks",
                     (int)n_fwd, (int)c->C);
  if (st == SC_OK) { /* the balancer sees the forward alone (it comes first) */
    g->n_nodes = n_fwd;
    st = sc_pp_assign_stages_costed(g, c->C, plan->boundaries, plan->n_boundaries, cost, c->chunk,
                                    c->d);
    g->n_nodes = n;
  }
  /* the cut, by name: the first forward node of each chunk after the
   * first (the forward is in chunk order) */
  if (st == SC_OK && c->C > 1) {
    c->p->chunk_boundaries = sc_arena_array(&c->p->arena, (size_t)c->C - 1,
                                            sizeof *c->p->chunk_boundaries);
    if (!c->p->chunk_boundaries) st = nomem(c->d);
    int32_t named = 0; /* a chunk that starts at an unnamed node: no names */
    for (int32_t i = 1; st == SC_OK && i < n_fwd; i++)
      if (c->chunk[i] != c->chunk[i - 1] && g->nodes[i].name && g->nodes[i].name[0]) {
        const char *name = sc_arena_strdup(&c->p->arena, g->nodes[i].name);
        if (!name) st = nomem(c->d);
        else c->p->chunk_boundaries[named++] = name;
      }
    if (named != c->C - 1) c->p->chunk_boundaries = NULL;
  }
  sc_free(key);
  sc_free(cost);
  return st;
}

/* owner[v] for every state input v: its parameter's first forward reader's
 * chunk (the forward is in chunk order). */
static sc_status owners(pipe_ctx *c) {
  sc_graph *g = c->g;
  for (int32_t v = 0; v < g->n_values; v++) c->owner[v] = -1;
  int32_t *first = sc_malloc(((size_t)g->n_values + 1) * sizeof *first);
  if (!first) return nomem(c->d);
  for (int32_t v = 0; v < g->n_values; v++) first[v] = -1;
  for (int32_t i = g->n_nodes - 1; i >= 0; i--)
    if (c->phase[i] == SC_PIPE_FORWARD)
      for (int32_t j = 0; j < g->nodes[i].n_inputs; j++)
        if (g->nodes[i].inputs[j] >= 0) first[g->nodes[i].inputs[j]] = c->chunk[i];
  for (int32_t k = 0; k < g->n_inputs; k++) {
    int32_t v = g->inputs[k];
    const char *name = g->values[v].name;
    if (named(g, "new:", name) < 0) continue;
    const char *param = sc_partition_param_of(c->p, name);
    int32_t pv = param ? sc_graph_find_value(g, param) : v;
    c->owner[v] = pv >= 0 && first[pv] >= 0 ? first[pv] : param ? 0 : OWNER_PENDING;
  }
  sc_free(first);
  return SC_OK;
}

/* The name of state input `name` up to its last '.', "accum:" left out:
 * what it shares with the other state of the same tensor ("T.fp8_scale",
 * "T.fp8_amax_history", "accum:T.fp8_amax"); its length, 0 without one. */
static size_t state_base(const char *name, const char **start) {
  *start = has_prefix(name, "accum:") ? name + 6 : name;
  const char *dot = strrchr(*start, '.');
  return dot ? (size_t)(dot - *start) : 0;
}

/* Owners still pending (a state of no parameter that no forward node
 * reads: an FP8 gradient's scale, an amax history, an amax accumulator,
 * passes/fp8.h), now that the backward and norm nodes have their chunks:
 * the smallest chunk among its backward and norm readers, else that of
 * another state of the same tensor (state_base), else 0. */
static void resolve_owners(pipe_ctx *c) {
  sc_graph *g = c->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (c->phase[i] == SC_PIPE_UPDATE || c->chunk[i] < 0) continue;
    for (int32_t j = 0; j < g->nodes[i].n_inputs; j++) {
      int32_t v = g->nodes[i].inputs[j], o = v >= 0 ? c->owner[v] : -1;
      /* found: -3 - the smallest chunk so far, told apart from pending */
      if (o == OWNER_PENDING || (o <= -3 && -3 - o > c->chunk[i])) c->owner[v] = -3 - c->chunk[i];
    }
  }
  for (int32_t k = 0; k < g->n_inputs; k++) {
    int32_t v = g->inputs[k];
    if (c->owner[v] <= -3) c->owner[v] = -3 - c->owner[v];
  }
  for (int32_t k = 0; k < g->n_inputs; k++) {
    int32_t v = g->inputs[k];
    if (c->owner[v] != OWNER_PENDING) continue;
    const char *a, *b;
    size_t n = state_base(g->values[v].name, &a);
    for (int32_t q = 0; n && q < g->n_inputs && c->owner[v] == OWNER_PENDING; q++) {
      int32_t w = g->inputs[q];
      if (w != v && c->owner[w] >= 0 && state_base(g->values[w].name, &b) == n &&
          strncmp(a, b, n) == 0)
        c->owner[v] = c->owner[w];
    }
  }
  for (int32_t k = 0; k < g->n_inputs; k++)
    if (c->owner[g->inputs[k]] == OWNER_PENDING) c->owner[g->inputs[k]] = 0;
}

typedef struct named {
  const char *name;
  size_t len;
  int32_t chunk;
} named_chunk;

static int cmp_named(const void *a, const void *b) {
  const named_chunk *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int r = strncmp(x->name, y->name, n);
  return r ? r : (x->len > y->len) - (x->len < y->len);
}

/* The chunk of the forward node a backward node comes from: autodiff names
 * its nodes "<forward node>/grad/...", recompute "<forward node>/recompute",
 * the FP8 pass the casts and scalings of a product's operands "<product>/fp8/N"
 * (passes/fp8.c: a backward product's operand, such as the transposed FP8
 * copy of the forward input that the weight gradient reads, belongs with its
 * product, not with the chunk that computed the input: placed there, the
 * weight gradient would run in an earlier chunk than its parameter's when a
 * cut falls between the input and the product) (fw: the forward's names,
 * sorted); -1 when the name says nothing. */
static int32_t origin_chunk(const named_chunk *fw, int32_t n_fw, const char *name) {
  if (!name) return -1;
  const char *cut = NULL;
  for (const char *p = strstr(name, "/grad/"); p; p = strstr(p + 1, "/grad/")) cut = p;
  const char *rc = strstr(name, "/recompute");
  if (rc && (!cut || rc > cut)) cut = rc;
  if (!cut) cut = strstr(name, "/fp8/");
  if (!cut) return -1;
  named_chunk key = {.name = name, .len = (size_t)(cut - name)};
  const named_chunk *f = bsearch(&key, fw, (size_t)n_fw, sizeof *fw, cmp_named);
  return f ? f->chunk : -1;
}

/* The value recompute.c cloned as v ("<value>/recompute"), or -1. */
static int32_t recomputed_from(const sc_graph *g, int32_t v) {
  const char *name = g->values[v].name;
  size_t n = name ? strlen(name) : 0, k = strlen("/recompute");
  if (n <= k || strcmp(name + n - k, "/recompute") != 0 || n - k >= 1024) return -1;
  char base[1024];
  memcpy(base, name, n - k);
  base[n - k] = 0;
  return sc_graph_find_value(g, base);
}

/* Whether every input of n is a scalar (one element): a norm node that
 * only combines the chunks' sums of squares (their sum, its square root,
 * the decision). */
static bool scalars_only(const sc_graph *g, const sc_node *n) {
  bool any = false;
  for (int32_t j = 0; j < n->n_inputs; j++) {
    if (n->inputs[j] < 0) continue;
    if (sc_value_numel(&g->values[n->inputs[j]]) != 1) return false;
    any = true;
  }
  return any;
}

/* Whether norm node n, which reads only scalars, combines what several
 * chunks' norm pieces made (its inputs' chunks span lo..want), or reads such
 * a combination: it then runs in the update phase. A piece receives its
 * inputs before it runs, so a norm piece that combined the chunks' sums
 * would start its own gradient reductions only after every other norm piece
 * had finished theirs: the pipeline ranks' data-parallel reductions would
 * run one after another after the pipeline drains (the 70B Megatron row,
 * docs/planner.md). In the update phase each chunk's norm piece runs as
 * soon as its last microbatch's weight piece has, its reductions beside the
 * other ranks' cool-down. */
static bool meets(const pipe_ctx *c, const sc_node *n, int32_t want, int32_t lo) {
  if (want >= 0 && lo != want) return true;
  for (int32_t j = 0; j < n->n_inputs; j++) {
    int32_t v = n->inputs[j], u = v >= 0 ? c->g->values[v].producer : -1;
    if (u >= 0 && c->phase[u] == SC_PIPE_UPDATE) return true;
  }
  return false;
}

/* Backward and norm chunks, in topological order; update chunks in
 * reverse. A backward node goes where the forward node it differentiates
 * (or recomputes) runs, else where the largest chunk among the forward
 * values it reads runs, else with the gradients it reads; never after the
 * smallest chunk among those gradients. */
static sc_status other_chunks(pipe_ctx *c) {
  sc_graph *g = c->g;
  named_chunk *fw = sc_malloc(((size_t)g->n_nodes + 1) * sizeof *fw);
  if (!fw) return nomem(c->d);
  int32_t n_fw = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (c->phase[i] == SC_PIPE_FORWARD && g->nodes[i].name)
      fw[n_fw++] = (named_chunk){g->nodes[i].name, strlen(g->nodes[i].name), c->chunk[i]};
  qsort(fw, (size_t)n_fw, sizeof *fw, cmp_named);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (c->phase[i] != SC_PIPE_BACKWARD && c->phase[i] != SC_PIPE_NORM) continue;
    int32_t want = -1, lo = c->C, lim = c->C - 1;
    bool bwd = c->phase[i] == SC_PIPE_BACKWARD;
    int32_t origin = bwd ? origin_chunk(fw, n_fw, n->name) : -1;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      if (v < 0) continue;
      int32_t u = g->values[v].producer;
      /* a value recomputed in an earlier chunk: that chunk's forward value
       * instead (each chunk recomputes from its own input, as Megatron's
       * stages do; recomputing forward across a cut would run backwards) */
      int32_t x = origin >= 0 && u >= 0 && c->phase[u] == SC_PIPE_BACKWARD && c->chunk[u] < origin
                      ? recomputed_from(g, v)
                      : -1;
      if (x >= 0 && g->values[x].producer >= 0 &&
          c->phase[g->values[x].producer] == SC_PIPE_FORWARD) {
        g->nodes[i].inputs[j] = v = x;
        u = g->values[x].producer;
      }
      int32_t ch = u >= 0 ? c->chunk[u] : c->owner[v];
      if (ch < 0 || (bwd && u < 0)) continue; /* state: copied to the reader if need be */
      if (bwd && c->phase[u] == SC_PIPE_BACKWARD) {
        if (ch < lim) lim = ch;
      } else {
        if (ch > want) want = ch;
        if (ch < lo) lo = ch;
      }
    }
    if (origin >= 0) want = origin;
    if (bwd) c->chunk[i] = want < 0 || want > lim ? lim : want;
    else if (scalars_only(g, n) && meets(c, n, want, lo)) {
      c->phase[i] = SC_PIPE_UPDATE; /* the update's chunks place it (below) */
      c->chunk[i] = -1;
    } else if (scalars_only(g, n)) /* a sum within one chunk stays there */
      c->chunk[i] = want >= 0 ? want : c->C - 1;
    else c->chunk[i] = want < 0 ? 0 : want;
  }
  sc_free(fw);
  resolve_owners(c);
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (c->phase[i] != SC_PIPE_UPDATE) continue;
    int32_t ch = -1;
    for (int32_t j = 0; j < n->n_outputs && ch < 0; j++) {
      int32_t v = n->outputs[j];
      const char *name = v >= 0 ? g->values[v].name : NULL;
      int32_t x = has_prefix(name, "new:") ? sc_graph_find_value(g, name + 4) : -1;
      if (x >= 0 && c->owner[x] >= 0) ch = c->owner[x];
    }
    c->chunk[i] = ch; /* the readers' minimum: filled by the readers below */
  }
  /* readers come later in topological order: a reverse walk sees them first */
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (c->phase[i] != SC_PIPE_UPDATE) continue;
    if (c->chunk[i] < 0) c->chunk[i] = 0;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j], u = v >= 0 ? g->values[v].producer : -1;
      if (u < 0 || c->phase[u] != SC_PIPE_UPDATE) continue;
      bool writes_state = false;
      for (int32_t k = 0; k < g->nodes[u].n_outputs; k++) {
        int32_t o = g->nodes[u].outputs[k];
        writes_state |= o >= 0 && has_prefix(g->values[o].name, "new:");
      }
      if (!writes_state && (c->chunk[u] < 0 || c->chunk[i] < c->chunk[u]))
        c->chunk[u] = c->chunk[i];
    }
  }
  return SC_OK;
}

/* Whether update node i writes no state and every output is a scalar: the
 * combined gradient norm, the step's decision, the clipping factor. */
static bool shared_scalar(const pipe_ctx *c, int32_t i) {
  const sc_node *n = &c->g->nodes[i];
  if (c->phase[i] != SC_PIPE_UPDATE || n->n_outputs < 1) return false;
  for (int32_t j = 0; j < n->n_outputs; j++) {
    int32_t v = n->outputs[j];
    if (v < 0 || has_prefix(c->g->values[v].name, "new:") ||
        sc_value_numel(&c->g->values[v]) != 1)
      return false;
  }
  return true;
}

/* Every pipeline rank's update pieces combine the chunks' sums themselves.
 * The update nodes that write no state and make scalars (the norm, the
 * decision, the clipping factor: placed in the smallest chunk that reads
 * them, chunk 0) are cloned once per other pipeline rank that reads them,
 * into that rank's smallest reading chunk, and that rank's readers read
 * the clone. A piece hands its values over when it has run: with one copy
 * in chunk 0's update piece, every other rank's update waited for rank 0's
 * whole update (the 70B Megatron row's last pipeline rank, 0.043 s of a
 * 3.262 s step, docs/planner.md); with a copy per rank, each rank's update
 * waits only for the norm pieces' sums. The clones compute the same
 * operations on the same inputs, so every rank's decision and clipping
 * factor are the same bits; the graph's outputs ("train:grad_norm",
 * "train:applied") stay chunk 0's. A clone follows its original in node
 * order (readers come after it, inputs before), so the order stays
 * topological. */
/* Node k, when on pipeline rank r, reads `to` where it read `from`. */
static void redirect(pipe_ctx *c, int32_t k, int32_t r, int32_t from, int32_t to) {
  if (c->chunk[k] < 0 || c->chunk[k] % c->P != r) return;
  for (int32_t a = 0; a < c->g->nodes[k].n_inputs; a++)
    if (c->g->nodes[k].inputs[a] == from) c->g->nodes[k].inputs[a] = to;
}

static sc_status clone_shared_per_rank(pipe_ctx *c) {
  sc_graph *g = c->g;
  int32_t n0 = g->n_nodes, P = c->P;
  if (P < 2) return SC_OK;
  int32_t *uoff = NULL, *users = NULL;
  int32_t *clone = sc_malloc(((size_t)n0 * (size_t)P + 1) * sizeof *clone);
  int32_t *first = sc_malloc(((size_t)P + 1) * sizeof *first);
  sc_status st = clone && first ? SC_OK : nomem(c->d);
  if (st == SC_OK && sc_graph_users(g, &uoff, &users) != SC_OK) st = nomem(c->d);
  for (int64_t k = 0; clone && k < (int64_t)n0 * P; k++) clone[k] = -1;
  /* readers come later in topological order: a reverse walk clones them
   * first, and a clone's inputs are its original's until then */
  for (int32_t i = n0 - 1; st == SC_OK && i >= 0; i--) {
    if (!shared_scalar(c, i)) continue;
    int32_t home = c->chunk[i] % P;
    for (int32_t r = 0; r < P; r++) first[r] = -1;
    /* readers: the original nodes and the clones made so far */
    for (int32_t j = 0; j < g->nodes[i].n_outputs; j++) {
      int32_t v = g->nodes[i].outputs[j];
      for (int32_t u = uoff[v]; u < uoff[v + 1]; u++) {
        int32_t rd = users[u], ch = c->chunk[rd];
        if (ch >= 0 && (first[ch % P] < 0 || ch < first[ch % P])) first[ch % P] = ch;
      }
    }
    for (int32_t k = n0; k < g->n_nodes; k++)
      for (int32_t a = 0; a < g->nodes[k].n_inputs; a++) {
        int32_t x = g->nodes[k].inputs[a], ch = c->chunk[k];
        if (x >= 0 && g->values[x].producer == i &&
            (first[ch % P] < 0 || ch < first[ch % P]))
          first[ch % P] = ch;
      }
    for (int32_t r = 0; st == SC_OK && r < P; r++) {
      if (r == home || first[r] < 0) continue;
      sc_node src = g->nodes[i]; /* g->nodes moves when a node is added */
      int32_t outs[8];
      if (src.n_outputs > 8) {
        st = sc_diag_set(c->d, SC_ERR_LIMIT, src.name, sc_op_name(src.op),
                         "pipelined training: too many outputs");
        break;
      }
      for (int32_t j = 0; st == SC_OK && j < src.n_outputs; j++) {
        const sc_value y = g->values[src.outputs[j]];
        char name[600];
        snprintf(name, sizeof name, "%s.pipe_rank%d", y.name ? y.name : "t", (int)r);
        outs[j] = sc_graph_new_value(g, name);
        if (outs[j] < 0 || sc_value_set_shape(g, outs[j], y.dtype, y.rank, y.dims) != SC_OK) {
          *c->d = g->diag;
          st = c->d->status ? c->d->status : SC_ERR_NOMEM;
        } else if (sc_graph_sharding(g, src.outputs[j]))
          st = sc_graph_set_sharding(g, outs[j], sc_graph_sharding(g, src.outputs[j]));
      }
      if (st != SC_OK) break;
      char nname[600];
      snprintf(nname, sizeof nname, "%s.pipe_rank%d", src.name ? src.name : sc_op_name(src.op),
               (int)r);
      int32_t id = sc_graph_add_node(g, src.op, nname, src.inputs, src.n_inputs, outs,
                                     src.n_outputs);
      int8_t *ph = id >= 0 ? sc_realloc(c->phase, (size_t)g->cap_nodes + 1) : NULL;
      if (ph) c->phase = ph;
      int32_t *chs = ph ? sc_realloc(c->chunk, ((size_t)g->cap_nodes + 1) * sizeof *chs) : NULL;
      if (chs) c->chunk = chs;
      if (id < 0 || !ph || !chs || sc_node_copy_attrs(g, id, &src) != SC_OK) {
        *c->d = g->diag;
        st = c->d->status ? c->d->status : nomem(c->d);
        break;
      }
      c->phase[id] = SC_PIPE_UPDATE;
      c->chunk[id] = first[r];
      clone[(int64_t)i * P + r] = id;
      /* rank r's readers (originals and clones) read the clone */
      for (int32_t j = 0; j < src.n_outputs; j++) {
        for (int32_t u = uoff[src.outputs[j]]; u < uoff[src.outputs[j] + 1]; u++)
          redirect(c, users[u], r, src.outputs[j], outs[j]);
        for (int32_t k = n0; k < id; k++) redirect(c, k, r, src.outputs[j], outs[j]);
      }
    }
  }
  /* each clone just after its original */
  int32_t n = g->n_nodes, m = 0;
  int32_t *order = st == SC_OK ? sc_malloc(((size_t)n + 1) * sizeof *order) : NULL;
  if (st == SC_OK && !order) st = nomem(c->d);
  for (int32_t i = 0; st == SC_OK && i < n0; i++) {
    order[m++] = i;
    for (int32_t r = 0; r < P; r++)
      if (clone[(int64_t)i * P + r] >= 0) order[m++] = clone[(int64_t)i * P + r];
  }
  if (st == SC_OK && n > n0) st = permute(c, order);
  sc_free(order);
  sc_free(clone);
  sc_free(first);
  sc_free(uoff);
  sc_free(users);
  return st;
}

/* A node out = op(inputs) in (phase, chunk), its output shaped like v. */
static int32_t add_node_like(pipe_ctx *c, sc_op op, const char *name, const int32_t *in,
                             int32_t n_in, int32_t like, sc_pipe_phase ph, int32_t chunk) {
  sc_graph *g = c->g;
  const sc_value x = g->values[like];
  int32_t out = sc_graph_add_value(g, name);
  if (out < 0 || sc_value_set_shape(g, out, x.dtype, x.rank, x.dims) != SC_OK) return -1;
  int32_t id = sc_graph_add_node(g, op, name, in, n_in, &out, 1);
  if (id < 0) return -1;
  int8_t *p = sc_realloc(c->phase, (size_t)g->cap_nodes + 1);
  if (p) c->phase = p;
  int32_t *ch = sc_realloc(c->chunk, ((size_t)g->cap_nodes + 1) * sizeof *ch);
  if (ch) c->chunk = ch;
  if (!p || !ch) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory"), -1;
  c->phase[id] = (int8_t)ph;
  c->chunk[id] = chunk;
  return out;
}

/* Node id's "to" attribute: dtype t. */
static sc_status cast_to(sc_graph *g, int32_t id, sc_dtype t) {
  sc_attr *a = id >= 0 ? sc_node_add_attr(g, id, "to", SC_ATTR_INT) : NULL;
  if (!a) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  a->i = sc_dtype_to_onnx(t);
  return SC_OK;
}

/* The Cast every reader of v on another pipeline rank than home is, all
 * to one dtype narrower than v's (a bf16 step's cast of a tied embedding
 * for the LM head): one of those nodes, or -1 (a reader of another kind,
 * two dtypes, none narrower). */
static int32_t remote_narrowing(const pipe_ctx *c, int32_t v, int32_t home, const int32_t *off,
                                const int32_t *users) {
  sc_graph *g = c->g;
  int32_t first = -1;
  for (int32_t u = off[v]; u < off[v + 1]; u++) {
    int32_t i = users[u];
    if (c->chunk[i] % c->P == home) continue;
    const sc_node *n = &g->nodes[i];
    if (n->op != SC_OP_CAST || n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0)
      return -1;
    sc_dtype t = g->values[n->outputs[0]].dtype;
    if (!sc_dtype_is_float(t) || sc_dtype_size(t) >= sc_dtype_size(g->values[v].dtype))
      return -1;
    if (first >= 0 && g->values[g->nodes[first].outputs[0]].dtype != t) return -1;
    if (first < 0) first = i;
  }
  return first;
}

/* Reads of a state input on another pipeline rank than its owner's go
 * through a copy in the owner's forward (see the top): an Identity, or,
 * where every such reader casts it to one narrower dtype, the Cast itself,
 * made once on the owner, and those readers Identities of it, so the
 * hand-off carries the narrow values (a tied f32 embedding's bf16 cast for
 * the LM head: half the bytes; gpt_1p5b's 321 MB crossed nodes in 6.4 ms
 * at 8x2, exposed on the last rank). */
static sc_status copy_remote_state(pipe_ctx *c) {
  sc_graph *g = c->g;
  int32_t nv0 = g->n_values;
  int32_t *off = NULL, *users = NULL; /* the readers of each value, before any copy */
  sc_status st = sc_graph_users(g, &off, &users);
  if (st != SC_OK) {
    *c->d = g->diag;
    return c->d->status;
  }
  for (int32_t k = 0; st == SC_OK && k < g->n_inputs; k++) {
    int32_t v = g->inputs[k];
    if (v >= nv0 || c->owner[v] < 0) continue;
    int32_t copy = -1, home = c->owner[v] % c->P;
    int32_t narrow = remote_narrowing(c, v, home, off, users);
    for (int32_t u = off[v]; st == SC_OK && u < off[v + 1]; u++) {
      int32_t i = users[u];
      if (c->chunk[i] % c->P == home) continue;
      /* g->nodes moves when the copy is added: index it, keep no pointer */
      for (int32_t j = 0; j < g->nodes[i].n_inputs; j++) {
        if (g->nodes[i].inputs[j] != v) continue;
        const char *param = sc_partition_param_of(c->p, g->values[v].name);
        if (!param || strcmp(param, g->values[v].name) != 0) { /* read-modify-write state */
          st = sc_diag_set(c->d, SC_ERR_INVALID, g->nodes[i].name, sc_op_name(g->nodes[i].op),
                           "pipelined training: reads '%s' on pipeline rank %d, but it is "
                           "kept and updated on rank %d", g->values[v].name,
                           (int)(c->chunk[i] % c->P), (int)home);
          break;
        }
        if (copy < 0) {
          char name[600];
          snprintf(name, sizeof name, "%s" SC_PIPE_COPY_SUFFIX, g->values[v].name);
          int32_t like = narrow >= 0 ? g->nodes[narrow].outputs[0] : v;
          sc_dtype to = g->values[like].dtype;
          if ((copy = add_node_like(c, narrow >= 0 ? SC_OP_CAST : SC_OP_IDENTITY, name, &v, 1,
                                    like, SC_PIPE_FORWARD, c->owner[v])) < 0 ||
              (narrow >= 0 && cast_to(g, g->values[copy].producer, to) != SC_OK)) {
            *c->d = g->diag;
            st = c->d->status;
            break;
          }
        }
        g->nodes[i].inputs[j] = copy;
        if (narrow >= 0) { /* the reader's cast is the copy's: a view of it here */
          g->nodes[i].op = SC_OP_IDENTITY;
          g->nodes[i].n_attrs = 0;
        }
      }
    }
  }
  sc_free(off);
  sc_free(users);
  return st;
}

/* The leaves of the sum that made v: through Adds of the backward whose
 * output only that sum reads (autodiff's accumulation of a value's
 * gradient contributions); n counts them, at most cap. */
static void sum_leaves(const pipe_ctx *c, const int32_t *uoff, int32_t v, int32_t *leaf,
                       int32_t *parent, int32_t *n, int32_t cap, int32_t from) {
  const sc_graph *g = c->g;
  int32_t u = g->values[v].producer;
  if (u >= 0 && g->nodes[u].op == SC_OP_ADD && g->nodes[u].n_inputs == 2 &&
      c->phase[u] == SC_PIPE_BACKWARD && uoff[v + 1] - uoff[v] == 1) {
    for (int32_t j = 0; j < 2; j++)
      if (g->nodes[u].inputs[j] >= 0)
        sum_leaves(c, uoff, g->nodes[u].inputs[j], leaf, parent, n, cap, u);
    return;
  }
  if (*n < cap) {
    leaf[*n] = v;
    parent[*n] = from;
  }
  ++*n;
}

/* Moves node `node` to just before node `before` (before < node). */
static sc_status move_before(pipe_ctx *c, int32_t node, int32_t before) {
  int32_t n = c->g->n_nodes, k = 0;
  int32_t *order = sc_malloc(((size_t)n + 1) * sizeof *order);
  if (!order) return nomem(c->d);
  for (int32_t i = 0; i < n; i++) {
    if (i == before) order[k++] = node;
    if (i != node) order[k++] = i;
  }
  sc_status st = permute(c, order);
  sc_free(order);
  return st;
}

/* The sharding of a remote gradient accumulator: the accumulator's own
 * (as) without the fsdp split, pending over the data axes (dp, fsdp, ep)
 * that split none of its dims: each
 * rank sums its own microbatches' contributions unreduced, and the owner
 * reduces the sum once per step. */
static void remote_accum_sharding(const pipe_ctx *c, const sc_sharding *as, int32_t rank,
                                  sc_sharding *out) {
  const sc_partition *p = c->p;
  if (as) *out = *as;
  else sc_sharding_replicated(out, rank);
  for (int32_t d = 0; d < out->rank; d++) {
    int32_t k = 0;
    for (int32_t j = 0; j < out->n_dim_axes[d]; j++)
      if (out->dim_axes[d][j] != p->fsdp_axis) out->dim_axes[d][k++] = out->dim_axes[d][j];
    out->n_dim_axes[d] = (uint8_t)k;
    if (!k) out->stride[d] = 0;
  }
  int32_t data[SC_MESH_MAX_AXES], n_data = sc_partition_data_axes(p, data);
  for (int32_t k = 0; k < n_data; k++)
    if (!(sc_sharding_dim_axes(out) & (1u << data[k]))) out->partial |= (sc_axes)(1u << data[k]);
}

/* A tied parameter read on another pipeline rank (through its copy) gets a
 * gradient contribution there every microbatch. Rather than send it to the
 * owner each microbatch, that rank accumulates it in a state of its own,
 * "accum:X.pipe_grad", unreduced over the data axes
 * (remote_accum_sharding), and the owner's first once-per-step reader of
 * "new:accum:X" reads the sum of both: one handover and one reduction per
 * step, as Megatron all-reduces the embedding's gradient between the first
 * and last stage once per step. Only where the step accumulates (M > 1:
 * "new:accum:X" = Add(accum:X, grad:X)) and the contribution is a leaf of
 * autodiff's sum in grad:X; otherwise the sum stays (correct, handed over
 * per microbatch). */
static sc_status accumulate_remote_grads(pipe_ctx *c) {
  sc_graph *g = c->g;
  const sc_train_info *t = c->p->train;
  int32_t *uoff = NULL, *users = NULL;
  sc_status st = SC_OK;
  for (int32_t k = 0; t && st == SC_OK && k < t->n_params; k++) {
    const char *pname = t->params[k].name;
    int32_t x = sc_graph_find_value(g, pname), acc = named(g, "accum:", pname);
    int32_t sum = named(g, "new:accum:", pname), grad = named(g, "grad:", pname);
    if (x < 0 || c->owner[x] < 0 || acc < 0 || sum < 0 || grad < 0 ||
        named(g, pname, SC_PIPE_COPY_SUFFIX) < 0) /* not read on another rank */
      continue;
    int32_t a = g->values[sum].producer, gp = g->values[grad].producer;
    if (a < 0 || g->nodes[a].op != SC_OP_ADD || g->nodes[a].n_inputs != 2 ||
        g->nodes[a].inputs[0] != acc || g->nodes[a].inputs[1] != grad || gp < 0 ||
        g->nodes[gp].op != SC_OP_IDENTITY || g->nodes[gp].inputs[0] < 0)
      continue;
    enum { CAP = 64 };
    int32_t leaf[CAP], parent[CAP], n = 0, home = c->owner[x] % c->P, n_home = 0;
    sc_free(uoff);
    sc_free(users);
    uoff = users = NULL;
    if (sc_graph_users(g, &uoff, &users) != SC_OK) {
      st = nomem(c->d);
      break;
    }
    sum_leaves(c, uoff, g->nodes[gp].inputs[0], leaf, parent, &n, CAP, -1);
    for (int32_t i = 0; i < n && i < CAP; i++) {
      int32_t u = g->values[leaf[i]].producer;
      n_home += u < 0 || c->chunk[u] % c->P == home;
    }
    int32_t total = sum, m = 0; /* what the per-step readers read */
    for (int32_t i = 0; n <= CAP && n_home > 0 && i < n && st == SC_OK; i++) {
      int32_t l = leaf[i], u = g->values[l].producer, pa = parent[i];
      if (u < 0 || c->chunk[u] % c->P == home || pa < 0 || g->nodes[pa].op != SC_OP_ADD ||
          g->values[l].dtype != g->values[acc].dtype ||
          sc_value_numel(&g->values[l]) != sc_value_numel(&g->values[acc]))
        continue;
      /* the first once-per-step reader of the total so far */
      int32_t first = -1;
      for (int32_t r = uoff[total]; r < uoff[total + 1]; r++)
        if (first < 0 || users[r] < first) first = users[r];
      if (first < 0 || sc_pipe_per_mb((sc_pipe_phase)c->phase[first])) continue;
      /* the owner's sum loses the leaf: its Add passes the other input on */
      sc_node *an = &g->nodes[pa];
      an->inputs[0] = an->inputs[0] == l ? an->inputs[1] : an->inputs[0];
      an->n_inputs = 1;
      an->op = SC_OP_IDENTITY;
      sc_sharding ash;
      remote_accum_sharding(c, sc_graph_sharding(g, acc), g->values[acc].rank, &ash);
      char an_[640], sn[660];
      do /* a fresh name per leaf: accum:X.pipe_grad, accum:X.pipe_grad1, ... */
        snprintf(an_, sizeof an_, m ? "accum:%s.pipe_grad%d" : "accum:%s.pipe_grad", pname,
                 (int)m);
      while (++m < 1000 && sc_graph_find_value(g, an_) >= 0);
      const sc_value av = g->values[acc];
      int32_t in = sc_graph_add_value(g, an_);
      if (in < 0 || sc_value_set_shape(g, in, av.dtype, av.rank, av.dims) != SC_OK ||
          sc_graph_add_input(g, in) != SC_OK) {
        *c->d = g->diag;
        st = c->d->status;
        break;
      }
      snprintf(sn, sizeof sn, "new:%s", an_);
      int32_t out = add_node_like(c, SC_OP_ADD, sn, (int32_t[]){in, l}, 2, in, SC_PIPE_WEIGHT,
                                  c->chunk[u]);
      snprintf(sn, sizeof sn, "%s.sum", an_ + 6);
      int32_t tot = out < 0 ? -1
                            : add_node_like(c, SC_OP_ADD, sn, (int32_t[]){total, out}, 2, sum,
                                            (sc_pipe_phase)c->phase[first], c->chunk[first]);
      if (tot < 0 || sc_graph_add_output(g, out) != SC_OK) {
        *c->d = g->diag;
        st = c->d->status;
        break;
      }
      if ((st = sc_graph_set_sharding(g, in, &ash)) != SC_OK ||
          (st = sc_graph_set_sharding(g, out, &ash)) != SC_OK)
        break;
      for (int32_t r = uoff[total]; r < uoff[total + 1]; r++)
        for (int32_t j = 0; j < g->nodes[users[r]].n_inputs; j++)
          if (g->nodes[users[r]].inputs[j] == total) g->nodes[users[r]].inputs[j] = tot;
      total = tot;
      if ((st = move_before(c, g->values[tot].producer, first)) != SC_OK) break;
      sc_free(uoff);
      sc_free(users);
      uoff = users = NULL;
      if (sc_graph_users(g, &uoff, &users) != SC_OK) st = nomem(c->d);
    }
  }
  sc_free(uoff);
  sc_free(users);
  return st;
}

/* Whether node i is a clone recompute.c made ("<node>/recompute"). */
static bool is_recompute_clone(const sc_graph *g, int32_t i) {
  const char *name = g->nodes[i].name;
  size_t n = name ? strlen(name) : 0, k = strlen("/recompute");
  return n > k && strcmp(name + n - k, "/recompute") == 0;
}

/* Backward nodes that no lower chunk's backward needs (not even through
 * nodes of their own chunk) compute weight gradients only: the WEIGHT
 * phase, which a schedule may run late. In reverse topological order: a
 * node is needed when a backward node of a lower chunk, or a needed one of
 * its own, reads one of its outputs.
 * A chunk whose backward recomputes forward values (recompute.c's clones)
 * keeps all of its backward in the BACKWARD piece: its weight gradients
 * read the recomputed values, which die there block by block as in the
 * one-program step; split off, the WEIGHT piece would receive every
 * recomputed value of the chunk (and the output gradients) per microbatch,
 * a stash as large as recompute's savings. */
static sc_status weight_phase(pipe_ctx *c) {
  sc_graph *g = c->g;
  int32_t *uoff = NULL, *users = NULL;
  if (sc_graph_users(g, &uoff, &users) != SC_OK) return nomem(c->d);
  bool *needed = sc_calloc((size_t)g->n_nodes + 1, sizeof *needed);
  bool *recomputes = sc_calloc((size_t)c->C + 1, sizeof *recomputes); /* [chunk] */
  if (!needed || !recomputes) {
    sc_free(needed);
    sc_free(recomputes);
    sc_free(uoff);
    sc_free(users);
    return nomem(c->d);
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (c->phase[i] == SC_PIPE_BACKWARD && is_recompute_clone(g, i)) recomputes[c->chunk[i]] = true;
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    if (c->phase[i] != SC_PIPE_BACKWARD) continue;
    needed[i] = recomputes[c->chunk[i]];
    const sc_node *n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_outputs && !needed[i]; j++) {
      int32_t v = n->outputs[j];
      for (int32_t u = v >= 0 ? uoff[v] : 0; v >= 0 && u < uoff[v + 1] && !needed[i]; u++) {
        int32_t r = users[u];
        needed[i] = c->phase[r] == SC_PIPE_BACKWARD &&
                    (c->chunk[r] < c->chunk[i] || (c->chunk[r] == c->chunk[i] && needed[r]));
      }
    }
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (c->phase[i] == SC_PIPE_BACKWARD && !needed[i]) c->phase[i] = SC_PIPE_WEIGHT;
    else if (c->phase[i] == SC_PIPE_WEIGHT && recomputes[c->chunk[i]]) /* a remote accumulator */
      c->phase[i] = SC_PIPE_BACKWARD;
  sc_free(needed);
  sc_free(recomputes);
  sc_free(uoff);
  sc_free(users);
  return SC_OK;
}

/* Whether value v is the same in every microbatch of a step, as far as a
 * forward node reading it can tell: a constant, a parameter (a state input
 * the optimizer updates, not its optimizer state or accumulator: those are
 * read-modify-write), or the output of a node marked in mark[]. */
static bool step_constant(const pipe_ctx *c, const bool *mark, int32_t v) {
  const sc_graph *g = c->g;
  const sc_value *x = &g->values[v];
  if (x->flags & SC_VALUE_CONST) return true;
  if (x->producer >= 0) return mark[x->producer];
  if (!x->name || named(g, "new:", x->name) < 0) return false;
  const char *param = sc_partition_param_of(c->p, x->name);
  return param && strcmp(param, x->name) == 0;
}

/* mark[i] for the forward nodes of the prepare phase: those whose inputs
 * are all step constants and at least one of them a parameter or a marked
 * node's output (the weights' casts to the products' precision, a remote
 * reader's copy of a parameter, views of them), that write no output of
 * the step and draw no random numbers. Their values are the same in every
 * microbatch: computed once per step in the chunk's prepare piece instead
 * of in each forward, and kept once for the step instead of in the stash
 * of every microbatch in flight (the backward's products read the same
 * casts). To a fixed point: copy_remote_state appends its copies after
 * their readers. */
static void prepare_marks(pipe_ctx *c, bool *mark) {
  sc_graph *g = c->g;
  for (int32_t i = 0; i < g->n_nodes; i++) mark[i] = false;
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sc_node *n = &g->nodes[i];
      if (mark[i] || c->phase[i] != SC_PIPE_FORWARD || (n->flags & SC_NODE_DEAD) ||
          n->n_inputs < 1 || n->op == SC_OP_DROPOUT ||
          ((unsigned)n->op < SC_OP_COUNT && (sc_ops[n->op].flags & SC_OPF_SIDE_EFFECT)))
        continue;
      bool ok = true, varies = false;
      for (int32_t j = 0; j < n->n_inputs && ok; j++) {
        int32_t v = n->inputs[j];
        if (v < 0) continue;
        ok = step_constant(c, mark, v);
        varies |= !(g->values[v].flags & SC_VALUE_CONST);
      }
      for (int32_t j = 0; j < n->n_outputs && ok; j++)
        ok = n->outputs[j] < 0 || !(g->values[n->outputs[j]].flags & SC_VALUE_OUTPUT);
      if (ok && varies) mark[i] = changed = true;
    }
  }
}

/* The prepare phase (prepare_marks). */
static sc_status prepare_phase(pipe_ctx *c) {
  bool *mark = sc_malloc((size_t)c->g->n_nodes + 1);
  if (!mark) return nomem(c->d);
  prepare_marks(c, mark);
  for (int32_t i = 0; i < c->g->n_nodes; i++)
    if (mark[i]) c->phase[i] = SC_PIPE_PREPARE;
  sc_free(mark);
  return SC_OK;
}

sc_status sc_partition_pipe_pieces(sc_partition *p, const sc_plan *plan, sc_diag *d) {
  sc_graph *g = p->global;
  pipe_ctx c = {.p = p, .g = g, .P = p->n_stages, .C = p->n_chunks, .d = d};
  c.phase = sc_malloc((size_t)g->n_nodes + 1);
  c.chunk = sc_malloc(((size_t)g->n_nodes + 1) * sizeof *c.chunk);
  c.owner = sc_malloc(((size_t)g->n_values + 1) * sizeof *c.owner);
  int32_t *key = NULL;
  sc_status st = c.phase && c.chunk && c.owner ? SC_OK : nomem(d);
  if (st == SC_OK) st = classify(&c);
  if (st == SC_OK) st = forward_chunks(&c, plan);
  if (st == SC_OK) st = owners(&c);
  if (st == SC_OK) st = other_chunks(&c);
  if (st == SC_OK) st = clone_shared_per_rank(&c);
  if (st == SC_OK) st = copy_remote_state(&c);
  if (st == SC_OK) st = accumulate_remote_grads(&c);
  if (st == SC_OK) st = weight_phase(&c);
  if (st == SC_OK) st = prepare_phase(&c);
  int32_t n = g->n_nodes, pieces = SC_PIPE_PHASES * c.C;
  if (st == SC_OK && !(key = sc_malloc(((size_t)n + 1) * sizeof *key))) st = nomem(d);
  for (int32_t i = 0; st == SC_OK && i < n; i++)
    key[i] = sc_pipe_piece(c.C, (sc_pipe_phase)c.phase[i], c.chunk[i]);
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    const sc_node *nd = &g->nodes[i];
    for (int32_t j = 0; j < nd->n_inputs && st == SC_OK; j++) {
      int32_t v = nd->inputs[j], u = v >= 0 ? g->values[v].producer : -1;
      if (u >= 0 && key[u] > key[i])
        st = sc_diag_set(d, SC_ERR_INVALID, nd->name, sc_op_name(nd->op),
                         "pipelined training: reads '%s' of the %s of chunk %d from the %s of "
                         "chunk %d, which runs later",
                         g->values[v].name, sc_pipe_phase_name((sc_pipe_phase)c.phase[u]),
                         (int)c.chunk[u], sc_pipe_phase_name((sc_pipe_phase)c.phase[i]),
                         (int)c.chunk[i]);
    }
  }
  if (st == SC_OK) st = sort_by(&c, key, pieces);
  if (st == SC_OK) {
    p->node_stage = sc_arena_array(&p->arena, (size_t)n + 1, sizeof *p->node_stage);
    if (!p->node_stage) st = nomem(d);
    for (int32_t i = 0; st == SC_OK && i < n; i++)
      p->node_stage[i] = sc_pipe_piece(c.C, (sc_pipe_phase)c.phase[i], c.chunk[i]);
  }
  sc_free(key);
  sc_free(c.phase);
  sc_free(c.chunk);
  sc_free(c.owner);
  return st;
}
