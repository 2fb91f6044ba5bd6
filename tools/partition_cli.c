/* partition_cli.c — the partitioning options of `shardc plan` (and later
 * `run` and `compile`) and the build of a partitioned model from them.
 *
 * sc_pcli_build is the one place where command-line options become a plan:
 * the mesh's axes named dp, tp and pp take those roles, the pp size is the
 * stage count, --stage-boundaries become the plan's boundaries. With --plan
 * the plan is read from JSON instead and validated against the graph after
 * the canonical passes (so node names are those `shardc plan --json` wrote).
 * Then sc_partition_run makes the stage graphs, and each is compiled on its
 * own (one program per stage, shared by the ranks of that stage).
 *
 * Errors are printed here (sc_cli_report / sc_cli_usage_error) and come
 * back as exit statuses: 1 a problem in the model or plan, 2 usage. */
#include "partition_cli.h"

#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"

void sc_pcli_init(sc_pcli *p) {
  memset(p, 0, sizeof *p);
  p->comm = "local";
}

bool sc_pcli_active(const sc_pcli *p) { return p->mesh || p->plan_file; }

int sc_pcli_take_option(sc_pcli *p, int argc, char **argv, int *i, bool allow_comm) {
  const char *a = argv[*i], *v;
  bool missing = false;
  int64_t n;
  if (strcmp(a, "--sequence-parallel") == 0) {
    p->sequence_parallel = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--no-vocab-parallel") == 0) {
    p->no_vocab_parallel = true;
    (*i)++;
    return 1;
  }
  if ((v = sc_cli_opt_value(argc, argv, i, "--mesh", &missing))) {
    if (!missing && !*v) return sc_cli_usage_error("--mesh needs axes, e.g. pp=2,tp=2");
    if (!missing) p->mesh = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--ranks-per-node", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, SC_MESH_MAX_RANKS, &n))
      return sc_cli_usage_error("--ranks-per-node expects a positive integer, got '%s'", v);
    if (!missing) p->ranks_per_node = n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--microbatches", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, 1 << 20, &n))
      return sc_cli_usage_error("--microbatches expects a positive integer, got '%s'", v);
    if (!missing) p->microbatches = (int32_t)n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--stage-boundaries", &missing))) {
    if (!missing) p->boundaries = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--plan", &missing))) {
    if (!missing) p->plan_file = v;
  } else if (allow_comm && (v = sc_cli_opt_value(argc, argv, i, "--comm", &missing))) {
    if (!missing && strcmp(v, "local") != 0 && strcmp(v, "mpi") != 0)
      return sc_cli_usage_error("--comm expects 'local' or 'mpi', got '%s'", v);
    if (!missing) p->comm = v;
  } else {
    return 0;
  }
  if (missing) return sc_cli_usage_error("option '%s' needs a value", a);
  (*i)++;
  return 1;
}

/* --plan carries its own mesh and choices: the options that make one may
 * not come with it. */
static int check_conflicts(const sc_pcli *p) {
  if (!p->plan_file) {
    if (!p->mesh && (p->ranks_per_node || p->microbatches || p->boundaries ||
                     p->sequence_parallel || p->no_vocab_parallel))
      return sc_cli_usage_error("partitioning options need --mesh (or --plan)");
    return 0;
  }
  const char *bad = p->mesh                ? "--mesh"
                    : p->ranks_per_node    ? "--ranks-per-node"
                    : p->microbatches      ? "--microbatches"
                    : p->boundaries        ? "--stage-boundaries"
                    : p->sequence_parallel ? "--sequence-parallel"
                    : p->no_vocab_parallel ? "--no-vocab-parallel"
                                           : NULL;
  if (bad) return sc_cli_usage_error("%s may not be given with --plan (the plan file decides)", bad);
  return 0;
}

/* The option checks that need no graph: conflicts, then the mesh parses
 * (a bad --mesh is a usage error, found before the model is read). */
static int check_options(const sc_pcli *p) {
  int rc = check_conflicts(p);
  if (rc || !p->mesh) return rc;
  sc_mesh m;
  sc_diag d = {0}; /* sc_diag_clear keeps .file: start zeroed */
  sc_diag_clear(&d);
  if (sc_mesh_parse(p->mesh, &m, &d) != SC_OK ||
      (p->ranks_per_node && sc_mesh_set_ranks_per_node(&m, p->ranks_per_node, &d) != SC_OK))
    return sc_cli_usage_error("--mesh %s: %s", p->mesh, d.msg);
  return 0;
}

/* Whether some graph input has name as its symbolic dim 0. */
static bool is_batch_dim(const sc_graph *g, const char *name) {
  for (int32_t k = 0; k < g->n_inputs; k++) {
    const sc_value *v = &g->values[g->inputs[k]];
    if (v->rank >= 1 && v->dim_param && v->dim_param[0] && strcmp(v->dim_param[0], name) == 0)
      return true;
  }
  return false;
}

int sc_pcli_adjust_dims(const sc_pcli *p, const sc_graph *g, sc_cli_opts *opts) {
  int rc = check_options(p);
  if (rc) return rc;
  int64_t m = p->microbatches > 0 ? p->microbatches : 1;
  if (p->plan_file) { /* the plan decides M: read it once without the graph */
    sc_plan *plan = NULL;
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_plan_read_json_file(p->plan_file, NULL, &plan, &d) != SC_OK)
      return sc_cli_report(&d, p->plan_file);
    m = plan->microbatches;
    sc_plan_destroy(plan);
  }
  if (m == 1) return 0;
  for (int i = 0; i < opts->n_dims; i++) {
    sc_cli_dim *dim = &opts->dims[i];
    if (!is_batch_dim(g, dim->name)) continue;
    if (dim->value % m != 0)
      return sc_cli_usage_error("--dim %s=%lld: the batch does not divide into %lld microbatches",
                                dim->name, (long long)dim->value, (long long)m);
    dim->value /= m;
  }
  return 0;
}

