/* cuda_emit.c — kernel IR → CUDA C (one translation unit per program).
 *
 * Each kir kernel becomes an `extern "C" __global__` function whose shape is
 * chosen by sc_cuda_launch_config (cuda.h): thread-per-point (inner loop, if
 * any, run serially by the thread; optionally 4 points per thread with float4
 * loads and stores) or block-per-point (REDUCE phases as block reductions,
 * STORE phases strided over the block). Expressions are emitted as `const`
 * locals `e<id>` in id order (the kir array is topological): those that do
 * not depend on the inner index are emitted once per outer point, before the
 * first phase that needs them; the others inside each phase loop that needs
 * them. In vectorised kernels an expression that depends on the last outer
 * dim has one copy per lane (`e<id>_<lane>`).
 *
 * The unit starts with a prelude of device helpers that pin down the
 * semantics of kir.h (f16/bf16 conversions, guarded integer division,
 * NaN-propagating min/max, saturating casts, block reductions). It includes
 * no header, so NVRTC needs no include path.
 *
 * This file only produces text; cuda_nvrtc.c compiles it. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cuda.h"

/* ---------------------------------------------------------------- text -- */

typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_vprintf(sbuf *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  for (;;) {
    va_list aq;
    va_copy(aq, ap);
    size_t room = b->cap - b->n;
    int w = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, aq);
    va_end(aq);
    if (w < 0) { b->oom = true; return; }
    if ((size_t)w < room) { b->n += (size_t)w; return; }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->n <= (size_t)w) cap *= 2;
    char *s = sc_realloc(b->s, cap);
    if (!s) { b->oom = true; return; }
    b->s = s;
    b->cap = cap;
  }
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(b, fmt, ap);
  va_end(ap);
}

/* --------------------------------------------------------------- prelude -- */

/* Under SC_CUDA_EMU (runtime/cuda_emu.h: the unit compiled by the host C++
 * compiler), CUDA's built-ins map onto the emulator: thread and block
 * indices read the current fiber's, __syncthreads is the block's barrier,
 * __shfl_down_sync an exchange between two barriers of the warp,
 * __shared__ storage is per OS thread (a block runs on one, all its fibers
 * on it). */
static const char emu_prelude[] =
  "#ifdef SC_CUDA_EMU\n"
  "#include <math.h>\n"
  "#include <string.h>\n"
  "struct sc_emu_dim3 { unsigned x, y, z; };\n"
  "struct sc_emu_thread { sc_emu_dim3 tid, bid, bdim, gdim; unsigned char *xchg, *dyn; };\n"
  "struct sc_emu_api {\n"
  "  const sc_emu_thread *(*current)(void);\n"
  "  void (*barrier)(void);   /* the block's */\n"
  "  void (*warp_sync)(void); /* the calling thread's warp's */\n"
  "};\n"
  "static const sc_emu_api *sc_emu;\n"
  "extern \"C\" __attribute__((visibility(\"default\"))) void sc_emu_bind(const sc_emu_api *a) { sc_emu = a; }\n"
  "#define __global__\n"
  "#define __device__\n"
  "#define __forceinline__ inline\n"
  "#define __launch_bounds__(n)\n"
  "#define __restrict__ __restrict\n"
  "#define __shared__ static thread_local\n"
  "#define threadIdx (sc_emu->current()->tid)\n"
  "#define blockIdx (sc_emu->current()->bid)\n"
  "#define blockDim (sc_emu->current()->bdim)\n"
  "#define gridDim (sc_emu->current()->gdim)\n"
  "static inline void __syncthreads(void) { sc_emu->barrier(); }\n"
  "template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, int off) {\n"
  "  const sc_emu_thread *t = sc_emu->current();\n"
  "  unsigned i = t->tid.x;\n"
  "  static_assert(sizeof(T) <= 16, \"a lane exchanges at most 16 bytes\");\n"
  "  memcpy(t->xchg + 16 * i, &v, sizeof v);\n"
  "  sc_emu->warp_sync();\n"
  "  T r = v;\n"
  "  if ((i & 31u) + (unsigned)off < 32u && i + (unsigned)off < t->bdim.x)\n"
  "    memcpy(&r, t->xchg + 16 * (i + (unsigned)off), sizeof r);\n"
  "  sc_emu->warp_sync();\n"
  "  (void)mask;\n"
  "  return r;\n"
  "}\n"
  "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
  "static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
  "static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }\n"
  "static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }\n"
  "static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }\n"
  "struct alignas(16) float4 { float x, y, z, w; };\n"
  "static inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }\n"
  "#endif\n";

static const char prelude[] =
  "// Generated by shardc (codegen/cuda). Semantics: codegen/kir.h.\n"
  "typedef unsigned short sc_half_bits;\n"
  "typedef unsigned short sc_bf16_bits;\n"
  "#define SC_DEV static __device__ __forceinline__\n"
  "#define SC_MEM __device__ __forceinline__\n"
  "#ifndef SC_CUDA_EMU\n"
  "SC_DEV float sc_h2f(unsigned short h) {\n"
  "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f;\n"
  "}\n"
  "SC_DEV unsigned short sc_f2h(float f) {\n"
  "  unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h;\n"
  "}\n"
  "#else /* the same conversions in C: round to nearest even, NaN stays NaN */\n"
  "SC_DEV float sc_h2f(unsigned short h) {\n"
  "  unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
  "  if (e == 0) { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }\n"
  "  return __uint_as_float(s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13)));\n"
  "}\n"
  "SC_DEV unsigned short sc_f2h(float f) {\n"
  "  unsigned u = __float_as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
  "  if (a > 0x7f800000u) return (unsigned short)(s | 0x7fffu);\n"
  "  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);\n"
  "  if (a < 0x38800000u) {\n"
  "    float v = __uint_as_float(a) * 16777216.0f;\n"
  "    unsigned q = (unsigned)v; float rem = v - (float)q;\n"
  "    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;\n"
  "    return (unsigned short)(s | q);\n"
  "  }\n"
  "  unsigned h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rest = a & 0x1fffu;\n"
  "  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;\n"
  "  return (unsigned short)(s | h);\n"
  "}\n"
  "#endif\n"
  "SC_DEV float sc_bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }\n"
  "SC_DEV unsigned short sc_f2bf(float f) {\n"
  "  unsigned u = __float_as_uint(f);\n"
  "  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n"
  "  u += 0x7fffu + ((u >> 16) & 1u);\n"
  "  return (unsigned short)(u >> 16);\n"
  "}\n"
  "SC_DEV float sc_round_h(float f) { return sc_h2f(sc_f2h(f)); }\n"
  "SC_DEV float sc_round_bf(float f) { return sc_bf2f(sc_f2bf(f)); }\n"
  /* the narrow float formats (ir/dtype.c's sc_narrow_*, step for step):
     mantissa bits, bias, width, kind (0 IEEE, 1 FN, 2 FNUZ, 3 none), max */
  "SC_DEV float sc_pow2(int k) { return __uint_as_float((unsigned)(k + 127) << 23); }\n"
  "SC_DEV float sc_mf_round(float x, int man, int bias, int kind, float mx) {\n"
  "  unsigned u = __float_as_uint(x);\n"
  "  if (x != x) return kind == 3 ? ((u >> 31) ? 0.0f : -0.0f) : x;\n"
  "  float a = fabsf(x);\n"
  "  int E = (int)((u >> 23) & 0xffu) - 127;\n"
  "  if (E < 1 - bias) E = 1 - bias;\n"
  "  float r = E > 127 ? a : rintf(a * sc_pow2(man - E)) * sc_pow2(E - man);\n"
  "  if (r > mx) r = kind == 0 ? __int_as_float(0x7f800000) : kind == 3 ? mx : __int_as_float(0x7fc00000);\n"
  "  if (kind == 2 && r == 0.0f) return 0.0f;\n"
  "  return (u >> 31) ? -r : r;\n"
  "}\n"
  "SC_DEV unsigned char sc_mf_enc(float r, int man, int bias, int bits, int kind) {\n"
  "  unsigned u = __float_as_uint(r), sign = (u >> 31) << (bits - 1), a = u & 0x7fffffffu;\n"
  "  if (a > 0x7f800000u) return (unsigned char)(kind == 2 ? 0x80u : sign | (kind == 1 ? 0x7fu : 0x7eu));\n"
  "  if (a == 0x7f800000u) return (unsigned char)(sign | 0x7cu);\n"
  "  int e = (int)(a >> 23) - 127 + bias;\n"
  "  unsigned c = e >= 1 ? ((unsigned)e << man) | ((a >> (23 - man)) & ((1u << man) - 1u))\n"
  "                      : (unsigned)(__uint_as_float(a) * sc_pow2(bias - 1 + man));\n"
  "  return (unsigned char)(sign | c);\n"
  "}\n"
  "SC_DEV float sc_mf_dec(unsigned char c, int man, int bias, int bits, int kind) {\n"
  "  unsigned mag = c & ((1u << (bits - 1)) - 1u), s = (c >> (bits - 1)) & 1u;\n"
  "  unsigned e = mag >> man, m = mag & ((1u << man) - 1u);\n"
  "  float nan = __int_as_float(0x7fc00000);\n"
  "  if (kind == 2 && c == 0x80) return nan;\n"
  "  if (kind == 1 && mag == 0x7fu) return s ? -nan : nan;\n"
  "  if (kind == 0 && e == (1u << (bits - 1 - man)) - 1u) { float v = m ? nan : __int_as_float(0x7f800000); return s ? -v : v; }\n"
  "  float v = e ? (float)((1u << man) + m) * sc_pow2((int)e - bias - man) : (float)m * sc_pow2(1 - bias - man);\n"
  "  return s ? -v : v;\n"
  "}\n"
  "SC_DEV float sc_e8m0_round(float x) {\n"
  "  unsigned u = __float_as_uint(x), e = (u >> 23) & 0xffu;\n"
  "  if (e == 0xffu) return __int_as_float(0x7fc00000);\n"
  "  if ((u & 0x7fffffu) && e < 0xfeu && (u & 0x7fffffffu) != 0x00400000u) e++;\n"
  "  return e ? __uint_as_float(e << 23) : __uint_as_float(0x00400000u);\n"
  "}\n"
  "SC_DEV float sc_e8m0_dec(unsigned char c) {\n"
  "  return c == 0xffu ? __int_as_float(0x7fc00000) : c ? __uint_as_float((unsigned)c << 23) : __uint_as_float(0x00400000u);\n"
  "}\n"
  /* float → 4/2-bit integer: truncated; out of range or NaN → 0 */
  "SC_DEV signed char sc_f2n(float x, float lo, float hi) {\n"
  "  float t = truncf(x);\n"
  "  return (signed char)(t >= lo && t <= hi ? (int)t : 0);\n"
  "}\n"
  /* integer division and remainder: truncating, x/0 == 0, x%0 == 0, and
     MIN/-1 wraps (no trap) */
  "template <typename T> SC_DEV T sc_idiv(T a, T b) {\n"
  "  if (b == 0) return (T)0;\n"
  "  if ((T)-1 < (T)0 && b == (T)-1) return (T)(0 - a);\n"
  "  return a / b;\n"
  "}\n"
  "template <typename T> SC_DEV T sc_imod(T a, T b) {\n"
  "  if (b == 0) return (T)0;\n"
  "  if ((T)-1 < (T)0 && b == (T)-1) return (T)0;\n"
  "  return a % b;\n"
  "}\n"
  "template <typename T> SC_DEV T sc_ipow(T a, T b) {\n"
  "  if ((T)-1 < (T)0 && b < (T)0) return a == (T)1 ? (T)1 : a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0;\n"
  "  unsigned long long base = (unsigned long long)(long long)a, x = (unsigned long long)(long long)b, r = 1;\n"
  "  while (x) { if (x & 1) r *= base; base *= base; x >>= 1; }\n"
  "  return (T)r;\n"
  "}\n"
  /* shifts: a count of the width or more (or a negative one) shifts every
     bit out; >> of a signed type is arithmetic */
  "template <typename T> SC_DEV T sc_shl(T a, T b) {\n"
  "  if ((unsigned long long)(long long)b >= 8 * sizeof(T)) return (T)0;\n"
  "  return (T)((unsigned long long)(long long)a << (int)b);\n"
  "}\n"
  "template <typename T> SC_DEV T sc_shr(T a, T b) {\n"
  "  bool sgn = (T)-1 < (T)0;\n"
  "  if ((unsigned long long)(long long)b >= 8 * sizeof(T)) return sgn && a < (T)0 ? (T)-1 : (T)0;\n"
  "  return sgn ? (T)((long long)a >> (int)b) : (T)((unsigned long long)a >> (int)b);\n"
  "}\n"
  "SC_DEV long long sc_ineg(long long a) { return (long long)(0ull - (unsigned long long)a); }\n"
  "SC_DEV float sc_min(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }\n"
  "SC_DEV float sc_max(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }\n"
  "SC_DEV double sc_min(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }\n"
  "SC_DEV double sc_max(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }\n"
  "template <typename T> SC_DEV T sc_min(T a, T b) { return a < b ? a : b; }\n"
  "template <typename T> SC_DEV T sc_max(T a, T b) { return a > b ? a : b; }\n"
  /* float → i64 as ONNX Cast / sc_store_f64: NaN → 0, saturating */
  "SC_DEV long long sc_f2i(double v) {\n"
  "  if (v != v) return 0;\n"
  "  if (v >= 9.2233720368547758e18) return 9223372036854775807ll;\n"
  "  if (v <= -9.2233720368547758e18) return -9223372036854775807ll - 1;\n"
  "  return (long long)v;\n"
  "}\n"
  "SC_DEV unsigned long long sc_f2u(double v) { return (unsigned long long)sc_f2i(v); }\n"
  "SC_DEV float sc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
  "SC_DEV double sc_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }\n"
  /* reduction operators */
  "struct sc_op_sum { template <typename T> SC_MEM T operator()(T a, T b) const { return a + b; } };\n"
  "struct sc_op_prod { template <typename T> SC_MEM T operator()(T a, T b) const { return a * b; } };\n"
  "struct sc_op_max { template <typename T> SC_MEM T operator()(T a, T b) const { return sc_max(a, b); } };\n"
  "struct sc_op_min { template <typename T> SC_MEM T operator()(T a, T b) const { return sc_min(a, b); } };\n"
  /* ARGMAX/ARGMIN: (value, index); the first extreme wins, NaN counts as
     the extreme (as numpy's argmax/argmin) */
  "template <typename T> struct sc_arg { T v; long long i; };\n"
  "template <typename T> SC_DEV bool sc_better_max(T a, T b) { return a > b || (a != a && b == b); }\n"
  "template <typename T> SC_DEV bool sc_better_min(T a, T b) { return a < b || (a != a && b == b); }\n"
  "template <typename T> SC_DEV bool sc_same(T a, T b) { return a == b || (a != a && b != b); }\n"
  "struct sc_op_argmax { template <typename T> SC_MEM sc_arg<T> operator()(sc_arg<T> a, sc_arg<T> b) const {\n"
  "  if (sc_better_max(b.v, a.v) || (sc_same(a.v, b.v) && b.i < a.i)) return b; return a; } };\n"
  "struct sc_op_argmin { template <typename T> SC_MEM sc_arg<T> operator()(sc_arg<T> a, sc_arg<T> b) const {\n"
  "  if (sc_better_min(b.v, a.v) || (sc_same(a.v, b.v) && b.i < a.i)) return b; return a; } };\n"
  "template <typename T> SC_DEV T sc_shfl(T v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }\n"
  "SC_DEV bool sc_shfl(bool v, int off) { return __shfl_down_sync(0xffffffffu, (int)v, off) != 0; }\n"
  "SC_DEV signed char sc_shfl(signed char v, int off) { return (signed char)__shfl_down_sync(0xffffffffu, (int)v, off); }\n"
  "SC_DEV unsigned char sc_shfl(unsigned char v, int off) { return (unsigned char)__shfl_down_sync(0xffffffffu, (int)v, off); }\n"
  "SC_DEV short sc_shfl(short v, int off) { return (short)__shfl_down_sync(0xffffffffu, (int)v, off); }\n"
  "SC_DEV unsigned short sc_shfl(unsigned short v, int off) { return (unsigned short)__shfl_down_sync(0xffffffffu, (int)v, off); }\n"
  "template <typename T> SC_DEV sc_arg<T> sc_shfl(sc_arg<T> v, int off) {\n"
  "  sc_arg<T> r; r.v = sc_shfl(v.v, off); r.i = sc_shfl(v.i, off); return r;\n"
  "}\n"
  /* Block reduction: all threads of the block call it with their partial,
     all get the result. blockDim.x is a multiple of 32, at most 1024. */
  "template <typename T, typename F> SC_DEV T sc_block_reduce(T v, F f) {\n"
  "  __shared__ T sh[32];\n"
  "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
  "  const int nw = (int)(blockDim.x >> 5);\n"
  "  for (int off = 16; off > 0; off >>= 1) v = f(v, sc_shfl(v, off));\n"
  "  __syncthreads();\n"
  "  if (lane == 0) sh[warp] = v;\n"
  "  __syncthreads();\n"
  "  if (warp == 0) {\n"
  "    if (lane < nw) v = sh[lane];\n"
  "    for (int off = 16; off > 0; off >>= 1) {\n"
  "      T o = sc_shfl(v, off);\n"
  "      if (lane + off < nw) v = f(v, o);\n"
  "    }\n"
  "    if (lane == 0) sh[0] = v;\n"
  "  }\n"
  "  __syncthreads();\n"
  "  return sh[0];\n"
  "}\n"
  "\n";

