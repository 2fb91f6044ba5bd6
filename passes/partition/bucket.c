/* bucket.c — ZeRO-3's parameter all-gathers, ZeRO-1/2's gathers of the
 * updated parameters, and the gradients' reductions (reduce-scatters,
 * all-reduces), grouped per block (partition.h).
 *
 * localize gathers each parameter stored split over the fsdp axis right
 * before its use, one AllGather per tensor (per use region: forward, and
 * again for the backward). FSDP gathers a block's parameters together, in
 * one collective: that is fewer and larger messages, and the whole block is
 * there when its first node runs. This pass does the same on the local
 * graph, in node order:
 *
 *   a group is the AllGathers over one storage group (the fsdp axis
 *   alone, or fsdp then ep: a parameter outside the experts under fsdp x
 *   ep, localize.c's storage_group; S its size), along dim 0, of
 *   parameter shards (graph inputs) of one block (the block key of
 *   passes/stats.h on the parameter's name; parameters outside blocks, an
 *   embedding and a last norm used far apart, are gathered alone),
 *   in one piece (`__stage`), dtype alike (one open group per dtype: a
 *   bf16 step gathers its products' weights as their bf16 casts, cast on
 *   the shard by localize, and its norms' in f32, interleaved); a gather of
 *   a parameter the open group already has (the backward's gathering
 *   again) closes it and opens the next.
 *
 * A group of k >= 2 gathers of shards x_1..x_k (n_t elements each) becomes,
 * at the place of its first gather (each y_t at the place of its own):
 *
 *   cat = Concat(Reshape(x_1, [n_1]), ..., Reshape(x_k, [n_k]))   [N]
 *   all = AllGather(cat) over fsdp                                [S·N]
 *   y_t = Reshape(Slice(Reshape(all, [S, N]), [0, o_t], [S, o_t + n_t]),
 *                 the full shape of x_t)
 *
 * (each rank's piece of every member lies in its row; a dim-0 split makes
 * the S pieces of member t, in rank order, its whole tensor: FSDP2's
 * copy-in, all-gather, copy-out), and each old gather an Identity of its
 * y_t, so that its readers and its name stay. The bytes every rank sends
 * are the same; the count of collectives falls to one per block and region.
 * ZeRO-1/2 gather each updated parameter after its update instead
 * (update_candidate: a shard that a chain of sole readers makes the output
 * new:P); their groups are formed alike, the bucket placed after the last
 * member, each member copied out there and its chain moved after it.
 * p->local_end (the global-to-local node map, used only to place stages)
 * is not kept up to date.
 *
 * With ep before fsdp in the mesh, localize gathers the storage group of a
 * parameter outside the experts as a pair, over ep and then over fsdp, and
 * reduce-scatters its gradient over fsdp and then over ep (a rank's key in
 * one group over both, ep outer, is not its piece's index on the dim, fsdp
 * outer). Such a pair is a member as one gather over the group (its
 * second's output its y_t, inner_gather), and the group's gather runs over
 * "ep,fsdp", its rows put in the dim's order by a Transpose of
 * [E, F, N] to [F, E, N]; a pair outside the groups (outside blocks, of a
 * value that is no parameter, or under ZeRO-1/2) is a bucket of one. The
 * reduce-scatter pairs likewise (inner_scatter; the bucket's rows
 * transposed from [F, E, n] to [E, F, n] before it). The pair's first
 * collective, read by its second alone, is dropped.
 *
 * The gradients' reductions are grouped the same way
 * (sc_partition_bucket_reductions). A member is the reduction of one
 * "grad:P": its ReduceScatter over a storage group along dim 0 (ZeRO
 * 1-3), with the AllReduce over the replicas that alone reads its result
 * (HSDP) or none (under --reduce-dtype bf16 the ReduceScatter of grad:P's
 * sole narrowing Cast, localize's: its Cast back to f32 moves with the
 * member's copy-out);
 * or, with no reduce-scatter (ZeRO 0, plain data parallel, any axes), the
 * AllReduce of grad:P itself, with the AllReduce over other axes that
 * alone reads its result (ar2: a gradient pending over two groups, dp
 * then cp, or a sequence-parallel norm's tp then dp; the bucket reduces
 * over both in turn) or none, or of a value that only sole Casts and
 * Reshapes make grad:P (a bf16 step under --reduce-dtype bf16 reduces a
 * GEMM weight's gradient in bf16, before its Cast to the f32 weight's;
 * that chain moves with the member's copy-out). The members of one block,
 * in one piece, of one dtype, of one kind (with a reduce-scatter over the
 * same storage group or none), the same all-reduces (axes and op, or none)
 * and alike in whether another collective is their result's first reader
 * (a member reduced over one axis and then another by a collective that
 * is not its ar2: the group would be waited for at once) become one
 * ReduceScatter and/or one AllReduce (two with ar2) at the
 * place of the last member, when nothing reads an earlier member's result
 * before that place (bucket_rs); each member's piece is
 * copied out where its result is first read. A dim-0 split puts rank r's
 * piece of every member in row r of [S, n_t/S], so the members' rows
 * concatenate into one buffer whose piece r is rank r's of every member; an
 * all-reduce is elementwise, so plain concatenation serves it. Groups of
 * all-reduces alone close once they hold DDP's default bucket cap
 * (SC_PARTITION_BUCKET_CAP_BYTES, 25 MiB) or more, so a large block's
 * first bucket starts before its whole backward has run and the copies
 * stay bounded; reduce-scatter groups are whole blocks, as FSDP wraps
 * them. Each dtype has its own open group (DDP and Megatron bucket per
 * dtype): a bf16 step's bf16 and f32 gradients interleave in the backward,
 * and a change of dtype closing the group left them mostly alone. Members
 * keep their relative order, and every
 * rank runs the same program, so the collectives match across ranks.
 *
 * Where something reads a member's result before the next member is
 * reduced (a pipelined norm piece squares each reduced mean before making
 * the next), the next member's few producing nodes and its reduction are
 * first moved right after the previous member's (hoist_reductions). After
 * the buckets, the gradient norm's all-reduces of scalars that add into
 * one running sum are merged into one (merge_scalar_terms).
 *
 * Before the buckets, a reduce-scatter of "grad:P" = a + b (a parameter
 * read twice: a tied embedding's LM head product and lookup scatter-add)
 * whose earlier part has SC_PARTITION_SPLIT_MIN_BYTES or more and would
 * wait for the other across another collective is split
 * (sc_partition_split_grad_sums):
 * a is reduce-scattered right where it is made, b where the sum was, and
 * the shards added. Along a dim other than 0 each part goes in chunks of
 * rows of at most a bucket's size, made by rows where its producer allows
 * (rows_of, scatter_rows), so that neither the part nor the communicator's
 * layout scratch is ever whole. */
#include <stdio.h>
#include <string.h>

#include "ir/sharding.h"
#include "partition.h"
#include "passes/stats.h"

enum { CHAIN = 8 }; /* nodes at most between a collective's value and its parameter's */

typedef struct member {
  int32_t node;        /* the old AllGather */
  int32_t inner;       /* the old gather over ep before it (ep first), or -1 */
  int32_t x, y;        /* its shard input and full output */
  int64_t n;           /* elements of the shard */
  int32_t chain[CHAIN], n_chain; /* an update's gather: the nodes making
                          new:P of y (update_candidate), moved with it */
} member;

typedef struct bucketer {
  sc_partition *p;
  sc_graph *L;
  sc_diag *d;
  int32_t *ins_node;   /* nodes placed anew: new ones, and old ones moved */
  int32_t *insert_at;  /* [n_new] the old node each goes before */
  bool *moved;         /* [first_new] old nodes that are in ins_node */
  int32_t n_new, cap_new, first_new;
  const int32_t *off;  /* sc_partition_split_grad_sums: sc_graph_users' offsets */
  bool dead;           /* old nodes were marked SC_NODE_DEAD (compact after) */
} bucketer;

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static sc_status lerr(bucketer *b) {
  if (b->L->diag.status != SC_OK) *b->d = b->L->diag;
  return b->d->status ? b->d->status : SC_ERR_INVALID;
}

static int64_t stage_of(const sc_node *n) {
  const sc_attr *a = sc_node_attr(n, "__stage");
  return a ? a->i : 0;
}

static int64_t axis_size(const sc_partition *p, int32_t axis) { return p->mesh.axes[axis].size; }

/* The size of collective n's group when it runs over a storage group
 * (fsdp alone, or fsdp then ep: localize.c's storage_group), else 0. */
static int64_t storage_size(const sc_partition *p, const sc_node *n) {
  const sc_attr *ax = sc_node_attr(n, "axes");
  if (p->fsdp_axis < 0 || !ax || ax->n < 1 || ax->n > 2 ||
      strcmp(ax->strings[0], p->mesh.axes[p->fsdp_axis].name) != 0)
    return 0;
  int64_t S = p->mesh.axes[p->fsdp_axis].size;
  if (ax->n == 1) return S;
  if (p->ep_axis < p->fsdp_axis || strcmp(ax->strings[1], p->mesh.axes[p->ep_axis].name) != 0)
    return 0;
  return S * p->mesh.axes[p->ep_axis].size;
}

/* Whether node i is an AllGather along dim 0 over mesh axis `axis` alone. */
static bool gathers_over(const sc_partition *p, const sc_node *n, int32_t axis) {
  const sc_attr *ax = sc_node_attr(n, "axes"), *dim = sc_node_attr(n, "axis");
  return n->op == SC_OP_ALL_GATHER && n->n_inputs == 1 && n->n_outputs == 1 &&
         n->inputs[0] >= 0 && axis >= 0 && ax && ax->n == 1 &&
         strcmp(ax->strings[0], p->mesh.axes[axis].name) == 0 && (!dim || dim->i == 0);
}

/* With ep before fsdp in the mesh, localize gathers the storage group of a
 * parameter outside the experts axis by axis, over ep and then over fsdp
 * (a rank's key in one group over both would not be its piece's index:
 * localize.c's storage_group). When node i is such a pair's gather over
 * fsdp: the pair's gather over ep, which only i reads, else -1. */
static int32_t inner_gather(const bucketer *b, const int32_t *off, int32_t i) {
  const sc_partition *p = b->p;
  const sc_node *n = &b->L->nodes[i];
  if (p->ep_axis < 0 || p->ep_axis > p->fsdp_axis || !gathers_over(p, n, p->fsdp_axis))
    return -1;
  int32_t e = b->L->values[n->inputs[0]].producer;
  if (e < 0 || !gathers_over(p, &b->L->nodes[e], p->ep_axis) ||
      off[n->inputs[0] + 1] - off[n->inputs[0]] != 1 ||
      (b->L->values[n->inputs[0]].flags & SC_VALUE_OUTPUT))
    return -1;
  return e;
}

/* Whether node i gathers a parameter shard along dim 0 over a storage
 * group (storage_size, or a pair's: *inner, inner_gather); its parameter
 * through *param, its group's size through *S. */
