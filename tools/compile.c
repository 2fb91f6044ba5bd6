/* compile.c — `shardc compile MODEL --target cpu|cuda -o OUT`: builds the
 * model (driver/driver.h: import, passes, codegen) and writes the bundle
 * (codegen/bundle.h, docs/bundle.md); or, with --emit=kir|llvm|cuda,
 * prints the generated code on stdout instead (-o then optional: when given
 * too, the bundle is written as well).
 *
 * Its own options (--target, -o, --gpu-arch, --emit) are taken out of argv
 * first; the rest go to the shared parser (cli.h). The build stays alive
 * until the bundle is written: CONST data is borrowed from its graph.
 *
 * With --mesh or --plan (partition_args.h's options, --comm excepted) the
 * model is partitioned and OUT becomes a partitioned bundle: partition.json,
 * one stage bundle per stage and one weight file per rank
 * (codegen/dist_bundle.h).
 *
 * With --train (and the step's options of train_args.h, shared with
 * `shardc train`) the model becomes its training step and OUT a
 * training bundle: the step's program and kernels.o (--target cuda: its
 * CUDA C, PTX and a CUBIN per --gpu-arch sm_NN, compiled here by NVRTC,
 * so that the GPU that trains it compiles nothing), params.bin (the
 * initial parameters) and training.json (driver/train_bundle.h), which
 * `shardc train OUT` runs; with --mesh too, a partitioned training bundle
 * (the partitioned bundle plus params.bin and training.json of the whole
 * step, codegen/dist_bundle.h). */
#include <stdio.h>
#include <string.h>

#include "codegen/bundle.h"
#include "codegen/cpu/cpu.h"
#include "codegen/dist_bundle.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "driver/train_bundle.h"
#include "tools/partition_args.h"
#include "tools/plan_auto.h"
#include "tools/train_args.h"
#if SHARDC_HAVE_CUDA
#include "codegen/cuda/cuda.h"
#endif

static const char *const USAGE =
    "shardc compile MODEL.onnx [--target cpu|cuda] -o OUT [--dim NAME=V]...\n"
    "                         [--gpu-arch sm_80,sm_90] [--emit=kir|llvm|cuda]\n"
    "                         [--print-after=PASS] [--time-passes]\n"
    "                         [--mesh SPEC | --plan FILE.json] [--microbatches M] ...\n"
    "       shardc compile MODEL.onnx --train -o OUT [--dim NAME=V]... [--loss KIND]\n"
    "                         [--optimizer sgd|adamw] ... (the options of shardc train\n"
    "                         that shape the step)";

typedef struct compile_opts {
  const char *target; /* "cpu" (default) or "cuda" */
  const char *out;
  const char *archs;
  const char *emit;   /* NULL, "kir", "llvm", "cuda" */
  sc_partition_args pa; /* --mesh and the other partition options */
  bool train;         /* --train: a training bundle */
  sc_train_args ta;   /* the training step's options */
} compile_opts;

/* "--name=value" / "--name value" (or a short alias); advances *i. Returns
 * 1 when matched, 0 when not, 2 when the value is missing. */
static int take(int argc, char **argv, int *i, const char *name, const char *alias,
                const char **out) {
  const char *names[2] = {name, alias};
  for (int k = 0; k < 2; k++) {
    bool missing = false;
    const char *v = names[k] ? sc_cli_opt_value(argc, argv, i, names[k], &missing) : NULL;
    if (!v) continue;
    if (missing) return 2;
    *out = v;
    return 1;
  }
  return 0;
}

/* Removes compile's own options from argv (in place); returns the new argc,
 * or -1 after printing a usage error. */
