/* emit.c — one kir kernel → one LLVM function
 *     void NAME(void *const *bufs, int64_t begin, int64_t end)
 * computing the outer points with row-major linear index in [begin, end).
 *
 * Code shape (R = outer rank, D = the last outer extent):
 *
 *   entry:   if (begin >= end) return; param pointers; level-0 values
 *            o[0..R-2], j0 = multi-index of `begin` (the only div/mod)
 *   row:     while (lin < end):          level-1 values (need o[0..R-2])
 *              jend = min(D, j0 + end - lin)
 *   point:     for j in [j0, jend):      level-2 values (need j or a REG)
 *                phases (inner == 1: straight-line; else counted r-loops
 *                with level-3 values, those that need r)
 *              lin += jend - j0; j0 = 0; o odometer += 1 (carry, no div)
 *
 * Every expression is emitted once, at the outermost level its operands
 * allow (a "level" is the loop it must live in), so loop-invariant loads,
 * index arithmetic and broadcast values are hoisted by construction.
 * Level-3 values are re-emitted in each phase loop that uses them. For
 * elementwise kernels the j loop is a simple counted loop over affine
 * indices: LLVM's loop vectoriser handles it, inserting run-time overlap
 * checks between the buffers the memory plan may place together (a kernel
 * may run in place); params it keeps apart carry scoped-noalias metadata
 * (alias_scopes), which needs no check. Float SUM/PROD reductions carry
 * llvm.loop.vectorize.enable, which licenses reassociation (kir leaves
 * reduction order unspecified); float MAX/MIN loops over more than 16
 * elements try a vectorised integer-key loop first (fast_minmax), and
 * otherwise MAX/MIN/ARG* loops stay in order.
 *
 * Loop state lives in allocas that SROA/mem2reg promote; f16 is handled as
 * LLVM `half` (fpext/fptrunc: round to nearest even), bf16 by integer bit
 * operations (widen: shift; narrow: round to nearest even, NaN kept quiet),
 * bool as i8 0/1 in memory and i1 in registers. Integer DIV/MOD never trap:
 * x/0 = x%0 = 0 and MIN/-1 wraps, as kir_interpret defines. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "codegen/cpu/cpu_internal.h"

enum { L_ENTRY, L_ROW, L_POINT, L_INNER, L_COUNT };

typedef struct emitter {
  const sc_program *prog;    /* k's program (memory plan), or NULL */
  LLVMContextRef ctx;
  LLVMModuleRef m;
  const kir_kernel *k;
  sc_diag *diag;
  LLVMValueRef fn;
  LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, vd;
  LLVMBuilderRef b[L_COUNT]; /* insertion point of each level */
  LLVMBuilderRef ab;         /* allocas, at the top of the entry block */
  LLVMValueRef *ptr;         /* per param: typed pointer to its elements */
  LLVMValueRef *scope;       /* per param: !alias.scope of its accesses, or NULL */
  LLVMValueRef *noalias;     /* per param: !noalias of its accesses, or NULL */
  LLVMValueRef *val;         /* per expr: emitted value or NULL */
  uint8_t *lvl;              /* per expr: level */
  uint8_t *mark;             /* scratch: exprs a root needs */
  LLVMValueRef *reg;         /* per phase: its register (REDUCE) */
  int32_t *fill;             /* per expr: the phase that keeps it in a row cache, or -1 */
  LLVMValueRef *cache;       /* per expr: that row cache ([inner] x its type), or NULL */
  LLVMValueRef outer[SC_MAX_RANK];
  LLVMValueRef inner;        /* the r index (i64) */
  int32_t rank;              /* outer rank, >= 1 (rank 0 runs as [1]) */
  int64_t dims[SC_MAX_RANK];
} emitter;

static void set_alias_md(emitter *e, LLVMValueRef access, int32_t param);

/* ---- types ---- */

static bool is_f(sc_dtype t) { return sc_dtype_is_float(t); }
static bool is_signed(sc_dtype t) { return sc_dtype_is_signed(t); }

/* The type a value of dtype t has in registers. */
static LLVMTypeRef vty(emitter *e, sc_dtype t) {
  if (sc_dtype_is_narrow(t)) return vty(e, sc_dtype_compute(t));
  switch (t) {
  case SC_DTYPE_F32: case SC_DTYPE_F16: case SC_DTYPE_BF16: return e->f32;
  case SC_DTYPE_F64: return e->f64;
  case SC_DTYPE_BOOL: return e->i1;
  case SC_DTYPE_I8: case SC_DTYPE_U8: return e->i8;
  case SC_DTYPE_I16: case SC_DTYPE_U16: return e->i16;
  case SC_DTYPE_I32: case SC_DTYPE_U32: return e->i32;
  case SC_DTYPE_I64: case SC_DTYPE_U64: return e->i64;
  default: return NULL;
  }
}

/* The type of an element in memory. */
static LLVMTypeRef sty(emitter *e, sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F16: return e->f16;
  case SC_DTYPE_BF16: return e->i16;
  case SC_DTYPE_BOOL: return e->i8;
  default: return sc_dtype_is_narrow(t) ? e->i8 : vty(e, t);
  }
}

static LLVMValueRef ci(LLVMTypeRef t, int64_t v) {
  return LLVMConstInt(t, (unsigned long long)v, 1);
}

/* ---- intrinsics and libm ---- */

static LLVMValueRef call_intr(emitter *e, LLVMBuilderRef b, const char *name,
                              LLVMTypeRef *tys, unsigned n_tys, LLVMValueRef *args,
                              unsigned n_args) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  SC_ASSERT(id != 0);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->m, id, tys, n_tys);
  LLVMTypeRef ft = LLVMIntrinsicGetType(e->ctx, id, tys, n_tys);
  return LLVMBuildCall2(b, ft, f, args, n_args, "");
}

static LLVMValueRef intr1(emitter *e, LLVMBuilderRef b, const char *name,
                          LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return call_intr(e, b, name, &t, 1, &x, 1);
}

/* A pure libm function of one argument (tanhf, erff, ...). */
static LLVMValueRef libm1(emitter *e, LLVMBuilderRef b, const char *name,
                          LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
  LLVMValueRef f = LLVMGetNamedFunction(e->m, name);
  if (!f) {
    f = LLVMAddFunction(e->m, name, ft);
    const char *attrs[] = {"nounwind", "readnone", "willreturn"};
    for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++) {
      unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                                 LLVMCreateEnumAttribute(e->ctx, kind, 0));
    }
  }
  return LLVMBuildCall2(b, ft, f, &x, 1, "");
}

/* ---- vectorisable f32 math ----
 *
 * exp, tanh, erf (and sigmoid through exp) of f32 values (f16/bf16 compute
 * in f32 too) are emitted inline as straight-line code — selects, no
 * branches, no calls — so the loop vectoriser handles kernels that use them
 * (GELU, softmax). A libm call per element is both slow and a barrier to
 * vectorisation. f64 keeps the intrinsics / libm.
 *
 * Accuracy against the correctly rounded result, measured over every 61st
 * f32 bit pattern (docs/cpu-backend.md): exp <= 1 ulp (normal results;
 * subnormal results are rounded once, from an exact scaling), tanh <= 1
 * ulp, erf <= 6 ulp (absolute error <= 4e-7). The polynomials use
 * llvm.fmuladd: an FMA where the target has one. */

static LLVMValueRef fmuladd(emitter *e, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y,
                            LLVMValueRef z) {
  LLVMValueRef args[3] = {x, y, z};
  LLVMTypeRef t = LLVMTypeOf(x);
  return call_intr(e, b, "llvm.fmuladd", &t, 1, args, 3);
}

/* c[0] * x^(n-1) + ... + c[n-1], Horner. */
static LLVMValueRef horner(emitter *e, LLVMBuilderRef b, LLVMValueRef x, const double *c,
                           int n) {
  LLVMValueRef y = LLVMConstReal(e->f32, c[0]);
  for (int i = 1; i < n; i++) y = fmuladd(e, b, y, x, LLVMConstReal(e->f32, c[i]));
  return y;
}

static LLVMValueRef fsel_lt(LLVMBuilderRef b, LLVMValueRef x, double lim, LLVMValueRef y,
                            bool gt) {
  LLVMValueRef c = LLVMBuildFCmp(b, gt ? LLVMRealOGT : LLVMRealOLT, x,
                                 LLVMConstReal(LLVMTypeOf(x), lim), "");
  return LLVMBuildSelect(b, c, y, x, "");
}

/* Cephes expf: n = round(x log2 e), r = x - n ln 2 (in two parts), a
 * degree-7 polynomial for e^r, scaled by 2^n as 2^(n/2) * 2^(n - n/2) so
 * that results down to the subnormals are rounded once. x is clamped to
 * [-104, 88.8] (beyond: 0 and inf come out of the scaling); NaN passes. */
