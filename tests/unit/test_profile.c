/* test_profile.c — the calibration profile (passes/plan/profile.h) and how
 * the cost model uses it (passes/plan/cost.h).
 *
 * The reader is strict: a hostile edit of a valid profile (unknown keys at
 * each level, NaN, negative, zero and huge numbers, wrong types, a rate
 * that disagrees with its time, too many rows, a duplicate key or name) is
 * refused with the file and the key named; a cluster file's "profile" may
 * not leave the cluster file's folder (absolute, "..", a link out). The
 * writer's output reads back bit for bit. A known profile gives times
 * computed by hand (each number below is written out); the NNLS fit
 * recovers the α, β and overhead that generated exact samples. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>

#include <cmocka.h>

#include "ir/attention.h"
#include "passes/plan/cost.h"
#include "test_plan_util.h"

/* 2*64^3 = 524288 FLOPs in 2.62144 us = 200 GFLOP/s; 2*256^3 = 33554432 in
 * 83.88608 us = 400 GFLOP/s; bf16 64^3 in 52.4288 us = 10 GFLOP/s. */
static const char GOOD[] =
    "{\"format\": \"shardc-profile-1\",\n"
    " \"device\": {\"kind\": \"cpu\", \"name\": \"test cpu\", \"threads\": 2},\n"
    " \"gemm\": [\n"
    "  {\"m\": 64, \"n\": 64, \"k\": 64, \"dtype\": \"fp32\", \"seconds\": 2.62144e-6, "
    "\"flops_per_s\": 2e11},\n"
    "  {\"m\": 256, \"n\": 256, \"k\": 256, \"dtype\": \"fp32\", \"seconds\": 8.388608e-5, "
    "\"flops_per_s\": 4e11},\n"
    "  {\"m\": 64, \"n\": 64, \"k\": 64, \"dtype\": \"bf16\", \"seconds\": 5.24288e-5, "
    "\"flops_per_s\": 1e10}],\n"
    " \"memory_bytes_per_s\": 2e10,\n"
    " \"memory_thread_bytes_per_s\": 1e10,\n"
    " \"step_overhead_s\": 1e-6,\n"
    " \"attention\": [{\"dtype\": \"fp32\", \"grad\": false, \"row_s\": 1e-9, \"score_s\": 2e-9, "
    "\"mac_s\": 1e-10},\n"
    "  {\"dtype\": \"fp32\", \"grad\": true, \"row_s\": 1e-9, \"score_s\": 4e-9, \"mac_s\": 3e-10}],\n"
    " \"comms\": [{\"name\": \"local\", \"max_ranks\": 4, \"latency_s\": 1e-5, "
    "\"bandwidth_bytes_per_s\": 5e9, \"overhead_s\": 2e-6}],\n"
    " \"sync\": [{\"ranks\": 2, \"call_s\": 2.5e-5, \"call_per_compute\": 0.25, "
    "\"call_max_s\": 2e-5, \"stretch\": 1.25},\n"
    "  {\"ranks\": 4, \"call_s\": 6e-5, \"stretch\": 2.5}],\n"
    " \"calibrate_s\": 3.5}";

static sc_status read_text(const char *text, sc_profile *p, sc_diag *d) {
  sc_diag_clear(d);
  return sc_profile_read_json(text, strlen(text), "p.json", p, d);
}

/* GOOD with the first occurrence of from replaced by to. */
static sc_status read_edited(const char *from, const char *to, sc_diag *d) {
  static char buf[16384];
  const char *at = strstr(GOOD, from);
  if (!at) fail_msg("'%s' is not in the profile", from);
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - GOOD), GOOD, to, at + strlen(from));
  sc_profile p;
  return read_text(buf, &p, d);
}

/* p written and read back: the same bits. */
static void assert_reads_back(const sc_profile *p) {
  char *text = NULL;
  size_t len = 0;
  sc_diag d;
  sc_diag_clear(&d);
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(sc_profile_write_json(p, f, &d), SC_OK);
  fclose(f);
  sc_profile q;
  assert_int_equal(sc_profile_read_json(text, len, "w.json", &q, &d), SC_OK);
  free(text);
  assert_memory_equal(p, &q, sizeof *p);
}

static void test_reads_good(void **state) {
  (void)state;
  sc_profile p;
  sc_diag d;
  assert_int_equal(read_text(GOOD, &p, &d), SC_OK);
  assert_true(p.present);
  assert_string_equal(p.device, "cpu");
  assert_string_equal(p.device_name, "test cpu");
  assert_int_equal(p.threads, 2);
  assert_int_equal(p.n_gemms, 3);
  assert_int_equal(p.gemms[2].dtype, SC_CLUSTER_BF16);
  assert_close(p.gemms[1].flops_per_s, 4e11);
  assert_close(p.memory_bytes_per_s, 2e10);
  assert_close(p.step_overhead_s, 1e-6);
  assert_close(p.memory_thread_bytes_per_s, 1e10);
  assert_int_equal(p.n_attention, 2);
  assert_true(sc_profile_find_attention(&p, SC_CLUSTER_FP32, true) == &p.attention[1]);
  assert_null(sc_profile_find_attention(&p, SC_CLUSTER_BF16, false));
  assert_close(p.attention[1].s[SC_PROFILE_ATTN_MAC], 3e-10);
  assert_int_equal(p.n_comms, 1);
  assert_string_equal(p.comms[0].name, "local");
  assert_close(p.comms[0].bandwidth_bytes_per_s, 5e9);
  assert_close(p.calibrate_s, 3.5);
  assert_int_equal(p.n_sync, 2);
  assert_true(sc_profile_find_sync(&p, 4) == &p.sync[1]);
  assert_null(sc_profile_find_sync(&p, 3));
  assert_close(p.sync[0].call_s, 2.5e-5);
  assert_close(p.sync[1].stretch, 2.5);
  assert_close(p.sync[0].call_per_compute, 0.25);
  assert_true(p.sync[1].call_per_compute == 0); /* absent: a constant call cost */
  assert_close(p.sync[0].call_max_s, 2e-5);
  assert_true(p.sync[1].call_max_s == 0);

  assert_reads_back(&p);
}

