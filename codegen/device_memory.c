/* device_memory.c — the sizes of what a device allocates for a program
 * beside its arena (device_memory.h), and the plan of every line.
 *
 * The CPU device (runtime/cpu_device.c, runtime/cpu_gemm.c) sizes its
 * buffers with these same functions: the plan of a line is the sum (or,
 * for the one GEMM scratch, the largest) of what the device allocates for
 * it, step by step, in the same order and with the same sharing of one
 * copy between steps that read the same constant B. The CUDA device
 * (runtime/cuda_device.c, runtime/cuda_gemm.c) sizes its weights
 * allocation and decides where cuBLASLt's workspace lives with the
 * sc_cuda_* functions here. */
#include "codegen/device_memory.h"

#include "passes/plan/cluster.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SC_X86 1
#else
#define SC_X86 0
#endif

/* ---- the engine ---- */

bool sc_cpu_gemm_own_supported(void) {
#if SC_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static sc_gemm_engine host_engine;

static void host_init(void) {
  bool own = sc_cpu_gemm_own_supported();
  const char *env = getenv("SHARDC_GEMM");
  if (env && strcmp(env, "onednn") == 0)
    host_engine = SC_GEMM_ENGINE_ONEDNN;
  else if (env && strcmp(env, "own") == 0)
    host_engine = own ? SC_GEMM_ENGINE_OWN : SC_GEMM_ENGINE_ONEDNN;
  else {
#if SC_X86
    own = own && !__builtin_cpu_supports("avx512f");
#endif
    host_engine = own ? SC_GEMM_ENGINE_OWN : SC_GEMM_ENGINE_ONEDNN;
  }
}

sc_gemm_engine sc_gemm_engine_host(void) {
  pthread_once(&host_once, host_init);
  return host_engine;
}

const char *sc_gemm_engine_name(sc_gemm_engine e) {
  return e == SC_GEMM_ENGINE_OWN ? "shardc avx2" : "oneDNN";
}

/* ---- the own kernel's buffers ---- */

enum { MC_PANELS = (SC_GEMM_MC + SC_GEMM_MR - 1) / SC_GEMM_MR };

int64_t sc_gemm_packed_b_numel(int64_t k, int64_t n) {
  int64_t n_pad = (n + SC_GEMM_NR - 1) / SC_GEMM_NR * SC_GEMM_NR, numel;
  return k > 0 && n > 0 && sc_mul_i64(k, n_pad, &numel) ? numel : -1;
}

int64_t sc_gemm_packed_a_numel(int64_t m, int64_t k) {
  /* whole blocks of MC rows take MC_PANELS micro-panels, the last its own */
  int64_t last = (m % SC_GEMM_MC + SC_GEMM_MR - 1) / SC_GEMM_MR * SC_GEMM_MR;
  int64_t rows = m / SC_GEMM_MC * (MC_PANELS * SC_GEMM_MR) + last, numel;
  return m > 0 && k > 0 && sc_mul_i64(rows, k, &numel) ? numel : -1;
}

int64_t sc_cpu_gemm_thread_buffer_bytes(void) {
  return (int64_t)(MC_PANELS * SC_GEMM_MR * SC_GEMM_KC + SC_GEMM_KC * SC_GEMM_NC) *
         (int64_t)sizeof(float);
}

/* ---- tiles and layouts (docs/runtime.md#gemm-tiles) ---- */

enum { GEMM_TILE_N_MAX = 768, GEMM_TILE_N_MIN = 384, GEMM_TILE_M_BIG = 128,
       GEMM_TILE_M_SMALL = 64, GEMM_TILES_WANTED = 4 };

void sc_gemm_tiling(const sc_gemm *g, int64_t *tile_m, int64_t *tile_n) {
  int64_t rows = g->batch * ((g->m + GEMM_TILE_M_BIG - 1) / GEMM_TILE_M_BIG);
  int64_t cols = (g->n + GEMM_TILE_N_MAX - 1) / GEMM_TILE_N_MAX;
  while ((rows * cols) % GEMM_TILES_WANTED != 0 && g->n / (cols + 1) >= GEMM_TILE_N_MIN) cols++;
  int64_t tn = (g->n + cols - 1) / cols;
  tn = (tn + 15) / 16 * 16; /* column tiles start on a 64-byte boundary */
  if (tn > g->n) tn = g->n;
  *tile_m = rows * ((g->n + tn - 1) / tn) < GEMM_TILES_WANTED ? GEMM_TILE_M_SMALL
                                                               : GEMM_TILE_M_BIG;
  *tile_n = tn;
}

enum { GEMM_ALIAS_PITCH = 1024, GEMM_PITCH_PAD = 16, GEMM_REPITCH_MAX = 1 << 26,
       GEMM_REPITCH_PANEL_MAX = 1 << 22, GEMM_PACK_A_MAX = 1 << 25 };

int64_t sc_gemm_repitched_ld(int64_t cols) {
  int64_t ld = (cols + GEMM_PITCH_PAD - 1) / GEMM_PITCH_PAD * GEMM_PITCH_PAD;
  return ld % GEMM_ALIAS_PITCH == 0 ? ld + GEMM_PITCH_PAD : ld;
}

int64_t sc_gemm_relaid_numel(const sc_gemm *g) {
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0 || g->k <= 0) return 0;
  int64_t entries = g->stride_b ? g->batch : 1, n;
  if (g->stride_b && g->stride_b < (g->trans_b ? g->n : g->k) * g->ldb)
    return 0; /* entries overlap: as it is */
  if (!sc_mul_i64(entries, g->k, &n) || !sc_mul_i64(n, sc_gemm_repitched_ld(g->n), &n) ||
      n > GEMM_REPITCH_MAX)
    return 0;
  return n;
}

