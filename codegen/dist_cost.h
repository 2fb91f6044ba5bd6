/* dist_cost.h — the predicted time of a distributed program's step on a
 * cluster, compute and communication summed per rank (docs/planner.md,
 * "Cost model": the first piece).
 *
 * Every step of every stage program gets a time from the formulas of
 * passes/plan/cost.h: a GEMM step its roofline from its own shape (2 x
 * batch x m x n x k FLOPs, its operands' bytes) in its operands' dtype; a
 * kernel, check or scatter step the bytes of the buffers it touches over
 * the HBM bandwidth (memory-bound: kernels carry no FLOP count); a COMM
 * step its collective over its group's link (the placement: intra-node or
 * the network), on the sender and on the receiver alike; a WAIT nothing.
 * A program runs once per microbatch (a pipelined step's NORM and UPDATE
 * pieces once per step). One row per pipeline rank (the rank with every
 * other coordinate 0; every rank of a stage runs the same program): its
 * compute time, its communication time per group of mesh axes, their sum.
 *
 * What this does NOT do: overlap (an async collective costs as if it ran
 * alone), the pipeline's bubbles and the schedule's critical path (the
 * step time is the slowest row, a lower bound for a pipeline): simulating
 * each rank's action list is the next piece. Nothing is stored; the
 * result owns no pointers. Errors: the cost formulas' (a figure the
 * cluster does not know, a dtype without a peak), prefixed with the stage,
 * step and node. */
#ifndef SC_CODEGEN_DIST_COST_H
#define SC_CODEGEN_DIST_COST_H

#include "codegen/dist_program.h"
#include "passes/plan/cost.h"
#include "passes/plan/plan.h"

enum { SC_DIST_COST_MAX_ROWS = 64, SC_DIST_COST_MAX_GROUPS = 16 };

typedef struct sc_dist_cost_comm {
  sc_axes axes;     /* the group's mesh axes */
  int64_t ops;      /* collectives per step */
  double bytes;     /* their buffers' bytes (B of cost.h), per step */
  double seconds;   /* their time, per step */
} sc_dist_cost_comm;

typedef struct sc_dist_cost_row {
  int64_t rank;                 /* the row's rank */
  int32_t pipe_rank;            /* its pipeline coordinate */
  double flops;                 /* GEMM FLOPs per step */
  double compute_s;             /* every compute step, per step */
  double comm_s;                /* every COMM step, per step */
  double step_s;                /* compute_s + comm_s */
  int32_t n_comm;
  sc_dist_cost_comm comm[SC_DIST_COST_MAX_GROUPS]; /* by group, first seen first */
} sc_dist_cost_row;

typedef struct sc_dist_cost {
  int32_t n_rows;
  sc_dist_cost_row rows[SC_DIST_COST_MAX_ROWS];
  int32_t slowest;      /* the row with the largest step_s */
  double step_time_s;   /* rows[slowest].step_s */
  double tokens;        /* per step: batch x sequence of the first integer
                           input of rank >= 2 (token ids), 0 when none */
  double tokens_per_s;  /* tokens / step_time_s, 0 when either is unknown */
  double flops_per_s_per_gpu; /* the rows' mean GEMM FLOPs / step_time_s */
} sc_dist_cost;

/* The step of dp on c, compute and communication summed (above). dp's mesh
 * must carry the cluster's ranks per node (sc_cluster_fit_mesh). */
sc_status sc_dist_cost_predict(const sc_dist_program *dp, const sc_cluster *c,
                               sc_dist_cost *out, sc_diag *d);
/* pl->predicted from the step of dp on pl's cluster (pl->cluster_figures):
 * the slowest rank's figures, or `unknown` saying which figure is missing.
 * Leaves it off when pl has no cluster figures. */
void sc_dist_cost_to_plan(const sc_dist_program *dp, sc_plan *pl);

#endif
