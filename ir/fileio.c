/* fileio.c — checked reads of user files, whole-or-nothing writes of
 * artifacts, and the registry of temporary paths removed on a signal
 * (contract in fileio.h).
 *
 * The registry is a fixed array of slots, each a path and a flag that says
 * the slot is in use; the flag is set after the path is complete and
 * cleared before the slot is reused, so a signal handler reading it never
 * sees half a path. Removal walks directories with getdents64 and
 * unlinkat, which allocate nothing (opendir would). */
#define _GNU_SOURCE
#include "ir/fileio.h"
#include "ir/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- reading */

const char *sc_file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFIFO: return "a FIFO";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFSOCK: return "a socket";
  case S_IFLNK: return "a symbolic link";
  default: return "not a regular file";
  }
}

sc_status sc_file_open_regular(const char *path, const char *what, int64_t max_bytes, int *fd,
                               int64_t *bytes, sc_diag *diag) {
  *fd = -1;
  *bytes = 0;
  /* O_NONBLOCK: opening a FIFO without a writer would wait forever */
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f < 0)
    return sc_diag_set_prefixed(diag, SC_ERR_IO, what, "cannot open: %s", strerror(errno));
  struct stat sb;
  if (fstat(f, &sb) != 0) {
    int e = errno;
    close(f);
    return sc_diag_set_prefixed(diag, SC_ERR_IO, what, "cannot stat: %s", strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return sc_diag_set_prefixed(diag, SC_ERR_IO, what, "not a regular file (%s)",
                                sc_file_kind_name(sb.st_mode));
  }
  if (sb.st_size < 0 || (max_bytes >= 0 && (int64_t)sb.st_size > max_bytes)) {
    close(f);
    return sc_diag_set_prefixed(diag, SC_ERR_LIMIT, what,
                                "%lld bytes, more than the %lld accepted", (long long)sb.st_size,
                                (long long)max_bytes);
  }
  int fl = fcntl(f, F_GETFL);
  if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
  *fd = f;
  *bytes = (int64_t)sb.st_size;
  return SC_OK;
}

sc_status sc_file_read_all(const char *path, const char *what, int64_t max_bytes, char **data,
                           size_t *bytes, sc_diag *diag) {
  return sc_file_read_all_progress(path, what, max_bytes, data, bytes, NULL, diag);
}

sc_status sc_file_read_all_progress(const char *path, const char *what, int64_t max_bytes,
                                    char **data, size_t *bytes, sc_progress *progress,
                                    sc_diag *diag) {
  *data = NULL;
  *bytes = 0;
  int fd;
  int64_t size;
  sc_status st = sc_file_open_regular(path, what, max_bytes, &fd, &size, diag);
  if (st != SC_OK) return st;
  if ((uint64_t)size >= SIZE_MAX / 2) {
    close(fd);
    return sc_diag_set_prefixed(diag, SC_ERR_LIMIT, what, "file too large");
  }
  char *buf = sc_malloc((size_t)size + 1);
  if (!buf) {
    close(fd);
    return sc_diag_set_prefixed(diag, SC_ERR_NOMEM, what, "out of memory");
  }
  size_t got = 0;
  while (got < (size_t)size) { /* the file may shrink while read: stop at its end */
    size_t want = (size_t)size - got;
    ssize_t n = read(fd, buf + got, want < SC_FILE_READ_CHUNK ? want : SC_FILE_READ_CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      sc_free(buf);
      return sc_diag_set_prefixed(diag, SC_ERR_IO, what, "read error: %s", strerror(e));
    }
    if (n == 0) break;
    got += (size_t)n;
    if (progress) sc_progress_add(progress, n, NULL);
  }
  close(fd);
  buf[got] = 0;
  *data = buf;
  *bytes = got;
  return SC_OK;
}

/* ------------------------------------------------------------ registry */

enum { TMP_SLOTS = 64, TMP_PATH = 4096, MAX_DEPTH = 8 };

