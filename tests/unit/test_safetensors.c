/* test_safetensors.c — the safetensors reader and writer
 * (runtime/safetensors.c).
 *
 * Round trip of every dtype safetensors names at ranks 0 to 4, empty
 * tensors and metadata, byte for byte; random fp32 and bf16 bits (NaN
 * payloads included) come back bit-exact; the writer's bytes match a file
 * written by hand from the format's description (header padded with
 * spaces to 8 bytes, data ordered largest element first and aligned);
 * hostile files (truncated, header length huge or past the end, not JSON,
 * duplicate keys, overlaps, holes, trailing bytes, shape overflow, unknown
 * dtype, negative dims, deep nesting, a FIFO, /dev/zero) are each refused
 * with a message naming the file and the tensor; random corruptions never
 * crash; the writer refuses names it cannot write. When the project's
 * .venv has the Python `safetensors` package, files written here load
 * there to the same bytes and files written there load here (skipped
 * otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include "codegen/program_json.h"
#include "runtime/safetensors.h"

static void *random_bytes(size_t n) {
  unsigned char *p = malloc(n + 1);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(1 + rng_unit() * 255); /* never 0 */
  return p;
}

static const sc_dtype k_all[] = {SC_DTYPE_BOOL, SC_DTYPE_U8,  SC_DTYPE_I8,   SC_DTYPE_I16,
                                 SC_DTYPE_U16,  SC_DTYPE_F16, SC_DTYPE_BF16, SC_DTYPE_I32,
                                 SC_DTYPE_U32,  SC_DTYPE_F32, SC_DTYPE_F64,  SC_DTYPE_I64,
                                 SC_DTYPE_U64,  SC_DTYPE_C64};
enum { N_ALL = sizeof k_all / sizeof *k_all };

static void test_dtype_names(void **state) {
  (void)state;
  for (int i = 0; i < N_ALL; i++) {
    const char *s = sc_safetensors_dtype_name(k_all[i]);
    assert_non_null(s);
    assert_int_equal(sc_safetensors_dtype_parse(s), k_all[i]);
  }
  assert_string_equal(sc_safetensors_dtype_name(SC_DTYPE_BF16), "BF16");
  assert_string_equal(sc_safetensors_dtype_name(SC_DTYPE_BOOL), "BOOL");
  assert_null(sc_safetensors_dtype_name(SC_DTYPE_STRING));
  assert_null(sc_safetensors_dtype_name(SC_DTYPE_UNDEF));
  assert_null(sc_safetensors_dtype_name(SC_DTYPE_C128));
  assert_int_equal(sc_safetensors_dtype_parse("F8_E4M3"), SC_DTYPE_COUNT);
  assert_int_equal(sc_safetensors_dtype_parse("f32"), SC_DTYPE_COUNT);
}

static void load_ok(const char *path, sc_safetensors **s) {
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_safetensors_read(path, -1, s, &d);
  if (st != SC_OK) fail_msg("%s", d.msg);
}

