/* dist.c — running a partitioned model: one session per rank (dist.h).
 *
 * sc_dist_run_rank is the whole job of one rank, in order:
 *   1. its stage (sc_dist_rank_stage) and that stage's program;
 *   2. its weight shards (sc_dist_rank_weights, the one place they are cut);
 *   3. its input plan: per program input, the caller's global tensor of that
 *      name, checked (dtype; dim 0 / M, then the stage's input sharding,
 *      must give the buffer's dims) and a scratch buffer;
 *   4. its outputs: the owner (sc_dist_owns_output) allocates each global
 *      output its program produces (sc_malloc, dim 0 times M);
 *   5. the session (collective: the sub-communicators are split there), with
 *      the shards as sc_session_opts.const_data;
 *   6. per microbatch: cut the inputs (rows of dim 0 are contiguous, so the
 *      microbatch is a pointer offset; then the rank's piece), run, and the
 *      owner copies each output into its rows.
 * On any error it frees what it allocated (outputs included), rewrites the
 * message as "rank R: MESSAGE" and aborts the world with it, unless the
 * error is already a peer's abort (its message says "aborted"): peers then
 * fail fast instead of waiting for this rank.
 *
 * sc_dist_run_local runs every rank as a thread over a local communicator
 * group. Each thread gets its OWN sc_dist_output array (nothing is shared
 * between threads but the read-only distributed program and inputs); after
 * joining, the main thread moves each output from the rank that owns it.
 * Errors: the lowest rank whose own message does not say "aborted" (the
 * one that failed first, not an echo of its abort), else the lowest failing
 * rank. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/dist.h"

#include "codegen/cpu/cpu.h"
#include "ir/pipe.h"
#include "ir/progress.h"
#include "ir/sharding.h"

/* Most thread-ranks sc_dist_run_local starts. */
enum { MAX_LOCAL_RANKS = 1024 };

void sc_dist_opts_init(sc_dist_opts *o) { memset(o, 0, sizeof *o); }

/* cores / ranks on a node (all ranks when ranks_per_node is not given). */
static int default_threads(const sc_mesh *m) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t per_node = m->ranks_per_node > 0 && m->ranks_per_node < m->n_ranks
                         ? m->ranks_per_node : m->n_ranks;
  int64_t t = (cores > 0 ? cores : 1) / (per_node > 0 ? per_node : 1);
  return t >= 1 ? (int)t : 1;
}

static bool same_dims(int32_t rank, const int64_t *a, const int64_t *b) {
  for (int32_t d = 0; d < rank; d++)
    if (a[d] != b[d]) return false;
  return true;
}

/* "[4,8]" into buf. */
static void format_dims(int32_t rank, const int64_t *dims, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t d = 0; d < rank && pos + 1 < n; d++) {
    int w = snprintf(buf + pos, n - pos, "%s%lld", d ? "," : "[", (long long)dims[d]);
    if (w < 0) return;
    pos += (size_t)w;
  }
  if (pos + 1 < n) snprintf(buf + pos, n - pos, "%s", rank ? "]" : "[]");
}

static const sc_tensor_view *find_input(const sc_tensor_view *inputs, int32_t n,
                                        const char *name) {
  for (int32_t i = 0; i < n; i++)
    if (inputs[i].name && strcmp(inputs[i].name, name) == 0) return &inputs[i];
  return NULL;
}

/* The state of one rank; everything owned is freed by rank_free. */
typedef struct rank_state {
  const sc_dist_program *dp;
  const sc_dist_stage *st;             /* its stage */
  const sc_program *p;                 /* the stage's program */
  int64_t rank, coords[SC_MESH_MAX_AXES];
  int32_t stage, M;
  sc_dist_weights w;                   /* its weight shards */
  const sc_tensor_view **src;          /* [n_inputs] caller's global tensors */
  sc_sharding *in_sh;                  /* [n_inputs] their shardings */
  int64_t (*in_mb)[SC_MAX_RANK];       /* [n_inputs] microbatch dims */
  sc_tensor_view *in;                  /* [n_inputs] local views on scratch */
  sc_tensor_view *out;                 /* [n_outputs] the session's outputs */
  int32_t *out_global;                 /* [n_outputs] global output owned, or -1 */
  sc_session *s;
} rank_state;

static void rank_free(rank_state *r) {
  sc_session_destroy(r->s);
  sc_dist_weights_free(&r->w);
  for (int32_t i = 0; r->in && i < r->p->n_inputs; i++) sc_free(r->in[i].data);
  sc_free(r->src);
  sc_free(r->in_sh);
  sc_free(r->in_mb);
  sc_free(r->in);
  sc_free(r->out);
  sc_free(r->out_global);
}

