/* overlap.c — collectives overlapped with compute (codegen/program.h,
 * sc_program_overlap; docs/codegen.md "Asynchronous collectives").
 *
 * The step list comes out of lowering with every collective where the
 * graph's order put it, run to completion before the next step.
 * sc_program_pair_shifts first makes each hop of a ring (a shifted SEND
 * and its RECV, context parallelism's K/V transfer) one SEND_RECV step,
 * an exchange every rank of the group issues alike, as a collective. This
 * pass then rewrites the list in these moves, on storage roots (a VIEW is its root; an
 * output "new:X" updated in place is X's root, since the memory plan will
 * give both one slot):
 *
 *   0. hoist: a SEND_RECV moves up to just before the first step that
 *      reads what it sends, past the steps that do not depend on it, up
 *      to the nearest other collective. A ring's hop of step i + 1 sends
 *      the K/V block that step i's attention blocks read, so it now starts
 *      before them and its WAIT (move 3) comes after them, where the next
 *      blocks read what it received (Megatron's ring: the block's transfer
 *      hides behind the block's compute); a backward hop carrying dK/dV
 *      starts right after the blocks that computed them and is waited for
 *      at the accumulation after the next blocks;
 *   1. prefetch: an all-gather that can legally run earlier (nothing
 *      between writes what it reads or touches what it writes) moves up to
 *      just before the step that first needs the previous all-gather's
 *      result, together with the kernels that pack its input when they
 *      feed nothing else (bucket.c's copy-in: one Concat kernel, or one
 *      copy kernel per member). For ZeRO-3 that is
 *      FSDP's prefetch: block k+1's parameters are gathered while block k
 *      computes, in the forward and in the backward;
 *   2. defer: a computation step right after a collective that reads its
 *      result (a gradient's cast or copy-out after its data-parallel
 *      all-reduce) moves down past the steps that do not depend on it, up
 *      to the first that does or the second collective after this one
 *      (where move 4's bound would wait for this one anyway), when that
 *      passes at least one computation step: the collective then runs
 *      while they compute (DDP's and Megatron's --overlap-grad-reduce:
 *      the backward goes on while a gradient is reduced);
 *   3. waits: a collective whose result the very next step does not need
 *      becomes an async start, and a WAIT goes just before the first step
 *      that touches its output or scratch, or writes its input;
 *   4. a bound: at most two collectives in flight; starting a third first
 *      waits for the oldest (so a reduce-scatter's full gradient still dies
 *      one block later, ZeRO-2's memory, not at the optimizer). A ring's
 *      exchanges do not count: each carries one K, V, dK or dV block, and
 *      a hop waits for the previous hop of its block, so a ring keeps at
 *      most four in flight (counted, the backward's dK/dV hops would wait
 *      for the K/V hops of the next step, or these for those, serialising
 *      one of them beyond cp = 2).
 *
 * Collectives keep their relative order except for the moved gathers and
 * exchanges, and the rewrite depends on the program alone: every rank
 * running the same program issues the same collectives in the same order.
 * On a communicator whose sends are buffered (local, tcp, MPI's Isend) an
 * exchange is the send, then the receive: every rank's send of a hop is
 * issued before any rank waits for that hop's receive, so a started ring
 * cannot deadlock; NCCL groups the two. A pipeline's SEND and RECV steps
 * (no shift) stay synchronous. */
#include <string.h>

#include "codegen/program.h"

typedef struct touch {
  int32_t root;   /* a storage root a step touches */
  bool wr;        /* written */
} touch;

typedef struct touches {
  int32_t *off;   /* [n_steps + 1] into tch */
  touch *tch;
  int32_t n, cap, n_buffers;
  int32_t *alias; /* [n_buffers]: the root a buffer's storage is */
  int32_t *users; /* [n_buffers]: how many steps touch each root */
  bool bad;
} touches;

static void add_touch(void *ud, int32_t b, bool written) {
  touches *t = ud;
  if (t->bad) return;
  if (t->n == t->cap) {
    int32_t nc = t->cap ? 2 * t->cap : 256;
    touch *x = sc_realloc(t->tch, (size_t)nc * sizeof *x);
    if (!x) {
      t->bad = true;
      return;
    }
    t->tch = x;
    t->cap = nc;
  }
  t->tch[t->n++] = (touch){b >= 0 && b < t->n_buffers ? t->alias[b] : -1, written};
}

