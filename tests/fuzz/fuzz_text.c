/* fuzz_text.c — libFuzzer target: the textual IR parser, then the passes.
 *
 * Each input is taken as IR text (ir/text.h; it need not be NUL-terminated:
 * sc_ir_parse takes a length). When it parses, the text is printed back and
 * parsed again (what the printer writes must parse and print the same),
 * then SC_CANONICAL_PASSES run with the verifier on and notes off. A crash,
 * a sanitizer report, a leak, an assert or a failed round trip is a bug.
 * Built by tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ir/text.h"
#include "passes/pass.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_graph *g = NULL;
  sc_diag diag;
  sc_diag_clear(&diag);
  if (sc_ir_parse((const char *)data, size, "fuzz.ir", &g, &diag) != SC_OK) return 0;
  char *text = sc_ir_print_string(g);
  if (text) {
    sc_graph *g2 = NULL;
    sc_diag d2;
    sc_diag_clear(&d2);
    /* What the printer writes must parse, and print the same again. */
    SC_ASSERT(sc_ir_parse(text, strlen(text), "fuzz-printed.ir", &g2, &d2) == SC_OK);
    char *text2 = sc_ir_print_string(g2);
    SC_ASSERT(text2 && strcmp(text, text2) == 0);
    sc_free(text2);
    sc_graph_destroy(g2);
    sc_free(text);
  }
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  po.verify = true;
  (void)sc_run_passes(g, SC_CANONICAL_PASSES, &po);
  sc_graph_destroy(g);
  return 0;
}
