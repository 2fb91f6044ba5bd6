/* target.c — LLVM set-up for the CPU backend: native target initialisation,
 * the TargetMachine (host CPU and features unless a CPU is named), the
 * optimisation pipeline and the translation of LLVM errors into diagnostics.
 *
 * The pipeline is the new pass manager's `default<On>` run through
 * LLVMRunPasses with the TargetMachine, so that the cost models (vector
 * width, FMA, gathers) are the target's; loop and SLP vectorisation and
 * interleaving are switched on explicitly. The module is verified before it
 * is optimised: an invalid module is a bug in emit.c and is reported with
 * the verifier's own text rather than handed to LLVM to crash on.
 *
 * LLVM cannot return an allocation failure: it aborts ("LLVM ERROR: out of
 * memory") or lets std::bad_alloc end the process. So before a compile,
 * sc_cpu_probe_compile checks that the address space it will take is there
 * (sc_mem_probe), estimated from the program's size, and reports a
 * shortfall as SC_ERR_NOMEM while an error can still be returned. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/cpu/cpu_internal.h"
#include "ir/progress.h"

static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;
static bool llvm_ok;

static void init_llvm_once(void) {
  llvm_ok = !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter() &&
            !LLVMInitializeNativeAsmParser();
}

void sc_cpu_init_llvm(void) { pthread_once(&llvm_once, init_llvm_once); }

/* What compiling p takes beyond what is mapped before: a fixed part (the
 * pass managers, the target's tables, the JIT) and a part per kernel and
 * per kir expression (the IR, its analyses, machine code). Measured with
 * LLVM 14 as the growth of VmPeak over sc_cpu_jit: GPT-2's training step
 * (164 kernels, 3465 expressions) 11.5 MB, its forward pass (23, 571)
 * 3.9 MB, ResNet's (35, 801) 3.6 MB; the estimate is about 1.4 times that. */
enum { COMPILE_FIXED_BYTES = 4 << 20, COMPILE_KERNEL_BYTES = 8 << 10,
       COMPILE_EXPR_BYTES = 3 << 10 };

sc_status sc_cpu_probe_compile(const sc_program *p, sc_diag *diag) {
  uint64_t bytes = COMPILE_FIXED_BYTES, exprs = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) exprs += (uint64_t)p->kernels[k]->n_exprs;
  bytes += (uint64_t)p->n_kernels * COMPILE_KERNEL_BYTES + exprs * COMPILE_EXPR_BYTES;
  if (sc_mem_probe(bytes)) return SC_OK;
  return sc_diag_nomem(diag, bytes, "LLVM to compile %d kernels (%llu kir expressions)",
                       (int)p->n_kernels, (unsigned long long)exprs);
}

void sc_cpu_opts_init(sc_cpu_opts *o) {
  o->opt_level = 3;
  o->cpu = NULL;
}

sc_status sc_cpu_llvm_error(sc_diag *diag, LLVMErrorRef err, const char *what) {
  char *msg = LLVMGetErrorMessage(err); /* consumes err */
  sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "LLVM: %s: %s", what,
              msg ? msg : "(no message)");
  LLVMDisposeErrorMessage(msg);
  return SC_ERR_INVALID;
}

LLVMTargetMachineRef sc_cpu_create_tm(const sc_cpu_opts *o, bool pic,
                                      sc_diag *diag) {
  sc_cpu_init_llvm();
  if (!llvm_ok) {
    sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                "LLVM: the native target could not be initialised");
    return NULL;
  }
  char *triple = LLVMGetDefaultTargetTriple();
  LLVMTargetRef target = NULL;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                "LLVM: no target for triple '%s': %s", triple, err ? err : "");
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  char *cpu = o && o->cpu ? NULL : LLVMGetHostCPUName();
  char *features = o && o->cpu ? NULL : LLVMGetHostCPUFeatures();
  int level = o ? o->opt_level : 3;
  LLVMCodeGenOptLevel cg = level <= 0   ? LLVMCodeGenLevelNone
                           : level == 1 ? LLVMCodeGenLevelLess
                           : level == 2 ? LLVMCodeGenLevelDefault
                                        : LLVMCodeGenLevelAggressive;
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(
      target, triple, o && o->cpu ? o->cpu : cpu, o && o->cpu ? "" : features, cg,
      pic ? LLVMRelocPIC : LLVMRelocDefault,
      pic ? LLVMCodeModelDefault : LLVMCodeModelJITDefault);
  if (!tm)
    sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                "LLVM: cannot create a target machine for '%s' (cpu '%s')", triple,
                o && o->cpu ? o->cpu : cpu);
  if (cpu) LLVMDisposeMessage(cpu);
  if (features) LLVMDisposeMessage(features);
  LLVMDisposeMessage(triple);
  return tm;
}

