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

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cpu/cpu.h"
#include "ir/pipe.h"
#include "ir/progress.h"
#include "ir/sharding.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/dist.h"
#include "runtime/param_init.h"
#include "codegen/pipe_schedule.h"
#include "runtime/pipe_rank.h"

enum { CMD_CREATE, CMD_STEP, CMD_SYNC, CMD_QUIT };
enum { MAX_LOCAL_RANKS = 1024 };

typedef struct worker {
  struct sc_dist_trainer *t;
  int64_t rank, coords[SC_MESH_MAX_AXES];
  sc_comm *comm;
  sc_trainer *tr;       /* one program, or */
  sc_pipe_rank *pr;     /* the pieces of a pipelined step */
  bool has_loss, has_norm; /* pr: this rank made the loss, the norm */
  sc_dist_weights w;
  void **scratch;       /* [n_data] a data input's pieces, or NULL */
  int64_t *scratch_cap; /* [n_data] their sizes */
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
  sc_cpu_module **mods;        /* a pipelined step: [dp->n_stages] each piece's JIT */
  const sc_cpu_module **kern;  /* [dp->n_stages] each piece's kernels (a bundle's, or mods) */
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

/* The rank's data inputs: count, k-th buffer (one microbatch's piece) and
 * its sharding. */
static int32_t w_n_data(const worker *w) {
  return w->pr ? sc_pipe_rank_n_data(w->pr) : sc_trainer_n_data(w->tr);
}
static const sc_buffer *w_data(const worker *w, int32_t k, const sc_sharding **sh) {
  if (w->pr) return sc_pipe_rank_data(w->pr, k, sh);
  const sc_buffer *b = sc_trainer_data(w->tr, k);
  int32_t i = b ? input_index(w->t->p, b->name) : -1;
  *sh = i >= 0 ? &w->t->stage->input_sharding[i] : NULL;
  return i >= 0 ? b : NULL;
}
/* The rank's piece of state `name` and its sharding, or NULL; `write`:
 * the caller writes it (sc_trainer_state_mut). */
static void *w_state(const worker *w, const char *name, const sc_sharding **sh, bool write) {
  if (w->pr) return sc_pipe_rank_state(w->pr, name, NULL, sh, write);
  void *x = write ? sc_trainer_state_mut(w->tr, name, NULL)
                  : (void *)sc_trainer_state(w->tr, name, NULL);
  int32_t i = x ? input_index(w->t->p, name) : -1;
  *sh = i >= 0 ? &w->t->stage->input_sharding[i] : NULL;
  return i >= 0 ? x : NULL;
}

static sc_status scratch_alloc(worker *w) {
  size_t n = (size_t)w_n_data(w) + 1;
  w->scratch = sc_calloc(n, sizeof *w->scratch);
  w->scratch_cap = sc_calloc(n, sizeof *w->scratch_cap);
  return w->scratch && w->scratch_cap ? SC_OK : nomem(&w->d);
}

/* A flat optimizer state (passes/partition/flat.c, docs/training.md):
 * state "P.<s>" of an elementwise optimizer whose global shape is not
 * parameter P's but its flat view, [S, m_pad/S] or [S, m_pad/S, T]: P's
 * elements per stride block b of its split dim d (s blocks), per piece t
 * (T pieces), row-major, the blocks one after the other, padded with zeros
 * to m_pad; element (j, t) at j·T + t. A checkpoint holds it in P's shape. */
typedef struct flat_map {
  const sc_dist_value *param; /* &pv */
  sc_dist_value pv;   /* P's global value in P's own shape */
  int32_t d;          /* the split dim (T > 1) */
  int64_t T, s, m;    /* pieces, stride blocks, elements a piece */
  int64_t padded;     /* m_pad */
} flat_map;

/* The manifest's shape of parameter `name` where the step stores it flat
 * (sc_train_manifest_param.rank > 0), else NULL. */
static const sc_train_manifest_param *stored_flat(const sc_dist_trainer *t, const char *name) {
  for (int32_t k = 0; t->m && name && k < t->m->n_params; k++)
    if (t->m->params[k].rank > 0 && strcmp(t->m->params[k].name, name) == 0)
      return &t->m->params[k];
  return NULL;
}

/* Whether state `name` (global value gv) is a flat view, and its map: the
 * same answer on every process; the split dim d of a parameter in pieces
 * (and its stride) from the manifest where ZeRO-3 stores P flat
 * (sc_train_manifest_param.split_dim), else from the sharding of w's copy
 * of P (-1 without w). A parameter ZeRO-3 stores flat is its own flat
 * view. */
static bool flat_state(const sc_dist_trainer *t, const worker *w, const char *name,
                       const sc_dist_value *gv, flat_map *f) {
  static const char *const suffix[] = {".momentum_buffer", ".exp_avg", ".exp_avg_sq"};
  char pname[1024];
  size_t n = name ? strlen(name) : 0;
  memset(f, 0, sizeof *f);
  const sc_dist_value *param = stored_flat(t, name) ? gv : NULL;
  if (param) snprintf(pname, sizeof pname, "%s", name);
  for (size_t k = 0; k < sizeof suffix / sizeof *suffix && !param; k++) {
    size_t m = strlen(suffix[k]);
    if (n <= m || n - m >= sizeof pname || strcmp(name + n - m, suffix[k]) != 0) continue;
    memcpy(pname, name, n - m);
    pname[n - m] = 0;
    param = global_input(t->dp, pname);
  }
  if (!param || gv->rank < 2 || gv->rank > 3) return false;
  f->pv = *param;
  f->param = &f->pv;
  const sc_train_manifest_param *own = stored_flat(t, pname);
  if (own) {
    f->pv.rank = own->rank;
    memcpy(f->pv.dims, own->dims, sizeof f->pv.dims);
  }
  const sc_dist_value *pv = f->param;
  bool same = pv->rank == gv->rank;
  for (int32_t k = 0; same && k < gv->rank; k++) same = pv->dims[k] == gv->dims[k];
  if (same) return false;
  int64_t numel = 1;
  for (int32_t k = 0; k < pv->rank; k++) numel *= pv->dims[k];
  f->T = gv->rank == 3 ? gv->dims[2] : 1;
  f->s = 1;
  f->d = -1;
  f->padded = gv->dims[0] * gv->dims[1];
  const sc_sharding *sh = NULL;
  if (own && own->split_parts > 1 && own->split_parts == f->T) { /* stored flat in pieces */
    f->d = own->split_dim;
    f->s = own->split_stride;
  } else if (f->T > 1 && w && w_state(w, pv->name, &sh, false) && sh) /* the dim split in T */
    for (int32_t k = 0; k < pv->rank && f->d < 0; k++)
      if (sc_sharding_dim_parts(sh, &t->dp->mesh, k) == f->T) {
        f->d = k;
        f->s = sc_sharding_stride(sh, k);
      }
  f->m = f->T >= 1 ? numel / f->T : 0;
  return true;
}

/* Whether flat_copy can map f: its pieces' dim known, the sizes agreeing. */
static bool flat_known(const flat_map *f) {
  const sc_dist_value *pv = f->param;
  if (f->T < 1 || (f->T > 1 && (f->d < 0 || pv->dims[f->d] % (f->T * f->s) != 0))) return false;
  return f->m * f->T >= 1 && f->m <= f->padded;
}

/* P's tensor (full) and its flat view (flat) element by element: to_flat
 * copies full into flat (whose padding the caller zeroed), else back. */
static void flat_copy(const flat_map *f, size_t esz, void *full, void *flat, bool to_flat) {
  sc_train_flat_copy(f->param->rank, f->param->dims, f->d, f->T, f->s, esz,
                     to_flat ? full : flat, to_flat ? flat : full, to_flat);
}

/* fill_rank of a parameter stored as its flat view (own: its shape): the
 * initialiser's whole tensor in P's shape, laid out flat and padded with
 * zeros (flat_state), rank w's piece of that cut into dst. */
static sc_status fill_flat(worker *w, const char *name, const sc_train_manifest_param *own,
                           const sc_dist_value *gv, const sc_sharding *sh, void *dst,
                           sc_diag *d) {
  struct sc_dist_trainer *t = w->t;
  int64_t n = 1, m = 1;
  for (int32_t k = 0; k < gv->rank; k++) n *= gv->dims[k];
  for (int32_t k = 0; k < own->rank; k++) m *= own->dims[k];
  if (m > n)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "parameter '%s': %lld elements, more than its flat input's %lld", name,
                       (long long)m, (long long)n);
  flat_map f;
  size_t esz = sc_dtype_size(gv->dtype);
  if (!flat_state(t, w, name, gv, &f) || !flat_known(&f))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "parameter '%s': its flat input cannot be mapped to its shape", name);
  void *whole = sc_calloc(n > 0 ? (size_t)n : 1, esz), *full = sc_malloc((size_t)m * esz);
  sc_status st = whole && full ? SC_OK : nomem(d);
  sc_sharding r;
  sc_sharding_replicated(&r, own->rank);
  if (st == SC_OK)
    st = sc_param_init_fill(t->o.init, name, gv->dtype, own->rank, own->dims, &r, &t->dp->mesh,
                            w->coords, full, d);
  if (st == SC_OK) {
    flat_copy(&f, esz, full, whole, true);
    sc_sharding_extract(sh, &t->dp->mesh, w->coords, esz, gv->dims, whole, dst);
  }
  sc_free(full);
  sc_free(whole);
  return st;
}

