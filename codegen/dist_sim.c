/* dist_sim.c — a distributed program's step, simulated rank by rank on a
 * cluster (dist_sim.h).
 *
 * FLOPs and bytes are not recounted from the graph: a GEMM step carries its
 * shape, every step names the buffers it reads and writes
 * (sc_step_buffers), and a COMM step its group and buffers. Each stage
 * program's steps are costed once into a table (time, FLOPs, the term it
 * is attributed to, its queue); the walk then only adds times. A rank is a
 * cursor over its actions (a program run, with the hand-offs received
 * before it and sent after it in a pipelined training step): it advances
 * until it ends or needs a hand-off not yet sent, and the ranks are walked
 * round-robin until all have ended (or none can advance: an error).
 *
 * With a trace, every advance of a clock is also recorded (record()) at
 * the one place it happens: a computing step, expose() and receive() on
 * the compute queue, a collective on its group's queue, send() on the
 * point-to-point queue (one lane, though each peer's transfers queue
 * apart). Without one, record() returns at once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dist_sim.h"
#include "codegen/pipe_schedule.h"
#include "ir/attention.h"
#include "ir/pipe.h"

static double buffer_bytes(const sc_program *p, int32_t id) {
  return id >= 0 && id < p->n_buffers ? (double)p->buffers[id].bytes : 0;
}

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

/* ---- the cost of one step ---- */

/* The bytes a memory-bound step touches: each buffer it names, once. */
typedef struct touched {
  const sc_program *p;
  int32_t ids[64];
  int32_t n;
  double bytes;
} touched;

static void touch(void *ud, int32_t buffer, bool written) {
  (void)written;
  touched *t = ud;
  for (int32_t i = 0; i < t->n; i++)
    if (t->ids[i] == buffer) return;
  if (t->n < (int32_t)(sizeof t->ids / sizeof t->ids[0])) t->ids[t->n++] = buffer;
  t->bytes += buffer_bytes(t->p, buffer);
}

/* The bytes kernel k touches: each buffer it names, once, at most whole:
 * a buffer counts the elements the kernel can access in it when that is
 * less, (its LOAD expressions x phases + its STORE phases) x outer points x
 * inner, each expression evaluated at most once a point and phase. So a
 * copy kernel of one member of a contiguous Concat (codegen/lower.h,
 * sc_lower_kind_of) counts the member and its slice of the output, and a
 * Slice of one member out of a bucket (passes/partition/bucket.c) its rows,
 * not the whole bucket. */
static double kernel_bytes(const sc_program *p, const kir_kernel *k) {
  touched t = {.p = p};
  double pts = (double)(k->inner > 0 ? k->inner : 1);
  for (int32_t d = 0; d < k->outer_rank; d++) pts *= (double)k->outer_dims[d];
  double phases = k->n_phases > 0 ? k->n_phases : 1;
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *q = &k->params[i];
    double before = t.bytes;
    touch(&t, q->buffer, q->written);
    if (t.bytes == before) continue; /* named before (or none) */
    /* a multi-tensor kernel's param: its template param, over its segment */
    int32_t j = i, s = k->n_segs > 0 ? i / k->seg_params : 0;
    double seg_pts = pts;
    if (k->n_segs > 0) {
      j = i % k->seg_params;
      seg_pts = (double)(k->seg_start[s + 1] - k->seg_start[s]) * (double)kir_seg_inner(k, s);
    }
    double loads = 0, stores = 0;
    for (int32_t e = 0; e < k->n_exprs; e++)
      loads += k->exprs[e].op == KIR_LOAD && k->exprs[e].var == j;
    for (int32_t ph = 0; ph < k->n_phases; ph++)
      stores += k->phases[ph].kind == KIR_PHASE_STORE && k->phases[ph].out_param == j;
    double reach = (loads * phases + stores) * seg_pts * (double)sc_dtype_size(q->dtype);
    if (reach < t.bytes - before) t.bytes = before + reach;
  }
  return t.bytes;
}

static bool cluster_dtype(sc_dtype t, sc_cluster_dtype *out) {
  switch (t) {
  case SC_DTYPE_F32: *out = SC_CLUSTER_FP32; return true;
  case SC_DTYPE_BF16: *out = SC_CLUSTER_BF16; return true;
  case SC_DTYPE_F16: *out = SC_CLUSTER_FP16; return true;
  default: return false;
  }
}

static bool float_dtype(sc_dtype t) {
  return t == SC_DTYPE_F32 || t == SC_DTYPE_F64 || t == SC_DTYPE_BF16 || t == SC_DTYPE_F16;
}

static bool transcendental(kir_op op) {
  switch (op) {
  case KIR_EXP: case KIR_LOG: case KIR_TANH: case KIR_ERF: case KIR_SIN: case KIR_COS:
  case KIR_ATAN: case KIR_POW: case KIR_SIGMOID: return true;
  default: return false;
  }
}

/* Whether e is the integer constant c (the same value) */
static bool is_const_i(const kir_kernel *k, int32_t e, int64_t *c) {
  if (e < 0 || e >= k->n_exprs || k->exprs[e].op != KIR_CONST) return false;
  *c = k->exprs[e].i;
  return true;
}

/* x when m is x mod c and q is (x div c) * c (either order of the
 * product), the same x and c: their sum is x (a flattened row-major
 * index split into a row and a column and joined again, which the
 * emitter's compiler folds back); else -1. */
static int32_t split_whole(const kir_kernel *k, int32_t m, int32_t q) {
  if (m < 0 || m >= k->n_exprs || q < 0 || q >= k->n_exprs) return -1;
  const kir_expr *xm = &k->exprs[m], *xq = &k->exprs[q];
  int64_t c = 0, c2 = 0, c3 = 0;
  if (xm->op != KIR_MOD || xq->op != KIR_MUL || !is_const_i(k, xm->b, &c) || c == 0) return -1;
  int32_t div = xq->a, f = xq->b;
  if (!is_const_i(k, f, &c2)) div = xq->b, f = xq->a;
  if (!is_const_i(k, f, &c2) || c2 != c || div < 0 || div >= k->n_exprs) return -1;
  const kir_expr *xd = &k->exprs[div];
  if (xd->op != KIR_DIV || xd->a != xm->a || !is_const_i(k, xd->b, &c3) || c3 != c) return -1;
  return xm->a;
}

/* The coefficient of loop variable v in index expression e when e is
 * linear in it (a sum of v times constants and terms without v), else
 * NAN. depth bounds the walk (a deep expression is taken as non-linear). */
static double stride_in(const kir_kernel *k, int32_t e, int32_t v, int depth) {
  if (e < 0 || e >= k->n_exprs || depth > 32) return NAN;
  const kir_expr *x = &k->exprs[e];
  switch (x->op) {
  case KIR_VAR: return x->var == v ? 1 : 0;
  case KIR_CONST:
  case KIR_REG: return 0;
  case KIR_ADD: {
    int32_t whole = split_whole(k, x->a, x->b);
    if (whole < 0) whole = split_whole(k, x->b, x->a);
    if (whole >= 0) return stride_in(k, whole, v, depth + 1);
    return stride_in(k, x->a, v, depth + 1) + stride_in(k, x->b, v, depth + 1);
  }
  case KIR_SUB: return stride_in(k, x->a, v, depth + 1) - stride_in(k, x->b, v, depth + 1);
  case KIR_CAST: return stride_in(k, x->a, v, depth + 1);
  case KIR_MUL: {
    double sa = stride_in(k, x->a, v, depth + 1), sb = stride_in(k, x->b, v, depth + 1);
    const kir_expr *ea = &k->exprs[x->a], *eb = &k->exprs[x->b];
    if (sa == 0 && sb == 0) return 0;
    if (eb->op == KIR_CONST && sb == 0) return sa * (double)eb->i;
    if (ea->op == KIR_CONST && sa == 0) return sb * (double)ea->i;
    return NAN;
  }
  default: { /* anything else is linear only when v does not reach it */
    int32_t ops[3] = {x->a, x->b, x->c};
    for (int j = 0; j < 3; j++)
      if (ops[j] >= 0 && stride_in(k, ops[j], v, depth + 1) != 0) return NAN;
    return 0;
  }
  }
}

/* Adds e's subtree (each expression once: seen[]; a transcendental one
 * once in the kernel: done[]) to f, each expression weighted by the visits
 * it runs at: per inner element (inner[e]) or per outer point. v: the
 * innermost loop's variable (gathers step along it). */
