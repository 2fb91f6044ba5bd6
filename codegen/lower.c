/* lower.c — the lowering framework: the op → lowering table, reading
 * values inside a kernel (load from a buffer, or inline a fused POINT
 * producer), storing outputs (with fused epilogues), index arithmetic, and
 * the helpers STEP lowerings use (buffers, scratch, steps, helper kernels).
 *
 * The table is ops.def's `lower` column expanded once (a static_assert keeps
 * it in step with the op enum). Everything here works on the context
 * (lower_internal.h) that sc_program_from_graph (from_graph.c) sets up for
 * each fusion group: which group is being lowered, which graph value lives
 * in which program buffer, and, for a KERNEL op with POINT consumers fused
 * after it, the epilogue to apply at its store.
 *
 * Inlining: reading value v at index idx when v's producer is a POINT (or
 * VIEW) op of the group being lowered calls that op's point function at idx
 * — recursively, so a chain of elementwise ops becomes one expression.
 * Identical subexpressions are shared by kir's hash-consing, and each
 * (value, index) is inlined once a kernel (the memo below). A value with a
 * buffer is loaded (the buffer becomes a kernel param on first use); a
 * constant scalar is inlined as a kir constant.
 *
 * Epilogues: when the group's KERNEL anchor stores its fused output at idx,
 * the group's stored values (downstream POINT members of the same shape) are
 * computed at the same idx with the anchor's value substituted for the fused
 * output. Fusion only builds such groups when every member between anchor
 * and root is elementwise over the anchor's output shape, so the member
 * reads the anchor's value at exactly idx (compared expr id by expr id;
 * dims of extent 1 match anything). */
#include <stdio.h>
#include <string.h>

#include "codegen/lower_internal.h"

/* ---- the table ---- */

static const sc_lowering *const table[SC_OP_COUNT] = {
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, \
           lower, shard, grad)                                                              \
  &sc_##lower,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof table / sizeof table[0] == SC_OP_COUNT,
               "one lowering per op in ops.def");

const sc_lowering *sc_lowering_of(sc_op op) {
  return (unsigned)op < SC_OP_COUNT ? table[op] : NULL;
}

sc_lower_kind sc_lower_kind_of(const sc_graph *g, const sc_node *n) {
  const sc_lowering *lw = sc_lowering_of(n->op);
  if (!lw) return SC_LOWER_NONE;
  if (n->op != SC_OP_CONCAT || n->n_inputs < 1 || n->inputs[0] < 0) return lw->kind;
  const sc_value *y = &g->values[n->inputs[0]]; /* its dims before the axis are the output's */
  const sc_attr *a = sc_node_attr(n, "axis");
  int64_t axis = a ? a->i : 0;
  if (axis < 0) axis += y->rank;
  if (axis < 0 || axis >= y->rank) return lw->kind; /* the lowering names the error */
  for (int32_t d = 0; d < axis; d++)
    if (y->dims[d] != 1) return lw->kind;
  return SC_LOWER_STEP;
}

/* ---- errors ---- */

sc_status sc_lower_error(sc_lower_ctx *cx, const sc_node *n, sc_status st,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(cx->diag, st, n ? n->name : NULL, n ? sc_op_name(n->op) : NULL, fmt, ap);
  va_end(ap);
  return st;
}

/* Status to return after a builder gave -1: the recorded one, else NOMEM. */
static sc_status failed(sc_lower_ctx *cx) {
  if (cx->diag->status != SC_OK) return cx->diag->status;
  return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory building a kernel");
}

/* ---- expression shorthands ---- */