/* sc_trainer_opts.fill of rank w: its piece of parameter `name` written
 * by the initialiser straight into the state buffer dst. Nothing of the
 * global tensor exists on the rank: the buffer written is the piece, and
 * a split parameter's piece is smaller than the whole. */
static sc_status fill_rank(void *ctx, const char *name, const sc_buffer *b, void *dst,
                           bool *done, sc_diag *d) {
  worker *w = ctx;
  struct sc_dist_trainer *t = w->t;
  const sc_dist_value *gv = global_input(t->dp, name);
  int32_t i = input_index(t->p, name);
  const sc_init_rule *rule = NULL;
  const sc_train_manifest_param *own = stored_flat(t, name);
  sc_status st = gv && i >= 0 ? sc_param_init_check(t->o.init, name, gv->dtype,
                                                    own ? own->rank : gv->rank,
                                                    own ? own->dims : gv->dims, &rule, d)
                              : SC_OK;
  if (st != SC_OK || !rule) return st;
  const sc_sharding *sh = &t->stage->input_sharding[i];
  if (own) {
    *done = true;
    return fill_flat(w, name, own, gv, sh, dst, d);
  }
  SC_ASSERT(sc_param_init_piece_bytes(sh, &t->dp->mesh, gv->dtype, gv->rank, gv->dims) ==
            b->bytes);
  *done = true;
  return sc_param_init_fill(t->o.init, name, gv->dtype, gv->rank, gv->dims, sh, &t->dp->mesh,
                            w->coords, dst, d);
}

/* CMD_CREATE: the rank's constants, its pieces of the initial values (or
 * the initialiser's, written in place by fill_rank), its trainer (the
 * session's creation is collective). */
static sc_status create_rank(worker *w) {
  struct sc_dist_trainer *t = w->t;
  if (t->dp->pipe_chunks > 0) {
    sc_pipe_rank_opts po = {.threads = t->o.threads, .device = t->o.device, .world = w->comm,
                            .kernels = (const struct sc_cpu_module *const *)t->kern,
                            .init = t->o.init};
    sc_status st = sc_pipe_rank_create(t->dp, w->rank, t->m, &po, &w->pr, &w->d);
    return st == SC_OK ? scratch_alloc(w) : st;
  }
  const sc_program *p = t->p;
  const sc_train_manifest *m = t->m;
  sc_status st = sc_dist_rank_weights(t->dp, w->rank, &w->w, &w->d);
  if (st != SC_OK) return st;
  sc_tensor_view *init = sc_calloc((size_t)m->n_params + 1, sizeof *init);
  if (!init) return nomem(&w->d);
  int32_t n_init = 0;
  for (int32_t k = 0; st == SC_OK && k < m->n_params; k++) {
    const char *name = m->params[k].name;
    int32_t i = input_index(p, name);
    const sc_dist_value *gv = global_input(t->dp, name);
    const sc_init_rule *rule = NULL;
    const sc_train_manifest_param *own = stored_flat(t, name);
    if (i >= 0 && gv && t->o.init &&
        (st = sc_param_init_check(t->o.init, name, gv->dtype, own ? own->rank : gv->rank,
                                  own ? own->dims : gv->dims, &rule, &w->d)) != SC_OK)
      break;
    if (rule) continue; /* fill_rank writes its piece in place */
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
    o.fill = t->o.init ? fill_rank : NULL;
    o.fill_ctx = w;
    st = sc_trainer_create(p, init, n_init, &o, &w->tr, &w->d);
  }
  if (st == SC_OK) st = scratch_alloc(w);
  for (int32_t k = 0; k < n_init; k++) sc_free(init[k].data);
  sc_free(init);
  return st;
}

