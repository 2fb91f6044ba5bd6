/* test_skip.h — skips that ctest sees, for the C unit tests (tests/unit/).
 *
 * cmocka counts a skipped test as passed and exits 0, so a program whose
 * every test skipped would look like a pass. Here:
 *   SC_SKIP(why...)       skips the running test, saying why (printf-style)
 *   SC_RUN_TESTS(tests, setup, teardown)
 *                         in place of cmocka_run_group_tests: failures as
 *                         before; else, when every test skipped, exit 77
 *                         (ctest: skipped, SKIP_RETURN_CODE 77); else the
 *                         skipped tests listed on stdout as a partial skip
 *   SC_TEST_MAIN_SKIPPED(why)
 *                         the main() of a test whose subject this build
 *                         lacks (no NVRTC): says why, exits 77
 * Included by test_util.h; a test that does not use test_util.h includes it
 * after <cmocka.h>. Everything is static inline: nothing is linked.
 */
#ifndef SC_TEST_SKIP_H
#define SC_TEST_SKIP_H

#include <stdarg.h>
#include <stdio.h>

/* SC_SKIP records the running test (its function's name) and the reason
 * before cmocka's skip(). A test that calls cmocka's skip() directly is not
 * seen: use SC_SKIP. */

enum { TU_MAX_SKIPS = 64 };
typedef struct {
  int n;
  char what[TU_MAX_SKIPS][256]; /* "test_name: why" */
} tu_skips;
static inline tu_skips *tu_skip_list(void) {
  static tu_skips list;
  return &list;
}
static inline void tu_note_skip(const char *test, const char *fmt, ...) {
  tu_skips *l = tu_skip_list();
  char why[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  printf("[  SKIP    ] %s: %s\n", test, why);
  if (l->n < TU_MAX_SKIPS) snprintf(l->what[l->n++], sizeof l->what[0], "%s: %s", test, why);
}
/* Skips the running test (call it from the test function itself: its name
 * is the one reported); why is printf-formatted. Does not return. */
#define SC_SKIP(...)                                                                \
  do {                                                                              \
    tu_note_skip(__func__, __VA_ARGS__);                                            \
    skip();                                                                         \
  } while (0)

/* The exit status of a run of n tests whose cmocka result is failed: the
 * failures, else 77 when every test skipped, else 0 (a partial skip listed). */
static inline int tu_finish(int failed, int n) {
  const tu_skips *l = tu_skip_list();
  if (failed) return failed;
  if (l->n >= n) {
    printf("SKIPPED: all %d tests of this program skipped\n", n);
    return 77;
  }
  if (l->n) {
    printf("PARTIAL SKIP: %d of this program's %d tests skipped:\n", l->n, n);
    for (int i = 0; i < l->n; i++) printf("  %s\n", l->what[i]);
  }
  return 0;
}
#define SC_RUN_TESTS(tests, setup, teardown)                                        \
  tu_finish(cmocka_run_group_tests(tests, setup, teardown),                         \
            (int)(sizeof(tests) / sizeof((tests)[0])))

/* The main() of a test binary whose subject this build lacks (no NVRTC,
 * no toolkit headers): nothing runs, it says why and exits 77. */
#define SC_TEST_MAIN_SKIPPED(why)                                                   \
  int main(void) {                                                                  \
    printf("SKIPPED: %s\n", why);                                                   \
    return 77;                                                                      \
  }

#endif
