/* block_model.c — the planner's model of a transformer (block_model.h):
 * one walk over the forward graph, node by node, adding each node's
 * figures to the first block's part or to the outside part. */
#include "passes/plan/block_model.h"

#include <string.h>

#include "ir/ops.h"
#include "passes/blocks.h"
#include "passes/partition/partition.h"
#include "passes/train.h"

/* Views: no kernel, no new memory (lowered to a view of their input). */
static bool is_view(sc_op op) {
  return op == SC_OP_IDENTITY || op == SC_OP_RESHAPE || op == SC_OP_FLATTEN ||
         op == SC_OP_SQUEEZE || op == SC_OP_UNSQUEEZE;
}

static double out_bytes(const sc_graph *g, const sc_node *n) {
  double b = 0;
  for (int32_t j = 0; j < n->n_outputs; j++) {
    if (n->outputs[j] < 0) continue;
    int64_t x = sc_value_bytes(&g->values[n->outputs[j]]);
    if (x > 0) b += (double)x;
  }
  return b;
}

/* The output's rank, or -1. */
static int32_t out_rank(const sc_graph *g, const sc_node *n) {
  return n->n_outputs > 0 && n->outputs[0] >= 0 ? g->values[n->outputs[0]].rank : -1;
}

/* Adds GEMM n's shape (flops per example; n: the output's last dim, k: the
 * first operand's; m the rows that make flops) to p's list. */
static void add_gemm(sc_graph *g, const sc_node *n, double flops, sc_block_part *p) {
  const sc_value *a = sc_node_input(g, n, 0), *o = n->n_outputs > 0 && n->outputs[0] >= 0
                                                     ? &g->values[n->outputs[0]] : NULL;
  if (!a || !o || a->rank < 2 || o->rank < 2 || flops <= 0) return;
  int64_t k = a->dims[a->rank - 1], nn = o->dims[o->rank - 1];
  if (k < 1 || nn < 1) return;
  int64_t m = (int64_t)(flops / (2.0 * (double)nn * (double)k) + 0.5);
  bool weight = false;
  for (int32_t j = 0; j < n->n_inputs && j < 2; j++) {
    const sc_value *w = sc_node_input(g, n, j);
    weight |= w && (w->flags & SC_VALUE_PARAM) && w->rank == 2;
  }
  for (int32_t i = 0; i < p->n_gemms; i++) {
    sc_block_gemm *e = &p->gemms[i];
    if (e->m == m && e->n == nn && e->k == k && e->weight == weight) {
      e->flops += flops;
      p->last_gemm = i, p->last_gemm_flops = flops;
      return;
    }
  }
  if (p->n_gemms < SC_BLOCK_MODEL_GEMMS)
    p->gemms[p->n_gemms++] = (sc_block_gemm){flops, m < 1 ? 1 : m, nn, k, weight};
  else
    p->gemms[p->n_gemms - 1].flops += flops;
  p->last_gemm = p->n_gemms - 1, p->last_gemm_flops = flops;
}

/* Whether n writes a value of the residual stream: [.., seq, hidden]. */
static bool on_stream(const sc_graph *g, const sc_node *n, int64_t seq, int64_t hidden) {
  if (n->n_outputs < 1 || n->outputs[0] < 0 || !hidden) return false;
  const sc_value *o = &g->values[n->outputs[0]];
  return o->rank >= 2 && o->dims[o->rank - 1] == hidden && o->dims[o->rank - 2] == seq;
}

/* Whether a bf16 or fp16 training step computes n in that type
 * (passes/train.c, low_chains): a GEMM with an f32 output, or an op of
 * sc_train_low_op reading a low value and otherwise only constants or
 * operands smaller than its output; low[v] marks the values it made. */
