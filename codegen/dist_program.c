/* dist_program.c — the distributed program's accessors, its invariant
 * check and the one function that cuts a rank's weight shards
 * (dist_program.h).
 *
 * Nothing here knows where the program came from: the driver links it from
 * a partition (driver/driver.c), the runtime's loader reads it from a
 * bundle (runtime/dist_load.c). Both fill the same fields. */
#include "codegen/dist_program.h"

#include "ir/pipe.h"

#include <stdlib.h>
#include <string.h>

sc_dist_program *sc_dist_program_create(const sc_mesh *mesh, int32_t n_stages) {
  if (n_stages < 1) return NULL;
  sc_dist_program *dp = sc_calloc(1, sizeof *dp);
  if (!dp) return NULL;
  sc_arena_init(&dp->arena);
  dp->mesh = *mesh;
  dp->owns_programs = true;
  dp->schedule.kind = SC_SCHEDULE_GPIPE;
  dp->schedule.microbatches = 1;
  dp->schedule.runs = 1;
  sc_dist_program_set_roles(dp, sc_mesh_find_axis(mesh, "pp"), sc_mesh_find_axis(mesh, "dp"),
                            sc_mesh_find_axis(mesh, "tp"));
  dp->n_stages = n_stages;
  dp->stages = sc_arena_array(&dp->arena, (size_t)n_stages, sizeof *dp->stages);
  if (!dp->stages) {
    sc_dist_program_destroy(dp);
    return NULL;
  }
  return dp;
}

static int cmp_offload(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

sc_status sc_dist_program_set_offload(sc_dist_program *dp, const char *const *names, int32_t n,
                                      int32_t horizon, sc_diag *d) {
  dp->schedule.offload_horizon = horizon;
  dp->schedule.n_offload = 0;
  dp->schedule.offload = NULL;
  if (n <= 0) return SC_OK;
  const char **v = sc_arena_array(&dp->arena, (size_t)n, sizeof *v);
  if (!v) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < n; i++)
    if (!(v[i] = sc_arena_strdup(&dp->arena, names[i])))
      return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  qsort(v, (size_t)n, sizeof *v, cmp_offload);
  dp->schedule.offload = v;
  dp->schedule.n_offload = n;
  return SC_OK;
}

void sc_dist_program_set_accumulation(sc_dist_program *dp, int32_t grad_accum) {
  dp->schedule.runs = dp->pipe_chunks == 0 && grad_accum > 1 ? grad_accum : 1;
}

void sc_dist_program_set_roles(sc_dist_program *dp, int32_t pp_axis, int32_t dp_axis,
                               int32_t tp_axis) {
  dp->pp_axis = pp_axis;
  dp->dp_axis = dp_axis;
  dp->tp_axis = tp_axis;
  dp->pp_axes = pp_axis >= 0 ? (sc_axes)1u << pp_axis : 0;
  dp->dp_axes = dp_axis >= 0 ? (sc_axes)1u << dp_axis : 0;
  dp->tp_axes = tp_axis >= 0 ? (sc_axes)1u << tp_axis : 0;
}

static void free_index(sc_dist_program *dp) {
  sc_name_index_free(&dp->input_names);
  sc_name_index_free(&dp->output_names);
  for (int32_t s = 0; dp->stage_output_names && s < dp->n_stages; s++)
    sc_name_index_free(&dp->stage_output_names[s]);
  sc_free(dp->stage_output_names);
  dp->stage_output_names = NULL;
}

void sc_dist_program_destroy(sc_dist_program *dp) {
  if (!dp) return;
  free_index(dp);
  for (int32_t s = 0; dp->owns_programs && dp->stages && s < dp->n_stages; s++)
    sc_program_destroy(dp->stages[s].program);
  sc_arena_free(&dp->arena);
  if (dp->release_owner) dp->release_owner(dp->owner);
  sc_free(dp);
}

static sc_status copy_buffers(sc_dist_program *dp, const sc_program *p, const int32_t *ids,
                              int32_t n, sc_dist_value **out) {
  *out = sc_arena_array(&dp->arena, (size_t)n + 1, sizeof **out);
  if (!*out) return SC_ERR_NOMEM;
  for (int32_t i = 0; i < n; i++) {
    const sc_buffer *b = &p->buffers[ids[i]];
    sc_dist_value *v = &(*out)[i];
    if (!(v->name = sc_arena_strdup(&dp->arena, b->name ? b->name : ""))) return SC_ERR_NOMEM;
    v->dtype = b->dtype;
    v->rank = b->rank;
    memcpy(v->dims, b->dims, sizeof v->dims);
  }
  return SC_OK;
}

