/* bundle.h — the compiled artifact ("bundle") and its pieces: SHA-256, the
 * program's JSON form, and the bundle writer.
 *
 * A bundle is a directory (layout and schemas in docs/bundle.md):
 *   manifest.json  format version, shardc version, target, GPU archs, the
 *                  CPU name and features kernels.o was compiled for, the
 *                  model's inputs/outputs, arena_bytes, and every other file
 *                  with its size and SHA-256 (written last: a directory
 *                  without a manifest is not a bundle)
 *   program.json   the program (buffers, kir kernels, steps), exactly
 *   weights.bin    the data of every CONST buffer, each at a 64-byte aligned
 *                  offset recorded in program.json ("weights_offset")
 *   kernels.o      cpu: ELF object, one function per kernel (cpu.h ABI)
 *   kernels.cu     cuda: the CUDA C translation unit (cuda.h ABI)
 *   kernels.<arch>.ptx  cuda: PTX per architecture
 *   kernels.<arch>.cubin  cuda, with opts.cubins (a training bundle): the
 *                  CUBIN of the same NVRTC compile per real arch (sm_NN),
 *                  which a GPU of that arch loads without compiling
 *   training.json  a training bundle (`shardc compile --train`): the step's
 *                  optimizer, loss, precision, data inputs and parameters
 *                  (codegen/train_manifest.h); the manifest says
 *                  "kind": "training"
 *   params.bin     a training bundle: the parameters' initial values, each
 *                  at a 64-byte aligned offset recorded in training.json
 *
 * The JSON form of a program round-trips exactly: write → read → write gives
 * identical text, and the read kernels are the written ones field for field
 * (expression ids, constants bit-exact, NaN/±inf spelled as strings). Reading
 * treats the text as untrusted: every id is bounds-checked, every size
 * re-derived with checked arithmetic, every kernel passes kir_verify, GEMM
 * operands are checked to lie inside their buffers, CONST data inside the
 * weights. The loader (runtime/bundle.h) adds the manifest's hashes.
 *
 * Ownership: strings returned through char ** are sc_malloc'd; the caller
 * frees them with sc_free. A program read from JSON owns its names and
 * kernels (its arena) but borrows CONST data from `weights`, which must
 * outlive it. Errors: SC_ERR_PARSE (malformed JSON or a missing field),
 * SC_ERR_INVALID (well-formed but inconsistent), SC_ERR_IO, SC_ERR_NOMEM,
 * SC_ERR_USAGE (bad target/arch options), SC_ERR_UNSUPPORTED (cuda target in
 * a build without NVRTC). */
#ifndef SC_CODEGEN_BUNDLE_H
#define SC_CODEGEN_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cpu/cpu.h"
#include "codegen/program.h"
#include "codegen/program_json.h"
#include "codegen/train_manifest.h"
#include "ir/fileio.h"

/* ---- the writer ---- */
typedef enum sc_bundle_target { SC_BUNDLE_CPU, SC_BUNDLE_CUDA } sc_bundle_target;

typedef struct sc_bundle_opts {
  sc_bundle_target target;
  const char *archs;   /* cuda: comma-separated ("sm_80,sm_90"); NULL = default */
  sc_cpu_opts cpu;     /* cpu: options of the object file */
  const char *model;   /* the model file name recorded in the manifest, or NULL */
  /* CONST buffers without data are external: left out of weights.bin and
   * written without "weights_offset" (a partitioned model's sharded
   * constants, whose pieces are per rank: docs/bundle.md). false: such a
   * buffer is an error. */
  bool external_consts;
  /* cuda: also write each real architecture's CUBIN (kernels.<arch>.cubin),
   * from the NVRTC compile that makes its PTX */
  bool cubins;
  double *nvrtc_seconds; /* cuda: receives NVRTC's time (all archs), or NULL */
  /* A training step (cpu or cuda; one rank): its manifest, whose parameters' data
   * go to params.bin (borrowed until the write returns); NULL: an
   * inference bundle. */
  const sc_train_manifest *train;
} sc_bundle_opts;
void sc_bundle_opts_init(sc_bundle_opts *o);
const char *sc_bundle_target_name(sc_bundle_target t); /* "cpu", "cuda" */

/* Writes the bundle of p as dir: into a temporary sibling folder, which
 * replaces dir whole when complete (sc_bundle_dir_begin). Every CONST buffer
 * must have data unless o->external_consts. The manifest is written last. */
sc_status sc_bundle_write(const sc_program *p, const sc_bundle_opts *o, const char *dir,
                          sc_diag *diag);

/* A file written into a bundle: its name, size and SHA-256 (hex). */
typedef struct sc_bundle_file {
  char name[32];
  int64_t bytes;
  char sha256[65];
} sc_bundle_file;
/* The training files of a step, m (borrowed; its parameters' data go to
 * params.bin) against p (a one-rank step, or a partitioned step's
 * sc_dist_program_global_view), into the existing directory dir:
 * params.bin and training.json, files[0] and files[1]. What sc_bundle_write
 * writes for o->train; a partitioned training bundle lists them in
 * partition.json (codegen/dist_bundle.h). */
sc_status sc_bundle_write_training(const char *dir, const sc_program *p,
                                   const sc_train_manifest *m, sc_bundle_file files[2],
                                   sc_diag *diag);
/* sc_dir_commit_begin for a bundle directory (either kind): dir may be
 * missing, empty, or a bundle (it holds manifest.json or partition.json);
 * anything else is refused, not deleted. Write into c->tmp, then
 * sc_dir_commit_finish(c, status, diag). */
sc_status sc_bundle_dir_begin(sc_dir_commit *c, const char *dir, sc_diag *diag);

#endif
