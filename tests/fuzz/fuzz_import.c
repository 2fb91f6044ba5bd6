/* fuzz_import.c — libFuzzer target: ONNX import, then the canonical passes.
 *
 * Each input is taken as the bytes of a model file. Import runs with
 * no_weights (external data is never opened, so the fuzzer cannot reach the
 * file system); when it succeeds, every symbolic dim of the graph inputs is
 * bound to a small value and SC_CANONICAL_PASSES run with the verifier on and
 * notes off, as `shardc inspect` would. Any failure must come back as a
 * status with a diagnostic: a crash, a sanitizer report, a leak or an assert
 * is a bug. Built by tests/fuzz/run.sh (clang, -fsanitize=fuzzer). */
#include <stddef.h>
#include <stdint.h>

#include "frontend/onnx.h"
#include "passes/pass.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Binds each named dim of the graph inputs to 2 (bind-dims gives the rest 1). */
static void bind_small_dims(sc_graph *g) {
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const sc_value *v = sc_val(g, g->inputs[i]);
    if (!v->dim_param) continue;
    for (int32_t d = 0; d < v->rank && d < SC_MAX_RANK; d++)
      if (v->dim_param[d] && v->dims[d] == SC_DIM_UNKNOWN)
        sc_graph_bind_dim(g, v->dim_param[d], 2);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_import_opts opts = {.no_weights = true};
  sc_graph *g = NULL;
  sc_diag diag = {0};
  sc_diag_clear(&diag);
  if (sc_onnx_import_bytes(data, size, "fuzz.onnx", NULL, &opts, &g, &diag) != SC_OK)
    return 0;
  bind_small_dims(g);
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  po.verify = true;
  (void)sc_run_passes(g, SC_CANONICAL_PASSES, &po);
  sc_graph_destroy(g);
  return 0;
}
