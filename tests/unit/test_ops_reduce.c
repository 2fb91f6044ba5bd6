/* test_ops_reduce.c — shape rules, errors, cost and constant evaluation of
 * the reductions (family R of ops.def: Reduce*, ArgMax/ArgMin, CumSum),
 * called directly through the ops table on small hand-built graphs.
 * Expected values are computed here with plain loops over seeded
 * pseudo-random inputs. Tolerance: 1e-12 relative for f64 (sums in a
 * different order); integer results exact. NaN always fails. */
#include <stdlib.h>

#include "ir/op_util.h"
#include "test_util.h"

static int32_t axes_const(sc_graph *g, int64_t n, const int64_t *axes) {
  int64_t d[] = {n};
  return cst(g, SC_DTYPE_I64, 1, d, axes);
}

/* ---- reference reductions over a [D0,D1,D2] tensor ---- */

enum { D0 = 2, D1 = 3, D2 = 4, NX = D0 * D1 * D2 };

static void ref_reduce(sc_op op, const double *x, const bool mask[3], double *out,
                       int64_t *n_out) {
  const int dims[3] = {D0, D1, D2};
  double sum[NX], sabs[NX], ssq[NX], prod[NX], mx[NX], mn[NX], sexp[NX];
  int cnt[NX];
  int m = 1;
  for (int d = 0; d < 3; d++) m *= mask[d] ? 1 : dims[d];
  for (int j = 0; j < m; j++) {
    sum[j] = sabs[j] = ssq[j] = sexp[j] = 0, prod[j] = 1, mx[j] = -INFINITY,
    mn[j] = INFINITY, cnt[j] = 0;
  }
  for (int i = 0; i < D0; i++)
    for (int k = 0; k < D1; k++)
      for (int l = 0; l < D2; l++) {
        int id[3] = {i, k, l}, j = 0;
        for (int d = 0; d < 3; d++)
          if (!mask[d]) j = j * dims[d] + id[d];
        double v = x[(i * D1 + k) * D2 + l];
        sum[j] += v, sabs[j] += fabs(v), ssq[j] += v * v, prod[j] *= v, sexp[j] += exp(v);
        if (v > mx[j]) mx[j] = v;
        if (v < mn[j]) mn[j] = v;
        cnt[j]++;
      }
  for (int j = 0; j < m; j++) {
    switch (op) {
    case SC_OP_REDUCE_SUM: out[j] = sum[j]; break;
    case SC_OP_REDUCE_MEAN: out[j] = sum[j] / cnt[j]; break;
    case SC_OP_REDUCE_MAX: out[j] = mx[j]; break;
    case SC_OP_REDUCE_MIN: out[j] = mn[j]; break;
    case SC_OP_REDUCE_PROD: out[j] = prod[j]; break;
    case SC_OP_REDUCE_L1: out[j] = sabs[j]; break;
    case SC_OP_REDUCE_L2: out[j] = sqrt(ssq[j]); break;
    case SC_OP_REDUCE_SUM_SQUARE: out[j] = ssq[j]; break;
    case SC_OP_REDUCE_LOG_SUM_EXP: out[j] = log(sexp[j]); break;
    default: fail_msg("no reference");
    }
  }
  *n_out = m;
}

static void random_x(double *x, uint64_t seed) {
  rng_seed(seed);
  for (int i = 0; i < NX; i++) x[i] = rnd_nz(-2, 2);
}

/* ---- Reduce* ---- */

