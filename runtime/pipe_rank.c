/* pipe_rank.c — one rank of a pipelined training step (pipe_rank.h).
 *
 * Tables built once at creation, the same on every rank (so that tags
 * agree): the handovers, every (piece, output) that another piece reads,
 * numbered in piece and output order; for each, how many pieces of each
 * pipeline coordinate read it per microbatch (forward and backward
 * readers) and once per step (norm and update readers, which read the
 * last microbatch's value: the accumulated gradient). Per rank: one
 * binding per input of each of its pieces (data, state, scalar, or a
 * handover) and the action list.
 *
 * A handover's value for microbatch k lives in slot k (slot 0 for a value
 * made once per step) on each rank that reads it, and on the producer
 * only when the producer's own rank reads it. readers[h][k] counts the
 * reads still to come this step; the slot is freed at zero.
 *
 * On a device whose arena is not host memory, each state tensor also has
 * its place in the rank's store (state.dev, past the pieces' part of the
 * shared arena: pipe_rank.h); run_action copies it into a piece's slots
 * and back, and the host buffers are copies kept in step by push_state and
 * sc_pipe_rank_sync_host (dev_stale, host_stale), as in trainer.c. */
#include "runtime/pipe_rank.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/pipe_schedule.h"
#include "ir/sharding.h"
#include "runtime/comm.h"
#include "runtime/param_init.h"

enum { B_DATA, B_STATE, B_LR, B_BC1, B_BC2, B_HANDOFF };
/* the state store's alignment: SC_CUDA_CONST_ALIGN's 256 bytes */
enum { STORE_ALIGN = 256 };

/* This rank's copies of a handoff's values (codegen/pipe_schedule.h). */
typedef struct handoff {
  void **slot;            /* [M] (NULL: none) */
  int32_t *left;          /* [M] reads still to come this step */
} handoff;

typedef struct binding {
  int8_t kind;
  int32_t index;          /* data: data index; state: state index; handoff: id */
} binding;

typedef struct piece {
  const sc_program *p;
  sc_session *s;
  sc_dist_weights w;      /* its sharded constants, this rank's pieces */
  binding *in;            /* [p->n_inputs] */
  sc_tensor_view *iv, *ov;
  int32_t *out_handoff;   /* [p->n_outputs] handoff id, or -1 */
  int32_t *out_state;     /* [p->n_outputs] state index of "new:X", or -1 */
  void **bound;           /* [p->n_inputs] its bound inputs' state buffers (p->bound) */
  void *scalars;          /* 3 x 8 bytes: lr, bc1, bc2 in the program's dtype */
} piece;

typedef struct state {
  const char *name;
  const sc_buffer *b;     /* a reader's buffer (this rank's piece) */
  const sc_sharding *sh;
  void *data;
  bool accum;
  bool in_place;          /* a piece writes its new value here (a bound, kept pair) */
  void *dev;              /* a device arena: its place in the rank's store, or NULL */
} state;

typedef struct copy_job {
  void *dst;
  const void *src;
  size_t bytes;
} copy_job;

struct sc_pipe_rank {
  const sc_dist_program *dp;
  sc_comm *world;
  int64_t rank, coords[SC_MESH_MAX_AXES];
  int32_t P, C, M, me;    /* me: this rank's pipeline coordinate */
  piece *pc;              /* [n_stages]; p NULL for other ranks' pieces */
  sc_pipe_handoffs t;     /* the program's handoffs */
  handoff *h;             /* [t.n] */
  int32_t n_h;
  state *st;
  int32_t n_st, cap_st;
  const sc_buffer **data;  /* [n_data] one reader's buffer per data input */
  const sc_sharding **data_sh;
  int32_t n_data;
  sc_pipe_action *acts;
  int32_t n_acts;
  double beta1, beta2;
  int64_t stash, peak_stash;
  /* activation offloading (docs/offload.md, "Pipelines"): microbatch k of
   * handoff h (cell h·M + k) goes to the host pool after action out[cell]
   * and its copy back starts before action back[cell] (-1: not offloaded
   * here, sc_pipe_offload_back); where[cell]: W_OUT the copy queue is
   * copying its stash slot into the host slot other[cell], W_MADE the
   * piece's output in its arena into the host slot slot[k], W_HOST its slot
   * is in the host pool, W_BACK the copy queue is copying it into the
   * stash slot other[cell] (job ticket[cell]); pend[0..n_pend): the cells
   * whose copy out is not waited for yet; cur: the action running */
  int32_t *out, *back, cur;
  uint8_t *where;
  void **other;
  int64_t *ticket, *pend, n_pend;
  int64_t host, peak_host, host_copies;
  /* the copy queue: a thread running jobs[next..n_jobs) in order; done
   * counts those finished (mu, cv guard all four); waited: the jobs the
   * rank's thread waited for (copies_wait), which a slot a job reads or
   * writes is freed only after (race_check) */
  pthread_t copier;
  bool copier_on, stop, skip_out_waits;
  int64_t waited;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  copy_job *jobs;
  int64_t n_jobs, next, done;
  /* the state store, on a device whose arena is not host memory (the
   * module comment of pipe_rank.h): owner's session does the copies */
  sc_session *owner;
  bool dev_stale;          /* a host copy was written: uploaded before the next step */
  bool host_stale;         /* a step changed the store since the host copies were read */
  int32_t n_loss;          /* losses seen this step */
  bool has_norm;           /* the gradient norm was made here */
};

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

