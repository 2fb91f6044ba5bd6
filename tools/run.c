/* run.c — `shardc run MODEL`: compile a model for the CPU and run it once.
 *
 * The build (driver/driver.h: import, bind --dim, canonical passes, fuse,
 * lowering, memory plan; partitioned with --mesh/--plan), then a CPU
 * session (one rank) or the distributed runtime (runtime/dist.h: every
 * rank), and one run on inputs read from .npy files
 * (--input NAME=FILE.npy) or made up (--random-inputs SEED). Every graph
 * output is written as DIR/<name>.npy and summarised on stdout.
 *
 * Random inputs (one splitmix64 stream seeded with SEED, consumed by the
 * inputs in graph order): float inputs uniform in [-1, 1); integer inputs
 * whose name contains "mask" all ones (attention masks); other integer
 * inputs uniform in [0, 100) (token ids: the samples' vocabularies have
 * 1000 entries); bool inputs 0/1 at random.
 *
 * Output file names: every character outside [A-Za-z0-9._-] becomes '_'
 * ("a/b:0" -> "a_b_0.npy"); a name that is empty or starts with '.' gets a
 * leading '_'; when two outputs map to the same name the later one gets
 * "_<output index>" appended. BF16 outputs are written as '<u2' (raw bits:
 * NumPy has no bfloat16), see runtime/npy.h.
 *
 * Checked before the model is read: each --input name at most once, --mesh
 * axes that take roles, --comm mpi only with a mesh, no mpirun launch
 * without --comm mpi (each process would write the same files), the
 * output directory (created with its parents). The outputs are written as
 * one commit (runtime/npy.h sc_npy_write_all): an interruption leaves
 * every old file or every new one.
 *
 * Exit status: 0, 1 (a problem in the model or an input file), 2 (usage,
 * including missing inputs and --input names the model does not have). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/bundle.h"
#include "runtime/cpu_gemm.h"
#include "runtime/dist.h"
#include "runtime/dist_load.h"
#include "runtime/npy.h"
#include "runtime/runtime.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/partition_args.h"
#include "tools/plan_auto.h"

static const char *const USAGE =
    "shardc run MODEL.onnx [--dim NAME=V]... [--input NAME=FILE.npy]...\n"
    "                     [--random-inputs SEED] [--output-dir DIR] [--threads N]\n"
    "                     [--no-fuse] [--quiet] [--verbose] [--print-after=PASS]\n"
    "                     [--time-passes] [--repeat N [--warmup W]]\n"
    "                     [--mesh SPEC | --plan FILE.json | --mesh auto [--cluster C]]\n"
    "                     [--comm local|cuda-local|mpi|tcp|nccl]\n"
    "                     [--microbatches M] [--stage-boundaries A,B]\n"
    "                     [--sequence-parallel] [--no-vocab-parallel] [--no-overlap]\n"
    "                     [--ranks-per-node N] [--device cpu|cuda [--no-cuda-graph]\n"
    "                     [--no-allow-tf32] [--gpu-arch sm_NN]]";

enum { MAX_INPUT_ARGS = 256, MAX_ARGS = 1024 };

typedef struct run_opts {
  const char *in_name[MAX_INPUT_ARGS]; /* --input NAME=FILE, split */
  const char *in_file[MAX_INPUT_ARGS];
  char *in_buf[MAX_INPUT_ARGS];        /* owned copies holding the NAME part */
  int n_in;
  bool random;
  uint64_t seed;
  const char *out_dir;
  int threads;
  bool no_fuse, quiet, verbose;
  int frozen[MAX_INPUT_ARGS];          /* --input indices made constants (specialisation) */
  int n_frozen;
  int64_t repeat, warmup;              /* --repeat N, --warmup W (timing mode) */
  bool warmup_given;
  sc_partition_args pc;                /* --mesh and the other partition options */
  sc_device_choice dev;                /* --device, --no-cuda-graph, TF32, --gpu-arch */
} run_opts;

/* Takes run's own options out of argv; the rest (file, --dim, --print-after,
 * --time-passes, --help) go to sc_cli_parse through rest/n_rest. */