/* ----------------------------------------------------------------- types -- */

/* Type of a value in registers. */
static const char *ctype(sc_dtype t) {
  if (sc_dtype_is_narrow(t)) return sc_dtype_is_float(t) ? "float" : sc_dtype_is_signed(t) ? "signed char" : "unsigned char";
  switch (t) {
  case SC_DTYPE_F32: case SC_DTYPE_F16: case SC_DTYPE_BF16: return "float";
  case SC_DTYPE_F64: return "double";
  case SC_DTYPE_BOOL: return "bool";
  case SC_DTYPE_I8: return "signed char";
  case SC_DTYPE_U8: return "unsigned char";
  case SC_DTYPE_I16: return "short";
  case SC_DTYPE_U16: return "unsigned short";
  case SC_DTYPE_I32: return "int";
  case SC_DTYPE_U32: return "unsigned int";
  case SC_DTYPE_I64: return "long long";
  case SC_DTYPE_U64: return "unsigned long long";
  default: return NULL;
  }
}

/* Type of an element in memory. */
static const char *stype(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F16: return "sc_half_bits";
  case SC_DTYPE_BF16: return "sc_bf16_bits";
  case SC_DTYPE_BOOL: return "unsigned char";
  default: return sc_dtype_is_narrow(t) ? (sc_dtype_is_signed(t) ? "signed char" : "unsigned char") : ctype(t);
  }
}

static bool is_float(sc_dtype t) { return sc_dtype_is_float(t); }
static bool is_narrow_float(sc_dtype t) { return sc_dtype_is_narrow(t) && is_float(t); }

/* A narrow float format's arguments to the prelude's sc_mf_* ("man, bias"
 * then ", bits, kind" or ", kind, max"), as ir/dtype.c's sc_minifloat. */
static void mf_args(char *buf, size_t n, sc_dtype t, bool enc) {
  sc_minifloat f;
  SC_ASSERT(sc_minifloat_of(t, &f));
  if (enc) snprintf(buf, n, "%d, %d, %d, %d", f.man, f.bias, f.bits, (int)f.kind);
  else snprintf(buf, n, "%d, %d, %d, %.1ff", f.man, f.bias, (int)f.kind, (double)f.max);
}

/* The rounding of f32 expression `s` to narrow float t (a register value). */
static void emit_mf_round(sbuf *b, sc_dtype t, const char *s) {
  char a[64];
  if (t == SC_DTYPE_F8E8M0) { sb_printf(b, "sc_e8m0_round(%s)", s); return; }
  mf_args(a, sizeof a, t, false);
  sb_printf(b, "sc_mf_round(%s, %s)", s, a);
}

/* ------------------------------------------------------- kernel analysis -- */

typedef struct affine {
  bool ok;    /* value = c * v_last + rest, rest independent of v_last */
  int64_t c;
  bool m4;    /* rest is always a multiple of 4 */
} affine;

typedef struct emitter {
  sbuf *b;
  const kir_kernel *k;
  const sc_program *p;
  sc_diag *diag;
  sc_cuda_launch cfg;
  int lanes;           /* 1, or 4 in vectorised kernels */
  uint8_t *dep_inner;  /* expr depends on KIR_INNER */
  uint8_t *dep_last;   /* expr depends on the last outer var (lanes > 1) */
  uint8_t *done;       /* invariant expr already emitted at point level */
  uint8_t *mark;       /* scratch: exprs needed by the current phase */
  affine *aff;
  bool *restrict_ok;   /* per param */
  bool reads_written;  /* some LOAD reads a written param */
  sc_status st;
} emitter;

static sc_status fail(emitter *e, sc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status fail(emitter *e, sc_status s, const char *fmt, ...) {
  if (e->st == SC_OK) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sc_diag_set(e->diag, s, e->k ? e->k->name : NULL, NULL, "cuda: %s", msg);
    e->st = s;
  }
  return s;
}

static int64_t outer_points(const kir_kernel *k) {
  int64_t n = 1;
  for (int32_t d = 0; d < k->outer_rank; d++)
    if (!sc_mul_i64(n, k->outer_dims[d], &n)) return INT64_MAX;
  return n;
}

static void analyse_deps(const kir_kernel *k, uint8_t *dep, int32_t var) {
  /* two sweeps: a REG's dependence comes from its phase's value, which has
     a smaller id in practice; the second sweep makes it order-independent */
  for (int sweep = 0; sweep < 2; sweep++)
    for (int32_t i = 0; i < k->n_exprs; i++) {
      const kir_expr *x = &k->exprs[i];
      uint8_t d = 0;
      if (x->op == KIR_VAR) d = x->var == var;
      else if (x->op == KIR_REG) {
        /* a REG is the same for every inner index; it varies with the
           outer point, so it depends on v_last when its value does */
        if (var != KIR_INNER && x->var >= 0 && x->var < k->n_phases) {
          const kir_phase *ph = &k->phases[x->var];
          d = ph->value >= 0 && ph->value < k->n_exprs && dep[ph->value];
        }
      } else {
        if (x->a >= 0) d |= dep[x->a];
        if (x->b >= 0) d |= dep[x->b];
        if (x->c >= 0) d |= dep[x->c];
      }
      dep[i] = d;
    }
}

