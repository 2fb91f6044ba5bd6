/* comm_mpi.c — the `mpi` communicator: ranks are Open MPI processes.
 *
 * Each sc_comm owns an MPI communicator (a duplicate of MPI_COMM_WORLD or a
 * split of one) whose error handler is MPI_ERRORS_RETURN, so a failing call
 * becomes SC_ERR_IO carrying the call and MPI_Error_string's text instead of
 * killing the process silently. Collectives map one to one onto MPI's
 * (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall);
 * f16 and bf16 reductions go through an f32 copy (MPI has no such types),
 * so they are summed in f32 as on the local backend. Data movement uses
 * MPI_BYTE; a message of more than INT_MAX elements is SC_ERR_LIMIT. A
 * send is buffered (copied, then MPI_Isend; the copy is freed once MPI says
 * it went, checked at the next send and at destroy), as the local backend's.
 *
 * sc_comm_abort prints the message (comm.c) and calls MPI_Abort: mpirun
 * then kills every other rank and exits non-zero. A killed rank is noticed
 * by mpirun itself, which ends the job.
 *
 * Only this file includes <mpi.h>. It is built as its own module,
 * libshardc_comm_mpi.so, linked with MPI and loaded by runtime/
 * comm_module.c when an mpi communicator is first created: the library and
 * the commands that do not use MPI never load it. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "runtime/comm.h"

#include <mpi.h>

/* A buffered send in flight: its copy of the data and its request. */
typedef struct pending {
  MPI_Request req;
  void *copy;
} pending;

typedef struct mpi_ctx {
  MPI_Comm comm;
  pending *out;       /* sends in flight (comm.h: a send never waits) */
  int n_out, cap_out;
} mpi_ctx;

static int n_live;           /* communicators made here, alive */
static bool we_initialised; /* MPI_Init_thread was ours: finalize at the end */

static const sc_comm_iface mpi_iface;

static MPI_Comm MC(sc_comm *c) { return ((mpi_ctx *)c->ctx)->comm; }

static sc_status mpi_check(int rc, const char *call, int rank, sc_diag *diag) {
  if (rc == MPI_SUCCESS) return SC_OK;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "rank %d: %s failed: %s", rank, call, text);
}
#define MPI_CHECK(call) mpi_check((call), #call, c->rank, diag)

static sc_status as_int(int64_t n, const char *what, int *out, sc_diag *diag) {
  if (n > INT_MAX)
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL,
                       "%s: %lld elements exceed MPI's int count", what, (long long)n);
  *out = (int)n;
  return SC_OK;
}

static MPI_Datatype mpi_type(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F32: case SC_DTYPE_F16: case SC_DTYPE_BF16: return MPI_FLOAT;
  case SC_DTYPE_F64: return MPI_DOUBLE;
  case SC_DTYPE_I8: return MPI_INT8_T;
  case SC_DTYPE_I16: return MPI_INT16_T;
  case SC_DTYPE_I32: return MPI_INT32_T;
  case SC_DTYPE_I64: return MPI_INT64_T;
  case SC_DTYPE_U8: return MPI_UINT8_T;
  case SC_DTYPE_U16: return MPI_UINT16_T;
  case SC_DTYPE_U32: return MPI_UINT32_T;
  case SC_DTYPE_U64: return MPI_UINT64_T;
  default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(sc_reduce_op op) {
  return op == SC_REDUCE_SUM ? MPI_SUM : op == SC_REDUCE_MAX ? MPI_MAX : MPI_MIN;
}

static bool half(sc_dtype t) { return t == SC_DTYPE_F16 || t == SC_DTYPE_BF16; }

/* 16-bit floats <-> f32 copies. */
static float *widen(sc_dtype t, const void *src, int64_t n) {
  float *f = sc_malloc((size_t)n * sizeof *f + 1);
  if (!f) return NULL;
  const uint16_t *h = src;
  for (int64_t i = 0; src && i < n; i++)
    f[i] = t == SC_DTYPE_F16 ? sc_f16_to_f32(h[i]) : sc_bf16_to_f32(h[i]);
  return f;
}
static void narrow(sc_dtype t, const float *f, void *dst, int64_t n) {
  uint16_t *h = dst;
  for (int64_t i = 0; i < n; i++)
    h[i] = t == SC_DTYPE_F16 ? sc_f32_to_f16(f[i]) : sc_f32_to_bf16(f[i]);
}

static sc_status mpi_all_reduce(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  int n = 0;
  sc_status st = as_int(count, "all_reduce", &n, diag);
  if (st) return st;
  if (half(t)) {
    float *f = widen(t, send, count);
    if (!f) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "all_reduce: out of memory");
    st = MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, f, n, MPI_FLOAT, mpi_op(op), MC(c)));
    if (!st) narrow(t, f, recv, count);
    sc_free(f);
    return st;
  }
  return MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mpi_type(t),
                                 mpi_op(op), MC(c)));
}