/* CMD_STEP: each data input's piece of every microbatch, then the step. */
static sc_status step_rank(worker *w) {
  struct sc_dist_trainer *t = w->t;
  if (!w->stepped && sc_dist_injected_failure(w->rank))
    return sc_diag_set(&w->d, SC_ERR_INVALID, NULL, NULL, "injected failure (SHARDC_FAIL_RANK)");
  w->stepped = true;
  int32_t nd = w_n_data(w);
  sc_tensor_view *local = sc_calloc((size_t)nd + 1, sizeof *local);
  if (!local) return nomem(&w->d);
  sc_status st = SC_OK;
  for (int32_t k = 0; st == SC_OK && k < nd; k++) {
    const sc_sharding *sh;
    const sc_buffer *b = w_data(w, k, &sh);
    int32_t i = k;
    const sc_tensor_view *v = b ? find_view(t->data, t->n_data, b->name) : NULL;
    if (!v || !sh) {
      st = sc_diag_set(&w->d, SC_ERR_USAGE, NULL, NULL, "data '%s' is missing",
                       b ? b->name : "?");
      break;
    }
    int64_t mb[SC_MAX_RANK];
    bool ok = v->dtype == b->dtype && v->rank == b->rank && v->data;
    for (int32_t d = 0; ok && d < b->rank; d++) {
      mb[d] = b->dims[d] * sc_sharding_dim_parts(sh, &t->dp->mesh, d);
      ok = d == 0 ? mb[0] > 0 && v->dims[0] % mb[0] == 0 : v->dims[d] == mb[d];
    }
    int64_t K = b->rank ? v->dims[0] / mb[0] : 1;
    if (ok && w->pr && K != t->dp->schedule.microbatches) {
      st = sc_diag_set(&w->d, SC_ERR_USAGE, NULL, NULL,
                       "data '%s': a pipelined step takes %d microbatches of %lld, given %lld "
                       "rows", b->name, (int)t->dp->schedule.microbatches,
                       (long long)(b->rank ? mb[0] : 1), (long long)(b->rank ? v->dims[0] : 1));
      break;
    }
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
  if (st == SC_OK && w->pr)
    st = sc_pipe_rank_step(w->pr, local, nd, t->lr, t->step, &w->loss, &w->norm, &w->applied,
                           &w->has_loss, &w->has_norm, &w->d);
  else if (st == SC_OK)
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
    if (cmd == CMD_SYNC && w->tr) sc_trainer_sync_host(w->tr); /* on the thread of its GPU */
    if (cmd == CMD_SYNC && w->pr) sc_pipe_rank_sync_host(w->pr);
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

/* Adds data input b (once) with its global dims. */
static sc_status add_data(sc_dist_trainer *t, const sc_buffer *b, sc_diag *d) {
  for (int32_t j = 0; j < t->n_data_in; j++)
    if (strcmp(t->data_in[j].name, b->name) == 0) return SC_OK;
  const sc_dist_value *gv = global_input(t->dp, b->name);
  if (!gv)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "data '%s' is not a global input", b->name);
  sc_buffer *x = &t->data_in[t->n_data_in++];
  *x = *b;
  memcpy(x->dims, gv->dims, sizeof x->dims);
  x->bytes = (int64_t)sc_dtype_size(b->dtype);
  for (int32_t i = 0; i < gv->rank; i++) x->bytes *= gv->dims[i];
  return SC_OK;
}

/* The data inputs with their global dims: every rank's, once each (a
 * pipeline's from every piece, whichever rank this process runs). */
static sc_status global_data(sc_dist_trainer *t, sc_diag *d) {
  const sc_dist_program *dp = t->dp;
  int32_t n = 0;
  for (int64_t r = 0; r < t->n_local; r++) n += w_n_data(&t->w[r]);
  for (int32_t s = 0; dp->pipe_chunks > 0 && s < dp->n_stages; s++)
    n += dp->stages[s].program->n_inputs;
  t->data_in = sc_calloc((size_t)n + 1, sizeof *t->data_in);
  if (!t->data_in) return nomem(d);
  sc_status st = SC_OK;
  for (int32_t s = 0; dp->pipe_chunks > 0 && st == SC_OK && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    for (int32_t i = 0; st == SC_OK && i < p->n_inputs; i++) {
      const sc_buffer *b = &p->buffers[p->inputs[i]];
      if (b->name && global_input(dp, b->name) && strncmp(b->name, "train:", 6) != 0 &&
          !sc_dist_is_state(dp, b->name))
        st = add_data(t, b, d);
    }
  }
  for (int64_t r = 0; dp->pipe_chunks == 0 && st == SC_OK && r < t->n_local; r++)
    for (int32_t k = 0; st == SC_OK && k < w_n_data(&t->w[r]); k++) {
      const sc_sharding *sh;
      const sc_buffer *b = w_data(&t->w[r], k, &sh);
      if (b) st = add_data(t, b, d);
    }
  return st;
}

int32_t sc_dist_trainer_n_data(const sc_dist_trainer *t) { return t->n_data_in; }
const sc_buffer *sc_dist_trainer_data(const sc_dist_trainer *t, int32_t i) {
  return i >= 0 && i < t->n_data_in ? &t->data_in[i] : NULL;
}

/* A pipelined step: every pipeline rank's action list runs to its end
 * (codegen/pipe_schedule.h), checked before any rank starts. */
static sc_status check_schedule(const sc_dist_program *dp, sc_diag *d) {
  int32_t P = dp->pipe_ranks, C = dp->pipe_chunks, M = dp->schedule.microbatches;
  sc_pipe_action **lists = sc_calloc((size_t)P, sizeof *lists);
  int32_t *n = sc_calloc((size_t)P, sizeof *n);
  sc_pipe_deps deps = {0};
  sc_status st = lists && n ? sc_pipe_deps_of(dp, &deps, d) : nomem(d);
  for (int32_t q = 0; st == SC_OK && q < P; q++)
    st = sc_pipe_schedule((sc_schedule_kind)dp->schedule.kind, P, C / P, M, q, &lists[q], &n[q],
                          d);
  if (st == SC_OK) st = sc_pipe_check(&deps, P, C / P, M, lists, n, d);
  for (int32_t q = 0; lists && q < P; q++) sc_free(lists[q]);
  sc_free(lists);
  sc_free(n);
  sc_pipe_deps_free(&deps);
  return st;
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
  if (dp->pipe_chunks == 0 && (dp->n_stages != 1 || !dp->stages[0].program))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "a training program with %d stages that is not a pipelined step",
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
  if (st == SC_OK && dp->pipe_chunks > 0) st = check_schedule(dp, d);
  bool cpu = sc_device_choice_is_cpu(&t->o.device);
  if (st == SC_OK && dp->pipe_chunks > 0) { /* every piece's kernels, once */
    t->mods = sc_calloc((size_t)dp->n_stages, sizeof *t->mods);
    t->kern = sc_calloc((size_t)dp->n_stages, sizeof *t->kern);
    if (!t->mods || !t->kern) st = nomem(d);
    sc_progress pr; /* which piece's kernels of how many (ir/progress.h) */
    sc_progress_begin(&pr, "compiling kernels", dp->n_stages, false);
    for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
      sc_cpu_opts co;
      sc_cpu_opts_init(&co);
      char label[64];
      sc_pipe_program_label(dp->pipe_chunks, s, dp->n_stages, label, sizeof label);
      sc_progress_set(&pr, s, label);
      if (!(t->kern[s] = dp->stages[s].kernels) && cpu &&
          (st = sc_cpu_jit(dp->stages[s].program, &co, &t->mods[s], d)) == SC_OK)
        t->kern[s] = t->mods[s];
    }
    sc_progress_end(&pr);
  } else if (st == SC_OK && !t->o.cpu_module && cpu) {
    sc_cpu_opts co;
    sc_cpu_opts_init(&co);
    if ((st = sc_cpu_jit(t->p, &co, &t->mod, d)) == SC_OK) t->o.cpu_module = t->mod;
  }
#ifdef __GLIBC__
  /* the compiler's and the JIT's freed heap back to the system before the
   * ranks allocate their arenas (glibc keeps it otherwise: 30 MiB of the
   * 17.4M GPT's peak RSS at fsdp=8) */
  if (st == SC_OK) malloc_trim(0);
#endif
  if (st == SC_OK && world) t->comms[0] = world;
  else if (st == SC_OK)
    st = t->o.device.comm_on_device ? sc_comm_cuda_local_create_group((int)n, t->comms, d)
                                    : sc_comm_local_create_group((int)n, t->comms, d);
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

/* Whether this rank is the one copy of its piece that speaks for it: its
 * coordinate is 0 on every axis its sharding does not split, but the
 * pipeline's (each value lives on one pipeline coordinate). */
static bool first_copy(const sc_dist_trainer *t, const int64_t *coords, const sc_sharding *sh) {
  sc_axes split = sh ? sc_sharding_dim_axes(sh) : 0;
  for (int32_t a = 0; a < t->dp->mesh.n_axes; a++)
    if (a != t->dp->pp_axis && !(split & (1u << a)) && coords[a] != 0) return false;
  return true;
}

/* bytes at x, summed over the world as integers: exact when one process
 * gives the bytes and the others zeros (a sum of floats would turn -0 into
 * +0). */
static sc_status sum_bytes(sc_comm *world, void *x, int64_t bytes, sc_diag *d) {
  bool words = bytes % 4 == 0;
  return sc_comm_all_reduce(world, x, x, words ? bytes / 4 : bytes,
                            words ? SC_DTYPE_I32 : SC_DTYPE_I8, SC_REDUCE_SUM, d);
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
  /* a pipeline's: from the ranks that made them */
  const worker *wl = &t->w[0], *wn = &t->w[0];
  for (int64_t r = t->n_local - 1; t->dp->pipe_chunks > 0 && r >= 0; r--) {
    if (t->w[r].has_loss) wl = &t->w[r];
    if (t->w[r].has_norm) wn = &t->w[r];
  }
  double v[3] = {wl->loss, wn->norm, wn->applied ? 1.0 : 0.0};
  if (t->world && t->dp->pipe_chunks > 0) { /* one process made them: to all */
    const worker *w = &t->w[0];
    bool first = first_copy(t, w->coords, NULL);
    if (!(w->has_loss && first)) memset(&v[0], 0, sizeof v[0]);
    if (!(w->has_norm && first)) memset(&v[1], 0, 2 * sizeof v[1]);
    if ((st = sum_bytes(t->world, v, sizeof v, d)) != SC_OK) return st;
  }
  if (loss) *loss = v[0];
  if (grad_norm) *grad_norm = v[1];
  if (applied) *applied = v[2] != 0;
  return SC_OK;
}

int64_t sc_dist_trainer_ranks(const sc_dist_trainer *t) { return t->n; }

/* Whether global input `name` is state of the step (the step writes
 * "new:name"; the same answer on every process), its global value through
 * *gv. */
static bool is_state(const sc_dist_trainer *t, const char *name, const sc_dist_value **gv) {
  *gv = global_input(t->dp, name);
  return *gv && sc_dist_is_state(t->dp, name);
}

/* State `name`'s global tensor (gv's shape) put together from the ranks'
 * pieces into *out (the caller frees it); every process calls it alike. */
static sc_status gather_state(const sc_dist_trainer *t, const char *name, const sc_dist_value *gv,
                              void **out, sc_diag *d) {
  *out = NULL;
  int64_t numel = 1;
  for (int32_t k = 0; k < gv->rank; k++) numel *= gv->dims[k];
  size_t esz = sc_dtype_size(gv->dtype);
  void *all = sc_calloc(numel > 0 ? (size_t)numel : 1, esz);
  if (!all) return nomem(d);
  sc_status st = SC_OK;
  const sc_sharding *sh;
  if (t->world && t->dp->pipe_chunks > 0) { /* one copy of each piece, in place */
    const void *x = w_state(&t->w[0], name, &sh, false);
    if (x && first_copy(t, t->w[0].coords, sh))
      sc_sharding_insert(sh, &t->dp->mesh, t->w[0].coords, esz, gv->dims, x, all);
    st = sum_bytes(t->world, all, numel * (int64_t)esz, d);
  } else if (!t->world) { /* pipeline ranks that do not hold it have nothing to add */
    for (int64_t r = 0; r < t->n_local; r++) {
      const void *x = w_state(&t->w[r], name, &sh, false);
      if (x) sc_sharding_insert(sh, &t->dp->mesh, t->w[r].coords, esz, gv->dims, x, all);
    }
  } else { /* every rank's piece from the world, each put in its place */
    const void *x = w_state(&t->w[0], name, &sh, false);
    int32_t i = input_index(t->p, name);
    const sc_buffer *b = &t->p->buffers[t->p->inputs[i]];
    int64_t count = b->bytes / (int64_t)esz;
    char *pieces = sc_malloc((size_t)(b->bytes > 0 ? b->bytes : 1) * (size_t)t->n);
    st = pieces ? sc_comm_all_gather(t->world, x, pieces, count, b->dtype, d) : nomem(d);
    for (int64_t r = 0; st == SC_OK && r < t->n; r++) {
      int64_t coords[SC_MESH_MAX_AXES];
      sc_mesh_rank_to_coords(&t->dp->mesh, r, coords);
      sc_sharding_insert(sh, &t->dp->mesh, coords, esz, gv->dims,
                         pieces + (size_t)(r * b->bytes), all);
    }
    sc_free(pieces);
  }
  if (st != SC_OK) {
    sc_free(all);
    return st;
  }
  *out = all;
  return SC_OK;
}

/* A worker of this process holding state `name`, or NULL. */
static const worker *holder(const sc_dist_trainer *t, const char *name) {
  const sc_sharding *sh;
  for (int64_t r = 0; r < t->n_local; r++)
    if (w_state(&t->w[r], name, &sh, false)) return &t->w[r];
  return NULL;
}

/* State `name`'s global tensor as a checkpoint holds it: a flat view back
 * in its parameter's shape (*dims, *rank). */
static sc_status state_tensor(const sc_dist_trainer *t, const char *name, const sc_dist_value *gv,
                              void **out, int64_t *dims, int32_t *rank, sc_diag *d) {
  flat_map f;
  bool flat = flat_state(t, holder(t, name), name, gv, &f);
  sc_status st = gather_state(t, name, gv, out, d);
  const sc_dist_value *shape = flat ? f.param : gv;
  *rank = shape->rank;
  memcpy(dims, shape->dims, (size_t)shape->rank * sizeof *dims);
  if (st != SC_OK || !flat) return st;
  if (!flat_known(&f)) {
    sc_free(*out);
    *out = NULL;
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "state '%s': a flat view of '%s' that this process cannot map back "
                       "(it holds no copy of the parameter)",
                       name, f.param->name);
  }
  size_t esz = sc_dtype_size(gv->dtype);
  void *full = sc_malloc(f.m * f.T > 0 ? (size_t)(f.m * f.T) * esz : 1);
  if (!full) {
    sc_free(*out);
    *out = NULL;
    return nomem(d);
  }
  flat_copy(&f, esz, full, *out, false);
  sc_free(*out);
  *out = full;
  return SC_OK;
}

