/* test_bundle.c — the compiled artifact: SHA-256 against the FIPS 180-4
 * vectors, the program's JSON form (write → read → write is identical text,
 * the read kernels equal the written ones and interpret to the same bytes),
 * hostile program.json (bad ids, sizes, ops, truncation → errors, never
 * crashes), a written bundle loaded back, then corrupted file by file, and
 * its kernels.o run: linked through sc_cpu_load_object, each kernel gives
 * the same bytes as the JIT of the kir and agrees with kir_interpret, a
 * session given the loaded module matches a JIT session bit for bit, and a
 * missing kernel symbol, a non-object or a CPU feature the host lacks are
 * errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include "codegen/bundle.h"
#include "codegen/memplan.h"
#include "runtime/bundle.h"
#include "runtime/runtime.h"

/* ---------------------------------------------------------------- SHA-256 */

static void check_hex(const char *msg, size_t n, const char *want) {
  char hex[65];
  sc_sha256_hex(msg, n, hex);
  assert_string_equal(hex, want);
}

static void test_sha256_vectors(void **state) {
  (void)state;
  check_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_hex(two, strlen(two),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                     "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  check_hex(four, strlen(four),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  /* One million 'a', fed in uneven pieces (exercises the block buffer). */
  char *a = malloc(1000000);
  assert_non_null(a);
  memset(a, 'a', 1000000);
  sc_sha256 s;
  sc_sha256_init(&s);
  size_t pos = 0, step = 1;
  while (pos < 1000000) {
    size_t n = step < 1000000 - pos ? step : 1000000 - pos;
    sc_sha256_update(&s, a + pos, n);
    pos += n;
    step = step * 3 % 197 + 1;
  }
  uint8_t d[32];
  sc_sha256_final(&s, d);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  check_hex(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* Lengths around the padding boundary (55, 56, 63, 64 bytes) agree
   * between one-shot and byte-at-a-time hashing. */
  for (size_t n = 54; n <= 66; n++) {
    char one[65], inc[65];
    sc_sha256_hex(a, n, one);
    sc_sha256_init(&s);
    for (size_t i = 0; i < n; i++) sc_sha256_update(&s, a + i, 1);
    sc_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) snprintf(inc + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(one, inc);
  }
  free(a);
}

/* --------------------------------------------------------- a hand program */

typedef struct fixture {
  sc_program *p;
  float w[12]; /* CONST [3,4] */
  int64_t *offsets;
  uint8_t *weights;
  int64_t weights_bytes;
  char *json;
} fixture;

static int32_t add_buf(sc_program *p, const char *name, sc_buf_kind kind, sc_dtype t,
                       int32_t rank, const int64_t *dims, int64_t offset, const void *data,
                       int32_t alias) {
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.kind = kind;
  b.dtype = t;
  b.rank = rank;
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= (b.dims[i] = dims[i]);
  b.bytes = n * sc_dtype_size(t);
  b.offset = offset;
  b.data = data;
  b.alias_of = alias;
  b.value = -1;
  int32_t id = sc_program_add_buffer(p, &b);
  assert_true(id >= 0);
  return id;
}

/* x[2,3] @ w[3,4] -> y[2,4] (GEMM); z = softmax(y) over rows (a row kernel
 * with two REDUCE phases and constants -inf and -0.0); q = (i64)(y*100) % 7
 * (integer ops) through a view of y. */
static sc_program *build_program(const float *w) {
  sc_program *p = sc_program_create();
  assert_non_null(p);
  sc_arena *A = &p->arena;
  p->arena_bytes = 4 * 64;
  p->arena_align = 64;
  const int64_t dx[2] = {2, 3}, dw[2] = {3, 4}, dy[2] = {2, 4}, dv[1] = {8};
  int32_t x = add_buf(p, "x", SC_BUF_INPUT, SC_DTYPE_F32, 2, dx, 0, NULL, -1);
  int32_t wb = add_buf(p, "w", SC_BUF_CONST, SC_DTYPE_F32, 2, dw, -1, w, -1);
  int32_t y = add_buf(p, "y", SC_BUF_TEMP, SC_DTYPE_F32, 2, dy, 64, NULL, -1);
  int32_t z = add_buf(p, "z", SC_BUF_OUTPUT, SC_DTYPE_F32, 2, dy, 128, NULL, -1);
  int32_t q = add_buf(p, "q", SC_BUF_OUTPUT, SC_DTYPE_I64, 2, dy, 192, NULL, -1);
  int32_t yv = add_buf(p, "y_flat", SC_BUF_VIEW, SC_DTYPE_F32, 1, dv, -1, NULL, y);
  assert_int_equal(sc_program_add_input(p, x), SC_OK);
  assert_int_equal(sc_program_add_output(p, z), SC_OK);
  assert_int_equal(sc_program_add_output(p, q), SC_OK);

  /* softmax over rows */
  kir_kernel *k = kir_kernel_create(A, "softmax_rows");
  k->origin = "Softmax_0";
  k->outer_rank = 1;
  k->outer_dims[0] = 2;
  k->inner = 4;
  int32_t pin = kir_add_param(A, k, y, SC_DTYPE_F32, 8, false);
  int32_t pout = kir_add_param(A, k, z, SC_DTYPE_F32, 8, true);
  int32_t o = kir_var(A, k, 0), r = kir_var(A, k, KIR_INNER);
  int32_t idx = kir_binary(A, k, KIR_ADD, kir_binary(A, k, KIR_MUL, o, kir_const_i(A, k, SC_DTYPE_I64, 4)), r);
  int32_t v = kir_load(A, k, pin, idx);
  int32_t vm = kir_binary(A, k, KIR_MAX, v, kir_const_f(A, k, SC_DTYPE_F32, -INFINITY));
  int32_t ph0 = kir_add_reduce(A, k, KIR_RED_MAX, SC_DTYPE_F32, vm);
  int32_t e = kir_unary(A, k, KIR_EXP, kir_binary(A, k, KIR_SUB, v, kir_reg(A, k, ph0)));
  int32_t ph1 = kir_add_reduce(A, k, KIR_RED_SUM, SC_DTYPE_F32, e);
  int32_t outv = kir_binary(A, k, KIR_DIV, e, kir_reg(A, k, ph1));
  outv = kir_binary(A, k, KIR_ADD, outv, kir_const_f(A, k, SC_DTYPE_F32, -0.0));
  assert_true(kir_add_store(A, k, pout, idx, outv) >= 0);
  assert_int_equal(sc_program_add_kernel(p, k), 0);

  /* q = (i64)(y * 100) % 7, y read through the flat view */
  kir_kernel *k2 = kir_kernel_create(A, "int_mod");
  k2->origin = "Mod_1";
  k2->outer_rank = 2;
  k2->outer_dims[0] = 2;
  k2->outer_dims[1] = 4;
  int32_t p2in = kir_add_param(A, k2, yv, SC_DTYPE_F32, 8, false);
  int32_t p2out = kir_add_param(A, k2, q, SC_DTYPE_I64, 8, true);
  int32_t i0 = kir_var(A, k2, 0), i1 = kir_var(A, k2, 1);
  int32_t lin = kir_binary(A, k2, KIR_ADD, kir_binary(A, k2, KIR_MUL, i0, kir_const_i(A, k2, SC_DTYPE_I64, 4)), i1);
  int32_t yy = kir_load(A, k2, p2in, lin);
  int32_t sc = kir_binary(A, k2, KIR_MUL, yy, kir_const_f(A, k2, SC_DTYPE_F32, 100.0));
  int32_t ci = kir_cast(A, k2, SC_DTYPE_I64, sc);
  int32_t md = kir_binary(A, k2, KIR_MOD, ci, kir_const_i(A, k2, SC_DTYPE_I64, 7));
  int32_t sel = kir_select(A, k2, kir_binary(A, k2, KIR_LT, md, kir_const_i(A, k2, SC_DTYPE_I64, 0)),
                           kir_binary(A, k2, KIR_ADD, md, kir_const_i(A, k2, SC_DTYPE_I64, 7)), md);
  assert_true(kir_add_store(A, k2, p2out, lin, sel) >= 0);
  assert_int_equal(sc_program_add_kernel(p, k2), 1);

  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(kir_verify(k, &d), SC_OK);
  assert_int_equal(kir_verify(k2, &d), SC_OK);

  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_GEMM;
  s.kernel = -1;
  s.origin = "MatMul_0";
  s.gemm = (sc_gemm){.a = x, .b = wb, .c = y, .batch = 1, .m = 2, .n = 4, .k = 3, .lda = 3,
                     .ldb = 4, .ldc = 4, .alpha = 1.0f, .beta = 0.0f, .bias = -1};
  assert_int_equal(sc_program_add_step(p, &s), 0);
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_KERNEL;
  s.kernel = 0;
  s.origin = "Softmax_0";
  assert_int_equal(sc_program_add_step(p, &s), 1);
  s.kernel = 1;
  s.origin = "Mod_1";
  assert_int_equal(sc_program_add_step(p, &s), 2);
  return p;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  rng_seed(7);
  for (int i = 0; i < 12; i++) f->w[i] = rng_val();
  f->p = build_program(f->w);
  f->offsets = calloc((size_t)f->p->n_buffers, sizeof *f->offsets);
  f->weights_bytes = sc_program_weights_layout(f->p, f->offsets);
  assert_int_equal(f->weights_bytes, 48);
  f->weights = calloc(1, (size_t)f->weights_bytes);
  for (int32_t i = 0; i < f->p->n_buffers; i++)
    if (f->offsets[i] >= 0)
      memcpy(f->weights + f->offsets[i], f->p->buffers[i].data, (size_t)f->p->buffers[i].bytes);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_write_json(f->p, f->offsets, &f->json, &d), SC_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  sc_program_destroy(f->p);
  free(f->offsets);
  free(f->weights);
  sc_free(f->json);
  free(f);
  return 0;
}

static void assert_kernels_equal(const kir_kernel *a, const kir_kernel *b) {
  assert_string_equal(a->name, b->name);
  assert_string_equal(a->origin, b->origin);
  assert_int_equal(a->n_params, b->n_params);
  for (int32_t i = 0; i < a->n_params; i++) {
    assert_int_equal(a->params[i].buffer, b->params[i].buffer);
    assert_int_equal(a->params[i].dtype, b->params[i].dtype);
    assert_int_equal(a->params[i].numel, b->params[i].numel);
    assert_int_equal(a->params[i].written, b->params[i].written);
  }
  assert_int_equal(a->outer_rank, b->outer_rank);
  for (int32_t i = 0; i < a->outer_rank; i++) assert_int_equal(a->outer_dims[i], b->outer_dims[i]);
  assert_int_equal(a->inner, b->inner);
  assert_int_equal(a->n_exprs, b->n_exprs);
  for (int32_t i = 0; i < a->n_exprs; i++) {
    const kir_expr *x = &a->exprs[i], *y = &b->exprs[i];
    assert_int_equal(x->op, y->op);
    assert_int_equal(x->dtype, y->dtype);
    assert_int_equal(x->a, y->a);
    assert_int_equal(x->b, y->b);
    assert_int_equal(x->c, y->c);
    assert_int_equal(x->var, y->var);
    assert_int_equal(x->i, y->i);
    assert_memory_equal(&x->f, &y->f, sizeof x->f); /* bit-exact, -0.0 and -inf too */
  }
  assert_int_equal(a->n_phases, b->n_phases);
  for (int32_t i = 0; i < a->n_phases; i++) {
    const kir_phase *x = &a->phases[i], *y = &b->phases[i];
    assert_int_equal(x->kind, y->kind);
    assert_int_equal(x->rop, y->rop);
    assert_int_equal(x->acc_dtype, y->acc_dtype);
    assert_int_equal(x->value, y->value);
    assert_int_equal(x->out_param, y->out_param);
    assert_int_equal(x->out_index, y->out_index);
  }
}

/* Runs kernel k of p over random inputs; returns the written params' bytes
 * concatenated (caller frees). */
static uint8_t *interpret(const kir_kernel *k, uint64_t seed, size_t *n_out) {
  void *bufs[8] = {0};
  size_t total = 0;
  rng_seed(seed);
  for (int32_t i = 0; i < k->n_params; i++) {
    size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
    bufs[i] = calloc(1, bytes);
    if (!k->params[i].written) {
      for (int64_t j = 0; j < k->params[i].numel; j++)
        sc_store_f64(k->params[i].dtype, bufs[i], j, rnd(-3, 3));
    } else {
      total += bytes;
    }
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(kir_interpret(k, bufs, &d), SC_OK);
  uint8_t *out = malloc(total), *w = out;
  for (int32_t i = 0; i < k->n_params; i++) {
    size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
    if (k->params[i].written) {
      if (k->params[i].dtype == SC_DTYPE_F32)
        for (int64_t j = 0; j < k->params[i].numel; j++)
          assert_false(isnan(sc_load_f64(SC_DTYPE_F32, bufs[i], j)));
      memcpy(w, bufs[i], bytes);
      w += bytes;
    }
    free(bufs[i]);
  }
  *n_out = total;
  return out;
}

static void test_json_round_trip(void **state) {
  fixture *f = *state;
  /* Non-finite and negative-zero constants are spelled out. */
  assert_non_null(strstr(f->json, "\"-inf\""));
  assert_non_null(strstr(f->json, "-0.0"));
  sc_program *r = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_program_read_json(f->json, strlen(f->json), f->weights, f->weights_bytes, &r, &d);
  if (st) fail_msg("%s", d.msg);
  char *again = NULL;
  assert_int_equal(sc_program_write_json(r, f->offsets, &again, &d), SC_OK);
  assert_string_equal(again, f->json);
  sc_free(again);

  assert_int_equal(r->n_buffers, f->p->n_buffers);
  for (int32_t i = 0; i < r->n_buffers; i++) {
    const sc_buffer *a = &f->p->buffers[i], *b = &r->buffers[i];
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->bytes, b->bytes);
    assert_int_equal(a->offset, b->offset);
    assert_int_equal(a->alias_of, b->alias_of);
    if (a->kind == SC_BUF_CONST) {
      assert_ptr_equal(b->data, f->weights + f->offsets[i]);
      assert_memory_equal(a->data, b->data, (size_t)a->bytes);
    }
  }
  assert_int_equal(r->n_inputs, 1);
  assert_int_equal(r->n_outputs, 2);
  assert_int_equal(r->outputs[1], f->p->outputs[1]);
  assert_int_equal(r->n_steps, 3);
  assert_memory_equal(&r->steps[0].gemm, &f->p->steps[0].gemm, sizeof(sc_gemm));
  assert_int_equal(r->n_kernels, 2);
  for (int32_t i = 0; i < r->n_kernels; i++) {
    assert_kernels_equal(f->p->kernels[i], r->kernels[i]);
    size_t na, nb;
    uint8_t *oa = interpret(f->p->kernels[i], 100 + (uint64_t)i, &na);
    uint8_t *ob = interpret(r->kernels[i], 100 + (uint64_t)i, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(oa, ob, na);
    free(oa);
    free(ob);
  }
  /* The read kernels still build: hash-consing is rebuilt from exprs. */
  kir_kernel *k = r->kernels[1];
  int32_t n = k->n_exprs;
  assert_int_equal(kir_const_i(&r->arena, k, SC_DTYPE_I64, 7), kir_const_i(&r->arena, k, SC_DTYPE_I64, 7));
  assert_true(k->n_exprs <= n + 1);
  sc_program_destroy(r);
}

/* Replaces the first occurrence of `from` (which must exist) in text. */
static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) {
    fail_msg("fixture text lacks '%s'", from);
  }
  size_t n = strlen(text) - strlen(from) + strlen(to);
  char *s = malloc(n + 1);
  size_t pre = (size_t)(at - text);
  memcpy(s, text, pre);
  strcpy(s + pre, to);
  strcat(s, at + strlen(from));
  return s;
}

static void expect_bad(fixture *f, const char *text, size_t len, sc_status want,
                       const char *needle) {
  sc_program *r = (sc_program *)1;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_program_read_json(text, len, f->weights, f->weights_bytes, &r, &d);
  if (st == SC_OK) fail_msg("accepted a bad program (%s)", needle);
  assert_null(r);
  if (want != SC_STATUS_COUNT) assert_int_equal(st, want);
  if (!strstr(d.msg, needle)) fail_msg("message '%s' lacks '%s'", d.msg, needle);
}

static void test_json_hostile(void **state) {
  fixture *f = *state;
  static const struct {
    const char *from, *to;
    sc_status st;
    const char *needle;
  } cases[] = {
      {"\"buffer\": 2", "\"buffer\": 99", SC_ERR_INVALID, "'buffer' = 99"},
      {"\"buffer\": 2", "\"buffer\": -1", SC_ERR_INVALID, "'buffer'"},
      {"\"op\": \"exp\"", "\"op\": \"frobnicate\"", SC_ERR_INVALID, "unknown op"},
      {"\"op\": \"exp\"", "\"op\": 3", SC_ERR_PARSE, "'op'"},
      {"\"t\": \"f32\"", "\"t\": \"string\"", SC_ERR_INVALID, "unsupported dtype"},
      {"\"bytes\": 24", "\"bytes\": 2400", SC_ERR_INVALID, "shape and dtype"},
      {"\"weights_offset\": 0", "\"weights_offset\": 64", SC_ERR_INVALID, "weights.bin"},
      {"\"offset\": 192", "\"offset\": 256", SC_ERR_INVALID, "outside the arena"},
      {"\"alias_of\": 2", "\"alias_of\": 5", SC_ERR_INVALID, "view of itself"},
      {"\"kernel\": 1", "\"kernel\": 7", SC_ERR_INVALID, "'kernel' = 7"},
      {"\"m\": 2", "\"m\": 3", SC_ERR_INVALID, "overrun"},
      {"\"ldb\": 4", "\"ldb\": 2", SC_ERR_INVALID, "leading dimension"},
      /* FP8 copies of a GEMM's operands: both or neither, in range, FP8 buffers */
      {"\"bias\": -1", "\"bias\": -1, \"a8\": 0", SC_ERR_INVALID, "a8 but no b8"},
      {"\"bias\": -1", "\"bias\": -1, \"a8\": 99, \"b8\": 0", SC_ERR_INVALID, "'a8' = 99"},
      {"\"bias\": -1", "\"bias\": -1, \"a8\": 0, \"b8\": 1", SC_ERR_INVALID, "FP8 copies"},
      /* dequantisation factors (sc_gemm.scaled): only on an FP8 GEMM, both */
      {"\"bias\": -1", "\"bias\": -1, \"a8_scale\": 0, \"b8_scale\": 1", SC_ERR_INVALID,
       "only on an FP8 GEMM"},
      {"\"bias\": -1", "\"bias\": -1, \"a8_scale\": 99", SC_ERR_INVALID, "'a8_scale' = 99"},
      {"\"inner\": 4", "\"inner\": 0", SC_ERR_INVALID, "inner"},
      {"\"name\": \"int_mod\"", "\"name\": \"softmax_rows\"", SC_ERR_INVALID, "duplicate"},
      {"\"name\": \"int_mod\"", "\"name\": \"a b\"", SC_ERR_INVALID, "C identifier"},
      {"\"numel\": 8", "\"numel\": 9999", SC_ERR_INVALID, "do not fit"},
      {"\"version\": 1", "\"version\": 2", SC_ERR_UNSUPPORTED, "version"},
      {"\"rop\": \"sum\"", "\"rop\": \"mean\"", SC_ERR_INVALID, "unknown rop"},
      {"\"written\": true", "\"written\": false", SC_ERR_INVALID, "not written"},
      {"\"inputs\": [\n  0\n ]", "\"inputs\": [\n  2\n ]", SC_ERR_INVALID, "inputs[0]"},
      {"\"shape\": [\n    2,\n    3\n   ]", "\"shape\": [\n    4611686018427387904,\n    3\n   ]",
       SC_ERR_LIMIT, "overflow"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *t = replace(f->json, cases[i].from, cases[i].to);
    expect_bad(f, t, strlen(t), cases[i].st, cases[i].needle);
    free(t);
  }
  /* An operand naming a later expression (not topological). */
  {
    char *t = replace(f->json, "\"a\": 0", "\"a\": 40");
    expect_bad(f, t, strlen(t), SC_ERR_INVALID, "'a' = 40");
    free(t);
  }
  /* exp of an integer: well-formed, caught by kir_verify. */
  {
    char *t = replace(f->json, "\"op\": \"exp\",\n     \"t\": \"f32\"",
                      "\"op\": \"exp\",\n     \"t\": \"i64\"");
    expect_bad(f, t, strlen(t), SC_ERR_INVALID, "kir_verify");
    free(t);
  }
  /* Every truncation of the text is rejected cleanly. */
  size_t n = strlen(f->json);
  for (size_t cut = 0; cut < n - 2; cut += 1 + cut / 8)
    expect_bad(f, f->json, cut, SC_ERR_PARSE, "program.json");
  /* CONST data outside a smaller weights file. */
  sc_program *r = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_not_equal(sc_program_read_json(f->json, n, f->weights, 16, &r, &d), SC_OK);
  assert_null(r);
}

/* ------------------------------------------------------ comm steps, mesh */

/* On mesh pp=2,tp=2: y = all_reduce_tp(x); g = all_gather_tp(y) along dim 1
 * through the unpack scratch u, started async; send y to the pp peer 1;
 * wait for the gather; send y to the next tp rank (a ring's relative
 * peer); r = y of the next tp rank (shift -1), a ring's hop (one
 * send_recv step, codegen/overlap.c), started async, then waited for. */
static sc_program *build_comm_program(void) {
  sc_program *p = sc_program_create();
  assert_non_null(p);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("pp=2,tp=2", &p->mesh, &d), SC_OK);
  assert_int_equal(sc_mesh_set_ranks_per_node(&p->mesh, 2, &d), SC_OK);
  p->arena_bytes = 320;
  p->arena_align = 64;
  const int64_t d24[2] = {2, 4}, d28[2] = {2, 8}, d16[1] = {16};
  int32_t x = add_buf(p, "x", SC_BUF_INPUT, SC_DTYPE_F32, 2, d24, 0, NULL, -1);
  int32_t y = add_buf(p, "y", SC_BUF_OUTPUT, SC_DTYPE_F32, 2, d24, 64, NULL, -1);
  int32_t g = add_buf(p, "g", SC_BUF_OUTPUT, SC_DTYPE_F32, 2, d28, 128, NULL, -1);
  int32_t u = add_buf(p, "u", SC_BUF_TEMP, SC_DTYPE_F32, 1, d16, 192, NULL, -1);
  int32_t r = add_buf(p, "r", SC_BUF_TEMP, SC_DTYPE_F32, 2, d24, 256, NULL, -1);
  assert_int_equal(sc_program_add_input(p, x), SC_OK);
  assert_int_equal(sc_program_add_output(p, y), SC_OK);
  assert_int_equal(sc_program_add_output(p, g), SC_OK);
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_COMM;
  s.kernel = -1;
  s.origin = "AllReduce_0";
  s.comm = (sc_comm_step){.kind = SC_COMM_ALL_REDUCE, .reduce = 2, .in = x, .out = y,
                          .pack = -1, .unpack = -1, .count = 8, .axes = 2, .group_size = 2,
                          .peer = -1};
  assert_int_equal(sc_program_add_step(p, &s), 0);
  s.origin = "AllGather_1";
  s.comm = (sc_comm_step){.kind = SC_COMM_ALL_GATHER, .in = y, .out = g, .pack = -1,
                          .unpack = u, .count = 8, .unpack_outer = 2, .unpack_inner = 4,
                          .axes = 2, .group_size = 2, .peer = -1, .async = true};
  assert_int_equal(sc_program_add_step(p, &s), 1);
  s.origin = "Send_2";
  s.comm = (sc_comm_step){.kind = SC_COMM_SEND, .in = y, .out = -1, .pack = -1, .unpack = -1,
                          .count = 8, .axes = 1, .group_size = 2, .peer = 1, .tag = 7};
  assert_int_equal(sc_program_add_step(p, &s), 2);
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_WAIT;
  s.kernel = -1;
  s.started = 1;
  s.origin = "AllGather_1";
  assert_int_equal(sc_program_add_step(p, &s), 3);
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_COMM;
  s.kernel = -1;
  s.origin = "Send_4"; /* to the next rank of the ring (a relative peer) */
  s.comm = (sc_comm_step){.kind = SC_COMM_SEND, .in = y, .out = -1, .pack = -1, .unpack = -1,
                          .count = 8, .axes = 2, .group_size = 2, .peer = -1, .tag = 8,
                          .shift = 1};
  assert_int_equal(sc_program_add_step(p, &s), 4);
  s.origin = "ring/send";
  s.comm = (sc_comm_step){.kind = SC_COMM_SEND_RECV, .in = y, .out = r, .pack = -1,
                          .unpack = -1, .count = 8, .axes = 2, .group_size = 2, .peer = -1,
                          .tag = 9, .shift = -1, .async = true};
  assert_int_equal(sc_program_add_step(p, &s), 5);
  sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = 5, .origin = "ring/send"};
  assert_int_equal(sc_program_add_step(p, &w), 6);
  return p;
}

