/* test_memplan.c — the memory plan (passes/memplan.c) on hand-built
 * programs: a chain of temporaries reuses memory, buffers live at the same
 * time never share bytes (checked here independently of the verifier, over
 * lifetimes written down by hand, with views and a GEMM step), the verifier
 * rejects hand-broken plans, in-place reuse happens for an aligned
 * elementwise kernel and not for a transposing or reversing one, a
 * scatter's output takes its dying data's storage, and the
 * peak of a chain equals the lower bound worked out from its lifetimes.
 * Also sc_program_print and sc_step_buffers (codegen/program.c), and the
 * async collectives, prefetch and ring hops (send/recv pairs) of
 * codegen/overlap.c. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/program.h"
#include "codegen/memplan.h"

static int32_t buf(sc_program *p, const char *name, sc_buf_kind kind, int64_t n) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.kind = kind;
  b.dtype = SC_DTYPE_F32;
  b.rank = 1;
  b.dims[0] = n;
  b.offset = -1;
  b.alias_of = -1;
  b.value = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  assert_int_equal(p->buffers[id].bytes, n * 4);
  if (kind == SC_BUF_INPUT) assert_int_equal(sc_program_add_input(p, id), SC_OK);
  if (kind == SC_BUF_OUTPUT) assert_int_equal(sc_program_add_output(p, id), SC_OK);
  return id;
}

static int32_t view(sc_program *p, const char *name, int32_t of) {
  sc_buffer b = p->buffers[of];
  b.name = name;
  b.kind = SC_BUF_VIEW;
  b.alias_of = of;
  b.rank = 2;
  b.dims[0] = 1;
  b.dims[1] = p->buffers[of].dims[0];
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  return id;
}

enum { EW_ALIGNED, EW_REVERSED, EW_TRANSPOSED };

/* A kernel step out = sum of ins (all f32 of out's numel); EW_ALIGNED reads
 * every input at the output index, EW_REVERSED at n-1-i, EW_TRANSPOSED
 * treats them as [2, n/2] and writes the transpose. */
static void ew_step(sc_program *p, const int32_t *ins, int n_in, int32_t out, int mode) {
  sc_arena *a = &p->arena;
  int64_t n = p->buffers[out].bytes / 4;
  kir_kernel *k = kir_kernel_create(a, "ew");
  assert_non_null(k);
  int32_t oi, ii;
  if (mode == EW_TRANSPOSED) {
    k->outer_rank = 2;
    k->outer_dims[0] = 2;
    k->outer_dims[1] = n / 2;
    int32_t o0 = kir_var(a, k, 0), o1 = kir_var(a, k, 1);
    ii = kir_binary(a, k, KIR_ADD, kir_binary(a, k, KIR_MUL, o0, kir_const_i(a, k, SC_DTYPE_I64, n / 2)), o1);
    oi = kir_binary(a, k, KIR_ADD, kir_binary(a, k, KIR_MUL, o1, kir_const_i(a, k, SC_DTYPE_I64, 2)), o0);
  } else {
    k->outer_rank = 1;
    k->outer_dims[0] = n;
    oi = kir_var(a, k, 0);
    ii = mode == EW_ALIGNED ? oi
                            : kir_binary(a, k, KIR_SUB, kir_const_i(a, k, SC_DTYPE_I64, n - 1), oi);
  }
  int32_t acc = -1;
  for (int i = 0; i < n_in; i++) {
    int32_t prm = kir_add_param(a, k, ins[i], SC_DTYPE_F32, p->buffers[ins[i]].bytes / 4, false);
    int32_t v = kir_load(a, k, prm, ii);
    acc = acc < 0 ? v : kir_binary(a, k, KIR_ADD, acc, v);
  }
  int32_t po = kir_add_param(a, k, out, SC_DTYPE_F32, n, true);
  assert_true(kir_add_store(a, k, po, oi, acc) >= 0);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(kir_verify(k, &d), SC_OK);
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_KERNEL;
  s.kernel = sc_program_add_kernel(p, k);
  assert_true(s.kernel >= 0);
  assert_true(sc_program_add_step(p, &s) >= 0);
}

/* An 8 x 8 x 8 GEMM step c = a·b (no epilogue yet); its index. */
static int32_t gemm_step(sc_program *p, int32_t a, int32_t b, int32_t c) {
  sc_step g;
  memset(&g, 0, sizeof g);
  g.kind = SC_STEP_GEMM;
  g.kernel = -1;
  g.gemm = (sc_gemm){.a = a, .b = b, .c = c, .batch = 1, .m = 8, .n = 8, .k = 8, .lda = 8,
                     .ldb = 8, .ldc = 8, .alpha = 1, .beta = 0, .bias = -1};
  int32_t i = sc_program_add_step(p, &g);
  assert_true(i >= 0);
  return i;
}

static void plan_ok(sc_program *p) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_memplan_run(p, &d) != SC_OK) fail_msg("memplan: %s", d.msg);
  if (sc_memplan_verify(p, &d) != SC_OK) fail_msg("memplan verify: %s", d.msg);
  for (int32_t i = 0; i < p->n_buffers; i++) {
    const sc_buffer *b = &p->buffers[i];
    if (b->kind == SC_BUF_VIEW || b->kind == SC_BUF_CONST) {
      assert_int_equal(b->offset, -1);
      continue;
    }
    assert_true(b->offset >= 0);
    assert_int_equal(b->offset % 64, 0);
    assert_true(b->offset + b->bytes <= p->arena_bytes);
  }
}