static void test_hostile(void **state) {
  (void)state;
  static const struct {
    const char *from, *to, *want;
  } CASES[] = {
      {"\"format\"", "\"bogus\": 1, \"format\"", "unknown key 'bogus'"},
      {"\"threads\": 2", "\"threads\": 2, \"cores\": 2", "unknown key 'device.cores'"},
      {"\"m\": 64,", "\"m\": 64, \"x\": 1,", "unknown key 'gemm[0].x'"},
      {"\"overhead_s\"", "\"alpha\": 1, \"overhead_s\"", "unknown key 'comms[0].alpha'"},
      {"\"seconds\": 2.62144e-6", "\"seconds\": NaN", "line"},
      {"\"seconds\": 2.62144e-6", "\"seconds\": -2.62144e-6", "'gemm[0].seconds' must be positive"},
      {"\"memory_bytes_per_s\": 2e10", "\"memory_bytes_per_s\": 0", "'memory_bytes_per_s' must be positive"},
      {"\"memory_bytes_per_s\": 2e10", "\"memory_bytes_per_s\": 1e400", "line"},
      {"\"step_overhead_s\": 1e-6", "\"step_overhead_s\": \"1e-6\"", "'step_overhead_s' must be a number"},
      {"\"m\": 64,", "\"m\": 1e12,", "'gemm[0].m' must be a whole count in range"},
      {"\"m\": 64,", "\"m\": 64.5,", "'gemm[0].m' must be a whole count"},
      {"\"m\": 64,", "\"m\": -64,", "'gemm[0].m' must be a positive count"},
      {"\"threads\": 2", "\"threads\": [2]", "'device.threads' must be a number"},
      {"\"device\": {", "\"device\": [{", "line"}, /* unbalanced: not JSON */
      {"\"dtype\": \"fp32\"", "\"dtype\": \"fp64\"", "'gemm[0].dtype' must be fp8"},
      {"\"dtype\": \"fp32\"", "\"dtype\": 32", "'gemm[0].dtype' must be a string"},
      {"\"m\": 64,", "\"m\": 64, \"trans_b\": 1,", "'gemm[0].trans_b' must be true or false"},
      {"\"step_overhead_s\": 1e-6,", "\"step_overhead_s\": 1e-6, \"kernel\": {\"row_s\": 1e-12},",
       "'kernel.op_s' is missing"},
      {"\"step_overhead_s\": 1e-6,", "\"step_overhead_s\": 1e-6, \"kernel\": {\"row_s\": 1e-12, "
       "\"op_s\": 1e-11, \"transcendental_s\": 1e-9, \"gather_s\": 0},",
       "'kernel.gather_s' must be positive"},
      {"\"step_overhead_s\": 1e-6,", "\"step_overhead_s\": 1e-6, \"kernel\": {\"row_s\": 1e-12, "
       "\"op_s\": 1e-11, \"transcendental_s\": 1e-9, \"gather_s\": 1e-10, \"x_s\": 1},",
       "unknown key 'kernel.x_s'"},
      {"\"step_overhead_s\": 1e-6,", "\"step_overhead_s\": 1e-6, \"kernel\": [],",
       "'kernel' must be an object"},
      {"\"m\": 64,", "\"m\": 64, \"trans_a\": \"yes\",", "'gemm[0].trans_a' must be true or false"},
      {"\"flops_per_s\": 2e11", "\"flops_per_s\": 3e11", "'gemm[0].flops_per_s' must be 2*m*n*k"},
      {"\"format\": \"shardc-profile-1\"", "\"format\": \"shardc-profile-2\"", "'format' must be"},
      {"\"kind\": \"cpu\"", "\"kind\": \"tpu\"", "'device.kind' must be"},
      {"\"max_ranks\": 4", "\"max_ranks\": 1", "'comms[0].max_ranks' must be at least 2"},
      {"\"latency_s\": 1e-5", "\"latency_s\": 1e-5, \"latency_s\": 2e-5", "line"}, /* duplicate */
      {"\"comms\": [{", "\"comms\": [7, {", "'comms[0]' must be an object"},
      {"\"gemm\": [", "\"gemm\": {\"a\": [", "line"},
      {"\"memory_bytes_per_s\": 2e10,\n", "", "'memory_bytes_per_s' is missing"},
      {"\"name\": \"local\"", "\"name\": \"\"", "'comms[0].name' must be 1 to"},
      {"\"memory_bytes_per_s\": 2e10", "\"memory_bytes_per_s\": 1e300", "'memory_bytes_per_s' must be in [1, 1e+16]"},
      {"\"latency_s\": 1e-5", "\"latency_s\": 1e-300", "'comms[0].latency_s' must be in"},
      {"\"seconds\": 2.62144e-6, \"flops_per_s\": 2e11", "\"seconds\": 5.24288e-307, \"flops_per_s\": 1e300",
       "'gemm[0].seconds' must be in [1e-12, 10000]"},
      {"\"calibrate_s\": 3.5", "\"calibrate_s\": 1e9", "'calibrate_s' must be in"},
      {"\"name\": \"local\"", "\"name\": \"lo\\\"cal\"", "'comms[0].name' must be local, tcp"},
      {"\"memory_thread_bytes_per_s\": 1e10", "\"memory_thread_bytes_per_s\": 0",
       "'memory_thread_bytes_per_s' must be"},
      {"\"memory_thread_bytes_per_s\": 1e10", "\"memory_thread_bytes_per_s\": \"fast\"",
       "'memory_thread_bytes_per_s' must be a number"},
      {"\"grad\": false, ", "", "'attention[0].grad' is missing"},
      {"\"grad\": false", "\"grad\": 0", "'attention[0].grad' must be true or false"},
      {"\"grad\": true", "\"grad\": false", "'attention[1]' repeats a dtype and direction"},
      {"\"mac_s\": 1e-10", "\"mac_s\": 1e-10, \"x\": 1", "unknown key 'attention[0].x'"},
      {"\"score_s\": 2e-9", "\"score_s\": -2e-9", "'attention[0].score_s' must be"},
      {"\"score_s\": 2e-9", "\"score_s\": 1e30", "'attention[0].score_s' must be in"},
      {"\"mac_s\": 1e-10", "\"mac_s\": NaN", "line"},
      {"\"dtype\": \"fp32\", \"grad\"", "\"dtype\": \"fp64\", \"grad\"",
       "'attention[0].dtype' must be fp8"},
      {"\"attention\": [{", "\"attention\": [7, {", "'attention[0]' must be an object"},
      {"\"ranks\": 2", "\"ranks\": 1", "'sync[0].ranks' must be at least 2"},
      {"\"ranks\": 4", "\"ranks\": 2", "'sync[1]' repeats a rank count"},
      {"\"stretch\": 1.25", "\"stretch\": 0.5", "'sync[0].stretch' must be in [1, 1000]"},
      {"\"call_s\": 2.5e-5", "\"call_s\": 0", "'sync[0].call_s' must be"},
      {"\"call_s\": 2.5e-5, ", "", "'sync[0].call_s' is missing"},
      {"\"call_per_compute\": 0.25", "\"call_per_compute\": 11",
       "'sync[0].call_per_compute' must be in"},
      {"\"call_per_compute\": 0.25", "\"call_per_compute\": 0",
       "'sync[0].call_per_compute' must be positive"},
      {"\"call_max_s\": 2e-5", "\"call_max_s\": -1", "'sync[0].call_max_s' must be positive"},
      {"\"stretch\": 2.5}", "\"stretch\": 2.5, \"x\": 1}", "unknown key 'sync[1].x'"},
      {"\"sync\": [{", "\"sync\": {\"a\": [{", "line"},
      {"\"sync\": [{", "\"sync\": [7, {", "'sync[0]' must be an object"},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    sc_diag d;
    sc_status st = read_edited(CASES[i].from, CASES[i].to, &d);
    if (st == SC_OK) fail_msg("case %zu (%s): accepted", i, CASES[i].to);
    if (!strstr(d.msg, CASES[i].want))
      fail_msg("case %zu: '%s' does not say '%s'", i, d.msg, CASES[i].want);
    assert_string_equal(d.file, "p.json");
  }
  /* the array limits: one GEMM row too many, two communicators of one
   * name, none */
  enum { ROWS = SC_PROFILE_MAX_GEMMS + 1 };
  char *big = malloc(ROWS * 128 + 1024);
  size_t pos = (size_t)sprintf(big, "{\"format\": \"shardc-profile-1\", \"device\": {\"kind\": "
                                    "\"cpu\", \"name\": \"c\", \"threads\": 1}, \"gemm\": [");
  for (int i = 0; i < ROWS; i++)
    pos += (size_t)sprintf(big + pos, "%s{\"m\": 1, \"n\": 1, \"k\": 1, \"dtype\": \"fp32\", "
                                      "\"seconds\": 1, \"flops_per_s\": 2}", i ? "," : "");
  sprintf(big + pos, "], \"memory_bytes_per_s\": 1, \"step_overhead_s\": 1}");
  sc_profile p;
  sc_diag d;
  assert_int_equal(read_text(big, &p, &d), SC_ERR_INVALID);
  char want[64];
  snprintf(want, sizeof want, "'gemm' has more than %d", SC_PROFILE_MAX_GEMMS);
  assert_non_null(strstr(d.msg, want));
  free(big);
  assert_int_equal(read_edited("\"comms\": [{", "\"comms\": [{\"name\": \"local\", \"max_ranks\": 2, "
                               "\"latency_s\": 1, \"bandwidth_bytes_per_s\": 1, \"overhead_s\": 1}, {",
                               &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "'comms[1]' repeats"));
  assert_int_equal(read_edited("\"gemm\": [\n", "\"gemm\": [], \"x\": [", &d), SC_ERR_INVALID);
  assert_int_equal(read_text("[]", &p, &d), SC_ERR_PARSE);
  assert_int_equal(read_text("", &p, &d), SC_ERR_PARSE);
  assert_false(p.present);
}

