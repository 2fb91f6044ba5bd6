/* test_cuda_samples.c — every kernel of every sample model through NVRTC,
 * and, with a GPU, through the GPU against the CPU.
 *
 * For each model file in samples/ (*.onnx) with embedded weights (all but
 * gpt_1p5b, whose weights are not in the repository), with the dim `batch`
 * bound to 2: import, sc_compile_graph (canonical passes, fuse, lowering,
 * memory plan), then sc_cuda_build_program for sm_80 and sm_90 (one
 * translation unit per model, one NVRTC compile per arch). Every kernel of
 * the program must appear as `.visible .entry NAME(` in both PTX outputs.
 * No GPU needed. Skipped (not failed) when the build has no CUDA.
 *
 * Step by step (walk_steps): the program runs on the CPU device through its
 * interface (runtime/device.h: create, prepare, alloc_arena, bind, then one
 * run_kernel / run_gemm / run_attention per step; the fused attention
 * steps' CUDA kernels are test_cuda_attention's), on seeded random graph inputs (floats in
 * [-1, 1); integer inputs: attention masks 0/1, token ids in [0, 100)).
 * Before each kernel step (a GEMM step's epilogue kernel after the GEMM
 * itself) a checker receives the CPU buffers of the kernel's params; after
 * the CPU step it compares what it computed with the CPU's written params:
 * floats rtol 1e-4 + atol 1e-5 (CUDA's libdevice expf/erff/tanhf and the
 * CPU backend's polynomials differ by a few ulp; block reductions
 * reassociate sums), f16/bf16 additionally one unit in their last place,
 * integers and bools exactly, NaN only where the CPU has NaN. Every step
 * starts from the CPU's state, so errors do not accumulate. At the end the
 * program's outputs after the last step must equal, bit for bit, those of
 * sc_session_run on the same inputs with the same compiled kernels, and
 * every arena buffer's address must be arena base + its planned offset.
 *
 * Checkers: the GPU (copies the params into a device mirror of the arena
 * (constants uploaded once), launches the kernel with its
 * sc_cuda_launch_config over the whole outer range, copies the written
 * params back) for every sample when a device is found; the emulated GPU
 * (runtime/cuda_emu.h: the same CUDA C compiled by the host C++ compiler,
 * launched the same way over a host copy of the arena, block reductions as
 * fibers) for every sample always; kir_interpret (on a host copy of the
 * arena) for the MLP always. Without a device the GPU test
 * is skipped, unless SC_CUDA_REQUIRE_GPU=1 (tests/gpu/test_gpu.sh sets it),
 * which turns a missing device into a failure. */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if SHARDC_HAVE_CUDA
#include "codegen/cpu/cpu.h"
#include "codegen/cuda/cuda.h"
#include "cuda_driver.h"
#include "frontend/onnx.h"
#include "runtime/cuda_emu.h"
#include "runtime/device.h"
#include "codegen/compile.h"
#include "runtime/runtime.h"

static const char *base_name(const char *path) {
  return strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
}

static sc_program *compile_model(const char *path, sc_graph **gout) {
  const char *name = base_name(path);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_graph *g = NULL;
  sc_import_opts io;
  memset(&io, 0, sizeof io);
  if (sc_onnx_import(path, &io, &g, &d) != SC_OK) fail_msg("%s: import: %s", name, d.msg);
  assert_true(sc_graph_bind_dim(g, "batch", 2) > 0);
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  /* the cores fused where the CUDA device runs attention steps
   * (sc_device_choice_runs_attention: it does; the walk runs them on the
   * CPU, their CUDA kernels are test_cuda_attention's) */
  co.no_fuse_attention = !sc_device_choice_runs_attention(&(sc_device_choice){.name = "cuda"});
  sc_program *p = NULL;
  if (sc_compile_graph(g, &co, &p, &d) != SC_OK) fail_msg("%s: compile: %s", name, d.msg);
  assert_true(p->n_kernels > 0);
  *gout = g;
  return p;
}

