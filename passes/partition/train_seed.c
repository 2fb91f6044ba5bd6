/* train_seed.c — the seeds of a training step (partition.h): data
 * parallelism and ZeRO/FSDP sharding as shardings of the step's inputs,
 * gradients and state outputs, so that localize inserts every collective.
 *
 * A training step (passes/train.h) has data inputs (the batch, labels),
 * scalar inputs "train:*", and state inputs X (parameters, optimizer state
 * "P.exp_avg" ..., accumulators "accum:P"), each with its output "new:X";
 * the gradient of parameter P is the value "grad:P". With the plan's data
 * axes D (dp and fsdp, mesh order, then ep: sc_partition_data_axes) and its
 * fsdp axis F of size S:
 *   data        dim 0 split over D; a batch that does not divide is an
 *               error naming the batches that do (a symbolic one, or when
 *               no data input divides); a fixed dim 0 beside a split batch
 *               stays whole: a fallback, still correct;
 *   base(P)     P's sharding from the tensor-parallel and expert-parallel
 *               seeds (ep.c: an expert parameter's dim 0 over ep), or
 *               replicated;
 *   shard(P)    base(P) plus F on the first dim whose piece divides by S,
 *               dim 0 first (FSDP2's dim-0 chunks); under fsdp x ep, for a
 *               P ep does not split (outside the experts) and no pipeline,
 *               F then ep on the first unstrided dim whose piece divides by
 *               S x ep, if any: the storage group over every data axis but
 *               dp, as DeepSpeed-MoE and Megatron shard such parameters
 *               (its gradient's reduce-scatter over both axes replaces the
 *               all-reduce over ep); a parameter with no such
 *               dim keeps base(P), recorded as a fallback, except under
 *               ZeRO >= 1, where flat.c views it flat and its state (and the
 *               gradient's view) takes the flat view's sharding (ZeRO-3,
 *               unpipelined, P not split otherwise: P itself is stored
 *               as its flat view, so takes it too);
 *   P           shard(P) under ZeRO-3, else base(P);
 *   P's state   shard(P) under ZeRO >= 1 (accumulators: ZeRO >= 2, and
 *               not summed once a step, below);
 *   grad:P      a constraint (localize reshards the value to it as soon as
 *               it is computed): shard(P) under ZeRO >= 1 — a reduce-scatter
 *               over F, then an all-reduce over dp of the shard (HSDP) —
 *               else base(P): an all-reduce over D (DDP); over D less
 *               the axes that split base(P) (an expert parameter's
 *               gradient is whole over ep: each rank's experts saw every
 *               rank's tokens);
 *   accumulated a step of several microbatches (state "accum:P"):
 *               pipelined, without ZeRO on P; unpipelined (--grad-accum),
 *               unless ZeRO-3 shards P (once_a_step): grad:P, accum:P and
 *               new:accum:P are base(P) pending over D, so each rank sums
 *               its microbatches' gradients unreduced and the sum is
 *               reduced once (Megatron's accumulation, DDP's no_sync), not
 *               once a microbatch: in a pipeline where the norm piece first
 *               reads it; without one the mean Mul(new:accum:P, 1/K)
 *               takes grad:P's constraint, so it is all-reduced (ZeRO-1/2:
 *               reduce-scattered) as soon as it is made, in the backward of
 *               the step's last run, the only run that runs it (the others
 *               skip what only the update needs: sc_session_set_partial);
 *   new:X       a constraint and the output's sharding: X's.
 * Parameters stored split over F are gathered before each forward and
 * backward use (localize.c, "storage axis"); the update reads them, their
 * gradient shards and their state piece by piece. */
#include <stdio.h>
#include <string.h>

#include "partition.h"

static int32_t value_named(const sc_graph *g, const char *prefix, const char *name) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "%s%s", prefix, name);
  return w > 0 && (size_t)w < sizeof buf ? sc_graph_find_value(g, buf) : -1;
}

bool sc_partition_is_training(const sc_graph *g) {
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const char *n = g->values[g->outputs[i]].name;
    if (n && strcmp(n, "train:applied") == 0) return true;
  }
  return false;
}

/* The output "new:<name of input id>", or -1: id is not state. */
static int32_t new_of(const sc_graph *g, int32_t id) {
  const char *name = g->values[id].name;
  int32_t o = name ? value_named(g, "new:", name) : -1;
  return o >= 0 && (g->values[o].flags & SC_VALUE_OUTPUT) ? o : -1;
}

