/* lower_linalg.c — lowerings of the linear-algebra ops: MatMul, Gemm, Conv
 * (STEP: library GEMM steps and helper kernels) and MaxPool, AveragePool,
 * GlobalAveragePool, GlobalMaxPool (KERNEL).
 *
 * MatMul and Gemm on f32 or bf16 with at least GEMM_MIN_MACS multiply-adds
 * become one sc_gemm step (batched, stride 0 for an operand broadcast over
 * the batch; an operand broadcast in a way one stride cannot express is
 * first copied into a scratch buffer by a broadcast kernel). In bf16 every
 * operand is bf16 (the buffers' dtype says so) and the sums are f32, as in
 * the kernel below. Other dtypes and small
 * products become one kir kernel: outer = output elements, a REDUCE SUM over
 * K in the accumulator dtype (f32 for f16/bf16, i64/u64 for integers, which
 * then wrap like the fold does), then a STORE.
 *
 * Conv on f32 with at least CONV_GEMM_MIN_MACS multiply-adds and at least
 * two output channels per group is im2col + GEMM. With G groups, C/G = cpg
 * input and M/G = mpg output channels per group, K = cpg x kernel taps and
 * P = output pixels, an im2col kernel writes the scratch cols[N, G, K, P]
 * (out-of-range taps 0), and ONE strided batched GEMM over b = n*G + g
 * computes W_g[mpg, K] x cols[n, g] straight into the NCHW output (its
 * [n, g*mpg.., P] block starts at b * mpg * P). W_g starts at g * mpg * K,
 * which no single stride gives for N > 1 and G > 1: then W is first
 * copied N times into a scratch [N, M, K] (weights are small). A 1x1,
 * stride-1, unpadded conv needs no im2col: cols is the input itself
 * (stride cpg * P). A padded conv first copies its input into a scratch
 * xpad with the padding written out as zeros (a pass over the input, K
 * times smaller than cols), so the im2col kernel reads in-range indices
 * only: no clamp and no select, each cols row a strided copy the vectoriser
 * turns into vector loads (it halved ResNet-18's im2col time). The bias is
 * per output channel, i.e. per ROW of the GEMM, which sc_gemm's bias (per
 * column) cannot express: a kernel first fills the output with bias[m] and
 * the GEMM accumulates onto it (beta 1).
 * So the GEMM is the group's last step and a fused POINT consumer (Relu,
 * residual Add) becomes its epilogue kernel (from_graph.c). Other convs
 * (other dtypes, tiny ones, depthwise) are a direct kir kernel (outer =
 * output elements, REDUCE SUM over C/group x kernel window, out-of-range
 * taps contribute 0, bias added on store).
 *
 * The kir kernels of these STEP lowerings are begun with
 * sc_lower_begin_kernel and read and store through sc_lower_input_at /
 * sc_lower_store like KERNEL lowerings (so a fused epilogue applies); the
 * broadcast copies before a GEMM are sc_lower_pointwise_kernel helpers.
 *
 * Window ops (Conv, pools) take their effective pads from the attributes
 * and, for auto_pad SAME_*, from the output shape infer computed: total =
 * max(0, (out-1)*stride + (k-1)*dilation + 1 - in), the odd pixel at the end
 * (SAME_UPPER) or the beginning (SAME_LOWER). AveragePool divides by the
 * number of taps inside the input (count_include_pad=0) or inside the padded
 * input (count_include_pad=1, as onnxruntime clips the window to it); the
 * count is a second REDUCE phase. MaxPool's Indices output is an ARGMAX
 * phase beside the MAX one (the first tap holding the maximum, in the
 * window's row-major order, as onnx's reference scans it), turned into the
 * flat position in X: (n·C + c)·H·W + h·W + w, or h + w·H for
 * storage_order 1 (generally: the spatial position row- or column-major). */
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/op_util.h"

/* Products below this many multiply-adds are a kir kernel, not a GEMM. */
#define GEMM_MIN_MACS 4096
/* Convolutions below this many multiply-adds stay a direct kir kernel. */
#define CONV_GEMM_MIN_MACS 4096

/* ---- expression helpers ---- */

static int32_t C(sc_lower_ctx *cx, int64_t v) { return sc_lower_i64(cx, v); }
static int32_t bin(sc_lower_ctx *cx, kir_op op, int32_t a, int32_t b) {
  return kir_binary(cx->arena, cx->k, op, a, b);
}
static int32_t sel(sc_lower_ctx *cx, int32_t c, int32_t a, int32_t b) {
  return kir_select(cx->arena, cx->k, c, a, b);
}
static int32_t cast_to(sc_lower_ctx *cx, sc_dtype t, int32_t e) {
  if (e < 0 || cx->k->exprs[e].dtype == t) return e;
  return kir_cast(cx->arena, cx->k, t, e);
}
static int32_t fconst(sc_lower_ctx *cx, sc_dtype t, double v) {
  if (sc_dtype_is_float(t)) return kir_const_f(cx->arena, cx->k, t, v);
  return kir_const_i(cx->arena, cx->k, t, (int64_t)v);
}
static int32_t clamp(sc_lower_ctx *cx, int32_t e, int64_t lo, int64_t hi) {
  if (hi < lo) hi = lo;
  return bin(cx, KIR_MAX, bin(cx, KIR_MIN, e, C(cx, hi)), C(cx, lo));
}
static int32_t in_range(sc_lower_ctx *cx, int32_t e, int64_t lo, int64_t hi) {
  return bin(cx, KIR_AND, bin(cx, KIR_GE, e, C(cx, lo)), bin(cx, KIR_LT, e, C(cx, hi)));
}
static int32_t and2(sc_lower_ctx *cx, int32_t acc, int32_t c) {
  return acc < 0 ? c : bin(cx, KIR_AND, acc, c);
}
/* Accumulator dtype of a sum of products in t. */
static sc_dtype acc_dtype(sc_dtype t) {
  if (t == SC_DTYPE_F16 || t == SC_DTYPE_BF16) return SC_DTYPE_F32;
  if (sc_dtype_is_float(t)) return t;
  if (t == SC_DTYPE_U64 || t == SC_DTYPE_U32 || t == SC_DTYPE_U16 || t == SC_DTYPE_U8)
    return SC_DTYPE_U64;
  return SC_DTYPE_I64;
}

/* Whether products in t are GEMM steps: f32, and bf16 (its operands and
 * result in bf16, summed in f32 as the kernel would: the devices' GEMMs
 * convert, or cuBLASLt computes in f32). */
static bool gemm_dtype(sc_dtype t) { return t == SC_DTYPE_F32 || t == SC_DTYPE_BF16; }

static sc_status failed(sc_lower_ctx *cx) {
  return cx->diag->status != SC_OK ? cx->diag->status : SC_ERR_INVALID;
}

/* ---- MatMul ---- */

typedef struct mm {
  int64_t m, k, n;
  int32_t rbatch;            /* batch rank of the output */
  int64_t batch[SC_MAX_RANK];
  int64_t nbatch;
  int32_t ra, rb;            /* batch ranks of A and B */
} mm;

static void mm_dims(const sc_value *a, const sc_value *b, const sc_value *y, mm *s) {
  s->m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
  s->k = a->dims[a->rank - 1];
  s->n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
  s->ra = a->rank > 2 ? a->rank - 2 : 0;
  s->rb = b->rank > 2 ? b->rank - 2 : 0;
  s->rbatch = y->rank - (a->rank > 1) - (b->rank > 1);
  s->nbatch = 1;
  for (int32_t i = 0; i < s->rbatch; i++) {
    s->batch[i] = y->dims[i];
    s->nbatch *= y->dims[i];
  }
}

/* Index into operand (rank r, dims d; batch rank rbo) from output batch index
 * bidx and the two matrix indices (either may be absent for a 1-D operand). */
/* sum over the inner loop of A[ai] * B[bi] in dtype acc (inputs 0 and 1 of
 * n), as a REDUCE phase; the constant 0 when k == 0. -1 on failure. */
static int32_t reduce_dot(sc_lower_ctx *cx, const sc_node *n, sc_dtype acc, int64_t k,
                          const int32_t *ai, const int32_t *bi) {
  if (k <= 0) return fconst(cx, acc, 0);
  int32_t va = cast_to(cx, acc, sc_lower_input_at(cx, n, 0, ai));
  int32_t vb = cast_to(cx, acc, sc_lower_input_at(cx, n, 1, bi));
  if (va < 0 || vb < 0) return -1;
  int32_t ph = kir_add_reduce(cx->arena, cx->k, KIR_RED_SUM, acc, bin(cx, KIR_MUL, va, vb));
  return ph < 0 ? -1 : kir_reg(cx->arena, cx->k, ph);
}

