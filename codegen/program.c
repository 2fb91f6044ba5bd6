/* program.c — the program container: buffers, kernels and steps, with a
 * stable text dump for golden tests (see codegen/program.h).
 *
 * Everything a program holds lives in its own arena: names and origins are
 * copied in, the arrays grow by copying into a bigger arena block. CONST data
 * stays borrowed. Building a program (sc_program_from_graph) is in
 * codegen/lower.c, its memory plan in passes/memplan.c and its JSON form in
 * codegen/program_json.c; this file only holds and prints it, and says which
 * buffers each step touches (sc_step_buffers), the one definition the memory
 * plan and the runtime share. */
#include "codegen/program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sc_program *sc_program_create(void) {
  sc_program *p = sc_calloc(1, sizeof *p);
  if (!p) return NULL;
  sc_arena_init(&p->arena);
  p->arena_align = 64;
  sc_mesh_init(&p->mesh);
  return p;
}

void sc_program_destroy(sc_program *p) {
  if (!p) return;
  sc_arena_free(&p->arena);
  sc_free(p);
}

/* Grows *arr (n used, *cap allocated, elements of size sz) to hold one more. */
static bool grow(sc_arena *a, void **arr, int32_t n, int32_t *cap, size_t sz) {
  if (n < *cap) return true;
  if (*cap > INT32_MAX / 2) return false;
  int32_t nc = *cap < 8 ? 8 : *cap * 2;
  void *na = sc_arena_array(a, (size_t)nc, sz);
  if (!na) return false;
  if (n) memcpy(na, *arr, (size_t)n * sz);
  *arr = na;
  *cap = nc;
  return true;
}

int32_t sc_program_add_buffer(sc_program *p, const sc_buffer *b) {
  if (!grow(&p->arena, (void **)&p->buffers, p->n_buffers, &p->cap_buffers, sizeof *p->buffers))
    return -1;
  sc_buffer nb = *b;
  if (nb.name && !(nb.name = sc_arena_strdup(&p->arena, nb.name))) return -1;
  if (nb.kind != SC_BUF_VIEW) nb.alias_of = -1;
  if (nb.bytes == 0) { /* derive from the shape */
    int64_t n = sc_dtype_size(nb.dtype);
    for (int32_t d = 0; d < nb.rank && d < SC_MAX_RANK; d++)
      if (!sc_mul_i64(n, nb.dims[d], &n)) return -1;
    nb.bytes = n;
  }
  p->buffers[p->n_buffers] = nb;
  return p->n_buffers++;
}

int32_t sc_program_add_kernel(sc_program *p, kir_kernel *k) {
  if (!grow(&p->arena, (void **)&p->kernels, p->n_kernels, &p->cap_kernels, sizeof *p->kernels))
    return -1;
  p->kernels[p->n_kernels] = k;
  return p->n_kernels++;
}

const char *sc_gemm_fp8_refusal(const sc_gemm *g, sc_dtype tc, sc_dtype ta, sc_dtype tb) {
  if (tc != SC_DTYPE_F32 && tc != SC_DTYPE_BF16) return "the product is not f32 or bf16";
  if (ta == SC_DTYPE_F8E5M2 && tb == SC_DTYPE_F8E5M2) return "both operands are E5M2";
  if (g->bias >= 0 || g->beta != 0.0f) return "the product adds a bias or C";
  if (g->act != SC_GEMM_ACT_NONE) return "the product's activation is fused";
  if (g->trans_a || !g->trans_b)
    return "the operands are not laid out \"TN\" (k contiguous in both A and B)";
  if (g->k % 16 || g->lda % 16 || g->ldb % 16 || g->ldc % 16)
    return "k or a leading dim is not a multiple of 16";
  if (g->batch > 1 && (g->stride_a % 16 || g->stride_b % 16))
    return "a batch stride is not a multiple of 16";
  return NULL;
}

sc_gemm sc_gemm_fp8_layout(const sc_gemm *g) {
  sc_gemm v = *g;
  if (g->a8_tn) v.trans_a = false, v.lda = g->k;
  if (g->b8_tn) v.trans_b = true, v.ldb = g->k;
  return v;
}

void sc_program_fp8_gemms(const sc_program *p, int32_t *n_fp8, int32_t *n_ok, const char **why,
                          int32_t *n_why, int32_t max, int32_t *n_reasons) {
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_gemm *g = &p->steps[i].gemm;
    if (p->steps[i].kind != SC_STEP_GEMM || !g->fp8) continue;
    (*n_fp8)++;
    sc_gemm v = sc_gemm_fp8_layout(g);
    const char *w = sc_gemm_fp8_refusal(&v, p->buffers[g->c].dtype, p->buffers[g->a8].dtype,
                                        p->buffers[g->b8].dtype);
    if (!w) {
      (*n_ok)++;
      continue;
    }
    int32_t k = 0;
    while (k < *n_reasons && why[k] != w) k++;
    if (k == *n_reasons && k < max) why[(*n_reasons)++] = w, n_why[k] = 0;
    if (k < *n_reasons) n_why[k]++;
  }
}

