/* test_checkpoint.c — training checkpoints (runtime/checkpoint.c).
 *
 * Save then load gives back the state exactly (integers, the loss scale's
 * bits, the 64-bit RNG state, the optimizer's hyperparameters) and every
 * tensor bit for bit, in order; saving again replaces the checkpoint and
 * leaves no temporary folder. Damage is refused with a message naming the
 * file: a flipped byte (SHA-256), a truncated or grown file, a missing or
 * edited manifest, a newer format version, tensors that disagree with the
 * manifest, a FIFO in place of a file. A save that fails midway (injected
 * with SHARDC_TEST_CKPT_FAIL_AFTER) or is killed before its rename (fork,
 * SIGKILL during SHARDC_TEST_COMMIT_DELAY_MS) leaves the previous
 * checkpoint loadable; the next save removes the killed one's folder. A
 * folder that is not a checkpoint is never replaced, and bad arguments
 * create nothing. Sharded checkpoints (format 2): a tensor saved in boxes
 * over two writers' files loads whole, bit for bit; shards that overlap or
 * leave a gap are refused at save (nothing written) and at load (a
 * resealed manifest edited to move or drop a shard), as are a file name
 * with a path, and a damaged shard file (named). */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#include "codegen/program_json.h"
#include "runtime/checkpoint.h"

/* ---- a small training state ---- */

typedef struct fixture {
  float w1[6], b1[3], w2;
  uint16_t emb[8]; /* bf16 bits */
  float m[6], v[6], mb[3];
  sc_ckpt_tensor weights[4], opt[3];
  sc_ckpt_state st;
} fixture;

static void make_fixture(fixture *f, uint64_t seed) {
  rng_seed(seed);
  for (int i = 0; i < 6; i++) {
    f->w1[i] = (float)rng_val();
    f->m[i] = (float)rng_val();
    f->v[i] = (float)rnd(1e-8, 1e-3);
  }
  for (int i = 0; i < 3; i++) {
    f->b1[i] = (float)rng_val();
    f->mb[i] = (float)rng_val();
  }
  f->w2 = (float)rng_val();
  for (int i = 0; i < 8; i++) f->emb[i] = sc_f32_to_bf16((float)rng_val());
  sc_ckpt_tensor w[] = {
      {.name = "fc1.weight", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {2, 3}, .data = f->w1},
      {.name = "fc1.bias", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {3}, .data = f->b1},
      {.name = "scale", .dtype = SC_DTYPE_F32, .rank = 0, .data = &f->w2},
      {.name = "emb", .dtype = SC_DTYPE_BF16, .rank = 2, .dims = {4, 2}, .data = f->emb}};
  sc_ckpt_tensor o[] = {{.name = "fc1.weight.exp_avg",
                         .dtype = SC_DTYPE_F32,
                         .rank = 2,
                         .dims = {2, 3},
                         .data = f->m},
                        {.name = "fc1.weight.exp_avg_sq",
                         .dtype = SC_DTYPE_F32,
                         .rank = 2,
                         .dims = {2, 3},
                         .data = f->v},
                        {.name = "fc1.bias.momentum_buffer",
                         .dtype = SC_DTYPE_F32,
                         .rank = 1,
                         .dims = {3},
                         .data = f->mb}};
  memcpy(f->weights, w, sizeof w);
  memcpy(f->opt, o, sizeof o);
  f->st = (sc_ckpt_state){.step = (int64_t)seed * 100 + 7,
                          .data_position = 123456789012345,
                          .schedule_position = (int64_t)seed * 100 + 7,
                          .loss_scale = 65536.0 / 3.0,
                          .loss_scale_growth = 1999,
                          .rng_state = 0xfedcba9876543210ull + seed,
                          .optimizer = "adamw",
                          .optimizer_json =
                              "{\"lr\": 0.001, \"betas\": [0.9, 0.999], "
                              "\"eps\": 1e-08, \"weight_decay\": 0.01}"};
}

static void save_ok(const char *dir, const fixture *f) {
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_ckpt_save(dir, &f->st, f->weights, 4, f->opt, 3, &d);
  if (st != SC_OK) fail_msg("save: %s", d.msg);
}

static sc_ckpt *load_ok(const char *dir) {
  sc_ckpt *c = NULL;
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_ckpt_load(dir, &c, &d);
  if (st != SC_OK) fail_msg("load: %s", d.msg);
  return c;
}