static sc_status mpi_reduce_scatter(sc_comm *c, const void *send, void *recv, int64_t count,
                                    sc_dtype t, sc_reduce_op op, sc_diag *diag) {
  int n = 0, total = 0;
  sc_status st;
  if ((st = as_int(count, "reduce_scatter", &n, diag)) ||
      (st = as_int(count * c->size, "reduce_scatter", &total, diag)))
    return st;
  if (half(t)) {
    float *f = widen(t, send, count * c->size), *g = widen(t, NULL, count);
    if (!f || !g) st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "reduce_scatter: no memory");
    if (!st)
      st = MPI_CHECK(MPI_Reduce_scatter_block(f, g, n, MPI_FLOAT, mpi_op(op), MC(c)));
    if (!st) narrow(t, g, recv, count);
    sc_free(f);
    sc_free(g);
    return st;
  }
  return MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, mpi_type(t), mpi_op(op), MC(c)));
}

static sc_status mpi_all_gather(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_diag *diag) {
  int n = 0;
  sc_status st = as_int(count * (int64_t)sc_dtype_size(t) * c->size, "all_gather", &n, diag);
  if (st) return st;
  n = (int)(count * (int64_t)sc_dtype_size(t));
  const char *own = (const char *)recv + (size_t)n * (size_t)c->rank;
  return MPI_CHECK(MPI_Allgather(send == (const void *)own ? MPI_IN_PLACE : send, n, MPI_BYTE,
                                 recv, n, MPI_BYTE, MC(c)));
}

static sc_status mpi_all_to_all(sc_comm *c, const void *send, void *recv, int64_t count,
                                sc_dtype t, sc_diag *diag) {
  int n = 0;
  sc_status st = as_int(count * (int64_t)sc_dtype_size(t) * c->size, "all_to_all", &n, diag);
  if (st) return st;
  n = (int)(count * (int64_t)sc_dtype_size(t));
  return MPI_CHECK(MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MC(c)));
}

/* Frees the copies of the sends that completed; all of them with wait. */
static sc_status reap(sc_comm *c, bool wait, sc_diag *diag) {
  mpi_ctx *x = c->ctx;
  int kept = 0;
  sc_status st = SC_OK;
  for (int i = 0; i < x->n_out; i++) {
    int done = 0;
    sc_status r = wait ? MPI_CHECK(MPI_Wait(&x->out[i].req, MPI_STATUS_IGNORE))
                       : MPI_CHECK(MPI_Test(&x->out[i].req, &done, MPI_STATUS_IGNORE));
    if (r && !st) st = r;
    if (wait || done || r) sc_free(x->out[i].copy);
    else x->out[kept++] = x->out[i];
  }
  x->n_out = kept;
  return st;
}

/* Buffered, as the local backend's: the data is copied and sent in the
 * background (MPI_Isend), so a send never waits for its receive (a
 * pipeline's crossing sends would deadlock with MPI_Send's rendezvous). */
