/* checkpoint.c — saving and loading training checkpoints (checkpoint.h).
 *
 * Save: check the state and build the manifest's state part first (nothing
 * is created for a bad argument), refuse a DIR that is neither empty nor a
 * checkpoint, then write the two safetensors files and the manifest (last)
 * into the temporary folder (created O_EXCL | O_NOFOLLOW), each fsync'd as
 * it is closed, fsync the folder, swap it with DIR, fsync DIR's parent.
 * The file names inside the folder are fixed (k_files); the manifest
 * records them but a loader never opens a name taken from the text. A
 * DIR that holds anything else is refused (the swap removes the old
 * tree); stale temporaries are emptied relative to their opened folder,
 * never through a symbolic link.
 *
 * Load: manifest first (checksum over its canonical form, then each
 * field), then per group: read the file whole, compare size and SHA-256
 * with the manifest, parse it as safetensors, match its tensors one to one
 * with the manifest's list (version 2: and with the file's own record of
 * its writer and boxes). Members that are symbolic links are refused;
 * every integer is in [0, 2^53] (k_max_int), so sums of two cannot
 * overflow. The loaded checkpoint keeps the file buffers;
 * its tensors point into them.
 *
 * Both say how far they are on a terminal's progress line (ir/progress.h):
 * a save the tensors' bytes written of their total, a load the files'
 * bytes read of what the manifest lists, each with its rate. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/program_json.h"
#include "ir/fileio.h"
#include "ir/progress.h"
#include "runtime/checkpoint.h"

enum { MAX_MANIFEST_BYTES = 256 << 20 };
/* The largest integer a manifest may hold (a count, a position, a size,
 * an offset, a dim): 2^53, the largest every JSON reader keeps exact.
 * Sums of two such numbers cannot overflow. */
static const int64_t k_max_int = (int64_t)1 << 53;

static const char *const k_files[SC_CKPT_GROUP_COUNT] = {"weights.safetensors",
                                                         "optimizer.safetensors"};
static const char *const k_groups[SC_CKPT_GROUP_COUNT] = {"weights", "optimizer"};
static const char k_manifest[] = "manifest.json";
/* The manifest's checksum field: SHA-256 of the manifest without it,
 * dumped compact with sorted keys. */
static const char k_self_sha[] = "manifest_sha256";

const char *sc_ckpt_group_name(sc_ckpt_group g) {
  return (unsigned)g < SC_CKPT_GROUP_COUNT ? k_groups[g] : "?";
}

/* "DIR/NAME" into buf (n bytes); false when it does not fit. */
static bool join(char *buf, size_t n, const char *dir, const char *name) {
  int k = snprintf(buf, n, "%s/%s", dir, name);
  return k > 0 && (size_t)k < n;
}

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

/* SHA-256 hex of root without k_self_sha, canonical form. */
static bool manifest_digest(json_t *root, char hex[65]) {
  json_t *copy = json_copy(root);
  if (!copy) return false;
  json_object_del(copy, k_self_sha);
  char *text = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(copy);
  if (!text) return false;
  sc_sha256_hex(text, strlen(text), hex);
  free(text);
  return true;
}

bool sc_ckpt_is_dir(const char *path) {
  char buf[4096];
  if (!join(buf, sizeof buf, path, k_manifest)) return false;
  char *text = NULL;
  size_t n = 0;
  sc_diag d;
  sc_diag_clear(&d);
  if (sc_file_read_all(buf, NULL, MAX_MANIFEST_BYTES, &text, &n, &d) != SC_OK) return false;
  json_t *root = json_loadb(text, n, 0, NULL);
  sc_free(text);
  const char *f = json_string_value(json_object_get(root, "format"));
  bool ok = f && strcmp(f, SC_CKPT_FORMAT) == 0;
  json_decref(root);
  return ok;
}

/* ============================================================== saving */

/* The manifest's state part into root. */
static sc_status put_state(json_t *root, const char *dir, const sc_ckpt_state *s, sc_diag *d) {
  const struct {
    const char *key;
    int64_t v;
  } ints[] = {{"step", s->step},
              {"data_position", s->data_position},
              {"schedule_position", s->schedule_position},
              {"loss_scale_growth", s->loss_scale_growth}};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    if (ints[i].v < 0)
      return sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "%s = %lld is negative", ints[i].key,
                                  (long long)ints[i].v);
    if (ints[i].v > k_max_int)
      return sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "%s = %lld is above 2^53", ints[i].key,
                                  (long long)ints[i].v);
    if (json_object_set_new(root, ints[i].key, json_integer(ints[i].v))) return nomem(d);
  }
  if (!isfinite(s->loss_scale) || s->loss_scale <= 0)
    return sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "loss scale %g is not a finite number > 0",
                                s->loss_scale);
  if (!s->optimizer || !s->optimizer[0])
    return sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "no optimizer name");
  json_error_t err;
  json_t *hyper = s->optimizer_json ? json_loads(s->optimizer_json, JSON_REJECT_DUPLICATES, &err)
                                    : json_object();
  if (!json_is_object(hyper)) {
    json_decref(hyper);
    return sc_diag_set_prefixed(
        d, SC_ERR_INVALID, dir, "the optimizer's hyperparameters are not a JSON object%s%s",
        s->optimizer_json && !hyper ? ": " : "", s->optimizer_json && !hyper ? err.text : "");
  }
  char rng[24];
  snprintf(rng, sizeof rng, "%llu", (unsigned long long)s->rng_state);
  json_t *opt = json_pack("{s:s, s:o}", "name", s->optimizer, "hyperparameters", hyper);
  if (!opt)
    return sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "the optimizer name is not valid UTF-8");
  if (json_object_set_new(root, "loss_scale", json_real(s->loss_scale)) ||
      json_object_set_new(root, "rng_state", json_string(rng)) ||
      json_object_set_new(root, "optimizer", opt))
    return nomem(d);
  return SC_OK;
}

/* The manifest's description of one group's tensors. */
static json_t *tensor_list(sc_ckpt_group g, const sc_ckpt_tensor *t, int32_t n) {
  json_t *list = json_array();
  for (int32_t i = 0; list && i < n; i++) {
    json_t *shape = json_array(), *zeros = json_array();
    for (int32_t k = 0; shape && zeros && k < t[i].rank; k++) {
      json_array_append_new(shape, json_integer(t[i].dims[k]));
      json_array_append_new(zeros, json_integer(0));
    }
    json_t *e = json_pack("{s:s, s:s, s:O, s:[{s:s, s:o, s:o}]}", "name", t[i].name, "dtype",
                          sc_safetensors_dtype_name(t[i].dtype), "shape", shape, "shards", "file",
                          k_files[g], "offsets", zeros, "shape", shape);
    if (!e || json_array_append_new(list, e)) {
      json_decref(list);
      return NULL;
    }
  }
  return list;
}

/* Closes f after flushing it to the disk: 0, or the errno of the first
 * failure. */
static int close_synced(FILE *f) {
  errno = 0;
  int err = 0;
  if (fflush(f) != 0 || ferror(f)) err = errno ? errno : EIO;
  else if (fsync(fileno(f)) != 0) err = errno;
  if (fclose(f) != 0 && !err) err = errno;
  return err;
}

static bool sync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

/* SHARDC_TEST_CKPT_FAIL_AFTER: true when file number k (from 0) may not be
 * written. */
static bool injected_failure(int k) {
  const char *s = getenv("SHARDC_TEST_CKPT_FAIL_AFTER");
  return s && *s && k >= atoi(s);
}

/* Creates the new file tmp/name, file number k of the save (O_EXCL and
 * O_NOFOLLOW: never an existing file, never through a symbolic link). */
