/* scatter_sum.c — the scatter-sum pass: a sum of a scatter-add into zeros
 * and another tensor scatters into that tensor.
 *
 *   y = Add(x, ScatterND(Z, I, U, reduction "add"))    (either order)
 *   →  y = ScatterND(x, I, U, reduction "add")
 *
 * where Z is zeros (a constant whose bytes are all zero, Expand or
 * ConstantOfShape of one, or one times a finite scalar constant, as the
 * partitioner makes a replicated value part of a pending sum), x has y's shape and dtype (no broadcast), and
 * the scatter's output reaches the Add alone, directly or through
 * Identity nodes each read once (no value of the chain a graph output).
 * The gradient of an embedding (Gather) is such a scatter
 * (grad_rules.c, sc_grad_gather), and the step adds it to something else
 * whole: the accumulated gradient of the earlier microbatches
 * (new:accum:P = Add(accum:P, grad:P), passes/train.c), or a tied LM
 * head's product gradient. Written out, that is three passes over the
 * table (the zeros, the scatter's copy of them, the sum) for a scatter of
 * a microbatch's few rows; rewritten, the SCATTER_ADD step (lower_shape.c)
 * adds the rows into x, in x's own storage when x dies there
 * (codegen/memplan.c: a state pair such as accum:P and new:accum:P shares
 * one slot, and a scatter's output may take its data's), where both
 * runtimes skip the copy. On gpt_1p5b (vocabulary 50,257 x 1,600 in f32,
 * 321 MB) that was 0.72 ms of the first pipeline rank's backward per
 * microbatch on an H100.
 *
 * x must be read by the Add alone, so that adding in x's storage (the
 * state pair's slot, where nothing orders another reader of x before the
 * scatter) changes nothing another node reads. The sum's rounding order
 * changes: x + (0 + u1 + u2) becomes (x + u1) + u2.
 *
 * The scatter, the Identity chain and the zeros' producers that fed only
 * them are removed (SC_NODE_DEAD, then sc_graph_compact). */
#include <math.h>
#include <string.h>

#include "ir/sharding.h"
#include "passes/pass.h"

/* Whether value id v is a constant scalar with a finite value (the
 * partitioner's "one" of a pending sum: 1 on one rank, 0 on the others,
 * passes/partition/localize.c). */
static bool finite_scalar(sc_graph *g, int32_t v) {
  if (v < 0) return false;
  const sc_value *x = &g->values[v];
  if (!sc_value_is_const(x) || x->producer >= 0 || sc_value_numel(x) != 1 ||
      !sc_dtype_is_float(x->dtype))
    return false;
  if (x->data) return isfinite(sc_load_f64(x->dtype, x->data, 0));
  /* a rank's share of a pending scalar: its data is bound per rank */
  const sc_sharding *s = sc_graph_sharding(g, v);
  return s && s->partial && (x->flags & SC_VALUE_PARAM) && x->name &&
         strncmp(x->name, "one", 3) == 0;
}

/* Whether value id v is zeros: a zero constant, or Expand / ConstantOfShape
 * of zeros. */
static bool zeros(sc_graph *g, int32_t v) {
  for (int depth = 0; v >= 0 && depth < 8; depth++) {
    const sc_value *x = &g->values[v];
    if (sc_value_zeros(x)) return true;
    if (x->producer < 0) return false;
    const sc_node *n = &g->nodes[x->producer];
    if (n->flags & SC_NODE_DEAD) return false;
    if (n->op == SC_OP_CONSTANT_OF_SHAPE) {
      const sc_attr *a = sc_node_attr(n, "value");
      if (!a) return true; /* the default: a float 0 */
      return a->kind == SC_ATTR_TENSOR && a->t && a->t->data &&
             sc_bytes_zero(a->t->data, a->t->data_bytes);
    }
    if (n->op == SC_OP_MUL && n->n_inputs == 2) { /* zeros times a finite scalar */
      int32_t k = finite_scalar(g, n->inputs[1]) ? 0 : finite_scalar(g, n->inputs[0]) ? 1 : -1;
      if (k < 0) return false;
      v = n->inputs[k];
      continue;
    }
    if (n->op != SC_OP_EXPAND || n->n_inputs < 1) return false;
    v = n->inputs[0];
  }
  return false;
}

static bool is_output(const sc_graph *g, int32_t v) {
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  return false;
}

/* How many reads of value v (uoff: sc_graph_users). */
static int32_t n_users(const int32_t *uoff, int32_t v) { return uoff[v + 1] - uoff[v]; }

/* The ScatterND (reduction add, into zeros) whose output reaches value v
 * through Identity nodes read once each, or -1. */
