/* cluster.c — the cluster file (docs/planner.md) and its presets, with
 * jansson.
 *
 * The reader is strict in the manner of plan_json.c: an unknown key, a
 * duplicate key or a wrong type is an error naming the key's path
 * ("cluster: unknown key 'gpu.hbm'"), with the file in the diag. Every
 * number must be positive and finite; counts must be whole. Defaults exist
 * only where they are honest: `nodes` is 1 (one machine), `name` is the
 * file's, `intra_node` may be left out with one device a node and
 * `inter_node` with one node (no such link), a dtype missing from
 * `peak_flops` is unknown (0). The device's memory, at least one peak and
 * the memory bandwidth are required: nothing is guessed.
 *
 * The presets are samples/clusters/NAME.json, compiled in by CMake
 * (cluster_presets.inc, bytes of each file) and read by the same reader;
 * "NAME:GxN" then sets the count. `cpu:local` asks this machine: its
 * online cores (sysconf) are the ranks of one node, MemTotal of
 * /proc/meminfo the memory; peaks, bandwidths and latencies stay unknown
 * until measured.
 *
 * A profile (profile.h) comes from the file's "profile" key, a path that
 * must stay inside the cluster file's folder (checked textually, then on
 * the resolved path), or from SPEC@FILE in sc_cluster_load; either way
 * sc_cluster_apply_profile copies its figures in. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster.h"
#include "ir/fileio.h"
#include "json_keys.h"

typedef struct preset {
  const char *name;
  const unsigned char *json;
  size_t len;
} preset;

#include "cluster_presets.inc" /* static const preset PRESETS[]; generated */

const char *const sc_cluster_preset_names[] = {
#define X(name) name,
    SC_CLUSTER_PRESET_NAMES
#undef X
    NULL};

enum { CLUSTER_MAX_BYTES = 1 << 20 };

int64_t sc_cluster_devices(const sc_cluster *c) { return c->nodes * c->devices_per_node; }

bool sc_cluster_is_gpu(const sc_cluster *c) { return strcmp(c->device_name, "cpu") != 0; }

/* ---- reading ---- */

typedef struct rd {
  sc_diag *d;
  const char *file; /* the cluster file's path: a profile is relative to its folder */
  bool in_profile;  /* the error is the profile's (its diag names that file) */
} rd;

static sc_status bad(rd *r, sc_status st, const char *path, const char *what) {
  return sc_json_bad(r->d, st, "cluster", path, what);
}

static sc_status only_keys(rd *r, json_t *obj, const char *path, const char *const *allowed) {
  return sc_json_only_keys(obj, "cluster", path, allowed, r->d);
}

static sc_status get_num(rd *r, json_t *obj, const char *path, const char *key, bool required,
                         double *out) {
  return sc_json_get_num(obj, "cluster", path, key, required, out, r->d);
}

static sc_status get_count(rd *r, json_t *obj, const char *path, const char *key, bool required,
                           int64_t hi, int64_t *out) {
  return sc_json_get_count(obj, "cluster", path, key, required, hi, out, r->d);
}

static sc_status get_obj(rd *r, json_t *obj, const char *path, const char *key, bool required,
                         json_t **out) {
  return sc_json_get_obj(obj, "cluster", path, key, required, out, r->d);
}

static sc_status get_name(rd *r, json_t *obj, const char *path, const char *key, bool required,
                          char *out) {
  return sc_json_get_name(obj, "cluster", path, key, required, out, SC_CLUSTER_NAME_MAX, r->d);
}

#define TRY(x)                    \
  do {                            \
    sc_status st_ = (x);          \
    if (st_ != SC_OK) return st_; \
  } while (0)

static sc_status read_link(rd *r, json_t *root, const char *key, bool required,
                           sc_cluster_link *out) {
  json_t *o;
  TRY(get_obj(r, root, "", key, required, &o));
  if (!o) return SC_OK;
  static const char *const k[] = {"bandwidth_bytes_per_s", "latency_s", "nccl_channels", NULL};
  TRY(only_keys(r, o, key, k));
  TRY(get_num(r, o, key, "bandwidth_bytes_per_s", true, &out->bandwidth_bytes_per_s));
  TRY(get_count(r, o, key, "nccl_channels", false, SC_CLUSTER_MAX_NCCL_CHANNELS,
                &out->nccl_channels));
  return get_num(r, o, key, "latency_s", true, &out->latency_s);
}

/* "profile": a relative path inside the cluster file's folder: no
 * absolute path, no ".." component, and (resolved) no link out of it. */
