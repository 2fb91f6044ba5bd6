/* test_ops_shape.c — the "S" family of ops.def (shape computation and data
 * movement): each op's shape rule and constant evaluation, called directly
 * through sc_ops[op].infer / .eval on small graphs built in C. Expected
 * results are computed here with plain loops or written out by hand from the
 * ONNX definitions, on seeded pseudo-random data. */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static sc_graph *G;
static uint64_t rng_state;

static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float rand_f32(void) { return (float)(rng() % 20001) / 1000.0f - 10.0f + 0.0005f; }
static int64_t rand_i64(void) { return (int64_t)(rng() % 2001) - 1000; }

static int setup(void **state) {
  (void)state;
  G = sc_graph_create("t");
  rng_state = 0x9e3779b97f4a7c15ull;
  return G ? 0 : -1;
}
static int teardown(void **state) {
  (void)state;
  sc_graph_destroy(G);
  return 0;
}

/* ---- graph building ---- */

static int32_t ci64(int64_t n, const int64_t *xs) { return cst(G, SC_DTYPE_I64, 1, &n, xs); }
static int32_t ci64_scalar(int64_t x) { return cst(G, SC_DTYPE_I64, 0, NULL, &x); }

/* A node with n_out fresh outputs. */
static int32_t node(sc_op op, const char *name, const int32_t *ins, int32_t n_in,
                    int32_t n_out) {
  int32_t outs[16];
  for (int32_t i = 0; i < n_out; i++) outs[i] = sc_graph_add_value(G, NULL);
  int32_t id = sc_graph_add_node(G, op, name, ins, n_in, outs, n_out);
  assert_true(id >= 0);
  return id;
}

static sc_value *out(int32_t nid, int32_t i) { return sc_node_output(G, sc_nod(G, nid), i); }
static void assert_shape(const sc_value *v, int32_t rank, const int64_t *dims) {
  assert_int_equal(v->rank, rank);
  for (int32_t i = 0; i < rank; i++) assert_int_equal(v->dims[i], dims[i]);
}
/* The diagnostic names the node and contains `what`. */
static void assert_error(sc_status st, sc_status want, const char *node_name,
                         const char *what) {
  expect_error(G, st, want, node_name, what);
  sc_diag_clear(&G->diag);
}

static void fill_f32(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = rand_f32();
}
static void fill_i64(int64_t *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = rand_i64();
}

/* ---- tests ---- */

/* GPT-2 export: Shape(x) -> Gather(0) -> Unsqueeze([0]) -> Concat([-1]) ->
 * Reshape(x). Shape's input is a runtime value: only its shape is used. */
static void test_gpt2_shape_pattern(void **state) {
  (void)state;
  int64_t xd[3] = {2, 5, 12};
  int32_t x = shaped(G, NULL, SC_DTYPE_F32, 3, xd);
  int32_t shp = node(SC_OP_SHAPE, "shape", &x, 1, 1);
  run_ok(G, shp);
  const int64_t *sd = out(shp, 0)->data;
  assert_int_equal(out(shp, 0)->dims[0], 3);
  for (int i = 0; i < 3; i++) assert_int_equal(sd[i], xd[i]);

  int32_t gin[2] = {sc_nod(G, shp)->outputs[0], ci64_scalar(0)};
  int32_t gat = node(SC_OP_GATHER, "gather", gin, 2, 1);
  set_int(G, gat, "axis", 0);
  run_ok(G, gat);
  assert_int_equal(out(gat, 0)->rank, 0);
  assert_int_equal(*(const int64_t *)out(gat, 0)->data, 2);

  int64_t zero = 0;
  int32_t uin[2] = {sc_nod(G, gat)->outputs[0], ci64(1, &zero)};
  int32_t uns = node(SC_OP_UNSQUEEZE, "unsq", uin, 2, 1);
  run_ok(G, uns);
  int64_t one = 1;
  assert_shape(out(uns, 0), 1, &one);

  int64_t m1 = -1;
  int32_t cin[2] = {sc_nod(G, uns)->outputs[0], ci64(1, &m1)};
  int32_t cat = node(SC_OP_CONCAT, "concat", cin, 2, 1);
  set_int(G, cat, "axis", 0);
  run_ok(G, cat);
  const int64_t *cd = out(cat, 0)->data;
  assert_int_equal(cd[0], 2);
  assert_int_equal(cd[1], -1);

  int32_t rin[2] = {x, sc_nod(G, cat)->outputs[0]};
  int32_t rs = node(SC_OP_RESHAPE, "reshape", rin, 2, 1);
  assert_int_equal(infer(G, rs), SC_OK);
  int64_t want[2] = {2, 60};
  assert_shape(out(rs, 0), 2, want);
  assert_int_equal(out(rs, 0)->dtype, SC_DTYPE_F32);
  /* the data input is not constant: eval refuses, naming the node */
  assert_error(eval(G, rs), SC_ERR_UNSUPPORTED, "reshape", "not a constant");
  /* Shape's start/end (opset 15) */
  int32_t s2 = node(SC_OP_SHAPE, "shape2", &x, 1, 1);
  set_int(G, s2, "start", -2);
  run_ok(G, s2);
  assert_int_equal(out(s2, 0)->dims[0], 2);
  assert_int_equal(((const int64_t *)out(s2, 0)->data)[0], 5);
  assert_int_equal(((const int64_t *)out(s2, 0)->data)[1], 12);
  int32_t sz = node(SC_OP_SIZE, "size", &x, 1, 1);
  run_ok(G, sz);
  assert_int_equal(*(const int64_t *)out(sz, 0)->data, 120);
}