/* ---- files: the cluster's "profile" key and SPEC@FILE ---- */

static char dir[64];

static void write_file(const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static sc_status load_cluster_with(const char *profile_value, sc_cluster *c, sc_diag *d) {
  char text[1024], path[256];
  snprintf(text, sizeof text,
           "{\"gpus_per_node\": 4, \"gpu\": {\"name\": \"box\", \"memory_bytes\": 1e9, "
           "\"peak_flops\": {\"fp32\": 1e12}, \"hbm_bytes_per_s\": 1e11},"
           " \"intra_node\": {\"bandwidth_bytes_per_s\": 1e9, \"latency_s\": 1e-3},"
           " \"profile\": \"%s\"}",
           profile_value);
  write_file("c.json", text);
  snprintf(path, sizeof path, "%s/c.json", dir);
  sc_diag_clear(d);
  return sc_cluster_load(path, c, d);
}

static int setup_dir(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/sc-test-profile-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char sub[128];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  mkdir(sub, 0700);
  write_file("p.json", GOOD);
  write_file("sub/p.json", GOOD);
  write_file("bad.json", "{\"format\": \"shardc-profile-1\", \"x\": 1}");
  char outside[128];
  snprintf(outside, sizeof outside, "%s-outside.json", dir);
  FILE *f = fopen(outside, "w");
  if (!f) return -1;
  fputs(GOOD, f);
  fclose(f);
  return 0;
}

static int teardown_dir(void **state) {
  (void)state;
  static const char *const names[] = {"p.json", "sub/p.json", "bad.json", "c.json", "out",
                                      "sub", NULL};
  for (int i = 0; names[i]; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (remove(path) != 0) rmdir(path);
  }
  rmdir(dir);
  char outside[128];
  snprintf(outside, sizeof outside, "%s-outside.json", dir);
  remove(outside);
  return 0;
}

static void test_cluster_profile_paths(void **state) {
  (void)state;
  sc_cluster c;
  sc_diag d;
  assert_int_equal(load_cluster_with("p.json", &c, &d), SC_OK);
  assert_true(c.profile.present);
  assert_close(c.intra_node.latency_s, 1e-5); /* the profile's, not the file's 1 ms */
  assert_close(c.peak_flops[SC_CLUSTER_FP32], 4e11);
  assert_int_equal(load_cluster_with("sub/p.json", &c, &d), SC_OK);
  assert_int_equal(load_cluster_with("./sub/../p.json", &c, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "'profile' must be a path inside"));
  assert_int_equal(load_cluster_with("../p.json", &c, &d), SC_ERR_INVALID);
  assert_int_equal(load_cluster_with("/etc/passwd", &c, &d), SC_ERR_INVALID);
  assert_int_equal(load_cluster_with("none.json", &c, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "'profile' names no file"));
  /* dir/out -> /tmp, where a real profile lies outside dir */
  char link[256], rel[300];
  snprintf(link, sizeof link, "%s/out", dir);
  assert_int_equal(symlink("/tmp", link), 0);
  assert_int_equal(load_cluster_with("out/no-such-profile.json", &c, &d), SC_ERR_IO);
  snprintf(rel, sizeof rel, "out/%s-outside.json", strrchr(dir, '/') + 1);
  assert_int_equal(load_cluster_with(rel, &c, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "leaves the cluster file's folder"));
  /* a bad profile: its error names the profile file */
  assert_int_equal(load_cluster_with("bad.json", &c, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.file, "bad.json"));
  assert_non_null(strstr(d.msg, "unknown key 'x'"));
  /* the next error, the cluster file's own, names the cluster file again */
  assert_int_equal(load_cluster_with("../p.json", &c, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.file, "c.json"));

  /* cpu:local@FILE: measured figures, ranks up to max_ranks */
  char spec[256];
  snprintf(spec, sizeof spec, "cpu:local@%s/p.json", dir);
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_load(spec, &c, &d), SC_OK);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  assert_int_equal(c.devices_per_node, cores > 4 ? cores : 4);
  assert_close(c.memory_bytes_per_s, 2e10);
  snprintf(spec, sizeof spec, "h100-sxm:8x1@%s/bad.json", dir);
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_load(spec, &c, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.file, "bad.json"));
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_load("cpu:local@", &c, &d), SC_ERR_USAGE);
}