static bool disjoint(const sc_program *p, int32_t x, int32_t y) {
  const sc_buffer *a = &p->buffers[x], *b = &p->buffers[y];
  return a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
}

/* x -> t1 -> t2 -> t3 -> t4 -> y, each step reversing (no in-place). */
static void test_chain_reuses_memory(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  int32_t b[6];
  b[0] = buf(p, "x", SC_BUF_INPUT, 256);
  const char *names[4] = {"t1", "t2", "t3", "t4"};
  for (int i = 1; i <= 4; i++) b[i] = buf(p, names[i - 1], SC_BUF_TEMP, 256);
  b[5] = buf(p, "y", SC_BUF_OUTPUT, 256);
  for (int i = 0; i < 5; i++) ew_step(p, &b[i], 1, b[i + 1], EW_REVERSED);
  plan_ok(p);
  int64_t sum = 0;
  for (int i = 0; i < 6; i++) sum += p->buffers[b[i]].bytes;
  assert_true(p->arena_bytes < sum);
  /* at most two buffers are ever live together */
  assert_int_equal(p->arena_bytes, 2 * 1024);
  /* neighbours never share */
  for (int i = 0; i < 5; i++) assert_true(disjoint(p, b[i], b[i + 1]));
  sc_program_destroy(p);
}

/* Lifetimes by hand (steps):
 *   s0: a = ew(x)          s1: b = ew(x)       s2: c = gemm(a, b)
 *   s3: d = ew(view(a), c) s4: y = ew(d, b)
 * x [0,1]  a [0,3] (through its view)  b [1,4]  c [2,3]  d [3,4]  y [4,end] */
static void test_overlapping_never_share(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 64);
  int32_t a = buf(p, "a", SC_BUF_TEMP, 64);
  int32_t b = buf(p, "b", SC_BUF_TEMP, 64);
  int32_t c = buf(p, "c", SC_BUF_TEMP, 64);
  int32_t d = buf(p, "d", SC_BUF_TEMP, 64);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 64);
  int32_t va = view(p, "a_view", a);
  assert_int_equal(sc_program_root(p, va), a);
  assert_int_equal(sc_program_root(p, a), a);
  ew_step(p, &x, 1, a, EW_REVERSED);
  ew_step(p, &x, 1, b, EW_REVERSED);
  gemm_step(p, a, b, c);
  int32_t in3[2] = {va, c}, in4[2] = {d, b};
  ew_step(p, in3, 2, d, EW_ALIGNED); /* a dies here but is read through a view of
                                        another shape, c dies too: in-place is legal */
  ew_step(p, in4, 2, y, EW_REVERSED);
  plan_ok(p);
  int32_t ids[6] = {x, a, b, c, d, y};
  int first[6] = {0, 0, 1, 2, 3, 4}, last[6] = {1, 3, 4, 3, 4, 5};
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++) {
      bool together = first[i] <= last[j] && first[j] <= last[i];
      bool inplace = p->buffers[ids[j]].offset == p->buffers[ids[i]].offset &&
                     (last[i] == first[j] || last[j] == first[i]) && ids[j] == d;
      if (together && !inplace && !disjoint(p, ids[i], ids[j]))
        fail_msg("%s and %s are live together but overlap", p->buffers[ids[i]].name,
                 p->buffers[ids[j]].name);
    }
  /* the GEMM's output never takes an operand's storage */
  assert_true(disjoint(p, c, a) && disjoint(p, c, b));
  /* d took the storage of a or c (both die at step 3, both aligned) */
  assert_true(p->buffers[d].offset == p->buffers[a].offset ||
              p->buffers[d].offset == p->buffers[c].offset);
  sc_program_destroy(p);
}

static void collect(void *ud, int32_t buffer, bool written) {
  int32_t *v = ud;
  v[++v[0]] = written ? -1 - buffer : buffer;
}

static void test_step_buffers_and_print(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  int32_t a = buf(p, "a", SC_BUF_INPUT, 64);
  int32_t b = buf(p, "b", SC_BUF_CONST, 64);
  int32_t c = buf(p, "c", SC_BUF_TEMP, 64);
  int32_t bias = buf(p, "bias", SC_BUF_CONST, 8);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 64);
  sc_step g;
  memset(&g, 0, sizeof g);
  g.kind = SC_STEP_GEMM;
  g.kernel = -1;
  g.origin = "MatMul_1";
  g.gemm = (sc_gemm){.a = a, .b = b, .c = c, .trans_b = true, .batch = 1, .m = 8, .n = 8, .k = 8,
                     .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1, .beta = 0, .bias = bias};
  assert_int_equal(sc_program_add_step(p, &g), 0);
  ew_step(p, &c, 1, y, EW_ALIGNED);
  int32_t v[16] = {0};
  sc_step_buffers(p, &p->steps[0], collect, v);
  assert_int_equal(v[0], 4);
  assert_int_equal(v[1], a);
  assert_int_equal(v[2], b);
  assert_int_equal(v[3], bias);
  assert_int_equal(v[4], -1 - c);
  v[0] = 0;
  p->steps[0].gemm.beta = 1; /* C is read too */
  sc_step_buffers(p, &p->steps[0], collect, v);
  assert_int_equal(v[0], 5);
  p->steps[0].gemm.beta = 0;
  v[0] = 0;
  sc_step_buffers(p, &p->steps[1], collect, v);
  assert_int_equal(v[0], 2);
  assert_int_equal(v[1], c);
  assert_int_equal(v[2], -1 - y);
  plan_ok(p);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  sc_program_print(p, mem);
  fclose(mem);
  /* a and c tie on size and first use: a (lower id) is placed first at 0, c
   * above it; y is born at s1 where c dies, aligned: in place, c's slot */
  const char *want =
      "program buffers 5 kernels 1 steps 2 arena 512 align 64\n"
      "inputs b0\n"
      "outputs b4\n"
      "b0 input f32 [64] bytes 256 @0 \"a\"\n"
      "b1 const f32 [64] bytes 256 \"b\"\n"
      "b2 temp f32 [64] bytes 256 @256 \"c\"\n"
      "b3 const f32 [8] bytes 32 \"bias\"\n"
      "b4 output f32 [64] bytes 256 @256 \"y\"\n"
      "s0 gemm c=b2 a=b0 b=b1^T batch 1 m 8 n 8 k 8 lda 8 ldb 8 ldc 8 strides 0,0,0 alpha 1 "
      "beta 0 bias=b3 (MatMul_1)\n"
      "s1 kernel k0 ew\n"
      "k0 kernel ew outer [64] inner 1\n";
  if (strncmp(text, want, strlen(want)) != 0) fail_msg("program print:\n%s\nwant:\n%s", text, want);
  free(text);
  sc_program_destroy(p);
}

