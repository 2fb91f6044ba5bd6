/* dist_train.c — a partitioned training step over thread-ranks
 * (dist_train.h).
 *
 * One worker thread per rank, started at creation and kept until destroy.
 * The main thread hands all of them one command at a time (CREATE, STEP,
 * QUIT) under one mutex and condition variable: it bumps a generation
 * counter and waits until every worker has reported. Creation and steps
 * run on the workers (a session's creation and its collectives are
 * collective calls); reading and writing state (save, restore, assemble)
 * happens on the main thread while the workers wait, so it needs no
 * locking of its own. */
#include "runtime/dist_train.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cpu/cpu.h"
#include "ir/sharding.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/dist.h"

enum { CMD_CREATE, CMD_STEP, CMD_QUIT };
enum { MAX_LOCAL_RANKS = 1024 };

typedef struct worker {
  struct sc_dist_trainer *t;
  int64_t rank, coords[SC_MESH_MAX_AXES];
  sc_comm *comm;
  sc_trainer *tr;
  sc_dist_weights w;
  void **scratch;       /* [n_inputs] a data input's pieces, or NULL */
  int64_t *scratch_cap; /* [n_inputs] their sizes */
  bool stepped;         /* a step ran (the injected failure's moment) */
  double loss, norm;
  bool applied;
  sc_status st;
  sc_diag d;
} worker;

struct sc_dist_trainer {
  const sc_dist_program *dp;
  const sc_dist_stage *stage;
  const sc_program *p;
  const sc_train_manifest *m;
  sc_trainer_opts o;
  sc_buffer *data_in;          /* [n_data_in] the data inputs, global dims */
  int32_t n_data_in;
  int64_t n;                   /* ranks */
  int64_t n_local;             /* those run by this process: n, or 1 (world) */
  sc_comm *world;              /* borrowed: one rank per process (MPI), or NULL */
  sc_cpu_module *mod;          /* the stage's kernels, JIT-compiled once */
  sc_comm **comms;
  pthread_t *th;
  worker *w;
  int64_t started;
  bool broken;                 /* a command failed: only destroy is left */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t gen, n_done;
  int cmd;
  /* the step's arguments */
  const sc_tensor_view *data;
  int32_t n_data;
  double lr;
  int64_t step;
};

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static const sc_tensor_view *find_view(const sc_tensor_view *v, int32_t n, const char *name) {
  for (int32_t i = 0; name && i < n; i++)
    if (v[i].name && strcmp(v[i].name, name) == 0) return &v[i];
  return NULL;
}

static int32_t input_index(const sc_program *p, const char *name) {
  for (int32_t i = 0; name && i < p->n_inputs; i++) {
    const char *b = p->buffers[p->inputs[i]].name;
    if (b && strcmp(b, name) == 0) return i;
  }
  return -1;
}

/* The global input `name` of the distributed program, or NULL. */
static const sc_dist_value *global_input(const sc_dist_program *dp, const char *name) {
  for (int32_t i = 0; name && i < dp->n_inputs; i++)
    if (strcmp(dp->inputs[i].name, name) == 0) return &dp->inputs[i];
  return NULL;
}

/* CMD_CREATE: the rank's constants, its pieces of the initial values, its
 * trainer (the session's creation is collective). */
