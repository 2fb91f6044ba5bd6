/* test_multi_tensor.c — sc_program_multi_tensor (codegen/multi_tensor.c)
 * and the multi-tensor kernels it makes (kir.h, n_segs).
 *
 * A program of six elementwise kernel steps, each o = x * s[0] - sqrt(|g|)
 * * 0.125 over tensors of its own shape (s a scalar): the first three are
 * alike and independent and must become one kernel of three segments; the
 * fourth reads the first one's output, so it may not join them and starts
 * a run of its own with the fifth; the sixth has another constant and
 * stays alone. Then every merged kernel, run by kir_interpret and by the
 * CPU backend (the whole range, and in uneven chunks that cut segments),
 * must write exactly the bits the original kernels wrote (kir_interpret on
 * them, before the pass), and the program must survive its JSON round trip
 * with the segments intact; the cost model (no measured profile: memory
 * time, bytes over bandwidth) must time the merged kernel as the sum of
 * the three it replaced, within 1e-12. Last, a table too large for
 * SC_MULTI_TENSOR_ARG_BYTES is cut into several.
 *
 * A multi-tensor reduction (kir.h, seg_inner): sum-of-squares kernels (s =
 * sum(g * g), the gradient norm's pieces) over tensors of 1, 3, 13, 16
 * ([4, 4]), 1000 (read through dims [8, 5, 25]) and 65537 elements, seeded
 * random, and one of [4, 5] read transposed; the first six must become one
 * kernel of six segments, each its own inner extent, the last stay alone
 * (its index is not the inner one), sinking past an elementwise kernel
 * between the second and the third that is independent of them. On kir_interpret, the CPU backend and
 * the emulated GPU the merged kernel must write exactly the bits the six
 * kernels wrote on the same backend (a GPU kernel sums up to 16 elements
 * serially, more in a block: the merged kernel keeps each order), and each
 * sum must be within 1e-4 (relative) of a double-precision reference: f32
 * sums of up to 65537 terms, 1e-5 expected from a sequential one, the
 * interpreter's; program.json keeps the inner extents and refuses an
 * extent of 0. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "codegen/cpu/cpu.h"
#include "codegen/cuda/cuda.h"
#include "codegen/dist_sim.h"
#include "codegen/kir.h"
#include "codegen/program.h"
#include "codegen/memplan.h"
#include "codegen/program_json.h"
#include "passes/plan/cluster.h"
#include "runtime/cuda_emu.h"

static int32_t add_buffer(sc_program *p, const char *name, sc_buf_kind kind, int32_t rank,
                          const int64_t *dims) {
  sc_buffer b = {0};
  b.name = name;
  b.kind = kind;
  b.dtype = SC_DTYPE_F32;
  b.rank = rank;
  int64_t n = 1;
  for (int32_t d = 0; d < rank; d++) n *= (b.dims[d] = dims[d]);
  b.bytes = n * 4;
  b.offset = -1;
  b.alias_of = -1;
  b.value = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  return id;
}

/* Kernel k, verified, as a step of p (its origin the kernel's name). */
static void add_step(sc_program *p, kir_kernel *k) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (kir_verify(k, &d) != SC_OK) fail_msg("%s", d.msg);
  sc_step st = {0};
  st.kind = SC_STEP_KERNEL;
  st.kernel = sc_program_add_kernel(p, k);
  st.origin = k->name;
  assert_true(st.kernel >= 0 && sc_program_add_step(p, &st) >= 0);
}

/* A kernel step o = x * s[0] - sqrt(|g|) * c over x's shape, with the
 * row-major point index (as lowering writes it). */
static void add_update(sc_program *p, int32_t x, int32_t g, int32_t s, int32_t o, double c) {
  char name[32];
  snprintf(name, sizeof name, "k%d", (int)p->n_kernels);
  kir_kernel *k = kir_kernel_create(&p->arena, name);
  assert_non_null(k);
  const sc_buffer *b = &p->buffers[x];
  k->outer_rank = b->rank;
  int64_t n = 1;
  for (int32_t d = 0; d < b->rank; d++) n *= (k->outer_dims[d] = b->dims[d]);
  sc_arena *A = &p->arena;
  int32_t px = kir_add_param(A, k, x, SC_DTYPE_F32, n, false);
  int32_t pg = kir_add_param(A, k, g, SC_DTYPE_F32, n, false);
  int32_t ps = kir_add_param(A, k, s, SC_DTYPE_F32, 1, false);
  int32_t po = kir_add_param(A, k, o, SC_DTYPE_F32, n, true);
  int32_t idx = kir_const_i(A, k, SC_DTYPE_I64, 0), stride = 1;
  for (int32_t d = b->rank - 1; d >= 0; d--) {
    idx = kir_binary(A, k, KIR_ADD, idx,
                     kir_binary(A, k, KIR_MUL, kir_var(A, k, d),
                                kir_const_i(A, k, SC_DTYPE_I64, stride)));
    stride *= (int32_t)b->dims[d];
  }
  int32_t v = kir_binary(A, k, KIR_MUL, kir_load(A, k, px, idx),
                         kir_load(A, k, ps, kir_const_i(A, k, SC_DTYPE_I64, 0)));
  int32_t r = kir_unary(A, k, KIR_SQRT, kir_unary(A, k, KIR_ABS, kir_load(A, k, pg, idx)));
  kir_add_store(A, k, po, idx,
                kir_binary(A, k, KIR_SUB, v,
                           kir_binary(A, k, KIR_MUL, r, kir_const_f(A, k, SC_DTYPE_F32, c))));
  add_step(p, k);
}