static sc_status create_in(const char *dir, const char *tmp, const char *name, int k, FILE **f,
                           sc_diag *d) {
  char path[4096];
  *f = NULL;
  if (!join(path, sizeof path, tmp, name))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "path too long");
  if (injected_failure(k))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "%s: injected failure (SHARDC_TEST_CKPT_FAIL_AFTER)", name);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd >= 0 && !(*f = fdopen(fd, "wb"))) close(fd);
  if (!*f)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: cannot create: %s", name,
                                strerror(errno));
  return SC_OK;
}

/* Writes the safetensors file tmp/name (file number k) of group g holding
 * the n views, with meta after the format and group entries, and records
 * it in files; the tensors' bytes go to pr as they are written. */
static sc_status write_tensor_file(const char *dir, const char *tmp, const char *name, int k,
                                   sc_ckpt_group g, const sc_tensor_view *v, int32_t n,
                                   const sc_safetensors_meta *more, int32_t n_more,
                                   json_t *files, sc_progress *pr, sc_diag *d) {
  sc_safetensors_meta meta[4] = {{"format", SC_CKPT_FORMAT}, {"group", k_groups[g]}};
  SC_ASSERT(n_more <= 2);
  for (int32_t i = 0; i < n_more; i++) meta[2 + i] = more[i];
  FILE *f;
  sc_status st = create_in(dir, tmp, name, k, &f, d);
  if (st != SC_OK) return st;
  uint8_t digest[32];
  int64_t bytes = 0;
  sc_diag wd;
  sc_diag_clear(&wd);
  sc_progress_add(pr, 0, name);
  st = sc_safetensors_write_stream(f, name, v, n, meta, 2 + n_more, digest, &bytes, pr, &wd);
  int err = close_synced(f);
  if (st != SC_OK) return sc_diag_set_prefixed(d, st, dir, "%s", wd.msg);
  if (err)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: write failed: %s", name, strerror(err));
  char hex[65];
  sc_sha256_digest_hex(digest, hex);
  json_t *e = json_pack("{s:s, s:s, s:I, s:s}", "name", name, "group", k_groups[g], "bytes",
                        (json_int_t)bytes, "sha256", hex);
  return e && json_array_append_new(files, e) == 0 ? SC_OK : nomem(d);
}

/* Writes group g's file into tmp and records it in files. */
static sc_status write_group(const char *dir, const char *tmp, sc_ckpt_group g,
                             const sc_ckpt_tensor *t, int32_t n, json_t *files, sc_progress *pr,
                             sc_diag *d) {
  return write_tensor_file(dir, tmp, k_files[g], (int)g, g, t, n, NULL, 0, files, pr, d);
}

/* The bytes of n tensors' data (0 for one whose size overflows: the
 * writer refuses it). */
static int64_t data_bytes(const sc_tensor_view *t, int32_t n) {
  int64_t total = 0, numel, bytes;
  for (int32_t i = 0; i < n; i++)
    if (sc_tensor_view_size(&t[i], &numel, &bytes)) total += bytes;
  return total;
}

static sc_status write_manifest(const char *dir, const char *tmp, json_t *root, sc_diag *d) {
  char hex[65];
  if (!manifest_digest(root, hex) || json_object_set_new(root, k_self_sha, json_string(hex)))
    return nomem(d);
  FILE *f;
  sc_status st = create_in(dir, tmp, k_manifest, SC_CKPT_GROUP_COUNT, &f, d);
  if (st != SC_OK) return st;
  errno = 0;
  bool ok = json_dumpf(root, f, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 && fputc('\n', f) != EOF;
  int err = ok ? 0 : errno ? errno : EIO, cerr = close_synced(f);
  if (err || cerr)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: write failed: %s", k_manifest,
                                strerror(err ? err : cerr));
  return SC_OK;
}

/* The group of a sharded save's file name ("weights-rank<R>.safetensors",
 * "optimizer-rank<R>.safetensors", R decimal digits), or -1. A loader opens
 * only names of this form, never a path taken from the manifest. */
static int shard_file_group(const char *name) {
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++) {
    size_t n = strlen(k_groups[g]);
    if (strncmp(name, k_groups[g], n) != 0 || strncmp(name + n, "-rank", 5) != 0) continue;
    const char *p = name + n + 5, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q > p && q - p <= 9 && strcmp(q, ".safetensors") == 0) return g;
  }
  return -1;
}

static void shard_file_name(char *buf, size_t n, sc_ckpt_group g, int32_t writer) {
  snprintf(buf, n, "%s-rank%05d.safetensors", k_groups[g], (int)writer);
}

/* Whether name is one a save writes into a checkpoint folder. */
static bool is_own_name(const char *name) {
  return strcmp(name, k_manifest) == 0 || strcmp(name, k_files[0]) == 0 ||
         strcmp(name, k_files[1]) == 0 || shard_file_group(name) >= 0;
}

/* The entries of the open folder fd (borrowed) that a save did not write:
 * other names, and our names that are not regular files (a symbolic link,
 * a folder). Lists them, comma-separated, into buf (n bytes, "..." when it
 * does not fit); *n_entries counts every entry. Returns how many are
 * foreign, or -1 (errno set) when the folder cannot be read. */
static int foreign_entries(int fd, char *buf, size_t n, int *n_entries) {
  int dup_fd = dup(fd);
  DIR *dd = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!dd) {
    if (dup_fd >= 0) close(dup_fd);
    return -1;
  }
  rewinddir(dd);
  int foreign = 0;
  buf[0] = 0;
  *n_entries = 0;
  for (struct dirent *e; (e = readdir(dd)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    ++*n_entries;
    struct stat sb;
    bool stat_ok = fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
    if (is_own_name(e->d_name) && stat_ok && S_ISREG(sb.st_mode)) continue;
    size_t len = strlen(buf);
    int k = snprintf(buf + len, n - len, "%s%.200s%s", foreign ? ", " : "", e->d_name,
                     !stat_ok ? "" : S_ISLNK(sb.st_mode) ? " (a symbolic link)"
                                 : S_ISDIR(sb.st_mode)  ? "/" : "");
    if (k < 0 || (size_t)k >= n - len) snprintf(buf + (n > 4 ? n - 4 : 0), n > 4 ? 4 : n, "...");
    foreign++;
  }
  closedir(dd);
  return foreign;
}

/* Refuses an existing dir that is neither empty nor a checkpoint, and a
 * checkpoint holding anything a save does not write (named): the swap
 * removes the old tree, so nothing else may be in it. */
static sc_status check_target(const char *dir, sc_diag *d) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) return SC_OK; /* sc_dir_commit_begin reports other errors */
  if (!S_ISDIR(sb.st_mode))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "exists and is %s, not a shardc checkpoint; not replacing it",
                                sc_file_kind_name(sb.st_mode));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s", strerror(errno));
  char foreign[512] = "";
  int n_entries = 0, n_foreign = foreign_entries(fd, foreign, sizeof foreign, &n_entries);
  close(fd);
  if (n_foreign < 0) return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s", strerror(errno));
  if (n_entries == 0) return SC_OK;
  if (!sc_ckpt_is_dir(dir))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "exists and is not a shardc checkpoint (no %s of format %s); not "
                                "replacing it",
                                k_manifest, SC_CKPT_FORMAT);
  if (n_foreign > 0)
    return sc_diag_set_prefixed(
        d, SC_ERR_IO, dir,
        "holds %d entr%s a save does not write (%s); not replacing it (move %s away or save "
        "elsewhere)",
        n_foreign, n_foreign == 1 ? "y" : "ies", foreign, n_foreign == 1 ? "it" : "them");
  return SC_OK;
}

/* The parent folder of dir (without trailing slashes) into buf. */
static void parent_of(const char *dir, char *buf, size_t n) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  while (len > 0 && dir[len - 1] != '/') len--;
  while (len > 1 && dir[len - 1] == '/') len--;
  if (len == 0)
    snprintf(buf, n, ".");
  else
    snprintf(buf, n, "%.*s", (int)len, dir);
}

