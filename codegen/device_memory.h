/* device_memory.h — every byte a device allocates for a program, planned
 * at compile time: the arena (codegen/memplan.h) and the device's own
 * memory beside it.
 *
 * The CPU device lays some of its matrix products out again outside the
 * arena (docs/runtime.md#gemm-tiles): constant B operands packed for the
 * own GEMM kernel or re-pitched for oneDNN at bind, a GEMM scratch sized
 * for the largest product, and the own kernel's packing buffers, one per
 * pool thread. What it allocates depends on the machine (which GEMM engine
 * runs: the own AVX2 kernel, or oneDNN on AVX-512 CPUs and where
 * SHARDC_GEMM says so) and on the thread count: a plan is made for a
 * target (sc_device_target), the host by default. The functions that size
 * each of those buffers live here, below both the compiler and the
 * runtime, and the CPU device sizes its allocations with them (and counts
 * what it allocated per line, runtime/device.h), so the plan and the
 * device cannot drift apart.
 *
 The objects of oneDNN's direct convolutions (SC_MEM_CONV_*: weights in
 * its layout, the step's scratch, blocked-layout shadows, per-thread
 * scratchpads) are sized by oneDNN's primitive descriptors, which only the
 * runtime (that links oneDNN) can make: the target carries a function that
 * sizes them (sc_device_target.conv_memory), which the runtime provides
 * (runtime/runtime.h: sc_runtime_target_host; the CPU device uses the same
 * sizing on the convolutions it prepared) and the caller above both passes
 * down, so no arrow points up the stages. Without it those lines are
 * planned as 0. oneDNN's sgemm also allocates its own packing buffers
 * inside each call and frees them before it returns (not planned).
 *
 * The CUDA device (runtime/cuda_device.c) allocates beside its arena the
 * weights in one allocation (each constant aligned to SC_CUDA_CONST_ALIGN:
 * the padding is a line), and cuBLASLt's workspace when the memory plan
 * did not reserve it in the arena (SC_GEMM_WORKSPACE_BYTES, program.h).
 * Two more lines are what a GPU process holds that shardc does not
 * allocate itself: the CUDA context (the driver's reserve per process:
 * the target's context_bytes, from the cluster file or a CUDA profile, 0
 * when unknown) and NCCL's buffers, per communicator over more than one
 * rank (sc_nccl_buffer_bytes: NCCL's default buffer sizes of its three
 * protocols, per channel and ring neighbour). docs/planner.md lists every
 * constant and its source.
 *
 * Pure functions of their arguments (but sc_device_target_host, which
 * reads the CPU and the environment once); thread-safe. */
#ifndef SC_CODEGEN_DEVICE_MEMORY_H
#define SC_CODEGEN_DEVICE_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/program.h"

/* Which engine runs the CPU's f32 GEMM tiles. */
typedef enum sc_gemm_engine {
  SC_GEMM_ENGINE_AUTO,   /* the faster one for this CPU (sc_gemm_engine_host) */
  SC_GEMM_ENGINE_ONEDNN, /* oneDNN's dnnl_sgemm */
  SC_GEMM_ENGINE_OWN,    /* the own AVX2 kernel (runtime/cpu_gemm.h) */
} sc_gemm_engine;

/* Whether this CPU can run the own kernel (x86-64 with AVX2 and FMA). */
bool sc_cpu_gemm_own_supported(void);
/* The engine this host runs: the environment's SHARDC_GEMM ("onednn" or
 * "own", the latter only where supported), else the own kernel on a CPU
 * with AVX2 and FMA but without AVX-512 (there it beats oneDNN's AVX2
 * kernels; on AVX-512 CPUs oneDNN's wider kernels win), else oneDNN.
 * Never AUTO; decided once per process. */
sc_gemm_engine sc_gemm_engine_host(void);
/* "oneDNN" or "shardc avx2" */
const char *sc_gemm_engine_name(sc_gemm_engine e);

/* The own kernel's blocking (runtime/cpu_gemm.c): micro-panels of MR rows
 * of op(A) and NR columns of op(B), blocks of KC rows of op(B), MC rows of
 * op(A) and NC columns of op(B) per packing. */
