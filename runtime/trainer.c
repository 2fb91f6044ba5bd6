/* trainer.c — steps of a compiled training program (trainer.h).
 *
 * At creation every program input is classified once, by name: a scalar
 * of the step (lr, bc1, bc2, ...), state (it has an output "new:<name>"),
 * or data. State that the program updates in place (p->updates) lives in
 * the session's arena slot from step to step; other state has a host
 * buffer owned here, and the "new:" outputs are copied back into it after
 * an applied step. A step fills one input view array in program order and
 * runs the session.
 *
 * On a device whose arena is not host memory (CUDA) the state updated in
 * place is resident there: its slot (dev[i]) is the input view's data, so
 * a run copies it neither in nor out (sc_session_state_slot), and state[i]
 * is a host copy owned here, kept in step with the slot explicitly: the
 * host copy is uploaded before the next step after it was written (the
 * initial values, a restore, sc_trainer_state_mut: dev_stale), and read
 * back only when asked for after a step changed the slot (sc_trainer_state,
 * a checkpoint: host_stale). Gradient accumulators are zeroed on the
 * device. A step then moves only the batch and the scalars in and the
 * outputs that are not state (loss, gradient norm, applied) out.
 *
 * Launched ahead (t->async: such a device, every state input resident, no
 * loss scale, not opts.sync_steps): sc_trainer_launch issues the step's
 * runs with sc_session_launch, one session slot per microbatch, the slots
 * of the SC_TRAINER_IN_FLIGHT steps in turn, and keeps what the collect
 * needs in t->pend; sc_trainer_collect waits for the oldest step's slots
 * and sums their losses. Nothing on the host depends on a step's outputs
 * (the program keeps or drops its update itself), so the state the host
 * copy is read from is that after every launched step (host_stale is set
 * at the launch). Otherwise a launch runs the whole step (run_step) and
 * the collect hands back what it kept. */
#include "runtime/trainer.h"

#include "codegen/train_manifest.h"
#include "runtime/checkpoint.h"
#include "runtime/param_init.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { IN_DATA, IN_STATE, IN_ACCUM, IN_LR, IN_BC1, IN_BC2, IN_SCALE, IN_INV_SCALE, IN_APPLY };
/* PyTorch's GradScaler */
enum { GROWTH_INTERVAL = 2000 };

struct sc_trainer {
  const sc_program *p;
  sc_session *s;
  int32_t n_in, n_out;
  int8_t *kind;            /* [n_in] IN_* */
  int32_t *new_of;         /* [n_in] output index of "new:<name>", or -1 */
  void **state;            /* [n_in] host buffers of state inputs */
  bool *in_place;          /* [n_in] updated in its arena slot: state[i] is
                              that slot (host arena), or dev[i] is */
  void **dev;              /* [n_in] the device slot of resident state, or NULL */
  bool dev_stale;          /* a host copy of resident state was written */
  bool host_stale;         /* a step changed resident state since it was read */
  int32_t *data_inputs;    /* [n_data] input indices of the data */
  int32_t n_data;
  int32_t loss_out, norm_out, applied_out; /* output indices, or -1 */
  sc_tensor_view *in, *out;
  double beta1, beta2;
  bool scaling;            /* the program has a loss-scale input */
  double scale;            /* 1 without scaling */
  int64_t growth;          /* clean steps since the scale changed */
  /* steps launched and read later (the file comment) */
  bool async;              /* every state input resident, no loss scaling,
                              not opts.sync_steps: launched without waiting */
  int32_t slot_micro;      /* microbatches the reserved slots are for (0: none) */
  int64_t launched;        /* steps launched so far */
  struct pending {
    int64_t step, micro;
    int32_t slot0;         /* its first microbatch's session slot (async) */
    double loss, norm;     /* the results (sync: at once) */
    bool applied;
  } pend[SC_TRAINER_IN_FLIGHT];
  int32_t n_pend, pend_head; /* steps launched and not collected; the oldest */
};

static const sc_buffer *input_buf(const sc_program *p, int32_t i) {
  return &p->buffers[p->inputs[i]];
}
static const sc_buffer *output_buf(const sc_program *p, int32_t j) {
  return &p->buffers[p->outputs[j]];
}

