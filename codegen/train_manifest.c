/* train_manifest.c — training.json, written and read (train_manifest.h).
 *
 * The text is one object: "format": "shardc-training", "version", then
 * "optimizer" {kind, momentum, nesterov, weight_decay, betas, eps},
 * "clip_grad_norm", "loss" {kind, logits, ignore_index, classes},
 * "precision", "grad_accum", "data" [{name, dtype, shape}] and "params"
 * [{name, dtype, shape, offset, bytes}, a flat parameter's param_shape and
 * param_split {dim, parts, stride}] (docs/bundle.md). Numbers are
 * written with 17 significant digits, so they read back to the bit. The
 * reader checks everything it uses before the manifest is returned. */
#include "codegen/train_manifest.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program_json.h"

enum { MAX_TEXT_BYTES = 64 << 20 };

sc_train_manifest *sc_train_manifest_create(int32_t n_params) {
  if (n_params < 0) return NULL;
  size_t n = sizeof(sc_train_manifest) + (size_t)n_params * sizeof(sc_train_manifest_param);
  sc_train_manifest *m = sc_calloc(1, n);
  if (!m) return NULL;
  m->n_params = n_params;
  m->params = (sc_train_manifest_param *)(m + 1);
  return m;
}

sc_train_manifest *sc_train_manifest_copy(const sc_train_manifest *m) {
  sc_train_manifest *c = sc_train_manifest_create(m->n_params);
  if (!c) return NULL;
  sc_train_manifest_param *params = c->params;
  *c = *m;
  c->params = params;
  memcpy(params, m->params, (size_t)m->n_params * sizeof *params);
  return c;
}

void sc_train_manifest_destroy(sc_train_manifest *m) { sc_free(m); }

void sc_train_flat_copy(int32_t rank, const int64_t *dims, int32_t d, int64_t T, int64_t s,
                        size_t esz, const void *from, void *to, bool to_flat) {
  int64_t c[SC_MAX_RANK] = {0}, numel = 1;
  for (int32_t k = 0; k < rank; k++) numel *= dims[k];
  int64_t rows = numel / T / s, block = d >= 0 ? dims[d] / s : 1, piece = block / T;
  for (int64_t i = 0; i < numel; i++) {
    int64_t j = 0, part = 0, b = 0;
    for (int32_t k = 0; k < rank; k++) {
      int64_t x = c[k], size = dims[k];
      if (k == d) {
        b = x / block;
        part = x % block / piece;
        x %= piece;
        size = piece;
      }
      j = j * size + x;
    }
    size_t a = (size_t)i * esz, y = (size_t)((b * rows + j) * T + part) * esz;
    memcpy((char *)to + (to_flat ? y : a), (const char *)from + (to_flat ? a : y), esz);
    for (int32_t k = rank - 1; k >= 0 && ++c[k] == dims[k]; k--) c[k] = 0;
  }
}

static const sc_buffer *input_buf(const sc_program *p, int32_t i) {
  return &p->buffers[p->inputs[i]];
}

bool sc_program_input_is_state(const sc_program *p, int32_t b) {
  const char *name = p->buffers[b].name;
  if (!name) return false;
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const char *o = p->buffers[p->outputs[j]].name;
    if (o && strncmp(o, "new:", 4) == 0 && strcmp(o + 4, name) == 0) return true;
  }
  return false;
}

bool sc_train_is_optimizer_state(const char *name) {
  static const char *const suffix[] = {".momentum_buffer", ".exp_avg", ".exp_avg_sq",
                                       ".fp8_amax_history", ".fp8_scale"};
  size_t n = name ? strlen(name) : 0;
  for (size_t k = 0; k < sizeof suffix / sizeof *suffix; k++) {
    size_t m = strlen(suffix[k]);
    if (n > m && strcmp(name + n - m, suffix[k]) == 0) return true;
  }
  return false;
}

/* A data input: neither state nor a "train:" scalar of the step. */
static bool is_data(const sc_program *p, int32_t i) {
  const sc_buffer *b = input_buf(p, i);
  return !(b->name && strncmp(b->name, "train:", 6) == 0) &&
         !sc_program_input_is_state(p, p->inputs[i]);
}

static bool has_input_prefix(const sc_program *p, const char *prefix) {
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const char *n = input_buf(p, i)->name;
    if (n && strncmp(n, prefix, strlen(prefix)) == 0) return true;
  }
  return false;
}

