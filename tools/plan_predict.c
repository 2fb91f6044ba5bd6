/* plan_predict.c — prints the predicted step of `shardc plan --cluster`
 * (plan_predict.h): per pipeline rank its compute time, its communication
 * time per group of mesh axes and their sum; then the step time (the
 * slowest rank) and, when the model's token ids say the batch and the
 * sequence, tokens/s and TFLOP/s per GPU. The figures are
 * sc_dist_cost_predict's; this file only formats them. */
#include <stdio.h>

#include "codegen/dist_cost.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/plan_predict.h"

static void fmt_time(double s, char *buf, size_t n) {
  if (s >= 1) snprintf(buf, n, "%.3f s", s);
  else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
  else snprintf(buf, n, "%.3f us", s * 1e6);
}

void sc_plan_print_predicted(const sc_dist_program *dp, const sc_plan *pl) {
  if (!pl || !pl->cluster || pl->cluster_figures.nodes < 1) return;
  printf("\npredicted step on %s (no overlap: compute and communication summed; overlap, "
         "pipeline bubbles and the schedule's critical path are not simulated):\n",
         pl->cluster);
  sc_dist_cost cost;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_dist_cost_predict(dp, &pl->cluster_figures, &cost, &d) != SC_OK) {
    char msg[1200];
    sc_diag_format(&d, msg, sizeof msg);
    printf("  unknown: %s\n", msg);
    return;
  }
  char a[64], b[64], c[64], e[64], axes[128];
  printf("  %-9s %-6s %12s %14s %12s %12s\n", "pp rank", "rank", "compute", "FLOPs",
         "comm", "total");
  for (int32_t q = 0; q < cost.n_rows; q++) {
    const sc_dist_cost_row *r = &cost.rows[q];
    fmt_time(r->compute_s, a, sizeof a);
    sc_stats_format_si(r->flops, "FLOP", b, sizeof b);
    fmt_time(r->comm_s, c, sizeof c);
    fmt_time(r->step_s, e, sizeof e);
    printf("  %-9d %-6lld %12s %14s %12s %12s\n", r->pipe_rank, (long long)r->rank, a, b, c, e);
    for (int32_t j = 0; j < r->n_comm; j++) {
      const sc_dist_cost_comm *cm = &r->comm[j];
      sc_cli_format_axes(&dp->mesh, cm->axes, axes, sizeof axes);
      sc_stats_format_bytes(cm->bytes, b, sizeof b);
      fmt_time(cm->seconds, c, sizeof c);
      printf("    comm over %-10s %6lld ops %12s %12s\n", axes, (long long)cm->ops, b, c);
    }
  }
  fmt_time(cost.step_time_s, a, sizeof a);
  printf("  step time:  %s (the slowest rank; summed, not simulated)\n", a);
  if (cost.step_time_s > 0) {
    printf("  per GPU:    %.1f TFLOP/s (GEMM FLOPs)\n", cost.flops_per_s_per_gpu / 1e12);
    if (cost.tokens_per_s > 0) printf("  tokens/s:   %.0f\n", cost.tokens_per_s);
  }
}
