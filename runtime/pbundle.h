/* pbundle.h — loading and running a partitioned bundle (written by
 * `shardc compile MODEL --mesh ...`; layout in docs/bundle.md, "Partitioned
 * bundles").
 *
 * sc_pbundle_load reads OUT/partition.json (untrusted, strict: every field
 * checked), loads each stage bundle with sc_bundle_load (manifest hashes,
 * program checks, kernels.o linked), checks that each stage program's mesh,
 * inputs and outputs are the ones partition.json names, reads every
 * weights/rank<r>.bin, checks its size and SHA-256 against partition.json
 * before use, and checks its index: each piece names an external CONST
 * buffer (no data in the stage bundle) of the rank's stage program, with
 * that buffer's size, inside the file; every external CONST buffer gets a
 * piece.
 *
 * Running needs no graphs: the loader builds a small sc_partition (mesh,
 * axes, stages, microbatches; a global graph holding only the model's
 * inputs and outputs; per stage a graph holding only its inputs with their
 * shardings; no sources) and the runs go through runtime/dist.h with the
 * stage bundles' kernels as cpu_modules and the rank files as
 * rank_const_data: the per-rank code is dist.c's.
 *
 * Errors name the file: SC_ERR_IO, SC_ERR_PARSE, SC_ERR_INVALID (hash,
 * size or content mismatch), SC_ERR_UNSUPPORTED (another version),
 * SC_ERR_NOMEM. */
#ifndef SC_RUNTIME_PBUNDLE_H
#define SC_RUNTIME_PBUNDLE_H

#include "runtime/bundle.h"
#include "runtime/dist.h"

typedef struct sc_pbundle {
  sc_partition *part;            /* owned (see above) */
  sc_graph *global;              /* owned: the model's inputs and outputs */
  int32_t n_stages;
  sc_bundle **stages;            /* [n_stages] owned */
  sc_program **programs;         /* [n_stages] the stages' programs (borrowed from them) */
  const struct sc_cpu_module **modules; /* [n_stages] their kernels */
  int64_t n_ranks;
  void **rank_files;             /* [n_ranks] owned file contents */
  const void ***rank_const;      /* [n_ranks][n_buffers of its stage] */
} sc_pbundle;

/* True when path is a directory holding a partition.json. */
bool sc_pbundle_is_dir(const char *path);
sc_status sc_pbundle_load(const char *dir, sc_pbundle **out, sc_diag *d);
void sc_pbundle_destroy(sc_pbundle *b);

/* sc_dist_run_local / sc_dist_run_rank on the loaded bundle (o: threads,
 * quiet; its cpu_modules and rank_const_data are the bundle's). inputs:
 * global tensors by name (dim 0 = microbatch dim 0 times microbatches). */
sc_status sc_pbundle_run_local(const sc_pbundle *b, const sc_dist_opts *o,
                               const sc_tensor_view *inputs, int32_t n_inputs,
                               sc_dist_output *outputs, int32_t n_outputs,
                               sc_dist_rank_stats *stats, sc_diag *d);
sc_status sc_pbundle_run_rank(const sc_pbundle *b, const sc_dist_opts *o, sc_comm *world,
                              const sc_tensor_view *inputs, int32_t n_inputs,
                              sc_dist_output *outputs, int32_t n_outputs,
                              sc_dist_rank_stats *stats, sc_diag *d);

#endif