static bool candidate(const bucketer *b, const int32_t *off, int32_t i, const char **param,
                      int32_t *inner, int64_t *S) {
  const sc_node *n = &b->L->nodes[i];
  *inner = -1;
  if (n->op != SC_OP_ALL_GATHER || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0)
    return false;
  const sc_attr *dim = sc_node_attr(n, "axis");
  *S = storage_size(b->p, n);
  if ((*inner = inner_gather(b, off, i)) >= 0)
    *S = axis_size(b->p, b->p->fsdp_axis) * axis_size(b->p, b->p->ep_axis);
  if (!*S || (dim && dim->i != 0)) return false;
  if (*inner >= 0) n = &b->L->nodes[*inner]; /* the parameter's shard is its input */
  const sc_value *x = &b->L->values[n->inputs[0]];
  const sc_node *c = x->producer >= 0 ? &b->L->nodes[x->producer] : NULL;
  if (c && c->op == SC_OP_CAST && c->n_inputs == 1 && c->inputs[0] >= 0)
    x = &b->L->values[c->inputs[0]]; /* the parameter's low-precision shard */
  if (!(x->flags & SC_VALUE_INPUT) || !x->name || x->rank < 1) return false;
  const char *pp = sc_partition_param_of(b->p, x->name);
  if (!pp || strcmp(pp, x->name) != 0) return false;
  *param = x->name;
  return true;
}

/* Whether node i gathers along dim 0 over a storage group (storage_size)
 * a shard that a chain of sole readers (m->chain: Slice, Reshape,
 * Transpose, ..., each of one output, reading nothing else but constants)
 * makes "new:P", the updated parameter P, a step output nothing reads:
 * ZeRO-1/2's gather after the update (flat.c's Slice of the flat update, or
 * a dim-0 shard's); P through *param. */
static bool update_candidate(const bucketer *b, const int32_t *off, const int32_t *users, int32_t i,
                             const char **param, member *m) {
  const sc_graph *L = b->L;
  const sc_node *n = &L->nodes[i];
  if (n->op != SC_OP_ALL_GATHER || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
      n->outputs[0] < 0)
    return false;
  const sc_attr *dim = sc_node_attr(n, "axis");
  if (!storage_size(b->p, n) || (dim && dim->i != 0) || L->values[n->inputs[0]].rank < 1)
    return false;
  m->n_chain = 0;
  for (int32_t v = n->outputs[0], hop = 0; hop <= CHAIN; hop++) {
    const sc_value *y = &L->values[v];
    if (y->name && strncmp(y->name, "new:", 4) == 0 && (y->flags & SC_VALUE_OUTPUT) &&
        off[v + 1] == off[v]) {
      const char *pp = sc_partition_param_of(b->p, y->name + 4);
      if (!pp || strcmp(pp, y->name + 4) != 0) return false;
      *param = pp;
      return true;
    }
    if (hop == CHAIN || off[v + 1] - off[v] != 1 || (y->flags & SC_VALUE_OUTPUT)) return false;
    const sc_node *r = &L->nodes[users[off[v]]];
    if (r->n_outputs != 1 || r->outputs[0] < 0) return false;
    for (int32_t k = 0; k < r->n_inputs; k++)
      if (r->inputs[k] != v && r->inputs[k] >= 0 && L->values[r->inputs[k]].producer >= 0)
        return false;
    m->chain[m->n_chain++] = users[off[v]];
    v = r->outputs[0];
  }
  return false;
}

static int32_t new_value(bucketer *b, const char *base, sc_dtype t, int32_t rank,
                         const int64_t *dims) {
  int32_t id = sc_graph_new_value(b->L, base);
  if (id < 0 || sc_value_set_shape(b->L, id, t, rank, dims) != SC_OK) return -1;
  sc_sharding r;
  sc_sharding_replicated(&r, rank);
  return sc_graph_set_sharding(b->L, id, &r) == SC_OK ? id : -1;
}

static int32_t const_i64(bucketer *b, int32_t n, const int64_t *vals) {
  int32_t id = sc_graph_new_value(b->L, "bucket_shape");
  int64_t dims[1] = {n};
  if (id < 0 || sc_value_set_data(b->L, id, SC_DTYPE_I64, 1, dims, vals, (uint64_t)n * 8, true) !=
                    SC_OK)
    return -1;
  sc_sharding r;
  sc_sharding_replicated(&r, 1);
  return sc_graph_set_sharding(b->L, id, &r) == SC_OK ? id : -1;
}

/* Node nid goes before old node `before` (after what went there first). */
static bool put(bucketer *b, int32_t nid, int32_t before) {
  if (!sc_grow_i32_pair(&b->insert_at, &b->ins_node, b->n_new, &b->cap_new)) return false;
  b->ins_node[b->n_new] = nid;
  b->insert_at[b->n_new++] = before;
  if (nid < b->first_new) b->moved[nid] = true;
  return true;
}

/* A node of the group's piece, placed before old node `before`. */
static int32_t emit(bucketer *b, sc_op op, const char *base, const int32_t *in, int32_t n_in,
                    int32_t out, int64_t stage, int32_t before) {
  char name[700];
  snprintf(name, sizeof name, "%s/bucket/%s_%d", base, sc_op_name(op), (int)b->n_new);
  int32_t nid = sc_graph_add_node(b->L, op, name, in, n_in, &out, 1);
  sc_attr *a = nid < 0 ? NULL : sc_node_add_attr(b->L, nid, "__stage", SC_ATTR_INT);
  if (!a) return -1;
  a->i = stage;
  return put(b, nid, before) ? nid : -1;
}

/* Old node i becomes an Identity of x: its collective's attributes go, its
 * stage stays (so its readers and its name stay). */
static void to_identity(bucketer *b, int32_t i, int32_t x) {
  sc_node *n = &b->L->nodes[i];
  n->op = SC_OP_IDENTITY;
  n->inputs[0] = x;
  int32_t kept = 0;
  for (int32_t a = 0; a < n->n_attrs; a++)
    if (strcmp(n->attrs[a].name, "__stage") == 0) n->attrs[kept++] = n->attrs[a];
  n->n_attrs = kept;
}

/* The collective attributes of old node `from` on new node nid: "axes",
 * and the reduction "op" where it has one (shared, not copied). */
static sc_status copy_axes(bucketer *b, int32_t nid, int32_t from) {
  const char *names[2] = {"axes", "op"};
  for (int32_t k = 0; k < 2; k++) {
    if (!sc_node_attr(&b->L->nodes[from], names[k])) {
      if (k == 0) return nomem(b->d);
      continue;
    }
    sc_attr *a = sc_node_add_attr(b->L, nid, names[k], k ? SC_ATTR_STRING : SC_ATTR_STRINGS);
    if (!a) return nomem(b->d);
    const sc_attr *from_a = sc_node_attr(&b->L->nodes[from], names[k]); /* adding may move it */
    a->strings = from_a->strings;
    a->s = from_a->s;
    a->n = from_a->n;
  }
  return SC_OK;
}

static sc_status attr_int(bucketer *b, int32_t nid, const char *name, int64_t v) {
  sc_attr *a = sc_node_add_attr(b->L, nid, name, SC_ATTR_INT);
  if (!a) return nomem(b->d);
  a->i = v;
  return SC_OK;
}

/* The axes of a pair's bucket gather nid (inner_gather): the group over ep
 * and fsdp, in mesh order. */
static sc_status pair_axes(bucketer *b, int32_t nid) {
  sc_attr *a = sc_node_add_attr(b->L, nid, "axes", SC_ATTR_STRINGS);
  const char **s = a ? sc_arena_array(&b->L->arena, 2, sizeof *s) : NULL;
  if (!s) return nomem(b->d);
  s[0] = b->p->mesh.axes[b->p->ep_axis].name;
  s[1] = b->p->mesh.axes[b->p->fsdp_axis].name;
  a->strings = s;
  a->n = 2;
  return SC_OK;
}

/* Value v of A·B·n elements, its rows in one order of the pair's group
 * (inner_gather), in the other: Transpose(Reshape(v, [A, B, n]), [1, 0,
 * 2]) [B, A, n]; or -1. A gather's rows come in key order, ep outer
 * (e·F + f), and are wanted in the stored dim's order, fsdp outer (f·E +
 * e): A = E, B = F; a reduce-scatter's, the other way round. */
static int32_t reorder(bucketer *b, int32_t v, int64_t A, int64_t B, int64_t n, const char *base,
                       int64_t stage, int32_t before) {
  sc_graph *L = b->L;
  int64_t from[3] = {A, B, n}, to[3] = {B, A, n};
  sc_dtype t = L->values[v].dtype;
  int32_t shp = const_i64(b, 3, from);
  int32_t v3 = shp < 0 ? -1 : new_value(b, L->values[v].name, t, 3, from);
  int32_t tr = v3 < 0 ? -1 : new_value(b, L->values[v].name, t, 3, to);
  if (tr < 0 || emit(b, SC_OP_RESHAPE, base, (int32_t[]){v, shp}, 2, v3, stage, before) < 0)
    return -1;
  int32_t nt = emit(b, SC_OP_TRANSPOSE, base, &v3, 1, tr, stage, before);
  sc_attr *perm = nt < 0 ? NULL : sc_node_add_attr(L, nt, "perm", SC_ATTR_INTS);
  int64_t *p = perm ? sc_arena_array(&L->arena, 3, sizeof *p) : NULL;
  if (!p) return -1;
  p[0] = 1;
  p[1] = 0;
  p[2] = 2;
  perm->ints = p;
  perm->n = 3;
  return tr;
}

/* The group's bucket (see the top): before old node `at`, or where its
 * first member was gathered (at < 0; each member copied out where it was
 * gathered). An update's gathers (at >= 0: after the last member's) are
 * copied out there too, the old gathers and their chains moved after. */