static void test_round_trip(void **state) {
  (void)state;
  rng_seed(1);
  /* every dtype at rank (i % 5), plus an empty tensor per dtype */
  sc_tensor_view t[2 * N_ALL];
  char names[2 * N_ALL][32];
  for (int i = 0; i < N_ALL; i++) {
    sc_tensor_view *a = &t[2 * i], *e = &t[2 * i + 1];
    snprintf(names[2 * i], 32, "t.%s", sc_dtype_name(k_all[i]));
    snprintf(names[2 * i + 1], 32, "empty.%s", sc_dtype_name(k_all[i]));
    *a = (sc_tensor_view){.name = names[2 * i], .dtype = k_all[i], .rank = i % 5};
    for (int k = 0; k < a->rank; k++) a->dims[k] = 1 + (k + i) % 3;
    *e = (sc_tensor_view){.name = names[2 * i + 1], .dtype = k_all[i], .rank = 2, .dims = {3, 0}};
    int64_t numel, bytes;
    assert_true(sc_tensor_view_size(a, &numel, &bytes));
    a->data = random_bytes((size_t)bytes);
    if (k_all[i] == SC_DTYPE_BOOL)
      for (int64_t j = 0; j < bytes; j++) ((unsigned char *)a->data)[j] &= 1;
  }
  const sc_safetensors_meta meta[] = {{"format", "pt"}, {"note", "ünïcode ✓"}};
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("all.safetensors"), t, 2 * N_ALL, meta, 2, &d),
                   SC_OK);

  sc_safetensors *s;
  load_ok(scratch_path("all.safetensors"), &s);
  assert_int_equal(s->n_tensors, 2 * N_ALL);
  assert_int_equal(s->n_meta, 2);
  assert_string_equal(sc_safetensors_meta_get(s, "note"), "ünïcode ✓");
  assert_string_equal(sc_safetensors_meta_get(s, "format"), "pt");
  assert_null(sc_safetensors_meta_get(s, "missing"));
  for (int i = 0; i < 2 * N_ALL; i++) {
    const sc_tensor_view *r = sc_safetensors_find(s, t[i].name);
    assert_non_null(r);
    assert_int_equal(r->dtype, t[i].dtype);
    assert_int_equal(r->rank, t[i].rank);
    for (int k = 0; k < r->rank; k++) assert_int_equal(r->dims[k], t[i].dims[k]);
    int64_t numel, bytes;
    assert_true(sc_tensor_view_size(r, &numel, &bytes));
    if (bytes) assert_memory_equal(r->data, t[i].data, (size_t)bytes);
    /* the writer aligns each tensor to its element size */
    assert_int_equal((uintptr_t)r->data % sc_dtype_size(r->dtype), 0);
  }
  /* data order: element size never grows along the file */
  for (int i = 1; i < s->n_tensors; i++)
    assert_true(sc_dtype_size(s->tensors[i].dtype) <= sc_dtype_size(s->tensors[i - 1].dtype));
  assert_null(sc_safetensors_find(s, "nope"));
  sc_safetensors_destroy(s);
  for (int i = 0; i < 2 * N_ALL; i++) free((void *)t[i].data);
}

static void test_bit_exact_random(void **state) {
  (void)state;
  rng_seed(7);
  enum { N = 4096 };
  uint32_t *f = malloc(N * sizeof *f);
  uint16_t *b = malloc(N * sizeof *b);
  assert_non_null(f);
  assert_non_null(b);
  for (int i = 0; i < N; i++) {
    /* random bit patterns, NaN payloads and subnormals included; never 0 */
    f[i] = (uint32_t)(rng_unit() * 4294967295.0) | 1u;
    b[i] = (uint16_t)((uint32_t)(rng_unit() * 65535.0) | 1u);
  }
  sc_tensor_view t[] = {
      {.name = "w", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {64, 64}, .data = f},
      {.name = "h", .dtype = SC_DTYPE_BF16, .rank = 1, .dims = {N}, .data = b}};
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("r.safetensors"), t, 2, NULL, 0, &d), SC_OK);
  sc_safetensors *s;
  load_ok(scratch_path("r.safetensors"), &s);
  assert_memory_equal(sc_safetensors_find(s, "w")->data, f, N * sizeof *f);
  assert_memory_equal(sc_safetensors_find(s, "h")->data, b, N * sizeof *b);
  assert_int_equal(s->n_meta, 0);
  sc_safetensors_destroy(s);
  free(f);
  free(b);
}

