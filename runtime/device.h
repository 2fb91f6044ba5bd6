/* device.h — the device interface: a table of functions plus a context.
 *
 * Like ggml's backends, a device is a const table (sc_device_iface) naming
 * what it can do, and an opaque context the table's functions receive. The
 * session (runtime/session.c) drives it in this order:
 *
 *   create(opts)            the context (CPU: the thread pool)
 *   prepare(program)        compile the program's kernels (CPU: LLVM JIT of
 *                           every kernel) and check its steps (supports_step)
 *   alloc_arena(bytes)      the session's one arena (64-byte aligned)
 *   bind(arena)             fix every buffer's address (arena base + offset,
 *                           constant data, or a VIEW's root) and build each
 *                           kernel's argument array once
 *   copy_in / run_step / copy_out   per run, no allocation
 *   free_arena, destroy
 *
 * Kernels cannot fail at run time, so run_step returns nothing; everything
 * that could go wrong (an unsupported step, a GEMM whose extents exceed its
 * buffers) is rejected by prepare.
 *
 * Threading: one thread drives a context at a time; the device may use its
 * own threads inside a call.
 *
 * Asynchronous devices (runtime/cuda_device.c) queue work: run_kernel and
 * run_gemm return before the work is done, and a device whose memory the
 * host cannot read (host_arena false) also fills the hooks marked "async"
 * below. The session then calls begin_run before a run's steps (after its
 * inputs were copied in) and end_run after them: end_run waits for the
 * work and reports what failed on the way (kernels cannot fail, but a
 * collective run by the device can), and what failed since the last
 * end_run outside a run: copy_in, copy_out, zero and sync return nothing,
 * so a failure of theirs fails the next end_run (once). begin_run may answer that it has
 * replayed the whole step (a captured CUDA graph): the session then issues
 * no step. COMM and WAIT steps go to run_comm and wait_comm, which order
 * them on the device's streams, CHECK and SCATTER_ADD steps to run_check
 * and run_scatter; sync waits for everything queued.
 *
 * Runs read later (sc_session_launch / sc_session_collect): a device that
 * fills the hooks marked "later" issues a run without waiting for it.
 * reserve_async gives the session n slots of pinned host memory (the
 * device owns them and a marker per slot); the session stages the run's
 * inputs through its slot, calls end_run_async instead of end_run, queues
 * the outputs' copies into the slot (copy_out_async) and records the
 * slot's marker (mark); wait_mark(k) is the one wait, made when the
 * caller reads slot k's outputs. A failure of any run issued so far is
 * reported by the next wait_mark (it may be a later run's). */
#ifndef SC_RUNTIME_DEVICE_H
#define SC_RUNTIME_DEVICE_H

#include "codegen/device_memory.h"
#include "codegen/program.h"

struct sc_comm;
struct sc_gemm_packed_b;
typedef struct sc_thread_pool sc_thread_pool;

/* A cuda bundle's code (runtime/bundle.h: sc_bundle_cuda_code), borrowed,
 * used instead of emitting and compiling the program's: its CUDA C, and for
 * n_archs architectures the PTX and, where the bundle has one, the CUBIN
 * (cubin NULL, or an entry NULL: none). All NULL / 0: none. */
typedef struct sc_cuda_code {
  const char *source;
  int32_t n_archs;
  const char (*archs)[32];
  char *const *ptx;
  char *const *cubin; /* ELF images; the loader checked their headers */
} sc_cuda_code;