/* A program JSON edited (from -> to) is refused with a message naming
 * needle. */
typedef struct edit_case {
  const char *from, *to, *needle;
} edit_case;

static void expect_refused(const char *json, const edit_case *cases, size_t n) {
  sc_diag d = {0};
  for (size_t i = 0; i < n; i++) {
    char *t = replace(json, cases[i].from, cases[i].to);
    sc_program *bad = (sc_program *)1;
    sc_diag_clear(&d);
    if (sc_program_read_json(t, strlen(t), NULL, 0, &bad, &d) == SC_OK)
      fail_msg("accepted a bad program (%s)", cases[i].to);
    assert_null(bad);
    if (!strstr(d.msg, cases[i].needle))
      fail_msg("message '%s' lacks '%s'", d.msg, cases[i].needle);
    free(t);
  }
}

static void test_json_comm(void **state) {
  (void)state;
  sc_program *p = build_comm_program();
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *json = NULL;
  assert_int_equal(sc_program_write_json(p, NULL, &json, &d), SC_OK);
  assert_non_null(strstr(json, "\"mesh\": \"pp=2,tp=2\""));
  assert_non_null(strstr(json, "\"kind\": \"all_gather\""));
  sc_program *r = NULL;
  sc_status st = sc_program_read_json(json, strlen(json), NULL, 0, &r, &d);
  if (st) fail_msg("%s", d.msg);
  char *again = NULL;
  assert_int_equal(sc_program_write_json(r, NULL, &again, &d), SC_OK);
  assert_string_equal(again, json);
  sc_free(again);
  assert_true(sc_mesh_equal(&r->mesh, &p->mesh));
  assert_int_equal(r->mesh.ranks_per_node, 2);
  assert_non_null(strstr(json, "\"kind\": \"send_recv\""));
  assert_int_equal(r->n_steps, 7);
  for (int32_t i = 0; i < 7; i++) {
    if (i == 3 || i == 6) continue; /* the WAITs */
    assert_int_equal(r->steps[i].kind, SC_STEP_COMM);
    assert_int_equal(r->steps[i].kernel, -1);
    assert_string_equal(r->steps[i].origin, p->steps[i].origin);
    assert_memory_equal(&r->steps[i].comm, &p->steps[i].comm, sizeof(sc_comm_step));
  }
  assert_true(r->steps[1].comm.async);
  assert_int_equal(r->steps[3].kind, SC_STEP_WAIT);
  assert_int_equal(r->steps[3].started, 1);
  assert_true(r->steps[5].comm.async);
  assert_int_equal(r->steps[6].started, 5);
  sc_program_destroy(r);

  static const edit_case cases[] = {
      {"\"mesh\": \"pp=2,tp=2\"", "\"mesh\": \"pp=2,pp=2\"", "mesh"},
      {"\"mesh\": \"pp=2,tp=2\"", "\"mesh\": \"pp=2\"", "'axes' = 2"},
      {"\"group_size\": 2", "\"group_size\": 4", "group_size"},
      {"\"kind\": \"all_reduce\"", "\"kind\": \"broadcast\"", "unknown"},
      {"\"reduce\": \"min\"", "\"reduce\": \"avg\"", "unknown"},
      {"\"count\": 8", "\"count\": 9", "overrun"},
      {"\"in\": 0", "\"in\": 7", "'in' = 7"},
      {"\"out\": 1", "\"out\": 0", "writes input"},
      {"\"unpack_outer\": 2", "\"unpack_outer\": 1", "unpack covers too little"},
      {"\"unpack_outer\": 2", "\"unpack_outer\": 3", "overrun"},
      {"\"peer\": 1", "\"peer\": 2", "'peer' = 2"},
      {"\"out\": -1", "\"out\": 2", "do not fit"},
      {"\"kernel\": -1", "\"kernel\": 0", "'kernel' = 0"},
      {"\"started\": 1", "\"started\": 0", "not an async collective"},
      {"\"started\": 1", "\"started\": 3", "'started' = 3"},
      {"\"async\": true", "\"async\": false", "not an async collective"},
      {"\"async\": true", "\"async\": 1", "'async' must be true or false"},
      {"\"tag\": 7", "\"tag\": 7, \"async\": true", "cannot be async"},
      {"\"kind\": \"wait\"", "\"kind\": \"check\"", "'check' must be an object"},
      {"\"shift\": 1", "\"shift\": 2", "'shift' = 2 does not fit a send step in a group of 2"},
      {"\"shift\": 1", "\"shift\": -2", "'shift' = -2 does not fit"},
      {"\"shift\": -1", "\"shift\": 0", "a send_recv step needs a 'shift'"},
      {"\"kind\": \"send_recv\"", "\"kind\": \"send\"", "a send step cannot be async"},
  };
  expect_refused(json, cases, sizeof cases / sizeof cases[0]);

  /* the gather in row chunks of one row (program.h: rows): read
   * back and written again the same; chunks that do not fit refused */
  char *rows = replace(json, "\"unpack_inner\": 4", "\"unpack_inner\": 4, \"rows\": 1");
  st = sc_program_read_json(rows, strlen(rows), NULL, 0, &r, &d);
  if (st) fail_msg("%s", d.msg);
  assert_int_equal(r->steps[1].comm.rows, 1);
  assert_int_equal(sc_comm_step_calls(&r->steps[1].comm), 2);
  assert_int_equal(sc_comm_step_calls(&r->steps[0].comm), 1);
  assert_int_equal(sc_program_write_json(r, NULL, &again, &d), SC_OK);
  assert_non_null(strstr(again, "\"rows\": 1"));
  sc_free(again);
  sc_program_destroy(r);
  static const edit_case chunk_cases[] = {
      {"\"rows\": 1", "\"rows\": 2", "'rows' = 2 does not fit"},
      {"\"rows\": 1", "\"rows\": -1", "negative comm sizes"},
      {"\"unpack_outer\": 2", "\"unpack_outer\": 3", "'rows' = 1 does not fit"},
      {"\"pack_inner\": 0", "\"pack_inner\": 0, \"rows\": 1", "'rows' = 1"},
  };
  expect_refused(rows, chunk_cases, sizeof chunk_cases / sizeof chunk_cases[0]);
  free(rows);
  sc_free(json);
  sc_program_destroy(p);
}

