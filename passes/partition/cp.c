/* cp.c — context parallelism's preparation of the global graph
 * (docs/context-parallel.md): under a `cp` axis of N ranks, the sequence of
 * the residual stream is put in the zig-zag order of ir/context_parallel.h
 * (rank r's chunks r and 2N−1−r, rank after rank), so that a plain block
 * split of dim 1 over cp gives each rank its two chunks; the partitioner
 * then splits it (a constraint on the permuted value) and every attention
 * runs as a ring (shard_rules.c's sc_shard_attention, localize.c).
 *
 * Two parts. sc_cp_prepare_graph (cp.h) orders the graph; a training step
 * calls it before autodiff (passes/train.c), so the backward differentiates
 * through the permutations (each Gather's gradient a scatter-add by the same
 * indices) and its values are in the same order; for inference the
 * partitioner calls it. It does:
 *   - S, the sequence: dim 2 of every FusedAttention's queries and keys
 *     (one S for all; an unfused attention is refused, naming it), checked
 *     by sc_cp_check_sequence; without a causal attention, an S that does
 *     not divide into 2N chunks takes N contiguous blocks instead, padded
 *     to the next multiple of N (the layout below: padding rows after the
 *     tokens, their keys masked on the ring, see localize.c);
 *   - a CumSum or CumProd reading a value the sequence reaches is refused
 *     (it would scan each rank's tokens, in the zig-zag order);
 *   - an attention mask input must be a constant adding nothing to what the
 *     causal flag lets through, or exactly the causal mask (the flag is then
 *     set), and is dropped (mask_kind); any other is refused;
 *   - the seed: the first computed float value [b, S, hidden] (the token
 *     embedding); what comes before it runs whole on every rank;
 *   - a Gather over dim 1 with the zig-zag permutation after the seed
 *     (attribute cp_zigzag = N), read by all its readers, and one after
 *     each sequence input the caller names (a training step's labels or
 *     targets: cp_zigzag = 1);
 *   - position tables read by elementwise ops with a value in the zig-zag
 *     order (float values [.., S, d] not in it: GPT-2's position embedding,
 *     Llama's rotary cos and sin, ViT's) are permuted the same way along
 *     their S dim, so each rank sees its rows' global positions (a constant
 *     in its data, a computed value by a Gather);
 *   - the readers that mix tokens (token_readers): a Gather of one token
 *     (a class token) becomes a sum weighted 1 on its row; padded, a
 *     ReduceMean or ReduceSum over the tokens a sum weighted 0 on the
 *     padding, and a Reshape's constant shape naming S at dim 1 names the
 *     padded length (every shape is then inferred again);
 *   - every graph output in the zig-zag order with a dim 1 of S gets the
 *     inverse permutation (Gather, attribute cp_zigzag = 0) before it, so
 *     it leaves in the natural order. Every Gather made here carries
 *     cp_zigzag: a plan file's node_stages leaves them out.
 *   - before all this, when the batch is split too (dp or fsdp beside
 *     cp), token-wise products whose rows merge [b, S] (a Reshape, a Gemm,
 *     a Reshape back) are rewritten as 3-D MatMul + bias (products_3d), so
 *     that the batch split and the sequence split each keep their own dim
 *     (without one, the Reshape rule carries the sequence split alone
 *     through the merge as a stride: shard_rules.c's seq_merge).
 * sc_partition_prepare_cp then (inference: after calling the first part
 * and the dce pass) marks every FusedAttention and FusedAttentionGrad
 * (recomputed copies too) `cp_ring = N` and sets on the seed's Gather the
 * constraint [batch, cp, _], the batch split as the data inputs' (over dp,
 * fsdp or none); a padded sequence's attentions also get `cp_keys = S`, the
 * keys that are tokens (p->cp_seq and p->cp_padded record the lengths).
 * Errors name the node or value (SC_ERR_USAGE for what is refused). */
#include <string.h>

#include "ir/context_parallel.h"
#include "ir/op_util.h"
#include "ir/sharding.h"
#include "passes/partition/cp.h"
#include "passes/partition/partition.h"
#include "passes/partition/shard_rule.h"

/* The sequence's layout: seq real tokens in padded rows over n ranks, each
 * rank's padded / n rows in a row of the permuted value. zigzag: rank r's
 * chunks r and 2n−1−r (sc_cp_position); else n contiguous blocks, the
 * padded − seq rows after the last token being padding. */
typedef struct layout {
  int64_t seq, padded, n;
  bool zigzag;
} layout;

/* The token at row l of the permuted value, or -1 for a padding row. */
static int64_t layout_token(const layout *L, int64_t l) {
  int64_t local = L->padded / L->n;
  int64_t p = L->zigzag ? sc_cp_position(L->padded, L->n, l / local, l % local) : l;
  return p < L->seq ? p : -1;
}

/* The permutation's indices: [padded] rows of the natural order (a
 * padding row copies the last token: its values are never read by what
 * mixes tokens, its gradient is zero), or the inverse, [seq] rows of the
 * permuted value. */