static void mm_operand_index(sc_lower_ctx *cx, int32_t rbatch, const int32_t *bidx,
                             int32_t r, const int64_t *d, int32_t row, int32_t col,
                             int32_t *out) {
  if (r == 1) {
    out[0] = row >= 0 ? row : col;
    return;
  }
  sc_lower_bcast_index(cx, rbatch, bidx, r - 2, d, out);
  out[r - 2] = row;
  out[r - 1] = col;
}

static sc_status matmul_kernel(sc_lower_ctx *cx, const sc_node *n, const mm *s) {
  const sc_value *a = sc_node_input(cx->g, n, 0), *b = sc_node_input(cx->g, n, 1);
  const sc_value *y = sc_node_output(cx->g, n, 0);
  sc_status st = sc_lower_begin_kernel(cx, n, y->rank, y->dims, s->k > 0 ? s->k : 1);
  if (st != SC_OK) return st;
  int32_t idx[SC_MAX_RANK], ai[SC_MAX_RANK], bi[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  int32_t r = kir_var(cx->arena, cx->k, KIR_INNER);
  int32_t row = a->rank > 1 ? idx[s->rbatch] : -1;
  int32_t col = b->rank > 1 ? idx[y->rank - 1] : -1;
  mm_operand_index(cx, s->rbatch, idx, a->rank, a->dims, row, r, ai);
  if (a->rank == 1) ai[0] = r;
  mm_operand_index(cx, s->rbatch, idx, b->rank, b->dims, r, col, bi);
  if (b->rank == 1) bi[0] = r;
  sc_dtype acc = acc_dtype(y->dtype);
  int32_t v = reduce_dot(cx, n, acc, s->k, ai, bi);
  if (v < 0) return failed(cx);
  return sc_lower_store(cx, n, 0, idx, cast_to(cx, y->dtype, v));
}

/* Broadcast copy of MatMul operand `in` to [batch..., rows, cols]. */
typedef struct mm_copy {
  const sc_node *n;
  int32_t in;
  const mm *s;
} mm_copy;

static int32_t mm_copy_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const mm_copy *c = ud;
  const sc_value *v = sc_node_input(cx->g, c->n, c->in);
  int32_t r = c->s->rbatch + 2, vi[SC_MAX_RANK];
  mm_operand_index(cx, c->s->rbatch, idx, v->rank, v->dims, idx[r - 2], idx[r - 1], vi);
  return sc_lower_input_at(cx, c->n, c->in, vi);
}

/* Copies operand v (an A or B of MatMul, rank >= 2) broadcast to
 * [batch..., rows, cols] into a scratch buffer; returns its id. */
static int32_t matmul_materialise(sc_lower_ctx *cx, const sc_node *n, int32_t in,
                                  const mm *s) {
  const sc_value *v = sc_node_input(cx->g, n, in);
  int64_t d[SC_MAX_RANK];
  int32_t r = s->rbatch + 2;
  for (int32_t i = 0; i < s->rbatch; i++) d[i] = s->batch[i];
  d[r - 2] = v->dims[v->rank - 2];
  d[r - 1] = v->dims[v->rank - 1];
  int32_t dst = sc_lower_scratch(cx, in == 0 ? "matmul_a" : "matmul_b", v->dtype, r, d);
  if (dst < 0) return -1;
  mm_copy c = {n, in, s};
  if (sc_lower_pointwise_kernel(cx, in == 0 ? "bcast_a" : "bcast_b", dst, mm_copy_at, &c) !=
      SC_OK)
    return -1;
  return dst;
}

/* Batch stride of an operand of batch rank r (dims d) against the output
 * batch: 0 when it has one matrix, `mat` when its batch dims are exactly the
 * output's, -1 when neither. */
static int64_t batch_stride(const mm *s, int32_t r, const int64_t *d, int64_t mat) {
  int64_t cnt = 1;
  for (int32_t i = 0; i < r; i++) cnt *= d[i];
  if (cnt == 1) return 0;
  /* equal when right-aligned dims match and leading output dims are 1 */
  for (int32_t i = 0; i < s->rbatch; i++) {
    int32_t j = i - (s->rbatch - r);
    int64_t dv = j >= 0 ? d[j] : 1;
    if (dv != s->batch[i]) return -1;
  }
  return mat;
}

int32_t sc_lower_gemm_operand_transpose(sc_graph *g, const sc_node *mn, int32_t in) {
  if (mn->op != SC_OP_MATMUL || in < 0 || in > 1 || in >= mn->n_inputs) return -1;
  int32_t v = mn->inputs[in];
  int32_t pn = v >= 0 ? g->values[v].producer : -1;
  if (pn < 0) return -1;
  const sc_node *t = &g->nodes[pn];
  if (t->op != SC_OP_TRANSPOSE || (t->flags & SC_NODE_DEAD) || t->n_inputs < 1) return -1;
  const sc_value *x = sc_node_input(g, t, 0);
  int32_t r = x ? x->rank : 0;
  if (r < 2) return -1;
  const int64_t *perm;
  int64_t np = sc_attr_ints(g, t, "perm", &perm);
  if (np < 0) return r == 2 ? pn : -1; /* default perm reverses: a swap at rank 2 */
  if (np != r) return -1;
  for (int32_t i = 0; i < r - 2; i++)
    if (perm[i] != i) return -1;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2 ? pn : -1;
}

/* The buffer holding MatMul operand `in` transposed, when fusion put the
 * Transpose producing it into this group (sc_lower_gemm_operand_transpose);
 * else -1. */
static int32_t transposed_source(sc_lower_ctx *cx, const sc_node *n, int32_t in) {
  int32_t t = sc_lower_gemm_operand_transpose(cx->g, n, in);
  if (t < 0 || !cx->node_group || cx->node_group[t] != cx->group) return -1;
  return sc_lower_buffer_of(cx, cx->g->nodes[t].inputs[0]);
}

/* The buffer holding the FP8 value that f32 operand v widens (v =
 * Cast(u, f32), through Reshapes, u of a narrow float type and already
 * stored: sc_gemm.fp8), else -1. */
static int32_t fp8_source(sc_lower_ctx *cx, int32_t v) {
  const sc_graph *g = cx->g;
  if (v < 0 || g->values[v].dtype != SC_DTYPE_F32) return -1;
  int32_t p = g->values[v].producer;
  while (p >= 0 && g->nodes[p].op == SC_OP_RESHAPE && g->nodes[p].inputs[0] >= 0)
    p = g->values[g->nodes[p].inputs[0]].producer; /* a Reshape keeps the element order */
  if (p < 0 || g->nodes[p].op != SC_OP_CAST || g->nodes[p].n_inputs != 1) return -1;
  int32_t u = g->nodes[p].inputs[0];
  if (u < 0 || !sc_dtype_is_narrow(g->values[u].dtype) || !sc_dtype_is_float(g->values[u].dtype))
    return -1;
  return cx->value_buffer[u];
}

/* An FP8 transpose: element (r, kk) of a [rows, k] copy is element
 * kk·ld + r of buffer src: the operand with k as its rows (A stored [k, m]
 * for trans_a, B stored [k, n] without trans_b) made k-contiguous. */
typedef struct fp8_copy {
  int32_t src;
  int64_t ld;
} fp8_copy;

static int32_t fp8_copy_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const fp8_copy *c = ud;
  const sc_buffer *b = &cx->p->buffers[c->src];
  int32_t off = sc_lower_bin(cx, KIR_ADD, sc_lower_bin(cx, KIR_MUL, idx[1], sc_lower_i64(cx, c->ld)),
                             idx[0]);
  if (off < 0) return -1;
  int32_t bi[SC_MAX_RANK];
  sc_lower_unflatten(cx, off, b->rank, b->dims, bi);
  return sc_lower_buffer_at(cx, c->src, bi);
}

/* The STORE phase of kernel k that writes buffer b, when it is the only
 * one; else -1. */
static int32_t only_store_to(const kir_kernel *k, int32_t b) {
  int32_t h = -1;
  for (int32_t j = 0; j < k->n_phases; j++) {
    const kir_phase *ph = &k->phases[j];
    if (ph->kind != KIR_PHASE_STORE || k->params[ph->out_param].buffer != b) continue;
    if (h >= 0) return -1;
    h = j;
  }
  return h;
}