static void expect_same(const sc_ckpt *c, const fixture *f) {
  const sc_ckpt_state *s = sc_ckpt_state_of(c);
  assert_int_equal(s->step, f->st.step);
  assert_int_equal(s->data_position, f->st.data_position);
  assert_int_equal(s->schedule_position, f->st.schedule_position);
  assert_int_equal(s->loss_scale_growth, f->st.loss_scale_growth);
  assert_memory_equal(&s->loss_scale, &f->st.loss_scale, sizeof(double)); /* bits */
  assert_true(s->rng_state == f->st.rng_state);
  assert_string_equal(s->optimizer, "adamw");
  json_t *hyper = json_loads(s->optimizer_json, 0, NULL);
  json_t *hyper_saved = json_loads(f->st.optimizer_json, 0, NULL);
  assert_true(json_equal(hyper, hyper_saved)); /* the same object; reals exact */
  json_decref(hyper);
  json_decref(hyper_saved);
  const sc_ckpt_tensor *groups[] = {f->weights, f->opt};
  const int32_t counts[] = {4, 3};
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++) {
    assert_int_equal(sc_ckpt_count(c, (sc_ckpt_group)g), counts[g]);
    for (int32_t i = 0; i < counts[g]; i++) {
      const sc_ckpt_tensor *want = &groups[g][i];
      const sc_ckpt_tensor *got = sc_ckpt_tensor_at(c, (sc_ckpt_group)g, i); /* saved order */
      assert_non_null(got);
      assert_ptr_equal(got, sc_ckpt_find(c, (sc_ckpt_group)g, want->name));
      assert_string_equal(got->name, want->name);
      assert_int_equal(got->dtype, want->dtype);
      assert_int_equal(got->rank, want->rank);
      for (int k = 0; k < got->rank; k++) assert_int_equal(got->dims[k], want->dims[k]);
      int64_t numel, bytes;
      assert_true(sc_tensor_view_size(want, &numel, &bytes));
      assert_memory_equal(got->data, want->data, (size_t)bytes);
    }
    assert_null(sc_ckpt_tensor_at(c, (sc_ckpt_group)g, counts[g]));
  }
  assert_null(sc_ckpt_find(c, SC_CKPT_OPTIMIZER, "fc1.weight")); /* groups are separate */
  assert_null(sc_ckpt_find(c, SC_CKPT_WEIGHTS, "nope"));
}

static void test_round_trip(void **state) {
  (void)state;
  fixture f;
  make_fixture(&f, 1);
  save_ok(scratch_path("ck"), &f);
  assert_true(sc_ckpt_is_dir(scratch_path("ck")));
  assert_int_equal(count_entries(scratch_path("ck")), 3);
  sc_ckpt *c = load_ok(scratch_path("ck"));
  expect_same(c, &f);
  sc_ckpt_destroy(c);

  /* saving again replaces it whole; no temporary folder stays */
  fixture g;
  make_fixture(&g, 2);
  save_ok(scratch_path("ck/"), &g);
  c = load_ok(scratch_path("ck"));
  expect_same(c, &g);
  sc_ckpt_destroy(c);
  assert_int_equal(count_entries(scratch_dir()), 1);

  /* no optimizer state (plain SGD): an empty optimizer file */
  sc_diag d;
  sc_diag_clear(&d);
  g.st.optimizer_json = NULL;
  g.st.loss_scale = 1;
  assert_int_equal(sc_ckpt_save(scratch_path("sgd"), &g.st, g.weights, 4, NULL, 0, &d), SC_OK);
  c = load_ok(scratch_path("sgd"));
  assert_int_equal(sc_ckpt_count(c, SC_CKPT_OPTIMIZER), 0);
  assert_int_equal(sc_ckpt_count(c, SC_CKPT_WEIGHTS), 4);
  assert_string_equal(sc_ckpt_state_of(c)->optimizer_json, "{}");
  assert_true(sc_ckpt_state_of(c)->loss_scale == 1.0);
  sc_ckpt_destroy(c);
  assert_string_equal(sc_ckpt_group_name(SC_CKPT_OPTIMIZER), "optimizer");
}

/* The manifest describes every tensor by its global shape and one shard. */
static void test_manifest_layout(void **state) {
  (void)state;
  fixture f;
  make_fixture(&f, 3);
  save_ok(scratch_path("m"), &f);
  json_error_t err;
  json_t *root = json_load_file(scratch_path("m/manifest.json"), JSON_REJECT_DUPLICATES, &err);
  assert_non_null(root);
  assert_string_equal(json_string_value(json_object_get(root, "format")), "shardc-checkpoint");
  assert_int_equal(json_integer_value(json_object_get(root, "format_version")), 1);
  assert_string_equal(json_string_value(json_object_get(root, "rng_state")),
                      "18364758544493064723"); /* 0xfedcba9876543213 */
  json_t *w = json_object_get(json_object_get(root, "tensors"), "weights");
  assert_int_equal(json_array_size(w), 4);
  json_t *e = json_array_get(w, 0), *sh = json_array_get(json_object_get(e, "shards"), 0);
  assert_string_equal(json_string_value(json_object_get(e, "name")), "fc1.weight");
  assert_true(json_equal(json_object_get(e, "shape"), json_object_get(sh, "shape")));
  assert_string_equal(json_string_value(json_object_get(sh, "file")), "weights.safetensors");
  json_t *files = json_object_get(root, "files");
  assert_int_equal(json_array_size(files), 2);
  struct stat sb;
  assert_int_equal(stat(scratch_path("m/weights.safetensors"), &sb), 0);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(files, 0), "bytes")),
                   sb.st_size);
  json_decref(root);
}

