/* cli.c — option parsing and error printing shared by the subcommands.
 *
 * A small hand-written parser (no getopt: options may come before or after
 * the file, and "--opt=value" and "--opt value" are both accepted). It never
 * exits; it returns the exit status for the caller to return. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/device_memory.h"
#include "ir/mesh.h"
#include "ir/progress.h"
#include "passes/stats.h"
#include "runtime/runtime.h"

int sc_cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_progress_clear(); /* the error on a line of its own */
  fputs("shardc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

int64_t sc_cli_launcher_rank(bool any_launcher) {
  const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"};
  size_t n_vars = any_launcher ? 5 : 3;
  int64_t n;
  for (size_t k = 0; k < n_vars; k++) {
    const char *v = getenv(vars[k]);
    if (v && sc_cli_parse_i64(v, 0, INT64_MAX, &n)) return n;
  }
  return 0;
}

int sc_cli_parse_number(const char *opt, const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x))
    return sc_cli_usage_error("%s expects a number, got '%s'", opt, v);
  *out = x;
  return 0;
}

int sc_cli_report(const sc_diag *d, const char *file) {
  sc_diag copy = *d;
  if (!copy.file[0] && file) sc_diag_set_file(&copy, file);
  char buf[2048];
  sc_diag_format(&copy, buf, sizeof buf);
  sc_progress_clear(); /* the error on a line of its own */
  fprintf(stderr, "shardc: error: %s\n", buf);
  return copy.status == SC_ERR_USAGE ? 2 : 1;
}

const char *sc_cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing) {
  const char *a = argv[*i];
  size_t len = strlen(name);
  if (strncmp(a, name, len) != 0) return NULL;
  if (a[len] == '=') return a + len + 1;
  if (a[len] != 0) return NULL;
  if (*i + 1 >= argc) {
    *missing = true;
    return a;
  }
  (*i)++;
  return argv[*i];
}

int sc_cli_device_option(int argc, char **argv, int *i, sc_device_choice *d) {
  const char *a = argv[*i], *v;
  bool missing = false;
  if (strcmp(a, "--no-cuda-graph") == 0) {
    d->no_graph = true;
    return 1;
  }
  if (strcmp(a, "--allow-tf32") == 0 || strcmp(a, "--no-allow-tf32") == 0) {
    d->no_tf32 = a[2] == 'n';
    return 1;
  }
  if ((v = sc_cli_opt_value(argc, argv, i, "--device", &missing))) {
    if (missing) return sc_cli_usage_error("option '--device' needs a value (cpu or cuda)");
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)
      return sc_cli_usage_error("--device expects cpu or cuda, got '%s'", v);
    d->name = v;
    return 1;
  }
  if ((v = sc_cli_opt_value(argc, argv, i, "--gpu-arch", &missing))) {
    if (missing) return sc_cli_usage_error("option '--gpu-arch' needs a value (sm_90)");
    if (strncmp(v, "sm_", 3) != 0 || strlen(v) < 5 || strlen(v) > 7)
      return sc_cli_usage_error("--gpu-arch expects sm_NN (sm_80, sm_90, ...), got '%s'", v);
    d->gpu_arch = v;
    return 1;
  }
  return 0;
}

bool sc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || !*s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

void sc_cli_format_count(int64_t v, char *buf, size_t n) {
  char digits[32];
  snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
  size_t len = strlen(digits), pos = 0;
  if (v < 0 && pos + 1 < n) buf[pos++] = '-';
  for (size_t i = 0; i < len && pos + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) buf[pos++] = ',';
    buf[pos++] = digits[i];
  }
  buf[pos] = 0;
}

void sc_cli_format_seconds(double s, char *buf, size_t n) {
  if (s >= 1) snprintf(buf, n, "%.3f s", s);
  else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
  else snprintf(buf, n, "%.3f us", s * 1e6);
}

double sc_cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_dim(const char *s, sc_cli_opts *o) {
  const char *eq = strchr(s, '=');
  if (!eq || eq == s || !eq[1])
    return sc_cli_usage_error("--dim expects NAME=VALUE, got '%s'", s);
  if (o->n_dims == SC_CLI_MAX_DIMS)
    return sc_cli_usage_error("at most %d --dim options", SC_CLI_MAX_DIMS);
  int64_t v;
  if (!sc_cli_parse_i64(eq + 1, 1, (int64_t)1 << 40, &v))
    return sc_cli_usage_error("--dim %s: the value must be a positive integer", s);
  size_t len = (size_t)(eq - s);
  if (len >= sizeof o->dims[0].name)
    return sc_cli_usage_error("--dim %s: name too long", s);
  for (int i = 0; i < o->n_dims; i++)
    if (strlen(o->dims[i].name) == len && memcmp(o->dims[i].name, s, len) == 0)
      return sc_cli_usage_error("--dim %s: the dim '%s' is given twice (%s=%lld before)", s,
                                o->dims[i].name, o->dims[i].name, (long long)o->dims[i].value);
  memcpy(o->dims[o->n_dims].name, s, len);
  o->dims[o->n_dims].name[len] = 0;
  o->dims[o->n_dims].value = v;
  o->n_dims++;
  return 0;
}