int32_t sc_program_add_step(sc_program *p, const sc_step *s) {
  if (!grow(&p->arena, (void **)&p->steps, p->n_steps, &p->cap_steps, sizeof *p->steps))
    return -1;
  sc_step ns = *s;
  if (ns.origin && !(ns.origin = sc_arena_strdup(&p->arena, ns.origin))) return -1;
  if (ns.kind == SC_STEP_GEMM && ns.gemm.act == SC_GEMM_ACT_NONE)
    ns.gemm.act_out = -1, ns.gemm.act_aux = false;
  if (ns.kind == SC_STEP_GEMM && ns.gemm.act != SC_GEMM_ACT_DGELU_TANH) ns.gemm.act_in = -1;
  if (ns.kind == SC_STEP_GEMM && ns.gemm.bgrad == SC_GEMM_BGRAD_NONE)
    ns.gemm.bgrad_out = ns.gemm.bgrad_kernel = -1;
  if (ns.kind == SC_STEP_GEMM && !ns.gemm.fp8) {
    ns.gemm.a8 = ns.gemm.b8 = -1;
    ns.gemm.a8_tn = ns.gemm.b8_tn = false;
    ns.gemm.scaled = false;
  }
  if (ns.kind == SC_STEP_GEMM && !ns.gemm.scaled) ns.gemm.a8_scale = ns.gemm.b8_scale = -1;
  p->steps[p->n_steps] = ns;
  return p->n_steps++;
}

static sc_status add_id(sc_program *p, int32_t **arr, int32_t *n, int32_t buffer) {
  if (buffer < 0 || buffer >= p->n_buffers) return SC_ERR_USAGE;
  int32_t *na = sc_arena_array(&p->arena, (size_t)*n + 1, sizeof *na);
  if (!na) return SC_ERR_NOMEM;
  if (*n) memcpy(na, *arr, (size_t)*n * sizeof *na);
  na[(*n)++] = buffer;
  *arr = na;
  return SC_OK;
}

sc_status sc_program_add_input(sc_program *p, int32_t buffer) {
  return add_id(p, &p->inputs, &p->n_inputs, buffer);
}
sc_status sc_program_add_output(sc_program *p, int32_t buffer) {
  return add_id(p, &p->outputs, &p->n_outputs, buffer);
}

/* The input buffer that output buffer `out` is paired with, or -1. */
static int32_t paired_input(const sc_program *p, int32_t out) {
  for (int32_t j = 0; j < p->n_outputs; j++)
    if (p->outputs[j] == out) {
      int32_t i = sc_program_updates(p, j);
      return i >= 0 ? p->inputs[i] : -1;
    }
  return -1;
}

/* A multi-output kernel whose stores cannot be ordered (below) computes
 * every value first, into a register, then stores them all: each STORE
 * phase becomes a REDUCE phase over the single inner point (MAX, which
 * gives back its one operand exactly, NaN included) and a STORE of that
 * register at the end. Only f32/f64 values (the state's dtypes), so the
 * register's dtype is the value's. Then every load comes before every
 * store and each pair is legal. */
static sc_status registers_first(sc_program *p, kir_kernel *k) {
  int32_t np = k->n_phases;
  if (k->inner != 1) return SC_OK;
  for (int32_t q = 0; q < np; q++) {
    sc_dtype t = k->exprs[k->phases[q].value].dtype;
    if (t != SC_DTYPE_F32 && t != SC_DTYPE_F64) return SC_OK;
  }
  kir_phase *old = sc_calloc((size_t)np, sizeof *old);
  if (!old) return SC_ERR_NOMEM;
  memcpy(old, k->phases, (size_t)np * sizeof *old);
  k->n_phases = 0;
  sc_status st = SC_OK;
  for (int32_t q = 0; q < np && st == SC_OK; q++)
    if (kir_add_reduce(&p->arena, k, KIR_RED_MAX, k->exprs[old[q].value].dtype, old[q].value) < 0)
      st = SC_ERR_NOMEM;
  for (int32_t q = 0; q < np && st == SC_OK; q++) {
    int32_t r = kir_reg(&p->arena, k, q);
    if (r < 0 || kir_add_store(&p->arena, k, old[q].out_param, old[q].out_index, r) < 0)
      st = SC_ERR_NOMEM;
  }
  sc_free(old);
  return st;
}

/* A kernel of several STORE phases only (a multi-output elementwise
 * kernel: passes/fuse.c) computes each phase independently of the others,
 * so their order is free; the memory plan keeps a pair in place only when
 * no phase after the one storing "new:X" loads X (kir_reads_aligned). So
 * the phases are put in an order that honours every such constraint (a
 * stable topological order), when one exists; else (SGD with momentum and
 * weight decay: the momentum reads the weight, the weight's update the
 * momentum) the values go through registers first (registers_first). */
