/* test_context_parallel.c — the cp layout (ir/context_parallel.h) and the
 * ring attention built on it (docs/context-parallel.md), with the CPU
 * device's fused attention kernels (runtime/cpu_attention.h) as the blocks.
 *
 * The ring is run for cp ranks in one process: each rank holds the rows of
 * its two chunks; at every step the keys and values (and, in the backward,
 * their gradients' accumulators) move one rank along the ring, as the
 * collective permute will move them, tagged with the rank that owns them so
 * that the test sees which block is where. The result is compared with the
 * same kernels run on the whole sequence:
 *   forward: o and lse of each rank's rows, the blocks merged by log-sum-exp;
 *   backward: dq of each rank's rows, dk and dv once they are home.
 * Tolerance |got − ref| <= 1e-5·(1 + |ref|): f32 sums of at most 48
 * products of values in [-1, 1], the merge adds two exp/log roundings per
 * step (measured: at most 1e-6). Every value checked is finite (NaN fails).
 * Inputs are seeded random. The combinatorial checks (the block pairs cover
 * each visible (query, key) pair once, the work per rank is equal, the
 * bytes the ring moves equal sc_cp_ring_bytes) are exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "ir/context_parallel.h"
#include "runtime/cpu_attention.h"

enum { MAX_CP = 8 };

/* ---- the layout ---- */

