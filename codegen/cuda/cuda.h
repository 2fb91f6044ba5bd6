/* cuda.h — the CUDA backend: kernel IR → CUDA C, compiled to PTX by NVRTC.
 *
 * Every kir kernel of a program becomes one `extern "C" __global__` function
 * (named as the kernel) in a single translation unit that needs no header
 * (f16/bf16 are carried as 16-bit integers and converted by a small prelude,
 * so a GPU machine without the CUDA toolkit headers compiles it too). NVRTC
 * compiles that unit once per target architecture. This module needs no GPU;
 * the GPU runtime (a later issue) loads the PTX with cuModuleLoadData and
 * launches the kernels as described here.
 *
 * Kernel ABI:
 *   extern "C" __global__ void NAME(T0 *p0, T1 *p1, ..., long long begin,
 *                                   long long end);
 * pi points to the data of the kernel's param i (const for read-only params;
 * __restrict__ unless another param shares its storage and one of the two is
 * written). Storage types: f32 float, f64 double, f16/bf16 unsigned short
 * (IEEE half / bfloat16 bits), bool unsigned char (0/1), integers the C type
 * of their width. The kernel computes the outer points with row-major linear
 * index in [begin, end), exactly like the CPU ABI (cpu.h), so the runtime may
 * split a kernel's range across launches or streams. Every buffer pointer must
 * be 16-byte aligned (the runtime aligns buffers to 64 bytes): vectorised
 * kernels use float4 loads and stores.
 *
 * Launch configuration (sc_cuda_launch_config fills it; grid-stride loops make
 * any grid size correct, `grid` is the size that covers the range once):
 *   SC_CUDA_THREAD_PER_POINT  kernels with inner <= SC_CUDA_SERIAL_INNER_MAX:
 *       each thread computes points_per_thread consecutive outer points, the
 *       inner loop (if any) serially. points_per_thread is 4 when the kernel
 *       is vectorised (every float load/store contiguous in the last outer
 *       dim, which is a multiple of 4): then begin and end must be multiples
 *       of 4. block = 256.
 *   SC_CUDA_BLOCK_PER_POINT   kernels with a longer inner loop (reductions,
 *       row kernels): one block per outer point (grid-stride over points),
 *       block = the power of two in [32, 256] nearest above inner. A REDUCE
 *       phase is a per-thread strided fold, a warp reduction with
 *       __shfl_down_sync, a cross-warp step in shared memory and a broadcast
 *       of the result through shared memory; a STORE phase has the threads
 *       stride over the inner index. Shared memory is static (no dynamic
 *       shared bytes).
 *
 * Numerics follow kir.h exactly (the GPU test compares with kir_interpret):
 * f16/bf16 computed in f32 with round-to-nearest-even stores, integer DIV/MOD
 * guarded as the interpreter defines them, NaN-propagating float MIN/MAX,
 * saturating float→int CAST (NaN → 0), ROUND half to even. NVRTC runs without
 * -use_fast_math (accurate expf/erff/tanhf...), FMA contraction on.
 *
 * Ownership: strings returned through char ** are allocated with sc_malloc
 * and freed by the caller with sc_free. Functions are thread-safe (NVRTC is).
 * Errors: SC_ERR_USAGE for a bad architecture string, SC_ERR_UNSUPPORTED for a
 * kir construct or dtype the emitter cannot express, SC_ERR_INVALID when
 * NVRTC rejects the source (diag carries NVRTC's message and the start of its
 * log), SC_ERR_NOMEM. */
#ifndef SC_CODEGEN_CUDA_H
#define SC_CODEGEN_CUDA_H

#include <stddef.h>

#include "codegen/program.h"

enum { SC_CUDA_SERIAL_INNER_MAX = 16 };

/* Compiled with SC_CUDA_EMU defined by a host C++ compiler, the unit runs
 * on the CPU (runtime/cuda_emu.h): each kernel NAME also gets an exported
 * `extern "C" void NAME` SC_CUDA_EMU_SUFFIX `(void **args)`, args being the
 * driver's kernelParams (a pointer to each argument), and the unit exports
 * `sc_emu_bind` through which the emulator hands over its API. Without
 * SC_CUDA_EMU (NVRTC) none of this is compiled. */
#define SC_CUDA_EMU_SUFFIX "__emu"
/* ... and `extern "C" const long long NAME` SC_CUDA_EMU_INFO_SUFFIX `[]`:
 * the number of arguments (all 8 bytes: pointers, then begin and end), 1
 * when the kernel runs block per point (its threads meet at barriers), the
 * number P of pointer params (the first P arguments) whose extents follow,
 * then for each: 1 when written, and its bytes (0: unknown; -(i + 1): the
 * value of argument i, for kernels whose extents are arguments, as the
 * communicator's reductions). */
