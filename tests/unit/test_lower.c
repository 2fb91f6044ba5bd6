/* test_lower.c — lowering of the elementwise, reduction and normalisation
 * ops, fusion and program construction, checked against the ops' constant
 * evaluation.
 *
 * Each case is a small graph in textual IR. It runs twice:
 *   program  graph inputs fed with seeded random data (never zeros), passes
 *            infer-shapes (and fuse, in the fused run), sc_program_from_graph,
 *            then a tiny executor below runs every kernel step through
 *            kir_interpret (the reference interpreter of codegen/kir.c);
 *   oracle   the same graph with those inputs turned into constants:
 *            infer-shapes evaluates every node through sc_ops[op].eval. Ops
 *            that are never folded (the normalisations) are checked against
 *            a direct double-precision reference written here instead.
 * Integer and bool outputs must match exactly. Float outputs must satisfy
 *   |got - want| <= 1e-5 * |want| + 1e-6 * max(1, max |want|)
 * the absolute term covering float32 accumulation (reductions, norms,
 * cumulative sums) against the oracle's double accumulation when a result
 * cancels to near zero; NaN fails unless the oracle is NaN too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "codegen/compile.h"
#include "test_util.h"

#include "codegen/kir.h"
#include "codegen/lower.h"
#include "codegen/program.h"
#include "ir/elementwise.h"
#include "ir/op_util.h"
#include "passes/pass.h"

typedef void (*ref_fn)(sc_graph *g, double *out);

/* Ops that some case has run (program vs oracle): test_every_elementwise_op
 * checks, last, that every op of elementwise.def is among them. */
static bool covered[SC_OP_COUNT];

typedef struct tcase {
  const char *body;   /* IR lines inside graph { } */
  double lo, hi;      /* float inputs: uniform in [lo, hi], |v| >= 0.05 */
  int ilo, ihi;       /* integer inputs: uniform in [ilo, ihi] without 0 */
  ref_fn ref;         /* oracle for output 0 when the op has no eval */
} tcase;

/* ---- random inputs ---- */

static void fill(sc_dtype t, void *data, int64_t n, const tcase *c) {
  for (int64_t i = 0; i < n; i++) {
    if (t == SC_DTYPE_BOOL) {
      ((uint8_t *)data)[i] = rng_unit() < 0.5;
    } else if (sc_dtype_is_float(t)) {
      double lo = c->lo, hi = c->hi;
      if (lo == 0 && hi == 0) lo = -2, hi = 2;
      sc_store_f64(t, data, i, rnd_nz(lo, hi));
    } else {
      int lo = c->ilo, hi = c->ihi;
      if (lo == 0 && hi == 0) lo = -9, hi = 9;
      int64_t v;
      do v = lo + (int64_t)(rng_unit() * (hi - lo + 1)); while (v == 0 || v > hi);
      sc_store_i64(t, data, i, v);
    }
  }
}

/* ---- the executor ---- */

static void run_program(sc_program *p, void *const *inputs) {
  void **mem = calloc((size_t)p->n_buffers + 1, sizeof *mem);
  assert_non_null(mem);
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *buf = &p->buffers[b];
    if (buf->kind == SC_BUF_CONST) {
      mem[b] = (void *)buf->data;
      assert_non_null(mem[b]);
    } else if (buf->kind != SC_BUF_VIEW) {
      mem[b] = malloc((size_t)buf->bytes + 1);
      assert_non_null(mem[b]);
      memset(mem[b], 0xff, (size_t)buf->bytes + 1); /* NaN / -1: unwritten shows */
    }
  }
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == SC_BUF_VIEW) mem[b] = mem[sc_program_root(p, b)];
  for (int32_t i = 0; i < p->n_inputs; i++) {
    int32_t b = p->inputs[i];
    memcpy(mem[b], inputs[i], (size_t)p->buffers[b].bytes);
  }
  for (int32_t s = 0; s < p->n_steps; s++) {
    const sc_step *st = &p->steps[s];
    assert_int_equal(st->kind, SC_STEP_KERNEL);
    const kir_kernel *k = p->kernels[st->kernel];
    void *bufs[64];
    assert_true(k->n_params <= 64);
    for (int32_t j = 0; j < k->n_params; j++) bufs[j] = mem[k->params[j].buffer];
    sc_diag d = {0};
    sc_diag_clear(&d);
    sc_status rc = kir_interpret(k, bufs, &d);
    if (rc != SC_OK) {
      kir_print(k, stderr);
      fail_msg("kernel %s: %s", k->name, d.msg);
    }
  }
  /* hand the outputs back through the inputs' slots: keep mem alive */
  for (int32_t i = 0; i < p->n_outputs; i++) {
    int32_t b = p->outputs[i];
    void *copy = malloc((size_t)p->buffers[b].bytes + 1);
    assert_non_null(copy);
    memcpy(copy, mem[sc_program_root(p, b)], (size_t)p->buffers[b].bytes);
    ((void **)inputs)[64 + i] = copy;
  }
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind != SC_BUF_CONST && p->buffers[b].kind != SC_BUF_VIEW) free(mem[b]);
  free(mem);
}

/* ---- comparing ---- */

static void compare(const sc_value *v, const void *got, const double *want_f,
                    const void *want, const char *what) {
  int64_t n = sc_value_numel(v);
  sc_dtype t = v->dtype;
  if (!sc_dtype_is_float(t)) {
    for (int64_t i = 0; i < n; i++) {
      int64_t a = sc_load_i64(t, got, i);
      int64_t b = want_f ? (int64_t)want_f[i] : sc_load_i64(t, want, i);
      if (a != b) fail_msg("%s: output '%s'[%lld] = %lld, expected %lld", what, v->name,
                           (long long)i, (long long)a, (long long)b);
    }
    return;
  }
  double scale = 1;
  for (int64_t i = 0; i < n; i++) {
    double b = want_f ? want_f[i] : sc_load_f64(t, want, i);
    if (fabs(b) > scale && isfinite(b)) scale = fabs(b);
  }
  for (int64_t i = 0; i < n; i++) {
    double a = sc_load_f64(t, got, i);
    double b = want_f ? want_f[i] : sc_load_f64(t, want, i);
    if (isnan(b) && isnan(a)) continue;
    if (isinf(b) && a == b) continue;
    double tol = 1e-5 * fabs(b) + 1e-6 * scale;
    if (t == SC_DTYPE_F16 || t == SC_DTYPE_BF16) tol = 1e-2 * fabs(b) + 1e-3 * scale;
    if (!(fabs(a - b) <= tol))
      fail_msg("%s: output '%s'[%lld] = %.9g, expected %.9g", what, v->name,
               (long long)i, a, b);
  }
}