static void count_expr(const kir_kernel *k, int32_t e, const bool *inner, bool *seen, bool *done,
                       int32_t v, double per_elem, double per_point, double *f) {
  if (e < 0 || e >= k->n_exprs || seen[e]) return;
  seen[e] = true;
  const kir_expr *x = &k->exprs[e];
  count_expr(k, x->a, inner, seen, done, v, per_elem, per_point, f);
  count_expr(k, x->b, inner, seen, done, v, per_elem, per_point, f);
  count_expr(k, x->c, inner, seen, done, v, per_elem, per_point, f);
  double w = inner[e] ? per_elem : per_point;
  if (x->op == KIR_LOAD && float_dtype(x->dtype)) {
    double s = stride_in(k, x->a, v, 0);
    if (!(s == 0 || s == 1)) f[SC_PROFILE_KERNEL_GATHER] += w;
    return;
  }
  if (x->op == KIR_CONST || x->op == KIR_VAR || x->op == KIR_REG || x->op == KIR_LOAD) return;
  bool fl = float_dtype(x->dtype) ||
            (x->a >= 0 && x->a < k->n_exprs && float_dtype(k->exprs[x->a].dtype));
  /* the CPU emitter multiplies out x^1, x^2, x^3 (codegen/cpu/emit.c
   * const_pow) */
  bool mul_pow = x->op == KIR_POW && x->b >= 0 && k->exprs[x->b].op == KIR_CONST &&
                 (k->exprs[x->b].f == 1.0 || k->exprs[x->b].f == 2.0 || k->exprs[x->b].f == 3.0);
  if (fl && transcendental(x->op) && !mul_pow) {
    /* a row kernel keeps a transcendental value two phases use in a row
     * cache: the later phases load it (emit.c, row caches) */
    if (!done[e]) f[SC_PROFILE_KERNEL_TRANSCENDENTAL] += w;
    done[e] = true;
  } else if (fl) {
    f[SC_PROFILE_KERNEL_OP] += w;
  }
}

void sc_dist_kernel_features(const kir_kernel *k, double *f, bool *split) {
  for (int t = 0; t < SC_PROFILE_KERNEL_TERMS; t++) f[t] = 0;
  double pts = 1;
  for (int32_t d = 0; d < k->outer_rank; d++) pts *= (double)k->outer_dims[d];
  double elems = pts * (double)(k->inner > 0 ? k->inner : 1);
  if (k->seg_inner) { /* a multi-tensor reduction: each segment over its own inner */
    elems = 0;
    for (int32_t s = 0; s < k->n_segs; s++) elems += (double)k->seg_inner[s];
  }
  int32_t phases = k->n_phases > 0 ? k->n_phases : 1;
  *split = pts >= 2 && elems * phases >= (double)KIR_SPLIT_MIN_WORK;
  /* the innermost loop: the inner index, else the last outer dim of more
   * than one point */
  int32_t v = KIR_INNER;
  if (k->inner <= 1)
    for (int32_t d = k->outer_rank - 1; d >= 0 && v == KIR_INNER; d--)
      if (k->outer_dims[d] > 1) v = d;
  bool *inner = sc_calloc((size_t)k->n_exprs + 1, sizeof *inner);
  bool *seen = sc_calloc((size_t)k->n_exprs + 1, sizeof *seen);
  bool *done = sc_calloc((size_t)k->n_exprs + 1, sizeof *done);
  if (!inner || !seen || !done) { /* nothing counted: a lower time, never a failure */
    sc_free(inner);
    sc_free(seen);
    sc_free(done);
    return;
  }
  /* operands precede their users (the builders append) */
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const kir_expr *x = &k->exprs[e];
    bool dep = x->op == KIR_VAR && x->var == KIR_INNER;
    int32_t ops[3] = {x->a, x->b, x->c};
    for (int j = 0; j < 3; j++)
      if (ops[j] >= 0 && ops[j] < e) dep |= inner[ops[j]];
    inner[e] = dep;
  }
  /* as the CPU emitter runs them (codegen/cpu/emit.c): with inner 1 the
   * phases are straight-line code in one loop over the points, every
   * expression emitted once; with a row, each phase that varies along it
   * is a loop of its own, re-emitting what it needs */
  bool row = k->inner > 1;
  for (int32_t ph = 0; ph < k->n_phases; ph++) {
    const kir_phase *q = &k->phases[ph];
    bool looped = row && (q->kind == KIR_PHASE_REDUCE || inner[q->value] ||
                          (q->kind == KIR_PHASE_STORE && inner[q->out_index]));
    if (looped) f[SC_PROFILE_KERNEL_ROW] += pts;
    if (row) memset(seen, 0, (size_t)k->n_exprs * sizeof *seen);
    count_expr(k, q->value, inner, seen, done, v, elems, pts, f);
    if (q->kind == KIR_PHASE_STORE)
      count_expr(k, q->out_index, inner, seen, done, v, elems, pts, f);
  }
  sc_free(done);
  sc_free(inner);
  sc_free(seen);
}

/* The cluster dtype of buffer b, the operand a step of kind `what` (GEMM,
 * attention) computes in; SC_ERR_INVALID when the cost model knows no
 * peak for it. */
static sc_status step_dtype(const sc_program *p, int32_t b, const char *what,
                            sc_cluster_dtype *cd, sc_diag *d) {
  sc_dtype dt = b >= 0 && b < p->n_buffers ? p->buffers[b].dtype : SC_DTYPE_COUNT;
  if (cluster_dtype(dt, cd)) return SC_OK;
  return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "%s in %s: the cost model knows peaks for fp32, bf16 and fp16", what,
                     dt < SC_DTYPE_COUNT ? sc_dtype_name(dt) : "?");
}

/* Whether GEMM g runs as an FP8 matmul on c: its operands are FP8 values
 * (sc_gemm.fp8), c's devices are GPUs with an FP8 peak (sm_89 and later:
 * the H100 and H200 presets; the A100's has none and runs the f32 product
 * of the widened values, as the CUDA device does there), and cuBLASLt
 * takes its layout (sc_gemm_fp8_refusal of sc_gemm_fp8_layout: the CUDA
 * device's own test). */
static bool fp8_matmul(const sc_cluster *c, const sc_program *p, const sc_gemm *g) {
  if (!g->fp8 || !sc_cluster_is_gpu(c) || !(c->peak_flops[SC_CLUSTER_FP8] > 0)) return false;
  int32_t bs[3] = {g->c, g->a8, g->b8};
  for (int i = 0; i < 3; i++)
    if (bs[i] < 0 || bs[i] >= p->n_buffers) return false;
  sc_gemm l = sc_gemm_fp8_layout(g);
  return !sc_gemm_fp8_refusal(&l, p->buffers[g->c].dtype, p->buffers[g->a8].dtype,
                              p->buffers[g->b8].dtype);
}

/* Whether SCATTER_ADD step x adds its rows in its data's own storage:
 * memplan gave its output the data's slot (a state pair such as accum:P
 * and new:accum:P, or the data's last read: codegen/memplan.c), and both
 * runtimes then copy nothing. Its time is the rows' then: the updates
 * and the indices read, the rows they add to read and written (at most
 * the data's bytes: updates that outnumber the rows, a bucket's pieces
 * summed into it, add into rows read already). */
static bool scatter_in_place(const sc_program *p, const sc_scatter_step *x) {
  if (x->data < 0 || x->out < 0 || x->data >= p->n_buffers || x->out >= p->n_buffers) return false;
  if (x->data == x->out) return true;
  const sc_buffer *a = &p->buffers[x->data], *b = &p->buffers[x->out];
  bool arena_a = a->kind == SC_BUF_INPUT || a->kind == SC_BUF_OUTPUT || a->kind == SC_BUF_TEMP;
  bool arena_b = b->kind == SC_BUF_INPUT || b->kind == SC_BUF_OUTPUT || b->kind == SC_BUF_TEMP;
  return arena_a && arena_b && a->offset >= 0 && a->offset == b->offset && a->bytes == b->bytes;
}