int32_t sc_lower_un(sc_lower_ctx *cx, kir_op op, int32_t a) {
  if (a < 0 || !cx->k) return -1;
  return kir_unary(cx->arena, cx->k, op, a);
}
int32_t sc_lower_bin(sc_lower_ctx *cx, kir_op op, int32_t a, int32_t b) {
  if (a < 0 || b < 0 || !cx->k) return -1;
  return kir_binary(cx->arena, cx->k, op, a, b);
}
int32_t sc_lower_sel(sc_lower_ctx *cx, int32_t c, int32_t a, int32_t b) {
  if (c < 0 || a < 0 || b < 0 || !cx->k) return -1;
  return kir_select(cx->arena, cx->k, c, a, b);
}
sc_dtype sc_lower_dtype(sc_lower_ctx *cx, int32_t e) {
  if (e < 0 || !cx->k || e >= cx->k->n_exprs) return SC_DTYPE_UNDEF;
  return cx->k->exprs[e].dtype;
}
int32_t sc_lower_cast(sc_lower_ctx *cx, sc_dtype to, int32_t a) {
  if (a < 0 || !cx->k) return -1;
  if (cx->k->exprs[a].dtype == to) return a;
  return kir_cast(cx->arena, cx->k, to, a);
}
int32_t sc_lower_const(sc_lower_ctx *cx, sc_dtype t, double v) {
  if (!cx->k) return -1;
  if (sc_dtype_is_float(t)) return kir_const_f(cx->arena, cx->k, t, v);
  if (t == SC_DTYPE_BOOL) return kir_const_i(cx->arena, cx->k, t, v != 0);
  return kir_const_i(cx->arena, cx->k, t, (int64_t)v);
}

/* ---- index helpers ---- */

int32_t sc_lower_i64(sc_lower_ctx *cx, int64_t v) {
  if (!cx->k) return -1;
  return kir_const_i(cx->arena, cx->k, SC_DTYPE_I64, v);
}

int32_t sc_lower_offset(sc_lower_ctx *cx, int32_t rank, const int64_t *dims,
                        const int32_t *idx) {
  int32_t lin = sc_lower_i64(cx, 0);
  for (int32_t d = 0; d < rank; d++) {
    if (dims[d] == 1) continue; /* the only valid index is 0 */
    lin = sc_lower_bin(cx, KIR_MUL, lin, sc_lower_i64(cx, dims[d]));
    lin = sc_lower_bin(cx, KIR_ADD, lin, idx[d]);
  }
  return lin;
}

/* lin as sum(coef[v] * var v) + c over the kernel's loop variables
 * (kir_affine's slots: the outer dims, then the inner index), every
 * coefficient and c >= 0 (what offsets built by sc_lower_offset are). */
typedef struct affine {
  int64_t coef[SC_MAX_RANK + 1];
  int64_t c;
} affine;

static bool affine_of(const kir_kernel *k, int32_t e, affine *a) {
  memset(a, 0, sizeof *a);
  if (!kir_affine(k, e, a->coef, &a->c) || a->c < 0) return false;
  for (int32_t v = 0; v <= k->outer_rank; v++)
    if (a->coef[v] < 0) return false;
  return true;
}

/* the extent of slot v's variable, and the variable (KIR_VAR's var) */
static int64_t slot_extent(const kir_kernel *k, int32_t v) {
  return v == k->outer_rank ? k->inner : k->outer_dims[v];
}

static int32_t slot_var(const kir_kernel *k, int32_t v) {
  return v == k->outer_rank ? KIR_INNER : v;
}

/* floor(lin / s) mod D (D <= 0: no mod) as an affine expression, when the
 * terms that are not multiples of s stay below s and those left after the
 * mod below D (then the division and the mod only regroup terms: a
 * reshape's index, re-flattened then unflattened, becomes the loop
 * variables again, which the vectoriser reads as consecutive). -1 when
 * that does not hold. */
static int32_t affine_digit(sc_lower_ctx *cx, const affine *a, int64_t s, int64_t D) {
  const kir_kernel *k = cx->k;
  int64_t lo = a->c % s, hi_c = a->c / s;
  if (D > 0) hi_c %= D;
  int64_t hi_max = hi_c;
  for (int32_t t = 0; t <= k->outer_rank; t++) {
    if (a->coef[t] == 0) continue;
    int64_t span = slot_extent(k, t) - 1, v;
    if (span < 0) return -1;
    if (a->coef[t] % s != 0) {
      if (!sc_mul_i64(a->coef[t], span, &v) || !sc_add_i64(lo, v, &lo)) return -1;
    } else if (D <= 0 || (a->coef[t] / s) % D != 0) {
      if (!sc_mul_i64(a->coef[t] / s, span, &v) || !sc_add_i64(hi_max, v, &hi_max)) return -1;
    }
  }
  if (lo >= s || (D > 0 && hi_max >= D)) return -1;
  int32_t r = -1;
  for (int32_t t = 0; t <= k->outer_rank; t++) {
    if (a->coef[t] == 0 || a->coef[t] % s != 0 || (D > 0 && (a->coef[t] / s) % D == 0)) continue;
    int32_t term = kir_var(cx->arena, cx->k, slot_var(k, t));
    if (a->coef[t] / s != 1)
      term = sc_lower_bin(cx, KIR_MUL, term, sc_lower_i64(cx, a->coef[t] / s));
    r = r < 0 ? term : sc_lower_bin(cx, KIR_ADD, r, term);
  }
  if (r < 0) return sc_lower_i64(cx, hi_c);
  return hi_c ? sc_lower_bin(cx, KIR_ADD, r, sc_lower_i64(cx, hi_c)) : r;
}

