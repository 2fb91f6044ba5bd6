/* test_pipe_schedule.c — pipeline schedules as action lists and their
 * deadlock check (codegen/pipe_schedule.h).
 *
 * For P = 1..8 pipeline ranks and M = 1..32 microbatches: GPipe, 1F1B and
 * ZB-H1 (and interleaved 1F1B with V = 2 and 3 chunks per rank, M a
 * multiple of P) give every rank a list that holds each of its actions
 * (forward, backward, weight per microbatch; prepare first, norm, update)
 * once, runs to its end under the runtime's rules on the dependencies of a
 * pipelined transformer (sc_pipe_deps_chain), and stashes at most the
 * schedule's formula of microbatches at once (GPipe M, 1F1B min(P - r, M),
 * interleaved min((P-r-1)·2 + (V-1)·P + 1, M·V)), ZB-H1 as 1F1B. ZB-H1's
 * rank r is 1F1B's list with the weight piece of microbatch m moved to
 * right after the backward of min(m + r, M-1): r weight pieces held back at
 * most, min(r + 1, M) after its last backward (its step's timing:
 * test_dist_sim). The interleaved lists' forwards and backwards are
 * Megatron-LM's order, written out from its loop (warm-up count, chunk
 * order, microbatches in groups of P) for P = 2..8, V = 2..4, M = 2P..4P
 * (at M = P Megatron runs every forward first; these lists keep the
 * warm-up formula). Broken lists are refused with the reason: a backward
 * before its forward on one rank, a forward before its chunk's prepare, an
 * action missing, one run twice, one on the wrong rank, and a cycle between
 * two ranks (each waits for the other's later action), named in the
 * message. Bad arguments: an interleaved schedule with M not a multiple
 * of P or with V = 1, V > 1 with 1F1B. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "codegen/pipe_schedule.h"

static int32_t formula(sc_schedule_kind k, int32_t P, int32_t V, int32_t M, int32_t r) {
  if (k == SC_SCHEDULE_GPIPE) return M;
  int32_t warm = k != SC_SCHEDULE_INTERLEAVED ? P - r - 1 : (P - r - 1) * 2 + (V - 1) * P;
  return warm + 1 < M * V ? warm + 1 : M * V;
}

/* Builds every rank's list, checks it, compares the stash with the
 * formula; returns the check's status (d holds its message). */
static sc_status schedule_all(sc_schedule_kind k, int32_t P, int32_t V, int32_t M, sc_diag *d,
                              sc_pipe_action **lists, int32_t *n) {
  for (int32_t r = 0; r < P; r++) {
    assert_int_equal(sc_pipe_schedule(k, P, V, M, r, &lists[r], &n[r], d), SC_OK);
    /* F, B, W of each chunk and microbatch; P (first), N, U */
    int32_t want = 3 * M * V + 3 * V;
    assert_int_equal(n[r], want);
    for (int32_t v = 0; v < V; v++)
      assert_true(lists[r][v].phase == SC_PIPE_PREPARE && lists[r][v].chunk == v * P + r &&
                  lists[r][v].mb == -1);
    int32_t peak = sc_pipe_peak_stash(lists[r], n[r]);
    if (peak != formula(k, P, V, M, r))
      fail_msg("kind %d P %d V %d M %d rank %d: %d stashed, formula %d", (int)k, (int)P, (int)V,
               (int)M, (int)r, (int)peak, (int)formula(k, P, V, M, r));
  }
  sc_pipe_deps deps;
  assert_int_equal(sc_pipe_deps_chain(P * V, &deps, d), SC_OK);
  sc_status st = sc_pipe_check(&deps, P, V, M, lists, n, d);
  sc_pipe_deps_free(&deps);
  return st;
}

static void free_all(sc_pipe_action **lists, int32_t P) {
  for (int32_t r = 0; r < P; r++) {
    sc_free(lists[r]);
    lists[r] = NULL;
  }
}