static struct {
  atomic_int used; /* 0 free, 1 a file, 2 a directory */
  char path[TMP_PATH];
} g_tmp[TMP_SLOTS];
static pthread_mutex_t g_tmp_lock = PTHREAD_MUTEX_INITIALIZER;

static int tmp_register(const char *path, bool dir) {
  if (strlen(path) >= TMP_PATH) return -1;
  int slot = -1;
  pthread_mutex_lock(&g_tmp_lock);
  for (int i = 0; i < TMP_SLOTS && slot < 0; i++)
    if (atomic_load(&g_tmp[i].used) == 0) slot = i;
  if (slot >= 0) {
    strcpy(g_tmp[slot].path, path);
    atomic_store(&g_tmp[slot].used, dir ? 2 : 1);
  }
  pthread_mutex_unlock(&g_tmp_lock);
  return slot;
}

static void tmp_unregister(int slot) {
  if (slot < 0) return;
  pthread_mutex_lock(&g_tmp_lock);
  atomic_store(&g_tmp[slot].used, 0);
  pthread_mutex_unlock(&g_tmp_lock);
}

struct dirent64_raw { /* the kernel's linux_dirent64 */
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

/* Removes dirfd/name, a file or a tree; async-signal-safe. */
static void remove_tree_at(int dirfd, const char *name, int depth) {
  if (unlinkat(dirfd, name, 0) == 0 || (errno != EISDIR && errno != EPERM)) return;
  if (depth >= MAX_DEPTH) return;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  char buf[2048] __attribute__((aligned(8)));
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const struct dirent64_raw *e = (const struct dirent64_raw *)(buf + off);
      if (strcmp(e->name, ".") != 0 && strcmp(e->name, "..") != 0)
        remove_tree_at(fd, e->name, depth + 1);
      off += e->reclen;
    }
  }
  close(fd);
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

static void remove_tree(const char *path) { remove_tree_at(AT_FDCWD, path, 0); }

/* A group commit's renames in progress: 0 none, 1 renaming, GROUP_SIGNAL +
 * sig when sig arrived meanwhile (raised again when they end). */
enum { GROUP_SIGNAL = 1000 };
static atomic_int g_group;
static pthread_mutex_t g_group_lock = PTHREAD_MUTEX_INITIALIZER;

bool sc_tmp_defer_signal(int sig) {
  for (;;) {
    int v = atomic_load(&g_group);
    if (v == 0) return false;
    if (v > GROUP_SIGNAL) return true; /* one is pending already */
    if (atomic_compare_exchange_strong(&g_group, &v, GROUP_SIGNAL + sig)) return true;
  }
}

void sc_tmp_remove_all(void) {
  for (int i = 0; i < TMP_SLOTS; i++) {
    int u = atomic_load(&g_tmp[i].used);
    if (u == 1) unlink(g_tmp[i].path);
    else if (u == 2) remove_tree(g_tmp[i].path);
  }
}

/* SHARDC_TEST_COMMIT_DELAY_MS: a window between the write and the rename. */
static void test_delay(const char *path) {
  const char *s = getenv("SHARDC_TEST_COMMIT_DELAY_MS");
  long ms = s ? strtol(s, NULL, 10) : 0;
  if (ms <= 0) return;
  fprintf(stderr, "shardc: test: committing %s\n", path);
  fflush(stderr);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static atomic_ulong g_counter;

/* "<path><sep><pid>-<n>" */
static char *tmp_name(const char *path, const char *sep) {
  size_t n = strlen(path) + strlen(sep) + 48;
  char *s = sc_malloc(n);
  if (s)
    snprintf(s, n, "%s%s%ld-%lu", path, sep, (long)getpid(),
             (unsigned long)atomic_fetch_add(&g_counter, 1));
  return s;
}

/* --------------------------------------------------------------- files */

sc_status sc_file_commit_begin(sc_file_commit *c, const char *path, sc_diag *diag) {
  memset(c, 0, sizeof *c);
  c->slot = -1;
  c->path = sc_strdup(path);
  int fd = -1;
  for (int tries = 0; c->path && tries < 100 && fd < 0; tries++) {
    sc_free(c->tmp);
    c->tmp = tmp_name(path, ".tmp-");
    if (!c->tmp) break;
    c->slot = tmp_register(c->tmp, false); /* before it exists: a signal finds it */
    fd = open(c->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      int e = errno;
      tmp_unregister(c->slot);
      c->slot = -1;
      if (e != EEXIST) {
        sc_status st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot create: %s", path,
                                   strerror(e));
        sc_free(c->tmp);
        sc_free(c->path);
        memset(c, 0, sizeof *c);
        return st;
      }
    }
  }
  if (fd >= 0) c->f = fdopen(fd, "wb");
  if (!c->f) {
    if (fd >= 0) {
      close(fd);
      unlink(c->tmp);
    }
    tmp_unregister(c->slot);
    sc_free(c->tmp);
    sc_free(c->path);
    memset(c, 0, sizeof *c);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "%s: cannot create a temporary file", path);
  }
  return SC_OK;
}