/* ---- the cost model with a profile: every figure by hand ---- */

static void test_known_times(void **state) {
  (void)state;
  sc_cluster c;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_preset("cpu:local", &c, &d), SC_OK);
  assert_true(sc_cost_step_overhead(&c) == 0); /* not modelled without a profile */
  sc_profile p;
  assert_int_equal(read_text(GOOD, &p, &d), SC_OK);
  sc_cluster_apply_profile(&c, &p);
  assert_close(sc_cost_step_overhead(&c), 1e-6);
  /* the sync rows: 2 and 4 ranks as measured; 3 ranks have no row, so no
   * call cost and the cores' share (3 / cores when they outnumber them).
   * A row is for ranks of the profile's threads: on 2 cores, where 2 to 4
   * ranks get 1 thread each, the profile's 2 would leave every row unused
   * (unit.test_cluster), so the figures are read as one thread's here */
  c.host_cores = 2;
  c.profile.threads = 1;
  assert_close(sc_cluster_core_share(&c, 2), 1.25);
  assert_close(sc_cluster_core_share(&c, 4), 2.5);
  assert_close(sc_cluster_core_share(&c, 3), 1.5);
  assert_close(sc_cluster_sync_call_s(&c, 2), 2.5e-5);
  /* 0.25 s a second computed, at most 20 us */
  assert_close(sc_cluster_sync_call_drift(&c, 2, 4e-5), 1e-5);
  assert_close(sc_cluster_sync_call_drift(&c, 2, 1e-3), 2e-5);
  assert_true(sc_cluster_sync_call_drift(&c, 3, 1e-3) == 0);
  assert_true(sc_cluster_sync_call_drift(&c, 4, 1e-3) == 0); /* no call_per_compute */
  assert_true(sc_cluster_sync_call_s(&c, 3) == 0);
  assert_true(sc_cluster_core_share(&c, 1) == 1 && sc_cluster_sync_call_s(&c, 1) == 0);
  c.profile.threads = 2; /* the profile's, for the rates below */
  double s;
  /* a measured shape: 524288 / 2e11 = 2.62144 us (bytes 49152 / 2e10 =
   * 2.4576 us, less), + 1 us */
  assert_int_equal(sc_cost_gemm_shape_time(&c, SC_CLUSTER_FP32, false, false, 1, 64, 64, 64, 49152, &s, &d),
                   SC_OK);
  assert_close(s, 3.62144e-6);
  /* 128^3 lies halfway (in log2) between 64^3 and 256^3: the geometric
   * mean sqrt(2e11 * 4e11) = 282.842712474619 GFLOP/s; 4194304 FLOPs */
  assert_int_equal(sc_cost_gemm_shape_time(&c, SC_CLUSTER_FP32, false, false, 1, 128, 128, 128, 196608, &s, &d),
                   SC_OK);
  assert_close(s, 4194304 / 282.842712474619e9 + 1e-6);
  /* batch 2 of 64^3: twice the FLOPs at 64^3's rate */
  assert_int_equal(sc_cost_gemm_shape_time(&c, SC_CLUSTER_FP32, false, false, 2, 64, 64, 64, 0, &s, &d), SC_OK);
  assert_close(s, 2 * 2.62144e-6 + 1e-6);
  /* memory-bound inside a GEMM: 1e6 bytes / 2e10 = 50 us */
  assert_int_equal(sc_cost_gemm_shape_time(&c, SC_CLUSTER_FP32, false, false, 1, 64, 64, 64, 1e6, &s, &d), SC_OK);
  assert_close(s, 5e-5 + 1e-6);
  /* by FLOPs alone: the cube of 2*256^3 FLOPs is 256^3 (the efficiency
   * argument is not used) */
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_FP32, 33554432, 0, 0.5, &s, &d), SC_OK);
  assert_close(s, 8.388608e-5 + 1e-6);
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_BF16, 524288, 0, 0.5, &s, &d), SC_OK);
  assert_close(s, 5.24288e-5 + 1e-6);
  /* fp16 was not measured: refused, naming it */
  sc_diag_clear(&d);
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_FP16, 1e6, 0, 0.5, &s, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "fp16"));
  /* peaks: the best measured rates */
  assert_close(c.peak_flops[SC_CLUSTER_FP32], 4e11);
  assert_close(c.peak_flops[SC_CLUSTER_BF16], 1e10);
  /* a memory-bound step: 1e6 / 2e10 + 1 us */
  assert_int_equal(sc_cost_memory_time(&c, 1e6, &s, &d), SC_OK);
  assert_close(s, 5.1e-5);
  /* all-reduce of 1 MiB over 4 ranks: ring, 6 hops of 10 us + 2 us a call
   * + 1.5 MiB / 5 GB/s = 62 us + 314.5728 us (the tree: 2 * 3 hops + 2 us =
   * 62 us, but 2 MiB / 5 GB/s = 419.4304 us) */
  sc_coll_cost cc;
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_REDUCE, 1048576, (sc_coll_group){4, 1}, &cc,
                                      &d), SC_OK);
  assert_int_equal(cc.algo, SC_COLL_RING);
  assert_close(cc.latency_s, 6.2e-5);
  assert_close(cc.seconds, 6.2e-5 + 1572864 / 5e9);
  /* all-gather of 64 KiB over 2: 1 hop + a call, 32 KiB / 5 GB/s */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_GATHER, 65536, (sc_coll_group){2, 1}, &cc,
                                      &d), SC_OK);
  assert_close(cc.seconds, 1e-5 + 2e-6 + 32768 / 5e9);
  /* fused attention by the profile's model (profile.h): 2 x 2 heads of
   * 128 causal queries, d = dv = 16: per head 128 rows, 64 x 64 + 64 x 128
   * = 12288 scores (whole key blocks to each query block's edge), 12288 x
   * 32 = 393216 multiply-adds; 4 heads x 2 query blocks = 8 units over
   * the 2 threads. Forward: (512 x 1 ns + 49152 x 2 ns + 1572864 x 0.1 ns)
   * / 2 = 128.0512 us, + 1 us; the backward's row: (512 x 1 + 49152 x 4 +
   * 1572864 x 0.3 ns) / 2 = 334.4896 us, + 1 us */
  sc_attention_shape as = {.b = 2, .h = 2, .kvh = 2, .sq = 128, .skv = 128, .d = 16, .dv = 16,
                           .causal = true, .t = SC_DTYPE_F32};
  double fl = 0;
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_FP32, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, 128.0512e-6 + 1e-6);
  assert_close(fl, sc_attention_flops(2, 2, 128, 128, 16, 16, true, false));
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_FP32, &as, true, 0, &s, &fl, &d), SC_OK);
  assert_close(s, 334.4896e-6 + 1e-6);
  /* one head of 16 queries: one unit, one thread (16 + 256 x 2 + 8192 x
   * 0.1 ns = 1.3472 us); 1 MB to move takes longer: 50 us */
  as = (sc_attention_shape){.b = 1, .h = 1, .kvh = 1, .sq = 16, .skv = 16, .d = 16, .dv = 16,
                            .causal = true, .t = SC_DTYPE_F32};
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_FP32, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, 1.3472e-6 + 1e-6);
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_FP32, &as, false, 1e6, &s, &fl, &d), SC_OK);
  assert_close(s, 5e-5 + 1e-6);
  /* bf16 has no attention row: a GEMM of its FLOPs at the bf16 rate (the
   * one row, 1e10) */
  as.t = SC_DTYPE_BF16;
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, sc_attention_flops(1, 1, 16, 16, 16, 16, true, false) / 1e10 + 1e-6);
  /* the features: rows, scores, multiply-adds and units; keys past the
   * queries (skv 32 > sq 16, causal) shift the edge: 16 x 32 scores */
  double ft[SC_PROFILE_ATTN_TERMS], units = 0;
  sc_profile_attention_features(1, 1, 128, 128, 16, 16, true, ft, &units);
  assert_close(ft[SC_PROFILE_ATTN_ROW], 128);
  assert_close(ft[SC_PROFILE_ATTN_SCORE], 12288);
  assert_close(ft[SC_PROFILE_ATTN_MAC], 393216);
  assert_close(units, 2);
  sc_profile_attention_features(3, 2, 100, 100, 8, 4, false, ft, &units);
  assert_close(ft[SC_PROFILE_ATTN_SCORE], 6 * 10000);
  assert_close(ft[SC_PROFILE_ATTN_MAC], 6 * 10000 * 12);
  assert_close(units, 12);
  sc_profile_attention_features(1, 1, 16, 32, 16, 16, true, ft, &units);
  assert_close(ft[SC_PROFILE_ATTN_SCORE], 512);
  /* the interpolation itself: an exact row, and no row of a dtype */
  assert_close(sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 256, 256, 256), 4e11);
  assert_true(sc_profile_gemm_rate(&p, SC_CLUSTER_TF32, false, false, 256, 256, 256) == 0);
}