enum { N_UPDATES = 6 };

/* The program above; buffers x_i, g_i, s_i, o_i are 4i .. 4i + 3. */
static sc_program *build(void) {
  static const int64_t shapes[N_UPDATES][3] = {{5, 7, 0}, {13, 0, 0}, {2, 3, 4},
                                               {5, 7, 0}, {9, 0, 0},  {3, 3, 0}};
  static const int32_t ranks[N_UPDATES] = {2, 1, 3, 2, 1, 2};
  sc_program *p = sc_program_create();
  assert_non_null(p);
  for (int32_t i = 0; i < N_UPDATES; i++) {
    add_buffer(p, "x", SC_BUF_INPUT, ranks[i], shapes[i]);
    add_buffer(p, "g", SC_BUF_INPUT, ranks[i], shapes[i]);
    add_buffer(p, "s", SC_BUF_INPUT, 1, (int64_t[]){1});
    add_buffer(p, "o", SC_BUF_TEMP, ranks[i], shapes[i]);
  }
  for (int32_t i = 0; i < N_UPDATES; i++) {
    int32_t x = 4 * i;
    if (i == 3) x = 3; /* reads o_0: depends on the first kernel */
    add_update(p, x, 4 * i + 1, 4 * i + 2, 4 * i + 3, i == 5 ? 0.25 : 0.125);
  }
  return p;
}

/* Seeded inputs for every buffer (NaN and -0 among them); outputs filled
 * with a byte pattern. */
static void **fill_buffers(const sc_program *p) {
  void **bufs = calloc((size_t)p->n_buffers, sizeof *bufs);
  assert_non_null(bufs);
  for (int32_t b = 0; b < p->n_buffers; b++) {
    bufs[b] = malloc((size_t)p->buffers[b].bytes);
    assert_non_null(bufs[b]);
    int64_t n = p->buffers[b].bytes / 4;
    if (p->buffers[b].kind != SC_BUF_INPUT) {
      memset(bufs[b], 0xA5, (size_t)p->buffers[b].bytes);
      continue;
    }
    for (int64_t i = 0; i < n; i++)
      ((float *)bufs[b])[i] = i % 11 == 3 ? NAN : i % 13 == 5 ? -0.0f : (float)rnd(-4, 4);
  }
  return bufs;
}

static void free_buffers(const sc_program *p, void **bufs) {
  for (int32_t b = 0; b < p->n_buffers; b++) free(bufs[b]);
  free(bufs);
}

/* Runs kernel k over program buffers bufs with the interpreter. */
static void interpret(const kir_kernel *k, void **bufs) {
  void *pb[64];
  assert_true(k->n_params <= 64);
  for (int32_t i = 0; i < k->n_params; i++) pb[i] = bufs[k->params[i].buffer];
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (kir_interpret(k, pb, &d) != SC_OK) fail_msg("kir_interpret(%s): %s", k->name, d.msg);
}

/* Every output buffer of a and b bitwise equal. */
static void same_outputs(const sc_program *p, void **a, void **b, const char *what) {
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (p->buffers[i].kind == SC_BUF_TEMP && memcmp(a[i], b[i], (size_t)p->buffers[i].bytes))
      fail_msg("%s: buffer %d differs", what, (int)i);
}

/* program.json text is refused as invalid, naming `needle`. */
static void json_refused(const char *text, const char *needle) {
  sc_program *r = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_read_json(text, strlen(text), NULL, 0, &r, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, needle));
}

