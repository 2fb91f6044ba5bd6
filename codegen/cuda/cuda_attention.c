/* cuda_attention.c — fused attention (FlashAttention-2) as CUDA C.
 *
 * For each distinct attention problem of a program (sc_cuda_attn: dtypes,
 * shapes, head dims, causal, mask, scale) the unit gets three kernels,
 * instantiated from one template (attn_template below) with the problem as
 * compile-time constants, so every index divides by constants and every
 * loop over a head dimension has a constant trip count:
 *
 *   sc_attn<id>_fwd     O and LSE. A block per (batch, head, BM query rows)
 *                       stages its Q tile in shared memory and loops over
 *                       key/value tiles of BN (causal: only up to the
 *                       diagonal), with the online softmax (running max m,
 *                       running sum l, the accumulator rescaled by
 *                       exp(m_old - m_new)); O = acc / l, LSE = m + log l,
 *                       or a zero row and -inf where no key is visible.
 *   sc_attn<id>_bwd_kv  dK and dV. A block per (batch, kv head, BN keys)
 *                       loops over the query heads that share the kv head
 *                       and over their query tiles, recomputing
 *                       P = exp(s - LSE), dP = dO·Vᵀ, dS = P∘(dP − D) with
 *                       D = rowsum(dO∘O) of the tile (computed where it is
 *                       used), dV += Pᵀ·dO, dK += dSᵀ·Q·scale in registers:
 *                       the sum over grouped heads needs neither atomics nor
 *                       scratch.
 *   sc_attn<id>_bwd_q   dQ. A block per (batch, head, BM query rows) loops
 *                       over the key tiles, recomputing S, P, dP and dS:
 *                       dQ += dS·K·scale. Recomputing costs two of the
 *                       backward's five products again (1.4× its FLOPs);
 *                       FlashAttention-2's atomicAdd into an f32 copy of dQ
 *                       would need b·h·sq·d·4 bytes of scratch, a zeroing
 *                       and a cast kernel, and gives sums whose order
 *                       changes from run to run. This way every result is
 *                       the same on every run and needs no memory but its
 *                       own.
 *
 * Blocks are SC_CUDA_ATTN_THREADS (128) threads, 8 row groups × 16 lanes:
 * thread (ty, tx) computes rows ty·T.. of a score tile and its columns
 * tx + 16n, so a row's max and sum are reductions over 16 consecutive
 * lanes (__shfl_xor_sync). Tiles go to dynamic shared memory as f32 (loaded
 * as the dtype, converted once); transposed tiles read along a column are
 * padded by one so that the 16 lanes hit distinct banks. Everything
 * accumulates in f32 (fmaf), and each result is rounded once to the dtype
 * as it is stored. Every kernel has the same ten pointer arguments
 * (q, k, v, mask, o, lse, d_o, dq, dk, dv: NULL where unused; all 8 bytes)
 * and a grid-stride loop over its blocks' work, so any grid is correct.
 *
 * The emulator (runtime/cuda_emu.h) runs the same text on the CPU: its
 * __shfl_xor_sync is defined here, beside the template. Only CUDA-core FMA
 * for now (no mma.sync / wmma tensor-core path). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cuda.h"

enum { THREADS = SC_CUDA_ATTN_THREADS, MAX_HEAD_DIM = 256 };

/* The template (instantiated by attn_kernels), with the emulator's
 * __shfl_xor_sync. The dynamic shared memory macros are shared with the
 * convolutions' (whichever comes first defines them). */