static void check_model_ptx(const char *path) {
  const char *name = base_name(path);
  sc_graph *g = NULL;
  sc_program *p = compile_model(path, &g);
  sc_diag d = {0};
  sc_diag_clear(&d);
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

static void for_each_sample(void (*fn)(const char *path, void *ud), void *ud) {
  glob_t gl;
  assert_int_equal(glob(SC_SOURCE_DIR "/samples/*.onnx", 0, NULL, &gl), 0);
  int checked = 0;
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    if (strstr(gl.gl_pathv[i], "/gpt_1p5b.onnx")) continue;
    fn(gl.gl_pathv[i], ud);
    checked++;
  }
  globfree(&gl);
  assert_true(checked >= 6); /* mlp resnet bert gpt2 llama vit at least */
}

static void ptx_one(const char *path, void *ud) {
  (void)ud;
  check_model_ptx(path);
}

static void test_samples(void **state) {
  (void)state;
  for_each_sample(ptx_one, NULL);
}

/* ------------------------------------------------- step-by-step walk -- */

/* The state of the CPU device for one kernel step. */
typedef struct step_view {
  const sc_program *p;
  int32_t step, kernel;
  char *arena; /* CPU arena base */
  const sc_device_iface *dev;
  void *ctx;
} step_view;

static void *param_host(const step_view *v, int32_t i) {
  return v->dev->buffer_ptr(v->ctx, v->p->kernels[v->kernel]->params[i].buffer);
}

static const char *bname(const sc_program *p, int32_t b) {
  return p->buffers[b].name ? p->buffers[b].name : "?";
}

static size_t param_bytes(const kir_param *pp) {
  return (size_t)pp->numel * sc_dtype_size(pp->dtype);
}

static bool in_arena(const step_view *v, const void *host) {
  const char *h = host;
  return h >= v->arena && h < v->arena + v->p->arena_bytes;
}

/* A checker: before() sees the CPU buffers before the step, after() the
 * CPU's results; after() compares its own results with them. */
typedef struct checker {
  void (*before)(void *ud, const step_view *v);
  void (*after)(void *ud, const step_view *v);
  void *ud;
  int64_t kernels_checked;
} checker;

static double tol(sc_dtype t, double want) {
  double m = fabs(want), t0 = 1e-4 * m + 1e-5;
  if (t == SC_DTYPE_F16) return fmax(t0, fmax(m * 0x1p-10, 0x1p-24));
  if (t == SC_DTYPE_BF16) return fmax(t0, fmax(m * 0x1p-7, 0x1p-133));
  return t0;
}

/* got (the checker's result) against want (the CPU's) for param i. */
static void compare_param(const step_view *v, int32_t i, const void *want, const void *got,
                          const char *who) {
  const kir_kernel *k = v->p->kernels[v->kernel];
  const kir_param *pp = &k->params[i];
  for (int64_t e = 0; e < pp->numel; e++) {
    if (sc_dtype_is_float(pp->dtype)) {
      double w = sc_load_f64(pp->dtype, want, e), g = sc_load_f64(pp->dtype, got, e);
      if (isnan(w) && isnan(g)) continue;
      if (isnan(w) || isnan(g) || fabs(w - g) > tol(pp->dtype, w))
        fail_msg("step %d kernel %s param %d (buffer '%s') element %lld: %s %.9g, cpu %.9g",
                 (int)v->step, k->name, (int)i, bname(v->p, pp->buffer),
                 (long long)e, who, g, w);
    } else {
      int64_t w = sc_load_i64(pp->dtype, want, e), g = sc_load_i64(pp->dtype, got, e);
      if (w != g)
        fail_msg("step %d kernel %s param %d element %lld: %s %lld, cpu %lld", (int)v->step,
                 k->name, (int)i, (long long)e, who, (long long)g, (long long)w);
    }
  }
}

/* Seeded random contents for program input b (module comment). */
static void fill_input(const sc_buffer *b, void *data) {
  int64_t n = b->bytes / (int64_t)sc_dtype_size(b->dtype);
  bool mask = b->name && strstr(b->name, "mask");
  for (int64_t i = 0; i < n; i++) {
    if (sc_dtype_is_float(b->dtype))
      sc_store_f64(b->dtype, data, i, rnd(-1, 1));
    else if (b->dtype == SC_DTYPE_BOOL || mask)
      sc_store_i64(b->dtype, data, i, rng_unit() < 0.8 ? 1 : 0);
    else
      sc_store_i64(b->dtype, data, i, (int64_t)(rng_unit() * 100));
  }
}