void sc_ckpt_copy_box(size_t esz, int32_t rank, const int64_t *shape, const void *src,
                      const int64_t *src_dims, const int64_t *src_off, void *dst,
                      const int64_t *dst_dims, const int64_t *dst_off) {
  if (rank == 0) {
    memcpy(dst, src, esz);
    return;
  }
  for (int32_t k = 0; k < rank; k++)
    if (shape[k] <= 0) return;
  /* rows: every index of the outer dims; each row a contiguous run of the
   * innermost dim */
  int64_t idx[SC_MAX_RANK] = {0};
  size_t run = (size_t)shape[rank - 1] * esz;
  for (;;) {
    int64_t so = 0, doff = 0;
    for (int32_t k = 0; k < rank; k++) {
      so = so * src_dims[k] + src_off[k] + (k < rank - 1 ? idx[k] : 0);
      doff = doff * dst_dims[k] + dst_off[k] + (k < rank - 1 ? idx[k] : 0);
    }
    memcpy((char *)dst + (size_t)doff * esz, (const char *)src + (size_t)so * esz, run);
    int32_t k = rank - 2;
    for (; k >= 0; k--) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

/* Whether boxes a and b (offsets, shape) intersect. */
static bool boxes_meet(int32_t rank, const int64_t *ao, const int64_t *as, const int64_t *bo,
                       const int64_t *bs) {
  for (int32_t k = 0; k < rank; k++)
    if (ao[k] + as[k] <= bo[k] || bo[k] + bs[k] <= ao[k]) return false;
  return true;
}

/* The element count of shape, or -1 when it passes 2^63. */
static int64_t volume(int32_t rank, const int64_t *shape) {
  int64_t v = 1;
  for (int32_t k = 0; k < rank; k++)
    if (!sc_mul_i64(v, shape[k], &v)) return -1;
  return v;
}

/* Removes "DIR.tmp-PID-N" folders left by saves whose process is gone,
 * when they hold nothing but a checkpoint's regular files. Everything is
 * looked at and removed relative to the open folders (fstatat, openat
 * with O_NOFOLLOW, unlinkat): an entry of that name that is a symbolic
 * link, or a link inside one, is left alone and never followed. */
static void remove_stale_temporaries(const char *dir) {
  char parent[4096], prefix[1024];
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  size_t base = len;
  while (base > 0 && dir[base - 1] != '/') base--;
  if (len - base + 6 >= sizeof prefix) return;
  snprintf(prefix, sizeof prefix, "%.*s.tmp-", (int)(len - base), dir + base);
  parent_of(dir, parent, sizeof parent);
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dd = pfd >= 0 ? fdopendir(pfd) : NULL;
  if (!dd) {
    if (pfd >= 0) close(pfd);
    return;
  }
  for (struct dirent *e; (e = readdir(dd)) != NULL;) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    char *end;
    long pid = strtol(e->d_name + strlen(prefix), &end, 10);
    if (pid <= 0 || *end != '-' || pid == (long)getpid() ||
        !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
      continue;
    int tfd = openat(pfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0) continue; /* a symbolic link (ELOOP), not a folder, gone */
    char foreign[8];
    int n_entries = 0;
    if (foreign_entries(tfd, foreign, sizeof foreign, &n_entries) == 0) {
      int dup_fd = dup(tfd);
      DIR *td = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
      if (!td && dup_fd >= 0) close(dup_fd);
      if (td) rewinddir(td); /* the descriptor's offset is shared with the listing's */
      for (struct dirent *f; td && (f = readdir(td)) != NULL;)
        if (is_own_name(f->d_name)) unlinkat(tfd, f->d_name, 0);
      if (td) closedir(td);
      unlinkat(pfd, e->d_name, AT_REMOVEDIR);
    }
    close(tfd);
  }
  closedir(dd);
}

/* The end of a save whose files are in c's folder (s: how their writing
 * went): the manifest (taking files and tensors), the flushes, the swap. */
static sc_status finish_save(const char *dir, sc_dir_commit *c, json_t *root, json_t *files,
                             json_t *tensors, sc_status s, sc_diag *d) {
  if (s == SC_OK) {
    json_object_set_new(root, "files", files);
    json_object_set_new(root, "tensors", tensors);
    files = tensors = NULL;
    s = write_manifest(dir, c->tmp, root, d);
  }
  if (s == SC_OK && !sync_dir(c->tmp))
    s = sc_diag_set_prefixed(d, SC_ERR_IO, dir, "cannot flush the new checkpoint: %s",
                             strerror(errno));
  json_decref(root);
  json_decref(files);
  json_decref(tensors);
  s = sc_dir_commit_finish(c, s, d);
  char parent[4096];
  parent_of(dir, parent, sizeof parent);
  if (s == SC_OK && !sync_dir(parent))
    s = sc_diag_set_prefixed(d, SC_ERR_IO, dir, "cannot flush the folder %s: %s", parent,
                             strerror(errno));
  return s;
}

sc_status sc_ckpt_save(const char *dir, const sc_ckpt_state *st, const sc_ckpt_tensor *weights,
                       int32_t n_w, const sc_ckpt_tensor *opt, int32_t n_o, sc_diag *d) {
  if (!dir || !dir[0] || !st || n_w < 0 || n_o < 0 || (n_w > 0 && !weights) || (n_o > 0 && !opt))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: bad arguments");
  const sc_ckpt_tensor *groups[SC_CKPT_GROUP_COUNT] = {weights, opt};
  const int32_t counts[SC_CKPT_GROUP_COUNT] = {n_w, n_o};
  json_t *root = json_pack("{s:s, s:i}", "format", SC_CKPT_FORMAT, "format_version", 1);
  json_t *files = json_array(), *tensors = json_object();
  sc_status s = root && files && tensors ? put_state(root, dir, st, d) : nomem(d);
  if (s == SC_OK) s = check_target(dir, d);
  if (s != SC_OK) {
    json_decref(root);
    json_decref(files);
    json_decref(tensors);
    return s;
  }
  remove_stale_temporaries(dir);
  sc_dir_commit c;
  const char *const markers[] = {k_manifest, NULL};
  s = sc_dir_commit_begin(&c, dir, markers, d);
  if (s != SC_OK) {
    json_decref(root);
    json_decref(files);
    json_decref(tensors);
    return s;
  }
  sc_progress pr; /* the tensors' bytes written, and their rate */
  sc_progress_begin(&pr, "saving checkpoint", data_bytes(weights, n_w) + data_bytes(opt, n_o),
                    true);
  for (int g = 0; s == SC_OK && g < SC_CKPT_GROUP_COUNT; g++) {
    s = write_group(dir, c.tmp, (sc_ckpt_group)g, groups[g], counts[g], files, &pr, d);
    json_t *list = s == SC_OK ? tensor_list((sc_ckpt_group)g, groups[g], counts[g]) : NULL;
    if (s == SC_OK && (!list || json_object_set_new(tensors, k_groups[g], list))) s = nomem(d);
  }
  sc_progress_add(&pr, 0, "syncing");
  s = finish_save(dir, &c, root, files, tensors, s, d);
  sc_progress_end(&pr);
  return s;
}

/* The shards' own fields, and every shard of a tensor of its first one's
 * dtype and global shape (their tiling is check_tiled's, on the lists). */
static sc_status check_shards(const sc_ckpt_shard *sh, int32_t n, sc_diag *d) {
  for (int32_t i = 0; i < n; i++) {
    if ((unsigned)sh[i].group >= SC_CKPT_GROUP_COUNT || sh[i].writer < 0 ||
        sh[i].writer > 99999 || !sh[i].name || sh[i].rank < 0 || sh[i].rank > SC_MAX_RANK ||
        !sh[i].data)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: bad shard %d", (int)i);
    int32_t j = 0;
    while (j < i && !(sh[j].group == sh[i].group && strcmp(sh[j].name, sh[i].name) == 0)) j++;
    bool same = sh[j].dtype == sh[i].dtype && sh[j].rank == sh[i].rank;
    for (int32_t k = 0; same && k < sh[i].rank; k++) same = sh[j].dims[k] == sh[i].dims[k];
    if (!same)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "checkpoint: shards of '%s' of another dtype or shape", sh[i].name);
  }
  return SC_OK;
}

/* key[i]: shard i's index among its tensor's shards in its writer's file
 * (sc_malloc'd, NULL when out of memory). */
static int32_t *shard_keys(const sc_ckpt_shard *sh, int32_t n) {
  int32_t *key = sc_calloc((size_t)n + 1, sizeof *key);
  for (int32_t i = 0; key && i < n; i++)
    for (int32_t j = 0; j < i; j++)
      key[i] += sh[j].group == sh[i].group && sh[j].writer == sh[i].writer &&
                strcmp(sh[j].name, sh[i].name) == 0;
  return key;
}

/* The box a shard holds as its file records it: {"offsets": [...],
 * "shape": [...]} (the manifest's form). */
static json_t *box_json(int32_t rank, const int64_t *offsets, const int64_t *shape) {
  json_t *off = json_array(), *bs = json_array();
  for (int32_t k = 0; off && bs && k < rank; k++) {
    json_array_append_new(off, json_integer(offsets[k]));
    json_array_append_new(bs, json_integer(shape[k]));
  }
  return off && bs ? json_pack("{s:o, s:o}", "offsets", off, "shape", bs) : NULL;
}

/* The manifest's tensor lists of a sharded save. */
static json_t *shard_lists(const sc_ckpt_shard *sh, int32_t n, const int32_t *key) {
  json_t *tensors = json_object();
  for (int g = 0; tensors && g < SC_CKPT_GROUP_COUNT; g++) {
    json_t *list = json_array();
    for (int32_t i = 0; list && i < n; i++) {
      if (sh[i].group != (sc_ckpt_group)g) continue;
      bool first = true;
      for (int32_t j = 0; j < i && first; j++)
        first = !(sh[j].group == sh[i].group && strcmp(sh[j].name, sh[i].name) == 0);
      if (!first) continue;
      json_t *shape = json_array(), *shards = json_array();
      for (int32_t k = 0; shape && k < sh[i].rank; k++)
        json_array_append_new(shape, json_integer(sh[i].dims[k]));
      for (int32_t j = i; shards && j < n; j++) {
        if (sh[j].group != sh[i].group || strcmp(sh[j].name, sh[i].name) != 0) continue;
        char file[64], k_name[1100];
        shard_file_name(file, sizeof file, sh[j].group, sh[j].writer);
        snprintf(k_name, sizeof k_name, "%s@%d", sh[j].name, (int)key[j]);
        json_t *box = box_json(sh[j].rank, sh[j].offsets, sh[j].shape);
        if (box && (json_object_set_new(box, "file", json_string(file)) ||
                    json_object_set_new(box, "key", json_string(k_name)))) {
          json_decref(box);
          box = NULL;
        }
        json_array_append_new(shards, box);
      }
      json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o}", "name", sh[i].name,
                                            "dtype", sc_safetensors_dtype_name(sh[i].dtype),
                                            "shape", shape, "shards", shards));
    }
    if (!list || json_object_set_new(tensors, k_groups[g], list)) {
      json_decref(tensors);
      return NULL;
    }
  }
  return tensors;
}