static void file_commit_free(sc_file_commit *c) {
  tmp_unregister(c->slot);
  sc_free(c->tmp);
  sc_free(c->path);
  memset(c, 0, sizeof *c);
  c->slot = -1;
}

void sc_file_commit_abort(sc_file_commit *c) {
  if (c->f) fclose(c->f);
  if (c->tmp) unlink(c->tmp);
  file_commit_free(c);
}

sc_status sc_file_commit_end(sc_file_commit *c, sc_diag *diag) {
  bool ok = fflush(c->f) == 0 && !ferror(c->f);
  int e = errno;
  if (fclose(c->f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  c->f = NULL;
  sc_status st = SC_OK;
  if (!ok) {
    st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: write failed: %s", c->path, strerror(e));
  } else {
    test_delay(c->path);
    if (rename(c->tmp, c->path) != 0)
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot replace: %s", c->path,
                       strerror(errno));
  }
  if (st != SC_OK) unlink(c->tmp);
  file_commit_free(c);
  return st;
}

sc_status sc_file_commit_end_all(sc_file_commit *c, int32_t n, sc_diag *diag) {
  sc_status st = SC_OK;
  for (int32_t i = 0; i < n; i++) { /* every file complete first */
    bool ok = fflush(c[i].f) == 0 && !ferror(c[i].f);
    int e = errno;
    if (fclose(c[i].f) != 0 && ok) {
      ok = false;
      e = errno;
    }
    c[i].f = NULL;
    if (!ok && st == SC_OK)
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: write failed: %s", c[i].path,
                       strerror(e));
  }
  if (st == SC_OK && n > 0) test_delay(c[0].path); /* a signal here: nothing new */
  /* the renames with the interrupting signals deferred (sc_tmp_defer_signal),
   * on whichever thread they land: one arriving now acts after the last */
  pthread_mutex_lock(&g_group_lock);
  atomic_store(&g_group, 1);
  for (int32_t i = 0; i < n; i++) {
    if (st == SC_OK && i > 0) test_delay(c[i].path);
    bool moved = st == SC_OK && rename(c[i].tmp, c[i].path) == 0;
    if (!moved && st == SC_OK)
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot replace: %s", c[i].path,
                       strerror(errno));
    if (!moved) unlink(c[i].tmp);
    file_commit_free(&c[i]);
  }
  int deferred = atomic_exchange(&g_group, 0);
  pthread_mutex_unlock(&g_group_lock);
  if (deferred > GROUP_SIGNAL) raise(deferred - GROUP_SIGNAL); /* now it may act */
  return st;
}

/* --------------------------------------------------------- directories */

/* SC_OK when path may be replaced: missing, an empty directory, or a
 * directory holding a marker. */
