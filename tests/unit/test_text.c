/* test_text.c — the textual IR: printer and parser.
 *
 * print(parse(print(g))) == print(g) on hand-written IR, on graphs built
 * through the API with every attribute kind, and on every sample model after
 * the canonical pipeline; quoted names; float round-trips; parse errors name
 * the line; hostile and randomly mutated text gives an error, never a crash. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/onnx.h"
#include "passes/pass.h"
#include "test_util.h"

/* Prints g, parses the text, prints again: both texts equal. Returns the
 * first text (caller frees). */
static char *assert_round_trip(sc_graph *g) {
  char *a = sc_ir_print_string(g);
  assert_non_null(a);
  sc_graph *g2 = parse_ok(a);
  char *b = sc_ir_print_string(g2);
  assert_non_null(b);
  if (strcmp(a, b) != 0) fail_msg("round trip differs:\n--- first ---\n%s\n--- second ---\n%s", a, b);
  assert_int_equal(sc_graph_verify(g2, false), SC_OK);
  sc_free(b);
  sc_graph_destroy(g2);
  return a;
}

static const char *const SAMPLE_IR =
    "shardc.ir 1\n"
    "# a comment\n"
    "graph \"main\" opset 17 {\n"
    "  input %x : f32[batch=8,64]   // trailing comment\n"
    "  input %ids : i64[batch=?,seq=?]\n"
    "  param %w : f32[64,10]\n"
    "  const %s : i64[2] = [8, -1]\n"
    "  const %h : f16[3] = [0.5, -1.25, 65504.0]\n"
    "  const %d : f64[2] = [0.10000000000000001, 1e-300]\n"
    "  const %flags : bool[2] = [true, false]\n"
    "  const %big : u64[1] = [18446744073709551615]\n"
    "  const %scalar : i8[] = [-128]\n"
    "  const %empty : f32[0] = []\n"
    "  %y : f32[8,10] = MatMul(%x, %w) \"fc1\"\n"
    "  %a : f32[8,5], %b : f32[8,5] = Split(%y) {axis = 1, num_outputs = 2} \"split0\"\n"
    "  %c = Clip(%y, _, %x) \"clip\"\n"
    "  %\"odd name\" = Relu(%c) \"/model/layers.0/Relu:0\"\n"
    "  %r/1.x:0 = Relu(%\"odd name\") \"r\"\n"
    "  output %y\n"
    "  output %r/1.x:0\n"
    "}\n";