sc_status sc_dist_step_compute_time(const sc_cluster *c, const sc_program *p, const sc_step *st,
                                    double *seconds, double *flops, sc_diag *d) {
  *seconds = *flops = 0;
  switch (st->kind) {
  case SC_STEP_COMM:
  case SC_STEP_WAIT:
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "a communication step is no computation");
  case SC_STEP_GEMM: {
    const sc_gemm *g = &st->gemm;
    sc_cluster_dtype cd;
    if (step_dtype(p, g->a, "GEMM", &cd, d) != SC_OK) return d->status;
    double f = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
    double bytes = buffer_bytes(p, g->a) + buffer_bytes(p, g->b) + buffer_bytes(p, g->c) +
                   buffer_bytes(p, g->bias);
    if (f <= 0) return SC_OK; /* an empty product */
    bool ta = g->trans_a, tb = g->trans_b;
    if (fp8_matmul(c, p, g)) { /* read from its FP8 operands, at the FP8 rate */
      sc_gemm l = sc_gemm_fp8_layout(g);
      cd = SC_CLUSTER_FP8;
      ta = l.trans_a;
      tb = l.trans_b;
      bytes = buffer_bytes(p, g->a8) + buffer_bytes(p, g->b8) + buffer_bytes(p, g->c) +
              buffer_bytes(p, g->bias);
    }
    if (sc_cost_gemm_shape_time(c, cd, ta, tb, g->batch, g->m, g->n, g->k, bytes, seconds, d) !=
        SC_OK)
      return d->status;
    *flops = f;
    /* the bias gradient's and the epilogue kernel, each a kernel of its
     * own after the product as the runtime launches them, but on a GPU
     * (cuda_device.c) the bias gradient and the activation, which the
     * product computes (cuBLASLt's BGRADB, GELU_AUX); the other epilogues
     * run there too (a bf16 weight gradient's cast to f32 and its
     * accumulation into the microbatches' sum): until 2026-12-07 a GPU
     * without a kernel model costed none, 38 us a microbatch of the
     * gpt_1p5b MLP weight's sum at H100 bandwidth (102 MB) where its
     * product took 9 us */
    bool gpu = sc_cluster_is_gpu(c);
    int32_t ks[2] = {g->bgrad != SC_GEMM_BGRAD_NONE && !gpu ? g->bgrad_kernel : -1,
                     g->act != SC_GEMM_ACT_NONE && gpu ? -1 : st->kernel};
    for (int i = 0; i < 2; i++) {
      if (ks[i] < 0 || ks[i] >= p->n_kernels) continue;
      double fe[SC_PROFILE_KERNEL_TERMS], se = 0;
      bool split;
      sc_dist_kernel_features(p->kernels[ks[i]], fe, &split);
      double kb = kernel_bytes(p, p->kernels[ks[i]]);
      if (sc_cost_kernel_time(c, kb, fe, split, &se, d) != SC_OK) return d->status;
      *seconds += se;
    }
    return SC_OK;
  }
  case SC_STEP_ATTENTION:
  case SC_STEP_ATTENTION_GRAD: { /* FLOPs at the GEMM rate, no score matrix in memory */
    const sc_attention_step *a = &st->attn;
    sc_cluster_dtype cd;
    if (step_dtype(p, a->q, "attention", &cd, d) != SC_OK) return d->status;
    sc_attention_shape s = {.b = a->batch, .h = a->heads, .kvh = a->kv_heads, .sq = a->sq,
                            .skv = a->skv, .d = a->d, .dv = a->dv_dim, .causal = a->causal};
    touched t = {.p = p};
    sc_step_buffers(p, st, touch, &t);
    return sc_cost_attention_time(c, cd, &s, st->kind == SC_STEP_ATTENTION_GRAD, t.bytes,
                                  seconds, flops, d);
  }
  default: { /* KERNEL: the CPU's kernel model, else memory-bound as CHECK, SCATTER_ADD */
    touched t = {.p = p};
    sc_step_buffers(p, st, touch, &t);
    if (st->kind == SC_STEP_KERNEL && st->kernel >= 0 && st->kernel < p->n_kernels) {
      double f[SC_PROFILE_KERNEL_TERMS];
      bool split;
      sc_dist_kernel_features(p->kernels[st->kernel], f, &split);
      return sc_cost_kernel_time(c, kernel_bytes(p, p->kernels[st->kernel]), f, split, seconds,
                                 d);
    }
    if (st->kind == SC_STEP_SCATTER_ADD && scatter_in_place(p, &st->scatter)) {
      double u = buffer_bytes(p, st->scatter.updates), x = buffer_bytes(p, st->scatter.data);
      t.bytes = buffer_bytes(p, st->scatter.indices) + u + 2 * (u < x ? u : x);
    }
    return sc_cost_memory_time(c, t.bytes, seconds, d);
  }
  }
}

bool sc_dist_async_inline(const sc_cluster *c, const sc_program *p, const sc_comm_step *cs) {
  double in = cs->in >= 0 ? buffer_bytes(p, cs->in) : 0;
  double out = cs->out >= 0 ? buffer_bytes(p, cs->out) : 0;
  return cs->async && !sc_cluster_is_gpu(c) && (in > out ? in : out) < SC_ASYNC_INLINE_BYTES;
}

/* B of cost.h for a COMM step: the whole buffer (gathered output,
 * scattered input, what one rank sends). */
static double comm_bytes(const sc_program *p, const sc_comm_step *cs) {
  return cs->kind == SC_COMM_ALL_GATHER || cs->kind == SC_COMM_RECV ? buffer_bytes(p, cs->out)
                                                                     : buffer_bytes(p, cs->in);
}

static sc_status collective_time(const sc_dist_program *dp, const sc_comm_step *cs, double bytes,
                                 const sc_cluster *c, double *seconds, sc_diag *d) {
  static const sc_coll_kind KIND[SC_COMM_KIND_COUNT] = {
      SC_COLL_ALL_REDUCE, SC_COLL_ALL_GATHER, SC_COLL_REDUCE_SCATTER,
      SC_COLL_ALL_TO_ALL, SC_COLL_SEND,       SC_COLL_SEND,           SC_COLL_SEND};
  if ((unsigned)cs->kind >= SC_COMM_KIND_COUNT)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "unknown collective kind %d", cs->kind);
  sc_coll_group g = {cs->group_size < 1 ? 1 : cs->group_size,
                     sc_cost_group_nodes(&dp->mesh, cs->axes)};
  sc_coll_cost cc;
  if (sc_cost_collective(c, KIND[cs->kind], bytes, g, &cc, d) != SC_OK) return d->status;
  /* thread-ranks that compute between meetings: what each meeting adds;
     some of more ranks than cores meeting: their copies and reductions
     time-sliced with the others' compute */
  double slice = sc_cluster_meet_share(c, dp->mesh.n_ranks, g.ranks);
  *seconds = cc.latency_s + cc.transfer_s * slice +
             (g.ranks > 1 ? sc_cluster_sync_call_s(c, dp->mesh.n_ranks) : 0);
  return SC_OK;
}

/* A point-to-point transfer of `bytes` between ranks a and b: one message
 * over the link between them (the network when their nodes differ). */
static sc_status p2p_time(const sc_dist_program *dp, int64_t a, int64_t b, double bytes,
                          const sc_cluster *c, double *seconds, sc_diag *d) {
  bool apart = sc_mesh_node_of(&dp->mesh, a) != sc_mesh_node_of(&dp->mesh, b);
  sc_coll_cost cc;
  if (sc_cost_collective(c, SC_COLL_SEND, bytes, (sc_coll_group){2, apart ? 2 : 1}, &cc, d) !=
      SC_OK)
    return d->status;
  *seconds = cc.seconds + sc_cluster_sync_call_s(c, dp->mesh.n_ranks);
  return SC_OK;
}

/* ---- step tables ---- */

/* What a step's time is attributed to (the breakdown of dist_sim.h). */
enum { T_COMPUTE, T_RECOMPUTE, T_OPTIMIZER, T_COMM, T_WAIT, T_SEND, T_RECV, T_COPY };

typedef struct step_cost {
  double s;        /* its time alone */
  double flops;    /* GEMM FLOPs */
  double bytes;    /* COMM: B */
  int8_t term;     /* T_* */
  int8_t group;    /* COMM, WAIT, SEND, RECV: the group's index; COPY and
                      its WAIT: -1 */
  bool inline_start; /* an async COMM the session runs on the calling
                      thread when its queue is idle (sc_dist_async_inline) */
} step_cost;

typedef struct groups {
  int32_t n;
  sc_axes axes[SC_DIST_SIM_MAX_GROUPS];
} groups;

static int32_t group_of(groups *g, sc_axes axes, sc_diag *d) {
  for (int32_t i = 0; i < g->n; i++)
    if (g->axes[i] == axes) return i;
  if (g->n == SC_DIST_SIM_MAX_GROUPS) {
    sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "more than %d groups of mesh axes",
                SC_DIST_SIM_MAX_GROUPS);
    return -1;
  }
  g->axes[g->n] = axes;
  return g->n++;
}

/* Whether every node named in a step's origin ("a,b,c") is a recompute
 * clone ("<name>/recompute", passes/recompute.c). */
static bool recomputed(const char *origin) {
  static const char SUFFIX[] = "/recompute";
  const size_t k = sizeof SUFFIX - 1;
  if (!origin || !*origin) return false;
  for (const char *s = origin; *s;) {
    const char *e = strchr(s, ',');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n <= k || memcmp(s + n - k, SUFFIX, k) != 0) return false;
    s += n + (e ? 1 : 0);
  }
  return true;
}

/* Stage s's table (tab[k] for every step k). */
/* SHARDC_SIM_STEPS=1 in the environment: each stage's table of step times
 * goes to stderr as it is built (docs/planner.md), to set beside the
 * runtime's SHARDC_PROFILE table of the same program's steps. */
static bool trace_steps(void) {
  const char *e = getenv("SHARDC_SIM_STEPS");
  return e && strcmp(e, "1") == 0;
}

/* A copy of `bytes` between the device and the host pool: over the
 * cluster's host link, or memory-bound where the link is unknown. */
static sc_status copy_time(const sc_cluster *c, double bytes, double *s, sc_diag *d) {
  if (c->host_link_bytes_per_s > 0) {
    *s = bytes / c->host_link_bytes_per_s;
    return SC_OK;
  }
  return sc_cost_memory_time(c, 2 * bytes, s, d); /* read and written */
}

/* Whether step x of a table is a meeting of thread-ranks: a collective
 * among more than one rank (its COMM step, costed by collective_time). */
static bool meeting(const sc_step *x, const step_cost *t) {
  return x->kind == SC_STEP_COMM && t->term == T_COMM && t->bytes > 0 && x->comm.group_size > 1;
}

/* A computation step's time on the compute queue, else 0. */
static double computed(const sc_step *x, const step_cost *t) {
  return x->kind == SC_STEP_COMM || x->kind == SC_STEP_WAIT || x->kind == SC_STEP_COPY ? 0 : t->s;
}

/* What a meeting adds for the compute before it (profile.h sync rows'
 * call_per_compute and call_max_s; docs/planner.md, "Ranks that compute
 * and meet"): the computation steps since the program's previous
 * meeting, in program order, the first meeting's counted from the last
 * one of the run before (the program runs over and over). */
