/* pipe_schedule.c — pipeline schedules as action lists, and the deadlock
 * check (pipe_schedule.h). */
#include "codegen/pipe_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

typedef struct list {
  sc_pipe_action *a;
  int32_t n, cap;
} list;

static bool push(list *l, sc_pipe_phase ph, int32_t chunk, int32_t mb) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? 2 * l->cap : 64;
    sc_pipe_action *a = sc_realloc(l->a, (size_t)cap * sizeof *a);
    if (!a) return false;
    l->a = a;
    l->cap = cap;
  }
  l->a[l->n++] = (sc_pipe_action){.phase = (int8_t)ph, .chunk = chunk, .mb = mb};
  return true;
}

/* Megatron's interleaved order: the k-th forward (backward: forward=false)
 * of rank r. */
static void interleaved_at(int32_t P, int32_t V, int32_t r, int32_t k, bool forward,
                           int32_t *chunk, int32_t *mb) {
  int32_t v = (k / P) % V;
  if (!forward) v = V - 1 - v;
  *chunk = v * P + r;
  *mb = (k / (P * V)) * P + k % P;
}

sc_status sc_pipe_schedule(sc_schedule_kind kind, int32_t P, int32_t V, int32_t M, int32_t r,
                           sc_pipe_action **out, int32_t *n, sc_diag *d) {
  *out = NULL;
  *n = 0;
  if (P < 1 || V < 1 || M < 1 || r < 0 || r >= P)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "schedule: %d pipeline ranks, %d virtual stages, %d microbatches, rank %d",
                       (int)P, (int)V, (int)M, (int)r);
  if (kind == SC_SCHEDULE_ZB_H1 && V > 1)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the zb-h1 schedule has one chunk per rank (no virtual stages)");
  if ((kind == SC_SCHEDULE_INTERLEAVED) != (V > 1))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       kind == SC_SCHEDULE_INTERLEAVED
                           ? "the interleaved schedule needs 2 or more virtual stages"
                           : "%d virtual stages need the interleaved schedule",
                       (int)V);
  if (kind == SC_SCHEDULE_INTERLEAVED && M % P != 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the interleaved schedule runs microbatches in groups of the pipeline "
                       "size: %d microbatches are not a multiple of %d",
                       (int)M, (int)P);
  list l = {0};
  bool ok = true;
  /* weight pieces: right after their backward, or (ZB-H1) the rank's r
   * oldest held back, W of microbatch m after B of m + r, and the rest after
   * its last backward. With equal piece times the last rank then runs
   * without a gap from its first forward (the W it holds fill the waits for
   * forwards of the steady state) and ends on P W pieces; rank r's last
   * backward comes P-1-r B pieces after the last rank's and is followed by
   * r+1 W pieces, so every rank ends at M(F+B+W) + (P-1)(F+B-W) (B >= W;
   * Qi et al., Zero Bubble Pipeline Parallelism, ZB-H1), where 1F1B's rank 0
   * ends at M(F+B+W) + (P-1)(F+B). Holding more W back on the first ranks
   * (the cool-down's idle time is there) makes rank 0's last W pieces wait
   * for its last B and ends the step later. */
  int32_t hold = kind == SC_SCHEDULE_ZB_H1 ? r : 0, *held = NULL, n_held = 0;
  if (hold > 0 && !(held = sc_malloc((size_t)M * sizeof *held))) return nomem(d);
  for (int32_t v = 0; ok && v < V; v++) ok = push(&l, SC_PIPE_PREPARE, v * P + r, -1);
  if (ok && kind == SC_SCHEDULE_GPIPE) {
    for (int32_t m = 0; ok && m < M; m++) ok = push(&l, SC_PIPE_FORWARD, r, m);
    for (int32_t m = 0; ok && m < M; m++)
      ok = push(&l, SC_PIPE_BACKWARD, r, m) && push(&l, SC_PIPE_WEIGHT, r, m);
  } else if (ok) {
    int32_t total = M * V;
    int32_t warm = kind != SC_SCHEDULE_INTERLEAVED ? P - r - 1 : (P - r - 1) * 2 + (V - 1) * P;
    if (warm > total) warm = total;
    int32_t f = 0, b = 0, chunk, mb;
    for (; ok && f < warm; f++) {
      interleaved_at(P, V, r, f, true, &chunk, &mb);
      ok = push(&l, SC_PIPE_FORWARD, chunk, mb);
    }
    for (; ok && b < total; f++) { /* one forward (while any is left), one backward */
      if (f < total) {
        interleaved_at(P, V, r, f, true, &chunk, &mb);
        if (!(ok = push(&l, SC_PIPE_FORWARD, chunk, mb))) break;
      }
      interleaved_at(P, V, r, b++, false, &chunk, &mb);
      ok = push(&l, SC_PIPE_BACKWARD, chunk, mb);
      if (ok && hold > 0) { /* V == 1 here: the chunk is r */
        held[n_held++] = mb;
        if (n_held > hold) {
          ok = push(&l, SC_PIPE_WEIGHT, r, held[0]);
          memmove(held, held + 1, (size_t)--n_held * sizeof *held);
        }
      } else if (ok) {
        ok = push(&l, SC_PIPE_WEIGHT, chunk, mb);
      }
    }
    for (int32_t k = 0; ok && k < n_held; k++) ok = push(&l, SC_PIPE_WEIGHT, r, held[k]);
  }
  sc_free(held);
  for (int32_t v = 0; ok && v < V; v++) ok = push(&l, SC_PIPE_NORM, v * P + r, -1);
  for (int32_t v = 0; ok && v < V; v++) ok = push(&l, SC_PIPE_UPDATE, v * P + r, -1);
  if (!ok) {
    sc_free(l.a);
    return nomem(d);
  }
  *out = l.a;
  *n = l.n;
  return SC_OK;
}