/* The program input named name that is state, or -1. */
static int32_t state_input(const sc_program *p, const char *name) {
  for (int32_t i = 0; name && i < p->n_inputs; i++) {
    const sc_buffer *b = input_buf(p, i);
    if (b->name && strcmp(b->name, name) == 0 && strncmp(name, "accum:", 6) != 0 &&
        sc_program_input_is_state(p, p->inputs[i]))
      return p->inputs[i];
  }
  return -1;
}

sc_status sc_train_manifest_rebase(sc_train_manifest *m, const sc_program *p, sc_diag *d) {
  for (int32_t k = 0; k < m->n_params; k++) {
    int32_t b = state_input(p, m->params[k].name);
    if (b < 0)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "'%s' is not a parameter of the step",
                         m->params[k].name ? m->params[k].name : "?");
    m->params[k].buffer = b;
    m->params[k].name = p->buffers[b].name;
  }
  return SC_OK;
}

int64_t sc_train_manifest_layout(sc_train_manifest *m, const sc_program *p) {
  int64_t pos = 0;
  for (int32_t k = 0; k < m->n_params; k++) {
    int64_t bytes = p->buffers[m->params[k].buffer].bytes;
    pos = (pos + SC_BUNDLE_WEIGHT_ALIGN - 1) / SC_BUNDLE_WEIGHT_ALIGN * SC_BUNDLE_WEIGHT_ALIGN;
    m->params[k].offset = pos;
    if (bytes < 0 || pos > INT64_MAX - SC_BUNDLE_WEIGHT_ALIGN - bytes) return -1;
    pos += bytes;
  }
  return pos;
}

/* ---- writing ---- */

static json_t *tensor_json(const sc_buffer *b) {
  json_t *o = json_object(), *shape = json_array();
  json_object_set_new(o, "name", json_string(b->name ? b->name : ""));
  json_object_set_new(o, "dtype", json_string(sc_dtype_name(b->dtype)));
  for (int32_t k = 0; k < b->rank; k++) json_array_append_new(shape, json_integer(b->dims[k]));
  json_object_set_new(o, "shape", shape);
  return o;
}

static json_t *optimizer_json(const sc_train_manifest *m) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(m->optimizer));
  json_object_set_new(o, "momentum", json_real(m->momentum));
  json_object_set_new(o, "nesterov", json_boolean(m->nesterov));
  json_object_set_new(o, "weight_decay", json_real(m->weight_decay));
  json_object_set_new(o, "betas", json_pack("[ff]", m->beta1, m->beta2));
  json_object_set_new(o, "eps", json_real(m->eps));
  return o;
}

static json_t *loss_json(const sc_train_manifest *m) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(m->loss));
  json_object_set_new(o, "logits", m->logits[0] ? json_string(m->logits) : json_null());
  json_object_set_new(o, "ignore_index", json_integer(m->ignore_index));
  json_object_set_new(o, "classes", json_integer(m->classes));
  return o;
}

sc_status sc_train_manifest_write_json(const sc_train_manifest *m, const sc_program *p,
                                       char **text, sc_diag *d) {
  *text = NULL;
  json_t *root = json_object(), *data = json_array(), *params = json_array();
  json_object_set_new(root, "format", json_string("shardc-training"));
  json_object_set_new(root, "version", json_integer(SC_TRAIN_MANIFEST_VERSION));
  json_object_set_new(root, "optimizer", optimizer_json(m));
  json_object_set_new(root, "clip_grad_norm", json_real(m->clip_grad_norm));
  json_object_set_new(root, "loss", loss_json(m));
  json_object_set_new(root, "precision", json_string(m->precision));
  json_object_set_new(root, "grad_accum", json_integer(m->grad_accum));
  for (int32_t i = 0; i < p->n_inputs; i++)
    if (is_data(p, i)) json_array_append_new(data, tensor_json(input_buf(p, i)));
  for (int32_t k = 0; k < m->n_params; k++) {
    const sc_buffer *b = &p->buffers[m->params[k].buffer];
    json_t *t = tensor_json(b);
    json_object_set_new(t, "offset", json_integer(m->params[k].offset));
    json_object_set_new(t, "bytes", json_integer(b->bytes));
    if (m->params[k].rank > 0) { /* stored as its flat view */
      json_t *own = json_array();
      for (int32_t j = 0; j < m->params[k].rank; j++)
        json_array_append_new(own, json_integer(m->params[k].dims[j]));
      json_object_set_new(t, "param_shape", own);
    }
    if (m->params[k].rank > 0 && m->params[k].split_parts > 1) /* and in pieces */
      json_object_set_new(t, "param_split",
                          json_pack("{s:i, s:I, s:I}", "dim", (int)m->params[k].split_dim,
                                    "parts", (json_int_t)m->params[k].split_parts, "stride",
                                    (json_int_t)m->params[k].split_stride));
    if (m->params[k].vocab > 0) /* vocabulary-padded */
      json_object_set_new(t, "vocab", json_pack("{s:i, s:I}", "dim", (int)m->params[k].vocab_dim,
                                                "size", (json_int_t)m->params[k].vocab));
    json_array_append_new(params, t);
  }
  json_object_set_new(root, "data", data);
  json_object_set_new(root, "params", params);
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(root);
  size_t n = s ? strlen(s) : 0;
  *text = s ? sc_malloc(n + 2) : NULL;
  if (*text) {
    memcpy(*text, s, n);
    memcpy(*text + n, "\n", 2);
  }
  free(s);
  return *text ? SC_OK : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

/* ---- reading ---- */

/* A finite number in [lo, hi] (hi_open: hi excluded). */
static bool number_in(json_t *v, double lo, double hi, bool hi_open, double *out) {
  if (!json_is_number(v)) return false;
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi || (hi_open && x >= hi)) return false;
  *out = x;
  return true;
}