static LLVMValueRef fast_exp(emitter *e, LLVMBuilderRef b, LLVMValueRef x) {
  LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  LLVMValueRef xc = fsel_lt(b, x, 88.8, LLVMConstReal(e->f32, 88.8), true);
  xc = fsel_lt(b, xc, -104.0, LLVMConstReal(e->f32, -104.0), false);
  xc = LLVMBuildSelect(b, isnan, LLVMConstReal(e->f32, 0.0), xc, "");
  /* round to nearest even by adding and subtracting 1.5 * 2^23 (|.| < 2^22;
   * no fast-math, so LLVM keeps both operations) */
  LLVMValueRef magic = LLVMConstReal(e->f32, 12582912.0);
  LLVMValueRef t = LLVMBuildFMul(b, xc, LLVMConstReal(e->f32, 1.44269504088896341), "");
  LLVMValueRef n = LLVMBuildFSub(b, LLVMBuildFAdd(b, t, magic, ""), magic, "");
  LLVMValueRef r = fmuladd(e, b, n, LLVMConstReal(e->f32, -0.693359375), xc);
  r = fmuladd(e, b, n, LLVMConstReal(e->f32, 2.12194440e-4), r);
  static const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef y = horner(e, b, r, P, 6);
  y = fmuladd(e, b, y, LLVMBuildFMul(b, r, r, ""), r);
  y = LLVMBuildFAdd(b, y, LLVMConstReal(e->f32, 1.0), "");
  LLVMValueRef ni = LLVMBuildFPToSI(b, n, e->i32, "");
  LLVMValueRef n1 = LLVMBuildAShr(b, ni, ci(e->i32, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(b, ni, n1, "");
  LLVMValueRef s1 = LLVMBuildBitCast(
      b, LLVMBuildShl(b, LLVMBuildAdd(b, n1, ci(e->i32, 127), ""), ci(e->i32, 23), ""), e->f32,
      "");
  LLVMValueRef s2 = LLVMBuildBitCast(
      b, LLVMBuildShl(b, LLVMBuildAdd(b, n2, ci(e->i32, 127), ""), ci(e->i32, 23), ""), e->f32,
      "");
  LLVMValueRef res = LLVMBuildFMul(b, LLVMBuildFMul(b, y, s1, ""), s2, "");
  return LLVMBuildSelect(b, isnan, x, res, "");
}

/* Cephes tanhf: |x| < 0.625: x + x^3 P(x^2); else 1 - 2 / (e^{2|x|} + 1)
 * (e^{2|x|} = inf gives 1); the sign copied from x (tanh(-0) = -0). */
static LLVMValueRef fast_tanh(emitter *e, LLVMBuilderRef b, LLVMValueRef x) {
  LLVMValueRef ax = intr1(e, b, "llvm.fabs", x);
  LLVMValueRef z = LLVMBuildFMul(b, x, x, "");
  static const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                             1.33314422036E-1, -3.33332819422E-1};
  LLVMValueRef p = horner(e, b, z, P, 5);
  LLVMValueRef small = fmuladd(e, b, LLVMBuildFMul(b, p, z, ""), x, x);
  LLVMValueRef one = LLVMConstReal(e->f32, 1.0);
  LLVMValueRef ex = fast_exp(e, b, LLVMBuildFAdd(b, ax, ax, ""));
  LLVMValueRef big = LLVMBuildFSub(
      b, one, LLVMBuildFDiv(b, LLVMConstReal(e->f32, 2.0), LLVMBuildFAdd(b, ex, one, ""), ""),
      "");
  LLVMValueRef lt = LLVMBuildFCmp(b, LLVMRealOLT, ax, LLVMConstReal(e->f32, 0.625), "");
  LLVMValueRef r = LLVMBuildSelect(b, lt, small, big, "");
  LLVMValueRef args[2] = {r, x};
  LLVMTypeRef t = e->f32;
  return call_intr(e, b, "llvm.copysign", &t, 1, args, 2);
}

/* erf as Eigen / XLA: x clamped to [-4, 4], x * P(x^2) / Q(x^2) (degrees
 * 6 and 4 in x^2), the result clamped to [-1, 1]; NaN passes. */
static LLVMValueRef fast_erf(emitter *e, LLVMBuilderRef b, LLVMValueRef x) {
  LLVMValueRef xc = fsel_lt(b, x, 4.0, LLVMConstReal(e->f32, 4.0), true);
  xc = fsel_lt(b, xc, -4.0, LLVMConstReal(e->f32, -4.0), false);
  LLVMValueRef x2 = LLVMBuildFMul(b, xc, xc, "");
  static const double A[] = {-2.72614225801306e-10, 2.77068142495902e-08,
                             -2.10102402082508e-06, -5.69250639462346e-05,
                             -7.34990630326855e-04, -2.95459980854025e-03,
                             -1.60960333262415e-02};
  static const double B[] = {-1.45660718464996e-05, -2.13374055278905e-04,
                             -1.68282697438203e-03, -7.37332916720468e-03,
                             -1.42647390514189e-02};
  LLVMValueRef pq = LLVMBuildFDiv(b, horner(e, b, x2, A, 7), horner(e, b, x2, B, 5), "");
  LLVMValueRef r = LLVMBuildFMul(b, xc, pq, ""); /* x * (p/q): no underflow for tiny x */
  r = fsel_lt(b, r, 1.0, LLVMConstReal(e->f32, 1.0), true);
  return fsel_lt(b, r, -1.0, LLVMConstReal(e->f32, -1.0), false);
}

/* x^c for a constant c in {1, 2, 3} without a pow call (and vectorisable):
 * x^2 is one rounding as pow's; f32 x^3 is computed in f64 (x^2 exact)
 * and rounded, as the interpreter's pow. NULL for other exponents. */
static LLVMValueRef const_pow(emitter *e, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y) {
  if (!LLVMIsAConstantFP(y)) return NULL;
  LLVMBool loses = 0;
  double c = LLVMConstRealGetDouble(y, &loses);
  if (c == 1.0) return x;
  if (c == 2.0) return LLVMBuildFMul(b, x, x, "");
  if (c == 3.0 && LLVMTypeOf(x) == e->f32) {
    LLVMValueRef d = LLVMBuildFPExt(b, x, e->f64, "");
    LLVMValueRef c3 = LLVMBuildFMul(b, LLVMBuildFMul(b, d, d, ""), d, "");
    return LLVMBuildFPTrunc(b, c3, e->f32, "");
  }
  return NULL;
}

/* ---- f16 / bf16 ---- */

/* f32 → nearest bf16 (ties to even) as i16 bits; NaN stays a quiet NaN —
 * the same function as sc_f32_to_bf16. */
static LLVMValueRef f32_to_bf16_bits(emitter *e, LLVMBuilderRef b, LLVMValueRef x) {
  LLVMValueRef u = LLVMBuildBitCast(b, x, e->i32, "");
  LLVMValueRef hi = LLVMBuildLShr(b, u, ci(e->i32, 16), "");
  LLVMValueRef lsb = LLVMBuildAnd(b, hi, ci(e->i32, 1), "");
  LLVMValueRef bias = LLVMBuildAdd(b, lsb, ci(e->i32, 0x7fff), "");
  LLVMValueRef rounded = LLVMBuildLShr(b, LLVMBuildAdd(b, u, bias, ""), ci(e->i32, 16), "");
  LLVMValueRef quiet = LLVMBuildOr(b, hi, ci(e->i32, 0x40), "");
  LLVMValueRef mag = LLVMBuildAnd(b, u, ci(e->i32, 0x7fffffff), "");
  LLVMValueRef nan = LLVMBuildICmp(b, LLVMIntUGT, mag, ci(e->i32, 0x7f800000), "");
  LLVMValueRef r = LLVMBuildSelect(b, nan, quiet, rounded, "");
  return LLVMBuildTrunc(b, r, e->i16, "");
}

static LLVMValueRef bf16_bits_to_f32(emitter *e, LLVMBuilderRef b, LLVMValueRef h) {
  LLVMValueRef u = LLVMBuildShl(b, LLVMBuildZExt(b, h, e->i32, ""), ci(e->i32, 16), "");
  return LLVMBuildBitCast(b, u, e->f32, "");
}

/* ---- narrow float formats (float8, float4): sc_narrow_* in ir/dtype.c,
 * step for step ---- */

static LLVMValueRef pow2_bits(emitter *e, LLVMBuilderRef b, LLVMValueRef k) {
  LLVMValueRef u = LLVMBuildShl(b, LLVMBuildAdd(b, k, ci(e->i32, 127), ""), ci(e->i32, 23), "");
  return LLVMBuildBitCast(b, u, e->f32, "");
}

static LLVMValueRef smax_i32(LLVMBuilderRef b, LLVMValueRef x, int64_t c, bool max) {
  LLVMValueRef k = ci(LLVMTypeOf(x), c);
  LLVMValueRef cmp = LLVMBuildICmp(b, max ? LLVMIntSGT : LLVMIntSLT, x, k, "");
  return LLVMBuildSelect(b, cmp, x, k, "");
}

/* sc_narrow_round for a float format t: x (f32) rounded to t's values. */
static LLVMValueRef mf_round(emitter *e, LLVMBuilderRef b, LLVMValueRef x, sc_dtype t) {
  LLVMValueRef u = LLVMBuildBitCast(b, x, e->i32, "");
  LLVMValueRef ex = LLVMBuildAnd(b, LLVMBuildLShr(b, u, ci(e->i32, 23), ""), ci(e->i32, 0xff), "");
  LLVMValueRef fnan = LLVMConstReal(e->f32, NAN);
  if (t == SC_DTYPE_F8E8M0) { /* round up, saturate */
    LLVMValueRef frac = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, u, ci(e->i32, 0x7fffff), ""),
                                      ci(e->i32, 0), "");
    LLVMValueRef up = LLVMBuildAnd(b, frac, LLVMBuildICmp(b, LLVMIntULT, ex, ci(e->i32, 0xfe), ""), "");
    LLVMValueRef least = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, u, ci(e->i32, 0x7fffffff), ""),
                                       ci(e->i32, 0x00400000), ""); /* 2^-127: code 0 */
    up = LLVMBuildAnd(b, up, LLVMBuildNot(b, least, ""), "");
    LLVMValueRef e2 = LLVMBuildAdd(b, ex, LLVMBuildZExt(b, up, e->i32, ""), "");
    LLVMValueRef v = LLVMBuildBitCast(b, LLVMBuildShl(b, e2, ci(e->i32, 23), ""), e->f32, "");
    LLVMValueRef zero = LLVMBuildICmp(b, LLVMIntEQ, e2, ci(e->i32, 0), "");
    v = LLVMBuildSelect(b, zero, LLVMConstReal(e->f32, 0x1p-127), v, "");
    return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, ex, ci(e->i32, 0xff), ""), fnan, v, "");
  }
  sc_minifloat f;
  SC_ASSERT(sc_minifloat_of(t, &f));
  LLVMValueRef a = intr1(e, b, "llvm.fabs", x);
  /* E = clamp(exponent of a, 1 - bias, 127) */
  LLVMValueRef E = smax_i32(b, LLVMBuildSub(b, ex, ci(e->i32, 127), ""), 1 - f.bias, true);
  E = smax_i32(b, E, 127, false);
  LLVMValueRef up = pow2_bits(e, b, LLVMBuildSub(b, ci(e->i32, f.man), E, ""));
  LLVMValueRef down = pow2_bits(e, b, LLVMBuildSub(b, E, ci(e->i32, f.man), ""));
  LLVMValueRef r = LLVMBuildFMul(b, intr1(e, b, "llvm.roundeven", LLVMBuildFMul(b, a, up, "")),
                                 down, "");
  double over = f.kind == SC_MF_IEEE ? INFINITY : f.kind == SC_MF_NONE ? f.max : NAN;
  LLVMValueRef big = LLVMBuildFCmp(b, LLVMRealOGT, r, LLVMConstReal(e->f32, f.max), "");
  r = LLVMBuildSelect(b, big, LLVMConstReal(e->f32, over), r, "");
  LLVMTypeRef ft = e->f32;
  LLVMValueRef args[2] = {r, x};
  LLVMValueRef s = call_intr(e, b, "llvm.copysign", &ft, 1, args, 2);
  if (f.kind == SC_MF_FNUZ) { /* no -0 */
    LLVMValueRef z = LLVMBuildFCmp(b, LLVMRealOEQ, r, LLVMConstReal(e->f32, 0), "");
    s = LLVMBuildSelect(b, z, LLVMConstReal(e->f32, 0), s, "");
  }
  if (f.kind == SC_MF_NONE) { /* NaN: the zero of the other sign, as ml_dtypes */
    LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
    LLVMValueRef nz = LLVMBuildFNeg(b, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, u,
                                                                       ci(e->i32, 0), ""),
                                                       LLVMConstReal(e->f32, -0.0),
                                                       LLVMConstReal(e->f32, 0.0), ""), "");
    s = LLVMBuildSelect(b, isnan, nz, s, "");
  }
  return s;
}

/* sc_narrow_encode's last step: the code (i8) of r, a value of format t. */
static LLVMValueRef mf_encode(emitter *e, LLVMBuilderRef b, LLVMValueRef r, sc_dtype t) {
  LLVMValueRef u = LLVMBuildBitCast(b, r, e->i32, "");
  if (t == SC_DTYPE_F8E8M0)
    return LLVMBuildTrunc(b, LLVMBuildLShr(b, u, ci(e->i32, 23), ""), e->i8, "");
  sc_minifloat f;
  SC_ASSERT(sc_minifloat_of(t, &f));
  LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildLShr(b, u, ci(e->i32, 31), ""),
                                   ci(e->i32, f.bits - 1), "");
  LLVMValueRef a = LLVMBuildAnd(b, u, ci(e->i32, 0x7fffffff), "");
  LLVMValueRef ex = LLVMBuildAdd(b, LLVMBuildLShr(b, a, ci(e->i32, 23), ""),
                                 ci(e->i32, f.bias - 127), "");
  LLVMValueRef normal = LLVMBuildICmp(b, LLVMIntSGE, ex, ci(e->i32, 1), "");
  LLVMValueRef cn = LLVMBuildOr(
      b, LLVMBuildShl(b, ex, ci(e->i32, f.man), ""),
      LLVMBuildAnd(b, LLVMBuildLShr(b, a, ci(e->i32, 23 - f.man), ""), ci(e->i32, (1 << f.man) - 1), ""),
      "");
  LLVMValueRef scaled = LLVMBuildFMul(b, LLVMBuildBitCast(b, a, e->f32, ""),
                                      LLVMConstReal(e->f32, ldexp(1.0, f.bias - 1 + f.man)), "");
  /* subnormal codes are < 2^man: clamp before converting (no poison) */
  scaled = fsel_lt(b, scaled, 16.0, LLVMConstReal(e->f32, 16.0), true);
  LLVMValueRef cs = LLVMBuildFPToUI(b, scaled, e->i32, "");
  LLVMValueRef code = LLVMBuildOr(b, LLVMBuildSelect(b, normal, cn, cs, ""), sign, "");
  if (f.kind == SC_MF_IEEE) {
    LLVMValueRef inf = LLVMBuildICmp(b, LLVMIntEQ, a, ci(e->i32, 0x7f800000), "");
    code = LLVMBuildSelect(b, inf, LLVMBuildOr(b, sign, ci(e->i32, 0x7c), ""), code, "");
  }
  if (f.kind != SC_MF_NONE) {
    LLVMValueRef nan = LLVMBuildICmp(b, LLVMIntUGT, a, ci(e->i32, 0x7f800000), "");
    LLVMValueRef nc = f.kind == SC_MF_FNUZ
                          ? ci(e->i32, 0x80)
                          : LLVMBuildOr(b, sign, ci(e->i32, f.kind == SC_MF_FN ? 0x7f : 0x7e), "");
    code = LLVMBuildSelect(b, nan, nc, code, "");
  }
  return LLVMBuildTrunc(b, code, e->i8, "");
}