static void test_merge(void **state) {
  (void)state;
  sc_program *p = build();
  const kir_kernel *orig[N_UPDATES];
  for (int32_t i = 0; i < N_UPDATES; i++) orig[i] = p->kernels[i];
  rng_seed(4242);
  void **want = fill_buffers(p);
  for (int32_t i = 0; i < N_UPDATES; i++) interpret(orig[i], want);

  sc_diag d = {0};
  sc_cluster cl;
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_preset("h100-sxm:8x1", &cl, &d), SC_OK);
  double t3 = 0, flops;
  for (int32_t s = 0; s < 3; s++) {
    double t;
    assert_int_equal(sc_dist_step_compute_time(&cl, p, &p->steps[s], &t, &flops, &d), SC_OK);
    t3 += t;
  }
  assert_int_equal(sc_program_multi_tensor(p, &d), SC_OK);
  double tm = 0;
  assert_int_equal(sc_dist_step_compute_time(&cl, p, &p->steps[0], &tm, &flops, &d), SC_OK);
  if (!(fabs(tm - t3) <= 1e-12 * t3))
    fail_msg("cost model: merged kernel %.9g s, the three it replaced %.9g s", tm, t3);
  /* [k0 k1 k2] [k3 k4] [k5] */
  assert_int_equal(p->n_steps, 3);
  assert_int_equal(p->n_kernels, 3);
  const kir_kernel *m = p->kernels[p->steps[0].kernel];
  assert_int_equal(m->n_segs, 3);
  assert_int_equal(m->seg_params, 4);
  assert_int_equal(m->n_params, 12);
  assert_int_equal(m->outer_dims[0], 35 + 13 + 24);
  assert_int_equal(m->seg_start[1], 35);
  assert_int_equal(m->seg_start[2], 48);
  assert_string_equal(m->name, "k0_mt3");
  assert_string_equal(p->steps[0].origin, "k0,k1,k2");
  assert_int_equal(p->kernels[p->steps[1].kernel]->n_segs, 2);
  assert_int_equal(p->kernels[p->steps[2].kernel]->n_segs, 0);
  assert_ptr_equal(p->kernels[p->steps[2].kernel], orig[5]);
  for (int32_t s = 0; s < 3; s++) assert_int_equal(p->steps[s].kernel, s);
  /* in place only within a segment */
  assert_false(kir_reads_aligned(m, 0, 7));

  /* the interpreter over the merged program: the same bits */
  rng_seed(4242);
  void **got = fill_buffers(p);
  for (int32_t s = 0; s < p->n_steps; s++) interpret(p->kernels[p->steps[s].kernel], got);
  same_outputs(p, want, got, "kir_interpret, merged");
  free_buffers(p, got);

  /* the CPU backend: whole range, then uneven chunks across segments */
  sc_cpu_module *cm = NULL;
  sc_cpu_opts o;
  sc_cpu_opts_init(&o);
  sc_diag_clear(&d);
  if (sc_cpu_jit(p, &o, &cm, &d) != SC_OK) fail_msg("sc_cpu_jit: %s", d.msg);
  for (int chunked = 0; chunked < 2; chunked++) {
    rng_seed(4242);
    got = fill_buffers(p);
    for (int32_t s = 0; s < p->n_steps; s++) {
      const kir_kernel *k = p->kernels[p->steps[s].kernel];
      void *pb[64];
      for (int32_t i = 0; i < k->n_params; i++) pb[i] = got[k->params[i].buffer];
      int64_t total = k->outer_dims[0];
      for (int32_t dd = 1; dd < k->outer_rank; dd++) total *= k->outer_dims[dd];
      sc_cpu_kernel_fn fn = sc_cpu_kernel(cm, p->steps[s].kernel);
      assert_non_null(fn);
      if (!chunked) {
        fn(pb, 0, total);
        continue;
      }
      for (int64_t at = 0; at < total; at += 9) fn(pb, at, at + 9 < total ? at + 9 : total);
      fn(pb, total, total);
    }
    same_outputs(p, want, got, chunked ? "CPU, chunks of 9" : "CPU, whole range");
    free_buffers(p, got);
  }
  sc_cpu_module_destroy(cm);

  /* program.json keeps the segments */
  char *text = NULL;
  sc_diag_clear(&d);
  if (sc_memplan_run(p, &d) != SC_OK || sc_program_write_json(p, NULL, &text, &d) != SC_OK) fail_msg("%s", d.msg);
  sc_program *q = NULL;
  sc_diag_clear(&d);
  if (sc_program_read_json(text, strlen(text), NULL, 0, &q, &d) != SC_OK)
    fail_msg("read back: %s", d.msg);
  const kir_kernel *mq = q->kernels[q->steps[0].kernel];
  assert_int_equal(mq->n_segs, 3);
  assert_int_equal(mq->seg_params, 4);
  assert_memory_equal(mq->seg_start, m->seg_start, 4 * sizeof *m->seg_start);
  /* a segment start out of order is refused */
  char *bad = strstr(text, "\"starts\"");
  assert_non_null(bad);
  char *c35 = strstr(bad, "35");
  assert_non_null(c35);
  c35[0] = '9';
  c35[1] = '9';
  json_refused(text, "segment");
  sc_program_destroy(q);
  sc_free(text);
  free_buffers(p, want);
  sc_program_destroy(p);
}