static int32_t find_output(const sc_program *p, const char *prefix, const char *name) {
  size_t n = strlen(prefix);
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const char *o = output_buf(p, j)->name;
    if (o && strncmp(o, prefix, n) == 0 && strcmp(o + n, name) == 0) return j;
  }
  return -1;
}

void sc_trainer_destroy(sc_trainer *t) {
  if (!t) return;
  sc_session_destroy(t->s);
  for (int32_t i = 0; t->state && i < t->n_in; i++)
    if (!t->in_place[i] || t->dev[i]) sc_free(t->state[i]);
  sc_free(t->state);
  sc_free(t->dev);
  sc_free(t->in_place);
  sc_free(t->kind);
  sc_free(t->new_of);
  sc_free(t->data_inputs);
  sc_free(t->in);
  sc_free(t->out);
  sc_free(t);
}

static const sc_tensor_view *find_view(const sc_tensor_view *v, int32_t n, const char *name) {
  for (int32_t i = 0; name && i < n; i++)
    if (v[i].name && strcmp(v[i].name, name) == 0) return &v[i];
  return NULL;
}

/* v has b's dtype and dims. */
static bool matches(const sc_tensor_view *v, const sc_buffer *b) {
  if (v->dtype != b->dtype || v->rank != b->rank) return false;
  for (int32_t k = 0; k < b->rank; k++)
    if (v->dims[k] != b->dims[k]) return false;
  return true;
}

/* The input's state buffer: its arena slot when the program updates it in
 * place (output new_of is paired with it), else a host buffer; on a device
 * arena, the slot and a host copy (the file comment). */
static sc_status state_buffer(sc_trainer *t, int32_t i, sc_diag *d) {
  const sc_buffer *b = input_buf(t->p, i);
  bool paired = (t->kind[i] == IN_STATE || t->kind[i] == IN_ACCUM) &&
                sc_program_updates(t->p, t->new_of[i]) == i;
  if (paired && sc_session_host_arena(t->s) &&
      (t->state[i] = sc_session_input_slot(t->s, i)) != NULL) {
    t->in_place[i] = true;
    memset(t->state[i], 0, (size_t)b->bytes);
    t->in[i].data = t->state[i];
    return SC_OK;
  }
  t->state[i] = sc_calloc(b->bytes > 0 ? (size_t)b->bytes : 1, 1);
  if (!t->state[i]) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  t->in[i].data = t->state[i];
  if (paired && !sc_session_host_arena(t->s) &&
      (t->dev[i] = sc_session_state_slot(t->s, i)) != NULL) {
    t->in_place[i] = true;
    t->in[i].data = t->dev[i];
    t->dev_stale = true; /* the initial values go up before the first step */
  }
  return SC_OK;
}

/* A parameter a rule of pi matches, whole (one rank): written into its
 * state buffer dst, *done set. */
static sc_status fill_whole(const sc_param_init *pi, const char *name, const sc_buffer *b,
                            void *dst, bool *done, sc_diag *d) {
  const sc_init_rule *r;
  sc_status st = sc_param_init_check(pi, name, b->dtype, b->rank, b->dims, &r, d);
  if (st != SC_OK || !r) return st;
  *done = true;
  return sc_param_init_fill(pi, name, b->dtype, b->rank, b->dims, NULL, NULL, NULL, dst, d);
}

/* The host copies of resident state into their device slots (once, then
 * after each write of them), or the slots into the host copies (after a
 * step, when asked for). Gradient accumulators are neither: the step
 * zeroes them on the device. */
static void push_state(sc_trainer *t) {
  for (int32_t i = 0; t->dev_stale && i < t->n_in; i++)
    if (t->dev[i] && t->kind[i] == IN_STATE)
      sc_session_slot_write(t->s, t->dev[i], t->state[i], input_buf(t->p, i)->bytes);
  t->dev_stale = false;
}
static void pull_state(sc_trainer *t) {
  for (int32_t i = 0; t->host_stale && i < t->n_in; i++)
    if (t->dev[i] && t->kind[i] == IN_STATE)
      sc_session_slot_read(t->s, t->state[i], t->dev[i], input_buf(t->p, i)->bytes);
  t->host_stale = false;
}

