/* test_comm_cuda_local.c — the cuda-local communicator
 * (runtime/comm_cuda_local.c): thread-ranks sharing one GPU, every
 * collective enqueued on each rank's own stream, against a host reference.
 *
 * On the emulated GPU (SHARDC_CUDA_EMU=1, set here unless SC_CUDA_REAL=1
 * asks for the real driver: tests/gpu/run-all.sh). Each rank is a thread
 * with its own stream and its own device buffers, seeded inputs that depend
 * on (rank, element). Checked, for groups of 2, 3 and 4 ranks:
 *   - all_reduce (and in place), reduce_scatter: f32, f64, f16, bf16, i32,
 *     i64 × sum, max, min; the result equals sc_comm_reduce_arrays over the
 *     ranks' inputs in rank order bit for bit, so it is bit-identical on
 *     every rank; a count that does not divide by the group (1003) so the
 *     all_reduce slices differ in size;
 *   - all_gather (and in place at the rank's own chunk), all_to_all: the
 *     layouts of comm.h, exactly;
 *   - send/recv: a ring with two tags, each rank sending before it
 *     receives (buffered: the sends never wait for their receives), and the
 *     staging buffers reused over rounds; send_recv around the ring the
 *     other way, one call per rank;
 *   - a 2 × 2 split: rows all_reduce on their own streams;
 *   - the same handles without a stream work on host memory (local's);
 *   - an abort on rank 2 of 3 makes the others' all_reduce and recv on
 *     their streams fail with "rank 2 aborted: bad input";
 *   - the reduction kernels compile with NVRTC for sm_90 (each an entry of
 *     the PTX): what a real GPU loads;
 *   - the fake driver's race check reports no violation (every read of
 *     another rank's buffer is ordered by events); the communicator is
 *     not capturable (sc_comm_capturable). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include <dlfcn.h>

#include "codegen/cuda/cuda.h"
#include "runtime/comm.h"
#include "runtime/cuda_driver.h"

static const sc_cu *cu;
static CUcontext ctx;

enum { COUNT = 1003, MAXR = 4 };
static const sc_dtype TYPES[] = {SC_DTYPE_F32, SC_DTYPE_F64, SC_DTYPE_F16,
                                 SC_DTYPE_BF16, SC_DTYPE_I32, SC_DTYPE_I64};

/* Input element i of rank r for dtype t (a function of both, seeded). */
static void fill(sc_dtype t, int r, int64_t n, int seed, void *out) {
  uint64_t s = (uint64_t)(seed * 7919 + r * 104729 + 1);
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
    switch (t) {
    case SC_DTYPE_F32: ((float *)out)[i] = (float)u; break;
    case SC_DTYPE_F64: ((double *)out)[i] = u; break;
    case SC_DTYPE_F16: ((uint16_t *)out)[i] = sc_f32_to_f16((float)u); break;
    case SC_DTYPE_BF16: ((uint16_t *)out)[i] = sc_f32_to_bf16((float)u); break;
    case SC_DTYPE_I32: ((int32_t *)out)[i] = (int32_t)(u * 2e9); break;
    case SC_DTYPE_I64: ((int64_t *)out)[i] = (int64_t)(u * 9e18); break;
    default: break;
    }
  }
}

typedef struct rank_job {
  sc_comm *c;
  int fails;
  char why[1400];
} rank_job;

#define FAIL(j, ...)                                                    \
  do {                                                                  \
    if (!(j)->fails++) snprintf((j)->why, sizeof (j)->why, __VA_ARGS__); \
  } while (0)

static void *dev(size_t bytes) {
  CUdeviceptr p = 0;
  if (cu->mem_alloc(&p, bytes ? bytes : 1) != SC_CUDA_SUCCESS) return NULL;
  return (void *)(uintptr_t)p;
}
#define D(p) ((CUdeviceptr)(uintptr_t)(p))

