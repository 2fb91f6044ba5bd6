/* plan.c — the plan object: creation, overrides, validation.
 *
 * Validation is where every name in a plan meets the graph: a plan read from
 * an edited JSON file may name an initializer or node that does not exist, a
 * mesh axis the mesh lacks, or a sharding that does not divide a weight. Each
 * is reported with the offending name. Node names are looked up through a
 * sorted index built once per call (O(n log n)), so a node_stages table for
 * every node of a large model validates quickly. JSON is in plan_json.c. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

sc_plan *sc_plan_create(void) {
  sc_plan *p = sc_calloc(1, sizeof *p);
  if (!p) return NULL;
  sc_arena_init(&p->arena);
  p->version = SC_PLAN_FORMAT_VERSION;
  sc_mesh_init(&p->mesh);
  p->n_stages = 1;
  p->microbatches = 1;
  p->schedule = sc_arena_strdup(&p->arena, "gpipe");
  p->precision = sc_arena_strdup(&p->arena, "f32");
  p->reduce_dtype = sc_arena_strdup(&p->arena, "fp32");
  p->tp_all_blocks = true;
  p->vocab_parallel = true;
  if (!p->schedule || !p->precision || !p->reduce_dtype) {
    sc_plan_destroy(p);
    return NULL;
  }
  return p;
}

void sc_plan_destroy(sc_plan *p) {
  if (!p) return;
  sc_arena_free(&p->arena);
  sc_free(p);
}

const char *sc_plan_strdup(sc_plan *p, const char *s) {
  return s ? sc_arena_strdup(&p->arena, s) : NULL;
}

bool sc_plan_reduce_dtype_known(const char *s) {
  return s && (strcmp(s, "fp32") == 0 || strcmp(s, "bf16") == 0 || strcmp(s, "fp16") == 0);
}

bool sc_plan_reduces_low(const sc_plan *p) {
  return p && p->reduce_dtype && strcmp(p->reduce_dtype, "fp32") != 0;
}

sc_status sc_plan_check_reduce_dtype(const sc_plan *p, const char *precision, sc_diag *d) {
  if (!sc_plan_reduces_low(p)) return SC_OK;
  const char *low = strcmp(precision, "fp8") == 0 ? "bf16" : precision;
  if (strcmp(low, p->reduce_dtype) == 0) return SC_OK;
  return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                     "reduce dtype %s reduces the gradients in the step's low precision, and "
                     "the step's precision is %s (--precision %s)",
                     p->reduce_dtype, precision, p->reduce_dtype);
}

sc_status sc_plan_set_override(sc_plan *p, const char *name, const char *sharding,
                               sc_diag *d) {
  const char *sh = sc_arena_strdup(&p->arena, sharding);
  if (!sh) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t i = 0; i < p->n_overrides; i++)
    if (strcmp(p->overrides[i].name, name) == 0) {
      p->overrides[i].sharding = sh;
      return SC_OK;
    }
  /* arena arrays cannot grow: copy into a larger one (overrides are few) */
  sc_plan_override *o =
      sc_arena_array(&p->arena, (size_t)p->n_overrides + 1, sizeof *o);
  const char *nm = sc_arena_strdup(&p->arena, name);
  if (!o || !nm) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (p->n_overrides) memcpy(o, p->overrides, (size_t)p->n_overrides * sizeof *o);
  o[p->n_overrides].name = nm;
  o[p->n_overrides].sharding = sh;
  p->overrides = o;
  p->n_overrides++;
  return SC_OK;
}

/* ---- node name index ---- */

typedef struct name_ix {
  const char *name;
  int32_t id;
} name_ix;

static int cmp_name_ix(const void *a, const void *b) {
  return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static name_ix *build_node_index(const sc_graph *g, int32_t *n_out) {
  name_ix *ix = sc_calloc((size_t)g->n_nodes + 1, sizeof *ix);
  if (!ix) return NULL;
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *nd = &g->nodes[i];
    if ((nd->flags & SC_NODE_DEAD) || !nd->name) continue;
    ix[n].name = nd->name;
    ix[n].id = i;
    n++;
  }
  qsort(ix, (size_t)n, sizeof *ix, cmp_name_ix);
  *n_out = n;
  return ix;
}

static int32_t find_node(const name_ix *ix, int32_t n, const char *name) {
  name_ix key = {name, -1};
  const name_ix *hit = bsearch(&key, ix, (size_t)n, sizeof *ix, cmp_name_ix);
  return hit ? hit->id : -1;
}

