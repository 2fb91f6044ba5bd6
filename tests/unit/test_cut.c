/* test_cut.c — the minimum cut over pending sums (passes/partition/cut.c):
 * hand-made cases with the answer worked out (a tie keeps the lazy
 * reductions; a norm's backward spreading a pending gradient is cut at its
 * source; two sources merging are cut once, at the merge), and seeded
 * random flow graphs whose chosen cut costs exactly the minimum found by
 * trying every subset of nodes. */
#include "test_util.h"

#include "passes/partition/partition.h"

/* The cost of reducing the nodes in `cut` where they are made plus every
 * reduction that some source still reaches without crossing a cut node. */
static double cost_of(int n, const double *cut_cost, const double *red, const bool *src,
                      const int (*edges)[2], int n_edges, const bool *cut) {
  bool reach[16] = {0};
  for (int v = 0; v < n; v++) reach[v] = src[v];
  for (int round = 0; round < n; round++) /* edges go forward, but be safe */
    for (int e = 0; e < n_edges; e++)
      if (reach[edges[e][0]] && !cut[edges[e][0]]) reach[edges[e][1]] = true;
  double c = 0;
  for (int v = 0; v < n; v++) {
    if (cut[v]) c += cut_cost[v];
    else if (reach[v]) c += red[v];
  }
  return c;
}

/* Builds the graph, solves, returns the cut (into cut) and its count. */
static int solve(int n, const double *cut_cost, const double *red, const bool *src,
                 const int (*edges)[2], int n_edges, bool *cut) {
  sc_cutgraph *g = sc_cut_create();
  assert_non_null(g);
  for (int v = 0; v < n; v++) assert_int_equal(sc_cut_node(g, cut_cost[v], src[v]), v);
  for (int e = 0; e < n_edges; e++) sc_cut_flow(g, edges[e][0], edges[e][1]);
  for (int v = 0; v < n; v++) sc_cut_reduce(g, v, red[v]);
  assert_int_equal(sc_cut_count(g), n);
  int32_t k = -1;
  assert_int_equal(sc_cut_solve(g, cut, &k), SC_OK);
  sc_cut_destroy(g);
  return k;
}

static void test_cases(void **state) {
  (void)state;
  bool cut[8];
  /* the forward's residual sum: one reduction as dear as cutting: lazy */
  {
    double cc[2] = {11, 11}, red[2] = {0, 10};
    bool src[2] = {true, false};
    int e[1][2] = {{0, 1}};
    assert_int_equal(solve(2, cc, red, src, e, 1, cut), 0);
  }
  /* a norm's backward: the pending gradient of its output (0) spreads to
   * its input's gradient (1), reduced downstream, and its weight's and
   * bias's (2, 3): one all-reduce at 0 beats three */
  {
    double cc[4] = {101, 101, 3, 3}, red[4] = {0, 100, 2, 2};
    bool src[4] = {true, false, false, false};
    int e[3][2] = {{0, 1}, {0, 2}, {0, 3}};
    assert_int_equal(solve(4, cc, red, src, e, 3, cut), 1);
    assert_true(cut[0] && !cut[1] && !cut[2] && !cut[3]);
  }
  /* Llama's gate and up projections' gradients (0, 1) summed (2), then
   * spread as above (3, 4): cut once, at the sum */
  {
    double cc[5] = {101, 101, 101, 101, 3}, red[5] = {0, 0, 0, 100, 2};
    bool src[5] = {true, true, false, false, false};
    int e[4][2] = {{0, 2}, {1, 2}, {2, 3}, {2, 4}};
    assert_int_equal(solve(5, cc, red, src, e, 4, cut), 1);
    assert_true(cut[2]);
  }
  /* nothing reduced downstream: nothing cut */
  {
    double cc[2] = {5, 5}, red[2] = {0, 0};
    bool src[2] = {true, false};
    int e[1][2] = {{0, 1}};
    assert_int_equal(solve(2, cc, red, src, e, 1, cut), 0);
  }
}

/* Random DAGs (edges from lower to higher nodes) of up to 10 nodes: the cut
 * chosen costs the minimum over all 2^n subsets. */
static void test_random_against_brute_force(void **state) {
  (void)state;
  rng_seed(31);
  for (int trial = 0; trial < 300; trial++) {
    int n = 2 + (int)(rng_unit() * 9);
    double cc[16], red[16];
    bool src[16], cut[16];
    int edges[64][2], ne = 0;
    for (int v = 0; v < n; v++) {
      cc[v] = 1 + (int)(rng_unit() * 20);
      red[v] = rng_unit() < 0.5 ? 0 : (int)(rng_unit() * 20);
      src[v] = v == 0 || rng_unit() < 0.2;
      for (int u = 0; u < v && ne < 64; u++)
        if (rng_unit() < 0.3) {
          edges[ne][0] = u;
          edges[ne][1] = v;
          ne++;
        }
    }
    solve(n, cc, red, src, (const int (*)[2])edges, ne, cut);
    double got = cost_of(n, cc, red, src, (const int (*)[2])edges, ne, cut), best = 1e300;
    for (int mask = 0; mask < (1 << n); mask++) {
      bool k[16];
      for (int v = 0; v < n; v++) k[v] = (mask >> v) & 1;
      double c = cost_of(n, cc, red, src, (const int (*)[2])edges, ne, k);
      if (c < best) best = c;
    }
    if (got != best) fail_msg("trial %d (%d nodes): cut costs %g, the minimum %g", trial, n, got, best);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_random_against_brute_force),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
