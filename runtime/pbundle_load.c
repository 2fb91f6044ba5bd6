/* pbundle_load.c — loads and runs a partitioned bundle (pbundle.h).
 *
 * partition.json is read in one pass, each part checked before the next
 * uses it: the header (mesh, axes, counts), the model's inputs and outputs
 * (into the small global graph), the stages (each stage bundle loaded and
 * cross-checked, its inputs' shardings parsed against the mesh into the
 * stage graph), then the ranks (each weight file read, its size and SHA-256
 * checked, then its index against the rank's stage program). Names of
 * files inside the bundle are never taken from the text: the text's
 * "dir"/"file" must equal the names the layout prescribes. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/bundle.h"
#include "ir/sharding.h"
#include "pbundle.h"

enum { MAX_JSON_BYTES = 64 << 20 };

typedef struct loader {
  const char *dir;
  sc_diag *d;
  sc_pbundle *b;
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

bool sc_pbundle_is_dir(const char *path) {
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
  FILE *f = fopen(path, "rb");
  if (!f) return fail(l, SC_ERR_IO, "%s: cannot open", name);
  sc_status st = SC_OK;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (len < 0 || len > max || fseek(f, 0, SEEK_SET) != 0) {
    st = fail(l, SC_ERR_INVALID, "%s: unreadable or larger than %lld bytes", name, (long long)max);
  } else {
    *data = sc_malloc((size_t)len + 1);
    if (!*data) st = fail(l, SC_ERR_NOMEM, "out of memory");
    else if (len > 0 && fread(*data, 1, (size_t)len, f) != (size_t)len)
      st = fail(l, SC_ERR_IO, "%s: read error", name);
    if (*data) (*data)[len] = 0;
    *n = len;
  }
  fclose(f);
  return st;
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
static sc_status get_axis(loader *l, json_t *root, const char *key, int32_t *out) {
  json_t *v = json_object_get(root, key);
  *out = -1;
  if (json_is_null(v)) return SC_OK;
  const char *s = json_string_value(v);
  if (!s || (*out = sc_mesh_find_axis(&l->b->part->mesh, s)) < 0)
    return fail(l, SC_ERR_INVALID, "'%s' must be null or an axis of the mesh", key);
  return SC_OK;
}

/* The model's inputs or outputs into the global graph. */
static sc_status read_values(loader *l, json_t *root, bool inputs) {
  const char *key = inputs ? "inputs" : "outputs";
  json_t *a = json_object_get(root, key);
  if (!json_is_array(a) || json_array_size(a) > (1 << 16))
    return fail(l, SC_ERR_PARSE, "'%s' must be an array", key);
  sc_graph *g = l->b->global;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *o = json_array_get(a, i), *shape = json_object_get(o, "shape");
    const char *name = get_str(o, "name"), *dt = get_str(o, "dtype");
    sc_dtype t = dt ? sc_dtype_parse(dt) : SC_DTYPE_COUNT;
    if (!name || !*name || t == SC_DTYPE_COUNT || !json_is_array(shape) ||
        json_array_size(shape) > SC_MAX_RANK)
      return fail(l, SC_ERR_PARSE, "%s[%zu]: needs a name, a dtype and a shape", key, i);
    if (sc_graph_find_value(g, name) >= 0)
      return fail(l, SC_ERR_INVALID, "%s[%zu]: '%s' appears twice", key, i, name);
    int32_t id = sc_graph_add_value(g, name);
    if (id < 0) return fail(l, SC_ERR_NOMEM, "out of memory");
    sc_value *v = &g->values[id];
    v->dtype = t;
    v->rank = (int32_t)json_array_size(shape);
    for (int32_t k = 0; k < v->rank; k++) {
      json_t *e = json_array_get(shape, (size_t)k);
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > (1LL << 40))
        return fail(l, SC_ERR_INVALID, "%s[%zu]: bad dim %d", key, i, (int)k);
      v->dims[k] = (int64_t)json_integer_value(e);
    }
    if ((inputs ? sc_graph_add_input(g, id) : sc_graph_add_output(g, id)) != SC_OK)
      return fail(l, SC_ERR_NOMEM, "out of memory");
  }
  return SC_OK;
}