/* Stores the [rows, k] copy dst of src (fp8_copy, ld = rows) in the kernel
 * that computes src (the quantization), as a second store of the same
 * value at the transposed index, instead of a kernel of its own: when that
 * kernel is elementwise over src's elements in order (its one store to src
 * at the point index) and the copy is not held longer than src's readers
 * need it (every GEMM step since reads src as its FP8 operand, and every
 * other step since is a kernel that does not write src: the weight's copy
 * for X·W, dY's for Xᵀ·dY after dY·Wᵀ; not X's, made in the forward).
 * 1 when it did, 0 when it cannot, -1 out of memory. */
static int copy_in_writer(sc_lower_ctx *cx, int32_t src, int64_t rows, int64_t k, int32_t dst) {
  sc_program *p = cx->p;
  const sc_buffer *sb = &p->buffers[src];
  for (int32_t i = p->n_steps - 1; i >= 0; i--) {
    const sc_step *s = &p->steps[i];
    if (s->kind == SC_STEP_GEMM) {
      if (!s->gemm.fp8 || (s->gemm.a8 != src && s->gemm.b8 != src) ||
          (s->kernel >= 0 && only_store_to(p->kernels[s->kernel], src) >= 0))
        return 0;
      continue;
    }
    if (s->kind != SC_STEP_KERNEL || s->kernel < 0 || s->kernel >= p->n_kernels) return 0;
    kir_kernel *kk = p->kernels[s->kernel];
    bool writes = false;
    for (int32_t j = 0; j < kk->n_params; j++)
      writes |= kk->params[j].buffer == src && kk->params[j].written;
    if (!writes) continue;
    int32_t h = only_store_to(kk, src);
    int64_t pts = 1;
    for (int32_t d = 0; d < kk->outer_rank; d++) pts *= kk->outer_dims[d];
    if (h < 0 || kk->inner != 1 || kk->n_segs > 0 || pts != rows * k ||
        sc_dtype_size(sb->dtype) * pts != sb->bytes || !kir_is_point_index(kk, kk->phases[h].out_index))
      return 0;
    for (int32_t j = 0; j < p->n_steps; j++) /* the kernel is this step's only */
      if (j != i && p->steps[j].kernel == s->kernel) return 0;
    /* element L of src (L = kq·rows + r) is element r·k + kq of the copy */
    sc_arena *ar = cx->arena;
    int32_t at = kk->phases[h].out_index, value = kk->phases[h].value;
    int32_t pi = kir_add_param(ar, kk, dst, sb->dtype, rows * k, true);
    int32_t nr = kir_const_i(ar, kk, SC_DTYPE_I64, rows), nk = kir_const_i(ar, kk, SC_DTYPE_I64, k);
    int32_t r = nr < 0 ? -1 : kir_binary(ar, kk, KIR_MOD, at, nr);
    int32_t kq = nr < 0 ? -1 : kir_binary(ar, kk, KIR_DIV, at, nr);
    int32_t rk = r < 0 || nk < 0 ? -1 : kir_binary(ar, kk, KIR_MUL, r, nk);
    int32_t t = rk < 0 || kq < 0 ? -1 : kir_binary(ar, kk, KIR_ADD, rk, kq);
    return pi >= 0 && t >= 0 && kir_add_store(ar, kk, pi, t, value) >= 0 ? 1 : -1;
  }
  return 0;
}

/* The [rows, k] FP8 copy of buffer src (fp8_copy) in a scratch buffer,
 * written by the kernel that computes src (copy_in_writer) or by a
 * transpose kernel of the program; its id, or -1. */
static int32_t fp8_transpose(sc_lower_ctx *cx, const char *name, int32_t src, int64_t ld,
                             int64_t rows, int64_t k) {
  int64_t d[2] = {rows, k};
  int32_t dst = sc_lower_scratch(cx, name, cx->p->buffers[src].dtype, 2, d);
  if (dst < 0) return -1;
  int done = ld == rows ? copy_in_writer(cx, src, rows, k, dst) : 0;
  if (done) return done > 0 ? dst : -1;
  fp8_copy c = {src, ld};
  return sc_lower_pointwise_kernel(cx, name, dst, fp8_copy_at, &c) == SC_OK ? dst : -1;
}

/* Marks gm's FP8 operands (sc_gemm.fp8) when both operands are read in
 * place (ra, rb: the values) and widen stored FP8 values. Where the FP8
 * matmul needs an operand with k contiguous ("TN") and it is not, and
 * that is all it lacks (sc_gemm_fp8_refusal of the layout with the
 * copies), the operand's transposed FP8 copy is made by a kernel before
 * the step (a8_tn, b8_tn): W for X·W, X and dY for Xᵀ·dY. One whose
 * matrices differ per batch entry is not copied. */
static sc_status mark_fp8(sc_lower_ctx *cx, sc_gemm *gm, int32_t ra, int32_t rb) {
  int32_t a8 = ra >= 0 ? fp8_source(cx, ra) : -1, b8 = rb >= 0 ? fp8_source(cx, rb) : -1;
  if (a8 < 0 || b8 < 0) return SC_OK;
  gm->fp8 = true;
  gm->a8 = a8, gm->b8 = b8;
  sc_gemm v = *gm;
  v.a8_tn = gm->trans_a, v.b8_tn = !gm->trans_b;
  if ((!v.a8_tn && !v.b8_tn) || (v.a8_tn && gm->batch > 1 && gm->stride_a) ||
      (v.b8_tn && gm->batch > 1 && gm->stride_b))
    return SC_OK;
  sc_gemm l = sc_gemm_fp8_layout(&v);
  const sc_buffer *bufs = cx->p->buffers;
  if (sc_gemm_fp8_refusal(&l, bufs[gm->c].dtype, bufs[a8].dtype, bufs[b8].dtype)) return SC_OK;
  if (v.a8_tn && (gm->a8 = fp8_transpose(cx, "fp8_a_t", a8, gm->lda, gm->m, gm->k)) < 0)
    return failed(cx);
  if (v.b8_tn && (gm->b8 = fp8_transpose(cx, "fp8_b_t", b8, gm->ldb, gm->n, gm->k)) < 0)
    return failed(cx);
  gm->a8_tn = v.a8_tn, gm->b8_tn = v.b8_tn;
  return SC_OK;
}

static sc_status matmul_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *a = sc_node_input(cx->g, n, 0), *b = sc_node_input(cx->g, n, 1);
  const sc_value *y = sc_node_output(cx->g, n, 0);
  mm s;
  mm_dims(a, b, y, &s);
  int64_t macs = 0;
  bool big = sc_mul_i64(s.m, s.n, &macs) && sc_mul_i64(macs, s.k, &macs) &&
             sc_mul_i64(macs, s.nbatch, &macs) && macs >= GEMM_MIN_MACS;
  if (!gemm_dtype(y->dtype) || !big || s.k == 0) return matmul_kernel(cx, n, &s);
  int64_t sa = batch_stride(&s, s.ra, a->dims, s.m * s.k);
  int64_t sb = batch_stride(&s, s.rb, b->dims, s.k * s.n);
  /* an operand whose batch one stride cannot express is copied (reading
   * through a fused Transpose); otherwise a fused Transpose's input is
   * read in place, transposed */
  bool ta = false, tb = false;
  bool copy_a = sa < 0, copy_b = sb < 0;
  int32_t ba, bb;
  if (sa < 0) {
    ba = matmul_materialise(cx, n, 0, &s);
    sa = s.m * s.k;
  } else {
    ta = (ba = transposed_source(cx, n, 0)) >= 0;
    if (!ta) ba = sc_lower_buffer_of(cx, n->inputs[0]);
  }
  if (sb < 0) {
    bb = matmul_materialise(cx, n, 1, &s);
    sb = s.k * s.n;
  } else {
    tb = (bb = transposed_source(cx, n, 1)) >= 0;
    if (!tb) bb = sc_lower_buffer_of(cx, n->inputs[1]);
  }
  int32_t by = sc_lower_buffer_of(cx, n->outputs[0]);
  if (ba < 0 || bb < 0 || by < 0) return failed(cx);
  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_GEMM;
  st.kernel = -1;
  st.origin = n->name;
  sc_gemm *gm = &st.gemm;
  gm->a = ba, gm->b = bb, gm->c = by, gm->bias = -1;
  gm->m = s.m, gm->n = s.n, gm->k = s.k, gm->batch = s.nbatch;
  gm->trans_a = ta, gm->trans_b = tb;
  gm->lda = ta ? s.m : s.k, gm->ldb = tb ? s.k : s.n, gm->ldc = s.n;
  gm->stride_a = sa, gm->stride_b = sb, gm->stride_c = s.m * s.n;
  gm->alpha = 1.0f, gm->beta = 0.0f;
  if (sb == 0 && sa != 0 && s.nbatch > 1 && !ta) { /* B shared: one tall product */
    gm->m = s.m * s.nbatch;
    gm->batch = 1;
    gm->stride_a = gm->stride_c = 0;
  }
  if (s.nbatch == 1) gm->stride_a = gm->stride_b = gm->stride_c = 0;
  /* operands read in place (not copied, not through a fused Transpose) */
  sc_status fst =
      mark_fp8(cx, gm, copy_a || ta ? -1 : n->inputs[0], copy_b || tb ? -1 : n->inputs[1]);
  return fst != SC_OK ? fst : sc_lower_add_step(cx, &st);
}
const sc_lowering sc_lw_matmul = {SC_LOWER_STEP, NULL, matmul_build};

