/* bundle.c — the bundle writer (`shardc compile -o DIR`).
 *
 * The writer lays the CONST buffers out in weights.bin (each 64-byte
 * aligned, zero padding between), writes program.json with their offsets,
 * the target's code (cpu: kernels.o through sc_cpu_emit_object; cuda:
 * kernels.cu and one kernels.<arch>.ptx per architecture through NVRTC),
 * with a training manifest (sc_bundle_opts.train) also params.bin and
 * training.json (codegen/train_manifest.h),
 * hashes every file as it is written, and writes manifest.json last, all
 * into a temporary sibling of the bundle directory that then replaces it
 * whole (sc_dir_commit, ir/fileio.h). Layout and schemas: docs/bundle.md.
 * The loader is runtime/bundle_load.c; the parts both share (program.json,
 * SHA-256) are codegen/program_json.h. */
#include "codegen/bundle.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#endif

#ifndef SHARDC_VERSION
#define SHARDC_VERSION "0.1.0"
#endif

void sc_bundle_opts_init(sc_bundle_opts *o) {
  memset(o, 0, sizeof *o);
  o->target = SC_BUNDLE_CPU;
  sc_cpu_opts_init(&o->cpu);
}

const char *sc_bundle_target_name(sc_bundle_target t) {
  return t == SC_BUNDLE_CUDA ? "cuda" : "cpu";
}

typedef struct writer {
  const char *dir;
  sc_diag *diag;
  json_t *files; /* manifest "files" */
} writer;

static char *path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = sc_malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, name);
  return s;
}

static void add_file(writer *w, const char *name, int64_t bytes, const char hex[65]) {
  json_t *f = json_object();
  json_object_set_new(f, "name", json_string(name));
  json_object_set_new(f, "bytes", json_integer(bytes));
  json_object_set_new(f, "sha256", json_string(hex));
  json_array_append_new(w->files, f);
}

/* Writes bytes to DIR/name and records it in the manifest. */
static sc_status write_file(writer *w, const char *name, const void *data, size_t n,
                            bool listed) {
  char *path = path_join(w->dir, name);
  if (!path) return sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  FILE *f = fopen(path, "wb");
  bool ok = f && (n == 0 || fwrite(data, 1, n, f) == n);
  if (f && fclose(f) != 0) ok = false;
  sc_status st = SC_OK;
  if (!ok) st = sc_diag_set(w->diag, SC_ERR_IO, NULL, NULL, "%s: cannot write: %s", path,
                            strerror(errno));
  sc_free(path);
  if (st == SC_OK && listed) {
    char hex[65];
    sc_sha256_hex(data, n, hex);
    add_file(w, name, (int64_t)n, hex);
  }
  return st;
}

/* A file of pieces, each at its offset (SC_BUNDLE_WEIGHT_ALIGN aligned,
 * in increasing order; -1: not in the file), zero padding between,
 * streamed (a big model's weights are not copied in memory): weights.bin
 * and params.bin. */
typedef struct pieces {
  int32_t n;
  const void **data;
  int64_t *bytes, *offsets;
  int64_t total;
} pieces;

static sc_status write_pieces(writer *w, const char *name, const pieces *pc) {
  char *path = path_join(w->dir, name);
  if (!path) return sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  FILE *f = fopen(path, "wb");
  if (!f) {
    sc_status st = sc_diag_set(w->diag, SC_ERR_IO, NULL, NULL, "%s: cannot create: %s", path,
                               strerror(errno));
    sc_free(path);
    return st;
  }
  sc_sha256 sh;
  sc_sha256_init(&sh);
  static const uint8_t zeros[SC_BUNDLE_WEIGHT_ALIGN];
  int64_t pos = 0;
  bool ok = true;
  for (int32_t i = 0; i < pc->n && ok; i++) {
    if (pc->offsets[i] < 0) continue;
    SC_ASSERT(pc->offsets[i] >= pos && pc->offsets[i] - pos < SC_BUNDLE_WEIGHT_ALIGN);
    size_t padn = (size_t)(pc->offsets[i] - pos);
    ok = padn == 0 || fwrite(zeros, 1, padn, f) == padn;
    sc_sha256_update(&sh, zeros, padn);
    if (ok && pc->bytes[i] > 0) {
      ok = fwrite(pc->data[i], 1, (size_t)pc->bytes[i], f) == (size_t)pc->bytes[i];
      sc_sha256_update(&sh, pc->data[i], (size_t)pc->bytes[i]);
    }
    pos = pc->offsets[i] + pc->bytes[i];
  }
  SC_ASSERT(!ok || pos == pc->total);
  if (fclose(f) != 0) ok = false;
  sc_status st = SC_OK;
  if (!ok) {
    st = sc_diag_set(w->diag, SC_ERR_IO, NULL, NULL, "%s: cannot write: %s", path,
                     strerror(errno));
  } else {
    uint8_t d[32];
    char hex[65];
    sc_sha256_final(&sh, d);
    sc_sha256_digest_hex(d, hex);
    add_file(w, name, pc->total, hex);
  }
  sc_free(path);
  return st;
}