static void analyse_affine(emitter *e) {
  const kir_kernel *k = e->k;
  int32_t last = k->outer_rank - 1;
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *x = &k->exprs[i];
    affine r = {true, 0, false};
    if (!e->dep_last[i]) {
      if (x->op == KIR_CONST && sc_dtype_is_int(x->dtype)) r.m4 = x->i % 4 == 0;
      else if (x->op == KIR_ADD || x->op == KIR_SUB)
        r.m4 = e->aff[x->a].m4 && e->aff[x->b].m4;
      else if (x->op == KIR_MUL && x->dtype == SC_DTYPE_I64)
        r.m4 = e->aff[x->a].m4 || e->aff[x->b].m4;
      e->aff[i] = r;
      continue;
    }
    if (x->dtype != SC_DTYPE_I64) { r.ok = false; e->aff[i] = r; continue; }
    switch (x->op) {
    case KIR_VAR:
      r.c = 1; r.m4 = true; (void)last;
      break;
    case KIR_ADD: case KIR_SUB: {
      affine a = e->aff[x->a], b = e->aff[x->b];
      r.ok = a.ok && b.ok;
      r.c = x->op == KIR_ADD ? a.c + b.c : a.c - b.c;
      r.m4 = a.m4 && b.m4;
      break;
    }
    case KIR_MUL: {
      const kir_expr *xa = &k->exprs[x->a], *xb = &k->exprs[x->b];
      affine a = e->aff[x->a], b = e->aff[x->b];
      if (!e->dep_last[x->b] && xb->op == KIR_CONST && a.ok &&
          a.c > -1000000 && a.c < 1000000 && xb->i > -1000000 && xb->i < 1000000) {
        r.c = a.c * xb->i;
        r.m4 = a.m4 || xb->i % 4 == 0;
      } else if (!e->dep_last[x->a] && xa->op == KIR_CONST && b.ok &&
                 b.c > -1000000 && b.c < 1000000 && xa->i > -1000000 && xa->i < 1000000) {
        r.c = b.c * xa->i;
        r.m4 = b.m4 || xa->i % 4 == 0;
      } else {
        r.ok = false;
      }
      break;
    }
    default:
      r.ok = false;
    }
    e->aff[i] = r;
  }
}

/* A load or store of param `param` at index expr `idx` done as one 16-byte
 * access for the 4 lanes. */
static bool vec_access(const emitter *e, int32_t param, int32_t idx) {
  if (e->lanes != 4) return false;
  if (e->k->params[param].dtype != SC_DTYPE_F32) return false;
  affine a = e->aff[idx];
  return e->dep_last[idx] && a.ok && a.c == 1 && a.m4;
}

/* The threads that reduce a row of `inner` elements: one (serially) up to
 * SC_CUDA_SERIAL_INNER_MAX, else a block of 32 .. 256, the least power of
 * two that is not below inner. */
static int row_threads(int64_t inner) {
  if (inner <= SC_CUDA_SERIAL_INNER_MAX) return 1;
  int b = 32;
  while (b < 256 && b < inner) b *= 2;
  return b;
}

void sc_cuda_launch_config(const kir_kernel *k, sc_cuda_launch *out) {
  memset(out, 0, sizeof *out);
  out->points = outer_points(k);
  out->points_per_thread = 1;
  if (k->seg_inner) { /* a multi-tensor reduction: a block a segment, as many threads as
                         its widest segment's kernel had (at least a warp) */
    out->mode = SC_CUDA_BLOCK_PER_POINT;
    out->block = 32;
    for (int32_t s = 0; s < k->n_segs; s++)
      if (row_threads(k->seg_inner[s]) > out->block) out->block = row_threads(k->seg_inner[s]);
  } else if (k->inner <= SC_CUDA_SERIAL_INNER_MAX) {
    out->mode = SC_CUDA_THREAD_PER_POINT;
    out->block = 256;
  } else {
    out->mode = SC_CUDA_BLOCK_PER_POINT;
    out->block = row_threads(k->inner);
  }
  /* vectorise: elementwise kernels whose last outer dim is a multiple of 4
     and that have at least one contiguous f32 access */
  if (out->mode == SC_CUDA_THREAD_PER_POINT && k->inner == 1 && k->outer_rank > 0 &&
      k->n_segs == 0 && /* a segment may start at any element: no 16-byte alignment */
      k->outer_dims[k->outer_rank - 1] % 4 == 0 && k->n_exprs > 0) {
    bool reduce = false;
    for (int32_t i = 0; i < k->n_phases; i++)
      reduce |= k->phases[i].kind == KIR_PHASE_REDUCE;
    uint8_t *dep = sc_calloc((size_t)k->n_exprs, 1);
    affine *aff = sc_calloc((size_t)k->n_exprs, sizeof *aff);
    if (!reduce && dep && aff) {
      emitter e = {0};
      e.k = k;
      e.lanes = 4;
      e.dep_last = dep;
      e.aff = aff;
      analyse_deps(k, dep, k->outer_rank - 1);
      analyse_affine(&e);
      bool any = false;
      for (int32_t i = 0; i < k->n_exprs && !any; i++)
        if (k->exprs[i].op == KIR_LOAD) any = vec_access(&e, k->exprs[i].var, k->exprs[i].a);
      for (int32_t i = 0; i < k->n_phases && !any; i++)
        any = vec_access(&e, k->phases[i].out_param, k->phases[i].out_index);
      if (any) out->points_per_thread = 4;
    }
    sc_free(dep);
    sc_free(aff);
  }
  int64_t per_block = out->mode == SC_CUDA_BLOCK_PER_POINT
                          ? 1 : (int64_t)out->block * out->points_per_thread;
  out->grid = (out->points + per_block - 1) / per_block;
  if (out->grid < 1) out->grid = 1;
  if (out->grid > 2147483647) out->grid = 2147483647;
}

/* ------------------------------------------------------------ expressions -- */

/* Name of expr x as seen from lane `lane`. */
static void ename(const emitter *e, int32_t x, int lane, char *buf, size_t n) {
  if (e->lanes > 1 && e->dep_last[x]) snprintf(buf, n, "e%d_%d", (int)x, lane);
  else snprintf(buf, n, "e%d", (int)x);
}

static void float_literal(sbuf *b, sc_dtype t, double v) {
  bool dbl = t == SC_DTYPE_F64;
  if (isnan(v)) { sb_printf(b, dbl ? "__longlong_as_double(0x7ff8000000000000ll)" : "__int_as_float(0x7fc00000)"); return; }
  if (isinf(v)) {
    if (dbl) sb_printf(b, "__longlong_as_double(%s)", v > 0 ? "0x7ff0000000000000ll" : "(long long)0xfff0000000000000ull");
    else sb_printf(b, "__int_as_float(%s)", v > 0 ? "0x7f800000" : "(int)0xff800000u");
    return;
  }
  if (dbl) sb_printf(b, "(%a)", v);
  else sb_printf(b, "(%af)", (double)(float)v); /* f16/bf16 constants hold f32 values */
}

static void int_literal(sbuf *b, sc_dtype t, int64_t v) {
  switch (t) {
  case SC_DTYPE_BOOL: sb_printf(b, "%s", v ? "true" : "false"); return;
  case SC_DTYPE_U64: sb_printf(b, "%" PRIu64 "ull", (uint64_t)v); return;
  case SC_DTYPE_U32: sb_printf(b, "%" PRIu32 "u", (uint32_t)v); return;
  default:
    if (v == INT64_MIN) sb_printf(b, "(%s)(-9223372036854775807ll - 1)", ctype(t));
    else sb_printf(b, "(%s)%" PRId64 "ll", ctype(t), v);
  }
}

/* Converts C expression `s` of kir dtype `from` to dtype `to` (CAST). */
static void emit_cast(emitter *e, sc_dtype to, sc_dtype from, const char *s) {
  sbuf *b = e->b;
  if (to == SC_DTYPE_BOOL) {
    sb_printf(b, "(%s != 0)", s);
  } else if (from == SC_DTYPE_BOOL) {
    sb_printf(b, "(%s)(%s ? 1 : 0)", ctype(to), s);
  } else if (is_float(from) && sc_dtype_is_narrow(to) && !is_float(to)) {
    double hi = sc_narrow_max(to);
    sb_printf(b, "(%s)sc_f2n((float)%s, %.1ff, %.1ff)", ctype(to), s,
              sc_dtype_is_signed(to) ? -hi - 1 : 0.0, hi);
  } else if (sc_dtype_is_narrow(to) && !is_float(to)) { /* int → wrap to its bits */
    int sh = 8 - (int)sc_dtype_file_bits(to);
    if (sc_dtype_is_signed(to)) sb_printf(b, "(signed char)((signed char)((unsigned char)%s << %d) >> %d)", s, sh, sh);
    else sb_printf(b, "(unsigned char)((unsigned char)%s & %du)", s, (1 << (8 - sh)) - 1);
  } else if (is_narrow_float(to)) {
    char x[512];
    snprintf(x, sizeof x, "(float)%s%s", is_float(from) ? "" : "(double)", s);
    emit_mf_round(b, to, x);
  } else if (is_float(from) && sc_dtype_is_int(to)) {
    if (to == SC_DTYPE_U64) sb_printf(b, "sc_f2u((double)%s)", s);
    else sb_printf(b, "(%s)sc_f2i((double)%s)", ctype(to), s);
  } else if (to == SC_DTYPE_F16 || to == SC_DTYPE_BF16) {
    /* through f32 (from ints through f64, as the interpreter converts) */
    sb_printf(b, "%s((float)%s%s)", to == SC_DTYPE_F16 ? "sc_round_h" : "sc_round_bf",
              is_float(from) ? "" : "(double)", s);
  } else if (to == SC_DTYPE_F32 && !is_float(from)) {
    sb_printf(b, "(float)(double)%s", s);
  } else {
    sb_printf(b, "(%s)%s", ctype(to), s);
  }
}

/* s's bits (dtype from, in its register form) read as dtype to: through the
 * memory form, as an unsigned 64-bit pattern. */
static void emit_bitcast(emitter *e, sc_dtype to, sc_dtype from, const char *s) {
  char bits[160];
  switch (from) {
  case SC_DTYPE_F32: snprintf(bits, sizeof bits, "(unsigned long long)__float_as_uint(%s)", s); break;
  case SC_DTYPE_F64: snprintf(bits, sizeof bits, "(unsigned long long)__double_as_longlong(%s)", s); break;
  case SC_DTYPE_F16: snprintf(bits, sizeof bits, "(unsigned long long)sc_f2h(%s)", s); break;
  case SC_DTYPE_BF16: snprintf(bits, sizeof bits, "(unsigned long long)sc_f2bf(%s)", s); break;
  case SC_DTYPE_BOOL: snprintf(bits, sizeof bits, "(%s ? 1ull : 0ull)", s); break;
  default:
    if (from == SC_DTYPE_F8E8M0) {
      snprintf(bits, sizeof bits, "(unsigned long long)(__float_as_uint(%s) >> 23)", s);
    } else if (is_narrow_float(from)) {
      char a[64];
      mf_args(a, sizeof a, from, true);
      snprintf(bits, sizeof bits, "(unsigned long long)sc_mf_enc(%s, %s)", s, a);
    } else {
      snprintf(bits, sizeof bits, "(unsigned long long)(%s)%s", stype(from), s);
    }
    break;
  }
  if (is_narrow_float(to)) {
    char p[200];
    snprintf(p, sizeof p, "(unsigned char)%s", bits);
    if (to == SC_DTYPE_F8E8M0) {
      sb_printf(e->b, "sc_e8m0_dec(%s)", p);
    } else {
      char a[64];
      mf_args(a, sizeof a, to, true);
      sb_printf(e->b, "sc_mf_dec(%s, %s)", p, a);
    }
    return;
  }
  switch (to) {
  case SC_DTYPE_F32: sb_printf(e->b, "__uint_as_float((unsigned)%s)", bits); break;
  case SC_DTYPE_F64: sb_printf(e->b, "__longlong_as_double((long long)%s)", bits); break;
  case SC_DTYPE_F16: sb_printf(e->b, "sc_h2f((unsigned short)%s)", bits); break;
  case SC_DTYPE_BF16: sb_printf(e->b, "sc_bf2f((unsigned short)%s)", bits); break;
  case SC_DTYPE_BOOL: sb_printf(e->b, "((unsigned char)%s != 0)", bits); break;
  default: sb_printf(e->b, "(%s)%s", ctype(to), bits); break;
  }
}