static int split_args(int argc, char **argv, compile_opts *co) {
  int n = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) { /* the rest are files */
      for (; i < argc; i++) argv[n++] = argv[i];
      break;
    }
    const char *v = NULL;
    int r = 0;
    if ((r = take(argc, argv, &i, "--target", NULL, &v)) == 1) co->target = v;
    else if (r == 0 && (r = take(argc, argv, &i, "--output", "-o", &v)) == 1) co->out = v;
    else if (r == 0 && (r = take(argc, argv, &i, "--gpu-arch", NULL, &v)) == 1) co->archs = v;
    else if (r == 0 && (r = take(argc, argv, &i, "--emit", NULL, &v)) == 1) co->emit = v;
    if (r == 0 && strcmp(argv[i], "--train") == 0) {
      co->train = true;
      continue;
    }
    if (r == 0 && strncmp(argv[i], "--", 2) == 0) {
      int j = i;
      int t = sc_partition_args_take(&co->pa, argc, argv, &j, false);
      if (t == 0) t = sc_train_args_take(&co->ta, argc, argv, &j);
      if (t == 2) return -1;
      if (t == 1) {
        i = j - 1; /* it moved past what it took; the loop steps once more */
        continue;
      }
    }
    if (r == 2) {
      sc_cli_usage_error("option '%s' needs a value\nusage: %s", argv[i], USAGE);
      return -1;
    }
    if (r == 0) argv[n++] = argv[i];
  }
  return n;
}

static int emit_code(const sc_program *p, const compile_opts *co, const char *file) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = SC_OK;
  if (strcmp(co->emit, "kir") == 0) {
    sc_program_print(p, stdout); /* buffers, steps, then every kernel (kir_print) */
  } else if (strcmp(co->emit, "llvm") == 0) {
    sc_cpu_opts o;
    sc_cpu_opts_init(&o);
    st = sc_cpu_emit_llvm_ir(p, &o, stdout, &d);
  } else {
#if SHARDC_HAVE_CUDA
    char *src = NULL;
    st = sc_cuda_emit_source(p, &src, &d);
    if (st == SC_OK) fputs(src, stdout);
    sc_free(src);
#else
    st = sc_diag_set(&d, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "--emit=cuda: this shardc was built without NVRTC");
#endif
  }
  fflush(stdout);
  return st == SC_OK ? 0 : sc_cli_report(&d, file);
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* --train: the step's options only with it; a cuda training bundle has
 * its CUBINs too (nothing compiled where it trains), one rank. */
static int check_train(compile_opts *co, sc_bundle_opts *bo) {
  if (!co->train) {
    if (co->ta.first) return sc_cli_usage_error("%s needs --train", co->ta.first);
    return 0;
  }
  bo->cubins = bo->target == SC_BUNDLE_CUDA;
  co->ta.budget_for_search = co->pa.auto_plan;
  return sc_train_args_finish(&co->ta);
}