/* ---- damage ---- */

static void expect_load_fails(const char *dir, sc_status want, const char *n1, const char *n2) {
  sc_ckpt *c = (sc_ckpt *)1;
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_ckpt_load(dir, &c, &d);
  if (st != want)
    fail_msg("status %s, want %s: %s", sc_status_name(st), sc_status_name(want), d.msg);
  assert_null(c);
  if (!strstr(d.msg, dir)) fail_msg("'%s' does not name the checkpoint", d.msg);
  if (n1 && !strstr(d.msg, n1)) fail_msg("'%s' lacks '%s'", d.msg, n1);
  if (n2 && !strstr(d.msg, n2)) fail_msg("'%s' lacks '%s'", d.msg, n2);
}

static void flip_byte(const char *path, long at_byte) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, at_byte, at_byte < 0 ? SEEK_END : SEEK_SET);
  int c = fgetc(f);
  fseek(f, -1, SEEK_CUR);
  fputc(c ^ 0x01, f);
  fclose(f);
}

static void fresh(const char *name, uint64_t seed) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_path(name));
  assert_int_equal(system(cmd), 0);
  fixture f;
  make_fixture(&f, seed);
  save_ok(scratch_path(name), &f);
}

static void test_damaged_files(void **state) {
  (void)state;
  char path[600];
  /* a flipped byte in the data, and in the header */
  fresh("d", 4);
  flip_byte(scratch_path("d/weights.safetensors"), -3);
  expect_load_fails(scratch_path("d"), SC_ERR_INVALID, "weights.safetensors", "SHA-256 mismatch");
  fresh("d", 4);
  flip_byte(scratch_path("d/optimizer.safetensors"), 20);
  expect_load_fails(scratch_path("d"), SC_ERR_INVALID, "optimizer.safetensors", "SHA-256 mismatch");
  /* truncated, grown */
  fresh("d", 4);
  assert_int_equal(truncate(scratch_path("d/weights.safetensors"), 40), 0);
  expect_load_fails(scratch_path("d"), SC_ERR_INVALID, "weights.safetensors", "truncated");
  fresh("d", 4);
  FILE *f = fopen(scratch_path("d/optimizer.safetensors"), "ab");
  fputs("more", f);
  fclose(f);
  expect_load_fails(scratch_path("d"), SC_ERR_INVALID, "optimizer.safetensors", "larger than");
  /* a file missing, or a FIFO in its place (no hang) */
  fresh("d", 4);
  assert_int_equal(unlink(scratch_path("d/weights.safetensors")), 0);
  expect_load_fails(scratch_path("d"), SC_ERR_IO, "weights.safetensors", NULL);
  assert_int_equal(mkfifo(scratch_path("d/weights.safetensors"), 0600), 0);
  expect_load_fails(scratch_path("d"), SC_ERR_IO, "weights.safetensors", "FIFO");
  /* no manifest; a manifest that is a FIFO or not JSON; not a folder */
  fresh("d", 4);
  assert_int_equal(unlink(scratch_path("d/manifest.json")), 0);
  expect_load_fails(scratch_path("d"), SC_ERR_IO, "not a checkpoint", "manifest.json");
  assert_int_equal(mkfifo(scratch_path("d/manifest.json"), 0600), 0);
  expect_load_fails(scratch_path("d"), SC_ERR_IO, "manifest.json", "FIFO");
  assert_int_equal(unlink(scratch_path("d/manifest.json")), 0);
  f = fopen(scratch_path("d/manifest.json"), "w");
  fputs("{\"format\": \"shardc-checkpoint\", ", f);
  fclose(f);
  expect_load_fails(scratch_path("d"), SC_ERR_PARSE, "manifest.json", "not a JSON object");
  expect_load_fails(scratch_path("d/weights.safetensors"), SC_ERR_IO, "not a checkpoint",
                    "not a directory");
  expect_load_fails(scratch_path("nothing-here"), SC_ERR_IO, "cannot open", NULL);
  /* a bundle's manifest is not a checkpoint's */
  fresh("d", 4);
  snprintf(path, sizeof path, "%s", scratch_path("d/manifest.json"));
  f = fopen(path, "w");
  fputs("{\"format_version\": 1, \"program\": \"program.json\"}", f);
  fclose(f);
  expect_load_fails(scratch_path("d"), SC_ERR_IO, "not a checkpoint", NULL);
}

/* Rewrites DIR/manifest.json through edit, then (when reseal) its checksum
 * as the saver computes it. */
static void edit_manifest(const char *dir, void (*edit)(json_t *), bool reseal) {
  char path[600];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  assert_non_null(root);
  edit(root);
  if (reseal) {
    json_object_del(root, "manifest_sha256");
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS), hex[65];
    sc_sha256_hex(text, strlen(text), hex);
    free(text);
    json_object_set_new(root, "manifest_sha256", json_string(hex));
  }
  assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
  json_decref(root);
}

