/* bundle_load.c — opens a bundle directory written by `shardc compile`.
 *
 * Order of checks (nothing is used before it is verified):
 *   1. manifest.json: at most 16 MiB, strict JSON, the right format and
 *      version, a known target, safe file names (no '/', no leading '.'),
 *      each listed once, the files the target needs all listed;
 *   2. every listed file: a regular file of the listed size whose SHA-256
 *      matches (weights.bin stays mapped, read-only);
 *   3. program.json parsed and validated against the weights
 *      (sc_program_read_json: ids, sizes, kir_verify);
 *   4. the manifest's inputs, outputs, arena_bytes and weights_bytes agree
 *      with the program;
 *   5. a training bundle ("kind": "training", training.json and
 *      params.bin listed): training.json checked against the program and
 *      params.bin (codegen/train_manifest.h), which stays mapped;
 *   6. cpu: the host has every CPU feature kernels.o was compiled for
 *      (manifest "cpu"), and kernels.o links with every kernel of the
 *      program defined (sc_cpu_load_object).
 * Between the hash check and the end of the run, weights.bin must not be
 * rewritten in place (it is mapped, not copied). */
#include "runtime/bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/program_json.h"

enum { MANIFEST_MAX_BYTES = 16 << 20, MAX_FILES = 64 };

typedef struct mapped {
  void *data; /* NULL when size 0 */
  size_t bytes;
} mapped;

static void unmap(mapped *m) {
  if (m->data) munmap(m->data, m->bytes);
  m->data = NULL;
  m->bytes = 0;
}

static char *path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = sc_malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, name);
  return s;
}

static sc_status bad(sc_diag *d, sc_status st, const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sc_status bad(sc_diag *d, sc_status st, const char *dir, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sc_status r = sc_diag_set(d, st, NULL, NULL, "bundle: %s", msg);
  sc_diag_set_file(d, dir);
  return r;
}

/* Maps DIR/name read-only; want_bytes >= 0 demands that size. */
static sc_status map_file(const char *dir, const char *name, int64_t want_bytes, int64_t max_bytes,
                          mapped *out, sc_diag *d) {
  out->data = NULL;
  out->bytes = 0;
  char *path = path_join(dir, name);
  if (!path) return bad(d, SC_ERR_NOMEM, dir, "out of memory");
  /* O_NONBLOCK: a FIFO planted in a bundle is refused below, not waited on */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  sc_free(path);
  if (fd < 0) return bad(d, SC_ERR_IO, dir, "%s: cannot open: %s", name, strerror(errno));
  struct stat sb;
  sc_status st = SC_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = bad(d, SC_ERR_IO, dir, "%s: not a regular file", name);
  } else if (want_bytes >= 0 && (int64_t)sb.st_size != want_bytes) {
    st = bad(d, SC_ERR_INVALID, dir, "%s: %lld bytes, the manifest says %lld (corrupted bundle)",
             name, (long long)sb.st_size, (long long)want_bytes);
  } else if (max_bytes >= 0 && (int64_t)sb.st_size > max_bytes) {
    st = bad(d, SC_ERR_LIMIT, dir, "%s: larger than %lld bytes", name, (long long)max_bytes);
  } else if (sb.st_size > 0) {
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) st = bad(d, SC_ERR_IO, dir, "%s: cannot map: %s", name, strerror(errno));
    else {
      out->data = p;
      out->bytes = (size_t)sb.st_size;
    }
  }
  close(fd);
  return st;
}

bool sc_bundle_is_dir(const char *path) {
  struct stat sb;
  if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
  char *m = path_join(path, "manifest.json");
  bool ok = m && stat(m, &sb) == 0 && S_ISREG(sb.st_mode);
  sc_free(m);
  return ok;
}

/* A cuda bundle's kernels.cu, kernels.<arch>.ptx (text) or
 * kernels.<arch>.cubin (an ELF image), hashed already, kept in memory. */
