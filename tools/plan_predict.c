/* plan_predict.c — prints the predicted step of `shardc plan --cluster`
 * (plan_predict.h): the step time (the last pipeline rank's finish), which
 * rank that is, tokens/s, TFLOP/s per GPU and MFU, the largest rank's
 * memory against the device's, then one row per pipeline rank: compute,
 * exposed communication per group of mesh axes, bubble, recompute,
 * optimizer and their sum (the rank's finish); then the last rank's
 * collectives and sends per group (calls, bytes, the queue's busy time,
 * the exposed part: --json's "collectives"). The figures are
 * sc_dist_sim_run's; this file only formats them. */
#include <stdio.h>
#include <time.h>

#include "codegen/device_memory.h"
#include "codegen/dist_sim.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/plan_predict.h"

void sc_plan_print_predicted(const sc_dist_program *dp, const sc_plan *pl, const char *precision,
                             int64_t peak_bytes) {
  if (!pl || !pl->cluster || pl->cluster_figures.nodes < 1) return;
  const sc_cluster *c = &pl->cluster_figures;
  sc_dist_sim sim;
  sc_diag d = {0};
  sc_diag_clear(&d);
  double t0 = sc_cli_now_s();
  sc_status st = sc_dist_sim_run(dp, c, &sim, &d);
  double took = sc_cli_now_s() - t0;
  printf("\npredicted step on %s (simulated: each pipeline rank's action list, a compute queue "
         "and one queue per communicator; %.2f ms to simulate):\n", pl->cluster, took * 1e3);
  if (st != SC_OK) {
    char msg[1200];
    sc_diag_format(&d, msg, sizeof msg);
    printf("  unknown: %s\n", msg);
    return;
  }
  char a[64], b[64], axes[128];
  const sc_dist_sim_rank *cr = &sim.ranks[sim.critical];
  sc_cli_format_seconds(sim.step_time_s, a, sizeof a);
  printf("  step time:  %s (pipeline rank %d, rank %lld, finishes last)\n", a,
         (int)cr->pipe_rank, (long long)cr->rank);
  if (sim.tokens_per_s > 0) printf("  tokens/s:   %.0f\n", sim.tokens_per_s);
  sc_cluster_dtype t;
  bool known = sc_dist_sim_precision_dtype(precision, &t);
  double mfu = known ? sc_dist_sim_mfu(&sim, c, t) : 0;
  printf("  per GPU:    %.1f TFLOP/s (GEMM FLOPs); MFU ", sim.flops_per_s_per_gpu / 1e12);
  if (mfu > 0)
    printf("%.1f %% (model FLOPs: GEMMs not recomputed, over %s peak)\n", 100 * mfu,
           sc_cluster_dtype_names[t]);
  else printf("unknown (no %s peak)\n", known ? sc_cluster_dtype_names[t] : precision);
  if (peak_bytes > 0) {
    sc_stats_format_bytes((double)peak_bytes, a, sizeof a);
    if (c->device_memory_bytes > 0) {
      sc_stats_format_bytes((double)c->device_memory_bytes, b, sizeof b);
      printf("  memory:     %s on the largest rank, of %s: %s\n", a, b,
             peak_bytes <= c->device_memory_bytes ? "fits" : "does NOT fit");
    } else
      printf("  memory:     %s on the largest rank (the device's memory is unknown)\n", a);
  }
  /* the groups any rank waited for or used, first seen first */
  sc_axes cols[SC_DIST_SIM_MAX_GROUPS];
  int32_t n_cols = 0;
  for (int32_t q = 0; q < sim.n_ranks; q++)
    for (int32_t j = 0; j < sim.ranks[q].n_comm; j++) {
      int32_t k = 0;
      while (k < n_cols && cols[k] != sim.ranks[q].comm[j].axes) k++;
      if (k == n_cols && n_cols < SC_DIST_SIM_MAX_GROUPS) cols[n_cols++] = sim.ranks[q].comm[j].axes;
    }
  printf("  %-8s %-6s %12s", "pp rank", "rank", "compute");
  for (int32_t k = 0; k < n_cols; k++) {
    char h[160];
    sc_cli_format_axes(&dp->mesh, cols[k], axes, sizeof axes);
    snprintf(h, sizeof h, "comm %s", axes);
    printf(" %12s", h);
  }
  bool copies = false; /* activation offloading's copy queue */
  for (int32_t q = 0; q < sim.n_ranks; q++) copies |= sim.ranks[q].copy_s > 0;
  if (copies) printf(" %12s", "copies");
  printf(" %12s %12s %12s %12s\n", "bubble", "recompute", "optimizer", "total");
  for (int32_t q = 0; q < sim.n_ranks; q++) {
    const sc_dist_sim_rank *r = &sim.ranks[q];
    sc_cli_format_seconds(r->compute_s, a, sizeof a);
    printf("  %-8d %-6lld %12s", (int)r->pipe_rank, (long long)r->rank, a);
    for (int32_t k = 0; k < n_cols; k++) {
      double s = 0;
      for (int32_t j = 0; j < r->n_comm; j++)
        if (r->comm[j].axes == cols[k]) s = r->comm[j].exposed_s;
      sc_cli_format_seconds(s, a, sizeof a);
      printf(" %12s", a);
    }
    if (copies) {
      sc_cli_format_seconds(r->exposed_copy_s, a, sizeof a);
      printf(" %12s", a);
    }
    double terms[4] = {r->bubble_s, r->recompute_s, r->optimizer_s, r->finish_s};
    for (int i = 0; i < 4; i++) {
      sc_cli_format_seconds(terms[i], a, sizeof a);
      printf(" %12s", a);
    }
    printf("\n");
  }
  printf("  comm: exposed communication (what compute waited for; async collectives hidden "
         "behind compute are not counted); bubble: waiting for a neighbour's hand-off\n");
  for (int32_t q = 0; copies && q < sim.n_ranks; q++) {
    const sc_dist_sim_rank *r = &sim.ranks[q];
    if (r->copy_s <= 0) continue;
    sc_cli_format_seconds(r->copy_s, a, sizeof a);
    sc_stats_format_bytes(r->copy_bytes, b, sizeof b);
    printf("  copies: pipeline rank %d moves %s (%.0f bytes) a step over the host link (out "
           "and back) in %s on its copy queue beside compute; the column is what compute "
           "waited for\n",
           (int)r->pipe_rank, b, r->copy_bytes, a);
  }
  /* the last rank's collectives and sends per group (--json's
   * "predicted": "collectives") */
  bool any = false;
  for (int32_t j = 0; j < cr->n_comm; j++) any |= cr->comm[j].ops > 0;
  if (!any) return;
  printf("  collectives of pipeline rank %d, rank %lld, a step (calls, their bytes, the queue's "
         "busy time, what compute waited for):\n", (int)cr->pipe_rank, (long long)cr->rank);
  printf("    %-12s %10s %18s %12s %12s\n", "group", "calls", "bytes", "busy", "exposed");
  for (int32_t j = 0; j < cr->n_comm; j++) {
    const sc_dist_sim_comm *cm = &cr->comm[j];
    if (cm->ops <= 0) continue;
    sc_cli_format_axes(&dp->mesh, cm->axes, axes, sizeof axes);
    sc_cli_format_seconds(cm->busy_s, a, sizeof a);
    sc_cli_format_seconds(cm->exposed_s, b, sizeof b);
    printf("    %-12s %10lld %18.0f %12s %12s\n", axes, (long long)cm->ops, cm->bytes, a, b);
  }
}