static void set_step(json_t *r) { json_object_set_new(r, "step", json_integer(8)); }
static void set_version(json_t *r) { json_object_set_new(r, "format_version", json_integer(3)); }
static void negative_step(json_t *r) { json_object_set_new(r, "step", json_integer(-1)); }
static void bad_rng(json_t *r) {
  json_object_set_new(r, "rng_state", json_string("18446744073709551616"));
}
static void huge_position(json_t *r) { /* 2^63 - 1: would overflow the data index */
  json_object_set_new(r, "data_position", json_integer(INT64_MAX));
}
static void huge_bytes(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "files"), 0), "bytes",
                      json_integer(INT64_MAX));
}
static void bad_loss_scale(json_t *r) { json_object_set_new(r, "loss_scale", json_string("1")); }
static void no_files(json_t *r) { json_object_del(r, "files"); }
static json_t *weight0(json_t *r) {
  return json_array_get(json_object_get(json_object_get(r, "tensors"), "weights"), 0);
}
static void wrong_shape(json_t *r) {
  json_array_set_new(json_object_get(weight0(r), "shape"), 0, json_integer(3));
}
static void wrong_dtype(json_t *r) { json_object_set_new(weight0(r), "dtype", json_string("F16")); }
static void shifted_shard(json_t *r) {
  json_t *sh = json_array_get(json_object_get(weight0(r), "shards"), 0);
  json_array_set_new(json_object_get(sh, "offsets"), 0, json_integer(1));
}
static void other_file(json_t *r) {
  json_t *sh = json_array_get(json_object_get(weight0(r), "shards"), 0);
  json_object_set_new(sh, "file", json_string("../../etc/passwd"));
}
static void listed_twice(json_t *r) {
  json_t *w = json_object_get(json_object_get(r, "tensors"), "weights");
  json_array_set(w, 1, json_array_get(w, 0));
}
static void missing_tensor(json_t *r) {
  json_t *w = json_object_get(json_object_get(r, "tensors"), "weights");
  json_array_remove(w, 0);
}
static void renamed_tensor(json_t *r) { json_object_set_new(weight0(r), "name", json_string("x")); }
static void wrong_sha(json_t *r) {
  json_t *e = json_array_get(json_object_get(r, "files"), 1);
  json_object_set_new(e, "sha256", json_string("00"));
}

