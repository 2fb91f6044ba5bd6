/* partition.c — the partitioner's driver (partition.h): plan checks,
 * seeds, stages, localize, split into stage graphs, with --print-after
 * points "seed", "localize" and "pipeline-split". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"
#include "ir/pipe.h"
#include "ir/text.h"
#include "pp.h"

static bool print_at(const sc_pass_opts *po, const char *name) {
  return po && po->print_after &&
         (strcmp(po->print_after, name) == 0 || strcmp(po->print_after, "all") == 0);
}

static sc_status print_graph(const sc_pass_opts *po, const char *what, sc_graph *g,
                             int32_t stage) {
  FILE *f = po->print_out ? po->print_out : stdout;
  if (stage >= 0) fprintf(f, "// ----- IR after %s: stage %d -----\n", what, (int)stage);
  else fprintf(f, "// ----- IR after %s -----\n", what);
  return sc_ir_print(g, f);
}

/* The IR verifier on a graph the partitioner made (opts->verify). */
static sc_status verify(const sc_pass_opts *po, sc_graph *g, sc_diag *d) {
  if (!po || !po->verify) return SC_OK;
  sc_status st = sc_graph_verify(g, true);
  if (st != SC_OK) *d = g->diag;
  return st;
}

static int32_t axis_of(const sc_mesh *m, const char *name) {
  return name ? sc_mesh_find_axis(m, name) : -1;
}

/* Gives every local node the `__stage` of the global node it came from
 * (local_end); the trailing nodes (Identities naming the graph outputs)
 * take their input's producer's stage, as localize does. */
static sc_status retag(sc_partition *p, sc_diag *d) {
  sc_graph *L = p->local, *g = p->global;
  int32_t i = 0;
  for (int32_t j = 0; j < L->n_nodes; j++) {
    while (i < g->n_nodes && j >= p->local_end[i]) i++;
    int32_t stage = 0;
    if (i < g->n_nodes) {
      stage = p->node_stage[i];
    } else if (L->nodes[j].n_inputs > 0 && L->nodes[j].inputs[0] >= 0) {
      int32_t prod = L->values[L->nodes[j].inputs[0]].producer;
      const sc_attr *sa = prod >= 0 ? sc_node_attr(&L->nodes[prod], "__stage") : NULL;
      if (sa) stage = (int32_t)sa->i;
    }
    sc_attr *a = (sc_attr *)sc_node_attr(&L->nodes[j], "__stage");
    if (!a) return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "local node %d has no stage", (int)j);
    a->i = stage;
  }
  return SC_OK;
}

/* d's error, about what the plan says: it names the plan's file when the
 * plan was read from one (else the model, as the caller sets). */
static sc_status plan_file_error(const sc_partition_opts *o, sc_diag *d) {
  if (o->plan_file) snprintf(d->file, sizeof d->file, "%s", o->plan_file);
  return d->status;
}