static void test_reshape(void **state) {
  (void)state;
  int64_t xd[3] = {2, 3, 4};
  float x[24];
  fill_f32(x, 24);
  int32_t xv = cst(G, SC_DTYPE_F32, 3, xd, x);
  int64_t s1[3] = {0, -1, 2};
  int32_t in1[2] = {xv, ci64(3, s1)};
  int32_t r1 = node(SC_OP_RESHAPE, "r1", in1, 2, 1);
  run_ok(G, r1);
  int64_t w1[3] = {2, 6, 2};
  assert_shape(out(r1, 0), 3, w1);
  assert_memory_equal(out(r1, 0)->data, x, sizeof x);

  /* mismatched element count: both counts in the message */
  int64_t s2[2] = {5, 5};
  int32_t in2[2] = {xv, ci64(2, s2)};
  int32_t r2 = node(SC_OP_RESHAPE, "r2", in2, 2, 1);
  sc_status st = infer(G, r2);
  assert_int_equal(st, SC_ERR_INVALID);
  assert_non_null(strstr(G->diag.msg, "24"));
  assert_error(st, SC_ERR_INVALID, "r2", "25");

  int64_t s3[2] = {-1, -1};
  int32_t in3[2] = {xv, ci64(2, s3)};
  assert_error(infer(G, node(SC_OP_RESHAPE, "r3", in3, 2, 1)), SC_ERR_INVALID, "r3", "-1");

  /* allowzero: 0 is a real zero dim */
  int64_t ed[2] = {0, 3};
  int32_t e = shaped(G, NULL, SC_DTYPE_F32, 2, ed);
  int64_t s4[3] = {3, 0, 7};
  int32_t in4[2] = {e, ci64(3, s4)};
  int32_t r4 = node(SC_OP_RESHAPE, "r4", in4, 2, 1);
  set_int(G, r4, "allowzero", 1);
  assert_int_equal(infer(G, r4), SC_OK);
  assert_shape(out(r4, 0), 3, s4);
  /* without allowzero the 0 copies dim 1 (3): 3*3*7 != 0 */
  int32_t r5 = node(SC_OP_RESHAPE, "r5", in4, 2, 1);
  assert_error(infer(G, r5), SC_ERR_INVALID, "r5", "63");

  /* shape computed at run time */
  int64_t two = 2;
  int32_t in6[2] = {xv, shaped(G, NULL, SC_DTYPE_I64, 1, &two)};
  assert_error(infer(G, node(SC_OP_RESHAPE, "r6", in6, 2, 1)), SC_ERR_UNSUPPORTED, "r6",
               "constant");

  /* Flatten, Squeeze, Unsqueeze share the view eval */
  int32_t fl = node(SC_OP_FLATTEN, "fl", &xv, 1, 1);
  set_int(G, fl, "axis", -1);
  run_ok(G, fl);
  int64_t wf[2] = {6, 4};
  assert_shape(out(fl, 0), 2, wf);
  assert_memory_equal(out(fl, 0)->data, x, sizeof x);

  int64_t ud_axes[2] = {-1, 1};
  int32_t uin[2] = {xv, ci64(2, ud_axes)};
  int32_t un = node(SC_OP_UNSQUEEZE, "un", uin, 2, 1);
  run_ok(G, un);
  int64_t wu[5] = {2, 1, 3, 4, 1};
  assert_shape(out(un, 0), 5, wu);
  int32_t sq = node(SC_OP_SQUEEZE, "sq", &sc_nod(G, un)->outputs[0], 1, 1);
  run_ok(G, sq);
  assert_shape(out(sq, 0), 3, xd);
  assert_memory_equal(out(sq, 0)->data, x, sizeof x);
  int64_t bad_axis = 0;
  int32_t sin[2] = {xv, ci64(1, &bad_axis)};
  assert_error(infer(G, node(SC_OP_SQUEEZE, "sq2", sin, 2, 1)), SC_ERR_INVALID, "sq2",
               "size 2");
}

