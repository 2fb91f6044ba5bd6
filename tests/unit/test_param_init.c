/* test_param_init.c — the parameter initialiser (runtime/param_init.c).
 *
 * Philox4x32-10 against Random123's known-answer vectors (tests/kat_vectors
 * of github.com/DEShawResearch/random123, the three "philox4x32 10" lines);
 * FNV-1a-64 against its published values for "" and "a"; rule parsing and
 * its errors (unknown initialiser, bad glob, missing or stray argument);
 * the first matching rule wins; the pieces of a [6, 12] tensor split over
 * a 2×2 mesh — rows over one axis, columns with a partition stride of 3
 * over the other, as a fused QKV weight — put together equal the whole
 * tensor bit for bit; statistics of 2^20 normal:0.02 values (mean and
 * standard deviation within 5 standard errors: a false alarm about once
 * in 3.5 million runs) and of kaiming; xavier and uniform inside their
 * bounds and reaching near them; the residual scale; a vocabulary-padded
 * copy equal to the unpadded tensor with zeros after it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "runtime/param_init.h"

static void test_philox_known_answers(void **state) {
  (void)state;
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    sc_philox4x32_10(kat[i], kat[i] + 4, out);
    for (int k = 0; k < 4; k++) assert_int_equal(out[k], kat[i][6 + k]);
  }
  assert_true(sc_param_init_name_hash("") == 0xcbf29ce484222325ull);
  assert_true(sc_param_init_name_hash("a") == 0xaf63dc4c8601ec8cull);
}

static void refused(const char *text, const char *needle) {
  sc_param_init pi = {0};
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_param_init_add(&pi, text, &d), SC_ERR_USAGE);
  if (!strstr(d.msg, needle)) fail_msg("'%s': message '%s' lacks '%s'", text, d.msg, needle);
  assert_int_equal(pi.n_rules, 0);
}

static void test_rules(void **state) {
  (void)state;
  refused("gaussian:1", "unknown initialiser 'gaussian'");
  refused("*.w=[ab=zeros", "bad name pattern");
  refused("=zeros", "bad name pattern");
  refused("normal", "normal takes a positive number");
  refused("normal:-1", "positive");
  refused("uniform:x", "positive");
  refused("zeros:1", "takes no argument");
  sc_param_init pi = {0};
  sc_diag d = {0};
  sc_diag_clear(&d);
  const char *rules[] = {"*ln_*.weight=ones", "*.bias=zeros", "h.[0-9].*=uniform:0.5",
                         "*=normal:0.02"};
  for (int i = 0; i < 4; i++) assert_int_equal(sc_param_init_add(&pi, rules[i], &d), SC_OK);
  assert_int_equal(sc_param_init_match(&pi, "h.0.ln_1.weight")->kind, SC_INIT_ONES);
  assert_int_equal(sc_param_init_match(&pi, "h.0.ln_1.bias")->kind, SC_INIT_ZEROS);
  assert_int_equal(sc_param_init_match(&pi, "h.3.mlp.weight")->kind, SC_INIT_UNIFORM);
  assert_true(sc_param_init_match(&pi, "h.3.mlp.weight")->arg == 0.5);
  assert_int_equal(sc_param_init_match(&pi, "wte")->kind, SC_INIT_NORMAL);
  sc_param_init none = {0};
  assert_int_equal(sc_param_init_add(&none, "*.bias=zeros", &d), SC_OK);
  assert_null(sc_param_init_match(&none, "wte"));
  /* xavier on a vector: refused naming the parameter */
  sc_param_init x = {0};
  assert_int_equal(sc_param_init_add(&x, "xavier", &d), SC_OK);
  const sc_init_rule *r;
  int64_t dims[1] = {8};
  assert_int_equal(sc_param_init_check(&x, "ln.bias", SC_DTYPE_F32, 1, dims, &r, &d),
                   SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "'ln.bias'"));
}

static void one_rule(sc_param_init *pi, const char *text, uint64_t seed) {
  memset(pi, 0, sizeof *pi);
  pi->seed = seed;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_param_init_add(pi, text, &d), SC_OK);
}

static float *whole(const sc_param_init *pi, const char *name, int32_t rank,
                    const int64_t *dims, int64_t n) {
  float *x = malloc((size_t)n * sizeof *x);
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_param_init_fill(pi, name, SC_DTYPE_F32, rank, dims, NULL, NULL, NULL, x,
                                      &d),
                   SC_OK);
  return x;
}