int sc_cli_parse(int argc, char **argv, unsigned allowed, const char *usage,
                 sc_cli_opts *o) {
  memset(o, 0, sizeof *o);
  bool only_files = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool missing = false;
    const char *v;
    if (only_files || a[0] != '-' || a[1] == 0) {
      if (o->file)
        return sc_cli_usage_error("unexpected argument '%s' (one input file)\nusage: %s",
                                  a, usage);
      o->file = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_files = true;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      o->help = true;
    } else if ((allowed & SC_CLI_DIM) &&
               (v = sc_cli_opt_value(argc, argv, &i, "--dim", &missing))) {
      int rc = missing ? 0 : parse_dim(v, o);
      if (rc) return rc;
    } else if ((allowed & SC_CLI_NO_WEIGHTS) && strcmp(a, "--no-weights") == 0) {
      o->no_weights = true;
    } else if ((allowed & SC_CLI_PRINT_AFTER) &&
               (v = sc_cli_opt_value(argc, argv, &i, "--print-after", &missing))) {
      o->print_after = v;
    } else if ((allowed & SC_CLI_TIME_PASSES) && strcmp(a, "--time-passes") == 0) {
      o->time_passes = true;
    } else if ((allowed & SC_CLI_JSON) && strcmp(a, "--json") == 0) {
      o->json = true;
    } else if ((allowed & SC_CLI_DOT) &&
               (v = sc_cli_opt_value(argc, argv, &i, "--dot", &missing))) {
      o->dot = v;
    } else if ((allowed & SC_CLI_PASSES) &&
               (v = sc_cli_opt_value(argc, argv, &i, "--passes", &missing))) {
      o->passes = v;
    } else {
      return sc_cli_usage_error("unknown option '%s'\nusage: %s", a, usage);
    }
    if (missing) return sc_cli_usage_error("option '%s' needs a value\nusage: %s", a, usage);
  }
  if (!o->help && !o->file)
    return sc_cli_usage_error("no input file\nusage: %s", usage);
  return 0;
}

int sc_cli_bind_dims(sc_graph *g, const sc_cli_opts *o) {
  for (int i = 0; i < o->n_dims; i++) {
    if (sc_graph_bind_dim(g, o->dims[i].name, o->dims[i].value) > 0) continue;
    /* List the names that do exist. */
    char names[512] = "";
    size_t pos = 0;
    for (int32_t k = 0; k < g->n_inputs; k++) {
      const sc_value *v = &g->values[g->inputs[k]];
      if (!v->dim_param) continue;
      for (int32_t d = 0; d < v->rank; d++) {
        const char *p = v->dim_param[d];
        if (!p || strstr(names, p)) continue;
        int w = snprintf(names + pos, sizeof names - pos, "%s%s", pos ? ", " : "", p);
        if (w < 0 || (size_t)w >= sizeof names - pos) break;
        pos += (size_t)w;
      }
    }
    return sc_cli_usage_error("%s: --dim %s: no input has a dim named '%s' (%s%s)",
                              o->file, o->dims[i].name, o->dims[i].name,
                              pos ? "symbolic dims: " : "the model has no symbolic dims",
                              names);
  }
  return 0;
}

/* Whether some graph input has a dim named p. */
static bool is_input_dim_name(const sc_graph *g, const char *p) {
  for (int32_t k = 0; k < g->n_inputs; k++) {
    const sc_value *v = &g->values[g->inputs[k]];
    if (!v->dim_param) continue;
    for (int32_t d = 0; d < v->rank; d++)
      if (v->dim_param[d] && strcmp(v->dim_param[d], p) == 0) return true;
  }
  return false;
}

void sc_cli_format_type(sc_dtype t, int32_t rank, const int64_t *dims, char *buf, size_t n) {
  size_t pos = 0;
  int w = snprintf(buf, n, "%s[", sc_dtype_name(t));
  if (w < 0 || (size_t)w >= n) return;
  pos = (size_t)w;
  for (int32_t d = 0; d < rank; d++) {
    w = snprintf(buf + pos, n - pos, "%s%lld", d ? "," : "", (long long)dims[d]);
    if (w < 0 || (size_t)w >= n - pos) return;
    pos += (size_t)w;
  }
  snprintf(buf + pos, n - pos, "]");
}

