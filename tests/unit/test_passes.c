/* test_passes.c — the pass manager and the canonical passes (bind-dims,
 * infer-shapes, fold, fuse-norm, dce), scatter-sum and the IR verifier.
 *
 * Graphs are written as textual IR (parsed by ir/parse.c) or built through
 * the graph API when the test needs a graph the parser would refuse (a broken
 * one for the verifier). Expected shapes and values are worked out by hand
 * from the inputs the tests choose. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/compile.h"
#include "passes/pass.h"
#include "test_util.h"

static void run_passes_ok(sc_graph *g, const char *passes, const sc_pass_opts *po) {
  if (sc_run_passes(g, passes, po) != SC_OK) {
    char buf[2048];
    sc_diag_format(&g->diag, buf, sizeof buf);
    fail_msg("passes %s: %s", passes, buf);
  }
}

static void quiet_opts(sc_pass_opts *po) {
  sc_pass_opts_init(po);
  po->quiet = true;
  po->verify = true;
}

static int count_op(sc_graph *g, sc_op op) {
  int k = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == op;
  return k;
}

/* x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
 * With batch bound to 3 and x f32[3,4,5] the shape folds to [3, -1] and
 * only the Reshape is left, with output f32[3,20]. */
static const char *const SHAPE_CHAIN =
    "shardc.ir 1\n"
    "graph \"main\" opset 17 {\n"
    "  input %x : f32[batch=?,4,5]\n"
    "  const %zero : i64[] = [0]\n"
    "  const %axes : i64[1] = [0]\n"
    "  const %minus1 : i64[1] = [-1]\n"
    "  %s = Shape(%x) \"shape\"\n"
    "  %b = Gather(%s, %zero) {axis = 0} \"gather\"\n"
    "  %bu = Unsqueeze(%b, %axes) \"unsqueeze\"\n"
    "  %shape = Concat(%bu, %minus1) {axis = 0} \"concat\"\n"
    "  %y = Reshape(%x, %shape) \"reshape\"\n"
    "  output %y\n"
    "}\n";

static void test_fold_shape_chain(void **state) {
  (void)state;
  sc_graph *g = parse_ok(SHAPE_CHAIN);
  assert_int_equal(sc_graph_bind_dim(g, "batch", 3), 1);
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, SC_CANONICAL_PASSES, &po);
  assert_int_equal(g->n_nodes, 1);
  const sc_node *n = sc_nod(g, 0);
  assert_int_equal(n->op, SC_OP_RESHAPE);
  const sc_value *shape = sc_node_input(g, n, 1);
  assert_true(sc_value_has_data(shape));
  assert_int_equal(shape->producer, -1);
  assert_int_equal(sc_value_numel(shape), 2);
  assert_int_equal(((const int64_t *)shape->data)[0], 3);
  assert_int_equal(((const int64_t *)shape->data)[1], -1);
  const sc_value *y = sc_node_output(g, n, 0);
  assert_int_equal(y->rank, 2);
  assert_int_equal(y->dims[0], 3);
  assert_int_equal(y->dims[1], 20);
  /* the index constants were read only by folded nodes: dce dropped them */
  assert_int_equal(sc_graph_find_value(g, "zero"), -1);
  assert_int_equal(sc_graph_find_value(g, "minus1"), -1);
  assert_int_equal(g->n_values, 3); /* x, shape, y */
  assert_int_equal(sc_graph_verify(g, true), SC_OK);
  sc_graph_destroy(g);
}

/* infer-shapes alone evaluates but keeps the nodes; fold then removes them. */
static void test_infer_then_fold(void **state) {
  (void)state;
  sc_graph *g = parse_ok(SHAPE_CHAIN);
  sc_graph_bind_dim(g, "batch", 7);
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, "bind-dims,infer-shapes", &po);
  assert_int_equal(g->n_nodes, 5);
  const sc_value *shape = sc_val(g, sc_graph_find_value(g, "shape"));
  assert_true(sc_value_has_data(shape));
  assert_true(shape->producer >= 0); /* still produced by Concat */
  assert_int_equal(((const int64_t *)shape->data)[0], 7);
  run_passes_ok(g, "fold", &po);
  assert_int_equal(g->n_nodes, 1);
  assert_int_equal(count_op(g, SC_OP_CONCAT), 0);
  /* fold keeps the now-unused constants; dce removes them */
  assert_true(sc_graph_find_value(g, "zero") >= 0);
  run_passes_ok(g, "dce", &po);
  assert_int_equal(sc_graph_find_value(g, "zero"), -1);
  sc_graph_destroy(g);
}