static void emit_load_value(emitter *e, sc_dtype t, const char *ptr, const char *idx) {
  if (is_narrow_float(t)) {
    char a[64];
    if (t == SC_DTYPE_F8E8M0) {
      sb_printf(e->b, "sc_e8m0_dec(%s[%s])", ptr, idx);
    } else {
      mf_args(a, sizeof a, t, true);
      sb_printf(e->b, "sc_mf_dec(%s[%s], %s)", ptr, idx, a);
    }
    return;
  }
  switch (t) {
  case SC_DTYPE_F16: sb_printf(e->b, "sc_h2f(%s[%s])", ptr, idx); break;
  case SC_DTYPE_BF16: sb_printf(e->b, "sc_bf2f(%s[%s])", ptr, idx); break;
  case SC_DTYPE_BOOL: sb_printf(e->b, "(%s[%s] != 0)", ptr, idx); break;
  default: sb_printf(e->b, "%s[%s]", ptr, idx);
  }
}

static const char *unary_fn(kir_op op, bool dbl) {
  switch (op) {
  case KIR_EXP: return dbl ? "exp" : "expf";
  case KIR_LOG: return dbl ? "log" : "logf";
  case KIR_SQRT: return dbl ? "sqrt" : "sqrtf";
  case KIR_TANH: return dbl ? "tanh" : "tanhf";
  case KIR_ERF: return dbl ? "erf" : "erff";
  case KIR_SIN: return dbl ? "sin" : "sinf";
  case KIR_ATAN: return dbl ? "atan" : "atanf";
  case KIR_COS: return dbl ? "cos" : "cosf";
  case KIR_FLOOR: return dbl ? "floor" : "floorf";
  case KIR_CEIL: return dbl ? "ceil" : "ceilf";
  case KIR_ROUND: return dbl ? "rint" : "rintf";
  case KIR_ABS: return dbl ? "fabs" : "fabsf";
  case KIR_SIGMOID: return "sc_sigmoid";
  default: return NULL;
  }
}

/* Emits the declaration of expr x for lane `lane` (x is not a LOAD handled
 * as a vector access). */
static void emit_expr(emitter *e, int32_t x, int lane) {
  const kir_kernel *k = e->k;
  const kir_expr *ex = &k->exprs[x];
  sbuf *b = e->b;
  const char *ct = ctype(ex->dtype);
  if (!ct) { fail(e, SC_ERR_UNSUPPORTED, "expression %d has dtype %s", (int)x, sc_dtype_name(ex->dtype)); return; }
  char me[32], a[32] = "", bb[32] = "", c[32] = "";
  ename(e, x, lane, me, sizeof me);
  if (ex->a >= 0) ename(e, ex->a, lane, a, sizeof a);
  if (ex->b >= 0) ename(e, ex->b, lane, bb, sizeof bb);
  if (ex->c >= 0) ename(e, ex->c, lane, c, sizeof c);
  sc_dtype ta = ex->a >= 0 ? k->exprs[ex->a].dtype : SC_DTYPE_UNDEF;
  bool fl = is_float(ex->dtype), dbl = ex->dtype == SC_DTYPE_F64;
  /* f16/bf16 expressions compute in f32; only CAST and STORE round */
  sb_printf(b, "      const %s %s = ", ct, me);
  switch (ex->op) {
  case KIR_CONST:
    if (fl) float_literal(b, ex->dtype, ex->f);
    else int_literal(b, ex->dtype, ex->i);
    break;
  case KIR_VAR:
    if (ex->var == KIR_INNER) sb_printf(b, "(%s)r", ct);
    else if (e->lanes > 1 && ex->var == k->outer_rank - 1) sb_printf(b, "(%s)(v%d + %d)", ct, (int)ex->var, lane);
    else sb_printf(b, "(%s)v%d", ct, (int)ex->var);
    break;
  case KIR_REG:
    if (e->lanes > 1 && e->dep_last[x]) sb_printf(b, "reg%d_%d", (int)ex->var, lane);
    else sb_printf(b, "reg%d", (int)ex->var);
    break;
  case KIR_LOAD: {
    char ptr[32];
    snprintf(ptr, sizeof ptr, "p%d", (int)ex->var);
    emit_load_value(e, k->params[ex->var].dtype, ptr, a);
    break;
  }
  case KIR_ADD: sb_printf(b, "(%s)(%s + %s)", ct, a, bb); break;
  case KIR_SUB: sb_printf(b, "(%s)(%s - %s)", ct, a, bb); break;
  case KIR_MUL: sb_printf(b, "(%s)(%s * %s)", ct, a, bb); break;
  case KIR_DIV:
    if (fl) sb_printf(b, "%s / %s", a, bb);
    else sb_printf(b, "sc_idiv<%s>(%s, %s)", ct, a, bb);
    break;
  case KIR_MOD:
    if (fl) sb_printf(b, "%s(%s, %s)", dbl ? "fmod" : "fmodf", a, bb);
    else sb_printf(b, "sc_imod<%s>(%s, %s)", ct, a, bb);
    break;
  case KIR_SHL: case KIR_SHR:
    sb_printf(b, "sc_sh%c<%s>(%s, %s)", ex->op == KIR_SHL ? 'l' : 'r', ct, a, bb);
    break;
  case KIR_MIN: sb_printf(b, "sc_min(%s, %s)", a, bb); break;
  case KIR_MAX: sb_printf(b, "sc_max(%s, %s)", a, bb); break;
  case KIR_POW:
    if (fl) sb_printf(b, "%s(%s, %s)", dbl ? "pow" : "powf", a, bb);
    else sb_printf(b, "sc_ipow<%s>(%s, %s)", ct, a, bb);
    break;
  case KIR_NEG:
    if (ex->dtype == SC_DTYPE_I64) sb_printf(b, "sc_ineg(%s)", a);
    else sb_printf(b, "(%s)(-%s)", ct, a);
    break;
  case KIR_ABS:
    if (fl) sb_printf(b, "%s(%s)", dbl ? "fabs" : "fabsf", a);
    else if (ex->dtype == SC_DTYPE_I64) sb_printf(b, "(%s < 0 ? sc_ineg(%s) : %s)", a, a, a);
    else if (sc_dtype_is_signed(ex->dtype)) sb_printf(b, "(%s)(%s < 0 ? -%s : %s)", ct, a, a, a);
    else sb_printf(b, "%s", a);
    break;
  case KIR_RSQRT: sb_printf(b, "%s / %s(%s)", dbl ? "1.0" : "1.0f", dbl ? "sqrt" : "sqrtf", a); break;
  case KIR_RECIP: sb_printf(b, "%s / %s", dbl ? "1.0" : "1.0f", a); break;
  case KIR_EXP: case KIR_LOG: case KIR_SQRT: case KIR_TANH: case KIR_ERF:
  case KIR_SIN: case KIR_COS: case KIR_ATAN: case KIR_FLOOR: case KIR_CEIL: case KIR_ROUND:
  case KIR_SIGMOID:
    if (!fl) {
      if (ex->op == KIR_FLOOR || ex->op == KIR_CEIL || ex->op == KIR_ROUND) sb_printf(b, "%s", a);
      else fail(e, SC_ERR_UNSUPPORTED, "%s on %s", kir_op_name(ex->op), sc_dtype_name(ex->dtype));
    } else {
      sb_printf(b, "%s(%s)", unary_fn(ex->op, dbl), a);
    }
    break;
  case KIR_ISNAN:
    if (is_float(ta)) sb_printf(b, "(%s != %s)", a, a);
    else sb_printf(b, "false");
    break;
  case KIR_ISINF:
    if (ta == SC_DTYPE_F64) sb_printf(b, "(fabs(%s) == __longlong_as_double(0x7ff0000000000000ll))", a);
    else if (is_float(ta)) sb_printf(b, "(fabsf(%s) == __int_as_float(0x7f800000))", a);
    else sb_printf(b, "false");
    break;
  case KIR_CAST: emit_cast(e, ex->dtype, ta, a); break;
  case KIR_BITCAST: emit_bitcast(e, ex->dtype, ta, a); break;
  case KIR_EQ: sb_printf(b, "(%s == %s)", a, bb); break;
  case KIR_NE: sb_printf(b, "(%s != %s)", a, bb); break;
  case KIR_LT: sb_printf(b, "(%s < %s)", a, bb); break;
  case KIR_LE: sb_printf(b, "(%s <= %s)", a, bb); break;
  case KIR_GT: sb_printf(b, "(%s > %s)", a, bb); break;
  case KIR_GE: sb_printf(b, "(%s >= %s)", a, bb); break;
  case KIR_AND: case KIR_OR: case KIR_XOR: { /* logic on bools, bitwise on integers */
    static const char *const logic[] = {"&&", "||", "!="}, *const bits[] = {"&", "|", "^"};
    _Static_assert(KIR_OR == KIR_AND + 1 && KIR_XOR == KIR_AND + 2, "and, or, xor in a row");
    int j = (int)(ex->op - KIR_AND);
    if (ex->dtype == SC_DTYPE_BOOL) sb_printf(b, "(%s %s %s)", a, logic[j], bb);
    else sb_printf(b, "(%s)(%s %s %s)", ct, a, bits[j], bb);
    break;
  }
  case KIR_NOT:
    if (ex->dtype == SC_DTYPE_BOOL) sb_printf(b, "(!%s)", a);
    else sb_printf(b, "(%s)(~%s)", ct, a);
    break;
  case KIR_SELECT: sb_printf(b, "(%s ? %s : %s)", a, bb, c); break;
  default: fail(e, SC_ERR_UNSUPPORTED, "kir op %d", (int)ex->op);
  }
  sb_printf(b, ";\n");
}

/* Emits every expr with mark set, in id order, honouring the lanes. Loads
 * that are vector accesses are emitted once for the 4 lanes. */
static void emit_marked(emitter *e) {
  const kir_kernel *k = e->k;
  for (int32_t x = 0; x < k->n_exprs && e->st == SC_OK; x++) {
    if (!e->mark[x]) continue;
    const kir_expr *ex = &k->exprs[x];
    if (ex->op == KIR_LOAD && vec_access(e, ex->var, ex->a)) {
      char i0[32];
      ename(e, ex->a, 0, i0, sizeof i0);
      sb_printf(e->b, "      const float4 e%d_v = *(const float4 *)(p%d + %s);\n", (int)x, (int)ex->var, i0);
      static const char comp[4] = {'x', 'y', 'z', 'w'};
      for (int l = 0; l < 4; l++)
        sb_printf(e->b, "      const float e%d_%d = e%d_v.%c;\n", (int)x, l, (int)x, comp[l]);
      continue;
    }
    int n = e->lanes > 1 && e->dep_last[x] ? e->lanes : 1;
    for (int l = 0; l < n; l++) emit_expr(e, x, l);
  }
}