/* Stage k: its bundle, checked against the text; its graph of inputs. */
static sc_status read_stage(loader *l, json_t *o, int32_t k) {
  sc_pbundle *b = l->b;
  sc_partition *part = b->part;
  char name[32], path[4096], where[96];
  snprintf(name, sizeof name, "stage%d", (int)k);
  snprintf(where, sizeof where, "stages[%d]", (int)k);
  const char *dir = get_str(o, "dir");
  if (!dir || strcmp(dir, name) != 0)
    return fail(l, SC_ERR_INVALID, "%s: 'dir' must be \"%s\"", where, name);
  snprintf(path, sizeof path, "%s/%s", l->dir, name);
  sc_status st = sc_bundle_load(path, &b->stages[k], l->d);
  if (st != SC_OK) return st;
  const sc_program *p = b->stages[k]->program;
  b->programs[k] = b->stages[k]->program;
  b->modules[k] = b->stages[k]->kernels;
  if (!b->modules[k]) return fail(l, SC_ERR_UNSUPPORTED, "%s: not a cpu bundle", name);
  if (p->mesh.n_axes > 0 && !sc_mesh_equal(&p->mesh, &part->mesh))
    return fail(l, SC_ERR_INVALID, "%s: the program's mesh is not partition.json's", name);
  json_t *ins = json_object_get(o, "inputs"), *outs = json_object_get(o, "outputs");
  if (!json_is_array(ins) || !json_is_array(outs) ||
      json_array_size(ins) != (size_t)p->n_inputs || json_array_size(outs) != (size_t)p->n_outputs)
    return fail(l, SC_ERR_INVALID, "%s: inputs/outputs do not match the stage program", where);
  sc_graph *g = sc_graph_create(name);
  if (!g || sc_graph_attach_mesh(g, &part->mesh) != SC_OK) {
    sc_graph_destroy(g);
    return fail(l, SC_ERR_NOMEM, "out of memory");
  }
  part->stages[k] = g;
  sc_graph_mark_local_shapes(g);
  for (int32_t i = 0; i < p->n_inputs; i++) {
    json_t *in = json_array_get(ins, (size_t)i);
    const sc_buffer *buf = &p->buffers[p->inputs[i]];
    const char *nm = get_str(in, "name"), *text = get_str(in, "sharding");
    if (!nm || !text || !buf->name || strcmp(nm, buf->name) != 0)
      return fail(l, SC_ERR_INVALID, "%s.inputs[%d]: not the program's input '%s'", where,
                  (int)i, buf->name ? buf->name : "?");
    sc_sharding sh;
    sc_diag sd = {0};
    sc_diag_clear(&sd);
    if (sc_sharding_parse(text, strlen(text), &part->mesh, buf->rank, &sh, &sd) != SC_OK)
      return fail(l, SC_ERR_INVALID, "%s.inputs[%d]: sharding '%s': %s", where, (int)i, text,
                  sd.msg);
    int32_t id = sc_graph_add_value(g, nm);
    if (id < 0 || sc_graph_set_sharding(g, id, &sh) != SC_OK)
      return fail(l, SC_ERR_INVALID, "%s.inputs[%d]: cannot record its sharding", where, (int)i);
  }
  for (int32_t i = 0; i < p->n_outputs; i++) {
    const char *nm = json_string_value(json_array_get(outs, (size_t)i));
    const char *want = p->buffers[p->outputs[i]].name;
    if (!nm || !want || strcmp(nm, want) != 0)
      return fail(l, SC_ERR_INVALID, "%s.outputs[%d]: not the program's output", where, (int)i);
  }
  return SC_OK;
}