void sc_lower_unflatten(sc_lower_ctx *cx, int32_t lin, int32_t rank, const int64_t *dims,
                        int32_t *idx) {
  affine a;
  if (cx->k && affine_of(cx->k, lin, &a)) {
    int64_t stride = 1;
    int32_t first = 0, d;
    while (first < rank && dims[first] == 1) first++;
    for (d = rank - 1; d >= 0; d--) {
      if (dims[d] == 1) {
        idx[d] = sc_lower_i64(cx, 0);
        continue;
      }
      if ((idx[d] = affine_digit(cx, &a, stride, d == first ? 0 : dims[d])) < 0) break;
      if (!sc_mul_i64(stride, dims[d], &stride)) break;
    }
    if (d < 0) return;
  }
  int64_t stride = 1;
  int32_t first = 0; /* outermost dim of extent > 1 needs no mod */
  while (first < rank && dims[first] == 1) first++;
  for (int32_t d = rank - 1; d >= 0; d--) {
    if (dims[d] == 1) {
      idx[d] = sc_lower_i64(cx, 0);
      continue;
    }
    int32_t q = sc_lower_bin(cx, KIR_DIV, lin, sc_lower_i64(cx, stride));
    idx[d] = d == first ? q : sc_lower_bin(cx, KIR_MOD, q, sc_lower_i64(cx, dims[d]));
    stride *= dims[d];
  }
}

void sc_lower_bcast_index(sc_lower_ctx *cx, int32_t rout, const int32_t *idx, int32_t rin,
                          const int64_t *din, int32_t *out) {
  SC_ASSERT(rin <= rout);
  for (int32_t j = 0; j < rin; j++)
    out[j] = din[j] == 1 ? sc_lower_i64(cx, 0) : idx[rout - rin + j];
}

void sc_lower_outer_index(sc_lower_ctx *cx, int32_t *idx) {
  for (int32_t d = 0; d < cx->k->outer_rank; d++)
    idx[d] = kir_var(cx->arena, cx->k, d);
}

/* ---- params ---- */

sc_status sc_lower_reset_params(sc_lower_ctx *cx) {
  int32_t need = cx->p->n_buffers + 16;
  if (cx->cap_param_of_buffer < need) {
    int32_t *m = sc_realloc(cx->param_of_buffer, sizeof(int32_t) * (size_t)need * 2);
    if (!m) return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    cx->param_of_buffer = m;
    cx->cap_param_of_buffer = need * 2;
  }
  for (int32_t i = 0; i < cx->cap_param_of_buffer; i++) cx->param_of_buffer[i] = -1;
  return SC_OK;
}

