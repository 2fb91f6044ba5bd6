/* comm_nccl.c — the `nccl` communicator: ranks are GPUs; buffers are device
 * pointers.
 *
 * Creation: the ranks agree on a ncclUniqueId made by rank 0, either over
 * MPI (bootstrap "mpi": an all_gather of the 128 bytes through the `mpi`
 * communicator, which stays alive as the world's out-of-band channel) or
 * over TCP from the environment torchrun and Slurm set (bootstrap "env":
 * RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; sc_comm_bootstrap_tcp in
 * comm.c, whose handshake admits only ranks with the same job, token and
 * opts->program_hash, as the tcp communicator's). The communicator is created non-blocking (ncclConfig_t.blocking
 * = 0) so that initialisation, too, is polled with a deadline.
 *
 * Every operation is enqueued on the communicator's own CUDA stream and
 * then waited for by polling cudaStreamQuery and ncclCommGetAsyncError
 * until SHARDC_COMM_TIMEOUT; a NCCL error or the timeout calls
 * ncclCommAbort (peers blocked in the same collective then see their own
 * error) and returns SC_ERR_IO with ncclGetErrorString's text. 16-bit
 * floats are reduced by NCCL in their own type (not in f32 as on the CPU
 * backends). NCCL has no tags: send/recv pairs match in call order.
 *
 * Only this file includes <nccl.h> and <cuda_runtime.h>. It is built as its
 * own module, libshardc_comm_nccl.so, linked with NCCL and cudart and
 * loaded by runtime/comm_module.c when a nccl communicator is first
 * created. It is exercised on GPUs in the GPU-runtime issue; here it
 * compiles and links. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/device_memory.h" /* SC_NCCL_SCRATCH_BYTES: the plan counts it */
#include "runtime/comm.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h: f() declarations */
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop

typedef struct nccl_ctx {
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  double timeout_s;
  sc_comm *oob;   /* the MPI world used to bootstrap, or NULL (owned by the
                     world communicator, borrowed by splits) */
  bool owns_oob;
  void *scratch;  /* 4 device bytes for barrier */
  cudaStream_t user; /* stream mode (sc_comm_set_stream): the caller's stream */
} nccl_ctx;

static const sc_comm_iface nccl_iface;

static nccl_ctx *X(sc_comm *c) { return c->ctx; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec ts = {0, 50 * 1000};
  nanosleep(&ts, NULL);
}

static sc_status nccl_fail(ncclResult_t r, const char *call, int rank, sc_diag *diag) {
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "rank %d: %s failed: %s", rank, call,
                     ncclGetErrorString(r));
}

static sc_status cuda_check(cudaError_t e, const char *call, int rank, sc_diag *diag) {
  if (e == cudaSuccess) return SC_OK;
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "rank %d: %s failed: %s", rank, call,
                     cudaGetErrorString(e));
}

/* Waits for a non-blocking communicator's pending call (ncclInProgress) to
 * settle; aborts the communicator on error or timeout. */
static sc_status nccl_settle(ncclComm_t comm, ncclResult_t r, const char *call, int rank,
                             double timeout_s, sc_diag *diag) {
  double deadline = now_s() + timeout_s;
  while (r == ncclInProgress) {
    if (now_s() > deadline) {
      ncclCommAbort(comm);
      return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                         "rank %d: %s timed out after %g s (SHARDC_COMM_TIMEOUT)", rank, call,
                         timeout_s);
    }
    nap();
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
  }
  if (r == ncclSuccess) return SC_OK;
  ncclCommAbort(comm);
  return nccl_fail(r, call, rank, diag);
}

#define NCCL_CALL(c, call) nccl_settle(X(c)->comm, (call), #call, (c)->rank, X(c)->timeout_s, diag)

/* The stream operations go to: the caller's in stream mode, else our own. */
static cudaStream_t S(sc_comm *c) { return X(c)->user ? X(c)->user : X(c)->stream; }

/* NCCL's asynchronous error so far, without waiting; aborts on one. */
static sc_status nccl_poll(sc_comm *c, sc_diag *diag) {
  ncclResult_t ar = ncclSuccess;
  ncclCommGetAsyncError(X(c)->comm, &ar);
  if (ar == ncclSuccess || ar == ncclInProgress) return SC_OK;
  ncclCommAbort(X(c)->comm);
  return nccl_fail(ar, "a collective", c->rank, diag);
}

