/* test_plan_util.h — helpers shared by the planner's unit tests
 * (test_cost.c, test_dist_sim.c, test_profile.c, test_search.c).
 *
 *   preset        a cluster preset by spec ("h100-sxm:8x2"), or the test fails
 *   assert_close  got within 1e-9 relative of want (absolute near 0); NaN fails
 *
 * `static inline`, like test_util.h; include after <cmocka.h>. */
#ifndef SC_TEST_PLAN_UTIL_H
#define SC_TEST_PLAN_UTIL_H

#include "passes/plan/cluster.h"

static inline sc_cluster preset(const char *spec) {
  sc_cluster c;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_cluster_preset(spec, &c, &d), SC_OK);
  return c;
}

static inline void assert_close(double got, double want) {
  double err = got > want ? got - want : want - got;
  if (!(err <= 1e-9 * (want > 0 ? want : 1))) fail_msg("got %.12g, want %.12g", got, want);
}

#endif