static bool low_node(const sc_graph *g, const sc_node *n, bool *low) {
  if (n->n_outputs < 1 || n->outputs[0] < 0 || g->values[n->outputs[0]].dtype != SC_DTYPE_F32)
    return false;
  bool any = (sc_ops[n->op].flags & SC_OPF_MATMUL) != 0, ok = true;
  if (!any) {
    if (!sc_train_low_op(n->op)) return false;
    int64_t numel = sc_value_numel(&g->values[n->outputs[0]]);
    for (int32_t k = 0; k < n->n_inputs && ok; k++) {
      int32_t x = n->inputs[k];
      if (x < 0 || g->values[x].dtype != SC_DTYPE_F32) continue;
      if (low[x]) any = true;
      else ok = (g->values[x].flags & SC_VALUE_CONST) || sc_value_numel(&g->values[x]) < numel;
    }
  }
  if (!any || !ok) return false;
  for (int32_t j = 0; j < n->n_outputs; j++)
    if (n->outputs[j] >= 0) low[n->outputs[j]] = true;
  return true;
}

/* A parameter of the forward graph (shapes suffice: no data needed). */
static bool graph_param(const void *ctx, const sc_graph *g, int32_t id) {
  (void)ctx;
  return (g->values[id].flags & SC_VALUE_PARAM) != 0;
}

/* Whether n reads only parameters, constants and values so made
 * (weights[v] marks those values): a transpose or cast of a weight, which
 * a training step makes once (a pipeline's prepare piece, ir/pipe.h) or
 * folds into its product, not per example. */
static bool weight_node(const sc_graph *g, const sc_node *n, bool *weights) {
  bool only = n->n_inputs > 0;
  for (int32_t k = 0; k < n->n_inputs && only; k++) {
    int32_t v = n->inputs[k];
    only = v < 0 || (g->values[v].flags & (SC_VALUE_PARAM | SC_VALUE_CONST)) || weights[v];
  }
  for (int32_t j = 0; only && j < n->n_outputs; j++)
    if (n->outputs[j] >= 0) weights[n->outputs[j]] = true;
  return only;
}

/* Node n into part p; of a weight_node only its parameters (its bytes are
 * not an example's). */
static void add_node(sc_graph *g, const sc_node *n, int32_t *seen_param, int32_t mark,
                     bool in_core, bool whole, bool low, bool weights, sc_block_part *p) {
  const sc_op_info *info = (unsigned)n->op < SC_OP_COUNT ? &sc_ops[n->op] : NULL;
  sc_cost c = {0, 0};
  if (info && info->cost) info->cost(g, n, &c);
  /* a lookup reads the rows it gathers, not its table (the simulator
   * bounds a kernel's reads by its loads: codegen/dist_sim.c,
   * kernel_bytes); the cost counts the whole table, which made the GPT-2
   * shapes' token lookup 321.6 MB an example (gpt_1p5b's table) */
  const sc_value *gout = n->op == SC_OP_GATHER ? sc_node_output(g, n, 0) : NULL;
  const sc_value *gtab = gout ? sc_node_input(g, n, 0) : NULL;
  if (gtab && sc_value_bytes(gtab) > sc_value_bytes(gout) && sc_value_bytes(gout) > 0)
    c.bytes -= (double)(sc_value_bytes(gtab) - sc_value_bytes(gout));
  /* a fused attention (ir/attention.h) computes as products do: its FLOPs
   * are the core's, timed at the GEMM rate */
  bool fused = n->op == SC_OP_FUSED_ATTENTION || n->op == SC_OP_FUSED_ATTENTION_GRAD;
  bool gemm = info && ((info->flags & SC_OPF_MATMUL) || fused);
  if (gemm) {
    p->gemm_flops += c.flops;
    if (in_core) p->attn_flops += c.flops;
    /* an expert product is timed apart, at one expert's shape
     * (add_experts, search.c's block_times) */
    else if (!fused && sc_expert_weight(g, n, graph_param, NULL) < 0) add_gemm(g, n, c.flops, p);
    else if (!fused) p->last_gemm_flops = 0; /* an expert product last: none listed */
  } else if (!is_view(n->op) && !weights) {
    p->mem_bytes += c.bytes;
    if (in_core) p->attn_mem_bytes += c.bytes;
    bool row = whole && info && (info->flags & SC_OPF_NORM);
    if (whole) p->whole_mem_bytes += c.bytes;
    if (row) p->row_mem_bytes += c.bytes;
    if (low) {
      p->low_mem_bytes += c.bytes;
      if (whole) p->whole_low_mem_bytes += c.bytes;
      if (row) p->row_low_mem_bytes += c.bytes;
    }
  }
  const sc_value *table = n->op == SC_OP_GATHER ? sc_node_input(g, n, 0) : NULL;
  if (table && (table->flags & SC_VALUE_PARAM) && table->rank == 2)
    p->lookup_elems += (double)sc_value_numel(table);
  if (!is_view(n->op) && !weights) {
    double ob = out_bytes(g, n);
    p->saved_bytes += ob;
    if (in_core && !fused) p->attn_saved_bytes += ob;
    if (whole) p->whole_saved_bytes += ob;
    if (low) {
      p->low_saved_bytes += ob;
      if (in_core) p->attn_low_saved_bytes += ob;
      if (whole) p->whole_low_saved_bytes += ob;
    }
  }
  for (int32_t j = 0; j < n->n_inputs; j++) {
    int32_t v = n->inputs[j];
    if (v < 0 || !(g->values[v].flags & SC_VALUE_PARAM) || seen_param[v] == mark) continue;
    seen_param[v] = mark;
    int64_t e = sc_value_numel(&g->values[v]);
    if (e <= 0) continue;
    p->params += e;
    p->param_tensors++;
    /* a weight matrix of a GEMM: column- or row-split by tensor parallelism */
    bool split = gemm && g->values[v].rank == 2;
    if (split) p->split_params += e;
    if (p->n_listed < SC_BLOCK_MODEL_TENSORS) {
      p->tensor_elems[p->n_listed] = e;
      p->tensor_split[p->n_listed++] = split;
    } else {
      p->tensor_elems[p->n_listed - 1] += e;
    }
  }
}


