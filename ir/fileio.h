/* fileio.h — the file system as shardc meets it: reading a file the user
 * named, and writing an artifact so that it appears whole or not at all.
 *
 * Reading. Every file a command reads (model, .npy input, plan, textual IR,
 * a bundle's pieces) is untrusted input and gets the same checks:
 * sc_file_open_regular opens it with O_NONBLOCK (so a FIFO or a device
 * never blocks the open), fstat()s the descriptor and refuses anything but
 * a regular file, naming what it is ("a FIFO", "a directory", ...), then
 * enforces a size limit. sc_file_read_all reads such a file whole.
 *
 * Writing. An artifact is written under a temporary name next to its final
 * one (same folder, so that rename(2) is atomic) and renamed into place when
 * complete:
 *   sc_file_commit_begin(&c, "out/y.npy")  creates "out/y.npy.tmp-PID-N";
 *   write c.f;  sc_file_commit_end(&c)      closes, renames over out/y.npy;
 *   sc_file_commit_abort(&c)                removes the temporary file.
 * A directory (a bundle) the same way: sc_dir_commit_begin creates
 * "D.tmp-PID-N" (the caller writes into c.tmp), sc_dir_commit_end swaps it
 * with D atomically (renameat2 RENAME_EXCHANGE; where the file system lacks
 * it, two renames) and removes the old tree. An existing D is replaced only
 * when it is empty or holds one of the caller's marker files (a bundle's
 * manifest.json or partition.json): other user data is refused, never
 * deleted.
 *
 * Interruption. Every temporary path is registered while it exists;
 * sc_tmp_remove_all() removes the registered paths (directories
 * recursively) using only async-signal-safe calls, for a signal handler
 * (tools/main.c installs one for SIGINT, SIGTERM and SIGHUP). With the
 * environment variable SHARDC_TEST_COMMIT_DELAY_MS set, each commit prints
 * "shardc: test: committing PATH" on stderr and sleeps that long between
 * the complete write and the rename (for tests that interrupt a write).
 *
 * Errors: SC_ERR_IO (cannot open, not a regular file, read or write
 * failed, a directory that is not ours), SC_ERR_LIMIT (larger than the
 * limit), SC_ERR_NOMEM. Messages name the file. Thread safety: the
 * registry is locked; a commit object belongs to one thread. */
#ifndef SC_IR_FILEIO_H
#define SC_IR_FILEIO_H

#include <stdio.h>

#include "ir/base.h"

/* Opens path read-only, non-blocking, close-on-exec; refuses a file that
 * is not regular or is larger than max_bytes (< 0: no limit). what: the
 * message prefix naming the file ("x.npy"), or NULL to leave the path out
 * of the message (the caller put it in diag->file). On success *fd is open
 * (blocking mode restored) and *bytes is its size. */
sc_status sc_file_open_regular(const char *path, const char *what, int64_t max_bytes, int *fd,
                               int64_t *bytes, sc_diag *diag);
/* sc_file_open_regular, then the whole file into *data (sc_malloc'd, one
 * NUL byte after the end; the caller frees it), its size in *bytes. */
sc_status sc_file_read_all(const char *path, const char *what, int64_t max_bytes, char **data,
                           size_t *bytes, sc_diag *diag);
/* sc_file_read_all, adding the bytes to progress as they come (NULL: none;
 * ir/progress.h), in reads of at most SC_FILE_READ_CHUNK bytes. */
struct sc_progress;
enum { SC_FILE_READ_CHUNK = 16 << 20 };
sc_status sc_file_read_all_progress(const char *path, const char *what, int64_t max_bytes,
                                    char **data, size_t *bytes, struct sc_progress *progress,
                                    sc_diag *diag);
/* "a FIFO", "a directory", "a character device", ... for st_mode. */
const char *sc_file_kind_name(unsigned mode);

/* ---- writing whole files ---- */
typedef struct sc_file_commit {
  FILE *f;     /* the temporary file, open for writing */
  char *path;  /* final path */
  char *tmp;   /* temporary path */
  int slot;    /* registry slot, or -1 */
} sc_file_commit;

sc_status sc_file_commit_begin(sc_file_commit *c, const char *path, sc_diag *diag);
/* Closes c->f (errors count as write errors), renames it to the final path.
 * On failure the temporary file is removed. Frees c in both cases. */
sc_status sc_file_commit_end(sc_file_commit *c, sc_diag *diag);
void sc_file_commit_abort(sc_file_commit *c);
/* Ends n commits as one: closes every file (a write error fails them all,
 * every temporary removed), then renames them into place in order with
 * SIGINT, SIGTERM and SIGHUP deferred, so that such a signal either comes
 * before the first rename (no new file) or acts after the last (every new
 * file), whichever thread it lands on (sc_tmp_defer_signal). A rename that
 * fails (not expected within one folder) leaves the earlier ones done and
 * removes the later temporaries. SIGKILL or a crash between two renames
 * can still leave some renamed. Frees them all. With
 * SHARDC_TEST_COMMIT_DELAY_MS, the delay comes before the first rename
 * and again (signals held) before each later one. */
sc_status sc_file_commit_end_all(sc_file_commit *c, int32_t n, sc_diag *diag);

/* ---- writing whole directories ---- */
typedef struct sc_dir_commit {
  char *path;  /* final directory */
  char *tmp;   /* the directory to write into */
  int slot;    /* registry slot, or -1 */
} sc_dir_commit;

/* markers: NULL-terminated file names; an existing non-empty path directory
 * holding none of them is refused. */
sc_status sc_dir_commit_begin(sc_dir_commit *c, const char *path, const char *const *markers,
                              sc_diag *diag);
/* Replaces path with c->tmp (removing the old tree). Frees c. */
sc_status sc_dir_commit_end(sc_dir_commit *c, sc_diag *diag);
/* Removes c->tmp and everything in it. Frees c. */
void sc_dir_commit_abort(sc_dir_commit *c);
/* sc_dir_commit_end when st is SC_OK, else sc_dir_commit_abort; returns
 * the resulting status. */
sc_status sc_dir_commit_finish(sc_dir_commit *c, sc_status st, sc_diag *diag);

/* ---- interruption ---- */
/* Removes every registered temporary path; async-signal-safe. */
void sc_tmp_remove_all(void);
/* For a signal handler, before sc_tmp_remove_all: true while a group
 * commit (sc_file_commit_end_all) is renaming its files; the signal is
 * then recorded and raised again once the last rename is done, so the
 * handler should return at once (keeping itself installed). False
 * otherwise. Async-signal-safe. */
bool sc_tmp_defer_signal(int sig);

#endif