static sc_status create_rank(worker *w) {
  struct sc_dist_trainer *t = w->t;
  const sc_program *p = t->p;
  const sc_train_manifest *m = t->m;
  sc_status st = sc_dist_rank_weights(t->dp, w->rank, &w->w, &w->d);
  if (st != SC_OK) return st;
  size_t ni = (size_t)p->n_inputs + 1;
  w->scratch = sc_calloc(ni, sizeof *w->scratch);
  w->scratch_cap = sc_calloc(ni, sizeof *w->scratch_cap);
  sc_tensor_view *init = sc_calloc((size_t)m->n_params + 1, sizeof *init);
  if (!w->scratch || !w->scratch_cap || !init) {
    sc_free(init);
    return nomem(&w->d);
  }
  int32_t n_init = 0;
  for (int32_t k = 0; st == SC_OK && k < m->n_params; k++) {
    const char *name = m->params[k].name;
    int32_t i = input_index(p, name);
    const sc_dist_value *gv = global_input(t->dp, name);
    if (i < 0 || !gv || !m->params[k].data) {
      st = sc_diag_set(&w->d, SC_ERR_INVALID, NULL, NULL,
                       "parameter '%s' has no initial value or is not an input of the step",
                       name);
      break;
    }
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    void *piece = sc_malloc(b->bytes > 0 ? (size_t)b->bytes : 1);
    if (!piece) {
      st = nomem(&w->d);
      break;
    }
    sc_sharding_extract(&t->stage->input_sharding[i], &t->dp->mesh, w->coords,
                        sc_dtype_size(b->dtype), gv->dims, m->params[k].data, piece);
    init[n_init] = (sc_tensor_view){.name = name, .dtype = b->dtype, .rank = b->rank,
                                    .data = piece};
    memcpy(init[n_init].dims, b->dims, sizeof init[n_init].dims);
    n_init++;
  }
  if (st == SC_OK) {
    sc_trainer_opts o = t->o;
    o.beta1 = m->beta1;
    o.beta2 = m->beta2;
    o.world = w->comm;
    o.const_data = w->w.data;
    st = sc_trainer_create(p, init, n_init, &o, &w->tr, &w->d);
  }
  for (int32_t k = 0; k < n_init; k++) sc_free(init[k].data);
  sc_free(init);
  return st;
}

/* CMD_STEP: each data input's piece of every microbatch, then the step. */
static sc_status step_rank(worker *w) {
  struct sc_dist_trainer *t = w->t;
  const sc_program *p = t->p;
  if (!w->stepped && sc_dist_injected_failure(w->rank))
    return sc_diag_set(&w->d, SC_ERR_INVALID, NULL, NULL, "injected failure (SHARDC_FAIL_RANK)");
  w->stepped = true;
  int32_t nd = sc_trainer_n_data(w->tr);
  sc_tensor_view *local = sc_calloc((size_t)nd + 1, sizeof *local);
  if (!local) return nomem(&w->d);
  sc_status st = SC_OK;
  for (int32_t k = 0; st == SC_OK && k < nd; k++) {
    const sc_buffer *b = sc_trainer_data(w->tr, k);
    int32_t i = input_index(p, b->name);
    const sc_tensor_view *v = find_view(t->data, t->n_data, b->name);
    if (!v || i < 0) {
      st = sc_diag_set(&w->d, SC_ERR_USAGE, NULL, NULL, "data '%s' is missing", b->name);
      break;
    }
    const sc_sharding *sh = &t->stage->input_sharding[i];
    int64_t mb[SC_MAX_RANK];
    bool ok = v->dtype == b->dtype && v->rank == b->rank && v->data;
    for (int32_t d = 0; ok && d < b->rank; d++) {
      mb[d] = b->dims[d] * sc_sharding_dim_parts(sh, &t->dp->mesh, d);
      ok = d == 0 ? mb[0] > 0 && v->dims[0] % mb[0] == 0 : v->dims[d] == mb[d];
    }
    int64_t K = b->rank ? v->dims[0] / mb[0] : 1;
    if (!ok || K < 1) {
      st = sc_diag_set(&w->d, SC_ERR_USAGE, NULL, NULL,
                       "data '%s': expected %s of rank %d, dim 0 a multiple of %lld (the "
                       "global batch of one microbatch)",
                       b->name, sc_dtype_name(b->dtype), (int)b->rank,
                       (long long)(b->rank ? mb[0] : 1));
      break;
    }
    int64_t need = K * (b->bytes > 0 ? b->bytes : 1);
    if (w->scratch_cap[i] < need) {
      void *x = sc_realloc(w->scratch[i], (size_t)need);
      if (!x) {
        st = nomem(&w->d);
        break;
      }
      w->scratch[i] = x;
      w->scratch_cap[i] = need;
    }
    size_t esz = sc_dtype_size(b->dtype);
    int64_t global_bytes = b->bytes * (b->rank ? mb[0] / b->dims[0] : 1);
    for (int32_t d = 1; d < b->rank; d++) global_bytes *= mb[d] / b->dims[d];
    for (int64_t j = 0; j < K; j++)
      sc_sharding_extract(sh, &t->dp->mesh, w->coords, esz, mb,
                          (const char *)v->data + (size_t)(j * global_bytes),
                          (char *)w->scratch[i] + (size_t)(j * b->bytes));
    local[k] = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank,
                                .data = w->scratch[i]};
    memcpy(local[k].dims, b->dims, sizeof local[k].dims);
    if (b->rank) local[k].dims[0] = K * b->dims[0];
  }
  if (st == SC_OK)
    st = sc_trainer_step(w->tr, local, nd, t->lr, t->step, &w->loss, &w->norm, &w->applied,
                         &w->d);
  sc_free(local);
  return st;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  struct sc_dist_trainer *t = w->t;
  int64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&t->mu);
    while (t->gen == seen) pthread_cond_wait(&t->cv, &t->mu);
    seen = t->gen;
    int cmd = t->cmd;
    pthread_mutex_unlock(&t->mu);
    sc_diag_clear(&w->d);
    w->st = cmd == CMD_CREATE ? create_rank(w) : cmd == CMD_STEP ? step_rank(w) : SC_OK;
    if (w->st != SC_OK) {
      /* "rank R: MESSAGE", and every other rank fails fast */
      sc_diag own = w->d;
      sc_diag_clear(&w->d);
      sc_diag_set(&w->d, w->st, own.node[0] ? own.node : NULL, own.op[0] ? own.op : NULL,
                  "rank %lld: %s", (long long)w->rank, own.msg);
      if (!strstr(own.msg, "aborted")) sc_comm_abort(w->comm, own.msg);
    }
    pthread_mutex_lock(&t->mu);
    t->n_done++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (cmd == CMD_QUIT) return NULL;
  }
}

