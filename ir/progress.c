/* progress.c — the progress line (progress.h).
 *
 * One process-wide state under one lock: the file descriptor drawn on (-1:
 * disabled, the default), the stack of tasks begun and not ended (their
 * order of beginning; a task ended out of order is taken out where it is),
 * when the line was last drawn, and what is on the terminal now (how many
 * of the tasks: an ended task that is not there changes nothing on it).
 * Every entry point returns at once when disabled, before the lock: `fd`
 * only changes in sc_progress_setup, which runs before any task. The
 * text is built in a fixed buffer and written with write(2) (no stdio, so
 * stderr's buffer is never mixed into it). */
#include "ir/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

enum { LINE_BYTES = 512, DEFAULT_COLUMNS = 80 };

static struct {
  pthread_mutex_t lock;
  int fd;                       /* -1: disabled */
  pthread_t owner;              /* the thread that enabled it: its tasks are shown */
  sc_progress *tasks[SC_PROGRESS_DEPTH];
  int n_tasks;                  /* tasks[0, n_tasks): the ones shown */
  int deeper;                   /* begun beyond the depth, not shown */
  double last;                  /* when the line was last drawn */
  bool drawn;                   /* something is on the terminal */
  int n_drawn;                  /* the first n_drawn tasks are in it */
  double (*now)(void);
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .last = -1e300};

static double monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void) { return g.now ? g.now() : monotonic(); }

bool sc_progress_setup(int fd, bool quiet) {
  const char *term = getenv("TERM");
  pthread_mutex_lock(&g.lock);
  g.fd = fd >= 0 && !quiet && isatty(fd) && term && term[0] && strcmp(term, "dumb") != 0 ? fd
                                                                                          : -1;
  g.drawn = false;
  g.last = -1e300;
  g.owner = pthread_self();
  bool on = g.fd >= 0;
  pthread_mutex_unlock(&g.lock);
  return on;
}

bool sc_progress_enabled(void) { return g.fd >= 0; }

void sc_progress_set_clock(double (*fn)(void)) { g.now = fn; }

static void put(const char *s, size_t n) {
  while (n > 0) {
    ssize_t k = write(g.fd, s, n);
    if (k <= 0) return; /* a terminal that fails is not worth an error */
    s += k;
    n -= (size_t)k;
  }
}

/* 1536 -> "1.50 KiB" */
static void fmt_bytes(double b, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, n, "%.0f B", b);
  else snprintf(buf, n, "%.2f %s", b, units[u]);
}

/* One task's text at time t. */
static int task_text(const sc_progress *p, double t, char *buf, size_t n) {
  char a[32], b[32], rate[48] = "", item[80] = "";
  if (p->item[0]) snprintf(item, sizeof item, " (%s)", p->item);
  if (!p->bytes) {
    if (p->total > 0)
      return snprintf(buf, n, "%s: %lld/%lld%s", p->what, (long long)p->done,
                      (long long)p->total, item);
    if (p->done > 0) return snprintf(buf, n, "%s: %lld%s", p->what, (long long)p->done, item);
    return snprintf(buf, n, "%s%s", p->what, item); /* no count: what is under way */
  }
  fmt_bytes((double)p->done, a, sizeof a);
  if (t - p->t0 > 0 && p->done > 0) {
    char r[32];
    fmt_bytes((double)p->done / (t - p->t0), r, sizeof r);
    snprintf(rate, sizeof rate, ", %s/s", r);
  }
  if (p->total <= 0) return snprintf(buf, n, "%s: %s%s%s", p->what, a, rate, item);
  fmt_bytes((double)p->total, b, sizeof b);
  return snprintf(buf, n, "%s: %s of %s (%d %%)%s%s", p->what, a, b,
                  (int)(100.0 * (double)p->done / (double)p->total), rate, item);
}