static int32_t perm_const(sc_graph *g, const char *base, const layout *L, bool inverse) {
  int64_t len = inverse ? L->seq : L->padded;
  int64_t *idx = sc_arena_array(&g->arena, (size_t)len, sizeof *idx);
  if (!idx) return -1;
  for (int64_t l = 0; l < L->padded; l++) {
    int64_t p = layout_token(L, l);
    if (inverse && p >= 0) idx[p] = l;
    if (!inverse) idx[l] = p >= 0 ? p : L->seq - 1;
  }
  int32_t v = sc_graph_new_value(g, base);
  if (v < 0 || sc_value_set_data(g, v, SC_DTYPE_I64, 1, &len, idx, (uint64_t)len * 8, false) !=
                   SC_OK)
    return -1;
  return v;
}

/* What an additive mask constant [.., S, S] adds to the causal flag:
 * MASK_NOTHING (0 at every (i, j) the flag lets through: j <= i when
 * causal, every pair else — a padding mask of ones, or GPT-2's causal mask
 * kept beside the flag), MASK_CAUSAL (no flag, and the mask is exactly the
 * causal one: 0 for j <= i, at most -1e30 above, which exp takes to 0 —
 * Llama's), or MASK_OTHER. */
enum { MASK_NOTHING, MASK_CAUSAL, MASK_OTHER };
static int mask_kind(const sc_value *v, bool causal) {
  if (!sc_value_has_data(v) || v->dtype != SC_DTYPE_F32 || v->rank < 2) return MASK_OTHER;
  int64_t sq = v->dims[v->rank - 2], skv = v->dims[v->rank - 1];
  const float *f = v->data;
  bool nothing = true, is_causal = !causal && sq == skv;
  for (int64_t e = 0; e < sc_value_numel(v); e++) {
    int64_t i = e / skv % sq, j = e % skv;
    if ((!causal || j <= i) && f[e] != 0) nothing = false;
    if (j <= i ? f[e] != 0 : !(f[e] <= -1e30f)) is_causal = false;
  }
  return nothing ? MASK_NOTHING : is_causal ? MASK_CAUSAL : MASK_OTHER;
}

/* c permuted along dim rank-2 (the positions of a [.., S, d] table) by
 * idx[len] (len: the padded length): a new constant [.., len, d]. */
static int32_t permuted_const(sc_graph *g, int32_t c, const int64_t *idx, int64_t len) {
  const sc_value *v = &g->values[c];
  int64_t seq = v->dims[v->rank - 2], inner = v->dims[v->rank - 1];
  size_t row = (size_t)inner * sc_dtype_size(v->dtype);
  int64_t outer = sc_value_numel(v) / (seq * inner);
  uint64_t bytes = (uint64_t)outer * (uint64_t)len * row;
  char *data = sc_arena_alloc(&g->arena, bytes ? (size_t)bytes : 1);
  char *base = sc_arena_printf(&g->arena, "%s/cp_zigzag", v->name);
  if (!data || !base) return -1;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < len; j++)
      memcpy(data + ((size_t)(o * len + j)) * row,
             (const char *)v->data + ((size_t)(o * seq + idx[j])) * row, row);
  sc_dtype t = v->dtype;
  int32_t rank = v->rank;
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, v->dims, sizeof dims);
  dims[rank - 2] = len;
  int32_t id = sc_graph_new_value(g, base);
  if (id < 0 || sc_value_set_data(g, id, t, rank, dims, data, bytes, false) != SC_OK) return -1;
  return id;
}

static sc_status permute(sc_graph *g, int32_t seed, const layout *L, const int32_t *seq_inputs,
                         int32_t n_seq_inputs, bool *reach);

/* reach[v] for every value a node reaches from one already marked; not
 * through Shape and Size (their results do not depend on the order: a
 * training step's position ids are still computed from the embedding's
 * shape here) */
static void spread(const sc_graph *g, bool *reach) {
  for (bool grew = true; grew;) {
    grew = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sc_node *nd = &g->nodes[i];
      if (nd->op == SC_OP_SHAPE || nd->op == SC_OP_SIZE || (nd->flags & SC_NODE_DEAD)) continue;
      bool in = false;
      for (int32_t k = 0; k < nd->n_inputs && !in; k++) in = nd->inputs[k] >= 0 && reach[nd->inputs[k]];
      for (int32_t j = 0; in && j < nd->n_outputs; j++)
        if (nd->outputs[j] >= 0 && !reach[nd->outputs[j]]) reach[nd->outputs[j]] = grew = true;
    }
  }
}

/* The readers of value v among live nodes, up to 2 counted; *one the
 * last. */
static int32_t readers(const sc_graph *g, int32_t v, int32_t *one) {
  int32_t cnt = 0;
  for (int32_t i = 0; i < g->n_nodes && cnt < 2; i++) {
    if (g->nodes[i].flags & SC_NODE_DEAD) continue;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == v) {
        cnt++, *one = i;
        break;
      }
  }
  return cnt;
}

