/* embed_gpt2.c — a program that embeds shardc through its public header
 * only (include/shardc.h) and the installed library.
 *
 * It plans the GPT-2 sample over a tp=2 x pp=2 mesh (the plan as JSON),
 * compiles it twice — once for one rank, once partitioned by replaying
 * that JSON —
 * runs both on the same seeded random token ids over in-process ranks,
 * and checks that the logits agree within rtol 1e-4 and atol 1e-5 (the
 * partitioned run only reorders float sums), with no NaN. It then saves
 * the partitioned program as a bundle, loads it back and checks that the
 * loaded one gives the same logits bit for bit.
 *
 * Usage: embed_gpt2 MODEL.onnx SCRATCH_DIR. Exit status 0 when every check
 * passes, 1 otherwise (with the reason on stderr). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardc.h>

enum { BATCH = 2 };

static uint64_t rng_state = 42;
static uint64_t next_random(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int64_t numel(const sc_host_tensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* Compiles MODEL with the mesh or the plan (both NULL: one rank); exits on
 * failure. */
static sc_executable *compile(const char *model, const char *mesh, const char *plan_json) {
  sc_dim_binding dims[] = {{"batch", BATCH}};
  sc_compile_settings o;
  memset(&o, 0, sizeof o);
  o.dims = dims;
  o.n_dims = 1;
  o.parallel.mesh = mesh;
  o.parallel.plan_json = plan_json;
  o.quiet = true;
  sc_executable *e = NULL;
  if (sc_compile(model, &o, &e) != SC_OK) {
    fprintf(stderr, "embed_gpt2: compile (%s): %s\n",
            mesh ? mesh : plan_json ? "the plan" : "one rank", sc_executable_error(e));
    sc_executable_free(e);
    exit(1);
  }
  return e;
}

/* Runs e on the one input; returns the first output (caller frees). */
static sc_host_tensor run(sc_executable *e, const sc_host_tensor *in) {
  sc_host_tensor out[4];
  int32_t n = sc_executable_n_outputs(e);
  if (n < 1 || n > 4 || sc_executable_run(e, NULL, in, 1, out, n) != SC_OK) {
    fprintf(stderr, "embed_gpt2: run: %s\n", sc_executable_error(e));
    exit(1);
  }
  sc_host_tensors_free(out + 1, n - 1);
  return out[0];
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: embed_gpt2 MODEL.onnx SCRATCH_DIR\n");
    return 2;
  }
  const char *model = argv[1];

  /* plan */
  sc_parallel_opts par;
  memset(&par, 0, sizeof par);
  par.mesh = "tp=2,pp=2";
  sc_dim_binding dims[] = {{"batch", BATCH}};
  char *json = NULL, *error = NULL;
  if (sc_plan_json(model, dims, 1, &par, &json, &error) != SC_OK) {
    fprintf(stderr, "embed_gpt2: plan: %s\n", error);
    return 1;
  }
  printf("plan: %zu bytes of JSON, mesh %s\n", strlen(json), par.mesh);

  /* compile: one rank, and tp=2 x pp=2 by replaying that plan */
  sc_executable *one = compile(model, NULL, NULL), *four = compile(model, NULL, json);
  sc_string_free(json);
  printf("compiled: %lld rank(s) and %lld ranks in %d stages\n",
         (long long)sc_executable_n_ranks(one), (long long)sc_executable_n_ranks(four),
         (int)sc_executable_n_stages(four));

  /* the input: seeded random token ids over the whole vocabulary (1000) */
  sc_host_tensor in;
  if (sc_executable_n_inputs(four) != 1 || sc_executable_input(four, 0, &in) != SC_OK ||
      in.dtype != SC_ONNX_INT64) {
    fprintf(stderr, "embed_gpt2: expected one int64 input\n");
    return 1;
  }
  int64_t *ids = malloc(sizeof *ids * (size_t)numel(&in));
  for (int64_t i = 0; i < numel(&in); i++) ids[i] = (int64_t)(next_random() % 1000);
  in.data = ids;

  sc_host_tensor want = run(one, &in), got = run(four, &in);
  if (want.rank != got.rank || numel(&want) != numel(&got) || got.dtype != SC_ONNX_FLOAT) {
    fprintf(stderr, "embed_gpt2: the outputs differ in shape or type\n");
    return 1;
  }
  const float *a = want.data, *b = got.data;
  double worst = 0;
  for (int64_t i = 0; i < numel(&got); i++) {
    double diff = fabs((double)a[i] - (double)b[i]);
    if (isnan(a[i]) || isnan(b[i]) || diff > 1e-5 + 1e-4 * fabs((double)a[i])) {
      fprintf(stderr, "embed_gpt2: element %lld: one rank %g, tp=2,pp=2 %g\n", (long long)i,
              (double)a[i], (double)b[i]);
      return 1;
    }
    if (diff > worst) worst = diff;
  }
  printf("logits [%lld,%lld,%lld]: max |4 ranks - 1 rank| = %.3g (rtol 1e-4, atol 1e-5)\n",
         (long long)got.dims[0], (long long)got.dims[1], (long long)got.dims[2], worst);

  /* save, load, run again: the same numbers */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/gpt2-tp2-pp2", argv[2]);
  sc_executable *loaded = NULL;
  if (sc_executable_save(four, dir) != SC_OK) {
    fprintf(stderr, "embed_gpt2: save: %s\n", sc_executable_error(four));
    return 1;
  }
  if (sc_executable_load(dir, &loaded) != SC_OK) {
    fprintf(stderr, "embed_gpt2: load: %s\n", sc_executable_error(loaded));
    return 1;
  }
  sc_host_tensor again = run(loaded, &in);
  if (numel(&again) != numel(&got) || memcmp(again.data, got.data, sizeof(float) *
                                                                      (size_t)numel(&got))) {
    fprintf(stderr, "embed_gpt2: the loaded bundle gives other logits\n");
    return 1;
  }
  printf("saved to %s, loaded: the same logits\n", dir);

  sc_host_tensors_free(&want, 1);
  sc_host_tensors_free(&got, 1);
  sc_host_tensors_free(&again, 1);
  free(ids);
  sc_executable_free(one);
  sc_executable_free(four);
  sc_executable_free(loaded);
  printf("ok\n");
  return 0;
}