static sc_status order_stores(sc_program *p, kir_kernel *k) {
  int32_t np = k->n_phases;
  if (np < 2) return SC_OK;
  for (int32_t q = 0; q < np; q++)
    if (k->phases[q].kind != KIR_PHASE_STORE) return SC_OK;
  size_t nq = (size_t)np, npar = (size_t)k->n_params + 1;
  bool *loads = sc_calloc(nq * npar, sizeof *loads);      /* phase x param */
  bool *used = sc_calloc((size_t)k->n_exprs + 1, sizeof *used);
  bool *after = sc_calloc(nq * nq, sizeof *after);        /* [a][b]: a after b */
  int32_t *order = sc_calloc(nq, sizeof *order);
  bool *placed = sc_calloc(nq, sizeof *placed);
  sc_status st = loads && used && after && order && placed ? SC_OK : SC_ERR_NOMEM;
  for (int32_t q = 0; st == SC_OK && q < np; q++) {
    memset(used, 0, (size_t)k->n_exprs * sizeof *used);
    used[k->phases[q].value] = used[k->phases[q].out_index] = true;
    for (int32_t e = k->n_exprs - 1; e >= 0; e--) { /* operands come first */
      if (!used[e]) continue;
      const kir_expr *x = &k->exprs[e];
      if (x->op == KIR_LOAD) loads[(size_t)q * npar + (size_t)x->var] = true;
      if (x->a >= 0) used[x->a] = true;
      if (x->b >= 0) used[x->b] = true;
      if (x->c >= 0) used[x->c] = true;
    }
  }
  bool any = false;
  for (int32_t a = 0; st == SC_OK && a < np; a++) { /* a stores new:X */
    int32_t in = paired_input(p, k->params[k->phases[a].out_param].buffer);
    for (int32_t x = 0; in >= 0 && x < k->n_params; x++) {
      if (k->params[x].buffer != in) continue;
      for (int32_t b = 0; b < np; b++)
        if (b != a && loads[(size_t)b * npar + (size_t)x])
          any = after[(size_t)a * nq + (size_t)b] = true;
    }
  }
  int32_t n = 0;
  while (st == SC_OK && any && n < np) {
    int32_t pick = -1;
    for (int32_t a = 0; a < np && pick < 0; a++) {
      if (placed[a]) continue;
      bool ready = true;
      for (int32_t b = 0; b < np && ready; b++)
        ready = !after[(size_t)a * nq + (size_t)b] || placed[b];
      if (ready) pick = a;
    }
    if (pick < 0) break; /* a cycle: the order stays */
    placed[pick] = true;
    order[n++] = pick;
  }
  if (st == SC_OK && any && n < np) st = registers_first(p, k);
  if (st == SC_OK && any && n == np) {
    kir_phase *tmp = sc_calloc(nq, sizeof *tmp);
    if (!tmp) {
      st = SC_ERR_NOMEM;
    } else {
      for (int32_t q = 0; q < np; q++) tmp[q] = k->phases[order[q]];
      memcpy(k->phases, tmp, nq * sizeof *tmp);
      sc_free(tmp);
    }
  }
  sc_free(loads);
  sc_free(used);
  sc_free(after);
  sc_free(order);
  sc_free(placed);
  return st;
}

sc_status sc_program_pair_state(sc_program *p) {
  p->updates = NULL;
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const sc_buffer *o = &p->buffers[p->outputs[j]];
    if (o->kind != SC_BUF_OUTPUT || !o->name || strncmp(o->name, "new:", 4) != 0) continue;
    for (int32_t i = 0; i < p->n_inputs; i++) {
      const sc_buffer *x = &p->buffers[p->inputs[i]];
      if (!x->name || strcmp(x->name, o->name + 4) != 0 || x->kind != SC_BUF_INPUT ||
          x->dtype != o->dtype || x->rank != o->rank ||
          memcmp(x->dims, o->dims, (size_t)x->rank * sizeof *x->dims) != 0)
        continue;
      if (!p->updates) {
        p->updates = sc_arena_array(&p->arena, (size_t)p->n_outputs, sizeof *p->updates);
        if (!p->updates) return SC_ERR_NOMEM;
        for (int32_t k = 0; k < p->n_outputs; k++) p->updates[k] = -1;
      }
      p->updates[j] = i;
      break;
    }
  }
  for (int32_t k = 0; p->updates && k < p->n_kernels; k++)
    if (order_stores(p, p->kernels[k]) != SC_OK) return SC_ERR_NOMEM;
  return SC_OK;
}

sc_status sc_program_bind_inputs(sc_program *p, const char *const *names, int32_t n) {
  p->bound = NULL;
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const char *x = p->buffers[p->inputs[i]].name;
    int32_t k = 0;
    while (x && k < n && strcmp(names[k], x) != 0) k++;
    if (!x || k == n) continue;
    if (!p->bound && !(p->bound = sc_arena_array(&p->arena, (size_t)p->n_inputs,
                                                 sizeof *p->bound)))
      return SC_ERR_NOMEM;
    p->bound[i] = true;
  }
  return SC_OK;
}

bool sc_program_bound(const sc_program *p, int32_t b) {
  if (!p->bound || b < 0 || b >= p->n_buffers) return false;
  int32_t r = sc_program_root(p, b);
  for (int32_t i = 0; r >= 0 && i < p->n_inputs; i++)
    if (p->bound[i] && p->inputs[i] == r) return true;
  for (int32_t j = 0; r >= 0 && p->updates && j < p->n_outputs; j++)
    if (p->outputs[j] == r && p->updates[j] >= 0 && p->bound[p->updates[j]]) return true;
  return false;
}

int32_t sc_program_root(const sc_program *p, int32_t buffer) {
  int32_t b = buffer;
  for (int32_t hops = 0; b >= 0 && b < p->n_buffers && p->buffers[b].kind == SC_BUF_VIEW;
       hops++) {
    SC_ASSERT(hops <= p->n_buffers); /* a cycle of views is a bug */
    b = p->buffers[b].alias_of;
  }
  return b;
}

