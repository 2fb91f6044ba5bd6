/* safetensors.c — the safetensors reader and writer (safetensors.h).
 *
 * Reading is one pass over a buffer that holds the whole file: the header
 * length is checked against the limit and the file before the JSON is
 * parsed; each tensor entry is checked on its own (dtype, shape, offsets,
 * size), then the entries sorted by offset must tile the data buffer
 * exactly. Nothing is taken from the file until it has been checked, and
 * the loaded object points into the buffer it was given. Writing builds the
 * header with jansson, pads it with spaces to 8 bytes and streams header and
 * data through SHA-256 so that a caller (the checkpoint) gets the digest of
 * what it wrote without reading it back. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program_json.h"
#include "ir/fileio.h"
#include "ir/progress.h"
#include "runtime/safetensors.h"

/* X(sc_dtype suffix, safetensors name) */
#define SC_SAFETENSORS_DTYPES(X) \
  X(BOOL, "BOOL")                \
  X(U8, "U8")                    \
  X(I8, "I8")                    \
  X(I16, "I16")                  \
  X(U16, "U16")                  \
  X(F16, "F16")                  \
  X(BF16, "BF16")                \
  X(I32, "I32")                  \
  X(U32, "U32")                  \
  X(F32, "F32")                  \
  X(F64, "F64")                  \
  X(I64, "I64")                  \
  X(U64, "U64")                  \
  X(C64, "C64")

/* Types of the format that shardc has no element type for. */
static const char *const k_foreign_dtypes[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                               "F6_E2M3", "F6_E3M2", NULL};

const char *sc_safetensors_dtype_name(sc_dtype t) {
  switch (t) {
#define X(e, s) \
  case SC_DTYPE_##e: return s;
    SC_SAFETENSORS_DTYPES(X)
#undef X
    default: return NULL;
  }
}

sc_dtype sc_safetensors_dtype_parse(const char *name) {
#define X(e, s) \
  if (strcmp(name, s) == 0) return SC_DTYPE_##e;
  SC_SAFETENSORS_DTYPES(X)
#undef X
  return SC_DTYPE_COUNT;
}

bool sc_tensor_view_size(const sc_tensor_view *t, int64_t *numel, int64_t *bytes) {
  int64_t n = 1;
  if (t->rank < 0 || t->rank > SC_MAX_RANK) return false;
  for (int32_t k = 0; k < t->rank; k++)
    if (t->dims[k] < 0 || !sc_mul_i64(n, t->dims[k], &n)) return false;
  *numel = n;
  return sc_mul_i64(n, (int64_t)sc_dtype_size(t->dtype), bytes);
}

/* ------------------------------------------------------------- reading */

typedef struct owner {
  void *buf;      /* the whole file */
  sc_arena arena; /* tensors, names, metadata */
} owner;

/* "FILE: tensor 'T': MSG" or "FILE: MSG" */
static sc_status fail(sc_diag *d, sc_status st, const char *file, const char *tensor,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static sc_status fail(sc_diag *d, sc_status st, const char *file, const char *tensor,
                      const char *fmt, ...) {
  char where[768];
  snprintf(where, sizeof where, tensor ? "%s: tensor '%.200s'" : "%s", file, tensor);
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset_prefixed(d, st, where, fmt, ap);
  va_end(ap);
  return st;
}

static uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
  return v;
}

