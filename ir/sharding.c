/* sharding.c — sharding checks, local shapes, text form, the graph's table.
 *
 * The text parser works on a byte range (not NUL-terminated: the IR parser
 * hands it a slice of its input) and is strict: unknown axes, repeated axes,
 * a wrong number of dims and trailing bytes are errors. The table lives
 * outside the graph arena (it grows and is remapped) and is freed through a
 * graph cleanup registered when it is created. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sharding.h"

void sc_sharding_replicated(sc_sharding *s, int32_t rank) {
  memset(s, 0, sizeof *s);
  SC_ASSERT(rank >= 0 && rank <= SC_MAX_RANK);
  s->rank = rank;
}

bool sc_sharding_is_replicated(const sc_sharding *s) {
  return s->partial == 0 && sc_sharding_dim_axes(s) == 0;
}

void sc_sharding_split(sc_sharding *s, int32_t d, int32_t axis) {
  SC_ASSERT(d >= 0 && d < s->rank && s->n_dim_axes[d] < SC_MESH_MAX_AXES);
  SC_ASSERT(axis >= 0 && axis < SC_MESH_MAX_AXES);
  s->dim_axes[d][s->n_dim_axes[d]++] = (int8_t)axis;
}

sc_axes sc_sharding_dim_axes(const sc_sharding *s) {
  sc_axes a = 0;
  for (int32_t d = 0; d < s->rank; d++)
    for (int32_t k = 0; k < s->n_dim_axes[d]; k++) a |= 1u << s->dim_axes[d][k];
  return a;
}

int64_t sc_sharding_dim_parts(const sc_sharding *s, const sc_mesh *m, int32_t d) {
  int64_t n = 1;
  for (int32_t k = 0; k < s->n_dim_axes[d]; k++) n *= m->axes[s->dim_axes[d][k]].size;
  return n;
}

bool sc_sharding_equal(const sc_sharding *a, const sc_sharding *b) {
  if (a->rank != b->rank || a->partial != b->partial) return false;
  for (int32_t d = 0; d < a->rank; d++) {
    if (a->n_dim_axes[d] != b->n_dim_axes[d]) return false;
    for (int32_t k = 0; k < a->n_dim_axes[d]; k++)
      if (a->dim_axes[d][k] != b->dim_axes[d][k]) return false;
    if (sc_sharding_stride(a, d) != sc_sharding_stride(b, d)) return false;
  }
  return true;
}

sc_status sc_sharding_validate(const sc_sharding *s, const sc_mesh *m, sc_diag *d) {
  if (s->rank < 0 || s->rank > SC_MAX_RANK)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "sharding of rank %d", s->rank);
  if (s->partial & ~sc_mesh_all_axes(m))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "sharding: partial over an axis the mesh does not have");
  sc_axes seen = 0;
  for (int32_t i = 0; i < s->rank; i++) {
    if (s->n_dim_axes[i] > SC_MESH_MAX_AXES)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "sharding: too many axes on dim %d", i);
    for (int32_t k = 0; k < s->n_dim_axes[i]; k++) {
      int32_t a = s->dim_axes[i][k];
      if (a < 0 || a >= m->n_axes)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "sharding: dim %d uses axis %d; the mesh has %d", i, a,
                           m->n_axes);
      if (seen & (1u << a))
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "sharding: mesh axis '%s' splits more than one dim (or twice)",
                           m->axes[a].name);
      seen |= 1u << a;
    }
    if (s->stride[i] > 1 && s->n_dim_axes[i] == 0)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "sharding: dim %d has a stride but is not split", i);
  }
  for (int32_t a = 0; a < m->n_axes; a++)
    if ((s->partial & (1u << a)) && (seen & (1u << a)))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "sharding: mesh axis '%s' both splits a dim and is partial",
                         m->axes[a].name);
  return SC_OK;
}

/* "(dp,tp)" or "dp" for dim d, for messages. */
static void dim_axes_text(const sc_sharding *s, const sc_mesh *m, int32_t d, char *buf,
                          size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int32_t k = 0; k < s->n_dim_axes[d] && len < n; k++) {
    int w = snprintf(buf + len, n - len, "%s%s", k ? "," : "",
                     m->axes[s->dim_axes[d][k]].name);
    if (w > 0) len += (size_t)w;
  }
}