/* An offloaded activation's copies (codegen/offload.c) survive JSON: a
 * temp copied to a host buffer and back into another temp, each copy
 * waited for; damaged ones are refused before anything runs. */
static void test_json_copy(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  p->arena_bytes = 256;
  p->host_bytes = 64;
  p->arena_align = 64;
  const int64_t d24[2] = {2, 4};
  int32_t x = add_buf(p, "x", SC_BUF_INPUT, SC_DTYPE_F32, 2, d24, 0, NULL, -1);
  int32_t y = add_buf(p, "y", SC_BUF_OUTPUT, SC_DTYPE_F32, 2, d24, 64, NULL, -1);
  int32_t t = add_buf(p, "t", SC_BUF_TEMP, SC_DTYPE_F32, 2, d24, 128, NULL, -1);
  int32_t h = add_buf(p, "t/host", SC_BUF_HOST, SC_DTYPE_F32, 2, d24, 0, NULL, -1);
  int32_t t2 = add_buf(p, "t/reload", SC_BUF_TEMP, SC_DTYPE_F32, 2, d24, 192, NULL, -1);
  int32_t v = add_buf(p, "v", SC_BUF_VIEW, SC_DTYPE_F32, 2, d24, -1, NULL, t);
  (void)v;
  assert_int_equal(sc_program_add_input(p, x), SC_OK);
  assert_int_equal(sc_program_add_output(p, y), SC_OK);
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_COPY;
  s.kernel = -1;
  s.origin = "t";
  s.copy = (sc_copy_step){t, h};
  assert_int_equal(sc_program_add_step(p, &s), 0);
  sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = 0, .origin = "t"};
  assert_int_equal(sc_program_add_step(p, &w), 1);
  s.copy = (sc_copy_step){h, t2};
  assert_int_equal(sc_program_add_step(p, &s), 2);
  w.started = 2;
  assert_int_equal(sc_program_add_step(p, &w), 3);
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *json = NULL;
  assert_int_equal(sc_program_write_json(p, NULL, &json, &d), SC_OK);
  assert_non_null(strstr(json, "\"host_bytes\": 64"));
  sc_program *r = NULL;
  sc_status st = sc_program_read_json(json, strlen(json), NULL, 0, &r, &d);
  if (st) fail_msg("%s", d.msg);
  assert_int_equal(r->host_bytes, 64);
  assert_int_equal(r->buffers[h].kind, SC_BUF_HOST);
  assert_int_equal(r->steps[2].kind, SC_STEP_COPY);
  assert_int_equal(r->steps[2].copy.src, h);
  assert_int_equal(r->steps[2].copy.dst, t2);
  assert_int_equal(r->steps[3].started, 2);
  char *again = NULL;
  assert_int_equal(sc_program_write_json(r, NULL, &again, &d), SC_OK);
  assert_string_equal(again, json);
  sc_free(again);
  sc_program_destroy(r);
  static const edit_case cases[] = {
      {"\"dst\": 3", "\"dst\": 0", "a host and a temp buffer"},
      {"\"dst\": 3", "\"dst\": 4", "a host and a temp buffer"},
      {"\"host_bytes\": 64", "\"host_bytes\": 16", "outside the host pool"},
      {"\"host_bytes\": 64", "\"host_bytes\": -64", "host_bytes"},
      {"\"alias_of\": 2", "\"alias_of\": 3", "a view of a host buffer"},
      {"\"started\": 2", "\"started\": 0", "a second time"},
  };
  expect_refused(json, cases, sizeof cases / sizeof cases[0]);
  sc_free(json);
  sc_program_destroy(p);
}

