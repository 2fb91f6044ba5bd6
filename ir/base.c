/* base.c — status names, diagnostics, allocation hook, the address-space
 * probe and the arena. An allocation through the hook that fails leaves its
 * size with the thread, so that a later bare "out of memory" diagnostic
 * says how much was asked for. */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local uint64_t failed_bytes; /* the last failed request, or 0 */

uint64_t sc_alloc_take_failed_bytes(void) {
  uint64_t n = failed_bytes;
  failed_bytes = 0;
  return n;
}

const char *sc_status_name(sc_status s) {
  static const char *const names[SC_STATUS_COUNT] = {
      "ok",          "i/o error", "parse error", "invalid",
      "unsupported", "limit",     "out of memory", "usage"};
  return (unsigned)s < SC_STATUS_COUNT ? names[s] : "?";
}

void sc_diag_clear(sc_diag *d) {
  char file[sizeof d->file];
  memcpy(file, d->file, sizeof file);
  memset(d, 0, sizeof *d);
  memcpy(d->file, file, sizeof file);
}

static void copy_str(char *dst, size_t n, const char *src) {
  if (!src) src = "";
  size_t len = strlen(src);
  if (len >= n) len = n - 1;
  memcpy(dst, src, len);
  dst[len] = 0;
}

sc_status sc_diag_vset(sc_diag *d, sc_status status, const char *node,
                       const char *op, const char *fmt, va_list ap) {
  if (!d || d->status != SC_OK) return status;
  d->status = status;
  copy_str(d->node, sizeof d->node, node);
  copy_str(d->op, sizeof d->op, op);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  /* a bare "...out of memory": with the size of the request that failed */
  static const char oom[] = "out of memory";
  size_t len = strlen(d->msg), ol = sizeof oom - 1;
  uint64_t bytes = status == SC_ERR_NOMEM ? sc_alloc_take_failed_bytes() : 0;
  if (bytes && len >= ol && strcmp(d->msg + len - ol, oom) == 0)
    snprintf(d->msg + len, sizeof d->msg - len, ": needed %llu bytes", (unsigned long long)bytes);
  return status;
}

sc_status sc_diag_nomem(sc_diag *d, uint64_t bytes, const char *what_fmt, ...) {
  if (!d || d->status != SC_OK) return SC_ERR_NOMEM;
  sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory: needed %llu bytes for ",
              (unsigned long long)bytes);
  size_t n = strlen(d->msg);
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(d->msg + n, sizeof d->msg - n, what_fmt, ap);
  va_end(ap);
  return SC_ERR_NOMEM;
}

bool sc_mem_probe(uint64_t bytes) {
  if (bytes == 0) return true;
  if (bytes > SIZE_MAX) return false;
  void *p = mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, (size_t)bytes);
  return true;
}

sc_status sc_diag_set(sc_diag *d, sc_status status, const char *node,
                      const char *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(d, status, node, op, fmt, ap);
  va_end(ap);
  return status;
}

sc_status sc_diag_vset_prefixed(sc_diag *d, sc_status status, const char *prefix,
                                const char *fmt, va_list ap) {
  if (!d || d->status != SC_OK) return status;
  sc_diag_set(d, status, NULL, NULL, "%s%s", prefix ? prefix : "", prefix ? ": " : "");
  size_t n = strlen(d->msg);
  vsnprintf(d->msg + n, sizeof d->msg - n, fmt, ap);
  return status;
}

sc_status sc_diag_set_prefixed(sc_diag *d, sc_status status, const char *prefix,
                               const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset_prefixed(d, status, prefix, fmt, ap);
  va_end(ap);
  return status;
}

void sc_diag_set_file(sc_diag *d, const char *file) {
  copy_str(d->file, sizeof d->file, file);
}

/* Node names come from untrusted files: print them with control characters
 * escaped so an error line stays one line. */
static size_t put_escaped(char *buf, size_t pos, size_t n, const char *s) {
  for (; *s && pos + 5 < n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c == 0x7f)
      pos += (size_t)snprintf(buf + pos, n - pos, "\\x%02x", c);
    else
      buf[pos++] = (char)c;
  }
  buf[pos < n ? pos : n - 1] = 0;
  return pos;
}

