/* memplan.c — arena offsets for a program's buffers from their lifetimes,
 * and the check of a plan (see codegen/memplan.h; docs/kir.md has the
 * algorithm and its invariants).
 *
 * 1. Lifetimes: for every storage root (a non-VIEW INPUT, OUTPUT or TEMP
 *    buffer) the interval [first, last] of step indices touching it or any of
 *    its views; INPUTs start at 0, OUTPUTs and roots of graph outputs end at
 *    n_steps (after the last step), unused TEMPs get [0, 0].
 * 2. In-place: walking the steps in order, a KERNEL step's written root O
 *    born there takes the slot of a TEMP root I read there and dying there,
 *    of the same byte size, when every param of I is aligned to O's param
 *    (kir_reads_aligned) and no other param touches O. Slots are unions of
 *    such chains; their intervals touch but never overlap.
 *    State pairs (p->updates: input X, output "new:X") share one slot for
 *    the whole run when X's last use is before the output's first write, or
 *    at that same kernel step under the same alignment rule; a pair that
 *    cannot is dropped (set to -1: the runtime then copies).
 *    A bound input (p->bound) and the output of its kept pair take no slot:
 *    their storage is the caller's (offset -1, not in arena_bytes).
 * 3. Placement: slots in order of decreasing size (then first use, then id);
 *    each goes into the smallest gap, between already placed slots whose
 *    lifetimes overlap its own, that holds it, else after the highest one.
 * The verifier recomputes the lifetimes and checks every pair of roots. */
#include "codegen/memplan.h"

#include <stdlib.h>
#include <string.h>

typedef struct life {
  int32_t n;          /* buffers */
  int32_t *root;      /* buffer -> storage root, -1 for none (CONST) */
  int32_t *first;     /* per root: first step, INT32_MAX if unused */
  int32_t *last;      /* per root: last step (n_steps = to the end), -1 */
} life;

static void life_free(life *l) {
  sc_free(l->root);
  sc_free(l->first);
  sc_free(l->last);
}

static bool in_arena(const sc_buffer *b) {
  return b->kind == SC_BUF_INPUT || b->kind == SC_BUF_OUTPUT || b->kind == SC_BUF_TEMP;
}

/* The pool a root is placed in: the device arena or the host pool. */
static bool in_host_pool(const sc_buffer *b) { return b->kind == SC_BUF_HOST; }

typedef struct touch_ctx {
  const sc_program *p;
  life *l;
  int32_t step;
  bool bad;
  int32_t bad_id;
} touch_ctx;

static void touch(void *ud, int32_t buffer, bool written) {
  (void)written;
  touch_ctx *t = ud;
  if (buffer < 0 || buffer >= t->p->n_buffers) {
    if (!t->bad) t->bad_id = buffer;
    t->bad = true;
    return;
  }
  int32_t r = t->l->root[buffer];
  if (r < 0) return;
  if (t->step < t->l->first[r]) t->l->first[r] = t->step;
  if (t->step > t->l->last[r]) t->l->last[r] = t->step;
}

/* Lifetimes are in times, two per step: step s's work is at SC_TIME(s) =
 * 2s + 1, except that a GEMM step with an epilogue kernel (not a
 * convolution, whose epilogue a device may run on each tile as the tile
 * ends) touches the product's operands at 2s, before the kernel: so a
 * buffer the epilogue writes may take the storage of one only the product
 * reads, or the product's own in place (a device that applies the
 * activation in the product, sc_gemm.act, checks that act_out is C's
 * storage or apart from the operands; a tanh GELU whose product is read
 * later too, sc_gemm.act_aux, has act_out touched at 2s as well, so that
 * cuBLASLt's GELU_AUX may write it beside C; a bias gradient, sc_gemm.bgrad,
 * likewise has bgrad_out touched at 2s, for BGRADA/BGRADB). INPUTs are live from 0, OUTPUTs to
 * SC_TIME_END, after every step. */
#define SC_TIME(s) (2 * (s) + 1)
#define SC_TIME_END(p) (2 * (p)->n_steps)
#define SC_STEP_AT(t) ((t) / 2)

