/* pipe_schedule.h — pipeline schedules of a training step, written down as
 * data: one action list per pipeline rank, which the runtime executes
 * (runtime/pipe_rank.c), the plan prints (`shardc plan --train
 * --schedule-table`) and a deadlock check verifies.
 *
 * An action runs one piece (ir/pipe.h) of one chunk for one microbatch:
 * FORWARD, BACKWARD and WEIGHT once per microbatch, PREPARE, NORM and
 * UPDATE once per step (mb = -1). Handing values over between pieces is
 * implied: a piece receives what it reads from another pipeline rank
 * before it runs (a blocking receive) and sends what another rank reads
 * right after (a buffered send that never blocks); values between pieces
 * of one rank stay there (the stash). With P pipeline ranks, V chunks per
 * rank (C = P·V) and M microbatches, rank r runs chunks r, r+P, ..., first
 * every chunk's PREPARE (chunks ascending: a copy of a parameter another
 * rank reads is made in its owner's first action), and then:
 *   gpipe        F(0..M-1), then B(0..M-1) (V = 1);
 *   1f1b         min(P-r-1, M) warm-up forwards, then one forward and one
 *                backward alternately, then the remaining backwards
 *                (PipeDream-flush, Megatron's non-interleaved schedule);
 *   interleaved  Megatron's interleaved 1F1B: the k-th forward is chunk
 *                ((k / P) mod V)·P + r of microbatch (k / (P·V))·P + k mod P
 *                (backwards the same with chunks in reverse), after
 *                (P-r-1)·2 + (V-1)·P warm-up forwards; M a multiple of P;
 *   zb-h1        1f1b's forwards and backwards; the WEIGHT of microbatch m
 *                right after the BACKWARD of min(m + r, M-1) (zero bubble
 *                H1, Qi et al. 2023: with equal piece times and M >= P the
 *                step idles (P-1)(F+B-W), 1F1B's (P-1)(F+B));
 * the other schedules run each WEIGHT right after its BACKWARD;
 * then every chunk's NORM, then every chunk's UPDATE, chunks ascending.
 *
 * Stash: the microbatches whose forward of a chunk ran and whose backward
 * has not (sc_pipe_peak_stash): GPipe M, 1F1B and ZB-H1 min(P-r, M) on
 * rank r, interleaved the warm-up count + 1 over its V chunks. A held-back
 * WEIGHT keeps what it reads (sc_pipe_traffic counts those bytes). */
#ifndef SC_CODEGEN_PIPE_SCHEDULE_H
#define SC_CODEGEN_PIPE_SCHEDULE_H

#include "codegen/dist_program.h"
#include "ir/pipe.h"

typedef struct sc_pipe_action {
  int8_t phase;   /* sc_pipe_phase */
  int32_t chunk;
  int32_t mb;     /* microbatch; -1 for PREPARE, NORM and UPDATE */
} sc_pipe_action;

/* Rank r's action list (*out: sc_malloc'd, *n actions). Errors: an
 * interleaved schedule whose M is not a multiple of P, V > 1 with another
 * schedule (SC_ERR_USAGE). */
sc_status sc_pipe_schedule(sc_schedule_kind kind, int32_t P, int32_t V, int32_t M, int32_t r,
                           sc_pipe_action **out, int32_t *n, sc_diag *d);
/* The most microbatches rank r's list keeps stashed at once (summed over
 * its chunks: forward run, backward not yet). */
int32_t sc_pipe_peak_stash(const sc_pipe_action *a, int32_t n);

/* Which pieces each piece reads from: deps[piece] lists pieces (in
 * [0, SC_PIPE_PHASES·C)), n_deps[piece] of them. */
typedef struct sc_pipe_deps {
  int32_t n_pieces;
  int32_t *n_deps;
  int32_t **deps;
} sc_pipe_deps;
/* From a pipelined program: piece s reads from piece t when one of its
 * inputs is t's handoff (sc_dist_handoff_source). */
