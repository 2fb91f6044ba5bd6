/* test_runtime.c — the runtime on hand-built programs (runtime/).
 *
 * Program 1: Y = X @ W + bias (GEMM step, bias row) with an epilogue kernel
 * Z = max(Y, 0) * 0.5, then a reduction kernel R[m] = sum_n Z[m,n], and R
 * also exposed through a VIEW output of shape [M,1]. Program 2: a batched
 * GEMM with both operands transposed, B broadcast over the batch (stride 0),
 * alpha 0.5, beta 0 and a full [m,n] bias. Both are compared with naive
 * loops in double precision (tolerance 1e-4 relative + 1e-5 absolute: f32
 * sums of at most 512 products of values in [-1,1)).
 *
 * Also: planned == allocated (the session's arena is the program's
 * arena_bytes); a run allocates nothing (counted through the allocator
 * hook); 1 and 3 threads give bit-identical results; input validation
 * names the input; the thread pool covers every index exactly once. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "test_util.h"

#include "codegen/program.h"
#include "codegen/memplan.h"
#include "passes/plan/cluster.h"
#include "runtime/cpu_gemm.h"
#include "runtime/device.h"
#include "runtime/runtime.h"

enum { M = 64, K = 32, N = 512 };

typedef struct prog1 {
  sc_program *p;
  float *w, *bias; /* constant data (owned by the test) */
} prog1;

static int32_t add_buf(sc_program *p, const char *name, sc_buf_kind kind, int32_t rank,
                       const int64_t *dims, int64_t offset, const void *data, int32_t alias) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.kind = kind;
  b.dtype = SC_DTYPE_F32;
  b.rank = rank;
  memcpy(b.dims, dims, (size_t)rank * sizeof *dims);
  b.offset = offset;
  b.data = data;
  b.alias_of = alias;
  b.value = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  return id;
}

/* A KERNEL step running kernel k. */
static void add_kernel_step(sc_program *p, int32_t k, const char *origin) {
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_KERNEL;
  s.kernel = k;
  s.origin = origin;
  s.gemm.bias = -1;
  assert_true(sc_program_add_step(p, &s) >= 0);
}

static void build_prog1(prog1 *t) {
  sc_program *p = sc_program_create();
  assert_non_null(p);
  t->p = p;
  t->w = malloc(sizeof(float) * K * N);
  t->bias = malloc(sizeof(float) * N);
  for (int i = 0; i < K * N; i++) t->w[i] = (float)rnd(-1, 1);
  for (int i = 0; i < N; i++) t->bias[i] = (float)rnd(-1, 1);

  int64_t dx[] = {M, K}, dw[] = {K, N}, db[] = {N}, dy[] = {M, N}, dr[] = {M}, drv[] = {M, 1};
  int64_t off_y = M * K * 4, off_z = off_y + M * N * 4, off_r = off_z + M * N * 4;
  int32_t bx = add_buf(p, "x", SC_BUF_INPUT, 2, dx, 0, NULL, -1);
  int32_t bw = add_buf(p, "w", SC_BUF_CONST, 2, dw, -1, t->w, -1);
  int32_t bb = add_buf(p, "bias", SC_BUF_CONST, 1, db, -1, t->bias, -1);
  int32_t by = add_buf(p, "y", SC_BUF_TEMP, 2, dy, off_y, NULL, -1);
  int32_t bz = add_buf(p, "z", SC_BUF_OUTPUT, 2, dy, off_z, NULL, -1);
  int32_t br = add_buf(p, "r", SC_BUF_OUTPUT, 1, dr, off_r, NULL, -1);
  int32_t brv = add_buf(p, "r_view", SC_BUF_VIEW, 2, drv, -1, NULL, br);
  p->arena_bytes = off_r + 256; /* 256 = M * 4, a multiple of 64 */

  /* kernel 0: z = max(y, 0) * 0.5 over [M, N] */
  sc_arena *a = &p->arena;
  kir_kernel *k0 = kir_kernel_create(a, "relu_half");
  k0->outer_rank = 2;
  k0->outer_dims[0] = M;
  k0->outer_dims[1] = N;
  int32_t py = kir_add_param(a, k0, by, SC_DTYPE_F32, M * N, false);
  int32_t pz = kir_add_param(a, k0, bz, SC_DTYPE_F32, M * N, true);
  int32_t idx = kir_binary(a, k0, KIR_ADD,
                           kir_binary(a, k0, KIR_MUL, kir_var(a, k0, 0),
                                      kir_const_i(a, k0, SC_DTYPE_I64, N)),
                           kir_var(a, k0, 1));
  int32_t v = kir_binary(a, k0, KIR_MAX, kir_load(a, k0, py, idx),
                         kir_const_f(a, k0, SC_DTYPE_F32, 0.0));
  v = kir_binary(a, k0, KIR_MUL, v, kir_const_f(a, k0, SC_DTYPE_F32, 0.5));
  kir_add_store(a, k0, pz, idx, v);
  assert_int_equal(sc_program_add_kernel(p, k0), 0);

  /* kernel 1: r[m] = sum_n z[m, n] */
  kir_kernel *k1 = kir_kernel_create(a, "rowsum");
  k1->outer_rank = 1;
  k1->outer_dims[0] = M;
  k1->inner = N;
  int32_t qz = kir_add_param(a, k1, bz, SC_DTYPE_F32, M * N, false);
  int32_t qr = kir_add_param(a, k1, br, SC_DTYPE_F32, M, true);
  int32_t row = kir_binary(a, k1, KIR_MUL, kir_var(a, k1, 0), kir_const_i(a, k1, SC_DTYPE_I64, N));
  int32_t ph = kir_add_reduce(a, k1, KIR_RED_SUM, SC_DTYPE_F32,
                              kir_load(a, k1, qz, kir_binary(a, k1, KIR_ADD, row,
                                                             kir_var(a, k1, KIR_INNER))));
  kir_add_store(a, k1, qr, kir_var(a, k1, 0), kir_reg(a, k1, ph));
  assert_int_equal(sc_program_add_kernel(p, k1), 1);

  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(kir_verify(k0, &d), SC_OK);
  assert_int_equal(kir_verify(k1, &d), SC_OK);

  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_GEMM;
  s.kernel = 0;
  s.origin = "gemm";
  s.gemm = (sc_gemm){.a = bx, .b = bw, .c = by, .batch = 1, .m = M, .n = N, .k = K,
                     .lda = K, .ldb = N, .ldc = N, .alpha = 1.0f, .beta = 0.0f,
                     .bias = bb, .bias_full = false};
  assert_true(sc_program_add_step(p, &s) >= 0);
  add_kernel_step(p, 1, "rowsum");
  assert_int_equal(sc_program_add_input(p, bx), SC_OK);
  assert_int_equal(sc_program_add_output(p, bz), SC_OK);
  assert_int_equal(sc_program_add_output(p, br), SC_OK);
  assert_int_equal(sc_program_add_output(p, brv), SC_OK);
}

static void free_prog1(prog1 *t) {
  sc_program_destroy(t->p);
  free(t->w);
  free(t->bias);
}

static bool close_to(double got, double want) {
  return !isnan(got) && fabs(got - want) <= 1e-5 + 1e-4 * fabs(want);
}

/* ---- allocation counter (the allocator hook) ---- */
static atomic_int n_allocs;
static void *count_alloc(void *ud, size_t n) {
  (void)ud;
  atomic_fetch_add(&n_allocs, 1);
  return malloc(n);
}
static void *count_realloc(void *ud, void *p, size_t n) {
  (void)ud;
  atomic_fetch_add(&n_allocs, 1);
  return realloc(p, n);
}
static void count_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

static sc_session *make_session(const sc_program *p, int threads) {
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.threads = threads;
  sc_session *s = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_session_create(p, &o, &s, &d);
  if (st != SC_OK) fail_msg("session: %s", d.msg);
  return s;
}

static void test_gemm_kernels_view(void **state) {
  (void)state;
  rng_seed(42);
  prog1 t;
  build_prog1(&t);
  float *x = malloc(sizeof(float) * M * K);
  for (int i = 0; i < M * K; i++) x[i] = (float)rnd(-1, 1);

  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_verify(t.p, &d), SC_OK); /* the hand-made plan is valid */
  sc_session *s = make_session(t.p, 2);
  assert_int_equal(sc_session_arena_bytes(s), t.p->arena_bytes); /* planned == allocated */
  assert_int_equal(sc_session_threads(s), 2);

  sc_tensor_view in = {.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M, K}, .data = x};
  sc_tensor_view out[3];
  sc_allocator counter = {count_alloc, count_realloc, count_free, NULL};
  atomic_store(&n_allocs, 0);
  sc_set_allocator(&counter);
  sc_status st = sc_session_run(s, &in, 1, out, 3, &d);
  sc_set_allocator(NULL);
  assert_int_equal(st, SC_OK);
  assert_int_equal(atomic_load(&n_allocs), 0); /* a run allocates nothing */

  assert_string_equal(out[0].name, "z");
  assert_int_equal(out[0].rank, 2);
  assert_int_equal(out[2].rank, 2);
  assert_int_equal(out[2].dims[1], 1);
  assert_ptr_equal(out[2].data, out[1].data); /* the view shares r's storage */
  const float *z = out[0].data, *r = out[1].data;
  int bad = 0;
  for (int m = 0; m < M; m++) {
    double rs = 0;
    for (int n = 0; n < N; n++) {
      double y = t.bias[n];
      for (int k = 0; k < K; k++) y += (double)x[m * K + k] * t.w[k * N + n];
      double zz = (y > 0 ? y : 0) * 0.5;
      rs += zz;
      if (!close_to(z[m * N + n], zz) && bad++ < 5)
        print_error("z[%d,%d] = %g, want %g\n", m, n, (double)z[m * N + n], zz);
    }
    if (!close_to(r[m], rs) && bad++ < 10) print_error("r[%d] = %g, want %g\n", m, (double)r[m], rs);
  }
  assert_int_equal(bad, 0);
  sc_session_destroy(s);
  free(x);
  free_prog1(&t);
}