static bool split_gemm(const sc_program *p, const sc_step *st) {
  return st->kind == SC_STEP_GEMM && st->kernel >= 0 && st->kernel < p->n_kernels &&
         !st->gemm.conv.on;
}

/* Roots (checking VIEW chains without trusting them) and lifetimes. */
static sc_status compute_life(const sc_program *p, life *l, sc_diag *diag) {
  memset(l, 0, sizeof *l);
  size_t n = (size_t)(p->n_buffers ? p->n_buffers : 1);
  l->n = p->n_buffers;
  l->root = sc_calloc(n, sizeof *l->root);
  l->first = sc_calloc(n, sizeof *l->first);
  l->last = sc_calloc(n, sizeof *l->last);
  if (!l->root || !l->first || !l->last) {
    life_free(l);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
  }
  for (int32_t i = 0; i < p->n_buffers; i++) {
    int32_t b = i, hops = 0;
    while (b >= 0 && b < p->n_buffers && p->buffers[b].kind == SC_BUF_VIEW && hops <= p->n_buffers) {
      b = p->buffers[b].alias_of;
      hops++;
    }
    if (b < 0 || b >= p->n_buffers || hops > p->n_buffers) {
      life_free(l);
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "memory plan: view buffer %d ('%s') has no storage (bad alias or cycle)",
                         (int)i, p->buffers[i].name ? p->buffers[i].name : "");
    }
    l->root[i] = in_arena(&p->buffers[b]) || in_host_pool(&p->buffers[b]) ? b : -1;
    l->first[i] = INT32_MAX;
    l->last[i] = -1;
  }
  if (p->n_steps > (INT32_MAX - 2) / 2) {
    life_free(l);
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "memory plan: %d steps",
                       (int)p->n_steps);
  }
  touch_ctx t = {p, l, 0, false, 0};
  for (int32_t s = 0; s < p->n_steps; s++) {
    const sc_step *st = &p->steps[s];
    if (st->kind == SC_STEP_KERNEL && (st->kernel < 0 || st->kernel >= p->n_kernels)) {
      life_free(l);
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "memory plan: step %d runs kernel %d that does not exist", (int)s,
                         (int)st->kernel);
    }
    t.step = SC_TIME(s);
    if (split_gemm(p, st) || (st->kind == SC_STEP_GEMM && st->gemm.bgrad != SC_GEMM_BGRAD_NONE)) {
      /* the product (and its bias gradient's kernel) at 2s, then its epilogue kernel */
      sc_step gemm_part = *st;
      gemm_part.kernel = -1;
      t.step = 2 * s;
      sc_step_buffers(p, &gemm_part, touch, &t);
      const sc_gemm *g = &st->gemm; /* GELU_AUX writes act_out beside C, in the product */
      if (g->act_aux && g->act == SC_GEMM_ACT_GELU_TANH) touch(&t, g->act_out, true);
      if (g->bgrad != SC_GEMM_BGRAD_NONE) touch(&t, g->bgrad_out, true); /* BGRADA/B */
      t.step = SC_TIME(s);
      if (st->kernel >= 0 && st->kernel < p->n_kernels) {
        const kir_kernel *k = p->kernels[st->kernel];
        for (int32_t i = 0; i < k->n_params; i++)
          touch(&t, k->params[i].buffer, k->params[i].written);
      }
    } else {
      sc_step_buffers(p, st, touch, &t);
    }
    if (t.bad) {
      life_free(l);
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "memory plan: step %d uses buffer %d that does not exist", (int)s,
                         (int)t.bad_id);
    }
  }
  for (int32_t i = 0; i < p->n_inputs; i++) {
    int32_t b = p->inputs[i];
    if (b >= 0 && b < p->n_buffers && l->root[b] >= 0) l->first[l->root[b]] = 0;
  }
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (l->root[i] != i) continue;
    if (p->buffers[i].kind == SC_BUF_INPUT) l->first[i] = 0;
    if (p->buffers[i].kind == SC_BUF_OUTPUT) l->last[i] = SC_TIME_END(p);
  }
  for (int32_t i = 0; i < p->n_outputs; i++) {
    int32_t b = p->outputs[i];
    if (b >= 0 && b < p->n_buffers && l->root[b] >= 0) l->last[l->root[b]] = SC_TIME_END(p);
  }
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (l->root[i] != i) continue;
    if (l->first[i] == INT32_MAX) l->first[i] = 0; /* unused: [0, 0] */
    if (l->last[i] < l->first[i]) l->last[i] = l->first[i];
  }
  return SC_OK;
}

