/* plan_train.h — `shardc plan MODEL --train`: the memory of one training
 * step (driver/train_memory.h), as text or JSON (docs/cli.md#plan). */
#ifndef SC_TOOLS_PLAN_TRAIN_H
#define SC_TOOLS_PLAN_TRAIN_H

#include <stdbool.h>

#include "codegen/device_memory.h"
#include "driver/driver.h"
#include "tools/partition_args.h"
#include "tools/plan_html.h"
#include "tools/plan_predict.h"

/* The build options of a training plan for target, as `shardc train`
 * compiles for it: on a GPU (target->device "cuda") cuBLASLt's workspace
 * in the arena; on the CPU the state bound in place (a pipeline rank's
 * pieces read and update it there): sc_compile_opts_report
 * (driver/rank_memory.h). The one setup of `plan --train` and of
 * `plan --auto`'s exact check, as the API's training plan reports compile
 * too, so that a plan's figures and page are the same whichever built it. */
void sc_plan_train_setup(sc_build_setup *bs, const sc_device_target *target);

/* b: a build with opts.train and codegen (one rank, a mesh, or a pipelined
 * step: then per pipeline rank, and with table every rank's action list).
 * target: what the device's own memory beside the arena is planned for
 * (codegen/device_memory.h; one rank's step). 0 or 1 (error printed). */
int sc_plan_train_report(const sc_build *b, const sc_train_opts *t, bool json, bool table,
                         const char *file, const sc_device_target *target);

/* The ranks' memory (sc_plan_train_rank_memory) and the exact predicted
 * step (sc_plan_train_predict) are driver/rank_memory.h's: the one path of
 * `plan --train --cluster`, the search's chosen plan (plan_auto.c),
 * `check` and the API's sc_training_plan_json. */

/* The plan's page (plan_html.h) of a training build b, written to path:
 * the predicted step (sc_plan_train_predict), one memory bar per pipeline
 * rank (its state as parameters, gradient accumulators and optimizer
 * state; the arena its pieces share as workspace; the handed-over values it keeps
 * as stash; the device's lines) or, unpipelined, one for every rank (the
 * arena's classes at the peak), the timeline and collectives when b's plan
 * has a cluster, and candidates (NULL: none; plan --auto's table).
 * command titles the page ("shardc plan --train"); file names the model.
 * `shardc check` writes its page with this. Errors: the memory plan's,
 * the page's (SC_ERR_IO naming path). */
sc_status sc_plan_train_html(const sc_build *b, const sc_train_opts *t,
                             const sc_device_target *target, const char *file,
                             const char *command, const sc_plan_html_candidate *candidates,
                             int32_t n_candidates, const char *path, sc_diag *d);

#endif
