/* flat.c — ZeRO-1/2/3 over a flat shard (partition.h): the optimizer of a
 * parameter none of whose dims the fsdp degree S divides runs on the
 * parameter flattened, as Megatron's distributed optimizer shards its flat
 * gradient buffer rather than a dim.
 *
 * Under --zero 1 and 2 the parameter stays replicated (over fsdp) and its
 * optimizer state is sharded. A parameter with a dim whose piece divides by
 * S is sharded on that dim (train_seed.c); one without is rewritten here,
 * before the seeds of the state, so that the seeds and localize do the rest:
 *
 *   flat(X)  the flat view of a value X of P's shape: X's elements in
 *            row-major order, padded with zeros to m_pad (the next multiple
 *            of S), as [S, m_pad/S]: rank r's piece is row r (the update's
 *            local slice of the replicated parameter then indexes S rows,
 *            not m_pad elements). A parameter split over other axes on one
 *            dim d into T pieces (tensor parallelism: base(P)) is viewed per
 *            piece, [S, m_pad/S, T] with dim 2 split as d was: Reshape(X,
 *            [.., T, D_d/T, ..]), Transpose (T last), Reshape([m, T]), Pad,
 *            Reshape (m = numel/T); a strided split (s blocks: the fused
 *            QKV's 3*tp) block by block: a Split of d, each block viewed so,
 *            Concat;
 *   state    P's optimizer state inputs ("P.exp_avg", ...) have flat(P)'s
 *            shape, sharded on dim 0 over fsdp: 1/S of the padded size a rank;
 *   gradient the value the norm and the update read (grad:P, or its mean
 *            over accumulated microbatches) is read through flat(.), a
 *            value named "grad:P.flat" constrained to the state's sharding:
 *            its pending sum is reduce-scattered over fsdp (and all-reduced
 *            over dp: HSDP), one reduce-scatter per bucket (bucket.c);
 *   update   every node reading a flat value (the update's elementwise
 *            nodes, the norm's square) reads flat values instead: P through
 *            flat(P) (a local slice of the replicated parameter), the
 *            gradient through grad:P.flat; the norm's sum over all dims sums
 *            the flat shards (the padding adds zeros);
 *   new:P    the updated flat parameter, sliced back to m, reshaped (and
 *            transposed, concatenated) to P's shape: the Slice all-gathers
 *            it over fsdp.
 *
 * Under ZeRO-3 (unpipelined) P itself is stored flat: the input P becomes
 * [S, m_pad/S] (or [S, m_pad/S, T], dim 2 split as d was) with the state's
 * sharding (1/S of the padded size a rank), the update reads it as flat(P)
 * and new:P is the flat update itself (no gather after the update). The
 * forward's and the backward's readers read it back in its shape
 * (unflatten, right before the first reader): localize gathers the stored
 * flat P there; a narrowing Cast reader (mixed precision's bf16 copy) is
 * moved onto the flat P, so the bf16 shard is what is gathered; in pieces
 * the read-back's Reshapes and Transpose keep the other axes on d. Unless
 * --no-reshard-after-forward the backward's readers (those not feeding the
 * loss) read a second copy, gathered again in the backward; with it the
 * forward's copy is kept, one gather a step. The runtime maps the flat
 * P to its shape for the initial values, --init and checkpoints from the
 * manifest (sc_train_manifest_param.rank, dims; in pieces its split, which
 * the partition records: sc_partition_flat_split).
 *
 * Accumulators ("accum:P") are not rewritten: the flat view reads the
 * accumulated mean, so a pipelined step sums its microbatches' gradients
 * whole and unreduced and reduce-scatters once a step, as Megatron's
 * distributed optimizer (ZeRO-2's sharded accumulator is ZeRO-1's there).
 * A parameter that cannot be viewed so (several split dims, a stride over
 * 8, a pending sum in its seed, an update node that is not elementwise)
 * stays whole, as before, recorded as a fallback. */
#include <stdio.h>
#include <string.h>

#include "partition.h"
#include "passes/grad_rule.h"

typedef struct flat_view {
  int32_t rank;            /* P's */
  int64_t dims[SC_MAX_RANK];
  int32_t d;               /* the split dim, or -1 */
  int64_t T, s;            /* its pieces (1 when none), its stride (1: none) */
  int64_t m, m_pad, S;     /* elements a piece, padded to a multiple of S */
  int32_t frank;           /* 2: [S, m_pad/S]; 3: [S, m_pad/S, T] */
  int64_t fdims[3];
} flat_view;

