/* test_npy.c — the .npy reader and writer (runtime/npy.c).
 *
 * Round trip of every supported dtype at ranks 0, 1, 3 and with an empty
 * dim (byte-exact); the header text matches what NumPy writes (padding to
 * 64 bytes, "(3,)" for rank 1); big-endian files are byte-swapped; a set of
 * hostile headers each fails with a status and a message naming the
 * problem; random corruptions of a valid file never crash. Interop with
 * NumPy itself is tested by tests/models/test_run_samples.py (NumPy writes
 * the inputs shardc reads and reads the outputs shardc writes). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

#include "runtime/npy.h"

static char tmp_path[256];

static const char *tmp_file(void) {
  snprintf(tmp_path, sizeof tmp_path, "/tmp/sc_test_npy_%d.npy", (int)getpid());
  return tmp_path;
}

static void round_trip(sc_dtype t, int32_t rank, const int64_t *dims) {
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) numel *= dims[d];
  size_t bytes = (size_t)numel * sc_dtype_size(t);
  unsigned char *data = malloc(bytes + 1);
  for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(rng_unit() * 256);
  if (t == SC_DTYPE_BOOL)
    for (size_t i = 0; i < bytes; i++) data[i] &= 1;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_write(tmp_file(), t, rank, dims, data, &d), SC_OK);

  size_t size;
  unsigned char *file = read_whole(tmp_file(), &size);
  /* header: magic, v1.0, length; data starts on a 64-byte boundary */
  assert_memory_equal(file, "\x93NUMPY\x01\x00", 8);
  size_t hlen = file[8] | (size_t)file[9] << 8;
  assert_int_equal((10 + hlen) % 64, 0);
  assert_int_equal(size, 10 + hlen + bytes);
  assert_int_equal(file[10 + hlen - 1], '\n');
  free(file);

  sc_npy a;
  assert_int_equal(sc_npy_read(tmp_file(), &a, &d), SC_OK);
  sc_dtype want = t == SC_DTYPE_BF16 ? SC_DTYPE_U16 : t; /* bf16 is written as <u2 */
  assert_int_equal(a.dtype, want);
  assert_int_equal(a.rank, rank);
  for (int32_t i = 0; i < rank; i++) assert_int_equal(a.dims[i], dims[i]);
  assert_int_equal(a.numel, numel);
  assert_int_equal(a.bytes, (int64_t)bytes);
  if (bytes) assert_memory_equal(a.data, data, bytes);
  sc_npy_free(&a);
  free(data);
  unlink(tmp_file());
}

static void test_round_trip_all_dtypes(void **state) {
  (void)state;
  rng_seed(11);
  static const sc_dtype types[] = {
      SC_DTYPE_F32, SC_DTYPE_F64, SC_DTYPE_F16, SC_DTYPE_BF16, SC_DTYPE_I8,
      SC_DTYPE_I16, SC_DTYPE_I32, SC_DTYPE_I64, SC_DTYPE_U8,   SC_DTYPE_U16,
      SC_DTYPE_U32, SC_DTYPE_U64, SC_DTYPE_BOOL};
  static const int64_t d1[] = {7}, d3[] = {2, 3, 5}, d0[] = {4, 0, 2};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    round_trip(types[i], 0, NULL);
    round_trip(types[i], 1, d1);
    round_trip(types[i], 3, d3);
    round_trip(types[i], 3, d0);
  }
}

static void test_header_text(void **state) {
  (void)state;
  float v[3] = {1.5f, -2.0f, 0.25f};
  int64_t dims[] = {3};
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_write(tmp_file(), SC_DTYPE_F32, 1, dims, v, &d), SC_OK);
  size_t size;
  char *file = read_whole(tmp_file(), &size);
  const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  assert_memory_equal(file + 10, want, strlen(want));
  free(file);
  int64_t d2[] = {2, 3};
  float w[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(sc_npy_write(tmp_file(), SC_DTYPE_F32, 2, d2, w, &d), SC_OK);
  file = read_whole(tmp_file(), &size);
  want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  assert_memory_equal(file + 10, want, strlen(want));
  free(file);
  assert_int_equal(sc_npy_write(tmp_file(), SC_DTYPE_F32, 0, NULL, v, &d), SC_OK);
  file = read_whole(tmp_file(), &size);
  want = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
  assert_memory_equal(file + 10, want, strlen(want));
  free(file);
  unlink(tmp_file());
  /* complex numbers have no sc_dtype path to .npy here */
  assert_int_not_equal(sc_npy_write(tmp_file(), SC_DTYPE_STRING, 1, dims, v, &d), SC_OK);
}

/* A v1.0 file with the given header text (padded) and data. */
static size_t make_file(unsigned char *buf, const char *header, const void *data, size_t n) {
  size_t len = strlen(header);
  size_t hlen = len + 1;
  hlen += (64 - (10 + hlen) % 64) % 64;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  memcpy(buf + 10, header, len);
  memset(buf + 10 + len, ' ', hlen - len - 1);
  buf[10 + hlen - 1] = '\n';
  if (n) memcpy(buf + 10 + hlen, data, n);
  return 10 + hlen + n;
}