static void expect_verify_error(const sc_program *p, const char *needle) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_verify(p, &d), SC_ERR_INVALID);
  if (!strstr(d.msg, needle)) fail_msg("message '%s' lacks '%s'", d.msg, needle);
}

static void test_verify_catches_broken_plan(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 100); /* 400 bytes: not a multiple of 64 */
  int32_t t1 = buf(p, "t1", SC_BUF_TEMP, 100);
  int32_t t2 = buf(p, "t2", SC_BUF_TEMP, 100);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 100);
  ew_step(p, &x, 1, t1, EW_REVERSED);
  int32_t in[2] = {x, t1};
  ew_step(p, in, 2, t2, EW_REVERSED);
  ew_step(p, &t2, 1, y, EW_REVERSED);
  plan_ok(p);
  /* x, t1 and t2 all live at step 1 */
  assert_true(disjoint(p, x, t1) && disjoint(p, x, t2) && disjoint(p, t1, t2));
  int64_t saved = p->buffers[t2].offset;
  p->buffers[t2].offset = p->buffers[t1].offset;
  expect_verify_error(p, "'t1' (b1, steps 0..1");
  p->buffers[t2].offset = p->buffers[t1].offset + 64; /* partial overlap */
  if (p->buffers[t2].offset + 400 <= p->arena_bytes) expect_verify_error(p, "overlap");
  p->buffers[t2].offset = saved + 8;
  expect_verify_error(p, "not an aligned slot");
  p->buffers[t2].offset = p->arena_bytes;
  expect_verify_error(p, "inside the arena");
  p->buffers[t2].offset = saved;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_verify(p, &d), SC_OK);
  /* a reversing kernel may not run in place even at a dying input */
  p->buffers[y].offset = p->buffers[t2].offset;
  expect_verify_error(p, "'y'");
  sc_program_destroy(p);
}

/* A GEMM step with an epilogue kernel: x -> a, b (reversed copies) ->
 * c = a·b -> epilogue e = c (ALIGNED: in place; REVERSED: not) -> y. The
 * product touches a, b and c before the kernel runs, so e may take the
 * storage of a or b, which die with the product (three 256-byte slots at
 * most); not when the GEMM is a convolution, whose epilogue a device runs
 * on each tile as the tile ends (four). An aligned epilogue writes over c. */
static void test_gemm_epilogue_phases(void **state) {
  (void)state;
  for (int variant = 0; variant < 3; variant++) {
    bool conv = variant == 2;
    int mode = variant == 0 ? EW_ALIGNED : EW_REVERSED;
    sc_program *p = sc_program_create();
    int32_t x = buf(p, "x", SC_BUF_INPUT, 64);
    int32_t a = buf(p, "a", SC_BUF_TEMP, 64);
    int32_t b = buf(p, "b", SC_BUF_TEMP, 64);
    int32_t c = buf(p, "c", SC_BUF_TEMP, 64);
    int32_t e = buf(p, "e", SC_BUF_TEMP, 64);
    int32_t y = buf(p, "y", SC_BUF_OUTPUT, 64);
    ew_step(p, &x, 1, a, EW_REVERSED);
    ew_step(p, &x, 1, b, EW_REVERSED);
    int32_t gi = gemm_step(p, a, b, c);
    if (conv) p->steps[gi].gemm.conv = (sc_conv_geom){.on = true, .x = a, .bias = -1,
                                                      .bias_kernel = -1, .prep = {-1, -1}};
    ew_step(p, &c, 1, e, mode); /* its kernel becomes the GEMM's epilogue */
    p->steps[gi].kernel = p->steps[--p->n_steps].kernel;
    ew_step(p, &e, 1, y, EW_REVERSED);
    plan_ok(p);
    assert_true(disjoint(p, c, a) && disjoint(p, c, b));
    if (variant == 0) {
      assert_int_equal(p->buffers[e].offset, p->buffers[c].offset);
    } else if (variant == 1) {
      assert_true(disjoint(p, e, c));
      assert_int_equal(p->arena_bytes, 3 * 256);
    } else {
      assert_true(disjoint(p, e, a) && disjoint(p, e, b) && disjoint(p, e, c));
      assert_int_equal(p->arena_bytes, 4 * 256);
    }
    int32_t first[8], last[8];
    sc_diag d = {0};
    sc_diag_clear(&d);
    assert_int_equal(sc_memplan_lifetimes(p, first, last, &d), SC_OK);
    assert_int_equal(first[e], 2); /* in steps, as before */
    assert_int_equal(last[a], 2);
    assert_int_equal(last[y], p->n_steps);
    sc_program_destroy(p);
  }
}