static bool is_scalar_input(const sc_value *v) {
  return v->name && strncmp(v->name, "train:", 6) == 0;
}

static sc_status nomem(sc_graph *g) { return sc_graph_error(g, SC_ERR_NOMEM, "out of memory"); }

int32_t sc_partition_data_axes(const sc_partition *p, int32_t *axes) {
  int32_t n = 0;
  for (int32_t a = 0; a < p->mesh.n_axes; a++)
    if ((a == p->dp_axis || a == p->fsdp_axis) && p->mesh.axes[a].size > 1) axes[n++] = a;
  if (p->ep_axis >= 0 && p->mesh.axes[p->ep_axis].size > 1) axes[n++] = p->ep_axis;
  return n;
}

sc_status sc_partition_seed_train_data(sc_partition *p) {
  sc_graph *g = p->global;
  int32_t axes[SC_MESH_MAX_AXES], n_axes = sc_partition_data_axes(p, axes);
  int64_t parts = 1;
  for (int32_t k = 0; k < n_axes; k++) parts *= p->mesh.axes[axes[k]].size;
  if (parts == 1) return SC_OK;
  const sc_value *whole = NULL; /* the first data input left whole */
  int32_t n_split = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t id = g->inputs[i];
    const sc_value *v = &g->values[id];
    if (v->rank < 1 || is_scalar_input(v) || new_of(g, id) >= 0) continue;
    if (v->dims[0] <= 0 || v->dims[0] % parts != 0) {
      if (v->dim_param && v->dim_param[0])
        return sc_partition_batch_error(p, v, axes, n_axes, parts);
      if (!whole) whole = v;
      if (sc_partition_note_fallback(p, v->name, "input",
                                     "the batch (dim 0, %lld) does not divide by the %lld "
                                     "data-parallel ranks: not split",
                                     (long long)v->dims[0], (long long)parts) != SC_OK)
        return nomem(g);
      continue;
    }
    sc_sharding s;
    sc_sharding_replicated(&s, v->rank);
    for (int32_t k = 0; k < n_axes; k++) sc_sharding_split(&s, 0, axes[k]);
    sc_status st = sc_graph_set_sharding(g, id, &s);
    if (st != SC_OK) return st;
    n_split++;
  }
  /* Data-parallel ranks that all see the whole batch would average one
   * gradient with itself: the mesh would be printed but not used. */
  if (!n_split && whole) return sc_partition_batch_error(p, whole, axes, n_axes, parts);
  return SC_OK;
}

const char *sc_partition_param_of(const sc_partition *p, const char *name) {
  const sc_train_info *t = p->train;
  if (!t || !name) return NULL;
  if (strncmp(name, "accum:", 6) == 0) name += 6;
  const sc_name_index *ix = &p->param_names;
  if (t->n_params > 0 && ix->n == t->n_params) {
    /* the parameter itself, else the longest "P" before a '.' of name */
    int32_t k = name[0] ? sc_name_index_find(ix, name) : -1;
    for (size_t n = strlen(name); k < 0 && n > 1; n--)
      if (name[n - 1] == '.') k = sc_name_index_find_n(ix, name, n - 1);
    return k >= 0 ? t->params[k].name : NULL;
  }
  const char *best = NULL;
  size_t best_len = 0;
  for (int32_t k = 0; k < t->n_params; k++) {
    const char *q = t->params[k].name;
    size_t n = q ? strlen(q) : 0;
    if (!n || strncmp(name, q, n) != 0 || (name[n] && name[n] != '.')) continue;
    if (!name[n]) return q; /* the parameter itself */
    if (n > best_len) best = q, best_len = n; /* its state "P.exp_avg" */
  }
  return best;
}

/* The parameter input of state input `name`, or -1. */
static int32_t param_of(const sc_partition *p, const char *name) {
  const char *q = sc_partition_param_of(p, name);
  return q ? sc_graph_find_value(p->global, q) : -1;
}

/* The ep axis when P's storage group takes it beside fsdp, else -1: a
 * parameter ep does not split (outside the experts: ep is one more data
 * axis for it), unpipelined (a pipeline's remote accumulators drop the
 * fsdp split alone, pipe_train.c). */
static int32_t storage_ep(const sc_partition *p, const sc_sharding *base) {
  int32_t ep = p->ep_axis;
  if (ep < 0 || p->mesh.axes[ep].size == 1 || p->n_chunks > 0) return -1;
  return sc_sharding_dim_axes(base) & (1u << ep) ? -1 : ep;
}