sc_status sc_dist_program_single(sc_program *p, bool take, sc_dist_program **out,
                                 sc_diag *d) {
  *out = NULL;
  sc_mesh one;
  sc_mesh_init(&one);
  sc_dist_program *dp = sc_dist_program_create(&one, 1);
  if (!dp) {
    if (take) sc_program_destroy(p);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  dp->owns_programs = take;
  sc_dist_stage *st = &dp->stages[0];
  st->program = p;
  dp->n_inputs = p->n_inputs;
  dp->n_outputs = p->n_outputs;
  st->input_sharding = sc_arena_array(&dp->arena, (size_t)p->n_inputs + 1, sizeof *st->input_sharding);
  st->output_global = sc_arena_array(&dp->arena, (size_t)p->n_outputs + 1, sizeof *st->output_global);
  dp->output_stage = sc_arena_array(&dp->arena, (size_t)p->n_outputs + 1, sizeof *dp->output_stage);
  sc_status st2 = st->input_sharding && st->output_global && dp->output_stage ? SC_OK : SC_ERR_NOMEM;
  if (st2 == SC_OK) st2 = copy_buffers(dp, p, p->inputs, p->n_inputs, &dp->inputs);
  if (st2 == SC_OK) st2 = copy_buffers(dp, p, p->outputs, p->n_outputs, &dp->outputs);
  if (st2 != SC_OK) {
    sc_dist_program_destroy(dp);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  for (int32_t i = 0; i < p->n_inputs; i++)
    sc_sharding_replicated(&st->input_sharding[i], p->buffers[p->inputs[i]].rank);
  for (int32_t j = 0; j < p->n_outputs; j++) st->output_global[j] = j;
  st2 = sc_dist_program_index(dp, d);
  if (st2 == SC_OK) st2 = sc_dist_program_check(dp, d);
  if (st2 != SC_OK) {
    sc_dist_program_destroy(dp);
    return st2;
  }
  *out = dp;
  return SC_OK;
}

int32_t sc_dist_rank_stage(const sc_dist_program *dp, int64_t rank) {
  if (dp->pp_axis < 0) return 0;
  int64_t coords[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(&dp->mesh, rank, coords);
  return (int32_t)coords[dp->pp_axis];
}

bool sc_dist_owns_output(const sc_dist_program *dp, int64_t rank, int32_t k) {
  int64_t coords[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(&dp->mesh, rank, coords);
  for (int32_t a = 0; a < dp->mesh.n_axes; a++) {
    if (a == dp->pp_axis) {
      if (coords[a] != dp->output_stage[k]) return false;
    } else if (coords[a] != 0) {
      return false;
    }
  }
  return dp->pp_axis >= 0 || dp->output_stage[k] == 0;
}

sc_status sc_dist_program_index(sc_dist_program *dp, sc_diag *d) {
  free_index(dp);
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < dp->n_inputs; i++)
    st = sc_name_index_add(&dp->input_names, dp->inputs[i].name);
  for (int32_t k = 0; st == SC_OK && k < dp->n_outputs; k++)
    st = sc_name_index_add(&dp->output_names, dp->outputs[k].name);
  if (st == SC_OK && !(dp->stage_output_names = sc_calloc((size_t)dp->n_stages,
                                                          sizeof *dp->stage_output_names)))
    st = SC_ERR_NOMEM;
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program; /* none: sc_dist_program_check says so */
    for (int32_t j = 0; p && st == SC_OK && j < p->n_outputs; j++)
      st = sc_name_index_add(&dp->stage_output_names[s], p->buffers[p->outputs[j]].name);
  }
  if (st != SC_OK) {
    free_index(dp);
    return sc_diag_set(d, st, NULL, NULL, "indexing the distributed program's names: %s",
                       st == SC_ERR_NOMEM ? "out of memory" : "too many names");
  }
  return SC_OK;
}

/* Whether ix indexes the n names it is asked about (built, and not since
 * outgrown or cut). */
static bool indexed(const sc_name_index *ix, int32_t n) { return n > 0 && ix->n == n; }

int32_t sc_dist_find_input(const sc_dist_program *dp, const char *name) {
  if (indexed(&dp->input_names, dp->n_inputs)) return sc_name_index_find(&dp->input_names, name);
  for (int32_t i = 0; name && i < dp->n_inputs; i++)
    if (strcmp(dp->inputs[i].name, name) == 0) return i;
  return -1;
}

/* The first global output at or after k named name, or -1. */
static int32_t scan_outputs(const sc_dist_program *dp, int32_t k, const char *name) {
  for (; name && k < dp->n_outputs; k++)
    if (strcmp(dp->outputs[k].name, name) == 0) return k;
  return -1;
}

int32_t sc_dist_find_output(const sc_dist_program *dp, const char *name) {
  if (indexed(&dp->output_names, dp->n_outputs))
    return sc_name_index_find(&dp->output_names, name);
  return scan_outputs(dp, 0, name);
}

int32_t sc_dist_next_output(const sc_dist_program *dp, int32_t k) {
  if (k < 0 || k >= dp->n_outputs) return -1;
  if (indexed(&dp->output_names, dp->n_outputs)) return sc_name_index_next(&dp->output_names, k);
  return scan_outputs(dp, k + 1, dp->outputs[k].name);
}

static int cmp_name(const void *key, const void *elem) {
  return strcmp((const char *)key, ((const sc_shard_source *)elem)->name);
}

const sc_shard_source *sc_dist_source(const sc_dist_program *dp, const char *name) {
  if (!dp->n_sources || !name) return NULL;
  return bsearch(name, dp->sources, (size_t)dp->n_sources, sizeof *dp->sources, cmp_name);
}

bool sc_dist_is_state(const sc_dist_program *dp, const char *name) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "new:%s", name ? name : "");
  return name && w > 0 && (size_t)w < sizeof buf && sc_dist_find_output(dp, buf) >= 0;
}