static void test_round_trip_text(void **state) {
  (void)state;
  sc_graph *g = parse_ok(SAMPLE_IR);
  assert_int_equal(g->opset, 17);
  assert_int_equal(g->n_inputs, 2);
  assert_int_equal(g->n_outputs, 2);
  assert_int_equal(g->n_nodes, 5);
  /* what was parsed, field by field */
  sc_value *x = sc_val(g, sc_graph_find_value(g, "x"));
  assert_int_equal(x->rank, 2);
  assert_int_equal(x->dims[0], 8);
  assert_string_equal(x->dim_param[0], "batch");
  assert_null(x->dim_param[1]);
  sc_value *ids = sc_val(g, sc_graph_find_value(g, "ids"));
  assert_int_equal(ids->dims[0], SC_DIM_UNKNOWN);
  assert_string_equal(ids->dim_param[1], "seq");
  sc_value *w = sc_val(g, sc_graph_find_value(g, "w"));
  assert_true(w->flags & SC_VALUE_PARAM);
  assert_true(sc_value_is_const(w));
  assert_false(sc_value_has_data(w));
  sc_value *s = sc_val(g, sc_graph_find_value(g, "s"));
  assert_int_equal(((const int64_t *)s->data)[1], -1);
  sc_value *h = sc_val(g, sc_graph_find_value(g, "h"));
  assert_true(sc_load_f64(SC_DTYPE_F16, h->data, 1) == -1.25);
  assert_true(sc_load_f64(SC_DTYPE_F16, h->data, 2) == 65504.0);
  sc_value *dd = sc_val(g, sc_graph_find_value(g, "d"));
  assert_true(((const double *)dd->data)[0] == 0.1);
  assert_true(((const double *)dd->data)[1] == 1e-300);
  sc_value *big = sc_val(g, sc_graph_find_value(g, "big"));
  assert_true(((const uint64_t *)big->data)[0] == UINT64_MAX);
  sc_value *sc = sc_val(g, sc_graph_find_value(g, "scalar"));
  assert_int_equal(sc->rank, 0);
  assert_int_equal(((const int8_t *)sc->data)[0], -128);
  assert_true(sc_value_has_data(sc_val(g, sc_graph_find_value(g, "empty"))));
  const sc_node *clip = sc_nod(g, 2);
  assert_string_equal(clip->name, "clip");
  assert_int_equal(clip->inputs[1], -1);
  assert_int_equal(sc_nod(g, 1)->n_outputs, 2);
  assert_int_equal(sc_attr_int(g, sc_nod(g, 1), "num_outputs", 0), 2);
  assert_true(sc_graph_find_value(g, "odd name") >= 0);
  assert_string_equal(sc_nod(g, 3)->name, "/model/layers.0/Relu:0");
  assert_int_equal(sc_graph_verify(g, false), SC_OK);

  char *text = assert_round_trip(g);
  assert_non_null(strstr(text, "%\"odd name\" = Relu(%c)"));
  assert_non_null(strstr(text, "%r/1.x:0 = Relu(%\"odd name\")"));
  assert_non_null(strstr(text, "input %x : f32[batch=8,64]"));
  assert_non_null(strstr(text, "input %ids : i64[batch=?,seq=?]"));
  assert_non_null(strstr(text, "const %d : f64[2] = [0.10000000000000001, 1e-300]"));
  assert_non_null(strstr(text, "const %flags : bool[2] = [true, false]"));
  sc_free(text);
  sc_graph_destroy(g);
}