/* Writes the file of (group g, writer w) into tmp and records it. Its
 * __metadata__ says which writer it is ("writer") and which box of its
 * tensor each key holds ("boxes": JSON {key: {"offsets", "shape"}}), which
 * a load checks against the manifest. */
static sc_status write_shard_file(const char *dir, const char *tmp, sc_ckpt_group g, int32_t w,
                                  const sc_ckpt_shard *sh, int32_t n, const int32_t *key,
                                  int *n_written, json_t *files, sc_progress *pr, sc_diag *d) {
  char name[64], writer[16];
  shard_file_name(name, sizeof name, g, w);
  snprintf(writer, sizeof writer, "%d", (int)w);
  sc_tensor_view *v = sc_calloc((size_t)n + 1, sizeof *v);
  char (*keys)[1100] = sc_calloc((size_t)n + 1, sizeof *keys);
  json_t *boxes = json_object();
  int32_t m = 0;
  sc_status st = v && keys && boxes ? SC_OK : nomem(d);
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    if (sh[i].group != g || sh[i].writer != w) continue;
    snprintf(keys[m], sizeof keys[m], "%s@%d", sh[i].name, (int)key[i]);
    v[m] = (sc_tensor_view){.name = keys[m], .dtype = sh[i].dtype, .rank = sh[i].rank,
                            .data = (void *)sh[i].data};
    memcpy(v[m].dims, sh[i].shape, sizeof v[m].dims);
    json_t *box = box_json(sh[i].rank, sh[i].offsets, sh[i].shape);
    if (!box || json_object_set_new(boxes, keys[m], box)) st = nomem(d);
    m++;
  }
  char *text = st == SC_OK ? json_dumps(boxes, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  if (st == SC_OK && !text) st = nomem(d);
  if (st == SC_OK) {
    const sc_safetensors_meta more[] = {{"writer", writer}, {"boxes", text}};
    st = write_tensor_file(dir, tmp, name, (*n_written)++, g, v, m, more, 2, files, pr, d);
  }
  free(text); /* jansson's */
  json_decref(boxes);
  sc_free(v);
  sc_free(keys);
  return st;
}

static bool int_list(json_t *a, int32_t rank, int64_t *out) {
  if (!json_is_array(a) || json_array_size(a) != (size_t)rank) return false;
  for (int32_t k = 0; k < rank; k++) {
    json_t *v = json_array_get(a, (size_t)k);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > k_max_int)
      return false;
    out[k] = (int64_t)json_integer_value(v);
  }
  return true;
}

struct sc_ckpt_commit {
  sc_dir_commit c;
};

sc_status sc_ckpt_shards_begin(const char *dir, sc_ckpt_commit **out, const char **tmp,
                               sc_diag *d) {
  *out = NULL;
  if (!dir || !dir[0]) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: no folder");
  sc_status s = check_target(dir, d);
  if (s != SC_OK) return s;
  sc_ckpt_commit *c = sc_calloc(1, sizeof *c);
  if (!c) return nomem(d);
  remove_stale_temporaries(dir);
  const char *const markers[] = {k_manifest, NULL};
  if ((s = sc_dir_commit_begin(&c->c, dir, markers, d)) != SC_OK) {
    sc_free(c);
    return s;
  }
  *out = c;
  *tmp = c->c.tmp;
  return SC_OK;
}

sc_status sc_ckpt_shards_write(const char *dir, const char *tmp, const sc_ckpt_shard *shards,
                               int32_t n, char **part, sc_diag *d) {
  *part = NULL;
  if (!dir || !tmp || n < 0 || (n > 0 && !shards))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: bad arguments");
  sc_status s = check_shards(shards, n, d);
  if (s != SC_OK) return s;
  int32_t *key = shard_keys(shards, n);
  json_t *files = json_array(), *tensors = NULL;
  s = key && files ? SC_OK : nomem(d);
  if (s == SC_OK && !(tensors = shard_lists(shards, n, key))) s = nomem(d);
  int written = 0;
  int64_t total = 0; /* every shard's bytes, this writer's progress */
  for (int32_t i = 0; i < n; i++) {
    sc_tensor_view v = {.dtype = shards[i].dtype, .rank = shards[i].rank};
    memcpy(v.dims, shards[i].shape, sizeof v.dims);
    total += data_bytes(&v, 1);
  }
  sc_progress pr;
  sc_progress_begin(&pr, "saving checkpoint", total, true);
  for (int g = 0; s == SC_OK && g < SC_CKPT_GROUP_COUNT; g++)
    for (int32_t w = 0; s == SC_OK && w <= 99999; w++) {
      bool any = false, more = false;
      for (int32_t i = 0; i < n; i++) {
        any |= shards[i].group == (sc_ckpt_group)g && shards[i].writer == w;
        more |= shards[i].group == (sc_ckpt_group)g && shards[i].writer > w;
      }
      if (any) s = write_shard_file(dir, tmp, (sc_ckpt_group)g, w, shards, n, key, &written,
                                    files, &pr, d);
      if (!more) break;
    }
  sc_progress_end(&pr);
  sc_free(key);
  json_t *root = s == SC_OK ? json_pack("{s:O, s:O}", "files", files, "tensors", tensors) : NULL;
  if (s == SC_OK && (!root || !(*part = json_dumps(root, JSON_COMPACT)))) s = nomem(d);
  json_decref(root);
  json_decref(files);
  json_decref(tensors);
  return s;
}