/* A SCATTER_ADD step and a state pair survive JSON; damaged ones are
 * refused before anything runs. */
static void test_json_scatter_and_pairs(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  struct { const char *name; sc_buf_kind kind; sc_dtype t; int64_t d0, d1; } bs[] = {
      {"w", SC_BUF_INPUT, SC_DTYPE_F32, 4, 3},   {"idx", SC_BUF_INPUT, SC_DTYPE_I64, 2, 1},
      {"upd", SC_BUF_INPUT, SC_DTYPE_F32, 2, 3}, {"new:w", SC_BUF_OUTPUT, SC_DTYPE_F32, 4, 3}};
  for (int32_t i = 0; i < 4; i++) {
    sc_buffer b;
    memset(&b, 0, sizeof b);
    b.name = bs[i].name;
    b.kind = bs[i].kind;
    b.dtype = bs[i].t;
    b.rank = 2;
    b.dims[0] = bs[i].d0;
    b.dims[1] = bs[i].d1;
    b.offset = -1;
    b.alias_of = -1;
    b.value = -1;
    assert_int_equal(sc_program_add_buffer(p, &b), i);
    assert_int_equal(b.kind == SC_BUF_INPUT ? sc_program_add_input(p, i)
                                            : sc_program_add_output(p, i),
                     SC_OK);
  }
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_SCATTER_ADD;
  s.kernel = -1;
  s.origin = "snd";
  s.scatter = (sc_scatter_step){.data = 0, .indices = 1, .updates = 2, .out = 3, .rows = 4,
                                .row = 3, .n = 2};
  assert_true(sc_program_add_step(p, &s) >= 0);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_pair_state(p), SC_OK);
  assert_int_equal(sc_memplan_run(p, &d), SC_OK);
  /* the step reads w where it writes new:w, row for row: its output may
   * take its data's storage (the memory plan's scatter in place), so the
   * pair stays */
  assert_int_equal(sc_program_updates(p, 0), 0);
  char *json = NULL;
  assert_int_equal(sc_program_write_json(p, NULL, &json, &d), SC_OK);
  assert_non_null(strstr(json, "\"kind\": \"scatter_add\""));
  sc_program *r = NULL;
  if (sc_program_read_json(json, strlen(json), NULL, 0, &r, &d) != SC_OK) fail_msg("%s", d.msg);
  assert_int_equal(r->steps[0].kind, SC_STEP_SCATTER_ADD);
  assert_memory_equal(&r->steps[0].scatter, &s.scatter, sizeof s.scatter);
  sc_program_destroy(r);
  static const edit_case cases[] = {
      {"\"rows\": 4", "\"rows\": 5", "sizes"},
      {"\"n\": 2", "\"n\": 3", "sizes"},
      {"\"indices\": 1", "\"indices\": 2", "dtypes"},
      {"\"out\": 3", "\"out\": 0", "writes input"},
      {"\"updates\": [\n  0", "\"updates\": [\n  2", "in place"},
      {"\"updates\": [\n  0", "\"updates\": [\n  7", "updates[0]"},
  };
  expect_refused(json, cases, sizeof cases / sizeof cases[0]);
  sc_free(json);
  sc_program_destroy(p);
}