/* A SCATTER_ADD step's out may take its data's storage: out = data, then
 * rows added, and nothing else it reads (indices, updates) is that
 * storage. The runtimes skip the copy when the two are one. */
static bool scatter_inplace(const sc_program *p, const life *l, const sc_step *st, int32_t from,
                            int32_t to) {
  const sc_scatter_step *c = &st->scatter;
  int32_t ids[4] = {c->data, c->indices, c->updates, c->out};
  for (int32_t i = 0; i < 4; i++)
    if (ids[i] < 0 || ids[i] >= p->n_buffers) return false;
  return l->root[c->data] == from && l->root[c->out] == to && l->root[c->indices] != from &&
         l->root[c->updates] != from && p->buffers[from].bytes == p->buffers[to].bytes &&
         p->buffers[from].bytes > 0;
}

/* Can root `to` overwrite root `from`'s storage at kernel step s, where
 * `from` is last read and `to` first written? Same size; `to` is one
 * written param of the kernel and every param of `from` reads only the
 * elements written there (the kinds are the callers' business). The
 * kernel may be a GEMM step's epilogue (split_gemm: a gradient accumulated
 * into its state, new:acc = acc + product; an activation over the product
 * in place): the product has run by then, and its C is not `to`. */
static bool kernel_inplace(const sc_program *p, const life *l, int32_t s, int32_t from,
                           int32_t to) {
  const sc_step *st = &p->steps[s];
  if (st->kind == SC_STEP_SCATTER_ADD) return scatter_inplace(p, l, st, from, to);
  if (st->kind == SC_STEP_GEMM) {
    const sc_gemm *g = &st->gemm;
    if (!split_gemm(p, st) || g->c < 0 || g->c >= p->n_buffers || l->root[g->c] == to)
      return false;
  } else if (st->kind != SC_STEP_KERNEL || st->kernel < 0 || st->kernel >= p->n_kernels) {
    return false;
  }
  const sc_buffer *bf = &p->buffers[from], *bt = &p->buffers[to];
  if (bf->bytes != bt->bytes || bf->bytes <= 0) return false;
  const kir_kernel *k = p->kernels[st->kernel];
  int32_t w = -1;
  for (int32_t i = 0; i < k->n_params; i++) {
    int32_t b = k->params[i].buffer;
    if (b < 0 || b >= p->n_buffers || l->root[b] != to) continue;
    if (w >= 0 || !k->params[i].written) return false; /* one param, a written one */
    w = i;
  }
  if (w < 0) return false;
  bool any = false;
  for (int32_t i = 0; i < k->n_params; i++) {
    int32_t b = k->params[i].buffer;
    if (b < 0 || b >= p->n_buffers || l->root[b] != from) continue;
    if (!kir_reads_aligned(k, i, w)) return false;
    any = true;
  }
  return any;
}

/* Can root `to` take root `from`'s storage at kernel step s? Requires `from`
 * to die and `to` to be born at s (checked by the callers). */
static bool inplace_ok(const sc_program *p, const life *l, int32_t s, int32_t from, int32_t to) {
  const sc_buffer *bf = &p->buffers[from], *bt = &p->buffers[to];
  if (bf->kind != SC_BUF_TEMP || (bt->kind != SC_BUF_TEMP && bt->kind != SC_BUF_OUTPUT))
    return false;
  return kernel_inplace(p, l, s, from, to);
}

/* The arena roots of state pair j (input x, output o) when the pair names
 * an INPUT and a distinct non-VIEW OUTPUT of the same size; else false. */