/* Sessions that run in turn share one arena (sc_session_opts.arena, as a
 * pipeline rank's pieces do): the owner allocates the larger size asked,
 * the borrower none; a run leaves nothing the next one reads (each copies
 * its inputs in), so the owner's result is the same after the borrower
 * overwrote the arena; an arena smaller than the program's is refused. */
static void test_shared_arena(void **state) {
  (void)state;
  rng_seed(5);
  prog1 t;
  build_prog1(&t);
  float *x[2];
  for (int i = 0; i < 2; i++) {
    x[i] = malloc(sizeof(float) * M * K);
    for (int j = 0; j < M * K; j++) x[i][j] = (float)rnd(-1, 1);
  }
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.threads = 1;
  o.arena_bytes = 2 * t.p->arena_bytes;
  sc_session *own = NULL, *bor = NULL, *small = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_session_create(t.p, &o, &own, &d), SC_OK);
  assert_int_equal(sc_session_arena_bytes(own), 2 * t.p->arena_bytes);
  o.arena = sc_session_arena(own);
  assert_non_null(o.arena);
  assert_int_equal(sc_session_create(t.p, &o, &bor, &d), SC_OK);
  assert_int_equal(sc_session_arena_bytes(bor), 0); /* borrowed: allocated nothing */
  assert_ptr_equal(sc_session_arena(bor), o.arena);
  o.arena_bytes = t.p->arena_bytes - 1;
  assert_int_equal(sc_session_create(t.p, &o, &small, &d), SC_ERR_INVALID);
  assert_null(small);
  assert_non_null(strstr(d.msg, "shared arena"));
  sc_tensor_view in[2], out[3];
  for (int i = 0; i < 2; i++)
    in[i] = (sc_tensor_view){.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M, K},
                             .data = x[i]};
  float *z0 = malloc(sizeof(float) * M * N);
  assert_int_equal(sc_session_run(own, &in[0], 1, out, 3, &d), SC_OK);
  memcpy(z0, out[0].data, sizeof(float) * M * N);
  void *where = out[0].data;
  assert_int_equal(sc_session_run(bor, &in[1], 1, out, 3, &d), SC_OK);
  assert_ptr_equal(out[0].data, where); /* the same memory */
  assert_true(memcmp(out[0].data, z0, sizeof(float) * M * N) != 0); /* other inputs */
  assert_int_equal(sc_session_run(own, &in[0], 1, out, 3, &d), SC_OK);
  assert_memory_equal(out[0].data, z0, sizeof(float) * M * N);
  sc_session_destroy(bor);
  sc_session_destroy(own);
  free(z0);
  free(x[0]);
  free(x[1]);
  free_prog1(&t);
}

/* State bound outside the arena (program->bound, sc_session_opts.bound, as
 * a CPU pipeline rank's pieces use its state): new:w = w - 0.5 g, w paired
 * with new:w and bound. The memory plan gives neither a slot (the arena
 * holds g alone); a run reads w and writes its new value in the caller's
 * buffer, copying nothing (the output view is that buffer), two runs
 * apply the update twice, the same values as the program planned with w
 * in the arena; a bound input given no storage is refused. */
static sc_program *build_update(bool bind) {
  enum { E = 1000 };
  sc_program *p = sc_program_create();
  assert_non_null(p);
  int64_t de[] = {E};
  int32_t bw = add_buf(p, "w", SC_BUF_INPUT, 1, de, -1, NULL, -1);
  int32_t bg = add_buf(p, "g", SC_BUF_INPUT, 1, de, -1, NULL, -1);
  int32_t bn = add_buf(p, "new:w", SC_BUF_OUTPUT, 1, de, -1, NULL, -1);
  sc_arena *a = &p->arena;
  kir_kernel *k = kir_kernel_create(a, "sgd");
  k->outer_rank = 1;
  k->outer_dims[0] = E;
  int32_t pw = kir_add_param(a, k, bw, SC_DTYPE_F32, E, false);
  int32_t pg = kir_add_param(a, k, bg, SC_DTYPE_F32, E, false);
  int32_t pn = kir_add_param(a, k, bn, SC_DTYPE_F32, E, true);
  int32_t i = kir_var(a, k, 0);
  int32_t v = kir_binary(a, k, KIR_SUB, kir_load(a, k, pw, i),
                         kir_binary(a, k, KIR_MUL, kir_load(a, k, pg, i),
                                    kir_const_f(a, k, SC_DTYPE_F32, 0.5)));
  kir_add_store(a, k, pn, i, v);
  assert_int_equal(sc_program_add_kernel(p, k), 0);
  add_kernel_step(p, 0, "sgd");
  assert_int_equal(sc_program_add_input(p, bw), SC_OK);
  assert_int_equal(sc_program_add_input(p, bg), SC_OK);
  assert_int_equal(sc_program_add_output(p, bn), SC_OK);
  const char *names[] = {"w"};
  assert_int_equal(sc_program_pair_state(p), SC_OK);
  assert_int_equal(sc_program_bind_inputs(p, names, bind ? 1 : 0), SC_OK);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_run(p, &d), SC_OK);
  assert_int_equal(sc_memplan_verify(p, &d), SC_OK);
  assert_int_equal(sc_program_updates(p, 0), 0); /* the pair is kept */
  return p;
}

static void test_bound_state(void **state) {
  (void)state;
  enum { E = 1000 };
  rng_seed(9);
  sc_program *pb = build_update(true), *pa = build_update(false);
  assert_true(sc_program_bound(pb, pb->inputs[0]) && sc_program_bound(pb, pb->outputs[0]));
  assert_false(sc_program_bound(pb, pb->inputs[1]) || sc_program_bound(pa, pa->inputs[0]));
  assert_int_equal(pb->buffers[pb->inputs[0]].offset, -1);
  assert_int_equal(pb->buffers[pb->outputs[0]].offset, -1);
  assert_int_equal(pb->arena_bytes, E * 4 + 32); /* g alone, 64-byte aligned */
  assert_true(pa->arena_bytes >= 2 * E * 4);     /* w (and new:w) and g */
  float w[E], w_ref[E], g[E];
  for (int i = 0; i < E; i++) {
    w[i] = w_ref[i] = (float)rnd(-1, 1);
    g[i] = (float)rnd(-1, 1);
  }
  float w0 = w[0], g0 = g[0];
  void *bound[2] = {w, NULL};
  sc_session_opts o;
  sc_session_opts_init(&o);
  o.threads = 1;
  o.bound = bound;
  sc_session *sb = NULL, *sa = NULL, *none = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_session_create(pb, &o, &sb, &d), SC_OK);
  assert_int_equal(sc_session_arena_bytes(sb), pb->arena_bytes); /* planned == allocated */
  o.bound = NULL;
  assert_int_equal(sc_session_create(pa, &o, &sa, &d), SC_OK);
  assert_int_equal(sc_session_create(pb, &o, &none, &d), SC_ERR_USAGE);
  assert_null(none);
  assert_non_null(strstr(d.msg, "given no storage"));
  sc_tensor_view in[2] = {
      {.name = "w", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = w},
      {.name = "g", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = g}};
  sc_tensor_view out;
  for (int r = 0; r < 2; r++) {
    sc_diag_clear(&d);
    assert_int_equal(sc_session_run(sb, in, 2, &out, 1, &d), SC_OK);
    assert_ptr_equal(out.data, w); /* written in place */
    in[0].data = w_ref;
    assert_int_equal(sc_session_run(sa, in, 2, &out, 1, &d), SC_OK);
    assert_ptr_not_equal(out.data, w_ref); /* in the arena */
    memcpy(w_ref, out.data, sizeof w_ref);
    in[0].data = w;
  }
  assert_memory_equal(w, w_ref, sizeof w);
  assert_true(w[0] == (w0 - g0 * 0.5f) - g0 * 0.5f);
  sc_session_destroy(sa);
  sc_session_destroy(sb);
  sc_program_destroy(pa);
  sc_program_destroy(pb);
}

/* build_update(false)'s program in *p (unbound: the state in the arena)
 * and a one-thread CPU session over it, created with *o (initialised
 * here); the caller destroys both. */
static sc_session *update_session(sc_program **p, sc_session_opts *o) {
  *p = build_update(false);
  sc_session_opts_init(o);
  o->threads = 1;
  sc_session *s = NULL;
  sc_diag d = {0};
  assert_int_equal(sc_session_create(*p, o, &s, &d), SC_OK);
  return s;
}

/* State kept in the arena across runs through the slot API (runtime.h):
 * written and read only through the session's copies, the run given the
 * slot itself updates it there and the paired output's view is the slot;
 * zeroed by the device. The same values as the inputs copied each run. */
