/* jit.c — a program's kernels compiled in memory through ORC LLJIT.
 *
 * The whole program becomes one module (target.c optimises it for the host
 * TargetMachine), handed to an LLJIT whose own TargetMachine is built from
 * the same options, so that code generation sees the same CPU and features.
 * The main JITDylib gets a generator for the symbols of the current process
 * (libm's tanhf/erff and whatever the code generator calls). Every kernel is
 * looked up once, eagerly: compilation happens inside sc_cpu_jit, not on the
 * first call, and sc_cpu_compile_seconds reports all of it. The address
 * space the compile takes is probed first (sc_cpu_probe_compile): LLVM
 * aborts where an allocation fails.
 *
 * The module object owns the LLJIT (and so the code); function pointers are
 * valid until sc_cpu_module_destroy. Looking up kernels and calling them is
 * thread-safe; creating and destroying is not. */
#include <stdlib.h>
#include <time.h>

#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>

#include "codegen/cpu/cpu_internal.h"

double sc_cpu_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

sc_cpu_kernel_fn sc_cpu_kernel(const sc_cpu_module *m, int32_t kernel_id) {
  SC_ASSERT(m && kernel_id >= 0 && kernel_id < m->n_kernels);
  return m->fns[kernel_id];
}

double sc_cpu_compile_seconds(const sc_cpu_module *m) { return m->seconds; }

void sc_cpu_module_destroy(sc_cpu_module *m) {
  if (!m) return;
  if (m->jit) {
    LLVMErrorRef err = LLVMOrcDisposeLLJIT(m->jit);
    if (err) LLVMConsumeError(err);
  }
  sc_free(m->fns);
  sc_free(m);
}

sc_status sc_cpu_jit(const sc_program *p, const sc_cpu_opts *o,
                     sc_cpu_module **out, sc_diag *diag) {
  *out = NULL;
  double t0 = sc_cpu_now_seconds();
  sc_cpu_opts defaults;
  if (!o) {
    sc_cpu_opts_init(&defaults);
    o = &defaults;
  }
  sc_status st = sc_cpu_probe_compile(p, diag);
  if (st != SC_OK) return st;
  sc_cpu_module *m = sc_calloc(1, sizeof *m);
  if (!m) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "CPU JIT: out of memory");
  m->n_kernels = p->n_kernels;
  m->fns = sc_calloc(p->n_kernels ? (size_t)p->n_kernels : 1, sizeof *m->fns);
  if (!m->fns) {
    sc_free(m);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "CPU JIT: out of memory");
  }

  LLVMTargetMachineRef tm = sc_cpu_create_tm(o, false, diag);
  LLVMTargetMachineRef jtm = tm ? sc_cpu_create_tm(o, false, diag) : NULL;
  if (!jtm) {
    if (tm) LLVMDisposeTargetMachine(tm);
    sc_cpu_module_destroy(m);
    return diag->status != SC_OK ? diag->status : SC_ERR_UNSUPPORTED;
  }

  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMModuleRef mod = NULL;
  st = sc_cpu_build_module(p, o, LLVMOrcThreadSafeContextGetContext(tsc), tm, &mod, diag);
  LLVMDisposeTargetMachine(tm);
  if (st != SC_OK) {
    LLVMDisposeTargetMachine(jtm);
    LLVMOrcDisposeThreadSafeContext(tsc);
    sc_cpu_module_destroy(m);
    return st;
  }

  /* The builder takes the JTMB, which takes jtm. */
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm));
  LLVMErrorRef err = LLVMOrcCreateLLJIT(&m->jit, jb);
  if (err) {
    m->jit = NULL;
    st = sc_cpu_llvm_error(diag, err, "creating the JIT");
    goto fail_module;
  }
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(m->jit), NULL, NULL);
  if (err) {
    st = sc_cpu_llvm_error(diag, err, "process symbol generator");
    goto fail_module;
  }
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(m->jit), gen);

  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  mod = NULL;
  LLVMOrcDisposeThreadSafeContext(tsc); /* the module keeps it alive */
  tsc = NULL;
  err = LLVMOrcLLJITAddLLVMIRModule(m->jit, LLVMOrcLLJITGetMainJITDylib(m->jit), tsm);
  if (err) {
    st = sc_cpu_llvm_error(diag, err, "adding the module to the JIT");
    goto fail;
  }
  for (int32_t i = 0; i < p->n_kernels; i++) {
    LLVMOrcExecutorAddress addr = 0;
    err = LLVMOrcLLJITLookup(m->jit, &addr, p->kernels[i]->name);
    if (err) {
      st = sc_cpu_llvm_error(diag, err, p->kernels[i]->name);
      goto fail;
    }
    SC_ASSERT(addr != 0);
    m->fns[i] = (sc_cpu_kernel_fn)(uintptr_t)addr;
  }
  m->seconds = sc_cpu_now_seconds() - t0;
  *out = m;
  return SC_OK;

fail_module:
  if (mod) LLVMDisposeModule(mod);
  if (tsc) LLVMOrcDisposeThreadSafeContext(tsc);
fail:
  sc_cpu_module_destroy(m);
  return st;
}
