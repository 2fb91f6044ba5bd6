/* dist_bundle.c — writes a distributed program as a partitioned bundle
 * (dist_bundle.h).
 *
 * Order: the stage bundles (sc_bundle_write, sharded constants external),
 * then one weight file per rank (its shards from sc_dist_rank_weights, the
 * same cut the runtime makes), then partition.json last, all into a
 * temporary sibling folder that replaces the bundle directory whole when
 * complete (sc_dir_commit, ir/fileio.h): an interrupted write leaves the
 * old one as it was. Everything written comes
 * from the distributed program: no graph, no partition. With ranks a node
 * given, partition.json also says where the mesh's axes sit on the nodes
 * (sc_placement_compute, in the plan's JSON form; left out for a mesh whose
 * groups straddle nodes unevenly).
 *
 * Also the program's hash (sc_dist_program_hash): what the ranks of one
 * job compare when they meet (the tcp communicator's handshake), over the
 * same JSON a bundle holds. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/dist_bundle.h"
#include "codegen/program_json.h"
#include "codegen/train_manifest.h"
#include "ir/placement.h"
#include "ir/sharding.h"
#include "passes/plan/plan.h" /* sc_plan_placement_axes_json */

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

static json_t *jvalue(const sc_dist_value *v) {
  json_t *o = json_object(), *shape = json_array();
  json_object_set_new(o, "name", json_string(v->name ? v->name : ""));
  json_object_set_new(o, "dtype", json_string(sc_dtype_name(v->dtype)));
  for (int32_t k = 0; k < v->rank; k++) json_array_append_new(shape, json_integer(v->dims[k]));
  json_object_set_new(o, "shape", shape);
  return o;
}

/* Stage k: its inputs with their sharding text, its outputs. */
static json_t *jstage(const sc_dist_program *dp, int32_t k) {
  const sc_program *p = dp->stages[k].program;
  json_t *o = json_object(), *ins = json_array(), *outs = json_array();
  char dir[32], text[512];
  snprintf(dir, sizeof dir, "stage%d", (int)k);
  json_object_set_new(o, "dir", json_string(dir));
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const sc_buffer *b = &p->buffers[p->inputs[i]];
    sc_sharding_format(&dp->stages[k].input_sharding[i], &dp->mesh, text, sizeof text);
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

/* weights/rank<r>.bin and its index entry: the pieces of the external
 * constants of every stage (or piece) the rank runs, in stage and buffer
 * order, each naming its stage. */
static sc_status write_rank(const sc_dist_program *dp, int64_t r, const char *dir, json_t *ranks,
                            sc_diag *d) {
  char name[64], *path = NULL;
  snprintf(name, sizeof name, "weights/rank%lld.bin", (long long)r);
  size_t n = strlen(dir) + strlen(name) + 2;
  path = sc_malloc(n);
  if (!path) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  sc_status st = f ? SC_OK : sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot create: %s", path,
                                         strerror(errno));
  json_t *consts = json_array();
  sc_sha256 sh;
  sc_sha256_init(&sh);
  static const uint8_t zeros[SC_BUNDLE_WEIGHT_ALIGN];
  int64_t pos = 0;
  for (int32_t s = 0; st == SC_OK && s < dp->n_stages; s++) {
    if (!sc_dist_rank_runs(dp, r, s)) continue;
    const sc_program *p = dp->stages[s].program;
    sc_dist_weights w;
    if ((st = sc_dist_stage_weights(dp, s, r, &w, d)) != SC_OK) break;
    for (int32_t b = 0; st == SC_OK && b < p->n_buffers; b++) {
      const sc_buffer *buf = &p->buffers[b];
      if (buf->kind != SC_BUF_CONST || buf->data || buf->bytes <= 0) continue;
      const void *piece = w.data[b];
      if (!piece) {
        st = sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "constant '%s' has no data",
                         buf->name ? buf->name : "?");
        break;
      }
      size_t pad = (size_t)((SC_BUNDLE_WEIGHT_ALIGN - pos % SC_BUNDLE_WEIGHT_ALIGN) %
                            SC_BUNDLE_WEIGHT_ALIGN);
      bool ok = (pad == 0 || fwrite(zeros, 1, pad, f) == pad) &&
                fwrite(piece, 1, (size_t)buf->bytes, f) == (size_t)buf->bytes;
      sc_sha256_update(&sh, zeros, pad);
      sc_sha256_update(&sh, piece, (size_t)buf->bytes);
      if (!ok) {
        st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write: %s", path, strerror(errno));
        break;
      }
      pos += (int64_t)pad;
      json_t *c = json_object();
      json_object_set_new(c, "name", json_string(buf->name));
      json_object_set_new(c, "stage", json_integer(s));
      json_object_set_new(c, "buffer", json_integer(b));
      json_object_set_new(c, "offset", json_integer(pos));
      json_object_set_new(c, "bytes", json_integer(buf->bytes));
      json_array_append_new(consts, c);
      pos += buf->bytes;
    }
    sc_dist_weights_free(&w);
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
  sc_sha256_digest_hex(digest, hex);
  json_t *o = json_object();
  json_object_set_new(o, "file", json_string(name));
  json_object_set_new(o, "stage", json_integer(sc_dist_rank_stage(dp, r)));
  json_object_set_new(o, "bytes", json_integer(pos));
  json_object_set_new(o, "sha256", json_string(hex));
  json_object_set_new(o, "consts", consts);
  json_array_append_new(ranks, o);
  return SC_OK;
}

