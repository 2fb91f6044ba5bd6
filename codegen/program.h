/* program.h — a compiled program for one device: buffers, kernels and an
 * ordered list of steps.
 *
 * The program is what codegen produces from a graph (after the canonical
 * passes and fusion) and what the runtime executes. It is backend-neutral:
 * kernels are kir (codegen/kir.h), emitted to LLVM IR for the CPU or CUDA C
 * for NVRTC; matrix products are library-call steps (BLAS / cuBLASLt).
 *
 * Buffers:
 *   INPUT   fed by the caller (graph input), copied into its arena slot
 *   OUTPUT  a graph output; lives in the arena, copied out after the run
 *   CONST   weights / folded constants: data borrowed from the graph
 *   TEMP    intermediate; lives in the arena at `offset` (memory plan)
 *   VIEW    the same storage as buffer `alias_of` at element offset 0 with
 *           another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity):
 *           no copy, no kernel
 * INPUT and OUTPUT also get arena slots, so the runtime allocates exactly
 * `arena_bytes` per run (planned == allocated is a test). The memory plan
 * (passes/memplan.c) fills `offset` from buffer lifetimes over the step list
 * and verifies that no two live buffers overlap.
 *
 * Steps run in order; each reads and writes buffers only. COMM steps
 * (collectives, send and recv, from the internal ops of ir/op_comm.h) are
 * run by the session through a communicator for the step's mesh-axis group
 * (runtime/runtime.h); `mesh` is the graph's mesh they refer to. A COMM
 * step marked async only starts the transfer: the session's communication
 * thread runs it while later steps compute, and a WAIT step further on
 * completes it (codegen/overlap.c places both; docs/codegen.md). Between
 * the two, no step touches the collective's output or scratch buffers or
 * writes its input, and the memory plan keeps all of them live: a WAIT
 * touches the same buffers as the step it completes. */
#ifndef SC_CODEGEN_PROGRAM_H
#define SC_CODEGEN_PROGRAM_H

#include "codegen/kir.h"
#include "ir/mesh.h"

typedef enum sc_buf_kind {
  SC_BUF_INPUT, SC_BUF_OUTPUT, SC_BUF_CONST, SC_BUF_TEMP, SC_BUF_VIEW,
  SC_BUF_HOST   /* a slot in the host pool (offset into it), written and
                   read only by COPY steps: an offloaded activation
                   parked between its forward and its backward
                   (codegen/offload.c) */
} sc_buf_kind;

typedef struct sc_buffer {
  const char *name;     /* graph value name */
  sc_buf_kind kind;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  int64_t bytes;
  int64_t offset;       /* arena offset (INPUT, OUTPUT, TEMP); -1 before memplan */
  const void *data;     /* CONST: the constant's bytes (borrowed) */
  int32_t alias_of;     /* VIEW: the buffer whose storage this is; else -1 */
  int32_t value;        /* graph value id it came from, or -1 */
} sc_buffer;

/* A GEMM that is a 2-D convolution, group 1, f32 (set by the Conv lowering,
 * codegen/lower_linalg.c): B is the im2col of the input x [N, C, H, W],
 * written by the kernels prep[] (the padded copy, when the conv pads, and
 * the im2col kernel), A the weights [M, C*KH*KW], C the output [N, M, OH,
 * OW], batch N. A device that convolves x directly (the CPU device, through
 * oneDNN: docs/runtime.md#convolutions) skips the prep kernels' steps; any
 * other runs them and the GEMM as written. Zeroed (on false): an ordinary
 * GEMM. */
typedef struct sc_conv_geom {
  bool on;
  int32_t x;                /* the input buffer */
  int32_t prep[2];          /* kernel ids, -1 where none */
  int32_t bias;             /* the per-channel bias buffer [m], or -1 */
  int32_t bias_kernel;      /* the kernel that fills C with it first, or -1:
                               a device that adds the bias itself skips it
                               and takes beta as 0 */
  int64_t c, h, w;          /* input channels, height, width */
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;   /* padding: top, left, bottom, right */
  int64_t oh, ow;
} sc_conv_geom;

/* An activation a GEMM's epilogue kernel computes (sc_gemm.act). */
typedef enum sc_gemm_act {
  SC_GEMM_ACT_NONE,
  SC_GEMM_ACT_RELU,      /* max(x, 0) */
  SC_GEMM_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  SC_GEMM_ACT_DGELU_TANH, /* x · gelu_tanh'(act_in): a backward pass's dY · GELU'(input) */
  SC_GEMM_ACT_COUNT
} sc_gemm_act;

/* "none", "relu", "gelu_tanh", "dgelu_tanh" */
const char *sc_gemm_act_name(sc_gemm_act a);

/* A bias gradient a GEMM's epilogue kernel computes (sc_gemm.bgrad): the
 * sums over k of one operand. */
