/* offload.c — activation offloading: saved activations parked in the host
 * pool between the forward that writes them and the backward that reads
 * them (program.h's sc_program_offload; docs/offload.md).
 *
 * For each named buffer whose storage root X is an arena TEMP, the steps
 * touching X (or a view of it) are listed in order; the longest stretch of
 * steps between two consecutive uses is X's idle interval: the last use
 * before it is a, the first use after it b (for a saved activation, the
 * last forward read and the first backward read). With w the last step
 * writing X up to a:
 *   COPY X -> X/host     started right after w (the copy queue)
 *   WAIT                 right after a (at least one step after the start)
 *   COPY X/host -> X/reload   started H reload points ahead (below)
 *   WAIT                 right before b
 * and every step from b on reads X/reload (a new TEMP root of X's size;
 * views of X used there get views of it) instead of X. The memory plan then
 * frees X's device slot from the first WAIT to the copy-in's start and
 * places X/host in the host pool (a second arena) from the copy-out's start
 * to the copy-in's WAIT.
 *
 * Reload points are the distinct steps b, in order; the copy-in of the one
 * at index g starts right before the reload point g - H (H the horizon),
 * or, for g < H, right before the first reload point (where the backward
 * first needs an offloaded value); never before its own copy-out's WAIT
 * and never after its reload point. With full
 * recompute each block's input is read first by the block's recomputed
 * forward, so the reload points are the blocks and H counts blocks.
 *
 * Left alone (not offloaded): a name with no buffer, a root that is not a
 * TEMP, one with no idle interval of at least one step, one an async
 * collective keeps in flight across the interval, one whose kernel is run
 * on both sides of it. The result keeps every step's semantics: the same
 * kernels read the same bytes, from another slot. Errors: SC_ERR_NOMEM,
 * SC_ERR_INVALID (a step naming a buffer that does not exist). */
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"

typedef struct use_ctx {
  const sc_program *p;
  const int32_t *root_of; /* buffer -> root */
  int32_t target;         /* the root looked for */
  bool hit, written, bad;
} use_ctx;

static void use_fn(void *ud, int32_t b, bool written) {
  use_ctx *u = ud;
  if (b < 0 || b >= u->p->n_buffers) {
    u->bad = true;
    return;
  }
  if (u->root_of[b] != u->target) return;
  u->hit = true;
  u->written |= written;
}

/* An inserted step: placed at original step `at`, in phase order
 * (PH_STEP is the original step itself). */
enum { PH_IN_START_BEFORE, PH_IN_WAIT, PH_STEP, PH_OUT_START, PH_OUT_WAIT, PH_IN_START_AFTER };
typedef struct placed {
  int32_t at, phase, seq; /* sort key */
  int32_t id;             /* its entry before sorting */
  sc_step step;           /* WAIT: started is an index into the placed array */
  int32_t started_ins;    /* WAIT: the inserted COPY it completes */
} placed;

