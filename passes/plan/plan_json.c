/* plan_json.c — the plan as JSON (docs/plan-format.md), with jansson.
 *
 * Writing is deterministic: keys in a fixed order, every field present
 * (defaults included), 2-space indent, a final newline; so write(read(write(p)))
 * == write(p) byte for byte. Reading is strict: a key the format does not
 * define, a value of the wrong JSON type, a duplicate key or a format
 * version other than SC_PLAN_FORMAT_VERSION is an error naming the key's
 * path (e.g. "pipeline.microbatches"); then sc_plan_validate checks the
 * meaning, against the graph when one is given. "predicted" (the cost
 * model's step time, docs/planner.md) is written when the plan has one and
 * skipped when read: it is derived from the compiled program. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ir/fileio.h"
#include "json_keys.h"
#include "plan.h"

/* The largest plan file read: a plan of the 1.5B GPT at 64 ranks is well
 * under 1 MiB. */
enum { PLAN_MAX_BYTES = 64 << 20 };

/* ---- writing ---- */

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *str_array(const char **a, int32_t n) {
  json_t *arr = json_array();
  for (int32_t i = 0; arr && i < n; i++) json_array_append_new(arr, json_string(a[i]));
  return arr;
}

json_t *sc_plan_placement_axes_json(const sc_placement *pl) {
  json_t *axes = json_array();
  for (int32_t a = 0; axes && a < pl->n_axes; a++) {
    const sc_placement_axis *x = &pl->axes[a];
    if (json_array_append_new(axes, json_pack("{s:s, s:I, s:I, s:s, s:I}", "axis", x->name,
                                              "size", (json_int_t)x->size, "stride",
                                              (json_int_t)x->stride, "groups",
                                              sc_placement_groups_name(x), "nodes_spanned",
                                              (json_int_t)x->nodes_spanned)) != 0) {
      json_decref(axes);
      return NULL;
    }
  }
  return axes;
}

/* "predicted": derived from the compiled program (docs/planner.md). */
static json_t *predicted_json(const sc_plan_predicted *pr) {
  json_t *o = json_object();
  json_object_set_new(o, "source", json_string(pr->source[0] ? pr->source : "simulated"));
  if (pr->unknown[0]) {
    json_object_set_new(o, "unknown", json_string(pr->unknown));
    return o;
  }
  json_object_set_new(o, "step_time_s", json_real(pr->step_time_s));
  json_object_set_new(o, "rank", json_integer(pr->rank));
  json_object_set_new(o, "pipe_rank", json_integer(pr->pipe_rank));
  json_t *comm = json_object();
  for (int32_t i = 0; comm && i < pr->n_comm; i++)
    json_object_set_new(comm, pr->comm[i].axes, json_real(pr->comm[i].seconds));
  json_object_set_new(o, "breakdown",
                      json_pack("{s:f, s:o, s:f, s:f, s:f}", "compute_s", pr->compute_s,
                                "exposed_comm_s", comm, "bubble_s", pr->bubble_s, "recompute_s",
                                pr->recompute_s, "optimizer_s", pr->optimizer_s));
  json_t *calls = json_object();
  for (int32_t i = 0; calls && i < pr->n_comm; i++)
    if (pr->comm[i].calls > 0)
      json_object_set_new(calls, pr->comm[i].axes,
                          json_pack("{s:I, s:f}", "calls", (json_int_t)pr->comm[i].calls,
                                    "bytes", pr->comm[i].bytes));
  json_object_set_new(o, "collectives", calls);
  json_object_set_new(o, "tokens_per_s",
                      pr->tokens_per_s > 0 ? json_real(pr->tokens_per_s) : json_null());
  json_object_set_new(o, "tflops_per_gpu", json_real(pr->flops_per_s_per_gpu / 1e12));
  json_object_set_new(o, "mfu", pr->mfu > 0 ? json_real(pr->mfu) : json_null());
  json_object_set_new(o, "peak_bytes_per_rank", pr->peak_bytes_per_rank > 0
                                                    ? json_integer(pr->peak_bytes_per_rank)
                                                    : json_null());
  json_object_set_new(o, "fits", pr->peak_bytes_per_rank > 0 ? json_boolean(pr->fits)
                                                             : json_null());
  return o;
}