typedef enum sc_gemm_bgrad {
  SC_GEMM_BGRAD_NONE,
  SC_GEMM_BGRAD_A, /* bgrad_out[i] = Σ_k op(A)[i, k], m values */
  SC_GEMM_BGRAD_B, /* bgrad_out[j] = Σ_k op(B)[k, j], n values */
  SC_GEMM_BGRAD_COUNT
} sc_gemm_bgrad;

/* C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], row-major, batched with
 * element strides between batches (0 = broadcast the same matrix). */
typedef struct sc_gemm {
  int32_t a, b, c;            /* buffer ids */
  bool trans_a, trans_b;
  int64_t batch, m, n, k;
  int64_t lda, ldb, ldc;      /* leading dimensions (elements) */
  int64_t stride_a, stride_b, stride_c; /* between batches (elements) */
  float alpha, beta;
  int32_t bias;               /* buffer added to C before the epilogue, or -1:
                                 broadcast over rows (shape [n]) or full [m,n] */
  bool bias_full;             /* bias has shape [batch?,m,n], else [n] */
  sc_conv_geom conv;          /* the convolution this GEMM computes, if on */
  /* When act is not NONE (set by sc_program_from_graph, codegen/
   * from_graph.c), the step's epilogue kernel computes exactly act_out =
   * act(C), element by element (act_out has C's layout: ldc, stride_c),
   * and nothing else reads C: a device may apply act in the product
   * instead (cuBLASLt's RELU and GELU epilogues), writing act_out and not
   * C, and skip the kernel, when act_out is C's storage or apart from A, B
   * and the bias (the memory plan may give it an operand's storage: they
   * die before the epilogue). Any other device runs the kernel.
   * act_aux says C is read after the step too (a graph output, or, in a
   * training step, the backward pass's read of the pre-activation): a
   * device applying act in the product must then write C as well, with
   * act_out apart from C and the operands (cuBLASLt's GELU_AUX epilogue
   * writes C as its aux output; no epilogue gives back ReLU's input).
   * DGELU_TANH reads a second buffer, act_in (of C's dtype and layout,
   * C contiguous): act_out = C · gelu_tanh'(act_in) (cuBLASLt's DGELU
   * epilogue, act_in its aux input; act_out apart from act_in). */
  sc_gemm_act act;
  int32_t act_out;            /* that buffer (meaningful with act only) */
  bool act_aux;
  int32_t act_in;             /* DGELU_TANH's second input, else -1 */
  /* When bgrad is not NONE (set by sc_program_from_graph: a training
   * step's bias gradient, the ReduceSum of the output gradient dY that is
   * one operand of the weight gradient's product, dW = Xᵀ·dY), kernel
   * bgrad_kernel computes exactly that sum of the operand, read as
   * stored, into bgrad_out (of C's dtype), and nothing else (act is NONE,
   * batch 1). It is the step's second kernel, beside its own epilogue
   * kernel (the step's kernel, if any: a bf16 step's cast of dW), and
   * runs after the product, before that kernel: a device may compute the
   * sum in the product instead (cuBLASLt's BGRADA epilogue for our B,
   * BGRADB for our A: cuBLAS's A is our B) and skip bgrad_kernel alone.
   * The memory plan keeps bgrad_out apart from the product's operands and
   * C (it is written during the product). */
  sc_gemm_bgrad bgrad;
  int32_t bgrad_out;          /* that buffer (meaningful with bgrad only) */
  int32_t bgrad_kernel;       /* that kernel (meaningful with bgrad only) */
  /* When fp8 is set, A and B are f32 widenings of FP8 values (an FP8
   * training step's quantized operands: passes/fp8.c) that are also held
   * in buffers a8 and b8 (f8e4m3fn or f8e5m2, A's and B's layout): a
   * device with FP8 products (the CUDA device's cuBLASLt FP8 matmul) may
   * read those instead; the product is the same (the widening is exact).
   * a8_tn (b8_tn) says a8 (b8) is instead a transposed FP8 copy, laid out
   * for cuBLASLt's "TN" FP8 matmul: op(A) as [m, k] row-major, ld k (op(B)ᵀ
   * as [n, k], ld k), with A's (B's) batch stride, written by a transpose
   * kernel of the program before the step (codegen/lower_linalg.c). */
  bool fp8;
  bool a8_tn, b8_tn;
  int32_t a8, b8;             /* those buffers (meaningful with fp8 only) */
  /* When scaled is set (with fp8 only), the product is multiplied by the
   * dequantisation factors held in a8_scale and b8_scale (f32 buffers of
   * one element: 1/s_a and 1/s_b, the inverses of the scales that made
   * A's and B's FP8 values): C = (op(A) op(B)) · (*a8_scale · *b8_scale),
   * the factor rounded once to f32 and multiplied into the finished f32
   * sum once, as cuBLASLt applies its A_SCALE_POINTER and B_SCALE_POINTER
   * (docs/cuda-backend.md). Every device applies them (alpha is 1, beta 0
   * and there is no bias); the epilogue kernel no longer descales. */
  bool scaled;
  int32_t a8_scale, b8_scale; /* those buffers (meaningful with scaled only) */
} sc_gemm;