static int8_t kind_of(const char *name, bool has_new) {
  static const struct { const char *name; int8_t kind; } scalars[] = {
      {"train:lr", IN_LR},           {"train:bc1", IN_BC1},
      {"train:bc2", IN_BC2},         {"train:loss_scale", IN_SCALE},
      {"train:inv_scale", IN_INV_SCALE}, {"train:apply", IN_APPLY}};
  for (size_t k = 0; k < sizeof scalars / sizeof *scalars; k++)
    if (strcmp(name, scalars[k].name) == 0) return scalars[k].kind;
  if (has_new) return strncmp(name, "accum:", 6) == 0 ? IN_ACCUM : IN_STATE;
  return IN_DATA;
}

sc_status sc_trainer_create(const sc_program *p, const sc_tensor_view *init, int32_t n_init,
                            const sc_trainer_opts *o, sc_trainer **out, sc_diag *d) {
  *out = NULL;
  sc_trainer *t = sc_calloc(1, sizeof *t);
  if (!t) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  t->p = p;
  t->n_in = p->n_inputs;
  t->n_out = p->n_outputs;
  t->beta1 = o ? o->beta1 : 0.9; /* 0 is a valid beta (no averaging) */
  t->beta2 = o ? o->beta2 : 0.999;
  t->scale = 1.0;
  size_t ni = (size_t)t->n_in + 1, no = (size_t)t->n_out + 1;
  t->kind = sc_calloc(ni, sizeof *t->kind);
  t->new_of = sc_calloc(ni, sizeof *t->new_of);
  t->state = sc_calloc(ni, sizeof *t->state);
  t->in_place = sc_calloc(ni, sizeof *t->in_place);
  t->dev = sc_calloc(ni, sizeof *t->dev);
  t->data_inputs = sc_calloc(ni, sizeof *t->data_inputs);
  t->in = sc_calloc(ni, sizeof *t->in);
  t->out = sc_calloc(no, sizeof *t->out);
  sc_status st = t->kind && t->new_of && t->state && t->in_place && t->dev && t->data_inputs &&
                         t->in && t->out
                     ? SC_OK
                     : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  t->loss_out = find_output(p, "", "loss");
  t->norm_out = find_output(p, "", "train:grad_norm");
  t->applied_out = find_output(p, "", "train:applied");
  if (st == SC_OK && (t->loss_out < 0 || t->applied_out < 0))
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "not a training program: no 'loss' or 'train:applied' output");
  if (st == SC_OK) {
    sc_session_opts so;
    sc_session_opts_init(&so);
    so.threads = o ? o->threads : 0;
    if (o) so.device = o->device;
    so.cpu_module = o ? o->cpu_module : NULL;
    if (o) so.cuda = o->cuda;
    so.world = o ? o->world : NULL;
    so.const_data = o ? o->const_data : NULL;
    st = sc_session_create(p, &so, &t->s, d);
  }
  for (int32_t i = 0; st == SC_OK && i < t->n_in; i++) {
    const sc_buffer *b = input_buf(p, i);
    const char *name = b->name ? b->name : "";
    t->new_of[i] = find_output(p, "new:", name);
    t->in[i] = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank};
    memcpy(t->in[i].dims, b->dims, sizeof t->in[i].dims);
    t->kind[i] = kind_of(name, t->new_of[i] >= 0);
    if (t->kind[i] != IN_DATA) st = state_buffer(t, i, d);
    bool filled = false;
    if (st == SC_OK && t->kind[i] == IN_STATE && o && o->fill &&
        !sc_train_is_optimizer_state(name))
      st = o->fill(o->fill_ctx, name, b, t->state[i], &filled, d);
    else if (st == SC_OK && t->kind[i] == IN_STATE && o && o->init &&
             !sc_train_is_optimizer_state(name))
      st = fill_whole(o->init, name, b, t->state[i], &filled, d);
    if (st == SC_OK && t->kind[i] == IN_STATE && !filled) {
      const sc_tensor_view *v = find_view(init, n_init, name);
      if (v && !v->data) v = NULL; /* a model without weights */
      bool optimizer_state = !v && sc_train_is_optimizer_state(name); /* zeros at the start */
      if (v && !matches(v, b))
        st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "initial value of '%s': not the program's dtype or shape", name);
      else if (v)
        memcpy(t->state[i], v->data, (size_t)b->bytes);
      else if (!optimizer_state)
        st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "parameter '%s' has no initial value (the model holds none, and no "
                         "initialiser rule matches it)", name);
    }
    if (t->kind[i] == IN_DATA) t->data_inputs[t->n_data++] = i;
    if (t->kind[i] == IN_SCALE) {
      t->scaling = true;
      t->scale = o && o->loss_scale > 0 ? o->loss_scale : 65536.0;
    }
  }
  t->async = st == SC_OK && !sc_session_host_arena(t->s) && !t->scaling &&
             !(o && o->sync_steps);
  for (int32_t i = 0; t->async && i < t->n_in; i++)
    if ((t->kind[i] == IN_STATE || t->kind[i] == IN_ACCUM) && !t->dev[i]) t->async = false;
  if (st != SC_OK) {
    sc_trainer_destroy(t);
    return st;
  }
  *out = t;
  return SC_OK;
}

