/* test_shard_rules.c — the ops' sharding rules (passes/partition/shard_rules.c).
 *
 * Each case is a small global graph in textual IR (a mesh statement and one
 * node named "n"), shape-inferred; the rule of "n" runs on chosen input
 * shardings (text form, given here rather than as shard<...> annotations so
 * that a case can pass one whose split does not divide) and the result is
 * compared as one string: the wanted input shardings, '->', the output
 * shardings, joined by " | ", plus " (masked)" when the rule asks for the
 * masked gather. Every op must have a rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ir/sharding.h"
#include "passes/partition/shard_rule.h"
#include "passes/pass.h"
#include "test_util.h"

enum { MAXIO = 8 };

/* Appends s's text to buf at *len. */
static void put(const sc_sharding *s, const sc_mesh *m, char *buf, size_t cap, size_t *len) {
  *len += sc_sharding_format(s, m, buf + *len, cap - *len);
  assert_true(*len < cap);
}

/* Parses input i's sharding from the i-th '|'-separated field of ins ("" or
 * a missing field: replicated; "[]" stands for all dims whole). */
static void in_sharding(const char *ins, int32_t i, const sc_mesh *m, int32_t rank,
                        sc_sharding *s) {
  const char *p = ins;
  for (int32_t k = 0; k < i && p; k++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  sc_sharding_replicated(s, rank);
  if (!p) return;
  const char *e = strchr(p, '|');
  size_t len = e ? (size_t)(e - p) : strlen(p);
  while (len && (*p == ' ')) p++, len--;
  while (len && p[len - 1] == ' ') len--;
  if (!len) return;
  /* "[] partial(tp)": whole dims of any rank, pending sum */
  bool any_rank = len >= 2 && p[0] == '[' && p[1] == ']';
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_sharding_parse(p, len, m, any_rank ? -1 : rank, s, &d) != SC_OK)
    fail_msg("input %d: %s", i, d.msg);
  s->rank = rank;
}

/* Runs the rule of node "n" in the graph of `body` on mesh `mesh` with the
 * input shardings `ins`, and checks the result against `expected`. */
static void expect_rule(const char *mesh, const char *body, const char *ins,
                        const char *expected) {
  char text[4096];
  snprintf(text, sizeof text, "shardc.ir 1\ngraph \"g\" opset 21 {\n  mesh [%s]\n%s}\n", mesh,
           body);
  sc_graph *g = parse_ok(text);
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  if (sc_run_passes(g, "infer-shapes", &po) != SC_OK) fail_msg("infer-shapes: %s", g->diag.msg);
  const sc_node *n = NULL;
  for (int32_t k = 0; k < g->n_nodes; k++)
    if (strcmp(g->nodes[k].name, "n") == 0) n = &g->nodes[k];
  assert_non_null(n);
  assert_true(n->n_inputs <= MAXIO && n->n_outputs <= MAXIO);
  const sc_mesh *m = sc_graph_mesh(g);
  sc_sharding in[MAXIO], want[MAXIO], out[MAXIO];
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const sc_value *v = sc_node_input(g, n, i);
    in_sharding(ins, i, m, v ? v->rank : 0, &in[i]);
  }
  sc_shard_ctx c = {.g = g, .n = n, .mesh = m, .in = in, .want = want, .out = out};
  sc_shard_fn rule = sc_shard_rule(n->op);
  assert_non_null(rule);
  if (rule(&c) != SC_OK) fail_msg("rule: %s", g->diag.msg);
  char got[1024];
  size_t len = 0;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    if (i) len += (size_t)snprintf(got + len, sizeof got - len, " | ");
    put(&want[i], m, got, sizeof got, &len);
  }
  len += (size_t)snprintf(got + len, sizeof got - len, " ->");
  for (int32_t j = 0; j < n->n_outputs; j++) {
    len += (size_t)snprintf(got + len, sizeof got - len, j ? " | " : " ");
    put(&out[j], m, got, sizeof got, &len);
  }
  if (c.expand == SC_SHARD_EXPAND_MASKED_GATHER)
    snprintf(got + len, sizeof got - len, " (masked)");
  if (c.expand == SC_SHARD_EXPAND_MASKED_SCATTER)
    snprintf(got + len, sizeof got - len, " (masked scatter)");
  if (c.expand == SC_SHARD_EXPAND_SPLIT_SOFTMAX)
    snprintf(got + len, sizeof got - len, " (split softmax)");
  if (c.expand == SC_SHARD_EXPAND_GROUP_REDUCE)
    snprintf(got + len, sizeof got - len, " (group reduce)");
  if (c.expand == SC_SHARD_EXPAND_SCALED_MEAN)
    snprintf(got + len, sizeof got - len, " (scaled mean)");
  if (strcmp(got, expected) != 0)
    fail_msg("\n  got  %s\n  want %s\n--- graph ---\n%s", got, expected, text);
  sc_graph_destroy(g);
}