/* s, one of the choices (NULL-terminated), into out. */
static bool choice(json_t *v, const char *const *choices, char *out, size_t n) {
  const char *s = json_string_value(v);
  for (int k = 0; s && choices[k]; k++)
    if (strcmp(s, choices[k]) == 0) {
      snprintf(out, n, "%s", s);
      return true;
    }
  return false;
}

static sc_status read_optimizer(json_t *o, sc_train_manifest *m, sc_diag *d) {
  static const char *const kinds[] = {"sgd", "adamw", NULL};
  json_t *betas = json_object_get(o, "betas");
  json_t *nesterov = json_object_get(o, "nesterov");
  bool ok = json_is_object(o) &&
            choice(json_object_get(o, "kind"), kinds, m->optimizer, sizeof m->optimizer) &&
            number_in(json_object_get(o, "momentum"), 0, 1e308, false, &m->momentum) &&
            number_in(json_object_get(o, "weight_decay"), 0, 1e308, false, &m->weight_decay) &&
            number_in(json_object_get(o, "eps"), 0, 1e308, false, &m->eps) &&
            json_is_array(betas) && json_array_size(betas) == 2 &&
            number_in(json_array_get(betas, 0), 0, 1, true, &m->beta1) &&
            number_in(json_array_get(betas, 1), 0, 1, true, &m->beta2) && json_is_boolean(nesterov);
  if (!ok)
    return sc_diag_set(
        d, SC_ERR_INVALID, NULL, NULL,
        "'optimizer' missing or malformed (kind sgd or adamw; momentum, weight_decay, eps "
        ">= 0; betas in [0, 1); nesterov a boolean)");
  m->nesterov = json_is_true(nesterov);
  return SC_OK;
}

static sc_status read_loss(json_t *o, sc_train_manifest *m, sc_diag *d) {
  static const char *const kinds[] = {"cross-entropy", "mse", "output", NULL};
  json_t *logits = json_object_get(o, "logits");
  json_t *ignore = json_object_get(o, "ignore_index");
  json_t *classes = json_object_get(o, "classes");
  const char *ls = json_string_value(logits);
  bool ok = json_is_object(o) &&
            choice(json_object_get(o, "kind"), kinds, m->loss, sizeof m->loss) &&
            (json_is_null(logits) || (ls && ls[0] && strlen(ls) < sizeof m->logits)) &&
            json_is_integer(ignore) && json_is_integer(classes) && json_integer_value(classes) >= 0;
  if (!ok)
    return sc_diag_set(
        d, SC_ERR_INVALID, NULL, NULL,
        "'loss' missing or malformed (kind cross-entropy, mse or output; logits a name "
        "or null; integer ignore_index and classes >= 0)");
  snprintf(m->logits, sizeof m->logits, "%s", ls ? ls : "");
  m->ignore_index = json_integer_value(ignore);
  m->classes = json_integer_value(classes);
  return SC_OK;
}

/* "param_split" {dim, parts, stride} of a flat parameter q (P's numel
 * elements, its input buf): P's dim split into parts pieces of stride
 * blocks, the input [S, m_pad/S, parts] holding numel/parts elements a
 * piece; none: the input is [S, m_pad/S]. */
