/* api.c — the public embedding API (include/shardc.h) over the layers:
 * the model handle over frontend import, the pass manager and the
 * statistics; planning and compiling over the driver (driver/driver.h);
 * saving over the bundle writers (codegen/bundle.h, dist_bundle.h);
 * loading and running over the distributed runtime (runtime/dist.h,
 * dist_load.h). Nothing here holds pipeline logic: it converts the public
 * types (ONNX dtype codes, host tensors) and keeps the last error.
 *
 * Every call records its failure in the handle's diag, formatted on demand
 * by sc_model_error / sc_executable_error. An executable is a distributed
 * program, compiled (the build owns it) or loaded (it owns its files). A
 * training is a trainer over a training step and its manifest, built from
 * a model (driver/train_bundle.h) or loaded from a training bundle
 * (runtime/bundle.h), started the same way (runtime/train_bundle.h). */
#include "shardc.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/bundle.h"
#include "codegen/dist_bundle.h"
#include "codegen/dist_sim.h"
#include "driver/driver.h"
#include "driver/plan_report.h"
#include "driver/rank_memory.h"
#include "driver/train_memory.h"
#include "frontend/onnx.h"
#include "passes/pass.h"
#include "passes/stats.h"
#include "runtime/dist.h"
#include "runtime/dist_load.h"
#include "runtime/dist_train.h"
#include "driver/train_bundle.h"
#include "runtime/bundle.h"
#include "runtime/checkpoint.h"
#include "runtime/train_bundle.h"
#include "runtime/runtime.h"
#include "runtime/trainer.h"

struct sc_model {
  sc_graph *g;        /* NULL when the load failed */
  sc_model_opts opts;
  char *path;
  sc_stats stats;
  bool stats_begun;
  bool prepared;
  sc_diag diag;       /* the last failure */
  char error[2048];   /* sc_model_error's buffer */
};

static sc_status fail_from(sc_model *m, const sc_diag *d) {
  m->diag = *d;
  if (!m->diag.file[0] && m->path) sc_diag_set_file(&m->diag, m->path);
  return m->diag.status;
}

sc_status sc_model_load(const char *path, const sc_model_opts *opts, sc_model **out) {
  if (!out) return SC_ERR_USAGE;
  *out = NULL;
  sc_model *m = sc_calloc(1, sizeof *m);
  if (!m) return SC_ERR_NOMEM;
  *out = m;
  if (opts) m->opts = *opts;
  sc_diag_clear(&m->diag);
  if (!path)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "sc_model_load: path is NULL");
  m->path = sc_strdup(path);
  if (!m->path) return sc_diag_set(&m->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_import_opts io = {.no_weights = m->opts.no_weights};
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_onnx_import(path, &io, &m->g, &d);
  if (st != SC_OK) {
    if (m->g) sc_graph_destroy(m->g);
    m->g = NULL;
    return fail_from(m, &d);
  }
  return SC_OK;
}

sc_status sc_model_bind_dim(sc_model *m, const char *name, int64_t value) {
  if (!m) return SC_ERR_USAGE;
  sc_diag_clear(&m->diag);
  if (!m->g || m->prepared || !name || value <= 0)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL,
                       "sc_model_bind_dim: %s", !m->g ? "no model loaded"
                       : m->prepared ? "the model is already prepared"
                                     : "needs a name and a value > 0");
  if (sc_graph_bind_dim(m->g, name, value) == 0) {
    sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "no input has a dim named '%s'", name);
    sc_diag_set_file(&m->diag, m->path);
    return SC_ERR_USAGE;
  }
  return SC_OK;
}

sc_status sc_model_prepare(sc_model *m) {
  if (!m) return SC_ERR_USAGE;
  sc_diag_clear(&m->diag);
  if (!m->g || m->prepared)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "sc_model_prepare: %s",
                       !m->g ? "no model loaded" : "already prepared");
  sc_status st = sc_stats_begin(m->g, &m->stats);
  m->stats_begun = true;
  if (st == SC_OK) {
    sc_pass_opts po;
    sc_pass_opts_init(&po);
    po.quiet = m->opts.quiet;
    st = sc_run_passes(m->g, SC_CANONICAL_PASSES, &po);
  }
  if (st == SC_OK) st = sc_stats_finish(m->g, &m->stats);
  if (st != SC_OK) return fail_from(m, &m->g->diag);
  m->prepared = true;
  return SC_OK;
}

sc_status sc_model_stats(const sc_model *m, sc_model_info *out) {
  if (!m || !out || !m->prepared) return SC_ERR_USAGE;
  const sc_stats *s = &m->stats;
  memset(out, 0, sizeof *out);
  out->nodes = s->n_nodes;
  out->nodes_before_fold = s->n_nodes_before_fold;
  out->params = s->params;
  out->param_bytes = s->param_bytes;
  out->flops = s->flops;
  out->largest_activation_bytes = s->largest_bytes;
  out->blocks = s->n_blocks;
  return SC_OK;
}

/* The message of d formatted into a handle's cache buffer ("" after
 * success): the one body of every *_error function. */
static const char *cached_error(const sc_diag *d, char *buf, size_t n) {
  if (d->status == SC_OK) return "";
  sc_diag_format(d, buf, n);
  return buf;
}

const char *sc_model_error(const sc_model *m) {
  if (!m) return "no model";
  sc_model *mm = (sc_model *)m; /* the buffer is a cache */
  return cached_error(&m->diag, mm->error, sizeof mm->error);
}

void sc_model_free(sc_model *m) {
  if (!m) return;
  if (m->stats_begun) sc_stats_free(&m->stats);
  if (m->g) sc_graph_destroy(m->g);
  sc_free(m->path);
  sc_free(m);
}

/* ---- planning and compiling ---- */

void sc_string_free(char *s) { sc_free(s); }

static char *strdup_or_null(const char *s) { return s ? sc_strdup(s) : NULL; }