/* Runs cmd on every started worker; the first failure (not an echo of a
 * peer's abort) into d. */
static sc_status run_all(struct sc_dist_trainer *t, int cmd, sc_diag *d) {
  pthread_mutex_lock(&t->mu);
  t->cmd = cmd;
  t->n_done = 0;
  t->gen++;
  pthread_cond_broadcast(&t->cv);
  while (t->n_done < t->started) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
  int64_t bad = -1;
  for (int64_t r = 0; r < t->started; r++) {
    if (t->w[r].st == SC_OK) continue;
    if (!strstr(t->w[r].d.msg, "aborted")) {
      bad = r;
      break;
    }
    if (bad < 0) bad = r;
  }
  if (bad < 0) return SC_OK;
  t->broken = true;
  *d = t->w[bad].d;
  return t->w[bad].st;
}

/* The data inputs with their global dims (rank 0's trainer names them). */
static sc_status global_data(sc_dist_trainer *t, sc_diag *d) {
  int32_t n = sc_trainer_n_data(t->w[0].tr);
  t->data_in = sc_calloc((size_t)n + 1, sizeof *t->data_in);
  if (!t->data_in) return nomem(d);
  for (int32_t k = 0; k < n; k++) {
    const sc_buffer *b = sc_trainer_data(t->w[0].tr, k);
    const sc_dist_value *gv = global_input(t->dp, b->name);
    if (!gv)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "data '%s' is not a global input",
                         b->name);
    sc_buffer *x = &t->data_in[t->n_data_in++];
    *x = *b;
    memcpy(x->dims, gv->dims, sizeof x->dims);
    x->bytes = (int64_t)sc_dtype_size(b->dtype);
    for (int32_t i = 0; i < gv->rank; i++) x->bytes *= gv->dims[i];
  }
  return SC_OK;
}

int32_t sc_dist_trainer_n_data(const sc_dist_trainer *t) { return t->n_data_in; }
const sc_buffer *sc_dist_trainer_data(const sc_dist_trainer *t, int32_t i) {
  return i >= 0 && i < t->n_data_in ? &t->data_in[i] : NULL;
}