/* An ATTENTION step and its ATTENTION_GRAD survive JSON; damaged ones
 * (extents, dtypes, ids, writes to inputs) are refused before anything
 * runs. */
static void test_json_attention(void **state) {
  (void)state;
  sc_program *p = sc_program_create();
  assert_non_null(p);
  struct { const char *name; sc_buf_kind kind; sc_dtype t; int32_t rank; int64_t d[4]; } bs[] = {
      {"q", SC_BUF_INPUT, SC_DTYPE_F32, 4, {1, 2, 3, 4}},
      {"k", SC_BUF_INPUT, SC_DTYPE_F32, 4, {1, 1, 5, 4}},
      {"v", SC_BUF_INPUT, SC_DTYPE_F32, 4, {1, 1, 5, 2}},
      {"mask", SC_BUF_INPUT, SC_DTYPE_F32, 2, {3, 5}},
      {"o", SC_BUF_OUTPUT, SC_DTYPE_F32, 4, {1, 2, 3, 2}},
      {"lse", SC_BUF_OUTPUT, SC_DTYPE_F32, 3, {1, 2, 3}},
      {"do", SC_BUF_INPUT, SC_DTYPE_F32, 4, {1, 2, 3, 2}},
      {"dq", SC_BUF_OUTPUT, SC_DTYPE_F32, 4, {1, 2, 3, 4}},
      {"dk", SC_BUF_OUTPUT, SC_DTYPE_F32, 4, {1, 1, 5, 4}},
      {"dv", SC_BUF_OUTPUT, SC_DTYPE_F32, 4, {1, 1, 5, 2}}};
  for (int32_t i = 0; i < 10; i++) {
    sc_buffer b;
    memset(&b, 0, sizeof b);
    b.name = bs[i].name;
    b.kind = bs[i].kind;
    b.dtype = bs[i].t;
    b.rank = bs[i].rank;
    b.bytes = 4;
    for (int32_t j = 0; j < b.rank; j++) {
      b.dims[j] = bs[i].d[j];
      b.bytes *= b.dims[j];
    }
    b.offset = -1;
    b.alias_of = -1;
    b.value = -1;
    assert_int_equal(sc_program_add_buffer(p, &b), i);
    assert_int_equal(b.kind == SC_BUF_INPUT ? sc_program_add_input(p, i)
                                            : sc_program_add_output(p, i),
                     SC_OK);
  }
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = SC_STEP_ATTENTION;
  s.kernel = -1;
  s.origin = "attn";
  s.attn = (sc_attention_step){.q = 0, .k = 1, .v = 2, .mask = 3, .o = 4, .lse = 5, .d_o = -1,
                               .dq = -1, .dk = -1, .dv = -1, .batch = 1, .heads = 2,
                               .kv_heads = 1, .sq = 3, .skv = 5, .d = 4, .dv_dim = 2,
                               .scale = 0.5f, .causal = false};
  assert_null(sc_attention_problem(p, &s));
  assert_true(sc_program_add_step(p, &s) >= 0);
  sc_step g = s;
  g.kind = SC_STEP_ATTENTION_GRAD;
  g.attn.d_o = 6;
  g.attn.dq = 7;
  g.attn.dk = 8;
  g.attn.dv = 9;
  g.attn.causal = true;
  assert_null(sc_attention_problem(p, &g));
  assert_true(sc_program_add_step(p, &g) >= 0);
  /* what the memory plan sees */
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_memplan_run(p, &d), SC_OK);
  char *json = NULL;
  assert_int_equal(sc_program_write_json(p, NULL, &json, &d), SC_OK);
  assert_non_null(strstr(json, "\"kind\": \"attention\""));
  assert_non_null(strstr(json, "\"kind\": \"attention_grad\""));
  sc_program *r = NULL;
  if (sc_program_read_json(json, strlen(json), NULL, 0, &r, &d) != SC_OK) fail_msg("%s", d.msg);
  assert_int_equal(r->steps[0].kind, SC_STEP_ATTENTION);
  assert_int_equal(r->steps[1].kind, SC_STEP_ATTENTION_GRAD);
  assert_memory_equal(&r->steps[0].attn, &s.attn, sizeof s.attn);
  assert_memory_equal(&r->steps[1].attn, &g.attn, sizeof g.attn);
  sc_program_destroy(r);
  static const edit_case cases[] = {
      {"\"kv_heads\": 1", "\"kv_heads\": 3", "bad extents"},
      {"\"skv\": 5", "\"skv\": 6", "smaller than the extents"},
      {"\"lse\": 5", "\"lse\": 1", "writes a constant or an input"},
      {"\"mask\": 3", "\"mask\": 9", "mask is smaller"},
      {"\"mask_stride_h\": 0", "\"mask_stride_h\": 1", "mask is smaller"},
      {"\"mask\": 3", "\"mask\": 10", "'mask' = 10"},
      {"\"d_o\": -1", "\"d_o\": 6", "names gradient buffers"},
      {"\"causal\": false", "\"causal\": 0", "'causal' must be true or false"},
      {"\"d\": 4", "\"d\": 0", "bad extents"},
  };
  expect_refused(json, cases, sizeof cases / sizeof cases[0]);
  sc_free(json);
  sc_program_destroy(p);
}