static bool pair_roots(const sc_program *p, const life *l, int32_t j, int32_t *x, int32_t *o) {
  int32_t i = sc_program_updates(p, j);
  if (i < 0 || i >= p->n_inputs) return false;
  int32_t bx = p->inputs[i], bo = p->outputs[j];
  if (bx < 0 || bx >= p->n_buffers || bo < 0 || bo >= p->n_buffers) return false;
  if (l->root[bx] != bx || l->root[bo] != bo || bx == bo) return false;
  if (p->buffers[bx].kind != SC_BUF_INPUT || p->buffers[bo].kind != SC_BUF_OUTPUT ||
      p->buffers[bx].bytes != p->buffers[bo].bytes)
    return false;
  *x = bx;
  *o = bo;
  return true;
}

/* Every use of x (and its views) comes before o's first write, or at that
 * very kernel, element for element. */
static bool pair_ordered(const sc_program *p, const life *l, int32_t x, int32_t o) {
  if (l->last[x] < l->first[o]) return true;
  return l->last[x] == l->first[o] && (l->first[o] & 1) &&
         kernel_inplace(p, l, SC_STEP_AT(l->first[o]), x, o);
}

static int64_t align_up(int64_t v, int64_t a, bool *ok) {
  int64_t r;
  if (!sc_add_i64(v, a - 1, &r)) {
    *ok = false;
    return 0;
  }
  return r / a * a;
}

typedef struct slot {
  int32_t id;          /* representative root */
  int32_t first, last;
  int64_t bytes;       /* aligned size */
  int64_t offset;
} slot;

