/* driver.c — the compiler's pipeline (driver.h), listed once.
 *
 * `pipeline` below is the whole compiler at a glance, the way QBE's main.c
 * lists its passes: each step is a function over the build state, run in
 * order, timed, and stopped at the first failure. The steps only call the
 * modules that own the work (frontend/, passes/, codegen/); the state they
 * hand on is sc_build plus a few fields of `job`.
 *
 * Invariants: the plan exists before the model is read (the caller made
 * it, so a bad --mesh fails before any import); the canonical
 * passes run once on the whole model; stage graphs are compiled with
 * skip_canonical off (they are new graphs) but the one-rank graph with it
 * on (it already went through them). */
#include "driver/driver.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "codegen/dist_sim.h"
#include "frontend/onnx.h"
#include "ir/pipe.h"
#include "ir/progress.h"

typedef struct job {
  const sc_build_opts *o;
  sc_build *b;
  sc_diag *d;
  sc_pass_opts pass;            /* o->pass or defaults */
  sc_compile_opts compile;      /* o->compile or defaults */
  sc_program **programs;        /* [n_stages] from codegen, taken by link */
  int32_t n_stages;
} job;

/* ---- the steps ---- */

static sc_status step_import(job *j) {
  sc_import_opts io = {.no_weights = j->o->no_weights};
  sc_status st = sc_onnx_import(j->o->model, &io, &j->b->graph, j->d);
  if (st != SC_OK) {
    sc_graph_destroy(j->b->graph);
    j->b->graph = NULL;
  }
  return st;
}

/* Inputs given as constants stop being inputs. */
static sc_status step_specialise(job *j) {
  sc_graph *g = j->b->graph;
  for (int32_t k = 0; k < j->o->n_frozen; k++) {
    const sc_frozen_input *f = &j->o->frozen[k];
    int32_t id = sc_graph_find_value(g, f->name), pos = -1;
    for (int32_t i = 0; id >= 0 && i < g->n_inputs; i++)
      if (g->inputs[i] == id) pos = i;
    if (pos < 0) continue; /* not an input: nothing to freeze */
    sc_value *v = sc_val(g, id);
    /* .npy has no bfloat16, float8...: their memory form (runtime/npy.h) */
    sc_dtype t = sc_dtype_holds(f->dtype, v->dtype) ? v->dtype : f->dtype;
    bool ok = t == v->dtype && f->rank == v->rank;
    for (int32_t dd = 0; ok && dd < f->rank; dd++)
      ok = v->dims[dd] == SC_DIM_UNKNOWN || v->dims[dd] == f->dims[dd];
    if (!ok)
      return sc_diag_set(j->d, SC_ERR_INVALID, NULL, NULL,
                         "input '%s': the given value is %s of rank %d, the model expects %s "
                         "of rank %d",
                         f->name, sc_dtype_name(f->dtype), (int)f->rank, sc_dtype_name(v->dtype),
                         (int)v->rank);
    v->flags &= ~(uint32_t)SC_VALUE_INPUT;
    v->flags |= SC_VALUE_SPECIALISED;
    const char **names = sc_arena_array(&g->arena, (size_t)g->n_specialised + 1, sizeof *names);
    if (!names) return sc_diag_set(j->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    if (g->n_specialised) memcpy(names, g->specialised, (size_t)g->n_specialised * sizeof *names);
    names[g->n_specialised] = v->name;
    g->specialised = names;
    g->n_specialised++;
    if (sc_value_set_data(g, id, t, f->rank, f->dims, f->data, f->bytes, true) != SC_OK) {
      *j->d = g->diag;
      return j->d->status;
    }
    memmove(g->inputs + pos, g->inputs + pos + 1,
            (size_t)(g->n_inputs - pos - 1) * sizeof *g->inputs);
    g->n_inputs--;
  }
  return SC_OK;
}

/* Whether some graph input has name as its symbolic dim 0 (the batch). */
static bool is_batch_dim(const sc_graph *g, const char *name) {
  for (int32_t k = 0; k < g->n_inputs; k++) {
    const sc_value *v = &g->values[g->inputs[k]];
    if (v->rank >= 1 && v->dim_param && v->dim_param[0] && strcmp(v->dim_param[0], name) == 0)
      return true;
  }
  return false;
}

/* "a, b" into buf: the symbolic dims of the inputs. */
static void dim_names(const sc_graph *g, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t k = 0; k < g->n_inputs; k++) {
    const sc_value *v = &g->values[g->inputs[k]];
    for (int32_t d = 0; v->dim_param && d < v->rank; d++) {
      const char *p = v->dim_param[d];
      if (!p || strstr(buf, p)) continue;
      int w = snprintf(buf + pos, n - pos, "%s%s", pos ? ", " : "", p);
      if (w < 0 || (size_t)w >= n - pos) return;
      pos += (size_t)w;
    }
  }
}