/* The exact bytes the format prescribes for a small file. */
static void test_bytes_by_hand(void **state) {
  (void)state;
  const uint8_t u8[3] = {1, 2, 3};
  const float f32[2] = {1.5f, -2.0f};
  sc_tensor_view t[] = {
      {.name = "b", .dtype = SC_DTYPE_U8, .rank = 1, .dims = {3}, .data = (void *)u8},
      {.name = "a", .dtype = SC_DTYPE_F32, .rank = 2, .dims = {1, 2}, .data = (void *)f32}};
  const sc_safetensors_meta meta[] = {{"k", "v"}};
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("h.safetensors"), t, 2, meta, 1, &d), SC_OK);
  const char header[] =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
  size_t len = strlen(header), padded = (len + 7) / 8 * 8, n = 0;
  unsigned char want[512];
  memset(want, 0, sizeof want);
  want[0] = (unsigned char)padded; /* < 256 */
  memcpy(want + 8, header, len);
  memset(want + 8 + len, ' ', padded - len);
  memcpy(want + 8 + padded, f32, 8); /* little-endian host */
  memcpy(want + 8 + padded + 8, u8, 3);
  unsigned char *got = read_whole(scratch_path("h.safetensors"), &n);
  assert_int_equal(n, 8 + padded + 11);
  assert_memory_equal(got, want, n);
  free(got);
}

/* ---- hostile files ---- */

/* Parses `size` bytes (header text after an explicit length) and expects
 * status `want` with every needle in the message. */
static void expect_bad(const void *bytes, size_t size, sc_status want, const char *needle1,
                       const char *needle2) {
  void *buf = sc_malloc(size + 1);
  assert_non_null(buf);
  memcpy(buf, bytes, size);
  sc_safetensors *s = (sc_safetensors *)1;
  sc_diag d;
  sc_diag_clear(&d);
  sc_status st = sc_safetensors_parse(buf, size, "bad.safetensors", &s, &d);
  if (st != want)
    fail_msg("status %s, want %s: %s", sc_status_name(st), sc_status_name(want), d.msg);
  assert_null(s);
  if (!strstr(d.msg, "bad.safetensors")) fail_msg("'%s' does not name the file", d.msg);
  if (needle1 && !strstr(d.msg, needle1)) fail_msg("'%s' lacks '%s'", d.msg, needle1);
  if (needle2 && !strstr(d.msg, needle2)) fail_msg("'%s' lacks '%s'", d.msg, needle2);
}

/* A file: 8-byte length of header, header, then `data_bytes` bytes 0x5a. */
static void expect_bad_header(const char *header, size_t data_bytes, sc_status want,
                              const char *needle1, const char *needle2) {
  size_t len = strlen(header), size = 8 + len + data_bytes;
  unsigned char *b = malloc(size + 1);
  assert_non_null(b);
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)len >> (8 * k));
  memcpy(b + 8, header, len);
  memset(b + 8 + len, 0x5a, data_bytes);
  expect_bad(b, size, want, needle1, needle2);
  free(b);
}

