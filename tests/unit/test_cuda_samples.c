/* test_cuda_samples.c — every kernel of every sample model through NVRTC.
 *
 * For each model file in samples/ (*.onnx) with embedded weights (all but
 * gpt_1p5b, whose weights are not in the repository), with
 * the dim `batch` bound to 2: import, sc_compile_graph (canonical passes,
 * fuse, lowering, memory plan), then sc_cuda_build_program for sm_80 and
 * sm_90 (one translation unit per model, one NVRTC compile per arch). Every
 * kernel of the program must appear as `.visible .entry NAME(` in both PTX
 * outputs. No GPU needed. Skipped (not failed) when the build has no CUDA. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#include "frontend/onnx.h"
#include "runtime/runtime.h"

static void check_model(const char *path) {
  const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  sc_diag d;
  sc_diag_clear(&d);
  sc_graph *g = NULL;
  sc_import_opts io;
  memset(&io, 0, sizeof io);
  if (sc_onnx_import(path, &io, &g, &d) != SC_OK) fail_msg("%s: import: %s", name, d.msg);
  assert_true(sc_graph_bind_dim(g, "batch", 2) > 0);
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  sc_program *p = NULL;
  if (sc_compile_graph(g, &co, &p, &d) != SC_OK) fail_msg("%s: compile: %s", name, d.msg);
  assert_true(p->n_kernels > 0);
  sc_cuda_build *b = NULL;
  if (sc_cuda_build_program(p, "sm_80,sm_90", &b, &d) != SC_OK)
    fail_msg("%s: NVRTC: %s", name, d.msg);
  assert_int_equal(b->n_archs, 2);
  assert_string_equal(b->archs[0].arch, "sm_80");
  assert_string_equal(b->archs[1].arch, "sm_90");
  for (int32_t a = 0; a < b->n_archs; a++) {
    const char *ptx = b->archs[a].ptx;
    assert_non_null(ptx);
    for (int32_t k = 0; k < p->n_kernels; k++) {
      char needle[256];
      snprintf(needle, sizeof needle, ".visible .entry %s(", p->kernels[k]->name);
      if (!strstr(ptx, needle))
        fail_msg("%s: kernel '%s' missing from the %s PTX", name, p->kernels[k]->name,
                 b->archs[a].arch);
    }
  }
  printf("%-12s %3d kernels, sm_80 + sm_90 PTX in %.2f s\n", name, (int)p->n_kernels,
         b->compile_seconds);
  sc_cuda_build_destroy(b);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_samples(void **state) {
  (void)state;
  glob_t gl;
  assert_int_equal(glob(SC_SOURCE_DIR "/samples/*.onnx", 0, NULL, &gl), 0);
  int checked = 0;
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    if (strstr(gl.gl_pathv[i], "/gpt_1p5b.onnx")) continue;
    check_model(gl.gl_pathv[i]);
    checked++;
  }
  globfree(&gl);
  assert_true(checked >= 6); /* mlp resnet bert gpt2 llama vit at least */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_samples)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_no_cuda(void **state) {
  (void)state;
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