/* The value of a code (i8) of float format t: a load from a table of all
 * codes' values (sc_narrow_decode), one per module. */
static LLVMValueRef mf_decode(emitter *e, LLVMBuilderRef b, LLVMValueRef code, sc_dtype t) {
  char name[32];
  snprintf(name, sizeof name, "sc.codes.%s", sc_dtype_name(t));
  LLVMTypeRef at = LLVMArrayType(e->f32, 256);
  LLVMValueRef g = LLVMGetNamedGlobal(e->m, name);
  if (!g) {
    LLVMValueRef vals[256];
    for (int c = 0; c < 256; c++)
      vals[c] = LLVMConstReal(e->f32, sc_narrow_decode(t, (uint8_t)c));
    g = LLVMAddGlobal(e->m, at, name);
    LLVMSetInitializer(g, LLVMConstArray(e->f32, vals, 256));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddr(g, 1);
  }
  LLVMValueRef idx[2] = {ci(e->i64, 0), LLVMBuildZExt(b, code, e->i64, "")};
  LLVMValueRef p = LLVMBuildInBoundsGEP2(b, at, g, idx, 2, "");
  return LLVMBuildLoad2(b, e->f32, p, "");
}

/* Rounds an f32 register value to the precision of t (f16/bf16), keeping
 * it in f32. */
static LLVMValueRef round_to(emitter *e, LLVMBuilderRef b, LLVMValueRef x, sc_dtype t) {
  if (t == SC_DTYPE_F16)
    return LLVMBuildFPExt(b, LLVMBuildFPTrunc(b, x, e->f16, ""), e->f32, "");
  if (t == SC_DTYPE_BF16) return bf16_bits_to_f32(e, b, f32_to_bf16_bits(e, b, x));
  if (sc_dtype_is_narrow(t)) return mf_round(e, b, x, t);
  return x;
}

/* Memory element → register value. */
static LLVMValueRef widen(emitter *e, LLVMBuilderRef b, LLVMValueRef x, sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F16: return LLVMBuildFPExt(b, x, e->f32, "");
  case SC_DTYPE_BF16: return bf16_bits_to_f32(e, b, x);
  case SC_DTYPE_BOOL: return LLVMBuildICmp(b, LLVMIntNE, x, ci(e->i8, 0), "");
  default: return sc_dtype_is_narrow(t) && is_f(t) ? mf_decode(e, b, x, t) : x;
  }
}

/* Register value → memory element. */
static LLVMValueRef narrow(emitter *e, LLVMBuilderRef b, LLVMValueRef x, sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F16: return LLVMBuildFPTrunc(b, x, e->f16, "");
  case SC_DTYPE_BF16: return f32_to_bf16_bits(e, b, x);
  case SC_DTYPE_BOOL: return LLVMBuildZExt(b, x, e->i8, "");
  default: return sc_dtype_is_narrow(t) && is_f(t) ? mf_encode(e, b, mf_round(e, b, x, t), t) : x;
  }
}

/* ---- conversions (ONNX Cast) ---- */

/* An i64 truncated to integer type tt. */
static LLVMValueRef tw_convert(LLVMBuilderRef b, LLVMValueRef y, LLVMTypeRef tt) {
  return LLVMGetIntTypeWidth(tt) < 64 ? LLVMBuildTrunc(b, y, tt, "") : y;
}

static LLVMValueRef convert(emitter *e, LLVMBuilderRef b, LLVMValueRef x,
                            sc_dtype from, sc_dtype to) {
  if (from == to) return x;
  LLVMTypeRef tt = vty(e, to);
  if (to == SC_DTYPE_BOOL) {
    if (is_f(from))
      return LLVMBuildFCmp(b, LLVMRealUNE, x, LLVMConstReal(LLVMTypeOf(x), 0.0), "");
    return LLVMBuildICmp(b, LLVMIntNE, x, ci(LLVMTypeOf(x), 0), "");
  }
  if (from == SC_DTYPE_BOOL) {
    if (is_f(to)) return LLVMBuildUIToFP(b, x, tt, "");
    return LLVMBuildZExt(b, x, tt, "");
  }
  if (is_f(from) && is_f(to)) {
    LLVMValueRef y = x;
    if (from == SC_DTYPE_F64) y = LLVMBuildFPTrunc(b, y, e->f32, "");
    if (to == SC_DTYPE_F64) return LLVMBuildFPExt(b, y, e->f64, "");
    return round_to(e, b, y, to);
  }
  if (is_f(from) && sc_dtype_is_narrow(to)) {
    /* through f32, truncated; out of range or NaN → 0 (sc_narrow_round) */
    LLVMValueRef y = from == SC_DTYPE_F64 ? LLVMBuildFPTrunc(b, x, e->f32, "") : x;
    y = intr1(e, b, "llvm.trunc", y);
    double hi = sc_narrow_max(to), lo = sc_dtype_is_signed(to) ? -hi - 1 : 0;
    LLVMValueRef in = LLVMBuildAnd(
        b, LLVMBuildFCmp(b, LLVMRealOGE, y, LLVMConstReal(e->f32, lo), ""),
        LLVMBuildFCmp(b, LLVMRealOLE, y, LLVMConstReal(e->f32, hi), ""), "");
    y = LLVMBuildSelect(b, in, y, LLVMConstReal(e->f32, 0), "");
    return LLVMBuildFPToSI(b, y, e->i8, "");
  }
  if (is_f(from)) {
    /* As sc_store_f64: saturate to the i64 range (NaN → 0), then wrap to
     * the target's width (U64 keeps the bits). */
    LLVMTypeRef tys[2] = {e->i64, LLVMTypeOf(x)};
    LLVMValueRef y = call_intr(e, b, "llvm.fptosi.sat", tys, 2, &x, 1);
    return tw_convert(b, y, tt);
  }
  if (is_f(to)) {
    /* through f64, as the interpreter converts (one rounding for i32, the
     * same double rounding for large i64) */
    LLVMValueRef y = is_signed(from) ? LLVMBuildSIToFP(b, x, e->f64, "")
                                     : LLVMBuildUIToFP(b, x, e->f64, "");
    return convert(e, b, y, SC_DTYPE_F64, to);
  }
  unsigned fw = LLVMGetIntTypeWidth(LLVMTypeOf(x)), tw = LLVMGetIntTypeWidth(tt);
  if (sc_dtype_is_narrow(to)) { /* wrap to its bits (sc_narrow_wrap) */
    LLVMValueRef y = fw > 8 ? LLVMBuildTrunc(b, x, e->i8, "") : x;
    int sh = 8 - (int)sc_dtype_file_bits(to);
    if (!is_signed(to)) return LLVMBuildAnd(b, y, ci(e->i8, (1 << (8 - sh)) - 1), "");
    return LLVMBuildAShr(b, LLVMBuildShl(b, y, ci(e->i8, sh), ""), ci(e->i8, sh), "");
  }
  if (fw == tw) return x;
  if (fw > tw) return LLVMBuildTrunc(b, x, tt, "");
  return is_signed(from) ? LLVMBuildSExt(b, x, tt, "") : LLVMBuildZExt(b, x, tt, "");
}

/* ---- arithmetic ---- */

static LLVMValueRef fconst(LLVMValueRef like, double v) {
  return LLVMConstReal(LLVMTypeOf(like), v);
}

/* NaN-propagating float max/min: a NaN operand wins, else the larger
 * (smaller), else b — see kir_interpret. */
static LLVMValueRef fminmax(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y, bool max) {
  LLVMValueRef xnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  LLVMValueRef better = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, x, y, "");
  LLVMValueRef pick = LLVMBuildOr(b, xnan, better, "");
  return LLVMBuildSelect(b, pick, x, y, "");
}

static LLVMValueRef int_divmod(emitter *e, LLVMBuilderRef b, LLVMValueRef x,
                               LLVMValueRef y, bool sgn, bool mod) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef zero = ci(t, 0);
  LLVMValueRef y0 = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
  if (!sgn) {
    LLVMValueRef safe = LLVMBuildSelect(b, y0, ci(t, 1), y, "");
    LLVMValueRef q = mod ? LLVMBuildURem(b, x, safe, "") : LLVMBuildUDiv(b, x, safe, "");
    return LLVMBuildSelect(b, y0, zero, q, "");
  }
  LLVMValueRef ym1 = LLVMBuildICmp(b, LLVMIntEQ, y, ci(t, -1), "");
  LLVMValueRef odd = LLVMBuildOr(b, y0, ym1, "");
  LLVMValueRef safe = LLVMBuildSelect(b, odd, ci(t, 1), y, "");
  LLVMValueRef q = mod ? LLVMBuildSRem(b, x, safe, "") : LLVMBuildSDiv(b, x, safe, "");
  /* y == -1: x / -1 = -x (wrapping: MIN stays MIN), x % -1 = 0. */
  LLVMValueRef alt = mod ? zero : LLVMBuildSub(b, zero, x, "");
  q = LLVMBuildSelect(b, ym1, alt, q, "");
  return LLVMBuildSelect(b, y0, zero, q, "");
}

/* Integer power as kir.c's ipow: square-and-multiply over the exponent's
 * bits (wrapping); a negative exponent gives 1 for base 1, ±1 for base -1
 * and 0 otherwise. Straight-line: no branches in vectorisable loops. */
static LLVMValueRef int_pow(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y, bool sgn) {
  LLVMTypeRef t = LLVMTypeOf(x);
  unsigned w = LLVMGetIntTypeWidth(t);
  LLVMValueRef r = ci(t, 1), base = x, ex = y;
  for (unsigned i = 0; i < w; i++) {
    LLVMValueRef bit = LLVMBuildTrunc(b, ex, LLVMInt1TypeInContext(LLVMGetTypeContext(t)), "");
    r = LLVMBuildSelect(b, bit, LLVMBuildMul(b, r, base, ""), r, "");
    base = LLVMBuildMul(b, base, base, "");
    ex = LLVMBuildLShr(b, ex, ci(t, 1), "");
  }
  if (!sgn) return r;
  LLVMValueRef neg = LLVMBuildICmp(b, LLVMIntSLT, y, ci(t, 0), "");
  LLVMValueRef one = LLVMBuildICmp(b, LLVMIntEQ, x, ci(t, 1), "");
  LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, x, ci(t, -1), "");
  LLVMValueRef odd = LLVMBuildTrunc(b, y, LLVMInt1TypeInContext(LLVMGetTypeContext(t)), "");
  LLVMValueRef nr = LLVMBuildSelect(b, one, ci(t, 1),
                                    LLVMBuildSelect(b, m1, LLVMBuildSelect(b, odd, ci(t, -1), ci(t, 1), ""),
                                                    ci(t, 0), ""), "");
  return LLVMBuildSelect(b, neg, nr, r, "");
}