static pieces pieces_alloc(int32_t n, int64_t total) {
  pieces pc = {.n = n, .total = total};
  pc.data = sc_calloc((size_t)n + 1, sizeof *pc.data);
  pc.bytes = sc_calloc((size_t)n + 1, sizeof *pc.bytes);
  pc.offsets = sc_calloc((size_t)n + 1, sizeof *pc.offsets);
  return pc;
}

static void pieces_free(pieces *pc) {
  sc_free(pc->data);
  sc_free(pc->bytes);
  sc_free(pc->offsets);
}

/* weights.bin: every CONST buffer's data at its offset. */
static sc_status write_weights(writer *w, const sc_program *p, const int64_t *offsets,
                               int64_t total) {
  pieces pc = pieces_alloc(p->n_buffers, total);
  if (!pc.data || !pc.bytes || !pc.offsets) {
    pieces_free(&pc);
    return sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  for (int32_t i = 0; i < p->n_buffers; i++) {
    pc.data[i] = p->buffers[i].data;
    pc.bytes[i] = p->buffers[i].bytes;
    pc.offsets[i] = offsets[i];
  }
  sc_status st = write_pieces(w, "weights.bin", &pc);
  pieces_free(&pc);
  return st;
}

/* A training bundle's params.bin (the parameters' initial values) and
 * training.json (codegen/train_manifest.h). m's offsets are laid out here. */
static sc_status write_training(writer *w, const sc_program *p, sc_train_manifest *m) {
  int64_t total = sc_train_manifest_layout(m, p);
  if (total < 0) return sc_diag_set(w->diag, SC_ERR_LIMIT, NULL, NULL, "parameters exceed 2^63 bytes");
  pieces pc = pieces_alloc(m->n_params, total);
  sc_status st = pc.data && pc.bytes && pc.offsets
                     ? SC_OK
                     : sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t k = 0; st == SC_OK && k < m->n_params; k++) {
    pc.data[k] = m->params[k].data;
    pc.bytes[k] = p->buffers[m->params[k].buffer].bytes;
    pc.offsets[k] = m->params[k].offset;
  }
  if (st == SC_OK) st = write_pieces(w, "params.bin", &pc);
  pieces_free(&pc);
  char *text = NULL;
  if (st == SC_OK) st = sc_train_manifest_write_json(m, p, &text, w->diag);
  if (st == SC_OK) st = write_file(w, "training.json", text, strlen(text), true);
  sc_free(text);
  return st;
}

sc_status sc_bundle_write_training(const char *dir, const sc_program *p,
                                   const sc_train_manifest *m, sc_bundle_file files[2],
                                   sc_diag *diag) {
  writer w = {.dir = dir, .diag = diag, .files = json_array()};
  sc_train_manifest *own = sc_train_manifest_copy(m);
  sc_status st = own && w.files ? write_training(&w, p, own)
                                : sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (size_t k = 0; st == SC_OK && k < 2; k++) {
    json_t *f = json_array_get(w.files, k);
    snprintf(files[k].name, sizeof files[k].name, "%s",
             json_string_value(json_object_get(f, "name")));
    files[k].bytes = (int64_t)json_integer_value(json_object_get(f, "bytes"));
    snprintf(files[k].sha256, sizeof files[k].sha256, "%s",
             json_string_value(json_object_get(f, "sha256")));
  }
  sc_train_manifest_destroy(own);
  json_decref(w.files);
  return st;
}