typedef struct sc_device_opts {
  int threads; /* worker threads (CPU); 0 = all online cores */
  int rank;    /* this rank in the mesh (0 alone): the GPU is LOCAL_RANK, or
                  rank modulo the device count */
  bool no_graph; /* CUDA: never capture the step as a graph */
  bool no_tf32;  /* CUDA: f32 products in full f32, never with TF32 operands */
  bool im2col_convs; /* run every convolution as written (im2col and a GEMM):
                        none directly (CPU: cpu_conv.h), none as an
                        implicit-GEMM kernel (CUDA: cuda_device.c) */
  const char *gpu_arch; /* CUDA: "sm_90", or NULL = the device's own */
  /* the communicators of the program's COMM steps (borrowed): step i uses
   * comms[comm_of[i]]; comm_of[i] < 0 for other steps */
  int32_t n_comms;
  struct sc_comm *const *comms;
  const int32_t *comm_of;
  sc_cuda_code cuda; /* CUDA: a bundle's code, or none */
  const struct sc_cpu_module *cpu_module; /* CPU: precompiled kernels
                                             (borrowed) or NULL = JIT */
  const void *const *const_data; /* NULL or per buffer: overrides a CONST
                                    buffer's data in bind, or gives a bound
                                    root's storage (program->bound; set by
                                    the session) (borrowed) */
} sc_device_opts;

typedef struct sc_device_iface {
  const char *name; /* "cpu" */
  bool host_arena;  /* buffer_ptr gives host memory the caller may use */
  sc_status (*create)(const sc_device_opts *o, void **ctx, sc_diag *diag);
  void (*destroy)(void *ctx);
  /* Compiles the kernels of p (which must outlive the context) and checks
   * that every step is supported. */
  sc_status (*prepare)(void *ctx, const sc_program *p, sc_diag *diag);
  bool (*supports_step)(void *ctx, const sc_program *p, const sc_step *s);
  /* bytes may be 0 (a program with no arena buffers): returns a valid
   * non-NULL pointer anyway. NULL on failure. */
  void *(*alloc_arena)(void *ctx, int64_t bytes);
  void (*free_arena)(void *ctx, void *arena);
  sc_status (*bind)(void *ctx, void *arena, sc_diag *diag);
  /* Address of buffer b's storage after bind (device memory on a GPU). */
  void *(*buffer_ptr)(void *ctx, int32_t b);
  void (*copy_in)(void *ctx, void *dst, const void *src, int64_t bytes);
  void (*copy_out)(void *ctx, void *dst, const void *src, int64_t bytes);
  /* Sets bytes of device memory at dst (after bind) to 0, in order with
   * the copies and runs (CUDA: queued on the compute stream, before the
   * next run's steps); for state kept in the arena across runs. */
  void (*zero)(void *ctx, void *dst, int64_t bytes);
  /* Copies bytes between two device addresses (after bind), in order with
   * the copies and runs as zero is; NULL: host memory (memmove). */
  void (*copy_device)(void *ctx, void *dst, const void *src, int64_t bytes);
  void (*run_kernel)(void *ctx, const sc_step *s);
  void (*run_gemm)(void *ctx, const sc_step *s);
  /* an ATTENTION or ATTENTION_GRAD step (program.h's sc_attention_step);
   * NULL: the device has none, and supports_step refuses the kinds */
  void (*run_attention)(void *ctx, const sc_step *s);
  int (*threads)(void *ctx);
  double (*compile_seconds)(void *ctx);
  /* async (begin_run NULL on the CPU); end_run also reports a failure
   * that a step could not return (the CPU device: a GEMM out of memory) */
  bool (*begin_run)(void *ctx, bool whole); /* whole: every step is issued
                                               (false: a partial run, never
                                               a graph's) */
  sc_status (*end_run)(void *ctx, sc_diag *diag);
  void (*sync)(void *ctx);
  /* COMM step i (async or not) over opts.comms[opts.comm_of[i]] */
  void (*run_comm)(void *ctx, int32_t i);
  /* a WAIT step: later work waits for the COMM or COPY step `started` */
  void (*wait_comm)(void *ctx, int32_t started);
  /* COPY step i (offloaded activations, codegen/offload.c), async: between
   * its device buffer and `host`, the host pool's bytes for its HOST
   * buffer, on the device's copy stream after the work queued so far; its
   * WAIT (wait_comm) orders later work after it. NULL: the session runs
   * COPY steps on its copy queue with copy_in/copy_out (a host arena). */
  void (*run_copy)(void *ctx, int32_t i, void *host);
  /* Host memory for the host pool (CUDA: pinned, so copies are DMA and
   * asynchronous) and its release; NULL: the session's posix_memalign. */
  void *(*alloc_host)(void *ctx, int64_t bytes);
  void (*free_host)(void *ctx, void *p);
  /* CHECK step i, queued: a bad index fails the run at end_run */
  void (*run_check)(void *ctx, int32_t i);
  /* SCATTER_ADD step i, queued (as run_check for a bad index) */
  void (*run_scatter)(void *ctx, int32_t i);
  /* later (NULL on the CPU): n_slots slots of slot_bytes pinned host
   * bytes each (their addresses in slots[]) and a marker each; replaces
   * what an earlier call reserved (nothing may be in flight) */
  sc_status (*reserve_async)(void *ctx, int32_t n_slots, int64_t slot_bytes, void **slots,
                             sc_diag *diag);
  /* later: ends a run's steps as end_run does, without waiting for them */
  void (*end_run_async)(void *ctx);
  /* later: a copy into a reserved slot, queued after the run's steps */
  void (*copy_out_async)(void *ctx, void *dst, const void *src, int64_t bytes);
  /* later: records slot k's marker after everything queued so far */
  void (*mark)(void *ctx, int32_t k);
  /* later: waits for slot k's marker; the first failure not yet reported */
  sc_status (*wait_mark)(void *ctx, int32_t k, sc_diag *diag);
  /* How the device runs step i when that is not what the step says (the
   * CPU device's direct convolutions), for SHARDC_PROFILE; NULL (the
   * function or its result): as written. */
  const char *(*step_note)(void *ctx, int32_t i);
  /* After bind: the program's memory on this device as planned for it
   * (sc_device_memory_plan with the device's engine, threads and
   * convolutions) and what the device allocated, line by line
   * (codegen/device_memory.h); NULL: the arena only. Either may be NULL. */
  void (*memory)(void *ctx, sc_device_memory *planned, sc_device_memory *allocated);
  /* The device's own time of the last run's steps, without the copies in
   * and out (CUDA: events on its stream); negative or NULL: not timed. */
  double (*last_run_seconds)(void *ctx);
} sc_device_iface;

