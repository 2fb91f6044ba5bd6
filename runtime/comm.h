/* comm.h — communicators: collectives and point-to-point between ranks.
 *
 * One interface, several backends, chosen when the communicator is created:
 *
 *   local   ranks are threads of one process (sc_comm_local_create_group
 *           makes every rank's handle at once; each thread then uses its own)
 *   cuda-local  thread-ranks sharing one GPU (sc_comm_cuda_local_create_group):
 *           device buffers, operations enqueued on each rank's stream
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
  const char *name; /* "local", "cuda-local", "tcp", "mpi", "nccl" */
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
  /* Optional: send to one peer and receive from another as one operation
   * (NCCL: a group of the two calls, which then wait for each other, not
   * the send for its receive). NULL: the send, then the receive — right
   * where sends are buffered (local, cuda-local, tcp, MPI). */
  sc_status (*send_recv)(sc_comm *c, const void *send, int dst, void *recv, int src,
                         int64_t count, sc_dtype t, int tag, sc_diag *diag);
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
  bool capturable; /* its stream-mode operations may be captured in a CUDA
                      graph (true unless the backend says otherwise:
                      cuda-local, whose ranks order each other's streams) */
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

/* size handles of a `cuda-local` group (runtime/comm_cuda_local.c):
 * thread-ranks of this process sharing one CUDA device. Without a stream
 * (sc_comm_set_stream) an operation works on host memory as `local`'s;
 * with one, the buffers are device memory of the shared context and the
 * operation is enqueued on the stream, ordered against the other ranks'
 * streams by events, and returns without waiting for the device. At most
 * SC_CUDA_REDUCE_SRCS (16) ranks per group on a stream. */
sc_status sc_comm_cuda_local_create_group(int size, sc_comm **comms, sc_diag *diag);

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
  const char *program_hash; /* the "env" bootstrap admits only ranks with this
                               hex digest of what every rank runs (as
                               sc_comm_tcp_opts's); NULL or "": none */
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

/* Stream mode (the CUDA device, with NCCL or cuda-local): operations on c
 * are enqueued on the CUDA stream `stream` (a CUstream / cudaStream_t) and
 * return without waiting; the caller orders them with events and waits for
 * the stream, calling sc_comm_poll meanwhile to learn of a failed or
 * aborted peer. SC_ERR_UNSUPPORTED for a backend whose buffers are host
 * memory (local, tcp, mpi). */
sc_status sc_comm_set_stream(sc_comm *c, void *stream, sc_diag *diag);
bool sc_comm_has_streams(const sc_comm *c);
/* c->capturable: whether operations on c's stream may be captured in a
 * CUDA graph. */
bool sc_comm_capturable(const sc_comm *c);
/* SC_OK, or the asynchronous failure of c's operations so far (stream
 * mode; backends without it: always SC_OK). */
sc_status sc_comm_poll(sc_comm *c, sc_diag *diag);

/* Backends this build has, comma-separated: "local,tcp,mpi". */
const char *sc_comm_backends(void);

/* ---- the communicators a run may name: shardc's --comm and the API's
 * sc_run_opts.comm read this one table (runtime/comm.c) ---- */
typedef struct sc_comm_choice {
  const char *name;     /* "local", "cuda-local", "mpi", "tcp", "nccl" */
  bool world;           /* one rank per process: sc_comm_world_create */
  const char *gpu_only; /* why it needs the cuda device (its buffers are
                           GPU memory), or NULL: any device */
} sc_comm_choice;
/* The kind called name, or NULL (NULL for a NULL name). */
const sc_comm_choice *sc_comm_choice_find(const char *name);
/* Every kind's name quoted, for a message: "'local', ... or 'nccl'". */
const char *sc_comm_choice_names(void);
/* This process's communicator of world kind k: mpi under mpirun; tcp from
 * RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT; nccl bootstrapped over
 * MPI under mpirun, else over those variables (the GPU: LOCAL_RANK's, or
 * the rank's modulo the count). tcp and NCCL's env bootstrap admit only
 * ranks with program_hash (what every rank runs: sc_dist_program_hash).
 * SC_ERR_USAGE for a kind that is not a world. */
sc_status sc_comm_world_create(const sc_comm_choice *k, const char *program_hash, sc_comm **world,
                               sc_diag *diag);
