/* test_cluster.c — the cluster file, its presets, and the placement of a
 * mesh on a cluster (passes/plan/cluster.h).
 *
 * The reader: every preset loads with its count; a file with every field
 * reads back each figure; an unknown key, a bad number (zero, negative, a
 * string), a missing required key and a bad preset count are refused
 * naming the key. The placement: tp=8 on 8-device nodes is intra-node;
 * tp=16 spans 2 nodes; the order rule puts pp outermost and tp innermost;
 * a mesh too large, not whole nodes, or straddling nodes unevenly is
 * refused; --ranks-per-node disagreeing with the cluster is refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "passes/plan/cluster.h"

static const char FULL[] =
    "{\"name\": \"test\", \"nodes\": 64, \"gpus_per_node\": 8,\n"
    " \"gpu\": {\"name\": \"A100-SXM4-80GB\", \"memory_bytes\": 85899345920,\n"
    "   \"peak_flops\": {\"bf16\": 312e12, \"fp16\": 312e12, \"tf32\": 156e12, \"fp32\": 19.5e12},\n"
    "   \"hbm_bytes_per_s\": 2.039e12, \"host_link_bytes_per_s\": 32e9,\n"
    "   \"attention_efficiency\": 0.45},\n"
    " \"intra_node\": {\"bandwidth_bytes_per_s\": 300e9, \"latency_s\": 3e-6},\n"
    " \"inter_node\": {\"bandwidth_bytes_per_s\": 25e9, \"latency_s\": 8e-6}}";

/* FULL with the first occurrence of from replaced by to. */
static sc_status read_edited(const char *from, const char *to, sc_diag *d) {
  char buf[2048];
  const char *at = strstr(FULL, from);
  assert_non_null(at);
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - FULL), FULL, to, at + strlen(from));
  sc_cluster c;
  sc_diag_clear(d);
  return sc_cluster_read_json(buf, strlen(buf), "c.json", &c, d);
}

static void bad_edit(const char *from, const char *to, const char *needle) {
  sc_diag d = {0};
  if (read_edited(from, to, &d) == SC_OK) fail_msg("'%s' -> '%s' was accepted", from, to);
  if (!strstr(d.msg, needle)) fail_msg("'%s' -> '%s': '%s' lacks '%s'", from, to, d.msg, needle);
  assert_string_equal(d.file, "c.json");
}

static void test_full_file(void **state) {
  (void)state;
  sc_cluster c;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_read_json(FULL, sizeof FULL - 1, "c.json", &c, &d), SC_OK);
  assert_string_equal(c.name, "test");
  assert_string_equal(c.device_name, "A100-SXM4-80GB");
  assert_int_equal(c.nodes, 64);
  assert_int_equal(c.devices_per_node, 8);
  assert_int_equal(sc_cluster_devices(&c), 512);
  assert_int_equal(c.device_memory_bytes, 85899345920LL);
  assert_true(c.peak_flops[SC_CLUSTER_BF16] == 312e12);
  assert_true(c.peak_flops[SC_CLUSTER_FP32] == 19.5e12);
  assert_true(c.peak_flops[SC_CLUSTER_FP8] == 0); /* absent: unknown */
  assert_true(c.memory_bytes_per_s == 2.039e12);
  assert_true(c.host_link_bytes_per_s == 32e9);
  assert_true(c.attention_efficiency == 0.45);
  assert_true(c.intra_node.bandwidth_bytes_per_s == 300e9);
  assert_true(c.inter_node.latency_s == 8e-6);
}