/* The device called `name` ("cpu"), or NULL. */
const sc_device_iface *sc_device_find(const char *name);
/* Comma-separated names of all devices, for error messages. */
const char *sc_device_names(void);

extern const sc_device_iface sc_device_cpu;
extern const sc_device_iface sc_device_cuda;

/* Where buffer b lives (every device binds the same way): its storage
 * root *root (sc_program_root) and, for an arena buffer (INPUT, OUTPUT,
 * TEMP), the root's offset *offset; -1 for a CONST root, for a bound
 * one (program->bound: the caller's storage, like a constant's given in
 * sc_device_opts.const_data) and for a HOST one (the session's host pool,
 * which only COPY steps touch: no device address). SC_ERR_INVALID
 * for a slot outside the arena or the host pool, a view without a root, or (kernel params)
 * a buffer id out of range. */
sc_status sc_buffer_binding(const sc_program *p, int32_t b, int32_t *root, int64_t *offset,
                            sc_diag *diag);
/* Every kernel param names a buffer of p; else SC_ERR_INVALID naming it. */
sc_status sc_check_kernel_params(const sc_program *p, sc_diag *diag);

/* Why GEMM step s cannot run on shardc's devices (bad buffer ids, extents
 * beyond the buffers, operands other than all f32 or all bf16), or NULL. */
const char *sc_gemm_problem(const sc_program *p, const sc_step *s);
/* C = alpha op(A) op(B) + beta C (+ bias) for f32 GEMM g on host memory,
 * cut into tiles whose boundaries depend only on the shape (the same
 * result on any thread count), run on tp (NULL: this thread). bias_numel:
 * the bias buffer's element count (bias may be NULL). scratch (or NULL):
 * sc_gemm_scratch_numel(g, sc_gemm_engine_get()) floats (device_memory.h),
 * where oneDNN first copies a B whose row pitch aliases in the cache (a
 * multiple of 4 KiB) with a longer pitch, and the own kernel packs op(A)
 * once for all the tiles that read the same rows. packed (or NULL, or with data NULL): op(B) already packed
 * for the own kernel (runtime/cpu_gemm.h), read instead of B when that
 * kernel runs. */
