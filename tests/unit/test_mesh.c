/* test_mesh.c — the device mesh (ir/mesh.h).
 *
 * Parsing valid and invalid --mesh strings; rank <-> coordinates round trips
 * on several meshes; groups along axis sets checked against a brute-force
 * definition (ranks whose coordinates differ only in those axes, computed
 * here with plain div/mod); colors and keys suitable for a communicator
 * split; which axes stay within a node for a given --ranks-per-node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/mesh.h"

static void parse_ok(const char *spec, sc_mesh *m) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_mesh_parse(spec, m, &d) != SC_OK) fail_msg("mesh '%s': %s", spec, d.msg);
}

static void parse_bad(const char *spec, sc_status want, const char *needle) {
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_mesh_parse(spec, &m, &d);
  if (st != want) fail_msg("mesh '%s': status %s, want %s (%s)", spec, sc_status_name(st),
                           sc_status_name(want), d.msg);
  if (!strstr(d.msg, needle)) fail_msg("mesh '%s': message '%s' lacks '%s'", spec, d.msg, needle);
  assert_int_equal(m.n_axes, 0);
  assert_int_equal(m.n_ranks, 1);
}

static void test_parse(void **state) {
  (void)state;
  sc_mesh m;
  parse_ok("pp=2,dp=2,tp=2", &m);
  assert_int_equal(m.n_axes, 3);
  assert_string_equal(m.axes[0].name, "pp");
  assert_string_equal(m.axes[2].name, "tp");
  assert_int_equal(m.n_ranks, 8);
  assert_int_equal(sc_mesh_find_axis(&m, "dp"), 1);
  assert_int_equal(sc_mesh_find_axis(&m, "ep"), -1);
  assert_int_equal(sc_mesh_axis_size(&m, "ep"), 1);
  char buf[128];
  sc_mesh_format(&m, buf, sizeof buf);
  assert_string_equal(buf, "pp=2,dp=2,tp=2");
  parse_ok(" a = 3 , _b1=5,c=1 ", &m);
  assert_int_equal(m.n_ranks, 15);
  sc_mesh_format(&m, buf, sizeof buf);
  assert_string_equal(buf, "a=3,_b1=5,c=1");
  parse_ok("x=1048576", &m);
  assert_int_equal(m.n_ranks, 1 << 20);
  sc_mesh m2;
  parse_ok("a=3,_b1=5,c=1", &m2);
  sc_mesh m3;
  parse_ok("a=3,_b1=5,c=1", &m3);
  assert_true(sc_mesh_equal(&m2, &m3));
  assert_false(sc_mesh_equal(&m2, &m));
}

static void test_parse_errors(void **state) {
  (void)state;
  parse_bad("", SC_ERR_PARSE, "expected NAME=SIZE");
  parse_bad("tp", SC_ERR_PARSE, "expected NAME=SIZE");
  parse_bad("tp=", SC_ERR_PARSE, "needs a size");
  parse_bad("tp=x", SC_ERR_PARSE, "needs a size");
  parse_bad("tp=-2", SC_ERR_PARSE, "needs a size");
  parse_bad("tp=2,", SC_ERR_PARSE, "expected NAME=SIZE");
  parse_bad("tp=2;dp=2", SC_ERR_PARSE, "expected ','");
  parse_bad("tp=0", SC_ERR_INVALID, "sizes are >= 1");
  parse_bad("tp=2,tp=4", SC_ERR_INVALID, "'tp' appears twice");
  parse_bad("1tp=2", SC_ERR_INVALID, "not an identifier");
  parse_bad("t-p=2", SC_ERR_INVALID, "not an identifier");
  parse_bad("a=1024,b=1024,c=2", SC_ERR_LIMIT, "more than 1048576 ranks");
  parse_bad("a=99999999999", SC_ERR_LIMIT, "larger than");
  parse_bad("a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", SC_ERR_LIMIT, "at most 8 axes");
  parse_bad("abcdefghijabcdefghijabcdefghijabcdefghij=2", SC_ERR_LIMIT, "longer than");
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_mesh_init(&m);
  assert_int_equal(sc_mesh_set_ranks_per_node(&m, -1, &d), SC_ERR_INVALID);
}

/* Independent coordinates: row-major, last axis fastest. */
static void ref_coords(const sc_mesh *m, int64_t r, int64_t *c) {
  int64_t stride = m->n_ranks;
  for (int32_t i = 0; i < m->n_axes; i++) {
    stride /= m->axes[i].size;
    c[i] = (r / stride) % m->axes[i].size;
  }
}

