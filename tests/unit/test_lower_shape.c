/* test_lower_shape.c — the lowerings of the shape and data-movement ops
 * (codegen/lower_shape.c). Each test builds one node on seeded random
 * constant inputs, lowers it alone (a lowering context set up here, POINT
 * ops through sc_lower_pointwise_kernel), runs the program with
 * kir_interpret, and compares with the op's constant evaluation
 * (sc_ops[op].eval) on the same inputs: exact, as data movement copies
 * elements. */
#include <stdio.h>
#include <stdlib.h>

#include "codegen/lower_internal.h"
#include "test_util.h"
#include "lower_harness.h"

/* ---- inputs ---- */

static int32_t rand_f32(sc_graph *g, int32_t rank, const int64_t *dims) {
  int64_t numel = 1;
  for (int32_t i = 0; i < rank; i++) numel *= dims[i];
  float *d = malloc(sizeof(float) * (size_t)(numel ? numel : 1));
  for (int64_t i = 0; i < numel; i++) d[i] = rng_val();
  int32_t v = cst(g, SC_DTYPE_F32, rank, dims, d);
  free(d);
  return v;
}
static int32_t ints(sc_graph *g, sc_dtype t, int64_t n, const int64_t *xs) {
  int64_t buf[64];
  assert_true(n <= 64);
  for (int64_t i = 0; i < n; i++) sc_store_i64(t, buf, i, xs[i]);
  return cst(g, t, 1, &n, buf);
}
static int32_t ints_shaped(sc_graph *g, sc_dtype t, int32_t rank, const int64_t *dims,
                           const int64_t *xs) {
  int64_t buf[64], numel = 1;
  for (int32_t i = 0; i < rank; i++) numel *= dims[i];
  assert_true(numel <= 64);
  for (int64_t i = 0; i < numel; i++) sc_store_i64(t, buf, i, xs[i]);
  return cst(g, t, rank, dims, buf);
}
static void run(sc_graph *g, int32_t nid) {
  lowered L = check_vs_eval(g, nid, 0);
  lowered_free(&L);
}

/* ---- tests ---- */

static void test_transpose(void **state) {
  sc_graph *g = *state;
  rng_seed(1);
  int64_t d[3] = {2, 3, 4}, perm[3] = {2, 0, 1}, d2[2] = {3, 5};
  int32_t y, x = rand_f32(g, 3, d);
  int32_t n = node1(g, SC_OP_TRANSPOSE, "t", &x, 1, &y);
  set_ints(g, n, "perm", 3, perm);
  run(g, n);
  int64_t xs[15];
  for (int i = 0; i < 15; i++) xs[i] = i * 7 - 50;
  int32_t x2 = ints_shaped(g, SC_DTYPE_I64, 2, d2, xs); /* default perm */
  run(g, node1(g, SC_OP_TRANSPOSE, "t2", &x2, 1, &y));
}

static void test_concat_three(void **state) {
  sc_graph *g = *state;
  rng_seed(2);
  int64_t a[3] = {2, 1, 3}, b[3] = {2, 4, 3}, c[3] = {2, 2, 3};
  int32_t y, ins[3] = {rand_f32(g, 3, a), rand_f32(g, 3, b), rand_f32(g, 3, c)};
  int32_t n = node1(g, SC_OP_CONCAT, "cat", ins, 3, &y);
  set_int(g, n, "axis", -2);
  run(g, n);
}

/* Members that are each one contiguous run of the output (every dim
 * before the axis 1) lower as one copy kernel per member with elements
 * (sc_lower_kind_of): the bucketer's 1-D copy-in, with an empty member,
 * and a [1, k, 3] concatenation along dim 1. */