static void test_edited_manifest(void **state) {
  (void)state;
  const struct {
    void (*edit)(json_t *);
    bool reseal;
    sc_status want;
    const char *n1, *n2;
  } cases[] = {
      {set_step, false, SC_ERR_INVALID, "manifest.json", "checksum mismatch"},
      {set_version, false, SC_ERR_UNSUPPORTED, "format version 3", NULL},
      {negative_step, true, SC_ERR_PARSE, "'step'", NULL},
      {bad_rng, true, SC_ERR_PARSE, "'rng_state'", NULL},
      {huge_position, true, SC_ERR_PARSE, "'data_position'", "[0, 2^53]"},
      {huge_bytes, true, SC_ERR_PARSE, "'bytes'", "[0, 2^53]"},
      {bad_loss_scale, true, SC_ERR_PARSE, "'loss_scale'", NULL},
      {no_files, true, SC_ERR_PARSE, "'files'", NULL},
      {wrong_shape, true, SC_ERR_INVALID, "tensor 'fc1.weight'", "shape differs"},
      {wrong_dtype, true, SC_ERR_INVALID, "tensor 'fc1.weight'", "dtype or shape"},
      {shifted_shard, true, SC_ERR_UNSUPPORTED, "tensor 'fc1.weight'", "one shard"},
      {other_file, true, SC_ERR_UNSUPPORTED, "tensor 'fc1.weight'", "one shard"},
      {listed_twice, true, SC_ERR_INVALID, "tensor 'fc1.weight'", "listed twice"},
      {missing_tensor, true, SC_ERR_INVALID, "holds 4 tensors but the manifest lists 3", NULL},
      {renamed_tensor, true, SC_ERR_INVALID, "no tensor 'x'", NULL},
      {wrong_sha, true, SC_ERR_PARSE, "optimizer.safetensors", "sha256"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fresh("e", 5);
    edit_manifest(scratch_path("e"), cases[i].edit, cases[i].reseal);
    expect_load_fails(scratch_path("e"), cases[i].want, cases[i].n1, cases[i].n2);
  }
  /* the resealing helper itself yields a loadable checkpoint */
  fresh("e", 5);
  edit_manifest(scratch_path("e"), set_step, true);
  sc_ckpt *c = load_ok(scratch_path("e"));
  assert_int_equal(sc_ckpt_state_of(c)->step, 8);
  sc_ckpt_destroy(c);
}

/* ---- sharded checkpoints (format 2) ---- */

/* w [4, 6] in four boxes over writers 0 and 1 (0 holds two, one of them
 * the second of its key "w@1"), b [3] whole in writer 1, w.exp_avg [4, 6]
 * in two row halves. */
typedef struct sharded {
  float w[24], b[3], m[24];
  float box[4][8];
  sc_ckpt_shard sh[7];
  sc_ckpt_state st;
} sharded;

static void make_sharded(sharded *x) {
  rng_seed(9);
  for (int i = 0; i < 24; i++) {
    x->w[i] = (float)rng_val();
    x->m[i] = (float)rng_val();
  }
  for (int i = 0; i < 3; i++) x->b[i] = (float)rng_val();
  /* boxes of w: rows [0,2) x cols [0,4), [0,2) x [4,6), [2,4) x [0,3), [2,4) x [3,6) */
  const int64_t bo[4][2] = {{0, 0}, {0, 4}, {2, 0}, {2, 3}}, bs[4][2] = {{2, 4}, {2, 2}, {2, 3}, {2, 3}};
  const int32_t writer[4] = {0, 1, 0, 1};
  for (int k = 0; k < 4; k++) {
    int64_t dims[2] = {4, 6}, zero[2] = {0, 0};
    sc_ckpt_copy_box(4, 2, bs[k], x->w, dims, bo[k], x->box[k], bs[k], zero);
    x->sh[k] = (sc_ckpt_shard){.group = SC_CKPT_WEIGHTS, .writer = writer[k], .name = "w",
                               .dtype = SC_DTYPE_F32, .rank = 2, .dims = {4, 6},
                               .offsets = {bo[k][0], bo[k][1]}, .shape = {bs[k][0], bs[k][1]},
                               .data = x->box[k]};
  }
  x->sh[4] = (sc_ckpt_shard){.group = SC_CKPT_WEIGHTS, .writer = 1, .name = "b",
                             .dtype = SC_DTYPE_F32, .rank = 1, .dims = {3}, .shape = {3},
                             .data = x->b};
  for (int k = 0; k < 2; k++)
    x->sh[5 + k] = (sc_ckpt_shard){.group = SC_CKPT_OPTIMIZER, .writer = k, .name = "w.exp_avg",
                                   .dtype = SC_DTYPE_F32, .rank = 2, .dims = {4, 6},
                                   .offsets = {2 * k, 0}, .shape = {2, 6}, .data = x->m + 12 * k};
  x->st = (sc_ckpt_state){.step = 3, .loss_scale = 1, .optimizer = "adamw"};
}

static void test_sharded(void **state) {
  (void)state;
  sharded x;
  make_sharded(&x);
  sc_diag d;
  sc_diag_clear(&d);
  if (sc_ckpt_save_shards(scratch_path("sh"), &x.st, x.sh, 7, &d) != SC_OK) fail_msg("%s", d.msg);
  /* manifest and one file per (group, writer) */
  assert_int_equal(count_entries(scratch_path("sh")), 5);
  char path[700];
  snprintf(path, sizeof path, "%s/weights-rank00001.safetensors", scratch_path("sh"));
  assert_int_equal(access(path, R_OK), 0);
  sc_ckpt *c = load_ok(scratch_path("sh"));
  const sc_ckpt_tensor *w = sc_ckpt_find(c, SC_CKPT_WEIGHTS, "w");
  const sc_ckpt_tensor *b = sc_ckpt_find(c, SC_CKPT_WEIGHTS, "b");
  const sc_ckpt_tensor *m = sc_ckpt_find(c, SC_CKPT_OPTIMIZER, "w.exp_avg");
  assert_non_null(w);
  assert_non_null(b);
  assert_non_null(m);
  assert_int_equal(w->dims[0], 4);
  assert_int_equal(w->dims[1], 6);
  assert_memory_equal(w->data, x.w, sizeof x.w); /* put together whole */
  assert_memory_equal(b->data, x.b, sizeof x.b);
  assert_memory_equal(m->data, x.m, sizeof x.m);
  assert_int_equal(sc_ckpt_state_of(c)->step, 3);
  sc_ckpt_destroy(c);

  /* shards that do not tile their tensor are refused before anything is
   * written: an overlap, a gap */
  sharded y = x;
  y.sh[1].offsets[1] = 3;
  assert_int_equal(sc_ckpt_save_shards(scratch_path("bad"), &y.st, y.sh, 7, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "overlapping"));
  sc_diag_clear(&d);
  assert_int_equal(sc_ckpt_save_shards(scratch_path("bad"), &x.st, x.sh + 1, 6, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "cover 16 of its 24"));
  assert_int_equal(access(scratch_path("bad"), F_OK), -1);

  /* a damaged shard file, named */
  flip_byte(path, -3);
  expect_load_fails(scratch_path("sh"), SC_ERR_INVALID, "weights-rank00001.safetensors",
                    "SHA-256");
}

static void shard_gap(json_t *r) { /* w's first shard moved onto the second */
  json_t *sh = json_array_get(json_object_get(weight0(r), "shards"), 0);
  json_array_set_new(json_object_get(sh, "offsets"), 1, json_integer(2));
}
static void shard_path(json_t *r) {
  json_t *e = json_array_get(json_object_get(r, "files"), 0);
  json_object_set_new(e, "name", json_string("../weights-rank00000.safetensors"));
}
static void shard_dropped(json_t *r) { /* w's last shard unlisted: a gap, and an unnamed key */
  json_array_remove(json_object_get(weight0(r), "shards"), 3);
}

static void test_sharded_manifest(void **state) {
  (void)state;
  const struct {
    void (*edit)(json_t *);
    const char *n1, *n2;
  } cases[] = {
      {shard_gap, "tensor 'w'", "another box"}, /* the file's own record of w@0 */
      {shard_path, "not a shard file name", NULL},
      {shard_dropped, "tensor 'w'", "cover 18 of its 24"},
  };
  sharded x;
  make_sharded(&x);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_path("sm"));
    assert_int_equal(system(cmd), 0);
    sc_diag d;
    sc_diag_clear(&d);
    assert_int_equal(sc_ckpt_save_shards(scratch_path("sm"), &x.st, x.sh, 7, &d), SC_OK);
    edit_manifest(scratch_path("sm"), cases[i].edit, true);
    expect_load_fails(scratch_path("sm"), i == 1 ? SC_ERR_PARSE : SC_ERR_INVALID, cases[i].n1,
                      cases[i].n2);
  }
}

