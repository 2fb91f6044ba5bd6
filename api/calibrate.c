/* calibrate.c — the measurements of calibrate.h.
 *
 * Each measured program is textual IR compiled by sc_compile_graph and run
 * by a session of the device measured. On the CPU the GEMMs go through the
 * runtime's engine (oneDNN or shardc's own kernel, as `shardc train` would
 * pick) with its thread pool, and the elementwise steps through
 * LLVM-compiled kernels; a run's inputs are its arena slots, filled once
 * with seeded values in [-1, 1). On a GPU (device "cuda") the programs are
 * compiled as `shardc train --device cuda` compiles them (cuBLASLt's
 * workspace in the arena) and run by the CUDA device: GEMMs through
 * cuBLASLt, kernels from NVRTC, a run replayed as a CUDA graph; the inputs
 * are host buffers filled once (copied in by each run), and a run's time is
 * the device's own time of its steps (sc_session_device_seconds: events on
 * the compute stream), without the copies in and out.
 *
 * Invariants: every figure written is positive and finite (a difference
 * that comes out at or below 0 is floored at the clock's resolution, 1 ns,
 * and says so in the log); nothing is guessed. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calibrate.h"
#include "codegen/compile.h"
#include "codegen/dist_sim.h"
#include "ir/attention.h"
#include "ir/dtype.h"
#include "ir/text.h"
#include "passes/plan/profile.h"
#include "runtime/comm.h"
#include "runtime/cpu_attention.h"
#include "runtime/runtime.h"

#define TRY(x)                    \
  do {                            \
    sc_status st_ = (x);          \
    if (st_ != SC_OK) return st_; \
  } while (0)

enum { OVERHEAD_STEPS = 64, MAX_IO = 4, MAX_GROUP = 8 };

/* How a program is compiled and run: the device, and its threads (CPU). */
typedef struct target {
  bool cuda;
  int threads;
} target;

void sc_calibrate_opts_init(sc_calibrate_opts *o) {
  memset(o, 0, sizeof *o);
  o->device = "cpu";
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- one compiled program in a session ---- */

typedef struct timed_prog {
  sc_graph *g;
  sc_program *p;
  sc_session *s;
  int32_t n_in, n_out;
  sc_tensor_view in[MAX_IO];
  void *host[MAX_IO]; /* the inputs where the session has no host slot (cuda) */
  bool device_time;   /* time runs by the device's clock */
} timed_prog;

static void prog_close(timed_prog *t) {
  for (int i = 0; i < MAX_IO; i++) sc_free(t->host[i]);
  sc_session_destroy(t->s);
  sc_program_destroy(t->p);
  sc_graph_destroy(t->g);
  memset(t, 0, sizeof *t);
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float rng_unit(uint64_t *s) { /* [-1, 1) */
  return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2 - 1);
}

static sc_status prog_open(const char *text, bool fuse, target tg, timed_prog *t, sc_diag *d) {
  memset(t, 0, sizeof *t);
  TRY(sc_ir_parse(text, strlen(text), "calibrate.ir", &t->g, d));
  sc_compile_opts co;
  sc_compile_opts_init(&co);
  co.quiet = true;
  co.fuse = fuse;
  if (tg.cuda) co.workspace_bytes = SC_GEMM_WORKSPACE_BYTES; /* as train --device cuda */
  if (sc_compile_graph(t->g, &co, &t->p, d) != SC_OK) return d->status;
  sc_session_opts so;
  sc_session_opts_init(&so);
  so.threads = tg.threads;
  if (tg.cuda) so.device.name = "cuda";
  if (sc_session_create(t->p, &so, &t->s, d) != SC_OK) return d->status;
  t->device_time = tg.cuda;
  t->n_in = t->p->n_inputs;
  t->n_out = t->p->n_outputs;
  SC_ASSERT(t->n_in <= MAX_IO && t->n_out <= MAX_IO);
  uint64_t seed = 0x5eed;
  for (int32_t i = 0; i < t->n_in; i++) {
    const sc_buffer *b = &t->p->buffers[t->p->inputs[i]];
    sc_tensor_view *v = &t->in[i];
    v->name = b->name, v->dtype = b->dtype, v->rank = b->rank;
    memcpy(v->dims, b->dims, sizeof v->dims);
    v->data = sc_session_input_slot(t->s, i);
    if (!v->data) /* a device arena: host buffers, copied in by each run */
      v->data = t->host[i] = sc_malloc((size_t)(b->bytes > 0 ? b->bytes : 1));
    if (!v->data) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    int64_t n = b->bytes / (b->dtype == SC_DTYPE_BF16 ? 2 : 4);
    for (int64_t j = 0; j < n; j++) {
      float x = rng_unit(&seed);
      if (b->dtype == SC_DTYPE_BF16) ((uint16_t *)v->data)[j] = sc_f32_to_bf16(x);
      else ((float *)v->data)[j] = x;
    }
  }
  return SC_OK;
}

/* The median seconds of one run: one warm-up, then runs until min_s has
 * passed (at least 3, at most 200). */
static sc_status prog_time(timed_prog *t, double min_s, double *out, sc_diag *d) {
  sc_tensor_view outs[MAX_IO];
  double v[200];
  int n = 0;
  TRY(sc_session_run(t->s, t->in, t->n_in, outs, t->n_out, d));
  double start = now_s();
  while (n < 200 && (n < 3 || now_s() - start < min_s)) {
    double t0 = now_s();
    TRY(sc_session_run(t->s, t->in, t->n_in, outs, t->n_out, d));
    double wall = now_s() - t0, dev = t->device_time ? sc_session_device_seconds(t->s) : -1;
    v[n++] = dev > 0 ? dev : wall;
  }
  *out = median(v, n);
  return SC_OK;
}

/* The median seconds of a run of text's program; *threads_used and *steps
 * (the program's steps), when not NULL. */
static sc_status time_text(const char *text, bool fuse, target tg, double min_s, double *out,
                           int *threads_used, int32_t *steps, sc_diag *d) {
  timed_prog t;
  sc_status st = prog_open(text, fuse, tg, &t, d);
  if (st == SC_OK) st = prog_time(&t, min_s, out, d);
  if (st == SC_OK && threads_used) *threads_used = sc_session_threads(t.s);
  if (st == SC_OK && steps) *steps = t.p->n_steps;
  prog_close(&t);
  return st;
}

/* ---- the measurements ---- */

typedef struct ctx {
  const sc_calibrate_opts *o;
  target tg;       /* the device measured */
  double min_s;    /* time each figure is measured for */
  double run1_s;   /* a run of one tiny step */
  sc_profile *p;
} ctx;

static void note(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(ctx *c, const char *fmt, ...) {
  if (!c->o->log) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->o->log, fmt, ap);
  va_end(ap);
  fflush(c->o->log);
}

static double floored(ctx *c, double s, const char *what) {
  if (s > SC_PROFILE_FIT_FLOOR_S) return s;
  note(c, "  %s: not resolved above the run's own cost; floored at 1 ns\n", what);
  return SC_PROFILE_FIT_FLOOR_S;
}

/* A chain of n Adds on `floats` floats, each adding the input to the
 * previous sum, unfused: n kernel steps (nothing for the canonical passes
 * to fold, as a chain of Negs would be). */
static char *chain_text(int n, int64_t floats) {
  size_t cap = 256 + (size_t)n * 64;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t pos = (size_t)snprintf(s, cap, "shardc.ir 1\ngraph \"g\" opset 18 {\n  input %%x0 : f32[%lld]\n",
                                (long long)floats);
  for (int i = 1; i <= n; i++)
    pos += (size_t)snprintf(s + pos, cap - pos, "  %%x%d : f32[%lld] = Add(%%x%d, %%x0) \"a%d\"\n",
                            i, (long long)floats, i - 1, i);
  snprintf(s + pos, cap - pos, "  output %%x%d\n}\n", n);
  return s;
}

static sc_status measure_overhead(ctx *c, sc_diag *d) {
  char *one = chain_text(1, 16), *many = chain_text(OVERHEAD_STEPS, 16);
  double t1 = 0, tk = 0;
  int threads = 0;
  int32_t s1 = 0, sk = 0;
  sc_status st = one && many ? SC_OK : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK) st = time_text(one, false, c->tg, c->min_s, &t1, &threads, &s1, d);
  if (st == SC_OK) st = time_text(many, false, c->tg, c->min_s, &tk, NULL, &sk, d);
  free(one);
  free(many);
  TRY(st);
  if (sk <= s1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "calibrate: the %d-step chain compiled to %d steps, the 1-step one to %d",
                       OVERHEAD_STEPS, (int)sk, (int)s1);
  c->run1_s = t1;
  c->p->threads = threads;
  c->p->step_overhead_s = floored(c, (tk - t1) / (double)(sk - s1), "step overhead");
  note(c, "step overhead: %.3f us a step (%d step%s: %.2f us a run, %d: %.2f us; %d threads)\n",
       c->p->step_overhead_s * 1e6, (int)s1, s1 == 1 ? "" : "s", t1 * 1e6, (int)sk, tk * 1e6,
       threads);
  return SC_OK;
}