/* Adds part's files and tensors (shards appended to a tensor already
 * listed) to files and tensors; then checks every tensor is tiled. */
static sc_status merge_part(const char *dir, const char *text, json_t *files, json_t *tensors,
                            sc_diag *d) {
  json_t *p = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
  json_t *pf = json_object_get(p, "files"), *pt = json_object_get(p, "tensors");
  sc_status st = json_is_array(pf) && json_is_object(pt)
                     ? SC_OK
                     : sc_diag_set_prefixed(d, SC_ERR_INVALID, dir, "a rank's part is malformed");
  size_t i;
  json_t *e;
  if (st == SC_OK) json_array_foreach(pf, i, e) json_array_append(files, e);
  for (int g = 0; st == SC_OK && g < SC_CKPT_GROUP_COUNT; g++) {
    json_t *list = json_object_get(tensors, k_groups[g]), *add = json_object_get(pt, k_groups[g]);
    json_array_foreach(add, i, e) {
      const char *name = json_string_value(json_object_get(e, "name"));
      json_t *have = NULL, *x;
      size_t j;
      json_array_foreach(list, j, x)
        if (name && !strcmp(name, json_string_value(json_object_get(x, "name")))) have = x;
      if (!have) {
        json_array_append(list, e);
        continue;
      }
      if (!json_equal(json_object_get(have, "shape"), json_object_get(e, "shape")) ||
          !json_equal(json_object_get(have, "dtype"), json_object_get(e, "dtype"))) {
        st = sc_diag_set_prefixed(d, SC_ERR_INVALID, dir,
                                  "tensor '%.200s': ranks disagree on its dtype or shape", name);
        break;
      }
      json_array_extend(json_object_get(have, "shards"), json_object_get(e, "shards"));
    }
  }
  json_decref(p);
  return st;
}

/* Every tensor of the merged lists tiled exactly by its shards. */
static sc_status check_tiled(const char *dir, json_t *tensors, sc_diag *d) {
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++) {
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(tensors, k_groups[g]), i, t) {
      const char *name = json_string_value(json_object_get(t, "name"));
      json_t *shape = json_object_get(t, "shape"), *sh = json_object_get(t, "shards");
      int32_t rank = (int32_t)json_array_size(shape);
      int64_t dims[SC_MAX_RANK] = {0}, covered = 0;
      bool ok = rank <= SC_MAX_RANK && int_list(shape, rank, dims) && volume(rank, dims) >= 0;
      size_t n = json_array_size(sh);
      for (size_t a = 0; ok && a < n; a++) {
        int64_t ao[SC_MAX_RANK], as[SC_MAX_RANK];
        json_t *x = json_array_get(sh, a);
        ok = int_list(json_object_get(x, "offsets"), rank, ao) &&
             int_list(json_object_get(x, "shape"), rank, as);
        for (int32_t k = 0; ok && k < rank; k++) ok = ao[k] + as[k] <= dims[k];
        for (size_t b = 0; ok && b < a; b++) {
          int64_t bo[SC_MAX_RANK], bs[SC_MAX_RANK];
          json_t *y = json_array_get(sh, b);
          int_list(json_object_get(y, "offsets"), rank, bo);
          int_list(json_object_get(y, "shape"), rank, bs);
          ok = !boxes_meet(rank, ao, as, bo, bs);
        }
        covered += ok ? volume(rank, as) : 0;
      }
      if (!ok)
        return sc_diag_set_prefixed(d, SC_ERR_USAGE, dir,
                                    "tensor '%.200s': a shard outside it or overlapping another",
                                    name ? name : "?");
      if (covered != volume(rank, dims))
        return sc_diag_set_prefixed(d, SC_ERR_USAGE, dir,
                                    "tensor '%.200s': the shards cover %lld of its %lld elements",
                                    name ? name : "?", (long long)covered,
                                    (long long)volume(rank, dims));
    }
  }
  return SC_OK;
}

sc_status sc_ckpt_shards_finish(sc_ckpt_commit *c, const char *dir, const sc_ckpt_state *st,
                                const char *const *parts, int32_t n_parts, sc_status s,
                                sc_diag *d) {
  if (!c) return s != SC_OK ? s : sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: no save");
  json_t *root = json_pack("{s:s, s:i}", "format", SC_CKPT_FORMAT, "format_version", 2);
  json_t *files = json_array(), *tensors = json_pack("{s:[], s:[]}", k_groups[0], k_groups[1]);
  if (s == SC_OK) s = root && files && tensors ? put_state(root, dir, st, d) : nomem(d);
  for (int32_t i = 0; s == SC_OK && i < n_parts; i++)
    s = merge_part(dir, parts[i], files, tensors, d);
  if (s == SC_OK) s = check_tiled(dir, tensors, d);
  s = finish_save(dir, &c->c, root, files, tensors, s, d);
  sc_free(c);
  return s;
}

sc_status sc_ckpt_save_shards(const char *dir, const sc_ckpt_state *st,
                              const sc_ckpt_shard *shards, int32_t n, sc_diag *d) {
  if (!dir || !dir[0] || !st || n < 0 || (n > 0 && !shards))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: bad arguments");
  sc_status s = check_shards(shards, n, d);
  if (s == SC_OK) { /* the tiling, before anything is written */
    int32_t *key = shard_keys(shards, n);
    json_t *tensors = key ? shard_lists(shards, n, key) : NULL;
    s = tensors ? check_tiled(dir, tensors, d) : nomem(d);
    json_decref(tensors);
    sc_free(key);
  }
  if (s == SC_OK) { /* and before anything is created: the state too */
    json_t *probe = json_object();
    s = probe ? put_state(probe, dir, st, d) : nomem(d);
    json_decref(probe);
  }
  if (s != SC_OK) return s;
  sc_ckpt_commit *c = NULL;
  const char *tmp = NULL;
  char *part = NULL;
  if ((s = sc_ckpt_shards_begin(dir, &c, &tmp, d)) != SC_OK) return s;
  s = sc_ckpt_shards_write(dir, tmp, shards, n, &part, d);
  const char *parts[] = {part};
  s = sc_ckpt_shards_finish(c, dir, st, parts, 1, s, d);
  free(part); /* jansson's */
  return s;
}

/* ============================================================= loading */

struct sc_ckpt {
  sc_ckpt_state state;
  char *optimizer;                            /* state.optimizer */
  char *optimizer_json;                       /* state.optimizer_json (jansson's) */
  sc_safetensors *files[SC_CKPT_GROUP_COUNT]; /* version 1: own the data */
  int32_t n[SC_CKPT_GROUP_COUNT];
  sc_ckpt_tensor *tensors[SC_CKPT_GROUP_COUNT]; /* manifest order, into files
                                                   (version 2: into whole[g]) */
  void **whole[SC_CKPT_GROUP_COUNT];          /* version 2: each tensor assembled */
};

typedef struct loader {
  const char *dir;
  sc_diag *d;
  sc_ckpt *c;
  sc_progress *progress; /* the files' bytes read */
} loader;

static sc_status get_count(loader *l, json_t *o, const char *key, const char *where, int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > k_max_int)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: '%s' missing or not an integer in [0, 2^53]", where, key);
  *out = (int64_t)json_integer_value(v);
  return SC_OK;
}

