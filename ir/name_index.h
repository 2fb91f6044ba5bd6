/* name_index.h — an index by name over the positions of an array: what a
 * scan for the first equal name (and the next one after it) answers, in
 * constant time.
 *
 *   sc_name_index ix;
 *   sc_name_index_init(&ix);
 *   for (i = 0; i < n; i++) sc_name_index_add(&ix, item[i].name);  (position i)
 *   int32_t i = sc_name_index_find(&ix, "x");   first position named "x", or -1
 *   for (; i >= 0; i = sc_name_index_next(&ix, i)) ...   every one, in order
 *   sc_name_index_free(&ix);
 *
 * For lookups by name that a pass or a report repeats over a whole table (a
 * distributed program's inputs and outputs, a piece's outputs, the names a
 * report has counted): built once, it replaces a linear scan with strcmp per
 * entry. Positions are added in order (0, 1, ...); names are borrowed and
 * must outlive the index; a NULL name takes a position and is never found.
 * Open addressing over the first position of each name, grown at 50 % load;
 * later positions with the same name are chained from the first. The graph's
 * value-name index (graph.c) and the verifier's node-name check use the same
 * hash, sc_name_hash. */
#ifndef SC_IR_NAME_INDEX_H
#define SC_IR_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base.h"

typedef struct sc_name_index {
  const char **names; /* [n] borrowed */
  int32_t *next;      /* [n] the next position with the same name, or -1 */
  int32_t *last;      /* [n] for a first position: its chain's last one */
  int32_t n, cap_n;
  int32_t *slots;     /* [cap] a first position, or -1 */
  uint32_t cap;       /* a power of two, or 0 */
} sc_name_index;

/* FNV-1a over the bytes of s (up to its NUL), and over n bytes; inline:
 * the graph hashes a name on every lookup. */
static inline uint32_t sc_name_hash_n(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}
static inline uint32_t sc_name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}
void sc_name_index_init(sc_name_index *ix);
void sc_name_index_free(sc_name_index *ix); /* and init again */
/* Appends position ix->n, named name. Errors: SC_ERR_NOMEM (the index is
 * unchanged), SC_ERR_LIMIT past INT32_MAX / 4 positions. */
sc_status sc_name_index_add(sc_name_index *ix, const char *name);
/* The first position named name, or -1 (also for NULL). */
int32_t sc_name_index_find(const sc_name_index *ix, const char *name);
/* The first position named by the n bytes at name (a prefix of a longer
 * name, say), or -1. */
int32_t sc_name_index_find_n(const sc_name_index *ix, const char *name, size_t n);
/* The next position after pos with pos's name, or -1. */
int32_t sc_name_index_next(const sc_name_index *ix, int32_t pos);

#endif