#define DT "dp=2, tp=2"

static void test_every_op_has_rule(void **state) {
  (void)state;
  for (int op = 0; op < SC_OP_COUNT; op++)
    if (!sc_shard_rule((sc_op)op)) fail_msg("%s has no sharding rule", sc_op_name((sc_op)op));
  assert_null(sc_shard_rule(SC_OP_COUNT));
}

static void test_unary(void **state) {
  (void)state;
  const char *neg = "  input %x : f32[4,8]\n  %y = Neg(%x) \"n\"\n";
  const char *exp = "  input %x : f32[4,8]\n  %y = Exp(%x) \"n\"\n";
  expect_rule(DT, neg, "[dp,_] partial(tp)", "[dp,_] partial(tp) -> [dp,_] partial(tp)");
  expect_rule(DT, exp, "[dp,_] partial(tp)", "[dp,_] -> [dp,_]");
  expect_rule(DT, exp, "[dp,tp]", "[dp,tp] -> [dp,tp]");
  /* Cast between floats is linear; to an integer it is not */
  expect_rule(DT, "  input %x : f32[4]\n  %y = Cast(%x) {to = 10} \"n\"\n", "[] partial(tp)",
              "[_] partial(tp) -> [_] partial(tp)");
  expect_rule(DT, "  input %x : f32[4]\n  %y = Cast(%x) {to = 7} \"n\"\n", "[dp] partial(tp)",
              "[dp] -> [dp]");
  /* Dropout in inference: y keeps the pending sum, the mask does not */
  expect_rule(DT, "  input %x : f32[4,8]\n  %y, %m = Dropout(%x) \"n\"\n", "[dp,_] partial(tp)",
              "[dp,_] partial(tp) -> [dp,_] partial(tp) | [dp,_]");
}

static void test_broadcast(void **state) {
  (void)state;
  /* batch split through an Add with a [1,N] bias */
  const char *add = "  input %x : f32[4,8]\n  input %b : f32[1,8]\n  %y = Add(%x, %b) \"n\"\n";
  expect_rule(DT, add, "[dp,_]", "[dp,_] | [_,_] -> [dp,_]");
  expect_rule(DT, add, "[dp,tp] | [_,tp]", "[dp,tp] | [_,tp] -> [dp,tp]");
  /* the split comes from the first input that has it; the bias follows */
  expect_rule(DT, add, " | [_,tp]", "[_,tp] | [_,tp] -> [_,tp]");
  /* rank-1 operand aligned from the right */
  expect_rule(DT, "  input %x : f32[2,4,8]\n  input %b : f32[8]\n  %y = Mul(%x, %b) \"n\"\n",
              "[dp,_,tp]", "[dp,_,tp] | [tp] -> [dp,_,tp]");
  /* one mesh axis never splits two dims: the later dim stays whole */
  expect_rule(DT, "  input %x : f32[4,8]\n  input %z : f32[4,8]\n  %y = Sub(%x, %z) \"n\"\n",
              "[tp,_] | [_,tp]", "[tp,_] | [tp,_] -> [tp,_]");
}