static void add_meeting_drift(const sc_dist_program *dp, const sc_program *p,
                              const sc_cluster *c, step_cost *tab) {
  if (!(sc_cluster_sync_call_drift(c, dp->mesh.n_ranks, 1) > 0)) return;
  double since = 0; /* the run's tail: compute after its last meeting */
  for (int32_t k = 0; k < p->n_steps; k++) {
    const sc_step *x = &p->steps[k];
    since = meeting(x, &tab[k]) ? 0 : since + computed(x, &tab[k]);
  }
  for (int32_t k = 0; k < p->n_steps; k++) {
    const sc_step *x = &p->steps[k];
    if (meeting(x, &tab[k])) {
      tab[k].s += sc_cluster_sync_call_drift(c, dp->mesh.n_ranks, since);
      since = 0;
    } else {
      since += computed(x, &tab[k]);
    }
  }
}

static sc_status stage_table(const sc_dist_program *dp, int32_t s, const sc_cluster *c,
                             groups *g, step_cost *tab, sc_diag *d) {
  const sc_program *p = dp->stages[s].program;
  bool optimizer_piece = false;
  if (dp->pipe_chunks) {
    sc_pipe_phase ph = sc_pipe_piece_phase(dp->pipe_chunks, s);
    optimizer_piece = ph == SC_PIPE_NORM || ph == SC_PIPE_UPDATE;
  }
  bool *opt = sc_calloc((size_t)p->n_steps + 1, sizeof *opt);
  if (!opt) return nomem(d);
  /* thread-ranks outnumbering the host's cores compute time-sliced */
  double share = sc_cluster_core_share(c, dp->mesh.n_ranks);
  /* the optimizer of one training program (not pipelined) */
  sc_status st = dp->pipe_chunks || sc_program_update_steps(p, false, opt) >= 0 ? SC_OK : nomem(d);
  for (int32_t k = 0; st == SC_OK && k < p->n_steps; k++) {
    const sc_step *x = &p->steps[k];
    step_cost *t = &tab[k];
    memset(t, 0, sizeof *t);
    sc_diag inner = {0};
    sc_diag_clear(&inner);
    sc_status r = SC_OK;
    if (x->kind == SC_STEP_WAIT) {
      t->term = T_WAIT;
      t->group = x->started >= 0 && x->started < k ? tab[x->started].group : 0;
    } else if (x->kind == SC_STEP_COPY) { /* on the copy queue, over the host link */
      t->term = T_COPY;
      t->bytes = buffer_bytes(p, x->copy.src);
      t->group = -1;
      r = copy_time(c, t->bytes, &t->s, &inner);
    } else if (x->kind == SC_STEP_COMM) {
      const sc_comm_step *cs = &x->comm;
      int32_t gi = group_of(g, cs->axes, &inner);
      if (gi < 0) r = inner.status;
      t->group = (int8_t)gi;
      t->bytes = comm_bytes(p, cs);
      t->inline_start = sc_dist_async_inline(c, p, cs);
      /* a ring's shifted pair (context parallelism: every rank of the
         group sends a block to the next and receives one from the
         previous at the same step, ir/op_comm.h) is a transfer on the
         group's queue, the SEND's; its RECV is the previous rank's SEND
         of the same step, costed there. Paired as one SEND_RECV step
         (codegen/overlap.c) it is that transfer, async when started so
         (its WAIT exposes what compute did not hide) */
      bool ring = cs->shift != 0 && (cs->kind == SC_COMM_SEND || cs->kind == SC_COMM_RECV ||
                                     cs->kind == SC_COMM_SEND_RECV);
      t->term = ring                       ? T_COMM
                : cs->kind == SC_COMM_SEND ? T_SEND
                : cs->kind == SC_COMM_RECV ? T_RECV
                                           : T_COMM;
      if (ring && cs->kind == SC_COMM_RECV) t->bytes = 0;
      /* a send's time is its transfer's, between this rank and its peer:
         costed when it runs; a receive costs only its wait */
      if (r == SC_OK && t->term == T_COMM && t->bytes > 0)
        r = collective_time(dp, cs, t->bytes, c, &t->s, &inner);
    } else {
      r = sc_dist_step_compute_time(c, p, x, &t->s, &t->flops, &inner);
      t->s *= share;
      t->term = optimizer_piece || opt[k] ? T_OPTIMIZER
                : recomputed(x->origin)   ? T_RECOMPUTE
                                          : T_COMPUTE;
    }
    if (r != SC_OK)
      st = sc_diag_set(d, inner.status, x->origin, NULL, "stage %d, step %d: %s", s, k, inner.msg);
  }
  sc_free(opt);
  if (st == SC_OK) add_meeting_drift(dp, p, c, tab);
  if (st == SC_OK && trace_steps()) /* SHARDC_SIM_STEPS: the table, for SHARDC_PROFILE's */
    for (int32_t k = 0; k < p->n_steps; k++) {
      const sc_step *x = &p->steps[k];
      touched t = {.p = p};
      sc_step_buffers(p, x, touch, &t);
      double f[SC_PROFILE_KERNEL_TERMS] = {0};
      bool split = false;
      bool own = x->kernel >= 0 && x->kernel < p->n_kernels;
      if (x->kind == SC_STEP_KERNEL && own)
        sc_dist_kernel_features(p->kernels[x->kernel], f, &split);
      /* a GEMM step with an epilogue kernel is named by that kernel */
      const char *kind = x->kind != SC_STEP_GEMM ? "step" : own ? p->kernels[x->kernel]->name
                                                                : "gemm";
      fprintf(stderr,
              "SHARDC_SIM_STEPS: stage %d step %d: %.3f us %s [%s] bytes %.0f visits %.0f ops %.0f "
              "transcendental %.0f gathered %.0f%s\n",
              (int)s, (int)k, tab[k].s * 1e6, kind, x->origin ? x->origin : "", t.bytes, f[0],
              f[1], f[2], f[3], split ? " split" : "");
    }
  return st;
}

/* ---- hand-offs ---- */

/* Sent transfers, by (from, to, tag, seq): when each started and arrived.
 * Open addressing; grows at half full. */
typedef struct mail {
  int32_t from, to, tag, seq; /* from -1: empty */
  double start, end;
} mail;

typedef struct mailbox {
  mail *m;
  size_t cap, n;
} mailbox;

static size_t mail_hash(int32_t from, int32_t to, int32_t tag, int32_t seq, size_t cap) {
  uint64_t h = (uint64_t)(uint32_t)from * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t)(uint32_t)to * 0xC2B2AE3D27D4EB4Full + (h >> 29);
  h ^= (uint64_t)(uint32_t)tag * 0x165667B19E3779F9ull + (h >> 31);
  h ^= (uint64_t)(uint32_t)seq * 0x27D4EB2F165667C5ull + (h >> 27);
  return (size_t)(h & (cap - 1));
}

static mail *mail_find(mailbox *b, int32_t from, int32_t to, int32_t tag, int32_t seq) {
  if (!b->cap) return NULL;
  for (size_t i = mail_hash(from, to, tag, seq, b->cap);; i = (i + 1) & (b->cap - 1)) {
    mail *x = &b->m[i];
    if (x->from < 0) return NULL;
    if (x->from == from && x->to == to && x->tag == tag && x->seq == seq) return x;
  }
}

static bool mail_put(mailbox *b, mail x) {
  if (2 * (b->n + 1) > b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    mail *m = sc_malloc(cap * sizeof *m);
    if (!m) return false;
    for (size_t i = 0; i < cap; i++) m[i].from = -1;
    for (size_t i = 0; i < b->cap; i++) {
      if (b->m[i].from < 0) continue;
      size_t j = mail_hash(b->m[i].from, b->m[i].to, b->m[i].tag, b->m[i].seq, cap);
      while (m[j].from >= 0) j = (j + 1) & (cap - 1);
      m[j] = b->m[i];
    }
    sc_free(b->m);
    b->m = m;
    b->cap = cap;
  }
  size_t j = mail_hash(x.from, x.to, x.tag, x.seq, b->cap);
  while (b->m[j].from >= 0) j = (j + 1) & (b->cap - 1);
  b->m[j] = x;
  b->n++;
  return true;
}

/* A pipelined piece's hand-offs: what it receives from other pipeline
 * ranks before it runs, and sends after. */
typedef struct piece_io {
  int32_t n_in, *in;    /* handoff ids read from another rank */
  int32_t n_out, *out;  /* handoff ids it makes */
} piece_io;

/* ---- ranks ---- */

/* One simulated rank: where it is in its actions, its queues' clocks. */
typedef struct rank_state {
  sc_dist_sim_rank *row;
  int32_t q;               /* pipeline coordinate */
  const sc_pipe_action *acts; /* pipelined: its list; else NULL */
  int32_t n_acts;          /* actions (runs) */
  int32_t a;               /* the current action */
  int32_t part;            /* 0 receives, 1 steps, 2 sends, 3 done with it */
  int32_t i;               /* index within the part */
  double t;                /* the compute queue's clock */
  double qfree[SC_DIST_SIM_MAX_GROUPS]; /* each communication queue's */
  double *send_free;       /* [P] the point-to-point queue to each peer's */
  double copy_free;        /* the copy queue's (activation offloading) */
  double *done;            /* [steps of the largest program] when each async
                              COMM or COPY step of the current run ends */
  /* pipelined with offloading (sc_pipe_offload_back): per cell, the action
   * after which it goes to the host pool and the one before which it comes
   * back (-1: not offloaded here); copied[cell] when its last copy ends;
   * copying[cell]: 1 out, 2 back, not yet waited for; started: the action
   * whose copies before it were started */
  int32_t *out, *back;
  double *copied;
  uint8_t *copying;
  int32_t started;
  bool *have;              /* pipelined: [n_h * M] received or made here */
  int32_t *seq;            /* inference: [2 * P * tags] sends and receives so far */
  int32_t stage, mb;       /* the current action's stage and microbatch */
  int64_t last[SC_DIST_SIM_MAX_GROUPS + 3]; /* traced: the index of the last
                              event on each queue (compute, p2p, copy, groups), -1 */
} rank_state;