/* Every collective of this group size on every dtype and op. */
static void run_collectives(rank_job *j, CUstream s) {
  sc_comm *c = j->c;
  int r = sc_comm_rank(c), n = sc_comm_size(c);
  sc_diag d = {0};
  size_t big = (size_t)COUNT * MAXR * 8;
  void *in_d = dev(big), *out_d = dev(big);
  char *in_h = malloc(big), *out_h = malloc(big), *want = malloc(big);
  char *all = malloc(big * MAXR);
  for (size_t k = 0; k < sizeof TYPES / sizeof *TYPES; k++) {
    sc_dtype t = TYPES[k];
    size_t esz = sc_dtype_size(t);
    for (int op = 0; op < SC_REDUCE_COUNT; op++) {
      int seed = (int)(k * 3 + (size_t)op);
      const void *srcs[MAXR];
      for (int q = 0; q < n; q++) {
        fill(t, q, (int64_t)n * COUNT, seed, all + (size_t)q * big);
        srcs[q] = all + (size_t)q * big;
      }
      memcpy(in_h, srcs[r], (size_t)n * COUNT * esz);
      /* all_reduce out of place, then in place */
      for (int inplace = 0; inplace < 2; inplace++) {
        cu->memcpy_htod(D(in_d), in_h, (size_t)COUNT * esz, s);
        void *dst = inplace ? in_d : out_d;
        if (sc_comm_all_reduce(c, in_d, dst, COUNT, t, (sc_reduce_op)op, &d) != SC_OK)
          FAIL(j, "all_reduce: %s", d.msg);
        cu->memcpy_dtoh(out_h, D(dst), (size_t)COUNT * esz, s);
        cu->stream_synchronize(s);
        sc_comm_reduce_arrays(t, (sc_reduce_op)op, srcs, n, want, COUNT);
        if (memcmp(out_h, want, (size_t)COUNT * esz) != 0)
          FAIL(j, "all_reduce %s %s%s: rank %d differs from the host's reduction",
               sc_dtype_name(t), sc_reduce_op_name((sc_reduce_op)op), inplace ? " in place" : "",
               r);
      }
      /* reduce_scatter: chunk r of every rank's n × COUNT */
      cu->memcpy_htod(D(in_d), in_h, (size_t)n * COUNT * esz, s);
      if (sc_comm_reduce_scatter(c, in_d, out_d, COUNT, t, (sc_reduce_op)op, &d) != SC_OK)
        FAIL(j, "reduce_scatter: %s", d.msg);
      cu->memcpy_dtoh(out_h, D(out_d), (size_t)COUNT * esz, s);
      cu->stream_synchronize(s);
      const void *chunks[MAXR];
      for (int q = 0; q < n; q++) chunks[q] = (const char *)srcs[q] + (size_t)r * COUNT * esz;
      sc_comm_reduce_arrays(t, (sc_reduce_op)op, chunks, n, want, COUNT);
      if (memcmp(out_h, want, (size_t)COUNT * esz) != 0)
        FAIL(j, "reduce_scatter %s %s: rank %d differs", sc_dtype_name(t),
             sc_reduce_op_name((sc_reduce_op)op), r);
    }
    /* all_gather, out of place and in place (send = recv + r × count) */
    for (int inplace = 0; inplace < 2; inplace++) {
      size_t chunk = (size_t)COUNT * esz;
      fill(t, r, COUNT, 99, in_h);
      void *send = inplace ? (char *)out_d + (size_t)r * chunk : in_d;
      cu->memcpy_htod(D(send), in_h, chunk, s);
      if (sc_comm_all_gather(c, send, out_d, COUNT, t, &d) != SC_OK)
        FAIL(j, "all_gather: %s", d.msg);
      cu->memcpy_dtoh(out_h, D(out_d), chunk * (size_t)n, s);
      cu->stream_synchronize(s);
      for (int q = 0; q < n; q++) {
        fill(t, q, COUNT, 99, want);
        if (memcmp(out_h + (size_t)q * chunk, want, chunk) != 0)
          FAIL(j, "all_gather %s%s: rank %d's chunk %d differs", sc_dtype_name(t),
               inplace ? " in place" : "", r, q);
      }
    }
    /* all_to_all: chunk q of my send goes to rank q as its chunk r */
    size_t chunk = (size_t)COUNT * esz;
    fill(t, r, (int64_t)n * COUNT, 5, in_h);
    cu->memcpy_htod(D(in_d), in_h, chunk * (size_t)n, s);
    if (sc_comm_all_to_all(c, in_d, out_d, COUNT, t, &d) != SC_OK)
      FAIL(j, "all_to_all: %s", d.msg);
    cu->memcpy_dtoh(out_h, D(out_d), chunk * (size_t)n, s);
    cu->stream_synchronize(s);
    for (int q = 0; q < n; q++) {
      fill(t, q, (int64_t)n * COUNT, 5, want);
      if (memcmp(out_h + (size_t)q * chunk, want + (size_t)r * chunk, chunk) != 0)
        FAIL(j, "all_to_all %s: rank %d's chunk %d differs", sc_dtype_name(t), r, q);
    }
  }
  /* a ring, two tags, three rounds (staging reused): send first, then recv */
  for (int round = 0; round < 3; round++) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int tag = 0; tag < 2; tag++) {
      char *h = in_h + (size_t)tag * COUNT * 4; /* the copy reads it later */
      fill(SC_DTYPE_F32, r, COUNT, 1000 + round * 2 + tag, h);
      cu->memcpy_htod(D((char *)in_d + (size_t)tag * COUNT * 4), h, (size_t)COUNT * 4, s);
    }
    for (int tag = 1; tag >= 0; tag--)
      if (sc_comm_send(c, (char *)in_d + (size_t)tag * COUNT * 4, COUNT, SC_DTYPE_F32, next, tag,
                       &d) != SC_OK)
        FAIL(j, "send: %s", d.msg);
    /* the sender may overwrite its buffer at once: the message is staged */
    cu->memset_d8(D(in_d), 0, (size_t)COUNT * 8, s);
    for (int tag = 0; tag < 2; tag++) {
      if (sc_comm_recv(c, (char *)out_d + (size_t)tag * COUNT * 4, COUNT, SC_DTYPE_F32, prev,
                       tag, &d) != SC_OK)
        FAIL(j, "recv: %s", d.msg);
    }
    cu->memcpy_dtoh(out_h, D(out_d), (size_t)COUNT * 8, s);
    cu->stream_synchronize(s);
    for (int tag = 0; tag < 2; tag++) {
      fill(SC_DTYPE_F32, prev, COUNT, 1000 + round * 2 + tag, want);
      if (memcmp(out_h + (size_t)tag * COUNT * 4, want, (size_t)COUNT * 4) != 0)
        FAIL(j, "recv round %d tag %d: rank %d got the wrong data", round, tag, r);
    }
  }
  /* send_recv: the ring backwards in one call per rank (to r − 1, from r + 1) */
  if (n > 1) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    fill(SC_DTYPE_F32, r, COUNT, 2000, in_h);
    cu->memcpy_htod(D(in_d), in_h, (size_t)COUNT * 4, s);
    if (sc_comm_send_recv(c, in_d, prev, out_d, next, COUNT, SC_DTYPE_F32, 3, &d) != SC_OK)
      FAIL(j, "send_recv: %s", d.msg);
    cu->memcpy_dtoh(out_h, D(out_d), (size_t)COUNT * 4, s);
    cu->stream_synchronize(s);
    fill(SC_DTYPE_F32, next, COUNT, 2000, want);
    if (memcmp(out_h, want, (size_t)COUNT * 4) != 0)
      FAIL(j, "send_recv: rank %d got the wrong data from rank %d", r, next);
  }
  cu->mem_free(D(in_d));
  cu->mem_free(D(out_d));
  free(in_h);
  free(out_h);
  free(want);
  free(all);
}