static void test_broadcast_partial(void **state) {
  (void)state;
  /* partial + constant: the constant joins the sum */
  const char *addc =
      "  input %x : f32[4,2]\n  const %b : f32[2] = [1, 2]\n  %y = Add(%x, %b) \"n\"\n";
  expect_rule(DT, addc, "[dp,_] partial(tp)",
              "[dp,_] partial(tp) | [_] partial(tp) -> [dp,_] partial(tp)");
  /* partial + a computed value: all-reduce first */
  const char *addx = "  input %x : f32[4,2]\n  input %b : f32[2]\n  %y = Add(%x, %b) \"n\"\n";
  expect_rule(DT, addx, "[dp,_] partial(tp)", "[dp,_] | [_] -> [dp,_]");
  expect_rule(DT, addx, "[dp,_] partial(tp) | [] partial(tp)",
              "[dp,_] partial(tp) | [_] partial(tp) -> [dp,_] partial(tp)");
  /* sums pending over different axes: over all of them, each joining the
   * axes it lacks (a tied embedding's two gradients) */
  const char *addw = "  input %x : f32[4,2]\n  input %w : f32[4,2]\n  %y = Add(%x, %w) \"n\"\n";
  expect_rule(DT, addw, "[] partial(dp) | [] partial(dp,tp)",
              "[_,_] partial(dp,tp) | [_,_] partial(dp,tp) -> [_,_] partial(dp,tp)");
  expect_rule(DT, addw, "[] partial(tp) | [] partial(dp)",
              "[_,_] partial(dp,tp) | [_,_] partial(dp,tp) -> [_,_] partial(dp,tp)");
  /* an axis that splits the output is reduced onto the split, the other
   * pending axes kept (the vocabulary-parallel tied embedding's gradients
   * under sequence parallelism) */
  expect_rule(DT, addw, "[tp,_] partial(dp) | [] partial(dp,tp)",
              "[tp,_] partial(dp) | [tp,_] partial(dp) -> [tp,_] partial(dp)");
  /* unless an operand would both reduce an axis and join another */
  expect_rule(DT, addw, "[tp,_] partial(dp) | [] partial(tp)", "[tp,_] | [tp,_] -> [tp,_]");
  /* but not with a computed value pending over none: reduced first */
  const char *add3 = "  input %x : f32[4,2]\n  input %w : f32[4,2]\n  input %v : f32[4,2]\n"
                     "  %y = Sum(%x, %w, %v) \"n\"\n";
  expect_rule(DT, add3, "[] partial(dp) | [] partial(tp) | ", "[_,_] | [_,_] | [_,_] -> [_,_]");
  /* Mul by a non-partial keeps the sum; two partials do not */
  const char *mul = "  input %x : f32[4,2]\n  input %s : f32[4,2]\n  %y = Mul(%x, %s) \"n\"\n";
  expect_rule(DT, mul,
              "[] partial(tp) | [dp,_]", "[dp,_] partial(tp) | [dp,_] -> [dp,_] partial(tp)");
  expect_rule(DT, mul, "[] partial(tp) | [] partial(tp)", "[_,_] | [_,_] -> [_,_]");
  /* Div: only a partial numerator */
  const char *dv = "  input %x : f32[4,2]\n  input %s : f32[4,2]\n  %y = Div(%x, %s) \"n\"\n";
  expect_rule(DT, dv, "[] partial(tp)", "[_,_] partial(tp) | [_,_] -> [_,_] partial(tp)");
  expect_rule(DT, dv, " | [] partial(tp)", "[_,_] | [_,_] -> [_,_]");
  /* Max is not linear */
  expect_rule(DT, "  input %x : f32[4,2]\n  input %s : f32[4,2]\n  %y = Max(%x, %s) \"n\"\n",
              "[] partial(tp) | [] partial(tp)", "[_,_] | [_,_] -> [_,_]");
}

static void test_matmul(void **state) {
  (void)state;
  const char *mm =
      "  input %x : f32[2,16,64]\n  param %w : f32[64,32]\n  %y = MatMul(%x, %w) \"n\"\n";
  /* column parallel */
  expect_rule(DT, mm, " | [_,tp]", "[_,_,_] | [_,tp] -> [_,_,tp]");
  expect_rule(DT, mm, "[dp,_,_] | [_,tp]", "[dp,_,_] | [_,tp] -> [dp,_,tp]");
  /* row parallel: K split the same way on both sides */
  expect_rule(DT, mm, "[_,_,tp] | [tp,_]", "[_,_,tp] | [tp,_] -> [_,_,_] partial(tp)");
  expect_rule(DT, mm, "[dp,_,tp] | [tp,_]", "[dp,_,tp] | [tp,_] -> [dp,_,_] partial(tp)");
  /* K split on one side only: gathered */
  expect_rule(DT, mm, "[_,_,tp]", "[_,_,_] | [_,_] -> [_,_,_]");
  /* M and N both on tp (sequence parallel before a column-parallel
   * product): the 2-D weight keeps its columns and the rows are gathered,
   * as Megatron's all-gather of the sequence; gathering the weight instead
   * would move it whole every step */
  expect_rule(DT, mm, "[_,tp,_] | [_,tp]", "[_,_,_] | [_,tp] -> [_,_,tp]");
  /* the rows split over cp and, inside, over tp (sequence parallelism
   * beside cp): cp's split stays, tp's is gathered */
  expect_rule("dp=2,cp=2,tp=2", mm, "[dp,(cp,tp),_] | [_,tp]",
              "[dp,cp,_] | [_,tp] -> [dp,cp,tp]");
  /* a pending sum on A passes through */
  expect_rule(DT, mm,
              "[dp,_,_] partial(tp)", "[dp,_,_] partial(tp) | [_,_] -> [dp,_,_] partial(tp)");
  /* batched, heads split on tp (broadcast batch dim) */
  expect_rule(DT,
              "  input %q : f32[2,4,8,16]\n  input %k : f32[4,16,8]\n"
              "  %s = MatMul(%q, %k) \"n\"\n",
              "[dp,tp,_,_] | [tp,_,_]", "[dp,tp,_,_] | [tp,_,_] -> [dp,tp,_,_]");
  /* A's rows split over the axis a batched B is pending over (the gates'
   * gradient under expert tensor and sequence parallelism: the output
   * gradient on the sequence, the experts' outputs pending): A, smaller
   * than twice B, is gathered and the product stays pending; a larger A
   * keeps its split and B is reduced */
  const char *dyt = "  input %dy : f32[2,16,64]\n  input %ye : f32[2,64,40]\n"
                    "  %g = MatMul(%dy, %ye) \"n\"\n";
  expect_rule(DT, dyt, "[_,tp,_] | [] partial(tp)",
              "[_,_,_] | [_,_,_] partial(tp) -> [_,_,_] partial(tp)");
  const char *big = "  input %dy : f32[2,160,64]\n  input %ye : f32[2,64,40]\n"
                    "  %g = MatMul(%dy, %ye) \"n\"\n";
  expect_rule(DT, big, "[_,tp,_] | [] partial(tp)", "[_,tp,_] | [_,_,_] -> [_,tp,_]");
  /* a 1-D operand: replicated */
  expect_rule(DT, "  input %a : f32[8]\n  input %b : f32[8,4]\n  %y = MatMul(%a, %b) \"n\"\n",
              "[tp] | [tp,_]", "[_] | [_,_] -> [_]");
}