int sc_pcli_load(const sc_pcli *p, sc_cli_opts *opts, sc_graph **g) {
  sc_import_opts io = {.no_weights = opts->no_weights};
  sc_diag d = {0};
  sc_diag_clear(&d);
  *g = NULL;
  sc_status st = sc_onnx_import(opts->file, &io, g, &d);
  int rc;
  if (st == SC_OK && (rc = sc_pcli_adjust_dims(p, *g, opts)) != 0) {
    sc_graph_destroy(*g);
    *g = NULL;
    return rc;
  }
  return sc_cli_load_finish(st, g, &d, opts);
}

/* Splits "a,b,c" into the plan's boundaries (copies in its arena). */
static sc_status set_boundaries(sc_plan *plan, const char *list) {
  int32_t n = 1;
  for (const char *c = list; *c; c++) n += *c == ',';
  plan->boundaries = sc_arena_array(&plan->arena, (size_t)n, sizeof *plan->boundaries);
  if (!plan->boundaries) return SC_ERR_NOMEM;
  plan->n_boundaries = 0;
  for (const char *s = list;;) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    const char *name = sc_arena_strndup(&plan->arena, s, len);
    if (!name) return SC_ERR_NOMEM;
    plan->boundaries[plan->n_boundaries++] = name;
    if (!e) break;
    s = e + 1;
  }
  return SC_OK;
}

/* The plan the options describe. */
static sc_status plan_from_options(const sc_pcli *p, sc_plan **out, sc_diag *d) {
  sc_plan *plan = sc_plan_create();
  *out = plan;
  if (!plan) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_mesh_parse(p->mesh, &plan->mesh, d);
  if (st == SC_OK && p->ranks_per_node)
    st = sc_mesh_set_ranks_per_node(&plan->mesh, p->ranks_per_node, d);
  if (st != SC_OK) return st;
  if (sc_mesh_find_axis(&plan->mesh, "dp") >= 0) plan->dp_axis = sc_plan_strdup(plan, "dp");
  if (sc_mesh_find_axis(&plan->mesh, "tp") >= 0) plan->tp_axis = sc_plan_strdup(plan, "tp");
  if (sc_mesh_find_axis(&plan->mesh, "pp") >= 0) plan->pp_axis = sc_plan_strdup(plan, "pp");
  plan->n_stages = (int32_t)sc_mesh_axis_size(&plan->mesh, "pp");
  if (p->microbatches > 0) plan->microbatches = p->microbatches;
  plan->sequence_parallel = p->sequence_parallel;
  plan->vocab_parallel = !p->no_vocab_parallel;
  if (p->boundaries && set_boundaries(plan, p->boundaries) != SC_OK)
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  return SC_OK;
}

int sc_pcli_build(const sc_pcli *p, sc_graph *g, const char *file, const sc_pass_opts *po,
                  const sc_compile_opts *co, bool compile, sc_pbuild *out) {
  memset(out, 0, sizeof *out);
  int rc = check_options(p);
  if (rc) return rc;
  if (!sc_pcli_active(p)) return sc_cli_usage_error("no --mesh or --plan given");

  if (sc_run_passes(g, SC_CANONICAL_PASSES, po) != SC_OK) return sc_cli_report(&g->diag, file);

  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st;
  if (p->plan_file) {
    /* the names in it meet the graph in sc_partition_run: after the
     * vocabulary padding that a written plan's padded weights come from */
    st = sc_plan_read_json_file(p->plan_file, NULL, &out->plan, &d);
    if (st != SC_OK) return sc_cli_report(&d, p->plan_file);
  } else {
    st = plan_from_options(p, &out->plan, &d); /* checked in sc_partition_run */
    if (st != SC_OK) {
      sc_pbuild_free(out);
      return sc_cli_report(&d, file);
    }
  }

  sc_partition_opts o = {.plan = out->plan, .pass = po, .plan_file = p->plan_file};
  st = sc_partition_run(g, &o, &out->part, &d);
  if (st != SC_OK) {
    sc_pbuild_free(out);
    return sc_cli_report(&d, file);
  }
  int32_t n = out->part->n_stages;
  out->programs = sc_calloc((size_t)n, sizeof *out->programs);
  if (!out->programs) {
    sc_pbuild_free(out);
    sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    return sc_cli_report(&d, file);
  }
  for (int32_t s = 0; compile && s < n; s++) {
    st = sc_compile_graph(out->part->stages[s], co, &out->programs[s], &d);
    if (st != SC_OK) {
      sc_pbuild_free(out);
      return sc_cli_report(&d, file);
    }
  }
  return 0;
}

void sc_pbuild_free(sc_pbuild *b) {
  if (b->programs && b->part)
    for (int32_t s = 0; s < b->part->n_stages; s++) sc_program_destroy(b->programs[s]);
  sc_free(b->programs);
  sc_partition_destroy(b->part);
  sc_plan_destroy(b->plan);
  memset(b, 0, sizeof *b);
}