/* ---- running one case ---- */

static char *case_text(const tcase *c) {
  static char buf[8192];
  /* opset 21, or 23 for RMSNormalization (new in 23) */
  int opset = strstr(c->body, "RMSNormalization") ? 23 : 21;
  snprintf(buf, sizeof buf, "shardc.ir 1\ngraph \"t\" opset %d {\n%s}\n", opset, c->body);
  return buf;
}

/* Runs the case; returns the number of kernels of the program. */
static int32_t run_case(const tcase *c, int seed, bool fused) {
  const char *text = case_text(c);
  sc_graph *g = parse_ok(text);
  sc_graph *o = parse_ok(text);
  rng_seed((uint64_t)seed);
  void *inputs[64 + 16] = {0};
  assert_true(g->n_inputs <= 64 && g->n_outputs <= 16);
  int32_t n_in = g->n_inputs;
  for (int32_t i = 0; i < n_in; i++) {
    sc_value *v = &g->values[g->inputs[i]];
    int64_t n = sc_value_numel(v);
    size_t bytes = (size_t)n * sc_dtype_size(v->dtype);
    inputs[i] = malloc(bytes + 1);
    assert_non_null(inputs[i]);
    fill(v->dtype, inputs[i], n, c);
    int32_t ov = sc_graph_find_value(o, v->name);
    assert_true(ov >= 0);
    o->values[ov].flags &= ~(uint32_t)SC_VALUE_INPUT;
    assert_int_equal(sc_value_set_data(o, ov, v->dtype, v->rank, v->dims, inputs[i], bytes,
                                       true),
                     SC_OK);
  }
  o->n_inputs = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) covered[g->nodes[i].op] = true;
  sc_status st = sc_run_passes(o, "infer-shapes", NULL);
  if (st != SC_OK) fail_msg("oracle: %s", o->diag.msg);
  st = sc_run_passes(g, fused ? "infer-shapes,fuse" : "infer-shapes", NULL);
  if (st != SC_OK) fail_msg("passes: %s", g->diag.msg);
  sc_program *p = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  st = sc_program_from_graph(g, &p, &d);
  if (st != SC_OK) fail_msg("sc_program_from_graph: node '%s': %s", d.node, d.msg);
  assert_int_equal(p->n_inputs, n_in);
  assert_int_equal(p->n_outputs, g->n_outputs);
  run_program(p, inputs);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const sc_value *v = &g->values[g->outputs[i]];
    const sc_value *w = &o->values[sc_graph_find_value(o, v->name)];
    const void *got = inputs[64 + i];
    const char *what = fused ? "fused" : "unfused";
    if (sc_value_has_data(w)) {
      compare(v, got, NULL, w->data, what);
      if (c->ref && i == 0) { /* and the folded value against the reference */
        double *ref = calloc((size_t)sc_value_numel(v) + 1, sizeof *ref);
        assert_non_null(ref);
        c->ref(o, ref);
        compare(v, w->data, ref, NULL, "folded");
        compare(v, got, ref, NULL, what);
        free(ref);
      }
    } else {
      if (!c->ref || i != 0) fail_msg("no oracle for output '%s'", v->name);
      double *ref = calloc((size_t)sc_value_numel(v) + 1, sizeof *ref);
      assert_non_null(ref);
      c->ref(o, ref);
      compare(v, got, ref, NULL, what);
      free(ref);
    }
    free(inputs[64 + i]);
  }
  int32_t nk = p->n_kernels;
  for (int32_t i = 0; i < n_in; i++) free(inputs[i]);
  sc_program_destroy(p);
  sc_graph_destroy(g);
  sc_graph_destroy(o);
  return nk;
}

static void run_cases(const tcase *cs, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) {
    run_case(&cs[i], seed + (int)i, false);
    run_case(&cs[i], seed + (int)i, true);
  }
}

/* ---- references for the ops constant folding never evaluates ---- */

static const double *in_data(sc_graph *g, int32_t node, int32_t i, const sc_value **v) {
  *v = sc_node_input(g, &g->nodes[node], i);
  if (!*v) return NULL;
  int64_t n = sc_value_numel(*v);
  double *d = sc_arena_array(&g->arena, (size_t)n + 1, sizeof *d);
  for (int64_t k = 0; k < n; k++) d[k] = sc_load_f64((*v)->dtype, (*v)->data, k);
  return d;
}

static void ref_layernorm(sc_graph *g, double *out) {
  const sc_node *n = &g->nodes[0];
  const sc_value *xv, *sv, *bv;
  const double *x = in_data(g, 0, 0, &xv), *s = in_data(g, 0, 1, &sv), *b = in_data(g, 0, 2, &bv);
  int64_t axis = sc_attr_int(g, n, "axis", -1);
  if (axis < 0) axis += xv->rank;
  double eps = sc_attr_float(g, n, "epsilon", 1e-5);
  int64_t inner = 1, total = sc_value_numel(xv);
  for (int32_t d = (int32_t)axis; d < xv->rank; d++) inner *= xv->dims[d];
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t r = 0; r < total / inner; r++) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < inner; k++) mean += x[r * inner + k];
    mean /= (double)inner;
    for (int64_t k = 0; k < inner; k++) var += (x[r * inner + k] - mean) * (x[r * inner + k] - mean);
    var /= (double)inner;
    for (int64_t k = 0; k < inner; k++) {
      int64_t i = r * inner + k;
      double y = (x[i] - mean) / sqrt(var + eps) *
                 s[sc_bcast_offset(xv->rank, idx, sv->rank, sv->dims)];
      if (b) y += b[sc_bcast_offset(xv->rank, idx, bv->rank, bv->dims)];
      out[i] = y;
      sc_next_index(xv->rank, xv->dims, idx);
    }
  }
}

