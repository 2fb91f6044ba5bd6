/* dist_sim.h — the predicted step of a distributed program on a cluster,
 * by simulating each pipeline rank's action list (docs/planner.md, "Cost
 * model": "Built: simulating the action lists").
 *
 * Every rank has a compute queue and one communication queue per group of
 * mesh axes, as the runtime has them (runtime/session.c: one queue per
 * communicator; the CUDA device: one stream per communicator). The steps
 * of a program run in order on the compute queue; a step's time comes from
 * the formulas of passes/plan/cost.h (sc_dist_step_compute_time for
 * computation; a collective over its group's link). A synchronous COMM
 * step starts when both its queue and the compute queue are free and
 * blocks compute until it ends; an async one starts the same way but only
 * occupies its queue, and its WAIT blocks compute for what is left; a
 * program run ends when its queues are drained (the session's run does).
 * Point-to-point hand-offs between pipeline ranks (a pipelined training
 * step's values between pieces, runtime/pipe_rank.c; an inference
 * pipeline's SEND and RECV steps, runtime/dist.c) are buffered sends: the
 * transfer runs on the sender's point-to-point queue to that rank over the
 * link between the two (intra- or inter-node), the sender goes on, and the
 * receive blocks until the transfer has arrived. A rank has one such queue
 * per peer: a transfer waits for its earlier ones to the same rank, not for
 * those to others (buffered sends to different ranks progress apart; a
 * tied embedding's copy to the last pipeline rank does not hold back the
 * next microbatch's hand-off to the second).
 *
 * Activation offloading's copies (docs/offload.md) run on a copy queue of
 * their own, one per rank, in order, as the runtime runs them: each takes
 * its bytes over the cluster's host link (gpu.host_link_bytes_per_s;
 * memory-bound, read and written, where the cluster has none) while
 * compute goes on, and compute waits where the runtime waits. In one
 * program a COPY step starts on that queue and its WAIT blocks compute for
 * what is left. In a pipelined step the copies are not steps: the points
 * of sc_pipe_offload_back give them (runtime/pipe_rank.c's rules): a
 * cell's copy out starts after its out action has run and is waited for
 * before the rank's next action; its copy back starts before its back
 * action and is waited for before the run of its reader.
 *
 * One simulated rank per pipeline coordinate (the rank whose other
 * coordinates are 0): the ranks of a stage differ only in their dp, fsdp
 * and tp coordinates and run the same program, so their collectives are
 * symmetric and nobody waits for anybody inside a group. A pipelined
 * training step runs each rank's list from sc_pipe_schedule; any other
 * program runs its stage's program once per microbatch. Each rank's time
 * advances only through its own steps and the arrival of what it receives,
 * so walking the ranks round-robin, each until it blocks on a receive not
 * yet sent, gives the same times as an event-ordered walk.
 *
 * Every advance of a rank's clock is attributed to exactly one term, so
 * compute + recompute + optimizer + exposed communication + bubble +
 * exposed copies = the rank's finish: computation to compute (forward and
 * backward; a pipelined step's prepare pieces too), recompute (a step
 * every node of which is a "<name>/recompute" clone,
 * passes/recompute.c) or optimizer (a pipelined step's NORM and UPDATE
 * pieces; in one training program the steps that only the updated state
 * "new:X", "train:grad_norm" and "train:applied" need); a wait for a
 * collective to the exposed time of its group; a wait for a hand-off to
 * the bubble until the sender started it, then to the exposed time of the
 * pipeline's axes; a wait for a copy to exposed_copy_s (traced as an
 * EXPOSED event). The step is the last rank's finish; that rank is the
 * critical one.
 *
 * Events (sc_dist_sim_run_traced, off by default: sc_dist_sim_run records
 * nothing and runs as fast as before): every advance of a rank's clock and
 * every transfer on one of its queues, in the order the walk makes them.
 * A rank's compute-queue events (computation, and the waits: bubble and
 * exposed communication) tile [0, finish_s] without gaps or overlaps and
 * their durations are its terms above; consecutive steps of one run and
 * one term merge into one event (and so do back-to-back transfers of one
 * run, one kind and one peer on one queue), so a step of P pipeline ranks and A actions records
 * O(P·A) events, not one per program step.
 *
 * Nothing is stored; the result owns no pointers (a trace owns its events:
 * sc_dist_sim_trace_free). Not thread-safe per result. Errors: the cost formulas' (a figure the cluster does not know, a
 * dtype without a peak), prefixed with the stage, step and node;
 * SC_ERR_LIMIT (more than SC_DIST_SIM_MAX_RANKS pipeline ranks or
 * SC_DIST_SIM_MAX_GROUPS groups); SC_ERR_INVALID (a list that blocks: a
 * receive no rank sends; a SEND or RECV step with a peer or tag out of
 * range, or inside a pipelined piece); SC_ERR_NOMEM. */