/* fold alone (no infer-shapes first) evaluates nodes whose output shapes are
 * known; a graph output that becomes constant stays a graph output. Values:
 * (1.5 + 2.5) * 2 = 8, (2 + 4) * 2 = 12. */
static void test_fold_output_becomes_const(void **state) {
  (void)state;
  sc_graph *g = parse_ok("shardc.ir 1\ngraph \"g\" opset 17 {\n"
                      "  input %x : f32[2]\n"
                      "  const %a : f32[2] = [1.5, 2.0]\n"
                      "  const %b : f32[2] = [2.5, 4.0]\n"
                      "  const %two : f32[] = [2.0]\n"
                      "  %c : f32[2] = Add(%a, %b) \"add\"\n"
                      "  %d : f32[2] = Mul(%c, %two) \"mul\"\n"
                      "  %e : f32[2] = Relu(%x) \"relu\"\n"
                      "  output %d\n"
                      "  output %e\n"
                      "}\n");
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, "fold,dce", &po);
  assert_int_equal(g->n_nodes, 1);
  assert_int_equal(sc_nod(g, 0)->op, SC_OP_RELU);
  assert_int_equal(g->n_outputs, 2);
  const sc_value *d = sc_val(g, g->outputs[0]);
  assert_string_equal(d->name, "d");
  assert_true(d->flags & SC_VALUE_OUTPUT);
  assert_true(sc_value_has_data(d));
  assert_true(((const float *)d->data)[0] == 8.0f);
  assert_true(((const float *)d->data)[1] == 12.0f);
  assert_int_equal(sc_graph_find_value(g, "a"), -1);
  char *text = sc_ir_print_string(g);
  assert_non_null(strstr(text, "const %d : f32[2] = [8.0, 12.0]"));
  assert_non_null(strstr(text, "output %d\n"));
  sc_free(text);
  sc_graph_destroy(g);
}

/* dce: unused branches and constants go, unused graph inputs stay, every
 * output of a live node stays. Built through the API. */
/* scatter-sum: y = Add(x, Identity(ScatterND(zeros, i, u, add))) becomes
 * y = ScatterND(x, i, u, add); the zeros (Expand, then a Mul by a finite
 * scalar as the partitioner writes a pending sum's share), the Identity
 * and the first scatter are removed. %KEEP stands for what must keep the
 * rewrite from happening. */
static sc_graph *scatter_sum_graph(const char *keep) {
  char text[2048];
  snprintf(text, sizeof text,
           "shardc.ir 1\ngraph \"g\" opset 17 {\n"
           "  input %%x : f32[6,3]\n"
           "  input %%i : i64[4,1]\n"
           "  input %%u : f32[4,3]\n"
           "  input %%b : f32[1,3]\n"
           "  const %%zero : f32[] = [0.0]\n"
           "  const %%two : f32[] = [%s]\n"
           "  const %%shape : i64[2] = [6, 3]\n"
           "  %%z = Expand(%%zero, %%shape) \"expand\"\n"
           "  %%z2 = Mul(%%z, %%two) \"scale\"\n"
           "  %%s = ScatterND(%%z2, %%i, %%u) {reduction = \"%s\"} \"scatter\"\n"
           "  %%s1 = Identity(%%s) \"id\"\n"
           "  %%y = Add(%s, %%s1) \"sum\"\n"
           "  output %%y\n%s"
           "}\n",
           strcmp(keep, "nan") == 0 ? "nan" : "2.0", strcmp(keep, "none") == 0 ? "none" : "add",
           strcmp(keep, "broadcast") == 0 ? "%b" : "%x",
           strcmp(keep, "x read twice") == 0 ? "  output %x\n" : "");
  return parse_ok(text);
}