/* SC_OK when world has n_ranks ranks; else a usage error naming `option`
 * (the caller's word for the setting, "--comm mpi") that says how to start
 * that many (mpirun -np N; for tcp and nccl, WORLD_SIZE and the rest). */
sc_status sc_comm_world_check(const sc_comm_choice *k, const char *option, const sc_comm *world,
                              int64_t n_ranks, sc_diag *diag);

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
/* Sends count elements of send to rank dst and receives count elements
 * from rank src into recv (tag as send/recv's; the buffers must not
 * overlap; dst and src other ranks, possibly the same one). Matches a
 * peer's sc_comm_send/sc_comm_recv or its own send_recv. Every rank of a
 * ring calling it with dst = r + s, src = r − s (mod size) moves each
 * block one step around without a cycle of blocked sends, on NCCL too
 * (context parallelism's ring, docs/context-parallel.md; all_to_all on
 * NCCL is the same group with every peer). Traced as a send then a recv. */
sc_status sc_comm_send_recv(sc_comm *c, const void *send, int dst, void *recv, int src,
                            int64_t count, sc_dtype t, int tag, sc_diag *diag);
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
 * addr:port (sc_comm_listen_master's rule), and serves id (id_bytes, at
 * most 4096) to each of the size - 1 other ranks, which connect (retrying
 * until the timeout), pass the handshake below (the job's identity from
 * the environment and program_hash, as the tcp communicator's; NULL or ""
 * for none) and read it into id. Every step is bounded by timeout_s; a
 * failure is SC_ERR_IO naming the address and the cause (a program that
 * differs names both hashes). addr is a numeric IPv4 address or a host
 * name. */
sc_status sc_comm_bootstrap_tcp(const char *addr, int port, int rank, int size,
                                const char *program_hash, void *id, size_t id_bytes,
                                double timeout_s, sc_diag *diag);
/* Socket helpers for the TCP backends: a monotonic clock in seconds; all n
 * bytes read or written on fd before deadline (false on error, EOF or
 * timeout); addr (numeric IPv4 or a host name) and port resolved. */
struct sockaddr_in;
double sc_comm_now_s(void);
bool sc_comm_io_all(int fd, void *buf, size_t n, bool writing, double deadline);
sc_status sc_comm_resolve(const char *addr, int port, struct sockaddr_in *sa, sc_diag *diag);

/* ---- who may join: the bootstrap handshake (runtime/comm_handshake.c) ----
 *
 * Every connection of a TCP bootstrap (the tcp communicator's, NCCL's env
 * bootstrap) starts with a handshake before anything else is believed:
 * the connecting rank sends a hello (protocol magic and version, its rank,
 * the world size, the job's identity, the program's hash, a fresh random
 * nonce); the accepting side answers with its own (or a refusal naming
 * the cause and both sides), the connecting side confirms (or refuses),
 * and the accepting side gives its verdict. With SHARDC_JOB_TOKEN set on
 * both sides, each proves that it holds the token with an HMAC-SHA-256
 * over both hellos (both nonces): the token itself never travels. The
 * accepting side serves any number of connections at once, each with its
 * own deadline (SHARDC_COMM_HANDSHAKE_TIMEOUT, default 5 s, at most the
 * whole timeout): a silent, slow or garbled connection, an out-of-range or
 * duplicate rank, another job, another program or a failed HMAC is
 * refused and closed, with a warning on stderr, and the wait goes on for
 * the real rank. docs/comm.md, "Security". */
enum { SC_COMM_JOB_MAX = 160, SC_COMM_PROGRAM_MAX = 72, SC_COMM_KEY_MAX = 64 };

typedef struct sc_comm_ident {
  /* The job: "SHARDC_JOB_TOKEN" when the token is set (the token is then
   * the identity, checked by the HMAC), else the launcher's run id
   * ("TORCHELASTIC_RUN_ID=...", "SLURM_JOB_ID=J.S", "OMPI_JOBID=..."),
   * else "" (none: every job matches). */
  char job[SC_COMM_JOB_MAX];
  char program[SC_COMM_PROGRAM_MAX]; /* the program's hash (hex), "" none */
  bool token;
  uint8_t key[SC_COMM_KEY_MAX];      /* the HMAC key: the token (hashed
                                        when longer than 64 bytes) */
  size_t key_bytes;
  double handshake_s;                /* a connection's deadline */
} sc_comm_ident;

