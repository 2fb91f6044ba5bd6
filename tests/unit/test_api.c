/* test_api.c — the public API (include/shardc.h) beyond what the embedding
 * sample (samples/embed, run against the installed library by
 * install.test_install) covers: the MLP sample through sc_compile and
 * sc_executable_run on one rank and at dp=2, checked against each other
 * (rtol 1e-5, atol 1e-6: dp only splits rows, so the numbers are the same
 * sums) and against a hand-checked shape; the descriptions of inputs and
 * outputs (global dims); a one-rank bundle saved, loaded and rerun to the
 * same bytes; a CUDA executable saved (PTX written) but refused at run
 * time; and the errors: an unknown mesh axis, a plan without a mesh,
 * parallel options without one, a missing bundle, a wrong output count,
 * an unknown dtype code; the communicators (the CLI's --comm table): an
 * unknown one refused listing them, nccl and cuda-local refused for a CPU
 * executable, tcp run as a world of one process (RANK=0, WORLD_SIZE=1 on
 * a free loopback port) to the local run's bytes. Training: AdamW steps on the MLP (see
 * test_training), auxiliary losses through the settings on the moe sample
 * (test_training_aux), and a training bundle saved and loaded that steps as
 * its source does, bit for bit (test_training_bundle). Inputs are seeded
 * random, never zeros. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "shardc.h"

#define MLP SC_SOURCE_DIR "/samples/mlp.onnx"
#define MOE SC_SOURCE_DIR "/samples/moe.onnx"

static sc_executable *compile_ok(const char *mesh, sc_target_kind target) {
  sc_dim_binding dims[] = {{"batch", 4}};
  sc_compile_settings o;
  memset(&o, 0, sizeof o);
  o.dims = dims;
  o.n_dims = 1;
  o.parallel.mesh = mesh;
  o.target = target;
  o.quiet = true;
  sc_executable *e = NULL;
  if (sc_compile(MLP, &o, &e) != SC_OK) fail_msg("compile: %s", sc_executable_error(e));
  return e;
}

static float x_data[4 * 64];

/* Removes the scratch directory dir and what is in it. */
static void rm_tree(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static sc_host_tensor run_ok(sc_executable *e) {
  sc_host_tensor in;
  assert_int_equal(sc_executable_input(e, 0, &in), SC_OK);
  in.data = x_data;
  sc_host_tensor out;
  if (sc_executable_run(e, NULL, &in, 1, &out, 1) != SC_OK)
    fail_msg("run: %s", sc_executable_error(e));
  assert_non_null(out.data);
  return out;
}

static void test_compile_run(void **state) {
  (void)state;
  srand(5);
  for (int i = 0; i < 4 * 64; i++) x_data[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  sc_executable *one = compile_ok(NULL, SC_TARGET_CPU), *two = compile_ok("dp=2", SC_TARGET_CPU);
  assert_int_equal(sc_executable_n_ranks(one), 1);
  assert_int_equal(sc_executable_n_ranks(two), 2);
  assert_int_equal(sc_executable_n_stages(two), 1);
  assert_int_equal(sc_executable_n_inputs(two), 1);
  assert_int_equal(sc_executable_n_outputs(two), 1);
  sc_host_tensor in, out;
  assert_int_equal(sc_executable_input(two, 0, &in), SC_OK);
  assert_string_equal(in.name, "x");
  assert_int_equal(in.dtype, SC_ONNX_FLOAT);
  assert_int_equal(in.rank, 2);
  assert_int_equal(in.dims[0], 4); /* the GLOBAL batch */
  assert_int_equal(in.dims[1], 64);
  assert_int_equal(sc_executable_output(two, 0, &out), SC_OK);
  assert_string_equal(out.name, "y");
  assert_int_equal(out.dims[0], 4);
  assert_int_equal(out.dims[1], 10);
  assert_int_equal(sc_executable_input(two, 1, &in), SC_ERR_USAGE);

  sc_host_tensor a = run_ok(one), b = run_ok(two);
  assert_int_equal(b.rank, 2);
  assert_int_equal(b.dims[0], 4);
  assert_int_equal(b.dims[1], 10);
  const float *fa = a.data, *fb = b.data;
  for (int i = 0; i < 40; i++) {
    if (isnan(fa[i]) || isnan(fb[i]) || fabsf(fa[i] - fb[i]) > 1e-6f + 1e-5f * fabsf(fa[i]))
      fail_msg("y[%d]: one rank %g, dp=2 %g", i, (double)fa[i], (double)fb[i]);
  }

  /* a one-rank bundle: saved, loaded, the same bytes */
  char dir[] = "/tmp/sc-test-api-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/mlp", dir);
  if (sc_executable_save(one, path) != SC_OK) fail_msg("save: %s", sc_executable_error(one));
  sc_executable *loaded = NULL;
  if (sc_executable_load(path, &loaded) != SC_OK)
    fail_msg("load: %s", sc_executable_error(loaded));
  sc_host_tensor c = run_ok(loaded);
  assert_memory_equal(c.data, a.data, 40 * sizeof(float));
  /* saving a loaded executable is refused */
  assert_int_equal(sc_executable_save(loaded, path), SC_ERR_USAGE);

  /* wrong output count, unknown dtype */
  sc_host_tensor bad;
  assert_int_equal(sc_executable_input(one, 0, &bad), SC_OK);
  bad.data = x_data;
  sc_host_tensor outs[2];
  assert_int_equal(sc_executable_run(one, NULL, &bad, 1, outs, 2), SC_ERR_USAGE);
  assert_non_null(strstr(sc_executable_error(one), "1 outputs"));
  bad.dtype = 12345;
  assert_int_equal(sc_executable_run(one, NULL, &bad, 1, outs, 1), SC_ERR_USAGE);
  sc_run_opts ro = {.comm = "carrier-pigeon"};
  assert_int_equal(sc_executable_run(one, &ro, &in, 1, outs, 1), SC_ERR_USAGE);
  assert_non_null(strstr(sc_executable_error(one), "'local', 'cuda-local', 'mpi', 'tcp' or 'nccl'"));
  /* the communicators of shardc's --comm: the GPU's refused naming why, tcp
   * runs (a world of one process, from the torchrun variables) */
  sc_host_tensor xin;
  assert_int_equal(sc_executable_input(one, 0, &xin), SC_OK);
  xin.data = x_data;
  static const char *const gpu[] = {"nccl", "cuda-local"};
  for (int k = 0; k < 2; k++) {
    ro.comm = gpu[k];
    assert_int_equal(sc_executable_run(one, &ro, &xin, 1, outs, 1), SC_ERR_USAGE);
    if (!strstr(sc_executable_error(one), "needs a cuda executable"))
      fail_msg("comm %s: %s", gpu[k], sc_executable_error(one));
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0); /* a free port */
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", ntohs(sa.sin_port));
  close(ls);
  setenv("RANK", "0", 1), setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", port, 1);
  ro.comm = "tcp";
  sc_host_tensor t;
  if (sc_executable_run(one, &ro, &xin, 1, &t, 1) != SC_OK)
    fail_msg("comm tcp: %s", sc_executable_error(one));
  assert_memory_equal(t.data, a.data, 40 * sizeof(float));
  sc_host_tensors_free(&t, 1);
  ro.comm = "mpi"; /* the world is tcp's until the executable is freed */
  assert_int_equal(sc_executable_run(one, &ro, &xin, 1, outs, 1), SC_ERR_USAGE);
  assert_non_null(strstr(sc_executable_error(one), "already runs over 'tcp'"));
  unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");

  sc_host_tensors_free(&a, 1);
  sc_host_tensors_free(&b, 1);
  sc_host_tensors_free(&c, 1);
  assert_null(a.data);
  sc_executable_free(loaded);
  sc_executable_free(one);
  sc_executable_free(two);
  rm_tree(dir);
}

static void test_cuda_target(void **state) {
  (void)state;
  sc_executable *e = compile_ok(NULL, SC_TARGET_CUDA);
  char dir[] = "/tmp/sc-test-api-cuda-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], ptx[300];
  snprintf(path, sizeof path, "%s/mlp", dir);
#if SHARDC_HAVE_CUDA
  if (sc_executable_save(e, path) != SC_OK) fail_msg("save: %s", sc_executable_error(e));
  snprintf(ptx, sizeof ptx, "%s/kernels.sm_80.ptx", path);
  struct stat sb;
  assert_int_equal(stat(ptx, &sb), 0);
  assert_true(sb.st_size > 0);
#else /* a build without NVRTC: the CUDA code cannot be written */
  (void)ptx;
  assert_int_equal(sc_executable_save(e, path), SC_ERR_UNSUPPORTED);
#endif
  sc_host_tensor in, out;
  assert_int_equal(sc_executable_input(e, 0, &in), SC_OK);
  in.data = x_data;
  assert_int_equal(sc_executable_run(e, NULL, &in, 1, &out, 1), SC_ERR_UNSUPPORTED);
  assert_non_null(strstr(sc_executable_error(e), "GPU runtime"));
  sc_executable_free(e);
  rm_tree(dir);
}

static void test_errors(void **state) {
  (void)state;
  sc_compile_settings o;
  memset(&o, 0, sizeof o);
  o.quiet = true;
  o.parallel.mesh = "zz=2";
  sc_executable *e = NULL;
  assert_int_equal(sc_compile(MLP, &o, &e), SC_ERR_USAGE);
  assert_non_null(e);
  assert_non_null(strstr(sc_executable_error(e), "zz"));
  sc_executable_free(e);

  memset(&o, 0, sizeof o);
  o.parallel.microbatches = 2; /* without a mesh */
  assert_int_equal(sc_compile(MLP, &o, &e), SC_ERR_USAGE);
  assert_non_null(strstr(sc_executable_error(e), "need a mesh"));
  sc_executable_free(e);

  memset(&o, 0, sizeof o);
  o.parallel.mesh = "tp=2";
  o.target = SC_TARGET_CUDA;
  assert_int_equal(sc_compile(MLP, &o, &e), SC_ERR_UNSUPPORTED);
  sc_executable_free(e);

  assert_int_not_equal(sc_compile(SC_SOURCE_DIR "/samples/no-such-model.onnx", NULL, &e), SC_OK);
  assert_non_null(strstr(sc_executable_error(e), "no-such-model.onnx"));
  sc_executable_free(e);

  char *json = (char *)1, *err = NULL;
  sc_parallel_opts par;
  memset(&par, 0, sizeof par);
  assert_int_equal(sc_plan_json(MLP, NULL, 0, &par, &json, &err), SC_ERR_USAGE);
  assert_null(json);
  assert_non_null(err);
  assert_non_null(strstr(err, "mesh"));
  sc_string_free(err);
  par.mesh = "tp=2";
  assert_int_equal(sc_plan_json(MLP, NULL, 0, &par, &json, &err), SC_OK);
  assert_non_null(strstr(json, "\"tp\""));
  sc_string_free(json);

  assert_int_not_equal(sc_executable_load("/nonexistent/bundle", &e), SC_OK);
  assert_non_null(e);
  assert_true(strlen(sc_executable_error(e)) > 0);
  sc_executable_free(e);
  assert_string_equal(sc_executable_error(NULL), "out of memory");
}

/* A seeded batch of 8 MLP examples: x uniform in [-1, 1), labels in [0, 10). */
static void random_batch(unsigned seed, float x[8 * 64], int64_t labels[8]) {
  srand(seed);
  for (int i = 0; i < 8 * 64; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  for (int i = 0; i < 8; i++) labels[i] = rand() % 10;
}

/* PyTorch's defaults for optimizer, with the batch bound to 8. */
static void settings_batch8(sc_training_settings *s, const char *optimizer) {
  static const sc_dim_binding dims[] = {{"batch", 8}};
  sc_training_settings_init(s, optimizer);
  s->dims = dims;
  s->n_dims = 1;
}

/* Training through the API: AdamW on the MLP learns random labels of 8
 * examples (the loss falls below a third of its start in 40 steps), the
 * weights change, and the errors: an unknown optimizer, missing labels. */
static void test_training(void **state) {
  (void)state;
  static float x[8 * 64];
  int64_t labels[8];
  random_batch(11, x, labels);
  sc_training_settings s;
  settings_batch8(&s, "adamw");
  assert_string_equal(s.optimizer, "adamw");
  assert_true(s.weight_decay == 0.01 && s.beta2 == 0.999 && s.ignore_index == -100);
  sc_training *t = NULL;
  if (sc_training_create(MLP, &s, &t) != SC_OK) fail_msg("create: %s", sc_training_error(t));
  sc_host_tensor w0;
  assert_int_equal(sc_training_tensor(t, "0.weight", &w0), SC_OK);
  assert_int_equal(w0.rank, 2);
  assert_int_equal(w0.dims[0], 128);
  float first = ((const float *)w0.data)[0];
  sc_host_tensor batch[2] = {{"x", SC_ONNX_FLOAT, 2, {8, 64}, x},
                             {"labels", SC_ONNX_INT64, 1, {8}, labels}};
  double loss0 = 0, loss = 0, norm = 0;
  for (int i = 0; i < 40; i++) {
    if (sc_training_step(t, batch, 2, 1e-2, &loss, &norm) != SC_OK)
      fail_msg("step %d: %s", i + 1, sc_training_error(t));
    assert_false(isnan(loss));
    assert_true(norm > 0);
    if (i == 0) loss0 = loss;
  }
  assert_int_equal(sc_training_steps_done(t), 40);
  if (!(loss < loss0 / 3)) fail_msg("the loss went from %g to %g", loss0, loss);
  assert_int_equal(sc_training_tensor(t, "0.weight", &w0), SC_OK);
  assert_true(((const float *)w0.data)[0] != first);
  sc_host_tensor m;
  assert_int_equal(sc_training_tensor(t, "0.weight.exp_avg", &m), SC_OK);
  assert_int_equal(sc_training_tensor(t, "no.such", &m), SC_ERR_USAGE);
  /* save, resume in a fresh training: the same state, the same next step */
  char dir[] = "/tmp/sc-test-api-train-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char ck[300];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  if (sc_training_save(t, ck) != SC_OK) fail_msg("save: %s", sc_training_error(t));
  sc_training *u = NULL;
  if (sc_training_create(MLP, &s, &u) != SC_OK) fail_msg("create: %s", sc_training_error(u));
  if (sc_training_resume(u, ck) != SC_OK) fail_msg("resume: %s", sc_training_error(u));
  assert_int_equal(sc_training_steps_done(u), 40);
  sc_host_tensor wt, wu;
  assert_int_equal(sc_training_tensor(t, "0.weight", &wt), SC_OK);
  assert_int_equal(sc_training_tensor(u, "0.weight", &wu), SC_OK);
  assert_memory_equal(wt.data, wu.data, 128 * 64 * sizeof(float));
  double lt, lu;
  assert_int_equal(sc_training_step(t, batch, 2, 1e-2, &lt, NULL), SC_OK);
  assert_int_equal(sc_training_step(u, batch, 2, 1e-2, &lu, NULL), SC_OK);
  assert_true(lt == lu);
  sc_training_free(u);
  /* export: the model with the trained weights */
  char out[320], *err = NULL;
  snprintf(out, sizeof out, "%s/trained.onnx", dir);
  if (sc_export_checkpoint(ck, MLP, out, &err) != SC_OK) fail_msg("export: %s", err);
  assert_int_not_equal(sc_export_checkpoint(ck, SC_SOURCE_DIR "/samples/gpt2.onnx", out, &err),
                       SC_OK);
  assert_non_null(strstr(err, "0.weight"));
  sc_string_free(err);
  rm_tree(dir);
  int64_t before = sc_training_steps_done(t);
  /* labels missing: an error naming them, no update */
  assert_int_not_equal(sc_training_step(t, batch, 1, 1e-2, NULL, NULL), SC_OK);
  assert_non_null(strstr(sc_training_error(t), "labels"));
  assert_int_equal(sc_training_steps_done(t), before);
  sc_training_free(t);

  sc_training_settings_init(&s, "sgd");
  s.optimizer = "lion";
  assert_int_equal(sc_training_create(MLP, &s, &t), SC_ERR_USAGE);
  assert_non_null(strstr(sc_training_error(t), "lion"));
  sc_training_free(t);
  settings_batch8(&s, "sgd");
  s.precision = "int4";
  assert_int_equal(sc_training_create(MLP, &s, &t), SC_ERR_USAGE);
  assert_non_null(strstr(sc_training_error(t), "int4"));
  sc_training_free(t);
}

/* Auxiliary losses through the settings: the moe sample's step-1 loss with
 * aux_loss at coefficients 0, 1 and 2 (cross-entropy on logits, the only
 * output no aux loss names once aux_loss is one): the three losses lie on a
 * line whose slope is aux_loss, about 1 for balanced routing; an unknown
 * name and too many are refused, naming them. */
static void test_training_aux(void **state) {
  (void)state;
  static const sc_dim_binding dims[] = {{"batch", 2}};
  int64_t ids[32], labels[32];
  srand(42);
  for (int i = 0; i < 32; i++) ids[i] = rand() % 1000, labels[i] = rand() % 1000;
  sc_host_tensor batch[2] = {{"input_ids", SC_ONNX_INT64, 2, {2, 16}, ids},
                             {"labels", SC_ONNX_INT64, 2, {2, 16}, labels}};
  const char *names[] = {"aux_loss"};
  double loss[3];
  for (int c = 0; c < 3; c++) {
    sc_training_settings s;
    sc_training_settings_init(&s, "sgd");
    s.dims = dims;
    s.n_dims = 1;
    s.threads = 1;
    double coef = c;
    s.aux_loss_names = names;
    s.aux_loss_coefs = &coef;
    s.n_aux_losses = 1;
    sc_training *t = NULL;
    if (sc_training_create(MOE, &s, &t) != SC_OK) fail_msg("create: %s", sc_training_error(t));
    if (sc_training_step(t, batch, 2, 0.0, &loss[c], NULL) != SC_OK)
      fail_msg("step: %s", sc_training_error(t));
    sc_training_free(t);
  }
  double aux = loss[1] - loss[0];
  if (!(aux > 0.5 && aux < 2.0 && fabs((loss[2] - loss[1]) - aux) <= 1e-5 * loss[2]))
    fail_msg("losses %.9g %.9g %.9g: not a line of slope aux_loss", loss[0], loss[1], loss[2]);
  sc_training_settings s;
  sc_training_settings_init(&s, "sgd");
  s.dims = dims;
  s.n_dims = 1;
  const char *bad[] = {"no_such_output"};
  double one = 1;
  s.aux_loss_names = bad;
  s.aux_loss_coefs = &one;
  s.n_aux_losses = 1;
  sc_training *t = NULL;
  assert_int_equal(sc_training_create(MOE, &s, &t), SC_ERR_USAGE);
  assert_non_null(strstr(sc_training_error(t), "no_such_output"));
  sc_training_free(t);
  s.n_aux_losses = 17;
  assert_int_equal(sc_training_create(MOE, &s, &t), SC_ERR_USAGE);
  assert_non_null(strstr(sc_training_error(t), "at most 16"));
  sc_training_free(t);
}

/* precision "bf16": the step's matrix products in bf16 — the same model
 * and batch give a loss other than the fp32 step's, within 2 % of it
 * (bf16 keeps 8 significant bits: ~0.4 % per rounding), and it trains. */
static void test_training_bf16(void **state) {
  (void)state;
  static float x[8 * 64];
  int64_t labels[8];
  random_batch(12, x, labels);
  sc_host_tensor batch[2] = {{"x", SC_ONNX_FLOAT, 2, {8, 64}, x},
                             {"labels", SC_ONNX_INT64, 1, {8}, labels}};
  double loss[2][10];
  for (int k = 0; k < 2; k++) {
    sc_training_settings s;
    settings_batch8(&s, "adamw");
    s.precision = k ? "bf16" : NULL;
    sc_training *t = NULL;
    if (sc_training_create(MLP, &s, &t) != SC_OK) fail_msg("create: %s", sc_training_error(t));
    for (int i = 0; i < 10; i++)
      if (sc_training_step(t, batch, 2, 1e-2, &loss[k][i], NULL) != SC_OK)
        fail_msg("step %d: %s", i + 1, sc_training_error(t));
    sc_training_free(t);
  }
  assert_false(isnan(loss[1][0]));
  assert_true(loss[1][0] != loss[0][0]);
  assert_true(fabs(loss[1][0] - loss[0][0]) <= 0.02 * loss[0][0]);
  assert_true(loss[1][9] < loss[1][0]);
}

/* sc_plan_report_json on GPT-2 at tp=2 x pp=2: two stages of two ranks
 * each (ranks 0,2 and 1,3: pp the major axis), every stage's total its
 * weights plus its arena (activations + comm scratch), weights split over
 * tp (each stage holds some, none more than the model's 4 bytes per
 * parameter), and tensor-parallel all-reduces and the pipeline's
 * send/recv among the collectives; no mesh is a usage error. */
static void test_plan_report(void **state) {
  (void)state;
  static const sc_dim_binding dims[] = {{"batch", 2}};
  sc_parallel_opts par;
  memset(&par, 0, sizeof par);
  par.mesh = "tp=2,pp=2";
  char *text = NULL, *err = NULL;
  if (sc_plan_report_json(SC_SOURCE_DIR "/samples/gpt2.onnx", dims, 1, &par, &text, &err) !=
      SC_OK)
    fail_msg("report: %s", err);
  json_error_t je;
  json_t *r = json_loads(text, 0, &je);
  assert_non_null(r);
  assert_string_equal(json_string_value(json_object_get(r, "mesh")), "tp=2,pp=2");
  assert_int_equal(json_integer_value(json_object_get(r, "ranks")), 4);
  json_t *stages = json_object_get(r, "stages");
  assert_int_equal(json_array_size(stages), 2);
  for (size_t s = 0; s < 2; s++) {
    json_t *st = json_array_get(stages, s);
    json_t *ranks = json_object_get(st, "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    assert_int_equal(json_integer_value(json_array_get(ranks, 0)), (json_int_t)s);
    assert_int_equal(json_integer_value(json_array_get(ranks, 1)), (json_int_t)s + 2);
    json_int_t w = json_integer_value(json_object_get(st, "weight_bytes"));
    json_int_t a = json_integer_value(json_object_get(st, "activation_bytes"));
    json_int_t c = json_integer_value(json_object_get(st, "comm_bytes"));
    assert_true(w > 0 && a > 0 && c >= 0);
    assert_int_equal(json_integer_value(json_object_get(st, "total_bytes")), w + a + c);
  }
  bool all_reduce = false, send = false;
  json_t *coll = json_object_get(r, "collectives");
  for (size_t i = 0; i < json_array_size(coll); i++) {
    json_t *c = json_array_get(coll, i);
    const char *op = json_string_value(json_object_get(c, "op"));
    const char *axis = json_string_value(json_array_get(json_object_get(c, "axes"), 0));
    assert_true(json_integer_value(json_object_get(c, "count")) > 0);
    assert_true(json_integer_value(json_object_get(c, "bytes_per_step")) ==
                json_integer_value(json_object_get(c, "bytes_per_microbatch")));
    all_reduce |= !strcmp(op, "AllReduce") && !strcmp(axis, "tp");
    send |= !strcmp(op, "Send") && !strcmp(axis, "pp");
  }
  assert_true(all_reduce && send);
  assert_true(json_is_null(json_object_get(r, "predicted")));
  json_decref(r);
  sc_string_free(text);
  /* on a cluster: the predicted step, finite and positive */
  par.cluster = "h100-sxm:8x1";
  if (sc_plan_report_json(SC_SOURCE_DIR "/samples/gpt2.onnx", dims, 1, &par, &text, &err) !=
      SC_OK)
    fail_msg("report: %s", err);
  r = json_loads(text, 0, &je);
  json_t *pred = json_object_get(r, "predicted");
  assert_string_equal(json_string_value(json_object_get(pred, "cluster")), "h100-sxm:8x1");
  double step = json_real_value(json_object_get(pred, "step_time_s"));
  assert_true(step > 0 && isfinite(step));
  assert_true(json_real_value(json_object_get(pred, "tokens_per_s")) > 0);
  json_decref(r);
  sc_string_free(text);
  par.cluster = "no-such-gpu:8x1";
  assert_int_not_equal(sc_plan_report_json(SC_SOURCE_DIR "/samples/gpt2.onnx", dims, 1, &par,
                                           &text, &err), SC_OK);
  assert_non_null(strstr(err, "no-such-gpu"));
  sc_string_free(err);
  par.cluster = NULL;
  par.mesh = NULL;
  assert_int_equal(sc_plan_report_json(MLP, NULL, 0, &par, &text, &err), SC_ERR_USAGE);
  assert_null(text);
  assert_non_null(strstr(err, "mesh"));
  sc_string_free(err);
}

/* Training over a mesh through the API: SGD with momentum on the MLP at
 * dp=2 takes the steps one rank takes (losses and gradient norms within
 * rtol 1e-5: the two halves' gradients are summed in another order), the
 * weights read back whole; saved as a partitioned training bundle and
 * loaded back it takes the same steps bit for bit; comm "mpi" without a
 * mesh is refused. */
static void test_training_mesh(void **state) {
  (void)state;
  static float x[8 * 64];
  int64_t labels[8];
  random_batch(13, x, labels);
  sc_host_tensor batch[2] = {{"x", SC_ONNX_FLOAT, 2, {8, 64}, x},
                             {"labels", SC_ONNX_INT64, 1, {8}, labels}};
  double loss[2][5], norm[2][5];
  sc_training *t[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    sc_training_settings s;
    settings_batch8(&s, "sgd");
    s.momentum = 0.9;
    s.parallel.mesh = k ? "dp=2" : NULL;
    if (sc_training_create(MLP, &s, &t[k]) != SC_OK)
      fail_msg("create: %s", sc_training_error(t[k]));
    for (int i = 0; i < 5; i++)
      if (sc_training_step(t[k], batch, 2, 0.05, &loss[k][i], &norm[k][i]) != SC_OK)
        fail_msg("step %d: %s", i + 1, sc_training_error(t[k]));
  }
  for (int i = 0; i < 5; i++) {
    assert_false(isnan(loss[1][i]));
    if (fabs(loss[1][i] - loss[0][i]) > 1e-5 * fabs(loss[0][i]) ||
        fabs(norm[1][i] - norm[0][i]) > 1e-5 * fabs(norm[0][i]))
      fail_msg("step %d: loss %.9g vs %.9g, norm %.9g vs %.9g", i + 1, loss[1][i], loss[0][i],
               norm[1][i], norm[0][i]);
  }
  assert_true(loss[0][4] < loss[0][0]);
  sc_host_tensor w0, w1;
  assert_int_equal(sc_training_tensor(t[1], "0.weight", &w1), SC_OK);
  assert_int_equal(sc_training_tensor(t[0], "0.weight", &w0), SC_OK);
  assert_int_equal(w1.rank, 2);
  assert_int_equal(w1.dims[0], 128);
  assert_int_equal(w1.dims[1], 64);
  for (int i = 0; i < 128 * 64; i++)
    assert_true(fabsf(((float *)w1.data)[i] - ((float *)w0.data)[i]) <= 1e-5f);
  /* the partitioned training bundle, loaded back: from the initial
   * weights, the same 5 steps bit for bit */
  char dir[] = "/tmp/sc-test-api-mesh-XXXXXX";
  assert_non_null(mkdtemp(dir));
  if (sc_training_save_bundle(t[1], dir) != SC_OK)
    fail_msg("save_bundle: %s", sc_training_error(t[1]));
  char pj[sizeof dir + 32];
  snprintf(pj, sizeof pj, "%s/partition.json", dir);
  assert_int_equal(access(pj, F_OK), 0);
  sc_training *u = NULL;
  if (sc_training_load(dir, 0, &u) != SC_OK) fail_msg("load: %s", sc_training_error(u));
  for (int i = 0; i < 5; i++) {
    double l, n;
    if (sc_training_step(u, batch, 2, 0.05, &l, &n) != SC_OK)
      fail_msg("loaded step %d: %s", i + 1, sc_training_error(u));
    if (l != loss[1][i] || n != norm[1][i])
      fail_msg("loaded step %d: loss %.9g vs %.9g", i + 1, l, loss[1][i]);
  }
  assert_int_equal(sc_training_save_bundle(u, dir), SC_ERR_USAGE);
  sc_training_free(u);
  rm_tree(dir);
  sc_training_free(t[0]);
  sc_training_free(t[1]);
  sc_training_settings s;
  settings_batch8(&s, "sgd");
  s.comm = "mpi";
  u = NULL;
  assert_int_equal(sc_training_create(MLP, &s, &u), SC_ERR_USAGE);
  assert_non_null(strstr(sc_training_error(u), "needs a mesh"));
  sc_training_free(u);
}

/* sc_training_plan_json on the MLP at fsdp=2 with AdamW: the plan names
 * the fsdp axis; one stage of ranks 0 and 1 whose total is its arena plus
 * constants, with parameters and twice as many bytes of optimizer state
 * (exp_avg, exp_avg_sq); ZeRO-3's all-gathers and reduce-scatters over
 * fsdp, each sending half its bytes (ring, 2 ranks). No mesh: usage. */
static void test_training_plan(void **state) {
  (void)state;
  sc_training_settings s;
  settings_batch8(&s, "adamw");
  s.parallel.mesh = "fsdp=2";
  char *plan = NULL, *report = NULL, *err = NULL;
  if (sc_training_plan_json(MLP, &s, &plan, &report, &err) != SC_OK) fail_msg("plan: %s", err);
  assert_non_null(strstr(plan, "\"fsdp_axis\": \"fsdp\""));
  json_error_t je;
  json_t *r = json_loads(report, 0, &je);
  assert_non_null(r);
  json_t *stages = json_object_get(r, "stages");
  assert_int_equal(json_array_size(stages), 1);
  json_t *st = json_array_get(stages, 0), *lines = json_object_get(st, "lines");
  assert_int_equal(json_array_size(json_object_get(st, "ranks")), 2);
  json_int_t params = json_integer_value(json_object_get(lines, "params"));
  assert_true(params > 0);
  assert_int_equal(json_integer_value(json_object_get(lines, "optimizer state")), 2 * params);
  assert_int_equal(json_integer_value(json_object_get(st, "total_bytes")),
                   json_integer_value(json_object_get(lines, "arena")) +
                       json_integer_value(json_object_get(lines, "constants")));
  bool gather = false, scatter = false;
  json_t *coll = json_object_get(r, "collectives");
  for (size_t i = 0; i < json_array_size(coll); i++) {
    json_t *c = json_array_get(coll, i);
    const char *op = json_string_value(json_object_get(c, "op"));
    json_int_t bytes = json_integer_value(json_object_get(c, "bytes_per_microbatch"));
    json_int_t sent = json_integer_value(json_object_get(c, "sent_bytes"));
    if (!strcmp(op, "AllGather") || !strcmp(op, "ReduceScatter")) {
      assert_int_equal(sent, bytes / 2);
      gather |= op[3] == 'G';
      scatter |= op[0] == 'R';
    }
  }
  assert_true(gather && scatter);
  json_decref(r);
  sc_string_free(plan);
  sc_string_free(report);
  s.parallel.mesh = NULL;
  assert_int_equal(sc_training_plan_json(MLP, &s, &plan, &report, &err), SC_ERR_USAGE);
  assert_null(plan);
  assert_null(report);
  assert_non_null(strstr(err, "mesh"));
  sc_string_free(err);
}

/* sc_learning_rate: a warm-up from 0, then the cosine decay to min_lr at
 * step total (half way: the mean of lr and min_lr), constant after; an
 * unknown schedule is NaN. */
static void test_learning_rate(void **state) {
  (void)state;
  assert_true(sc_learning_rate(NULL, 0.1, 0, 0, 0, 7) == 0.1);
  assert_true(sc_learning_rate("cosine", 0.1, 0, 10, 110, 5) == 0.1 * 5 / 10);
  assert_true(fabs(sc_learning_rate("cosine", 0.1, 0.02, 10, 110, 60) - 0.06) < 1e-15);
  assert_true(sc_learning_rate("linear", 0.1, 0.0, 0, 100, 200) == 0.0);
  assert_true(isnan(sc_learning_rate("step", 0.1, 0, 0, 100, 1)));
  assert_true(isnan(sc_learning_rate("cosine", 0.1, 0, 0, 100, 0)));
}

/* A training bundle: saved from an SGD (momentum, clipping) training and
 * loaded back, it takes the same steps bit for bit (losses, gradient norms,
 * weights and momentum after 5 steps), running its kernels.o; an
 * inference bundle is not a training bundle nor the reverse; a loaded
 * training is not saved again. */
static void test_training_bundle(void **state) {
  (void)state;
  static float x[8 * 64];
  int64_t labels[8];
  random_batch(13, x, labels);
  sc_training_settings s;
  settings_batch8(&s, "sgd");
  s.momentum = 0.9;
  s.clip_grad_norm = 0.5;
  sc_training *t = NULL, *u = NULL;
  if (sc_training_create(MLP, &s, &t) != SC_OK) fail_msg("create: %s", sc_training_error(t));
  char dir[] = "/tmp/sc-test-api-tbundle-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char tb[300], inf[300];
  snprintf(tb, sizeof tb, "%s/train.bundle", dir);
  snprintf(inf, sizeof inf, "%s/infer.bundle", dir);
  if (sc_training_save_bundle(t, tb) != SC_OK) fail_msg("save: %s", sc_training_error(t));
  if (sc_training_load(tb, 0, &u) != SC_OK) fail_msg("load: %s", sc_training_error(u));
  assert_int_equal(sc_training_save_bundle(u, tb), SC_ERR_USAGE);
  sc_host_tensor batch[2] = {{"x", SC_ONNX_FLOAT, 2, {8, 64}, x},
                             {"labels", SC_ONNX_INT64, 1, {8}, labels}};
  double first = 0;
  for (int i = 0; i < 5; i++) {
    double lt, lu, nt, nu;
    if (sc_training_step(t, batch, 2, 0.05, &lt, &nt) != SC_OK)
      fail_msg("step %d: %s", i + 1, sc_training_error(t));
    if (sc_training_step(u, batch, 2, 0.05, &lu, &nu) != SC_OK)
      fail_msg("bundle step %d: %s", i + 1, sc_training_error(u));
    if (lt != lu || nt != nu)
      fail_msg("step %d: loss %.17g vs %.17g, norm %.17g vs %.17g", i + 1, lt, lu, nt, nu);
    if (i == 0) first = lt;
    else assert_true(lt != first); /* it trains */
  }
  static const char *const names[] = {"0.weight", "4.bias", "2.weight.momentum_buffer"};
  for (int k = 0; k < 3; k++) {
    sc_host_tensor a, b;
    assert_int_equal(sc_training_tensor(t, names[k], &a), SC_OK);
    assert_int_equal(sc_training_tensor(u, names[k], &b), SC_OK);
    int64_t n = 1;
    for (int32_t d = 0; d < a.rank; d++) n *= a.dims[d];
    assert_int_equal(a.rank, b.rank);
    assert_memory_equal(a.data, b.data, (size_t)n * sizeof(float));
  }
  sc_training_free(u);
  u = NULL;
  /* the kinds do not mix */
  sc_executable *e = compile_ok(NULL, SC_TARGET_CPU);
  if (sc_executable_save(e, inf) != SC_OK) fail_msg("save: %s", sc_executable_error(e));
  sc_executable_free(e);
  assert_int_not_equal(sc_training_load(inf, 0, &u), SC_OK);
  assert_non_null(strstr(sc_training_error(u), "inference bundle"));
  sc_training_free(u);
  e = NULL;
  assert_int_not_equal(sc_executable_load(tb, &e), SC_OK);
  assert_non_null(strstr(sc_executable_error(e), "training bundle"));
  sc_executable_free(e);
  rm_tree(dir);
  sc_training_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_training),
      cmocka_unit_test(test_training_aux),
      cmocka_unit_test(test_training_bf16),
      cmocka_unit_test(test_learning_rate),
      cmocka_unit_test(test_plan_report),
      cmocka_unit_test(test_training_mesh),
      cmocka_unit_test(test_training_plan),
      cmocka_unit_test(test_training_bundle),
      cmocka_unit_test(test_compile_run),
      cmocka_unit_test(test_cuda_target),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