enum { SC_GEMM_MR = 6, SC_GEMM_NR = 16, SC_GEMM_KC = 256, SC_GEMM_MC = 128, SC_GEMM_NC = 256 };

/* Floats of op(B)'s packed form (k x n: panels of NR columns, the last
 * padded), or -1 on overflow or k, n < 1. */
int64_t sc_gemm_packed_b_numel(int64_t k, int64_t n);
/* Floats of the packed form of m rows of op(A) (all k columns), or -1 on
 * overflow or m, k < 1. */
int64_t sc_gemm_packed_a_numel(int64_t m, int64_t k);
/* Bytes of one thread's packing buffers for the own kernel (MC rows of
 * op(A) rounded up to MR, by KC; KC by NC of op(B)). */
int64_t sc_cpu_gemm_thread_buffer_bytes(void);

/* The tiles a GEMM is cut into on the CPU (docs/runtime.md#gemm-tiles):
 * tile_m rows by tile_n columns, from the shape alone. */
void sc_gemm_tiling(const sc_gemm *g, int64_t *tile_m, int64_t *tile_n);
/* The row pitch (floats) of a re-pitched op(B) of `cols` columns: cols
 * rounded up to 16, plus 16 more when that is a multiple of 1024. */
int64_t sc_gemm_repitched_ld(int64_t cols);
/* Floats of g's op(B) laid out again at that pitch (every batch entry that
 * has its own: k rows of sc_gemm_repitched_ld(n)), or 0 when too large
 * (above 2^26) or when entries overlap. */
int64_t sc_gemm_relaid_numel(const sc_gemm *g);
/* The columns of op(B) a product with oneDNN re-pitches at a time when
 * B's pitch aliases in the cache (a multiple of 1024 floats; the copy
 * sc_gemm_relaid_numel sizes, not above 2^26 floats): all n when the copy
 * of every column is at most 2^22 floats (16 MiB), else as many whole
 * column tiles (sc_gemm_tiling) as fit in that, each such panel copied
 * and its tiles run before the next (docs/runtime.md#gemm-tiles); 0: B is
 * read in place (no aliasing, or one column of tiles alone above 2^22). */
int64_t sc_gemm_repitch_panel(const sc_gemm *g);
/* Floats of scratch oneDNN's products use for g's B: the re-pitched copy
 * of one panel (sc_gemm_repitch_panel) for every batch entry that has its
 * own; 0: B is read in place. */
int64_t sc_gemm_repitch_numel(const sc_gemm *g);
/* Floats of scratch the own kernel packs op(A) into once for g cut into
 * tiles of tile_m x tile_n (one packed row tile per batch entry of A that
 * has its own; *per_tile: floats per row tile), or 0 when not worth it (one
 * column of tiles) or too large (above 2^25). */
int64_t sc_gemm_packed_a_scratch_numel(const sc_gemm *g, int64_t tile_m, int64_t tile_n,
                                       int64_t *per_tile);
/* Floats of scratch the CPU's f32 product uses for g with engine e
 * (oneDNN: sc_gemm_repitch_numel; own: the packed op(A)); 0: none. */
int64_t sc_gemm_scratch_numel(const sc_gemm *g, sc_gemm_engine e);
/* Floats of scratch the CPU's bf16 product needs for g (its operands
 * widened to f32, then the f32 product's scratch); 0 for an empty product
 * or spans that overflow. */
int64_t sc_gemm_bf16_scratch_numel(const sc_gemm *g, int64_t bias_numel, sc_gemm_engine e);

/* Whether GEMM step s's B is a constant that the CPU device lays out again
 * at bind: one f32 matrix (no batch, or the same for every entry) whose
 * storage root is a CONST buffer, non-empty. (The device also leaves out
 * a product it runs as a direct convolution; that B is the im2col, never
 * a constant.) */
bool sc_gemm_b_relaid(const sc_program *p, const sc_step *s);
/* Whether GEMMs h and g read the same op(B) the same way (one root, the
 * same transpose, k, n and pitch): steps that do share one copy. */
bool sc_gemm_same_b(const sc_program *p, const sc_gemm *h, const sc_gemm *g);
/* Floats of the copy of step s's constant B the CPU device makes at bind
 * with engine e (own: packed, sc_gemm_packed_b_numel; oneDNN: re-pitched,
 * when transposed or when its pitch aliases), or 0: none. */