typedef enum sc_comm_kind {
  SC_COMM_ALL_REDUCE, SC_COMM_ALL_GATHER, SC_COMM_REDUCE_SCATTER, SC_COMM_ALL_TO_ALL,
  SC_COMM_SEND, SC_COMM_RECV, SC_COMM_SEND_RECV, SC_COMM_KIND_COUNT
} sc_comm_kind;

/* A collective or point-to-point transfer over the group of mesh axes
 * `axes`. The communicator exchanges `count` elements per rank-chunk in its
 * leading-dim layouts (runtime/comm.h). Gathering or scattering along a
 * non-leading dim needs a layout change, done by the runtime with strided
 * copies through scratch buffers of the memory plan:
 *   pack    (ReduceScatter, AllToAll) when pack >= 0: the input viewed as
 *           [pack_outer, n, pack_inner] is copied to `pack` as
 *           [n, pack_outer, pack_inner], which the communicator then sends;
 *   unpack  (AllGather, AllToAll) when unpack >= 0: the communicator
 *           receives [n, unpack_outer, unpack_inner] into `unpack`, copied
 *           to the output as [unpack_outer, n, unpack_inner].
 * Without them (outer extent 1) the communicator reads the input and writes
 * the output directly. A step whose scratch would exceed
 * SC_COMM_SCRATCH_CAP_BYTES goes in chunks of rows of its outer extent
 * (rows > 0; sc_comm_step_outer): an AllGather's call k gathers rows
 * [k * rows, ...) of the input, [rows, unpack_inner] and contiguous, into
 * `unpack` as [n, rows, unpack_inner] (its size), copied to the same rows
 * of the output; a ReduceScatter's call k packs rows [k * rows, ...) of the
 * input, [rows, n, pack_inner], into `pack` as [n, rows, pack_inner] (its
 * size) and reduces it into the same rows of the output, [rows,
 * pack_inner] and contiguous. The scratch is bounded, and each call is a
 * plain contiguous collective that every communicator (NCCL's included)
 * runs. */
#define SC_COMM_SCRATCH_CAP_BYTES ((int64_t)16 << 20)
typedef struct sc_comm_step {
  sc_comm_kind kind;
  int32_t reduce;         /* SC_COMM_OP_* of ir/op_comm.h (sum, max, min) */
  int32_t in, out;        /* buffer ids; SEND: out -1; RECV: in -1;
                             SEND_RECV: in sent, out received */
  int32_t pack, unpack;   /* scratch buffer ids, or -1 */
  int64_t count;          /* elements per rank-chunk (comm.h's count) */
  int64_t pack_outer, pack_inner;     /* elements */
  int64_t unpack_outer, unpack_inner; /* elements */
  int64_t rows;           /* AllGather, ReduceScatter: rows of the outer
                             extent a call, or 0: all in one
                             (sc_comm_step_calls) */
  uint32_t axes;          /* sc_axes of `mesh`: the group (0: one rank) */
  int64_t group_size;
  int32_t peer, tag;      /* SEND, RECV: peer's key in the group, tag */
  int32_t shift;          /* SEND, RECV: 0, or the peer relative to the
                             rank's key k (peer is then -1): SEND to
                             (k + shift) mod n, RECV from (k - shift) mod n
                             (ir/op_comm.h). SEND_RECV (never 0): a shifted
                             SEND and its RECV as one exchange, both at
                             once (sc_program_pair_shifts) */
  bool async;             /* started here, completed at the WAIT step that
                             names this step (codegen/overlap.c); else the
                             step completes before the next one runs */
} sc_comm_step;

/* The outer extent whose rows a chunked COMM step divides, and the
 * elements of a row a rank: a ReduceScatter's pack_outer and pack_inner,
 * any other step's unpack_outer and unpack_inner. */
static inline int64_t sc_comm_step_outer(const sc_comm_step *c) {
  return c->kind == SC_COMM_REDUCE_SCATTER ? c->pack_outer : c->unpack_outer;
}
static inline int64_t sc_comm_step_inner(const sc_comm_step *c) {
  return c->kind == SC_COMM_REDUCE_SCATTER ? c->pack_inner : c->unpack_inner;
}

/* The communicator calls of COMM step c: ceil(outer / rows) for an
 * AllGather or a ReduceScatter in row chunks, else 1. */