static sc_status measure_memory(ctx *c, sc_diag *d) {
  /* floats a tensor: past any cache (a GPU's L2 is 50-60 MiB: 64 Mi floats) */
  int64_t n = c->tg.cuda ? (c->o->quick ? (int64_t)16 << 20 : (int64_t)64 << 20)
                         : (c->o->quick ? (int64_t)4 << 20 : (int64_t)16 << 20);
  char text[512];
  snprintf(text, sizeof text,
           "shardc.ir 1\ngraph \"g\" opset 18 {\n  input %%a : f32[%lld]\n  input %%b : f32[%lld]\n"
           "  %%c : f32[%lld] = Add(%%a, %%b) \"add\"\n  output %%c\n}\n",
           (long long)n, (long long)n, (long long)n);
  double t = 0;
  TRY(time_text(text, true, c->tg, c->min_s, &t, NULL, NULL, d));
  double bytes = 3.0 * 4.0 * (double)n;
  c->p->memory_bytes_per_s = bytes / floored(c, t - c->run1_s, "memory");
  note(c, "memory: %.2f GB/s (Add of 2 x %lld floats: %.3f ms)\n", c->p->memory_bytes_per_s / 1e9,
       (long long)n, t * 1e3);
  if (c->tg.cuda) return SC_OK;
  /* one thread's: what a kernel the pool does not split streams at */
  c->p->memory_thread_bytes_per_s = c->p->memory_bytes_per_s;
  if (c->p->threads <= 1) return SC_OK;
  target one = c->tg;
  one.threads = 1;
  TRY(time_text(text, true, one, c->min_s, &t, NULL, NULL, d));
  c->p->memory_thread_bytes_per_s = bytes / floored(c, t - c->run1_s, "memory, one thread");
  note(c, "memory, one thread: %.2f GB/s (%.3f ms)\n", c->p->memory_thread_bytes_per_s / 1e9,
       t * 1e3);
  return SC_OK;
}

static sc_status measure_gemms(ctx *c, sc_diag *d) {
  /* a GPU: from a launch-bound 256 to 4096, where cuBLASLt nears its peak */
  static const int64_t FULL[] = {16, 128, 1024}, QUICK[] = {32, 256};
  static const int64_t GPU_FULL[] = {256, 1024, 4096}, GPU_QUICK[] = {256, 1024};
  const int64_t *dims = c->tg.cuda ? (c->o->quick ? GPU_QUICK : GPU_FULL)
                                   : (c->o->quick ? QUICK : FULL);
  int nd = c->o->quick ? 2 : 3;
  static const struct {
    const char *ir;
    sc_cluster_dtype t;
  } TYPES[] = {{"f32", SC_CLUSTER_FP32}, {"bf16", SC_CLUSTER_BF16}};
  /* the layouts a training step runs: the forward's nn, the backward's
   * dX = dY·Wᵀ (nt) and dW = Xᵀ·dY (tn); a Transpose feeding the MatMul is
   * folded into the GEMM's flags, as the step's are */
  static const bool LAYOUTS[3][2] = {{false, false}, {false, true}, {true, false}};
  for (int ti = 0; ti < 2; ti++)
    for (int l = 0; l < 3; l++)
      for (int a = 0; a < nd; a++)
        for (int b = 0; b < nd; b++)
          for (int e = 0; e < nd; e++) {
            int64_t m = dims[a], n = dims[b], k = dims[e];
            bool ta = LAYOUTS[l][0], tb = LAYOUTS[l][1];
            const char *ty = TYPES[ti].ir;
            char text[1024];
            /* A stored [k, m] when transposed, B stored [n, k] */
            char pre[256] = "";
            if (ta)
              snprintf(pre, sizeof pre, "  %%at : %s[%lld,%lld] = Transpose(%%a) {perm = [1, 0]} \"ta\"\n",
                       ty, (long long)m, (long long)k);
            if (tb)
              snprintf(pre + strlen(pre), sizeof pre - strlen(pre),
                       "  %%bt : %s[%lld,%lld] = Transpose(%%b) {perm = [1, 0]} \"tb\"\n", ty,
                       (long long)k, (long long)n);
            snprintf(text, sizeof text,
                     "shardc.ir 1\ngraph \"g\" opset 18 {\n  input %%a : %s[%lld,%lld]\n"
                     "  input %%b : %s[%lld,%lld]\n%s"
                     "  %%c : %s[%lld,%lld] = MatMul(%%%s, %%%s) \"mm\"\n  output %%c\n}\n",
                     ty, (long long)(ta ? k : m), (long long)(ta ? m : k), ty,
                     (long long)(tb ? n : k), (long long)(tb ? k : n), pre, ty, (long long)m,
                     (long long)n, ta ? "at" : "a", tb ? "bt" : "b");
            double t = 0;
            TRY(time_text(text, true, c->tg, c->min_s, &t, NULL, NULL, d));
            if (c->p->n_gemms == SC_PROFILE_MAX_GEMMS) continue;
            sc_profile_gemm *g = &c->p->gemms[c->p->n_gemms++];
            g->m = m, g->n = n, g->k = k, g->dtype = TYPES[ti].t;
            g->trans_a = ta, g->trans_b = tb;
            g->seconds = floored(c, t - c->run1_s, "GEMM");
            g->flops_per_s = 2.0 * (double)m * (double)n * (double)k / g->seconds;
            note(c, "GEMM %-4s %s %5lld x %5lld x %5lld: %9.2f us, %7.2f GFLOP/s\n", ty,
                 ta ? "tn" : tb ? "nt" : "nn", (long long)m, (long long)n, (long long)k,
                 g->seconds * 1e6, g->flops_per_s / 1e9);
          }
  return SC_OK;
}