enum { W_STASH, W_OUT, W_MADE, W_HOST, W_BACK }; /* where an offloaded cell's bytes are */

/* Whether the cell's bytes count in the stash (a slot of it holds them). */
static bool in_stash(uint8_t where) { return where != W_MADE && where != W_HOST; }

static void *copier_main(void *arg) {
  sc_pipe_rank *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->stop && r->next == r->n_jobs) pthread_cond_wait(&r->cv, &r->mu);
    if (r->next == r->n_jobs) break; /* stopped, every job run */
    copy_job j = r->jobs[r->next++];
    pthread_mutex_unlock(&r->mu);
    memcpy(j.dst, j.src, j.bytes);
    pthread_mutex_lock(&r->mu);
    r->done++;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* Blocks until the copy queue has run its first n jobs. */
static void copies_wait(sc_pipe_rank *r, int64_t n) {
  if (!r->copier_on) return;
  pthread_mutex_lock(&r->mu);
  while (r->done < n) pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  if (n > r->waited) r->waited = n;
}

/* Empties the queue for a new step, every job waited for. Under mu: the
 * copy queue's thread reads next and n_jobs whenever it wakes. */
static void copies_reset(sc_pipe_rank *r) {
  if (r->copier_on) pthread_mutex_lock(&r->mu);
  r->n_jobs = r->next = r->done = 0;
  if (r->copier_on) pthread_mutex_unlock(&r->mu);
  r->waited = 0;
}

/* Cell (h, k)'s copy (ticket[c]) reads or writes the slot about to be
 * freed (or the arena about to be run over): the rank's thread must have
 * waited for it, whatever the queue's timing (the order a race detector
 * checks: a missing wait is caught even when the copy happened to
 * finish). */
static sc_status race_check(const sc_pipe_rank *r, int32_t h, int32_t k, const char *what,
                            sc_diag *d) {
  size_t c = (size_t)h * (size_t)r->M + (size_t)k;
  if (r->waited >= r->ticket[c]) return SC_OK;
  return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "race: pipeline rank %d goes on from '%s' of microbatch %d (frees its slot "
                     "or runs over it) before waiting for its copy %s (copy %lld, %lld waited "
                     "for)",
                     (int)r->me, r->t.h[h].name, (int)k, what, (long long)r->ticket[c],
                     (long long)r->waited);
}

/* Queues a copy; its ticket: copies_wait(r, ticket) completes it. */
static int64_t copy_start(sc_pipe_rank *r, void *dst, const void *src, size_t bytes) {
  pthread_mutex_lock(&r->mu);
  r->jobs[r->n_jobs++] = (copy_job){dst, src, bytes};
  int64_t ticket = r->n_jobs;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return ticket;
}

static int32_t coord_of_piece(const sc_pipe_rank *r, int32_t s) {
  return sc_pipe_piece_chunk(r->C, s) % r->P;
}

static const sc_buffer *in_buf(const sc_program *p, int32_t i) {
  return &p->buffers[p->inputs[i]];
}
static const sc_buffer *out_buf(const sc_program *p, int32_t j) {
  return &p->buffers[p->outputs[j]];
}

static int32_t state_index(sc_pipe_rank *r, const char *name, const sc_buffer *b,
                           const sc_sharding *sh, sc_diag *d) {
  for (int32_t k = 0; k < r->n_st; k++)
    if (strcmp(r->st[k].name, name) == 0) {
      if (r->st[k].b->bytes != b->bytes)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "state '%s' has two shapes in this rank's pieces", name),
               -1;
      return k;
    }
  if (r->n_st == r->cap_st) {
    int32_t cap = r->cap_st ? 2 * r->cap_st : 32;
    state *x = sc_realloc(r->st, (size_t)cap * sizeof *x);
    if (!x) return nomem(d), -1;
    r->st = x;
    r->cap_st = cap;
  }
  state *s = &r->st[r->n_st];
  *s = (state){.name = name, .b = b, .sh = sh, .accum = strncmp(name, "accum:", 6) == 0};
  if (!(s->data = sc_calloc(b->bytes > 0 ? (size_t)b->bytes : 1, 1))) return nomem(d), -1;
  return r->n_st++;
}

static int32_t data_index(sc_pipe_rank *r, const sc_buffer *b, const sc_sharding *sh,
                          sc_diag *d) {
  for (int32_t k = 0; k < r->n_data; k++)
    if (strcmp(r->data[k]->name, b->name) == 0) return k;
  const sc_buffer **x = sc_realloc(r->data, ((size_t)r->n_data + 1) * sizeof *x);
  if (x) r->data = x;
  const sc_sharding **y = sc_realloc(r->data_sh, ((size_t)r->n_data + 1) * sizeof *y);
  if (y) r->data_sh = y;
  if (!x || !y) return nomem(d), -1;
  r->data[r->n_data] = b;
  r->data_sh[r->n_data] = sh;
  return r->n_data++;
}

