/* parse.c — the textual IR parser (format in docs/ir.md).
 *
 * A hand-written recursive-descent parser over a byte buffer (not
 * necessarily NUL-terminated). The text is untrusted (it is fuzzed): every
 * count and size is checked, nothing is allocated in proportion to a number
 * written in the text (constant data grows with the elements actually
 * present), and every problem is an SC_ERR_PARSE (or the graph API's status)
 * with diag->file = name and a message "line N: what". Values must be defined
 * before they are used, so a parsed graph is in topological order. Comments
 * run from '#' or '//' to the end of the line. A `mesh` statement gives the
 * graph a sharding table; ` shard<...>` after a value's type (which then
 * needs that mesh declared before it) assigns the value's sharding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "sharding.h"
#include "text.h"

enum { MAX_LIST = 1 << 24 }; /* most inputs/outputs/attrs/elements in a list */

typedef struct ptype {
  bool present;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  const char *params[SC_MAX_RANK]; /* arena copies, or NULL */
} ptype;

typedef struct parser {
  const char *s, *end;
  int line;
  sc_graph *g;
  sc_diag *diag;
  char *buf; /* scratch for strings and words */
  size_t buf_cap;
  sc_status st; /* first failure */
} parser;

static sc_status perr(parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static sc_status perr(parser *p, const char *fmt, ...) {
  if (p->st != SC_OK) return p->st;
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->st = SC_ERR_PARSE;
  sc_diag_set(p->diag, SC_ERR_PARSE, NULL, NULL, "line %d: %s", p->line, msg);
  return p->st;
}

/* A failure reported by the graph API (in g->diag) as a parse error. */
static sc_status gerr(parser *p) {
  if (p->st != SC_OK) return p->st;
  sc_status st = p->g->diag.status != SC_OK ? p->g->diag.status : SC_ERR_INVALID;
  perr(p, "%s", p->g->diag.msg[0] ? p->g->diag.msg : "invalid graph");
  p->st = st;
  p->diag->status = st;
  return st;
}

static void skip_ws(parser *p) {
  while (p->s < p->end) {
    char c = *p->s;
    if (c == '\n') {
      p->line++;
      p->s++;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      p->s++;
    } else if (c == '#' || (c == '/' && p->s + 1 < p->end && p->s[1] == '/')) {
      while (p->s < p->end && *p->s != '\n') p->s++;
    } else {
      break;
    }
  }
}

static int peek(parser *p) {
  skip_ws(p);
  return p->s < p->end ? (unsigned char)*p->s : -1;
}

static bool accept(parser *p, char c) {
  if (peek(p) == (unsigned char)c) {
    p->s++;
    return true;
  }
  return false;
}

static const char *describe(parser *p) {
  static const char *eof = "end of input";
  if (p->s >= p->end) return eof;
  unsigned char c = (unsigned char)*p->s;
  size_t n = 0;
  while (p->s + n < p->end && n < 20 && p->s[n] != '\n' && p->s[n] != '\r') n++;
  if (c < 0x20 || c >= 0x7f) {
    snprintf(p->buf, p->buf_cap, "byte 0x%02x", c);
  } else {
    snprintf(p->buf, p->buf_cap, "'%.*s'", (int)n, p->s);
    for (char *q = p->buf; *q; q++)
      if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f) *q = '?';
  }
  return p->buf;
}

static bool expect(parser *p, char c) {
  if (accept(p, c)) return true;
  perr(p, "expected '%c', found %s", c, describe(p));
  return false;
}

static bool is_word_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}

static bool grow_buf(parser *p, size_t need) {
  if (need <= p->buf_cap) return true;
  size_t cap = p->buf_cap ? p->buf_cap : 256;
  while (cap < need) cap *= 2;
  char *b = sc_realloc(p->buf, cap);
  if (!b) {
    perr(p, "out of memory");
    p->st = p->diag->status = SC_ERR_NOMEM;
    return false;
  }
  p->buf = b;
  p->buf_cap = cap;
  return true;
}

