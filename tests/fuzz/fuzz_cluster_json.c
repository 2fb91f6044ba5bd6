/* fuzz_cluster_json.c — libFuzzer target: the cluster file's reader
 * (passes/plan/cluster.c).
 *
 * Each input is taken as a cluster file (docs/planner.md, "The cluster
 * file"; it need not be NUL-terminated) and read with sc_cluster_read_json.
 * A rejected text must come back as a status with a message and a zeroed
 * cluster. An accepted one must hold what the header promises: nodes and
 * devices a node within their bounds, every figure finite and not negative,
 * the names NUL-terminated; and a mesh of the cluster's devices (dp over
 * every device, tp=2 inside a node where it divides) must fit it and be
 * placed without a failure other than a status. A crash, a sanitizer
 * report, a leak or an assert is a bug. Built by tests/fuzz/run.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "passes/plan/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_figure(double x) { SC_ASSERT(isfinite(x) && x >= 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_cluster c;
  memset(&c, 0x5a, sizeof c); /* not zero: a failure must zero it */
  sc_diag diag = {0};
  sc_diag_clear(&diag);
  if (sc_cluster_read_json((const char *)data, size, "fuzz.json", &c, &diag) != SC_OK) {
    static const sc_cluster zero;
    SC_ASSERT(diag.msg[0] != '\0' && memcmp(&c, &zero, sizeof c) == 0);
    return 0;
  }
  SC_ASSERT(c.nodes >= 1 && c.nodes <= SC_CLUSTER_MAX_NODES);
  SC_ASSERT(c.devices_per_node >= 1 && c.devices_per_node <= SC_CLUSTER_MAX_PER_NODE);
  SC_ASSERT(sc_cluster_devices(&c) == c.nodes * c.devices_per_node);
  SC_ASSERT(memchr(c.name, '\0', sizeof c.name) && memchr(c.device_name, '\0', sizeof c.device_name));
  SC_ASSERT(c.device_memory_bytes >= 0);
  for (int i = 0; i < SC_CLUSTER_DTYPE_COUNT; i++) check_figure(c.peak_flops[i]);
  check_figure(c.memory_bytes_per_s);
  check_figure(c.intra_node.bandwidth_bytes_per_s);
  check_figure(c.intra_node.latency_s);
  check_figure(c.inter_node.bandwidth_bytes_per_s);
  check_figure(c.inter_node.latency_s);
  /* Placing a mesh on it: every device, tp inside a node where it can be. */
  bool tp = c.devices_per_node % 2 == 0;
  sc_mesh m;
  sc_mesh_init(&m);
  sc_diag_clear(&diag);
  sc_placement pl;
  if (sc_mesh_add_axis(&m, "dp", sc_cluster_devices(&c) / (tp ? 2 : 1), &diag) == SC_OK &&
      (!tp || sc_mesh_add_axis(&m, "tp", 2, &diag) == SC_OK)) {
    sc_cluster_order_mesh(&m);
    SC_ASSERT(sc_cluster_fit_mesh(&c, &m, &diag) == SC_OK);
    SC_ASSERT(sc_placement_compute(&m, &pl, &diag) == SC_OK);
    SC_ASSERT(pl.nodes == c.nodes && pl.ranks_per_node == c.devices_per_node);
  } else {
    SC_ASSERT(diag.msg[0] != '\0');
  }
  return 0;
}
