/* comm.h — communicators: collectives and point-to-point between ranks.
 *
 * One interface, three backends, chosen when the communicator is created:
 *
 *   local   ranks are threads of one process (sc_comm_local_create_group
 *           makes every rank's handle at once; each thread then uses its own)
 *   mpi     ranks are Open MPI processes (sc_comm_mpi_create, under mpirun)
 *   nccl    ranks are GPUs (sc_comm_nccl_create, bootstrapped through MPI or
 *           through RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as torchrun and
 *           Slurm set them); buffers are device pointers
 *
 * Like the device interface (runtime/device.h), a backend is a const table
 * of functions (sc_comm_iface) plus a context; sc_comm_* below check their
 * arguments once and dispatch. A tour:
 *
 *   sc_comm **r = ...;  sc_comm_local_create_group(4, r, &d);
 *   // in thread i, with comm c = r[i]:
 *   sc_comm_all_reduce(c, x, x, n, SC_DTYPE_F32, SC_REDUCE_SUM, &d); // in place
 *   sc_comm_split(c, color, key, &tp, &d);   // a sub-group over a mesh axis
 *   if (bad) sc_comm_abort(c, "bad input");  // every rank then fails fast
 *   sc_comm_destroy(c);
 *
 * Layouts: all_gather concatenates along the leading dimension (recv holds
 * size × count elements, rank r's at r × count); reduce_scatter reads
 * size × count and rank r receives the reduction of chunk r; all_to_all
 * sends chunk q of send to rank q, which stores it as chunk r of recv.
 *
 * Reductions: sum, max and min on f32, f64, f16 and bf16 (the 16-bit types
 * are accumulated in f32 and rounded once) and on every integer type
 * (sums wrap). The order in which contributions are added differs between
 * backends (local: rank order 0..size-1, identical on every rank; MPI and
 * NCCL: the library's algorithm), so floating sums agree across backends
 * only to rounding — tests compare with a relative tolerance.
 *
 * Every collective is called by every rank of the communicator, in the same
 * order, with the same count and dtype (SPMD). With SHARDC_COMM_TRACE=DIR
 * each rank appends every call it makes to DIR/rank<world rank>.trace, one
 * line "<group> r<rank in group> <op> <count> <dtype>[ <peer> <tag>]", the
 * group named by how it was split from the world: a test then checks that
 * all members of a group made the same calls (a mismatch is the first cause
 * of hangs on NCCL, which cannot tell). send/recv match on
 * (peer, tag), in order per (peer, tag); local and MPI sends are buffered
 * (the data is copied and the call returns: a pipelined training step's
 * crossing sends rely on it); NCCL's may block until the matching recv
 * starts, so inference pipelines order them without cycles anyway. Tags
 * are in [0, SC_COMM_TAG_MAX].
 *
 * Failures (docs/comm.md): every blocking wait is bounded. After
 * sc_comm_abort on any rank, every pending and later operation on every
 * communicator derived from the same world fails with SC_ERR_IO and
 * "rank R aborted: MESSAGE" (local), or the job ends (MPI_Abort under
 * mpirun; ncclCommAbort for NCCL). A collective stuck longer than
 * SHARDC_COMM_TIMEOUT seconds (default 300) fails with SC_ERR_IO and aborts
 * the world. Errors of the underlying library become SC_ERR_IO with the
 * call and the library's message. Bad arguments are SC_ERR_USAGE; a dtype
 * the operation cannot handle is SC_ERR_UNSUPPORTED, as is a backend that
 * this build lacks ("built without MPI").
 *
 * Threading: one thread uses a handle at a time; different handles of the
 * same local group are used by different threads concurrently. A session
 * runs async collectives on threads of its own (sc_comm_any_thread says
 * whether the backend allows it), one per communicator when different
 * communicators may be used at once (sc_comm_concurrent: local and tcp
 * always, MPI when the library provides THREAD_MULTIPLE, which shardc
 * asks for). */
#ifndef SC_RUNTIME_COMM_H
#define SC_RUNTIME_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base.h"
#include "ir/dtype.h"
#include "ir/op_comm.h" /* SC_COMM_TAG_MAX */

typedef enum sc_reduce_op {
  SC_REDUCE_SUM,
  SC_REDUCE_MAX,
  SC_REDUCE_MIN,
  SC_REDUCE_COUNT
} sc_reduce_op;

#define SC_COMM_DEFAULT_TIMEOUT_S 300.0

typedef struct sc_comm sc_comm;

/* A backend. Arguments have been checked by the sc_comm_* wrappers: counts
 * are >= 0, buffers non-NULL when count > 0, peers in range, dtypes
 * supported for the operation. Each function returns SC_OK or a status
 * with a message in *diag. */