int32_t sc_pipe_peak_stash(const sc_pipe_action *a, int32_t n) {
  int32_t live = 0, peak = 0;
  for (int32_t i = 0; i < n; i++) {
    if (a[i].phase == SC_PIPE_FORWARD && ++live > peak) peak = live;
    if (a[i].phase == SC_PIPE_BACKWARD) live--;
  }
  return peak;
}

const char *sc_pipe_action_name(const sc_pipe_action *a, char *buf, size_t size) {
  static const char letter[] = "PFBWNU";
  int ph = a->phase >= 0 && a->phase < SC_PIPE_PHASES ? a->phase : 0;
  if (a->mb >= 0) snprintf(buf, size, "%c%d.%d", letter[ph], (int)a->chunk, (int)a->mb);
  else snprintf(buf, size, "%c%d", letter[ph], (int)a->chunk);
  return buf;
}

void sc_pipe_deps_free(sc_pipe_deps *x) {
  for (int32_t s = 0; x->deps && s < x->n_pieces; s++) sc_free(x->deps[s]);
  sc_free(x->deps);
  sc_free(x->n_deps);
  memset(x, 0, sizeof *x);
}

static sc_status deps_alloc(sc_pipe_deps *x, int32_t n, sc_diag *d) {
  memset(x, 0, sizeof *x);
  x->n_pieces = n;
  x->n_deps = sc_calloc((size_t)n + 1, sizeof *x->n_deps);
  x->deps = sc_calloc((size_t)n + 1, sizeof *x->deps);
  for (int32_t s = 0; x->deps && s < n; s++)
    if (!(x->deps[s] = sc_calloc((size_t)n + 1, sizeof **x->deps))) break;
  if (!x->n_deps || !x->deps || (n > 0 && !x->deps[n - 1])) {
    sc_pipe_deps_free(x);
    return nomem(d);
  }
  return SC_OK;
}

static void add_dep(sc_pipe_deps *x, int32_t s, int32_t t) {
  for (int32_t k = 0; k < x->n_deps[s]; k++)
    if (x->deps[s][k] == t) return;
  x->deps[s][x->n_deps[s]++] = t;
}

sc_status sc_pipe_deps_of(const sc_dist_program *dp, sc_pipe_deps *out, sc_diag *d) {
  sc_status st = deps_alloc(out, dp->n_stages, d);
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    for (int32_t i = 0; i < p->n_inputs; i++) {
      int32_t t = sc_dist_handoff_source(dp, s, p->buffers[p->inputs[i]].name, NULL);
      if (t >= 0 && sc_dist_find_input(dp, p->buffers[p->inputs[i]].name) < 0) add_dep(out, s, t);
    }
  }
  return st;
}