/* Each global node's stage: the plan's table (a replay), or assigned. */
static sc_status stages_of(sc_partition *p, const sc_plan *plan, sc_diag *d) {
  sc_graph *g = p->global;
  p->node_stage = sc_arena_array(&p->arena, (size_t)(g->n_nodes ? g->n_nodes : 1),
                                 sizeof *p->node_stage);
  if (!p->node_stage) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  memset(p->node_stage, 0, (size_t)g->n_nodes * sizeof *p->node_stage);
  if (p->n_stages <= 1) return SC_OK;
  if (plan->n_node_stages > 0) {
    for (int32_t i = 0; i < g->n_nodes; i++) p->node_stage[i] = -1;
    for (int32_t k = 0; k < plan->n_node_stages; k++) {
      const char *name = plan->node_stages[k].node;
      for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0)
          p->node_stage[i] = plan->node_stages[k].stage;
    }
    int32_t last = 0, last_node = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      if (g->nodes[i].flags & SC_NODE_DEAD) continue;
      /* cp's zig-zag Gathers (not in the file: sc_partition_complete_plan)
       * run on the stage of the nodes before them */
      if (p->node_stage[i] < 0 && sc_node_attr(&g->nodes[i], "cp_zigzag")) p->node_stage[i] = last;
      if (p->node_stage[i] < 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "plan: pipeline.node_stages has no stage for node '%s' (it lists "
                           "every node of the graph)",
                           g->nodes[i].name);
      if (p->node_stage[i] < last)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "plan: pipeline.node_stages: stages must not decrease along the "
                           "graph's order: node '%s' (stage %d) comes before node '%s' (stage %d)",
                           g->nodes[last_node].name, (int)last, g->nodes[i].name,
                           (int)p->node_stage[i]);
      last = p->node_stage[i], last_node = i;
    }
    return SC_OK;
  }
  if (plan->n_boundaries > 0)
    return sc_pp_assign_stages(g, p->n_stages, plan->boundaries, plan->n_boundaries,
                               p->node_stage, d);
  /* Balanced by what each node costs one rank: localize once with every
   * node in stage 0, measure the local graph's nodes (collectives and
   * reshards charged to the node they serve), then cut. Localizing does not
   * depend on the stages (they only tag nodes), so the local graph is kept
   * and re-tagged (retag) rather than localized again. */
  sc_status st = sc_partition_localize(p, d);
  if (st != SC_OK) return st;
  double *lc = sc_malloc(((size_t)p->local->n_nodes + 1) * sizeof *lc);
  double *cost = sc_calloc((size_t)g->n_nodes + 1, sizeof *cost);
  if (!lc || !cost) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK && sc_pp_node_costs(p->local, 1, lc) != SC_OK)
    st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0, j = 0; st == SC_OK && i < g->n_nodes; i++)
    for (; j < p->local_end[i]; j++) cost[i] += lc[j];
  if (st == SC_OK)
    st = sc_pp_assign_stages_costed(g, p->n_stages, NULL, 0, cost, p->node_stage, d);
  if (st == SC_OK) st = retag(p, d);
  sc_free(lc);
  sc_free(cost);
  return st;
}

