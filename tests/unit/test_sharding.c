/* test_sharding.c — shardings (ir/sharding.h) and their textual IR form.
 *
 * Local shapes (checked against dims divided by hand-computed products),
 * divisibility errors naming dim and axes, validity errors, text print/parse
 * round trips, the graph's table through sc_graph_compact, and IR text with a
 * mesh and shard<...> annotations: parse -> print -> parse -> print equal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/sharding.h"
#include "test_util.h"

static sc_mesh mk(const char *spec) {
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_mesh_parse(spec, &m, &d) != SC_OK) fail_msg("%s", d.msg);
  return m;
}

static sc_sharding parse_sh(const sc_mesh *m, const char *t, int32_t rank) {
  sc_sharding s;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_sharding_parse(t, strlen(t), m, rank, &s, &d) != SC_OK) fail_msg("'%s': %s", t, d.msg);
  return s;
}

static void bad_sh(const sc_mesh *m, const char *t, int32_t rank, sc_status want,
                   const char *needle) {
  sc_sharding s;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_sharding_parse(t, strlen(t), m, rank, &s, &d);
  if (st != want || !strstr(d.msg, needle))
    fail_msg("'%s': %s '%s', want %s '%s'", t, sc_status_name(st), d.msg, sc_status_name(want),
             needle);
}

static void test_local_shape(void **state) {
  (void)state;
  sc_mesh m = mk("pp=2,dp=2,tp=4");
  sc_sharding s = parse_sh(&m, "[(dp,tp),_,pp]", 3);
  int64_t dims[3] = {24, 7, 10}, local[3];
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_local_shape(&s, &m, 3, dims, local, "x", &d), SC_OK);
  assert_int_equal(local[0], 24 / (2 * 4));
  assert_int_equal(local[1], 7);
  assert_int_equal(local[2], 10 / 2);
  assert_int_equal(sc_sharding_dim_parts(&s, &m, 0), 8);
  /* 20 is divisible by dp (2) and by tp (4) but not by their product */
  dims[0] = 20;
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_local_shape(&s, &m, 3, dims, local, "x", &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "'x'"));
  assert_non_null(strstr(d.msg, "dim 0 (20)"));
  assert_non_null(strstr(d.msg, "(dp,tp)"));
  dims[0] = 24;
  dims[2] = 9;
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_local_shape(&s, &m, 3, dims, local, "x", &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "dim 2 (9)"));
  assert_non_null(strstr(d.msg, "(pp)"));
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_local_shape(&s, &m, 2, dims, local, "x", &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "rank 2"));
  /* replicated and partial-only: local == global */
  sc_sharding r = parse_sh(&m, "[_,_] partial(tp)", 2);
  int64_t d2[2] = {5, 3}, l2[2];
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_local_shape(&r, &m, 2, d2, l2, NULL, &d), SC_OK);
  assert_int_equal(l2[0], 5);
  assert_int_equal(l2[1], 3);
  assert_false(sc_sharding_is_replicated(&r));
  sc_sharding rep;
  sc_sharding_replicated(&rep, 2);
  assert_true(sc_sharding_is_replicated(&rep));
}

static void test_text(void **state) {
  (void)state;
  sc_mesh m = mk("pp=2,dp=2,tp=2");
  const char *canon[] = {"[dp,_]", "[(dp,tp),_]", "[dp,_] partial(tp)", "[] partial(pp,tp)",
                         "[]", "[_,_,_]", "[(tp,dp),pp]"};
  for (size_t i = 0; i < sizeof canon / sizeof *canon; i++) {
    sc_sharding s = parse_sh(&m, canon[i], -1);
    char buf[256];
    size_t n = sc_sharding_format(&s, &m, buf, sizeof buf);
    assert_int_equal(n, strlen(canon[i]));
    assert_string_equal(buf, canon[i]);
    sc_sharding s2 = parse_sh(&m, buf, s.rank);
    assert_true(sc_sharding_equal(&s, &s2));
  }
  /* non-canonical spellings print canonically */
  sc_sharding s = parse_sh(&m, " [ (dp) , _ ]  partial( tp , pp ) ", 2);
  char buf[256];
  sc_sharding_format(&s, &m, buf, sizeof buf);
  assert_string_equal(buf, "[dp,_] partial(pp,tp)");
  /* order on a dim matters */
  sc_sharding a = parse_sh(&m, "[(dp,tp)]", 1), b = parse_sh(&m, "[(tp,dp)]", 1);
  assert_false(sc_sharding_equal(&a, &b));
  /* built through the API */
  sc_sharding c;
  sc_sharding_replicated(&c, 2);
  sc_sharding_split(&c, 0, 1);
  sc_sharding_split(&c, 0, 2);
  c.partial = 1;
  sc_sharding_format(&c, &m, buf, sizeof buf);
  assert_string_equal(buf, "[(dp,tp),_] partial(pp)");
  assert_int_equal(sc_sharding_dim_axes(&c), 6);
}

