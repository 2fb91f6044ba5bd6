/* plan_predict.h — the "predicted" block of `shardc plan --cluster`: the
 * simulated step of the compiled distributed program on the plan's cluster
 * (codegen/dist_sim.h), printed as text. Shared by the inference and the
 * training reports. */
#ifndef SC_TOOLS_PLAN_PREDICT_H
#define SC_TOOLS_PLAN_PREDICT_H

#include "codegen/device_memory.h"
#include "codegen/dist_program.h"
#include "passes/plan/plan.h"

/* Prints the block when pl was put on a cluster whose figures are known
 * (nothing otherwise); a cost that needs a figure the cluster does not
 * know prints why instead (the report stays useful). precision names the
 * dtype of the MFU's peak (sc_dist_sim_precision_dtype); peak_bytes is the
 * largest rank's exact memory, device lines included (0: not computed). */
void sc_plan_print_predicted(const sc_dist_program *dp, const sc_plan *pl, const char *precision,
                             int64_t peak_bytes);

/* One rank's memory as the reports (plan's tables, check's `fits` and
 * its report's memory/RANK/PART figures, the pages' bars) count it, in
 * parts that sum to total. parts[].name are static strings. */
enum { SC_RANK_MEMORY_MAX_PARTS = 16 };
typedef struct sc_rank_memory {
  char rank[48];  /* "pipeline rank 1", "stage 1", "rank 0" (every rank alike) */
  int64_t total;
  int32_t n_parts;
  struct {
    const char *name;
    int64_t bytes;
  } parts[SC_RANK_MEMORY_MAX_PARTS];
} sc_rank_memory;

/* An inference plan's memory per stage (the ranks of a stage run the same
 * program): every line of the device's memory (codegen/device_memory.h on
 * target t: the arena, and on a CUDA target its workspace, the weights'
 * padding, the context, NCCL's buffers) and the weights (CONST buffers),
 * as plan's per-rank memory table prints them; into a new sc_malloc'd
 * array (*out, *n = dp->n_stages rows, "rank 0" for one stage). Errors:
 * the device memory plan's. */
sc_status sc_plan_stage_memory(const sc_dist_program *dp, const sc_device_target *t,
                               sc_rank_memory **out, int32_t *n, sc_diag *d);

/* The largest of sc_plan_stage_memory's totals; 0 when a stage's lines
 * cannot be had. */
int64_t sc_plan_peak_rank_bytes(const sc_dist_program *dp, const sc_device_target *t);

#endif