/* ---- interrupted saves ---- */

/* A folder `sub` holding checkpoint sub/ck of state a; b another state. */
static void prepare(const char *sub, fixture *a, fixture *b, uint64_t seed) {
  char ck[600];
  assert_int_equal(mkdir(scratch_path(sub), 0755), 0);
  make_fixture(a, seed);
  make_fixture(b, seed + 1);
  snprintf(ck, sizeof ck, "%s/ck", scratch_path(sub));
  save_ok(ck, a);
}

static void test_failure_keeps_previous(void **state) {
  (void)state;
  fixture a, b;
  prepare("p", &a, &b, 6);
  for (int n = 0; n <= 2; n++) { /* after 0, 1 and 2 of the 3 files */
    char v[16];
    snprintf(v, sizeof v, "%d", n);
    setenv("SHARDC_TEST_CKPT_FAIL_AFTER", v, 1);
    sc_diag d;
    sc_diag_clear(&d);
    assert_int_equal(sc_ckpt_save(scratch_path("p/ck"), &b.st, b.weights, 4, b.opt, 3, &d),
                     SC_ERR_IO);
    assert_non_null(strstr(d.msg, "injected failure"));
    unsetenv("SHARDC_TEST_CKPT_FAIL_AFTER");
    sc_ckpt *c = load_ok(scratch_path("p/ck"));
    expect_same(c, &a);
    sc_ckpt_destroy(c);
    assert_int_equal(count_entries(scratch_path("p")), 1); /* no temporary folder */
  }
  save_ok(scratch_path("p/ck"), &b);
  sc_ckpt *c = load_ok(scratch_path("p/ck"));
  expect_same(c, &b);
  sc_ckpt_destroy(c);
}

static void test_killed_save(void **state) {
  (void)state;
  fixture a, b;
  prepare("k", &a, &b, 8);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the child saves b slowly, announcing the rename on stderr */
    dup2(fds[1], 2);
    close(fds[0]);
    setenv("SHARDC_TEST_COMMIT_DELAY_MS", "20000", 1);
    sc_diag d;
    sc_diag_clear(&d);
    sc_ckpt_save(scratch_path("k/ck"), &b.st, b.weights, 4, b.opt, 3, &d);
    _exit(3);
  }
  close(fds[1]);
  char buf[1024];
  size_t n = 0;
  ssize_t got;
  while (n < sizeof buf - 1 && (got = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) {
    n += (size_t)got;
    buf[n] = 0;
    if (strstr(buf, "committing")) break;
  }
  close(fds[0]);
  buf[n] = 0;
  assert_non_null(strstr(buf, "shardc: test: committing"));
  assert_int_equal(kill(pid, SIGKILL), 0); /* complete, not yet renamed */
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(count_entries(scratch_path("k")),
                   2); /* the checkpoint and the killed save's folder */
  sc_ckpt *c = load_ok(scratch_path("k/ck"));
  expect_same(c, &a);
  sc_ckpt_destroy(c);
  /* the next save completes and removes what the killed one left */
  save_ok(scratch_path("k/ck"), &b);
  assert_int_equal(count_entries(scratch_path("k")), 1);
  c = load_ok(scratch_path("k/ck"));
  expect_same(c, &b);
  sc_ckpt_destroy(c);
}

/* ---- refusals ---- */

