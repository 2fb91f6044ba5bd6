/* fuzz_plan_json.c — libFuzzer target: the plan's JSON form (passes/plan).
 *
 * Each input is taken as plan JSON (docs/plan-format.md; it need not be
 * NUL-terminated) and read with sc_plan_read_json without a graph (the
 * reader is strict and validates the plan on its own). A rejected text must
 * come back as a status with a message and no plan. An accepted one must
 * round-trip: written, read again, and written again, the two texts are
 * identical (docs/plan-format.md promises write → read → write is
 * byte-identical). A crash, a sanitizer report, a leak, an assert or a
 * failed round trip is a bug. Built by tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "passes/plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_plan *p = NULL;
  sc_diag diag = {0};
  sc_diag_clear(&diag);
  if (sc_plan_read_json((const char *)data, size, "fuzz.json", NULL, &p, &diag) != SC_OK) {
    SC_ASSERT(p == NULL && diag.msg[0] != '\0');
    return 0;
  }
  sc_diag_clear(&diag);
  char *text = sc_plan_write_json_string(p, &diag);
  SC_ASSERT(text != NULL);
  sc_plan *p2 = NULL;
  sc_diag_clear(&diag);
  /* What the writer writes must read back, and write the same again. */
  SC_ASSERT(sc_plan_read_json(text, strlen(text), "fuzz-written.json", NULL, &p2, &diag) ==
            SC_OK);
  char *text2 = sc_plan_write_json_string(p2, &diag);
  SC_ASSERT(text2 != NULL && strcmp(text, text2) == 0);
  sc_free(text2);
  sc_free(text);
  sc_plan_destroy(p2);
  sc_plan_destroy(p);
  return 0;
}