static sc_status read_profile_key(rd *r, json_t *root, sc_cluster *c) {
  char rel[PATH_MAX];
  rel[0] = 0;
  TRY(sc_json_get_name(root, "cluster", "", "profile", false, rel, sizeof rel, r->d));
  if (!rel[0]) return SC_OK;
  bool up = false;
  for (const char *s = rel; *s; s = strchr(s, '/') ? strchr(s, '/') + 1 : s + strlen(s))
    up |= strncmp(s, "..", 2) == 0 && (s[2] == '/' || s[2] == 0);
  if (rel[0] == '/' || up)
    return bad(r, SC_ERR_INVALID, "profile", "must be a path inside the cluster file's folder");
  const char *slash = strrchr(r->file, '/');
  char dir[PATH_MAX], path[PATH_MAX];
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - r->file) : 1, slash ? r->file : ".");
  if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
    return bad(r, SC_ERR_INVALID, "profile", "is too long");
  char rdir[PATH_MAX], rpath[PATH_MAX];
  if (!realpath(dir, rdir) || !realpath(path, rpath))
    return bad(r, SC_ERR_IO, "profile", "names no file");
  size_t n = strlen(rdir);
  if (strncmp(rpath, rdir, n) != 0 || (rdir[n - 1] != '/' && rpath[n] != '/'))
    return bad(r, SC_ERR_INVALID, "profile", "leaves the cluster file's folder (a link)");
  sc_profile *p = sc_malloc(sizeof *p);
  if (!p) return sc_diag_set(r->d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_profile_read_json_file(path, p, r->d);
  if (st == SC_OK) sc_cluster_apply_profile(c, p);
  r->in_profile = st != SC_OK;
  sc_free(p);
  return st;
}

static sc_status read_root(rd *r, json_t *root, sc_cluster *c) {
  if (!json_is_object(root)) return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL, "cluster: must be an object");
  static const char *const top[] = {"name", "nodes", "gpus_per_node", "gpu", "intra_node",
                                    "inter_node", "profile", NULL};
  TRY(only_keys(r, root, "", top));
  TRY(get_name(r, root, "", "name", false, c->name));
  c->nodes = 1;
  TRY(get_count(r, root, "", "nodes", false, SC_CLUSTER_MAX_NODES, &c->nodes));
  TRY(get_count(r, root, "", "gpus_per_node", true, SC_CLUSTER_MAX_PER_NODE, &c->devices_per_node));
  json_t *g, *pf;
  TRY(get_obj(r, root, "", "gpu", true, &g));
  static const char *const gk[] = {"name",          "memory_bytes",          "peak_flops",
                                   "hbm_bytes_per_s", "host_link_bytes_per_s", "context_bytes",
                                   "attention_efficiency", NULL};
  TRY(only_keys(r, g, "gpu", gk));
  TRY(get_count(r, g, "gpu", "context_bytes", false, (int64_t)1 << 40, &c->context_bytes));
  TRY(get_name(r, g, "gpu", "name", true, c->device_name));
  TRY(get_count(r, g, "gpu", "memory_bytes", true, (int64_t)1 << 50, &c->device_memory_bytes));
  TRY(get_num(r, g, "gpu", "hbm_bytes_per_s", true, &c->memory_bytes_per_s));
  TRY(get_num(r, g, "gpu", "host_link_bytes_per_s", false, &c->host_link_bytes_per_s));
  TRY(get_num(r, g, "gpu", "attention_efficiency", false, &c->attention_efficiency));
  if (c->attention_efficiency > 1)
    return bad(r, SC_ERR_INVALID, "gpu.attention_efficiency",
               "must be at most 1 (a share of the peak)");
  TRY(get_obj(r, g, "gpu", "peak_flops", true, &pf));
  static const char *const fk[] = {"fp8", "bf16", "fp16", "tf32", "fp32", NULL};
  TRY(only_keys(r, pf, "gpu.peak_flops", fk));
  bool any = false;
  for (int t = 0; t < SC_CLUSTER_DTYPE_COUNT; t++) {
    TRY(get_num(r, pf, "gpu.peak_flops", sc_cluster_dtype_names[t], false, &c->peak_flops[t]));
    any |= c->peak_flops[t] > 0;
  }
  if (!any) return bad(r, SC_ERR_INVALID, "gpu.peak_flops", "needs at least one of fp8, bf16, fp16, tf32, fp32");
  TRY(read_link(r, root, "intra_node", c->devices_per_node > 1, &c->intra_node));
  TRY(read_link(r, root, "inter_node", c->nodes > 1, &c->inter_node));
  return read_profile_key(r, root, c);
}

/* The file's base name without ".json", as the default cluster name. */
static void default_name(const char *file, char *out) {
  const char *b = strrchr(file, '/');
  b = b ? b + 1 : file;
  size_t n = strlen(b);
  if (n > 5 && strcmp(b + n - 5, ".json") == 0) n -= 5;
  if (n >= SC_CLUSTER_NAME_MAX) n = SC_CLUSTER_NAME_MAX - 1;
  memcpy(out, b, n);
  out[n] = 0;
}