/* A plain word ([A-Za-z0-9_.:/-]+) into p->buf; NULL (no error) when none. */
static const char *read_word(parser *p) {
  skip_ws(p);
  size_t n = 0;
  while (p->s + n < p->end && is_word_char((unsigned char)p->s[n])) n++;
  if (n == 0 || !grow_buf(p, n + 1)) return NULL;
  memcpy(p->buf, p->s, n);
  p->buf[n] = 0;
  p->s += n;
  return p->buf;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A "quoted string" with C escapes into p->buf. */
static const char *read_string(parser *p) {
  if (!expect(p, '"')) return NULL;
  size_t n = 0;
  for (;;) {
    if (p->s >= p->end || *p->s == '\n') {
      perr(p, "unterminated string");
      return NULL;
    }
    unsigned char c = (unsigned char)*p->s++;
    if (c == '"') break;
    if (c == 0) {
      perr(p, "NUL byte in a string");
      return NULL;
    }
    if (c == '\\') {
      if (p->s >= p->end) {
        perr(p, "unterminated string");
        return NULL;
      }
      char e = *p->s++;
      switch (e) {
      case '"': c = '"'; break;
      case '\\': c = '\\'; break;
      case 'n': c = '\n'; break;
      case 't': c = '\t'; break;
      case 'r': c = '\r'; break;
      case 'x': {
        int h = p->s < p->end ? hexval((unsigned char)p->s[0]) : -1;
        int l = p->s + 1 < p->end ? hexval((unsigned char)p->s[1]) : -1;
        if (h < 0 || l < 0) {
          perr(p, "\\x needs two hex digits");
          return NULL;
        }
        c = (unsigned char)(h * 16 + l);
        p->s += 2;
        if (c == 0) {
          perr(p, "\\x00 is not allowed in a string");
          return NULL;
        }
        break;
      }
      default:
        perr(p, "unknown escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        return NULL;
      }
    }
    if (!grow_buf(p, n + 2)) return NULL;
    p->buf[n++] = (char)c;
  }
  if (!grow_buf(p, n + 1)) return NULL;
  p->buf[n] = 0;
  return p->buf;
}

/* A name: a plain word or a quoted string. */
static const char *read_name(parser *p, const char *what) {
  int c = peek(p);
  const char *s = c == '"' ? read_string(p) : read_word(p);
  if (!s && p->st == SC_OK) perr(p, "expected %s, found %s", what, describe(p));
  if (s && !s[0]) {
    perr(p, "empty %s", what);
    return NULL;
  }
  return s;
}

/* %name (no space after '%'). */
static const char *read_value_name(parser *p) {
  if (!expect(p, '%')) return NULL;
  if (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n')) {
    perr(p, "expected a name right after '%%'");
    return NULL;
  }
  return read_name(p, "a value name");
}

/* A number token ([0-9A-Za-z.+-_]+, e.g. -12, 1.5e-05, inf, nan). */
static const char *read_number_token(parser *p) {
  skip_ws(p);
  size_t n = 0;
  while (p->s + n < p->end) {
    int c = (unsigned char)p->s[n];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          c == '.' || c == '+' || c == '-' || c == '_'))
      break;
    n++;
  }
  if (n == 0) {
    perr(p, "expected a number, found %s", describe(p));
    return NULL;
  }
  if (n > 64) {
    perr(p, "number too long");
    return NULL;
  }
  if (!grow_buf(p, n + 1)) return NULL;
  memcpy(p->buf, p->s, n);
  p->buf[n] = 0;
  p->s += n;
  return p->buf;
}

static bool is_int_token(const char *t) {
  if (*t == '-') t++;
  if (!*t) return false;
  for (; *t; t++)
    if (*t < '0' || *t > '9') return false;
  return true;
}

static bool tok_int(parser *p, const char *t, int64_t *out) {
  if (!is_int_token(t)) {
    perr(p, "expected an integer, found '%s'", t);
    return false;
  }
  errno = 0;
  long long v = strtoll(t, NULL, 10);
  if (errno == ERANGE) {
    perr(p, "integer '%s' out of range", t);
    return false;
  }
  *out = v;
  return true;
}

static bool tok_float(parser *p, const char *t, double *out) {
  char *e;
  errno = 0;
  double v = strtod(t, &e);
  if (e == t || *e) {
    perr(p, "expected a number, found '%s'", t);
    return false;
  }
  *out = v; /* ERANGE: inf or a denormal, as C's parsing gives */
  return true;
}

static bool read_int(parser *p, int64_t *out) {
  const char *t = read_number_token(p);
  return t && tok_int(p, t, out);
}