static int32_t find(const sc_graph *g, const char *prefix, const char *name, const char *suffix) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "%s%s%s", prefix, name, suffix);
  return w > 0 && (size_t)w < sizeof buf ? sc_graph_find_value(g, buf) : -1;
}

/* The layout of P (dims, its seed base) over S fsdp ranks; false when P's
 * seed is not one split dim (strided or not) or none. */
static bool layout(const sc_partition *p, const sc_value *v, const sc_sharding *base, int64_t S,
                   flat_view *f) {
  memset(f, 0, sizeof *f);
  f->rank = v->rank;
  f->d = -1;
  f->T = f->s = 1;
  if (base->partial || v->rank < 1) return false;
  int64_t n = sc_value_numel(v);
  if (n <= 1) return false; /* a scalar: its update reads it as a broadcast */
  memcpy(f->dims, v->dims, (size_t)v->rank * sizeof *v->dims);
  for (int32_t d = 0; d < v->rank; d++) {
    if (!base->n_dim_axes[d]) continue;
    if (f->d >= 0) return false;
    f->d = d;
    f->T = sc_sharding_dim_parts(base, &p->mesh, d);
    f->s = sc_sharding_stride(base, d);
  }
  if (f->T < 1 || f->s > 8 || (f->d >= 0 && v->dims[f->d] % (f->T * f->s) != 0)) return false;
  f->m = n / f->T;
  f->m_pad = (f->m + S - 1) / S * S;
  f->S = S;
  f->frank = f->T > 1 ? 3 : 2;
  f->fdims[0] = S;
  f->fdims[1] = f->m_pad / S;
  f->fdims[2] = f->T;
  return true;
}

/* x (P's dims but D_d/s on d) split into T pieces on d, flattened per
 * piece: [m/s, T] (T = 1: [m/s]). */
static int32_t flatten_pieces(sc_grad_ctx *c, const flat_view *f, int32_t x) {
  int64_t dims[SC_MAX_RANK + 1], perm[SC_MAX_RANK + 1], rows = f->m / f->s;
  if (f->T == 1) return gb_reshape(c, x, 1, &rows);
  int32_t r = 0;
  for (int32_t k = 0; k < f->rank; k++) {
    if (k == f->d) dims[r++] = f->T;
    dims[r++] = k == f->d ? f->dims[k] / (f->T * f->s) : f->dims[k];
  }
  for (int32_t k = 0, q = 0; k < r; k++)
    if (k != f->d) perm[q++] = k;
  perm[r - 1] = f->d;
  x = gb_transpose(c, gb_reshape(c, x, r, dims), perm, r);
  int64_t shape[2] = {rows, f->T};
  return gb_reshape(c, x, 2, shape);
}

/* The inverse of flatten_pieces. */
static int32_t unflatten_pieces(sc_grad_ctx *c, const flat_view *f, int32_t y) {
  int64_t dims[SC_MAX_RANK + 1], perm[SC_MAX_RANK + 1], part[SC_MAX_RANK];
  memcpy(part, f->dims, sizeof part);
  if (f->d >= 0) part[f->d] /= f->s;
  if (f->T == 1) return gb_reshape(c, y, f->rank, part);
  int32_t r = 0;
  for (int32_t k = 0; k < f->rank; k++)
    dims[r++] = k == f->d ? f->dims[k] / (f->T * f->s) : f->dims[k];
  dims[r++] = f->T;
  for (int32_t k = 0, q = 0; k < r; k++) perm[k] = k == f->d ? r - 1 : q++;
  y = gb_transpose(c, gb_reshape(c, y, r, dims), perm, r);
  return gb_reshape(c, y, f->rank, part);
}

/* Split of x into f->s equal parts along axis into out[]; x itself when s
 * is 1. False on failure. */
