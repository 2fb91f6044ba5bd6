/* recompute.c — activation checkpointing as a graph rewrite (recompute.h).
 *
 * After autodiff the backward reads forward values ("saved activations"),
 * which then live from the forward to the backward. Recomputing a set R of
 * forward nodes means: clone R's nodes (in order), make the backward read
 * the clones instead of R's INTERNAL outputs — those the forward reads only
 * within the block — and place each block's clones right before the first
 * backward node that reads one. A clone reads the clone of an internal
 * value and the original of anything else (the block's input, a
 * parameter, a value that leaves the block: those stay saved). The
 * originals of internal values then die in the forward.
 *
 * R per block (passes/blocks.h: the repeated blocks between residual
 * additions, found from the graph's structure, whatever the names say; by
 * names alone only when the structure shows none):
 *   full       every forward node of the block: the block's input (and the
 *              parameters) is all that stays saved;
 *   selective  the attention core, as Korthikanti et al. recompute it: each
 *              Softmax of the block, the elementwise ops between it and the
 *              score product (scale, mask), and that product — what the
 *              backward reads of it is then q, k, v and the mask; in a
 *              bf16 or fp16 step the casts on that chain and of the
 *              probabilities too. A fused core (FusedAttention, passes/
 *              fuse_attention.h) saves no probabilities: nothing to do.
 * Nodes outside every block (embedding, final norm, LM head, loss) are
 * never recomputed. Every clone is a new node "<name>/recompute" with
 * outputs "<value>/recompute", so the rest of the compiler sees ordinary
 * IR: fusion, the memory plan and the partitioner treat them as any node. */
#include "passes/recompute.h"

#include <stdio.h>
#include <string.h>

#include "passes/blocks.h"
#include "passes/fuse_attention.h"

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

/* A forward node outside every block that reads no activation (only
 * graph inputs and constants, or such nodes' values) and computes an FP8
 * step's quantized weight (passes/fp8.h: a Cast to a narrow float type,
 * or a node reading one) joins the block of its forward readers when they all
 * lie in one: full recompute then computes it again from the weight (and
 * scale) for the backward, as Transformer Engine does without weight
 * caching, instead of keeping it saved. One read in the forward by nobody
 * (an amax) stays outside. Only quantized weights: an embedding lookup or
 * context parallelism's reordering Gathers moved into a block changed the
 * collectives of fsdp=2 x cp=2 under full recompute so that the ranks
 * waited on each other for ever. Readers come later: a reverse walk sees
 * them first. */
static sc_status weight_nodes(const sc_graph *g, int32_t n_fwd, int64_t *blk) {
  bool *derived = sc_calloc((size_t)g->n_values + 1, sizeof *derived);
  bool *quant = sc_calloc((size_t)g->n_values + 1, sizeof *quant);
  int64_t *reader = sc_malloc(((size_t)g->n_values + 1) * sizeof *reader);
  if (!derived || !quant || !reader) {
    sc_free(derived);
    sc_free(quant);
    sc_free(reader);
    return SC_ERR_NOMEM;
  }
  for (int32_t i = 0; i < n_fwd; i++) { /* values computed from no activation */
    const sc_node *n = &g->nodes[i];
    bool all = !(n->flags & SC_NODE_DEAD) && n->n_inputs > 0, q = false;
    for (int32_t k = 0; all && k < n->n_inputs; k++) {
      int32_t x = n->inputs[k];
      all = x < 0 || g->values[x].producer < 0 || derived[x];
      q |= x >= 0 && quant[x];
    }
    if (all && n->op == SC_OP_CAST && n->n_outputs > 0 && n->outputs[0] >= 0) {
      sc_dtype t = g->values[n->outputs[0]].dtype; /* a narrow float: quantized */
      q |= sc_dtype_is_float(t) && sc_dtype_is_narrow(t);
    }
    for (int32_t j = 0; all && j < n->n_outputs; j++)
      if (n->outputs[j] >= 0) derived[n->outputs[j]] = true, quant[n->outputs[j]] = q;
  }
  /* a quantized weight's producers join too (the scaled weight before its
   * Cast): derived values read by a quantized one, walked backwards */
  for (int32_t i = n_fwd - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if ((n->flags & SC_NODE_DEAD) || n->n_outputs < 1 || n->outputs[0] < 0 ||
        !quant[n->outputs[0]])
      continue;
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k];
      if (x >= 0 && derived[x] && g->values[x].producer >= 0) quant[x] = true;
    }
  }
  for (int32_t v = 0; v < g->n_values; v++) derived[v] = derived[v] && quant[v];
  sc_free(quant);
  /* reader[v]: the one block of v's forward readers, -1 none yet, -2 several
   * or one outside */
  for (int32_t v = 0; v < g->n_values; v++) reader[v] = -1;
  for (int32_t i = n_fwd - 1; i >= 0; i--) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    if (blk[i] < 0 && n->n_outputs > 0 && n->outputs[0] >= 0 && derived[n->outputs[0]]) {
      int64_t b = -1;
      for (int32_t j = 0; j < n->n_outputs && b != -2; j++) {
        int32_t y = n->outputs[j];
        if (y < 0 || reader[y] == -1) continue;
        b = b == -1 ? reader[y] : b == reader[y] ? b : -2;
      }
      if (b >= 0) blk[i] = b;
    }
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k];
      if (x < 0) continue;
      int64_t b = blk[i] >= 0 ? blk[i] : -2;
      reader[x] = reader[x] == -1 ? b : reader[x] == b ? b : -2;
    }
  }
  sc_free(derived);
  sc_free(reader);
  return SC_OK;
}

