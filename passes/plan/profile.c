/* profile.c — the calibration profile of profile.h: its strict reader and
 * writer (jansson), the GEMM-rate interpolation, and the non-negative
 * least squares that fits a communicator's latency and bandwidth.
 *
 * The reader follows cluster.c: every object's keys are checked against
 * its list (json_keys.h), every number is positive and finite, counts are
 * whole and bounded, and the first error names the key's path. The writer
 * prints every number with %.17g so a profile reads back bit for bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ir/attention.h"
#include "ir/fileio.h"
#include "json_keys.h"
#include "profile.h"

const char *const sc_cluster_dtype_names[SC_CLUSTER_DTYPE_COUNT] = {"fp8", "bf16", "fp16", "tf32",
                                                                    "fp32"};

#define TRY(x)                    \
  do {                            \
    sc_status st_ = (x);          \
    if (st_ != SC_OK) return st_; \
  } while (0)

static const char WHAT[] = "profile";

const char *const sc_profile_kernel_keys[SC_PROFILE_KERNEL_TERMS] = {
    "row_s", "op_s", "transcendental_s", "gather_s"};
const char *const sc_profile_attention_keys[SC_PROFILE_ATTN_TERMS] = {"row_s", "score_s",
                                                                      "mac_s"};
enum { MAX_DIM = (int64_t)1 << 20, MAX_THREADS = 1 << 16, MAX_RANKS = 1 << 16 };
#define MIN_S SC_PROFILE_MIN_S
#define MAX_S SC_PROFILE_MAX_S
#define MAX_RATE SC_PROFILE_MAX_RATE
#define MAX_BW SC_PROFILE_MAX_BW

/* A required number at obj.key in [lo, hi]. */
static sc_status get_range(json_t *o, const char *path, const char *key, double lo, double hi,
                           double *out, sc_diag *d) {
  TRY(sc_json_get_num(o, WHAT, path, key, true, out, d));
  if (*out >= lo && *out <= hi) return SC_OK;
  char p[128], msg[96];
  sc_json_join(p, sizeof p, path, key);
  snprintf(msg, sizeof msg, "must be in [%g, %g]", lo, hi);
  return sc_json_bad(d, SC_ERR_INVALID, WHAT, p, msg);
}

/* A required obj.dtype: one of sc_cluster_dtype_names. */
static sc_status read_dtype(json_t *o, const char *path, sc_cluster_dtype *out, sc_diag *d) {
  char dt[16] = "";
  TRY(sc_json_get_name(o, WHAT, path, "dtype", true, dt, sizeof dt, d));
  int t = 0;
  while (t < SC_CLUSTER_DTYPE_COUNT && strcmp(dt, sc_cluster_dtype_names[t]) != 0) t++;
  if (t == SC_CLUSTER_DTYPE_COUNT) {
    char p[128];
    sc_json_join(p, sizeof p, path, "dtype");
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, p, "must be fp8, bf16, fp16, tf32 or fp32");
  }
  *out = (sc_cluster_dtype)t;
  return SC_OK;
}

static sc_status read_gemm(json_t *o, const char *path, sc_profile_gemm *g, sc_diag *d) {
  if (!json_is_object(o)) return sc_json_bad(d, SC_ERR_PARSE, WHAT, path, "must be an object");
  static const char *const k[] = {"m", "n", "k", "trans_a", "trans_b", "dtype", "seconds",
                                  "flops_per_s", NULL};
  TRY(sc_json_only_keys(o, WHAT, path, k, d));
  static const char *const tk[2] = {"trans_a", "trans_b"};
  for (int i = 0; i < 2; i++) { /* optional: false when absent */
    json_t *b = json_object_get(o, tk[i]);
    if (b && !json_is_boolean(b)) {
      char p[128];
      sc_json_join(p, sizeof p, path, tk[i]);
      return sc_json_bad(d, SC_ERR_PARSE, WHAT, p, "must be true or false");
    }
    *(i ? &g->trans_b : &g->trans_a) = b && json_is_true(b);
  }
  TRY(sc_json_get_count(o, WHAT, path, "m", true, MAX_DIM, &g->m, d));
  TRY(sc_json_get_count(o, WHAT, path, "n", true, MAX_DIM, &g->n, d));
  TRY(sc_json_get_count(o, WHAT, path, "k", true, MAX_DIM, &g->k, d));
  TRY(read_dtype(o, path, &g->dtype, d));
  TRY(get_range(o, path, "seconds", MIN_S, MAX_S, &g->seconds, d));
  TRY(get_range(o, path, "flops_per_s", 1, MAX_RATE, &g->flops_per_s, d));
  /* the two must agree: the rate is 2mnk / seconds (to rounding) */
  double want = 2.0 * (double)g->m * (double)g->n * (double)g->k / g->seconds;
  if (fabs(g->flops_per_s - want) > 1e-6 * want) {
    char p[128];
    sc_json_join(p, sizeof p, path, "flops_per_s");
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, p, "must be 2*m*n*k / seconds");
  }
  return SC_OK;
}