static void test_state_slot(void **state) {
  (void)state;
  enum { E = 1000 };
  rng_seed(12);
  sc_program *p;
  sc_session_opts o;
  sc_session *s = update_session(&p, &o);
  sc_diag d = {0};
  assert_true(sc_session_host_arena(s));
  void *slot = sc_session_state_slot(s, 0);
  assert_non_null(slot);
  assert_ptr_equal(slot, sc_session_input_slot(s, 0)); /* host arena: the same slot */
  assert_null(sc_session_state_slot(s, 2));
  assert_null(sc_session_state_slot(s, -1));
  float w[E], w_ref[E], g[E], back[E];
  for (int i = 0; i < E; i++) {
    w[i] = w_ref[i] = (float)rnd(-1, 1);
    g[i] = (float)rnd(-1, 1);
  }
  sc_session_slot_write(s, slot, w, sizeof w);
  memset(w, 0, sizeof w); /* the slot holds its own copy */
  sc_tensor_view in[2] = {
      {.name = "w", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = slot},
      {.name = "g", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = g}};
  sc_tensor_view out;
  for (int r = 0; r < 3; r++) {
    assert_int_equal(sc_session_run(s, in, 2, &out, 1, &d), SC_OK);
    assert_ptr_equal(out.data, slot); /* new:w written over w */
    for (int i = 0; i < E; i++) w_ref[i] = w_ref[i] - g[i] * 0.5f;
  }
  sc_session_slot_read(s, back, slot, sizeof back);
  assert_memory_equal(back, w_ref, sizeof back);
  sc_session_slot_zero(s, slot, sizeof back);
  sc_session_slot_read(s, back, slot, sizeof back);
  for (int i = 0; i < E; i++) assert_true(back[i] == 0.0f);
  sc_session_destroy(s);
  sc_program_destroy(p);
}

/* Runs read later (runtime.h: sc_session_launch / sc_session_collect) and
 * copies between device addresses. The CPU offers no later runs
 * (SC_ERR_UNSUPPORTED) and copies slots with memmove. On the emulated GPU
 * (SHARDC_CUDA_EMU=1): two runs launched before either is collected, the
 * second's input buffer refilled on the host between the launches (the
 * launch staged the first's), update the state slot twice, w - 0.5 g1 -
 * 0.5 g2, bit for bit; a slot out of range, state not given as its slot
 * and too little room for outputs are usage errors; a device-to-device
 * copy moves the slot. Skipped (said so) where shardc has no CUDA device. */
static void test_runs_read_later(void **state) {
  (void)state;
  enum { E = 1000 };
  rng_seed(15);
  sc_program *p;
  sc_session_opts o;
  sc_session *s = update_session(&p, &o);
  sc_diag d = {0};
  assert_int_equal(sc_session_reserve_async(s, 2, &d), SC_ERR_UNSUPPORTED);
  assert_int_equal(sc_session_async_slots(s), 0);
  float w[E], g1[E], g2[E], want[E], back[E];
  for (int i = 0; i < E; i++) {
    w[i] = (float)rnd(-1, 1);
    g1[i] = (float)rnd(-1, 1);
    g2[i] = (float)rnd(-1, 1);
    want[i] = (w[i] - g1[i] * 0.5f) - g2[i] * 0.5f;
  }
  void *slot = sc_session_state_slot(s, 0), *gslot = sc_session_state_slot(s, 1);
  sc_session_slot_write(s, slot, w, sizeof w);
  sc_session_slot_copy(s, gslot, slot, sizeof w);
  assert_memory_equal(gslot, w, sizeof w);
  sc_session_destroy(s);

  setenv("SHARDC_CUDA_EMU", "1", 1);
  o.device.name = "cuda";
  s = NULL;
  sc_diag_clear(&d);
  if (sc_session_create(p, &o, &s, &d) != SC_OK) {
    assert_int_equal(d.status, SC_ERR_UNSUPPORTED);
    printf("runs read later: no CUDA device here (%s): the emulated GPU's part skipped\n",
           d.msg);
    sc_program_destroy(p);
    return;
  }
  assert_false(sc_session_host_arena(s));
  slot = sc_session_state_slot(s, 0);
  gslot = sc_session_state_slot(s, 1);
  sc_session_slot_write(s, slot, w, sizeof w);
  assert_int_equal(sc_session_reserve_async(s, 2, &d), SC_OK);
  assert_int_equal(sc_session_async_slots(s), 2);
  float g[E];
  memcpy(g, g1, sizeof g);
  sc_tensor_view in[2] = {
      {.name = "w", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = slot},
      {.name = "g", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {E}, .data = g}};
  sc_tensor_view out;
  assert_int_equal(sc_session_launch(s, in, 2, 0, &d), SC_OK);
  memcpy(g, g2, sizeof g); /* the first launch's g is staged already */
  assert_int_equal(sc_session_launch(s, in, 2, 1, &d), SC_OK);
  memset(g, 0, sizeof g);
  assert_int_equal(sc_session_collect(s, 0, &out, 1, &d), SC_OK);
  assert_ptr_equal(out.data, slot); /* new:w is state: its slot */
  assert_int_equal(sc_session_collect(s, 1, &out, 1, &d), SC_OK);
  sc_session_slot_read(s, back, slot, sizeof back);
  assert_memory_equal(back, want, sizeof back);
  /* misuse */
  assert_int_equal(sc_session_launch(s, in, 2, 2, &d), SC_ERR_USAGE);
  assert_int_equal(sc_session_collect(s, 0, &out, 0, &d), SC_ERR_USAGE);
  in[0].data = w;
  sc_diag_clear(&d);
  assert_int_equal(sc_session_launch(s, in, 2, 0, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "state kept on the device"));
  /* a copy on the device: the slot into g's */
  sc_session_slot_copy(s, gslot, slot, sizeof w);
  sc_session_sync(s);
  memset(back, 0, sizeof back);
  sc_session_slot_read(s, back, gslot, sizeof back);
  assert_memory_equal(back, want, sizeof back);
  sc_session_destroy(s);
  sc_program_destroy(p);
}

static void test_threads_identical(void **state) {
  (void)state;
  rng_seed(7);
  prog1 t;
  build_prog1(&t);
  /* this time the memory planner places the buffers */
  for (int32_t b = 0; b < t.p->n_buffers; b++)
    if (t.p->buffers[b].kind != SC_BUF_CONST) t.p->buffers[b].offset = -1;
  t.p->arena_bytes = -1;
  sc_diag dp = {0};
  sc_diag_clear(&dp);
  assert_int_equal(sc_memplan_run(t.p, &dp), SC_OK);
  assert_int_equal(sc_memplan_verify(t.p, &dp), SC_OK);
  /* x and y live together at the product; the epilogue writes z over y
   * (in place) once x is dead, and r comes after */
  assert_true(t.p->arena_bytes >= (int64_t)sizeof(float) * (M * K + M * N));
  assert_int_equal(t.p->buffers[3].offset, t.p->buffers[4].offset); /* y, z */
  float *x = malloc(sizeof(float) * M * K);
  for (int i = 0; i < M * K; i++) x[i] = (float)rnd(-1, 1);
  sc_tensor_view in = {.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M, K}, .data = x};
  float *res[2][2];
  for (int i = 0; i < 2; i++) {
    sc_session *s = make_session(t.p, i == 0 ? 1 : 3);
    assert_int_equal(sc_session_arena_bytes(s), t.p->arena_bytes);
    sc_tensor_view out[3];
    sc_diag d = {0};
    sc_diag_clear(&d);
    assert_int_equal(sc_session_run(s, &in, 1, out, 3, &d), SC_OK);
    res[i][0] = malloc(sizeof(float) * M * N);
    res[i][1] = malloc(sizeof(float) * M);
    memcpy(res[i][0], out[0].data, sizeof(float) * M * N);
    memcpy(res[i][1], out[1].data, sizeof(float) * M);
    sc_session_destroy(s);
  }
  assert_memory_equal(res[0][0], res[1][0], sizeof(float) * M * N);
  assert_memory_equal(res[0][1], res[1][1], sizeof(float) * M);
  /* and not trivially: some values are nonzero */
  int nz = 0;
  for (int i = 0; i < M; i++) nz += res[0][1][i] != 0;
  assert_true(nz > M / 2);
  for (int i = 0; i < 2; i++) {
    free(res[i][0]);
    free(res[i][1]);
  }
  free(x);
  free_prog1(&t);
}

static void test_batched_transposed_gemm(void **state) {
  (void)state;
  rng_seed(3);
  enum { B = 3, M2 = 5, N2 = 7, K2 = 9 };
  sc_program *p = sc_program_create();
  float bm[N2 * K2], bias[M2 * N2];
  for (int i = 0; i < N2 * K2; i++) bm[i] = (float)rnd(-1, 1);
  for (int i = 0; i < M2 * N2; i++) bias[i] = (float)rnd(-1, 1);
  int64_t da[] = {B, K2, M2}, db[] = {N2, K2}, dbias[] = {M2, N2}, dc[] = {B, M2, N2};
  int32_t ba = add_buf(p, "a", SC_BUF_INPUT, 3, da, 0, NULL, -1);
  int32_t bb = add_buf(p, "b", SC_BUF_CONST, 2, db, -1, bm, -1);
  int32_t bbias = add_buf(p, "bias", SC_BUF_CONST, 2, dbias, -1, bias, -1);
  int32_t bc = add_buf(p, "c", SC_BUF_OUTPUT, 3, dc, 576, NULL, -1); /* 540 -> 576 */
  p->arena_bytes = 576 + 448;                                          /* 420 -> 448 */
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_GEMM;
  s.kernel = -1;
  s.gemm = (sc_gemm){.a = ba, .b = bb, .c = bc, .trans_a = true, .trans_b = true, .batch = B,
                     .m = M2, .n = N2, .k = K2, .lda = M2, .ldb = K2, .ldc = N2,
                     .stride_a = K2 * M2, .stride_b = 0, .stride_c = M2 * N2, .alpha = 0.5f,
                     .beta = 0.0f, .bias = bbias, .bias_full = true};
  assert_true(sc_program_add_step(p, &s) >= 0);
  assert_int_equal(sc_program_add_input(p, ba), SC_OK);
  assert_int_equal(sc_program_add_output(p, bc), SC_OK);

  float a[B * K2 * M2];
  for (int i = 0; i < B * K2 * M2; i++) a[i] = (float)rnd(-1, 1);
  sc_session *ss = make_session(p, 2);
  sc_tensor_view in = {.name = "a", .dtype = SC_DTYPE_F32, .rank = 3, .dims = {B, K2, M2},
                       .data = a};
  sc_tensor_view out;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_session_run(ss, &in, 1, &out, 1, &d), SC_OK);
  const float *c = out.data;
  for (int b = 0; b < B; b++)
    for (int m = 0; m < M2; m++)
      for (int n = 0; n < N2; n++) {
        double want = bias[m * N2 + n];
        double acc = 0;
        for (int k = 0; k < K2; k++)
          acc += (double)a[b * K2 * M2 + k * M2 + m] * bm[n * K2 + k];
        want += 0.5 * acc;
        double got = c[(b * M2 + m) * N2 + n];
        if (!close_to(got, want)) fail_msg("c[%d,%d,%d] = %g, want %g", b, m, n, got, want);
      }
  sc_session_destroy(ss);

  /* a GEMM whose extents exceed its buffer is rejected at session creation */
  p->steps[0].gemm.batch = B + 1;
  sc_session *bad = NULL;
  sc_session_opts o;
  sc_session_opts_init(&o);
  sc_diag_clear(&d);
  assert_int_not_equal(sc_session_create(p, &o, &bad, &d), SC_OK);
  assert_null(bad);
  assert_non_null(strstr(d.msg, "exceed"));
  sc_program_destroy(p);
}