static int64_t buffer_numel(const sc_buffer *b) {
  int64_t n = 1;
  for (int32_t d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

/* Param of cx->k for buffer b (added on first use). -1 on failure. */
static int32_t param_for(sc_lower_ctx *cx, int32_t b, bool written) {
  if (b >= cx->cap_param_of_buffer) {
    /* a buffer added since the kernel began (scratch): grow, keeping entries */
    int32_t cap = cx->cap_param_of_buffer;
    int32_t need = cx->p->n_buffers + 16;
    int32_t *m = sc_realloc(cx->param_of_buffer, sizeof(int32_t) * (size_t)need);
    if (!m) return -1;
    for (int32_t i = cap; i < need; i++) m[i] = -1;
    cx->param_of_buffer = m;
    cx->cap_param_of_buffer = need;
  }
  int32_t pi = cx->param_of_buffer[b];
  if (pi < 0) {
    const sc_buffer *buf = &cx->p->buffers[b];
    pi = kir_add_param(cx->arena, cx->k, b, buf->dtype, buffer_numel(buf), written);
    if (pi < 0) return -1;
    cx->param_of_buffer[b] = pi;
  } else if (written) {
    cx->k->params[pi].written = true;
  }
  return pi;
}

/* ---- buffers ---- */

int32_t sc_lower_value_buffer(sc_lower_ctx *cx, int32_t v, sc_buf_kind kind,
                              int32_t alias_of) {
  const sc_value *val = &cx->g->values[v];
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = val->name;
  b.kind = kind;
  b.dtype = val->dtype;
  b.rank = val->rank;
  memcpy(b.dims, val->dims, sizeof(int64_t) * (size_t)val->rank);
  int64_t bytes = sc_value_bytes(val);
  if (bytes < 0) {
    sc_diag_set(cx->diag, SC_ERR_LIMIT, NULL, NULL, "value '%s' is too large", val->name);
    return -1;
  }
  b.bytes = bytes;
  b.offset = -1;
  b.data = kind == SC_BUF_CONST ? val->data : NULL;
  b.alias_of = alias_of;
  b.value = v;
  int32_t id = sc_program_add_buffer(cx->p, &b);
  if (id < 0) {
    sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    return -1;
  }
  cx->value_buffer[v] = id;
  return id;
}

int32_t sc_lower_buffer_of(sc_lower_ctx *cx, int32_t value) {
  if (value < 0 || value >= cx->g->n_values) return -1;
  if (cx->value_buffer[value] >= 0) return cx->value_buffer[value];
  const sc_value *val = &cx->g->values[value];
  return sc_lower_value_buffer(cx, value,
                               sc_value_is_const(val) && val->producer < 0 ? SC_BUF_CONST
                                                                           : SC_BUF_TEMP,
                               -1);
}

int32_t sc_lower_buffer_at(sc_lower_ctx *cx, int32_t b, const int32_t *idx) {
  if (!cx->k || b < 0 || b >= cx->p->n_buffers) {
    sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "bad buffer read %d", b);
    return -1;
  }
  const sc_buffer *buf = &cx->p->buffers[b];
  int32_t pi = param_for(cx, b, false);
  int32_t off = sc_lower_offset(cx, buf->rank, buf->dims, idx);
  if (pi < 0 || off < 0) return -1;
  return kir_load(cx->arena, cx->k, pi, off);
}

/* Stores e at idx of buffer b, indexed as a value of shape (rank, dims)
 * named `what`; e must have the buffer's dtype. */
static sc_status store_at(sc_lower_ctx *cx, int32_t b, int32_t rank, const int64_t *dims,
                          const char *what, const int32_t *idx, int32_t e) {
  if (e < 0) return failed(cx);
  sc_dtype et = sc_lower_dtype(cx, e), bt = cx->p->buffers[b].dtype;
  if (et != bt)
    return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL,
                       "lowering stores a %s expression into '%s' of dtype %s",
                       sc_dtype_name(et), what ? what : "?", sc_dtype_name(bt));
  int32_t pi = param_for(cx, b, true);
  int32_t off = sc_lower_offset(cx, rank, dims, idx);
  if (pi < 0 || off < 0 || kir_add_store(cx->arena, cx->k, pi, off, e) < 0) return failed(cx);
  return SC_OK;
}

sc_status sc_lower_buffer_store(sc_lower_ctx *cx, int32_t b, const int32_t *idx, int32_t e) {
  if (!cx->k || b < 0 || b >= cx->p->n_buffers)
    return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "bad buffer store %d", b);
  const sc_buffer *buf = &cx->p->buffers[b];
  return store_at(cx, b, buf->rank, buf->dims, buf->name, idx, e);
}