static sc_status read_split(const json_t *split, const sc_buffer *buf, size_t k,
                            const char *name, sc_train_manifest_param *q, int64_t numel,
                            sc_diag *d) {
  if (!split) {
    if (buf->rank == 2) return SC_OK;
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): a flat input of rank %d without param_split", k,
                       name, (int)buf->rank);
  }
  json_t *dim = json_object_get(split, "dim"), *parts = json_object_get(split, "parts");
  json_t *stride = json_object_get(split, "stride");
  bool ok = json_is_object(split) && json_object_size(split) == 3 && json_is_integer(dim) &&
            json_is_integer(parts) && json_is_integer(stride);
  int64_t x = ok ? json_integer_value(dim) : -1, T = ok ? json_integer_value(parts) : 0;
  int64_t s = ok ? json_integer_value(stride) : 0;
  ok = ok && x >= 0 && x < q->rank && T >= 2 && T <= q->dims[x] && s >= 1 && s <= 8 &&
       q->dims[x] % (T * s) == 0 && buf->rank == 3 && buf->dims[2] == T &&
       numel / T <= buf->dims[0] * buf->dims[1];
  if (!ok)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): param_split is not {dim, parts, stride} of a dim of "
                       "param_shape that parts x stride (stride 1 to 8) divide, with the input "
                       "[S, m/S, parts] holding a piece",
                       k, name);
  q->split_dim = (int32_t)x;
  q->split_parts = T;
  q->split_stride = s;
  return SC_OK;
}

/* t is {name, dtype, shape} of buffer b. */
static bool is_tensor_of(json_t *t, const sc_buffer *b) {
  const char *name = json_string_value(json_object_get(t, "name"));
  const char *dt = json_string_value(json_object_get(t, "dtype"));
  json_t *shape = json_object_get(t, "shape");
  bool ok = name && dt && b->name && strcmp(name, b->name) == 0 && sc_dtype_parse(dt) == b->dtype &&
            json_is_array(shape) && json_array_size(shape) == (size_t)b->rank;
  for (int32_t k = 0; ok && k < b->rank; k++) {
    json_t *dim = json_array_get(shape, (size_t)k);
    ok = json_is_integer(dim) && json_integer_value(dim) == b->dims[k];
  }
  return ok;
}

static sc_status read_data(json_t *a, const sc_program *p, sc_diag *d) {
  size_t n = 0;
  if (!json_is_array(a))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "'data' missing or not an array");
  for (int32_t i = 0; i < p->n_inputs; i++) {
    if (!is_data(p, i)) continue;
    if (!is_tensor_of(json_array_get(a, n), input_buf(p, i)))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "data[%zu] is not the program's data input '%s' (its "
                         "name, dtype and shape)",
                         n, input_buf(p, i)->name);
    n++;
  }
  if (json_array_size(a) != n)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "'data' lists %zu inputs, the program takes %zu", json_array_size(a), n);
  return SC_OK;
}

/* "vocab" {dim, size} of a vocabulary-padded parameter q (its input buf,
 * named "W.vocab_padded"; its shape param_shape's, read before, or the
 * input's): the model's extent `size` on dim `dim`, less than the
 * parameter's. */
static sc_status read_vocab(const json_t *v, const sc_buffer *buf, size_t k,
                            sc_train_manifest_param *q, sc_diag *d) {
  if (!v) return SC_OK;
  json_t *dim = json_object_get(v, "dim"), *size = json_object_get(v, "size");
  size_t n = buf->name ? strlen(buf->name) : 0, sn = strlen(SC_TRAIN_VOCAB_PADDED);
  int32_t rank = q->rank > 0 ? q->rank : buf->rank;
  const int64_t *dims = q->rank > 0 ? q->dims : buf->dims;
  bool ok = json_is_object(v) && json_object_size(v) == 2 && json_is_integer(dim) &&
            json_is_integer(size) && json_integer_value(dim) >= 0 &&
            json_integer_value(dim) < rank && json_integer_value(size) > 0 &&
            json_integer_value(size) < dims[json_integer_value(dim)] && n > sn &&
            strcmp(buf->name + n - sn, SC_TRAIN_VOCAB_PADDED) == 0;
  if (!ok)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): vocab is not {dim, size} of a parameter named "
                       "W" SC_TRAIN_VOCAB_PADDED ", size less than that dim",
                       k, buf->name ? buf->name : "?");
  q->vocab_dim = (int32_t)json_integer_value(dim);
  q->vocab = json_integer_value(size);
  return SC_OK;
}

