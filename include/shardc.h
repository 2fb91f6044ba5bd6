/* shardc.h — the public embedding API of shardc.
 *
 * shardc compiles ONNX models for distributed execution. This header is
 * what a C program embeds: inspect a model, plan how to split it over a
 * mesh of ranks, compile it (one rank or partitioned; CPU, or CUDA C for
 * NVRTC), save and load the compiled artifact, run it on host buffers over
 * in-process ranks or one rank per process (mpirun, torchrun), and train
 * it, on one rank or a mesh. python/shardc (docs/python.md) wraps it.
 *
 * A short tour: GPT-2 over 4 ranks (tensor parallel 2 x pipeline 2), run
 * on threads of this process.
 *
 *     #include <shardc.h>
 *
 *     sc_dim_binding dims[] = {{"batch", 2}};
 *     sc_compile_settings o = {0};
 *     o.dims = dims;
 *     o.n_dims = 1;
 *     o.parallel.mesh = "tp=2,pp=2";              // NULL: one rank
 *     sc_executable *e = NULL;
 *     sc_status st = sc_compile("gpt2.onnx", &o, &e);
 *     if (st != SC_OK) {
 *       fprintf(stderr, "%s\n", sc_executable_error(e));  // e may be NULL
 *       sc_executable_free(e);
 *       return 1;
 *     }
 *     int64_t ids[2 * 16] = {...};
 *     sc_host_tensor in = {"input_ids", SC_ONNX_INT64, 2, {2, 16}, ids};
 *     sc_host_tensor out[1];
 *     st = sc_executable_run(e, NULL, &in, 1, out, 1); // out[0] allocated
 *     ...
 *     sc_host_tensors_free(out, 1);
 *     sc_executable_free(e);
 *
 * Plans: sc_plan_json gives the plan of a mesh as JSON (docs/plan-format.md),
 * which o.parallel.plan_file replays exactly. Artifacts: sc_executable_save
 * writes a bundle directory (docs/bundle.md) that sc_executable_load reads
 * back; `shardc run DIR` runs the same files.
 *
 * Status codes: every function returns an sc_status (SC_OK = 0; the codes
 * are in shardc_status.h). After a failure, sc_model_error /
 * sc_executable_error give the message as the command line prints it:
 * "FILE: node 'NAME' (OpType): what is wrong".
 *
 * Tensors: dtype codes are ONNX's TensorProto.DataType numbers (1 float,
 * 6 int32, 7 int64, 9 bool, 10 float16, 11 double, 16 bfloat16, ...);
 * data is packed row-major. Inputs are matched by name and are the GLOBAL
 * tensors: the full batch, whatever the mesh.
 *
 * Ownership: handles own everything they return; strings returned through
 * char ** and output tensors are freed with sc_string_free /
 * sc_host_tensors_free. Weights are memory-mapped, not copied.
 * Threading: a handle is used by one thread at a time; distinct handles
 * are independent; a run uses its own threads. The library never exits
 * the process (except that a failing rank under mpirun aborts the MPI job,
 * as MPI does). */
#ifndef SHARDC_H
#define SHARDC_H

#include <stdbool.h>
#include <stdint.h>

#include "shardc_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- inspecting a model ---- */

typedef struct sc_model sc_model; /* opaque */

typedef struct sc_model_opts {
  bool no_weights; /* do not open external weight files: shapes only */
  bool quiet;      /* no notes on stderr (e.g. dims bound to 1 by default) */
} sc_model_opts;

typedef struct sc_model_info {
  int64_t nodes;             /* after folding */
  int64_t nodes_before_fold;
  int64_t params;            /* elements of all initializers */
  int64_t param_bytes;
  double flops;              /* forward FLOPs of one execution */
  int64_t largest_activation_bytes;
  int32_t blocks;            /* repeated blocks found (0 if none) */
} sc_model_info;

/* Loads an ONNX model. opts may be NULL (defaults). On failure *out is still
 * set, unless memory ran out, to a model holding only the error: read it
 * with sc_model_error, then sc_model_free it. */
sc_status sc_model_load(const char *path, const sc_model_opts *opts, sc_model **out);
/* Binds symbolic input dim `name` (e.g. "batch") to value > 0. SC_ERR_USAGE
 * when no input has that dim or the model is already prepared. */