/* A row of a GPU's fused attention (profile.h): its shape, seconds and
 * rate, which must agree. */
static sc_status read_gpu_attention(json_t *o, const char *path, sc_profile_attention *a,
                                    sc_diag *d) {
  TRY(sc_json_get_count(o, WHAT, path, "heads", true, MAX_DIM, &a->heads, d));
  TRY(sc_json_get_count(o, WHAT, path, "sq", true, MAX_DIM, &a->sq, d));
  TRY(sc_json_get_count(o, WHAT, path, "d", true, MAX_DIM, &a->d, d));
  TRY(get_range(o, path, "seconds", MIN_S, MAX_S, &a->seconds, d));
  TRY(get_range(o, path, "flops_per_s", 1, MAX_RATE, &a->flops_per_s, d));
  double want = sc_attention_flops(1, a->heads, a->sq, a->sq, a->d, a->d, true, a->grad) /
                a->seconds;
  if (fabs(a->flops_per_s - want) > 1e-6 * want) {
    char p[128];
    sc_json_join(p, sizeof p, path, "flops_per_s");
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, p,
                       "must be the causal attention's FLOPs over seconds");
  }
  return SC_OK;
}

/* gpu: a "cuda" profile's row (its shape and rate), else the CPU's
 * feature model. */
static sc_status read_attention(json_t *o, const char *path, bool gpu, sc_profile_attention *a,
                                sc_diag *d) {
  if (!json_is_object(o)) return sc_json_bad(d, SC_ERR_PARSE, WHAT, path, "must be an object");
  const char *k[SC_PROFILE_ATTN_TERMS + 3] = {"dtype", "grad"};
  for (int t = 0; t < SC_PROFILE_ATTN_TERMS; t++) k[2 + t] = sc_profile_attention_keys[t];
  k[SC_PROFILE_ATTN_TERMS + 2] = NULL;
  static const char *const gk[] = {"dtype", "grad", "heads", "sq", "d", "seconds", "flops_per_s",
                                   NULL};
  TRY(sc_json_only_keys(o, WHAT, path, gpu ? gk : k, d));
  TRY(read_dtype(o, path, &a->dtype, d));
  json_t *g = json_object_get(o, "grad");
  if (!g || !json_is_boolean(g)) {
    char p[128];
    sc_json_join(p, sizeof p, path, "grad");
    return sc_json_bad(d, g ? SC_ERR_PARSE : SC_ERR_INVALID, WHAT, p,
                       g ? "must be true or false" : "is missing");
  }
  a->grad = json_is_true(g);
  if (gpu) return read_gpu_attention(o, path, a, d);
  for (int t = 0; t < SC_PROFILE_ATTN_TERMS; t++)
    TRY(get_range(o, path, sc_profile_attention_keys[t], MIN_S, MAX_S, &a->s[t], d));
  return SC_OK;
}

/* A required count of ranks at path.key: 2..MAX_RANKS. */
static sc_status get_ranks(json_t *o, const char *path, const char *key, int64_t *out,
                           sc_diag *d) {
  TRY(sc_json_get_count(o, WHAT, path, key, true, MAX_RANKS, out, d));
  if (*out >= 2) return SC_OK;
  char p[128];
  sc_json_join(p, sizeof p, path, key);
  return sc_json_bad(d, SC_ERR_INVALID, WHAT, p, "must be at least 2");
}