static sc_status read_state(loader *l, json_t *root) {
  sc_ckpt_state *s = &l->c->state;
  const char *w = k_manifest;
  sc_status st = SC_OK;
  if (st == SC_OK) st = get_count(l, root, "step", w, &s->step);
  if (st == SC_OK) st = get_count(l, root, "data_position", w, &s->data_position);
  if (st == SC_OK) st = get_count(l, root, "schedule_position", w, &s->schedule_position);
  if (st == SC_OK) st = get_count(l, root, "loss_scale_growth", w, &s->loss_scale_growth);
  if (st != SC_OK) return st;
  json_t *ls = json_object_get(root, "loss_scale");
  if (!json_is_number(ls) || !(json_number_value(ls) > 0))
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'loss_scale' missing or not a number > 0", w);
  s->loss_scale = json_number_value(ls);
  const char *rng = json_string_value(json_object_get(root, "rng_state"));
  char *end = NULL;
  errno = 0;
  if (rng && rng[0] >= '0' && rng[0] <= '9') s->rng_state = strtoull(rng, &end, 10);
  if (!end || *end || errno)
    return sc_diag_set_prefixed(
        l->d, SC_ERR_PARSE, l->dir,
        "%s: 'rng_state' missing or not a decimal string of a 64-bit unsigned number", w);
  json_t *opt = json_object_get(root, "optimizer");
  const char *name = json_string_value(json_object_get(opt, "name"));
  json_t *hyper = json_object_get(opt, "hyperparameters");
  if (!name || !name[0] || !json_is_object(hyper))
    return sc_diag_set_prefixed(
        l->d, SC_ERR_PARSE, l->dir,
        "%s: 'optimizer' must be {\"name\": text, \"hyperparameters\": {...}}", w);
  l->c->optimizer = sc_strdup(name);
  l->c->optimizer_json = json_dumps(hyper, JSON_COMPACT | JSON_SORT_KEYS);
  if (!l->c->optimizer || !l->c->optimizer_json) return nomem(l->d);
  s->optimizer = l->c->optimizer;
  s->optimizer_json = l->c->optimizer_json;
  return SC_OK;
}

/* The files entry for group g, or NULL. */
static json_t *file_entry(json_t *files, sc_ckpt_group g) {
  size_t i;
  json_t *e;
  json_array_foreach(files, i, e) {
    const char *name = json_string_value(json_object_get(e, "name"));
    if (name && strcmp(name, k_files[g]) == 0) return e;
  }
  return NULL;
}

/* Reads the checkpoint's file `name` whole (at most max_bytes) into
 * *data: a regular file inside the folder, never a symbolic link (which
 * could point anywhere). */
static sc_status read_member(loader *l, const char *name, int64_t max_bytes, char **data,
                             size_t *n) {
  char path[4096];
  struct stat sb;
  if (!join(path, sizeof path, l->dir, name))
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "path too long");
  if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode))
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir,
                                "%s is a symbolic link; a checkpoint's files are regular files "
                                "inside its folder (not following it)", name);
  sc_diag fd;
  sc_diag_clear(&fd);
  sc_progress_add(l->progress, 0, name);
  sc_status st = sc_file_read_all_progress(path, name, max_bytes, data, n, l->progress, &fd);
  return st == SC_OK ? SC_OK : sc_diag_set_prefixed(l->d, st, l->dir, "%s", fd.msg);
}

/* Reads file f (its entry e of 'files'), checks its size and SHA-256 and
 * parses it into *out. f is a name this code chose or validated. */
static sc_status read_checked(loader *l, json_t *e, const char *f, sc_safetensors **out) {
  int64_t bytes = 0;
  const char *sha = json_string_value(json_object_get(e, "sha256"));
  sc_status st = get_count(l, e, "bytes", f, &bytes);
  if (st != SC_OK) return st;
  if (!sha || strlen(sha) != 64)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'sha256' of %s missing or not 64 hex digits", k_manifest, f);
  char *data = NULL;
  size_t n = 0;
  sc_diag sub;
  sc_diag_clear(&sub);
  loader quiet = {.dir = l->dir, .d = &sub, .c = l->c, .progress = l->progress};
  st = read_member(&quiet, f, bytes + 1, &data, &n);
  if (st == SC_ERR_LIMIT)
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s: larger than the %lld bytes the manifest records", f,
                                (long long)bytes);
  if (st != SC_OK) return sc_diag_set(l->d, st, NULL, NULL, "%s", sub.msg);
  sc_diag fd;
  sc_diag_clear(&fd);
  if ((int64_t)n != bytes) {
    sc_free(data);
    return sc_diag_set_prefixed(
        l->d, SC_ERR_INVALID, l->dir,
        "%s: %zu bytes, but the manifest records %lld: truncated or replaced", f, n,
        (long long)bytes);
  }
  char hex[65];
  sc_sha256_hex(data, n, hex);
  if (strcmp(hex, sha) != 0) {
    sc_free(data);
    return sc_diag_set_prefixed(
        l->d, SC_ERR_INVALID, l->dir,
        "%s: SHA-256 mismatch (the file is corrupted): %s, the manifest records %.64s", f, hex,
        sha);
  }
  st = sc_safetensors_parse(data, n, f, out, &fd);
  return st == SC_OK ? SC_OK : sc_diag_set_prefixed(l->d, st, l->dir, "%s", fd.msg);
}

/* Reads group g's file (version 1). */
static sc_status read_group_file(loader *l, json_t *files, sc_ckpt_group g) {
  json_t *e = file_entry(files, g);
  if (!e)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir, "%s: no entry for %s in 'files'",
                                k_manifest, k_files[g]);
  return read_checked(l, e, k_files[g], &l->c->files[g]);
}

/* The manifest's tensor list of group g against its loaded file. */
static sc_status match_tensors(loader *l, json_t *list, sc_ckpt_group g) {
  const char *f = k_files[g];
  const sc_safetensors *file = l->c->files[g];
  if (!json_is_array(list))
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'tensors.%s' missing or not an array", k_manifest,
                                k_groups[g]);
  size_t n = json_array_size(list);
  if (n != (size_t)file->n_tensors)
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s holds %d tensors but the manifest lists %zu", f,
                                (int)file->n_tensors, n);
  l->c->tensors[g] = sc_calloc(n + 1, sizeof *l->c->tensors[g]);
  bool *seen = sc_calloc((size_t)file->n_tensors + 1, sizeof *seen);
  sc_status st = l->c->tensors[g] && seen ? SC_OK : nomem(l->d);
  for (size_t i = 0; st == SC_OK && i < n; i++) {
    json_t *e = json_array_get(list, i);
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    json_t *shape = json_object_get(e, "shape"), *shards = json_object_get(e, "shards");
    if (!name || !dt || !json_is_array(shape) || !json_is_array(shards)) {
      st = sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: tensors.%s[%zu] needs 'name', 'dtype', 'shape' and 'shards'",
                                k_manifest, k_groups[g], i);
      break;
    }
    const sc_tensor_view *t = sc_safetensors_find(file, name);
    if (!t) {
      st = sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s: no tensor '%.200s' (the manifest lists it)", f, name);
      break;
    }
    int32_t id = (int32_t)(t - file->tensors);
    bool same = !seen[id] && sc_safetensors_dtype_parse(dt) == t->dtype &&
                json_array_size(shape) == (size_t)t->rank;
    for (int32_t k = 0; same && k < t->rank; k++) {
      json_t *v = json_array_get(shape, (size_t)k);
      same = json_is_integer(v) && json_integer_value(v) == t->dims[k];
    }
    if (!same) {
      st = sc_diag_set_prefixed(
          l->d, SC_ERR_INVALID, l->dir,
          "%s: tensor '%.200s': dtype or shape differs from the manifest's (or listed "
          "twice)",
          f, name);
      break;
    }
    /* One shard covering the whole tensor, in this group's file. */
    json_t *sh = json_array_get(shards, 0);
    const char *sf = json_string_value(json_object_get(sh, "file"));
    json_t *offs = json_object_get(sh, "offsets");
    bool whole = json_array_size(shards) == 1 && sf && strcmp(sf, f) == 0 && json_is_array(offs) &&
                 json_array_size(offs) == (size_t)t->rank &&
                 json_equal(json_object_get(sh, "shape"), shape);
    for (int32_t k = 0; whole && k < t->rank; k++) {
      json_t *v = json_array_get(offs, (size_t)k);
      whole = json_is_integer(v) && json_integer_value(v) == 0;
    }
    if (!whole) {
      st = sc_diag_set_prefixed(
          l->d, SC_ERR_UNSUPPORTED, l->dir,
          "%s: tensor '%.200s': only one shard covering the whole tensor, in %s, is "
          "supported",
          k_manifest, name, f);
      break;
    }
    seen[id] = true;
    l->c->tensors[g][i] = *t;
  }
  sc_free(seen);
  if (st == SC_OK) l->c->n[g] = (int32_t)n;
  return st;
}

