/* runtime.h — running a compiled program on a device.
 *
 * A session binds a program (codegen/program.h) to a device and owns one
 * arena of exactly program->arena_bytes (the memory plan's peak; "planned ==
 * allocated" is a test), or borrows one shared with sessions that run in
 * turn (sc_session_opts.arena). Each run copies the inputs into their arena slots,
 * executes the steps in order (kernels through the device's compiled code,
 * GEMM steps through BLAS), and exposes the outputs.
 *
 * Devices are a table of functions plus a context (runtime/device.h), like
 * ggml's backends: `cpu` today (LLVM-compiled kernels on a thread pool,
 * oneDNN GEMMs); `cuda` in the GPU-runtime issue.
 *
 * Threading: a session is used by one thread at a time; the CPU device runs
 * each step on its own thread pool (--threads, default all cores). */
#ifndef SC_RUNTIME_H
#define SC_RUNTIME_H

#include <stdio.h>

#include "codegen/device_memory.h"
#include "codegen/program.h"
#include "runtime/device.h"

/* A tensor handed in or out: dtype, shape and a pointer to packed row-major
 * data (not owned). */
typedef struct sc_tensor_view {
  const char *name;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  void *data;
} sc_tensor_view;

/* Which device runs a program, and how (shardc run|train --device). */
typedef struct sc_device_choice {
  const char *name;   /* "cpu" (NULL: cpu) or "cuda" (runtime/device.h) */
  bool no_graph;      /* cuda: issue every run step by step (--no-cuda-graph) */
  bool no_tf32;       /* cuda: f32 products in full f32 (--no-allow-tf32); by
                         default their operands may be TF32, as PyTorch's
                         matmul precision "high" (runtime/cuda_gemm.h) */
  const char *gpu_arch; /* cuda: "sm_90"; NULL = the device's own */
  bool comm_on_device; /* cuda: thread-ranks of a mesh share one GPU and their
                          collectives run on it (--comm cuda-local:
                          sc_comm_cuda_local_create_group), not on the host */
} sc_device_choice;
/* Whether c names the CPU device (the default). */
bool sc_device_choice_is_cpu(const sc_device_choice *c);
/* Whether the device c names runs fused attention steps (program.h's
 * SC_STEP_ATTENTION: its run_attention hook, runtime/device.h); a program
 * for one that does not is compiled with the cores unfused. */
bool sc_device_choice_runs_attention(const sc_device_choice *c);

typedef struct sc_session_opts {
  sc_device_choice device;
  /* cuda: a cuda bundle's code (its kernels.cu, PTX and CUBINs per
   * architecture; runtime/device.h), borrowed; all NULL / 0: emitted from
   * the program's kernels and compiled */
  sc_cuda_code cuda;
  int threads;        /* 0 = all cores */
  bool im2col_convs;  /* no direct (cpu) or implicit-GEMM (cuda) convolutions
                         (sc_device_opts) */
  /* cpu: kernels already compiled for this program (sc_cpu_load_object on
   * a bundle's kernels.o, or sc_cpu_jit), borrowed: must outlive the
   * session. NULL = JIT-compile the kir. */
  const struct sc_cpu_module *cpu_module;
  /* A program with COMM steps (collectives, send/recv over groups of
   * p->mesh's axes): the communicator over all p->mesh.n_ranks ranks, this
   * rank's mesh rank = its rank in it. Borrowed: must outlive the session.
   * sc_session_create builds one sub-communicator per group with
   * sc_comm_split (a collective call: every rank creates its session
   * concurrently). NULL = none: a program with COMM steps is then refused. */
  struct sc_comm *world;
  /* NULL, or [program->n_buffers]: data for CONST buffers, overriding the
   * program's (NULL entries: the program's). Borrowed: must outlive the
   * session. A partitioned run's weight shards (runtime/dist.h). */
  const void *const *const_data;
  /* Non-NULL: split the world as a program over this mesh with
   * collectives would, even when this program has none (or no mesh): the
   * pieces of a pipelined step (runtime/pipe_rank.c) are created in
   * lockstep by every rank, and the splits are collective. */
  const struct sc_mesh *split_mesh;
  /* One arena for several sessions that run one after another on one
   * thread and device (the pieces of a pipeline rank, runtime/pipe_rank.c).
   * arena NULL: the session allocates max(program->arena_bytes,
   * arena_bytes) bytes (a larger arena_bytes makes room for the programs
   * that will borrow it: sc_session_arena). arena non-NULL: borrowed, an
   * arena of arena_bytes bytes (at least program->arena_bytes, else an
   * error) that another session on the same device allocated and that
   * outlives this one; the session allocates none. A shared arena holds
   * nothing from one run to the next: each run copies its inputs in (or
   * they are bound outside it: `bound` below), and its outputs are valid
   * only until any session sharing it runs (or is destroyed). */
  void *arena;
  int64_t arena_bytes;
  /* NULL, or [program->n_inputs]: the storage of each bound input
   * (program->bound; NULL entries for the others), program->buffers'
   * bytes each, where the program reads it and, through a kept state pair,
   * writes its new value: a run copies nothing in for it and its paired
   * output's view points there. Required when the program binds any
   * input, only on a device whose arena is host memory (the CPU).
   * Borrowed: must outlive the session, at the same address. */
  void *const *bound;
} sc_session_opts;
void sc_session_opts_init(sc_session_opts *o);