static void test_reduce_all_ops(void **state) {
  sc_graph *g = *state;
  static const sc_op ops[] = {SC_OP_REDUCE_SUM, SC_OP_REDUCE_MEAN, SC_OP_REDUCE_MAX,
                              SC_OP_REDUCE_MIN, SC_OP_REDUCE_PROD, SC_OP_REDUCE_L1,
                              SC_OP_REDUCE_L2, SC_OP_REDUCE_SUM_SQUARE,
                              SC_OP_REDUCE_LOG_SUM_EXP};
  static const int64_t axes_sets[3][3] = {{1}, {0, 2}, {0, 1, 2}};
  static const int64_t n_axes[3] = {1, 2, 3};
  double x[NX];
  random_x(x, 11);
  int64_t dx[] = {D0, D1, D2};
  int32_t xi = cst(g, SC_DTYPE_F64, 3, dx, x);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    for (int s = 0; s < 3; s++)
      for (int keep = 0; keep < 2; keep++) {
        int32_t ins[2] = {xi, axes_const(g, n_axes[s], axes_sets[s])}, o;
        int32_t nid = node1(g, ops[k], NULL, ins, 2, &o);
        set_int(g, nid, "keepdims", keep);
        run_ok(g, nid);
        bool mask[3] = {false, false, false};
        for (int a = 0; a < n_axes[s]; a++) mask[axes_sets[s][a]] = true;
        int64_t want_dims[3];
        int32_t r = 0;
        for (int d = 0; d < 3; d++)
          if (!mask[d]) want_dims[r++] = dx[d];
          else if (keep) want_dims[r++] = 1;
        check_shape(g, o, SC_DTYPE_F64, r, want_dims);
        double want[NX];
        int64_t m;
        ref_reduce(ops[k], x, mask, want, &m);
        assert_int_equal(sc_value_numel(&g->values[o]), m);
        for (int64_t j = 0; j < m; j++)
          near(((const double *)g->values[o].data)[j], want[j], 1e-12);
      }
}

static void test_reduce_axes_forms(void **state) {
  sc_graph *g = *state;
  double x[NX];
  random_x(x, 12);
  int64_t dx[] = {D0, D1, D2};
  int32_t xi = cst(g, SC_DTYPE_F64, 3, dx, x);
  /* negative axes as input == positive axes as attribute */
  int64_t neg[] = {-1, -3}, pos[] = {2, 0};
  int32_t ins[2] = {xi, axes_const(g, 2, neg)}, o1, o2;
  int32_t n1 = node1(g, SC_OP_REDUCE_MEAN, "mean_in", ins, 2, &o1);
  set_int(g, n1, "keepdims", 0);
  run_ok(g, n1);
  int32_t n2 = node1(g, SC_OP_REDUCE_MEAN, "mean_attr", &xi, 1, &o2);
  set_ints(g, n2, "axes", 2, pos);
  set_int(g, n2, "keepdims", 0);
  run_ok(g, n2);
  int64_t w[] = {D1};
  check_shape(g, o1, SC_DTYPE_F64, 1, w);
  check_shape(g, o2, SC_DTYPE_F64, 1, w);
  bool mask[3] = {true, false, true};
  double want[NX];
  int64_t m;
  ref_reduce(SC_OP_REDUCE_MEAN, x, mask, want, &m);
  for (int j = 0; j < D1; j++) {
    near(((const double *)g->values[o1].data)[j], want[j], 1e-12);
    near(((const double *)g->values[o2].data)[j], want[j], 1e-12);
  }
  /* no axes: reduce all, keepdims default 1 */
  int32_t o3;
  run_ok(g, node1(g, SC_OP_REDUCE_SUM, "sum_all", &xi, 1, &o3));
  int64_t ones[] = {1, 1, 1};
  check_shape(g, o3, SC_DTYPE_F64, 3, ones);
  bool all[3] = {true, true, true};
  ref_reduce(SC_OP_REDUCE_SUM, x, all, want, &m);
  near(((const double *)g->values[o3].data)[0], want[0], 1e-12);
  /* empty axes input with noop_with_empty_axes=1: identity */
  int32_t empty = axes_const(g, 0, NULL), o4;
  int32_t ins4[2] = {xi, empty};
  int32_t n4 = node1(g, SC_OP_REDUCE_SUM, "sum_noop", ins4, 2, &o4);
  set_int(g, n4, "noop_with_empty_axes", 1);
  run_ok(g, n4);
  check_shape(g, o4, SC_DTYPE_F64, 3, dx);
  for (int i = 0; i < NX; i++) near(((const double *)g->values[o4].data)[i], x[i], 0);
  /* empty axes input without noop: reduce all */
  int32_t o5;
  int32_t n5 = node1(g, SC_OP_REDUCE_SUM, "sum_empty", ins4, 2, &o5);
  set_int(g, n5, "keepdims", 0);
  run_ok(g, n5);
  check_shape(g, o5, SC_DTYPE_F64, 0, NULL);
  near(((const double *)g->values[o5].data)[0], want[0], 1e-12);
}