static inline int64_t sc_comm_step_calls(const sc_comm_step *c) {
  int64_t outer = sc_comm_step_outer(c);
  int32_t scratch = c->kind == SC_COMM_REDUCE_SCATTER ? c->pack : c->unpack;
  if (scratch < 0 || c->rows <= 0 || c->rows >= outer) return 1;
  return (outer + c->rows - 1) / c->rows;
}

/* Call k of COMM step c as a step of its own, unchunked: its rows as the
 * outer extent, their elements a rank as count, and through *in_at and
 * *out_at the element where its rows begin in the input and in the output
 * (AllGather: row0 * inner and row0 * n * inner; ReduceScatter: row0 * n *
 * inner and row0 * inner). The call reads its pack (else the input from
 * *in_at) and writes its unpack (else the output from *out_at); the pack
 * copy reads, and the unpack copy writes, from there. For one call, c
 * itself and 0, 0. */
static inline sc_comm_step sc_comm_step_chunk(const sc_comm_step *c, int64_t k, int64_t *in_at,
                                              int64_t *out_at) {
  sc_comm_step s = *c;
  *in_at = *out_at = 0;
  if (sc_comm_step_calls(c) == 1) return s;
  int64_t outer = sc_comm_step_outer(c), inner = sc_comm_step_inner(c);
  int64_t row0 = k * c->rows, rows = outer - row0 < c->rows ? outer - row0 : c->rows;
  bool scatter = c->kind == SC_COMM_REDUCE_SCATTER;
  *in_at = row0 * inner * (scatter ? c->group_size : 1);
  *out_at = row0 * inner * (scatter ? 1 : c->group_size);
  if (scatter) s.pack_outer = rows;
  else s.unpack_outer = rows;
  s.rows = 0;
  s.count = rows * inner;
  return s;
}

/* Checks the integer buffer `buffer` holds data indices into an extent of
 * `dim`: every element in [-dim, dim) (negative ones count from the end, as
 * ONNX says). Kernels cannot report errors, so a Gather whose indices are
 * read at run time gets this step before its kernel; a failing check ends
 * the run with an error naming the step's origin (the Gather node). */
typedef struct sc_check_step {
  int32_t buffer;
  int64_t dim;
} sc_check_step;

/* out = data, then out[wrap(indices[t]), :] += updates[t, :] for every
 * t in order: ScatterND with reduction "add" over rows (indices [T..., 1]),
 * what an embedding's gradient is. data and out are [rows, row...] (f32 or
 * f64, the same dtype; data may be out's own storage), updates [T...,
 * row...] of that dtype, indices [T..., 1] i32 or i64 (n = T... elements).
 * An index outside [-rows, rows) ends the run with an error naming the
 * step's origin. Runs in O(rows·row + n·row): a KERNEL would visit every
 * (output element, index) pair. */
typedef struct sc_scatter_step {
  int32_t data, indices, updates, out; /* buffer ids */
  int64_t rows, row, n;
} sc_scatter_step;

/* The row additions of a SCATTER_ADD step over host memory already
 * holding data in out: dt its float dtype, it the indices' (i32 or i64).
 * Returns the first tuple whose index is out of range (adding nothing from
 * there on), or -1. Shared by the runtime and the tests' executor. */
int64_t sc_scatter_add_rows(const sc_scatter_step *c, sc_dtype dt, sc_dtype it, void *out,
                            const void *indices, const void *upd);

typedef enum sc_step_kind {
  SC_STEP_KERNEL, /* run kernels[kernel] */
  SC_STEP_GEMM,   /* library matrix product, then optional epilogue kernel */
  SC_STEP_COMM,   /* collective / send / recv, run by the session */
  SC_STEP_CHECK,  /* index range check, run by the session */
  SC_STEP_SCATTER_ADD, /* rows added at indices, run by the session (host) */
  SC_STEP_WAIT,   /* the async COMM step `started` has completed: its out
                     may be read, its in written again */
  SC_STEP_ATTENTION,      /* fused attention forward (sc_attention_step) */
  SC_STEP_ATTENTION_GRAD, /* its gradient (sc_attention_step) */
  SC_STEP_COPY,   /* copy between the device arena and the host pool
                     (sc_copy_step), on the copy queue */
  SC_STEP_KIND_COUNT
} sc_step_kind;

/* An async COMM step smaller than this (the larger of its input and
 * output buffers) runs on the calling thread, as a synchronous one, when
 * its communication queue has nothing in flight, on a device whose
 * session runs async collectives on threads of its own (the CPU's,
 * runtime/session.c): handing it to the thread costs more than it takes.
 * The cost model simulates the same (codegen/dist_sim.c). */
enum { SC_ASYNC_INLINE_BYTES = 64 * 1024 };