/* shard(P): base plus the storage group on the first dim (0 first, strided
 * dims last) whose piece divides; false when none does. The storage group
 * is fsdp, and ep after it (innermost) for a parameter outside the experts
 * (storage_ep) on an unstrided dim whose piece divides by both: such a
 * parameter is stored over every data-parallel rank but dp's, as
 * DeepSpeed-MoE and Megatron shard it; else fsdp alone. */
static bool fsdp_sharding(const sc_partition *p, const sc_value *v, const sc_sharding *base,
                          sc_sharding *out) {
  *out = *base;
  if (p->fsdp_axis < 0 || p->mesh.axes[p->fsdp_axis].size == 1) return false;
  int64_t S = p->mesh.axes[p->fsdp_axis].size;
  int32_t ep = storage_ep(p, base);
  for (int32_t d = 0; ep >= 0 && d < v->rank; d++) {
    int64_t piece = v->dims[d] / sc_sharding_dim_parts(base, &p->mesh, d);
    if (sc_sharding_stride(base, d) > 1 || base->n_dim_axes[d] + 2 > SC_MESH_MAX_AXES ||
        piece <= 0 || piece % (S * p->mesh.axes[ep].size) != 0)
      continue;
    sc_sharding_split(out, d, p->fsdp_axis);
    sc_sharding_split(out, d, ep);
    return true;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int32_t d = 0; d < v->rank; d++) {
      bool strided = sc_sharding_stride(base, d) > 1;
      if (strided != (pass == 1) || base->n_dim_axes[d] >= SC_MESH_MAX_AXES) continue;
      int64_t piece = v->dims[d] / sc_sharding_dim_parts(base, &p->mesh, d);
      if (piece <= 0 || piece % (S * sc_sharding_stride(base, d)) != 0) continue;
      sc_sharding_split(out, d, p->fsdp_axis);
      return true;
    }
  return false;
}

/* base pending over the data axes that do not split it (an expert
 * parameter's ep splits its dim 0: its gradient is whole over ep): a
 * gradient or its accumulator that each rank sums unreduced over the step's
 * microbatches; the first reader that needs the sum whole (the gradient
 * norm, the update: once per step) reduces it. */
static void pending_over_data(const sc_partition *p, const sc_sharding *base,
                              sc_sharding *out) {
  int32_t axes[SC_MESH_MAX_AXES], n = sc_partition_data_axes(p, axes);
  *out = *base;
  for (int32_t k = 0; k < n; k++)
    if (!(sc_sharding_dim_axes(base) & (1u << axes[k])))
      out->partial |= (sc_axes)(1u << axes[k]);
}

const char *sc_partition_accum_mean_of(const sc_graph *g, int32_t v) {
  int32_t pid = v >= 0 && v < g->n_values ? g->values[v].producer : -1;
  const sc_node *n = pid >= 0 ? &g->nodes[pid] : NULL;
  if (!n || (n->flags & SC_NODE_DEAD) || n->op != SC_OP_MUL || n->n_inputs != 2 ||
      n->inputs[0] < 0 || n->inputs[1] < 0 || g->values[n->inputs[1]].rank != 0)
    return NULL;
  const char *acc = g->values[n->inputs[0]].name;
  return acc && strncmp(acc, "new:accum:", 10) == 0 ? acc + 10 : NULL;
}

/* mean[P] (g->n_values entries): the mean over accumulated microbatches
 * of parameter value P's gradient (sc_partition_accum_mean_of), or -1;
 * one pass over the values for every parameter. */
static void accum_means(const sc_graph *g, int32_t *mean) {
  for (int32_t v = 0; v < g->n_values; v++) mean[v] = -1;
  for (int32_t v = 0; v < g->n_values; v++) {
    const char *name = sc_partition_accum_mean_of(g, v);
    int32_t pv = name ? sc_graph_find_value(g, name) : -1;
    if (pv >= 0) mean[pv] = v;
  }
}

/* Whether a parameter's accumulated gradient is summed unreduced over the
 * step's microbatches and reduced once (split: its dims shard over fsdp):
 * in a pipeline unless ZeRO shards its gradient; without one unless
 * ZeRO-3 does (FSDP reduce-scatters every microbatch into the sharded
 * sum: each run's gradient is sharded, its parameter gathered anyway). */
