/* test_check.c — the report of `shardc check` (driver/check.h).
 *
 * Round trip: a report with every state, a multi-line message, figures
 * (one of them 0.1, not exact in binary) and hashes, written as JSON and
 * read back, is the same report, to the bit. The comparison: equal
 * figures pass (+0.00 %); a step 10 % slower fails the 5 % gate and names
 * the terms and collectives that grew, most first, not the ones that
 * shrank; 10 % slower passes a 20 % gate; tokens/s 10 % lower fails; a
 * rank's peak 3 % larger fails the 2 % gate, naming its part that grew
 * and no other rank's; a baseline of another plan is compared and says so;
 * a figure only one side has is said, not failed; a
 * new collective is named as new. The reader refuses a FIFO at once, and,
 * naming the file and the key: not JSON, another format, another version, a metric that is
 * not a number, a check of unknown name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/check.h"

static char *write_temp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/sc-test-check-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

static void base_report(sc_check_report *r) {
  sc_check_report_init(r);
  r->model = sc_strdup("m.onnx");
  r->plan = sc_strdup("dp=2,tp=2");
  r->cluster = sc_strdup("h100-sxm:1x4");
  r->train = true;
  sc_check_set(r, SC_CHECK_IMPORT, SC_CHECK_PASSED, "every node of the %d is supported", 5);
  sc_check_set(r, SC_CHECK_FITS, SC_CHECK_FAILED, "1 of 1 rank does not fit:");
  sc_check_append(r, SC_CHECK_FITS, "  rank 0: \"quoted\" and\ttabbed");
  sc_check_set(r, SC_CHECK_PERFORMANCE, SC_CHECK_SKIPPED, "no --baseline");
  sc_check_set(r, SC_CHECK_EQUIVALENCE, SC_CHECK_PASSED, "3 steps");
  sc_check_set(r, SC_CHECK_REPRODUCIBLE, SC_CHECK_PASSED, "9 files");
  r->checks[SC_CHECK_EQUIVALENCE].seconds = 1.25;
  sc_check_metric_set(r, "step_time_s", 0.1);
  sc_check_metric_set(r, "tokens_per_s", 1000);
  sc_check_metric_set(r, "time/compute", 0.06);
  sc_check_metric_set(r, "time/comm dp", 0.03);
  sc_check_metric_set(r, "time/comm tp", 0.01);
  sc_check_metric_set(r, "collective/AllReduce dp", 4096);
  sc_check_metric_set(r, "memory/rank 0/peak", 1000000);
  sc_check_metric_set(r, "memory/rank 0/params", 600000);
  sc_check_metric_set(r, "memory/rank 0/gradients", 400000);
  sc_check_metric_set(r, "memory/rank 1/peak", 500000);
  sc_check_metric_set(r, "memory/rank 1/params", 500000);
  sc_check_artifact_add(r, "manifest.json",
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
}

static void test_round_trip(void **state) {
  (void)state;
  sc_check_report r, back;
  base_report(&r);
  char *json = sc_check_report_json(&r);
  assert_non_null(json);
  const char *path = write_temp(json);
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_check_report_read(path, &back, &d), SC_OK);
  unlink(path);
  assert_string_equal(back.model, "m.onnx");
  assert_string_equal(back.plan, "dp=2,tp=2");
  assert_string_equal(back.cluster, "h100-sxm:1x4");
  assert_true(back.train);
  for (int i = 0; i < SC_CHECK_COUNT; i++) {
    assert_int_equal(back.checks[i].state, r.checks[i].state);
    assert_string_equal(back.checks[i].message, r.checks[i].message);
  }
  assert_true(back.checks[SC_CHECK_EQUIVALENCE].seconds == 1.25);
  assert_int_equal(back.n_metrics, r.n_metrics);
  for (int32_t i = 0; i < r.n_metrics; i++) {
    assert_string_equal(back.metrics[i].name, r.metrics[i].name); /* in order */
    assert_true(back.metrics[i].value == r.metrics[i].value);     /* to the bit */
  }
  assert_int_equal(back.n_artifacts, 1);
  assert_string_equal(back.artifacts[0].sha256, r.artifacts[0].sha256);
  assert_true(sc_check_any_failed(&back));
  sc_free(json);
  sc_check_report_free(&r);
  sc_check_report_free(&back);
}

/* cur's comparison with base: whether it regressed, and the message. */
static bool compare(const sc_check_report *base, const sc_check_report *cur, double time,
                    double memory, char **msg) {
  sc_check_thresholds th = {.time = time, .memory = memory};
  bool regressed = true;
  assert_int_equal(sc_check_compare(base, cur, &th, &regressed, msg), SC_OK);
  assert_non_null(*msg);
  return regressed;
}