static void test_hostile(void **state) {
  (void)state;
  expect_bad("\x10\0\0\0", 4, SC_ERR_PARSE, "truncated", NULL);
  expect_bad("", 0, SC_ERR_PARSE, "truncated", NULL);
  /* header length huge / over the limit / past the end */
  expect_bad("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10, SC_ERR_LIMIT, "over the 100000000", NULL);
  expect_bad("\x01\xe1\xf5\x05\0\0\0\0{}", 10, SC_ERR_LIMIT, "100000001", NULL);
  expect_bad("\xc8\0\0\0\0\0\0\0{}", 10, SC_ERR_PARSE, "runs past the end", NULL);
  /* deep nesting: bounded by the parser, no stack overflow */
  char deep[12000] = "{\"__metadata__\":";
  size_t n = strlen(deep);
  for (int i = 0; i < 5000; i++) deep[n++] = '[';
  deep[n] = 0;
  expect_bad_header(deep, 0, SC_ERR_PARSE, "not valid JSON", NULL);

/* One header entry: name, dtype (JSON), shape, data_offsets. */
#define E(name, dtype, shape, offsets) \
  "\"" name "\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offsets "}"
  static const struct {
    const char *header;
    size_t data_bytes;
    sc_status want;
    const char *n1, *n2;
  } cases[] = {
      /* not JSON, not an object, duplicate keys */
      {"hello", 0, SC_ERR_PARSE, "does not start with '{'", NULL},
      {"[1, 2]", 0, SC_ERR_PARSE, "does not start", NULL},
      {"{\"a\": ", 0, SC_ERR_PARSE, "not valid JSON", NULL},
      {"{" E("a", "\"U8\"", "[1]", "[0,1]") "," E("a", "\"U8\"", "[1]", "[1,2]") "}", 2,
       SC_ERR_PARSE, "duplicate", NULL},
      {"{\"a\": 3}", 0, SC_ERR_PARSE, "tensor 'a'", "not a JSON object"},
      /* overlap, hole, trailing bytes */
      {"{" E("x", "\"U8\"", "[4]", "[0,4]") "," E("y", "\"U8\"", "[4]", "[2,6]") "}", 6,
       SC_ERR_INVALID, "tensor 'y'", "overlap tensor 'x'"},
      {"{" E("x", "\"U8\"", "[2]", "[0,2]") "," E("y", "\"U8\"", "[2]", "[4,6]") "}", 6,
       SC_ERR_INVALID, "tensor 'y'", "hole"},
      {"{" E("x", "\"U8\"", "[2]", "[2,4]") "}", 4, SC_ERR_INVALID, "tensor 'x'", "hole"},
      {"{" E("x", "\"U8\"", "[2]", "[0,2]") "}", 5, SC_ERR_INVALID, "belong to no tensor", NULL},
      /* shapes and dtypes */
      {"{" E("big", "\"F32\"", "[4611686018427387904,4]", "[0,0]") "}", 0, SC_ERR_LIMIT,
       "tensor 'big'", "overflows"},
      {"{" E("big", "\"F64\"", "[2305843009213693952]", "[0,0]") "}", 0, SC_ERR_LIMIT,
       "tensor 'big'", "overflows"},
      {"{" E("q", "\"F33\"", "[1]", "[0,4]") "}", 4, SC_ERR_PARSE, "tensor 'q'",
       "unknown dtype 'F33'"},
      {"{" E("q", "\"F8_E4M3\"", "[1]", "[0,1]") "}", 1, SC_ERR_UNSUPPORTED, "tensor 'q'",
       "F8_E4M3"},
      {"{" E("q", "7", "[1]", "[0,1]") "}", 1, SC_ERR_PARSE, "tensor 'q'", "'dtype'"},
      {"{" E("n", "\"U8\"", "[-1]", "[0,0]") "}", 0, SC_ERR_PARSE, "tensor 'n'", "shape[0]"},
      {"{" E("n", "\"U8\"", "[1.5]", "[0,1]") "}", 1, SC_ERR_PARSE, "tensor 'n'", "shape[0]"},
      {"{" E("n", "\"U8\"", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 1, SC_ERR_LIMIT, "tensor 'n'",
       "rank 9"},
      /* offsets */
      {"{" E("o", "\"U8\"", "[2]", "[0,2]") "}", 1, SC_ERR_PARSE, "tensor 'o'", "truncated"},
      {"{" E("o", "\"U8\"", "[2]", "[2,0]") "}", 2, SC_ERR_PARSE, "tensor 'o'", "begin <= end"},
      {"{" E("o", "\"U8\"", "[2]", "[-2,0]") "}", 2, SC_ERR_PARSE, "tensor 'o'", "begin <= end"},
      {"{" E("o", "\"U8\"", "[2]", "[0]") "}", 2, SC_ERR_PARSE, "tensor 'o'", "[begin, end]"},
      {"{" E("o", "\"F32\"", "[2]", "[0,4]") "}", 4, SC_ERR_INVALID, "tensor 'o'", "span 4"},
      {"{" E("o", "\"U8\"", "[1]", "[0,99999999999999999999]") "}", 1, SC_ERR_PARSE,
       "not valid JSON", NULL},
      /* metadata */
      {"{\"__metadata__\":{\"k\":1}}", 0, SC_ERR_PARSE, "__metadata__ 'k'", NULL},
      {"{\"__metadata__\":[]}", 0, SC_ERR_PARSE, "__metadata__", NULL},
  };
#undef E
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    expect_bad_header(cases[i].header, cases[i].data_bytes, cases[i].want, cases[i].n1,
                      cases[i].n2);

  /* an empty header object is a valid file with no tensors */
  void *ok = sc_malloc(16);
  memcpy(ok, "\x08\0\0\0\0\0\0\0{}      ", 16);
  sc_safetensors *s;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_parse(ok, 16, "ok", &s, &d), SC_OK);
  assert_int_equal(s->n_tensors, 0);
  sc_safetensors_destroy(s);
}