static void test_scatter_sum(void **state) {
  (void)state;
  sc_pass_opts po;
  quiet_opts(&po);
  sc_graph *g = scatter_sum_graph("");
  run_passes_ok(g, "infer-shapes,scatter-sum", &po);
  assert_int_equal(g->n_nodes, 1);
  const sc_node *n = sc_nod(g, 0);
  assert_int_equal(n->op, SC_OP_SCATTER_ND);
  assert_string_equal(sc_attr_string(g, n, "reduction", ""), "add");
  assert_int_equal(n->n_inputs, 3);
  assert_int_equal(n->inputs[0], sc_graph_find_value(g, "x"));
  assert_int_equal(n->inputs[1], sc_graph_find_value(g, "i"));
  assert_int_equal(n->inputs[2], sc_graph_find_value(g, "u"));
  assert_int_equal(n->outputs[0], sc_graph_find_value(g, "y"));
  assert_int_equal(g->outputs[0], n->outputs[0]);
  assert_int_equal(sc_graph_find_value(g, "z"), -1);
  assert_int_equal(sc_graph_find_value(g, "s"), -1);
  assert_int_equal(sc_graph_find_value(g, "zero"), -1);
  assert_int_equal(sc_graph_verify(g, true), SC_OK);
  sc_graph_destroy(g);
  /* x read elsewhere too (adding in its storage would change what that
   * reads), a scatter that replaces rows, zeros times NaN (not zeros), a
   * sum that broadcasts: left as they are */
  const char *keep[] = {"x read twice", "none", "nan", "broadcast"};
  for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
    g = scatter_sum_graph(keep[k]);
    run_passes_ok(g, "infer-shapes,scatter-sum", &po);
    assert_int_equal(g->n_nodes, 5);
    assert_int_equal(count_op(g, SC_OP_ADD), 1);
    assert_int_equal(count_op(g, SC_OP_SCATTER_ND), 1);
    sc_graph_destroy(g);
  }
}

static void test_dce(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("dce");
  int32_t x = sc_graph_add_value(g, "x"), unused_in = sc_graph_add_value(g, "unused_in");
  int32_t w = sc_graph_add_value(g, "w"), c = sc_graph_add_value(g, "c");
  int32_t h = sc_graph_add_value(g, "h"), t = sc_graph_add_value(g, "t");
  int32_t a = sc_graph_add_value(g, "a"), b = sc_graph_add_value(g, "b");
  sc_value_set_shape(g, x, SC_DTYPE_F32, 2, (int64_t[]){2, 8});
  sc_value_set_shape(g, unused_in, SC_DTYPE_F32, 1, (int64_t[]){3});
  sc_value_set_data(g, w, SC_DTYPE_F32, 2, (int64_t[]){8, 8}, NULL, 0, false);
  float cdata[2] = {0.25f, -3.0f};
  sc_value_set_data(g, c, SC_DTYPE_F32, 1, (int64_t[]){2}, cdata, sizeof cdata, true);
  sc_graph_add_input(g, x);
  sc_graph_add_input(g, unused_in);
  sc_graph_add_node(g, SC_OP_MATMUL, "mm", (int32_t[]){x, w}, 2, &h, 1);
  sc_graph_add_node(g, SC_OP_TANH, "dead_tanh", &h, 1, &t, 1);
  sc_graph_add_node(g, SC_OP_SPLIT, "split", &h, 1, (int32_t[]){a, b}, 2);
  sc_graph_add_output(g, a);
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, "dce", &po);
  assert_int_equal(g->n_nodes, 2);
  assert_int_equal(count_op(g, SC_OP_TANH), 0);
  assert_int_equal(g->n_inputs, 2);
  assert_true(sc_graph_find_value(g, "unused_in") >= 0);
  assert_int_equal(sc_graph_find_value(g, "c"), -1);
  assert_int_equal(sc_graph_find_value(g, "t"), -1);
  assert_true(sc_graph_find_value(g, "b") >= 0); /* Split keeps its arity */
  assert_int_equal(sc_nod(g, 1)->n_outputs, 2);
  assert_int_equal(sc_graph_verify(g, false), SC_OK);
  sc_graph_destroy(g);
}