/* A KERNEL step that completes a 2-D max-pool, f32, without Indices (set
 * by the MaxPool lowering, codegen/lower_linalg.c): y [n, c, oh, ow] holds
 * the maximum of each window of x [n, c, h, w], every window starting
 * inside x (pads below the kernel, no dilation). The pool's kernels are
 * this step's and the earlier ones prep[] names (the interior columns:
 * this step's kernel does the edges), -1 where none; each reads only x
 * and writes only y. A device that pools x directly (the CPU device,
 * through oneDNN: docs/runtime.md#max-pools) skips prep[]'s steps and runs
 * this one as one pooling; any other runs the kernels as written. Zeroed
 * (on false): an ordinary kernel step. */
typedef struct sc_pool_geom {
  bool on;
  int32_t x, y;            /* buffers */
  int32_t prep[2];         /* kernel ids, -1 where none */
  int64_t n, c, h, w;      /* x's sizes */
  int64_t kh, kw, sh, sw;
  int64_t pt, pl, pb, pr;  /* padding: top, left, bottom, right (a ceil_mode
                              window's overhang counts as padding) */
  int64_t oh, ow;
} sc_pool_geom;

/* Fused attention, FlashAttention's algorithm (online softmax over key
 * blocks, no score matrix in memory), over contiguous row-major tensors:
 *   q [batch, heads, sq, d]     k [batch, kv_heads, skv, d]
 *   v [batch, kv_heads, skv, dv]  o [batch, heads, sq, dv]
 *   lse [batch, heads, sq] f32: natural-log log-sum-exp of each query row's
 *       scaled, masked scores (what the backward recomputes P from);
 *       -INFINITY for a row with no visible key (its o row is 0).
 *   mask: -1, or an additive float buffer (the scores' dtype or f32) whose
 *       element for (b, h, i, j) is at b*mask_stride_b + h*mask_stride_h +
 *       i*skv + j (stride 0: broadcast over that axis).
 * s = scale * q·k + mask; causal: key j is visible to query i iff
 * j <= i + (skv - sq) (bottom-right aligned, as FlashAttention 2.1+).
 * heads % kv_heads == 0: head h reads kv head h / (heads / kv_heads).
 * q, k, v, o, d_o, dq, dk, dv share one dtype (f32, bf16 or f16);
 * accumulation in f32.
 * ATTENTION reads q, k, v (mask), writes o and lse.
 * ATTENTION_GRAD reads q, k, v (mask), o, lse, d_o; writes dq, dk, dv
 * (dk, dv summed over the query heads that share a kv head). */
typedef struct sc_attention_step {
  int32_t q, k, v, mask, o, lse;  /* buffer ids; mask -1 when none */
  int32_t d_o, dq, dk, dv;        /* ATTENTION_GRAD; -1 in ATTENTION */
  int64_t batch, heads, kv_heads, sq, skv, d, dv_dim;
  int64_t mask_stride_b, mask_stride_h;
  float scale;
  bool causal;
} sc_attention_step;

/* A copy of a whole buffer between the device arena and the host pool
 * (activation offloading, codegen/offload.c): src and dst have the same
 * byte size, one of them a HOST buffer and the other an arena TEMP root.
 * Always async: the session starts it on its copy queue, and a WAIT step
 * further on (started = this step) completes it; between the two no step
 * touches dst or writes src. */
typedef struct sc_copy_step {
  int32_t src, dst;       /* buffer ids */
} sc_copy_step;

typedef struct sc_step {
  sc_step_kind kind;
  int32_t kernel;     /* KERNEL: kernel id; GEMM: epilogue kernel id or -1;
                         any other kind: -1 */
  sc_gemm gemm;       /* GEMM */
  sc_pool_geom pool;  /* KERNEL: the max-pool it completes, if on */
  sc_comm_step comm;  /* COMM */
  sc_check_step check; /* CHECK */
  sc_scatter_step scatter; /* SCATTER_ADD */
  sc_attention_step attn;  /* ATTENTION, ATTENTION_GRAD */
  sc_copy_step copy;       /* COPY */
  int32_t started;    /* WAIT: the index of the async COMM or COPY step it completes
                         (an earlier step; each is waited for exactly once) */
  const char *origin; /* graph node name(s), for --print and errors */
} sc_step;

/* The GEMM library's workspace on a GPU (cuBLASLt, Hopper's recommended
 * size): what a program compiled for the CUDA device reserves in its arena
 * (sc_program.workspace_bytes, sc_compile_opts.workspace_bytes). */
#define SC_GEMM_WORKSPACE_BYTES ((int64_t)32 << 20)