/* Slice: expected index lists worked out by hand from the ONNX rules. */
static void test_slice(void **state) {
  (void)state;
  int64_t xd[2] = {4, 6};
  int32_t x[24];
  for (int i = 0; i < 24; i++) x[i] = (int32_t)rand_i64();
  int32_t xv = cst(G, SC_DTYPE_I32, 2, xd, x);
  struct {
    int64_t starts[2], ends[2], axes[2], steps[2];
    int nrow, rows[6], ncol, cols[6];
  } cases[] = {
      /* axis 1: start -1, end INT64_MIN, step -2 -> 5 3 1; axis 0 all */
      {{-1, 0}, {INT64_MIN, INT64_MAX}, {1, 0}, {-2, 1}, 4, {0, 1, 2, 3}, 3, {5, 3, 1}},
      /* axis 1: 1..INT64_MAX step 2 -> 1 3 5; axis 0: 10..-10 step -1 -> 3 2 1 0 */
      {{1, 10}, {INT64_MAX, -10}, {-1, -2}, {2, -1}, 4, {3, 2, 1, 0}, 3, {1, 3, 5}},
      /* axis 0: -100..3 -> 0 1 2; axis 1: 4..2 step 1 -> empty */
      {{-100, 4}, {3, 2}, {0, 1}, {1, 1}, 3, {0, 1, 2}, 0, {0}},
      /* axis 0: 2..-1 step -3 -> 2; axis 1: -2..INT64_MAX step 3 -> 4 */
      {{2, -2}, {-1, INT64_MAX}, {0, 1}, {-3, 3}, 0, {0}, 1, {4}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t in[5] = {xv, ci64(2, cases[c].starts), ci64(2, cases[c].ends),
                     ci64(2, cases[c].axes), ci64(2, cases[c].steps)};
    char name[16];
    snprintf(name, sizeof name, "slice%zu", c);
    int32_t s = node(SC_OP_SLICE, name, in, 5, 1);
    run_ok(G, s);
    int64_t wd[2] = {cases[c].nrow, cases[c].ncol};
    assert_shape(out(s, 0), 2, wd);
    const int32_t *o = out(s, 0)->data;
    for (int i = 0; i < cases[c].nrow; i++)
      for (int j = 0; j < cases[c].ncol; j++)
        assert_int_equal(o[i * cases[c].ncol + j], x[cases[c].rows[i] * 6 + cases[c].cols[j]]);
  }
  /* without axes/steps; step 0 is an error */
  int64_t st1 = 1, en1 = 3, zero = 0;
  int32_t in2[3] = {xv, ci64(1, &st1), ci64(1, &en1)};
  int32_t s2 = node(SC_OP_SLICE, "s2", in2, 3, 1);
  run_ok(G, s2);
  int64_t w2[2] = {2, 6};
  assert_shape(out(s2, 0), 2, w2);
  assert_memory_equal(out(s2, 0)->data, x + 6, 12 * sizeof(int32_t));
  int32_t in3[5] = {xv, ci64(1, &st1), ci64(1, &en1), ci64(1, &zero), ci64(1, &zero)};
  assert_error(infer(G, node(SC_OP_SLICE, "s3", in3, 5, 1)), SC_ERR_INVALID, "s3", "step");
}

static void test_gather(void **state) {
  (void)state;
  int64_t xd[2] = {5, 3};
  float x[15];
  fill_f32(x, 15);
  int32_t xv = cst(G, SC_DTYPE_F32, 2, xd, x);
  int64_t idx[4] = {-1, 0, 2, -5};
  int64_t id2[2] = {2, 2};
  int32_t in[2] = {xv, cst(G, SC_DTYPE_I64, 2, id2, idx)};
  int32_t g0 = node(SC_OP_GATHER, "g0", in, 2, 1);
  run_ok(G, g0);
  int64_t w0[3] = {2, 2, 3};
  assert_shape(out(g0, 0), 3, w0);
  const float *o = out(g0, 0)->data;
  int rows[4] = {4, 0, 2, 0};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) assert_true(o[i * 3 + j] == x[rows[i] * 3 + j]);

  int32_t i32[3] = {-1, 1, -3};
  int64_t three = 3;
  int32_t in1[2] = {xv, cst(G, SC_DTYPE_I32, 1, &three, i32)};
  int32_t g1 = node(SC_OP_GATHER, "g1", in1, 2, 1);
  set_int(G, g1, "axis", 1);
  run_ok(G, g1);
  int64_t w1[2] = {5, 3};
  assert_shape(out(g1, 0), 2, w1);
  o = out(g1, 0)->data;
  int cols[3] = {2, 1, 0};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) assert_true(o[i * 3 + j] == x[i * 3 + cols[j]]);

  /* out of range: an error naming the node, no read */
  int64_t badi[2] = {1, 5};
  int64_t two = 2;
  int32_t in2[2] = {xv, ci64(2, badi)};
  int32_t g2 = node(SC_OP_GATHER, "g2", in2, 2, 1);
  assert_int_equal(infer(G, g2), SC_OK);
  assert_error(eval(G, g2), SC_ERR_INVALID, "g2", "index 5 out of range");
  int64_t badn = -6;
  int32_t in3[2] = {xv, ci64(1, &badn)};
  int32_t g3 = node(SC_OP_GATHER, "g3", in3, 2, 1);
  assert_int_equal(infer(G, g3), SC_OK);
  assert_error(eval(G, g3), SC_ERR_INVALID, "g3", "-6");
  (void)two;
}