/* bf16 products (sc_host_gemm_bf16): a batched, transposed-A product with
 * a row bias and beta, C at a pitch wider than its rows. Each element is the
 * float64 product of the bf16 values rounded to bf16 (within one bf16 unit:
 * the f32 sum may round the other way), the pitch's gaps are not written,
 * and 1 and 2 threads give the same bits. sc_gemm_problem takes all-bf16
 * operands and refuses mixed ones. */
static void test_gemm_bf16(void **state) {
  (void)state;
  rng_seed(11);
  enum { B = 2, M3 = 37, N3 = 70, K3 = 300, LDC = 80 };
  sc_gemm g = {.trans_a = true, .batch = B, .m = M3, .n = N3, .k = K3, .lda = M3, .ldb = N3,
               .ldc = LDC, .stride_a = (int64_t)K3 * M3, .stride_b = 0,
               .stride_c = (int64_t)M3 * LDC, .alpha = 1.0f, .beta = 1.0f, .bias = 0};
  uint16_t *a = malloc(sizeof *a * B * K3 * M3), *b = malloc(sizeof *b * K3 * N3);
  uint16_t bias[N3], *c0 = malloc(sizeof *c0 * B * M3 * LDC);
  uint16_t *c1 = malloc(sizeof *c1 * B * M3 * LDC), *c2 = malloc(sizeof *c2 * B * M3 * LDC);
  assert_true(a && b && c0 && c1 && c2);
  for (int i = 0; i < B * K3 * M3; i++) a[i] = sc_f32_to_bf16((float)rnd(-1, 1));
  for (int i = 0; i < K3 * N3; i++) b[i] = sc_f32_to_bf16((float)rnd(-1, 1));
  for (int i = 0; i < N3; i++) bias[i] = sc_f32_to_bf16((float)rnd(-1, 1));
  for (int i = 0; i < B * M3 * LDC; i++) c0[i] = sc_f32_to_bf16((float)rnd(-1, 1));
  memcpy(c1, c0, sizeof *c0 * B * M3 * LDC);
  memcpy(c2, c0, sizeof *c0 * B * M3 * LDC);
  int64_t ns = sc_gemm_bf16_scratch_numel(&g, N3, sc_gemm_engine_get());
  assert_true(ns >= (int64_t)B * K3 * M3 + K3 * N3 + B * M3 * LDC + N3);
  float *scratch = malloc(sizeof *scratch * (size_t)ns);
  sc_thread_pool *tp = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_thread_pool_create(2, &tp, &d), SC_OK);
  assert_true(sc_host_gemm_bf16(&g, a, b, bias, N3, c1, NULL, scratch, NULL));
  assert_true(sc_host_gemm_bf16(&g, a, b, bias, N3, c2, tp, scratch, NULL));
  assert_memory_equal(c1, c2, sizeof *c1 * B * M3 * LDC);
  int inexact = 0;
  for (int bb = 0; bb < B; bb++)
    for (int m = 0; m < M3; m++)
      for (int n = 0; n < LDC; n++) {
        int64_t at = ((int64_t)bb * M3 + m) * LDC + n;
        if (n >= N3) { /* the pitch's gap: untouched */
          if (c1[at] != c0[at]) fail_msg("gap c[%d,%d,%d] written", bb, m, n);
          continue;
        }
        double want = (double)sc_bf16_to_f32(c0[at]) + sc_bf16_to_f32(bias[n]);
        for (int k = 0; k < K3; k++)
          want += (double)sc_bf16_to_f32(a[(int64_t)bb * K3 * M3 + (int64_t)k * M3 + m]) *
                  sc_bf16_to_f32(b[(int64_t)k * N3 + n]);
        float got = sc_bf16_to_f32(c1[at]), rounded = sc_bf16_to_f32(sc_f32_to_bf16((float)want));
        if (isnan(got) || fabs(got - rounded) > fabs(rounded) * 0x1p-7 + 1e-30)
          fail_msg("c[%d,%d,%d] = %g, want %g (bf16 of %g)", bb, m, n, got, rounded, want);
        inexact += got != rounded;
      }
  assert_true(inexact < B * M3 * N3 / 20); /* one unit off only where the sum rounds across */
  sc_thread_pool_destroy(tp);

  /* all bf16 is a GEMM; a bf16 C over f32 operands is not */
  sc_program *p = sc_program_create();
  int64_t da[] = {B, K3, M3}, db[] = {K3, N3}, dc[] = {B, M3, LDC};
  int32_t ia = add_buf(p, "a", SC_BUF_INPUT, 3, da, 0, NULL, -1);
  int32_t ib = add_buf(p, "b", SC_BUF_INPUT, 2, db, 0, NULL, -1);
  int32_t ic = add_buf(p, "c", SC_BUF_OUTPUT, 3, dc, 0, NULL, -1);
  for (int32_t i = 0; i < p->n_buffers; i++) p->buffers[i].dtype = SC_DTYPE_BF16;
  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_GEMM;
  st.kernel = -1;
  st.gemm = g;
  st.gemm.a = ia, st.gemm.b = ib, st.gemm.c = ic, st.gemm.bias = -1;
  assert_null(sc_gemm_problem(p, &st));
  p->buffers[ia].dtype = SC_DTYPE_F32;
  assert_non_null(sc_gemm_problem(p, &st));
  sc_program_destroy(p);
  free(a), free(b), free(c0), free(c1), free(c2), free(scratch);
}

/* B operands whose row pitch is a multiple of 4 KiB (1024 floats) are
 * copied to another pitch before the product (runtime/cpu_device.c): a
 * batched B [2, 24, 1024] and a transposed, broadcast B [40, 2048] give
 * the float64 reference's products, and the same bits on 1 and 2 threads. */
static void test_gemm_aliasing_pitch(void **state) {
  (void)state;
  rng_seed(11);
  enum { BT = 2, M3 = 8, K3 = 24, N3 = 1024, N4 = 40, K4 = 2048 };
  for (int trans = 0; trans < 2; trans++) {
    int64_t n = trans ? N4 : N3, k = trans ? K4 : K3;
    int64_t na = BT * M3 * k, nb = trans ? N4 * K4 : BT * K3 * N3, nc = BT * M3 * n;
    sc_program *p = sc_program_create();
    int64_t da[] = {BT, M3, k}, db3[] = {BT, K3, N3}, db2[] = {N4, K4}, dc[] = {BT, M3, n};
    int64_t ob = (na * 4 + 63) / 64 * 64, oc = ob + (nb * 4 + 63) / 64 * 64;
    int32_t ba = add_buf(p, "a", SC_BUF_INPUT, 3, da, 0, NULL, -1);
    int32_t bb = trans ? add_buf(p, "b", SC_BUF_INPUT, 2, db2, ob, NULL, -1)
                       : add_buf(p, "b", SC_BUF_INPUT, 3, db3, ob, NULL, -1);
    int32_t bc = add_buf(p, "c", SC_BUF_OUTPUT, 3, dc, oc, NULL, -1);
    p->arena_bytes = oc + nc * 4;
    sc_step st;
    memset(&st, 0, sizeof st);
    st.kind = SC_STEP_GEMM;
    st.kernel = -1;
    st.gemm = (sc_gemm){.a = ba, .b = bb, .c = bc, .trans_b = trans, .batch = BT, .m = M3,
                        .n = n, .k = k, .lda = k, .ldb = trans ? K4 : N3, .ldc = n,
                        .stride_a = M3 * k, .stride_b = trans ? 0 : K3 * N3, .stride_c = M3 * n,
                        .alpha = 1.0f, .beta = 0.0f, .bias = -1};
    assert_true(sc_gemm_repitch_numel(&st.gemm) > 0);
    assert_true(sc_program_add_step(p, &st) >= 0);
    assert_int_equal(sc_program_add_input(p, ba), SC_OK);
    assert_int_equal(sc_program_add_input(p, bb), SC_OK);
    assert_int_equal(sc_program_add_output(p, bc), SC_OK);
    float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *res[2];
    for (int64_t i = 0; i < na; i++) a[i] = (float)rnd(-1, 1);
    for (int64_t i = 0; i < nb; i++) b[i] = (float)rnd(-1, 1);
    for (int t = 0; t < 2; t++) {
      sc_session *ss = make_session(p, t + 1);
      sc_tensor_view in[2] = {
          {.name = "a", .dtype = SC_DTYPE_F32, .rank = 3, .dims = {BT, M3, k}, .data = a},
          {.name = "b", .dtype = SC_DTYPE_F32, .rank = trans ? 2 : 3,
           .dims = {trans ? N4 : BT, trans ? K4 : K3, trans ? 0 : N3}, .data = b}};
      sc_tensor_view out;
      sc_diag d = {0};
      sc_diag_clear(&d);
      assert_int_equal(sc_session_run(ss, in, 2, &out, 1, &d), SC_OK);
      res[t] = malloc((size_t)nc * 4);
      memcpy(res[t], out.data, (size_t)nc * 4);
      sc_session_destroy(ss);
    }
    for (int bt = 0; bt < BT; bt++)
      for (int m = 0; m < M3; m++)
        for (int64_t j = 0; j < n; j++) {
          double want = 0;
          for (int64_t q = 0; q < k; q++)
            want += (double)a[(bt * M3 + m) * k + q] *
                    (trans ? b[j * K4 + q] : b[(bt * K3 + q) * N3 + j]);
          double got = res[0][(bt * M3 + m) * n + j];
          if (!close_to(got, want))
            fail_msg("trans %d: c[%d,%d,%lld] = %g, want %g", trans, bt, m, (long long)j, got,
                     want);
        }
    assert_memory_equal(res[0], res[1], (size_t)nc * 4);
    free(res[0]);
    free(res[1]);
    free(a);
    free(b);
    sc_program_destroy(p);
  }
}