static const char attn_template[] =
  "#define SC_ATTN_THREADS 128\n"
  "#ifndef SC_DYN_SHARED\n"
  "#ifdef SC_CUDA_EMU\n"
  "#define SC_DYN_SHARED() ((float *)sc_emu->current()->dyn)\n"
  "#define SC_UNROLL\n"
  "#else\n"
  "#define SC_DYN_SHARED() sc_dyn_shared()\n"
  "#define SC_UNROLL _Pragma(\"unroll\")\n"
  "SC_DEV float *sc_dyn_shared() { extern __shared__ __align__(16) float sc_dyn[]; return sc_dyn; }\n"
  "#endif\n"
  "#endif\n"
  "#ifdef SC_CUDA_EMU\n"
  "template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int off) {\n"
  "  const sc_emu_thread *t = sc_emu->current();\n"
  "  unsigned i = t->tid.x, j = i ^ (unsigned)off;\n"
  "  memcpy(t->xchg + 16 * i, &v, sizeof v);\n"
  "  sc_emu->warp_sync();\n"
  "  T r = v;\n"
  "  if (j < t->bdim.x) memcpy(&r, t->xchg + 16 * j, sizeof r);\n"
  "  sc_emu->warp_sync();\n"
  "  (void)mask;\n"
  "  return r;\n"
  "}\n"
  "#endif\n"
  "#define SC_ATTN_NEG_INF __int_as_float((int)0xff800000u)\n"
  "/* storage types: load as the dtype, compute in f32, store rounded to nearest even */\n"
  "struct sc_attn_f32 {\n"
  "  typedef float T;\n"
  "  static constexpr bool BF16 = false;\n"
  "  static SC_MEM float ld(float x) { return x; }\n"
  "  static SC_MEM float st(float x) { return x; }\n"
  "};\n"
  "struct sc_attn_bf16 {\n"
  "  typedef unsigned short T;\n"
  "  static constexpr bool BF16 = true;\n"
  "  static SC_MEM float ld(unsigned short x) { return sc_bf2f(x); }\n"
  "  static SC_MEM unsigned short st(float x) { return sc_f2bf(x); }\n"
  "};\n"
  "struct sc_attn_f16 {\n"
  "  typedef unsigned short T;\n"
  "  static constexpr bool BF16 = false;\n"
  "  static SC_MEM float ld(unsigned short x) { return sc_h2f(x); }\n"
  "  static SC_MEM unsigned short st(float x) { return sc_f2h(x); }\n"
  "};\n"
  "/* the 16 lanes of a row group (16 consecutive lanes of one warp) */\n"
  "SC_DEV float sc_attn_max16(float v) {\n"
  "  SC_UNROLL for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
  "  return v;\n"
  "}\n"
  "SC_DEV float sc_attn_sum16(float v) {\n"
  "  SC_UNROLL for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
  "  return v;\n"
  "}\n"
  "/* s = scale q.k (+ mask) of query row `row`, key `col`, or -inf where the\n"
  " * key is not visible (out of range, above the causal diagonal) */\n"
  "template <class G>\n"
  "SC_DEV float sc_attn_score(float qk, const typename G::MX::T *__restrict__ mask, long long b,\n"
  "                           long long h, long long row, long long col) {\n"
  "  constexpr long long OFF = G::SKV - G::SQ;\n"
  "  if (row >= G::SQ || col >= G::SKV || (G::CAUSAL && col > row + OFF)) return SC_ATTN_NEG_INF;\n"
  "  float x = qk * G::SCALE;\n"
  "  if (G::MASK) x += G::MX::ld(mask[b * G::MSB + h * G::MSH + row * G::SKV + col]);\n"
  "  return x;\n"
  "}\n"
  "/* rows [r0, r0 + R) of a [.., C] matrix into shared memory transposed:\n"
  " * dst[c * LD + r], zero past the end */\n"
  "template <class X, int R, int C, int LD, long long N>\n"
  "SC_DEV void sc_attn_load_t(float *dst, const typename X::T *__restrict__ src, long long r0) {\n"
  "  for (int e = (int)threadIdx.x; e < R * C; e += SC_ATTN_THREADS) {\n"
  "    const int r = e / C, c = e % C;\n"
  "    dst[c * LD + r] = r0 + r < N ? X::ld(src[(r0 + r) * C + c]) : 0.0f;\n"
  "  }\n"
  "}\n"
  "/* lse and D = rowsum(dO o O) of rows [r0, r0 + R) */\n"
  "template <class G, int R>\n"
  "SC_DEV void sc_attn_rows(float *Ls, float *Ds, const typename G::X::T *__restrict__ o,\n"
  "                         const float *__restrict__ lse, const typename G::X::T *__restrict__ d_o,\n"
  "                         long long bh, long long r0) {\n"
  "  for (int r = (int)threadIdx.x; r < R; r += SC_ATTN_THREADS) {\n"
  "    const long long row = r0 + r;\n"
  "    float acc = 0.0f, l = SC_ATTN_NEG_INF;\n"
  "    if (row < G::SQ) {\n"
  "      const long long base = (bh * G::SQ + row) * G::DV;\n"
  "      for (int c = 0; c < G::DV; c++) acc = fmaf(G::X::ld(d_o[base + c]), G::X::ld(o[base + c]), acc);\n"
  "      l = lse[bh * G::SQ + row];\n"
  "    }\n"
  "    Ls[r] = l;\n"
  "    Ds[r] = acc;\n"
  "  }\n"
  "}\n"
  "\n"
  "/* Forward: a block per (batch, head, BM query rows); key/value tiles of BN\n"
  " * in shared memory; thread (ty, tx) holds rows ty*TM.. and columns tx + 16n */\n"
  "template <class G, int BM, int BN>\n"
  "SC_DEV void sc_attn_fwd(const typename G::X::T *__restrict__ q, const typename G::X::T *__restrict__ k,\n"
  "                        const typename G::X::T *__restrict__ v, const typename G::MX::T *__restrict__ mask,\n"
  "                        typename G::X::T *__restrict__ o, float *__restrict__ lse) {\n"
  "  typedef typename G::X X;\n"
  "  constexpr int TM = BM / 8, TN = BN / 16, TV = (G::DV + 15) / 16;\n"
  "  constexpr long long QT = (G::SQ + BM - 1) / BM, WORK = QT * G::B * G::H, OFF = G::SKV - G::SQ;\n"
  "  constexpr long long QTD = QT > 0 ? QT : 1; /* no work at all when 0 */\n"
  "  float *Qs = SC_DYN_SHARED();      /* [D][BM] */\n"
  "  float *Ks = Qs + G::D * BM;       /* [D][BN] */\n"
  "  float *Vs = Ks + G::D * BN;       /* [BN][DV] */\n"
  "  float *Ps = Vs + BN * G::DV;      /* [BM][BN] */\n"
  "  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;\n"
  "  for (long long w = blockIdx.x; w < WORK; w += gridDim.x) {\n"
  "    const long long bh = w / QTD, r0 = w % QTD * BM, b = bh / G::H, h = bh % G::H;\n"
  "    const long long kvh = b * G::HK + h / (G::H / G::HK);\n"
  "    const typename X::T *kb = k + kvh * G::SKV * G::D, *vb = v + kvh * G::SKV * G::DV;\n"
  "    sc_attn_load_t<X, BM, G::D, BM, G::SQ>(Qs, q + bh * G::SQ * G::D, r0);\n"
  "    float m[TM], l[TM], acc[TM][TV];\n"
  "    SC_UNROLL for (int i = 0; i < TM; i++) {\n"
  "      m[i] = SC_ATTN_NEG_INF;\n"
  "      l[i] = 0.0f;\n"
  "      SC_UNROLL for (int t = 0; t < TV; t++) acc[i][t] = 0.0f;\n"
  "    }\n"
  "    long long kend = G::SKV;\n"
  "    if (G::CAUSAL) kend = r0 + BM + OFF < G::SKV ? r0 + BM + OFF : G::SKV; /* tiles wholly above the diagonal skipped */\n"
  "    for (long long n0 = 0; n0 < kend; n0 += BN) {\n"
  "      __syncthreads();\n"
  "      sc_attn_load_t<X, BN, G::D, BN, G::SKV>(Ks, kb, n0);\n"
  "      for (int e = tid; e < BN * G::DV; e += SC_ATTN_THREADS)\n"
  "        Vs[e] = n0 + e / G::DV < G::SKV ? X::ld(vb[n0 * G::DV + e]) : 0.0f;\n"
  "      __syncthreads();\n"
  "      float s[TM][TN];\n"
  "      SC_UNROLL for (int i = 0; i < TM; i++)\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) s[i][n] = 0.0f;\n"
  "      for (int c = 0; c < G::D; c++) {\n"
  "        float a[TM], kk[TN];\n"
  "        SC_UNROLL for (int i = 0; i < TM; i++) a[i] = Qs[c * BM + ty * TM + i];\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) kk[n] = Ks[c * BN + tx + 16 * n];\n"
  "        SC_UNROLL for (int i = 0; i < TM; i++)\n"
  "          SC_UNROLL for (int n = 0; n < TN; n++) s[i][n] = fmaf(a[i], kk[n], s[i][n]);\n"
  "      }\n"
  "      SC_UNROLL for (int i = 0; i < TM; i++) {\n"
  "        const long long row = r0 + ty * TM + i;\n"
  "        float mx = SC_ATTN_NEG_INF;\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) {\n"
  "          s[i][n] = sc_attn_score<G>(s[i][n], mask, b, h, row, n0 + tx + 16 * n);\n"
  "          mx = fmaxf(mx, s[i][n]);\n"
  "        }\n"
  "        const float mnew = fmaxf(m[i], sc_attn_max16(mx));\n"
  "        const float mu = mnew == SC_ATTN_NEG_INF ? 0.0f : mnew; /* nothing visible yet: p = 0 */\n"
  "        const float alpha = expf(m[i] - mu);\n"
  "        m[i] = mnew;\n"
  "        l[i] *= alpha;\n"
  "        SC_UNROLL for (int t = 0; t < TV; t++) acc[i][t] *= alpha;\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) {\n"
  "          const float p = expf(s[i][n] - mu);\n"
  "          l[i] += p;\n"
  "          Ps[(ty * TM + i) * BN + tx + 16 * n] = p;\n"
  "        }\n"
  "      }\n"
  "      __syncthreads();\n"
  "      for (int j = 0; j < BN; j++) {\n"
  "        float vv[TV];\n"
  "        SC_UNROLL for (int t = 0; t < TV; t++) vv[t] = tx + 16 * t < G::DV ? Vs[j * G::DV + tx + 16 * t] : 0.0f;\n"
  "        SC_UNROLL for (int i = 0; i < TM; i++) {\n"
  "          const float p = Ps[(ty * TM + i) * BN + j];\n"
  "          SC_UNROLL for (int t = 0; t < TV; t++) acc[i][t] = fmaf(p, vv[t], acc[i][t]);\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "    SC_UNROLL for (int i = 0; i < TM; i++) {\n"
  "      const long long row = r0 + ty * TM + i;\n"
  "      const float L = sc_attn_sum16(l[i]);\n"
  "      if (row >= G::SQ) continue;\n"
  "      const float inv = L > 0.0f ? 1.0f / L : 0.0f;\n"
  "      SC_UNROLL for (int t = 0; t < TV; t++)\n"
  "        if (tx + 16 * t < G::DV) o[(bh * G::SQ + row) * G::DV + tx + 16 * t] = X::st(acc[i][t] * inv);\n"
  "      if (tx == 0) lse[bh * G::SQ + row] = L > 0.0f ? m[i] + logf(L) : SC_ATTN_NEG_INF;\n"
  "    }\n"
  "    __syncthreads();\n"
  "  }\n"
  "}\n"
  "\n"
  "/* Backward, dK and dV: a block per (batch, kv head, BN keys) loops over the\n"
  " * query heads that share the kv head and their query tiles of BM rows,\n"
  " * recomputing P = exp(s - lse); thread (ty, tx) holds keys ty*TK.. and\n"
  " * query columns tx + 16n, then accumulates dK and dV of its keys over the\n"
  " * feature columns tx + 16t: a sum in registers, no atomics */\n"
  "template <class G, int BM, int BN>\n"
  "SC_DEV void sc_attn_bwd_kv(const typename G::X::T *__restrict__ q, const typename G::X::T *__restrict__ k,\n"
  "                           const typename G::X::T *__restrict__ v, const typename G::MX::T *__restrict__ mask,\n"
  "                           const typename G::X::T *__restrict__ o, const float *__restrict__ lse,\n"
  "                           const typename G::X::T *__restrict__ d_o, typename G::X::T *__restrict__ dk,\n"
  "                           typename G::X::T *__restrict__ dv) {\n"
  "  typedef typename G::X X;\n"
  "  constexpr int TK = BN / 8, TQ = BM / 16, TD = (G::D + 15) / 16, TV = (G::DV + 15) / 16;\n"
  "  constexpr int BMP = BM + 1, BNP = BN + 1; /* padded: column reads hit distinct banks */\n"
  "  constexpr long long KT = (G::SKV + BN - 1) / BN, WORK = KT * G::B * G::HK, GRP = G::H / G::HK;\n"
  "  constexpr long long KTD = KT > 0 ? KT : 1;\n"
  "  constexpr long long OFF = G::SKV - G::SQ;\n"
  "  float *Ks = SC_DYN_SHARED();      /* [D][BNP] */\n"
  "  float *Vs = Ks + G::D * BNP;      /* [DV][BNP] */\n"
  "  float *Qs = Vs + G::DV * BNP;     /* [D][BMP] */\n"
  "  float *Os = Qs + G::D * BMP;      /* dO: [DV][BMP] */\n"
  "  float *Ps = Os + G::DV * BMP;     /* P^T: [BN][BM] */\n"
  "  float *Ss = Ps + BN * BM;         /* dS^T: [BN][BM] */\n"
  "  float *Ls = Ss + BN * BM;         /* [BM] */\n"
  "  float *Ds = Ls + BM;              /* [BM] */\n"
  "  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;\n"
  "  for (long long w = blockIdx.x; w < WORK; w += gridDim.x) {\n"
  "    const long long kvh = w / KTD, n0 = w % KTD * BN, b = kvh / G::HK, hk = kvh % G::HK;\n"
  "    sc_attn_load_t<X, BN, G::D, BNP, G::SKV>(Ks, k + kvh * G::SKV * G::D, n0);\n"
  "    sc_attn_load_t<X, BN, G::DV, BNP, G::SKV>(Vs, v + kvh * G::SKV * G::DV, n0);\n"
  "    float gk[TK][TD], gv[TK][TV];\n"
  "    SC_UNROLL for (int i = 0; i < TK; i++) {\n"
  "      SC_UNROLL for (int t = 0; t < TD; t++) gk[i][t] = 0.0f;\n"
  "      SC_UNROLL for (int t = 0; t < TV; t++) gv[i][t] = 0.0f;\n"
  "    }\n"
  "    /* causal: the first query that sees key n0 is n0 - OFF */\n"
  "    long long mstart = 0;\n"
  "    if (G::CAUSAL && n0 - OFF > 0) mstart = (n0 - OFF) / BM * BM;\n"
  "    for (long long hh = 0; hh < GRP; hh++) {\n"
  "      const long long h = hk * GRP + hh, bh = b * G::H + h;\n"
  "      for (long long m0 = mstart; m0 < G::SQ; m0 += BM) {\n"
  "        __syncthreads();\n"
  "        sc_attn_load_t<X, BM, G::D, BMP, G::SQ>(Qs, q + bh * G::SQ * G::D, m0);\n"
  "        sc_attn_load_t<X, BM, G::DV, BMP, G::SQ>(Os, d_o + bh * G::SQ * G::DV, m0);\n"
  "        sc_attn_rows<G, BM>(Ls, Ds, o, lse, d_o, bh, m0);\n"
  "        __syncthreads();\n"
  "        float s[TK][TQ], dp[TK][TQ];\n"
  "        SC_UNROLL for (int i = 0; i < TK; i++)\n"
  "          SC_UNROLL for (int n = 0; n < TQ; n++) s[i][n] = dp[i][n] = 0.0f;\n"
  "        for (int c = 0; c < G::D; c++) {\n"
  "          float a[TK], x[TQ];\n"
  "          SC_UNROLL for (int i = 0; i < TK; i++) a[i] = Ks[c * BNP + ty * TK + i];\n"
  "          SC_UNROLL for (int n = 0; n < TQ; n++) x[n] = Qs[c * BMP + tx + 16 * n];\n"
  "          SC_UNROLL for (int i = 0; i < TK; i++)\n"
  "            SC_UNROLL for (int n = 0; n < TQ; n++) s[i][n] = fmaf(a[i], x[n], s[i][n]);\n"
  "        }\n"
  "        for (int c = 0; c < G::DV; c++) {\n"
  "          float a[TK], x[TQ];\n"
  "          SC_UNROLL for (int i = 0; i < TK; i++) a[i] = Vs[c * BNP + ty * TK + i];\n"
  "          SC_UNROLL for (int n = 0; n < TQ; n++) x[n] = Os[c * BMP + tx + 16 * n];\n"
  "          SC_UNROLL for (int i = 0; i < TK; i++)\n"
  "            SC_UNROLL for (int n = 0; n < TQ; n++) dp[i][n] = fmaf(a[i], x[n], dp[i][n]);\n"
  "        }\n"
  "        SC_UNROLL for (int i = 0; i < TK; i++)\n"
  "          SC_UNROLL for (int n = 0; n < TQ; n++) {\n"
  "            const int qi = tx + 16 * n;\n"
  "            const float x = sc_attn_score<G>(s[i][n], mask, b, h, m0 + qi, n0 + ty * TK + i);\n"
  "            const float p = x == SC_ATTN_NEG_INF || Ls[qi] == SC_ATTN_NEG_INF ? 0.0f : expf(x - Ls[qi]);\n"
  "            Ps[(ty * TK + i) * BM + qi] = p;\n"
  "            Ss[(ty * TK + i) * BM + qi] = p * (dp[i][n] - Ds[qi]);\n"
  "          }\n"
  "        __syncthreads();\n"
  "        for (int qi = 0; qi < BM; qi++) {\n"
  "          float x[TD], y[TV];\n"
  "          SC_UNROLL for (int t = 0; t < TD; t++) x[t] = tx + 16 * t < G::D ? Qs[(tx + 16 * t) * BMP + qi] : 0.0f;\n"
  "          SC_UNROLL for (int t = 0; t < TV; t++) y[t] = tx + 16 * t < G::DV ? Os[(tx + 16 * t) * BMP + qi] : 0.0f;\n"
  "          SC_UNROLL for (int i = 0; i < TK; i++) {\n"
  "            const float p = Ps[(ty * TK + i) * BM + qi], ds = Ss[(ty * TK + i) * BM + qi];\n"
  "            SC_UNROLL for (int t = 0; t < TV; t++) gv[i][t] = fmaf(p, y[t], gv[i][t]);\n"
  "            SC_UNROLL for (int t = 0; t < TD; t++) gk[i][t] = fmaf(ds, x[t], gk[i][t]);\n"
  "          }\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "    SC_UNROLL for (int i = 0; i < TK; i++) {\n"
  "      const long long key = n0 + ty * TK + i;\n"
  "      if (key >= G::SKV) continue;\n"
  "      SC_UNROLL for (int t = 0; t < TD; t++)\n"
  "        if (tx + 16 * t < G::D) dk[(kvh * G::SKV + key) * G::D + tx + 16 * t] = X::st(gk[i][t] * G::SCALE);\n"
  "      SC_UNROLL for (int t = 0; t < TV; t++)\n"
  "        if (tx + 16 * t < G::DV) dv[(kvh * G::SKV + key) * G::DV + tx + 16 * t] = X::st(gv[i][t]);\n"
  "    }\n"
  "    __syncthreads();\n"
  "  }\n"
  "}\n"
  "\n"
  "/* Backward, dQ: a block per (batch, head, BM query rows) loops over the key\n"
  " * tiles (causal: up to the diagonal) recomputing P and dS; thread (ty, tx)\n"
  " * holds rows ty*TQ.. and key columns tx + 16n, then dQ of its rows over the\n"
  " * feature columns tx + 16t. A pass of its own (S and dP computed twice)\n"
  " * rather than atomics into an f32 copy of dQ: no scratch, and the same\n"
  " * sums in the same order on every run */\n"
  "template <class G, int BM, int BN>\n"
  "SC_DEV void sc_attn_bwd_q(const typename G::X::T *__restrict__ q, const typename G::X::T *__restrict__ k,\n"
  "                          const typename G::X::T *__restrict__ v, const typename G::MX::T *__restrict__ mask,\n"
  "                          const typename G::X::T *__restrict__ o, const float *__restrict__ lse,\n"
  "                          const typename G::X::T *__restrict__ d_o, typename G::X::T *__restrict__ dq) {\n"
  "  typedef typename G::X X;\n"
  "  constexpr int TQ = BM / 8, TN = BN / 16, TD = (G::D + 15) / 16;\n"
  "  constexpr int BMP = BM + 1, BNP = BN + 1;\n"
  "  constexpr long long QT = (G::SQ + BM - 1) / BM, WORK = QT * G::B * G::H, OFF = G::SKV - G::SQ;\n"
  "  constexpr long long QTD = QT > 0 ? QT : 1;\n"
  "  float *Qs = SC_DYN_SHARED();      /* [D][BMP] */\n"
  "  float *Os = Qs + G::D * BMP;      /* dO: [DV][BMP] */\n"
  "  float *Ks = Os + G::DV * BMP;     /* [D][BNP] */\n"
  "  float *Vs = Ks + G::D * BNP;      /* [DV][BNP] */\n"
  "  float *Ss = Vs + G::DV * BNP;     /* dS: [BM][BN] */\n"
  "  float *Ls = Ss + BM * BN;         /* [BM] */\n"
  "  float *Ds = Ls + BM;              /* [BM] */\n"
  "  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;\n"
  "  for (long long w = blockIdx.x; w < WORK; w += gridDim.x) {\n"
  "    const long long bh = w / QTD, r0 = w % QTD * BM, b = bh / G::H, h = bh % G::H;\n"
  "    const long long kvh = b * G::HK + h / (G::H / G::HK);\n"
  "    sc_attn_load_t<X, BM, G::D, BMP, G::SQ>(Qs, q + bh * G::SQ * G::D, r0);\n"
  "    sc_attn_load_t<X, BM, G::DV, BMP, G::SQ>(Os, d_o + bh * G::SQ * G::DV, r0);\n"
  "    sc_attn_rows<G, BM>(Ls, Ds, o, lse, d_o, bh, r0);\n"
  "    float gq[TQ][TD];\n"
  "    SC_UNROLL for (int i = 0; i < TQ; i++)\n"
  "      SC_UNROLL for (int t = 0; t < TD; t++) gq[i][t] = 0.0f;\n"
  "    long long kend = G::SKV;\n"
  "    if (G::CAUSAL) kend = r0 + BM + OFF < G::SKV ? r0 + BM + OFF : G::SKV;\n"
  "    for (long long n0 = 0; n0 < kend; n0 += BN) {\n"
  "      __syncthreads();\n"
  "      sc_attn_load_t<X, BN, G::D, BNP, G::SKV>(Ks, k + kvh * G::SKV * G::D, n0);\n"
  "      sc_attn_load_t<X, BN, G::DV, BNP, G::SKV>(Vs, v + kvh * G::SKV * G::DV, n0);\n"
  "      __syncthreads();\n"
  "      float s[TQ][TN], dp[TQ][TN];\n"
  "      SC_UNROLL for (int i = 0; i < TQ; i++)\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) s[i][n] = dp[i][n] = 0.0f;\n"
  "      for (int c = 0; c < G::D; c++) {\n"
  "        float a[TQ], x[TN];\n"
  "        SC_UNROLL for (int i = 0; i < TQ; i++) a[i] = Qs[c * BMP + ty * TQ + i];\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) x[n] = Ks[c * BNP + tx + 16 * n];\n"
  "        SC_UNROLL for (int i = 0; i < TQ; i++)\n"
  "          SC_UNROLL for (int n = 0; n < TN; n++) s[i][n] = fmaf(a[i], x[n], s[i][n]);\n"
  "      }\n"
  "      for (int c = 0; c < G::DV; c++) {\n"
  "        float a[TQ], x[TN];\n"
  "        SC_UNROLL for (int i = 0; i < TQ; i++) a[i] = Os[c * BMP + ty * TQ + i];\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) x[n] = Vs[c * BNP + tx + 16 * n];\n"
  "        SC_UNROLL for (int i = 0; i < TQ; i++)\n"
  "          SC_UNROLL for (int n = 0; n < TN; n++) dp[i][n] = fmaf(a[i], x[n], dp[i][n]);\n"
  "      }\n"
  "      SC_UNROLL for (int i = 0; i < TQ; i++) {\n"
  "        const int qi = ty * TQ + i;\n"
  "        SC_UNROLL for (int n = 0; n < TN; n++) {\n"
  "          const float x = sc_attn_score<G>(s[i][n], mask, b, h, r0 + qi, n0 + tx + 16 * n);\n"
  "          const float p = x == SC_ATTN_NEG_INF || Ls[qi] == SC_ATTN_NEG_INF ? 0.0f : expf(x - Ls[qi]);\n"
  "          Ss[qi * BN + tx + 16 * n] = p * (dp[i][n] - Ds[qi]);\n"
  "        }\n"
  "      }\n"
  "      __syncthreads();\n"
  "      for (int j = 0; j < BN; j++) {\n"
  "        float x[TD];\n"
  "        SC_UNROLL for (int t = 0; t < TD; t++) x[t] = tx + 16 * t < G::D ? Ks[(tx + 16 * t) * BNP + j] : 0.0f;\n"
  "        SC_UNROLL for (int i = 0; i < TQ; i++) {\n"
  "          const float ds = Ss[(ty * TQ + i) * BN + j];\n"
  "          SC_UNROLL for (int t = 0; t < TD; t++) gq[i][t] = fmaf(ds, x[t], gq[i][t]);\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "    SC_UNROLL for (int i = 0; i < TQ; i++) {\n"
  "      const long long row = r0 + ty * TQ + i;\n"
  "      if (row >= G::SQ) continue;\n"
  "      SC_UNROLL for (int t = 0; t < TD; t++)\n"
  "        if (tx + 16 * t < G::D) dq[(bh * G::SQ + row) * G::D + tx + 16 * t] = X::st(gq[i][t] * G::SCALE);\n"
  "    }\n"
  "    __syncthreads();\n"
  "  }\n"
  "}\n"
  "/* Tensor cores (bf16, f16): mma.sync m16n8k16, f32 accumulators. Fragments\n"
  " * (PTX ISA, \"Matrix Fragments for mma.m16n8k16\"), lane = 4 g + q:\n"
  " *   A 16x16 row-major, 4 registers of two halves: (g, 2q..), (g + 8, 2q..),\n"
  " *     (g, 2q + 8..), (g + 8, 2q + 8..); the lower half the lower column\n"
  " *   B 16x8 (k x n): (2q.., g), (2q + 8.., g)\n"
  " *   C 16x8 f32: (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)\n"
  " * The emulator gathers the warp's fragments through the exchange area and\n"
  " * multiplies them out in f32, in k order. */\n"
  "SC_DEV unsigned sc_attn_pack(const unsigned short *p) { return (unsigned)p[0] | ((unsigned)p[1] << 16); }\n"
  "#ifndef SC_CUDA_EMU\n"
  "template <class X>\n"
  "SC_DEV void sc_attn_mma(float c[4], const unsigned a[4], const unsigned b[2]) {\n"
  "  if constexpr (X::BF16)\n"
  "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
  "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
  "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
  "  else\n"
  "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
  "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
  "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
  "}\n"
  "#else\n"
  "template <class X>\n"
  "static inline void sc_attn_mma(float c[4], const unsigned a[4], const unsigned b[2]) {\n"
  "  const sc_emu_thread *t = sc_emu->current();\n"
  "  const unsigned i = t->tid.x, lane = i & 31u, w0 = i - lane;\n"
  "  float A[16][16], B[16][8];\n"
  "  memcpy(t->xchg + 16 * i, a, 16);\n"
  "  sc_emu->warp_sync();\n"
  "  for (unsigned l = 0; l < 32; l++) {\n"
  "    unsigned r[4], g = l / 4, q = l % 4;\n"
  "    memcpy(r, t->xchg + 16 * (w0 + l), 16);\n"
  "    for (int h = 0; h < 2; h++) {\n"
  "      A[g][2 * q + h] = X::ld((unsigned short)(r[0] >> (16 * h)));\n"
  "      A[g + 8][2 * q + h] = X::ld((unsigned short)(r[1] >> (16 * h)));\n"
  "      A[g][2 * q + 8 + h] = X::ld((unsigned short)(r[2] >> (16 * h)));\n"
  "      A[g + 8][2 * q + 8 + h] = X::ld((unsigned short)(r[3] >> (16 * h)));\n"
  "    }\n"
  "  }\n"
  "  sc_emu->warp_sync();\n"
  "  memcpy(t->xchg + 16 * i, b, 8);\n"
  "  sc_emu->warp_sync();\n"
  "  for (unsigned l = 0; l < 32; l++) {\n"
  "    unsigned r[2], g = l / 4, q = l % 4;\n"
  "    memcpy(r, t->xchg + 16 * (w0 + l), 8);\n"
  "    for (int h = 0; h < 2; h++) {\n"
  "      B[2 * q + h][g] = X::ld((unsigned short)(r[0] >> (16 * h)));\n"
  "      B[2 * q + 8 + h][g] = X::ld((unsigned short)(r[1] >> (16 * h)));\n"
  "    }\n"
  "  }\n"
  "  sc_emu->warp_sync();\n"
  "  const unsigned g = lane / 4, q = lane % 4;\n"
  "  for (int e = 0; e < 4; e++) {\n"
  "    const unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * q + (e & 1);\n"
  "    float s = c[e];\n"
  "    for (int k = 0; k < 16; k++) s = fmaf(A[row][k], B[k][col], s);\n"
  "    c[e] = s;\n"
  "  }\n"
  "}\n"
  "#endif\n"
  "/* the 4 lanes of a quad (one row of a C fragment) */\n"
  "SC_DEV float sc_attn_max4(float v) {\n"
  "  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));\n"
  "  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));\n"
  "}\n"
  "SC_DEV float sc_attn_sum4(float v) {\n"
  "  v += __shfl_xor_sync(0xffffffffu, v, 1);\n"
  "  return v + __shfl_xor_sync(0xffffffffu, v, 2);\n"
  "}\n"
  "\n"
  "/* The forward on tensor cores: a block per (batch, head, 64 query rows),\n"
  " * warp w owns rows 16w..16w+15; S = Q·Kᵀ and O += P·V as m16n8k16 products\n"
  " * from tiles kept in the dtype in shared memory (rows padded by 8 halves),\n"
  " * P rounded to the dtype as the product's A operand (its row sums, and so\n"
  " * LSE, from the f32 values), the online softmax on the C fragments (a row\n"
  " * is 4 lanes of a quad). D and DV multiples of 16. */\n"
  "template <class G, int BM, int BN>\n"
  "SC_DEV void sc_attn_fwd_mma(const typename G::X::T *__restrict__ q, const typename G::X::T *__restrict__ k,\n"
  "                            const typename G::X::T *__restrict__ v, const typename G::MX::T *__restrict__ mask,\n"
  "                            typename G::X::T *__restrict__ o, float *__restrict__ lse) {\n"
  "  typedef typename G::X X;\n"
  "  constexpr int LQ = G::D + 8, LV = BN + 8, NT = BN / 8, OT = G::DV / 8, KS = G::D / 16;\n"
  "  static_assert(BM == 64 && G::D % 16 == 0 && G::DV % 16 == 0 && BN % 16 == 0, \"mma tiles: 4 warps of 16 rows\");\n"
  "  constexpr long long QT = (G::SQ + BM - 1) / BM, WORK = QT * G::B * G::H, OFF = G::SKV - G::SQ;\n"
  "  constexpr long long QTD = QT > 0 ? QT : 1;\n"
  "  unsigned short *Qs = (unsigned short *)SC_DYN_SHARED(); /* [BM][LQ] */\n"
  "  unsigned short *Ks = Qs + BM * LQ;                      /* [BN][LQ] */\n"
  "  unsigned short *Vt = Ks + BN * LQ;                      /* [DV][LV]: transposed */\n"
  "  const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, qd = lane % 4;\n"
  "  for (long long w = blockIdx.x; w < WORK; w += gridDim.x) {\n"
  "    const long long bh = w / QTD, r0 = w % QTD * BM, b = bh / G::H, h = bh % G::H;\n"
  "    const long long kvh = b * G::HK + h / (G::H / G::HK);\n"
  "    const typename X::T *qb = q + bh * G::SQ * G::D, *kb = k + kvh * G::SKV * G::D;\n"
  "    const typename X::T *vb = v + kvh * G::SKV * G::DV;\n"
  "    for (int e = tid; e < BM * G::D; e += SC_ATTN_THREADS) {\n"
  "      const int r = e / G::D, c = e % G::D;\n"
  "      Qs[r * LQ + c] = r0 + r < G::SQ ? qb[(r0 + r) * G::D + c] : (unsigned short)0;\n"
  "    }\n"
  "    const long long ra = r0 + warp * 16 + g, rb = ra + 8; /* this lane's two rows */\n"
  "    float m[2] = {SC_ATTN_NEG_INF, SC_ATTN_NEG_INF}, l[2] = {0.0f, 0.0f}, acc[OT][4];\n"
  "    SC_UNROLL for (int t = 0; t < OT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;\n"
  "    long long kend = G::SKV;\n"
  "    if (G::CAUSAL) kend = r0 + BM + OFF < G::SKV ? r0 + BM + OFF : G::SKV;\n"
  "    for (long long n0 = 0; n0 < kend; n0 += BN) {\n"
  "      __syncthreads();\n"
  "      for (int e = tid; e < BN * G::D; e += SC_ATTN_THREADS) {\n"
  "        const int r = e / G::D, c = e % G::D;\n"
  "        Ks[r * LQ + c] = n0 + r < G::SKV ? kb[(n0 + r) * G::D + c] : (unsigned short)0;\n"
  "      }\n"
  "      for (int e = tid; e < BN * G::DV; e += SC_ATTN_THREADS) {\n"
  "        const int r = e / G::DV, c = e % G::DV;\n"
  "        Vt[c * LV + r] = n0 + r < G::SKV ? vb[(n0 + r) * G::DV + c] : (unsigned short)0;\n"
  "      }\n"
  "      __syncthreads();\n"
  "      float s[NT][4];\n"
  "      SC_UNROLL for (int t = 0; t < NT; t++) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;\n"
  "      SC_UNROLL for (int kk = 0; kk < KS; kk++) {\n"
  "        const unsigned short *qa = Qs + (warp * 16 + g) * LQ + kk * 16 + 2 * qd;\n"
  "        const unsigned a[4] = {sc_attn_pack(qa), sc_attn_pack(qa + 8 * LQ), sc_attn_pack(qa + 8),\n"
  "                               sc_attn_pack(qa + 8 * LQ + 8)};\n"
  "        SC_UNROLL for (int t = 0; t < NT; t++) {\n"
  "          const unsigned short *kp = Ks + (t * 8 + g) * LQ + kk * 16 + 2 * qd;\n"
  "          const unsigned bb[2] = {sc_attn_pack(kp), sc_attn_pack(kp + 8)};\n"
  "          sc_attn_mma<X>(s[t], a, bb);\n"
  "        }\n"
  "      }\n"
  "      float mx[2] = {SC_ATTN_NEG_INF, SC_ATTN_NEG_INF};\n"
  "      SC_UNROLL for (int t = 0; t < NT; t++)\n"
  "        SC_UNROLL for (int e = 0; e < 4; e++) {\n"
  "          s[t][e] = sc_attn_score<G>(s[t][e], mask, b, h, e < 2 ? ra : rb, n0 + t * 8 + 2 * qd + (e & 1));\n"
  "          mx[e / 2] = fmaxf(mx[e / 2], s[t][e]);\n"
  "        }\n"
  "      float mu[2];\n"
  "      SC_UNROLL for (int r = 0; r < 2; r++) {\n"
  "        const float mnew = fmaxf(m[r], sc_attn_max4(mx[r]));\n"
  "        mu[r] = mnew == SC_ATTN_NEG_INF ? 0.0f : mnew;\n"
  "        const float alpha = expf(m[r] - mu[r]);\n"
  "        m[r] = mnew;\n"
  "        l[r] *= alpha;\n"
  "        SC_UNROLL for (int t = 0; t < OT; t++) acc[t][2 * r] *= alpha, acc[t][2 * r + 1] *= alpha;\n"
  "      }\n"
  "      SC_UNROLL for (int j = 0; j < BN / 16; j++) {\n"
  "        unsigned a[4];\n"
  "        SC_UNROLL for (int x = 0; x < 4; x++) { /* (tile 2j | 2j + 1, row g | g + 8) */\n"
  "          const int t = 2 * j + x / 2, r = x % 2;\n"
  "          const float p0 = expf(s[t][2 * r] - mu[r]), p1 = expf(s[t][2 * r + 1] - mu[r]);\n"
  "          l[r] += p0 + p1;\n"
  "          a[x] = (unsigned)X::st(p0) | ((unsigned)X::st(p1) << 16);\n"
  "        }\n"
  "        SC_UNROLL for (int t = 0; t < OT; t++) {\n"
  "          const unsigned short *vp = Vt + (t * 8 + g) * LV + j * 16 + 2 * qd;\n"
  "          const unsigned bb[2] = {sc_attn_pack(vp), sc_attn_pack(vp + 8)};\n"
  "          sc_attn_mma<X>(acc[t], a, bb);\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "    SC_UNROLL for (int r = 0; r < 2; r++) {\n"
  "      const float L = sc_attn_sum4(l[r]);\n"
  "      const long long row = r ? rb : ra;\n"
  "      if (row >= G::SQ) continue;\n"
  "      const float inv = L > 0.0f ? 1.0f / L : 0.0f;\n"
  "      SC_UNROLL for (int t = 0; t < OT; t++) {\n"
  "        o[(bh * G::SQ + row) * G::DV + t * 8 + 2 * qd] = X::st(acc[t][2 * r] * inv);\n"
  "        o[(bh * G::SQ + row) * G::DV + t * 8 + 2 * qd + 1] = X::st(acc[t][2 * r + 1] * inv);\n"
  "      }\n"
  "      if (qd == 0) lse[bh * G::SQ + row] = L > 0.0f ? m[r] + logf(L) : SC_ATTN_NEG_INF;\n"
  "    }\n"
  "    __syncthreads();\n"
  "  }\n"
  "}\n";

const char *sc_cuda_attn_problem(const sc_cuda_attn *a) {
  if (a->dtype != SC_DTYPE_F32 && a->dtype != SC_DTYPE_BF16 && a->dtype != SC_DTYPE_F16)
    return "fused attention: q, k, v must be f32, bf16 or f16";
  if (a->has_mask && a->mask_dtype != SC_DTYPE_F32 && a->mask_dtype != a->dtype)
    return "fused attention: the mask must be f32 or of the scores' dtype";
  if (a->d < 1 || a->d > MAX_HEAD_DIM || a->dv < 1 || a->dv > MAX_HEAD_DIM)
    return "fused attention: head dims must be in [1, 256]";
  if (a->batch < 0 || a->heads < 1 || a->kv_heads < 1 || a->sq < 0 || a->skv < 0)
    return "fused attention: negative extents";
  if (a->heads % a->kv_heads != 0) return "fused attention: heads not a multiple of kv heads";
  if (a->mask_stride_b < 0 || a->mask_stride_h < 0) return "fused attention: negative mask stride";
  if (!isfinite(a->scale)) return "fused attention: scale not finite";
  int64_t n = 1, dims[] = {a->batch, a->heads, a->sq > a->skv ? a->sq : a->skv, 256, 4};
  for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
    if (!sc_mul_i64(n, dims[i], &n)) return "fused attention: tensors too large";
  return NULL;
}

bool sc_cuda_attn_equal(const sc_cuda_attn *x, const sc_cuda_attn *y) {
  return x->dtype == y->dtype && x->has_mask == y->has_mask &&
         (!x->has_mask || (x->mask_dtype == y->mask_dtype && x->mask_stride_b == y->mask_stride_b &&
                           x->mask_stride_h == y->mask_stride_h)) &&
         x->causal == y->causal && x->batch == y->batch && x->heads == y->heads &&
         x->kv_heads == y->kv_heads && x->sq == y->sq && x->skv == y->skv && x->d == y->d &&
         x->dv == y->dv && x->scale == y->scale;
}

static const char *pass_name[SC_CUDA_ATTN_PASSES] = {"fwd", "bwd_kv", "bwd_q", "fwd_mma"};

bool sc_cuda_attn_mma_ok(const sc_cuda_attn *a) {
  return (a->dtype == SC_DTYPE_BF16 || a->dtype == SC_DTYPE_F16) && a->d % 16 == 0 &&
         a->dv % 16 == 0;
}

/* Tiles by the larger head dim: every kernel's shared memory stays under
 * sm_80's 163 KiB (140.25 KiB at most, for head dims of 256) and a
 * thread's accumulators at most 128 floats (ptxas, sm_90: no spills). */
static void tiles(const sc_cuda_attn *a, sc_cuda_attn_pass pass, int *bm, int *bn) {
  int64_t mx = a->d > a->dv ? a->d : a->dv;
  switch (pass) {
  case SC_CUDA_ATTN_FWD: *bm = 64, *bn = mx <= 128 ? 64 : 32; break;
  case SC_CUDA_ATTN_BWD_KV: *bm = *bn = mx <= 64 ? 64 : 32; break;
  case SC_CUDA_ATTN_FWD_MMA: *bm = 64, *bn = mx <= 128 ? 64 : 32; break;
  default: *bm = mx <= 128 ? 64 : 32, *bn = mx <= 64 ? 64 : 32; break;
  }
}

void sc_cuda_attn_launch_config(const sc_cuda_attn *a, int32_t id, sc_cuda_attn_pass pass,
                                sc_cuda_attn_launch *out) {
  memset(out, 0, sizeof *out);
  int bm, bn;
  tiles(a, pass, &bm, &bn);
  int64_t d = a->d, dv = a->dv, floats, work;
  switch (pass) {
  case SC_CUDA_ATTN_FWD:
    floats = d * bm + d * bn + bn * dv + (int64_t)bm * bn;
    work = (a->sq + bm - 1) / bm * a->batch * a->heads;
    break;
  case SC_CUDA_ATTN_FWD_MMA: /* halves: two to a float */
    floats = (bm * (d + 8) + bn * (d + 8) + dv * (bn + 8) + 1) / 2;
    work = (a->sq + bm - 1) / bm * a->batch * a->heads;
    break;
  case SC_CUDA_ATTN_BWD_KV:
    floats = (d + dv) * (bn + 1) + (d + dv) * (bm + 1) + 2 * (int64_t)bn * bm + 2 * bm;
    work = (a->skv + bn - 1) / bn * a->batch * a->kv_heads;
    break;
  default:
    floats = (d + dv) * (bm + 1) + (d + dv) * (bn + 1) + (int64_t)bm * bn + 2 * bm;
    work = (a->sq + bm - 1) / bm * a->batch * a->heads;
    break;
  }
  snprintf(out->name, sizeof out->name, "sc_attn%d_%s", (int)id, pass_name[pass]);
  out->block = THREADS;
  out->bm = bm, out->bn = bn;
  out->shared_bytes = (int)(floats * 4);
  out->grid = work < 1 ? 1 : work > 0x7fffffff ? 0x7fffffff : work; /* grid-stride */
}

static const char *traits(sc_dtype t) {
  return t == SC_DTYPE_BF16 ? "sc_attn_bf16" : t == SC_DTYPE_F16 ? "sc_attn_f16" : "sc_attn_f32";
}

/* the bytes of each pointer argument a pass reads or writes (0: unused) */
static void extents(const sc_cuda_attn *a, sc_cuda_attn_pass pass, long long bytes[SC_CUDA_ATTN_ARGS],
                    int written[SC_CUDA_ATTN_ARGS]) {
  long long e = (long long)sc_dtype_size(a->dtype), b = a->batch, h = a->heads, hk = a->kv_heads;
  long long q = b * h * a->sq * a->d * e, k = b * hk * a->skv * a->d * e;
  long long v = b * hk * a->skv * a->dv * e, o = b * h * a->sq * a->dv * e, l = b * h * a->sq * 4;
  long long m = a->has_mask && b > 0 ? ((b - 1) * a->mask_stride_b + (h - 1) * a->mask_stride_h +
                               a->sq * a->skv) * (long long)sc_dtype_size(a->mask_dtype)
                            : 0;
  long long all[SC_CUDA_ATTN_ARGS] = {q, k, v, m, o, l, o, q, k, v};
  bool fwd = pass == SC_CUDA_ATTN_FWD || pass == SC_CUDA_ATTN_FWD_MMA;
  for (int i = 0; i < SC_CUDA_ATTN_ARGS; i++) {
    bool used = i < 6 || (!fwd && i == 6) || (pass == SC_CUDA_ATTN_BWD_Q && i == 7) ||
                (pass == SC_CUDA_ATTN_BWD_KV && i >= 8);
    bytes[i] = used ? all[i] : 0;
    written[i] = (fwd && (i == 4 || i == 5)) || (!fwd && i >= 7 && used);
  }
}

void sc_cuda_attn_of_step(const sc_program *p, const sc_step *s, sc_cuda_attn *out) {
  const sc_attention_step *x = &s->attn;
  memset(out, 0, sizeof *out);
  out->dtype = p->buffers[x->q].dtype;
  out->has_mask = x->mask >= 0;
  out->mask_dtype = out->has_mask ? p->buffers[x->mask].dtype : out->dtype;
  out->causal = x->causal;
  out->batch = x->batch, out->heads = x->heads, out->kv_heads = x->kv_heads;
  out->sq = x->sq, out->skv = x->skv, out->d = x->d, out->dv = x->dv_dim;
  out->mask_stride_b = out->has_mask ? x->mask_stride_b : 0;
  out->mask_stride_h = out->has_mask ? x->mask_stride_h : 0;
  out->scale = x->scale;
}

static bool is_attention(const sc_step *s) {
  return s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD;
}

int32_t sc_cuda_attn_id(const sc_program *p, int32_t step) {
  sc_cuda_attn a, b;
  sc_cuda_attn_of_step(p, &p->steps[step], &a);
  for (int32_t i = 0; i < step; i++) {
    if (!is_attention(&p->steps[i])) continue;
    sc_cuda_attn_of_step(p, &p->steps[i], &b);
    if (sc_cuda_attn_equal(&a, &b)) return i;
  }
  return step;
}

sc_status sc_cuda_attn_emit(const sc_cuda_attn *a, int32_t id, unsigned passes, bool with_template,
                            char **text, sc_diag *diag) {
  *text = NULL;
  const char *why = sc_cuda_attn_problem(a);
  if (why) return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "cuda: %s", why);
  const char *x = traits(a->dtype), *mx = traits(a->has_mask ? a->mask_dtype : a->dtype);
  size_t cap = (with_template ? sizeof attn_template : 0) + 16384, n = 0;
  char *s = sc_malloc(cap);
  if (!s) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
#define PUT(...) (void)(n < cap ? n += (size_t)snprintf(s + n, cap - n, __VA_ARGS__) : 0)
  if (with_template) PUT("%s", attn_template);
  PUT("struct sc_attn%d_geom {\n"
      "  typedef %s X;\n  typedef %s MX;\n"
      "  static constexpr long long B = %lld, H = %lld, HK = %lld, SQ = %lld, SKV = %lld;\n"
      "  static constexpr long long D = %lld, DV = %lld, MSB = %lld, MSH = %lld;\n"
      "  static constexpr bool CAUSAL = %s, MASK = %s;\n"
      "  static constexpr float SCALE = %af;\n"
      "};\n",
      (int)id, x, mx, (long long)a->batch, (long long)a->heads, (long long)a->kv_heads,
      (long long)a->sq, (long long)a->skv, (long long)a->d, (long long)a->dv,
      (long long)a->mask_stride_b, (long long)a->mask_stride_h, a->causal ? "true" : "false",
      a->has_mask ? "true" : "false", (double)a->scale);
  static const char *const call[SC_CUDA_ATTN_PASSES] = {
      "q, k, v, mask, o, lse", "q, k, v, mask, o, lse, d_o, dk, dv",
      "q, k, v, mask, o, lse, d_o, dq", "q, k, v, mask, o, lse"};
  for (int pass = 0; pass < SC_CUDA_ATTN_PASSES; pass++) {
    if (!(passes & (1u << pass))) continue;
    if (pass == SC_CUDA_ATTN_FWD_MMA && !sc_cuda_attn_mma_ok(a)) continue;
    sc_cuda_attn_launch l;
    sc_cuda_attn_launch_config(a, id, (sc_cuda_attn_pass)pass, &l);
    long long bytes[SC_CUDA_ATTN_ARGS];
    int written[SC_CUDA_ATTN_ARGS];
    extents(a, (sc_cuda_attn_pass)pass, bytes, written);
    PUT("extern \"C\" __global__ void __launch_bounds__(%d)\n"
        "%s(const %s::T *__restrict__ q, const %s::T *__restrict__ k,\n"
        "    const %s::T *__restrict__ v, const %s::T *__restrict__ mask, %s::T *__restrict__ o,\n"
        "    float *__restrict__ lse, const %s::T *__restrict__ d_o, %s::T *__restrict__ dq,\n"
        "    %s::T *__restrict__ dk, %s::T *__restrict__ dv) {\n"
        "  (void)dq; (void)dk; (void)dv; (void)d_o;\n"
        "  sc_attn_%s<sc_attn%d_geom, %d, %d>(%s);\n"
        "}\n"
        "#ifdef SC_CUDA_EMU\n"
        "extern \"C\" __attribute__((visibility(\"default\"))) void %s" SC_CUDA_EMU_SUFFIX
        "(void **a) {\n"
        "  %s(*(const %s::T **)a[0], *(const %s::T **)a[1], *(const %s::T **)a[2],\n"
        "     *(const %s::T **)a[3], *(%s::T **)a[4], *(float **)a[5], *(const %s::T **)a[6],\n"
        "     *(%s::T **)a[7], *(%s::T **)a[8], *(%s::T **)a[9]);\n"
        "}\n"
        "extern \"C\" __attribute__((visibility(\"default\"))) const long long %s"
        SC_CUDA_EMU_INFO_SUFFIX "[] = {%d, 1, %d",
        THREADS, l.name, x, x, x, mx, x, x, x, x, x, pass_name[pass], (int)id, l.bm, l.bn,
        call[pass], l.name, l.name, x, x, x, mx, x, x, x, x, x, l.name, SC_CUDA_ATTN_ARGS,
        SC_CUDA_ATTN_ARGS);
    for (int i = 0; i < SC_CUDA_ATTN_ARGS; i++) PUT(", %d, %lldll", written[i], bytes[i]);
    PUT("};\n#endif\n\n");
  }
#undef PUT
  if (n >= cap) { /* the buffer is sized for the template and three kernels */
    sc_free(s);
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "cuda: attention text too long");
  }
  *text = s;
  return SC_OK;
}

sc_status sc_cuda_attn_unit(const sc_cuda_attn *a, int32_t n, char **src, sc_diag *diag) {
  *src = NULL;
  char *base = NULL;
  sc_status st = sc_cuda_emit_kernels(NULL, 0, NULL, &base, diag);
  if (st != SC_OK) return st;
  size_t len = strlen(base);
  for (int32_t i = 0; i < n && st == SC_OK; i++) {
    char *t = NULL;
    if ((st = sc_cuda_attn_emit(&a[i], i, SC_CUDA_ATTN_ALL, i == 0, &t, diag)) != SC_OK) break;
    size_t tl = strlen(t);
    char *g = sc_realloc(base, len + tl + 1);
    if (!g) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
    } else {
      memcpy(g + len, t, tl + 1);
      base = g;
      len += tl;
    }
    sc_free(t);
  }
  if (st != SC_OK) {
    sc_free(base);
    return st;
  }
  *src = base;
  return SC_OK;
}

sc_status sc_cuda_attn_emit_program(const sc_program *p, char **src, sc_diag *diag) {
  unsigned *passes = NULL;
  bool any = false;
  for (int32_t i = 0; i < p->n_steps; i++) any |= is_attention(&p->steps[i]);
  if (!any) return SC_OK;
  if (!(passes = sc_calloc((size_t)p->n_steps, sizeof *passes)))
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
  for (int32_t i = 0; i < p->n_steps; i++)
    if (is_attention(&p->steps[i]))
      passes[sc_cuda_attn_id(p, i)] |= p->steps[i].kind == SC_STEP_ATTENTION
                                           ? (1u << SC_CUDA_ATTN_FWD) | (1u << SC_CUDA_ATTN_FWD_MMA)
                                           : (1u << SC_CUDA_ATTN_BWD_KV) | (1u << SC_CUDA_ATTN_BWD_Q);
  sc_status st = SC_OK;
  bool first = true;
  size_t len = strlen(*src);
  for (int32_t i = 0; i < p->n_steps && st == SC_OK; i++) {
    if (!passes[i]) continue;
    sc_cuda_attn a;
    sc_cuda_attn_of_step(p, &p->steps[i], &a);
    char *t = NULL;
    if ((st = sc_cuda_attn_emit(&a, i, passes[i], first, &t, diag)) != SC_OK) break;
    first = false;
    size_t tl = strlen(t);
    char *g = sc_realloc(*src, len + tl + 1);
    if (!g) {
      st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
    } else {
      memcpy(g + len, t, tl + 1);
      *src = g;
      len += tl;
    }
    sc_free(t);
  }
  sc_free(passes);
  return st;
}