/* dtype[dims] or dtype[*]. */
static bool read_type(parser *p, ptype *t) {
  memset(t, 0, sizeof *t);
  const char *w = read_word(p);
  if (!w) {
    if (p->st == SC_OK) perr(p, "expected a type, found %s", describe(p));
    return false;
  }
  sc_dtype dt = sc_dtype_parse(w);
  if (dt == SC_DTYPE_COUNT) {
    perr(p, "unknown dtype '%s'", w);
    return false;
  }
  t->present = true;
  t->dtype = dt;
  if (!expect(p, '[')) return false;
  if (accept(p, '*')) {
    t->rank = -1;
    return expect(p, ']');
  }
  t->rank = 0;
  if (accept(p, ']')) return true;
  int64_t numel = 1;
  for (;;) {
    if (t->rank >= SC_MAX_RANK) {
      perr(p, "rank above %d", SC_MAX_RANK);
      return false;
    }
    int32_t d = t->rank++;
    int c = peek(p);
    const char *param = NULL;
    int64_t val = SC_DIM_UNKNOWN;
    bool have_val = false;
    if (c == '"') {
      param = read_string(p);
      if (!param) return false;
      if (!expect(p, '=')) return false;
    } else if (c != '?') {
      const char *wd = read_word(p);
      if (!wd) {
        if (p->st == SC_OK) perr(p, "expected a dim, found %s", describe(p));
        return false;
      }
      if (accept(p, '=')) {
        param = wd;
      } else {
        if (!tok_int(p, wd, &val)) return false;
        have_val = true;
      }
    }
    if (param) {
      t->params[d] = sc_arena_strdup(&p->g->arena, param);
      if (!t->params[d]) return perr(p, "out of memory"), false;
    }
    if (!have_val) {
      if (accept(p, '?')) {
        val = SC_DIM_UNKNOWN;
      } else if (!read_int(p, &val)) {
        return false;
      }
    }
    if (val != SC_DIM_UNKNOWN && (val < 0 || val > SC_MAX_ELEMENTS)) {
      perr(p, "dim %lld out of range", (long long)val);
      return false;
    }
    t->dims[d] = val;
    if (val >= 0 && (!sc_mul_i64(numel, val, &numel) || numel > SC_MAX_ELEMENTS)) {
      perr(p, "shape has more than 2^50 elements");
      return false;
    }
    if (accept(p, ']')) return true;
    if (!expect(p, ',')) return false;
  }
}

static bool apply_type(parser *p, int32_t id, const ptype *t) {
  sc_value *v = sc_val(p->g, id);
  v->dtype = t->dtype;
  v->rank = t->rank;
  bool any = false;
  for (int32_t d = 0; d < t->rank; d++) {
    v->dims[d] = t->dims[d];
    if (t->params[d]) any = true;
  }
  if (any) {
    v->dim_param = sc_arena_array(&p->g->arena, (size_t)t->rank, sizeof(char *));
    if (!v->dim_param) return perr(p, "out of memory"), false;
    for (int32_t d = 0; d < t->rank; d++) v->dim_param[d] = t->params[d];
  }
  return true;
}

/* Whether the input continues with the keyword kw (not followed by a word
 * character); consumes it when it does. */
static bool accept_keyword(parser *p, const char *kw) {
  skip_ws(p);
  size_t n = strlen(kw);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, kw, n) != 0) return false;
  if (p->s + n < p->end && is_word_char((unsigned char)p->s[n])) return false;
  p->s += n;
  return true;
}

/* An optional ` shard<...>` for a value of the given rank (-1: unknown).
 * *present tells whether there was one. */
static bool read_shard(parser *p, int32_t rank, sc_sharding *out, bool *present) {
  *present = false;
  skip_ws(p);
  if ((size_t)(p->end - p->s) < 6 || memcmp(p->s, "shard<", 6) != 0) return true;
  p->s += 6;
  if (!p->g->shardings)
    return perr(p, "shard<...> needs a 'mesh' statement before it"), false;
  const char *b = p->s;
  while (p->s < p->end && *p->s != '>' && *p->s != '\n') p->s++;
  if (p->s >= p->end || *p->s != '>') return perr(p, "missing '>' after shard<"), false;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_sharding_parse(b, (size_t)(p->s - b), &p->g->shardings->mesh, rank, out, &d) !=
      SC_OK) {
    perr(p, "%s", d.msg);
    p->st = p->diag->status = d.status;
    return false;
  }
  p->s++;
  *present = true;
  return true;
}

static bool apply_shard(parser *p, int32_t id, const sc_sharding *s) {
  if (sc_graph_set_sharding(p->g, id, s) != SC_OK) return gerr(p), false;
  return true;
}

/* mesh '[' [NAME '=' INT (',' NAME '=' INT)*] ']' ['ranks_per_node' INT] */
static bool stmt_mesh(parser *p) {
  if (p->g->shardings) return perr(p, "a second 'mesh' statement"), false;
  sc_mesh m;
  sc_mesh_init(&m);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (!expect(p, '[')) return false;
  if (!accept(p, ']')) {
    for (;;) {
      const char *w = read_word(p);
      if (!w) return perr(p, "expected a mesh axis name, found %s", describe(p)), false;
      char name[SC_MESH_NAME_MAX * 2];
      snprintf(name, sizeof name, "%s", w);
      int64_t size;
      if (!expect(p, '=') || !read_int(p, &size)) return false;
      if (sc_mesh_add_axis(&m, name, size, &d) != SC_OK) return perr(p, "%s", d.msg), false;
      if (accept(p, ']')) break;
      if (!expect(p, ',')) return false;
    }
  }
  if (accept_keyword(p, "ranks_per_node")) {
    int64_t n;
    if (!read_int(p, &n)) return false;
    if (n < 1 || sc_mesh_set_ranks_per_node(&m, n, &d) != SC_OK)
      return perr(p, "ranks_per_node %lld outside 1..%lld", (long long)n,
                  (long long)SC_MESH_MAX_RANKS), false;
  }
  if (sc_graph_attach_mesh(p->g, &m) != SC_OK) return gerr(p), false;
  return true;
}