static sc_status read_manifest(loader *l, json_t **root) {
  char path[4096];
  struct stat sb;
  if (stat(l->dir, &sb) != 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "cannot open the checkpoint: %s",
                                strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "not a checkpoint: %s, not a directory",
                                sc_file_kind_name(sb.st_mode));
  if (!join(path, sizeof path, l->dir, k_manifest))
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "path too long");
  if (lstat(path, &sb) != 0 && errno == ENOENT)
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "not a checkpoint (no %s)", k_manifest);
  char *text = NULL;
  size_t n = 0;
  sc_status st = read_member(l, k_manifest, MAX_MANIFEST_BYTES, &text, &n);
  if (st != SC_OK) return st;
  json_error_t err;
  *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
  sc_free(text);
  if (!json_is_object(*root))
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir, "%s: not a JSON object%s%s (line %d)",
                                k_manifest, *root ? "" : ": ", *root ? "" : err.text,
                                *root ? 0 : err.line);
  const char *format = json_string_value(json_object_get(*root, "format"));
  if (!format || strcmp(format, SC_CKPT_FORMAT) != 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir,
                                "not a checkpoint (%s has no \"format\": \"%s\")", k_manifest,
                                SC_CKPT_FORMAT);
  json_t *v = json_object_get(*root, "format_version");
  if (!json_is_integer(v) || json_integer_value(v) < 1)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'format_version' missing or not an integer", k_manifest);
  if (json_integer_value(v) > SC_CKPT_FORMAT_VERSION)
    return sc_diag_set_prefixed(l->d, SC_ERR_UNSUPPORTED, l->dir,
                                "%s: format version %lld; this shardc reads version %d", k_manifest,
                                (long long)json_integer_value(v), SC_CKPT_FORMAT_VERSION);
  const char *self = json_string_value(json_object_get(*root, k_self_sha));
  char hex[65];
  if (!self)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir, "%s: no '%s'", k_manifest, k_self_sha);
  if (!manifest_digest(*root, hex)) return nomem(l->d);
  if (strcmp(hex, self) != 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s: checksum mismatch (the manifest was edited or corrupted)",
                                k_manifest);
  return SC_OK;
}

/* ---- version 2: shards in the writers' files ---- */

typedef struct part {
  const char *name;       /* the file's (validated, in the manifest's arena) */
  int group;
  sc_safetensors *f;
  bool *used;             /* [f->n_tensors] */
  json_t *boxes;          /* the file's own record of its keys' boxes; NULL in
                             files saved before files recorded them */
} part;

/* Reads, checks and parses the file of entry e (version 2). */
static sc_status read_part(loader *l, json_t *e, part *p) {
  const char *name = json_string_value(json_object_get(e, "name"));
  const char *group = json_string_value(json_object_get(e, "group"));
  int g = name ? shard_file_group(name) : -1;
  if (g < 0 || !group || strcmp(group, k_groups[g]) != 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: file entry '%.100s': not a shard file name of its group",
                                k_manifest, name ? name : "?");
  sc_status st = read_checked(l, e, name, &p->f);
  if (st != SC_OK) return st;
  p->name = name;
  p->group = g;
  p->used = sc_calloc((size_t)p->f->n_tensors + 1, sizeof *p->used);
  if (!p->used) return nomem(l->d);
  /* the file's own word on what it is: its group, its writer (the rank in
   * its name), and the box of each key */
  const char *fg = sc_safetensors_meta_get(p->f, "group");
  const char *writer = sc_safetensors_meta_get(p->f, "writer");
  const char *boxes = sc_safetensors_meta_get(p->f, "boxes");
  const char *digits = name + strlen(k_groups[g]) + 5;
  if (fg && strcmp(fg, k_groups[g]) != 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s says it holds %.20s, not %s: renamed or swapped files", name,
                                fg, k_groups[g]);
  if (!writer && !boxes) return SC_OK; /* saved before shards recorded their boxes */
  char *end = NULL;
  long w = writer ? strtol(writer, &end, 10) : -1;
  if (!writer || !boxes || !end || *end || w != strtol(digits, NULL, 10))
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s says it was written by rank %.20s, not the rank its name "
                                "gives (or lacks its boxes): renamed or swapped files", name,
                                writer ? writer : "?");
  p->boxes = json_loads(boxes, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(p->boxes))
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: __metadata__ 'boxes' is not a JSON object", name);
  return SC_OK;
}

/* Whether part p's own record of key's box (when it has one) is the box
 * (off, bs) of the manifest. */
static bool box_agrees(const part *p, const char *key, int32_t rank, const int64_t *off,
                       const int64_t *bs) {
  if (!p->boxes) return true;
  json_t *b = json_object_get(p->boxes, key);
  int64_t fo[SC_MAX_RANK], fs[SC_MAX_RANK];
  if (!int_list(json_object_get(b, "offsets"), rank, fo) ||
      !int_list(json_object_get(b, "shape"), rank, fs))
    return false;
  return memcmp(fo, off, (size_t)rank * sizeof *off) == 0 &&
         memcmp(fs, bs, (size_t)rank * sizeof *bs) == 0;
}