int sc_cmd_compile(int argc, char **argv) {
  compile_opts co = {.target = "cpu"};
  sc_partition_args_init(&co.pa);
  sc_train_args_init(&co.ta);
  int n = split_args(argc, argv, &co);
  if (n < 0) return 2;
  sc_cli_opts o;
  int rc = sc_cli_parse(n, argv, SC_CLI_DIM | SC_CLI_PRINT_AFTER | SC_CLI_TIME_PASSES, USAGE, &o);
  if (rc) return rc;
  if (o.help) {
    printf("usage: %s\n\n"
           "Compiles an ONNX model into a bundle directory OUT (docs/bundle.md):\n"
           "manifest.json, program.json, weights.bin and the target's code (cpu:\n"
           "kernels.o; cuda: kernels.cu and kernels.<arch>.ptx). `shardc run OUT`\n"
           "runs a cpu bundle.\n\n"
           "  --target cpu|cuda   code to generate (default cpu)\n"
           "  -o, --output OUT    the bundle directory (created if missing)\n"
           "  --dim NAME=V        bind symbolic dim NAME (repeatable; others get 1)\n"
           "  --gpu-arch LIST     cuda architectures (default " "sm_80,sm_90" ")\n"
           "  --emit=kir|llvm|cuda  print the program and kernels, the LLVM IR or\n"
           "                      the CUDA C on stdout (-o then optional)\n"
           "  --print-after=PASS  print the IR after PASS (or 'all') to stderr\n"
           "  --time-passes       per-pass wall time on stderr\n"
           "  --mesh SPEC, --plan FILE.json, --microbatches M, ...\n"
           "                      partition the model (options of `shardc run --mesh`):\n"
           "                      OUT gets partition.json, stage<k>/ bundles and\n"
           "                      weights/rank<r>.bin (docs/bundle.md); `shardc run OUT`\n"
           "                      runs it (--comm mpi under mpirun)\n"
           "  --train             compile the training step (loss, autodiff, optimizer;\n"
           "                      cpu, or cuda with a CUBIN per --gpu-arch sm_NN; with\n"
           "                      --mesh, partitioned, cpu) into a training bundle: OUT also gets\n"
           "                      params.bin and training.json; `shardc train OUT`\n"
           "                      trains it. The step's options, as shardc train's:\n",
           USAGE);
    sc_train_args_help(stdout);
    return 0;
  }
  sc_bundle_opts bo;
  sc_bundle_opts_init(&bo);
  if (strcmp(co.target, "cpu") == 0) bo.target = SC_BUNDLE_CPU;
  else if (strcmp(co.target, "cuda") == 0) bo.target = SC_BUNDLE_CUDA;
  else return sc_cli_usage_error("--target must be cpu or cuda, got '%s'", co.target);
  if (co.archs && bo.target != SC_BUNDLE_CUDA)
    return sc_cli_usage_error("--gpu-arch needs --target cuda");
  if (co.emit && strcmp(co.emit, "kir") != 0 && strcmp(co.emit, "llvm") != 0 &&
      strcmp(co.emit, "cuda") != 0)
    return sc_cli_usage_error("--emit must be kir, llvm or cuda, got '%s'", co.emit);
  if (!co.emit && !co.out) return sc_cli_usage_error("no output (-o OUT)\nusage: %s", USAGE);
  bo.archs = co.archs;
  double nvrtc_s = 0;
  bo.nvrtc_seconds = &nvrtc_s;
  bo.model = base_name(o.file);
  bool partitioned = sc_partition_args_active(&co.pa);
  if (partitioned && co.emit)
    return sc_cli_usage_error("--emit is not supported with --mesh / --plan");
  if (partitioned && bo.target != SC_BUNDLE_CPU)
    return sc_cli_usage_error("a partitioned bundle is cpu only (--target cpu)");

  if ((rc = check_train(&co, &bo)) != 0) return rc;
  if (co.pa.auto_plan && (rc = sc_plan_auto_resolve(&co.pa, &o, co.train ? &co.ta : NULL)) != 0)
    return rc;

  sc_build_setup bs;
  sc_build_setup_init(&bs, &o, &co.pa);
  bs.compile.quiet = partitioned || co.train;
  if (bo.target == SC_BUNDLE_CUDA) bs.compile.workspace_bytes = SC_GEMM_WORKSPACE_BYTES;
  bs.build.no_fuse_attention =
      !sc_device_choice_runs_attention(&(sc_device_choice){
          .name = bo.target == SC_BUNDLE_CUDA ? "cuda" : "cpu"});
  sc_build *b = NULL;
  if ((rc = co.train ? sc_train_args_build(&co.ta, &co.pa, &o, &bs.build, &b)
                     : sc_partition_args_build(&co.pa, &o, &bs.build, &b, NULL)) != 0)
    return rc;
  if (b->part) sc_partition_print_fallbacks(b->part, stderr, "shardc: warning: ");
  const sc_dist_program *dp = b->program;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (co.emit) rc = emit_code(dp->stages[0].program, &co, o.file);
  sc_train_manifest *tm = NULL;
  if (rc == 0 && co.out && co.train) {
    if (sc_build_train_manifest(b, &co.ta.t, &tm, &d) != SC_OK) rc = sc_cli_report(&d, o.file);
    bo.train = tm;
  }
  if (rc == 0 && co.out) {
    sc_status st = partitioned ? sc_dist_program_write(dp, &bo, co.out, &d)
                               : sc_bundle_write(dp->stages[0].program, &bo, co.out, &d);
    if (st != SC_OK) rc = sc_cli_report(&d, o.file);
    else {
      char mesh[256] = "";
      if (partitioned) sc_mesh_format(&dp->mesh, mesh, sizeof mesh);
      char nvrtc[96] = "";
      if (bo.target == SC_BUNDLE_CUDA)
        snprintf(nvrtc, sizeof nvrtc, "; NVRTC %.1f s (%s)", nvrtc_s,
                 co.archs ? co.archs : "sm_80,sm_90");
      fprintf(stderr, "shardc: wrote %s: a %s%s bundle%s%s (docs/bundle.md)%s\n", co.out,
              co.train ? "training " : "", bo.target == SC_BUNDLE_CUDA ? "cuda" : "cpu",
              partitioned ? " over the mesh " : "", mesh, nvrtc);
    }
  }
  sc_train_manifest_destroy(tm);
  sc_build_destroy(b);
  return rc;
}
