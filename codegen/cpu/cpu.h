/* cpu.h — the CPU backend: kernel IR → LLVM IR (through the LLVM C API),
 * optimised for the host CPU (vectorised), run through ORC LLJIT or written
 * to an object file.
 *
 * Kernel ABI (the same for JIT and object code):
 *   void <kernel name>(void *const *bufs, int64_t begin, int64_t end);
 * bufs[i] points to the data of the kernel's param i; the function computes
 * the outer points with row-major linear index in [begin, end). The runtime
 * splits [0, prod(outer_dims)) across its thread pool.
 *
 * Only this module includes LLVM headers. All LLVM failures come back as a
 * status with LLVM's own message in diag. */
#ifndef SC_CODEGEN_CPU_H
#define SC_CODEGEN_CPU_H

#include <stdio.h>

#include "codegen/program.h"

typedef void (*sc_cpu_kernel_fn)(void *const *bufs, int64_t begin, int64_t end);

typedef struct sc_cpu_opts {
  int opt_level;       /* 0..3, default 3 */
  const char *cpu;     /* target CPU, NULL = host */
} sc_cpu_opts;
void sc_cpu_opts_init(sc_cpu_opts *o);

typedef struct sc_cpu_module sc_cpu_module;

/* JIT-compiles every kernel of p. */
sc_status sc_cpu_jit(const sc_program *p, const sc_cpu_opts *o,
                     sc_cpu_module **out, sc_diag *diag);
sc_cpu_kernel_fn sc_cpu_kernel(const sc_cpu_module *m, int32_t kernel_id);
double sc_cpu_compile_seconds(const sc_cpu_module *m);
void sc_cpu_module_destroy(sc_cpu_module *m);

/* The optimised LLVM IR of every kernel (--emit=llvm). */
sc_status sc_cpu_emit_llvm_ir(const sc_program *p, const sc_cpu_opts *o,
                              FILE *out, sc_diag *diag);
/* An ELF object file defining one function per kernel (named as the
 * kernel), for linking with the runtime. */
sc_status sc_cpu_emit_object(const sc_program *p, const sc_cpu_opts *o,
                             const char *path, sc_diag *diag);

/* ---- running from an object file (objload.c) ---- */

/* Links an object written by sc_cpu_emit_object (obj, len bytes: copied,
 * the caller may free it on return) into a JIT for the host, resolving
 * libm symbols from the process, and looks up every kernel of p by name.
 * The module is used like one from sc_cpu_jit (sc_cpu_kernel, destroy);
 * sc_cpu_compile_seconds is the link time. Errors: SC_ERR_INVALID (not an
 * object LLVM can link, or a kernel of p missing from it, named in diag),
 * SC_ERR_NOMEM. Check sc_cpu_check_host_features first: the object's code
 * is not checked against the host CPU here. */
sc_status sc_cpu_load_object(const sc_program *p, const void *obj, size_t len,
                             sc_cpu_module **out, sc_diag *diag);
/* Kernels in m (p->n_kernels of the program it was made for). */
int32_t sc_cpu_module_n_kernels(const sc_cpu_module *m);
/* The CPU name and LLVM feature string ("+avx2,+fma,-avx512f,...") code
 * compiled with o targets: the host's, or o->cpu with features "" (implied
 * by the name). Both sc_malloc'd, freed by the caller with sc_free. */
sc_status sc_cpu_describe_target(const sc_cpu_opts *o, char **cpu, char **features,
                                 sc_diag *diag);
/* SC_OK when code compiled for (cpu, features) can run here: every feature
 * enabled in `features` ("+x") is enabled on the host, or, with no
 * features, cpu is the host's CPU or generic. Otherwise SC_ERR_UNSUPPORTED
 * naming the missing features and suggesting to recompile. */
sc_status sc_cpu_check_host_features(const char *cpu, const char *features, sc_diag *diag);

#endif