/* A small valid graph: x -> Relu -> r -> Neg -> y. */
static sc_graph *small_graph(int32_t *r_out) {
  sc_graph *g = sc_graph_create("v");
  int32_t x = sc_graph_add_value(g, "x"), r = sc_graph_add_value(g, "r");
  int32_t y = sc_graph_add_value(g, "y");
  sc_value_set_shape(g, x, SC_DTYPE_F32, 1, (int64_t[]){4});
  sc_graph_add_input(g, x);
  sc_graph_add_node(g, SC_OP_RELU, "relu", &x, 1, &r, 1);
  sc_graph_add_node(g, SC_OP_NEG, "neg", &r, 1, &y, 1);
  sc_graph_add_output(g, y);
  if (r_out) *r_out = r;
  return g;
}

static void expect_invalid(sc_graph *g, bool shapes, const char *node, const char *what) {
  sc_diag_clear(&g->diag);
  assert_int_equal(sc_graph_verify(g, shapes), SC_ERR_INVALID);
  if (node) assert_string_equal(g->diag.node, node);
  if (!strstr(g->diag.msg, what)) fail_msg("'%s' lacks '%s'", g->diag.msg, what);
}

static void test_verifier(void **state) {
  (void)state;
  int32_t r;
  sc_graph *g = small_graph(&r);
  assert_int_equal(sc_graph_verify(g, false), SC_OK);
  /* shapes not inferred yet */
  expect_invalid(g, true, "relu", "output 'r' has no dtype");

  /* wrong order: swap the two nodes */
  sc_node tmp = g->nodes[0];
  g->nodes[0] = g->nodes[1];
  g->nodes[1] = tmp;
  g->values[r].producer = 1;
  g->values[sc_graph_find_value(g, "y")].producer = 0;
  expect_invalid(g, false, "neg", "not in topological order");
  sc_graph_destroy(g);

  /* duplicate producer: a second node writes r */
  g = small_graph(&r);
  int32_t x = sc_graph_find_value(g, "x");
  sc_graph_add_node(g, SC_OP_ABS, "abs", &x, 1, &r, 1);
  expect_invalid(g, false, "relu", "also produced by node 'abs'");
  sc_graph_destroy(g);

  /* dead flag left behind */
  g = small_graph(NULL);
  g->nodes[1].flags |= SC_NODE_DEAD;
  expect_invalid(g, false, "neg", "not compacted");
  sc_graph_destroy(g);

  /* data size disagreeing with the shape */
  g = small_graph(NULL);
  int32_t c = sc_graph_add_value(g, "c");
  int64_t cd[3] = {1, 2, 3};
  sc_value_set_data(g, c, SC_DTYPE_I64, 1, (int64_t[]){3}, cd, sizeof cd, true);
  g->values[c].dims[0] = 2;
  expect_invalid(g, false, NULL, "constant 'c' has 24 data bytes; its shape needs 16");
  sc_graph_destroy(g);

  /* arity beyond the ops table */
  g = small_graph(NULL);
  g->nodes[0].n_inputs = 0;
  expect_invalid(g, false, "relu", "0 inputs");
  sc_graph_destroy(g);

  /* duplicate node names */
  g = small_graph(NULL);
  g->nodes[1].name = "relu";
  expect_invalid(g, false, "relu", "node name used by nodes 0 and 1");
  sc_graph_destroy(g);

  /* an input nobody defines */
  g = small_graph(NULL);
  int32_t ghost = sc_graph_add_value(g, "ghost");
  g->nodes[1].inputs[0] = ghost;
  expect_invalid(g, false, "neg", "'ghost' is not produced by any node");
  sc_graph_destroy(g);
}

/* A Hugging Face LlamaRMSNorm as torch.onnx writes it at opset 17, with a
 * second, already-x/s form beside it; and three chains that must stay:
 * a mean over another axis, an intermediate that is a graph output, and no
 * product by a weight. */