static bool split_parts(sc_grad_ctx *c, const flat_view *f, int32_t x, int32_t axis,
                        int32_t *out) {
  if (f->s == 1 || x < 0) {
    out[0] = x;
    return x >= 0;
  }
  static const char *const names[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  int32_t node = gb_node(c, SC_OP_SPLIT, &x, 1, (int32_t)f->s, names, out);
  sc_attr *a = node < 0 ? NULL : sc_node_add_attr(c->g, node, "axis", SC_ATTR_INT);
  if (!a) return false;
  a->i = axis;
  return sc_ops[SC_OP_SPLIT].infer(c->g, &c->g->nodes[node]) == SC_OK;
}

/* flat(x): x (P's shape) viewed as the flat layout f: per stride block (a
 * Split of d), per piece, row-major; concatenated, padded, [S, m_pad/S(, T)]. */
static int32_t flatten(sc_grad_ctx *c, const flat_view *f, int32_t x) {
  int32_t part[8];
  if (!split_parts(c, f, x, f->d, part)) return -1;
  for (int64_t b = 0; b < f->s; b++)
    if ((part[b] = flatten_pieces(c, f, part[b])) < 0) return -1;
  x = f->s > 1 ? gb_op_i(c, SC_OP_CONCAT, part, (int32_t)f->s, "axis", 0) : part[0];
  if (f->m_pad != f->m && x >= 0) {
    int64_t pad = f->m_pad - f->m; /* begins, then ends: [0, pad] or [0, 0, pad, 0] */
    int64_t pads[4] = {0, f->T == 1 ? pad : 0, f->T == 1 ? 0 : pad, 0};
    int32_t pc = gb_ints(c, pads, f->T == 1 ? 2 : 4), pn = -1;
    int32_t out = pc < 0 ? -1 : gb_begin(c, SC_OP_PAD, (int32_t[]){x, pc}, 2, &pn);
    x = out < 0 ? -1 : gb_end(c, pn, out);
  }
  return gb_reshape(c, x, f->frank, f->fdims);
}

/* The inverse of flatten, from the flat value y to P's shape. */
static int32_t unflatten(sc_grad_ctx *c, const flat_view *f, int32_t y) {
  int64_t rows[2] = {f->m_pad, f->T};
  y = gb_reshape(c, y, f->T == 1 ? 1 : 2, rows);
  if (f->m_pad != f->m && y >= 0) {
    int64_t lo = 0, hi = f->m, axis = 0;
    y = gb_op(c, SC_OP_SLICE, (int32_t[]){y, gb_ints(c, &lo, 1), gb_ints(c, &hi, 1),
                                          gb_ints(c, &axis, 1)}, 4);
  }
  int32_t part[8];
  if (!split_parts(c, f, y, 0, part)) return -1;
  for (int64_t b = 0; b < f->s; b++)
    if ((part[b] = unflatten_pieces(c, f, part[b])) < 0) return -1;
  return f->s > 1 ? gb_op_i(c, SC_OP_CONCAT, part, (int32_t)f->s, "axis", f->d) : part[0];
}

/* Whether v (P's size) is computed by elementwise nodes from P and
 * scalars alone (the weight decay's P·(1 − lr·wd)): the flat update reads
 * a flat copy of that computation (flat_copy). */
static bool from_param(const sc_graph *g, int32_t v, int32_t param, int64_t n, int depth) {
  const sc_value *x = &g->values[v];
  if (depth > 4 || x->producer < 0 || sc_value_numel(x) != n) return false;
  const sc_node *nd = &g->nodes[x->producer];
  if ((nd->flags & SC_NODE_DEAD) || !(sc_ops[nd->op].flags & SC_OPF_ELEMENTWISE) ||
      nd->n_outputs != 1)
    return false;
  for (int32_t k = 0; k < nd->n_inputs; k++) {
    int32_t u = nd->inputs[k];
    if (u < 0 || u == param || sc_value_numel(&g->values[u]) == 1) continue;
    if (!from_param(g, u, param, n, depth + 1)) return false;
  }
  return true;
}

/* The flat copy of v (from_param): its nodes again on flat(P), fp. The
 * original node dies when nothing else reads it. */
static int32_t flat_copy(sc_grad_ctx *c, int32_t v, int32_t param, int32_t fp) {
  sc_graph *g = c->g;
  int32_t pn = g->values[v].producer, n_in = g->nodes[pn].n_inputs, in[8];
  if (n_in > 8) return -1;
  for (int32_t k = 0; k < n_in; k++) {
    int32_t u = g->nodes[pn].inputs[k];
    in[k] = u == param ? fp
            : u < 0 || sc_value_numel(&g->values[u]) == 1 ? u
                                                          : flat_copy(c, u, param, fp);
    if (u >= 0 && in[k] < 0) return -1;
  }
  int32_t node = -1, out = gb_begin(c, g->nodes[pn].op, in, n_in, &node);
  sc_node orig = g->nodes[pn]; /* a copy: adding the node may move the array */
  if (out < 0 || sc_node_copy_attrs(g, node, &orig) != SC_OK) return -1;
  return gb_end(c, node, out);
}

/* Marks dead the node making v (and v) when no live node reads v, and so
 * on up its inputs. */
static void drop_unread(sc_graph *g, int32_t v) {
  if (v < 0 || g->values[v].producer < 0 || (g->values[v].flags & SC_VALUE_OUTPUT)) return;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *nd = &g->nodes[i];
    if (nd->flags & SC_NODE_DEAD) continue;
    for (int32_t k = 0; k < nd->n_inputs; k++)
      if (nd->inputs[k] == v) return;
  }
  sc_node *pn = &g->nodes[g->values[v].producer];
  pn->flags |= SC_NODE_DEAD;
  for (int32_t k = 0; k < pn->n_inputs; k++)
    if (pn->inputs[k] >= 0 && g->values[pn->inputs[k]].producer >= 0 &&
        !(g->values[pn->inputs[k]].flags & SC_VALUE_INPUT))
      drop_unread(g, pn->inputs[k]);
  pn->n_inputs = 0; /* read nothing: sc_graph_toposort orders every node */
  g->values[v].flags |= SC_VALUE_DEAD;
  g->values[v].producer = -1;
}