sc_status sc_pipe_deps_chain(int32_t C, sc_pipe_deps *out, sc_diag *d) {
  sc_status st = deps_alloc(out, SC_PIPE_PHASES * C, d);
  for (int32_t c = 0; st == SC_OK && c < C; c++) {
    int32_t f = sc_pipe_piece(C, SC_PIPE_FORWARD, c), b = sc_pipe_piece(C, SC_PIPE_BACKWARD, c);
    int32_t w = sc_pipe_piece(C, SC_PIPE_WEIGHT, c);
    int32_t nn = sc_pipe_piece(C, SC_PIPE_NORM, c), u = sc_pipe_piece(C, SC_PIPE_UPDATE, c);
    int32_t pr = sc_pipe_piece(C, SC_PIPE_PREPARE, c);
    add_dep(out, f, pr);
    add_dep(out, b, pr);
    if (c > 0) add_dep(out, f, sc_pipe_piece(C, SC_PIPE_FORWARD, c - 1));
    add_dep(out, b, f);
    if (c + 1 < C) add_dep(out, b, sc_pipe_piece(C, SC_PIPE_BACKWARD, c + 1));
    add_dep(out, w, f);
    add_dep(out, w, b);
    add_dep(out, nn, w);
    add_dep(out, u, nn);
    if (c > 0) add_dep(out, sc_pipe_piece(C, SC_PIPE_UPDATE, 0), nn);
    if (c > 0) add_dep(out, u, sc_pipe_piece(C, SC_PIPE_UPDATE, 0));
  }
  return st;
}

static bool per_mb(int32_t C, int32_t piece) {
  return sc_pipe_per_mb(sc_pipe_piece_phase(C, piece));
}

sc_status sc_pipe_check(const sc_pipe_deps *deps, int32_t P, int32_t V, int32_t M,
                        sc_pipe_action *const *lists, const int32_t *n, sc_diag *d) {
  int32_t C = P * V, pieces = SC_PIPE_PHASES * C;
  if (deps->n_pieces != pieces)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "schedule check: %d pieces, the mesh makes %d", (int)deps->n_pieces,
                       (int)pieces);
  /* done[piece * M + mb] (once-per-step pieces use mb 0); left[piece]: how
   * many of its actions are still to run */
  size_t cells = (size_t)pieces * (size_t)M;
  bool *done = sc_calloc(cells + 1, 1);
  int32_t *left = sc_calloc((size_t)pieces + 1, sizeof *left);
  int32_t *pos = sc_calloc((size_t)P + 1, sizeof *pos);
  sc_status st = done && left && pos ? SC_OK : nomem(d);
  for (int32_t s = 0; s < pieces && st == SC_OK; s++) left[s] = per_mb(C, s) ? M : 1;
  /* every action once, on the rank of its chunk */
  for (int32_t r = 0; st == SC_OK && r < P; r++)
    for (int32_t i = 0; st == SC_OK && i < n[r]; i++) {
      const sc_pipe_action *a = &lists[r][i];
      char name[64];
      if (a->chunk < 0 || a->chunk >= C || a->chunk % P != r || a->phase < 0 ||
          a->phase >= SC_PIPE_PHASES ||
          (per_mb(C, sc_pipe_piece(C, a->phase, a->chunk)) ? a->mb < 0 || a->mb >= M
                                                             : a->mb != -1))
        st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "schedule: rank %d's action %d (%s) is not one of its actions", (int)r,
                         (int)i, sc_pipe_action_name(a, name, sizeof name));
    }
  bool progress = true;
  int32_t finished = 0;
  while (st == SC_OK && progress && finished < P) {
    progress = false;
    finished = 0;
    for (int32_t r = 0; r < P; r++) {
      for (;;) {
        if (pos[r] == n[r]) break;
        const sc_pipe_action *a = &lists[r][pos[r]];
        int32_t s = sc_pipe_piece(C, a->phase, a->chunk), mb = a->mb < 0 ? 0 : a->mb;
        bool ready = true;
        for (int32_t k = 0; ready && k < deps->n_deps[s]; k++) {
          int32_t t = deps->deps[s][k];
          if (per_mb(C, t) && !per_mb(C, s)) ready = left[t] == 0;
          else ready = done[(size_t)t * M + (per_mb(C, t) ? mb : 0)];
        }
        if (!ready) break;
        bool *cell = &done[(size_t)s * M + mb];
        if (*cell) {
          char name[64];
          st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "schedule: %s runs twice",
                           sc_pipe_action_name(a, name, sizeof name));
          break;
        }
        *cell = true;
        left[s]--;
        pos[r]++;
        progress = true;
      }
      if (st != SC_OK) break;
      finished += pos[r] == n[r];
    }
  }
  if (st == SC_OK && finished < P) { /* stuck: name what each rank waits for */
    char msg[1024];
    size_t w = 0;
    for (int32_t r = 0; r < P && w < sizeof msg; r++) {
      if (pos[r] == n[r]) continue;
      char name[64];
      int k = snprintf(msg + w, sizeof msg - w, "%s rank %d waits in %s", w ? ";" : "", (int)r,
                       sc_pipe_action_name(&lists[r][pos[r]], name, sizeof name));
      if (k > 0) w += (size_t)k;
    }
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "schedule deadlocks:%s", msg);
  }
  for (int32_t s = 0; st == SC_OK && s < pieces; s++)
    if (left[s] != 0)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "schedule: piece %d runs %d times too few", (int)s, (int)left[s]);
  sc_free(done);
  sc_free(left);
  sc_free(pos);
  return st;
}