static LLVMValueRef emit_binary(emitter *e, LLVMBuilderRef b, kir_op op, sc_dtype t,
                                LLVMValueRef x, LLVMValueRef y) {
  bool f = is_f(t), s = is_signed(t);
  if (t == SC_DTYPE_BOOL) {
    /* bool arithmetic: as 0/1 integers, result != 0 */
    switch (op) {
    case KIR_ADD: case KIR_MAX: case KIR_OR: return LLVMBuildOr(b, x, y, "");
    case KIR_MUL: case KIR_MIN: case KIR_AND: return LLVMBuildAnd(b, x, y, "");
    case KIR_SUB: case KIR_XOR: return LLVMBuildXor(b, x, y, "");
    default: break;
    }
  }
  switch (op) {
  case KIR_ADD: return f ? LLVMBuildFAdd(b, x, y, "") : LLVMBuildAdd(b, x, y, "");
  case KIR_SUB: return f ? LLVMBuildFSub(b, x, y, "") : LLVMBuildSub(b, x, y, "");
  case KIR_MUL: return f ? LLVMBuildFMul(b, x, y, "") : LLVMBuildMul(b, x, y, "");
  case KIR_DIV:
    return f ? LLVMBuildFDiv(b, x, y, "") : int_divmod(e, b, x, y, s, false);
  case KIR_MOD:
    return f ? LLVMBuildFRem(b, x, y, "") : int_divmod(e, b, x, y, s, true);
  case KIR_MIN: case KIR_MAX: {
    bool max = op == KIR_MAX;
    if (f) return fminmax(b, x, y, max);
    LLVMIntPredicate p = max ? (s ? LLVMIntSGT : LLVMIntUGT) : (s ? LLVMIntSLT : LLVMIntULT);
    return LLVMBuildSelect(b, LLVMBuildICmp(b, p, x, y, ""), x, y, "");
  }
  case KIR_POW: {
    if (f) {
      LLVMValueRef cp = const_pow(e, b, x, y);
      if (cp) return cp;
      LLVMValueRef args[2] = {x, y};
      LLVMTypeRef ty = LLVMTypeOf(x);
      return call_intr(e, b, "llvm.pow", &ty, 1, args, 2);
    }
    return int_pow(b, x, y, s);
  }
  case KIR_AND: return LLVMBuildAnd(b, x, y, "");
  case KIR_OR: return LLVMBuildOr(b, x, y, "");
  case KIR_XOR: return LLVMBuildXor(b, x, y, "");
  case KIR_SHL: case KIR_SHR: { /* a count >= the width (unsigned: a negative
                                    * one too) is poison in LLVM: every bit
                                    * goes out, filled with the sign for a
                                    * signed SHR */
    LLVMTypeRef ty = LLVMTypeOf(x);
    int64_t w = 8 * (int64_t)sc_dtype_size(t);
    LLVMValueRef wide = LLVMBuildICmp(b, LLVMIntUGE, y, ci(ty, w), "");
    if (op == KIR_SHR && sc_dtype_is_signed(t))
      return LLVMBuildAShr(b, x, LLVMBuildSelect(b, wide, ci(ty, w - 1), y, ""), "");
    LLVMValueRef sh = op == KIR_SHL ? LLVMBuildShl(b, x, y, "") : LLVMBuildLShr(b, x, y, "");
    return LLVMBuildSelect(b, wide, ci(ty, 0), sh, "");
  }
  default: break;
  }
  SC_ASSERT(!"emit_binary: not a binary arithmetic op");
  return NULL;
}

static LLVMValueRef emit_compare(LLVMBuilderRef b, kir_op op, sc_dtype t,
                                 LLVMValueRef x, LLVMValueRef y) {
  if (is_f(t)) {
    LLVMRealPredicate p = op == KIR_EQ   ? LLVMRealOEQ
                          : op == KIR_NE ? LLVMRealUNE
                          : op == KIR_LT ? LLVMRealOLT
                          : op == KIR_LE ? LLVMRealOLE
                          : op == KIR_GT ? LLVMRealOGT
                                         : LLVMRealOGE;
    return LLVMBuildFCmp(b, p, x, y, "");
  }
  bool s = is_signed(t);
  LLVMIntPredicate p = op == KIR_EQ   ? LLVMIntEQ
                       : op == KIR_NE ? LLVMIntNE
                       : op == KIR_LT ? (s ? LLVMIntSLT : LLVMIntULT)
                       : op == KIR_LE ? (s ? LLVMIntSLE : LLVMIntULE)
                       : op == KIR_GT ? (s ? LLVMIntSGT : LLVMIntUGT)
                                      : (s ? LLVMIntSGE : LLVMIntUGE);
  return LLVMBuildICmp(b, p, x, y, "");
}

static LLVMValueRef emit_unary(emitter *e, LLVMBuilderRef b, kir_op op, sc_dtype t,
                               LLVMValueRef x) {
  bool f = is_f(t);
  bool f64 = t == SC_DTYPE_F64;
  if (!f) {
    LLVMTypeRef ty = LLVMTypeOf(x);
    switch (op) {
    case KIR_NEG: return LLVMBuildSub(b, ci(ty, 0), x, "");
    case KIR_ABS:
      if (!is_signed(t)) return x;
      return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x, ci(ty, 0), ""),
                             LLVMBuildSub(b, ci(ty, 0), x, ""), x, "");
    case KIR_NOT:
      return t == SC_DTYPE_BOOL ? LLVMBuildXor(b, x, LLVMConstInt(e->i1, 1, 0), "")
                                : LLVMBuildNot(b, x, "");
    case KIR_ISNAN: case KIR_ISINF: return LLVMConstInt(e->i1, 0, 0);
    case KIR_FLOOR: case KIR_CEIL: case KIR_ROUND: return x;
    default: return ci(ty, 0); /* float math on ints: kir_verify rejects it */
    }
  }
  LLVMValueRef one = fconst(x, 1.0);
  switch (op) {
  case KIR_NEG: return LLVMBuildFNeg(b, x, "");
  case KIR_ABS: return intr1(e, b, "llvm.fabs", x);
  case KIR_EXP: return f64 ? intr1(e, b, "llvm.exp", x) : fast_exp(e, b, x);
  case KIR_LOG: return intr1(e, b, "llvm.log", x);
  case KIR_SQRT: return intr1(e, b, "llvm.sqrt", x);
  case KIR_RSQRT: return LLVMBuildFDiv(b, one, intr1(e, b, "llvm.sqrt", x), "");
  case KIR_TANH: return f64 ? libm1(e, b, "tanh", x) : fast_tanh(e, b, x);
  case KIR_ERF: return f64 ? libm1(e, b, "erf", x) : fast_erf(e, b, x);
  case KIR_SIN: return intr1(e, b, "llvm.sin", x);
  case KIR_COS: return intr1(e, b, "llvm.cos", x);
  case KIR_ATAN: return libm1(e, b, f64 ? "atan" : "atanf", x);
  case KIR_FLOOR: return intr1(e, b, "llvm.floor", x);
  case KIR_CEIL: return intr1(e, b, "llvm.ceil", x);
  case KIR_ROUND: return intr1(e, b, "llvm.roundeven", x);
  case KIR_RECIP: return LLVMBuildFDiv(b, one, x, "");
  case KIR_SIGMOID: {
    if (f64) {
      LLVMValueRef ex = intr1(e, b, "llvm.exp", LLVMBuildFNeg(b, x, ""));
      return LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, ex, ""), "");
    }
    /* en = e^-|x|, r = 1 / (1 + en): x >= 0 gives r, x < 0 gives en r (no
     * overflow of e^-x, and the subnormal results of very negative x) */
    LLVMValueRef en = fast_exp(e, b, LLVMBuildFNeg(b, intr1(e, b, "llvm.fabs", x), ""));
    LLVMValueRef r = LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, en, ""), "");
    LLVMValueRef neg = LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(x, 0.0), "");
    return LLVMBuildSelect(b, neg, LLVMBuildFMul(b, en, r, ""), r, "");
  }
  case KIR_ISNAN: return LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  case KIR_ISINF:
    return LLVMBuildFCmp(b, LLVMRealOEQ, intr1(e, b, "llvm.fabs", x),
                         fconst(x, INFINITY), "");
  case KIR_NOT:
    return LLVMBuildFCmp(b, LLVMRealOEQ, x, fconst(x, 0.0), "");
  default: break;
  }
  SC_ASSERT(!"emit_unary: not a unary op");
  return NULL;
}

/* ---- expressions ---- */

static LLVMValueRef emit_one(emitter *e, int32_t id) {
  const kir_expr *x = &e->k->exprs[id];
  LLVMBuilderRef b = e->b[e->lvl[id]];
  LLVMValueRef a = x->a >= 0 ? e->val[x->a] : NULL;
  LLVMValueRef bb = x->b >= 0 ? e->val[x->b] : NULL;
  LLVMValueRef c = x->c >= 0 ? e->val[x->c] : NULL;
  switch (x->op) {
  case KIR_CONST:
    if (is_f(x->dtype)) /* f16/bf16 constants hold f32 values (kir.c) */
      return LLVMConstReal(vty(e, x->dtype),
                           x->dtype == SC_DTYPE_F64 ? x->f : (double)(float)x->f);
    if (x->dtype == SC_DTYPE_BOOL) return LLVMConstInt(e->i1, x->i != 0, 0);
    return ci(vty(e, x->dtype), x->i);
  case KIR_VAR:
    if (x->var == KIR_INNER) return e->inner ? e->inner : ci(e->i64, 0);
    return e->outer[x->var];
  case KIR_REG: return e->reg[x->var];
  case KIR_LOAD: {
    const kir_param *p = &e->k->params[x->var];
    LLVMTypeRef st = sty(e, p->dtype);
    LLVMValueRef gep = LLVMBuildInBoundsGEP2(b, st, e->ptr[x->var], &a, 1, "");
    LLVMValueRef ld = LLVMBuildLoad2(b, st, gep, "");
    LLVMSetAlignment(ld, sc_dtype_size(p->dtype));
    set_alias_md(e, ld, x->var);
    return widen(e, b, ld, p->dtype);
  }
  case KIR_CAST: return convert(e, b, a, e->k->exprs[x->a].dtype, x->dtype);
  case KIR_BITCAST: { /* through the memory forms: half, bf16 as i16, bool as i8 */
    sc_dtype from = e->k->exprs[x->a].dtype;
    LLVMValueRef m = LLVMBuildBitCast(b, narrow(e, b, a, from), sty(e, x->dtype), "");
    return widen(e, b, m, x->dtype);
  }
  case KIR_EQ: case KIR_NE: case KIR_LT: case KIR_LE: case KIR_GT: case KIR_GE:
    return emit_compare(b, x->op, e->k->exprs[x->a].dtype, a, bb);
  case KIR_SELECT: return LLVMBuildSelect(b, a, bb, c, "");
  default: break;
  }
  if (kir_op_arity(x->op) == 2) return emit_binary(e, b, x->op, x->dtype, a, bb);
  if (x->op == KIR_ISNAN || x->op == KIR_ISINF) /* typed by their operand */
    return emit_unary(e, b, x->op, e->k->exprs[x->a].dtype, a);
  return emit_unary(e, b, x->op, x->dtype, a);
}

/* Emits `root` and everything it needs that is not emitted yet. Operands
 * always have smaller ids, so one downward sweep marks and one upward sweep
 * emits: no recursion on deep DAGs. */
static LLVMValueRef emit_expr(emitter *e, int32_t root) {
  SC_ASSERT(root >= 0 && root < e->k->n_exprs);
  if (e->val[root]) return e->val[root];
  memset(e->mark, 0, (size_t)root + 1);
  e->mark[root] = 1;
  for (int32_t i = root; i >= 0; i--) {
    if (!e->mark[i] || e->val[i]) continue;
    const kir_expr *x = &e->k->exprs[i];
    if (x->a >= 0) e->mark[x->a] = 1;
    if (x->b >= 0) e->mark[x->b] = 1;
    if (x->c >= 0) e->mark[x->c] = 1;
  }
  for (int32_t i = 0; i <= root; i++)
    if (e->mark[i] && !e->val[i]) e->val[i] = emit_one(e, i);
  return e->val[root];
}