static void test_bad_files(void **state) {
  (void)state;
  bad_edit("\"nodes\"", "\"nodez\"", "unknown key 'nodez'");
  bad_edit("\"hbm_bytes_per_s\"", "\"hbm\"", "unknown key 'gpu.hbm'");
  bad_edit("\"bf16\"", "\"bf17\"", "unknown key 'gpu.peak_flops.bf17'");
  bad_edit("312e12", "0", "'gpu.peak_flops.bf16' must be positive");
  bad_edit("300e9", "-1", "'intra_node.bandwidth_bytes_per_s' must be positive");
  bad_edit("32e9", "0", "'gpu.host_link_bytes_per_s' must be positive");
  bad_edit("0.45", "0", "'gpu.attention_efficiency' must be positive");
  bad_edit("0.45", "1.5", "'gpu.attention_efficiency' must be at most 1");
  bad_edit("0.45", "\"high\"", "'gpu.attention_efficiency' must be a number");
  bad_edit("3e-6", "\"fast\"", "'intra_node.latency_s' must be a number");
  bad_edit("\"nodes\": 64", "\"nodes\": 1.5", "'nodes' must be a whole count");
  bad_edit("\"gpus_per_node\": 8,", "", "'gpus_per_node' is missing");
  bad_edit("\"memory_bytes\": 85899345920,", "", "'gpu.memory_bytes' is missing");
  bad_edit("\"inter_node\"", "\"inter_nod\"", "unknown key 'inter_nod'");
  bad_edit("{\"name\": \"test\",", "{\"name\": \"test\", \"name\": \"x\",", "duplicate");
  bad_edit("\"bf16\": 312e12, \"fp16\": 312e12, \"tf32\": 156e12, \"fp32\": 19.5e12", "",
           "needs at least one");
  /* inter_node is needed with more than one node, not with one */
  sc_diag d = {0};
  assert_int_equal(read_edited(",\n \"inter_node\": {\"bandwidth_bytes_per_s\": 25e9, "
                               "\"latency_s\": 8e-6}", "", &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "'inter_node' is missing"));
  char one[2048];
  snprintf(one, sizeof one, "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"g\", "
           "\"memory_bytes\": 1e9, \"peak_flops\": {\"fp32\": 1e12}, \"hbm_bytes_per_s\": 1e11}}");
  sc_cluster c;
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_read_json(one, strlen(one), "dir/one.json", &c, &d), SC_OK);
  assert_string_equal(c.name, "one"); /* the file's name */
  assert_true(c.inter_node.bandwidth_bytes_per_s == 0);
  assert_true(c.host_link_bytes_per_s == 0); /* optional: unknown */
  assert_true(c.attention_efficiency == 0);  /* optional: a GEMM's (cost.h) */
}