/* ---- handoffs ---- */

void sc_pipe_handoffs_free(sc_pipe_handoffs *t) {
  for (int32_t h = 0; t->h && h < t->n; h++) {
    sc_free(t->h[h].mb_readers);
    sc_free(t->h[h].step_readers);
  }
  for (int32_t s = 0; t->input_handoff && s < t->n_pieces; s++) sc_free(t->input_handoff[s]);
  sc_free(t->input_handoff);
  sc_free(t->h);
  memset(t, 0, sizeof *t);
}

int32_t sc_pipe_handoff_find(const sc_pipe_handoffs *t, int32_t piece, int32_t out) {
  for (int32_t h = 0; h < t->n; h++)
    if (t->h[h].piece == piece && t->h[h].out == out) return h;
  return -1;
}

static int cmp_name(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int32_t add_handoff(sc_pipe_handoffs *t, const sc_dist_program *dp, int32_t piece,
                           int32_t out, sc_diag *d) {
  int32_t h = sc_pipe_handoff_find(t, piece, out);
  if (h >= 0) return h;
  sc_pipe_handoff *x = sc_realloc(t->h, ((size_t)t->n + 1) * sizeof *x);
  if (!x) return nomem(d), -1;
  t->h = x;
  const sc_program *p = dp->stages[piece].program;
  const sc_buffer *b = &p->buffers[p->outputs[out]];
  x = &t->h[t->n];
  *x = (sc_pipe_handoff){.piece = piece, .out = out, .name = b->name, .dtype = b->dtype,
                         .bytes = b->bytes,
                         .per_mb = per_mb(t->C, piece)};
  const char *const *off = dp->schedule.offload;
  x->offload = x->per_mb && b->name && off &&
               sc_pipe_piece_phase(t->C, piece) == SC_PIPE_FORWARD &&
               bsearch(&b->name, off, (size_t)dp->schedule.n_offload, sizeof *off, cmp_name);
  x->mb_readers = sc_calloc((size_t)t->P, sizeof *x->mb_readers);
  x->step_readers = sc_calloc((size_t)t->P, sizeof *x->step_readers);
  if (!x->mb_readers || !x->step_readers) {
    sc_free(x->mb_readers);
    sc_free(x->step_readers);
    return nomem(d), -1;
  }
  return t->n++;
}

/* Every piece's outputs by name, to find an input's source without
 * scanning the pieces before it (sc_dist_handoff_source's answer: the
 * latest earlier piece with an output of that name, its first such one). */
typedef struct named_out {
  const char *name;
  int32_t piece, out;
} named_out;

static int cmp_named(const void *x, const void *y) {
  const named_out *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  if (c) return c;
  if (a->piece != b->piece) return a->piece > b->piece ? -1 : 1; /* latest first */
  return a->out < b->out ? -1 : a->out > b->out;
}

/* The source of `name` read by piece s: *src -1 when none. */
static void source_of(const named_out *o, size_t n, const char *name, int32_t s, int32_t *src,
                      int32_t *out) {
  size_t lo = 0, hi = n;
  while (lo < hi) { /* the first entry not below name */
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(o[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  *src = -1;
  for (; lo < n && strcmp(o[lo].name, name) == 0; lo++)
    if (o[lo].piece < s) {
      *src = o[lo].piece;
      *out = o[lo].out;
      return;
    }
}

bool sc_pipe_reads_state(const sc_dist_program *dp, int32_t s, int32_t src, const char *name) {
  int32_t C = dp->pipe_chunks, P = dp->pipe_ranks;
  return src >= 0 && src < s && name && strncmp(name, "new:", 4) == 0 && !per_mb(C, s) &&
         per_mb(C, src) && sc_pipe_piece_chunk(C, src) % P == sc_pipe_piece_chunk(C, s) % P &&
         sc_dist_is_state(dp, name + 4);
}

static sc_status handoffs_of(const sc_dist_program *dp, sc_pipe_handoffs *t, const named_out *o,
                             size_t n_o, const char **inputs, int32_t n_in, sc_diag *d) {
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    if (!(t->input_handoff[s] = sc_calloc((size_t)p->n_inputs + 1, sizeof(int32_t))))
      return nomem(d);
    for (int32_t i = 0; i < p->n_inputs; i++) {
      const char *name = p->buffers[p->inputs[i]].name;
      t->input_handoff[s][i] = -1;
      if (name && bsearch(&name, inputs, (size_t)n_in, sizeof *inputs, cmp_name)) continue;
      int32_t j = 0, src = -1;
      if (name) source_of(o, n_o, name, s, &src, &j);
      if (src < 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "piece %d: input '%s' has no source",
                           (int)s, name ? name : "?");
      if (sc_pipe_reads_state(dp, s, src, name)) continue;
      int32_t h = add_handoff(t, dp, src, j, d);
      if (h < 0) return d->status;
      if (!t->h[h].per_mb && per_mb(t->C, s) &&
          sc_pipe_piece_phase(t->C, t->h[h].piece) != SC_PIPE_PREPARE)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "piece %d reads '%s', made once per step, in every microbatch",
                           (int)s, name);
      t->input_handoff[s][i] = h;
      int32_t q = sc_pipe_piece_chunk(t->C, s) % t->P;
      if (t->h[h].per_mb) t->h[h].mb_readers[q] += per_mb(t->C, s);
      /* once per step: a prepare piece's value is read from slot 0 in
       * every microbatch */
      t->h[h].step_readers[q] += t->h[h].per_mb ? !per_mb(t->C, s) : per_mb(t->C, s) ? t->M : 1;
    }
  }
  return SC_OK;
}

sc_status sc_pipe_handoffs_of(const sc_dist_program *dp, sc_pipe_handoffs *t, sc_diag *d) {
  memset(t, 0, sizeof *t);
  t->P = dp->pipe_ranks;
  t->C = dp->pipe_chunks;
  t->M = dp->schedule.microbatches;
  if (t->C < 1 || t->P < 1 || dp->n_stages != SC_PIPE_PHASES * t->C)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "not a pipelined training program");
  size_t n_o = 0;
  for (int32_t s = 0; s < dp->n_stages; s++) n_o += (size_t)dp->stages[s].program->n_outputs;
  named_out *o = sc_malloc((n_o + 1) * sizeof *o);
  const char **inputs = sc_malloc(((size_t)dp->n_inputs + 1) * sizeof *inputs);
  t->n_pieces = dp->n_stages;
  t->input_handoff = sc_calloc((size_t)dp->n_stages, sizeof *t->input_handoff);
  sc_status st = SC_OK;
  if (!o || !inputs || !t->input_handoff) st = nomem(d);
  size_t k = 0;
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    for (int32_t j = 0; j < p->n_outputs; j++) {
      const char *name = p->buffers[p->outputs[j]].name;
      if (name) o[k++] = (named_out){name, s, j};
    }
  }
  int32_t n_in = 0;
  for (int32_t i = 0; st == SC_OK && i < dp->n_inputs; i++)
    if (dp->inputs[i].name) inputs[n_in++] = dp->inputs[i].name;
  if (st == SC_OK) {
    qsort(o, k, sizeof *o, cmp_named);
    qsort(inputs, (size_t)n_in, sizeof *inputs, cmp_name);
    st = handoffs_of(dp, t, o, k, inputs, n_in, d);
  }
  sc_free(o);
  sc_free(inputs);
  if (st != SC_OK) sc_pipe_handoffs_free(t);
  return st;
}