static void test_reduce_errors(void **state) {
  sc_graph *g = *state;
  int64_t dx[] = {D0, D1, D2};
  int32_t xi = inp(g, SC_DTYPE_F32, 3, dx), o;
  int64_t dup[] = {1, -2};
  int32_t ins[2] = {xi, axes_const(g, 2, dup)};
  expect_error(g, infer(g, node1(g, SC_OP_REDUCE_MAX, "max_dup", ins, 2, &o)),
               SC_ERR_INVALID, "max_dup", "repeated");
  sc_diag_clear(&g->diag);
  int64_t one[] = {1};
  int32_t ax_in = inp(g, SC_DTYPE_I64, 1, one);
  int32_t ins2[2] = {xi, ax_in};
  expect_error(g, infer(g, node1(g, SC_OP_REDUCE_SUM, "sum_dyn", ins2, 2, &o)),
               SC_ERR_UNSUPPORTED, "sum_dyn", "constant");
  sc_diag_clear(&g->diag);
  int64_t far[] = {3};
  int32_t n3 = node1(g, SC_OP_REDUCE_L2, "l2_range", &xi, 1, &o);
  set_ints(g, n3, "axes", 1, far);
  expect_error(g, infer(g, n3), SC_ERR_INVALID, "l2_range", "out of range");
  sc_diag_clear(&g->diag);
  int32_t n4 = node1(g, SC_OP_REDUCE_SUM, "keep_bad", &xi, 1, &o);
  set_int(g, n4, "keepdims", 2);
  expect_error(g, infer(g, n4), SC_ERR_INVALID, "keep_bad", "keepdims");
}

static void test_reduce_int64_exact_and_nan(void **state) {
  sc_graph *g = *state;
  const int64_t p53 = (int64_t)1 << 53;
  int64_t x[6] = {p53 + 1, 2, 3, -(p53 + 7), 5, 1};
  int64_t d[] = {2, 3};
  int32_t xi = cst(g, SC_DTYPE_I64, 2, d, x), o, op;
  int64_t ax[] = {1};
  int32_t ins[2] = {xi, axes_const(g, 1, ax)};
  int32_t n1 = node1(g, SC_OP_REDUCE_SUM, "isum", ins, 2, &o);
  set_int(g, n1, "keepdims", 0);
  run_ok(g, n1);
  assert_int_equal(((const int64_t *)g->values[o].data)[0], p53 + 6);
  assert_int_equal(((const int64_t *)g->values[o].data)[1], -(p53 + 1));
  run_ok(g, node1(g, SC_OP_REDUCE_PROD, "iprod", ins, 2, &op));
  assert_int_equal(((const int64_t *)g->values[op].data)[0], (p53 + 1) * 6);
  /* NaN propagates through ReduceMax / ReduceMin */
  float f[4] = {1.5f, NAN, -2.0f, 0.75f};
  int64_t d4[] = {2, 2};
  int32_t fi = cst(g, SC_DTYPE_F32, 2, d4, f), om, on;
  int32_t fins[2] = {fi, ins[1]};
  run_ok(g, node1(g, SC_OP_REDUCE_MAX, "fmax", fins, 2, &om));
  run_ok(g, node1(g, SC_OP_REDUCE_MIN, "fmin", fins, 2, &on));
  assert_true(isnan(((const float *)g->values[om].data)[0]));
  assert_true(isnan(((const float *)g->values[on].data)[0]));
  near(((const float *)g->values[om].data)[1], 0.75, 0);
  near(((const float *)g->values[on].data)[1], -2.0, 0);
}