/* ---- a vocabulary-padded parameter at the boundary (train_manifest.h:
 * "W.vocab_padded" and its optimizer state are W's, with W's rows) ---- */
enum { NAME_CAP = 1024 };

/* The manifest's padded parameter of state `name`, its model name in
 * model[NAME_CAP]; NULL when the state is no padded parameter's. */
static const sc_train_manifest_param *vocab_state(const sc_dist_trainer *t, const char *name,
                                                  char *model) {
  const sc_train_manifest_param *q = NULL;
  return sc_train_vocab_model_name(t->m, name, model, NAME_CAP, &q) ? q : NULL;
}

/* SC_OK when q's vocabulary dim fits state `name`'s shape (rank, dims:
 * padded, at least q->vocab there), else an error naming it. */
static sc_status vocab_check(const sc_train_manifest_param *q, const char *name, int32_t rank,
                             const int64_t *dims, sc_diag *d) {
  if (q->vocab_dim >= 0 && q->vocab_dim < rank && q->vocab <= dims[q->vocab_dim]) return SC_OK;
  return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "state '%s': its vocabulary dim does not fit its shape", name);
}

/* A copy of `from` (rank, from_dims) in the box `to_dims` at the origin:
 * clipped where to_dims is smaller, zeros where it is larger. NULL when
 * out of memory. */
