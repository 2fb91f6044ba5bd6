/* checkpoint.c — saving and loading training checkpoints (checkpoint.h).
 *
 * Save: check the state and build the manifest's state part first (nothing
 * is created for a bad argument), refuse a DIR that is neither empty nor a
 * checkpoint, then write the two safetensors files and the manifest (last)
 * into the temporary folder, each fsync'd as it is closed, fsync the
 * folder, swap it with DIR, fsync DIR's parent. The file names inside the
 * folder are fixed (k_files); the manifest records them but a loader never
 * opens a name taken from the text.
 *
 * Load: manifest first (checksum over its canonical form, then each
 * field), then per group: read the file whole, compare size and SHA-256
 * with the manifest, parse it as safetensors, match its tensors one to one
 * with the manifest's list. The loaded checkpoint keeps the file buffers;
 * its tensors point into them. */
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
#include "runtime/checkpoint.h"

enum { MAX_MANIFEST_BYTES = 256 << 20 };

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

/* Closes f after flushing it to the disk. */
static bool close_synced(FILE *f) {
  bool ok = fflush(f) == 0 && !ferror(f) && fsync(fileno(f)) == 0;
  return fclose(f) == 0 && ok;
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

/* Writes group g's file into tmp and records it in files. */
static sc_status write_group(const char *dir, const char *tmp, sc_ckpt_group g,
                             const sc_ckpt_tensor *t, int32_t n, json_t *files, sc_diag *d) {
  char path[4096];
  if (!join(path, sizeof path, tmp, k_files[g]))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "path too long");
  if (injected_failure((int)g))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "%s: injected failure (SHARDC_TEST_CKPT_FAIL_AFTER)", k_files[g]);
  FILE *f = fopen(path, "wbx");
  if (!f)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: cannot create: %s", k_files[g],
                                strerror(errno));
  const sc_safetensors_meta meta[] = {{"format", SC_CKPT_FORMAT}, {"group", k_groups[g]}};
  uint8_t digest[32];
  int64_t bytes = 0;
  sc_status st = sc_safetensors_write_stream(f, k_files[g], t, n, meta, 2, digest, &bytes, d);
  if (!close_synced(f) && st == SC_OK)
    st = sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: write failed: %s", k_files[g],
                              strerror(errno));
  if (st != SC_OK) return st;
  char hex[65];
  sc_sha256_digest_hex(digest, hex);
  json_t *e = json_pack("{s:s, s:s, s:I, s:s}", "name", k_files[g], "group", k_groups[g], "bytes",
                        (json_int_t)bytes, "sha256", hex);
  return e && json_array_append_new(files, e) == 0 ? SC_OK : nomem(d);
}

static sc_status write_manifest(const char *dir, const char *tmp, json_t *root, sc_diag *d) {
  char hex[65], path[4096];
  if (!manifest_digest(root, hex) || json_object_set_new(root, k_self_sha, json_string(hex)))
    return nomem(d);
  if (!join(path, sizeof path, tmp, k_manifest))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "path too long");
  if (injected_failure(SC_CKPT_GROUP_COUNT))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "%s: injected failure (SHARDC_TEST_CKPT_FAIL_AFTER)", k_manifest);
  FILE *f = fopen(path, "wbx");
  if (!f)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: cannot create: %s", k_manifest,
                                strerror(errno));
  bool ok = json_dumpf(root, f, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 && fputc('\n', f) != EOF;
  if (!close_synced(f) || !ok)
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s: write failed: %s", k_manifest,
                                strerror(errno));
  return SC_OK;
}