static int cmp_placed(const void *x, const void *y) {
  const placed *a = x, *b = y;
  if (a->at != b->at) return a->at < b->at ? -1 : 1;
  if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

typedef struct cand {
  int32_t root, host, reload;
  int32_t w, a, b;        /* last write before the interval, last use, first use after */
  int32_t group;          /* index of its reload point */
} cand;

static int cmp_cand_b(const void *x, const void *y) {
  const cand *a = x, *b = y;
  if (a->b != b->b) return a->b < b->b ? -1 : 1;
  return a->root < b->root ? -1 : a->root > b->root;
}

/* Buffer ids below n whose map entry is set are replaced by it. */
typedef struct remap {
  const int32_t *to;
  int32_t n;
} remap;

static void remap_id(int32_t *id, const remap *map) {
  if (*id >= 0 && *id < map->n && map->to[*id] >= 0) *id = map->to[*id];
}

/* Replaces the buffers map names wherever step s names them, kernel params
 * included (the kernel is s's alone: checked by the caller). */
static void remap_step(sc_program *p, sc_step *s, const remap *map) {
  switch (s->kind) {
  case SC_STEP_GEMM: {
    sc_gemm *g = &s->gemm;
    remap_id(&g->a, map);
    remap_id(&g->b, map);
    remap_id(&g->c, map);
    remap_id(&g->bias, map);
    remap_id(&g->act_out, map);
    remap_id(&g->bgrad_out, map);
    if (g->fp8) {
      remap_id(&g->a8, map);
      remap_id(&g->b8, map);
    }
    if (g->scaled) {
      remap_id(&g->a8_scale, map);
      remap_id(&g->b8_scale, map);
    }
    remap_id(&g->conv.x, map);
    remap_id(&g->conv.bias, map);
    break;
  }
  case SC_STEP_CHECK: remap_id(&s->check.buffer, map); break;
  case SC_STEP_SCATTER_ADD:
    remap_id(&s->scatter.data, map);
    remap_id(&s->scatter.indices, map);
    remap_id(&s->scatter.updates, map);
    remap_id(&s->scatter.out, map);
    break;
  case SC_STEP_ATTENTION:
  case SC_STEP_ATTENTION_GRAD: {
    sc_attention_step *a = &s->attn;
    int32_t *ids[] = {&a->q, &a->k, &a->v, &a->mask, &a->o, &a->lse, &a->d_o, &a->dq, &a->dk,
                      &a->dv};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) remap_id(ids[i], map);
    break;
  }
  case SC_STEP_COMM:
    remap_id(&s->comm.in, map);
    remap_id(&s->comm.out, map);
    remap_id(&s->comm.pack, map);
    remap_id(&s->comm.unpack, map);
    break;
  case SC_STEP_COPY:
    remap_id(&s->copy.src, map);
    remap_id(&s->copy.dst, map);
    break;
  case SC_STEP_KERNEL:
  case SC_STEP_WAIT:
  case SC_STEP_KIND_COUNT: break;
  }
  if (s->kind == SC_STEP_KERNEL && s->pool.on) {
    remap_id(&s->pool.x, map);
    remap_id(&s->pool.y, map);
  }
  int32_t ks[2] = {s->kernel, s->kind == SC_STEP_GEMM && s->gemm.bgrad != SC_GEMM_BGRAD_NONE
                                 ? s->gemm.bgrad_kernel : -1};
  for (int j = 0; j < 2; j++)
    if (ks[j] >= 0 && ks[j] < p->n_kernels) {
      kir_kernel *k = p->kernels[ks[j]];
      for (int32_t i = 0; i < k->n_params; i++) remap_id(&k->params[i].buffer, map);
    }
}

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Scans X's uses; false when X is not to be offloaded (see the file
 * comment), else c's w, a, b. */
static bool idle_interval(const sc_program *p, const int32_t *root_of, const int32_t *kernel_steps,
                          cand *c, bool *bad) {
  use_ctx u = {p, root_of, c->root, false, false, false};
  int32_t prev = -1, best = 0, last_write = -1;
  c->a = c->b = c->w = -1;
  for (int32_t i = 0; i < p->n_steps; i++) {
    u.hit = u.written = false;
    sc_step_buffers(p, &p->steps[i], use_fn, &u);
    if (u.bad) {
      *bad = true;
      return false;
    }
    if (!u.hit) continue;
    if (prev >= 0 && i - prev - 1 > best) {
      best = i - prev - 1;
      c->a = prev;
      c->b = i;
      c->w = last_write;
    }
    if (u.written) last_write = i;
    prev = i;
  }
  if (best < 1 || c->w < 0) return false;
  for (int32_t i = c->b; i < p->n_steps; i++) { /* a collective in flight across it */
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_WAIT || s->started < 0 || s->started >= c->b) continue;
    u.hit = false;
    sc_step_buffers(p, &p->steps[s->started], use_fn, &u);
    if (u.hit) return false;
  }
  for (int32_t i = c->b; i < p->n_steps; i++) { /* a kernel of both sides */
    int32_t k = p->steps[i].kernel;
    if (k < 0 || k >= p->n_kernels) continue;
    if (kernel_steps[k] != 1) {
      u.hit = false;
      sc_step_buffers(p, &p->steps[i], use_fn, &u);
      if (u.hit) return false;
    }
  }
  return true;
}