/* A run longer than one table holds: each table within the limit. */
static void test_table_limit(void **state) {
  (void)state;
  int32_t per = SC_MULTI_TENSOR_ARG_BYTES / (4 * 8); /* about that many fit */
  int32_t n = 3 * per;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  for (int32_t i = 0; i < n; i++) {
    add_buffer(p, "x", SC_BUF_INPUT, 1, (int64_t[]){3});
    add_buffer(p, "g", SC_BUF_INPUT, 1, (int64_t[]){3});
    add_buffer(p, "s", SC_BUF_INPUT, 1, (int64_t[]){1});
    add_buffer(p, "o", SC_BUF_TEMP, 1, (int64_t[]){3});
  }
  for (int32_t i = 0; i < n; i++) add_update(p, 4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3, 0.125);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_multi_tensor(p, &d), SC_OK);
  assert_true(p->n_steps >= 3 && p->n_steps <= 4);
  int32_t segs = 0;
  for (int32_t s = 0; s < p->n_steps; s++) {
    const kir_kernel *k = p->kernels[p->steps[s].kernel];
    assert_true(8 * ((int64_t)k->n_params + 2) <= SC_MULTI_TENSOR_ARG_BYTES);
    segs += k->n_segs > 0 ? k->n_segs : 1;
  }
  assert_int_equal(segs, n);
  sc_program_destroy(p);
}

/* A kernel step s[0] = sum(g * g) over all of g's elements (shape dims),
 * g read at the row-major offset of r's digits over dims (transposed: the
 * last two dims swapped, as a transposed read writes it). */
static void add_sumsq(sc_program *p, int32_t g, int32_t s, int32_t rank, const int64_t *dims,
                      bool transposed) {
  char name[32];
  snprintf(name, sizeof name, "k%d", (int)p->n_kernels);
  kir_kernel *k = kir_kernel_create(&p->arena, name);
  assert_non_null(k);
  sc_arena *A = &p->arena;
  int64_t n = 1;
  for (int32_t d = 0; d < rank; d++) n *= dims[d];
  k->inner = n;
  int32_t pg = kir_add_param(A, k, g, SC_DTYPE_F32, n, false);
  int32_t ps = kir_add_param(A, k, s, SC_DTYPE_F32, 1, true);
  /* r's digit of dim d: (r / below) % dims[d]; stored at stride[d] */
  int64_t stride[SC_MAX_RANK], below = 1;
  for (int32_t d = rank - 1; d >= 0; d--)
    stride[d] = d == rank - 1 ? 1 : stride[d + 1] * dims[d + 1];
  if (transposed) {
    int64_t t = stride[rank - 1];
    stride[rank - 1] = dims[rank - 2]; /* element [i, j] of a [d1, d0] tensor: j * d0 + i */
    stride[rank - 2] = t;
  }
  int32_t r = kir_var(A, k, KIR_INNER), idx = kir_const_i(A, k, SC_DTYPE_I64, 0);
  for (int32_t d = rank - 1; d >= 0; d--) {
    int32_t dig = kir_binary(A, k, KIR_DIV, r, kir_const_i(A, k, SC_DTYPE_I64, below));
    if (d > 0) dig = kir_binary(A, k, KIR_MOD, dig, kir_const_i(A, k, SC_DTYPE_I64, dims[d]));
    idx = kir_binary(A, k, KIR_ADD, idx,
                     kir_binary(A, k, KIR_MUL, dig, kir_const_i(A, k, SC_DTYPE_I64, stride[d])));
    below *= dims[d];
  }
  int32_t x = kir_load(A, k, pg, idx);
  int32_t ph = kir_add_reduce(A, k, KIR_RED_SUM, SC_DTYPE_F32, kir_binary(A, k, KIR_MUL, x, x));
  kir_add_store(A, k, ps, kir_const_i(A, k, SC_DTYPE_I64, 0), kir_reg(A, k, ph));
  add_step(p, k);
}

enum { N_SUMS = 7, N_MERGED = 6 };
static const int64_t SUM_LEN[N_SUMS] = {1, 3, 13, 16, 1000, 65537, 20};