static void test_gather_elements_nd(void **state) {
  (void)state;
  int64_t xd[3] = {2, 3, 4};
  int64_t x[24];
  fill_i64(x, 24);
  int32_t xv = cst(G, SC_DTYPE_I64, 3, xd, x);
  /* GatherElements axis 1, indices [2,2,4] */
  int64_t idd[3] = {2, 2, 4}, ind[16];
  for (int i = 0; i < 16; i++) ind[i] = (int64_t)(rng() % 6) - 3;
  int32_t in[2] = {xv, cst(G, SC_DTYPE_I64, 3, idd, ind)};
  int32_t ge = node(SC_OP_GATHER_ELEMENTS, "ge", in, 2, 1);
  set_int(G, ge, "axis", 1);
  run_ok(G, ge);
  assert_shape(out(ge, 0), 3, idd);
  const int64_t *o = out(ge, 0)->data;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 4; c++) {
        int64_t k = ind[(a * 2 + b) * 4 + c];
        if (k < 0) k += 3;
        assert_int_equal(o[(a * 2 + b) * 4 + c], x[(a * 3 + k) * 4 + c]);
      }
  /* GatherND, batch_dims 1: indices [2,2,1] pick rows of each batch */
  int64_t nd_d[3] = {2, 2, 1}, nd[4] = {2, -3, 1, 0};
  int32_t in2[2] = {xv, cst(G, SC_DTYPE_I64, 3, nd_d, nd)};
  int32_t gn = node(SC_OP_GATHER_ND, "gn", in2, 2, 1);
  set_int(G, gn, "batch_dims", 1);
  run_ok(G, gn);
  int64_t wn[3] = {2, 2, 4};
  assert_shape(out(gn, 0), 3, wn);
  o = out(gn, 0)->data;
  int picks[2][2] = {{2, 0}, {1, 0}};
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < 2; t++)
      for (int c = 0; c < 4; c++)
        assert_int_equal(o[(b * 2 + t) * 4 + c], x[(b * 3 + picks[b][t]) * 4 + c]);
  /* GatherND, full tuples: indices [3,3] -> scalars */
  int64_t fd[2] = {3, 3}, fi[9] = {1, 2, 3, 0, 0, 0, -1, -1, -1};
  int32_t in3[2] = {xv, cst(G, SC_DTYPE_I64, 2, fd, fi)};
  int32_t gf = node(SC_OP_GATHER_ND, "gf", in3, 2, 1);
  run_ok(G, gf);
  o = out(gf, 0)->data;
  assert_int_equal(o[0], x[(1 * 3 + 2) * 4 + 3]);
  assert_int_equal(o[1], x[0]);
  assert_int_equal(o[2], x[23]);
  fi[4] = 3; /* dim 1 has 3: out of range */
  int32_t in4[2] = {xv, cst(G, SC_DTYPE_I64, 2, fd, fi)};
  int32_t gb = node(SC_OP_GATHER_ND, "gb", in4, 2, 1);
  assert_int_equal(infer(G, gb), SC_OK);
  assert_error(eval(G, gb), SC_ERR_INVALID, "gb", "out of range");
}