int64_t sc_gemm_weight_copy_numel(const sc_program *p, const sc_step *s, sc_gemm_engine e);

/* Floats of the GEMM scratch the CPU device needs for GEMM step s with
 * engine e, when it runs the step as a product (not as a direct
 * convolution): the bf16 widening, else sc_gemm_scratch_numel (none with
 * oneDNN for a constant B laid out at bind). The device allocates one
 * scratch, the largest. */
int64_t sc_gemm_step_scratch_numel(const sc_program *p, const sc_step *s, sc_gemm_engine e);
/* Elements each operand of g spans (A, B, C: the last element of the last
 * batch entry + 1); false on overflow. */
bool sc_gemm_spans(const sc_gemm *g, int64_t span[3]);

/* The lines of a program's memory on a device. */
typedef enum sc_mem_line {
  SC_MEM_ARENA,           /* the tensor arena (program->arena_bytes) */
  SC_MEM_PACKED_WEIGHTS,  /* constant B packed for the own kernel, at bind */
  SC_MEM_PITCHED_WEIGHTS, /* constant B re-pitched / untransposed for oneDNN */
  SC_MEM_GEMM_SCRATCH,    /* one scratch for the largest product */
  SC_MEM_GEMM_THREADS,    /* the own kernel's packing buffers, per thread */
  SC_MEM_CONV_WEIGHTS,    /* direct convolutions' weights in oneDNN's layout, at bind */
  SC_MEM_CONV_SCRATCH,    /* the blocked input and output of the convolution running */
  SC_MEM_CONV_SHADOWS,    /* NCHW shadows of the buffers held blocked */
  SC_MEM_CONV_THREADS,    /* oneDNN's scratchpads, one per pool thread, at bind */
  SC_MEM_CUDA_WORKSPACE,  /* cuBLASLt's workspace when not in the arena */
  SC_MEM_CUDA_PADDING,    /* the weights' alignment in the CUDA device's allocation */
  SC_MEM_CUDA_CONTEXT,    /* the CUDA context (the driver's, per process) */
  SC_MEM_NCCL_BUFFERS,    /* NCCL's buffers, its communicators over 2+ ranks */
  SC_MEM_LINE_COUNT
} sc_mem_line;

/* Whether line l belongs to the device named `device` ("cpu": the arena
 * and the CPU's lines; "cuda": the arena and the SC_MEM_CUDA_* and NCCL
 * lines). Printouts list a device's own lines only. */
bool sc_mem_line_of_device(sc_mem_line l, const char *device);
/* "arena", "packed weights", ... */
const char *sc_mem_line_name(sc_mem_line l);
/* A few words on what the line holds, for printouts. */
const char *sc_mem_line_what(sc_mem_line l);

typedef struct sc_device_memory {
  int64_t bytes[SC_MEM_LINE_COUNT];
} sc_device_memory;

/* Sets the direct convolutions' lines (SC_MEM_CONV_*) of *m for program p
 * run by `threads` pool threads; leaves the others. */
typedef sc_status (*sc_conv_memory_fn)(const sc_program *p, int threads, sc_device_memory *m,
                                       sc_diag *diag);

/* ---- the CUDA device's lines ---- */

/* Each constant's offset in the CUDA device's one weights allocation is a
 * multiple of this (runtime/cuda_device.c). */
enum { SC_CUDA_CONST_ALIGN = 256 };
/* Bytes of the CUDA device's weights allocation for program p: every
 * CONST buffer, each at an offset aligned to SC_CUDA_CONST_ALIGN (the
 * device allocates exactly this); -1 on overflow. */
int64_t sc_cuda_const_bytes(const sc_program *p);
/* Whether p's memory plan holds cuBLASLt's workspace (at least 1 MiB at
 * workspace_offset, inside the arena): the CUDA device then hands the
 * engine that, else the engine allocates SC_GEMM_WORKSPACE_BYTES. */
bool sc_cuda_workspace_in_arena(const sc_program *p);
/* Bytes cuBLASLt's workspace takes beside p's arena on the CUDA device:
 * SC_GEMM_WORKSPACE_BYTES when a GEMM step runs through the GEMM engine
 * (a convolution runs as an implicit-GEMM kernel unless im2col_convs) and
 * the arena does not hold it; else 0. */