static int split_args(int argc, char **argv, run_opts *r, char **rest, int *n_rest) {
  *n_rest = 0;
  rest[(*n_rest)++] = argv[0];
  bool only_files = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int taken = 0;
    if (*n_rest >= MAX_ARGS - 1) return sc_cli_usage_error("too many arguments");
    if (only_files || a[0] != '-') {
      rest[(*n_rest)++] = argv[i];
      continue;
    }
    int dv = sc_cli_device_option(argc, argv, &i, &r->dev);
    if (dv == 2) return 2;
    if (dv == 1) continue;
    if (strcmp(a, "--") == 0) {
      only_files = true;
      rest[(*n_rest)++] = argv[i];
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--input", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, USAGE);
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1])
        return sc_cli_usage_error("--input expects NAME=FILE.npy, got '%s'", v);
      if (r->n_in == MAX_INPUT_ARGS)
        return sc_cli_usage_error("at most %d --input options", MAX_INPUT_ARGS);
      for (int k = 0; k < r->n_in; k++)
        if (strlen(r->in_name[k]) == (size_t)(eq - v) &&
            memcmp(r->in_name[k], v, (size_t)(eq - v)) == 0)
          return sc_cli_usage_error("--input %s: the input '%s' is given twice (%s=%s before)",
                                    v, r->in_name[k], r->in_name[k], r->in_file[k]);
      char *name = sc_malloc((size_t)(eq - v) + 1);
      if (!name) return sc_cli_usage_error("out of memory");
      memcpy(name, v, (size_t)(eq - v));
      name[eq - v] = 0;
      r->in_buf[r->n_in] = name;
      r->in_name[r->n_in] = name;
      r->in_file[r->n_in] = eq + 1;
      r->n_in++;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--random-inputs", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, USAGE);
      int64_t s;
      if (!sc_cli_parse_i64(v, 0, INT64_MAX, &s))
        return sc_cli_usage_error("--random-inputs expects a non-negative integer seed, got '%s'",
                                  v);
      r->random = true;
      r->seed = (uint64_t)s;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--output-dir", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, USAGE);
      r->out_dir = v;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--threads", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, USAGE);
      int64_t t;
      if (!sc_cli_parse_i64(v, 1, 4096, &t))
        return sc_cli_usage_error("--threads expects an integer in [1, 4096], got '%s'", v);
      r->threads = (int)t;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--repeat", &missing)) ||
               (v = sc_cli_opt_value(argc, argv, &i, "--warmup", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, USAGE);
      bool rep = strncmp(a, "--repeat", 8) == 0;
      int64_t n;
      if (!sc_cli_parse_i64(v, rep ? 1 : 0, 1000000, &n))
        return sc_cli_usage_error("%s expects an integer in [%d, 1000000], got '%s'",
                                  rep ? "--repeat" : "--warmup", rep ? 1 : 0, v);
      *(rep ? &r->repeat : &r->warmup) = n;
      r->warmup_given |= !rep;
    } else if (strcmp(a, "--no-fuse") == 0) {
      r->no_fuse = true;
    } else if (a[0] == '-' && a[1] == '-' && (taken = sc_partition_args_take(&r->pc, argc, argv, &i, true)) != 0) {
      if (taken == 2) return 2;
      i--; /* it moved past what it took; the loop steps once more */
    } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
      r->quiet = true;
    } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
      r->verbose = true;
    } else {
      rest[(*n_rest)++] = argv[i];
    }
  }
  rest[*n_rest] = NULL;
  return 0;
}

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void fill_random(const sc_buffer *b, void *data, int64_t numel, uint64_t *state) {
  bool mask = b->name && strstr(b->name, "mask");
  for (int64_t i = 0; i < numel; i++) {
    uint64_t r = splitmix64(state);
    if (sc_dtype_is_float(b->dtype))
      sc_store_f64(b->dtype, data, i, (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    else if (b->dtype == SC_DTYPE_BOOL)
      sc_store_i64(b->dtype, data, i, (int64_t)(r >> 63));
    else
      sc_store_i64(b->dtype, data, i, mask ? 1 : (int64_t)(r % 100));
  }
}

/* An input of a narrow dtype (float8, float4, 4/2-bit integers) given as
 * its memory form (runtime/npy.h): every byte must be one of its values. */
static bool narrow_ok(const char *name, const char *file, sc_dtype t, const sc_npy *a) {
  int64_t n = 1, bad = 0;
  for (int32_t d = 0; d < a->rank; d++) n *= a->dims[d];
  if (sc_npy_check_narrow(t, a->data, n, &bad)) return true;
  fprintf(stderr, "shardc: error: input '%s' (%s): element %lld, %d, is not a %s value\n",
          name, file, (long long)bad, (int)((const int8_t *)a->data)[bad], sc_dtype_name(t));
  return false;
}

/* ---- output files ---- */

static void safe_name(const char *name, char *buf, size_t n) {
  size_t pos = 0;
  if (!name || !*name || name[0] == '.') buf[pos++] = '_';
  for (const char *c = name ? name : ""; *c && pos + 1 < n; c++) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-';
    buf[pos++] = ok ? *c : '_';
  }
  buf[pos] = 0;
}

/* "input 'NAME': FILE holds TYPE, the model expects TYPE" + hint on stderr;
 * returns 1. */
static int input_mismatch(const char *name, const char *file, const sc_npy *a, sc_dtype t,
                          int32_t rank, const int64_t *dims, const char *hint) {
  char want[256], got[256];
  sc_cli_format_type(t, rank, dims, want, sizeof want);
  sc_cli_format_type(a->dtype, a->rank, a->dims, got, sizeof got);
  fprintf(stderr, "shardc: error: input '%s': %s holds %s, the model expects %s%s\n", name, file,
          got, want, hint);
  return 1;
}

static void print_summary(const sc_tensor_view *v, const char *path) {
  char type[256];
  sc_cli_format_type(v->dtype, v->rank, v->dims, type, sizeof type);
  int64_t numel = 1;
  for (int32_t d = 0; d < v->rank; d++) numel *= v->dims[d];
  printf("%s %s [", v->name ? v->name : "?", type);
  int64_t shown = numel < 5 ? numel : 5;
  for (int64_t i = 0; i < shown; i++) {
    if (v->dtype == SC_DTYPE_BF16 || sc_dtype_is_float(v->dtype))
      printf("%s%.6g", i ? ", " : "", sc_load_f64(v->dtype, v->data, i));
    else
      printf("%s%lld", i ? ", " : "", (long long)sc_load_i64(v->dtype, v->data, i));
  }
  printf("%s] -> %s\n", numel > shown ? ", ..." : "", path);
}

/* Creates dir and its missing parents (mkdir -p); an existing directory
 * must be writable. Returns 0 or 1 after printing the error. */
/* Whether dir exists as a writable directory or could be created: its
 * first existing ancestor is a writable directory. Creates nothing (a
 * failed run leaves no folder behind). Returns 0 or 1 after printing. */
static int check_dir(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    fprintf(stderr, "shardc: error: %s: path too long\n", dir);
    return 1;
  }
  struct stat st;
  for (;;) {
    if (stat(path, &st) == 0) break;
    char *slash = strrchr(path, '/');
    while (slash && slash > path && slash[-1] == '/') slash--;
    if (!slash) {
      snprintf(path, sizeof path, ".");
    } else if (slash == path) {
      path[1] = 0;
    } else {
      *slash = 0;
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "shardc: error: %s: cannot create the output directory: %s is not a "
            "directory\n", dir, path);
    return 1;
  }
  if (access(path, W_OK | X_OK) != 0) {
    fprintf(stderr, "shardc: error: %s: cannot create the output directory: %s: %s\n", dir,
            path, strerror(errno));
    return 1;
  }
  return 0;
}