/* ---- the CPU's kernel model (profile.h: kernel_s) ---- */

enum { KERNEL_N = 4096, KERNEL_CHAIN = 16, KERNEL_ROWS = 6 };

/* A chain of KERNEL_CHAIN links over f32[shape] (x0 the input, %p the
 * previous value): each link's lines from fmt, in which every %%d is the
 * link's index (i) and %%p... are written out by the caller. */
static char *kernel_text(const char *shape, const char *link) {
  size_t cap = 512 + (size_t)KERNEL_CHAIN * 256;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t pos = (size_t)snprintf(s, cap, "shardc.ir 1\ngraph \"g\" opset 18 {\n  input %%x0 : f32[%s]\n",
                                shape);
  for (int i = 1; i <= KERNEL_CHAIN && pos < cap; i++) {
    /* link: printf format with the previous index, then this one, used in
     * the order (prev, i, i, i, prev, i ...): the texts below take %1$d
     * for the previous value and %2$d for this link */
    pos += (size_t)snprintf(s + pos, cap - pos, link, i - 1, i);
  }
  if (pos < cap) snprintf(s + pos, cap - pos, "  output %%x%d\n}\n", KERNEL_CHAIN);
  return s;
}

/* Fits kernel_s by non-negative least squares over programs whose kernels
 * exercise each feature (row loops: softmax rows; float operations;
 * transcendental functions; gathered loads: transposes), each row the program's summed features
 * against its time less the run's fixed cost and its steps' overhead.
 * The kernels are small (KERNEL_N elements): they run on one thread, as
 * the coefficients are defined. */
static sc_status measure_kernels(ctx *c, sc_diag *d) {
  static const struct {
    const char *shape, *link;
    bool fuse;
  } PROGS[KERNEL_ROWS] = {
      /* one Add a kernel: visits and an op each */
      {"4096", "  %%x%2$d : f32[4096] = Add(%%x%1$d, %%x0) \"a%2$d\"\n", false},
      /* one fused kernel of 2 x 16 float ops */
      {"4096", "  %%m%2$d : f32[4096] = Mul(%%x%1$d, %%x0) \"m%2$d\"\n"
               "  %%x%2$d : f32[4096] = Add(%%m%2$d, %%x0) \"a%2$d\"\n", true},
      /* tanh: 16 transcendental and 16 ops, a kernel each (unfused: a
       * fused chain of them measures their latency, one after another in
       * each element, where a step's kernels are bound by throughput) */
      {"4096", "  %%m%2$d : f32[4096] = Add(%%x%1$d, %%x0) \"a%2$d\"\n"
               "  %%x%2$d : f32[4096] = Tanh(%%m%2$d) \"t%2$d\"\n", false},
      /* exp of minus the magnitude: bounded, 16 transcendental, 32 ops */
      {"4096", "  %%b%2$d : f32[4096] = Abs(%%x%1$d) \"b%2$d\"\n"
               "  %%m%2$d : f32[4096] = Neg(%%b%2$d) \"n%2$d\"\n"
               "  %%x%2$d : f32[4096] = Exp(%%m%2$d) \"e%2$d\"\n", false},
      /* transposes: a gather of one element an outer point, a kernel each */
      {"16,16,16", "  %%x%2$d : f32[16,16,16] = Transpose(%%x%1$d) {perm = [2, 0, 1]} \"t%2$d\"\n",
       false},
      /* softmax rows: reductions, exp and divisions, unfused */
      {"256,16", "  %%x%2$d : f32[256,16] = Softmax(%%x%1$d) {axis = -1} \"s%2$d\"\n", false},
  };
  double a[KERNEL_ROWS * SC_PROFILE_KERNEL_TERMS], b[KERNEL_ROWS];
  int32_t rows = 0;
  for (int r = 0; r < KERNEL_ROWS; r++) {
    char *text = kernel_text(PROGS[r].shape, PROGS[r].link);
    if (!text) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    timed_prog t;
    double sec = 0;
    sc_status st = prog_open(text, PROGS[r].fuse, c->tg, &t, d);
    free(text);
    if (st == SC_OK) st = prog_time(&t, c->min_s, &sec, d);
    double f[SC_PROFILE_KERNEL_TERMS] = {0};
    int32_t kernels = 0;
    for (int32_t i = 0; st == SC_OK && i < t.p->n_steps; i++) {
      const sc_step *s = &t.p->steps[i];
      if (s->kind != SC_STEP_KERNEL || s->kernel < 0 || s->kernel >= t.p->n_kernels) continue;
      double g[SC_PROFILE_KERNEL_TERMS];
      bool split;
      sc_dist_kernel_features(t.p->kernels[s->kernel], g, &split);
      for (int k = 0; k < SC_PROFILE_KERNEL_TERMS; k++) f[k] += g[k];
      kernels++;
    }
    int32_t steps = st == SC_OK ? t.p->n_steps : 0;
    prog_close(&t);
    TRY(st);
    /* less the fixed cost of a run (its first step's included) and the
     * other steps' overhead */
    double work = sec - c->run1_s - (double)(steps > 1 ? steps - 1 : 0) * c->p->step_overhead_s;
    note(c, "kernels %d: %d steps, %.2f us (%.0f row loops, %.0f ops, %.0f transcendental, %.0f "
            "gathered)\n", r, (int)steps, sec * 1e6, f[0], f[1], f[2], f[3]);
    if (!(work > 0) || kernels == 0) continue;
    double w = 1 / work; /* relative error */
    for (int k = 0; k < SC_PROFILE_KERNEL_TERMS; k++) a[rows * SC_PROFILE_KERNEL_TERMS + k] = f[k] * w;
    b[rows++] = 1;
  }
  double x[SC_PROFILE_KERNEL_TERMS] = {0};
  if (rows < SC_PROFILE_KERNEL_TERMS || !sc_profile_nnls(a, b, rows, SC_PROFILE_KERNEL_TERMS, x)) {
    note(c, "kernels: not resolved above the runs' own cost; none in the profile\n");
    return SC_OK;
  }
  for (int k = 0; k < SC_PROFILE_KERNEL_TERMS; k++)
    c->p->kernel_s[k] = x[k] > SC_PROFILE_MIN_S ? x[k] : SC_PROFILE_MIN_S;
  c->p->has_kernel = true;
  note(c, "kernels: %.3f ns a row loop, %.3f ns an op, %.3f ns a transcendental, %.3f ns a gathered "
          "load (one thread)\n", c->p->kernel_s[0] * 1e9, c->p->kernel_s[1] * 1e9,
       c->p->kernel_s[2] * 1e9, c->p->kernel_s[3] * 1e9);
  return SC_OK;
}

