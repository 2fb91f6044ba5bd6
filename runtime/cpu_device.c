/* cpu_device.c — the CPU device: LLVM-compiled kernels on a thread pool,
 * matrix products through our own AVX2 kernel (cpu_gemm.h) or oneDNN.
 *
 * The thread pool is created once per session (threads - 1 pthreads; the
 * calling thread works too). It is built for back-to-back small jobs: a
 * worker that finishes a job spins (SPIN_NS, 50 microseconds) watching for
 * the next one before it sleeps on a condition variable, and the caller spins likewise for the workers to
 * finish; so the steps of a run do not pay a futex wake-up each. A kernel step runs the kernel's function over
 * its outer points [0, prod(outer_dims)) cut into chunks spread over the
 * pool; a kernel with little work (outer points x inner extent x phases
 * below KIR_SPLIT_MIN_WORK) runs on the calling thread alone. Every outer point
 * is computed independently by the same code, so results do not depend on
 * the thread count or the split.
 *
 * A GEMM step is cut into fixed tiles (see cpu_run_gemm) run on the pool,
 * each a single-threaded call of the GEMM engine (sc_gemm_engine_get: the
 * own kernel, which reads constant B operands packed at bind, or
 * dnnl_sgemm) plus its bias add in C, then the
 * epilogue kernel runs if there is one. GEMMs are f32 only: lowering turns
 * other dtypes into kir.
 *
 * prepare() JIT-compiles every kernel and checks every GEMM against its
 * buffers (dtypes, extents, int range of BLAS arguments); bind() fixes every
 * buffer's address and builds each kernel's argument array, so a run does
 * no allocation and no lookups (but for the direct convolutions of
 * cpu_conv.c, which wrap the running thread's scratchpad in a oneDNN memory
 * object per call).
 *
 * Out of memory: prepare makes oneDNN's first sgemm itself, after probing
 * for the address space it takes (onednn_setup); a GEMM tile whose engine
 * later finds no memory for its buffers, or a direct convolution or
 * max-pool whose oneDNN call fails (cpu_conv.c), is recorded, the run's
 * remaining products are skipped and the run fails at end_run
 * (docs/runtime.md#out-of-memory). */
#include <errno.h>
#include <limits.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#include "codegen/cpu/cpu.h"
#include "cpu_attention.h"
#include "cpu_conv.h"
#include "cpu_gemm.h"
#include "device.h"

/* ------------------------------------------------------------------ */
/* thread pool                                                          */
/* ------------------------------------------------------------------ */

/* How long a waiting thread spins before it sleeps: longer than the gap
 * between two steps of a run, short enough not to steal much from other
 * processes on a busy machine. */
enum { SPIN_NS = 50000 };

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until *word != val (or quit), at most SPIN_NS. */
static void spin_while_eq(atomic_ullong *word, unsigned long long val, atomic_bool *quit) {
  int64_t until = mono_ns() + SPIN_NS;
  while (atomic_load(word) == val && !atomic_load(quit)) {
    for (int i = 0; i < 16; i++) cpu_relax();
    if (mono_ns() > until) return;
  }
}

struct sc_thread_pool {
  int threads;          /* including the caller */
  int n_workers;        /* pthreads started */
  pthread_t *workers;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  atomic_ullong gen;    /* bumped (under mu) for every job */
  atomic_bool quit;
  int sleepers;         /* workers waiting on `wake` (under mu) */
  int ready;            /* workers past their set-up (under mu) */
  atomic_int busy;      /* workers not finished with the current job */
  /* the current job */
  sc_pool_fn fn;
  void *ud;
  int64_t total, chunk, n_chunks;
  atomic_llong next;    /* next chunk to take */
};

static void take_chunks(sc_thread_pool *tp) {
  for (;;) {
    int64_t c = (int64_t)atomic_fetch_add(&tp->next, 1);
    if (c >= tp->n_chunks) return;
    int64_t b = c * tp->chunk;
    if (b >= tp->total) return;
    int64_t e = b + tp->chunk < tp->total ? b + tp->chunk : tp->total;
    tp->fn(tp->ud, b, e);
  }
}

static void *worker_main(void *arg) {
  sc_thread_pool *tp = arg;
  unsigned long long seen = 0;
  /* OpenMP's per-thread state (oneDNN runs on it), made now while memory
   * is plentiful: libgomp exits the process when it cannot allocate it,
   * as it did on a worker's first GEMM tile under a tight ulimit -v */
  sc_cpu_engine_one_thread();
  pthread_mutex_lock(&tp->mu);
  tp->ready++;
  pthread_cond_signal(&tp->done);
  pthread_mutex_unlock(&tp->mu);
  for (;;) {
    /* spin for the next job, then sleep */
    spin_while_eq(&tp->gen, seen, &tp->quit);
    if (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit)) {
      pthread_mutex_lock(&tp->mu);
      tp->sleepers++;
      while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit))
        pthread_cond_wait(&tp->wake, &tp->mu);
      tp->sleepers--;
      pthread_mutex_unlock(&tp->mu);
    }
    if (atomic_load(&tp->quit)) break;
    seen = atomic_load(&tp->gen);
    take_chunks(tp);
    if (atomic_fetch_sub(&tp->busy, 1) == 1) { /* the last one: the caller may sleep */
      pthread_mutex_lock(&tp->mu);
      pthread_cond_signal(&tp->done);
      pthread_mutex_unlock(&tp->mu);
    }
  }
  return NULL;
}

sc_status sc_thread_pool_create(int threads, sc_thread_pool **out, sc_diag *diag) {
  *out = NULL;
  if (threads < 1 || threads > 4096)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "thread count %d out of range [1, 4096]", threads);
  sc_thread_pool *tp = sc_calloc(1, sizeof *tp);
  if (!tp) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  tp->threads = threads;
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->wake, NULL);
  pthread_cond_init(&tp->done, NULL);
  atomic_init(&tp->next, 0);
  atomic_init(&tp->gen, 0);
  atomic_init(&tp->quit, false);
  atomic_init(&tp->busy, 0);
  if (threads > 1) {
    tp->workers = sc_calloc((size_t)threads - 1, sizeof *tp->workers);
    if (!tp->workers) {
      sc_thread_pool_destroy(tp);
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    for (int i = 0; i < threads - 1; i++) {
      int err = pthread_create(&tp->workers[i], NULL, worker_main, tp);
      if (err != 0) {
        sc_thread_pool_destroy(tp);
        if (err != EAGAIN)
          return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "cannot start thread %d of %d: %s",
                             i + 2, threads, strerror(err));
        /* EAGAIN: most often no room for the thread's stack */
        size_t stack = 0;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) == 0) {
          pthread_attr_getstacksize(&attr, &stack);
          pthread_attr_destroy(&attr);
        }
        return sc_diag_nomem(diag, stack, "the stack of thread %d of %d (or the system's "
                             "limit on threads; --threads N uses fewer)", i + 2, threads);
      }
      tp->n_workers++;
    }
    pthread_mutex_lock(&tp->mu);
    while (tp->ready < tp->n_workers) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
  }
  *out = tp;
  return SC_OK;
}

void sc_thread_pool_destroy(sc_thread_pool *tp) {
  if (!tp) return;
  pthread_mutex_lock(&tp->mu);
  atomic_store(&tp->quit, true);
  pthread_cond_broadcast(&tp->wake);
  pthread_mutex_unlock(&tp->mu);
  for (int i = 0; i < tp->n_workers; i++) pthread_join(tp->workers[i], NULL);
  pthread_cond_destroy(&tp->wake);
  pthread_cond_destroy(&tp->done);
  pthread_mutex_destroy(&tp->mu);
  sc_free(tp->workers);
  sc_free(tp);
}

int sc_thread_pool_threads(const sc_thread_pool *tp) { return tp->threads; }

void sc_thread_pool_run(sc_thread_pool *tp, sc_pool_fn fn, void *ud, int64_t total,
                        int64_t n_chunks) {
  if (total <= 0) return;
  if (n_chunks <= 1 || tp->n_workers == 0) {
    fn(ud, 0, total);
    return;
  }
  if (n_chunks > total) n_chunks = total;
  /* every worker is idle here (busy == 0): the job fields are ours until
   * gen moves (seq_cst atomics order the plain stores before it) */
  tp->fn = fn;
  tp->ud = ud;
  tp->total = total;
  tp->chunk = (total + n_chunks - 1) / n_chunks;
  tp->n_chunks = n_chunks;
  atomic_store(&tp->next, 0);
  atomic_store(&tp->busy, tp->n_workers);
  pthread_mutex_lock(&tp->mu);
  atomic_fetch_add(&tp->gen, 1);
  if (tp->sleepers > 0) pthread_cond_broadcast(&tp->wake);
  pthread_mutex_unlock(&tp->mu);
  take_chunks(tp);
  for (int64_t until = mono_ns() + SPIN_NS; atomic_load(&tp->busy) > 0 && mono_ns() < until;)
    for (int i = 0; i < 16; i++) cpu_relax();
  if (atomic_load(&tp->busy) > 0) {
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(&tp->busy) > 0) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
  }
}

