/* rank_memory.c — one rank's memory as the reports count it, and the
 * exact predicted step with the largest rank's (rank_memory.h). An
 * inference stage: the device's lines on the target and the weights; a
 * pipelined training step: per pipeline rank its pieces' one arena, the
 * state it keeps, the values handed over and kept, the device's lines; an
 * unpipelined one: the arena's classes at the peak (train_memory.h), what
 * placement loses, the constants and the device's lines. */
#include "driver/rank_memory.h"

#include <stdio.h>
#include <string.h>

#include "codegen/train_manifest.h"

static void add_part(sc_rank_memory *m, const char *name, int64_t bytes) {
  if (m->n_parts < SC_RANK_MEMORY_MAX_PARTS) {
    m->parts[m->n_parts].name = name;
    m->parts[m->n_parts++].bytes = bytes;
  }
  m->total += bytes;
}

sc_status sc_plan_stage_memory(const sc_dist_program *dp, const sc_device_target *t,
                               sc_rank_memory **out, int32_t *n, sc_diag *d) {
  *out = NULL;
  *n = 0;
  sc_rank_memory *m = sc_calloc(dp->n_stages > 0 ? (size_t)dp->n_stages : 1, sizeof *m);
  if (!m) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    snprintf(m[s].rank, sizeof m[s].rank, dp->n_stages > 1 ? "stage %d" : "rank 0", (int)s);
    if (!p) continue;
    sc_device_memory dm;
    sc_status st = sc_device_memory_plan(p, t, &dm, d);
    if (st != SC_OK) {
      sc_free(m);
      return st;
    }
    for (int l = 0; l < SC_MEM_LINE_COUNT; l++)
      if (dm.bytes[l]) add_part(&m[s], sc_mem_line_name((sc_mem_line)l), dm.bytes[l]);
    int64_t w = 0;
    for (int32_t i = 0; i < p->n_buffers; i++)
      if (p->buffers[i].kind == SC_BUF_CONST) w += p->buffers[i].bytes;
    add_part(&m[s], "weights", w);
  }
  *out = m;
  *n = dp->n_stages;
  return SC_OK;
}

int64_t sc_plan_peak_rank_bytes(const sc_dist_program *dp, const sc_device_target *t) {
  sc_rank_memory *m = NULL;
  int32_t n = 0;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_plan_stage_memory(dp, t, &m, &n, &d) != SC_OK) return 0;
  int64_t most = 0;
  for (int32_t s = 0; s < n; s++)
    if (m[s].total > most) most = m[s].total;
  sc_free(m);
  return most;
}

/* The schedule's stash formula for pipeline rank q (codegen/pipe_schedule.h). */
static int32_t stash_formula(sc_schedule_kind k, int32_t P, int32_t V, int32_t M, int32_t q) {
  if (k == SC_SCHEDULE_GPIPE) return M;
  int32_t warm = k != SC_SCHEDULE_INTERLEAVED ? P - q - 1 : (P - q - 1) * 2 + (V - 1) * P;
  return warm + 1 < M * V ? warm + 1 : M * V;
}