static void ref_rmsnorm(sc_graph *g, double *out) {
  const sc_node *n = &g->nodes[0];
  const sc_value *xv, *sv;
  const double *x = in_data(g, 0, 0, &xv), *s = in_data(g, 0, 1, &sv);
  int64_t axis = sc_attr_int(g, n, "axis", -1);
  if (axis < 0) axis += xv->rank;
  double eps = sc_attr_float(g, n, "epsilon", 1e-5);
  int64_t inner = 1, total = sc_value_numel(xv);
  for (int32_t d = (int32_t)axis; d < xv->rank; d++) inner *= xv->dims[d];
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t r = 0; r < total / inner; r++) {
    double ss = 0;
    for (int64_t k = 0; k < inner; k++) ss += x[r * inner + k] * x[r * inner + k];
    double rms = sqrt(ss / (double)inner + eps);
    for (int64_t k = 0; k < inner; k++) {
      int64_t i = r * inner + k;
      /* scale broadcasts against the trailing dims of X */
      out[i] = x[i] / rms * s[sc_bcast_offset(xv->rank, idx, sv->rank, sv->dims)];
      sc_next_index(xv->rank, xv->dims, idx);
    }
  }
}

/* GroupNorm (num_groups attr) and InstanceNorm (groups = channels). */
static void ref_groupnorm(sc_graph *g, double *out) {
  const sc_node *n = &g->nodes[0];
  const sc_value *xv, *sv, *bv;
  const double *x = in_data(g, 0, 0, &xv), *s = in_data(g, 0, 1, &sv), *b = in_data(g, 0, 2, &bv);
  int64_t ch = xv->dims[1], spatial = 1;
  for (int32_t d = 2; d < xv->rank; d++) spatial *= xv->dims[d];
  int64_t groups = n->op == SC_OP_GROUP_NORM ? sc_attr_int(g, n, "num_groups", 1) : ch;
  double eps = sc_attr_float(g, n, "epsilon", 1e-5);
  int64_t per = ch / groups * spatial;
  for (int64_t r = 0; r < xv->dims[0] * groups; r++) {
    const double *row = x + r * per;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < per; k++) mean += row[k];
    mean /= (double)per;
    for (int64_t k = 0; k < per; k++) var += (row[k] - mean) * (row[k] - mean);
    var /= (double)per;
    for (int64_t k = 0; k < per; k++) {
      int64_t c = (r % groups) * (ch / groups) + k / spatial;
      int64_t pi = sv->dims[0] == ch ? c : r % groups;
      out[r * per + k] = (row[k] - mean) / sqrt(var + eps) * s[pi] + b[pi];
    }
  }
}

static void ref_batchnorm(sc_graph *g, double *out) {
  const sc_node *n = &g->nodes[0];
  const sc_value *v[5];
  const double *d[5];
  for (int32_t i = 0; i < 5; i++) d[i] = in_data(g, 0, i, &v[i]);
  double eps = sc_attr_float(g, n, "epsilon", 1e-5);
  int64_t ch = v[0]->dims[1], spatial = 1;
  for (int32_t k = 2; k < v[0]->rank; k++) spatial *= v[0]->dims[k];
  for (int64_t i = 0; i < sc_value_numel(v[0]); i++) {
    int64_t c = i / spatial % ch;
    out[i] = (d[0][i] - d[3][c]) / sqrt(d[4][c] + eps) * d[1][c] + d[2][c];
  }
}

/* Unary ops without attributes, by ONNX's defaults (written here, not read
 * from the compiler): Selu alpha 1.67326..., gamma 1.05070...; HardSigmoid
 * alpha 0.2, beta 0.5; LeakyRelu alpha 0.01; Elu alpha 1. */
static void ref_default_attrs(sc_graph *g, double *out) {
  const sc_value *xv;
  const double *x = in_data(g, 0, 0, &xv);
  for (int64_t i = 0; i < sc_value_numel(xv); i++) {
    double v = x[i];
    switch (g->nodes[0].op) {
    case SC_OP_SELU:
      out[i] = 1.05070102214813232421875 *
               (v > 0 ? v : 1.67326319217681884765625 * (exp(v) - 1));
      break;
    case SC_OP_HARD_SIGMOID: out[i] = fmax(0, fmin(1, 0.2 * v + 0.5)); break;
    case SC_OP_LEAKY_RELU: out[i] = v < 0 ? 0.01 * v : v; break;
    case SC_OP_ELU: out[i] = v < 0 ? exp(v) - 1 : v; break;
    default: fail_msg("no reference for %s", sc_op_name(g->nodes[0].op));
    }
  }
}

/* ---- the cases ---- */

static const char *const unary_float[] = {
    "Abs", "Neg", "Exp", "Sqrt", "Log", "Reciprocal", "Relu", "Sigmoid", "Tanh", "Erf",
    "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus", "HardSigmoid",
    "HardSwish", "LeakyRelu", "Elu", "Selu", "Mish", "Gelu", "IsNaN", "IsInf", "Identity",
    "Celu", "ThresholdedRelu", "Softsign", "Shrink", "Sinh", "Cosh", "Asinh", "Atan"};

static void test_unary_float(void **state) {
  (void)state;
  char body[512];
  for (size_t i = 0; i < sizeof unary_float / sizeof unary_float[0]; i++) {
    const char *op = unary_float[i];
    bool pos = !strcmp(op, "Sqrt") || !strcmp(op, "Log");
    snprintf(body, sizeof body,
             "  input %%x : f32[3,7]\n  %%y = %s(%%x)\n  output %%y\n", op);
    tcase c = {body, pos ? 0.1 : -3, 3, 0, 0, NULL};
    run_cases(&c, 1, 100 + (int)i);
  }
  static const tcase attrs[] = {
      {"  input %x : f32[4,5]\n  %y = Gelu(%x) {approximate = \"tanh\"}\n  output %y\n",
       -2, 2, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = HardSigmoid(%x) {alpha = 0.3, beta = 0.4}\n  output %y\n",
       -4, 4, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = LeakyRelu(%x) {alpha = 0.2}\n  output %y\n", -2, 2, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = Elu(%x) {alpha = 0.7}\n  output %y\n", -0.3, 0.3, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = Celu(%x) {alpha = 0.6}\n  output %y\n", -2, 2, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = Tan(%x)\n  output %y\n", -1.2, 1.2, 0, 0, NULL},
      /* the inverse functions inside their domains */
      {"  input %x : f32[4,5]\n  %a = Asin(%x)\n  %b = Acos(%x)\n  %c = Atanh(%x)\n"
       "  output %a\n  output %b\n  output %c\n", -0.95, 0.95, 0, 0, NULL},
      {"  input %x : f64[4,5]\n  %y = Acosh(%x)\n  output %y\n", 1.0, 6, 0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = ThresholdedRelu(%x) {alpha = 0.3}\n  output %y\n", -2, 2,
       0, 0, NULL},
      {"  input %x : f32[4,5]\n  %y = Shrink(%x) {lambd = 0.4, bias = 0.25}\n  output %y\n", -2,
       2, 0, 0, NULL},
      {"  input %x : i32[4,5]\n  %y = Shrink(%x) {lambd = 2.0, bias = 1.0}\n  output %y\n", 0, 0,
       -9, 9, NULL},
      {"  input %x : f64[4,5]\n  %y = Softplus(%x)\n  output %y\n", -40, 40, 0, 0, NULL},
      {"  input %x : f64[4,5]\n  %y = Tanh(%x)\n  %z = Exp(%y)\n  output %z\n", -2, 2, 0, 0, NULL},
  };
  run_cases(attrs, sizeof attrs / sizeof attrs[0], 200);
}