/* A node name with a comma of which piece is one comma-separated piece
 * (what --stage-boundaries made of it), or NULL. */
static const char *named_with_comma(const name_ix *ix, int32_t n, const char *piece) {
  size_t len = strlen(piece);
  for (int32_t k = 0; k < n; k++) {
    const char *name = ix[k].name;
    if (!strchr(name, ',')) continue;
    for (const char *s = name;; s++) {
      if (strncmp(s, piece, len) == 0 && (s[len] == ',' || s[len] == 0)) return name;
      if (!(s = strchr(s, ','))) break;
    }
  }
  return NULL;
}

/* The error for a boundary of p that is no node of g but a piece of a
 * node name with a comma (--stage-boundaries split it), else SC_OK. */
static sc_status comma_boundary(const sc_plan *p, const sc_graph *g, sc_diag *d) {
  int32_t n_ix = 0;
  name_ix *ix = build_node_index(g, &n_ix);
  if (!ix) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = SC_OK;
  for (int32_t i = 0; i < p->n_boundaries && st == SC_OK; i++) {
    const char *name = find_node(ix, n_ix, p->boundaries[i]) < 0
                           ? named_with_comma(ix, n_ix, p->boundaries[i]) : NULL;
    if (name)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: stage boundary '%s' is not a node of the graph, but '%s' is: "
                       "--stage-boundaries splits at commas, so name it in a plan file's "
                       "pipeline.boundaries (an array) instead",
                       p->boundaries[i], name);
  }
  sc_free(ix);
  return st;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* First name that appears twice in names[n], or NULL. */
static const char *find_duplicate(const char **names, int32_t n, bool *nomem) {
  *nomem = false;
  if (n < 2) return NULL;
  const char **c = sc_calloc((size_t)n, sizeof *c);
  if (!c) {
    *nomem = true;
    return NULL;
  }
  memcpy(c, names, (size_t)n * sizeof *c);
  qsort(c, (size_t)n, sizeof *c, cmp_str);
  const char *dup = NULL;
  for (int32_t i = 1; i < n && !dup; i++)
    if (strcmp(c[i - 1], c[i]) == 0) dup = c[i];
  sc_free(c);
  return dup;
}

static sc_status check_axis(const sc_plan *p, const char *what, const char *axis,
                            sc_diag *d) {
  if (!axis) return SC_OK;
  if (sc_mesh_find_axis(&p->mesh, axis) < 0) {
    char m[512];
    sc_mesh_format(&p->mesh, m, sizeof m);
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: %s axis '%s' is not an axis of the mesh (%s)", what, axis,
                       m[0] ? m : "no axes");
  }
  return SC_OK;
}

/* Why override o names no initializer or input of g (v: its value, or
 * NULL): the weight was replaced by its vocabulary-padded copy (vocab_pad.c:
 * at this tp size its vocabulary does not divide; a plan written for
 * another tp size names the original, which is gone), the value is
 * computed by a node, or there is no such value. */
static sc_status override_not_found(const sc_plan *p, sc_graph *g, const sc_plan_override *o,
                                    const sc_value *v, sc_diag *d) {
  char padded[512];
  snprintf(padded, sizeof padded, "%s.vocab_padded", o->name);
  int32_t pid = sc_graph_find_value(g, padded);
  const sc_value *pv = pid >= 0 ? &g->values[pid] : NULL;
  if (pv && p->tp_axis) {
    char shape[160] = "";
    size_t n = 0;
    for (int32_t i = 0; i < pv->rank && n < sizeof shape; i++) {
      int w = snprintf(shape + n, sizeof shape - n, "%s%lld", i ? " x " : "",
                       (long long)pv->dims[i]);
      if (w < 0) break;
      n += (size_t)w;
    }
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: override of '%s' %s: at %s=%lld this weight's vocabulary does not "
                       "divide, so the weight is padded (to %s) and replaced by '%s'; a plan "
                       "written for another %s size names the weights as they were there "
                       "(write the plan again for this mesh, or override '%s')",
                       o->name, o->sharding, p->tp_axis,
                       (long long)sc_mesh_axis_size(&p->mesh, p->tp_axis), shape, padded,
                       p->tp_axis, padded);
  }
  if (v && !(v->flags & SC_VALUE_DEAD) && v->producer >= 0 && v->producer < g->n_nodes)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: override of '%s': it is computed by node '%s'; only initializers "
                       "and graph inputs take a sharding override",
                       o->name, g->nodes[v->producer].name ? g->nodes[v->producer].name : "?");
  return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "plan: sharding override names '%s', which is not an initializer "
                     "or an input of the graph",
                     o->name);
}