/* The node making value from (one output) makes value to instead; from
 * dies. */
static sc_status take_output(sc_graph *g, int32_t from, int32_t to) {
  int32_t prod = g->values[from].producer;
  g->nodes[prod].outputs[0] = to;
  g->values[to].producer = prod;
  g->values[from].flags |= SC_VALUE_DEAD;
  g->values[from].producer = -1;
  return sc_ops[g->nodes[prod].op].infer(g, &g->nodes[prod]);
}

/* How node i reads the flat values: 1 rewritten elementwise, 2 a sum of
 * all its dims to a scalar, 0 not a reader, -1 a reader that cannot be. */
static int reader_kind(const sc_graph *g, int32_t i, const bool *flat, int32_t param,
                       int64_t n) {
  const sc_node *nd = &g->nodes[i];
  bool reads = false;
  for (int32_t k = 0; k < nd->n_inputs; k++)
    if (nd->inputs[k] >= 0 && flat[nd->inputs[k]]) reads = true;
  if (!reads) return 0;
  if (nd->op == SC_OP_REDUCE_SUM) {
    const sc_attr *ax = sc_node_attr(nd, "axes"), *keep = sc_node_attr(nd, "keepdims");
    const sc_value *x = &g->values[nd->inputs[0]];
    bool all = nd->n_inputs == 1 && ax && (ax->n == 0 || ax->n == x->rank);
    return all && keep && keep->i == 0 && nd->n_outputs == 1 ? 2 : -1;
  }
  if (!(sc_ops[nd->op].flags & SC_OPF_ELEMENTWISE) || nd->n_outputs != 1) return -1;
  for (int32_t k = 0; k < nd->n_inputs; k++) {
    int32_t v = nd->inputs[k];
    if (v < 0 || flat[v] || v == param || sc_value_numel(&g->values[v]) == 1 ||
        from_param(g, v, param, n, 0))
      continue;
    return -1; /* a tensor of another layout */
  }
  return sc_value_numel(&g->values[nd->outputs[0]]) == n ? 1 : -1;
}

/* The gradient the norm and the update read: grad:P (or new:accum:P, the
 * accumulated sum), through Muls by scalars (the mean over microbatches,
 * the loss scale's inverse), up to the value the norm squares; -1 when
 * there is none. */
