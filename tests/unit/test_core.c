/* test_core.c — the IR core: arena, diagnostics, dtypes, graph building,
 * topological sort, compaction, dim binding, allocation-failure injection. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

static void test_arena(void **state) {
  (void)state;
  sc_arena a;
  sc_arena_init(&a);
  char *prev = NULL;
  for (int i = 0; i < 10000; i++) {
    char *p = sc_arena_alloc(&a, (size_t)(i % 97) + 1);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    for (int k = 0; k < i % 97 + 1; k++) assert_int_equal(p[k], 0);
    memset(p, 0xab, (size_t)(i % 97) + 1);
    prev = p;
  }
  (void)prev;
  void *big = sc_arena_alloc(&a, 1 << 20); /* bigger than a chunk */
  assert_non_null(big);
  assert_null(sc_arena_array(&a, SIZE_MAX / 2, 4)); /* overflow */
  char *s = sc_arena_printf(&a, "%s_%d", "MatMul", 42);
  assert_string_equal(s, "MatMul_42");
  sc_arena_free(&a);
}

static void test_diag_format(void **state) {
  (void)state;
  sc_diag d = {0};
  memset(&d, 0, sizeof d);
  sc_diag_set_file(&d, "model.onnx");
  sc_diag_set(&d, SC_ERR_INVALID, "mm", "MatMul", "inner dims %d and %d differ", 64, 32);
  sc_diag_set(&d, SC_ERR_PARSE, NULL, NULL, "second problem is ignored");
  char buf[2048];
  sc_diag_format(&d, buf, sizeof buf);
  assert_string_equal(buf, "model.onnx: node 'mm' (MatMul): inner dims 64 and 32 differ");
  assert_int_equal(d.status, SC_ERR_INVALID);
  /* control characters in names are escaped: the error stays one line */
  sc_diag_clear(&d);
  assert_string_equal(d.file, "model.onnx");
  sc_diag_set(&d, SC_ERR_INVALID, "a\nb", "Add", "x");
  sc_diag_format(&d, buf, sizeof buf);
  assert_null(strchr(buf, '\n'));
  assert_non_null(strstr(buf, "a\\x0ab"));
  /* truncation never overflows */
  char small[8];
  sc_diag_format(&d, small, sizeof small);
  assert_true(strlen(small) < sizeof small);
}