/* Every attribute kind through the API, printed and parsed back. */
static void test_attr_kinds(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("attrs");
  int32_t x = sc_graph_add_value(g, "x");
  int32_t y = sc_graph_add_value(g, "y");
  assert_int_equal(sc_value_set_shape(g, x, SC_DTYPE_F32, 1, (int64_t[]){4}), SC_OK);
  sc_graph_add_input(g, x);
  int32_t n = sc_graph_add_node(g, SC_OP_IDENTITY, "all kinds", &x, 1, &y, 1);
  sc_graph_add_output(g, y);
  sc_attr *a;
  a = sc_node_add_attr(g, n, "i", SC_ATTR_INT); a->i = -9000000000LL;
  a = sc_node_add_attr(g, n, "f", SC_ATTR_FLOAT); a->f = (double)0.1f;
  a = sc_node_add_attr(g, n, "f_int", SC_ATTR_FLOAT); a->f = 3.0;
  a = sc_node_add_attr(g, n, "f_tiny", SC_ATTR_FLOAT); a->f = (double)1e-5f;
  a = sc_node_add_attr(g, n, "f_inf", SC_ATTR_FLOAT); a->f = -INFINITY;
  a = sc_node_add_attr(g, n, "s", SC_ATTR_STRING); a->s = "quote\" back\\ nl\n tab\t \x01 \xc3\xa9";
  static int64_t ints[] = {1, -2, INT64_MAX};
  a = sc_node_add_attr(g, n, "ints", SC_ATTR_INTS); a->n = 3; a->ints = ints;
  static double floats[] = {1.0, 2.5, -0.0};
  a = sc_node_add_attr(g, n, "floats", SC_ATTR_FLOATS); a->n = 3; a->floats = floats;
  static const char *strs[] = {"a", "b c", ""};
  a = sc_node_add_attr(g, n, "strings", SC_ATTR_STRINGS); a->n = 3; a->strings = strs;
  a = sc_node_add_attr(g, n, "empty", SC_ATTR_INTS); a->n = 0; a->ints = NULL;
  static float tdata[] = {1.0f, 2.0f, 0.333333343f};
  static sc_tensor ten = {SC_DTYPE_F32, 1, {3}, tdata, sizeof tdata};
  a = sc_node_add_attr(g, n, "t", SC_ATTR_TENSOR); a->t = &ten;
  a = sc_node_add_attr(g, n, "body", SC_ATTR_GRAPH);
  a = sc_node_add_attr(g, n, "tp", SC_ATTR_TYPE_PROTO);
  a = sc_node_add_attr(g, n, "odd name", SC_ATTR_INT); a->i = 7;

  char *text = assert_round_trip(g);
  assert_non_null(strstr(text, "i = -9000000000"));
  assert_non_null(strstr(text, "f = 0.100000001"));
  assert_non_null(strstr(text, "f_int = 3.0"));
  assert_non_null(strstr(text, "f_tiny = 9.99999975e-06"));
  assert_non_null(strstr(text, "f_inf = -inf"));
  assert_non_null(strstr(text, "s = \"quote\\\" back\\\\ nl\\n tab\\t \\x01 \\xc3\\xa9\""));
  assert_non_null(strstr(text, "ints = [1, -2, 9223372036854775807]"));
  assert_non_null(strstr(text, "floats = [1.0, 2.5, -0.0]"));
  assert_non_null(strstr(text, "strings = [\"a\", \"b c\", \"\"]"));
  assert_non_null(strstr(text, "empty = []"));
  assert_non_null(strstr(text, "t = tensor<f32[3]>[1.0, 2.0, 0.333333343]"));
  assert_non_null(strstr(text, "body = <graph>"));
  assert_non_null(strstr(text, "tp = <type_proto>"));
  assert_non_null(strstr(text, "\"odd name\" = 7"));
  assert_non_null(strstr(text, "\"all kinds\""));

  sc_graph *g2 = parse_ok(text);
  const sc_node *m = sc_nod(g2, 0);
  assert_int_equal(m->n_attrs, 14);
  assert_int_equal(sc_attr_int(g2, m, "i", 0), -9000000000LL);
  assert_true(sc_attr_float(g2, m, "f", 0) == (double)0.1f);
  assert_true(sc_attr_float(g2, m, "f_tiny", 0) == (double)1e-5f);
  assert_true(isinf(sc_attr_float(g2, m, "f_inf", 0)));
  assert_string_equal(sc_attr_string(g2, m, "s", ""), "quote\" back\\ nl\n tab\t \x01 \xc3\xa9");
  const int64_t *iv;
  assert_int_equal(sc_attr_ints(g2, m, "ints", &iv), 3);
  assert_true(iv[2] == INT64_MAX);
  const double *fv;
  assert_int_equal(sc_attr_floats(g2, m, "floats", &fv), 3);
  assert_true(fv[1] == 2.5 && signbit(fv[2]));
  const sc_attr *sa = sc_node_attr(m, "strings");
  assert_int_equal(sa->kind, SC_ATTR_STRINGS);
  assert_string_equal(sa->strings[1], "b c");
  assert_string_equal(sa->strings[2], "");
  assert_int_equal(sc_node_attr(m, "empty")->kind, SC_ATTR_INTS);
  assert_int_equal(sc_node_attr(m, "empty")->n, 0);
  assert_int_equal(sc_attr_floats(g2, m, "empty", &fv), 0); /* empty list as floats */
  const sc_tensor *t = sc_attr_tensor(g2, m, "t");
  assert_non_null(t);
  assert_int_equal(t->dims[0], 3);
  assert_memory_equal(t->data, tdata, sizeof tdata);
  assert_int_equal(sc_node_attr(m, "body")->kind, SC_ATTR_GRAPH);
  assert_int_equal(sc_node_attr(m, "tp")->kind, SC_ATTR_TYPE_PROTO);
  sc_graph_destroy(g2);
  sc_free(text);
  sc_graph_destroy(g);
}