static void *vocab_reshape(size_t esz, int32_t rank, const int64_t *from_dims, const void *from,
                           const int64_t *to_dims) {
  int64_t numel = 1, box[SC_MAX_RANK], zero[SC_MAX_RANK] = {0};
  for (int32_t k = 0; k < rank; k++) {
    numel *= to_dims[k];
    box[k] = from_dims[k] < to_dims[k] ? from_dims[k] : to_dims[k];
  }
  void *to = sc_calloc(numel > 0 ? (size_t)numel : 1, esz);
  if (to) sc_ckpt_copy_box(esz, rank, box, from, from_dims, zero, to, to_dims, zero);
  return to;
}

/* The model's rows of padded parameter q's state `name`, a global tensor
 * (*data, rank, dims) in the parameter's shape: *data replaced by a copy
 * clipped on q's vocabulary dim (freed: the old), dims updated. */
static sc_status vocab_clip(const sc_train_manifest_param *q, const char *name, size_t esz,
                            int32_t rank, int64_t *dims, void **data, sc_diag *d) {
  sc_status st = vocab_check(q, name, rank, dims, d);
  if (st != SC_OK) return st;
  int64_t to[SC_MAX_RANK];
  memcpy(to, dims, (size_t)rank * sizeof *to);
  to[q->vocab_dim] = q->vocab;
  void *clipped = vocab_reshape(esz, rank, dims, *data, to);
  if (!clipped) return nomem(d);
  sc_free(*data);
  *data = clipped;
  memcpy(dims, to, (size_t)rank * sizeof *dims);
  return SC_OK;
}

sc_status sc_dist_trainer_state(sc_dist_trainer *t, const char *name, sc_tensor_view *v,
                                sc_diag *d) {
  memset(v, 0, sizeof *v);
  sc_status st0 = run_all(t, CMD_SYNC, d);
  if (st0 != SC_OK) return st0;
  const sc_dist_value *gv;
  char step[NAME_CAP], model[NAME_CAP];
  const sc_train_manifest_param *q = NULL;
  const char *asked = name;
  if (name && !is_state(t, name, &gv) &&
      sc_train_vocab_step_name(t->m, name, step, sizeof step, &q)) /* W: its padded copy */
    name = step;
  if (!name || !is_state(t, name, &gv))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "'%s' is not state of the step",
                       name ? name : "");
  q = vocab_state(t, name, model);
  void *all = NULL;
  *v = (sc_tensor_view){.name = gv->name, .dtype = gv->dtype};
  sc_status st = state_tensor(t, name, gv, &all, v->dims, &v->rank, d);
  if (st == SC_OK && q && /* the model's rows */
      (st = vocab_clip(q, name, sc_dtype_size(gv->dtype), v->rank, v->dims, &all, d)) == SC_OK &&
      asked != name)
    v->name = asked; /* the model's name, as it was asked for */
  if (st != SC_OK) {
    sc_free(all);
    memset(v, 0, sizeof *v);
    return st;
  }
  v->data = all;
  return SC_OK;
}

int64_t sc_dist_trainer_arena_bytes(const sc_dist_trainer *t, int64_t r) {
  if (r < 0 || r >= t->n_local) return 0;
  return t->w[r].pr ? sc_pipe_rank_arena_bytes(t->w[r].pr) : sc_trainer_arena_bytes(t->w[r].tr);
}

int64_t sc_dist_trainer_host_pool_bytes(const sc_dist_trainer *t, int64_t r) {
  if (r < 0 || r >= t->n_local || t->w[r].pr) return 0;
  return sc_trainer_host_pool_bytes(t->w[r].tr);
}