int32_t sc_pipe_handoff_reads(const sc_pipe_handoffs *t, int32_t h, int32_t q, int32_t k) {
  const sc_pipe_handoff *x = &t->h[h];
  if (!x->per_mb) return k == 0 ? x->step_readers[q] : 0;
  return x->mb_readers[q] + (k == t->M - 1 ? x->step_readers[q] : 0);
}

/* The handoff piece s's input j reads (*h, -1 when none) and its cell
 * h * M + the microbatch it reads. */
static size_t input_cell(const sc_pipe_handoffs *t, int32_t s, int32_t j, int32_t mb, int32_t *h) {
  *h = t->input_handoff[s][j];
  if (*h < 0) return 0;
  int32_t k = t->h[*h].per_mb ? (mb >= 0 ? mb : t->M - 1) : 0;
  return (size_t)*h * (size_t)t->M + (size_t)k;
}

bool sc_pipe_handoff_stashed(const sc_pipe_handoffs *t, int32_t h, int32_t q) {
  return t->h[h].per_mb && t->h[h].mb_readers[q] > 0;
}

bool sc_pipe_handoff_offloaded(const sc_pipe_handoffs *t, int32_t h, int32_t q) {
  return t->h[h].offload && sc_pipe_handoff_stashed(t, h, q);
}