sc_status sc_model_bind_dim(sc_model *m, const char *name, int64_t value);
/* Runs the canonical passes; dims left unbound become 1. Once only. */
sc_status sc_model_prepare(sc_model *m);
/* Statistics of a prepared model (SC_ERR_USAGE before sc_model_prepare). */
sc_status sc_model_stats(const sc_model *m, sc_model_info *out);
/* The last error as "FILE: node 'N' (Op): msg", or "" after success. */
const char *sc_model_error(const sc_model *m);
void sc_model_free(sc_model *m); /* NULL is fine */

/* ---- planning and compiling ---- */

typedef struct sc_dim_binding {
  const char *name;  /* a symbolic input dim, e.g. "batch" */
  int64_t value;     /* > 0; the batch is the GLOBAL batch */
} sc_dim_binding;

/* How to split the model (docs/partitioning.md). All zero: one rank. */
typedef struct sc_parallel_opts {
  const char *mesh;             /* "pp=2,dp=2,tp=2": axes named dp, tp, pp
                                   take those roles; NULL: one rank */
  int32_t microbatches;         /* pipeline microbatches (0: 1) */
  int64_t ranks_per_node;       /* 0: all ranks on one node */
  const char *stage_boundaries; /* "nodeA,nodeB" starting stages 1.., or
                                   NULL: balanced by cost */
  bool sequence_parallel;       /* reduce-scatter + all-gather over the
                                   sequence instead of all-reduce */
  bool no_vocab_parallel;       /* keep the embedding and LM head whole */
  const char *plan_file;        /* replay a plan (sc_plan_json, `shardc plan
                                   --json`) instead of the fields above */
  const char *plan_json;        /* or the same as JSON text in memory */
  const char *cluster;          /* where the mesh runs (`--cluster`: a file or
                                   "h100-sxm:8x4", docs/planner.md): its axes
                                   placed on nodes, and the plan reports
                                   give the predicted step; NULL: none */
  bool expert_tensor_parallel;  /* split each expert's MLP over tp as well
                                   (`--expert-tensor-parallel`, docs/moe.md);
                                   needs a tp axis */
  const char *reduce_dtype;     /* a bf16 or fp16 training step's gradient
                                   reductions over the data axes: "fp32"
                                   (NULL: after their cast back, FSDP's
                                   reduce_dtype) or the step's own "bf16" /
                                   "fp16" (`--reduce-dtype`); refused
                                   without such a step */
} sc_parallel_opts;

typedef enum sc_target_kind {
  SC_TARGET_CPU,   /* LLVM kernels, oneDNN: runs here */
  SC_TARGET_CUDA   /* CUDA C compiled to PTX by NVRTC: save only (the GPU
                      runtime is not built yet); one rank */
} sc_target_kind;

typedef struct sc_compile_settings {
  const sc_dim_binding *dims;
  int32_t n_dims;
  sc_parallel_opts parallel;
  sc_target_kind target;
  const char *gpu_archs;        /* cuda: "sm_80,sm_90" (NULL: default) */
  bool no_fuse;                 /* one kernel per node */
  bool quiet;                   /* no notes on stderr */
} sc_compile_settings;

/* The plan the options give, completed so that it replays (node stages,
 * chosen shardings), as JSON text in *json (free with sc_string_free).
 * Shapes only: no weights are read. On failure *json is NULL and, when
 * error is not NULL, *error holds the message (free with sc_string_free). */
sc_status sc_plan_json(const char *model_path, const sc_dim_binding *dims, int32_t n_dims,
                       const sc_parallel_opts *parallel, char **json, char **error);
void sc_string_free(char *s);
/* What the plan asks of each rank, as JSON text (what `shardc plan`
 * prints; docs/api.md gives the keys): per pipeline stage its ranks and the
 * memory of one of them (weight_bytes, activation_bytes, comm_bytes: the
 * collectives' scratch, total_bytes = weights + arena), and the
 * collectives a rank runs (stage, op, axes, count, bytes per microbatch
 * and per step). The stage programs are compiled (memory plan, no JIT),
 * shapes only. Same conventions as sc_plan_json. */