/* Marks the exprs reachable from root (operands first; marks only those
 * whose inner-dependence equals `inner` and that are not done yet). */
static void mark_from(emitter *e, int32_t root, bool inner) {
  const kir_kernel *k = e->k;
  if (root < 0) return;
  /* exprs are topological: walk down from root by a simple stack */
  int32_t stack[64];
  int32_t *big = NULL;
  int32_t *st = stack, cap = 64, n = 0;
  st[n++] = root;
  while (n > 0) {
    int32_t x = st[--n];
    if (e->mark[x] & 2) continue;
    e->mark[x] |= 2; /* visited */
    bool dep = e->dep_inner[x];
    if (dep == inner && !(!inner && e->done[x])) e->mark[x] |= 1;
    if (!dep && !inner) {
      /* operands of an invariant expr are invariant too */
    } else if (!dep && inner) {
      continue; /* already available at point level */
    }
    const kir_expr *ex = &k->exprs[x];
    int32_t ops[3] = {ex->a, ex->b, ex->c};
    for (int i = 0; i < 3; i++) {
      if (ops[i] < 0) continue;
      if (n == cap) {
        int32_t *nb = sc_malloc(sizeof *nb * (size_t)cap * 2);
        if (!nb) { fail(e, SC_ERR_NOMEM, "out of memory"); sc_free(big); return; }
        memcpy(nb, st, sizeof *nb * (size_t)n);
        sc_free(big);
        big = st = nb;
        cap *= 2;
      }
      st[n++] = ops[i];
    }
  }
  sc_free(big);
}

/* Emits the invariant exprs needed by roots (once per outer point), then
 * leaves mark[] holding the inner-dependent ones for the phase loop. */
static void prepare_phase(emitter *e, const int32_t *roots, int n_roots) {
  size_t n = (size_t)(e->k->n_exprs > 0 ? e->k->n_exprs : 0);
  memset(e->mark, 0, (size_t)n);
  for (int i = 0; i < n_roots; i++) mark_from(e, roots[i], false);
  for (size_t x = 0; x < n; x++) e->mark[x] &= 1;
  emit_marked(e);
  for (size_t x = 0; x < n; x++)
    if (e->mark[x]) e->done[x] = 1;
  memset(e->mark, 0, (size_t)n);
  for (int i = 0; i < n_roots; i++) mark_from(e, roots[i], true);
  for (size_t x = 0; x < n; x++) e->mark[x] &= 1;
}

static void emit_store(emitter *e, const kir_phase *ph, int lane) {
  const kir_kernel *k = e->k;
  char v[32], idx[32];
  ename(e, ph->value, lane, v, sizeof v);
  ename(e, ph->out_index, lane, idx, sizeof idx);
  sc_dtype t = k->params[ph->out_param].dtype;
  sc_dtype vt = k->exprs[ph->value].dtype;
  int p = (int)ph->out_param;
  const char *dbl = is_float(vt) ? "" : "(double)";
  switch (t) {
  case SC_DTYPE_F16: sb_printf(e->b, "      p%d[%s] = sc_f2h((float)%s%s);\n", p, idx, dbl, v); break;
  case SC_DTYPE_BF16: sb_printf(e->b, "      p%d[%s] = sc_f2bf((float)%s%s);\n", p, idx, dbl, v); break;
  case SC_DTYPE_BOOL: sb_printf(e->b, "      p%d[%s] = (unsigned char)(%s != 0);\n", p, idx, v); break;
  default:
    if (is_narrow_float(t)) {
      char x[160];
      snprintf(x, sizeof x, "(float)%s%s", dbl, v);
      sb_printf(e->b, "      p%d[%s] = ", p, idx);
      if (t == SC_DTYPE_F8E8M0) {
        sb_printf(e->b, "(unsigned char)(__float_as_uint(");
        emit_mf_round(e->b, t, x);
        sb_printf(e->b, ") >> 23);\n");
      } else {
        char a[64];
        mf_args(a, sizeof a, t, true);
        sb_printf(e->b, "sc_mf_enc(");
        emit_mf_round(e->b, t, x);
        sb_printf(e->b, ", %s);\n", a);
      }
      break;
    }
    if (t == vt) {
      sb_printf(e->b, "      p%d[%s] = %s;\n", p, idx, v);
    } else {
      sb_printf(e->b, "      p%d[%s] = (%s)", p, idx, stype(t));
      emit_cast(e, t, vt, v);
      sb_printf(e->b, ";\n");
    }
  }
}

static void reduce_init(emitter *e, kir_reduce_op rop, sc_dtype t) {
  sbuf *b = e->b;
  bool fl = is_float(t);
  switch (rop) {
  case KIR_RED_SUM: sb_printf(b, "(%s)0", ctype(t)); break;
  case KIR_RED_PROD: sb_printf(b, "(%s)1", ctype(t)); break;
  case KIR_RED_MAX: case KIR_RED_ARGMAX:
    if (fl) float_literal(b, t, -INFINITY);
    else if (t == SC_DTYPE_BOOL) sb_printf(b, "false");
    else if (sc_dtype_is_signed(t)) int_literal(b, t, t == SC_DTYPE_I64 ? INT64_MIN : t == SC_DTYPE_I32 ? INT32_MIN : t == SC_DTYPE_I16 ? INT16_MIN : INT8_MIN);
    else sb_printf(b, "(%s)0", ctype(t));
    break;
  case KIR_RED_MIN: case KIR_RED_ARGMIN:
    if (fl) float_literal(b, t, INFINITY);
    else if (t == SC_DTYPE_BOOL) sb_printf(b, "true");
    else if (sc_dtype_is_signed(t)) int_literal(b, t, t == SC_DTYPE_I64 ? INT64_MAX : t == SC_DTYPE_I32 ? INT32_MAX : t == SC_DTYPE_I16 ? INT16_MAX : INT8_MAX);
    else sb_printf(b, "(%s)~0ull", ctype(t));
    break;
  default: fail(e, SC_ERR_UNSUPPORTED, "reduction %d", (int)rop);
  }
}

static const char *red_functor(kir_reduce_op rop) {
  static const char *names[KIR_RED_COUNT] = {"sc_op_sum", "sc_op_prod", "sc_op_max",
                                             "sc_op_min", "sc_op_argmax", "sc_op_argmin"};
  return names[rop];
}

/* One phase. In block mode the loop over r strides by blockDim.x. */
static void emit_phase(emitter *e, int32_t pi, bool block) {
  const kir_kernel *k = e->k;
  const kir_phase *ph = &k->phases[pi];
  sbuf *b = e->b;
  int32_t roots[2] = {ph->value, ph->kind == KIR_PHASE_STORE ? ph->out_index : -1};
  if (ph->value < 0 || ph->value >= k->n_exprs ||
      (ph->kind == KIR_PHASE_STORE && (ph->out_index < 0 || ph->out_index >= k->n_exprs ||
                                       ph->out_param < 0 || ph->out_param >= k->n_params))) {
    fail(e, SC_ERR_INVALID, "phase %d is malformed", (int)pi);
    return;
  }
  sb_printf(b, "      // phase %d: %s\n", (int)pi,
            ph->kind == KIR_PHASE_STORE ? "store" : "reduce");
  prepare_phase(e, roots, 2);
  /* a multi-tensor reduction's segment: its extent nr, walked by its
     kernel's rs threads (the others hold the identity), so that it reduces
     in its own kernel's order: the same bits */
  const char *loop =
      k->seg_inner ? "for (long long r = threadIdx.x; r < nr && (long long)threadIdx.x < rs; r += rs)"
      : block      ? "for (long long r = threadIdx.x; r < %lld; r += blockDim.x)"
                   : "for (long long r = 0; r < %lld; ++r)";
  bool arg = ph->kind == KIR_PHASE_REDUCE &&
             (ph->rop == KIR_RED_ARGMAX || ph->rop == KIR_RED_ARGMIN);
  int nl = e->lanes > 1 && (e->dep_last[ph->value] ||
                            (ph->kind == KIR_PHASE_STORE && e->dep_last[ph->out_index]))
               ? e->lanes : 1;
  if (ph->kind == KIR_PHASE_REDUCE) {
    if (ph->rop < 0 || ph->rop >= KIR_RED_COUNT) { fail(e, SC_ERR_UNSUPPORTED, "reduction"); return; }
    sc_dtype vt = k->exprs[ph->value].dtype;
    sc_dtype at = ph->acc_dtype; /* ARG*: values compared in acc_dtype */
    if (!ctype(at) || !ctype(ph->acc_dtype)) { fail(e, SC_ERR_UNSUPPORTED, "accumulator dtype"); return; }
    for (int l = 0; l < nl; l++) {
      const char *sfx = nl > 1 ? (const char *[]){"_0", "_1", "_2", "_3"}[l] : "";
      if (arg) {
        sb_printf(b, "      sc_arg<%s> acc%d%s; acc%d%s.v = ", ctype(at), (int)pi, sfx, (int)pi, sfx);
        reduce_init(e, ph->rop, at);
        sb_printf(b, "; acc%d%s.i = 9223372036854775807ll;\n", (int)pi, sfx);
      } else {
        sb_printf(b, "      %s acc%d%s = ", ctype(at), (int)pi, sfx);
        reduce_init(e, ph->rop, at);
        sb_printf(b, ";\n");
      }
    }
    sb_printf(b, "      ");
    sb_printf(b, loop, (long long)k->inner);
    sb_printf(b, " {\n");
    emit_marked(e);
    for (int l = 0; l < nl; l++) {
      const char *sfx = nl > 1 ? (const char *[]){"_0", "_1", "_2", "_3"}[l] : "";
      char v[32];
      ename(e, ph->value, l, v, sizeof v);
      if (arg) sb_printf(b, "      { sc_arg<%s> x; x.v = ", ctype(at));
      else sb_printf(b, "      acc%d%s = %s()(acc%d%s, ", (int)pi, sfx, red_functor(ph->rop), (int)pi, sfx);
      if (at == vt) sb_printf(b, "%s", v);
      else emit_cast(e, at, vt, v);
      if (arg)
        sb_printf(b, "; x.i = r; acc%d%s = %s()(acc%d%s, x); }\n", (int)pi, sfx,
                  red_functor(ph->rop), (int)pi, sfx);
      else
        sb_printf(b, ");\n");
    }
    sb_printf(b, "      }\n");
    for (int l = 0; l < nl; l++) {
      const char *sfx = nl > 1 ? (const char *[]){"_0", "_1", "_2", "_3"}[l] : "";
      if (block)
        sb_printf(b, "      acc%d%s = sc_block_reduce(acc%d%s, %s());\n", (int)pi, sfx,
                  (int)pi, sfx, red_functor(ph->rop));
      if (arg)
        sb_printf(b, "      const long long reg%d%s = acc%d%s.i;\n", (int)pi, sfx, (int)pi, sfx);
      else
        sb_printf(b, "      const %s reg%d%s = acc%d%s;\n", ctype(at), (int)pi, sfx, (int)pi, sfx);
    }
  } else {
    bool vstore = vec_access(e, ph->out_param, ph->out_index);
    /* a store whose value and index do not depend on r writes the same
       element inner times: once is the same */
    bool once = !e->dep_inner[ph->value] && !e->dep_inner[ph->out_index];
    if (once && block) sb_printf(b, "      if (threadIdx.x == 0) {\n");
    else if (once || k->inner == 1) sb_printf(b, "      {\n      const long long r = 0; (void)r;\n");
    else {
      sb_printf(b, "      ");
      sb_printf(b, loop, (long long)k->inner);
      sb_printf(b, " {\n");
    }
    emit_marked(e);
    if (vstore) {
      char i0[32], v[4][32];
      ename(e, ph->out_index, 0, i0, sizeof i0);
      for (int l = 0; l < 4; l++) ename(e, ph->value, l, v[l], sizeof v[l]);
      sb_printf(b, "      *(float4 *)(p%d + %s) = make_float4(%s, %s, %s, %s);\n",
                (int)ph->out_param, i0, v[0], v[1], v[2], v[3]);
    } else {
      for (int l = 0; l < nl; l++) emit_store(e, ph, l);
    }
    sb_printf(b, "      }\n");
    /* later phases may read what this one wrote, at other r: in a block,
       other threads wrote it */
    if (block && e->reads_written) sb_printf(b, "      __syncthreads();\n");
  }
}