static int32_t update_gradient(const sc_graph *g, const char *pname, const int32_t *uoff,
                               const int32_t *users) {
  int32_t x = find(g, "new:accum:", pname, "");
  if (x < 0) x = find(g, "grad:", pname, "");
  for (int32_t step = 0; x >= 0 && step < 4; step++) {
    int32_t next = -1;
    for (int32_t u = uoff[x]; u < uoff[x + 1]; u++) {
      const sc_node *nd = &g->nodes[users[u]];
      if ((nd->flags & SC_NODE_DEAD) || nd->op != SC_OP_MUL || nd->n_inputs != 2) continue;
      if (nd->inputs[0] == x && nd->inputs[1] == x) return x; /* the norm's square */
      int32_t other = nd->inputs[0] == x ? nd->inputs[1] : nd->inputs[0];
      if (other >= 0 && sc_value_numel(&g->values[other]) == 1 && next < 0)
        next = nd->outputs[0];
    }
    x = next;
  }
  return -1;
}

/* Nodes [from, g->n_nodes) go right after node `after`
 * (sc_partition_flat_order). */
static sc_status order_after(sc_graph *g, sc_flat_order *order, int32_t from, int32_t after) {
  for (int32_t i = from; i < g->n_nodes; i++) {
    if (!sc_grow_i32_pair(&order->node, &order->after, order->n, &order->cap))
      return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    order->node[order->n] = i;
    order->after[order->n++] = after;
  }
  return SC_OK;
}

/* Nodes [from, g->n_nodes) named after node `reader` and the parameter
 * ("<reader>/<P>.flat_<k>"),
 * so that a gather made for them is the reader's (the plan's backward
 * bytes: "/grad/" in the origin) and go right after the node before it. */
static sc_status before_reader(sc_graph *g, sc_flat_order *order, int32_t from, int32_t reader,
                               const char *pname) {
  const char *rn = g->nodes[reader].name ? g->nodes[reader].name : sc_op_name(g->nodes[reader].op);
  for (int32_t i = from; i < g->n_nodes; i++) {
    char buf[1024];
    int w = snprintf(buf, sizeof buf, "%s/%s.flat_%d", rn, pname, (int)(i - from));
    const char *name = w > 0 && (size_t)w < sizeof buf ? sc_arena_strdup(&g->arena, buf) : NULL;
    if (!name) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    g->nodes[i].name = name;
  }
  return order_after(g, order, from, reader - 1);
}

/* x in P's shape from the flat value y: unflatten(y), or for a narrowing
 * Cast reader (cast >= 0, the node reading P) a copy of that Cast on y,
 * unflattened. -1 on failure. */
static int32_t read_back(sc_grad_ctx *c, const flat_view *f, int32_t y, int32_t cast) {
  sc_graph *g = c->g;
  if (cast >= 0) {
    int32_t node = -1, out = gb_begin(c, SC_OP_CAST, &y, 1, &node);
    sc_node orig = g->nodes[cast]; /* a copy: adding the node may move the array */
    if (out < 0 || sc_node_copy_attrs(g, node, &orig) != SC_OK) return -1;
    if ((y = gb_end(c, node, out)) < 0) return -1;
  }
  return unflatten(c, f, y);
}

/* Whether node i is a narrowing Cast (mixed precision's bf16 copy). */
static bool narrowing(const sc_graph *g, int32_t i) {
  const sc_node *nd = &g->nodes[i];
  if (nd->op != SC_OP_CAST || nd->n_inputs != 1 || nd->n_outputs != 1 || nd->outputs[0] < 0)
    return false;
  sc_dtype a = g->values[nd->inputs[0]].dtype, b = g->values[nd->outputs[0]].dtype;
  return sc_dtype_is_float(b) && sc_dtype_size(b) < sc_dtype_size(a);
}

/* ZeRO-3: the nodes left reading P (the forward's and the backward's; the
 * update's, kind != 0, read the flat P) read it back in its shape: a
 * narrowing Cast becomes a Cast of the flat P, unflattened (the
 * low-precision shard is what is gathered: localize.c, casts_first), every
 * other reader reads an unflattened copy. With `forward` (reshard after
 * forward) the backward's readers, those not feeding the loss, read their
 * own copy, so that P is gathered again there and the forward's copy dies
 * after its last forward use; without, the one copy is kept. */