static sc_status bucket(bucketer *b, const member *m, int32_t k, int64_t S, int32_t at) {
  sc_graph *L = b->L;
  int32_t first = at >= 0 ? at : m[0].node;
  int64_t stage = stage_of(&L->nodes[m[0].node]);
  sc_dtype t = L->values[m[0].x].dtype;
  const char *base = L->nodes[m[0].node].name;
  int64_t N = 0;
  for (int32_t j = 0; j < k; j++) N += m[j].n;
  int32_t *flat = sc_malloc((size_t)k * sizeof *flat);
  if (!flat) return nomem(b->d);
  sc_status st = SC_OK;
  for (int32_t j = 0; st == SC_OK && j < k; j++) {
    int32_t cast = L->values[m[j].x].producer; /* a Cast of the shard, before the bucket */
    if (at < 0 && cast > first && cast < b->first_new && !b->moved[cast] && !put(b, cast, first))
      st = nomem(b->d);
    int32_t shp = st == SC_OK ? const_i64(b, 1, &m[j].n) : -1;
    flat[j] = shp < 0 ? -1 : new_value(b, L->values[m[j].x].name, t, 1, &m[j].n);
    if (flat[j] < 0 || emit(b, SC_OP_RESHAPE, base, (int32_t[]){m[j].x, shp}, 2, flat[j], stage,
                            first) < 0)
      st = lerr(b);
  }
  int64_t all_n = S * N, grid[2] = {S, N};
  int32_t cat = st == SC_OK ? new_value(b, "bucket", t, 1, &N) : -1;
  int32_t all = cat < 0 ? -1 : new_value(b, "bucket_gathered", t, 1, &all_n);
  int32_t gshape = all < 0 ? -1 : const_i64(b, 2, grid);
  int32_t g2 = gshape < 0 ? -1 : new_value(b, "bucket_gathered", t, 2, grid);
  if (st == SC_OK && g2 < 0) st = lerr(b);
  int32_t nc = st == SC_OK ? emit(b, SC_OP_CONCAT, base, flat, k, cat, stage, first) : -1;
  if (st == SC_OK && (nc < 0 || attr_int(b, nc, "axis", 0) != SC_OK)) st = lerr(b);
  int32_t ng = st == SC_OK ? emit(b, SC_OP_ALL_GATHER, base, &cat, 1, all, stage, first) : -1;
  if (st == SC_OK && ng < 0) st = lerr(b);
  if (st == SC_OK) st = m[0].inner >= 0 ? pair_axes(b, ng) : copy_axes(b, ng, m[0].node);
  if (st == SC_OK && attr_int(b, ng, "axis", 0) != SC_OK) st = lerr(b);
  if (st == SC_OK && m[0].inner >= 0)
    all = reorder(b, all, axis_size(b->p, b->p->ep_axis), axis_size(b->p, b->p->fsdp_axis), N,
                  base, stage, first);
  if (st == SC_OK && (all < 0 || emit(b, SC_OP_RESHAPE, base, (int32_t[]){all, gshape}, 2, g2,
                                      stage, first) < 0))
    st = lerr(b);
  for (int32_t j = 0, off = 0; st == SC_OK && j < k; off += (int32_t)m[j].n, j++) {
    const sc_value y = L->values[m[j].y]; /* a copy: adding values moves the array */
    int64_t lo[2] = {0, off}, hi[2] = {S, off + m[j].n}, axes[2] = {0, 1}, piece[2] = {S, m[j].n};
    int32_t c_lo = const_i64(b, 2, lo), c_hi = const_i64(b, 2, hi), c_ax = const_i64(b, 2, axes);
    int32_t c_sh = const_i64(b, y.rank, y.dims);
    int32_t sl = c_sh < 0 ? -1 : new_value(b, y.name, t, 2, piece);
    int32_t full = sl < 0 ? -1 : new_value(b, y.name, t, y.rank, y.dims);
    /* copied out where the member was gathered: the bucket stays for the
     * block, each copy lives only as long as the parameter's own gather did */
    int32_t out = at >= 0 ? at : m[j].node;
    if (full < 0 ||
        emit(b, SC_OP_SLICE, base, (int32_t[]){g2, c_lo, c_hi, c_ax}, 4, sl, stage, out) < 0 ||
        emit(b, SC_OP_RESHAPE, base, (int32_t[]){sl, c_sh}, 2, full, stage, out) < 0) {
      st = lerr(b);
      break;
    }
    to_identity(b, m[j].node, full); /* the old gather */
    if (m[j].inner >= 0) { /* and the pair's first, read by it alone */
      L->nodes[m[j].inner].flags |= SC_NODE_DEAD;
      L->values[L->nodes[m[j].inner].outputs[0]].flags |= SC_VALUE_DEAD;
      b->dead = true;
    }
    if (at >= 0 && !put(b, m[j].node, at)) st = nomem(b->d);
    for (int32_t c = 0; at >= 0 && c < m[j].n_chain && st == SC_OK; c++) /* after it, in order */
      if (!put(b, m[j].chain[c], at)) st = nomem(b->d);
  }
  sc_free(flat);
  return st;
}

/* Puts every placed node before the old node it goes before (stable, in
 * the order they were placed); an old node that was moved leaves its own
 * place. */
static sc_status place(bucketer *b) {
  sc_graph *L = b->L;
  int32_t n = L->n_nodes, n_old = b->first_new;
  int32_t *order = sc_malloc(((size_t)n + 1) * sizeof *order);
  int32_t *count = sc_calloc((size_t)n_old + 2, sizeof *count);
  int32_t *start = sc_malloc(((size_t)n_old + 2) * sizeof *start);
  int32_t *fill = sc_calloc((size_t)n_old + 2, sizeof *fill);
  sc_node *nodes = sc_malloc(((size_t)n + 1) * sizeof *nodes);
  sc_status st = order && count && start && fill && nodes ? SC_OK : nomem(b->d);
  if (st == SC_OK) { /* insert_at == n_old: at the end */
    for (int32_t k = 0; k < b->n_new; k++) count[b->insert_at[k]]++;
    int32_t w = 0;
    for (int32_t i = 0; i <= n_old; i++) {
      start[i] = w;
      w += count[i] + (i < n_old && !b->moved[i]);
    }
    SC_ASSERT(w == n);
    for (int32_t k = 0; k < b->n_new; k++) {
      int32_t i = b->insert_at[k];
      order[start[i] + fill[i]++] = b->ins_node[k];
    }
    for (int32_t i = 0; i < n_old; i++)
      if (!b->moved[i]) order[start[i] + count[i]] = i;
    sc_graph_permute_nodes(L, order, nodes);
  }
  sc_free(order);
  sc_free(count);
  sc_free(start);
  sc_free(fill);
  sc_free(nodes);
  return st;
}

/* Places what was made (st OK), drops the nodes marked dead, verifies the
 * graph, frees the lists. */
static sc_status finish(bucketer *b, sc_status st) {
  if (st == SC_OK && b->n_new > 0) st = place(b);
  if (st == SC_OK && b->dead && sc_graph_compact(b->L) != SC_OK) st = lerr(b);
  if (st == SC_OK && sc_graph_verify(b->L, true) != SC_OK) {
    *b->d = b->L->diag;
    st = b->d->status;
  }
  sc_free(b->insert_at);
  sc_free(b->ins_node);
  sc_free(b->moved);
  return st;
}

/* ---- gradient reductions (sc_partition_bucket_reductions) ---- */

/* The first node reading value v (sc_graph_users' off and users), or
 * L->n_nodes for a graph output nothing reads, INT32_MAX for none. */
static int32_t first_use(const sc_graph *L, const int32_t *off, const int32_t *users, int32_t v) {
  if (off[v + 1] > off[v]) return users[off[v]];
  return L->values[v].flags & SC_VALUE_OUTPUT ? L->n_nodes : INT32_MAX;
}

typedef struct rmember {
  int32_t pair;        /* the old ReduceScatter over ep that alone reads
                          rs's result (ep first in the mesh, inner_scatter):
                          the two run as one over the group, or -1 */
  int32_t rs, ar;      /* the old ReduceScatter over fsdp, or -1; the
                          AllReduce of its result over the replicas (HSDP),
                          or without one of the gradient itself, or -1 */
  int32_t ar2;         /* without a reduce-scatter, the AllReduce over
                          other axes that alone reads ar's result (a
                          gradient pending over two groups: dp, then cp's
                          tokens or a sequence-parallel norm's tp), or -1 */
  int32_t g, y;        /* the full gradient, and the member's result */
  int32_t use;         /* the first node reading y (first_use), or
                          reading the chain's last value */
  int64_t n;           /* elements of the full gradient */
  int32_t chain[CHAIN], n_chain; /* the nodes that only retype or reshape y
                          into "grad:P" (reduced_param), moved with it */
  bool chained;        /* its first reader is another collective (a
                          sequence-parallel norm weight's gradient, pending
                          over dp and tp: its tp all-reduce reads the dp
                          one's result at once) */
} rmember;

/* The node a member's collectives begin with (its place in node order). */
static int32_t head(const rmember *m) { return m->rs >= 0 ? m->rs : m->ar; }

/* P when value v is "grad:P" of a parameter P, or its flat view
 * "grad:P.flat" (flat.c), or the mean over accumulated microbatches
 * Mul("new:accum:P", a scalar) (passes/train.c: reduced once, in the
 * step's last run), else NULL. */
static const char *grad_param(const bucketer *b, int32_t v) {
  const sc_value *g = &b->L->values[v];
  const char *rest = g->name && strncmp(g->name, "grad:", 5) == 0
                         ? g->name + 5
                         : sc_partition_accum_mean_of(b->L, v);
  if (!rest || g->rank < 1) return NULL;
  const char *pp = sc_partition_param_of(b->p, rest);
  size_t n = pp ? strlen(pp) : 0;
  return pp && (!rest[n] || strcmp(rest + n, ".flat") == 0) ? pp : NULL;
}

/* P when all-reduced value y becomes "grad:P" of a parameter P through
 * nothing but a chain of sole readers that only retype or reshape it
 * (Cast, Reshape, Identity, Squeeze, Unsqueeze, Flatten: a bf16 step's
 * gradient is all-reduced in bf16, before the Cast back to P's f32), else
 * NULL (users: sc_graph_users' off and users); the chain's nodes through
 * m->chain, its last value's first reader through m->use. */
static const char *reduced_param(const bucketer *b, const int32_t *off, const int32_t *users,
                                 int32_t y, rmember *m) {
  const sc_graph *L = b->L;
  m->n_chain = 0;
  for (int32_t hop = 0; hop <= CHAIN; hop++) {
    const char *pp = grad_param(b, y);
    if (pp) {
      m->use = first_use(L, off, users, y);
      return pp;
    }
    if (hop == CHAIN) return NULL;
    if (off[y + 1] - off[y] != 1 || (L->values[y].flags & SC_VALUE_OUTPUT)) return NULL;
    const sc_node *r = &L->nodes[users[off[y]]];
    bool moves = r->op == SC_OP_CAST || r->op == SC_OP_RESHAPE || r->op == SC_OP_IDENTITY ||
                 r->op == SC_OP_SQUEEZE || r->op == SC_OP_UNSQUEEZE || r->op == SC_OP_FLATTEN;
    if (!moves || r->n_inputs < 1 || r->inputs[0] != y || r->n_outputs != 1 || r->outputs[0] < 0)
      return NULL;
    m->chain[m->n_chain++] = users[off[y]];
    y = r->outputs[0];
  }
  return NULL;
}

/* Whether local value v is a narrowing Cast of "grad:P" read by nothing
 * else (off, users: sc_graph_users'): the gradient cast to the reduce
 * dtype for its reduce-scatter (--reduce-dtype bf16, localize.c's
 * reshard); its parameter P, else NULL. */
static const char *cast_grad_param(const bucketer *b, const int32_t *off, const int32_t *users,
                                   int32_t v) {
  const sc_graph *L = b->L;
  const sc_value *x = &L->values[v];
  if (x->producer < 0 || off[v + 1] - off[v] != 1 || (x->flags & SC_VALUE_OUTPUT)) return NULL;
  const sc_node *c = &L->nodes[x->producer];
  if (c->op != SC_OP_CAST || c->n_inputs != 1 || c->inputs[0] < 0) return NULL;
  const sc_value *g = &L->values[c->inputs[0]];
  if (sc_dtype_size(x->dtype) >= sc_dtype_size(g->dtype)) return NULL;
  return grad_param(b, c->inputs[0]);
}

/* Whether node i reduce-scatters "grad:P" of a parameter P (or its cast
 * to the reduce dtype: cast_grad_param) along dim 0 over a storage group
 * (storage_size) into pieces of S; P through *param. */
static bool rs_candidate(const bucketer *b, const int32_t *off, const int32_t *users, int32_t i,
                         const char **param) {
  const sc_node *n = &b->L->nodes[i];
  if (n->op != SC_OP_REDUCE_SCATTER || n->n_inputs != 1 || n->n_outputs != 1 ||
      n->inputs[0] < 0 || n->outputs[0] < 0)
    return false;
  const sc_attr *dim = sc_node_attr(n, "axis");
  int64_t S = storage_size(b->p, n);
  if (!S || !dim || dim->i != 0) return false;
  const char *pp = grad_param(b, n->inputs[0]);
  if (!pp) pp = cast_grad_param(b, off, users, n->inputs[0]);
  if (!pp || b->L->values[n->inputs[0]].dims[0] % S != 0) return false;
  *param = pp;
  return true;
}