/* A device workspace (sc_program.workspace_bytes) sits above every buffer,
 * aligned, inside the arena; a plan that puts it over a buffer, or past
 * the arena, is refused. */
static void test_workspace(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 512);
  int32_t t = buf(p, "t", SC_BUF_TEMP, 512);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 512);
  ew_step(p, &x, 1, t, EW_REVERSED);
  ew_step(p, &t, 1, y, EW_REVERSED);
  plan_ok(p);
  int64_t bare = p->arena_bytes;
  p->workspace_bytes = 1000;
  plan_ok(p);
  assert_int_equal(p->workspace_offset, bare);
  assert_int_equal(p->arena_bytes, bare + 1024);
  for (int32_t i = 0; i < p->n_buffers; i++)
    assert_true(p->buffers[i].offset + p->buffers[i].bytes <= p->workspace_offset);
  p->workspace_offset = 0; /* over x */
  expect_verify_error(p, "inside the arena's");
  p->workspace_offset = bare + 64; /* past the arena's end */
  expect_verify_error(p, "workspace");
  sc_program_destroy(p);
}

static void test_inplace(void **state) {
  (void)state;
  for (int mode = EW_ALIGNED; mode <= EW_TRANSPOSED; mode++) {
    sc_program *p = sc_program_create();
    int32_t x = buf(p, "x", SC_BUF_INPUT, 512);
    int32_t t1 = buf(p, "t1", SC_BUF_TEMP, 512);
    int32_t t2 = buf(p, "t2", SC_BUF_TEMP, 512);
    int32_t y = buf(p, "y", SC_BUF_OUTPUT, 512);
    ew_step(p, &x, 1, t1, EW_REVERSED);
    ew_step(p, &t1, 1, t2, mode); /* t1 dies here, t2 is born */
    ew_step(p, &t2, 1, y, EW_REVERSED);
    plan_ok(p);
    if (mode == EW_ALIGNED) {
      assert_int_equal(p->buffers[t2].offset, p->buffers[t1].offset);
      assert_true(disjoint(p, x, t1));
      assert_true(disjoint(p, t2, y));
      assert_int_equal(p->arena_bytes, 2 * 2048);
    } else {
      assert_true(disjoint(p, t1, t2));
    }
    sc_program_destroy(p);
  }
  /* not in place when the input is still read later */
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 512);
  int32_t t1 = buf(p, "t1", SC_BUF_TEMP, 512);
  int32_t t2 = buf(p, "t2", SC_BUF_TEMP, 512);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 512);
  ew_step(p, &x, 1, t1, EW_REVERSED);
  ew_step(p, &t1, 1, t2, EW_ALIGNED);
  int32_t in[2] = {t1, t2};
  ew_step(p, in, 2, y, EW_ALIGNED);
  plan_ok(p);
  assert_true(disjoint(p, t1, t2));
  /* y is an OUTPUT and t2 (or t1) dies at step 2: y may take one of them */
  sc_program_destroy(p);
  /* not in place when the sizes differ */
  p = sc_program_create();
  x = buf(p, "x", SC_BUF_INPUT, 512);
  t1 = buf(p, "t1", SC_BUF_TEMP, 512);
  y = buf(p, "y", SC_BUF_OUTPUT, 256);
  ew_step(p, &x, 1, t1, EW_REVERSED);
  ew_step(p, &t1, 1, y, EW_REVERSED);
  plan_ok(p);
  assert_true(disjoint(p, t1, y));
  sc_program_destroy(p);
}

/* A SCATTER_ADD step out = data + rows of upd at idx (rows of 8). */
static void scatter_step(sc_program *p, int32_t data, int32_t idx, int32_t upd, int32_t out) {
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_SCATTER_ADD;
  s.kernel = -1;
  s.scatter = (sc_scatter_step){.data = data, .indices = idx, .updates = upd, .out = out,
                                .rows = p->buffers[out].bytes / 32, .row = 8,
                                .n = p->buffers[idx].bytes / 4};
  assert_true(sc_program_add_step(p, &s) >= 0);
}

/* A scatter's output takes its data's storage when the data dies there
 * (an embedding's rows added into the gradient sum where it lies), not
 * when the data is read later, nor when the updates are that storage; the
 * verifier accepts the pair and refuses it once the updates are the data. */