/* Bindings of every input of piece s (this rank's) and its outputs. */
static sc_status bind_piece(sc_pipe_rank *r, int32_t s, sc_diag *d) {
  const sc_dist_program *dp = r->dp;
  piece *pc = &r->pc[s];
  const sc_program *p = pc->p;
  size_t ni = (size_t)p->n_inputs + 1, no = (size_t)p->n_outputs + 1;
  pc->in = sc_calloc(ni, sizeof *pc->in);
  pc->iv = sc_calloc(ni, sizeof *pc->iv);
  pc->ov = sc_calloc(no, sizeof *pc->ov);
  pc->out_handoff = sc_malloc(no * sizeof *pc->out_handoff);
  pc->out_state = sc_malloc(no * sizeof *pc->out_state);
  pc->scalars = sc_calloc(3, 8);
  if (!pc->in || !pc->iv || !pc->ov || !pc->out_handoff || !pc->out_state || !pc->scalars)
    return nomem(d);
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = in_buf(p, i);
    const char *name = b->name ? b->name : "";
    pc->iv[i] = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank};
    memcpy(pc->iv[i].dims, b->dims, sizeof pc->iv[i].dims);
    binding *x = &pc->in[i];
    int32_t k;
    if (r->t.input_handoff[s][i] >= 0) { /* handed over (tables: every other has a source) */
      x->kind = B_HANDOFF;
      x->index = r->t.input_handoff[s][i];
    } else if (sc_dist_find_input(dp, name) < 0) {
      /* "new:X" read from state X (sc_pipe_reads_state: the tables give it no handoff) */
      if ((k = state_index(r, name + 4, b, &dp->stages[s].input_sharding[i], d)) < 0)
        return d->status;
      x->kind = B_STATE;
      x->index = k;
      pc->iv[i].data = r->st[k].data;
    } else if (strcmp(name, "train:lr") == 0 || strcmp(name, "train:bc1") == 0 ||
               strcmp(name, "train:bc2") == 0) {
      x->kind = name[6] == 'l' ? B_LR : name[8] == '1' ? B_BC1 : B_BC2;
      pc->iv[i].data = (char *)pc->scalars + 8 * (x->kind - B_LR);
    } else if (strncmp(name, "train:", 6) == 0) {
      return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "pipelined step: input '%s' is not supported", name);
    } else if (sc_dist_is_state(dp, name)) {
      if ((k = state_index(r, name, b, &dp->stages[s].input_sharding[i], d)) < 0)
        return d->status;
      x->kind = B_STATE;
      x->index = k;
      pc->iv[i].data = r->st[k].data;
    } else {
      if ((k = data_index(r, b, &dp->stages[s].input_sharding[i], d)) < 0) return d->status;
      x->kind = B_DATA;
      x->index = k;
    }
  }
  /* a bound input (the program's, codegen/compile.h bind_state) is read
   * and updated in its state buffer, which never moves */
  for (int32_t i = 0; p->bound && i < p->n_inputs; i++) {
    if (!p->bound[i]) continue;
    if (pc->in[i].kind != B_STATE)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "piece %d: input '%s' is bound outside the arena but is not state",
                         (int)s, in_buf(p, i)->name ? in_buf(p, i)->name : "?");
    if (!pc->bound && !(pc->bound = sc_calloc(ni, sizeof *pc->bound))) return nomem(d);
    pc->bound[i] = r->st[pc->in[i].index].data;
  }
  for (int32_t j = 0; j < p->n_outputs; j++) {
    pc->out_state[j] = -1; /* set once every piece's state is known */
    pc->out_handoff[j] = sc_pipe_handoff_find(&r->t, s, j);
  }
  return SC_OK;
}

/* The handoff table (every rank the same) and this rank's slots. */
static sc_status tables(sc_pipe_rank *r, sc_diag *d) {
  sc_status st = sc_pipe_handoffs_of(r->dp, &r->t, d);
  if (st != SC_OK) return st;
  r->n_h = r->t.n;
  r->h = sc_calloc((size_t)r->n_h + 1, sizeof *r->h);
  if (!r->h) return nomem(d);
  for (int32_t h = 0; h < r->n_h; h++) {
    r->h[h].slot = sc_calloc((size_t)r->M, sizeof *r->h[h].slot);
    r->h[h].left = sc_calloc((size_t)r->M, sizeof *r->h[h].left);
    if (!r->h[h].slot || !r->h[h].left) return nomem(d);
  }
  return SC_OK;
}