/* With ep before fsdp in the mesh, localize reduce-scatters the storage
 * group of a parameter outside the experts axis by axis (as it gathers it:
 * inner_gather), over fsdp and then over ep: for such a pair's first, node
 * i, the second, which alone reads its result, else -1. */
static int32_t inner_scatter(const bucketer *b, const int32_t *off, const int32_t *users,
                             int32_t i) {
  const sc_partition *p = b->p;
  const sc_graph *L = b->L;
  int32_t y = L->nodes[i].outputs[0];
  if (p->ep_axis < 0 || p->ep_axis > p->fsdp_axis || off[y + 1] - off[y] != 1 ||
      (L->values[y].flags & SC_VALUE_OUTPUT))
    return -1;
  int32_t j = users[off[y]];
  const sc_node *n = &L->nodes[j];
  const sc_attr *ax = sc_node_attr(n, "axes"), *dim = sc_node_attr(n, "axis");
  bool over_ep = n->op == SC_OP_REDUCE_SCATTER && n->n_inputs == 1 && n->n_outputs == 1 &&
                 n->outputs[0] >= 0 && ax && ax->n == 1 &&
                 strcmp(ax->strings[0], p->mesh.axes[p->ep_axis].name) == 0 && dim &&
                 dim->i == 0 && L->values[y].dims[0] % axis_size(p, p->ep_axis) == 0;
  return over_ep ? j : -1;
}

/* Whether node i is an AllReduce (over any axes, of one input and output). */
static bool is_all_reduce(const sc_graph *L, int32_t i) {
  const sc_node *n = &L->nodes[i];
  return n->op == SC_OP_ALL_REDUCE && n->n_inputs == 1 && n->n_outputs == 1 &&
         n->inputs[0] >= 0 && n->outputs[0] >= 0 && sc_node_attr(n, "axes");
}

/* Whether node i (or L->n_nodes, INT32_MAX: none) is a collective. */
static bool is_collective(const sc_graph *L, int32_t i) {
  if (i < 0 || i >= L->n_nodes) return false;
  sc_op op = L->nodes[i].op;
  return op == SC_OP_ALL_REDUCE || op == SC_OP_REDUCE_SCATTER || op == SC_OP_ALL_GATHER ||
         op == SC_OP_ALL_TO_ALL;
}

/* Whether reductions a and b (all-reduces or reduce-scatters, or -1 for
 * none) reduce alike: none, or the same axes in the same order and the same
 * "op". */
static bool same_reduction(const sc_graph *L, int32_t a, int32_t b) {
  if (a < 0 || b < 0) return a == b;
  const sc_attr *xa = sc_node_attr(&L->nodes[a], "axes"), *xb = sc_node_attr(&L->nodes[b], "axes");
  if (xa->n != xb->n) return false;
  for (int64_t k = 0; k < xa->n; k++)
    if (strcmp(xa->strings[k], xb->strings[k]) != 0) return false;
  const sc_attr *oa = sc_node_attr(&L->nodes[a], "op"), *ob = sc_node_attr(&L->nodes[b], "op");
  const char *sa = oa && oa->s ? oa->s : "sum", *sb = ob && ob->s ? ob->s : "sum";
  return strcmp(sa, sb) == 0;
}

/* The group's bucket: at the place of its last member (head), with a
 * reduce-scatter over fsdp (S ranks)
 *   v_t = Reshape(g_t, [S, n_t/S])      (rank r's piece is row r)
 *   flat = Reshape(Concat(v_1..v_k, axis 1), [N])
 *   red = ReduceScatter(flat) over fsdp  [N/S], then the members'
 *         AllReduce over the replicas when they have one
 *   y_t = Reshape(Slice(red, [o_t/S], [(o_t + n_t)/S]), y_t's shape)
 * and without one (S = 1), the members' AllReduce of
 *   flat = Concat(Reshape(g_1, [n_1]), ..., Reshape(g_k, [n_k]))   [N]
 * (a sum is elementwise: any layout of the members reduces alike); every
 * old member node becomes an Identity of its y_t, moved there too. */
static sc_status bucket_rs(bucketer *b, const rmember *m, int32_t k, int64_t S) {
  sc_graph *L = b->L;
  int32_t at = head(&m[k - 1]);
  bool scatter = m[0].rs >= 0;
  int64_t stage = stage_of(&L->nodes[at]);
  sc_dtype t = L->values[m[0].g].dtype;
  char base[600];
  snprintf(base, sizeof base, "%s", L->nodes[at].name);
  int64_t N = 0;
  for (int32_t j = 0; j < k; j++) N += m[j].n;
  int32_t *rows = sc_malloc((size_t)k * sizeof *rows);
  if (!rows) return nomem(b->d);
  sc_status st = SC_OK;
  for (int32_t j = 0; st == SC_OK && j < k; j++) {
    int64_t grid[2] = {S, m[j].n / S};
    const int64_t *shape = scatter ? grid : &m[j].n;
    int32_t shp = const_i64(b, scatter ? 2 : 1, shape);
    rows[j] = shp < 0 ? -1 : new_value(b, L->values[m[j].g].name, t, scatter ? 2 : 1, shape);
    if (rows[j] < 0 ||
        emit(b, SC_OP_RESHAPE, base, (int32_t[]){m[j].g, shp}, 2, rows[j], stage, at) < 0)
      st = lerr(b);
  }
  int64_t grid[2] = {S, N / S}, piece = N / S;
  int32_t cat = st == SC_OK ? new_value(b, "bucket", t, scatter ? 2 : 1, scatter ? grid : &N)
                            : -1;
  int32_t nc = cat < 0 ? -1 : emit(b, SC_OP_CONCAT, base, rows, k, cat, stage, at);
  if (st == SC_OK && (nc < 0 || attr_int(b, nc, "axis", scatter ? 1 : 0) != SC_OK)) st = lerr(b);
  int32_t red = cat;
  if (st == SC_OK && scatter) {
    int32_t fshape = const_i64(b, 1, &N);
    int32_t flat = fshape < 0 ? -1 : new_value(b, "bucket", t, 1, &N);
    red = flat < 0 ? -1 : new_value(b, "bucket_reduced", t, 1, &piece);
    if (red >= 0 && m[0].pair >= 0) /* the rows in the group's key order */
      cat = reorder(b, cat, axis_size(b->p, b->p->fsdp_axis), axis_size(b->p, b->p->ep_axis),
                    N / S, base, stage, at);
    if (red < 0 || cat < 0 ||
        emit(b, SC_OP_RESHAPE, base, (int32_t[]){cat, fshape}, 2, flat, stage, at) < 0)
      st = lerr(b);
    int32_t nr = st == SC_OK ? emit(b, SC_OP_REDUCE_SCATTER, base, &flat, 1, red, stage, at) : -1;
    if (st == SC_OK && nr < 0) st = lerr(b);
    if (st == SC_OK) st = m[0].pair >= 0 ? pair_axes(b, nr) : copy_axes(b, nr, m[0].rs);
    if (st == SC_OK && attr_int(b, nr, "axis", 0) != SC_OK) st = lerr(b);
  }
  for (int32_t c = 0; c < 2 && st == SC_OK; c++) { /* the members' all-reduces, once */
    int32_t old = c ? m[0].ar2 : m[0].ar;
    if (old < 0) continue;
    int32_t sum = new_value(b, "bucket_reduced", t, 1, &piece);
    int32_t na = sum < 0 ? -1 : emit(b, SC_OP_ALL_REDUCE, base, &red, 1, sum, stage, at);
    if (na < 0) st = lerr(b);
    else st = copy_axes(b, na, old);
    red = sum;
  }
  int64_t off = 0;
  for (int32_t j = 0; st == SC_OK && j < k; off += m[j].n, j++) {
    const sc_value y = L->values[m[j].y]; /* a copy: adding values moves the array */
    int64_t lo = off / S, hi = (off + m[j].n) / S, axis0 = 0, len = m[j].n / S;
    int32_t c_lo = const_i64(b, 1, &lo), c_hi = const_i64(b, 1, &hi);
    int32_t c_ax = const_i64(b, 1, &axis0);
    int32_t c_sh = const_i64(b, y.rank, y.dims);
    int32_t sl = c_sh < 0 ? -1 : new_value(b, y.name, t, 1, &len);
    int32_t full = sl < 0 ? -1 : new_value(b, y.name, t, y.rank, y.dims);
    /* copied out where the member's result is first read (the collective
     * runs meanwhile); the old nodes become Identities of it there (the
     * reduce-scatter's, read only by the all-reduce it had, is dead) */
    int32_t use = m[j].use < b->first_new ? m[j].use : b->first_new;
    if (full < 0 ||
        emit(b, SC_OP_SLICE, base, (int32_t[]){red, c_lo, c_hi, c_ax}, 4, sl, stage, use) < 0 ||
        emit(b, SC_OP_RESHAPE, base, (int32_t[]){sl, c_sh}, 2, full, stage, use) < 0) {
      st = lerr(b);
      break;
    }
    if (m[j].pair >= 0) { /* the pair's first, read by its second alone */
      L->nodes[m[j].rs].flags |= SC_NODE_DEAD;
      L->values[L->nodes[m[j].rs].outputs[0]].flags |= SC_VALUE_DEAD;
      b->dead = true;
    }
    for (int32_t c = 0; c < 3 && st == SC_OK; c++) {
      int32_t old = c == 2 ? m[j].ar2 : c ? m[j].ar : m[j].pair >= 0 ? m[j].pair : m[j].rs;
      if (old < 0) continue;
      to_identity(b, old, full);
      if (!put(b, old, use)) st = nomem(b->d);
    }
    for (int32_t c = 0; c < m[j].n_chain && st == SC_OK; c++) /* after it, in order */
      if (!put(b, m[j].chain[c], use)) st = nomem(b->d);
  }
  sc_free(rows);
  return st;
}

/* The block names (stats) and an empty bucketer over p->local. */
static sc_status begin(sc_partition *p, sc_diag *d, sc_stats *stats, bucketer *b) {
  if (sc_stats_begin(p->global, stats) != SC_OK) {
    *d = p->global->diag;
    return d->status;
  }
  *b = (bucketer){.p = p, .L = p->local, .d = d, .first_new = p->local->n_nodes};
  return SC_OK;
}