sc_status sc_partition_run(sc_graph *g, const sc_partition_opts *o, sc_partition **out,
                           sc_diag *d) {
  *out = NULL;
  const sc_plan *plan = o->plan;
  const sc_pass_opts *po = o->pass;
  sc_status st = sc_partition_pad_vocab(g, plan);
  if (st != SC_OK) {
    *d = g->diag;
    return st;
  }
  if ((st = sc_plan_validate(plan, g, d)) != SC_OK) return plan_file_error(o, d);
  sc_partition *p = sc_calloc(1, sizeof *p);
  if (!p) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_arena_init(&p->arena);
  p->global = g;
  p->mesh = plan->mesh;
  p->pp_axis = axis_of(&p->mesh, plan->pp_axis);
  p->dp_axis = axis_of(&p->mesh, plan->dp_axis);
  p->tp_axis = axis_of(&p->mesh, plan->tp_axis);
  p->fsdp_axis = axis_of(&p->mesh, plan->fsdp_axis);
  p->cp_axis = sc_mesh_find_axis(&p->mesh, "cp");
  p->cp_seed = -1;
  p->ep_axis = sc_mesh_find_axis(&p->mesh, "ep");
  p->training = sc_partition_is_training(g);
  p->train = o->train;
  if (p->training && !p->train) {
    sc_partition_destroy(p);
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "a training step is partitioned without its parameters' list");
  }
  for (int32_t k = 0; p->train && k < p->train->n_params && st == SC_OK; k++)
    st = sc_name_index_add(&p->param_names, p->train->params[k].name);
  if (st != SC_OK) {
    sc_partition_destroy(p);
    return sc_diag_set(d, st, NULL, NULL, "indexing the parameters' names: %s",
                       st == SC_ERR_NOMEM ? "out of memory" : "too many parameters");
  }
  p->zero_stage = p->fsdp_axis < 0 ? 0 : plan->zero_stage > 0 ? plan->zero_stage : 3;
  p->keep_after_forward = plan->keep_after_forward;
  p->reduce_low = sc_plan_reduces_low(plan);
  p->reduce_dtype = !p->reduce_low                            ? SC_DTYPE_UNDEF
                    : strcmp(plan->reduce_dtype, "fp16") == 0 ? SC_DTYPE_F16
                                                              : SC_DTYPE_BF16;
  if (p->fsdp_axis >= 0 && !p->training) {
    sc_partition_destroy(p);
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "the %s axis shards training state: it needs a training step (--train; "
                       "for inference split the batch with dp)",
                       plan->fsdp_axis);
  }
  p->n_stages = p->pp_axis >= 0 ? (int32_t)p->mesh.axes[p->pp_axis].size : 1;
  p->n_graphs = p->n_stages;
  if (p->training && p->n_stages > 1) {
    p->n_chunks = p->n_stages * (plan->virtual_stages > 1 ? plan->virtual_stages : 1);
    p->n_graphs = SC_PIPE_PHASES * p->n_chunks;
  }
  const char *sched = plan->schedule ? plan->schedule : "gpipe";
  bool interleaved = strcmp(sched, "interleaved") == 0;
  p->schedule = interleaved                     ? 2
                : strcmp(sched, "1f1b") == 0    ? 1
                : strcmp(sched, "zb-h1") == 0   ? 3
                                                : 0;
  /* a plan file's choices are named by their keys, in that file (exit 1);
   * the options' by the options (usage, exit 2) */
  const char *pf = o->plan_file;
  if (p->n_stages > 1 && !p->training && strcmp(sched, "gpipe") != 0) {
    sc_partition_destroy(p);
    sc_diag_set(d, pf ? SC_ERR_INVALID : SC_ERR_USAGE, NULL, NULL,
                "%sthe %s schedule interleaves forward and backward passes: it needs a "
                "training step (inference pipelines with gpipe)",
                pf ? "plan: pipeline.schedule: " : "", sched);
    return plan_file_error(o, d);
  }
  if (p->n_stages > 1 && interleaved != (plan->virtual_stages > 1)) {
    sc_partition_destroy(p);
    if (pf)
      sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                  "plan: pipeline.virtual_stages is %d and pipeline.schedule '%s': virtual "
                  "stages (2 or more) go with the interleaved schedule, and only with it",
                  (int)plan->virtual_stages, sched);
    else
      sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                  interleaved ? "the interleaved schedule needs --virtual-stages V >= 2"
                              : "--virtual-stages %d needs --schedule interleaved",
                  (int)plan->virtual_stages);
    return plan_file_error(o, d);
  }
  p->microbatches = plan->microbatches > 0 ? plan->microbatches : 1;
  p->sequence_parallel = plan->sequence_parallel && p->tp_axis >= 0;
  p->expert_tensor_parallel = plan->expert_tensor_parallel && p->tp_axis >= 0 &&
                              p->mesh.axes[p->tp_axis].size > 1;

  if ((st = sc_graph_attach_mesh(g, &p->mesh)) != SC_OK ||
      (st = p->training ? sc_partition_seed_train_data(p) : sc_partition_seed_dp(p, plan)) !=
          SC_OK ||
      (st = sc_partition_seed_tp(p, plan)) != SC_OK ||
      (p->cp_axis >= 0 && (st = sc_partition_prepare_cp(p)) != SC_OK) ||
      ((p->ep_axis >= 0 || p->expert_tensor_parallel) &&
       (st = sc_partition_seed_ep(p)) != SC_OK) ||
      (p->training && (st = sc_partition_seed_train_state(p)) != SC_OK)) {
    *d = g->diag;
    goto fail;
  }
  p->n_seed_fallbacks = p->n_fallbacks;
  if (print_at(po, "seed") && (st = print_graph(po, "seed", g, -1)) != SC_OK) goto fail;
  if ((st = p->n_chunks ? sc_partition_pipe_pieces(p, plan, d) : stages_of(p, plan, d)) != SC_OK) {
    if (!p->n_chunks && plan->n_node_stages > 0) plan_file_error(o, d); /* its table's fault */
    goto fail;
  }
  if (!p->local && (st = sc_partition_localize(p, d)) != SC_OK) goto fail;
  if ((st = verify(po, p->local, d)) != SC_OK) goto fail;
  if (p->training && (st = sc_partition_split_grad_sums(p, d)) != SC_OK) goto fail;
  if (p->training && (st = sc_partition_bucket_gathers(p, d)) != SC_OK) goto fail;
  if (p->training && (st = sc_partition_bucket_reductions(p, d)) != SC_OK) goto fail;
  if (print_at(po, "localize") && (st = print_graph(po, "localize", p->local, -1)) != SC_OK)
    goto fail;
  p->stages = sc_arena_array(&p->arena, (size_t)p->n_graphs, sizeof *p->stages);
  if (!p->stages) {
    st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    goto fail;
  }
  memset(p->stages, 0, (size_t)p->n_graphs * sizeof *p->stages);
  st = p->n_chunks ? sc_pp_split_pieces(p->local, p->n_graphs, p->stages, d)
                   : sc_pp_split(p->local, p->n_stages, plan->pp_axis ? plan->pp_axis : "pp",
                                 p->stages, d);
  if (st != SC_OK) goto fail;
  for (int32_t s = 0; s < p->n_graphs; s++) {
    sc_graph_mark_local_shapes(p->stages[s]);
    if ((st = verify(po, p->stages[s], d)) != SC_OK) goto fail;
    if (print_at(po, "pipeline-split") &&
        (st = print_graph(po, "pipeline-split", p->stages[s], s)) != SC_OK)
      goto fail;
  }
  *out = p;
  return SC_OK;