/* The plan the options describe (made once), or NULL for one rank. */
static sc_status make_plan(const sc_parallel_opts *par, sc_plan **plan, sc_diag *d) {
  *plan = NULL;
  if (!par) return SC_OK;
  if (par->plan_file || par->plan_json) {
    if (par->mesh || par->microbatches || par->ranks_per_node || par->stage_boundaries ||
        par->sequence_parallel || par->no_vocab_parallel || par->expert_tensor_parallel ||
        par->reduce_dtype ||
        par->cluster || (par->plan_file && par->plan_json))
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "a plan (plan_file or plan_json) may not be given with other parallel "
                         "options");
    sc_status st = par->plan_file
                       ? sc_plan_read_json_file(par->plan_file, NULL, plan, d)
                       : sc_plan_read_json(par->plan_json, strlen(par->plan_json), "plan_json",
                                           NULL, plan, d);
    if (st != SC_OK && !d->file[0]) sc_diag_set_file(d, par->plan_file ? par->plan_file : "plan_json");
    return st;
  }
  if (!par->mesh || !*par->mesh) {
    if (par->microbatches > 1 || par->ranks_per_node || par->stage_boundaries ||
        par->sequence_parallel || par->no_vocab_parallel || par->expert_tensor_parallel ||
        par->reduce_dtype ||
        par->cluster)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "parallel options need a mesh");
    return SC_OK;
  }
  sc_cluster cluster;
  if (par->cluster && sc_cluster_load(par->cluster, &cluster, d) != SC_OK) return d->status;
  sc_plan_options po = {.mesh = par->mesh,
                        .cluster = par->cluster ? &cluster : NULL,
                        .ranks_per_node = par->ranks_per_node,
                        .microbatches = par->microbatches,
                        .boundaries = par->stage_boundaries,
                        .sequence_parallel = par->sequence_parallel,
                        .no_vocab_parallel = par->no_vocab_parallel,
                        .expert_tensor_parallel = par->expert_tensor_parallel,
                        .reduce_dtype = par->reduce_dtype};
  return sc_plan_from_options(&po, plan, d);
}

enum { MAX_DIMS = 64 };

/* The device plan pl's programs are made for when it is reported or its
 * step predicted, as `shardc plan` makes them: a GPU cluster's CUDA device
 * (sc_device_target_of_cluster) and true, else the host's CPU and false. */
static bool plan_device(const sc_plan *pl, sc_device_target *t) {
  sc_runtime_target_host(t);
  return pl && pl->cluster && pl->cluster_figures.nodes > 0 &&
         sc_device_target_of_cluster(&pl->cluster_figures, t);
}

/* The public dim bindings as the driver's (at most MAX_DIMS, each named,
 * value > 0). */
static sc_status dims_of(const sc_dim_binding *dims, int32_t n, sc_dim_value *dv, sc_diag *d) {
  if (n < 0 || n > MAX_DIMS || (n && !dims))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "bad dims (at most %d)", MAX_DIMS);
  for (int32_t i = 0; i < n; i++) {
    if (!dims[i].name || dims[i].value <= 0)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "dim %d needs a name and a value > 0",
                         (int)i);
    dv[i] = (sc_dim_value){dims[i].name, dims[i].value};
  }
  return SC_OK;
}

/* Public host tensors as runtime views (ONNX dtype codes converted);
 * what names the tensors in errors ("input", "data"). */
static sc_status views_of(const sc_host_tensor *h, int32_t n, const char *what,
                          sc_tensor_view *out, sc_diag *d) {
  for (int32_t i = 0; i < n; i++) {
    sc_dtype t = sc_dtype_from_onnx(h[i].dtype);
    if (!h[i].name || t == SC_DTYPE_COUNT || h[i].rank < 0 || h[i].rank > SC_MAX_RANK)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "%s %d: needs a name, a known ONNX dtype and rank <= %d", what, (int)i,
                         SC_MAX_RANK);
    out[i] = (sc_tensor_view){.name = h[i].name, .dtype = t, .rank = h[i].rank,
                              .data = h[i].data};
    memcpy(out[i].dims, h[i].dims, sizeof out[i].dims);
  }
  return SC_OK;
}

/* The build of model with dims and parallel options; train: its training
 * step (passes/train.h), or NULL for inference. */
/* What a build is for: run in this process (a pipelined training step's
 * pieces update their state in place, as `shardc train` on the CPU),
 * reported (a plan's figures and predicted step: its programs made for the
 * plan's device, plan_device, as `shardc plan` makes them), or written
 * into a bundle (as `shardc compile --train` builds: nothing bound, a
 * bundle's programs copy their state into the arena). */
typedef enum { BUILD_RUN, BUILD_REPORT, BUILD_BUNDLE } build_use;

static sc_status build(const char *model, const sc_dim_binding *dims, int32_t n_dims,
                       const sc_parallel_opts *par, const sc_train_opts *train, bool no_weights,
                       bool codegen, bool no_fuse, bool quiet, build_use use, sc_build **out,
                       sc_diag *d) {
  *out = NULL;
  if (!model) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "no model path");
  sc_dim_value dv[MAX_DIMS];
  sc_status st = dims_of(dims, n_dims, dv, d);
  if (st != SC_OK) return st;
  sc_build_opts bo;
  sc_build_opts_init(&bo);
  bo.model = model;
  bo.no_weights = no_weights;
  bo.codegen = codegen;
  bo.dims = dv;
  bo.n_dims = n_dims;
  bo.train = train;
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = quiet;
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = quiet;
  co.fuse = !no_fuse;
  bo.pass = &po;
  bo.compile = &co;
  bo.plan_file = par ? par->plan_file : NULL;
  if (par && par->reduce_dtype && (!train || !(train->bf16 || train->fp16)))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "reduce_dtype '%s': the gradient reductions of a bf16 or fp16 training "
                       "step (%s)",
                       par->reduce_dtype, train ? "this step is fp32" : "this build has none");
  st = make_plan(par, &bo.plan, d);
  if (st != SC_OK) return st;
  co.bind_state = train && bo.plan && use != BUILD_BUNDLE;
  sc_device_target target;
  if (use == BUILD_REPORT && bo.plan) {
    plan_device(bo.plan, &target);
    sc_compile_opts_report(&co, &target, train != NULL);
  }
  return sc_build_run(&bo, out, d);
}

static char *format_error(const sc_diag *d) {
  char buf[2048];
  sc_diag_format(d, buf, sizeof buf);
  return sc_strdup(buf);
}

/* The build of a plan (shapes only; codegen: the stage programs too, with
 * their memory plans, no JIT). */
static sc_status plan_build(const char *model_path, const sc_dim_binding *dims, int32_t n_dims,
                            const sc_parallel_opts *parallel, bool codegen, sc_build **b,
                            sc_diag *d) {
  *b = NULL;
  if (!parallel || (!parallel->mesh && !parallel->plan_file && !parallel->plan_json))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "a plan needs a mesh");
  return build(model_path, dims, n_dims, parallel, NULL, true, codegen, false, true, BUILD_REPORT,
               b, d);
}

/* The outcome of a plan call: the text or the message. */
static sc_status plan_result(sc_status st, const char *model_path, sc_diag *d, char *text,
                             char **json, char **error) {
  if (st != SC_OK) {
    sc_free(text);
    if (error) {
      if (!d->file[0] && model_path) sc_diag_set_file(d, model_path);
      *error = format_error(d);
    }
    return st;
  }
  *json = text;
  return SC_OK;
}

sc_status sc_plan_json(const char *model_path, const sc_dim_binding *dims, int32_t n_dims,
                       const sc_parallel_opts *parallel, char **json, char **error) {
  if (json) *json = NULL;
  if (error) *error = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_build *b = NULL;
  char *text = NULL;
  sc_status st = !json ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "json is NULL")
                       : plan_build(model_path, dims, n_dims, parallel, false, &b, &d);
  if (st == SC_OK) st = sc_partition_complete_plan(b->part, b->plan, &d);
  if (st == SC_OK && !(text = sc_plan_write_json_string(b->plan, &d))) st = d.status;
  sc_build_destroy(b);
  return plan_result(st, model_path, &d, text, json, error);
}