typedef struct walk_out {
  int64_t kernel_steps;
} walk_out;

static void run_kernel_checked(const step_view *v, checker *ck) {
  if (ck) ck->before(ck->ud, v);
  sc_step ks = {.kind = SC_STEP_KERNEL, .kernel = v->kernel, .gemm.bias = -1, .comm.in = -1};
  v->dev->run_kernel(v->ctx, &ks);
  if (ck) {
    ck->after(ck->ud, v);
    ck->kernels_checked++;
  }
}

/* Runs p step by step on the CPU device (module comment), calling ck around
 * every kernel, then checks the outputs against sc_session_run. */
static void walk_steps(const char *name, const sc_program *p, checker *ck) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cpu_module *mod = NULL;
  if (sc_cpu_jit(p, NULL, &mod, &d) != SC_OK) fail_msg("%s: jit: %s", name, d.msg);
  const sc_device_iface *dev = sc_device_find("cpu");
  assert_ptr_equal(dev, &sc_device_cpu);
  /* every kernel as written: no direct convolutions (they skip kernels) */
  sc_device_opts dopts = {.threads = 2, .cpu_module = mod, .im2col_convs = true};
  void *ctx = NULL;
  if (dev->create(&dopts, &ctx, &d) != SC_OK) fail_msg("%s: %s", name, d.msg);
  if (dev->prepare(ctx, p, &d) != SC_OK) fail_msg("%s: prepare: %s", name, d.msg);
  char *arena = dev->alloc_arena(ctx, p->arena_bytes);
  assert_non_null(arena);
  if (dev->bind(ctx, arena, &d) != SC_OK) fail_msg("%s: bind: %s", name, d.msg);
  /* planned == bound: every arena buffer sits at its planned offset */
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *rb = &p->buffers[sc_program_root(p, b)];
    if (rb->kind == SC_BUF_CONST) {
      assert_ptr_equal(dev->buffer_ptr(ctx, b), rb->data);
    } else {
      assert_true(rb->offset >= 0 && rb->offset + rb->bytes <= p->arena_bytes);
      assert_ptr_equal(dev->buffer_ptr(ctx, b), arena + rb->offset);
    }
  }
  sc_tensor_view *in = calloc((size_t)p->n_inputs + 1, sizeof *in);
  assert_non_null(in);
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    in[i].name = b->name;
    in[i].dtype = b->dtype;
    in[i].rank = b->rank;
    memcpy(in[i].dims, b->dims, sizeof in[i].dims);
    in[i].data = malloc((size_t)b->bytes + 1);
    assert_non_null(in[i].data);
    fill_input(b, in[i].data);
    dev->copy_in(ctx, dev->buffer_ptr(ctx, p->inputs[i]), in[i].data, b->bytes);
  }
  step_view v = {.p = p, .arena = arena, .dev = dev, .ctx = ctx};
  int64_t kernel_steps = 0;
  for (int32_t s = 0; s < p->n_steps; s++) {
    const sc_step *st = &p->steps[s];
    v.step = s;
    v.kernel = st->kernel;
    if (st->kind == SC_STEP_COMM) fail_msg("%s: step %d is a collective", name, (int)s);
    if (st->kind == SC_STEP_GEMM) { /* the GEMM on the CPU, its epilogue checked */
      sc_step g = *st;
      g.kernel = -1;
      dev->run_gemm(ctx, &g);
    }
    /* a fused attention step on the CPU (its CUDA kernels are
     * test_cuda_attention's), so that the walk goes on from its results */
    if (st->kind == SC_STEP_ATTENTION || st->kind == SC_STEP_ATTENTION_GRAD)
      dev->run_attention(ctx, st);
    if (st->kernel >= 0) {
      run_kernel_checked(&v, ck);
      kernel_steps++;
    }
  }
  assert_true(kernel_steps > 0);
  /* the walk ends where a whole run ends */
  sc_session_opts so;
  sc_session_opts_init(&so);
  so.threads = 2;
  so.cpu_module = mod;
  so.im2col_convs = true;
  sc_session *sess = NULL;
  if (sc_session_create(p, &so, &sess, &d) != SC_OK) fail_msg("%s: session: %s", name, d.msg);
  sc_tensor_view *out = calloc((size_t)p->n_outputs + 1, sizeof *out);
  assert_non_null(out);
  if (sc_session_run(sess, in, p->n_inputs, out, p->n_outputs, &d) != SC_OK)
    fail_msg("%s: run: %s", name, d.msg);
  for (int32_t o = 0; o < p->n_outputs; o++) {
    const sc_buffer *b = &p->buffers[p->outputs[o]];
    const void *mine = dev->buffer_ptr(ctx, p->outputs[o]);
    int64_t n = b->bytes / (int64_t)sc_dtype_size(b->dtype);
    for (int64_t e = 0; e < n && sc_dtype_is_float(b->dtype); e++)
      if (isnan(sc_load_f64(b->dtype, mine, e)))
        fail_msg("%s: output '%s' element %lld is NaN", name, bname(p, p->outputs[o]), (long long)e);
    if (memcmp(mine, out[o].data, (size_t)b->bytes) != 0)
      fail_msg("%s: output '%s' after the last step differs from sc_session_run", name,
               bname(p, p->outputs[o]));
  }
  printf("%-12s %3lld kernel steps walked%s\n", name, (long long)kernel_steps,
         ck ? ", each checked" : "");
  if (ck) assert_int_equal(ck->kernels_checked, kernel_steps);
  sc_session_destroy(sess);
  free(out);
  for (int32_t i = 0; i < p->n_inputs; i++) free(in[i].data);
  free(in);
  dev->free_arena(ctx, arena);
  dev->destroy(ctx);
  sc_cpu_module_destroy(mod);
}