sc_status sc_partition_bucket_gathers(sc_partition *p, sc_diag *d) {
  if (p->fsdp_axis < 0 || !p->local) return SC_OK;
  /* ZeRO-3 gathers the parameters before their use, ZeRO-1/2 the updated
   * parameters after the update (update_candidate): both bucketed; a pair
   * (ep before fsdp) outside the buckets is made one collective */
  bool update = p->zero_stage == 1 || p->zero_stage == 2;
  bool buckets = p->zero_stage == 3 || update;
  if (!buckets && (p->ep_axis < 0 || p->ep_axis > p->fsdp_axis)) return SC_OK;
  sc_graph *L = p->local;
  sc_stats stats;
  bucketer b;
  if (begin(p, d, &stats, &b) != SC_OK) return d->status;
  int32_t n0 = L->n_nodes;
  /* one open group per dtype and storage group (GATHER_SLOTS at once): a
   * bf16 step gathers its products' weights in bf16 and its norms' in f32,
   * interleaved; under fsdp x ep a block's experts over fsdp, the rest
   * over fsdp and ep */
  enum { GATHER_SLOTS = 4 };
  member *open = sc_malloc(((size_t)n0 + 1) * GATHER_SLOTS * sizeof *open);
  const char **params = sc_malloc(((size_t)n0 + 1) * GATHER_SLOTS * sizeof *params);
  b.moved = sc_calloc((size_t)n0 + 1, sizeof *b.moved);
  int32_t k[GATHER_SLOTS] = {0}, n_groups = 0, *off = NULL, *users = NULL;
  int64_t key_stage = -1, key_block = -2, key_S[GATHER_SLOTS] = {0};
  sc_dtype key_t[GATHER_SLOTS];
  for (int32_t q = 0; q < GATHER_SLOTS; q++) key_t[q] = SC_DTYPE_UNDEF;
  sc_status st = open && params && b.moved && sc_graph_users(L, &off, &users) == SC_OK
                    ? SC_OK
                    : nomem(d);
  for (int32_t i = 0; st == SC_OK && i <= n0; i++) {
    const char *param = NULL;
    int32_t inner = -1;
    int64_t S = 0;
    member mi = {.node = i, .inner = -1};
    bool cand = i < n0 && (update ? inner_gather(&b, off, i) < 0 &&
                                        update_candidate(&b, off, users, i, &param, &mi)
                                  : candidate(&b, off, i, &param, &inner, &S));
    if (update && cand) S = storage_size(p, &L->nodes[i]);
    int64_t stage = cand ? stage_of(&L->nodes[i]) : -1;
    int64_t block = cand && stats.block_key ? sc_stats_block_of_name(stats.block_key, param) : -1;
    /* outside blocks (embeddings, the last norm): used far apart, gathered
     * alone; a pair alone (or one of values, not parameters) too, as one
     * gather over its group */
    if (!cand && i < n0) inner = inner_gather(&b, off, i);
    if (inner >= 0 && (!cand || block < 0 || !buckets)) {
      member one = {.node = i, .inner = inner, .x = L->nodes[inner].inputs[0],
                    .y = L->nodes[i].outputs[0]};
      one.n = sc_value_numel(&L->values[one.x]);
      st = bucket(&b, &one, 1, axis_size(p, p->fsdp_axis) * axis_size(p, p->ep_axis), -1);
      continue;
    }
    cand &= buckets && block >= 0;
    int32_t x = cand ? L->nodes[inner >= 0 ? inner : i].inputs[0] : -1;
    sc_dtype t = cand ? L->values[x].dtype : SC_DTYPE_UNDEF;
    if (!cand) S = 0;
    int32_t s = 0; /* the slot of the dtype and group, or the one to give way */
    while (s < GATHER_SLOTS && (key_t[s] != t || key_S[s] != S)) s++;
    if (s == GATHER_SLOTS) {
      s = 0;
      while (s < GATHER_SLOTS - 1 && key_t[s] != SC_DTYPE_UNDEF && k[s] != 0) s++;
    }
    bool again = false;
    for (int32_t j = 0; cand && j < k[s] && !again; j++)
      again = strcmp(params[(size_t)s * (n0 + 1) + j], param) == 0;
    bool moved_on = i == n0 || (cand && (stage != key_stage || block != key_block));
    for (int32_t q = 0; q < GATHER_SLOTS && st == SC_OK; q++) {
      bool close = moved_on || (cand && q == s && (key_t[q] != t || key_S[q] != S || again));
      if (!close) continue;
      if (k[q] >= 2 || (k[q] == 1 && open[(size_t)q * (n0 + 1)].inner >= 0)) {
        const member *o = open + (size_t)q * (n0 + 1);
        st = bucket(&b, o, k[q], key_S[q], update ? o[k[q] - 1].node + 1 : -1);
        n_groups++;
      }
      k[q] = 0;
      key_t[q] = SC_DTYPE_UNDEF;
      key_S[q] = 0;
    }
    if (!cand || st != SC_OK) continue;
    mi.inner = inner;
    mi.x = x;
    mi.y = L->nodes[i].outputs[0];
    mi.n = sc_value_numel(&L->values[x]);
    open[(size_t)s * (n0 + 1) + k[s]] = mi;
    params[(size_t)s * (n0 + 1) + k[s]++] = param;
    key_stage = stage;
    key_block = block;
    key_t[s] = t;
    key_S[s] = S;
  }
  st = finish(&b, st);
  sc_free(open);
  sc_free(params);
  sc_free(off);
  sc_free(users);
  sc_stats_free(&stats);
  (void)n_groups;
  return st;
}

bool sc_partition_bucket_takes(int64_t open_bytes, bool capped) {
  return !capped || open_bytes < SC_PARTITION_BUCKET_CAP_BYTES;
}

int32_t sc_partition_bucket_count(const int64_t *bytes, const int32_t *dtype, int32_t n,
                                  bool capped) {
  /* one open group per dtype, as sc_partition_bucket_reductions keeps */
  enum { KEYS = 4 };
  int32_t groups = 0, key[KEYS], used = 0;
  int64_t open_bytes[KEYS];
  for (int32_t i = 0; i < n; i++) {
    int32_t j = 0;
    while (j < used && key[j] != dtype[i]) j++;
    if (j == used) { /* a new dtype; every slot holds another: the first gives way */
      if (used == KEYS) j = 0;
      else used++;
      key[j] = dtype[i];
      open_bytes[j] = 0;
      groups++;
    } else if (!sc_partition_bucket_takes(open_bytes[j], capped)) {
      groups++;
      open_bytes[j] = 0;
    }
    open_bytes[j] += bytes[i];
  }
  return groups;
}


enum { RGROUPS = 4 }; /* open groups at once: dtypes x kinds a block mixes */

/* An open group of gradient reductions: its members, their first
 * reader, their bytes, and its dtype. */
typedef struct rgroup {
  rmember *m;
  int32_t k, use;
  int64_t bytes;
  sc_dtype t;
} rgroup;

/* Closes group g (a bucket when it has two members or more). */
static sc_status close_group(bucketer *b, rgroup *g) {
  sc_status st = SC_OK;
  const sc_partition *p = b->p;
  if (g->k >= 2 || (g->k == 1 && g->m[0].pair >= 0)) /* a pair alone: one collective too */
    st = bucket_rs(b, g->m, g->k,
                   g->m[0].pair >= 0 ? axis_size(p, p->fsdp_axis) * axis_size(p, p->ep_axis)
                   : g->m[0].rs >= 0 ? storage_size(p, &b->L->nodes[g->m[0].rs])
                                     : 1);
  g->k = 0;
  g->use = INT32_MAX;
  g->bytes = 0;
  return st;
}

/* Whether open group g, of member m's dtype, kind and all-reduce, takes m
 * at node i: nothing reads an earlier member's result before i, and there
 * is room (all-reduces alone are capped as DDP's buckets: a bucket takes
 * members until it holds the cap or more, DDP's
 * compute_bucket_assignment_by_size; fsdp's reduce-scatters are grouped
 * per block whole, as FSDP wraps a block). */
static bool joins(const rgroup *g, const rmember *m, int32_t i) {
  return g->use > i && sc_partition_bucket_takes(g->bytes, m->rs < 0);
}

/* The last node of the reduction that node rs (a reduce-scatter, an
 * rs_candidate) begins: rs, or the AllReduce over the replicas that alone
 * reads its result (HSDP), then the Cast back from the reduce dtype that
 * alone reads that; its nodes through tail (n_tail of them after rs). */
static int32_t rs_tail(const sc_graph *L, const int32_t *off, const int32_t *users, int32_t rs,
                       int32_t tail[2], int32_t *n_tail) {
  int32_t last = rs;
  *n_tail = 0;
  for (int32_t k = 0; k < 2; k++) {
    int32_t y = L->nodes[last].outputs[0];
    if (off[y + 1] - off[y] != 1 || (L->values[y].flags & SC_VALUE_OUTPUT)) break;
    int32_t r = users[off[y]];
    const sc_node *c = &L->nodes[r];
    bool takes = k == 0 ? is_all_reduce(L, r)
                        : c->op == SC_OP_CAST && c->n_inputs == 1 && c->n_outputs == 1;
    if (!takes) {
      if (k == 0) continue; /* no all-reduce: the Cast may follow rs itself */
      break;
    }
    tail[(*n_tail)++] = last = r;
  }
  return last;
}

/* The nodes of the cone of node i after node `after` (the producers it
 * needs, back to `after`, but those already moved: placed[k] >= 0), in
 * node order, through cone (at most CHAIN, counting i): false when it is
 * larger, holds a collective or crosses into another piece. seen:
 * [n_nodes] false on entry and on return. */
static bool cone_of(const sc_graph *L, int32_t i, int32_t after, const int32_t *placed,
                    int32_t *cone, int32_t *n_cone, bool *seen) {
  int32_t n = 0, stage = (int32_t)stage_of(&L->nodes[i]);
  bool ok = true;
  cone[n++] = i;
  seen[i] = true;
  for (int32_t at = 0; ok && at < n; at++) {
    const sc_node *nd = &L->nodes[cone[at]];
    for (int32_t k = 0; ok && k < nd->n_inputs; k++) {
      int32_t v = nd->inputs[k], pr = v >= 0 ? L->values[v].producer : -1;
      if (pr <= after || seen[pr] || placed[pr] >= 0) continue;
      ok = n < CHAIN && !is_collective(L, pr) && stage_of(&L->nodes[pr]) == stage;
      if (ok) {
        seen[pr] = true;
        cone[n++] = pr;
      }
    }
  }
  for (int32_t k = 0; k < n; k++) seen[cone[k]] = false;
  if (!ok) return false;
  for (int32_t a = 1; a < n; a++) /* node order: a few, by insertion */
    for (int32_t c = a; c > 0 && cone[c - 1] > cone[c]; c--) {
      int32_t t = cone[c];
      cone[c] = cone[c - 1];
      cone[c - 1] = t;
    }
  *n_cone = n;
  return true;
}

/* Reorders the graph so that a block's gradient reductions can form one
 * bucket where something reads a member's result before the next member
 * is reduced: a pipelined norm piece makes each parameter's mean, reduces
 * it and sums its square before the next parameter's (the flat view's
 * reduce-scatter read at once by the norm's square). Each such later
 * member (its reduction, the few nodes making its gradient since the
 * previous member's, none a collective, and its tail: rs_tail) is moved
 * right after the previous member's; its readers stay where they are. */