typedef struct sc_gemm_failure {
  uint64_t bytes; /* what its buffers are estimated to need; 0: no failure */
  int m, n;       /* the tile */
  int64_t k;
  bool own;       /* the own kernel (cpu_gemm.h), else oneDNN */
} sc_gemm_failure;
/* ... false when a tile's engine could not allocate its packing buffers
 * (C is then not the product; *failure, when not NULL, says which tile). */
bool sc_host_gemm_f32(const sc_gemm *g, const float *A, const float *B, const float *bias,
                      int64_t bias_numel, float *C, struct sc_thread_pool *tp, float *scratch,
                      const struct sc_gemm_packed_b *packed, sc_gemm_failure *failure);
/* C *= f over C's m x n elements of each batch entry (g's ldc, stride_c):
 * an FP8 product's dequantisation factor (sc_gemm.scaled), multiplied into
 * the finished sum once, as cuBLASLt's scale pointers are. */
void sc_host_gemm_scale(const sc_gemm *g, float *C, float f);
/* The bias gradient of g's first batch entry as cuBLASLt's BGRADA/BGRADB
 * computes it (sc_gemm.bgrad: side B, n sums over k of op(B), or side A, m
 * of op(A)) from that operand x as stored (bf16 where bf16, decoded
 * exactly; f32 not rounded to TF32), summed in f32 in order of k, into out
 * (bf16 where bf16, rounded once). */
void sc_host_gemm_bgrad(const sc_gemm *g, sc_gemm_bgrad side, const void *x, bool bf16,
                        void *out);
/* The same product for a GEMM whose operands are bfloat16 (A, B, C and the
 * bias: the buffers' dtype), as cuBLASLt computes it with f32 compute:
 * the operands widened to f32 (a product of two bf16 values is exact in
 * f32), sc_host_gemm_f32 on the copies, and each element of C rounded to
 * bf16 once, at the end. Only C's m x n elements of each batch entry are
 * written. scratch: sc_gemm_bf16_scratch_numel(g, bias_numel,
 * sc_gemm_engine_get()) floats. */
bool sc_host_gemm_bf16(const sc_gemm *g, const uint16_t *A, const uint16_t *B,
                       const uint16_t *bias, int64_t bias_numel, uint16_t *C,
                       struct sc_thread_pool *tp, float *scratch, sc_gemm_failure *failure);
/* The first of n indices of dtype t outside [-dim, dim) (unsigned: [0,
 * dim)), or -1; *shown: its value. */
int64_t sc_check_indices(sc_dtype t, const void *data, int64_t n, int64_t dim, long long *shown);
/* CHECK step st's error for the bad index `shown`. */
sc_status sc_check_step_error(const sc_program *p, const sc_step *st, long long shown,
                              sc_diag *diag);
/* The collective or transfer of COMM step c on the given buffers (send:
 * the input or its packed copy; recv: the output or its unpack scratch). */
sc_status sc_comm_step_call(struct sc_comm *comm, const sc_comm_step *c, sc_dtype t,
                            const void *send, void *recv, sc_diag *diag);

/* ---- the CPU device's thread pool (runtime/cpu_device.c), exposed for
 * tests and for other CPU-side work ---- */
typedef void (*sc_pool_fn)(void *ud, int64_t begin, int64_t end);
/* threads >= 1 (the caller counts as one: threads - 1 workers start). */
sc_status sc_thread_pool_create(int threads, sc_thread_pool **out, sc_diag *diag);
void sc_thread_pool_destroy(sc_thread_pool *tp);
int sc_thread_pool_threads(const sc_thread_pool *tp);
/* Calls fn over [0, total) cut into n_chunks near-equal ranges, spread over
 * the pool; returns when all are done. n_chunks <= 1 runs inline. */
void sc_thread_pool_run(sc_thread_pool *tp, sc_pool_fn fn, void *ud, int64_t total,
                        int64_t n_chunks);

#endif