/* Level of each expr: the innermost loop it must live in. */
static void compute_levels(emitter *e) {
  const kir_kernel *k = e->k;
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *x = &k->exprs[i];
    uint8_t l = L_ENTRY;
    if (x->op == KIR_VAR) {
      if (x->var == KIR_INNER) l = k->inner > 1 ? L_INNER : L_ENTRY;
      else l = x->var < e->rank - 1 ? L_ROW : L_POINT;
    } else if (x->op == KIR_REG) {
      l = L_POINT;
    }
    int32_t ops[3] = {x->a, x->b, x->c};
    for (int j = 0; j < 3; j++)
      if (ops[j] >= 0 && e->lvl[ops[j]] > l) l = e->lvl[ops[j]];
    e->lvl[i] = l;
  }
}

/* ---- loop metadata ---- */

/* A metadata node whose first operand is itself (ops[0] is set here):
 * what loop ids and alias scopes and domains must be, to stay distinct. */
static LLVMMetadataRef self_node(emitter *e, LLVMMetadataRef *ops, size_t n) {
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->ctx, NULL, 0);
  ops[0] = tmp;
  LLVMMetadataRef node = LLVMMDNodeInContext2(e->ctx, ops, n);
  LLVMMetadataReplaceAllUsesWith(tmp, node); /* also frees tmp */
  return node;
}

/* !llvm.loop !{self, !{"llvm.loop.vectorize.enable", i1 true}} on a loop's
 * latch branch: lets the vectoriser reassociate a float reduction (clang's
 * vectorize(enable)). With vectorize false, !{self,
 * !{"llvm.loop.unroll.full"}}: a short in-order MAX/MIN/ARG* reduction (a
 * pooling window, an ARGMAX over a few classes), which never vectorises, is
 * unrolled whole, its index arithmetic folded; the pipeline's own unrolling
 * is off (target.c) but a forced full unroll still runs. Loops the
 * vectoriser takes (stores, sums) are left to it: unrolled first, they
 * would stay scalar (a softmax over 16 elements ran 2.7x slower). */
enum { UNROLL_MAX_INNER = 16 };
static void mark_loop(emitter *e, LLVMValueRef latch_br, bool vectorize) {
  LLVMMetadataRef md[2];
  const char *name = vectorize ? "llvm.loop.vectorize.enable" : "llvm.loop.unroll.full";
  md[0] = LLVMMDStringInContext2(e->ctx, name, strlen(name));
  md[1] = LLVMValueAsMetadata(LLVMConstInt(e->i1, 1, 0));
  LLVMMetadataRef ops[2] = {NULL, LLVMMDNodeInContext2(e->ctx, md, vectorize ? 2 : 1)};
  LLVMMetadataRef id = self_node(e, ops, 2);
  unsigned kind = LLVMGetMDKindIDInContext(e->ctx, "llvm.loop", 9);
  LLVMSetMetadata(latch_br, kind, LLVMMetadataAsValue(e->ctx, id));
}

/* ---- alias scopes ---- */

/* Which params never overlap, from the program's memory plan
 * (sc_program_disjoint), told to LLVM as scoped-noalias metadata: one
 * scope per param in a domain of the kernel's; an access to param i
 * carries !alias.scope {i} and !noalias {every param disjoint from i}.
 * Without it the vectoriser guards each loop with run-time overlap checks
 * between every store and every other access, and gives up past its limit
 * of checks (a bias add that splits one buffer into three: five pointers,
 * scalar code). Params the plan may place together (in place, views of
 * one root, no plan yet) get nothing, and stay guarded. */
static void alias_scopes(emitter *e) {
  const kir_kernel *k = e->k;
  int32_t n = k->n_params;
  bool any = false;
  for (int32_t i = 0; i < n && !any; i++)
    for (int32_t j = 0; j < n && !any; j++)
      any = sc_program_disjoint(e->prog, k->params[i].buffer, k->params[j].buffer);
  if (!any) return;
  LLVMMetadataRef ops[2];
  LLVMMetadataRef *sc = sc_calloc((size_t)n, sizeof *sc);
  LLVMMetadataRef *list = sc_calloc((size_t)n, sizeof *list);
  if (!sc || !list) goto done; /* no metadata: the code is only slower */
  ops[1] = LLVMMDStringInContext2(e->ctx, k->name, strlen(k->name));
  LLVMMetadataRef domain = self_node(e, ops, 2);
  for (int32_t i = 0; i < n; i++) {
    ops[1] = domain;
    sc[i] = self_node(e, ops, 2);
  }
  for (int32_t i = 0; i < n; i++) {
    e->scope[i] = LLVMMetadataAsValue(e->ctx, LLVMMDNodeInContext2(e->ctx, &sc[i], 1));
    size_t m = 0;
    for (int32_t j = 0; j < n; j++)
      if (sc_program_disjoint(e->prog, k->params[i].buffer, k->params[j].buffer))
        list[m++] = sc[j];
    if (m) e->noalias[i] = LLVMMetadataAsValue(e->ctx, LLVMMDNodeInContext2(e->ctx, list, m));
  }
done:
  sc_free(sc);
  sc_free(list);
}

static void set_alias_md(emitter *e, LLVMValueRef access, int32_t param) {
  if (!e->scope[param]) return;
  LLVMSetMetadata(access, LLVMGetMDKindIDInContext(e->ctx, "alias.scope", 11), e->scope[param]);
  if (e->noalias[param])
    LLVMSetMetadata(access, LLVMGetMDKindIDInContext(e->ctx, "noalias", 7), e->noalias[param]);
}

/* ---- row caches ----
 *
 * A row kernel's phases are loops over the row, one after another, and
 * each computes its value from scratch: softmax's sum phase computes
 * exp(x - max) and its store phase computes it again. So an expression
 * that varies along the row, holds a transcendental function (the costly
 * part), and is used by two or more looped phases is kept, by the first
 * of them, in a row cache on the stack (one element per step of the row),
 * and the later ones load it from there. The same value either way: the
 * results are the same bits. Only the topmost such expressions are kept
 * (exp(x - max), not x - max beneath it), rows up to ROW_CACHE_MAX long,
 * at most ROW_CACHE_BYTES of stack in all. */
enum { ROW_CACHE_MAX = 4096, ROW_CACHE_BYTES = 64 << 10 /* all of a kernel's, on the stack */ };

static bool costly_op(kir_op op) {
  switch (op) {
  case KIR_EXP: case KIR_LOG: case KIR_TANH: case KIR_ERF: case KIR_SIN: case KIR_COS:
  case KIR_ATAN: case KIR_SIGMOID: case KIR_POW:
    return true;
  default:
    return false;
  }
}

static bool looped_phase(const emitter *e, const kir_phase *ph) {
  return e->k->inner > 1 && (ph->kind == KIR_PHASE_REDUCE || e->lvl[ph->value] == L_INNER ||
                             e->lvl[ph->out_index] == L_INNER);
}

static bool plan_row_caches(emitter *e) {
  const kir_kernel *k = e->k;
  int32_t n = k->n_exprs;
  for (int32_t i = 0; i < n; i++) e->fill[i] = -1;
  const char *env = getenv("SHARDC_ROW_CACHE"); /* "0": none (A/B runs, tests) */
  if (k->inner <= 1 || k->inner > ROW_CACHE_MAX || k->n_phases < 2 || k->n_phases > 64 ||
      (env && strcmp(env, "0") == 0))
    return true;
  uint64_t *reach = sc_calloc((size_t)n, sizeof *reach); /* per expr: looped phases that
                                                            evaluate it */
  bool *costly = sc_calloc((size_t)n, sizeof *costly);   /* a costly op at or below it */
  if (!reach || !costly) {
    sc_free(reach);
    sc_free(costly);
    return false;
  }
  for (int32_t i = 0; i < n; i++) {
    const kir_expr *x = &k->exprs[i];
    int32_t ops[3] = {x->a, x->b, x->c};
    costly[i] = costly_op(x->op);
    for (int j = 0; j < 3; j++)
      if (ops[j] >= 0 && costly[ops[j]]) costly[i] = true;
  }
  for (int32_t p = 0; p < k->n_phases; p++) {
    const kir_phase *ph = &k->phases[p];
    if (!looped_phase(e, ph)) continue;
    reach[ph->value] |= 1ull << p;
    if (ph->kind == KIR_PHASE_STORE) reach[ph->out_index] |= 1ull << p;
  }
  /* users have larger ids: when i is visited, every phase that reaches it
   * is known; a kept expression's operands are evaluated by its filling
   * phase alone */
  int64_t bytes = 0, row = k->inner * 8; /* a row of the widest element a value has */
  for (int32_t i = n - 1; i >= 0; i--) {
    if (!reach[i]) continue;
    const kir_expr *x = &k->exprs[i];
    uint64_t pass = reach[i];
    if (e->lvl[i] == L_INNER && costly[i] && (reach[i] & (reach[i] - 1)) != 0 &&
        x->op != KIR_LOAD && x->dtype != SC_DTYPE_BOOL && bytes + row <= ROW_CACHE_BYTES) {
      e->fill[i] = __builtin_ctzll(reach[i]);
      pass = 1ull << e->fill[i];
      bytes += row;
    }
    int32_t ops[3] = {x->a, x->b, x->c};
    for (int j = 0; j < 3; j++)
      if (ops[j] >= 0) reach[ops[j]] |= pass;
  }
  sc_free(reach);
  sc_free(costly);
  return true;
}

/* Element r of expression i's row cache (made on first use). */
static LLVMValueRef row_cache_at(emitter *e, LLVMBuilderRef lb, int32_t i, LLVMValueRef r) {
  LLVMTypeRef at = LLVMArrayType(vty(e, e->k->exprs[i].dtype), (unsigned)e->k->inner);
  if (!e->cache[i]) e->cache[i] = LLVMBuildAlloca(e->ab, at, "rowcache");
  LLVMValueRef idx[2] = {ci(e->i64, 0), r};
  return LLVMBuildInBoundsGEP2(lb, at, e->cache[i], idx, 2, "");
}

/* In a looped phase's body (builder lb, row index r), before its trees are
 * emitted: the values earlier phases kept are loaded from their caches. */
static void load_row_caches(emitter *e, LLVMBuilderRef lb, LLVMValueRef r, int32_t phase) {
  for (int32_t i = 0; i < e->k->n_exprs; i++)
    if (e->fill[i] >= 0 && e->fill[i] < phase)
      e->val[i] = LLVMBuildLoad2(lb, vty(e, e->k->exprs[i].dtype), row_cache_at(e, lb, i, r),
                                 "cached");
}

/* After phase `phase`'s trees are emitted: the values it keeps, stored. */
static void store_row_caches(emitter *e, LLVMBuilderRef lb, LLVMValueRef r, int32_t phase) {
  for (int32_t i = 0; i < e->k->n_exprs; i++)
    if (e->fill[i] == phase && e->val[i])
      LLVMBuildStore(lb, e->val[i], row_cache_at(e, lb, i, r));
}

/* ---- phases ---- */

static LLVMValueRef alloca_of(emitter *e, LLVMTypeRef t, const char *name) {
  return LLVMBuildAlloca(e->ab, t, name);
}

static LLVMValueRef reduce_init(emitter *e, kir_reduce_op rop, sc_dtype t) {
  LLVMTypeRef ty = vty(e, t);
  bool f = is_f(t), s = is_signed(t);
  unsigned w = f || t == SC_DTYPE_BOOL ? 1 : LLVMGetIntTypeWidth(ty);
  switch (rop) {
  case KIR_RED_SUM: return f ? LLVMConstReal(ty, 0.0) : ci(ty, 0);
  case KIR_RED_PROD: return f ? LLVMConstReal(ty, 1.0) : ci(ty, 1);
  case KIR_RED_MAX: case KIR_RED_ARGMAX:
    if (f) return LLVMConstReal(ty, -INFINITY);
    if (t == SC_DTYPE_BOOL) return LLVMConstInt(ty, 0, 0);
    return s ? LLVMConstInt(ty, 1ull << (w - 1), 0) : ci(ty, 0);
  case KIR_RED_MIN: case KIR_RED_ARGMIN:
    if (f) return LLVMConstReal(ty, INFINITY);
    if (t == SC_DTYPE_BOOL) return LLVMConstInt(ty, 1, 0);
    return s ? LLVMConstInt(ty, (1ull << (w - 1)) - 1, 0) : LLVMConstAllOnes(ty);
  default: break;
  }
  SC_ASSERT(!"bad reduce op");
  return NULL;
}

