/* fuzz_profile_json.c — libFuzzer target: the calibration profile's reader
 * and writer (passes/plan/profile.c).
 *
 * Each input is taken as a profile (docs/planner.md, "The profile file";
 * it need not be NUL-terminated) and read with sc_profile_read_json. A
 * rejected text must come back as a status with a message and a zeroed
 * profile. An accepted one must hold what the header promises: 1 to 64
 * GEMM rows with positive finite figures and rate = 2mnk / seconds, at most
 * 4 communicators, every figure positive and finite (a GPU profile's
 * attention rows their shape, seconds and rate; a CPU's their
 * coefficients), names NUL-terminated;
 * it must write and read back to the same bits; and the interpolated rate
 * of any shape, for a dtype it measured, must be positive and finite. A
 * crash, a sanitizer report, a leak or an assert is a bug. Built by
 * tests/fuzz/run.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_figure(double x) { SC_ASSERT(isfinite(x) && x > 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static sc_profile p, q; /* large: not on the stack */
  memset(&p, 0x5a, sizeof p); /* not zero: a failure must zero it */
  sc_diag diag = {0};
  sc_diag_clear(&diag);
  if (sc_profile_read_json((const char *)data, size, "fuzz.json", &p, &diag) != SC_OK) {
    static const sc_profile zero;
    SC_ASSERT(diag.msg[0] != '\0' && memcmp(&p, &zero, sizeof p) == 0);
    return 0;
  }
  SC_ASSERT(p.present && p.n_gemms >= 1 && p.n_gemms <= SC_PROFILE_MAX_GEMMS);
  SC_ASSERT(p.n_comms >= 0 && p.n_comms <= SC_PROFILE_MAX_COMMS && p.threads >= 1);
  SC_ASSERT(memchr(p.device, '\0', sizeof p.device) &&
            memchr(p.device_name, '\0', sizeof p.device_name));
  for (int32_t i = 0; i < p.n_gemms; i++) {
    const sc_profile_gemm *g = &p.gemms[i];
    SC_ASSERT(g->m >= 1 && g->n >= 1 && g->k >= 1 && (unsigned)g->dtype < SC_CLUSTER_DTYPE_COUNT);
    check_figure(g->seconds);
    check_figure(g->flops_per_s);
    double r = sc_profile_gemm_rate(&p, g->dtype, g->trans_a, g->trans_b, 3, 1000, 77);
    check_figure(r);
  }
  check_figure(p.memory_bytes_per_s);
  SC_ASSERT(p.memory_thread_bytes_per_s == 0 || (isfinite(p.memory_thread_bytes_per_s) &&
                                                 p.memory_thread_bytes_per_s >= 1));
  check_figure(p.step_overhead_s);
  SC_ASSERT(p.n_attention >= 0 && p.n_attention <= SC_PROFILE_MAX_ATTENTION);
  for (int32_t i = 0; i < p.n_attention; i++) {
    const sc_profile_attention *a = &p.attention[i];
    SC_ASSERT((unsigned)a->dtype < SC_CLUSTER_DTYPE_COUNT &&
              sc_profile_find_attention(&p, a->dtype, a->grad) == a); /* one a (dtype, grad) */
    if (strcmp(p.device, "cuda") == 0) { /* a GPU's row: its shape and rate */
      SC_ASSERT(a->heads >= 1 && a->sq >= 1 && a->d >= 1);
      check_figure(a->seconds);
      check_figure(a->flops_per_s);
    } else {
      for (int t = 0; t < SC_PROFILE_ATTN_TERMS; t++) check_figure(a->s[t]);
    }
  }
  for (int32_t i = 0; i < p.n_comms; i++) {
    SC_ASSERT(memchr(p.comms[i].name, '\0', sizeof p.comms[i].name) && p.comms[i].max_ranks >= 2);
    check_figure(p.comms[i].latency_s);
    check_figure(p.comms[i].bandwidth_bytes_per_s);
    check_figure(p.comms[i].overhead_s);
  }
  SC_ASSERT(p.n_sync >= 0 && p.n_sync <= SC_PROFILE_MAX_SYNC);
  for (int32_t i = 0; i < p.n_sync; i++) {
    const sc_profile_sync *y = &p.sync[i];
    SC_ASSERT(y->ranks >= 2 && sc_profile_find_sync(&p, y->ranks) == y); /* one a count */
    check_figure(y->call_s);
    SC_ASSERT(isfinite(y->stretch) && y->stretch >= 1 && y->stretch <= SC_PROFILE_MAX_STRETCH);
    SC_ASSERT(y->call_per_compute == 0 || (y->call_per_compute >= SC_PROFILE_MIN_S &&
                                           y->call_per_compute <= SC_PROFILE_MAX_CALL_PER_COMPUTE));
    SC_ASSERT(y->call_max_s == 0 || (y->call_max_s >= SC_PROFILE_MIN_S &&
                                     y->call_max_s <= SC_PROFILE_MAX_S));
  }
  /* written and read back: the same bits */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  SC_ASSERT(f);
  SC_ASSERT(sc_profile_write_json(&p, f, &diag) == SC_OK);
  fclose(f);
  sc_diag_clear(&diag);
  SC_ASSERT(sc_profile_read_json(text, len, "again.json", &q, &diag) == SC_OK);
  SC_ASSERT(memcmp(&p, &q, sizeof p) == 0);
  free(text);
  return 0;
}
