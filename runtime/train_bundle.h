/* train_bundle.h — a trainer (runtime/trainer.h) for a training step
 * described by its manifest (codegen/train_manifest.h): the one way both a
 * training bundle (runtime/bundle.h: sc_bundle.train, with its kernels.o)
 * and a freshly built step (driver/train_bundle.h) start training, so the
 * two run the same way.
 *
 * The parameters start from the manifest's initial values (copied), the
 * optimizer's bias corrections use its betas; o gives the rest (threads,
 * the first loss scale, the compiled kernels) and may be NULL. Errors as
 * sc_trainer_create's. */
#ifndef SC_RUNTIME_TRAIN_BUNDLE_H
#define SC_RUNTIME_TRAIN_BUNDLE_H

#include "codegen/train_manifest.h"
#include "runtime/trainer.h"

sc_status sc_trainer_create_manifest(const sc_program *p, const sc_train_manifest *m,
                                     const sc_trainer_opts *o, sc_trainer **out, sc_diag *d);

#endif