int32_t sc_lower_scratch(sc_lower_ctx *cx, const char *name, sc_dtype dtype, int32_t rank,
                         const int64_t *dims) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = sc_arena_printf(cx->arena, "%s.%s", cx->grp ? cx->grp->kname : "scratch",
                           name ? name : "scratch");
  b.kind = SC_BUF_TEMP;
  b.dtype = dtype;
  b.rank = rank;
  int64_t n = sc_dtype_size(dtype);
  for (int32_t d = 0; d < rank; d++) {
    b.dims[d] = dims[d];
    if (dims[d] < 0 || !sc_mul_i64(n, dims[d], &n)) {
      sc_diag_set(cx->diag, SC_ERR_LIMIT, NULL, NULL, "scratch buffer '%s' is too large",
                  b.name ? b.name : "?");
      return -1;
    }
  }
  b.bytes = n;
  b.offset = -1;
  b.alias_of = -1;
  b.value = -1;
  int32_t id = sc_program_add_buffer(cx->p, &b);
  if (id < 0) sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  return id;
}

sc_status sc_lower_add_step(sc_lower_ctx *cx, const sc_step *s) {
  sc_step c = *s;
  if (!c.origin && cx->grp) c.origin = cx->grp->origin;
  if (sc_program_add_step(cx->p, &c) < 0)
    return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  return SC_OK;
}

/* ---- kernels ---- */

/* Creates a kernel named after the group (plus suffix), adds it and a
 * KERNEL step, and makes it cx->k with a fresh param map. */
static sc_status new_kernel(sc_lower_ctx *cx, const char *suffix, int32_t outer_rank,
                            const int64_t *outer_dims, int64_t inner) {
  if (outer_rank < 0 || outer_rank > SC_MAX_RANK || inner < 1)
    return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL,
                       "bad kernel domain (rank %d, inner %lld)", outer_rank,
                       (long long)inner);
  const char *base = cx->grp ? cx->grp->kname : "k";
  int32_t nth = cx->grp ? cx->grp->n_kernels++ : 0;
  const char *name;
  if (suffix)
    name = sc_arena_printf(cx->arena, "%s_%s", base, suffix);
  else if (nth > 0)
    name = sc_arena_printf(cx->arena, "%s_%d", base, nth);
  else
    name = base;
  kir_kernel *k = name ? kir_kernel_create(cx->arena, name) : NULL;
  if (!k) return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  k->outer_rank = outer_rank;
  for (int32_t d = 0; d < outer_rank; d++) k->outer_dims[d] = outer_dims[d];
  k->inner = inner;
  k->origin = cx->grp ? cx->grp->origin : NULL;
  int32_t kid = sc_program_add_kernel(cx->p, k);
  if (kid < 0) return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_KERNEL;
  s.kernel = kid;
  s.gemm.bias = -1;
  s.origin = k->origin;
  sc_status st = sc_lower_add_step(cx, &s);
  if (st != SC_OK) return st;
  cx->k = k;
  return sc_lower_reset_params(cx);
}

sc_status sc_lower_begin_kernel(sc_lower_ctx *cx, const sc_node *n, int32_t outer_rank,
                                const int64_t *outer_dims, int64_t inner) {
  if (inner < 1)
    return sc_lower_error(cx, n, SC_ERR_UNSUPPORTED,
                          "a kernel with an empty inner loop (lower it as constants)");
  return new_kernel(cx, NULL, outer_rank, outer_dims, inner);
}

sc_status sc_lower_pointwise_kernel(sc_lower_ctx *cx, const char *name, int32_t buffer,
                                    sc_lower_index_fn fn, void *ud) {
  if (buffer < 0 || buffer >= cx->p->n_buffers)
    return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "bad buffer %d", buffer);
  const sc_buffer *b = &cx->p->buffers[buffer];
  return sc_lower_pointwise_kernel_at(cx, name, buffer, b->rank, b->dims, NULL, fn, ud);
}