static int64_t type_numel(const ptype *t) {
  if (t->rank < 0) return -1;
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0) return -1;
    n *= t->dims[d]; /* bounded by read_type */
  }
  return n;
}

static bool int_in_range(sc_dtype t, int64_t v) {
  switch (t) {
  case SC_DTYPE_I8: return v >= INT8_MIN && v <= INT8_MAX;
  case SC_DTYPE_U8: return v >= 0 && v <= UINT8_MAX;
  case SC_DTYPE_I16: return v >= INT16_MIN && v <= INT16_MAX;
  case SC_DTYPE_U16: return v >= 0 && v <= UINT16_MAX;
  case SC_DTYPE_I32: return v >= INT32_MIN && v <= INT32_MAX;
  case SC_DTYPE_U32: return v >= 0 && v <= (int64_t)UINT32_MAX;
  case SC_DTYPE_I4: case SC_DTYPE_U4: case SC_DTYPE_I2: case SC_DTYPE_U2:
    return sc_narrow_wrap(t, v) == v;
  default: return true;
  }
}

/* '[' elements ']' of dtype dt, exactly numel of them, into a heap buffer. */
static bool read_data(parser *p, sc_dtype dt, int64_t numel, void **out,
                      uint64_t *bytes) {
  *out = NULL;
  *bytes = 0;
  unsigned size = sc_dtype_size(dt);
  if (numel < 0)
    return perr(p, "constant data needs a static shape"), false;
  if (size == 0 || !(sc_dtype_is_numeric(dt) || dt == SC_DTYPE_BOOL))
    return perr(p, "inline data of dtype %s is not supported", sc_dtype_name(dt)), false;
  if (!expect(p, '[')) return false;
  uint8_t *data = NULL;
  int64_t n = 0, cap = 0;
  if (!accept(p, ']')) {
    for (;;) {
      if (n >= numel) {
        sc_free(data);
        return perr(p, "more than %lld elements for the shape", (long long)numel), false;
      }
      if (n == cap) {
        int64_t ncap = cap ? cap * 2 : 16;
        if (ncap > numel) ncap = numel;
        uint8_t *d2 = sc_realloc(data, (size_t)ncap * size);
        if (!d2) {
          sc_free(data);
          return perr(p, "out of memory"), false;
        }
        data = d2;
        cap = ncap;
      }
      const char *t = read_number_token(p);
      if (!t) break;
      if (dt == SC_DTYPE_BOOL) {
        if (strcmp(t, "true") == 0 || strcmp(t, "1") == 0)
          data[n] = 1;
        else if (strcmp(t, "false") == 0 || strcmp(t, "0") == 0)
          data[n] = 0;
        else {
          perr(p, "expected true or false, found '%s'", t);
          break;
        }
      } else if (sc_dtype_is_float(dt)) {
        if (dt == SC_DTYPE_F64) {
          double v;
          if (!tok_float(p, t, &v)) break;
          ((double *)data)[n] = v;
        } else {
          char *e;
          float v = strtof(t, &e);
          if (e == t || *e) {
            perr(p, "expected a number, found '%s'", t);
            break;
          }
          if (dt == SC_DTYPE_F32)
            ((float *)data)[n] = v;
          else
            sc_store_f64(dt, data, n, (double)v);
        }
      } else if (dt == SC_DTYPE_U64) {
        if (!is_int_token(t) || t[0] == '-') {
          perr(p, "expected an unsigned integer, found '%s'", t);
          break;
        }
        errno = 0;
        unsigned long long v = strtoull(t, NULL, 10);
        if (errno == ERANGE) {
          perr(p, "integer '%s' out of range", t);
          break;
        }
        ((uint64_t *)data)[n] = v;
      } else {
        int64_t v;
        if (!tok_int(p, t, &v)) break;
        if (!int_in_range(dt, v)) {
          perr(p, "%lld out of range for %s", (long long)v, sc_dtype_name(dt));
          break;
        }
        sc_store_i64(dt, data, n, v);
      }
      n++;
      if (accept(p, ']')) break;
      if (!expect(p, ',')) break;
    }
  }
  if (p->st != SC_OK) {
    sc_free(data);
    return false;
  }
  if (n != numel) {
    sc_free(data);
    return perr(p, "%lld elements for a shape of %lld", (long long)n, (long long)numel),
           false;
  }
  *out = data;
  *bytes = (uint64_t)numel * size;
  return true;
}

/* ---- attributes ---- */