static void test_presets(void **state) {
  (void)state;
  sc_cluster c;
  sc_diag d = {0};
  int n = 0;
  for (int i = 0; sc_cluster_preset_names[i]; i++, n++) {
    char spec[64];
    snprintf(spec, sizeof spec, "%s:8x64", sc_cluster_preset_names[i]);
    sc_diag_clear(&d);
    if (sc_cluster_load(spec, &c, &d) != SC_OK) fail_msg("%s: %s", spec, d.msg);
    assert_string_equal(c.name, spec);
    assert_int_equal(c.nodes, 64);
    assert_int_equal(c.devices_per_node, 8);
    assert_true(c.device_memory_bytes > 0 && c.peak_flops[SC_CLUSTER_BF16] > 0);
    assert_true(c.inter_node.bandwidth_bytes_per_s > 0 && c.intra_node.latency_s > 0);
  }
  assert_int_equal(n, 3);
  assert_int_equal(sc_cluster_preset("h100-sxm:8x4", &c, &d), SC_OK);
  assert_true(c.peak_flops[SC_CLUSTER_BF16] == 989.4e12);
  assert_true(c.host_link_bytes_per_s == 64e9); /* PCIe Gen5 x16, one direction */
  /* the published fused attention's share of the peak (docs/planner.md,
   * "Attention on a GPU"): cuDNN's on an H100, FlashAttention-2's on an
   * A100 */
  assert_true(c.attention_efficiency == 0.33);
  assert_int_equal(sc_cluster_preset("h200:8x1", &c, &d), SC_OK);
  assert_true(c.attention_efficiency == 0.33);
  assert_int_equal(sc_cluster_preset("a100-80g:4x2", &c, &d), SC_OK);
  assert_int_equal(c.devices_per_node, 4);
  assert_true(c.host_link_bytes_per_s == 32e9); /* PCIe Gen4 x16 */
  assert_true(c.attention_efficiency == 0.50);
  const char *bad[] = {"h100-sxm", "h100-sxm:8", "h100-sxm:0x4", "h100-sxm:8x", "h100-sxm:16x1",
                       "h100-sxm:8x4x", "v100:8x1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sc_diag_clear(&d);
    if (sc_cluster_preset(bad[i], &c, &d) != SC_ERR_USAGE) fail_msg("%s accepted", bad[i]);
  }
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_load("cpu:local", &c, &d), SC_OK);
  assert_int_equal(c.nodes, 1);
  assert_true(c.devices_per_node >= 1);
  for (int t = 0; t < SC_CLUSTER_DTYPE_COUNT; t++) assert_true(c.peak_flops[t] == 0);
  assert_true(c.memory_bytes_per_s == 0 && c.inter_node.bandwidth_bytes_per_s == 0);
  /* its thread-ranks share the online cores: time-sliced beyond them */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  assert_int_equal(c.host_cores, cores);
  assert_true(sc_cluster_core_share(&c, 1) == 1);
  assert_true(sc_cluster_core_share(&c, cores) == 1);
  assert_true(sc_cluster_core_share(&c, 2 * cores) == 2);
  assert_true(sc_cluster_core_share(&c, 3 * cores) == 3);
  /* a fraction of the ranks busy: linear between the whole counts */
  assert_true(sc_cluster_core_share_busy(&c, 0.5) == 1 && sc_cluster_core_share_busy(&c, 1) == 1);
  assert_true(fabs(sc_cluster_core_share_busy(&c, 2.5 * cores) - 2.5) < 1e-12);
  /* with the profile's sync rows: theirs (1 at one rank) */
  c.profile.present = true;
  c.profile.n_sync = 2;
  c.profile.sync[0] = (sc_profile_sync){.ranks = 2, .call_s = 1e-5, .stretch = 1.2};
  c.profile.sync[1] = (sc_profile_sync){.ranks = 3, .call_s = 1e-5, .stretch = 1.8};
  c.host_cores = 2;
  assert_true(fabs(sc_cluster_core_share_busy(&c, 1.5) - 1.1) < 1e-12);
  assert_true(fabs(sc_cluster_core_share_busy(&c, 2.25) - 1.35) < 1e-12);
  assert_true(sc_cluster_core_share_busy(&c, 3) == 1.8);
  /* rows measured with the thread count the runtime gives 2 and 3 ranks of
     2 cores (max(1, 2 / R) = 1): used; with 2 threads a rank (what one
     rank gets there): not, the share by the cores and no call cost */
  assert_int_equal(sc_profile_rank_threads(2, 1), 2);
  assert_int_equal(sc_profile_rank_threads(2, 3), 1);
  assert_int_equal(sc_profile_rank_threads(16, 3), 5);
  assert_int_equal(sc_profile_rank_threads(0, 4), 1);
  c.profile.threads = 1;
  assert_true(sc_cluster_core_share(&c, 2) == 1.2 && sc_cluster_sync_call_s(&c, 3) == 1e-5);
  c.profile.threads = 2;
  assert_true(sc_cluster_core_share(&c, 2) == 1 && sc_cluster_core_share(&c, 3) == 1.5);
  assert_true(sc_cluster_sync_call_s(&c, 2) == 0 && sc_cluster_sync_call_s(&c, 3) == 0);
  /* a GPU's ranks have devices of their own */
  assert_int_equal(sc_cluster_preset("h100-sxm:8x4", &c, &d), SC_OK);
  assert_true(c.host_cores == 0 && sc_cluster_core_share(&c, 1024) == 1);
}