/* ---------------------------------------- checker: kir_interpret (CPU) -- */

typedef struct interp_ck {
  char *mirror; /* copy of the arena before the step */
  void *bufs[64];
} interp_ck;

/* The arena copied into mirror, and each param's place there (constants
 * stay where they are; written params are in the arena). */
static void mirror_params(const step_view *v, char *mirror, void **ptr) {
  const kir_kernel *k = v->p->kernels[v->kernel];
  assert_true(k->n_params <= 62);
  memcpy(mirror, v->arena, (size_t)v->p->arena_bytes);
  for (int32_t i = 0; i < k->n_params; i++) {
    char *h = param_host(v, i);
    ptr[i] = in_arena(v, h) ? mirror + (h - v->arena) : h;
    if (k->params[i].written) assert_true(in_arena(v, h));
  }
}

static void interp_before(void *ud, const step_view *v) {
  interp_ck *c = ud;
  const kir_kernel *k = v->p->kernels[v->kernel];
  mirror_params(v, c->mirror, c->bufs);
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (kir_interpret(k, c->bufs, &d) != SC_OK) fail_msg("%s: interpreter: %s", k->name, d.msg);
}

static void interp_after(void *ud, const step_view *v) {
  interp_ck *c = ud;
  const kir_kernel *k = v->p->kernels[v->kernel];
  for (int32_t i = 0; i < k->n_params; i++)
    if (k->params[i].written) compare_param(v, i, param_host(v, i), c->bufs[i], "interpreter");
}

/* The MLP's every kernel against kir_interpret: the walk and the
 * comparison without a GPU. */
static void test_mlp_steps_interpreter(void **state) {
  (void)state;
  sc_graph *g = NULL;
  sc_program *p = compile_model(SC_SOURCE_DIR "/samples/mlp.onnx", &g);
  interp_ck ic;
  ic.mirror = malloc((size_t)p->arena_bytes + 64);
  assert_non_null(ic.mirror);
  checker ck = {interp_before, interp_after, &ic, 0};
  rng_seed(20250611);
  walk_steps("mlp.onnx", p, &ck);
  assert_true(ck.kernels_checked >= 1);
  free(ic.mirror);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

/* ------------------------------------ checker: the emulated GPU (CPU) -- */

/* Every kernel through runtime/cuda_emu.h: the unit compiled by the host
 * C++ compiler, launched with its sc_cuda_launch_config over a host copy
 * of the arena, exactly as the GPU checker launches it. */
typedef struct emu_ck {
  sc_cuda_emu *emu;
  char *mirror;
  void *ptr[64];
} emu_ck;

static void emu_before(void *ud, const step_view *v) {
  emu_ck *c = ud;
  const kir_kernel *k = v->p->kernels[v->kernel];
  mirror_params(v, c->mirror, c->ptr);
  sc_cuda_launch lc;
  sc_cuda_launch_config(k, &lc);
  if (lc.points <= 0) return;
  long long begin = 0, end = lc.points;
  void *args[64];
  for (int32_t i = 0; i < k->n_params; i++) args[i] = &c->ptr[i];
  args[k->n_params] = &begin;
  args[k->n_params + 1] = &end;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_cuda_emu_launch(c->emu, k->name, &lc, args, &d) != SC_OK)
    fail_msg("%s: emulated launch: %s", k->name, d.msg);
}