sc_status sc_cluster_read_json(const char *text, size_t len, const char *name, sc_cluster *out,
                               sc_diag *d) {
  memset(out, 0, sizeof *out);
  const char *file = name ? name : "<cluster>";
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    sc_diag_set_file(d, file);
    return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "cluster: line %d: %s", err.line, err.text);
  }
  rd r = {d, file, false};
  sc_cluster c;
  memset(&c, 0, sizeof c);
  sc_status st = read_root(&r, root, &c);
  json_decref(root);
  if (st != SC_OK) {
    if (!r.in_profile) sc_diag_set_file(d, file); /* a profile's names the profile */
    return st;
  }
  if (!c.name[0]) default_name(file, c.name);
  *out = c;
  return SC_OK;
}

sc_status sc_cluster_read_json_file(const char *path, sc_cluster *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  char *buf = NULL;
  size_t len = 0;
  sc_status st = sc_file_read_all(path, NULL, CLUSTER_MAX_BYTES, &buf, &len, d);
  if (st != SC_OK) {
    sc_diag_set_file(d, path);
    return st;
  }
  st = sc_cluster_read_json(buf, len, path, out, d);
  sc_free(buf);
  return st;
}

/* ---- presets ---- */

/* Parses a decimal count in 1..hi that spans [s, e). */
static bool parse_count(const char *s, const char *e, int64_t hi, int64_t *out) {
  if (s == e || e - s > 12) return false;
  int64_t v = 0;
  for (const char *c = s; c < e; c++) {
    if (*c < '0' || *c > '9') return false;
    v = v * 10 + (*c - '0');
  }
  if (v < 1 || v > hi) return false;
  *out = v;
  return true;
}

/* MemTotal of /proc/meminfo in bytes, 0 when it cannot be read. */
static int64_t meminfo_total(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb > 0 && kb < ((long long)1 << 40) ? (int64_t)kb * 1024 : 0;
}

static sc_status cpu_local(sc_cluster *c, sc_diag *d) {
  memset(c, 0, sizeof *c);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "--cluster cpu:local: cannot count the cores");
  snprintf(c->name, sizeof c->name, "cpu:local");
  snprintf(c->device_name, sizeof c->device_name, "cpu");
  c->nodes = 1;
  c->devices_per_node = cores < SC_CLUSTER_MAX_PER_NODE ? cores : SC_CLUSTER_MAX_PER_NODE;
  c->device_memory_bytes = meminfo_total(); /* the node's, shared by its ranks */
  c->host_cores = cores;
  return SC_OK;
}

/* The profile's sync row for `ranks` thread-ranks of c's host, when it
 * was measured with the threads the runtime gives that many ranks
 * (sc_profile_rank_threads; a profile without a thread count: any), else
 * NULL. */
static const sc_profile_sync *sync_row(const sc_cluster *c, int64_t ranks) {
  if (c->host_cores <= 0) return NULL;
  const sc_profile_sync *y = sc_profile_find_sync(&c->profile, ranks);
  if (y && c->profile.threads > 0 &&
      c->profile.threads != sc_profile_rank_threads(c->host_cores, ranks))
    return NULL;
  return y;
}

double sc_cluster_core_share(const sc_cluster *c, int64_t ranks) {
  if (c->host_cores <= 0) return 1;
  const sc_profile_sync *y = sync_row(c, ranks);
  if (y) return y->stretch;
  return ranks > c->host_cores ? (double)ranks / (double)c->host_cores : 1;
}

double sc_cluster_core_share_busy(const sc_cluster *c, double busy) {
  if (!(busy > 1)) return 1;
  int64_t lo = (int64_t)busy;
  double f = busy - (double)lo;
  double a = lo <= 1 ? 1 : sc_cluster_core_share(c, lo);
  return f > 0 ? a + f * (sc_cluster_core_share(c, lo + 1) - a) : a;
}

double sc_cluster_sync_call_s(const sc_cluster *c, int64_t ranks) {
  const sc_profile_sync *y = sync_row(c, ranks);
  return y ? y->call_s : 0;
}

double sc_cluster_meet_share(const sc_cluster *c, int64_t ranks, int64_t group) {
  if (c->host_cores <= 0 || group < 1 || group >= ranks || ranks <= c->host_cores) return 1;
  double f = sc_cluster_core_share(c, ranks) / sc_cluster_core_share(c, group);
  return f > 1 ? f : 1;
}

double sc_cluster_sync_call_drift(const sc_cluster *c, int64_t ranks, double computed) {
  const sc_profile_sync *y = sync_row(c, ranks);
  if (!y || !(computed > 0)) return 0;
  double s = y->call_per_compute * computed;
  return y->call_max_s > 0 && s > y->call_max_s ? y->call_max_s : s;
}