static void test_reduce_cost(void **state) {
  sc_graph *g = *state;
  int64_t dx[] = {D0, D1, D2};
  int32_t xi = inp(g, SC_DTYPE_F32, 3, dx), o;
  int64_t ax[] = {1};
  int32_t ins[2] = {xi, axes_const(g, 1, ax)};
  int32_t nid = node1(g, SC_OP_REDUCE_SUM, "sum", ins, 2, &o);
  assert_int_equal(infer(g, nid), SC_OK);
  sc_cost c;
  sc_ops[SC_OP_REDUCE_SUM].cost(g, &g->nodes[nid], &c);
  near(c.flops, NX, 0);
  near(c.bytes, 4 * NX + 8 + 4 * D0 * D2, 0);
}

static void test_reduce_empty_axis(void **state) {
  sc_graph *g = *state;
  int64_t d[] = {2, 0}, ax[] = {1};
  int32_t xi = cst(g, SC_DTYPE_I32, 2, d, NULL), xf = cst(g, SC_DTYPE_F32, 2, d, NULL);
  int32_t axc = axes_const(g, 1, ax);
  static const sc_op ops[] = {SC_OP_REDUCE_MAX, SC_OP_REDUCE_MIN, SC_OP_REDUCE_SUM,
                              SC_OP_REDUCE_PROD};
  static const int32_t want_i[] = {INT32_MIN, INT32_MAX, 0, 1};
  static const float want_f[] = {-INFINITY, INFINITY, 0.0f, 1.0f};
  int64_t w[] = {2, 1};
  for (int k = 0; k < 4; k++) {
    int32_t ins[2] = {xi, axc}, fins[2] = {xf, axc}, o, of;
    run_ok(g, node1(g, ops[k], NULL, ins, 2, &o));
    run_ok(g, node1(g, ops[k], NULL, fins, 2, &of));
    check_shape(g, o, SC_DTYPE_I32, 2, w);
    for (int j = 0; j < 2; j++) {
      assert_int_equal(((const int32_t *)g->values[o].data)[j], want_i[k]);
      assert_true(((const float *)g->values[of].data)[j] == want_f[k]);
    }
  }
}

/* ---- ArgMax / ArgMin ---- */

static void test_argminmax(void **state) {
  sc_graph *g = *state;
  rng_seed(13);
  enum { R = 4, C = 6 };
  int32_t x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (int32_t)rnd(1, 4); /* many ties */
  int64_t d[] = {R, C};
  int32_t xi = cst(g, SC_DTYPE_I32, 2, d, x);
  for (int is_max = 0; is_max < 2; is_max++)
    for (int last = 0; last < 2; last++)
      for (int axis = -2; axis < 2; axis++) {
        int32_t o;
        int32_t nid = node1(g, is_max ? SC_OP_ARG_MAX : SC_OP_ARG_MIN, NULL, &xi, 1, &o);
        set_int(g, nid, "axis", axis);
        set_int(g, nid, "keepdims", last); /* vary keepdims along */
        if (last) set_int(g, nid, "select_last_index", 1);
        run_ok(g, nid);
        int ax = axis < 0 ? axis + 2 : axis;
        int other = ax == 0 ? C : R, len = ax == 0 ? R : C;
        if (last) {
          int64_t w[2] = {ax == 0 ? 1 : R, ax == 0 ? C : 1};
          check_shape(g, o, SC_DTYPE_I64, 2, w);
        } else {
          int64_t w[1] = {other};
          check_shape(g, o, SC_DTYPE_I64, 1, w);
        }
        const int64_t *r = g->values[o].data;
        for (int p = 0; p < other; p++) {
          int best = -1;
          int32_t bv = 0;
          for (int k = 0; k < len; k++) {
            int32_t v = ax == 0 ? x[k * C + p] : x[p * C + k];
            bool take = best < 0 || (is_max ? v > bv : v < bv) || (last && v == bv);
            if (take) best = k, bv = v;
          }
          assert_int_equal(r[p], best);
        }
      }
  int32_t o;
  int32_t nb = node1(g, SC_OP_ARG_MAX, "argmax_bad", &xi, 1, &o);
  set_int(g, nb, "axis", 2);
  expect_error(g, infer(g, nb), SC_ERR_INVALID, "argmax_bad", "axis");
}