/* Planned == allocated for every line of the CPU device's memory
 * (codegen/device_memory.h): a program with a constant [24, 1024] B (its
 * pitch aliases), a transposed constant [40, 2048] B read by two steps
 * (one copy), and a product of 8 x 2000 x 64 with B an input (several
 * columns of tiles: the own kernel packs A into the scratch), on each
 * engine and on 1 and 3 threads. The lines are those the engine lays out
 * (packed weights on the own kernel: k x n rounded up to 16 floats, each
 * matrix once; pitched on oneDNN: the aliasing and the transposed one),
 * the plan for the same target equals the session's, and a run of the
 * bound program allocates nothing more (the per-thread buffers are held
 * from bind). */
/* A stand-in for the runtime's sizing of direct convolutions. */
static sc_status fake_conv_memory(const sc_program *p, int threads, sc_device_memory *m,
                                  sc_diag *diag) {
  (void)p, (void)diag;
  m->bytes[SC_MEM_CONV_WEIGHTS] = 4096;
  m->bytes[SC_MEM_CONV_THREADS] = (int64_t)threads * 1000;
  return SC_OK;
}

/* The plan takes the convolutions' lines from its target's conv_memory,
 * for the target's threads; none without direct convolutions or on CUDA;
 * sc_runtime_target_host supplies the runtime's. */
static void test_device_memory_conv_lines(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  p->arena_bytes = 64;
  sc_device_target t = {.device = "cpu", .engine = SC_GEMM_ENGINE_ONEDNN, .threads = 3,
                        .direct_convs = true, .conv_memory = fake_conv_memory};
  sc_device_memory m;
  sc_diag d = {0};
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(m.bytes[SC_MEM_CONV_WEIGHTS], 4096);
  assert_int_equal(m.bytes[SC_MEM_CONV_THREADS], 3000);
  assert_int_equal(sc_device_memory_total(&m), 64 + 4096 + 3000);
  t.direct_convs = false;
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(sc_device_memory_outside(&m), 0);
  t.direct_convs = true, t.device = "cuda";
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(sc_device_memory_outside(&m), 0);
  sc_runtime_target_host(&t);
  assert_true(t.conv_memory == sc_cpu_plan_convs);
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK); /* no convolutions: 0 */
  assert_int_equal(sc_device_memory_outside(&m), 0);
  sc_program_destroy(p);
}

/* The CUDA device's lines (codegen/device_memory.h), against figures
 * written out here: NCCL's buffers per communicator from NCCL's defaults
 * (Simple 4 MiB, LL 512 KiB, LL128 4,915,200 B per channel and ring
 * neighbour, plus the 4-byte flag), none for one rank; the weights' one
 * allocation with each constant at a multiple of 256 bytes; cuBLASLt's
 * workspace beside the arena only when a product runs through it and the
 * arena does not hold it; the context as the target says; one
 * communicator per set of axes, its channels those of the link it spans. */
static void test_device_memory_cuda_lines(void **state) {
  (void)state;
  const int64_t per_channel = 2 * ((int64_t)4194304 + 524288 + 4915200);
  assert_int_equal(sc_nccl_buffer_bytes(1, 16), 0);
  assert_int_equal(sc_nccl_buffer_bytes(2, 16), 16 * per_channel + 4);
  assert_int_equal(sc_nccl_buffer_bytes(8, 3), 3 * per_channel + 4);
  assert_int_equal(sc_nccl_buffer_bytes(2, 0), -1);
  assert_int_equal(sc_nccl_buffer_bytes(2, INT64_MAX / 4), -1);

  sc_program *p = sc_program_create();
  int64_t d1[] = {25}, d2[] = {75}, da[] = {4, 8}, db[] = {8, 16}, dc[] = {4, 16};
  float w[75] = {0};
  add_buf(p, "w1", SC_BUF_CONST, 1, d1, -1, w, -1); /* 100 bytes, then 156 of padding */
  add_buf(p, "w2", SC_BUF_CONST, 1, d2, -1, w, -1); /* 300 bytes at offset 256 */
  int32_t a = add_buf(p, "a", SC_BUF_INPUT, 2, da, 0, NULL, -1);
  int32_t b = add_buf(p, "b", SC_BUF_INPUT, 2, db, 128, NULL, -1);
  int32_t c = add_buf(p, "c", SC_BUF_OUTPUT, 2, dc, 640, NULL, -1);
  p->arena_bytes = 1024;
  assert_int_equal(sc_cuda_const_bytes(p), 256 + 300);
  sc_device_target t;
  sc_device_target_cuda(&t, 500 << 20, 0, 4);
  assert_int_equal(t.nccl_channels_intra, SC_NCCL_CHANNELS_DEFAULT);
  sc_device_memory m;
  sc_diag d = {0};
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(m.bytes[SC_MEM_ARENA], 1024);
  assert_int_equal(m.bytes[SC_MEM_CUDA_PADDING], 156);
  assert_int_equal(m.bytes[SC_MEM_CUDA_WORKSPACE], 0); /* no product */
  assert_int_equal(m.bytes[SC_MEM_CUDA_CONTEXT], 500 << 20);
  assert_int_equal(m.bytes[SC_MEM_NCCL_BUFFERS], 0);
  for (int l = SC_MEM_PACKED_WEIGHTS; l <= SC_MEM_CONV_THREADS; l++)
    assert_int_equal(m.bytes[l], 0); /* the CPU's lines */

  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_GEMM;
  st.kernel = -1;
  st.gemm = (sc_gemm){.a = a, .b = b, .c = c, .m = 4, .n = 16, .k = 8, .lda = 8, .ldb = 16,
                      .ldc = 16, .batch = 1, .alpha = 1.0f, .bias = -1};
  st.gemm.conv.on = true; /* a convolution: its implicit-GEMM kernel, no cuBLASLt */
  assert_true(sc_program_add_step(p, &st) >= 0);
  assert_int_equal(sc_cuda_workspace_outside_bytes(p, false), 0);
  assert_int_equal(sc_cuda_workspace_outside_bytes(p, true), SC_GEMM_WORKSPACE_BYTES);
  st.gemm.conv.on = false;
  assert_true(sc_program_add_step(p, &st) >= 0);
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(m.bytes[SC_MEM_CUDA_WORKSPACE], SC_GEMM_WORKSPACE_BYTES);
  assert_false(sc_cuda_workspace_in_arena(p));
  p->workspace_bytes = SC_GEMM_WORKSPACE_BYTES; /* the plan reserved it at the top */
  p->workspace_offset = 1024;
  p->arena_bytes = 1024 + SC_GEMM_WORKSPACE_BYTES;
  assert_true(sc_cuda_workspace_in_arena(p));
  assert_int_equal(sc_cuda_workspace_outside_bytes(p, true), 0);
  p->workspace_offset = 1025; /* would end past the arena: not the arena's */
  assert_false(sc_cuda_workspace_in_arena(p));
  p->workspace_offset = 1024;

  /* dp=2 x tp=4 on nodes of 4: tp stays in a node, dp spans two */
  assert_int_equal(sc_mesh_parse("dp=2,tp=4", &p->mesh, &d), SC_OK);
  assert_int_equal(sc_mesh_set_ranks_per_node(&p->mesh, 4, &d), SC_OK);
  const char *tp_name[] = {"tp"}, *dp_name[] = {"dp"};
  sc_axes tp, dp;
  assert_true(sc_mesh_axes_of(&p->mesh, tp_name, 1, &tp));
  assert_true(sc_mesh_axes_of(&p->mesh, dp_name, 1, &dp));
  sc_axes sets[] = {tp, dp, tp}; /* two steps over tp: one communicator */
  int64_t sizes[] = {4, 2, 4};
  for (int i = 0; i < 3; i++) {
    memset(&st, 0, sizeof st);
    st.kind = SC_STEP_COMM;
    st.kernel = -1;
    st.comm.kind = SC_COMM_ALL_REDUCE;
    st.comm.axes = sets[i];
    st.comm.group_size = sizes[i];
    st.comm.in = st.comm.out = c;
    st.comm.pack = st.comm.unpack = -1;
    assert_true(sc_program_add_step(p, &st) >= 0);
  }
  assert_int_equal(sc_device_memory_plan(p, &t, &m, &d), SC_OK);
  assert_int_equal(m.bytes[SC_MEM_NCCL_BUFFERS],
                   (SC_NCCL_CHANNELS_DEFAULT * per_channel + 4) + (4 * per_channel + 4));
  assert_int_equal(sc_device_memory_outside(&m),
                   156 + (500 << 20) + m.bytes[SC_MEM_NCCL_BUFFERS]);
  /* the CPU target of the same program has none of these lines */
  sc_device_target cpu = {.device = "cpu", .engine = SC_GEMM_ENGINE_ONEDNN, .threads = 1};
  assert_int_equal(sc_device_memory_plan(p, &cpu, &m, &d), SC_OK);
  for (int l = SC_MEM_CUDA_WORKSPACE; l < SC_MEM_LINE_COUNT; l++) assert_int_equal(m.bytes[l], 0);
  assert_true(sc_mem_line_of_device(SC_MEM_ARENA, "cuda"));
  assert_true(sc_mem_line_of_device(SC_MEM_NCCL_BUFFERS, "cuda"));
  assert_false(sc_mem_line_of_device(SC_MEM_NCCL_BUFFERS, "cpu"));
  assert_false(sc_mem_line_of_device(SC_MEM_GEMM_SCRATCH, "cuda"));
  sc_program_destroy(p);

  /* a cluster file's context and channels reach the target; cpu:local
   * keeps the host's */
  static const char CL[] =
      "{\"gpus_per_node\": 4, \"nodes\": 2, \"gpu\": {\"name\": \"G\", \"memory_bytes\": 1000000000,"
      " \"peak_flops\": {\"bf16\": 1e15}, \"hbm_bytes_per_s\": 3e12, \"context_bytes\": 123456},"
      " \"intra_node\": {\"bandwidth_bytes_per_s\": 4e11, \"latency_s\": 3e-6, \"nccl_channels\": 24},"
      " \"inter_node\": {\"bandwidth_bytes_per_s\": 5e10, \"latency_s\": 1e-5}}";
  sc_cluster *cl = malloc(sizeof *cl);
  assert_int_equal(sc_cluster_read_json(CL, sizeof CL - 1, "g.json", cl, &d), SC_OK);
  assert_true(sc_device_target_of_cluster(cl, &t));
  assert_string_equal(t.device, "cuda");
  assert_int_equal(t.context_bytes, 123456);
  assert_int_equal(t.nccl_channels_intra, 24);
  assert_int_equal(t.nccl_channels_inter, SC_NCCL_CHANNELS_DEFAULT);
  assert_int_equal(sc_cluster_preset("cpu:local", cl, &d), SC_OK);
  sc_device_target host = {.device = "cpu"};
  assert_false(sc_device_target_of_cluster(cl, &host));
  assert_string_equal(host.device, "cpu");
  free(cl);
}