/* ---- the CPU's fused attention (profile.h: sc_profile_attention) ---- */

_Static_assert((int)SC_PROFILE_ATTN_BLOCK == (int)SC_CPU_ATTN_BLOCK,
               "the attention features walk the kernel's blocks");

enum { ATTN_SHAPES = 6 };

/* This thread's CPU time: what a computation on it costs, whatever else
 * the machine runs (a shared machine's other work preempts it, and wall
 * time would count that too). */
static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The median CPU seconds of one call of the runtime's attention forward
 * (or backward) on io, on this thread: one warm-up, then calls until
 * min_s of wall time has passed (at least 3, at most 200). false: out of
 * memory. */
static bool attention_time(const sc_cpu_attention_io *io, bool grad, double min_s, double *out) {
  double v[200];
  int n = 0;
  if (!(grad ? sc_cpu_attention_backward(NULL, io) : sc_cpu_attention_forward(NULL, io)))
    return false;
  double start = now_s();
  while (n < 200 && (n < 3 || now_s() - start < min_s)) {
    double t0 = thread_cpu_s();
    if (!(grad ? sc_cpu_attention_backward(NULL, io) : sc_cpu_attention_forward(NULL, io)))
      return false;
    v[n++] = thread_cpu_s() - t0;
  }
  *out = median(v, n);
  return true;
}

/* Fits each (dtype, direction)'s attention coefficients by non-negative
 * least squares over timed calls of the runtime's kernels
 * (runtime/cpu_attention.c) at shapes that vary each feature (heads,
 * sequence, head dim, causal or not), on one thread, as the coefficients
 * are defined (the cost model divides by the threads the work units keep
 * busy: cost.c sc_cost_attention_time): each row the features against the
 * call's CPU time, weighted by 1/time (relative error). Inputs seeded in
 * [-1, 1). */
static sc_status measure_attention(ctx *c, sc_diag *d) {
  static const struct {
    int64_t heads, seq, dim;
    bool causal;
  } SHAPES[ATTN_SHAPES] = {{4, 16, 16, true},  {32, 16, 16, true}, {4, 128, 16, true},
                           {4, 128, 64, true}, {8, 64, 64, false}, {2, 256, 64, true}};
  static const struct {
    sc_dtype t;
    sc_cluster_dtype ct;
  } TYPES[] = {{SC_DTYPE_F32, SC_CLUSTER_FP32}, {SC_DTYPE_BF16, SC_CLUSTER_BF16}};
  int64_t most = 0;
  for (int i = 0; i < ATTN_SHAPES; i++)
    if (SHAPES[i].heads * SHAPES[i].seq * SHAPES[i].dim > most)
      most = SHAPES[i].heads * SHAPES[i].seq * SHAPES[i].dim;
  /* q k v o dO dq dk dv in f32 (bf16 uses the first half of each), lse */
  float *mem = sc_malloc((size_t)(8 * most + most) * sizeof *mem);
  if (!mem) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = SC_OK;
  for (int ti = 0; ti < 2 && st == SC_OK; ti++)
    for (int grad = 0; grad < 2 && st == SC_OK; grad++) {
      double a[ATTN_SHAPES * SC_PROFILE_ATTN_TERMS], b[ATTN_SHAPES];
      int32_t rows = 0;
      for (int i = 0; i < ATTN_SHAPES && st == SC_OK; i++) {
        int64_t h = SHAPES[i].heads, n = SHAPES[i].seq, dim = SHAPES[i].dim;
        sc_attention_step step = {.q = -1, .k = -1, .v = -1, .mask = -1, .o = -1, .lse = -1,
                                  .d_o = -1, .dq = -1, .dk = -1, .dv = -1, .batch = 1,
                                  .heads = h, .kv_heads = h, .sq = n, .skv = n, .d = dim,
                                  .dv_dim = dim, .scale = 1.0f / sqrtf((float)dim),
                                  .causal = SHAPES[i].causal};
        int64_t el = h * n * dim;
        uint64_t seed = 0xa77e;
        void *buf[8];
        for (int j = 0; j < 8; j++) {
          buf[j] = mem + (int64_t)j * most;
          for (int64_t e = 0; e < el; e++) {
            float x = rng_unit(&seed);
            if (TYPES[ti].t == SC_DTYPE_BF16) ((uint16_t *)buf[j])[e] = sc_f32_to_bf16(x);
            else ((float *)buf[j])[e] = x;
          }
        }
        sc_cpu_attention_io io = {.a = &step, .t = TYPES[ti].t, .mask_t = TYPES[ti].t,
                                  .q = buf[0], .k = buf[1], .v = buf[2], .o = buf[3],
                                  .lse = mem + 8 * most, .d_o = buf[4], .dq = buf[5],
                                  .dk = buf[6], .dv = buf[7]};
        double sec = 0;
        /* the backward reads the forward's o and lse */
        if (!sc_cpu_attention_forward(NULL, &io) || !attention_time(&io, grad, c->min_s, &sec)) {
          st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
          break;
        }
        double f[SC_PROFILE_ATTN_TERMS], units = 1; /* units: unused on one thread */
        sc_profile_attention_features(1, h, n, n, dim, dim, SHAPES[i].causal, f, &units);
        note(c, "attention %-4s %s %2lld heads x %3lld x %3lld%s: %9.2f us\n",
             sc_cluster_dtype_names[TYPES[ti].ct], grad ? "grad" : "fwd ", (long long)h,
             (long long)n, (long long)dim, SHAPES[i].causal ? " causal" : "", sec * 1e6);
        if (!(sec > 0)) continue;
        for (int k = 0; k < SC_PROFILE_ATTN_TERMS; k++)
          a[rows * SC_PROFILE_ATTN_TERMS + k] = f[k] / sec;
        b[rows++] = 1;
      }
      double x[SC_PROFILE_ATTN_TERMS] = {0};
      if (st != SC_OK) break;
      if (rows < SC_PROFILE_ATTN_TERMS ||
          !sc_profile_nnls(a, b, rows, SC_PROFILE_ATTN_TERMS, x)) {
        note(c, "attention %s %s: not resolved; none in the profile\n",
             sc_cluster_dtype_names[TYPES[ti].ct], grad ? "grad" : "fwd");
        continue;
      }
      if (c->p->n_attention == SC_PROFILE_MAX_ATTENTION) continue;
      sc_profile_attention *pa = &c->p->attention[c->p->n_attention++];
      pa->dtype = TYPES[ti].ct;
      pa->grad = grad;
      for (int k = 0; k < SC_PROFILE_ATTN_TERMS; k++)
        pa->s[k] = x[k] > SC_PROFILE_MIN_S ? x[k] : SC_PROFILE_MIN_S;
      note(c, "attention %s %s: %.3f ns a row, %.3f ns a score, %.3f ns a multiply-add (one "
              "thread)\n", sc_cluster_dtype_names[TYPES[ti].ct], grad ? "grad" : "fwd",
           pa->s[0] * 1e9, pa->s[1] * 1e9, pa->s[2] * 1e9);
    }
  sc_free(mem);
  return st;
}