/* The sums' program: buffers g_i, s_i are 2i, 2i + 1. */
static sc_program *build_sums(void) {
  static const int64_t shapes[N_SUMS][3] = {{1}, {3}, {13}, {4, 4}, {8, 5, 25}, {65537}, {4, 5}};
  static const int32_t ranks[N_SUMS] = {1, 1, 1, 2, 3, 1, 2};
  sc_program *p = sc_program_create();
  assert_non_null(p);
  for (int32_t i = 0; i < N_SUMS; i++) {
    add_buffer(p, "g", SC_BUF_INPUT, ranks[i], shapes[i]);
    add_buffer(p, "s", SC_BUF_TEMP, 1, (int64_t[]){1});
  }
  int32_t x = add_buffer(p, "x", SC_BUF_INPUT, 2, (int64_t[]){5, 7});
  add_buffer(p, "g", SC_BUF_INPUT, 2, (int64_t[]){5, 7});
  add_buffer(p, "s", SC_BUF_INPUT, 1, (int64_t[]){1});
  add_buffer(p, "o", SC_BUF_TEMP, 2, (int64_t[]){5, 7});
  for (int32_t i = 0; i < N_SUMS; i++) {
    add_sumsq(p, 2 * i, 2 * i + 1, ranks[i], shapes[i], i == N_SUMS - 1);
    if (i == 1) add_update(p, x, x + 1, x + 2, x + 3, 0.125); /* independent of the sums */
  }
  return p;
}

/* Seeded inputs in [-2, 2]; outputs a byte pattern. */
static void **fill_sums(const sc_program *p) {
  void **bufs = calloc((size_t)p->n_buffers, sizeof *bufs);
  assert_non_null(bufs);
  rng_seed(777);
  for (int32_t b = 0; b < p->n_buffers; b++) {
    bufs[b] = malloc((size_t)p->buffers[b].bytes);
    assert_non_null(bufs[b]);
    memset(bufs[b], 0xA5, (size_t)p->buffers[b].bytes);
    if (p->buffers[b].kind == SC_BUF_INPUT)
      for (int64_t i = 0; i < p->buffers[b].bytes / 4; i++)
        ((float *)bufs[b])[i] = (float)rnd(-2, 2);
  }
  return bufs;
}

/* Every step of p on the CPU backend (segment by segment when bysegment). */
static void **run_cpu(const sc_program *p, bool bysegment) {
  sc_cpu_module *cm = NULL;
  sc_cpu_opts o;
  sc_cpu_opts_init(&o);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_cpu_jit(p, &o, &cm, &d) != SC_OK) fail_msg("sc_cpu_jit: %s", d.msg);
  void **bufs = fill_sums(p);
  for (int32_t s = 0; s < p->n_steps; s++) {
    const kir_kernel *k = p->kernels[p->steps[s].kernel];
    void *pb[64];
    for (int32_t i = 0; i < k->n_params; i++) pb[i] = bufs[k->params[i].buffer];
    sc_cpu_kernel_fn fn = sc_cpu_kernel(cm, p->steps[s].kernel);
    assert_non_null(fn);
    int64_t total = k->outer_rank ? k->outer_dims[0] : 1;
    if (!bysegment) fn(pb, 0, total);
    else
      for (int64_t at = total - 1; at >= 0; at--) fn(pb, at, at + 1);
  }
  sc_cpu_module_destroy(cm);
  return bufs;
}

/* Every step of p on the emulated GPU (its kernels' unit open in emu),
 * over `grid` blocks (0: the launch configuration's). */
static void **run_emulated(const sc_program *p, sc_cuda_emu *emu, int64_t grid) {
  void **bufs = fill_sums(p);
  for (int32_t s = 0; s < p->n_steps; s++) {
    const kir_kernel *k = p->kernels[p->steps[s].kernel];
    void *pb[64], *args[66];
    for (int32_t i = 0; i < k->n_params; i++) {
      pb[i] = bufs[k->params[i].buffer];
      args[i] = &pb[i];
    }
    sc_cuda_launch c;
    sc_cuda_launch_config(k, &c);
    if (grid > 0) c.grid = grid;
    long long range[2] = {0, c.points};
    args[k->n_params] = &range[0];
    args[k->n_params + 1] = &range[1];
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_cuda_emu_launch(emu, k->name, &c, args, &d) != SC_OK) fail_msg("%s: %s", k->name, d.msg);
  }
  return bufs;
}

/* Sums i < n in bufs (g_i, s_i at 2i, 2i + 1, len[i] elements) against a
 * double-precision reference, each within tol[i] relative; the largest
 * relative difference of those with tol[i] <= worst_tol. */
static double sums_reference(void **bufs, int32_t n, const int64_t *len, const double *tol,
                             double worst_tol, const char *what) {
  double worst = 0;
  for (int32_t i = 0; i < n; i++) {
    const float *g = bufs[2 * i];
    double ref = 0;
    for (int64_t j = 0; j < len[i]; j++) ref += (double)g[j] * (double)g[j];
    double got = ((const float *)bufs[2 * i + 1])[0], rel = fabs(got - ref) / ref;
    if (!(rel <= tol[i])) /* NaN fails */
      fail_msg("%s: sum %d of %lld elements %.9g, reference %.9g", what, (int)i,
               (long long)len[i], got, ref);
    if (tol[i] <= worst_tol && rel > worst) worst = rel;
  }
  return worst;
}