sc_status sc_pipe_deps_of(const sc_dist_program *dp, sc_pipe_deps *out, sc_diag *d);
/* The chain every pipelined transformer has: F_c and B_c read P_c (the
 * weights' casts); F_c reads F_{c-1}; B_c reads
 * F_c and B_{c+1} (B_{C-1} reads F_{C-1}); W_c reads F_c and B_c; N_c
 * reads W_c; U_c reads N_c, U_0 every N_c (the chunks' sums of squares:
 * passes/partition/pipe_train.c) and U_c U_0 (the step's decision) (tests
 * of schedules without a model). */
sc_status sc_pipe_deps_chain(int32_t C, sc_pipe_deps *out, sc_diag *d);
void sc_pipe_deps_free(sc_pipe_deps *x);

/* Runs every rank's list (lists[r], n[r]; P ranks, C = P·V chunks, M
 * microbatches) under the runtime's rules: an action waits until every
 * action it reads from is done (same microbatch for forward and backward
 * pieces; a once-per-step piece reading a per-microbatch one waits for all
 * microbatches); sends never block. SC_OK when every list completes; else
 * SC_ERR_INVALID naming each blocked rank's next action and what it waits
 * for, or a missing or repeated action. */
sc_status sc_pipe_check(const sc_pipe_deps *deps, int32_t P, int32_t V, int32_t M,
                        sc_pipe_action *const *lists, const int32_t *n, sc_diag *d);
/* The values pieces hand over: every (piece, output) that another piece
 * reads, numbered in piece and output order (the same on every rank: the
 * runtime's tags), with how many pieces of each pipeline coordinate read
 * it per microbatch (forward and backward pieces) and once per step (norm
 * and update pieces, which read the last microbatch's value). */
typedef struct sc_pipe_handoff {
  int32_t piece, out;      /* the producer and its output index */
  const char *name;        /* borrowed from the program */
  sc_dtype dtype;
  int64_t bytes;           /* one microbatch's */
  bool per_mb;             /* made per microbatch; false for a value made
                              once per step (a prepare piece's, which every
                              microbatch reads from slot 0: a weight's cast,
                              a state copy "X" SC_PIPE_COPY_SUFFIX) */
  int32_t *mb_readers;     /* [P] */
  int32_t *step_readers;   /* [P] */
  bool offload;            /* a forward piece's per-microbatch value named in
                              dp->schedule.offload (docs/offload.md,
                              "Pipelines") */
} sc_pipe_handoff;
typedef struct sc_pipe_handoffs {
  int32_t P, C, M;
  int32_t n;
  sc_pipe_handoff *h;
  int32_t n_pieces;
  int32_t **input_handoff; /* [n_pieces][the piece's inputs]: the handoff each
                              input reads, -1 for a model input */
} sc_pipe_handoffs;
/* Whether piece s's input `name`, which piece src makes, is read from
 * state instead of handed over: s runs once per step, src per microbatch
 * on the same pipeline coordinate, and name is "new:X" of a state X (an
 * accumulated gradient read by the norm and update pieces). The runtime
 * copies "new:X" over X after every run of src (runtime/pipe_rank.c), so
 * after the step's last microbatch X holds the value s reads: a copy kept
 * in the stash would only double it. Such an input is no handoff
 * (input_handoff -1); the runtime binds it to X. */
bool sc_pipe_reads_state(const sc_dist_program *dp, int32_t s, int32_t src, const char *name);
/* Errors: an input of no source, a value a norm or update piece makes
 * read per microbatch (SC_ERR_INVALID). */
sc_status sc_pipe_handoffs_of(const sc_dist_program *dp, sc_pipe_handoffs *out, sc_diag *d);
void sc_pipe_handoffs_free(sc_pipe_handoffs *t);
/* The handoff of (piece, output), or -1. */
int32_t sc_pipe_handoff_find(const sc_pipe_handoffs *t, int32_t piece, int32_t out);
/* How many pieces of pipeline coordinate q read microbatch k of handoff h
 * (k = 0 for a value made once per step). */
