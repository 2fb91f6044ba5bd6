/* objload.c — running a program from a pre-compiled object file (a bundle's
 * kernels.o, written by object.c) instead of compiling its kir again.
 *
 * The object's bytes are copied into an LLVM memory buffer and handed to an
 * ORC LLJIT for the host, whose main JITDylib gets a generator for the
 * symbols of the current process (libm's tanhf, erff, expf, ... — the
 * object's only undefined symbols). Every kernel of the program is then
 * looked up by name, eagerly: linking happens inside sc_cpu_load_object, and
 * a kernel the object does not define is an error naming it, never a NULL
 * function pointer at run time. The result is an ordinary sc_cpu_module
 * (sc_cpu_kernel, sc_cpu_module_destroy in jit.c work on it).
 *
 * The object is machine code: nothing here can check that it computes what
 * the program's kir says (the bundle's hashes detect corruption, not a
 * malicious author). What is checked is the target: an object compiled for a
 * CPU feature the host lacks (AVX-512 on an AVX2 machine) would die on an
 * illegal instruction, so sc_cpu_check_host_features compares the feature
 * string recorded at compile time (sc_cpu_describe_target) with the host's.
 * The module struct is shared with jit.c through cpu_internal.h. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>

#include "codegen/cpu/cpu_internal.h"

int32_t sc_cpu_module_n_kernels(const sc_cpu_module *m) { return m ? m->n_kernels : 0; }

static char *dup_llvm(char *s) {
  char *r = sc_strdup(s ? s : "");
  if (s) LLVMDisposeMessage(s);
  return r;
}

sc_status sc_cpu_describe_target(const sc_cpu_opts *o, char **cpu, char **features,
                                 sc_diag *diag) {
  *cpu = NULL;
  *features = NULL;
  if (o && o->cpu) {
    /* A named CPU: its features are implied by the name (LLVM 14's C API
     * cannot list them), so none are recorded. */
    *cpu = sc_strdup(o->cpu);
    *features = sc_strdup("");
  } else {
    *cpu = dup_llvm(LLVMGetHostCPUName());
    *features = dup_llvm(LLVMGetHostCPUFeatures());
  }
  if (!*cpu || !*features) {
    sc_free(*cpu);
    sc_free(*features);
    *cpu = *features = NULL;
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  return SC_OK;
}

/* True when the comma-separated LLVM feature list `list` has "+name"
 * (name given with its length). */
static bool has_feature(const char *list, const char *name, size_t len) {
  const char *s = list;
  while (*s) {
    const char *e = strchr(s, ',');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == len + 1 && s[0] == '+' && memcmp(s + 1, name, len) == 0) return true;
    if (!e) break;
    s = e + 1;
  }
  return false;
}

sc_status sc_cpu_check_host_features(const char *cpu, const char *features, sc_diag *diag) {
  char *host_cpu = LLVMGetHostCPUName();
  char *host = LLVMGetHostCPUFeatures();
  const char *hc = host_cpu ? host_cpu : "";
  const char *hf = host ? host : "";
  char missing[512] = "";
  size_t pos = 0;
  int n_missing = 0;
  sc_status st = SC_OK;
  if (!features || !features[0]) {
    /* Compiled for a named CPU: only the same CPU (or a generic one) is
     * known to be safe. */
    if (cpu && cpu[0] && strcmp(cpu, hc) != 0 && strcmp(cpu, "generic") != 0 &&
        strcmp(cpu, "x86-64") != 0)
      st = sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "kernels.o was compiled for CPU '%s' and this host is '%s'; "
                       "recompile the model on this machine (shardc compile)",
                       cpu, hc);
  } else {
    const char *s = features;
    while (*s) {
      const char *e = strchr(s, ',');
      size_t n = e ? (size_t)(e - s) : strlen(s);
      if (n > 1 && s[0] == '+' && !has_feature(hf, s + 1, n - 1)) {
        int w = snprintf(missing + pos, sizeof missing - pos, "%s%.*s", n_missing ? ", " : "",
                         (int)(n - 1), s + 1);
        if (w > 0 && (size_t)w < sizeof missing - pos) pos += (size_t)w;
        n_missing++;
      }
      if (!e) break;
      s = e + 1;
    }
    if (n_missing)
      st = sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "kernels.o was compiled for CPU '%s' with feature%s this host ('%s') "
                       "lacks: %s; recompile the model on this machine (shardc compile)",
                       cpu && cpu[0] ? cpu : "?", n_missing > 1 ? "s" : "", hc, missing);
  }
  if (host_cpu) LLVMDisposeMessage(host_cpu);
  if (host) LLVMDisposeMessage(host);
  return st;
}

sc_status sc_cpu_load_object(const sc_program *p, const void *obj, size_t len,
                             sc_cpu_module **out, sc_diag *diag) {
  *out = NULL;
  double t0 = sc_cpu_now_seconds();
  if (!obj || len == 0)
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "kernels.o: empty object file");
  sc_cpu_init_llvm();
  sc_cpu_module *m = sc_calloc(1, sizeof *m);
  if (!m) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  m->n_kernels = p->n_kernels;
  m->fns = sc_calloc(p->n_kernels ? (size_t)p->n_kernels : 1, sizeof *m->fns);
  if (!m->fns) {
    sc_free(m);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }

  sc_status st = SC_OK;
  /* Default builder: a JIT for the host, as the object was compiled for. */
  LLVMErrorRef err = LLVMOrcCreateLLJIT(&m->jit, NULL);
  if (err) {
    m->jit = NULL;
    st = sc_cpu_llvm_error(diag, err, "creating the JIT");
    goto fail;
  }
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(m->jit);
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(m->jit), NULL, NULL);
  if (err) {
    st = sc_cpu_llvm_error(diag, err, "process symbol generator");
    goto fail;
  }
  LLVMOrcJITDylibAddGenerator(jd, gen);

  /* The JIT takes the buffer (a copy: obj may be unmapped afterwards). */
  LLVMMemoryBufferRef buf =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, len, "kernels.o");
  err = LLVMOrcLLJITAddObjectFile(m->jit, jd, buf);
  if (err) {
    st = sc_cpu_llvm_error(diag, err, "kernels.o");
    goto fail;
  }
  for (int32_t i = 0; i < p->n_kernels; i++) {
    LLVMOrcExecutorAddress addr = 0;
    err = LLVMOrcLLJITLookup(m->jit, &addr, p->kernels[i]->name);
    if (err) {
      char *msg = LLVMGetErrorMessage(err);
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "kernels.o: kernel '%s' of program.json cannot be linked (%s); the "
                       "object does not match the program: recompile the model",
                       p->kernels[i]->name, msg ? msg : "no message");
      LLVMDisposeErrorMessage(msg);
      goto fail;
    }
    if (!addr) {
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "kernels.o: kernel '%s' has a null address", p->kernels[i]->name);
      goto fail;
    }
    m->fns[i] = (sc_cpu_kernel_fn)(uintptr_t)addr;
  }
  m->seconds = sc_cpu_now_seconds() - t0;
  *out = m;
  return SC_OK;

fail:
  sc_cpu_module_destroy(m);
  return st;
}