static void test_gemm(void **state) {
  (void)state;
  /* row split with a constant bias: the bias joins the pending sum */
  const char *g = "  input %a : f32[4,16]\n  param %b : f32[16,8]\n"
                  "  const %c : f32[8] = [1, 2, 3, 4, 5, 6, 7, 8]\n"
                  "  %y = Gemm(%a, %b, %c) \"n\"\n";
  expect_rule(DT, g,
              "[dp,tp] | [tp,_]", "[dp,tp] | [tp,_] | [_] partial(tp) -> [dp,_] partial(tp)");
  /* column split: the bias is split like N */
  expect_rule(DT, g, "[dp,_] | [_,tp]", "[dp,_] | [_,tp] | [tp] -> [dp,tp]");
  /* a computed float bias joins too (times a partial 1: a training step's
   * bias); a computed int bias cannot: K is gathered */
  const char *gx = "  input %a : f32[4,16]\n  param %b : f32[16,8]\n  input %c : f32[8]\n"
                   "  %y = Gemm(%a, %b, %c) \"n\"\n";
  expect_rule(DT, gx, "[_,tp] | [tp,_]", "[_,tp] | [tp,_] | [_] partial(tp) -> [_,_] partial(tp)");
  expect_rule(DT, gx, "[_,tp] | [tp,_] | [_] partial(dp)", "[_,_] | [_,_] | [_] -> [_,_]");
  /* transB: B is [N,K] */
  const char *gt = "  input %a : f32[4,16]\n  param %b : f32[8,16]\n"
                   "  %y = Gemm(%a, %b) {transB = 1} \"n\"\n";
  expect_rule(DT, gt, " | [tp,_]", "[_,_] | [tp,_] -> [_,tp]");
  expect_rule(DT, gt, "[_,tp] | [_,tp]", "[_,tp] | [_,tp] -> [_,_] partial(tp)");
}

