/* context_parallel.c — the cp layout's arithmetic (context_parallel.h).
 * Everything here is a closed formula of the layout; the unit test
 * (tests/unit/test_context_parallel.c) checks the positions form a
 * permutation, the work is equal across ranks, and the block pairs give
 * the whole causal attention with the CPU device's kernels. */
#include "ir/context_parallel.h"

#include <stdio.h>

sc_status sc_cp_check_sequence(int64_t seq, int64_t cp, const char *what, sc_diag *d) {
  int64_t chunks;
  if (cp < 1 || !sc_mul_i64(cp, 2, &chunks))
    return sc_diag_set_prefixed(d, SC_ERR_USAGE, what, "bad cp size %lld", (long long)cp);
  if (seq > 0 && seq % chunks == 0) return SC_OK;
  char works[96];
  sc_format_multiples_near(seq, chunks, works, sizeof works);
  return sc_diag_set_prefixed(d, SC_ERR_USAGE, what,
                              "sequence length %lld does not divide into 2·cp = %lld chunks "
                              "(cp=%lld); lengths that do: %s",
                              (long long)seq, (long long)chunks, (long long)cp, works);
}

int64_t sc_cp_padded_sequence(int64_t seq, int64_t cp) {
  return cp < 1 ? seq : (seq + cp - 1) / cp * cp;
}

int64_t sc_cp_position(int64_t seq, int64_t cp, int64_t r, int64_t j) {
  int64_t c = seq / (2 * cp);
  return j < c ? r * c + j : (2 * cp - 1 - r) * c + (j - c);
}

int64_t sc_cp_ring_source(int64_t cp, int64_t r, int64_t i) {
  return ((r - i) % cp + cp) % cp;
}

int32_t sc_cp_ring_half(int64_t r, int64_t s) {
  return s > r ? 1 : 0;
}

double sc_cp_rank_pairs(int64_t seq, int64_t cp, bool causal) {
  double local = (double)(seq / cp);
  if (!causal) return local * (double)seq;
  double c = (double)(seq / (2 * cp));
  return c * (2 * c + 1) + (double)(cp - 1) * 2 * c * c;
}

double sc_cp_ring_bytes(int64_t b, int64_t kvh, int64_t seq, int64_t d, int64_t dv,
                        int64_t elem_bytes, int64_t cp, bool grad) {
  if (cp <= 1) return 0;
  double block = (double)b * (double)kvh * (double)(seq / cp) * (double)(d + dv) *
                 (double)elem_bytes;
  return (double)(grad ? 2 * cp - 1 : cp - 1) * block;
}