/* Floats of the re-pitched copy of op(B)'s columns [0, cols) for every
 * batch entry that has its own, or -1 on overflow. */
static int64_t panel_numel(const sc_gemm *g, int64_t cols) {
  int64_t n;
  return sc_mul_i64(g->stride_b ? g->batch : 1, g->k, &n) &&
                 sc_mul_i64(n, sc_gemm_repitched_ld(cols), &n)
             ? n
             : -1;
}

int64_t sc_gemm_repitch_panel(const sc_gemm *g) {
  if (g->ldb % GEMM_ALIAS_PITCH != 0 || sc_gemm_relaid_numel(g) <= 0) return 0;
  int64_t tile_m, tile_n, whole = panel_numel(g, g->n);
  if (whole >= 0 && whole <= GEMM_REPITCH_PANEL_MAX) return g->n;
  sc_gemm_tiling(g, &tile_m, &tile_n);
  int64_t cols = 0, numel;
  while (cols + tile_n < g->n && (numel = panel_numel(g, cols + tile_n)) >= 0 &&
         numel <= GEMM_REPITCH_PANEL_MAX)
    cols += tile_n;
  return cols;
}

int64_t sc_gemm_repitch_numel(const sc_gemm *g) {
  int64_t cols = sc_gemm_repitch_panel(g);
  return cols > 0 ? panel_numel(g, cols) : 0;
}

int64_t sc_gemm_packed_a_scratch_numel(const sc_gemm *g, int64_t tile_m, int64_t tile_n,
                                       int64_t *per_tile) {
  int64_t tiles_m = (g->m + tile_m - 1) / tile_m, n;
  *per_tile = sc_gemm_packed_a_numel(tile_m, g->k);
  if ((g->n + tile_n - 1) / tile_n < 2 || *per_tile <= 0 ||
      !sc_mul_i64((g->stride_a ? g->batch : 1) * tiles_m, *per_tile, &n) || n > GEMM_PACK_A_MAX)
    return 0;
  return n;
}

int64_t sc_gemm_scratch_numel(const sc_gemm *g, sc_gemm_engine e) {
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0 || g->k <= 0) return 0;
  if (e != SC_GEMM_ENGINE_OWN) return sc_gemm_repitch_numel(g);
  int64_t tile_m, tile_n, per_tile;
  sc_gemm_tiling(g, &tile_m, &tile_n);
  return sc_gemm_packed_a_scratch_numel(g, tile_m, tile_n, &per_tile);
}

/* Elements a strided batched matrix operand spans: the last element of the
 * last batch entry + 1. false on overflow. */
static bool operand_span(int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                         int64_t ld, int64_t *span) {
  if (rows == 0 || cols == 0 || batch == 0) {
    *span = 0;
    return true;
  }
  int64_t a, b, s;
  if (!sc_mul_i64(batch - 1, stride, &a) || !sc_mul_i64(rows - 1, ld, &b) ||
      !sc_add_i64(a, b, &s) || !sc_add_i64(s, cols, &s))
    return false;
  *span = s;
  return true;
}

bool sc_gemm_spans(const sc_gemm *g, int64_t span[3]) {
  int64_t ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k;
  int64_t br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
  return operand_span(g->batch, g->stride_a, ar, ac, g->lda, &span[0]) &&
         operand_span(g->batch, g->stride_b, br, bc, g->ldb, &span[1]) &&
         operand_span(g->batch, g->stride_c, g->m, g->n, g->ldc, &span[2]);
}