sc_status sc_pipe_rank_create(const sc_dist_program *dp, int64_t rank, const sc_train_manifest *m,
                              const sc_pipe_rank_opts *o, sc_pipe_rank **out, sc_diag *d) {
  *out = NULL;
  if (dp->pipe_chunks < 1 || dp->pipe_ranks < 1 || dp->n_stages != SC_PIPE_PHASES * dp->pipe_chunks)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "not a pipelined training program");
  sc_pipe_rank *r = sc_calloc(1, sizeof *r);
  if (!r) return nomem(d);
  r->dp = dp;
  r->world = o->world;
  r->rank = rank;
  r->P = dp->pipe_ranks;
  r->C = dp->pipe_chunks;
  r->M = dp->schedule.microbatches;
  r->beta1 = m->beta1;
  r->beta2 = m->beta2;
  sc_mesh_rank_to_coords(&dp->mesh, rank, r->coords);
  r->me = (int32_t)r->coords[dp->pp_axis];
  r->pc = sc_calloc((size_t)dp->n_stages, sizeof *r->pc);
  sc_status st = r->pc ? SC_OK : nomem(d);
  if (st == SC_OK) st = tables(r, d);
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++)
    if (coord_of_piece(r, s) == r->me) r->pc[s].p = dp->stages[s].program;
  /* state first (a piece's "new:X" outputs need every state index) */
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++)
    if (r->pc[s].p) st = bind_piece(r, s, d);
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    piece *pc = &r->pc[s];
    for (int32_t j = 0; pc->p && j < pc->p->n_outputs; j++) {
      const char *name = out_buf(pc->p, j)->name;
      for (int32_t k = 0; name && strncmp(name, "new:", 4) == 0 && k < r->n_st; k++)
        if (strcmp(r->st[k].name, name + 4) == 0) pc->out_state[j] = k;
      int32_t u = sc_program_updates(pc->p, j);
      if (pc->out_state[j] >= 0 && u >= 0 && pc->p->bound && pc->p->bound[u])
        r->st[pc->out_state[j]].in_place = true;
    }
  }
  /* initial values: this rank's piece of each parameter (cut from the
   * model's, or written by the initialiser, runtime/param_init.h) */
  for (int32_t k = 0; st == SC_OK && k < r->n_st; k++) {
    state *x = &r->st[k];
    const sc_train_manifest_param *tp = NULL;
    for (int32_t i = 0; i < m->n_params; i++)
      if (strcmp(m->params[i].name, x->name) == 0) tp = &m->params[i];
    int32_t gi = sc_dist_find_input(dp, x->name);
    const sc_init_rule *rule = NULL;
    if (o->init && gi >= 0 && !x->accum && !sc_train_is_optimizer_state(x->name) &&
        (st = sc_param_init_check(o->init, x->name, x->b->dtype, dp->inputs[gi].rank,
                                  dp->inputs[gi].dims, &rule, d)) != SC_OK)
      break;
    if (rule) { /* the initialiser writes the piece in place */
      SC_ASSERT(sc_param_init_piece_bytes(x->sh, &dp->mesh, x->b->dtype, dp->inputs[gi].rank,
                                          dp->inputs[gi].dims) == x->b->bytes);
      st = sc_param_init_fill(o->init, x->name, x->b->dtype, dp->inputs[gi].rank,
                              dp->inputs[gi].dims, x->sh, &dp->mesh, r->coords, x->data, d);
    } else if (tp && tp->data && gi >= 0)
      sc_sharding_extract(x->sh, &dp->mesh, r->coords, sc_dtype_size(x->b->dtype),
                          dp->inputs[gi].dims, tp->data, x->data);
    else if (!x->accum && !sc_train_is_optimizer_state(x->name))
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "parameter '%s' has no initial value",
                       x->name);
  }
  /* sessions, in lockstep with the other ranks: each rank has V chunks of
   * 4 pieces, created in piece order. The first allocates the rank's one
   * arena, sized by its largest piece (sc_pipe_arena_bytes); the others
   * borrow it (module comment of pipe_rank.h) */
  int64_t shared = sc_pipe_arena_bytes(dp, r->me), store = 0;
  bool on_device = !sc_device_choice_is_cpu(&o->device);
  for (int32_t k = 0; on_device && k < r->n_st; k++) {
    store = (store + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
    r->st[k].dev = (void *)(intptr_t)store; /* an offset until the arena exists */
    store += r->st[k].b->bytes;
  }
  int64_t store_at = (shared + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
  if (on_device) shared = store_at + store;
  void *arena = NULL;
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    if (!r->pc[s].p) continue;
    sc_session_opts so;
    sc_session_opts_init(&so);
    so.threads = o->threads > 0 ? o->threads : 1;
    so.device = o->device;
    so.world = o->world;
    so.split_mesh = &dp->mesh;
    so.cpu_module = o->kernels ? o->kernels[s] : NULL;
    st = sc_dist_stage_weights(dp, s, rank, &r->pc[s].w, d);
    so.const_data = r->pc[s].w.data;
    so.arena = arena;
    so.arena_bytes = shared;
    so.bound = r->pc[s].bound;
    if (st == SC_OK) st = sc_session_create(r->pc[s].p, &so, &r->pc[s].s, d);
    if (st == SC_OK && !arena) {
      arena = sc_session_arena(r->pc[s].s);
      r->owner = r->pc[s].s;
    }
  }
  if (st == SC_OK && on_device && (!r->owner || sc_session_host_arena(r->owner)))
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "pipelined step: a device arena expected");
  for (int32_t k = 0; st == SC_OK && on_device && k < r->n_st; k++)
    r->st[k].dev = (char *)arena + store_at + (intptr_t)r->st[k].dev;
  r->dev_stale = on_device; /* the initial values go up before the first step */
  if (st == SC_OK)
    st = sc_pipe_schedule((sc_schedule_kind)dp->schedule.kind, r->P, r->C / r->P, r->M, r->me,
                          &r->acts, &r->n_acts, d);
  if (st == SC_OK) {
    size_t cells = (size_t)r->t.n * (size_t)r->M + 1;
    r->out = sc_malloc(cells * sizeof *r->out);
    r->back = sc_malloc(cells * sizeof *r->back);
    r->where = sc_calloc(cells, sizeof *r->where);
    r->other = sc_calloc(cells, sizeof *r->other);
    r->ticket = sc_calloc(cells, sizeof *r->ticket);
    r->pend = sc_calloc(cells, sizeof *r->pend);
    r->jobs = sc_calloc(2 * cells, sizeof *r->jobs); /* a copy out and back a cell */
    if (!r->out || !r->back || !r->where || !r->other || !r->ticket || !r->pend || !r->jobs)
      st = nomem(d);
    else st = sc_pipe_offload_back(&r->t, dp, r->me, r->acts, r->n_acts, r->out, r->back, d);
    bool any = false;
    for (size_t c = 0; st == SC_OK && c + 1 < cells; c++) any |= r->back[c] >= 0;
    if (any && st == SC_OK) { /* the copy queue */
      pthread_mutex_init(&r->mu, NULL);
      pthread_cond_init(&r->cv, NULL);
      if (pthread_create(&r->copier, NULL, copier_main, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "could not start the copy queue's thread");
      } else
        r->copier_on = true;
      /* a test hook: the copies out are not waited for (race_check reports it) */
      const char *e = getenv("SHARDC_PIPE_SKIP_COPY_WAITS");
      r->skip_out_waits = e && strcmp(e, "1") == 0;
    }
  }
  if (st != SC_OK) {
    sc_pipe_rank_destroy(r);
    return st;
  }
  *out = r;
  return SC_OK;
}

