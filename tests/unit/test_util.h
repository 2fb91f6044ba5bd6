/* test_util.h — helpers shared by the C unit tests (tests/unit/test_*.c).
 *
 * Everything here is `static inline`, so a test includes only this header
 * and uses what it needs; nothing is linked. Every helper that can fail
 * does so through a cmocka assertion, so a broken fixture fails the test
 * that built it. What is here:
 *
 *   seeded RNG      rng_seed(s), rng_unit() in [0,1), rnd(lo,hi),
 *                   rnd_nz(lo,hi) (|v| >= 0.05), rng_val() (|v| in
 *                   [0.1,1], random sign) — one LCG, never zeros
 *   values          cst (constant with data), inp (graph input), shaped
 *                   (a value with dtype and shape only), outv (output of
 *                   unknown shape)
 *   nodes, attrs    node1 (one fresh output), set_int, set_float,
 *                   set_string, set_ints (from an array)
 *   running ops     infer, eval (through sc_ops[]), run_ok (both succeed)
 *   checks          check_shape, near (relative tolerance, NaN fails
 *                   unless expected), expect_error (status, node, message)
 *   fixtures        setup_graph / teardown_graph (a fresh graph, opset 21,
 *                   in *state)
 *   textual IR      parse_ok (parse or fail the test with the diagnostic)
 *   skips           SC_SKIP, SC_RUN_TESTS, SC_TEST_MAIN_SKIPPED (test_skip.h)
 *   files           scratch_setup / scratch_teardown (a fresh folder under
 *                   /tmp per test program, removed after), scratch_path
 *                   (a name in it), count_entries (of a folder),
 *                   read_whole (a file into malloc'd memory, NUL after)
 */
#ifndef SC_TEST_UTIL_H
#define SC_TEST_UTIL_H

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "ir/text.h"
#include "test_skip.h"

/* ---- seeded RNG (a 64-bit LCG) ---- */

static inline uint64_t *tu_rng_state(void) {
  static uint64_t state;
  return &state;
}
static inline void rng_seed(uint64_t s) {
  *tu_rng_state() = s * 6364136223846793005ull + 1442695040888963407ull;
}
/* Uniform in [0,1). */
static inline double rng_unit(void) {
  uint64_t *s = tu_rng_state();
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}
/* Uniform in [lo,hi); never exactly 0 for lo > 0. */
static inline double rnd(double lo, double hi) { return lo + (hi - lo) * rng_unit(); }
/* In [lo,hi] but bounded away from 0. */
static inline double rnd_nz(double lo, double hi) {
  double v;
  do v = rnd(lo, hi); while (fabs(v) < 0.05);
  return v;
}
/* Never zero: magnitude in [0.1, 1], random sign. */
static inline float rng_val(void) {
  double m = 0.1 + 0.9 * rng_unit();
  return (float)(rng_unit() < 0.5 ? -m : m);
}

/* ---- values ---- */

/* A constant of dtype t and shape dims holding a copy of data. */
static inline int32_t cst(sc_graph *g, sc_dtype t, int32_t rank, const int64_t *dims,
                          const void *data) {
  int32_t id = sc_graph_add_value(g, NULL);
  assert_true(id >= 0);
  int64_t numel = 1;
  for (int32_t i = 0; i < rank; i++) numel *= dims[i];
  assert_int_equal(sc_value_set_data(g, id, t, rank, dims, data,
                                     (uint64_t)numel * sc_dtype_size(t), true),
                   SC_OK);
  return id;
}
/* A value (name may be NULL) with dtype and shape and no data. */
static inline int32_t shaped(sc_graph *g, const char *name, sc_dtype t, int32_t rank,
                             const int64_t *dims) {
  int32_t id = sc_graph_add_value(g, name);
  assert_true(id >= 0);
  assert_int_equal(sc_value_set_shape(g, id, t, rank, dims), SC_OK);
  return id;
}
/* A graph input of dtype t and shape dims. */
static inline int32_t inp(sc_graph *g, sc_dtype t, int32_t rank, const int64_t *dims) {
  int32_t id = shaped(g, NULL, t, rank, dims);
  assert_int_equal(sc_graph_add_input(g, id), SC_OK);
  return id;
}
/* A value of unknown shape, to be an output. */
static inline int32_t outv(sc_graph *g) {
  int32_t id = sc_graph_add_value(g, NULL);
  assert_true(id >= 0);
  g->values[id].rank = -1;
  return id;
}

/* ---- nodes and attributes ---- */