/* ------------------------------------------------------------------ */
/* the device                                                           */
/* ------------------------------------------------------------------ */

/* Kernels whose work (outer points x inner x phases) is below
 * KIR_SPLIT_MIN_WORK run on one thread (kir.h); chunks of the others. */
enum { CHUNK_MIN_WORK = 4096, CHUNKS_PER_THREAD = 4 };

typedef struct cpu_ctx {
  int threads;
  sc_thread_pool *pool;
  const sc_program *p;
  sc_cpu_module *mod;
  const sc_cpu_module *given; /* precompiled kernels (borrowed) or NULL */
  const void *const *const_data; /* per buffer overrides of CONST data, or NULL */
  sc_cpu_kernel_fn *fns;  /* per kernel */
  int64_t *points;        /* per kernel: prod(outer_dims) */
  int64_t *work;          /* per kernel: points x inner x phases (saturated) */
  void ***args;           /* per kernel: param pointers (after bind) */
  void **ptrs;            /* per buffer (after bind) */
  bool *skip;             /* per kernel: a prep kernel of a direct convolution */
  sc_cpu_convs *convs;    /* the GEMMs run as direct convolutions, or NULL */
  bool im2col_convs;      /* none: sc_device_opts.im2col_convs */
  float *repitch;         /* GEMM scratch (sized for the largest:
                             sc_gemm_scratch_numel): oneDNN's B operands
                             copied to a pitch that does not alias, or the
                             own kernel's op(A) packed once */
  sc_gemm_packed_b *packed; /* per step: its constant B packed for the own
                               GEMM kernel (data NULL: none; see pack_weights) */
  bool *packed_owner;     /* per step: packed[i].data is this step's to free
                             (steps reading the same B share one) */
  float **pitched;        /* per step, with oneDNN: its constant op(B) copied at
                             bind, untransposed, to a pitch that does not alias
                             in the cache (repitched_ld), or NULL (see
                             pitch_weights) */
  bool *pitched_owner;    /* per step: pitched[i] is this step's to free */
  double compile_s;
  bool reserve_threads;   /* a product runs on the own kernel: every pool
                             thread's packing buffers are reserved at bind */
  sc_device_memory planned;   /* this program's lines on this device */
  sc_device_memory allocated; /* what prepare and bind allocated, per line */
  sc_gemm_failure run_failed; /* the run's first GEMM whose engine ran out of
                                 memory (bytes 0: none), for cpu_end_run */
  int32_t attn_failed;        /* 1 + the run's first attention step that found
                                 no scratch memory (0: none), for cpu_end_run */
} cpu_ctx;

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 && n <= 4096 ? (int)n : 1;
}

static sc_status cpu_create(const sc_device_opts *o, void **out, sc_diag *diag) {
  *out = NULL;
  cpu_ctx *c = sc_calloc(1, sizeof *c);
  if (!c) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  c->threads = o && o->threads > 0 ? o->threads : online_cores();
  c->given = o ? o->cpu_module : NULL;
  c->const_data = o ? o->const_data : NULL;
  c->im2col_convs = o && o->im2col_convs;
  sc_status st = sc_thread_pool_create(c->threads, &c->pool, diag);
  if (st != SC_OK) {
    sc_free(c);
    return st;
  }
  *out = c;
  return SC_OK;
}

static void free_packed(cpu_ctx *c) {
  c->allocated.bytes[SC_MEM_PACKED_WEIGHTS] = c->allocated.bytes[SC_MEM_PITCHED_WEIGHTS] = 0;
  for (int32_t i = 0; c->packed && c->p && i < c->p->n_steps; i++) {
    if (c->packed_owner[i]) free(c->packed[i].data);
    c->packed[i].data = NULL;
    c->packed_owner[i] = false;
    if (c->pitched_owner[i]) free(c->pitched[i]);
    c->pitched[i] = NULL;
    c->pitched_owner[i] = false;
  }
}

static void cpu_destroy(void *ctx) {
  cpu_ctx *c = ctx;
  if (!c) return;
  sc_thread_pool_destroy(c->pool);
  if (c->mod) sc_cpu_module_destroy(c->mod);
  if (c->args && c->p)
    for (int32_t k = 0; k < c->p->n_kernels; k++) sc_free(c->args[k]);
  sc_free(c->args);
  sc_cpu_convs_destroy(c->convs);
  free_packed(c);
  sc_free(c->packed);
  sc_free(c->packed_owner);
  sc_free(c->pitched);
  sc_free(c->pitched_owner);
  sc_free(c->skip);
  sc_free(c->fns);
  sc_free(c->points);
  sc_free(c->work);
  sc_free(c->ptrs);
  free(c->repitch);
  sc_free(c);
}

static int64_t buf_numel(const sc_program *p, int32_t b) {
  unsigned es = sc_dtype_size(p->buffers[b].dtype);
  return es ? p->buffers[b].bytes / es : 0;
}

static bool valid_buffer(const sc_program *p, int32_t b) { return b >= 0 && b < p->n_buffers; }

/* Why GEMM step s cannot run here, or NULL. */
const char *sc_gemm_problem(const sc_program *p, const sc_step *s) {
  const sc_gemm *g = &s->gemm;
  if (!valid_buffer(p, g->a) || !valid_buffer(p, g->b) || !valid_buffer(p, g->c) ||
      (g->bias >= 0 && !valid_buffer(p, g->bias)))
    return "buffer id out of range";
  sc_dtype t = p->buffers[g->c].dtype;
  if ((t != SC_DTYPE_F32 && t != SC_DTYPE_BF16) || p->buffers[g->a].dtype != t ||
      p->buffers[g->b].dtype != t || (g->bias >= 0 && p->buffers[g->bias].dtype != t))
    return "a matrix product runs as a GEMM in f32 or bf16, every operand the same";
  if (g->batch < 0 || g->m < 0 || g->n < 0 || g->k < 0 || g->m > INT_MAX || g->n > INT_MAX ||
      g->k > INT_MAX || g->lda > INT_MAX || g->ldb > INT_MAX || g->ldc > INT_MAX)
    return "extents outside BLAS's int range";
  int64_t ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k;
  int64_t br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
  if ((ar > 0 && g->lda < (ac > 1 ? ac : 1)) || (br > 0 && g->ldb < (bc > 1 ? bc : 1)) ||
      (g->m > 0 && g->ldc < (g->n > 1 ? g->n : 1)))
    return "leading dimension smaller than a row";
  int64_t span[3];
  if (!sc_gemm_spans(g, span)) return "extents overflow";
  if (span[0] > buf_numel(p, g->a) || span[1] > buf_numel(p, g->b) ||
      span[2] > buf_numel(p, g->c))
    return "matrix extents exceed their buffers";
  if (g->bias >= 0) {
    int64_t bn = buf_numel(p, g->bias), mn;
    if (!sc_mul_i64(g->m, g->n, &mn)) return "extents overflow";
    if (g->bias_full ? (bn != mn && bn != mn * g->batch) : bn != g->n)
      return "bias shape does not match the product";
  }
  if (s->kernel >= p->n_kernels) return "epilogue kernel id out of range";
  if (g->bgrad != SC_GEMM_BGRAD_NONE &&
      (g->bgrad_kernel < 0 || g->bgrad_kernel >= p->n_kernels || g->bgrad_kernel == s->kernel))
    return "bias-gradient kernel id out of range";
  return NULL;
}

static bool cpu_supports_step(void *ctx, const sc_program *p, const sc_step *s) {
  (void)ctx;
  switch (s->kind) {
  case SC_STEP_KERNEL: return s->kernel >= 0 && s->kernel < p->n_kernels;
  case SC_STEP_GEMM: return sc_gemm_problem(p, s) == NULL;
  case SC_STEP_ATTENTION:
  case SC_STEP_ATTENTION_GRAD: return sc_attention_problem(p, s) == NULL;
  case SC_STEP_COMM: /* run by the session, not the device */
  case SC_STEP_CHECK:
  case SC_STEP_SCATTER_ADD:
  case SC_STEP_WAIT:
  case SC_STEP_COPY: return true; /* the arena is host memory */
  default: return false;
  }
}