static void test_scatter_inplace(void **state) {
  (void)state;
  for (int later = 0; later < 2; later++) {
    sc_program *p = sc_program_create();
    int32_t x = buf(p, "x", SC_BUF_INPUT, 512);
    int32_t idx = buf(p, "idx", SC_BUF_INPUT, 16);
    int32_t upd = buf(p, "upd", SC_BUF_INPUT, 128);
    int32_t sum = buf(p, "sum", SC_BUF_TEMP, 512);
    int32_t out = buf(p, "out", SC_BUF_TEMP, 512);
    int32_t y = buf(p, "y", SC_BUF_OUTPUT, 512);
    ew_step(p, &x, 1, sum, EW_REVERSED);
    scatter_step(p, sum, idx, upd, out); /* sum dies here unless read later */
    int32_t in[2] = {out, sum};
    ew_step(p, in, later ? 2 : 1, y, EW_REVERSED);
    plan_ok(p);
    if (!later) {
      assert_int_equal(p->buffers[out].offset, p->buffers[sum].offset);
      /* the verifier's view: not legal once the updates are the data */
      p->steps[1].scatter.updates = sum;
      sc_diag d = {0};
      sc_diag_clear(&d);
      assert_int_equal(sc_memplan_verify(p, &d), SC_ERR_INVALID);
    } else {
      assert_true(disjoint(p, out, sum));
    }
    sc_program_destroy(p);
  }
  /* updates that are the data's storage: out = data first would clobber
   * them, so no reuse */
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 512);
  int32_t idx = buf(p, "idx", SC_BUF_INPUT, 64);
  int32_t sum = buf(p, "sum", SC_BUF_TEMP, 512);
  int32_t out = buf(p, "out", SC_BUF_OUTPUT, 512);
  ew_step(p, &x, 1, sum, EW_REVERSED);
  scatter_step(p, sum, idx, sum, out);
  plan_ok(p);
  assert_true(disjoint(p, out, sum));
  sc_program_destroy(p);
}

/* Peak of x -> t1 -> ... -> y built with the given sizes (in 64-byte
 * blocks), and the lower bound: the largest sum of sizes live at one step,
 * from the lifetimes written down by hand (buffer i lives over steps
 * [i-1, i]; x over [0, 0], y from N-2 to the end). */
static void chain_peak(const int64_t *units, int n, int64_t *peak, int64_t *bound) {
  sc_program *p = sc_program_create();
  int32_t b[16];
  for (int i = 0; i < n; i++)
    b[i] = buf(p, i == 0 ? "x" : i == n - 1 ? "y" : "t",
               i == 0 ? SC_BUF_INPUT : i == n - 1 ? SC_BUF_OUTPUT : SC_BUF_TEMP, units[i] * 16);
  for (int i = 0; i + 1 < n; i++) ew_step(p, &b[i], 1, b[i + 1], EW_REVERSED);
  plan_ok(p);
  *bound = 0;
  for (int s = 0; s + 1 < n; s++)
    if ((units[s] + units[s + 1]) * 64 > *bound) *bound = (units[s] + units[s + 1]) * 64;
  *peak = p->arena_bytes;
  sc_program_destroy(p);
}

/* State pairs: input "w" and output "new:w" share one slot for the whole
 * run when w's last read is at or before the write (aligned); a pair whose
 * input is read after the write is dropped; the verifier refuses a pair
 * forced onto different slots or one read late; the peak counts the pair
 * once, for the whole run. */
static void test_state_pairs(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  /* w, g inputs; t = w + g; new:w = w + t (aligned: reads w where it writes) */
  sc_program *p = sc_program_create();
  int32_t w = buf(p, "w", SC_BUF_INPUT, 64), g = buf(p, "g", SC_BUF_INPUT, 64);
  int32_t t = buf(p, "t", SC_BUF_TEMP, 64), nw = buf(p, "new:w", SC_BUF_OUTPUT, 64);
  ew_step(p, (int32_t[]){w, g}, 2, t, EW_ALIGNED);
  ew_step(p, (int32_t[]){w, t}, 2, nw, EW_ALIGNED);
  assert_int_equal(sc_program_pair_state(p), SC_OK);
  assert_int_equal(sc_program_updates(p, 0), 0); /* output 0 updates input 0 */
  plan_ok(p);
  assert_int_equal(sc_program_updates(p, 0), 0);
  assert_int_equal(p->buffers[w].offset, p->buffers[nw].offset);
  int32_t at;
  int64_t live;
  bool alive[8];
  assert_int_equal(sc_memplan_peak(p, &at, &live, alive, &d), SC_OK);
  assert_true(alive[w] && !alive[nw]); /* the pair counts once, as w */
  assert_int_equal(live, 3 * 256);      /* w(+new:w), g and t at step 0 */
  assert_true(live <= p->arena_bytes);
  /* the verifier: the pair on different slots */
  int64_t keep = p->buffers[nw].offset;
  p->buffers[nw].offset = p->arena_bytes;
  p->arena_bytes += 256;
  assert_int_equal(sc_memplan_verify(p, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "in place"));
  p->arena_bytes -= 256;
  p->buffers[nw].offset = keep;
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_verify(p, &d), SC_OK);
  sc_program_destroy(p);

  /* w read again after new:w is written (a reversed read at the write, too):
   * the plan drops the pair, and the verifier refuses it if forced */
  p = sc_program_create();
  w = buf(p, "w", SC_BUF_INPUT, 64);
  nw = buf(p, "new:w", SC_BUF_OUTPUT, 64);
  t = buf(p, "late", SC_BUF_OUTPUT, 64);
  ew_step(p, (int32_t[]){w}, 1, nw, EW_REVERSED);
  ew_step(p, (int32_t[]){w}, 1, t, EW_ALIGNED);
  assert_int_equal(sc_program_pair_state(p), SC_OK);
  assert_int_equal(sc_program_updates(p, 0), 0);
  plan_ok(p);
  assert_int_equal(sc_program_updates(p, 0), -1);
  assert_true(disjoint(p, w, nw));
  p->updates[0] = 0;
  p->buffers[nw].offset = p->buffers[w].offset;
  assert_int_equal(sc_memplan_verify(p, &d), SC_ERR_INVALID);
  sc_program_destroy(p);
}