typedef struct sc_comm_iface {
  const char *name; /* "local", "mpi", "nccl" */
  sc_status (*all_reduce)(sc_comm *c, const void *send, void *recv, int64_t count,
                          sc_dtype t, sc_reduce_op op, sc_diag *diag);
  sc_status (*all_gather)(sc_comm *c, const void *send, void *recv, int64_t count,
                          sc_dtype t, sc_diag *diag);
  sc_status (*reduce_scatter)(sc_comm *c, const void *send, void *recv, int64_t count,
                              sc_dtype t, sc_reduce_op op, sc_diag *diag);
  sc_status (*all_to_all)(sc_comm *c, const void *send, void *recv, int64_t count,
                          sc_dtype t, sc_diag *diag);
  sc_status (*send)(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                    int tag, sc_diag *diag);
  sc_status (*recv)(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                    sc_diag *diag);
  sc_status (*barrier)(sc_comm *c, sc_diag *diag);
  /* *out = NULL for a rank that passed color < 0. */
  sc_status (*split)(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag);
  /* Optional (NCCL): enqueue later operations on this CUDA stream and
   * return once they are enqueued (stream NULL: back to waiting for each);
   * poll: the asynchronous error so far, without waiting. */
  sc_status (*set_stream)(sc_comm *c, void *stream, sc_diag *diag);
  sc_status (*poll)(sc_comm *c, sc_diag *diag);
  void (*abort)(sc_comm *c, const char *msg);
  void (*destroy)(sc_comm *c);
} sc_comm_iface;

/* A communicator handle. Backends allocate it (sc_comm_alloc) and own ctx;
 * users read it only through the accessors. */
struct sc_comm {
  const sc_comm_iface *iface;
  void *ctx;  /* backend state */
  int rank;   /* 0 <= rank < size */
  int size;
  bool any_thread; /* calls may come from a thread other than the one that
                      made the handle, one thread at a time (true unless the
                      backend says otherwise: MPI below THREAD_SERIALIZED) */
  bool concurrent; /* different communicators of one world may be used at
                      once by different threads (true unless the backend
                      says otherwise: MPI below THREAD_MULTIPLE, NCCL) */
  /* the collective trace (SHARDC_COMM_TRACE, comm.c): set by comm.c, not
   * by backends; "" means a world */
  char trace_id[96];  /* the group: "w", then ".<split number>:<color>" per split */
  int trace_rank;     /* the rank in the world this handle descends from */
  int n_splits;       /* splits made of this handle so far */
};

/* ---- creation ---- */

/* size handles, one per thread-rank, sharing one group: comms[i] has rank
 * i. Each is destroyed by its user; the group goes with the last one. */
sc_status sc_comm_local_create_group(int size, sc_comm **comms, sc_diag *diag);

/* The MPI_COMM_WORLD communicator (a duplicate, errors returned, not
 * fatal). Calls MPI_Init_thread if MPI is not initialised yet; the last
 * destroy of a communicator created this way then calls MPI_Finalize.
 * SC_ERR_UNSUPPORTED in a build without MPI. */
sc_status sc_comm_mpi_create(sc_comm **out, sc_diag *diag);

typedef struct sc_comm_nccl_opts {
  const char *bootstrap; /* "mpi" or "env" (RANK, WORLD_SIZE, MASTER_ADDR,
                            MASTER_PORT); NULL = "env" */
  int device;            /* CUDA device index; < 0 = LOCAL_RANK or rank % n */
  double timeout_s;      /* bootstrap and wait bound; <= 0 = SHARDC_COMM_TIMEOUT */
} sc_comm_nccl_opts;

/* A NCCL communicator over the GPU `device` on its own CUDA stream; every
 * operation waits for its completion (bounded, polling
 * ncclCommGetAsyncError). SC_ERR_UNSUPPORTED in a build without NCCL. */
sc_status sc_comm_nccl_create(const sc_comm_nccl_opts *o, sc_comm **out, sc_diag *diag);

/* A module of shardc's (file, e.g. "libshardc_comm_mpi.so" or
 * "fakecuda/libcuda.so.1") opened with dlopen flags `mode`, looked for in
 * $SHARDC_MODULE_DIR, next to the shardc library (and its shardc/ and
 * ../lib/shardc/ folders), then the install folder; NULL and
 * SC_ERR_UNSUPPORTED naming it when none loads (runtime/comm_module.c). */
void *sc_module_open(const char *file, int mode, sc_diag *diag);

/* Stream mode (the CUDA device, with NCCL): operations on c are enqueued on
 * the CUDA stream `stream` (a CUstream / cudaStream_t) and return without
 * waiting; the caller orders them with events and waits for the stream,
 * calling sc_comm_poll meanwhile to learn of a failed or aborted peer.
 * SC_ERR_UNSUPPORTED for a backend whose buffers are host memory (local,
 * tcp, mpi). */
sc_status sc_comm_set_stream(sc_comm *c, void *stream, sc_diag *diag);
bool sc_comm_has_streams(const sc_comm *c);
/* SC_OK, or the asynchronous failure of c's operations so far (stream
 * mode; backends without it: always SC_OK). */
