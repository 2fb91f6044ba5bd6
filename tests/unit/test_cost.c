/* test_cost.c — the cost model's formulas (passes/plan/cost.h), against
 * values computed by hand from the h100-sxm preset (NVLink 450 GB/s, 3 us a
 * hop; network 50 GB/s per GPU, 10 us a hop; bf16 989.4 TFLOP/s, HBM
 * 3.35 TB/s).
 *
 * Collectives: a 1 GiB all-reduce over the 8 GPUs of a node is a ring
 * (2*7/8 GiB / 450 GB/s + 14 hops of 3 us); over 2 nodes of 8 the ring pays
 * the network (2*15/16 GiB / 50 GB/s + 30 hops of 10 us); a 1 KiB
 * all-reduce over 2 nodes is a tree (2 (7*3 + 1*10) us); a group of one
 * costs nothing; time grows with bytes; all-gather moves half an
 * all-reduce's bytes; a 1 GiB all-to-all in a node moves 7/8 GiB over
 * NVLink in one hop, over 2 nodes of 8 its 8/16 GiB for the other node over
 * the network (its 7/16 over NVLink at the same time, the faster part); cpu:local is uncalibrated and says so. Roofline: a
 * 1024^3 bf16 GEMM is compute-bound at 80 %; an unknown peak names its
 * dtype. (A program's simulated step: test_dist_sim.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/plan/cost.h"
#include "test_plan_util.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void test_collectives(void **state) {
  (void)state;
  sc_cluster c = preset("h100-sxm:8x2");
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_coll_cost k;
  /* 1 GiB over one node: ring */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_REDUCE, GIB, (sc_coll_group){8, 1}, &k, &d),
                   SC_OK);
  assert_int_equal(k.algo, SC_COLL_RING);
  assert_close(k.bytes_per_rank, 2.0 * 7 / 8 * GIB);
  assert_close(k.seconds, 2.0 * 7 / 8 * GIB / 450e9 + 14 * 3e-6);
  /* the same over 2 nodes: the network's bandwidth and latency */
  sc_coll_cost k2;
  assert_int_equal(
      sc_cost_collective(&c, SC_COLL_ALL_REDUCE, GIB, (sc_coll_group){16, 2}, &k2, &d), SC_OK);
  assert_int_equal(k2.algo, SC_COLL_RING);
  assert_close(k2.seconds, 2.0 * 15 / 16 * GIB / 50e9 + 30 * 10e-6);
  assert_true(k2.seconds > 8 * k.seconds);
  /* small over 2 nodes: the tree's latency wins */
  assert_int_equal(
      sc_cost_collective(&c, SC_COLL_ALL_REDUCE, 1024, (sc_coll_group){16, 2}, &k2, &d), SC_OK);
  assert_int_equal(k2.algo, SC_COLL_TREE);
  assert_close(k2.latency_s, 2 * (7 * 3e-6 + 1 * 10e-6));
  assert_close(k2.seconds, 2 * (7 * 3e-6 + 10e-6) + 2 * 1024 / 50e9);
  /* one rank: nothing */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_REDUCE, GIB, (sc_coll_group){1, 1}, &k, &d),
                   SC_OK);
  assert_true(k.seconds == 0);
  /* all-gather: (n-1)/n B, n-1 hops; send: B and one hop */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_GATHER, GIB, (sc_coll_group){8, 1}, &k, &d),
                   SC_OK);
  assert_close(k.seconds, 7.0 / 8 * GIB / 450e9 + 7 * 3e-6);
  assert_int_equal(sc_cost_collective(&c, SC_COLL_SEND, GIB, (sc_coll_group){2, 2}, &k, &d), SC_OK);
  assert_close(k.seconds, GIB / 50e9 + 10e-6);
  /* all-to-all: (n-1)/n B a rank, one hop; across 2 nodes of 8, the 8/16
   * bound for the other node over the network while 7/16 cross NVLink */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_TO_ALL, GIB, (sc_coll_group){8, 1}, &k, &d),
                   SC_OK);
  assert_close(k.bytes_per_rank, 7.0 / 8 * GIB);
  assert_close(k.seconds, 7.0 / 8 * GIB / 450e9 + 3e-6);
  assert_int_equal(
      sc_cost_collective(&c, SC_COLL_ALL_TO_ALL, GIB, (sc_coll_group){16, 2}, &k, &d), SC_OK);
  assert_close(k.bytes_per_rank, 15.0 / 16 * GIB);
  assert_close(k.seconds, 8.0 / 16 * GIB / 50e9 + 10e-6);
  /* one rank a node: everything over the network */
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_TO_ALL, GIB, (sc_coll_group){2, 2}, &k, &d),
                   SC_OK);
  assert_close(k.seconds, 1.0 / 2 * GIB / 50e9 + 10e-6);
  /* monotonic in bytes, for every kind */
  for (int kind = 0; kind < SC_COLL_KIND_COUNT; kind++) {
    double last = -1;
    for (double b = 1; b <= GIB; b *= 64) {
      assert_int_equal(sc_cost_collective(&c, (sc_coll_kind)kind, b, (sc_coll_group){16, 2}, &k,
                                          &d), SC_OK);
      assert_true(k.seconds > last);
      last = k.seconds;
    }
  }
  /* refusals: a tree all-gather, an uneven group */
  assert_int_equal(sc_cost_collective_algo(&c, SC_COLL_ALL_GATHER, SC_COLL_TREE, 1,
                                           (sc_coll_group){8, 1}, &k, &d), SC_ERR_INVALID);
  sc_diag_clear(&d);
  assert_int_equal(sc_cost_collective(&c, SC_COLL_ALL_REDUCE, 1, (sc_coll_group){6, 4}, &k, &d),
                   SC_ERR_INVALID);
  /* cpu:local knows no bandwidth */
  sc_cluster cpu = preset("cpu:local");
  if (cpu.devices_per_node > 1) {
    sc_diag_clear(&d);
    assert_int_equal(sc_cost_collective(&cpu, SC_COLL_ALL_REDUCE, 1, (sc_coll_group){2, 1}, &k,
                                        &d), SC_ERR_INVALID);
    assert_non_null(strstr(d.msg, "run shardc calibrate"));
  }
}