static void test_all_schedules(void **state) {
  (void)state;
  sc_pipe_action *lists[8] = {0};
  int32_t n[8];
  sc_diag d;
  int checked = 0;
  for (int32_t P = 1; P <= 8; P++)
    for (int32_t M = 1; M <= 32; M++) {
      static const sc_schedule_kind one_chunk[] = {SC_SCHEDULE_GPIPE, SC_SCHEDULE_1F1B,
                                                   SC_SCHEDULE_ZB_H1};
      for (int kk = 0; kk < 3; kk++) {
        int k = one_chunk[kk];
        sc_diag_clear(&d);
        sc_status st = schedule_all((sc_schedule_kind)k, P, 1, M, &d, lists, n);
        if (st != SC_OK) fail_msg("kind %d P %d M %d: %s", k, (int)P, (int)M, d.msg);
        free_all(lists, P);
        checked++;
      }
      for (int32_t V = 2; V <= 3 && M % P == 0; V++) {
        sc_diag_clear(&d);
        sc_status st = schedule_all(SC_SCHEDULE_INTERLEAVED, P, V, M, &d, lists, n);
        if (st != SC_OK) fail_msg("interleaved P %d V %d M %d: %s", (int)P, (int)V, (int)M, d.msg);
        free_all(lists, P);
        checked++;
      }
    }
  assert_true(checked > 900);
}

/* Megatron-LM's interleaved 1F1B (schedules.py,
 * forward_backward_pipelining_with_interleaving), written out from its
 * loop: the k-th forward of rank r runs model chunk (k mod P·V) div P, the
 * k-th backward chunk V-1 minus that, on microbatch (k div P·V)·P + k mod
 * P (microbatches in groups of P); (P-r-1)·2 + (V-1)·P warm-up forwards
 * (at most M·V), then a forward and a backward while forwards are left,
 * then the backwards. Global chunk v·P + r. Megatron runs every forward
 * first when M = P, which this list does not (its warm-up formula holds
 * there too: the same bubble, a smaller stash; docs/training.md). */
/* Appends "F<chunk>.<mb>" (or B) of Megatron's k-th forward or backward. */
static void megatron_at(int32_t P, int32_t V, int32_t r, int32_t k, bool forward, char *out,
                        size_t size, size_t *pos) {
  int32_t v = (k % (P * V)) / P; /* get_model_chunk_id */
  if (!forward) v = V - 1 - v;
  int32_t mb = (k / (P * V)) * P + k % P; /* get_microbatch_id_in_model_chunk */
  int w = snprintf(out + *pos, size - *pos, "%s%c%d.%d", *pos ? " " : "", forward ? 'F' : 'B',
                   (int)(v * P + r), (int)mb);
  assert_true(w > 0 && (size_t)w < size - *pos);
  *pos += (size_t)w;
}

static void megatron_interleaved(int32_t P, int32_t V, int32_t M, int32_t r, char *out,
                                 size_t size) {
  int32_t total = M * V, warm = (P - r - 1) * 2 + (V - 1) * P;
  if (warm > total) warm = total;
  size_t pos = 0;
  out[0] = 0;
  for (int32_t k = 0; k < warm; k++) megatron_at(P, V, r, k, true, out, size, &pos);
  for (int32_t k = 0; k < total - warm; k++) { /* the steady state */
    megatron_at(P, V, r, k + warm, true, out, size, &pos);
    megatron_at(P, V, r, k, false, out, size, &pos);
  }
  for (int32_t k = total - warm; k < total; k++) megatron_at(P, V, r, k, false, out, size, &pos);
}

static void test_interleaved_megatron(void **state) {
  (void)state;
  char want[8192], got[8192];
  int checked = 0;
  for (int32_t P = 2; P <= 8; P++)
    for (int32_t V = 2; V <= 4; V++)
      for (int32_t M = 2 * P; M <= 4 * P; M += P)
        for (int32_t r = 0; r < P; r++) {
          sc_pipe_action *a = NULL;
          int32_t n = 0;
          sc_diag d;
          sc_diag_clear(&d);
          assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_INTERLEAVED, P, V, M, r, &a, &n, &d),
                           SC_OK);
          size_t pos = 0;
          got[0] = 0;
          for (int32_t i = 0; i < n; i++) { /* forwards and backwards, in order */
            if (a[i].phase != SC_PIPE_FORWARD && a[i].phase != SC_PIPE_BACKWARD) continue;
            char name[32];
            int w = snprintf(got + pos, sizeof got - pos, "%s%s", pos ? " " : "",
                             sc_pipe_action_name(&a[i], name, sizeof name));
            assert_true(w > 0 && (size_t)w < sizeof got - pos);
            pos += (size_t)w;
          }
          sc_free(a);
          megatron_interleaved(P, V, M, r, want, sizeof want);
          if (strcmp(got, want) != 0)
            fail_msg("P %d V %d M %d rank %d:\n  list     %s\n  Megatron %s", (int)P, (int)V,
                     (int)M, (int)r, got, want);
          checked++;
        }
  assert_int_equal(checked, 3 * (2 * 3 + 3 * 3 + 4 * 3 + 5 * 3 + 6 * 3 + 7 * 3 + 8 * 3));
}