static bool packs_b(const cpu_ctx *c, const sc_step *s);

/* Whether GEMM g's operands are bf16 (sc_gemm_problem: all or none). */
static bool is_bf16(const sc_program *p, const sc_gemm *g) {
  return g->c >= 0 && g->c < p->n_buffers && p->buffers[g->c].dtype == SC_DTYPE_BF16;
}

/* oneDNN sets itself up on its first sgemm of each kind (its kernels
 * generated, each under a pthread_once) and does not survive an allocation
 * failing there: seen as a SIGSEGV inside it under a tight ulimit -v. A
 * 1 x 1 x 1 product sets up only its small path: the first real product
 * (GPT-2's step at a limit 30 KiB above the set-up's) then generated the
 * blocked kernels and crashed. So prepare makes the first call of every
 * kind a program can make, after probing for the address space they take:
 * the small product, and a 64 x 64 x 64 one (blocked, packed) for each of
 * the four transpositions (measured: 5.5 MB of VmPeak for the small one;
 * ONEDNN_SETUP_BYTES leaves room for the rest). Later calls report a
 * failure as a status (cpu_end_run). */
enum { ONEDNN_SETUP_BYTES = 8 << 20, ONEDNN_SETUP_DIM = 64 };

static sc_status onednn_setup(sc_diag *diag) {
  static atomic_bool done;
  if (atomic_load(&done)) return SC_OK;
  if (!sc_mem_probe(ONEDNN_SETUP_BYTES))
    return sc_diag_nomem(diag, ONEDNN_SETUP_BYTES, "oneDNN's set-up (its GEMM kernels)");
  sc_cpu_engine_one_thread();
  float a = 1.0f, b = 1.0f, c = 0.0f;
  bool ok = dnnl_sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) == dnnl_success;
  enum { D = ONEDNN_SETUP_DIM };
  float *m = ok ? sc_calloc(3 * D * D, sizeof *m) : NULL;
  for (int t = 0; m && ok && t < 4; t++)
    ok = dnnl_sgemm(t & 1 ? 'T' : 'N', t & 2 ? 'T' : 'N', D, D, D, 1.0f, m, D, m + D * D, D,
                    0.0f, m + 2 * D * D, D) == dnnl_success;
  if (ok && !m) ok = false;
  sc_free(m);
  if (!ok) return sc_diag_nomem(diag, ONEDNN_SETUP_BYTES, "oneDNN's set-up (its GEMM kernels)");
  atomic_store(&done, true);
  return SC_OK;
}

static sc_status cpu_prepare(void *ctx, const sc_program *p, sc_diag *diag) {
  cpu_ctx *c = ctx;
  c->p = p;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (cpu_supports_step(c, p, s)) continue;
    bool attn = s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD;
    const char *why = s->kind == SC_STEP_GEMM ? sc_gemm_problem(p, s)
                      : attn                  ? sc_attention_problem(p, s)
                                              : "bad step";
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, s->origin, NULL,
                       "cpu device: step %d (%s): %s", (int)i,
                       s->kind == SC_STEP_GEMM ? "gemm" : attn ? "attention" : "kernel",
                       why ? why : "unsupported");
  }
  int32_t nk = p->n_kernels;
  size_t nk1 = nk > 0 ? (size_t)nk : 1;
  c->fns = sc_calloc(nk1, sizeof *c->fns);
  c->points = sc_calloc(nk1, sizeof *c->points);
  c->work = sc_calloc(nk1, sizeof *c->work);
  c->args = sc_calloc(nk1, sizeof *c->args);
  c->ptrs = sc_calloc(p->n_buffers > 0 ? (size_t)p->n_buffers : 1, sizeof *c->ptrs);
  c->skip = sc_calloc(nk1, sizeof *c->skip);
  size_t ns1 = p->n_steps > 0 ? (size_t)p->n_steps : 1;
  c->packed = sc_calloc(ns1, sizeof *c->packed);
  c->packed_owner = sc_calloc(ns1, sizeof *c->packed_owner);
  c->pitched = sc_calloc(ns1, sizeof *c->pitched);
  c->pitched_owner = sc_calloc(ns1, sizeof *c->pitched_owner);
  if (!c->fns || !c->points || !c->work || !c->args || !c->ptrs || !c->skip || !c->packed ||
      !c->packed_owner || !c->pitched || !c->pitched_owner)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t k = 0; k < nk; k++) {
    const kir_kernel *kk = p->kernels[k];
    int64_t pts = 1, w;
    for (int32_t d = 0; d < kk->outer_rank; d++)
      if (!sc_mul_i64(pts, kk->outer_dims[d], &pts))
        return sc_diag_set(diag, SC_ERR_LIMIT, kk->origin, NULL,
                           "kernel %s: outer domain too large", kk->name);
    c->points[k] = pts;
    int64_t phases = kk->n_phases > 0 ? kk->n_phases : 1;
    if (!sc_mul_i64(pts, kk->inner, &w) || !sc_mul_i64(w, phases, &w)) w = INT64_MAX;
    c->work[k] = w;
    c->args[k] = sc_calloc(kk->n_params > 0 ? (size_t)kk->n_params : 1, sizeof(void *));
    if (!c->args[k]) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  if (c->given && sc_cpu_module_n_kernels(c->given) != nk)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL,
                       "cpu device: the precompiled module has %d kernels, the program %d",
                       (int)sc_cpu_module_n_kernels(c->given), (int)nk);
  if (nk > 0) {
    const sc_cpu_module *mod = c->given;
    if (!mod) {
      sc_cpu_opts co;
      sc_cpu_opts_init(&co);
      sc_status st = sc_cpu_jit(p, &co, &c->mod, diag);
      if (st != SC_OK) return st;
      mod = c->mod;
    }
    c->compile_s = sc_cpu_compile_seconds(mod);
    for (int32_t k = 0; k < nk; k++) {
      c->fns[k] = sc_cpu_kernel(mod, k);
      if (!c->fns[k])
        return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                           "cpu device: kernel %s was not compiled", p->kernels[k]->name);
    }
  }
  sc_status st = SC_OK;
  bool onednn = false; /* a product runs on oneDNN */
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_GEMM &&
        (sc_gemm_engine_get() == SC_GEMM_ENGINE_ONEDNN || p->steps[i].gemm.conv.on))
      onednn = true;
  if (onednn) st = onednn_setup(diag);
  if (st == SC_OK && !c->im2col_convs) st = sc_cpu_convs_prepare(p, c->skip, &c->convs, diag);
  /* the device's own memory outside the arena, as the plan sizes it for
   * this device (codegen/device_memory.h); what bind allocates is counted
   * against it, line by line */
  sc_device_target t = {.device = "cpu", .engine = sc_gemm_engine_get(), .threads = c->threads,
                        .direct_convs = !c->im2col_convs};
  if (st == SC_OK) st = sc_device_memory_plan(p, &t, &c->planned, diag);
  /* the convolutions it prepared, sized as sc_cpu_plan_convs sizes them */
  if (st == SC_OK && !c->im2col_convs) sc_cpu_convs_plan_memory(c->convs, c->threads, &c->planned);
  int64_t scratch = 0;
  bool own_runs = false; /* a product runs on the own kernel */
  for (int32_t i = 0; i < p->n_steps && st == SC_OK; i++) {
    const sc_step *s = &p->steps[i];
    /* a direct convolution is no GEMM here */
    if (s->kind != SC_STEP_GEMM || (!is_bf16(p, &s->gemm) && sc_cpu_convs_note(c->convs, s)))
      continue;
    own_runs |= sc_gemm_engine_get() == SC_GEMM_ENGINE_OWN;
    int64_t n = sc_gemm_step_scratch_numel(p, s, sc_gemm_engine_get());
    if (n > scratch) scratch = n;
  }
  c->reserve_threads = own_runs;
  if (st == SC_OK && scratch > 0 &&
      posix_memalign((void **)&c->repitch, 64, (size_t)scratch * sizeof(float)) != 0) {
    c->repitch = NULL;
    return sc_diag_nomem(diag, (uint64_t)scratch * sizeof(float), "the cpu device's GEMM scratch");
  }
  c->allocated.bytes[SC_MEM_GEMM_SCRATCH] = scratch * (int64_t)sizeof(float);
  return st;
}