static void test_concat_contiguous(void **state) {
  sc_graph *g = *state;
  rng_seed(12);
  int64_t a[1] = {5}, b[1] = {0}, c[1] = {17}, d[1] = {1};
  int32_t y, ins[4] = {rand_f32(g, 1, a), rand_f32(g, 1, b), rand_f32(g, 1, c),
                       rand_f32(g, 1, d)};
  int32_t n = node1(g, SC_OP_CONCAT, "cat1d", ins, 4, &y);
  set_int(g, n, "axis", 0);
  assert_int_equal(sc_lower_kind_of(g, sc_nod(g, n)), SC_LOWER_STEP);
  lowered L = check_vs_eval(g, n, 0);
  assert_int_equal(count_steps(&L, SC_STEP_KERNEL), 3);
  lowered_free(&L);
  int64_t e[3] = {1, 2, 3}, f[3] = {1, 4, 3};
  int32_t ins2[2] = {rand_f32(g, 3, e), rand_f32(g, 3, f)};
  int32_t n2 = node1(g, SC_OP_CONCAT, "cat_rows", ins2, 2, &y);
  set_int(g, n2, "axis", 1);
  assert_int_equal(sc_lower_kind_of(g, sc_nod(g, n2)), SC_LOWER_STEP);
  L = check_vs_eval(g, n2, 0);
  assert_int_equal(count_steps(&L, SC_STEP_KERNEL), 2);
  lowered_free(&L);
}

static void test_split_uneven(void **state) {
  sc_graph *g = *state;
  rng_seed(3);
  int64_t d[2] = {7, 3}, sizes[3] = {2, 4, 1};
  int32_t ins[2] = {rand_f32(g, 2, d), ints(g, SC_DTYPE_I64, 3, sizes)};
  int32_t outs[3] = {outv(g), outv(g), outv(g)};
  int32_t n = sc_graph_add_node(g, SC_OP_SPLIT, "split", ins, 2, outs, 3);
  run(g, n);
  /* num_outputs with a short last chunk, on axis 1 */
  int64_t d2[2] = {2, 5};
  int32_t x2 = rand_f32(g, 2, d2), o2[2] = {outv(g), outv(g)};
  int32_t n2 = sc_graph_add_node(g, SC_OP_SPLIT, "split2", &x2, 1, o2, 2);
  set_int(g, n2, "axis", 1);
  set_int(g, n2, "num_outputs", 2);
  run(g, n2);
}

static void test_slice_negative_steps(void **state) {
  sc_graph *g = *state;
  rng_seed(4);
  int64_t d[3] = {6, 5, 4}, st[2] = {-1, 100}, en[2] = {-100, 0}, ax[2] = {0, -2},
          sp[2] = {-2, -1};
  int32_t y, ins[5] = {rand_f32(g, 3, d), ints(g, SC_DTYPE_I64, 2, st),
                       ints(g, SC_DTYPE_I64, 2, en), ints(g, SC_DTYPE_I64, 2, ax),
                       ints(g, SC_DTYPE_I32, 2, sp)};
  run(g, node1(g, SC_OP_SLICE, "slice", ins, 5, &y));
  int64_t st2[1] = {1}, en2[1] = {4};
  int32_t ins2[3] = {ins[0], ints(g, SC_DTYPE_I64, 1, st2), ints(g, SC_DTYPE_I64, 1, en2)};
  run(g, node1(g, SC_OP_SLICE, "slice2", ins2, 3, &y));
}

static void test_gather_negative(void **state) {
  sc_graph *g = *state;
  rng_seed(5);
  int64_t d[3] = {5, 4, 3}, di[2] = {2, 3}, iv[6] = {0, -1, 4, -5, 2, -3};
  int32_t y, ins[2] = {rand_f32(g, 3, d), ints_shaped(g, SC_DTYPE_I64, 2, di, iv)};
  run(g, node1(g, SC_OP_GATHER, "g0", ins, 2, &y));
  int64_t iv1[3] = {-1, 0, 2};
  int32_t ins1[2] = {ins[0], ints(g, SC_DTYPE_I32, 3, iv1)};
  int32_t n = node1(g, SC_OP_GATHER, "g1", ins1, 2, &y);
  set_int(g, n, "axis", 1);
  run(g, n);
  /* scalar index */
  int64_t s = -2;
  int32_t ins2[2] = {ins[0], cst(g, SC_DTYPE_I64, 0, NULL, &s)};
  int32_t n2 = node1(g, SC_OP_GATHER, "g2", ins2, 2, &y);
  set_int(g, n2, "axis", 2);
  run(g, n2);
}