static void test_coords(void **state) {
  (void)state;
  const char *specs[] = {"pp=2,dp=2,tp=2", "a=3,b=5", "x=7", "p=2,q=1,r=3,s=4", "t=4,u=2"};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    sc_mesh m;
    parse_ok(specs[k], &m);
    for (int64_t r = 0; r < m.n_ranks; r++) {
      int64_t c[SC_MESH_MAX_AXES], rc[SC_MESH_MAX_AXES];
      sc_mesh_rank_to_coords(&m, r, c);
      ref_coords(&m, r, rc);
      for (int32_t i = 0; i < m.n_axes; i++) assert_int_equal(c[i], rc[i]);
      assert_int_equal(sc_mesh_coords_to_rank(&m, c), r);
    }
  }
  sc_mesh m;
  parse_ok("pp=2,dp=2,tp=2", &m);
  int64_t c[3];
  sc_mesh_rank_to_coords(&m, 5, c);
  assert_int_equal(c[0], 1);
  assert_int_equal(c[1], 0);
  assert_int_equal(c[2], 1);
}

static void test_groups_example(void **state) {
  (void)state;
  sc_mesh m;
  parse_ok("pp=2,dp=2,tp=2", &m);
  const char *tp[] = {"tp"}, *dp[] = {"dp"}, *pp[] = {"pp"}, *dptp[] = {"dp", "tp"};
  sc_axes a;
  int64_t g[8];
  assert_true(sc_mesh_axes_of(&m, tp, 1, &a));
  sc_mesh_group_ranks(&m, a, 5, g);
  assert_int_equal(g[0], 4);
  assert_int_equal(g[1], 5);
  assert_true(sc_mesh_axes_of(&m, dp, 1, &a));
  sc_mesh_group_ranks(&m, a, 5, g);
  assert_int_equal(g[0], 5);
  assert_int_equal(g[1], 7);
  assert_true(sc_mesh_axes_of(&m, pp, 1, &a));
  sc_mesh_group_ranks(&m, a, 5, g);
  assert_int_equal(g[0], 1);
  assert_int_equal(g[1], 5);
  assert_true(sc_mesh_axes_of(&m, dptp, 2, &a));
  assert_int_equal(sc_mesh_group_size(&m, a), 4);
  sc_mesh_group_ranks(&m, a, 5, g);
  assert_int_equal(g[0], 4);
  assert_int_equal(g[1], 5);
  assert_int_equal(g[2], 6);
  assert_int_equal(g[3], 7);
  const char *bad[] = {"ep"};
  assert_false(sc_mesh_axes_of(&m, bad, 1, &a));
}

/* Every subset of axes on several meshes: the group is exactly the ranks
 * differing only in the subset's coords, in increasing order; keys are the
 * positions; colors agree within a group and differ between groups. */
static void test_groups_brute(void **state) {
  (void)state;
  const char *specs[] = {"pp=2,dp=2,tp=2", "a=3,b=2,c=4", "p=2,q=1,r=3"};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    sc_mesh m;
    parse_ok(specs[k], &m);
    for (sc_axes set = 0; set <= sc_mesh_all_axes(&m); set++) {
      int64_t gs = sc_mesh_group_size(&m, set);
      int64_t *grp = malloc((size_t)gs * sizeof *grp);
      int64_t n_colors = m.n_ranks / gs;
      for (int64_t r = 0; r < m.n_ranks; r++) {
        sc_mesh_group_ranks(&m, set, r, grp);
        int64_t cr[8], cs[8];
        ref_coords(&m, r, cr);
        int64_t found = 0;
        for (int64_t s = 0; s < m.n_ranks; s++) {
          ref_coords(&m, s, cs);
          bool same = true;
          for (int32_t i = 0; i < m.n_axes; i++)
            if (!(set & (1u << i)) && cs[i] != cr[i]) same = false;
          if (!same) continue;
          assert_true(found < gs);
          assert_int_equal(grp[found], s); /* increasing rank order */
          assert_int_equal(sc_mesh_group_key(&m, set, s), found);
          assert_int_equal(sc_mesh_group_color(&m, set, s), sc_mesh_group_color(&m, set, r));
          found++;
        }
        assert_int_equal(found, gs);
        int64_t col = sc_mesh_group_color(&m, set, r);
        assert_true(col >= 0 && col < n_colors);
        for (int64_t s = 0; s < m.n_ranks; s++) {
          bool in = false;
          for (int64_t j = 0; j < gs; j++) in |= grp[j] == s;
          if (!in) assert_int_not_equal(sc_mesh_group_color(&m, set, s), col);
        }
      }
      free(grp);
    }
  }
}

