/* check_run.h — the checks of `shardc check` that run what was built
 * (docs/ci.md): the partitioned training step against one rank on the CPU
 * (equivalence) and the bundle written twice (reproducible). Each records
 * its outcome in a report (driver/check.h): passed, or failed with the
 * reason; never skipped (whether to run them is the caller's: a mesh, the
 * weights, the host's memory). The builds are the caller's (`shardc check`
 * builds them as `shardc train` and `shardc compile` do) and are only read.
 *
 * Equivalence: SC_CHECK_EQUIV_STEPS steps of both, lr 1e-3 (shardc
 * train's default), one pool thread per rank, from the same seeded data:
 * float inputs uniform in [-1, 1), integer inputs (labels, token ids) in
 * [0, classes) (2 without); the tolerances of tests/models/
 * test_train_dist.py (both sides sum in fp32 in different orders): every
 * loss and gradient norm within rtol 2e-5, every trained weight within
 * 2e-4 of its tensor's largest update with SGD (the update is linear in
 * the gradient), 2e-2 with AdamW (m/(sqrt(v) + eps) turns the rounding
 * noise of a gradient element near zero into up to lr); with AdamW the
 * first moments too, within 2e-4 of their tensor's largest (linear in the
 * gradients), and an element whose first moment is under 1e-4 of its
 * tensor's largest is left out of the weights' comparison: its update's
 * direction is the rounding's (the key bias of an attention has a zero
 * gradient in exact arithmetic: softmax ignores a shift of a row; the
 * fused attention's backward rounds it differently from the unfused
 * one's, so AdamW moved it by different whole steps); NaN fails.
 *
 * Not thread-safe (the bundles' hashing walks a tree with nftw). */
#ifndef SC_API_CHECK_RUN_H
#define SC_API_CHECK_RUN_H

#include "driver/check.h"
#include "driver/driver.h"

enum { SC_CHECK_EQUIV_STEPS = 3 };

/* mesh and one: training builds of the same model with the step's options
 * t, over a mesh of 2 or more ranks and on one rank. Sets
 * SC_CHECK_EQUIVALENCE of r. */
void sc_check_equivalence(sc_check_report *r, const sc_build *mesh, const sc_build *one,
                          const sc_train_opts *t);
/* first and second: the same model built twice (training builds when t,
 * else NULL), written as `shardc compile` writes them (cpu; partitioned
 * when built so) under $TMPDIR (or /tmp), each file's SHA-256 compared;
 * model: the bundles' model name (its path: the base name is kept). Sets
 * SC_CHECK_REPRODUCIBLE of r and adds the first bundle's files and hashes
 * as r's artifacts. */
void sc_check_reproducible(sc_check_report *r, const sc_build *first, const sc_build *second,
                           const sc_train_opts *t, const char *model);

#endif