sc_status sc_sharding_local_shape(const sc_sharding *s, const sc_mesh *m, int32_t rank,
                                  const int64_t *dims, int64_t *local,
                                  const char *value_name, sc_diag *d) {
  const char *vn = value_name ? value_name : "?";
  if (s->rank != rank)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "value '%s' has rank %d but its sharding has %d dims", vn, rank,
                       s->rank);
  sc_status st = sc_sharding_validate(s, m, d);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < rank; i++) {
    int64_t parts = sc_sharding_dim_parts(s, m, i);
    if (parts == 1) {
      local[i] = dims[i];
      continue;
    }
    char ax[SC_MESH_MAX_AXES * SC_MESH_NAME_MAX];
    dim_axes_text(s, m, i, ax, sizeof ax);
    if (dims[i] < 0)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "value '%s': dim %d is unknown and cannot be split over (%s)", vn,
                         i, ax);
    int64_t stride = sc_sharding_stride(s, i);
    if (dims[i] % (parts * stride) != 0)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "value '%s': dim %d (%lld) is not divisible by %lld, the size of "
                         "mesh axes (%s)%s",
                         vn, i, (long long)dims[i], (long long)(parts * stride), ax,
                         stride > 1 ? " times the stride" : "");
    local[i] = dims[i] / parts;
  }
  return SC_OK;
}

size_t sc_sharding_format(const sc_sharding *s, const sc_mesh *m, char *buf, size_t n) {
  size_t len = 0;
#define PUT(...)                                                                   \
  do {                                                                             \
    int w_ = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, __VA_ARGS__); \
    if (w_ > 0) len += (size_t)w_;                                                 \
  } while (0)
  if (n) buf[0] = 0;
  PUT("[");
  for (int32_t d = 0; d < s->rank; d++) {
    if (d) PUT(",");
    int32_t k = s->n_dim_axes[d];
    if (k == 0) PUT("_");
    if (k > 0 && s->stride[d] > 1) PUT("%d*", (int)s->stride[d]);
    if (k > 1) PUT("(");
    for (int32_t j = 0; j < k; j++) {
      int32_t a = s->dim_axes[d][j];
      PUT("%s%s", j ? "," : "", a >= 0 && a < m->n_axes ? m->axes[a].name : "?");
    }
    if (k > 1) PUT(")");
  }
  PUT("]");
  if (s->partial) {
    PUT(" partial(");
    bool first = true;
    for (int32_t a = 0; a < SC_MESH_MAX_AXES; a++) {
      if (!(s->partial & (1u << a))) continue;
      PUT("%s%s", first ? "" : ",", a < m->n_axes ? m->axes[a].name : "?");
      first = false;
    }
    PUT(")");
  }
#undef PUT
  return len;
}

/* ---- parsing ---- */

typedef struct lex {
  const char *s, *end, *start;
  const sc_mesh *m;
  sc_diag *d;
} lex;

static void lws(lex *l) {
  while (l->s < l->end && (*l->s == ' ' || *l->s == '\t')) l->s++;
}

static bool lacc(lex *l, char c) {
  lws(l);
  if (l->s < l->end && *l->s == c) {
    l->s++;
    return true;
  }
  return false;
}

static sc_status lerr(lex *l, const char *what) {
  int at = (int)(l->s - l->start);
  int total = (int)(l->end - l->start);
  return sc_diag_set(l->d, SC_ERR_PARSE, NULL, NULL,
                     "sharding '%.*s': %s at offset %d", total > 200 ? 200 : total,
                     l->start, what, at);
}