/* A GPU's profile (device "cuda"): one bf16 GEMM row at 100 TFLOP/s
 * (2 x 1024^3 in 21.47483648 us) and a fused attention row, bf16 forward,
 * 2 heads of 256 causal queries, d 64: 4 x 2 x 32896 pairs x 64 =
 * 16842752 FLOPs in 0.4210688 us = 40 TFLOP/s. */
static const char GPU[] =
    "{\"format\": \"shardc-profile-1\",\n"
    " \"device\": {\"kind\": \"cuda\", \"name\": \"test gpu\", \"threads\": 1},\n"
    " \"gemm\": [{\"m\": 1024, \"n\": 1024, \"k\": 1024, \"dtype\": \"bf16\", "
    "\"seconds\": 2.147483648e-5, \"flops_per_s\": 1e14}],\n"
    " \"memory_bytes_per_s\": 2e12,\n"
    " \"step_overhead_s\": 2e-6,\n"
    " \"attention\": [{\"dtype\": \"bf16\", \"grad\": false, \"heads\": 2, \"sq\": 256, \"d\": 64, "
    "\"seconds\": 4.210688e-7, \"flops_per_s\": 4e13}]}";

static void gpu_bad(const char *from, const char *to, const char *needle) {
  char buf[4096];
  const char *at = strstr(GPU, from);
  if (!at) fail_msg("'%s' is not in the profile", from);
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - GPU), GPU, to, at + strlen(from));
  sc_profile p;
  sc_diag d;
  if (read_text(buf, &p, &d) == SC_OK) fail_msg("'%s' -> '%s' was accepted", from, to);
  if (!strstr(d.msg, needle)) fail_msg("'%s' -> '%s': '%s' lacks '%s'", from, to, d.msg, needle);
}