/* A COMM step c, its pack, unpack and peer -1 (no mesh needed by the pass
 * or the plan). */
static void comm_step(sc_program *p, const char *origin, sc_comm_step c) {
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_COMM;
  s.kernel = -1;
  s.origin = origin;
  c.pack = c.unpack = -1;
  c.peer = -1;
  s.comm = c;
  assert_true(sc_program_add_step(p, &s) >= 0);
}

/* A collective step over a group of 2. */
static void comm(sc_program *p, sc_comm_kind kind, int32_t in, int32_t out) {
  comm_step(p, kind == SC_COMM_ALL_GATHER ? "gather" : "reduce",
            (sc_comm_step){.kind = kind, .in = in, .out = out,
                           .count = p->buffers[in].bytes / 4, .group_size = 2});
}

/* The step list by kind: a kernel by its output's name (ew_step's last
 * parameter), S an async start, C a synchronous COMM step (X: a
 * send_recv), W a wait. */
static void step_list(const sc_program *p, char *got, size_t cap) {
  size_t len = 0;
  got[0] = 0;
  for (int32_t i = 0; i < p->n_steps && len < cap; i++) {
    const sc_step *st = &p->steps[i];
    const kir_kernel *k = st->kind == SC_STEP_KERNEL ? p->kernels[st->kernel] : NULL;
    const char *what = st->kind == SC_STEP_WAIT ? "W"
                       : st->kind == SC_STEP_COMM
                           ? (st->comm.async ? "S" : st->comm.kind == SC_COMM_SEND_RECV ? "X" : "C")
                           : p->buffers[k->params[k->n_params - 1].buffer].name;
    len += (size_t)snprintf(got + len, cap - len, "%s ", what);
  }
}

/* codegen/overlap.c on three blocks whose parameter shards w0..w2 are
 * gathered before use (ZeRO-3's forward), then an all-reduce with slack,
 * then a shard w3 gathered and w3 updated in place:
 *   s0 g0 = gather w0   s1 a = x+g0   s2 b = rev a
 *   s3 g1 = gather w1   s4 c = b+g1   s5 e = rev c
 *   s6 g2 = gather w2   s7 y = e+g2   (output)
 *   s8 r = all_reduce e s9 q = rev y  s10 z = r+q (output)
 *   s11 g3 = gather w3  s12 k = rev x s13 new:w3 = w3+k  s14 o3 = g3 (output)
 * Each gather moves up to just before the step that first needs the
 * previous one, each collective starts async, and its wait sits just
 * before its first reader (or before new:w3 overwrites the gather's
 * input); buffers in flight never share memory with what runs meanwhile. */
static void test_overlap(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_program *p = sc_program_create();
  int32_t x = buf(p, "x", SC_BUF_INPUT, 32), w[4], g[4];
  for (int i = 0; i < 4; i++) w[i] = buf(p, (const char *[]){"w0", "w1", "w2", "w3"}[i], SC_BUF_INPUT, 16);
  for (int i = 0; i < 4; i++) g[i] = buf(p, (const char *[]){"g0", "g1", "g2", "g3"}[i], SC_BUF_TEMP, 32);
  int32_t a = buf(p, "a", SC_BUF_TEMP, 32), b = buf(p, "b", SC_BUF_TEMP, 32);
  int32_t c = buf(p, "c", SC_BUF_TEMP, 32), e = buf(p, "e", SC_BUF_TEMP, 32);
  int32_t y = buf(p, "y", SC_BUF_OUTPUT, 32), r = buf(p, "r", SC_BUF_TEMP, 32);
  int32_t q = buf(p, "q", SC_BUF_TEMP, 32), z = buf(p, "z", SC_BUF_OUTPUT, 32);
  int32_t k = buf(p, "k", SC_BUF_TEMP, 16), nw = buf(p, "new:w3", SC_BUF_OUTPUT, 16);
  int32_t o3 = buf(p, "o3", SC_BUF_OUTPUT, 32);
  comm(p, SC_COMM_ALL_GATHER, w[0], g[0]);
  ew_step(p, (int32_t[]){x, g[0]}, 2, a, EW_ALIGNED);
  ew_step(p, (int32_t[]){a}, 1, b, EW_REVERSED);
  comm(p, SC_COMM_ALL_GATHER, w[1], g[1]);
  ew_step(p, (int32_t[]){b, g[1]}, 2, c, EW_ALIGNED);
  ew_step(p, (int32_t[]){c}, 1, e, EW_REVERSED);
  comm(p, SC_COMM_ALL_GATHER, w[2], g[2]);
  ew_step(p, (int32_t[]){e, g[2]}, 2, y, EW_ALIGNED);
  comm(p, SC_COMM_ALL_REDUCE, e, r);
  ew_step(p, (int32_t[]){y}, 1, q, EW_REVERSED);
  ew_step(p, (int32_t[]){r, q}, 2, z, EW_ALIGNED);
  comm(p, SC_COMM_ALL_GATHER, w[3], g[3]);
  int32_t x16 = buf(p, "x16", SC_BUF_INPUT, 16);
  ew_step(p, (int32_t[]){x16}, 1, k, EW_REVERSED);
  ew_step(p, (int32_t[]){w[3], k}, 2, nw, EW_ALIGNED);
  ew_step(p, (int32_t[]){g[3]}, 1, o3, EW_ALIGNED);
  assert_int_equal(sc_program_pair_state(p), SC_OK);
  int32_t n_async = -1, n_moved = -1;
  if (sc_program_overlap(p, &n_async, &n_moved, &d) != SC_OK) fail_msg("overlap: %s", d.msg);
  plan_ok(p);
  assert_int_equal(sc_program_updates(p, 2), 4); /* new:w3 (output 2) still updates w3 */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  sc_program_print(p, f);
  fclose(f);
  /* the step list, by kind: S start, W wait, K kernel */
  char got[64] = {0};
  for (int32_t i = 0; i < p->n_steps && i < 63; i++) {
    const sc_step *st = &p->steps[i];
    got[i] = st->kind == SC_STEP_WAIT ? 'W' : st->kind == SC_STEP_KERNEL ? 'K'
             : st->comm.async ? 'S' : 'C';
  }
  /* g3 is gathered when the previous gather's result is first needed (at
   * y): before the all-reduce, since collectives may pass each other. */
  if (strcmp(got, "SSWKKSWKKSWKSKWKKWKK") != 0)
    fail_msg("steps %s\n%s", got, text);
  assert_int_equal(n_async, 5);
  assert_int_equal(n_moved, 3);
  /* every wait completes the start it names, which gathers what the
   * kernel after it reads */
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *st = &p->steps[i];
    if (st->kind != SC_STEP_WAIT) continue;
    assert_true(st->started < i && p->steps[st->started].comm.async);
  }
  /* in flight together with the kernels between start and wait */
  assert_true(disjoint(p, g[1], a) && disjoint(p, g[1], b) && disjoint(p, g[2], c));
  assert_true(disjoint(p, g[2], e) && disjoint(p, r, q) && disjoint(p, g[3], q));
  free(text);
  /* run twice: nothing changes (already overlapped) */
  int32_t before = p->n_steps;
  assert_int_equal(sc_program_overlap(p, &n_async, &n_moved, &d), SC_OK);
  assert_int_equal(p->n_steps, before);
  assert_int_equal(n_async, 0);
  sc_program_destroy(p);
}