json_t *sc_plan_predicted_json(const sc_plan_predicted *pr) { return predicted_json(pr); }

static json_t *plan_to_json(const sc_plan *p) {
  char mesh[1024];
  sc_mesh_format(&p->mesh, mesh, sizeof mesh);
  json_t *root = json_object();
  json_object_set_new(root, "version", json_integer(p->version));
  json_object_set_new(root, "mesh",
                      json_pack("{s:s, s:I}", "axes", mesh, "ranks_per_node",
                                (json_int_t)p->mesh.ranks_per_node));
  json_object_set_new(root, "data_parallel", json_pack("{s:o}", "axis", str_or_null(p->dp_axis)));
  json_t *tp = json_object();
  json_object_set_new(tp, "axis", str_or_null(p->tp_axis));
  json_object_set_new(tp, "blocks", p->tp_all_blocks ? json_string("all")
                                                     : str_array(p->tp_blocks, p->n_tp_blocks));
  json_object_set_new(tp, "sequence_parallel", json_boolean(p->sequence_parallel));
  json_object_set_new(tp, "vocab_parallel", json_boolean(p->vocab_parallel));
  json_object_set_new(tp, "expert_tensor_parallel", json_boolean(p->expert_tensor_parallel));
  json_object_set_new(root, "tensor_parallel", tp);
  json_t *pp = json_object();
  json_object_set_new(pp, "axis", str_or_null(p->pp_axis));
  json_object_set_new(pp, "stages", json_integer(p->n_stages));
  json_object_set_new(pp, "boundaries", p->n_boundaries ? str_array(p->boundaries, p->n_boundaries)
                                                        : json_string("balanced"));
  json_object_set_new(pp, "microbatches", json_integer(p->microbatches));
  json_object_set_new(pp, "schedule", json_string(p->schedule));
  if (p->virtual_stages > 1)
    json_object_set_new(pp, "virtual_stages", json_integer(p->virtual_stages));
  json_t *ns = json_object();
  for (int32_t i = 0; ns && i < p->n_node_stages; i++)
    json_object_set_new(ns, p->node_stages[i].node, json_integer(p->node_stages[i].stage));
  json_object_set_new(pp, "node_stages", ns);
  json_object_set_new(root, "pipeline", pp);
  json_t *sh = json_object();
  for (int32_t i = 0; sh && i < p->n_overrides; i++)
    json_object_set_new(sh, p->overrides[i].name, json_string(p->overrides[i].sharding));
  json_object_set_new(root, "shardings", sh);
  json_object_set_new(root, "precision", json_string(p->precision));
  json_t *tr = json_object();
  json_object_set_new(tr, "fsdp_axis", str_or_null(p->fsdp_axis));
  json_object_set_new(tr, "zero_stage", json_integer(p->zero_stage));
  json_object_set_new(tr, "reshard_after_forward", json_boolean(!p->keep_after_forward));
  json_object_set_new(tr, "shard_group_size", json_integer(p->shard_group_size));
  json_object_set_new(tr, "reduce_dtype", json_string(p->reduce_dtype ? p->reduce_dtype : "fp32"));
  json_object_set_new(tr, "recompute", str_array(p->recompute, p->n_recompute));
  json_object_set_new(root, "training", tr);
  sc_placement pl;
  sc_diag pd = {0};
  sc_diag_clear(&pd);
  if (p->cluster && sc_placement_compute(&p->mesh, &pl, &pd) == SC_OK) {
    json_t *axes = sc_plan_placement_axes_json(&pl);
    json_object_set_new(root, "placement",
                        json_pack("{s:s, s:I, s:o}", "cluster", p->cluster, "nodes",
                                  (json_int_t)p->cluster_nodes, "axes", axes));
  }
  if (p->predicted.on) json_object_set_new(root, "predicted", predicted_json(&p->predicted));
  if (p->attention.ran) json_object_set_new(root, "attention", sc_fuse_attention_json(&p->attention));
  return root;
}