bool sc_program_same_address(const sc_program *p, int32_t a, int32_t b) {
  if (!p || a < 0 || b < 0 || a >= p->n_buffers || b >= p->n_buffers) return false;
  int32_t ra = sc_program_root(p, a), rb = sc_program_root(p, b);
  if (ra < 0 || rb < 0) return false;
  if (ra == rb) return true;
  const sc_buffer *x = &p->buffers[ra], *y = &p->buffers[rb];
  bool ax = x->kind == SC_BUF_INPUT || x->kind == SC_BUF_OUTPUT || x->kind == SC_BUF_TEMP;
  bool ay = y->kind == SC_BUF_INPUT || y->kind == SC_BUF_OUTPUT || y->kind == SC_BUF_TEMP;
  return ax && ay && x->offset >= 0 && x->offset == y->offset;
}

bool sc_program_disjoint(const sc_program *p, int32_t a, int32_t b) {
  if (!p || a < 0 || b < 0 || a >= p->n_buffers || b >= p->n_buffers) return false;
  int32_t ra = sc_program_root(p, a), rb = sc_program_root(p, b);
  if (ra < 0 || rb < 0 || ra == rb) return false;
  const sc_buffer *x = &p->buffers[ra], *y = &p->buffers[rb];
  bool ax = x->kind == SC_BUF_INPUT || x->kind == SC_BUF_OUTPUT || x->kind == SC_BUF_TEMP;
  bool ay = y->kind == SC_BUF_INPUT || y->kind == SC_BUF_OUTPUT || y->kind == SC_BUF_TEMP;
  if (ax && ay)
    return x->offset >= 0 && y->offset >= 0 && x->bytes >= 0 && y->bytes >= 0 &&
           (x->offset >= y->offset + y->bytes || y->offset >= x->offset + x->bytes);
  /* a constant lives outside the arena (its own data), never written */
  return (ax && y->kind == SC_BUF_CONST) || (ay && x->kind == SC_BUF_CONST);
}

bool sc_program_pointwise_after(const sc_program *p, int32_t k, int32_t c) {
  if (!p || k < 0 || k >= p->n_kernels || c < 0 || c >= p->n_buffers) return false;
  const kir_kernel *kk = p->kernels[k];
  const sc_buffer *cb = &p->buffers[c];
  int64_t pts = 1, size = sc_dtype_size(cb->dtype);
  for (int32_t d = 0; d < kk->outer_rank; d++) pts *= kk->outer_dims[d];
  if (kk->inner != 1 || kk->n_phases < 1 || size <= 0 || cb->bytes != pts * size) return false;
  for (int32_t h = 0; h < kk->n_phases; h++)
    if (kk->phases[h].kind != KIR_PHASE_STORE || !kir_is_point_index(kk, kk->phases[h].out_index))
      return false;
  bool *at_c = calloc((size_t)kk->n_params + 1, sizeof *at_c);
  if (!at_c) return false;
  bool ok = true;
  for (int32_t i = 0; i < kk->n_params && ok; i++) {
    int32_t b = kk->params[i].buffer;
    at_c[i] = sc_program_same_address(p, b, c);
    ok = at_c[i] ? kk->params[i].dtype == cb->dtype : sc_program_disjoint(p, b, c);
  }
  for (int32_t e = 0; e < kk->n_exprs && ok; e++) {
    const kir_expr *x = &kk->exprs[e];
    if (x->op == KIR_LOAD && x->var >= 0 && x->var < kk->n_params && at_c[x->var])
      ok = kir_is_point_index(kk, x->a);
  }
  free(at_c);
  return ok;
}

#define SCATTER_ROWS(T)                                                                \
  for (int64_t t = 0; t < c->n; t++) {                                                 \
    int64_t i = idx64 ? idx64[t] : idx32[t];                                           \
    if (i < -c->rows || i >= c->rows) return t;                                        \
    T *dst = (T *)out + (i < 0 ? i + c->rows : i) * c->row;                            \
    const T *src = (const T *)upd + t * c->row;                                        \
    for (int64_t j = 0; j < c->row; j++) dst[j] += src[j];                             \
  }

int64_t sc_scatter_add_rows(const sc_scatter_step *c, sc_dtype dt, sc_dtype it, void *out,
                            const void *indices, const void *upd) {
  const int64_t *idx64 = it == SC_DTYPE_I64 ? indices : NULL;
  const int32_t *idx32 = it == SC_DTYPE_I64 ? NULL : indices;
  if (dt == SC_DTYPE_F64) {
    SCATTER_ROWS(double)
  } else {
    SCATTER_ROWS(float)
  }
  return -1;
}
#undef SCATTER_ROWS

const char *sc_gemm_act_name(sc_gemm_act a) {
  static const char *const names[SC_GEMM_ACT_COUNT] = {"none", "relu", "gelu_tanh",
                                                        "dgelu_tanh"};
  return a >= 0 && a < SC_GEMM_ACT_COUNT ? names[a] : "?";
}

int32_t sc_comm_halves(const sc_comm_step *c, sc_comm_step half[2]) {
  half[0] = *c;
  if (c->kind != SC_COMM_SEND_RECV) return 1;
  half[1] = *c;
  half[0].kind = SC_COMM_SEND;
  half[0].out = -1;
  half[1].kind = SC_COMM_RECV;
  half[1].in = -1;
  return 2;
}