static const char *const RMS_CHAINS =
    "shardc.ir 1\n"
    "graph \"main\" opset 17 {\n"
    "  input %x : f32[2,3,8]\n"
    "  input %w : f32[8]\n"
    "  const %two : f32[] = [2.0]\n"
    "  const %eps : f32[] = [1e-6]\n"
    "  const %one : f32[] = [1.0]\n"
    "  %p = Pow(%x, %two)\n"
    "  %m = ReduceMean(%p) {axes = [-1], keepdims = 1}\n"
    "  %a = Add(%m, %eps)\n"
    "  %s = Sqrt(%a)\n"
    "  %r = Div(%one, %s)\n"
    "  %n = Mul(%x, %r)\n"
    "  %c = Cast(%n) {to = 1}\n"
    "  %y = Mul(%w, %c) \"hf\"\n"
    "  %p2 = Mul(%y, %y)\n"
    "  %m2 = ReduceMean(%p2) {axes = [2]}\n"
    "  %a2 = Add(%eps, %m2)\n"
    "  %s2 = Sqrt(%a2)\n"
    "  %n2 = Div(%y, %s2)\n"
    "  %y2 = Mul(%n2, %w) \"xs\"\n"
    "  %p3 = Pow(%x, %two)\n"
    "  %m3 = ReduceMean(%p3) {axes = [1], keepdims = 1}\n"
    "  %a3 = Add(%m3, %eps)\n"
    "  %s3 = Sqrt(%a3)\n"
    "  %n3 = Div(%x, %s3)\n"
    "  %y3 = Mul(%n3, %n3)\n"
    "  %p4 = Pow(%x, %two)\n"
    "  %m4 = ReduceMean(%p4) {axes = [-1]}\n"
    "  %a4 = Add(%m4, %eps)\n"
    "  %s4 = Sqrt(%a4)\n"
    "  %n4 = Div(%x, %s4)\n"
    "  %y4 = Mul(%n4, %w)\n"
    "  %p5 = Pow(%x, %two)\n"
    "  %m5 = ReduceMean(%p5) {axes = [-1]}\n"
    "  %a5 = Add(%m5, %eps)\n"
    "  %s5 = Sqrt(%a5)\n"
    "  %y5 = Div(%x, %s5)\n"
    "  output %y2\n"
    "  output %y3\n"
    "  output %y4\n"
    "  output %s4\n"
    "  output %y5\n"
    "}\n";

static void test_fuse_norm(void **state) {
  (void)state;
  sc_graph *g = parse_ok(RMS_CHAINS);
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, SC_CANONICAL_PASSES, &po);
  assert_int_equal(count_op(g, SC_OP_RMS_NORM), 2);
  /* the two fused ones took the weight products' places, in order */
  int32_t hf = -1, xs = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (strcmp(g->nodes[i].name, "hf") == 0) hf = i;
    if (strcmp(g->nodes[i].name, "xs") == 0) xs = i;
  }
  assert_true(hf >= 0 && xs > hf);
  for (int32_t k = 0; k < 2; k++) {
    const sc_node *n = sc_nod(g, k == 0 ? hf : xs);
    assert_int_equal(n->op, SC_OP_RMS_NORM);
    assert_string_equal(sc_node_input(g, n, 0)->name, k == 0 ? "x" : "y");
    assert_string_equal(sc_node_input(g, n, 1)->name, "w");
    assert_float_equal(sc_attr_float(g, n, "epsilon", 0), (double)1e-6f, 1e-12);
    assert_int_equal(sc_attr_int(g, n, "axis", 0), -1);
  }
  /* left alone: the mean over axis 1 (y3), the chain whose Sqrt is an
   * output (y4) and the one with no weight (y5): 3 ReduceMeans, 3 Sqrts */
  assert_int_equal(count_op(g, SC_OP_REDUCE_MEAN), 3);
  assert_int_equal(count_op(g, SC_OP_SQRT), 3);
  assert_int_equal(count_op(g, SC_OP_POW), 3);
  sc_graph_destroy(g);
}

/* GELUs written out: GPT-2's gelu_new as exported (g1); x·x·x, √(2/π)
 * distributed over the sum and 0.5 applied last (g2); the erf form with a
 * Div by √2 (g3); the importer's FastGelu, its constants CastLike x (g7).
 * Left as written: 0.05 for 0.044715 (g4), the Tanh's value a graph output
 * (g5), x³ read by another node too (g6). */