static void test_reshape(void **state) {
  (void)state;
  const char *merge = "  input %x : f32[2,16,64]\n  const %s : i64[2] = [32, 64]\n"
                      "  %y = Reshape(%x, %s) \"n\"\n";
  expect_rule(DT, merge, "[dp,_,_]", "[dp,_,_] | [_] -> [dp,_]");
  expect_rule(DT, merge, "[dp,_,tp]", "[dp,_,tp] | [_] -> [dp,tp]");
  /* an inner dim of a merged group carries its split as a stride of the
   * dims before it (each of the 2 blocks split) */
  expect_rule(DT, merge, "[_,dp,_]", "[_,dp,_] | [_] -> [2*dp,_]");
  /* two splits in one merged group: the general rule (the first kept) */
  expect_rule(DT, merge, "[dp,tp,_]", "[dp,_,_] | [_] -> [dp,_]");
  /* the pending sum passes */
  expect_rule(DT, merge,
              "[dp,_,_] partial(tp)", "[dp,_,_] partial(tp) | [_] -> [dp,_] partial(tp)");
  const char *heads = "  input %x : f32[2,16,64]\n  const %s : i64[4] = [2, 16, 4, 16]\n"
                      "  %y = Reshape(%x, %s) \"n\"\n";
  expect_rule(DT, heads, "[dp,_,tp]", "[dp,_,tp] | [_] -> [dp,_,tp,_]");
  /* a stride survives only a one-to-one group */
  expect_rule(DT, heads, "[_,_,2*tp]", "[_,_,_] | [_] -> [_,_,_,_]");
  /* size-1 dims are skipped */
  expect_rule(DT,
              "  input %x : f32[1,8,1,6]\n  %y = Squeeze(%x) \"n\"\n",
              "[_,dp,_,tp]", "[_,dp,_,tp] -> [dp,tp]");
  expect_rule(DT, "  input %x : f32[4,6,8]\n  %y = Flatten(%x) {axis = 1} \"n\"\n", "[dp,tp,_]",
              "[dp,tp,_] -> [dp,tp]");
  /* the first output dim of the group does not divide: unsplit */
  expect_rule("tp=4", "  input %x : f32[8,4]\n  const %s : i64[2] = [2, 16]\n"
                      "  %y = Reshape(%x, %s) \"n\"\n",
              "[tp,_]", "[_,_] | [_] -> [_,_]");
  /* the sequence (context parallelism's or sequence parallelism's) stays
   * split through the rows of a product: merged as a stride of the batch,
   * and back */
  expect_rule("cp=2,tp=2", merge, "[_,cp,_]", "[_,cp,_] | [_] -> [2*cp,_]");
  expect_rule("cp=2,tp=2", merge, "[_,cp,tp]", "[_,cp,tp] | [_] -> [2*cp,tp]");
  expect_rule("cp=2,tp=2",
              "  input %x : f32[32,64]\n  const %s : i64[3] = [2, 16, 64]\n"
              "  %y = Reshape(%x, %s) \"n\"\n",
              "[2*cp,_]", "[2*cp,_] | [_] -> [_,cp,_]");
  /* with the batch split too, the general rule: the sequence is gathered */
  expect_rule("dp=2,cp=2", merge, "[dp,cp,_]", "[dp,_,_] | [_] -> [dp,_]");
  /* sequence parallelism's tp split alike: the product gathers the rows */
  expect_rule("cp=2,tp=2", merge, "[_,tp,_]", "[_,tp,_] | [_] -> [2*tp,_]");
  expect_rule("tp=2",
              "  input %x : f32[32,64]\n  const %s : i64[3] = [2, 16, 64]\n"
              "  %y = Reshape(%x, %s) \"n\"\n",
              "[2*tp,_]", "[2*tp,_] | [_] -> [_,tp,_]");
  /* tp inside cp on the sequence (sequence parallelism beside cp): the
   * merge gathers tp and keeps cp's split as the stride */
  expect_rule("cp=2,tp=2", merge, "[_,(cp,tp),_]", "[_,cp,_] | [_] -> [2*cp,_]");
  /* a stride of several axes is split back alike */
  expect_rule("cp=2,tp=2",
              "  input %x : f32[32,64]\n  const %s : i64[3] = [2, 16, 64]\n"
              "  %y = Reshape(%x, %s) \"n\"\n",
              "[2*(cp,tp),_]", "[2*(cp,tp),_] | [_] -> [_,(cp,tp),_]");
}

static void test_transpose_split(void **state) {
  (void)state;
  expect_rule(DT,
              "  input %x : f32[2,4,8,16]\n  %y = Transpose(%x) {perm = [0, 2, 1, 3]} \"n\"\n",
              "[dp,tp,_,_]", "[dp,tp,_,_] -> [dp,_,tp,_]");
  expect_rule(DT, "  input %x : f32[4,8]\n  %y = Transpose(%x) \"n\"\n", "[dp,_] partial(tp)",
              "[dp,_] partial(tp) -> [_,dp] partial(tp)");
  /* fused QKV split into three: the stride becomes plain splits */
  const char *qkv = "  input %x : f32[2,16,192]\n"
                    "  %q, %k, %v = Split(%x) {axis = 2, num_outputs = 3} \"n\"\n";
  expect_rule(DT, qkv, "[dp,_,3*tp]", "[dp,_,3*tp] -> [dp,_,tp] | [dp,_,tp] | [dp,_,tp]");
  /* a plain split of the axis would give a rank pieces of several outputs */
  expect_rule(DT, qkv, "[_,dp,tp]", "[_,dp,_] -> [_,dp,_] | [_,dp,_] | [_,dp,_]");
}