/* Random floats of every float dtype print and parse back bit-exactly. */
static void test_float_round_trip(void **state) {
  (void)state;
  srand(1234);
  sc_graph *g = sc_graph_create("floats");
  float f32[SC_TEXT_INLINE_MAX];
  double f64[SC_TEXT_INLINE_MAX];
  uint16_t f16[SC_TEXT_INLINE_MAX], bf16[SC_TEXT_INLINE_MAX];
  for (int i = 0; i < SC_TEXT_INLINE_MAX; i++) {
    double r = ((double)rand() / RAND_MAX - 0.5) * pow(10.0, rand() % 20 - 10);
    f32[i] = (float)r;
    f64[i] = r * (1.0 + 1e-13 * (rand() % 1000));
    f16[i] = sc_f32_to_f16((float)r);
    bf16[i] = sc_f32_to_bf16((float)r);
  }
  int64_t dims[1] = {SC_TEXT_INLINE_MAX};
  int32_t ids[4];
  const char *names[4] = {"a", "b", "c", "d"};
  sc_dtype types[4] = {SC_DTYPE_F32, SC_DTYPE_F64, SC_DTYPE_F16, SC_DTYPE_BF16};
  const void *datas[4] = {f32, f64, f16, bf16};
  uint64_t sizes[4] = {sizeof f32, sizeof f64, sizeof f16, sizeof bf16};
  for (int k = 0; k < 4; k++) {
    ids[k] = sc_graph_add_value(g, names[k]);
    assert_int_equal(sc_value_set_data(g, ids[k], types[k], 1, dims, datas[k], sizes[k], true),
                     SC_OK);
    sc_graph_add_output(g, ids[k]);
  }
  char *text = assert_round_trip(g);
  sc_graph *g2 = parse_ok(text);
  for (int k = 0; k < 4; k++) {
    const sc_value *v = sc_val(g2, sc_graph_find_value(g2, names[k]));
    assert_int_equal(v->dtype, types[k]);
    assert_memory_equal(v->data, datas[k], sizes[k]);
  }
  sc_graph_destroy(g2);
  sc_free(text);
  sc_graph_destroy(g);
}

/* Constants above SC_TEXT_INLINE_MAX elements print without data and parse
 * back as constants whose data is absent. */
static void test_large_const_elided(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("big");
  float data[SC_TEXT_INLINE_MAX + 1];
  for (int i = 0; i <= SC_TEXT_INLINE_MAX; i++) data[i] = (float)i * 0.5f + 1.0f;
  int32_t v = sc_graph_add_value(g, "w");
  int64_t dims[1] = {SC_TEXT_INLINE_MAX + 1};
  sc_value_set_data(g, v, SC_DTYPE_F32, 1, dims, data, sizeof data, true);
  sc_graph_add_output(g, v);
  char *text = assert_round_trip(g);
  assert_non_null(strstr(text, "const %w : f32[65]\n"));
  sc_graph *g2 = parse_ok(text);
  const sc_value *w = sc_val(g2, 0);
  assert_true(sc_value_is_const(w));
  assert_false(sc_value_has_data(w));
  sc_graph_destroy(g2);
  sc_free(text);
  sc_graph_destroy(g);
}

/* Expects parsing to fail with diag "line N: ..." containing `what`. */
static void expect_parse_error(const char *text, size_t len, int line, const char *what) {
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_ir_parse(text, len, "bad.ir", &g, &d);
  if (st == SC_OK) fail_msg("parsed, expected an error containing '%s':\n%.*s", what, (int)len, text);
  assert_null(g);
  assert_string_equal(d.file, "bad.ir");
  char want[64];
  snprintf(want, sizeof want, "line %d: ", line);
  if (strncmp(d.msg, want, strlen(want)) != 0 || !strstr(d.msg, what))
    fail_msg("error '%s' does not start with '%s' or lacks '%s'", d.msg, want, what);
}
#define EXPECT_ERROR(text, line, what) expect_parse_error(text, strlen(text), line, what)