static sc_status read_comm(json_t *o, const char *path, sc_profile_comm *c, sc_diag *d) {
  if (!json_is_object(o)) return sc_json_bad(d, SC_ERR_PARSE, WHAT, path, "must be an object");
  static const char *const k[] = {"name",         "max_ranks",  "latency_s",
                                  "bandwidth_bytes_per_s", "overhead_s", NULL};
  TRY(sc_json_only_keys(o, WHAT, path, k, d));
  TRY(sc_json_get_name(o, WHAT, path, "name", true, c->name, sizeof c->name, d));
  if (strcmp(c->name, "local") != 0 && strcmp(c->name, "tcp") != 0 &&
      strcmp(c->name, "mpi") != 0 && strcmp(c->name, "nccl") != 0) {
    char p[128];
    sc_json_join(p, sizeof p, path, "name");
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, p, "must be local, tcp, mpi or nccl");
  }
  TRY(get_ranks(o, path, "max_ranks", &c->max_ranks, d));
  TRY(get_range(o, path, "latency_s", MIN_S, MAX_S, &c->latency_s, d));
  TRY(get_range(o, path, "bandwidth_bytes_per_s", 1, MAX_BW, &c->bandwidth_bytes_per_s, d));
  return get_range(o, path, "overhead_s", MIN_S, MAX_S, &c->overhead_s, d);
}

static sc_status read_sync(json_t *o, const char *path, sc_profile_sync *y, sc_diag *d) {
  if (!json_is_object(o)) return sc_json_bad(d, SC_ERR_PARSE, WHAT, path, "must be an object");
  static const char *const k[] = {"ranks",      "call_s", "call_per_compute",
                                  "call_max_s", "stretch", NULL};
  TRY(sc_json_only_keys(o, WHAT, path, k, d));
  TRY(get_ranks(o, path, "ranks", &y->ranks, d));
  TRY(get_range(o, path, "call_s", MIN_S, MAX_S, &y->call_s, d));
  y->call_per_compute = 0; /* optional: a constant call cost */
  if (json_object_get(o, "call_per_compute"))
    TRY(get_range(o, path, "call_per_compute", MIN_S, SC_PROFILE_MAX_CALL_PER_COMPUTE,
                  &y->call_per_compute, d));
  y->call_max_s = 0; /* optional: no cap */
  if (json_object_get(o, "call_max_s"))
    TRY(get_range(o, path, "call_max_s", MIN_S, MAX_S, &y->call_max_s, d));
  return get_range(o, path, "stretch", 1, SC_PROFILE_MAX_STRETCH, &y->stretch, d);
}

static sc_status read_array(json_t *root, const char *key, bool required, int32_t max,
                            json_t **out, sc_diag *d) {
  *out = json_object_get(root, key);
  if (!*out) return required ? sc_json_bad(d, SC_ERR_INVALID, WHAT, key, "is missing") : SC_OK;
  if (!json_is_array(*out)) return sc_json_bad(d, SC_ERR_PARSE, WHAT, key, "must be an array");
  if (json_array_size(*out) > (size_t)max) {
    char msg[64];
    snprintf(msg, sizeof msg, "has more than %d entries", max);
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, key, msg);
  }
  return SC_OK;
}

