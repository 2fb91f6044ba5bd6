/* lower_harness.h — a tiny executor for the lowering tests
 * (test_lower_shape.c, test_lower_linalg.c): lowers one node alone, runs the
 * program (kernel steps through kir_interpret, GEMM steps through a naive
 * loop), and compares outputs with the op's constant evaluation. Static
 * functions: include it once per test file, after test_util.h. */
#ifndef SC_TEST_LOWER_HARNESS_H
#define SC_TEST_LOWER_HARNESS_H

#include <stdlib.h>

#include "codegen/lower_internal.h"
#include "test_util.h"

typedef struct lowered {
  sc_program *p;
  int32_t *vb;  /* value id -> buffer id */
  void **bufs;  /* buffer id -> storage */
  sc_diag diag;
} lowered;

typedef struct pt_ud {
  const sc_node *n;
  int32_t out;
} pt_ud;

static int32_t point_cb(sc_lower_ctx *cx, void *ud, const int32_t *idx) {
  const pt_ud *u = ud;
  return sc_lowering_of(u->n->op)->point(cx, u->n, u->out, idx);
}

/* Lowers node nid alone (inputs are constants with data). */
static sc_status lower_node(sc_graph *g, int32_t nid, lowered *L) {
  memset(L, 0, sizeof *L);
  L->p = sc_program_create();
  assert_non_null(L->p);
  L->vb = calloc((size_t)g->n_values, sizeof(int32_t));
  int32_t *ng = calloc((size_t)g->n_nodes, sizeof(int32_t));
  assert_true(L->vb && ng);
  for (int32_t i = 0; i < g->n_values; i++) L->vb[i] = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) ng[i] = i;
  sc_lower_ctx cx;
  memset(&cx, 0, sizeof cx);
  cx.g = g, cx.p = L->p, cx.arena = &L->p->arena, cx.value_buffer = L->vb;
  cx.node_group = ng, cx.group = nid, cx.diag = &L->diag;
  const sc_node *n = sc_nod(g, nid);
  for (int32_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i] >= 0) assert_true(sc_lower_buffer_of(&cx, n->outputs[i]) >= 0);
  const sc_lowering *lw = sc_lowering_of(n->op);
  sc_lower_kind kind = sc_lower_kind_of(g, n);
  sc_status st = SC_OK;
  if (kind == SC_LOWER_POINT) {
    for (int32_t i = 0; i < n->n_outputs && st == SC_OK; i++) {
      pt_ud u = {n, i};
      st = sc_lower_pointwise_kernel(&cx, "pt", L->vb[n->outputs[i]], point_cb, &u);
    }
  } else if (kind == SC_LOWER_KERNEL || kind == SC_LOWER_STEP) {
    st = lw->build(&cx, n);
  } else {
    st = SC_ERR_UNSUPPORTED;
  }
  sc_lower_ctx_release(&cx);
  free(ng);
  return st;
}

static void run_gemm(const sc_gemm *m, void **bufs) {
  const float *A = bufs[m->a], *B = bufs[m->b];
  float *Cm = bufs[m->c];
  const float *bias = m->bias >= 0 ? bufs[m->bias] : NULL;
  for (int64_t b = 0; b < m->batch; b++)
    for (int64_t i = 0; i < m->m; i++)
      for (int64_t j = 0; j < m->n; j++) {
        double acc = 0;
        for (int64_t p = 0; p < m->k; p++) {
          double av = m->trans_a ? A[b * m->stride_a + p * m->lda + i]
                                 : A[b * m->stride_a + i * m->lda + p];
          double bv = m->trans_b ? B[b * m->stride_b + j * m->ldb + p]
                                 : B[b * m->stride_b + p * m->ldb + j];
          acc += av * bv;
        }
        float *c = &Cm[b * m->stride_c + i * m->ldc + j];
        double v = m->alpha * acc + (m->beta != 0 ? m->beta * *c : 0.0);
        if (bias) v += m->bias_full ? bias[i * m->n + j] : bias[j];
        *c = (float)v;
      }
}

/* Runs every step; TEMP/OUTPUT storage starts as all-ones bytes (NaN for
 * floats) so an element nobody writes fails the comparison. */