static void test_hostile_files(void **state) {
  (void)state;
  sc_safetensors *s;
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(mkfifo(scratch_path("fifo.safetensors"), 0600), 0); /* no writer: would block */
  assert_int_equal(sc_safetensors_read(scratch_path("fifo.safetensors"), -1, &s, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "fifo.safetensors"));
  assert_non_null(strstr(d.msg, "FIFO"));
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_read("/dev/zero", -1, &s, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "/dev/zero"));
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_read(scratch_path("missing.safetensors"), -1, &s, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "missing.safetensors"));

  /* a valid file cut short at every length refuses cleanly */
  const float v[4] = {1, 2, 3, 4};
  sc_tensor_view t = {.name = "v", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {4}, .data = (void *)v};
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("v.safetensors"), &t, 1, NULL, 0, &d), SC_OK);
  size_t n;
  unsigned char *whole = read_whole(scratch_path("v.safetensors"), &n);
  for (size_t cut = 0; cut < n; cut++) {
    FILE *f = fopen(scratch_path("cut.safetensors"), "wb");
    fwrite(whole, 1, cut, f);
    fclose(f);
    sc_diag_clear(&d);
    sc_status st = sc_safetensors_read(scratch_path("cut.safetensors"), -1, &s, &d);
    assert_int_not_equal(st, SC_OK);
    assert_non_null(strstr(d.msg, "cut.safetensors"));
    assert_non_null(strstr(d.msg, "truncated"));
  }
  /* a size limit */
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_read(scratch_path("v.safetensors"), 10, &s, &d), SC_ERR_LIMIT);
  free(whole);
}

static void test_corruptions_never_crash(void **state) {
  (void)state;
  rng_seed(3);
  const double v[3] = {1, 2, 3};
  const int8_t w[5] = {1, 2, 3, 4, 5};
  sc_tensor_view t[] = {{.name = "v", .dtype = SC_DTYPE_F64, .rank = 1, .dims = {3}, .data = (void *)v},
                        {.name = "w", .dtype = SC_DTYPE_I8, .rank = 1, .dims = {5}, .data = (void *)w}};
  const sc_safetensors_meta meta[] = {{"m", "x"}};
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("c.safetensors"), t, 2, meta, 1, &d), SC_OK);
  size_t n;
  unsigned char *whole = read_whole(scratch_path("c.safetensors"), &n);
  int refused = 0;
  for (int iter = 0; iter < 3000; iter++) {
    unsigned char *b = sc_malloc(n);
    memcpy(b, whole, n);
    int flips = 1 + (int)(rng_unit() * 3);
    for (int k = 0; k < flips; k++) {
      size_t at_byte = (size_t)(rng_unit() * (double)(8 + 120 < n ? 8 + 120 : n));
      b[at_byte] = (unsigned char)(rng_unit() * 256);
    }
    sc_safetensors *s = NULL;
    sc_diag_clear(&d);
    if (sc_safetensors_parse(b, n, "c", &s, &d) == SC_OK) {
      /* whatever parsed is consistent */
      for (int32_t i = 0; i < s->n_tensors; i++) {
        int64_t numel, bytes;
        assert_true(sc_tensor_view_size(&s->tensors[i], &numel, &bytes));
        assert_true((const unsigned char *)s->tensors[i].data + bytes <=
                    (const unsigned char *)b + n);
      }
      sc_safetensors_destroy(s);
    } else {
      refused++;
    }
  }
  assert_true(refused > 1000);
  free(whole);
}