static void *cpu_alloc_arena(void *ctx, int64_t bytes) {
  (void)ctx;
  if (bytes < 0) return NULL;
  /* round up to the alignment; never 0 so that a pointer comes back */
  int64_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void *p = NULL;
  if (posix_memalign(&p, 64, (size_t)n) != 0) return NULL;
  return p;
}

/* SC_OK when rb's [offset, +bytes) lies inside a region of size bytes
 * (what: "arena", "host pool"), else an error naming both. */
static sc_status region_check(const sc_buffer *rb, int64_t size, const char *what,
                              sc_diag *diag) {
  if (rb->offset < 0 || rb->bytes < 0 || rb->offset > size || rb->bytes > size - rb->offset)
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "buffer '%s' [%lld, +%lld) lies outside the %lld-byte %s",
                       rb->name ? rb->name : "?", (long long)rb->offset, (long long)rb->bytes,
                       (long long)size, what);
  return SC_OK;
}

static void cpu_free_arena(void *ctx, void *arena) {
  (void)ctx;
  free(arena);
}

sc_status sc_buffer_binding(const sc_program *p, int32_t b, int32_t *root, int64_t *offset,
                            sc_diag *diag) {
  int32_t r = sc_program_root(p, b);
  const sc_buffer *rb = &p->buffers[r];
  *root = r;
  *offset = -1;
  switch (rb->kind) {
  case SC_BUF_INPUT:
  case SC_BUF_OUTPUT:
  case SC_BUF_TEMP:
    if (sc_program_bound(p, r)) return SC_OK; /* the caller's storage */
    sc_status st = region_check(rb, p->arena_bytes, "arena", diag);
    if (st != SC_OK) return st;
    *offset = rb->offset;
    return SC_OK;
  case SC_BUF_CONST: return SC_OK;
  case SC_BUF_HOST: /* the session's host pool: no device address */
    return region_check(rb, p->host_bytes, "host pool", diag);
  default:
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "buffer '%s': view without a storage root", rb->name ? rb->name : "?");
  }
}

sc_status sc_check_kernel_params(const sc_program *p, sc_diag *diag) {
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 0; i < kk->n_params; i++)
      if (kk->params[i].buffer < 0 || kk->params[i].buffer >= p->n_buffers)
        return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL, "kernel %s: param %d has no buffer",
                           kk->name, (int)i);
  }
  return SC_OK;
}

/* Whether GEMM step s's B is a constant that is laid out again at bind
 * (pack_weights, pitch_weights; sc_gemm_b_relaid), not a direct
 * convolution. */
static bool packs_b(const cpu_ctx *c, const sc_step *s) {
  return sc_gemm_b_relaid(c->p, s) && !sc_cpu_convs_note(c->convs, s);
}

typedef struct pack_job {
  const sc_gemm *g;
  const float *B;
  sc_gemm_packed_b *out;
} pack_job;

/* blocks [begin, end) of SC_GEMM_KC rows of op(B) */
static void pack_rows(void *ud, int64_t begin, int64_t end) {
  const pack_job *j = ud;
  sc_gemm_pack_b(j->g->trans_b, j->g->k, j->g->n, j->B, j->g->ldb, begin * SC_GEMM_KC,
                 end * SC_GEMM_KC, j->out);
}

/* Whether GEMMs h and g read the same op(B) the same way (one root: its
 * data overrides are per root, so one address too). */
static bool same_b(const cpu_ctx *c, const sc_gemm *h, const sc_gemm *g) {
  return sc_gemm_same_b(c->p, h, g);
}

/* With the own GEMM kernel (cpu_gemm.h), every constant B is packed once
 * here, into the layout the kernel reads: no packing per run, rows read in
 * order from aligned memory. Steps reading the same matrix the same way
 * share one packing. The packed copies are the device's own memory,
 * outside the arena (k x n rounded up to 16 floats each). */
static sc_status pack_weights(cpu_ctx *c, sc_diag *diag) {
  free_packed(c); /* a second bind starts over */
  if (sc_gemm_engine_get() != SC_GEMM_ENGINE_OWN) return SC_OK;
  const sc_program *p = c->p;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (!packs_b(c, s)) continue;
    const sc_gemm *g = &s->gemm;
    for (int32_t j = 0; j < i && !c->packed[i].data; j++)
      if (c->packed[j].data && same_b(c, &p->steps[j].gemm, g)) c->packed[i] = c->packed[j];
    if (c->packed[i].data) continue;
    int64_t numel = sc_gemm_weight_copy_numel(p, s, SC_GEMM_ENGINE_OWN);
    if (numel <= 0 || numel > INT64_MAX / 4 ||
        posix_memalign((void **)&c->packed[i].data, 64, (size_t)numel * sizeof(float)))
      return sc_diag_set(diag, SC_ERR_NOMEM, s->origin, NULL,
                         "cpu device: no memory to pack a %lld x %lld weight matrix",
                         (long long)g->k, (long long)g->n);
    c->packed_owner[i] = true;
    c->allocated.bytes[SC_MEM_PACKED_WEIGHTS] += numel * (int64_t)sizeof(float);
    pack_job j = {.g = g, .B = c->ptrs[g->b], .out = &c->packed[i]};
    int64_t blocks = (g->k + SC_GEMM_KC - 1) / SC_GEMM_KC;
    sc_thread_pool_run(c->pool, pack_rows, &j, blocks, blocks);
  }
  return SC_OK;
}

static sc_status pitch_weights(cpu_ctx *c, sc_diag *diag);
static sc_status reserve_threads(cpu_ctx *c, sc_diag *diag);

static sc_status cpu_bind(void *ctx, void *arena, sc_diag *diag) {
  cpu_ctx *c = ctx;
  const sc_program *p = c->p;
  char *base = arena;
  for (int32_t b = 0; b < p->n_buffers; b++) {
    int32_t r;
    int64_t off;
    sc_status st = sc_buffer_binding(p, b, &r, &off, diag);
    if (st != SC_OK) return st;
    if (off >= 0) {
      c->ptrs[b] = base + off;
      continue;
    }
    if (p->buffers[r].kind == SC_BUF_HOST) { /* the session's: COPY steps only */
      c->ptrs[b] = NULL;
      continue;
    }
    const void *data = c->const_data && c->const_data[r] ? c->const_data[r] : p->buffers[r].data;
    if (!data && p->buffers[r].bytes > 0)
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         p->buffers[r].kind == SC_BUF_CONST
                             ? "constant '%s' has no data (loaded with --no-weights?)"
                             : "bound buffer '%s' has no storage",
                         p->buffers[r].name ? p->buffers[r].name : "?");
    c->ptrs[b] = (void *)data;
  }
  sc_status st = sc_check_kernel_params(p, diag);
  for (int32_t k = 0; st == SC_OK && k < p->n_kernels; k++)
    for (int32_t i = 0; i < p->kernels[k]->n_params; i++) {
      void *shadow = sc_cpu_convs_param_ptr(c->convs, k, i); /* see cpu_conv.h */
      c->args[k][i] = shadow ? shadow : c->ptrs[p->kernels[k]->params[i].buffer];
    }
  if (st == SC_OK && c->convs) st = sc_cpu_convs_bind(c->convs, c->ptrs, diag);
  if (st == SC_OK) st = pack_weights(c, diag);
  if (st == SC_OK) st = pitch_weights(c, diag);
  if (st == SC_OK) st = reserve_threads(c, diag);
  c->allocated.bytes[SC_MEM_ARENA] = c->p->arena_bytes;
  sc_cpu_convs_memory(c->convs, &c->allocated);
  return st;
}

/* Every pool thread's packing buffers for the own kernel and its oneDNN
 * scratchpad for the direct convolutions, allocated now at their planned
 * sizes (else each thread allocates or grows them at its first tile): one
 * chunk per thread, each held until all have started, so that no thread
 * takes two. */
typedef struct reserve_job {
  atomic_int started, reserved, conv_failed;
  int threads;
  bool gemm;
  sc_cpu_convs *convs;
} reserve_job;

static void reserve_chunk(void *ud, int64_t begin, int64_t end) {
  reserve_job *j = ud;
  for (int64_t i = begin; i < end; i++) {
    if (j->gemm && sc_cpu_gemm_thread_reserve()) atomic_fetch_add(&j->reserved, 1);
    if (!sc_cpu_convs_thread_reserve(j->convs)) atomic_fetch_add(&j->conv_failed, 1);
    atomic_fetch_add(&j->started, 1);
  }
  while (atomic_load(&j->started) < j->threads) cpu_relax();
}