static bool once_a_step(const sc_partition *p, bool split, int32_t zero) {
  return !(split && zero >= (p->n_chunks > 0 ? 1 : 3));
}

/* Without a pipeline, each accumulation reduced once a step (once[v]:
 * parameter value v's; its Add into "new:accum:P" and the mean's Mul, which
 * passes/train.c appends after the norm's sums) moves right after the node
 * that made what it reads, into the backward: the mean, constrained like
 * the gradient, is then reduced there, bucketed, so the last run's
 * reductions start while its backward runs, as DDP's buckets do. The others
 * (ZeRO-3's, reduce-scattered every run) stay after the backward, where
 * nothing reads a bucket's member before its last: moved, each would be
 * reduced alone. */
static sc_status place_accumulation(sc_graph *g, const bool *once, const int32_t *mean_of) {
  int32_t total = g->n_nodes;
  int32_t *key = sc_malloc(((size_t)total + 1) * sizeof *key);
  bool *moves = sc_calloc((size_t)total + 1, sizeof *moves);
  if (!key || !moves) {
    sc_free(key);
    sc_free(moves);
    return nomem(g);
  }
  for (int32_t pv = 0; pv < g->n_values; pv++) {
    int32_t v = mean_of[pv];
    if (v < 0 || !once[pv]) continue;
    const sc_node *mean = &g->nodes[g->values[v].producer];
    moves[g->values[v].producer] = true;
    int32_t acc = g->values[mean->inputs[0]].producer; /* the Add into "new:accum:P" */
    if (acc >= 0) moves[acc] = true;
  }
  for (int32_t i = 0; i < total; i++) {
    const sc_node *n = &g->nodes[i];
    key[i] = 2 * i + 1;
    if (!moves[i]) continue;
    int32_t after = 0; /* the latest producer of its inputs, in the new order */
    for (int32_t k = 0; k < n->n_inputs; k++) {
      int32_t pr = n->inputs[k] >= 0 ? g->values[n->inputs[k]].producer : -1;
      if (pr >= 0 && key[pr] > after) after = key[pr];
    }
    key[i] = after;
  }
  sc_status st = sc_graph_order_nodes(g, key);
  sc_free(key);
  sc_free(moves);
  return st;
}

/* [g->n_nodes]: whether a node feeds the loss (g in topological order),
 * or NULL out of memory. */
static bool *loss_nodes(const sc_graph *g) {
  bool *need = sc_calloc((size_t)g->n_values + 1, sizeof *need);
  bool *fwd = sc_calloc((size_t)g->n_nodes + 1, sizeof *fwd);
  if (!need || !fwd) {
    sc_free(need);
    sc_free(fwd);
    return NULL;
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const char *n = g->values[g->outputs[i]].name;
    if (n && strcmp(n, "loss") == 0) need[g->outputs[i]] = true;
  }
  for (int32_t nid = g->n_nodes - 1; nid >= 0; nid--) {
    const sc_node *n = &g->nodes[nid];
    if (n->flags & SC_NODE_DEAD) continue;
    for (int32_t j = 0; j < n->n_outputs; j++)
      if (n->outputs[j] >= 0 && need[n->outputs[j]]) fwd[nid] = true;
    for (int32_t k = 0; fwd[nid] && k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) need[n->inputs[k]] = true;
  }
  sc_free(need);
  return fwd;
}

