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
 * own threads inside a call. A CUDA device (GPU-runtime issue) implements the
 * same table with device memory and streams. */
#ifndef SC_RUNTIME_DEVICE_H
#define SC_RUNTIME_DEVICE_H

#include "codegen/program.h"

typedef struct sc_device_opts {
  int threads; /* worker threads (CPU); 0 = all online cores */
  const struct sc_cpu_module *cpu_module; /* CPU: precompiled kernels
                                             (borrowed) or NULL = JIT */
  const void *const *const_data; /* NULL or per buffer: overrides a CONST
                                    buffer's data in bind (borrowed) */
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
  void (*run_kernel)(void *ctx, const sc_step *s);
  void (*run_gemm)(void *ctx, const sc_step *s);
  int (*threads)(void *ctx);
  double (*compile_seconds)(void *ctx);
} sc_device_iface;

/* The device called `name` ("cpu"), or NULL. */
const sc_device_iface *sc_device_find(const char *name);
/* Comma-separated names of all devices, for error messages. */
const char *sc_device_names(void);

extern const sc_device_iface sc_device_cpu;

/* ---- the CPU device's thread pool (runtime/cpu_device.c), exposed for
 * tests and for other CPU-side work ---- */
typedef struct sc_thread_pool sc_thread_pool;
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