/* The GPU's fused attention (cost.h sc_cost_fused_attention_time): a CUDA
 * profile's measured row, else the cluster's attention efficiency of the
 * peak, else the GEMM rate of the kernel's sq x skv x d products, the
 * lower of the last two when both are known. */
static void test_gpu_attention(void **state) {
  (void)state;
  sc_profile p;
  sc_diag d;
  assert_int_equal(read_text(GPU, &p, &d), SC_OK);
  assert_int_equal(p.n_attention, 1);
  const sc_profile_attention *a = sc_profile_find_attention(&p, SC_CLUSTER_BF16, false);
  assert_non_null(a);
  assert_true(a->heads == 2 && a->sq == 256 && a->d == 64);
  assert_close(a->flops_per_s, 4e13);
  assert_null(sc_profile_find_attention(&p, SC_CLUSTER_BF16, true));
  assert_reads_back(&p);
  gpu_bad("\"flops_per_s\": 4e13", "\"flops_per_s\": 5e13",
          "'attention[0].flops_per_s' must be the causal attention's FLOPs over seconds");
  gpu_bad("\"heads\": 2, ", "", "'attention[0].heads' is missing");
  gpu_bad("\"d\": 64, ", "\"d\": 64, \"row_s\": 1e-9, ", "unknown key 'attention[0].row_s'");
  gpu_bad("\"sq\": 256", "\"sq\": 0", "'attention[0].sq'");

  /* 8 heads of 1024 causal queries, d 128 */
  sc_attention_shape as = {.b = 1, .h = 8, .kvh = 8, .sq = 1024, .skv = 1024, .d = 128,
                           .dv = 128, .causal = true, .t = SC_DTYPE_BF16};
  double fwd = sc_attention_flops(1, 8, 1024, 1024, 128, 128, true, false), s = 0, fl = 0;
  double bwd = sc_attention_flops(1, 8, 1024, 1024, 128, 128, true, true);
  sc_cluster c;
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_preset("h100-sxm:1x1", &c, &d), SC_OK);
  /* no profile: the preset's 0.33 of the bf16 peak, below the GEMM's */
  assert_true(c.attention_efficiency == 0.33 && sc_cost_gemm_efficiency(1024, 1024, 128) > 0.33);
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, fwd / (989.4e12 * 0.33));
  assert_close(fl, fwd);
  /* the search's estimate times the same FLOPs alike */
  double e = 0;
  assert_int_equal(sc_cost_fused_attention_time(&c, SC_CLUSTER_BF16, fwd, 0, 1024, 1024, 128, false,
                                                &e, &d), SC_OK);
  assert_close(e, s);
  /* a kernel of small products reaches no more than they do */
  double low = sc_cost_gemm_efficiency(1024, 1024, 16);
  assert_true(low < 0.33);
  assert_int_equal(sc_cost_fused_attention_time(&c, SC_CLUSTER_BF16, fwd, 0, 1024, 1024, 16, false,
                                                &e, &d), SC_OK);
  assert_close(e, fwd / (989.4e12 * low));
  /* not given: the GEMM's */
  c.attention_efficiency = 0;
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, fwd / (989.4e12 * sc_cost_gemm_efficiency(1024, 1024, 128)));
  /* the profile: its forward row's 40 TFLOP/s, + 2 us; the backward has no
   * row: the GEMM rate (1e14, the one row) capped at 0.33 of the peak,
   * the best measured GEMM rate */
  c.attention_efficiency = 0.33;
  sc_cluster_apply_profile(&c, &p);
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, false, 0, &s, &fl, &d), SC_OK);
  assert_close(s, fwd / 4e13 + 2e-6);
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, true, 0, &s, &fl, &d), SC_OK);
  assert_close(s, bwd / 3.3e13 + 2e-6);
  assert_close(fl, bwd);
  /* bytes beyond the FLOPs: 1e9 / 2e12 = 500 us */
  assert_int_equal(sc_cost_attention_time(&c, SC_CLUSTER_BF16, &as, false, 1e9, &s, &fl, &d), SC_OK);
  assert_close(s, 5e-4 + 2e-6);
}