sc_status sc_partition_seed_train_state(sc_partition *p) {
  sc_graph *g = p->global;
  int32_t zero = p->zero_stage;
  bool fsdp = p->fsdp_axis >= 0 && p->mesh.axes[p->fsdp_axis].size > 1;
  /* the parameters' shardings first: the seeds so far are tensor parallel */
  int32_t n_in = g->n_inputs;
  sc_sharding *base = sc_calloc((size_t)n_in + 1, sizeof *base);
  sc_sharding *shard = sc_calloc((size_t)n_in + 1, sizeof *shard);
  bool *split = sc_calloc((size_t)n_in + 1, sizeof *split);
  bool *flat = sc_calloc((size_t)n_in + 1, sizeof *flat); /* flat.c's view */
  bool *once = sc_calloc((size_t)g->n_values + 1, sizeof *once); /* a parameter's
                                                 accumulation reduced once */
  bool any_flat = false;
  sc_flat_order order = {0};
  /* ZeRO-3 resharding after the forward: the flat parameters' backward
   * readers read their own copy (flat.c) */
  bool *forward = fsdp && zero == 3 && !p->keep_after_forward ? loss_nodes(g) : NULL;
  int32_t n_forward = g->n_nodes; /* the nodes forward[] covers: flat.c adds more */
  sc_status st = base && shard && split && flat && once &&
                         (forward || !fsdp || zero != 3 || p->keep_after_forward)
                     ? SC_OK
                     : nomem(g);
  for (int32_t i = 0; st == SC_OK && i < n_in; i++) {
    int32_t id = g->inputs[i];
    const sc_value *v = &g->values[id];
    const sc_sharding *seed = sc_graph_sharding(g, id);
    if (seed) base[i] = *seed;
    else sc_sharding_replicated(&base[i], v->rank);
    if (new_of(g, id) < 0 || param_of(p, v->name) != id) continue;
    split[i] = fsdp && fsdp_sharding(p, v, &base[i], &shard[i]);
    if (fsdp && !split[i] && zero >= 1) {
      st = sc_partition_flatten_param(p, id, &base[i], forward, n_forward, &shard[i],
                                      &order, &flat[i]);
      if (st != SC_OK) break;
      any_flat |= flat[i];
    }
    if (fsdp && !split[i] && !flat[i] &&
        sc_partition_note_fallback(p, v->name, "input",
                                   "no dim divides by %s=%lld: the parameter and its state "
                                   "are not sharded",
                                   p->mesh.axes[p->fsdp_axis].name,
                                   (long long)p->mesh.axes[p->fsdp_axis].size) != SC_OK)
      st = nomem(g);
  }
  if (st == SC_OK && any_flat) st = sc_partition_flat_order(g, &order);
  sc_free(order.node);
  sc_free(order.after);
  sc_free(forward);
  /* without a pipeline: each parameter's accumulated mean (flat.c's values
   * added above included) */
  int32_t *mean_of = NULL;
  if (st == SC_OK && p->n_chunks == 0) {
    mean_of = sc_malloc(((size_t)g->n_values + 1) * sizeof *mean_of);
    if (mean_of) accum_means(g, mean_of);
    else st = nomem(g);
  }
  for (int32_t i = 0; st == SC_OK && i < n_in; i++) {
    int32_t id = g->inputs[i], out = new_of(g, id);
    if (out < 0) continue;
    const char *name = g->values[id].name;
    int32_t pid = param_of(p, name), k = -1;
    for (int32_t j = 0; pid >= 0 && j < n_in; j++)
      if (g->inputs[j] == pid) k = j;
    if (k < 0) continue; /* state of no parameter input: left as seeded */
    bool accum = strncmp(name, "accum:", 6) == 0;
    int32_t need = pid == id ? 3 : accum ? 2 : 1;
    const sc_sharding *s = split[k] && zero >= need ? &shard[k] : &base[k];
    if (flat[k] && (pid != id || zero == 3) && !accum) s = &shard[k]; /* the flat state */
    sc_sharding pending;
    if (accum && once_a_step(p, split[k], zero)) {
      pending_over_data(p, &base[k], &pending);
      s = &pending;
    }
    if ((st = sc_graph_set_sharding(g, id, s)) != SC_OK ||
        (st = sc_graph_set_sharding(g, out, s)) != SC_OK)
      break;
    if (pid != id) continue;
    int32_t grad = value_named(g, "grad:", name);
    /* a flat view's gradient: its view "grad:P.flat" carries the constraint */
    if (grad < 0 || (flat[k] && value_named(g, "accum:", name) < 0)) continue;
    s = split[k] && zero >= 1 ? &shard[k] : &base[k];
    if (value_named(g, "accum:", name) >= 0 && once_a_step(p, split[k], zero)) {
      once[id] = true;
      /* without a pipeline the mean is reduced (reduce-scattered under
       * ZeRO-1/2) as soon as it is made: in the backward, bucketed
       * (bucket.c), in the step's last run only */
      int32_t mean = mean_of ? mean_of[id] : -1;
      if (mean >= 0 && (st = sc_graph_set_sharding(g, mean, s)) != SC_OK) break;
      pending_over_data(p, &base[k], &pending);
      s = &pending;
    }
    st = sc_graph_set_sharding(g, grad, s);
  }
  if (st == SC_OK && mean_of) st = place_accumulation(g, once, mean_of);
  sc_free(base);
  sc_free(shard);
  sc_free(split);
  sc_free(flat);
  sc_free(once);
  sc_free(mean_of);
  return st;
}
