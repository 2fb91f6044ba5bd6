/* pipe_rank.h — one rank of a pipelined training step.
 *
 * Input: a distributed program whose stages are the pieces of a pipelined
 * step (dp->pipe_chunks > 0; ir/pipe.h), this rank, and the training
 * manifest (the parameters' GLOBAL initial values). The rank runs the
 * pieces of its chunks (chunk c on pipeline coordinate c mod P), one
 * session each, created in lockstep with every other rank (the sessions'
 * communicator splits are collective), and executes its action list
 * (codegen/pipe_schedule.h) each step:
 *   - a piece's inputs are the model's data (this microbatch's piece, cut
 *     by the caller), state, the step's scalars (train:lr, bc1, bc2), or
 *     values another piece hands over: kept here when that piece is this
 *     rank's (the stash, one slot per microbatch, freed after its last
 *     reader), else received from the rank that runs it before the piece
 *     runs (tag: the handover's index in the program, FIFO per microbatch);
 *   - after a piece runs, each value another rank reads is sent to it
 *     (buffered: a send never waits), "new:X" is copied over state X, and
 *     the loss (the last chunk's forward), the gradient norm and "applied"
 *     (the last chunk's norm piece) are kept.
 * State lives in host buffers of this rank (its piece of each parameter,
 * optimizer state and accumulator its pieces read); accumulators restart
 * at zero each step. On a device whose arena is not host memory (CUDA) it
 * lives on the device instead, in the rank's store: the end of the shared
 * arena, past the largest piece's sc_pipe_arena_bytes, each tensor at a
 * 256-byte boundary. Before a piece runs, each state input is copied from
 * the store into its arena slot on the device (that slot is the input:
 * the session copies nothing from the host), and after it each "new:X"
 * (an output slot) back into the store, then the piece's stream is
 * synchronised so that the next piece may overwrite the arena. The host
 * buffers are then copies: uploaded before the first step and after a
 * write (a restore), read back only when asked for (a checkpoint,
 * sc_pipe_rank_sync_host); accumulators are zeroed in the store. A piece compiled with its state bound
 * (sc_compile_opts.bind_state: the CPU) reads it there and writes each
 * kept pair's "new:X" over X in place (sc_session_opts.bound: the buffers
 * are allocated before the sessions and never move); otherwise the state
 * is copied into the arena and "new:X" copied back.
 * Memory: the rank's pieces share ONE arena of sc_pipe_arena_bytes (its
 * largest piece's), allocated by the session of its first piece and
 * borrowed by the others (sc_session_opts.arena). That is safe because
 * the pieces run one at a time on this thread, each run returns with its
 * collectives and device streams finished, every input is copied into the
 * arena at the start of each run or bound outside it (binding writes
 * nothing there: constants and bound state are outside it), and whatever
 * outlives a piece is copied out before the next runs: handed-over values
 * into their slots, sends buffered (local, tcp, MPI) or finished (NCCL),
 * "new:X" not written in place over state X, the loss, norm and "applied"
 * read. */
#ifndef SC_RUNTIME_PIPE_RANK_H
#define SC_RUNTIME_PIPE_RANK_H

#include "codegen/dist_program.h"
#include "codegen/train_manifest.h"
#include "runtime/runtime.h"

typedef struct sc_pipe_rank sc_pipe_rank;

typedef struct sc_pipe_rank_opts {
  int threads;                       /* per session; 0: 1 */
  sc_device_choice device;
  struct sc_comm *world;             /* every rank of the mesh, borrowed */
  const struct sc_cpu_module *const *kernels; /* [dp->n_stages] JIT-compiled
                                        once for all ranks, borrowed; NULL
                                        entries: each session compiles */
  const struct sc_param_init *init;  /* parameters a rule matches start from
                                        it (runtime/param_init.h), written
                                        into the rank's piece; NULL: none */
} sc_pipe_rank_opts;

/* Collective: every rank calls it at once. */
sc_status sc_pipe_rank_create(const sc_dist_program *dp, int64_t rank, const sc_train_manifest *m,
                              const sc_pipe_rank_opts *o, sc_pipe_rank **out, sc_diag *d);
/* The data inputs the rank's pieces read: i-th one's program buffer (the
 * rank's piece of one microbatch) and its sharding; count. */
int32_t sc_pipe_rank_n_data(const sc_pipe_rank *r);
const sc_buffer *sc_pipe_rank_data(const sc_pipe_rank *r, int32_t i, const sc_sharding **sh);
/* One step: data[] by name, each holding the rank's pieces of the step's M
 * microbatches one after the other. *has_loss: this rank runs the piece
 * that makes the loss (then *loss is the step's, the microbatches' mean);
 * *has_norm: the one that makes the gradient norm and "applied" (then
 * *grad_norm and *applied are the step's). */
sc_status sc_pipe_rank_step(sc_pipe_rank *r, const sc_tensor_view *data, int32_t n_data,
                            double lr, int64_t step, double *loss, double *grad_norm,
                            bool *applied, bool *has_loss, bool *has_norm, sc_diag *d);
/* State `name` held here (this rank's piece), its buffer and sharding; NULL
 * when the rank holds no such state. On a device arena this is the host
 * copy: current after sc_pipe_rank_sync_host (made on the rank's own
 * thread), and uploaded before the next step when `write` says the caller
 * writes it. */
void *sc_pipe_rank_state(sc_pipe_rank *r, const char *name, const sc_buffer **b,
                         const sc_sharding **sh, bool write);
/* A device arena: the host copies read back from the store after a step
 * changed it (nothing on the CPU). */
void sc_pipe_rank_sync_host(sc_pipe_rank *r);
/* The i-th state tensor's name (i < count), for walks over all state.
 * *in_place (when non-NULL) grows by the count of those a piece updates
 * in place, in their state buffer (bound, with a kept pair). */
int32_t sc_pipe_rank_state_count(const sc_pipe_rank *r, int32_t *in_place);
const char *sc_pipe_rank_state_name(const sc_pipe_rank *r, int32_t i);
/* Bytes of arena the rank's sessions allocated (the one they share), and
 * the most stashed bytes (handed-over values kept per microbatch in
 * flight, sc_pipe_handoff_stashed) held at once in the last step. */
int64_t sc_pipe_rank_arena_bytes(const sc_pipe_rank *r);
int64_t sc_pipe_rank_peak_stash_bytes(const sc_pipe_rank *r);
/* Activation offloading: the most bytes of offloaded values the host pool
 * held at once in the last step, and (*copies) how many microbatch values
 * went there (docs/offload.md, "Pipelines"). */
int64_t sc_pipe_rank_peak_host_bytes(const sc_pipe_rank *r, int64_t *copies);
void sc_pipe_rank_destroy(sc_pipe_rank *r);

#endif