static int32_t new_node1(sc_graph *g, sc_op op, const char *base, const int32_t *ins,
                         int32_t n_in) {
  char *name = sc_arena_printf(&g->arena, "%s/cp_3d", base);
  int32_t y = name ? sc_graph_new_value(g, name) : -1;
  /* named after its output, a fresh (unique) name */
  int32_t nid = y < 0 ? -1 : sc_graph_add_node(g, op, g->values[y].name, ins, n_in, &y, 1);
  if (nid < 0 || sc_ops[op].infer(g, &g->nodes[nid]) != SC_OK) return -1;
  return y;
}

/* Token-wise products on [b, S] kept 3-D: Reshape(x [b, S, k] -> [b·S, k]),
 * Gemm (alpha = beta = 1, A not transposed), Reshape back to [b, S, n]
 * (GPT-2's Conv1D; with transB, MatMul(x, Transpose(W)): a copy of the
 * weight, GPT-2's tied LM head's, made each step in the forward; the
 * backward's product reads W itself, grad_rules.c's gemm_t) become MatMul(x, W) + bias, so that the batch split
 * over dp or fsdp and the sequence split over cp both stay on their own
 * dims through the product (one split dim of [b·S] cannot hold both). The
 * second Reshape becomes an Identity of the sum; the Gemm and the first
 * Reshape are left unread, for the dce pass (the canonical passes after a
 * training step's build; sc_partition_prepare_cp). That MatMul, and each
 * one there was of a [b, S, k] value by a 2-D weight, is marked
 * cp_rows = 1: autodiff then differentiates it as a batched product
 * (sc_grad_matmul), not as a linear layer over merged rows, whose [b·S]
 * would gather the sequence over cp and compute every product's gradients
 * whole on each cp rank. */
/* Marks node nid cp_rows = 1 (products_3d); false out of memory. */
static bool mark_cp_rows(sc_graph *g, int32_t nid) {
  sc_attr *a = sc_node_add_attr(g, nid, "cp_rows", SC_ATTR_INT);
  if (a) a->i = 1;
  return a != NULL;
}

static sc_status products_3d(sc_graph *g) {
  int32_t n_nodes = g->n_nodes;
  for (int32_t i = 0; i < n_nodes; i++) {
    sc_node *gm = &g->nodes[i];
    if (gm->op == SC_OP_MATMUL && !(gm->flags & SC_NODE_DEAD) && gm->n_inputs == 2 &&
        gm->inputs[0] >= 0 && gm->inputs[1] >= 0 && g->values[gm->inputs[0]].rank == 3 &&
        g->values[gm->inputs[1]].rank == 2) {
      if (!mark_cp_rows(g, i)) return SC_ERR_NOMEM;
      continue;
    }
    if (gm->op != SC_OP_GEMM || (gm->flags & SC_NODE_DEAD) || gm->n_inputs < 2 ||
        sc_attr_float(g, gm, "alpha", 1.0) != 1.0 || sc_attr_float(g, gm, "beta", 1.0) != 1.0 ||
        sc_attr_int(g, gm, "transA", 0) != 0)
      continue;
    int32_t a = gm->inputs[0], y = gm->outputs[0], r1 = g->values[a].producer, r2;
    if (r1 < 0 || g->nodes[r1].op != SC_OP_RESHAPE || readers(g, y, &r2) != 1 ||
        g->nodes[r2].op != SC_OP_RESHAPE || g->nodes[r2].inputs[0] != y)
      continue;
    const sc_value *x = &g->values[g->nodes[r1].inputs[0]], *av = &g->values[a];
    const sc_value *yv = &g->values[y], *z = &g->values[g->nodes[r2].outputs[0]];
    if (x->rank != 3 || av->rank != 2 || yv->rank != 2 || z->rank != 3 ||
        av->dims[0] != x->dims[0] * x->dims[1] || av->dims[1] != x->dims[2] ||
        z->dims[0] != x->dims[0] || z->dims[1] != x->dims[1] || z->dims[2] != yv->dims[1])
      continue;
    int32_t xid = g->nodes[r1].inputs[0], w = gm->inputs[1];
    int32_t c = gm->n_inputs > 2 ? gm->inputs[2] : -1;
    bool trans_b = sc_attr_int(g, gm, "transB", 0) != 0;
    const char *base = gm->name ? gm->name : "gemm";
    if (c >= 0 && (g->values[c].rank > 1 || (g->values[c].rank == 1 && g->values[c].dims[0] != yv->dims[1])))
      continue;
    if (trans_b) {
      char *tn = sc_arena_printf(&g->arena, "%s/cp_3d_wt", base);
      int32_t t = tn ? sc_graph_new_value(g, tn) : -1;
      int32_t nid = t < 0 ? -1 : sc_graph_add_node(g, SC_OP_TRANSPOSE, g->values[t].name, &w, 1, &t, 1);
      if (nid < 0 || sc_ops[SC_OP_TRANSPOSE].infer(g, &g->nodes[nid]) != SC_OK) return SC_ERR_NOMEM;
      w = t;
    }
    int32_t m = new_node1(g, SC_OP_MATMUL, base, (int32_t[]){xid, w}, 2);
    /* its gradients keep [b, S] too (grad_rules.c's sc_grad_matmul) */
    if (m >= 0 && !mark_cp_rows(g, g->values[m].producer)) return SC_ERR_NOMEM;
    if (m >= 0 && c >= 0) m = new_node1(g, SC_OP_ADD, base, (int32_t[]){m, c}, 2);
    if (m < 0) return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
    sc_node *id = &g->nodes[r2];
    id->op = SC_OP_IDENTITY;
    id->n_inputs = 1;
    id->inputs[0] = m;
    id->n_attrs = 0;
  }
  return SC_OK;
}