void sc_step_buffers(const sc_program *p, const sc_step *s, sc_step_buffer_fn fn, void *ud) {
  if (s->kind == SC_STEP_WAIT) {
    if (s->started >= 0 && s->started < p->n_steps &&
        (p->steps[s->started].kind == SC_STEP_COMM || p->steps[s->started].kind == SC_STEP_COPY))
      sc_step_buffers(p, &p->steps[s->started], fn, ud);
    return;
  }
  if (s->kind == SC_STEP_COPY) {
    fn(ud, s->copy.src, false);
    fn(ud, s->copy.dst, true);
    return;
  }
  if (s->kind == SC_STEP_GEMM) {
    const sc_gemm *g = &s->gemm;
    fn(ud, g->a, false);
    fn(ud, g->b, false);
    if (g->fp8) { /* read when the device multiplies FP8 values */
      fn(ud, g->a8, false);
      fn(ud, g->b8, false);
    }
    if (g->scaled) { /* read by every device */
      fn(ud, g->a8_scale, false);
      fn(ud, g->b8_scale, false);
    }
    if (g->conv.on) fn(ud, g->conv.x, false); /* read when the device convolves */
    if (g->conv.on && g->conv.bias >= 0) fn(ud, g->conv.bias, false);
    if (g->bias >= 0) fn(ud, g->bias, false);
    if (g->beta != 0.0f) fn(ud, g->c, false);
    fn(ud, g->c, true);
  }
  if (s->kind == SC_STEP_CHECK) {
    fn(ud, s->check.buffer, false);
    return;
  }
  if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
    const sc_attention_step *a = &s->attn;
    bool grad = s->kind == SC_STEP_ATTENTION_GRAD;
    fn(ud, a->q, false);
    fn(ud, a->k, false);
    fn(ud, a->v, false);
    if (a->mask >= 0) fn(ud, a->mask, false);
    if (grad) {
      fn(ud, a->o, false);
      fn(ud, a->lse, false);
      fn(ud, a->d_o, false);
      fn(ud, a->dq, true);
      fn(ud, a->dk, true);
      fn(ud, a->dv, true);
    } else {
      fn(ud, a->o, true);
      fn(ud, a->lse, true);
    }
    return;
  }
  if (s->kind == SC_STEP_SCATTER_ADD) {
    fn(ud, s->scatter.data, false);
    fn(ud, s->scatter.indices, false);
    fn(ud, s->scatter.updates, false);
    fn(ud, s->scatter.out, true);
    return;
  }
  if (s->kind == SC_STEP_COMM) {
    const sc_comm_step *c = &s->comm;
    if (c->in >= 0) fn(ud, c->in, false);
    if (c->pack >= 0) {
      fn(ud, c->pack, true);
      fn(ud, c->pack, false);
    }
    if (c->unpack >= 0) {
      fn(ud, c->unpack, true);
      fn(ud, c->unpack, false);
    }
    if (c->out >= 0) fn(ud, c->out, true);
    return;
  }
  if (s->kind == SC_STEP_GEMM && s->gemm.bgrad != SC_GEMM_BGRAD_NONE &&
      s->gemm.bgrad_kernel >= 0 && s->gemm.bgrad_kernel < p->n_kernels) {
    const kir_kernel *k = p->kernels[s->gemm.bgrad_kernel];
    for (int32_t i = 0; i < k->n_params; i++) fn(ud, k->params[i].buffer, k->params[i].written);
  }
  if (s->kernel >= 0 && s->kernel < p->n_kernels) {
    const kir_kernel *k = p->kernels[s->kernel];
    for (int32_t i = 0; i < k->n_params; i++) fn(ud, k->params[i].buffer, k->params[i].written);
  }
}

/* Whether buffer b exists and holds at least `elems` elements of dtype t. */
static bool attn_holds(const sc_program *p, int32_t b, sc_dtype t, int64_t elems) {
  int64_t bytes;
  return b >= 0 && b < p->n_buffers && p->buffers[b].dtype == t &&
         sc_mul_i64(elems, (int64_t)sc_dtype_size(t), &bytes) && p->buffers[b].bytes >= bytes;
}

static bool attn_writable(const sc_program *p, int32_t b) {
  sc_buf_kind k = p->buffers[sc_program_root(p, b)].kind;
  return k != SC_BUF_CONST && k != SC_BUF_INPUT;
}

static bool mul4(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *out) {
  return sc_mul_i64(a, b, out) && sc_mul_i64(*out, c, out) && sc_mul_i64(*out, d, out);
}