static void test_group_nodes(void **state) {
  (void)state;
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("dp=4,tp=8", &m, &d), SC_OK);
  assert_int_equal(sc_mesh_set_ranks_per_node(&m, 8, &d), SC_OK);
  assert_int_equal(sc_cost_group_nodes(&m, 2u), 1);      /* tp */
  assert_int_equal(sc_cost_group_nodes(&m, 1u), 4);      /* dp */
  assert_int_equal(sc_cost_group_nodes(&m, 3u), 4);      /* both */
}

static void test_roofline(void **state) {
  (void)state;
  sc_cluster c = preset("h100-sxm:8x1");
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_close(sc_cost_gemm_efficiency(4096, 4096, 4096), 0.80);
  assert_close(sc_cost_gemm_efficiency(4096, 512, 4096), 0.65);
  assert_close(sc_cost_gemm_efficiency(4096, 4096, 16), 0.52 * 16 / 128);
  double s, flops = 2.0 * 1024 * 1024 * 1024, bytes = 3.0 * 2 * 1024 * 1024;
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_BF16, flops, bytes, 0.8, &s, &d), SC_OK);
  assert_close(s, flops / (989.4e12 * 0.8)); /* compute-bound */
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_BF16, 1, bytes, 0.8, &s, &d), SC_OK);
  assert_close(s, bytes / (3.35e12 * 0.8)); /* memory-bound */
  c.peak_flops[SC_CLUSTER_FP16] = 0;
  assert_int_equal(sc_cost_gemm_time(&c, SC_CLUSTER_FP16, flops, bytes, 0.8, &s, &d),
                   SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "fp16"));
  sc_cluster cpu = preset("cpu:local");
  sc_diag_clear(&d);
  assert_int_equal(sc_cost_memory_time(&cpu, 1, &s, &d), SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "uncalibrated: run shardc calibrate"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_group_nodes),
      cmocka_unit_test(test_roofline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