static sc_status read_root(json_t *root, sc_profile *p, sc_diag *d) {
  if (!json_is_object(root))
    return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "profile: must be an object");
  static const char *const top[] = {"format", "device", "gemm", "memory_bytes_per_s",
                                    "memory_thread_bytes_per_s",
                                    "step_overhead_s", "kernel", "attention", "comms",
                                    "sync", "calibrate_s", NULL};
  TRY(sc_json_only_keys(root, WHAT, "", top, d));
  char fmt[32] = "";
  TRY(sc_json_get_name(root, WHAT, "", "format", true, fmt, sizeof fmt, d));
  if (strcmp(fmt, "shardc-profile-1") != 0)
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, "format", "must be \"shardc-profile-1\"");
  json_t *dev;
  TRY(sc_json_get_obj(root, WHAT, "", "device", true, &dev, d));
  static const char *const dk[] = {"kind", "name", "threads", "context_bytes", NULL};
  TRY(sc_json_only_keys(dev, WHAT, "device", dk, d));
  TRY(sc_json_get_name(dev, WHAT, "device", "kind", true, p->device, sizeof p->device, d));
  if (strcmp(p->device, "cpu") != 0 && strcmp(p->device, "cuda") != 0)
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, "device.kind", "must be \"cpu\" or \"cuda\"");
  TRY(sc_json_get_name(dev, WHAT, "device", "name", true, p->device_name, sizeof p->device_name, d));
  TRY(sc_json_get_count(dev, WHAT, "device", "threads", true, MAX_THREADS, &p->threads, d));
  TRY(sc_json_get_count(dev, WHAT, "device", "context_bytes", false, (int64_t)1 << 40,
                        &p->context_bytes, d));
  json_t *arr;
  TRY(read_array(root, "gemm", true, SC_PROFILE_MAX_GEMMS, &arr, d));
  if (json_array_size(arr) == 0)
    return sc_json_bad(d, SC_ERR_INVALID, WHAT, "gemm", "needs at least one entry");
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) {
    char path[32];
    snprintf(path, sizeof path, "gemm[%zu]", i);
    TRY(read_gemm(v, path, &p->gemms[i], d));
    p->n_gemms = (int32_t)i + 1;
  }
  TRY(get_range(root, "", "memory_bytes_per_s", 1, MAX_BW, &p->memory_bytes_per_s, d));
  if (json_object_get(root, "memory_thread_bytes_per_s"))
    TRY(get_range(root, "", "memory_thread_bytes_per_s", 1, MAX_BW, &p->memory_thread_bytes_per_s,
                  d));
  TRY(get_range(root, "", "step_overhead_s", MIN_S, MAX_S, &p->step_overhead_s, d));
  json_t *kern;
  TRY(sc_json_get_obj(root, WHAT, "", "kernel", false, &kern, d));
  if (kern) {
    const char *kk[SC_PROFILE_KERNEL_TERMS + 1];
    for (int t = 0; t < SC_PROFILE_KERNEL_TERMS; t++) kk[t] = sc_profile_kernel_keys[t];
    kk[SC_PROFILE_KERNEL_TERMS] = NULL;
    TRY(sc_json_only_keys(kern, WHAT, "kernel", kk, d));
    for (int t = 0; t < SC_PROFILE_KERNEL_TERMS; t++)
      TRY(get_range(kern, "kernel", sc_profile_kernel_keys[t], MIN_S, MAX_S, &p->kernel_s[t], d));
    p->has_kernel = true;
  }
  TRY(read_array(root, "attention", false, SC_PROFILE_MAX_ATTENTION, &arr, d));
  json_array_foreach(arr, i, v) {
    char path[32];
    snprintf(path, sizeof path, "attention[%zu]", i);
    sc_profile_attention *a = &p->attention[i];
    TRY(read_attention(v, path, strcmp(p->device, "cuda") == 0, a, d));
    if (sc_profile_find_attention(p, a->dtype, a->grad))
      return sc_json_bad(d, SC_ERR_INVALID, WHAT, path, "repeats a dtype and direction");
    p->n_attention = (int32_t)i + 1;
  }
  TRY(read_array(root, "comms", false, SC_PROFILE_MAX_COMMS, &arr, d));
  json_array_foreach(arr, i, v) {
    char path[32];
    snprintf(path, sizeof path, "comms[%zu]", i);
    TRY(read_comm(v, path, &p->comms[i], d));
    for (size_t j = 0; j < i; j++)
      if (strcmp(p->comms[j].name, p->comms[i].name) == 0)
        return sc_json_bad(d, SC_ERR_INVALID, WHAT, path, "repeats a communicator's name");
    p->n_comms = (int32_t)i + 1;
  }
  TRY(read_array(root, "sync", false, SC_PROFILE_MAX_SYNC, &arr, d));
  json_array_foreach(arr, i, v) {
    char path[32];
    snprintf(path, sizeof path, "sync[%zu]", i);
    sc_profile_sync *y = &p->sync[i];
    TRY(read_sync(v, path, y, d));
    if (sc_profile_find_sync(p, y->ranks))
      return sc_json_bad(d, SC_ERR_INVALID, WHAT, path, "repeats a rank count");
    p->n_sync = (int32_t)i + 1;
  }
  if (!json_object_get(root, "calibrate_s")) return SC_OK;
  return get_range(root, "", "calibrate_s", MIN_S, MAX_S, &p->calibrate_s, d);
}

sc_status sc_profile_read_json(const char *text, size_t len, const char *name, sc_profile *out,
                               sc_diag *d) {
  memset(out, 0, sizeof *out);
  const char *file = name ? name : "<profile>";
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    sc_diag_set_file(d, file);
    return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL, "profile: line %d: %s", err.line, err.text);
  }
  sc_profile *p = sc_malloc(sizeof *p);
  if (!p) {
    json_decref(root);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  memset(p, 0, sizeof *p);
  sc_status st = read_root(root, p, d);
  json_decref(root);
  if (st == SC_OK) {
    p->present = true;
    *out = *p;
  } else {
    sc_diag_set_file(d, file);
  }
  sc_free(p);
  return st;
}