/* The experts of block 0 and of the outside part (block_model.h): E, the
 * stacked weights' elements, the forward's all-to-all buffers under ep. */
static sc_status add_experts(sc_graph *g, const sc_blocks *b, sc_block_model *bm,
                             sc_diag *d) {
  int32_t n = g->n_nodes;
  bool *expert = sc_calloc((size_t)n + 1, sizeof *expert);
  int8_t *seen = sc_calloc((size_t)g->n_values + 1, sizeof *seen);
  int32_t *off = NULL, *users = NULL;
  sc_status st = expert && seen ? SC_OK : SC_ERR_NOMEM;
  bool any = false;
  for (int32_t i = 0; st == SC_OK && i < n; i++)
    any |= (expert[i] = sc_expert_weight(g, &g->nodes[i], graph_param, NULL) >= 0);
  if (st == SC_OK && any) st = sc_graph_users(g, &off, &users);
  for (int32_t i = 0; st == SC_OK && any && i < n; i++) {
    int32_t blk = i < b->n_nodes ? b->node_block[i] : -1;
    if (!expert[i] || blk > 0) continue;
    sc_block_part *p = blk == 0 ? &bm->block : &bm->outside;
    int8_t mark = blk == 0 ? 1 : 2; /* a value counted once a part */
    const sc_node *nd = &g->nodes[i];
    int32_t w = sc_expert_weight(g, nd, graph_param, NULL), a = nd->inputs[0];
    if (g->values[w].dims[0] > p->experts) p->experts = g->values[w].dims[0];
    if (!(seen[w] & mark)) {
      seen[w] |= mark;
      p->expert_params += sc_value_numel(&g->values[w]);
      p->expert_tensors++;
    }
    sc_cost c = {0, 0};
    if (sc_ops[nd->op].cost) sc_ops[nd->op].cost(g, nd, &c);
    p->expert_flops += c.flops;
    const sc_value *av = &g->values[a], *ov = &g->values[nd->outputs[0]];
    int64_t m = av->dims[2], k = av->dims[3], nn = ov->dims[3];
    int64_t lo = m < k ? m : k, plo = p->expert_m < p->expert_k ? p->expert_m : p->expert_k;
    if (nn < lo) lo = nn;
    if (p->expert_n < plo) plo = p->expert_n;
    if (p->expert_m == 0 || lo < plo) p->expert_m = m, p->expert_n = nn, p->expert_k = k;
    int32_t pr = g->values[a].producer;
    bool enters = pr < 0 || (!expert[pr] && !(sc_ops[g->nodes[pr].op].flags & SC_OPF_ELEMENTWISE));
    if (enters && !(seen[a] & mark)) {
      seen[a] |= mark;
      p->a2a_count++;
      p->a2a_bytes += (double)sc_value_bytes(&g->values[a]);
    }
    int32_t o = nd->outputs[0];
    bool leaves = o >= 0 && off[o + 1] > off[o];
    for (int32_t u = leaves ? off[o] : 0; leaves && u < off[o + 1]; u++)
      leaves = !expert[users[u]] && !(sc_ops[g->nodes[users[u]].op].flags & SC_OPF_ELEMENTWISE);
    if (leaves) {
      p->a2a_count++;
      p->a2a_bytes += (double)sc_value_bytes(&g->values[o]);
      p->expert_exits++;
      p->expert_exit_bytes += (double)sc_value_bytes(&g->values[o]);
      if (k > p->expert_hidden) p->expert_hidden = k;
    }
  }
  sc_free(off);
  sc_free(users);
  sc_free(expert);
  sc_free(seen);
  return st == SC_OK ? SC_OK : sc_diag_set(d, st, NULL, NULL, "block model: out of memory");
}