/* The head of a report of partition part: mesh, ranks, microbatches. */
static json_t *report_head(const sc_partition *part) {
  json_t *root = json_object();
  char mesh[256];
  sc_mesh_format(&part->mesh, mesh, sizeof mesh);
  json_object_set_new(root, "mesh", json_string(mesh));
  json_object_set_new(root, "ranks", json_integer(part->mesh.n_ranks));
  json_object_set_new(root, "microbatches", json_integer(part->microbatches));
  return root;
}

/* {"stage": s, "ranks": [the ranks of stage s (their pp coordinate)]}. */
static json_t *report_stage(const sc_partition *part, int32_t s) {
  const sc_mesh *m = &part->mesh;
  json_t *o = json_object(), *ranks = json_array();
  int64_t coords[SC_MESH_MAX_AXES];
  for (int64_t k = 0; k < m->n_ranks; k++) {
    sc_mesh_rank_to_coords(m, k, coords);
    if ((part->pp_axis >= 0 ? coords[part->pp_axis] : 0) == s)
      json_array_append_new(ranks, json_integer(k));
  }
  json_object_set_new(o, "stage", json_integer(s));
  json_object_set_new(o, "ranks", ranks);
  return o;
}

/* A collective row's common keys: stage, op, axes (names), count, bytes
 * per microbatch and per step. */
static json_t *report_collective(const sc_partition *part, int32_t stage, sc_comm_kind kind,
                                 uint32_t set, int64_t count, int64_t bytes) {
  json_t *o = json_object(), *axes = json_array();
  for (int32_t a = 0; a < part->mesh.n_axes; a++)
    if (set & (1u << a)) json_array_append_new(axes, json_string(part->mesh.axes[a].name));
  json_object_set_new(o, "stage", json_integer(stage));
  json_object_set_new(o, "op", json_string((unsigned)kind < SC_COMM_KIND_COUNT
                                               ? sc_comm_kind_names[kind] : "?"));
  json_object_set_new(o, "axes", axes);
  json_object_set_new(o, "count", json_integer(count));
  json_object_set_new(o, "bytes_per_microbatch", json_integer(bytes));
  json_object_set_new(o, "bytes_per_step", json_integer(bytes * part->microbatches));
  return o;
}

/* b's predicted step as "predicted" in root, after the command's call
 * predicted it (sc_plan_infer_predict, sc_plan_train_predict: the largest
 * rank's memory on the plan's device, plan_device): its JSON object
 * (docs/plan-format.md) with the cluster's name; null without a cluster. */
static void report_predicted(const sc_build *b, json_t *root) {
  const sc_plan *pl = b->plan;
  if (!pl || !pl->predicted.on) {
    json_object_set_new(root, "predicted", json_null());
    return;
  }
  json_t *o = sc_plan_predicted_json(&pl->predicted);
  json_object_set_new(o, "cluster", json_string(pl->cluster));
  json_object_set_new(root, "predicted", o);
}

/* root with its stages and collectives, as JSON text (NULL: no memory). */
static char *report_text(json_t *root, json_t *stages, json_t *coll) {
  json_object_set_new(root, "stages", stages);
  json_object_set_new(root, "collectives", coll);
  char *dumped = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  char *text = dumped ? sc_strdup(dumped) : NULL;
  free(dumped);
  return text;
}

/* The report of build b (plan_report.h) as JSON text. */
static char *report_json(const sc_build *b, const sc_plan_report *r) {
  const sc_partition *part = b->part;
  json_t *root = report_head(part), *stages = json_array(), *coll = json_array();
  for (int32_t s = 0; s < r->n_stages; s++) {
    const sc_stage_memory *sm = &r->mem[s];
    json_t *o = report_stage(part, s);
    int64_t act = sm->arena_bytes - sm->comm_bytes;
    json_object_set_new(o, "weight_bytes", json_integer(sm->weight_bytes));
    json_object_set_new(o, "activation_bytes", json_integer(act > 0 ? act : 0));
    json_object_set_new(o, "comm_bytes", json_integer(sm->comm_bytes));
    json_object_set_new(o, "total_bytes", json_integer(sm->weight_bytes + sm->arena_bytes));
    json_array_append_new(stages, o);
  }
  for (int32_t i = 0; i < r->n_coll; i++) {
    const sc_collective_row *c = &r->coll[i];
    json_array_append_new(coll, report_collective(part, c->stage, c->kind, c->axes, c->ops,
                                                  c->bytes));
  }
  sc_device_target target;
  plan_device(b->plan, &target);
  sc_plan_infer_predict(b, &target);
  report_predicted(b, root);
  return report_text(root, stages, coll);
}

sc_status sc_plan_report_json(const char *model_path, const sc_dim_binding *dims,
                              int32_t n_dims, const sc_parallel_opts *parallel, char **json,
                              char **error) {
  if (json) *json = NULL;
  if (error) *error = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_build *b = NULL;
  sc_plan_report r = {0};
  char *text = NULL;
  sc_status st = !json ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "json is NULL")
                       : plan_build(model_path, dims, n_dims, parallel, true, &b, &d);
  if (st == SC_OK && sc_plan_report_gather(b, &r) != SC_OK)
    st = sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK && !(text = report_json(b, &r)))
    st = sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_plan_report_free(&r);
  sc_build_destroy(b);
  return plan_result(st, model_path, &d, text, json, error);
}

/* comm: "local" (NULL), "mpi" or "tcp" (sc_run_opts.comm). */
/* The communicator called comm (NULL: "local"), from the table shardc's
 * --comm reads (runtime/comm.h); the API runs CPU executables, so a kind
 * that needs the GPU runtime is a usage error saying so. */
static sc_status check_comm(const char *comm, const sc_comm_choice **kind, sc_diag *d) {
  const sc_comm_choice *k = sc_comm_choice_find(comm ? comm : "local");
  if (!k)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "comm '%s': expected %s", comm,
                       sc_comm_choice_names());
  if (k->gpu_only)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "comm '%s' needs a cuda executable run on "
                       "the GPU (%s); this one runs on the CPU", comm, k->gpu_only);
  if (kind) *kind = k;
  return SC_OK;
}

/* This process's rank of a job of n_ranks processes of world kind k:
 * under mpirun ("mpi") or torchrun / srun ("tcp": the handshake admits
 * only processes running the same program, dp and its training manifest m
 * or NULL). */