static void test_softmax_norm(void **state) {
  (void)state;
  /* over a split axis: normalised across the group, the split stays
   * (vocabulary-parallel cross-entropy) */
  expect_rule(DT, "  input %x : f32[2,8,16]\n  %y = Softmax(%x) \"n\"\n", "[dp,_,tp]",
              "[dp,_,tp] -> [dp,_,tp] (split softmax)");
  expect_rule(DT, "  input %x : f32[2,8,16]\n  %y = LogSoftmax(%x) \"n\"\n",
              "[_,_,tp] partial(dp)", "[_,_,tp] -> [_,_,tp] (split softmax)");
  /* a strided split is gathered */
  expect_rule(DT, "  input %x : f32[2,8,16]\n  %y = Softmax(%x) \"n\"\n", "[dp,_,2*tp]",
              "[dp,_,_] -> [dp,_,_]");
  expect_rule(DT, "  input %x : f32[2,8,16]\n  %y = Softmax(%x) {axis = 1} \"n\"\n",
              "[dp,_,tp]", "[dp,_,tp] -> [dp,_,tp]");
  const char *ln = "  input %x : f32[2,8,16]\n  param %s : f32[16]\n  param %b : f32[16]\n"
                   "  %y = LayerNormalization(%x, %s, %b) \"n\"\n";
  expect_rule(DT, ln, "[dp,tp,_] | [tp]", "[dp,tp,_] | [_] | [_] -> [dp,tp,_]");
  expect_rule(DT, ln, "[dp,_,tp]", "[dp,_,_] | [_] | [_] -> [dp,_,_]");
  /* Conv: only the batch dim stays split */
  expect_rule(DT,
              "  input %x : f32[4,2,8,8]\n  param %w : f32[4,2,3,3]\n"
              "  %y = Conv(%x, %w) \"n\"\n",
              "[dp,tp,_,_] | [tp,_,_,_]", "[dp,_,_,_] | [_,_,_,_] -> [dp,_,_,_]");
}

static void test_reduce(void **state) {
  (void)state;
  const char *sum = "  input %x : f32[4,8,6]\n  const %a : i64[1] = [1]\n"
                    "  %y = ReduceSum(%x, %a) {keepdims = 0} \"n\"\n";
  expect_rule(DT, sum, "[dp,_,_] partial(tp)", "[dp,_,_] partial(tp) | [_] -> [dp,_] partial(tp)");
  /* a sum over a split dim: the pieces' sums, pending over its axes */
  expect_rule(DT, sum, "[dp,tp,_]", "[dp,tp,_] | [_] -> [dp,_] partial(tp)");
  const char *ssq = "  input %x : f32[4,8,6]\n  const %a : i64[2] = [0, 1]\n"
                    "  %y = ReduceSumSquare(%x, %a) {keepdims = 0} \"n\"\n";
  expect_rule(DT, ssq, "[dp,tp,_]", "[dp,tp,_] | [_] -> [_] partial(dp,tp)");
  expect_rule(DT, ssq, "[dp,_,_] partial(tp)", "[dp,_,_] | [_] -> [_] partial(dp)");
  /* a mean over a split dim: each piece's mean scaled by 1/k, pending over
   * its axes (k = 2 here); in bf16 the dim is gathered */
  const char *mean = "  input %x : f32[4,8,6]\n  const %a : i64[1] = [1]\n"
                     "  %y = ReduceMean(%x, %a) {keepdims = 0} \"n\"\n";
  expect_rule(DT, mean, "[dp,tp,_]", "[dp,tp,_] | [_] -> [dp,_] partial(tp) (scaled mean)");
  expect_rule(DT, mean, "[dp,_,_] partial(tp)",
              "[dp,_,_] partial(tp) | [_] -> [dp,_] partial(tp)");
  expect_rule(DT,
              "  input %x : bf16[4,8,6]\n  const %a : i64[1] = [1]\n"
              "  %y = ReduceMean(%x, %a) {keepdims = 0} \"n\"\n",
              "[dp,tp,_]", "[dp,_,_] | [_] -> [dp,_]");
  const char *mx = "  input %x : f32[4,8,6]\n  const %a : i64[1] = [-1]\n"
                   "  %y = ReduceMax(%x, %a) \"n\"\n";
  expect_rule(DT, mx, "[dp,_,_] partial(tp)", "[dp,_,_] | [_] -> [dp,_,_]");
  /* a max over a split dim: the pieces' maxima, then the group's (an FP8
   * amax); in bf16 the dim is gathered */
  expect_rule(DT, mx, "[_,dp,tp]", "[_,dp,tp] | [_] -> [_,dp,_] (group reduce)");
  expect_rule(DT, "  input %x : f32[4,8]\n  %y = ReduceMax(%x) {keepdims = 0} \"n\"\n",
              "[dp,tp]", "[dp,tp] -> [] (group reduce)");
  expect_rule(DT, "  input %x : bf16[4,8]\n  %y = ReduceMin(%x) {keepdims = 0} \"n\"\n",
              "[dp,tp]", "[_,_] -> []");
  /* no axes: everything reduced */
  expect_rule(DT, "  input %x : f32[4,8]\n  %y = ReduceMean(%x) {keepdims = 0} \"n\"\n",
              "[dp,_] partial(tp)", "[dp,_] partial(tp) -> [] partial(dp,tp) (scaled mean)");
  expect_rule(DT, "  input %x : f32[4,8]\n  %y = ArgMax(%x) {axis = 1, keepdims = 0} \"n\"\n",
              "[dp,tp]", "[dp,_] -> [dp]");
}