sc_status sc_pipe_offload_back(const sc_pipe_handoffs *t, const sc_dist_program *dp, int32_t q,
                               const sc_pipe_action *a, int32_t n, int32_t *out, int32_t *back,
                               sc_diag *d) {
  size_t cells = (size_t)t->n * (size_t)t->M;
  for (size_t c = 0; c < cells; c++) out[c] = back[c] = -1;
  bool any = false;
  for (int32_t h = 0; h < t->n; h++) any |= sc_pipe_handoff_offloaded(t, h, q);
  if (!any) return SC_OK;
  int32_t *first = sc_malloc((cells + 1) * sizeof *first);
  int32_t *group = sc_malloc(((size_t)n + 1) * sizeof *group); /* action -> reload point */
  int32_t *point = sc_malloc(((size_t)n + 1) * sizeof *point); /* reload point -> action */
  bool *in_bwd = sc_calloc(cells + 1, 1); /* a backward reader has run */
  sc_status st = first && group && point && in_bwd ? SC_OK : nomem(d);
  for (size_t c = 0; st == SC_OK && c < cells; c++) first[c] = -1;
  /* out: the last action making or reading the cell before its first
   * backward reader (the forward's last use); first: that reader */
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    int32_t s = sc_pipe_piece(t->C, (sc_pipe_phase)a[i].phase, a[i].chunk), mb = a[i].mb;
    const sc_program *p = dp->stages[s].program;
    bool bwd = a[i].phase != SC_PIPE_FORWARD;
    for (int32_t j = 0; j < p->n_inputs; j++) {
      int32_t h;
      size_t c = input_cell(t, s, j, mb, &h);
      if (h < 0 || in_bwd[c] || !sc_pipe_handoff_offloaded(t, h, q)) continue;
      if (!bwd) out[c] = i;
      else if (out[c] >= 0) {
        in_bwd[c] = true;
        first[c] = i;
      }
    }
    for (int32_t h = 0; mb >= 0 && h < t->n; h++)
      if (t->h[h].piece == s && sc_pipe_handoff_offloaded(t, h, q))
        out[(size_t)h * t->M + mb] = i;
  }
  for (size_t c = 0; st == SC_OK && c < cells; c++)
    if (first[c] < 0) out[c] = -1; /* no backward reads it here */
  /* reload points: the actions that first read an offloaded value, in order */
  int32_t n_groups = 0;
  for (int32_t i = 0; st == SC_OK && i < n; i++) group[i] = -1;
  for (size_t c = 0; st == SC_OK && c < cells; c++)
    if (out[c] >= 0) group[first[c]] = 0;
  for (int32_t i = 0; st == SC_OK && i < n; i++)
    if (group[i] >= 0) {
      group[i] = n_groups;
      point[n_groups++] = i;
    }
  int32_t H = dp->schedule.offload_horizon < 0 ? 0 : dp->schedule.offload_horizon;
  for (size_t c = 0; st == SC_OK && c < cells; c++) {
    if (out[c] < 0) continue;
    int32_t g = group[first[c]];
    /* after reload point g - H has run: beside the actions between it and
     * this one (under 1F1B, H = 1: the forward between two backwards) */
    int32_t at = H == 0 ? first[c] : g >= H ? point[g - H] + 1 : point[0];
    if (at <= out[c]) at = out[c] + 1; /* after its copy out */
    if (at > first[c]) at = first[c];
    back[c] = at;
  }
  sc_free(in_bwd);
  sc_free(first);
  sc_free(group);
  sc_free(point);
  return st;
}