/* Rank r's weight file: size and hash, then its index. */
static sc_status read_rank(loader *l, json_t *o, int64_t r) {
  sc_pbundle *b = l->b;
  const sc_partition *part = b->part;
  char name[64], where[96];
  snprintf(name, sizeof name, "weights/rank%lld.bin", (long long)r);
  snprintf(where, sizeof where, "ranks[%lld]", (long long)r);
  const char *file = get_str(o, "file"), *hash = get_str(o, "sha256");
  if (!file || strcmp(file, name) != 0)
    return fail(l, SC_ERR_INVALID, "%s: 'file' must be \"%s\"", where, name);
  int64_t coords[SC_MESH_MAX_AXES], stage, bytes, n = 0;
  sc_mesh_rank_to_coords(&part->mesh, r, coords);
  int64_t want_stage = part->pp_axis >= 0 ? coords[part->pp_axis] : 0;
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
  b->rank_files[r] = data;
  char hex[65];
  sc_sha256_hex(data, (size_t)n, hex);
  if (n != bytes || strcmp(hex, hash) != 0)
    return fail(l, SC_ERR_INVALID,
                "%s: %lld bytes with SHA-256 %s, partition.json says %lld bytes, %s "
                "(corrupted bundle)", name, (long long)n, hex, (long long)bytes, hash);
  const sc_program *p = b->programs[stage];
  const void **cd = sc_calloc(p->n_buffers > 0 ? (size_t)p->n_buffers : 1, sizeof *cd);
  if (!cd) return fail(l, SC_ERR_NOMEM, "out of memory");
  b->rank_const[r] = cd;
  json_t *consts = json_object_get(o, "consts");
  if (!json_is_array(consts)) return fail(l, SC_ERR_PARSE, "%s: 'consts' must be an array", where);
  /* The writer's layout exactly: ascending buffers, each at the next
   * aligned offset, the file ending with the last piece. */
  int64_t pos = 0, last = -1;
  for (size_t i = 0; i < json_array_size(consts); i++) {
    json_t *c = json_array_get(consts, i);
    int64_t id, off, nb;
    snprintf(where, sizeof where, "ranks[%lld].consts[%zu]", (long long)r, i);
    if ((st = get_int(l, c, "buffer", 0, p->n_buffers - 1, where, &id)) ||
        (st = get_int(l, c, "offset", 0, bytes, where, &off)) ||
        (st = get_int(l, c, "bytes", 0, bytes - off, where, &nb)))
      return st;
    const sc_buffer *buf = &p->buffers[id];
    const char *nm = get_str(c, "name");
    if (buf->kind != SC_BUF_CONST || buf->data || buf->bytes <= 0 || nb != buf->bytes ||
        !nm || !buf->name || strcmp(nm, buf->name) != 0 || id <= last)
      return fail(l, SC_ERR_INVALID, "%s: not the next external constant of stage %lld",
                  where, (long long)stage);
    int64_t want = (pos + SC_BUNDLE_WEIGHT_ALIGN - 1) / SC_BUNDLE_WEIGHT_ALIGN *
                   SC_BUNDLE_WEIGHT_ALIGN;
    if (off != want)
      return fail(l, SC_ERR_INVALID, "%s: offset %lld, the layout puts it at %lld", where,
                  (long long)off, (long long)want);
    cd[id] = data + off;
    pos = off + nb;
    last = id;
  }
  if (pos != bytes)
    return fail(l, SC_ERR_INVALID, "%s: %lld bytes, its pieces end at %lld", name,
                (long long)bytes, (long long)pos);
  for (int32_t k = 0; k < p->n_buffers; k++) {
    const sc_buffer *buf = &p->buffers[k];
    if (buf->kind == SC_BUF_CONST && !buf->data && buf->bytes > 0 && !cd[k])
      return fail(l, SC_ERR_INVALID, "%s: no piece of constant '%s'", name,
                  buf->name ? buf->name : "?");
  }
  return SC_OK;
}

static sc_status read_root(loader *l, json_t *root) {
  sc_pbundle *b = l->b;
  sc_partition *part = b->part;
  sc_status st;
  const char *fmt = get_str(root, "format"), *mesh = get_str(root, "mesh");
  if (!fmt || strcmp(fmt, "shardc-partition") != 0)
    return fail(l, SC_ERR_PARSE, "partition.json: \"format\" is not \"shardc-partition\"");
  int64_t version, rpn, n_stages, mb;
  if ((st = get_int(l, root, "version", 0, INT64_MAX, "partition.json", &version))) return st;
  if (version != 1)
    return fail(l, SC_ERR_UNSUPPORTED, "partition.json: version %lld (this shardc reads 1)",
                (long long)version);
  sc_diag md = {0};
  sc_diag_clear(&md);
  if (!mesh || sc_mesh_parse(mesh, &part->mesh, &md) != SC_OK)
    return fail(l, SC_ERR_INVALID, "partition.json: 'mesh': %s", mesh ? md.msg : "missing");
  if ((st = get_int(l, root, "ranks_per_node", 0, SC_MESH_MAX_RANKS, "partition.json", &rpn)))
    return st;
  if (rpn && sc_mesh_set_ranks_per_node(&part->mesh, rpn, &md) != SC_OK)
    return fail(l, SC_ERR_INVALID, "partition.json: ranks_per_node: %s", md.msg);
  if ((st = get_axis(l, root, "pp_axis", &part->pp_axis)) ||
      (st = get_axis(l, root, "dp_axis", &part->dp_axis)) ||
      (st = get_axis(l, root, "tp_axis", &part->tp_axis)))
    return st;
  int64_t stages_want = part->pp_axis >= 0 ? part->mesh.axes[part->pp_axis].size : 1;
  if ((st = get_int(l, root, "n_stages", stages_want, stages_want, "partition.json", &n_stages)) ||
      (st = get_int(l, root, "microbatches", 1, 1 << 20, "partition.json", &mb)))
    return st;
  part->n_stages = b->n_stages = (int32_t)n_stages;
  part->microbatches = (int32_t)mb;
  b->n_ranks = part->mesh.n_ranks;
  if ((st = read_values(l, root, true)) || (st = read_values(l, root, false))) return st;

  json_t *stages = json_object_get(root, "stages"), *ranks = json_object_get(root, "ranks");
  if (!json_is_array(stages) || json_array_size(stages) != (size_t)n_stages)
    return fail(l, SC_ERR_INVALID, "'stages' must be an array of %lld", (long long)n_stages);
  if (!json_is_array(ranks) || json_array_size(ranks) != (size_t)b->n_ranks)
    return fail(l, SC_ERR_INVALID, "'ranks' must be an array of %lld", (long long)b->n_ranks);
  size_t ns = (size_t)n_stages, nr = (size_t)b->n_ranks;
  b->stages = sc_calloc(ns, sizeof *b->stages);
  b->programs = sc_calloc(ns, sizeof *b->programs);
  b->modules = sc_calloc(ns, sizeof *b->modules);
  part->stages = sc_calloc(ns, sizeof *part->stages);
  b->rank_files = sc_calloc(nr, sizeof *b->rank_files);
  b->rank_const = sc_calloc(nr, sizeof *b->rank_const);
  if (!b->stages || !b->programs || !b->modules || !part->stages || !b->rank_files ||
      !b->rank_const)
    return fail(l, SC_ERR_NOMEM, "out of memory");
  for (int32_t k = 0; k < part->n_stages; k++)
    if ((st = read_stage(l, json_array_get(stages, (size_t)k), k))) return st;
  for (int64_t r = 0; r < b->n_ranks; r++)
    if ((st = read_rank(l, json_array_get(ranks, (size_t)r), r))) return st;
  return SC_OK;
}