int32_t sc_trainer_n_data(const sc_trainer *t) { return t->n_data; }
const sc_buffer *sc_trainer_data(const sc_trainer *t, int32_t i) {
  return i >= 0 && i < t->n_data ? input_buf(t->p, t->data_inputs[i]) : NULL;
}

/* The index of state input `name`, or -1. */
static int32_t state_index(const sc_trainer *t, const char *name) {
  for (int32_t i = 0; name && i < t->n_in; i++) {
    const sc_buffer *x = input_buf(t->p, i);
    if (t->kind[i] == IN_STATE && x->name && strcmp(x->name, name) == 0) return i;
  }
  return -1;
}

void sc_trainer_sync_host(sc_trainer *t) { pull_state(t); }

const void *sc_trainer_state(sc_trainer *t, const char *name, const sc_buffer **b) {
  int32_t i = state_index(t, name);
  if (i < 0) return NULL;
  if (b) *b = input_buf(t->p, i);
  pull_state(t);
  return t->state[i];
}

void *sc_trainer_state_mut(sc_trainer *t, const char *name, const sc_buffer **b) {
  void *x = (void *)sc_trainer_state(t, name, b);
  if (x && t->dev[state_index(t, name)]) t->dev_stale = true;
  return x;
}

int32_t sc_trainer_state_count(const sc_trainer *t, int32_t *in_place) {
  int32_t n = 0, k = 0;
  for (int32_t i = 0; i < t->n_in; i++) {
    if (t->kind[i] != IN_STATE && t->kind[i] != IN_ACCUM) continue;
    n++;
    k += t->in_place[i];
  }
  if (in_place) *in_place = k;
  return n;
}

int64_t sc_trainer_arena_bytes(const sc_trainer *t) { return sc_session_arena_bytes(t->s); }
int64_t sc_trainer_host_pool_bytes(const sc_trainer *t) { return sc_session_host_pool_bytes(t->s); }

static double scalar_of(const sc_tensor_view *v) { return sc_load_f64(v->dtype, v->data, 0); }

double sc_lr_at(sc_lr_schedule s, double lr, double min_lr, int64_t warmup, int64_t total,
                int64_t step) {
  if (warmup > 0 && step <= warmup) return lr * (double)step / (double)warmup;
  if (s == SC_LR_CONSTANT || total <= warmup) return lr;
  double f = (double)(step - warmup) / (double)(total - warmup); /* 0 .. 1 */
  if (f > 1) f = 1;
  double k = s == SC_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * f)) : 1.0 - f;
  return min_lr + (lr - min_lr) * k;
}

/* The step's inputs: its scalars, its accumulators zeroed, the data
 * (checked); *micro: the microbatches the data hold. */