static void test_scatter(void **state) {
  (void)state;
  int64_t xd[2] = {4, 3};
  float x[12], up[6];
  fill_f32(x, 12);
  fill_f32(up, 6);
  int32_t xv = cst(G, SC_DTYPE_F32, 2, xd, x);
  /* ScatterND: rows -1 and 1 replaced / added */
  int64_t idd[2] = {2, 1}, ind[2] = {-1, 1}, ud[2] = {2, 3};
  int32_t in[3] = {xv, cst(G, SC_DTYPE_I64, 2, idd, ind), cst(G, SC_DTYPE_F32, 2, ud, up)};
  const char *reds[2] = {"none", "add"};
  for (int r = 0; r < 2; r++) {
    int32_t s = node(SC_OP_SCATTER_ND, r ? "snd_add" : "snd", in, 3, 1);
    set_string(G, s, "reduction", reds[r]);
    run_ok(G, s);
    assert_shape(out(s, 0), 2, xd);
    float want[12];
    memcpy(want, x, sizeof want);
    for (int j = 0; j < 3; j++) {
      want[3 * 3 + j] = r ? want[9 + j] + up[j] : up[j];
      want[1 * 3 + j] = r ? want[3 + j] + up[3 + j] : up[3 + j];
    }
    assert_memory_equal(out(s, 0)->data, want, sizeof want);
  }
  /* ScatterElements axis 0 with mul and duplicate indices */
  int64_t ed[2] = {2, 3}, ei[6] = {0, -1, 2, 0, 3, 2};
  int32_t in2[3] = {xv, cst(G, SC_DTYPE_I64, 2, ed, ei), cst(G, SC_DTYPE_F32, 2, ed, up)};
  int32_t se = node(SC_OP_SCATTER_ELEMENTS, "se", in2, 3, 1);
  set_string(G, se, "reduction", "mul");
  run_ok(G, se);
  float want[12];
  memcpy(want, x, sizeof want);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      int64_t k = ei[i * 3 + j];
      if (k < 0) k += 4;
      want[k * 3 + j] *= up[i * 3 + j];
    }
  assert_memory_equal(out(se, 0)->data, want, sizeof want);
  ei[5] = 4;
  int32_t in3[3] = {xv, cst(G, SC_DTYPE_I64, 2, ed, ei), cst(G, SC_DTYPE_F32, 2, ed, up)};
  int32_t sb = node(SC_OP_SCATTER_ELEMENTS, "sb", in3, 3, 1);
  assert_int_equal(infer(G, sb), SC_OK);
  assert_error(eval(G, sb), SC_ERR_INVALID, "sb", "index 4");
}

static void test_range(void **state) {
  (void)state;
  int32_t in[3] = {ci64_scalar(3), ci64_scalar(-7), ci64_scalar(-3)};
  int32_t r = node(SC_OP_RANGE, "range_i", in, 3, 1);
  run_ok(G, r);
  int64_t four = 4;
  assert_shape(out(r, 0), 1, &four);
  const int64_t *o = out(r, 0)->data;
  int64_t want[4] = {3, 0, -3, -6};
  for (int i = 0; i < 4; i++) assert_int_equal(o[i], want[i]);

  /* 0.1 .. 3.0 by 0.1 in float: the count divides in float (29, where double
   * division would give 30) and the values accumulate (20 of them differ
   * from start + i * delta); onnxruntime agrees on both. */
  float fs = 0.1f, fl = 3.0f, fd = 0.1f;
  int32_t fin[3] = {cst(G, SC_DTYPE_F32, 0, NULL, &fs), cst(G, SC_DTYPE_F32, 0, NULL, &fl),
                    cst(G, SC_DTYPE_F32, 0, NULL, &fd)};
  int32_t rf = node(SC_OP_RANGE, "range_f", fin, 3, 1);
  run_ok(G, rf);
  float q = (fl - fs) / fd;
  int64_t n = (int64_t)ceilf(q);
  assert_int_equal(n, 29);
  assert_shape(out(rf, 0), 1, &n);
  const float *of = out(rf, 0)->data;
  float acc = fs;
  int differ = 0;
  for (int64_t i = 0; i < n; i++, acc += fd) {
    assert_true(of[i] == acc);
    differ += of[i] != fs + (float)i * fd;
  }
  assert_true(differ > 0);
  double dsv = -1.5, dl = 2.25, dd = 0.75;
  int32_t din[3] = {cst(G, SC_DTYPE_F64, 0, NULL, &dsv), cst(G, SC_DTYPE_F64, 0, NULL, &dl),
                    cst(G, SC_DTYPE_F64, 0, NULL, &dd)};
  int32_t rd = node(SC_OP_RANGE, "range_d", din, 3, 1);
  run_ok(G, rd);
  int64_t five = 5;
  assert_shape(out(rd, 0), 1, &five);
  for (int i = 0; i < 5; i++)
    assert_true(((const double *)out(rd, 0)->data)[i] == -1.5 + 0.75 * i);

  int32_t ein[3] = {ci64_scalar(5), ci64_scalar(1), ci64_scalar(1)};
  int32_t re = node(SC_OP_RANGE, "range_e", ein, 3, 1);
  run_ok(G, re);
  int64_t zero = 0;
  assert_shape(out(re, 0), 1, &zero);
  int32_t zin[3] = {ci64_scalar(5), ci64_scalar(1), ci64_scalar(0)};
  assert_error(infer(G, node(SC_OP_RANGE, "range_z", zin, 3, 1)), SC_ERR_INVALID, "range_z",
               "delta");
  int32_t rin[3] = {ci64_scalar(0), shaped(G, NULL, SC_DTYPE_I64, 0, NULL), ci64_scalar(1)};
  assert_error(infer(G, node(SC_OP_RANGE, "range_rt", rin, 3, 1)), SC_ERR_UNSUPPORTED,
               "range_rt", NULL);
}

