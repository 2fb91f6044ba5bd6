/* train_memory.c — the training step's arena by class (train_memory.h). */
#include "driver/train_memory.h"

#include <string.h>

#include "codegen/memplan.h"
#include "codegen/train_manifest.h"

const char *sc_mem_class_name(sc_mem_class c) {
  static const char *const names[SC_MEM_CLASS_COUNT] = {
      "params", "optimizer state", "gradients", "activations", "workspace", "data",
      "communication"};
  return c >= 0 && c < SC_MEM_CLASS_COUNT ? names[c] : "?";
}

static bool has_prefix(const char *s, const char *prefix) {
  return s && strncmp(s, prefix, strlen(prefix)) == 0;
}


/* The class of storage root r; grad[r] marks the storage of the gradients
 * (buffers named "grad:P", views of the value autodiff summed). */
static sc_mem_class class_of(const sc_program *p, int32_t r, const bool *grad,
                             const bool *comm) {
  const sc_buffer *b = &p->buffers[r];
  const char *name = b->name ? b->name : "";
  if (b->kind == SC_BUF_INPUT) {
    if (sc_train_is_optimizer_state(name)) return SC_MEM_OPTIMIZER;
    if (has_prefix(name, "accum:")) return SC_MEM_GRADIENTS;
    return sc_program_input_is_state(p, r) ? SC_MEM_PARAMS : SC_MEM_DATA;
  }
  if (grad[r] || has_prefix(name, "new:accum:")) return SC_MEM_GRADIENTS;
  if (comm[r] && !has_prefix(name, "new:")) return SC_MEM_COMM;
  if (strstr(name, "/grad/") || has_prefix(name, "train/") || has_prefix(name, "new:") ||
      strcmp(name, "loss") == 0 || has_prefix(name, "train:") || strcmp(name, "grad_const") == 0)
    return SC_MEM_WORKSPACE;
  return SC_MEM_ACTIVATIONS;
}

/* Whether every node an origin names ("a,b,..") has `part` in its name. */
static bool every_name_has(const char *origin, const char *part) {
  if (!origin || !*origin) return false;
  size_t n = strlen(part);
  for (const char *s = origin; s && *s;) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    bool has = false;
    for (size_t i = 0; i + n <= len && !has; i++) has = memcmp(s + i, part, n) == 0;
    if (!has) return false;
    s = end ? end + 1 : NULL;
  }
  return true;
}

/* Whether every node an origin names is a gradient node ("…/grad/…"): a
 * step of the backward alone. A kernel fused of the loss's forward nodes
 * and the first gradient nodes (which read only the labels) may run
 * anywhere in the forward (it does under cp) and does not begin the
 * backward. */
static bool backward_only(const char *origin) { return every_name_has(origin, "/grad/"); }

/* m->saved (train_memory.h): the activation roots the memory plan keeps
 * live from before m->backward_step to it or later, on the device (an
 * offloaded value's host copy is not), first written by the forward (not
 * a bucket the backward's first gather packs ahead of it: ZeRO-3's
 * prefetch during the LM head). */
static sc_status saved_of(const sc_program *p, sc_train_memory *m, const bool *grad,
                          const bool *comm, sc_diag *d) {
  size_t n = (size_t)p->n_buffers + 1;
  int32_t *first = sc_malloc(n * sizeof *first), *last = sc_malloc(n * sizeof *last);
  sc_status st = first && last ? sc_memplan_lifetimes(p, first, last, d)
                               : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int32_t k = m->backward_step;
  for (int32_t r = 0; st == SC_OK && r < p->n_buffers; r++)
    if (first[r] >= 0 && first[r] < k && last[r] >= k && p->buffers[r].kind != SC_BUF_HOST &&
        class_of(p, r, grad, comm) == SC_MEM_ACTIVATIONS &&
        !backward_only(p->steps[first[r]].origin))
      m->saved += p->buffers[r].bytes;
  sc_free(first);
  sc_free(last);
  return st;
}

/* Whether step s computes the backward (backward_only), as opposed to
 * fetching what it will read: a collective or its wait (a sequence
 * parallel regather, a ZeRO-3 gather, which the overlap may start in the
 * forward, ahead of the LM head), or the copies into a gather's bucket
 * (passes/partition/bucket.c, ".../bucket/..."). */
static bool begins_backward(const sc_step *s) {
  return s->kind != SC_STEP_COMM && s->kind != SC_STEP_WAIT && backward_only(s->origin) &&
         !every_name_has(s->origin, "/bucket/");
}