static int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }

int64_t sc_gemm_bf16_scratch_numel(const sc_gemm *g, int64_t bias_numel, sc_gemm_engine e) {
  int64_t span[3];
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0 || !sc_gemm_spans(g, span)) return 0;
  return align16(span[0]) + align16(span[1]) + align16(span[2]) + align16(bias_numel) +
         sc_gemm_scratch_numel(g, e);
}

/* ---- constant B laid out at bind ---- */

static int64_t buffer_numel(const sc_program *p, int32_t b) {
  unsigned es = b >= 0 && b < p->n_buffers ? sc_dtype_size(p->buffers[b].dtype) : 0;
  return es ? p->buffers[b].bytes / es : 0;
}


static bool is_f32_gemm(const sc_program *p, const sc_gemm *g) {
  return g->c >= 0 && g->c < p->n_buffers && p->buffers[g->c].dtype == SC_DTYPE_F32;
}

bool sc_gemm_b_relaid(const sc_program *p, const sc_step *s) {
  const sc_gemm *g = &s->gemm;
  if (s->kind != SC_STEP_GEMM || !is_f32_gemm(p, g) || g->m <= 0 || g->n <= 0 || g->k <= 0 ||
      g->batch <= 0 || (g->batch > 1 && g->stride_b != 0) || g->b < 0 || g->b >= p->n_buffers)
    return false;
  int32_t r = sc_program_root(p, g->b);
  return r >= 0 && p->buffers[r].kind == SC_BUF_CONST;
}

bool sc_gemm_same_b(const sc_program *p, const sc_gemm *h, const sc_gemm *g) {
  return sc_program_root(p, h->b) == sc_program_root(p, g->b) && h->trans_b == g->trans_b &&
         h->k == g->k && h->n == g->n && h->ldb == g->ldb;
}

int64_t sc_gemm_weight_copy_numel(const sc_program *p, const sc_step *s, sc_gemm_engine e) {
  if (!sc_gemm_b_relaid(p, s)) return 0;
  const sc_gemm *g = &s->gemm;
  if (e == SC_GEMM_ENGINE_OWN) {
    int64_t n = sc_gemm_packed_b_numel(g->k, g->n);
    return n > 0 ? n : 0;
  }
  return g->trans_b || g->ldb % GEMM_ALIAS_PITCH == 0 ? sc_gemm_relaid_numel(g) : 0;
}

int64_t sc_gemm_step_scratch_numel(const sc_program *p, const sc_step *s, sc_gemm_engine e) {
  const sc_gemm *g = &s->gemm;
  if (s->kind != SC_STEP_GEMM || g->c < 0 || g->c >= p->n_buffers) return 0;
  if (p->buffers[g->c].dtype == SC_DTYPE_BF16)
    return sc_gemm_bf16_scratch_numel(g, g->bias >= 0 ? buffer_numel(p, g->bias) : 0, e);
  /* with oneDNN, a constant B is laid out at bind, not into the scratch */
  if (e != SC_GEMM_ENGINE_OWN && sc_gemm_b_relaid(p, s)) return 0;
  return sc_gemm_scratch_numel(g, e);
}

/* ---- the plan ---- */

static const char *const LINE_NAMES[SC_MEM_LINE_COUNT] = {
    "arena", "packed weights", "pitched weights", "gemm scratch", "gemm threads",
    "conv weights", "conv scratch", "conv shadows", "conv threads",
    "cublaslt workspace", "weights padding", "cuda context", "nccl buffers"};
static const char *const LINE_WHAT[SC_MEM_LINE_COUNT] = {
    "tensors at offsets of the memory plan",
    "constant B packed for the own GEMM kernel, at bind",
    "constant B re-pitched or untransposed for oneDNN, at bind",
    "one scratch for the largest product (packed A, re-pitched B, bf16 widening)",
    "the own GEMM kernel's packing buffers, one per pool thread",
    "direct convolutions' weights in oneDNN's blocked layout, at bind",
    "the blocked input and output of the direct convolution running",
    "NCHW shadows of buffers held in oneDNN's blocked layout",
    "oneDNN's scratchpads of the convolutions and max-pools, one per pool thread",
    "cuBLASLt's workspace, allocated by the GEMM engine (not in the arena)",
    "each weight aligned to 256 bytes in the CUDA device's one allocation",
    "the driver's memory per process (the cluster's gpu.context_bytes)",
    "NCCL's buffers: per communicator, channels x ring peers x its protocols"};
