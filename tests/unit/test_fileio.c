/* test_fileio.c — ir/fileio.h: the checked reader refuses what is not a
 * regular file (without blocking on a FIFO) and what is over its limit;
 * whole-file and whole-directory commits leave the old artifact until the
 * rename and nothing on abort; a directory that is not ours is refused;
 * sc_tmp_remove_all (what the signal handler runs) removes every pending
 * temporary path, directories with their contents. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include "ir/fileio.h"

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_read_checks(void **state) {
  (void)state;
  char *data = NULL;
  size_t n = 0;
  sc_diag d = {0};
  put(scratch_path("a.txt"), "hello");
  assert_int_equal(sc_file_read_all(scratch_path("a.txt"), "a.txt", 100, &data, &n, &d), SC_OK);
  assert_int_equal(n, 5);
  assert_string_equal(data, "hello");
  sc_free(data);

  memset(&d, 0, sizeof d);
  assert_int_equal(sc_file_read_all(scratch_path("a.txt"), "a.txt", 4, &data, &n, &d),
                   SC_ERR_LIMIT);
  assert_non_null(strstr(d.msg, "a.txt: 5 bytes, more than the 4 accepted"));

  /* no writer: a blocking open would hang */
  assert_int_equal(mkfifo(scratch_path("fifo"), 0600), 0);
  memset(&d, 0, sizeof d);
  assert_int_equal(sc_file_read_all(scratch_path("fifo"), "fifo", -1, &data, &n, &d), SC_ERR_IO);
  assert_string_equal(d.msg, "fifo: not a regular file (a FIFO)");

  memset(&d, 0, sizeof d);
  assert_int_equal(sc_file_read_all("/dev/zero", NULL, -1, &data, &n, &d), SC_ERR_IO);
  assert_string_equal(d.msg, "not a regular file (a character device)");

  memset(&d, 0, sizeof d);
  assert_int_equal(sc_file_read_all(scratch_dir(), "dir", -1, &data, &n, &d), SC_ERR_IO);
  assert_string_equal(d.msg, "dir: not a regular file (a directory)");
  assert_null(data);
}

static void test_file_commit(void **state) {
  (void)state;
  sc_diag d = {0};
  put(scratch_path("y.npy"), "old");
  sc_file_commit c;
  assert_int_equal(sc_file_commit_begin(&c, scratch_path("y.npy"), &d), SC_OK);
  fputs("new contents", c.f);
  char *data = NULL;
  size_t n = 0;
  assert_int_equal(sc_file_read_all(scratch_path("y.npy"), NULL, -1, &data, &n, &d), SC_OK);
  assert_string_equal(data, "old"); /* untouched until the commit */
  sc_free(data);
  assert_int_equal(count_entries(scratch_dir()), 2);
  assert_int_equal(sc_file_commit_end(&c, &d), SC_OK);
  assert_int_equal(sc_file_read_all(scratch_path("y.npy"), NULL, -1, &data, &n, &d), SC_OK);
  assert_string_equal(data, "new contents");
  sc_free(data);
  assert_int_equal(count_entries(scratch_dir()), 1);

  assert_int_equal(sc_file_commit_begin(&c, scratch_path("y.npy"), &d), SC_OK);
  fputs("half", c.f);
  sc_file_commit_abort(&c);
  assert_int_equal(count_entries(scratch_dir()), 1);
}

static const char *const MARKERS[] = {"manifest.json", "partition.json", NULL};

static void test_dir_commit(void **state) {
  (void)state;
  sc_diag d = {0};
  const char *b = scratch_path("B");
  sc_dir_commit c;
  assert_int_equal(sc_dir_commit_begin(&c, b, MARKERS, &d), SC_OK); /* B missing */
  put(scratch_path("B.tmp-x"), ""); /* an unrelated neighbour survives */
  char p[600];
  snprintf(p, sizeof p, "%s/partition.json", c.tmp);
  put(p, "{}");
  assert_int_equal(sc_dir_commit_end(&c, &d), SC_OK);
  assert_int_equal(count_entries(b), 1);

  /* a bundle of the other kind is replaced whole */
  assert_int_equal(sc_dir_commit_begin(&c, b, MARKERS, &d), SC_OK);
  snprintf(p, sizeof p, "%s/manifest.json", c.tmp);
  put(p, "{}");
  assert_int_equal(sc_dir_commit_end(&c, &d), SC_OK);
  snprintf(p, sizeof p, "%s/partition.json", b);
  assert_int_not_equal(access(p, F_OK), 0);
  snprintf(p, sizeof p, "%s/manifest.json", b);
  assert_int_equal(access(p, F_OK), 0);

  /* aborted: B as it was */
  assert_int_equal(sc_dir_commit_begin(&c, b, MARKERS, &d), SC_OK);
  assert_int_equal(sc_dir_commit_finish(&c, SC_ERR_IO, &d), SC_ERR_IO);
  assert_int_equal(access(p, F_OK), 0);
  assert_int_equal(count_entries(scratch_dir()), 2); /* B and B.tmp-x */

  /* not ours: refused, left alone */
  const char *u = scratch_path("U");
  assert_int_equal(mkdir(u, 0777), 0);
  snprintf(p, sizeof p, "%s/notes.txt", u);
  put(p, "mine");
  memset(&d, 0, sizeof d);
  assert_int_equal(sc_dir_commit_begin(&c, u, MARKERS, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "not a shardc bundle (no manifest.json / partition.json)"));
  assert_int_equal(count_entries(u), 1);
  memset(&d, 0, sizeof d);
  assert_int_equal(sc_dir_commit_begin(&c, scratch_path("B.tmp-x"), MARKERS, &d), SC_ERR_IO);
  assert_non_null(strstr(d.msg, "is a regular file"));
}

static void test_remove_all(void **state) {
  (void)state;
  sc_diag d = {0};
  sc_dir_commit c;
  assert_int_equal(sc_dir_commit_begin(&c, scratch_path("D"), MARKERS, &d), SC_OK);
  char p[600];
  snprintf(p, sizeof p, "%s/stage0", c.tmp);
  assert_int_equal(mkdir(p, 0777), 0);
  snprintf(p, sizeof p, "%s/stage0/weights.bin", c.tmp);
  put(p, "w");
  sc_file_commit f;
  assert_int_equal(sc_file_commit_begin(&f, scratch_path("y.npy"), &d), SC_OK);
  fputs("partial", f.f);
  fflush(f.f);
  assert_int_equal(count_entries(scratch_dir()), 2);
  sc_tmp_remove_all(); /* what the signal handler does */
  assert_int_equal(count_entries(scratch_dir()), 0);
  sc_file_commit_abort(&f);
  sc_dir_commit_abort(&c);
  assert_int_equal(count_entries(scratch_dir()), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_read_checks, scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(test_file_commit, scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(test_dir_commit, scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(test_remove_all, scratch_setup, scratch_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