/* ---- CumSum ---- */

static void test_cumsum(void **state) {
  sc_graph *g = *state;
  rng_seed(14);
  enum { R = 3, C = 5 };
  double x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = rnd_nz(-3, 3);
  int64_t d[] = {R, C};
  int32_t xi = cst(g, SC_DTYPE_F64, 2, d, x);
  int32_t ax1 = 1;
  int64_t axm2 = -2;
  int32_t axis_vals[2] = {cst(g, SC_DTYPE_I32, 0, NULL, &ax1), cst(g, SC_DTYPE_I64, 0, NULL, &axm2)};
  for (int a = 0; a < 2; a++)
    for (int excl = 0; excl < 2; excl++)
      for (int rev = 0; rev < 2; rev++) {
        int32_t ins[2] = {xi, axis_vals[a]}, o;
        int32_t nid = node1(g, SC_OP_CUM_SUM, NULL, ins, 2, &o);
        if (excl) set_int(g, nid, "exclusive", 1);
        if (rev) set_int(g, nid, "reverse", 1);
        run_ok(g, nid);
        check_shape(g, o, SC_DTYPE_F64, 2, d);
        const double *r = g->values[o].data;
        for (int i = 0; i < R; i++)
          for (int j = 0; j < C; j++) {
            double w = 0;
            /* sum over the elements before (or after, reversed) along the axis */
            int pos = a == 0 ? j : i, len = a == 0 ? C : R;
            for (int k = 0; k < len; k++) {
              bool in = rev ? (excl ? k > pos : k >= pos) : (excl ? k < pos : k <= pos);
              if (in) w += a == 0 ? x[i * C + k] : x[k * C + j];
            }
            near(r[i * C + j], w, 1e-12);
          }
      }
  /* int64 CumSum stays exact */
  const int64_t p53 = (int64_t)1 << 53;
  int64_t xi64[3] = {p53 + 1, 2, -1};
  int64_t d3[] = {3};
  int32_t zero = 0;
  int32_t ins[2] = {cst(g, SC_DTYPE_I64, 1, d3, xi64), cst(g, SC_DTYPE_I32, 0, NULL, &zero)}, o;
  run_ok(g, node1(g, SC_OP_CUM_SUM, "cs_i", ins, 2, &o));
  const int64_t *r = g->values[o].data;
  assert_int_equal(r[0], p53 + 1);
  assert_int_equal(r[1], p53 + 3);
  assert_int_equal(r[2], p53 + 2);
  /* axis out of range */
  int32_t bad_axis = 2;
  int32_t bins[2] = {xi, cst(g, SC_DTYPE_I32, 0, NULL, &bad_axis)};
  expect_error(g, infer(g, node1(g, SC_OP_CUM_SUM, "cs_bad", bins, 2, &o)), SC_ERR_INVALID,
               "cs_bad", "out of range");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reduce_all_ops, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_reduce_axes_forms, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_reduce_errors, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_reduce_int64_exact_and_nan, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_reduce_cost, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_reduce_empty_axis, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_argminmax, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_cumsum, setup_graph, teardown_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