static int make_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      fprintf(stderr, "shardc: error: %s: not a directory\n", dir);
      return 1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
      fprintf(stderr, "shardc: error: %s: the output directory is not writable: %s\n", dir,
              strerror(errno));
      return 1;
    }
    return 0;
  }
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    fprintf(stderr, "shardc: error: %s: path too long\n", dir);
    return 1;
  }
  for (char *c = path + 1; *c; c++) { /* each parent, then dir itself */
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST) break;
    *c = '/';
  }
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "shardc: error: %s: cannot create the output directory: %s\n", dir,
            strerror(errno));
    return 1;
  }
  return 0;
}

/* The size of the MPI job this process was started in by mpirun/mpiexec
 * (Open MPI, MPICH/Hydra, PMIx launchers), or 1. */
static int64_t launcher_size(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  int64_t n;
  for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
    const char *v = getenv(vars[k]);
    if (v && sc_cli_parse_i64(v, 1, INT64_MAX, &n)) return n;
  }
  const char *rank = getenv("PMIX_RANK"); /* no size given: rank > 0 means more than one */
  return rank && sc_cli_parse_i64(rank, 1, INT64_MAX, &n) ? n + 1 : 1;
}

/* Checks that need no model (they create nothing): --comm mpi comes
 * with a mesh and mpirun with --comm mpi, the output directory exists or
 * can be created (it is created, parents too, when the outputs are
 * written). Returns 0 or an exit status after printing. */