typedef struct sim_ctx {
  const sc_dist_program *dp;
  const sc_cluster *c;
  sc_diag *d;
  groups g;
  int32_t pp_group;        /* the pipeline's group, or -1 */
  step_cost **tab;         /* [n_stages] */
  int32_t P, M;
  sc_pipe_handoffs ho;     /* pipelined */
  piece_io *io;            /* [n_stages] pipelined */
  int32_t max_tag;         /* inference: tags are below it */
  mailbox box;
  rank_state *r;           /* [P] */
  int32_t *stage_of;       /* [P] inference: its stage */
  sc_dist_sim_trace *trace; /* NULL: record nothing */
  bool trace_nomem;        /* an event could not be stored */
  const double *scale;     /* [P] what each rank's compute times are
                              multiplied by (time-sliced thread-ranks:
                              sc_dist_sim_run_traced), or NULL: 1 */
  int32_t runs;            /* the program's runs per step (gradient
                              accumulation without a pipeline), >= 1 */
  bool **last_only;        /* [n_stages] or NULL: the steps a run before
                              the step's last skips (sc_program_update_steps) */
} sim_ctx;

/* Records [start, end) of kind on r's queue, merged into the queue's last
 * event when it is of the same kind, run, peer and collective and ends
 * where this starts. Empty intervals are not recorded. */
static void record(sim_ctx *x, rank_state *r, int32_t queue, sc_dist_sim_event_kind kind,
                   int32_t peer, int32_t comm, double start, double end, double bytes) {
  sc_dist_sim_trace *tr = x->trace;
  if (!tr || !(end > start)) return;
  int64_t *last = &r->last[queue == SC_DIST_SIM_QUEUE_COMPUTE ? 0
                           : queue == SC_DIST_SIM_QUEUE_P2P   ? 1
                           : queue == SC_DIST_SIM_QUEUE_COPY  ? 2
                                                              : 3 + queue];
  if (*last >= 0) {
    sc_dist_sim_event *e = &tr->events[*last];
    if (e->kind == (int8_t)kind && e->stage == r->stage && e->mb == r->mb && e->peer == peer &&
        e->comm == (int8_t)comm && e->end_s == start) {
      e->end_s = end;
      e->bytes += bytes;
      e->steps++;
      return;
    }
  }
  if (tr->n == tr->cap) {
    int64_t cap = tr->cap ? 2 * tr->cap : 1024;
    sc_dist_sim_event *ev = sc_realloc(tr->events, (size_t)cap * sizeof *ev);
    if (!ev) {
      x->trace_nomem = true;
      return;
    }
    tr->events = ev;
    tr->cap = cap;
  }
  int32_t C = x->dp->pipe_chunks;
  bool piece = C > 0 && r->stage >= 0;
  tr->events[tr->n] = (sc_dist_sim_event){
      .pipe_rank = r->q, .queue = queue, .kind = (int8_t)kind,
      .phase = (int8_t)(piece ? (int)sc_pipe_piece_phase(C, r->stage) : -1),
      .comm = (int8_t)comm, .stage = r->stage,
      .chunk = piece ? sc_pipe_piece_chunk(C, r->stage) : -1, .mb = r->mb, .peer = peer,
      .steps = 1, .start_s = start, .end_s = end, .bytes = bytes};
  *last = tr->n++;
}

static sc_dist_sim_comm *comm_row(sim_ctx *x, sc_dist_sim_rank *row, int32_t gi) {
  sc_axes axes = x->g.axes[gi];
  int32_t j = 0;
  while (j < row->n_comm && row->comm[j].axes != axes) j++;
  if (j == row->n_comm) row->comm[row->n_comm++] = (sc_dist_sim_comm){.axes = axes};
  return &row->comm[j];
}

/* Compute waits until `until` for group gi (exposed communication). */
static void expose(sim_ctx *x, rank_state *r, int32_t gi, double until) {
  if (until <= r->t) return;
  record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_EXPOSED, -1, -1, r->t, until, 0);
  comm_row(x, r->row, gi)->exposed_s += until - r->t;
  r->row->exposed_comm_s += until - r->t;
  r->t = until;
}

/* Compute waits until `until` for a copy of the copy queue. */
static void expose_copy(sim_ctx *x, rank_state *r, double until) {
  if (until <= r->t) return;
  record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_EXPOSED, -1, -1, r->t, until, 0);
  r->row->exposed_copy_s += until - r->t;
  r->t = until;
}

/* A copy of `bytes` between the device and the host pool, started now on
 * the copy queue (after the copies before it: one queue, in order); when
 * it ends. */
static sc_status copy_start(sim_ctx *x, rank_state *r, double bytes, double *end) {
  double s = 0;
  if (copy_time(x->c, bytes, &s, x->d) != SC_OK) return x->d->status;
  double start = r->t > r->copy_free ? r->t : r->copy_free;
  r->copy_free = *end = start + s;
  record(x, r, SC_DIST_SIM_QUEUE_COPY, SC_DIST_SIM_EV_COPY, -1, -1, start, *end, bytes);
  r->row->copy_s += s;
  r->row->copy_bytes += bytes;
  return SC_OK;
}

/* A receive of a transfer m: the bubble until it started, then the
 * pipeline's exposed communication until it arrives. */
static void receive(sim_ctx *x, rank_state *r, const mail *m) {
  if (m->start > r->t) {
    record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_BUBBLE, m->from, -1, r->t, m->start,
           0);
    r->row->bubble_s += m->start - r->t;
    r->t = m->start;
  }
  expose(x, r, x->pp_group, m->end);
}

/* A send of `bytes` to pipeline coordinate `to` on the point-to-point
 * queue; the sender goes on. */
static sc_status send(sim_ctx *x, rank_state *r, int32_t to, int32_t tag, int32_t seq, double bytes) {
  double s = 0;
  if (p2p_time(x->dp, r->row->rank, x->r[to].row->rank, bytes, x->c, &s, x->d) != SC_OK)
    return x->d->status;
  double start = r->t > r->send_free[to] ? r->t : r->send_free[to];
  r->send_free[to] = start + s;
  record(x, r, SC_DIST_SIM_QUEUE_P2P, SC_DIST_SIM_EV_SEND, to, -1, start, start + s, bytes);
  sc_dist_sim_comm *cm = comm_row(x, r->row, x->pp_group);
  cm->ops++;
  cm->bytes += bytes;
  cm->busy_s += s;
  r->row->busy_comm_s += s;
  if (!mail_put(&x->box, (mail){r->q, to, tag, seq, start, start + s})) return nomem(x->d);
  return SC_OK;
}

static int32_t *seq_of(sim_ctx *x, rank_state *r, bool sending, int32_t peer, int32_t tag) {
  return &r->seq[((size_t)(sending ? 1 : 0) * (size_t)x->P + (size_t)peer) * (size_t)x->max_tag +
                 (size_t)tag];
}

/* Runs the steps of stage s from r->i to the end of the run (draining
 * the queues), or until a receive whose transfer is not yet sent
 * (*blocked; r->i stays on it). */
