/* test_tensorboard.c — the TensorBoard event writer (runtime/tensorboard.c).
 *
 * CRC-32C against the standard check value ("123456789" -> 0xe3069283) and
 * the test vectors of RFC 3720 (iSCSI), B.4, whole and in pieces; the
 * TFRecord mask on values worked by hand; a written file read back record
 * by record (every length and CRC checked, every Event unpacked with
 * protobuf-c: the file version first, then each step's tags and float32
 * values); the file's name; an unwritable folder refused with a message
 * naming it. TensorBoard's own reader reads these files in
 * tests/models/test_tensorboard.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include "runtime/tensorboard.h"
#include "tensorboard.pb-c.h"

static void test_crc32c_vectors(void **state) {
  (void)state;
  assert_int_equal(sc_crc32c(0, "123456789", 9), 0xe3069283u);
  /* RFC 3720 B.4: 32 bytes of zeros, of ones, ascending, descending */
  uint8_t b[32];
  memset(b, 0, sizeof b);
  assert_int_equal(sc_crc32c(0, b, 32), 0x8a9136aau);
  memset(b, 0xff, sizeof b);
  assert_int_equal(sc_crc32c(0, b, 32), 0x62a8ab43u);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
  assert_int_equal(sc_crc32c(0, b, 32), 0x46dd794eu);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
  assert_int_equal(sc_crc32c(0, b, 32), 0x113fdb5cu);
  /* continued over pieces = over the whole */
  assert_int_equal(sc_crc32c(sc_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
  assert_int_equal(sc_crc32c(0, "", 0), 0u);
}

static void test_mask(void **state) {
  (void)state;
  /* ((crc >> 15) | (crc << 17)) + 0xa282ead8, by hand */
  assert_int_equal(sc_crc32c_mask(0), 0xa282ead8u);
  assert_int_equal(sc_crc32c_mask(1), 0xa282ead8u + 0x20000u);
  assert_int_equal(sc_crc32c_mask(0x8000u), 0xa282ead8u + 1u);
  assert_int_equal(sc_crc32c_mask(0xffffffffu), 0xa282ead7u); /* wraps */
}

static uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The next record of buf at *at: its data (unpacked), every CRC checked. */
static Tensorboard__Event *next_event(const uint8_t *buf, size_t size, size_t *at) {
  assert_true(*at + 12 <= size);
  uint64_t n = get_le(buf + *at, 8);
  assert_int_equal(get_le(buf + *at + 8, 4), sc_crc32c_mask(sc_crc32c(0, buf + *at, 8)));
  assert_true(*at + 12 + n + 4 <= size);
  const uint8_t *data = buf + *at + 12;
  assert_int_equal(get_le(data + n, 4), sc_crc32c_mask(sc_crc32c(0, data, (size_t)n)));
  uint8_t header[SC_TFRECORD_HEADER_BYTES], footer[SC_TFRECORD_FOOTER_BYTES];
  sc_tfrecord_frame(data, n, header, footer);
  assert_memory_equal(header, buf + *at, 12);
  assert_memory_equal(footer, data + n, 4);
  *at += 12 + n + 4;
  Tensorboard__Event *ev = tensorboard__event__unpack(NULL, (size_t)n, data);
  assert_non_null(ev);
  return ev;
}

static void test_write_read_back(void **state) {
  (void)state;
  const char *dir = scratch_path("runs");
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_tensorboard *tb = NULL;
  assert_int_equal(sc_tensorboard_open(dir, &tb, &d), SC_OK);
  const char *path = sc_tensorboard_path(tb);
  const char *base = strrchr(path, '/') + 1;
  assert_memory_equal(path, dir, strlen(dir));
  assert_memory_equal(base, "events.out.tfevents.", 20);
  for (int i = 0; i < 10; i++) assert_true(base[20 + i] >= '0' && base[20 + i] <= '9');
  assert_int_equal(base[30], '.');
  /* the first record is on disk before any step (flushed) */
  size_t size;
  uint8_t *buf = read_whole(path, &size);
  size_t at = 0;
  Tensorboard__Event *ev = next_event(buf, size, &at);
  assert_int_equal(at, size);
  assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
  assert_string_equal(ev->file_version, "brain.Event:2");
  assert_true(ev->wall_time > 1.6e9);
  tensorboard__event__free_unpacked(ev, NULL);
  free(buf);

  rng_seed(11);
  double v[3][2];
  for (int s = 0; s < 3; s++) {
    v[s][0] = rnd(-1e3, 1e3);
    v[s][1] = rnd(1e-6, 1.0);
    sc_tensorboard_scalar sc[2] = {{"train/loss", v[s][0]}, {"a/b c", v[s][1]}};
    assert_int_equal(sc_tensorboard_write_scalars(tb, 7 + s, sc, 2, &d), SC_OK);
  }
  buf = read_whole(path, &size); /* read while the writer is open */
  at = 0;
  tensorboard__event__free_unpacked(next_event(buf, size, &at), NULL);
  for (int s = 0; s < 3; s++) {
    ev = next_event(buf, size, &at);
    assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
    assert_int_equal(ev->step, 7 + s);
    assert_int_equal(ev->summary->n_value, 2);
    assert_string_equal(ev->summary->value[0]->tag, "train/loss");
    assert_string_equal(ev->summary->value[1]->tag, "a/b c");
    for (int k = 0; k < 2; k++) {
      assert_int_equal(ev->summary->value[k]->value_case,
                       TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
      float want = (float)v[s][k];
      assert_memory_equal(&ev->summary->value[k]->simple_value, &want, sizeof want);
    }
    tensorboard__event__free_unpacked(ev, NULL);
  }
  assert_int_equal(at, size);
  free(buf);
  assert_int_equal(sc_tensorboard_close(tb, &d), SC_OK);
  assert_int_equal(count_entries(dir), 1);
}

static void test_unwritable_folder(void **state) {
  (void)state;
  const char *file = scratch_path("plain");
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/runs", file); /* under a file: cannot exist */
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_tensorboard *tb = (sc_tensorboard *)&d;
  assert_int_equal(sc_tensorboard_open(dir, &tb, &d), SC_ERR_IO);
  assert_null(tb);
  assert_non_null(strstr(d.msg, dir));
  assert_non_null(strstr(d.msg, "cannot create the TensorBoard log folder"));
  /* a file where the folder should be */
  sc_diag_clear(&d);
  assert_int_equal(sc_tensorboard_open(file, &tb, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, file));
  assert_null(tb);
  assert_int_equal(sc_tensorboard_close(NULL, &d), SC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_vectors),
      cmocka_unit_test(test_mask),
      cmocka_unit_test_setup_teardown(test_write_read_back, scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(test_unwritable_folder, scratch_setup, scratch_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