typedef struct reduce_state {
  LLVMValueRef acc;  /* alloca: accumulator (ARG*: the best value) */
  LLVMValueRef idx;  /* alloca: ARG*: index of the best value */
  sc_dtype vt;       /* dtype the fold happens in */
} reduce_state;

static void reduce_begin(emitter *e, const kir_phase *ph, reduce_state *rs) {
  bool arg = ph->rop == KIR_RED_ARGMAX || ph->rop == KIR_RED_ARGMIN;
  rs->vt = ph->acc_dtype; /* ARG*: values compared in acc_dtype, reg is i64 */
  rs->acc = alloca_of(e, vty(e, rs->vt), "acc");
  LLVMBuildStore(e->b[L_POINT], reduce_init(e, ph->rop, rs->vt), rs->acc);
  rs->idx = NULL;
  if (arg) {
    rs->idx = alloca_of(e, e->i64, "argidx");
    LLVMBuildStore(e->b[L_POINT], ci(e->i64, 0), rs->idx);
  }
}

/* One step of the fold, with the builder b at the loop body. */
static void reduce_step(emitter *e, LLVMBuilderRef b, const kir_phase *ph,
                        reduce_state *rs, LLVMValueRef r) {
  sc_dtype from = e->k->exprs[ph->value].dtype;
  LLVMValueRef v = e->val[ph->value];
  LLVMValueRef x = convert(e, b, v, from, rs->vt);
  LLVMTypeRef ty = vty(e, rs->vt);
  LLVMValueRef acc = LLVMBuildLoad2(b, ty, rs->acc, "");
  bool f = is_f(rs->vt);
  LLVMValueRef nacc;
  switch (ph->rop) {
  case KIR_RED_SUM: nacc = emit_binary(e, b, KIR_ADD, rs->vt, acc, x); break;
  case KIR_RED_PROD: nacc = emit_binary(e, b, KIR_MUL, rs->vt, acc, x); break;
  /* max(acc, x): a tie keeps x, as the interpreter (signed zeros) */
  case KIR_RED_MAX: nacc = emit_binary(e, b, KIR_MAX, rs->vt, acc, x); break;
  case KIR_RED_MIN: nacc = emit_binary(e, b, KIR_MIN, rs->vt, acc, x); break;
  default: { /* ARGMAX / ARGMIN: first extreme; a NaN is the extreme (first) */
    bool max = ph->rop == KIR_RED_ARGMAX;
    LLVMValueRef better;
    if (f) {
      LLVMValueRef xnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
      LLVMValueRef anan = LLVMBuildFCmp(b, LLVMRealUNO, acc, acc, "");
      LLVMValueRef gt = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, x, acc, "");
      LLVMValueRef newnan = LLVMBuildAnd(b, xnan, LLVMBuildNot(b, anan, ""), "");
      better = LLVMBuildOr(b, gt, newnan, "");
    } else {
      better = emit_compare(b, max ? KIR_GT : KIR_LT, rs->vt, x, acc);
    }
    /* the first element always wins (the init is only a placeholder) */
    LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, r, ci(e->i64, 0), "");
    better = LLVMBuildOr(b, better, first, "");
    LLVMValueRef oi = LLVMBuildLoad2(b, e->i64, rs->idx, "");
    LLVMBuildStore(b, LLVMBuildSelect(b, better, r, oi, ""), rs->idx);
    nacc = LLVMBuildSelect(b, better, x, acc, "");
  }
  }
  LLVMBuildStore(b, nacc, rs->acc);
}

static LLVMValueRef reduce_end(emitter *e, LLVMBuilderRef b, const kir_phase *ph,
                               reduce_state *rs) {
  if (rs->idx) return LLVMBuildLoad2(b, e->i64, rs->idx, "");
  return LLVMBuildLoad2(b, vty(e, rs->vt), rs->acc, "");
}

static void emit_store(emitter *e, LLVMBuilderRef b, const kir_phase *ph) {
  const kir_param *p = &e->k->params[ph->out_param];
  LLVMValueRef idx = emit_expr(e, ph->out_index);
  LLVMValueRef v = emit_expr(e, ph->value);
  v = convert(e, b, v, e->k->exprs[ph->value].dtype, p->dtype);
  LLVMTypeRef st = sty(e, p->dtype);
  LLVMValueRef gep = LLVMBuildInBoundsGEP2(b, st, e->ptr[ph->out_param], &idx, 1, "");
  LLVMValueRef s = LLVMBuildStore(b, narrow(e, b, v, p->dtype), gep);
  LLVMSetAlignment(s, sc_dtype_size(p->dtype));
  set_alias_md(e, s, ph->out_param);
}

/* A counted loop over r in [0, inner) for one phase: the point builder is
 * at the end of the unterminated block *cursor; body(e, lb, r, ud) fills
 * the loop body (lb); afterwards the point builder is at the end of the
 * loop's exit block, which becomes *cursor. Returns the latch branch (for
 * loop metadata). Point-level values the body needs are emitted before
 * the loop's first branch. */
typedef void (*r_body_fn)(emitter *e, LLVMBuilderRef lb, LLVMValueRef r, void *ud);

static LLVMValueRef emit_r_loop(emitter *e, LLVMBasicBlockRef *cursor, r_body_fn body,
                                void *ud) {
  const kir_kernel *k = e->k;
  LLVMValueRef ra = alloca_of(e, e->i64, "r");
  LLVMBuilderRef pb = e->b[L_POINT];
  LLVMBuildStore(pb, ci(e->i64, 0), ra);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "r.head");
  LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "r.body");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "r.exit");
  LLVMValueRef br = LLVMBuildBr(pb, head);
  LLVMPositionBuilderBefore(pb, br); /* later level-2 values go before it */
  LLVMBuilderRef lb = LLVMCreateBuilderInContext(e->ctx);
  LLVMPositionBuilderAtEnd(lb, head);
  LLVMValueRef r = LLVMBuildLoad2(lb, e->i64, ra, "r");
  LLVMBuildCondBr(lb, LLVMBuildICmp(lb, LLVMIntSLT, r, ci(e->i64, k->inner), ""), bb, exit);
  LLVMPositionBuilderAtEnd(lb, bb);
  e->inner = r;
  e->b[L_INNER] = lb;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (e->lvl[i] == L_INNER) e->val[i] = NULL;
  body(e, lb, r, ud);
  LLVMBuildStore(lb, LLVMBuildAdd(lb, r, ci(e->i64, 1), ""), ra);
  LLVMValueRef latch = LLVMBuildBr(lb, head);
  LLVMDisposeBuilder(lb);
  e->b[L_INNER] = NULL;
  e->inner = NULL;
  LLVMPositionBuilderAtEnd(pb, exit);
  *cursor = exit;
  return latch;
}

typedef struct phase_body {
  const kir_phase *ph;
  int32_t phase;         /* its index */
  reduce_state *rs;
  LLVMValueRef key, nan; /* fast MAX/MIN: allocas of the key and the NaN flag */
} phase_body;

static void store_or_reduce(emitter *e, LLVMBuilderRef lb, LLVMValueRef r, void *ud) {
  phase_body *pb = ud;
  load_row_caches(e, lb, r, pb->phase);
  if (pb->ph->kind == KIR_PHASE_STORE) {
    emit_store(e, lb, pb->ph);
  } else {
    emit_expr(e, pb->ph->value);
    reduce_step(e, lb, pb->ph, pb->rs, r);
  }
  store_row_caches(e, lb, r, pb->phase);
}

/* A float MAX/MIN reduction in order is a chain of compares and selects,
 * one element at a time (softmax's row maximum was a quarter of the
 * kernel). Its result does not depend on the order, except for which of
 * +0 and -0 wins a tie and which NaN comes out; so a first loop, which
 * the vectoriser takes, folds the values as order-preserving integer keys
 * (the float's bits, the magnitude bits flipped when negative: signed
 * integer order is float order, -0 below +0) with a signed max (min) and
 * notes any NaN. When there was none and the result is not a zero, it is
 * the in-order result bit for bit (equal nonzero floats have equal bits);
 * otherwise the in-order loop runs. */
static bool fast_minmax(const emitter *e, const kir_phase *ph) {
  sc_dtype t = ph->acc_dtype;
  return ph->kind == KIR_PHASE_REDUCE && (ph->rop == KIR_RED_MAX || ph->rop == KIR_RED_MIN) &&
         (t == SC_DTYPE_F32 || t == SC_DTYPE_F64) && e->k->inner > UNROLL_MAX_INNER;
}

/* key <-> bits: x ^ ((x >> (w - 1)) & INT_MAX), its own inverse */
static LLVMValueRef flip_key(emitter *e, LLVMBuilderRef b, LLVMValueRef x, unsigned w) {
  LLVMTypeRef it = LLVMTypeOf(x);
  LLVMValueRef sign = LLVMBuildAShr(b, x, LLVMConstInt(it, w - 1, 0), "");
  LLVMValueRef mag = LLVMBuildAnd(b, sign, LLVMConstInt(it, (1ull << (w - 1)) - 1, 0), "");
  return LLVMBuildXor(b, x, mag, "");
}

static void minmax_keys(emitter *e, LLVMBuilderRef lb, LLVMValueRef r, void *ud) {
  phase_body *pb = ud;
  const kir_phase *ph = pb->ph;
  sc_dtype vt = ph->acc_dtype;
  unsigned w = vt == SC_DTYPE_F64 ? 64 : 32;
  LLVMTypeRef it = w == 64 ? e->i64 : e->i32;
  load_row_caches(e, lb, r, pb->phase);
  LLVMValueRef v = convert(e, lb, emit_expr(e, ph->value), e->k->exprs[ph->value].dtype, vt);
  store_row_caches(e, lb, r, pb->phase); /* the in-order loop, when it runs, stores again */
  LLVMValueRef key = flip_key(e, lb, LLVMBuildBitCast(lb, v, it, ""), w);
  LLVMValueRef acc = LLVMBuildLoad2(lb, it, pb->key, "");
  LLVMValueRef better =
      LLVMBuildICmp(lb, ph->rop == KIR_RED_MAX ? LLVMIntSGT : LLVMIntSLT, key, acc, "");
  LLVMBuildStore(lb, LLVMBuildSelect(lb, better, key, acc, ""), pb->key);
  LLVMValueRef isnan = LLVMBuildZExt(lb, LLVMBuildFCmp(lb, LLVMRealUNO, v, v, ""), e->i8, "");
  LLVMValueRef seen = LLVMBuildLoad2(lb, e->i8, pb->nan, "");
  LLVMBuildStore(lb, LLVMBuildOr(lb, seen, isnan, ""), pb->nan);
}

/* The fast loop of fast_minmax; on return the point builder is in the
 * block where the in-order loop must run (its result, when the fast one
 * holds, already in rs->acc), and *merge is the block both go on to. */