/* Group g's tensors, each assembled from its shards. */
static sc_status assemble(loader *l, json_t *list, sc_ckpt_group g, part *parts, int32_t n_parts) {
  if (!json_is_array(list))
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'tensors.%s' missing or not an array", k_manifest,
                                k_groups[g]);
  size_t n = json_array_size(list);
  sc_ckpt *c = l->c;
  c->tensors[g] = sc_calloc(n + 1, sizeof *c->tensors[g]);
  c->whole[g] = sc_calloc(n + 1, sizeof *c->whole[g]);
  if (!c->tensors[g] || !c->whole[g]) return nomem(l->d);
  c->n[g] = (int32_t)n;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(list, i);
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    json_t *shape = json_object_get(e, "shape"), *shards = json_object_get(e, "shards");
    sc_ckpt_tensor *t = &c->tensors[g][i];
    t->dtype = dt ? sc_safetensors_dtype_parse(dt) : SC_DTYPE_UNDEF;
    t->rank = json_is_array(shape) ? (int32_t)json_array_size(shape) : -1;
    if (!name || t->dtype == SC_DTYPE_UNDEF || t->rank < 0 || t->rank > SC_MAX_RANK ||
        !int_list(shape, t->rank, t->dims) || !json_is_array(shards))
      return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                  "%s: tensors.%s[%zu] needs 'name', a known 'dtype', a 'shape' "
                                  "and 'shards'", k_manifest, k_groups[g], i);
    for (size_t j = 0; j < i; j++)
      if (strcmp(c->tensors[g][j].name, name) == 0)
        return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                    "%s: tensor '%.200s' listed twice", k_manifest, name);
    if (!(t->name = sc_strdup(name))) return nomem(l->d); /* outlives the manifest */
    size_t esz = sc_dtype_size(t->dtype);
    int64_t numel = volume(t->rank, t->dims);
    if (numel < 0 || numel > ((int64_t)1 << 40) / (int64_t)(esz ? esz : 1))
      return sc_diag_set_prefixed(l->d, SC_ERR_LIMIT, l->dir, "%s: tensor '%.200s' too large",
                                  k_manifest, name);
    if (!(c->whole[g][i] = sc_calloc(numel > 0 ? (size_t)numel * esz : 1, 1)))
      return nomem(l->d);
    t->data = c->whole[g][i];
    int64_t covered = 0;
    size_t ns = json_array_size(shards);
    for (size_t k = 0; k < ns; k++) {
      json_t *sh = json_array_get(shards, k);
      const char *file = json_string_value(json_object_get(sh, "file"));
      const char *key = json_string_value(json_object_get(sh, "key"));
      int64_t off[SC_MAX_RANK] = {0}, bs[SC_MAX_RANK] = {0};
      const part *p = NULL;
      for (int32_t q = 0; file && q < n_parts && !p; q++)
        if (strcmp(parts[q].name, file) == 0 && parts[q].group == (int)g) p = &parts[q];
      const sc_tensor_view *x = p && key ? sc_safetensors_find(p->f, key) : NULL;
      bool ok = x && int_list(json_object_get(sh, "offsets"), t->rank, off) &&
                int_list(json_object_get(sh, "shape"), t->rank, bs) && x->dtype == t->dtype &&
                x->rank == t->rank && !p->used[x - p->f->tensors];
      for (int32_t a = 0; ok && a < t->rank; a++)
        ok = x->dims[a] == bs[a] && off[a] + bs[a] <= t->dims[a];
      for (size_t m = 0; ok && m < k; m++) { /* no overlap with the earlier shards */
        json_t *o = json_array_get(shards, m);
        int64_t mo[SC_MAX_RANK], ms[SC_MAX_RANK];
        int_list(json_object_get(o, "offsets"), t->rank, mo);
        int_list(json_object_get(o, "shape"), t->rank, ms);
        ok = !boxes_meet(t->rank, off, bs, mo, ms);
      }
      if (!ok)
        return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                    "%s: tensor '%.200s', shard %zu: not in a listed file of its "
                                    "group, of another dtype or shape, outside the tensor or "
                                    "overlapping another shard", k_manifest, name, k);
      if (!box_agrees(p, key, t->rank, off, bs))
        return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                    "%s: tensor '%.200s', shard %zu: %s records key '%.200s' as "
                                    "another box of the tensor than the manifest's offsets: "
                                    "swapped or renamed shard files", k_manifest, name, k,
                                    p->name, key);
      p->used[x - p->f->tensors] = true;
      int64_t zero[SC_MAX_RANK] = {0};
      sc_ckpt_copy_box(esz, t->rank, bs, x->data, bs, zero, t->data, t->dims, off);
      covered += volume(t->rank, bs);
    }
    if (covered != numel)
      return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                  "%s: the shards of tensor '%.200s' cover %lld of its %lld "
                                  "elements", k_manifest, name, (long long)covered,
                                  (long long)numel);
  }
  return SC_OK;
}

/* Version 2: every listed file, then each group's tensors (whole, with
 * their names, owned by the checkpoint). */
static sc_status load_v2(loader *l, json_t *files, json_t *tensors) {
  size_t nf = json_array_size(files);
  part *parts = sc_calloc(nf + 1, sizeof *parts);
  sc_status st = parts ? SC_OK : nomem(l->d);
  for (size_t i = 0; st == SC_OK && i < nf; i++) {
    st = read_part(l, json_array_get(files, i), &parts[i]);
    for (size_t j = 0; st == SC_OK && j < i; j++)
      if (strcmp(parts[j].name, parts[i].name) == 0)
        st = sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir, "%s: file %s listed twice",
                                  k_manifest, parts[i].name);
  }
  for (int g = 0; st == SC_OK && g < SC_CKPT_GROUP_COUNT; g++)
    st = assemble(l, json_object_get(tensors, k_groups[g]), (sc_ckpt_group)g, parts, (int32_t)nf);
  for (size_t i = 0; st == SC_OK && i < nf; i++)
    for (int32_t k = 0; st == SC_OK && k < parts[i].f->n_tensors; k++)
      if (!parts[i].used[k])
        st = sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                  "%s holds '%.200s', which no shard of the manifest names",
                                  parts[i].name, parts[i].f->tensors[k].name);
  for (size_t i = 0; parts && i < nf; i++) {
    sc_safetensors_destroy(parts[i].f);
    sc_free(parts[i].used);
    json_decref(parts[i].boxes);
  }
  sc_free(parts);
  return st;
}

sc_status sc_ckpt_load(const char *dir, sc_ckpt **out, sc_diag *d) {
  *out = NULL;
  loader l = {.dir = dir, .d = d, .c = sc_calloc(1, sizeof(sc_ckpt))};
  if (!l.c) return nomem(d);
  json_t *root = NULL;
  sc_status st = read_manifest(&l, &root);
  if (st == SC_OK) st = read_state(&l, root);
  json_t *files = json_object_get(root, "files"), *tensors = json_object_get(root, "tensors");
  if (st == SC_OK && (!json_is_array(files) || !json_is_object(tensors)))
    st = sc_diag_set_prefixed(d, SC_ERR_PARSE, dir,
                              "%s: 'files' (array) or 'tensors' (object) missing", k_manifest);
  bool v2 = st == SC_OK && json_integer_value(json_object_get(root, "format_version")) == 2;
  sc_progress pr; /* the bytes the manifest's files hold, read */
  int64_t total = 0;
  for (size_t i = 0; st == SC_OK && i < json_array_size(files); i++) {
    json_int_t b = json_integer_value(json_object_get(json_array_get(files, i), "bytes"));
    if (b > 0 && b <= k_max_int) total += b; /* checked again when read */
  }
  sc_progress_begin(&pr, "loading checkpoint", total, true);
  l.progress = &pr;
  if (v2) st = load_v2(&l, files, tensors);
  for (int g = 0; !v2 && st == SC_OK && g < SC_CKPT_GROUP_COUNT; g++) {
    st = read_group_file(&l, files, (sc_ckpt_group)g);
    if (st == SC_OK)
      st = match_tensors(&l, json_object_get(tensors, k_groups[g]), (sc_ckpt_group)g);
  }
  sc_progress_end(&pr);
  json_decref(root);
  if (st != SC_OK) {
    sc_ckpt_destroy(l.c);
    return st;
  }
  *out = l.c;
  return SC_OK;
}

const sc_ckpt_state *sc_ckpt_state_of(const sc_ckpt *c) { return &c->state; }

int32_t sc_ckpt_count(const sc_ckpt *c, sc_ckpt_group g) {
  return (unsigned)g < SC_CKPT_GROUP_COUNT ? c->n[g] : 0;
}

const sc_ckpt_tensor *sc_ckpt_tensor_at(const sc_ckpt *c, sc_ckpt_group g, int32_t i) {
  return i >= 0 && i < sc_ckpt_count(c, g) ? &c->tensors[g][i] : NULL;
}

const sc_ckpt_tensor *sc_ckpt_find(const sc_ckpt *c, sc_ckpt_group g, const char *name) {
  for (int32_t i = 0; i < sc_ckpt_count(c, g); i++)
    if (strcmp(c->tensors[g][i].name, name) == 0) return &c->tensors[g][i];
  return NULL;
}

void sc_ckpt_destroy(sc_ckpt *c) {
  if (!c) return;
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++) {
    sc_safetensors_destroy(c->files[g]);
    for (int32_t i = 0; c->whole[g] && i < c->n[g]; i++) {
      sc_free(c->whole[g][i]);
      sc_free((void *)c->tensors[g][i].name);
    }
    sc_free(c->whole[g]);
    sc_free(c->tensors[g]);
  }
  sc_free(c->optimizer);
  free(c->optimizer_json); /* jansson's allocation */
  sc_free(c);
}