static int32_t storage_root(const sc_program *p, int32_t b) {
  for (int guard = 0; guard < 64 && b >= 0 && b < p->n_buffers &&
                      p->buffers[b].kind == SC_BUF_VIEW; guard++)
    b = p->buffers[b].alias_of;
  return b;
}

/* Whether params a and b may share memory: the same root buffer, or (after
 * the memory plan, which reuses storage in place) overlapping arena slots. */
static bool same_storage(const emitter *e, int32_t a, int32_t b) {
  int32_t ba = e->k->params[a].buffer, bb = e->k->params[b].buffer;
  if (!e->p) return ba == bb;
  ba = storage_root(e->p, ba);
  bb = storage_root(e->p, bb);
  if (ba == bb) return true;
  if (ba < 0 || bb < 0 || ba >= e->p->n_buffers || bb >= e->p->n_buffers) return true;
  const sc_buffer *x = &e->p->buffers[ba], *y = &e->p->buffers[bb];
  if (x->kind == SC_BUF_CONST || y->kind == SC_BUF_CONST) return false;
  if (x->offset < 0 || y->offset < 0) return false; /* distinct until planned */
  return x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
}

/* The segment of point o: a binary search over the starts of segments
 * [lo, hi], as nested conditionals on constants. */
static void emit_segment_search(emitter *e, int32_t lo, int32_t hi) {
  if (lo == hi) {
    sb_printf(e->b, "%d", (int)lo);
    return;
  }
  int32_t mid = lo + (hi - lo + 1) / 2;
  sb_printf(e->b, "(o < %lldll ? ", (long long)e->k->seg_start[mid]);
  emit_segment_search(e, lo, mid - 1);
  sb_printf(e->b, " : ");
  emit_segment_search(e, mid, hi);
  sb_printf(e->b, ")");
}

/* A multi-tensor kernel's point o (kir.h, n_segs): its segment sg, the
 * segment's params as p<j> (template param j, from the table a<i>) and
 * v0, the element in the segment. A template param is __restrict__ when
 * it is in every segment. */
static void emit_segment(emitter *e) {
  const kir_kernel *k = e->k;
  sbuf *b = e->b;
  int32_t n = k->seg_params;
  sb_printf(b, "    const int sg = ");
  emit_segment_search(e, 0, k->n_segs - 1);
  sb_printf(b, ";\n");
  for (int32_t j = 0; j < n; j++) {
    bool r = true;
    for (int32_t s = 0; s < k->n_segs; s++) r &= e->restrict_ok[s * n + j];
    sb_printf(b, "    %s%s *%sp%d;\n", k->params[j].written ? "" : "const ",
              stype(k->params[j].dtype), r ? "__restrict__ " : "", (int)j);
  }
  sb_printf(b, "    long long v0;\n");
  if (k->seg_inner) sb_printf(b, "    long long nr, rs;\n");
  sb_printf(b, "    switch (sg) {\n");
  for (int32_t s = 0; s < k->n_segs; s++) {
    if (s + 1 < k->n_segs) sb_printf(b, "    case %d:", (int)s);
    else sb_printf(b, "    default:");
    sb_printf(b, " v0 = o - %lldll;", (long long)k->seg_start[s]);
    if (k->seg_inner)
      sb_printf(b, " nr = %lldll; rs = %d;", (long long)k->seg_inner[s],
                row_threads(k->seg_inner[s]));
    for (int32_t j = 0; j < n; j++) sb_printf(b, " p%d = a%d;", (int)j, (int)(s * n + j));
    sb_printf(b, " break;\n");
  }
  sb_printf(b, "    }\n    (void)v0;\n");
}

static sc_status emit_kernel(sbuf *b, const kir_kernel *k, const sc_program *p, sc_diag *diag) {
  emitter e = {0};
  e.b = b;
  e.k = k;
  e.p = p;
  e.diag = diag;
  if (!k->name || !k->name[0]) return fail(&e, SC_ERR_INVALID, "kernel without a name");
  if (k->inner < 1) return fail(&e, SC_ERR_INVALID, "inner extent %lld", (long long)k->inner);
  if (k->outer_rank < 0 || k->outer_rank > SC_MAX_RANK)
    return fail(&e, SC_ERR_INVALID, "outer rank %d", (int)k->outer_rank);
  for (int32_t i = 0; i < k->n_params; i++)
    if (!ctype(k->params[i].dtype))
      return fail(&e, SC_ERR_UNSUPPORTED, "param %d has dtype %s", (int)i,
                  sc_dtype_name(k->params[i].dtype));
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *x = &k->exprs[i];
    if ((x->a >= i) || (x->b >= i) || (x->c >= i))
      return fail(&e, SC_ERR_INVALID, "expression %d is not topological", (int)i);
    if (x->op == KIR_LOAD && (x->var < 0 || x->var >= k->n_params))
      return fail(&e, SC_ERR_INVALID, "expression %d loads param %d", (int)i, (int)x->var);
    if (x->op == KIR_REG && (x->var < 0 || x->var >= k->n_phases))
      return fail(&e, SC_ERR_INVALID, "expression %d reads register %d", (int)i, (int)x->var);
    if (x->op == KIR_VAR && x->var != KIR_INNER && (x->var < 0 || x->var >= k->outer_rank))
      return fail(&e, SC_ERR_INVALID, "expression %d reads dim %d", (int)i, (int)x->var);
  }
  sc_cuda_launch_config(k, &e.cfg);
  e.lanes = e.cfg.points_per_thread;
  size_t n = (size_t)(k->n_exprs > 0 ? k->n_exprs : 1);
  e.dep_inner = sc_calloc(n, 1);
  e.dep_last = sc_calloc(n, 1);
  e.done = sc_calloc(n, 1);
  e.mark = sc_calloc(n, 1);
  e.aff = sc_calloc(n, sizeof *e.aff);
  e.restrict_ok = sc_calloc((size_t)(k->n_params > 0 ? k->n_params : 1), sizeof(bool));
  if (!e.dep_inner || !e.dep_last || !e.done || !e.mark || !e.aff || !e.restrict_ok) {
    fail(&e, SC_ERR_NOMEM, "out of memory");
    goto out;
  }
  analyse_deps(k, e.dep_inner, KIR_INNER);
  if (e.lanes > 1) {
    analyse_deps(k, e.dep_last, k->outer_rank - 1);
    analyse_affine(&e);
  }
  for (int32_t i = 0; i < k->n_params; i++) {
    e.restrict_ok[i] = true;
    for (int32_t j = 0; j < k->n_params; j++)
      if (j != i && (k->params[i].written || k->params[j].written) && same_storage(&e, i, j))
        e.restrict_ok[i] = false;
  }

  for (int32_t i = 0; i < k->n_exprs; i++)
    if (k->exprs[i].op == KIR_LOAD && k->params[k->exprs[i].var].written) e.reads_written = true;
  bool block = e.cfg.mode == SC_CUDA_BLOCK_PER_POINT;
  sb_printf(b, "// %s", k->name);
  if (k->origin) {
    sb_printf(b, " <- ");
    for (const char *s = k->origin; *s; s++) sb_printf(b, "%c", *s == '\n' ? ' ' : *s);
  }
  sb_printf(b, "\n// outer [");
  for (int32_t d = 0; d < k->outer_rank; d++)
    sb_printf(b, "%s%lld", d ? "," : "", (long long)k->outer_dims[d]);
  sb_printf(b, "] inner %lld: %s, block %d, %d point(s)/thread\n", (long long)k->inner,
            block ? "block per point" : "thread per point", e.cfg.block, e.lanes);
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", e.cfg.block, k->name);
  bool seg = k->n_segs > 0; /* params are the table: a<i>, and p<j> a segment's */
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *pp = &k->params[i];
    sb_printf(b, "%s%s%s *%s%c%d", i ? ", " : "", pp->written ? "" : "const ",
              stype(pp->dtype), e.restrict_ok[i] ? "__restrict__ " : "", seg ? 'a' : 'p', (int)i);
  }
  sb_printf(b, "%slong long begin, long long end) {\n", k->n_params ? ", " : "");
  if (block)
    sb_printf(b, "  for (long long o = begin + blockIdx.x; o < end; o += gridDim.x) {\n");
  else if (e.lanes > 1)
    sb_printf(b, "  for (long long o = begin + ((long long)blockIdx.x * blockDim.x + threadIdx.x) * %d;"
                 " o < end; o += (long long)gridDim.x * blockDim.x * %d) {\n", e.lanes, e.lanes);
  else
    sb_printf(b, "  for (long long o = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x;"
                 " o < end; o += (long long)gridDim.x * blockDim.x) {\n");
  if (seg) {
    emit_segment(&e);
  } else if (k->outer_rank > 0) {
    sb_printf(b, "    long long rem = o;\n");
    for (int32_t d = k->outer_rank - 1; d >= 0; d--) {
      if (d > 0)
        sb_printf(b, "    const long long v%d = rem %% %lldll; rem /= %lldll;\n", (int)d,
                  (long long)k->outer_dims[d], (long long)k->outer_dims[d]);
      else
        sb_printf(b, "    const long long v%d = rem;\n", (int)d);
    }
    sb_printf(b, "    (void)rem;\n");
  }
  sb_printf(b, "    {\n");
  for (int32_t pi = 0; pi < k->n_phases && e.st == SC_OK; pi++) emit_phase(&e, pi, block);
  sb_printf(b, "    }\n  }\n}\n");
  /* the emulator calls a kernel with the driver's kernelParams: an array of
   * pointers to each argument */
  sb_printf(b, "#ifdef SC_CUDA_EMU\nextern \"C\" __attribute__((visibility(\"default\"))) void %s"
               SC_CUDA_EMU_SUFFIX "(void **a) {\n  %s(", k->name, k->name);
  for (int32_t i = 0; i < k->n_params; i++)
    sb_printf(b, "%s*(%s%s **)a[%d]", i ? ", " : "", k->params[i].written ? "" : "const ",
              stype(k->params[i].dtype), (int)i);
  sb_printf(b, "%s*(long long *)a[%d], *(long long *)a[%d]);\n}\n", k->n_params ? ", " : "",
            (int)k->n_params, (int)k->n_params + 1);
  /* for the fake driver: how many 8-byte arguments, whether a block's
   * threads meet at barriers (they run as fibers), and what each pointer
   * param spans (written or read, bytes) */
  sb_printf(b, "extern \"C\" __attribute__((visibility(\"default\"))) const long long %s"
               SC_CUDA_EMU_INFO_SUFFIX "[] = {%d, %d, %d", k->name, (int)k->n_params + 2,
            block ? 1 : 0, (int)k->n_params);
  for (int32_t i = 0; i < k->n_params; i++)
    sb_printf(b, ", %d, %lldll", k->params[i].written ? 1 : 0,
              (long long)(k->params[i].numel * (int64_t)sc_dtype_size(k->params[i].dtype)));
  sb_printf(b, "};\n#endif\n\n");