char *sc_plan_write_json_string(const sc_plan *p, sc_diag *d) {
  json_t *root = plan_to_json(p);
  char *s = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
  json_decref(root);
  if (!s) {
    sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory writing the plan");
    return NULL;
  }
  size_t n = strlen(s);
  char *out = sc_malloc(n + 2);
  if (out) {
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = 0;
  } else {
    sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory writing the plan");
  }
  free(s);
  return out;
}

sc_status sc_plan_write_json(const sc_plan *p, FILE *f, sc_diag *d) {
  char *s = sc_plan_write_json_string(p, d);
  if (!s) return SC_ERR_NOMEM;
  size_t n = strlen(s);
  bool ok = fwrite(s, 1, n, f) == n && fflush(f) == 0;
  sc_free(s);
  return ok ? SC_OK : sc_diag_set(d, SC_ERR_IO, NULL, NULL, "error writing the plan");
}

/* ---- reading ---- */

typedef struct rd {
  sc_plan *p;
  sc_diag *d;
} rd;

static sc_status bad(rd *r, const char *path, const char *what) {
  return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL, "plan: '%s' %s", path, what);
}

static sc_status only_keys(rd *r, json_t *obj, const char *path, const char *const *allowed) {
  return sc_json_only_keys(obj, "plan", path, allowed, r->d);
}

static sc_status get_obj(rd *r, json_t *parent, const char *key, const char *path,
                         bool required, json_t **out) {
  *out = json_object_get(parent, key);
  if (!*out) return required ? bad(r, path, "is missing") : SC_OK;
  if (!json_is_object(*out)) return bad(r, path, "must be an object");
  return SC_OK;
}