/* ---- Gemm ---- */

typedef struct gemm_p {
  bool ta, tb;
  double alpha, beta;
  int64_t m, n, k;
} gemm_p;

static sc_status gemm_params(sc_lower_ctx *cx, const sc_node *n, gemm_p *p) {
  const sc_value *a = sc_node_input(cx->g, n, 0);
  if (sc_gemm_read_attrs(cx->g, n, &p->ta, &p->tb, &p->alpha, &p->beta) != SC_OK)
    return sc_lower_error(cx, n, cx->g->diag.status, "%s", cx->g->diag.msg);
  const sc_value *y = sc_node_output(cx->g, n, 0);
  p->m = y->dims[0];
  p->n = y->dims[1];
  p->k = a->dims[p->ta ? 0 : 1];
  return SC_OK;
}

static sc_status gemm_kernel(sc_lower_ctx *cx, const sc_node *n, const gemm_p *p) {
  const sc_value *cv = sc_node_input(cx->g, n, 2), *y = sc_node_output(cx->g, n, 0);
  sc_status st = sc_lower_begin_kernel(cx, n, 2, y->dims, p->k > 0 ? p->k : 1);
  if (st != SC_OK) return st;
  int32_t idx[2], ai[2], bi[2];
  sc_lower_outer_index(cx, idx);
  int32_t r = kir_var(cx->arena, cx->k, KIR_INNER);
  ai[0] = p->ta ? r : idx[0], ai[1] = p->ta ? idx[0] : r;
  bi[0] = p->tb ? idx[1] : r, bi[1] = p->tb ? r : idx[1];
  /* floats in their accumulator dtype; integers like the fold: in f64 */
  sc_dtype acc = sc_dtype_is_float(y->dtype) ? acc_dtype(y->dtype) : SC_DTYPE_F64;
  int32_t v = reduce_dot(cx, n, acc, p->k, ai, bi);
  if (v < 0) return failed(cx);
  if (p->alpha != 1.0) v = bin(cx, KIR_MUL, v, fconst(cx, acc, p->alpha));
  if (cv) {
    int32_t ci[2];
    sc_lower_bcast_index(cx, 2, idx, cv->rank, cv->dims, ci);
    int32_t c = cast_to(cx, acc, sc_lower_input_at(cx, n, 2, ci));
    if (c < 0) return failed(cx);
    if (p->beta != 1.0) c = bin(cx, KIR_MUL, c, fconst(cx, acc, p->beta));
    v = bin(cx, KIR_ADD, v, c);
  }
  return sc_lower_store(cx, n, 0, idx, cast_to(cx, y->dtype, v));
}

/* beta * C broadcast to [M, N]. */
typedef struct gemm_c {
  const sc_node *n;
  double beta;
} gemm_c;

static int32_t gemm_c_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const gemm_c *c = ud;
  const sc_value *cv = sc_node_input(cx->g, c->n, 2);
  int32_t ci[2];
  sc_lower_bcast_index(cx, 2, idx, cv->rank, cv->dims, ci);
  int32_t e = sc_lower_input_at(cx, c->n, 2, ci);
  if (e < 0 || c->beta == 1.0) return e;
  return bin(cx, KIR_MUL, e, fconst(cx, cv->dtype, c->beta));
}

static sc_status gemm_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *a = sc_node_input(cx->g, n, 0), *b = sc_node_input(cx->g, n, 1);
  const sc_value *cv = sc_node_input(cx->g, n, 2), *y = sc_node_output(cx->g, n, 0);
  gemm_p p;
  sc_status pst = gemm_params(cx, n, &p);
  if (pst != SC_OK) return pst;
  int64_t macs = 0;
  bool big = sc_mul_i64(p.m, p.n, &macs) && sc_mul_i64(macs, p.k, &macs) &&
             macs >= GEMM_MIN_MACS;
  if (!gemm_dtype(y->dtype) || !big) return gemm_kernel(cx, n, &p);
  int32_t ba = sc_lower_buffer_of(cx, n->inputs[0]), bb = sc_lower_buffer_of(cx, n->inputs[1]);
  int32_t by = sc_lower_buffer_of(cx, n->outputs[0]);
  if (ba < 0 || bb < 0 || by < 0) return failed(cx);
  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_GEMM;
  st.kernel = -1;
  st.origin = n->name;
  sc_gemm *gm = &st.gemm;
  gm->a = ba, gm->b = bb, gm->c = by, gm->bias = -1;
  gm->trans_a = p.ta, gm->trans_b = p.tb;
  gm->batch = 1, gm->m = p.m, gm->n = p.n, gm->k = p.k;
  gm->lda = a->dims[1], gm->ldb = b->dims[1], gm->ldc = p.n;
  gm->alpha = (float)p.alpha, gm->beta = 0.0f;
  if (cv && p.beta != 0.0) {
    int64_t cn = sc_value_numel(cv);
    bool full = cv->rank == 2 && cv->dims[0] == p.m && cv->dims[1] == p.n;
    bool row = (cv->rank == 1 || (cv->rank == 2 && cv->dims[0] == 1)) && cn == p.n &&
               cv->dims[cv->rank - 1] == p.n;
    int32_t bc = sc_lower_buffer_of(cx, n->inputs[2]);
    if (bc < 0) return failed(cx);
    if (p.beta == 1.0 && (full || row)) {
      gm->bias = bc;
      gm->bias_full = full;
    } else { /* beta * C broadcast to [M, N] in scratch */
      int32_t sb = sc_lower_scratch(cx, "gemm_c", y->dtype, 2, y->dims);
      if (sb < 0) return failed(cx);
      gemm_c c = {n, p.beta};
      sc_status s2 = sc_lower_pointwise_kernel(cx, "gemm_c", sb, gemm_c_at, &c);
      if (s2 != SC_OK) return s2;
      gm->bias = sb;
      gm->bias_full = true;
    }
  }
  sc_status fst = mark_fp8(cx, gm, n->inputs[0], n->inputs[1]);
  return fst != SC_OK ? fst : sc_lower_add_step(cx, &st);
}
const sc_lowering sc_lw_gemm = {SC_LOWER_STEP, NULL, gemm_build};

/* ---- sliding windows ---- */

typedef struct win {
  int32_t nsp;
  int64_t kernel[SC_MAX_RANK], strides[SC_MAX_RANK], dilations[SC_MAX_RANK];
  int64_t begin[SC_MAX_RANK], end[SC_MAX_RANK];
} win;

/* Effective window of node n over x (N, C, spatial...) giving y; kernel from
 * wkernel (Conv: W's dims) or the kernel_shape attribute. */