static sc_status check_replaceable(const char *path, const char *const *markers, sc_diag *diag) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return SC_OK;
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: %s", path, strerror(errno));
  }
  if (!S_ISDIR(sb.st_mode))
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                       "%s: exists and is %s, not a shardc bundle; not replacing it", path,
                       sc_file_kind_name(sb.st_mode));
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: %s", path, strerror(errno));
  for (const char *const *m = markers; m && *m; m++) {
    struct stat ms;
    if (fstatat(fd, *m, &ms, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(ms.st_mode)) {
      close(fd);
      return SC_OK;
    }
  }
  bool empty = true;
  char buf[2048] __attribute__((aligned(8)));
  long n;
  while (empty && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long off = 0; off < n && empty;) {
      const struct dirent64_raw *e = (const struct dirent64_raw *)(buf + off);
      empty = strcmp(e->name, ".") == 0 || strcmp(e->name, "..") == 0;
      off += e->reclen;
    }
  close(fd);
  if (empty) return SC_OK;
  char names[256] = "";
  for (const char *const *m = markers; m && *m; m++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
             m == markers ? "" : " / ", *m);
  return sc_diag_set(diag, SC_ERR_IO, NULL, NULL,
                     "%s: exists and is not a shardc bundle (no %s); not replacing it", path,
                     names);
}

sc_status sc_dir_commit_begin(sc_dir_commit *c, const char *path, const char *const *markers,
                              sc_diag *diag) {
  memset(c, 0, sizeof *c);
  c->slot = -1;
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--; /* "D/" renames as "D" */
  c->path = sc_malloc(len + 1);
  if (!c->path) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  memcpy(c->path, path, len);
  c->path[len] = 0;
  sc_status st = check_replaceable(c->path, markers, diag);
  for (int tries = 0; st == SC_OK && tries < 100; tries++) {
    sc_free(c->tmp);
    c->tmp = tmp_name(c->path, ".tmp-");
    if (!c->tmp) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      break;
    }
    c->slot = tmp_register(c->tmp, true);
    if (mkdir(c->tmp, 0777) == 0) return SC_OK;
    int e = errno;
    tmp_unregister(c->slot);
    c->slot = -1;
    if (e != EEXIST)
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot create the directory: %s",
                       c->path, strerror(e));
  }
  if (st == SC_OK)
    st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot create a temporary directory",
                     c->path);
  sc_free(c->tmp);
  sc_free(c->path);
  memset(c, 0, sizeof *c);
  c->slot = -1;
  return st;
}

static void dir_commit_free(sc_dir_commit *c) {
  tmp_unregister(c->slot);
  sc_free(c->tmp);
  sc_free(c->path);
  memset(c, 0, sizeof *c);
  c->slot = -1;
}

void sc_dir_commit_abort(sc_dir_commit *c) {
  if (c->tmp) remove_tree(c->tmp);
  dir_commit_free(c);
}

sc_status sc_dir_commit_end(sc_dir_commit *c, sc_diag *diag) {
  test_delay(c->path);
  sc_status st = SC_OK;
  if (renameat2(AT_FDCWD, c->tmp, AT_FDCWD, c->path, RENAME_EXCHANGE) == 0) {
    remove_tree(c->tmp); /* the old tree, now at the temporary name */
  } else if (errno == ENOENT) { /* nothing to replace */
    if (rename(c->tmp, c->path) != 0)
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot create: %s", c->path,
                       strerror(errno));
  } else { /* no RENAME_EXCHANGE here: move the old tree aside first */
    char *old = tmp_name(c->path, ".old-");
    if (!old) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    } else if (rename(c->path, old) != 0 || rename(c->tmp, c->path) != 0) {
      st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: cannot replace: %s", c->path,
                       strerror(errno));
      rename(old, c->path); /* put the old one back if it moved */
    } else {
      remove_tree(old);
    }
    sc_free(old);
  }
  if (st != SC_OK) remove_tree(c->tmp);
  dir_commit_free(c);
  return st;
}

sc_status sc_dir_commit_finish(sc_dir_commit *c, sc_status st, sc_diag *diag) {
  if (st == SC_OK) return sc_dir_commit_end(c, diag);
  sc_dir_commit_abort(c);
  return st;
}