static void test_big_endian_and_variants(void **state) {
  (void)state;
  unsigned char buf[512];
  unsigned char be[8] = {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe}; /* 258, -2 as >i4 */
  size_t n = make_file(buf, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", be, 8);
  sc_npy a;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_read_mem(buf, n, "be.npy", &a, &d), SC_OK);
  assert_int_equal(a.dtype, SC_DTYPE_I32);
  assert_int_equal(((int32_t *)a.data)[0], 258);
  assert_int_equal(((int32_t *)a.data)[1], -2);
  sc_npy_free(&a);
  /* double quotes, other key order, no trailing comma, Python 2 long */
  float f[2] = {3.0f, -4.5f};
  n = make_file(buf, "{\"shape\": (1, 2L), \"descr\": \"<f4\", \"fortran_order\": False}", f, 8);
  assert_int_equal(sc_npy_read_mem(buf, n, "v.npy", &a, &d), SC_OK);
  assert_int_equal(a.rank, 2);
  assert_int_equal(a.dims[1], 2);
  assert_true(((float *)a.data)[1] == -4.5f);
  sc_npy_free(&a);
}

typedef struct hostile {
  const char *header;
  size_t data_bytes;
  sc_status status;
  const char *msg; /* substring of the message */
} hostile;

static void test_hostile_headers(void **state) {
  (void)state;
  static const hostile cases[] = {
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, SC_ERR_UNSUPPORTED,
       "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, }", 8, SC_ERR_PARSE, "required"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, SC_ERR_PARSE,
       "unknown or repeated key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
       SC_ERR_PARSE, "repeated"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 8, SC_ERR_PARSE,
       "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8,
       SC_ERR_LIMIT, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576, 1048576), }", 8,
       SC_ERR_LIMIT, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 8,
       SC_ERR_LIMIT, "more than 8 dims"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, SC_ERR_UNSUPPORTED,
       "'<c8'"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, SC_ERR_PARSE,
       "structured"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 8, SC_ERR_PARSE, ""},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8, SC_ERR_PARSE,
       "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 8, SC_ERR_PARSE, "tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 8, SC_ERR_PARSE,
       "expected ','"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } extra", 8, SC_ERR_PARSE,
       "trailing"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, SC_ERR_PARSE, "expected"},
      {"", 0, SC_ERR_PARSE, "expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 8, SC_ERR_PARSE,
       "truncated .npy data"},
  };
  unsigned char buf[1024];
  unsigned char zeros[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = make_file(buf, cases[i].header, zeros, cases[i].data_bytes);
    sc_npy a;
    sc_diag d = {0};
    sc_diag_clear(&d);
    sc_status st = sc_npy_read_mem(buf, n, "bad.npy", &a, &d);
    if (st != cases[i].status || !strstr(d.msg, cases[i].msg))
      fail_msg("case %zu (%s): status %s, message '%s'", i, cases[i].header,
               sc_status_name(st), d.msg);
    assert_null(a.data);
  }
  /* framing problems */
  sc_npy a;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_read_mem("hello world!", 12, "x", &a, &d), SC_ERR_PARSE);
  assert_non_null(strstr(d.msg, "magic"));
  size_t n = make_file(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                       zeros, 8);
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_read_mem(buf, 40, "x", &a, &d), SC_ERR_PARSE); /* cut header */
  assert_non_null(strstr(d.msg, "truncated .npy header"));
  buf[6] = 9;
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_read_mem(buf, n, "x", &a, &d), SC_ERR_UNSUPPORTED);
  assert_non_null(strstr(d.msg, "version 9"));
  sc_diag_clear(&d);
  assert_int_equal(sc_npy_read("/nonexistent/dir/x.npy", &a, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "/nonexistent/dir/x.npy"));
}

/* Random byte corruptions of a valid file: any status, never a crash, and
 * on success the array fits the file. */
static void test_corruptions_never_crash(void **state) {
  (void)state;
  rng_seed(5);
  unsigned char good[512], buf[512];
  float f[12];
  for (int i = 0; i < 12; i++) f[i] = (float)rnd(-1, 1);
  size_t n = make_file(good, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                       f, sizeof f);
  int ok = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(buf, good, n);
    int flips = 1 + (int)(rng_unit() * 4);
    for (int k = 0; k < flips; k++) buf[(size_t)(rng_unit() * 80)] = (unsigned char)(rng_unit() * 256);
    size_t len = rng_unit() < 0.2 ? (size_t)(rng_unit() * (double)n) : n;
    sc_npy a;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_npy_read_mem(buf, len, "fuzz", &a, &d) == SC_OK) {
      assert_true((size_t)a.bytes <= len);
      ok++;
      sc_npy_free(&a);
    } else {
      assert_true(d.msg[0] != 0);
    }
  }
  assert_true(ok > 0); /* flips in the padding leave the file valid */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_all_dtypes),
      cmocka_unit_test(test_header_text),
      cmocka_unit_test(test_big_endian_and_variants),
      cmocka_unit_test(test_hostile_headers),
      cmocka_unit_test(test_corruptions_never_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