/* codegen/overlap.c's deferral, on a backward of three layers whose
 * gradients are all-reduced and then cast (each cast right after its
 * all-reduce, as lowering leaves a data-parallel gradient's):
 *   d1 = rev d0   r1 = all_reduce d1   c1 = rev r1 (output)
 *   d2 = rev d1   r2 = all_reduce d2   c2 = rev r2 (output)
 *   d3 = rev d2   r3 = all_reduce d3   c3 = rev r3 (output)
 *   d4 = rev d3 (output)
 * Each cast moves below the computation that does not need it, so each
 * all-reduce starts async and runs while the next layer computes: c1 to
 * just before the second collective after r1 (where the bound of two in
 * flight would wait for r1 anyway), c2 and c3 to the end. (test_overlap:
 * a step right after a gather whose next step reads it stays.) */
static void test_overlap_defer(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_program *p = sc_program_create();
  static const char *NAMES[] = {"d0", "d1", "d2", "d3", "d4", "r1", "r2", "r3", "c1", "c2", "c3"};
  int32_t b[11];
  for (int i = 0; i < 11; i++)
    b[i] = buf(p, NAMES[i], i == 0 ? SC_BUF_INPUT : i == 4 || i >= 8 ? SC_BUF_OUTPUT : SC_BUF_TEMP,
               32);
  for (int l = 0; l < 3; l++) { /* d(l+1), r(l+1), c(l+1) */
    ew_step(p, (int32_t[]){b[l]}, 1, b[l + 1], EW_REVERSED);
    comm(p, SC_COMM_ALL_REDUCE, b[l + 1], b[5 + l]);
    ew_step(p, (int32_t[]){b[5 + l]}, 1, b[8 + l], EW_REVERSED);
  }
  ew_step(p, (int32_t[]){b[3]}, 1, b[4], EW_REVERSED);
  int32_t n_async = -1, n_moved = -1;
  if (sc_program_overlap(p, &n_async, &n_moved, &d) != SC_OK) fail_msg("overlap: %s", d.msg);
  plan_ok(p);
  char got[128];
  step_list(p, got, sizeof got);
  if (strcmp(got, "d1 S d2 S d3 W c1 S d4 W c2 W c3 ") != 0) fail_msg("steps: %s", got);
  assert_int_equal(n_async, 3);
  /* an all-reduce in flight never shares memory with what runs meanwhile */
  assert_true(disjoint(p, b[5], b[2]) && disjoint(p, b[5], b[3]) && disjoint(p, b[6], b[3]));
  assert_true(disjoint(p, b[6], b[4]) && disjoint(p, b[7], b[4]));
  sc_program_destroy(p);
}

/* A shifted SEND of `in` or RECV into `out` (-1: none) with tag `tag`,
 * over a group of 3 (a ring of context parallelism, passes/partition/ring.c). */
static void hop(sc_program *p, sc_comm_kind kind, int32_t in, int32_t out, int32_t tag) {
  comm_step(p, kind == SC_COMM_SEND ? "send" : "recv",
            (sc_comm_step){.kind = kind, .in = in, .out = out, .count = 8, .group_size = 3,
                           .tag = tag, .shift = 1});
}