#ifndef SC_CODEGEN_DIST_SIM_H
#define SC_CODEGEN_DIST_SIM_H

#include "codegen/dist_program.h"
#include "passes/plan/cost.h"
#include "passes/plan/plan.h"

enum { SC_DIST_SIM_MAX_RANKS = 64, SC_DIST_SIM_MAX_GROUPS = 16 };

typedef struct sc_dist_sim_comm {
  sc_axes axes;       /* the group's mesh axes */
  int64_t ops;        /* transfers per step (collectives, sends) */
  double bytes;       /* their buffers' bytes (B of cost.h), per step */
  double busy_s;      /* their summed durations: the queue's busy time */
  double exposed_s;   /* what compute waited for them */
} sc_dist_sim_comm;

typedef struct sc_dist_sim_rank {
  int64_t rank;             /* the simulated rank */
  int32_t pipe_rank;        /* its pipeline coordinate */
  double flops;             /* GEMM FLOPs per step */
  double model_flops;       /* of them, not recomputed */
  double compute_s;         /* forward and backward computation */
  double recompute_s;       /* recomputed forward steps */
  double optimizer_s;       /* the optimizer update and gradient norm */
  double bubble_s;          /* waiting for a neighbour to start a hand-off */
  double exposed_comm_s;    /* the groups' exposed_s, summed */
  double busy_comm_s;       /* the groups' busy_s, summed */
  double exposed_copy_s;    /* waiting for the copy queue (offloading) */
  double copy_s;            /* the copy queue's busy time */
  double copy_bytes;        /* the bytes it copies, both ways */
  double finish_s;          /* compute, recompute, optimizer, bubble,
                               exposed_comm_s and exposed_copy_s summed */
  int32_t n_comm;
  sc_dist_sim_comm comm[SC_DIST_SIM_MAX_GROUPS]; /* by group, first seen first */
} sc_dist_sim_rank;

typedef struct sc_dist_sim {
  int32_t n_ranks;          /* pipeline coordinates simulated */
  sc_dist_sim_rank ranks[SC_DIST_SIM_MAX_RANKS];
  int32_t critical;         /* the rank that finishes last */
  double step_time_s;       /* ranks[critical].finish_s */
  int64_t gpus;             /* the mesh's ranks */
  double tokens;            /* per step: batch x sequence of the first
                               integer input of rank >= 2 (token ids), 0
                               when none */
  double tokens_per_s;      /* tokens / step_time_s, 0 when either is 0 */
  double flops_per_s_per_gpu; /* the ranks' mean GEMM FLOPs / step_time_s */
  double model_flops;       /* the non-recomputed GEMM FLOPs of every GPU */
} sc_dist_sim;

/* What a rank's clock or one of its queues did (the events above). */
typedef enum sc_dist_sim_event_kind {
  SC_DIST_SIM_EV_COMPUTE,    /* compute queue: forward and backward steps */
  SC_DIST_SIM_EV_RECOMPUTE,  /* compute queue: recomputed forward steps */
  SC_DIST_SIM_EV_OPTIMIZER,  /* compute queue: the optimizer and gradient norm */
  SC_DIST_SIM_EV_BUBBLE,     /* compute queue: waiting for a neighbour's hand-off */
  SC_DIST_SIM_EV_EXPOSED,    /* compute queue: waiting for communication */
  SC_DIST_SIM_EV_COLLECTIVE, /* a group's queue: collectives */
  SC_DIST_SIM_EV_SEND,       /* the point-to-point queue: a hand-off or SEND */
  SC_DIST_SIM_EV_COPY,       /* the copy queue: an offloaded value out or back */
  SC_DIST_SIM_EV_KIND_COUNT
} sc_dist_sim_event_kind;

enum { SC_DIST_SIM_QUEUE_COMPUTE = -1, SC_DIST_SIM_QUEUE_P2P = -2, SC_DIST_SIM_QUEUE_COPY = -3 };

typedef struct sc_dist_sim_event {
  int32_t pipe_rank;   /* the simulated rank (its pipeline coordinate) */
  int32_t queue;       /* SC_DIST_SIM_QUEUE_COMPUTE, _P2P, _COPY, or a group's index
                          into the trace's axes */
  int8_t kind;         /* sc_dist_sim_event_kind */
  int8_t phase;        /* the piece's sc_pipe_phase; -1 when not pipelined */
  int8_t comm;         /* COLLECTIVE: its steps' sc_comm_kind; else -1 */
  int32_t stage;       /* the stage program (pipelined: the piece) */
  int32_t chunk;       /* pipelined: the piece's chunk; else -1 */
  int32_t mb;          /* microbatch; -1 for once-a-step pieces */
  int32_t peer;        /* SEND: the pipeline rank it goes to; BUBBLE: the one
                          waited for; else -1 */
  int32_t steps;       /* program steps (or transfers) merged into it */
  double start_s, end_s;
  double bytes;        /* COLLECTIVE, SEND: B of cost.h, summed; COPY: bytes */
} sc_dist_sim_event;