static int32_t scatter_behind(sc_graph *g, const int32_t *uoff, int32_t v) {
  for (int depth = 0; v >= 0 && depth < 16; depth++) {
    if (n_users(uoff, v) != 1 || is_output(g, v)) return -1;
    int32_t p = g->values[v].producer;
    if (p < 0) return -1;
    const sc_node *n = &g->nodes[p];
    if (n->flags & SC_NODE_DEAD) return -1;
    if (n->op == SC_OP_IDENTITY && n->n_inputs == 1) {
      v = n->inputs[0];
      continue;
    }
    if (n->op != SC_OP_SCATTER_ND || n->n_inputs != 3 || n->n_outputs != 1) return -1;
    const sc_attr *r = sc_node_attr(n, "reduction");
    if (!r || r->kind != SC_ATTR_STRING || !r->s || strcmp(r->s, "add") != 0) return -1;
    return zeros(g, n->inputs[0]) ? p : -1;
  }
  return -1;
}

static bool same_shape(const sc_value *a, const sc_value *b) {
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) == 0;
}

/* Removes value v's producer once nothing reads v (readers[]: live
 * readers per value), and so on up its inputs: the Identity chain, the
 * scatter, the zeros' Expand. Stops at inputs, outputs and values another
 * node still reads. */
static void kill_chain(sc_graph *g, int32_t *readers, int32_t v, int depth) {
  if (v < 0 || depth > 32 || readers[v] > 0 || is_output(g, v) ||
      (g->values[v].flags & SC_VALUE_INPUT))
    return;
  int32_t p = g->values[v].producer;
  if (p < 0) { /* a constant nothing reads any more */
    if (sc_value_is_const(&g->values[v])) g->values[v].flags |= SC_VALUE_DEAD;
    return;
  }
  sc_node *n = &g->nodes[p];
  if (n->flags & SC_NODE_DEAD) return;
  for (int32_t j = 0; j < n->n_outputs; j++)
    if (n->outputs[j] >= 0 && (readers[n->outputs[j]] > 0 || is_output(g, n->outputs[j])))
      return;
  n->flags |= SC_NODE_DEAD;
  for (int32_t j = 0; j < n->n_outputs; j++)
    if (n->outputs[j] >= 0) g->values[n->outputs[j]].flags |= SC_VALUE_DEAD;
  for (int32_t j = 0; j < n->n_inputs; j++)
    if (n->inputs[j] >= 0 && --readers[n->inputs[j]] == 0)
      kill_chain(g, readers, n->inputs[j], depth + 1);
}

sc_status sc_pass_scatter_sum(sc_graph *g, const sc_pass_opts *opts) {
  (void)opts;
  int32_t *uoff = NULL, *users = NULL;
  if (sc_graph_users(g, &uoff, &users) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  int32_t *readers = sc_malloc(((size_t)g->n_values + 1) * sizeof *readers);
  if (!readers) {
    sc_free(uoff);
    sc_free(users);
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }
  for (int32_t v = 0; v < g->n_values; v++) readers[v] = n_users(uoff, v);
  int32_t changed = 0;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < g->n_nodes && st == SC_OK; i++) {
    sc_node *add = &g->nodes[i];
    if ((add->flags & SC_NODE_DEAD) || add->op != SC_OP_ADD || add->n_inputs != 2 ||
        add->n_outputs != 1 || add->outputs[0] < 0)
      continue;
    for (int32_t side = 0; side < 2; side++) {
      int32_t s = add->inputs[side], x = add->inputs[1 - side];
      if (s < 0 || x < 0 || s == x) continue;
      int32_t sc = scatter_behind(g, uoff, s);
      if (sc < 0 || n_users(uoff, x) != 1 || is_output(g, x) ||
          !same_shape(&g->values[x], &g->values[add->outputs[0]]) ||
          !same_shape(&g->values[s], &g->values[add->outputs[0]]))
        continue;
      const sc_node *scat = &g->nodes[sc];
      int32_t *in = sc_arena_array(&g->arena, 3, sizeof *in);
      sc_attr *r = in ? sc_node_add_attr(g, i, "reduction", SC_ATTR_STRING) : NULL;
      if (!r) {
        st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
        break;
      }
      add = &g->nodes[i]; /* adding an attribute does not move nodes; read again anyway */
      r->s = sc_node_attr(scat, "reduction")->s;
      in[0] = x;
      in[1] = scat->inputs[1];
      in[2] = scat->inputs[2];
      add->op = SC_OP_SCATTER_ND;
      add->inputs = in;
      add->n_inputs = 3;
      /* the scatter's index and update inputs gain a reader (this node)
       * before the chain behind s loses its own */
      readers[in[1]]++;
      readers[in[2]]++;
      readers[s]--;
      kill_chain(g, readers, s, 0);
      changed++;
      break;
    }
  }
  sc_free(uoff);
  sc_free(users);
  sc_free(readers);
  if (st != SC_OK || !changed) return st;
  return sc_graph_compact(g);
}