static void *rank_main(void *arg) {
  rank_job *j = arg;
  sc_diag d = {0};
  CUstream s = NULL;
  if (cu->ctx_set_current(ctx) != SC_CUDA_SUCCESS ||
      cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING) != SC_CUDA_SUCCESS) {
    FAIL(j, "no stream");
    return NULL;
  }
  if (sc_comm_capturable(j->c)) FAIL(j, "cuda-local says it may be captured");
  /* host mode first: no stream, host memory, as `local` */
  int32_t mine = sc_comm_rank(j->c) + 1, sum = 0;
  if (sc_comm_all_reduce(j->c, &mine, &sum, 1, SC_DTYPE_I32, SC_REDUCE_SUM, &d) != SC_OK ||
      sum != sc_comm_size(j->c) * (sc_comm_size(j->c) + 1) / 2)
    FAIL(j, "host-mode all_reduce: %d (%s)", sum, d.msg);
  if (sc_comm_set_stream(j->c, s, &d) != SC_OK) FAIL(j, "set_stream: %s", d.msg);
  run_collectives(j, s);
  if (sc_comm_size(j->c) == 4) { /* rows of a 2 x 2 mesh, on their own streams */
    int r = sc_comm_rank(j->c);
    sc_comm *row = NULL;
    CUstream rs = NULL;
    cu->stream_create(&rs, SC_CU_STREAM_NON_BLOCKING);
    if (sc_comm_split(j->c, r / 2, r, &row, &d) != SC_OK || !row)
      FAIL(j, "split: %s", d.msg);
    else if (sc_comm_set_stream(row, rs, &d) != SC_OK)
      FAIL(j, "set_stream: %s", d.msg);
    else {
      float *x = dev(COUNT * 4), h[COUNT], want[COUNT];
      fill(SC_DTYPE_F32, r, COUNT, 77, h);
      cu->memcpy_htod(D(x), h, sizeof h, rs);
      if (sc_comm_all_reduce(row, x, x, COUNT, SC_DTYPE_F32, SC_REDUCE_SUM, &d) != SC_OK)
        FAIL(j, "row all_reduce: %s", d.msg);
      cu->memcpy_dtoh(h, D(x), sizeof h, rs);
      cu->stream_synchronize(rs);
      float a[COUNT], b[COUNT];
      fill(SC_DTYPE_F32, (r / 2) * 2, COUNT, 77, a);
      fill(SC_DTYPE_F32, (r / 2) * 2 + 1, COUNT, 77, b);
      const void *srcs[2] = {a, b};
      sc_comm_reduce_arrays(SC_DTYPE_F32, SC_REDUCE_SUM, srcs, 2, want, COUNT);
      if (memcmp(h, want, sizeof h) != 0) FAIL(j, "row all_reduce: rank %d differs", r);
      cu->mem_free(D(x));
    }
    sc_comm_destroy(row);
    if (rs) cu->stream_destroy(rs);
  }
  cu->stream_synchronize(s);
  sc_comm_set_stream(j->c, NULL, &d);
  sc_comm_destroy(j->c);
  j->c = NULL;
  cu->stream_destroy(s);
  return NULL;
}