static sc_status read_param(json_t *t, size_t k, const sc_program *p, const void *params,
                            int64_t params_bytes, sc_train_manifest *m, sc_diag *d) {
  const char *name = json_string_value(json_object_get(t, "name"));
  json_t *offset = json_object_get(t, "offset"), *bytes = json_object_get(t, "bytes");
  int32_t b = state_input(p, name);
  if (b < 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu]: '%s' is not a parameter of the program (an "
                       "input updated by an output new:NAME)",
                       k, name ? name : "?");
  for (size_t j = 0; j < k; j++)
    if (m->params[j].buffer == b)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "params[%zu]: '%s' listed twice", k, name);
  const sc_buffer *buf = &p->buffers[b];
  int64_t off = json_integer_value(offset);
  if (!is_tensor_of(t, buf) || !json_is_integer(offset) || !json_is_integer(bytes) ||
      json_integer_value(bytes) != buf->bytes)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): dtype, shape or bytes differ from the "
                       "program's",
                       k, name);
  if (off < 0 || off % SC_BUNDLE_WEIGHT_ALIGN != 0 || off > params_bytes ||
      buf->bytes > params_bytes - off)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): offset %lld and %lld bytes are not "
                       "inside params.bin (%lld bytes) or not %d-byte aligned",
                       k, name, (long long)off, (long long)buf->bytes, (long long)params_bytes,
                       SC_BUNDLE_WEIGHT_ALIGN);
  m->params[k] = (sc_train_manifest_param){.name = buf->name,
                                           .buffer = b,
                                           .offset = off,
                                           .data = params ? (const char *)params + off : NULL};
  json_t *own = json_object_get(t, "param_shape"), *split = json_object_get(t, "param_split");
  if (!own && split)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): param_split without param_shape", k, name);
  if (!own) return read_vocab(json_object_get(t, "vocab"), buf, k, &m->params[k], d);
  size_t rank = json_is_array(own) ? json_array_size(own) : 0;
  bool ok = rank >= 1 && rank <= SC_MAX_RANK;
  int64_t numel = 1, room = 1; /* P's elements, and the input's they are padded to */
  for (int32_t j = 0; j < buf->rank; j++) room *= buf->dims[j];
  for (size_t j = 0; ok && j < rank; j++) {
    json_t *x = json_array_get(own, j);
    ok = json_is_integer(x) && json_integer_value(x) > 0 &&
         sc_mul_i64(numel, json_integer_value(x), &numel) && numel <= room;
    if (ok) m->params[k].dims[j] = json_integer_value(x);
  }
  if (!ok)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "params[%zu] ('%s'): param_shape is not 1 to %d positive dims of at "
                       "most the input's %lld elements",
                       k, name, SC_MAX_RANK, (long long)room);
  m->params[k].rank = (int32_t)rank;
  sc_status st = read_split(split, buf, k, name, &m->params[k], numel, d);
  return st == SC_OK ? read_vocab(json_object_get(t, "vocab"), buf, k, &m->params[k], d) : st;
}

/* The scalars and the program agree: fp16 iff a loss-scale input, K > 1
 * iff accumulated gradients. */
static sc_status check_program(const sc_train_manifest *m, const sc_program *p, sc_diag *d) {
  bool fp16 = strcmp(m->precision, "fp16") == 0;
  if (fp16 != has_input_prefix(p, "train:loss_scale"))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "precision %s, but the program %s loss-scale input", m->precision,
                       fp16 ? "has no" : "has a");
  if ((m->grad_accum > 1) != has_input_prefix(p, "accum:"))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "grad_accum %d, but the program %s gradients",
                       (int)m->grad_accum, m->grad_accum > 1 ? "accumulates no" : "accumulates");
  return SC_OK;
}