int32_t sc_pipe_rank_n_data(const sc_pipe_rank *r) { return r->n_data; }
const sc_buffer *sc_pipe_rank_data(const sc_pipe_rank *r, int32_t i, const sc_sharding **sh) {
  if (i < 0 || i >= r->n_data) return NULL;
  if (sh) *sh = r->data_sh[i];
  return r->data[i];
}

static int64_t peer_of(const sc_pipe_rank *r, int32_t q) {
  int64_t c[SC_MESH_MAX_AXES];
  memcpy(c, r->coords, sizeof c);
  c[r->dp->pp_axis] = q;
  return sc_mesh_coords_to_rank(&r->dp->mesh, c);
}

/* Frees cell (h, k)'s slot (after every copy of it ran: copies_wait). */
static void drop_slot(sc_pipe_rank *r, int32_t h, int32_t k) {
  handoff *x = &r->h[h];
  size_t c = (size_t)h * (size_t)r->M + (size_t)k;
  int64_t bytes = r->t.h[h].bytes;
  if (!x->slot[k]) return;
  sc_free(x->slot[k]);
  x->slot[k] = NULL;
  if (r->where[c] != W_STASH) r->host -= bytes;
  sc_free(r->other[c]); /* W_OUT's host slot, W_BACK's stash slot */
  r->other[c] = NULL;
  if (in_stash(r->where[c]) && sc_pipe_handoff_stashed(&r->t, h, r->me)) r->stash -= bytes;
  r->where[c] = W_STASH;
}

/* The forward's last use of cell (h, k) ran: the copy queue copies its
 * stash slot into a slot of the host pool while the rank's thread hands
 * the action's outputs over (copy_outs_wait frees the stash slot before
 * the next action). */
static sc_status park(sc_pipe_rank *r, int32_t h, int32_t k, sc_diag *d) {
  size_t c = (size_t)h * (size_t)r->M + (size_t)k;
  int64_t bytes = r->t.h[h].bytes;
  if (!(r->other[c] = sc_malloc(bytes > 0 ? (size_t)bytes : 1))) return nomem(d);
  r->where[c] = W_OUT;
  r->ticket[c] = copy_start(r, r->other[c], r->h[h].slot[k], (size_t)bytes);
  r->pend[r->n_pend++] = (int64_t)c;
  r->host_copies++;
  if ((r->host += bytes) > r->peak_host) r->peak_host = r->host;
  return SC_OK;
}

/* Waits for cell c's copy (unless skip: the test hook) and, where it
 * filled another slot, makes that slot the cell's. */
static sc_status copy_wait(sc_pipe_rank *r, size_t c, bool skip, const char *what, sc_diag *d) {
  int32_t h = (int32_t)(c / (size_t)r->M), k = (int32_t)(c % (size_t)r->M);
  if (!skip) copies_wait(r, r->ticket[c]);
  sc_status st = race_check(r, h, k, what, d);
  if (st != SC_OK || !r->other[c]) return st;
  sc_free(r->h[h].slot[k]);
  r->h[h].slot[k] = r->other[c];
  r->other[c] = NULL;
  return SC_OK;
}

/* Cell c's copy out is waited for: the host pool's slot replaces the
 * stash's (W_OUT), or the arena it read may be run over (W_MADE). */
static sc_status copy_out_wait(sc_pipe_rank *r, size_t c, sc_diag *d) {
  if (r->where[c] != W_OUT && r->where[c] != W_MADE) return SC_OK;
  bool from_stash = r->where[c] == W_OUT;
  sc_status st = copy_wait(r, c, r->skip_out_waits, "to the host pool", d);
  if (st != SC_OK) return st;
  r->where[c] = W_HOST;
  if (from_stash) r->stash -= r->t.h[c / (size_t)r->M].bytes;
  return SC_OK;
}

/* Before action cur: the copies out started by the actions before it are
 * waited for (they ran beside the hand-offs after the action that started
 * them). */
static sc_status copy_outs_wait(sc_pipe_rank *r, sc_diag *d) {
  int64_t n = 0;
  for (int64_t i = 0; i < r->n_pend; i++) {
    size_t c = (size_t)r->pend[i];
    sc_status st = r->out[c] < r->cur ? copy_out_wait(r, c, d) : SC_OK;
    if (st != SC_OK) return st;
    if (r->where[c] == W_OUT || r->where[c] == W_MADE) r->pend[n++] = (int64_t)c;
  }
  r->n_pend = n;
  return SC_OK;
}

