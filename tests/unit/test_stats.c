/* test_stats.c — the statistics analysis (passes/stats.c) and the public
 * embedding API (include/shardc.h): block-name classification, parameter
 * counting on a hand-built graph, and load/bind/prepare/stats on the MLP
 * sample, with figures worked out by hand from its layer sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "passes/stats.h"
#include "shardc.h"

static void test_block_names(void **state) {
  (void)state;
  /* Node and parameter spellings of the same layer agree. */
  assert_int_equal(sc_stats_block_of_name("transformer.h", "/m/transformer/h.3/attn/MatMul"), 3);
  assert_int_equal(sc_stats_block_of_name("transformer.h", "transformer.h.11.attn.c_attn.weight"), 11);
  assert_int_equal(sc_stats_block_of_name("m.model.layers", "model.layers.1.self_attn.q_proj.weight"), 1);
  /* Not in a block: a path elsewhere, a different prefix, generated names. */
  assert_int_equal(sc_stats_block_of_name("transformer.h", "transformer.wte.weight"), -1);
  assert_int_equal(sc_stats_block_of_name("transformer.h", "/m/transformer/hh.3/Add"), -1);
  assert_int_equal(sc_stats_block_of_name("transformer.h", "onnx::MatMul_296"), -1);
  assert_int_equal(sc_stats_block_of_name("layers", "Mul_814"), -1);
  /* The first component compatible with the key counts, not the first index. */
  assert_int_equal(sc_stats_block_of_name("encoder.layer", "stage.2.encoder.layer.5.out"), 5);
}

/* Two "layers" of MatMul on params named layers.N.weight, plus a head. */
static void test_params_and_blocks(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  int32_t x = sc_graph_add_value(g, "x");
  int64_t xd[2] = {2, 8};
  assert_int_equal(sc_value_set_shape(g, x, SC_DTYPE_F32, 2, xd), SC_OK);
  g->values[x].flags |= SC_VALUE_INPUT;
  assert_int_equal(sc_graph_add_input(g, x), SC_OK);
  const char *wn[3] = {"layers.0.weight", "layers.1.weight", "head.weight"};
  int64_t wd[3][2] = {{8, 8}, {8, 8}, {8, 4}};
  int32_t prev = x;
  for (int i = 0; i < 3; i++) {
    int32_t w = sc_graph_add_value(g, wn[i]);
    assert_int_equal(sc_value_set_shape(g, w, i == 2 ? SC_DTYPE_F16 : SC_DTYPE_F32, 2, wd[i]), SC_OK);
    g->values[w].flags |= SC_VALUE_CONST | SC_VALUE_PARAM; /* data absent */
    int32_t out = sc_graph_add_value(g, NULL);
    int64_t od[2] = {2, wd[i][1]};
    assert_int_equal(sc_value_set_shape(g, out, SC_DTYPE_F32, 2, od), SC_OK);
    int32_t ins[2] = {prev, w};
    char name[64];
    snprintf(name, sizeof name, i < 2 ? "/layers.%d/MatMul" : "/head/MatMul", i);
    assert_true(sc_graph_add_node(g, SC_OP_MATMUL, name, ins, 2, &out, 1) >= 0);
    g->values[out].producer = g->n_nodes - 1;
    prev = out;
  }
  g->values[prev].flags |= SC_VALUE_OUTPUT;
  assert_int_equal(sc_graph_add_output(g, prev), SC_OK);

  sc_stats s;
  assert_int_equal(sc_stats_begin(g, &s), SC_OK);
  assert_int_equal(s.params, 64 + 64 + 32);
  assert_int_equal(s.param_bytes, 64 * 4 + 64 * 4 + 32 * 2);
  assert_int_equal(s.param_bytes_by_dtype[SC_DTYPE_F16], 64);
  assert_int_equal(s.n_nodes_before_fold, 3);
  assert_non_null(s.block_key);
  assert_string_equal(s.block_key, "layers");
  assert_int_equal(sc_stats_finish(g, &s), SC_OK);
  assert_int_equal(s.n_blocks, 2);
  assert_int_equal(s.blocks[0].params, 64);
  assert_int_equal(s.blocks[1].n_nodes, 1);
  assert_int_equal(s.outside.params, 32);
  assert_int_equal(s.outside.n_nodes, 1);
  assert_int_equal(s.op_count[SC_OP_MATMUL], 3);
  sc_stats_free(&s);
  sc_graph_destroy(g);
}

static void test_api_mlp(void **state) {
  (void)state;
  sc_model *m = NULL;
  sc_model_opts o = {.quiet = true};
  assert_int_equal(sc_model_load(SC_SOURCE_DIR "/samples/mlp.onnx", &o, &m), SC_OK);
  assert_string_equal(sc_model_error(m), "");
  assert_int_equal(sc_model_bind_dim(m, "nosuch", 2), SC_ERR_USAGE);
  assert_non_null(strstr(sc_model_error(m), "nosuch"));
  assert_int_equal(sc_model_bind_dim(m, "batch", 4), SC_OK);
  sc_model_info info;
  assert_int_equal(sc_model_stats(m, &info), SC_ERR_USAGE); /* not prepared */
  assert_int_equal(sc_model_prepare(m), SC_OK);
  assert_int_equal(sc_model_stats(m, &info), SC_OK);
  /* 64*128+128 + 128*128+128 + 128*10+10 */
  assert_int_equal(info.params, 26122);
  assert_int_equal(info.param_bytes, 26122 * 4);
  /* docs/ops.md rules at batch 4 (tests/lit/inspect/mlp.test) */
  assert_true(info.flops == 208936.0);
  assert_int_equal(info.nodes, 5);
  assert_int_equal(info.blocks, 0);
  assert_int_equal(info.largest_activation_bytes, 4 * 128 * 4);
  assert_int_equal(sc_model_prepare(m), SC_ERR_USAGE); /* once only */
  sc_model_free(m);

  m = NULL;
  assert_int_not_equal(sc_model_load(SC_SOURCE_DIR "/samples/no-such-model.onnx", NULL, &m), SC_OK);
  assert_non_null(m);
  assert_non_null(strstr(sc_model_error(m), "no-such-model.onnx"));
  sc_model_free(m);
  sc_model_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_names),
      cmocka_unit_test(test_params_and_blocks),
      cmocka_unit_test(test_api_mlp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