/* codegen/overlap.c on a ring of three ranks (the forward's K hops):
 *   a = rev k0 (block 0)   send k0 / recv k1 (tag 2)
 *   b = a + k1 (block 1)   send k1 / recv k2 (tag 4)
 *   c = b + k2 (block 2, output)
 * sc_program_pair_shifts makes each send and its recv one send_recv step
 * (2 pairs); sc_program_overlap starts hop 1 before block 0 and hop 2
 * before block 1, each waited for just before the block that reads what
 * it received: "S a W S b W c". A receive in flight never shares memory
 * with the block computing meanwhile. A recv listed before its send whose
 * input is computed between them (the pair cannot move together) stays
 * two steps; a recv whose tag no send has stays. */
static void test_overlap_ring(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_program *p = sc_program_create();
  int32_t k0 = buf(p, "k0", SC_BUF_INPUT, 32), k1 = buf(p, "k1", SC_BUF_TEMP, 32);
  int32_t k2 = buf(p, "k2", SC_BUF_TEMP, 32), a = buf(p, "a", SC_BUF_TEMP, 32);
  int32_t b = buf(p, "b", SC_BUF_TEMP, 32), c = buf(p, "c", SC_BUF_OUTPUT, 32);
  ew_step(p, (int32_t[]){k0}, 1, a, EW_REVERSED);
  hop(p, SC_COMM_SEND, k0, -1, 2);
  hop(p, SC_COMM_RECV, -1, k1, 2);
  ew_step(p, (int32_t[]){a, k1}, 2, b, EW_ALIGNED);
  hop(p, SC_COMM_SEND, k1, -1, 4);
  hop(p, SC_COMM_RECV, -1, k2, 4);
  ew_step(p, (int32_t[]){b, k2}, 2, c, EW_ALIGNED);
  int32_t n_pairs = -1, n_async = -1;
  if (sc_program_pair_shifts(p, &n_pairs, &d) != SC_OK) fail_msg("pair: %s", d.msg);
  assert_int_equal(n_pairs, 2);
  char got[128];
  step_list(p, got, sizeof got);
  if (strcmp(got, "a X b X c ") != 0) fail_msg("paired: %s", got);
  assert_int_equal(p->steps[1].comm.in, k0);
  assert_int_equal(p->steps[1].comm.out, k1);
  if (sc_program_overlap(p, &n_async, NULL, &d) != SC_OK) fail_msg("overlap: %s", d.msg);
  plan_ok(p);
  step_list(p, got, sizeof got);
  if (strcmp(got, "S a W S b W c ") != 0) fail_msg("overlapped: %s", got);
  assert_int_equal(n_async, 2);
  assert_true(disjoint(p, k1, a) && disjoint(p, k2, b) && disjoint(p, k2, a));
  sc_program_destroy(p);

  /* the recv first, the send's input computed between: two steps stay */
  p = sc_program_create();
  k0 = buf(p, "k0", SC_BUF_INPUT, 32), k1 = buf(p, "k1", SC_BUF_TEMP, 32);
  a = buf(p, "a", SC_BUF_TEMP, 32), b = buf(p, "b", SC_BUF_OUTPUT, 32);
  int32_t k9 = buf(p, "k9", SC_BUF_TEMP, 32);
  hop(p, SC_COMM_RECV, -1, k1, 2);
  ew_step(p, (int32_t[]){k0}, 1, a, EW_REVERSED);
  hop(p, SC_COMM_SEND, a, -1, 2);
  hop(p, SC_COMM_RECV, -1, k9, 6); /* no send of tag 6 */
  ew_step(p, (int32_t[]){k1, k9}, 2, b, EW_ALIGNED);
  assert_int_equal(sc_program_pair_shifts(p, &n_pairs, &d), SC_OK);
  assert_int_equal(n_pairs, 0);
  step_list(p, got, sizeof got);
  if (strcmp(got, "C a C C b ") != 0) fail_msg("unpaired: %s", got);
  sc_program_destroy(p);
}

static void test_chain_peak_is_minimum(void **state) {
  (void)state;
  int64_t peak, bound;
  /* simple chains (equal, shrinking, growing, alternating sizes): the
   * greedy plan reaches the lower bound */
  const int64_t chains[4][6] = {{3, 3, 3, 3, 3, 3}, {8, 7, 6, 5, 4, 3}, {1, 2, 3, 5, 8, 13},
                                {6, 1, 6, 1, 6, 1}};
  for (int c = 0; c < 4; c++) {
    chain_peak(chains[c], 6, &peak, &bound);
    if (peak != bound) fail_msg("chain %d: peak %lld, minimum %lld", c, (long long)peak, (long long)bound);
  }
  /* random sizes: never below the bound (greedy by size is a heuristic and
   * may exceed it), always a valid plan (checked in plan_ok) */
  rng_seed(21);
  for (int trial = 0; trial < 20; trial++) {
    int64_t units[8];
    for (int i = 0; i < 8; i++) units[i] = 1 + (int64_t)(rng_unit() * 8);
    chain_peak(units, 8, &peak, &bound);
    assert_true(peak >= bound);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_reuses_memory),
      cmocka_unit_test(test_overlapping_never_share),
      cmocka_unit_test(test_step_buffers_and_print),
      cmocka_unit_test(test_verify_catches_broken_plan),
      cmocka_unit_test(test_inplace), cmocka_unit_test(test_gemm_epilogue_phases), cmocka_unit_test(test_workspace),
      cmocka_unit_test(test_scatter_inplace),
      cmocka_unit_test(test_chain_peak_is_minimum),
      cmocka_unit_test(test_state_pairs),
      cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_overlap_defer),
      cmocka_unit_test(test_overlap_ring),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