static void test_unary_int_bool(void **state) {
  (void)state;
  static const tcase cs[] = {
      {"  input %x : i32[3,5]\n  %y = Abs(%x)\n  %z = Neg(%y)\n  %w = Relu(%x)\n"
       "  %s = Sign(%x)\n  output %z\n  output %w\n  output %s\n", 0, 0, -9, 9, NULL},
      {"  input %x : i64[6]\n  %y = Relu(%x)\n  %s = Sign(%x)\n  output %y\n  output %s\n",
       0, 0, -50, 50, NULL},
      {"  input %x : u8[6]\n  %y = Relu(%x)\n  %a = Abs(%x)\n  output %y\n  output %a\n",
       0, 0, 1, 200, NULL},
      {"  input %x : bool[2,3]\n  %y = Not(%x)\n  output %y\n", 0, 0, 0, 0, NULL},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 300);
}

static void test_binary(void **state) {
  (void)state;
  static const char *const arith[] = {"Add", "Sub", "Mul", "Div"};
  static const char *const cmp[] = {"Equal", "Less", "LessOrEqual", "Greater",
                                    "GreaterOrEqual"};
  static const char *const types[] = {"f32", "i32", "i64", "f64"};
  char body[512];
  int seed = 400;
  for (size_t t = 0; t < 4; t++) {
    for (size_t i = 0; i < 4; i++) {
      snprintf(body, sizeof body,
               "  input %%a : %s[3,1,5]\n  input %%b : %s[4,1]\n  %%y = %s(%%a, %%b)\n"
               "  output %%y\n", types[t], types[t], arith[i]);
      tcase c = {body, -3, 3, -20, 20, NULL};
      run_cases(&c, 1, seed++);
    }
    for (size_t i = 0; i < 5; i++) {
      snprintf(body, sizeof body,
               "  input %%a : %s[2,5]\n  input %%b : %s[5]\n  %%y = %s(%%a, %%b)\n"
               "  output %%y\n", types[t], types[t], cmp[i]);
      /* small integer range so Equal is sometimes true */
      tcase c = {body, -3, 3, -2, 2, NULL};
      run_cases(&c, 1, seed++);
    }
  }
  static const tcase cs[] = {
      {"  input %a : i32[4,6]\n  input %b : i32[6]\n  %y = Mod(%a, %b)\n  output %y\n",
       0, 0, -20, 20, NULL},
      {"  input %a : i64[4,6]\n  input %b : i64[4,1]\n  %y = Mod(%a, %b) {fmod = 1}\n"
       "  output %y\n", 0, 0, -20, 20, NULL},
      {"  input %a : f32[4,6]\n  input %b : f32[6]\n  %y = Mod(%a, %b) {fmod = 1}\n"
       "  output %y\n", -5, 5, 0, 0, NULL},
      {"  input %a : f32[3,4]\n  input %b : f32[4]\n  %y = Pow(%a, %b)\n  output %y\n",
       0.2, 2, 0, 0, NULL},
      {"  input %a : f32[3,4]\n  const %e : i64[] = [3]\n  %y = Pow(%a, %e)\n  output %y\n",
       -2, 2, 0, 0, NULL},
      {"  input %a : i32[3,4]\n  input %e : i32[4]\n  %y = Pow(%a, %e)\n  output %y\n",
       0, 0, -4, 4, NULL},
      {"  input %a : f32[2,3,4]\n  input %s : f32[3,1]\n  %y = PRelu(%a, %s)\n  output %y\n",
       -2, 2, 0, 0, NULL},
      {"  input %a : bool[3,4]\n  input %b : bool[4]\n  %x = And(%a, %b)\n  %o = Or(%a, %b)\n"
       "  %e = Xor(%a, %b)\n  %q = Equal(%a, %b)\n  output %x\n  output %o\n  output %e\n"
       "  output %q\n", 0, 0, 0, 0, NULL},
      /* bitwise ops on signed and unsigned integers, broadcast */
      {"  input %a : i8[3,4]\n  input %b : i8[4]\n  %x = BitwiseAnd(%a, %b)\n"
       "  %o = BitwiseOr(%a, %b)\n  %e = BitwiseXor(%a, %b)\n  %n = BitwiseNot(%a)\n"
       "  output %x\n  output %o\n  output %e\n  output %n\n", 0, 0, -120, 120, NULL},
      {"  input %a : u16[2,5]\n  input %b : u16[2,1]\n  %x = BitwiseAnd(%a, %b)\n"
       "  %n = BitwiseNot(%b)\n  output %x\n  output %n\n", 0, 0, 1, 60000, NULL},
      {"  input %a : i64[2,5]\n  input %b : i64[5]\n  %x = BitwiseXor(%a, %b)\n"
       "  %n = BitwiseNot(%a)\n  output %x\n  output %n\n", 0, 0, -90000, 90000, NULL},
      /* shifts: counts from 1 to 70 cross every width (a count >= it gives 0) */
      {"  input %a : u8[4,6]\n  input %b : u8[6]\n  %l = BitShift(%a, %b) {direction = \"LEFT\"}\n"
       "  %r = BitShift(%a, %b) {direction = \"RIGHT\"}\n  output %l\n  output %r\n",
       0, 0, 1, 70, NULL},
      {"  input %a : u32[4,6]\n  input %b : u32[4,1]\n"
       "  %l = BitShift(%a, %b) {direction = \"LEFT\"}\n"
       "  %r = BitShift(%a, %b) {direction = \"RIGHT\"}\n  output %l\n  output %r\n",
       0, 0, 1, 70, NULL},
      {"  input %a : u64[4,6]\n  input %b : u64[6]\n  %l = BitShift(%a, %b) {direction = \"LEFT\"}\n"
       "  %r = BitShift(%a, %b) {direction = \"RIGHT\"}\n  output %l\n  output %r\n",
       0, 0, 1, 70, NULL},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 500);
}