static void run_group(int n) {
  sc_comm *comms[MAXR];
  sc_diag d = {0};
  assert_int_equal(sc_comm_cuda_local_create_group(n, comms, &d), SC_OK);
  rank_job jobs[MAXR];
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    jobs[r] = (rank_job){.c = comms[r]};
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) {
    if (jobs[r].fails) fprintf(stderr, "rank %d of %d: %d failures, first: %s\n", r, n,
                               jobs[r].fails, jobs[r].why);
    assert_int_equal(jobs[r].fails, 0);
  }
}

/* An abort on one rank ends the others' device-mode collectives and
 * receives (the host side's barrier and mailbox fail). */
static void *abort_main(void *arg) {
  rank_job *j = arg;
  sc_diag d = {0};
  CUstream s = NULL;
  cu->ctx_set_current(ctx);
  cu->stream_create(&s, SC_CU_STREAM_NON_BLOCKING);
  sc_comm_set_stream(j->c, s, &d);
  float *x = dev(64 * 4);
  if (sc_comm_rank(j->c) == 2) {
    sc_comm_abort(j->c, "bad input");
  } else {
    sc_status a = sc_comm_all_reduce(j->c, x, x, 64, SC_DTYPE_F32, SC_REDUCE_SUM, &d);
    if (a != SC_ERR_IO || !strstr(d.msg, "rank 2 aborted: bad input"))
      FAIL(j, "all_reduce after an abort: %d %s", (int)a, d.msg);
    a = sc_comm_recv(j->c, x, 64, SC_DTYPE_F32, 2, 0, &d);
    if (a != SC_ERR_IO || !strstr(d.msg, "aborted"))
      FAIL(j, "recv after an abort: %d %s", (int)a, d.msg);
  }
  cu->stream_synchronize(s);
  cu->mem_free(D(x));
  sc_comm_set_stream(j->c, NULL, &d);
  sc_comm_destroy(j->c);
  cu->stream_destroy(s);
  return NULL;
}