static void test_device_memory_planned(void **state) {
  (void)state;
  rng_seed(21);
  enum { MR8 = 8, K3 = 64, N3 = 2000 };
  float *b1 = malloc(24 * 1024 * 4), *b2 = malloc(40 * 2048 * 4);
  for (int i = 0; i < 24 * 1024; i++) b1[i] = (float)rnd(-1, 1);
  for (int i = 0; i < 40 * 2048; i++) b2[i] = (float)rnd(-1, 1);
  sc_program *p = sc_program_create();
  int64_t off = 0;
#define SLOT(bytes) (off += ((bytes) + 63) / 64 * 64, off - ((bytes) + 63) / 64 * 64)
  int64_t da1[] = {MR8, 24}, db1[] = {24, 1024}, dc1[] = {MR8, 1024};
  int64_t da2[] = {MR8, 2048}, db2[] = {40, 2048}, dc2[] = {MR8, 40};
  int64_t da3[] = {MR8, K3}, db3[] = {K3, N3}, dc3[] = {MR8, N3};
  int32_t a1 = add_buf(p, "a1", SC_BUF_INPUT, 2, da1, SLOT(MR8 * 24 * 4), NULL, -1);
  int32_t a2 = add_buf(p, "a2", SC_BUF_INPUT, 2, da2, SLOT(MR8 * 2048 * 4), NULL, -1);
  int32_t a3 = add_buf(p, "a3", SC_BUF_INPUT, 2, da3, SLOT(MR8 * K3 * 4), NULL, -1);
  int32_t w3 = add_buf(p, "b3", SC_BUF_INPUT, 2, db3, SLOT(K3 * N3 * 4), NULL, -1);
  int32_t w1 = add_buf(p, "w1", SC_BUF_CONST, 2, db1, -1, b1, -1);
  int32_t w2 = add_buf(p, "w2", SC_BUF_CONST, 2, db2, -1, b2, -1);
  int32_t c1 = add_buf(p, "c1", SC_BUF_OUTPUT, 2, dc1, SLOT(MR8 * 1024 * 4), NULL, -1);
  int32_t c2 = add_buf(p, "c2", SC_BUF_OUTPUT, 2, dc2, SLOT(MR8 * 40 * 4), NULL, -1);
  int32_t c2b = add_buf(p, "c2b", SC_BUF_OUTPUT, 2, dc2, SLOT(MR8 * 40 * 4), NULL, -1);
  int32_t c3 = add_buf(p, "c3", SC_BUF_OUTPUT, 2, dc3, SLOT(MR8 * N3 * 4), NULL, -1);
#undef SLOT
  p->arena_bytes = off;
  sc_gemm gs[4] = {
      {.a = a1, .b = w1, .c = c1, .m = MR8, .n = 1024, .k = 24, .lda = 24, .ldb = 1024},
      {.a = a2, .b = w2, .c = c2, .trans_b = true, .m = MR8, .n = 40, .k = 2048, .lda = 2048,
       .ldb = 2048},
      {.a = a2, .b = w2, .c = c2b, .trans_b = true, .m = MR8, .n = 40, .k = 2048, .lda = 2048,
       .ldb = 2048},
      {.a = a3, .b = w3, .c = c3, .m = MR8, .n = N3, .k = K3, .lda = K3, .ldb = N3}};
  for (int i = 0; i < 4; i++) {
    sc_step st;
    memset(&st, 0, sizeof st);
    st.kind = SC_STEP_GEMM;
    st.kernel = -1;
    st.gemm = gs[i];
    st.gemm.batch = 1, st.gemm.ldc = gs[i].n, st.gemm.alpha = 1.0f, st.gemm.bias = -1;
    assert_true(sc_program_add_step(p, &st) >= 0);
  }
  int32_t ins[] = {a1, a2, a3, w3}, outs[] = {c1, c2, c2b, c3};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(sc_program_add_input(p, ins[i]), SC_OK);
    assert_int_equal(sc_program_add_output(p, outs[i]), SC_OK);
  }
  float *in_data[4];
  int64_t in_numel[] = {MR8 * 24, MR8 * 2048, MR8 * K3, K3 * N3};
  for (int i = 0; i < 4; i++) {
    in_data[i] = malloc((size_t)in_numel[i] * 4);
    for (int64_t j = 0; j < in_numel[i]; j++) in_data[i][j] = (float)rnd(-1, 1);
  }
  sc_gemm_engine engines[] = {SC_GEMM_ENGINE_OWN, SC_GEMM_ENGINE_ONEDNN};
  for (int e = 0; e < 2; e++) {
    if (engines[e] == SC_GEMM_ENGINE_OWN && !sc_cpu_gemm_own_supported()) continue;
    sc_gemm_engine_set(engines[e]);
    for (int threads = 1; threads <= 3; threads += 2) {
      sc_session *ss = make_session(p, threads);
      sc_device_memory planned, allocated, want;
      sc_session_memory(ss, &planned, &allocated, NULL, NULL);
      for (int l = 0; l < SC_MEM_LINE_COUNT; l++)
        if (planned.bytes[l] != allocated.bytes[l])
          fail_msg("%s, %d threads: %s planned %lld, allocated %lld",
                   sc_gemm_engine_name(engines[e]), threads, sc_mem_line_name((sc_mem_line)l),
                   (long long)planned.bytes[l], (long long)allocated.bytes[l]);
      sc_device_target t = {.device = "cpu", .engine = engines[e], .threads = threads,
                            .direct_convs = true};
      sc_diag d = {0};
      assert_int_equal(sc_device_memory_plan(p, &t, &want, &d), SC_OK);
      assert_memory_equal(&want, &planned, sizeof want);
      assert_int_equal(planned.bytes[SC_MEM_ARENA], p->arena_bytes);
      if (engines[e] == SC_GEMM_ENGINE_OWN) {
        assert_int_equal(planned.bytes[SC_MEM_PACKED_WEIGHTS], (24 * 1024 + 2048 * 48) * 4);
        assert_int_equal(planned.bytes[SC_MEM_PITCHED_WEIGHTS], 0);
        assert_int_equal(planned.bytes[SC_MEM_GEMM_THREADS],
                         threads * sc_cpu_gemm_thread_buffer_bytes());
        assert_true(planned.bytes[SC_MEM_GEMM_SCRATCH] > 0); /* A packed once: 3 column tiles */
      } else {
        /* 24 rows at pitch 1040, 2048 rows of 40 untransposed (pitch 48) */
        assert_int_equal(planned.bytes[SC_MEM_PITCHED_WEIGHTS], (24 * 1040 + 2048 * 48) * 4);
        assert_int_equal(planned.bytes[SC_MEM_PACKED_WEIGHTS], 0);
        assert_int_equal(planned.bytes[SC_MEM_GEMM_THREADS], 0);
        assert_int_equal(planned.bytes[SC_MEM_GEMM_SCRATCH], 0); /* no input B aliases */
      }
      sc_tensor_view in[4], out[4];
      const char *names[] = {"a1", "a2", "a3", "b3"};
      for (int i = 0; i < 4; i++) {
        const sc_buffer *bb = &p->buffers[ins[i]];
        in[i] = (sc_tensor_view){.name = names[i], .dtype = SC_DTYPE_F32, .rank = 2,
                                 .dims = {bb->dims[0], bb->dims[1]}, .data = in_data[i]};
      }
      int64_t held = sc_cpu_gemm_thread_buffers_held();
      assert_int_equal(sc_session_run(ss, in, 4, out, 4, &d), SC_OK);
      assert_int_equal(sc_cpu_gemm_thread_buffers_held(), held); /* reserved at bind */
      sc_session_destroy(ss);
    }
  }
  sc_gemm_engine_set(SC_GEMM_ENGINE_AUTO);
  for (int i = 0; i < 4; i++) free(in_data[i]);
  sc_program_destroy(p);
  free(b1);
  free(b2);
}

