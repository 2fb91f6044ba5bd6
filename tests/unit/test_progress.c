/* test_progress.c — ir/progress.h on a real pseudo-terminal (posix_openpt;
 * the line read back from its master side) and on a pipe:
 *   - nothing at all is written when the descriptor is not a terminal (a
 *     pipe), when TERM is "dumb" or unset, or with quiet, however many
 *     tasks begin, update and end;
 *   - on a terminal: the first draw says the task ("\r" + text + erase to
 *     the end of the line); 100 updates 10 ms apart on a stepped clock draw
 *     at most 11 times (one per SC_PROGRESS_INTERVAL_S) and the last update
 *     drawn is the one past each interval; the end erases the line;
 *   - bytes: done of total, the percentage and the rate from the clock;
 *   - nesting: two tasks side by side, the inner's end redraws the outer
 *     alone; sc_progress_clear erases a drawn line;
 *   - the line is cut to the terminal's width (TIOCSWINSZ 20 columns);
 *   - four threads adding into one task: the sum is exact, one line; a
 *     task a thread begins itself (a rank's own) draws nothing. */
#define _GNU_SOURCE /* posix_openpt, grantpt, unlockpt, ptsname, cfmakeraw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "test_util.h"

#include "ir/progress.h"

static double fake_now;
static double fake_clock(void) { return fake_now; }

/* A pseudo-terminal: *master read by the test, *slave drawn on. */
static bool open_pty(int *master, int *slave, int cols) {
  *master = posix_openpt(O_RDWR | O_NOCTTY);
  if (*master < 0 || grantpt(*master) || unlockpt(*master)) return false;
  const char *name = ptsname(*master);
  *slave = name ? open(name, O_RDWR | O_NOCTTY) : -1;
  if (*slave < 0) return false;
  struct termios t;
  if (tcgetattr(*slave, &t) == 0) {
    cfmakeraw(&t); /* bytes through as written */
    tcsetattr(*slave, TCSANOW, &t);
  }
  struct winsize ws = {.ws_row = 24, .ws_col = (unsigned short)cols};
  ioctl(*slave, TIOCSWINSZ, &ws);
  fcntl(*master, F_SETFL, fcntl(*master, F_GETFL) | O_NONBLOCK);
  return true;
}