sc_status sc_plan_report_json(const char *model_path, const sc_dim_binding *dims,
                              int32_t n_dims, const sc_parallel_opts *parallel, char **json,
                              char **error);

/* ---- compiled programs ---- */

typedef struct sc_executable sc_executable; /* opaque */

/* Compiles the model (import, passes, partitioning, code generation). On
 * failure *out is still set, unless memory ran out, to an executable
 * holding only the error (sc_executable_error), to be freed. */
sc_status sc_compile(const char *model_path, const sc_compile_settings *opts,
                     sc_executable **out);
/* Writes the artifact as the bundle directory dir (created; an earlier
 * bundle there is replaced). */
sc_status sc_executable_save(sc_executable *e, const char *dir);
/* Reads a bundle written by sc_executable_save or `shardc compile` (one
 * rank or partitioned, CPU). Same failure convention as sc_compile. */
sc_status sc_executable_load(const char *dir, sc_executable **out);

/* A tensor on the host. */
typedef struct sc_host_tensor {
  const char *name;
  int32_t dtype;      /* ONNX TensorProto.DataType */
  int32_t rank;       /* <= 8 */
  int64_t dims[8];
  void *data;         /* packed row-major */
} sc_host_tensor;

/* ONNX dtype codes used most often. */
enum {
  SC_ONNX_FLOAT = 1, SC_ONNX_INT32 = 6, SC_ONNX_INT64 = 7, SC_ONNX_BOOL = 9,
  SC_ONNX_FLOAT16 = 10, SC_ONNX_DOUBLE = 11, SC_ONNX_BFLOAT16 = 16
};

/* The model's inputs and outputs: name, dtype and GLOBAL dims (the full
 * batch); data NULL. i out of range: SC_ERR_USAGE. */
int32_t sc_executable_n_inputs(const sc_executable *e);
int32_t sc_executable_n_outputs(const sc_executable *e);
sc_status sc_executable_input(const sc_executable *e, int32_t i, sc_host_tensor *out);
sc_status sc_executable_output(const sc_executable *e, int32_t i, sc_host_tensor *out);
/* Ranks of its mesh (1 for one rank) and pipeline stages. */
int64_t sc_executable_n_ranks(const sc_executable *e);
int32_t sc_executable_n_stages(const sc_executable *e);

typedef struct sc_run_opts {
  const char *comm;   /* the names shardc's --comm takes (one table,
                         runtime/comm.h): "local" (NULL: default): every
                         rank a thread of this process; "mpi": this
                         process is one rank of an mpirun with as many
                         processes as ranks; "tcp": one rank of as many
                         processes, each given RANK, WORLD_SIZE,
                         MASTER_ADDR and MASTER_PORT (only ranks of the
                         same program connect); "nccl" and "cuda-local"
                         need the GPU runtime (SC_ERR_USAGE here) */
  int threads;        /* CPU threads per rank (0: cores / ranks) */
} sc_run_opts;

/* Runs once. inputs: the global inputs, by name (extra ones are ignored).
 * outputs[n_outputs] (n_outputs = sc_executable_n_outputs) receive the
 * outputs in order, data allocated by the library (free with
 * sc_host_tensors_free); under "mpi" or "tcp" only the outputs this rank owns have
 * data (the first rank of the stage that produces an output owns it), the
 * others data NULL. opts may be NULL. */
sc_status sc_executable_run(sc_executable *e, const sc_run_opts *opts,
                            const sc_host_tensor *inputs, int32_t n_inputs,
                            sc_host_tensor *outputs, int32_t n_outputs);
void sc_host_tensors_free(sc_host_tensor *t, int32_t n);

/* The last error as "FILE: node 'N' (Op): msg", or "" after success; NULL
 * is fine ("out of memory"). */
const char *sc_executable_error(const sc_executable *e);
void sc_executable_free(sc_executable *e); /* NULL is fine */

