/* pipe.h — the pieces of a pipelined training step, shared by the
 * partitioner (passes/partition/pipe_train.c makes them), the distributed
 * program (codegen/dist_program.h records them) and the runtime
 * (runtime/pipe_rank.c runs them).
 *
 * A pipelined step over P pipeline ranks with V virtual stages per rank has
 * C = P·V chunks (consecutive runs of the forward); chunk c lives on pipeline
 * rank c mod P (Megatron's interleaving; V = 1: chunk c is rank c). Every
 * node of the step is in one piece (phase, chunk):
 *   PREPARE   the chunk's forward nodes that read only parameters (and
 *             constants, and each other): the products' low-precision
 *             copies of the weights, the copy of a parameter another
 *             pipeline rank reads; once per step, before the chunk's first
 *             forward (the parameters change only in the update), its
 *             values kept for the step's forwards and backwards;
 *   FORWARD   the chunk's other forward nodes (the loss in the last chunk),
 *             once per microbatch;
 *   BACKWARD  the backward nodes a lower chunk's backward needs: the input
 *             gradients (and what they read: recomputed forward nodes),
 *             once per microbatch; in a chunk that recomputes, all of its
 *             backward (the weight gradients read the recomputed values,
 *             which die there block by block);
 *   WEIGHT    its other backward nodes: the weight gradients and their
 *             accumulation, once per microbatch, whenever the schedule
 *             says (zero-bubble schedules run them late); empty in a
 *             chunk that recomputes;
 *   NORM      its share of the global gradient norm (its gradients'
 *             reductions, their sums of squares), once per step;
 *   UPDATE    its parameters' optimizer update, once per step; chunk 0's
 *             also combines the chunks' sums into the norm and the step's
 *             decision (ok, the clipping factor's input), and so does the
 *             first update piece of every other pipeline rank, for the
 *             updates of that rank (the same operations on the same
 *             inputs: the same bits; passes/partition/pipe_train.c).
 * Pieces are numbered so that every value flows from a smaller to a larger
 * (or the same) piece: P_0 .. P_{C-1}, F_0 .. F_{C-1}, B_{C-1} .. B_0,
 * W_{C-1} .. W_0, N_0 .. N_{C-1}, U_0 .. U_{C-1}: SC_PIPE_PHASES · C
 * pieces. */
#ifndef SC_IR_PIPE_H
#define SC_IR_PIPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum sc_pipe_phase {
  SC_PIPE_PREPARE,
  SC_PIPE_FORWARD,
  SC_PIPE_BACKWARD,
  SC_PIPE_WEIGHT,
  SC_PIPE_NORM,
  SC_PIPE_UPDATE,
  SC_PIPE_PHASES
} sc_pipe_phase;

/* Phases run once per microbatch (the others once per step). */
static inline bool sc_pipe_per_mb(sc_pipe_phase ph) {
  return ph == SC_PIPE_FORWARD || ph == SC_PIPE_BACKWARD || ph == SC_PIPE_WEIGHT;
}
/* Backward and weight pieces run their chunks in reverse. */
static inline bool sc_pipe_reversed(sc_pipe_phase ph) {
  return ph == SC_PIPE_BACKWARD || ph == SC_PIPE_WEIGHT;
}
static inline int32_t sc_pipe_piece(int32_t chunks, sc_pipe_phase ph, int32_t chunk) {
  return (int32_t)ph * chunks + (sc_pipe_reversed(ph) ? chunks - 1 - chunk : chunk);
}
static inline sc_pipe_phase sc_pipe_piece_phase(int32_t chunks, int32_t piece) {
  return (sc_pipe_phase)(piece / chunks);
}
static inline int32_t sc_pipe_piece_chunk(int32_t chunks, int32_t piece) {
  int32_t r = piece % chunks;
  return sc_pipe_reversed((sc_pipe_phase)(piece / chunks)) ? chunks - 1 - r : r;
}
/* A parameter read on another pipeline rank than its owner's is read
 * there through "X" SC_PIPE_COPY_SUFFIX, a copy the owner's prepare piece
 * makes (passes/partition/pipe_train.c; other state read there is an
 * error). Its value is the same in every microbatch of a step (state
 * changes only in the update), so it is handed over once per step. */
#define SC_PIPE_COPY_SUFFIX ".pipe_copy"

static inline const char *sc_pipe_phase_name(sc_pipe_phase ph) {
  static const char *const names[] = {"prepare", "forward", "backward", "weight", "norm", "update"};
  return ph >= 0 && ph < SC_PIPE_PHASES ? names[ph] : "?";
}

/* What program `index` of a distributed program is, for a progress line
 * or a message: "chunk 1 backward" when the step is pipelined (chunks > 0,
 * index a piece), else "stage 2" (n_programs > 1) or "the model". */
static inline void sc_pipe_program_label(int32_t chunks, int32_t index, int32_t n_programs,
                                         char *buf, size_t n) {
  if (chunks > 0)
    snprintf(buf, n, "chunk %d %s", (int)sc_pipe_piece_chunk(chunks, index),
             sc_pipe_phase_name(sc_pipe_piece_phase(chunks, index)));
  else if (n_programs > 1)
    snprintf(buf, n, "stage %d", (int)index);
  else
    snprintf(buf, n, "the model");
}

#endif
