/* dist_cost.c — a distributed program's step, costed step by step on a
 * cluster and summed per pipeline rank (dist_cost.h).
 *
 * FLOPs and bytes are not recounted from the graph: a GEMM step carries its
 * shape, every step names the buffers it reads and writes
 * (sc_step_buffers), and a COMM step its group and buffers. Each stage
 * program is costed once and added to every row whose rank runs it, times
 * the runs per step. */
#include <stdio.h>
#include <string.h>

#include "codegen/dist_cost.h"
#include "ir/pipe.h"

static double buffer_bytes(const sc_program *p, int32_t id) {
  return id >= 0 && id < p->n_buffers ? (double)p->buffers[id].bytes : 0;
}

/* The bytes a memory-bound step touches: each buffer it names, once. */
typedef struct touched {
  const sc_program *p;
  int32_t ids[64];
  int32_t n;
  double bytes;
} touched;

static void touch(void *ud, int32_t buffer, bool written) {
  (void)written;
  touched *t = ud;
  for (int32_t i = 0; i < t->n; i++)
    if (t->ids[i] == buffer) return;
  if (t->n < (int32_t)(sizeof t->ids / sizeof t->ids[0])) t->ids[t->n++] = buffer;
  t->bytes += buffer_bytes(t->p, buffer);
}

static bool cluster_dtype(sc_dtype t, sc_cluster_dtype *out) {
  switch (t) {
  case SC_DTYPE_F32: *out = SC_CLUSTER_FP32; return true;
  case SC_DTYPE_BF16: *out = SC_CLUSTER_BF16; return true;
  case SC_DTYPE_F16: *out = SC_CLUSTER_FP16; return true;
  default: return false;
  }
}

/* One stage program's costs per run, into a row (not yet times the runs). */
typedef struct stage_cost {
  double flops, compute_s;
  int32_t n_comm;
  sc_dist_cost_comm comm[SC_DIST_COST_MAX_GROUPS];
} stage_cost;

static sc_status comm_cost(const sc_dist_program *dp, const sc_program *p, const sc_comm_step *cs,
                           const sc_cluster *c, double *bytes, double *seconds, sc_diag *d) {
  static const sc_coll_kind KIND[SC_COMM_KIND_COUNT] = {
      SC_COLL_ALL_REDUCE, SC_COLL_ALL_GATHER, SC_COLL_REDUCE_SCATTER,
      SC_COLL_ALL_TO_ALL, SC_COLL_SEND,       SC_COLL_SEND};
  /* B of cost.h: the whole buffer (gathered output, scattered input) */
  *bytes = cs->kind == SC_COMM_ALL_GATHER || cs->kind == SC_COMM_RECV
               ? buffer_bytes(p, cs->out)
               : buffer_bytes(p, cs->in);
  sc_coll_group g = {cs->group_size < 1 ? 1 : cs->group_size,
                     sc_cost_group_nodes(&dp->mesh, cs->axes)};
  sc_coll_cost cc;
  if ((unsigned)cs->kind >= SC_COMM_KIND_COUNT)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "unknown collective kind %d", cs->kind);
  if (sc_cost_collective(c, KIND[cs->kind], *bytes, g, &cc, d) != SC_OK) return d->status;
  *seconds = cc.seconds;
  return SC_OK;
}