static sc_status hoist_reductions(bucketer *b, const sc_stats *stats) {
  sc_graph *L = b->L;
  int32_t n = L->n_nodes, *off = NULL, *users = NULL;
  if (sc_graph_users(L, &off, &users) != SC_OK) return nomem(b->d);
  int32_t *anchor = sc_malloc(((size_t)n + 1) * sizeof *anchor); /* moved: after which node */
  int32_t *order = sc_malloc(((size_t)n + 1) * sizeof *order);  /* moved nodes, in order */
  bool *result = sc_calloc((size_t)L->n_values + 1, sizeof *result);
  bool *seen = sc_calloc((size_t)n + 1, sizeof *seen);
  sc_node *tmp = sc_malloc(((size_t)n + 1) * sizeof *tmp);
  sc_status st = anchor && order && result && seen && tmp ? SC_OK : nomem(b->d);
  int32_t n_moved = 0, run = -1, last = -1, n_results = 0;
  int32_t *res = st == SC_OK ? sc_malloc(((size_t)n + 1) * sizeof *res) : NULL;
  if (st == SC_OK && !res) st = nomem(b->d);
  int64_t key_stage = -1, key_block = -2;
  for (int32_t i = 0; st == SC_OK && i < n; i++) anchor[i] = -1;
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    const char *param = NULL;
    if (!rs_candidate(b, off, users, i, &param)) continue;
    int64_t block = stats->block_key ? sc_stats_block_of_name(stats->block_key, param) : -1;
    int64_t stage = stage_of(&L->nodes[i]);
    int32_t tail[2], n_tail, end = rs_tail(L, off, users, i, tail, &n_tail);
    bool same = block >= 0 && run >= 0 && stage == key_stage && block == key_block;
    bool blocked = false; /* a node since the previous member reads a result */
    for (int32_t j = last + 1; same && j < i && !blocked; j++) {
      const sc_node *nd = &L->nodes[j];
      for (int32_t k = 0; anchor[j] < 0 && k < nd->n_inputs && !blocked; k++)
        blocked = nd->inputs[k] >= 0 && result[nd->inputs[k]];
    }
    int32_t cone[CHAIN], n_cone = 0;
    if (blocked && cone_of(L, i, run, anchor, cone, &n_cone, seen)) {
      for (int32_t k = 0; k < n_cone + n_tail; k++) {
        int32_t nd = k < n_cone ? cone[k] : tail[k - n_cone];
        anchor[nd] = run;
        order[n_moved++] = nd;
      }
    } else if (same && !blocked) { /* it stays where it is: the next after it */
      run = end;
    } else { /* a new run begins at this member, where it is */
      for (int32_t k = 0; k < n_results; k++) result[res[k]] = false;
      n_results = 0;
      run = block >= 0 ? end : -1;
    }
    last = end;
    res[n_results++] = L->nodes[end].outputs[0];
    result[L->nodes[end].outputs[0]] = true;
    key_stage = stage;
    key_block = block;
  }
  if (st == SC_OK && n_moved > 0) { /* each run's moved nodes right after its anchor */
    int32_t *perm = sc_malloc(((size_t)n + 1) * sizeof *perm);
    if (!perm) st = nomem(b->d);
    for (int32_t i = 0, w = 0, k = 0; perm && i < n; i++) { /* runs' anchors ascend */
      if (anchor[i] >= 0) continue;
      perm[w++] = i;
      for (; k < n_moved && anchor[order[k]] == i; k++) perm[w++] = order[k];
    }
    if (perm) sc_graph_permute_nodes(L, perm, tmp);
    sc_free(perm);
  }
  sc_free(res);
  sc_free(anchor);
  sc_free(order);
  sc_free(result);
  sc_free(seen);
  sc_free(tmp);
  sc_free(off);
  sc_free(users);
  return st;
}

/* Whether node i all-reduces a scalar by a sum, its result read by one Add
 * alone (a running sum's term: the gradient norm's square of a sharded
 * gradient, added to a replicated sum). */
static bool scalar_term(const sc_graph *L, const int32_t *off, const int32_t *users, int32_t i) {
  if (!is_all_reduce(L, i)) return false;
  const sc_node *n = &L->nodes[i];
  const sc_attr *op = sc_node_attr(n, "op");
  int32_t y = n->outputs[0];
  if (L->values[y].rank != 0 || (op && op->s && strcmp(op->s, "sum") != 0) ||
      off[y + 1] - off[y] != 1 || (L->values[y].flags & SC_VALUE_OUTPUT))
    return false;
  const sc_node *a = &L->nodes[users[off[y]]];
  return a->op == SC_OP_ADD && a->n_inputs == 2 && a->n_outputs == 1 && a->outputs[0] >= 0 &&
         a->inputs[0] != a->inputs[1];
}

/* Whether Add node a's sum reaches Add node to through Adds alone, each
 * value on the way read once (by the next) and no step output. */
static bool sums_into(const sc_graph *L, const int32_t *off, const int32_t *users, int32_t a,
                      int32_t to) {
  for (int32_t hop = 0; hop < 4 * CHAIN; hop++) {
    int32_t v = L->nodes[a].outputs[0];
    if (v < 0 || off[v + 1] - off[v] != 1 || (L->values[v].flags & SC_VALUE_OUTPUT)) return false;
    a = users[off[v]];
    if (a == to) return true;
    if (L->nodes[a].op != SC_OP_ADD || L->nodes[a].n_outputs != 1) return false;
  }
  return false;
}

/* A run of k >= 2 scalar_terms ar[0..k) whose Adds sum into one another
 * (sums_into) becomes one all-reduce: the terms' partial values are summed
 * where each is made (q = p_1 + ... + p_k, each partial over the same axes,
 * so their sum is the partial of the sum), the last all-reduce reduces q,
 * and its Add adds it; the earlier Adds pass their running sum on
 * (Identities) and the earlier all-reduces are Identities nothing reads. */
static sc_status merge_terms(bucketer *b, const int32_t *off, const int32_t *users,
                             const int32_t *ar, int32_t k) {
  sc_graph *L = b->L;
  int32_t q = L->nodes[ar[0]].inputs[0];
  for (int32_t j = 1; j < k; j++) {
    int32_t pj = L->nodes[ar[j]].inputs[0];
    sc_value pv = L->values[pj]; /* a copy: adding values moves the array */
    int32_t s = new_value(b, "norm_terms", pv.dtype, 0, NULL);
    if (s < 0 || emit(b, SC_OP_ADD, L->nodes[ar[j]].name, (int32_t[]){q, pj}, 2, s,
                      stage_of(&L->nodes[ar[j]]), ar[j]) < 0)
      return lerr(b);
    q = s;
  }
  for (int32_t j = 0; j < k - 1; j++) {
    int32_t y = L->nodes[ar[j]].outputs[0], a = users[off[y]];
    sc_node *add = &L->nodes[a];
    int32_t run = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    to_identity(b, a, run);
    add->n_inputs = 1;
    to_identity(b, ar[j], L->nodes[ar[j]].inputs[0]);
  }
  L->nodes[ar[k - 1]].inputs[0] = q;
  return SC_OK;
}

/* The gradient norm's all-reduces of scalars merged (merge_terms): a
 * running sum that has become replicated all-reduces each later sharded
 * term on its own, one collective a parameter (ZeRO-1/2: each flat
 * shard's square). */
static sc_status merge_scalar_terms(sc_partition *p, sc_diag *d) {
  sc_graph *L = p->local;
  sc_stats stats;
  bucketer b;
  if (begin(p, d, &stats, &b) != SC_OK) return d->status;
  int32_t n0 = L->n_nodes, *off = NULL, *users = NULL, *run = NULL, k = 0;
  b.moved = sc_calloc((size_t)n0 + 1, sizeof *b.moved);
  run = sc_malloc(((size_t)n0 + 1) * sizeof *run);
  sc_status st = b.moved && run && sc_graph_users(L, &off, &users) == SC_OK ? SC_OK : nomem(d);
  for (int32_t i = 0; st == SC_OK && i <= n0; i++) {
    bool term = i < n0 && scalar_term(L, off, users, i);
    int32_t add = term ? users[off[L->nodes[i].outputs[0]]] : -1;
    bool joins_run = term && k > 0 && stage_of(&L->nodes[i]) == stage_of(&L->nodes[run[0]]) &&
                     same_reduction(L, i, run[0]) &&
                     sums_into(L, off, users, users[off[L->nodes[run[k - 1]].outputs[0]]], add);
    if (i == n0 || (term && !joins_run)) {
      if (k >= 2) st = merge_terms(&b, off, users, run, k);
      k = 0;
    }
    if (term && st == SC_OK) run[k++] = i;
  }
  st = finish(&b, st);
  sc_free(run);
  sc_free(off);
  sc_free(users);
  sc_stats_free(&stats);
  return st;
}

sc_status sc_partition_bucket_reductions(sc_partition *p, sc_diag *d) {
  if (!p->local) return SC_OK;
  sc_graph *L = p->local;
  sc_stats stats;
  bucketer b;
  if (begin(p, d, &stats, &b) != SC_OK) return d->status;
  if (hoist_reductions(&b, &stats) != SC_OK) {
    sc_stats_free(&stats);
    return d->status;
  }
  int32_t n0 = L->n_nodes, *off = NULL, *users = NULL;
  /* one open group per dtype (a bf16 step all-reduces its GEMM weights'
   * gradients in bf16 and its norms' in f32, interleaved: each dtype
   * fills its own bucket, as DDP and Megatron bucket per dtype) */
  rgroup g[RGROUPS] = {{0}};
  for (int32_t j = 0; j < RGROUPS; j++) {
    g[j].m = sc_malloc(((size_t)n0 + 1) * sizeof *g[j].m);
    g[j].use = INT32_MAX;
  }
  b.moved = sc_calloc((size_t)n0 + 1, sizeof *b.moved);
  bool ok = b.moved != NULL;
  for (int32_t j = 0; j < RGROUPS; j++) ok &= g[j].m != NULL;
  sc_status st = ok && sc_graph_users(L, &off, &users) == SC_OK ? SC_OK : nomem(d);
  int64_t key_stage = -1, key_block = -2;
  for (int32_t i = 0; st == SC_OK && i <= n0; i++) {
    const char *param = NULL;
    rmember m = {.pair = -1, .rs = -1, .ar = -1, .ar2 = -1};
    if (i < n0 && rs_candidate(&b, off, users, i, &param)) {
      const sc_node *n = &L->nodes[i];
      m.rs = i;
      m.g = n->inputs[0];
      m.y = n->outputs[0];
      if ((m.pair = inner_scatter(&b, off, users, i)) >= 0) m.y = L->nodes[m.pair].outputs[0];
      int32_t r = first_use(L, off, users, m.y);
      bool sole = off[m.y + 1] - off[m.y] == 1 && !(L->values[m.y].flags & SC_VALUE_OUTPUT);
      if (sole && r < n0 && is_all_reduce(L, r)) { /* HSDP: over the replicas */
        m.ar = r;
        m.y = L->nodes[r].outputs[0];
        r = first_use(L, off, users, m.y);
        sole = off[m.y + 1] - off[m.y] == 1 && !(L->values[m.y].flags & SC_VALUE_OUTPUT);
      }
      /* reduced in the reduce dtype: the Cast back to the gradient's dtype
       * moves with the member's copy-out */
      const sc_node *c = r < n0 ? &L->nodes[r] : NULL;
      if (sole && c && c->op == SC_OP_CAST && !grad_param(&b, m.g) && c->n_outputs == 1 &&
          c->outputs[0] >= 0) {
        m.chain[m.n_chain++] = r;
        m.use = first_use(L, off, users, c->outputs[0]);
      }
    } else if (i < n0 && is_all_reduce(L, i) && L->values[L->nodes[i].inputs[0]].rank >= 1 &&
               ((param = grad_param(&b, L->nodes[i].inputs[0])) ||
                (param = reduced_param(&b, off, users, L->nodes[i].outputs[0], &m)))) {
      m.ar = i; /* no reduce-scatter: plain data parallel, ZeRO 0 */
      m.g = L->nodes[i].inputs[0];
      m.y = L->nodes[i].outputs[0];
      int32_t r = first_use(L, off, users, m.y);
      if (m.n_chain == 0 && off[m.y + 1] - off[m.y] == 1 &&
          !(L->values[m.y].flags & SC_VALUE_OUTPUT) && r < n0 && is_all_reduce(L, r)) {
        m.ar2 = r; /* then over other axes: one member of both */
        m.y = L->nodes[r].outputs[0];
      }
    }
    int64_t block = param && stats.block_key ? sc_stats_block_of_name(stats.block_key, param) : -1;
    /* outside blocks: used far apart, reduced alone (a pair as one) */
    bool cand = param && (block >= 0 || m.pair >= 0);
    int64_t bytes = 0;
    if (cand) {
      m.n = sc_value_numel(&L->values[m.g]);
      if (m.n_chain == 0) m.use = first_use(L, off, users, m.y);
      m.chained = is_collective(L, m.use);
      bytes = m.n * (int64_t)sc_dtype_size(L->values[m.g].dtype);
    }
    if (cand && block < 0) {
      st = bucket_rs(&b, &m, 1, axis_size(p, p->fsdp_axis) * axis_size(p, p->ep_axis));
      continue;
    }
    int64_t stage = cand ? stage_of(&L->nodes[i]) : -1;
    sc_dtype t = cand ? L->values[m.g].dtype : SC_DTYPE_UNDEF;
    if (i == n0 || (cand && (stage != key_stage || block != key_block))) /* close them all */
      for (int32_t j = 0; j < RGROUPS && st == SC_OK; j++) st = close_group(&b, &g[j]);
    if (!cand || st != SC_OK) continue;
    int32_t to = -1, empty = -1;
    for (int32_t j = 0; j < RGROUPS && to < 0; j++) {
      if (g[j].k > 0 && g[j].t == t && same_reduction(L, m.rs, g[j].m[0].rs) &&
          (m.pair >= 0) == (g[j].m[0].pair >= 0) &&
          m.chained == g[j].m[0].chained && same_reduction(L, m.ar, g[j].m[0].ar) &&
          same_reduction(L, m.ar2, g[j].m[0].ar2))
        to = j;
      if (g[j].k == 0 && empty < 0) empty = j;
    }
    if (to >= 0 && !joins(&g[to], &m, i)) st = close_group(&b, &g[to]);
    if (to < 0 && empty < 0) { /* every slot holds another kind: the first gives way */
      st = close_group(&b, &g[0]);
      empty = 0;
    }
    if (st != SC_OK) continue;
    rgroup *o = &g[to >= 0 ? to : empty];
    o->m[o->k++] = m;
    o->t = t;
    if (m.use < o->use) o->use = m.use;
    o->bytes += bytes;
    key_stage = stage;
    key_block = block;
  }
  st = finish(&b, st);
  for (int32_t j = 0; j < RGROUPS; j++) sc_free(g[j].m);
  sc_free(off);
  sc_free(users);
  sc_stats_free(&stats);
  /* ZeRO-1/2's norm: each flat (or dim) shard's square is its own term;
   * elsewhere the sums keep their order (a reassociated bf16 step's sum
   * would no longer match the same pieces reduced another way) */
  bool merge = p->fsdp_axis >= 0 && (p->zero_stage == 1 || p->zero_stage == 2);
  return st == SC_OK && merge ? merge_scalar_terms(p, d) : st;
}