static const char *const GELU_CHAINS =
    "shardc.ir 1\n"
    "graph \"main\" opset 17 {\n"
    "  input %x1 : f32[2,8]\n"
    "  input %x2 : f32[2,8]\n"
    "  input %x3 : f32[2,8]\n"
    "  input %x4 : f32[2,8]\n"
    "  input %x5 : f32[2,8]\n"
    "  input %x6 : f32[2,8]\n"
    "  input %x7 : f32[2,8]\n"
    "  const %three : f32[] = [3.0]\n"
    "  const %c : f32[] = [0.044715]\n"
    "  const %c4 : f32[] = [0.05]\n"
    "  const %k : f32[] = [0.7978845608]\n"
    "  const %kc : f32[] = [0.0356774081]\n"
    "  const %one : f32[] = [1.0]\n"
    "  const %half : f32[] = [0.5]\n"
    "  const %sqrt2 : f32[] = [1.4142135624]\n"
    "  %p1 = Pow(%x1, %three)\n"
    "  %m1 = Mul(%p1, %c)\n"
    "  %i1 = Add(%x1, %m1)\n"
    "  %u1 = Mul(%i1, %k)\n"
    "  %t1 = Tanh(%u1)\n"
    "  %a1 = Add(%t1, %one)\n"
    "  %h1 = Mul(%x1, %half)\n"
    "  %y1 = Mul(%h1, %a1) \"g1\"\n"
    "  %q2 = Mul(%x2, %x2)\n"
    "  %p2 = Mul(%x2, %q2)\n"
    "  %m2 = Mul(%kc, %p2)\n"
    "  %l2 = Mul(%k, %x2)\n"
    "  %u2 = Add(%m2, %l2)\n"
    "  %t2 = Tanh(%u2)\n"
    "  %a2 = Add(%one, %t2)\n"
    "  %h2 = Mul(%a2, %x2)\n"
    "  %y2 = Mul(%half, %h2) \"g2\"\n"
    "  %d3 = Div(%x3, %sqrt2)\n"
    "  %e3 = Erf(%d3)\n"
    "  %a3 = Add(%e3, %one)\n"
    "  %h3 = Mul(%x3, %a3)\n"
    "  %y3 = Mul(%h3, %half) \"g3\"\n"
    "  %p4 = Pow(%x4, %three)\n"
    "  %m4 = Mul(%p4, %c4)\n"
    "  %i4 = Add(%x4, %m4)\n"
    "  %u4 = Mul(%i4, %k)\n"
    "  %t4 = Tanh(%u4)\n"
    "  %a4 = Add(%t4, %one)\n"
    "  %h4 = Mul(%x4, %half)\n"
    "  %y4 = Mul(%h4, %a4)\n"
    "  %p5 = Pow(%x5, %three)\n"
    "  %m5 = Mul(%p5, %c)\n"
    "  %i5 = Add(%x5, %m5)\n"
    "  %u5 = Mul(%i5, %k)\n"
    "  %t5 = Tanh(%u5)\n"
    "  %a5 = Add(%t5, %one)\n"
    "  %h5 = Mul(%x5, %half)\n"
    "  %y5 = Mul(%h5, %a5)\n"
    "  %p6 = Pow(%x6, %three)\n"
    "  %m6 = Mul(%p6, %c)\n"
    "  %i6 = Add(%x6, %m6)\n"
    "  %u6 = Mul(%i6, %k)\n"
    "  %t6 = Tanh(%u6)\n"
    "  %a6 = Add(%t6, %one)\n"
    "  %h6 = Mul(%x6, %half)\n"
    "  %y6 = Mul(%h6, %a6)\n"
    "  %z6 = Add(%p6, %y6)\n"
    "  %q7 = Mul(%x7, %x7)\n"
    "  %p7 = Mul(%q7, %x7)\n"
    "  %c7 = CastLike(%c, %x7)\n"
    "  %m7 = Mul(%p7, %c7)\n"
    "  %i7 = Add(%x7, %m7)\n"
    "  %k7 = CastLike(%k, %x7)\n"
    "  %u7 = Mul(%i7, %k7)\n"
    "  %t7 = Tanh(%u7)\n"
    "  %half7 = CastLike(%half, %x7)\n"
    "  %h7 = Mul(%x7, %half7)\n"
    "  %one7 = CastLike(%one, %x7)\n"
    "  %a7 = Add(%t7, %one7)\n"
    "  %y7 = Mul(%h7, %a7) \"g7\"\n"
    "  output %y1\n"
    "  output %y2\n"
    "  output %y3\n"
    "  output %y4\n"
    "  output %y5\n"
    "  output %t5\n"
    "  output %z6\n"
    "  output %y7\n"
    "}\n";