typedef struct sc_session sc_session;

/* The program must outlive the session. Compiles the program's kernels for
 * the device (CPU: LLVM JIT) unless they were loaded from a bundle. */
sc_status sc_session_create(const sc_program *p, const sc_session_opts *o,
                            sc_session **out, sc_diag *diag);
/* inputs: one per program input, in order, matching dtype and shape (a
 * mismatch is an error naming the input). After success outputs[i] point
 * into the session's arena, valid until the next run or destroy (of any
 * session sharing the arena). Every asynchronous collective and device
 * stream of the run has finished when it returns. */
sc_status sc_session_run(sc_session *s, const sc_tensor_view *inputs, int32_t n_inputs,
                         sc_tensor_view *outputs, int32_t n_outputs, sc_diag *diag);
/* partial: the runs that follow (sc_session_run, sc_session_launch) skip
 * the steps that only a training step's update needs
 * (sc_program_update_steps, last_run: the gradients' reductions, the norm,
 * the optimizer), a run of gradient accumulation before the step's last,
 * whose "train:apply" is false: its guarded update keeps the state as it
 * was, so the state in its slots is the same, the outputs only the update
 * needs ("train:grad_norm", "train:applied", "new:X" of state not kept in
 * place) are left undefined, and an accumulator's sum is its own rank's
 * (not reduced). false: every step again. Errors: SC_ERR_NOMEM. */
sc_status sc_session_set_partial(sc_session *s, bool partial, sc_diag *diag);
/* Runs read later, for a caller that issues the next run before it reads
 * this one's outputs (the trainer: a step's loss read after the next step
 * was launched). A device that waits for every run (the CPU) has none:
 * sc_session_reserve_async says SC_ERR_UNSUPPORTED and the caller uses
 * sc_session_run.
 *
 * sc_session_reserve_async makes n_slots slots (1 to SC_SESSION_MAX_SLOTS)
 * of pinned host memory, each room for the inputs and outputs that are not
 * state pairs (p->updates); nothing may be in flight (it replaces what an
 * earlier call made). sc_session_launch validates the inputs as
 * sc_session_run does, copies each into slot `slot` on the host and from
 * there to the device (the caller may change its data when it returns),
 * issues the run's steps, queues the copies of its outputs into the slot
 * and returns without waiting: no host synchronisation. A state input must
 * be given as its slot (sc_session_state_slot): it stays on the device.
 * sc_session_collect waits for the run launched in `slot` and points the
 * output views at its outputs: the slot's copies, or the state's device
 * slots. A slot is launched again only after it was collected, and its
 * views are valid until then. A failure of any run launched so far may be
 * reported by the first collect after it (runs cannot fail one at a time
 * on a device that queues them). */
enum { SC_SESSION_MAX_SLOTS = 64 };
sc_status sc_session_reserve_async(sc_session *s, int32_t n_slots, sc_diag *diag);
int32_t sc_session_async_slots(const sc_session *s); /* 0: none reserved */
sc_status sc_session_launch(sc_session *s, const sc_tensor_view *inputs, int32_t n_inputs,
                            int32_t slot, sc_diag *diag);
sc_status sc_session_collect(sc_session *s, int32_t slot, sc_tensor_view *outputs,
                             int32_t n_outputs, sc_diag *diag);
/* The arena slot of input i, in host memory (NULL on a device whose arena
 * is not: the caller then passes its own data). Data written there is the
 * input of the next run when that run is given this very pointer (it is
 * not copied). With the program's state pairs (p->updates), the slot of an
 * input X also holds the output "new:X" after a run: training state stays
 * there from step to step. */