static sc_status step_cost(const sc_dist_program *dp, const sc_program *p, const sc_step *st,
                           const sc_cluster *c, stage_cost *sc, sc_diag *d) {
  double s = 0;
  switch (st->kind) {
  case SC_STEP_WAIT: return SC_OK;
  case SC_STEP_COMM: {
    double bytes;
    if (comm_cost(dp, p, &st->comm, c, &bytes, &s, d) != SC_OK) return d->status;
    int32_t j = 0;
    while (j < sc->n_comm && sc->comm[j].axes != st->comm.axes) j++;
    if (j == sc->n_comm) {
      if (j == SC_DIST_COST_MAX_GROUPS)
        return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "more than %d groups of mesh axes",
                           SC_DIST_COST_MAX_GROUPS);
      sc->comm[sc->n_comm++] = (sc_dist_cost_comm){.axes = st->comm.axes};
    }
    sc->comm[j].ops++;
    sc->comm[j].bytes += bytes;
    sc->comm[j].seconds += s;
    return SC_OK;
  }
  case SC_STEP_GEMM: {
    const sc_gemm *g = &st->gemm;
    sc_dtype dt = g->a >= 0 && g->a < p->n_buffers ? p->buffers[g->a].dtype : SC_DTYPE_COUNT;
    sc_cluster_dtype cd;
    if (!cluster_dtype(dt, &cd))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "GEMM in %s: the cost model knows peaks for fp32, bf16 and fp16",
                         dt < SC_DTYPE_COUNT ? sc_dtype_name(dt) : "?");
    double flops = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
    double bytes = buffer_bytes(p, g->a) + buffer_bytes(p, g->b) + buffer_bytes(p, g->c) +
                   buffer_bytes(p, g->bias);
    if (sc_cost_gemm_time(c, cd, flops, bytes, sc_cost_gemm_efficiency(g->m, g->n, g->k), &s,
                          d) != SC_OK)
      return d->status;
    sc->flops += flops;
    sc->compute_s += s;
    return SC_OK;
  }
  default: { /* KERNEL, CHECK, SCATTER_ADD: memory-bound */
    touched t = {.p = p};
    sc_step_buffers(p, st, touch, &t);
    if (sc_cost_memory_time(c, t.bytes, &s, d) != SC_OK) return d->status;
    sc->compute_s += s;
    return SC_OK;
  }
  }
}

static sc_status program_cost(const sc_dist_program *dp, int32_t stage, const sc_cluster *c,
                              stage_cost *sc, sc_diag *d) {
  memset(sc, 0, sizeof *sc);
  const sc_program *p = dp->stages[stage].program;
  for (int32_t k = 0; p && k < p->n_steps; k++) {
    sc_diag inner = {0};
    sc_diag_clear(&inner);
    if (step_cost(dp, p, &p->steps[k], c, sc, &inner) != SC_OK)
      return sc_diag_set(d, inner.status, p->steps[k].origin, NULL, "stage %d, step %d: %s",
                         stage, k, inner.msg);
  }
  return SC_OK;
}

/* Runs of stage s in a step: once per microbatch, a pipelined step's NORM
 * and UPDATE pieces once. */
static double runs_of(const sc_dist_program *dp, int32_t s) {
  double m = dp->schedule.microbatches < 1 ? 1 : dp->schedule.microbatches;
  if (!dp->pipe_chunks) return m;
  return sc_pipe_per_mb(sc_pipe_piece_phase(dp->pipe_chunks, s)) ? m : 1;
}

static void add_stage(sc_dist_cost_row *row, const stage_cost *sc, double runs) {
  row->flops += sc->flops * runs;
  row->compute_s += sc->compute_s * runs;
  for (int32_t i = 0; i < sc->n_comm; i++) {
    int32_t j = 0;
    while (j < row->n_comm && row->comm[j].axes != sc->comm[i].axes) j++;
    if (j == row->n_comm) {
      if (j == SC_DIST_COST_MAX_GROUPS) j--; /* cannot happen: one program's groups bound it */
      else row->comm[row->n_comm++] = (sc_dist_cost_comm){.axes = sc->comm[i].axes};
    }
    row->comm[j].ops += sc->comm[i].ops * (int64_t)runs;
    row->comm[j].bytes += sc->comm[i].bytes * runs;
    row->comm[j].seconds += sc->comm[i].seconds * runs;
    row->comm_s += sc->comm[i].seconds * runs;
  }
}

/* Tokens a step processes: batch x sequence of the token ids (the first
 * integer input of rank >= 2; dims are one microbatch's). */
static double step_tokens(const sc_dist_program *dp) {
  for (int32_t i = 0; i < dp->n_inputs; i++) {
    const sc_dist_value *v = &dp->inputs[i];
    if (!sc_dtype_is_int(v->dtype) || v->rank < 2 || sc_dist_is_state(dp, v->name)) continue;
    double m = dp->schedule.microbatches < 1 ? 1 : dp->schedule.microbatches;
    return m * (double)v->dims[0] * (double)v->dims[1];
  }
  return 0;
}