static sc_status win_params(sc_lower_ctx *cx, const sc_node *n, const sc_value *x,
                            const sc_value *y, const int64_t *wkernel, win *w) {
  sc_graph *g = cx->g;
  w->nsp = x->rank - 2;
  const int64_t *ks = NULL, *st = NULL, *dl = NULL, *pd = NULL;
  int64_t nk = sc_attr_ints(g, n, "kernel_shape", &ks);
  int64_t ns = sc_attr_ints(g, n, "strides", &st);
  int64_t nd = sc_attr_ints(g, n, "dilations", &dl);
  int64_t np = sc_attr_ints(g, n, "pads", &pd);
  const char *ap = sc_attr_string(g, n, "auto_pad", "NOTSET");
  if (g->diag.status != SC_OK) return sc_lower_error(cx, n, g->diag.status, "%s", g->diag.msg);
  for (int32_t i = 0; i < w->nsp; i++) {
    w->kernel[i] = wkernel ? wkernel[i] : nk == w->nsp ? ks[i] : 1;
    w->strides[i] = ns == w->nsp ? st[i] : 1;
    w->dilations[i] = nd == w->nsp ? dl[i] : 1;
    w->begin[i] = np == 2 * w->nsp ? pd[i] : 0;
    w->end[i] = np == 2 * w->nsp ? pd[w->nsp + i] : 0;
    bool upper = !strcmp(ap, "SAME_UPPER"), lower = !strcmp(ap, "SAME_LOWER");
    if (!strcmp(ap, "VALID")) w->begin[i] = w->end[i] = 0;
    if (upper || lower) {
      int64_t in = x->dims[2 + i], out = y->dims[2 + i];
      int64_t total = (out - 1) * w->strides[i] + (w->kernel[i] - 1) * w->dilations[i] + 1 - in;
      if (total < 0) total = 0;
      w->begin[i] = upper ? total / 2 : total - total / 2;
      w->end[i] = total - w->begin[i];
    }
  }
  return SC_OK;
}

/* Input positions of the window taps: pos[d] = o[d]*s - pad + kk[d]*dil for
 * output spatial index o (idx + 2) and tap index kk; *inside: all in the
 * input; *inside_padded: all in the padded input. */
static void win_taps(sc_lower_ctx *cx, const win *w, const sc_value *x, const int32_t *o,
                     const int32_t *kk, int32_t *pos, int32_t *inside, int32_t *inside_padded) {
  int32_t in = -1, inp = -1;
  for (int32_t d = 0; d < w->nsp; d++) {
    int32_t p = bin(cx, KIR_ADD, bin(cx, KIR_MUL, o[d], C(cx, w->strides[d])),
                    bin(cx, KIR_SUB, bin(cx, KIR_MUL, kk[d], C(cx, w->dilations[d])),
                        C(cx, w->begin[d])));
    int64_t dim = x->dims[2 + d];
    in = and2(cx, in, in_range(cx, p, 0, dim));
    if (inside_padded) inp = and2(cx, inp, in_range(cx, p, -w->begin[d], dim + w->end[d]));
    pos[d] = clamp(cx, p, 0, dim - 1);
  }
  *inside = in;
  if (inside_padded) *inside_padded = inp;
}

/* The extents of x with window w's padding written out, into pd (pd[0],
 * pd[1] = x's): the begin pads, x, the end pads, and at least as far as the
 * last tap of y reads ((out - 1) * stride + (kernel - 1) * dilation + 1:
 * a ceil_mode window may pass the end pads). */
static void padded_dims(const win *w, const sc_value *x, const sc_value *y, int64_t *pd) {
  pd[0] = x->dims[0], pd[1] = x->dims[1];
  for (int32_t d = 0; d < w->nsp; d++) {
    int64_t reach =
        (y->dims[2 + d] - 1) * w->strides[d] + (w->kernel[d] - 1) * w->dilations[d] + 1;
    pd[2 + d] = w->begin[d] + x->dims[2 + d] + (w->end[d] > 0 ? w->end[d] : 0);
    if (pd[2 + d] < reach) pd[2 + d] = reach;
  }
}

/* ---- Conv through im2col + GEMM ---- */

typedef struct conv_g {
  const sc_node *n;
  const win *w;
  int64_t group, cpg, mpg;
  int64_t kdims[SC_MAX_RANK]; /* [cpg, kernel...]: the K axis unflattened */
  int32_t xpad;               /* the padded input's scratch buffer, or -1 */
} conv_g;

/* xpad[n, c, q...] = x[n, c, q - begin...] inside x, else 0: the input with
 * the padding written out (a pass over the input, not over the K times
 * larger cols), so that im2col reads it without bounds checks or clamping:
 * its rows are then plain strided copies the vectoriser handles. */
static int32_t conv_pad_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const conv_g *c = ud;
  const sc_value *x = sc_node_input(cx->g, c->n, 0);
  int32_t xi[SC_MAX_RANK], inside = -1;
  xi[0] = idx[0], xi[1] = idx[1];
  for (int32_t d = 0; d < c->w->nsp; d++) {
    int64_t dim = x->dims[2 + d];
    int32_t p = bin(cx, KIR_SUB, idx[2 + d], C(cx, c->w->begin[d]));
    inside = and2(cx, inside, in_range(cx, p, 0, dim));
    xi[2 + d] = clamp(cx, p, 0, dim - 1);
  }
  int32_t v = sc_lower_input_at(cx, c->n, 0, xi);
  if (v < 0 || inside < 0) return v;
  return sel(cx, inside, v, fconst(cx, x->dtype, 0));
}

/* cols[n, g, kk, o...] = x[n, g*cpg + c, o*s - pad + k*dil] (0 outside),
 * kk = (c, k...) flattened: read from xpad at o*s + k*dil when the conv
 * pads, else from x at o*s + k*dil - begin (always inside: begin <= 0). */
static int32_t conv_im2col_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const conv_g *c = ud;
  int32_t nsp = c->w->nsp, ri[SC_MAX_RANK], xi[SC_MAX_RANK];
  sc_lower_unflatten(cx, idx[2], nsp + 1, c->kdims, ri);
  xi[0] = idx[0];
  xi[1] = bin(cx, KIR_ADD, bin(cx, KIR_MUL, idx[1], C(cx, c->cpg)), ri[0]);
  for (int32_t d = 0; d < nsp; d++) {
    int64_t shift = c->xpad >= 0 ? 0 : -c->w->begin[d]; /* begin <= 0 without xpad */
    xi[2 + d] = bin(cx, KIR_ADD, bin(cx, KIR_MUL, idx[3 + d], C(cx, c->w->strides[d])),
                    bin(cx, KIR_ADD, bin(cx, KIR_MUL, ri[1 + d], C(cx, c->w->dilations[d])),
                        C(cx, shift)));
  }
  return c->xpad >= 0 ? sc_lower_buffer_at(cx, c->xpad, xi) : sc_lower_input_at(cx, c->n, 0, xi);
}

/* wrep[n, m, kk] = W[m, kk] (W flattened to [M, K]). */
static int32_t conv_wrep_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const conv_g *c = ud;
  const sc_value *wt = sc_node_input(cx->g, c->n, 1);
  int32_t wi[SC_MAX_RANK];
  wi[0] = idx[1];
  sc_lower_unflatten(cx, idx[2], wt->rank - 1, wt->dims + 1, wi + 1);
  return sc_lower_input_at(cx, c->n, 1, wi);
}

/* y[n, m, o...] = bias[m] (the GEMM then adds the products). */
static int32_t conv_bias_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const conv_g *c = ud;
  int32_t bi[1] = {idx[1]};
  return sc_lower_input_at(cx, c->n, 2, bi);
}