static sc_status step_inputs(sc_trainer *t, const sc_tensor_view *data, int32_t n_data, double lr,
                             int64_t step, int64_t *micro_out, sc_diag *d) {
  if (step < 1) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "step %lld", (long long)step);
  int64_t micro = 0;
  for (int32_t i = 0; i < t->n_in; i++) {
    const sc_buffer *b = input_buf(t->p, i);
    switch (t->kind[i]) {
    case IN_LR: sc_store_f64(b->dtype, t->state[i], 0, lr); break;
    case IN_BC1: sc_store_f64(b->dtype, t->state[i], 0, 1.0 - pow(t->beta1, (double)step)); break;
    case IN_BC2: sc_store_f64(b->dtype, t->state[i], 0, 1.0 - pow(t->beta2, (double)step)); break;
    case IN_ACCUM:
      if (t->dev[i])
        sc_session_slot_zero(t->s, t->dev[i], b->bytes);
      else
        memset(t->state[i], 0, (size_t)b->bytes);
      break;
    case IN_SCALE: sc_store_f64(b->dtype, t->state[i], 0, t->scale); break;
    case IN_INV_SCALE: sc_store_f64(b->dtype, t->state[i], 0, 1.0 / t->scale); break;
    case IN_DATA: {
      const sc_tensor_view *v = find_view(data, n_data, b->name);
      if (!v) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "data '%s' is missing", b->name);
      sc_tensor_view one = *v;
      int64_t k = 1;
      if (b->rank >= 1 && v->rank == b->rank && b->dims[0] > 0 && v->dims[0] % b->dims[0] == 0) {
        k = v->dims[0] / b->dims[0];
        one.dims[0] = b->dims[0];
      }
      if (!matches(&one, b) || (micro && k != micro))
        return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                           "data '%s': expected %s of rank %d with the program's dims (dim 0 "
                           "a multiple of %lld, the same for every input)",
                           b->name, sc_dtype_name(b->dtype), (int)b->rank,
                           (long long)(b->rank ? b->dims[0] : 1));
      micro = k;
      t->in[i].data = v->data;
      break;
    }
    default: break;
    }
  }
  if (micro < 1) micro = 1;
  bool has_accum = false;
  for (int32_t i = 0; i < t->n_in; i++) has_accum |= t->kind[i] == IN_ACCUM;
  if (micro > 1 && !has_accum)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "%lld microbatches given, but the program accumulates no gradients",
                       (long long)micro);
  *micro_out = micro;
  return SC_OK;
}

/* Microbatch m's inputs: the data's next rows, and whether it applies the
 * update (the last one); a run before the last skips the steps only the
 * update needs (sc_session_set_partial: the gradients stay each rank's own
 * sums, reduced once, in the last run). */
static sc_status next_microbatch(sc_trainer *t, int64_t m, int64_t micro, sc_diag *d) {
  bool apply = false;
  for (int32_t i = 0; i < t->n_in; i++) {
    if (m > 0 && t->kind[i] == IN_DATA) /* the next microbatch's rows */
      t->in[i].data = (char *)t->in[i].data + input_buf(t->p, i)->bytes;
    if (t->kind[i] == IN_APPLY) *(bool *)t->state[i] = m + 1 == micro;
    apply |= t->kind[i] == IN_APPLY;
  }
  return apply ? sc_session_set_partial(t->s, m + 1 < micro, d) : SC_OK;
}

/* The step waited for: its runs, then the loss scale and the state that
 * is not kept in place, as the program decided (passes/train.h). */
static sc_status run_step(sc_trainer *t, int64_t micro, struct pending *r, sc_diag *d) {
  double lsum = 0;
  for (int64_t m = 0; m < micro; m++) {
    sc_status st = next_microbatch(t, m, micro, d);
    if (st == SC_OK) st = sc_session_run(t->s, t->in, t->n_in, t->out, t->n_out, d);
    if (st != SC_OK) return st;
    lsum += scalar_of(&t->out[t->loss_out]);
    for (int32_t i = 0; m + 1 < micro && i < t->n_in; i++)
      if (t->kind[i] == IN_ACCUM && !t->in_place[i])
        memcpy(t->state[i], t->out[t->new_of[i]].data, (size_t)input_buf(t->p, i)->bytes);
  }
  double l = lsum / (double)micro;
  double n = t->norm_out >= 0 ? scalar_of(&t->out[t->norm_out]) : 0.0;
  /* state in place is already updated, or left as it was */
  bool keep = *(const bool *)t->out[t->applied_out].data;
  if (t->scaling && isfinite(l)) { /* GradScaler: skip on overflow and back off, or grow */
    if (!isfinite(n)) {
      t->scale *= 0.5;
      t->growth = 0;
    } else if (++t->growth == GROWTH_INTERVAL) {
      t->scale *= 2.0;
      t->growth = 0;
    }
  }
  t->host_stale |= keep; /* resident state was updated on the device */
  for (int32_t i = 0; keep && i < t->n_in; i++)
    if (t->kind[i] == IN_STATE && !t->in_place[i])
      memcpy(t->state[i], t->out[t->new_of[i]].data, (size_t)input_buf(t->p, i)->bytes);
  r->loss = l;
  r->norm = t->norm_out >= 0 ? n : NAN;
  r->applied = keep;
  return SC_OK;
}