/* LLVM's diagnostics while it optimises our module: a loop marked
 * llvm.loop.vectorize.enable that the vectoriser cannot transform is
 * reported as a warning ("loop not vectorized"), which the default handler
 * prints on stderr, in the middle of a user's output. Not vectorising is
 * allowed (the loop runs scalar, correctly): remarks and warnings are
 * dropped, errors still printed. */
static void quiet_diagnostics(LLVMDiagnosticInfoRef info, void *ctx) {
  (void)ctx;
  if (LLVMGetDiagInfoSeverity(info) != LLVMDSError) return;
  char *msg = LLVMGetDiagInfoDescription(info);
  fprintf(stderr, "shardc: LLVM: %s\n", msg ? msg : "error");
  LLVMDisposeMessage(msg);
}

sc_status sc_cpu_build_module(const sc_program *p, const sc_cpu_opts *o,
                              LLVMContextRef ctx, LLVMTargetMachineRef tm,
                              LLVMModuleRef *out, sc_diag *diag) {
  *out = NULL;
  LLVMContextSetDiagnosticHandler(ctx, quiet_diagnostics, NULL);
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("shardc_kernels", ctx);
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(m, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(m, dl);
  LLVMDisposeTargetData(dl);

  sc_progress pr; /* each kernel emitted, then the module optimised */
  sc_progress_begin(&pr, "LLVM IR", p->n_kernels, false);
  for (int32_t i = 0; i < p->n_kernels; i++) {
    sc_progress_set(&pr, i, p->kernels[i]->name);
    sc_status st = sc_cpu_emit_kernel(m, tm, p, p->kernels[i], diag);
    if (st != SC_OK) {
      sc_progress_end(&pr);
      LLVMDisposeModule(m);
      return st;
    }
  }
  sc_progress_set(&pr, p->n_kernels, "optimising");

  char *msg = NULL;
  if (LLVMVerifyModule(m, LLVMReturnStatusAction, &msg)) {
    /* A bug in emit.c, not in the user's model: say so plainly. */
    sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                "internal error: the CPU backend built invalid LLVM IR: %s",
                msg ? msg : "");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(m);
    sc_progress_end(&pr);
    return SC_ERR_INVALID;
  }
  LLVMDisposeMessage(msg);

  int level = o ? o->opt_level : 3;
  if (level < 0) level = 0;
  if (level > 3) level = 3;
  char pipeline[32];
  snprintf(pipeline, sizeof pipeline, "default<O%d>", level);
  LLVMPassBuilderOptionsRef pbo = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(pbo, level >= 2);
  LLVMPassBuilderOptionsSetSLPVectorization(pbo, level >= 2);
  LLVMPassBuilderOptionsSetLoopInterleaving(pbo, level >= 2);
  /* Unrolling off: vectorised loops are already interleaved; unrolling them
   * (fully, for constant row lengths) tripled JIT time and code size for no
   * measurable gain on elementwise and reduction kernels. */
  LLVMPassBuilderOptionsSetLoopUnrolling(pbo, 0);
  LLVMErrorRef err = LLVMRunPasses(m, pipeline, tm, pbo);
  LLVMDisposePassBuilderOptions(pbo);
  sc_progress_end(&pr);
  if (err) {
    LLVMDisposeModule(m);
    return sc_cpu_llvm_error(diag, err, "optimisation pipeline");
  }
  *out = m;
  return SC_OK;
}