static void expect_save_fails(const char *dir, const sc_ckpt_state *st, const sc_ckpt_tensor *w,
                              int32_t n_w, sc_status want, const char *needle) {
  sc_diag d;
  sc_diag_clear(&d);
  sc_status s = sc_ckpt_save(dir, st, w, n_w, NULL, 0, &d);
  if (s != want) fail_msg("status %s, want %s: %s", sc_status_name(s), sc_status_name(want), d.msg);
  if (!strstr(d.msg, needle)) fail_msg("'%s' lacks '%s'", d.msg, needle);
}

static void test_save_refusals(void **state) {
  (void)state;
  assert_int_equal(mkdir(scratch_path("r"), 0755), 0);
  fixture f;
  make_fixture(&f, 10);
  /* a folder of user data, a bundle, a regular file: never replaced */
  assert_int_equal(mkdir(scratch_path("r/user"), 0755), 0);
  FILE *fp = fopen(scratch_path("r/user/notes.txt"), "w");
  fputs("keep me", fp);
  fclose(fp);
  expect_save_fails(scratch_path("r/user"), &f.st, f.weights, 4, SC_ERR_IO,
                    "not a shardc checkpoint");
  assert_int_equal(access(scratch_path("r/user/notes.txt"), F_OK), 0);
  assert_int_equal(mkdir(scratch_path("r/bundle"), 0755), 0);
  fp = fopen(scratch_path("r/bundle/manifest.json"), "w");
  fputs("{\"format_version\": 1}", fp);
  fclose(fp);
  expect_save_fails(scratch_path("r/bundle"), &f.st, f.weights, 4, SC_ERR_IO,
                    "not a shardc checkpoint");
  assert_int_equal(access(scratch_path("r/bundle/manifest.json"), F_OK), 0);
  expect_save_fails(scratch_path("r/user/notes.txt"), &f.st, f.weights, 4, SC_ERR_IO,
                    "is a regular file, not a shardc checkpoint");
  expect_save_fails(scratch_path("r/none/ck"), &f.st, f.weights, 4, SC_ERR_IO, "cannot create");
  /* an empty folder is fine */
  assert_int_equal(mkdir(scratch_path("r/empty"), 0755), 0);
  save_ok(scratch_path("r/empty"), &f);

  /* bad state: nothing is created */
  sc_ckpt_state s = f.st;
  s.step = -1;
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "step = -1");
  s = f.st;
  s.loss_scale = NAN;
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "loss scale");
  s.loss_scale = 0;
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "loss scale");
  s = f.st;
  s.optimizer = "";
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "optimizer name");
  s = f.st;
  s.optimizer_json = "[1, 2]";
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "not a JSON object");
  s.optimizer_json = "{\"lr\": ";
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "not a JSON object");
  s.optimizer_json = "{\"lr\": 1, \"lr\": 2}";
  expect_save_fails(scratch_path("r/x"), &s, f.weights, 4, SC_ERR_INVALID, "duplicate");
  expect_save_fails(scratch_path("r/x"), NULL, f.weights, 4, SC_ERR_USAGE, "bad arguments");
  expect_save_fails(scratch_path("r/x"), &f.st, NULL, 4, SC_ERR_USAGE, "bad arguments");
  /* bad tensors: refused naming the file and tensor, the old checkpoint kept */
  sc_ckpt_tensor w[4];
  memcpy(w, f.weights, sizeof w);
  w[3].name = "fc1.bias";
  expect_save_fails(scratch_path("r/empty"), &f.st, w, 4, SC_ERR_INVALID,
                    "weights.safetensors: tensor 'fc1.bias': the name is used twice");
  w[3] = f.weights[3];
  w[3].dims[0] = -4;
  expect_save_fails(scratch_path("r/empty"), &f.st, w, 4, SC_ERR_INVALID, "tensor 'emb'");
  sc_ckpt *c = load_ok(scratch_path("r/empty"));
  expect_same(c, &f);
  sc_ckpt_destroy(c);
  assert_int_equal(count_entries(scratch_path("r")), 3); /* user, bundle, empty: nothing else */
}

/* ---- symbolic links and foreign files ---- */