int32_t sc_dist_trainer_state_count(const sc_dist_trainer *t, int64_t r, int32_t *in_place) {
  if (in_place) *in_place = 0;
  if (r < 0 || r >= t->n_local) return 0;
  return t->w[r].pr ? sc_pipe_rank_state_count(t->w[r].pr, in_place)
                    : sc_trainer_state_count(t->w[r].tr, in_place);
}

/* The largest f(rank) over this process's ranks of pipeline coordinate q. */
static int64_t pipe_most(const sc_dist_trainer *t, int32_t q,
                         int64_t (*f)(const sc_pipe_rank *r)) {
  int64_t most = 0;
  for (int64_t r = 0; t->dp->pipe_chunks > 0 && r < t->n_local; r++) {
    const worker *w = &t->w[r];
    if (w->pr && w->coords[t->dp->pp_axis] == q && f(w->pr) > most) most = f(w->pr);
  }
  return most;
}

int64_t sc_dist_trainer_stash_bytes(const sc_dist_trainer *t, int32_t q) {
  return pipe_most(t, q, sc_pipe_rank_peak_stash_bytes);
}

static int64_t peak_host(const sc_pipe_rank *r) { return sc_pipe_rank_peak_host_bytes(r, NULL); }
int64_t sc_dist_trainer_pipe_host_bytes(const sc_dist_trainer *t, int32_t q) {
  return pipe_most(t, q, peak_host);
}

int64_t sc_dist_trainer_pipe_arena_bytes(const sc_dist_trainer *t, int32_t q) {
  return pipe_most(t, q, sc_pipe_rank_arena_bytes);
}

int64_t sc_dist_trainer_rank(const sc_dist_trainer *t) {
  return t->world ? sc_comm_rank(t->world) : 0;
}

void sc_dist_trainer_abort(sc_dist_trainer *t, const char *msg) {
  for (int64_t r = 0; r < t->n_local; r++) sc_comm_abort(t->comms[r], msg);
}

/* The step's state tensors are global inputs that some rank holds as
 * state; accumulators are not saved. */
static bool saved_state(const sc_dist_trainer *t, const char *name, const sc_dist_value **gv) {
  return name && strncmp(name, "accum:", 6) != 0 && is_state(t, name, gv);
}

/* Room for shard n in *sh and *owned (capacity *cap, doubled when full). */
static sc_status room(sc_ckpt_shard **sh, bool **owned, int32_t *cap, int32_t n, sc_diag *d) {
  if (n < *cap) return SC_OK;
  sc_ckpt_shard *y = sc_realloc(*sh, (size_t)*cap * 2 * sizeof *y);
  if (y) *sh = y;
  bool *z = sc_realloc(*owned, (size_t)*cap * 2 * sizeof *z);
  if (z) *owned = z;
  if (!y || !z) return nomem(d);
  *cap *= 2;
  return SC_OK;
}

/* The worker of this process that writes state `name` whole (a flat
 * view): the one holding it at coordinate 0 on every axis but pp, or NULL. */
static const worker *whole_writer(const sc_dist_trainer *t, const char *name) {
  const sc_sharding *sh;
  for (int64_t r = 0; r < t->n_local; r++) {
    bool first = true;
    for (int32_t a = 0; a < t->dp->mesh.n_axes; a++)
      if (a != t->dp->pp_axis && t->w[r].coords[a] != 0) first = false;
    if (first && w_state(&t->w[r], name, &sh, false)) return &t->w[r];
  }
  return NULL;
}

/* The shards this process's ranks write (checkpoint format 2): the pieces
 * each holds the one copy of (first_copy), one shard per stride block;
 * owned[k]: shard k's data was packed here (free it). A vocabulary-padded
 * parameter's state is written as the model's tensor (its name, its rows:
 * pieces clipped there, a piece wholly in the padding left out); such a
 * shard's name is in *names (n_names of them, freed with the shards). */
typedef struct shard_set {
  sc_ckpt_shard *sh;
  bool *owned;
  int32_t n, cap;
  char **names;
  int32_t n_names;
} shard_set;

/* A copy of the model name of a padded state, kept in set (NULL: out of
 * memory). */
static const char *keep_name(shard_set *set, const char *model) {
  char **y = sc_realloc(set->names, (size_t)(set->n_names + 1) * sizeof *y);
  if (!y) return NULL;
  set->names = y;
  size_t len = strlen(model) + 1;
  char *c = sc_malloc(len);
  if (c) {
    memcpy(c, model, len);
    y[set->n_names++] = c;
  }
  return c;
}