sc_status sc_lower_pointwise_kernel_at(sc_lower_ctx *cx, const char *name, int32_t buffer,
                                       int32_t rank, const int64_t *domain, const int64_t *shift,
                                       sc_lower_index_fn fn, void *ud) {
  if (buffer < 0 || buffer >= cx->p->n_buffers || rank != cx->p->buffers[buffer].rank)
    return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "bad buffer %d", buffer);
  for (int32_t d = 0; d < rank; d++) {
    int64_t at = shift ? shift[d] : 0;
    if (domain[d] < 0 || at < 0 || at > cx->p->buffers[buffer].dims[d] - domain[d])
      return sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL,
                         "pointwise kernel outside buffer %d", buffer);
  }
  kir_kernel *saved_k = cx->k;
  int32_t *saved_map = NULL;
  size_t map_bytes = sizeof(int32_t) * (size_t)cx->cap_param_of_buffer;
  if (saved_k && map_bytes) {
    saved_map = sc_malloc(map_bytes);
    if (!saved_map) return sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    memcpy(saved_map, cx->param_of_buffer, map_bytes);
  }
  const sc_buffer *b = &cx->p->buffers[buffer];
  int64_t dims[SC_MAX_RANK], bdims[SC_MAX_RANK];
  memcpy(dims, domain, sizeof(int64_t) * (size_t)rank);
  memcpy(bdims, b->dims, sizeof(int64_t) * (size_t)rank);
  sc_status st = new_kernel(cx, name ? name : "pw", rank, dims, 1);
  if (st == SC_OK) {
    int32_t idx[SC_MAX_RANK], at[SC_MAX_RANK];
    sc_lower_outer_index(cx, idx);
    int32_t e = fn(cx, ud, idx);
    int32_t pi = param_for(cx, buffer, true);
    for (int32_t d = 0; d < rank; d++)
      at[d] = shift && shift[d] ? sc_lower_bin(cx, KIR_ADD, idx[d], sc_lower_i64(cx, shift[d]))
                                : idx[d];
    int32_t off = sc_lower_offset(cx, rank, bdims, at);
    if (e < 0 || pi < 0 || off < 0 || kir_add_store(cx->arena, cx->k, pi, off, e) < 0)
      st = failed(cx);
  }
  cx->k = saved_k;
  if (saved_map) {
    memcpy(cx->param_of_buffer, saved_map, map_bytes);
    sc_free(saved_map);
  }
  return st;
}

typedef struct copy_ud {
  const sc_node *n;
  int32_t in;
} copy_ud;

static int32_t copy_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const copy_ud *u = ud;
  return sc_lower_input_at(cx, u->n, u->in, idx);
}

sc_status sc_lower_copy_input(sc_lower_ctx *cx, const char *name, int32_t buffer,
                              const sc_node *n, int32_t in, const int64_t *shift) {
  const sc_value *x = sc_node_input(cx->g, n, in);
  copy_ud u = {n, in};
  return sc_lower_pointwise_kernel_at(cx, name, buffer, x->rank, x->dims, shift, copy_at, &u);
}

/* ---- the inlining memo ----
 * An inlined value read at an index it was read at before in the same
 * kernel (same epilogue substitution) is the expression made then: without
 * it the recursion walks every path to a value, not every value, and a
 * chain whose members each read the previous one k times costs k^depth
 * (a ring's merges: each merged lse is read four times by the next merge,
 * so cp=8's forward took 4^7 walks of its first block). Entries are valid
 * for one kernel: a generation, renewed whenever the kernel being built is
 * another than the last lookup's (an empty slot or one of an older
 * generation ends a probe). */
typedef struct memo_entry {
  uint64_t gen; /* 0: never used */
  int32_t value, sub_value, sub_expr, expr;
  int32_t idx[SC_MAX_RANK];
} memo_entry;

struct sc_lower_memo {
  memo_entry *e;
  size_t cap, count; /* count: entries of generation gen */
  uint64_t gen;
  const kir_kernel *k; /* the kernel generation gen is for */
};

void sc_lower_ctx_release(sc_lower_ctx *cx) {
  sc_free(cx->param_of_buffer);
  cx->param_of_buffer = NULL;
  cx->cap_param_of_buffer = 0;
  if (cx->memo) sc_free(cx->memo->e);
  sc_free(cx->memo);
  cx->memo = NULL;
}

typedef struct memo_key {
  int32_t value, sub_value, sub_expr, rank;
  const int32_t *idx;
} memo_key;

static size_t memo_hash(const memo_key *q) {
  uint64_t h = 1469598103934665603ull;
  int32_t w[3] = {q->value, q->sub_value, q->sub_expr};
  for (int32_t i = 0; i < 3 + q->rank; i++) {
    h ^= (uint32_t)(i < 3 ? w[i] : q->idx[i - 3]);
    h *= 1099511628211ull;
  }
  return (size_t)(h ^ (h >> 29));
}

/* The slot holding q in generation m->gen, or the empty one ending its
 * probe (m->cap > count, a power of two). */