sc_status sc_trainer_launch(sc_trainer *t, const sc_tensor_view *data, int32_t n_data, double lr,
                            int64_t step, sc_diag *d) {
  if (t->n_pend == SC_TRAINER_IN_FLIGHT)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "%d steps launched and not collected (sc_trainer_collect)",
                       (int)t->n_pend);
  int64_t micro = 1;
  sc_status st = step_inputs(t, data, n_data, lr, step, &micro, d);
  if (st != SC_OK) return st;
  push_state(t);
  struct pending *r = &t->pend[(t->pend_head + t->n_pend) % SC_TRAINER_IN_FLIGHT];
  *r = (struct pending){.step = step, .micro = micro};
  if (t->async && micro > t->slot_micro) { /* slots for this many microbatches */
    if (t->n_pend > 0)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "step %lld has %lld microbatches, more than the step in flight",
                         (long long)step, (long long)micro);
    if (micro * SC_TRAINER_IN_FLIGHT > SC_SESSION_MAX_SLOTS) {
      t->async = false; /* so many microbatches: each run waited for */
    } else if ((st = sc_session_reserve_async(t->s, (int32_t)(micro * SC_TRAINER_IN_FLIGHT),
                                              d)) != SC_OK) {
      return st;
    } else {
      t->slot_micro = (int32_t)micro;
    }
  }
  if (!t->async) {
    if ((st = run_step(t, micro, r, d)) != SC_OK) return st;
  } else {
    r->slot0 = (int32_t)(t->launched % SC_TRAINER_IN_FLIGHT) * t->slot_micro;
    for (int64_t m = 0; m < micro; m++) {
      if ((st = next_microbatch(t, m, micro, d)) != SC_OK ||
          (st = sc_session_launch(t->s, t->in, t->n_in, r->slot0 + (int32_t)m, d)) != SC_OK)
        return st;
    }
    for (int32_t i = 0; i < t->n_in; i++) t->host_stale |= t->dev[i] != NULL;
  }
  t->launched++;
  t->n_pend++;
  return SC_OK;
}

int32_t sc_trainer_in_flight(const sc_trainer *t) { return t->n_pend; }

sc_status sc_trainer_collect(sc_trainer *t, int64_t *step, double *loss, double *grad_norm,
                             bool *applied, sc_diag *d) {
  if (t->n_pend == 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "no step launched to collect");
  struct pending *r = &t->pend[t->pend_head];
  t->pend_head = (t->pend_head + 1) % SC_TRAINER_IN_FLIGHT;
  t->n_pend--;
  if (t->async) { /* the microbatches' outputs, copied to the host in their slots */
    double lsum = 0;
    for (int64_t m = 0; m < r->micro; m++) {
      sc_status st = sc_session_collect(t->s, r->slot0 + (int32_t)m, t->out, t->n_out, d);
      if (st != SC_OK) return st;
      lsum += scalar_of(&t->out[t->loss_out]);
    }
    r->loss = lsum / (double)r->micro;
    r->norm = t->norm_out >= 0 ? scalar_of(&t->out[t->norm_out]) : NAN;
    r->applied = *(const bool *)t->out[t->applied_out].data;
  }
  if (step) *step = r->step;
  if (loss) *loss = r->loss;
  if (grad_norm) *grad_norm = r->norm;
  if (applied) *applied = r->applied;
  return SC_OK;
}

bool sc_trainer_async(const sc_trainer *t) { return t->async; }

sc_status sc_trainer_step(sc_trainer *t, const sc_tensor_view *data, int32_t n_data, double lr,
                          int64_t step, double *loss, double *grad_norm, bool *applied,
                          sc_diag *d) {
  if (t->n_pend > 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "%d steps launched and not collected (sc_trainer_collect)",
                       (int)t->n_pend);
  sc_status st = sc_trainer_launch(t, data, n_data, lr, step, d);
  return st == SC_OK ? sc_trainer_collect(t, NULL, loss, grad_norm, applied, d) : st;
}