static sc_status run_steps(sim_ctx *x, rank_state *r, int32_t s, bool *blocked) {
  const sc_program *p = x->dp->stages[s].program;
  const step_cost *tab = x->tab[s];
  sc_dist_sim_rank *row = r->row;
  const double k = x->scale ? x->scale[r->q] : 1;
  /* a run of gradient accumulation before the step's last */
  const bool *skip = x->last_only && r->a + 1 < r->n_acts ? x->last_only[s] : NULL;
  for (; r->i < p->n_steps; r->i++) {
    const step_cost *t = &tab[r->i];
    const sc_step *st = &p->steps[r->i];
    if (skip && skip[r->i]) continue;
    switch (t->term) {
    case T_COMPUTE:
      record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_COMPUTE, -1, -1, r->t, r->t + t->s * k,
             0);
      row->compute_s += t->s * k; r->t += t->s * k; row->model_flops += t->flops; break;
    case T_RECOMPUTE:
      record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_RECOMPUTE, -1, -1, r->t,
             r->t + t->s * k, 0);
      row->recompute_s += t->s * k; r->t += t->s * k; break;
    case T_OPTIMIZER:
      record(x, r, SC_DIST_SIM_QUEUE_COMPUTE, SC_DIST_SIM_EV_OPTIMIZER, -1, -1, r->t,
             r->t + t->s * k, 0);
      row->optimizer_s += t->s * k; r->t += t->s * k; row->model_flops += t->flops; break;
    case T_COMM: {
      /* a small start with nothing in flight runs on the compute thread */
      bool inline_run = t->inline_start && !(r->qfree[t->group] > r->t);
      double start = r->t > r->qfree[t->group] ? r->t : r->qfree[t->group];
      double end = start + t->s;
      r->qfree[t->group] = end;
      record(x, r, t->group, SC_DIST_SIM_EV_COLLECTIVE, -1, st->comm.kind, start, end, t->bytes);
      sc_dist_sim_comm *cm = comm_row(x, row, t->group);
      cm->ops++;
      cm->bytes += t->bytes;
      cm->busy_s += t->s;
      row->busy_comm_s += t->s;
      r->done[r->i] = end;
      if (!st->comm.async || inline_run) expose(x, r, t->group, end);
      break;
    }
    case T_COPY:
      if (copy_start(x, r, t->bytes, &r->done[r->i]) != SC_OK) return x->d->status;
      break;
    case T_WAIT:
      if (st->started < 0 || st->started >= r->i) break;
      if (t->group < 0) expose_copy(x, r, r->done[st->started]);
      else expose(x, r, t->group, r->done[st->started]);
      break;
    case T_SEND:
    case T_RECV: {
      int32_t peer = (int32_t)st->comm.peer, tag = st->comm.tag;
      if (!r->seq) /* a pipelined piece hands its values over outside its program */
        return sc_diag_set(x->d, SC_ERR_INVALID, st->origin, NULL,
                           "stage %d, step %d: a SEND or RECV step in a pipelined piece", s,
                           r->i);
      if (peer < 0 || peer >= x->P || tag < 0 || tag >= x->max_tag)
        return sc_diag_set(x->d, SC_ERR_INVALID, st->origin, NULL,
                           "stage %d, step %d: peer %d or tag %d out of range", s, r->i, peer,
                           tag);
      int32_t *n = seq_of(x, r, t->term == T_SEND, peer, tag);
      if (t->term == T_SEND) {
        if (send(x, r, peer, tag, *n, t->bytes) != SC_OK) return x->d->status;
      } else {
        mail *m = mail_find(&x->box, peer, r->q, tag, *n);
        if (!m) {
          *blocked = true;
          return SC_OK;
        }
        receive(x, r, m);
      }
      ++*n;
      break;
    }
    }
    row->flops += t->flops;
  }
  /* the run ends when its queues are drained (its copies were waited for) */
  for (int32_t gi = 0; gi < x->g.n; gi++) expose(x, r, gi, r->qfree[gi]);
  return SC_OK;
}

/* The stage and microbatch of r's action a. */
static int32_t action_stage(const sim_ctx *x, const rank_state *r, int32_t a, int32_t *mb) {
  if (!r->acts) {
    *mb = a % x->M;
    return x->stage_of[r->q];
  }
  *mb = r->acts[a].mb;
  return sc_pipe_piece(x->dp->pipe_chunks, (sc_pipe_phase)r->acts[a].phase, r->acts[a].chunk);
}

static int32_t cell_mb(const sim_ctx *x, int32_t h, int32_t mb) {
  return x->ho.h[h].per_mb ? (mb >= 0 ? mb : x->M - 1) : 0;
}

/* Before r's action a (once): the copies out started after the action
 * before are waited for, then the copies back whose point is a start
 * (runtime/pipe_rank.c's order). */
static sc_status copies_before(sim_ctx *x, rank_state *r, int32_t a) {
  size_t cells = (size_t)x->ho.n * (size_t)x->M;
  r->started = a;
  for (size_t c = 0; c < cells; c++)
    if (r->copying[c] == 1 && r->out[c] < a) {
      expose_copy(x, r, r->copied[c]);
      r->copying[c] = 0;
    }
  for (size_t c = 0; c < cells; c++)
    if (r->back[c] == a) {
      if (copy_start(x, r, (double)x->ho.h[c / (size_t)x->M].bytes, &r->copied[c]) != SC_OK)
        return x->d->status;
      r->copying[c] = 2;
    }
  return SC_OK;
}

/* Before the run of piece s for microbatch mb: the copies back of what it
 * reads are waited for. */
static void copies_back_wait(sim_ctx *x, rank_state *r, int32_t s, int32_t mb) {
  const sc_program *p = x->dp->stages[s].program;
  for (int32_t j = 0; j < p->n_inputs; j++) {
    int32_t h = x->ho.input_handoff[s][j];
    if (h < 0) continue;
    size_t c = (size_t)h * (size_t)x->M + (size_t)cell_mb(x, h, mb);
    if (r->copying[c] != 2) continue;
    expose_copy(x, r, r->copied[c]);
    r->copying[c] = 0;
  }
}

/* After the run of action a: the cells it read or made for the last time
 * before their backward go out to the host pool. */
static sc_status copies_out(sim_ctx *x, rank_state *r, int32_t a) {
  size_t cells = (size_t)x->ho.n * (size_t)x->M;
  for (size_t c = 0; c < cells; c++) {
    if (r->out[c] != a) continue;
    if (copy_start(x, r, (double)x->ho.h[c / (size_t)x->M].bytes, &r->copied[c]) != SC_OK)
      return x->d->status;
    r->copying[c] = 1;
  }
  return SC_OK;
}

/* Advances r as far as it goes; *progress when it moved. */
static sc_status advance(sim_ctx *x, rank_state *r, bool *progress) {
  while (r->a < r->n_acts) {
    int32_t mb, s = action_stage(x, r, r->a, &mb);
    r->stage = s;
    r->mb = mb;
    if (r->out && r->started != r->a && copies_before(x, r, r->a) != SC_OK)
      return x->d->status;
    if (r->part == 0) { /* hand-offs from other ranks, before the run */
      const piece_io *io = r->acts ? &x->io[s] : NULL;
      for (; io && r->i < io->n_in; r->i++) {
        int32_t h = io->in[r->i], k = cell_mb(x, h, mb);
        bool *have = &r->have[(size_t)h * (size_t)x->M + (size_t)k];
        if (*have) continue;
        int32_t from = sc_pipe_piece_chunk(x->dp->pipe_chunks, x->ho.h[h].piece) % x->P;
        mail *m = mail_find(&x->box, from, r->q, h, k);
        if (!m) return SC_OK;
        receive(x, r, m);
        *have = true;
        *progress = true;
      }
      if (r->out) copies_back_wait(x, r, s, mb);
      r->part = 1;
      r->i = 0;
    }
    if (r->part == 1) {
      bool blocked = false;
      int32_t before = r->i;
      if (run_steps(x, r, s, &blocked) != SC_OK) return x->d->status;
      if (r->i != before) *progress = true;
      if (blocked) return SC_OK;
      if (r->out && copies_out(x, r, r->a) != SC_OK) return x->d->status;
      r->part = 2;
      r->i = 0;
    }
    /* hand-offs to other ranks, after the run */
    const piece_io *io = r->acts ? &x->io[s] : NULL;
    for (int32_t j = 0; io && j < io->n_out; j++) {
      int32_t h = io->out[j];
      const sc_pipe_handoff *hx = &x->ho.h[h];
      if (!hx->per_mb && mb > 0) continue; /* a state copy: handed over once */
      int32_t k = hx->per_mb ? (mb >= 0 ? mb : x->M - 1) : 0;
      r->have[(size_t)h * (size_t)x->M + (size_t)k] = true;
      for (int32_t q = 0; q < x->P; q++)
        if (q != r->q && sc_pipe_handoff_reads(&x->ho, h, q, k) &&
            send(x, r, q, h, k, (double)hx->bytes) != SC_OK)
          return x->d->status;
    }
    r->a++;
    r->part = 0;
    r->i = 0;
    *progress = true;
  }
  return SC_OK;
}

/* Tokens a step processes: batch x sequence of the token ids (the first
 * integer input of rank >= 2; dims are one microbatch's). */
static double step_tokens(const sc_dist_program *dp) {
  for (int32_t i = 0; i < dp->n_inputs; i++) {
    const sc_dist_value *v = &dp->inputs[i];
    if (!sc_dtype_is_int(v->dtype) || v->rank < 2 || sc_dist_is_state(dp, v->name)) continue;
    double m = dp->schedule.microbatches < 1 ? 1 : dp->schedule.microbatches;
    return m * (double)v->dims[0] * (double)v->dims[1];
  }
  return 0;
}

/* The pipelined step's hand-off tables and every rank's list. */
static sc_status setup_pipeline(sim_ctx *x) {
  const sc_dist_program *dp = x->dp;
  if (sc_pipe_handoffs_of(dp, &x->ho, x->d) != SC_OK) return x->d->status;
  x->io = sc_calloc((size_t)dp->n_stages, sizeof *x->io);
  if (!x->io) return nomem(x->d);
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    piece_io *io = &x->io[s];
    int32_t me = sc_pipe_piece_chunk(dp->pipe_chunks, s) % x->P;
    io->in = sc_calloc((size_t)p->n_inputs + 1, sizeof *io->in);
    io->out = sc_calloc((size_t)p->n_outputs + 1, sizeof *io->out);
    if (!io->in || !io->out) return nomem(x->d);
    for (int32_t i = 0; i < p->n_inputs; i++) {
      int32_t h = x->ho.input_handoff[s][i];
      if (h >= 0 && sc_pipe_piece_chunk(dp->pipe_chunks, x->ho.h[h].piece) % x->P != me)
        io->in[io->n_in++] = h;
    }
  }
  for (int32_t h = 0; h < x->ho.n; h++) {
    piece_io *io = &x->io[x->ho.h[h].piece];
    io->out[io->n_out++] = h;
  }
  for (int32_t q = 0; q < x->P; q++) {
    rank_state *r = &x->r[q];
    sc_pipe_action *acts;
    if (sc_pipe_schedule(dp->schedule.kind, x->P, dp->pipe_chunks / x->P, x->M, q, &acts,
                         &r->n_acts, x->d) != SC_OK)
      return x->d->status;
    r->acts = acts;
    size_t cells = (size_t)x->ho.n * (size_t)x->M + 1;
    r->have = sc_calloc(cells, sizeof *r->have);
    if (!r->have) return nomem(x->d);
    bool any = false;
    for (int32_t h = 0; h < x->ho.n; h++) any |= sc_pipe_handoff_offloaded(&x->ho, h, q);
    if (!any) continue; /* nothing offloaded here */
    r->out = sc_malloc(cells * sizeof *r->out);
    r->back = sc_malloc(cells * sizeof *r->back);
    r->copied = sc_calloc(cells, sizeof *r->copied);
    r->copying = sc_calloc(cells, sizeof *r->copying);
    if (!r->out || !r->back || !r->copied || !r->copying) return nomem(x->d);
    r->started = -1;
    if (sc_pipe_offload_back(&x->ho, dp, q, acts, r->n_acts, r->out, r->back, x->d) != SC_OK)
      return x->d->status;
  }
  return SC_OK;
}