static sc_status conv_gemm(sc_lower_ctx *cx, const sc_node *n, const win *w, int64_t group,
                           int64_t cpg, int64_t mpg, int64_t kk, int64_t pix) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *wt = sc_node_input(cx->g, n, 1);
  const sc_value *y = sc_node_output(cx->g, n, 0);
  int64_t N = x->dims[0], M = wt->dims[0];
  conv_g c = {.n = n, .w = w, .group = group, .cpg = cpg, .mpg = mpg, .xpad = -1};
  c.kdims[0] = cpg;
  bool pointwise = true; /* 1x1, stride 1, no padding: cols = x */
  bool pads = false;
  int64_t pd[SC_MAX_RANK]; /* the padded input's dims */
  padded_dims(w, x, y, pd);
  for (int32_t d = 0; d < w->nsp; d++) {
    c.kdims[1 + d] = w->kernel[d];
    pointwise &= w->kernel[d] == 1 && w->strides[d] == 1 && w->begin[d] == 0 &&
                 w->end[d] == 0 && x->dims[2 + d] == y->dims[2 + d];
    pads |= w->begin[d] > 0 || w->end[d] > 0;
  }
  int32_t bx = sc_lower_buffer_of(cx, n->inputs[0]), bw = sc_lower_buffer_of(cx, n->inputs[1]);
  int32_t by = sc_lower_buffer_of(cx, n->outputs[0]);
  if (bx < 0 || bw < 0 || by < 0) return failed(cx);
  sc_status st;
  int32_t cols = bx, prep[2] = {-1, -1};
  if (!pointwise && pads) {
    if ((c.xpad = sc_lower_scratch(cx, "xpad", x->dtype, x->rank, pd)) < 0) return failed(cx);
    if ((st = sc_lower_pointwise_kernel(cx, "pad", c.xpad, conv_pad_at, &c)) != SC_OK) return st;
    prep[0] = cx->p->n_kernels - 1;
  }
  if (!pointwise) {
    int64_t d[SC_MAX_RANK] = {N, group, kk};
    for (int32_t i = 0; i < w->nsp; i++) d[3 + i] = y->dims[2 + i];
    if ((cols = sc_lower_scratch(cx, "cols", x->dtype, 3 + w->nsp, d)) < 0) return failed(cx);
    if ((st = sc_lower_pointwise_kernel(cx, "im2col", cols, conv_im2col_at, &c)) != SC_OK)
      return st;
    prep[1] = cx->p->n_kernels - 1;
  }
  int32_t wa = bw;
  int64_t batch = N * group, sa = mpg * kk;
  if (group == 1) {
    sa = 0;
  } else if (N > 1) {
    int64_t d[3] = {N, M, kk};
    if ((wa = sc_lower_scratch(cx, "wrep", wt->dtype, 3, d)) < 0) return failed(cx);
    if ((st = sc_lower_pointwise_kernel(cx, "wrep", wa, conv_wrep_at, &c)) != SC_OK)
      return st;
  }
  bool has_bias = sc_node_input(cx->g, n, 2) != NULL;
  if (has_bias && (st = sc_lower_pointwise_kernel(cx, "bias", by, conv_bias_at, &c)) != SC_OK)
    return st;
  int32_t bias_kernel = has_bias ? cx->p->n_kernels - 1 : -1;
  int32_t bias_buf = has_bias ? sc_lower_buffer_of(cx, n->inputs[2]) : -1;
  if (has_bias && bias_buf < 0) return failed(cx);
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_GEMM;
  s.kernel = -1;
  s.origin = n->name;
  sc_gemm *gm = &s.gemm;
  gm->a = wa, gm->b = cols, gm->c = by, gm->bias = -1;
  gm->batch = batch, gm->m = mpg, gm->n = pix, gm->k = kk;
  gm->lda = kk, gm->ldb = pix, gm->ldc = pix;
  gm->stride_a = batch > 1 ? sa : 0;
  gm->stride_b = batch > 1 ? kk * pix : 0;
  gm->stride_c = batch > 1 ? mpg * pix : 0;
  gm->alpha = 1.0f;
  gm->beta = has_bias ? 1.0f : 0.0f;
  if (!pointwise && group == 1 && w->nsp == 2 && x->dtype == SC_DTYPE_F32 && w->begin[0] >= 0 &&
      w->begin[1] >= 0 && w->end[0] >= 0 && w->end[1] >= 0) {
    /* the same product described as a convolution, for a device that
     * convolves x directly (program.h, sc_conv_geom) */
    sc_conv_geom *v = &gm->conv;
    v->on = true;
    v->x = bx;
    v->prep[0] = prep[0], v->prep[1] = prep[1];
    v->bias = bias_buf, v->bias_kernel = bias_kernel;
    v->c = x->dims[1], v->h = x->dims[2], v->w = x->dims[3];
    v->kh = w->kernel[0], v->kw = w->kernel[1];
    v->sh = w->strides[0], v->sw = w->strides[1];
    v->dh = w->dilations[0], v->dw = w->dilations[1];
    v->pt = w->begin[0], v->pl = w->begin[1], v->pb = w->end[0], v->pr = w->end[1];
    v->oh = y->dims[2], v->ow = y->dims[3];
  }
  return sc_lower_add_step(cx, &s);
}

/* ---- Conv ---- */

static sc_status conv_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *wt = sc_node_input(cx->g, n, 1);
  const sc_value *bias = sc_node_input(cx->g, n, 2), *y = sc_node_output(cx->g, n, 0);
  win w;
  sc_status st = win_params(cx, n, x, y, wt->dims + 2, &w);
  if (st != SC_OK) return st;
  int64_t group = sc_attr_int(cx->g, n, "group", 1);
  int64_t cpg = wt->dims[1], mpg = wt->dims[0] / (group > 0 ? group : 1);
  {
    /* K = cpg x taps, P = output pixels; macs = N * M * K * P; the cols
     * scratch (N * G * K * P floats) must have a representable size */
    int64_t kk = cpg, pix = 1, cols = 0, macs = 0, bytes = 0;
    bool ok = group > 0 && w.nsp >= 1;
    for (int32_t d = 0; d < w.nsp && ok; d++)
      ok = sc_mul_i64(kk, w.kernel[d], &kk) && sc_mul_i64(pix, y->dims[2 + d], &pix);
    ok = ok && sc_mul_i64(kk, pix, &cols) && sc_mul_i64(cols, x->dims[0], &cols) &&
         sc_mul_i64(cols, group, &cols) && sc_mul_i64(cols, mpg, &macs) &&
         sc_mul_i64(cols, 4, &bytes);
    if (ok && y->dtype == SC_DTYPE_F32 && x->dtype == SC_DTYPE_F32 &&
        wt->dtype == SC_DTYPE_F32 && (!bias || bias->dtype == SC_DTYPE_F32) && mpg >= 2 &&
        kk > 0 && macs >= CONV_GEMM_MIN_MACS)
      return conv_gemm(cx, n, &w, group, cpg, mpg, kk, pix);
  }
  /* inner loop over [C/group, kernel...] */
  int64_t red[SC_MAX_RANK], inner = cpg;
  red[0] = cpg;
  for (int32_t d = 0; d < w.nsp; d++) {
    red[1 + d] = w.kernel[d];
    inner *= w.kernel[d];
  }
  if ((st = sc_lower_begin_kernel(cx, n, y->rank, y->dims, inner)) != SC_OK) return st;
  int32_t idx[SC_MAX_RANK], ri[SC_MAX_RANK], pos[SC_MAX_RANK], xi[SC_MAX_RANK],
      wi[SC_MAX_RANK], inside;
  sc_lower_outer_index(cx, idx);
  sc_lower_unflatten(cx, kir_var(cx->arena, cx->k, KIR_INNER), w.nsp + 1, red, ri);
  win_taps(cx, &w, x, idx + 2, ri + 1, pos, &inside, NULL);
  int32_t grp = bin(cx, KIR_DIV, idx[1], C(cx, mpg));
  xi[0] = idx[0];
  xi[1] = bin(cx, KIR_ADD, bin(cx, KIR_MUL, grp, C(cx, cpg)), ri[0]);
  wi[0] = idx[1];
  wi[1] = ri[0];
  for (int32_t d = 0; d < w.nsp; d++) {
    xi[2 + d] = pos[d];
    wi[2 + d] = ri[1 + d];
  }
  sc_dtype acc = acc_dtype(y->dtype);
  int32_t vx = cast_to(cx, acc, sc_lower_input_at(cx, n, 0, xi));
  int32_t vw = cast_to(cx, acc, sc_lower_input_at(cx, n, 1, wi));
  if (vx < 0 || vw < 0) return failed(cx);
  int32_t prod = bin(cx, KIR_MUL, vx, vw);
  if (inside >= 0) prod = sel(cx, inside, prod, fconst(cx, acc, 0));
  int32_t ph = kir_add_reduce(cx->arena, cx->k, KIR_RED_SUM, acc, prod);
  if (ph < 0) return failed(cx);
  int32_t v = kir_reg(cx->arena, cx->k, ph);
  if (bias) {
    int32_t bi[1] = {idx[1]};
    int32_t b = cast_to(cx, acc, sc_lower_input_at(cx, n, 2, bi));
    if (b < 0) return failed(cx);
    v = bin(cx, KIR_ADD, v, b);
  }
  return sc_lower_store(cx, n, 0, idx, cast_to(cx, y->dtype, v));
}
const sc_lowering sc_lw_conv = {SC_LOWER_STEP, NULL, conv_build};

/* ---- MaxPool, AveragePool ---- */

/* The lowest value of dtype t (padding for a maximum). */
static int32_t lowest(sc_lower_ctx *cx, sc_dtype t) {
  if (sc_dtype_is_float(t)) return fconst(cx, t, -__builtin_inf());
  return kir_const_i(cx->arena, cx->k, t, t == SC_DTYPE_U64 ? 0 : INT64_MIN);
}