static void test_gather_elements_nd(void **state) {
  sc_graph *g = *state;
  rng_seed(6);
  int64_t d[2] = {3, 4}, di[2] = {2, 4}, iv[8] = {0, -1, 2, 1, -3, 1, 0, 2};
  int32_t y, x = rand_f32(g, 2, d);
  int32_t ins[2] = {x, ints_shaped(g, SC_DTYPE_I64, 2, di, iv)};
  run(g, node1(g, SC_OP_GATHER_ELEMENTS, "ge", ins, 2, &y));
  /* GatherND with batch_dims 1: data [2,3,4], indices [2,2,1] */
  int64_t d3[3] = {2, 3, 4}, dn[3] = {2, 2, 1}, nv[4] = {2, -3, 0, -1};
  int32_t ins2[2] = {rand_f32(g, 3, d3), ints_shaped(g, SC_DTYPE_I64, 3, dn, nv)};
  int32_t n = node1(g, SC_OP_GATHER_ND, "gnd", ins2, 2, &y);
  set_int(g, n, "batch_dims", 1);
  run(g, n);
  /* GatherND full tuples: indices [3,2] into [3,4] */
  int64_t dn2[2] = {3, 2}, nv2[6] = {0, 3, -1, -4, 1, 1};
  int32_t ins3[2] = {x, ints_shaped(g, SC_DTYPE_I64, 2, dn2, nv2)};
  run(g, node1(g, SC_OP_GATHER_ND, "gnd2", ins3, 2, &y));
}