/* A step every rank of its group issues alike, which may run async: a
 * collective or a ring's exchange (a pipeline's SEND and RECV are not). */
static bool is_collective(const sc_step *s) {
  return s->kind == SC_STEP_COMM && s->comm.kind != SC_COMM_SEND && s->comm.kind != SC_COMM_RECV;
}

static bool is_exchange(const sc_step *s) {
  return s->kind == SC_STEP_COMM && s->comm.kind == SC_COMM_SEND_RECV;
}

/* Whether step y must stay on its side of step x: one writes what the
 * other touches. */
static bool depends(const touches *t, int32_t x, int32_t y) {
  for (int32_t i = t->off[x]; i < t->off[x + 1]; i++)
    for (int32_t j = t->off[y]; j < t->off[y + 1]; j++)
      if (t->tch[i].root == t->tch[j].root && (t->tch[i].wr || t->tch[j].wr)) return true;
  return false;
}

/* Whether y must wait for the collective c: y touches c's output or
 * scratch, or writes its input. */
static bool needs(const sc_program *p, const touches *t, int32_t c, int32_t y) {
  const sc_comm_step *cs = &p->steps[c].comm;
  int32_t in = cs->in >= 0 ? t->alias[cs->in] : -1;
  int32_t own[3] = {cs->out >= 0 ? t->alias[cs->out] : -1,
                    cs->pack >= 0 ? t->alias[cs->pack] : -1,
                    cs->unpack >= 0 ? t->alias[cs->unpack] : -1};
  for (int32_t j = t->off[y]; j < t->off[y + 1]; j++) {
    int32_t r = t->tch[j].root;
    if (r == own[0] || r == own[1] || r == own[2] || (t->tch[j].wr && r == in)) return true;
  }
  return false;
}

/* The last step before position `pos` of ord that writes c's input, or -1. */
static int32_t producer_pos(const sc_program *p, const touches *t, const int32_t *ord,
                            int32_t pos) {
  int32_t c = ord[pos], in = p->steps[c].comm.in;
  if (in < 0) return -1;
  int32_t r = t->alias[in];
  for (int32_t k = pos - 1; k >= 0; k--)
    for (int32_t j = t->off[ord[k]]; j < t->off[ord[k] + 1]; j++)
      if (t->tch[j].root == r && t->tch[j].wr) return k;
  return -1;
}

/* The one storage root kernel step w writes, or -1 (not a kernel, or it
 * writes several). */
static int32_t writes_one(const sc_program *p, const touches *t, int32_t w) {
  if (p->steps[w].kind != SC_STEP_KERNEL) return -1;
  int32_t written = -1;
  for (int32_t i = t->off[w]; i < t->off[w + 1]; i++) {
    if (!t->tch[i].wr) continue;
    if (written >= 0 && t->tch[i].root != written) return -1;
    written = t->tch[i].root;
  }
  return written;
}

/* bucket.c's copy-in ending at position w of ord: the run of kernels at
 * w, w-1, ... that each write one same buffer, which nothing but them and
 * the collective reading it touches (a Concat is one kernel, or one copy
 * kernel per member: codegen/lower.h, sc_lower_kind_of). The run's first
 * position, or -1. */
static int32_t copy_in(const sc_program *p, const touches *t, const int32_t *ord, int32_t w) {
  int32_t r = writes_one(p, t, ord[w]), first = w;
  if (r < 0) return -1;
  while (first > 0 && writes_one(p, t, ord[first - 1]) == r) first--;
  return t->users[r] == w - first + 2 ? first : -1;
}

static void reverse(int32_t *a, int32_t lo, int32_t hi) { /* [lo, hi) */
  for (hi--; lo < hi; lo++, hi--) {
    int32_t x = a[lo];
    a[lo] = a[hi];
    a[hi] = x;
  }
}

/* Moves ord[from..to] (inclusive, a group that stays together) to just
 * before position `at` < from, when no step in between depends on them. */
static bool try_move(const touches *t, int32_t *ord, int32_t at, int32_t from, int32_t to) {
  for (int32_t g = from; g <= to; g++)
    for (int32_t k = at; k < from; k++)
      if (depends(t, ord[g], ord[k])) return false;
  /* rotate ord[at..to] so that ord[from..to] comes first */
  reverse(ord, at, from);
  reverse(ord, from, to + 1);
  reverse(ord, at, to + 1);
  return true;
}