static sc_status collect_shards(const sc_dist_trainer *t, shard_set *set, sc_diag *d) {
  const sc_dist_program *dp = t->dp;
  set->cap = 64;
  set->sh = sc_malloc((size_t)set->cap * sizeof *set->sh);
  set->owned = sc_calloc((size_t)set->cap, sizeof *set->owned);
  sc_status st = set->sh && set->owned ? SC_OK : nomem(d);
  for (int32_t i = 0; st == SC_OK && i < dp->n_inputs; i++) {
    const char *name = dp->inputs[i].name;
    const sc_dist_value *gv;
    if (!saved_state(t, name, &gv)) continue;
    size_t esz = sc_dtype_size(gv->dtype);
    char model[NAME_CAP];
    const sc_train_manifest_param *q = vocab_state(t, name, model);
    const char *as = q ? keep_name(set, model) : name;
    if (!as) {
      st = nomem(d);
      break;
    }
    flat_map f;
    if (flat_state(t, NULL, name, gv, &f)) { /* whole, in P's shape, by one rank */
      if ((st = room(&set->sh, &set->owned, &set->cap, set->n, d)) != SC_OK) break;
      const worker *w = whole_writer(t, name);
      void *x = NULL;
      int64_t dims[SC_MAX_RANK];
      int32_t rank = 0;
      if (w) st = state_tensor(t, name, gv, &x, dims, &rank, d);
      else st = gather_state(t, name, gv, &x, d); /* the others' part of the collective */
      if (st == SC_OK && w && q) st = vocab_clip(q, name, esz, rank, dims, &x, d);
      if (st != SC_OK || !w) {
        sc_free(x);
        continue;
      }
      sc_ckpt_shard *e = &set->sh[set->n];
      *e = (sc_ckpt_shard){.group = sc_train_is_optimizer_state(name) ? SC_CKPT_OPTIMIZER
                                                                      : SC_CKPT_WEIGHTS,
                           .writer = (int32_t)w->rank, .name = as,
                           .dtype = gv->dtype, .rank = rank, .data = x};
      memcpy(e->dims, dims, sizeof e->dims);
      memcpy(e->shape, dims, sizeof e->shape);
      set->owned[set->n++] = true;
      continue;
    }
    if (q && (st = vocab_check(q, name, gv->rank, gv->dims, d)) != SC_OK) break;
    for (int64_t r = 0; st == SC_OK && r < t->n_local; r++) {
      const sc_sharding *s;
      const void *x = w_state(&t->w[r], name, &s, false);
      if (!x || !first_copy(t, t->w[r].coords, s)) continue;
      int64_t off[SC_MAX_RANK], ext[SC_MAX_RANK], local[SC_MAX_RANK], blocks = 1;
      for (int32_t k = 0; k < gv->rank; k++) {
        sc_sharding_piece(s, &dp->mesh, k, gv->dims[k], t->w[r].coords, &off[k], &ext[k]);
        local[k] = ext[k] * sc_sharding_stride(s, k);
        blocks *= sc_sharding_stride(s, k);
      }
      for (int64_t b = 0; st == SC_OK && b < blocks; b++) {
        if ((st = room(&set->sh, &set->owned, &set->cap, set->n, d)) != SC_OK) break;
        sc_ckpt_shard *e = &set->sh[set->n];
        *e = (sc_ckpt_shard){.group = sc_train_is_optimizer_state(name) ? SC_CKPT_OPTIMIZER
                                                                        : SC_CKPT_WEIGHTS,
                             .writer = (int32_t)t->w[r].rank, .name = as, .dtype = gv->dtype,
                             .rank = gv->rank, .data = x};
        memcpy(e->dims, gv->dims, sizeof e->dims);
        /* block b: a mixed-radix index over the dims' strides */
        int64_t rest = b, src_off[SC_MAX_RANK] = {0};
        for (int32_t k = gv->rank - 1; k >= 0; k--) {
          int64_t sk = sc_sharding_stride(s, k), bk = rest % sk;
          rest /= sk;
          e->offsets[k] = bk * (gv->dims[k] / sk) + off[k];
          e->shape[k] = ext[k];
          src_off[k] = bk * ext[k];
        }
        bool clipped = false;
        if (q) { /* the model's rows only */
          int32_t v = q->vocab_dim;
          e->dims[v] = q->vocab;
          if (e->offsets[v] >= q->vocab) continue; /* all padding */
          if (e->offsets[v] + e->shape[v] > q->vocab) {
            e->shape[v] = q->vocab - e->offsets[v];
            clipped = true;
          }
        }
        set->owned[set->n] = blocks > 1 || clipped;
        if (set->owned[set->n]) { /* one block of a strided piece, or its rows, packed */
          int64_t vol = 1;
          for (int32_t k = 0; k < gv->rank; k++) vol *= e->shape[k];
          void *box = sc_malloc(vol > 0 ? (size_t)vol * esz : 1);
          if (!box) {
            st = nomem(d);
            break;
          }
          int64_t zero[SC_MAX_RANK] = {0};
          sc_ckpt_copy_box(esz, gv->rank, e->shape, x, local, src_off, box, e->shape, zero);
          e->data = box;
        }
        set->n++;
      }
    }
  }
  return st;
}

static void free_shards(shard_set *set) {
  for (int32_t k = 0; set->sh && set->owned && k < set->n; k++)
    if (set->owned[k]) sc_free((void *)set->sh[k].data);
  for (int32_t k = 0; k < set->n_names; k++) sc_free(set->names[k]);
  sc_free(set->names);
  sc_free(set->sh);
  sc_free(set->owned);
  memset(set, 0, sizeof *set);
}

/* A sharded save. Thread-ranks: one call writes every rank's files. One
 * rank per process: rank 0 opens the temporary folder and says where, every
 * process writes its own files there and sends rank 0 their description,
 * rank 0 writes the manifest and swaps the folder in, and says how it went
 * (checkpoint.h: sc_ckpt_shards_*). */
static sc_status save_shards(const sc_dist_trainer *t, const char *dir,
                             const struct sc_ckpt_state *cs, sc_diag *d) {
  shard_set set = {0};
  sc_status st = collect_shards(t, &set, d);
  if (!t->world) {
    if (st == SC_OK) st = sc_ckpt_save_shards(dir, cs, set.sh, set.n, d);
    free_shards(&set);
    return st;
  }
  enum { PATH = 4096 };
  int me = sc_comm_rank(t->world), size = sc_comm_size(t->world);
  char path[PATH] = {0};
  sc_ckpt_commit *c = NULL;
  const char *tmp = NULL;
  if (me == 0 && st == SC_OK && sc_ckpt_shards_begin(dir, &c, &tmp, d) == SC_OK)
    snprintf(path, sizeof path, "%s", tmp);
  sc_diag cd;
  sc_diag_clear(&cd);
  sc_status cst = sum_bytes(t->world, path, sizeof path, &cd); /* rank 0's path, to all */
  if (cst != SC_OK) {
    free_shards(&set);
    *d = cd;
    return cst;
  }
  char *part = NULL;
  if (st == SC_OK && path[0]) st = sc_ckpt_shards_write(dir, path, set.sh, set.n, &part, d);
  else if (st == SC_OK)
    st = me == 0 ? d->status
                 : sc_diag_set(d, SC_ERR_IO, NULL, NULL, "rank 0 could not start the save");
  free_shards(&set);
  /* every part to rank 0: lengths (-1: this rank failed), then the texts */
  int64_t len = st == SC_OK && part ? (int64_t)strlen(part) + 1 : -1, *lens =
      sc_calloc((size_t)size, sizeof *lens);
  cst = lens ? sc_comm_all_gather(t->world, &len, lens, 1, SC_DTYPE_I64, &cd) : nomem(&cd);
  int64_t most = 1;
  for (int q = 0; cst == SC_OK && q < size; q++) most = lens[q] > most ? lens[q] : most;
  char *mine = sc_calloc((size_t)most, 1), *all = sc_calloc((size_t)most * (size_t)size, 1);
  if (cst == SC_OK && (!mine || !all)) cst = nomem(&cd);
  if (cst == SC_OK && len > 0) memcpy(mine, part, (size_t)len);
  if (cst == SC_OK) cst = sc_comm_all_gather(t->world, mine, all, most, SC_DTYPE_I8, &cd);
  int32_t outcome = SC_OK;
  if (me == 0) {
    const char **parts = sc_calloc((size_t)size, sizeof *parts);
    sc_status s0 = cst != SC_OK ? cst : st != SC_OK ? st : parts ? SC_OK : nomem(d);
    for (int q = 0; s0 == SC_OK && q < size; q++) {
      if (lens[q] < 0) s0 = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "rank %d could not write its "
                                        "shards", q);
      parts[q] = all + (size_t)q * (size_t)most;
    }
    outcome = sc_ckpt_shards_finish(c, dir, cs, parts, size, s0, d);
    sc_free(parts);
  }
  free(part); /* jansson's */
  sc_free(mine);
  sc_free(all);
  sc_free(lens);
  if (cst != SC_OK && me != 0) {
    *d = cd;
    return cst;
  }
  int32_t told = me == 0 ? outcome : 0; /* rank 0's outcome, to all */
  sc_diag_clear(&cd);
  if (sum_bytes(t->world, &told, sizeof told, &cd) != SC_OK) told = SC_ERR_IO;
  if (told != SC_OK && me != 0 && st == SC_OK)
    st = sc_diag_set(d, (sc_status)told, NULL, NULL, "rank 0 could not finish the save");
  return me == 0 ? (sc_status)outcome : st;
}