fail:
  sc_partition_destroy(p);
  return st;
}

void sc_partition_destroy(sc_partition *p) {
  if (!p) return;
  if (p->stages)
    for (int32_t s = 0; s < p->n_graphs; s++) sc_graph_destroy(p->stages[s]);
  sc_graph_destroy(p->local);
  sc_free(p->fallbacks);
  sc_free(p->flat_splits);
  sc_name_index_free(&p->param_names);
  sc_arena_free(&p->arena);
  sc_free(p);
}

void sc_partition_batches_that_divide(int64_t b, int64_t parts, char *buf, size_t n) {
  sc_format_multiples_near(b, parts, buf, n);
}

sc_status sc_partition_batch_error(sc_partition *p, const sc_value *v, const int32_t *axes,
                                   int32_t n_axes, int64_t parts) {
  char mesh[256] = "", works[96];
  size_t used = 0;
  for (int32_t k = 0; k < n_axes && used < sizeof mesh; k++) {
    int w = snprintf(mesh + used, sizeof mesh - used, "%s%s=%lld", k ? " x " : "",
                     p->mesh.axes[axes[k]].name, (long long)p->mesh.axes[axes[k]].size);
    if (w < 0) break;
    used += (size_t)w;
  }
  int64_t b = v->dims[0];
  sc_partition_batches_that_divide(b, parts, works, sizeof works);
  const char *sym = v->dim_param && v->dim_param[0] ? v->dim_param[0] : NULL;
  return sc_graph_error(p->global, SC_ERR_USAGE,
                        "input '%s': the batch (dim 0%s%s%s = %lld) does not divide by the "
                        "%lld data-parallel ranks of %s; batches that do: %s (or a mesh whose "
                        "data-parallel size divides %lld)",
                        v->name ? v->name : "?", sym ? ", '" : "", sym ? sym : "",
                        sym ? "'" : "", (long long)b, (long long)parts, mesh, works,
                        (long long)b);
}

sc_status sc_partition_note_fallback(sc_partition *p, const char *node, const char *op,
                                     const char *fmt, ...) {
  if (p->n_fallbacks == p->cap_fallbacks) {
    int32_t cap = p->cap_fallbacks ? p->cap_fallbacks * 2 : 16;
    sc_partition_fallback *f = sc_realloc(p->fallbacks, (size_t)cap * sizeof *f);
    if (!f) return SC_ERR_NOMEM;
    p->fallbacks = f;
    p->cap_fallbacks = cap;
  }
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  sc_partition_fallback *e = &p->fallbacks[p->n_fallbacks];
  e->node = sc_arena_strdup(&p->arena, node ? node : "?");
  e->op = sc_arena_strdup(&p->arena, op ? op : "?");
  e->what = sc_arena_strdup(&p->arena, buf);
  if (!e->node || !e->op || !e->what) return SC_ERR_NOMEM;
  p->n_fallbacks++;
  return SC_OK;
}

const sc_partition_flat_split *sc_partition_flat_split_of(const sc_partition *p,
                                                          const char *name) {
  for (int32_t k = 0; p && name && k < p->n_flat_splits; k++)
    if (strcmp(p->flat_splits[k].name, name) == 0) return &p->flat_splits[k];
  return NULL;
}

void sc_partition_print_cp_padding(const sc_partition *p, FILE *f, const char *prefix) {
  if (p->cp_axis < 0 || p->cp_padded == p->cp_seq) return;
  int64_t masked = p->cp_padded - p->cp_seq;
  fprintf(f, "%ssequence %lld padded to %lld for cp=%lld: %lld masked key%s\n", prefix,
          (long long)p->cp_seq, (long long)p->cp_padded, (long long)p->mesh.axes[p->cp_axis].size,
          (long long)masked, masked == 1 ? "" : "s");
}