static sc_status open_world(const sc_comm_choice *k, const sc_dist_program *dp,
                            const sc_train_manifest *m, struct sc_comm **world, sc_diag *d) {
  char hash[65], option[64];
  sc_status st = sc_dist_program_hash(dp, m, hash, d);
  if (st == SC_OK) st = sc_comm_world_create(k, hash, world, d);
  snprintf(option, sizeof option, "comm '%s'", k->name);
  if (st == SC_OK) st = sc_comm_world_check(k, option, *world, dp->mesh.n_ranks, d);
  return st;
}

struct sc_executable {
  sc_build *build;            /* compiled here: owns the program */
  sc_dist_program *loaded;    /* or loaded from a bundle */
  const sc_dist_program *dp;  /* the one of the two */
  sc_target_kind target;
  char *archs;                /* cuda */
  char *model;                /* file name recorded in saved manifests */
  struct sc_comm *world;      /* mpi or tcp: kept until free (MPI starts once) */
  sc_diag diag;               /* the last failure */
  char error[2048];
};

static sc_status exe_fail(sc_executable *e, const sc_diag *d) {
  e->diag = *d;
  return d->status;
}

static sc_executable *exe_new(void) {
  sc_executable *e = sc_calloc(1, sizeof *e);
  if (e) sc_diag_clear(&e->diag);
  return e;
}

sc_status sc_compile(const char *model_path, const sc_compile_settings *opts,
                     sc_executable **out) {
  if (!out) return SC_ERR_USAGE;
  sc_executable *e = *out = exe_new();
  if (!e) return SC_ERR_NOMEM;
  sc_compile_settings none;
  memset(&none, 0, sizeof none);
  if (!opts) opts = &none;
  sc_diag d = {0};
  sc_diag_clear(&d);
  e->target = opts->target;
  if (opts->target != SC_TARGET_CPU && opts->target != SC_TARGET_CUDA)
    return exe_fail(e, &(sc_diag){.status = SC_ERR_USAGE, .msg = "unknown target"});
  bool partitioned = (opts->parallel.mesh && *opts->parallel.mesh) || opts->parallel.plan_file ||
                     opts->parallel.plan_json;
  if (opts->target == SC_TARGET_CUDA && partitioned) {
    sc_diag_set(&d, SC_ERR_UNSUPPORTED, NULL, NULL,
                "a partitioned program is cpu only (the GPU runtime is not built yet)");
    return exe_fail(e, &d);
  }
  e->archs = strdup_or_null(opts->gpu_archs);
  const char *slash = model_path ? strrchr(model_path, '/') : NULL;
  e->model = strdup_or_null(slash ? slash + 1 : model_path);
  sc_status st = build(model_path, opts->dims, opts->n_dims, &opts->parallel, NULL, false, true,
                       opts->no_fuse, opts->quiet, BUILD_RUN, &e->build, &d);
  if (st != SC_OK) {
    if (!d.file[0] && model_path) sc_diag_set_file(&d, model_path);
    return exe_fail(e, &d);
  }
  e->dp = e->build->program;
  return SC_OK;
}

sc_status sc_executable_save(sc_executable *e, const char *dir) {
  if (!e || !e->dp || !dir) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (!e->build) {
    sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "a loaded executable is saved already");
    return exe_fail(e, &d);
  }
  sc_bundle_opts bo;
  sc_bundle_opts_init(&bo);
  bo.target = e->target == SC_TARGET_CUDA ? SC_BUNDLE_CUDA : SC_BUNDLE_CPU;
  bo.archs = e->archs;
  bo.model = e->model;
  const sc_dist_program *dp = e->dp;
  sc_status st = dp->mesh.n_axes > 0 ? sc_dist_program_write(dp, &bo, dir, &d)
                                     : sc_bundle_write(dp->stages[0].program, &bo, dir, &d);
  return st == SC_OK ? SC_OK : exe_fail(e, &d);
}

sc_status sc_executable_load(const char *dir, sc_executable **out) {
  if (!out) return SC_ERR_USAGE;
  sc_executable *e = *out = exe_new();
  if (!e) return SC_ERR_NOMEM;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = !dir ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "no directory")
                      : sc_dist_program_load(dir, &e->loaded, &d);
  if (st == SC_OK) st = sc_bundle_kind_check(e->loaded->train != NULL, false, &d);
  if (st != SC_OK) {
    if (!d.file[0] && dir) sc_diag_set_file(&d, dir);
    return exe_fail(e, &d);
  }
  e->dp = e->loaded;
  return SC_OK;
}

int32_t sc_executable_n_inputs(const sc_executable *e) {
  return e && e->dp ? e->dp->n_inputs : 0;
}
int32_t sc_executable_n_outputs(const sc_executable *e) {
  return e && e->dp ? e->dp->n_outputs : 0;
}
int64_t sc_executable_n_ranks(const sc_executable *e) {
  return e && e->dp ? e->dp->mesh.n_ranks : 0;
}
int32_t sc_executable_n_stages(const sc_executable *e) {
  return e && e->dp ? e->dp->n_stages : 0;
}

/* A global value as a host tensor: the full batch (dim 0 times M). */
static sc_status describe(const sc_executable *e, const sc_dist_value *v, sc_host_tensor *out) {
  memset(out, 0, sizeof *out);
  out->name = v->name;
  out->dtype = sc_dtype_to_onnx(v->dtype);
  out->rank = v->rank;
  memcpy(out->dims, v->dims, sizeof v->dims);
  if (v->rank > 0) out->dims[0] *= e->dp->schedule.microbatches;
  return SC_OK;
}

sc_status sc_executable_input(const sc_executable *e, int32_t i, sc_host_tensor *out) {
  if (!e || !e->dp || !out || i < 0 || i >= e->dp->n_inputs) return SC_ERR_USAGE;
  return describe(e, &e->dp->inputs[i], out);
}

sc_status sc_executable_output(const sc_executable *e, int32_t i, sc_host_tensor *out) {
  if (!e || !e->dp || !out || i < 0 || i >= e->dp->n_outputs) return SC_ERR_USAGE;
  return describe(e, &e->dp->outputs[i], out);
}

void sc_host_tensors_free(sc_host_tensor *t, int32_t n) {
  for (int32_t i = 0; t && i < n; i++) {
    sc_free(t[i].data);
    t[i].data = NULL;
  }
}

enum { MAX_TENSORS = 4096 };