sc_status sc_cp_prepare_graph(sc_graph *g, int64_t n, bool batch_split,
                              const int32_t *seq_inputs, int32_t n_seq_inputs) {
  int64_t seq = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sc_node *nd = &g->nodes[i];
    if (nd->op == SC_OP_SOFTMAX && g->values[nd->outputs[0]].rank == 4)
      return sc_node_error(g, nd, SC_ERR_USAGE,
                           "context parallelism needs every attention fused (this softmax was "
                           "not: its scores would span the whole sequence)");
    if (nd->op != SC_OP_FUSED_ATTENTION) continue;
    const sc_value *q = sc_node_input(g, nd, 0), *k = sc_node_input(g, nd, 1);
    if (q->dims[2] != k->dims[2] || (seq >= 0 && q->dims[2] != seq))
      return sc_node_error(g, nd, SC_ERR_USAGE,
                           "context parallelism needs one sequence length for queries and keys "
                           "of every attention (%lld and %lld here)",
                           (long long)q->dims[2], (long long)k->dims[2]);
    seq = q->dims[2];
    if (nd->n_inputs > 3 && nd->inputs[3] >= 0) {
      bool causal = sc_attr_int(g, nd, "causal", 0) != 0;
      int kind = mask_kind(&g->values[nd->inputs[3]], causal);
      if (kind == MASK_OTHER)
        return sc_node_error(g, nd, SC_ERR_USAGE,
                             "context parallelism: an attention mask that adds to what the causal "
                             "attribute lets through is not supported yet");
      nd->n_inputs = 3;
      for (int32_t a = 0; kind == MASK_CAUSAL && a < nd->n_attrs; a++)
        if (strcmp(nd->attrs[a].name, "causal") == 0) nd->attrs[a].i = 1;
    }
  }
  if (seq < 0)
    return sc_graph_error(g, SC_ERR_USAGE,
                          "context parallelism (cp=%lld) needs an attention to split the "
                          "sequence of; this model has no fused attention",
                          (long long)n);
  /* the layout: the zig-zag where the sequence divides into 2n chunks
   * (and always under a causal mask: its refusal names the lengths that
   * do); else, with no attention causal, n contiguous blocks, the sequence
   * padded to the next multiple of n with keys masked out on the ring */
  bool causal = false;
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == SC_OP_FUSED_ATTENTION && !(g->nodes[i].flags & SC_NODE_DEAD))
      causal |= sc_attr_int(g, &g->nodes[i], "causal", 0) != 0;
  layout L = {.seq = seq, .padded = seq, .n = n, .zigzag = true};
  if (!causal && n >= 1 && seq > 0 && seq % (2 * n) != 0) {
    L.zigzag = false;
    L.padded = sc_cp_padded_sequence(seq, n);
    if (L.padded != seq && n_seq_inputs > 0)
      return sc_graph_error(g, SC_ERR_USAGE,
                            "context parallelism: a sequence of %lld padded to %lld for cp=%lld "
                            "with a sequence input ('%s': its padding rows would count)",
                            (long long)seq, (long long)L.padded, (long long)n,
                            g->values[seq_inputs[0]].name ? g->values[seq_inputs[0]].name : "?");
  } else if (sc_cp_check_sequence(seq, n, NULL, &g->diag) != SC_OK) {
    return g->diag.status;
  }
  sc_status st = batch_split ? products_3d(g) : SC_OK;
  if (st != SC_OK) return st;
  /* the seed: the first computed float value [b, S, hidden] (the token
   * embedding) */
  int32_t seed = -1;
  for (int32_t i = 0; i < g->n_nodes && seed < 0; i++) {
    if (g->nodes[i].flags & SC_NODE_DEAD) continue;
    const sc_value *y = &g->values[g->nodes[i].outputs[0]];
    if (y->rank == 3 && y->dims[1] == seq && sc_dtype_is_float(y->dtype))
      seed = g->nodes[i].outputs[0];
  }
  if (seed < 0)
    return sc_graph_error(g, SC_ERR_USAGE,
                          "context parallelism: no value [batch, %lld, hidden] to split",
                          (long long)seq);
  for (int32_t k = 0; k < n_seq_inputs; k++) {
    const sc_value *v = &g->values[seq_inputs[k]];
    if (v->rank < 2 || v->dims[1] != seq)
      return sc_graph_error(g, SC_ERR_USAGE,
                            "context parallelism: input '%s' has no sequence dim (dim 1) of %lld",
                            v->name ? v->name : "?", (long long)seq);
  }
  /* what the seed and the sequence inputs reach: the values in the
   * zig-zag order once they are (the new values made below are marked as
   * they are made) */
  bool *reach = sc_calloc((size_t)g->n_values + 1, sizeof *reach);
  if (!reach) return SC_ERR_NOMEM;
  reach[seed] = true;
  for (int32_t k = 0; k < n_seq_inputs; k++) reach[seq_inputs[k]] = true;
  spread(g, reach);
  /* a scan over values in the zig-zag order runs in that order, not the
   * sequence's (a mixture-of-experts capacity dispatch: each choice's
   * position among its expert's, CumSum over the tokens; docs/moe.md) */
  for (int32_t i = 0; i < g->n_nodes && st == SC_OK; i++) {
    const sc_node *nd = &g->nodes[i];
    if ((nd->flags & SC_NODE_DEAD) || (nd->op != SC_OP_CUM_SUM && nd->op != SC_OP_CUM_PROD) ||
        nd->n_inputs < 1 || nd->inputs[0] < 0 || !reach[nd->inputs[0]])
      continue;
    st = sc_node_error(g, nd, SC_ERR_USAGE,
                       "context parallelism: %s scans values the sequence reaches, which cp "
                       "holds in its zig-zag token order: the scan would run in that order, "
                       "not the sequence's (a mixture-of-experts capacity dispatch: each "
                       "token's position among its expert's choices)",
                       sc_op_name(nd->op));
  }
  if (st == SC_OK) st = permute(g, seed, &L, seq_inputs, n_seq_inputs, reach);
  sc_free(reach);
  if (st == SC_OK) st = sc_graph_toposort(g);
  /* shapes again: padded, every value after the seed's Gather holds the
   * padded length; the weighted sums' products are new */
  for (int32_t i = 0; st == SC_OK && i < g->n_nodes; i++)
    if (!(g->nodes[i].flags & SC_NODE_DEAD)) st = sc_ops[g->nodes[i].op].infer(g, &g->nodes[i]);
  return st;
}