static void test_scatter(void **state) {
  sc_graph *g = *state;
  rng_seed(7);
  /* ScatterND: data [4,3,2], indices [2,1] (rows 3 and 0, one negative),
   * updates [2,3,2] */
  int64_t d[3] = {4, 3, 2}, di[2] = {2, 1}, iv[2] = {-1, 0}, du[3] = {2, 3, 2};
  int32_t y, ins[3] = {rand_f32(g, 3, d), ints_shaped(g, SC_DTYPE_I64, 2, di, iv),
                       rand_f32(g, 3, du)};
  lowered L = check_vs_eval(g, node1(g, SC_OP_SCATTER_ND, "snd", ins, 3, &y), 0);
  assert_int_equal(count_steps(&L, SC_STEP_KERNEL), 1); /* one kernel, no copy */
  lowered_free(&L);
  /* reduction "add" of whole rows (an embedding's gradient): a SCATTER_ADD
   * step, repeated and negative indices summing as ONNX's in-order adds */
  int64_t iv4[2] = {-1, 3};
  int32_t ins4[3] = {ins[0], ints_shaped(g, SC_DTYPE_I64, 2, di, iv4), ins[2]};
  int32_t n4 = node1(g, SC_OP_SCATTER_ND, "snd_rows", ins4, 3, &y);
  set_string(g, n4, "reduction", "add");
  L = check_vs_eval(g, n4, 0);
  assert_int_equal(count_steps(&L, SC_STEP_SCATTER_ADD), 1);
  assert_int_equal(count_steps(&L, SC_STEP_KERNEL), 0);
  lowered_free(&L);
  /* element tuples: indices [3,2] into [4,3] */
  int64_t d2[2] = {4, 3}, di2[2] = {3, 2}, iv2[6] = {0, 1, -1, -1, 2, 0}, du2[1] = {3};
  int32_t ins2[3] = {rand_f32(g, 2, d2), ints_shaped(g, SC_DTYPE_I64, 2, di2, iv2),
                     rand_f32(g, 1, du2)};
  run(g, node1(g, SC_OP_SCATTER_ND, "snd2", ins2, 3, &y));
  /* ScatterElements on axis 1: indices [2,2] into [3,4] */
  int64_t di3[2] = {2, 2}, iv3[4] = {3, -4, 1, 2};
  int32_t ins3[3] = {rand_f32(g, 2, (int64_t[]){3, 4}), ints_shaped(g, SC_DTYPE_I64, 2, di3, iv3),
                     rand_f32(g, 2, di3)};
  int32_t n = node1(g, SC_OP_SCATTER_ELEMENTS, "se", ins3, 3, &y);
  set_int(g, n, "axis", 1);
  run(g, n);
  /* reductions, with duplicate indices (each row of ScatterElements hits one
   * element twice; both ScatterND tuples hit row 0): the updates combine.
   * rtol 1e-6: the kernel combines the updates first, eval in order */
  int64_t iv5[4] = {1, 1, 2, -2}, iv6[2] = {0, -4};
  int32_t ins5[3] = {ins3[0], ints_shaped(g, SC_DTYPE_I64, 2, di3, iv5), ins3[2]};
  int32_t ins6[3] = {ins[0], ints_shaped(g, SC_DTYPE_I64, 2, di, iv6), ins[2]};
  static const char *const red[] = {"add", "mul", "max", "min"};
  for (int r = 0; r < 4; r++) {
    int32_t n5 = node1(g, SC_OP_SCATTER_ELEMENTS, "se_red", ins5, 3, &y);
    set_int(g, n5, "axis", 1);
    set_string(g, n5, "reduction", red[r]);
    lowered L5 = check_vs_eval(g, n5, 1e-6);
    lowered_free(&L5);
    int32_t n6 = node1(g, SC_OP_SCATTER_ND, "snd_red", ins6, 3, &y);
    set_string(g, n6, "reduction", red[r]);
    lowered L6 = check_vs_eval(g, n6, 1e-6);
    lowered_free(&L6);
  }
}

static void test_expand_tile(void **state) {
  sc_graph *g = *state;
  rng_seed(8);
  int64_t d[2] = {3, 1}, shape[3] = {2, 3, 4};
  int32_t y, x = rand_f32(g, 2, d);
  int32_t ins[2] = {x, ints(g, SC_DTYPE_I64, 3, shape)};
  run(g, node1(g, SC_OP_EXPAND, "expand", ins, 2, &y));
  int64_t d2[2] = {2, 3}, rep[2] = {2, 3};
  int32_t ins2[2] = {rand_f32(g, 2, d2), ints(g, SC_DTYPE_I64, 2, rep)};
  run(g, node1(g, SC_OP_TILE, "tile", ins2, 2, &y));
}

static void test_range(void **state) {
  sc_graph *g = *state;
  float s = 1.5f, l = 6.1f, dl = 0.25f; /* dyadic: accumulation is exact */
  int32_t y, ins[3] = {cst(g, SC_DTYPE_F32, 0, NULL, &s), cst(g, SC_DTYPE_F32, 0, NULL, &l),
                       cst(g, SC_DTYPE_F32, 0, NULL, &dl)};
  run(g, node1(g, SC_OP_RANGE, "rf", ins, 3, &y));
  int32_t a = 10, b = -7, c = -3;
  int32_t ins2[3] = {cst(g, SC_DTYPE_I32, 0, NULL, &a), cst(g, SC_DTYPE_I32, 0, NULL, &b),
                     cst(g, SC_DTYPE_I32, 0, NULL, &c)};
  run(g, node1(g, SC_OP_RANGE, "ri", ins2, 3, &y));
}

