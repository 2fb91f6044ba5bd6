/* partition_bundle.h — the artifact of a partitioned model (docs/bundle.md,
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
 *   weights/rank<r>.bin   rank r's pieces of those constants, cut with
 *                         sc_sharding_extract, in the stage program's
 *                         buffer order, each 64-byte aligned; its size and
 *                         SHA-256, and each piece's name, buffer id, offset
 *                         and bytes, are in partition.json.
 * Replicated constants stay in the stage bundles' weights.bin. */
#ifndef SC_TOOLS_PARTITION_BUNDLE_H
#define SC_TOOLS_PARTITION_BUNDLE_H

#include "codegen/bundle.h"
#include "passes/partition/partition.h"

enum { SC_PARTITION_JSON_VERSION = 1 };

/* programs[part->n_stages]: compiled from part->stages. o: the stage
 * bundles' options (external_consts is set for them). */
sc_status sc_pbundle_write(const sc_partition *part, sc_program *const *programs,
                           const sc_bundle_opts *o, const char *dir, sc_diag *d);

#endif