/* ---- a GPU's fused attention (profile.h: a "cuda" profile's rows) ---- */

/* FusedAttention over [1, h, s, dim] of type ty, causal, its output o;
 * with grad, FusedAttentionGrad of that forward against an input d_o too
 * (its dq, dk, dv the outputs), as a training step runs the pair. */
static void gpu_attention_text(char *text, size_t cap, const char *ty, int64_t h, int64_t s,
                               int64_t dim, bool grad) {
  char sh[64];
  snprintf(sh, sizeof sh, "%s[1,%lld,%lld,%lld]", ty, (long long)h, (long long)s, (long long)dim);
  double scale = 1.0 / sqrt((double)dim);
  size_t n = (size_t)snprintf(
      text, cap,
      "shardc.ir 1\ngraph \"g\" opset 18 {\n  input %%q : %s\n  input %%k : %s\n"
      "  input %%v : %s\n%s%s%s"
      "  %%o : %s, %%lse : f32[1,%lld,%lld] = FusedAttention(%%q, %%k, %%v) "
      "{scale = %.9g, causal = 1} \"attn\"\n",
      sh, sh, sh, grad ? "  input %do : " : "", grad ? sh : "", grad ? "\n" : "", sh, (long long)h,
      (long long)s, scale);
  if (!grad) {
    snprintf(text + n, cap - n, "  output %%o\n}\n");
    return;
  }
  snprintf(text + n, cap - n,
           "  %%dq : %s, %%dk : %s, %%dv : %s = "
           "FusedAttentionGrad(%%q, %%k, %%v, %%o, %%lse, %%do) "
           "{scale = %.9g, causal = 1} \"attn_grad\"\n  output %%dq\n  output %%dk\n"
           "  output %%dv\n}\n",
           sh, sh, sh, scale);
}

/* Times the runtime's fused attention on the GPU at one shape (heads x
 * seq x seq, head dim, causal: the published figures' kind, docs/planner.md
 * "Attention on a GPU"), each dtype's forward alone and forward plus
 * backward; the backward's time is the difference. A row a dtype and
 * direction: its FLOPs (sc_attention_flops) over its seconds. */
static sc_status measure_gpu_attention(ctx *c, sc_diag *d) {
  int64_t h = c->o->quick ? 2 : 32, s = c->o->quick ? 256 : 2048, dim = c->o->quick ? 64 : 128;
  static const struct {
    const char *ir;
    sc_cluster_dtype t;
  } TYPES[] = {{"f32", SC_CLUSTER_FP32}, {"bf16", SC_CLUSTER_BF16}};
  for (int ti = 0; ti < 2; ti++) {
    char text[1024];
    double fwd = 0, both = 0;
    gpu_attention_text(text, sizeof text, TYPES[ti].ir, h, s, dim, false);
    TRY(time_text(text, true, c->tg, c->min_s, &fwd, NULL, NULL, d));
    gpu_attention_text(text, sizeof text, TYPES[ti].ir, h, s, dim, true);
    TRY(time_text(text, true, c->tg, c->min_s, &both, NULL, NULL, d));
    double sec[2] = {floored(c, fwd - c->run1_s, "attention"),
                     floored(c, both - fwd, "attention grad")};
    for (int grad = 0; grad < 2 && c->p->n_attention < SC_PROFILE_MAX_ATTENTION; grad++) {
      sc_profile_attention *pa = &c->p->attention[c->p->n_attention++];
      pa->dtype = TYPES[ti].t, pa->grad = grad;
      pa->heads = h, pa->sq = s, pa->d = dim, pa->seconds = sec[grad];
      pa->flops_per_s = sc_attention_flops(1, h, s, s, dim, dim, true, grad) / sec[grad];
      note(c, "attention %-4s %s %lld heads x %lld x %lld causal: %9.2f us, %7.2f GFLOP/s\n",
           TYPES[ti].ir, grad ? "grad" : "fwd ", (long long)h, (long long)s, (long long)dim,
           sec[grad] * 1e6, pa->flops_per_s / 1e9);
    }
  }
  return SC_OK;
}

/* ---- collectives over local thread-ranks ---- */

enum { KINDS = 3 }; /* all-reduce, all-gather, reduce-scatter */

typedef struct coll_job {
  sc_comm *comm;
  int64_t count;   /* elements of the collective's B / size (per-rank chunk) */
  int kind;
  int reps;
  float *buf;      /* size * count floats, twice */
  double seconds;  /* rank's time per call */
  sc_status st;
  char err[sizeof(((sc_diag *)0)->msg)];
} coll_job;