int32_t sc_dist_handoff_source(const sc_dist_program *dp, int32_t piece, const char *name,
                               int32_t *out) {
  for (int32_t s = piece - 1; name && s >= 0; s--) {
    const sc_program *p = dp->stages[s].program;
    const sc_name_index *ix = dp->stage_output_names ? &dp->stage_output_names[s] : NULL;
    if (p && ix && indexed(ix, p->n_outputs)) {
      int32_t j = sc_name_index_find(ix, name);
      if (j < 0) continue;
      if (out) *out = j;
      return s;
    }
    for (int32_t j = 0; p && j < p->n_outputs; j++) {
      const char *o = p->buffers[p->outputs[j]].name;
      if (o && strcmp(o, name) == 0) {
        if (out) *out = j;
        return s;
      }
    }
  }
  return -1;
}

static bool same_dims(int32_t rank, const int64_t *a, const int64_t *b) {
  for (int32_t d = 0; d < rank; d++)
    if (a[d] != b[d]) return false;
  return true;
}

sc_status sc_dist_program_check(const sc_dist_program *dp, sc_diag *d) {
  if (dp->schedule.microbatches < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "%d microbatches",
                       (int)dp->schedule.microbatches);
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_dist_stage *st = &dp->stages[s];
    const sc_program *p = st->program;
    if (!p) return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "stage %d has no program", (int)s);
    if (p->mesh.n_axes > 0 && !sc_mesh_equal(&p->mesh, &dp->mesh))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "stage %d: its program's mesh is not the distributed program's",
                         (int)s);
    for (int32_t i = 0; i < p->n_inputs; i++) {
      const sc_buffer *b = &p->buffers[p->inputs[i]];
      int32_t k = sc_dist_find_input(dp, b->name);
      int64_t local[SC_MAX_RANK];
      if (k < 0 && dp->pipe_chunks > 0) { /* handed over from an earlier piece */
        int32_t j, from = sc_dist_handoff_source(dp, s, b->name, &j);
        const sc_buffer *o = from >= 0 ? &dp->stages[from].program->buffers[
                                             dp->stages[from].program->outputs[j]]
                                       : NULL;
        if (!o)
          return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                             "piece %d: input '%s' is neither an input of the model nor an "
                             "output of an earlier piece", (int)s, b->name ? b->name : "?");
        if (o->dtype != b->dtype || o->rank != b->rank || !same_dims(b->rank, o->dims, b->dims))
          return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                             "piece %d: input '%s' is not what piece %d hands over", (int)s,
                             b->name, (int)from);
        continue;
      }
      if (k < 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "stage %d: input '%s' is not an input of the model", (int)s,
                           b->name ? b->name : "?");
      const sc_dist_value *v = &dp->inputs[k];
      sc_status st2 = v->dtype == b->dtype && v->rank == b->rank &&
                              st->input_sharding[i].rank == b->rank
                          ? sc_sharding_local_shape(&st->input_sharding[i], &dp->mesh, v->rank,
                                                    v->dims, local, v->name, d)
                          : SC_ERR_INVALID;
      if (st2 != SC_OK || !same_dims(b->rank, local, b->dims))
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "stage %d: input '%s' does not cut to its program buffer", (int)s,
                           v->name);
    }
    for (int32_t j = 0; j < p->n_outputs; j++) {
      int32_t k = st->output_global[j];
      if (k < -1 || k >= dp->n_outputs || (k >= 0 && dp->output_stage[k] != s))
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "stage %d: output %d is not a global output of this stage", (int)s,
                           (int)j);
    }
  }
  for (int32_t k = 0; k < dp->n_outputs; k++) {
    int32_t s = dp->output_stage[k], found = 0;
    if (s < 0 || s >= dp->n_stages)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "output '%s' is produced by no stage",
                         dp->outputs[k].name);
    const sc_dist_stage *st = &dp->stages[s];
    for (int32_t j = 0; j < st->program->n_outputs; j++) found += st->output_global[j] == k;
    if (found != 1)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "output '%s' is produced %d times by stage %d", dp->outputs[k].name,
                         (int)found, (int)s);
  }
  return SC_OK;
}