int32_t sc_pipe_handoff_reads(const sc_pipe_handoffs *t, int32_t h, int32_t q, int32_t k);
/* Whether handoff h kept on pipeline coordinate q is stashed: made per
 * microbatch and read here by a per-microbatch piece (forward values for
 * the backward, the values and gradients crossing a chunk boundary), kept
 * per microbatch in flight. The others (a prepare piece's, a value read here
 * only once per step: the norm's share, the mean gradient the update
 * reads) are the step's values, kept once whatever the microbatches. */
bool sc_pipe_handoff_stashed(const sc_pipe_handoffs *t, int32_t h, int32_t q);
/* Whether handoff h may wait in pipeline coordinate q's host pool: an
 * offloaded value (sc_pipe_handoff.offload) stashed on q, made there or
 * received from the rank before (a chunk's input). */
bool sc_pipe_handoff_offloaded(const sc_pipe_handoffs *t, int32_t h, int32_t q);
/* When each offloaded cell of q (microbatch k of handoff h, index h·M + k;
 * t->n·M entries each) leaves the device and comes back, by q's action
 * list a[n]: out[c] is the action after whose run it goes to the host pool
 * (the last action making or reading it before a backward or weight piece
 * first reads it: the forward's last use), back[c] the action before which
 * its copy back starts; both -1 when c is not offloaded on q (no such
 * reader). Reload points are those first backward readers, the distinct
 * actions in list order; the copy back of a cell whose reader is reload
 * point g starts right after reload point g - H has run (H =
 * dp->schedule.offload_horizon; before the first reload point when g < H;
 * right before its reader when H = 0), never before the action after
 * out[c], never after its reader: offload.c's rule with the rank's actions
 * for the program's steps, the copy overlapping the actions in between.
 * Errors: SC_ERR_NOMEM. */
sc_status sc_pipe_offload_back(const sc_pipe_handoffs *t, const sc_dist_program *dp, int32_t q,
                               const sc_pipe_action *a, int32_t n, int32_t *out, int32_t *back,
                               sc_diag *d);
/* Pipeline coordinate q's traffic over one step of its action list, by the
 * runtime's rules (runtime/pipe_rank.c): a value is kept from when it is
 * made here or received (before the first piece that reads it) until its
 * last reader here has run; pk->stash: the most bytes of stashed values
 * (sc_pipe_handoff_stashed) kept at once on the device, step that of the
 * others, kept that of both together; with offload, an offloaded cell
 * (sc_pipe_offload_back) is in the host pool (host: the most bytes there at
 * once) from its out action's run until its reader waits for its copy
 * back, and on the device until the next action starts (its copy out, on
 * the copy queue, runs beside the out action's hand-offs and is waited for
 * before the next action) and from the start of its copy back;
 * sent: the bytes q sends to other pipeline coordinates. from and to
 * (NULL, or [n] zeroed): per action, bit r set when it receives from (a
 * value not yet here) or sends to pipeline coordinate r (r < 64). */
typedef struct sc_pipe_traffic_peaks {
  int64_t stash, step, kept; /* on the device: stashed values, the step's, both */
  int64_t host;              /* the host pool: offloaded values kept at once */
  int64_t offloaded_values, offloaded_bytes; /* per step: microbatch copies */
  int64_t sent;
} sc_pipe_traffic_peaks;
sc_status sc_pipe_traffic(const sc_pipe_handoffs *t, const sc_dist_program *dp, int32_t q,
                          const sc_pipe_action *a, int32_t n, bool offload,
                          sc_pipe_traffic_peaks *pk, uint64_t *from, uint64_t *to, sc_diag *d);

/* The one arena of pipeline coordinate q: the largest arena_bytes of the
 * pieces it runs. Its pieces run one after another on its compute queue
 * and keep nothing in their arenas between runs (every value that outlives
 * a piece is copied out of it: the stash and the step's handed-over values
 * into slots, sends buffered, "new:X" over state X), so they share one
 * (runtime/pipe_rank.c allocates exactly this; tools/plan_train.c prints
 * it as the rank's "arena"). */
int64_t sc_pipe_arena_bytes(const sc_dist_program *dp, int32_t q);

/* "F3.1" (forward of chunk 3, microbatch 1), "N0", "U2" into buf. */
const char *sc_pipe_action_name(const sc_pipe_action *a, char *buf, size_t size);

#endif
