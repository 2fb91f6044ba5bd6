/* progress.h — one line of progress on a terminal, for work long enough to
 * wonder about: which program of how many a build compiles, the bytes of a
 * checkpoint saved or loaded and their rate, which check of how many
 * `shardc check` runs.
 *
 *   static sc_progress p;                     (or on the stack)
 *   sc_progress_begin(&p, "compiling", n, false);
 *   for (i = 0; i < n; i++) { sc_progress_set(&p, i, name[i]); ...work...; }
 *   sc_progress_end(&p);
 *
 * shows, redrawn in place, `compiling: 3/8 (stage 2)`; a byte count shows
 * `saving checkpoint: 1.50 GiB of 4.00 GiB (37 %), 812.3 MiB/s`. Work
 * nests: the tasks begun and not ended are shown side by side, outermost
 * first, joined by " | " (`check 4/5 (equivalence) | compiling: 1/2 (stage
 * 0)`); at most SC_PROGRESS_DEPTH of them (deeper ones are followed but not
 * shown).
 *
 * Nothing is ever written unless sc_progress_setup enabled it: the CLI does
 * (main.c) when stderr is a terminal (isatty), TERM is set and is not
 * "dumb", and the command was not given --quiet. Disabled — a library
 * user, a test, stderr redirected to a file or a pipe — every call is a
 * cheap no-op and the output is byte for byte what it is without this
 * module. Enabled, the line is drawn as "\r" + text + "\033[K" (erase to the
 * end of the line), cut to the terminal's width (TIOCGWINSZ; 80 when
 * unknown) so that it never wraps, at most once every
 * SC_PROGRESS_INTERVAL_S seconds (a task's end at once, when it was on the
 * line), and
 * erased ("\r\033[K") when the last task ends or before other text is
 * printed (sc_progress_clear).
 *
 * Threads: every call takes one process-wide lock. Only tasks begun on the
 * thread that called sc_progress_setup (the command's main thread) are
 * shown; one begun on another thread (a rank running as a thread) is
 * inert. Ranks report into a task the main thread began (sc_progress_add:
 * each adds its own), which draws one aggregated line. An sc_progress must stay valid
 * from _begin to _end (end it on every path out); `what` and the item are
 * copied. _set, _add and _end take NULL (nothing to report). */
#ifndef SC_IR_PROGRESS_H
#define SC_IR_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* The least time between two redraws: 10 a second, fast enough to look
 * alive, slow enough that a terminal (or a slow ssh link) never lags. */
#define SC_PROGRESS_INTERVAL_S 0.1
enum { SC_PROGRESS_DEPTH = 4 };

typedef struct sc_progress {
  char what[48];     /* "compiling", "saving checkpoint" */
  char item[64];     /* the unit under way, or "" */
  int64_t done, total; /* total 0: unknown (done alone is shown, when > 0) */
  bool bytes;        /* done and total are bytes: shown with the rate */
  double t0;         /* when it began (the rate's origin) */
  bool active;       /* between _begin and _end */
} sc_progress;

/* Enables drawing on file descriptor fd (2: stderr) when fd is a terminal,
 * TERM is set and not "dumb", and !quiet; disables it otherwise (fd < 0:
 * always). Returns whether it is enabled. Call it before any task begins
 * (main.c does, once, from the command's arguments). */
bool sc_progress_setup(int fd, bool quiet);
bool sc_progress_enabled(void);

/* Starts a task of total units (0: unknown); bytes: they are bytes. */
void sc_progress_begin(sc_progress *p, const char *what, int64_t total, bool bytes);
/* done units so far; item (NULL: unchanged) names the one under way. */
void sc_progress_set(sc_progress *p, int64_t done, const char *item);
/* done += delta (ranks as threads reporting into one task). */
void sc_progress_add(sc_progress *p, int64_t delta, const char *item);
/* Ends the task: the line is redrawn without it, or erased when none is
 * left. Safe on a task never begun (all zero) or already ended. */
void sc_progress_end(sc_progress *p);
/* Erases the line (when drawn) before other text goes to the terminal;
 * the next update draws it again. */
void sc_progress_clear(void);

/* Tests: the clock the rate limit and the rates read, in seconds (NULL:
 * the monotonic clock). */
void sc_progress_set_clock(double (*now)(void));

#endif