sc_status sc_executable_run(sc_executable *e, const sc_run_opts *opts,
                            const sc_host_tensor *inputs, int32_t n_inputs,
                            sc_host_tensor *outputs, int32_t n_outputs) {
  if (!e) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (!e->dp)
    return exe_fail(e, &(sc_diag){.status = SC_ERR_USAGE, .msg = "nothing compiled"});
  if (e->target == SC_TARGET_CUDA) {
    sc_diag_set(&d, SC_ERR_UNSUPPORTED, NULL, NULL,
                "a cuda executable: save it; the GPU runtime is not built yet");
    return exe_fail(e, &d);
  }
  const sc_dist_program *dp = e->dp;
  if (n_inputs < 0 || n_inputs > MAX_TENSORS || (n_inputs && !inputs) ||
      n_outputs != dp->n_outputs || (n_outputs && !outputs)) {
    sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL,
                "%d inputs and %d outputs given; the model has %d outputs", (int)n_inputs,
                (int)n_outputs, (int)dp->n_outputs);
    return exe_fail(e, &d);
  }
  const char *comm = opts && opts->comm ? opts->comm : "local";
  const sc_comm_choice *kind = NULL;
  if (check_comm(comm, &kind, &d) != SC_OK) return exe_fail(e, &d);
  sc_tensor_view *in = sc_calloc((size_t)n_inputs + 1, sizeof *in);
  sc_dist_output *out = sc_calloc((size_t)n_outputs + 1, sizeof *out);
  sc_status st = in && out ? SC_OK : sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK) st = views_of(inputs, n_inputs, "input", in, &d);
  sc_dist_opts o;
  sc_dist_opts_init(&o);
  o.threads = opts ? opts->threads : 0;
  o.quiet = true;
  if (st == SC_OK && kind->world) {
    if (e->world && strcmp(sc_comm_backend(e->world), kind->name) != 0)
      st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "comm '%s': this executable already runs "
                       "over '%s'", comm, sc_comm_backend(e->world));
    if (st == SC_OK && !e->world) st = open_world(kind, dp, NULL, &e->world, &d);
    if (st == SC_OK)
      st = sc_dist_run_rank(dp, &o, e->world, in, n_inputs, out, n_outputs, NULL, &d);
  } else if (st == SC_OK) {
    st = sc_dist_run_local(dp, &o, in, n_inputs, out, n_outputs, NULL, &d);
  }
  for (int32_t k = 0; st == SC_OK && k < n_outputs; k++) {
    sc_host_tensor *h = &outputs[k];
    describe(e, &dp->outputs[k], h);
    h->data = out[k].data; /* moved; NULL for another rank's output */
    if (h->data) {
      h->rank = out[k].rank;
      memcpy(h->dims, out[k].dims, sizeof h->dims);
    }
  }
  if (st != SC_OK)
    for (int32_t k = 0; out && k < n_outputs; k++) sc_free(out[k].data);
  sc_free(in);
  sc_free(out);
  return st == SC_OK ? SC_OK : exe_fail(e, &d);
}

const char *sc_executable_error(const sc_executable *e) {
  if (!e) return "out of memory";
  sc_executable *m = (sc_executable *)e; /* the buffer is a cache */
  return cached_error(&e->diag, m->error, sizeof m->error);
}

void sc_executable_free(sc_executable *e) {
  if (!e) return;
  sc_comm_destroy(e->world);
  sc_build_destroy(e->build);
  sc_dist_program_destroy(e->loaded);
  sc_free(e->archs);
  sc_free(e->model);
  sc_free(e);
}

/* ---- training ---- */

void sc_training_settings_init(sc_training_settings *s, const char *optimizer) {
  memset(s, 0, sizeof *s);
  bool adamw = optimizer && strcmp(optimizer, "adamw") == 0;
  sc_train_opts o;
  sc_train_opts_init(&o, adamw ? SC_OPTIMIZER_ADAMW : SC_OPTIMIZER_SGD);
  s->loss = "cross-entropy";
  s->ignore_index = o.ignore_index;
  s->optimizer = adamw ? "adamw" : "sgd";
  s->weight_decay = o.weight_decay;
  s->beta1 = o.beta1;
  s->beta2 = o.beta2;
  s->eps = o.eps;
}

/* A training step, built from a model (build, own: its manifest) or loaded
 * from a training bundle (bundle, which owns its manifest; or loaded, a
 * partitioned one, which owns its manifest and every stage's kernels): p
 * and m are the one or the other's. */
struct sc_training {
  sc_build *build;
  sc_train_manifest *own;
  char *model;          /* the model's file name, for a saved bundle */
  sc_bundle *bundle;
  sc_dist_program *loaded;
  const sc_program *p;
  const sc_train_manifest *m;
  sc_trainer *trainer;
  sc_dist_trainer *dist;  /* or, over a mesh, every rank's (this process's) */
  struct sc_comm *world;  /* mpi, tcp: this process's rank of the job */
  void *state_copy;       /* a mesh: sc_training_tensor's global copy */
  int64_t steps;
  sc_diag diag;
  char error[2048];
};

static sc_status train_fail(sc_training *t, const sc_diag *d) {
  t->diag = *d;
  return d->status;
}

/* The public settings as the pass's options (o->aux in aux[SC_TRAIN_MAX_AUX]). */
static sc_status train_opts_of(const sc_training_settings *s, sc_train_opts *o, sc_aux_loss *aux,
                               sc_diag *d) {
  bool adamw = s->optimizer && strcmp(s->optimizer, "adamw") == 0;
  if (s->optimizer && !adamw && strcmp(s->optimizer, "sgd") != 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "optimizer '%s': expected sgd or adamw",
                       s->optimizer);
  sc_train_opts_init(o, adamw ? SC_OPTIMIZER_ADAMW : SC_OPTIMIZER_SGD);
  const char *loss = s->loss ? s->loss : "cross-entropy";
  o->logits = s->logits;
  if (strcmp(loss, "cross-entropy") == 0) o->loss = SC_LOSS_CROSS_ENTROPY;
  else if (strcmp(loss, "mse") == 0) o->loss = SC_LOSS_MSE;
  else if (strncmp(loss, "output:", 7) == 0 && loss[7]) {
    o->loss = SC_LOSS_OUTPUT;
    o->logits = loss + 7;
  } else
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "loss '%s': expected cross-entropy, mse or output:NAME", loss);
  o->ignore_index = s->ignore_index;
  o->momentum = s->momentum;
  o->nesterov = s->nesterov;
  o->weight_decay = s->weight_decay;
  o->beta1 = s->beta1;
  o->beta2 = s->beta2;
  o->eps = s->eps;
  o->clip_grad_norm = s->clip_grad_norm;
  o->freeze = s->freeze;
  o->n_freeze = s->n_freeze;
  if (s->n_aux_losses < 0 || s->n_aux_losses > SC_TRAIN_MAX_AUX ||
      (s->n_aux_losses && (!s->aux_loss_names || !s->aux_loss_coefs)))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "aux losses: %d (at most %d, with names and "
                       "coefficients)", (int)s->n_aux_losses, SC_TRAIN_MAX_AUX);
  for (int32_t k = 0; k < s->n_aux_losses; k++) {
    if (!s->aux_loss_names[k])
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "aux loss %d has no name", (int)k);
    aux[k] = (sc_aux_loss){s->aux_loss_names[k], s->aux_loss_coefs[k]};
  }
  o->aux = aux;
  o->n_aux = s->n_aux_losses;
  const char *prec = s->precision ? s->precision : "fp32";
  if (strcmp(prec, "fp32") != 0 && strcmp(prec, "bf16") != 0 && strcmp(prec, "fp16") != 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "precision '%s': expected fp32, bf16 or fp16", prec);
  o->bf16 = strcmp(prec, "bf16") == 0;
  o->fp16 = strcmp(prec, "fp16") == 0;
  static const char *const recompute[] = {"none", "selective", "full"}; /* sc_recompute_kind */
  const char *rc = s->recompute ? s->recompute : "none";
  int k = 0;
  while (k < 3 && strcmp(rc, recompute[k]) != 0) k++;
  if (k == 3)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "recompute '%s': expected none, selective or full", rc);
  o->recompute = (sc_recompute_kind)k;
  if (s->weight_decay < 0 || s->momentum < 0 || s->beta1 < 0 || s->beta1 >= 1 ||
      s->beta2 < 0 || s->beta2 >= 1 || s->eps < 0 || s->clip_grad_norm < 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "training settings out of range (negative, or a beta not in [0, 1))");
  return SC_OK;
}