static void test_trilu(void **state) {
  (void)state;
  int64_t xd[3] = {2, 4, 5};
  int64_t x[40];
  fill_i64(x, 40);
  for (int i = 0; i < 40; i++)
    if (x[i] == 0) x[i] = 7;
  int32_t xv = cst(G, SC_DTYPE_I64, 3, xd, x);
  int64_t ks[4] = {0, -1, 2, 9};
  for (int up = 0; up < 2; up++)
    for (int ki = 0; ki < 4; ki++) {
      int32_t in[2] = {xv, ci64_scalar(ks[ki])};
      int32_t t = node(SC_OP_TRILU, NULL, in, ki == 0 ? 1 : 2, 1);
      set_int(G, t, "upper", up);
      run_ok(G, t);
      assert_shape(out(t, 0), 3, xd);
      const int64_t *o = out(t, 0)->data;
      for (int b = 0; b < 2; b++)
        for (int i = 0; i < 4; i++)
          for (int j = 0; j < 5; j++) {
            int e = (b * 4 + i) * 5 + j;
            bool keep = up ? j - i >= ks[ki] : j - i <= ks[ki];
            assert_int_equal(o[e], keep ? x[e] : 0);
          }
    }
}

static void test_expand_tile(void **state) {
  (void)state;
  int64_t xd[2] = {3, 1};
  float x[3];
  fill_f32(x, 3);
  int32_t xv = cst(G, SC_DTYPE_F32, 2, xd, x);
  int64_t sh[3] = {2, 1, 4};
  int32_t in[2] = {xv, ci64(3, sh)};
  int32_t e = node(SC_OP_EXPAND, "ex", in, 2, 1);
  run_ok(G, e);
  int64_t w[3] = {2, 3, 4};
  assert_shape(out(e, 0), 3, w);
  const float *o = out(e, 0)->data;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++) assert_true(o[(a * 3 + b) * 4 + c] == x[b]);
  int64_t bad[2] = {2, 4};
  int32_t in2[2] = {xv, ci64(2, bad)};
  assert_error(infer(G, node(SC_OP_EXPAND, "ex2", in2, 2, 1)), SC_ERR_INVALID, "ex2", NULL);

  int64_t rep[2] = {2, 3};
  int32_t tin[2] = {xv, ci64(2, rep)};
  int32_t t = node(SC_OP_TILE, "tile", tin, 2, 1);
  run_ok(G, t);
  int64_t wt[2] = {6, 3};
  assert_shape(out(t, 0), 2, wt);
  o = out(t, 0)->data;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 3; j++) assert_true(o[i * 3 + j] == x[i % 3]);
}

static void test_split_concat_transpose(void **state) {
  (void)state;
  int64_t xd[2] = {2, 7};
  int16_t x[14];
  for (int i = 0; i < 14; i++) x[i] = (int16_t)rand_i64();
  int32_t xv = cst(G, SC_DTYPE_I16, 2, xd, x);
  int32_t s = node(SC_OP_SPLIT, "split3", &xv, 1, 3);
  set_int(G, s, "axis", -1);
  set_int(G, s, "num_outputs", 3);
  run_ok(G, s);
  int sizes[3] = {3, 3, 1}, at = 0;
  for (int k = 0; k < 3; k++) {
    int64_t wd[2] = {2, sizes[k]};
    assert_shape(out(s, k), 2, wd);
    const int16_t *o = out(s, k)->data;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < sizes[k]; j++) assert_int_equal(o[i * sizes[k] + j], x[i * 7 + at + j]);
    at += sizes[k];
  }
  /* split input [2, 5] */
  int64_t sp[2] = {2, 5};
  int32_t in2[2] = {xv, ci64(2, sp)};
  int32_t s2 = node(SC_OP_SPLIT, "split2", in2, 2, 2);
  set_int(G, s2, "axis", 1);
  run_ok(G, s2);
  const int16_t *o2 = out(s2, 1)->data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 5; j++) assert_int_equal(o2[i * 5 + j], x[i * 7 + 2 + j]);
  /* equal split that does not divide */
  int32_t s3 = node(SC_OP_SPLIT, "split_bad", &xv, 1, 2);
  set_int(G, s3, "axis", 1);
  assert_error(infer(G, s3), SC_ERR_INVALID, "split_bad", NULL);

  /* Concat the pieces back */
  int32_t cin[3] = {sc_nod(G, s)->outputs[0], sc_nod(G, s)->outputs[1],
                    sc_nod(G, s)->outputs[2]};
  int32_t c = node(SC_OP_CONCAT, "cat", cin, 3, 1);
  set_int(G, c, "axis", 1);
  run_ok(G, c);
  assert_shape(out(c, 0), 2, xd);
  assert_memory_equal(out(c, 0)->data, x, sizeof x);
  int32_t cin2[2] = {xv, sc_nod(G, s)->outputs[0]};
  int32_t c2 = node(SC_OP_CONCAT, "cat_bad", cin2, 2, 1);
  set_int(G, c2, "axis", 0);
  assert_error(infer(G, c2), SC_ERR_INVALID, "cat_bad", "dim 1");

  /* Transpose with perm on a rank-3 tensor */
  int64_t td[3] = {2, 3, 4};
  double y[24];
  for (int i = 0; i < 24; i++) y[i] = rand_f32();
  int32_t yv = cst(G, SC_DTYPE_F64, 3, td, y);
  int64_t perm[3] = {2, 0, 1};
  int32_t t = node(SC_OP_TRANSPOSE, "tr", &yv, 1, 1);
  set_ints(G, t, "perm", 3, perm);
  run_ok(G, t);
  int64_t wt[3] = {4, 2, 3};
  assert_shape(out(t, 0), 3, wt);
  const double *ot = out(t, 0)->data;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int cc = 0; cc < 3; cc++) assert_true(ot[(a * 2 + b) * 3 + cc] == y[(b * 3 + cc) * 4 + a]);
  int64_t badp[3] = {0, 0, 1};
  int32_t t2 = node(SC_OP_TRANSPOSE, "tr_bad", &yv, 1, 1);
  set_ints(G, t2, "perm", 3, badp);
  assert_error(infer(G, t2), SC_ERR_INVALID, "tr_bad", "permutation");
}