/* With oneDNN, a constant B whose pitch aliases is copied to another
 * pitch once, at bind, not at every run, and a transposed constant B is
 * copied untransposed (pitch_weights in runtime/cpu_device.c): a [24,
 * 1024] weight matrix and a transposed [40, 2048] one (in Y = X @ W and
 * X @ W^T), read by two steps each (one copy shared), give the float64
 * reference's products and the same bits as the product with B given as
 * an input (copied into the scratch per run), on 1 and 2 threads, over two
 * runs of one session. A transposed [200, 100] B, whose pitch does not
 * alias (copied at bind when constant, read in place when an input: other
 * kernels, so other bits), gives the reference's products both ways, the
 * same bits on 1 and 2 threads. Three whose copy would pass 16 MiB: a
 * transposed [8192, 1024] B and a [8192, 1024] one, re-pitched per run in
 * panels of whole column tiles (sc_gemm_repitch_panel), and a [16384, 1024]
 * one whose one column of tiles alone passes it, read in place at its
 * aliasing pitch, give the same bits as the whole copy made at bind. */
static void test_gemm_aliasing_pitch_const(void **state) {
  (void)state;
  rng_seed(12);
  sc_gemm_engine_set(SC_GEMM_ENGINE_ONEDNN);
  enum { M5 = 8 };
  for (int kind = 0; kind < 6; kind++) {
    int trans = kind > 0 && kind < 4;
    int64_t n = (int64_t[]){1024, 40, 200, 8192, 1024, 1024}[kind];
    int64_t k = (int64_t[]){24, 2048, 100, 1024, 8192, 16384}[kind];
    int64_t nb = n * k, na = M5 * k, nc = M5 * n;
    float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *res[2][2];
    for (int64_t i = 0; i < na; i++) a[i] = (float)rnd(-1, 1);
    for (int64_t i = 0; i < nb; i++) b[i] = (float)rnd(-1, 1);
    for (int konst = 0; konst < 2; konst++) {
      sc_program *p = sc_program_create();
      int64_t da[] = {M5, k}, db[] = {trans ? n : k, trans ? k : n}, dc[] = {M5, n};
      int64_t ob = (na * 4 + 63) / 64 * 64, oc = ob + (konst ? 0 : (nb * 4 + 63) / 64 * 64);
      int64_t oc2 = oc + (nc * 4 + 63) / 64 * 64;
      int32_t ba = add_buf(p, "a", SC_BUF_INPUT, 2, da, 0, NULL, -1);
      int32_t bb = konst ? add_buf(p, "b", SC_BUF_CONST, 2, db, -1, b, -1)
                         : add_buf(p, "b", SC_BUF_INPUT, 2, db, ob, NULL, -1);
      int32_t bc = add_buf(p, "c", SC_BUF_OUTPUT, 2, dc, oc, NULL, -1);
      int32_t bc2 = add_buf(p, "c2", SC_BUF_OUTPUT, 2, dc, oc2, NULL, -1);
      p->arena_bytes = oc2 + nc * 4;
      for (int step = 0; step < 2; step++) {
        sc_step st;
        memset(&st, 0, sizeof st);
        st.kind = SC_STEP_GEMM;
        st.kernel = -1;
        st.gemm = (sc_gemm){.a = ba, .b = bb, .c = step ? bc2 : bc, .trans_b = trans, .batch = 1,
                            .m = M5, .n = n, .k = k, .lda = k, .ldb = trans ? k : n, .ldc = n,
                            .alpha = 1.0f, .beta = 0.0f, .bias = -1};
        /* 5 column tiles of 688; 1 of 512 (8192 x 512 floats: 16 MiB) */
        const int64_t panels[] = {n, n, 0, 3440, 512, 0};
        assert_int_equal(sc_gemm_repitch_panel(&st.gemm), panels[kind]);
        assert_true((sc_gemm_repitch_numel(&st.gemm) > 0) == (panels[kind] > 0));
        assert_true(sc_gemm_repitch_numel(&st.gemm) <= (1 << 22));
        assert_true(sc_program_add_step(p, &st) >= 0);
      }
      assert_int_equal(sc_program_add_input(p, ba), SC_OK);
      if (!konst) assert_int_equal(sc_program_add_input(p, bb), SC_OK);
      assert_int_equal(sc_program_add_output(p, bc), SC_OK);
      assert_int_equal(sc_program_add_output(p, bc2), SC_OK);
      for (int t = 0; t < 2; t++) {
        sc_session *ss = make_session(p, t + 1);
        sc_tensor_view in[2] = {
            {.name = "a", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M5, k}, .data = a},
            {.name = "b", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {db[0], db[1]}, .data = b}};
        sc_tensor_view out[2];
        sc_diag d = {0};
        for (int run = 0; run < 2; run++) {
          sc_diag_clear(&d);
          assert_int_equal(sc_session_run(ss, in, konst ? 1 : 2, out, 2, &d), SC_OK);
          assert_memory_equal(out[0].data, out[1].data, (size_t)nc * 4);
        }
        res[konst][t] = malloc((size_t)nc * 4);
        memcpy(res[konst][t], out[0].data, (size_t)nc * 4);
        sc_session_destroy(ss);
      }
      sc_program_destroy(p);
    }
    for (int m = 0; m < M5; m++)
      for (int64_t j = 0; j < n; j++) {
        double want = 0, mag = 0;
        for (int64_t q = 0; q < k; q++) {
          double x = (double)a[m * k + q] * (trans ? b[j * k + q] : b[q * n + j]);
          want += x;
          mag += fabs(x);
        }
        for (int konst = 0; konst < 2; konst++) {
          double got = res[konst][0][m * n + j];
          /* f32 sums of thousands of terms: within 2^-20 of the sum of
           * their magnitudes (about 16 f32 roundings of it) */
          if (!close_to(got, want) && !(k > 4096 && fabs(got - want) <= mag / (1 << 20)))
            fail_msg("kind %d, %s B: c[%d,%lld] = %g, want %g", kind, konst ? "constant" : "input",
                     m, (long long)j, got, want);
        }
      }
    for (int konst = 0; konst < 2; konst++)
      for (int t = 0; t < 2; t++)
        assert_memory_equal(res[konst][t], res[kind == 2 ? konst : 0][0], (size_t)nc * 4);
    for (int konst = 0; konst < 2; konst++)
      for (int t = 0; t < 2; t++) free(res[konst][t]);
    free(a);
    free(b);
  }
  sc_gemm_engine_set(SC_GEMM_ENGINE_AUTO);
}

/* ---- the own GEMM kernel (runtime/cpu_gemm.c) ---- */

/* op(X)[r][c] of a row-major X with leading dimension ld */
static float op_at(const float *x, bool trans, int64_t ld, int64_t r, int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

/* One tile through sc_cpu_gemm_tile against the float64 reference, for
 * every transposition, alpha and beta (beta 0 over a C of NaNs, which must
 * not be read), at shapes that cut every block of the kernel (6 rows, 16
 * columns, 256 of k, 128 rows per A block) in the middle; then the same
 * tile reading op(B) packed (sc_gemm_pack_b) from column n0 of a wider
 * matrix and op(A) packed (sc_gemm_pack_a) gives the same bits. */
static void test_own_gemm_tile(void **state) {
  (void)state;
  if (!sc_cpu_gemm_own_supported())
    SC_SKIP("this CPU has no AVX2/FMA: no own GEMM kernel to test (oneDNN runs every product)");
  rng_seed(21);
  static const int64_t shapes[][3] = {{1, 1, 1},   {7, 17, 3},   {6, 16, 256}, {13, 33, 257},
                                      {64, 48, 600}, {131, 40, 70}, {5, 100, 513},
                                      {270, 20, 300}};
  static const float alphas[] = {1.0f, 0.5f}, betas[] = {0.0f, 1.0f, -0.5f};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
      int64_t n0 = 32, nw = n0 + n + 5; /* the tile's columns inside a wider B */
      int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : nw) + 2, ldc = n + 7;
      float *a = malloc(sizeof(float) * (size_t)((ta ? k : m) * lda));
      float *b = malloc(sizeof(float) * (size_t)((tb ? nw : k) * ldb));
      float *c0 = malloc(sizeof(float) * (size_t)(m * ldc)), *c = malloc(sizeof *c * m * ldc);
      float *c2 = malloc(sizeof(float) * (size_t)(m * ldc));
      for (int64_t i = 0; i < (ta ? k : m) * lda; i++) a[i] = (float)rnd(-1, 1);
      for (int64_t i = 0; i < (tb ? nw : k) * ldb; i++) b[i] = (float)rnd(-1, 1);
      for (int64_t i = 0; i < m * ldc; i++) c0[i] = (float)rnd(-1, 1);
      /* the tile's op(B) starts at column n0 */
      const float *bt = tb ? b + n0 * ldb : b + n0;
      int64_t pn = sc_gemm_packed_b_numel(k, nw);
      assert_true(pn >= k * nw);
      size_t pbytes = sizeof(float) * (size_t)((pn + 15) / 16 * 16);
      sc_gemm_packed_b pb = {.data = aligned_alloc(64, pbytes)};
      sc_gemm_pack_b(tb, k, nw, b, ldb, 0, k, &pb);
      size_t asz = sizeof(float) * (size_t)((ta ? k : m) * lda);
      float *a2 = malloc(asz);
      int64_t pan = sc_gemm_packed_a_numel(m, k);
      assert_true(pan >= m * k);
      float *pa = aligned_alloc(64, sizeof(float) * (size_t)((pan + 15) / 16 * 16));
      for (size_t ai = 0; ai < 2; ai++)
        for (size_t bi = 0; bi < 3; bi++) {
          float alpha = alphas[ai], beta = betas[bi];
          for (int64_t i = 0; i < m * ldc; i++) c[i] = beta == 0.0f ? NAN : c0[i];
          memcpy(c2, c, sizeof(float) * (size_t)(m * ldc));
          assert_true(sc_cpu_gemm_tile(ta, tb, m, n, k, alpha, a, lda, NULL, bt, ldb, NULL, 0,
                                       beta, c, ldc));
          /* both operands packed beforehand: A's rows from a copy of A
           * that is then spoiled, so that only the packed form is read */
          memcpy(a2, a, asz);
          sc_gemm_pack_a(ta, m, k, a2, lda, pa);
          for (int64_t i = 0; i < (ta ? k : m) * lda; i++) a2[i] = NAN;
          assert_true(sc_cpu_gemm_tile(ta, tb, m, n, k, alpha, a2, lda, pa, NULL, 0, &pb, n0,
                                       beta, c2, ldc));
          for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
              double got = c[i * ldc + j];
              if (j >= n) { /* outside the tile: untouched */
                assert_memory_equal(&c[i * ldc + j], beta == 0.0f ? &c[i * ldc + j]
                                                                  : &c0[i * ldc + j],
                                    sizeof(float));
                continue;
              }
              double want = beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j];
              double acc = 0;
              for (int64_t q = 0; q < k; q++)
                acc += (double)op_at(a, ta, lda, i, q) * op_at(bt, tb, ldb, q, j);
              want += alpha * acc;
              if (!close_to(got, want))
                fail_msg("%lldx%lldx%lld trans %d%d alpha %g beta %g: c[%lld,%lld] = %g, want %g",
                         (long long)m, (long long)n, (long long)k, ta, tb, alpha, beta,
                         (long long)i, (long long)j, got, want);
            }
          for (int64_t i = 0; i < m; i++) /* packed B: the same bits */
            assert_memory_equal(c + i * ldc, c2 + i * ldc, sizeof(float) * (size_t)n);
        }
      free(pb.data);
      free(pa);
      free(a2);
      free(a);
      free(b);
      free(c0);
      free(c);
      free(c2);
    }
}