static sc_attr_kind opaque_kind(const char *w) {
  static const struct { const char *name; sc_attr_kind kind; } kinds[] = {
      {"graph", SC_ATTR_GRAPH},           {"tensors", SC_ATTR_TENSORS},
      {"graphs", SC_ATTR_GRAPHS},         {"sparse_tensor", SC_ATTR_SPARSE_TENSOR},
      {"sparse_tensors", SC_ATTR_SPARSE_TENSORS},
      {"type_proto", SC_ATTR_TYPE_PROTO}, {"type_protos", SC_ATTR_TYPE_PROTOS},
      {"tensor", SC_ATTR_TENSOR},         {"undef", SC_ATTR_UNDEF},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kinds[i].name, w) == 0) return kinds[i].kind;
  return SC_ATTR_KIND_COUNT;
}

static bool read_tensor(parser *p, sc_attr *a) {
  /* "tensor" already read */
  if (!expect(p, '<')) return false;
  ptype t;
  if (!read_type(p, &t)) return false;
  if (!expect(p, '>')) return false;
  sc_tensor *ten = sc_arena_alloc(&p->g->arena, sizeof *ten);
  if (!ten) return perr(p, "out of memory"), false;
  ten->dtype = t.dtype;
  ten->rank = t.rank;
  for (int32_t d = 0; d < t.rank; d++) ten->dims[d] = t.dims[d];
  if (peek(p) == '[') {
    void *data;
    uint64_t bytes;
    if (!read_data(p, t.dtype, type_numel(&t), &data, &bytes)) return false;
    void *copy = sc_arena_alloc(&p->g->arena, bytes ? (size_t)bytes : 1);
    if (!copy) {
      sc_free(data);
      return perr(p, "out of memory"), false;
    }
    if (bytes) memcpy(copy, data, (size_t)bytes);
    sc_free(data);
    ten->data = copy;
    ten->data_bytes = bytes;
  }
  a->kind = SC_ATTR_TENSOR;
  a->t = ten;
  a->n = 1;
  return true;
}

static bool read_list(parser *p, sc_attr *a) {
  /* '[' already read */
  sc_arena *ar = &p->g->arena;
  if (accept(p, ']')) {
    a->kind = SC_ATTR_INTS;
    a->n = 0;
    a->ints = sc_arena_alloc(ar, sizeof(int64_t));
    return a->ints ? true : (perr(p, "out of memory"), false);
  }
  bool strings = peek(p) == '"';
  int64_t n = 0, cap = 0;
  int64_t *ints = NULL;
  double *floats = NULL;
  const char **strs = NULL;
  bool any_float = false, ok = true;
  for (;;) {
    if (n >= MAX_LIST) {
      perr(p, "list too long");
      ok = false;
      break;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      int64_t *i2 = sc_realloc(ints, (size_t)cap * sizeof *ints);
      if (i2) ints = i2;
      double *f2 = sc_realloc(floats, (size_t)cap * sizeof *floats);
      if (f2) floats = f2;
      const char **s2 = sc_realloc(strs, (size_t)cap * sizeof *strs);
      if (s2) strs = s2;
      if (!i2 || !f2 || !s2) {
        perr(p, "out of memory");
        ok = false;
        break;
      }
    }
    if (strings) {
      const char *s = read_string(p);
      if (!s || !(strs[n] = sc_arena_strdup(ar, s))) {
        if (p->st == SC_OK) perr(p, "out of memory");
        ok = false;
        break;
      }
    } else {
      const char *t = read_number_token(p);
      if (!t) {
        ok = false;
        break;
      }
      if (is_int_token(t)) {
        if (!tok_int(p, t, &ints[n])) {
          ok = false;
          break;
        }
        floats[n] = (double)(float)ints[n];
      } else {
        char *e;
        float v = strtof(t, &e);
        if (e == t || *e) {
          perr(p, "expected a number, found '%s'", t);
          ok = false;
          break;
        }
        floats[n] = v;
        any_float = true;
      }
    }
    n++;
    if (accept(p, ']')) break;
    if (!expect(p, ',')) {
      ok = false;
      break;
    }
  }
  if (ok) {
    a->n = n;
    if (strings) {
      a->kind = SC_ATTR_STRINGS;
      a->strings = sc_arena_array(ar, (size_t)n, sizeof *strs);
      if (a->strings) memcpy(a->strings, strs, (size_t)n * sizeof *strs);
      ok = a->strings != NULL;
    } else if (any_float) {
      a->kind = SC_ATTR_FLOATS;
      a->floats = sc_arena_array(ar, (size_t)n, sizeof *floats);
      if (a->floats) memcpy(a->floats, floats, (size_t)n * sizeof *floats);
      ok = a->floats != NULL;
    } else {
      a->kind = SC_ATTR_INTS;
      a->ints = sc_arena_array(ar, (size_t)n, sizeof *ints);
      if (a->ints) memcpy(a->ints, ints, (size_t)n * sizeof *ints);
      ok = a->ints != NULL;
    }
    if (!ok) perr(p, "out of memory");
  }
  sc_free(ints);
  sc_free(floats);
  sc_free(strs);
  return ok;
}