/* Parses mesh, puts it on preset, computes the placement. */
static sc_status place(const char *preset, const char *mesh, bool order, sc_placement *p,
                       sc_diag *d) {
  sc_cluster c;
  sc_mesh m;
  sc_diag_clear(d);
  assert_int_equal(sc_cluster_preset(preset, &c, d), SC_OK);
  assert_int_equal(sc_mesh_parse(mesh, &m, d), SC_OK);
  if (order) sc_cluster_order_mesh(&m);
  sc_status st = sc_cluster_fit_mesh(&c, &m, d);
  return st != SC_OK ? st : sc_placement_compute(&m, p, d);
}

static void test_placement(void **state) {
  (void)state;
  sc_placement p;
  sc_diag d = {0};
  assert_int_equal(place("h100-sxm:8x4", "dp=4,tp=8", false, &p, &d), SC_OK);
  assert_int_equal(p.nodes, 4);
  assert_true(p.axes[1].intra_node);
  assert_int_equal(p.axes[1].stride, 1);
  assert_false(p.axes[0].intra_node);
  assert_int_equal(p.axes[0].stride, 8);
  assert_int_equal(p.axes[0].nodes_spanned, 4);
  /* tp=16 on 8-device nodes spans 2 */
  assert_int_equal(place("h100-sxm:8x2", "tp=16", false, &p, &d), SC_OK);
  assert_false(p.axes[0].intra_node);
  assert_int_equal(p.axes[0].nodes_spanned, 2);
  /* the order rule: tp=2,dp=2,pp=4 given, pp,dp,tp placed */
  assert_int_equal(place("a100-80g:8x2", "tp=2,dp=2,pp=4", true, &p, &d), SC_OK);
  assert_string_equal(p.axes[0].name, "pp");
  assert_string_equal(p.axes[1].name, "dp");
  assert_string_equal(p.axes[2].name, "tp");
  assert_int_equal(p.axes[0].stride, 4);
  assert_int_equal(p.axes[0].nodes_spanned, 2);
  assert_true(p.axes[1].intra_node && p.axes[2].intra_node);
  /* without ordering, tp=8 outermost crosses nodes, one member each */
  assert_int_equal(place("h100-sxm:8x8", "tp=8,dp=8", false, &p, &d), SC_OK);
  assert_int_equal(p.axes[0].stride, 8);
  assert_int_equal(p.axes[0].nodes_spanned, 8);
  /* refusals */
  assert_int_equal(place("h100-sxm:8x2", "dp=4,tp=8", true, &p, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "has 32 ranks; cluster h100-sxm:8x2 has 16"));
  assert_int_equal(place("h100-sxm:8x4", "dp=3,tp=4", true, &p, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "not whole nodes of 8"));
  assert_int_equal(place("h100-sxm:8x3", "dp=8,tp=3", true, &p, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "axis 'tp' (size 3, stride 1)"));
  /* fewer ranks than a node: all inside it */
  assert_int_equal(place("h100-sxm:8x1", "tp=3", true, &p, &d), SC_OK);
  assert_true(p.axes[0].intra_node);
  /* --ranks-per-node must agree with the cluster */
  sc_cluster c;
  sc_mesh m;
  assert_int_equal(sc_cluster_preset("h200:8x2", &c, &d), SC_OK);
  assert_int_equal(sc_mesh_parse("tp=16", &m, &d), SC_OK);
  assert_int_equal(sc_mesh_set_ranks_per_node(&m, 4, &d), SC_OK);
  assert_int_equal(sc_cluster_fit_mesh(&c, &m, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "--ranks-per-node 4 disagrees"));
  assert_int_equal(sc_mesh_set_ranks_per_node(&m, 8, &d), SC_OK);
  assert_int_equal(sc_cluster_fit_mesh(&c, &m, &d), SC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_file),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_presets),
      cmocka_unit_test(test_placement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