/* The zig-zag Gather of sc_cp_prepare_graph: the node carrying the
 * attribute cp_zigzag; -1 for none. */
static int32_t zigzag_node(sc_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == SC_OP_GATHER && sc_attr_int(g, &g->nodes[i], "cp_zigzag", 0) > 0)
      return i;
  return -1;
}

sc_status sc_partition_prepare_cp(sc_partition *p) {
  sc_graph *g = p->global;
  int64_t n = p->mesh.axes[p->cp_axis].size;
  int32_t z = zigzag_node(g);
  if (z < 0 && p->training)
    return sc_graph_error(g, SC_ERR_USAGE,
                          "context parallelism (cp=%lld): this training step was built without "
                          "the sequence's zig-zag order (sc_train_opts.cp)",
                          (long long)n);
  sc_status st;
  if (z < 0) { /* inference: the order, then the nodes it leaves unread removed */
    sc_pass_opts po;
    sc_pass_opts_init(&po);
    po.quiet = true;
    bool batch = p->dp_axis >= 0 && p->mesh.axes[p->dp_axis].size > 1;
    if ((st = sc_cp_prepare_graph(g, n, batch, NULL, 0)) != SC_OK ||
        (st = sc_run_passes(g, "dce", &po)) != SC_OK)
      return st;
    if ((z = zigzag_node(g)) < 0) return SC_ERR_INVALID;
  }
  if (sc_attr_int(g, &g->nodes[z], "cp_zigzag", 0) != n)
    return sc_graph_error(g, SC_ERR_USAGE,
                          "context parallelism: the step's sequence is ordered for cp=%lld, the "
                          "mesh has cp=%lld",
                          (long long)sc_attr_int(g, &g->nodes[z], "cp_zigzag", 0), (long long)n);
  /* a padded sequence: its length before and after (the seed's Gather's
   * input and output); the ring masks the keys of the padding rows */
  const sc_value *zin = &g->values[g->nodes[z].inputs[0]], *zout = &g->values[g->nodes[z].outputs[0]];
  p->cp_seq = zin->dims[1];
  p->cp_padded = zout->dims[1];
  p->cp_seed = g->nodes[z].inputs[0];
  /* every attention, its backward and its recomputed copies a ring */
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sc_node *nd = &g->nodes[i];
    if (nd->op != SC_OP_FUSED_ATTENTION && nd->op != SC_OP_FUSED_ATTENTION_GRAD) continue;
    int32_t mask = nd->op == SC_OP_FUSED_ATTENTION ? 3 : 6;
    if (nd->n_inputs > mask && nd->inputs[mask] >= 0)
      return sc_node_error(g, nd, SC_ERR_USAGE,
                           "context parallelism: an attention mask left on a ring attention");
    sc_attr *a = sc_node_add_attr(g, i, "cp_ring", SC_ATTR_INT);
    if (!a) return SC_ERR_NOMEM;
    a->i = n;
    if (p->cp_padded == p->cp_seq) continue;
    if (sc_attr_int(g, nd, "causal", 0) != 0)
      return sc_node_error(g, nd, SC_ERR_INVALID,
                           "context parallelism: a causal attention over a padded sequence");
    if (!(a = sc_node_add_attr(g, i, "cp_keys", SC_ATTR_INT))) return SC_ERR_NOMEM;
    a->i = p->cp_seq;
  }
  /* the constraint: the sequence over cp, the batch as the data inputs
   * split it (over dp, fsdp: the first input of the batch's size with a
   * split dim 0) */
  int32_t x = g->nodes[z].outputs[0];
  sc_sharding s;
  sc_sharding_replicated(&s, 3);
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const sc_sharding *in = sc_graph_sharding(g, g->inputs[i]);
    if (in && in->n_dim_axes[0] && g->values[g->inputs[i]].dims[0] == g->values[x].dims[0]) {
      sc_shard_copy_dim(&s, 0, in, 0);
      break;
    }
  }
  sc_sharding_split(&s, 1, p->cp_axis);
  /* under sequence parallelism each cp rank's tokens split again over tp
   * (a comm-free slice), so that the first norm runs on S/(cp·tp) as the
   * others, where the seed is a table's lookup (the token embedding: its
   * gradient scatter-adds the split rows); a computed seed (a ViT's patch
   * embedding) stays whole over tp, its weight's gradient reading the
   * seed's gradient whole (split, it would be gathered back) */
  int32_t seed_node = g->values[p->cp_seed].producer;
  if (p->sequence_parallel && p->tp_axis >= 0 && seed_node >= 0 &&
      g->nodes[seed_node].op == SC_OP_GATHER) {
    sc_sharding t = s;
    sc_sharding_split(&t, 1, p->tp_axis);
    if (sc_shard_divides(&t, &p->mesh, 1, g->values[x].dims[1])) s = t;
  }
  if (sc_graph_set_sharding(g, x, &s) != SC_OK) return g->diag.status;
  return SC_OK;
}