static sc_status nccl_set_stream(sc_comm *c, void *stream, sc_diag *diag) {
  (void)diag;
  X(c)->user = (cudaStream_t)stream;
  return SC_OK;
}

/* Waits for the stream, polling NCCL's asynchronous error (in stream mode
 * the caller waits: only the error so far). */
static sc_status nccl_wait(sc_comm *c, const char *what, sc_diag *diag) {
  nccl_ctx *x = X(c);
  if (x->user) return nccl_poll(c, diag);
  double deadline = now_s() + x->timeout_s;
  for (;;) {
    cudaError_t e = cudaStreamQuery(x->stream);
    if (e == cudaSuccess) return SC_OK;
    if (e != cudaErrorNotReady) {
      ncclCommAbort(x->comm);
      return cuda_check(e, what, c->rank, diag);
    }
    ncclResult_t ar = ncclSuccess;
    ncclCommGetAsyncError(x->comm, &ar);
    if (ar != ncclSuccess && ar != ncclInProgress) {
      ncclCommAbort(x->comm);
      return nccl_fail(ar, what, c->rank, diag);
    }
    if (now_s() > deadline) {
      ncclCommAbort(x->comm);
      return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                         "rank %d: %s timed out after %g s (SHARDC_COMM_TIMEOUT)", c->rank,
                         what, x->timeout_s);
    }
    nap();
  }
}

static bool nccl_type(sc_dtype t, ncclDataType_t *out) {
  switch (t) {
  case SC_DTYPE_F32: *out = ncclFloat32; return true;
  case SC_DTYPE_F64: *out = ncclFloat64; return true;
  case SC_DTYPE_F16: *out = ncclFloat16; return true;
  case SC_DTYPE_BF16: *out = ncclBfloat16; return true;
  case SC_DTYPE_I8: *out = ncclInt8; return true;
  case SC_DTYPE_U8: case SC_DTYPE_BOOL: *out = ncclUint8; return true;
  case SC_DTYPE_I32: *out = ncclInt32; return true;
  case SC_DTYPE_U32: *out = ncclUint32; return true;
  case SC_DTYPE_I64: *out = ncclInt64; return true;
  case SC_DTYPE_U64: *out = ncclUint64; return true;
  default: return false;
  }
}

static ncclRedOp_t nccl_op(sc_reduce_op op) {
  return op == SC_REDUCE_SUM ? ncclSum : op == SC_REDUCE_MAX ? ncclMax : ncclMin;
}

static sc_status type_of(sc_comm *c, sc_dtype t, const char *what, ncclDataType_t *nt,
                         sc_diag *diag) {
  if (nccl_type(t, nt)) return SC_OK;
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "%s: NCCL has no dtype %s", what,
                     sc_dtype_name(t));
}

static sc_status nccl_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  ncclDataType_t nt;
  sc_status st = type_of(c, t, "all_reduce", &nt, diag);
  if (!st)
    st = NCCL_CALL(c, ncclAllReduce(send, recv, (size_t)count, nt, nccl_op(op), X(c)->comm, S(c)));
  return st ? st : nccl_wait(c, "all_reduce", diag);
}

static sc_status nccl_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_diag *diag) {
  size_t bytes = (size_t)count * sc_dtype_size(t);
  sc_status st =
      NCCL_CALL(c, ncclAllGather(send, recv, bytes, ncclUint8, X(c)->comm, S(c)));
  return st ? st : nccl_wait(c, "all_gather", diag);
}

static sc_status nccl_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                     sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  ncclDataType_t nt;
  sc_status st = type_of(c, t, "reduce_scatter", &nt, diag);
  if (!st)
    st = NCCL_CALL(c, ncclReduceScatter(send, recv, (size_t)count, nt, nccl_op(op),
                                        X(c)->comm, S(c)));
  return st ? st : nccl_wait(c, "reduce_scatter", diag);
}

/* Enqueues, inside an open NCCL group, a send of bytes to dst and a
 * receive of bytes from src: the piece that all_to_all (every peer) and
 * send_recv (one pair) share. */