static sc_status store_readers(sc_grad_ctx *c, const flat_view *f, int32_t param,
                               const int8_t *kind, int32_t nn0, const bool *forward,
                               int32_t n_forward, sc_flat_order *order) {
  sc_graph *g = c->g;
  int32_t whole[2] = {-1, -1}; /* the forward's, the backward's */
  char pname[512];
  snprintf(pname, sizeof pname, "%s", g->values[param].name ? g->values[param].name : "param");
  for (int32_t i = 0; i < nn0; i++) {
    if ((g->nodes[i].flags & SC_NODE_DEAD) || kind[i] || g->nodes[i].n_inputs < 1) continue;
    bool reads = false;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) reads |= g->nodes[i].inputs[k] == param;
    if (!reads) continue;
    int32_t b = forward && i < n_forward && !forward[i] ? 1 : 0;
    if (narrowing(g, i)) {
      int32_t out = g->nodes[i].outputs[0], from = g->n_nodes;
      int32_t back = read_back(c, f, param, i);
      if (back < 0 || before_reader(g, order, from, i, pname) != SC_OK)
        return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
      /* the backward's readers of a forward cast read a second copy */
      int32_t again = -1;
      for (int32_t j = i + 1; !b && forward && j < n_forward; j++) {
        sc_node *nd = &g->nodes[j];
        if ((nd->flags & SC_NODE_DEAD) || forward[j]) continue;
        for (int32_t k = 0; k < nd->n_inputs; k++) {
          if (nd->inputs[k] != out) continue;
          int32_t at = g->n_nodes;
          if (again < 0 && ((again = read_back(c, f, param, i)) < 0 ||
                            before_reader(g, order, at, j, pname) != SC_OK))
            return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
          g->nodes[j].inputs[k] = again;
        }
      }
      g->nodes[i].flags |= SC_NODE_DEAD;
      g->nodes[i].n_inputs = 0; /* read nothing: sc_graph_toposort orders every node */
      sc_status st = take_output(g, back, out);
      if (st != SC_OK) return st;
      continue;
    }
    int32_t from = g->n_nodes; /* each copy right before its first reader */
    if (whole[b] < 0 && ((whole[b] = unflatten(c, f, param)) < 0 ||
                         before_reader(g, order, from, i, pname) != SC_OK))
      return g->diag.status ? g->diag.status : SC_ERR_NOMEM;
    for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == param) g->nodes[i].inputs[k] = whole[b];
  }
  return SC_OK;
}

/* Records the split of P stored flat in pieces (sc_partition_flat_split). */
static sc_status note_split(sc_partition *p, const char *name, const flat_view *f) {
  if (p->n_flat_splits == p->cap_flat_splits) {
    int32_t cap = p->cap_flat_splits ? p->cap_flat_splits * 2 : 16;
    sc_partition_flat_split *x = sc_realloc(p->flat_splits, (size_t)cap * sizeof *x);
    if (!x) return sc_graph_error(p->global, SC_ERR_NOMEM, "out of memory");
    p->flat_splits = x;
    p->cap_flat_splits = cap;
  }
  const char *copy = sc_arena_strdup(&p->arena, name);
  if (!copy) return sc_graph_error(p->global, SC_ERR_NOMEM, "out of memory");
  p->flat_splits[p->n_flat_splits++] =
      (sc_partition_flat_split){.name = copy, .dim = f->d, .parts = f->T, .stride = f->s};
  return SC_OK;
}