sc_status sc_dist_cost_predict(const sc_dist_program *dp, const sc_cluster *c,
                               sc_dist_cost *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  const sc_mesh *m = &dp->mesh;
  int32_t rows = dp->pipe_chunks ? dp->pipe_ranks
                 : dp->pp_axis >= 0 ? (int32_t)m->axes[dp->pp_axis].size
                                    : 1;
  if (rows < 1 || rows > SC_DIST_COST_MAX_ROWS)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "cost: %d pipeline ranks (at most %d)", rows,
                       SC_DIST_COST_MAX_ROWS);
  for (int32_t q = 0; q < rows; q++) {
    int64_t coords[SC_MESH_MAX_AXES] = {0};
    if (dp->pp_axis >= 0) coords[dp->pp_axis] = q;
    out->rows[q].rank = m->n_axes ? sc_mesh_coords_to_rank(m, coords) : 0;
    out->rows[q].pipe_rank = q;
  }
  out->n_rows = rows;
  for (int32_t s = 0; s < dp->n_stages; s++) {
    stage_cost sc;
    if (program_cost(dp, s, c, &sc, d) != SC_OK) return d->status;
    for (int32_t q = 0; q < rows; q++)
      if (sc_dist_rank_runs(dp, out->rows[q].rank, s)) add_stage(&out->rows[q], &sc, runs_of(dp, s));
  }
  for (int32_t q = 0; q < rows; q++) {
    sc_dist_cost_row *r = &out->rows[q];
    r->step_s = r->compute_s + r->comm_s;
    if (r->step_s > out->rows[out->slowest].step_s) out->slowest = q;
  }
  out->step_time_s = out->rows[out->slowest].step_s;
  out->tokens = step_tokens(dp);
  if (out->step_time_s > 0) {
    double flops = 0;
    for (int32_t q = 0; q < rows; q++) flops += out->rows[q].flops;
    out->flops_per_s_per_gpu = flops / rows / out->step_time_s;
    out->tokens_per_s = out->tokens / out->step_time_s;
  }
  return SC_OK;
}

void sc_dist_cost_to_plan(const sc_dist_program *dp, sc_plan *pl) {
  sc_plan_predicted *pr = &pl->predicted;
  memset(pr, 0, sizeof *pr);
  if (!pl->cluster || pl->cluster_figures.nodes < 1) return;
  pr->on = true;
  sc_dist_cost cost;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_dist_cost_predict(dp, &pl->cluster_figures, &cost, &d) != SC_OK) {
    sc_diag_format(&d, pr->unknown, sizeof pr->unknown);
    if (!pr->unknown[0]) snprintf(pr->unknown, sizeof pr->unknown, "cost model failed");
    return;
  }
  const sc_dist_cost_row *r = &cost.rows[cost.slowest];
  snprintf(pr->source, sizeof pr->source, "summed");
  pr->pipe_rank = r->pipe_rank;
  pr->rank = r->rank;
  pr->step_time_s = cost.step_time_s;
  pr->compute_s = r->compute_s;
  for (int32_t i = 0; i < r->n_comm && i < SC_PLAN_PREDICTED_MAX_GROUPS; i++) {
    size_t pos = 0;
    char *buf = pr->comm[i].axes;
    buf[0] = 0;
    for (int32_t a = 0; a < dp->mesh.n_axes; a++) {
      if (!(r->comm[i].axes & (1u << a))) continue;
      int w = snprintf(buf + pos, sizeof pr->comm[i].axes - pos, "%s%s", pos ? "," : "",
                       dp->mesh.axes[a].name);
      if (w < 0 || (size_t)w >= sizeof pr->comm[i].axes - pos) break;
      pos += (size_t)w;
    }
    pr->comm[i].seconds = r->comm[i].seconds;
    pr->n_comm = i + 1;
  }
  pr->tokens_per_s = cost.tokens_per_s;
  pr->flops_per_s_per_gpu = cost.flops_per_s_per_gpu;
}