_Static_assert(sizeof LINE_NAMES / sizeof *LINE_NAMES == SC_MEM_LINE_COUNT, "line names");
_Static_assert(sizeof LINE_WHAT / sizeof *LINE_WHAT == SC_MEM_LINE_COUNT, "line texts");

bool sc_mem_line_of_device(sc_mem_line l, const char *device) {
  if (l == SC_MEM_ARENA) return true;
  bool cuda = device && strcmp(device, "cuda") == 0;
  return cuda == (l >= SC_MEM_CUDA_WORKSPACE && l < SC_MEM_LINE_COUNT);
}

const char *sc_mem_line_name(sc_mem_line l) {
  return l >= 0 && l < SC_MEM_LINE_COUNT ? LINE_NAMES[l] : "?";
}

const char *sc_mem_line_what(sc_mem_line l) {
  return l >= 0 && l < SC_MEM_LINE_COUNT ? LINE_WHAT[l] : "?";
}

void sc_device_target_host(sc_device_target *t) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  *t = (sc_device_target){.device = "cpu", .engine = sc_gemm_engine_host(),
                          .threads = n >= 1 && n <= 4096 ? (int)n : 1, .direct_convs = true};
}

void sc_device_target_cuda(sc_device_target *t, int64_t context_bytes, int64_t channels_intra,
                           int64_t channels_inter) {
  *t = (sc_device_target){.device = "cuda", .engine = SC_GEMM_ENGINE_AUTO, .threads = 1,
                          .context_bytes = context_bytes > 0 ? context_bytes : 0,
                          .nccl_channels_intra = channels_intra > 0 ? channels_intra
                                                                    : SC_NCCL_CHANNELS_DEFAULT,
                          .nccl_channels_inter = channels_inter > 0 ? channels_inter
                                                                    : SC_NCCL_CHANNELS_DEFAULT};
}

bool sc_device_target_of_cluster(const sc_cluster *c, sc_device_target *t) {
  if (!sc_cluster_is_gpu(c)) return false;
  sc_device_target_cuda(t, c->context_bytes, c->intra_node.nccl_channels,
                        c->inter_node.nccl_channels);
  return true;
}

/* ---- the CUDA device's lines ---- */

int64_t sc_cuda_const_bytes(const sc_program *p) {
  int64_t total = 0;
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *rb = &p->buffers[b];
    if (rb->kind != SC_BUF_CONST) continue;
    if (total > INT64_MAX - SC_CUDA_CONST_ALIGN) return -1;
    total = (total + SC_CUDA_CONST_ALIGN - 1) / SC_CUDA_CONST_ALIGN * SC_CUDA_CONST_ALIGN;
    if (!sc_add_i64(total, rb->bytes, &total)) return -1;
  }
  return total;
}

bool sc_cuda_workspace_in_arena(const sc_program *p) {
  return p->workspace_bytes >= ((int64_t)1 << 20) && p->workspace_offset >= 0 &&
         p->workspace_offset <= p->arena_bytes - p->workspace_bytes;
}

int64_t sc_cuda_workspace_outside_bytes(const sc_program *p, bool im2col_convs) {
  if (sc_cuda_workspace_in_arena(p)) return 0;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_GEMM && (im2col_convs || !p->steps[i].gemm.conv.on))
      return SC_GEMM_WORKSPACE_BYTES;
  return 0;
}

int64_t sc_nccl_buffer_bytes(int64_t ranks, int64_t channels) {
  if (ranks <= 1) return 0;
  int64_t per = SC_NCCL_SIMPLE_BYTES + SC_NCCL_LL_BYTES + SC_NCCL_LL128_BYTES, n;
  if (channels < 1 || !sc_mul_i64(channels, SC_NCCL_RING_PEERS, &n) || !sc_mul_i64(n, per, &n) ||
      !sc_add_i64(n, SC_NCCL_SCRATCH_BYTES, &n))
    return -1;
  return n;
}

/* The CUDA target's lines (the arena set by the caller). */
static sc_status cuda_plan(const sc_program *p, const sc_device_target *t, sc_device_memory *out,
                           sc_diag *diag) {
  int64_t consts = sc_cuda_const_bytes(p), raw = 0;
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == SC_BUF_CONST) raw += p->buffers[b].bytes; /* <= consts */
  if (consts < 0)
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "the program's weights overflow");
  out->bytes[SC_MEM_CUDA_PADDING] = consts - raw;
  out->bytes[SC_MEM_CUDA_WORKSPACE] = sc_cuda_workspace_outside_bytes(p, t->im2col_convs);
  out->bytes[SC_MEM_CUDA_CONTEXT] = t->context_bytes > 0 ? t->context_bytes : 0;
  /* one communicator per set of mesh axes the COMM steps use (as the
   * session splits them, runtime/session.c) */
  int64_t nccl = 0;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_COMM) continue;
    bool first = true;
    for (int32_t j = 0; j < i && first; j++)
      first = !(p->steps[j].kind == SC_STEP_COMM && p->steps[j].comm.axes == s->comm.axes);
    if (!first) continue;
    bool intra = p->mesh.n_axes == 0 || sc_mesh_is_intra_node(&p->mesh, s->comm.axes);
    int64_t ch = intra ? t->nccl_channels_intra : t->nccl_channels_inter;
    int64_t b = sc_nccl_buffer_bytes(s->comm.group_size, ch > 0 ? ch : SC_NCCL_CHANNELS_DEFAULT);
    if (b < 0 || !sc_add_i64(nccl, b, &nccl))
      return sc_diag_set(diag, SC_ERR_LIMIT, s->origin, NULL, "NCCL's buffers overflow");
  }
  out->bytes[SC_MEM_NCCL_BUFFERS] = nccl;
  return SC_OK;
}

static sc_status too_large(sc_diag *diag, const sc_step *s) {
  return sc_diag_set(diag, SC_ERR_LIMIT, s->origin, NULL,
                     "the device memory of a matrix product overflows");
}

sc_status sc_device_memory_plan(const sc_program *p, const sc_device_target *t,
                                sc_device_memory *out, sc_diag *diag) {
  memset(out, 0, sizeof *out);
  out->bytes[SC_MEM_ARENA] = p->arena_bytes;
  if (t->device && strcmp(t->device, "cuda") == 0) return cuda_plan(p, t, out, diag);
  if (!t->device || strcmp(t->device, "cpu") != 0) return SC_OK;
  sc_gemm_engine e = t->engine == SC_GEMM_ENGINE_AUTO ? sc_gemm_engine_host() : t->engine;
  int64_t scratch = 0, copies = 0;
  bool own_runs = false; /* a product runs on the own kernel */
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_GEMM) continue;
    const sc_gemm *g = &s->gemm;
    bool bf16 = g->c >= 0 && g->c < p->n_buffers && p->buffers[g->c].dtype == SC_DTYPE_BF16;
    if (g->conv.on && t->direct_convs && !bf16) continue; /* oneDNN's convolution */
    own_runs |= e == SC_GEMM_ENGINE_OWN;
    int64_t n = sc_gemm_step_scratch_numel(p, s, e), w = sc_gemm_weight_copy_numel(p, s, e);
    if (n > scratch) scratch = n;
    if (w <= 0) continue;
    bool shared = false;
    for (int32_t j = 0; j < i && !shared; j++)
      shared = sc_gemm_weight_copy_numel(p, &p->steps[j], e) > 0 &&
               sc_gemm_same_b(p, &p->steps[j].gemm, g);
    if (!shared && (w > INT64_MAX / 4 || !sc_add_i64(copies, w * 4, &copies)))
      return too_large(diag, s);
  }
  out->bytes[e == SC_GEMM_ENGINE_OWN ? SC_MEM_PACKED_WEIGHTS : SC_MEM_PITCHED_WEIGHTS] = copies;
  if (scratch > INT64_MAX / 4) return too_large(diag, &p->steps[0]);
  out->bytes[SC_MEM_GEMM_SCRATCH] = scratch * 4;
  int threads = t->threads > 0 ? t->threads : 1;
  if (own_runs) out->bytes[SC_MEM_GEMM_THREADS] = (int64_t)threads * sc_cpu_gemm_thread_buffer_bytes();
  if (t->direct_convs && t->conv_memory) return t->conv_memory(p, threads, out, diag);
  return SC_OK;
}

int64_t sc_device_memory_total(const sc_device_memory *m) {
  int64_t s = 0;
  for (int l = 0; l < SC_MEM_LINE_COUNT; l++)
    if (!sc_add_i64(s, m->bytes[l], &s)) return INT64_MAX;
  return s;
}

int64_t sc_device_memory_outside(const sc_device_memory *m) {
  int64_t t = sc_device_memory_total(m);
  return t == INT64_MAX ? t : t - m->bytes[SC_MEM_ARENA];
}
