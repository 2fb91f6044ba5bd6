/* plan_train.h — `shardc plan MODEL --train`: the memory of one training
 * step (driver/train_memory.h), as text or JSON (docs/cli.md#plan). */
#ifndef SC_TOOLS_PLAN_TRAIN_H
#define SC_TOOLS_PLAN_TRAIN_H

#include <stdbool.h>

#include "codegen/device_memory.h"
#include "driver/driver.h"

/* b: a build with opts.train and codegen (one rank, a mesh, or a pipelined
 * step: then per pipeline rank, and with table every rank's action list).
 * target: what the device's own memory beside the arena is planned for
 * (codegen/device_memory.h; one rank's step). 0 or 1 (error printed). */
int sc_plan_train_report(const sc_build *b, const sc_train_opts *t, bool json, bool table,
                         const char *file, const sc_device_target *target);

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

#endif