const char *sc_attention_problem(const sc_program *p, const sc_step *s) {
  const sc_attention_step *a = &s->attn;
  bool grad = s->kind == SC_STEP_ATTENTION_GRAD;
  if (s->kind != SC_STEP_ATTENTION && !grad) return "not an attention step";
  if (a->batch < 0 || a->heads < 1 || a->kv_heads < 1 || a->sq < 0 || a->skv < 0 || a->d < 1 ||
      a->dv_dim < 1 || a->heads % a->kv_heads != 0)
    return "bad extents (heads a multiple of kv_heads, d and dv at least 1)";
  if (!isfinite(a->scale)) return "scale is not finite";
  if (a->q < 0 || a->q >= p->n_buffers) return "buffer id out of range";
  sc_dtype t = p->buffers[a->q].dtype;
  if (t != SC_DTYPE_F32 && t != SC_DTYPE_BF16 && t != SC_DTYPE_F16)
    return "q, k, v and o are f32, bf16 or f16";
  int64_t nq, nk, nv, no, nl;
  if (!mul4(a->batch, a->heads, a->sq, a->d, &nq) ||
      !mul4(a->batch, a->kv_heads, a->skv, a->d, &nk) ||
      !mul4(a->batch, a->kv_heads, a->skv, a->dv_dim, &nv) ||
      !mul4(a->batch, a->heads, a->sq, a->dv_dim, &no) || !mul4(a->batch, a->heads, a->sq, 1, &nl))
    return "extents overflow";
  if (!attn_holds(p, a->q, t, nq) || !attn_holds(p, a->k, t, nk) ||
      !attn_holds(p, a->v, t, nv) || !attn_holds(p, a->o, t, no) ||
      !attn_holds(p, a->lse, SC_DTYPE_F32, nl))
    return "q, k, v, o (one dtype) or lse (f32) missing, of another dtype or smaller than the "
           "extents";
  if (a->mask >= 0) {
    if (a->mask >= p->n_buffers) return "buffer id out of range";
    sc_dtype mt = p->buffers[a->mask].dtype;
    if (mt != t && mt != SC_DTYPE_F32) return "the mask is of the scores' dtype or f32";
    int64_t last = 0, x;
    if (a->mask_stride_b < 0 || a->mask_stride_h < 0) return "negative mask strides";
    if (a->batch > 0 && a->sq > 0 && a->skv > 0) {
      if (!sc_mul_i64(a->batch - 1, a->mask_stride_b, &last) ||
          !sc_mul_i64(a->heads - 1, a->mask_stride_h, &x) || !sc_add_i64(last, x, &last) ||
          !sc_mul_i64(a->sq, a->skv, &x) || !sc_add_i64(last, x, &last) ||
          !attn_holds(p, a->mask, mt, last))
        return "the mask is smaller than its strides and extents";
    }
  } else if (a->mask != -1) {
    return "buffer id out of range";
  }
  if (grad) {
    if (!attn_holds(p, a->d_o, t, no) || !attn_holds(p, a->dq, t, nq) ||
        !attn_holds(p, a->dk, t, nk) || !attn_holds(p, a->dv, t, nv))
      return "d_o, dq, dk or dv missing, of another dtype or smaller than the extents";
    if (!attn_writable(p, a->dq) || !attn_writable(p, a->dk) || !attn_writable(p, a->dv))
      return "writes a constant or an input";
  } else {
    if (a->d_o != -1 || a->dq != -1 || a->dk != -1 || a->dv != -1)
      return "the forward names gradient buffers";
    if (!attn_writable(p, a->o) || !attn_writable(p, a->lse))
      return "writes a constant or an input";
  }
  return NULL;
}

static const char *const kind_names[] = {"input", "output", "const", "temp", "view", "host"};

static void print_dims(FILE *out, int32_t rank, const int64_t *dims) {
  fputc('[', out);
  for (int32_t d = 0; d < rank; d++) fprintf(out, "%s%lld", d ? "," : "", (long long)dims[d]);
  fputc(']', out);
}