static void test_gather(void **state) {
  (void)state;
  const char *emb = "  param %e : f32[32,8]\n  input %ids : i64[2,4]\n"
                    "  %y = Gather(%e, %ids) \"n\"\n";
  /* vocabulary-parallel embedding: masked gather, pending sum over tp */
  expect_rule(DT, emb, "[tp,_] | [dp,_]", "[tp,_] | [dp,_] -> [dp,_,_] partial(tp) (masked)");
  expect_rule(DT, emb, "[tp,_]", "[tp,_] | [_,_] -> [_,_,_] partial(tp) (masked)");
  /* hidden dim split: a plain gather */
  expect_rule(DT, emb, "[_,tp] | [dp,_]", "[_,tp] | [dp,_] -> [dp,_,tp]");
  /* partial indices: no masked gather */
  expect_rule(DT, emb, "[tp,_] | [] partial(dp)", "[_,_] | [_,_] -> [_,_,_]");
  /* the masked form gathers rows only (axis 0): other axes are gathered whole */
  expect_rule(DT,
              "  input %x : f32[4,32]\n  input %ids : i64[3]\n"
              "  %y = Gather(%x, %ids) {axis = 1} \"n\"\n",
              "[dp,tp]", "[dp,_] | [_] -> [dp,_]");
  /* an indices axis already used by the data stays whole */
  expect_rule(DT, emb, "[_,tp] | [tp,_]", "[_,tp] | [_,_] -> [_,_,tp]");
  /* its gradient, a scatter-add of updates pending over tp whose rows dp
   * splits as it splits the indices: each rank scatters its rows, pending
   * over both */
  const char *grad = "  input %z : f32[32,8]\n  input %i : i64[4,1]\n  input %u : f32[4,8]\n"
                     "  %y = ScatterND(%z, %i, %u) {reduction = \"add\"} \"n\"\n";
  expect_rule(DT, grad, " | [dp,_] | [dp,_] partial(tp)",
              "[_,_] partial(dp,tp) | [dp,_] | [dp,_] partial(tp) -> [_,_] partial(dp,tp)");
  /* indices whole: sliced like the updates */
  expect_rule(DT, grad, " |  | [dp,_] partial(tp)",
              "[_,_] partial(dp,tp) | [dp,_] | [dp,_] partial(tp) -> [_,_] partial(dp,tp)");
  /* a vocabulary-parallel lookup's gradient (tp.c marks it `__rows_axis`,
   * tp the mesh's axis 1): the zeros split on their rows over tp, the
   * tokens gathered over tp (sequence parallel) or whole, their batch rows
   * split over dp as the indices', the sum pending over dp only */
  const char *vgrad = "  input %z : f32[32,8]\n  input %i : i64[2,4,1]\n"
                      "  input %u : f32[2,4,8]\n"
                      "  %y = ScatterND(%z, %i, %u) {reduction = \"add\", __rows_axis = 1} \"n\"\n";
  expect_rule(DT, vgrad, " | [dp,tp,_] | [dp,tp,_]",
              "[tp,_] partial(dp) | [dp,_,_] | [dp,_,_] -> [tp,_] partial(dp) (masked scatter)");
  expect_rule(DT, vgrad, " | [dp,_,_] | [dp,_,_]",
              "[tp,_] partial(dp) | [dp,_,_] | [dp,_,_] -> [tp,_] partial(dp) (masked scatter)");
  /* the updates' columns follow the zeros' (whole) */
  expect_rule(DT, vgrad, " | [dp,_,_] | [dp,_,tp]",
              "[tp,_] partial(dp) | [dp,_,_] | [dp,_,_] -> [tp,_] partial(dp) (masked scatter)");
  /* updates pending (a ring attention's gradient over cp) stay pending,
   * the sum with them; pending over the rows' own axis they are reduced */
  expect_rule(DT, vgrad, " | [_,tp,_] | [_,tp,_] partial(dp)",
              "[tp,_] partial(dp) | [_,_,_] | [_,_,_] partial(dp) -> [tp,_] partial(dp) "
              "(masked scatter)");
  expect_rule(DT, vgrad, " | [dp,_,_] | [dp,_,_] partial(tp)",
              "[tp,_] partial(dp) | [dp,_,_] | [dp,_,_] -> [tp,_] partial(dp) (masked scatter)");
  /* rows tp does not divide: the unmasked rule, pending over dp and tp */
  const char *odd = "  input %z : f32[31,8]\n  input %i : i64[2,4,1]\n"
                    "  input %u : f32[2,4,8]\n"
                    "  %y = ScatterND(%z, %i, %u) {reduction = \"add\", __rows_axis = 1} \"n\"\n";
  expect_rule(DT, odd, " | [dp,tp,_] | [dp,tp,_]",
              "[_,_] partial(dp,tp) | [dp,tp,_] | [dp,tp,_] -> [_,_] partial(dp,tp)");
}