sc_status sc_trainer_save(sc_trainer *t, const char *dir, const sc_ckpt_state *st,
                          sc_diag *d) {
  pull_state(t);
  sc_ckpt_tensor *w = sc_calloc((size_t)t->n_in + 1, sizeof *w);
  sc_ckpt_tensor *o = sc_calloc((size_t)t->n_in + 1, sizeof *o);
  int32_t nw = 0, no = 0;
  sc_status r = w && o ? SC_OK : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; r == SC_OK && i < t->n_in; i++) {
    if (t->kind[i] != IN_STATE) continue;
    const sc_buffer *b = input_buf(t->p, i);
    sc_ckpt_tensor *x = sc_train_is_optimizer_state(b->name) ? &o[no++] : &w[nw++];
    *x = (sc_ckpt_tensor){.name = b->name, .dtype = b->dtype, .rank = b->rank,
                          .data = t->state[i]};
    memcpy(x->dims, b->dims, sizeof x->dims);
  }
  if (r == SC_OK) r = sc_ckpt_save(dir, st, w, nw, o, no, d);
  sc_free(w);
  sc_free(o);
  return r;
}

const sc_ckpt_tensor *sc_trainer_ckpt_tensor(const sc_ckpt *c, const char *name,
                                            int32_t *group, sc_diag *d) {
  sc_ckpt_group g = sc_train_is_optimizer_state(name) ? SC_CKPT_OPTIMIZER : SC_CKPT_WEIGHTS;
  *group = g;
  const sc_ckpt_tensor *x = sc_ckpt_find(c, g, name);
  if (!x)
    sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                "the checkpoint has no %s tensor '%s' (another model or optimizer?)",
                sc_ckpt_group_name(g), name);
  return x;
}

sc_status sc_trainer_ckpt_unused(const sc_trainer *t, const sc_ckpt *c, const int32_t *used,
                                 sc_diag *d) {
  for (int g = 0; g < SC_CKPT_GROUP_COUNT; g++)
    for (int32_t k = 0; used[g] != sc_ckpt_count(c, (sc_ckpt_group)g) &&
                        k < sc_ckpt_count(c, (sc_ckpt_group)g);
         k++) {
      const sc_ckpt_tensor *x = sc_ckpt_tensor_at(c, (sc_ckpt_group)g, k);
      if (state_index(t, x->name) < 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "checkpoint tensor '%s' (%s) is not state of this training step",
                           x->name, sc_ckpt_group_name((sc_ckpt_group)g));
    }
  return SC_OK;
}

sc_status sc_trainer_restore(sc_trainer *t, const sc_ckpt *c, sc_diag *d) {
  int32_t used[SC_CKPT_GROUP_COUNT] = {0};
  for (int32_t i = 0; i < t->n_in; i++) {
    if (t->kind[i] != IN_STATE) continue;
    const sc_buffer *b = input_buf(t->p, i);
    int32_t g;
    const sc_ckpt_tensor *x = sc_trainer_ckpt_tensor(c, b->name, &g, d);
    if (!x) return d->status;
    if (!matches(x, b))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "checkpoint tensor '%s': %s of rank %d, the program's is %s of rank %d",
                         b->name, sc_dtype_name(x->dtype), (int)x->rank, sc_dtype_name(b->dtype),
                         (int)b->rank);
    pull_state(t); /* the host copies whole before part of them is written */
    memcpy(t->state[i], x->data, (size_t)b->bytes);
    t->dev_stale |= t->dev[i] != NULL;
    used[g]++;
  }
  return sc_trainer_ckpt_unused(t, c, used, d);
}

double sc_trainer_loss_scale(const sc_trainer *t, int64_t *growth) {
  if (growth) *growth = t->growth;
  return t->scale;
}

void sc_trainer_set_loss_scale(sc_trainer *t, double scale, int64_t growth) {
  if (!t->scaling || !(scale > 0) || !isfinite(scale)) return;
  t->scale = scale;
  t->growth = growth >= 0 ? growth : 0;
}