/* ZB-H1 for P = 1..8, M = 1..32: rank r's list is 1F1B's with each W
 * moved back: W of microbatch m right after B of min(m + r, M-1), so r
 * weight pieces held at most and min(r + 1, M) after the last backward
 * (the last rank's P fill its waits; rank 0 none held); the stash of every
 * rank equals 1F1B's. */
static void test_zb_h1(void **state) {
  (void)state;
  sc_diag d;
  sc_diag_clear(&d);
  for (int32_t P = 1; P <= 8; P++)
    for (int32_t M = 1; M <= 32; M++)
      for (int32_t r = 0; r < P; r++) {
        sc_pipe_action *a = NULL, *o = NULL;
        int32_t n = 0, no = 0;
        assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_ZB_H1, P, 1, M, r, &a, &n, &d), SC_OK);
        assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_1F1B, P, 1, M, r, &o, &no, &d), SC_OK);
        assert_int_equal(n, no);
        assert_int_equal(sc_pipe_peak_stash(a, n), sc_pipe_peak_stash(o, no));
        /* forward and backward pieces in 1F1B's order */
        for (int32_t i = 0, j = 0; i < n; i++) {
          if (a[i].phase != SC_PIPE_FORWARD && a[i].phase != SC_PIPE_BACKWARD) continue;
          while (o[j].phase != SC_PIPE_FORWARD && o[j].phase != SC_PIPE_BACKWARD) j++;
          assert_true(a[i].phase == o[j].phase && a[i].mb == o[j].mb);
          j++;
        }
        int32_t last_b = -1, tail = 0, held = 0, peak_held = 0;
        for (int32_t i = 0; i < n; i++) {
          if (a[i].phase == SC_PIPE_BACKWARD) {
            last_b = a[i].mb;
            held++;
          }
          if (a[i].phase == SC_PIPE_WEIGHT) {
            int32_t after = a[i].mb + r < M - 1 ? a[i].mb + r : M - 1;
            if (last_b != after)
              fail_msg("P %d M %d rank %d: W%d.%d after B of microbatch %d, not %d", (int)P,
                       (int)M, (int)r, (int)r, (int)a[i].mb, (int)last_b, (int)after);
            tail += last_b == M - 1;
            held--;
          }
          if (a[i].phase == SC_PIPE_BACKWARD && held - 1 > peak_held) peak_held = held - 1;
        }
        assert_int_equal(tail, r + 1 < M ? r + 1 : M);
        assert_true(peak_held <= r);
        sc_free(a);
        sc_free(o);
      }
}

/* 1F1B at P = 4, M = 8 with one change to the lists; the check's message
 * must contain want. */
static void broken(void (*change)(sc_pipe_action **, int32_t *), const char *want) {
  sc_pipe_action *lists[4] = {0};
  int32_t n[4];
  sc_diag d;
  sc_diag_clear(&d);
  for (int32_t r = 0; r < 4; r++)
    assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_1F1B, 4, 1, 8, r, &lists[r], &n[r], &d), SC_OK);
  change(lists, n);
  sc_pipe_deps deps;
  assert_int_equal(sc_pipe_deps_chain(4, &deps, &d), SC_OK);
  assert_int_equal(sc_pipe_check(&deps, 4, 1, 8, lists, n, &d), SC_ERR_INVALID);
  if (!strstr(d.msg, want)) fail_msg("'%s' does not say '%s'", d.msg, want);
  sc_pipe_deps_free(&deps);
  free_all(lists, 4);
}

static void swap(sc_pipe_action *a, sc_pipe_action *b) {
  sc_pipe_action t = *a;
  *a = *b;
  *b = t;
}