typedef struct sc_program {
  sc_arena arena;               /* owns everything below */
  int32_t n_buffers, cap_buffers;
  sc_buffer *buffers;
  int32_t n_kernels, cap_kernels;
  kir_kernel **kernels;
  int32_t n_steps, cap_steps;
  sc_step *steps;
  int32_t n_inputs, n_outputs;
  int32_t *inputs, *outputs;    /* buffer ids, in graph order */
  int64_t arena_bytes;          /* peak from the memory plan */
  int64_t host_bytes;           /* the host pool's size from the memory plan
                                   (HOST buffers; 0: none), a second arena
                                   allocated apart from the device's */
  int64_t arena_align;          /* alignment of every arena offset (64) */
  /* Device scratch the memory plan reserves at the top of the arena, for a
   * device's library calls (cuBLASLt's workspace: SC_GEMM_WORKSPACE_BYTES
   * when compiled for CUDA with a GEMM step, sc_compile_opts):
   * [workspace_offset, workspace_offset + workspace_bytes), above every
   * buffer, inside arena_bytes; 0 bytes: none. */
  int64_t workspace_bytes, workspace_offset;
  sc_mesh mesh;                 /* the graph's mesh when it has COMM steps,
                                   else the one-rank mesh (n_axes 0) */
  /* In-place state (training): updates[j] is the input index whose arena
   * slot output j shares, or -1; NULL when no output does. A pair is an
   * input X and an output "new:X" of X's dtype and shape (a parameter, its
   * optimizer state or a gradient accumulator and their updated values):
   * the step reads X and writes its new value over it, so the state lives
   * in the arena between runs and is never copied in or out. Set by
   * sc_program_pair_state; the memory plan keeps a pair only when every
   * read of X comes before the write of the new value (or at that same
   * kernel, element for element) and sets the others back to -1. */
  int32_t *updates;
  /* Inputs bound outside the arena (pipelined training's state on a device
   * whose arena is host memory: runtime/pipe_rank.c): bound[i] true makes
   * input i's storage, and that of the output paired with it (updates),
   * the caller's (sc_session_opts.bound), not an arena slot: the memory
   * plan places neither (offset -1) and a run copies nothing in. Distinct
   * bound inputs must be given storage that does not overlap; no step
   * writes an input, so the caller's values change only through a kept
   * pair. NULL when none is. Set by sc_program_bind_inputs. */
  bool *bound;
} sc_program;

sc_program *sc_program_create(void);
void sc_program_destroy(sc_program *p);
int32_t sc_program_add_buffer(sc_program *p, const sc_buffer *b);
int32_t sc_program_add_kernel(sc_program *p, kir_kernel *k);
int32_t sc_program_add_step(sc_program *p, const sc_step *s);
/* Storage root of a buffer (follows VIEW aliases). */
int32_t sc_program_root(const sc_program *p, int32_t buffer);
/* Whether buffers a and b share storage in the memory plan: the same root
 * (views start at their root), or two arena roots at the same offset. */
bool sc_program_same_address(const sc_program *p, int32_t a, int32_t b);
/* Whether buffers a and b can never share a byte in the memory plan:
 * different roots that are two arena buffers whose byte ranges do not
 * meet, or an arena buffer and a constant (constants live outside the
 * arena). False before the plan places them (offset -1). */
bool sc_program_disjoint(const sc_program *p, int32_t a, int32_t b);
/* Whether kernel k, run on any range of its points as soon as the same
 * range of buffer c's elements is computed, computes what it computes run
 * after all of c: one point per element of c (inner 1), every store and
 * every read of c (or of a buffer at c's address, of c's dtype) at the
 * point's own element, and every param either at c's address or apart from
 * c. (Whether what k writes is apart from the other inputs of whatever
 * computes c is the caller's to check.) */
bool sc_program_pointwise_after(const sc_program *p, int32_t k, int32_t c);
void sc_program_print(const sc_program *p, FILE *out);
/* Appends a buffer id to p->inputs / p->outputs (graph order).
 * SC_ERR_USAGE for an id out of range, SC_ERR_NOMEM. */
sc_status sc_program_add_input(sc_program *p, int32_t buffer);
sc_status sc_program_add_output(sc_program *p, int32_t buffer);
/* Pairs every output "new:X" with the input X of the same dtype and shape
 * (p->updates; a non-VIEW output buffer that is not itself an input), and
 * orders the phases of every multi-output elementwise kernel so that no
 * phase after the store of "new:X" loads X, where such an order exists (so
 * the memory plan can keep the pair). SC_ERR_NOMEM. */
sc_status sc_program_pair_state(sc_program *p);
/* Marks bound (p->bound) every input whose name is one of names[0..n).
 * SC_ERR_NOMEM. */
sc_status sc_program_bind_inputs(sc_program *p, const char *const *names, int32_t n);
/* Whether buffer b's storage root is a bound input or the output paired
 * with one (p->bound, p->updates): storage outside the arena. */
bool sc_program_bound(const sc_program *p, int32_t b);
/* The input index whose slot output j shares, or -1. */
static inline int32_t sc_program_updates(const sc_program *p, int32_t j) {
  return p->updates && j >= 0 && j < p->n_outputs ? p->updates[j] : -1;
}