static bool known_schedule(const char *s) {
  return strcmp(s, "gpipe") == 0 || strcmp(s, "1f1b") == 0 || strcmp(s, "interleaved") == 0 ||
         strcmp(s, "zb-h1") == 0;
}

sc_status sc_plan_validate(const sc_plan *p, sc_graph *g, sc_diag *d) {
  sc_status st;
  if (p->version != SC_PLAN_FORMAT_VERSION)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: format version %d; this shardc reads version %d", p->version,
                       SC_PLAN_FORMAT_VERSION);
  if (p->cluster) { /* the placement: the mesh fits the cluster's nodes, evenly */
    sc_placement pl;
    if (p->mesh.ranks_per_node < 1 || p->cluster_nodes < 1)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "plan: a placement needs mesh.ranks_per_node and placement.nodes");
    if (p->mesh.n_ranks > p->cluster_nodes * p->mesh.ranks_per_node ||
        (p->mesh.n_ranks > p->mesh.ranks_per_node &&
         p->mesh.n_ranks % p->mesh.ranks_per_node != 0))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "plan: %lld ranks are not whole nodes of %lld within the %lld nodes "
                         "of cluster %s",
                         (long long)p->mesh.n_ranks, (long long)p->mesh.ranks_per_node,
                         (long long)p->cluster_nodes, p->cluster);
    if ((st = sc_placement_compute(&p->mesh, &pl, d)) != SC_OK) return st;
  }
  if ((st = check_axis(p, "data-parallel", p->dp_axis, d)) != SC_OK ||
      (st = check_axis(p, "sharded data-parallel", p->fsdp_axis, d)) != SC_OK ||
      (st = check_axis(p, "tensor-parallel", p->tp_axis, d)) != SC_OK ||
      (st = check_axis(p, "pipeline", p->pp_axis, d)) != SC_OK)
    return st;
  if (p->expert_tensor_parallel && !p->tp_axis)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: tensor_parallel.expert_tensor_parallel splits the experts over "
                       "the tensor-parallel axis, and the plan has none");
  const char *roles[4] = {p->dp_axis, p->fsdp_axis, p->tp_axis, p->pp_axis};
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++)
      if (roles[i] && roles[j] && strcmp(roles[i], roles[j]) == 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "plan: mesh axis '%s' has two roles (data, sharded data, tensor, "
                           "pipeline)",
                           roles[i]);
  /* An axis without a role is allowed only when a sharding override splits
   * something over it (a plan that places splits by hand); otherwise it
   * would multiply the ranks and split nothing. */
  sc_axes overridden = 0;
  for (int32_t k = 0; k < p->n_overrides; k++) {
    sc_sharding sh;
    sc_diag sd = {0};
    const char *t = p->overrides[k].sharding;
    if (t && sc_sharding_parse(t, strlen(t), &p->mesh, -1, &sh, &sd) == SC_OK)
      overridden |= sc_sharding_dim_axes(&sh) | sh.partial; /* bad ones are named below */
  }
  for (int32_t i = 0; i < p->mesh.n_axes; i++) {
    /* an axis named cp splits the sequence (passes/partition/cp.c), one
     * named ep the batch and the experts (passes/partition/ep.c) */
    bool has_role = ((overridden >> i) & 1u) || strcmp(p->mesh.axes[i].name, "cp") == 0 ||
                    strcmp(p->mesh.axes[i].name, "ep") == 0;
    for (int k = 0; k < 4 && !has_role; k++)
      has_role = roles[k] && strcmp(roles[k], p->mesh.axes[i].name) == 0;
    if (!has_role)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "plan: mesh axis '%s' has no role: it is none of data_parallel.axis, "
                         "training.fsdp_axis, tensor_parallel.axis and pipeline.axis, and no "
                         "sharding override splits over it",
                         p->mesh.axes[i].name);
  }
  int64_t pp = p->pp_axis ? sc_mesh_axis_size(&p->mesh, p->pp_axis) : 1;
  if (p->n_stages != pp)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: %d pipeline stages but the pipeline axis %s%s%s has size %lld",
                       p->n_stages, p->pp_axis ? "'" : "", p->pp_axis ? p->pp_axis : "(none)",
                       p->pp_axis ? "'" : "", (long long)pp);
  /* a pipelined training step with virtual stages cuts n_stages x V chunks */
  int32_t chunks = p->n_stages * (p->virtual_stages > 1 ? p->virtual_stages : 1);
  if (p->n_boundaries != 0 && p->n_boundaries != p->n_stages - 1 &&
      p->n_boundaries != chunks - 1 && g && (st = comma_boundary(p, g, d)) != SC_OK)
    return st;
  if (p->n_boundaries != 0 && p->n_boundaries != p->n_stages - 1 &&
      p->n_boundaries != chunks - 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: %d stage boundaries for %d stages (want %d%s, or \"balanced\")",
                       p->n_boundaries, p->n_stages, p->n_stages - 1,
                       chunks > p->n_stages ? ", or one per chunk after the first" : "");
  if (p->microbatches < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "plan: microbatches %d; need >= 1",
                       p->microbatches);
  if (!p->schedule || !known_schedule(p->schedule))
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "plan: unknown pipeline schedule '%s' (supported: gpipe, 1f1b, "
                       "interleaved, zb-h1)",
                       p->schedule ? p->schedule : "");
  if (!p->precision || strcmp(p->precision, "f32") != 0)
    return sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "plan: precision '%s' (supported: f32)",
                       p->precision ? p->precision : "");
  if (!sc_plan_reduce_dtype_known(p->reduce_dtype))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: reduce_dtype '%s' (supported: fp32, bf16, fp16)",
                       p->reduce_dtype ? p->reduce_dtype : "");
  if (p->zero_stage < 0 || p->zero_stage > 3)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "plan: zero_stage %d outside 0..3",
                       p->zero_stage);
  int64_t dp = p->dp_axis ? sc_mesh_axis_size(&p->mesh, p->dp_axis) : 1;
  if (p->shard_group_size < 0 || (p->shard_group_size > 0 && dp % p->shard_group_size))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: shard_group_size %lld does not divide the data-parallel size %lld",
                       (long long)p->shard_group_size, (long long)dp);
  if (p->n_tp_blocks > 0 && p->tp_all_blocks)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: tensor-parallel blocks are both \"all\" and a list");
  /* overrides: syntax against the mesh first, names against the graph below */
  for (int32_t i = 0; i < p->n_overrides; i++) {
    const sc_plan_override *o = &p->overrides[i];
    sc_sharding sh;
    sc_diag sd = {0};
    sc_diag_clear(&sd);
    if (sc_sharding_parse(o->sharding, strlen(o->sharding), &p->mesh, -1, &sh, &sd) != SC_OK)
      return sc_diag_set(d, sd.status, NULL, NULL, "plan: override of '%s': %s", o->name,
                         sd.msg);
    for (int32_t j = 0; j < i; j++)
      if (strcmp(p->overrides[j].name, o->name) == 0)
        return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                           "plan: '%s' has two sharding overrides", o->name);
    if (!g) continue;
    int32_t id = sc_graph_find_value(g, o->name);
    const sc_value *v = id >= 0 ? &g->values[id] : NULL;
    if (v && (v->flags & SC_VALUE_SPECIALISED)) continue; /* a constant now: not sharded */
    if (sc_graph_was_specialised(g, o->name)) continue; /* given, then folded away */
    if (!v || (v->flags & SC_VALUE_DEAD) || !(v->flags & (SC_VALUE_PARAM | SC_VALUE_INPUT)))
      return override_not_found(p, g, o, v, d);
    if (v->rank >= 0) {
      int64_t local[SC_MAX_RANK];
      sc_diag sd2 = {0};
      sc_diag_clear(&sd2);
      if (sc_sharding_local_shape(&sh, &p->mesh, v->rank, v->dims, local, v->name, &sd2) !=
          SC_OK)
        return sc_diag_set(d, sd2.status, NULL, NULL, "plan: override of '%s' %s: %s", o->name,
                           o->sharding, sd2.msg);
    }
  }
  bool nomem;
  const char *dup = find_duplicate(p->boundaries, p->n_boundaries, &nomem);
  if (!dup) dup = find_duplicate(p->recompute, p->n_recompute, &nomem);
  if (nomem) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (dup)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "plan: node '%s' is listed twice", dup);
  for (int32_t i = 0; i < p->n_node_stages; i++)
    if (p->node_stages[i].stage < 0 || p->node_stages[i].stage >= p->n_stages)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                         "plan: node '%s' is assigned stage %d; stages are 0..%d",
                         p->node_stages[i].node, p->node_stages[i].stage, p->n_stages - 1);
  if (!g) return SC_OK;

  int32_t n_ix = 0;
  name_ix *ix = build_node_index(g, &n_ix);
  if (!ix) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  st = SC_OK;
  int32_t prev = -1;
  for (int32_t i = 0; i < p->n_boundaries && st == SC_OK; i++) {
    int32_t id = find_node(ix, n_ix, p->boundaries[i]);
    if (id < 0 && (st = comma_boundary(p, g, d)) != SC_OK) break;
    if (id < 0)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: stage boundary '%s' is not a node of the graph",
                       p->boundaries[i]);
    else if (id <= prev)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: stage boundary '%s' comes before the previous one in the graph",
                       p->boundaries[i]);
    prev = id;
  }
  for (int32_t i = 0; i < p->n_recompute && st == SC_OK; i++)
    if (find_node(ix, n_ix, p->recompute[i]) < 0)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: recompute names '%s', which is not a node of the graph",
                       p->recompute[i]);
  for (int32_t i = 0; i < p->n_node_stages && st == SC_OK; i++)
    if (find_node(ix, n_ix, p->node_stages[i].node) < 0)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: node_stages names '%s', which is not a node of the graph",
                       p->node_stages[i].node);
  for (int32_t i = 0; i < p->n_tp_blocks && st == SC_OK; i++) {
    size_t len = strlen(p->tp_blocks[i]);
    bool hit = false;
    for (int32_t k = 0; k < n_ix && !hit; k++) hit = strncmp(ix[k].name, p->tp_blocks[i], len) == 0;
    if (!hit)
      st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "plan: tensor-parallel block '%s' is not the prefix of any node name",
                       p->tp_blocks[i]);
  }
  sc_free(ix);
  return st;
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