static void test_links_and_foreign_files(void **state) {
  (void)state;
  fixture a, b;
  prepare("l", &a, &b, 12);
  char victim[600], link[600], ck[600];
  snprintf(victim, sizeof victim, "%s", scratch_path("l/victim"));
  save_ok(victim, &a);
  /* a symbolic link named as a dead save's temporary folder, pointing at
   * another checkpoint: left alone, never followed */
  snprintf(link, sizeof link, "%s", scratch_path("l/ck.tmp-99999999-0"));
  assert_int_equal(symlink("victim", link), 0);
  snprintf(ck, sizeof ck, "%s", scratch_path("l/ck"));
  save_ok(ck, &b);
  assert_int_equal(count_entries(victim), 3);
  sc_ckpt *c = load_ok(victim);
  expect_same(c, &a);
  sc_ckpt_destroy(c);
  struct stat sb;
  assert_int_equal(lstat(link, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));

  /* a member that is a symbolic link (out of the folder) is not followed */
  char member[700];
  snprintf(member, sizeof member, "%s/weights.safetensors", ck);
  assert_int_equal(unlink(member), 0);
  assert_int_equal(symlink("/etc/passwd", member), 0);
  expect_load_fails(ck, SC_ERR_IO, "weights.safetensors is a symbolic link", NULL);

  /* a checkpoint holding files a save did not write is not replaced */
  save_ok(victim, &b); /* replacing a checkpoint of ours is fine */
  snprintf(member, sizeof member, "%s/notes.txt", victim);
  FILE *f = fopen(member, "w");
  fputs("keep me", f);
  fclose(f);
  snprintf(member, sizeof member, "%s/link", victim);
  assert_int_equal(symlink("/etc", member), 0);
  expect_save_fails(victim, &a.st, a.weights, 4, SC_ERR_IO, "notes.txt");
  expect_save_fails(victim, &a.st, a.weights, 4, SC_ERR_IO, "link (a symbolic link)");
  assert_int_equal(count_entries(victim), 5);
  c = load_ok(victim);
  expect_same(c, &b);
  sc_ckpt_destroy(c);
}

/* Swaps the "bytes" and "sha256" of the two optimizer files' entries
 * (their contents were swapped on disk). */
static void swap_optimizer_entries(json_t *r) {
  json_t *files = json_object_get(r, "files"), *e[2] = {NULL, NULL};
  size_t i;
  json_t *x;
  json_array_foreach(files, i, x) {
    const char *name = json_string_value(json_object_get(x, "name"));
    if (strcmp(name, "optimizer-rank00000.safetensors") == 0) e[0] = x;
    if (strcmp(name, "optimizer-rank00001.safetensors") == 0) e[1] = x;
  }
  assert_non_null(e[0]);
  assert_non_null(e[1]);
  json_t *bytes = json_copy(json_object_get(e[0], "bytes"));
  json_t *sha = json_copy(json_object_get(e[0], "sha256"));
  json_object_set(e[0], "bytes", json_object_get(e[1], "bytes"));
  json_object_set(e[0], "sha256", json_object_get(e[1], "sha256"));
  json_object_set_new(e[1], "bytes", bytes);
  json_object_set_new(e[1], "sha256", sha);
}

/* The two row halves of w.exp_avg listed at each other's offsets. */
static void swap_optimizer_offsets(json_t *r) {
  json_t *m = json_array_get(json_object_get(json_object_get(r, "tensors"), "optimizer"), 0);
  json_t *sh = json_object_get(m, "shards");
  json_t *o0 = json_copy(json_object_get(json_array_get(sh, 0), "offsets"));
  json_object_set(json_array_get(sh, 0), "offsets",
                  json_object_get(json_array_get(sh, 1), "offsets"));
  json_object_set_new(json_array_get(sh, 1), "offsets", o0);
}

static void test_swapped_shards(void **state) {
  (void)state;
  sharded x;
  make_sharded(&x);
  sc_diag d;
  sc_diag_clear(&d);
  char a[700], b[700], t[700];
  /* the two optimizer files swapped on disk, the manifest's hashes with
   * them: every hash holds, the file's own writer does not */
  assert_int_equal(sc_ckpt_save_shards(scratch_path("sw"), &x.st, x.sh, 7, &d), SC_OK);
  snprintf(a, sizeof a, "%s/optimizer-rank00000.safetensors", scratch_path("sw"));
  snprintf(b, sizeof b, "%s/optimizer-rank00001.safetensors", scratch_path("sw"));
  snprintf(t, sizeof t, "%s/swap", scratch_path("sw"));
  assert_int_equal(rename(a, t), 0);
  assert_int_equal(rename(b, a), 0);
  assert_int_equal(rename(t, b), 0);
  edit_manifest(scratch_path("sw"), swap_optimizer_entries, true);
  expect_load_fails(scratch_path("sw"), SC_ERR_INVALID, "optimizer-rank00000.safetensors",
                    "written by rank 1");
  /* the manifest's boxes swapped: each file's record of its box differs */
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_path("sw"));
  assert_int_equal(system(cmd), 0);
  assert_int_equal(sc_ckpt_save_shards(scratch_path("sw"), &x.st, x.sh, 7, &d), SC_OK);
  edit_manifest(scratch_path("sw"), swap_optimizer_offsets, true);
  expect_load_fails(scratch_path("sw"), SC_ERR_INVALID, "tensor 'w.exp_avg'", "another box");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_manifest_layout),
      cmocka_unit_test(test_damaged_files),
      cmocka_unit_test(test_edited_manifest),
      cmocka_unit_test(test_failure_keeps_previous),
      cmocka_unit_test(test_killed_save),
      cmocka_unit_test(test_save_refusals),
      cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_sharded_manifest),
      cmocka_unit_test(test_links_and_foreign_files),
      cmocka_unit_test(test_swapped_shards),
  };
  return cmocka_run_group_tests(tests, scratch_setup, scratch_teardown);
}