sc_status sc_dist_trainer_save(sc_dist_trainer *t, const char *dir,
                               const struct sc_ckpt_state *cs, sc_diag *d) {
  sc_status st = run_all(t, CMD_SYNC, d);
  return st == SC_OK ? save_shards(t, dir, cs, d) : st;
}

sc_status sc_dist_trainer_restore(sc_dist_trainer *t, const struct sc_ckpt *c, sc_diag *d) {
  const sc_dist_program *dp = t->dp;
  int32_t used[SC_CKPT_GROUP_COUNT] = {0};
  sc_status st0 = run_all(t, CMD_SYNC, d); /* the host copies current before they are written */
  if (st0 != SC_OK) return st0;
  for (int32_t i = 0; i < dp->n_inputs; i++) {
    const char *name = dp->inputs[i].name;
    const sc_dist_value *gv;
    if (!saved_state(t, name, &gv)) continue;
    int32_t g;
    char model[NAME_CAP];
    const sc_train_manifest_param *q = vocab_state(t, name, model);
    const sc_ckpt_tensor *x = sc_trainer_ckpt_tensor(c, q ? model : name, &g, d);
    if (!x) return d->status;
    flat_map f;
    bool flat = flat_state(t, holder(t, name), name, gv, &f);
    const sc_dist_value *shape = flat ? f.param : gv; /* a flat view's: its parameter's */
    int64_t want[SC_MAX_RANK]; /* the checkpoint's: a padded parameter's, the model's rows */
    memcpy(want, shape->dims, sizeof want);
    if (q && vocab_check(q, name, shape->rank, shape->dims, d) != SC_OK) return d->status;
    if (q) want[q->vocab_dim] = q->vocab;
    bool same = x->dtype == gv->dtype && x->rank == shape->rank;
    for (int32_t k = 0; same && k < shape->rank; k++) same = x->dims[k] == want[k];
    if (!same)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "checkpoint tensor '%s': not the step's dtype and global shape",
                         x->name);
    size_t esz = sc_dtype_size(gv->dtype);
    void *padded = NULL; /* a padded parameter's: the model's rows and zeros */
    if (q && !(padded = vocab_reshape(esz, shape->rank, x->dims, x->data, shape->dims)))
      return nomem(d);
    const void *whole = padded ? padded : x->data;
    void *view = NULL; /* a flat view's global tensor, cut from P's shape */
    if (flat && holder(t, name)) {
      int64_t numel = f.padded * f.T;
      if (!flat_known(&f)) {
        sc_free(padded);
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "checkpoint tensor '%s': the flat view of '%s' cannot be mapped",
                           name, f.param->name);
      }
      if (!(view = sc_calloc((size_t)numel, esz))) {
        sc_free(padded);
        return nomem(d);
      }
      flat_copy(&f, esz, (void *)whole, view, true);
    }
    /* each rank's own state buffer (its arena slot or host copy): the
     * workers are idle, so the main thread may write it */
    for (int64_t r = 0; r < t->n_local; r++) {
      const sc_sharding *sh;
      void *piece = w_state(&t->w[r], name, &sh, true);
      if (piece)
        sc_sharding_extract(sh, &t->dp->mesh, t->w[r].coords, esz, gv->dims,
                            view ? view : whole, piece);
    }
    sc_free(view);
    sc_free(padded);
    used[g]++;
  }
  /* a checkpoint tensor that is no state of the step */
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++)
    for (int32_t k = 0; used[g] != sc_ckpt_count(c, (sc_ckpt_group)g) &&
                        k < sc_ckpt_count(c, (sc_ckpt_group)g);
         k++) {
      const sc_ckpt_tensor *x = sc_ckpt_tensor_at(c, (sc_ckpt_group)g, k);
      const sc_dist_value *gv;
      char step[NAME_CAP];
      const sc_train_manifest_param *q = NULL;
      if (!saved_state(t, x->name, &gv) &&
          !(sc_train_vocab_step_name(t->m, x->name, step, sizeof step, &q) &&
            saved_state(t, step, &gv)))
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "checkpoint tensor '%s' (%s) is not state of this training step",
                           x->name, sc_ckpt_group_name((sc_ckpt_group)g));
    }
  return SC_OK;
}

double sc_dist_trainer_loss_scale(const sc_dist_trainer *t, int64_t *growth) {
  if (t->w[0].pr) { /* no loss scaling in a pipelined step (driver.c) */
    if (growth) *growth = 0;
    return 1.0;
  }
  return sc_trainer_loss_scale(t->w[0].tr, growth);
}

void sc_dist_trainer_set_loss_scale(sc_dist_trainer *t, double scale, int64_t growth) {
  for (int64_t r = 0; r < t->n_local; r++)
    if (t->w[r].tr) sc_trainer_set_loss_scale(t->w[r].tr, scale, growth);
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
    int32_t nd = w->tr || w->pr ? w_n_data(w) : 0;
    for (int32_t i = 0; w->scratch && i < nd; i++) sc_free(w->scratch[i]);
    sc_trainer_destroy(w->tr);
    sc_pipe_rank_destroy(w->pr);
    sc_dist_weights_free(&w->w);
    sc_free(w->scratch);
    sc_free(w->scratch_cap);
  }
  for (int64_t r = 0; t->comms && !t->world && r < t->n_local; r++) sc_comm_destroy(t->comms[r]);
  sc_cpu_module_destroy(t->mod);
  for (int32_t s = 0; t->mods && s < t->dp->n_stages; s++) sc_cpu_module_destroy(t->mods[s]);
  sc_free(t->kern);
  sc_free(t->mods);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  sc_free(t->data_in);
  sc_free(t->comms);
  sc_free(t->th);
  sc_free(t->w);
  sc_free(t);
}