static int check_run_args(const run_opts *r, const char *file) {
  bool mpi = r->pc.comm && strcmp(r->pc.comm, "mpi") == 0;
  bool nccl = r->pc.comm && strcmp(r->pc.comm, "nccl") == 0;
  int bad = sc_partition_comm_device_check(r->pc.comm, &r->dev);
  if (bad) return bad;
  if (sc_partition_comm_is_world(r->pc.comm) && !sc_partition_args_active(&r->pc) &&
      !sc_dist_bundle_is_dir(file))
    return sc_cli_usage_error("--comm %s needs --mesh AXES (or --plan FILE.json, or a "
                              "partitioned bundle): one rank has nothing to communicate",
                              r->pc.comm);
  int64_t n = launcher_size();
  if (!mpi && !nccl && n > 1)
    return sc_cli_usage_error("started by mpirun as one of %lld processes without --comm mpi: "
                              "each would run the whole model and write the same files; add "
                              "--comm mpi (with --mesh) to run one rank per process",
                              (long long)n);
  return check_dir(r->out_dir ? r->out_dir : ".");
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void print_help(void) {
  printf("usage: %s\n\n"
         "Compiles an ONNX model for the CPU (canonical passes, fusion, LLVM\n"
         "kernels, oneDNN matrix products, a static memory plan), runs it once\n"
         "and writes every graph output to DIR/<output name>.npy.\n\n"
         "  --dim NAME=V          bind symbolic dim NAME (repeatable; others get 1)\n"
         "  --input NAME=FILE     read input NAME from a .npy file (C order; its\n"
         "                        dtype and shape must match the model's)\n"
         "  --random-inputs SEED  make up the inputs not given with --input: floats\n"
         "                        uniform in [-1,1), integer inputs named *mask* all\n"
         "                        ones, other integers uniform in [0,100)\n"
         "  --output-dir DIR      where the .npy files go (default '.'; created,\n"
         "                        with its parents, before the model is read)\n"
         "  --threads N           worker threads (default: all cores)\n"
         SC_CLI_DEVICE_USAGE
         "  --no-fuse             one kernel per node (no fusion)\n"
         "  --quiet, -q           no summary on stdout\n"
         "  --verbose, -v         say on stderr where the kernels come from\n"
         "  --print-after=PASS    print the IR after PASS ('all'; 'program' for the\n"
         "                        compiled program) to stderr\n"
         "  --time-passes         per-pass wall time, JIT and run time on stderr\n"
         "  --repeat N            timing: after the first run, run W more times\n"
         "                        untimed, then N times timed; print 'compile: X ms'\n"
         "                        (model file to ready to run) and 'run: median X ms,\n"
         "                        min Y ms over N runs' on stderr\n"
         "  --warmup W            untimed runs before the timed ones (default 1: the\n"
         "                        first run; 0 times the first run too)\n"
         "partitioned runs: see the options below, and\n"
         "  -v                    also list what each rank allocated\n"
         "  --repeat N            also with --mesh: rank 0 times each run between two\n"
         "                        barriers of all ranks\n"
         "MODEL may also be an artifact of `shardc compile --mesh -o DIR`.\n\n",
         USAGE);
  sc_partition_args_help(stdout, false, true);
}

typedef struct run_state {
  sc_build *build;   /* when MODEL is a model file: owns p */
  sc_program *p;
  sc_bundle *bundle; /* when MODEL is a bundle directory: owns p */
  sc_session *s;
  sc_tensor_view *in, *out;
  void **in_data;   /* owned input data (npy or random), per program input */
  int32_t n_in_data;
} run_state;

static void run_state_free(run_state *st, run_opts *r) {
  sc_session_destroy(st->s);
  for (int32_t i = 0; i < st->n_in_data; i++) sc_free(st->in_data[i]);
  sc_free(st->in_data);
  sc_free(st->in);
  sc_free(st->out);
  sc_bundle_destroy(st->bundle);
  sc_build_destroy(st->build);
  for (int i = 0; i < r->n_in; i++) sc_free(r->in_buf[i]);
}

/* ---- specialisation (docs/runtime.md) ----
 * When a shape depends on the contents of a graph input (a Reshape shape, a
 * Slice start, a CumSum axis given as an input), compiling fails with
 * g->want_const naming it. If the user gave that input with --input, it
 * becomes a constant holding the file's data and compiling is retried from a
 * fresh import: the program is specialised to that value. The input's
 * --input stays accepted. Random inputs are not used this way (a made-up
 * shape is almost never a valid one). */

static bool is_frozen(const run_opts *r, const char *name) {
  for (int j = 0; j < r->n_frozen; j++)
    if (strcmp(r->in_name[r->frozen[j]], name) == 0) return true;
  return false;
}

/* The --input index (the last one for the name) of the input a failed
 * build wants constant, or -1. */
static int wanted_input(const run_opts *r, const char *name) {
  if (!name[0] || is_frozen(r, name)) return -1;
  for (int k = r->n_in - 1; k >= 0; k--)
    if (strcmp(r->in_name[k], name) == 0) return k;
  return -1;
}

/* Builds MODEL (one rank, or partitioned with r->pc): each failure that
 * wants the value of an input given with --input freezes that input (its
 * .npy becomes a constant: the driver's specialise step) and builds again.
 * Returns 0 with *out, or an exit status after printing the error. */
static int build_model(run_opts *r, const sc_cli_opts *o, sc_build_opts *bo, sc_build **out) {
  sc_frozen_input frozen[MAX_INPUT_ARGS];
  sc_npy npy[MAX_INPUT_ARGS];
  int n = 0, rc;
  char wanted[256];
  bo->wanted_input = wanted;
  bo->wanted_input_size = sizeof wanted;
  for (;;) {
    bo->frozen = frozen;
    bo->n_frozen = n;
    sc_diag d = {0};
    sc_diag_clear(&d);
    rc = sc_partition_args_build(&r->pc, o, bo, out, &d);
    if (rc != -1) break;
    int k = wanted_input(r, wanted);
    if (k < 0 || n == MAX_INPUT_ARGS) {
      rc = sc_cli_report(&d, o->file);
      break;
    }
    fprintf(stderr, "shardc: note: input '%s' determines shapes: compiled for its given value\n",
            r->in_name[k]);
    r->frozen[r->n_frozen++] = k;
    sc_diag_clear(&d);
    if (sc_npy_read(r->in_file[k], &npy[n], &d) != SC_OK) {
      fprintf(stderr, "shardc: error: input '%s': %s\n", r->in_name[k], d.msg);
      rc = 1;
      break;
    }
    sc_frozen_input *f = &frozen[n];
    *f = (sc_frozen_input){.name = r->in_name[k], .dtype = npy[n].dtype, .rank = npy[n].rank,
                           .data = npy[n].data, .bytes = (uint64_t)npy[n].bytes};
    memcpy(f->dims, npy[n].dims, sizeof f->dims);
    n++;
  }
  for (int i = 0; i < n; i++) sc_npy_free(&npy[i]);
  bo->frozen = NULL;
  bo->n_frozen = 0;
  bo->wanted_input = NULL;
  return rc;
}

/* Reads or makes up every program input. Returns an exit status. */
static int gather_inputs(run_state *st, run_opts *r, const char *model) {
  const sc_program *p = st->p;
  /* every --input must name an input */
  for (int k = 0; k < r->n_in; k++) {
    bool found = is_frozen(r, r->in_name[k]);
    for (int32_t i = 0; i < p->n_inputs && !found; i++)
      found = strcmp(p->buffers[p->inputs[i]].name, r->in_name[k]) == 0;
    if (!found) {
      char names[1024] = "";
      size_t pos = 0;
      for (int32_t i = 0; i < p->n_inputs; i++) {
        int w = snprintf(names + pos, sizeof names - pos, "%s%s", i ? ", " : "",
                         p->buffers[p->inputs[i]].name);
        if (w < 0 || (size_t)w >= sizeof names - pos) break;
        pos += (size_t)w;
      }
      return sc_cli_usage_error("%s: --input %s: the model has no input named '%s' "
                                "(inputs: %s)", model, r->in_name[k], r->in_name[k],
                                p->n_inputs ? names : "none");
    }
  }
  char missing[1024] = "";
  size_t mpos = 0;
  int n_missing = 0;
  uint64_t rng = r->seed;
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    sc_tensor_view *v = &st->in[i];
    v->name = b->name;
    v->dtype = b->dtype;
    v->rank = b->rank;
    memcpy(v->dims, b->dims, sizeof v->dims);
    int k = r->n_in - 1; /* each name at most once (split_args) */
    while (k >= 0 && strcmp(r->in_name[k], b->name) != 0) k--;
    if (k >= 0) {
      sc_npy a;
      sc_diag d = {0};
      sc_diag_clear(&d);
      if (sc_npy_read(r->in_file[k], &a, &d) != SC_OK) {
        fprintf(stderr, "shardc: error: input '%s': %s\n", b->name, d.msg);
        return 1;
      }
      st->in_data[i] = a.data;
      bool dtype_ok = sc_dtype_holds(a.dtype, b->dtype);
      bool shape_ok = a.rank == b->rank;
      for (int32_t dd = 0; shape_ok && dd < a.rank; dd++) shape_ok = a.dims[dd] == b->dims[dd];
      if (!dtype_ok || !shape_ok)
        return input_mismatch(b->name, r->in_file[k], &a, b->dtype, b->rank, b->dims,
                              shape_ok ? "" : " (bind symbolic dims with --dim NAME=V)");
      if (!narrow_ok(b->name, r->in_file[k], b->dtype, &a)) return 1;
      v->data = a.data;
      continue;
    }
    if (!r->random) {
      int w = snprintf(missing + mpos, sizeof missing - mpos, "%s%s", n_missing ? ", " : "",
                       b->name);
      if (w > 0 && (size_t)w < sizeof missing - mpos) mpos += (size_t)w;
      n_missing++;
      continue;
    }
    unsigned es = sc_dtype_size(b->dtype);
    int64_t numel = es ? b->bytes / es : 0;
    st->in_data[i] = sc_malloc(b->bytes > 0 ? (size_t)b->bytes : 1);
    if (!st->in_data[i]) {
      fprintf(stderr, "shardc: error: out of memory for input '%s'\n", b->name);
      return 1;
    }
    fill_random(b, st->in_data[i], numel, &rng);
    v->data = st->in_data[i];
  }
  if (n_missing)
    return sc_cli_usage_error("%s: missing input%s: %s (give --input NAME=FILE.npy or "
                              "--random-inputs SEED)", model, n_missing > 1 ? "s" : "",
                              missing);
  return 0;
}