static void emit_fast_minmax(emitter *e, LLVMBasicBlockRef *cursor, const kir_phase *ph,
                             reduce_state *rs, LLVMBasicBlockRef *merge) {
  unsigned w = ph->acc_dtype == SC_DTYPE_F64 ? 64 : 32;
  LLVMTypeRef it = w == 64 ? e->i64 : e->i32;
  LLVMBuilderRef pb = e->b[L_POINT];
  phase_body body = {.ph = ph, .phase = (int32_t)(ph - e->k->phases), .rs = rs,
                     .key = alloca_of(e, it, "key"), .nan = alloca_of(e, e->i8, "nan")};
  unsigned long long init = ph->rop == KIR_RED_MAX ? 1ull << (w - 1) : (1ull << (w - 1)) - 1;
  LLVMBuildStore(pb, LLVMConstInt(it, init, 0), body.key);
  LLVMBuildStore(pb, LLVMConstInt(e->i8, 0, 0), body.nan);
  mark_loop(e, emit_r_loop(e, cursor, minmax_keys, &body), true);
  LLVMValueRef key = LLVMBuildLoad2(pb, it, body.key, "");
  LLVMValueRef res = LLVMBuildBitCast(pb, flip_key(e, pb, key, w), vty(e, ph->acc_dtype), "");
  LLVMBuildStore(pb, res, rs->acc);
  LLVMValueRef clean = LLVMBuildICmp(pb, LLVMIntEQ, LLVMBuildLoad2(pb, e->i8, body.nan, ""),
                                     LLVMConstInt(e->i8, 0, 0), "");
  LLVMValueRef nonzero =
      LLVMBuildFCmp(pb, LLVMRealONE, res, LLVMConstReal(LLVMTypeOf(res), 0.0), "");
  LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "minmax.inorder");
  *merge = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "minmax.done");
  LLVMBuildCondBr(pb, LLVMBuildAnd(pb, clean, nonzero, ""), *merge, slow);
  LLVMPositionBuilderAtEnd(pb, slow);
  *cursor = slow;
}

/* Emits all phases for one outer point; the point builder is at the end
 * of an unterminated block `*cursor`, and is left at the end of the new
 * cursor block. */
static void emit_phases(emitter *e, LLVMBasicBlockRef *cursor) {
  const kir_kernel *k = e->k;
  for (int32_t p = 0; p < k->n_phases; p++) {
    const kir_phase *ph = &k->phases[p];
    bool loop = k->inner > 1;
    if (ph->kind == KIR_PHASE_STORE && loop && e->lvl[ph->value] < L_INNER &&
        e->lvl[ph->out_index] < L_INNER)
      loop = false; /* the same element written `inner` times: once */
    if (!loop) {
      LLVMBuilderRef b = e->b[L_POINT];
      if (ph->kind == KIR_PHASE_STORE) {
        emit_store(e, b, ph);
      } else {
        reduce_state rs;
        reduce_begin(e, ph, &rs);
        emit_expr(e, ph->value);
        reduce_step(e, b, ph, &rs, ci(e->i64, 0));
        e->reg[p] = reduce_end(e, b, ph, &rs);
      }
      continue;
    }
    reduce_state rs = {0};
    if (ph->kind == KIR_PHASE_REDUCE) reduce_begin(e, ph, &rs);
    LLVMBasicBlockRef merge = NULL;
    if (fast_minmax(e, ph)) emit_fast_minmax(e, cursor, ph, &rs, &merge);
    phase_body body = {.ph = ph, .phase = p, .rs = &rs};
    if (merge) /* the in-order loop starts over */
      LLVMBuildStore(e->b[L_POINT], reduce_init(e, ph->rop, rs.vt), rs.acc);
    LLVMValueRef latch = emit_r_loop(e, cursor, store_or_reduce, &body);
    if (ph->kind == KIR_PHASE_REDUCE && is_f(rs.vt) &&
        (ph->rop == KIR_RED_SUM || ph->rop == KIR_RED_PROD))
      mark_loop(e, latch, true);
    else if (ph->kind == KIR_PHASE_REDUCE && ph->rop != KIR_RED_SUM && ph->rop != KIR_RED_PROD &&
             k->inner <= UNROLL_MAX_INNER)
      mark_loop(e, latch, false); /* in order, so never vectorised: unrolled instead */
    if (merge) {
      LLVMBuildBr(e->b[L_POINT], merge);
      LLVMPositionBuilderAtEnd(e->b[L_POINT], merge);
      *cursor = merge;
    }
    if (ph->kind == KIR_PHASE_REDUCE) e->reg[p] = reduce_end(e, e->b[L_POINT], ph, &rs);
  }
}

/* ---- the function ---- */

/* Whether params a and b of the kernel are bound to the same address by
 * the program's memory plan. */
static bool same_address(const emitter *e, int32_t a, int32_t b) {
  return sc_program_same_address(e->prog, e->k->params[a].buffer, e->k->params[b].buffer);
}

/* In-place pairs (see sc_cpu_emit_kernel in cpu_internal.h): a read param
 * at the address of a written param it is aligned with is read through the
 * written param's pointer. Every element is then read and written at the
 * same loop point, reads first, so vector code is exact. */
static void share_inplace_pointers(emitter *e, LLVMBuilderRef b) {
  const kir_kernel *k = e->k;
  for (int32_t r = 0; r < k->n_params; r++) {
    if (k->params[r].written) continue;
    for (int32_t w = 0; w < k->n_params; w++) {
      if (!k->params[w].written || !same_address(e, r, w) || !kir_reads_aligned(k, r, w))
        continue;
      e->ptr[r] = LLVMBuildBitCast(b, e->ptr[w],
                                   LLVMPointerType(sty(e, k->params[r].dtype), 0), "inplace");
      break;
    }
  }
}

static sc_status emit_body(emitter *e) {
  const kir_kernel *k = e->k;
  LLVMValueRef bufs = LLVMGetParam(e->fn, 0);
  LLVMValueRef begin = LLVMGetParam(e->fn, 1);
  LLVMValueRef end = LLVMGetParam(e->fn, 2);
  LLVMTypeRef i8p = LLVMPointerType(e->i8, 0);

  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "entry");
  LLVMBasicBlockRef setup = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "setup");
  LLVMBasicBlockRef ret = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "ret");
  LLVMBasicBlockRef rowh = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "row.head");
  LLVMBasicBlockRef rowb = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "row.body");
  LLVMBasicBlockRef jh = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "j.head");
  LLVMBasicBlockRef jb = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "j.body");
  LLVMBasicBlockRef jx = LLVMAppendBasicBlockInContext(e->ctx, e->fn, "j.exit");

  LLVMBuilderRef b = LLVMCreateBuilderInContext(e->ctx);
  LLVMPositionBuilderAtEnd(b, ret);
  LLVMBuildRetVoid(b);

  bool empty = false;
  for (int32_t d = 0; d < e->rank; d++) empty |= e->dims[d] <= 0;

  /* entry: allocas (through e->ab, before the branch), empty-range test */
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef go = LLVMBuildICmp(b, LLVMIntSLT, begin, end, "");
  LLVMValueRef ebr = empty ? LLVMBuildBr(b, ret) : LLVMBuildCondBr(b, go, setup, ret);
  LLVMPositionBuilderBefore(e->ab, ebr);

  /* setup: param pointers, start multi-index */
  LLVMPositionBuilderAtEnd(b, setup);
  for (int32_t i = 0; i < k->n_params; i++) {
    LLVMValueRef idx = ci(e->i64, i);
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(b, i8p, bufs, &idx, 1, "");
    LLVMValueRef raw = LLVMBuildLoad2(b, i8p, slot, "");
    e->ptr[i] = LLVMBuildBitCast(b, raw, LLVMPointerType(sty(e, k->params[i].dtype), 0),
                                 k->params[i].written ? "out" : "in");
  }
  share_inplace_pointers(e, b);
  int32_t R = e->rank;
  int64_t D = e->dims[R - 1];
  LLVMValueRef lin_a = alloca_of(e, e->i64, "lin");
  LLVMValueRef j0_a = alloca_of(e, e->i64, "j0");
  LLVMValueRef j_a = alloca_of(e, e->i64, "j");
  LLVMValueRef o_a[SC_MAX_RANK];
  if (!empty) {
    LLVMValueRef rowlin = LLVMBuildSDiv(b, begin, ci(e->i64, D), "");
    LLVMBuildStore(b, LLVMBuildSRem(b, begin, ci(e->i64, D), ""), j0_a);
    for (int32_t d = R - 2; d >= 0; d--) {
      o_a[d] = alloca_of(e, e->i64, "o");
      LLVMBuildStore(b, LLVMBuildSRem(b, rowlin, ci(e->i64, e->dims[d]), ""), o_a[d]);
      if (d > 0) rowlin = LLVMBuildSDiv(b, rowlin, ci(e->i64, e->dims[d]), "");
    }
  } else {
    LLVMBuildStore(b, ci(e->i64, 0), j0_a);
  }
  LLVMBuildStore(b, begin, lin_a);
  LLVMValueRef sbr = LLVMBuildBr(b, rowh);
  LLVMPositionBuilderBefore(e->b[L_ENTRY], sbr);

  /* row.head: while (lin < end) */
  LLVMPositionBuilderAtEnd(b, rowh);
  LLVMValueRef lin = LLVMBuildLoad2(b, e->i64, lin_a, "lin");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lin, end, ""), rowb, ret);

  /* row.body: outer vars but the last, jend */
  LLVMPositionBuilderAtEnd(b, rowb);
  for (int32_t d = 0; d < R - 1; d++)
    e->outer[d] = empty ? ci(e->i64, 0) : LLVMBuildLoad2(b, e->i64, o_a[d], "o");
  LLVMValueRef j0 = LLVMBuildLoad2(b, e->i64, j0_a, "j0");
  LLVMValueRef left = LLVMBuildAdd(b, j0, LLVMBuildSub(b, end, lin, ""), "");
  LLVMValueRef Dv = ci(e->i64, D);
  LLVMValueRef jend =
      LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, left, Dv, ""), left, Dv, "jend");
  LLVMBuildStore(b, j0, j_a);
  LLVMValueRef rbr = LLVMBuildBr(b, jh);
  LLVMPositionBuilderBefore(e->b[L_ROW], rbr);

  /* j.head: for (j = j0; j < jend; j++) */
  LLVMPositionBuilderAtEnd(b, jh);
  LLVMValueRef j = LLVMBuildLoad2(b, e->i64, j_a, "j");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, j, jend, ""), jb, jx);
  e->outer[R - 1] = j;

  /* j.body: the phases */
  LLVMPositionBuilderAtEnd(e->b[L_POINT], jb);
  LLVMBasicBlockRef cursor = jb;
  emit_phases(e, &cursor);
  LLVMBuilderRef pb = e->b[L_POINT];
  LLVMBuildStore(pb, LLVMBuildAdd(pb, j, ci(e->i64, 1), ""), j_a);
  LLVMBuildBr(pb, jh);

  /* j.exit: advance the row odometer */
  LLVMPositionBuilderAtEnd(b, jx);
  LLVMBuildStore(b, LLVMBuildAdd(b, lin, LLVMBuildSub(b, jend, j0, ""), ""), lin_a);
  LLVMBuildStore(b, ci(e->i64, 0), j0_a);
  if (!empty) {
    LLVMValueRef carry = LLVMConstInt(e->i1, 1, 0);
    for (int32_t d = R - 2; d >= 0; d--) {
      LLVMValueRef o = LLVMBuildLoad2(b, e->i64, o_a[d], "");
      LLVMValueRef t = LLVMBuildAdd(b, o, LLVMBuildZExt(b, carry, e->i64, ""), "");
      LLVMValueRef wrap = LLVMBuildICmp(b, LLVMIntEQ, t, ci(e->i64, e->dims[d]), "");
      LLVMBuildStore(b, LLVMBuildSelect(b, wrap, ci(e->i64, 0), t, ""), o_a[d]);
      carry = wrap;
    }
  }
  LLVMBuildBr(b, rowh);
  LLVMDisposeBuilder(b);
  return SC_OK;
}

/* A function `name` of the kernel ABI (cpu.h), external, with the
 * attributes every kernel has. */