/* The 2-D parameters outside the blocks that two live nodes or more read
 * (block_model.h: n_tied, tied_dims). */
static sc_status tied_params(const sc_graph *g, const sc_blocks *b, sc_block_model *bm,
                             sc_diag *d) {
  int32_t *readers = g->n_values ? sc_calloc((size_t)g->n_values, sizeof *readers) : NULL;
  if (g->n_values && !readers)
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "block model: out of memory");
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if ((n->flags & SC_NODE_DEAD) || (i < b->n_nodes && b->node_block[i] >= 0)) continue;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t v = n->inputs[j];
      bool again = false; /* a node reading it twice reads it once */
      for (int32_t k = 0; k < j && !again; k++) again = n->inputs[k] == v;
      if (v >= 0 && !again && (g->values[v].flags & SC_VALUE_PARAM)) readers[v]++;
    }
  }
  for (int32_t v = 0; v < g->n_values && bm->n_tied < SC_BLOCK_MODEL_TIED; v++)
    if (readers[v] >= 2 && g->values[v].rank == 2) {
      bm->tied_dims[bm->n_tied][0] = g->values[v].dims[0];
      bm->tied_dims[bm->n_tied++][1] = g->values[v].dims[1];
    }
  sc_free(readers);
  return SC_OK;
}