#define HDR "shardc.ir 1\ngraph \"g\" opset 17 {\n"
static void test_parse_errors(void **state) {
  (void)state;
  EXPECT_ERROR("", 1, "expected 'shardc.ir 1'");
  EXPECT_ERROR("shardc.ir 2\n", 1, "unsupported IR text version 2");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%z) \"r\"\n}\n", 4, "unknown value '%z'");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  input %x : f32[2]\n}\n", 4, "defined twice");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Frobnicate(%x)\n}\n", 4, "unknown op 'Frobnicate'");
  EXPECT_ERROR(HDR "  input %x : q32[2]\n}\n", 3, "unknown dtype 'q32'");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) \"unterminated\n}\n", 4,
               "unterminated string");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {s = \"abc}\n", 4, "unterminated string");
  EXPECT_ERROR(HDR "  input %x : f32[99999999999999999999]\n}\n", 3, "out of range");
  EXPECT_ERROR(HDR "  input %x : f32[1125899906842625]\n}\n", 3, "dim 1125899906842625 out of range");
  EXPECT_ERROR(HDR "  input %x : f32[1048576,1048576,1048576]\n}\n", 3, "more than 2^50");
  EXPECT_ERROR(HDR "  input %x : f32[1,1,1,1,1,1,1,1,1]\n}\n", 3, "rank above 8");
  EXPECT_ERROR(HDR "  input %x : f32[-3]\n}\n", 3, "dim -3 out of range");
  EXPECT_ERROR(HDR "  const %c : i64[2] = [1, 2, 3]\n}\n", 3, "more than 2 elements");
  EXPECT_ERROR(HDR "  const %c : i64[3] = [1, 2]\n}\n", 3, "2 elements for a shape of 3");
  EXPECT_ERROR(HDR "  const %c : i8[1] = [300]\n}\n", 3, "300 out of range for i8");
  EXPECT_ERROR(HDR "  const %c : i64[1] = [1.5]\n}\n", 3, "expected an integer");
  EXPECT_ERROR(HDR "  const %c : bool[1] = [yes]\n}\n", 3, "expected true or false");
  EXPECT_ERROR(HDR "  const %c : f32[1000000000] = [1.0]\n}\n", 3, "1 elements for a shape of");
  EXPECT_ERROR(HDR "  const %c : i64[batch=2] = [1, 2]\n}\n", 3, "symbolic dims");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {a = 1, a = 2}\n}\n", 4, "given twice");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {a = <nope>}\n}\n", 4, "unknown attribute kind");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {s = \"\\q\"}\n}\n", 4, "unknown escape");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {s = \"\\x0\"}\n}\n", 4, "two hex digits");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%x) {s = \"\\x00\"}\n}\n", 4, "not allowed");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  %y = Relu(%y)\n}\n", 4, "unknown value '%y'");
  EXPECT_ERROR(HDR "  input %x : f32[2]\n  output %x\n", 5, "missing '}'");
  EXPECT_ERROR(HDR "}\ntrailing\n", 4, "after the graph");
  EXPECT_ERROR(HDR "  input % x : f32[2]\n}\n", 3, "right after '%'");
  EXPECT_ERROR(HDR "  input %\"\" : f32[2]\n}\n", 3, "empty a value name");
  EXPECT_ERROR(HDR "  output %nothing\n}\n", 3, "unknown value");
  EXPECT_ERROR("shardc.ir 1\ngraph \"g\" opset 99 {\n}\n", 2, "opset 99");
  /* a NUL byte in the middle of the text */
  static const char nul[] = HDR "  input %x\0 : f32[2]\n}\n";
  expect_parse_error(nul, sizeof nul - 1, 3, "expected");
}

