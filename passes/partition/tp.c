/* tp.c — tensor-parallel seeds, Megatron-style, from patterns in the graph.
 *
 * Only weights are seeded; propagation (localize.c with the ops' rules)
 * derives every activation's layout and the collectives from them.
 *   row-parallel     a MatMul/Gemm with a 2-D weight whose result (through
 *                    Reshape, Identity or a constant bias Add) meets a
 *                    residual Add (both operands computed): the attention
 *                    output and MLP down projections. Weight split along K.
 *                    The product is a pending sum; the all-reduce (or, with
 *                    --sequence-parallel, reduce-scatter) follows.
 *   column-parallel  every other MatMul/Gemm with a 2-D weight: QKV and MLP
 *                    up projections (attention then runs by heads, since the
 *                    head reshape carries the split), split along N. A
 *                    result split into n equal parts (a fused QKV
 *                    projection) gets stride n so each rank holds its heads
 *                    of each of q, k and v.
 *   LM head          a column weight whose result reaches a graph output:
 *                    split only with vocabulary parallelism.
 *   embedding        a Gather over a 2-D weight's rows (vocabulary-parallel):
 *                    rows split, each rank looks up the ids it holds; in a
 *                    training step its gradient's scatter adds each
 *                    rank's rows into zeros split alike (mark_lookup_grads).
 *   column bias      in a training step, the 1-D bias added to a
 *                    column-parallel product (Gemm's C, or an Add after it)
 *                    is split like the product's columns, as Megatron's
 *                    ColumnParallelLinear holds it: its gradient is then
 *                    computed split and needs no all-gather.
 * A mixed-precision training step (passes/train.c: --precision bf16|fp16)
 * computes each product between casts: the patterns look through them, so
 * the weight seeded is the parameter behind the cast of a MatMul's operand
 * (or of the bias the step adds to the low product), and a Cast passes
 * like a Reshape on the way from a product to its reader. An FP8 step
 * (--precision fp8, passes/fp8.h) multiplies quantized operands: the
 * weight is found behind Cast(Cast(W · s, f8), f32) as behind a cast, and
 * the product's descaling (a Mul by a scalar) passes like a Cast; the
 * quantization is elementwise and the amax a ReduceMax, so propagation
 * splits the FP8 weight like W and reduces the amax with a max all-reduce
 * over the ranks holding pieces of the tensor (the tp group's included).
 * A dim that does not divide by the tp size is left whole (recorded as a
 * fallback: `shardc plan` lists it). The plan's
 * tp_blocks (prefixes of the reading node's name) restrict the weights
 * considered. Overrides from
 * the plan are applied last and win. */
#include <stdio.h>
#include <string.h>

#include "partition.h"

/* The single reader of value id, or -1 (none or several). */
static int32_t only_reader(const int32_t *off, const int32_t *users, int32_t id) {
  return off[id + 1] - off[id] == 1 ? users[off[id]] : -1;
}

/* A trainable parameter of a training step: an input (passes/train.h). */
static bool is_train_param(const sc_partition *p, const sc_value *v) {
  const char *q = p->training && (v->flags & SC_VALUE_INPUT) ? sc_partition_param_of(p, v->name)
                                                             : NULL;
  return q && strcmp(q, v->name) == 0;
}

/* A weight: an initializer, or a constant folded from one (a tied LM head's
 * Transpose of the embedding folds into a constant that is not a PARAM), or
 * a training step's parameter. */
static bool is_weight(const sc_partition *p, const sc_value *v) {
  return ((v->flags & SC_VALUE_CONST) && v->producer < 0 &&
          ((v->flags & SC_VALUE_PARAM) || v->rank == 2)) ||
         is_train_param(p, v);
}

/* Whether node n is a Mul by a scalar (rank 0); *other receives the
 * operand that is not (-1: neither or both). */