/* A training bundle's params.bin and training.json, against the global
 * view of the step; their names, sizes and hashes for partition.json. */
static json_t *write_training(const sc_dist_program *dp, const sc_train_manifest *m,
                              const char *dir, sc_diag *d) {
  sc_program *view = sc_dist_program_global_view(dp);
  sc_train_manifest *own = view ? sc_train_manifest_copy(m) : NULL;
  sc_bundle_file files[2];
  sc_status st = own ? sc_train_manifest_rebase(own, view, d)
                     : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK) st = sc_bundle_write_training(dir, view, own, files, d);
  json_t *list = st == SC_OK ? json_array() : NULL;
  for (int k = 0; list && k < 2; k++) {
    json_t *f = json_object();
    json_object_set_new(f, "name", json_string(files[k].name));
    json_object_set_new(f, "bytes", json_integer(files[k].bytes));
    json_object_set_new(f, "sha256", json_string(files[k].sha256));
    json_array_append_new(list, f);
  }
  sc_train_manifest_destroy(own);
  sc_program_destroy(view);
  return list;
}

static sc_status write_into(const sc_dist_program *dp, const sc_bundle_opts *o, const char *dir,
                            sc_diag *d);

sc_status sc_dist_program_write(const sc_dist_program *dp, const sc_bundle_opts *o,
                                const char *dir, sc_diag *d) {
  /* written whole into a temporary sibling folder that then replaces dir */
  sc_dir_commit dc;
  sc_status st = sc_bundle_dir_begin(&dc, dir, d);
  if (st != SC_OK) return st;
  return sc_dir_commit_finish(&dc, write_into(dp, o, dc.tmp, d), d);
}