/* ---- a gradient sum's early part (sc_partition_split_grad_sums) ---- */

/* Whether value v is read by one node alone and is no graph output. */
static bool sole(const sc_graph *L, const int32_t *off, int32_t v) {
  return off[v + 1] - off[v] == 1 && !(L->values[v].flags & SC_VALUE_OUTPUT);
}

/* The sum "grad:P" of a reduce-scatter's node r is made of when it is
 * Add(a, b), through Identities read by nothing else: its Add node, or -1.
 * Both parts are read by that Add alone and have the sum's dtype, shape
 * and sharding (the same pending sum). */
static int32_t grad_sum(const bucketer *b, const int32_t *off, int32_t r) {
  const sc_graph *L = b->L;
  const sc_node *n = &L->nodes[r];
  if (n->op != SC_OP_REDUCE_SCATTER || n->n_inputs != 1 || n->n_outputs != 1 ||
      n->inputs[0] < 0 || n->outputs[0] < 0 || !grad_param(b, n->inputs[0]))
    return -1;
  int32_t v = n->inputs[0];
  while (sole(L, off, v) && L->values[v].producer >= 0 &&
         L->nodes[L->values[v].producer].op == SC_OP_IDENTITY &&
         L->nodes[L->values[v].producer].n_inputs == 1 &&
         L->nodes[L->values[v].producer].inputs[0] >= 0)
    v = L->nodes[L->values[v].producer].inputs[0];
  int32_t add = L->values[v].producer;
  if (!sole(L, off, v) || add < 0 || L->nodes[add].op != SC_OP_ADD ||
      L->nodes[add].n_inputs != 2)
    return -1;
  const sc_value *s = &L->values[v];
  const sc_sharding *ss = sc_graph_sharding(L, v);
  for (int32_t k = 0; k < 2; k++) {
    int32_t x = L->nodes[add].inputs[k];
    if (x < 0 || x == L->nodes[add].inputs[1 - k] || !sole(L, off, x) ||
        L->values[x].producer < 0)
      return -1;
    const sc_value *xv = &L->values[x];
    const sc_sharding *xs = sc_graph_sharding(L, x);
    if (xv->dtype != s->dtype || xv->rank != s->rank ||
        memcmp(xv->dims, s->dims, (size_t)s->rank * sizeof *s->dims) != 0 || !ss || !xs ||
        !sc_sharding_equal(xs, ss))
      return -1;
  }
  return add;
}

/* A new value of dtype t shaped as value v but with n in dim `dim` (n <
 * 0: v's own), of v's sharding. */
static int32_t shaped(bucketer *b, int32_t v, int32_t dim, int64_t n, sc_dtype t) {
  const sc_value y = b->L->values[v]; /* a copy: adding values moves the array */
  int64_t dims[SC_MAX_RANK];
  memcpy(dims, y.dims, (size_t)y.rank * sizeof *dims);
  if (n >= 0) dims[dim] = n;
  int32_t out = new_value(b, y.name, t, y.rank, dims);
  const sc_sharding *ys = out < 0 ? NULL : sc_graph_sharding(b->L, v);
  sc_sharding s;
  if (ys) s = *ys;
  return ys && sc_graph_set_sharding(b->L, out, &s) == SC_OK ? out : -1;
}

static int32_t like(bucketer *b, int32_t v, int32_t dim, int64_t n) {
  return shaped(b, v, dim, n, b->L->values[v].dtype);
}

/* Whether node i's attributes are numbers and strings alone (copy_attrs
 * copies them). */
static bool plain_attrs(const sc_node *n) {
  for (int32_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].kind != SC_ATTR_INT && n->attrs[a].kind != SC_ATTR_FLOAT &&
        n->attrs[a].kind != SC_ATTR_STRING)
      return false;
  return true;
}

/* A node of op, as old node `from` (its plain attributes, shared), placed
 * before old node `before`. */
static int32_t emit_as(bucketer *b, sc_op op, const char *base, const int32_t *in, int32_t n_in,
                       int32_t out, int64_t stage, int32_t before, int32_t from) {
  int32_t nid = emit(b, op, base, in, n_in, out, stage, before);
  for (int32_t a = 0; nid >= 0 && from >= 0 && a < b->L->nodes[from].n_attrs; a++) {
    const sc_attr at = b->L->nodes[from].attrs[a]; /* a copy: adding attributes may move them */
    if (strcmp(at.name, "__stage") == 0) continue;
    sc_attr *na = sc_node_add_attr(b->L, nid, at.name, at.kind);
    if (!na) return -1;
    na->i = at.i;
    na->f = at.f;
    na->s = at.s;
  }
  return nid;
}

enum { ROWS_DEPTH = 4 }; /* producers at most made by rows, one below another */

static int32_t rows_of(bucketer *b, int32_t x, int64_t lo, int64_t hi, const char *base,
                       int64_t stage, int32_t before, int32_t depth);

/* Rows [lo, hi) of x along `axis` by a Slice placed before `before`. */
static int32_t slice_rows(bucketer *b, int32_t x, int64_t axis, int64_t lo, int64_t hi,
                          const char *base, int64_t stage, int32_t before) {
  int32_t c_lo = const_i64(b, 1, &lo), c_hi = const_i64(b, 1, &hi);
  int32_t c_ax = const_i64(b, 1, &axis);
  int32_t part = c_ax < 0 ? -1 : like(b, x, (int32_t)axis, hi - lo);
  if (part < 0 || emit(b, SC_OP_SLICE, base, (int32_t[]){x, c_lo, c_hi, c_ax}, 4, part, stage,
                       before) < 0)
    return -1;
  return part;
}

/* Rows [lo, hi) of operand v of a node being made by rows, whose result
 * has `rows` rows and rank r: v itself when it broadcasts along dim 0, else
 * its rows (made by rows when nothing else reads it). */
static int32_t operand_rows(bucketer *b, int32_t v, int64_t rows, int32_t r, int64_t lo,
                            int64_t hi, const char *base, int64_t stage, int32_t before,
                            int32_t depth) {
  const sc_value *x = &b->L->values[v];
  if (x->rank < r || x->dims[0] != rows) return v;
  return sole(b->L, b->off, v) && x->producer >= 0
             ? rows_of(b, v, lo, hi, base, stage, before, depth + 1)
             : slice_rows(b, v, 0, lo, hi, base, stage, before);
}

/* Whether x is a scatter-add of updates at int64 indices of last dim 1
 * (rows of a 2-D table) into data, whose rows scatter_rows can make. */
static bool scatter_add(const sc_graph *L, int32_t x) {
  int32_t i = L->values[x].producer;
  const sc_node *n = i >= 0 ? &L->nodes[i] : NULL;
  const sc_attr *red = n ? sc_node_attr(n, "reduction") : NULL;
  if (!n || n->op != SC_OP_SCATTER_ND || n->n_inputs != 3 || n->n_outputs != 1 || !red ||
      !red->s || strcmp(red->s, "add") != 0 || L->values[x].rank != 2 || !plain_attrs(n))
    return false;
  for (int32_t k = 0; k < 3; k++)
    if (n->inputs[k] < 0) return false;
  const sc_value *ix = &L->values[n->inputs[1]];
  return ix->dtype == SC_DTYPE_I64 && ix->rank >= 1 && ix->dims[ix->rank - 1] == 1;
}

/* Rows [elo, ehi) of scatter-add x (scatter_add) that are right in rows
 * [lo, hi) alone: the rows of its data, and the updates whose index
 * (a negative one counted from the end, as the scatter does) falls in
 * [lo, hi) at index - elo; every other update goes to row `trash` of the
 * result, outside [lo, hi) (the caller drops it), so that no update is
 * copied or masked. */