/* The sums in bufs against a double-precision reference, within 1e-4
 * relative; the largest relative difference. */
static double against_reference(void **bufs, const char *what) {
  static const double tol[N_SUMS] = {1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4};
  return sums_reference(bufs, N_SUMS, SUM_LEN, tol, 1e-4, what);
}

/* An index whose Div or Mod divides a sum of several digits (a 7-d
 * ONNX test's flattened index reads one so) is not r put back together:
 * kir_is_inner_index says no, reading no more digits than it holds (it
 * wrote past one digit's room before: ASan's stack-buffer-overflow). */
static void test_inner_index_sums(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  sc_arena *A = &p->arena;
  kir_kernel *k = kir_kernel_create(A, "k");
  assert_non_null(k);
  k->inner = 360;
  int32_t r = kir_var(A, k, KIR_INNER);
#define C(v) kir_const_i(A, k, SC_DTYPE_I64, (v))
  int32_t lo = kir_binary(A, k, KIR_MOD, r, C(6));
  int32_t hi = kir_binary(A, k, KIR_MUL, kir_binary(A, k, KIR_DIV, r, C(6)), C(6));
  int32_t sum = kir_binary(A, k, KIR_ADD, lo, hi); /* r, as two digits */
  assert_true(kir_is_inner_index(k, sum));
  int32_t id = sum;
  for (int i = 0; i < 8; i++) /* sums of sums under Div and Mod */
    id = kir_binary(A, k, KIR_ADD, kir_binary(A, k, i % 2 ? KIR_MOD : KIR_DIV, id, C(2 + i)),
                    kir_binary(A, k, KIR_MUL, kir_binary(A, k, KIR_DIV, r, C(3)), C(3)));
#undef C
  assert_true(id >= 0);
  assert_false(kir_is_inner_index(k, id));
  sc_program_destroy(p);
}

