/* dist_load.c — reads a distributed program from a partitioned bundle
 * (dist_load.h).
 *
 * partition.json is read in one pass, each part checked before the next
 * uses it: the header (mesh, its placement on the nodes, axes, counts), the
 * model's inputs and outputs, the stages (each stage bundle loaded and
 * cross-checked, its inputs' shardings parsed against the mesh), then the ranks (each weight file
 * read, its size and SHA-256 checked, then its index against the rank's
 * stage program). Names of files inside the bundle are never taken from
 * the text: the text's "dir"/"file" must equal the names the layout
 * prescribes. What was loaded (stage bundles, rank files) is the
 * program's owner, released with it. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/program_json.h"
#include "ir/sharding.h"
#include "ir/pipe.h"
#include "ir/placement.h"
#include "runtime/dist_load.h"

#include "ir/fileio.h"

enum { MAX_JSON_BYTES = 64 << 20 };

/* What a loaded program holds on to (its owner). */
typedef struct loaded {
  int32_t n_stages;
  sc_bundle **stages;           /* [n_stages] */
  int64_t n_ranks;
  void **rank_files;            /* [n_ranks] file contents */
  /* a training bundle: the step's global view, the manifest read against
   * it, and params.bin (the manifest's parameters point into it) */
  sc_program *view;
  sc_train_manifest *train;
  char *params;
} loaded;

static void loaded_free(void *p) {
  loaded *o = p;
  if (!o) return;
  sc_train_manifest_destroy(o->train);
  sc_program_destroy(o->view);
  sc_free(o->params);
  for (int32_t k = 0; o->stages && k < o->n_stages; k++) sc_bundle_destroy(o->stages[k]);
  for (int64_t r = 0; o->rank_files && r < o->n_ranks; r++) sc_free(o->rank_files[r]);
  sc_free(o->stages);
  sc_free(o->rank_files);
  sc_free(o);
}

typedef struct loader {
  const char *dir;
  sc_diag *d;
  sc_dist_program *dp;
  loaded *own;
} loader;