static int32_t scatter_rows(bucketer *b, int32_t x, int64_t lo, int64_t hi, int64_t elo,
                            int64_t ehi, int64_t trash, const char *base, int64_t stage,
                            int32_t before) {
  sc_graph *L = b->L;
  int32_t sid = L->values[x].producer;
  int32_t data = L->nodes[sid].inputs[0], idx = L->nodes[sid].inputs[1];
  int32_t upd = L->nodes[sid].inputs[2];
  int64_t zero = 0, rows = L->values[x].dims[0];
  int32_t c_lo = const_i64(b, 1, &lo), c_hi = const_i64(b, 1, &hi);
  int32_t c_elo = const_i64(b, 1, &elo), c_t = const_i64(b, 1, &trash);
  int32_t c_0 = const_i64(b, 1, &zero), c_rows = const_i64(b, 1, &rows);
  int32_t v[8]; /* neg, wrapped, norm, ge, lt, in, at, idx2 */
  for (int32_t k = 0; k < 8; k++)
    v[k] = c_t < 0 || c_rows < 0 ? -1
           : k == 0 || (k >= 3 && k <= 5) ? shaped(b, idx, 0, -1, SC_DTYPE_BOOL)
                                           : like(b, idx, 0, -1);
  for (int32_t k = 0; k < 8; k++)
    if (v[k] < 0) return -1;
  if (emit(b, SC_OP_LESS, base, (int32_t[]){idx, c_0}, 2, v[0], stage, before) < 0 ||
      emit(b, SC_OP_ADD, base, (int32_t[]){idx, c_rows}, 2, v[1], stage, before) < 0 ||
      emit(b, SC_OP_WHERE, base, (int32_t[]){v[0], v[1], idx}, 3, v[2], stage, before) < 0 ||
      emit(b, SC_OP_GREATER_EQUAL, base, (int32_t[]){v[2], c_lo}, 2, v[3], stage, before) < 0 ||
      emit(b, SC_OP_LESS, base, (int32_t[]){v[2], c_hi}, 2, v[4], stage, before) < 0 ||
      emit(b, SC_OP_AND, base, (int32_t[]){v[3], v[4]}, 2, v[5], stage, before) < 0 ||
      emit(b, SC_OP_SUB, base, (int32_t[]){v[2], c_elo}, 2, v[6], stage, before) < 0 ||
      emit(b, SC_OP_WHERE, base, (int32_t[]){v[5], v[6], c_t}, 3, v[7], stage, before) < 0)
    return -1;
  int32_t idx2 = v[7];
  int32_t d2 = sole(L, b->off, data) && L->values[data].producer >= 0
                   ? rows_of(b, data, elo, ehi, base, stage, before, 1)
                   : slice_rows(b, data, 0, elo, ehi, base, stage, before);
  int32_t out = d2 < 0 ? -1 : like(b, x, 0, ehi - elo);
  if (out < 0 || emit_as(b, SC_OP_SCATTER_ND, base, (int32_t[]){d2, idx2, upd}, 3, out, stage,
                         before, sid) < 0)
    return -1;
  return out;
}

/* Rows [lo, hi) of x (sole: read by the dead sum alone), by nodes placed
 * before old node `before`, so that the whole x is never made where its
 * producer can be made by rows: a Gemm of two 2-D operands (the rows of A,
 * or with transA its columns, times B), an elementwise node (its operands'
 * rows; those broadcast along dim 0 as they are), an Expand of a value
 * broadcast along dim 0; else a Slice of the whole x. */
static int32_t rows_of(bucketer *b, int32_t x, int64_t lo, int64_t hi, const char *base,
                       int64_t stage, int32_t before, int32_t depth) {
  sc_graph *L = b->L;
  int32_t i = L->values[x].producer;
  const sc_node *n = i >= 0 && depth < ROWS_DEPTH ? &L->nodes[i] : NULL;
  int32_t r = L->values[x].rank;
  int64_t rows = L->values[x].dims[0];
  if (!n || n->n_outputs != 1 || !plain_attrs(n) || n->n_inputs < 1)
    return slice_rows(b, x, 0, lo, hi, base, stage, before);
  for (int32_t k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] < 0) return slice_rows(b, x, 0, lo, hi, base, stage, before);
  if (n->op == SC_OP_GEMM && n->n_inputs == 2 && r == 2 && L->values[n->inputs[0]].rank == 2) {
    const sc_attr *ta = sc_node_attr(n, "transA");
    int32_t a = slice_rows(b, n->inputs[0], ta && ta->i ? 1 : 0, lo, hi, base, stage, before);
    int32_t out = a < 0 ? -1 : like(b, x, 0, hi - lo);
    if (out < 0 || emit_as(b, SC_OP_GEMM, base, (int32_t[]){a, L->nodes[i].inputs[1]}, 2, out,
                           stage, before, i) < 0)
      return -1;
    return out;
  }
  if (sc_ops[n->op].flags & SC_OPF_ELEMENTWISE) {
    int32_t in[8], n_in = n->n_inputs;
    if (n_in > 8) return slice_rows(b, x, 0, lo, hi, base, stage, before);
    for (int32_t k = 0; k < n_in; k++)
      if ((in[k] = operand_rows(b, L->nodes[i].inputs[k], rows, r, lo, hi, base, stage, before,
                                depth)) < 0)
        return -1;
    int32_t out = like(b, x, 0, hi - lo);
    if (out < 0 || emit_as(b, L->nodes[i].op, base, in, n_in, out, stage, before, i) < 0)
      return -1;
    return out;
  }
  const sc_value *c = &L->values[n->inputs[0]];
  if (n->op == SC_OP_EXPAND && n->n_inputs == 2 && (c->rank < r || c->dims[0] == 1)) {
    int64_t dims[SC_MAX_RANK];
    memcpy(dims, L->values[x].dims, (size_t)r * sizeof *dims);
    dims[0] = hi - lo;
    int32_t shape = const_i64(b, r, dims);
    int32_t out = shape < 0 ? -1 : like(b, x, 0, hi - lo);
    if (out < 0 || emit(b, SC_OP_EXPAND, base, (int32_t[]){L->nodes[i].inputs[0], shape}, 2,
                        out, stage, before) < 0)
      return -1;
    return out;
  }
  return slice_rows(b, x, 0, lo, hi, base, stage, before);
}

/* x reduce-scattered as old node `from` does (its axes, op and axis) into
 * a new value shaped as from's result, by nodes placed before old node
 * `before`. Along a dim other than 0 the communicator's layout needs a
 * scratch the size of x (lower_comm.c): x then goes in k chunks of rows of
 * at most SC_PARTITION_BUCKET_CAP_BYTES, each made (rows_of) and
 * reduce-scattered alone (rank r's piece of a chunk is its rows of r's
 * piece), and the pieces concatenated along dim 0. A scatter-add's chunk
 * has one row more (scatter_rows: the next row, or for the last chunk the
 * one before), its piece sliced to the chunk's rows. */
int64_t sc_partition_split_chunks(int64_t rows, int64_t bytes, int64_t axis, int64_t *per) {
  int64_t k = 1;
  if (rows < 1) rows = 1;
  if (axis > 0 && rows > 1) {
    k = (bytes + SC_PARTITION_BUCKET_CAP_BYTES - 1) / SC_PARTITION_BUCKET_CAP_BYTES;
    if (k > rows) k = rows;
    if (k < 1) k = 1;
  }
  *per = (rows + k - 1) / k;
  return (rows + *per - 1) / *per;
}

static int32_t scatter_like(bucketer *b, int32_t from, int32_t x, const char *what,
                            int32_t before) {
  sc_graph *L = b->L;
  const sc_attr *ax = sc_node_attr(&L->nodes[from], "axis");
  int64_t axis = ax ? ax->i : 0, stage = stage_of(&L->nodes[from]);
  const sc_value *xv = &L->values[x];
  if (axis < 0) axis += xv->rank;
  int64_t rows = xv->rank > 0 ? xv->dims[0] : 1, per = 0;
  int64_t k = sc_partition_split_chunks(
      rows, sc_value_numel(xv) * (int64_t)sc_dtype_size(xv->dtype), axis, &per);
  bool scatter = k > 1 && scatter_add(L, x);
  int32_t y = L->nodes[from].outputs[0];
  int32_t *piece = sc_malloc((size_t)k * sizeof *piece);
  if (!piece) return -1;
  char base[600];
  snprintf(base, sizeof base, "%s/%s", L->nodes[from].name, what);
  int32_t out = -1;
  int64_t c = 0;
  for (; c < k; c++) {
    int64_t lo = c * per, hi = lo + per < rows ? lo + per : rows;
    int64_t elo = scatter && hi == rows ? lo - 1 : lo, ehi = elo + (hi - lo) + scatter;
    int32_t in = !(k > 1)  ? x
                 : scatter ? scatter_rows(b, x, lo, hi, elo, ehi, hi == rows ? 0 : hi - lo, base,
                                          stage, before)
                           : rows_of(b, x, lo, hi, base, stage, before, 0);
    int32_t red = in < 0 ? -1 : like(b, y, 0, k > 1 ? ehi - elo : -1);
    int32_t nid = red < 0 ? -1 : emit(b, SC_OP_REDUCE_SCATTER, base, &in, 1, red, stage, before);
    if (nid < 0 || copy_axes(b, nid, from) != SC_OK || attr_int(b, nid, "axis", axis) != SC_OK)
      break;
    piece[c] = scatter ? slice_rows(b, red, 0, lo - elo, hi - elo, base, stage, before) : red;
    if (piece[c] < 0) break;
  }
  if (c == k && k == 1) out = piece[0];
  else if (c == k) {
    out = like(b, y, 0, -1);
    int32_t nc = out < 0 ? -1 : emit(b, SC_OP_CONCAT, base, piece, (int32_t)k, out, stage, before);
    if (nc < 0 || attr_int(b, nc, "axis", 0) != SC_OK) out = -1;
  }
  sc_free(piece);
  return out;
}

sc_status sc_partition_split_grad_sums(sc_partition *p, sc_diag *d) {
  if (!p->local || !p->training) return SC_OK;
  sc_graph *L = p->local;
  int32_t n0 = L->n_nodes, *off = NULL, *users = NULL;
  bucketer b = {.p = p, .L = L, .d = d, .first_new = n0};
  b.moved = sc_calloc((size_t)n0 + 1, sizeof *b.moved);
  sc_status st = b.moved && sc_graph_users(L, &off, &users) == SC_OK ? SC_OK : nomem(d);
  b.off = off;
  for (int32_t r = 0; st == SC_OK && r < n0; r++) {
    int32_t add = grad_sum(&b, off, r);
    if (add < 0) continue;
    int32_t x0 = L->nodes[add].inputs[0], x1 = L->nodes[add].inputs[1];
    bool first = L->values[x0].producer < L->values[x1].producer;
    int32_t early = first ? x0 : x1, late = first ? x1 : x0;
    int32_t made = L->values[early].producer;
    const sc_value *ev = &L->values[early];
    if (sc_value_numel(ev) * (int64_t)sc_dtype_size(ev->dtype) < SC_PARTITION_SPLIT_MIN_BYTES)
      continue;
    if (stage_of(&L->nodes[made]) != stage_of(&L->nodes[r]))
      continue; /* a pipeline hands a tied gradient over itself (pipe_train.c) */
    bool across = false; /* another collective runs while the part waits */
    for (int32_t k = made + 1; k < add && !across; k++) across = is_collective(L, k);
    if (!across) continue;
    int32_t re = scatter_like(&b, r, early, "early", made + 1);
    int32_t rl = re < 0 ? -1 : scatter_like(&b, r, late, "late", r);
    int32_t sum = rl < 0 ? -1 : like(&b, L->nodes[r].outputs[0], 0, -1);
    if (sum < 0 ||
        emit(&b, SC_OP_ADD, L->nodes[r].name, (int32_t[]){re, rl}, 2, sum,
             stage_of(&L->nodes[r]), r) < 0) {
      st = lerr(&b);
      break;
    }
    to_identity(&b, r, sum); /* its result and name stay; the whole sum is dead */
  }
  sc_free(off);
  sc_free(users);
  return finish(&b, st);
}