/* ---- training, on one rank or a mesh (docs/training.md) ----
 *
 *     sc_training_settings s;
 *     sc_training_settings_init(&s, "adamw");     // PyTorch's defaults
 *     s.dims = dims; s.n_dims = 1;                  // the batch per step
 *     sc_training *t = NULL;
 *     if (sc_training_create("mlp.onnx", &s, &t) != SC_OK) ... sc_training_error(t)
 *     sc_host_tensor batch[2] = {{"x", SC_ONNX_FLOAT, 2, {8, 64}, x},
 *                                {"labels", SC_ONNX_INT64, 1, {8}, labels}};
 *     double loss;
 *     for (int i = 0; i < 100; i++) sc_training_step(t, batch, 2, 1e-3, &loss, NULL);
 *     sc_training_free(t);
 *
 * The loss reads the model's only output (or `logits`): "cross-entropy"
 * takes an int64 input "labels" (the logits' shape without the last dim),
 * "mse" a float input "targets" (the logits' shape); "output:NAME" uses
 * the model's own scalar. */
typedef struct sc_training_settings {
  const sc_dim_binding *dims;
  int32_t n_dims;
  const char *loss;            /* "cross-entropy" (default), "mse", "output:NAME" */
  const char *logits;          /* the output the loss reads; NULL: the only one */
  int64_t ignore_index;        /* cross-entropy: −100 */
  const char *optimizer;       /* "sgd" or "adamw" */
  double momentum, weight_decay, beta1, beta2, eps;
  bool nesterov;
  double clip_grad_norm;       /* 0: none */
  const char *const *freeze;   /* globs of initializers kept fixed */
  int32_t n_freeze;
  int threads;                 /* 0: all cores */
  const char *precision;       /* "fp32" (NULL), "bf16" or "fp16": matrix
                                  products in the low type, master weights
                                  and optimizer state f32 (`--precision`) */
  sc_parallel_opts parallel;   /* a mesh ("fsdp=2,tp=2": `shardc train
                                  --mesh`, docs/training.md) or plan; all
                                  zero: one rank */
  const char *comm;            /* with a mesh: "local" (NULL: every rank a
                                  thread), "mpi" or "tcp" (this process one
                                  rank of the job), as sc_run_opts.comm */
  const char *recompute;       /* "none" (NULL), "selective" or "full": the
                                  forward activations recomputed in the
                                  backward (`--recompute`, docs/training.md) */
  const char *const *aux_loss_names; /* model outputs (float scalars, e.g. a
                                  mixture of experts' load-balancing loss)
                                  added to the loss, each times
                                  aux_loss_coefs[k] (`--aux-loss NAME=COEF`,
                                  docs/moe.md); at most 16 */
  const double *aux_loss_coefs;
  int32_t n_aux_losses;
} sc_training_settings;
/* PyTorch's defaults for optimizer "sgd" or "adamw" (lr is per step). */
void sc_training_settings_init(sc_training_settings *s, const char *optimizer);

typedef struct sc_training sc_training; /* opaque */

/* Builds and compiles the training step. Same failure convention as
 * sc_compile: *out holds the error unless memory ran out. Over a mesh
 * (s->parallel) the step is partitioned as `shardc train --mesh` does
 * (data parallel, ZeRO over fsdp, tensor parallel, pipeline) and every
 * rank keeps its piece of the state; the batch a step takes is still the
 * GLOBAL batch, and the steps equal the command's bit for bit. Under comm
 * "mpi" or "tcp" every process makes the same calls in the same order
 * (each is collective). */
sc_status sc_training_create(const char *model_path, const sc_training_settings *s,
                             sc_training **out);
/* The plan of a training over s->parallel's mesh (which may have an fsdp
 * axis) and what it asks of each rank, without training: *plan_json as
 * sc_plan_json gives it, *report_json as sc_plan_report_json's keys but
 * each stage's memory as the training step's arena at its peak, by class
 * ("lines": params, optimizer state, gradients, activations, workspace,
 * data, communication, arena, constants; total_bytes = arena +
 * constants: what `shardc plan --train` prints) and each collective with
 * its group and the bytes a rank sends ("sent_bytes", ring algorithms).
 * Free both with sc_string_free; on failure both NULL and *error (when not
 * NULL) the message. */
sc_status sc_training_plan_json(const char *model_path, const sc_training_settings *s,
                                char **plan_json, char **report_json, char **error);
/* One optimizer step on one batch (the data inputs by name, their first
 * dim the bound batch); loss and grad_norm (before clipping) out, or NULL.
 * A non-finite loss or norm: SC_ERR_INVALID and no update. */
sc_status sc_training_step(sc_training *t, const sc_host_tensor *data, int32_t n_data,
                           double lr, double *loss, double *grad_norm);