static bool ref_intra(const sc_mesh *m, sc_axes set, int64_t rpn) {
  int64_t *g = malloc((size_t)m->n_ranks * sizeof *g);
  bool ok = true;
  for (int64_t r = 0; r < m->n_ranks; r++) {
    sc_mesh_group_ranks(m, set, r, g);
    for (int64_t j = 0; j < sc_mesh_group_size(m, set); j++)
      if (g[j] / rpn != r / rpn) ok = false;
  }
  free(g);
  return ok;
}

static void test_nodes(void **state) {
  (void)state;
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  parse_ok("pp=2,dp=2,tp=2", &m);
  sc_axes tp = 4, dp = 2, pp = 1;
  assert_true(sc_mesh_is_intra_node(&m, tp | dp | pp)); /* not given: one node */
  assert_int_equal(sc_mesh_node_of(&m, 7), 0);
  assert_int_equal(sc_mesh_set_ranks_per_node(&m, 2, &d), SC_OK);
  assert_int_equal(sc_mesh_node_of(&m, 5), 2);
  assert_true(sc_mesh_is_intra_node(&m, tp));
  assert_false(sc_mesh_is_intra_node(&m, dp));
  assert_false(sc_mesh_is_intra_node(&m, pp));
  assert_true(sc_mesh_is_intra_node(&m, 0));
  sc_mesh_set_ranks_per_node(&m, 4, &d);
  assert_true(sc_mesh_is_intra_node(&m, tp | dp));
  assert_false(sc_mesh_is_intra_node(&m, pp));
  sc_mesh_set_ranks_per_node(&m, 3, &d); /* groups {2,3} straddle nodes */
  assert_false(sc_mesh_is_intra_node(&m, tp));
  /* against the definition, every set and several node sizes */
  const char *specs[] = {"pp=2,dp=2,tp=2", "a=3,b=2,c=4"};
  for (size_t k = 0; k < 2; k++) {
    parse_ok(specs[k], &m);
    for (int64_t rpn = 1; rpn <= m.n_ranks + 1; rpn++) {
      sc_mesh_set_ranks_per_node(&m, rpn, &d);
      for (sc_axes set = 0; set <= sc_mesh_all_axes(&m); set++)
        assert_int_equal(sc_mesh_is_intra_node(&m, set), ref_intra(&m, set, rpn));
    }
  }
}

/* Command-line meshes: only axes that take a role (dp, tp, pp) pass. */
static void test_check_roles(void **state) {
  (void)state;
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  parse_ok("pp=2,dp=2,tp=2", &m);
  assert_int_equal(sc_mesh_check_roles(&m, &d), SC_OK);
  parse_ok("tp=4", &m);
  assert_int_equal(sc_mesh_check_roles(&m, &d), SC_OK);
  parse_ok("tp=2,zz=2", &m);
  assert_int_equal(sc_mesh_check_roles(&m, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "'zz'"));
  assert_non_null(strstr(d.msg, "dp"));
  assert_non_null(strstr(d.msg, "tp"));
  assert_non_null(strstr(d.msg, "pp"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),          cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_coords),         cmocka_unit_test(test_groups_example),
      cmocka_unit_test(test_groups_brute),   cmocka_unit_test(test_nodes),
      cmocka_unit_test(test_check_roles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