void sc_dist_weights_free(sc_dist_weights *w) {
  for (int32_t b = 0; w->owned && b < w->n_buffers; b++) sc_free(w->owned[b]);
  sc_free(w->owned);
  sc_free(w->data);
  memset(w, 0, sizeof *w);
}

/* The source of sharded constant buf, checked to cut to its dtype and dims
 * (so that the cut never writes past the buffer). */
static sc_status checked_source(const sc_dist_program *dp, const sc_buffer *buf,
                                const sc_shard_source **out, sc_diag *d) {
  const sc_shard_source *src = sc_dist_source(dp, buf->name);
  *out = NULL;
  if (!src) return SC_OK; /* no data at all: the device's bind reports it */
  if (!src->data)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "sharded constant '%s' has no data (loaded with --no-weights?)",
                       buf->name);
  int64_t local[SC_MAX_RANK];
  sc_status st = SC_ERR_INVALID;
  if (src->dtype == buf->dtype && src->rank == buf->rank && src->sharding.rank == src->rank)
    st = sc_sharding_local_shape(&src->sharding, &dp->mesh, src->rank, src->dims, local,
                                 buf->name, d);
  if (st == SC_OK && !same_dims(buf->rank, local, buf->dims)) st = SC_ERR_INVALID;
  if (st != SC_OK)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "sharded constant '%s': its source does not cut to the program's "
                       "%s buffer of rank %d",
                       buf->name, sc_dtype_name(buf->dtype), (int)buf->rank);
  *out = src;
  return SC_OK;
}

sc_status sc_dist_rank_weights(const sc_dist_program *dp, int64_t rank, sc_dist_weights *w,
                               sc_diag *d) {
  memset(w, 0, sizeof *w);
  if (rank < 0 || rank >= dp->mesh.n_ranks)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "rank %lld is not in the mesh",
                       (long long)rank);
  return sc_dist_stage_weights(dp, sc_dist_rank_stage(dp, rank), rank, w, d);
}

