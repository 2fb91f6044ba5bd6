/* trainer.h — running the steps of a compiled training program.
 *
 * The program is one training step (passes/train.h names its inputs and
 * outputs): each input X that has an output "new:X" is training state (a
 * parameter, or optimizer state such as "P.exp_avg"), kept here in host
 * memory between steps; "train:lr", "train:bc1", "train:bc2" are the
 * per-step scalars (the learning rate, and AdamW's bias corrections
 * 1 − β^t); every other input is data the caller gives each step (the
 * model's inputs, "labels" or "targets"). A step copies the state and
 * data into the session's inputs, runs the program once, reads "loss" and
 * "train:grad_norm", and the next step sees the updated state: the
 * program writes it over X's arena slot (state pairs, codegen/program.h),
 * or, for a pair the memory plan could not keep, the trainer copies
 * "new:X" back into its own copy of X. Parameters start from the initial values given
 * at creation, or from opts.fill, which writes them into their state
 * buffer in place (delayed initialisation: no other copy is made); optimizer state starts at zero (PyTorch's first SGD
 * momentum step and AdamW's zero moments agree with that).
 *
 * Gradient accumulation: a program with "accum:P" inputs runs once per
 * microbatch; data given to a step may hold K microbatches (dim 0 = K
 * times the program's), run in order; the accumulated gradients carry
 * from one to the next and restart at zero each step, and only the last
 * run's parameter and optimizer-state update is applied ("train:apply"). The step's loss is
 * the mean of the microbatches' losses.
 *
 * Loss scaling (fp16 programs, inputs "train:loss_scale" and
 * "train:inv_scale"): PyTorch's GradScaler: a step whose gradient norm is
 * not finite is skipped and the scale halved; after 2000 steps in a row
 * without one, the scale doubles. Such a skip is not an error (*applied
 * false, loss finite).
 *
 * Errors: a parameter without an initial value, data missing or of the
 * wrong dtype or shape (named), a failing run. One thread at a time. */
#ifndef SC_RUNTIME_TRAINER_H
#define SC_RUNTIME_TRAINER_H

#include "runtime/runtime.h"

typedef struct sc_trainer sc_trainer;

typedef struct sc_trainer_opts {
  int threads;         /* 0: all cores */
  sc_device_choice device;
  double beta1, beta2; /* AdamW's, for the bias corrections (the training
                          manifest's; with no opts 0.9, 0.999) */
  double loss_scale;   /* a program with "train:loss_scale": the first
                          scale; 0: 65536 (GradScaler's init_scale) */
  const struct sc_cpu_module *cpu_module; /* the program's kernels, compiled
                          (a bundle's kernels.o), borrowed: must outlive
                          the trainer; NULL: JIT-compiled from the kir */
  sc_cuda_code cuda;   /* cuda: a cuda training bundle's code (its CUBINs:
                          nothing compiled), borrowed; none: emitted and
                          compiled by NVRTC */
  /* One rank of a partitioned step (runtime/dist_train.h): the world
   * communicator and the rank's sharded constants, as sc_session_opts
   * (borrowed); NULL for one rank. */
  struct sc_comm *world;
  const void *const *const_data;
  /* Delayed initialisation (runtime/param_init.h, borrowed): a parameter
   * a rule of `init` matches is written by it straight into its state
   * buffer (the arena slot, or the host copy), the whole tensor; the
   * others take their value from init[]. NULL: all from init[]. */
  const struct sc_param_init *init;
  /* The same for one rank of a partitioned step (runtime/dist_train.c):
   * called instead, for each parameter with its program buffer (the
   * rank's piece) and its state buffer dst; it writes the piece and sets
   * *done, or leaves *done false (init[] then). */
  sc_status (*fill)(void *ctx, const char *name, const sc_buffer *b, void *dst, bool *done,
                    sc_diag *d);
  void *fill_ctx;
  /* Wait for every step's results before the next is launched, on a
   * device that could launch ahead (sc_trainer_launch): the synchronous
   * path, for comparison. */
  bool sync_steps;
} sc_trainer_opts;

/* init: initial values of the parameters, by name (copied). The program
 * must outlive the trainer. */
sc_status sc_trainer_create(const sc_program *p, const sc_tensor_view *init, int32_t n_init,
                            const sc_trainer_opts *o, sc_trainer **out, sc_diag *d);
/* One step (step >= 1 counts the optimizer steps for bias correction).
 * data: the data inputs by name. loss, grad_norm: NULL or out. The new
 * state is kept only when the loss and the gradient norm are finite (the
 * program's "train:applied"); otherwise the state stays as it was and
 * *applied is false (the caller decides whether that ends the run). */
sc_status sc_trainer_step(sc_trainer *t, const sc_tensor_view *data, int32_t n_data, double lr,
                          int64_t step, double *loss, double *grad_norm, bool *applied,
                          sc_diag *d);