/* A profile holding a full 2 x 2 x 2 grid of nn rows {64, 1024}^3 at rate
 * r(m, n, k) = 1e9 * m^a n^b k^c (log-linear: trilinear interpolation in
 * log space is exact inside the grid), and one nt row. */
static double grid_rate(double m, double n, double k) {
  return 1e9 * pow(m, 0.5) * pow(n, 0.25) * pow(k, 0.125);
}

static void test_interpolation(void **state) {
  (void)state;
  sc_profile p;
  memset(&p, 0, sizeof p);
  p.present = true;
  static const int64_t E[2] = {64, 1024};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++) {
        sc_profile_gemm *g = &p.gemms[p.n_gemms++];
        g->m = E[a], g->n = E[b], g->k = E[c], g->dtype = SC_CLUSTER_FP32;
        g->flops_per_s = grid_rate((double)g->m, (double)g->n, (double)g->k);
        g->seconds = 2.0 * (double)(g->m * g->n * g->k) / g->flops_per_s;
      }
  /* inside: exact for a log-linear rate */
  double r = sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 256, 128, 512);
  assert_true(fabs(r / grid_rate(256, 128, 512) - 1) < 1e-9);
  /* outside: clamped to the edge (1024 for n), never extrapolated */
  r = sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 128, 50257, 768);
  assert_true(fabs(r / grid_rate(128, 1024, 768) - 1) < 1e-9);
  r = sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 1, 1, 1);
  assert_true(fabs(r / grid_rate(64, 64, 64) - 1) < 1e-9);
  /* no nt row yet: nt reads the nn rows */
  double nn = sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 128, 768, 3072);
  assert_true(sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, true, 128, 768, 3072) == nn);
  /* one nt row: nt reads it alone (every shape at its rate), tn still nn */
  sc_profile_gemm *g = &p.gemms[p.n_gemms++];
  *g = p.gemms[7];
  g->trans_b = true;
  g->flops_per_s = 5e10;
  g->seconds = 2.0 * 1024.0 * 1024.0 * 1024.0 / g->flops_per_s;
  assert_true(fabs(sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, true, 128, 768, 3072) / 5e10 -
                   1) < 1e-12);
  assert_true(sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, true, false, 128, 768, 3072) == nn);
  /* the nn grid is unchanged by the nt row */
  assert_true(sc_profile_gemm_rate(&p, SC_CLUSTER_FP32, false, false, 128, 768, 3072) == nn);
  /* the layout is written and read back */
  char *text = NULL;
  size_t len = 0;
  sc_diag d;
  sc_diag_clear(&d);
  p.memory_bytes_per_s = 1e10, p.step_overhead_s = 1e-7, p.threads = 1;
  snprintf(p.device, sizeof p.device, "cpu");
  snprintf(p.device_name, sizeof p.device_name, "t");
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(sc_profile_write_json(&p, f, &d), SC_OK);
  fclose(f);
  assert_non_null(strstr(text, "\"trans_b\": true"));
  assert_null(strstr(text, "\"trans_a\""));
  sc_profile q;
  assert_int_equal(sc_profile_read_json(text, len, "w.json", &q, &d), SC_OK);
  free(text);
  assert_true(q.gemms[8].trans_b && !q.gemms[8].trans_a && !q.gemms[7].trans_b);
  assert_true(fabs(sc_profile_gemm_rate(&q, SC_CLUSTER_FP32, false, true, 1, 1, 1) / 5e10 - 1) <
              1e-12);
}