/* Step 3: match every program input with the caller's global tensor. */
static sc_status plan_inputs(rank_state *r, const sc_tensor_view *inputs, int32_t n_inputs,
                             sc_diag *d) {
  const sc_program *p = r->p;
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    const char *name = b->name ? b->name : "?";
    const sc_tensor_view *v = find_input(inputs, n_inputs, name);
    if (!v) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "input '%s' is missing", name);
    if (v->dtype != b->dtype || v->rank != b->rank)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "input '%s': expected %s of rank %d, got %s of rank %d", name,
                         sc_dtype_name(b->dtype), (int)b->rank, sc_dtype_name(v->dtype),
                         (int)v->rank);
    if (!v->data && b->bytes > 0)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "input '%s': no data", name);
    int64_t *mb = r->in_mb[i], local[SC_MAX_RANK];
    memcpy(mb, v->dims, sizeof r->in_mb[i]);
    if (r->M > 1) {
      if (b->rank < 1 || mb[0] % r->M != 0)
        return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                           "input '%s': dim 0 (%lld) does not split into %d microbatches", name,
                           b->rank < 1 ? 0LL : (long long)mb[0], (int)r->M);
      mb[0] /= r->M;
    }
    r->in_sh[i] = r->st->input_sharding[i];
    sc_status st = sc_sharding_local_shape(&r->in_sh[i], &r->dp->mesh, b->rank, mb, local,
                                           name, d);
    if (st != SC_OK) return st;
    if (!same_dims(b->rank, local, b->dims)) {
      char got[256], cut[256], want[256], text[256];
      format_dims(v->rank, v->dims, got, sizeof got);
      format_dims(b->rank, local, cut, sizeof cut);
      format_dims(b->rank, b->dims, want, sizeof want);
      sc_sharding_format(&r->in_sh[i], &r->dp->mesh, text, sizeof text);
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "input '%s': %s cuts to %s per rank (dim 0 / %d microbatches, then "
                         "sharding %s), but stage %d takes %s",
                         name, got, cut, (int)r->M, text, (int)r->stage, want);
    }
    r->src[i] = v;
    sc_tensor_view *in = &r->in[i];
    in->name = b->name;
    in->dtype = b->dtype;
    in->rank = b->rank;
    memcpy(in->dims, b->dims, sizeof in->dims);
    in->data = sc_malloc(b->bytes > 0 ? (size_t)b->bytes : 1);
    if (!in->data) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  return SC_OK;
}

/* Step 4: the global outputs this rank owns, allocated. */
static sc_status plan_outputs(rank_state *r, sc_dist_output *outputs, sc_diag *d) {
  const sc_program *p = r->p;
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const sc_buffer *b = &p->buffers[p->outputs[j]];
    int32_t k = r->st->output_global[j];
    r->out_global[j] = -1;
    if (k < 0 || !sc_dist_owns_output(r->dp, r->rank, k)) continue;
    if (outputs[k].data)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "output '%s' is produced twice",
                         r->dp->outputs[k].name);
    if (r->M > 1 && b->rank < 1)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "output '%s' is a scalar: it cannot be gathered over %d microbatches",
                         r->dp->outputs[k].name, (int)r->M);
    int64_t bytes;
    if (!sc_mul_i64(b->bytes, r->M, &bytes))
      return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "output '%s' is too large", b->name);
    sc_dist_output *o = &outputs[k];
    o->name = r->dp->outputs[k].name;
    o->dtype = b->dtype;
    o->rank = b->rank;
    memcpy(o->dims, b->dims, sizeof o->dims);
    if (r->M > 1) o->dims[0] *= r->M;
    o->data = sc_malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!o->data) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    r->out_global[j] = k;
  }
  return SC_OK;
}

/* SHARDC_FAIL_RANK=R: rank R fails on purpose (testing); R:kill: its
 * process dies at once (SIGKILL: the mpi backend's "killed process"). */