static sc_status keep_cuda_code(sc_bundle *b, const char *name, const mapped *fm,
                                const char *dir, sc_diag *d) {
  char **slot = NULL;
  bool binary = false;
  int32_t arch = -1;
  if (strcmp(name, "kernels.cu") == 0) slot = &b->cuda_src;
  for (int32_t i = 0; !slot && i < b->n_archs; i++) {
    char ptx[96], cubin[96];
    snprintf(ptx, sizeof ptx, "kernels.%s.ptx", b->archs[i]);
    snprintf(cubin, sizeof cubin, "kernels.%s.cubin", b->archs[i]);
    if (strcmp(name, ptx) == 0) slot = &b->ptx[i];
    else if (strcmp(name, cubin) == 0) slot = &b->cubin[i], binary = true, arch = i;
  }
  if (!slot) return SC_OK;
  /* a CUBIN: an ELF file (the driver reads it through its header) */
  static const char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (binary && (fm->bytes < 64 || memcmp(fm->data, elf, sizeof elf) != 0))
    return bad(d, SC_ERR_INVALID, dir, "%s is not an ELF image (a CUBIN)", name);
  if (!binary && memchr(fm->data ? fm->data : "", 0, fm->bytes))
    return bad(d, SC_ERR_INVALID, dir, "%s holds a NUL byte", name);
  sc_free(*slot);
  if (!(*slot = sc_malloc(fm->bytes + 1))) return bad(d, SC_ERR_NOMEM, dir, "out of memory");
  if (fm->bytes) memcpy(*slot, fm->data, fm->bytes);
  (*slot)[fm->bytes] = 0;
  if (arch >= 0) b->cubin_bytes[arch] = fm->bytes;
  return SC_OK;
}

sc_cuda_code sc_bundle_cuda_code(const sc_bundle *b) {
  sc_cuda_code c = {0};
  if (!b || strcmp(b->target, "cuda") != 0) return c;
  c.source = b->cuda_src;
  c.n_archs = b->n_archs;
  c.archs = (const char(*)[32])b->archs;
  c.ptx = b->ptx;
  c.cubin = b->cubin;
  return c;
}

void sc_bundle_destroy(sc_bundle *b) {
  if (!b) return;
  sc_cpu_module_destroy(b->kernels);
  sc_free(b->cpu);
  sc_free(b->cpu_features);
  sc_program_destroy(b->program);
  sc_train_manifest_destroy(b->train);
  if (b->params) munmap(b->params, b->params_bytes);
  if (b->weights) munmap(b->weights, b->weights_bytes);
  for (int32_t i = 0; b->ptx && i < b->n_archs; i++) sc_free(b->ptx[i]);
  for (int32_t i = 0; b->cubin && i < b->n_archs; i++) sc_free(b->cubin[i]);
  sc_free(b->ptx);
  sc_free(b->cubin);
  sc_free(b->cubin_bytes);
  sc_free(b->cuda_src);
  sc_free(b->archs);
  sc_free(b->dir);
  sc_free(b);
}

sc_status sc_bundle_check_kind(const sc_bundle *b, bool training, sc_diag *d) {
  sc_status st = sc_bundle_kind_check(b->train != NULL, training, d);
  if (st) sc_diag_set_file(d, b->dir);
  return st;
}

sc_status sc_bundle_kind_check(bool is_training, bool training, sc_diag *d) {
  sc_status st = SC_OK;
  if (training && !is_training)
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "an inference bundle, not a training bundle (no training.json): compile "
                     "the model with --train to train it");
  else if (!training && is_training)
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "a training bundle (compiled with --train): it is trained (shardc train "
                     "DIR), not run as a model");
  return st;
}

static bool safe_name(const char *s) {
  if (!s || !s[0] || s[0] == '.' || strlen(s) > 64) return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_' || *c == '.' || *c == '-'))
      return false;
  return strcmp(s, "manifest.json") != 0;
}

static bool is_hex64(const char *s) {
  if (!s || strlen(s) != 64) return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
  return true;
}