static int columns(void) {
  struct winsize ws;
  if (ioctl(g.fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) return ws.ws_col;
  return DEFAULT_COLUMNS;
}

/* Draws the line now (lock held): "\r", the tasks' texts, "\033[K"; or
 * erases it when no task is shown. */
static void draw(double t) {
  char line[LINE_BYTES + 16];
  size_t len = 0;
  line[len++] = '\r';
  int shown = g.n_tasks < SC_PROGRESS_DEPTH ? g.n_tasks : SC_PROGRESS_DEPTH;
  for (int i = 0; i < shown; i++) {
    if (i && len + 3 < LINE_BYTES) {
      memcpy(line + len, " | ", 3);
      len += 3;
    }
    int k = task_text(g.tasks[i], t, line + len, LINE_BYTES - len);
    if (k > 0) len += (size_t)k < LINE_BYTES - len ? (size_t)k : LINE_BYTES - len - 1;
  }
  /* never wrap: one column left for the cursor; a cut never splits a
   * UTF-8 sequence (a name may hold one) */
  size_t most = (size_t)columns(); /* "\r" counts as the one left */
  if (len > most) {
    len = most;
    while (len > 1 && ((unsigned char)line[len] & 0xC0) == 0x80) len--;
  }
  memcpy(line + len, "\033[K", 3);
  len += 3;
  put(line, len);
  g.drawn = shown > 0;
  g.n_drawn = shown;
  g.last = t;
}

/* Redraws when the interval has passed since the last draw. */
static void update(void) {
  double t = now();
  if (t - g.last >= SC_PROGRESS_INTERVAL_S) draw(t);
}

void sc_progress_begin(sc_progress *p, const char *what, int64_t total, bool bytes) {
  memset(p, 0, sizeof *p);
  snprintf(p->what, sizeof p->what, "%s", what ? what : "");
  p->total = total > 0 ? total : 0;
  p->bytes = bytes;
  /* one line: the tasks of the thread that enabled it (the command's);
   * ranks as threads add into a task it began */
  if (g.fd < 0 || !pthread_equal(pthread_self(), g.owner)) return;
  pthread_mutex_lock(&g.lock);
  p->t0 = now();
  p->active = true;
  if (g.n_tasks < SC_PROGRESS_DEPTH) g.tasks[g.n_tasks++] = p;
  else g.deeper++;
  if (g.tasks[g.n_tasks - 1] == p) update();
  pthread_mutex_unlock(&g.lock);
}

static bool shown_task(const sc_progress *p) {
  for (int i = 0; i < g.n_tasks; i++)
    if (g.tasks[i] == p) return true;
  return false;
}

static void set_locked(sc_progress *p, int64_t done, const char *item) {
  p->done = done;
  if (item) snprintf(p->item, sizeof p->item, "%s", item);
  if (shown_task(p)) update();
}

void sc_progress_set(sc_progress *p, int64_t done, const char *item) {
  if (!p || g.fd < 0) return;
  pthread_mutex_lock(&g.lock);
  if (p->active) set_locked(p, done, item);
  pthread_mutex_unlock(&g.lock);
}

void sc_progress_add(sc_progress *p, int64_t delta, const char *item) {
  if (!p || g.fd < 0) return;
  pthread_mutex_lock(&g.lock);
  if (p->active) set_locked(p, p->done + delta, item);
  pthread_mutex_unlock(&g.lock);
}

void sc_progress_end(sc_progress *p) {
  if (!p || g.fd < 0) return;
  pthread_mutex_lock(&g.lock);
  if (!p->active) {
    pthread_mutex_unlock(&g.lock);
    return;
  }
  p->active = false;
  int i = 0;
  while (i < g.n_tasks && g.tasks[i] != p) i++;
  if (i == g.n_tasks) {
    if (g.deeper > 0) g.deeper--;
  } else {
    memmove(&g.tasks[i], &g.tasks[i + 1], (size_t)(g.n_tasks - i - 1) * sizeof g.tasks[0]);
    g.n_tasks--;
    /* the line without it, when it is on the line: erased when it was the
     * last, else redrawn */
    if (g.drawn && i < g.n_drawn) draw(now());
  }
  pthread_mutex_unlock(&g.lock);
}

void sc_progress_clear(void) {
  if (g.fd < 0) return;
  pthread_mutex_lock(&g.lock);
  if (g.drawn) {
    put("\r\033[K", 4);
    g.drawn = false;
    g.n_drawn = 0;
    g.last = -1e300; /* the next update draws it again */
  }
  pthread_mutex_unlock(&g.lock);
}