/* Writes the n outputs v (those without data belong to another rank
 * under mpi and are skipped) as DIR/<name>.npy, all in one commit (every
 * old file or every new one, runtime/npy.h), each summarised on stdout
 * unless --quiet. Returns 0 or 1 after printing the error. */
static int write_output_files(const run_opts *r, const sc_tensor_view *v, int32_t n) {
  const char *dir = r->out_dir ? r->out_dir : ".";
  if (make_dir(dir)) return 1;
  char(*names)[256] = sc_calloc((size_t)n + 1, sizeof *names);
  char(*paths)[4096] = sc_calloc((size_t)n + 1, sizeof *paths);
  const char **ptr = sc_calloc((size_t)n + 1, sizeof *ptr);
  sc_tensor_view *mine = sc_calloc((size_t)n + 1, sizeof *mine);
  int rc = names && paths && ptr && mine ? 0 : 1;
  int32_t m = 0;
  for (int32_t i = 0; rc == 0 && i < n; i++) {
    if (!v[i].data) continue;
    safe_name(v[i].name, names[m], sizeof names[m] - 16);
    for (int32_t j = 0; j < m; j++) /* two outputs of one name: the later one numbered */
      if (strcmp(names[m], names[j]) == 0) {
        size_t len = strlen(names[m]);
        snprintf(names[m] + len, sizeof names[m] - len, "_%d", (int)i);
        break;
      }
    snprintf(paths[m], sizeof paths[m], "%s/%s.npy", dir, names[m]);
    ptr[m] = paths[m];
    mine[m++] = v[i];
  }
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (rc == 0 && sc_npy_write_all(ptr, mine, m, &d) != SC_OK) {
    fprintf(stderr, "shardc: error: %s\n", d.msg);
    rc = 1;
  }
  for (int32_t i = 0; rc == 0 && !r->quiet && i < m; i++) print_summary(&mine[i], paths[i]);
  sc_free(names);
  sc_free(paths);
  sc_free(ptr);
  sc_free(mine);
  return rc;
}

static int write_outputs(run_state *st, const run_opts *r) {
  return write_output_files(r, st->out, st->p->n_outputs);
}

/* MODEL is a bundle (`shardc compile -o DIR`, docs/bundle.md): its program
 * instead of import + compile. A cpu bundle's kernels run from its
 * kernels.o, which sc_bundle_load linked (st->bundle->kernels); a cuda
 * bundle's on the cuda device (the default for it) from its PTX, or its
 * kernels.cu on the emulated GPU. */
static sc_status load_bundle(run_state *st, const char *dir, sc_diag *d) {
  sc_status s = sc_bundle_load(dir, &st->bundle, d);
  if (s == SC_OK) s = sc_bundle_check_kind(st->bundle, false, d);
  if (s == SC_OK) st->p = st->bundle->program;
  return s;
}

/* --verbose: the program's memory on the device, planned and allocated
 * line by line, then the process's resident set after prepare (the model
 * loaded, the kernels compiled: before the arena), after the run, and at
 * its peak, which should be the larger of the peak after prepare (the
 * import's, the JIT's) and the resident set after prepare + the plan's
 * total (models.test_memory checks it). */