static void test_variadic_where_cast_clip(void **state) {
  (void)state;
  static const tcase cs[] = {
      {"  input %a : f32[2,3,4]\n  input %b : f32[3,1]\n  input %c : f32[4]\n"
       "  %mx = Max(%a, %b, %c)\n  %mn = Min(%a, %b, %c)\n  %s = Sum(%a, %b, %c)\n"
       "  %m = Mean(%a, %b, %c)\n  %one = Max(%c)\n"
       "  output %mx\n  output %mn\n  output %s\n  output %m\n  output %one\n", -3, 3, 0, 0, NULL},
      {"  input %a : i64[2,3]\n  input %b : i64[3]\n  %mx = Max(%a, %b)\n  %s = Sum(%a, %b)\n"
       "  output %mx\n  output %s\n", 0, 0, -9, 9, NULL},
      {"  input %c : bool[3,1]\n  input %x : f32[3,4]\n  input %y : f32[4]\n"
       "  %w = Where(%c, %x, %y)\n  output %w\n", -3, 3, 0, 0, NULL},
      {"  input %x : f32[3,4]\n  %i = Cast(%x) {to = 6}\n  %b = Cast(%x) {to = 9}\n"
       "  %d = Cast(%x) {to = 11}\n  %h = Cast(%x) {to = 10}\n"
       "  output %i\n  output %b\n  output %d\n  output %h\n", -40, 40, 0, 0, NULL},
      {"  input %x : i32[3,4]\n  input %like : f32[1]\n  %f = CastLike(%x, %like)\n"
       "  %u = Cast(%x) {to = 2}\n  output %f\n  output %u\n", 0, 0, -300, 300, NULL},
      {"  input %x : f32[3,4]\n  const %lo : f32[] = [-0.5]\n  const %hi : f32[] = [1.25]\n"
       "  %y = Clip(%x, %lo, %hi)\n  %z = Clip(%x, _, %hi)\n  output %y\n  output %z\n",
       -3, 3, 0, 0, NULL},
      {"  input %x : i32[3,4]\n  input %lo : i32[]\n  %y = Clip(%x, %lo)\n  output %y\n",
       0, 0, -9, 9, NULL},
      {"  input %x : f32[3,4]\n  %y, %m = Dropout(%x)\n  output %y\n  output %m\n",
       -3, 3, 0, 0, NULL},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 600);
}

static void test_views(void **state) {
  (void)state;
  static const tcase cs[] = {
      /* a view of an input that is a graph output: a copy kernel */
      {"  input %x : f32[2,6]\n  const %s : i64[2] = [3, 4]\n  %y = Reshape(%x, %s)\n"
       "  output %y\n", -3, 3, 0, 0, NULL},
      /* a reshape inside an elementwise chain becomes index arithmetic */
      {"  input %x : f32[2,6]\n  const %s : i64[3] = [3, 2, 2]\n  %a = Exp(%x)\n"
       "  %r = Reshape(%a, %s)\n  %t = Neg(%r)\n  output %t\n", -3, 3, 0, 0, NULL},
      /* an aliased view between two kernels */
      {"  input %x : f32[2,6]\n  const %s : i64[2] = [4, 3]\n"
       "  %a = Softmax(%x) {axis = -1}\n  %r = Reshape(%a, %s)\n"
       "  %m = ReduceMax(%r) {axes = [0], keepdims = 0}\n  output %m\n", -3, 3, 0, 0, NULL},
      {"  input %x : f32[2,1,6]\n  const %ax : i64[1] = [1]\n  %a = Sin(%x)\n"
       "  %q = Squeeze(%a, %ax)\n  %u = Unsqueeze(%q, %ax)\n  %f = Flatten(%u) {axis = 2}\n"
       "  %c = Cos(%f)\n  output %c\n  output %x\n", -3, 3, 0, 0, NULL},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 700);
}