/* --dim values; the batch is divided by the microbatch count (the model is
 * compiled for one microbatch, the runtime cuts the full batch). */
static sc_status step_bind(job *j) {
  sc_graph *g = j->b->graph;
  int64_t m = j->b->plan && j->b->plan->microbatches > 0 ? j->b->plan->microbatches : 1;
  for (int32_t i = 0; i < j->o->n_dims; i++) {
    const sc_dim_value *dv = &j->o->dims[i];
    int64_t value = dv->value;
    if (m > 1 && is_batch_dim(g, dv->name)) {
      if (value % m != 0 && j->o->plan_file) { /* the plan file's number */
        sc_diag_set(j->d, SC_ERR_INVALID, NULL, NULL,
                    "plan: pipeline.microbatches is %lld, which does not divide the batch "
                    "(--dim %s=%lld)",
                    (long long)m, dv->name, (long long)value);
        sc_diag_set_file(j->d, j->o->plan_file);
        return SC_ERR_INVALID;
      }
      if (value % m != 0)
        return sc_diag_set(j->d, SC_ERR_USAGE, NULL, NULL,
                           "--dim %s=%lld: the batch does not divide into %lld microbatches",
                           dv->name, (long long)value, (long long)m);
      value /= m;
    }
    if (sc_graph_bind_dim(g, dv->name, value) > 0) continue;
    char names[512];
    dim_names(g, names, sizeof names);
    return sc_diag_set(j->d, SC_ERR_USAGE, NULL, NULL,
                       "--dim %s: no input has a dim named '%s' (%s%s)", dv->name, dv->name,
                       names[0] ? "symbolic dims: " : "the model has no symbolic dims", names);
  }
  if (j->o->stats) {
    sc_status st = sc_stats_begin(g, &j->b->stats);
    j->b->has_stats = true;
    if (st != SC_OK) *j->d = g->diag;
    return st;
  }
  return SC_OK;
}