void *sc_session_input_slot(sc_session *s, int32_t i);
/* State kept in the arena across runs, on any device. Input i's arena slot
 * (device memory where the arena is not host memory: never dereferenced
 * by the caller then), or NULL (out of range, empty, or bound outside the
 * arena). A run given this very pointer as input i's data copies nothing
 * in for it, and the output paired with it (p->updates, "new:X") is not
 * copied out either: its view is the slot itself, so on a GPU a training
 * step moves neither parameters nor optimizer state. The caller reads and
 * writes such state only through the explicit copies below (synchronous:
 * they return when the copy is done) and zeroes it on the device. */
void *sc_session_state_slot(sc_session *s, int32_t i);
bool sc_session_host_arena(const sc_session *s);
void sc_session_slot_write(sc_session *s, void *slot, const void *src, int64_t bytes);
void sc_session_slot_read(sc_session *s, void *dst, const void *slot, int64_t bytes);
void sc_session_slot_zero(sc_session *s, void *slot, int64_t bytes);
/* A copy between two addresses of the session's device (slots, or the rest
 * of an arena it allocated larger: runtime/pipe_rank.c's state store),
 * queued in order with the runs and the copies above (the CPU: at once);
 * sc_session_sync waits for everything queued. */
void sc_session_slot_copy(sc_session *s, void *dst, const void *src, int64_t bytes);
void sc_session_sync(sc_session *s);
/* The device address of output j's buffer (its slot), or NULL. */
void *sc_session_output_slot(sc_session *s, int32_t j);
/* Bytes of arena this session allocated (0 when it borrowed one), and the
 * arena's address (a device address on a GPU: for sc_session_opts.arena). */
int64_t sc_session_arena_bytes(const sc_session *s);
void *sc_session_arena(const sc_session *s);
/* Bytes of host pool this session allocated for the program's HOST buffers
 * (program->host_bytes: offloaded activations), 0 when it has none. */
int64_t sc_session_host_pool_bytes(const sc_session *s);
/* The GPU a CUDA session of this process would run on (LOCAL_RANK's, else
 * the first): its name, architecture, memory, and the device memory in use
 * right after this process's primary context was made current (total -
 * free: the context's reserve, plus whatever other processes hold). The
 * context is released again (retained by a session, it is the same one).
 * SC_ERR_UNSUPPORTED without a driver or device ("no CUDA driver ...",
 * "no CUDA device"), or in a build without the CUDA backend. */
typedef struct sc_cuda_probe {
  char name[128];      /* "NVIDIA H200" */
  char arch[16];       /* "sm_90" */
  int64_t total_bytes; /* the device's memory */
  int64_t used_bytes;  /* in use once the context exists */
  bool emulated;       /* the fake driver (SHARDC_CUDA_EMU=1) */
} sc_cuda_probe;
sc_status sc_cuda_probe_device(sc_cuda_probe *out, sc_diag *diag);

/* The device's own time of the last run's steps, without the copies of
 * inputs and outputs (the CUDA device's events); negative when the device
 * does not time them (the CPU device). */
double sc_session_device_seconds(const sc_session *s);
/* The program's memory on the session's device, line by line
 * (codegen/device_memory.h): *planned as the memory plan sizes it for this
 * device (its GEMM engine, threads and convolutions), *allocated what the
 * device allocated at prepare and bind (a device that reports no lines:
 * the arena alone, both). Equal line for line; unit.test_runtime and
 * models.test_memory assert it. *rss_before and
 * *peak_before: the process's resident set and its peak so far
 * (sc_process_memory) after prepare (model loaded, kernels compiled),
 * before the arena and the device's own memory were allocated; -1 where
 * unknown. Any pointer may be NULL. */
void sc_session_memory(const sc_session *s, sc_device_memory *planned,
                       sc_device_memory *allocated, int64_t *rss_before,
                       int64_t *peak_before);
/* The process's resident set now (*rss, VmRSS) and at its peak (*peak,
 * VmHWM), in bytes, from /proc/self/status; false (both -1) where it
 * cannot be read. Either pointer may be NULL. */
bool sc_process_memory(int64_t *rss, int64_t *peak);
/* The CPU device's direct convolutions' lines (SC_MEM_CONV_*) of program
 * p run by `threads` pool threads on this host (an sc_conv_memory_fn):
 * oneDNN's primitives are made as the device makes them at prepare (its
 * step scratch and shadows allocated, untouched, and freed), sized and
 * destroyed. Errors: out of memory. */
sc_status sc_cpu_plan_convs(const sc_program *p, int threads, sc_device_memory *m,
                            sc_diag *diag);
/* sc_device_target_host with its conv_memory: sc_cpu_plan_convs. */
void sc_runtime_target_host(sc_device_target *t);
double sc_session_compile_seconds(const sc_session *s);
int sc_session_threads(const sc_session *s); /* threads the device uses */
void sc_session_destroy(sc_session *s);

#endif