sc_status sc_profile_read_json_file(const char *path, sc_profile *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  char *buf = NULL;
  size_t len = 0;
  sc_status st = sc_file_read_all(path, NULL, SC_PROFILE_MAX_BYTES, &buf, &len, d);
  if (st != SC_OK) {
    sc_diag_set_file(d, path);
    return st;
  }
  st = sc_profile_read_json(buf, len, path, out, d);
  sc_free(buf);
  return st;
}

sc_status sc_profile_write_json(const sc_profile *p, FILE *f, sc_diag *d) {
  fprintf(f, "{\"format\": \"shardc-profile-1\",\n");
  json_t *name = json_string(p->device_name); /* escaped as JSON */
  char *esc = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
  json_decref(name);
  fprintf(f, " \"device\": {\"kind\": \"%s\", \"name\": %s, \"threads\": %lld", p->device,
          esc ? esc : "\"?\"", (long long)p->threads);
  if (p->context_bytes > 0) fprintf(f, ", \"context_bytes\": %lld", (long long)p->context_bytes);
  fprintf(f, "},\n");
  free(esc);
  fprintf(f, " \"gemm\": [");
  for (int32_t i = 0; i < p->n_gemms; i++) {
    const sc_profile_gemm *g = &p->gemms[i];
    fprintf(f, "%s\n  {\"m\": %lld, \"n\": %lld, \"k\": %lld, ", i ? "," : "", (long long)g->m,
            (long long)g->n, (long long)g->k);
    if (g->trans_a) fprintf(f, "\"trans_a\": true, ");
    if (g->trans_b) fprintf(f, "\"trans_b\": true, ");
    fprintf(f, "\"dtype\": \"%s\", \"seconds\": %.17g, \"flops_per_s\": %.17g}",
            sc_cluster_dtype_names[g->dtype], g->seconds, g->flops_per_s);
  }
  fprintf(f, "],\n \"memory_bytes_per_s\": %.17g,\n", p->memory_bytes_per_s);
  if (p->memory_thread_bytes_per_s > 0)
    fprintf(f, " \"memory_thread_bytes_per_s\": %.17g,\n", p->memory_thread_bytes_per_s);
  fprintf(f, " \"step_overhead_s\": %.17g,\n", p->step_overhead_s);
  if (p->has_kernel) {
    fprintf(f, " \"kernel\": {");
    for (int t = 0; t < SC_PROFILE_KERNEL_TERMS; t++)
      fprintf(f, "%s\"%s\": %.17g", t ? ", " : "", sc_profile_kernel_keys[t], p->kernel_s[t]);
    fprintf(f, "},\n");
  }
  if (p->n_attention > 0) {
    fprintf(f, " \"attention\": [");
    for (int32_t i = 0; i < p->n_attention; i++) {
      const sc_profile_attention *a = &p->attention[i];
      fprintf(f, "%s\n  {\"dtype\": \"%s\", \"grad\": %s", i ? "," : "",
              sc_cluster_dtype_names[a->dtype], a->grad ? "true" : "false");
      if (strcmp(p->device, "cuda") == 0)
        fprintf(f, ", \"heads\": %lld, \"sq\": %lld, \"d\": %lld, \"seconds\": %.17g, "
                   "\"flops_per_s\": %.17g",
                (long long)a->heads, (long long)a->sq, (long long)a->d, a->seconds,
                a->flops_per_s);
      else
        for (int t = 0; t < SC_PROFILE_ATTN_TERMS; t++)
          fprintf(f, ", \"%s\": %.17g", sc_profile_attention_keys[t], a->s[t]);
      fprintf(f, "}");
    }
    fprintf(f, "],\n");
  }
  fprintf(f, " \"comms\": [");
  for (int32_t i = 0; i < p->n_comms; i++) {
    const sc_profile_comm *c = &p->comms[i];
    fprintf(f, "%s\n  {\"name\": \"%s\", \"max_ranks\": %lld, \"latency_s\": %.17g, "
               "\"bandwidth_bytes_per_s\": %.17g, \"overhead_s\": %.17g}",
            i ? "," : "", c->name, (long long)c->max_ranks, c->latency_s,
            c->bandwidth_bytes_per_s, c->overhead_s);
  }
  fprintf(f, "]");
  if (p->n_sync > 0) {
    fprintf(f, ",\n \"sync\": [");
    for (int32_t i = 0; i < p->n_sync; i++) {
      const sc_profile_sync *y = &p->sync[i];
      fprintf(f, "%s\n  {\"ranks\": %lld, \"call_s\": %.17g, ", i ? "," : "",
              (long long)y->ranks, y->call_s);
      if (y->call_per_compute > 0) fprintf(f, "\"call_per_compute\": %.17g, ", y->call_per_compute);
      if (y->call_max_s > 0) fprintf(f, "\"call_max_s\": %.17g, ", y->call_max_s);
      fprintf(f, "\"stretch\": %.17g}", y->stretch);
    }
    fprintf(f, "]");
  }
  if (p->calibrate_s > 0) fprintf(f, ",\n \"calibrate_s\": %.17g", p->calibrate_s);
  fprintf(f, "}\n");
  if (ferror(f)) return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "profile: write failed");
  return SC_OK;
}