static const slot *sort_slots_base;
static int cmp_slot_order(const void *x, const void *y) {
  const slot *a = &sort_slots_base[*(const int32_t *)x], *b = &sort_slots_base[*(const int32_t *)y];
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

static int32_t find(int32_t *parent, int32_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

sc_status sc_memplan_run(sc_program *p, sc_diag *diag) {
  if (p->arena_align <= 0) p->arena_align = 64;
  int64_t align = p->arena_align;
  life l;
  sc_status st = compute_life(p, &l, diag);
  if (st != SC_OK) return st;
  size_t n = (size_t)(p->n_buffers ? p->n_buffers : 1);
  int32_t *parent = sc_calloc(n, sizeof *parent);
  bool *donated = sc_calloc(n, sizeof *donated);
  slot *slots = sc_calloc(n, sizeof *slots);
  int32_t *slot_of = sc_calloc(n, sizeof *slot_of);
  int32_t *order = sc_calloc(n, sizeof *order);
  int32_t *placed = sc_calloc(2 * n, sizeof *placed); /* placed, then conflicts */
  if (!parent || !donated || !slots || !slot_of || !order || !placed) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
    goto done;
  }
  for (int32_t i = 0; i < p->n_buffers; i++) parent[i] = i;

  /* state pairs: one slot for the whole run, or dropped */
  for (int32_t j = 0; p->updates && j < p->n_outputs; j++) {
    int32_t x, o;
    if (p->updates[j] < 0) continue;
    if (!pair_roots(p, &l, j, &x, &o) || find(parent, x) != x || find(parent, o) != o ||
        !pair_ordered(p, &l, x, o)) {
      p->updates[j] = -1;
      continue;
    }
    parent[o] = x;
  }

  /* in-place reuse, step by step (a GEMM's epilogue too; a scatter's
   * output over its data) */
  for (int32_t s = 0; s < p->n_steps; s++) {
    const sc_step *sp = &p->steps[s];
    if (sp->kind == SC_STEP_SCATTER_ADD) {
      int32_t from = l.root[sp->scatter.data], to = l.root[sp->scatter.out];
      if (from < 0 || to < 0 || from == to || donated[from] || find(parent, to) != to ||
          l.first[to] != SC_TIME(s) || l.last[from] != SC_TIME(s) ||
          !inplace_ok(p, &l, s, from, to))
        continue;
      donated[from] = true;
      parent[to] = find(parent, from);
      continue;
    }
    if (sp->kind != SC_STEP_KERNEL && !split_gemm(p, sp)) continue;
    const kir_kernel *k = p->kernels[sp->kernel];
    for (int32_t w = 0; w < k->n_params; w++) {
      if (!k->params[w].written) continue;
      int32_t bw = k->params[w].buffer, to = l.root[bw];
      if (to < 0 || l.first[to] != SC_TIME(s) || find(parent, to) != to) continue;
      for (int32_t r = 0; r < k->n_params; r++) {
        int32_t from = l.root[k->params[r].buffer];
        if (k->params[r].written || from < 0 || from == to || donated[from]) continue;
        if (l.last[from] != SC_TIME(s) || !inplace_ok(p, &l, s, from, to)) continue;
        donated[from] = true;
        parent[to] = find(parent, from);
        break;
      }
    }
  }

  /* slots: one per in-place chain */
  int32_t n_slots = 0;
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (l.root[i] != i || find(parent, i) != i) continue;
    slot *sl = &slots[n_slots];
    bool ok = true;
    sl->id = i;
    sl->first = l.first[i];
    sl->last = l.last[i];
    sl->bytes = align_up(p->buffers[i].bytes, align, &ok);
    sl->offset = -1;
    if (!ok || p->buffers[i].bytes < 0) {
      st = sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "memory plan: buffer '%s' size overflows",
                       p->buffers[i].name ? p->buffers[i].name : "");
      goto done;
    }
    slot_of[i] = n_slots++;
  }
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (l.root[i] != i) continue;
    int32_t rep = find(parent, i);
    slot *sl = &slots[slot_of[rep]];
    slot_of[i] = slot_of[rep];
    if (l.first[i] < sl->first) sl->first = l.first[i];
    if (l.last[i] > sl->last) sl->last = l.last[i];
  }

  /* greedy by size, best fit: the device arena's slots, then the host
   * pool's, each pool on its own (pool_peak[0], pool_peak[1]) */
  for (int32_t i = 0; i < n_slots; i++) order[i] = i;
  sort_slots_base = slots;
  qsort(order, (size_t)n_slots, sizeof *order, cmp_slot_order);
  int64_t pool_peak[2] = {0, 0};
  for (int pool = 0; pool < 2; pool++) {
    int32_t n_placed = 0;
    for (int32_t oi = 0; oi < n_slots; oi++) {
      slot *sl = &slots[order[oi]];
      if (in_host_pool(&p->buffers[sl->id]) != (pool == 1)) continue;
      if (sc_program_bound(p, sl->id)) continue; /* the caller's storage: offset -1 */
      if (sl->bytes == 0) {
        sl->offset = 0;
        continue;
      }
      /* placed is kept in (offset, id) order: the slots live at the same
       * time as this one are met in that order, no sort per slot */
      int64_t cur = 0, best = -1, best_gap = INT64_MAX;
      for (int32_t j = 0; j < n_placed; j++) {
        const slot *o = &slots[placed[j]];
        if (!(o->first <= sl->last && sl->first <= o->last)) continue;
        if (o->offset > cur) {
          int64_t gap = o->offset - cur;
          if (gap >= sl->bytes && gap < best_gap) {
            best = cur;
            best_gap = gap;
          }
        }
        int64_t end;
        if (!sc_add_i64(o->offset, o->bytes, &end)) end = INT64_MAX;
        if (end > cur) cur = end;
      }
      sl->offset = best >= 0 ? best : cur;
      int64_t end;
      if (!sc_add_i64(sl->offset, sl->bytes, &end)) {
        st = sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "memory plan: arena size overflows");
        goto done;
      }
      if (end > pool_peak[pool]) pool_peak[pool] = end;
      int32_t lo = 0, hi = n_placed; /* the first placed slot after this one */
      while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        const slot *o = &slots[placed[mid]];
        if (o->offset < sl->offset || (o->offset == sl->offset && o->id < sl->id)) lo = mid + 1;
        else hi = mid;
      }
      memmove(placed + lo + 1, placed + lo, (size_t)(n_placed - lo) * sizeof *placed);
      placed[lo] = order[oi];
      n_placed++;
    }
  }
  int64_t peak = pool_peak[0];
  p->host_bytes = pool_peak[1];
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (p->buffers[i].kind == SC_BUF_VIEW) continue;
    p->buffers[i].offset = l.root[i] == i ? slots[slot_of[i]].offset : -1;
  }
  p->arena_bytes = peak;
  p->workspace_offset = 0;
  if (p->workspace_bytes > 0) { /* the device's scratch, above every buffer */
    bool ok = true;
    int64_t ws = align_up(p->workspace_bytes, align, &ok), top = 0;
    if (!ok || !sc_add_i64(peak, ws, &top)) {
      st = sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "memory plan: arena size overflows");
      goto done;
    }
    p->workspace_offset = peak;
    p->arena_bytes = top;
  }