static void test_positions(void **state) {
  (void)state;
  for (int64_t cp = 1; cp <= MAX_CP; cp++) {
    int64_t seq = 2 * cp * 3, local = seq / cp;
    bool *seen = calloc((size_t)seq, 1);
    assert_non_null(seen);
    for (int64_t r = 0; r < cp; r++)
      for (int64_t j = 0; j < local; j++) {
        int64_t p = sc_cp_position(seq, cp, r, j);
        assert_true(p >= 0 && p < seq);
        assert_false(seen[p]);
        seen[p] = true;
        /* chunk r, then chunk 2cp-1-r */
        assert_int_equal(p / 3, j < 3 ? r : 2 * cp - 1 - r);
      }
    free(seen);
  }
  /* cp=2, 8 tokens: rank 0 holds 0 1 6 7, rank 1 holds 2 3 4 5 */
  const int64_t want[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
  for (int64_t r = 0; r < 2; r++)
    for (int64_t j = 0; j < 4; j++) assert_int_equal(sc_cp_position(8, 2, r, j), want[r][j]);
}

static void test_sequence_check(void **state) {
  (void)state;
  sc_diag d = {0};
  assert_int_equal(sc_cp_check_sequence(16, 2, "input_ids", &d), SC_OK);
  assert_int_equal(sc_cp_check_sequence(18, 2, "input_ids", &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "input_ids: sequence length 18"));
  assert_non_null(strstr(d.msg, "2·cp = 4 chunks"));
  assert_non_null(strstr(d.msg, "lengths that do: 16 or 20"));
  sc_diag_clear(&d);
  assert_int_equal(sc_cp_check_sequence(6, 4, NULL, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "lengths that do: 8"));
  sc_diag_clear(&d);
  assert_int_equal(sc_cp_check_sequence(0, 2, NULL, &d), SC_ERR_USAGE);
  sc_diag_clear(&d);
  assert_int_equal(sc_cp_check_sequence(8, 0, NULL, &d), SC_ERR_USAGE);
}

/* Without a causal mask a sequence that does not divide is padded to the
 * next multiple of cp: the vit sample's 17 tokens to 18 at cp=2, 18 at
 * cp=3, 20 at cp=4 (at most cp − 1 padding rows); a length cp divides is
 * kept. */
static void test_padded_sequence(void **state) {
  (void)state;
  assert_int_equal(sc_cp_padded_sequence(17, 2), 18);
  assert_int_equal(sc_cp_padded_sequence(17, 3), 18);
  assert_int_equal(sc_cp_padded_sequence(17, 4), 20);
  assert_int_equal(sc_cp_padded_sequence(16, 4), 16);
  assert_int_equal(sc_cp_padded_sequence(18, 2), 18);
  for (int64_t cp = 1; cp <= 8; cp++)
    for (int64_t s = 1; s <= 40; s++) {
      int64_t p = sc_cp_padded_sequence(s, cp);
      assert_true(p % cp == 0 && p >= s && p - s < cp);
    }
}

/* The blocks of the causal ring, as global (query, key) pairs: each
 * visible pair once, no invisible one; the same count on every rank. */
static void test_block_pairs(void **state) {
  (void)state;
  for (int64_t cp = 1; cp <= MAX_CP; cp++) {
    const int64_t c = 2, seq = 2 * cp * c, local = 2 * c;
    int32_t *hits = calloc((size_t)(seq * seq), sizeof *hits);
    assert_non_null(hits);
    for (int64_t r = 0; r < cp; r++) {
      int64_t pairs = 0;
      for (int64_t i = 0; i < cp; i++) {
        int64_t s = sc_cp_ring_source(cp, r, i);
        assert_int_equal(s, i == 0 ? r : ((r - i) % cp + cp) % cp);
        /* [q0, q1) x [k0, k1) full blocks, or the local causal block */
        int64_t blocks[2][4];
        int32_t nb = 0;
        if (i == 0) {
          for (int64_t a = 0; a < local; a++)
            for (int64_t b = 0; b <= a; b++, pairs++)
              hits[sc_cp_position(seq, cp, r, a) * seq + sc_cp_position(seq, cp, s, b)]++;
          continue;
        }
        int64_t h = sc_cp_ring_half(r, s);
        blocks[nb][0] = c, blocks[nb][1] = 2 * c, blocks[nb][2] = 0, blocks[nb][3] = c, nb++;
        blocks[nb][0] = h * c, blocks[nb][1] = h * c + c, blocks[nb][2] = h * c,
        blocks[nb][3] = h * c + c, nb++;
        for (int32_t k = 0; k < nb; k++)
          for (int64_t a = blocks[k][0]; a < blocks[k][1]; a++)
            for (int64_t b = blocks[k][2]; b < blocks[k][3]; b++, pairs++)
              hits[sc_cp_position(seq, cp, r, a) * seq + sc_cp_position(seq, cp, s, b)]++;
      }
      assert_int_equal(pairs, (int64_t)sc_cp_rank_pairs(seq, cp, true));
    }
    for (int64_t qp = 0; qp < seq; qp++)
      for (int64_t kp = 0; kp < seq; kp++)
        if (hits[qp * seq + kp] != (kp <= qp ? 1 : 0))
          fail_msg("cp=%lld: pair (query %lld, key %lld) computed %d times", (long long)cp,
                   (long long)qp, (long long)kp, hits[qp * seq + kp]);
    assert_true(sc_cp_rank_pairs(seq, cp, true) * (double)cp == (double)(seq * (seq + 1) / 2));
    assert_true(sc_cp_rank_pairs(seq, cp, false) * (double)cp == (double)(seq * seq));
    free(hits);
  }
}

/* ---- the ring with the CPU kernels ---- */

typedef struct dims {
  int64_t b, h, kvh, seq, d, dv, cp;
  bool causal;
} dims;

/* A tensor [rows, n, width]: rows = batch·heads, n sequence rows. */
typedef struct tensor {
  float *x;
  int64_t rows, n, width;
} tensor;

static tensor make_t(int64_t rows, int64_t n, int64_t width) {
  tensor t = {calloc((size_t)(rows * n * width + 1), sizeof(float)), rows, n, width};
  assert_non_null(t.x);
  return t;
}

static void fill(tensor *t) {
  for (int64_t i = 0; i < t->rows * t->n * t->width; i++) t->x[i] = (float)rnd(-1, 1);
}

static float *at(const tensor *t, int64_t row, int64_t j) {
  return t->x + (row * t->n + j) * t->width;
}

/* rows [j0, j0 + n) of each head of src into a new tensor */
static tensor rows_of(const tensor *src, int64_t j0, int64_t n) {
  tensor t = make_t(src->rows, n, src->width);
  for (int64_t r = 0; r < src->rows; r++)
    memcpy(at(&t, r, 0), at(src, r, j0), (size_t)(n * src->width) * sizeof(float));
  return t;
}

/* dst's rows [j0, j0 + src.n) += src */
static void add_rows(tensor *dst, int64_t j0, const tensor *src) {
  for (int64_t r = 0; r < src->rows; r++)
    for (int64_t i = 0; i < src->n * src->width; i++) at(dst, r, j0)[i] += at(src, r, 0)[i];
}

/* rank r's rows of a global tensor, in the layout's order */
static tensor local_of(const tensor *g, const dims *s, int64_t r) {
  int64_t local = s->seq / s->cp;
  tensor t = make_t(g->rows, local, g->width);
  for (int64_t row = 0; row < g->rows; row++)
    for (int64_t j = 0; j < local; j++)
      memcpy(at(&t, row, j), at(g, row, sc_cp_position(s->seq, s->cp, r, j)),
             (size_t)g->width * sizeof(float));
  return t;
}

static sc_attention_step step_of(const dims *s, int64_t sq, int64_t skv, bool causal) {
  sc_attention_step a = {.q = 0, .k = 1, .v = 2, .mask = -1, .o = 3, .lse = 4, .batch = s->b,
                         .heads = s->h, .kv_heads = s->kvh, .sq = sq, .skv = skv, .d = s->d,
                         .dv_dim = s->dv, .scale = (float)(1.0 / sqrt((double)s->d)),
                         .causal = causal};
  return a;
}

static void forward(const dims *s, const tensor *q, const tensor *k, const tensor *v, bool causal,
                    tensor *o, tensor *lse) {
  sc_attention_step a = step_of(s, q->n, k->n, causal);
  *o = make_t(q->rows, q->n, s->dv);
  *lse = make_t(q->rows, q->n, 1);
  sc_cpu_attention_io io = {.a = &a, .t = SC_DTYPE_F32, .q = q->x, .k = k->x, .v = v->x,
                            .o = o->x, .lse = lse->x};
  assert_true(sc_cpu_attention_forward(NULL, &io));
}

static void backward(const dims *s, const tensor *q, const tensor *k, const tensor *v,
                     const tensor *o, const tensor *lse, const tensor *d_o, bool causal,
                     tensor *dq, tensor *dk, tensor *dv) {
  sc_attention_step a = step_of(s, q->n, k->n, causal);
  *dq = make_t(q->rows, q->n, s->d);
  *dk = make_t(k->rows, k->n, s->d);
  *dv = make_t(v->rows, v->n, s->dv);
  sc_cpu_attention_io io = {.a = &a, .t = SC_DTYPE_F32, .q = q->x, .k = k->x, .v = v->x,
                            .o = o->x, .lse = lse->x, .d_o = d_o->x, .dq = dq->x,
                            .dk = dk->x, .dv = dv->x};
  assert_true(sc_cpu_attention_backward(NULL, &io));
}

/* (o, lse) rows [j0, j0 + blk.n) merged with a block's result by
 * log-sum-exp (the accumulator's lse is finite: see the doc) */
static void merge(tensor *o, tensor *lse, int64_t j0, const tensor *ob, const tensor *lb) {
  for (int64_t r = 0; r < ob->rows; r++)
    for (int64_t j = 0; j < ob->n; j++) {
      float *la = at(lse, r, j0 + j), lbv = *at(lb, r, j);
      float m = *la > lbv ? *la : lbv;
      float l = m + logf(expf(*la - m) + expf(lbv - m));
      float wa = expf(*la - l), wb = expf(lbv - l);
      float *oa = at(o, r, j0 + j);
      const float *obr = at(ob, r, j);
      for (int64_t c = 0; c < o->width; c++) oa[c] = oa[c] * wa + obr[c] * wb;
      *la = l;
    }
}

static void drop(tensor *t) {
  free(t->x);
  t->x = NULL;
}

static void expect_close(const char *what, int64_t r, const tensor *got, const tensor *ref,
                         double tol) {
  double worst = 0;
  int64_t n = got->rows * got->n * got->width;
  for (int64_t i = 0; i < n; i++) {
    double g = got->x[i], e = fabs(g - ref->x[i]) / (1 + fabs(ref->x[i]));
    if (!isfinite(g) || e > tol)
      fail_msg("rank %lld %s[%lld] = %.9g, reference %.9g (tolerance %.3g)", (long long)r, what,
               (long long)i, g, (double)ref->x[i], tol);
    if (e > worst) worst = e;
  }
  if (worst > 0) print_message("  rank %lld %-3s worst relative error %.3g\n", (long long)r,
                               what, worst);
}

/* One step of the ring: every rank's blocks move to the next rank. */
static void rotate(tensor *t, int64_t *owner, int64_t cp, double *bytes) {
  tensor last = t[cp - 1];
  int64_t last_owner = owner[cp - 1];
  for (int64_t r = cp - 1; r > 0; r--) t[r] = t[r - 1], owner[r] = owner[r - 1];
  t[0] = last, owner[0] = last_owner;
  *bytes += (double)(t[0].rows * t[0].n * t[0].width) * sizeof(float);
}

static void run_ring(const dims *s, uint64_t seed) {
  const int64_t cp = s->cp, local = s->seq / cp, c = local / 2;
  const double tol = 1e-5;
  rng_seed(seed);
  tensor q = make_t(s->b * s->h, s->seq, s->d), k = make_t(s->b * s->kvh, s->seq, s->d);
  tensor v = make_t(s->b * s->kvh, s->seq, s->dv), d_o = make_t(s->b * s->h, s->seq, s->dv);
  fill(&q), fill(&k), fill(&v), fill(&d_o);
  /* the whole attention */
  tensor o, lse, dq, dk, dv;
  forward(s, &q, &k, &v, s->causal, &o, &lse);
  backward(s, &q, &k, &v, &o, &lse, &d_o, s->causal, &dq, &dk, &dv);

  tensor lq[MAX_CP], lk[MAX_CP], lv[MAX_CP], lo[MAX_CP], ll[MAX_CP], ldo[MAX_CP];
  tensor ldq[MAX_CP], adk[MAX_CP], adv[MAX_CP];
  int64_t owner[MAX_CP], owner_kv[MAX_CP];
  double fwd_bytes = 0, bwd_bytes = 0;
  for (int64_t r = 0; r < cp; r++) {
    lq[r] = local_of(&q, s, r), lk[r] = local_of(&k, s, r), lv[r] = local_of(&v, s, r);
    ldo[r] = local_of(&d_o, s, r);
    owner[r] = r;
    /* step 0: the rank's own block, causal over its two chunks */
    forward(s, &lq[r], &lk[r], &lv[r], s->causal, &lo[r], &ll[r]);
  }
  /* forward steps 1 .. cp-1: k and v move (their owner with them) */
  tensor rk[MAX_CP], rv[MAX_CP];
  for (int64_t r = 0; r < cp; r++) rk[r] = lk[r], rv[r] = lv[r];
  for (int64_t i = 1; i < cp; i++) {
    int64_t own2[MAX_CP];
    memcpy(own2, owner, sizeof own2);
    rotate(rk, owner, cp, &fwd_bytes);
    rotate(rv, own2, cp, &fwd_bytes);
    for (int64_t r = 0; r < cp; r++) {
      int64_t src = owner[r];
      assert_int_equal(src, sc_cp_ring_source(cp, r, i));
      tensor ob, lb;
      if (!s->causal) {
        forward(s, &lq[r], &rk[r], &rv[r], false, &ob, &lb);
        merge(&lo[r], &ll[r], 0, &ob, &lb);
        drop(&ob), drop(&lb);
        continue;
      }
      /* X: queries H1 against keys H0 */
      tensor qx = rows_of(&lq[r], c, c), kx = rows_of(&rk[r], 0, c), vx = rows_of(&rv[r], 0, c);
      forward(s, &qx, &kx, &vx, false, &ob, &lb);
      merge(&lo[r], &ll[r], c, &ob, &lb);
      drop(&ob), drop(&lb), drop(&qx), drop(&kx), drop(&vx);
      /* Y: queries Hh against keys Hh */
      int64_t h = sc_cp_ring_half(r, src);
      tensor qy = rows_of(&lq[r], h * c, c), ky = rows_of(&rk[r], h * c, c);
      tensor vy = rows_of(&rv[r], h * c, c);
      forward(s, &qy, &ky, &vy, false, &ob, &lb);
      merge(&lo[r], &ll[r], h * c, &ob, &lb);
      drop(&ob), drop(&lb), drop(&qy), drop(&ky), drop(&vy);
    }
  }
  for (int64_t r = 0; r < cp; r++) {
    tensor ro = local_of(&o, s, r), rl = local_of(&lse, s, r);
    expect_close("o", r, &lo[r], &ro, tol);
    expect_close("lse", r, &ll[r], &rl, tol);
    drop(&ro), drop(&rl);
  }

  /* backward: the final o and lse; k, v and their gradients' accumulators
   * travel together, and the accumulators take one more hop home */
  for (int64_t r = 0; r < cp; r++) {
    owner_kv[r] = r;
    tensor gk, gv;
    backward(s, &lq[r], &lk[r], &lv[r], &lo[r], &ll[r], &ldo[r], s->causal, &ldq[r], &gk, &gv);
    adk[r] = gk, adv[r] = gv;
    rk[r] = lk[r], rv[r] = lv[r];
  }
  for (int64_t i = 1; i < cp; i++) {
    int64_t o1[MAX_CP], o2[MAX_CP], o3[MAX_CP];
    memcpy(o1, owner_kv, sizeof o1), memcpy(o2, owner_kv, sizeof o2);
    memcpy(o3, owner_kv, sizeof o3);
    rotate(rk, owner_kv, cp, &bwd_bytes);
    rotate(rv, o1, cp, &bwd_bytes);
    rotate(adk, o2, cp, &bwd_bytes);
    rotate(adv, o3, cp, &bwd_bytes);
    for (int64_t r = 0; r < cp; r++) {
      int64_t src = owner_kv[r];
      assert_int_equal(src, sc_cp_ring_source(cp, r, i));
      /* the blocks: [q0, q0 + nq) x [k0, k0 + nk) */
      int64_t blocks[2][4] = {{0, local, 0, local}, {0, 0, 0, 0}};
      int32_t nb = 1;
      if (s->causal) {
        int64_t h = sc_cp_ring_half(r, src);
        int64_t x[4] = {c, c, 0, c}, y[4] = {h * c, c, h * c, c};
        memcpy(blocks[0], x, sizeof x), memcpy(blocks[1], y, sizeof y);
        nb = 2;
      }
      for (int32_t b = 0; b < nb; b++) {
        int64_t q0 = blocks[b][0], nq = blocks[b][1], k0 = blocks[b][2], nk = blocks[b][3];
        tensor qb = rows_of(&lq[r], q0, nq), ob = rows_of(&lo[r], q0, nq);
        tensor lb = rows_of(&ll[r], q0, nq), dob = rows_of(&ldo[r], q0, nq);
        tensor kb = rows_of(&rk[r], k0, nk), vb = rows_of(&rv[r], k0, nk);
        tensor gq, gk, gv;
        backward(s, &qb, &kb, &vb, &ob, &lb, &dob, false, &gq, &gk, &gv);
        add_rows(&ldq[r], q0, &gq);
        add_rows(&adk[r], k0, &gk);
        add_rows(&adv[r], k0, &gv);
        drop(&qb), drop(&ob), drop(&lb), drop(&dob), drop(&kb), drop(&vb);
        drop(&gq), drop(&gk), drop(&gv);
      }
    }
  }
  if (cp > 1) {
    int64_t o2[MAX_CP];
    memcpy(o2, owner_kv, sizeof o2);
    rotate(adk, owner_kv, cp, &bwd_bytes);
    rotate(adv, o2, cp, &bwd_bytes);
  }
  for (int64_t r = 0; r < cp; r++) {
    assert_int_equal(owner_kv[r], r); /* home */
    tensor rq = local_of(&dq, s, r), rkk = local_of(&dk, s, r), rvv = local_of(&dv, s, r);
    expect_close("dq", r, &ldq[r], &rq, tol);
    expect_close("dk", r, &adk[r], &rkk, tol);
    expect_close("dv", r, &adv[r], &rvv, tol);
    drop(&rq), drop(&rkk), drop(&rvv);
  }
  /* what one rank sent (rotate counts one rank's block per hop) is what
   * the formula says */
  assert_true(fwd_bytes == sc_cp_ring_bytes(s->b, s->kvh, s->seq, s->d, s->dv, 4, cp, false));
  assert_true(bwd_bytes == sc_cp_ring_bytes(s->b, s->kvh, s->seq, s->d, s->dv, 4, cp, true));

  for (int64_t r = 0; r < cp; r++) {
    drop(&lq[r]), drop(&lk[r]), drop(&lv[r]), drop(&lo[r]), drop(&ll[r]), drop(&ldo[r]);
    drop(&ldq[r]), drop(&adk[r]), drop(&adv[r]);
  }
  drop(&q), drop(&k), drop(&v), drop(&d_o), drop(&o), drop(&lse), drop(&dq), drop(&dk);
  drop(&dv);
}

/* Causal (GPT-2, Llama: grouped kv heads) at cp = 2, 3, 4, and without a
 * mask (ViT) at cp = 2 and 4. */
static void test_ring(void **state) {
  (void)state;
  const dims cases[] = {
      {.b = 2, .h = 2, .kvh = 2, .seq = 12, .d = 8, .dv = 8, .cp = 2, .causal = true},
      {.b = 1, .h = 4, .kvh = 2, .seq = 24, .d = 8, .dv = 6, .cp = 3, .causal = true},
      {.b = 2, .h = 2, .kvh = 1, .seq = 48, .d = 16, .dv = 16, .cp = 4, .causal = true},
      {.b = 2, .h = 2, .kvh = 2, .seq = 12, .d = 8, .dv = 8, .cp = 2, .causal = false},
      {.b = 1, .h = 3, .kvh = 3, .seq = 40, .d = 8, .dv = 8, .cp = 4, .causal = false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    print_message("cp=%lld seq=%lld %s\n", (long long)cases[i].cp, (long long)cases[i].seq,
                  cases[i].causal ? "causal" : "no mask");
    run_ring(&cases[i], 4100 + i);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_positions),
      cmocka_unit_test(test_sequence_check),
      cmocka_unit_test(test_padded_sequence),
      cmocka_unit_test(test_block_pairs),
      cmocka_unit_test(test_ring),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