static void test_pieces_tile_the_whole(void **state) {
  (void)state;
  sc_param_init pi;
  one_rule(&pi, "normal:1", 42);
  int64_t dims[2] = {6, 12};
  float *all = whole(&pi, "qkv", 2, dims, 72);
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("fsdp=2,tp=2", &m, &d), SC_OK);
  sc_sharding sh;
  const char *text = "[fsdp,3*tp]";
  assert_int_equal(sc_sharding_parse(text, strlen(text), &m, 2, &sh, &d), SC_OK);
  float got[72];
  memset(got, 0xff, sizeof got);
  for (int64_t r = 0; r < 4; r++) {
    int64_t coords[SC_MESH_MAX_AXES];
    sc_mesh_rank_to_coords(&m, r, coords);
    assert_int_equal(sc_param_init_piece_bytes(&sh, &m, SC_DTYPE_F32, 2, dims), 18 * 4);
    float piece[18];
    assert_int_equal(sc_param_init_fill(&pi, "qkv", SC_DTYPE_F32, 2, dims, &sh, &m, coords,
                                        piece, &d),
                     SC_OK);
    sc_sharding_insert(&sh, &m, coords, sizeof(float), dims, piece, got);
  }
  assert_memory_equal(got, all, sizeof got);
  /* another name or seed: other values */
  float *other = whole(&pi, "qkv2", 2, dims, 72);
  assert_true(memcmp(other, all, sizeof got) != 0);
  pi.seed = 43;
  float *reseeded = whole(&pi, "qkv", 2, dims, 72);
  assert_true(memcmp(reseeded, all, sizeof got) != 0);
  free(all);
  free(other);
  free(reseeded);
}

static void moments(const float *x, int64_t n, double *mean, double *sd, double *most) {
  double s = 0, s2 = 0;
  *most = 0;
  for (int64_t i = 0; i < n; i++) {
    assert_false(isnan(x[i]));
    s += x[i];
    *most = fmax(*most, fabs(x[i]));
  }
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
  *sd = sqrt(s2 / (double)(n - 1));
}

static void test_statistics(void **state) {
  (void)state;
  enum { N = 1 << 20 };
  int64_t dims[2] = {1024, 1024};
  double mean, sd, most;
  sc_param_init pi;
  /* normal:0.02: the mean's standard error is σ/√n, the deviation's
   * σ/√(2n) */
  one_rule(&pi, "normal:0.02", 1);
  float *x = whole(&pi, "w", 2, dims, N);
  moments(x, N, &mean, &sd, &most);
  assert_true(fabs(mean) < 5 * 0.02 / sqrt(N));
  assert_true(fabs(sd - 0.02) < 5 * 0.02 / sqrt(2.0 * N));
  assert_true(most > 4 * 0.02); /* tails: P(|z| > 4) ≈ 6e-5, ~66 expected */
  free(x);
  /* kaiming over fan-in 1024: σ = √2/√1024 */
  one_rule(&pi, "kaiming", 1);
  x = whole(&pi, "w", 2, dims, N);
  moments(x, N, &mean, &sd, &most);
  double ks = sqrt(2.0 / 1024);
  assert_true(fabs(sd - ks) < 5 * ks / sqrt(2.0 * N));
  free(x);
  /* xavier on [256, 768] (MatMul [in, out]): U(-a, a), a = √(6/(256+768)) */
  int64_t xd[2] = {256, 768};
  one_rule(&pi, "xavier", 1);
  x = whole(&pi, "w", 2, xd, 256 * 768);
  moments(x, 256 * 768, &mean, &sd, &most);
  double a = sqrt(6.0 / 1024);
  assert_true(most <= a && most > 0.999 * a);
  assert_true(fabs(sd - a / sqrt(3.0)) < 0.01 * a);
  free(x);
  one_rule(&pi, "uniform:0.1", 1);
  x = whole(&pi, "w", 2, xd, 256 * 768);
  moments(x, 256 * 768, &mean, &sd, &most);
  assert_true(most <= 0.1 && most > 0.0999);
  free(x);
}

static void test_roles(void **state) {
  (void)state;
  sc_param_init pi;
  one_rule(&pi, "normal:0.02", 5);
  int64_t dims[2] = {10, 4};
  float *plain = whole(&pi, "w", 2, dims, 40);
  /* the residual scale multiplies every value */
  sc_param_init_role role = {.name = "w", .scale = 0.25};
  pi.roles = &role;
  pi.n_roles = 1;
  float *scaled = whole(&pi, "w", 2, dims, 40);
  for (int i = 0; i < 40; i++) assert_true(scaled[i] == (float)(0.25 * (double)plain[i]) ||
                                           fabs(scaled[i] - 0.25 * plain[i]) < 1e-9);
  /* a padded copy [12, 4] of "w" [10, 4]: w's values, then zero rows */
  sc_param_init_role pad = {.name = "w.vocab_padded", .logical = "w", .rank = 2,
                            .dims = {10, 4}};
  pi.roles = &pad;
  int64_t pd[2] = {12, 4};
  float *padded = whole(&pi, "w.vocab_padded", 2, pd, 48);
  assert_memory_equal(padded, plain, 40 * sizeof(float));
  for (int i = 40; i < 48; i++) assert_true(padded[i] == 0.0f);
  free(plain);
  free(scaled);
  free(padded);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_pieces_tile_the_whole),
      cmocka_unit_test(test_statistics),
      cmocka_unit_test(test_roles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
