/* test_plan.c — the plan object and its JSON (passes/plan/plan.h).
 *
 * A plan for a small two-layer graph at pp=2,tp=2: write -> read -> write
 * gives identical text, and the fields read back equal those set; strict
 * reading rejects unknown keys, wrong types, bad versions and duplicate keys;
 * validation against the graph names the unknown initializer or node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/plan/plan.h"
#include "test_util.h"

static const char *const GRAPH_IR =
    "shardc.ir 1\n"
    "graph \"g\" opset 17 {\n"
    "  input %x : f32[8,16]\n"
    "  param %w1 : f32[16,32]\n"
    "  param %w2 : f32[32,16]\n"
    "  %h : f32[8,32] = MatMul(%x, %w1) \"h.0/fc1\"\n"
    "  %r : f32[8,32] = Relu(%h) \"h.0/relu\"\n"
    "  %y : f32[8,16] = MatMul(%r, %w2) \"h.1/fc2\"\n"
    "  output %y\n"
    "}\n";

static sc_plan *make_plan(void) {
  sc_plan *p = sc_plan_create();
  assert_non_null(p);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("pp=2,tp=2", &p->mesh, &d), SC_OK);
  p->mesh.ranks_per_node = 4;
  p->tp_axis = sc_plan_strdup(p, "tp");
  p->pp_axis = sc_plan_strdup(p, "pp");
  p->n_stages = 2;
  p->microbatches = 4;
  p->sequence_parallel = true;
  p->expert_tensor_parallel = true;
  static const char *bnd[] = {"h.1/fc2"};
  p->boundaries = bnd;
  p->n_boundaries = 1;
  assert_int_equal(sc_plan_set_override(p, "w1", "[_,tp]", &d), SC_OK);
  assert_int_equal(sc_plan_set_override(p, "w2", "[tp,_]", &d), SC_OK);
  return p;
}

static void test_round_trip(void **state) {
  (void)state;
  sc_graph *g = parse_ok(GRAPH_IR);
  sc_plan *p = make_plan();
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_plan_validate(p, g, &d), SC_OK);
  char *a = sc_plan_write_json_string(p, &d);
  assert_non_null(a);
  sc_plan *q = NULL;
  if (sc_plan_read_json(a, strlen(a), "a.json", g, &q, &d) != SC_OK) fail_msg("%s\n%s", d.msg, a);
  char *b = sc_plan_write_json_string(q, &d);
  assert_string_equal(a, b);
  assert_true(sc_mesh_equal(&p->mesh, &q->mesh));
  assert_string_equal(q->tp_axis, "tp");
  assert_null(q->dp_axis);
  assert_int_equal(q->n_stages, 2);
  assert_int_equal(q->microbatches, 4);
  assert_true(q->sequence_parallel);
  assert_true(q->expert_tensor_parallel);
  assert_int_equal(q->n_boundaries, 1);
  assert_string_equal(q->boundaries[0], "h.1/fc2");
  assert_int_equal(q->n_overrides, 2);
  assert_string_equal(q->overrides[1].name, "w2");
  assert_string_equal(q->overrides[1].sharding, "[tp,_]");
  /* node stages added, and a list of tp blocks */
  q->node_stages = sc_arena_array(&q->arena, 2, sizeof *q->node_stages);
  q->node_stages[0] = (sc_plan_node_stage){"h.0/fc1", 0};
  q->node_stages[1] = (sc_plan_node_stage){"h.1/fc2", 1};
  q->n_node_stages = 2;
  static const char *blocks[] = {"h.0"};
  q->tp_all_blocks = false;
  q->tp_blocks = blocks;
  q->n_tp_blocks = 1;
  char *c = sc_plan_write_json_string(q, &d);
  sc_plan *r = NULL;
  if (sc_plan_read_json(c, strlen(c), "c.json", g, &r, &d) != SC_OK) fail_msg("%s\n%s", d.msg, c);
  char *e = sc_plan_write_json_string(r, &d);
  assert_string_equal(c, e);
  assert_int_equal(r->n_node_stages, 2);
  assert_int_equal(r->node_stages[1].stage, 1);
  assert_false(r->tp_all_blocks);
  assert_string_equal(r->tp_blocks[0], "h.0");
  sc_free(a);
  sc_free(b);
  sc_free(c);
  sc_free(e);
  sc_plan_destroy(p);
  sc_plan_destroy(q);
  sc_plan_destroy(r);
  sc_graph_destroy(g);
}