static sc_status step_train(job *j) {
  if (!j->o->train) return SC_OK;
  sc_train_opts o = *j->o->train;
  o.no_fuse_attention |= j->o->no_fuse_attention;
  const sc_plan *plan = j->b->plan;
  o.split_vocab_loss = o.no_fuse_loss || (plan && plan->tp_axis &&
                                            sc_mesh_axis_size(&plan->mesh, plan->tp_axis) > 1);
  if (plan && plan->n_stages <= 1 && plan->microbatches > 1)
    return sc_diag_set(j->d, SC_ERR_USAGE, NULL, NULL,
                       "--microbatches %d: microbatches are a pipeline's (a pp axis); without "
                       "one, accumulate gradients with --grad-accum",
                       (int)plan->microbatches);
  if (plan && plan->n_stages > 1) { /* pipelined: microbatches accumulate */
    if (o.grad_accum > 1)
      return sc_diag_set(j->d, SC_ERR_USAGE, NULL, NULL,
                         "a pipelined step accumulates its --microbatches: give those instead "
                         "of --grad-accum");
    if (o.fp16)
      return sc_diag_set(j->d, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "fp16 loss scaling is not built for pipelined training yet: use bf16");
    o.pipeline = true;
    o.grad_accum = plan->microbatches > 1 ? plan->microbatches : 1;
  }
  if (plan && sc_mesh_find_axis(&plan->mesh, "cp") >= 0) {
    o.cp = sc_mesh_axis_size(&plan->mesh, "cp");
    o.cp_batch_split = (plan->dp_axis && sc_mesh_axis_size(&plan->mesh, plan->dp_axis) > 1) ||
                       (plan->fsdp_axis && sc_mesh_axis_size(&plan->mesh, plan->fsdp_axis) > 1);
  }
  /* dims left unbound get 1 here, with run's note (sc_train_build binds
   * quietly) */
  sc_pass_opts bind;
  sc_pass_opts_init(&bind);
  bind.quiet = j->pass.quiet;
  if (sc_run_passes(j->b->graph, "bind-dims", &bind) != SC_OK) {
    *j->d = j->b->graph->diag;
    return j->d->status;
  }
  /* a vocabulary tp does not divide is padded before the step is built, so
   * that its parameter, optimizer state and logits split over tp
   * (docs/partitioning.md, "A trained vocabulary") */
  sc_train_vocab_pad *pads = NULL;
  int32_t n_pads = 0;
  if (plan && sc_partition_pad_vocab_train(j->b->graph, plan, &pads, &n_pads) != SC_OK) {
    *j->d = j->b->graph->diag;
    return j->d->status;
  }
  o.vocab_pads = pads;
  o.n_vocab_pads = n_pads;
  return sc_train_build(j->b->graph, &o, &j->b->train, j->d);
}

static sc_status step_canonical(job *j) {
  sc_graph *g = j->b->graph;
  sc_pass_opts po = j->pass;
  if (po.print_after && (strcmp(po.print_after, "program") == 0 ||
                         strcmp(po.print_after, "memplan") == 0))
    po.print_after = NULL; /* codegen prints the program */
  po.no_fuse_attention |= j->o->no_fuse_attention;
  /* a training step's cores were fused before autodiff: its report */
  po.attention_report = j->o->train ? NULL : &j->b->attention;
  if (j->o->train) j->b->attention = j->b->train.attention;
  sc_status st = sc_run_passes(g, SC_CANONICAL_PASSES, &po);
  if (st != SC_OK) *j->d = g->diag;
  if (j->b->plan) j->b->plan->attention = j->b->attention; /* for its JSON */
  return st;
}

static sc_status step_partition(job *j) {
  if (!j->b->plan) return SC_OK;
  sc_partition_opts po = {.plan = j->b->plan, .pass = &j->pass, .plan_file = j->o->plan_file,
                          .train = j->o->train ? &j->b->train : NULL};
  return sc_partition_run(j->b->graph, &po, &j->b->part, j->d);
}

/* The step's state, for sc_compile_opts.bind_state: each graph input X
 * with an output "new:X" (the names a pipelined piece reads it by: a
 * global input is never handed over, codegen/pipe_schedule.c). The names
 * are the graph's; the array is the caller's to free. */
static sc_status state_names(const sc_graph *g, sc_compile_opts *co, sc_diag *d) {
  const char **names = sc_calloc((size_t)g->n_inputs + 1, sizeof *names);
  if (!names) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const char *x = g->values[g->inputs[i]].name;
    for (int32_t k = 0; x && k < g->n_outputs; k++) {
      const char *o = g->values[g->outputs[k]].name;
      if (o && strncmp(o, "new:", 4) == 0 && strcmp(o + 4, x) == 0) {
        names[n++] = x;
        break;
      }
    }
  }
  co->bound = names;
  co->n_bound = n;
  return SC_OK;
}