static json_t *find_file(json_t *files, const char *name) {
  size_t i;
  json_t *f;
  json_array_foreach(files, i, f) {
    const char *n = json_string_value(json_object_get(f, "name"));
    if (n && strcmp(n, name) == 0) return f;
  }
  return NULL;
}

/* The manifest's tensor list agrees with the program's buffers. */
static sc_status check_tensors(const char *dir, json_t *list, const char *what,
                               const sc_program *p, const int32_t *ids, int32_t n, sc_diag *d) {
  if (!json_is_array(list) || json_array_size(list) != (size_t)n)
    return bad(d, SC_ERR_INVALID, dir, "manifest.json: '%s' does not match program.json", what);
  for (int32_t i = 0; i < n; i++) {
    const sc_buffer *b = &p->buffers[ids[i]];
    json_t *t = json_array_get(list, (size_t)i);
    const char *name = json_string_value(json_object_get(t, "name"));
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    json_t *shape = json_object_get(t, "shape");
    bool ok = name && dt && json_is_array(shape) && strcmp(name, b->name ? b->name : "") == 0 &&
              sc_dtype_parse(dt) == b->dtype && json_array_size(shape) == (size_t)b->rank;
    for (int32_t k = 0; ok && k < b->rank; k++) {
      json_t *dim = json_array_get(shape, (size_t)k);
      ok = json_is_integer(dim) && json_integer_value(dim) == b->dims[k];
    }
    if (!ok)
      return bad(d, SC_ERR_INVALID, dir, "manifest.json: %s[%d] does not match program.json",
                 what, i);
  }
  return SC_OK;
}