static sc_status reserve_threads(cpu_ctx *c, sc_diag *diag) {
  c->allocated.bytes[SC_MEM_GEMM_THREADS] = 0;
  if (!c->reserve_threads && !c->planned.bytes[SC_MEM_CONV_THREADS]) return SC_OK;
  reserve_job j = {.threads = c->threads, .gemm = c->reserve_threads, .convs = c->convs};
  atomic_init(&j.started, 0);
  atomic_init(&j.reserved, 0);
  atomic_init(&j.conv_failed, 0);
  sc_thread_pool_run(c->pool, reserve_chunk, &j, c->threads, c->threads);
  int64_t one = sc_cpu_gemm_thread_buffer_bytes();
  c->allocated.bytes[SC_MEM_GEMM_THREADS] = (int64_t)atomic_load(&j.reserved) * one;
  if (c->reserve_threads && atomic_load(&j.reserved) < c->threads)
    return sc_diag_nomem(diag, (uint64_t)one, "the GEMM kernel's packing buffers of a thread");
  if (atomic_load(&j.conv_failed) > 0)
    return sc_diag_nomem(diag, (uint64_t)(c->planned.bytes[SC_MEM_CONV_THREADS] / c->threads),
                         "a thread's oneDNN scratchpad for the direct convolutions (and 1 MiB "
                         "of headroom after it)");
  return SC_OK;
}

static void cpu_memory(void *ctx, sc_device_memory *planned, sc_device_memory *allocated) {
  cpu_ctx *c = ctx;
  if (planned) *planned = c->planned;
  if (allocated) *allocated = c->allocated;
}

static void *cpu_buffer_ptr(void *ctx, int32_t b) { return ((cpu_ctx *)ctx)->ptrs[b]; }

static void cpu_copy(void *ctx, void *dst, const void *src, int64_t bytes) {
  (void)ctx;
  if (bytes > 0 && dst != src) memcpy(dst, src, (size_t)bytes);
}

static void cpu_zero(void *ctx, void *dst, int64_t bytes) {
  (void)ctx;
  if (bytes > 0) memset(dst, 0, (size_t)bytes);
}

typedef struct kernel_job {
  sc_cpu_kernel_fn fn;
  void *const *args;
} kernel_job;

static void kernel_chunk(void *ud, int64_t begin, int64_t end) {
  const kernel_job *j = ud;
  j->fn(j->args, begin, end);
}

static void run_kernel_pool(cpu_ctx *c, int32_t k, int64_t pts, int64_t w) {
  int64_t chunks = (int64_t)c->threads * CHUNKS_PER_THREAD;
  if (chunks > w / CHUNK_MIN_WORK) chunks = w / CHUNK_MIN_WORK;
  if (chunks > pts) chunks = pts;
  kernel_job j = {c->fns[k], c->args[k]};
  sc_thread_pool_run(c->pool, kernel_chunk, &j, pts, chunks);
}

static void run_kernel_id(cpu_ctx *c, int32_t k) {
  int64_t pts = c->points[k];
  if (pts <= 0 || c->skip[k]) return;
  sc_cpu_convs_kernel_hooks(c->convs, k, false, c->ptrs, c->pool);
  int64_t w = c->work[k];
  if (c->threads == 1 || pts < 2 || w < KIR_SPLIT_MIN_WORK)
    c->fns[k](c->args[k], 0, pts);
  else
    run_kernel_pool(c, k, pts, w);
  sc_cpu_convs_kernel_hooks(c->convs, k, true, c->ptrs, c->pool);
}

static void cpu_run_kernel(void *ctx, const sc_step *s) {
  cpu_ctx *c = ctx;
  if (!sc_cpu_convs_pool(c->convs, s, c->pool)) run_kernel_id(c, s->kernel);
}

/* GEMMs are cut into tiles (batch entry x tile_m rows x tile_n columns)
 * whose boundaries depend only on the problem's shape, never on the thread
 * count; each tile is one single-threaded call of the engine (plus its
 * bias), and the pool runs the tiles. So every element is computed by the
 * same call whatever the thread count: results are bit-identical with 1 or
 * N threads (a library's own threading is not).
 *
 * The tile shape (sc_gemm_tiling, codegen/device_memory.c) suits oneDNN's single-threaded sgemm on a
 * 2-core Zen machine (docs/runtime.md#gemm-tiles): tiles of 128 rows run
 * at 85-90 GFLOP/s per core for any width from 384 to 3072 columns (64
 * rows: ~5% less), so what matters is that the tiles share out evenly.
 * Tiles are at most 768 columns wide (all of n when it is narrower); the
 * column count grows while the tile count is not a multiple of 4 and tiles
 * stay at least 384 wide (128 x 2304 alone: 4 tiles of 576, ~167 GFLOP/s on
 * 2 cores, against ~150 for the 10 tiles of 64 x 464 of the earlier rule;
 * in the whole GPT-2-small run the two rules are within 2%). Rows are 128
 * per tile, 64 when that leaves fewer than 4 tiles.
 *
 * Tiles of at most 128 rows are few enough that oneDNN runs them with its
 * no-copy kernels, which read B in place. When B's row pitch is a multiple
 * of 4 KiB, the rows of a panel fall into the same cache sets and a tile
 * runs at a third of its speed (128 x 3072 x 768 with pitch 3072: ~31
 * GFLOP/s on one Zen core, ~90 with pitch 3088; docs/runtime.md#gemm-tiles).
 * Such a B is first copied, by the pool, into a scratch whose pitch is
 * longer by 16 floats (the row length rounded up to 16 floats, plus 16
 * when that is a multiple of 4 KiB again): K x N floats moved, the product
 * 2-3x faster. The copy is op(B) itself, k rows of n, so a transposed B is
 * transposed on the way (the copy is exact; the product then reads B
 * untransposed, see pitch_weights for why). */
enum { REPITCH_ROWS = 16 }; /* rows of op(B) per unit */

typedef struct repitch_job {
  const float *B;
  float *dst;
  int64_t k, n;   /* the copy: op(B)'s k rows, n columns from column n0 */
  int64_t n0;
  bool trans_b;   /* B holds op(B)^T: rows of k */
  int64_t ldb, stride_b, ld, units;
} repitch_job;

/* The copy of columns [n0, n0 + n) of g's op(B) (at B) into dst, k rows at
 * a pitch that does not alias, and in *rg g reading it there, untransposed
 * (rg may be NULL; its op(B) then starts at column n0). The copy runs in
 * units of REPITCH_ROWS rows of one batch entry. */
static repitch_job repitch_of(const sc_gemm *g, const float *B, int64_t n0, int64_t n,
                              float *dst, sc_gemm *rg) {
  repitch_job r = {.B = B, .dst = dst, .k = g->k, .n = n, .n0 = n0, .trans_b = g->trans_b,
                   .ldb = g->ldb, .stride_b = g->stride_b, .ld = sc_gemm_repitched_ld(n)};
  r.units = (g->stride_b ? g->batch : 1) * ((g->k + REPITCH_ROWS - 1) / REPITCH_ROWS);
  if (rg) {
    *rg = *g;
    rg->trans_b = false;
    rg->ldb = r.ld;
    rg->stride_b = g->stride_b ? g->k * r.ld : 0;
  }
  return r;
}

static void repitch_rows(void *ud, int64_t begin, int64_t end) {
  const repitch_job *j = ud;
  int64_t per_entry = (j->k + REPITCH_ROWS - 1) / REPITCH_ROWS;
  for (int64_t u = begin; u < end; u++) {
    int64_t k0 = u % per_entry * REPITCH_ROWS;
    int64_t k1 = k0 + REPITCH_ROWS < j->k ? k0 + REPITCH_ROWS : j->k;
    const float *src = j->B + u / per_entry * j->stride_b;
    float *dst = j->dst + u / per_entry * j->k * j->ld;
    if (!j->trans_b) {
      for (int64_t r = k0; r < k1; r++)
        memcpy(dst + r * j->ld, src + r * j->ldb + j->n0, (size_t)j->n * sizeof(float));
      continue;
    }
    /* B's rows are op(B)'s columns: each read along its REPITCH_ROWS
     * consecutive elements (one cache line), written down a column of the
     * unit's rows, whose pitch does not alias. (Reading across B's rows
     * instead, 64 of them at a time, touches lines of one cache
     * set when B's pitch is a multiple of 4 KiB, the very case repitched:
     * GPT-2-small's 768 x 3072 MLP weight transposed ran 2.7x slower than
     * the product untransposed.) */
    for (int64_t c = 0; c < j->n; c++) {
      const float *col = src + (j->n0 + c) * j->ldb;
      for (int64_t r = k0; r < k1; r++) dst[r * j->ld + c] = col[r];
    }
  }
}