static void test_constant_of_shape(void **state) {
  sc_graph *g = *state;
  int64_t shape[2] = {2, 3};
  int32_t y, in = ints(g, SC_DTYPE_I64, 2, shape);
  int32_t n = node1(g, SC_OP_CONSTANT_OF_SHAPE, "cos", &in, 1, &y);
  sc_attr *a = sc_node_add_attr(g, n, "value", SC_ATTR_TENSOR);
  a->t = sc_arena_alloc(&g->arena, sizeof *a->t);
  a->t->dtype = SC_DTYPE_I32;
  a->t->rank = 1;
  a->t->dims[0] = 1;
  int32_t *v = sc_arena_alloc(&g->arena, 4);
  *v = -17;
  a->t->data = v;
  a->t->data_bytes = 4;
  run(g, n);
  run(g, node1(g, SC_OP_CONSTANT_OF_SHAPE, "cos0", &in, 1, &y)); /* f32 zeros */
}

static void test_trilu(void **state) {
  sc_graph *g = *state;
  rng_seed(9);
  int64_t d[3] = {2, 4, 5}, k1 = 1, k2 = -1;
  int32_t y, x = rand_f32(g, 3, d);
  int32_t ins[2] = {x, cst(g, SC_DTYPE_I64, 0, NULL, &k1)};
  run(g, node1(g, SC_OP_TRILU, "upper", ins, 2, &y));
  int32_t ins2[2] = {x, cst(g, SC_DTYPE_I64, 0, NULL, &k2)};
  int32_t n = node1(g, SC_OP_TRILU, "lower", ins2, 2, &y);
  set_int(g, n, "upper", 0);
  run(g, n);
  run(g, node1(g, SC_OP_TRILU, "upper0", &x, 1, &y));
}

static void test_pad_modes(void **state) {
  sc_graph *g = *state;
  rng_seed(10);
  int64_t d[2] = {3, 4}, pads[4] = {1, 2, 2, -1};
  float cv = 2.5f;
  int32_t x = rand_f32(g, 2, d), p = ints(g, SC_DTYPE_I64, 4, pads), y;
  int32_t ins[3] = {x, p, cst(g, SC_DTYPE_F32, 0, NULL, &cv)};
  run(g, node1(g, SC_OP_PAD, "pad_c", ins, 3, &y));
  run(g, node1(g, SC_OP_PAD, "pad_0", ins, 2, &y));
  int64_t pads2[4] = {2, 3, 1, 3};
  int32_t ins2[2] = {x, ints(g, SC_DTYPE_I64, 4, pads2)};
  const char *modes[3] = {"reflect", "edge", "wrap"};
  for (int i = 0; i < 3; i++) {
    int32_t n = node1(g, SC_OP_PAD, modes[i], ins2, 2, &y);
    set_string(g, n, "mode", modes[i]);
    run(g, n);
  }
  /* axes input: pad only axis -1 */
  int64_t pads3[2] = {1, 2}, axes[1] = {-1};
  int32_t ins3[4] = {x, ints(g, SC_DTYPE_I64, 2, pads3), -1, ints(g, SC_DTYPE_I64, 1, axes)};
  int32_t n = node1(g, SC_OP_PAD, "pad_axes", ins3, 4, &y);
  set_string(g, n, "mode", "reflect");
  run(g, n);
}

static void test_onehot(void **state) {
  sc_graph *g = *state;
  int64_t di[2] = {2, 3}, iv[6] = {0, -1, 4, 7, -6, 2}, depth = 5;
  float vals[2] = {-0.5f, 3.25f};
  int64_t two = 2;
  int32_t y, ins[3] = {ints_shaped(g, SC_DTYPE_I64, 2, di, iv),
                       cst(g, SC_DTYPE_I64, 0, NULL, &depth), cst(g, SC_DTYPE_F32, 1, &two, vals)};
  int32_t n = node1(g, SC_OP_ONE_HOT, "oh", ins, 3, &y);
  set_int(g, n, "axis", 1);
  run(g, n);
  run(g, node1(g, SC_OP_ONE_HOT, "oh_last", ins, 3, &y));
}