static bool read_attr_value(parser *p, sc_attr *a) {
  int c = peek(p);
  if (c == '"') {
    const char *s = read_string(p);
    if (!s) return false;
    a->kind = SC_ATTR_STRING;
    a->s = sc_arena_strdup(&p->g->arena, s);
    return a->s ? true : (perr(p, "out of memory"), false);
  }
  if (c == '[') {
    p->s++;
    return read_list(p, a);
  }
  if (c == '<') {
    p->s++;
    const char *w = read_word(p);
    sc_attr_kind k = w ? opaque_kind(w) : SC_ATTR_KIND_COUNT;
    if (k == SC_ATTR_KIND_COUNT) {
      if (p->st == SC_OK) perr(p, "unknown attribute kind <%s>", w ? w : "");
      return false;
    }
    a->kind = k;
    return expect(p, '>');
  }
  if (c == 't' && p->end - p->s >= 7 && memcmp(p->s, "tensor<", 7) == 0) {
    p->s += 6;
    return read_tensor(p, a);
  }
  const char *t = read_number_token(p);
  if (!t) return false;
  if (is_int_token(t)) {
    a->kind = SC_ATTR_INT;
    return tok_int(p, t, &a->i);
  }
  char *e;
  float v = strtof(t, &e);
  if (e == t || *e) return perr(p, "bad attribute value '%s'", t), false;
  a->kind = SC_ATTR_FLOAT;
  a->f = v;
  return true;
}

/* '{' name = value, ... '}' into a heap array (payloads in the arena). */
static bool read_attrs(parser *p, sc_attr **out, int32_t *n_out) {
  *out = NULL;
  *n_out = 0;
  if (!accept(p, '{')) return true;
  if (accept(p, '}')) return true;
  sc_attr *attrs = NULL;
  int32_t n = 0, cap = 0;
  for (;;) {
    if (n >= 4096) {
      perr(p, "too many attributes");
      break;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      sc_attr *a2 = sc_realloc(attrs, (size_t)cap * sizeof *attrs);
      if (!a2) {
        perr(p, "out of memory");
        break;
      }
      attrs = a2;
    }
    sc_attr *a = &attrs[n];
    memset(a, 0, sizeof *a);
    const char *name = read_name(p, "an attribute name");
    if (!name) break;
    for (int32_t i = 0; i < n; i++)
      if (strcmp(attrs[i].name, name) == 0) {
        perr(p, "attribute '%s' given twice", name);
        break;
      }
    if (p->st != SC_OK) break;
    a->name = sc_arena_strdup(&p->g->arena, name);
    if (!a->name) {
      perr(p, "out of memory");
      break;
    }
    if (!expect(p, '=') || !read_attr_value(p, a)) break;
    n++;
    if (accept(p, '}')) {
      *out = attrs;
      *n_out = n;
      return true;
    }
    if (!expect(p, ',')) break;
  }
  sc_free(attrs);
  return false;
}

/* ---- statements ---- */

static int32_t lookup(parser *p, const char *name) {
  int32_t id = sc_graph_find_value(p->g, name);
  if (id < 0) perr(p, "unknown value '%%%s' (values are defined before use)", name);
  return id;
}

static int32_t new_value(parser *p, const char *name) {
  int32_t id = sc_graph_add_value(p->g, name);
  if (id < 0) gerr(p);
  return id;
}

static bool stmt_input(parser *p) {
  const char *name = read_value_name(p);
  if (!name) return false;
  int32_t id = new_value(p, name);
  if (id < 0) return false;
  if (accept(p, ':')) {
    ptype t;
    if (!read_type(p, &t) || !apply_type(p, id, &t)) return false;
    sc_sharding sh;
    bool has_sh;
    if (!read_shard(p, t.rank, &sh, &has_sh)) return false;
    if (has_sh && !apply_shard(p, id, &sh)) return false;
  }
  if (sc_graph_add_input(p->g, id) != SC_OK) return gerr(p), false;
  return true;
}