#define SC_CUDA_EMU_INFO_SUFFIX "__emu_info"

typedef enum sc_cuda_mode {
  SC_CUDA_THREAD_PER_POINT,
  SC_CUDA_BLOCK_PER_POINT
} sc_cuda_mode;

typedef struct sc_cuda_launch {
  sc_cuda_mode mode;
  int block;             /* blockDim.x */
  int points_per_thread; /* THREAD_PER_POINT: 1, or 4 when vectorised */
  int64_t points;        /* prod(outer_dims) */
  int64_t grid;          /* gridDim.x covering [0, points) once (>= 1) */
  int shared_bytes;      /* dynamic shared memory per block (0 for kir kernels;
                            the convolutions' tiles: sc_cuda_conv) */
} sc_cuda_launch;

/* How to launch kernel k (as emitted by this module). */
void sc_cuda_launch_config(const kir_kernel *k, sc_cuda_launch *out);

/* CUDA C for the given kernels, one translation unit. p (may be NULL) is
 * the program the kernels belong to: it decides which params share storage
 * (VIEW aliases); without it, params alias when their buffer ids are equal. */
sc_status sc_cuda_emit_kernels(kir_kernel *const *kernels, int32_t n_kernels,
                               const sc_program *p, char **src, sc_diag *diag);
/* The name of the kernel that runs SCATTER_ADD steps of value dtype vt
 * (f32, f64) and index dtype it (i32, i64): "sc_scatter_add_f32_i64", with
 * params (out, idx, upd, rows, row, n); launched with one thread per column
 * of a row (thread per point, 256 per block). sc_cuda_emit_source adds one
 * per pair the program's SCATTER_ADD steps use. */
void sc_cuda_scatter_kernel_name(sc_dtype vt, sc_dtype it, char *buf, size_t n);
/* Implicit-GEMM convolutions (cuda_emit.c): a GEMM step that carries a
 * 2-D convolution (sc_gemm.conv) with an im2col kernel (prep[1]: not the
 * 1x1 convolution whose B is its input) gets a kernel of its own,
 *   extern "C" __global__ void NAME(const float *x, const float *w,
 *                                   const float *bias, float *y);
 * y[n, m, p] = bias[m] (bias may be NULL: 0) + sum over k of w[m, k] times
 * the im2col of x at (k, n·P + p), the columns computed from x as the
 * tiles are loaded (none written to memory): a device that runs it skips
 * the step's prep kernels and its bias kernel, and runs the epilogue kernel
 * after it. Tiles of bm x bn outputs over (M, N·P), bk deep, double
 * buffered in dynamic shared memory (shared_bytes: above 48 KB for the
 * large tile, which needs cuFuncSetAttribute), grid-stride over the tiles,
 * `block` threads each computing a register tile; geometry as compile-time
 * constants. The large tile (128 x 128 x 32, 64 KiB) where the output has
 * at least 128 channels and two waves of 132 blocks, else 64 x 64 x 16
 * (16 KiB). */
typedef struct sc_cuda_conv {
  char name[32];        /* "sc_conv<step>" */
  int block;            /* threads per block (256) */
  int shared_bytes;     /* dynamic shared memory per block */
  int64_t grid;         /* blocks: one per tile */
  int bm, bn, bk;
  int64_t x_bytes, w_bytes, bias_bytes, y_bytes; /* what it reads and writes */
} sc_cuda_conv;
/* Whether GEMM step `step` of p is such a convolution (f32 buffers, the
 * product as lower_linalg.c writes it, its buffers large enough, beta 0 or
 * the bias kernel's 1), and its kernel's launch in *out. */
bool sc_cuda_conv_config(const sc_program *p, int32_t step, sc_cuda_conv *out);

/* The element-wise reductions of the cuda-local communicator
 * (runtime/comm_cuda_local.c), one translation unit with the prelude:
 *   extern "C" __global__ void sc_comm_reduce_<t>_<op>(T *dst,
 *       const T *s0, ..., const T *s<SC_CUDA_REDUCE_SRCS - 1>,
 *       long long n, long long n_src, long long bytes)
 * for t in f32, f64, f16, bf16, i32, i64 and op in sum, max, min:
 * dst[i] = s0[i] op s1[i] op ... op s<n_src-1>[i] in that order (f16 and
 * bf16 in f32, rounded once; floats' max and min propagate NaN; integer
 * sums wrap), exactly as sc_comm_reduce_arrays (runtime/comm.h); bytes is
 * n times the element size (the extent of every pointer, for the fake
 * driver's race check). Thread per element, grid-stride, 256 per block. */