static int default_threads(int64_t ranks) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t k = (cores > 0 ? cores : 1) / (ranks > 0 ? ranks : 1);
  return k >= 1 ? (int)k : 1;
}

sc_status sc_dist_trainer_create(const sc_dist_program *dp, const sc_train_manifest *m,
                                 const sc_trainer_opts *o, sc_comm *world, sc_dist_trainer **out,
                                 sc_diag *d) {
  *out = NULL;
  if (dp->n_stages != 1 || !dp->stages[0].program)
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "a pipelined training step (%d stages) does not run yet: train with "
                       "dp, fsdp and tp axes",
                       (int)dp->n_stages);
  int64_t n = dp->mesh.n_ranks;
  if (world && sc_comm_size(world) != n)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the mesh has %lld ranks, but the communicator has %d", (long long)n,
                       sc_comm_size(world));
  if (!world && (n < 1 || n > MAX_LOCAL_RANKS))
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL,
                       "the local backend runs at most %d ranks as threads, the mesh has %lld",
                       MAX_LOCAL_RANKS, (long long)n);
  sc_dist_trainer *t = sc_calloc(1, sizeof *t);
  if (!t) return nomem(d);
  t->dp = dp;
  t->stage = &dp->stages[0];
  t->p = dp->stages[0].program;
  t->m = m;
  if (o) t->o = *o;
  t->n = n;
  t->world = world;
  t->n_local = world ? 1 : n;
  if (t->o.threads <= 0) t->o.threads = default_threads(t->n_local);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  t->comms = sc_calloc((size_t)t->n_local, sizeof *t->comms);
  t->th = sc_calloc((size_t)t->n_local, sizeof *t->th);
  t->w = sc_calloc((size_t)t->n_local, sizeof *t->w);
  sc_status st = t->comms && t->th && t->w ? SC_OK : nomem(d);
  if (!t->o.cpu_module) t->o.cpu_module = t->stage->kernels; /* a bundle's */
  if (st == SC_OK && !t->o.cpu_module) {
    sc_cpu_opts co;
    sc_cpu_opts_init(&co);
    if ((st = sc_cpu_jit(t->p, &co, &t->mod, d)) == SC_OK) t->o.cpu_module = t->mod;
  }
  if (st == SC_OK && world) t->comms[0] = world;
  else if (st == SC_OK) st = sc_comm_local_create_group((int)n, t->comms, d);
  for (int64_t r = 0; st == SC_OK && r < t->n_local; r++) {
    worker *w = &t->w[r];
    w->t = t;
    w->rank = world ? sc_comm_rank(world) : r;
    w->comm = t->comms[r];
    sc_mesh_rank_to_coords(&dp->mesh, w->rank, w->coords);
    if (pthread_create(&t->th[r], NULL, worker_main, w) != 0) {
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "cannot start the thread of rank %lld",
                       (long long)r);
      sc_comm_abort(t->comms[r], "cannot start a rank's thread");
      break;
    }
    t->started++;
  }
  if (st == SC_OK) st = run_all(t, CMD_CREATE, d);
  if (st == SC_OK) st = global_data(t, d);
  if (st != SC_OK) {
    sc_dist_trainer_destroy(t);
    return st;
  }
  *out = t;
  return SC_OK;
}

sc_status sc_dist_trainer_step(sc_dist_trainer *t, const sc_tensor_view *data, int32_t n_data,
                               double lr, int64_t step, double *loss, double *grad_norm,
                               bool *applied, sc_diag *d) {
  if (t->broken)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "a rank failed earlier: no more steps");
  t->data = data;
  t->n_data = n_data;
  t->lr = lr;
  t->step = step;
  sc_status st = run_all(t, CMD_STEP, d);
  if (st != SC_OK) return st;
  if (loss) *loss = t->w[0].loss;
  if (grad_norm) *grad_norm = t->w[0].norm;
  if (applied) *applied = t->w[0].applied;
  return SC_OK;
}