static void test_compare(void **state) {
  (void)state;
  sc_check_report base, cur;
  base_report(&base);
  base_report(&cur);
  char *msg;
  assert_false(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "step_time_s: 100 ms -> 100 ms (+0.00 %"));
  assert_null(strstr(msg, "REGRESSED"));
  sc_free(msg);

  /* 10 % slower: the dp communication grew, tp's shrank, a new collective */
  sc_check_metric_set(&cur, "step_time_s", 0.11);
  sc_check_metric_set(&cur, "time/comm dp", 0.045);
  sc_check_metric_set(&cur, "time/comm tp", 0.005);
  sc_check_metric_set(&cur, "collective/AllGather dp", 2048);
  assert_true(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "step_time_s: 100 ms -> 110 ms (+10.00 %, limit +5.00 %): REGRESSED"));
  assert_non_null(strstr(msg, "grew: time/comm dp: 30 ms -> 45 ms (+50.0 %)"));
  assert_null(strstr(msg, "grew: time/comm tp"));
  assert_non_null(strstr(msg, "grew: collective/AllGather dp: new"));
  assert_null(strstr(strstr(msg, "REGRESSED") + 1, "REGRESSED")); /* the step only */
  sc_free(msg);
  assert_false(compare(&base, &cur, 0.20, 0.02, &msg)); /* within a 20 % gate */
  sc_free(msg);

  /* throughput 10 % lower, the step unchanged */
  sc_check_report_free(&cur);
  base_report(&cur);
  sc_check_metric_set(&cur, "tokens_per_s", 900);
  assert_true(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "tokens_per_s: 1000 -> 900 (-10.00 %, limit -5.00 %): REGRESSED"));
  sc_free(msg);

  /* rank 0's gradients grew: 3 % of its peak */
  sc_check_report_free(&cur);
  base_report(&cur);
  sc_check_metric_set(&cur, "memory/rank 0/peak", 1030000);
  sc_check_metric_set(&cur, "memory/rank 0/gradients", 430000);
  assert_true(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "memory/rank 0/peak: "));
  assert_non_null(strstr(msg, "(+3.00 %, limit +2.00 %): REGRESSED"));
  assert_non_null(strstr(msg, "grew: memory/rank 0/gradients"));
  assert_null(strstr(msg, "grew: memory/rank 0/params"));
  assert_null(strstr(msg, "grew: memory/rank 1"));
  sc_free(msg);
  assert_false(compare(&base, &cur, 0.05, 0.05, &msg));
  sc_free(msg);

  /* another plan: compared, and said */
  sc_check_report_free(&cur);
  base_report(&cur);
  sc_free(cur.plan);
  cur.plan = sc_strdup("tp=4");
  assert_false(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "the baseline's plan was dp=2,tp=2 (this run: tp=4)"));
  assert_null(strstr(msg, "the baseline's model"));
  sc_free(msg);

  /* a figure on one side only: said, not failed */
  sc_check_report_free(&cur);
  base_report(&cur);
  cur.n_metrics = 1; /* step_time_s only */
  assert_false(compare(&base, &cur, 0.05, 0.02, &msg));
  assert_non_null(strstr(msg, "tokens_per_s: not compared (this run has none)"));
  assert_non_null(strstr(msg, "memory/rank 0/peak: in the baseline only"));
  sc_free(msg);
  sc_check_report_free(&base);
  sc_check_report_free(&cur);
}

static void expect_refused(const char *text, const char *needle) {
  const char *path = write_temp(text);
  sc_check_report r;
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_check_report_read(path, &r, &d);
  unlink(path);
  assert_int_not_equal(st, SC_OK);
  assert_string_equal(d.file, path);
  if (!strstr(d.msg, needle)) fail_msg("'%s' does not say '%s'", d.msg, needle);
}

static void test_bad_reports(void **state) {
  (void)state;
  sc_check_report r;
  sc_diag d;
  sc_diag_clear(&d);
  char fifo[64];
  snprintf(fifo, sizeof fifo, "/tmp/sc-test-check-fifo-%d", (int)getpid());
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_not_equal(sc_check_report_read(fifo, &r, &d), SC_OK); /* not waited on */
  unlink(fifo);
  if (!strstr(d.msg, "FIFO")) fail_msg("a FIFO: '%s'", d.msg);
  expect_refused("{\"format\": ", "not valid JSON");
  expect_refused("[1, 2]", "(top level)");
  expect_refused("{\"format\": \"plan\", \"version\": 1, \"metrics\": {}}", "key 'format'");
  expect_refused("{\"format\": \"shardc-check-report\", \"version\": 2, \"metrics\": {}}",
                 "key 'version'");
  expect_refused("{\"format\": \"shardc-check-report\", \"version\": 1}", "key 'metrics'");
  expect_refused("{\"format\": \"shardc-check-report\", \"version\": 1, "
                 "\"metrics\": {\"step_time_s\": \"fast\"}}",
                 "key 'metrics.step_time_s' must be a finite number");
  expect_refused("{\"format\": \"shardc-check-report\", \"version\": 1, \"metrics\": {}, "
                 "\"checks\": [{\"name\": \"speed\", \"status\": \"passed\"}]}",
                 "key 'checks'");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_compare),
      cmocka_unit_test(test_bad_reports),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