sc_status sc_plan_from_options(const sc_plan_options *o, sc_plan **out, sc_diag *d) {
  *out = NULL;
  sc_plan *plan = sc_plan_create();
  if (!plan) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_mesh_parse(o->mesh ? o->mesh : "", &plan->mesh, d);
  if (st == SC_OK && o->ranks_per_node)
    st = sc_mesh_set_ranks_per_node(&plan->mesh, o->ranks_per_node, d);
  if (st == SC_OK) st = sc_mesh_check_roles(&plan->mesh, d); /* only dp, tp, pp mean something */
  if (st == SC_OK && o->cluster) { /* put on the cluster: ordered, fitted, placed */
    sc_placement pl;
    sc_cluster_order_mesh(&plan->mesh);
    st = sc_cluster_fit_mesh(o->cluster, &plan->mesh, d);
    if (st == SC_OK) st = sc_placement_compute(&plan->mesh, &pl, d);
    if (st == SC_OK && !(plan->cluster = sc_plan_strdup(plan, o->cluster->name)))
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    plan->cluster_nodes = o->cluster->nodes;
    plan->cluster_figures = *o->cluster;
  }
  if (st != SC_OK) {
    sc_plan_destroy(plan);
    return st;
  }
  static const char *const roles[] = {"dp", "fsdp", "tp", "pp"};
  const char **slot[] = {&plan->dp_axis, &plan->fsdp_axis, &plan->tp_axis, &plan->pp_axis};
  for (int k = 0; k < 4; k++)
    if (sc_mesh_find_axis(&plan->mesh, roles[k]) >= 0) *slot[k] = sc_plan_strdup(plan, roles[k]);
  plan->n_stages = (int32_t)sc_mesh_axis_size(&plan->mesh, "pp");
  if (o->microbatches > 0) plan->microbatches = o->microbatches;
  if (o->schedule) plan->schedule = sc_plan_strdup(plan, o->schedule);
  plan->virtual_stages = o->virtual_stages > 1 ? o->virtual_stages : 1;
  plan->zero_stage = o->zero_stage;
  plan->keep_after_forward = o->keep_after_forward;
  if (o->reduce_dtype) {
    if (!sc_plan_reduce_dtype_known(o->reduce_dtype)) {
      sc_plan_destroy(plan);
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "--reduce-dtype expects fp32, bf16 or fp16, got '%s'", o->reduce_dtype);
    }
    plan->reduce_dtype = sc_plan_strdup(plan, o->reduce_dtype);
  }
  plan->sequence_parallel = o->sequence_parallel;
  plan->vocab_parallel = !o->no_vocab_parallel;
  plan->expert_tensor_parallel = o->expert_tensor_parallel;
  if (plan->expert_tensor_parallel && !plan->tp_axis) {
    sc_plan_destroy(plan);
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--expert-tensor-parallel splits the experts over tp, and the mesh has "
                       "no tp axis");
  }
  if (o->boundaries && set_boundaries(plan, o->boundaries) != SC_OK) {
    sc_plan_destroy(plan);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  *out = plan;
  return SC_OK;
}