/* Move 1 (file comment): returns how many gathers moved. seen: [n_steps]
 * zeroed, each gather is considered once (moves only go up). */
static int32_t prefetch(const sc_program *p, const touches *t, int32_t *ord, bool *seen) {
  int32_t n = p->n_steps, moved = 0, prev = -1; /* prev: position of the last gather */
  for (int32_t pos = 0; pos < n; pos++) {
    const sc_step *s = &p->steps[ord[pos]];
    if (!(s->kind == SC_STEP_COMM && s->comm.kind == SC_COMM_ALL_GATHER) || seen[ord[pos]])
      continue;
    seen[ord[pos]] = true;
    int32_t target = -1;
    if (prev >= 0)
      for (int32_t k = prev + 1; k < pos && target < 0; k++)
        if (needs(p, t, ord[prev], ord[k])) target = k;
    int32_t from = pos, w = producer_pos(p, t, ord, pos);
    int32_t first = w >= 0 ? copy_in(p, t, ord, w) : -1;
    if (first >= 0) {
      if (w != pos - 1) {
        /* bring the copy-in next to its gather first (nothing between
         * depends on the gather, or the gather could not run there) */
        if (!try_move(t, ord, w + 1, pos, pos)) {
          prev = pos;
          continue;
        }
        pos = w + 1;
      }
      from = first;
    }
    if (target >= 0 && target < from && try_move(t, ord, target, from, pos)) {
      moved++;
      pos = target + (pos - from);
    }
    prev = pos;
  }
  return moved;
}

/* Move 2 (file comment). */
static void defer(const sc_program *p, const touches *t, int32_t *ord) {
  int32_t n = p->n_steps;
  for (int32_t pos = 0; pos + 2 < n; pos++) {
    int32_t c = ord[pos], y = ord[pos + 1];
    if (!is_collective(&p->steps[c]) || p->steps[y].kind == SC_STEP_COMM ||
        p->steps[y].kind == SC_STEP_WAIT || !needs(p, t, c, y))
      continue;
    int32_t to = pos + 1, collectives = 0, computed = 0;
    for (int32_t k = pos + 2; k < n; k++) {
      const sc_step *s = &p->steps[ord[k]];
      if ((is_collective(s) && ++collectives == 2) || depends(t, y, ord[k])) break;
      computed += s->kind != SC_STEP_COMM;
      to = k;
    }
    if (computed == 0) continue;
    memmove(ord + pos + 1, ord + pos + 2, (size_t)(to - pos - 1) * sizeof *ord);
    ord[to] = y;
  }
}

/* Whether step y reads storage root r. */
static bool reads_root(const touches *t, int32_t y, int32_t r) {
  for (int32_t j = t->off[y]; j < t->off[y + 1]; j++)
    if (t->tch[j].root == r && !t->tch[j].wr) return true;
  return false;
}

/* Whether step y touches storage root r. */
static bool touches_root(const touches *t, int32_t y, int32_t r) {
  for (int32_t j = t->off[y]; j < t->off[y + 1]; j++)
    if (t->tch[j].root == r) return true;
  return false;
}

/* Move 0 (file comment): each SEND_RECV moves up to just before the
 * first step that reads what it sends, among the steps above it that do
 * not depend on it, up to the nearest other collective (a ring's hop of
 * step i + 1 then starts before step i's attention blocks). */
static void hoist(const sc_program *p, const touches *t, int32_t *ord) {
  for (int32_t pos = 0; pos < p->n_steps; pos++) {
    const sc_step *s = &p->steps[ord[pos]];
    if (!is_exchange(s)) continue;
    int32_t in = t->alias[s->comm.in], top = -1;
    for (int32_t k = pos - 1; k >= 0; k--) {
      const sc_step *y = &p->steps[ord[k]];
      if ((y->kind == SC_STEP_COMM && !is_exchange(y)) || depends(t, ord[pos], ord[k])) break;
      if (reads_root(t, ord[k], in)) top = k;
    }
    if (top >= 0) try_move(t, ord, top, pos, pos);
  }
}