sc_status sc_partition_flatten_param(sc_partition *p, int32_t param, const sc_sharding *base,
                                     const bool *forward, int32_t n_forward,
                                     sc_sharding *state, sc_flat_order *order, bool *done) {
  sc_graph *g = p->global;
  *done = false;
  int32_t *uoff = NULL, *users = NULL;
  if (sc_graph_users(g, &uoff, &users) != SC_OK)
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  int32_t grad = update_gradient(g, g->values[param].name, uoff, users);
  sc_free(uoff);
  sc_free(users);
  int64_t S = p->mesh.axes[p->fsdp_axis].size;
  const sc_value pv = g->values[param]; /* a copy: adding values moves the array */
  flat_view f;
  int32_t out = find(g, "new:", pv.name, "");
  int32_t nv0 = g->n_values, nn0 = g->n_nodes;
  /* ZeRO-3 stores P itself flat, unpipelined (the runtime maps P's
   * elements per piece, sc_train_manifest_param: its split recorded below) */
  bool store = p->zero_stage == 3;
  if (!layout(p, &pv, base, S, &f) || grad < 0 || out < 0 || g->values[out].producer < 0 ||
      (store && p->n_chunks > 0))
    return SC_OK;
  int64_t n = sc_value_numel(&pv);
  bool *flat = sc_calloc((size_t)nv0 + 1, sizeof *flat);
  int8_t *kind = sc_calloc((size_t)nn0 + 1, sizeof *kind);
  if (!flat || !kind) {
    sc_free(flat);
    sc_free(kind);
    return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  }
  /* which nodes read the flat values: the gradient and P's state */
  size_t len = strlen(pv.name);
  flat[grad] = true;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const sc_value *v = &g->values[g->inputs[i]];
    if (v->name && strncmp(v->name, pv.name, len) == 0 && v->name[len] == '.' &&
        sc_partition_param_of(p, v->name) == sc_partition_param_of(p, pv.name) &&
        find(g, "new:", v->name, "") >= 0 && sc_value_numel(v) == n)
      flat[g->inputs[i]] = true;
  }
  bool ok = true;
  for (int32_t i = 0; ok && i < nn0; i++) {
    if (g->nodes[i].flags & SC_NODE_DEAD) continue;
    int k = reader_kind(g, i, flat, param, n);
    ok = k >= 0;
    kind[i] = (int8_t)k;
    if (k == 1) flat[g->nodes[i].outputs[0]] = true;
  }
  ok = ok && flat[out];
  for (int32_t i = 0; ok && i < g->n_inputs; i++) { /* each state's update flat too */
    int32_t id = g->inputs[i];
    int32_t o = id != grad && flat[id] ? find(g, "new:", g->values[id].name, "") : -1;
    ok = o < 0 || (o < nv0 && flat[o]);
  }
  sc_status st = SC_OK;
  if (!ok) {
    sc_free(flat);
    sc_free(kind);
    return SC_OK;
  }
  /* the views, and the state inputs in the flat shape */
  /* the training step's own names, "train/<k>", numbered past the train
   * pass's (k from 2^24 + 64 per parameter id: nodes here are fewer) */
  int32_t counter = (1 << 24) + 64 * param;
  sc_grad_ctx c = {.g = g, .node = -1, .counter = &counter};
  int32_t fp = store ? param : flatten(&c, &f, param), first = g->n_nodes;
  if (store && (st = sc_value_set_shape(g, param, pv.dtype, f.frank, f.fdims)) != SC_OK) fp = -1;
  int32_t fg = fp < 0 ? -1 : flatten(&c, &f, grad);
  /* the gradient's view goes right after the gradient (sc_partition_flat_order) */
  if (fg >= 0 && order_after(g, order, first, g->values[grad].producer) != SC_OK) fg = -1;
  char name[600];
  snprintf(name, sizeof name, "grad:%s.flat", pv.name);
  int32_t named = fg < 0 ? -1 : sc_graph_add_value(g, name);
  if (named < 0) st = g->diag.status ? g->diag.status : SC_ERR_NOMEM;
  if (st == SC_OK && (st = take_output(g, fg, named)) == SC_OK) fg = named;
  for (int32_t i = 0; st == SC_OK && i < g->n_inputs; i++) {
    int32_t id = g->inputs[i];
    if (id < nv0 && flat[id] && id != grad)
      st = sc_value_set_shape(g, id, g->values[id].dtype, f.frank, f.fdims);
  }
  /* the readers, in order, on the flat values */
  for (int32_t i = 0; st == SC_OK && i < nn0; i++) {
    if (kind[i] == 0) continue;
    for (int32_t k = 0; st == SC_OK && k < g->nodes[i].n_inputs; k++) {
      int32_t v = g->nodes[i].inputs[k], nv = v;
      if (v == grad) nv = fg;
      else if (v == param) nv = fp;
      else if (v >= 0 && v < nv0 && !flat[v] && sc_value_numel(&g->values[v]) != 1) {
        nv = flat_copy(&c, v, param, fp); /* from_param */
        if (nv < 0) st = g->diag.status ? g->diag.status : SC_ERR_NOMEM;
      }
      g->nodes[i].inputs[k] = nv;
      if (nv != v && v != grad && v != param) drop_unread(g, v);
    }
    if (st != SC_OK) break;
    sc_node *nd = &g->nodes[i];
    if (kind[i] == 2) {
      int64_t axes[3] = {0, 1, 2};
      sc_attr *a = (sc_attr *)sc_node_attr(nd, "axes");
      int64_t *ints = sc_arena_array(&g->arena, 3, sizeof *ints);
      if (!ints) {
        st = sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
        break;
      }
      memcpy(ints, axes, sizeof axes);
      a->ints = ints;
      a->n = f.frank;
    }
    st = sc_ops[nd->op].infer(g, nd);
  }
  /* new:P: the flat update (ZeRO-3: as it is), back in P's shape */
  if (st == SC_OK && store) st = store_readers(&c, &f, param, kind, nn0, forward, n_forward, order);
  if (st == SC_OK && !store) {
    int32_t prod = g->values[out].producer;
    snprintf(name, sizeof name, "%s.flat_update", pv.name);
    int32_t y = sc_graph_add_value(g, name);
    if (y < 0) st = g->diag.status ? g->diag.status : SC_ERR_NOMEM;
    else {
      g->nodes[prod].outputs[0] = y;
      g->values[y].producer = prod;
      st = sc_ops[g->nodes[prod].op].infer(g, &g->nodes[prod]);
    }
    int32_t back = st == SC_OK ? unflatten(&c, &f, y) : -1;
    if (st == SC_OK && back < 0) st = g->diag.status ? g->diag.status : SC_ERR_NOMEM;
    if (st == SC_OK) st = take_output(g, back, out); /* the output value itself */
  }
  sc_free(flat);
  sc_free(kind);
  if (st != SC_OK) return st;
  /* the state's sharding: dim 0 over fsdp, dim 1 as P's split dim */
  sc_sharding_replicated(state, f.frank);
  sc_sharding_split(state, 0, p->fsdp_axis);
  for (int32_t k = 0; f.d >= 0 && k < base->n_dim_axes[f.d]; k++)
    sc_sharding_split(state, 2, base->dim_axes[f.d][k]);
  if ((st = sc_graph_set_sharding(g, fg, state)) != SC_OK) return st;
  if (store && f.T > 1 && (st = note_split(p, pv.name, &f)) != SC_OK) return st;
  *done = true;
  return SC_OK;
}