/* The training step of settings s built from model_path (*b; o: the
 * pass's options, which the manifest reads, its auxiliary losses in
 * aux[SC_TRAIN_MAX_AUX]), on one rank or partitioned over s->parallel. */
static sc_status training_build(const char *model_path, const sc_training_settings *s,
                                sc_train_opts *o, sc_aux_loss *aux, build_use use,
                                sc_build **b, sc_diag *d) {
  *b = NULL;
  sc_status st = !s ? sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "no settings")
                    : train_opts_of(s, o, aux, d);
  if (st == SC_OK) st = check_comm(s->comm, NULL, d);
  if (st != SC_OK) return st;
  return build(model_path, s->dims, s->n_dims, &s->parallel, o, false, true, false, true,
               use, b, d);
}

sc_status sc_training_create(const char *model_path, const sc_training_settings *s,
                             sc_training **out) {
  if (!out) return SC_ERR_USAGE;
  sc_training *t = *out = sc_calloc(1, sizeof *t);
  if (!t) return SC_ERR_NOMEM;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_train_opts o;
  sc_aux_loss aux[SC_TRAIN_MAX_AUX];
  sc_status st = training_build(model_path, s, &o, aux, BUILD_RUN, &t->build, &d);
  if (st == SC_OK) st = sc_build_train_manifest(t->build, &o, &t->own, &d);
  if (st == SC_OK) {
    const char *slash = strrchr(model_path, '/');
    t->model = strdup_or_null(slash ? slash + 1 : model_path);
    t->p = t->build->program->stages[0].program;
    t->m = t->own;
    sc_trainer_opts to = {.threads = s->threads};
    const char *comm = s->comm ? s->comm : "local";
    const sc_comm_choice *kind = sc_comm_choice_find(comm); /* checked by the build */
    if (!t->build->part && kind->world)
      st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "comm '%s' needs a mesh", comm);
    else if (!t->build->part)
      st = sc_trainer_create_manifest(t->p, t->m, &to, &t->trainer, &d);
    else {
      if (kind->world) st = open_world(kind, t->build->program, t->m, &t->world, &d);
      if (st == SC_OK)
        st = sc_dist_trainer_create(t->build->program, t->m, &to, t->world, &t->dist, &d);
    }
  }
  if (st != SC_OK) {
    if (!d.file[0] && model_path) sc_diag_set_file(&d, model_path);
    return train_fail(t, &d);
  }
  return SC_OK;
}

/* The report of a training build as JSON text: per stage program the
 * arena's classes at its peak (driver/train_memory.h) and its collectives
 * with the bytes a rank sends. */
static sc_status train_report_json(const sc_build *b, const sc_train_opts *train, char **text,
                                   sc_diag *d) {
  const sc_partition *part = b->part;
  json_t *root = report_head(part), *stages = json_array(), *coll = json_array();
  sc_status st = SC_OK;
  for (int32_t s = 0; st == SC_OK && s < b->program->n_stages; s++) {
    const sc_program *p = b->program->stages[s].program;
    if (!p) continue;
    sc_train_memory tm;
    sc_train_comm *rows = NULL;
    int32_t n = 0;
    st = sc_train_memory_of(p, &tm, d);
    if (st == SC_OK) st = sc_train_comm_of(p, &rows, &n, d);
    if (st != SC_OK) break;
    json_t *o = report_stage(part, s), *lines = json_object();
    for (int c = 0; c < SC_MEM_CLASS_COUNT; c++)
      json_object_set_new(lines, sc_mem_class_name((sc_mem_class)c), json_integer(tm.live[c]));
    json_object_set_new(lines, "arena", json_integer(tm.arena));
    json_object_set_new(lines, "constants", json_integer(tm.constants));
    json_object_set_new(o, "lines", lines);
    json_object_set_new(o, "total_bytes", json_integer(tm.arena + tm.constants));
    json_array_append_new(stages, o);
    for (int32_t i = 0; i < n; i++) {
      json_t *c = report_collective(part, s, rows[i].kind, rows[i].axes, rows[i].ops,
                                    rows[i].bytes);
      json_object_set_new(c, "group", json_integer(rows[i].group_size));
      json_object_set_new(c, "sent_bytes", json_integer(rows[i].sent));
      json_array_append_new(coll, c);
    }
    sc_free(rows);
  }
  sc_device_target target;
  plan_device(b->plan, &target);
  if (st == SC_OK) st = sc_plan_train_predict(b, train, &target, d);
  if (st != SC_OK) {
    json_decref(root);
    json_decref(stages);
    json_decref(coll);
    return st;
  }
  report_predicted(b, root);
  *text = report_text(root, stages, coll);
  return *text ? SC_OK : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

sc_status sc_training_plan_json(const char *model_path, const sc_training_settings *s,
                                char **plan_json, char **report_json, char **error) {
  if (plan_json) *plan_json = NULL;
  if (report_json) *report_json = NULL;
  if (error) *error = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_build *b = NULL;
  sc_train_opts o;
  sc_aux_loss aux[SC_TRAIN_MAX_AUX];
  char *plan = NULL, *report = NULL;
  sc_status st = !plan_json || !report_json
                     ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "plan_json or report_json is NULL")
                 : !s || (!s->parallel.mesh && !s->parallel.plan_file && !s->parallel.plan_json)
                     ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "a plan needs a mesh")
                     : training_build(model_path, s, &o, aux, BUILD_REPORT, &b, &d);
  if (st == SC_OK) st = sc_partition_complete_plan(b->part, b->plan, &d);
  if (st == SC_OK && !(plan = sc_plan_write_json_string(b->plan, &d))) st = d.status;
  if (st == SC_OK) st = train_report_json(b, &o, &report, &d);
  sc_build_destroy(b);
  if (st != SC_OK) sc_free(report);
  else *report_json = report;
  return plan_result(st, model_path, &d, plan, plan_json, error);
}