static sc_status get_str(rd *r, json_t *obj, const char *key, const char *path,
                         bool nullable, const char **out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return SC_OK; /* keep the default */
  if (json_is_null(v) && nullable) {
    *out = NULL;
    return SC_OK;
  }
  if (!json_is_string(v)) return bad(r, path, nullable ? "must be a string or null" : "must be a string");
  *out = sc_plan_strdup(r->p, json_string_value(v));
  return *out ? SC_OK : sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static sc_status get_int(rd *r, json_t *obj, const char *key, const char *path, int64_t lo,
                         int64_t hi, int64_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return SC_OK;
  if (!json_is_integer(v)) return bad(r, path, "must be an integer");
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return sc_diag_set(r->d, SC_ERR_INVALID, NULL, NULL, "plan: '%s' = %lld outside %lld..%lld",
                       path, (long long)x, (long long)lo, (long long)hi);
  *out = x;
  return SC_OK;
}

static sc_status get_bool(rd *r, json_t *obj, const char *key, const char *path, bool *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return SC_OK;
  if (!json_is_boolean(v)) return bad(r, path, "must be true or false");
  *out = json_is_true(v);
  return SC_OK;
}

static sc_status str_list(rd *r, json_t *arr, const char *path, const char ***out,
                          int32_t *n_out) {
  if (!json_is_array(arr)) return bad(r, path, "must be an array of strings");
  size_t n = json_array_size(arr);
  if (n > (1u << 24)) return bad(r, path, "is too long");
  const char **a = sc_arena_array(&r->p->arena, n + 1, sizeof *a);
  if (!a) return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(arr, i);
    if (!json_is_string(e)) return bad(r, path, "must be an array of strings");
    if (!(a[i] = sc_plan_strdup(r->p, json_string_value(e))))
      return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  *out = a;
  *n_out = (int32_t)n;
  return SC_OK;
}

#define TRY(x)                   \
  do {                           \
    sc_status st_ = (x);         \
    if (st_ != SC_OK) return st_; \
  } while (0)

/* "placement": the cluster's name and nodes; its axes are derived from the
 * mesh, and must be what the mesh gives (an edited stride is refused, not
 * silently recomputed). */
static sc_status read_placement(rd *r, json_t *o) {
  sc_plan *p = r->p;
  static const char *const k[] = {"cluster", "nodes", "axes", NULL};
  TRY(only_keys(r, o, "placement", k));
  json_t *c = json_object_get(o, "cluster"), *axes = json_object_get(o, "axes");
  if (!c || !json_is_string(c)) return bad(r, "placement.cluster", "must be a string");
  if (!(p->cluster = sc_plan_strdup(p, json_string_value(c))))
    return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (!json_object_get(o, "nodes")) return bad(r, "placement.nodes", "is missing");
  TRY(get_int(r, o, "nodes", "placement.nodes", 1, SC_CLUSTER_MAX_NODES, &p->cluster_nodes));
  { /* a preset's figures come back by its name; a file's are not kept */
    sc_diag pd = {0};
    if (strchr(p->cluster, ':') &&
        sc_cluster_preset(p->cluster, &p->cluster_figures, &pd) != SC_OK)
      memset(&p->cluster_figures, 0, sizeof p->cluster_figures);
  }
  if (!axes || !json_is_array(axes)) return bad(r, "placement.axes", "must be an array");
  sc_placement pl;
  if (p->mesh.ranks_per_node < 1)
    return sc_diag_set(r->d, SC_ERR_INVALID, NULL, NULL,
                       "plan: 'placement' needs mesh.ranks_per_node");
  TRY(sc_placement_compute(&p->mesh, &pl, r->d));
  if (json_array_size(axes) != (size_t)pl.n_axes)
    return sc_diag_set(r->d, SC_ERR_INVALID, NULL, NULL,
                       "plan: 'placement.axes' has %zu entries; the mesh has %d axes",
                       json_array_size(axes), (int)pl.n_axes);
  json_t *want = sc_plan_placement_axes_json(&pl);
  if (!want) return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t a = 0; a < pl.n_axes; a++) {
    bool same = json_equal(json_array_get(want, (size_t)a), json_array_get(axes, (size_t)a));
    if (!same) {
      json_decref(want);
      char what[160];
      sc_placement_axis_describe(&pl.axes[a], what, sizeof what);
      return sc_diag_set(r->d, SC_ERR_INVALID, NULL, NULL,
                         "plan: 'placement.axes[%d]' is not what the mesh gives for axis '%s' "
                         "(%s)", (int)a, pl.axes[a].name, what);
    }
  }
  json_decref(want);
  return SC_OK;
}