/* t for p's steps (file comment: storage roots). */
static sc_status touches_build(const sc_program *p, touches *t, sc_diag *diag) {
  int32_t n = p->n_steps;
  *t = (touches){.n_buffers = p->n_buffers};
  t->alias = sc_malloc((size_t)p->n_buffers * sizeof *t->alias + 1);
  t->users = sc_calloc((size_t)p->n_buffers + 1, sizeof *t->users);
  int32_t *seen_b = sc_malloc(((size_t)p->n_buffers + 1) * sizeof *seen_b);
  t->off = sc_malloc(((size_t)n + 1) * sizeof *t->off);
  sc_status st = SC_OK;
  if (!t->alias || !t->users || !seen_b || !t->off) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "overlap: out of memory");
    goto done;
  }
  for (int32_t b = 0; b < p->n_buffers; b++) {
    int32_t r = sc_program_root(p, b);
    t->alias[b] = r >= 0 && r < p->n_buffers ? r : -1;
    seen_b[b] = -1;
  }
  for (int32_t j = 0; j < p->n_outputs; j++) { /* new:X shares X's slot */
    int32_t u = sc_program_updates(p, j);
    if (u < 0) continue;
    int32_t from = t->alias[p->outputs[j]], to = t->alias[p->inputs[u]];
    if (from < 0 || to < 0) continue;
    for (int32_t b = 0; b < p->n_buffers; b++)
      if (t->alias[b] == from) t->alias[b] = to;
  }
  for (int32_t i = 0; i < n; i++) {
    t->off[i] = t->n;
    sc_step_buffers(p, &p->steps[i], add_touch, t);
    for (int32_t j = t->off[i]; j < t->n && !t->bad; j++)
      if (t->tch[j].root < 0) {
        st = sc_diag_set(diag, SC_ERR_INVALID, p->steps[i].origin, NULL,
                         "overlap: step %d uses a buffer that does not exist", (int)i);
        goto done;
      }
    if (t->bad) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "overlap: out of memory");
      goto done;
    }
    for (int32_t j = t->off[i]; j < t->n; j++)
      if (seen_b[t->tch[j].root] != i) {
        seen_b[t->tch[j].root] = i;
        t->users[t->tch[j].root]++;
      }
  }
  t->off[n] = t->n;
done:
  sc_free(seen_b);
  return st;
}

static void touches_free(touches *t) {
  sc_free(t->alias);
  sc_free(t->users);
  sc_free(t->off);
  sc_free(t->tch);
}

sc_status sc_program_overlap(sc_program *p, int32_t *n_async, int32_t *n_prefetched,
                             sc_diag *diag) {
  if (n_async) *n_async = 0;
  if (n_prefetched) *n_prefetched = 0;
  int32_t n = p->n_steps, n_coll = 0;
  for (int32_t i = 0; i < n; i++) {
    if (p->steps[i].kind == SC_STEP_WAIT) return SC_OK; /* already overlapped */
    n_coll += is_collective(&p->steps[i]);
  }
  if (n_coll == 0) return SC_OK;
  touches t;
  sc_status st = touches_build(p, &t, diag);
  int32_t *ord = sc_malloc((size_t)n * sizeof *ord);
  int32_t *newpos = sc_malloc((size_t)n * sizeof *newpos);
  int32_t *pend = sc_malloc((size_t)n * sizeof *pend); /* started, not yet waited for */
  bool *seen = sc_malloc((size_t)n + 1);
  sc_step *out = sc_arena_array(&p->arena, (size_t)2 * (size_t)n, sizeof *out);
  if (st != SC_OK) goto done;
  if (!ord || !newpos || !pend || !seen || !out) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "overlap: out of memory");
    goto done;
  }
  for (int32_t i = 0; i < n; i++) ord[i] = i;

  memset(seen, 0, (size_t)n * sizeof *seen);
  int32_t moved = prefetch(p, &t, ord, seen), made_async = 0;
  hoist(p, &t, ord);
  defer(p, &t, ord);

  /* Moves 3 and 4: emit in `ord`, with starts and waits. */
  int32_t m = 0, n_pend = 0, n_bounded = 0; /* bounded: in flight but exchanges */
  for (int32_t pos = 0; pos <= n; pos++) {
    int32_t x = pos < n ? ord[pos] : -1;
    bool starting = x >= 0 && is_collective(&p->steps[x]);
    bool bound = starting && !is_exchange(&p->steps[x]) && n_bounded == 2;
    for (int32_t q = 0; q < n_pend;) { /* oldest first */
      bool ex = is_exchange(&p->steps[pend[q]]);
      bool wait = x < 0 || needs(p, &t, pend[q], x) || (bound && !ex);
      if (!wait) {
        q++;
        continue;
      }
      if (!ex) {
        n_bounded--;
        bound = false;
      }
      sc_step w = {.kind = SC_STEP_WAIT, .kernel = -1, .started = newpos[pend[q]],
                   .origin = p->steps[pend[q]].origin};
      out[m++] = w;
      memmove(pend + q, pend + q + 1, (size_t)(n_pend - q - 1) * sizeof *pend);
      n_pend--;
    }
    if (x < 0) break;
    newpos[x] = m;
    out[m] = p->steps[x];
    if (starting && pos + 1 < n && !needs(p, &t, x, ord[pos + 1])) {
      out[m].comm.async = true;
      pend[n_pend++] = x;
      n_bounded += !is_exchange(&p->steps[x]);
      made_async++;
    }
    m++;
  }
  p->steps = out;
  p->n_steps = p->cap_steps = m;
  if (n_async) *n_async = made_async;
  if (n_prefetched) *n_prefetched = moved;