static void *coll_main(void *arg) {
  coll_job *j = arg;
  sc_diag d = {0};
  sc_diag_clear(&d);
  int n = sc_comm_size(j->comm);
  float *in = j->buf, *out = j->buf + (size_t)n * (size_t)j->count;
  double t0 = 0;
  for (int r = -1; r < j->reps && j->st == SC_OK; r++) { /* r = -1: warm-up */
    if (r == 0) {
      j->st = sc_comm_barrier(j->comm, &d);
      t0 = now_s();
    }
    if (j->st != SC_OK) break;
    switch (j->kind) {
    case 0: j->st = sc_comm_all_reduce(j->comm, in, out, (int64_t)n * j->count, SC_DTYPE_F32,
                                       SC_REDUCE_SUM, &d); break;
    case 1: j->st = sc_comm_all_gather(j->comm, in, out, j->count, SC_DTYPE_F32, &d); break;
    default: j->st = sc_comm_reduce_scatter(j->comm, in, out, j->count, SC_DTYPE_F32,
                                            SC_REDUCE_SUM, &d); break;
    }
  }
  j->seconds = (now_s() - t0) / j->reps;
  if (j->st != SC_OK) snprintf(j->err, sizeof j->err, "%s", d.msg);
  return NULL;
}

/* One sample: kind over n ranks, B = n * count floats. */
static sc_status time_coll(int n, int kind, int64_t count, int reps, sc_profile_coll_sample *out,
                           sc_diag *d) {
  sc_comm *comms[MAX_GROUP];
  coll_job jobs[MAX_GROUP];
  pthread_t th[MAX_GROUP];
  TRY(sc_comm_local_create_group(n, comms, d));
  sc_status st = SC_OK;
  int started = 0;
  for (int r = 0; r < n; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r] = (coll_job){.comm = comms[r], .count = count, .kind = kind, .reps = reps};
    jobs[r].buf = malloc(sizeof(float) * 2 * (size_t)n * (size_t)count);
    if (!jobs[r].buf) st = sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    else
      for (int64_t i = 0; i < 2 * n * count; i++) jobs[r].buf[i] = (float)(i % 7) - 3;
  }
  for (int r = 0; st == SC_OK && r < n; r++, started++)
    if (pthread_create(&th[r], NULL, coll_main, &jobs[r]) != 0)
      st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "calibrate: cannot start a thread");
  if (st != SC_OK)
    for (int r = 0; r < n; r++) sc_comm_abort(comms[r], "calibrate failed");
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  double slowest = 0;
  for (int r = 0; r < n; r++) {
    if (st == SC_OK && jobs[r].st != SC_OK)
      st = sc_diag_set(d, jobs[r].st, NULL, NULL, "calibrate: rank %d: %s", r, jobs[r].err);
    if (jobs[r].seconds > slowest) slowest = jobs[r].seconds;
    free(jobs[r].buf);
    sc_comm_destroy(comms[r]);
  }
  TRY(st);
  double B = 4.0 * (double)n * (double)count, nn = n;
  out->seconds = slowest;
  out->steps = kind == 0 ? 2 * (nn - 1) : nn - 1; /* cost.c's ring */
  out->bytes_moved = (kind == 0 ? 2 * (nn - 1) / nn : (nn - 1) / nn) * B;
  return SC_OK;
}

/* ---- ranks that compute and meet (profile.h: sync) ---- */

/* The chains: 8 Adds run once, 32 run 4 and 16 times (128 and 512 Adds
 * of compute between meetings; two programs compiled, not a 512-step one
 * per rank) */
enum { SYNC_FLOATS = 16384, SYNC_SHORT = 8, SYNC_LONG = 32, SYNC_LENGTHS = 3, SYNC_ROUNDS = 8,
       SYNC_ITERS = 60, SYNC_ITERS_QUICK = 15 };

typedef struct sync_job {
  sc_comm *comm;   /* NULL: alone, no collective */
  timed_prog prog; /* its own session of the work program */
  int iters;       /* timed iterations, <= SYNC_ITERS */
  int runs;        /* of the program a round */
  float buf[2 * MAX_GROUP * 16];
  double seconds;  /* median of its iterations' times, over SYNC_ROUNDS */
  double cpu_s;    /* the same of the calling thread's CPU time in the runs */
  sc_status st;
  char err[sizeof(((sc_diag *)0)->msg)];
} sync_job;

static void *sync_main(void *arg) {
  sync_job *j = arg;
  sc_diag d = {0};
  sc_diag_clear(&d);
  int n = j->comm ? sc_comm_size(j->comm) : 1;
  sc_tensor_view outs[MAX_IO];
  double v[SYNC_ITERS], cpu[SYNC_ITERS];
  int got = 0;
  for (int it = -1; it < j->iters && j->st == SC_OK; it++) { /* it = -1: warm-up */
    if (it == 0 && j->comm) j->st = sc_comm_barrier(j->comm, &d);
    double t0 = now_s(), in_runs = 0;
    for (int r = 0; r < SYNC_ROUNDS && j->st == SC_OK; r++) {
      double c0 = thread_cpu_s();
      for (int k = 0; j->prog.s && k < j->runs && j->st == SC_OK; k++)
        j->st = sc_session_run(j->prog.s, j->prog.in, j->prog.n_in, outs, j->prog.n_out, &d);
      in_runs += thread_cpu_s() - c0;
      if (j->st == SC_OK && j->comm)
        j->st = sc_comm_all_reduce(j->comm, j->buf, j->buf + n * 16, (int64_t)n * 16,
                                   SC_DTYPE_F32, SC_REDUCE_SUM, &d);
    }
    if (it >= 0) {
      cpu[got] = in_runs / SYNC_ROUNDS;
      v[got++] = (now_s() - t0) / SYNC_ROUNDS;
    }
  }
  j->seconds = got ? median(v, got) : 0;
  j->cpu_s = got ? median(cpu, got) : 0;
  if (j->st != SC_OK) snprintf(j->err, sizeof j->err, "%s", d.msg);
  return NULL;
}

/* The seconds of a round of `runs` runs of a chain of `links` Adds
 * (chain_text over SYNC_FLOATS floats) on n thread-ranks, each with the
 * profile's threads, each round ending in an all-reduce of 16 floats a
 * rank: an iteration is SYNC_ROUNDS rounds (the meetings of a short
 * training step), its time over the rounds, the median of SYNC_ITERS
 * (quick: SYNC_ITERS_QUICK) iterations after one, the slowest rank's
 * (*out); *cpu the ranks' mean of the same statistic of the CPU time
 * their calling threads spent in the chain's runs; n = 1: the program
 * alone, no collective; links = 0: the collective alone. */