bool sc_dist_injected_failure(int64_t rank) {
  const char *e = getenv("SHARDC_FAIL_RANK");
  if (!e || !*e) return false;
  char *end;
  long long v = strtoll(e, &end, 10);
  if (v != rank) return false;
  if (strcmp(end, ":kill") == 0) raise(SIGKILL);
  return *end == 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static sc_status run_once(rank_state *r, const sc_program *p, sc_dist_output *outputs,
                          sc_diag *d);

/* Steps 5 and 6. */
static sc_status run_microbatches(rank_state *r, const sc_dist_opts *o, sc_comm *world,
                                  sc_dist_output *outputs, sc_diag *d) {
  const sc_program *p = r->p;
  sc_session_opts so;
  sc_session_opts_init(&so);
  so.threads = o && o->threads > 0 ? o->threads : default_threads(&r->dp->mesh);
  so.world = world;
  so.const_data = r->w.data;
  so.device = o ? o->device : so.device;
  so.cpu_module = o && o->cpu_modules ? o->cpu_modules[r->stage] : r->st->kernels;
  sc_status st = sc_session_create(p, &so, &r->s, d);
  if (st != SC_OK) return st;
  if (sc_dist_injected_failure(r->rank))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "injected failure (SHARDC_FAIL_RANK)");
  int warm = o ? o->warmup : 0, runs = warm + (o ? o->repeat : 0);
  if (runs < 1) runs = 1;
  for (int it = 0; it < runs; it++) {
    bool timed = runs > 1;
    if (timed && (st = sc_comm_barrier(world, d)) != SC_OK) return st;
    double t0 = now_ms();
    if ((st = run_once(r, p, outputs, d)) != SC_OK) return st;
    if (timed && (st = sc_comm_barrier(world, d)) != SC_OK) return st;
    if (r->rank == 0 && o && o->times_ms && it >= warm && it - warm < o->repeat)
      o->times_ms[it - warm] = now_ms() - t0;
  }
  return SC_OK;
}

/* One run: every microbatch through the session. */
static sc_status run_once(rank_state *r, const sc_program *p, sc_dist_output *outputs,
                          sc_diag *d) {
  sc_status st;
  for (int32_t m = 0; m < r->M; m++) {
    for (int32_t i = 0; i < p->n_inputs; i++) {
      const sc_tensor_view *v = r->src[i];
      size_t esz = sc_dtype_size(v->dtype);
      int64_t mb_numel = 1;
      for (int32_t k = 0; k < v->rank; k++) mb_numel *= r->in_mb[i][k]; /* <= the caller's */
      const char *rows = (const char *)v->data + (size_t)m * (size_t)mb_numel * esz;
      sc_sharding_extract(&r->in_sh[i], &r->dp->mesh, r->coords, esz, r->in_mb[i], rows,
                          r->in[i].data);
    }
    st = sc_session_run(r->s, r->in, p->n_inputs, r->out, p->n_outputs, d);
    if (st != SC_OK) return st;
    for (int32_t j = 0; j < p->n_outputs; j++) {
      int32_t k = r->out_global[j];
      if (k < 0) continue;
      int64_t bytes = p->buffers[p->outputs[j]].bytes;
      if (bytes > 0)
        memcpy((char *)outputs[k].data + (size_t)m * (size_t)bytes, r->out[j].data,
               (size_t)bytes);
    }
  }
  return SC_OK;
}

/* Steps 1 to 4, then the runs. */
static sc_status run_rank(rank_state *r, const sc_dist_opts *o, sc_comm *world,
                          const sc_tensor_view *inputs, int32_t n_inputs,
                          sc_dist_output *outputs, int32_t n_outputs, sc_diag *d) {
  const sc_dist_program *dp = r->dp;
  if (n_outputs != dp->n_outputs)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "the model has %d outputs, room for %d given",
                       (int)dp->n_outputs, (int)n_outputs);
  if ((int64_t)sc_comm_size(world) != dp->mesh.n_ranks)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the mesh has %lld ranks, but the communicator has %d",
                       (long long)dp->mesh.n_ranks, sc_comm_size(world));
  if (dp->schedule.microbatches < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "%d microbatches",
                       (int)dp->schedule.microbatches);
  r->M = dp->schedule.microbatches;
  sc_mesh_rank_to_coords(&dp->mesh, r->rank, r->coords);
  r->stage = sc_dist_rank_stage(dp, r->rank);
  if (r->stage >= dp->n_stages || !dp->stages[r->stage].program)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "stage %d has no program", (int)r->stage);
  r->st = &dp->stages[r->stage];
  r->p = r->st->program;
  for (int32_t i = 0; i < dp->n_inputs; i++)
    if (!find_input(inputs, n_inputs, dp->inputs[i].name))
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "input '%s' is missing",
                         dp->inputs[i].name);
  const sc_program *p = r->p;
  size_t ni = p->n_inputs > 0 ? (size_t)p->n_inputs : 1;
  size_t no = p->n_outputs > 0 ? (size_t)p->n_outputs : 1;
  r->src = sc_calloc(ni, sizeof *r->src);
  r->in_sh = sc_calloc(ni, sizeof *r->in_sh);
  r->in_mb = sc_calloc(ni, sizeof *r->in_mb);
  r->in = sc_calloc(ni, sizeof *r->in);
  r->out = sc_calloc(no, sizeof *r->out);
  r->out_global = sc_calloc(no, sizeof *r->out_global);
  if (!r->src || !r->in_sh || !r->in_mb || !r->in || !r->out || !r->out_global)
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_dist_rank_weights(dp, r->rank, &r->w, d);
  if (st == SC_OK) st = plan_inputs(r, inputs, n_inputs, d);
  if (st == SC_OK) st = plan_outputs(r, outputs, d);
  if (st == SC_OK) st = run_microbatches(r, o, world, outputs, d);
  return st;
}