void sc_program_print(const sc_program *p, FILE *out) {
  fprintf(out, "program buffers %d kernels %d steps %d arena %lld align %lld\n",
          (int)p->n_buffers, (int)p->n_kernels, (int)p->n_steps, (long long)p->arena_bytes,
          (long long)p->arena_align);
  if (p->host_bytes > 0) fprintf(out, "host pool %lld\n", (long long)p->host_bytes);
  fputs("inputs", out);
  for (int32_t i = 0; i < p->n_inputs; i++) fprintf(out, " b%d", (int)p->inputs[i]);
  fputs("\noutputs", out);
  for (int32_t i = 0; i < p->n_outputs; i++) {
    int32_t u = sc_program_updates(p, i);
    if (u >= 0) fprintf(out, " b%d(updates b%d)", (int)p->outputs[i], (int)p->inputs[u]);
    else fprintf(out, " b%d", (int)p->outputs[i]);
  }
  fputc('\n', out);
  for (int32_t i = 0; i < p->n_buffers; i++) {
    const sc_buffer *b = &p->buffers[i];
    fprintf(out, "b%d %s %s ", (int)i,
            (unsigned)b->kind <= SC_BUF_HOST ? kind_names[b->kind] : "?",
            sc_dtype_name(b->dtype));
    print_dims(out, b->rank, b->dims);
    fprintf(out, " bytes %lld", (long long)b->bytes);
    if (b->kind == SC_BUF_VIEW) fprintf(out, " view-of b%d", (int)b->alias_of);
    else if (b->kind != SC_BUF_CONST) {
      if (b->offset >= 0) fprintf(out, " @%lld", (long long)b->offset);
      else fputs(sc_program_bound(p, i) ? " bound" : " @?", out);
    }
    if (b->name) fprintf(out, " \"%s\"", b->name);
    fputc('\n', out);
  }
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    fprintf(out, "s%d ", (int)i);
    if (s->kind == SC_STEP_GEMM) {
      const sc_gemm *g = &s->gemm;
      fprintf(out, "gemm c=b%d a=b%d%s b=b%d%s batch %lld m %lld n %lld k %lld lda %lld ldb %lld "
                   "ldc %lld strides %lld,%lld,%lld alpha %.9g beta %.9g",
              (int)g->c, (int)g->a, g->trans_a ? "^T" : "", (int)g->b, g->trans_b ? "^T" : "",
              (long long)g->batch, (long long)g->m, (long long)g->n, (long long)g->k,
              (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)g->stride_a,
              (long long)g->stride_b, (long long)g->stride_c, (double)g->alpha, (double)g->beta);
      if (g->bias >= 0) fprintf(out, " bias=b%d%s", (int)g->bias, g->bias_full ? " full" : "");
      if (g->fp8)
        fprintf(out, " fp8 a=b%d%s b=b%d%s", (int)g->a8, g->a8_tn ? " tn" : "", (int)g->b8,
                g->b8_tn ? " tn" : "");
      if (g->scaled)
        fprintf(out, " scales a=b%d b=b%d", (int)g->a8_scale, (int)g->b8_scale);
      const sc_conv_geom *v = &g->conv;
      if (v->on)
        fprintf(out, " conv x=b%d prep k%d,k%d c %lld hw %lldx%lld kernel %lldx%lld stride %lld,%lld "
                     "dil %lld,%lld pads %lld,%lld,%lld,%lld out %lldx%lld",
                (int)v->x, (int)v->prep[0], (int)v->prep[1], (long long)v->c, (long long)v->h,
                (long long)v->w, (long long)v->kh, (long long)v->kw, (long long)v->sh,
                (long long)v->sw, (long long)v->dh, (long long)v->dw, (long long)v->pt,
                (long long)v->pl, (long long)v->pb, (long long)v->pr, (long long)v->oh,
                (long long)v->ow);
      if (s->kernel >= 0)
        fprintf(out, " epilogue k%d %s", (int)s->kernel,
                s->kernel < p->n_kernels ? p->kernels[s->kernel]->name : "?");
      if (g->act != SC_GEMM_ACT_NONE)
        fprintf(out, " act %s->b%d%s", sc_gemm_act_name(g->act), (int)g->act_out,
                g->act_aux ? " aux" : "");
      if (g->act == SC_GEMM_ACT_DGELU_TANH) fprintf(out, " in=b%d", (int)g->act_in);
      if (g->bgrad != SC_GEMM_BGRAD_NONE)
        fprintf(out, " bgrad %s->b%d k%d %s", g->bgrad == SC_GEMM_BGRAD_A ? "a" : "b",
                (int)g->bgrad_out, (int)g->bgrad_kernel,
                g->bgrad_kernel >= 0 && g->bgrad_kernel < p->n_kernels
                    ? p->kernels[g->bgrad_kernel]->name : "?");
    } else if (s->kind == SC_STEP_CHECK) {
      fprintf(out, "check b%d in [-%lld, %lld)", (int)s->check.buffer, (long long)s->check.dim,
              (long long)s->check.dim);
    } else if (s->kind == SC_STEP_SCATTER_ADD) {
      const sc_scatter_step *c = &s->scatter;
      fprintf(out, "scatter_add out=b%d data=b%d indices=b%d updates=b%d rows %lld row %lld n %lld",
              (int)c->out, (int)c->data, (int)c->indices, (int)c->updates, (long long)c->rows,
              (long long)c->row, (long long)c->n);
    } else if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
      const sc_attention_step *a = &s->attn;
      if (s->kind == SC_STEP_ATTENTION)
        fprintf(out, "attention o=b%d lse=b%d", (int)a->o, (int)a->lse);
      else
        fprintf(out, "attention_grad dq=b%d dk=b%d dv=b%d o=b%d lse=b%d d_o=b%d", (int)a->dq,
                (int)a->dk, (int)a->dv, (int)a->o, (int)a->lse, (int)a->d_o);
      fprintf(out, " q=b%d k=b%d v=b%d", (int)a->q, (int)a->k, (int)a->v);
      if (a->mask >= 0)
        fprintf(out, " mask=b%d strides %lld,%lld", (int)a->mask, (long long)a->mask_stride_b,
                (long long)a->mask_stride_h);
      fprintf(out, " batch %lld heads %lld kv_heads %lld sq %lld skv %lld d %lld dv %lld "
                   "scale %.9g%s",
              (long long)a->batch, (long long)a->heads, (long long)a->kv_heads, (long long)a->sq,
              (long long)a->skv, (long long)a->d, (long long)a->dv_dim, (double)a->scale,
              a->causal ? " causal" : "");
    } else if (s->kind == SC_STEP_WAIT) {
      fprintf(out, "wait s%d", (int)s->started);
    } else if (s->kind == SC_STEP_COPY) {
      fprintf(out, "copy start b%d -> b%d", (int)s->copy.src, (int)s->copy.dst);
    } else if (s->kind == SC_STEP_COMM) {
      static const char *const names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                          "all_to_all", "send", "recv", "send_recv"};
      _Static_assert(sizeof names / sizeof names[0] == SC_COMM_KIND_COUNT, "comm kinds");
      static const char *const ops[] = {"sum", "max", "min"};
      const sc_comm_step *c = &s->comm;
      fprintf(out, "comm %s%s", c->async ? "start " : "",
              (unsigned)c->kind < SC_COMM_KIND_COUNT ? names[c->kind] : "?");
      if (c->kind == SC_COMM_ALL_REDUCE || c->kind == SC_COMM_REDUCE_SCATTER)
        fprintf(out, " %s", (unsigned)c->reduce < 3 ? ops[c->reduce] : "?");
      if (c->in >= 0) fprintf(out, " in=b%d", (int)c->in);
      if (c->out >= 0) fprintf(out, " out=b%d", (int)c->out);
      if (c->pack >= 0)
        fprintf(out, " pack=b%d [%lld,n,%lld]", (int)c->pack, (long long)c->pack_outer,
                (long long)c->pack_inner);
      if (c->unpack >= 0)
        fprintf(out, " unpack=b%d [%lld,n,%lld]", (int)c->unpack, (long long)c->unpack_outer,
                (long long)c->unpack_inner);
      if (c->rows > 0) fprintf(out, " by %lld rows", (long long)c->rows);
      fprintf(out, " count %lld group", (long long)c->count);
      for (int32_t a = 0; a < p->mesh.n_axes; a++)
        if (c->axes & (1u << a)) fprintf(out, " %s", p->mesh.axes[a].name);
      fprintf(out, " (%lld)", (long long)c->group_size);
      if ((c->kind == SC_COMM_SEND || c->kind == SC_COMM_RECV || c->kind == SC_COMM_SEND_RECV) &&
          c->shift)
        fprintf(out, " shift %d tag %d", (int)c->shift, (int)c->tag);
      else if (c->kind == SC_COMM_SEND || c->kind == SC_COMM_RECV)
        fprintf(out, " peer %d tag %d", (int)c->peer, (int)c->tag);
    } else {
      fprintf(out, "kernel k%d %s", (int)s->kernel,
              s->kernel >= 0 && s->kernel < p->n_kernels ? p->kernels[s->kernel]->name : "?");
      const sc_pool_geom *v = &s->pool;
      if (s->kind == SC_STEP_KERNEL && v->on)
        fprintf(out, " max_pool x=b%d y=b%d prep k%d,k%d n %lld c %lld hw %lldx%lld kernel "
                     "%lldx%lld stride %lld,%lld pads %lld,%lld,%lld,%lld out %lldx%lld",
                (int)v->x, (int)v->y, (int)v->prep[0], (int)v->prep[1], (long long)v->n,
                (long long)v->c, (long long)v->h, (long long)v->w, (long long)v->kh,
                (long long)v->kw, (long long)v->sh, (long long)v->sw, (long long)v->pt,
                (long long)v->pl, (long long)v->pb, (long long)v->pr, (long long)v->oh,
                (long long)v->ow);
    }
    if (s->origin) fprintf(out, " (%s)", s->origin);
    fputc('\n', out);
  }
  for (int32_t i = 0; i < p->n_kernels; i++) {
    fprintf(out, "k%d ", (int)i);
    kir_print(p->kernels[i], out);
  }
}