/* An axis name; -1 with the diag set when missing or unknown. */
static int32_t laxis(lex *l) {
  lws(l);
  const char *b = l->s;
  while (l->s < l->end && (isalnum((unsigned char)*l->s) || *l->s == '_')) l->s++;
  size_t n = (size_t)(l->s - b);
  if (n == 0) return lerr(l, "expected a mesh axis name"), -1;
  char name[SC_MESH_NAME_MAX];
  if (n >= sizeof name) {
    sc_diag_set(l->d, SC_ERR_INVALID, NULL, NULL, "sharding: axis name '%.*s' too long",
                (int)n, b);
    return -1;
  }
  memcpy(name, b, n);
  name[n] = 0;
  int32_t a = sc_mesh_find_axis(l->m, name);
  if (a < 0) {
    char mesh[512];
    sc_mesh_format(l->m, mesh, sizeof mesh);
    sc_diag_set(l->d, SC_ERR_INVALID, NULL, NULL,
                "sharding: unknown mesh axis '%s' (mesh: %s)", name,
                mesh[0] ? mesh : "no axes");
  }
  return a;
}

sc_status sc_sharding_parse(const char *text, size_t len, const sc_mesh *m, int32_t rank,
                            sc_sharding *out, sc_diag *d) {
  lex l = {text, text + len, text, m, d};
  sc_sharding s;
  memset(&s, 0, sizeof s);
  if (!lacc(&l, '[')) return lerr(&l, "expected '['");
  if (!lacc(&l, ']')) {
    for (;;) {
      if (s.rank >= SC_MAX_RANK) return lerr(&l, "more than 8 dims");
      int32_t dim = s.rank++;
      lws(&l);
      if (l.s < l.end && isdigit((unsigned char)*l.s)) {
        int64_t k = 0;
        while (l.s < l.end && isdigit((unsigned char)*l.s) && k < 1000) k = k * 10 + (*l.s++ - '0');
        if (k < 2 || k > 255) return lerr(&l, "stride must be 2..255");
        if (!lacc(&l, '*')) return lerr(&l, "expected '*' after a stride");
        s.stride[dim] = (uint8_t)k;
        lws(&l);
        if (l.s < l.end && *l.s == '_') return lerr(&l, "a stride needs axes");
      }
      if (lacc(&l, '(')) {
        for (;;) {
          int32_t a = laxis(&l);
          if (a < 0) return d->status;
          if (s.n_dim_axes[dim] >= SC_MESH_MAX_AXES) return lerr(&l, "too many axes");
          s.dim_axes[dim][s.n_dim_axes[dim]++] = (int8_t)a;
          if (lacc(&l, ')')) break;
          if (!lacc(&l, ',')) return lerr(&l, "expected ',' or ')'");
        }
      } else if (l.s < l.end && *l.s == '_' &&
                 !(l.s + 1 < l.end && (isalnum((unsigned char)l.s[1]) || l.s[1] == '_'))) {
        l.s++;
      } else {
        int32_t a = laxis(&l);
        if (a < 0) return d->status;
        s.dim_axes[dim][s.n_dim_axes[dim]++] = (int8_t)a;
      }
      if (lacc(&l, ']')) break;
      if (!lacc(&l, ',')) return lerr(&l, "expected ',' or ']'");
    }
  }
  lws(&l);
  static const char kw[] = "partial";
  if (l.s < l.end) {
    if ((size_t)(l.end - l.s) < sizeof kw - 1 || memcmp(l.s, kw, sizeof kw - 1) != 0)
      return lerr(&l, "expected 'partial(...)' or the end");
    l.s += sizeof kw - 1;
    if (!lacc(&l, '(')) return lerr(&l, "expected '(' after 'partial'");
    for (;;) {
      int32_t a = laxis(&l);
      if (a < 0) return d->status;
      if (s.partial & (1u << a))
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "sharding: axis '%s' is partial twice", m->axes[a].name);
      s.partial |= 1u << a;
      if (lacc(&l, ')')) break;
      if (!lacc(&l, ',')) return lerr(&l, "expected ',' or ')'");
    }
    lws(&l);
    if (l.s < l.end) return lerr(&l, "unexpected text after 'partial(...)'");
  }
  if (rank >= 0 && s.rank != rank)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "sharding '%.*s' has %d dims; the value has rank %d",
                       (int)(len > 200 ? 200 : len), text, s.rank, rank);
  sc_status st = sc_sharding_validate(&s, m, d);
  if (st != SC_OK) return st;
  *out = s;
  return SC_OK;
}