/* Pad: index maps written out by hand from the numpy/ONNX definitions. */
static void test_pad(void **state) {
  (void)state;
  int64_t four = 4;
  float x[4];
  fill_f32(x, 4);
  int32_t xv = cst(G, SC_DTYPE_F32, 1, &four, x);
  float cval = 42.5f;
  struct {
    const char *mode;
    int64_t pads[2];
    int n, map[10]; /* -1: the constant */
  } cases[] = {
      {"constant", {2, 1}, 7, {-1, -1, 0, 1, 2, 3, -1}},
      {"reflect", {2, 2}, 8, {2, 1, 0, 1, 2, 3, 2, 1}},
      {"edge", {2, 1}, 7, {0, 0, 0, 1, 2, 3, 3}},
      {"wrap", {2, 3}, 9, {2, 3, 0, 1, 2, 3, 0, 1, 2}},
      {"constant", {-1, 2}, 5, {1, 2, 3, -1, -1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t in[3] = {xv, ci64(2, cases[c].pads), cst(G, SC_DTYPE_F32, 0, NULL, &cval)};
    int32_t p = node(SC_OP_PAD, NULL, in, 3, 1);
    set_string(G, p, "mode", cases[c].mode);
    run_ok(G, p);
    int64_t n = cases[c].n;
    assert_shape(out(p, 0), 1, &n);
    const float *o = out(p, 0)->data;
    for (int i = 0; i < cases[c].n; i++)
      assert_true(o[i] == (cases[c].map[i] < 0 ? cval : x[cases[c].map[i]]));
  }
  /* 2-D with axes (opset 18): pad only axis -1, default constant 0 */
  int64_t yd[2] = {2, 3};
  int32_t y[6];
  for (int i = 0; i < 6; i++) y[i] = (int32_t)rand_i64() | 1;
  int32_t yv = cst(G, SC_DTYPE_I32, 2, yd, y);
  int64_t pads[2] = {1, 0}, axes[1] = {-1};
  int32_t in2[4] = {yv, ci64(2, pads), -1, ci64(1, axes)};
  int32_t p2 = node(SC_OP_PAD, "pad_axes", in2, 4, 1);
  run_ok(G, p2);
  int64_t w2[2] = {2, 4};
  assert_shape(out(p2, 0), 2, w2);
  const int32_t *o2 = out(p2, 0)->data;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(o2[i * 4], 0);
    for (int j = 0; j < 3; j++) assert_int_equal(o2[i * 4 + 1 + j], y[i * 3 + j]);
  }
  int64_t big[2] = {4, 0};
  int32_t in3[2] = {xv, ci64(2, big)};
  int32_t p3 = node(SC_OP_PAD, "pad_refl", in3, 2, 1);
  set_string(G, p3, "mode", "reflect");
  assert_error(infer(G, p3), SC_ERR_INVALID, "pad_refl", "reflect");
}

static void test_nonzero(void **state) {
  (void)state;
  int64_t xd[2] = {3, 4};
  float x[12];
  fill_f32(x, 12);
  x[1] = x[5] = x[6] = x[11] = 0.0f;
  x[7] = -0.0f;
  int32_t xv = cst(G, SC_DTYPE_F32, 2, xd, x);
  int32_t nz = node(SC_OP_NON_ZERO, "nz", &xv, 1, 1);
  run_ok(G, nz);
  int64_t cnt = 0, rows[12], cols[12];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      if (x[i * 4 + j] != 0) {
        rows[cnt] = i;
        cols[cnt++] = j;
      }
  assert_int_equal(cnt, 7);
  int64_t wd[2] = {2, cnt};
  assert_shape(out(nz, 0), 2, wd);
  const int64_t *o = out(nz, 0)->data;
  for (int64_t k = 0; k < cnt; k++) {
    assert_int_equal(o[k], rows[k]);
    assert_int_equal(o[cnt + k], cols[k]);
  }
  int32_t r = shaped(G, NULL, SC_DTYPE_F32, 2, xd);
  assert_error(infer(G, node(SC_OP_NON_ZERO, "nz_rt", &r, 1, 1)), SC_ERR_UNSUPPORTED, "nz_rt",
               "data-dependent shapes are not supported");
}

static void test_constants(void **state) {
  (void)state;
  /* ConstantOfShape with an i32 value, and the f32 0 default */
  int64_t sh[2] = {3, 2};
  int32_t in = ci64(2, sh);
  int32_t c = node(SC_OP_CONSTANT_OF_SHAPE, "cos", &in, 1, 1);
  sc_attr *a = sc_node_add_attr(G, c, "value", SC_ATTR_TENSOR);
  sc_tensor *t = sc_arena_alloc(&G->arena, sizeof *t);
  int32_t seven = (int32_t)rand_i64() | 1;
  t->dtype = SC_DTYPE_I32;
  t->rank = 1;
  t->dims[0] = 1;
  t->data = &seven;
  t->data_bytes = 4;
  a->t = t;
  run_ok(G, c);
  assert_shape(out(c, 0), 2, sh);
  assert_int_equal(out(c, 0)->dtype, SC_DTYPE_I32);
  for (int i = 0; i < 6; i++) assert_int_equal(((const int32_t *)out(c, 0)->data)[i], seven);
  int32_t c0 = node(SC_OP_CONSTANT_OF_SHAPE, "cos0", &in, 1, 1);
  run_ok(G, c0);
  assert_int_equal(out(c0, 0)->dtype, SC_DTYPE_F32);
  for (int i = 0; i < 6; i++) assert_true(((const float *)out(c0, 0)->data)[i] == 0.0f);

  /* Constant with value_ints and value_float */
  int32_t k = node(SC_OP_CONSTANT, "k", NULL, 0, 1);
  int64_t vals[3] = {rand_i64(), rand_i64(), rand_i64()};
  set_ints(G, k, "value_ints", 3, vals);
  run_ok(G, k);
  int64_t three = 3;
  assert_shape(out(k, 0), 1, &three);
  assert_memory_equal(out(k, 0)->data, vals, sizeof vals);
  int32_t kf = node(SC_OP_CONSTANT, "kf", NULL, 0, 1);
  sc_attr *af = sc_node_add_attr(G, kf, "value_float", SC_ATTR_FLOAT);
  af->f = 1.25;
  run_ok(G, kf);
  assert_int_equal(out(kf, 0)->rank, 0);
  assert_true(*(const float *)out(kf, 0)->data == 1.25f);
  int32_t kn = node(SC_OP_CONSTANT, "kn", NULL, 0, 1);
  assert_error(infer(G, kn), SC_ERR_INVALID, "kn", "value");

  /* OneHot: indices [3] with a negative and an out-of-range one, axis 0 */
  int64_t idx[3] = {1, -1, 7};
  float offon[2] = {rand_f32(), rand_f32()};
  int64_t two = 2;
  int32_t oin[3] = {ci64(3, idx), ci64_scalar(4), cst(G, SC_DTYPE_F32, 1, &two, offon)};
  int32_t oh = node(SC_OP_ONE_HOT, "oh", oin, 3, 1);
  set_int(G, oh, "axis", 0);
  run_ok(G, oh);
  int64_t wd[2] = {4, 3};
  assert_shape(out(oh, 0), 2, wd);
  const float *o = out(oh, 0)->data;
  int hot[3] = {1, 3, -1};
  for (int d = 0; d < 4; d++)
    for (int i = 0; i < 3; i++) assert_true(o[d * 3 + i] == (hot[i] == d ? offon[1] : offon[0]));
}

static void test_fold_limit(void **state) {
  (void)state;
  int64_t sh[2] = {2048, 1024}; /* 2^21 elements > SC_FOLD_MAX_ELEMENTS */
  int32_t in = ci64(2, sh);
  int32_t c = node(SC_OP_CONSTANT_OF_SHAPE, "big", &in, 1, 1);
  assert_int_equal(infer(G, c), SC_OK);
  assert_error(eval(G, c), SC_ERR_LIMIT, "big", NULL);
  assert_null(out(c, 0)->data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_gpt2_shape_pattern, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reshape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slice, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather_elements_nd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scatter, setup, teardown),
      cmocka_unit_test_setup_teardown(test_range, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trilu, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expand_tile, setup, teardown),
      cmocka_unit_test_setup_teardown(test_split_concat_transpose, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pad, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nonzero, setup, teardown),
      cmocka_unit_test_setup_teardown(test_constants, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fold_limit, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