/* An inference pipeline (or none): each coordinate's stage, run once per
 * microbatch; the tags its SEND and RECV steps use. */
static sc_status setup_runs(sim_ctx *x) {
  const sc_dist_program *dp = x->dp;
  x->stage_of = sc_calloc((size_t)x->P, sizeof *x->stage_of);
  if (!x->stage_of) return nomem(x->d);
  int32_t most = 0;
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    for (int32_t k = 0; p && k < p->n_steps; k++) {
      const sc_comm_step *cs = &p->steps[k].comm;
      if (p->steps[k].kind != SC_STEP_COMM || (cs->kind != SC_COMM_SEND && cs->kind != SC_COMM_RECV))
        continue;
      if (cs->tag < 0 || cs->tag > 32767) /* ir/op_comm.c's bound */
        return sc_diag_set(x->d, SC_ERR_INVALID, p->steps[k].origin, NULL,
                           "stage %d, step %d: tag %d outside [0, 32767]", s, k, cs->tag);
      if (cs->tag > most) most = cs->tag;
    }
  }
  x->max_tag = most + 1;
  for (int32_t q = 0; q < x->P; q++) {
    rank_state *r = &x->r[q];
    x->stage_of[q] = -1;
    for (int32_t s = 0; s < dp->n_stages && x->stage_of[q] < 0; s++)
      if (dp->stages[s].program && sc_dist_rank_runs(dp, r->row->rank, s)) x->stage_of[q] = s;
    r->n_acts = x->stage_of[q] >= 0 ? x->M * x->runs : 0;
    r->seq = sc_calloc(2 * (size_t)x->P * (size_t)x->max_tag, sizeof *r->seq);
    if (!r->seq) return nomem(x->d);
  }
  return SC_OK;
}

/* Whether training program p is told which run is the step's last (an
 * input "train:apply": gradient accumulation without a pipeline). */
static bool applies_last(const sc_program *p) {
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const char *n = p->buffers[p->inputs[i]].name;
    if (n && strcmp(n, "train:apply") == 0) return true;
  }
  return false;
}

static sc_status simulate(sim_ctx *x, sc_dist_sim *out) {
  const sc_dist_program *dp = x->dp;
  int32_t most = 1;
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    if (p && p->n_steps > most) most = p->n_steps;
  }
  for (int32_t q = 0; q < x->P; q++) {
    x->r[q].row = &out->ranks[q];
    x->r[q].q = q;
    for (size_t i = 0; i < sizeof x->r[q].last / sizeof x->r[q].last[0]; i++)
      x->r[q].last[i] = -1;
    if (!(x->r[q].done = sc_calloc((size_t)most, sizeof(double))) ||
        !(x->r[q].send_free = sc_calloc((size_t)x->P, sizeof(double))))
      return nomem(x->d);
  }
  x->tab = sc_calloc((size_t)dp->n_stages, sizeof *x->tab);
  if (!x->tab) return nomem(x->d);
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    if (!p) continue;
    if (!(x->tab[s] = sc_calloc((size_t)p->n_steps + 1, sizeof **x->tab))) return nomem(x->d);
    if (stage_table(dp, s, x->c, &x->g, x->tab[s], x->d) != SC_OK) return x->d->status;
  }
  if (x->runs > 1 && (x->last_only = sc_calloc((size_t)dp->n_stages, sizeof *x->last_only)) == NULL)
    return nomem(x->d);
  for (int32_t s = 0; x->runs > 1 && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    if (!p || !applies_last(p)) continue;
    if (!(x->last_only[s] = sc_calloc((size_t)p->n_steps + 1, sizeof **x->last_only)) ||
        sc_program_update_steps(p, true, x->last_only[s]) < 0)
      return nomem(x->d);
  }
  if (x->P > 1 || dp->pipe_chunks) {
    x->pp_group = group_of(&x->g, dp->pp_axes, x->d);
    if (x->pp_group < 0) return x->d->status;
  }
  if ((dp->pipe_chunks ? setup_pipeline(x) : setup_runs(x)) != SC_OK) return x->d->status;
  for (;;) {
    bool progress = false, all = true;
    for (int32_t q = 0; q < x->P; q++) {
      if (advance(x, &x->r[q], &progress) != SC_OK) return x->d->status;
      all &= x->r[q].a >= x->r[q].n_acts;
    }
    if (all) break;
    if (!progress) {
      char msg[512];
      size_t pos = 0;
      for (int32_t q = 0; q < x->P && pos < sizeof msg; q++) {
        const rank_state *r = &x->r[q];
        if (r->a >= r->n_acts) continue;
        int32_t mb, s = action_stage(x, r, r->a, &mb);
        int w = snprintf(msg + pos, sizeof msg - pos, "%spipeline rank %d at stage %d, "
                         "microbatch %d", pos ? "; " : "", (int)q, (int)s, (int)mb);
        if (w < 0) break;
        pos += (size_t)w;
      }
      return sc_diag_set(x->d, SC_ERR_INVALID, NULL, NULL,
                         "simulation: every rank waits for a hand-off nobody sends (%s)", msg);
    }
  }
  if (x->trace_nomem) return nomem(x->d);
  if (x->trace) {
    x->trace->n_groups = x->g.n;
    memcpy(x->trace->axes, x->g.axes, sizeof x->trace->axes);
  }
  for (int32_t q = 0; q < x->P; q++) {
    sc_dist_sim_rank *row = &out->ranks[q];
    row->finish_s = x->r[q].t;
    if (row->finish_s > out->ranks[out->critical].finish_s) out->critical = q;
  }
  return SC_OK;
}

sc_status sc_dist_sim_run(const sc_dist_program *dp, const sc_cluster *c, sc_dist_sim *out,
                          sc_diag *d) {
  return sc_dist_sim_run_traced(dp, c, out, NULL, d);
}

void sc_dist_sim_trace_free(sc_dist_sim_trace *trace) {
  if (!trace) return;
  sc_free(trace->events);
  memset(trace, 0, sizeof *trace);
}

const char *sc_dist_sim_event_kind_name(sc_dist_sim_event_kind k) {
  static const char *const NAMES[SC_DIST_SIM_EV_KIND_COUNT] = {
      "compute", "recompute", "optimizer", "bubble", "exposed", "collective", "send", "copy"};
  return (unsigned)k < SC_DIST_SIM_EV_KIND_COUNT ? NAMES[k] : "?";
}

/* One simulation of dp, each rank's compute times multiplied by scale[q]
 * (NULL: 1). */
static sc_status sim_once(const sc_dist_program *dp, const sc_cluster *c, sc_dist_sim *out,
                          sc_dist_sim_trace *trace, const double *scale, sc_diag *d) {
  memset(out, 0, sizeof *out);
  if (trace) memset(trace, 0, sizeof *trace);
  const sc_mesh *m = &dp->mesh;
  int32_t P = dp->pipe_chunks ? dp->pipe_ranks
              : dp->pp_axis >= 0 ? (int32_t)m->axes[dp->pp_axis].size
                                 : 1;
  if (P < 1 || P > SC_DIST_SIM_MAX_RANKS)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "simulation: %d pipeline ranks (at most %d)",
                       P, SC_DIST_SIM_MAX_RANKS);
  for (int32_t q = 0; q < P; q++) {
    int64_t coords[SC_MESH_MAX_AXES] = {0};
    if (dp->pp_axis >= 0) coords[dp->pp_axis] = q;
    out->ranks[q].rank = m->n_axes ? sc_mesh_coords_to_rank(m, coords) : 0;
    out->ranks[q].pipe_rank = q;
  }
  out->n_ranks = P;
  sim_ctx x = {.dp = dp, .c = c, .d = d, .pp_group = -1, .P = P, .trace = trace,
           .M = dp->schedule.microbatches < 1 ? 1 : dp->schedule.microbatches, .scale = scale,
           .runs = !dp->pipe_chunks && dp->schedule.runs > 1 ? dp->schedule.runs : 1};
  x.r = sc_calloc((size_t)P, sizeof *x.r);
  sc_status st = x.r ? simulate(&x, out) : nomem(d);
  for (int32_t q = 0; x.r && q < P; q++) {
    sc_free((void *)x.r[q].acts);
    sc_free(x.r[q].done);
    sc_free(x.r[q].send_free);
    sc_free(x.r[q].have);
    sc_free(x.r[q].out);
    sc_free(x.r[q].back);
    sc_free(x.r[q].copied);
    sc_free(x.r[q].copying);
    sc_free(x.r[q].seq);
  }
  for (int32_t s = 0; x.tab && s < dp->n_stages; s++) sc_free(x.tab[s]);
  for (int32_t s = 0; x.last_only && s < dp->n_stages; s++) sc_free(x.last_only[s]);
  sc_free(x.last_only);
  for (int32_t s = 0; x.io && s < dp->n_stages; s++) {
    sc_free(x.io[s].in);
    sc_free(x.io[s].out);
  }
  sc_free(x.tab);
  sc_free(x.io);
  sc_free(x.r);
  sc_free(x.stage_of);
  sc_free(x.box.m);
  if (dp->pipe_chunks) sc_pipe_handoffs_free(&x.ho);
  if (st != SC_OK) return st;

  /* a step of K runs of the program (gradient accumulation): K actions
   * of each rank (setup_runs), all but the last without the update */
  double runs = x.runs;
  out->step_time_s = out->ranks[out->critical].finish_s;
  out->gpus = m->n_ranks > 0 ? m->n_ranks : 1;
  out->tokens = step_tokens(dp) * runs;
  double flops = 0, model = 0;
  for (int32_t q = 0; q < P; q++) {
    flops += out->ranks[q].flops;
    model += out->ranks[q].model_flops;
  }
  /* every coordinate stands for gpus / P ranks that run what it runs */
  out->model_flops = model * (double)out->gpus / P;
  if (out->step_time_s > 0) {
    out->flops_per_s_per_gpu = flops / P / out->step_time_s;
    out->tokens_per_s = out->tokens / out->step_time_s;
  }
  return SC_OK;
}