/* ---- the graph's table ---- */

static void table_free(void *p) {
  sc_shardings *t = p;
  sc_free(t->set);
  sc_free(t->of);
  sc_free(t);
}

sc_status sc_graph_attach_mesh(sc_graph *g, const sc_mesh *mesh) {
  if (!g->shardings) {
    sc_shardings *t = sc_calloc(1, sizeof *t);
    if (!t) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    if (sc_graph_add_cleanup(g, table_free, t) != SC_OK) {
      sc_free(t);
      return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
    }
    g->shardings = t;
  }
  sc_shardings *t = g->shardings;
  t->mesh = *mesh;
  if (t->n > 0) memset(t->set, 0, (size_t)t->n);
  return SC_OK;
}

void sc_graph_mark_local_shapes(sc_graph *g) {
  if (g->shardings) g->shardings->local_shapes = true;
}

const sc_mesh *sc_graph_mesh(const sc_graph *g) {
  return g->shardings ? &g->shardings->mesh : NULL;
}

const sc_sharding *sc_graph_sharding(const sc_graph *g, int32_t id) {
  const sc_shardings *t = g->shardings;
  if (!t || id < 0 || id >= t->n || !t->set[id]) return NULL;
  return &t->of[id];
}

static bool table_grow(sc_shardings *t, int32_t need) {
  if (need <= t->n) return true;
  int32_t cap = t->n ? t->n : 16;
  while (cap < need) cap = cap > INT32_MAX / 2 ? need : cap * 2;
  uint8_t *set = sc_realloc(t->set, (size_t)cap);
  if (!set) return false;
  t->set = set;
  sc_sharding *of = sc_realloc(t->of, (size_t)cap * sizeof *of);
  if (!of) return false;
  t->of = of;
  memset(t->set + t->n, 0, (size_t)(cap - t->n));
  memset(t->of + t->n, 0, (size_t)(cap - t->n) * sizeof *of);
  t->n = cap;
  return true;
}

sc_status sc_graph_set_sharding(sc_graph *g, int32_t id, const sc_sharding *s) {
  sc_shardings *t = g->shardings;
  if (!t) return sc_graph_error(g, SC_ERR_USAGE, "set_sharding: no mesh attached");
  SC_ASSERT(id >= 0 && id < g->n_values);
  if (!s) {
    if (id < t->n) t->set[id] = 0;
    return SC_OK;
  }
  const sc_value *v = &g->values[id];
  if (v->rank >= 0 && s->rank != v->rank)
    return sc_graph_error(g, SC_ERR_INVALID,
                          "value '%s' has rank %d but its sharding has %d dims", v->name,
                          v->rank, s->rank);
  sc_status st = sc_sharding_validate(s, &t->mesh, &g->diag);
  if (st != SC_OK) return st;
  bool known = v->rank >= 0 && !t->local_shapes;
  for (int32_t d = 0; known && d < v->rank; d++) known = v->dims[d] >= 0;
  int64_t local[SC_MAX_RANK];
  if (known && (st = sc_sharding_local_shape(s, &t->mesh, v->rank, v->dims, local, v->name,
                                             &g->diag)) != SC_OK)
    return st;
  if (!table_grow(t, id + 1)) return sc_graph_error(g, SC_ERR_NOMEM, "out of memory");
  t->of[id] = *s;
  t->set[id] = 1;
  return SC_OK;
}

