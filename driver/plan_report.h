/* plan_report.h — what a partitioned build asks of each rank, as data.
 *
 * From the stage programs of a build (driver.h, built with codegen: the
 * memory plan, no JIT): per stage, the memory of one of its ranks (the
 * ranks of a stage run one program) — weights (the CONST buffers, local
 * shapes), the activation arena, and within the arena the most any one
 * COMM step's pack + unpack scratch needs — and the collectives a rank
 * runs per microbatch, one row per (stage, op, axes): how many, and their
 * bytes (each the larger of its input and output). Rows are sorted by
 * stage, op, then axes. `shardc plan` prints this (tools/plan.c);
 * sc_plan_report_json (include/shardc.h) returns it as JSON. */
#ifndef SC_DRIVER_PLAN_REPORT_H
#define SC_DRIVER_PLAN_REPORT_H

#include "codegen/program.h"
#include "driver/driver.h"

typedef struct sc_stage_memory {
  int64_t weight_bytes;  /* CONST buffers */
  int64_t arena_bytes;   /* the activation arena, comm scratch included */
  int64_t comm_bytes;    /* the largest pack + unpack of one COMM step */
} sc_stage_memory;

typedef struct sc_collective_row {
  int32_t stage;
  sc_comm_kind kind;
  sc_axes axes;
  int64_t ops;           /* steps of this kind on these axes */
  int64_t bytes;         /* per microbatch */
} sc_collective_row;

typedef struct sc_plan_report {
  int32_t n_stages;
  sc_stage_memory *mem;  /* [n_stages] */
  sc_collective_row *coll;
  int32_t n_coll;
} sc_plan_report;

/* "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Send", "Recv". */
extern const char *const sc_comm_kind_names[SC_COMM_KIND_COUNT];

/* Fills *r from build b's stage programs (a stage without a program is
 * all zero). SC_ERR_NOMEM; *r is freed with sc_plan_report_free either
 * way. */
sc_status sc_plan_report_gather(const sc_build *b, sc_plan_report *r);
void sc_plan_report_free(sc_plan_report *r);

#endif