static void test_reductions(void **state) {
  (void)state;
  static const char *const ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                    "ReduceProd", "ReduceL1", "ReduceL2",
                                    "ReduceSumSquare", "ReduceLogSumExp"};
  char body[512];
  int seed = 800;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    for (int keep = 0; keep < 2; keep++) {
      snprintf(body, sizeof body,
               "  input %%x : f32[3,4,5]\n  const %%ax : i64[2] = [0, -1]\n"
               "  %%y = %s(%%x, %%ax) {keepdims = %d}\n  %%z = %s(%%x) {keepdims = %d}\n"
               "  const %%a1 : i64[1] = [1]\n  %%w = %s(%%x, %%a1)\n"
               "  output %%y\n  output %%z\n  output %%w\n",
               ops[i], keep, ops[i], keep, ops[i]);
      tcase c = {body, 0.5, 1.5, 0, 0, NULL};
      run_cases(&c, 1, seed++);
      tcase c2 = {body, -2, 2, 0, 0, NULL};
      if (strcmp(ops[i], "ReduceProd") != 0) run_cases(&c2, 1, seed++);
    }
  }
  static const tcase cs[] = {
      {"  input %x : i32[3,4]\n  const %ax : i64[1] = [1]\n  %s = ReduceSum(%x, %ax)\n"
       "  %p = ReduceProd(%x, %ax)\n  %m = ReduceMax(%x, %ax) {keepdims = 0}\n"
       "  %n = ReduceMean(%x)\n  %q = ReduceSumSquare(%x, %ax)\n  %l = ReduceL2(%x, %ax)\n"
       "  output %s\n  output %p\n  output %m\n  output %n\n  output %q\n  output %l\n",
       0, 0, -9, 9, NULL},
      {"  input %x : f32[3,4]\n  const %ax : i64[0] = []\n"
       "  %y = ReduceSum(%x, %ax) {noop_with_empty_axes = 1}\n  output %y\n", -2, 2, 0, 0, NULL},
      {"  input %x : f32[3,0,2]\n  const %ax : i64[1] = [1]\n  %s = ReduceSum(%x, %ax)\n"
       "  %m = ReduceMax(%x, %ax)\n  %p = ReduceProd(%x, %ax)\n"
       "  output %s\n  output %m\n  output %p\n", -2, 2, 0, 0, NULL},
      {"  input %x : i32[3,5,4]\n  %a = ArgMax(%x) {axis = 1}\n"
       "  %b = ArgMin(%x) {axis = -1, keepdims = 0}\n"
       "  %c = ArgMax(%x) {axis = 1, select_last_index = 1}\n"
       "  %d = ArgMin(%x) {axis = 0, select_last_index = 1, keepdims = 0}\n"
       "  output %a\n  output %b\n  output %c\n  output %d\n", 0, 0, -3, 3, NULL},
      {"  input %x : f32[3,5,4]\n  %a = ArgMax(%x) {axis = 2}\n  %b = ArgMin(%x)\n"
       "  output %a\n  output %b\n", -2, 2, 0, 0, NULL},
      {"  input %x : f32[3,6]\n  const %ax : i64[] = [1]\n  %a = CumSum(%x, %ax)\n"
       "  %b = CumSum(%x, %ax) {exclusive = 1}\n  %c = CumSum(%x, %ax) {reverse = 1}\n"
       "  %d = CumSum(%x, %ax) {exclusive = 1, reverse = 1}\n"
       "  output %a\n  output %b\n  output %c\n  output %d\n", -2, 2, 0, 0, NULL},
      {"  input %x : i64[4,3]\n  const %ax : i32[1] = [0]\n  %a = CumSum(%x, %ax)\n"
       "  output %a\n", 0, 0, -9, 9, NULL},
      /* any length: 300 along the axis, both directions */
      {"  input %x : f32[2,300]\n  const %ax : i64[] = [-1]\n  %a = CumSum(%x, %ax)\n"
       "  %b = CumSum(%x, %ax) {exclusive = 1, reverse = 1}\n  output %a\n  output %b\n",
       -1, 1, 0, 0, NULL},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 900);
}

static void test_norms(void **state) {
  (void)state;
  static const tcase cs[] = {
      {"  input %x : f32[2,3,5]\n  %y = Softmax(%x)\n  %z = LogSoftmax(%x)\n"
       "  %u = Softmax(%x) {axis = 1}\n  %v = LogSoftmax(%x) {axis = 0}\n"
       "  output %y\n  output %z\n  output %u\n  output %v\n", -4, 4, 0, 0, NULL},
      {"  input %x : f32[2,3,8]\n  input %s : f32[8]\n  input %b : f32[8]\n"
       "  %y = LayerNormalization(%x, %s, %b) {axis = -1}\n  output %y\n",
       -2, 2, 0, 0, ref_layernorm},
      {"  input %x : f32[2,3,8]\n  input %s : f32[3,8]\n"
       "  %y = LayerNormalization(%x, %s) {axis = -2, epsilon = 0.001}\n  output %y\n",
       -2, 2, 0, 0, ref_layernorm},
      {"  input %x : f32[2,3,8]\n  input %s : f32[8]\n"
       "  %y = RMSNormalization(%x, %s)\n  output %y\n", -2, 2, 0, 0, ref_rmsnorm},
      {"  input %x : f32[2,3,4,8]\n  input %s : f32[4,1]\n"
       "  %y = RMSNormalization(%x, %s) {axis = -2, epsilon = 0.01}\n  output %y\n",
       -2, 2, 0, 0, ref_rmsnorm},
      {"  input %x : f16[3,16]\n  input %s : f16[16]\n"
       "  %y = RMSNormalization(%x, %s) {axis = 1}\n  output %y\n", -2, 2, 0, 0, ref_rmsnorm},
      {"  input %x : f32[2,4,3,3]\n  input %s : f32[4]\n  input %b : f32[4]\n"
       "  input %m : f32[4]\n  input %v : f32[4]\n"
       "  %y = BatchNormalization(%x, %s, %b, %m, %v) {epsilon = 0.01}\n  output %y\n",
       0.1, 2, 0, 0, ref_batchnorm},
      {"  input %x : f32[2,6,5]\n  input %s : f32[6]\n  input %b : f32[6]\n"
       "  %y = GroupNormalization(%x, %s, %b) {num_groups = 3}\n  output %y\n",
       -2, 2, 0, 0, ref_groupnorm},
      {"  input %x : f32[2,4,3,2]\n  input %s : f32[2]\n  input %b : f32[2]\n"
       "  %y = GroupNormalization(%x, %s, %b) {num_groups = 2, epsilon = 0.01}\n  output %y\n",
       -2, 2, 0, 0, ref_groupnorm},
      {"  input %x : f32[2,3,4,2]\n  input %s : f32[3]\n  input %b : f32[3]\n"
       "  %y = InstanceNormalization(%x, %s, %b)\n  output %y\n", -2, 2, 0, 0, ref_groupnorm},
  };
  run_cases(cs, sizeof cs / sizeof cs[0], 1000);
}

/* RMSNormalization is one row kernel: a REDUCE phase (sum of x*x, f32
 * accumulator even for f16) then one STORE phase reading its register. */