static memo_entry *memo_slot(struct sc_lower_memo *m, const memo_key *q) {
  size_t mask = m->cap - 1;
  for (size_t i = memo_hash(q) & mask;; i = (i + 1) & mask) {
    memo_entry *e = &m->e[i];
    if (e->gen != m->gen) return e;
    if (e->value == q->value && e->sub_value == q->sub_value && e->sub_expr == q->sub_expr &&
        memcmp(e->idx, q->idx, sizeof(int32_t) * (size_t)q->rank) == 0)
      return e;
  }
}

static memo_key memo_key_of(const sc_lower_ctx *cx, int32_t value, const int32_t *idx) {
  const sc_lower_group *grp = cx->grp;
  bool sub = grp && grp->sub_value >= 0;
  return (memo_key){value, sub ? grp->sub_value : -1, sub ? grp->sub_expr : -1,
                    cx->g->values[value].rank, idx};
}

/* Starts a new generation when the kernel being built is another than the
 * last one's (or nothing was kept yet); true when it did. */
static bool memo_renew(struct sc_lower_memo *m, const kir_kernel *k) {
  if (m->k == k && m->cap) return false;
  m->k = k;
  m->gen++;
  m->count = 0;
  return true;
}

/* The expression memoized for value at idx in the kernel being built, -1
 * when none. */
static int32_t memo_find(sc_lower_ctx *cx, int32_t value, const int32_t *idx) {
  struct sc_lower_memo *m = cx->memo;
  if (!m || memo_renew(m, cx->k)) return -1;
  memo_key q = memo_key_of(cx, value, idx);
  memo_entry *e = memo_slot(m, &q);
  return e->gen == m->gen ? e->expr : -1;
}

/* Records expr for value at idx; false when out of memory. */
static bool memo_put(sc_lower_ctx *cx, int32_t value, const int32_t *idx, int32_t expr) {
  struct sc_lower_memo *m = cx->memo;
  if (!m) {
    m = cx->memo = sc_calloc(1, sizeof *m);
    if (!m) return false;
  }
  memo_renew(m, cx->k);
  if (2 * (m->count + 1) > m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    memo_entry *old = m->e, *ne = sc_calloc(cap, sizeof *ne);
    if (!ne) return false;
    size_t oc = m->cap;
    m->e = ne, m->cap = cap;
    for (size_t i = 0; i < oc; i++) {
      if (old[i].gen != m->gen) continue;
      memo_key q = {old[i].value, old[i].sub_value, old[i].sub_expr,
                    cx->g->values[old[i].value].rank, old[i].idx};
      *memo_slot(m, &q) = old[i];
    }
    sc_free(old);
  }
  memo_key q = memo_key_of(cx, value, idx);
  memo_entry *e = memo_slot(m, &q);
  if (e->gen != m->gen) m->count++;
  e->gen = m->gen;
  e->value = q.value, e->sub_value = q.sub_value, e->sub_expr = q.sub_expr, e->expr = expr;
  memset(e->idx, 0, sizeof e->idx);
  memcpy(e->idx, idx, sizeof(int32_t) * (size_t)q.rank);
  return true;
}

/* ---- reading values ---- */

static bool same_index(const sc_value *v, const int32_t *a, const int32_t *b) {
  for (int32_t d = 0; d < v->rank; d++)
    if (v->dims[d] != 1 && a[d] != b[d]) return false;
  return true;
}

static int32_t output_slot(const sc_node *n, int32_t v) {
  for (int32_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i] == v) return i;
  return -1;
}

