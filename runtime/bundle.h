/* bundle.h — loading a compiled artifact (a bundle written by `shardc
 * compile`, codegen/bundle.h; layout in docs/bundle.md).
 *
 * sc_bundle_load reads DIR/manifest.json, checks the format version and
 * that every file the target needs is listed, checks each listed file's size
 * and SHA-256 before anything uses it, maps weights.bin read-only, parses and
 * validates program.json against it (codegen/bundle.h: every id, size and
 * kernel checked) and cross-checks the manifest's inputs, outputs and
 * arena_bytes with the program. A corrupted or edited bundle is an error
 * naming the file, never a crash.
 *
 * The program's CONST buffers point into the mapped weights: the bundle owns
 * the program and the mapping, and must outlive any session created on the
 * program. For a cpu bundle, the loader also checks that the host CPU has
 * every feature kernels.o was compiled for (manifest "cpu") and links
 * kernels.o into a JIT (sc_cpu_load_object), every kernel of the program
 * found by name: pass b->kernels as sc_session_opts.cpu_module and the
 * session runs that code instead of compiling the kir again. A cuda
 * bundle's kernels.cu, PTX and CUBINs (each CUBIN an ELF of its size) are
 * kept in memory: sc_bundle_cuda_code hands them to a session. A training
 * bundle (`shardc compile --train`, cpu or cuda) lists training.json and
 * params.bin; both are hashed like the rest, then training.json is checked
 * against the program and params.bin (codegen/train_manifest.h).
 * Errors: SC_ERR_IO (missing or unreadable file), SC_ERR_PARSE (malformed JSON), SC_ERR_INVALID (hash/size mismatch,
 * inconsistent content), SC_ERR_UNSUPPORTED (another format version),
 * SC_ERR_NOMEM. Not thread-safe; distinct bundles are independent. */
#ifndef SC_RUNTIME_BUNDLE_H
#define SC_RUNTIME_BUNDLE_H

#include "codegen/cpu/cpu.h"
#include "codegen/program.h"
#include "codegen/train_manifest.h"
#include "runtime/device.h"

typedef struct sc_bundle {
  char *dir;               /* the bundle directory */
  char target[16];         /* "cpu" or "cuda" */
  int32_t n_archs;         /* cuda: architectures with PTX */
  char (*archs)[32];       /* "sm_80", ... */
  char *cuda_src;          /* cuda: kernels.cu (NUL-terminated, owned) */
  char **ptx;              /* cuda: [n_archs] kernels.<arch>.ptx (owned) */
  char **cubin;            /* cuda: [n_archs] kernels.<arch>.cubin, NULL where
                              the bundle has none (owned) */
  size_t *cubin_bytes;     /* [n_archs] their sizes */
  sc_program *program;     /* owned */
  void *weights;           /* weights.bin, mapped read-only (NULL if empty) */
  size_t weights_bytes;
  char *cpu, *cpu_features; /* cpu: what kernels.o was compiled for */
  sc_cpu_module *kernels;   /* cpu: kernels.o linked into a JIT (owned) */
  /* A training bundle (manifest "kind": "training"): training.json read
   * and checked against the program (owned), its parameters' initial
   * values pointing into params.bin, mapped read-only; NULL for an
   * inference bundle, which those who train refuse, as `shardc run` and
   * sc_dist_program_load refuse a training bundle. */
  sc_train_manifest *train;
  void *params;
  size_t params_bytes;
} sc_bundle;

/* A cuda bundle's code for sc_session_opts.cuda / sc_trainer_opts.cuda
 * (borrowed from b); all NULL / 0 for a cpu bundle. */
sc_cuda_code sc_bundle_cuda_code(const sc_bundle *b);

/* True when path is a directory holding a manifest.json. */
bool sc_bundle_is_dir(const char *path);
sc_status sc_bundle_load(const char *dir, sc_bundle **out, sc_diag *diag);
void sc_bundle_destroy(sc_bundle *b);
/* SC_OK when b is of the kind the caller runs (a training bundle when
 * training, else an inference bundle); else SC_ERR_INVALID, saying what b
 * is and what runs it. */
sc_status sc_bundle_check_kind(const sc_bundle *b, bool training, sc_diag *d);
/* The same for any bundle: is_training says what it is (a partitioned
 * bundle's sc_dist_program.train); no file named. */
sc_status sc_bundle_kind_check(bool is_training, bool training, sc_diag *d);

#endif