/* The buffers step s reads and writes, each reported through fn (buffer ids
 * as the step names them, not their roots; a buffer may be reported more
 * than once). KERNEL steps: the kernel's params (written flag). GEMM steps:
 * a, b and bias read, c read too when beta != 0, c written, then the
 * bias gradient's kernel's params (sc_gemm.bgrad_kernel), then the
 * epilogue kernel's params. COMM steps: in read, pack written and read, out
 * written, unpack written and read. CHECK steps: the buffer read. SCATTER_ADD: data, indices
 * and updates read, out written. ATTENTION: q, k, v, mask read, o and lse
 * written. ATTENTION_GRAD: q, k, v, mask, o, lse, d_o read, dq, dk, dv
 * written. COPY: src read, dst written. WAIT steps: those of the COMM or COPY step they
 * complete (so an async collective's buffers live from its start to its
 * wait). Shared by the memory plan and the runtime. */
typedef void (*sc_step_buffer_fn)(void *ud, int32_t buffer, bool written);
void sc_step_buffers(const sc_program *p, const sc_step *s, sc_step_buffer_fn fn, void *ud);

/* The steps of a training program (passes/train.h) that only its update
 * needs: walking the steps backwards from the roots, each step that writes
 * no buffer a root needs (buffers followed through their views). The
 * roots are every output but the updated state ("new:X", X not an
 * accumulator "accum:P"), "train:grad_norm" and "train:applied"; and
 *   last_run false (the optimizer's share of a step, codegen/dist_sim.c):
 *     also every gradient (a buffer named "grad:P");
 *   last_run true (what a run of gradient accumulation before the step's
 *     last skips, sc_session_set_partial): every step that writes nothing
 *     (an index check) or sends or receives, kept (FP8 scaling state is
 *     updated state: a run records its amax in an accumulator). A WAIT step is marked as the step it completes.
 * only[k] (n_steps, zeroed by the caller) is set for those steps; returns
 * how many (0 when the program updates no state), -1 out of memory. */
int32_t sc_program_update_steps(const sc_program *p, bool last_run, bool *only);

/* A COMM step as the reports count it (what each rank sends and
 * receives): a SEND_RECV is a SEND of its in (half[0]) and a RECV into its
 * out (half[1]); any other step is itself (half[0]). Returns how many. */
int32_t sc_comm_halves(const sc_comm_step *c, sc_comm_step half[2]);

/* Why attention step s cannot run as described over p's buffers (ids out
 * of range, dtypes that differ or are not f32/bf16/f16, lse not f32,
 * a buffer smaller than its extents, a mask row that overruns the mask,
 * heads not a multiple of kv_heads, a write to a CONST or INPUT buffer),
 * or NULL when it can. Checked by program_json's reader (a bundle is
 * untrusted) and by every device's prepare. */
const char *sc_attention_problem(const sc_program *p, const sc_step *s);
/* Why GEMM g with FP8 operands (sc_gemm.fp8: A of type ta, B of type tb,
 * C of type tc) cannot be one FP8 matmul as cuBLASLt takes them on
 * sm_89/sm_90, from its layout alone, or NULL when it can: "TN" (k
 * contiguous in both operands: trans_b and not trans_a), k and the leading
 * dims of A, B and C (and the batch strides) multiples of 16, no bias, beta 0, no activation
 * in the product, not both E5M2, an f32 or bf16 product. A static string.
 * The CUDA device adds its own conditions (runtime/cuda_gemm.h). */
const char *sc_gemm_fp8_refusal(const sc_gemm *g, sc_dtype tc, sc_dtype ta, sc_dtype tb);
/* g with its FP8 operands' layout (sc_gemm.fp8): a8_tn and b8_tn's copies
 * as [m, k] and [n, k] (trans_a off, trans_b on, ld k); else g's. What the
 * FP8 matmul multiplies and sc_gemm_fp8_refusal is asked about. */
sc_gemm sc_gemm_fp8_layout(const sc_gemm *g);
/* Over p's GEMM steps with FP8 operands: *n_fp8 of them, *n_ok that
 * sc_gemm_fp8_refusal accepts, and the refusals, up to max distinct ones
 * (why[i], counted in n_why[i]; *n_reasons of them). */
void sc_program_fp8_gemms(const sc_program *p, int32_t *n_fp8, int32_t *n_ok, const char **why,
                          int32_t *n_why, int32_t max, int32_t *n_reasons);

/* Lowers a graph that went through the canonical passes (static shapes,
 * folded) into a program: one kernel per node (before fusion) or per fused
 * group, GEMM steps for MatMul/Gemm/Conv. Errors name the node. */
sc_status sc_program_from_graph(sc_graph *g, sc_program **out, sc_diag *diag);