/* Everything written so far, read from fd (non-blocking) into buf. */
static size_t drain(int fd, char *buf, size_t n) {
  size_t got = 0;
  usleep(20000); /* the pty's buffer reaches the master side */
  while (got + 1 < n) {
    ssize_t k = read(fd, buf + got, n - 1 - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  buf[got] = 0;
  return got;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void run_all_kinds(void) {
  sc_progress a, b;
  sc_progress_begin(&a, "compiling", 8, false);
  for (int i = 0; i < 8; i++) sc_progress_set(&a, i, "stage 1");
  sc_progress_begin(&b, "saving checkpoint", 4096, true);
  sc_progress_add(&b, 2048, NULL);
  sc_progress_clear();
  sc_progress_end(&b);
  sc_progress_end(&a);
}

static void test_silent(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  setenv("TERM", "xterm", 1);
  assert_false(sc_progress_setup(p[1], false)); /* a pipe: not a terminal */
  assert_false(sc_progress_enabled());
  run_all_kinds();
  char buf[256];
  assert_int_equal(drain(p[0], buf, sizeof buf), 0);
  close(p[0]);
  close(p[1]);

  int m, s;
  if (!open_pty(&m, &s, 80)) SC_SKIP("no pseudo-terminal here: %s", strerror(errno));
  setenv("TERM", "dumb", 1);
  assert_false(sc_progress_setup(s, false));
  run_all_kinds();
  unsetenv("TERM");
  assert_false(sc_progress_setup(s, false));
  run_all_kinds();
  setenv("TERM", "xterm", 1);
  assert_false(sc_progress_setup(s, true)); /* --quiet */
  run_all_kinds();
  assert_int_equal(drain(m, buf, sizeof buf), 0);
  assert_true(sc_progress_setup(s, false)); /* the same terminal, enabled */
  run_all_kinds();
  assert_true(drain(m, buf, sizeof buf) > 0);
  sc_progress_setup(-1, false);
  close(s);
  close(m);
}

static void test_rate_limit_and_clear(void **state) {
  (void)state;
  int m, s;
  if (!open_pty(&m, &s, 200)) SC_SKIP("no pseudo-terminal here: %s", strerror(errno));
  setenv("TERM", "xterm", 1);
  assert_true(sc_progress_setup(s, false));
  sc_progress_set_clock(fake_clock);
  fake_now = 100.0;
  sc_progress p;
  sc_progress_begin(&p, "compiling", 100, false);
  static char buf[1 << 16];
  drain(m, buf, sizeof buf);
  assert_string_equal(buf, "\rcompiling: 0/100\033[K");
  for (int i = 1; i <= 100; i++) { /* 1 s in steps of 10 ms */
    fake_now = 100.0 + 0.01 * i + 1e-9;
    char item[32];
    snprintf(item, sizeof item, "stage %d", i);
    sc_progress_set(&p, i, item);
  }
  drain(m, buf, sizeof buf);
  int draws = count(buf, "\r");
  assert_true(draws >= 9 && draws <= 11); /* one per 0.1 s of the 1 s */
  assert_non_null(strstr(buf, "\rcompiling: 10/100 (stage 10)\033[K"));
  assert_null(strstr(buf, "compiling: 11/100")); /* 10 ms after a draw: none */
  sc_progress_end(&p);
  drain(m, buf, sizeof buf);
  assert_string_equal(buf, "\r\033[K"); /* the line erased at the end */
  sc_progress_end(&p);                  /* twice: nothing */
  assert_int_equal(drain(m, buf, sizeof buf), 0);

  /* bytes, and the rate over the clock */
  fake_now = 200.0;
  sc_progress_begin(&p, "saving checkpoint", 3072, true);
  fake_now = 201.0;
  sc_progress_set(&p, 1536, "weights.safetensors");
  drain(m, buf, sizeof buf);
  assert_non_null(strstr(buf, "\rsaving checkpoint: 1.50 KiB of 3.00 KiB (50 %), 1.50 KiB/s "
                              "(weights.safetensors)\033[K"));

  /* nesting: side by side, the inner's end redraws the outer */
  sc_progress q;
  fake_now = 202.0;
  sc_progress_begin(&q, "compiling", 2, false);
  drain(m, buf, sizeof buf);
  assert_non_null(strstr(buf, "(weights.safetensors) | compiling: 0/2\033[K"));
  sc_progress_end(&q);
  drain(m, buf, sizeof buf);
  assert_non_null(strstr(buf, "\rsaving checkpoint: 1.50 KiB of 3.00 KiB"));
  assert_null(strstr(buf, "| compiling"));
  sc_progress_clear();
  drain(m, buf, sizeof buf);
  assert_string_equal(buf, "\r\033[K");
  sc_progress_clear(); /* nothing drawn: nothing written */
  assert_int_equal(drain(m, buf, sizeof buf), 0);
  sc_progress_end(&p);
  assert_int_equal(drain(m, buf, sizeof buf), 0); /* erased already */
  sc_progress_set_clock(NULL);
  sc_progress_setup(-1, false);
  close(s);
  close(m);
}

static void test_width(void **state) {
  (void)state;
  int m, s;
  if (!open_pty(&m, &s, 20)) SC_SKIP("no pseudo-terminal here: %s", strerror(errno));
  setenv("TERM", "xterm", 1);
  assert_true(sc_progress_setup(s, false));
  sc_progress p;
  sc_progress_begin(&p, "compiling", 48, false);
  sc_progress_set_clock(fake_clock);
  fake_now = 1e6;
  sc_progress_set(&p, 12, "transformer.h.11 and a long name");
  char buf[512];
  drain(m, buf, sizeof buf);
  /* "\r" + 19 characters + erase: the cursor stays on the line */
  const char *last = strrchr(buf, '\r');
  assert_non_null(last);
  assert_string_equal(last, "\rcompiling: 12/48 (t\033[K");
  sc_progress_end(&p);
  sc_progress_set_clock(NULL);
  sc_progress_setup(-1, false);
  close(s);
  close(m);
}

static sc_progress shared;
static void *adder(void *arg) {
  (void)arg;
  for (int i = 0; i < 1000; i++) sc_progress_add(&shared, 1, NULL);
  return NULL;
}

static void *own_task(void *arg) {
  (void)arg;
  sc_progress p;
  sc_progress_begin(&p, "rank 1 compiling", 3, false);
  for (int i = 0; i < 3; i++) sc_progress_set(&p, i, "stage 1");
  sc_progress_end(&p);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  int m, s;
  if (!open_pty(&m, &s, 80)) SC_SKIP("no pseudo-terminal here: %s", strerror(errno));
  setenv("TERM", "xterm", 1);
  assert_true(sc_progress_setup(s, false));
  sc_progress_begin(&shared, "compiling", 4000, false);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, adder, NULL), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  assert_int_equal(shared.done, 4000);
  sc_progress_end(&shared);
  static char buf[1 << 16];
  drain(m, buf, sizeof buf);
  assert_true(count(buf, "\r") >= 2); /* drawn, then erased */
  assert_null(strchr(buf, '\n'));     /* one line, redrawn in place */
  size_t n = strlen(buf);
  assert_true(n >= 4 && strcmp(buf + n - 4, "\r\033[K") == 0);
  pthread_t other;
  assert_int_equal(pthread_create(&other, NULL, own_task, NULL), 0);
  pthread_join(other, NULL);
  assert_int_equal(drain(m, buf, sizeof buf), 0);
  sc_progress_setup(-1, false);
  close(s);
  close(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_silent),
      cmocka_unit_test(test_rate_limit_and_clear),
      cmocka_unit_test(test_width),
      cmocka_unit_test(test_threads),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