int64_t sc_cuda_workspace_outside_bytes(const sc_program *p, bool im2col_convs);

/* NCCL's default buffer per channel and connection, by protocol (NCCL
 * src/init.cc, DEFAULT_*BUFFSIZE; the environment's NCCL_BUFFSIZE,
 * NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE change them): Simple 4 MiB; LL
 * 8 lines x 512 threads x 8 steps x 16 bytes; LL128 120 x 640 x 8 x 8. */
#define SC_NCCL_SIMPLE_BYTES ((int64_t)1 << 22)
#define SC_NCCL_LL_BYTES ((int64_t)8 * 512 * 8 * 16)
#define SC_NCCL_LL128_BYTES ((int64_t)120 * 640 * 8 * 8)
/* Ring neighbours a rank connects to per channel (the previous and the
 * next rank: a receive and a send connection). */
enum { SC_NCCL_RING_PEERS = 2 };
/* Channels assumed for a communicator when the cluster does not say
 * (docs/planner.md: an assumption, not a measurement). */
enum { SC_NCCL_CHANNELS_DEFAULT = 16 };
/* Device bytes comm_nccl.c allocates per communicator (a flag it polls). */
enum { SC_NCCL_SCRATCH_BYTES = 4 };
/* NCCL's buffers of one communicator of `ranks` ranks over `channels`
 * channels: 0 for one rank (no peer, no connection), else channels x
 * SC_NCCL_RING_PEERS x (Simple + LL + LL128), plus SC_NCCL_SCRATCH_BYTES;
 * -1 on overflow or channels < 1. */
int64_t sc_nccl_buffer_bytes(int64_t ranks, int64_t channels);

/* What a plan is for. */
typedef struct sc_device_target {
  const char *device;    /* "cpu" or "cuda" */
  sc_gemm_engine engine; /* the CPU's GEMM engine (never AUTO after _host) */
  int threads;           /* the CPU device's pool threads, caller included */
  bool direct_convs;     /* the CPU runs convolutions directly (oneDNN) */
  sc_conv_memory_fn conv_memory; /* sizes them (direct_convs), or NULL: planned as 0 */
  /* cuda */
  int64_t context_bytes;        /* the CUDA context per process; 0 = unknown */
  int64_t nccl_channels_intra;  /* channels of a communicator inside a node */
  int64_t nccl_channels_inter;  /* ... of one whose groups span nodes */
  bool im2col_convs;            /* convolutions as im2col + GEMM, not kernels */
} sc_device_target;

/* The host: the CPU device, sc_gemm_engine_host(), every online core,
 * direct convolutions, conv_memory NULL (runtime/runtime.h's
 * sc_runtime_target_host sets it). */
void sc_device_target_host(sc_device_target *t);

/* A CUDA target: context_bytes (0: unknown) and the channels of NCCL's
 * communicators inside a node and across nodes (0: the default). */
void sc_device_target_cuda(sc_device_target *t, int64_t context_bytes, int64_t channels_intra,
                           int64_t channels_inter);

/* The target a plan for cluster c is made for: on a GPU cluster
 * (sc_cluster_is_gpu) the CUDA target with c's context_bytes and its
 * links' NCCL channels, and true; false for cpu:local (t unchanged: the
 * caller's host target). */
struct sc_cluster;
bool sc_device_target_of_cluster(const struct sc_cluster *c, sc_device_target *t);

/* Every line of program p on target t (the convolutions' lines: the CPU's
 * t->conv_memory's; on a CUDA target the workspace outside the arena, the
 * weights' padding, the context, and NCCL's buffers of every group the
 * program's COMM steps use, each group inside a node when p->mesh says so).
 * SC_ERR_LIMIT when a size overflows; conv_memory's errors. */
sc_status sc_device_memory_plan(const sc_program *p, const sc_device_target *t,
                                sc_device_memory *out, sc_diag *diag);
/* The sum of the lines (saturated at INT64_MAX). */
int64_t sc_device_memory_total(const sc_device_memory *m);
/* The sum of the lines but the arena: the device's own memory. */
int64_t sc_device_memory_outside(const sc_device_memory *m);

#endif