static sc_status load(const char *dir, sc_bundle *b, sc_diag *d) {
  mapped man = {0}, prog = {0}, wts = {0}, obj = {0}, tj = {0}, par = {0};
  json_t *m = NULL;
  sc_status st = map_file(dir, "manifest.json", -1, MANIFEST_MAX_BYTES, &man, d);
  if (st) return st;
  json_error_t err;
  m = json_loadb(man.data ? man.data : "", man.bytes, JSON_REJECT_DUPLICATES, &err);
  unmap(&man);
  if (!m) return bad(d, SC_ERR_PARSE, dir, "manifest.json: line %d: %s", err.line, err.text);

  const char *fmt = json_string_value(json_object_get(m, "format"));
  json_t *ver = json_object_get(m, "format_version");
  const char *target = json_string_value(json_object_get(m, "target"));
  json_t *archs = json_object_get(m, "archs");
  json_t *files = json_object_get(m, "files");
  json_t *arena = json_object_get(m, "arena_bytes");
  json_t *wbytes = json_object_get(m, "weights_bytes");
  if (!json_is_object(m) || !fmt || strcmp(fmt, "shardc-bundle") != 0) {
    st = bad(d, SC_ERR_PARSE, dir, "manifest.json: not a shardc bundle manifest");
    goto out;
  }
  if (!json_is_integer(ver) || json_integer_value(ver) != SC_BUNDLE_FORMAT_VERSION) {
    st = bad(d, SC_ERR_UNSUPPORTED, dir,
             "manifest.json: format_version %s (this shardc reads version %d)",
             json_is_integer(ver) ? "other" : "missing", SC_BUNDLE_FORMAT_VERSION);
    goto out;
  }
  if (!target || (strcmp(target, "cpu") != 0 && strcmp(target, "cuda") != 0) ||
      !json_is_array(archs) || json_array_size(archs) > 16 || !json_is_array(files) ||
      json_array_size(files) > MAX_FILES || !json_is_integer(arena) || !json_is_integer(wbytes)) {
    st = bad(d, SC_ERR_PARSE, dir,
             "manifest.json: 'target', 'archs', 'files', 'arena_bytes' or 'weights_bytes' "
             "missing or malformed");
    goto out;
  }
  snprintf(b->target, sizeof b->target, "%s", target);
  json_t *kind = json_object_get(m, "kind");
  const char *ks = json_string_value(kind);
  bool training = ks && strcmp(ks, "training") == 0;
  if (kind && !training && !(ks && strcmp(ks, "inference") == 0)) {
    st = bad(d, SC_ERR_PARSE, dir, "manifest.json: 'kind' is neither \"inference\" nor "
             "\"training\"");
    goto out;
  }
  if (strcmp(target, "cpu") == 0) {
    json_t *cpu = json_object_get(m, "cpu");
    const char *cname = json_string_value(json_object_get(cpu, "name"));
    const char *cfeat = json_string_value(json_object_get(cpu, "features"));
    if (!json_is_object(cpu) || !cname || !cfeat || strlen(cname) > 256 ||
        strlen(cfeat) > 65536) {
      st = bad(d, SC_ERR_PARSE, dir,
               "manifest.json: 'cpu' (the CPU kernels.o was compiled for) missing or "
               "malformed");
      goto out;
    }
    b->cpu = sc_strdup(cname);
    b->cpu_features = sc_strdup(cfeat);
    if (!b->cpu || !b->cpu_features) {
      st = bad(d, SC_ERR_NOMEM, dir, "out of memory");
      goto out;
    }
  }

  /* Files: safe names, listed once, well-formed sizes and hashes. */
  size_t i;
  json_t *f;
  json_array_foreach(files, i, f) {
    const char *name = json_string_value(json_object_get(f, "name"));
    json_t *bytes = json_object_get(f, "bytes");
    const char *hash = json_string_value(json_object_get(f, "sha256"));
    if (!safe_name(name) || !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
        !is_hex64(hash)) {
      st = bad(d, SC_ERR_PARSE, dir, "manifest.json: files[%zu] is malformed", i);
      goto out;
    }
    if (find_file(files, name) != f) {
      st = bad(d, SC_ERR_INVALID, dir, "manifest.json: '%s' listed twice", name);
      goto out;
    }
  }
  /* What the target needs. */
  const char *need[5] = {"program.json", "weights.bin",
                         strcmp(target, "cpu") == 0 ? "kernels.o" : "kernels.cu",
                         "training.json", "params.bin"};
  for (int k = 0; k < (training ? 5 : 3); k++)
    if (!find_file(files, need[k])) {
      st = bad(d, SC_ERR_INVALID, dir, "manifest.json: '%s' is not listed", need[k]);
      goto out;
    }
  b->n_archs = (int32_t)json_array_size(archs);
  b->archs = sc_calloc((size_t)b->n_archs + 1, sizeof *b->archs);
  b->ptx = sc_calloc((size_t)b->n_archs + 1, sizeof *b->ptx);
  b->cubin = sc_calloc((size_t)b->n_archs + 1, sizeof *b->cubin);
  b->cubin_bytes = sc_calloc((size_t)b->n_archs + 1, sizeof *b->cubin_bytes);
  if (!b->archs || !b->ptx || !b->cubin || !b->cubin_bytes) {
    st = bad(d, SC_ERR_NOMEM, dir, "out of memory");
    goto out;
  }
  json_t *a;
  json_array_foreach(archs, i, a) {
    const char *s = json_string_value(a);
    char ptx[96];
    if (!safe_name(s) || strlen(s) >= sizeof b->archs[0]) {
      st = bad(d, SC_ERR_PARSE, dir, "manifest.json: archs[%zu] is malformed", i);
      goto out;
    }
    snprintf(b->archs[i], sizeof b->archs[0], "%s", s);
    snprintf(ptx, sizeof ptx, "kernels.%s.ptx", s);
    if (!find_file(files, ptx)) {
      st = bad(d, SC_ERR_INVALID, dir, "manifest.json: '%s' is not listed", ptx);
      goto out;
    }
  }

  /* Sizes and hashes of every file before any is used. */
  json_array_foreach(files, i, f) {
    const char *name = json_string_value(json_object_get(f, "name"));
    int64_t bytes = (int64_t)json_integer_value(json_object_get(f, "bytes"));
    const char *hash = json_string_value(json_object_get(f, "sha256"));
    mapped fm;
    if ((st = map_file(dir, name, bytes, -1, &fm, d))) goto out;
    char hex[65];
    sc_sha256_hex(fm.data ? fm.data : "", fm.bytes, hex);
    if (strcmp(hex, hash) != 0) {
      unmap(&fm);
      st = bad(d, SC_ERR_INVALID, dir,
               "%s: SHA-256 %.12s... differs from the manifest's %.12s... (corrupted bundle)", name,
               hex, hash);
      goto out;
    }
    if (strcmp(name, "program.json") == 0) prog = fm;
    else if (strcmp(name, "weights.bin") == 0) wts = fm;
    else if (strcmp(name, "kernels.o") == 0 && strcmp(target, "cpu") == 0) obj = fm;
    else if (training && strcmp(name, "training.json") == 0) tj = fm;
    else if (training && strcmp(name, "params.bin") == 0) par = fm;
    else if (strcmp(target, "cuda") == 0 && (st = keep_cuda_code(b, name, &fm, dir, d))) {
      unmap(&fm);
      goto out;
    } else unmap(&fm);
  }
  if ((int64_t)wts.bytes != json_integer_value(wbytes)) {
    st = bad(d, SC_ERR_INVALID, dir, "manifest.json: weights_bytes differs from weights.bin");
    goto out;
  }

  sc_diag pd = {0};
  sc_diag_clear(&pd);
  st = sc_program_read_json(prog.data ? prog.data : "", prog.bytes, wts.data,
                            (int64_t)wts.bytes, &b->program, &pd);
  if (st) {
    bad(d, st, dir, "%s", pd.msg);
    goto out;
  }
  b->weights = wts.data;
  b->weights_bytes = wts.bytes;
  wts.data = NULL;
  const sc_program *p = b->program;
  if (json_integer_value(arena) != p->arena_bytes) {
    st = bad(d, SC_ERR_INVALID, dir, "manifest.json: arena_bytes differs from program.json");
    goto out;
  }
  if ((st = check_tensors(dir, json_object_get(m, "inputs"), "inputs", p, p->inputs,
                          p->n_inputs, d)))
    goto out;
  if ((st = check_tensors(dir, json_object_get(m, "outputs"), "outputs", p, p->outputs,
                          p->n_outputs, d)))
    goto out;
  if (training) { /* params.bin stays mapped: the manifest points into it */
    sc_diag td = {0};
    sc_diag_clear(&td);
    st = sc_train_manifest_read_json(tj.data, tj.bytes, p, par.data, (int64_t)par.bytes,
                                     &b->train, &td);
    if (st) bad(d, st, dir, "training.json: %s", td.msg);
    else b->params = par.data, b->params_bytes = par.bytes, par.data = NULL;
  }
  if (!st && strcmp(target, "cpu") == 0) {
    sc_diag cd = {0};
    sc_diag_clear(&cd);
    st = sc_cpu_check_host_features(b->cpu, b->cpu_features, &cd);
    if (!st) st = sc_cpu_load_object(p, obj.data, obj.bytes, &b->kernels, &cd);
    if (st) bad(d, st, dir, "%s", cd.msg);
  }
out:
  unmap(&tj);
  unmap(&par);
  unmap(&obj);
  unmap(&prog);
  unmap(&wts);
  json_decref(m);
  return st;
}

sc_status sc_bundle_load(const char *dir, sc_bundle **out, sc_diag *diag) {
  *out = NULL;
  sc_bundle *b = sc_calloc(1, sizeof *b);
  if (!b || !(b->dir = sc_strdup(dir))) {
    sc_free(b);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  sc_status st = load(dir, b, diag);
  if (st) {
    sc_bundle_destroy(b);
    return st;
  }
  *out = b;
  return SC_OK;
}