void sc_partition_print_fallbacks(const sc_partition *p, FILE *f, const char *prefix) {
  if (!p->n_fallbacks) return;
  int32_t seeds = p->n_seed_fallbacks, rules = p->n_fallbacks - p->n_seed_fallbacks;
  fprintf(f, "%s%d fallback%s to replicated (correct, but not split: every rank holds or "
          "computes these whole): %d value%s not split, %d node%s computed whole\n", prefix,
          (int)p->n_fallbacks, p->n_fallbacks == 1 ? "" : "s", (int)seeds,
          seeds == 1 ? "" : "s", (int)rules, rules == 1 ? "" : "s");
  /* every value; the nodes up to SC_FALLBACK_NODES_SHOWN (a split that a
   * model's shape defeats in one block does so in each: 25 heads under
   * tp=2 leave 483 nodes of gpt_1p5b whole), the rest counted */
  int32_t shown = rules > SC_FALLBACK_NODES_SHOWN ? SC_FALLBACK_NODES_SHOWN : rules;
  for (int32_t i = 0; i < seeds + shown; i++)
    fprintf(f, "%s  %s '%s' (%s): %s\n", prefix, strcmp(p->fallbacks[i].op, "input") == 0
            ? "graph input" : "node", p->fallbacks[i].node, p->fallbacks[i].op,
            p->fallbacks[i].what);
  if (rules > shown)
    fprintf(f, "%s  ... and %d more node%s computed whole (plan --json lists every one)\n",
            prefix, (int)(rules - shown), rules - shown == 1 ? "" : "s");
}

static int cmp_name(const void *key, const void *e) {
  return strcmp((const char *)key, ((const sc_shard_source *)e)->name);
}

const sc_shard_source *sc_partition_source(const sc_partition *p, const char *name) {
  if (!p->n_sources || !name) return NULL;
  return bsearch(name, p->sources, (size_t)p->n_sources, sizeof *p->sources, cmp_name);
}

const sc_sharding *sc_partition_param_sharding(const sc_partition *part, const char *name) {
  const sc_shard_source *src = sc_partition_source(part, name);
  if (src) return &src->sharding;
  int32_t id = sc_graph_find_value(part->local, name);
  const sc_sharding *s = id >= 0 ? sc_graph_sharding(part->local, id) : NULL;
  return s && !sc_sharding_is_replicated(s) ? s : NULL;
}

static bool live_node(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }
static bool live_param(const sc_value *v) {
  return (v->flags & SC_VALUE_PARAM) && !(v->flags & SC_VALUE_DEAD);
}

sc_status sc_partition_complete_plan(const sc_partition *part, sc_plan *plan, sc_diag *d) {
  const sc_graph *g = part->global;
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) n += live_node(&g->nodes[i]);
  plan->node_stages = n ? sc_arena_array(&plan->arena, (size_t)n, sizeof *plan->node_stages) : NULL;
  if (n && !plan->node_stages) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  plan->n_node_stages = 0;
  for (int32_t i = 0; !part->n_chunks && i < g->n_nodes; i++) { /* pieces are not stages */
    if (!live_node(&g->nodes[i])) continue;
    /* cp's zig-zag Gathers are the partitioner's (sc_partition_prepare_cp
     * makes them again from the plan's mesh): not nodes of the model */
    if (sc_node_attr(&g->nodes[i], "cp_zigzag")) continue;
    const char *name = sc_plan_strdup(plan, g->nodes[i].name);
    if (!name) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    plan->node_stages[plan->n_node_stages++] = (sc_plan_node_stage){name, part->node_stage[i]};
  }
  /* a pipelined step's cut: the balancer's depends on the cluster (its
   * byte weight), the replay's on the plan alone */
  if (part->n_chunks > 1 && part->chunk_boundaries) {
    const char **b = sc_arena_array(&plan->arena, (size_t)part->n_chunks - 1, sizeof *b);
    if (!b) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    for (int32_t i = 0; i < part->n_chunks - 1; i++)
      if (!(b[i] = sc_plan_strdup(plan, part->chunk_boundaries[i])))
        return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    plan->boundaries = b;
    plan->n_boundaries = part->n_chunks - 1;
  }
  char text[256];
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!live_param(v)) continue;
    const sc_sharding *s = sc_partition_param_sharding(part, v->name);
    if (!s) continue;
    sc_sharding_format(s, &part->mesh, text, sizeof text);
    sc_status st = sc_plan_set_override(plan, v->name, text, d);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