static void test_hostile_text(void **state) {
  (void)state;
  /* deep nesting / long garbage: error, no crash, no huge allocation */
  size_t n = 1 << 16;
  char *buf = malloc(n);
  assert_non_null(buf);
  memset(buf, '[', n);
  sc_graph *g = NULL;
  sc_diag d = {0};
  assert_int_not_equal(sc_ir_parse(buf, n, "x", &g, &d), SC_OK);
  memcpy(buf, HDR "  input %x : f32[", strlen(HDR "  input %x : f32["));
  assert_int_not_equal(sc_ir_parse(buf, n, "x", &g, &d), SC_OK);
  free(buf);
  /* random mutations of valid text: any status, never a crash; whatever
   * parses prints and parses again to the same text */
  srand(42);
  size_t len = strlen(SAMPLE_IR);
  char *m = malloc(len + 16);
  int parsed = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(m, SAMPLE_IR, len);
    size_t mlen = len;
    int edits = 1 + rand() % 3;
    for (int e = 0; e < edits; e++) {
      size_t pos = (size_t)rand() % mlen;
      switch (rand() % 3) {
      case 0: m[pos] = (char)(rand() % 256); break;                 /* flip */
      case 1: memmove(m + pos, m + pos + 1, mlen - pos - 1); mlen--; break; /* delete */
      default: mlen = pos; break;                                    /* truncate */
      }
      if (mlen == 0) break;
    }
    sc_graph *mg = NULL;
    sc_diag md = {0};
    if (sc_ir_parse(m, mlen, "fuzz", &mg, &md) == SC_OK) {
      parsed++;
      char *t = assert_round_trip(mg);
      sc_free(t);
      sc_graph_destroy(mg);
    } else {
      assert_null(mg);
      assert_true(strncmp(md.msg, "line ", 5) == 0);
    }
  }
  free(m);
  assert_true(parsed > 0);
}

/* Each sample model after the canonical pipeline round-trips through text,
 * and the parsed graph passes the verifier with shapes. */
static void test_samples_round_trip(void **state) {
  (void)state;
  static const char *const samples[] = {"mlp", "resnet", "bert", "gpt2", "llama", "vit",
                                        "gpt_1p5b"};
  int done = 0;
  char missing[256] = "";
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/samples/%s.onnx", SC_SOURCE_DIR, samples[i]);
    FILE *f = fopen(path, "rb");
    if (!f) { /* sample not generated on this machine */
      size_t k = strlen(missing);
      snprintf(missing + k, sizeof missing - k, " %s", samples[i]);
      continue;
    }
    fclose(f);
    sc_import_opts io = {.no_weights = true};
    sc_graph *g = NULL;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_onnx_import(path, &io, &g, &d) != SC_OK) {
      char buf[2048];
      sc_diag_format(&d, buf, sizeof buf);
      fail_msg("import %s: %s", samples[i], buf);
    }
    sc_pass_opts po;
    sc_pass_opts_init(&po);
    po.quiet = true;
    po.verify = true;
    if (sc_run_passes(g, SC_CANONICAL_PASSES, &po) != SC_OK) {
      char buf[2048];
      sc_diag_format(&g->diag, buf, sizeof buf);
      fail_msg("canonical passes on %s: %s", samples[i], buf);
    }
    char *text = assert_round_trip(g);
    sc_graph *g2 = parse_ok(text);
    assert_int_equal(g2->n_nodes, g->n_nodes);
    assert_int_equal(g2->n_values, g->n_values);
    assert_int_equal(sc_graph_verify(g2, true), SC_OK);
    sc_graph_destroy(g2);
    sc_free(text);
    sc_graph_destroy(g);
    done++;
  }
  print_message("round-tripped %d sample models\n", done);
  if (done == 0) SC_SKIP("no sample model generated in %s/samples", SC_SOURCE_DIR);
  if (missing[0]) print_message("PARTIAL SKIP: samples not generated here:%s\n", missing);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_text),   cmocka_unit_test(test_attr_kinds),
      cmocka_unit_test(test_float_round_trip),  cmocka_unit_test(test_large_const_elided),
      cmocka_unit_test(test_parse_errors),      cmocka_unit_test(test_hostile_text),
      cmocka_unit_test(test_samples_round_trip),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