/* Refuses an existing dir that is neither empty nor a checkpoint. */
static sc_status check_target(const char *dir, sc_diag *d) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) return SC_OK; /* sc_dir_commit_begin reports other errors */
  if (!S_ISDIR(sb.st_mode))
    return sc_diag_set_prefixed(d, SC_ERR_IO, dir,
                                "exists and is %s, not a shardc checkpoint; not replacing it",
                                sc_file_kind_name(sb.st_mode));
  if (sc_ckpt_is_dir(dir)) return SC_OK;
  DIR *dd = opendir(dir);
  if (!dd) return sc_diag_set_prefixed(d, SC_ERR_IO, dir, "%s", strerror(errno));
  bool empty = true;
  for (struct dirent *e; empty && (e = readdir(dd)) != NULL;)
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(dd);
  return empty ? SC_OK
               : sc_diag_set_prefixed(
                     d, SC_ERR_IO, dir,
                     "exists and is not a shardc checkpoint (no %s of format %s); not "
                     "replacing it",
                     k_manifest, SC_CKPT_FORMAT);
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

/* Removes "DIR.tmp-PID-N" folders left by saves whose process is gone,
 * when they hold nothing but a checkpoint's files. */
static void remove_stale_temporaries(const char *dir) {
  char parent[4096], prefix[1024];
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  size_t base = len;
  while (base > 0 && dir[base - 1] != '/') base--;
  if (len - base + 6 >= sizeof prefix) return;
  snprintf(prefix, sizeof prefix, "%.*s.tmp-", (int)(len - base), dir + base);
  parent_of(dir, parent, sizeof parent);
  DIR *dd = opendir(parent);
  if (!dd) return;
  for (struct dirent *e; (e = readdir(dd)) != NULL;) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    char *end;
    long pid = strtol(e->d_name + strlen(prefix), &end, 10);
    if (pid <= 0 || *end != '-' || pid == (long)getpid() ||
        !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
      continue;
    char path[4096], file[4096];
    if (!join(path, sizeof path, parent, e->d_name)) continue;
    bool ours = true;
    DIR *td = opendir(path);
    for (struct dirent *f; td && ours && (f = readdir(td)) != NULL;)
      ours = strcmp(f->d_name, ".") == 0 || strcmp(f->d_name, "..") == 0 ||
             strcmp(f->d_name, k_manifest) == 0 || strcmp(f->d_name, k_files[0]) == 0 ||
             strcmp(f->d_name, k_files[1]) == 0;
    if (td) closedir(td);
    if (!td || !ours) continue;
    for (int k = 0; k <= SC_CKPT_GROUP_COUNT; k++)
      if (join(file, sizeof file, path, k < SC_CKPT_GROUP_COUNT ? k_files[k] : k_manifest))
        unlink(file);
    rmdir(path);
  }
  closedir(dd);
}

sc_status sc_ckpt_save(const char *dir, const sc_ckpt_state *st, const sc_ckpt_tensor *weights,
                       int32_t n_w, const sc_ckpt_tensor *opt, int32_t n_o, sc_diag *d) {
  if (!dir || !dir[0] || !st || n_w < 0 || n_o < 0 || (n_w > 0 && !weights) || (n_o > 0 && !opt))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "checkpoint: bad arguments");
  const sc_ckpt_tensor *groups[SC_CKPT_GROUP_COUNT] = {weights, opt};
  const int32_t counts[SC_CKPT_GROUP_COUNT] = {n_w, n_o};
  json_t *root =
      json_pack("{s:s, s:i}", "format", SC_CKPT_FORMAT, "format_version", SC_CKPT_FORMAT_VERSION);
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
  for (int g = 0; s == SC_OK && g < SC_CKPT_GROUP_COUNT; g++) {
    s = write_group(dir, c.tmp, (sc_ckpt_group)g, groups[g], counts[g], files, d);
    json_t *list = s == SC_OK ? tensor_list((sc_ckpt_group)g, groups[g], counts[g]) : NULL;
    if (s == SC_OK && (!list || json_object_set_new(tensors, k_groups[g], list))) s = nomem(d);
  }
  if (s == SC_OK) {
    json_object_set_new(root, "files", files);
    json_object_set_new(root, "tensors", tensors);
    files = tensors = NULL;
    s = write_manifest(dir, c.tmp, root, d);
  }
  if (s == SC_OK && !sync_dir(c.tmp))
    s = sc_diag_set_prefixed(d, SC_ERR_IO, dir, "cannot flush the new checkpoint: %s",
                             strerror(errno));
  json_decref(root);
  json_decref(files);
  json_decref(tensors);
  s = sc_dir_commit_finish(&c, s, d);
  char parent[4096];
  parent_of(dir, parent, sizeof parent);
  if (s == SC_OK && !sync_dir(parent))
    s = sc_diag_set_prefixed(d, SC_ERR_IO, dir, "cannot flush the folder %s: %s", parent,
                             strerror(errno));
  return s;
}