sc_status sc_training_load(const char *dir, int threads, sc_training **out) {
  if (!out) return SC_ERR_USAGE;
  sc_training *t = *out = sc_calloc(1, sizeof *t);
  if (!t) return SC_ERR_NOMEM;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_trainer_opts to = {.threads = threads};
  sc_status st = SC_OK;
  if (!dir) st = sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "no directory");
  else if (sc_dist_bundle_is_dir(dir)) { /* partitioned: its ranks threads of this process */
    st = sc_dist_program_load(dir, &t->loaded, &d);
    if (st == SC_OK) st = sc_bundle_kind_check(t->loaded->train != NULL, true, &d);
    if (st == SC_OK) {
      t->p = t->loaded->stages[0].program;
      t->m = t->loaded->train;
      st = sc_dist_trainer_create(t->loaded, t->m, &to, NULL, &t->dist, &d);
    }
  } else {
    st = sc_bundle_load(dir, &t->bundle, &d);
    if (st == SC_OK) st = sc_bundle_check_kind(t->bundle, true, &d);
    if (st == SC_OK) {
      t->p = t->bundle->program;
      t->m = t->bundle->train;
      to.cpu_module = t->bundle->kernels;
      to.cuda = sc_bundle_cuda_code(t->bundle); /* a cuda bundle trains on the GPU */
      if (to.cuda.source) to.device.name = "cuda";
      st = sc_trainer_create_manifest(t->p, t->m, &to, &t->trainer, &d);
    }
  }
  if (st != SC_OK) {
    if (!d.file[0] && dir) sc_diag_set_file(&d, dir);
    return train_fail(t, &d);
  }
  return SC_OK;
}

/* The bundle of build b (one rank: sc_bundle_write; a mesh: the
 * partitioned one, sc_dist_program_write), the training manifest m in it;
 * model_path's file name recorded as the model. */
static sc_status write_training_bundle(const sc_build *b, const sc_train_manifest *m,
                                       const char *model_path, const char *dir, sc_diag *d) {
  sc_bundle_opts bo;
  sc_bundle_opts_init(&bo);
  const char *slash = model_path ? strrchr(model_path, '/') : NULL;
  bo.model = slash ? slash + 1 : model_path;
  bo.train = m;
  return b->part ? sc_dist_program_write(b->program, &bo, dir, d)
                 : sc_bundle_write(b->program->stages[0].program, &bo, dir, d);
}

sc_status sc_training_save_bundle(sc_training *t, const char *dir) {
  if (!t || !(t->trainer || t->dist) || !dir) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (!t->build) {
    sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "a loaded training is saved already");
    return train_fail(t, &d);
  }
  /* over a mesh: the partitioned training bundle of `shardc compile
   * --train --mesh` (codegen/dist_bundle.h), every rank's shards cut from
   * the model's initial weights, which the build keeps. A pipelined step's
   * pieces were built to update their state in place (BUILD_RUN), which a
   * bundle's programs do not: sc_training_bundle_write builds that one
   * again for the bundle. */
  if (t->build->part && t->build->part->n_chunks > 0) {
    sc_diag_set(&d, SC_ERR_UNSUPPORTED, NULL, NULL,
                "a pipelined training (pp > 1) is built to update its state in place; "
                "sc_training_bundle_write builds its bundle from the model");
    return train_fail(t, &d);
  }
  sc_status st = write_training_bundle(t->build, t->m, t->model, dir, &d);
  return st == SC_OK ? SC_OK : train_fail(t, &d);
}

sc_status sc_training_bundle_write(const char *model_path, const sc_training_settings *s,
                                   const char *dir, char **error) {
  if (error) *error = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_build *b = NULL;
  sc_train_opts o;
  sc_aux_loss aux[SC_TRAIN_MAX_AUX];
  sc_train_manifest *m = NULL;
  sc_status st = !model_path || !dir
                     ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "no model path or directory")
                     : training_build(model_path, s, &o, aux, BUILD_BUNDLE, &b, &d);
  if (st == SC_OK) st = sc_build_train_manifest(b, &o, &m, &d);
  if (st == SC_OK) st = write_training_bundle(b, m, model_path, dir, &d);
  sc_train_manifest_destroy(m);
  sc_build_destroy(b);
  if (st != SC_OK && error) {
    if (!d.file[0] && model_path) sc_diag_set_file(&d, model_path);
    *error = format_error(&d);
  }
  return st;
}

sc_status sc_training_step(sc_training *t, const sc_host_tensor *data, int32_t n_data,
                           double lr, double *loss, double *grad_norm) {
  if (!t) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (!t->trainer && !t->dist)
    return train_fail(t, &(sc_diag){.status = SC_ERR_USAGE, .msg = "nothing built"});
  if (n_data < 0 || n_data > MAX_TENSORS || (n_data && !data) || !isfinite(lr)) {
    sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "bad data or learning rate");
    return train_fail(t, &d);
  }
  sc_tensor_view *in = sc_calloc((size_t)n_data + 1, sizeof *in);
  if (!in) return train_fail(t, &(sc_diag){.status = SC_ERR_NOMEM, .msg = "out of memory"});
  sc_status st = views_of(data, n_data, "data", in, &d);
  double l = 0, n = 0;
  bool applied = true;
  if (st == SC_OK)
    st = t->dist ? sc_dist_trainer_step(t->dist, in, n_data, lr, t->steps + 1, &l, &n, &applied,
                                        &d)
                 : sc_trainer_step(t->trainer, in, n_data, lr, t->steps + 1, &l, &n, &applied, &d);
  sc_free(in);
  if (st == SC_OK && !applied)
    st = sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL,
                     "step %lld: the loss is %g and the gradient norm %g: not applied",
                     (long long)(t->steps + 1), l, n);
  if (loss) *loss = l;
  if (grad_norm) *grad_norm = n;
  if (st != SC_OK) return train_fail(t, &d);
  t->steps++;
  return SC_OK;
}

int64_t sc_training_steps_done(const sc_training *t) { return t ? t->steps : 0; }

double sc_learning_rate(const char *schedule, double lr, double min_lr, int64_t warmup,
                        int64_t total, int64_t step) {
  const char *s = schedule ? schedule : "constant";
  sc_lr_schedule k = strcmp(s, "constant") == 0 ? SC_LR_CONSTANT
                     : strcmp(s, "cosine") == 0 ? SC_LR_COSINE
                     : strcmp(s, "linear") == 0 ? SC_LR_LINEAR
                                                : (sc_lr_schedule)-1;
  if ((int)k < 0 || step < 1) return NAN;
  return sc_lr_at(k, lr, min_lr, warmup, total, step);
}

