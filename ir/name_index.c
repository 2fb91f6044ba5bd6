/* name_index.c — the index by name of name_index.h. */
#include <stdlib.h>
#include <string.h>

#include "ir/name_index.h"


void sc_name_index_init(sc_name_index *ix) { memset(ix, 0, sizeof *ix); }

void sc_name_index_free(sc_name_index *ix) {
  sc_free(ix->names);
  sc_free(ix->next);
  sc_free(ix->last);
  sc_free(ix->slots);
  sc_name_index_init(ix);
}

/* Whether the indexed name a is the n bytes of b. */
static bool same(const char *a, const char *b, size_t n) {
  return strncmp(a, b, n) == 0 && a[n] == 0;
}

/* The slot holding the first position of the n bytes of name, or the empty
 * one where it goes. */
static uint32_t slot_of(const sc_name_index *ix, const char *name, size_t n) {
  uint32_t mask = ix->cap - 1, h = sc_name_hash_n(name, n) & mask;
  while (ix->slots[h] >= 0 && !same(ix->names[ix->slots[h]], name, n)) h = (h + 1) & mask;
  return h;
}

int32_t sc_name_index_find(const sc_name_index *ix, const char *name) {
  return name ? sc_name_index_find_n(ix, name, strlen(name)) : -1;
}

int32_t sc_name_index_find_n(const sc_name_index *ix, const char *name, size_t n) {
  if (!name || !ix->cap) return -1;
  return ix->slots[slot_of(ix, name, n)];
}

int32_t sc_name_index_next(const sc_name_index *ix, int32_t pos) {
  return pos >= 0 && pos < ix->n ? ix->next[pos] : -1;
}

static sc_status grow_positions(sc_name_index *ix) {
  int32_t cap = ix->cap_n ? ix->cap_n * 2 : 16;
  if (ix->cap_n > INT32_MAX / 4) return SC_ERR_LIMIT;
  const char **names = sc_realloc(ix->names, (size_t)cap * sizeof *names);
  if (!names) return SC_ERR_NOMEM;
  ix->names = names;
  int32_t *next = sc_realloc(ix->next, (size_t)cap * sizeof *next);
  if (!next) return SC_ERR_NOMEM;
  ix->next = next;
  int32_t *last = sc_realloc(ix->last, (size_t)cap * sizeof *last);
  if (!last) return SC_ERR_NOMEM;
  ix->last = last;
  ix->cap_n = cap;
  return SC_OK;
}

static sc_status grow_slots(sc_name_index *ix) {
  uint32_t cap = ix->cap ? ix->cap * 2 : 32;
  int32_t *slots = sc_malloc((size_t)cap * sizeof *slots);
  if (!slots) return SC_ERR_NOMEM;
  for (uint32_t i = 0; i < cap; i++) slots[i] = -1;
  sc_free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  for (int32_t i = 0; i < ix->n; i++) /* first positions only: one slot a name */
    if (ix->names[i] && ix->last[i] >= 0)
      ix->slots[slot_of(ix, ix->names[i], strlen(ix->names[i]))] = i;
  return SC_OK;
}

sc_status sc_name_index_add(sc_name_index *ix, const char *name) {
  sc_status st = SC_OK;
  if (ix->n == ix->cap_n && (st = grow_positions(ix)) != SC_OK) return st;
  /* first positions (at most n + 1 of them) kept under half the slots */
  if ((uint32_t)(ix->n + 1) * 2 > ix->cap && (st = grow_slots(ix)) != SC_OK) return st;
  int32_t pos = ix->n;
  ix->names[pos] = name;
  ix->next[pos] = -1;
  ix->last[pos] = -1; /* not a first position (yet) */
  ix->n++;
  if (!name) return SC_OK;
  uint32_t h = slot_of(ix, name, strlen(name));
  int32_t first = ix->slots[h];
  if (first < 0) {
    ix->slots[h] = pos;
    ix->last[pos] = pos;
  } else {
    ix->next[ix->last[first]] = pos;
    ix->last[first] = pos;
  }
  return SC_OK;
}