sc_status sc_block_model_build(sc_graph *g, sc_block_model *bm, sc_diag *d) {
  memset(bm, 0, sizeof *bm);
  int32_t n_nodes = g->n_nodes;
  char *key = NULL;
  sc_status st = sc_blocks_name_key(g, n_nodes, &key);
  if (st != SC_OK) return sc_diag_set(d, st, NULL, NULL, "block model: out of memory");
  sc_blocks b = {0};
  st = sc_blocks_find(g, n_nodes, key, NULL, 0, &b, d);
  sc_free(key);
  if (st != SC_OK) return st;
  sc_blocks_describe(&b, bm->found, sizeof bm->found);
  bm->n_blocks = b.n_blocks;
  int32_t *seen = g->n_values ? sc_calloc((size_t)g->n_values, sizeof *seen) : NULL;
  bool *low = g->n_values ? sc_calloc((size_t)g->n_values, sizeof *low) : NULL;
  bool *wts = g->n_values ? sc_calloc((size_t)g->n_values, sizeof *wts) : NULL;
  if (g->n_values && (!seen || !low || !wts)) {
    sc_free(seen);
    sc_free(low);
    sc_free(wts);
    sc_blocks_free(&b);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "block model: out of memory");
  }
  /* The attention core of block 0: from its first rank-4 GEMM (the
   * scores) up to, not including, its second (the context); or its
   * FusedAttention node alone (passes/fuse_attention.h), whose saved
   * values are o and the rows' log-sum-exp, not the probabilities. */
  int32_t core_state = 0; /* 0 before, 1 inside, 2 after */
  int32_t live = 0;
  for (int32_t i = 0; i < n_nodes; i++) {
    sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    live++;
    int32_t blk = i < b.n_nodes ? b.node_block[i] : -1;
    bool is_low = low_node(g, n, low), is_weights = weight_node(g, n, wts);
    if (blk > 0) continue; /* block 0 stands for every block */
    bool gemm4 = (sc_ops[n->op].flags & SC_OPF_MATMUL) && out_rank(g, n) == 4;
    bool in_core = false;
    if (blk == 0) {
      if (n->op == SC_OP_FUSED_ATTENTION && core_state == 0) {
        core_state = 2;
        in_core = true;
        bm->attn_fused = true;
        bm->heads = g->values[n->inputs[0]].dims[1];
        for (int32_t k = 1; k <= 2; k++) bm->kv_bytes += (double)sc_value_bytes(sc_node_input(g, n, k));
      } else if (gemm4 && core_state == 0) {
        core_state = 1;
        const sc_value *o = &g->values[n->outputs[0]];
        bm->heads = o->dims[1];
      } else if (gemm4 && core_state == 1) {
        core_state = 2;
      }
      in_core |= core_state == 1;
      if (bm->block.input_bytes == 0 && n->n_inputs > 0) {
        const sc_value *in = sc_node_input(g, n, 0);
        if (in && !(in->flags & SC_VALUE_PARAM) && in->rank == 3) {
          bm->block.input_bytes = (double)sc_value_bytes(in);
          bm->hidden = in->dims[2];
          bm->seq = in->dims[1];
        }
      }
    }
    /* block 0's parameters are its own; the outside's are counted once
     * (mark 1 and 2: a tied weight read by both counts in both) */
    bool whole = !in_core && on_stream(g, n, bm->seq, bm->hidden);
    add_node(g, n, seen, blk == 0 ? 1 : 2, in_core, whole, is_low, is_weights,
             blk == 0 ? &bm->block : &bm->outside);
  }
  if (live) st = add_experts(g, &b, bm, d);
  if (st == SC_OK) st = tied_params(g, &b, bm, d);
  sc_blocks_free(&b);
  sc_free(seen);
  sc_free(low);
  sc_free(wts);
  if (st != SC_OK) return st;
  if (!live) return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "block model: no live node");
  for (int32_t i = 0; i < g->n_values; i++)
    if (g->values[i].flags & SC_VALUE_PARAM) {
      bm->param_bytes = (int32_t)sc_dtype_size(g->values[i].dtype);
      break;
    }
  if (!bm->param_bytes) bm->param_bytes = 4;
  if (g->n_outputs > 0) {
    const sc_value *o = &g->values[g->outputs[0]];
    if (o->rank >= 1) bm->vocab = o->dims[o->rank - 1];
    if (!bm->seq && o->rank == 3) bm->seq = o->dims[1];
    /* the loss's rows: the logits' elements over the vocabulary */
    int64_t numel = sc_value_numel(o), es = (int64_t)sc_dtype_size(o->dtype);
    if (o->rank >= 2 && bm->vocab > 0 && numel > 0 && es > 0) {
      double rows = (double)(numel / bm->vocab);
      bm->loss_saved_bytes = rows * 4;
      bm->loss_split_saved_bytes = 2 * rows * (double)bm->vocab * (double)es;
    }
  }
  if (!bm->seq) bm->seq = 1;
  /* what cp.c decides its layout by: any causal or masked attention keeps
   * the zig-zag (and its 2·cp chunks) */
  bm->attn_unmasked = bm->kv_bytes > 0;
  for (int32_t i = 0; i < n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->op != SC_OP_FUSED_ATTENTION || (n->flags & SC_NODE_DEAD)) continue;
    if (sc_attr_int(g, n, "causal", 0) != 0 || (n->n_inputs > 3 && n->inputs[3] >= 0))
      bm->attn_unmasked = false;
  }
  if (g->n_outputs > 0) {
    const sc_value *o = &g->values[g->outputs[0]];
    bm->token_outputs = o->rank >= 3 && o->dims[1] == bm->seq;
  }
  if (!bm->hidden && bm->block.input_bytes > 0) bm->hidden = 1;
  return SC_OK;
}

int64_t sc_block_model_params(const sc_block_model *bm) {
  return bm->block.params * bm->n_blocks + bm->outside.params;
}

double sc_block_model_flops(const sc_block_model *bm) {
  return bm->block.gemm_flops * bm->n_blocks + bm->outside.gemm_flops;
}