sc_status sc_pbundle_load(const char *dir, sc_pbundle **out, sc_diag *d) {
  *out = NULL;
  loader l = {.dir = dir, .d = d};
  sc_pbundle *b = l.b = sc_calloc(1, sizeof *b);
  if (b) b->part = sc_calloc(1, sizeof *b->part);
  if (b && b->part) b->global = sc_graph_create("partitioned bundle");
  if (!b || !b->part || !b->global) {
    sc_pbundle_destroy(b);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  b->part->global = b->global;
  sc_mesh_init(&b->part->mesh);
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
    sc_pbundle_destroy(b);
    return st;
  }
  *out = b;
  return SC_OK;
}

void sc_pbundle_destroy(sc_pbundle *b) {
  if (!b) return;
  for (int32_t k = 0; b->stages && k < b->n_stages; k++) sc_bundle_destroy(b->stages[k]);
  for (int64_t r = 0; b->rank_files && r < b->n_ranks; r++) sc_free(b->rank_files[r]);
  for (int64_t r = 0; b->rank_const && r < b->n_ranks; r++) sc_free(b->rank_const[r]);
  if (b->part) {
    for (int32_t k = 0; b->part->stages && k < b->n_stages; k++)
      sc_graph_destroy(b->part->stages[k]);
    sc_free(b->part->stages);
    sc_free(b->part);
  }
  sc_graph_destroy(b->global);
  sc_free(b->stages);
  sc_free(b->programs);
  sc_free(b->modules);
  sc_free(b->rank_files);
  sc_free(b->rank_const);
  sc_free(b);
}

static sc_dist_opts bundle_opts(const sc_pbundle *b, const sc_dist_opts *o) {
  sc_dist_opts opts;
  sc_dist_opts_init(&opts);
  if (o) opts = *o;
  opts.cpu_modules = b->modules;
  opts.rank_const_data = (const void *const *const *)b->rank_const;
  return opts;
}

sc_status sc_pbundle_run_local(const sc_pbundle *b, const sc_dist_opts *o,
                               const sc_tensor_view *inputs, int32_t n_inputs,
                               sc_dist_output *outputs, int32_t n_outputs,
                               sc_dist_rank_stats *stats, sc_diag *d) {
  sc_dist_opts opts = bundle_opts(b, o);
  return sc_dist_run_local(b->part, b->programs, &opts, inputs, n_inputs, outputs, n_outputs,
                           stats, d);
}

sc_status sc_pbundle_run_rank(const sc_pbundle *b, const sc_dist_opts *o, sc_comm *world,
                              const sc_tensor_view *inputs, int32_t n_inputs,
                              sc_dist_output *outputs, int32_t n_outputs,
                              sc_dist_rank_stats *stats, sc_diag *d) {
  sc_dist_opts opts = bundle_opts(b, o);
  return sc_dist_run_rank(b->part, b->programs, &opts, world, inputs, n_inputs, outputs,
                          n_outputs, stats, d);
}