static void emu_after(void *ud, const step_view *v) {
  emu_ck *c = ud;
  const kir_kernel *k = v->p->kernels[v->kernel];
  for (int32_t i = 0; i < k->n_params; i++)
    if (k->params[i].written) compare_param(v, i, param_host(v, i), c->ptr[i], "emulated gpu");
}

typedef struct emu_run {
  int64_t kernels;
  double compile_s;
} emu_run;

static void emu_one(const char *path, void *ud) {
  emu_run *run = ud;
  const char *name = base_name(path);
  sc_graph *g = NULL;
  sc_program *p = compile_model(path, &g);
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *src = NULL;
  if (sc_cuda_emit_source(p, &src, &d) != SC_OK) fail_msg("%s: emit: %s", name, d.msg);
  emu_ck ec;
  memset(&ec, 0, sizeof ec);
  if (sc_cuda_emu_open(src, &ec.emu, &d) != SC_OK) fail_msg("%s: %s", name, d.msg);
  run->compile_s += sc_cuda_emu_compile_seconds(ec.emu);
  ec.mirror = malloc((size_t)p->arena_bytes + 64);
  assert_non_null(ec.mirror);
  checker ck = {emu_before, emu_after, &ec, 0};
  walk_steps(name, p, &ck);
  run->kernels += ck.kernels_checked;
  free(ec.mirror);
  sc_cuda_emu_close(ec.emu);
  sc_free(src);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

/* Every kernel of every sample, emulated, against the CPU backend: no GPU
 * needed. */
static void test_emulated_samples_match_cpu(void **state) {
  (void)state;
  emu_run run;
  memset(&run, 0, sizeof run);
  rng_seed(20261202);
  for_each_sample(emu_one, &run);
  assert_true(run.kernels > 0);
  printf("[  EMU     ] %lld sample kernel steps, emulated, match the CPU (host compiles %.1f s)\n",
         (long long)run.kernels, run.compile_s);
}

/* --------------------------------------------------- checker: the GPU -- */

typedef struct gpu_ck {
  void *module;
  CUdptr arena;   /* mirror of the CPU arena */
  CUdptr *consts; /* per buffer root: device copy of a constant, or 0 */
  CUdptr dptr[64];
} gpu_ck;

static void gpu_before(void *ud, const step_view *v) {
  gpu_ck *c = ud;
  const sc_program *p = v->p;
  const kir_kernel *k = p->kernels[v->kernel];
  assert_true(k->n_params <= 62);
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *pp = &k->params[i];
    char *h = param_host(v, i);
    size_t bytes = param_bytes(pp);
    if (in_arena(v, h)) {
      c->dptr[i] = c->arena + (CUdptr)(h - v->arena);
      if (bytes) CU(cu.htod(c->dptr[i], h, bytes));
    } else {
      assert_false(pp->written);
      int32_t r = sc_program_root(p, pp->buffer);
      if (!c->consts[r]) {
        size_t rb = (size_t)p->buffers[r].bytes;
        CU(cu.mem_alloc(&c->consts[r], rb + 16));
        if (rb) CU(cu.htod(c->consts[r], p->buffers[r].data, rb));
      }
      c->dptr[i] = c->consts[r];
    }
  }
  sc_cuda_launch lc;
  sc_cuda_launch_config(k, &lc);
  if (lc.points <= 0) return;
  void *fn = NULL;
  CU(cu.mod_fn(&fn, c->module, k->name));
  long long begin = 0, end = lc.points;
  void *args[64];
  for (int32_t i = 0; i < k->n_params; i++) args[i] = &c->dptr[i];
  args[k->n_params] = &begin;
  args[k->n_params + 1] = &end;
  CU(cu.launch(fn, (unsigned)lc.grid, 1, 1, (unsigned)lc.block, 1, 1, 0, NULL, args, NULL));
  CU(cu.sync());
}