static sc_status read_root(json_t *r, const sc_program *p, const void *params, int64_t params_bytes,
                           sc_train_manifest *m, sc_diag *d) {
  static const char *const precisions[] = {"fp32", "bf16", "fp16", "fp8", NULL};
  const char *fmt = json_string_value(json_object_get(r, "format"));
  json_t *ver = json_object_get(r, "version"), *accum = json_object_get(r, "grad_accum");
  if (!json_is_object(r) || !fmt || strcmp(fmt, "shardc-training") != 0)
    return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "not a shardc training manifest");
  if (!json_is_integer(ver) || json_integer_value(ver) != SC_TRAIN_MANIFEST_VERSION)
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "version %s (this shardc reads version %d)",
                       json_is_integer(ver) ? "other" : "missing", SC_TRAIN_MANIFEST_VERSION);
  sc_status st = read_optimizer(json_object_get(r, "optimizer"), m, d);
  if (!st) st = read_loss(json_object_get(r, "loss"), m, d);
  if (st) return st;
  if (!number_in(json_object_get(r, "clip_grad_norm"), 0, 1e308, false, &m->clip_grad_norm) ||
      !choice(json_object_get(r, "precision"), precisions, m->precision, sizeof m->precision) ||
      !json_is_integer(accum) || json_integer_value(accum) < 1 ||
      json_integer_value(accum) > (1 << 20))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "'clip_grad_norm' (>= 0), 'precision' (fp32, bf16 or fp16) "
                       "or 'grad_accum' (1 ... 2^20) missing or malformed");
  m->grad_accum = (int32_t)json_integer_value(accum);
  if ((st = check_program(m, p, d)) || (st = read_data(json_object_get(r, "data"), p, d)))
    return st;
  json_t *list = json_object_get(r, "params");
  for (size_t k = 0; st == SC_OK && k < (size_t)m->n_params; k++)
    st = read_param(json_array_get(list, k), k, p, params, params_bytes, m, d);
  return st;
}

sc_status sc_train_manifest_read_json(const char *text, size_t len, const sc_program *p,
                                      const void *params, int64_t params_bytes,
                                      sc_train_manifest **out, sc_diag *d) {
  *out = NULL;
  if (len > MAX_TEXT_BYTES)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "larger than %d bytes", MAX_TEXT_BYTES);
  json_error_t err;
  json_t *r = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &err);
  if (!r) return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "line %d: %s", err.line, err.text);
  json_t *list = json_object_get(r, "params");
  size_t n = json_is_array(list) ? json_array_size(list) : 0;
  sc_status st = SC_OK;
  if (!json_is_array(list) || n > (size_t)p->n_inputs)
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "'params' missing, not an array or longer than the program's "
                     "inputs");
  sc_train_manifest *m = st ? NULL : sc_train_manifest_create((int32_t)n);
  if (!st && !m) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (!st) st = read_root(r, p, params, params_bytes, m, d);
  json_decref(r);
  if (st) {
    sc_train_manifest_destroy(m);
    return st;
  }
  *out = m;
  return SC_OK;
}

/* What follows a parameter's name in the name of its state: nothing (the
 * parameter) or an optimizer state's suffix. */
static bool state_suffix(const char *rest) {
  static const char *const suffix[] = {"", ".momentum_buffer", ".exp_avg", ".exp_avg_sq"};
  for (size_t k = 0; k < sizeof suffix / sizeof *suffix; k++)
    if (strcmp(rest, suffix[k]) == 0) return true;
  return false;
}

/* The name mapping of both directions: `name` is the step's (to_model)
 * or the model's; each padded parameter q of m is tried as the prefix
 * (its name, or its name less the suffix) of name before a state suffix. */
static bool vocab_name(const sc_train_manifest *m, const char *name, char *out, size_t cap,
                       const sc_train_manifest_param **param, bool to_model) {
  size_t sn = strlen(SC_TRAIN_VOCAB_PADDED);
  for (int32_t k = 0; m && name && k < m->n_params; k++) {
    const sc_train_manifest_param *q = &m->params[k];
    size_t full = q->vocab > 0 && q->name ? strlen(q->name) : 0;
    size_t n = to_model || full == 0 ? full : full - sn; /* the prefix name has */
    if (n == 0 || strncmp(name, q->name, n) != 0 || !state_suffix(name + n)) continue;
    int w = to_model ? snprintf(out, cap, "%.*s%s", (int)(full - sn), q->name, name + n)
                     : snprintf(out, cap, "%s%s", q->name, name + n);
    if (w < 0 || (size_t)w >= cap) return false;
    *param = q;
    return true;
  }
  return false;
}

bool sc_train_vocab_model_name(const sc_train_manifest *m, const char *name, char *out,
                               size_t cap, const sc_train_manifest_param **param) {
  return vocab_name(m, name, out, cap, param, true);
}

bool sc_train_vocab_step_name(const sc_train_manifest *m, const char *name, char *out,
                              size_t cap, const sc_train_manifest_param **param) {
  return vocab_name(m, name, out, cap, param, false);
}