sc_status sc_pipe_row_of(const sc_dist_program *dp, const sc_pipe_handoffs *ho, int32_t q,
                         const sc_device_target *target, sc_pipe_row *r, sc_diag *d) {
  int32_t P = dp->pipe_ranks, C = dp->pipe_chunks, M = dp->schedule.microbatches;
  memset(r, 0, sizeof *r);
  r->q = q;
  r->arena = sc_pipe_arena_bytes(dp, q);
  sc_status st = sc_pipe_schedule((sc_schedule_kind)dp->schedule.kind, P, C / P, M, q, &r->acts,
                                  &r->n_acts, d);
  if (st != SC_OK) return st;
  sc_name_index seen; /* the state the rank's pieces read, each once */
  sc_name_index_init(&seen);
  for (int32_t s = 0; s < dp->n_stages && st == SC_OK; s++) {
    if (sc_pipe_piece_chunk(C, s) % P != q) continue;
    const sc_program *p = dp->stages[s].program;
    sc_device_memory dm;
    if ((st = sc_device_memory_plan(p, target, &dm, d)) != SC_OK) break;
    if (target->device && !strcmp(target->device, "cuda")) {
      /* each piece is a session of its own: its CUDA device's workspace and
       * weights, its own communicators; the process has one context */
      for (int l = 1; l < SC_MEM_LINE_COUNT; l++)
        r->dev.bytes[l] = l == SC_MEM_CUDA_CONTEXT
                              ? (dm.bytes[l] > r->dev.bytes[l] ? dm.bytes[l] : r->dev.bytes[l])
                              : r->dev.bytes[l] + dm.bytes[l];
      r->outside = sc_device_memory_outside(&r->dev);
    } else if (sc_device_memory_outside(&dm) > r->outside) {
      r->outside = sc_device_memory_outside(&dm);
      r->dev = dm;
    }
    for (int32_t i = 0; i < p->n_inputs; i++) {
      const sc_buffer *b = &p->buffers[p->inputs[i]];
      if (!sc_dist_is_state(dp, b->name) || sc_name_index_find(&seen, b->name) >= 0) continue;
      if (sc_name_index_add(&seen, b->name) != SC_OK) {
        st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
        break;
      }
      r->state += b->bytes;
      r->state_by[strncmp(b->name, "accum:", 6) == 0        ? 1
                  : sc_train_is_optimizer_state(b->name) ? 2
                                                         : 0] += b->bytes;
    }
    if (st != SC_OK) break;
    sc_train_comm *cm = NULL;
    int32_t n_cm = 0;
    if ((st = sc_train_comm_of(p, &cm, &n_cm, d)) != SC_OK) break;
    int64_t times = sc_pipe_per_mb(sc_pipe_piece_phase(C, s)) ? M : 1;
    for (int32_t i = 0; i < n_cm; i++) r->coll += times * cm[i].sent;
    sc_free(cm);
  }
  sc_name_index_free(&seen);
  if (st != SC_OK) return st;
  r->from = sc_calloc((size_t)r->n_acts + 1, sizeof *r->from);
  r->to = sc_calloc((size_t)r->n_acts + 1, sizeof *r->to);
  if (!r->from || !r->to) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_pipe_traffic_peaks pk, without;
  if ((st = sc_pipe_traffic(ho, dp, q, r->acts, r->n_acts, true, &pk, r->from, r->to, d)))
    return st;
  /* the figures without offloading: the same walk when nothing is
   * offloaded (no copy out, no copy back), so not walked again */
  if (dp->schedule.n_offload == 0) without = pk;
  else if ((st = sc_pipe_traffic(ho, dp, q, r->acts, r->n_acts, false, &without, NULL, NULL, d)))
    return st;
  r->stash = pk.stash;
  r->step = pk.step;
  r->kept = pk.kept;
  r->p2p = pk.sent;
  r->host = pk.host;
  r->off_values = pk.offloaded_values;
  r->off_bytes = pk.offloaded_bytes;
  r->stash_without = without.stash;
  r->kept_without = without.kept;
  r->stashed = sc_pipe_peak_stash(r->acts, r->n_acts);
  r->formula = stash_formula((sc_schedule_kind)dp->schedule.kind, P, C / P, M, q);
  return SC_OK;
}

void sc_pipe_row_free(sc_pipe_row *r) {
  sc_free(r->acts);
  sc_free(r->from);
  sc_free(r->to);
  r->acts = NULL;
  r->from = r->to = NULL;
  r->n_acts = 0;
}

