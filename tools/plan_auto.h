/* plan_auto.h — `shardc plan MODEL --train --auto --cluster C
 * --global-batch B`: the planner's search (passes/plan/search.h) on the
 * model's block model, the chosen plan compiled and evaluated exactly
 * (plan_train.h's sc_plan_train_predict, as `plan --train --mesh` does),
 * printed as text or JSON (docs/cli.md#plan-auto). */
#ifndef SC_TOOLS_PLAN_AUTO_H
#define SC_TOOLS_PLAN_AUTO_H

#include <stdbool.h>

/* The whole command (argv as sc_cmd_plan's, "--auto" among them). Exit
 * status: 0, 1 (an error in the model, the cluster, or no plan fits), 2
 * (usage). */
int sc_cmd_plan_auto(int argc, char **argv);
/* Whether argv holds --auto, --mesh auto or --estimate (before a "--"):
 * the commands sc_cmd_plan_auto runs. */
bool sc_plan_auto_asked(int argc, char **argv);

/* --mesh auto (or --auto) in run, compile and train: the search of
 * `plan --auto` (inference when ta is NULL, by latency: the batch is o's
 * batch dim, 1 when unbound; training with ta's step options, the global
 * batch o's batch dim) on --cluster, or on this machine (cpu:local with
 * the ranks the command runs, measured by a quick calibration when it has
 * no figures: said on stderr). The chosen plan goes into p (its mesh,
 * microbatches, sequence parallelism; for training ZeRO, the schedule and
 * ta's recompute) and is said in two lines on stderr; the command then
 * builds it as it builds --mesh. p->auto_plan must be set. Exit status:
 * 0, 1 (the model, the cluster, no plan fits), 2 (usage: other
 * partitioning options, --objective throughput or with training). */
struct sc_partition_args;
struct sc_cli_opts;
struct sc_train_args;
int sc_plan_auto_resolve(struct sc_partition_args *p, const struct sc_cli_opts *o,
                         struct sc_train_args *ta);

#endif