static void test_dtypes(void **state) {
  (void)state;
  for (int t = 0; t < SC_DTYPE_COUNT; t++) {
    assert_int_equal(sc_dtype_parse(sc_dtype_name((sc_dtype)t)), t);
    if (t != SC_DTYPE_UNDEF)
      assert_int_equal(sc_dtype_from_onnx(sc_dtype_to_onnx((sc_dtype)t)), t);
  }
  assert_int_equal(sc_dtype_from_onnx(1), SC_DTYPE_F32);
  assert_int_equal(sc_dtype_from_onnx(16), SC_DTYPE_BF16);
  assert_int_equal(sc_dtype_from_onnx(999), SC_DTYPE_COUNT);
  assert_int_equal(sc_dtype_size(SC_DTYPE_BF16), 2);
  /* f16: exact values, rounding to nearest even, subnormals, inf, nan */
  const float exact[] = {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    assert_true(sc_f16_to_f32(sc_f32_to_f16(exact[i])) == exact[i]);
  assert_int_equal(sc_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie → even */
  assert_int_equal(sc_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie → even */
  assert_true(isinf(sc_f16_to_f32(sc_f32_to_f16(1e6f))));
  assert_true(isnan(sc_f16_to_f32(sc_f32_to_f16(NAN))));
  /* bf16 */
  assert_true(sc_bf16_to_f32(sc_f32_to_bf16(3.140625f)) == 3.140625f);
  assert_int_equal(sc_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie → even */
  assert_true(isnan(sc_bf16_to_f32(sc_f32_to_bf16(NAN))));
  /* TF32: 10 mantissa bits, to nearest, ties away from zero (cvt.rna) */
  float ulp = 1.0f / 1024; /* TF32's unit at 1 */
  assert_true(sc_f32_to_tf32(1.0f + ulp / 2) == 1.0f + ulp);          /* tie: away */
  assert_true(sc_f32_to_tf32(-(1.0f + ulp / 2)) == -(1.0f + ulp));
  assert_true(sc_f32_to_tf32(1.0f + ulp + ulp / 2) == 1.0f + 2 * ulp); /* not to even */
  assert_true(sc_f32_to_tf32(1.0f + ulp / 2 - ulp / 8192) == 1.0f);   /* below the tie */
  assert_true(sc_f32_to_tf32(1.0f + ulp / 2 + ulp / 8192) == 1.0f + ulp);
  assert_true(sc_f32_to_tf32(3.140625f) == 3.140625f);                 /* exact stays */
  assert_true(sc_f32_to_tf32(1e-44f) == 0.0f);                         /* below TF32 subnormals */
  assert_true(isinf(sc_f32_to_tf32(FLT_MAX)) && sc_f32_to_tf32(-INFINITY) == -INFINITY);
  assert_true(isnan(sc_f32_to_tf32(NAN)));
  /* loads and stores */
  int64_t i64[2] = {0, 0};
  sc_store_i64(SC_DTYPE_I64, i64, 1, (int64_t)9007199254740993LL);
  assert_true(sc_load_i64(SC_DTYPE_I64, i64, 1) == 9007199254740993LL);
  uint8_t b[1];
  sc_store_f64(SC_DTYPE_BOOL, b, 0, 0.5);
  assert_int_equal(b[0], 1);
  int32_t i32[1];
  sc_store_f64(SC_DTYPE_I32, i32, 0, -2.7);
  assert_int_equal(i32[0], -2);
}

/* x → Relu → a → Add(a, w) → y ; nodes added out of order on purpose */
static sc_graph *small_graph(int32_t *ids) {
  sc_graph *g = sc_graph_create("t");
  int32_t x = sc_graph_add_value(g, "x"), a = sc_graph_add_value(g, "a");
  int32_t w = sc_graph_add_value(g, "w"), y = sc_graph_add_value(g, "y");
  int64_t dims[2] = {2, 3};
  float wd[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(sc_value_set_shape(g, x, SC_DTYPE_F32, 2, dims), SC_OK);
  assert_int_equal(sc_value_set_data(g, w, SC_DTYPE_F32, 2, dims, wd, sizeof wd, true), SC_OK);
  assert_int_equal(sc_graph_add_input(g, x), SC_OK);
  int32_t in_add[2] = {a, w};
  assert_int_equal(sc_graph_add_node(g, SC_OP_ADD, "add", in_add, 2, &y, 1), 0);
  assert_int_equal(sc_graph_add_node(g, SC_OP_RELU, "relu", &x, 1, &a, 1), 1);
  assert_int_equal(sc_graph_add_output(g, y), SC_OK);
  if (ids) { ids[0] = x; ids[1] = a; ids[2] = w; ids[3] = y; }
  return g;
}

static void test_graph_build_and_sort(void **state) {
  (void)state;
  int32_t ids[4];
  sc_graph *g = small_graph(ids);
  assert_int_equal(sc_graph_find_value(g, "w"), ids[2]);
  assert_int_equal(sc_graph_find_value(g, "nope"), -1);
  assert_int_equal(sc_graph_add_value(g, "x"), -1); /* duplicate name */
  assert_int_equal(g->diag.status, SC_ERR_INVALID);
  sc_diag_clear(&g->diag);
  assert_true(sc_value_has_data(&g->values[ids[2]]));
  assert_false(sc_value_has_data(&g->values[ids[0]]));
  assert_int_equal(sc_value_numel(&g->values[ids[2]]), 6);
  assert_int_equal(sc_value_bytes(&g->values[ids[2]]), 24);

  assert_int_equal(sc_graph_toposort(g), SC_OK);
  assert_string_equal(g->nodes[0].name, "relu");
  assert_string_equal(g->nodes[1].name, "add");
  assert_int_equal(g->values[ids[3]].producer, 1);
  assert_int_equal(g->values[ids[1]].producer, 0);

  int32_t *off, *users;
  assert_int_equal(sc_graph_users(g, &off, &users), SC_OK);
  assert_int_equal(off[ids[1] + 1] - off[ids[1]], 1);
  assert_int_equal(users[off[ids[1]]], 1);
  assert_int_equal(off[ids[3] + 1] - off[ids[3]], 0);
  sc_free(off);
  sc_free(users);
  sc_graph_destroy(g);
}

static void test_graph_cycle_and_dangling(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("cyc");
  int32_t a = sc_graph_add_value(g, "a"), b = sc_graph_add_value(g, "b");
  sc_graph_add_node(g, SC_OP_RELU, "n1", &a, 1, &b, 1);
  sc_graph_add_node(g, SC_OP_RELU, "n2", &b, 1, &a, 1);
  sc_graph_add_output(g, b);
  assert_int_equal(sc_graph_toposort(g), SC_ERR_INVALID);
  assert_non_null(strstr(g->diag.msg, "cycle"));
  assert_true(strcmp(g->diag.node, "n1") == 0 || strcmp(g->diag.node, "n2") == 0);
  sc_graph_destroy(g);

  g = sc_graph_create("dangling");
  a = sc_graph_add_value(g, "a");
  b = sc_graph_add_value(g, "b");
  sc_graph_add_node(g, SC_OP_RELU, "n1", &a, 1, &b, 1);
  assert_int_equal(sc_graph_toposort(g), SC_ERR_INVALID);
  assert_string_equal(g->diag.node, "n1");
  assert_string_equal(g->diag.op, "Relu");
  assert_non_null(strstr(g->diag.msg, "'a'"));
  sc_graph_destroy(g);
}

static void test_graph_compact(void **state) {
  (void)state;
  int32_t ids[4];
  sc_graph *g = small_graph(ids);
  assert_int_equal(sc_graph_toposort(g), SC_OK);
  /* kill relu and value a; add now reads x directly */
  g->nodes[0].flags |= SC_NODE_DEAD;
  g->values[ids[1]].flags |= SC_VALUE_DEAD;
  g->nodes[1].inputs[0] = ids[0];
  assert_int_equal(sc_graph_compact(g), SC_OK);
  assert_int_equal(g->n_nodes, 1);
  assert_int_equal(g->n_values, 3);
  int32_t y = sc_graph_find_value(g, "y"), x = sc_graph_find_value(g, "x");
  int32_t w = sc_graph_find_value(g, "w");
  assert_true(y >= 0 && x >= 0 && w >= 0);
  assert_int_equal(g->nodes[0].inputs[0], x);
  assert_int_equal(g->nodes[0].inputs[1], w);
  assert_int_equal(g->nodes[0].outputs[0], y);
  assert_int_equal(g->values[y].producer, 0);
  assert_int_equal(g->outputs[0], y);
  assert_int_equal(g->inputs[0], x);
  sc_graph_destroy(g);
}

static void test_bind_dim_and_limits(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("dims");
  int32_t x = sc_graph_add_value(g, "x");
  int64_t dims[3] = {SC_DIM_UNKNOWN, 16, SC_DIM_UNKNOWN};
  sc_value *v = &g->values[x];
  v->dtype = SC_DTYPE_I64;
  v->rank = 3;
  memcpy(v->dims, dims, sizeof dims);
  v->dim_param = sc_arena_array(&g->arena, 3, sizeof(char *));
  v->dim_param[0] = "batch";
  v->dim_param[2] = "batch";
  sc_graph_add_input(g, x);
  assert_int_equal(sc_graph_bind_dim(g, "batch", 8), 2);
  assert_int_equal(sc_graph_bind_dim(g, "seq", 8), 0);
  assert_int_equal(g->values[x].dims[0], 8);
  assert_int_equal(g->values[x].dims[2], 8);

  int32_t h = sc_graph_add_value(g, "huge");
  int64_t big[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  assert_int_equal(sc_value_set_shape(g, h, SC_DTYPE_F32, 2, big), SC_ERR_LIMIT);
  sc_diag_clear(&g->diag);
  int64_t neg[1] = {-3};
  assert_int_equal(sc_value_set_shape(g, h, SC_DTYPE_F32, 1, neg), SC_ERR_INVALID);
  sc_diag_clear(&g->diag);
  int64_t r9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(sc_value_set_shape(g, h, SC_DTYPE_F32, 9, r9), SC_ERR_LIMIT);
  sc_diag_clear(&g->diag);
  float d[2] = {1, 2};
  int64_t one[1] = {3}; /* 3 elements need 12 bytes, 8 given */
  assert_int_equal(sc_value_set_data(g, h, SC_DTYPE_F32, 1, one, d, sizeof d, true),
                   SC_ERR_INVALID);
  sc_graph_destroy(g);
}

/* Allocation failures are reported, never crash. */
static int fail_after;
static void *failing_alloc(void *ud, size_t n) {
  (void)ud;
  return fail_after-- > 0 ? malloc(n) : NULL;
}
static void *failing_realloc(void *ud, void *p, size_t n) {
  (void)ud;
  return fail_after-- > 0 ? realloc(p, n) : NULL;
}
static void plain_free(void *ud, void *p) { (void)ud; free(p); }

/* For each k, the allocator refuses every allocation after the first k: the
 * graph grows until one is refused, which must happen (the loop is not
 * bounded by a count that might need fewer than k allocations) and be
 * reported as SC_ERR_NOMEM; destroying the graph then must not crash. */
static void test_alloc_failure(void **state) {
  (void)state;
  for (int k = 0; k < 40; k++) {
    sc_allocator a = {failing_alloc, failing_realloc, plain_free, NULL};
    fail_after = k;
    sc_set_allocator(&a);
    sc_graph *g = sc_graph_create("oom");
    bool failed = g == NULL;
    for (int i = 0; !failed && i < 1000000; i++) {
      char name[32];
      snprintf(name, sizeof name, "v%d", i);
      int32_t v = sc_graph_add_value(g, name);
      snprintf(name, sizeof name, "r%d", i);
      int32_t out = v >= 0 ? sc_graph_add_value(g, name) : -1;
      if (v < 0 || out < 0 || sc_graph_add_node(g, SC_OP_RELU, NULL, &v, 1, &out, 1) < 0) {
        failed = true;
        assert_int_equal(g->diag.status, SC_ERR_NOMEM);
      }
    }
    sc_graph_destroy(g);
    sc_set_allocator(NULL);
    assert_true(failed);          /* an allocation was refused ... */
    assert_true(fail_after < 0);  /* ... by the hook, after the first k */
  }
}

/* sc_graph_release runs a block's cleanup once, now, and destroy does not
 * run it again; an unknown pointer is left alone. */
static int released_count;
static void count_release(void *p) {
  released_count++;
  free(p);
}

static void test_graph_release(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("g");
  assert_non_null(g);
  released_count = 0;
  void *a = malloc(64), *b = malloc(64);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(sc_graph_add_cleanup(g, count_release, a), SC_OK);
  assert_int_equal(sc_graph_add_cleanup(g, count_release, b), SC_OK);
  int other = 0;
  assert_false(sc_graph_release(g, &other));
  assert_false(sc_graph_release(g, NULL));
  assert_true(sc_graph_release(g, a));
  assert_int_equal(released_count, 1);
  assert_false(sc_graph_release(g, a)); /* gone: not run twice */
  assert_int_equal(g->n_cleanups, 1);
  sc_graph_destroy(g); /* runs b's only */
  assert_int_equal(released_count, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_release),
      cmocka_unit_test(test_arena),
      cmocka_unit_test(test_diag_format),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_graph_build_and_sort),
      cmocka_unit_test(test_graph_cycle_and_dangling),
      cmocka_unit_test(test_graph_compact),
      cmocka_unit_test(test_bind_dim_and_limits),
      cmocka_unit_test(test_alloc_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