sc_status sc_program_offload(sc_program *p, const char *const *names, int32_t n_names,
                             int32_t horizon, sc_offload_report *r, sc_diag *diag) {
  if (r) memset(r, 0, sizeof *r);
  if (n_names <= 0 || p->n_steps == 0) return SC_OK;
  if (horizon < 0) horizon = 0;
  int32_t nb = p->n_buffers, ns = p->n_steps;
  const char **sorted = sc_malloc((size_t)n_names * sizeof *sorted);
  int32_t *root_of = sc_malloc(((size_t)nb + 1) * sizeof *root_of);
  int32_t *kernel_steps = sc_calloc((size_t)p->n_kernels + 1, sizeof *kernel_steps);
  bool *chosen = sc_calloc((size_t)nb + 1, sizeof *chosen);
  cand *cs = sc_malloc(((size_t)nb + 1) * sizeof *cs);
  int32_t *map = NULL;
  placed *ins = NULL;
  sc_status st = SC_OK;
  if (!sorted || !root_of || !kernel_steps || !chosen || !cs) goto nomem;
  memcpy(sorted, names, (size_t)n_names * sizeof *sorted);
  qsort(sorted, (size_t)n_names, sizeof *sorted, cmp_str);
  for (int32_t b = 0; b < nb; b++) root_of[b] = sc_program_root(p, b);
  for (int32_t i = 0; i < ns; i++) {
    int32_t k = p->steps[i].kernel;
    if (k >= 0 && k < p->n_kernels) kernel_steps[k]++;
  }

  /* the candidates, in buffer order */
  int32_t n_cand = 0;
  for (int32_t b = 0; b < nb; b++) {
    const char *nm = p->buffers[b].name;
    int32_t root = root_of[b];
    if (!nm || root < 0 || root >= nb || chosen[root] || p->buffers[root].kind != SC_BUF_TEMP ||
        sc_program_bound(p, root) || p->buffers[root].bytes <= 0)
      continue;
    if (!bsearch(&nm, sorted, (size_t)n_names, sizeof *sorted, cmp_str)) continue;
    cand c = {.root = root};
    bool bad = false;
    if (!idle_interval(p, root_of, kernel_steps, &c, &bad)) {
      if (bad) {
        st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "offload: a step uses a buffer that does not exist");
        goto done;
      }
      continue;
    }
    chosen[root] = true;
    cs[n_cand++] = c;
  }
  if (n_cand == 0) goto done;

  /* the host slot and the reloaded root of each, and the views of X that
   * the steps from b on name */
  map = sc_malloc(((size_t)nb + 1) * sizeof *map);
  if (!map) goto nomem;
  for (int32_t k = 0; k < n_cand; k++) {
    cand *c = &cs[k];
    sc_buffer x = p->buffers[c->root];
    char name[600];
    sc_buffer h = x;
    snprintf(name, sizeof name, "%s/host", x.name ? x.name : "t");
    h.name = name;
    h.kind = SC_BUF_HOST;
    h.offset = -1;
    h.value = -1;
    if ((c->host = sc_program_add_buffer(p, &h)) < 0) goto nomem;
    sc_buffer re = x;
    snprintf(name, sizeof name, "%s/reload", x.name ? x.name : "t");
    re.name = name;
    re.offset = -1;
    if ((c->reload = sc_program_add_buffer(p, &re)) < 0) goto nomem;
    if (r) {
      r->n_buffers++;
      r->bytes += x.bytes;
    }
  }
  /* views: new views of the reloaded root (nb is the count before) */
  for (int32_t k = 0; k < n_cand; k++) {
    cand *c = &cs[k];
    for (int32_t b = 0; b < nb; b++) map[b] = -1;
    map[c->root] = c->reload;
    for (int32_t b = 0; b < nb; b++) {
      if (b == c->root || root_of[b] != c->root) continue;
      /* a view chain is rebuilt on the reloaded root */
      sc_buffer v = p->buffers[b];
      v.offset = -1;
      int32_t id = sc_program_add_buffer(p, &v);
      if (id < 0) goto nomem;
      map[b] = id;
    }
    for (int32_t b = nb; b < p->n_buffers; b++) /* the new views' aliases */
      if (p->buffers[b].kind == SC_BUF_VIEW && p->buffers[b].alias_of >= 0 &&
          p->buffers[b].alias_of < nb && map[p->buffers[b].alias_of] >= 0 &&
          root_of[p->buffers[b].alias_of] == c->root)
        p->buffers[b].alias_of = map[p->buffers[b].alias_of];
    remap rm = {map, nb};
    for (int32_t i = c->b; i < ns; i++) remap_step(p, &p->steps[i], &rm);
  }

  /* reload points in backward order */
  qsort(cs, (size_t)n_cand, sizeof *cs, cmp_cand_b);
  int32_t n_groups = 0, *group_b = sc_malloc(((size_t)n_cand + 1) * sizeof *group_b);
  if (!group_b) goto nomem;
  for (int32_t k = 0; k < n_cand; k++) {
    if (k == 0 || cs[k].b != cs[k - 1].b) group_b[n_groups++] = cs[k].b;
    cs[k].group = n_groups - 1;
  }

  /* the inserted steps, 4 per candidate */
  ins = sc_malloc(((size_t)ns + 4 * (size_t)n_cand) * sizeof *ins);
  if (!ins) {
    sc_free(group_b);
    goto nomem;
  }
  int32_t m = 0;
  for (int32_t i = 0; i < ns; i++)
    ins[m++] = (placed){.at = i, .phase = PH_STEP, .seq = 0, .step = p->steps[i],
                        .started_ins = -1};
  for (int32_t k = 0; k < n_cand; k++) {
    const cand *c = &cs[k];
    const char *origin = p->buffers[c->root].name;
    int32_t wait_at = c->a > c->w ? c->a : c->w + 1;
    sc_step out = {.kind = SC_STEP_COPY, .kernel = -1, .started = -1, .origin = origin};
    out.copy = (sc_copy_step){c->root, c->host};
    int32_t o = m;
    ins[m++] = (placed){.at = c->w, .phase = PH_OUT_START, .seq = k, .step = out,
                        .started_ins = -1};
    sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = -1, .origin = origin};
    ins[m++] = (placed){.at = wait_at, .phase = PH_OUT_WAIT, .seq = k, .step = w,
                        .started_ins = o};
    /* the copy-in's start: H reload points ahead, clamped to
     * [after its copy-out's wait, before its own reload point] */
    int32_t at = group_b[c->group >= horizon ? c->group - horizon : 0];
    int32_t phase = PH_IN_START_BEFORE;
    if (at < wait_at || (at == wait_at && phase < PH_IN_START_AFTER)) {
      at = wait_at;
      phase = PH_IN_START_AFTER;
    }
    if (at >= c->b) {
      at = c->b;
      phase = PH_IN_START_BEFORE;
    }
    sc_step in = {.kind = SC_STEP_COPY, .kernel = -1, .started = -1, .origin = origin};
    in.copy = (sc_copy_step){c->host, c->reload};
    int32_t q = m;
    ins[m++] = (placed){.at = at, .phase = phase, .seq = k, .step = in, .started_ins = -1};
    ins[m++] = (placed){.at = c->b, .phase = PH_IN_WAIT, .seq = k, .step = w,
                        .started_ins = q};
  }
  sc_free(group_b);
  /* order, then the WAITs' step indices (the original ones too) */
  for (int32_t i = 0; i < m; i++) ins[i].id = i;
  qsort(ins, (size_t)m, sizeof *ins, cmp_placed);
  int32_t *pos_of = sc_malloc((size_t)m * sizeof *pos_of); /* entry id -> new index */
  sc_step *steps = sc_arena_array(&p->arena, (size_t)m, sizeof *steps);
  if (!pos_of || !steps) {
    sc_free(pos_of);
    goto nomem;
  }
  for (int32_t j = 0; j < m; j++) pos_of[ins[j].id] = j; /* ids 0..ns-1: the steps */
  for (int32_t j = 0; j < m; j++) {
    sc_step s = ins[j].step;
    if (s.kind == SC_STEP_WAIT)
      s.started = ins[j].started_ins >= 0                 ? pos_of[ins[j].started_ins]
                  : s.started >= 0 && s.started < ns ? pos_of[s.started]
                                                       : s.started;
    steps[j] = s;
  }
  p->steps = steps;
  p->n_steps = p->cap_steps = m;
  sc_free(pos_of);
  goto done;
nomem:
  st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "offload: out of memory");
done:
  sc_free(sorted);
  sc_free(root_of);
  sc_free(kernel_steps);
  sc_free(chosen);
  sc_free(cs);
  sc_free(map);
  sc_free(ins);
  return st;
}