static sc_status time_sync(ctx *c, int n, int links, int runs, double *out, double *cpu,
                           sc_diag *d) {
  char *text = links > 0 ? chain_text(links, SYNC_FLOATS) : NULL;
  if (links > 0 && !text) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_comm *comms[MAX_GROUP] = {0};
  sync_job *jobs = sc_calloc((size_t)n, sizeof *jobs);
  pthread_t th[MAX_GROUP];
  sc_status st = jobs ? SC_OK : sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK && n > 1) st = sc_comm_local_create_group(n, comms, d);
  int opened = 0, started = 0;
  for (; st == SC_OK && opened < n; opened++) {
    jobs[opened].comm = comms[opened];
    jobs[opened].iters = c->o->quick ? SYNC_ITERS_QUICK : SYNC_ITERS;
    jobs[opened].runs = runs;
    if (text) st = prog_open(text, false, c->tg, &jobs[opened].prog, d);
  }
  for (; st == SC_OK && started < n; started++)
    if (pthread_create(&th[started], NULL, sync_main, &jobs[started]) != 0)
      st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "calibrate: cannot start a thread");
  if (st != SC_OK && n > 1)
    for (int r = 0; r < n; r++)
      if (comms[r]) sc_comm_abort(comms[r], "calibrate failed");
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  double slowest = 0;
  *cpu = 0;
  for (int r = 0; jobs && r < n; r++) {
    if (st == SC_OK && jobs[r].st != SC_OK)
      st = sc_diag_set(d, jobs[r].st, NULL, NULL, "calibrate: rank %d: %s", r, jobs[r].err);
    if (jobs[r].seconds > slowest) slowest = jobs[r].seconds;
    *cpu += jobs[r].cpu_s / n;
    if (r < opened && text) prog_close(&jobs[r].prog);
    if (comms[r]) sc_comm_destroy(comms[r]);
  }
  sc_free(jobs);
  free(text);
  *out = slowest;
  return st;
}

/* For each group of 2..hi ranks: the program alone and on n ranks at
 * three lengths, and the all-reduce alone (back-to-back rounds).
 * stretch: the cores' share (n x threads over the cores, when more)
 * times the ratio of the long chain's CPU time on n ranks to alone (the
 * caches' and memory bus's share: CPU time, which other processes'
 * time-slices do not lengthen), at least 1. The wall-clock excess a
 * round over the chain alone (its CPU time), stretched, and the
 * collective alone, at the short length (a few us of compute between
 * meetings) and the long one (~90 us, the sample's longest stretches
 * between a step's meetings): call_s + call_per_compute x the stretched
 * chain is the line through the two (slope in [0, n - 1]: a meeting
 * waits at most for the other ranks' compute in turn; slope 0: call_s
 * their mean), its compute term at most call_max_s, the excess after the
 * longest chain (~360 us: the scheduler has parted ranks that shared a
 * core by then) less call_s (0, no cap, when the line stays below it).
 * Only for the rank counts the runtime gives the profile's threads each
 * (sc_profile_rank_threads): n ranks of more threads than that are never
 * run, and their figures are not what a step does (on 2 cores, 2 ranks
 * of 2 threads measured a CPU-time ratio of 57 and a negative call cost:
 * each calling thread's CPU time counts its wait for its pool's other
 * thread, time-sliced away). */
static sc_status measure_sync(ctx *c, int hi, sc_diag *d) {
  static const int LINKS[SYNC_LENGTHS] = {SYNC_SHORT, SYNC_LONG, SYNC_LONG},
                   RUNS[SYNC_LENGTHS] = {1, 4, 16};
  double alone[SYNC_LENGTHS], alone_cpu[SYNC_LENGTHS], unused;
  bool timed_alone = false;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t threads = c->p->threads > 0 ? c->p->threads : 1;
  for (int n = 2; n <= hi && c->p->n_sync < SC_PROFILE_MAX_SYNC; n++) {
    double coll = 0, t[SYNC_LENGTHS], cpu[SYNC_LENGTHS];
    /* n ranks of the profile's threads are not what the runtime runs: no row */
    if (sc_profile_rank_threads(cores, n) != threads) {
      note(c, "sync %d ranks: no row (%lld thread(s) a rank at that count, not %lld)\n", n,
           (long long)sc_profile_rank_threads(cores, n), (long long)threads);
      continue;
    }
    for (int w = 0; !timed_alone && w < SYNC_LENGTHS; w++)
      TRY(time_sync(c, 1, LINKS[w], RUNS[w], &alone[w], &alone_cpu[w], d));
    timed_alone = true;
    TRY(time_sync(c, n, 0, 0, &coll, &unused, d));
    for (int w = 0; w < SYNC_LENGTHS; w++) {
      TRY(time_sync(c, n, LINKS[w], RUNS[w], &t[w], &cpu[w], d));
      note(c, "sync %d ranks, %3d steps: %8.2f us a round, %.2f us CPU (alone %.2f us, %.2f us "
              "CPU; the all-reduce alone %.2f us)\n", n, LINKS[w] * RUNS[w], t[w] * 1e6,
           cpu[w] * 1e6, alone[w] * 1e6, alone_cpu[w] * 1e6, coll * 1e6);
    }
    double ranks_threads = (double)n * (double)(c->p->threads > 0 ? c->p->threads : 1);
    double share = cores > 0 && ranks_threads > (double)cores ? ranks_threads / (double)cores : 1;
    double stretch = alone_cpu[1] > 0 ? share * cpu[1] / alone_cpu[1] : share;
    if (!(stretch >= 1)) stretch = 1; /* computing beside others is never faster */
    if (stretch > SC_PROFILE_MAX_STRETCH) stretch = SC_PROFILE_MAX_STRETCH;
    /* the excess a meeting, against the compute before it: the line
       through the short and long chains' (no slope below 0; then their
       mean), its compute term at most the longest chain's excess over
       the short one's */
    double gap[SYNC_LENGTHS], excess[SYNC_LENGTHS];
    for (int w = 0; w < SYNC_LENGTHS; w++) { /* alone: its CPU time, which others' slices
                                                 do not lengthen */
      gap[w] = stretch * alone_cpu[w];
      excess[w] = t[w] - gap[w] - coll;
    }
    double slope = gap[1] > gap[0] ? (excess[1] - excess[0]) / (gap[1] - gap[0]) : 0;
    if (!(slope > 0)) slope = 0;
    /* a meeting waits at most for the other n - 1 ranks' compute, taken
       in turn: more is other processes' time-slices */
    if (slope > n - 1) slope = n - 1;
    double call = slope > 0 ? excess[0] - slope * gap[0] : 0.5 * (excess[0] + excess[1]);
    sc_profile_sync *y = &c->p->sync[c->p->n_sync++];
    y->ranks = n;
    y->stretch = stretch;
    y->call_s = floored(c, call, "sync call");
    y->call_per_compute = slope;
    y->call_max_s = 0;
    if (slope > 0) {
      double cap = excess[2] - y->call_s;
      if (cap < slope * gap[0]) cap = slope * gap[0]; /* never below the short chain's */
      y->call_max_s = slope * gap[2] > cap ? floored(c, cap, "sync call cap") : 0;
    }
    char cap[48] = "";
    if (y->call_max_s > 0) snprintf(cap, sizeof cap, " (at most %.2f us)", y->call_max_s * 1e6);
    note(c, "sync %d ranks: %.2f us a call + %.3f x the compute before it%s, compute x %.3f\n", n,
         y->call_s * 1e6, y->call_per_compute, cap, y->stretch);
  }
  return SC_OK;
}