static void print_memory(const run_state *st, bool cpu) {
  sc_device_memory planned, allocated;
  int64_t before, peak_before, rss, peak, constants = 0;
  sc_session_memory(st->s, &planned, &allocated, &before, &peak_before);
  for (int32_t i = 0; i < st->p->n_buffers; i++)
    if (st->p->buffers[i].kind == SC_BUF_CONST) constants += st->p->buffers[i].bytes;
  if (cpu)
    fprintf(stderr, "memory (on a cpu device: %s GEMMs, %d threads):\n",
            sc_gemm_engine_name(sc_gemm_engine_get()), sc_session_threads(st->s));
  else
    fprintf(stderr, "memory (on the cuda device; the context and NCCL's buffers are the "
            "driver's and NCCL's):\n");
  sc_cli_print_memory(stderr, "  ", &planned, &allocated, "constants", constants,
                      "weights and folded values, mapped from the model");
  if (!sc_process_memory(&rss, &peak) || before < 0) return;
  int64_t total = sc_device_memory_total(&planned);
  int64_t expect = before + total > peak_before ? before + total : peak_before;
  fprintf(stderr, "process: resident %lld bytes after prepare (peak %lld), %lld after the run, "
          "peak %lld; expected peak max(peak after prepare, resident after prepare + planned "
          "total but constants) = %lld, measured - expected = %lld bytes\n",
          (long long)before, (long long)peak_before, (long long)rss, (long long)peak,
          (long long)expect, (long long)(peak - expect));
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --repeat N [--warmup W]: the first run (first_ms) counts as the first of
 * W warm-up runs (W = 0: as the first timed run); then N timed runs of the
 * same inputs. Prints the compile time (model file to session ready) and
 * the median and minimum run time on stderr. Non-zero on a failed run. */
static int repeat_runs(run_state *st, const run_opts *r, double compile_ms, double first_ms,
                       sc_diag *d) {
  int64_t warm = r->warmup_given ? r->warmup : 1, n = 0;
  double *t = sc_calloc((size_t)r->repeat, sizeof *t);
  if (!t) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory") != SC_OK;
  if (warm == 0) t[n++] = first_ms;
  for (int64_t i = 1; i < warm || n < r->repeat; i++) {
    double a = now_ms();
    sc_status s = sc_session_run(st->s, st->in, st->p->n_inputs, st->out, st->p->n_outputs, d);
    if (s != SC_OK) {
      sc_free(t);
      return 1;
    }
    if (i >= warm) t[n++] = now_ms() - a;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  fprintf(stderr, "compile: %.3f ms\nrun: median %.3f ms, min %.3f ms over %lld runs (%d threads)\n",
          compile_ms, med, t[0], (long long)n, sc_session_threads(st->s));
  sc_free(t);
  return 0;
}

/* ---- distributed runs (--mesh / --plan, or a partitioned bundle;
 * docs/partitioning.md) ----
 * The distributed program (built, or loaded from the bundle) runs on every
 * rank: threads (--comm local) or the processes of an mpirun (--comm mpi),
 * each writing the outputs it owns. Inputs are the GLOBAL ones: with
 * microbatches, dim 0 is the full batch (the programs are compiled for one
 * microbatch). Random inputs are drawn like an unpartitioned run's, in
 * input order, so both runs see the same numbers. */
/* Reads (--input) or makes up (--random-inputs) every input of dp as a
 * GLOBAL input: dim 0 times the microbatch count. in[i] gets the view,
 * data[i] the owned buffer (freed by the caller, also on error). Returns an
 * exit status after printing the error. */
static int read_global_inputs(const run_opts *r, const sc_dist_program *dp, const char *file,
                              sc_tensor_view *in, void **data) {
  int64_t m = dp->schedule.microbatches;
  uint64_t rng = r->seed;
  sc_diag d = {0};
  sc_diag_clear(&d);
  for (int k = 0; k < r->n_in; k++) { /* every --input names an input */
    bool found = is_frozen(r, r->in_name[k]);
    for (int32_t i = 0; i < dp->n_inputs && !found; i++)
      found = strcmp(dp->inputs[i].name, r->in_name[k]) == 0;
    if (!found)
      return sc_cli_usage_error("%s: --input %s: the model has no input named '%s'", file,
                                r->in_name[k], r->in_name[k]);
  }
  for (int32_t i = 0; i < dp->n_inputs; i++) {
    const sc_dist_value *v = &dp->inputs[i];
    sc_tensor_view *t = &in[i];
    *t = (sc_tensor_view){.name = v->name, .dtype = v->dtype, .rank = v->rank};
    memcpy(t->dims, v->dims, sizeof t->dims);
    if (v->rank > 0) t->dims[0] *= m;
    int64_t numel = 1;
    for (int32_t k = 0; k < t->rank; k++) numel *= t->dims[k];
    int k = r->n_in - 1;
    while (k >= 0 && strcmp(r->in_name[k], v->name) != 0) k--;
    if (k >= 0) {
      sc_npy a;
      if (sc_npy_read(r->in_file[k], &a, &d) != SC_OK) {
        fprintf(stderr, "shardc: error: input '%s': %s\n", v->name, d.msg);
        return 1;
      }
      data[i] = t->data = a.data;
      bool ok = sc_dtype_holds(a.dtype, t->dtype) && a.rank == t->rank;
      for (int32_t dd = 0; ok && dd < a.rank; dd++) ok = a.dims[dd] == t->dims[dd];
      if (!ok) return input_mismatch(v->name, r->in_file[k], &a, t->dtype, t->rank, t->dims, "");
      if (!narrow_ok(v->name, r->in_file[k], t->dtype, &a)) return 1;
      continue;
    }
    if (!r->random)
      return sc_cli_usage_error("%s: missing input %s (give --input NAME=FILE.npy or "
                                "--random-inputs SEED)", file, v->name);
    int64_t bytes = numel * (int64_t)sc_dtype_size(v->dtype);
    data[i] = t->data = sc_malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!data[i]) return 1;
    sc_buffer fake = {.name = v->name, .dtype = v->dtype};
    fill_random(&fake, data[i], numel, &rng);
  }
  return 0;
}

/* The outputs this process holds as DIR/<name>.npy (write_output_files). */
static int write_dist_outputs(const run_opts *r, const sc_dist_output *out, int32_t no) {
  sc_tensor_view *v = sc_calloc((size_t)no + 1, sizeof *v);
  if (!v) return 1;
  for (int32_t i = 0; i < no; i++) {
    v[i] = (sc_tensor_view){out[i].name, out[i].dtype, out[i].rank, {0}, out[i].data};
    memcpy(v[i].dims, out[i].dims, sizeof v[i].dims);
  }
  int rc = write_output_files(r, v, no);
  sc_free(v);
  return rc;
}

/* Runs dp on every rank (or this process's rank under --comm mpi) and
 * writes the outputs this process owns. build_ms: what building it took
 * (--time-passes), or a negative number for a loaded bundle. */
static int run_dist(run_opts *r, const sc_cli_opts *o, const sc_dist_program *dp,
                    double build_ms) {
  int rc = 0;
  sc_diag d = {0};
  sc_diag_clear(&d);
  int32_t ni = dp->n_inputs, no = dp->n_outputs;
  sc_tensor_view *in = sc_calloc((size_t)ni + 1, sizeof *in);
  sc_dist_output *out = sc_calloc((size_t)no + 1, sizeof *out);
  void **data = sc_calloc((size_t)ni + 1, sizeof *data);
  if (!in || !out || !data) rc = 1;
  if (!rc) rc = read_global_inputs(r, dp, o->file, in, data);
  sc_dist_opts dop;
  sc_dist_opts_init(&dop);
  dop.threads = r->threads;
  dop.device = r->dev;
  dop.device.comm_on_device = sc_partition_comm_on_device(r->pc.comm);
  double *times = NULL;
  if (!rc && r->repeat > 0) { /* timing: as for one rank (--warmup counts the first run) */
    dop.warmup = (int)(r->warmup_given ? r->warmup : 1);
    dop.repeat = (int)r->repeat;
    times = sc_calloc((size_t)r->repeat, sizeof *times);
    if (!times) rc = 1;
    dop.times_ms = times;
  }
  double t2 = now_ms(), t3 = t2;
  sc_comm *world = NULL;
  sc_dist_rank_stats *stats = NULL;
  int64_t n_ranks = dp->mesh.n_ranks;
  if (!rc) {
    sc_status s;
    if (sc_partition_comm_is_world(r->pc.comm)) {
      s = sc_partition_world(r->pc.comm, dp, NULL, &world, &d);
      if (s == SC_OK) s = sc_partition_world_check(r->pc.comm, world, n_ranks, &d);
      if (s == SC_OK) s = sc_dist_run_rank(dp, &dop, world, in, ni, out, no, NULL, &d);
    } else {
      stats = sc_calloc((size_t)n_ranks, sizeof *stats);
      s = stats ? sc_dist_run_local(dp, &dop, in, ni, out, no, stats, &d)
                : sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    t3 = now_ms();
    if (s != SC_OK) rc = sc_cli_report(&d, o->file);
  }
  /* --verbose: what each rank allocated, comparable with `shardc plan`'s
   * per-rank memory (replicated constants are mapped from the model, not
   * copied, but the plan counts them: so they are listed) */
  for (int64_t k = 0; !rc && stats && r->verbose && k < n_ranks; k++) {
    const sc_program *sp = dp->stages[stats[k].stage].program;
    int64_t rep = 0;
    for (int32_t i = 0; i < sp->n_buffers; i++)
      if (sp->buffers[i].kind == SC_BUF_CONST && sp->buffers[i].data) rep += sp->buffers[i].bytes;
    fprintf(stderr, "rank %lld (stage %d): arena %lld bytes, weight shards %lld bytes, "
            "replicated constants %lld bytes, total %lld bytes\n", (long long)k,
            (int)stats[k].stage, (long long)stats[k].arena_bytes,
            (long long)stats[k].weight_bytes, (long long)rep,
            (long long)(stats[k].arena_bytes + stats[k].weight_bytes + rep));
  }
  sc_free(stats);
  if (!rc && o->time_passes && build_ms >= 0)
    fprintf(stderr, "partition+compile %.3f ms, run %.3f ms on %lld ranks\n", build_ms,
            t3 - t2, (long long)n_ranks);
  if (!rc && times && (!world || sc_comm_rank(world) == 0)) {
    qsort(times, (size_t)r->repeat, sizeof *times, cmp_double);
    int64_t n = r->repeat;
    double med = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    char th[64];
    if (dop.threads > 0) snprintf(th, sizeof th, "%d threads each", dop.threads);
    else snprintf(th, sizeof th, "threads: cores / ranks");
    fprintf(stderr, "run: median %.3f ms, min %.3f ms over %lld runs (%lld ranks, %s)\n", med,
            times[0], (long long)n, (long long)n_ranks, th);
  }
  sc_free(times);
  if (!rc) rc = write_dist_outputs(r, out, no);
  fflush(stdout);
  for (int32_t i = 0; out && i < no; i++) sc_free(out[i].data);
  for (int32_t i = 0; data && i < ni; i++) sc_free(data[i]);
  sc_free(in);
  sc_free(out);
  sc_free(data);
  sc_comm_destroy(world);
  return rc;
}

/* --mesh / --plan: build, then run every rank. */
static int run_partitioned(run_opts *r, sc_cli_opts *o) {
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, &r->pc);
  bs.compile.fuse = !r->no_fuse;
  bs.compile.quiet = true;
  if (!sc_device_choice_is_cpu(&r->dev)) bs.compile.workspace_bytes = SC_GEMM_WORKSPACE_BYTES;
  bs.build.no_fuse_attention = !sc_device_choice_runs_attention(&r->dev);
  sc_build *b = NULL;
  double t0 = now_ms();
  int rc = build_model(r, o, &bs.build, &b);
  if (rc) return rc;
  if (sc_cli_launcher_rank(false) == 0) /* once, not once per process */
    sc_partition_print_fallbacks(b->part, stderr, "shardc: warning: ");
  rc = run_dist(r, o, b->program, now_ms() - t0);
  sc_build_destroy(b);
  return rc;
}

/* A partitioned bundle (runtime/dist_load.h): the same run, its program
 * loaded instead of built. */
static int run_dist_bundle(run_opts *r, sc_cli_opts *o) {
  if (o->n_dims || r->repeat > 0)
    return sc_cli_usage_error("%s: a partitioned bundle takes no --dim or --repeat", o->file);
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_dist_program *dp = NULL;
  if (sc_dist_program_load(o->file, &dp, &d) != SC_OK ||
      sc_bundle_kind_check(dp->train != NULL, false, &d) != SC_OK) {
    sc_dist_program_destroy(dp);
    return sc_cli_report(&d, o->file);
  }
  int rc = run_dist(r, o, dp, -1);
  sc_dist_program_destroy(dp);
  return rc;
}

int sc_cmd_run(int argc, char **argv) {
  run_opts r;
  memset(&r, 0, sizeof r);
  sc_partition_args_init(&r.pc);
  char *rest[MAX_ARGS];
  int n_rest = 0;
  run_state st;
  memset(&st, 0, sizeof st);
  int rc = split_args(argc, argv, &r, rest, &n_rest);
  sc_cli_opts o;
  if (!rc)
    rc = sc_cli_parse(n_rest, rest, SC_CLI_DIM | SC_CLI_PRINT_AFTER | SC_CLI_TIME_PASSES,
                      USAGE, &o);
  if (rc) {
    run_state_free(&st, &r);
    return rc;
  }
  if (o.help) {
    print_help();
    run_state_free(&st, &r);
    return 0;
  }
  if ((rc = check_run_args(&r, o.file)) != 0) {
    run_state_free(&st, &r);
    return rc;
  }
  if (sc_dist_bundle_is_dir(o.file)) {
    if (sc_partition_args_active(&r.pc)) {
      run_state_free(&st, &r);
      return sc_cli_usage_error("%s: a partitioned bundle's mesh is fixed (no --mesh/--plan)",
                                o.file);
    }
    int rc2 = run_dist_bundle(&r, &o);
    run_state_free(&st, &r); /* the --input names */
    return rc2;
  }
  struct stat sb;
  if (!sc_bundle_is_dir(o.file) && stat(o.file, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "shardc: error: %s: not a shardc bundle (no manifest.json / "
            "partition.json)\n", o.file);
    run_state_free(&st, &r);
    return 1;
  }
  if (sc_partition_args_active(&r.pc)) {
    if (sc_bundle_is_dir(o.file)) {
      run_state_free(&st, &r);
      return sc_cli_usage_error("%s: a one-rank bundle cannot be partitioned; compile the "
                                "model with --mesh instead", o.file);
    }
    /* --mesh auto: the planner chooses, then the run is --mesh's */
    if (r.pc.auto_plan && (rc = sc_plan_auto_resolve(&r.pc, &o, NULL)) != 0) {
      run_state_free(&st, &r);
      return rc;
    }
    int rc2 = run_partitioned(&r, &o);
    run_state_free(&st, &r); /* the --input names */
    return rc2;
  }

  double t_file = now_ms(); /* --repeat: "compile" is model file to ready to run */
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status s = SC_OK;
  if (sc_bundle_is_dir(o.file)) {
    if (o.n_dims) {
      run_state_free(&st, &r);
      return sc_cli_usage_error("%s: a bundle's dims are bound when it is compiled (no --dim)",
                                o.file);
    }
    s = load_bundle(&st, o.file, &d);
  } else {
    sc_build_setup bs;
    sc_build_setup_init(&bs, &o, &r.pc);
    bs.compile.fuse = !r.no_fuse;
    if (!sc_device_choice_is_cpu(&r.dev)) bs.compile.workspace_bytes = SC_GEMM_WORKSPACE_BYTES;
    bs.build.no_fuse_attention = !sc_device_choice_runs_attention(&r.dev);
    rc = build_model(&r, &o, &bs.build, &st.build);
    if (rc) {
      run_state_free(&st, &r);
      return rc;
    }
    st.p = st.build->program->stages[0].program;
  }
  double t0 = t_file;
  double t1 = now_ms();
  if (s == SC_OK) {
    int32_t ni = st.p->n_inputs > 0 ? st.p->n_inputs : 1;
    int32_t no = st.p->n_outputs > 0 ? st.p->n_outputs : 1;
    st.in = sc_calloc((size_t)ni, sizeof *st.in);
    st.out = sc_calloc((size_t)no, sizeof *st.out);
    st.in_data = sc_calloc((size_t)ni, sizeof *st.in_data);
    st.n_in_data = st.p->n_inputs;
    if (!st.in || !st.out || !st.in_data) {
      st.n_in_data = 0;
      s = sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    }
  }
  if (s != SC_OK) {
    rc = sc_cli_report(&d, o.file);
    run_state_free(&st, &r);
    return rc;
  }
  rc = gather_inputs(&st, &r, o.file);
  if (rc) {
    run_state_free(&st, &r);
    return rc;
  }

  sc_session_opts so;
  sc_session_opts_init(&so);
  so.threads = r.threads;
  so.device = r.dev;
  if (st.bundle) so.cpu_module = st.bundle->kernels;
  if (st.bundle && strcmp(st.bundle->target, "cuda") == 0) {
    if (!so.device.name) so.device.name = "cuda";
    so.cuda = sc_bundle_cuda_code(st.bundle);
  }
  if (r.verbose) {
    if (st.bundle && strcmp(st.bundle->target, "cuda") == 0)
      fprintf(stderr, "shardc: note: kernels: the bundle's CUDA code (%d kernels; PTX for %d "
              "architectures)\n", (int)st.p->n_kernels, (int)st.bundle->n_archs);
    else if (st.bundle)
      fprintf(stderr, "shardc: note: kernels: loaded from kernels.o (%d kernels, compiled for "
              "CPU '%s')\n", (int)st.p->n_kernels, st.bundle->cpu ? st.bundle->cpu : "?");
    else
      fprintf(stderr, "shardc: note: kernels: JIT-compiled from the kernel IR (%d kernels)\n",
              (int)st.p->n_kernels);
  }
  s = sc_session_create(st.p, &so, &st.s, &d);
  double t2 = now_ms();
  if (s == SC_OK)
    s = sc_session_run(st.s, st.in, st.p->n_inputs, st.out, st.p->n_outputs, &d);
  double t3 = now_ms();
  if (s != SC_OK) {
    rc = sc_cli_report(&d, o.file);
    run_state_free(&st, &r);
    return rc;
  }
  if (o.time_passes)
    fprintf(stderr,
            "compile %.3f ms (passes, lowering, memplan), session %.3f ms (JIT %.3f ms), "
            "run %.3f ms on %d threads, arena %lld bytes\n",
            t1 - t0, t2 - t1, sc_session_compile_seconds(st.s) * 1e3, t3 - t2,
            sc_session_threads(st.s), (long long)sc_session_arena_bytes(st.s));
  if (r.verbose) print_memory(&st, sc_device_choice_is_cpu(&r.dev));
  if (r.repeat > 0 && (rc = repeat_runs(&st, &r, t2 - t_file, t3 - t2, &d)) != 0) {
    run_state_free(&st, &r);
    return sc_cli_report(&d, o.file);
  }
  rc = write_outputs(&st, &r);
  fflush(stdout);
  run_state_free(&st, &r);
  return rc;
}