static void gpu_after(void *ud, const step_view *v) {
  gpu_ck *c = ud;
  const kir_kernel *k = v->p->kernels[v->kernel];
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *pp = &k->params[i];
    if (!pp->written || pp->numel == 0) continue;
    size_t bytes = param_bytes(pp);
    void *got = malloc(bytes);
    assert_non_null(got);
    CU(cu.dtoh(got, c->dptr[i], bytes));
    compare_param(v, i, param_host(v, i), got, "gpu");
    free(got);
  }
}

typedef struct gpu_run {
  char arch[32];
  int64_t kernels;
} gpu_run;

static void gpu_one(const char *path, void *ud) {
  gpu_run *run = ud;
  const char *name = base_name(path);
  sc_graph *g = NULL;
  sc_program *p = compile_model(path, &g);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_cuda_build *b = NULL;
  sc_status st = sc_cuda_build_program(p, run->arch, &b, &d);
  if (st != SC_OK) { /* a device newer than this NVRTC: PTX JIT-compiled by the driver */
    sc_diag_clear(&d);
    st = sc_cuda_build_program(p, "compute_90", &b, &d);
  }
  if (st != SC_OK) fail_msg("%s: NVRTC: %s", name, d.msg);
  gpu_ck gc;
  memset(&gc, 0, sizeof gc);
  CU(cu.mod_load(&gc.module, b->archs[0].ptx));
  CU(cu.mem_alloc(&gc.arena, (size_t)p->arena_bytes + 64));
  gc.consts = calloc((size_t)p->n_buffers + 1, sizeof *gc.consts);
  assert_non_null(gc.consts);
  checker ck = {gpu_before, gpu_after, &gc, 0};
  walk_steps(name, p, &ck);
  run->kernels += ck.kernels_checked;
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (gc.consts[i]) CU(cu.mem_free(gc.consts[i]));
  free(gc.consts);
  CU(cu.mem_free(gc.arena));
  CU(cu.mod_unload(gc.module));
  sc_cuda_build_destroy(b);
  sc_program_destroy(p);
  sc_graph_destroy(g);
}

static void test_gpu_samples_match_cpu(void **state) {
  (void)state;
  char why[128];
  if (!cuda_load(why, sizeof why)) {
    if (cuda_gpu_required()) fail_msg("SC_CUDA_REQUIRE_GPU=1 but %s", why);
    SC_SKIP("no GPU: %s", why);
  }
  int dev = 0, major = 0, minor = 0;
  CU(cu.device_get(&dev, 0));
  CU(cu.device_attr(&major, CU_ATTR_CC_MAJOR, dev));
  CU(cu.device_attr(&minor, CU_ATTR_CC_MINOR, dev));
  void *ctx = NULL;
  CU(cu.ctx_retain(&ctx, dev));
  CU(cu.ctx_set(ctx));
  gpu_run run;
  memset(&run, 0, sizeof run);
  snprintf(run.arch, sizeof run.arch, "compute_%d%d", major, minor);
  rng_seed(20250612);
  for_each_sample(gpu_one, &run);
  assert_true(run.kernels > 0);
  printf("[  GPU     ] %lld sample kernel steps match the CPU on sm_%d%d\n",
         (long long)run.kernels, major, minor);
  cu.ctx_release(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_samples),
      cmocka_unit_test(test_mlp_steps_interpreter),
      cmocka_unit_test(test_emulated_samples_match_cpu),
      cmocka_unit_test(test_gpu_samples_match_cpu),
  };
  return SC_RUN_TESTS(tests, NULL, NULL);
}
#else
SC_TEST_MAIN_SKIPPED("built without the CUDA backend (NVRTC)")
#endif
