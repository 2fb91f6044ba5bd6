/* test_name_index.c — the index by name (ir/name_index.h), against the
 * linear scans it replaces:
 *   - 5 seeds x 3000 positions of names drawn from a small pool (so most
 *     names repeat, some positions NULL, one name ""): for every pool name
 *     and for names never added, sc_name_index_find is the first position
 *     with that name (-1 for none) and sc_name_index_next walks every later
 *     one in order, at every size the index passes through while it grows;
 *   - sc_name_index_find_n on prefixes of longer names ("a.b" as the 1
 *     byte "a") finds the name of those bytes, not the longer one;
 *   - NULL finds nothing; next of an out-of-range position is -1;
 *   - an allocation failure in the middle leaves the index as it was (every
 *     earlier position still found), and adding goes on afterwards;
 *   - sc_name_hash is FNV-1a (two known values). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/name_index.h"

#define POOL 97
#define N 3000

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static char pool[POOL][32];

static int32_t scan_first(const char *const *names, int32_t n, const char *name) {
  for (int32_t i = 0; name && i < n; i++)
    if (names[i] && strcmp(names[i], name) == 0) return i;
  return -1;
}

/* Every pool name and a few absent ones, over the first n positions. */
static void check_against_scan(const sc_name_index *ix, const char *const *names, int32_t n) {
  assert_int_equal(ix->n, n);
  for (int p = 0; p < POOL; p++) {
    int32_t want = scan_first(names, n, pool[p]), got = sc_name_index_find(ix, pool[p]);
    if (got != want) fail_msg("'%s' over %d: found %d, the scan %d", pool[p], n, got, want);
    while (want >= 0) { /* the chain: every later position with the name, in order */
      int32_t next_want = -1;
      for (int32_t i = want + 1; i < n && next_want < 0; i++)
        if (names[i] && strcmp(names[i], pool[p]) == 0) next_want = i;
      assert_int_equal(sc_name_index_next(ix, want), next_want);
      want = next_want;
    }
  }
  assert_int_equal(sc_name_index_find(ix, "absent"), -1);
  assert_int_equal(sc_name_index_find(ix, "n.1x"), -1);
  assert_int_equal(sc_name_index_find(ix, NULL), -1);
}

static void fill_pool(void) {
  for (int p = 0; p < POOL; p++) {
    if (p == 0) snprintf(pool[p], sizeof pool[p], "%s", "");
    else if (p % 3 == 0) snprintf(pool[p], sizeof pool[p], "h.%d.attn.%u", p, rnd() % 7);
    else snprintf(pool[p], sizeof pool[p], "n.%d", p);
  }
}

static void test_against_scan(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 5; seed++) {
    rng_state = seed;
    fill_pool();
    const char *names[N];
    sc_name_index ix;
    sc_name_index_init(&ix);
    assert_int_equal(sc_name_index_find(&ix, "n.1"), -1); /* empty */
    for (int32_t i = 0; i < N; i++) {
      names[i] = rnd() % 50 == 0 ? NULL : pool[rnd() % POOL];
      assert_int_equal(sc_name_index_add(&ix, names[i]), SC_OK);
      if (i < 70 || i % 499 == 0) check_against_scan(&ix, names, i + 1);
    }
    check_against_scan(&ix, names, N);
    assert_int_equal(sc_name_index_next(&ix, -1), -1);
    assert_int_equal(sc_name_index_next(&ix, N), -1);
    sc_name_index_free(&ix);
    assert_int_equal(ix.n, 0);
    assert_int_equal(sc_name_index_find(&ix, pool[1]), -1);
  }
}

static void test_find_n(void **state) {
  (void)state;
  const char *names[] = {"blk.10.w", "blk", "blk.1", "blk.10", "blk.1"};
  sc_name_index ix;
  sc_name_index_init(&ix);
  for (int i = 0; i < 5; i++) assert_int_equal(sc_name_index_add(&ix, names[i]), SC_OK);
  const char *q = "blk.10.w.exp_avg";
  assert_int_equal(sc_name_index_find_n(&ix, q, 3), 1);  /* "blk" */
  assert_int_equal(sc_name_index_find_n(&ix, q, 5), 2);  /* "blk.1", the first */
  assert_int_equal(sc_name_index_next(&ix, 2), 4);
  assert_int_equal(sc_name_index_find_n(&ix, q, 6), 3);  /* "blk.10" */
  assert_int_equal(sc_name_index_find_n(&ix, q, 8), 0);  /* "blk.10.w" */
  assert_int_equal(sc_name_index_find_n(&ix, q, 4), -1); /* "blk." */
  assert_int_equal(sc_name_index_find_n(&ix, q, 16), -1);
  assert_int_equal(sc_name_index_find_n(&ix, q, 0), -1); /* "" was never added */
  assert_int_equal(sc_name_index_find(&ix, "blk.10"), 3);
  sc_name_index_free(&ix);
}

/* An allocator that fails once, at the countdown's end. */
static int countdown = -1;
static void *fail_malloc(void *ud, size_t n) {
  (void)ud;
  return countdown >= 0 && countdown-- == 0 ? NULL : malloc(n ? n : 1);
}
static void *fail_realloc(void *ud, void *p, size_t n) {
  (void)ud;
  return countdown >= 0 && countdown-- == 0 ? NULL : realloc(p, n ? n : 1);
}
static void fail_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

static void test_nomem(void **state) {
  (void)state;
  static char buf[200][16];
  const char *names[200];
  for (int i = 0; i < 200; i++) {
    snprintf(buf[i], sizeof buf[i], "v%d", i % 150);
    names[i] = buf[i];
  }
  int failures = 0;
  for (int fail_at = 0; fail_at < 12; fail_at++) {
    sc_allocator a = {.alloc = fail_malloc, .realloc = fail_realloc, .free = fail_free};
    sc_set_allocator(&a);
    sc_name_index ix;
    sc_name_index_init(&ix);
    int32_t n = 0;
    countdown = fail_at;
    for (int i = 0; i < 200; i++) {
      sc_status st = sc_name_index_add(&ix, names[n]);
      if (st != SC_OK) {
        assert_int_equal(st, SC_ERR_NOMEM);
        failures++;
        assert_int_equal(ix.n, n);
        for (int32_t k = 0; k < n; k++)
          assert_int_equal(sc_name_index_find(&ix, names[k]), scan_first(names, n, names[k]));
        continue; /* the allocator fails once: the next add goes on */
      }
      n++;
    }
    countdown = -1;
    for (int32_t k = 0; k < n; k++)
      assert_int_equal(sc_name_index_find(&ix, names[k]), scan_first(names, n, names[k]));
    sc_name_index_free(&ix);
    sc_set_allocator(NULL);
  }
  assert_true(failures >= 8); /* the countdown did land in the index's allocations */
}

static void test_hash(void **state) {
  (void)state;
  assert_int_equal(sc_name_hash(""), 2166136261u);
  assert_int_equal(sc_name_hash("a"), 0xe40c292cu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_scan),
      cmocka_unit_test(test_find_n),
      cmocka_unit_test(test_nomem),
      cmocka_unit_test(test_hash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