static sc_status enqueue_pair(sc_comm *c, const void *send, int dst, void *recv, int src,
                              size_t bytes, sc_diag *diag) {
  sc_status st = NCCL_CALL(c, ncclSend(send, bytes, ncclUint8, dst, X(c)->comm, S(c)));
  return st ? st : NCCL_CALL(c, ncclRecv(recv, bytes, ncclUint8, src, X(c)->comm, S(c)));
}

static sc_status nccl_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                                 sc_dtype t, sc_diag *diag) {
  size_t bytes = (size_t)count * sc_dtype_size(t);
  sc_status st = NCCL_CALL(c, ncclGroupStart());
  for (int q = 0; !st && q < c->size; q++)
    st = enqueue_pair(c, (const char *)send + bytes * (size_t)q, q,
                      (char *)recv + bytes * (size_t)q, q, bytes, diag);
  sc_status end = NCCL_CALL(c, ncclGroupEnd());
  if (!st) st = end;
  return st ? st : nccl_wait(c, "all_to_all", diag);
}

/* tag: none on NCCL (pairs match in call order, above) */
static sc_status nccl_send_recv(sc_comm *c, const void *send, int dst, void *recv, int src,
                                int64_t count, sc_dtype t, int tag, sc_diag *diag) {
  (void)tag;
  size_t bytes = (size_t)count * sc_dtype_size(t);
  sc_status st = NCCL_CALL(c, ncclGroupStart());
  if (!st) st = enqueue_pair(c, send, dst, recv, src, bytes, diag);
  sc_status end = NCCL_CALL(c, ncclGroupEnd());
  if (!st) st = end;
  return st ? st : nccl_wait(c, "send_recv", diag);
}

static sc_status nccl_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                           int tag, sc_diag *diag) {
  size_t bytes = (size_t)count * sc_dtype_size(t);
  sc_status st =
      NCCL_CALL(c, ncclSend(buf, bytes, ncclUint8, peer, X(c)->comm, S(c)));
  return st ? st : nccl_wait(c, "send", diag);
}

static sc_status nccl_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                           sc_diag *diag) {
  size_t bytes = (size_t)count * sc_dtype_size(t);
  sc_status st =
      NCCL_CALL(c, ncclRecv(buf, bytes, ncclUint8, peer, X(c)->comm, S(c)));
  return st ? st : nccl_wait(c, "recv", diag);
}

static sc_status nccl_barrier(sc_comm *c, sc_diag *diag) {
  return nccl_all_reduce(c, X(c)->scratch, X(c)->scratch, 1, SC_DTYPE_I32, SC_REDUCE_SUM,
                         diag);
}

static void nccl_free_ctx(nccl_ctx *x) {
  if (x->scratch) cudaFree(x->scratch);
  if (x->stream) cudaStreamDestroy(x->stream);
  if (x->owns_oob) sc_comm_destroy(x->oob);
  sc_free(x);
}

/* The per-communicator CUDA state, then the handle. Takes ownership of comm. */
static sc_status wrap(ncclComm_t comm, int device, double timeout_s, sc_comm *oob,
                      bool owns_oob, sc_comm **out, sc_diag *diag) {
  int rank = 0, size = 0;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &size);
  nccl_ctx *x = sc_calloc(1, sizeof *x);
  if (!x) {
    ncclCommAbort(comm);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "nccl communicator: out of memory");
  }
  x->comm = comm;
  x->device = device;
  x->timeout_s = timeout_s;
  x->oob = oob;
  x->owns_oob = owns_oob;
  sc_status st = cuda_check(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags", rank, diag);
  if (!st) st = cuda_check(cudaMalloc(&x->scratch, SC_NCCL_SCRATCH_BYTES), "cudaMalloc", rank, diag);
  sc_comm *c = st ? NULL : sc_comm_alloc(&nccl_iface, x, rank, size);
  if (!st && !c) st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "nccl: out of memory");
  if (c) c->concurrent = false; /* streams per communicator: the GPU runtime's business */
  if (st) {
    ncclCommAbort(comm);
    nccl_free_ctx(x);
    return st;
  }
  *out = c;
  return SC_OK;
}

static sc_status nccl_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  sc_status st = NCCL_CALL(
      c, ncclCommSplit(X(c)->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg));
  if (st) return st;
  if (nc && (st = nccl_settle(nc, ncclInProgress, "ncclCommSplit", c->rank, X(c)->timeout_s,
                              diag)))
    return st;
  if (!nc) return SC_OK; /* NOCOLOR */
  return wrap(nc, X(c)->device, X(c)->timeout_s, X(c)->oob, false, out, diag);
}