static void test_concat_slice_expand(void **state) {
  (void)state;
  const char *cat = "  input %a : f32[4,8]\n  input %b : f32[4,8]\n"
                    "  %y = Concat(%a, %b) {axis = 1} \"n\"\n";
  /* equal inputs split alike along the axis: a strided split (the inverse
   * of Split's; a fused QKV projection's gradient) */
  expect_rule(DT, cat, "[dp,tp] | [_,tp]", "[dp,tp] | [dp,tp] -> [dp,2*tp]");
  expect_rule(DT, cat, "[dp,tp] | [_,_]", "[dp,_] | [dp,_] -> [dp,_]");
  const char *cat2 = "  input %a : f32[4,8]\n  input %b : f32[4,4]\n"
                     "  %y = Concat(%a, %b) {axis = 1} \"n\"\n";
  expect_rule(DT, cat2, "[_,tp] | [_,tp]", "[_,_] | [_,_] -> [_,_]");
  expect_rule(DT, cat, "[] partial(tp) | [dp,_] partial(tp)",
              "[dp,_] partial(tp) | [dp,_] partial(tp) -> [dp,_] partial(tp)");
  const char *sl = "  input %x : f32[4,8]\n  const %s : i64[1] = [2]\n  const %e : i64[1] = [6]\n"
                   "  const %ax : i64[1] = [1]\n  %y = Slice(%x, %s, %e, %ax) \"n\"\n";
  expect_rule(DT, sl, "[dp,tp]", "[dp,_] | [_] | [_] | [_] -> [dp,_]");
  const char *ex = "  input %x : f32[4,1]\n  const %s : i64[3] = [2, 4, 8]\n"
                   "  %y = Expand(%x, %s) \"n\"\n";
  expect_rule(DT, ex, "[dp,_] partial(tp)", "[dp,_] partial(tp) | [_] -> [_,dp,_] partial(tp)");
}

static void test_fallback(void **state) {
  (void)state;
  /* 3 rows do not divide over tp: the checked result falls back */
  expect_rule(DT, "  input %x : f32[3,4]\n  %y = Relu(%x) \"n\"\n", "[tp,_]", "[_,_] -> [_,_]");
  /* ops without a dedicated rule replicate */
  expect_rule(DT, "  input %x : f32[4,8]\n  %y = Shape(%x) \"n\"\n", "[dp,tp]", "[_,_] -> [_]");
  expect_rule(DT, "  input %x : f32[4,8]\n  const %r : i64[2] = [2, 1]\n"
                  "  %y = Tile(%x, %r) \"n\"\n",
              "[dp,tp]", "[_,_] | [_] -> [_,_]");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_rule), cmocka_unit_test(test_unary),
      cmocka_unit_test(test_broadcast),         cmocka_unit_test(test_broadcast_partial),
      cmocka_unit_test(test_matmul),            cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_reshape),           cmocka_unit_test(test_transpose_split),
      cmocka_unit_test(test_softmax_norm),      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_gather),            cmocka_unit_test(test_concat_slice_expand),
      cmocka_unit_test(test_fallback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