/* The offloaded values whose copy back starts before action a: a slot of
 * the stash for each, filled by the copy queue while the actions up to
 * its reader run (the reader waits for it: run_action). */
static sc_status copy_back(sc_pipe_rank *r, int32_t a, sc_diag *d) {
  for (int32_t h = 0; h < r->n_h; h++)
    for (int32_t k = 0; k < r->M; k++) {
      size_t c = (size_t)h * (size_t)r->M + (size_t)k;
      if (r->back[c] != a) continue;
      sc_status st = copy_out_wait(r, c, d); /* back right after it went out */
      if (st != SC_OK) return st;
      if (r->where[c] != W_HOST) continue;
      int64_t bytes = r->t.h[h].bytes;
      if (!(r->other[c] = sc_malloc(bytes > 0 ? (size_t)bytes : 1))) return nomem(d);
      r->where[c] = W_BACK;
      if ((r->stash += bytes) > r->peak_stash) r->peak_stash = r->stash;
      r->ticket[c] = copy_start(r, r->other[c], r->h[h].slot[k], (size_t)bytes);
    }
  return SC_OK;
}

/* The reader of cell (h, k) waits for its copy back; the stash's slot
 * replaces the host pool's. */
static sc_status copy_back_wait(sc_pipe_rank *r, int32_t h, int32_t k, sc_diag *d) {
  size_t c = (size_t)h * (size_t)r->M + (size_t)k;
  if (r->where[c] != W_BACK) return SC_OK;
  sc_status st = copy_wait(r, c, false, "back", d);
  if (st != SC_OK) return st;
  r->where[c] = W_STASH;
  r->host -= r->t.h[h].bytes;
  return SC_OK;
}

static sc_status keep_slot(sc_pipe_rank *r, int32_t h, int32_t k, const void *src, sc_diag *d) {
  handoff *x = &r->h[h];
  int64_t bytes = r->t.h[h].bytes;
  if (x->slot[k])
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "'%s' of microbatch %d is made twice",
                       r->t.h[h].name, (int)k);
  if (!(x->slot[k] = sc_malloc(bytes > 0 ? (size_t)bytes : 1))) return nomem(d);
  size_t c = (size_t)h * (size_t)r->M + (size_t)k;
  if (src && r->out[c] == r->cur) {
    /* made here, offloaded: the copy queue copies the piece's output into
     * the host pool while the outputs are handed over (the arena is not
     * run again before copy_outs_wait) */
    r->where[c] = W_MADE;
    r->ticket[c] = copy_start(r, x->slot[k], src, (size_t)bytes);
    r->pend[r->n_pend++] = (int64_t)c;
    r->host_copies++;
    if ((r->host += bytes) > r->peak_host) r->peak_host = r->host;
    return SC_OK;
  }
  if (src) memcpy(x->slot[k], src, (size_t)bytes);
  if (!sc_pipe_handoff_stashed(&r->t, h, r->me)) return SC_OK; /* the step's: not stashed */
  r->stash += bytes;
  if (r->stash > r->peak_stash) r->peak_stash = r->stash;
  return SC_OK;
}

static int64_t count_of(const sc_pipe_handoff *x) {
  size_t e = sc_dtype_size(x->dtype);
  return e ? x->bytes / (int64_t)e : 0;
}