/* A KERNEL step's max-pool (sc_pool_geom) survives JSON; damaged ones are
 * refused. */
static void test_json_pool(void **state) {
  (void)state;
  float w[12] = {0};
  sc_program *p = build_program(w);
  /* y [1, 1, 2, 4] pooled 2 x 2 / 2 into z [1, 1, 1, 2] by kernel 1 after
   * kernel 0 (not what those kernels compute: the reader checks the
   * geometry's form and sizes, the device the rest) */
  sc_pool_geom *v = &p->steps[2].pool;
  *v = (sc_pool_geom){.on = true, .x = 2, .y = 3, .prep = {0, -1}, .n = 1, .c = 1, .h = 2,
                      .w = 4, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .oh = 1, .ow = 2};
  char *json = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_write_json(p, NULL, &json, &d), SC_OK);
  assert_non_null(strstr(json, "\"pool\""));
  sc_program *r = NULL;
  if (sc_program_read_json(json, strlen(json), NULL, 0, &r, &d) != SC_OK) fail_msg("%s", d.msg);
  assert_memory_equal(&r->steps[2].pool, v, sizeof *v);
  assert_false(r->steps[1].pool.on);
  sc_program_destroy(r);
  static const edit_case cases[] = {
      {"\"ow\": 2", "\"ow\": 200", "smaller than its sizes"},
      {"\"h\": 2", "\"h\": 3", "smaller than its sizes"},
      {"\"kh\": 2", "\"kh\": -2", "negative"},
      {"\"y\": 3", "\"y\": 99", "'y' = 99"},
      {"\"x\": 2", "\"x\": -1", "'x' = -1"},
      {"\"prep\": [", "\"prep\": [7, ", "pool 'prep'"},
  };
  expect_refused(json, cases, sizeof cases / sizeof cases[0]);
  sc_free(json);
  sc_program_destroy(p);
}