/* A file someone else wrote (kernels.o): hash it and record it. */
static sc_status record_file(writer *w, const char *name) {
  char *path = path_join(w->dir, name);
  if (!path) return sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  FILE *f = fopen(path, "rb");
  sc_status st = SC_OK;
  if (!f) {
    st = sc_diag_set(w->diag, SC_ERR_IO, NULL, NULL, "%s: cannot open: %s", path,
                     strerror(errno));
    sc_free(path);
    return st;
  }
  sc_sha256 sh;
  sc_sha256_init(&sh);
  uint8_t buf[1 << 16];
  size_t n;
  int64_t total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    sc_sha256_update(&sh, buf, n);
    total += (int64_t)n;
  }
  if (ferror(f))
    st = sc_diag_set(w->diag, SC_ERR_IO, NULL, NULL, "%s: read error", path);
  fclose(f);
  sc_free(path);
  if (st) return st;
  uint8_t d[32];
  char hex[65];
  sc_sha256_final(&sh, d);
  sc_sha256_digest_hex(d, hex);
  add_file(w, name, total, hex);
  return SC_OK;
}

static json_t *json_tensors(const sc_program *p, const int32_t *ids, int32_t n) {
  json_t *a = json_array();
  for (int32_t i = 0; i < n; i++) {
    const sc_buffer *b = &p->buffers[ids[i]];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(b->name ? b->name : ""));
    json_object_set_new(o, "dtype", json_string(sc_dtype_name(b->dtype)));
    json_t *shape = json_array();
    for (int32_t d = 0; d < b->rank; d++) json_array_append_new(shape, json_integer(b->dims[d]));
    json_object_set_new(o, "shape", shape);
    json_array_append_new(a, o);
  }
  return a;
}