done:
  life_free(&l);
  sc_free(parent);
  sc_free(donated);
  sc_free(slots);
  sc_free(slot_of);
  sc_free(order);
  sc_free(placed);
  return st;
}

static const char *bname(const sc_program *p, int32_t b) {
  return p->buffers[b].name ? p->buffers[b].name : "";
}

static const life *sort_life;
/* By first step, then id. */
static int cmp_first_step(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  if (sort_life->first[a] != sort_life->first[b])
    return sort_life->first[a] < sort_life->first[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

sc_status sc_memplan_verify(const sc_program *p, sc_diag *diag) {
  if (p->arena_align <= 0)
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "memory plan: alignment %lld",
                       (long long)p->arena_align);
  if (p->arena_bytes < 0 || p->host_bytes < 0)
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "memory plan: arena of %lld bytes, host pool of %lld",
                       (long long)p->arena_bytes, (long long)p->host_bytes);
  int64_t ws_end, top = p->arena_bytes; /* where the buffers must end */
  if (p->workspace_bytes < 0 || (p->workspace_bytes > 0 &&
      (p->workspace_offset < 0 || p->workspace_offset % p->arena_align != 0 ||
       !sc_add_i64(p->workspace_offset, p->workspace_bytes, &ws_end) ||
       ws_end > p->arena_bytes)))
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "memory plan: workspace [%lld, +%lld) outside the arena of %lld bytes",
                       (long long)p->workspace_offset, (long long)p->workspace_bytes,
                       (long long)p->arena_bytes);
  if (p->workspace_bytes > 0) top = p->workspace_offset;
  life l;
  sc_status st = compute_life(p, &l, diag);
  if (st != SC_OK) return st;
  int32_t *pair = sc_calloc((size_t)(p->n_buffers ? p->n_buffers : 1), sizeof *pair);
  if (!pair) {
    life_free(&l);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
  }
  for (int32_t i = 0; i < p->n_buffers; i++) pair[i] = -1;
  for (int32_t j = 0; p->updates && j < p->n_outputs && st == SC_OK; j++) {
    int32_t x, o;
    if (p->updates[j] < 0) continue;
    if (!pair_roots(p, &l, j, &x, &o) || pair[x] >= 0 || pair[o] >= 0 ||
        !pair_ordered(p, &l, x, o) || p->buffers[x].offset != p->buffers[o].offset)
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "memory plan: output %d cannot update input %d in place (not an input "
                       "and output of one size and slot, paired twice, or read after it is "
                       "written)",
                       (int)j, (int)p->updates[j]);
    else {
      pair[x] = o;
      pair[o] = x;
    }
  }
  for (int32_t i = 0; i < p->n_buffers && st == SC_OK; i++) {
    const sc_buffer *b = &p->buffers[i];
    if (l.root[i] < 0) continue;
    if (l.root[i] != i) {
      if (b->bytes > p->buffers[l.root[i]].bytes)
        st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "memory plan: view '%s' (b%d, %lld bytes) larger than its storage '%s' "
                         "(b%d, %lld bytes)",
                         bname(p, i), (int)i, (long long)b->bytes, bname(p, l.root[i]),
                         (int)l.root[i], (long long)p->buffers[l.root[i]].bytes);
      continue;
    }
    int64_t end;
    if (sc_program_bound(p, i)) {
      if (b->offset != -1)
        st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "memory plan: bound buffer '%s' (b%d) has an arena slot", bname(p, i),
                         (int)i);
      continue;
    }
    bool host = in_host_pool(b);
    int64_t lim = host ? p->host_bytes : top;
    if (b->offset < 0 || b->offset % p->arena_align != 0 || b->bytes < 0 ||
        !sc_add_i64(b->offset, b->bytes, &end) || end > lim)
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "memory plan: buffer '%s' (b%d) at [%lld, +%lld) is not an aligned slot "
                       "inside the %s's %lld bytes of buffers",
                       bname(p, i), (int)i, (long long)b->offset, (long long)b->bytes,
                       host ? "host pool" : "arena", (long long)lim);
  }
  /* every pair live together, by a sweep over the steps: roots in order of
   * their first step, each compared with those still live (not all pairs:
   * a big step has thousands of buffers, a few hundred live at once) */
  int32_t *ord = sc_malloc(((size_t)p->n_buffers + 1) * sizeof *ord);
  int32_t *act = sc_malloc(((size_t)p->n_buffers + 1) * sizeof *act);
  int32_t n_ord = 0, n_act = 0;
  if (st == SC_OK && (!ord || !act))
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
  for (int32_t i = 0; st == SC_OK && i < p->n_buffers; i++)
    if (l.root[i] == i && p->buffers[i].bytes != 0 && !sc_program_bound(p, i)) ord[n_ord++] = i;
  if (st == SC_OK) {
    sort_life = &l;
    qsort(ord, (size_t)n_ord, sizeof *ord, cmp_first_step);
  }
  for (int32_t oi = 0; oi < n_ord && st == SC_OK; oi++) {
    int32_t cur = ord[oi], k = 0;
    for (int32_t q = 0; q < n_act; q++) /* drop what died before cur is born */
      if (l.last[act[q]] >= l.first[cur]) act[k++] = act[q];
    n_act = k;
    for (int32_t q = 0; q < n_act && st == SC_OK; q++) {
      int32_t i = act[q] < cur ? act[q] : cur, j = act[q] < cur ? cur : act[q];
      const sc_buffer *a = &p->buffers[i], *b = &p->buffers[j];
      bool space = in_host_pool(a) == in_host_pool(b) && a->offset < b->offset + b->bytes &&
                   b->offset < a->offset + a->bytes;
      if (!space) continue;
      /* a legal in-place pair: one dies at the kernel step the other is born */
      if (a->offset == b->offset && a->bytes == b->bytes) {
        if (pair[i] == j) continue; /* a state pair, checked above */
        if (l.last[i] == l.first[j] && (l.last[i] & 1) &&
            inplace_ok(p, &l, SC_STEP_AT(l.last[i]), i, j))
          continue;
        if (l.last[j] == l.first[i] && (l.last[j] & 1) &&
            inplace_ok(p, &l, SC_STEP_AT(l.last[j]), j, i))
          continue;
      }
      st = sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "memory plan: '%s' (b%d, steps %d..%d, bytes [%lld, %lld)) and '%s' (b%d, "
                       "steps %d..%d, bytes [%lld, %lld)) are live together and overlap",
                       bname(p, i), (int)i, (int)SC_STEP_AT(l.first[i]), (int)SC_STEP_AT(l.last[i]),
                       (long long)a->offset, (long long)(a->offset + a->bytes), bname(p, j),
                       (int)j, (int)SC_STEP_AT(l.first[j]), (int)SC_STEP_AT(l.last[j]),
                       (long long)b->offset, (long long)(b->offset + b->bytes));
    }
    act[n_act++] = cur;
  }
  sc_free(ord);
  sc_free(act);
  life_free(&l);
  sc_free(pair);
  return st;
}