static sc_status fail(loader *l, sc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status fail(loader *l, sc_status st, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sc_diag_set(l->d, st, NULL, NULL, "partitioned bundle: %s", msg);
}

bool sc_dist_bundle_is_dir(const char *path) {
  struct stat sb;
  char buf[4096];
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
  snprintf(buf, sizeof buf, "%s/partition.json", path);
  return stat(buf, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Reads DIR/name whole (at most max bytes) into *data (sc_malloc'd). */
static sc_status read_file(loader *l, const char *name, int64_t max, char **data, int64_t *n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", l->dir, name);
  size_t len = 0;
  sc_diag fd = {0};
  sc_diag_clear(&fd);
  /* a regular file only (never blocks on a FIFO), at most max bytes */
  if (sc_file_read_all(path, name, max, data, &len, &fd) != SC_OK)
    return fail(l, fd.status, "%s", fd.msg);
  *n = (int64_t)len;
  return SC_OK;
}

static sc_status get_int(loader *l, json_t *o, const char *key, int64_t lo, int64_t hi,
                         const char *where, int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) return fail(l, SC_ERR_PARSE, "%s: '%s' must be an integer", where, key);
  *out = (int64_t)json_integer_value(v);
  if (*out < lo || *out > hi)
    return fail(l, SC_ERR_INVALID, "%s: '%s' = %lld out of range [%lld, %lld]", where, key,
                (long long)*out, (long long)lo, (long long)hi);
  return SC_OK;
}

static const char *get_str(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* "pp_axis" etc.: an axis name of the mesh or null (-1). */
static sc_status get_axis(loader *l, json_t *root, const sc_mesh *m, const char *key,
                          int32_t *out) {
  json_t *v = json_object_get(root, key);
  *out = -1;
  if (json_is_null(v)) return SC_OK;
  const char *s = json_string_value(v);
  if (!s || (*out = sc_mesh_find_axis(m, s)) < 0)
    return fail(l, SC_ERR_INVALID, "'%s' must be null or an axis of the mesh", key);
  return SC_OK;
}

/* A pipelined step's activation offloading: "offload", the names whose
 * stashed microbatches wait in the host pool, and "offload_horizon"
 * (sc_dist_schedule; absent: none). */
static sc_status read_offload(loader *l, json_t *pl) {
  json_t *a = pl ? json_object_get(pl, "offload") : NULL;
  if (!a) return SC_OK;
  int64_t h;
  size_t n = json_array_size(a);
  if (!json_is_array(a) || n > (1 << 20))
    return fail(l, SC_ERR_INVALID,
                "partition.json: 'pipeline.offload' must be an array of value names");
  sc_status st = get_int(l, pl, "offload_horizon", 0, 1 << 20, "partition.json: pipeline", &h);
  const char **names = st == SC_OK ? sc_malloc((n + 1) * sizeof *names) : NULL;
  if (st == SC_OK && !names) st = fail(l, SC_ERR_NOMEM, "out of memory");
  for (size_t i = 0; st == SC_OK && i < n; i++)
    if (!(names[i] = json_string_value(json_array_get(a, i))))
      st = fail(l, SC_ERR_INVALID,
                "partition.json: 'pipeline.offload' must be an array of value names");
  if (st == SC_OK)
    st = sc_dist_program_set_offload(l->dp, names, (int32_t)n, (int32_t)h, l->d);
  sc_free(names);
  return st;
}

/* The model's inputs or outputs. */
static sc_status read_values(loader *l, json_t *root, bool inputs) {
  const char *key = inputs ? "inputs" : "outputs";
  json_t *a = json_object_get(root, key);
  if (!json_is_array(a) || json_array_size(a) > (1 << 16))
    return fail(l, SC_ERR_PARSE, "'%s' must be an array", key);
  sc_dist_program *dp = l->dp;
  size_t n = json_array_size(a);
  sc_dist_value *vals = sc_arena_array(&dp->arena, n ? n : 1, sizeof *vals);
  int32_t *stage = inputs ? NULL : sc_arena_array(&dp->arena, n ? n : 1, sizeof *stage);
  if (!vals || (!inputs && !stage)) return fail(l, SC_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(a, i), *shape = json_object_get(o, "shape");
    const char *name = get_str(o, "name"), *dt = get_str(o, "dtype");
    sc_dtype t = dt ? sc_dtype_parse(dt) : SC_DTYPE_COUNT;
    if (!name || !*name || t == SC_DTYPE_COUNT || !json_is_array(shape) ||
        json_array_size(shape) > SC_MAX_RANK)
      return fail(l, SC_ERR_PARSE, "%s[%zu]: needs a name, a dtype and a shape", key, i);
    for (size_t k = 0; k < i; k++)
      if (strcmp(vals[k].name, name) == 0)
        return fail(l, SC_ERR_INVALID, "%s[%zu]: '%s' appears twice", key, i, name);
    sc_dist_value *v = &vals[i];
    if (!(v->name = sc_arena_strdup(&dp->arena, name))) return fail(l, SC_ERR_NOMEM, "out of memory");
    v->dtype = t;
    v->rank = (int32_t)json_array_size(shape);
    for (int32_t k = 0; k < v->rank; k++) {
      json_t *e = json_array_get(shape, (size_t)k);
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > (1LL << 40))
        return fail(l, SC_ERR_INVALID, "%s[%zu]: bad dim %d", key, i, (int)k);
      v->dims[k] = (int64_t)json_integer_value(e);
    }
    if (stage) stage[i] = -1;
  }
  if (inputs) {
    dp->inputs = vals;
    dp->n_inputs = (int32_t)n;
  } else {
    dp->outputs = vals;
    dp->output_stage = stage;
    dp->n_outputs = (int32_t)n;
  }
  return SC_OK;
}

static int32_t find_output(const sc_dist_program *dp, const char *name) {
  for (int32_t k = 0; name && k < dp->n_outputs; k++)
    if (strcmp(dp->outputs[k].name, name) == 0) return k;
  return -1;
}

/* Stage k: its bundle, checked against the text; its inputs' shardings
 * and which global output each of its outputs is. */
static sc_status read_stage(loader *l, json_t *o, int32_t k) {
  sc_dist_program *dp = l->dp;
  sc_dist_stage *ds = &dp->stages[k];
  char name[32], path[4096], where[96];
  snprintf(name, sizeof name, "stage%d", (int)k);
  snprintf(where, sizeof where, "stages[%d]", (int)k);
  const char *dir = get_str(o, "dir");
  if (!dir || strcmp(dir, name) != 0)
    return fail(l, SC_ERR_INVALID, "%s: 'dir' must be \"%s\"", where, name);
  snprintf(path, sizeof path, "%s/%s", l->dir, name);
  sc_status st = sc_bundle_load(path, &l->own->stages[k], l->d);
  if (st == SC_OK) st = sc_bundle_check_kind(l->own->stages[k], false, l->d);
  if (st != SC_OK) return st;
  const sc_program *p = l->own->stages[k]->program;
  ds->program = l->own->stages[k]->program;
  ds->kernels = l->own->stages[k]->kernels;
  if (!ds->kernels) return fail(l, SC_ERR_UNSUPPORTED, "%s: not a cpu bundle", name);
  if (p->mesh.n_axes > 0 && !sc_mesh_equal(&p->mesh, &dp->mesh))
    return fail(l, SC_ERR_INVALID, "%s: the program's mesh is not partition.json's", name);
  json_t *ins = json_object_get(o, "inputs"), *outs = json_object_get(o, "outputs");
  if (!json_is_array(ins) || !json_is_array(outs) ||
      json_array_size(ins) != (size_t)p->n_inputs || json_array_size(outs) != (size_t)p->n_outputs)
    return fail(l, SC_ERR_INVALID, "%s: inputs/outputs do not match the stage program", where);
  ds->input_sharding = sc_arena_array(&dp->arena, (size_t)p->n_inputs + 1, sizeof *ds->input_sharding);
  ds->output_global = sc_arena_array(&dp->arena, (size_t)p->n_outputs + 1, sizeof *ds->output_global);
  if (!ds->input_sharding || !ds->output_global) return fail(l, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0; i < p->n_inputs; i++) {
    json_t *in = json_array_get(ins, (size_t)i);
    const sc_buffer *buf = &p->buffers[p->inputs[i]];
    const char *nm = get_str(in, "name"), *text = get_str(in, "sharding");
    if (!nm || !text || !buf->name || strcmp(nm, buf->name) != 0)
      return fail(l, SC_ERR_INVALID, "%s.inputs[%d]: not the program's input '%s'", where,
                  (int)i, buf->name ? buf->name : "?");
    sc_diag sd = {0};
    sc_diag_clear(&sd);
    if (sc_sharding_parse(text, strlen(text), &dp->mesh, buf->rank, &ds->input_sharding[i],
                          &sd) != SC_OK)
      return fail(l, SC_ERR_INVALID, "%s.inputs[%d]: sharding '%s': %s", where, (int)i, text,
                  sd.msg);
  }
  for (int32_t i = 0; i < p->n_outputs; i++) {
    const char *nm = json_string_value(json_array_get(outs, (size_t)i));
    const char *want = p->buffers[p->outputs[i]].name;
    if (!nm || !want || strcmp(nm, want) != 0)
      return fail(l, SC_ERR_INVALID, "%s.outputs[%d]: not the program's output", where, (int)i);
    int32_t g = find_output(dp, nm);
    ds->output_global[i] = g;
    if (g < 0) continue;
    if (dp->output_stage[g] >= 0)
      return fail(l, SC_ERR_INVALID, "output '%s' is produced by stages %d and %d", nm,
                  (int)dp->output_stage[g], (int)k);
    dp->output_stage[g] = k;
  }
  return SC_OK;
}

/* Rank r's weight file: size and hash, then its index. */
static sc_status read_rank(loader *l, json_t *o, int64_t r) {
  sc_dist_program *dp = l->dp;
  char name[64], where[96];
  snprintf(name, sizeof name, "weights/rank%lld.bin", (long long)r);
  snprintf(where, sizeof where, "ranks[%lld]", (long long)r);
  const char *file = get_str(o, "file"), *hash = get_str(o, "sha256");
  if (!file || strcmp(file, name) != 0)
    return fail(l, SC_ERR_INVALID, "%s: 'file' must be \"%s\"", where, name);
  int64_t stage, bytes, n = 0;
  int64_t want_stage = sc_dist_rank_stage(dp, r);
  sc_status st;
  if ((st = get_int(l, o, "stage", want_stage, want_stage, where, &stage)) ||
      (st = get_int(l, o, "bytes", 0, INT64_MAX, where, &bytes)))
    return st;
  if (!hash || strlen(hash) != 64) return fail(l, SC_ERR_PARSE, "%s: bad 'sha256'", where);
  char *data = NULL;
  if ((st = read_file(l, name, bytes, &data, &n))) {
    sc_free(data);
    return st;
  }
  l->own->rank_files[r] = data;
  char hex[65];
  sc_sha256_hex(data, (size_t)n, hex);
  if (n != bytes || strcmp(hex, hash) != 0)
    return fail(l, SC_ERR_INVALID,
                "%s: %lld bytes with SHA-256 %s, partition.json says %lld bytes, %s "
                "(corrupted bundle)", name, (long long)n, hex, (long long)bytes, hash);
  const void ***per = sc_arena_array(&dp->arena, (size_t)dp->n_stages, sizeof *per);
  if (!per) return fail(l, SC_ERR_NOMEM, "out of memory");
  dp->rank_weights[r] = per;
  for (int32_t s = 0; s < dp->n_stages; s++) {
    if (!sc_dist_rank_runs(dp, r, s)) continue;
    const sc_program *sp = dp->stages[s].program;
    per[s] = sc_arena_array(&dp->arena, sp->n_buffers > 0 ? (size_t)sp->n_buffers : 1,
                            sizeof **per);
    if (!per[s]) return fail(l, SC_ERR_NOMEM, "out of memory");
  }
  json_t *consts = json_object_get(o, "consts");
  if (!json_is_array(consts)) return fail(l, SC_ERR_PARSE, "%s: 'consts' must be an array", where);
  /* The writer's layout exactly: ascending stages and buffers, each at the
   * next aligned offset, the file ending with the last piece. */
  int64_t pos = 0, last_stage = 0, last = -1;
  for (size_t i = 0; i < json_array_size(consts); i++) {
    json_t *c = json_array_get(consts, i);
    int64_t s = stage, id, off, nb;
    snprintf(where, sizeof where, "ranks[%lld].consts[%zu]", (long long)r, i);
    if (json_object_get(c, "stage") &&
        (st = get_int(l, c, "stage", last_stage, dp->n_stages - 1, where, &s)))
      return st;
    if (!sc_dist_rank_runs(dp, r, (int32_t)s))
      return fail(l, SC_ERR_INVALID, "%s: rank %lld does not run stage %lld", where,
                  (long long)r, (long long)s);
    if (s != last_stage) last = -1;
    last_stage = s;
    const sc_program *p = dp->stages[s].program;
    if ((st = get_int(l, c, "buffer", 0, p->n_buffers - 1, where, &id)) ||
        (st = get_int(l, c, "offset", 0, bytes, where, &off)) ||
        (st = get_int(l, c, "bytes", 0, bytes - off, where, &nb)))
      return st;
    const sc_buffer *buf = &p->buffers[id];
    const char *nm = get_str(c, "name");
    if (buf->kind != SC_BUF_CONST || buf->data || buf->bytes <= 0 || nb != buf->bytes ||
        !nm || !buf->name || strcmp(nm, buf->name) != 0 || id <= last)
      return fail(l, SC_ERR_INVALID, "%s: not the next external constant of stage %lld",
                  where, (long long)s);
    int64_t want = (pos + SC_BUNDLE_WEIGHT_ALIGN - 1) / SC_BUNDLE_WEIGHT_ALIGN *
                   SC_BUNDLE_WEIGHT_ALIGN;
    if (off != want)
      return fail(l, SC_ERR_INVALID, "%s: offset %lld, the layout puts it at %lld", where,
                  (long long)off, (long long)want);
    per[s][id] = data + off;
    pos = off + nb;
    last = id;
  }
  if (pos != bytes)
    return fail(l, SC_ERR_INVALID, "%s: %lld bytes, its pieces end at %lld", name,
                (long long)bytes, (long long)pos);
  for (int32_t s = 0; s < dp->n_stages; s++) {
    const sc_program *p = dp->stages[s].program;
    for (int32_t k = 0; per[s] && k < p->n_buffers; k++) {
      const sc_buffer *buf = &p->buffers[k];
      if (buf->kind == SC_BUF_CONST && !buf->data && buf->bytes > 0 && !per[s][k])
        return fail(l, SC_ERR_INVALID, "%s: no piece of constant '%s' of stage %d", name,
                    buf->name ? buf->name : "?", (int)s);
    }
  }
  return SC_OK;
}

/* A training bundle: params.bin and training.json, as partition.json lists
 * them (size and SHA-256 checked), the manifest read against the step's
 * global view. */
static sc_status read_training(loader *l, json_t *list) {
  static const char *const names[2] = {"params.bin", "training.json"};
  char *data[2] = {NULL, NULL};
  int64_t n[2] = {0, 0};
  sc_status st = SC_OK;
  if (!json_is_array(list) || json_array_size(list) != 2)
    return fail(l, SC_ERR_INVALID, "'training' must list params.bin and training.json");
  for (int k = 0; k < 2 && st == SC_OK; k++) {
    json_t *f = json_array_get(list, (size_t)k);
    const char *nm = get_str(f, "name"), *hash = get_str(f, "sha256");
    int64_t bytes;
    if (!nm || strcmp(nm, names[k]) != 0 || !hash || strlen(hash) != 64)
      st = fail(l, SC_ERR_INVALID, "training[%d]: must name \"%s\" with its sha256", k, names[k]);
    if (st == SC_OK) st = get_int(l, f, "bytes", 0, INT64_MAX, "training", &bytes);
    if (st == SC_OK) st = read_file(l, names[k], bytes, &data[k], &n[k]);
    char hex[65];
    if (st == SC_OK) sc_sha256_hex(data[k], (size_t)n[k], hex);
    if (st == SC_OK && (n[k] != bytes || strcmp(hex, hash) != 0))
      st = fail(l, SC_ERR_INVALID, "%s: %lld bytes with SHA-256 %s, partition.json says %lld "
                "bytes, %s (corrupted bundle)", names[k], (long long)n[k], hex,
                (long long)bytes, hash);
  }
  loaded *own = l->own;
  if (st == SC_OK && !(own->view = sc_dist_program_global_view(l->dp)))
    st = fail(l, SC_ERR_NOMEM, "out of memory");
  sc_diag md = {0};
  sc_diag_clear(&md);
  if (st == SC_OK && sc_train_manifest_read_json(data[1], (size_t)n[1], own->view, data[0], n[0],
                                                 &own->train, &md) != SC_OK)
    st = fail(l, md.status, "training.json: %s", md.msg);
  if (st == SC_OK) {
    own->params = data[0];
    data[0] = NULL;
    l->dp->train = own->train;
    sc_dist_program_set_accumulation(l->dp, own->train->grad_accum); /* as compiled */
  }
  sc_free(data[0]);
  sc_free(data[1]);
  return st;
}

/* "placement" (optional: absent without ranks_per_node, and in bundles
 * written before it was): the nodes and each axis's stride and groups must
 * be what mesh gives (sc_placement_compute), field by field. */
static sc_status read_placement(loader *l, json_t *root, const sc_mesh *mesh) {
  json_t *o = json_object_get(root, "placement");
  if (!o) return SC_OK;
  sc_placement pl;
  sc_diag pd = {0};
  sc_diag_clear(&pd);
  if (!json_is_object(o) || mesh->ranks_per_node < 1)
    return fail(l, SC_ERR_INVALID, "partition.json: 'placement' must be an object, and needs "
                "ranks_per_node");
  if (sc_placement_compute(mesh, &pl, &pd) != SC_OK)
    return fail(l, SC_ERR_INVALID, "partition.json: 'placement': %s", pd.msg);
  json_t *nodes = json_object_get(o, "nodes");
  if (!json_is_integer(nodes) || json_integer_value(nodes) != pl.nodes)
    return fail(l, SC_ERR_INVALID, "partition.json: 'placement.nodes' must be %lld: the mesh's "
                "%lld ranks at %lld a node", (long long)pl.nodes, (long long)mesh->n_ranks,
                (long long)pl.ranks_per_node);
  json_t *axes = json_object_get(o, "axes");
  if (!json_is_array(axes) || json_array_size(axes) != (size_t)pl.n_axes)
    return fail(l, SC_ERR_INVALID, "partition.json: 'placement.axes' must be an array of %d "
                "entries, one per mesh axis", (int)pl.n_axes);
  for (int32_t a = 0; a < pl.n_axes; a++) {
    const sc_placement_axis *x = &pl.axes[a];
    json_t *e = json_array_get(axes, (size_t)a);
    const char *name = get_str(e, "axis"), *groups = get_str(e, "groups");
    json_t *size = json_object_get(e, "size"), *stride = json_object_get(e, "stride"),
           *spanned = json_object_get(e, "nodes_spanned");
    if (!json_is_object(e) || json_object_size(e) != 5 || !name || strcmp(name, x->name) != 0 ||
        !groups || strcmp(groups, sc_placement_groups_name(x)) != 0 ||
        !json_is_integer(size) || json_integer_value(size) != x->size ||
        !json_is_integer(stride) || json_integer_value(stride) != x->stride ||
        !json_is_integer(spanned) || json_integer_value(spanned) != x->nodes_spanned) {
      char what[160];
      sc_placement_axis_describe(x, what, sizeof what);
      return fail(l, SC_ERR_INVALID, "partition.json: 'placement.axes[%d]' is not what the mesh "
                  "gives for axis '%s' (%s)", (int)a, x->name, what);
    }
  }
  return SC_OK;
}

static sc_status read_root(loader *l, json_t *root) {
  sc_status st;
  const char *fmt = get_str(root, "format"), *mesh_text = get_str(root, "mesh");
  if (!fmt || strcmp(fmt, "shardc-partition") != 0)
    return fail(l, SC_ERR_PARSE, "partition.json: \"format\" is not \"shardc-partition\"");
  int64_t version, rpn, n_stages, mb;
  if ((st = get_int(l, root, "version", 0, INT64_MAX, "partition.json", &version))) return st;
  if (version != 1)
    return fail(l, SC_ERR_UNSUPPORTED, "partition.json: version %lld (this shardc reads 1)",
                (long long)version);
  sc_mesh mesh;
  sc_diag md = {0};
  sc_diag_clear(&md);
  if (!mesh_text || sc_mesh_parse(mesh_text, &mesh, &md) != SC_OK)
    return fail(l, SC_ERR_INVALID, "partition.json: 'mesh': %s", mesh_text ? md.msg : "missing");
  if ((st = get_int(l, root, "ranks_per_node", 0, SC_MESH_MAX_RANKS, "partition.json", &rpn)))
    return st;
  if (rpn && sc_mesh_set_ranks_per_node(&mesh, rpn, &md) != SC_OK)
    return fail(l, SC_ERR_INVALID, "partition.json: ranks_per_node: %s", md.msg);
  if ((st = read_placement(l, root, &mesh))) return st;
  int32_t pp, dpa, tp;
  if ((st = get_axis(l, root, &mesh, "pp_axis", &pp)) ||
      (st = get_axis(l, root, &mesh, "dp_axis", &dpa)) ||
      (st = get_axis(l, root, &mesh, "tp_axis", &tp)))
    return st;
  int64_t stages_want = pp >= 0 ? mesh.axes[pp].size : 1, chunks = 0, kind = SC_SCHEDULE_GPIPE;
  json_t *pl = json_object_get(root, "pipeline");
  if (pl) { /* a pipelined training step: its pieces are the stages */
    if (pp < 0 || !json_is_object(pl))
      return fail(l, SC_ERR_INVALID, "partition.json: 'pipeline' needs a pp axis");
    int64_t P = mesh.axes[pp].size, ranks;
    if ((st = get_int(l, pl, "ranks", P, P, "pipeline", &ranks)) ||
        (st = get_int(l, pl, "chunks", P, 64 * P, "pipeline", &chunks)))
      return st;
    kind = sc_schedule_parse(get_str(pl, "schedule"));
    if (chunks % P != 0 || kind < 0)
      return fail(l, SC_ERR_INVALID, "pipeline: 'chunks' must be a multiple of %lld and "
                  "'schedule' one of gpipe, 1f1b, interleaved, zb-h1", (long long)P);
    stages_want = SC_PIPE_PHASES * chunks;
  }
  if ((st = get_int(l, root, "n_stages", stages_want, stages_want, "partition.json", &n_stages)) ||
      (st = get_int(l, root, "microbatches", 1, 1 << 20, "partition.json", &mb)))
    return st;
  const char *kind_text = get_str(root, "kind");
  bool training = kind_text && strcmp(kind_text, "training") == 0;
  if (json_object_get(root, "kind") && !training)
    return fail(l, SC_ERR_INVALID, "partition.json: 'kind' must be \"training\" or absent");
  sc_dist_program *dp = l->dp = sc_dist_program_create(&mesh, (int32_t)n_stages);
  if (!dp) return fail(l, SC_ERR_NOMEM, "out of memory");
  dp->owns_programs = false; /* the stage bundles own them */
  dp->owner = l->own;
  dp->release_owner = loaded_free;
  dp->schedule.microbatches = (int32_t)mb;
  dp->schedule.kind = (sc_schedule_kind)kind;
  dp->pipe_chunks = (int32_t)chunks;
  dp->pipe_ranks = chunks ? (int32_t)mesh.axes[pp].size : 0;
  sc_dist_program_set_roles(dp, pp, dpa, tp);
  if ((st = read_offload(l, pl))) return st;
  if ((st = read_values(l, root, true)) || (st = read_values(l, root, false))) return st;

  json_t *stages = json_object_get(root, "stages"), *ranks = json_object_get(root, "ranks");
  if (!json_is_array(stages) || json_array_size(stages) != (size_t)n_stages)
    return fail(l, SC_ERR_INVALID, "'stages' must be an array of %lld", (long long)n_stages);
  if (!json_is_array(ranks) || json_array_size(ranks) != (size_t)mesh.n_ranks)
    return fail(l, SC_ERR_INVALID, "'ranks' must be an array of %lld", (long long)mesh.n_ranks);
  size_t ns = (size_t)n_stages, nr = (size_t)mesh.n_ranks;
  l->own->n_stages = (int32_t)n_stages;
  l->own->n_ranks = mesh.n_ranks;
  l->own->stages = sc_calloc(ns, sizeof *l->own->stages);
  l->own->rank_files = sc_calloc(nr, sizeof *l->own->rank_files);
  dp->rank_weights = sc_arena_array(&dp->arena, nr, sizeof *dp->rank_weights);
  if (!l->own->stages || !l->own->rank_files || !dp->rank_weights)
    return fail(l, SC_ERR_NOMEM, "out of memory");
  for (int32_t k = 0; k < dp->n_stages; k++)
    if ((st = read_stage(l, json_array_get(stages, (size_t)k), k))) return st;
  for (int32_t k = 0; k < dp->n_outputs; k++)
    if (dp->output_stage[k] < 0)
      return fail(l, SC_ERR_INVALID, "output '%s' is produced by no stage", dp->outputs[k].name);
  for (int64_t r = 0; r < mesh.n_ranks; r++)
    if ((st = read_rank(l, json_array_get(ranks, (size_t)r), r))) return st;
  if (training && (st = read_training(l, json_object_get(root, "training")))) return st;
  sc_diag cd = {0};
  sc_diag_clear(&cd);
  if (sc_dist_program_index(dp, &cd) != SC_OK) return fail(l, cd.status, "%s", cd.msg);
  if (sc_dist_program_check(dp, &cd) != SC_OK)
    return fail(l, SC_ERR_INVALID, "%s", cd.msg);
  return SC_OK;
}

static void bundle_free(void *b) { sc_bundle_destroy(b); }

/* A one-rank bundle (manifest.json): its program as stage 0. */
static sc_status load_single(const char *dir, sc_dist_program **out, sc_diag *d) {
  sc_bundle *b = NULL;
  sc_status st = sc_bundle_load(dir, &b, d);
  if (st == SC_OK) st = sc_bundle_check_kind(b, false, d);
  if (st == SC_OK && !b->kernels)
    st = sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "a %s bundle: only cpu bundles run here", b->target);
  if (st == SC_OK) st = sc_dist_program_single(b->program, false, out, d);
  if (st != SC_OK) {
    sc_bundle_destroy(b);
    return st;
  }
  (*out)->stages[0].kernels = b->kernels;
  (*out)->owner = b;
  (*out)->release_owner = bundle_free;
  return SC_OK;
}

sc_status sc_dist_program_load(const char *dir, sc_dist_program **out, sc_diag *d) {
  *out = NULL;
  if (!sc_dist_bundle_is_dir(dir) && sc_bundle_is_dir(dir)) return load_single(dir, out, d);
  loader l = {.dir = dir, .d = d};
  l.own = sc_calloc(1, sizeof *l.own);
  if (!l.own) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  char *text = NULL;
  int64_t n = 0;
  sc_status st = read_file(&l, "partition.json", MAX_JSON_BYTES, &text, &n);
  json_t *root = NULL;
  if (st == SC_OK) {
    json_error_t err;
    root = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    st = root ? read_root(&l, root)
              : fail(&l, SC_ERR_PARSE, "partition.json: line %d: %s", err.line, err.text);
  }
  json_decref(root);
  sc_free(text);
  if (st != SC_OK) {
    if (l.dp) sc_dist_program_destroy(l.dp); /* releases l.own */
    else loaded_free(l.own);
    return st;
  }
  *out = l.dp;
  return SC_OK;
}