static sc_status read_root(rd *r, json_t *root) {
  sc_plan *p = r->p;
  if (!json_is_object(root)) return bad(r, "", "must be an object");
  static const char *const top[] = {"version", "mesh", "data_parallel", "tensor_parallel",
                                    "pipeline", "shardings", "precision", "training",
                                    "placement", "predicted", "attention", NULL};
  TRY(only_keys(r, root, "", top));
  json_t *v = json_object_get(root, "version");
  if (!v) return bad(r, "version", "is missing");
  if (!json_is_integer(v)) return bad(r, "version", "must be an integer");
  if (json_integer_value(v) != SC_PLAN_FORMAT_VERSION)
    return sc_diag_set(r->d, SC_ERR_INVALID, NULL, NULL,
                       "plan: format version %lld; this shardc reads version %d",
                       (long long)json_integer_value(v), SC_PLAN_FORMAT_VERSION);

  json_t *o;
  TRY(get_obj(r, root, "mesh", "mesh", true, &o));
  static const char *const mesh_keys[] = {"axes", "ranks_per_node", NULL};
  TRY(only_keys(r, o, "mesh", mesh_keys));
  json_t *axes = json_object_get(o, "axes");
  if (!axes || !json_is_string(axes)) return bad(r, "mesh.axes", "must be a string like \"pp=2,tp=2\"");
  if (json_string_value(axes)[0] &&
      sc_mesh_parse(json_string_value(axes), &p->mesh, r->d) != SC_OK)
    return r->d->status;
  int64_t rpn = 0;
  TRY(get_int(r, o, "ranks_per_node", "mesh.ranks_per_node", 0, SC_MESH_MAX_RANKS, &rpn));
  p->mesh.ranks_per_node = rpn;

  TRY(get_obj(r, root, "data_parallel", "data_parallel", false, &o));
  if (o) {
    static const char *const k[] = {"axis", NULL};
    TRY(only_keys(r, o, "data_parallel", k));
    TRY(get_str(r, o, "axis", "data_parallel.axis", true, &p->dp_axis));
  }

  TRY(get_obj(r, root, "tensor_parallel", "tensor_parallel", false, &o));
  if (o) {
    static const char *const k[] = {"axis", "blocks", "sequence_parallel", "vocab_parallel",
                                    "expert_tensor_parallel", NULL};
    TRY(only_keys(r, o, "tensor_parallel", k));
    TRY(get_str(r, o, "axis", "tensor_parallel.axis", true, &p->tp_axis));
    json_t *b = json_object_get(o, "blocks");
    if (b && json_is_string(b)) {
      if (strcmp(json_string_value(b), "all") != 0)
        return bad(r, "tensor_parallel.blocks", "must be \"all\" or an array of names");
      p->tp_all_blocks = true;
    } else if (b) {
      TRY(str_list(r, b, "tensor_parallel.blocks", &p->tp_blocks, &p->n_tp_blocks));
      p->tp_all_blocks = false;
    }
    TRY(get_bool(r, o, "sequence_parallel", "tensor_parallel.sequence_parallel",
                 &p->sequence_parallel));
    TRY(get_bool(r, o, "vocab_parallel", "tensor_parallel.vocab_parallel", &p->vocab_parallel));
    TRY(get_bool(r, o, "expert_tensor_parallel", "tensor_parallel.expert_tensor_parallel",
                 &p->expert_tensor_parallel));
  }

  TRY(get_obj(r, root, "pipeline", "pipeline", false, &o));
  if (o) {
    static const char *const k[] = {"axis", "stages", "boundaries", "microbatches",
                                    "schedule", "virtual_stages", "node_stages", NULL};
    TRY(only_keys(r, o, "pipeline", k));
    TRY(get_str(r, o, "axis", "pipeline.axis", true, &p->pp_axis));
    int64_t x = p->n_stages;
    TRY(get_int(r, o, "stages", "pipeline.stages", 1, SC_MESH_MAX_RANKS, &x));
    p->n_stages = (int32_t)x;
    json_t *b = json_object_get(o, "boundaries");
    if (b && json_is_string(b)) {
      if (strcmp(json_string_value(b), "balanced") != 0)
        return bad(r, "pipeline.boundaries", "must be \"balanced\" or an array of node names");
      p->n_boundaries = 0;
    } else if (b) {
      TRY(str_list(r, b, "pipeline.boundaries", &p->boundaries, &p->n_boundaries));
    }
    x = p->microbatches;
    TRY(get_int(r, o, "microbatches", "pipeline.microbatches", 1, 1 << 20, &x));
    p->microbatches = (int32_t)x;
    TRY(get_str(r, o, "schedule", "pipeline.schedule", false, &p->schedule));
    x = p->virtual_stages > 1 ? p->virtual_stages : 1;
    TRY(get_int(r, o, "virtual_stages", "pipeline.virtual_stages", 1, 1024, &x));
    p->virtual_stages = (int32_t)x;
    json_t *ns = json_object_get(o, "node_stages");
    if (ns) {
      if (!json_is_object(ns)) return bad(r, "pipeline.node_stages", "must be an object");
      size_t n = json_object_size(ns);
      p->node_stages = sc_arena_array(&p->arena, n + 1, sizeof *p->node_stages);
      if (!p->node_stages) return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      const char *key;
      json_t *val;
      json_object_foreach(ns, key, val) {
        /* in int32_t's range; whether it is a stage, sc_plan_validate says */
        if (!json_is_integer(val) || json_integer_value(val) < INT32_MIN ||
            json_integer_value(val) > INT32_MAX)
          return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL,
                             "plan: 'pipeline.node_stages.%s' must be a stage number", key);
        sc_plan_node_stage *e = &p->node_stages[p->n_node_stages++];
        e->node = sc_plan_strdup(p, key);
        e->stage = (int32_t)json_integer_value(val);
        if (!e->node) return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      }
    }
  }

  TRY(get_obj(r, root, "shardings", "shardings", false, &o));
  if (o) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
      if (!json_is_string(val))
        return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL,
                           "plan: 'shardings.%s' must be a sharding string like \"[tp,_]\"",
                           key);
      TRY(sc_plan_set_override(p, key, json_string_value(val), r->d));
    }
  }

  TRY(get_str(r, root, "precision", "precision", false, &p->precision));

  TRY(get_obj(r, root, "training", "training", false, &o));
  if (o) {
    static const char *const k[] = {"fsdp_axis", "zero_stage", "reshard_after_forward",
                                    "shard_group_size", "reduce_dtype", "recompute", NULL};
    TRY(only_keys(r, o, "training", k));
    TRY(get_str(r, o, "fsdp_axis", "training.fsdp_axis", true, &p->fsdp_axis));
    json_t *raf = json_object_get(o, "reshard_after_forward");
    if (raf && !json_is_boolean(raf))
      return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL,
                         "plan: 'training.reshard_after_forward' must be true or false");
    if (raf) p->keep_after_forward = !json_is_true(raf);
    int64_t x = p->zero_stage;
    TRY(get_int(r, o, "zero_stage", "training.zero_stage", 0, 3, &x));
    p->zero_stage = (int32_t)x;
    TRY(get_int(r, o, "shard_group_size", "training.shard_group_size", 0, SC_MESH_MAX_RANKS,
                &p->shard_group_size));
    TRY(get_str(r, o, "reduce_dtype", "training.reduce_dtype", false, &p->reduce_dtype));
    json_t *rc = json_object_get(o, "recompute");
    if (rc) TRY(str_list(r, rc, "training.recompute", &p->recompute, &p->n_recompute));
  }
  TRY(get_obj(r, root, "placement", "placement", false, &o));
  if (o) TRY(read_placement(r, o));
  return SC_OK;
}