static void test_fuse_gelu(void **state) {
  (void)state;
  sc_graph *g = parse_ok(GELU_CHAINS);
  sc_pass_opts po;
  quiet_opts(&po);
  run_passes_ok(g, SC_CANONICAL_PASSES, &po);
  assert_int_equal(count_op(g, SC_OP_GELU), 4);
  static const char *const names[4] = {"g1", "g2", "g3", "g7"},
                           *const xs[4] = {"x1", "x2", "x3", "x7"};
  for (int k = 0; k < 4; k++) {
    int32_t id = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
      if (strcmp(g->nodes[i].name, names[k]) == 0) id = i;
    assert_true(id >= 0);
    const sc_node *n = sc_nod(g, id);
    assert_int_equal(n->op, SC_OP_GELU);
    assert_int_equal(n->n_inputs, 1);
    assert_string_equal(sc_node_input(g, n, 0)->name, xs[k]);
    assert_string_equal(sc_attr_string(g, n, "approximate", "?"), k == 2 ? "none" : "tanh");
  }
  /* g4, g5 and g6 stay: their Tanhs and Pows, and no Erf is left; g7's
   * CastLikes went with it (dce) */
  assert_int_equal(count_op(g, SC_OP_TANH), 3);
  assert_int_equal(count_op(g, SC_OP_POW), 3);
  assert_int_equal(count_op(g, SC_OP_ERF), 0);
  assert_int_equal(count_op(g, SC_OP_CAST_LIKE), 0);
  sc_graph_destroy(g);
  /* SHARDC_NO_FUSE_GELU=1: nothing fused */
  assert_int_equal(setenv("SHARDC_NO_FUSE_GELU", "1", 1), 0);
  g = parse_ok(GELU_CHAINS);
  run_passes_ok(g, SC_CANONICAL_PASSES, &po);
  assert_int_equal(unsetenv("SHARDC_NO_FUSE_GELU"), 0);
  assert_int_equal(count_op(g, SC_OP_GELU), 0);
  assert_int_equal(count_op(g, SC_OP_TANH), 6);
  assert_int_equal(count_op(g, SC_OP_ERF), 1);
  sc_graph_destroy(g);
}

static void test_unknown_pass(void **state) {
  (void)state;
  sc_graph *g = small_graph(NULL);
  sc_pass_opts po;
  quiet_opts(&po);
  assert_int_equal(sc_run_passes(g, "dce, frobnicate", &po), SC_ERR_USAGE);
  assert_non_null(strstr(g->diag.msg, "unknown pass 'frobnicate'"));
  assert_non_null(strstr(g->diag.msg, "bind-dims, infer-shapes, fold, fuse-attention, fuse-norm, fuse-gelu, dce"));
  assert_int_equal(g->n_nodes, 2); /* nothing ran */
  sc_diag_clear(&g->diag);
  po.print_after = "nosuch";
  assert_int_equal(sc_run_passes(g, "dce", &po), SC_ERR_USAGE);
  assert_non_null(sc_pass_find("fold"));
  assert_null(sc_pass_find("folds"));
  /* codegen's fuse joins the registry from above (no upward include) */
  sc_codegen_register_passes();
  sc_codegen_register_passes(); /* idempotent */
  const sc_pass_info *reg = sc_pass_registry();
  assert_string_equal(reg[0].name, "bind-dims");
  assert_string_equal(reg[3].name, "fuse-attention");
  assert_string_equal(reg[4].name, "fuse-norm");
  assert_string_equal(reg[5].name, "fuse-gelu");
  assert_string_equal(reg[7].name, "scatter-sum");
  assert_string_equal(reg[8].name, "fuse");
  assert_null(reg[9].name);
  sc_pass_info clash = {"fold", sc_pass_dce, "", "", false};
  assert_int_equal(sc_pass_register(&clash), SC_ERR_USAGE);
  assert_int_equal(sc_pass_register(&reg[8]), SC_OK);
  assert_null(reg[9].name);
  sc_graph_destroy(g);
}

static char *capture(sc_graph *g, const char *passes, const char *print_after,
                     bool time, sc_status want) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  sc_pass_opts po;
  quiet_opts(&po);
  po.print_after = print_after;
  po.print_out = f;
  po.time_passes = time;
  po.time_out = f;
  assert_int_equal(sc_run_passes(g, passes, &po), want);
  fclose(f);
  return buf;
}