/* MaxPool's Indices: the flat position in X of window tap r (i64). */
static int32_t pool_index(sc_lower_ctx *cx, const sc_node *n, const win *w, const sc_value *x,
                          const int32_t *idx, int32_t r) {
  int32_t kk[SC_MAX_RANK], pos[SC_MAX_RANK], inside;
  sc_lower_unflatten(cx, r, w->nsp, w->kernel, kk);
  win_taps(cx, w, x, idx + 2, kk, pos, &inside, NULL);
  bool col = sc_attr_int(cx->g, n, "storage_order", 0) != 0;
  int32_t flat = bin(cx, KIR_ADD, bin(cx, KIR_MUL, idx[0], C(cx, x->dims[1])), idx[1]);
  int32_t sp = -1;
  int64_t scale = 1;
  for (int32_t j = 0; j < w->nsp; j++) { /* row-major: last axis fastest */
    int32_t d = col ? j : w->nsp - 1 - j;
    int32_t term = bin(cx, KIR_MUL, pos[d], C(cx, scale));
    sp = sp < 0 ? term : bin(cx, KIR_ADD, sp, term);
    scale *= x->dims[2 + d];
  }
  return bin(cx, KIR_ADD, bin(cx, KIR_MUL, flat, C(cx, scale)), sp);
}

/* A small max window (at most POOL_UNROLL_MAX taps) without Indices is
 * lowered as one expression per output, the maximum of its taps unrolled
 * (inner extent 1), read from a copy of the input with the padding (and a
 * ceil_mode window's overhang) written out as the lowest value: the taps'
 * indices are then affine in the output position (no clamping, no masks),
 * and the vectoriser runs the kernel across output columns with strided
 * loads. The copy is two kernels whose indices are affine too: the lowest
 * value everywhere, then x into the inside (a single copy with clamped
 * reads does not vectorise: 0.51 ms alone). ResNet-18's 3x3 / 2 max-pool,
 * batch 1, 2 threads: 0.85 ms as a 9-tap reduction per output, 0.38 ms so
 * (fill 0.15, copy 0.11, maximum 0.12). Most max-pools need no copy at
 * all (max_pool_clamped, below). */
enum { POOL_UNROLL_MAX = 27 };

/* xpad's border: the lowest value (the whole buffer, before its inside);
 * ud is the MaxPool node */
static int32_t pool_fill_at(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  return lowest(cx, sc_node_input(cx->g, ud, 0)->dtype);
}

/* The maximum of the taps of the window at output position idx, in y's
 * dtype: read from the padded copy xpad (>= 0; tap k of an axis at o * s +
 * k * dilation) or from x (tap k at o * s + k * dilation - begin, clamped
 * into x on the axes where clamp is set), folded as the reduction folds
 * (max(acc, x): a tie keeps x). -1 on failure. */
static int32_t max_of_taps(sc_lower_ctx *cx, const sc_node *n, const win *w, int64_t taps,
                           const int32_t *idx, int32_t xpad, const bool *clamp) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  int32_t xi[SC_MAX_RANK] = {idx[0], idx[1]};
  sc_dtype acc = acc_dtype(y->dtype);
  int32_t m = -1;
  for (int64_t r = 0; r < taps; r++) {
    int64_t rem = r;
    for (int32_t d = w->nsp - 1; d >= 0; d--) { /* tap r's position, last axis fastest */
      int64_t k = rem % w->kernel[d];
      rem /= w->kernel[d];
      int64_t off = k * w->dilations[d] - (xpad >= 0 ? 0 : w->begin[d]);
      int32_t at = bin(cx, KIR_ADD, bin(cx, KIR_MUL, idx[2 + d], C(cx, w->strides[d])),
                       C(cx, off));
      if (clamp[d])
        at = bin(cx, KIR_MIN, bin(cx, KIR_MAX, at, C(cx, 0)), C(cx, x->dims[2 + d] - 1));
      xi[2 + d] = at;
    }
    int32_t v = cast_to(cx, acc, xpad >= 0 ? sc_lower_buffer_at(cx, xpad, xi)
                                           : sc_lower_input_at(cx, n, 0, xi));
    if (v < 0) return -1;
    m = m < 0 ? v : bin(cx, KIR_MAX, m, v);
  }
  return cast_to(cx, y->dtype, m);
}

/* Without dilation, when the padding is less than the window on every
 * axis and every window starts inside the input, a tap in the padding can
 * be read at the nearest edge instead: that position is in the same window
 * (so the maximum is unchanged), and no padded copy is needed. On the outer
 * spatial axes the taps are clamped (per row: the vectoriser keeps them out
 * of its loop); the last axis is cut into the columns whose taps are all
 * inside (one kernel, affine, vectorised) and the few at its two ends (a
 * second kernel, clamped). ResNet-18's 3x3 / 2 max-pool at batch 8, 2
 * threads: ~4.5 ms where fill, copy and maximum took ~6-8. */
static bool pool_clamps(const win *w, const sc_value *x, const sc_value *y) {
  for (int32_t d = 0; d < w->nsp; d++) {
    int64_t k = w->kernel[d], b = w->begin[d];
    if (w->dilations[d] != 1 || b > k - 1 || b < 0 ||
        (y->dims[2 + d] - 1) * w->strides[d] - b > x->dims[2 + d] - 1)
      return false;
  }
  return true;
}

/* One kernel of max_pool_clamped: output columns [lo, lo + cols) of the
 * last axis, or, with edges, the columns [0, lo) then [hi, OW) */
static sc_status max_pool_part(sc_lower_ctx *cx, const sc_node *n, const win *w, int64_t taps,
                               int64_t lo, int64_t hi, bool edges) {
  const sc_value *y = sc_node_output(cx->g, n, 0);
  int32_t last = y->rank - 1;
  int64_t dom[SC_MAX_RANK];
  memcpy(dom, y->dims, sizeof(int64_t) * (size_t)y->rank);
  dom[last] = edges ? lo + (y->dims[last] - hi) : hi - lo;
  sc_status st = sc_lower_begin_kernel(cx, n, y->rank, dom, 1);
  if (st != SC_OK) return st;
  int32_t idx[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  int32_t j = idx[last];
  idx[last] = edges ? sel(cx, bin(cx, KIR_LT, j, C(cx, lo)), j, bin(cx, KIR_ADD, j, C(cx, hi - lo)))
                    : bin(cx, KIR_ADD, j, C(cx, lo));
  bool clamp[SC_MAX_RANK]; /* the outer axes; the last one at its ends */
  for (int32_t d = 0; d < w->nsp; d++) clamp[d] = 2 + d != last || edges;
  return sc_lower_store(cx, n, 0, idx, max_of_taps(cx, n, w, taps, idx, -1, clamp));
}

/* Marks the last step (the pool's last kernel; the ones from kernel
 * `first` on are its others) as the 2-D max-pool it completes
 * (sc_pool_geom), when it is one a device may run directly: f32, and every
 * kernel of it reads only x's buffer and writes only y's (no fused producer
 * or epilogue). Called after max_pool_clamped, whose windows all start
 * inside x. */
static void pool_geom(sc_lower_ctx *cx, const sc_node *n, const win *w, int32_t first) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  sc_program *p = cx->p;
  int32_t bx = cx->value_buffer[n->inputs[0]], by = cx->value_buffer[n->outputs[0]];
  int32_t last = p->n_kernels - 1;
  if (w->nsp != 2 || x->dtype != SC_DTYPE_F32 || y->dtype != SC_DTYPE_F32 || bx < 0 || by < 0 ||
      p->n_steps < 1 || p->steps[p->n_steps - 1].kernel != last || last - first > 2 ||
      last < first)
    return;
  for (int32_t k = first; k <= last; k++) {
    const kir_kernel *kk = p->kernels[k];
    if (kk->n_params != 2) return;
    for (int32_t i = 0; i < 2; i++)
      if (kk->params[i].buffer != (kk->params[i].written ? by : bx)) return;
    if (kk->params[0].written == kk->params[1].written) return;
  }
  sc_pool_geom *v = &p->steps[p->n_steps - 1].pool;
  v->on = true;
  v->x = bx, v->y = by;
  v->prep[0] = first < last ? first : -1;
  v->prep[1] = first + 1 < last ? first + 1 : -1;
  v->n = x->dims[0], v->c = x->dims[1], v->h = x->dims[2], v->w = x->dims[3];
  v->kh = w->kernel[0], v->kw = w->kernel[1];
  v->sh = w->strides[0], v->sw = w->strides[1];
  v->oh = y->dims[2], v->ow = y->dims[3];
  v->pt = w->begin[0], v->pl = w->begin[1];
  /* the far padding the last window reaches (a ceil_mode overhang
   * included), at least 0: with it the usual formula gives oh, ow */
  v->pb = (v->oh - 1) * v->sh + v->kh - v->h - v->pt;
  v->pr = (v->ow - 1) * v->sw + v->kw - v->w - v->pl;
  if (v->pb < 0) v->pb = 0;
  if (v->pr < 0) v->pr = 0;
}