static void nccl_abort(sc_comm *c, const char *msg) {
  (void)msg; /* printed by sc_comm_abort */
  ncclCommAbort(X(c)->comm);
  X(c)->comm = NULL;
  if (X(c)->oob) sc_comm_abort(X(c)->oob, msg); /* MPI_Abort: ends the job */
}

static void nccl_destroy(sc_comm *c) {
  nccl_ctx *x = X(c);
  if (x->comm) {
    ncclResult_t r = ncclCommFinalize(x->comm);
    if (nccl_settle(x->comm, r, "ncclCommFinalize", c->rank, x->timeout_s, NULL) == SC_OK)
      ncclCommDestroy(x->comm); /* else nccl_settle aborted it */
  }
  nccl_free_ctx(x);
  sc_free(c);
}

static const sc_comm_iface nccl_iface = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .all_to_all = nccl_all_to_all,
    .send_recv = nccl_send_recv,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .split = nccl_split,
    .set_stream = nccl_set_stream,
    .poll = nccl_poll,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* The module's entry point (runtime/comm_module.c loads it). */
sc_status sc_comm_nccl_module_create(const sc_comm_nccl_opts *o, sc_comm **out,
                                     sc_diag *diag);
sc_status sc_comm_nccl_module_create(const sc_comm_nccl_opts *o, sc_comm **out,
                                     sc_diag *diag) {
  sc_comm_nccl_opts dflt = {0};
  if (!o) o = &dflt;
  if (!out) return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "nccl: NULL out");
  *out = NULL;
  const char *boot = o->bootstrap ? o->bootstrap : "env";
  double timeout_s = o->timeout_s > 0 ? o->timeout_s : sc_comm_timeout_s();
  int rank = 0, size = 1;
  sc_comm *oob = NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  sc_status st = SC_OK;
  if (strcmp(boot, "mpi") == 0) {
    if ((st = sc_comm_mpi_create(&oob, diag))) return st;
    rank = sc_comm_rank(oob);
    size = sc_comm_size(oob);
  } else if (strcmp(boot, "env") == 0) {
    char addr[256];
    int port;
    if ((st = sc_comm_env_read(&rank, &size, addr, sizeof addr, &port, diag))) return st;
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId", rank, diag);
    if ((st = sc_comm_bootstrap_tcp(addr, port, rank, size, o->program_hash, &id, sizeof id,
                                     timeout_s, diag)))
      return st;
  } else {
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "nccl: unknown bootstrap '%s' (expected mpi or env)", boot);
  }
  if (oob) {
    ncclUniqueId *all = sc_calloc((size_t)size, sizeof *all);
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (!all) st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "nccl: out of memory");
    else if (r != ncclSuccess) st = nccl_fail(r, "ncclGetUniqueId", rank, diag);
    /* every rank joins the all_gather even when rank 0 failed: no hang */
    sc_status g = sc_comm_all_gather(oob, &id, all, (int64_t)sizeof id, SC_DTYPE_U8, diag);
    if (!st) st = g;
    if (!st) id = all[0];
    sc_free(all);
    if (st) {
      sc_comm_destroy(oob);
      return st;
    }
  }
  int device = o->device;
  if (device < 0) {
    int n = 0;
    const char *lr = getenv("LOCAL_RANK");
    cudaError_t e = cudaGetDeviceCount(&n);
    if ((st = cuda_check(e, "cudaGetDeviceCount", rank, diag))) goto fail;
    if (n < 1) {
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "rank %d: no CUDA device", rank);
      goto fail;
    }
    device = lr && *lr ? atoi(lr) % n : rank % n;
  }
  if ((st = cuda_check(cudaSetDevice(device), "cudaSetDevice", rank, diag))) goto fail;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    st = nccl_fail(r, "ncclCommInitRankConfig", rank, diag);
    goto fail;
  }
  if ((st = nccl_settle(comm, r, "ncclCommInitRankConfig", rank, timeout_s, diag))) goto fail;
  return wrap(comm, device, timeout_s, oob, oob != NULL, out, diag);
fail:
  if (oob) sc_comm_abort(oob, diag ? diag->msg : "nccl initialisation failed");
  return st;
}

