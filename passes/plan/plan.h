/* plan.h — the plan: every partitioning decision, as data.
 *
 * The plan is what the partition passes read (DESIGN.md: "the plan is
 * data"): the mesh, which mesh axis plays which role, the tensor-parallel
 * spec, the pipeline split and schedule, per-initializer sharding overrides,
 * and the per-node stage assignment the pipeline pass fills in. It is written
 * and read as JSON (docs/plan-format.md) so that `shardc plan --json` can be
 * edited and replayed with `--plan`.
 *
 * Names in the plan (initializers, nodes) are graph names, stable across
 * passes; value ids are not. Overrides hold the sharding's text form, parsed
 * against the mesh when validated, so a plan can be read before its mesh is
 * known to be consistent and still report precise errors.
 *
 * Ownership: an sc_plan owns an arena holding all its strings and arrays;
 * sc_plan_destroy frees everything. Not thread-safe. Errors: SC_ERR_PARSE
 * (malformed JSON or a field of the wrong type), SC_ERR_INVALID (unknown
 * key, unknown name, inconsistent values), SC_ERR_IO, with a message in the
 * diag. Fields marked "reserved" belong to the training issue: they are read,
 * validated and written, and nothing uses them yet. */
#ifndef SC_PLAN_H
#define SC_PLAN_H

#include <stdio.h>

#include "ir/ir.h"
#include "ir/mesh.h"
#include "ir/sharding.h"
#include "passes/fuse_attention.h"
#include "passes/plan/cluster.h"

#define SC_PLAN_FORMAT_VERSION 1

typedef struct sc_plan_override {
  const char *name;     /* initializer (SC_VALUE_PARAM) name */
  const char *sharding; /* text form, e.g. "[_,tp]" (ir/sharding.h) */
} sc_plan_override;

typedef struct sc_plan_node_stage {
  const char *node; /* node name */
  int32_t stage;    /* 0 .. n_stages-1 */
} sc_plan_node_stage;

/* A predicted step, as the plan JSON writes it under "predicted"
 * (docs/planner.md, "Cost model"; docs/plan-format.md). The same object
 * for a plan given by --mesh and for each candidate of the search
 * ("auto"): the search's chosen plan is evaluated by the same path as
 * --mesh, so the two agree. Times are per training (or inference) step.
 * A figure that could not be had is 0 (tokens_per_s, mfu) and `unknown`
 * says why no time was predicted at all. */
enum { SC_PLAN_PREDICTED_MAX_GROUPS = 16 };
typedef struct sc_plan_predicted {
  bool on;                 /* written only when on */
  char unknown[256];       /* why no time was predicted (a figure the
                              cluster does not know), or "" */
  char source[32];         /* how: "simulated" (each rank's action list run
                              on the cluster, codegen/dist_sim.h), or
                              "estimate" (the search's block model) */
  int32_t pipe_rank;       /* the critical (slowest) rank's pipeline coordinate */
  int64_t rank;            /* and its rank */
  double step_time_s;      /* the step: the last rank's finish */
  double tokens_per_s;     /* 0: unknown (no token ids) */
  double flops_per_s_per_gpu; /* GEMM FLOPs of the step / step time, mean over ranks */
  double mfu;              /* model FLOPs utilization: the GEMM FLOPs of
                              every GPU's step, recomputed ones left out /
                              (step time x GPUs x the cluster's peak in the
                              plan's dtype); 0 unknown */
  int64_t peak_bytes_per_rank; /* the largest rank's exact memory (memory
                              plan + device lines); 0: not computed */
  bool fits;               /* peak_bytes_per_rank <= the device's memory */
  /* The critical rank's step, broken down: the terms sum to step_time_s
   * (exposed communication is what compute waited for, not what it hid). */
  double compute_s;        /* forward + backward compute, recompute excluded */
  double bubble_s;         /* pipeline idle time waiting for a neighbour */
  double recompute_s;      /* recomputed forward steps */
  double optimizer_s;      /* the optimizer update (and gradient norm) */
  int32_t n_comm;
  struct {
    char axes[64];         /* "tp", "dp,tp" */
    double seconds;        /* exposed: not hidden behind compute */
    int64_t calls;         /* simulated collectives (and sends) per step,
                              every run of the step's program counted */
    double bytes;          /* their buffers' bytes per step */
  } comm[SC_PLAN_PREDICTED_MAX_GROUPS];
} sc_plan_predicted;