sc_status sc_train_rows_walk(const sc_build *b, const sc_device_target *target,
                             sc_pipe_row_fn pipe, sc_program_row_fn one, void *ctx, sc_diag *d) {
  const sc_dist_program *dp = b->program;
  sc_status st = SC_OK;
  if (dp->pipe_chunks > 0) {
    sc_pipe_handoffs ho;
    st = sc_pipe_handoffs_of(dp, &ho, d);
    for (int32_t q = 0; st == SC_OK && q < dp->pipe_ranks; q++) {
      sc_pipe_row r;
      if ((st = sc_pipe_row_of(dp, &ho, q, target, &r, d)) == SC_OK) pipe(&r, ctx);
      sc_pipe_row_free(&r);
    }
    sc_pipe_handoffs_free(&ho);
  } else {
    const sc_program *p = dp->stages[0].program;
    sc_train_memory m;
    sc_device_memory dm;
    st = sc_train_memory_of(p, &m, d);
    if (st == SC_OK) st = sc_device_memory_plan(p, target, &dm, d);
    if (st == SC_OK)
      one(&m, p->workspace_bytes > 0 ? p->workspace_bytes : 0, sc_device_memory_outside(&dm), ctx);
  }
  return st;
}

static void pipe_parts(const sc_pipe_row *r, void *ctx) {
  sc_rank_memory *m = (sc_rank_memory *)ctx + r->q;
  snprintf(m->rank, sizeof m->rank, "pipeline rank %d", (int)r->q);
  add_part(m, "arena", r->arena);
  add_part(m, "state", r->state);
  add_part(m, "stash", r->kept);
  add_part(m, "device", r->outside);
}

static void program_parts(const sc_train_memory *tm, int64_t workspace, int64_t outside,
                          void *ctx) {
  sc_rank_memory *m = ctx;
  snprintf(m->rank, sizeof m->rank, "rank 0");
  for (int c = 0; c < SC_MEM_CLASS_COUNT; c++)
    add_part(m, sc_mem_class_name((sc_mem_class)c), tm->live[c]);
  /* cuBLASLt's workspace, reserved above every value (program.h), is not
   * placement's loss: a part of its own */
  add_part(m, "placement", tm->arena - workspace - tm->peak_live);
  if (workspace) add_part(m, "gemm workspace", workspace);
  add_part(m, "constants", tm->constants);
  add_part(m, "device", outside);
}

sc_status sc_plan_train_rank_memory(const sc_build *b, const sc_device_target *target,
                                    sc_rank_memory **out, int32_t *n, sc_diag *d) {
  const sc_dist_program *dp = b->program;
  int32_t rows = dp->pipe_chunks > 0 ? dp->pipe_ranks : 1;
  sc_rank_memory *m = sc_calloc((size_t)rows, sizeof *m);
  *out = NULL;
  *n = 0;
  if (!m) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_train_rows_walk(b, target, pipe_parts, program_parts, m, d);
  if (st != SC_OK) {
    sc_free(m);
    return st;
  }
  *out = m;
  *n = rows;
  return SC_OK;
}

/* Whether b's plan is on a cluster whose figures are known (a step to
 * predict). */
static bool on_cluster(const sc_build *b) {
  const sc_plan *pl = b->plan;
  return pl && pl->cluster && pl->cluster_figures.nodes >= 1;
}

void sc_plan_infer_predict(const sc_build *b, const sc_device_target *target) {
  sc_build_predict(b, NULL, on_cluster(b) ? sc_plan_peak_rank_bytes(b->program, target) : 0);
}

sc_status sc_plan_train_predict(const sc_build *b, const sc_train_opts *t,
                                const sc_device_target *target, sc_diag *d) {
  if (!on_cluster(b)) return SC_OK;
  sc_rank_memory *m;
  int32_t n;
  int64_t peak = 0;
  sc_status st = sc_plan_train_rank_memory(b, target, &m, &n, d);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < n; i++)
    if (m[i].total > peak) peak = m[i].total;
  sc_free(m);
  sc_build_predict(b, t, peak);
  return SC_OK;
}

void sc_compile_opts_report(sc_compile_opts *co, const sc_device_target *target, bool train) {
  sc_compile_opts_target(co, target);
  co->bind_state = train && target && target->device && strcmp(target->device, "cpu") == 0;
}