static void test_fit(void **state) {
  (void)state;
  /* exact samples of 3 us + 10 us a hop + bytes / 4 GB/s over groups of
   * 2..4 and sizes 1 KiB .. 16 MiB */
  sc_profile_coll_sample s[64];
  int32_t n = 0;
  for (int g = 2; g <= 4; g++)
    for (double b = 1024; b <= 16777216; b *= 16)
      for (int kind = 0; kind < 2; kind++) {
        double steps = kind ? g - 1 : 2 * (g - 1);
        double moved = (kind ? 1.0 : 2.0) * (g - 1) / g * b;
        s[n++] = (sc_profile_coll_sample){steps, moved, 3e-6 + 1e-5 * steps + moved / 4e9};
      }
  sc_profile_comm c;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_profile_fit_comm(s, n, &c, &d), SC_OK);
  if (fabs(c.overhead_s - 3e-6) > 1e-9 || fabs(c.latency_s - 1e-5) > 1e-9 ||
      fabs(c.bandwidth_bytes_per_s / 4e9 - 1) > 1e-6)
    fail_msg("fit: overhead %g, latency %g, bandwidth %g", c.overhead_s, c.latency_s,
             c.bandwidth_bytes_per_s);
  /* no fixed cost in the samples: NNLS gives 0, floored at 1 ns (the
   * reader's positive figures) */
  for (int32_t i = 0; i < n; i++) s[i].seconds -= 3e-6;
  assert_int_equal(sc_profile_fit_comm(s, n, &c, &d), SC_OK);
  assert_true(c.overhead_s > 0 && c.overhead_s < 1e-8);
  assert_true(fabs(c.latency_s - 1e-5) < 1e-8);
  /* too few samples, or a time of 0 */
  assert_int_equal(sc_profile_fit_comm(s, 2, &c, &d), SC_ERR_INVALID);
  s[0].seconds = 0;
  assert_int_equal(sc_profile_fit_comm(s, n, &c, &d), SC_ERR_INVALID);
  /* NNLS: the unconstrained optimum has x1 < 0; the constrained one is
   * x1 = 0 and x0 = mean(b) */
  double a[] = {1, 1, 1, 2, 1, 3}, b[] = {3, 2, 1}, x[2];
  assert_true(sc_profile_nnls(a, b, 3, 2, x));
  assert_close(x[0], 2);
  assert_true(x[1] == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_good),
      cmocka_unit_test(test_hostile),
      cmocka_unit_test_setup_teardown(test_cluster_profile_paths, setup_dir, teardown_dir),
      cmocka_unit_test(test_known_times),
      cmocka_unit_test(test_gpu_attention),
      cmocka_unit_test(test_interpolation),
      cmocka_unit_test(test_fit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