static sc_status measure_comms(ctx *c, sc_diag *d) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int hi = c->o->max_ranks > 0 ? c->o->max_ranks : (cores > 4 ? (int)cores : 4);
  if (hi > MAX_GROUP) hi = MAX_GROUP;
  if (hi < 2) return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "calibrate: --max-ranks below 2");
  /* per-rank chunks of 64 B .. 4 MiB (quick: .. 256 KiB), x16 apart */
  int64_t top = c->o->quick ? (int64_t)64 << 10 : (int64_t)1 << 20;
  sc_profile_coll_sample s[MAX_GROUP * KINDS * 8];
  int32_t ns = 0;
  static const char *const KNAME[KINDS] = {"all-reduce", "all-gather", "reduce-scatter"};
  for (int n = 2; n <= hi; n++)
    for (int kind = 0; kind < KINDS; kind++)
      for (int64_t count = 16; count <= top; count *= 16) {
        double bytes = 4.0 * (double)count * n;
        int reps = bytes < 1e5 ? (c->o->quick ? 50 : 200) : bytes < 4e6 ? 20 : 5;
        TRY(time_coll(n, kind, count, reps, &s[ns], d));
        note(c, "local %-14s %d ranks, %9.0f B: %9.2f us\n", KNAME[kind], n, bytes,
             s[ns].seconds * 1e6);
        ns++;
      }
  sc_profile_comm *pc = &c->p->comms[c->p->n_comms];
  TRY(sc_profile_fit_comm(s, ns, pc, d));
  snprintf(pc->name, sizeof pc->name, "local");
  pc->max_ranks = hi;
  c->p->n_comms++;
  note(c, "local: latency %.3f us a hop, bandwidth %.3f GB/s, overhead %.3f us a call "
          "(NNLS over %d samples)\n",
       pc->latency_s * 1e6, pc->bandwidth_bytes_per_s / 1e9, pc->overhead_s * 1e6, ns);
  return measure_sync(c, hi, d);
}

static void cpu_name(char *out, size_t n) {
  snprintf(out, n, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    v[strcspn(v, "\n")] = 0;
    for (char *q = v; *q; q++)
      if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\\') *q = ' ';
    if (*v) snprintf(out, n, "%s", v);
    break;
  }
  fclose(f);
}

/* The GPU measured: its name and the memory its context takes (a real
 * GPU's only: the fake driver's figure is no context's), or the reason
 * there is none ("calibrate --device cuda: no CUDA driver ..."). */
static sc_status probe_gpu(sc_profile *p, sc_diag *d) {
  sc_cuda_probe g;
  if (sc_cuda_probe_device(&g, d) != SC_OK) {
    char why[sizeof d->msg];
    snprintf(why, sizeof why, "%s", d->msg);
    sc_status st = d->status;
    sc_diag_clear(d);
    return sc_diag_set(d, st, NULL, NULL, "calibrate --device cuda: %s", why);
  }
  snprintf(p->device, sizeof p->device, "cuda");
  snprintf(p->device_name, sizeof p->device_name, "%.63s", g.name[0] ? g.name : "GPU");
  for (char *q = p->device_name; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\\') *q = ' ';
  p->threads = 1;
  p->context_bytes = g.emulated ? 0 : g.used_bytes;
  return SC_OK;
}

sc_status sc_calibrate(const sc_calibrate_opts *o, sc_profile *out, sc_diag *d) {
  memset(out, 0, sizeof *out);
  const char *dev = o->device ? o->device : "cpu";
  bool cuda = strcmp(dev, "cuda") == 0;
  if (!cuda && strcmp(dev, "cpu") != 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "calibrate: unknown device '%s' (cpu, cuda)",
                       dev);
  if (o->threads < 0 || o->max_ranks < 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "calibrate: negative threads or ranks");
  sc_profile *p = sc_malloc(sizeof *p);
  if (!p) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  memset(p, 0, sizeof *p);
  double t0 = now_s();
  ctx c = {.o = o, .tg = {.cuda = cuda, .threads = o->threads}, .min_s = o->quick ? 0.01 : 0.1,
           .p = p};
  sc_status st = SC_OK;
  if (cuda) {
    st = probe_gpu(p, d);
    if (st == SC_OK && p->context_bytes > 0)
      note(&c, "cuda context: %lld bytes in use once the context exists\n",
           (long long)p->context_bytes);
  } else {
    snprintf(p->device, sizeof p->device, "cpu");
    cpu_name(p->device_name, sizeof p->device_name);
  }
  if (st == SC_OK) st = measure_overhead(&c, d);
  if (cuda && st == SC_OK) p->threads = 1; /* a GPU rank: its stream, not host threads */
  if (st == SC_OK) st = measure_memory(&c, d);
  if (st == SC_OK) st = measure_gemms(&c, d);
  if (st == SC_OK && !cuda) st = measure_kernels(&c, d);
  if (st == SC_OK) st = cuda ? measure_gpu_attention(&c, d) : measure_attention(&c, d);
  /* one process on one GPU has no communicator of 2+ ranks to time:
   * NCCL holds one rank per GPU, and the CPU communicators need host
   * memory (the profile's comms stay empty; the cluster keeps its links) */
  if (st == SC_OK && !cuda) st = measure_comms(&c, d);
  if (st == SC_OK && cuda)
    note(&c, "collectives: none measured (NCCL needs a GPU per rank; one process, one GPU)\n");
  if (st == SC_OK) {
    p->calibrate_s = now_s() - t0;
    p->present = true;
    *out = *p;
  }
  sc_free(p);
  return st;
}