out:
  sc_free(e.dep_inner);
  sc_free(e.dep_last);
  sc_free(e.done);
  sc_free(e.mark);
  sc_free(e.aff);
  sc_free(e.restrict_ok);
  if (e.st == SC_OK && b->oom) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
  return e.st;
}

sc_status sc_cuda_emit_kernels(kir_kernel *const *kernels, int32_t n_kernels,
                               const sc_program *p, char **src, sc_diag *diag) {
  *src = NULL;
  sbuf b = {0};
  sb_printf(&b, "%s%s", emu_prelude, prelude);
  for (int32_t i = 0; i < n_kernels; i++) {
    sc_status st = emit_kernel(&b, kernels[i], p, diag);
    if (st != SC_OK) { sc_free(b.s); return st; }
  }
  if (b.oom) { sc_free(b.s); return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory"); }
  *src = b.s;
  return SC_OK;
}

/* The SCATTER_ADD kernel for (value, index) dtypes (cuda.h): thread j
 * adds column j of every tuple's row in tuple order, so duplicate indices
 * sum in the CPU's order, bit for bit, with no atomics; the first index out
 * of range ends every thread's loop there (the runtime reports it). */
static void emit_scatter(sbuf *b, sc_dtype vt, sc_dtype it) {
  const char *v = vt == SC_DTYPE_F64 ? "double" : "float";
  const char *ix = it == SC_DTYPE_I64 ? "long long" : "int";
  char name[64];
  sc_cuda_scatter_kernel_name(vt, it, name, sizeof name);
  sb_printf(b,
            "extern \"C\" __global__ void __launch_bounds__(256)\n"
            "%s(%s *__restrict__ out, const %s *__restrict__ idx, const %s *__restrict__ upd,\n"
            "    long long rows, long long row, long long n) {\n"
            "  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < row;\n"
            "       j += (long long)gridDim.x * blockDim.x)\n"
            "    for (long long t = 0; t < n; t++) {\n"
            "      long long i = idx[t];\n"
            "      if (i < -rows || i >= rows) break;\n"
            "      out[(i < 0 ? i + rows : i) * row + j] += upd[t * row + j];\n"
            "    }\n"
            "}\n"
            "#ifdef SC_CUDA_EMU\n"
            "extern \"C\" __attribute__((visibility(\"default\"))) void %s" SC_CUDA_EMU_SUFFIX
            "(void **a) {\n"
            "  %s(*(%s **)a[0], *(const %s **)a[1], *(const %s **)a[2], *(long long *)a[3],\n"
            "     *(long long *)a[4], *(long long *)a[5]);\n"
            "}\n"
            "extern \"C\" __attribute__((visibility(\"default\"))) const long long %s"
            SC_CUDA_EMU_INFO_SUFFIX "[] = {6, 0, 0};\n"
            "#endif\n\n",
            name, v, ix, v, name, name, v, ix, v, name);
}

void sc_cuda_scatter_kernel_name(sc_dtype vt, sc_dtype it, char *buf, size_t n) {
  snprintf(buf, n, "sc_scatter_add_%s_%s", vt == SC_DTYPE_F64 ? "f64" : "f32",
           it == SC_DTYPE_I64 ? "i64" : "i32");
}


/* ------------------------------------------- implicit-GEMM convolutions -- */

enum { CONV_THREADS = 256, CONV_SMALL = 64, CONV_LARGE = 128 };

static bool buf_f32(const sc_program *p, int32_t b, int64_t need) {
  if (b < 0 || b >= p->n_buffers || p->buffers[b].dtype != SC_DTYPE_F32) return false;
  int64_t bytes;
  return sc_mul_i64(need, 4, &bytes) && p->buffers[b].bytes >= bytes;
}

bool sc_cuda_conv_config(const sc_program *p, int32_t step, sc_cuda_conv *out) {
  memset(out, 0, sizeof *out);
  if (!p || step < 0 || step >= p->n_steps || p->steps[step].kind != SC_STEP_GEMM) return false;
  const sc_gemm *g = &p->steps[step].gemm;
  const sc_conv_geom *v = &g->conv;
  if (!v->on || v->prep[1] < 0 || g->trans_a || g->trans_b || g->alpha != 1.0f) return false;
  bool bias = v->bias >= 0 && v->bias_kernel >= 0;
  if (!(g->beta == 0.0f || (g->beta == 1.0f && bias)) || g->bias >= 0) return false;
  int64_t dims[] = {v->c, v->h, v->w, v->kh, v->kw, v->sh, v->sw, v->dh, v->dw, v->oh, v->ow,
                    g->m, g->batch};
  for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
    if (dims[i] < 1) return false;
  if (v->pt < 0 || v->pl < 0) return false;
  int64_t K, P, NP, MK, xn, yn; /* the byte counts: buf_f32 checks them */
  if (!sc_mul_i64(v->c, v->kh, &K) || !sc_mul_i64(K, v->kw, &K) || K != g->k ||
      !sc_mul_i64(v->oh, v->ow, &P) || P != g->n || !sc_mul_i64(P, g->batch, &NP) ||
      !sc_mul_i64(g->m, K, &MK) || !sc_mul_i64(v->c, v->h, &xn) ||
      !sc_mul_i64(xn, v->w, &xn) || !sc_mul_i64(xn, g->batch, &xn) ||
      !sc_mul_i64(NP, g->m, &yn))
    return false;
  if (g->lda != K || (g->batch > 1 && g->stride_a != 0) || g->ldc != P ||
      (g->batch > 1 && g->stride_c != g->m * P))
    return false;
  if (!buf_f32(p, g->a, MK) || !buf_f32(p, v->x, xn) || !buf_f32(p, g->c, yn) ||
      (bias && !buf_f32(p, v->bias, g->m)))
    return false;
  int64_t large_tiles = ((g->m + CONV_LARGE - 1) / CONV_LARGE) * ((NP + CONV_LARGE - 1) / CONV_LARGE);
  bool large = g->m >= CONV_LARGE && large_tiles >= 2 * 132;
  out->bm = out->bn = large ? CONV_LARGE : CONV_SMALL;
  out->bk = large ? 32 : 16;
  out->block = CONV_THREADS;
  out->shared_bytes = 2 * (out->bm + out->bn) * out->bk * (int)sizeof(float);
  out->grid = ((g->m + out->bm - 1) / out->bm) * ((NP + out->bn - 1) / out->bn);
  if (out->grid > 0x7fffffff) out->grid = 0x7fffffff; /* grid-stride */
  out->x_bytes = xn * 4, out->w_bytes = MK * 4, out->bias_bytes = bias ? g->m * 4 : 0;
  out->y_bytes = yn * 4;
  snprintf(out->name, sizeof out->name, "sc_conv%d", (int)step);
  return true;
}

/* The tile loop every convolution kernel instantiates (sc_cuda_conv in
 * cuda.h). G holds the geometry as constants. Loads of the next k-slice
 * go to registers while the current one is multiplied out of shared
 * memory, one barrier per slice: slice s is stored into half s % 2, and a
 * thread storing slice s + 1 has passed the barrier after slice s's store,
 * which every thread reached after multiplying slice s - 1 (the half it
 * overwrites). */
static const char conv_prelude[] =
  "#ifndef SC_DYN_SHARED /* also defined by the attention kernels' template */\n"
  "#ifdef SC_CUDA_EMU\n"
  "#define SC_DYN_SHARED() ((float *)sc_emu->current()->dyn)\n"
  "#define SC_UNROLL\n"
  "#else\n"
  "#define SC_DYN_SHARED() sc_dyn_shared()\n"
  "#define SC_UNROLL _Pragma(\"unroll\")\n"
  "SC_DEV float *sc_dyn_shared() { extern __shared__ __align__(16) float sc_dyn[]; return sc_dyn; }\n"
  "#endif\n"
  "#endif\n"
  "template <class G, int BM, int BN, int BK, int TM, int TN>\n"
  "SC_DEV void sc_conv_igemm(const float *__restrict__ x, const float *__restrict__ w,\n"
  "                          const float *__restrict__ bias, float *__restrict__ y) {\n"
  "  constexpr long long K = G::C * G::KH * G::KW, P = G::OH * G::OW, NP = G::N * P;\n"
  "  constexpr int T = (BM / TM) * (BN / TN), AL = BM * BK / T, BL = BN * BK / T;\n"
  "  static_assert(T % BK == 0 && T % BN == 0 && AL * T == BM * BK && BL * T == BN * BK, \"tile\");\n"
  "  constexpr long long TILES_N = (NP + BN - 1) / BN, TILES = (G::M + BM - 1) / BM * TILES_N;\n"
  "  constexpr long long KT = (K + BK - 1) / BK;\n"
  "  float *As = SC_DYN_SHARED(), *Bs = As + 2 * BK * BM; /* [2][BK][BM], [2][BK][BN] */\n"
  "  const int tid = (int)threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);\n"
  "  const int a_k = tid % BK, a_m = tid / BK, b_j = tid % BN, b_k = tid / BN;\n"
  "  int half = 0;\n"
  "  for (long long t = blockIdx.x; t < TILES; t += gridDim.x) {\n"
  "    const long long m0 = t / TILES_N * BM, j0 = t % TILES_N * BN, j = j0 + b_j;\n"
  "    const bool jin = j < NP;\n"
  "    const long long pix = jin ? j % P : 0;\n"
  "    const long long ih0 = pix / G::OW * G::SH - G::PT, iw0 = pix % G::OW * G::SW - G::PL;\n"
  "    const float *xn = x + (jin ? j / P : 0) * (G::C * G::H * G::W);\n"
  "    float ra[AL], rb[BL], acc[TM][TN];\n"
  "    SC_UNROLL for (int i = 0; i < TM; i++)\n"
  "      SC_UNROLL for (int q = 0; q < TN; q++) acc[i][q] = 0.0f;\n"
  "    for (long long kt = 0; kt <= KT; kt++) {\n"
  "      if (kt > 0) { /* slice kt - 1: registers -> shared half, then multiplied */\n"
  "        float *a = As + half * BK * BM, *b = Bs + half * BK * BN;\n"
  "        SC_UNROLL for (int i = 0; i < AL; i++) a[a_k * BM + a_m + i * (T / BK)] = ra[i];\n"
  "        SC_UNROLL for (int i = 0; i < BL; i++) b[(b_k + i * (T / BN)) * BN + b_j] = rb[i];\n"
  "        __syncthreads();\n"
  "      }\n"
  "      if (kt < KT) { /* slice kt: global -> registers (the im2col computed here) */\n"
  "        const long long k0 = kt * BK;\n"
  "        SC_UNROLL for (int i = 0; i < AL; i++) {\n"
  "          const long long m = m0 + a_m + i * (T / BK), k = k0 + a_k;\n"
  "          ra[i] = m < G::M && k < K ? w[m * K + k] : 0.0f;\n"
  "        }\n"
  "        SC_UNROLL for (int i = 0; i < BL; i++) {\n"
  "          const long long k = k0 + b_k + i * (T / BN);\n"
  "          float v = 0.0f;\n"
  "          if (jin && k < K) {\n"
  "            const long long c = k / (G::KH * G::KW), r = k % (G::KH * G::KW);\n"
  "            const long long ih = ih0 + r / G::KW * G::DH, iw = iw0 + r % G::KW * G::DW;\n"
  "            if (ih >= 0 && ih < G::H && iw >= 0 && iw < G::W) v = xn[(c * G::H + ih) * G::W + iw];\n"
  "          }\n"
  "          rb[i] = v;\n"
  "        }\n"
  "      }\n"
  "      if (kt > 0) {\n"
  "        const float *a = As + half * BK * BM, *b = Bs + half * BK * BN;\n"
  "        SC_UNROLL for (int kk = 0; kk < BK; kk++) {\n"
  "          float av[TM], bv[TN];\n"
  "          SC_UNROLL for (int i = 0; i < TM; i++) av[i] = a[kk * BM + ty * TM + i];\n"
  "          SC_UNROLL for (int q = 0; q < TN; q++) bv[q] = b[kk * BN + tx * TN + q];\n"
  "          SC_UNROLL for (int i = 0; i < TM; i++)\n"
  "            SC_UNROLL for (int q = 0; q < TN; q++) acc[i][q] = fmaf(av[i], bv[q], acc[i][q]);\n"
  "        }\n"
  "        half ^= 1;\n"
  "      }\n"
  "    }\n"
  "    SC_UNROLL for (int i = 0; i < TM; i++) {\n"
  "      const long long m = m0 + ty * TM + i;\n"
  "      if (m >= G::M) continue;\n"
  "      const float bm = bias ? bias[m] : 0.0f;\n"
  "      SC_UNROLL for (int q = 0; q < TN; q++) {\n"
  "        const long long jj = j0 + tx * TN + q;\n"
  "        if (jj < NP) y[(jj / P * G::M + m) * P + jj % P] = acc[i][q] + bm;\n"
  "      }\n"
  "    }\n"
  "  }\n"
  "}\n\n";

static void emit_conv(sbuf *b, const sc_program *p, int32_t step, const sc_cuda_conv *cv) {
  const sc_gemm *g = &p->steps[step].gemm;
  const sc_conv_geom *v = &g->conv;
  int tm = cv->bm / 16, tn = cv->bn / 16; /* 16 x 16 threads */
  sb_printf(b,
            "struct %s_geom {\n"
            "  static constexpr long long N = %lld, M = %lld, C = %lld, H = %lld, W = %lld;\n"
            "  static constexpr long long KH = %lld, KW = %lld, SH = %lld, SW = %lld, DH = %lld, "
            "DW = %lld;\n"
            "  static constexpr long long PT = %lld, PL = %lld, OH = %lld, OW = %lld;\n"
            "};\n"
            "extern \"C\" __global__ void __launch_bounds__(%d)\n"
            "%s(const float *__restrict__ x, const float *__restrict__ w,\n"
            "    const float *__restrict__ bias, float *__restrict__ y) {\n"
            "  sc_conv_igemm<%s_geom, %d, %d, %d, %d, %d>(x, w, bias, y);\n"
            "}\n"
            "#ifdef SC_CUDA_EMU\n"
            "extern \"C\" __attribute__((visibility(\"default\"))) void %s" SC_CUDA_EMU_SUFFIX
            "(void **a) {\n"
            "  %s(*(const float **)a[0], *(const float **)a[1], *(const float **)a[2],\n"
            "     *(float **)a[3]);\n"
            "}\n"
            "extern \"C\" __attribute__((visibility(\"default\"))) const long long %s"
            SC_CUDA_EMU_INFO_SUFFIX "[] = {4, 1, 4, 0, %lld, 0, %lld, 0, %lld, 1, %lld};\n"
            "#endif\n\n",
            cv->name, (long long)g->batch, (long long)g->m, (long long)v->c, (long long)v->h,
            (long long)v->w, (long long)v->kh, (long long)v->kw, (long long)v->sh,
            (long long)v->sw, (long long)v->dh, (long long)v->dw, (long long)v->pt,
            (long long)v->pl, (long long)v->oh, (long long)v->ow, cv->block, cv->name, cv->name,
            cv->bm, cv->bn, cv->bk, tm, tn, cv->name, cv->name, cv->name,
            (long long)cv->x_bytes, (long long)cv->w_bytes, (long long)cv->bias_bytes,
            (long long)cv->y_bytes);
}

sc_status sc_cuda_emit_source(const sc_program *p, char **src, sc_diag *diag) {
  sc_status st = sc_cuda_emit_kernels(p->kernels, p->n_kernels, p, src, diag);
  if (st != SC_OK) return st;
  bool need[2][2] = {{false, false}, {false, false}};
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_SCATTER_ADD) continue;
    need[p->buffers[s->scatter.out].dtype == SC_DTYPE_F64]
        [p->buffers[s->scatter.indices].dtype == SC_DTYPE_I64] = true;
  }
  sbuf b = {.s = *src, .n = strlen(*src), .cap = strlen(*src) + 1};
  for (int v = 0; v < 2; v++)
    for (int x = 0; x < 2; x++)
      if (need[v][x])
        emit_scatter(&b, v ? SC_DTYPE_F64 : SC_DTYPE_F32, x ? SC_DTYPE_I64 : SC_DTYPE_I32);
  bool conv_prelude_done = false;
  for (int32_t i = 0; i < p->n_steps; i++) {
    sc_cuda_conv cv;
    if (!sc_cuda_conv_config(p, i, &cv)) continue;
    if (!conv_prelude_done) sb_printf(&b, "%s", conv_prelude);
    conv_prelude_done = true;
    emit_conv(&b, p, i, &cv);
  }
  *src = b.s;
  if (b.oom) {
    sc_free(b.s);
    *src = NULL;
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
  }
  if ((st = sc_cuda_attn_emit_program(p, src, diag)) != SC_OK) {
    sc_free(*src);
    *src = NULL;
  }
  return st;
}