/* The rest of sc_cp_prepare_graph: the permutation after the seed and
 * of the sequence inputs, the position tables read with values they
 * reach, the outputs they reach put back in order. reach: g->n_values + 1
 * entries on entry (new values are marked through reached()). */
static bool reached(sc_graph *g, const bool *reach, int32_t n_reach, int32_t v) {
  if (v < 0) return false;
  if (v < n_reach) return reach[v];
  /* a value made here: the zig-zag Gathers' outputs */
  int32_t pn = g->values[v].producer;
  return pn >= 0 && sc_attr_int(g, &g->nodes[pn], "cp_zigzag", 0) > 0;
}

/* y = x permuted along dim `axis` by idx (a Gather marked cp_zigzag when
 * mark), its readers among nodes [0, upto) rewired to it; -1 on failure. */
static int32_t reorder(sc_graph *g, int32_t x, int32_t idx, int64_t axis, int32_t upto,
                       int64_t mark) {
  char *base = sc_arena_printf(&g->arena, "%s/cp_zigzag", g->values[x].name);
  int32_t y = base ? sc_graph_new_value(g, base) : -1;
  int32_t nid = y < 0 ? -1 : sc_graph_add_node(g, SC_OP_GATHER, base, (int32_t[]){x, idx}, 2, &y, 1);
  sc_attr *a = nid < 0 ? NULL : sc_node_add_attr(g, nid, "axis", SC_ATTR_INT);
  if (!a) return -1;
  a->i = axis;
  if (!(a = sc_node_add_attr(g, nid, "cp_zigzag", SC_ATTR_INT))) return -1;
  a->i = mark;
  if (sc_ops[SC_OP_GATHER].infer(g, &g->nodes[nid]) != SC_OK) return -1;
  for (int32_t i = 0; i < upto; i++)
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == x) g->nodes[i].inputs[k] = y;
  return y;
}

/* Node nid (a Gather of one token, a ReduceMean or ReduceSum over the
 * tokens, of x [b, padded, ...]) becomes ReduceSum(x · w, axes = [1]),
 * w [1, padded, 1, ..] holding each row's weight: 1 at the token's row
 * (token >= 0), else `each` on every row of a token and 0 on the padding
 * rows, which then add nothing (their values are finite) and get a zero
 * gradient. A sum over the split tokens: a pending sum over cp. */
