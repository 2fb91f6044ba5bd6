/* partition_bundle.c — writes a partitioned bundle (partition_bundle.h).
 *
 * Order: the stage bundles (sc_bundle_write, sharded constants external),
 * then one weight file per rank (for the rank's stage program, every CONST
 * buffer without data is cut from its source at the rank's coordinates,
 * checked against the buffer's dtype and local shape first, as
 * runtime/dist.c does), then partition.json last, so that an interrupted
 * write never looks like a bundle. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/sharding.h"
#include "partition_bundle.h"

static sc_status make_dir(const char *dir, sc_diag *d) {
  struct stat sb;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot create the directory: %s", dir,
                       strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: not a directory", dir);
  return SC_OK;
}

static json_t *jaxis(const sc_mesh *m, int32_t a) {
  return a >= 0 ? json_string(m->axes[a].name) : json_null();
}

static json_t *jvalue(const sc_value *v) {
  json_t *o = json_object(), *shape = json_array();
  json_object_set_new(o, "name", json_string(v->name ? v->name : ""));
  json_object_set_new(o, "dtype", json_string(sc_dtype_name(v->dtype)));
  for (int32_t k = 0; k < v->rank; k++) json_array_append_new(shape, json_integer(v->dims[k]));
  json_object_set_new(o, "shape", shape);
  return o;
}

/* Stage k: its inputs with their sharding text, its outputs. */
static json_t *jstage(const sc_partition *part, int32_t k, const sc_program *p) {
  json_t *o = json_object(), *ins = json_array(), *outs = json_array();
  char dir[32], text[512];
  snprintf(dir, sizeof dir, "stage%d", (int)k);
  json_object_set_new(o, "dir", json_string(dir));
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    int32_t id = b->name ? sc_graph_find_value(part->stages[k], b->name) : -1;
    const sc_sharding *sh = id >= 0 ? sc_graph_sharding(part->stages[k], id) : NULL;
    sc_sharding rep;
    sc_sharding_replicated(&rep, b->rank);
    sc_sharding_format(sh ? sh : &rep, &part->mesh, text, sizeof text);
    json_t *in = json_object();
    json_object_set_new(in, "name", json_string(b->name ? b->name : ""));
    json_object_set_new(in, "sharding", json_string(text));
    json_array_append_new(ins, in);
  }
  for (int32_t i = 0; i < p->n_outputs; i++) {
    const char *name = p->buffers[p->outputs[i]].name;
    json_array_append_new(outs, json_string(name ? name : ""));
  }
  json_object_set_new(o, "inputs", ins);
  json_object_set_new(o, "outputs", outs);
  return o;
}

/* The source of external constant buf, checked to cut to its local shape. */
static sc_status shard_source(const sc_partition *part, const sc_buffer *buf,
                              const sc_shard_source **out, sc_diag *d) {
  const sc_shard_source *src = buf->name ? sc_partition_source(part, buf->name) : NULL;
  if (!src || !src->data)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "constant '%s' has no data",
                       buf->name ? buf->name : "?");
  int64_t local[SC_MAX_RANK];
  sc_status st = SC_ERR_INVALID;
  if (src->dtype == buf->dtype && src->rank == buf->rank && src->sharding.rank == src->rank)
    st = sc_sharding_local_shape(&src->sharding, &part->mesh, src->rank, src->dims, local,
                                 buf->name, d);
  for (int32_t k = 0; st == SC_OK && k < buf->rank; k++)
    if (local[k] != buf->dims[k]) st = SC_ERR_INVALID;
  if (st != SC_OK)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "sharded constant '%s': its source does not cut to the program's buffer",
                       buf->name);
  *out = src;
  return SC_OK;
}