static sc_status preset_usage(sc_diag *d, const char *spec, const char *why) {
  char names[256] = "";
  for (int i = 0; sc_cluster_preset_names[i]; i++) {
    size_t n = strlen(names);
    snprintf(names + n, sizeof names - n, "%s:GxN, ", sc_cluster_preset_names[i]);
  }
  return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                     "--cluster %s: %s (presets: %scpu:local; or a cluster file .json)", spec, why,
                     names);
}

sc_status sc_cluster_preset(const char *spec, sc_cluster *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  if (strcmp(spec, "cpu:local") == 0) return cpu_local(out, d);
  const char *colon = strchr(spec, ':');
  size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
  const preset *p = NULL;
  for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
    if (strlen(PRESETS[i].name) == nlen && strncmp(PRESETS[i].name, spec, nlen) == 0)
      p = &PRESETS[i];
  if (!p) return preset_usage(d, spec, "unknown preset");
  const char *x = colon ? strchr(colon + 1, 'x') : NULL;
  int64_t g = 0, n = 0;
  if (!x || !parse_count(colon + 1, x, SC_CLUSTER_MAX_PER_NODE, &g) ||
      !parse_count(x + 1, x + 1 + strlen(x + 1), SC_CLUSTER_MAX_NODES, &n))
    return preset_usage(d, spec, "expects NAME:GxN, G devices a node and N nodes, e.g. h100-sxm:8x4");
  char label[80];
  snprintf(label, sizeof label, "preset %.*s", (int)nlen, spec);
  sc_cluster c;
  sc_status st = sc_cluster_read_json((const char *)p->json, p->len, label, &c, d);
  SC_ASSERT(st == SC_OK); /* the presets are tested data */
  if (g > c.devices_per_node)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--cluster %s: a %s node has at most %lld devices", spec, p->name,
                       (long long)c.devices_per_node);
  if (strlen(spec) >= SC_CLUSTER_NAME_MAX) return preset_usage(d, spec, "too long");
  snprintf(c.name, sizeof c.name, "%s", spec);
  c.devices_per_node = g;
  c.nodes = n;
  *out = c;
  return SC_OK;
}

void sc_cluster_apply_profile(sc_cluster *c, const sc_profile *p) {
  SC_ASSERT(p->present);
  c->profile = *p;
  for (int t = 0; t < SC_CLUSTER_DTYPE_COUNT; t++) {
    double best = sc_profile_peak_rate(p, (sc_cluster_dtype)t);
    if (best > 0) c->peak_flops[t] = best;
  }
  c->memory_bytes_per_s = p->memory_bytes_per_s;
  /* cpu:local's offloading copies are memcpys within host memory */
  if (strcmp(c->device_name, "cpu") == 0) c->host_link_bytes_per_s = p->memory_bytes_per_s;
  if (c->context_bytes == 0) c->context_bytes = p->context_bytes; /* the file's key first */
  if (p->n_comms > 0) {
    c->intra_node.latency_s = p->comms[0].latency_s;
    c->intra_node.bandwidth_bytes_per_s = p->comms[0].bandwidth_bytes_per_s;
    /* cpu:local: thread-ranks may outnumber the cores */
    if (strcmp(c->device_name, "cpu") == 0 && c->nodes == 1 &&
        p->comms[0].max_ranks > c->devices_per_node)
      c->devices_per_node = p->comms[0].max_ranks;
  }
}

/* SPEC@PROFILE: the cluster of SPEC with the profile's figures. */
static sc_status load_with_profile(const char *spec, const char *at, sc_cluster *out, sc_diag *d) {
  char base[PATH_MAX];
  if ((size_t)(at - spec) >= sizeof base || !at[1])
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "--cluster %s: expects SPEC@PROFILE.json", spec);
  snprintf(base, sizeof base, "%.*s", (int)(at - spec), spec);
  if (sc_cluster_load(base, out, d) != SC_OK) return d->status;
  sc_profile *p = sc_malloc(sizeof *p);
  if (!p) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = sc_profile_read_json_file(at + 1, p, d);
  if (st == SC_OK) sc_cluster_apply_profile(out, p);
  else memset(out, 0, sizeof *out);
  sc_free(p);
  return st;
}

sc_status sc_cluster_load(const char *spec, sc_cluster *out, sc_diag *d) {
  const char *at = strrchr(spec, '@');
  if (at) return load_with_profile(spec, at, out, d);
  size_t n = strlen(spec);
  bool file = strchr(spec, '/') || (n > 5 && strcmp(spec + n - 5, ".json") == 0) ||
              !strchr(spec, ':');
  return file ? sc_cluster_read_json_file(spec, out, d) : sc_cluster_preset(spec, out, d);
}
