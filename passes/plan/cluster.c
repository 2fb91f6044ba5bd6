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
 * until measured. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster.h"
#include "ir/fileio.h"
#include "json_keys.h"

const char *const sc_cluster_dtype_names[SC_CLUSTER_DTYPE_COUNT] = {"fp8", "bf16", "fp16", "tf32",
                                                                    "fp32"};

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

/* ---- reading ---- */

typedef struct rd {
  sc_diag *d;
} rd;

static sc_status bad(rd *r, sc_status st, const char *path, const char *what) {
  return sc_diag_set(r->d, st, NULL, NULL, "cluster: '%s' %s", path, what);
}

static sc_status only_keys(rd *r, json_t *obj, const char *path, const char *const *allowed) {
  return sc_json_only_keys(obj, "cluster", path, allowed, r->d);
}

static void join(char *buf, size_t n, const char *path, const char *key) {
  snprintf(buf, n, "%s%s%s", path, path[0] ? "." : "", key);
}

/* A positive finite number at obj.key; *out untouched when absent and not
 * required. */
static sc_status get_num(rd *r, json_t *obj, const char *path, const char *key, bool required,
                         double *out) {
  char p[128];
  join(p, sizeof p, path, key);
  json_t *v = json_object_get(obj, key);
  if (!v) return required ? bad(r, SC_ERR_INVALID, p, "is missing") : SC_OK;
  if (!json_is_number(v)) return bad(r, SC_ERR_PARSE, p, "must be a number");
  double x = json_number_value(v);
  if (!isfinite(x) || x <= 0) return bad(r, SC_ERR_INVALID, p, "must be positive and finite");
  *out = x;
  return SC_OK;
}

/* A whole number in 1..hi (written as an integer or as 8e10). */
static sc_status get_count(rd *r, json_t *obj, const char *path, const char *key, bool required,
                           int64_t hi, int64_t *out) {
  char p[128];
  join(p, sizeof p, path, key);
  double x = 0;
  json_t *v = json_object_get(obj, key);
  if (v && json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    if (i < 1 || i > hi) return bad(r, SC_ERR_INVALID, p, "must be a positive count in range");
    *out = i;
    return SC_OK;
  }
  sc_status st = get_num(r, obj, path, key, required, &x);
  if (st != SC_OK || !v) return st;
  if (x != floor(x) || x > (double)hi) return bad(r, SC_ERR_INVALID, p, "must be a whole count in range");
  *out = (int64_t)x;
  return SC_OK;
}

static sc_status get_obj(rd *r, json_t *obj, const char *path, const char *key, bool required,
                         json_t **out) {
  char p[128];
  join(p, sizeof p, path, key);
  *out = json_object_get(obj, key);
  if (!*out) return required ? bad(r, SC_ERR_INVALID, p, "is missing") : SC_OK;
  if (!json_is_object(*out)) return bad(r, SC_ERR_PARSE, p, "must be an object");
  return SC_OK;
}

static sc_status get_name(rd *r, json_t *obj, const char *path, const char *key, bool required,
                          char *out) {
  char p[128];
  join(p, sizeof p, path, key);
  json_t *v = json_object_get(obj, key);
  if (!v) return required ? bad(r, SC_ERR_INVALID, p, "is missing") : SC_OK;
  if (!json_is_string(v)) return bad(r, SC_ERR_PARSE, p, "must be a string");
  const char *s = json_string_value(v);
  size_t n = strlen(s);
  if (n == 0 || n >= SC_CLUSTER_NAME_MAX || n != json_string_length(v))
    return bad(r, SC_ERR_INVALID, p, "must be 1 to 63 bytes, without NUL");
  memcpy(out, s, n + 1);
  return SC_OK;
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
  static const char *const k[] = {"bandwidth_bytes_per_s", "latency_s", NULL};
  TRY(only_keys(r, o, key, k));
  TRY(get_num(r, o, key, "bandwidth_bytes_per_s", true, &out->bandwidth_bytes_per_s));
  return get_num(r, o, key, "latency_s", true, &out->latency_s);
}

static sc_status read_root(rd *r, json_t *root, sc_cluster *c) {
  if (!json_is_object(root)) return sc_diag_set(r->d, SC_ERR_PARSE, NULL, NULL, "cluster: must be an object");
  static const char *const top[] = {"name", "nodes", "gpus_per_node", "gpu", "intra_node",
                                    "inter_node", NULL};
  TRY(only_keys(r, root, "", top));
  TRY(get_name(r, root, "", "name", false, c->name));
  c->nodes = 1;
  TRY(get_count(r, root, "", "nodes", false, SC_CLUSTER_MAX_NODES, &c->nodes));
  TRY(get_count(r, root, "", "gpus_per_node", true, SC_CLUSTER_MAX_PER_NODE, &c->devices_per_node));
  json_t *g, *pf;
  TRY(get_obj(r, root, "", "gpu", true, &g));
  static const char *const gk[] = {"name", "memory_bytes", "peak_flops", "hbm_bytes_per_s", NULL};
  TRY(only_keys(r, g, "gpu", gk));
  TRY(get_name(r, g, "gpu", "name", true, c->device_name));
  TRY(get_count(r, g, "gpu", "memory_bytes", true, (int64_t)1 << 50, &c->device_memory_bytes));
  TRY(get_num(r, g, "gpu", "hbm_bytes_per_s", true, &c->memory_bytes_per_s));
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
  return read_link(r, root, "inter_node", c->nodes > 1, &c->inter_node);
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
  rd r = {d};
  sc_cluster c;
  memset(&c, 0, sizeof c);
  sc_status st = read_root(&r, root, &c);
  json_decref(root);
  if (st != SC_OK) {
    sc_diag_set_file(d, file);
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
  return SC_OK;
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

sc_status sc_cluster_load(const char *spec, sc_cluster *out, sc_diag *d) {
  size_t n = strlen(spec);
  bool file = strchr(spec, '/') || (n > 5 && strcmp(spec + n - 5, ".json") == 0) ||
              !strchr(spec, ':');
  return file ? sc_cluster_read_json_file(spec, out, d) : sc_cluster_preset(spec, out, d);
}