typedef struct sc_plan {
  sc_arena arena;
  int32_t version;            /* SC_PLAN_FORMAT_VERSION */
  sc_mesh mesh;

  /* data parallel */
  const char *dp_axis;        /* mesh axis splitting the batch, or NULL */
  const char *fsdp_axis;      /* training: mesh axis splitting the batch AND
                                 sharding the training state (ZeRO/FSDP:
                                 what zero_stage says), or NULL */
  /* tensor parallel (Megatron-style) */
  const char *tp_axis;        /* mesh axis of tensor parallelism, or NULL */
  bool tp_all_blocks;         /* every transformer block found */
  const char **tp_blocks;     /* else: these blocks (name prefixes) */
  int32_t n_tp_blocks;
  bool sequence_parallel;     /* reduce-scatter + all-gather, not all-reduce */
  bool vocab_parallel;        /* split embedding and LM head over tp */
  bool expert_tensor_parallel; /* the experts' MLPs split over tp too (an
                                 ep mesh's experts are otherwise whole on
                                 every tp rank: docs/moe.md) */
  /* pipeline */
  const char *pp_axis;        /* mesh axis of pipeline stages, or NULL */
  int32_t n_stages;           /* == size of pp_axis (1 without one) */
  const char **boundaries;    /* n_stages-1 node names starting stages 1..
                                 (a pipelined training step: its chunks',
                                 n_stages x virtual_stages - 1, as
                                 sc_partition_complete_plan writes the cut
                                 it was built with), or */
  int32_t n_boundaries;       /* 0 = "balanced" (by cost) */
  int32_t microbatches;       /* >= 1 */
  const char *schedule;       /* "gpipe"; training also "1f1b",
                                 "interleaved" (1F1B over virtual stages) */
  int32_t virtual_stages;     /* chunks per pipeline rank (interleaved); 0: 1 */
  sc_plan_node_stage *node_stages; /* filled by the pipeline pass */
  int32_t n_node_stages;

  sc_plan_override *overrides; /* per-initializer sharding overrides */
  int32_t n_overrides;

  /* training */
  int32_t zero_stage;         /* 1..3: what the fsdp axis shards (1 optimizer
                                 state, 2 + gradients, 3 + parameters);
                                 0 = the default (3 with an fsdp axis) */
  bool keep_after_forward;    /* ZeRO-3: keep gathered parameters from the
                                 forward to the backward (FSDP's
                                 reshard_after_forward=False) */
  /* reserved for training (read, validated, written; unused) */
  const char **recompute;     /* node names to recompute in backward */
  int32_t n_recompute;
  const char *precision;      /* "f32" now; "bf16-mixed" later */
  int64_t shard_group_size;   /* 0 = the whole dp axis (hybrid sharding) */
  const char *reduce_dtype;   /* the dtype a low-precision step reduces its
                                 gradients in over the data axes: "fp32"
                                 (the default: after their cast back to f32,
                                 FSDP's reduce_dtype, Megatron's default),
                                 or the step's own "bf16" or "fp16" */

  /* placement (cluster.h): the mesh was put on a cluster */
  const char *cluster;        /* its name ("h100-sxm:8x4"), or NULL: none */
  int64_t cluster_nodes;      /* its nodes; its ranks a node are the mesh's */
  sc_cluster cluster_figures; /* its figures (cluster.h), for the cost model:
                                 from --cluster, or the preset of that name
                                 when read from a file; nodes 0: unknown (a
                                 plan for a cluster file, replayed) */
  /* the predicted step (codegen/dist_sim.h: sc_dist_sim_to_plan), written
   * under "predicted" when on; derived, so the reader skips it */
  sc_plan_predicted predicted;
  /* what fuse-attention did to the model (passes/fuse_attention.h),
   * written under "attention" when it ran; derived, so the reader skips it */
  sc_fuse_attention_report attention;
} sc_plan;

/* An empty plan: trivial mesh, no axes, 1 stage, 1 microbatch, "gpipe",
 * "balanced", "f32". NULL when out of memory. */
sc_plan *sc_plan_create(void);
void sc_plan_destroy(sc_plan *p);
/* A copy of s in the plan's arena (NULL stays NULL). */
const char *sc_plan_strdup(sc_plan *p, const char *s);
/* Whether s names a reduce dtype: "fp32", "bf16" or "fp16". */
bool sc_plan_reduce_dtype_known(const char *s);
/* Whether the plan reduces a low-precision step's gradients in its low
 * precision (reduce_dtype bf16 or fp16), not after their cast to fp32. */