/* One header entry into *t (data offsets in *begin, *end). */
static sc_status parse_entry(const char *file, const char *key, json_t *v, uint64_t data_bytes,
                             sc_tensor_view *t, int64_t *begin, int64_t *end, sc_diag *d) {
  if (!json_is_object(v)) return fail(d, SC_ERR_PARSE, file, key, "entry is not a JSON object");
  const char *dt = json_string_value(json_object_get(v, "dtype"));
  json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
  if (!dt) return fail(d, SC_ERR_PARSE, file, key, "'dtype' missing or not a string");
  t->dtype = sc_safetensors_dtype_parse(dt);
  if (t->dtype == SC_DTYPE_COUNT) {
    for (const char *const *f = k_foreign_dtypes; *f; f++)
      if (strcmp(dt, *f) == 0)
        return fail(d, SC_ERR_UNSUPPORTED, file, key, "dtype %s has no shardc element type", dt);
    return fail(d, SC_ERR_PARSE, file, key, "unknown dtype '%.40s'", dt);
  }
  if (!json_is_array(shape))
    return fail(d, SC_ERR_PARSE, file, key, "'shape' missing or not an array");
  if (json_array_size(shape) > SC_MAX_RANK)
    return fail(d, SC_ERR_LIMIT, file, key, "rank %zu is more than the %d supported",
                json_array_size(shape), (int)SC_MAX_RANK);
  t->rank = (int32_t)json_array_size(shape);
  for (int32_t k = 0; k < t->rank; k++) {
    json_t *e = json_array_get(shape, (size_t)k);
    if (!json_is_integer(e) || json_integer_value(e) < 0)
      return fail(d, SC_ERR_PARSE, file, key, "shape[%d] is not an integer >= 0", (int)k);
    t->dims[k] = (int64_t)json_integer_value(e);
  }
  int64_t numel, bytes;
  if (!sc_tensor_view_size(t, &numel, &bytes))
    return fail(d, SC_ERR_LIMIT, file, key, "shape product × %u bytes overflows 64 bits",
                sc_dtype_size(t->dtype));
  if (!json_is_array(offs) || json_array_size(offs) != 2 ||
      !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
    return fail(d, SC_ERR_PARSE, file, key, "'data_offsets' must be [begin, end] integers");
  *begin = (int64_t)json_integer_value(json_array_get(offs, 0));
  *end = (int64_t)json_integer_value(json_array_get(offs, 1));
  if (*begin < 0 || *end < *begin)
    return fail(d, SC_ERR_PARSE, file, key, "data_offsets [%lld, %lld] are not 0 <= begin <= end",
                (long long)*begin, (long long)*end);
  if ((uint64_t)*end > data_bytes)
    return fail(d, SC_ERR_PARSE, file, key,
                "data_offsets [%lld, %lld] run past the end of the data (%llu bytes): "
                "truncated file?",
                (long long)*begin, (long long)*end, (unsigned long long)data_bytes);
  if (*end - *begin != bytes)
    return fail(d, SC_ERR_INVALID, file, key,
                "%s shape of %lld elements is %lld bytes but data_offsets [%lld, %lld] span %lld",
                dt, (long long)numel, (long long)bytes, (long long)*begin, (long long)*end,
                (long long)(*end - *begin));
  return SC_OK;
}

typedef struct span {
  int64_t begin, end;
  int32_t id;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static sc_status parse_meta(const char *file, json_t *m, owner *o, sc_safetensors *s, sc_diag *d) {
  if (!json_is_object(m)) return fail(d, SC_ERR_PARSE, file, NULL, "__metadata__ is not an object");
  s->meta = sc_arena_array(&o->arena, json_object_size(m) + 1, sizeof *s->meta);
  if (!s->meta) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  const char *k;
  json_t *v;
  json_object_foreach(m, k, v) {
    if (!json_is_string(v))
      return fail(d, SC_ERR_PARSE, file, NULL, "__metadata__ '%.200s' is not a string", k);
    sc_safetensors_meta *e = &s->meta[s->n_meta++];
    e->key = sc_arena_strdup(&o->arena, k);
    e->value = sc_arena_strdup(&o->arena, json_string_value(v));
    if (!e->key || !e->value) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  return SC_OK;
}

/* The header (already checked for length) into s. */
static sc_status parse_header(const char *file, const char *text, size_t n, uint64_t data_bytes,
                              const unsigned char *data, owner *o, sc_safetensors *s, sc_diag *d) {
  if (n == 0 || text[0] != '{')
    return fail(d, SC_ERR_PARSE, file, NULL, "the header does not start with '{'");
  json_error_t err;
  json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return fail(d, SC_ERR_PARSE, file, NULL, "the header is not valid JSON: %s (at byte %d)",
                err.text, err.position);
  sc_status st = SC_OK;
  size_t n_entries = json_object_size(root);
  span *spans = sc_calloc(n_entries + 1, sizeof *spans);
  s->tensors = sc_arena_array(&o->arena, n_entries + 1, sizeof *s->tensors);
  sc_tensor_view *tmp = sc_calloc(n_entries + 1, sizeof *tmp);
  if (!spans || !s->tensors || !tmp) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  const char *key;
  json_t *v;
  int32_t n_t = 0;
  json_object_foreach(root, key, v) {
    if (st != SC_OK) break;
    if (strcmp(key, "__metadata__") == 0) {
      st = parse_meta(file, v, o, s, d);
      continue;
    }
    sc_tensor_view *t = &tmp[n_t];
    st = parse_entry(file, key, v, data_bytes, t, &spans[n_t].begin, &spans[n_t].end, d);
    if (st == SC_OK && !(t->name = sc_arena_strdup(&o->arena, key)))
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    spans[n_t].id = n_t;
    n_t += st == SC_OK;
  }
  json_decref(root);
  if (st == SC_OK) {
    qsort(spans, (size_t)n_t, sizeof *spans, span_cmp);
    int64_t pos = 0;
    for (int32_t i = 0; i < n_t && st == SC_OK; i++) {
      const span *p = &spans[i];
      if (p->begin < pos)
        st = fail(d, SC_ERR_INVALID, file, tmp[p->id].name,
                  "data_offsets [%lld, %lld] overlap tensor '%.200s'", (long long)p->begin,
                  (long long)p->end, tmp[spans[i - 1].id].name);
      else if (p->begin > pos)
        st = fail(d, SC_ERR_INVALID, file, tmp[p->id].name,
                  "bytes [%lld, %lld) before it belong to no tensor (a hole in the data)",
                  (long long)pos, (long long)p->begin);
      pos = p->end;
      s->tensors[i] = tmp[p->id];
      s->tensors[i].data = (void *)(data + p->begin); /* owned by s, read-only */
    }
    if (st == SC_OK && (uint64_t)pos != data_bytes)
      st = fail(d, SC_ERR_INVALID, file, NULL,
                "data bytes [%lld, %llu) after the last tensor belong to no tensor", (long long)pos,
                (unsigned long long)data_bytes);
    s->n_tensors = n_t;
  }
  sc_free(spans);
  sc_free(tmp);
  return st;
}

sc_status sc_safetensors_parse(void *buf, size_t size, const char *name, sc_safetensors **out,
                               sc_diag *diag) {
  *out = NULL;
  const unsigned char *b = buf;
  if (size < 8) {
    sc_free(buf);
    return fail(diag, SC_ERR_PARSE, name, NULL,
                "truncated: %zu bytes, shorter than the 8-byte header length", size);
  }
  uint64_t n = load_le64(b);
  if (n > SC_SAFETENSORS_MAX_HEADER) {
    sc_free(buf);
    return fail(diag, SC_ERR_LIMIT, name, NULL, "header length %llu is over the %d-byte limit",
                (unsigned long long)n, (int)SC_SAFETENSORS_MAX_HEADER);
  }
  if (n > size - 8) {
    sc_free(buf);
    return fail(diag, SC_ERR_PARSE, name, NULL,
                "truncated: the header length %llu runs past the end of the file (%zu bytes)",
                (unsigned long long)n, size);
  }
  sc_safetensors *s = sc_calloc(1, sizeof *s);
  owner *o = sc_calloc(1, sizeof *o);
  if (!s || !o) {
    sc_free(buf);
    sc_free(s);
    sc_free(o);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  sc_arena_init(&o->arena);
  o->buf = buf;
  s->owner = o;
  s->file_bytes = size;
  sc_status st =
      parse_header(name, (const char *)b + 8, (size_t)n, size - 8 - n, b + 8 + n, o, s, diag);
  if (st != SC_OK) {
    sc_safetensors_destroy(s);
    return st;
  }
  *out = s;
  return SC_OK;
}

sc_status sc_safetensors_read(const char *path, int64_t max_bytes, sc_safetensors **out,
                              sc_diag *diag) {
  *out = NULL;
  char *data = NULL;
  size_t n = 0;
  sc_status st = sc_file_read_all(path, path, max_bytes, &data, &n, diag);
  if (st != SC_OK) return st;
  return sc_safetensors_parse(data, n, path, out, diag);
}

const sc_tensor_view *sc_safetensors_find(const sc_safetensors *s, const char *name) {
  for (int32_t i = 0; i < s->n_tensors; i++)
    if (strcmp(s->tensors[i].name, name) == 0) return &s->tensors[i];
  return NULL;
}

const char *sc_safetensors_meta_get(const sc_safetensors *s, const char *key) {
  for (int32_t i = 0; i < s->n_meta; i++)
    if (strcmp(s->meta[i].key, key) == 0) return s->meta[i].value;
  return NULL;
}

void sc_safetensors_destroy(sc_safetensors *s) {
  if (!s) return;
  owner *o = s->owner;
  if (o) {
    sc_free(o->buf);
    sc_arena_free(&o->arena);
    sc_free(o);
  }
  sc_free(s);
}

/* ------------------------------------------------------------- writing */

typedef struct out_stream {
  FILE *f;
  sc_sha256 sha;
  int64_t bytes;
  bool ok;
  int err; /* errno of the failed write */
  sc_progress *progress; /* or NULL */
} out_stream;

/* Writes in pieces of SC_FILE_READ_CHUNK bytes, so that progress moves
 * within a large tensor. */
static void put(out_stream *w, const void *p, size_t n) {
  const char *c = p;
  while (w->ok && n > 0) {
    size_t k = n < SC_FILE_READ_CHUNK ? n : SC_FILE_READ_CHUNK;
    errno = 0;
    w->ok = fwrite(c, 1, k, w->f) == k;
    if (!w->ok) w->err = errno ? errno : EIO;
    sc_sha256_update(&w->sha, c, k);
    w->bytes += (int64_t)k;
    if (w->progress) sc_progress_add(w->progress, (int64_t)k, NULL);
    c += k;
    n -= k;
  }
}

/* Tensor order in the file: element size, largest first; stable. */
static int32_t *data_order(const sc_tensor_view *t, int32_t n) {
  int32_t *ord = sc_calloc((size_t)n + 1, sizeof *ord);
  if (!ord) return NULL;
  int32_t k = 0;
  for (unsigned size = 16; size >= 1; size /= 2)
    for (int32_t i = 0; i < n; i++)
      if (sc_dtype_size(t[i].dtype) == size) ord[k++] = i;
  SC_ASSERT(k == n); /* every dtype safetensors names is 1, 2, 4, 8 or 16 bytes */
  return ord;
}

/* The header text (jansson-allocated) for tensors in order ord. */
static sc_status build_header(const char *file, const sc_tensor_view *t, int32_t n,
                              const int32_t *ord, const sc_safetensors_meta *meta, int32_t n_meta,
                              char **text, sc_diag *d) {
  json_t *root = json_object();
  json_t *m = n_meta > 0 ? json_object() : NULL;
  sc_status st = root && (n_meta == 0 || m)
                     ? SC_OK
                     : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; st == SC_OK && i < n_meta; i++) {
    if (!meta[i].key || !meta[i].value || json_object_get(m, meta[i].key))
      st = fail(d, SC_ERR_INVALID, file, NULL, "metadata key '%.200s' missing or repeated",
                meta[i].key ? meta[i].key : "(null)");
    else if (json_object_set_new(m, meta[i].key, json_string(meta[i].value)) != 0)
      st = fail(d, SC_ERR_INVALID, file, NULL, "metadata '%.200s' is not valid UTF-8", meta[i].key);
  }
  if (st == SC_OK && m) {
    st = json_object_set_new(root, "__metadata__", m) == 0
             ? SC_OK
             : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    m = NULL;
  }
  int64_t pos = 0, numel, bytes, end;
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    const sc_tensor_view *x = &t[ord[i]];
    sc_tensor_view_size(x, &numel, &bytes); /* checked by the caller */
    if (!sc_add_i64(pos, bytes, &end)) {
      st = fail(d, SC_ERR_LIMIT, file, x->name, "the data would pass 2^63 bytes");
      break;
    }
    if (json_object_get(root, x->name)) {
      st = fail(d, SC_ERR_INVALID, file, x->name, "the name is used twice");
      break;
    }
    json_t *shape = json_array();
    for (int32_t k = 0; shape && k < x->rank; k++)
      json_array_append_new(shape, json_integer(x->dims[k]));
    json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", sc_safetensors_dtype_name(x->dtype),
                          "shape", shape, "data_offsets", (json_int_t)pos, (json_int_t)end);
    if (!e || json_object_set_new(root, x->name, e) != 0)
      st = fail(d, SC_ERR_INVALID, file, x->name, "cannot be written (is the name UTF-8?)");
    pos = end;
  }
  json_decref(m);
  if (st == SC_OK) {
    *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*text) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  json_decref(root);
  return st;
}

static sc_status check_tensor(const char *file, const sc_tensor_view *x, sc_diag *d) {
  int64_t numel, bytes;
  if (!x->name || !x->name[0] || strcmp(x->name, "__metadata__") == 0)
    return fail(d, SC_ERR_INVALID, file, x->name ? x->name : "(null)", "not a usable tensor name");
  if (!sc_safetensors_dtype_name(x->dtype))
    return fail(d, SC_ERR_INVALID, file, x->name, "dtype %s has no safetensors name",
                (unsigned)x->dtype < SC_DTYPE_COUNT ? sc_dtype_name(x->dtype) : "?");
  if (x->rank < 0 || x->rank > SC_MAX_RANK)
    return fail(d, SC_ERR_INVALID, file, x->name, "rank %d out of range", (int)x->rank);
  if (!sc_tensor_view_size(x, &numel, &bytes))
    return fail(d, SC_ERR_INVALID, file, x->name, "negative dim or size overflow");
  if (bytes > 0 && !x->data) return fail(d, SC_ERR_INVALID, file, x->name, "no data");
  return SC_OK;
}

sc_status sc_safetensors_write_stream(FILE *f, const char *name, const sc_tensor_view *tensors,
                                      int32_t n_tensors, const sc_safetensors_meta *meta,
                                      int32_t n_meta, uint8_t sha256[32], int64_t *bytes,
                                      sc_progress *progress, sc_diag *diag) {
  for (int32_t i = 0; i < n_tensors; i++) {
    sc_status st = check_tensor(name, &tensors[i], diag);
    if (st != SC_OK) return st;
  }
  int32_t *ord = data_order(tensors, n_tensors);
  if (!ord) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  char *text = NULL;
  sc_status st = build_header(name, tensors, n_tensors, ord, meta, n_meta, &text, diag);
  if (st == SC_OK) {
    size_t len = strlen(text);
    size_t padded = (len + SC_SAFETENSORS_ALIGN - 1) / SC_SAFETENSORS_ALIGN * SC_SAFETENSORS_ALIGN;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    out_stream w = {.f = f, .ok = true};
    sc_sha256_init(&w.sha);
    put(&w, le, 8);
    put(&w, text, len);
    put(&w, "        ", padded - len);
    w.progress = progress; /* the tensors' bytes, what a caller's total counts */
    for (int32_t i = 0; i < n_tensors; i++) {
      int64_t numel, nb;
      sc_tensor_view_size(&tensors[ord[i]], &numel, &nb);
      put(&w, tensors[ord[i]].data, (size_t)nb);
    }
    if (!w.ok) st = fail(diag, SC_ERR_IO, name, NULL, "write failed: %s", strerror(w.err));
    if (sha256) sc_sha256_final(&w.sha, sha256);
    if (bytes) *bytes = w.bytes;
  }
  free(text); /* jansson's allocation */
  sc_free(ord);
  return st;
}

sc_status sc_safetensors_write(const char *path, const sc_tensor_view *tensors, int32_t n_tensors,
                               const sc_safetensors_meta *meta, int32_t n_meta, sc_diag *diag) {
  sc_file_commit c;
  sc_status st = sc_file_commit_begin(&c, path, diag);
  if (st != SC_OK) return st;
  st = sc_safetensors_write_stream(c.f, path, tensors, n_tensors, meta, n_meta, NULL, NULL, NULL,
                                   diag);
  if (st != SC_OK) {
    sc_file_commit_abort(&c);
    return st;
  }
  return sc_file_commit_end(&c, diag);
}
