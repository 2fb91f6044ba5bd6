/* dist_train.h — a partitioned training step run by every rank of a mesh.
 *
 * Input: a distributed program whose one stage is a training step
 * (passes/train.h, partitioned by passes/partition: data parallel, ZeRO 1-3
 * over fsdp, tensor parallel) and the training manifest of that program
 * (codegen/train_manifest.h: the optimizer and the parameters' GLOBAL
 * initial values, by name), or a pipelined step (dp->pipe_chunks > 0:
 * each rank runs its pieces, runtime/pipe_rank.h; thread-ranks only).
 *
 * Each rank is a thread with its own sc_trainer (runtime/trainer.h) over
 * the stage program: its session gets the world communicator of a local
 * group and the rank's sharded constants, and its state starts as the
 * rank's piece (the program input's sharding, sc_sharding_extract) of
 * each global initial value — or, for a parameter a rule of o->init
 * matches (runtime/param_init.h), the initialiser's values of that piece,
 * written straight into the rank's state buffer, no global tensor made —
 * and the optimizer state starts at zero. The
 * threads live as long as the trainer and run each step together: a step
 * hands every rank the GLOBAL batch (K microbatches with gradient
 * accumulation), of which each cuts, per microbatch, its piece; the loss,
 * the gradient norm and "applied" are replicated outputs, read from rank 0.
 * State is read back whole (sc_dist_trainer_state): each rank's piece is
 * put into its place in the global tensor (sc_sharding_insert). On a GPU
 * each rank keeps its state in its device arena (trainer.h); reading it
 * back, saving and restoring first bring every rank's host copy up to
 * date on that rank's own thread, the one that drives its GPU.
 *
 * Failure: an error on any rank aborts the group with "rank R: MESSAGE";
 * every rank returns within seconds and the call reports the first
 * failing rank's message. The trainer is then unusable (destroy it).
 * SHARDC_FAIL_RANK=R makes rank R fail in its first step (tests). */
#ifndef SC_RUNTIME_DIST_TRAIN_H
#define SC_RUNTIME_DIST_TRAIN_H

#include "codegen/dist_program.h"
#include "codegen/train_manifest.h"
#include "runtime/trainer.h"

typedef struct sc_dist_trainer sc_dist_trainer;

/* dp and m must outlive the trainer. o: threads per rank (0: cores /
 * ranks), the loss scale, the initialiser (o->init, borrowed: it must
 * outlive the creation); its world, const_data, fill and cpu_module are set
 * here (one JIT of the stage's kernels, shared by the ranks). world: NULL
 * for every rank as a thread of this process (a local communicator
 * group); else this process is the one rank sc_comm_rank(world) of a
 * world of every rank (under mpirun: sc_comm_mpi_create), borrowed. Then
 * every call is collective (all processes make the same calls in the same
 * order); reading state gathers the pieces over world, and a save is
 * written by rank 0 alone. */
sc_status sc_dist_trainer_create(const sc_dist_program *dp, const sc_train_manifest *m,
                                 const sc_trainer_opts *o, struct sc_comm *world,
                                 sc_dist_trainer **out, sc_diag *d);
/* This process's rank (0 with thread-ranks). */
int64_t sc_dist_trainer_rank(const sc_dist_trainer *t);
/* Ends every rank with msg (sc_comm_abort). */
void sc_dist_trainer_abort(sc_dist_trainer *t, const char *msg);
/* sc_trainer_step over every rank; data are GLOBAL tensors by name. */
sc_status sc_dist_trainer_step(sc_dist_trainer *t, const sc_tensor_view *data, int32_t n_data,
                               double lr, int64_t step, double *loss, double *grad_norm,
                               bool *applied, sc_diag *d);
int64_t sc_dist_trainer_ranks(const sc_dist_trainer *t);
/* The data inputs the step takes, with their GLOBAL dims (one
 * microbatch's batch), for the caller's checks; count. */
int32_t sc_dist_trainer_n_data(const sc_dist_trainer *t);
const sc_buffer *sc_dist_trainer_data(const sc_dist_trainer *t, int32_t i);
/* The global state tensor `name` (a parameter or optimizer state),
 * assembled into a new sc_malloc'd buffer (*data, the caller frees it;
 * dtype and global dims through *v, whose name is borrowed). A
 * vocabulary-padded parameter (train_manifest.h) and its optimizer state
 * answer to the model's names ("W", "W.exp_avg") and to their own, either
 * way with the model's rows (v->name: the name asked for, or the step's). */
sc_status sc_dist_trainer_state(sc_dist_trainer *t, const char *name, sc_tensor_view *v,
                                sc_diag *d);
/* Per rank of this process (r < ranks, or 0 with a world): its session's
 * arena, its state tensors and how many are updated in place. */
int64_t sc_dist_trainer_arena_bytes(const sc_dist_trainer *t, int64_t r);
/* Its host pool of offloaded activations (0: none, or a pipeline rank). */
int64_t sc_dist_trainer_host_pool_bytes(const sc_dist_trainer *t, int64_t r);
int32_t sc_dist_trainer_state_count(const sc_dist_trainer *t, int64_t r, int32_t *in_place);
/* A pipelined step: the most bytes of handed-over values the ranks of
 * pipeline coordinate q kept at once in the last step (the largest over
 * this process's ranks of that coordinate; 0 for none). */
int64_t sc_dist_trainer_stash_bytes(const sc_dist_trainer *t, int32_t q);
/* A pipelined step with activation offloading: the most bytes of
 * offloaded values the host pool of pipeline coordinate q held at once in
 * the last step (as sc_dist_trainer_stash_bytes; 0 for none). */
int64_t sc_dist_trainer_pipe_host_bytes(const sc_dist_trainer *t, int32_t q);
/* A pipelined step: the arena the ranks of pipeline coordinate q allocated
 * (one each, shared by their pieces: sc_pipe_arena_bytes; the largest over
 * this process's ranks of that coordinate; 0 for none). */
int64_t sc_dist_trainer_pipe_arena_bytes(const sc_dist_trainer *t, int32_t q);
/* Checkpoints are sharded (runtime/checkpoint.h, format 2): each rank
 * writes the pieces it holds the one copy of into its own files (one
 * rank per process: rank 0 opens the folder, writes the manifest and swaps
 * it in); a restore cuts every rank's piece from the whole tensors of a
 * checkpoint of any layout. */
struct sc_ckpt;
struct sc_ckpt_state;
sc_status sc_dist_trainer_save(sc_dist_trainer *t, const char *dir,
                               const struct sc_ckpt_state *st, sc_diag *d);
sc_status sc_dist_trainer_restore(sc_dist_trainer *t, const struct sc_ckpt *c, sc_diag *d);
double sc_dist_trainer_loss_scale(const sc_dist_trainer *t, int64_t *growth);
void sc_dist_trainer_set_loss_scale(sc_dist_trainer *t, double scale, int64_t growth);
void sc_dist_trainer_destroy(sc_dist_trainer *t);

#endif