static void expect_write_refused(const sc_tensor_view *t, int32_t n, const sc_safetensors_meta *m,
                                 int32_t n_meta, const char *needle) {
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("w.safetensors"), t, n, m, n_meta, &d),
                   SC_ERR_INVALID);
  if (!strstr(d.msg, needle)) fail_msg("'%s' lacks '%s'", d.msg, needle);
  assert_int_equal(access(scratch_path("w.safetensors"), F_OK), -1); /* nothing left behind */
}

static void test_writer_refusals(void **state) {
  (void)state;
  const float x[2] = {1, 2};
  sc_tensor_view t[] = {{.name = "a", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {2}, .data = (void *)x},
                        {.name = "a", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {2}, .data = (void *)x}};
  expect_write_refused(t, 2, NULL, 0, "tensor 'a': the name is used twice");
  t[1].name = "";
  expect_write_refused(t, 2, NULL, 0, "not a usable tensor name");
  t[1].name = "__metadata__";
  expect_write_refused(t, 2, NULL, 0, "not a usable tensor name");
  t[1] = (sc_tensor_view){.name = "s", .dtype = SC_DTYPE_STRING, .rank = 1, .dims = {2}, .data = (void *)x};
  expect_write_refused(t, 2, NULL, 0, "tensor 's': dtype string");
  t[1] = (sc_tensor_view){.name = "n", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {-2}, .data = (void *)x};
  expect_write_refused(t, 2, NULL, 0, "tensor 'n': negative dim");
  t[1] = (sc_tensor_view){.name = "z", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {2}};
  expect_write_refused(t, 2, NULL, 0, "tensor 'z': no data");
  t[1] = (sc_tensor_view){
      .name = "\xff\xfe", .dtype = SC_DTYPE_F32, .rank = 1, .dims = {2}, .data = (void *)x};
  expect_write_refused(t, 2, NULL, 0, "UTF-8");
  const sc_safetensors_meta m[] = {{"k", "1"}, {"k", "2"}};
  expect_write_refused(t, 1, m, 2, "metadata key 'k'");
}

/* ---- the Python reference implementation ---- */

static const char *python(void) {
  static char py[512];
  snprintf(py, sizeof py, "%s/.venv/bin/python", SC_SOURCE_DIR);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import safetensors.numpy' 2>/dev/null", py);
  return access(py, X_OK) == 0 && system(cmd) == 0 ? py : NULL;
}

/* Python reads IN.safetensors and writes OUT.safetensors with the same
 * tensors and metadata, re-created from numpy arrays (so the bytes are the
 * reference writer's), and a line "name dtype sha256" per tensor. */
static const char k_script[] =
    "import sys, hashlib, json\n"
    "import numpy as np\n"
    "from safetensors import safe_open\n"
    "from safetensors.numpy import load_file, save_file\n"
    "src, dst, report = sys.argv[1:4]\n"
    "t = load_file(src)\n"
    "with safe_open(src, 'np') as f: meta = f.metadata()\n"
    "with open(report, 'w') as r:\n"
    "    for k in sorted(t):\n"
    "        a = np.ascontiguousarray(t[k])\n"
    "        r.write('%s %s %s %s\\n' % (k, a.dtype.str, 'x'.join(map(str, a.shape)) or '-',\n"
    "                hashlib.sha256(a.tobytes()).hexdigest()))\n"
    "save_file({k: np.array(t[k] * (1 if t[k].dtype == bool else 2), dtype=t[k].dtype)\n"
    "           for k in t}, dst, metadata=meta)\n";