static bool stmt_const(parser *p, bool param) {
  const char *name = read_value_name(p);
  if (!name) return false;
  int32_t id = new_value(p, name);
  if (id < 0) return false;
  if (!expect(p, ':')) return false;
  ptype t;
  if (!read_type(p, &t)) return false;
  int64_t numel = type_numel(&t);
  if (numel < 0) return perr(p, "a constant needs a static shape"), false;
  for (int32_t d = 0; d < t.rank; d++)
    if (t.params[d]) return perr(p, "a constant cannot have symbolic dims"), false;
  sc_sharding sh;
  bool has_sh;
  if (!read_shard(p, t.rank, &sh, &has_sh)) return false;
  void *data = NULL;
  uint64_t bytes = 0;
  if (accept(p, '=') && !read_data(p, t.dtype, numel, &data, &bytes)) return false;
  sc_status st = sc_value_set_data(p->g, id, t.dtype, t.rank, t.dims, data, bytes, true);
  sc_free(data);
  if (st != SC_OK) return gerr(p), false;
  if (param) sc_val(p->g, id)->flags |= SC_VALUE_PARAM;
  return !has_sh || apply_shard(p, id, &sh);
}

static bool stmt_output(parser *p) {
  const char *name = read_value_name(p);
  if (!name) return false;
  int32_t id = lookup(p, name);
  if (id < 0) return false;
  if (sc_graph_add_output(p->g, id) != SC_OK) return gerr(p), false;
  return true;
}

typedef struct pout {
  const char *name; /* arena copy, NULL for '_' */
  ptype type;
  bool has_shard;
  sc_sharding shard;
} pout;

/* [outputs '='] Op(inputs) [{attrs}] ["name"]; `word` is the op name when
 * the statement has no outputs. */
static bool stmt_node(parser *p, bool has_outputs) {
  pout *outs = NULL;
  int32_t *ins = NULL, *out_ids = NULL;
  sc_attr *attrs = NULL;
  int32_t n_out = 0, n_in = 0, n_attrs = 0, cap = 0;
  bool ok = false;
  if (has_outputs) {
    for (;;) {
      if (n_out >= 4096) {
        perr(p, "too many outputs");
        goto done;
      }
      if (n_out == cap) {
        cap = cap ? cap * 2 : 4;
        pout *o2 = sc_realloc(outs, (size_t)cap * sizeof *outs);
        if (!o2) {
          perr(p, "out of memory");
          goto done;
        }
        outs = o2;
      }
      pout *o = &outs[n_out];
      memset(o, 0, sizeof *o);
      if (accept(p, '_')) {
        o->name = NULL;
      } else {
        const char *name = read_value_name(p);
        if (!name) goto done;
        o->name = sc_arena_strdup(&p->g->arena, name);
        if (!o->name) {
          perr(p, "out of memory");
          goto done;
        }
        if (accept(p, ':') &&
            (!read_type(p, &o->type) ||
             !read_shard(p, o->type.rank, &o->shard, &o->has_shard)))
          goto done;
      }
      n_out++;
      if (accept(p, '=')) break;
      if (!expect(p, ',')) goto done;
    }
  }
  const char *opname = read_word(p);
  if (!opname) {
    if (p->st == SC_OK) perr(p, "expected an op name, found %s", describe(p));
    goto done;
  }
  sc_op op = sc_op_lookup(opname);
  if (op == SC_OP_COUNT) {
    perr(p, "unknown op '%s'", opname);
    goto done;
  }
  if (!expect(p, '(')) goto done;
  cap = 0;
  if (!accept(p, ')')) {
    for (;;) {
      if (n_in >= 4096) {
        perr(p, "too many inputs");
        goto done;
      }
      if (n_in == cap) {
        cap = cap ? cap * 2 : 4;
        int32_t *i2 = sc_realloc(ins, (size_t)cap * sizeof *ins);
        if (!i2) {
          perr(p, "out of memory");
          goto done;
        }
        ins = i2;
      }
      if (accept(p, '_')) {
        ins[n_in] = -1;
      } else {
        const char *name = read_value_name(p);
        if (!name) goto done;
        if ((ins[n_in] = lookup(p, name)) < 0) goto done;
      }
      n_in++;
      if (accept(p, ')')) break;
      if (!expect(p, ',')) goto done;
    }
  }
  if (!read_attrs(p, &attrs, &n_attrs)) goto done;
  const char *node_name = NULL;
  if (peek(p) == '"') {
    const char *s = read_string(p);
    if (!s) goto done;
    if (!s[0]) {
      perr(p, "empty node name");
      goto done;
    }
    node_name = sc_arena_strdup(&p->g->arena, s);
    if (!node_name) {
      perr(p, "out of memory");
      goto done;
    }
  }
  out_ids = sc_calloc((size_t)n_out + 1, sizeof *out_ids);
  if (!out_ids) {
    perr(p, "out of memory");
    goto done;
  }
  for (int32_t i = 0; i < n_out; i++) {
    out_ids[i] = -1;
    if (!outs[i].name) continue;
    if ((out_ids[i] = new_value(p, outs[i].name)) < 0) goto done;
    if (outs[i].type.present && !apply_type(p, out_ids[i], &outs[i].type)) goto done;
    if (outs[i].has_shard && !apply_shard(p, out_ids[i], &outs[i].shard)) goto done;
  }
  int32_t nid = sc_graph_add_node(p->g, op, node_name, ins, n_in, out_ids, n_out);
  if (nid < 0) {
    gerr(p);
    goto done;
  }
  if (n_attrs) {
    sc_attr *a = sc_arena_array(&p->g->arena, (size_t)n_attrs, sizeof *a);
    if (!a) {
      perr(p, "out of memory");
      goto done;
    }
    memcpy(a, attrs, (size_t)n_attrs * sizeof *a);
    sc_nod(p->g, nid)->attrs = a;
    sc_nod(p->g, nid)->n_attrs = n_attrs;
  }
  ok = true;
done:
  sc_free(outs);
  sc_free(ins);
  sc_free(out_ids);
  sc_free(attrs);
  return ok;
}