int32_t sc_lower_value_at(sc_lower_ctx *cx, int32_t value, const int32_t *idx) {
  sc_graph *g = cx->g;
  if (!cx->k) {
    sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "reading a value outside a kernel");
    return -1;
  }
  if (value < 0 || value >= g->n_values) {
    sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL, "bad value id %d", value);
    return -1;
  }
  const sc_value *v = &g->values[value];
  for (int32_t d = 0; d < v->rank; d++)
    if (idx[d] < 0) return -1;
  sc_lower_group *grp = cx->grp;
  if (grp && grp->sub_value == value) {
    if (same_index(v, idx, grp->sub_idx)) return grp->sub_expr;
    sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL,
                "fused epilogue reads '%s' at another index than it is stored", v->name);
    return -1;
  }
  if (grp && grp->alias_value == value) return sc_lower_value_at(cx, grp->alias_of, idx);
  int32_t pn = v->producer;
  if (pn >= 0 && cx->node_group && cx->node_group[pn] == cx->group) {
    const sc_node *p = &g->nodes[pn];
    const sc_lowering *lw = sc_lowering_of(p->op);
    sc_lower_kind kd = sc_lower_kind_of(g, p);
    if (lw && (kd == SC_LOWER_POINT || kd == SC_LOWER_VIEW) && lw->point) {
      int32_t e = memo_find(cx, value, idx);
      if (e >= 0) return e;
      e = lw->point(cx, p, output_slot(p, value), idx);
      if (e >= 0 && !memo_put(cx, value, idx, e)) {
        sc_diag_set(cx->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory building a kernel");
        return -1;
      }
      return e;
    }
  }
  /* a constant scalar becomes a kir constant */
  if (sc_value_has_data(v) && pn < 0 && sc_value_numel(v) == 1 &&
      sc_dtype_is_numeric(v->dtype)) {
    if (sc_dtype_is_float(v->dtype))
      return kir_const_f(cx->arena, cx->k, v->dtype, sc_load_f64(v->dtype, v->data, 0));
    return kir_const_i(cx->arena, cx->k, v->dtype, sc_load_i64(v->dtype, v->data, 0));
  }
  int32_t b = cx->value_buffer[value];
  if (b < 0 && sc_value_is_const(v) && pn < 0) b = sc_lower_buffer_of(cx, value);
  if (b < 0) {
    sc_diag_set(cx->diag, SC_ERR_INVALID, NULL, NULL,
                "value '%s' is read but has no buffer (bad fusion group?)", v->name);
    return -1;
  }
  int32_t pi = param_for(cx, b, false);
  int32_t off = sc_lower_offset(cx, v->rank, v->dims, idx);
  if (pi < 0 || off < 0) return -1;
  return kir_load(cx->arena, cx->k, pi, off);
}

int32_t sc_lower_input_at(sc_lower_ctx *cx, const sc_node *n, int32_t in,
                          const int32_t *idx) {
  int32_t v = in >= 0 && in < n->n_inputs ? n->inputs[in] : -1;
  if (v < 0) {
    sc_lower_error(cx, n, SC_ERR_INVALID, "input %d is omitted", in);
    return -1;
  }
  return sc_lower_value_at(cx, v, idx);
}

/* ---- storing ---- */

sc_status sc_lower_store_value(sc_lower_ctx *cx, int32_t v, const int32_t *idx, int32_t e) {
  if (e < 0) return failed(cx);
  int32_t b = cx->value_buffer[v];
  if (b < 0) return SC_OK; /* nobody reads it */
  const sc_value *val = &cx->g->values[v]; /* its buffer has its dtype */
  return store_at(cx, b, val->rank, val->dims, val->name, idx, e);
}

sc_status sc_lower_store(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                         const int32_t *idx, int32_t val) {
  if (out < 0 || out >= n->n_outputs || n->outputs[out] < 0) return SC_OK;
  if (val < 0) return failed(cx);
  if (!cx->k)
    return sc_lower_error(cx, n, SC_ERR_INVALID, "store outside a kernel");
  int32_t v = n->outputs[out];
  sc_lower_group *grp = cx->grp;
  sc_status st = SC_OK;
  if (grp && grp->anchor >= 0 && &cx->g->nodes[grp->anchor] == n && grp->fused_value == v) {
    const sc_value *fv = &cx->g->values[v];
    grp->sub_value = v;
    grp->sub_expr = val;
    grp->sub_rank = fv->rank;
    memcpy(grp->sub_idx, idx, sizeof(int32_t) * (size_t)fv->rank);
    for (int32_t i = 0; i < grp->n_stored && st == SC_OK; i++) {
      int32_t s = grp->stored[i];
      int32_t e = sc_lower_value_at(cx, s, idx);
      st = sc_lower_store_value(cx, s, idx, e);
    }
    grp->sub_value = -1;
    grp->n_epilogue_stores++;
    if (st != SC_OK) return st;
  }
  return sc_lower_store_value(cx, v, idx, val);
}
