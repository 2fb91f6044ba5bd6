/* plan_predict.h — the "predicted" block of `shardc plan --cluster`: the
 * simulated step of the compiled distributed program on the plan's cluster
 * (codegen/dist_sim.h), printed as text. Shared by the inference and the
 * training reports. */
#ifndef SC_TOOLS_PLAN_PREDICT_H
#define SC_TOOLS_PLAN_PREDICT_H

#include "codegen/dist_program.h"
#include "driver/rank_memory.h"
#include "passes/plan/plan.h"

/* Prints the block when pl was put on a cluster whose figures are known
 * (nothing otherwise); a cost that needs a figure the cluster does not
 * know prints why instead (the report stays useful). precision names the
 * dtype of the MFU's peak (sc_dist_sim_precision_dtype); peak_bytes is the
 * largest rank's exact memory, device lines included (0: not computed). */
void sc_plan_print_predicted(const sc_dist_program *dp, const sc_plan *pl, const char *precision,
                             int64_t peak_bytes);

#endif
