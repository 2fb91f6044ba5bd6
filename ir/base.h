/* base.h — status codes, diagnostics, checked arithmetic, the arena.
 *
 * Everything in shardc builds on these few objects. A library function never
 * exits the process: it returns an sc_status and, for problems in the user's
 * input, records where and what in an sc_diag. SC_ASSERT is for bugs only and
 * stays on in release builds.
 *
 * The arena is a chunked bump allocator: allocations live until the arena is
 * freed, never move, and are zero-initialised. It is not thread-safe. */
#ifndef SC_BASE_H
#define SC_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* sc_status and sc_status_name: in the public header shardc_status.h
 * (include/), one definition for the library and its users. */
#include "shardc_status.h"

/* Where and what went wrong. The CLI prints
 *   shardc: error: FILE: node 'NAME' (OpType): MSG
 * leaving out the parts that are empty. */
typedef struct sc_diag {
  sc_status status;
  char file[512]; /* model or IR file the problem is in, or "" */
  char node[256]; /* node name, or "" when not about a node */
  char op[64];    /* node op_type, or "" */
  char msg[1024];
} sc_diag;

void sc_diag_clear(sc_diag *d);
/* Records a problem (the first one wins; later calls are ignored while
 * d->status != SC_OK) and returns status. node and op may be NULL. */
sc_status sc_diag_set(sc_diag *d, sc_status status, const char *node,
                      const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
sc_status sc_diag_vset(sc_diag *d, sc_status status, const char *node,
                       const char *op, const char *fmt, va_list ap);
/* sc_diag_set with "PREFIX: " before the message (none when prefix is NULL):
 * the file or object a message is about. */
sc_status sc_diag_set_prefixed(sc_diag *d, sc_status status, const char *prefix,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
sc_status sc_diag_vset_prefixed(sc_diag *d, sc_status status, const char *prefix,
                                const char *fmt, va_list ap);
void sc_diag_set_file(sc_diag *d, const char *file);
/* SC_ERR_NOMEM with "out of memory: needed BYTES bytes for WHAT", the one
 * wording the CLI and the tests look for. */
sc_status sc_diag_nomem(sc_diag *d, uint64_t bytes, const char *what_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "FILE: node 'N' (Op): msg" into buf. */
void sc_diag_format(const sc_diag *d, char *buf, size_t n);

#define SC_ASSERT(c)                                                          \
  do {                                                                        \
    if (!(c)) sc_assert_fail(__FILE__, __LINE__, #c);                         \
  } while (0)
_Noreturn void sc_assert_fail(const char *file, int line, const char *what);

/* Checked arithmetic on sizes that come from the model: false on overflow. */
static inline bool sc_mul_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool sc_add_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool sc_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool sc_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* Allocator hook: tests can inject failures. Defaults to malloc/realloc/free. */
typedef struct sc_allocator {
  void *(*alloc)(void *ud, size_t n);
  void *(*realloc)(void *ud, void *p, size_t n);
  void (*free)(void *ud, void *p);
  void *ud;
} sc_allocator;
void sc_set_allocator(const sc_allocator *a); /* NULL restores the default */
void *sc_malloc(size_t n);
/* Bytes of the calling thread's last sc_malloc/sc_calloc/sc_realloc that
 * failed, 0 once read (or when none has): sc_diag_set adds it to a bare
 * SC_ERR_NOMEM message ("out of memory: needed N bytes ..."). */
uint64_t sc_alloc_take_failed_bytes(void);
/* Whether `bytes` more of address space can be mapped now: maps that much
 * (PROT_NONE, nothing committed) and unmaps it at once. For calls into
 * libraries that cannot return an allocation failure (LLVM aborts, oneDNN's
 * first-call set-up may crash): probed just before the call, a shortfall
 * under an address-space limit (ulimit -v) is found where an error can
 * still be returned. It says nothing of physical memory. */
bool sc_mem_probe(uint64_t bytes);
void *sc_calloc(size_t count, size_t size); /* overflow-checked */
void *sc_realloc(void *p, size_t n);
void sc_free(void *p);
/* Room for element n of two parallel int32 arrays allocated for *cap
 * (doubled, from 64, when n reaches it): false when memory runs out, the
 * arrays then still valid (either may have moved) and *cap unchanged. */
bool sc_grow_i32_pair(int32_t **a, int32_t **b, int32_t n, int32_t *cap);
char *sc_strdup(const char *s);

/* The multiples of parts nearest to x, into buf: "12 or 16" (the one below
 * and the one above), or "4" when the one below is 0 — the words of every
 * "does not divide" error (a batch over data-parallel ranks, a sequence
 * over context-parallel chunks). parts >= 1. */
void sc_format_multiples_near(int64_t x, int64_t parts, char *buf, size_t n);

typedef struct sc_arena_chunk sc_arena_chunk;
typedef struct sc_arena {
  sc_arena_chunk *head;
  size_t used_bytes; /* total handed out, for statistics */
} sc_arena;

void sc_arena_init(sc_arena *a);
void sc_arena_free(sc_arena *a);
/* Zeroed, 16-byte aligned; NULL on overflow or allocation failure. */
void *sc_arena_alloc(sc_arena *a, size_t n);
void *sc_arena_array(sc_arena *a, size_t count, size_t size);
char *sc_arena_strdup(sc_arena *a, const char *s);
char *sc_arena_strndup(sc_arena *a, const char *s, size_t n);
char *sc_arena_printf(sc_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