/* ---- the GEMM table ---- */

/* The rows an interpolation reads: of one dtype and layout. */
typedef struct gemm_rows {
  sc_cluster_dtype t;
  bool trans_a, trans_b;
} gemm_rows;

static bool in_rows(const sc_profile_gemm *g, gemm_rows r) {
  return g->dtype == r.t && g->trans_a == r.trans_a && g->trans_b == r.trans_b;
}

/* The distinct log2 extents of axis `ax` (0 m, 1 n, 2 k) among rows r,
 * ascending, into v[]; their count. */
static int32_t grid_axis(const sc_profile *p, gemm_rows r, int ax, double *v) {
  int32_t n = 0;
  for (int32_t i = 0; i < p->n_gemms; i++) {
    const sc_profile_gemm *g = &p->gemms[i];
    if (!in_rows(g, r)) continue;
    double e = log2((double)(ax == 0 ? g->m : ax == 1 ? g->n : g->k));
    int32_t j = 0;
    while (j < n && v[j] < e - 1e-9) j++;
    if (j < n && fabs(v[j] - e) < 1e-9) continue;
    memmove(v + j + 1, v + j, (size_t)(n - j) * sizeof *v);
    v[j] = e;
    n++;
  }
  return n;
}

/* log(rate) of the row among r at grid point (a, b, c) (log2 extents), or
 * NAN when no row is there. */
static double grid_log_rate(const sc_profile *p, gemm_rows r, double a, double b, double c) {
  for (int32_t i = 0; i < p->n_gemms; i++) {
    const sc_profile_gemm *g = &p->gemms[i];
    if (in_rows(g, r) && fabs(log2((double)g->m) - a) < 1e-9 &&
        fabs(log2((double)g->n) - b) < 1e-9 && fabs(log2((double)g->k) - c) < 1e-9)
      return log(g->flops_per_s);
  }
  return NAN;
}

double sc_profile_gemm_rate(const sc_profile *p, sc_cluster_dtype t, bool trans_a, bool trans_b,
                            double m, double n, double k) {
  gemm_rows r = {t, trans_a, trans_b};
  bool have = false;
  for (int32_t i = 0; i < p->n_gemms && !have; i++) have = in_rows(&p->gemms[i], r);
  if (!have) r.trans_a = r.trans_b = false; /* the layout was not measured */
  double q[3] = {log2(m < 1 ? 1 : m), log2(n < 1 ? 1 : n), log2(k < 1 ? 1 : k)};
  double ax[3][SC_PROFILE_MAX_GEMMS];
  int32_t na[3];
  for (int a = 0; a < 3; a++) {
    na[a] = grid_axis(p, r, a, ax[a]);
    if (na[a] == 0) return 0;
    /* no extrapolation: outside the measured extents, the edge's rate */
    if (q[a] < ax[a][0]) q[a] = ax[a][0];
    if (q[a] > ax[a][na[a] - 1]) q[a] = ax[a][na[a] - 1];
  }
  /* a full grid: trilinear in (log2 m, log2 n, log2 k) on log(rate) */
  int32_t lo[3];
  double f[3];
  for (int a = 0; a < 3; a++) {
    lo[a] = 0;
    while (lo[a] + 1 < na[a] - 1 && ax[a][lo[a] + 1] <= q[a]) lo[a]++;
    int32_t hi = lo[a] + 1 < na[a] ? lo[a] + 1 : lo[a];
    f[a] = hi == lo[a] ? 0 : (q[a] - ax[a][lo[a]]) / (ax[a][hi] - ax[a][lo[a]]);
  }
  double acc = 0;
  bool full = true;
  for (int corner = 0; corner < 8 && full; corner++) {
    double w = 1, at[3];
    for (int a = 0; a < 3; a++) {
      int up = (corner >> a) & 1;
      int32_t i = up && lo[a] + 1 < na[a] ? lo[a] + 1 : lo[a];
      at[a] = ax[a][i];
      w *= up ? f[a] : 1 - f[a];
    }
    if (w == 0) continue;
    double lr = grid_log_rate(p, r, at[0], at[1], at[2]);
    if (isnan(lr)) full = false;
    else acc += w * lr;
  }
  if (full) return exp(acc);
  /* scattered rows: weighted geometric mean, weights 1/d^4 */
  double wsum = 0, lsum = 0;
  for (int32_t i = 0; i < p->n_gemms; i++) {
    const sc_profile_gemm *g = &p->gemms[i];
    if (!in_rows(g, r)) continue;
    double e[3] = {log2((double)g->m), log2((double)g->n), log2((double)g->k)};
    double d2 = 0;
    for (int j = 0; j < 3; j++) d2 += (q[j] - e[j]) * (q[j] - e[j]);
    if (d2 < 1e-12) return g->flops_per_s; /* the shape was measured */
    wsum += 1 / (d2 * d2);
    lsum += log(g->flops_per_s) / (d2 * d2);
  }
  return wsum > 0 ? exp(lsum / wsum) : 0;
}