static void test_rmsnorm_row_kernel(void **state) {
  (void)state;
  static const char *const types[] = {"f32", "f16"};
  for (int t = 0; t < 2; t++) {
    char text[512];
    snprintf(text, sizeof text,
             "shardc.ir 1\ngraph \"t\" opset 23 {\n  input %%x : %s[2,3,8]\n"
             "  input %%s : %s[3,8]\n  %%y = RMSNormalization(%%x, %%s) {axis = -2}\n"
             "  output %%y\n}\n", types[t], types[t]);
    sc_graph *g = parse_ok(text);
    assert_int_equal(sc_run_passes(g, "infer-shapes,fuse", NULL), SC_OK);
    sc_program *p = NULL;
    sc_diag d = {0};
    sc_diag_clear(&d);
    assert_int_equal(sc_program_from_graph(g, &p, &d), SC_OK);
    assert_int_equal(p->n_kernels, 1);
    const kir_kernel *k = p->kernels[0];
    assert_int_equal(k->outer_rank, 1);
    assert_int_equal(k->outer_dims[0], 2);
    assert_int_equal(k->inner, 24);
    assert_int_equal(k->n_phases, 2);
    assert_int_equal(k->phases[0].kind, KIR_PHASE_REDUCE);
    assert_int_equal(k->phases[0].rop, KIR_RED_SUM);
    assert_int_equal(k->phases[0].acc_dtype, SC_DTYPE_F32);
    assert_int_equal(k->phases[1].kind, KIR_PHASE_STORE);
    sc_program_destroy(p);
    sc_graph_destroy(g);
  }
  /* at opset 21 the op does not exist yet */
  sc_graph *g = parse_ok("shardc.ir 1\ngraph \"t\" opset 21 {\n  input %x : f32[2,8]\n"
                         "  input %s : f32[8]\n  %y = RMSNormalization(%x, %s)\n"
                         "  output %y\n}\n");
  assert_int_equal(sc_run_passes(g, "infer-shapes", NULL), SC_ERR_UNSUPPORTED);
  assert_non_null(strstr(g->diag.msg, "23"));
  sc_graph_destroy(g);
}

/* LayerNormGrad (the fused backward of LayerNorm and RMSNorm) against its
 * folded value (double arithmetic, ir/op_nn.c; the finite-difference test
 * in test_autodiff.c checks that one): dX, dScale and dB, over one and over
 * two trailing axes, rows fewer than a column-sum run (one column kernel
 * storing dScale and dB) and more (42 rows: runs of 14, partial sums, then
 * a sum kernel), f32 and f16. Kernel counts: rows, columns and (more rows
 * than a run) sum. */
static void test_layernorm_grad(void **state) {
  (void)state;
  static const struct {
    tcase c;
    int32_t kernels;
  } cs[] = {
      {{"  input %dy : f32[3,8]\n  input %x : f32[3,8]\n  input %s : f32[8]\n"
        "  %dx, %ds, %db = LayerNormGrad(%dy, %x, %s) {axis = -1, epsilon = 0.001}\n"
        "  output %dx\n  output %ds\n  output %db\n", -2, 2, 0, 0, NULL}, 2},
      {{"  input %dy : f32[6,7,5]\n  input %x : f32[6,7,5]\n  input %s : f32[5]\n"
        "  %dx, %ds, %db = LayerNormGrad(%dy, %x, %s) {axis = 2, epsilon = 0.00001}\n"
        "  output %dx\n  output %ds\n  output %db\n", -2, 2, 0, 0, NULL}, 3},
      {{"  input %dy : f32[40,2,3]\n  input %x : f32[40,2,3]\n  input %s : f32[2,3]\n"
        "  %dx, %ds = LayerNormGrad(%dy, %x, %s) {axis = -2, epsilon = 0.01, rms = 1}\n"
        "  output %dx\n  output %ds\n", -2, 2, 0, 0, NULL}, 3},
      {{"  input %dy : f16[34,16]\n  input %x : f16[34,16]\n  input %s : f16[16]\n"
        "  %dx, %ds, %db = LayerNormGrad(%dy, %x, %s) {axis = 1}\n"
        "  output %dx\n  output %ds\n  output %db\n", -2, 2, 0, 0, NULL}, 3},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    run_case(&cs[i].c, 1200 + (int)i, false);
    assert_int_equal(run_case(&cs[i].c, 1200 + (int)i, true), cs[i].kernels);
  }
  /* malformed: Scale not the row's shape, an RMS gradient with a dB */
  static const char *const bad[] = {
      "  input %dy : f32[3,8]\n  input %x : f32[3,8]\n  input %s : f32[1,8]\n"
      "  %dx, %ds = LayerNormGrad(%dy, %x, %s)\n  output %dx\n",
      "  input %dy : f32[3,8]\n  input %x : f32[3,8]\n  input %s : f32[8]\n"
      "  %dx, %ds, %db = LayerNormGrad(%dy, %x, %s) {rms = 1}\n  output %dx\n"};
  static const char *const why[] = {"Scale", "dB"};
  for (int i = 0; i < 2; i++) {
    tcase c = {bad[i], 0, 0, 0, 0, NULL};
    sc_graph *g = parse_ok(case_text(&c));
    assert_int_equal(sc_run_passes(g, "infer-shapes", NULL), SC_ERR_INVALID);
    assert_non_null(strstr(g->diag.msg, why[i]));
    sc_graph_destroy(g);
  }
}

/* SoftmaxCrossEntropy (one row kernel: the rows' losses and lse) and its
 * gradient (pointwise, fused with the Expand of dLoss) against their folded
 * values (double; test_autodiff.c checks the gradient against finite
 * differences). Labels in [-1, 6] over 7 classes with ignore_index -1:
 * ignored rows; f32 and bf16 logits (lse and the losses f32 either way). */
static void test_softmax_cross_entropy(void **state) {
  (void)state;
  static const tcase cs[] = {
      {"  input %x : f32[4,3,7]\n  input %l : i64[4,3]\n"
       "  const %h : f32[] = [0.25]\n  const %sh : i64[2] = [4, 3]\n"
       "  %r, %s = SoftmaxCrossEntropy(%x, %l) {ignore_index = -1}\n"
       "  %d = Expand(%h, %sh)\n"
       "  %dx = SoftmaxCrossEntropyGrad(%d, %x, %l, %s) {ignore_index = -1}\n"
       "  output %r\n  output %s\n  output %dx\n", -4, 4, -1, 6, NULL},
      {"  input %x : bf16[5,9]\n  input %l : i64[5]\n"
       "  const %h : f32[] = [0.5]\n  const %sh : i64[1] = [5]\n"
       "  %r, %s = SoftmaxCrossEntropy(%x, %l) {ignore_index = -1}\n"
       "  %d = Expand(%h, %sh)\n"
       "  %dx = SoftmaxCrossEntropyGrad(%d, %x, %l, %s) {ignore_index = -1}\n"
       "  output %r\n  output %s\n  output %dx\n", -4, 4, -1, 8, NULL},
  };
  for (int i = 0; i < 2; i++) {
    run_case(&cs[i], 1300 + i, false);
    /* fused: the loss kernel, and the gradient with the Expand in it */
    assert_int_equal(run_case(&cs[i], 1300 + i, true), 2);
  }
}