/* ------------------------------------------------------------ the bundle */

static void write_all(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, n, fp), n);
  fclose(fp);
}

static void expect_load_error(const char *dir, const char *needle) {
  sc_bundle *b = (sc_bundle *)1;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_bundle_load(dir, &b, &d);
  if (st == SC_OK) fail_msg("loaded a corrupted bundle (%s)", needle);
  assert_null(b);
  if (!strstr(d.msg, needle)) fail_msg("message '%s' lacks '%s'", d.msg, needle);
}

/* Writes the bundle (cpu target: needs the CPU backend's object writer) and
 * loads it back; then corrupts one file at a time. */
static void test_bundle_write_load(void **state) {
  fixture *f = *state;
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/tests/tmp_bundle_%d", SC_BINARY_DIR, (int)getpid());
  mkdir(SC_BINARY_DIR "/tests", 0777);
  sc_bundle_opts o;
  sc_bundle_opts_init(&o);
  o.model = "hand.onnx";
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_bundle_write(f->p, &o, dir, &d);
  if (st) fail_msg("sc_bundle_write: %s", d.msg);
  assert_true(sc_bundle_is_dir(dir));
  assert_false(sc_bundle_is_dir(SC_SOURCE_DIR "/samples"));

  sc_bundle *b = NULL;
  st = sc_bundle_load(dir, &b, &d);
  if (st) fail_msg("sc_bundle_load: %s", d.msg);
  assert_string_equal(b->target, "cpu");
  char *json = NULL;
  assert_int_equal(sc_program_write_json(b->program, f->offsets, &json, &d), SC_OK);
  assert_string_equal(json, f->json);
  sc_free(json);
  assert_memory_equal(b->program->buffers[1].data, f->w, sizeof f->w);
  sc_bundle_destroy(b);

  /* Each file: one flipped byte → a hash error naming it; restored after. */
  const char *files[] = {"weights.bin", "program.json", "kernels.o"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    size_t n;
    char *orig = read_whole(path, &n);
    char *bad = malloc(n + 1);
    memcpy(bad, orig, n);
    bad[n / 2] ^= 0x20;
    write_all(path, bad, n);
    expect_load_error(dir, files[i]);
    write_all(path, orig, n - 1); /* truncated: a size error */
    expect_load_error(dir, "bytes");
    write_all(path, orig, n);
    free(bad);
    free(orig);
  }
  /* The manifest itself: malformed, wrong version, hostile file names,
   * a missing required file. */
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  size_t mn;
  char *man = read_whole(path, &mn);
  write_all(path, man, mn / 2);
  expect_load_error(dir, "manifest.json");
  char *t = replace(man, "\"format_version\": 1", "\"format_version\": 9");
  write_all(path, t, strlen(t));
  expect_load_error(dir, "format_version");
  free(t);
  t = replace(man, "\"name\": \"kernels.o\"", "\"name\": \"../kernels.o\"");
  write_all(path, t, strlen(t));
  expect_load_error(dir, "malformed");
  free(t);
  t = replace(man, "\"name\": \"weights.bin\"", "\"name\": \"weights.bim\"");
  write_all(path, t, strlen(t));
  expect_load_error(dir, "weights.bin");
  free(t);
  t = replace(man, "\"arena_bytes\": 256", "\"arena_bytes\": 512");
  write_all(path, t, strlen(t));
  expect_load_error(dir, "arena_bytes");
  free(t);
  t = replace(man, "\"name\": \"q\"", "\"name\": \"Q\"");
  write_all(path, t, strlen(t));
  expect_load_error(dir, "outputs[1]");
  free(t);
  write_all(path, man, mn);
  st = sc_bundle_load(dir, &b, &d);
  assert_int_equal(st, SC_OK);
  sc_bundle_destroy(b);
  free(man);

  const char *all[] = {"manifest.json", "program.json", "weights.bin", "kernels.o"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, all[i]);
    remove(path);
  }
  rmdir(dir);
  expect_load_error(dir, "manifest.json");
}

/* ------------------------------------------------- kernels from kernels.o */

/* Seeded random data for every param of k (read params uniform in [-3, 3),
 * written ones filled with a pattern that the kernel must overwrite). */
static void **make_params(const kir_kernel *k, uint64_t seed) {
  void **bufs = calloc((size_t)k->n_params, sizeof *bufs);
  rng_seed(seed);
  for (int32_t i = 0; i < k->n_params; i++) {
    size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
    bufs[i] = malloc(bytes);
    memset(bufs[i], 0x5a, bytes);
    if (!k->params[i].written)
      for (int64_t j = 0; j < k->params[i].numel; j++)
        sc_store_f64(k->params[i].dtype, bufs[i], j, rnd(-3, 3));
  }
  return bufs;
}

static void free_params(const kir_kernel *k, void **bufs) {
  for (int32_t i = 0; i < k->n_params; i++) free(bufs[i]);
  free(bufs);
}

static int64_t outer_points(const kir_kernel *k) {
  int64_t n = 1;
  for (int32_t d = 0; d < k->outer_rank; d++) n *= k->outer_dims[d];
  return n;
}