static const sc_program *sort_prog;
/* By offset, then first step (then id). */
static int cmp_slot_first(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  int64_t oa = sort_prog->buffers[a].offset, ob = sort_prog->buffers[b].offset;
  if (oa != ob) return oa < ob ? -1 : 1;
  if (sort_life->first[a] != sort_life->first[b])
    return sort_life->first[a] < sort_life->first[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

sc_status sc_memplan_lifetimes(const sc_program *p, int32_t *first, int32_t *last,
                               sc_diag *diag) {
  life l;
  sc_status st = compute_life(p, &l, diag);
  if (st != SC_OK) return st;
  for (int32_t i = 0; i < p->n_buffers; i++) {
    bool root = l.root[i] == i;
    first[i] = root ? SC_STEP_AT(l.first[i]) : -1;
    last[i] = root ? SC_STEP_AT(l.last[i]) : -1;
  }
  life_free(&l);
  return SC_OK;
}

/* With unoffload, each offloaded value (a COPY of root X to a HOST buffer
 * H, and one of H to root R) counts as X live from X's first step to R's
 * last: the liveness it had without the copies. */
static sc_status peak_of(const sc_program *p, bool unoffload, int32_t *step, int64_t *bytes,
                         bool *live, sc_diag *diag) {
  life l;
  sc_status st = compute_life(p, &l, diag);
  if (st != SC_OK) return st;
  for (int32_t s = 0; unoffload && s < p->n_steps; s++) {
    const sc_step *out = &p->steps[s];
    if (out->kind != SC_STEP_COPY || !in_host_pool(&p->buffers[out->copy.dst])) continue;
    int32_t x = l.root[out->copy.src];
    for (int32_t t = s + 1; x >= 0 && t < p->n_steps; t++) {
      const sc_step *in = &p->steps[t];
      if (in->kind != SC_STEP_COPY || in->copy.src != out->copy.dst) continue;
      int32_t r = l.root[in->copy.dst];
      if (r >= 0 && r != x) {
        if (l.last[r] > l.last[x]) l.last[x] = l.last[r];
        l.root[r] = -1;
      }
      break;
    }
  }
  int64_t align = p->arena_align > 0 ? p->arena_align : 64;
  int64_t *delta = sc_calloc((size_t)SC_TIME_END(p) + 2, sizeof *delta);
  if (!delta) {
    life_free(&l);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
  }
  for (int32_t j = 0; p->updates && j < p->n_outputs; j++) { /* a pair: one slot, always */
    int32_t x, o;
    if (!pair_roots(p, &l, j, &x, &o)) continue;
    l.first[x] = 0;
    l.last[x] = SC_TIME_END(p);
    l.root[o] = -1;
  }
  for (int32_t i = 0; i < p->n_buffers; i++) /* the caller's storage, the host pool */
    if (l.root[i] == i && (sc_program_bound(p, i) || in_host_pool(&p->buffers[i])))
      l.root[i] = -1;
  /* an in-place successor (same slot, born at the step its donor is last
   * read) holds the donor's bytes from that step on: the donor counts up
   * to the step before */
  int32_t *ord = sc_calloc((size_t)p->n_buffers + 1, sizeof *ord), n_ord = 0;
  if (!ord) {
    sc_free(delta);
    life_free(&l);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "memory plan: out of memory");
  }
  for (int32_t i = 0; i < p->n_buffers; i++)
    if (l.root[i] == i && p->buffers[i].offset >= 0) ord[n_ord++] = i;
  sort_life = &l;
  sort_prog = p;
  qsort(ord, (size_t)n_ord, sizeof *ord, cmp_slot_first);
  for (int32_t k = 0; k + 1 < n_ord; k++) {
    int32_t a = ord[k], b = ord[k + 1];
    if (p->buffers[a].offset == p->buffers[b].offset &&
        p->buffers[a].bytes == p->buffers[b].bytes && l.last[a] == l.first[b] &&
        l.first[a] < l.first[b])
      l.last[a]--; /* >= first[a] */
  }
  sc_free(ord);
  for (int32_t i = 0; i < p->n_buffers; i++) {
    if (l.root[i] != i) continue;
    int64_t b = (p->buffers[i].bytes + align - 1) / align * align;
    delta[l.first[i]] += b;
    delta[l.last[i] + 1] -= b;
  }
  int64_t cur = 0, best = -1;
  int32_t at = 0;
  for (int32_t t = 0; t <= SC_TIME_END(p); t++) {
    cur += delta[t];
    if (cur > best) {
      best = cur;
      at = t;
    }
  }
  for (int32_t i = 0; live && i < p->n_buffers; i++)
    live[i] = l.root[i] == i && l.first[i] <= at && at <= l.last[i];
  *step = SC_STEP_AT(at);
  *bytes = best > 0 ? best : 0;
  sc_free(delta);
  life_free(&l);
  return SC_OK;
}

sc_status sc_memplan_peak(const sc_program *p, int32_t *step, int64_t *bytes, bool *live,
                          sc_diag *diag) {
  return peak_of(p, false, step, bytes, live, diag);
}

sc_status sc_memplan_peak_unoffloaded(const sc_program *p, int64_t *bytes, sc_diag *diag) {
  int32_t step;
  return peak_of(p, true, &step, bytes, NULL, diag);
}