static void test_reduce(void **state) {
  (void)state;
  sc_program *p = build_sums(), *m = build_sums();
  /* [8, 5, 25]'s load is at r's digits put back together; [4, 5] transposed's is not */
  for (int32_t i = 4; i < N_SUMS; i += 2) {
    const kir_kernel *k = p->kernels[i + 1]; /* after the update's */
    int32_t load = -1;
    for (int32_t e = 0; e < k->n_exprs && load < 0; e++)
      if (k->exprs[e].op == KIR_LOAD) load = e;
    assert_true(load >= 0 && k->exprs[k->exprs[load].a].op != KIR_VAR);
    assert_int_equal(kir_is_inner_index(k, k->exprs[load].a), i == 4);
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_multi_tensor(m, &d), SC_OK);
  /* the update between the second and the third sum stays first, the run
   * sinks past it: [k2] [k0 k1 k3 .. k6] [k7] */
  assert_int_equal(m->n_steps, 3);
  assert_string_equal(m->kernels[m->steps[0].kernel]->name, "k2");
  const kir_kernel *k = m->kernels[m->steps[1].kernel];
  assert_string_equal(k->name, "k0_mt6");
  assert_int_equal(k->n_segs, N_MERGED);
  assert_int_equal(k->seg_params, 2);
  assert_non_null(k->seg_inner);
  assert_int_equal(k->inner, 65537);
  for (int32_t s = 0; s < N_MERGED; s++) {
    assert_int_equal(k->seg_inner[s], SUM_LEN[s]);
    assert_int_equal(k->seg_start[s], s);
  }
  assert_string_equal(m->kernels[m->steps[2].kernel]->name, "k7");
  assert_string_equal(m->steps[1].origin, "k0,k1,k3,k4,k5,k6");

  /* the interpreter */
  void **want = fill_sums(p), **got = fill_sums(m);
  for (int32_t s = 0; s < p->n_steps; s++) interpret(p->kernels[p->steps[s].kernel], want);
  for (int32_t s = 0; s < m->n_steps; s++) interpret(m->kernels[m->steps[s].kernel], got);
  same_outputs(p, want, got, "kir_interpret, merged reduction");
  double w_int = against_reference(got, "kir_interpret");
  free_buffers(p, want);
  free_buffers(m, got);

  /* the CPU backend: the whole range, then one segment a call */
  want = run_cpu(p, false);
  double w_cpu = against_reference(want, "CPU");
  for (int by = 0; by < 2; by++) {
    got = run_cpu(m, by);
    same_outputs(p, want, got, by ? "CPU, a segment a call" : "CPU, merged reduction");
    free_buffers(m, got);
  }
  free_buffers(p, want);

  /* the emulated GPU: a block a segment, each with its own kernel's threads */
  kir_kernel *all[N_SUMS + 2];
  for (int32_t i = 0; i < N_SUMS; i++) all[i] = p->kernels[p->steps[i + (i >= 2)].kernel];
  all[N_SUMS] = m->kernels[m->steps[1].kernel];
  sc_cuda_launch c;
  sc_cuda_launch_config(k, &c);
  assert_int_equal(c.mode, SC_CUDA_BLOCK_PER_POINT);
  assert_int_equal(c.block, 256);
  assert_int_equal(c.grid, N_MERGED);
  char *src = NULL;
  sc_cuda_emu *emu = NULL;
  sc_diag_clear(&d);
  all[N_SUMS + 1] = p->kernels[p->steps[2].kernel]; /* the update */
  if (sc_cuda_emit_kernels(all, N_SUMS + 2, NULL, &src, &d) != SC_OK) fail_msg("%s", d.msg);
  if (sc_cuda_emu_open(src, &emu, &d) != SC_OK) fail_msg("%s", d.msg);
  want = run_emulated(p, emu, 0);
  got = run_emulated(m, emu, 0);
  same_outputs(p, want, got, "emulated GPU, merged reduction");
  double w_gpu = against_reference(got, "emulated GPU");
  free_buffers(p, want);
  free_buffers(m, got);
  sc_cuda_emu_close(emu);
  sc_free(src);
  printf("[  SUMS    ] 1, 3, 13, 16, 1000, 65537 elements: at most %.2g (interpreter), %.2g (CPU), "
         "%.2g (emulated GPU) from float64, bit-identical to the per-tensor kernels\n",
         w_int, w_cpu, w_gpu);

  /* program.json keeps the inner extents, and refuses an empty one */
  char *text = NULL;
  sc_diag_clear(&d);
  if (sc_memplan_run(m, &d) != SC_OK || sc_program_write_json(m, NULL, &text, &d) != SC_OK)
    fail_msg("%s", d.msg);
  sc_program *q = NULL;
  sc_diag_clear(&d);
  if (sc_program_read_json(text, strlen(text), NULL, 0, &q, &d) != SC_OK)
    fail_msg("read back: %s", d.msg);
  const kir_kernel *kq = q->kernels[q->steps[1].kernel];
  assert_non_null(kq->seg_inner);
  assert_memory_equal(kq->seg_inner, k->seg_inner, N_MERGED * sizeof *k->seg_inner);
  assert_int_equal(kq->inner, 65537);
  char *bad = strstr(text, "\"inners\"");
  assert_non_null(bad);
  char *first = strchr(bad, '[');
  assert_non_null(first);
  first += strspn(first + 1, " \n") + 1; /* segment 0's extent, 1 */
  assert_true(*first == '1' && !isdigit((unsigned char)first[1]));
  *first = '0';
  json_refused(text, "inner");
  sc_program_destroy(q);
  sc_free(text);
  sc_program_destroy(p);
  sc_program_destroy(m);
}

/* Large reductions split (multi_tensor.c, split_step): sums of squares
 * over 13, 1000, 1,572,864 ([1536, 1024], read through its dims),
 * 4096, 1,052,672 and 1,048,583 (a prime) elements, seeded random in
 * [-2, 2]. The two long ones with a chunk dividing them (16384 and 8224,
 * the largest divisors up to 16384) become a kernel of 96 and 128 points
 * each, writing a scratch buffer, and a sum of those (the two sums alike:
 * one multi-tensor kernel); the prime one has no such divisor and stays
 * whole, a segment of the small ones' kernel. Each sum within 1e-5
 * (relative) of a double-precision reference on kir_interpret, the CPU
 * backend and the emulated GPU (the prime one, a single f32 pass over 1 M
 * terms, within 1e-3); the CPU's bits the same a point a call, the
 * emulated GPU's the same over grids of 7 and 1 blocks as over one a
 * point: each partial result is its point's. */
enum { N_SPLIT = 6 };
static const int64_t SPLIT_LEN[N_SPLIT] = {13, 1000, 1572864, 4096, 1052672, 1048583};

static sc_program *build_split(void) {
  static const int64_t shapes[N_SPLIT][2] = {{13}, {1000}, {1536, 1024},
                                             {4096}, {1052672}, {1048583}};
  sc_program *p = sc_program_create();
  assert_non_null(p);
  for (int32_t i = 0; i < N_SPLIT; i++) {
    add_buffer(p, "g", SC_BUF_INPUT, i == 2 ? 2 : 1, shapes[i]);
    add_buffer(p, "s", SC_BUF_TEMP, 1, (int64_t[]){1});
  }
  for (int32_t i = 0; i < N_SPLIT; i++)
    add_sumsq(p, 2 * i, 2 * i + 1, i == 2 ? 2 : 1, shapes[i], false);
  return p;
}