static void test_python_interop(void **state) {
  (void)state;
  const char *py = python();
  if (!py) SC_SKIP("no Python with the safetensors package in %s/.venv", SC_SOURCE_DIR);
  rng_seed(11);
  /* the dtypes NumPy holds (no BF16 without ml_dtypes) */
  const sc_dtype dts[] = {SC_DTYPE_BOOL, SC_DTYPE_U8,  SC_DTYPE_I8,  SC_DTYPE_I16,
                          SC_DTYPE_U16,  SC_DTYPE_F16, SC_DTYPE_I32, SC_DTYPE_U32,
                          SC_DTYPE_F32,  SC_DTYPE_F64, SC_DTYPE_I64, SC_DTYPE_U64};
  enum { ND = sizeof dts / sizeof *dts };
  sc_tensor_view t[ND];
  char names[ND][16];
  for (int i = 0; i < ND; i++) {
    snprintf(names[i], sizeof names[i], "p%02d", i);
    t[i] = (sc_tensor_view){.name = names[i], .dtype = dts[i], .rank = i % 4};
    for (int k = 0; k < t[i].rank; k++) t[i].dims[k] = 2 + k;
    int64_t numel, bytes;
    assert_true(sc_tensor_view_size(&t[i], &numel, &bytes));
    void *p = malloc((size_t)bytes + 1);
    for (int64_t j = 0; j < numel; j++) /* small integers, exact in every type and when doubled */
      sc_store_i64(dts[i], p, j, dts[i] == SC_DTYPE_BOOL ? 1 : 1 + (int64_t)(rng_unit() * 50));
    t[i].data = p;
  }
  const sc_safetensors_meta meta[] = {{"who", "shardc"}};
  sc_diag d;
  sc_diag_clear(&d);
  assert_int_equal(sc_safetensors_write(scratch_path("c2py.safetensors"), t, ND, meta, 1, &d),
                   SC_OK);
  FILE *f = fopen(scratch_path("interop.py"), "w");
  fputs(k_script, f);
  fclose(f);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' '%s'", py, scratch_path("interop.py"),
           scratch_path("c2py.safetensors"), scratch_path("py2c.safetensors"),
           scratch_path("report.txt"));
  assert_int_equal(system(cmd), 0);

  /* Python read what shardc wrote: same names, types, bytes */
  f = fopen(scratch_path("report.txt"), "r");
  assert_non_null(f);
  char name[64], descr[16], shape[64], sha[65];
  int lines = 0;
  while (fscanf(f, "%63s %15s %63s %64s", name, descr, shape, sha) == 4) {
    int i = atoi(name + 1);
    assert_true(i >= 0 && i < ND);
    int64_t numel, bytes;
    sc_tensor_view_size(&t[i], &numel, &bytes);
    char want[65];
    sc_sha256_hex(t[i].data, (size_t)bytes, want);
    assert_string_equal(sha, want);
    lines++;
  }
  fclose(f);
  assert_int_equal(lines, ND);

  /* shardc reads what Python wrote: every value doubled (bool unchanged) */
  sc_safetensors *s;
  load_ok(scratch_path("py2c.safetensors"), &s);
  assert_int_equal(s->n_tensors, ND);
  assert_string_equal(sc_safetensors_meta_get(s, "who"), "shardc");
  for (int i = 0; i < ND; i++) {
    const sc_tensor_view *r = sc_safetensors_find(s, names[i]);
    assert_non_null(r);
    assert_int_equal(r->dtype, dts[i]);
    assert_int_equal(r->rank, t[i].rank);
    int64_t numel, bytes;
    sc_tensor_view_size(r, &numel, &bytes);
    for (int64_t j = 0; j < numel; j++) {
      int64_t a = 0, b = 0;
      memcpy(&a, (const char *)r->data + j * sc_dtype_size(dts[i]), sc_dtype_size(dts[i]));
      int64_t want = sc_load_i64(dts[i], t[i].data, j) * (dts[i] == SC_DTYPE_BOOL ? 1 : 2);
      b = sc_load_i64(dts[i], &a, 0);
      assert_int_equal(b, want);
    }
  }
  sc_safetensors_destroy(s);
  for (int i = 0; i < ND; i++) free((void *)t[i].data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_names),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_bit_exact_random),
      cmocka_unit_test(test_bytes_by_hand),
      cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_hostile_files),
      cmocka_unit_test(test_corruptions_never_crash),
      cmocka_unit_test(test_writer_refusals),
      cmocka_unit_test(test_python_interop),
  };
  return SC_RUN_TESTS(tests, scratch_setup, scratch_teardown);
}
