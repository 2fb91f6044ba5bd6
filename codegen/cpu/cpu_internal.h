/* cpu_internal.h — what the files of the CPU backend share.
 *
 *   target.c  LLVM initialisation, the host TargetMachine, the optimisation
 *             pipeline (new pass manager, vectorisers on) and error plumbing
 *   emit.c    kir kernel → one LLVM function with the kernel ABI of cpu.h
 *   jit.c     ORC LLJIT: a program's module compiled in memory
 *   object.c  the same module written as an ELF object, or printed as IR
 *
 * A "module build" is: emit every kernel of a program into one module (in a
 * context the caller owns), verify it, optimise it for a TargetMachine. The
 * JIT and the object path differ only in what they do with the result. */
#ifndef SC_CODEGEN_CPU_INTERNAL_H
#define SC_CODEGEN_CPU_INTERNAL_H

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/TargetMachine.h>

#include "codegen/cpu/cpu.h"

/* A JIT holding a program's kernels: built by sc_cpu_jit (jit.c) from kir,
 * or by sc_cpu_load_object (objload.c) from object code. */
struct sc_cpu_module {
  LLVMOrcLLJITRef jit;
  int32_t n_kernels;
  sc_cpu_kernel_fn *fns; /* by kernel id */
  double seconds;        /* compile (or link) time */
};

/* Monotonic wall clock in seconds. */
double sc_cpu_now_seconds(void);

/* Once per process: the native target, its asm printer and parser. */
void sc_cpu_init_llvm(void);

/* A TargetMachine for o->cpu (NULL: the host CPU with its features). `pic`
 * selects position-independent code (object files linked into PIEs).
 * Returns NULL with diag set on failure. The caller disposes it. */
LLVMTargetMachineRef sc_cpu_create_tm(const sc_cpu_opts *o, bool pic,
                                      sc_diag *diag);

/* Emits every kernel of p into a new module of ctx (data layout and triple
 * from tm), verifies it (an invalid module is a bug in emit.c: reported with
 * the verifier's text) and runs the `default<On>` pipeline for tm. */
sc_status sc_cpu_build_module(const sc_program *p, const sc_cpu_opts *o,
                              LLVMContextRef ctx, LLVMTargetMachineRef tm,
                              LLVMModuleRef *out, sc_diag *diag);

/* Emits kernel k as function `k->name` into m (no verification or
 * optimisation). p, when not NULL, is the program k belongs to, with its
 * memory plan: a read param that the plan puts at the very address of a
 * written param it is aligned with (an in-place pair, kir_reads_aligned)
 * is then read through the written param's pointer, so that LLVM sees one
 * base and vectorises without a run-time overlap check (which fails for
 * in-place buffers and falls back to the scalar loop). The code then
 * assumes the plan's addresses: run it only on buffers bound from p. */
sc_status sc_cpu_emit_kernel(LLVMModuleRef m, LLVMTargetMachineRef tm,
                             const sc_program *p, const kir_kernel *k, sc_diag *diag);

/* SC_ERR_NOMEM ("out of memory: needed N bytes for LLVM to compile ...")
 * when the address space that compiling p's kernels is estimated to take
 * cannot be mapped now; SC_OK otherwise. Called just before a compile,
 * since LLVM aborts where an allocation fails. */
sc_status sc_cpu_probe_compile(const sc_program *p, sc_diag *diag);

/* Turns an LLVMErrorRef (consumed) into a diagnostic "WHAT: message". */
sc_status sc_cpu_llvm_error(sc_diag *diag, LLVMErrorRef err, const char *what);

#endif