typedef struct sc_dist_sim_trace {
  sc_dist_sim_event *events; /* sc_malloc'd, in the walk's order */
  int64_t n, cap;
  int32_t n_groups;
  sc_axes axes[SC_DIST_SIM_MAX_GROUPS]; /* each group queue's mesh axes */
} sc_dist_sim_trace;

/* The step of dp on c (above). dp's mesh must carry the cluster's ranks
 * per node (sc_cluster_fit_mesh). */
sc_status sc_dist_sim_run(const sc_dist_program *dp, const sc_cluster *c, sc_dist_sim *out,
                          sc_diag *d);
/* The same, recording its events into *trace (zeroed first; owned by the
 * caller, freed with sc_dist_sim_trace_free even after an error). The
 * figures in *out are the same as sc_dist_sim_run's. */
sc_status sc_dist_sim_run_traced(const sc_dist_program *dp, const sc_cluster *c,
                                 sc_dist_sim *out, sc_dist_sim_trace *trace, sc_diag *d);
void sc_dist_sim_trace_free(sc_dist_sim_trace *trace);
/* "compute", "recompute", "optimizer", "bubble", "exposed", "collective",
 * "send", "copy". */
const char *sc_dist_sim_event_kind_name(sc_dist_sim_event_kind k);
/* Model FLOPs utilization: s->model_flops / (step time x GPUs x c's peak
 * in dtype t); 0 when the peak or the step is unknown. */
double sc_dist_sim_mfu(const sc_dist_sim *s, const sc_cluster *c, sc_cluster_dtype t);
/* The cluster dtype of a precision's name (a plan's "f32" or
 * "bf16-mixed", training's "fp32", "bf16", "fp16", "fp8"; NULL: fp32);
 * false when there is none. */
bool sc_dist_sim_precision_dtype(const char *precision, sc_cluster_dtype *out);
/* The time and GEMM FLOPs of one computing step of p (GEMM: its roofline
 * from its own shape and operands' dtype, and its epilogue kernel where the
 * profile models kernels; ATTENTION, ATTENTION_GRAD: sc_cost_attention_time,
 * its FLOPs at the GEMM rate of its per-head products over the bytes it
 * touches; KERNEL: the CPU's kernel model where the profile has one;
 * otherwise KERNEL, CHECK, SCATTER_ADD: the
 * bytes of the buffers it touches over HBM). The one place a step's
 * computation is costed. SC_ERR_INVALID: a COMM or WAIT step, a dtype
 * without a peak, a figure c does not know. */
/* The features of kernel k for the CPU's kernel model (passes/plan/
 * profile.h, SC_PROFILE_KERNEL_TERMS): its row loops (each looped phase's
 * outer points), and the float operations, transcendental functions and
 * gathered loads its elements evaluate (an expression that does not vary
 * with the inner index counts once per outer point); *split whether the CPU device splits it over its pool
 * (work at least KIR_SPLIT_MIN_WORK, more than one outer point). The same
 * counts for calibrate's fit and for the prediction. */
void sc_dist_kernel_features(const kir_kernel *k, double *f, bool *split);
sc_status sc_dist_step_compute_time(const sc_cluster *c, const sc_program *p, const sc_step *st,
                                    double *seconds, double *flops, sc_diag *d);
/* Whether async COMM step cs of p is one the session on c's device runs
 * on the calling thread when its queue has nothing in flight (smaller
 * than SC_ASYNC_INLINE_BYTES, codegen/program.h, on a CPU): the
 * simulation then makes compute wait for it, as for a synchronous one. */
bool sc_dist_async_inline(const sc_cluster *c, const sc_program *p, const sc_comm_step *cs);
/* pl->predicted (source "simulated") from the step of dp on pl's cluster
 * (pl->cluster_figures): the critical rank's figures, the MFU in pl's
 * precision, and peak_bytes_per_rank (the caller's exact count of the
 * largest rank's memory, device lines included; 0: not computed) against
 * the device's memory; or `unknown` saying which figure is missing. Leaves
 * it off when pl has no cluster figures. */
void sc_dist_sim_to_plan(const sc_dist_program *dp, sc_plan *pl, int64_t peak_bytes_per_rank);

#endif