sc_status sc_comm_poll(sc_comm *c, sc_diag *diag);

/* Backends this build has, comma-separated: "local,tcp,mpi". */
const char *sc_comm_backends(void);

/* ---- operations (see the layouts above) ---- */
int sc_comm_rank(const sc_comm *c);
/* c->any_thread: whether a session may run c's collectives on its
 * communication thread (runtime/session.c). */
bool sc_comm_any_thread(const sc_comm *c);
/* c->concurrent: whether a session may give each communicator its own
 * communication thread (one queue per communicator). */
bool sc_comm_concurrent(const sc_comm *c);
int sc_comm_size(const sc_comm *c);
const char *sc_comm_backend(const sc_comm *c);

/* send == recv is allowed (in place). */
sc_status sc_comm_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_reduce_op op, sc_diag *diag);
/* send count elements; recv size × count. send may be recv + rank × count. */
sc_status sc_comm_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_diag *diag);
/* send size × count elements; recv count; the buffers must not overlap. */
sc_status sc_comm_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_reduce_op op, sc_diag *diag);
/* send and recv size × count elements each, not overlapping. */
sc_status sc_comm_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                             sc_dtype t, sc_diag *diag);
sc_status sc_comm_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                       int tag, sc_diag *diag);
/* Fails if the matching send's count differs (MPI, local). */
sc_status sc_comm_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                       sc_diag *diag);
sc_status sc_comm_barrier(sc_comm *c, sc_diag *diag);
/* MPI_Comm_split: ranks with the same color form a group, ordered by
 * (key, old rank); color < 0 gives *out = NULL. Collective. */
sc_status sc_comm_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag);
/* Ends the job with msg: prints "shardc: error: rank R: MSG" on stderr,
 * then local: marks the world aborted (every rank's pending and later
 * operations fail with "rank R aborted: MSG") and returns; mpi: MPI_Abort
 * (does not return); nccl: ncclCommAbort, then MPI_Abort when bootstrapped
 * through MPI. */
void sc_comm_abort(sc_comm *c, const char *msg);
void sc_comm_destroy(sc_comm *c); /* NULL is a no-op */

/* ---- shared helpers (runtime/comm.c), for backends and tests ---- */

/* Handle with iface, ctx, rank and size set; NULL on allocation failure. */
sc_comm *sc_comm_alloc(const sc_comm_iface *iface, void *ctx, int rank, int size);
/* SHARDC_COMM_TIMEOUT in seconds, or SC_COMM_DEFAULT_TIMEOUT_S when unset
 * or not a positive number. */
double sc_comm_timeout_s(void);
/* Whether op can reduce dtype t. */
bool sc_comm_can_reduce(sc_dtype t);
/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n_src-1][i] for i in
 * [0, count), in that order; 16-bit floats accumulate in f32. dst may be
 * one of the sources. */
void sc_comm_reduce_arrays(sc_dtype t, sc_reduce_op op, const void *const *srcs, int n_src,
                           void *dst, int64_t count);
const char *sc_reduce_op_name(sc_reduce_op op);

/* The env bootstrap (NCCL's, testable without NCCL): rank 0 listens on
 * addr:port, and serves id (id_bytes, at most 4096) to each of the
 * size - 1 other ranks, which connect (retrying until the timeout) and read
 * it into id. Every step is bounded by timeout_s; a failure is SC_ERR_IO
 * naming the address and the cause. addr is a numeric IPv4 address or a
 * host name. */
sc_status sc_comm_bootstrap_tcp(const char *addr, int port, int rank, int size, void *id,
                                size_t id_bytes, double timeout_s, sc_diag *diag);
/* Socket helpers for the TCP backends: a monotonic clock in seconds; all n
 * bytes read or written on fd before deadline (false on error, EOF or
 * timeout); addr (numeric IPv4 or a host name) and port resolved. */
struct sockaddr_in;
double sc_comm_now_s(void);
bool sc_comm_io_all(int fd, void *buf, size_t n, bool writing, double deadline);
sc_status sc_comm_resolve(const char *addr, int port, struct sockaddr_in *sa, sc_diag *diag);
/* The `tcp` communicator: one rank per process, the world bootstrapped from
 * RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's, or Slurm's
 * SLURM_PROCID and SLURM_NTASKS when RANK and WORLD_SIZE are unset), no MPI
 * (runtime/comm_tcp.c). */
sc_status sc_comm_tcp_create(sc_comm **out, sc_diag *diag);
/* RANK, WORLD_SIZE, MASTER_ADDR (copied into addr), MASTER_PORT from the
 * environment; SC_ERR_USAGE naming the variable that is missing or bad. */
sc_status sc_comm_env_read(int *rank, int *size, char *addr, size_t addr_bytes, int *port,
                           sc_diag *diag);

#endif