/* Attribute defaults: the folded value, the lowered-and-interpreted value
 * and a reference written with ONNX's defaults all agree. */
static void test_attribute_defaults(void **state) {
  (void)state;
  static const char *const ops[] = {"Selu", "HardSigmoid", "LeakyRelu", "Elu"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    char body[256];
    snprintf(body, sizeof body, "  input %%x : f64[4,6]\n  %%y = %s(%%x)\n  output %%y\n",
             ops[i]);
    tcase c = {body, -4, 4, 0, 0, ref_default_attrs};
    run_cases(&c, 1, 1100 + (int)i);
  }
}

/* ---- fusion ---- */

static void test_fused_chain_one_kernel(void **state) {
  (void)state;
  tcase c = {"  input %x : f32[4,6]\n  input %b : f32[6]\n  input %s : f32[4,1]\n"
             "  %a = Add(%x, %b)\n  %r = Relu(%a)\n  %m = Mul(%r, %s)\n  output %m\n",
             -2, 2, 0, 0, NULL};
  assert_int_equal(run_case(&c, 1, false), 3);
  assert_int_equal(run_case(&c, 1, true), 1);
}

static void test_fused_reduction_prologue_epilogue(void **state) {
  (void)state;
  /* prologue Add+Exp, reduction, epilogue Log+Mul: one kernel */
  tcase c = {"  input %x : f32[3,7]\n  input %b : f32[7]\n  const %ax : i64[1] = [1]\n"
             "  const %k : f32[] = [0.5]\n"
             "  %a = Add(%x, %b)\n  %e = Exp(%a)\n  %s = ReduceSum(%e, %ax)\n"
             "  %l = Log(%s)\n  %m = Mul(%l, %k)\n  output %m\n",
             -2, 2, 0, 0, NULL};
  assert_int_equal(run_case(&c, 2, false), 5);
  assert_int_equal(run_case(&c, 2, true), 1);
  /* softmax with a bias prologue and a scale epilogue */
  tcase d = {"  input %x : f32[2,5,3]\n  input %b : f32[3]\n  input %s : f32[5,1]\n"
             "  %a = Add(%x, %b)\n  %y = Softmax(%a) {axis = 1}\n  %m = Mul(%y, %s)\n"
             "  output %m\n", -2, 2, 0, 0, NULL};
  assert_int_equal(run_case(&d, 3, true), 1);
  /* a shared producer is not duplicated into two groups: Exp merges with
   * Neg into one two-output kernel (fuse.c, multi-output POINT groups)
   * whose stored %a the reduction reads */
  tcase e = {"  input %x : f32[3,4]\n  %a = Exp(%x)\n  %s = ReduceSum(%a)\n  %t = Neg(%a)\n"
             "  output %s\n  output %t\n", -2, 2, 0, 0, NULL};
  assert_int_equal(run_case(&e, 4, true), 2);
  /* an intermediate that is also a graph output stays stored */
  tcase f = {"  input %x : f32[3,4]\n  %a = Exp(%x)\n  %b = Neg(%a)\n  %s = ReduceMax(%b)\n"
             "  %t = Abs(%s)\n  output %a\n  output %t\n", -2, 2, 0, 0, NULL};
  assert_int_equal(run_case(&f, 5, true), 2);
}

static void test_errors(void **state) {
  (void)state;
  sc_graph *g = parse_ok("shardc.ir 1\ngraph \"t\" opset 21 {\n  input %x : f32[2,80]\n"
                         "  input %ai : i64[]\n  %ax = Neg(%ai)\n  %y = CumSum(%x, %ax)\n"
                         "  output %y\n}\n");
  assert_int_equal(sc_run_passes(g, "infer-shapes", NULL), SC_OK);
  sc_program *p = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_program_from_graph(g, &p, &d), SC_ERR_UNSUPPORTED);
  assert_null(p);
  assert_non_null(strstr(d.msg, "CumSum with a computed axis"));
  sc_graph_destroy(g);
  /* a Shape node left unfolded */
  g = parse_ok("shardc.ir 1\ngraph \"t\" opset 21 {\n  input %x : f32[2,3]\n"
               "  %s = Shape(%x) \"shape_node\"\n  output %s\n}\n");
  g->values[sc_graph_find_value(g, "s")].rank = 1;
  g->values[sc_graph_find_value(g, "s")].dims[0] = 2;
  g->values[sc_graph_find_value(g, "s")].dtype = SC_DTYPE_I64;
  sc_diag_clear(&d);
  assert_int_equal(sc_program_from_graph(g, &p, &d), SC_ERR_UNSUPPORTED);
  assert_string_equal(d.node, "shape_node");
  assert_non_null(strstr(d.msg, "should have been folded"));
  sc_graph_destroy(g);
}

/* Every op of elementwise.def lowers as a POINT op and has been run by
 * the cases above (program against constant folding). Runs last. */
static void test_every_elementwise_op(void **state) {
  (void)state;
  for (int op = 0; op < SC_OP_COUNT; op++) {
    if (!sc_ew_rows[op].defined) continue;
    sc_lower_kind k = sc_lowering_of((sc_op)op)->kind;
    assert_true(k == SC_LOWER_POINT || k == SC_LOWER_VIEW);
    if (!covered[op]) fail_msg("%s: no differential case", sc_op_name((sc_op)op));
  }
}

int main(void) {
  sc_codegen_register_passes(); /* codegen's fuse joins the pass registry */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_float),
      cmocka_unit_test(test_unary_int_bool),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_variadic_where_cast_clip),
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_norms), cmocka_unit_test(test_rmsnorm_row_kernel),
      cmocka_unit_test(test_layernorm_grad),
      cmocka_unit_test(test_softmax_cross_entropy),
      cmocka_unit_test(test_fused_chain_one_kernel),
      cmocka_unit_test(test_fused_reduction_prologue_epilogue),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_attribute_defaults),
      cmocka_unit_test(test_every_elementwise_op), /* last: counts the cases above */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