/* ------------------------------------------- the communicator's reductions -- */

typedef struct reduce_type {
  sc_dtype t;
  const char *name, *store, *acc, *load, *round, *wrap; /* wrap: unsigned type, or NULL */
} reduce_type;

static const reduce_type REDUCE_TYPES[] = {
    {SC_DTYPE_F32, "f32", "float", "float", "", "", NULL},
    {SC_DTYPE_F64, "f64", "double", "double", "", "", NULL},
    {SC_DTYPE_F16, "f16", "unsigned short", "float", "sc_h2f", "sc_f2h", NULL},
    {SC_DTYPE_BF16, "bf16", "unsigned short", "float", "sc_bf2f", "sc_f2bf", NULL},
    {SC_DTYPE_I32, "i32", "int", "int", "", "", "unsigned"},
    {SC_DTYPE_I64, "i64", "long long", "long long", "", "", "unsigned long long"},
};
static const char *const REDUCE_OPS[3] = {"sum", "max", "min"};

bool sc_cuda_reduce_kernel_name(sc_dtype t, int op, char *buf, size_t n) {
  if (op < 0 || op > 2) return false;
  for (size_t i = 0; i < sizeof REDUCE_TYPES / sizeof *REDUCE_TYPES; i++)
    if (REDUCE_TYPES[i].t == t) {
      snprintf(buf, n, "sc_comm_reduce_%s_%s", REDUCE_TYPES[i].name, REDUCE_OPS[op]);
      return true;
    }
  return false;
}

/* One reduction kernel (cuda.h: sc_cuda_emit_reduce_source), its combine
 * step as sc_comm_reduce_arrays's. */
static void emit_reduce(sbuf *b, const reduce_type *rt, int op) {
  char name[64];
  sc_cuda_reduce_kernel_name(rt->t, op, name, sizeof name);
  const char *T = rt->store;
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d)\n%s(%s *__restrict__ dst",
            SC_CUDA_REDUCE_BLOCK, name, T);
  for (int q = 0; q < SC_CUDA_REDUCE_SRCS; q++) sb_printf(b, ", const %s *s%d", T, q);
  sb_printf(b, ",\n    long long n, long long n_src, long long bytes) {\n"
               "  const %s *s[%d] = {", T, SC_CUDA_REDUCE_SRCS);
  for (int q = 0; q < SC_CUDA_REDUCE_SRCS; q++) sb_printf(b, "%ss%d", q ? ", " : "", q);
  sb_printf(b, "};\n  (void)bytes;\n"
               "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
               "       i += (long long)gridDim.x * blockDim.x) {\n"
               "    %s a = %s(s[0][i]);\n"
               "    for (long long q = 1; q < n_src; q++) {\n"
               "      %s v = %s(s[q][i]);\n",
            rt->acc, rt->load, rt->acc, rt->load);
  if (op == 0 && rt->wrap)
    sb_printf(b, "      a = (%s)((%s)a + (%s)v);\n", rt->acc, rt->wrap, rt->wrap);
  else if (op == 0)
    sb_printf(b, "      a = a + v;\n");
  else
    sb_printf(b, "      %sa = v %c a ? v : a;\n", rt->wrap ? "" : "if (v != v || a != a) a = a + v;\n      else ",
              op == 1 ? '>' : '<');
  sb_printf(b, "    }\n    dst[i] = %s(a);\n  }\n}\n", rt->round);
  sb_printf(b, "#ifdef SC_CUDA_EMU\nextern \"C\" __attribute__((visibility(\"default\"))) void %s"
               SC_CUDA_EMU_SUFFIX "(void **a) {\n  %s(*(%s **)a[0]", name, name, T);
  for (int q = 0; q < SC_CUDA_REDUCE_SRCS; q++) sb_printf(b, ", *(const %s **)a[%d]", T, q + 1);
  int na = SC_CUDA_REDUCE_SRCS + 4;
  sb_printf(b, ",\n    *(long long *)a[%d], *(long long *)a[%d], *(long long *)a[%d]);\n}\n",
            na - 3, na - 2, na - 1);
  /* every pointer spans `bytes`, the last argument (cuda.h) */
  sb_printf(b, "extern \"C\" __attribute__((visibility(\"default\"))) const long long %s"
               SC_CUDA_EMU_INFO_SUFFIX "[] = {%d, 0, %d", name, na, SC_CUDA_REDUCE_SRCS + 1);
  for (int q = 0; q <= SC_CUDA_REDUCE_SRCS; q++) sb_printf(b, ", %d, %d", q == 0, -na);
  sb_printf(b, "};\n#endif\n\n");
}

sc_status sc_cuda_emit_reduce_source(char **src, sc_diag *diag) {
  *src = NULL;
  sbuf b = {0};
  sb_printf(&b, "%s%s", emu_prelude, prelude);
  for (size_t i = 0; i < sizeof REDUCE_TYPES / sizeof *REDUCE_TYPES; i++)
    for (int op = 0; op < 3; op++) emit_reduce(&b, &REDUCE_TYPES[i], op);
  if (b.oom) {
    sc_free(b.s);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "cuda: out of memory");
  }
  *src = b.s;
  return SC_OK;
}