done:
  touches_free(&t);
  sc_free(seen);
  sc_free(ord);
  sc_free(newpos);
  sc_free(pend);
  return st;
}

/* Whether step k is a shifted RECV that SEND step `send` pairs with. */
static bool matches(const sc_program *p, const sc_comm_step *send, int32_t k) {
  const sc_step *y = &p->steps[k];
  const sc_comm_step *c = &y->comm;
  return y->kind == SC_STEP_COMM && c->kind == SC_COMM_RECV && c->shift == send->shift &&
         c->axes == send->axes && c->group_size == send->group_size && c->tag == send->tag;
}

/* Whether SEND step i and RECV step j can run as one step at the earlier
 * of the two: nothing between touches what the receive writes, nor (the
 * receive first) writes what the send reads. */
static bool pair_legal(const sc_program *p, const touches *t, int32_t i, int32_t j) {
  const sc_comm_step *s = &p->steps[i].comm, *r = &p->steps[j].comm;
  if (s->count != r->count || s->pack >= 0 || r->unpack >= 0 ||
      p->buffers[s->in].dtype != p->buffers[r->out].dtype)
    return false;
  int32_t in = t->alias[s->in], out = t->alias[r->out];
  if (in == out) return false;
  int32_t lo = i < j ? i : j, hi = i < j ? j : i;
  for (int32_t k = lo + 1; k < hi; k++) {
    if (touches_root(t, k, out)) return false;
    if (j < i)
      for (int32_t x = t->off[k]; x < t->off[k + 1]; x++)
        if (t->tch[x].root == in && t->tch[x].wr) return false;
  }
  return true;
}

sc_status sc_program_pair_shifts(sc_program *p, int32_t *n_pairs, sc_diag *diag) {
  if (n_pairs) *n_pairs = 0;
  int32_t n = p->n_steps, n_send = 0;
  for (int32_t i = 0; i < n; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind == SC_STEP_WAIT) return SC_OK; /* already overlapped */
    n_send += s->kind == SC_STEP_COMM && s->comm.kind == SC_COMM_SEND && s->comm.shift != 0;
  }
  if (n_send == 0) return SC_OK;
  touches t;
  sc_status st = touches_build(p, &t, diag);
  bool *taken = sc_calloc((size_t)n + 1, sizeof *taken);
  if (st == SC_OK && !taken)
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "overlap: out of memory");
  int32_t pairs = 0;
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    sc_step *s = &p->steps[i];
    if (taken[i] || s->kind != SC_STEP_COMM || s->comm.kind != SC_COMM_SEND || !s->comm.shift)
      continue;
    int32_t j = 0; /* the first RECV not yet taken: the k-th SEND meets the k-th RECV */
    while (j < n && (taken[j] || !matches(p, &s->comm, j))) j++;
    if (j == n) continue;
    taken[j] = true; /* paired or not, the next SEND's RECV is a later one */
    if (!pair_legal(p, &t, i, j)) continue;
    sc_step x = *s;
    x.comm.kind = SC_COMM_SEND_RECV;
    x.comm.out = p->steps[j].comm.out;
    p->steps[i < j ? i : j] = x;
    p->steps[i < j ? j : i].kind = SC_STEP_KIND_COUNT; /* gone */
    pairs++;
  }
  if (st == SC_OK) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
      if (p->steps[i].kind != SC_STEP_KIND_COUNT) p->steps[m++] = p->steps[i];
    p->n_steps = m;
    if (n_pairs) *n_pairs = pairs;
  }
  touches_free(&t);
  sc_free(taken);
  return st;
}