void sc_shardings_remap(sc_shardings *t, const int32_t *vmap, int32_t n_old) {
  /* vmap is increasing on live ids, so moving down in place is safe */
  int32_t lim = n_old < t->n ? n_old : t->n;
  int32_t top = 0;
  for (int32_t i = 0; i < lim; i++) {
    int32_t j = vmap[i];
    if (j < 0) continue;
    SC_ASSERT(j <= i);
    t->set[j] = t->set[i];
    t->of[j] = t->of[i];
    top = j + 1;
  }
  if (top < t->n) memset(t->set + top, 0, (size_t)(t->n - top));
}

void sc_sharding_piece(const sc_sharding *s, const sc_mesh *m, int32_t d, int64_t size,
                       const int64_t *coords, int64_t *offset, int64_t *extent) {
  int64_t parts = sc_sharding_dim_parts(s, m, d);
  int64_t block = size / sc_sharding_stride(s, d);
  int64_t idx = 0; /* mixed radix over the dim's axes, major first */
  for (int32_t k = 0; k < s->n_dim_axes[d]; k++) {
    int32_t a = s->dim_axes[d][k];
    idx = idx * m->axes[a].size + coords[a];
  }
  *extent = block / parts;
  *offset = idx * *extent;
}

/* Copies between the global tensor and rank coords' packed local piece:
 * to_local, global into piece (extract), else piece into global (insert). */
static void copy_piece(const sc_sharding *s, const sc_mesh *m, const int64_t *coords,
                       size_t esz, const int64_t *dims, char *global, char *piece,
                       bool to_local) {
  int32_t r = s->rank;
  int64_t local[SC_MAX_RANK] = {0}, off[SC_MAX_RANK] = {0}, ext[SC_MAX_RANK] = {0},
          blk[SC_MAX_RANK] = {0};
  int64_t n = 1;
  bool zero = false;
  for (int32_t a = 0; a < m->n_axes; a++)
    if ((s->partial & (1u << a)) && coords[a] != 0) zero = true;
  for (int32_t d = 0; d < r; d++) {
    sc_sharding_piece(s, m, d, dims[d], coords, &off[d], &ext[d]);
    blk[d] = dims[d] / sc_sharding_stride(s, d);
    local[d] = ext[d] * sc_sharding_stride(s, d);
    n *= local[d];
  }
  if (n == 0) return;
  if (zero && to_local) {
    memset(piece, 0, (size_t)n * esz);
    return;
  }
  /* Copy runs of the innermost dim; walk the outer local index. */
  int64_t inner = r ? local[r - 1] : 1;
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t done = 0; done < n; done += inner) {
    /* global offset of local index idx (last dim at 0) */
    int64_t g = 0;
    for (int32_t d = 0; d < r; d++) {
      int64_t li = d == r - 1 ? 0 : idx[d];
      int64_t b = li / ext[d], w = li % ext[d];
      g = g * dims[d] + b * blk[d] + off[d] + w;
    }
    if (r == 0) {
      if (to_local) memcpy(piece, global, esz);
      else memcpy(global, piece, esz);
      break;
    }
    /* the innermost dim's run may cross stride blocks */
    int64_t st = sc_sharding_stride(s, r - 1);
    int64_t base = g - off[r - 1];
    for (int64_t b = 0; b < st; b++) {
      char *lp = piece + (size_t)(done + b * ext[r - 1]) * esz;
      char *gp = global + (size_t)(base + b * blk[r - 1] + off[r - 1]) * esz;
      if (to_local) memcpy(lp, gp, (size_t)ext[r - 1] * esz);
      else memcpy(gp, lp, (size_t)ext[r - 1] * esz);
    }
    for (int32_t d = r - 2; d >= 0; d--) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

void sc_sharding_extract(const sc_sharding *s, const sc_mesh *m, const int64_t *coords,
                         size_t esz, const int64_t *dims, const void *src, void *dst) {
  copy_piece(s, m, coords, esz, dims, (char *)src, dst, true);
}

void sc_sharding_insert(const sc_sharding *s, const sc_mesh *m, const int64_t *coords,
                        size_t esz, const int64_t *dims, const void *src, void *dst) {
  copy_piece(s, m, coords, esz, dims, dst, (char *)src, false);
}
