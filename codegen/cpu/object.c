/* object.c — the ahead-of-time side of the CPU backend: a program's
 * kernels written as one ELF object file (position-independent, so it links
 * into PIE executables), or printed as optimised LLVM IR (--emit=llvm).
 *
 * Both build exactly the module the JIT builds (target.c), so what
 * `--emit=llvm` shows is what runs. The object defines one external
 * function per kernel, named as the kernel, with the ABI of cpu.h; its only
 * undefined symbols are libm functions (tanhf, erff, and whatever LLVM's
 * code generator calls for exp, log, sin, ...): link with -lm. */
#include <stdio.h>

#include "codegen/cpu/cpu_internal.h"

typedef sc_status (*module_fn)(LLVMModuleRef m, LLVMTargetMachineRef tm, void *ud,
                               sc_diag *diag);

static sc_status with_module(const sc_program *p, const sc_cpu_opts *o, bool pic,
                             module_fn fn, void *ud, sc_diag *diag) {
  sc_cpu_opts defaults;
  if (!o) {
    sc_cpu_opts_init(&defaults);
    o = &defaults;
  }
  sc_status st = sc_cpu_probe_compile(p, diag);
  if (st != SC_OK) return st;
  LLVMTargetMachineRef tm = sc_cpu_create_tm(o, pic, diag);
  if (!tm) return diag->status != SC_OK ? diag->status : SC_ERR_UNSUPPORTED;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = NULL;
  st = sc_cpu_build_module(p, o, ctx, tm, &m, diag);
  if (st == SC_OK) st = fn(m, tm, ud, diag);
  if (m) LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
  LLVMDisposeTargetMachine(tm);
  return st;
}

static sc_status print_ir(LLVMModuleRef m, LLVMTargetMachineRef tm, void *ud,
                          sc_diag *diag) {
  FILE *out = ud;
  char *s = LLVMPrintModuleToString(m);
  int ok = fputs(s, out) >= 0;
  LLVMDisposeMessage(s);
  if (!ok) return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cannot write the LLVM IR");
  return SC_OK;
}

sc_status sc_cpu_emit_llvm_ir(const sc_program *p, const sc_cpu_opts *o, FILE *out,
                              sc_diag *diag) {
  return with_module(p, o, false, print_ir, out, diag);
}

static sc_status write_object(LLVMModuleRef m, LLVMTargetMachineRef tm, void *ud,
                              sc_diag *diag) {
  char *err = NULL;
  /* LLVM's signature takes a non-const path. */
  if (LLVMTargetMachineEmitToFile(tm, m, (char *)ud, LLVMObjectFile, &err)) {
    sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cannot write object file '%s': %s",
                (const char *)ud, err ? err : "");
    LLVMDisposeMessage(err);
    return SC_ERR_IO;
  }
  return SC_OK;
}

sc_status sc_cpu_emit_object(const sc_program *p, const sc_cpu_opts *o,
                             const char *path, sc_diag *diag) {
  return with_module(p, o, true, write_object, (void *)path, diag);
}