/* Replaces the first `from` in the written plan with `to`, reads it. */
static void bad_edit(sc_graph *g, const char *from, const char *to, sc_status want,
                     const char *needle) {
  sc_plan *p = make_plan();
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *a = sc_plan_write_json_string(p, &d);
  char *at = strstr(a, from);
  if (!at) fail_msg("'%s' not in\n%s", from, a);
  char buf[8192];
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - a), a, to, at + strlen(from));
  sc_plan *q = NULL;
  sc_diag_clear(&d);
  sc_status st = sc_plan_read_json(buf, strlen(buf), "e.json", g, &q, &d);
  if (st != want || !strstr(d.msg, needle))
    fail_msg("edit '%s'->'%s': %s '%s', want %s '%s'", from, to, sc_status_name(st), d.msg,
             sc_status_name(want), needle);
  assert_null(q);
  sc_free(a);
  sc_plan_destroy(p);
}

static void test_strict(void **state) {
  (void)state;
  sc_graph *g = parse_ok(GRAPH_IR);
  bad_edit(g, "\"version\": 1", "\"version\": 2", SC_ERR_INVALID, "format version 2");
  bad_edit(g, "\"version\": 1", "\"version\": 1, \"colour\": 3", SC_ERR_INVALID,
           "unknown key 'colour'");
  bad_edit(g, "\"microbatches\": 4", "\"microbatches\": 4, \"micro\": 1", SC_ERR_INVALID,
           "unknown key 'pipeline.micro'");
  bad_edit(g, "\"microbatches\": 4", "\"microbatches\": \"4\"", SC_ERR_PARSE,
           "'pipeline.microbatches' must be an integer");
  bad_edit(g, "\"microbatches\": 4", "\"microbatches\": 0", SC_ERR_INVALID, "outside 1..");
  bad_edit(g, "\"w1\"", "\"w9\"", SC_ERR_INVALID, "names 'w9', which is not an initializer");
  bad_edit(g, "\"w1\"", "\"h\"", SC_ERR_INVALID,
           "override of 'h': it is computed by node 'h.0/fc1'; only initializers and graph inputs");
  bad_edit(g, "\"[_,tp]\"", "\"[_,ep]\"", SC_ERR_INVALID, "unknown mesh axis 'ep'");
  bad_edit(g, "\"[_,tp]\"", "\"[tp]\"", SC_ERR_INVALID, "rank 2");
  bad_edit(g, "\"h.1/fc2\"", "\"nope\"", SC_ERR_INVALID, "boundary 'nope' is not a node");
  bad_edit(g, "\"stages\": 2", "\"stages\": 3", SC_ERR_INVALID, "3 pipeline stages");
  bad_edit(g, "\"axis\": \"tp\"", "\"axis\": \"pp\"", SC_ERR_INVALID, "two roles");
  bad_edit(g, "\"axis\": \"tp\"", "\"axis\": \"zz\"", SC_ERR_INVALID, "'zz' is not an axis");
  bad_edit(g, "\"axis\": \"tp\"", "\"axis\": null", SC_ERR_INVALID,
           "expert_tensor_parallel splits the experts over the tensor-parallel axis");
  bad_edit(g, "\"expert_tensor_parallel\": true", "\"expert_tensor_parallel\": 1", SC_ERR_PARSE,
           "'tensor_parallel.expert_tensor_parallel' must be");
  bad_edit(g, "\"gpipe\"", "\"zb\"", SC_ERR_UNSUPPORTED, "schedule 'zb'");
  bad_edit(g, "\"zero_stage\": 0", "\"zero_stage\": 4", SC_ERR_INVALID, "outside 0..3");
  bad_edit(g, "\"recompute\": []", "\"recompute\": [\"ghost\"]", SC_ERR_INVALID,
           "recompute names 'ghost'");
  bad_edit(g, "\"pp=2,tp=2\"", "\"pp=2,tp=0\"", SC_ERR_INVALID, "sizes are >= 1");
  bad_edit(g, "\"node_stages\": {}", "\"node_stages\": {\"h.0/relu\": 2}", SC_ERR_INVALID,
           "stages are 0..1");
  bad_edit(g, "\"node_stages\": {}", "\"node_stages\": {\"a\": 0, \"a\": 1}", SC_ERR_PARSE,
           "duplicate");
  bad_edit(g, "{", "[", SC_ERR_PARSE, "line");
  /* tp=2 does not divide a dim of 15 */
  sc_graph *g2 = parse_ok("shardc.ir 1\ngraph \"g\" opset 17 {\n  param %w1 : f32[16,15]\n"
                          "  param %w2 : f32[4,4]\n  %y = Relu(%w1) \"h.1/fc2\"\n  output %y\n}\n");
  bad_edit(g2, "\"version\": 1", "\"version\": 1", SC_ERR_INVALID, "dim 1 (15) is not divisible");
  sc_graph_destroy(g2);
  /* without a graph, names are not checked but syntax is */
  sc_plan *p = make_plan();
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_plan_set_override(p, "ghost", "[tp,_]", &d), SC_OK);
  assert_int_equal(sc_plan_validate(p, NULL, &d), SC_OK);
  assert_int_equal(sc_plan_validate(p, g, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "'ghost'"));
  sc_plan_destroy(p);
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_strict),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