/* weights/rank<r>.bin and its index entry. */
static sc_status write_rank(const sc_partition *part, const sc_program *p, int64_t r,
                            int32_t stage, const char *dir, json_t *ranks, sc_diag *d) {
  int64_t coords[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(&part->mesh, r, coords);
  char name[64], *path = NULL;
  snprintf(name, sizeof name, "weights/rank%lld.bin", (long long)r);
  size_t n = strlen(dir) + strlen(name) + 2;
  path = sc_malloc(n);
  if (!path) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  sc_status st = f ? SC_OK : sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot create: %s",
                                         path, strerror(errno));
  json_t *consts = json_array();
  sc_sha256 sh;
  sc_sha256_init(&sh);
  static const uint8_t zeros[SC_BUNDLE_WEIGHT_ALIGN];
  int64_t pos = 0;
  for (int32_t b = 0; st == SC_OK && b < p->n_buffers; b++) {
    const sc_buffer *buf = &p->buffers[b];
    if (buf->kind != SC_BUF_CONST || buf->data || buf->bytes <= 0) continue;
    const sc_shard_source *src = NULL;
    if ((st = shard_source(part, buf, &src, d))) break;
    void *piece = sc_malloc((size_t)buf->bytes);
    if (!piece) {
      st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
      break;
    }
    sc_sharding_extract(&src->sharding, &part->mesh, coords, sc_dtype_size(buf->dtype),
                        src->dims, src->data, piece);
    size_t pad = (size_t)((SC_BUNDLE_WEIGHT_ALIGN - pos % SC_BUNDLE_WEIGHT_ALIGN) %
                          SC_BUNDLE_WEIGHT_ALIGN);
    bool ok = (pad == 0 || fwrite(zeros, 1, pad, f) == pad) &&
              fwrite(piece, 1, (size_t)buf->bytes, f) == (size_t)buf->bytes;
    sc_sha256_update(&sh, zeros, pad);
    sc_sha256_update(&sh, piece, (size_t)buf->bytes);
    sc_free(piece);
    if (!ok) {
      st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write: %s", path, strerror(errno));
      break;
    }
    pos += (int64_t)pad;
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(buf->name));
    json_object_set_new(c, "buffer", json_integer(b));
    json_object_set_new(c, "offset", json_integer(pos));
    json_object_set_new(c, "bytes", json_integer(buf->bytes));
    json_array_append_new(consts, c);
    pos += buf->bytes;
  }
  if (f && fclose(f) != 0 && st == SC_OK)
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write: %s", path, strerror(errno));
  sc_free(path);
  if (st != SC_OK) {
    json_decref(consts);
    return st;
  }
  uint8_t digest[32];
  char hex[65];
  sc_sha256_final(&sh, digest);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  json_t *o = json_object();
  json_object_set_new(o, "file", json_string(name));
  json_object_set_new(o, "stage", json_integer(stage));
  json_object_set_new(o, "bytes", json_integer(pos));
  json_object_set_new(o, "sha256", json_string(hex));
  json_object_set_new(o, "consts", consts);
  json_array_append_new(ranks, o);
  return SC_OK;
}

sc_status sc_pbundle_write(const sc_partition *part, sc_program *const *programs,
                           const sc_bundle_opts *o, const char *dir, sc_diag *d) {
  sc_status st = make_dir(dir, d);
  if (st) return st;
  size_t n = strlen(dir) + 32;
  char *path = sc_malloc(n);
  if (!path) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  snprintf(path, n, "%s/partition.json", dir);
  remove(path); /* an old one would describe files about to be replaced */
  sc_bundle_opts so = *o;
  so.external_consts = true;
  for (int32_t k = 0; st == SC_OK && k < part->n_stages; k++) {
    snprintf(path, n, "%s/stage%d", dir, (int)k);
    st = sc_bundle_write(programs[k], &so, path, d);
  }
  snprintf(path, n, "%s/weights", dir);
  if (st == SC_OK) st = make_dir(path, d);
  json_t *ranks = json_array();
  const sc_mesh *m = &part->mesh;
  for (int64_t r = 0; st == SC_OK && r < m->n_ranks; r++) {
    int64_t coords[SC_MESH_MAX_AXES];
    sc_mesh_rank_to_coords(m, r, coords);
    int32_t stage = part->pp_axis >= 0 ? (int32_t)coords[part->pp_axis] : 0;
    st = write_rank(part, programs[stage], r, stage, dir, ranks, d);
  }
  if (st != SC_OK) {
    json_decref(ranks);
    sc_free(path);
    return st;
  }
  json_t *root = json_object(), *ins = json_array(), *outs = json_array(), *stages = json_array();
  char mesh[SC_MESH_MAX_AXES * (SC_MESH_NAME_MAX + 24)];
  sc_mesh_format(m, mesh, sizeof mesh);
  const sc_graph *g = part->global;
  for (int32_t i = 0; i < g->n_inputs; i++) json_array_append_new(ins, jvalue(&g->values[g->inputs[i]]));
  for (int32_t i = 0; i < g->n_outputs; i++)
    json_array_append_new(outs, jvalue(&g->values[g->outputs[i]]));
  for (int32_t k = 0; k < part->n_stages; k++)
    json_array_append_new(stages, jstage(part, k, programs[k]));
  json_object_set_new(root, "format", json_string("shardc-partition"));
  json_object_set_new(root, "version", json_integer(SC_PARTITION_JSON_VERSION));
  json_object_set_new(root, "mesh", json_string(mesh));
  json_object_set_new(root, "ranks_per_node", json_integer(m->ranks_per_node));
  json_object_set_new(root, "pp_axis", jaxis(m, part->pp_axis));
  json_object_set_new(root, "dp_axis", jaxis(m, part->dp_axis));
  json_object_set_new(root, "tp_axis", jaxis(m, part->tp_axis));
  json_object_set_new(root, "n_stages", json_integer(part->n_stages));
  json_object_set_new(root, "microbatches", json_integer(part->microbatches));
  json_object_set_new(root, "inputs", ins);
  json_object_set_new(root, "outputs", outs);
  json_object_set_new(root, "stages", stages);
  json_object_set_new(root, "ranks", ranks);
  snprintf(path, n, "%s/partition.json", dir);
  if (json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write", path);
  json_decref(root);
  sc_free(path);
  return st;
}