static void test_print_after_and_time(void **state) {
  (void)state;
  sc_graph *g = small_graph(NULL);
  char *out = capture(g, "infer-shapes,dce", "dce", false, SC_OK);
  assert_null(strstr(out, "IR after infer-shapes"));
  const char *m = strstr(out, "// ----- IR after dce -----\nshardc.ir 1\n");
  assert_non_null(m);
  assert_non_null(strstr(m, "%y : f32[4] = Neg(%r) \"neg\""));
  free(out);
  out = capture(g, "infer-shapes,fold,dce", "all", true, SC_OK);
  assert_non_null(strstr(out, "IR after infer-shapes"));
  assert_non_null(strstr(out, "IR after fold"));
  assert_non_null(strstr(out, "IR after dce"));
  assert_non_null(strstr(out, "Pass execution timing report"));
  assert_non_null(strstr(out, "%)  infer-shapes\n"));
  assert_non_null(strstr(out, "(100.0%)  Total\n"));
  free(out);
  sc_graph_destroy(g);
}

/* bind-dims: the default fills unbound dims, named bindings are kept. */
static void test_bind_dims(void **state) {
  (void)state;
  sc_graph *g = parse_ok("shardc.ir 1\ngraph \"g\" opset 17 {\n"
                      "  input %x : f32[batch=?,seq=?,16]\n"
                      "  input %m : i64[batch=?,?]\n"
                      "  %y = Relu(%x) \"relu\"\n"
                      "  output %y\n}\n");
  assert_int_equal(sc_graph_bind_dim(g, "seq", 5), 1);
  sc_pass_opts po;
  quiet_opts(&po);
  po.default_dim = 2;
  run_passes_ok(g, "bind-dims,infer-shapes", &po);
  const sc_value *x = sc_val(g, sc_graph_find_value(g, "x"));
  assert_int_equal(x->dims[0], 2);
  assert_int_equal(x->dims[1], 5);
  const sc_value *m = sc_val(g, sc_graph_find_value(g, "m"));
  assert_int_equal(m->dims[0], 2);
  assert_int_equal(m->dims[1], 2);
  const sc_value *y = sc_val(g, sc_graph_find_value(g, "y"));
  assert_int_equal(y->dims[1], 5);
  assert_int_equal(y->dims[2], 16);
  sc_graph_destroy(g);
}

/* infer-shapes: an op newer than the graph's opset is an error naming the
 * node; a shape error stops the pass with the op's diagnostic. */
static void test_infer_errors(void **state) {
  (void)state;
  sc_graph *g = parse_ok("shardc.ir 1\ngraph \"g\" opset 17 {\n"
                      "  input %x : f32[4]\n"
                      "  %y = Gelu(%x) \"gelu0\"\n"
                      "  output %y\n}\n");
  sc_pass_opts po;
  quiet_opts(&po);
  assert_int_not_equal(sc_run_passes(g, "infer-shapes", &po), SC_OK);
  assert_string_equal(g->diag.node, "gelu0");
  assert_non_null(strstr(g->diag.msg, "opset 20"));
  sc_graph_destroy(g);
  g = parse_ok("shardc.ir 1\ngraph \"g\" opset 17 {\n"
            "  input %x : f32[2,3]\n  input %w : f32[4,5]\n"
            "  %y = MatMul(%x, %w) \"mm\"\n"
            "  %z = Relu(%y) \"relu\"\n"
            "  output %z\n}\n");
  assert_int_not_equal(sc_run_passes(g, "infer-shapes", &po), SC_OK);
  assert_string_equal(g->diag.node, "mm");
  assert_int_equal(sc_val(g, sc_graph_find_value(g, "z"))->rank, -1); /* stopped */
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fold_shape_chain),
      cmocka_unit_test(test_infer_then_fold),
      cmocka_unit_test(test_fold_output_becomes_const),
      cmocka_unit_test(test_scatter_sum),
      cmocka_unit_test(test_dce),
      cmocka_unit_test(test_verifier),
      cmocka_unit_test(test_fuse_norm),
      cmocka_unit_test(test_fuse_gelu),
      cmocka_unit_test(test_unknown_pass),
      cmocka_unit_test(test_print_after_and_time),
      cmocka_unit_test(test_bind_dims),
      cmocka_unit_test(test_infer_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