/* Block of each forward node (-1: outside), from passes/blocks.h. */
static sc_status node_blocks(sc_graph *g, int32_t n_fwd, const int32_t *params, int32_t n_params,
                             int64_t *blk, sc_recompute_report *r, sc_diag *d) {
  char *key = NULL;
  if (sc_blocks_name_key(g, n_fwd, &key) != SC_OK) return nomem(d);
  sc_blocks b;
  sc_status st = sc_blocks_find(g, n_fwd, key, params, n_params, &b, d);
  sc_free(key);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < n_fwd; i++) blk[i] = i < b.n_nodes ? b.node_block[i] : -1;
  st = b.n_blocks > 0 ? weight_nodes(g, n_fwd, blk) : SC_OK;
  r->blocks = b.n_blocks;
  r->found_by = b.how;
  r->adds_per_block = b.adds_per_block;
  sc_blocks_free(&b);
  return st == SC_OK ? SC_OK : nomem(d);
}

/* selective: each Softmax's attention core into in_r[] (the walk back to
 * the score product is fuse-attention's, passes/fuse_attention.h). A core
 * fused into one FusedAttention node has no Softmax left: it saves only
 * q, k, v, o and the rows' log-sum-exp, and its backward recomputes the
 * probabilities itself, so selective recompute has nothing of it to do. */
static void attention_core(const sc_graph *g, int32_t n_fwd, const int64_t *blk, bool *in_r) {
  for (int32_t i = 0; i < n_fwd; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->op != SC_OP_SOFTMAX || blk[i] < 0 || (n->flags & SC_NODE_DEAD)) continue;
    /* back through scale and mask to the score product */
    int32_t chain[SC_ATTENTION_CHAIN_MAX];
    int32_t nc = sc_attention_core_chain(g, i, n_fwd, blk, chain);
    if (nc == 0) continue;
    in_r[i] = true;
    for (int32_t k = 0; k < nc; k++) in_r[chain[k]] = true;
    /* the probabilities' casts (a bf16 or fp16 step casts them for the
     * context product): of the core too, else their [heads, seq, seq]
     * copy stays saved */
    int32_t probs = n->outputs[0];
    for (int32_t j = i + 1; probs >= 0 && j < n_fwd; j++) {
      const sc_node *u = &g->nodes[j];
      if (u->op != SC_OP_CAST || blk[j] != blk[i] || (u->flags & SC_NODE_DEAD)) continue;
      if (u->n_inputs > 0 && u->inputs[0] == probs) in_r[j] = true;
    }
  }
}