/* One action: piece s for microbatch mb (-1: once per step). */
static sc_status run_action(sc_pipe_rank *r, int32_t s, int32_t mb, const sc_tensor_view *data,
                            double *loss_sum, double *norm, bool *applied, sc_diag *d) {
  piece *pc = &r->pc[s];
  const sc_program *p = pc->p;
  sc_status st = SC_OK;
  for (int32_t i = 0; i < p->n_inputs && st == SC_OK; i++) {
    binding *b = &pc->in[i];
    if (b->kind == B_DATA) {
      pc->iv[i].data = (char *)data[b->index].data + (size_t)((mb < 0 ? 0 : mb) * in_buf(p, i)->bytes);
    } else if (b->kind == B_HANDOFF) {
      handoff *x = &r->h[b->index];
      const sc_pipe_handoff *hx = &r->t.h[b->index];
      int32_t k = hx->per_mb ? (mb >= 0 ? mb : r->M - 1) : 0;
      if (!x->slot[k]) { /* from another rank */
        int32_t q = coord_of_piece(r, hx->piece);
        if (q == r->me)
          return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                             "piece %d reads '%s' of microbatch %d before piece %d made it",
                             (int)s, hx->name, (int)k, (int)hx->piece);
        if ((st = keep_slot(r, b->index, k, NULL, d)) != SC_OK) break;
        st = sc_comm_recv(r->world, x->slot[k], count_of(hx), hx->dtype, (int)peer_of(r, q),
                          b->index, d);
      }
      if (st == SC_OK) st = copy_back_wait(r, b->index, k, d);
      pc->iv[i].data = x->slot[k];
    } else if (b->kind == B_STATE && r->st[b->index].dev) {
      /* from the store into its arena slot, on the device: the slot is the
       * input, so nothing is copied from the host */
      void *slot = sc_session_state_slot(pc->s, i);
      if (slot) sc_session_slot_copy(pc->s, slot, r->st[b->index].dev, in_buf(p, i)->bytes);
      pc->iv[i].data = slot ? slot : r->st[b->index].data;
    }
  }
  if (st == SC_OK) st = sc_session_run(pc->s, pc->iv, p->n_inputs, pc->ov, p->n_outputs, d);
  if (st != SC_OK) return st;
  /* inputs read: release the slots whose last reader this was */
  for (int32_t i = 0; i < p->n_inputs; i++) {
    binding *b = &pc->in[i];
    if (b->kind != B_HANDOFF) continue;
    int32_t k = r->t.h[b->index].per_mb ? (mb >= 0 ? mb : r->M - 1) : 0;
    if (--r->h[b->index].left[k] <= 0) drop_slot(r, b->index, k);
  }
  for (int32_t i = 0; i < p->n_inputs; i++) {
    binding *b = &pc->in[i];
    if (b->kind != B_HANDOFF) continue;
    int32_t k = r->t.h[b->index].per_mb ? (mb >= 0 ? mb : r->M - 1) : 0;
    /* the forward's last read of an offloaded value: to the host pool */
    if (r->out[(size_t)b->index * r->M + k] == r->cur && r->h[b->index].slot[k] &&
        r->where[(size_t)b->index * r->M + k] == W_STASH &&
        (st = park(r, b->index, k, d)) != SC_OK)
      return st;
  }
  for (int32_t j = 0; j < p->n_outputs && st == SC_OK; j++) {
    const sc_tensor_view *v = &pc->ov[j];
    int32_t hx = pc->out_handoff[j];
    if (hx >= 0) {
      const sc_pipe_handoff *x = &r->t.h[hx];
      int32_t k = x->per_mb ? mb : 0;
      for (int32_t q = 0; q < r->P && st == SC_OK; q++)
        if (q != r->me && sc_pipe_handoff_reads(&r->t, hx, q, k))
          st = sc_comm_send(r->world, v->data, count_of(x), x->dtype, (int)peer_of(r, q), hx, d);
      if (st == SC_OK && r->h[hx].left[k] > 0) st = keep_slot(r, hx, k, v->data, d);
    }
    if (pc->out_state[j] >= 0) {
      state *x = &r->st[pc->out_state[j]];
      if (x->dev) /* into the store, on the device, before another piece runs */
        sc_session_slot_copy(pc->s, x->dev, sc_session_output_slot(pc->s, j), x->b->bytes);
      else if (x->data != v->data)
        memcpy(x->data, v->data, (size_t)x->b->bytes); /* not bound */
    }
    const char *name = v->name;
    if (!name) continue;
    if (strcmp(name, "loss") == 0) {
      *loss_sum += sc_load_f64(v->dtype, v->data, 0);
      r->n_loss++;
    }
    else if (strcmp(name, "train:grad_norm") == 0) {
      *norm = sc_load_f64(v->dtype, v->data, 0);
      r->has_norm = true;
    }
    else if (strcmp(name, "train:applied") == 0) *applied = *(const bool *)v->data;
  }
  /* the copies into the store finished: the next piece (another session's
   * stream) may overwrite the shared arena */
  if (r->owner && !sc_session_host_arena(r->owner)) sc_session_sync(pc->s);
  return st;
}

/* The host copies into the store (after they were written), or the store
 * into them (after a step, when asked for); accumulators are neither: the
 * step zeroes them in the store. */
static void push_state(sc_pipe_rank *r) {
  for (int32_t k = 0; r->dev_stale && k < r->n_st; k++)
    if (r->st[k].dev && !r->st[k].accum)
      sc_session_slot_write(r->owner, r->st[k].dev, r->st[k].data, r->st[k].b->bytes);
  r->dev_stale = false;
}

void sc_pipe_rank_sync_host(sc_pipe_rank *r) {
  for (int32_t k = 0; r->host_stale && k < r->n_st; k++)
    if (r->st[k].dev && !r->st[k].accum)
      sc_session_slot_read(r->owner, r->st[k].data, r->st[k].dev, r->st[k].b->bytes);
  r->host_stale = false;
}