/* The same step in two halves, so that a step's results are read after the
 * next step was launched (one step late): sc_trainer_launch issues the step
 * (the data are copied before it returns: the caller may refill them), and
 * sc_trainer_collect returns the oldest launched step's number and results,
 * waiting for them. At most SC_TRAINER_IN_FLIGHT steps are launched and
 * not collected; sc_trainer_step needs none. Where the trainer launches
 * ahead (sc_trainer_async: a CUDA device, every state tensor kept on the
 * device, no loss scaling, not opts.sync_steps) a launch makes no host
 * synchronisation and a collect one wait, for that step's outputs; a step
 * that was not applied (not finite) left the state as it was on the device
 * already, so a step launched after it ran on the same state as when
 * waited for. Elsewhere a launch runs the whole step and a collect returns
 * what it kept (a dynamic loss scale needs the last step's gradient norm
 * before the next step starts). The state read back (sc_trainer_state, a
 * checkpoint) is that after every launched step. A failure may be reported
 * by the collect of the step before the one that failed. */
enum { SC_TRAINER_IN_FLIGHT = 2 };
sc_status sc_trainer_launch(sc_trainer *t, const sc_tensor_view *data, int32_t n_data, double lr,
                            int64_t step, sc_diag *d);
sc_status sc_trainer_collect(sc_trainer *t, int64_t *step, double *loss, double *grad_norm,
                             bool *applied, sc_diag *d);
int32_t sc_trainer_in_flight(const sc_trainer *t);
bool sc_trainer_async(const sc_trainer *t);

/* Learning-rate schedules (as PyTorch users build them with LambdaLR):
 * constant; or a linear warm-up from 0 over `warmup` steps, then cosine
 * or linear decay from lr to min_lr at step `total`. step >= 1. */
typedef enum sc_lr_schedule {
  SC_LR_CONSTANT,
  SC_LR_COSINE,
  SC_LR_LINEAR
} sc_lr_schedule;
double sc_lr_at(sc_lr_schedule s, double lr, double min_lr, int64_t warmup, int64_t total,
                int64_t step);
/* The data inputs the program takes: i-th name, dtype and dims (for the
 * caller's checks); count. */
int32_t sc_trainer_n_data(const sc_trainer *t);
const sc_buffer *sc_trainer_data(const sc_trainer *t, int32_t i);
/* The current value of state `name` (a parameter or optimizer state), or
 * NULL; its buffer description through *b when not NULL. Host memory
 * owned by the trainer, valid until its next step: on a device whose arena
 * is not host memory the state lives in the arena, and the first call
 * after a step reads all of it back (one device-to-host copy per tensor).
 * _mut: the same buffer, for the caller to write; the trainer uploads it
 * before its next step. */
const void *sc_trainer_state(sc_trainer *t, const char *name, const sc_buffer **b);
void *sc_trainer_state_mut(sc_trainer *t, const char *name, const sc_buffer **b);
/* Reads the state a step changed on the device back into the host copies
 * now (what sc_trainer_state does first), on the thread that drives the
 * trainer's device; nothing when they are current or the arena is host
 * memory. */
void sc_trainer_sync_host(sc_trainer *t);
/* State tensors (parameters, optimizer state, gradient accumulators), and
 * how many of them the program updates in place in its arena. */
int32_t sc_trainer_state_count(const sc_trainer *t, int32_t *in_place);
/* The session's arena: every byte the step uses besides constants (the
 * memory plan's figure, allocated once). */
int64_t sc_trainer_arena_bytes(const sc_trainer *t);
/* The session's host pool of offloaded activations (0: none;
 * sc_session_host_pool_bytes). */
int64_t sc_trainer_host_pool_bytes(const sc_trainer *t);
/* The dynamic loss scale and its growth tracker (1 and 0 without
 * scaling); set restores them from a checkpoint. */
double sc_trainer_loss_scale(const sc_trainer *t, int64_t *growth);
void sc_trainer_set_loss_scale(sc_trainer *t, double scale, int64_t growth);

/* Checkpoints (runtime/checkpoint.h): the parameters go to the weights
 * group, optimizer state to the optimizer group; st carries the scalars
 * (step, data position, ...). Restoring copies every state tensor of the
 * program from the checkpoint: one missing, of another dtype or shape, or
 * a checkpoint tensor the program does not have, is an error naming it
 * (a run resumed with another optimizer is refused). */
struct sc_ckpt;
struct sc_ckpt_state;
sc_status sc_trainer_save(sc_trainer *t, const char *dir, const struct sc_ckpt_state *st,
                          sc_diag *d);
sc_status sc_trainer_restore(sc_trainer *t, const struct sc_ckpt *c, sc_diag *d);
/* The pieces of a restore, shared with runtime/dist_train.c: the
 * checkpoint's tensor of state `name` from its group (optimizer state or
 * weights, into *group), or NULL with the error "the checkpoint has no ...";
 * then, given how many tensors of each group were used, an error naming a
 * checkpoint tensor that is not state of t's step. */
const sc_tensor_view *sc_trainer_ckpt_tensor(const struct sc_ckpt *c, const char *name,
                                            int32_t *group, sc_diag *d);
sc_status sc_trainer_ckpt_unused(const sc_trainer *t, const struct sc_ckpt *c,
                                 const int32_t *used, sc_diag *d);
void sc_trainer_destroy(sc_trainer *t);

#endif