sc_status sc_plan_read_json(const char *text, size_t len, const char *name, sc_graph *g,
                            sc_plan **out, sc_diag *d) {
  *out = NULL;
  sc_diag_set_file(d, name ? name : "<plan>");
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "plan: line %d: %s", err.line, err.text);
  sc_plan *p = sc_plan_create();
  if (!p) {
    json_decref(root);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  rd r = {p, d};
  sc_status st = read_root(&r, root);
  json_decref(root);
  if (st == SC_OK) st = sc_plan_validate(p, g, d);
  if (st != SC_OK) {
    sc_plan_destroy(p);
    return st;
  }
  *out = p;
  return SC_OK;
}

sc_status sc_plan_read_json_file(const char *path, sc_graph *g, sc_plan **out, sc_diag *d) {
  *out = NULL;
  /* a regular file of at most PLAN_MAX_BYTES: a FIFO or a device is
   * refused at once, not read until memory runs out */
  char *buf = NULL;
  size_t len = 0;
  sc_status st = sc_file_read_all(path, NULL, PLAN_MAX_BYTES, &buf, &len, d);
  if (st != SC_OK) {
    sc_diag_set_file(d, path);
    return st;
  }
  st = sc_plan_read_json(buf, len, path, g, out, d);
  sc_free(buf);
  return st;
}