/* HMAC-SHA-256 (RFC 2104) of msg under key. */
void sc_hmac_sha256(const void *key, size_t key_bytes, const void *msg, size_t n,
                    uint8_t mac[32]);
/* The identity of this process's job from the environment (above), with
 * program_hash (hex digits, at most 64; NULL or "" for none) and the
 * handshake deadline (SHARDC_COMM_HANDSHAKE_TIMEOUT seconds, default 5,
 * at most timeout_s). SC_ERR_USAGE for a bad hash or an empty token. */
sc_status sc_comm_ident_init(sc_comm_ident *id, const char *program_hash, double timeout_s,
                             sc_diag *diag);

/* A listening socket for the address rank 0 is reached at (sa; port 0:
 * any free one): bound to that address when it is one of this machine's,
 * to every interface when it is not (a multi-node job reached through an
 * address this machine does not hold) or when SHARDC_BIND_ALL=1. Returns
 * the socket (sa then holds what it is bound to, *all whether every
 * interface), or -1 with errno set. */
int sc_comm_listen(struct sockaddr_in *sa, int backlog, bool *all);
/* Connects to sa, retrying every 50 ms while nobody listens, until
 * deadline; the socket, or -1 with the last error in *err. */
int sc_comm_connect_retry(const struct sockaddr_in *sa, double deadline, int *err);

typedef struct sc_comm_hs_server sc_comm_hs_server;
/* The accepting side of the handshake on listening socket ls, as rank
 * `rank` of `size`, for protocol `magic`; where names it in messages
 * ("rank 0 at 127.0.0.1:29500"). id must outlive it. NULL: no memory. */
sc_comm_hs_server *sc_comm_hs_server_create(int ls, const sc_comm_ident *id, uint32_t magic,
                                            int rank, int size, const char *where);
/* Accepts connections and runs their handshakes until one rank in
 * [lo, size), other than this one and not taken[rank], is admitted: its
 * socket (blocking again), with *peer its rank, *arg its hello's argument
 * (the tcp communicator's listening port) and *from its address; or -1
 * when deadline passes first. Every refusal is warned about on stderr and
 * remembered (sc_comm_hs_refusal). */
int sc_comm_hs_accept(sc_comm_hs_server *s, int lo, const bool *taken, double deadline,
                      int *peer, int32_t *arg, struct sockaddr_in *from);
/* The last refusal ("connection from A:P: REASON"), or "" for none. */
const char *sc_comm_hs_refusal(const sc_comm_hs_server *s);
void sc_comm_hs_server_destroy(sc_comm_hs_server *s); /* closes pending ones */
/* The connecting side on connected socket fd: rank `rank` of `size`,
 * expecting to meet rank `peer`, sending arg; `where` names the peer.
 * Waits for the answers until deadline. SC_OK, or SC_ERR_IO with the
 * cause (a refusal names both sides; a failed HMAC says so). */
sc_status sc_comm_hs_connect(int fd, const sc_comm_ident *id, uint32_t magic, int rank,
                             int size, int peer, int32_t arg, const char *where,
                             double deadline, sc_diag *diag);

/* The `tcp` communicator: one rank per process, the world bootstrapped from
 * RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's, or Slurm's
 * SLURM_PROCID and SLURM_NTASKS when RANK and WORLD_SIZE are unset), no MPI
 * (runtime/comm_tcp.c). Every connection passes the handshake above with
 * the job's identity and opts->program_hash. */
typedef struct sc_comm_tcp_opts {
  const char *program_hash; /* hex digest of what every rank runs (the
                               distributed program), NULL or "": none */
} sc_comm_tcp_opts;
/* opts may be NULL (no program hash). */
sc_status sc_comm_tcp_create(const sc_comm_tcp_opts *opts, sc_comm **out, sc_diag *diag);
/* RANK, WORLD_SIZE, MASTER_ADDR (copied into addr), MASTER_PORT from the
 * environment; SC_ERR_USAGE naming the variable that is missing or bad. */
sc_status sc_comm_env_read(int *rank, int *size, char *addr, size_t addr_bytes, int *port,
                           sc_diag *diag);

#endif