static void test_object_kernels(void **state) {
  fixture *f = *state;
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/tests/tmp_objload_%d", SC_BINARY_DIR, (int)getpid());
  mkdir(SC_BINARY_DIR "/tests", 0777);
  sc_bundle_opts o;
  sc_bundle_opts_init(&o);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_bundle_write(f->p, &o, dir, &d)) fail_msg("sc_bundle_write: %s", d.msg);
  snprintf(path, sizeof path, "%s/kernels.o", dir);
  size_t obj_n;
  char *obj = read_whole(path, &obj_n);

  sc_cpu_module *om = NULL, *jm = NULL;
  if (sc_cpu_load_object(f->p, obj, obj_n, &om, &d)) fail_msg("sc_cpu_load_object: %s", d.msg);
  assert_int_equal(sc_cpu_module_n_kernels(om), f->p->n_kernels);
  if (sc_cpu_jit(f->p, NULL, &jm, &d)) fail_msg("sc_cpu_jit: %s", d.msg);

  for (int32_t ki = 0; ki < f->p->n_kernels; ki++) {
    const kir_kernel *k = f->p->kernels[ki];
    void **ref = make_params(k, 100 + (uint64_t)ki);
    void **got = make_params(k, 100 + (uint64_t)ki);
    void **jit = make_params(k, 100 + (uint64_t)ki);
    assert_int_equal(kir_interpret(k, ref, &d), SC_OK);
    int64_t pts = outer_points(k);
    sc_cpu_kernel(om, ki)(got, 0, pts / 2); /* two ranges, as the pool splits */
    sc_cpu_kernel(om, ki)(got, pts / 2, pts);
    sc_cpu_kernel(jm, ki)(jit, 0, pts);
    for (int32_t i = 0; i < k->n_params; i++) {
      if (!k->params[i].written) continue;
      size_t bytes = (size_t)k->params[i].numel * sc_dtype_size(k->params[i].dtype);
      /* The object is the JIT's module compiled ahead of time: same bytes. */
      assert_memory_equal(got[i], jit[i], bytes);
      for (int64_t j = 0; j < k->params[i].numel; j++) {
        double w = sc_load_f64(k->params[i].dtype, ref[i], j);
        double g = sc_load_f64(k->params[i].dtype, got[i], j);
        assert_false(isnan(g));
        if (k->params[i].dtype == SC_DTYPE_F32) {
          /* rtol 1e-5: exp and the reassociated row sums of softmax */
          if (!(fabs(w - g) <= 1e-5 * fmax(fabs(w), fabs(g)) + 1e-7))
            fail_msg("%s: element %lld: interpreter %.9g, kernels.o %.9g", k->name,
                     (long long)j, w, g);
        } else {
          assert_true(w == g); /* integers: exact */
        }
      }
    }
    free_params(k, ref);
    free_params(k, got);
    free_params(k, jit);
  }

  /* A whole session on the loaded module equals one that JIT-compiles. */
  {
    float x[6];
    rng_seed(11);
    for (int i = 0; i < 6; i++) x[i] = (float)rnd(-1, 1);
    sc_tensor_view in = {.name = "x", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {2, 3},
                         .data = x};
    sc_tensor_view out_o[2], out_j[2];
    sc_session *so = NULL, *sj = NULL;
    sc_session_opts opts;
    sc_session_opts_init(&opts);
    opts.threads = 1;
    if (sc_session_create(f->p, &opts, &sj, &d)) fail_msg("session (JIT): %s", d.msg);
    opts.cpu_module = om;
    if (sc_session_create(f->p, &opts, &so, &d)) fail_msg("session (object): %s", d.msg);
    /* The session used the module (its link time), not a JIT of its own. */
    assert_true(sc_session_compile_seconds(so) == sc_cpu_compile_seconds(om));
    assert_int_equal(sc_session_run(so, &in, 1, out_o, 2, &d), SC_OK);
    assert_int_equal(sc_session_run(sj, &in, 1, out_j, 2, &d), SC_OK);
    const float *z = out_o[0].data;
    float rowsum = 0;
    for (int j = 0; j < 4; j++) rowsum += z[j];
    assert_true(fabsf(rowsum - 1.0f) < 1e-5f); /* softmax rows sum to 1 */
    assert_memory_equal(out_o[0].data, out_j[0].data, 8 * sizeof(float));
    assert_memory_equal(out_o[1].data, out_j[1].data, 8 * sizeof(int64_t));
    sc_session_destroy(so);
    sc_session_destroy(sj);
  }
  sc_cpu_module_destroy(jm);
  sc_cpu_module_destroy(om);

  /* A kernel of the program that the object does not define. */
  const char *saved = f->p->kernels[1]->name;
  f->p->kernels[1]->name = "no_such_kernel";
  om = (sc_cpu_module *)1;
  sc_diag_clear(&d);
  assert_int_equal(sc_cpu_load_object(f->p, obj, obj_n, &om, &d), SC_ERR_INVALID);
  assert_null(om);
  if (!strstr(d.msg, "'no_such_kernel'") || !strstr(d.msg, "kernels.o"))
    fail_msg("missing symbol: '%s'", d.msg);
  f->p->kernels[1]->name = saved;
  /* Not an object file at all. */
  sc_diag_clear(&d);
  assert_int_not_equal(sc_cpu_load_object(f->p, "not an ELF object", 17, &om, &d), SC_OK);
  assert_null(om);
  assert_int_not_equal(sc_cpu_load_object(f->p, obj, 0, &om, &d), SC_OK);
  free(obj);

  /* The host CPU's own description passes; an extra feature does not. */
  char *cpu = NULL, *feat = NULL;
  assert_int_equal(sc_cpu_describe_target(NULL, &cpu, &feat, &d), SC_OK);
  assert_true(cpu[0] != 0 && strchr(feat, '+') != NULL);
  assert_int_equal(sc_cpu_check_host_features(cpu, feat, &d), SC_OK);
  size_t fl = strlen(feat);
  char *more = malloc(fl + 64);
  snprintf(more, fl + 64, "%s,+no-such-feature,+another-one", feat);
  sc_diag_clear(&d);
  assert_int_equal(sc_cpu_check_host_features(cpu, more, &d), SC_ERR_UNSUPPORTED);
  if (!strstr(d.msg, "no-such-feature, another-one") || !strstr(d.msg, "recompile"))
    fail_msg("missing features: '%s'", d.msg);
  /* "-x" entries (disabled on the compiling machine) demand nothing. */
  assert_int_equal(sc_cpu_check_host_features(cpu, "-no-such-feature", &d), SC_OK);
  /* A named CPU (no features recorded): only the host's own name passes. */
  assert_int_equal(sc_cpu_check_host_features(cpu, "", &d), SC_OK);
  assert_int_equal(sc_cpu_check_host_features("no-such-cpu", "", &d), SC_ERR_UNSUPPORTED);
  free(more);
  sc_free(cpu);
  sc_free(feat);

  const char *all[] = {"manifest.json", "program.json", "weights.bin", "kernels.o"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, all[i]);
    remove(path);
  }
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors),
      cmocka_unit_test_setup_teardown(test_json_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_hostile, setup, teardown),
      cmocka_unit_test(test_json_comm),
      cmocka_unit_test(test_json_scatter_and_pairs),
      cmocka_unit_test(test_json_pool),
      cmocka_unit_test(test_json_copy),
      cmocka_unit_test(test_json_attention),
      cmocka_unit_test_setup_teardown(test_bundle_write_load, setup, teardown),
      cmocka_unit_test_setup_teardown(test_object_kernels, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