double sc_profile_peak_rate(const sc_profile *p, sc_cluster_dtype t) {
  double best = 0;
  for (int32_t i = 0; i < p->n_gemms; i++)
    if (p->gemms[i].dtype == t && p->gemms[i].flops_per_s > best) best = p->gemms[i].flops_per_s;
  return best;
}

const sc_profile_attention *sc_profile_find_attention(const sc_profile *p, sc_cluster_dtype t,
                                                      bool grad) {
  for (int32_t i = 0; i < p->n_attention; i++)
    if (p->attention[i].dtype == t && p->attention[i].grad == grad) return &p->attention[i];
  return NULL;
}

void sc_profile_attention_features(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d,
                                   int64_t dv, bool causal, double *f, double *units) {
  const int64_t blk = SC_PROFILE_ATTN_BLOCK;
  double scores = 0, blocks = 0;
  for (int64_t i0 = 0; i0 < sq; i0 += blk) { /* a query block: rows [i0, i1) */
    int64_t i1 = i0 + blk < sq ? i0 + blk : sq;
    /* keys [0, jmax): up to the block's last row's causal edge */
    int64_t jmax = causal ? i1 + (skv - sq) : skv;
    if (jmax > skv) jmax = skv;
    if (jmax > 0) scores += (double)(i1 - i0) * (double)jmax;
    blocks++;
  }
  double heads = (double)b * (double)h;
  f[SC_PROFILE_ATTN_ROW] = heads * (double)sq;
  f[SC_PROFILE_ATTN_SCORE] = heads * scores;
  f[SC_PROFILE_ATTN_MAC] = heads * scores * (double)(d + dv);
  *units = heads * blocks;
}

const sc_profile_sync *sc_profile_find_sync(const sc_profile *p, int64_t ranks) {
  for (int32_t i = 0; i < p->n_sync; i++)
    if (p->sync[i].ranks == ranks) return &p->sync[i];
  return NULL;
}

int64_t sc_profile_rank_threads(int64_t cores, int64_t ranks) {
  int64_t k = (cores > 0 ? cores : 1) / (ranks > 0 ? ranks : 1);
  return k >= 1 ? k : 1;
}

const sc_profile_comm *sc_profile_find_comm(const sc_profile *p, const char *name) {
  for (int32_t i = 0; i < p->n_comms; i++)
    if (strcmp(p->comms[i].name, name) == 0) return &p->comms[i];
  return NULL;
}

/* ---- non-negative least squares ---- */

/* Solves the k x k system g x = r by Gaussian elimination with partial
 * pivoting; false when singular. */
static bool solve(double g[SC_PROFILE_MAX_FIT][SC_PROFILE_MAX_FIT], double *r, int k, double *x) {
  for (int c = 0; c < k; c++) {
    int piv = c;
    for (int i = c + 1; i < k; i++)
      if (fabs(g[i][c]) > fabs(g[piv][c])) piv = i;
    if (!(fabs(g[piv][c]) > 1e-300)) return false;
    for (int j = 0; j < k; j++) {
      double t = g[c][j];
      g[c][j] = g[piv][j];
      g[piv][j] = t;
    }
    double t = r[c];
    r[c] = r[piv];
    r[piv] = t;
    for (int i = c + 1; i < k; i++) {
      double f = g[i][c] / g[c][c];
      for (int j = c; j < k; j++) g[i][j] -= f * g[c][j];
      r[i] -= f * r[c];
    }
  }
  for (int c = k - 1; c >= 0; c--) {
    double s = r[c];
    for (int j = c + 1; j < k; j++) s -= g[c][j] * x[j];
    x[c] = s / g[c][c];
  }
  return true;
}