sc_status sc_train_memory_of(const sc_program *p, sc_train_memory *m, sc_diag *d) {
  memset(m, 0, sizeof *m);
  size_t n = (size_t)(p->n_buffers ? p->n_buffers : 1);
  bool *live = sc_calloc(n, sizeof *live), *grad = sc_calloc(n, sizeof *grad);
  bool *comm = sc_calloc(n, sizeof *comm);
  if (!live || !grad || !comm) {
    sc_free(live);
    sc_free(grad);
    sc_free(comm);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  for (int32_t k = 0; k < p->n_steps; k++) {
    if (p->steps[k].kind != SC_STEP_COMM) continue;
    const sc_comm_step *c = &p->steps[k].comm;
    int32_t ids[3] = {c->out, c->pack, c->unpack};
    for (int j = 0; j < 3; j++) {
      int32_t r = ids[j] >= 0 ? sc_program_root(p, ids[j]) : -1;
      if (r >= 0) comm[r] = true;
    }
  }
  sc_status st = sc_memplan_peak(p, &m->peak_step, &m->peak_live, live, d);
  for (int32_t i = 0; st == SC_OK && i < p->n_buffers; i++)
    if (has_prefix(p->buffers[i].name, "grad:")) {
      int32_t r = sc_program_root(p, i);
      if (r >= 0) grad[r] = true;
    }
  int64_t align = p->arena_align > 0 ? p->arena_align : 64;
  for (int32_t i = 0; st == SC_OK && i < p->n_buffers; i++) {
    if (p->buffers[i].kind == SC_BUF_CONST) m->constants += p->buffers[i].bytes;
    if (!live[i]) continue;
    m->live[class_of(p, i, grad, comm)] += (p->buffers[i].bytes + align - 1) / align * align;
  }
  for (int32_t k = 0; st == SC_OK && k < p->n_steps; k++) {
    const sc_gemm *g = &p->steps[k].gemm;
    if (p->steps[k].kind != SC_STEP_GEMM || !g->fp8) continue;
    int32_t ids[2] = {g->a8_tn ? g->a8 : -1, g->b8_tn ? g->b8 : -1};
    for (int j = 0; j < 2; j++) {
      if (ids[j] < 0) continue;
      m->n_fp8_copies++;
      m->fp8_copies += p->buffers[ids[j]].bytes;
      if (live[ids[j]])
        m->fp8_copies_at_peak += (p->buffers[ids[j]].bytes + align - 1) / align * align;
    }
  }
  m->backward_step = -1;
  for (int32_t k = 0; st == SC_OK && k < p->n_steps && m->backward_step < 0; k++)
    if (begins_backward(&p->steps[k])) m->backward_step = k;
  if (st == SC_OK && m->backward_step >= 0) st = saved_of(p, m, grad, comm, d);
  m->arena = p->arena_bytes;
  m->host = p->host_bytes;
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (p->buffers[i].kind == SC_BUF_HOST) {
      m->n_offloaded++;
      m->offloaded += p->buffers[i].bytes;
    }
  m->peak_live_unoffloaded = m->peak_live;
  if (st == SC_OK && m->n_offloaded > 0)
    st = sc_memplan_peak_unoffloaded(p, &m->peak_live_unoffloaded, d);
  m->peak_origin = st == SC_OK && m->peak_step < p->n_steps ? p->steps[m->peak_step].origin : NULL;
  sc_free(live);
  sc_free(grad);
  sc_free(comm);
  return st;
}

static int64_t buffer_bytes(const sc_program *p, int32_t b) {
  return b >= 0 && b < p->n_buffers ? p->buffers[b].bytes : 0;
}

/* Counts COMM step c (or one half of it) into its row of *out. */
static sc_status count_comm(const sc_program *p, const sc_comm_step *c, const char *origin,
                            sc_train_comm **out, int32_t *n, int32_t *cap, sc_diag *d) {
  int32_t j = 0;
  while (j < *n && !((*out)[j].kind == c->kind && (*out)[j].axes == c->axes)) j++;
  if (j == *n) {
    if (*n == *cap) {
      *cap = *cap ? 2 * *cap : 8;
      sc_train_comm *x = sc_realloc(*out, (size_t)*cap * sizeof *x);
      if (!x) {
        sc_free(*out);
        *out = NULL;
        *n = 0;
        return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      }
      *out = x;
    }
    (*out)[(*n)++] = (sc_train_comm){.kind = c->kind, .axes = c->axes,
                                     .group_size = c->group_size};
  }
  sc_train_comm *row = &(*out)[j];
  int64_t in = buffer_bytes(p, c->in), o = buffer_bytes(p, c->out);
  int64_t M = in > o ? in : o, g = c->group_size > 0 ? c->group_size : 1;
  row->ops++;
  row->async_ops += c->async;
  row->bytes += M;
  int64_t sent = c->kind == SC_COMM_ALL_REDUCE ? 2 * (g - 1) * M / g
                 : c->kind == SC_COMM_SEND     ? M
                 : c->kind == SC_COMM_RECV     ? 0
                                               : (g - 1) * M / g;
  row->sent += sent;
  if (origin && strstr(origin, "/grad/")) row->backward_sent += sent;
  return SC_OK;
}

sc_status sc_train_comm_of(const sc_program *p, sc_train_comm **out, int32_t *n, sc_diag *d) {
  *out = NULL;
  *n = 0;
  int32_t cap = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    if (p->steps[k].kind != SC_STEP_COMM) continue;
    sc_comm_step half[2]; /* a ring's exchange counts as its Send and its Recv */
    for (int32_t h = 0, nh = sc_comm_halves(&p->steps[k].comm, half); h < nh; h++) {
      sc_status st = count_comm(p, &half[h], p->steps[k].origin, out, n, &cap, d);
      if (st != SC_OK) return st;
    }
  }
  return SC_OK;
}