static sc_status max_pool_clamped(sc_lower_ctx *cx, const sc_node *n, const win *w,
                                  int64_t taps) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  int32_t d = w->nsp - 1;
  int64_t s = w->strides[d], b = w->begin[d], X = x->dims[2 + d], Y = y->dims[2 + d];
  /* columns whose taps o*s - b .. o*s - b + k - 1 all lie in [0, X) */
  int64_t lo = (b + s - 1) / s, hi = X - w->kernel[d] + b < 0 ? 0 : (X - w->kernel[d] + b) / s + 1;
  if (hi > Y) hi = Y;
  if (lo > hi) lo = hi;
  sc_status st = SC_OK;
  int32_t first = cx->p->n_kernels;
  if (hi > lo) st = max_pool_part(cx, n, w, taps, lo, hi, false);
  if (st == SC_OK && lo + (Y - hi) > 0) st = max_pool_part(cx, n, w, taps, lo, hi, true);
  if (st == SC_OK) pool_geom(cx, n, w, first);
  return st;
}

static sc_status max_pool_unrolled(sc_lower_ctx *cx, const sc_node *n, const win *w,
                                   int64_t taps) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  if (w->nsp >= 1 && pool_clamps(w, x, y)) return max_pool_clamped(cx, n, w, taps);
  int32_t xpad = -1; /* the padded input, or -1 (no padding: x itself) */
  int64_t pd[SC_MAX_RANK];
  padded_dims(w, x, y, pd);
  bool pads = false; /* pads, or a ceil_mode window passes the end */
  for (int32_t d = 0; d < w->nsp; d++) pads |= pd[2 + d] > x->dims[2 + d];
  sc_status st;
  if (pads) {
    void *ud = (void *)n;
    if ((xpad = sc_lower_scratch(cx, "xpad", x->dtype, x->rank, pd)) < 0) return failed(cx);
    int64_t shift[SC_MAX_RANK] = {0, 0};
    for (int32_t d = 0; d < w->nsp; d++) shift[2 + d] = w->begin[d];
    if ((st = sc_lower_pointwise_kernel(cx, "fill", xpad, pool_fill_at, ud)) != SC_OK ||
        /* xpad's inside: xpad[n, c, q + begin...] = x[n, c, q...] (a kernel
         * over x's shape, so that loads and stores are both affine) */
        (st = sc_lower_copy_input(cx, "pad", xpad, n, 0, shift)) != SC_OK)
      return st;
  }
  if ((st = sc_lower_begin_kernel(cx, n, y->rank, y->dims, 1)) != SC_OK) return st;
  int32_t idx[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  bool clamp[SC_MAX_RANK] = {false};
  return sc_lower_store(cx, n, 0, idx, max_of_taps(cx, n, w, taps, idx, xpad, clamp));
}

static sc_status pool_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  bool is_max = n->op == SC_OP_MAX_POOL;
  bool indices = is_max && sc_node_output(cx->g, n, 1);
  win w;
  sc_status st = win_params(cx, n, x, y, NULL, &w);
  if (st != SC_OK) return st;
  if (is_max && !indices) {
    int64_t taps = 1;
    bool small = true;
    for (int32_t d = 0; d < w.nsp && small; d++)
      small = w.kernel[d] >= 1 && w.begin[d] >= 0 && w.end[d] >= 0 &&
              sc_mul_i64(taps, w.kernel[d], &taps) && taps <= POOL_UNROLL_MAX;
    if (small) return max_pool_unrolled(cx, n, &w, taps);
  }
  bool include_pad = !is_max && sc_attr_int(cx->g, n, "count_include_pad", 0) != 0;
  int64_t inner = 1;
  for (int32_t d = 0; d < w.nsp; d++) inner *= w.kernel[d];
  if ((st = sc_lower_begin_kernel(cx, n, y->rank, y->dims, inner)) != SC_OK) return st;
  int32_t idx[SC_MAX_RANK], kk[SC_MAX_RANK], pos[SC_MAX_RANK], xi[SC_MAX_RANK], inside,
      inside_p;
  sc_lower_outer_index(cx, idx);
  sc_lower_unflatten(cx, kir_var(cx->arena, cx->k, KIR_INNER), w.nsp, w.kernel, kk);
  win_taps(cx, &w, x, idx + 2, kk, pos, &inside, &inside_p);
  xi[0] = idx[0];
  xi[1] = idx[1];
  for (int32_t d = 0; d < w.nsp; d++) xi[2 + d] = pos[d];
  sc_dtype acc = acc_dtype(y->dtype);
  int32_t v = cast_to(cx, acc, sc_lower_input_at(cx, n, 0, xi));
  if (v < 0) return failed(cx);
  int32_t r;
  if (is_max) {
    int32_t masked = sel(cx, inside, v, lowest(cx, acc));
    int32_t ph = kir_add_reduce(cx->arena, cx->k, KIR_RED_MAX, acc, masked);
    if (ph < 0) return failed(cx);
    r = kir_reg(cx->arena, cx->k, ph);
    if (indices) {
      int32_t pa = kir_add_reduce(cx->arena, cx->k, KIR_RED_ARGMAX, acc, masked);
      if (pa < 0) return failed(cx);
      int32_t at = pool_index(cx, n, &w, x, idx, kir_reg(cx->arena, cx->k, pa));
      if (at < 0) return failed(cx);
      if ((st = sc_lower_store(cx, n, 1, idx, at)) != SC_OK) return st;
    }
  } else {
    int32_t p0 = kir_add_reduce(cx->arena, cx->k, KIR_RED_SUM, acc,
                                sel(cx, inside, v, fconst(cx, acc, 0)));
    int32_t p1 = kir_add_reduce(cx->arena, cx->k, KIR_RED_SUM, acc,
                                sel(cx, include_pad ? inside_p : inside, fconst(cx, acc, 1),
                                    fconst(cx, acc, 0)));
    if (p0 < 0 || p1 < 0) return failed(cx);
    r = bin(cx, KIR_DIV, kir_reg(cx->arena, cx->k, p0), kir_reg(cx->arena, cx->k, p1));
  }
  return sc_lower_store(cx, n, 0, idx, cast_to(cx, y->dtype, r));
}
const sc_lowering sc_lw_pool = {SC_LOWER_KERNEL, NULL, pool_build};

/* ---- GlobalAveragePool, GlobalMaxPool ---- */

static sc_status global_pool_build(sc_lower_ctx *cx, const sc_node *n) {
  const sc_value *x = sc_node_input(cx->g, n, 0), *y = sc_node_output(cx->g, n, 0);
  int64_t inner = 1;
  for (int32_t d = 2; d < x->rank; d++) inner *= x->dims[d];
  sc_status st = sc_lower_begin_kernel(cx, n, y->rank, y->dims, inner);
  if (st != SC_OK) return st;
  int32_t idx[SC_MAX_RANK], xi[SC_MAX_RANK];
  sc_lower_outer_index(cx, idx);
  xi[0] = idx[0];
  xi[1] = idx[1];
  sc_lower_unflatten(cx, kir_var(cx->arena, cx->k, KIR_INNER), x->rank - 2, x->dims + 2,
                     xi + 2);
  sc_dtype acc = acc_dtype(y->dtype);
  int32_t v = cast_to(cx, acc, sc_lower_input_at(cx, n, 0, xi));
  if (v < 0) return failed(cx);
  bool is_max = n->op == SC_OP_GLOBAL_MAX_POOL;
  int32_t ph = kir_add_reduce(cx->arena, cx->k, is_max ? KIR_RED_MAX : KIR_RED_SUM, acc, v);
  if (ph < 0) return failed(cx);
  int32_t r = kir_reg(cx->arena, cx->k, ph);
  if (!is_max) r = bin(cx, KIR_DIV, r, fconst(cx, acc, (double)inner));
  return sc_lower_store(cx, n, 0, idx, cast_to(cx, y->dtype, r));
}
const sc_lowering sc_lw_global_pool = {SC_LOWER_KERNEL, NULL, global_pool_build};