static sc_status write_target_code(writer *w, const sc_program *p, const sc_bundle_opts *o,
                                   json_t *archs) {
  if (o->target == SC_BUNDLE_CPU) {
    char *path = path_join(w->dir, "kernels.o");
    if (!path) return sc_diag_set(w->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    sc_status st = sc_cpu_emit_object(p, &o->cpu, path, w->diag);
    sc_free(path);
    return st ? st : record_file(w, "kernels.o");
  }
#if SHARDC_HAVE_CUDA
  sc_cuda_build *b = NULL;
  sc_status st = o->cubins ? sc_cuda_build_program_cubins(p, o->archs, &b, w->diag)
                           : sc_cuda_build_program(p, o->archs, &b, w->diag);
  if (st) return st;
  if (o->nvrtc_seconds) *o->nvrtc_seconds = b->compile_seconds;
  st = write_file(w, "kernels.cu", b->source, strlen(b->source), true);
  for (int32_t i = 0; st == SC_OK && i < b->n_archs; i++) {
    char name[64];
    snprintf(name, sizeof name, "kernels.%s.ptx", b->archs[i].arch);
    /* The PTX without its terminating NUL. */
    size_t n = b->archs[i].ptx_len ? b->archs[i].ptx_len - 1 : 0;
    st = write_file(w, name, b->archs[i].ptx, n, true);
    json_array_append_new(archs, json_string(b->archs[i].arch));
    snprintf(name, sizeof name, "kernels.%s.cubin", b->archs[i].arch);
    if (st == SC_OK && b->archs[i].cubin)
      st = write_file(w, name, b->archs[i].cubin, b->archs[i].cubin_len, true);
  }
  sc_cuda_build_destroy(b);
  return st;
#else
  (void)p;
  (void)archs;
  return sc_diag_set(w->diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "--target cuda: this shardc was built without NVRTC");
#endif
}

sc_status sc_bundle_dir_begin(sc_dir_commit *c, const char *dir, sc_diag *diag) {
  static const char *const markers[] = {"manifest.json", "partition.json", NULL};
  return sc_dir_commit_begin(c, dir, markers, diag);
}

sc_status sc_bundle_write(const sc_program *p, const sc_bundle_opts *o, const char *dir,
                          sc_diag *diag) {
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (p->buffers[i].kind == SC_BUF_CONST && p->buffers[i].bytes > 0 && !p->buffers[i].data &&
        !o->external_consts)
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                         "constant '%s' has no data (weights not loaded)",
                         p->buffers[i].name ? p->buffers[i].name : "?");
  if (o->train && p->mesh.n_axes > 0)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "a training bundle of a mesh is a partitioned bundle "
                       "(sc_dist_program_write)");

  /* Written into a fresh sibling folder that replaces dir whole at the
   * end: nothing of an earlier bundle (of either kind) survives, and an
   * interrupted write leaves dir as it was. */
  sc_dir_commit dc;
  sc_status st = sc_bundle_dir_begin(&dc, dir, diag);
  if (st != SC_OK) return st;
  writer w = {.dir = dc.tmp, .diag = diag, .files = json_array()};
  json_t *archs = json_array();
  int64_t *offsets = sc_calloc((size_t)p->n_buffers + 1, sizeof *offsets);
  char *text = NULL;
  int64_t total = offsets ? sc_program_weights_layout(p, offsets) : -1;
  if (!offsets) st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  else if (total < 0) st = sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "weights exceed 2^63 bytes");
  if (!st) st = sc_program_write_json(p, offsets, &text, diag);
  if (!st) st = write_file(&w, "program.json", text, strlen(text), true);
  if (!st) st = write_weights(&w, p, offsets, total);
  if (!st) st = write_target_code(&w, p, o, archs);
  sc_train_manifest *train = NULL;
  if (!st && o->train && !(train = sc_train_manifest_copy(o->train)))
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (!st && train) st = write_training(&w, p, train);
  sc_train_manifest_destroy(train);

  if (!st) {
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string("shardc-bundle"));
    json_object_set_new(m, "format_version", json_integer(SC_BUNDLE_FORMAT_VERSION));
    json_object_set_new(m, "shardc_version", json_string(SHARDC_VERSION));
    json_object_set_new(m, "target", json_string(sc_bundle_target_name(o->target)));
    json_object_set_new(m, "archs", json_incref(archs));
    if (o->train) json_object_set_new(m, "kind", json_string("training"));
    if (o->target == SC_BUNDLE_CPU) {
      /* What kernels.o was compiled for; the loader refuses a host that
       * lacks any of these features. */
      char *cpu = NULL, *features = NULL;
      st = sc_cpu_describe_target(&o->cpu, &cpu, &features, diag);
      if (!st) {
        json_t *c = json_object();
        json_object_set_new(c, "name", json_string(cpu));
        json_object_set_new(c, "features", json_string(features));
        json_object_set_new(m, "cpu", c);
      }
      sc_free(cpu);
      sc_free(features);
    }
    json_object_set_new(m, "model", o->model ? json_string(o->model) : json_null());
    json_object_set_new(m, "arena_bytes", json_integer(p->arena_bytes));
    json_object_set_new(m, "weights_bytes", json_integer(total));
    json_object_set_new(m, "inputs", json_tensors(p, p->inputs, p->n_inputs));
    json_object_set_new(m, "outputs", json_tensors(p, p->outputs, p->n_outputs));
    json_object_set_new(m, "files", json_incref(w.files));
    char *ms = st ? NULL : json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (st) {
      /* diag set above */
    } else if (!ms) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    } else {
      size_t n = strlen(ms);
      char *withnl = sc_malloc(n + 2);
      if (!withnl) {
        st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      } else {
        memcpy(withnl, ms, n);
        withnl[n] = '\n';
        withnl[n + 1] = 0;
        st = write_file(&w, "manifest.json", withnl, n + 1, false);
        sc_free(withnl);
      }
      free(ms);
    }
  }
  json_decref(archs);
  json_decref(w.files);
  sc_free(text);
  sc_free(offsets);
  return sc_dir_commit_finish(&dc, st, diag);
}