static bool parse_graph(parser *p) {
  const char *w = read_word(p);
  if (!w || strcmp(w, "shardc.ir") != 0)
    return perr(p, "expected 'shardc.ir 1' at the start"), false;
  int64_t version;
  if (!read_int(p, &version)) return false;
  if (version != 1) return perr(p, "unsupported IR text version %lld", (long long)version), false;
  w = read_word(p);
  if (!w || strcmp(w, "graph") != 0) return perr(p, "expected 'graph'"), false;
  const char *name = read_string(p);
  if (!name) return false;
  p->g->name = sc_arena_strdup(&p->g->arena, name);
  if (!p->g->name) return perr(p, "out of memory"), false;
  w = read_word(p);
  if (!w || strcmp(w, "opset") != 0) return perr(p, "expected 'opset'"), false;
  int64_t opset;
  if (!read_int(p, &opset)) return false;
  if (opset < 1 || opset > SC_OPSET_MAX)
    return perr(p, "opset %lld outside 1..%d", (long long)opset, SC_OPSET_MAX), false;
  p->g->opset = opset;
  p->g->ir_version = 0;
  if (!expect(p, '{')) return false;
  for (;;) {
    int c = peek(p);
    if (c < 0) return perr(p, "missing '}' at the end of the graph"), false;
    if (c == '}') {
      p->s++;
      break;
    }
    bool ok;
    if (c == '%' || (c == '_' && !(p->s + 1 < p->end && is_word_char((unsigned char)p->s[1])))) {
      ok = stmt_node(p, true);
    } else {
      const char *save = p->s;
      int save_line = p->line;
      w = read_word(p);
      if (!w) return perr(p, "expected a statement, found %s", describe(p)), false;
      if (strcmp(w, "input") == 0) {
        ok = stmt_input(p);
      } else if (strcmp(w, "const") == 0 || strcmp(w, "param") == 0) {
        ok = stmt_const(p, w[0] == 'p');
      } else if (strcmp(w, "output") == 0) {
        ok = stmt_output(p);
      } else if (strcmp(w, "mesh") == 0) {
        ok = stmt_mesh(p);
      } else {
        p->s = save; /* an op with no outputs */
        p->line = save_line;
        ok = stmt_node(p, false);
      }
    }
    if (!ok) return false;
  }
  if (peek(p) >= 0) return perr(p, "unexpected %s after the graph", describe(p)), false;
  return true;
}

sc_status sc_ir_parse(const char *text, size_t len, const char *name,
                      sc_graph **out, sc_diag *diag) {
  sc_diag local = {0};
  if (!diag) diag = &local;
  sc_diag_clear(diag);
  sc_diag_set_file(diag, name ? name : "<text>");
  *out = NULL;
  parser p;
  memset(&p, 0, sizeof p);
  p.s = text ? text : "";
  p.end = p.s + (text ? len : 0);
  p.line = 1;
  p.diag = diag;
  p.g = sc_graph_create("main");
  if (!p.g) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (!grow_buf(&p, 256) || !parse_graph(&p)) {
    if (p.st == SC_OK) perr(&p, "parse error");
    sc_free(p.buf);
    sc_graph_destroy(p.g);
    return diag->status != SC_OK ? diag->status : SC_ERR_PARSE;
  }
  sc_free(p.buf);
  *out = p.g;
  return SC_OK;
}

sc_status sc_ir_parse_file(const char *path, sc_graph **out, sc_diag *diag) {
  sc_diag local = {0};
  if (!diag) diag = &local;
  sc_diag_clear(diag);
  sc_diag_set_file(diag, path);
  *out = NULL;
  /* a regular file (a FIFO is refused, not waited on) of at most 2 GiB */
  char *text = NULL;
  size_t len = 0;
  sc_status st = sc_file_read_all(path, NULL, (int64_t)1 << 31, &text, &len, diag);
  if (st != SC_OK) return st;
  st = sc_ir_parse(text, len, path, out, diag);
  sc_free(text);
  return st;
}