/* ---- sc_lower_unflatten of an affine offset (codegen/lower.c) ---- */

typedef struct unflat_ud {
  int32_t rout, rin;
  const int64_t *out, *in;
} unflat_ud;

/* element idx of a [out] kernel: the [in] index of its flat offset,
 * encoded as sum j[d] * 1000^(rin-1-d) */
static int32_t unflat_cb(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const unflat_ud *u = ud;
  int32_t j[SC_MAX_RANK];
  sc_lower_unflatten(cx, sc_lower_offset(cx, u->rout, u->out, idx), u->rin, u->in, j);
  int32_t code = -1;
  for (int32_t d = 0; d < u->rin; d++) {
    if (code >= 0) code = sc_lower_bin(cx, KIR_MUL, code, sc_lower_i64(cx, 1000));
    code = code < 0 ? j[d] : sc_lower_bin(cx, KIR_ADD, code, j[d]);
  }
  return code;
}

/* A reshape's index (the output's offset unflattened in the input's shape)
 * is the loop variables regrouped, without a division or a mod, when the
 * shapes' boundaries line up ([2,3,4,5] read as [6,20]); when they do not
 * ([4,6] as [3,8]) the div/mod stay. Either way every element's index is
 * right (kir's interpreter against the C arithmetic). */
static void test_unflatten_affine(void **state) {
  (void)state;
  static const int64_t out1[] = {2, 3, 4, 5}, in1[] = {6, 20}, out2[] = {4, 6}, in2[] = {3, 8};
  const unflat_ud cases[] = {{4, 2, out1, in1}, {2, 2, out2, in2}};
  for (int c = 0; c < 2; c++) {
    const unflat_ud *u = &cases[c];
    lowered L;
    memset(&L, 0, sizeof L);
    L.p = sc_program_create();
    sc_lower_ctx cx;
    memset(&cx, 0, sizeof cx);
    cx.p = L.p, cx.arena = &L.p->arena, cx.diag = &L.diag;
    int32_t b = sc_lower_scratch(&cx, "u", SC_DTYPE_I64, u->rout, u->out);
    assert_true(b >= 0);
    assert_int_equal(sc_lower_pointwise_kernel(&cx, "unflat", b, unflat_cb, (void *)u), SC_OK);
    sc_lower_ctx_release(&cx);
    const kir_kernel *k = L.p->kernels[L.p->n_kernels - 1];
    int divmod = 0;
    for (int32_t e = 0; e < k->n_exprs; e++)
      divmod += k->exprs[e].op == KIR_DIV || k->exprs[e].op == KIR_MOD;
    if (c == 0)
      assert_int_equal(divmod, 0);
    else
      assert_true(divmod > 0);
    execute(&L);
    const int64_t *got = L.bufs[b];
    int64_t n = 1;
    for (int32_t d = 0; d < u->rout; d++) n *= u->out[d];
    for (int64_t i = 0; i < n; i++) {
      int64_t rem = i, want = 0, j[SC_MAX_RANK];
      for (int32_t d = u->rin - 1; d >= 0; d--) j[d] = rem % u->in[d], rem /= u->in[d];
      for (int32_t d = 0; d < u->rin; d++) want = want * 1000 + j[d];
      assert_int_equal(got[i], want);
    }
    lowered_free(&L);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_transpose, setup_graph, teardown_graph),
      cmocka_unit_test(test_unflatten_affine),
      cmocka_unit_test_setup_teardown(test_concat_three, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_concat_contiguous, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_split_uneven, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_slice_negative_steps, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_gather_negative, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_gather_elements_nd, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_scatter, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_expand_tile, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_range, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_constant_of_shape, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_trilu, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_pad_modes, setup_graph, teardown_graph),
      cmocka_unit_test_setup_teardown(test_onehot, setup_graph, teardown_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
