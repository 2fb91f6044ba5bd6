/* train_bundle.h — the manifest of a built training step
 * (codegen/train_manifest.h): what `shardc compile --train` writes into a
 * training bundle beside the program, and what `shardc train MODEL` and
 * sc_training_create start the trainer from (runtime/train_bundle.h), so
 * that a bundle and a fresh build train alike.
 *
 * From a one-rank build with opts.train (driver.h) and those options: the
 * optimizer and its hyper-parameters, the loss, the classes of the logits
 * (cross-entropy: their last dim), the precision, gradient accumulation,
 * and every trainable parameter that is an input of the program, with its
 * initial values borrowed from the model (the build must outlive the
 * manifest). Errors: SC_ERR_USAGE (not a training build, a --logits name
 * longer than the manifest holds), SC_ERR_NOMEM. */
#ifndef SC_DRIVER_TRAIN_BUNDLE_H
#define SC_DRIVER_TRAIN_BUNDLE_H

#include "codegen/train_manifest.h"
#include "driver/driver.h"

sc_status sc_build_train_manifest(const sc_build *b, const sc_train_opts *o,
                                  sc_train_manifest **out, sc_diag *d);

/* Gives back the memory of the initial values that m borrows from b's
 * graph (sc_graph_release: the importer's own raw_data blocks), once a
 * trainer has copied them into its state (`shardc train MODEL`): the step's
 * memory is then what the plan says, not that plus a second copy of the
 * weights. m's and b's pointers to the freed values become NULL, so m can
 * no longer start a trainer or be written into a bundle. Parameters that
 * stayed constants (no gradient) keep theirs: the program reads them. */
void sc_build_release_initial_weights(sc_build *b, sc_train_manifest *m);

#endif
