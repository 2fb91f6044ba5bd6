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
 * pieces read and update it there). The one setup of `plan --train` and of
 * `plan --auto`'s exact check, so that a plan's figures and page are the
 * same whichever command built it. */
void sc_plan_train_setup(sc_build_setup *bs, const sc_device_target *target);

/* b: a build with opts.train and codegen (one rank, a mesh, or a pipelined
 * step: then per pipeline rank, and with table every rank's action list).
 * target: what the device's own memory beside the arena is planned for
 * (codegen/device_memory.h; one rank's step). 0 or 1 (error printed). */
int sc_plan_train_report(const sc_build *b, const sc_train_opts *t, bool json, bool table,
                         const char *file, const sc_device_target *target);

/* One rank's memory in the training step (plan_predict.h's
 * sc_rank_memory), as the reports count it, in parts that sum to total:
 * per pipeline rank (a pipelined step) the one arena its pieces share, the
 * state it keeps, the handed-over values it keeps at once (its stash and
 * the step's values) and the device's lines beside the arena; else the one
 * program's classes live at the peak (driver/train_memory.h), what
 * placement loses, the device's workspace reserved in the arena (a CUDA
 * target's cuBLASLt workspace), the constants and the device's lines. */
/* b's ranks' memory into a new sc_malloc'd array (*out, *n rows: one per
 * pipeline rank, or one). Errors: the memory plan's. */
sc_status sc_plan_train_rank_memory(const sc_build *b, const sc_device_target *target,
                                    sc_rank_memory **out, int32_t *n, sc_diag *d);

/* The exact predicted step of b on its plan's cluster, into
 * b->plan->predicted: codegen/dist_sim.h's simulated step
 * (sc_dist_sim_to_plan) with the largest rank's memory as the report
 * counts it (per pipeline rank its one arena, state, stash and device lines;
 * else one rank's arena, constants and device lines on target) and the MFU
 * in the step's precision. The one path of `plan --train --cluster` and of
 * the search's chosen plan (plan_auto.c): they agree by construction.
 * Nothing without a cluster. Errors: the memory plan's. */
sc_status sc_plan_train_predict(const sc_build *b, const sc_train_opts *t,
                                const sc_device_target *target, sc_diag *d);

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