/* With oneDNN, two kinds of constant B are copied once, here at bind,
 * into k rows of n at a pitch that does not alias (repitch_of), which the
 * product then reads untransposed:
 * - one whose pitch aliases in the cache (sc_gemm_repitch_numel): else it
 *   would be copied into the scratch at every run (GPT-2-small's MLP
 *   weights, 768 x 3072: 12 copies of 9.4 MB from memory per run);
 * - a transposed one (Y = X W^T: Gemm with transB, a tied LM head): oneDNN's
 *   single-threaded sgemm runs 10-20% slower on a transposed B at five of
 *   six shapes tried (GPT-2-small's LM head, 128 x 50257 x 768 on 2 threads:
 *   ~195 GFLOP/s against ~215 untransposed; docs/runtime.md#gemm-tiles).
 * The copies are the device's own memory, outside the arena; steps reading
 * the same matrix the same way share one. */
static sc_status pitch_weights(cpu_ctx *c, sc_diag *diag) {
  if (sc_gemm_engine_get() == SC_GEMM_ENGINE_OWN) return SC_OK;
  const sc_program *p = c->p;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    const sc_gemm *g = &s->gemm;
    int64_t numel;
    if (!packs_b(c, s) || (numel = sc_gemm_weight_copy_numel(p, s, SC_GEMM_ENGINE_ONEDNN)) <= 0)
      continue;
    for (int32_t j = 0; j < i && !c->pitched[i]; j++)
      if (c->pitched[j] && same_b(c, &p->steps[j].gemm, g)) c->pitched[i] = c->pitched[j];
    if (c->pitched[i]) continue;
    if (posix_memalign((void **)&c->pitched[i], 64, (size_t)numel * sizeof(float))) {
      c->pitched[i] = NULL;
      return sc_diag_set(diag, SC_ERR_NOMEM, s->origin, NULL,
                         "cpu device: no memory to copy a %lld x %lld weight matrix",
                         (long long)g->k, (long long)g->n);
    }
    c->pitched_owner[i] = true;
    c->allocated.bytes[SC_MEM_PITCHED_WEIGHTS] += numel * (int64_t)sizeof(float);
    repitch_job r = repitch_of(g, c->ptrs[g->b], 0, g->n, c->pitched[i], NULL);
    sc_thread_pool_run(c->pool, repitch_rows, &r, r.units, r.units);
  }
  return SC_OK;
}

typedef struct gemm_job {
  const sc_gemm *g;
  const float *A, *B, *bias;
  float *C;
  bool trans_b;        /* how B is read: g's, or a re-pitched panel's */
  int64_t ldb, stride_b;
  int64_t n_base;      /* B holds op(B) from this column on */
  int64_t tile_m, tile_n, tiles_m, tiles_n;
  int64_t col0, cols;  /* the columns of tiles run: [col0, col0 + cols) */
  bool bias_per_batch;
  bool own; /* sc_cpu_gemm_tile, else dnnl_sgemm */
  const sc_gemm_packed_b *packed; /* own: op(B) packed, or NULL */
  float *packed_a;     /* own: each row tile of op(A) packed (pack_a_tiles), or NULL */
  int64_t packed_a_tile; /* floats per row tile there */
  atomic_bool failed;  /* a tile's engine could not allocate its buffers */
  sc_gemm_failure *failure; /* the first such tile, written by its finder */
} gemm_job;

/* A tile whose engine found no memory for its buffers: the first one is
 * kept; the tiles after it still run (they may find memory), but C is not
 * the product and the run fails (cpu_end_run). A worker cannot return an
 * error; the process must not end either. */
static void tile_failed(gemm_job *j, bool own, int m, int n, int64_t k) {
  bool was = false;
  if (!atomic_compare_exchange_strong(&j->failed, &was, true) || !j->failure) return;
  /* own: its per-thread buffers (cpu_gemm.c); oneDNN: its packed copies of
   * both operand tiles, as far as can be told from outside */
  uint64_t bytes = own ? (uint64_t)sc_cpu_gemm_thread_buffer_bytes()
                       : ((uint64_t)m * (uint64_t)k + (uint64_t)k * (uint64_t)n) * sizeof(float);
  *j->failure = (sc_gemm_failure){.bytes = bytes, .m = m, .n = n, .k = k, .own = own};
}

/* With the own kernel, a product cut into several columns of tiles reads
 * each row tile of op(A) once per column: every tile packed those rows
 * again (GPT-2-small's LM head at batch 1: the same 128 x 768 rows 66
 * times, ~4% of the product). When the caller gives scratch, they are
 * packed once instead, by the pool, before the tiles run: one packed row
 * tile per batch entry of A (one in all when A is broadcast;
 * sc_gemm_packed_a_scratch_numel). */

/* row tiles [begin, end) of op(A), over every batch entry that has its own */
static void pack_a_tiles(void *ud, int64_t begin, int64_t end) {
  const gemm_job *j = ud;
  const sc_gemm *g = j->g;
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / j->tiles_m, m0 = t % j->tiles_m * j->tile_m;
    int64_t m = g->m - m0 < j->tile_m ? g->m - m0 : j->tile_m;
    sc_gemm_pack_a(g->trans_a, m, g->k,
                   j->A + b * g->stride_a + (g->trans_a ? m0 : m0 * g->lda), g->lda,
                   j->packed_a + t * j->packed_a_tile);
  }
}

static void gemm_tiles(void *ud, int64_t begin, int64_t end) {
  gemm_job *j = ud;
  const sc_gemm *g = j->g;
  sc_cpu_engine_one_thread(); /* oneDNN runs on OpenMP: held to this thread */
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / (j->tiles_m * j->cols), r = t % (j->tiles_m * j->cols);
    /* the own kernel: the row tiles of one column of tiles in turn, so
     * that the column's packed B is still in the caches for the next */
    int64_t rw = j->own ? r % j->tiles_m : r / j->cols;
    int64_t col = j->col0 + (j->own ? r / j->tiles_m : r % j->cols);
    int64_t m0 = rw * j->tile_m, n0 = col * j->tile_n;
    int m = (int)(g->m - m0 < j->tile_m ? g->m - m0 : j->tile_m);
    int n = (int)(g->n - n0 < j->tile_n ? g->n - n0 : j->tile_n);
    /* rows m0.. of op(A): A + m0 * lda, or columns m0.. when transposed */
    const float *A = j->A + b * g->stride_a + (g->trans_a ? m0 : m0 * g->lda);
    /* columns n0.. of op(B): B + n0, or rows n0.. when transposed */
    const float *B =
        j->B + b * j->stride_b + (j->trans_b ? (n0 - j->n_base) * j->ldb : n0 - j->n_base);
    float *C = j->C + b * g->stride_c + m0 * g->ldc + n0;
    if (g->k == 0) { /* BLAS need not touch C when k == 0: C = beta * C */
      for (int i = 0; i < m; i++)
        for (int jj = 0; jj < n; jj++) {
          float *e = &C[(int64_t)i * g->ldc + jj];
          *e = g->beta == 0.0f ? 0.0f : g->beta * *e;
        }
    } else if (j->own) {
      const float *pa = j->packed_a ? j->packed_a + ((g->stride_a ? b : 0) * j->tiles_m + rw) *
                                                        j->packed_a_tile
                                    : NULL;
      if (!sc_cpu_gemm_tile(g->trans_a, j->trans_b, m, n, g->k, g->alpha, A, g->lda, pa, B,
                            j->ldb, j->packed, n0, g->beta, C, g->ldc))
        tile_failed(j, true, m, n, g->k);
    } else {
      /* row-major; prepare() checked the leading dimensions, so the call
       * cannot refuse its arguments: a failure here is the library's own
       * (out of memory for its packing buffers) */
      dnnl_status_t st = dnnl_sgemm(g->trans_a ? 'T' : 'N', j->trans_b ? 'T' : 'N', m, n, g->k,
                                    g->alpha, A, g->lda, B, j->ldb, g->beta, C, g->ldc);
      if (st != dnnl_success) tile_failed(j, false, m, n, g->k);
    }
    if (!j->bias) continue;
    const float *bb = j->bias_per_batch ? j->bias + b * g->m * g->n : j->bias;
    for (int i = 0; i < m; i++) {
      float *row = C + (int64_t)i * g->ldc;
      const float *brow = g->bias_full ? bb + (m0 + i) * g->n + n0 : bb + n0;
      for (int jj = 0; jj < n; jj++) row[jj] += brow[jj];
    }
  }
}