sc_status sc_pipe_rank_step(sc_pipe_rank *r, const sc_tensor_view *data, int32_t n_data,
                            double lr, int64_t step, double *loss, double *grad_norm,
                            bool *applied, bool *has_loss, bool *has_norm, sc_diag *d) {
  if (step < 1) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "step %lld", (long long)step);
  sc_tensor_view *mine = sc_calloc((size_t)r->n_data + 1, sizeof *mine);
  if (!mine) return nomem(d);
  for (int32_t k = 0; k < r->n_data; k++) {
    const sc_buffer *b = r->data[k];
    for (int32_t i = 0; i < n_data; i++)
      if (data[i].name && strcmp(data[i].name, b->name) == 0) mine[k] = data[i];
    if (!mine[k].data) {
      sc_free(mine);
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "data '%s' is missing", b->name);
    }
  }
  push_state(r);
  bool zeroed = false;
  for (int32_t k = 0; k < r->n_st; k++) {
    if (!r->st[k].accum) continue;
    if (r->st[k].dev)
      sc_session_slot_zero(r->owner, r->st[k].dev, r->st[k].b->bytes);
    else
      memset(r->st[k].data, 0, (size_t)r->st[k].b->bytes);
    zeroed |= r->st[k].dev != NULL;
  }
  if (zeroed) sc_session_sync(r->owner); /* before another piece's stream reads them */
  r->host_stale |= r->owner && !sc_session_host_arena(r->owner);
  for (int32_t s = 0; s < r->dp->n_stages; s++) {
    piece *pc = &r->pc[s];
    for (int32_t i = 0; pc->p && i < pc->p->n_inputs; i++) {
      const sc_buffer *b = in_buf(pc->p, i);
      int kind = pc->in[i].kind;
      double v = kind == B_LR    ? lr
                 : kind == B_BC1 ? 1.0 - pow(r->beta1, (double)step)
                                 : 1.0 - pow(r->beta2, (double)step);
      if (kind == B_LR || kind == B_BC1 || kind == B_BC2) sc_store_f64(b->dtype, pc->iv[i].data, 0, v);
    }
  }
  for (int32_t h = 0; h < r->n_h; h++)
    for (int32_t k = 0; k < r->M; k++) r->h[h].left[k] = sc_pipe_handoff_reads(&r->t, h, r->me, k);
  r->stash = r->peak_stash = 0;
  r->host = r->peak_host = r->host_copies = 0;
  copies_reset(r); /* the last step's copies all waited for */
  r->n_pend = 0;
  r->n_loss = 0;
  r->has_norm = false;
  double lsum = 0, norm = NAN;
  bool ok = false;
  sc_status st = SC_OK;
  for (int32_t a = 0; a < r->n_acts && st == SC_OK; a++) {
    const sc_pipe_action *x = &r->acts[a];
    r->cur = a;
    if ((st = copy_outs_wait(r, d)) != SC_OK || (st = copy_back(r, a, d)) != SC_OK) break;
    st = run_action(r, sc_pipe_piece(r->C, (sc_pipe_phase)x->phase, x->chunk), x->mb, mine, &lsum,
                    &norm, &ok, d);
  }
  copies_wait(r, r->n_jobs); /* after an error: none still writing a slot */
  for (int32_t h = 0; h < r->n_h; h++)
    for (int32_t k = 0; k < r->M; k++) drop_slot(r, h, k);
  sc_free(mine);
  if (st != SC_OK) return st;
  bool last = r->n_loss > 0; /* this rank runs the loss's piece */
  if (has_loss) *has_loss = last;
  if (has_norm) *has_norm = r->has_norm;
  if (loss) *loss = last ? lsum / (double)r->M : NAN;
  if (grad_norm) *grad_norm = norm;
  if (applied) *applied = ok;
  return SC_OK;
}

void *sc_pipe_rank_state(sc_pipe_rank *r, const char *name, const sc_buffer **b,
                         const sc_sharding **sh, bool write) {
  for (int32_t k = 0; name && k < r->n_st; k++)
    if (strcmp(r->st[k].name, name) == 0) {
      r->dev_stale |= write && r->st[k].dev;
      if (b) *b = r->st[k].b;
      if (sh) *sh = r->st[k].sh;
      return r->st[k].data;
    }
  return NULL;
}

int32_t sc_pipe_rank_state_count(const sc_pipe_rank *r, int32_t *in_place) {
  for (int32_t k = 0; in_place && k < r->n_st; k++) *in_place += r->st[k].in_place;
  return r->n_st;
}
const char *sc_pipe_rank_state_name(const sc_pipe_rank *r, int32_t i) {
  return i >= 0 && i < r->n_st ? r->st[i].name : NULL;
}

int64_t sc_pipe_rank_arena_bytes(const sc_pipe_rank *r) {
  int64_t n = 0;
  for (int32_t s = 0; s < r->dp->n_stages; s++)
    if (r->pc[s].s) n += sc_session_arena_bytes(r->pc[s].s);
  return n;
}

int64_t sc_pipe_rank_peak_stash_bytes(const sc_pipe_rank *r) { return r->peak_stash; }
int64_t sc_pipe_rank_peak_host_bytes(const sc_pipe_rank *r, int64_t *copies) {
  if (copies) *copies = r->host_copies;
  return r->peak_host;
}

void sc_pipe_rank_destroy(sc_pipe_rank *r) {
  if (!r) return;
  if (r->copier_on) { /* its jobs run, then it ends */
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->copier, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
  }
  /* the sessions that borrow the arena before the one that owns it (the
   * rank's first piece) */
  for (int32_t s = r->pc ? r->dp->n_stages - 1 : -1; s >= 0; s--) {
    piece *pc = &r->pc[s];
    sc_session_destroy(pc->s);
    sc_dist_weights_free(&pc->w);
    sc_free(pc->in);
    sc_free(pc->iv);
    sc_free(pc->ov);
    sc_free(pc->out_handoff);
    sc_free(pc->out_state);
    sc_free(pc->bound);
    sc_free(pc->scalars);
  }
  for (int32_t h = 0; r->h && h < r->n_h; h++) {
    for (int32_t k = 0; r->h[h].slot && k < r->M; k++) sc_free(r->h[h].slot[k]);
    sc_free(r->h[h].slot);
    sc_free(r->h[h].left);
  }
  for (size_t c = 0; r->other && c < (size_t)r->t.n * (size_t)r->M; c++) sc_free(r->other[c]);
  sc_pipe_handoffs_free(&r->t);
  for (int32_t k = 0; k < r->n_st; k++) sc_free(r->st[k].data);
  sc_free(r->st);
  sc_free(r->h);
  sc_free(r->pc);
  sc_free(r->data);
  sc_free(r->data_sh);
  sc_free(r->acts);
  sc_free(r->out);
  sc_free(r->back);
  sc_free(r->where);
  sc_free(r->other);
  sc_free(r->ticket);
  sc_free(r->pend);
  sc_free(r->jobs);
  sc_free(r);
}