/* Thread-ranks that outnumber the host's cores share them: stage_table
 * stretches every compute step by the share of all R ranks computing at
 * once (sc_cluster_core_share). They do not all compute at once: a rank
 * waiting for a collective, a hand-off or a pipeline neighbour sleeps on
 * the communicator, and the others have the cores. So the share is found
 * as a fixed point: simulated with the stretch of R, each pipeline
 * coordinate q's busy fraction u_q over the step is its compute,
 * recompute and optimizer time plus the communication that ran beside
 * them (its queues' busy time less what its compute waited for: an
 * asynchronous collective keeps the rank's communication thread busy
 * while its compute thread computes); the m = R / P ranks of each
 * coordinate run its program, each busy u_q of the time, independently
 * (a synchronous collective ends at once for all of them, but they wake
 * one by one and take the cores in turn), so while one of q's ranks
 * computes, n_q = 1 + (m - 1) u_q + m * (the sum of the other
 * coordinates' u) compute, and q's compute is simulated again at the
 * stretch of n_q (sc_cluster_core_share_busy), halfway from the last,
 * until no stretch moves by 0.5 % (at most SHARE_ROUNDS simulations
 * before the last). */
enum { SHARE_ROUNDS = 8 };

/* Rank q's busy fraction of the step (above), in [0, 1]. */
static double busy_fraction(const sc_dist_sim *s, int32_t q) {
  const sc_dist_sim_rank *w = &s->ranks[q];
  double beside = w->busy_comm_s - w->exposed_comm_s;
  double u = (w->compute_s + w->recompute_s + w->optimizer_s + (beside > 0 ? beside : 0)) /
             s->step_time_s;
  return u < 1 ? u : 1;
}

sc_status sc_dist_sim_run_traced(const sc_dist_program *dp, const sc_cluster *c,
                                 sc_dist_sim *out, sc_dist_sim_trace *trace, sc_diag *d) {
  int64_t R = dp->mesh.n_ranks > 0 ? dp->mesh.n_ranks : 1;
  double share = sc_cluster_core_share(c, R);
  int32_t P = dp->pipe_chunks ? dp->pipe_ranks
              : dp->pp_axis >= 0 ? (int32_t)dp->mesh.axes[dp->pp_axis].size
                                 : 1;
  if (!(share > 1) || R < 2 || P < 1 || P > SC_DIST_SIM_MAX_RANKS)
    return sim_once(dp, c, out, trace, NULL, d);
  double *scale = sc_calloc((size_t)P, sizeof *scale);
  if (!scale) return nomem(d);
  for (int32_t q = 0; q < P; q++) scale[q] = 1;
  double m = (double)R / P;
  sc_status st = SC_OK;
  for (int round = 0; round < SHARE_ROUNDS; round++) {
    if ((st = sim_once(dp, c, out, NULL, scale, d)) != SC_OK) break;
    if (!(out->step_time_s > 0) || out->n_ranks != P) break;
    double total = 0, u[SC_DIST_SIM_MAX_RANKS];
    for (int32_t q = 0; q < P; q++) total += u[q] = busy_fraction(out, q);
    double moved = 0;
    for (int32_t q = 0; q < P; q++) {
      double busy = 1 + (m - 1) * u[q] + m * (total - u[q]);
      double want = sc_cluster_core_share_busy(c, busy) / share;
      double next = 0.5 * (scale[q] + want);
      double dm = fabs(next - scale[q]) / scale[q];
      if (dm > moved) moved = dm;
      scale[q] = next;
    }
    if (moved < 0.005) break;
  }
  if (st == SC_OK) st = sim_once(dp, c, out, trace, scale, d);
  sc_free(scale);
  return st;
}

double sc_dist_sim_mfu(const sc_dist_sim *s, const sc_cluster *c, sc_cluster_dtype t) {
  double peak = (unsigned)t < SC_CLUSTER_DTYPE_COUNT ? c->peak_flops[t] : 0;
  if (peak <= 0 || s->step_time_s <= 0 || s->gpus < 1) return 0;
  return s->model_flops / (s->step_time_s * (double)s->gpus * peak);
}

bool sc_dist_sim_precision_dtype(const char *precision, sc_cluster_dtype *out) {
  if (!precision || strcmp(precision, "f32") == 0 || strcmp(precision, "fp32") == 0)
    *out = SC_CLUSTER_FP32;
  else if (strncmp(precision, "bf16", 4) == 0) *out = SC_CLUSTER_BF16;
  else if (strncmp(precision, "f16", 3) == 0 || strncmp(precision, "fp16", 4) == 0)
    *out = SC_CLUSTER_FP16;
  else if (strcmp(precision, "fp8") == 0) *out = SC_CLUSTER_FP8;
  else return false;
  return true;
}

void sc_dist_sim_to_plan(const sc_dist_program *dp, sc_plan *pl, int64_t peak_bytes_per_rank) {
  sc_plan_predicted *pr = &pl->predicted;
  memset(pr, 0, sizeof *pr);
  if (!pl->cluster || pl->cluster_figures.nodes < 1) return;
  pr->on = true;
  snprintf(pr->source, sizeof pr->source, "simulated");
  pr->peak_bytes_per_rank = peak_bytes_per_rank;
  pr->fits = peak_bytes_per_rank > 0 && pl->cluster_figures.device_memory_bytes > 0 &&
             peak_bytes_per_rank <= pl->cluster_figures.device_memory_bytes;
  sc_dist_sim sim;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_dist_sim_run(dp, &pl->cluster_figures, &sim, &d) != SC_OK) {
    sc_diag_format(&d, pr->unknown, sizeof pr->unknown);
    if (!pr->unknown[0]) snprintf(pr->unknown, sizeof pr->unknown, "cost model failed");
    return;
  }
  const sc_dist_sim_rank *r = &sim.ranks[sim.critical];
  pr->pipe_rank = r->pipe_rank;
  pr->rank = r->rank;
  pr->step_time_s = sim.step_time_s;
  pr->compute_s = r->compute_s;
  pr->bubble_s = r->bubble_s;
  pr->recompute_s = r->recompute_s;
  pr->optimizer_s = r->optimizer_s;
  for (int32_t i = 0; i < r->n_comm && i < SC_PLAN_PREDICTED_MAX_GROUPS; i++) {
    size_t pos = 0;
    char *buf = pr->comm[i].axes;
    buf[0] = 0;
    for (int32_t a = 0; a < dp->mesh.n_axes; a++) {
      if (!(r->comm[i].axes & (1u << a))) continue;
      int w = snprintf(buf + pos, sizeof pr->comm[i].axes - pos, "%s%s", pos ? "," : "",
                       dp->mesh.axes[a].name);
      if (w < 0 || (size_t)w >= sizeof pr->comm[i].axes - pos) break;
      pos += (size_t)w;
    }
    pr->comm[i].seconds = r->comm[i].exposed_s;
    pr->comm[i].calls = r->comm[i].ops;
    pr->comm[i].bytes = r->comm[i].bytes;
    pr->n_comm = i + 1;
  }
  if (r->copy_s > 0 && pr->n_comm < SC_PLAN_PREDICTED_MAX_GROUPS) {
    /* activation offloading's copies: what compute waited for them */
    snprintf(pr->comm[pr->n_comm].axes, sizeof pr->comm[0].axes, "host");
    pr->comm[pr->n_comm++].seconds = r->exposed_copy_s;
  }
  pr->tokens_per_s = sim.tokens_per_s;
  pr->flops_per_s_per_gpu = sim.flops_per_s_per_gpu;
  sc_cluster_dtype t;
  if (sc_dist_sim_precision_dtype(pl->precision, &t))
    pr->mfu = sc_dist_sim_mfu(&sim, &pl->cluster_figures, t);
}