static void execute(lowered *L) {
  sc_program *p = L->p;
  L->bufs = calloc((size_t)p->n_buffers + 1, sizeof(void *));
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *bf = &p->buffers[b];
    if (bf->kind == SC_BUF_CONST) {
      L->bufs[b] = (void *)bf->data;
    } else if (bf->kind != SC_BUF_VIEW) {
      L->bufs[b] = malloc((size_t)(bf->bytes ? bf->bytes : 1));
      memset(L->bufs[b], 0xff, (size_t)bf->bytes);
    }
  }
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == SC_BUF_VIEW) L->bufs[b] = L->bufs[sc_program_root(p, b)];
  for (int32_t s = 0; s < p->n_steps; s++) {
    const sc_step *st = &p->steps[s];
    if (st->kind == SC_STEP_GEMM) {
      run_gemm(&st->gemm, L->bufs);
      continue;
    }
    if (st->kind == SC_STEP_SCATTER_ADD) {
      const sc_scatter_step *c = &st->scatter;
      const sc_buffer *ob = &p->buffers[c->out];
      memmove(L->bufs[c->out], L->bufs[c->data], (size_t)ob->bytes);
      assert_int_equal(sc_scatter_add_rows(c, ob->dtype, p->buffers[c->indices].dtype,
                                           L->bufs[c->out], L->bufs[c->indices],
                                           L->bufs[c->updates]),
                       -1);
      continue;
    }
    const kir_kernel *k = p->kernels[st->kernel];
    void *pb[64];
    assert_true(k->n_params <= 64);
    for (int32_t i = 0; i < k->n_params; i++) pb[i] = L->bufs[k->params[i].buffer];
    sc_status rc = kir_interpret(k, pb, &L->diag);
    if (rc != SC_OK) fail_msg("kir_interpret: %s", L->diag.msg);
  }
}

static void lowered_free(lowered *L) {
  if (L->bufs)
    for (int32_t b = 0; b < L->p->n_buffers; b++) {
      sc_buf_kind kd = L->p->buffers[b].kind;
      if (kd != SC_BUF_CONST && kd != SC_BUF_VIEW) free(L->bufs[b]);
    }
  free(L->bufs);
  free(L->vb);
  sc_program_destroy(L->p);
}

/* Count of steps of a kind in the program. */
static int count_steps(const lowered *L, sc_step_kind kind) {
  int c = 0;
  for (int32_t s = 0; s < L->p->n_steps; s++) c += L->p->steps[s].kind == kind;
  return c;
}

/* Compares value v's computed elements with want (of v's dtype): exact
 * when rtol == 0. */
static void compare(const sc_value *v, const void *got, const void *want, double rtol) {
  int64_t numel = sc_value_numel(v);
  for (int64_t i = 0; i < numel; i++) {
    if (sc_dtype_is_float(v->dtype)) {
      double g = sc_load_f64(v->dtype, got, i), w = sc_load_f64(v->dtype, want, i);
      if (rtol == 0) {
        if (!(g == w || (isnan(g) && isnan(w))))
          fail_msg("'%s'[%lld]: got %.9g, want %.9g", v->name, (long long)i, g, w);
      } else {
        near(g, w, rtol);
      }
    } else {
      int64_t g = sc_load_i64(v->dtype, got, i), w = sc_load_i64(v->dtype, want, i);
      if (g != w)
        fail_msg("'%s'[%lld]: got %lld, want %lld", v->name, (long long)i, (long long)g,
                 (long long)w);
    }
  }
}

/* infer, lower, run, then eval as the oracle; compare every output. */
static lowered check_vs_eval(sc_graph *g, int32_t nid, double rtol) {
  if (infer(g, nid) != SC_OK) fail_msg("infer: %s", g->diag.msg);
  lowered L;
  if (lower_node(g, nid, &L) != SC_OK) fail_msg("lower: %s", L.diag.msg);
  execute(&L);
  if (eval(g, nid) != SC_OK) fail_msg("eval: %s", g->diag.msg);
  const sc_node *n = sc_nod(g, nid);
  for (int32_t i = 0; i < n->n_outputs; i++) {
    const sc_value *v = sc_node_output(g, n, i);
    if (!v) continue;
    assert_non_null(v->data);
    compare(v, L.bufs[L.vb[n->outputs[i]]], v->data, rtol);
  }
  return L;
}

#endif
