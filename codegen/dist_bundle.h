/* dist_bundle.h — a distributed program on disk: the partitioned bundle (docs/bundle.md,
 * "Partitioned bundles"): one directory OUT holding
 *   partition.json        format version, mesh, pp/dp/tp axis names, stage
 *                         count, microbatches, the global inputs/outputs
 *                         (dtype, microbatch dims), per stage its input
 *                         names with their sharding text and its output
 *                         names, and per rank its weight file's index
 *                         (written last: without it OUT is not a bundle)
 *   stage<k>/             an ordinary bundle of stage k's program whose
 *                         sharded constants are external (no data in its
 *                         weights.bin, codegen/bundle.h external_consts)
 *   weights/rank<r>.bin   rank r's pieces of those constants, cut by
 *                         sc_dist_stage_weights, for each stage it runs
 *                         (a pipelined training step: every piece of its
 *                         chunks), in stage and buffer order, each 64-byte
 *                         aligned; its size and SHA-256, and each piece's
 *                         name, stage, buffer id, offset and bytes, are in
 *                         partition.json.
 *   params.bin,           a training bundle (sc_bundle_opts.train): the
 *   training.json         whole step's manifest, written against
 *                         sc_dist_program_global_view (codegen/bundle.h
 *                         sc_bundle_write_training); partition.json says
 *                         "kind": "training" and lists both with their
 *                         sizes and SHA-256, and "pipeline" gives a
 *                         pipelined step's chunks, ranks and schedule.
 * Replicated constants stay in the stage bundles' weights.bin. */
#ifndef SC_CODEGEN_DIST_BUNDLE_H
#define SC_CODEGEN_DIST_BUNDLE_H

#include "codegen/bundle.h"
#include "codegen/dist_program.h"

enum { SC_PARTITION_JSON_VERSION = 1 };

/* Writes dp (linked with sources: every rank's shards are cut with
 * sc_dist_rank_weights) as the bundle DIR. o: the stage bundles' options
 * (external_consts is set for them). runtime/dist_load.h reads it back. */
sc_status sc_dist_program_write(const sc_dist_program *dp, const sc_bundle_opts *o,
                                const char *dir, sc_diag *d);

/* A SHA-256 (64 hex digits into hex) of what a rank of dp runs and must
 * agree on with the others: the mesh and its roles, the schedule, the
 * model's inputs and outputs, every stage's program (its JSON, as a bundle
 * holds it, without the weights) and its inputs' shardings; with m, the
 * training step's optimizer, loss and precision. Not the weights, the
 * data, the learning rate or the thread count. */
sc_status sc_dist_program_hash(const sc_dist_program *dp, const struct sc_train_manifest *m,
                               char hex[65], sc_diag *d);

#endif
