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
/* Whether argv holds --auto (before a "--"). */
bool sc_plan_auto_asked(int argc, char **argv);

#endif