static LLVMValueRef kernel_function(LLVMModuleRef m, LLVMTargetMachineRef tm, const char *name) {
  LLVMContextRef ctx = LLVMGetModuleContext(m);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMTypeRef i8pp = LLVMPointerType(LLVMPointerType(LLVMInt8TypeInContext(ctx), 0), 0);
  LLVMTypeRef args[3] = {i8pp, i64, i64};
  LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(ctx), args, 3, 0);
  LLVMValueRef fn = LLVMAddFunction(m, name, fty);
  LLVMSetLinkage(fn, LLVMExternalLinkage);
  const char *fattrs[] = {"nounwind", "nofree", "nosync"};
  for (size_t i = 0; i < sizeof fattrs / sizeof *fattrs; i++) {
    unsigned kind = LLVMGetEnumAttributeKindForName(fattrs[i], strlen(fattrs[i]));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, kind, 0));
  }
  const char *pattrs[] = {"nocapture", "readonly", "noalias"};
  for (size_t i = 0; i < sizeof pattrs / sizeof *pattrs; i++) {
    unsigned kind = LLVMGetEnumAttributeKindForName(pattrs[i], strlen(pattrs[i]));
    LLVMAddAttributeAtIndex(fn, 1, LLVMCreateEnumAttribute(ctx, kind, 0));
  }
  char *cpu = LLVMGetTargetMachineCPU(tm);
  char *feat = LLVMGetTargetMachineFeatureString(tm);
  LLVMAddAttributeAtIndex(
      fn, LLVMAttributeFunctionIndex,
      LLVMCreateStringAttribute(ctx, "target-cpu", 10, cpu, (unsigned)strlen(cpu)));
  if (feat[0])
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(ctx, "target-features", 15, feat,
                                                      (unsigned)strlen(feat)));
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(feat);
  return fn;
}

/* Whether every segment of multi-tensor kernel k places its params as
 * segment 0 does in p's memory plan (the same in-place pairs, the same
 * disjoint pairs): what the template's code assumes from the plan. */
static bool segments_alike(const sc_program *p, const kir_kernel *k) {
  int32_t n = k->seg_params;
  for (int32_t s = 1; s < k->n_segs; s++)
    for (int32_t i = 0; i < n; i++)
      for (int32_t j = 0; j < n; j++) {
        int32_t a0 = k->params[i].buffer, b0 = k->params[j].buffer;
        int32_t a = k->params[s * n + i].buffer, b = k->params[s * n + j].buffer;
        if (sc_program_same_address(p, a, b) != sc_program_same_address(p, a0, b0) ||
            sc_program_disjoint(p, a, b) != sc_program_disjoint(p, a0, b0))
          return false;
      }
  return true;
}

/* The template of multi-tensor kernel k as an internal function `name`
 * (*fn): an ordinary 1-D kernel over `points` points of inner extent
 * `inner`. */
static sc_status emit_template(LLVMModuleRef m, LLVMTargetMachineRef tm, const sc_program *p,
                               const kir_kernel *k, const char *name, int64_t points,
                               int64_t inner, LLVMValueRef *fn, sc_diag *diag) {
  kir_kernel t = *k;
  t.name = name;
  t.n_params = k->seg_params;
  t.n_segs = 0;
  t.seg_start = NULL;
  t.seg_inner = NULL;
  t.hash_slots = NULL;
  t.cap_hash = 0;
  t.outer_dims[0] = points;
  t.inner = inner;
  sc_status st = sc_cpu_emit_kernel(m, tm, p && segments_alike(p, k) ? p : NULL, &t, diag);
  if (st != SC_OK) return st;
  LLVMValueRef seg = LLVMGetNamedFunction(m, name);
  LLVMSetLinkage(seg, LLVMInternalLinkage);
  LLVMContextRef ctx = LLVMGetModuleContext(m);
  /* one copy of the body, called per segment: inlined into each call (28
   * for GPT-2's AdamW) it was vectorised 28 times, and compiling the step
   * took more than sc_cpu_probe_compile's estimate, which counts a
   * kernel's expressions once (LLVM then ends the process under a tight
   * ulimit -v); a call per segment costs nothing next to its loop */
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(seg, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(ctx, noinline, 0));
  *fn = seg;
  return SC_OK;
}

/* A multi-tensor kernel (kir.h, n_segs): its template — the body over one
 * segment's params, as an ordinary 1-D kernel "<name>.seg" over the
 * longest segment, internal; a multi-tensor reduction's once per inner
 * extent, "<name>.seg<inner>", so that a segment reduces in its own
 * kernel's loop, the same code and the same bits — and the kernel itself,
 * which calls it once per segment that meets [begin, end), with the
 * segment's params (bufs + s * seg_params) and the part of its range
 * inside, in segment order. */
static sc_status emit_segmented(LLVMModuleRef m, LLVMTargetMachineRef tm, const sc_program *p,
                                const kir_kernel *k, sc_diag *diag) {
  char name[512];
  LLVMValueRef *fns = sc_calloc((size_t)k->n_segs, sizeof *fns);
  if (!fns) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  int64_t longest = 1;
  for (int32_t s = 0; s < k->n_segs; s++)
    if (k->seg_start[s + 1] - k->seg_start[s] > longest)
      longest = k->seg_start[s + 1] - k->seg_start[s];
  for (int32_t s = 0; s < k->n_segs; s++) {
    for (int32_t r = 0; r < s && !fns[s]; r++)
      if (kir_seg_inner(k, r) == kir_seg_inner(k, s)) fns[s] = fns[r];
    if (fns[s]) continue;
    if (k->seg_inner) snprintf(name, sizeof name, "%s.seg%lld", k->name, (long long)k->seg_inner[s]);
    else snprintf(name, sizeof name, "%s.seg", k->name);
    sc_status st = emit_template(m, tm, p, k, name, longest, kir_seg_inner(k, s), &fns[s], diag);
    if (st != SC_OK) {
      sc_free(fns);
      return st;
    }
  }
  LLVMContextRef ctx = LLVMGetModuleContext(m);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
  LLVMValueRef fn = kernel_function(m, tm, k->name);
  LLVMValueRef bufs = LLVMGetParam(fn, 0), begin = LLVMGetParam(fn, 1), end = LLVMGetParam(fn, 2);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
  for (int32_t s = 0; s < k->n_segs; s++) {
    LLVMValueRef s0 = LLVMConstInt(i64, (unsigned long long)k->seg_start[s], 1);
    LLVMValueRef s1 = LLVMConstInt(i64, (unsigned long long)k->seg_start[s + 1], 1);
    LLVMValueRef lo = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, begin, s0, ""), begin, s0, "");
    LLVMValueRef hi = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, end, s1, ""), end, s1, "");
    LLVMBasicBlockRef call = LLVMAppendBasicBlockInContext(ctx, fn, "seg");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(ctx, fn, "next");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo, hi, ""), call, next);
    LLVMPositionBuilderAtEnd(b, call);
    LLVMValueRef off = LLVMConstInt(i64, (unsigned long long)s * (unsigned long long)k->seg_params, 0);
    LLVMValueRef args[3] = {LLVMBuildInBoundsGEP2(b, i8p, bufs, &off, 1, ""),
                            LLVMBuildSub(b, lo, s0, ""), LLVMBuildSub(b, hi, s0, "")};
    LLVMBuildCall2(b, LLVMGlobalGetValueType(fns[s]), fns[s], args, 3, "");
    LLVMBuildBr(b, next);
    LLVMPositionBuilderAtEnd(b, next);
  }
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  sc_free(fns);
  return SC_OK;
}

sc_status sc_cpu_emit_kernel(LLVMModuleRef m, LLVMTargetMachineRef tm,
                             const sc_program *p, const kir_kernel *k, sc_diag *diag) {
  sc_status st = kir_verify(k, diag);
  if (st != SC_OK) return st;
  static const char *const reserved[] = {"tanhf", "erff", "atanf", "tanh", "erf", "atan"};
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(k->name, reserved[i]))
      return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                         "CPU backend: kernel name '%s' is a libm function", k->name);
  if (LLVMGetNamedFunction(m, k->name))
    return sc_diag_set(diag, SC_ERR_INVALID, NULL, NULL,
                       "CPU backend: two kernels are named '%s'", k->name);
  if (k->n_segs > 0) return emit_segmented(m, tm, p, k, diag);
  for (int32_t i = 0; i < k->n_params; i++) {
    sc_dtype t = k->params[i].dtype;
    if (t == SC_DTYPE_STRING || t == SC_DTYPE_C64 || t == SC_DTYPE_C128 ||
        t == SC_DTYPE_UNDEF)
      return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "CPU backend: kernel '%s': param %d has dtype %s", k->name,
                         (int)i, sc_dtype_name(t));
  }
  for (int32_t i = 0; i < k->n_exprs; i++) {
    sc_dtype t = k->exprs[i].dtype;
    if (t == SC_DTYPE_STRING || t == SC_DTYPE_C64 || t == SC_DTYPE_C128 ||
        t == SC_DTYPE_UNDEF)
      return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                         "CPU backend: kernel '%s': expression %d has dtype %s",
                         k->name, (int)i, sc_dtype_name(t));
  }

  emitter e;
  memset(&e, 0, sizeof e);
  e.prog = p;
  e.ctx = LLVMGetModuleContext(m);
  e.m = m;
  e.k = k;
  e.diag = diag;
  e.i1 = LLVMInt1TypeInContext(e.ctx);
  e.i8 = LLVMInt8TypeInContext(e.ctx);
  e.i16 = LLVMInt16TypeInContext(e.ctx);
  e.i32 = LLVMInt32TypeInContext(e.ctx);
  e.i64 = LLVMInt64TypeInContext(e.ctx);
  e.f16 = LLVMHalfTypeInContext(e.ctx);
  e.f32 = LLVMFloatTypeInContext(e.ctx);
  e.f64 = LLVMDoubleTypeInContext(e.ctx);
  e.vd = LLVMVoidTypeInContext(e.ctx);
  e.rank = k->outer_rank > 0 ? k->outer_rank : 1;
  for (int32_t d = 0; d < e.rank; d++) e.dims[d] = k->outer_rank > 0 ? k->outer_dims[d] : 1;

  size_t n = (size_t)k->n_exprs;
  e.val = sc_calloc(n ? n : 1, sizeof *e.val);
  e.lvl = sc_calloc(n ? n : 1, 1);
  e.mark = sc_calloc(n ? n : 1, 1);
  e.ptr = sc_calloc(k->n_params ? (size_t)k->n_params : 1, sizeof *e.ptr);
  e.reg = sc_calloc(k->n_phases ? (size_t)k->n_phases : 1, sizeof *e.reg);
  e.scope = sc_calloc(k->n_params ? (size_t)k->n_params : 1, sizeof *e.scope);
  e.noalias = sc_calloc(k->n_params ? (size_t)k->n_params : 1, sizeof *e.noalias);
  e.fill = sc_calloc(n ? n : 1, sizeof *e.fill);
  e.cache = sc_calloc(n ? n : 1, sizeof *e.cache);
  if (!e.val || !e.lvl || !e.mark || !e.ptr || !e.reg || !e.scope || !e.noalias || !e.fill ||
      !e.cache) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "CPU backend: out of memory");
    goto done;
  }
  compute_levels(&e);
  if (!plan_row_caches(&e)) {
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "CPU backend: out of memory");
    goto done;
  }

  e.fn = kernel_function(m, tm, k->name);
  alias_scopes(&e);
  for (int l = 0; l < L_INNER; l++) e.b[l] = LLVMCreateBuilderInContext(e.ctx);
  e.ab = LLVMCreateBuilderInContext(e.ctx);
  st = emit_body(&e);
  for (int l = 0; l < L_INNER; l++) LLVMDisposeBuilder(e.b[l]);
  LLVMDisposeBuilder(e.ab);
done:
  sc_free(e.val);
  sc_free(e.lvl);
  sc_free(e.mark);
  sc_free(e.ptr);
  sc_free(e.reg);
  sc_free(e.scope);
  sc_free(e.noalias);
  sc_free(e.fill);
  sc_free(e.cache);
  return st;
}