static sc_status mpi_send(sc_comm *c, const void *buf, int64_t count, sc_dtype t, int peer,
                          int tag, sc_diag *diag) {
  mpi_ctx *x = c->ctx;
  int n = 0;
  sc_status st = as_int(count * (int64_t)sc_dtype_size(t), "send", &n, diag);
  if (!st) st = reap(c, false, diag);
  if (st) return st;
  if (x->n_out == x->cap_out) {
    int cap = x->cap_out ? 2 * x->cap_out : 16;
    pending *p = sc_realloc(x->out, (size_t)cap * sizeof *p);
    if (!p) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "send: out of memory");
    x->out = p;
    x->cap_out = cap;
  }
  void *copy = sc_malloc(n > 0 ? (size_t)n : 1);
  if (!copy) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "send: out of memory");
  memcpy(copy, buf, (size_t)n);
  pending *p = &x->out[x->n_out];
  if ((st = MPI_CHECK(MPI_Isend(copy, n, MPI_BYTE, peer, tag, MC(c), &p->req)))) {
    sc_free(copy);
    return st;
  }
  p->copy = copy;
  x->n_out++;
  return SC_OK;
}

static sc_status mpi_recv(sc_comm *c, void *buf, int64_t count, sc_dtype t, int peer, int tag,
                          sc_diag *diag) {
  int n = 0, got = 0;
  sc_status st = as_int(count * (int64_t)sc_dtype_size(t), "recv", &n, diag);
  if (st) return st;
  MPI_Status ms;
  if ((st = MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, peer, tag, MC(c), &ms)))) return st;
  MPI_Get_count(&ms, MPI_BYTE, &got);
  if (got != n)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "recv: rank %d expected %d bytes from rank %d (tag %d), got %d", c->rank,
                       n, peer, tag, got);
  return SC_OK;
}

static sc_status mpi_barrier(sc_comm *c, sc_diag *diag) {
  return MPI_CHECK(MPI_Barrier(MC(c)));
}

static sc_status wrap(MPI_Comm comm, sc_comm **out, sc_diag *diag) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  mpi_ctx *x = sc_calloc(1, sizeof *x);
  sc_comm *c = x ? sc_comm_alloc(&mpi_iface, x, rank, size) : NULL;
  if (!c) {
    sc_free(x);
    MPI_Comm_free(&comm);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "mpi communicator: out of memory");
  }
  x->comm = comm;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  c->any_thread = level >= MPI_THREAD_SERIALIZED;
  c->concurrent = level >= MPI_THREAD_MULTIPLE;
  n_live++;
  *out = c;
  return SC_OK;
}

static sc_status mpi_split(sc_comm *c, int color, int key, sc_comm **out, sc_diag *diag) {
  MPI_Comm nc = MPI_COMM_NULL;
  sc_status st =
      MPI_CHECK(MPI_Comm_split(MC(c), color < 0 ? MPI_UNDEFINED : color, key, &nc));
  if (st || nc == MPI_COMM_NULL) return st;
  MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
  return wrap(nc, out, diag);
}

static void mpi_abort(sc_comm *c, const char *msg) {
  (void)msg; /* printed by sc_comm_abort */
  MPI_Abort(MC(c), 1);
}

static void mpi_destroy(sc_comm *c) {
  mpi_ctx *x = c->ctx;
  sc_diag d;
  sc_diag_clear(&d);
  reap(c, true, &d); /* sends in flight complete first */
  sc_free(x->out);
  MPI_Comm_free(&x->comm);
  sc_free(x);
  sc_free(c);
  int fin = 0;
  if (--n_live == 0 && we_initialised && MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
    MPI_Finalize();
}

static const sc_comm_iface mpi_iface = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_to_all = mpi_all_to_all,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .split = mpi_split,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

/* The module's entry point (runtime/comm_module.c loads it). */
sc_status sc_comm_mpi_module_create(sc_comm **out, sc_diag *diag);
sc_status sc_comm_mpi_module_create(sc_comm **out, sc_diag *diag) {
  int init = 0, fin = 0, rank = 0;
  MPI_Finalized(&fin);
  if (fin)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "mpi communicator: MPI was already finalized");
  MPI_Initialized(&init);
  if (!init) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "MPI_Init_thread failed");
    we_initialised = true;
  }
  sc_comm tmp = {.rank = 0};
  sc_comm *c = &tmp;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tmp.rank = rank;
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  sc_status st = MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  if (st) return st;
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return wrap(dup, out, diag);
}