bool sc_profile_nnls(const double *a, const double *b, int32_t n_rows, int32_t n_x, double *x) {
  SC_ASSERT(n_x >= 1 && n_x <= SC_PROFILE_MAX_FIT);
  double best = INFINITY;
  bool found = false;
  for (int i = 0; i < n_x; i++) x[i] = 0;
  for (unsigned set = 1; set < (1u << n_x); set++) {
    int cols[SC_PROFILE_MAX_FIT], k = 0;
    for (int j = 0; j < n_x; j++)
      if (set & (1u << j)) cols[k++] = j;
    /* normal equations over the active columns, scaled by each column's
     * norm so that columns of very different magnitude stay solvable */
    double scale[SC_PROFILE_MAX_FIT] = {0};
    for (int u = 0; u < k; u++) {
      for (int32_t i = 0; i < n_rows; i++) scale[u] += a[i * n_x + cols[u]] * a[i * n_x + cols[u]];
      scale[u] = scale[u] > 0 ? sqrt(scale[u]) : 1;
    }
    double g[SC_PROFILE_MAX_FIT][SC_PROFILE_MAX_FIT] = {{0}}, r[SC_PROFILE_MAX_FIT] = {0},
           y[SC_PROFILE_MAX_FIT] = {0};
    for (int u = 0; u < k; u++) {
      for (int v = 0; v < k; v++)
        for (int32_t i = 0; i < n_rows; i++)
          g[u][v] += a[i * n_x + cols[u]] / scale[u] * a[i * n_x + cols[v]] / scale[v];
      for (int32_t i = 0; i < n_rows; i++) r[u] += a[i * n_x + cols[u]] / scale[u] * b[i];
    }
    if (!solve(g, r, k, y)) continue;
    bool ok = true;
    double trial[SC_PROFILE_MAX_FIT] = {0};
    for (int u = 0; u < k; u++) {
      trial[cols[u]] = y[u] / scale[u];
      ok &= trial[cols[u]] >= 0 && isfinite(trial[cols[u]]);
    }
    if (!ok) continue;
    double res = 0;
    for (int32_t i = 0; i < n_rows; i++) {
      double e = -b[i];
      for (int j = 0; j < n_x; j++) e += a[i * n_x + j] * trial[j];
      res += e * e;
    }
    if (res < best) {
      best = res, found = true;
      memcpy(x, trial, sizeof(double) * (size_t)n_x);
    }
  }
  return found;
}

sc_status sc_profile_fit_comm(const sc_profile_coll_sample *s, int32_t n, sc_profile_comm *out,
                              sc_diag *d) {
  if (n < 3)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "fit: %d samples (at least 3)", n);
  double *a = sc_malloc(sizeof(double) * 4 * (size_t)n);
  if (!a) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  double *b = a + 3 * (size_t)n, max_moved = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!(s[i].seconds > 0) || !isfinite(s[i].seconds) || !(s[i].bytes_moved >= 0)) {
      sc_free(a);
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "fit: sample %d took %g s", i,
                         s[i].seconds);
    }
    double w = 1 / s[i].seconds; /* relative error */
    a[i * 3 + 0] = w;
    a[i * 3 + 1] = s[i].steps * w;
    a[i * 3 + 2] = s[i].bytes_moved * w;
    b[i] = 1;
    if (s[i].bytes_moved > max_moved) max_moved = s[i].bytes_moved;
  }
  double x[3];
  bool ok = sc_profile_nnls(a, b, n, 3, x);
  sc_free(a);
  if (!ok) return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "fit: no solution");
  out->overhead_s = x[0] > SC_PROFILE_FIT_FLOOR_S ? x[0] : SC_PROFILE_FIT_FLOOR_S;
  out->latency_s = x[1] > SC_PROFILE_FIT_FLOOR_S ? x[1] : SC_PROFILE_FIT_FLOOR_S;
  double max_bw = (max_moved > 0 ? max_moved : 1) / SC_PROFILE_FIT_FLOOR_S;
  if (max_bw > SC_PROFILE_MAX_BW) max_bw = SC_PROFILE_MAX_BW;
  out->bandwidth_bytes_per_s = x[2] > 1 / max_bw ? 1 / x[2] : max_bw;
  return SC_OK;
}