sc_status sc_training_tensor(const sc_training *t, const char *name, sc_host_tensor *out) {
  if (!t || !(t->trainer || t->dist) || !name || !out) return SC_ERR_USAGE;
  if (t->dist) { /* the global tensor, gathered from the ranks' pieces */
    sc_training *m = (sc_training *)t; /* the copy is a cache */
    sc_tensor_view v;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_dist_trainer_state(m->dist, name, &v, &d) != SC_OK) return d.status;
    sc_free(m->state_copy);
    m->state_copy = v.data;
    memset(out, 0, sizeof *out);
    out->name = v.name;
    out->dtype = sc_dtype_to_onnx(v.dtype);
    out->rank = v.rank;
    memcpy(out->dims, v.dims, sizeof out->dims);
    out->data = v.data;
    return SC_OK;
  }
  const sc_buffer *b = NULL;
  const void *data = sc_trainer_state(t->trainer, name, &b);
  if (!data) return SC_ERR_USAGE;
  memset(out, 0, sizeof *out);
  out->name = b->name;
  out->dtype = sc_dtype_to_onnx(b->dtype);
  out->rank = b->rank;
  memcpy(out->dims, b->dims, sizeof out->dims);
  out->data = (void *)data;
  return SC_OK;
}

const char *sc_training_error(const sc_training *t) {
  if (!t) return "out of memory";
  sc_training *m = (sc_training *)t; /* the buffer is a cache */
  return cached_error(&t->diag, m->error, sizeof m->error);
}

void sc_training_free(sc_training *t) {
  if (!t) return;
  sc_trainer_destroy(t->trainer);
  sc_dist_trainer_destroy(t->dist);
  sc_comm_destroy(t->world);
  sc_free(t->state_copy);
  sc_train_manifest_destroy(t->own);
  sc_build_destroy(t->build);
  sc_bundle_destroy(t->bundle);
  sc_dist_program_destroy(t->loaded);
  sc_free(t->model);
  sc_free(t);
}

static const char *training_optimizer(const sc_training *t) { return t->m->optimizer; }

sc_status sc_training_save(sc_training *t, const char *dir) {
  if (!t || !(t->trainer || t->dist) || !dir) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  int64_t growth = 0;
  double scale = t->dist ? sc_dist_trainer_loss_scale(t->dist, &growth)
                         : sc_trainer_loss_scale(t->trainer, &growth);
  sc_ckpt_state cs = {.step = t->steps, .schedule_position = t->steps, .loss_scale = scale,
                      .loss_scale_growth = growth, .optimizer = training_optimizer(t)};
  sc_status st = t->dist ? sc_dist_trainer_save(t->dist, dir, &cs, &d)
                         : sc_trainer_save(t->trainer, dir, &cs, &d);
  return st == SC_OK ? SC_OK : train_fail(t, &d);
}

sc_status sc_training_resume(sc_training *t, const char *dir) {
  if (!t || !(t->trainer || t->dist) || !dir) return SC_ERR_USAGE;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_ckpt *c = NULL;
  sc_status st = sc_ckpt_load(dir, &c, &d);
  if (st == SC_OK && strcmp(sc_ckpt_state_of(c)->optimizer, training_optimizer(t)) != 0)
    st = sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL, "the checkpoint was trained with %s, not %s",
                     sc_ckpt_state_of(c)->optimizer, training_optimizer(t));
  if (st == SC_OK)
    st = t->dist ? sc_dist_trainer_restore(t->dist, c, &d) : sc_trainer_restore(t->trainer, c, &d);
  if (st == SC_OK) {
    const sc_ckpt_state *cs = sc_ckpt_state_of(c);
    t->steps = cs->step;
    if (t->dist) sc_dist_trainer_set_loss_scale(t->dist, cs->loss_scale, cs->loss_scale_growth);
    else sc_trainer_set_loss_scale(t->trainer, cs->loss_scale, cs->loss_scale_growth);
  }
  sc_ckpt_destroy(c);
  if (st != SC_OK && !d.file[0]) sc_diag_set_file(&d, dir);
  return st == SC_OK ? SC_OK : train_fail(t, &d);
}

sc_status sc_export_checkpoint(const char *checkpoint_dir, const char *model_path,
                               const char *out_path, char **error) {
  if (error) *error = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_ckpt *c = NULL;
  sc_graph *g = NULL;
  sc_status st = !checkpoint_dir || !model_path || !out_path
                     ? sc_diag_set(&d, SC_ERR_USAGE, NULL, NULL, "a path is NULL")
                     : sc_ckpt_load(checkpoint_dir, &c, &d);
  if (st != SC_OK && !d.file[0] && checkpoint_dir) sc_diag_set_file(&d, checkpoint_dir);
  sc_import_opts io = {.no_weights = false};
  if (st == SC_OK) st = sc_onnx_import(model_path, &io, &g, &d);
  /* tied copies (passes/train.h) are no parameters: found in the model as
   * trained, written below as their source's transpose */
  sc_train_tie *ties = NULL;
  int32_t n_ties = 0;
  if (st == SC_OK) st = sc_train_find_ties(g, &ties, &n_ties, &d);
  for (int32_t k = 0; st == SC_OK && k < sc_ckpt_count(c, SC_CKPT_WEIGHTS); k++) {
    const sc_ckpt_tensor *w = sc_ckpt_tensor_at(c, SC_CKPT_WEIGHTS, k);
    int32_t id = sc_graph_find_value(g, w->name);
    const sc_value *v = id >= 0 ? &g->values[id] : NULL;
    bool same = v && (v->flags & SC_VALUE_CONST) && v->dtype == w->dtype && v->rank == w->rank;
    for (int32_t i = 0; same && i < v->rank; i++) same = v->dims[i] == w->dims[i];
    if (!same) {
      st = sc_diag_set(&d, SC_ERR_INVALID, NULL, NULL,
                       "checkpoint weight '%s' is not an initializer of this dtype and shape "
                       "in the model", w->name);
      sc_diag_set_file(&d, model_path);
      break;
    }
    int64_t numel = 1;
    for (int32_t i = 0; i < w->rank; i++) numel *= w->dims[i];
    uint32_t flags = g->values[id].flags;
    st = sc_value_set_data(g, id, w->dtype, w->rank, w->dims, w->data,
                           (uint64_t)numel * sc_dtype_size(w->dtype), true);
    g->values[id].flags |= flags & (SC_VALUE_CONST | SC_VALUE_PARAM);
    g->values[id].ext_location = NULL; /* embedded now */
    if (st != SC_OK) d = g->diag;
  }
  for (int32_t k = 0; st == SC_OK && k < n_ties; k++) /* trained --untie: they are weights */
    if (!sc_ckpt_find(c, SC_CKPT_WEIGHTS, ties[k].name)) st = sc_train_tie_refresh(g, &ties[k], &d);
  if (st == SC_OK) st = sc_onnx_export(g, out_path, &d);
  sc_graph_destroy(g);
  sc_ckpt_destroy(c);
  if (st != SC_OK && error) *error = format_error(&d);
  return st;
}