static bool scalar_mul(const sc_graph *g, const sc_node *n, int32_t *other) {
  *other = -1;
  if (n->op != SC_OP_MUL || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
  bool s0 = g->values[n->inputs[0]].rank == 0, s1 = g->values[n->inputs[1]].rank == 0;
  if (s0 == s1) return false;
  *other = n->inputs[s0 ? 1 : 0];
  return true;
}

/* The parameter behind value id when id is a Cast of a weight (the
 * low-precision copy a mixed-precision step multiplies) or an FP8 step's
 * quantization of one (Cast(Cast(W · s, f8), f32), passes/fp8.h: Casts
 * and a Mul by a scalar, at most 4 nodes), else id. */
static int32_t uncast(const sc_partition *p, int32_t id) {
  const sc_graph *g = p->global;
  int32_t x = id;
  for (int hop = 0; hop < 4; hop++) {
    int32_t pr = x >= 0 ? g->values[x].producer : -1;
    if (pr < 0) break;
    const sc_node *n = &g->nodes[pr];
    if (n->op == SC_OP_CAST && n->n_inputs == 1) x = n->inputs[0];
    else if (!scalar_mul(g, n, &x)) break;
    if (x < 0) break;
    if (is_weight(p, &g->values[x])) return x;
  }
  return id;
}

/* Computed by the graph: neither a constant nor a parameter, nor a
 * parameter's low-precision cast (a bf16 step adds the bias's cast to the
 * product: passes/train.c). */
static bool computed(const sc_partition *p, int32_t id) {
  id = uncast(p, id);
  return id >= 0 && !(p->global->values[id].flags & SC_VALUE_CONST) &&
         !is_train_param(p, &p->global->values[id]);
}

/* Passed through on the way from product value id to its reader: a
 * Reshape, an Identity, a Cast (mixed precision's cast back), a Mul of id
 * by a scalar (an FP8 product's descaling). */
static bool passes_through(const sc_graph *g, const sc_node *n, int32_t id) {
  int32_t other;
  return n->op == SC_OP_RESHAPE || n->op == SC_OP_IDENTITY || n->op == SC_OP_CAST ||
         (scalar_mul(g, n, &other) && other == id);
}

/* Follows value id through Reshape / Identity / Cast / scalar Mul /
 * constant-bias Add (at most 6 nodes: an FP8 Gemm's descaling, bias, cast
 * back and Reshape); returns the first other node reading it (or -1), the
 * value it reads in *val. */
static int32_t follow(const sc_partition *p, const int32_t *off, const int32_t *users,
                      int32_t id, int32_t *val) {
  const sc_graph *g = p->global;
  for (int hop = 0; hop < 6; hop++) {
    int32_t r = only_reader(off, users, id);
    if (r < 0) break;
    const sc_node *n = &g->nodes[r];
    bool pass = passes_through(g, n, id) ||
                (n->op == SC_OP_ADD && (!computed(p, n->inputs[0]) || !computed(p, n->inputs[1])));
    if (!pass) {
      *val = id;
      return r;
    }
    id = n->outputs[0];
  }
  *val = id;
  return only_reader(off, users, id);
}

/* The 1-D bias of n elements added to column-parallel product n's result
 * (Gemm's C, or a constant Add after Reshape / Identity / Cast), or -1: the
 * parameter behind a mixed-precision step's Cast of it, as for the weight. */
static int32_t column_bias(const sc_partition *p, const int32_t *off, const int32_t *users,
                           const sc_node *n, int64_t cols) {
  const sc_graph *g = p->global;
  if (n->op == SC_OP_GEMM) {
    int32_t c = n->n_inputs >= 3 ? uncast(p, n->inputs[2]) : -1;
    return c >= 0 && is_weight(p, &g->values[c]) && g->values[c].rank == 1 &&
                   g->values[c].dims[0] == cols
               ? c
               : -1;
  }
  int32_t id = n->outputs[0];
  for (int hop = 0; hop < 4; hop++) {
    int32_t r = only_reader(off, users, id);
    if (r < 0) return -1;
    const sc_node *x = &g->nodes[r];
    if (x->op == SC_OP_ADD && x->n_inputs == 2) {
      int32_t b = uncast(p, x->inputs[0] == id ? x->inputs[1] : x->inputs[0]);
      const sc_value *v = &g->values[b];
      return !computed(p, b) && is_weight(p, v) && v->rank == 1 && v->dims[0] == cols ? b : -1;
    }
    if (!passes_through(g, x, id)) return -1;
    id = x->outputs[0];
  }
  return -1;
}

static bool reaches_output(const sc_graph *g, const int32_t *off, const int32_t *users,
                           int32_t id) {
  for (int hop = 0; hop < 4; hop++) {
    if (g->values[id].flags & SC_VALUE_OUTPUT) return true;
    int32_t r = only_reader(off, users, id);
    if (r < 0) return false;
    const sc_node *n = &g->nodes[r];
    if (!passes_through(g, n, id) && n->op != SC_OP_ADD) return false;
    id = n->outputs[0];
  }
  return false;
}

/* Whether the node reading a weight lies in the plan's blocks (node-name
 * prefixes, docs/plan-format.md). */
static bool in_blocks(const sc_plan *plan, const char *name) {
  if (plan->tp_all_blocks) return true;
  if (!name) return false;
  for (int32_t i = 0; i < plan->n_tp_blocks; i++)
    if (strncmp(name, plan->tp_blocks[i], strlen(plan->tp_blocks[i])) == 0) return true;
  return false;
}

/* Splits weight id's dim over axis ax (node: the reader that matched a
 * pattern, named by a fallback when the dim does not divide). */
static sc_status seed(sc_partition *p, const sc_node *node, int32_t id, int32_t dim, int32_t ax,
                      int32_t stride) {
  sc_graph *g = p->global;
  const sc_value *v = &g->values[id];
  if (sc_graph_sharding(g, id)) return SC_OK; /* first pattern wins (tied weights) */
  sc_sharding s;
  sc_sharding_replicated(&s, v->rank);
  sc_sharding_split(&s, dim, ax);
  if (stride > 1) s.stride[dim] = (uint8_t)stride;
  const sc_mesh *m = sc_graph_mesh(g);
  int64_t parts = m->axes[ax].size * (stride > 1 ? stride : 1);
  if (v->dims[dim] % parts != 0) {
    char why[96] = "";
    if (stride > 1)
      snprintf(why, sizeof why, " x %d (a fused projection of %d parts)", (int)stride,
               (int)stride);
    if (sc_partition_note_fallback(p, node->name, sc_op_name(node->op),
                                   "weight '%s' [%lld,%lld]: dim %d (%lld) does not divide by "
                                   "%s=%lld%s: not split", v->name, (long long)v->dims[0],
                                   (long long)v->dims[1], (int)dim, (long long)v->dims[dim],
                                   m->axes[ax].name, (long long)m->axes[ax].size,
                                   why) != SC_OK)
      return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    return SC_OK;
  }
  return sc_graph_set_sharding(g, id, &s);
}

static sc_status seed_patterns(sc_partition *p, const sc_plan *plan, int32_t ax,
                               const int32_t *off, const int32_t *users) {
  sc_graph *g = p->global;
  for (int32_t nid = 0; nid < g->n_nodes; nid++) {
    const sc_node *n = &g->nodes[nid];
    if (n->flags & SC_NODE_DEAD) continue;
    if (n->op == SC_OP_GATHER && plan->vocab_parallel && n->n_inputs == 2) {
      const sc_value *w = &g->values[n->inputs[0]];
      if (is_weight(p, w) && w->rank == 2 && sc_attr_int(g, n, "axis", 0) == 0 &&
          computed(p, n->inputs[1]) && in_blocks(plan, n->name)) {
        sc_status st = seed(p, n, n->inputs[0], 0, ax, 1);
        if (st != SC_OK) return st;
      }
      continue;
    }
    if (n->op != SC_OP_MATMUL && n->op != SC_OP_GEMM) continue;
    if (n->n_inputs < 2 || !computed(p, n->inputs[0])) continue;
    int32_t wid = uncast(p, n->inputs[1]);
    const sc_value *w = &g->values[wid];
    if (!is_weight(p, w) || w->rank != 2 || !in_blocks(plan, n->name)) continue;
    bool tb = n->op == SC_OP_GEMM && sc_attr_int(g, n, "transB", 0) != 0;
    if (n->op == SC_OP_GEMM && sc_attr_int(g, n, "transA", 0) != 0) continue;
    int32_t kdim = tb ? 1 : 0, ndim = tb ? 0 : 1;
    int32_t val = -1;
    int32_t next = follow(p, off, users, n->outputs[0], &val);
    const sc_node *nx = next >= 0 ? &g->nodes[next] : NULL;
    bool row = nx && nx->op == SC_OP_ADD && computed(p, nx->inputs[0]) &&
               computed(p, nx->inputs[1]);
    sc_status st;
    if (row) {
      st = seed(p, n, wid, kdim, ax, 1);
    } else {
      if (reaches_output(g, off, users, n->outputs[0]) && !plan->vocab_parallel) continue;
      int32_t stride = 1;
      if (nx && nx->op == SC_OP_SPLIT && nx->n_outputs > 1) {
        const sc_value *x = &g->values[val];
        int64_t axis = sc_attr_int(g, nx, "axis", 0);
        if (axis < 0) axis += x->rank;
        bool equal = axis == x->rank - 1;
        for (int32_t j = 0; equal && j < nx->n_outputs; j++)
          equal = nx->outputs[j] >= 0 &&
                  g->values[nx->outputs[j]].dims[axis] * nx->n_outputs == x->dims[axis];
        if (equal) stride = nx->n_outputs;
      }
      st = seed(p, n, wid, ndim, ax, stride);
      int32_t bias = st == SC_OK && p->training ? column_bias(p, off, users, n, w->dims[ndim]) : -1;
      if (bias >= 0 && sc_graph_sharding(g, wid)) st = seed(p, n, bias, 0, ax, stride);
    }
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

/* Whether a vocabulary-parallel lookup reads a table of dims [rows,
 * cols] that is split on its rows over axis ax. */
static bool split_table(const sc_graph *g, int32_t ax, const int64_t *dims) {
  for (int32_t nid = 0; nid < g->n_nodes; nid++) {
    const sc_node *n = &g->nodes[nid];
    if ((n->flags & SC_NODE_DEAD) || n->op != SC_OP_GATHER || n->n_inputs != 2) continue;
    const sc_value *w = &g->values[n->inputs[0]];
    const sc_sharding *s = sc_graph_sharding(g, n->inputs[0]);
    if (s && w->rank == 2 && w->dims[0] == dims[0] && w->dims[1] == dims[1] &&
        s->n_dim_axes[0] == 1 && s->dim_axes[0][0] == ax && !s->n_dim_axes[1])
      return true;
  }
  return false;
}

/* The gradients of the lookups of a training step's vocabulary-parallel
 * tables (grad_rules.c, sc_grad_gather: ScatterND, reduction add, into
 * zeros of the table's shape: a constant, or an Expand of a zero scalar
 * where folding left it) get the node attribute `__rows_axis` = ax: their
 * rule then splits the zeros like the table and each rank adds the rows it
 * holds (shard_rules.c, masked_scatter), rather than computing the whole
 * table, pending over tp under sequence parallelism and reduce-scattered
 * each microbatch. */
static sc_status mark_lookup_grads(sc_partition *p, int32_t ax) {
  sc_graph *g = p->global;
  for (int32_t nid = 0; nid < g->n_nodes; nid++) {
    const sc_node *n = &g->nodes[nid];
    if ((n->flags & SC_NODE_DEAD) || n->op != SC_OP_SCATTER_ND || n->n_inputs != 3 ||
        n->inputs[0] < 0 || strcmp(sc_attr_string(g, n, "reduction", "none"), "add") != 0)
      continue;
    const sc_value *v = &g->values[n->inputs[0]];
    if (v->rank != 2 || !split_table(g, ax, v->dims)) continue;
    /* zeros: a constant, or an Expand of a zero scalar */
    const sc_node *e = v->producer >= 0 ? &g->nodes[v->producer] : NULL;
    int32_t z = !e ? n->inputs[0] : e->op == SC_OP_EXPAND && e->n_inputs == 2 ? e->inputs[0] : -1;
    if (z < 0 || (e && g->values[z].rank != 0) || !sc_value_zeros(&g->values[z])) continue;
    sc_attr *a = sc_node_add_attr(g, nid, "__rows_axis", SC_ATTR_INT);
    if (!a) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    a->i = ax;
  }
  return SC_OK;
}

static sc_status apply_overrides(sc_graph *g, const sc_plan *plan) {
  const sc_mesh *m = sc_graph_mesh(g);
  for (int32_t i = 0; i < plan->n_overrides; i++) {
    const sc_plan_override *o = &plan->overrides[i];
    int32_t id = sc_graph_find_value(g, o->name);
    if (id < 0 && sc_graph_was_specialised(g, o->name)) continue; /* given, folded away */
    if (id < 0)
      return sc_graph_error(g, SC_ERR_INVALID, "plan override: no initializer '%s'", o->name);
    if (g->values[id].flags & SC_VALUE_SPECIALISED) continue; /* a constant: replicated */
    sc_sharding s;
    sc_status st = sc_sharding_parse(o->sharding, strlen(o->sharding), m,
                                     g->values[id].rank, &s, &g->diag);
    if (st != SC_OK) return st;
    if ((st = sc_graph_set_sharding(g, id, &s)) != SC_OK) return st;
  }
  return SC_OK;
}

sc_status sc_partition_seed_tp(sc_partition *p, const sc_plan *plan) {
  sc_graph *g = p->global;
  const sc_mesh *m = sc_graph_mesh(g);
  if (!m) return SC_OK;
  if (p->tp_axis >= 0) {
    int32_t ax = p->tp_axis; /* resolved once, in sc_partition_run */
    if (m->axes[ax].size > 1) {
      int32_t *off = NULL, *users = NULL;
      sc_status st = sc_graph_users(g, &off, &users);
      if (st != SC_OK) return st;
      st = seed_patterns(p, plan, ax, off, users);
      if (st == SC_OK && p->training && plan->vocab_parallel) st = mark_lookup_grads(p, ax);
      sc_free(off);
      sc_free(users);
      if (st != SC_OK) return st;
    }
  }
  return apply_overrides(g, plan);
}