/* Keeps (sign 1) or releases (-1) handoff h's bytes on q: live[0] the
 * stash, live[1] the step's values, live[2] both; peak[] their most. */
static void keep(const sc_pipe_handoffs *t, int32_t h, int32_t q, int sign, int64_t *live,
                 int64_t *peak) {
  int k = !sc_pipe_handoff_stashed(t, h, q);
  if ((live[k] += sign * t->h[h].bytes) > peak[k]) peak[k] = live[k];
  if ((live[2] += sign * t->h[h].bytes) > peak[2]) peak[2] = live[2];
}

/* Cell c (bytes) goes to the host pool. */
static void to_host(sc_pipe_traffic_peaks *pk, uint8_t *host, size_t c, int64_t bytes,
                    int64_t *on_host, int64_t *peak_host) {
  host[c] = 1;
  if ((*on_host += bytes) > *peak_host) *peak_host = *on_host;
  pk->offloaded_values++;
  pk->offloaded_bytes += bytes;
}

sc_status sc_pipe_traffic(const sc_pipe_handoffs *t, const sc_dist_program *dp, int32_t q,
                          const sc_pipe_action *a, int32_t n, bool offload,
                          sc_pipe_traffic_peaks *pk, uint64_t *from, uint64_t *to, sc_diag *d) {
  size_t cells = (size_t)t->n * (size_t)t->M + 1;
  int32_t *left = sc_calloc(cells, sizeof *left);
  int32_t *back = sc_malloc(cells * sizeof *back), *out_at = sc_malloc(cells * sizeof *out_at);
  bool *kept = sc_calloc(cells, 1);
  /* 1 in the host pool, 2 copying back, 3 copying out (still on the device) */
  uint8_t *host = sc_calloc(cells, 1);
  int64_t *pend = sc_malloc(cells * sizeof *pend), n_pend = 0; /* the cells at 3 */
  int64_t live[3] = {0, 0, 0}, peak[3] = {0, 0, 0}, out = 0, on_host = 0, peak_host = 0;
  memset(pk, 0, sizeof *pk);
  sc_status st = left && back && out_at && kept && host && pend ? SC_OK : nomem(d);
  for (size_t c = 0; st == SC_OK && c < cells; c++) back[c] = out_at[c] = -1;
  if (st == SC_OK && offload) st = sc_pipe_offload_back(t, dp, q, a, n, out_at, back, d);
  /* the cells whose copy back starts before action i: a list per action
   * (first_back[i], then next_back), so that a step of 1,024 actions over
   * 10^5 cells (the 1T's pipeline ranks) is not a scan of every cell an
   * action */
  int64_t *first_back = NULL, *next_back = NULL;
  if (st == SC_OK && offload) {
    first_back = sc_malloc(((size_t)n + 1) * sizeof *first_back);
    next_back = sc_malloc(cells * sizeof *next_back);
    if (!first_back || !next_back) st = nomem(d);
    for (int32_t i = 0; st == SC_OK && i <= n; i++) first_back[i] = -1;
    for (size_t c = cells - 1; st == SC_OK && c-- > 0;)
      if (back[c] >= 0 && back[c] < n) {
        next_back[c] = first_back[back[c]];
        first_back[back[c]] = (int64_t)c;
      }
  }
  for (int32_t h = 0; st == SC_OK && h < t->n; h++)
    for (int32_t k = 0; k < t->M; k++)
      left[(size_t)h * t->M + k] = sc_pipe_handoff_reads(t, h, q, k);
  for (int32_t i = 0; st == SC_OK && i < n; i++) {
    int32_t s = sc_pipe_piece(t->C, (sc_pipe_phase)a[i].phase, a[i].chunk), mb = a[i].mb;
    const sc_program *p = dp->stages[s].program;
    /* the copies out started by the action before waited for: off the
     * device (they ran beside that action's hand-offs) */
    for (int64_t k = 0; k < n_pend; k++) {
      host[pend[k]] = 1;
      keep(t, (int32_t)((size_t)pend[k] / (size_t)t->M), q, -1, live, peak);
    }
    n_pend = 0;
    /* offloaded values whose copy back starts before this action: their
     * device slot from now, their host slot until the reader waits */
    for (int64_t c = first_back ? first_back[i] : -1; c >= 0; c = next_back[c])
      if (host[c] == 1) {
        host[c] = 2;
        keep(t, (int32_t)((size_t)c / (size_t)t->M), q, 1, live, peak);
      }
    /* inputs received before the run; copies back waited for */
    for (int32_t j = 0; j < p->n_inputs; j++) {
      int32_t h;
      size_t c = input_cell(t, s, j, mb, &h);
      if (h >= 0 && host[c] == 2) {
        host[c] = 0;
        on_host -= t->h[h].bytes;
      }
      if (h >= 0 && !kept[c]) {
        kept[c] = true;
        keep(t, h, q, 1, live, peak);
        int32_t r = sc_pipe_piece_chunk(t->C, t->h[h].piece) % t->P;
        if (from && r < 64) from[i] |= 1ull << r;
      }
    }
    /* after the run: the last reads release, then outputs are kept */
    for (int32_t j = 0; j < p->n_inputs; j++) {
      int32_t h;
      size_t c = input_cell(t, s, j, mb, &h);
      if (h >= 0 && --left[c] <= 0 && kept[c]) {
        kept[c] = false;
        keep(t, h, q, -1, live, peak);
      }
    }
    /* read here for the last time before the backward: to the host pool */
    for (int32_t j = 0; j < p->n_inputs; j++) {
      int32_t h;
      size_t c = input_cell(t, s, j, mb, &h);
      if (h >= 0 && out_at[c] == i && kept[c] && !host[c]) {
        to_host(pk, host, c, t->h[h].bytes, &on_host, &peak_host);
        host[c] = 3; /* on the device until its copy out is waited for */
        pend[n_pend++] = (int64_t)c;
      }
    }
    for (int32_t h = 0; h < t->n; h++) {
      if (t->h[h].piece != s) continue;
      int32_t k = t->h[h].per_mb ? mb : 0;
      for (int32_t r = 0; r < t->P; r++)
        if (r != q && sc_pipe_handoff_reads(t, h, r, k)) {
          out += t->h[h].bytes;
          if (to && r < 64) to[i] |= 1ull << r;
        }
      size_t c = (size_t)h * t->M + k;
      if (left[c] > 0 && !kept[c]) {
        kept[c] = true;
        if (out_at[c] == i) /* copied from the arena into the host pool */
          to_host(pk, host, c, t->h[h].bytes, &on_host, &peak_host);
        else
          keep(t, h, q, 1, live, peak);
      }
    }
  }
  sc_free(left);
  sc_free(back);
  sc_free(out_at);
  sc_free(kept);
  sc_free(host);
  sc_free(pend);
  sc_free(first_back);
  sc_free(next_back);
  pk->stash = peak[0];
  pk->step = peak[1];
  pk->kept = peak[2];
  pk->host = peak_host;
  pk->sent = out;
  return st;
}

int64_t sc_pipe_arena_bytes(const sc_dist_program *dp, int32_t q) {
  int64_t n = 0;
  for (int32_t s = 0; s < dp->n_stages; s++)
    if (sc_pipe_piece_chunk(dp->pipe_chunks, s) % dp->pipe_ranks == q &&
        dp->stages[s].program->arena_bytes > n)
      n = dp->stages[s].program->arena_bytes;
  return n;
}