/* ---- the steps only a training step's update needs ---- */
typedef struct need_ctx {
  const sc_program *p;
  bool *need;
  bool hit, wrote;
} need_ctx;

static void need_written(void *ud, int32_t b, bool written) {
  need_ctx *x = ud;
  x->wrote |= written;
  if (written && x->need[sc_program_root(x->p, b)]) x->hit = true;
}

static void need_read(void *ud, int32_t b, bool written) {
  need_ctx *x = ud;
  if (!written) x->need[sc_program_root(x->p, b)] = true;
}

/* Whether output `name` is one only the update needs (not a root). */
static bool update_output(const char *name) {
  if (!name) return false;
  if (strncmp(name, "new:", 4) == 0)
    return strncmp(name + 4, "accum:", 6) != 0;
  return strcmp(name, "train:grad_norm") == 0 || strcmp(name, "train:applied") == 0;
}

int32_t sc_program_update_steps(const sc_program *p, bool last_run, bool *only) {
  bool any = false;
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const char *n = p->buffers[p->outputs[j]].name;
    any |= n && strncmp(n, "new:", 4) == 0 && update_output(n);
  }
  if (!any) return 0;
  need_ctx x = {.p = p, .need = sc_calloc((size_t)p->n_buffers + 1, sizeof(bool))};
  if (!x.need) return -1;
  for (int32_t j = 0; j < p->n_outputs; j++)
    if (!update_output(p->buffers[p->outputs[j]].name))
      x.need[sc_program_root(p, p->outputs[j])] = true;
  for (int32_t b = 0; !last_run && b < p->n_buffers; b++) /* the gradients (passes/train.h) */
    if (p->buffers[b].name && strncmp(p->buffers[b].name, "grad:", 5) == 0)
      x.need[sc_program_root(p, b)] = true;
  int32_t count = 0;
  for (int32_t k = p->n_steps - 1; k >= 0; k--) {
    const sc_step *st = &p->steps[k];
    if (st->kind == SC_STEP_WAIT) continue;
    x.hit = x.wrote = false;
    sc_step_buffers(p, st, need_written, &x);
    bool p2p = st->kind == SC_STEP_COMM &&
               (st->comm.kind == SC_COMM_SEND || st->comm.kind == SC_COMM_RECV ||
                st->comm.kind == SC_COMM_SEND_RECV);
    if (x.hit || (last_run && (!x.wrote || p2p))) sc_step_buffers(p, st, need_read, &x);
    else {
      only[k] = true;
      count++;
    }
  }
  for (int32_t k = 0; k < p->n_steps; k++) {
    const sc_step *st = &p->steps[k];
    if (st->kind == SC_STEP_WAIT && st->started >= 0 && st->started < k && only[st->started]) {
      only[k] = true;
      count++;
    }
  }
  sc_free(x.need);
  return count;
}