static sc_status step_codegen(job *j) {
  if (!j->o->codegen) return SC_OK;
  sc_partition *part = j->b->part;
  j->n_stages = part ? part->n_graphs : 1;
  j->programs = sc_calloc((size_t)j->n_stages, sizeof *j->programs);
  if (!j->programs) return sc_diag_set(j->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_compile_opts co = j->compile;
  co.skip_canonical = !part;
  co.no_fuse_attention |= j->o->no_fuse_attention;
  co.bound = NULL;
  co.n_bound = 0;
  sc_status st = SC_OK;
  /* a plan placed on a cluster is for its GPUs, whose arena holds the
   * state (copied in, as the planner's exact evaluations count it) */
  if (co.bind_state && part && part->n_chunks > 0 && j->o->train && !j->b->plan->cluster)
    st = state_names(j->b->graph, &co, j->d);
  /* a pipeline offloads the values its pieces hand over (the stash, by
   * pipe_rank.c: step_link), not values inside one piece */
  if (st == SC_OK && j->o->train && j->o->train->offload_activations &&
      !(part && part->n_chunks > 0)) {
    co.offload = j->b->train.offload;
    co.n_offload = j->b->train.n_offload;
    co.offload_horizon = j->o->train->activation_loading_horizon;
  }
  sc_progress pr; /* which program of how many (ir/progress.h) */
  sc_progress_begin(&pr, "compiling programs", j->n_stages, false);
  for (int32_t s = 0; st == SC_OK && s < j->n_stages; s++) {
    char label[64];
    sc_pipe_program_label(part ? part->n_chunks : 0, s, j->n_stages, label, sizeof label);
    sc_progress_set(&pr, s, label);
    st = sc_compile_graph(part ? part->stages[s] : j->b->graph, &co, &j->programs[s], j->d);
  }
  sc_progress_end(&pr);
  sc_free((void *)co.bound);
  return st;
}

static sc_status step_link(job *j) {
  if (!j->o->codegen) return SC_OK;
  sc_program **programs = j->programs;
  j->programs = NULL; /* taken */
  sc_status st;
  if (j->b->part) {
    st = sc_dist_program_link(j->b->part, programs, &j->b->program, j->d);
    if (st == SC_OK && j->b->part->n_chunks > 0 && j->o->train &&
        j->o->train->offload_activations)
      st = sc_dist_program_set_offload(j->b->program, j->b->train.offload,
                                       j->b->train.n_offload,
                                       j->o->train->activation_loading_horizon, j->d);
  } else {
    /* one rank: the whole graph is stage 0 of the one-rank mesh */
    sc_program *p = programs[0];
    sc_free(programs);
    st = sc_dist_program_single(p, true, &j->b->program, j->d);
  }
  if (st == SC_OK && j->o->train)
    sc_dist_program_set_accumulation(j->b->program, j->o->train->grad_accum);
  return st;
}

static const struct step {
  const char *name;
  sc_status (*run)(job *j);
} pipeline[] = {
    {"import", step_import},         /* ONNX → IR graph (frontend) */
    {"specialise", step_specialise}, /* frozen inputs → constants */
    {"bind", step_bind},             /* --dim (batch ÷ microbatches) */
    {"train", step_train},           /* loss, autodiff, optimizer (passes/train.c) */
    {"canonical", step_canonical},   /* bind-dims, infer-shapes, fold, dce (passes) */
    {"partition", step_partition},   /* seeds, stages, localize, split (passes/partition) */
    {"codegen", step_codegen},       /* per stage: fuse, lower, memplan (codegen) */
    {"link", step_link},             /* the distributed program (codegen/dist_program.h) */
};
enum { N_STEPS = (int)(sizeof pipeline / sizeof *pipeline) };
_Static_assert(N_STEPS <= (int)(sizeof ((sc_build *)0)->seconds / sizeof(double)),
               "sc_build.seconds holds every step");

const char *sc_build_step_name(int32_t i) {
  return i >= 0 && i < N_STEPS ? pipeline[i].name : NULL;
}
int32_t sc_build_step_count(void) { return N_STEPS; }

void sc_build_opts_init(sc_build_opts *o) {
  memset(o, 0, sizeof *o);
  o->codegen = true;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* On failure: the graph input whose contents a shape needs, if any. */
static void note_wanted_input(const job *j) {
  const sc_build_opts *o = j->o;
  const sc_graph *g = j->b->graph;
  if (!o->wanted_input || !o->wanted_input_size) return;
  o->wanted_input[0] = 0;
  if (!g || g->want_const < 0 || g->want_const >= g->n_values) return;
  const sc_value *v = &g->values[g->want_const];
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (g->inputs[i] == g->want_const && v->name)
      snprintf(o->wanted_input, o->wanted_input_size, "%s", v->name);
}

sc_status sc_build_run(const sc_build_opts *o, sc_build **out, sc_diag *d) {
  *out = NULL;
  if (o->wanted_input && o->wanted_input_size) o->wanted_input[0] = 0;
  sc_build *b = sc_calloc(1, sizeof *b);
  if (!b) {
    sc_plan_destroy(o->plan);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  b->plan = o->plan;
  if (o->plan && o->train &&
      sc_plan_check_reduce_dtype(o->plan, sc_train_precision_name(o->train), d) != SC_OK) {
    sc_build_destroy(b);
    return d->status;
  }
  job j = {.o = o, .b = b, .d = d};
  if (o->pass) j.pass = *o->pass;
  else sc_pass_opts_init(&j.pass);
  if (o->compile) j.compile = *o->compile;
  else sc_compile_opts_init(&j.compile);
  sc_status st = SC_OK;
  for (int i = 0; st == SC_OK && i < N_STEPS; i++) {
    double t0 = now_s();
    st = pipeline[i].run(&j);
    b->seconds[i] = now_s() - t0;
  }
  for (int32_t s = 0; j.programs && s < j.n_stages; s++) sc_program_destroy(j.programs[s]);
  sc_free(j.programs);
  if (st != SC_OK) {
    note_wanted_input(&j);
    if (!d->file[0] && o->model) sc_diag_set_file(d, o->model);
    sc_build_destroy(b);
    return st;
  }
  *out = b;
  return SC_OK;
}

void sc_build_destroy(sc_build *b) {
  if (!b) return;
  sc_dist_program_destroy(b->program);
  sc_partition_destroy(b->part);
  sc_plan_destroy(b->plan);
  if (b->has_stats) sc_stats_free(&b->stats);
  sc_graph_destroy(b->graph);
  sc_free(b);
}

/* ---- link ---- */

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static sc_status copy_value(sc_dist_program *dp, const sc_value *v, sc_dist_value *out) {
  out->name = sc_arena_strdup(&dp->arena, v->name ? v->name : "");
  out->dtype = v->dtype;
  out->rank = v->rank;
  memcpy(out->dims, v->dims, sizeof out->dims);
  return out->name ? SC_OK : SC_ERR_NOMEM;
}

/* The model's inputs and outputs, from the global graph. */
static sc_status link_values(sc_dist_program *dp, const sc_graph *g, sc_diag *d) {
  dp->n_inputs = g->n_inputs;
  dp->n_outputs = g->n_outputs;
  dp->inputs = sc_arena_array(&dp->arena, (size_t)g->n_inputs + 1, sizeof *dp->inputs);
  dp->outputs = sc_arena_array(&dp->arena, (size_t)g->n_outputs + 1, sizeof *dp->outputs);
  dp->output_stage = sc_arena_array(&dp->arena, (size_t)g->n_outputs + 1, sizeof *dp->output_stage);
  if (!dp->inputs || !dp->outputs || !dp->output_stage) return nomem(d);
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (copy_value(dp, &g->values[g->inputs[i]], &dp->inputs[i]) != SC_OK) return nomem(d);
  for (int32_t k = 0; k < g->n_outputs; k++) {
    if (copy_value(dp, &g->values[g->outputs[k]], &dp->outputs[k]) != SC_OK) return nomem(d);
    dp->output_stage[k] = -1;
  }
  return SC_OK;
}

/* Stage s's tables: input shardings (from the stage graph; replicated when
 * it has none) and the global output each program output is. */
static sc_status link_stage(sc_dist_program *dp, int32_t s, const sc_graph *sg, sc_diag *d) {
  sc_dist_stage *st = &dp->stages[s];
  const sc_program *p = st->program;
  st->input_sharding = sc_arena_array(&dp->arena, (size_t)p->n_inputs + 1, sizeof *st->input_sharding);
  st->output_global = sc_arena_array(&dp->arena, (size_t)p->n_outputs + 1, sizeof *st->output_global);
  if (!st->input_sharding || !st->output_global) return nomem(d);
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    int32_t id = sg && b->name ? sc_graph_find_value(sg, b->name) : -1;
    const sc_sharding *sh = id >= 0 ? sc_graph_sharding(sg, id) : NULL;
    if (sh) st->input_sharding[i] = *sh;
    else sc_sharding_replicated(&st->input_sharding[i], b->rank);
  }
  for (int32_t j = 0; j < p->n_outputs; j++) {
    const char *name = p->buffers[p->outputs[j]].name;
    st->output_global[j] = -1;
    for (int32_t k = sc_dist_find_output(dp, name); k >= 0; k = sc_dist_next_output(dp, k)) {
      if (dp->output_stage[k] >= 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "output '%s' is produced by stages %d and %d", name,
                           (int)dp->output_stage[k], (int)s);
      dp->output_stage[k] = s;
      st->output_global[j] = k;
    }
  }
  return SC_OK;
}

sc_status sc_dist_program_link(const sc_partition *part, sc_program **programs,
                               sc_dist_program **out, sc_diag *d) {
  *out = NULL;
  sc_dist_program *dp = sc_dist_program_create(&part->mesh, part->n_graphs);
  if (!dp) {
    for (int32_t s = 0; s < part->n_graphs; s++) sc_program_destroy(programs[s]);
    sc_free(programs);
    return nomem(d);
  }
  for (int32_t s = 0; s < part->n_graphs; s++) dp->stages[s].program = programs[s];
  dp->pipe_chunks = part->n_chunks;
  dp->pipe_ranks = part->n_stages;
  sc_free(programs);
  sc_dist_program_set_roles(dp, part->pp_axis, part->dp_axis, part->tp_axis);
  dp->sequence_parallel = part->sequence_parallel;
  dp->schedule.kind = (sc_schedule_kind)part->schedule;
  dp->schedule.microbatches = part->microbatches;
  sc_status st = link_values(dp, part->global, d);
  if (st == SC_OK) st = sc_dist_program_index(dp, d);
  for (int32_t s = 0; st == SC_OK && s < part->n_graphs; s++)
    st = link_stage(dp, s, part->stages[s], d);
  if (st == SC_OK && part->n_sources > 0) {
    dp->n_sources = part->n_sources;
    dp->sources = sc_arena_array(&dp->arena, (size_t)part->n_sources, sizeof *dp->sources);
    if (!dp->sources) st = nomem(d);
    for (int32_t i = 0; st == SC_OK && i < part->n_sources; i++) {
      dp->sources[i] = part->sources[i]; /* data borrowed from the global graph */
      if (!(dp->sources[i].name = sc_arena_strdup(&dp->arena, part->sources[i].name)))
        st = nomem(d);
    }
  }
  if (st == SC_OK) st = sc_dist_program_check(dp, d);
  if (st != SC_OK) {
    sc_dist_program_destroy(dp);
    return st;
  }
  *out = dp;
  return SC_OK;
}

void sc_compile_opts_target(sc_compile_opts *co, const sc_device_target *t) {
  bool cpu = !t || !t->device || strcmp(t->device, "cpu") == 0;
  co->workspace_bytes = cpu ? 0 : SC_GEMM_WORKSPACE_BYTES;
}

const char *sc_train_precision_name(const sc_train_opts *t) {
  return t->fp8 ? "fp8" : t->bf16 ? "bf16" : t->fp16 ? "fp16" : "fp32";
}

void sc_build_predict(const sc_build *b, const sc_train_opts *t, int64_t peak_bytes) {
  sc_plan *pl = b->plan;
  if (!pl) return;
  /* the MFU in the step's precision, not the plan's (reserved) one */
  const char *precision = pl->precision;
  if (t) pl->precision = sc_train_precision_name(t);
  sc_dist_sim_to_plan(b->program, pl, peak_bytes);
  pl->precision = precision;
}