/* The tiles of columns [j->col0, j->col0 + j->cols) on tp (one tile a
 * chunk: a tile is thousands of cycles of work, and larger chunks leave a
 * thread idle at the end, 66 tiles in chunks of 9 on 2 threads: up to 9
 * tiles' time), or on this thread when one chunk. */
static void run_tiles(gemm_job *j, sc_thread_pool *tp, bool one_chunk) {
  int64_t tiles = j->g->batch * j->tiles_m * j->cols;
  if (one_chunk)
    gemm_tiles(j, 0, tiles);
  else
    sc_thread_pool_run(tp, gemm_tiles, j, tiles, tiles);
}

void sc_host_gemm_scale(const sc_gemm *g, float *C, float f) {
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->m; i++) {
      float *row = C + b * g->stride_c + i * g->ldc;
      for (int64_t j = 0; j < g->n; j++) row[j] *= f;
    }
}

void sc_host_gemm_bgrad(const sc_gemm *g, sc_gemm_bgrad side, const void *x, bool bf16,
                        void *out) {
  bool on_b = side == SC_GEMM_BGRAD_B;
  bool tr = on_b ? g->trans_b : g->trans_a;
  int64_t ld = on_b ? g->ldb : g->lda, len = on_b ? g->n : g->m;
  for (int64_t j = 0; j < len; j++) {
    float sum = 0.0f;
    for (int64_t k = 0; k < g->k; k++) { /* op(B)[k, j] or op(A)[j, k] */
      int64_t at = on_b ? (tr ? j * ld + k : k * ld + j) : (tr ? k * ld + j : j * ld + k);
      sum += bf16 ? sc_bf16_to_f32(((const uint16_t *)x)[at]) : ((const float *)x)[at];
    }
    if (bf16) ((uint16_t *)out)[j] = sc_f32_to_bf16(sum);
    else ((float *)out)[j] = sum;
  }
}

bool sc_host_gemm_f32(const sc_gemm *g, const float *A, const float *B, const float *bias,
                      int64_t bias_numel, float *C, sc_thread_pool *tp, float *scratch,
                      const sc_gemm_packed_b *packed, sc_gemm_failure *failure) {
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0) return true;
  bool own = sc_gemm_engine_get() == SC_GEMM_ENGINE_OWN; /* packs B: no aliasing pitch */
  gemm_job j = {.g = g, .A = A, .B = B, .C = C, .bias = bias, .own = own,
               .trans_b = g->trans_b, .ldb = g->ldb, .stride_b = g->stride_b,
               .packed = own && packed && packed->data ? packed : NULL, .failure = failure};
  atomic_init(&j.failed, false);
  sc_gemm_tiling(g, &j.tile_m, &j.tile_n);
  j.tiles_m = (g->m + j.tile_m - 1) / j.tile_m;
  j.tiles_n = (g->n + j.tile_n - 1) / j.tile_n;
  j.cols = j.tiles_n;
  j.bias_per_batch = bias && g->bias_full && bias_numel != g->m * g->n;
  /* multiply-adds, roughly; small products stay on one thread */
  double flops = (double)g->batch * (double)g->m * (double)g->n * (double)(g->k + 1);
  int threads = tp ? sc_thread_pool_threads(tp) : 1;
  bool one_chunk = flops < 65536.0 || !tp || threads < 2;
  if (own && scratch && sc_gemm_packed_a_scratch_numel(g, j.tile_m, j.tile_n, &j.packed_a_tile) > 0) {
    j.packed_a = scratch;
    int64_t units = (g->stride_a ? g->batch : 1) * j.tiles_m;
    if (one_chunk)
      pack_a_tiles(&j, 0, units);
    else
      sc_thread_pool_run(tp, pack_a_tiles, &j, units, units);
  }
  /* a B whose pitch aliases: each panel of op(B)'s columns copied to
   * another pitch, then its tiles run (sc_gemm_repitch_panel: all of
   * them at once unless the copy would pass 16 MiB) */
  int64_t panel = !own && scratch ? sc_gemm_repitch_panel(g) : 0;
  if (panel <= 0) {
    run_tiles(&j, tp, one_chunk);
    return !atomic_load(&j.failed);
  }
  int64_t per = panel >= g->n ? j.tiles_n : panel / j.tile_n; /* column tiles a panel */
  for (j.col0 = 0; j.col0 < j.tiles_n; j.col0 += per) {
    int64_t n0 = j.col0 * j.tile_n, n = g->n - n0 < panel ? g->n - n0 : panel;
    sc_gemm rg;
    repitch_job r = repitch_of(g, B, n0, n, scratch, &rg);
    if (tp)
      sc_thread_pool_run(tp, repitch_rows, &r, r.units, (int64_t)threads);
    else
      repitch_rows(&r, 0, r.units);
    j.B = scratch;
    j.trans_b = false;
    j.ldb = rg.ldb;
    j.stride_b = rg.stride_b;
    j.n_base = n0;
    j.cols = j.tiles_n - j.col0 < per ? j.tiles_n - j.col0 : per;
    run_tiles(&j, tp, one_chunk);
  }
  return !atomic_load(&j.failed);
}

/* ---- bf16 products: widened to f32, rounded back once ---- */

typedef struct widen_job {
  const uint16_t *x;
  float *out;
} widen_job;

enum { WIDEN_CHUNK = 1 << 16 };

static void widen_chunks(void *ud, int64_t begin, int64_t end) {
  const widen_job *w = ud;
  for (int64_t i = begin * WIDEN_CHUNK; i < end * WIDEN_CHUNK; i++)
    w->out[i] = sc_bf16_to_f32(w->x[i]);
}

/* out[0, n) = x[0, n) in f32, on tp (NULL: this thread) */
static void widen(const uint16_t *x, int64_t n, float *out, sc_thread_pool *tp) {
  int64_t whole = n / WIDEN_CHUNK;
  widen_job w = {x, out};
  if (whole > 1 && tp)
    sc_thread_pool_run(tp, widen_chunks, &w, whole, (int64_t)sc_thread_pool_threads(tp));
  else
    widen_chunks(&w, 0, whole);
  for (int64_t i = whole * WIDEN_CHUNK; i < n; i++) out[i] = sc_bf16_to_f32(x[i]);
}

typedef struct narrow_job {
  const sc_gemm *g;
  const float *c32;
  uint16_t *C;
} narrow_job;

/* rows [begin, end) of every batch entry's m rows (row r: entry r / m) */
static void narrow_rows(void *ud, int64_t begin, int64_t end) {
  const narrow_job *j = ud;
  const sc_gemm *g = j->g;
  for (int64_t r = begin; r < end; r++) {
    int64_t at = r / g->m * g->stride_c + r % g->m * g->ldc;
    for (int64_t x = 0; x < g->n; x++) j->C[at + x] = sc_f32_to_bf16(j->c32[at + x]);
  }
}

bool sc_host_gemm_bf16(const sc_gemm *g, const uint16_t *A, const uint16_t *B,
                       const uint16_t *bias, int64_t bias_numel, uint16_t *C,
                       sc_thread_pool *tp, float *scratch, sc_gemm_failure *failure) {
  int64_t span[3];
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0 || !sc_gemm_spans(g, span)) return true;
  /* the layout sc_gemm_bf16_scratch_numel sizes: each part rounded up to 16 floats */
  float *a32 = scratch, *b32 = a32 + (span[0] + 15) / 16 * 16;
  float *c32 = b32 + (span[1] + 15) / 16 * 16;
  float *bias32 = c32 + (span[2] + 15) / 16 * 16, *rest = bias32 + (bias_numel + 15) / 16 * 16;
  widen(A, span[0], a32, tp);
  widen(B, span[1], b32, tp);
  if (g->beta != 0.0f) widen(C, span[2], c32, tp);
  if (bias) widen(bias, bias_numel, bias32, tp);
  bool ok = sc_host_gemm_f32(g, a32, b32, bias ? bias32 : NULL, bias_numel, c32, tp, rest, NULL,
                             failure);
  narrow_job j = {g, c32, C};
  int64_t rows = g->batch * g->m;
  if (tp && (double)rows * (double)g->n > 65536.0)
    sc_thread_pool_run(tp, narrow_rows, &j, rows, (int64_t)sc_thread_pool_threads(tp));
  else
    narrow_rows(&j, 0, rows);
  return ok;
}