sc_status sc_partition_flat_order(sc_graph *g, sc_flat_order *order) {
  int32_t nn = g->n_nodes;
  int32_t *pos = sc_malloc(((size_t)nn + 1) * sizeof *pos); /* node -> its entry, or -1 */
  int32_t *perm = sc_malloc(((size_t)nn + 1) * sizeof *perm);
  sc_node *nodes = sc_malloc(((size_t)nn + 1) * sizeof *nodes);
  sc_status st = pos && perm && nodes ? SC_OK : sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  if (st == SC_OK) {
    for (int32_t i = 0; i < nn; i++) pos[i] = -1;
    for (int32_t k = 0; k < order->n; k++) pos[order->node[k]] = k;
    int32_t m = 0;
    for (int32_t k = 0; k < order->n; k++) /* after no node: first */
      if (order->after[k] == -1) perm[m++] = order->node[k];
    for (int32_t i = 0; i < nn; i++) {
      if (pos[i] >= 0) continue; /* placed after its anchor */
      perm[m++] = i;
      for (int32_t k = 0; k < order->n; k++)
        if (order->after[k] == i) perm[m++] = order->node[k];
    }
    for (int32_t k = 0; k < order->n; k++) /* an anchor that was not a node: last */
      if (order->after[k] < -1 || order->after[k] >= nn ||
          (order->after[k] >= 0 && pos[order->after[k]] >= 0))
        perm[m++] = order->node[k];
    SC_ASSERT(m == nn);
    for (int32_t i = 0; i < nn; i++) nodes[i] = g->nodes[perm[i]];
    memcpy(g->nodes, nodes, (size_t)nn * sizeof *nodes);
    for (int32_t i = 0; i < nn; i++)
      for (int32_t j = 0; j < g->nodes[i].n_outputs; j++)
        if (g->nodes[i].outputs[j] >= 0) g->values[g->nodes[i].outputs[j]].producer = i;
    st = sc_graph_toposort(g);
  }
  sc_free(pos);
  sc_free(perm);
  sc_free(nodes);
  return st;
}