sc_status sc_dist_stage_weights(const sc_dist_program *dp, int32_t stage, int64_t rank,
                                sc_dist_weights *w, sc_diag *d) {
  memset(w, 0, sizeof *w);
  if (rank < 0 || rank >= dp->mesh.n_ranks || stage < 0 || stage >= dp->n_stages)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "rank %lld, stage %d: not in the program",
                       (long long)rank, (int)stage);
  const sc_program *p = dp->stages[stage].program;
  size_t n = p->n_buffers > 0 ? (size_t)p->n_buffers : 1;
  w->n_buffers = p->n_buffers;
  w->data = sc_calloc(n, sizeof *w->data);
  w->owned = sc_calloc(n, sizeof *w->owned);
  if (!w->data || !w->owned) {
    sc_dist_weights_free(w);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  const void *const *given = dp->rank_weights ? dp->rank_weights[rank][stage] : NULL;
  int64_t coords[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(&dp->mesh, rank, coords);
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *buf = &p->buffers[b];
    if (buf->kind != SC_BUF_CONST || buf->data || buf->bytes <= 0 || !buf->name) continue;
    if (given && given[b]) {
      w->data[b] = given[b];
      w->bytes += buf->bytes;
      continue;
    }
    const sc_shard_source *src;
    sc_status st = checked_source(dp, buf, &src, d);
    if (st != SC_OK) {
      sc_dist_weights_free(w);
      return st;
    }
    if (!src) continue;
    w->owned[b] = sc_malloc((size_t)buf->bytes);
    if (!w->owned[b]) {
      sc_dist_weights_free(w);
      return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    sc_sharding_extract(&src->sharding, &dp->mesh, coords, sc_dtype_size(buf->dtype),
                        src->dims, src->data, w->owned[b]);
    w->data[b] = w->owned[b];
    w->bytes += buf->bytes;
  }
  return SC_OK;
}

bool sc_dist_rank_runs(const sc_dist_program *dp, int64_t rank, int32_t s) {
  if (s < 0 || s >= dp->n_stages) return false;
  if (!dp->pipe_chunks) return sc_dist_rank_stage(dp, rank) == s;
  return sc_pipe_piece_chunk(dp->pipe_chunks, s) % dp->pipe_ranks == sc_dist_rank_stage(dp, rank);
}

sc_program *sc_dist_program_global_view(const sc_dist_program *dp) {
  sc_program *p = sc_program_create();
  for (int32_t k = 0; p && k < dp->n_inputs + dp->n_outputs; k++) {
    bool in = k < dp->n_inputs;
    const sc_dist_value *v = in ? &dp->inputs[k] : &dp->outputs[k - dp->n_inputs];
    sc_buffer b = {.name = v->name, .dtype = v->dtype, .rank = v->rank,
                   .kind = in ? SC_BUF_INPUT : SC_BUF_OUTPUT};
    memcpy(b.dims, v->dims, sizeof b.dims);
    int64_t n = (int64_t)sc_dtype_size(v->dtype);
    for (int32_t i = 0; i < v->rank; i++) n *= v->dims[i];
    b.bytes = n;
    int32_t id = sc_program_add_buffer(p, &b);
    if (id < 0 || (in ? sc_program_add_input(p, id) : sc_program_add_output(p, id)) != SC_OK) {
      sc_program_destroy(p);
      return NULL;
    }
  }
  return p;
}

static const char *const SCHEDULE_NAMES[SC_SCHEDULE_COUNT] = {"gpipe", "1f1b", "interleaved",
                                                               "zb-h1"};

const char *sc_schedule_name(sc_schedule_kind k) {
  return k >= 0 && k < SC_SCHEDULE_COUNT ? SCHEDULE_NAMES[k] : "?";
}

int32_t sc_schedule_parse(const char *name) {
  for (int32_t k = 0; name && k < SC_SCHEDULE_COUNT; k++)
    if (strcmp(name, SCHEDULE_NAMES[k]) == 0) return k;
  return -1;
}

void sc_dist_fp8_print(const sc_dist_program *dp, FILE *f, const char *indent) {
  enum { MAX_REASONS = 8 };
  const char *why[MAX_REASONS];
  int32_t n_why[MAX_REASONS], n_reasons = 0, n_fp8 = 0, n_ok = 0;
  for (int32_t s = 0; s < dp->n_stages; s++)
    if (dp->stages[s].program)
      sc_program_fp8_gemms(dp->stages[s].program, &n_fp8, &n_ok, why, n_why, MAX_REASONS,
                           &n_reasons);
  if (n_fp8 == 0) return;
  fprintf(f, "%son a GPU (sm_89+): %d of %d FP8 products as cuBLASLt FP8 matmuls", indent,
          (int)n_ok, (int)n_fp8);
  for (int32_t k = 0; k < n_reasons; k++)
    fprintf(f, "%s%d f32: %s", k ? "; " : " (", (int)n_why[k], why[k]);
  fprintf(f, "%s\n", n_reasons ? ")" : "");
}