/* codegen/multi_tensor.c: every run of consecutive elementwise kernel
 * steps that compute the same thing over different tensors (an optimizer's
 * per-parameter updates), element for element, and touch each other's
 * storage only to read it, becomes one multi-tensor kernel step (kir.h,
 * n_segs): the same results, bit for bit, in one launch. A run's table
 * holds at most SC_MULTI_TENSOR_ARG_BYTES of kernel arguments (8 bytes a
 * param, and begin and end): CUDA's kernel parameter space, 4 KiB (apex's
 * multi_tensor_apply keeps its table under the same limit); a longer run
 * becomes several. A long reduction of one point is split first
 * (SC_MULTI_TENSOR_SPLIT_MIN): a kernel step and a scratch buffer join the
 * program. Kernels leave the program and kernel ids are renumbered: run
 * it before overlap and the memory plan. SC_ERR_NOMEM. */
#define SC_MULTI_TENSOR_ARG_BYTES 4096
/* A reduction of one point over at least this many elements (the
 * gradient norm's sum of a large tensor) is first split into a kernel
 * of many points, each reducing a chunk into a scratch buffer, and one
 * reducing their results (multi_tensor.c, split_step): many GPU blocks
 * (CPU threads) where one reduced it alone. */
#define SC_MULTI_TENSOR_SPLIT_MIN ((int64_t)1 << 20)
sc_status sc_program_multi_tensor(sc_program *p, sc_diag *diag);

/* codegen/overlap.c: each shifted SEND and the RECV it is paired with on
 * the same group (the k-th SEND and the k-th RECV of one axes, shift and
 * tag, in step order: one hop of a ring, passes/partition/ring.c) become
 * one SEND_RECV step, which the runtime runs as sc_comm_send_recv (on
 * NCCL one ncclGroupStart/End: a ring of ungrouped sends and receives
 * deadlocks). It takes the earlier step's place when that is legal (no
 * step between writes what the send reads, or touches what the receive
 * writes); a pair that cannot move together stays two steps. Run right
 * after lowering, before sc_program_overlap (which may then start the
 * pair asynchronously) and the memory plan. *n_pairs (may be NULL): how
 * many. SC_ERR_NOMEM, SC_ERR_INVALID (a step names a buffer that does not
 * exist). */
sc_status sc_program_pair_shifts(sc_program *p, int32_t *n_pairs, sc_diag *diag);

/* codegen/overlap.c: collectives overlapped with compute. Every all-reduce,
 * all-gather, reduce-scatter, all-to-all and ring exchange (SEND_RECV)
 * whose result is not needed by
 * the very next step becomes an async start plus a WAIT placed just before
 * the first step that touches its output (or writes its input); a gather of
 * state (its input, or the copy-in kernel that packs it, reads only values
 * no step writes before) is started one gather early: right after the wait
 * of the previous such gather, FSDP's prefetch of the next block. A
 * computation step right after a collective that reads its result moves
 * down past the computation that does not depend on it (at most past one
 * more collective), so that the collective becomes async (a gradient's
 * all-reduce overlapping the rest of the backward). At most two
 * collectives are in flight: starting a third waits for the oldest (a
 * ring's SEND_RECVs do not count; their own dependencies keep at most
 * four of a ring in flight). A SEND_RECV moves up to just before the first step that reads what it
 * sends (past steps that do not depend on it, up to the previous
 * collective): a ring's next hop starts before this hop's attention
 * blocks, which it then overlaps. Run before the memory plan; the order
 * of collectives stays the same on every rank that runs the same program. *n_async (may be NULL): how many
 * steps became async; *n_prefetched: how many gathers moved. SC_ERR_NOMEM,
 * SC_ERR_INVALID (a step names a buffer that does not exist). */
sc_status sc_program_overlap(sc_program *p, int32_t *n_async, int32_t *n_prefetched,
                             sc_diag *diag);

/* codegen/offload.c: activation offloading (docs/offload.md). Each buffer
 * named in names[0..n_names) whose storage is an arena TEMP is copied to a
 * HOST buffer (the host pool) right after the last step writing it before
 * its longest idle interval, and back into a new TEMP root H reload points
 * (`horizon`) before the first step reading it after that interval, which
 * then reads the copy: COPY steps on the copy queue, each completed by a
 * WAIT. Run after sc_program_overlap, before the memory plan, which frees
 * the device slot between the copy-out's WAIT and the copy-in's start.
 * r (may be NULL): how many buffers, how many bytes. SC_ERR_NOMEM,
 * SC_ERR_INVALID (a step names a buffer that does not exist). */
typedef struct sc_offload_report {
  int32_t n_buffers;  /* offloaded */
  int64_t bytes;      /* their bytes (unaligned) */
} sc_offload_report;
sc_status sc_program_offload(sc_program *p, const char *const *names, int32_t n_names,
                             int32_t horizon, sc_offload_report *r, sc_diag *diag);

#endif