enum { SC_CUDA_REDUCE_SRCS = 16, SC_CUDA_REDUCE_BLOCK = 256 };
sc_status sc_cuda_emit_reduce_source(char **src, sc_diag *diag);
/* "sc_comm_reduce_f32_sum"; false for a dtype the unit has no kernel for. */
bool sc_cuda_reduce_kernel_name(sc_dtype t, int op, char *buf, size_t n);

/* Fused attention (cuda_attention.c): FlashAttention-2's forward and
 * backward over contiguous row-major tensors
 *   q [batch, heads, sq, d], k [batch, kv_heads, skv, d],
 *   v [batch, kv_heads, skv, dv], o and d_o [batch, heads, sq, dv],
 *   lse [batch, heads, sq] f32 (natural log; -inf for a row that sees no
 *   key, whose o row is 0), dq/dk/dv shaped as q/k/v,
 * s = scale q·k + mask[b·mask_stride_b + h·mask_stride_h + i·skv + j];
 * causal: key j visible to query i iff j <= i + skv - sq; query head h reads
 * kv head h / (heads / kv_heads), and dk, dv sum over those heads. One
 * problem (everything below) gives three kernels, its shapes compile-time
 * constants:
 *   extern "C" __global__ void NAME(const T *q, const T *k, const T *v,
 *       const M *mask, T *o, float *lse, const T *d_o, T *dq, T *dk, T *dv);
 * (T, M: the storage types of dtype and mask_dtype; arguments a pass does
 * not use may be NULL), launched with sc_cuda_attn_launch_config's geometry
 * (block of SC_CUDA_ATTN_THREADS, dynamic shared memory above 48 KB: the
 * runtime raises the kernel's limit with cuFuncSetAttribute). FWD (or
 * FWD_MMA) writes o and lse; the backward is BWD_KV (dk, dv) and BWD_Q (dq), in either order,
 * both reading q, k, v, mask, o, lse and d_o. No scratch memory, no atomics:
 * the same results on every run. */
enum { SC_CUDA_ATTN_THREADS = 128, SC_CUDA_ATTN_ARGS = 10 };
typedef struct sc_cuda_attn {
  sc_dtype dtype;            /* q, k, v, o, d_o, dq, dk, dv: f32, bf16 or f16 */
  sc_dtype mask_dtype;       /* f32 or dtype; only with has_mask */
  bool has_mask, causal;
  int64_t batch, heads, kv_heads, sq, skv, d, dv;
  int64_t mask_stride_b, mask_stride_h; /* elements; 0: broadcast */
  float scale;
} sc_cuda_attn;
typedef enum sc_cuda_attn_pass {
  SC_CUDA_ATTN_FWD,
  SC_CUDA_ATTN_BWD_KV,
  SC_CUDA_ATTN_BWD_Q,
  SC_CUDA_ATTN_FWD_MMA, /* the forward on tensor cores (sc_cuda_attn_mma_ok) */
  SC_CUDA_ATTN_PASSES
} sc_cuda_attn_pass;
typedef struct sc_cuda_attn_launch {
  char name[48];     /* "sc_attn<id>_fwd", "_bwd_kv", "_bwd_q", "_fwd_mma" */
  int block;         /* SC_CUDA_ATTN_THREADS */
  int shared_bytes;  /* dynamic shared memory (at most 140.25 KiB) */
  int bm, bn;        /* query and key rows of a tile */
  int64_t grid;      /* one block per tile of work (grid-stride beyond 2^31-1) */
} sc_cuda_attn_launch;
/* Why the kernels cannot run problem a (dtypes, head dims above 256,
 * heads not a multiple of kv_heads, ...), or NULL. */
const char *sc_cuda_attn_problem(const sc_cuda_attn *a);
bool sc_cuda_attn_equal(const sc_cuda_attn *x, const sc_cuda_attn *y);
/* Whether problem a has a tensor-core forward (FWD_MMA: bf16 or f16, head
 * dims multiples of 16): mma.sync m16n8k16 with f32 accumulators, P
 * rounded to the dtype as the second product's operand. The same results
 * as FWD within the dtype's rounding; which one runs is the device's
 * choice (the CUDA device: SHARDC_CUDA_ATTENTION=mma). */
bool sc_cuda_attn_mma_ok(const sc_cuda_attn *a);
void sc_cuda_attn_launch_config(const sc_cuda_attn *a, int32_t id, sc_cuda_attn_pass pass,
                                sc_cuda_attn_launch *out);
/* The kernels of problem a for the passes in the mask `passes` (bit
 * 1 << pass; FWD_MMA only where sc_cuda_attn_mma_ok), named with id (sc_malloc'd text), after the template they
 * instantiate when with_template (once per unit, after the prelude).
 * SC_ERR_UNSUPPORTED: sc_cuda_attn_problem's reason. */