/* ============================================================= loading */

struct sc_ckpt {
  sc_ckpt_state state;
  char *optimizer;                            /* state.optimizer */
  char *optimizer_json;                       /* state.optimizer_json (jansson's) */
  sc_safetensors *files[SC_CKPT_GROUP_COUNT]; /* own the data */
  int32_t n[SC_CKPT_GROUP_COUNT];
  sc_ckpt_tensor *tensors[SC_CKPT_GROUP_COUNT]; /* manifest order, into files */
};

typedef struct loader {
  const char *dir;
  sc_diag *d;
  sc_ckpt *c;
} loader;

static sc_status get_count(loader *l, json_t *o, const char *key, const char *where, int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: '%s' missing or not an integer >= 0", where, key);
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

/* Reads group g's file, checks its size and SHA-256, parses it. */
static sc_status read_group_file(loader *l, json_t *files, sc_ckpt_group g) {
  const char *f = k_files[g];
  json_t *e = file_entry(files, g);
  int64_t bytes = 0;
  const char *sha = json_string_value(json_object_get(e, "sha256"));
  if (!e)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir, "%s: no entry for %s in 'files'",
                                k_manifest, f);
  sc_status st = get_count(l, e, "bytes", f, &bytes);
  if (st != SC_OK) return st;
  if (!sha || strlen(sha) != 64)
    return sc_diag_set_prefixed(l->d, SC_ERR_PARSE, l->dir,
                                "%s: 'sha256' of %s missing or not 64 hex digits", k_manifest, f);
  char path[4096];
  if (!join(path, sizeof path, l->dir, f))
    return sc_diag_set_prefixed(l->d, SC_ERR_IO, l->dir, "path too long");
  char *data = NULL;
  size_t n = 0;
  sc_diag fd;
  sc_diag_clear(&fd);
  st = sc_file_read_all(path, f, bytes < INT64_MAX ? bytes + 1 : bytes, &data, &n, &fd);
  if (st == SC_ERR_LIMIT)
    return sc_diag_set_prefixed(l->d, SC_ERR_INVALID, l->dir,
                                "%s: larger than the %lld bytes the manifest records", f,
                                (long long)bytes);
  if (st != SC_OK) return sc_diag_set_prefixed(l->d, st, l->dir, "%s", fd.msg);
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
  st = sc_safetensors_parse(data, n, f, &l->c->files[g], &fd);
  return st == SC_OK ? SC_OK : sc_diag_set_prefixed(l->d, st, l->dir, "%s", fd.msg);
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
  sc_diag fd;
  sc_diag_clear(&fd);
  sc_status st = sc_file_read_all(path, k_manifest, MAX_MANIFEST_BYTES, &text, &n, &fd);
  if (st != SC_OK) return sc_diag_set_prefixed(l->d, st, l->dir, "%s", fd.msg);
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
  if (json_integer_value(v) != SC_CKPT_FORMAT_VERSION)
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
  for (int g = 0; st == SC_OK && g < SC_CKPT_GROUP_COUNT; g++) {
    st = read_group_file(&l, files, (sc_ckpt_group)g);
    if (st == SC_OK)
      st = match_tensors(&l, json_object_get(tensors, k_groups[g]), (sc_ckpt_group)g);
  }
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
    sc_free(c->tensors[g]);
  }
  sc_free(c->optimizer);
  free(c->optimizer_json); /* jansson's allocation */
  sc_free(c);
}