int64_t sc_dist_trainer_ranks(const sc_dist_trainer *t) { return t->n; }

/* The program input index of state `name`, its global value, or -1. */
static int32_t state_input(const sc_dist_trainer *t, const char *name,
                           const sc_dist_value **gv) {
  int32_t i = input_index(t->p, name);
  *gv = global_input(t->dp, name);
  return i >= 0 && *gv && sc_trainer_state(t->w[0].tr, name, NULL) ? i : -1;
}

sc_status sc_dist_trainer_state(const sc_dist_trainer *t, const char *name, sc_tensor_view *v,
                                sc_diag *d) {
  memset(v, 0, sizeof *v);
  const sc_dist_value *gv;
  int32_t i = state_input(t, name, &gv);
  if (i < 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "'%s' is not state of the step",
                       name ? name : "");
  int64_t numel = 1;
  for (int32_t k = 0; k < gv->rank; k++) numel *= gv->dims[k];
  size_t esz = sc_dtype_size(gv->dtype);
  void *all = sc_malloc(numel > 0 ? (size_t)numel * esz : 1);
  if (!all) return nomem(d);
  sc_status st = SC_OK;
  if (!t->world) {
    for (int64_t r = 0; r < t->n_local; r++)
      sc_sharding_insert(&t->stage->input_sharding[i], &t->dp->mesh, t->w[r].coords, esz,
                         gv->dims, sc_trainer_state(t->w[r].tr, name, NULL), all);
  } else { /* every rank's piece from the world, each put in its place */
    const sc_buffer *b = &t->p->buffers[t->p->inputs[i]];
    int64_t count = b->bytes / (int64_t)esz;
    char *pieces = sc_malloc((size_t)(b->bytes > 0 ? b->bytes : 1) * (size_t)t->n);
    st = pieces ? sc_comm_all_gather(t->world, sc_trainer_state(t->w[0].tr, name, NULL), pieces,
                                     count, b->dtype, d)
                : nomem(d);
    for (int64_t r = 0; st == SC_OK && r < t->n; r++) {
      int64_t coords[SC_MESH_MAX_AXES];
      sc_mesh_rank_to_coords(&t->dp->mesh, r, coords);
      sc_sharding_insert(&t->stage->input_sharding[i], &t->dp->mesh, coords, esz, gv->dims,
                         pieces + (size_t)(r * b->bytes), all);
    }
    sc_free(pieces);
  }
  if (st != SC_OK) {
    sc_free(all);
    return st;
  }
  *v = (sc_tensor_view){.name = gv->name, .dtype = gv->dtype, .rank = gv->rank, .data = all};
  memcpy(v->dims, gv->dims, sizeof v->dims);
  return SC_OK;
}

int64_t sc_dist_trainer_arena_bytes(const sc_dist_trainer *t, int64_t r) {
  return r >= 0 && r < t->n_local ? sc_trainer_arena_bytes(t->w[r].tr) : 0;
}

int32_t sc_dist_trainer_state_count(const sc_dist_trainer *t, int64_t r, int32_t *in_place) {
  if (in_place) *in_place = 0;
  return r >= 0 && r < t->n_local ? sc_trainer_state_count(t->w[r].tr, in_place) : 0;
}

int64_t sc_dist_trainer_rank(const sc_dist_trainer *t) {
  return t->world ? sc_comm_rank(t->world) : 0;
}

void sc_dist_trainer_abort(sc_dist_trainer *t, const char *msg) {
  for (int64_t r = 0; r < t->n_local; r++) sc_comm_abort(t->comms[r], msg);
}