sc_status sc_dist_run_rank(const sc_dist_program *dp, const sc_dist_opts *o, sc_comm *world,
                           const sc_tensor_view *inputs, int32_t n_inputs,
                           sc_dist_output *outputs, int32_t n_outputs,
                           sc_dist_rank_stats *stats, sc_diag *d) {
  for (int32_t k = 0; k < n_outputs; k++) memset(&outputs[k], 0, sizeof outputs[k]);
  rank_state r;
  memset(&r, 0, sizeof r);
  r.dp = dp;
  r.rank = sc_comm_rank(world);
  sc_status st = run_rank(&r, o, world, inputs, n_inputs, outputs, n_outputs, d);
  if (stats) {
    stats->arena_bytes = r.s ? sc_session_arena_bytes(r.s) : 0;
    stats->weight_bytes = r.w.bytes;
    stats->stage = r.stage;
  }
  rank_free(&r);
  if (st == SC_OK) return SC_OK;
  for (int32_t k = 0; k < n_outputs; k++) {
    sc_free(outputs[k].data);
    memset(&outputs[k], 0, sizeof outputs[k]);
  }
  /* "rank R: MESSAGE", keeping where it happened */
  sc_diag own = *d;
  sc_diag_clear(d);
  sc_diag_set_file(d, own.file);
  sc_diag_set(d, st, own.node[0] ? own.node : NULL, own.op[0] ? own.op : NULL, "rank %lld: %s",
              (long long)r.rank, own.msg);
  if (!strstr(own.msg, "aborted")) sc_comm_abort(world, own.msg);
  return st;
}

/* ---- the local backend ---- */

typedef struct local_job {
  const sc_dist_program *dp;
  const sc_dist_opts *o;
  sc_comm *comm;
  const sc_tensor_view *inputs;
  int32_t n_inputs, n_outputs;
  sc_dist_output *outputs;   /* this rank's own array */
  sc_dist_rank_stats stats;
  sc_status st;
  sc_diag d;
} local_job;

static void *local_main(void *arg) {
  local_job *j = arg;
  sc_diag_clear(&j->d);
  j->st = sc_dist_run_rank(j->dp, j->o, j->comm, j->inputs, j->n_inputs,
                           j->outputs, j->n_outputs, &j->stats, &j->d);
  return NULL;
}

/* The error to report (file comment), or -1. */
static int64_t first_failure(const local_job *jobs, int64_t n) {
  int64_t echo = -1;
  for (int64_t r = 0; r < n; r++) {
    if (jobs[r].st == SC_OK) continue;
    if (!strstr(jobs[r].d.msg, "aborted")) return r;
    if (echo < 0) echo = r;
  }
  return echo;
}