void sc_cli_format_shape(const sc_graph *g, const sc_value *v, char *buf, size_t n) {
  size_t pos = 0;
  if (n == 0) return;
  buf[0] = 0;
#define PUT(...)                                                    \
  do {                                                              \
    int w_ = snprintf(buf + pos, n - pos, __VA_ARGS__);             \
    if (w_ < 0 || (size_t)w_ >= n - pos) return;                    \
    pos += (size_t)w_;                                              \
  } while (0)
  if (v->rank < 0) {
    PUT("[?]");
    return;
  }
  PUT("[");
  for (int32_t d = 0; d < v->rank; d++) {
    const char *p = v->dim_param ? v->dim_param[d] : NULL;
    if (d) PUT(",");
    if (p && is_input_dim_name(g, p)) {
      if (v->dims[d] >= 0) PUT("%s=%lld", p, (long long)v->dims[d]);
      else PUT("%s", p);
    } else if (v->dims[d] >= 0) {
      PUT("%lld", (long long)v->dims[d]);
    } else {
      PUT("?");
    }
  }
  PUT("]");
#undef PUT
}

int sc_cli_load_finish(sc_status st, sc_graph **g, const sc_diag *d,
                       const sc_cli_opts *o) {
  if (st != SC_OK) {
    if (*g) sc_graph_destroy(*g);
    *g = NULL;
    return sc_cli_report(d, o->file);
  }
  int rc = sc_cli_bind_dims(*g, o);
  if (rc) {
    sc_graph_destroy(*g);
    *g = NULL;
  }
  return rc;
}

void sc_cli_pass_opts(const sc_cli_opts *o, sc_pass_opts *po) {
  sc_pass_opts_init(po);
  po->print_after = o->print_after;
  po->print_out = stderr;
  po->time_passes = o->time_passes;
  po->time_out = stderr;
}

void sc_cli_format_axes(const sc_mesh *m, uint32_t set, char *buf, size_t n) {
  size_t pos = 0;
  snprintf(buf, n, "-");
  for (int32_t a = 0; a < m->n_axes; a++) {
    if (!(set & (1u << a))) continue;
    int w = snprintf(buf + pos, n - pos, "%s%s", pos ? "," : "", m->axes[a].name);
    if (w < 0 || (size_t)w >= n - pos) return;
    pos += (size_t)w;
  }
}

void sc_cli_format_target(const sc_device_target *t, char *buf, size_t n) {
  if (t->device && strcmp(t->device, "cuda") == 0) {
    char ctx[48] = "unknown";
    if (t->context_bytes > 0) sc_stats_format_bytes((double)t->context_bytes, ctx, sizeof ctx);
    snprintf(buf, n, "cuda: context %s, NCCL %lld channels in a node, %lld across", ctx,
             (long long)t->nccl_channels_intra, (long long)t->nccl_channels_inter);
  } else if (t->device && strcmp(t->device, "cpu") != 0)
    snprintf(buf, n, "%s", t->device);
  else
    snprintf(buf, n, "cpu: %s GEMMs, %d thread%s%s", sc_gemm_engine_name(t->engine), t->threads,
             t->threads == 1 ? "" : "s", t->direct_convs ? "" : ", convolutions as GEMMs");
}

static void memory_row(FILE *f, const char *indent, const char *name, int64_t planned,
                       const int64_t *allocated, const char *what) {
  char b[32];
  sc_stats_format_bytes((double)planned, b, sizeof b);
  if (allocated)
    fprintf(f, "%s%-16s %14lld %12s %14lld%s  %s\n", indent, name, (long long)planned, b,
            (long long)*allocated, *allocated == planned ? "        " : " differs", what);
  else
    fprintf(f, "%s%-16s %14lld %12s  %s\n", indent, name, (long long)planned, b, what);
}

void sc_cli_print_memory(FILE *f, const char *indent, const sc_device_memory *planned,
                         const sc_device_memory *allocated, const char *extra_name,
                         int64_t extra_bytes, const char *extra_what) {
  if (allocated)
    fprintf(f, "%s%-16s %14s %12s %14s%s\n", indent, "", "planned", "", "allocated", "");
  for (int l = 0; l < SC_MEM_LINE_COUNT; l++) {
    const int64_t *a = allocated ? &allocated->bytes[l] : NULL;
    if (l != SC_MEM_ARENA && planned->bytes[l] == 0 && (!a || *a == 0)) continue;
    memory_row(f, indent, sc_mem_line_name((sc_mem_line)l), planned->bytes[l], a,
               sc_mem_line_what((sc_mem_line)l));
  }
  int64_t total = sc_device_memory_total(planned);
  int64_t total_a = allocated ? sc_device_memory_total(allocated) : 0;
  if (extra_name) {
    memory_row(f, indent, extra_name, extra_bytes, allocated ? &extra_bytes : NULL, extra_what);
    total += extra_bytes;
    total_a += extra_bytes;
  }
  memory_row(f, indent, "total", total, allocated ? &total_a : NULL, "");
}