/* Each sum in bufs against a double-precision reference (the prime one
 * within 1e-3, the others 1e-5); the largest relative difference of the
 * others. */
static double split_reference(void **bufs, const char *what) {
  static const double tol[N_SPLIT] = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-3};
  return sums_reference(bufs, N_SPLIT, SPLIT_LEN, tol, 1e-5, what);
}

/* The step of kernel `name`'s index in p, -1 when none. */
static int32_t step_named(const sc_program *p, const char *name) {
  for (int32_t s = 0; s < p->n_steps; s++)
    if (!strcmp(p->kernels[p->steps[s].kernel]->name, name)) return s;
  return -1;
}

static void test_split(void **state) {
  (void)state;
  sc_program *m = build_split();
  int32_t n0 = m->n_buffers;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_multi_tensor(m, &d), SC_OK);
  /* k2_part, k4_part, then the small ones and the prime one merged, then
   * the two completing sums merged */
  assert_int_equal(m->n_buffers, n0 + 2);
  assert_int_equal(m->buffers[n0].dims[0], 96);
  assert_int_equal(m->buffers[n0 + 1].dims[0], 128);
  assert_int_equal(m->n_steps, 4);
  int32_t s2 = step_named(m, "k2_part"), s4 = step_named(m, "k4_part");
  assert_true(s2 >= 0 && s4 > s2);
  const kir_kernel *p2 = m->kernels[m->steps[s2].kernel];
  assert_int_equal(p2->outer_dims[0], 96);
  assert_int_equal(p2->inner, 16384);
  assert_int_equal(m->kernels[m->steps[s4].kernel]->inner, 8224);
  int32_t small = step_named(m, "k0_mt4"), sums = step_named(m, "k2_mt2");
  assert_true(small >= 0 && sums > s4);
  const kir_kernel *ks = m->kernels[m->steps[small].kernel];
  assert_int_equal(ks->seg_inner[3], 1048583);
  const kir_kernel *kt = m->kernels[m->steps[sums].kernel];
  assert_int_equal(kt->seg_inner[0], 96);
  assert_int_equal(kt->seg_inner[1], 128);
  for (int32_t k = 0; k < m->n_kernels; k++) {
    sc_diag_clear(&d);
    if (kir_verify(m->kernels[k], &d) != SC_OK) fail_msg("%s", d.msg);
  }

  void **bufs = fill_sums(m);
  for (int32_t s = 0; s < m->n_steps; s++) interpret(m->kernels[m->steps[s].kernel], bufs);
  double w_int = split_reference(bufs, "kir_interpret");
  free_buffers(m, bufs);

  void **want = run_cpu(m, false);
  double w_cpu = split_reference(want, "CPU");
  void **got = run_cpu(m, true);
  same_outputs(m, want, got, "CPU, a point a call");
  free_buffers(m, want);
  free_buffers(m, got);

  sc_cuda_launch c;
  sc_cuda_launch_config(p2, &c);
  assert_int_equal(c.mode, SC_CUDA_BLOCK_PER_POINT);
  assert_int_equal(c.grid, 96);
  char *src = NULL;
  sc_cuda_emu *emu = NULL;
  sc_diag_clear(&d);
  if (sc_cuda_emit_kernels(m->kernels, m->n_kernels, NULL, &src, &d) != SC_OK)
    fail_msg("%s", d.msg);
  if (sc_cuda_emu_open(src, &emu, &d) != SC_OK) fail_msg("%s", d.msg);
  want = run_emulated(m, emu, 0);
  double w_gpu = split_reference(want, "emulated GPU");
  for (int64_t grid = 7; grid >= 1; grid -= 6) {
    got = run_emulated(m, emu, grid);
    same_outputs(m, want, got, grid > 1 ? "emulated GPU, 7 blocks" : "emulated GPU, 1 block");
    free_buffers(m, got);
  }
  free_buffers(m, want);
  sc_cuda_emu_close(emu);
  sc_free(src);
  printf("[  SPLIT   ] 1,572,864 and 1,052,672 elements in 96 and 128 chunks: at most %.2g "
         "(interpreter), %.2g (CPU), %.2g (emulated GPU) from float64\n", w_int, w_cpu, w_gpu);
  sc_program_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_merge),
      cmocka_unit_test(test_table_limit),
      cmocka_unit_test(test_inner_index_sums),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_split),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