/* A session whose product reads a constant, transposed B that the CPU
 * device packs at bind (m, n, k off every block boundary), with each
 * engine: the float64 reference's result, the same bits on 1 and 3
 * threads. */
static void test_gemm_engines(void **state) {
  (void)state;
  rng_seed(23);
  enum { M5 = 70, N5 = 100, K5 = 300 };
  float *w = malloc(sizeof(float) * N5 * K5), *a = malloc(sizeof(float) * M5 * K5);
  for (int i = 0; i < N5 * K5; i++) w[i] = (float)rnd(-1, 1);
  for (int i = 0; i < M5 * K5; i++) a[i] = (float)rnd(-1, 1);
  sc_program *p = sc_program_create();
  int64_t da[] = {M5, K5}, dw[] = {N5, K5}, dc[] = {M5, N5};
  int64_t oc = (M5 * K5 * 4 + 63) / 64 * 64;
  int32_t ba = add_buf(p, "a", SC_BUF_INPUT, 2, da, 0, NULL, -1);
  int32_t bw = add_buf(p, "w", SC_BUF_CONST, 2, dw, -1, w, -1);
  int32_t bc = add_buf(p, "c", SC_BUF_OUTPUT, 2, dc, oc, NULL, -1);
  p->arena_bytes = oc + M5 * N5 * 4;
  sc_step st;
  memset(&st, 0, sizeof st);
  st.kind = SC_STEP_GEMM;
  st.kernel = -1;
  st.gemm = (sc_gemm){.a = ba, .b = bw, .c = bc, .trans_b = true, .batch = 1, .m = M5, .n = N5,
                      .k = K5, .lda = K5, .ldb = K5, .ldc = N5, .alpha = 1.0f, .beta = 0.0f,
                      .bias = -1};
  assert_true(sc_program_add_step(p, &st) >= 0);
  assert_int_equal(sc_program_add_input(p, ba), SC_OK);
  assert_int_equal(sc_program_add_output(p, bc), SC_OK);
  sc_gemm_engine engines[] = {SC_GEMM_ENGINE_ONEDNN, SC_GEMM_ENGINE_OWN};
  for (int e = 0; e < 2; e++) {
    sc_gemm_engine_set(engines[e]);
    if (engines[e] == SC_GEMM_ENGINE_OWN && !sc_cpu_gemm_own_supported())
      assert_int_equal(sc_gemm_engine_get(), SC_GEMM_ENGINE_ONEDNN);
    float *res[2];
    for (int t = 0; t < 2; t++) {
      sc_session *ss = make_session(p, t ? 3 : 1);
      sc_tensor_view in = {.name = "a", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M5, K5},
                           .data = a};
      sc_tensor_view out;
      sc_diag d = {0};
      sc_diag_clear(&d);
      assert_int_equal(sc_session_run(ss, &in, 1, &out, 1, &d), SC_OK);
      res[t] = malloc(sizeof(float) * M5 * N5);
      memcpy(res[t], out.data, sizeof(float) * M5 * N5);
      sc_session_destroy(ss);
    }
    for (int i = 0; i < M5; i++)
      for (int j = 0; j < N5; j++) {
        double want = 0;
        for (int q = 0; q < K5; q++) want += (double)a[i * K5 + q] * w[j * K5 + q];
        if (!close_to(res[0][i * N5 + j], want))
          fail_msg("%s: c[%d,%d] = %g, want %g", sc_gemm_engine_name(sc_gemm_engine_get()), i, j,
                   res[0][i * N5 + j], want);
      }
    assert_memory_equal(res[0], res[1], sizeof(float) * M5 * N5);
    free(res[0]);
    free(res[1]);
  }
  sc_gemm_engine_set(SC_GEMM_ENGINE_AUTO);
  sc_program_destroy(p);
  free(w);
  free(a);
}

static void test_input_validation(void **state) {
  (void)state;
  rng_seed(9);
  prog1 t;
  build_prog1(&t);
  float *x = calloc(M * K, sizeof(float));
  sc_session *s = make_session(t.p, 1);
  sc_tensor_view out[3];
  sc_diag d = {0};

  sc_tensor_view in = {.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {M + 1, K},
                       .data = x};
  sc_diag_clear(&d);
  assert_int_equal(sc_session_run(s, &in, 1, out, 3, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "input 'x': expected f32[64,32], got f32[65,32]"));

  in.dims[0] = M;
  in.dtype = SC_DTYPE_F64;
  sc_diag_clear(&d);
  assert_int_equal(sc_session_run(s, &in, 1, out, 3, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "got f64[64,32]"));

  in.dtype = SC_DTYPE_F32;
  sc_diag_clear(&d);
  assert_int_equal(sc_session_run(s, &in, 0, out, 3, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "takes 1 inputs, 0 given"));

  in.name = "y";
  sc_diag_clear(&d);
  assert_int_equal(sc_session_run(s, &in, 1, out, 3, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "'y'"));
  sc_session_destroy(s);

  sc_session_opts o;
  sc_session_opts_init(&o);
  o.device.name = "tpu";
  sc_diag_clear(&d);
  assert_int_equal(sc_session_create(t.p, &o, &s, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "unknown device 'tpu'"));
  free(x);
  free_prog1(&t);
}

/* ---- thread pool ---- */
typedef struct cover {
  atomic_int *hits;
  atomic_int calls;
} cover;

static void mark(void *ud, int64_t b, int64_t e) {
  cover *c = ud;
  atomic_fetch_add(&c->calls, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_thread_pool(void **state) {
  (void)state;
  sc_thread_pool *tp = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_thread_pool_create(3, &tp, &d), SC_OK);
  assert_int_equal(sc_thread_pool_threads(tp), 3);
  static const int64_t totals[] = {1, 2, 7, 100, 1001};
  static const int64_t chunks[] = {1, 2, 3, 12, 5000};
  for (int rep = 0; rep < 20; rep++)
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
      for (size_t j = 0; j < sizeof chunks / sizeof chunks[0]; j++) {
        int64_t n = totals[i];
        cover c = {calloc((size_t)n, sizeof(atomic_int)), 0};
        sc_thread_pool_run(tp, mark, &c, n, chunks[j]);
        for (int64_t k = 0; k < n; k++) assert_int_equal(atomic_load(&c.hits[k]), 1);
        int64_t want = chunks[j] < n ? chunks[j] : n;
        assert_true(atomic_load(&c.calls) >= 1 && atomic_load(&c.calls) <= want);
        free(c.hits);
      }
  sc_thread_pool_destroy(tp);
  assert_int_not_equal(sc_thread_pool_create(0, &tp, &d), SC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_kernels_view),
      cmocka_unit_test(test_threads_identical),
      cmocka_unit_test(test_shared_arena),
      cmocka_unit_test(test_bound_state),
      cmocka_unit_test(test_state_slot),
      cmocka_unit_test(test_runs_read_later),
      cmocka_unit_test(test_batched_transposed_gemm),
      cmocka_unit_test(test_gemm_aliasing_pitch),
      cmocka_unit_test(test_gemm_aliasing_pitch_const),
      cmocka_unit_test(test_gemm_bf16),
      cmocka_unit_test(test_own_gemm_tile),
      cmocka_unit_test(test_gemm_engines),
      cmocka_unit_test(test_device_memory_planned),
      cmocka_unit_test(test_device_memory_conv_lines),
      cmocka_unit_test(test_device_memory_cuda_lines),
      cmocka_unit_test(test_input_validation),
      cmocka_unit_test(test_thread_pool),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