static sc_status token_sum(sc_graph *g, int32_t nid, const layout *L, int64_t token,
                           double each, bool keepdims) {
  const sc_node *nd = &g->nodes[nid];
  int32_t x = nd->inputs[0];
  const sc_value *xv = &g->values[x];
  if (xv->dtype != SC_DTYPE_F32)
    return sc_node_error(g, nd, SC_ERR_USAGE,
                         "context parallelism: a %s over the padded sequence is supported in f32 "
                         "only (this one is %s)",
                         sc_op_name(nd->op), sc_dtype_name(xv->dtype));
  int64_t dims[SC_MAX_RANK];
  for (int32_t d = 0; d < xv->rank; d++) dims[d] = d == 1 ? L->padded : 1;
  float *w = sc_arena_array(&g->arena, (size_t)L->padded, sizeof *w);
  char *base = sc_arena_printf(&g->arena, "%s/cp_weights", nd->name ? nd->name : "tokens");
  if (!w || !base) return SC_ERR_NOMEM;
  for (int64_t l = 0; l < L->padded; l++) {
    int64_t p = layout_token(L, l);
    w[l] = token >= 0 ? (p == token ? 1.0f : 0.0f) : (p >= 0 ? (float)each : 0.0f);
  }
  int32_t wv = sc_graph_new_value(g, base);
  if (wv < 0 || sc_value_set_data(g, wv, SC_DTYPE_F32, xv->rank, dims, w,
                                  (uint64_t)L->padded * sizeof *w, false) != SC_OK)
    return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
  /* its shape inferred with the others' once x has the padded length */
  char *mn = sc_arena_printf(&g->arena, "%s/mul", base);
  int32_t m = mn ? sc_graph_new_value(g, mn) : -1;
  if (m < 0 || sc_graph_add_node(g, SC_OP_MUL, g->values[m].name, (int32_t[]){x, wv}, 2, &m, 1) < 0)
    return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
  sc_node *r = &g->nodes[nid];
  r->op = SC_OP_REDUCE_SUM;
  r->inputs[0] = m;
  r->n_inputs = 1;
  r->n_attrs = 0;
  sc_attr *a = sc_node_add_attr(g, nid, "axes", SC_ATTR_INTS);
  if (!a || !(a->ints = sc_arena_array(&g->arena, 1, sizeof *a->ints))) return SC_ERR_NOMEM;
  a->ints[0] = 1;
  a->n = 1;
  if (!(a = sc_node_add_attr(g, nid, "keepdims", SC_ATTR_INT))) return SC_ERR_NOMEM;
  a->i = keepdims;
  return SC_OK;
}

/* The readers of the tokens (dim 1 of a value in the sequence's order):
 * a Gather of one token (a class token's selection) becomes a weighted sum
 * (token_sum), since the token's row is on one rank; when the sequence is
 * padded, a ReduceMean or ReduceSum over the tokens skips the padding
 * (token_sum), and a Reshape's constant shape that names the sequence's
 * length names the padded one. Nodes [0, first) are looked at. */