bool sc_plan_reduces_low(const sc_plan *p);
/* A training step in `precision` ("fp32", "bf16", "fp16", "fp8") under
 * the plan: a low reduce dtype must be the step's own (fp8 steps run their
 * other products in bf16). SC_ERR_USAGE otherwise. */
sc_status sc_plan_check_reduce_dtype(const sc_plan *p, const char *precision, sc_diag *d);
/* Adds (or replaces) the override of initializer name. */
sc_status sc_plan_set_override(sc_plan *p, const char *name, const char *sharding,
                               sc_diag *d);

/* Checks the plan on its own and, when g is not NULL, against the graph:
 * axes named exist in the mesh and are distinct, and every mesh axis has a
 * role; n_stages equals the pp
 * axis size; boundaries are n_stages-1 (or n_stages x virtual_stages - 1)
 * distinct nodes of g in graph order, a piece of a node name with a comma
 * named as such (--stage-boundaries splits at commas);
 * microbatches >= 1; schedule known; overrides parse against the mesh, name
 * an initializer of g with that rank, and divide its shape; node stages name
 * nodes of g, each once, in range; recompute names nodes; zero_stage 0..3;
 * shard_group_size divides the dp axis; with a cluster, the mesh fits its
 * nodes and its placement is even (sc_placement_compute). The first problem goes to d. */
sc_status sc_plan_validate(const sc_plan *p, sc_graph *g, sc_diag *d);

/* The plan the command-line options describe: the mesh (parsed here, once)
 * whose axes named dp, tp and pp take those roles, the pp size as the stage
 * count, the boundaries (comma-separated node names) and the rest as given.
 * Checked against a graph later (sc_partition_run). Errors: the mesh's
 * (SC_ERR_PARSE, SC_ERR_INVALID, SC_ERR_LIMIT), SC_ERR_NOMEM; *out is NULL
 * on failure. */
typedef struct sc_plan_options {
  const char *mesh;            /* "pp=2,dp=2,tp=2" */
  int64_t ranks_per_node;      /* 0: not given */
  int32_t microbatches;        /* 0: 1 */
  const char *schedule;        /* NULL: gpipe */
  int32_t virtual_stages;      /* 0: 1 */
  const char *boundaries;      /* "a,b", or NULL: balanced */
  bool sequence_parallel;
  bool no_vocab_parallel;
  bool expert_tensor_parallel; /* --expert-tensor-parallel */
  int32_t zero_stage;          /* --zero (0: the default) */
  bool keep_after_forward;     /* --no-reshard-after-forward */
  const char *reduce_dtype;    /* --reduce-dtype fp32|bf16|fp16 (NULL: fp32) */
  const sc_cluster *cluster;   /* --cluster, or NULL: the mesh's axes are
                                  ordered (sc_cluster_order_mesh) and put on
                                  it (sc_cluster_fit_mesh) */
} sc_plan_options;
sc_status sc_plan_from_options(const sc_plan_options *o, sc_plan **out, sc_diag *d);

/* JSON (docs/plan-format.md). write: deterministic, 2-space indent, ends
 * with a newline. read: strict (unknown keys, wrong types, a wrong version
 * are errors) and validated with sc_plan_validate(p, g, d); g may be NULL.
 * *out is NULL on failure. */
sc_status sc_plan_write_json(const sc_plan *p, FILE *f, sc_diag *d);
char *sc_plan_write_json_string(const sc_plan *p, sc_diag *d); /* sc_free */
sc_status sc_plan_read_json(const char *text, size_t len, const char *name,
                            sc_graph *g, sc_plan **out, sc_diag *d);
/* _file: path must be a regular file of at most 64 MiB (ir/fileio.h). */
sc_status sc_plan_read_json_file(const char *path, sc_graph *g, sc_plan **out,
                                 sc_diag *d);
/* The placement's axes as the JSON forms write them (the plan's
 * `placement.axes`, partition.json's): one {"axis", "size", "stride",
 * "groups", "nodes_spanned"} per axis. A new reference; NULL: no memory. */
struct json_t *sc_plan_placement_axes_json(const sc_placement *pl);
/* The "predicted" object as the plan writes it (also what `plan --train
 * --json` and `plan --auto --json` write for each plan). A new reference. */
struct json_t *sc_plan_predicted_json(const sc_plan_predicted *pr);

#endif