sc_status sc_dist_run_local(const sc_dist_program *dp, const sc_dist_opts *o, const sc_tensor_view *inputs,
                            int32_t n_inputs, sc_dist_output *outputs, int32_t n_outputs,
                            sc_dist_rank_stats *stats, sc_diag *d) {
  for (int32_t k = 0; k < n_outputs; k++) memset(&outputs[k], 0, sizeof outputs[k]);
  int64_t n = dp->mesh.n_ranks;
  if (n < 1 || n > MAX_LOCAL_RANKS)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL,
                       "the local backend runs at most %d ranks as threads, the mesh has %lld",
                       MAX_LOCAL_RANKS, (long long)n);
  if (n_outputs != dp->n_outputs)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "the model has %d outputs, room for %d given",
                       (int)dp->n_outputs, (int)n_outputs);
  sc_dist_opts opts;
  sc_dist_opts_init(&opts);
  if (o) opts = *o;
  if (opts.threads <= 0) opts.threads = default_threads(&dp->mesh);
  sc_comm **comms = sc_calloc((size_t)n, sizeof *comms);
  local_job *jobs = sc_calloc((size_t)n, sizeof *jobs);
  pthread_t *th = sc_calloc((size_t)n, sizeof *th);
  sc_dist_output *outs = sc_calloc((size_t)n * (size_t)(n_outputs > 0 ? n_outputs : 1),
                                   sizeof *outs);
  sc_status st = SC_OK;
  if (!comms || !jobs || !th || !outs)
    st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  /* one JIT per stage without kernels, shared by its ranks */
  sc_cpu_module **mods = NULL;
  const struct sc_cpu_module **use = NULL;
  if (st == SC_OK && !opts.cpu_modules && sc_device_choice_is_cpu(&opts.device)) {
    mods = sc_calloc((size_t)dp->n_stages, sizeof *mods);
    use = sc_calloc((size_t)dp->n_stages, sizeof *use);
    if (!mods || !use) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    sc_cpu_opts co;
    sc_cpu_opts_init(&co);
    sc_progress pr; /* which stage's kernels of how many (ir/progress.h) */
    sc_progress_begin(&pr, "compiling kernels", dp->n_stages, false);
    for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
      char label[64];
      sc_pipe_program_label(dp->pipe_chunks, s, dp->n_stages, label, sizeof label);
      sc_progress_set(&pr, s, label);
      use[s] = dp->stages[s].kernels;
      if (!use[s] && (st = sc_cpu_jit(dp->stages[s].program, &co, &mods[s], d)) == SC_OK)
        use[s] = mods[s];
    }
    sc_progress_end(&pr);
    opts.cpu_modules = use;
  }
  if (st == SC_OK)
    st = opts.device.comm_on_device ? sc_comm_cuda_local_create_group((int)n, comms, d)
                                    : sc_comm_local_create_group((int)n, comms, d);
  int64_t started = 0;
  for (; st == SC_OK && started < n; started++) {
    local_job *j = &jobs[started];
    *j = (local_job){.dp = dp, .o = &opts, .comm = comms[started],
                     .inputs = inputs, .n_inputs = n_inputs, .n_outputs = n_outputs,
                     .outputs = outs + started * (n_outputs > 0 ? n_outputs : 1)};
    if (pthread_create(&th[started], NULL, local_main, j) != 0) {
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "cannot start the thread of rank %lld",
                       (long long)started);
      sc_comm_abort(comms[started], "cannot start a rank's thread");
      break;
    }
  }
  for (int64_t r = 0; r < started; r++) pthread_join(th[r], NULL);
  for (int64_t r = 0; comms && r < n; r++) sc_comm_destroy(comms[r]);
  for (int32_t s = 0; mods && s < dp->n_stages; s++) sc_cpu_module_destroy(mods[s]);
  sc_free(mods);
  sc_free(use);
  int64_t bad = st == SC_OK ? first_failure(jobs, n) : -1;
  if (bad >= 0) {
    *d = jobs[bad].d;
    st = jobs[bad].st;
  }
  /* move each output from its owner (all ranks ran: st is still SC_OK) */
  for (int32_t k = 0; st == SC_OK && k < n_outputs; k++) {
    for (int64_t r = 0; r < n; r++) {
      sc_dist_output *x = &jobs[r].outputs[k];
      if (!x->data) continue;
      if (outputs[k].data)
        st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "output '%s' is produced by two stages",
                         x->name);
      else
        outputs[k] = *x;
      if (outputs[k].data == x->data) x->data = NULL; /* moved */
    }
    if (st == SC_OK && !outputs[k].data)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "output '%s' is produced by no stage",
                       dp->outputs[k].name);
  }
  for (int64_t i = 0; outs && i < started * (n_outputs > 0 ? n_outputs : 1); i++)
    sc_free(outs[i].data); /* what was not moved */
  if (st != SC_OK) {
    for (int32_t k = 0; k < n_outputs; k++) {
      sc_free(outputs[k].data);
      memset(&outputs[k], 0, sizeof outputs[k]);
    }
  } else if (stats) {
    for (int64_t r = 0; r < n; r++) stats[r] = jobs[r].stats;
  }
  sc_free(outs);
  sc_free(th);
  sc_free(jobs);
  sc_free(comms);
  return st;
}