/* The index of the program's step whose B layout (packed, pitched) s
 * reads, or -1. s may be a copy of a step, made by a caller that runs
 * steps one by one (with another epilogue): then it is not in the
 * program's array, and it reads the layout of a step with the same
 * constant B read the same way, so that it computes the same bits. */
static int64_t step_index(const cpu_ctx *c, const sc_step *s) {
  uintptr_t at = (uintptr_t)s, first = (uintptr_t)c->p->steps;
  if (at >= first && at < first + (uintptr_t)c->p->n_steps * sizeof *s) return s - c->p->steps;
  if (!packs_b(c, s)) return -1;
  for (int32_t i = 0; i < c->p->n_steps; i++)
    if ((c->packed[i].data || c->pitched[i]) && same_b(c, &c->p->steps[i].gemm, &s->gemm))
      return i;
  return -1;
}

/* Step s's packed B, or NULL */
static const sc_gemm_packed_b *packed_of(const cpu_ctx *c, const sc_step *s) {
  int64_t i = step_index(c, s);
  return i < 0 ? NULL : &c->packed[i];
}

/* Step s's op(B) laid out at bind (pitch_weights), or NULL (as packed_of) */
static const float *pitched_of(const cpu_ctx *c, const sc_step *s) {
  int64_t i = step_index(c, s);
  return i < 0 ? NULL : c->pitched[i];
}

static void cpu_run_gemm(void *ctx, const sc_step *s) {
  cpu_ctx *c = ctx;
  const sc_gemm *g = &s->gemm;
  bool epi = s->kernel >= 0 && s->kernel < c->p->n_kernels && !c->skip[s->kernel] &&
             c->points[s->kernel] > 0;
  bool epi_ran = false;
  /* after a failed GEMM or convolution the run's results are lost: the
   * rest of its products are skipped (the kernels run on, over buffers
   * whose bounds are fixed) */
  sc_gemm_failure *fail =
      c->run_failed.bytes || sc_cpu_convs_failed(c->convs) ? NULL : &c->run_failed;
  if (!fail) {
  } else if (is_bf16(c->p, g)) {
    sc_host_gemm_bf16(g, c->ptrs[g->a], c->ptrs[g->b], g->bias >= 0 ? c->ptrs[g->bias] : NULL,
                      g->bias >= 0 ? buf_numel(c->p, g->bias) : 0, c->ptrs[g->c], c->pool,
                      c->repitch, fail);
  } else if (!sc_cpu_convs_run(c->convs, s, c->pool, epi ? c->fns[s->kernel] : NULL,
                               epi ? c->args[s->kernel] : NULL, &epi_ran)) {
    const float *B = c->ptrs[g->b];
    const float *pitched = pitched_of(c, s);
    sc_gemm rg;
    if (pitched) { /* op(B) laid out at bind (pitch_weights) */
      repitch_of(g, B, 0, g->n, NULL, &rg);
      g = &rg;
      B = pitched;
    }
    sc_host_gemm_f32(g, c->ptrs[g->a], B, g->bias >= 0 ? c->ptrs[g->bias] : NULL,
                     g->bias >= 0 ? buf_numel(c->p, g->bias) : 0, c->ptrs[g->c], c->pool,
                     c->repitch, packed_of(c, s), fail);
    if (g->scaled) /* the factor rounded once, as cuBLASLt forms it */
      sc_host_gemm_scale(g, c->ptrs[g->c],
                         *(const float *)c->ptrs[g->a8_scale] * *(const float *)c->ptrs[g->b8_scale]);
  }
  /* the bias gradient (s->gemm: g may point at the repitched copy, out of scope here) */
  if (s->gemm.bgrad != SC_GEMM_BGRAD_NONE) run_kernel_id(c, s->gemm.bgrad_kernel);
  if (s->kernel >= 0 && !epi_ran) run_kernel_id(c, s->kernel);
}

/* An ATTENTION or ATTENTION_GRAD step (cpu_attention.h) over the bound
 * buffers; a step that finds no scratch memory fails the run (cpu_end_run). */
static void cpu_run_attention(void *ctx, const sc_step *s) {
  cpu_ctx *c = ctx;
  const sc_attention_step *a = &s->attn;
  const sc_program *p = c->p;
  bool grad = s->kind == SC_STEP_ATTENTION_GRAD;
  sc_cpu_attention_io io = {
      .a = a,
      .t = p->buffers[a->q].dtype,
      .mask_t = a->mask >= 0 ? p->buffers[a->mask].dtype : SC_DTYPE_F32,
      .q = c->ptrs[a->q],
      .k = c->ptrs[a->k],
      .v = c->ptrs[a->v],
      .mask = a->mask >= 0 ? c->ptrs[a->mask] : NULL,
      .o = c->ptrs[a->o],
      .lse = c->ptrs[a->lse],
      .d_o = grad ? c->ptrs[a->d_o] : NULL,
      .dq = grad ? c->ptrs[a->dq] : NULL,
      .dk = grad ? c->ptrs[a->dk] : NULL,
      .dv = grad ? c->ptrs[a->dv] : NULL};
  bool ok = grad ? sc_cpu_attention_backward(c->pool, &io) : sc_cpu_attention_forward(c->pool, &io);
  if (!ok && !c->attn_failed) c->attn_failed = 1 + (int32_t)(s - p->steps);
}

/* The run's first GEMM that found no memory, or else its failed direct
 * convolution or max-pool, as its error (both cleared for the next run).
 * A GEMM failure recorded with a convolution's came first: after either,
 * the products are skipped, but a max-pool step still looks at its own. */
static sc_status cpu_end_run(void *ctx, sc_diag *diag) {
  cpu_ctx *c = ctx;
  sc_gemm_failure f = c->run_failed;
  if (c->attn_failed) {
    int32_t i = c->attn_failed - 1;
    c->attn_failed = 0;
    c->run_failed = (sc_gemm_failure){0};
    sc_cpu_convs_end_run(c->convs, &(sc_diag){0});
    return sc_diag_set(diag, SC_ERR_NOMEM, c->p->steps[i].origin, NULL,
                       "out of memory: the scratch blocks of attention step %d", (int)i);
  }
  if (!f.bytes) return sc_cpu_convs_end_run(c->convs, diag);
  c->run_failed = (sc_gemm_failure){0};
  sc_cpu_convs_end_run(c->convs, &(sc_diag){0});
  return sc_diag_nomem(diag, f.bytes, "the %s packing buffers of a %d x %d x %lld GEMM tile",
                       f.own ? "GEMM kernel's" : "oneDNN sgemm's", f.m, f.n, (long long)f.k);
}

static const char *cpu_step_note(void *ctx, int32_t i) {
  cpu_ctx *c = ctx;
  if (!c->p || i < 0 || i >= c->p->n_steps) return NULL;
  const sc_step *s = &c->p->steps[i];
  const char *note = sc_cpu_convs_note(c->convs, s);
  if (note) return note;
  if (s->kind == SC_STEP_KERNEL && s->kernel >= 0 && s->kernel < c->p->n_kernels &&
      c->skip[s->kernel])
    return "skipped: its convolution runs directly";
  return NULL;
}

static int cpu_threads(void *ctx) { return ((cpu_ctx *)ctx)->threads; }
static double cpu_compile_seconds(void *ctx) { return ((cpu_ctx *)ctx)->compile_s; }

const sc_device_iface sc_device_cpu = {
    .name = "cpu",
    .host_arena = true,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .prepare = cpu_prepare,
    .step_note = cpu_step_note,
    .supports_step = cpu_supports_step,
    .alloc_arena = cpu_alloc_arena,
    .free_arena = cpu_free_arena,
    .bind = cpu_bind,
    .buffer_ptr = cpu_buffer_ptr,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .zero = cpu_zero,
    .run_kernel = cpu_run_kernel,
    .run_gemm = cpu_run_gemm,
    .run_attention = cpu_run_attention,
    .end_run = cpu_end_run,
    .threads = cpu_threads,
    .compile_seconds = cpu_compile_seconds,
    .memory = cpu_memory,
};

static const sc_device_iface *const DEVICES[] = {&sc_device_cpu, &sc_device_cuda};

const sc_device_iface *sc_device_find(const char *name) {
  for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
    if (strcmp(DEVICES[i]->name, name) == 0) return DEVICES[i];
  return NULL;
}

const char *sc_device_names(void) { return "cpu, cuda"; }