void sc_diag_format(const sc_diag *d, char *buf, size_t n) {
  if (n == 0) return;
  size_t pos = 0;
  buf[0] = 0;
  if (d->file[0]) {
    pos = put_escaped(buf, pos, n, d->file);
    pos = put_escaped(buf, pos, n, ": ");
  }
  if (d->node[0] || d->op[0]) {
    pos = put_escaped(buf, pos, n, "node '");
    pos = put_escaped(buf, pos, n, d->node);
    pos = put_escaped(buf, pos, n, "'");
    if (d->op[0]) {
      pos = put_escaped(buf, pos, n, " (");
      pos = put_escaped(buf, pos, n, d->op);
      pos = put_escaped(buf, pos, n, ")");
    }
    pos = put_escaped(buf, pos, n, ": ");
  }
  put_escaped(buf, pos, n, d->msg[0] ? d->msg : sc_status_name(d->status));
}

void sc_assert_fail(const char *file, int line, const char *what) {
  fprintf(stderr, "shardc: internal error: %s:%d: assertion failed: %s\n",
          file, line, what);
  abort();
}

/* ---- allocation hook ---- */

static void *def_alloc(void *ud, size_t n) { (void)ud; return malloc(n); }
static void *def_realloc(void *ud, void *p, size_t n) {
  (void)ud;
  return realloc(p, n);
}
static void def_free(void *ud, void *p) { (void)ud; free(p); }
static sc_allocator g_alloc = {def_alloc, def_realloc, def_free, NULL};

void sc_set_allocator(const sc_allocator *a) {
  if (a)
    g_alloc = *a;
  else
    g_alloc = (sc_allocator){def_alloc, def_realloc, def_free, NULL};
}
void *sc_malloc(size_t n) {
  void *p = g_alloc.alloc(g_alloc.ud, n ? n : 1);
  if (!p) failed_bytes = n ? n : 1;
  return p;
}
void *sc_calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return NULL;
  void *p = sc_malloc(n);
  if (p) memset(p, 0, n);
  return p;
}
void *sc_realloc(void *p, size_t n) {
  void *q = g_alloc.realloc(g_alloc.ud, p, n ? n : 1);
  if (!q) failed_bytes = n ? n : 1;
  return q;
}
void sc_free(void *p) {
  if (p) g_alloc.free(g_alloc.ud, p);
}
bool sc_grow_i32_pair(int32_t **a, int32_t **b, int32_t n, int32_t *cap) {
  if (n < *cap) return true;
  if (*cap > INT32_MAX / 2) return false;
  int32_t c = *cap ? 2 * *cap : 64;
  int32_t *x = sc_realloc(*a, (size_t)c * sizeof *x);
  if (x) *a = x;
  int32_t *y = sc_realloc(*b, (size_t)c * sizeof *y);
  if (y) *b = y;
  if (!x || !y) return false;
  *cap = c;
  return true;
}
char *sc_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = sc_malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* ---- arena ---- */

struct sc_arena_chunk {
  sc_arena_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

enum { ARENA_CHUNK = 64 * 1024 };

void sc_arena_init(sc_arena *a) { memset(a, 0, sizeof *a); }

void sc_arena_free(sc_arena *a) {
  sc_arena_chunk *c = a->head;
  while (c) {
    sc_arena_chunk *next = c->next;
    sc_free(c);
    c = next;
  }
  a->head = NULL;
  a->used_bytes = 0;
}

void *sc_arena_alloc(sc_arena *a, size_t n) {
  if (n > SIZE_MAX / 2) return NULL;
  size_t need = (n + 15) & ~(size_t)15;
  if (need == 0) need = 16;
  sc_arena_chunk *c = a->head;
  if (!c || c->size - c->used < need) {
    size_t size = need > ARENA_CHUNK / 4 ? need : ARENA_CHUNK;
    c = sc_malloc(sizeof *c + size);
    if (!c) return NULL;
    c->size = size;
    c->used = 0;
    if (size != ARENA_CHUNK && a->head) {
      /* big block: keep the current chunk on top so its space stays usable */
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += need;
  a->used_bytes += need;
  memset(p, 0, n);
  return p;
}

void *sc_arena_array(sc_arena *a, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return NULL;
  return sc_arena_alloc(a, n);
}

char *sc_arena_strndup(sc_arena *a, const char *s, size_t n) {
  char *p = sc_arena_alloc(a, n + 1);
  if (p) memcpy(p, s, n);
  return p;
}

char *sc_arena_strdup(sc_arena *a, const char *s) {
  return sc_arena_strndup(a, s, strlen(s));
}

char *sc_arena_printf(sc_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n < 0 ? NULL : sc_arena_alloc(a, (size_t)n + 1);
  if (p) vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

void sc_format_multiples_near(int64_t x, int64_t parts, char *buf, size_t n) {
  int64_t lo = x / parts * parts, hi = lo + parts;
  if (lo > 0) snprintf(buf, n, "%lld or %lld", (long long)lo, (long long)hi);
  else snprintf(buf, n, "%lld", (long long)hi);
}