#define SC_CUDA_ATTN_ALL ((1u << SC_CUDA_ATTN_PASSES) - 1u)
sc_status sc_cuda_attn_emit(const sc_cuda_attn *a, int32_t id, unsigned passes, bool with_template,
                            char **text, sc_diag *diag);
/* The problem of ATTENTION / ATTENTION_GRAD step s of p (its buffers'
 * dtypes, its extents; sc_attention_problem has accepted it). */
void sc_cuda_attn_of_step(const sc_program *p, const sc_step *s, sc_cuda_attn *out);
/* The id step `step`'s kernels are named with: the index of p's first
 * attention step with the same problem (steps that share a problem share
 * kernels). */
int32_t sc_cuda_attn_id(const sc_program *p, int32_t step);
/* Appends to *src (sc_malloc'd, reallocated) the template and the kernels
 * p's attention steps use: the forward (and the tensor-core forward where
 * there is one) for ATTENTION steps, both backward kernels for
 * ATTENTION_GRAD steps; nothing without such steps. */
sc_status sc_cuda_attn_emit_program(const sc_program *p, char **src, sc_diag *diag);
/* A whole unit (the prelude, the template, problems a[0..n) with ids
 * 0..n-1): tests and benchmarks. */
sc_status sc_cuda_attn_unit(const sc_cuda_attn *a, int32_t n, char **src, sc_diag *diag);

/* CUDA C for every kernel of p (--emit=cuda, the bundle's source), with
 * the scatter kernels, implicit-GEMM convolutions and fused attention
 * kernels its steps use. */
sc_status sc_cuda_emit_source(const sc_program *p, char **src, sc_diag *diag);

/* One NVRTC compile of src for arch ("sm_80", "sm_90", "compute_90").
 * On success *ptx holds the NUL-terminated PTX (*ptx_len bytes with the NUL).
 * log (may be NULL) receives NVRTC's log, also on failure (possibly empty). */
sc_status sc_cuda_compile_ptx(const char *src, const char *arch, char **ptx,
                              size_t *ptx_len, char **log, sc_diag *diag);

/* The same compile, for a CUBIN (cubin true: arch must be sm_NN; the
 * image is *ptx_len bytes of ELF) or PTX (as sc_cuda_compile_ptx).
 * SC_ERR_UNSUPPORTED for a CUBIN of a virtual architecture or from an
 * NVRTC without nvrtcGetCUBIN. */
sc_status sc_cuda_compile(const char *src, const char *arch, bool cubin, char **image,
                          size_t *len, char **log, sc_diag *diag);

/* The result of compiling a program for several architectures. */
typedef struct sc_cuda_arch_ptx {
  char arch[32];        /* "sm_80" */
  char *ptx;            /* NUL-terminated */
  size_t ptx_len;       /* bytes including the NUL */
  char *cubin;          /* sc_cuda_build_program_cubins, a real arch sm_NN:
                           the CUBIN (ELF) of the same compile; else NULL */
  size_t cubin_len;     /* its bytes */
} sc_cuda_arch_ptx;

typedef struct sc_cuda_build {
  char *source;         /* the CUDA C translation unit */
  int32_t n_archs;
  sc_cuda_arch_ptx *archs;
  int32_t n_kernels;
  sc_cuda_launch *launch; /* per kernel id of the program */
  double compile_seconds; /* NVRTC time, all archs */
} sc_cuda_build;

/* Emits p and compiles it for each architecture of the comma-separated list
 * archs (NULL: SC_CUDA_DEFAULT_ARCHS). Errors name the architecture. */
#define SC_CUDA_DEFAULT_ARCHS "sm_80,sm_90"
sc_status sc_cuda_build_program(const sc_program *p, const char *archs,
                                sc_cuda_build **out, sc_diag *diag);
/* The same, each real architecture (sm_NN) also with its CUBIN, taken from
 * the one NVRTC compile that makes its PTX (no GPU needed): what a GPU
 * would otherwise compile when it loads the program (a training bundle,
 * docs/bundle.md). compile_seconds: those compiles. */
sc_status sc_cuda_build_program_cubins(const sc_program *p, const char *archs,
                                       sc_cuda_build **out, sc_diag *diag);
/* The same for a list of kernels without a program (tests). */
sc_status sc_cuda_build_kernels(kir_kernel *const *kernels, int32_t n_kernels,
                                const char *archs, sc_cuda_build **out,
                                sc_diag *diag);
void sc_cuda_build_destroy(sc_cuda_build *b);

/* NVRTC's version, e.g. 13.0 → 13000 (0 if unavailable). */
int sc_cuda_nvrtc_version(void);

#endif