/* A node with one fresh output (returned through *out). */
static inline int32_t node1(sc_graph *g, sc_op op, const char *name, const int32_t *ins,
                            int32_t nin, int32_t *out) {
  *out = outv(g);
  int32_t id = sc_graph_add_node(g, op, name, ins, nin, out, 1);
  assert_true(id >= 0);
  return id;
}
static inline void set_int(sc_graph *g, int32_t nid, const char *name, int64_t v) {
  sc_attr *a = sc_node_add_attr(g, nid, name, SC_ATTR_INT);
  assert_non_null(a);
  a->i = v;
}
static inline void set_float(sc_graph *g, int32_t nid, const char *name, double v) {
  sc_attr *a = sc_node_add_attr(g, nid, name, SC_ATTR_FLOAT);
  assert_non_null(a);
  a->f = v;
}
static inline void set_string(sc_graph *g, int32_t nid, const char *name, const char *s) {
  sc_attr *a = sc_node_add_attr(g, nid, name, SC_ATTR_STRING);
  assert_non_null(a);
  a->s = sc_arena_strdup(&g->arena, s);
}
/* An INTS attribute copied from v[0..n). */
static inline void set_ints(sc_graph *g, int32_t nid, const char *name, int64_t n,
                            const int64_t *v) {
  sc_attr *a = sc_node_add_attr(g, nid, name, SC_ATTR_INTS);
  assert_non_null(a);
  a->n = n;
  a->ints = sc_arena_array(&g->arena, (size_t)(n ? n : 1), sizeof(int64_t));
  assert_non_null(a->ints);
  for (int64_t i = 0; i < n; i++) a->ints[i] = v[i];
}

/* ---- running ops ---- */

static inline sc_status infer(sc_graph *g, int32_t nid) {
  sc_node *n = sc_nod(g, nid);
  return sc_ops[n->op].infer(g, n);
}
static inline sc_status eval(sc_graph *g, int32_t nid) {
  sc_node *n = sc_nod(g, nid);
  SC_ASSERT(sc_ops[n->op].eval);
  return sc_ops[n->op].eval(g, n);
}
/* infer then eval; both must succeed. */
static inline void run_ok(sc_graph *g, int32_t nid) {
  sc_status st = infer(g, nid);
  if (st != SC_OK) fail_msg("infer: %s", g->diag.msg);
  st = eval(g, nid);
  if (st != SC_OK) fail_msg("eval: %s", g->diag.msg);
}

/* ---- checks ---- */

static inline void check_shape(sc_graph *g, int32_t v, sc_dtype t, int32_t rank,
                               const int64_t *dims) {
  const sc_value *x = &g->values[v];
  assert_int_equal(x->dtype, t);
  assert_int_equal(x->rank, rank);
  for (int32_t i = 0; i < rank; i++) assert_int_equal(x->dims[i], dims[i]);
}
/* |got - want| <= rel * max(1, |want|); NaN fails unless want is NaN. */
static inline void near(double got, double want, double rel) {
  if (isnan(want)) {
    assert_true(isnan(got));
    return;
  }
  assert_false(isnan(got));
  double tol = rel * fmax(1.0, fabs(want));
  if (!(fabs(got - want) <= tol))
    fail_msg("got %.17g, want %.17g (tol %g)", got, want, tol);
}
/* got == want, recorded on g's diagnostic for node `node`, whose message
 * contains needle (when not NULL). */
static inline void expect_error(sc_graph *g, sc_status got, sc_status want,
                                const char *node, const char *needle) {
  assert_int_equal(got, want);
  assert_int_equal(g->diag.status, want);
  assert_string_equal(g->diag.node, node);
  if (needle && !strstr(g->diag.msg, needle))
    fail_msg("message '%s' lacks '%s'", g->diag.msg, needle);
}

/* ---- fixtures ---- */

static inline int setup_graph(void **state) {
  sc_graph *g = sc_graph_create("t");
  assert_non_null(g);
  g->opset = 21;
  *state = g;
  return 0;
}
static inline int teardown_graph(void **state) {
  sc_graph_destroy(*state);
  return 0;
}

/* ---- files ---- */

static inline char *scratch_dir(void) {
  static char dir[256];
  return dir;
}
/* cmocka group fixtures: a fresh /tmp/sc_test_XXXXXX, removed after. */
static inline int scratch_setup(void **state) {
  (void)state;
  snprintf(scratch_dir(), 256, "/tmp/sc_test_XXXXXX");
  return mkdtemp(scratch_dir()) ? 0 : -1;
}
static inline int scratch_teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_dir());
  return system(cmd);
}
/* "SCRATCH/name"; the last 8 results stay valid. */
static inline const char *scratch_path(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", scratch_dir(), name);
  return buf[k];
}
/* Entries of a folder other than . and .. */
static inline int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}
/* The whole file, malloc'd, one NUL byte after its *size bytes. */
static inline void *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* ---- textual IR ---- */

/* Parses text (named t.ir) or fails the test with the diagnostic. */
static inline sc_graph *parse_ok(const char *text) {
  sc_graph *g = NULL;
  sc_diag d;
  sc_diag_clear(&d);
  if (sc_ir_parse(text, strlen(text), "t.ir", &g, &d) != SC_OK) {
    char buf[2048];
    sc_diag_format(&d, buf, sizeof buf);
    fail_msg("parse failed: %s\n--- text ---\n%s", buf, text);
  }
  assert_non_null(g);
  return g;
}

#endif