static sc_status token_readers(sc_graph *g, const layout *L, int32_t first, const bool *reach,
                               int32_t n_reach) {
  for (int32_t i = 0; i < first; i++) {
    sc_node *nd = &g->nodes[i];
    if ((nd->flags & SC_NODE_DEAD) || nd->n_inputs < 1 || !reached(g, reach, n_reach, nd->inputs[0]))
      continue;
    const sc_value *x = &g->values[nd->inputs[0]];
    const sc_value *i1 = nd->n_inputs > 1 && nd->inputs[1] >= 0 ? &g->values[nd->inputs[1]] : NULL;
    if (x->rank < 2 || x->dims[1] != L->seq) continue;
    sc_status st = SC_OK;
    if (nd->op == SC_OP_GATHER && i1 && sc_value_has_data(i1) && sc_value_numel(i1) == 1 &&
        i1->dtype == SC_DTYPE_I64 && i1->rank <= 1) {
      int64_t axis = sc_attr_int(g, nd, "axis", 0), k = *(const int64_t *)i1->data;
      if (axis < 0) axis += x->rank;
      if (axis != 1) continue;
      if (k < 0) k += L->seq;
      if (k < 0 || k >= L->seq)
        return sc_node_error(g, nd, SC_ERR_INVALID, "token %lld of %lld", (long long)k,
                             (long long)L->seq);
      st = token_sum(g, i, L, k, 1.0, i1->rank == 1);
    } else if ((nd->op == SC_OP_REDUCE_MEAN || nd->op == SC_OP_REDUCE_SUM) &&
               L->padded != L->seq) {
      bool mask[SC_MAX_RANK], noop, keep;
      if ((st = sc_reduce_axes(g, nd, mask, &noop, &keep)) != SC_OK) return st;
      bool tokens_only = !noop && mask[1];
      for (int32_t d = 0; d < x->rank; d++) tokens_only &= mask[d] == (d == 1);
      if (!tokens_only)
        return sc_node_error(g, nd, SC_ERR_USAGE,
                             "context parallelism: a reduction over the padded sequence (%lld "
                             "padded to %lld) and other dims is not supported yet",
                             (long long)L->seq, (long long)L->padded);
      st = token_sum(g, i, L, -1, nd->op == SC_OP_REDUCE_MEAN ? 1.0 / (double)L->seq : 1.0, keep);
    } else if (nd->op == SC_OP_RESHAPE && L->padded != L->seq && i1 && sc_value_has_data(i1) &&
               i1->dtype == SC_DTYPE_I64 && i1->rank == 1 && i1->dims[0] >= 2 &&
               ((const int64_t *)i1->data)[1] == L->seq) {
      int64_t len = i1->dims[0];
      int64_t *shape = sc_arena_array(&g->arena, (size_t)len, sizeof *shape);
      char *base = sc_arena_printf(&g->arena, "%s/cp_padded", i1->name ? i1->name : "shape");
      if (!shape || !base) return SC_ERR_NOMEM;
      memcpy(shape, i1->data, (size_t)len * sizeof *shape);
      shape[1] = L->padded;
      int32_t sv = sc_graph_new_value(g, base);
      if (sv < 0 || sc_value_set_data(g, sv, SC_DTYPE_I64, 1, &len, shape,
                                      (uint64_t)len * sizeof *shape, false) != SC_OK)
        return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
      g->nodes[i].inputs[1] = sv;
    }
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

static sc_status permute(sc_graph *g, int32_t seed, const layout *L, const int32_t *seq_inputs,
                         int32_t n_seq_inputs, bool *reach) {
  int64_t seq = L->seq, n = L->n;
  int32_t n_reach = g->n_values;
  int32_t fwd = perm_const(g, "cp.zigzag", L, false);
  int32_t inv = fwd < 0 ? -1 : perm_const(g, "cp.unzigzag", L, true);
  int32_t first = g->n_nodes;
  /* the seed's Gather carries n (the partitioner finds it by it); the
   * others 1 */
  int32_t x = inv < 0 ? -1 : reorder(g, seed, fwd, 1, first, n);
  for (int32_t k = 0; x >= 0 && k < n_seq_inputs; k++)
    if (reorder(g, seq_inputs[k], fwd, 1, first, 1) < 0) x = -1;
  if (x < 0) return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
  /* position tables ([.., S, d] float values an elementwise op reads
   * with a value in the zig-zag order, themselves not in it: a position
   * embedding, rotary cos and sin) take the same order: a constant is
   * permuted in place of its data, a computed value (a training step's
   * position embedding, read from a parameter) by a Gather */
  const int64_t *order = g->values[fwd].data;
  int32_t *done = sc_calloc((size_t)n_reach + 1, sizeof *done); /* table -> its permuted copy + 1 */
  if (!done) return SC_ERR_NOMEM;
  for (int32_t i = 0; i < first; i++) {
    if (!(sc_ops[g->nodes[i].op].flags & SC_OPF_ELEMENTWISE)) continue;
    bool in = false;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
      in |= reached(g, reach, n_reach, g->nodes[i].inputs[k]);
    if (!in) continue;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
      int32_t cv = g->nodes[i].inputs[k];
      const sc_value *v = cv >= 0 ? &g->values[cv] : NULL;
      if (!v || reached(g, reach, n_reach, cv) || !sc_dtype_is_float(v->dtype) || v->rank < 2 ||
          v->dims[v->rank - 2] != seq)
        continue;
      int32_t pc = cv < n_reach && done[cv] ? done[cv] - 1
                   : sc_value_has_data(v)      ? permuted_const(g, cv, order, L->padded)
                                               : reorder(g, cv, fwd, v->rank - 2, 0, 1);
      if (pc < 0) {
        sc_free(done);
        return g->diag.status != SC_OK ? g->diag.status : SC_ERR_NOMEM;
      }
      if (cv < n_reach) done[cv] = pc + 1;
      g->nodes[i].inputs[k] = pc;
    }
  }
  sc_free(done);
  sc_status st = token_readers(g, L, first, reach, n_reach);
  if (st != SC_OK) return st;
  /* outputs back in the natural order */
  for (int32_t o = 0; o < g->n_outputs; o++) {
    int32_t y = g->outputs[o];
    const sc_value *yv = &g->values[y];
    if (!reached(g, reach, n_reach, y) || yv->rank < 2 || yv->dims[1] != seq || yv->producer < 0)
      continue;
    /* the producer writes a new value, read by its readers; y = Gather */
    char *base = sc_arena_printf(&g->arena, "%s/cp_zigzag", yv->name);
    int32_t z = base ? sc_graph_new_value(g, base) : -1;
    if (z < 0) return SC_ERR_NOMEM;
    yv = &g->values[y];
    sc_node *pn = &g->nodes[yv->producer];
    for (int32_t j = 0; j < pn->n_outputs; j++)
      if (pn->outputs[j] == y) pn->outputs[j] = z;
    g->values[z].producer = yv->producer;
    g->values[z].dtype = yv->dtype;
    for (int32_t i = 0; i < g->n_nodes; i++)
      for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
        if (g->nodes[i].inputs[k] == y) g->nodes[i].inputs[k] = z;
    if (sc_value_set_shape(g, z, yv->dtype, yv->rank, yv->dims) != SC_OK) return g->diag.status;
    int32_t nid = sc_graph_add_node(g, SC_OP_GATHER, base, (int32_t[]){z, inv}, 2, &y, 1);
    sc_attr *a = nid < 0 ? NULL : sc_node_add_attr(g, nid, "axis", SC_ATTR_INT);
    if (!a) return SC_ERR_NOMEM;
    a->i = 1;
    /* marked as the partitioner's (0: not a zig-zag of the inputs) */
    if (!(a = sc_node_add_attr(g, nid, "cp_zigzag", SC_ATTR_INT))) return SC_ERR_NOMEM;
    a->i = 0;
  }
  return SC_OK;
}