sc_status sc_recompute(sc_graph *g, sc_recompute_kind kind, int32_t n_fwd, const int32_t *params,
                       int32_t n_params, sc_recompute_report *r, sc_diag *d) {
  memset(r, 0, sizeof *r);
  if (kind == SC_RECOMPUTE_NONE || n_fwd <= 0) return SC_OK;
  int32_t nn = g->n_nodes, nv = g->n_values;
  int64_t *blk = sc_calloc((size_t)nn + 1, sizeof *blk);
  bool *in_r = sc_calloc((size_t)nn + 1, sizeof *in_r);
  int32_t *clone_of = sc_malloc(((size_t)nv + 1) * sizeof *clone_of); /* value -> clone */
  sc_status st = blk && in_r && clone_of ? SC_OK : nomem(d);
  if (st == SC_OK) st = node_blocks(g, n_fwd, params, n_params, blk, r, d);
  if (st == SC_OK) {
    for (int32_t v = 0; v < nv; v++) clone_of[v] = -1;
    if (kind == SC_RECOMPUTE_FULL)
      for (int32_t i = 0; i < n_fwd; i++) in_r[i] = blk[i] >= 0 && !(g->nodes[i].flags & SC_NODE_DEAD);
    else
      attention_core(g, n_fwd, blk, in_r);
  }
  /* internal values: produced in R, read in the forward only by nodes of
   * the same block */
  bool *internal = st == SC_OK ? sc_calloc((size_t)nv + 1, sizeof *internal) : NULL;
  if (st == SC_OK && !internal) st = nomem(d);
  for (int32_t i = 0; st == SC_OK && i < n_fwd; i++)
    for (int32_t j = 0; in_r[i] && j < g->nodes[i].n_outputs; j++)
      if (g->nodes[i].outputs[j] >= 0 && !(g->values[g->nodes[i].outputs[j]].flags & SC_VALUE_OUTPUT))
        internal[g->nodes[i].outputs[j]] = true;
  for (int32_t i = 0; st == SC_OK && i < n_fwd; i++) {
    const sc_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k], p = x >= 0 ? g->values[x].producer : -1;
      if (p >= 0 && internal[x] && blk[p] != blk[i]) internal[x] = false;
    }
  }
  /* where each block's backward first reads an internal value: the
   * clones of that block go right before it */
  int64_t n_blocks = 0;
  for (int32_t i = 0; st == SC_OK && i < n_fwd; i++)
    if (blk[i] + 1 > n_blocks) n_blocks = blk[i] + 1;
  int32_t *insert_at = st == SC_OK ? sc_malloc(((size_t)n_blocks + 1) * sizeof *insert_at) : NULL;
  if (st == SC_OK && !insert_at) st = nomem(d);
  for (int64_t b = 0; st == SC_OK && b < n_blocks; b++) insert_at[b] = -1;
  for (int32_t i = n_fwd; st == SC_OK && i < nn; i++) {
    const sc_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k], p = x >= 0 ? g->values[x].producer : -1;
      if (p < 0 || p >= n_fwd || !internal[x]) continue;
      if (insert_at[blk[p]] < 0) insert_at[blk[p]] = i;
    }
  }
  /* clone each block's R (in forward order), appended at the end for now */
  int32_t n_clones = 0;
  for (int64_t b = 0; st == SC_OK && b < n_blocks; b++) {
    if (insert_at[b] < 0) continue; /* nothing of it is read by the backward */
    for (int32_t i = 0; st == SC_OK && i < n_fwd; i++) {
      if (!in_r[i] || blk[i] != b) continue;
      const sc_node src = g->nodes[i]; /* a copy: adding nodes moves the array */
      int32_t ins[64], outs[64];
      if (src.n_inputs > 64 || src.n_outputs > 64) {
        st = sc_diag_set(d, SC_ERR_LIMIT, src.name, sc_op_name(src.op), "recompute: too many "
                         "inputs or outputs");
        break;
      }
      for (int32_t k = 0; k < src.n_inputs; k++) {
        int32_t x = src.inputs[k];
        ins[k] = x >= 0 && internal[x] && clone_of[x] >= 0 ? clone_of[x] : x;
      }
      for (int32_t j = 0; st == SC_OK && j < src.n_outputs; j++) {
        int32_t y = src.outputs[j];
        outs[j] = -1;
        if (y < 0) continue;
        char name[600];
        snprintf(name, sizeof name, "%s/recompute", g->values[y].name ? g->values[y].name : "t");
        sc_value yv = g->values[y];
        int32_t c = sc_graph_new_value(g, name);
        if (c < 0 || sc_value_set_shape(g, c, yv.dtype, yv.rank, yv.dims) != SC_OK) {
          *d = g->diag;
          st = d->status ? d->status : SC_ERR_NOMEM;
          break;
        }
        outs[j] = clone_of[y] = c;
      }
      if (st != SC_OK) break;
      char nname[600];
      snprintf(nname, sizeof nname, "%s/recompute", src.name ? src.name : sc_op_name(src.op));
      int32_t id = sc_graph_add_node(g, src.op, nname, ins, src.n_inputs, outs, src.n_outputs);
      if (id < 0) {
        *d = g->diag;
        st = d->status ? d->status : SC_ERR_NOMEM;
        break;
      }
      if (sc_node_copy_attrs(g, id, &src) != SC_OK) {
        st = nomem(d);
        break;
      }
      r->nodes++;
      if (sc_ops[src.op].cost) {
        sc_cost cost = {0, 0};
        sc_ops[src.op].cost(g, &g->nodes[id], &cost);
        r->flops += cost.flops;
      }
      n_clones++;
    }
  }
  /* the backward reads the clones */
  for (int32_t i = n_fwd; st == SC_OK && i < nn; i++) {
    sc_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t x = n->inputs[k], p = x >= 0 ? g->values[x].producer : -1;
      if (p >= 0 && p < n_fwd && internal[x] && clone_of[x] >= 0) n->inputs[k] = clone_of[x];
    }
  }
  /* order: each block's clones right before its insertion point */
  if (st == SC_OK && n_clones > 0) {
    int32_t total = g->n_nodes;
    int32_t *order = sc_malloc((size_t)total * sizeof *order);
    sc_node *nodes = sc_malloc((size_t)total * sizeof *nodes);
    int32_t *where = sc_malloc((size_t)total * sizeof *where); /* clone -> insert point */
    if (!order || !nodes || !where) st = nomem(d);
    int32_t c = nn, k = 0;
    for (int64_t b = 0; st == SC_OK && b < n_blocks; b++) {
      if (insert_at[b] < 0) continue;
      for (int32_t i = 0; i < n_fwd; i++)
        if (in_r[i] && blk[i] == b) where[c++] = insert_at[b];
    }
    /* clones by insertion point, stable: a counting sort */
    int32_t *cnt = st == SC_OK ? sc_calloc((size_t)nn + 2, sizeof *cnt) : NULL;
    int32_t *byp = st == SC_OK ? sc_malloc((size_t)(total - nn) * sizeof *byp) : NULL;
    if (st == SC_OK && (!cnt || !byp)) st = nomem(d);
    for (int32_t j = nn; st == SC_OK && j < total; j++) cnt[where[j] + 1]++;
    for (int32_t i = 0; st == SC_OK && i < nn; i++) cnt[i + 1] += cnt[i];
    for (int32_t j = nn; st == SC_OK && j < total; j++) byp[cnt[where[j]]++] = j;
    for (int32_t i = 0, q = 0; st == SC_OK && i < nn; i++) {
      while (q < total - nn && where[byp[q]] == i) order[k++] = byp[q++];
      order[k++] = i;
    }
    sc_free(cnt);
    sc_free(byp);
    if (st == SC_OK) {
      for (int32_t i = 0; i < total; i++) nodes[i] = g->nodes[order[i]];
      memcpy(g->nodes, nodes, (size_t)total * sizeof *nodes);
      for (int32_t i = 0; i < total; i++)
        for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
          if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
    }
    sc_free(order);
    sc_free(nodes);
    sc_free(where);
  }
  sc_free(blk);
  sc_free(in_r);
  sc_free(clone_of);
  sc_free(insert_at);
  sc_free(internal);
  return st;
}