/* rank 3 (last): P3 F3.0 B3.0 ...: its backward first */
static void backward_first(sc_pipe_action **l, int32_t *n) {
  (void)n;
  swap(&l[3][1], &l[3][2]);
}
/* rank 1: P1 F1.0 ...: its forward before the casts it reads */
static void prepare_late(sc_pipe_action **l, int32_t *n) {
  (void)n;
  swap(&l[1][0], &l[1][1]);
}
static void missing(sc_pipe_action **l, int32_t *n) {
  (void)l;
  n[2]--; /* rank 2 drops its U2 */
}
static void twice(sc_pipe_action **l, int32_t *n) {
  (void)n;
  l[1][2] = l[1][1]; /* rank 1: F1.0 twice */
}
static void wrong_rank(sc_pipe_action **l, int32_t *n) {
  (void)n;
  l[0][1].chunk = 1; /* rank 0 runs chunk 1's forward */
}
/* Two ranks waiting on each other. Rank 1 (1F1B, P = 4) runs P1 F1.0 F1.1
 * F1.2 B1.0 ...; made P1 F1.0 B1.0 F1.1 F1.2, its B1.0 waits for rank 2's
 * B2.0, which rank 2 runs after F2.1, which needs rank 1's F1.1: a cycle. */
static void cycle(sc_pipe_action **l, int32_t *n) {
  (void)n;
  swap(&l[1][2], &l[1][4]); /* P1 F1.0 B1.0 F1.2 F1.1 */
  swap(&l[1][3], &l[1][4]); /* P1 F1.0 B1.0 F1.1 F1.2 */
}

static void test_broken(void **state) {
  (void)state;
  broken(backward_first, "deadlocks");
  broken(prepare_late, "rank 1 waits in F1.0");
  broken(missing, "too few");
  broken(twice, "runs twice");
  broken(wrong_rank, "is not one of its actions");
  broken(cycle, "rank 1 waits in B1.0");
}

static void test_bad_arguments(void **state) {
  (void)state;
  sc_pipe_action *a = NULL;
  int32_t n;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_INTERLEAVED, 4, 2, 6, 0, &a, &n, &d),
                   SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "not a multiple of 4"));
  assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_INTERLEAVED, 4, 1, 8, 0, &a, &n, &d),
                   SC_ERR_USAGE);
  assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_1F1B, 4, 2, 8, 0, &a, &n, &d), SC_ERR_USAGE);
  assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_ZB_H1, 4, 2, 8, 0, &a, &n, &d), SC_ERR_USAGE);
  assert_int_equal(sc_pipe_schedule(SC_SCHEDULE_1F1B, 4, 1, 8, 4, &a, &n, &d), SC_ERR_USAGE);
  assert_null(a);
  char buf[64];
  sc_pipe_action x = {.phase = SC_PIPE_BACKWARD, .chunk = 3, .mb = 1};
  assert_string_equal(sc_pipe_action_name(&x, buf, sizeof buf), "B3.1");
  x = (sc_pipe_action){.phase = SC_PIPE_UPDATE, .chunk = 2, .mb = -1};
  assert_string_equal(sc_pipe_action_name(&x, buf, sizeof buf), "U2");
  x = (sc_pipe_action){.phase = SC_PIPE_PREPARE, .chunk = 1, .mb = -1};
  assert_string_equal(sc_pipe_action_name(&x, buf, sizeof buf), "P1");
  /* piece numbering: every phase's chunks, values flowing upwards */
  assert_int_equal(sc_pipe_piece(4, SC_PIPE_PREPARE, 2), 2);
  assert_int_equal(sc_pipe_piece(4, SC_PIPE_BACKWARD, 3), 8);
  assert_int_equal(sc_pipe_piece_chunk(4, 8), 3);
  assert_int_equal(sc_pipe_piece_phase(4, sc_pipe_piece(4, SC_PIPE_NORM, 1)), SC_PIPE_NORM);
  assert_int_equal(sc_pipe_piece_chunk(4, sc_pipe_piece(4, SC_PIPE_UPDATE, 2)), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_schedules),
      cmocka_unit_test(test_interleaved_megatron),
      cmocka_unit_test(test_zb_h1),
      cmocka_unit_test(test_broken),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
