/* dist_load.h — reading a distributed program back from a partitioned
 * bundle (written by `shardc compile MODEL --mesh ...`, codegen/
 * dist_bundle.h; layout in docs/bundle.md, "Partitioned bundles").
 *
 * sc_dist_program_load reads DIR/partition.json (untrusted, strict: every
 * field checked), loads each stage bundle with sc_bundle_load (manifest
 * hashes, program checks, kernels.o linked), checks that each stage
 * program's mesh, inputs and outputs are the ones partition.json names,
 * reads every weights/rank<r>.bin, checks its size and SHA-256 against
 * partition.json before use, and checks its index: each piece names an
 * external CONST buffer (no data in the stage bundle) of the rank's stage
 * program, with that buffer's size, inside the file; every external CONST
 * buffer gets a piece. A training bundle ("kind": "training") also has
 * params.bin and training.json, checked against their sizes and SHA-256,
 * the manifest read against sc_dist_program_global_view: it becomes
 * dp->train (sc_bundle_kind_check says what the caller may do with it).
 * The result is an ordinary distributed program
 * (stage kernels from kernels.o, rank_weights into the files): it runs
 * through runtime/dist.h like a freshly compiled one.
 *
 * Errors name the file: SC_ERR_IO, SC_ERR_PARSE, SC_ERR_INVALID (hash,
 * size or content mismatch), SC_ERR_UNSUPPORTED (another version),
 * SC_ERR_NOMEM. */
#ifndef SC_RUNTIME_DIST_LOAD_H
#define SC_RUNTIME_DIST_LOAD_H

#include "runtime/bundle.h"
#include "codegen/dist_program.h"

/* True when path is a directory holding a partition.json. */
bool sc_dist_bundle_is_dir(const char *path);
/* A partitioned bundle, or a one-rank bundle (manifest.json: its program
 * as the one stage of the one-rank mesh). The program owns what it loaded
 * (released by sc_dist_program_destroy). */
sc_status sc_dist_program_load(const char *dir, sc_dist_program **out, sc_diag *d);

#endif