int64_t sc_training_steps_done(const sc_training *t);
/* The learning rate of step (>= 1) under schedule "constant" (NULL),
 * "cosine" or "linear": a linear warm-up from 0 over `warmup` steps, then
 * the decay from lr to min_lr at step `total` — what `shardc train
 * --lr-schedule` passes to each step, the same double arithmetic. NaN for
 * an unknown schedule or step < 1. */
double sc_learning_rate(const char *schedule, double lr, double min_lr, int64_t warmup,
                        int64_t total, int64_t step);
/* The current value of a parameter (or optimizer state such as
 * "NAME.exp_avg"): out->data points into the training's memory, valid
 * until the next step (over a mesh: the global tensor gathered from the
 * ranks' pieces into a copy the training owns, valid until the next call).
 * SC_ERR_USAGE for an unknown name. */
sc_status sc_training_tensor(const sc_training *t, const char *name, sc_host_tensor *out);
const char *sc_training_error(const sc_training *t);
/* Saves the training's state as a checkpoint directory (docs/checkpoint.md:
 * weights, optimizer state, the step), atomically; over a mesh sharded as
 * `shardc train --mesh --save` writes it, resumed under any mesh. */
sc_status sc_training_save(sc_training *t, const char *dir);
/* Continues from a checkpoint saved by sc_training_save or `shardc train
 * --save` with the same model and optimizer: bit-exact. */
sc_status sc_training_resume(sc_training *t, const char *dir);
/* Writes the training step as a training bundle directory dir
 * (docs/bundle.md: the compiled step, the model's initial parameter
 * values and training.json; what `shardc compile --train` writes; over a
 * mesh the partitioned training bundle of `shardc compile --train --mesh`:
 * partition.json, the stage bundles and every rank's weight shards), to be
 * trained by sc_training_load or `shardc train DIR` without the model. The
 * steps already taken are not in it (sc_training_save checkpoints them).
 * SC_ERR_USAGE for a training loaded from a bundle; SC_ERR_UNSUPPORTED
 * for a pipelined one (pp > 1: its pieces update their state in place,
 * which a bundle's programs do not; sc_training_bundle_write builds and
 * writes its bundle). */
sc_status sc_training_save_bundle(sc_training *t, const char *dir);
/* Builds the training step of model_path with settings s for a bundle and
 * writes it into dir, as `shardc compile MODEL --train [--mesh ...] -o
 * DIR` does (the same build: nothing bound outside the arena, the same
 * writers), pipelined steps (pp > 1) included; s->comm and s->threads are
 * not used. On failure *error (when error is not NULL) holds the message,
 * freed with sc_string_free. */
sc_status sc_training_bundle_write(const char *model_path, const sc_training_settings *s,
                                   const char *dir, char **error);
/* Reads a training bundle (written by sc_training_save_bundle or `shardc
 * compile --train`) as a training at step 0 from its initial parameter
 * values, running its compiled kernels; threads: 0 for all cores (a
 * partitioned bundle: per rank, 0 for cores / ranks; its ranks are threads
 * of this process, comm "local"). Its steps equal those of the training
 * it was saved from, bit for bit. A cuda training bundle (`shardc compile
 * --train --target cuda`) trains on the GPU from its CUBIN. Same
 * failure convention as sc_training_create: a damaged bundle, or an
 * inference bundle, is an error naming the directory (and the file). An
 * inference executable does not load a training bundle either
 * (sc_executable_load refuses it). */
sc_status sc_training_load(const char *dir, int threads, sc_training **out);
/* Writes MODEL with its initializers replaced by a checkpoint's weights as
 * a new ONNX file OUT (atomically): onnxruntime and `shardc run` run it.
 * A tied copy (a weight that is another's transpose, trained as that one:
 * docs/training.md#tied-weights) the checkpoint lacks is written as the
 * transpose of its source's trained value. A checkpoint weight the model
 * lacks, or of another dtype or shape, is an error; on failure *error (when not NULL) holds the message (free with
 * sc_string_free). */
sc_status sc_export_checkpoint(const char *checkpoint_dir, const char *model_path,
                               const char *out_path, char **error);
void sc_training_free(sc_training *t); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif
