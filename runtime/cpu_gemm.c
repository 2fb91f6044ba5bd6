/* cpu_gemm.c — shardc's own f32 GEMM tile kernel (cpu_gemm.h;
 * docs/runtime.md#the-gemm-engine).
 *
 * Loop nest of one tile (m x n, all of k), after BLIS:
 *   for each block of KC = 256 columns of op(A) (rows of op(B)):
 *     pack op(A)'s rows [i0, i0 + MC) x this block into micro-panels of
 *       MR = 6 rows: apack[panel][p][r] (rows past m are zeros);
 *     for each panel of NR = 16 columns of op(B):
 *       pack it: bpack[p][j] (columns past n are zeros);  16 KiB, in L1
 *       for each micro-panel of A: the 6 x 16 kernel over the KC block,
 *         C = alpha * acc + beta * C on the first block, C += alpha * acc
 *         on the others.
 * The kernel holds the 6 x 16 block of C in 12 ymm accumulators and, per
 * step of k, loads two vectors of B and broadcasts six elements of A into
 * 12 FMAs. On the AVX2 EPYC these machines have (2 cores, FMA peak ~129
 * GFLOP/s per core measured), it runs at ~105 GFLOP/s per core with both
 * operands in L1, and a 126 x 768 x 3072 tile, packing included, at ~100
 * where oneDNN's single-threaded sgemm runs the same tile at ~95.
 *
 * Each thread packs into its own buffers (apack: MC rounded up to MR rows
 * x KC; bpack: KC x NC; sc_cpu_gemm_thread_buffer_bytes), allocated on its
 * first call (or reserved at bind, sc_cpu_gemm_thread_reserve) and freed
 * when the thread ends. The blocking and the sizes of packed forms are in
 * codegen/device_memory.h, where the memory plan sizes them too. */
#include "cpu_gemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base.h"
#if defined(__x86_64__)
#include <immintrin.h>
#define SC_X86 1
#define AVX2 __attribute__((target("avx2,fma")))
#else
#define SC_X86 0
#define AVX2
#endif

enum { MR = SC_GEMM_MR, NR = SC_GEMM_NR, KC = SC_GEMM_KC, MC = SC_GEMM_MC,
       MC_PANELS = (MC + MR - 1) / MR, NC = SC_GEMM_NC };

/* ---- engine choice ---- */

static atomic_int engine_set; /* sc_gemm_engine; AUTO: not set */

sc_gemm_engine sc_gemm_engine_get(void) {
  sc_gemm_engine e = (sc_gemm_engine)atomic_load(&engine_set);
  if (e == SC_GEMM_ENGINE_OWN && !sc_cpu_gemm_own_supported()) e = SC_GEMM_ENGINE_ONEDNN;
  return e != SC_GEMM_ENGINE_AUTO ? e : sc_gemm_engine_host();
}

void sc_gemm_engine_set(sc_gemm_engine e) { atomic_store(&engine_set, (int)e); }

#if SC_X86

/* ---- per-thread packing buffers ---- */

enum { APACK_FLOATS = MC_PANELS * MR * KC, BPACK_FLOATS = KC * NC };

/* Each thread's buffer is its value of pack_key, freed by the key's
 * destructor when the thread ends (pool threads come and go with their
 * sessions; a list kept for the process would grow with every one). */
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static pthread_key_t pack_key;
static bool pack_key_ok;

static atomic_llong held; /* buffers allocated and not yet freed */

static void pack_free(void *p) {
  free(p);
  atomic_fetch_sub(&held, 1);
}

static void pack_key_init(void) { pack_key_ok = pthread_key_create(&pack_key, pack_free) == 0; }

static float *thread_pack(void) {
  pthread_once(&pack_once, pack_key_init);
  if (!pack_key_ok) return NULL;
  float *p = pthread_getspecific(pack_key);
  if (p) return p;
  /* the size the memory plan counts (codegen/device_memory.c) */
  int64_t bytes = sc_cpu_gemm_thread_buffer_bytes();
  SC_ASSERT(bytes == (int64_t)((APACK_FLOATS + BPACK_FLOATS) * sizeof(float)));
  if (posix_memalign((void **)&p, 64, (size_t)bytes)) return NULL;
  if (pthread_setspecific(pack_key, p) != 0) {
    free(p);
    return NULL;
  }
  atomic_fetch_add(&held, 1);
  return p;
}

bool sc_cpu_gemm_thread_reserve(void) { return thread_pack() != NULL; }

int64_t sc_cpu_gemm_thread_buffers_held(void) {
  return (int64_t)atomic_load(&held) * sc_cpu_gemm_thread_buffer_bytes();
}

/* ---- packing ---- */

/* op(A)[i0 .. i0 + mb) x [k0, k0 + kc) into micro-panels of MR rows */
static void pack_a(bool trans, const float *A, int64_t lda, int64_t mb, int64_t k0, int64_t kc,
                   float *dst) {
  for (int64_t i0 = 0; i0 < mb; i0 += MR, dst += MR * kc) {
    int64_t rows = mb - i0 < MR ? mb - i0 : MR;
    if (!trans) {
      for (int64_t r = 0; r < rows; r++) {
        const float *src = A + (i0 + r) * lda + k0;
        for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = src[p];
      }
    } else {
      for (int64_t p = 0; p < kc; p++) {
        const float *src = A + (k0 + p) * lda + i0;
        for (int64_t r = 0; r < rows; r++) dst[p * MR + r] = src[r];
      }
    }
    for (int64_t r = rows; r < MR; r++)
      for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = 0.0f;
  }
}

/* op(B)[k0, k0 + kc) x [j0, j0 + cols) into panels of NR columns,
 * bpack[panel][p][j] (columns past cols are zeros). Rows of B are read
 * along their length (cols <= NC floats at a time), which the hardware
 * prefetchers follow; a panel's 16 floats per row alone would jump a pitch
 * per cache line. */
AVX2 static void pack_b(bool trans, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                        int64_t j0, int64_t cols, float *dst) {
  int64_t full = cols / NR, rest = cols % NR;
  if (!trans) {
    for (int64_t p = 0; p < kc; p++) {
      const float *src = B + (k0 + p) * ldb + j0;
      float *d = dst + p * NR;
      for (int64_t q = 0; q < full; q++, src += NR, d += kc * NR) {
        _mm256_store_ps(d, _mm256_loadu_ps(src));
        _mm256_store_ps(d + 8, _mm256_loadu_ps(src + 8));
      }
      if (rest) {
        memcpy(d, src, (size_t)rest * sizeof *d);
        memset(d + rest, 0, (size_t)(NR - rest) * sizeof *d);
      }
    }
    return;
  }
  if (rest) memset(dst + full * kc * NR, 0, (size_t)kc * NR * sizeof *dst);
  for (int64_t j = 0; j < cols; j++) {
    const float *src = B + (j0 + j) * ldb + k0;
    float *d = dst + (j / NR) * kc * NR + j % NR;
    for (int64_t p = 0; p < kc; p++) d[p * NR] = src[p];
  }
}

/* ---- the 6 x 16 kernel ---- */

#define ROW(i)                                                                                   \
  x = _mm256_broadcast_ss(a + (i));                                                              \
  c##i##0 = _mm256_fmadd_ps(x, b0, c##i##0);                                                     \
  c##i##1 = _mm256_fmadd_ps(x, b1, c##i##1);

/* Stores row i of the block: C = alpha * acc (+ beta * C when load). */
#define STORE(i)                                                                                 \
  {                                                                                              \
    float *ci = c + (i) * ldc;                                                                   \
    __m256 r0 = _mm256_mul_ps(va, c##i##0), r1 = _mm256_mul_ps(va, c##i##1);                     \
    if (load) {                                                                                  \
      r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), r0);                                         \
      r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), r1);                                     \
    }                                                                                            \
    _mm256_storeu_ps(ci, r0);                                                                    \
    _mm256_storeu_ps(ci + 8, r1);                                                                \
  }

/* c[6 x 16] = alpha * a^T b (+ beta * c when load): a is kc x MR packed,
 * b kc x NR packed. Prefetches pf_lines cache lines from pf (part of the
 * next panel of B) first. */
AVX2 static void kernel_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                             float alpha, float beta, bool load, const char *pf,
                             int64_t pf_lines) {
  for (int64_t l = 0; l < pf_lines; l++) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; p++, a += MR, b += NR) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8), x;
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
  }
  __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

#undef ROW
#undef STORE

/* A block at the edge of the tile (rows < MR or cols < NR): computed in
 * full into a local block, then the part inside C is stored. */
AVX2 static void kernel_edge(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                             int64_t rows, int64_t cols, float alpha, float beta, bool load) {
  _Alignas(32) float t[MR * NR];
  kernel_6x16(kc, a, b, t, NR, 1.0f, 0.0f, false, NULL, 0);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      float r = alpha * t[i * NR + j];
      c[i * ldc + j] = load ? __builtin_fmaf(beta, c[i * ldc + j], r) : r;
    }
}

/* Where packed op(A) keeps the block of MC rows starting at row i0, and
 * the rows a block of mb rows takes there (its micro-panels): the blocks
 * of k follow one another, the one at k0 starting k0 * panel_rows(mb) in
 * (sc_gemm_pack_a, tile_block). */
static int64_t panel_rows(int64_t mb) { return (mb + MR - 1) / MR * MR; }
static int64_t a_block_at(int64_t i0, int64_t k) { return i0 / MC * (MC_PANELS * MR) * k; }

/* One block of at most MC rows of a tile. pa (or NULL): these rows of
 * op(A) already packed (sc_gemm_pack_a); else each block of k is packed
 * into apack here. */
AVX2 static void tile_block(bool trans_a, bool trans_b, int64_t mb, int64_t n, int64_t k,
                            float alpha, const float *A, int64_t lda, const float *pa,
                            const float *B, int64_t ldb, const sc_gemm_packed_b *pb, int64_t n0,
                            float beta, float *C, int64_t ldc, float *apack, float *bpack) {
  for (int64_t k0 = 0; k0 < k; k0 += KC) {
    int64_t kc = k - k0 < KC ? k - k0 : KC;
    bool first = k0 == 0;
    /* the first block applies beta (never reading C when it is 0), the
     * others accumulate */
    float bk = first ? beta : 1.0f;
    bool load = !first || beta != 0.0f;
    const float *ablock = pa ? pa + k0 * panel_rows(mb) : apack;
    if (!pa) pack_a(trans_a, A, lda, mb, k0, kc, apack);
    for (int64_t jc = 0; jc < n; jc += NC) {
      int64_t nc = n - jc < NC ? n - jc : NC;
      const float *bb = bpack;
      if (pb)
        bb = pb->data + k0 * pb->n_pad + (n0 + jc) * kc;
      else
        pack_b(trans_b, B, ldb, k0, kc, jc, nc, bpack);
      for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        int64_t cols = nc - j0 < NR ? nc - j0 : NR;
        const float *bp = bb + (j0 / NR) * kc * NR;
        /* the next panel of a packed B, a part per micro-panel: its first
         * use would otherwise wait on memory (~15% on GPT-2's products) */
        const char *next = NULL;
        int64_t per = 0;
        if (pb) {
          next = (const char *)(bp + kc * NR);
          if (jc + j0 + NR >= n) /* the tile's last panel: the next block of k */
            next = k0 + kc < k ? (const char *)(pb->data + (k0 + kc) * pb->n_pad +
                                                n0 * (k - k0 - kc < KC ? k - k0 - kc : KC))
                               : NULL;
          int64_t lines = kc * NR * (int64_t)sizeof(float) / 64, calls = (mb + MR - 1) / MR;
          per = (lines + calls - 1) / calls;
        }
        for (int64_t i0 = 0; i0 < mb; i0 += MR) {
          int64_t rows = mb - i0 < MR ? mb - i0 : MR;
          const float *ap = ablock + (i0 / MR) * MR * kc;
          float *cp = C + i0 * ldc + jc + j0;
          const char *pf = next ? next + (i0 / MR) * per * 64 : NULL;
          if (rows == MR && cols == NR)
            kernel_6x16(kc, ap, bp, cp, ldc, alpha, bk, load, pf, next ? per : 0);
          else
            kernel_edge(kc, ap, bp, cp, ldc, rows, cols, alpha, bk, load);
        }
      }
    }
  }
}

bool sc_cpu_gemm_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *packed_a, const float *B,
                      int64_t ldb, const sc_gemm_packed_b *packed, int64_t n0, float beta,
                      float *C, int64_t ldc) {
  float *pack = thread_pack();
  if (!pack) return false;
  for (int64_t i0 = 0; i0 < m; i0 += MC) {
    int64_t mb = m - i0 < MC ? m - i0 : MC;
    const float *Ai = trans_a ? A + i0 : A + i0 * lda;
    const float *pa = packed_a ? packed_a + a_block_at(i0, k) : NULL;
    tile_block(trans_a, trans_b, mb, n, k, alpha, Ai, lda, pa, B, ldb, packed, n0, beta,
               C + i0 * ldc, ldc, pack, pack + APACK_FLOATS);
  }
  return true;
}

void sc_gemm_pack_a(bool trans_a, int64_t m, int64_t k, const float *A, int64_t lda, float *out) {
  for (int64_t i0 = 0; i0 < m; i0 += MC) {
    int64_t mb = m - i0 < MC ? m - i0 : MC;
    const float *Ai = trans_a ? A + i0 : A + i0 * lda;
    float *dst = out + a_block_at(i0, k);
    for (int64_t k0 = 0; k0 < k; k0 += KC)
      pack_a(trans_a, Ai, lda, mb, k0, k - k0 < KC ? k - k0 : KC, dst + k0 * panel_rows(mb));
  }
}

void sc_gemm_pack_b(bool trans_b, int64_t k, int64_t n, const float *B, int64_t ldb,
                    int64_t k0, int64_t k1, sc_gemm_packed_b *out) {
  out->n_pad = (n + NR - 1) / NR * NR;
  for (int64_t b0 = k0 / KC * KC; b0 < k1 && b0 < k; b0 += KC) {
    int64_t kc = k - b0 < KC ? k - b0 : KC;
    for (int64_t j0 = 0; j0 < n; j0 += NC)
      pack_b(trans_b, B, ldb, b0, kc, j0, n - j0 < NC ? n - j0 : NC,
             out->data + b0 * out->n_pad + j0 * kc);
  }
}

#else /* not x86-64: never chosen (sc_cpu_gemm_own_supported is false) */

bool sc_cpu_gemm_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *packed_a, const float *B,
                      int64_t ldb, const sc_gemm_packed_b *packed, int64_t n0, float beta,
                      float *C, int64_t ldc) {
  return false;
}

bool sc_cpu_gemm_thread_reserve(void) { return true; }

int64_t sc_cpu_gemm_thread_buffers_held(void) { return 0; }

void sc_gemm_pack_a(bool trans_a, int64_t m, int64_t k, const float *A, int64_t lda, float *out) {}

void sc_gemm_pack_b(bool trans_b, int64_t k, int64_t n, const float *B, int64_t ldb,
                    int64_t k0, int64_t k1, sc_gemm_packed_b *out) {}

#endif