sc_status sc_dist_trainer_save(const sc_dist_trainer *t, const char *dir,
                               const struct sc_ckpt_state *cs, sc_diag *d) {
  const sc_program *p = t->p;
  sc_ckpt_tensor *x = sc_calloc((size_t)p->n_inputs + 1, sizeof *x);
  sc_ckpt_tensor *o = sc_calloc((size_t)p->n_inputs + 1, sizeof *o);
  int32_t nw = 0, no = 0;
  sc_status st = x && o ? SC_OK : nomem(d);
  for (int32_t i = 0; st == SC_OK && i < p->n_inputs; i++) {
    const char *name = p->buffers[p->inputs[i]].name;
    const sc_dist_value *gv;
    if (!name || strncmp(name, "accum:", 6) == 0 || state_input(t, name, &gv) < 0) continue;
    sc_ckpt_tensor *slot = sc_train_is_optimizer_state(name) ? &o[no] : &x[nw];
    if ((st = sc_dist_trainer_state(t, name, slot, d)) != SC_OK) break;
    if (sc_train_is_optimizer_state(name)) no++;
    else nw++;
  }
  /* one writer: every rank took part in assembling the tensors */
  if (st == SC_OK && (!t->world || sc_comm_rank(t->world) == 0))
    st = sc_ckpt_save(dir, cs, x, nw, o, no, d);
  for (int32_t k = 0; x && k < nw; k++) sc_free(x[k].data);
  for (int32_t k = 0; o && k < no; k++) sc_free(o[k].data);
  sc_free(x);
  sc_free(o);
  return st;
}

sc_status sc_dist_trainer_restore(sc_dist_trainer *t, const struct sc_ckpt *c, sc_diag *d) {
  const sc_program *p = t->p;
  int32_t used[SC_CKPT_GROUP_COUNT] = {0};
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    const sc_dist_value *gv;
    if (!b->name || strncmp(b->name, "accum:", 6) == 0 || state_input(t, b->name, &gv) < 0)
      continue;
    int32_t g;
    const sc_ckpt_tensor *x = sc_trainer_ckpt_tensor(c, b->name, &g, d);
    if (!x) return d->status;
    bool same = x->dtype == gv->dtype && x->rank == gv->rank;
    for (int32_t k = 0; same && k < gv->rank; k++) same = x->dims[k] == gv->dims[k];
    if (!same)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "checkpoint tensor '%s': not the step's dtype and global shape",
                         b->name);
    /* the trainer's own state buffer (its arena slot or host copy): the
     * workers are idle, so the main thread may write it */
    for (int64_t r = 0; r < t->n_local; r++)
      sc_sharding_extract(&t->stage->input_sharding[i], &t->dp->mesh, t->w[r].coords,
                          sc_dtype_size(b->dtype), gv->dims, x->data,
                          (void *)sc_trainer_state(t->w[r].tr, b->name, NULL));
    used[g]++;
  }
  return sc_trainer_ckpt_unused(t->w[0].tr, c, used, d);
}

double sc_dist_trainer_loss_scale(const sc_dist_trainer *t, int64_t *growth) {
  return sc_trainer_loss_scale(t->w[0].tr, growth);
}

void sc_dist_trainer_set_loss_scale(sc_dist_trainer *t, double scale, int64_t growth) {
  for (int64_t r = 0; r < t->n_local; r++) sc_trainer_set_loss_scale(t->w[r].tr, scale, growth);
}

void sc_dist_trainer_destroy(sc_dist_trainer *t) {
  if (!t) return;
  if (t->started) {
    sc_diag d;
    sc_diag_clear(&d);
    run_all(t, CMD_QUIT, &d);
    for (int64_t r = 0; r < t->started; r++) pthread_join(t->th[r], NULL);
  }
  for (int64_t r = 0; t->w && r < t->n_local; r++) {
    worker *w = &t->w[r];
    sc_trainer_destroy(w->tr);
    sc_dist_weights_free(&w->w);
    for (int32_t i = 0; w->scratch && i < t->p->n_inputs; i++) sc_free(w->scratch[i]);
    sc_free(w->scratch);
    sc_free(w->scratch_cap);
  }
  for (int64_t r = 0; t->comms && !t->world && r < t->n_local; r++) sc_comm_destroy(t->comms[r]);
  sc_cpu_module_destroy(t->mod);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  sc_free(t->data_in);
  sc_free(t->comms);
  sc_free(t->th);
  sc_free(t->w);
  sc_free(t);
}