static void test_errors(void **state) {
  (void)state;
  sc_mesh m = mk("pp=2,dp=2,tp=2");
  bad_sh(&m, "[dp,dp]", -1, SC_ERR_INVALID, "'dp' splits more than one dim");
  bad_sh(&m, "[(tp,tp)]", -1, SC_ERR_INVALID, "'tp' splits more than one dim");
  bad_sh(&m, "[(dp,tp),_] partial(tp)", -1, SC_ERR_INVALID, "'tp' both splits a dim and is partial");
  bad_sh(&m, "[ep,_]", -1, SC_ERR_INVALID, "unknown mesh axis 'ep'");
  bad_sh(&m, "[] partial(tp,tp)", -1, SC_ERR_INVALID, "partial twice");
  bad_sh(&m, "[dp,_]", 3, SC_ERR_INVALID, "has 2 dims; the value has rank 3");
  bad_sh(&m, "dp,_", -1, SC_ERR_PARSE, "expected '['");
  bad_sh(&m, "[dp,_", -1, SC_ERR_PARSE, "expected ',' or ']'");
  bad_sh(&m, "[dp] extra", -1, SC_ERR_PARSE, "expected 'partial");
  bad_sh(&m, "[dp] partial(tp) x", -1, SC_ERR_PARSE, "unexpected text");
  bad_sh(&m, "[(dp,)]", -1, SC_ERR_PARSE, "expected a mesh axis name");
  bad_sh(&m, "[_,_,_,_,_,_,_,_,_]", -1, SC_ERR_PARSE, "more than 8 dims");
  sc_sharding s;
  sc_sharding_replicated(&s, 1);
  sc_sharding_split(&s, 0, 5); /* the mesh has 3 axes */
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_sharding_validate(&s, &m, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "uses axis 5"));
}

static void test_table_compact(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  int64_t dims[2] = {8, 4};
  int32_t ids[5];
  for (int i = 0; i < 5; i++) {
    ids[i] = sc_graph_add_value(g, NULL);
    assert_int_equal(sc_value_set_shape(g, ids[i], SC_DTYPE_F32, 2, dims), SC_OK);
  }
  sc_sharding s;
  sc_sharding_replicated(&s, 2);
  assert_int_equal(sc_graph_set_sharding(g, ids[1], &s), SC_ERR_USAGE);
  sc_diag_clear(&g->diag);
  sc_mesh m = mk("dp=2,tp=2");
  assert_null(sc_graph_mesh(g));
  assert_int_equal(sc_graph_attach_mesh(g, &m), SC_OK);
  assert_true(sc_mesh_equal(sc_graph_mesh(g), &m));
  sc_sharding a = parse_sh(&m, "[dp,_]", 2), b = parse_sh(&m, "[_,tp] partial(dp)", 2);
  assert_int_equal(sc_graph_set_sharding(g, ids[1], &a), SC_OK);
  assert_int_equal(sc_graph_set_sharding(g, ids[3], &b), SC_OK);
  sc_sharding bad = parse_sh(&m, "[dp]", 1);
  assert_int_equal(sc_graph_set_sharding(g, ids[4], &bad), SC_ERR_INVALID);
  sc_diag_clear(&g->diag);
  assert_null(sc_graph_sharding(g, ids[0]));
  assert_null(sc_graph_sharding(g, ids[4]));
  g->values[ids[0]].flags |= SC_VALUE_DEAD;
  g->values[ids[2]].flags |= SC_VALUE_DEAD;
  assert_int_equal(sc_graph_compact(g), SC_OK);
  assert_int_equal(g->n_values, 3);
  /* old 1 -> 0, old 3 -> 1, old 4 -> 2 */
  assert_non_null(sc_graph_sharding(g, 0));
  assert_true(sc_sharding_equal(sc_graph_sharding(g, 0), &a));
  assert_true(sc_sharding_equal(sc_graph_sharding(g, 1), &b));
  assert_null(sc_graph_sharding(g, 2));
  assert_int_equal(sc_graph_set_sharding(g, 0, NULL), SC_OK);
  assert_null(sc_graph_sharding(g, 0));
  sc_graph_destroy(g);
}