static sc_status write_into(const sc_dist_program *dp, const sc_bundle_opts *o, const char *dir,
                            sc_diag *d) {
  sc_status st = make_dir(dir, d);
  if (st) return st;
  size_t n = strlen(dir) + 32;
  char *path = sc_malloc(n);
  if (!path) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  snprintf(path, n, "%s/partition.json", dir);
  remove(path); /* an old one would describe files about to be replaced */
  sc_bundle_opts so = *o;
  so.external_consts = true;
  so.train = NULL; /* the stage programs are pieces of the step: the manifest is the whole's */
  for (int32_t k = 0; st == SC_OK && k < dp->n_stages; k++) {
    snprintf(path, n, "%s/stage%d", dir, (int)k);
    st = sc_bundle_write(dp->stages[k].program, &so, path, d);
  }
  snprintf(path, n, "%s/weights", dir);
  if (st == SC_OK) st = make_dir(path, d);
  json_t *ranks = json_array();
  const sc_mesh *m = &dp->mesh;
  for (int64_t r = 0; st == SC_OK && r < m->n_ranks; r++) st = write_rank(dp, r, dir, ranks, d);
  json_t *training = NULL;
  if (st == SC_OK && o->train && !(training = write_training(dp, o->train, dir, d)))
    st = d->status ? d->status : SC_ERR_NOMEM;
  if (st != SC_OK) {
    json_decref(ranks);
    sc_free(path);
    return st;
  }
  json_t *root = json_object(), *ins = json_array(), *outs = json_array(), *stages = json_array();
  char mesh[SC_MESH_MAX_AXES * (SC_MESH_NAME_MAX + 24)];
  sc_mesh_format(m, mesh, sizeof mesh);
  for (int32_t i = 0; i < dp->n_inputs; i++) json_array_append_new(ins, jvalue(&dp->inputs[i]));
  for (int32_t i = 0; i < dp->n_outputs; i++) json_array_append_new(outs, jvalue(&dp->outputs[i]));
  for (int32_t k = 0; k < dp->n_stages; k++) json_array_append_new(stages, jstage(dp, k));
  json_object_set_new(root, "format", json_string("shardc-partition"));
  json_object_set_new(root, "version", json_integer(SC_PARTITION_JSON_VERSION));
  json_object_set_new(root, "mesh", json_string(mesh));
  json_object_set_new(root, "ranks_per_node", json_integer(m->ranks_per_node));
  sc_placement place;
  sc_diag pd = {0};
  sc_diag_clear(&pd);
  if (m->ranks_per_node > 0 && sc_placement_compute(m, &place, &pd) == SC_OK)
    json_object_set_new(root, "placement",
                        json_pack("{s:I, s:o}", "nodes", (json_int_t)place.nodes, "axes",
                                  sc_plan_placement_axes_json(&place)));
  json_object_set_new(root, "pp_axis", jaxis(m, dp->pp_axis));
  json_object_set_new(root, "dp_axis", jaxis(m, dp->dp_axis));
  json_object_set_new(root, "tp_axis", jaxis(m, dp->tp_axis));
  json_object_set_new(root, "n_stages", json_integer(dp->n_stages));
  json_object_set_new(root, "microbatches", json_integer(dp->schedule.microbatches));
  if (dp->pipe_chunks > 0) { /* a pipelined training step: stages are its pieces */
    json_t *pl = json_object();
    json_object_set_new(pl, "chunks", json_integer(dp->pipe_chunks));
    json_object_set_new(pl, "ranks", json_integer(dp->pipe_ranks));
    json_object_set_new(pl, "schedule", json_string(sc_schedule_name(dp->schedule.kind)));
    if (dp->schedule.n_offload > 0) { /* activation offloading: docs/offload.md */
      json_t *names = json_array();
      for (int32_t i = 0; i < dp->schedule.n_offload; i++)
        json_array_append_new(names, json_string(dp->schedule.offload[i]));
      json_object_set_new(pl, "offload", names);
      json_object_set_new(pl, "offload_horizon", json_integer(dp->schedule.offload_horizon));
    }
    json_object_set_new(root, "pipeline", pl);
  }
  if (training) {
    json_object_set_new(root, "kind", json_string("training"));
    json_object_set_new(root, "training", training);
  }
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

/* ---- the program's hash: what every rank of a job must agree on ---- */

static void h_bytes(sc_sha256 *s, const void *p, size_t n) { sc_sha256_update(s, p, n); }
static void h_str(sc_sha256 *s, const char *x) { h_bytes(s, x ? x : "", strlen(x ? x : "") + 1); }
static void h_i64(sc_sha256 *s, int64_t v) { h_bytes(s, &v, sizeof v); }
static void h_f64(sc_sha256 *s, double v) {
  char t[40];
  snprintf(t, sizeof t, "%.17g", v);
  h_str(s, t);
}
static void h_value(sc_sha256 *s, const sc_dist_value *v) {
  h_str(s, v->name);
  h_i64(s, v->dtype);
  h_i64(s, v->rank);
  for (int32_t k = 0; k < v->rank; k++) h_i64(s, v->dims[k]);
}

sc_status sc_dist_program_hash(const sc_dist_program *dp, const struct sc_train_manifest *m,
                                    char hex[65], sc_diag *d) {
  sc_sha256 s;
  sc_sha256_init(&s);
  char text[2048];
  h_str(&s, "shardc distributed program 1");
  sc_mesh_format(&dp->mesh, text, sizeof text);
  h_str(&s, text);
  int64_t head[] = {dp->pp_axis, dp->dp_axis, dp->tp_axis, dp->n_stages, dp->pipe_chunks,
                    dp->pipe_ranks, dp->schedule.kind, dp->schedule.microbatches,
                    dp->n_inputs, dp->n_outputs};
  for (size_t k = 0; k < sizeof head / sizeof *head; k++) h_i64(&s, head[k]);
  for (int32_t i = 0; i < dp->n_inputs; i++) h_value(&s, &dp->inputs[i]);
  for (int32_t i = 0; i < dp->n_outputs; i++) {
    h_value(&s, &dp->outputs[i]);
    h_i64(&s, dp->output_stage[i]);
  }
  for (int32_t k = 0; k < dp->n_stages; k++) { /* each stage's program, as a bundle has it */
    const sc_dist_stage *st = &dp->stages[k];
    char *json = NULL;
    if (st->program && sc_program_describe_json(st->program, &json, d) != SC_OK)
      return d->status;
    h_str(&s, json);
    sc_free(json);
    for (int32_t i = 0; st->program && i < st->program->n_inputs; i++) {
      sc_sharding_format(&st->input_sharding[i], &dp->mesh, text, sizeof text);
      h_str(&s, text);
    }
    for (int32_t i = 0; st->program && i < st->program->n_outputs; i++)
      h_i64(&s, st->output_global[i]);
  }
  if (m) { /* the step: optimizer, loss, precision */
    h_str(&s, m->optimizer);
    double f[] = {m->momentum, m->weight_decay, m->beta1, m->beta2, m->eps, m->clip_grad_norm};
    for (size_t k = 0; k < sizeof f / sizeof *f; k++) h_f64(&s, f[k]);
    int64_t n[] = {m->nesterov, m->ignore_index, m->classes, m->grad_accum, m->n_params};
    for (size_t k = 0; k < sizeof n / sizeof *n; k++) h_i64(&s, n[k]);
    h_str(&s, m->loss);
    h_str(&s, m->logits);
    h_str(&s, m->precision);
    for (int32_t k = 0; k < m->n_params; k++) h_str(&s, m->params[k].name);
  }
  uint8_t digest[32];
  sc_sha256_final(&s, digest);
  sc_sha256_digest_hex(digest, hex);
  return SC_OK;
}