static void test_abort(void **state) {
  (void)state;
  sc_comm *comms[3];
  sc_diag d = {0};
  assert_int_equal(sc_comm_cuda_local_create_group(3, comms, &d), SC_OK);
  rank_job jobs[3];
  pthread_t th[3];
  for (int r = 0; r < 3; r++) {
    jobs[r] = (rank_job){.c = comms[r]};
    assert_int_equal(pthread_create(&th[r], NULL, abort_main, &jobs[r]), 0);
  }
  for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 3; r++) {
    if (jobs[r].fails) fprintf(stderr, "rank %d: %s\n", r, jobs[r].why);
    assert_int_equal(jobs[r].fails, 0);
  }
}

static void test_two(void **state) {
  (void)state;
  run_group(2);
}
static void test_three(void **state) {
  (void)state;
  run_group(3);
}
static void test_four_and_split(void **state) {
  (void)state;
  run_group(4);
}

/* The reduction kernels compile with NVRTC (what a real GPU loads): every
 * one of them is an entry of the sm_90 PTX. */
static void test_reduce_source_compiles(void **state) {
  (void)state;
  char *src = NULL, *ptx = NULL, *log = NULL;
  size_t len = 0;
  sc_diag d = {0};
  assert_int_equal(sc_cuda_emit_reduce_source(&src, &d), SC_OK);
  sc_status st = sc_cuda_compile_ptx(src, "sm_90", &ptx, &len, &log, &d);
  if (st != SC_OK) fprintf(stderr, "%s\n%s\n", d.msg, log ? log : "");
  assert_int_equal(st, SC_OK);
  int entries = 0;
  for (size_t k = 0; k < sizeof TYPES / sizeof *TYPES; k++)
    for (int op = 0; op < SC_REDUCE_COUNT; op++) {
      char name[64], entry[96];
      assert_true(sc_cuda_reduce_kernel_name(TYPES[k], op, name, sizeof name));
      snprintf(entry, sizeof entry, ".entry %s(", name);
      entries += strstr(ptx, entry) != NULL;
    }
  assert_int_equal(entries, (int)(sizeof TYPES / sizeof *TYPES) * SC_REDUCE_COUNT);
  char name[64];
  assert_false(sc_cuda_reduce_kernel_name(SC_DTYPE_U8, 0, name, sizeof name));
  sc_free(src);
  sc_free(ptx);
  sc_free(log);
}

static void test_no_violations(void **state) {
  (void)state;
  if (!cu->emulated) return;
  long (*violations)(void) = NULL;
  *(void **)&violations = dlsym(cu->lib, "sc_fake_cuda_violations");
  assert_non_null(violations);
  assert_int_equal(violations(), 0);
}

int main(void) {
  const char *real = getenv("SC_CUDA_REAL");
  if (!real || strcmp(real, "1") != 0) setenv("SHARDC_CUDA_EMU", "1", 1);
  sc_diag d = {0};
  CUdevice dv = 0;
  int count = 0;
  if (sc_cu_load(&cu, &d) != SC_OK || cu->device_count(&count) != SC_CUDA_SUCCESS ||
      cu->device_get(&dv, 0) != SC_CUDA_SUCCESS || cu->ctx_retain(&ctx, dv) != SC_CUDA_SUCCESS) {
    printf("SKIP: no CUDA driver: %s\n", d.msg);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two), cmocka_unit_test(test_three),
      cmocka_unit_test(test_four_and_split), cmocka_unit_test(test_abort),
      cmocka_unit_test(test_reduce_source_compiles),
      cmocka_unit_test(test_no_violations)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
SC_TEST_MAIN_SKIPPED("built without the CUDA backend (NVRTC)")
#endif