static const char *const SHARDED_IR =
    "shardc.ir 1\n"
    "graph \"main\" opset 17 {\n"
    "  mesh [pp=2, dp=2, tp=2] ranks_per_node 4\n"
    "  input %x : f32[batch=8,64] shard<[dp,_]>\n"
    "  input %y : f32[8,64]\n"
    "  param %w : f32[64,32] shard<[_,tp]>\n"
    "  const %s : i64[2] shard<[_]> = [8, -1]\n"
    "  %h : f32[8,32] shard<[dp,tp]> = MatMul(%x, %w) \"fc1\"\n"
    "  %a : f32[8,16] shard<[(dp,tp),_] partial(pp)>, %b : f32[8,16] = Split(%h) {axis = 1, num_outputs = 2} \"split0\"\n"
    "  %c = Relu(%a) \"relu\"\n"
    "  output %c\n"
    "}\n";

static void test_ir_round_trip(void **state) {
  (void)state;
  sc_graph *g = parse_ok(SHARDED_IR);
  assert_non_null(g->shardings);
  assert_int_equal(sc_graph_mesh(g)->ranks_per_node, 4);
  assert_int_equal(sc_graph_mesh(g)->n_ranks, 8);
  const sc_mesh *m = sc_graph_mesh(g);
  sc_sharding want = parse_sh(m, "[(dp,tp),_] partial(pp)", 2);
  const sc_sharding *got = sc_graph_sharding(g, sc_graph_find_value(g, "a"));
  assert_non_null(got);
  assert_true(sc_sharding_equal(got, &want));
  assert_null(sc_graph_sharding(g, sc_graph_find_value(g, "b")));
  assert_null(sc_graph_sharding(g, sc_graph_find_value(g, "y")));
  char *t1 = sc_ir_print_string(g);
  assert_string_equal(t1, SHARDED_IR);
  sc_graph *g2 = parse_ok(t1);
  char *t2 = sc_ir_print_string(g2);
  assert_string_equal(t1, t2);
  sc_free(t1);
  sc_free(t2);
  sc_graph_destroy(g2);
  sc_graph_destroy(g);
  /* a mesh with no shardings and no ranks_per_node */
  const char *plain = "shardc.ir 1\ngraph \"g\" opset 17 {\n  mesh [tp=4]\n  input %x : f32[4]\n  output %x\n}\n";
  g = parse_ok(plain);
  t1 = sc_ir_print_string(g);
  assert_string_equal(t1, plain);
  sc_free(t1);
  sc_graph_destroy(g);
}

static void ir_bad(const char *body, const char *needle) {
  char text[2048];
  snprintf(text, sizeof text, "shardc.ir 1\ngraph \"g\" opset 17 {\n%s}\n", body);
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_status st = sc_ir_parse(text, strlen(text), "t.ir", &g, &d);
  if (st == SC_OK || !strstr(d.msg, needle))
    fail_msg("'%s': %s '%s', want '%s'", body, sc_status_name(st), d.msg, needle);
  assert_null(g);
}

static void test_ir_errors(void **state) {
  (void)state;
  ir_bad("  input %x : f32[4] shard<[tp]>\n", "needs a 'mesh' statement");
  ir_bad("  mesh [tp=4]\n  input %x : f32[6] shard<[tp]>\n", "not divisible");
  ir_bad("  mesh [tp=4]\n  input %x : f32[4,4] shard<[tp]>\n", "has 1 dims; the value has rank 2");
  ir_bad("  mesh [tp=4]\n  input %x : f32[4] shard<[dp]>\n", "unknown mesh axis 'dp'");
  ir_bad("  mesh [tp=4]\n  input %x : f32[4] shard<[tp]\n", "missing '>'");
  ir_bad("  mesh [tp=4]\n  mesh [dp=2]\n", "second 'mesh'");
  ir_bad("  mesh [tp=0]\n", "sizes are >= 1");
  ir_bad("  mesh [tp=2, tp=2]\n", "appears twice");
  ir_bad("  mesh [tp=2] ranks_per_node 0\n", "ranks_per_node 0");
}

/* A graph without a mesh prints exactly as before (no mesh line, no shard). */
static void test_ir_unsharded_unchanged(void **state) {
  (void)state;
  const char *t = "shardc.ir 1\ngraph \"g\" opset 17 {\n  input %x : f32[4]\n  %y : f32[4] = Relu(%x) \"r\"\n  output %y\n}\n";
  sc_graph *g = parse_ok(t);
  assert_null(g->shardings);
  char *p = sc_ir_print_string(g);
  assert_string_equal(p, t);
  sc_free(p);
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_shape),   cmocka_unit_test(test_text),
      cmocka_unit_test(test_errors),        cmocka_unit_test(test_table_compact),
      cmocka_unit_test(test_ir_round_trip), cmocka_unit_test(test_ir_errors),
      cmocka_unit_test(test_ir_unsharded_unchanged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
