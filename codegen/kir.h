/* kir.h — the kernel IR: what one generated kernel computes.
 *
 * A kernel is a parallel loop nest over an OUTER domain (rank outer_rank,
 * dims outer_dims: every point is independent and may run on any thread or
 * GPU block) and, inside each outer point, a sequence of PHASES over an INNER
 * loop of extent `inner` (1 when there is none):
 *
 *   for each outer index o (parallel):
 *     for phase p in order:
 *       REDUCE: reg[p] = fold(rop, init, value(o, r) for r in 0..inner-1)
 *       STORE:  for r in 0..inner-1: param[out].data[index(o, r)] = value(o, r)
 *
 * Expressions form a DAG stored in the kernel's `exprs` array and referred to
 * by index (operands always have smaller indices: the array is in
 * topological order). Leaves are constants, loop variables (KIR_VAR: outer
 * dim d, or the inner index with var == KIR_INNER), registers of earlier
 * REDUCE phases (KIR_REG) and loads (KIR_LOAD: param `buf` at the element
 * offset given by operand a, an i64 expression). Index arithmetic is ordinary
 * i64 expressions (ADD, MUL, DIV, MOD on SC_DTYPE_I64), so broadcasting,
 * transposes, slices, reshapes and gathers are all just index expressions.
 *
 * Kinds of kernels this covers:
 *   elementwise / broadcast / data movement: inner = 1, one STORE phase;
 *   reductions: reduced axes flattened into the inner loop, REDUCE + STORE;
 *   row kernels (softmax, log-softmax, layer/RMS/group norm): several REDUCE
 *   phases over a row, then a STORE phase using their registers.
 * Large matrix products and convolutions are not kir: they are library calls
 * (program.h), with kir kernels for prologues (im2col) and epilogues.
 *
 * Semantics every backend implements identically:
 *   - arithmetic happens in the expression's dtype; f16/bf16 values are
 *     computed in f32 (loads widen, stores narrow, round to nearest even);
 *   - integer DIV truncates toward zero, MOD is C's remainder (sign of the
 *     dividend) — lowering builds ONNX's other conventions from these;
 *   - float MIN/MAX propagate NaN; CAST follows ONNX Cast (float→int
 *     truncates; anything→bool is x != 0);
 *   - a REDUCE phase's accumulator has dtype acc_dtype (f32 for f16/bf16
 *     inputs); reduction order is unspecified (backends may reassociate).
 *
 * Kernels are built with the kir_* builder functions below, which keep the
 * expression array topological and hash-cons identical expressions, and are
 * printed with kir_print (golden tests, --emit=kir). */
#ifndef SC_CODEGEN_KIR_H
#define SC_CODEGEN_KIR_H

#include <stdio.h>

#include "ir/ir.h"

#define KIR_OPS(X)                                                        \
  /* leaves */                                                            \
  X(CONST, "const", 0) X(VAR, "var", 0) X(REG, "reg", 0) X(LOAD, "load", 1) \
  /* binary arithmetic (operands and result of the node's dtype) */       \
  X(ADD, "add", 2) X(SUB, "sub", 2) X(MUL, "mul", 2) X(DIV, "div", 2)     \
  X(MOD, "mod", 2) X(MIN, "min", 2) X(MAX, "max", 2) X(POW, "pow", 2)     \
  /* shifts (>> arithmetic on signed types; counts out of range: docs) */ \
  X(SHL, "shl", 2) X(SHR, "shr", 2)                                       \
  /* unary math */                                                        \
  X(NEG, "neg", 1) X(ABS, "abs", 1) X(EXP, "exp", 1) X(LOG, "log", 1)     \
  X(SQRT, "sqrt", 1) X(RSQRT, "rsqrt", 1) X(TANH, "tanh", 1)              \
  X(ERF, "erf", 1) X(SIN, "sin", 1) X(COS, "cos", 1) X(ATAN, "atan", 1)     \
  X(FLOOR, "floor", 1)                                                    \
  X(CEIL, "ceil", 1) X(ROUND, "round", 1) X(RECIP, "recip", 1)            \
  X(SIGMOID, "sigmoid", 1) X(ISNAN, "isnan", 1) X(ISINF, "isinf", 1)      \
  /* conversion: operand a converted to the node's dtype */               \
  X(CAST, "cast", 1)                                                      \
  /* reinterpretation: operand a's bits as the node's dtype (same width) */ \
  X(BITCAST, "bitcast", 1)                                                \
  /* comparisons (result bool); logic on bools, bitwise on integers */   \
  X(EQ, "eq", 2) X(NE, "ne", 2) X(LT, "lt", 2) X(LE, "le", 2)             \
  X(GT, "gt", 2) X(GE, "ge", 2) X(AND, "and", 2) X(OR, "or", 2)           \
  X(XOR, "xor", 2) X(NOT, "not", 1)                                       \
  /* a ? b : c */                                                         \
  X(SELECT, "select", 3)

typedef enum kir_op {
#define X(e, s, n) KIR_##e,
  KIR_OPS(X)
#undef X
  KIR_OP_COUNT
} kir_op;

const char *kir_op_name(kir_op op);
int kir_op_arity(kir_op op);

enum { KIR_INNER = -1 }; /* KIR_VAR.var for the inner loop index */

/* A kernel whose work (outer points x inner x phases) is below this runs on
 * the calling thread alone on the CPU device (waking the pool costs more
 * than it saves); at or above it, its outer points are split over the
 * pool. The cost model (codegen/dist_sim.c) times kernels by the same rule. */
enum { KIR_SPLIT_MIN_WORK = 16384 };

typedef struct kir_expr {
  kir_op op;
  sc_dtype dtype;   /* result type (I64 for index arithmetic, BOOL for tests) */
  int32_t a, b, c;  /* operand expr ids, -1 when unused */
  int32_t var;      /* VAR: outer dim or KIR_INNER; REG: phase index; LOAD: param */
  double f;         /* CONST of a float dtype */
  int64_t i;        /* CONST of an integer or bool dtype */
} kir_expr;

typedef enum kir_phase_kind { KIR_PHASE_REDUCE, KIR_PHASE_STORE } kir_phase_kind;
typedef enum kir_reduce_op {
  KIR_RED_SUM, KIR_RED_PROD, KIR_RED_MAX, KIR_RED_MIN,
  KIR_RED_ARGMAX, KIR_RED_ARGMIN, /* value = index of extreme (first), i64 */
  KIR_RED_COUNT
} kir_reduce_op;

typedef struct kir_phase {
  kir_phase_kind kind;
  kir_reduce_op rop;  /* REDUCE */
  sc_dtype acc_dtype; /* REDUCE: accumulator (and register) dtype */
  int32_t value;      /* expr: reduced value (REDUCE) or stored value (STORE);
                         ARGMAX/ARGMIN reduce `value` and keep the inner index */
  int32_t out_param;  /* STORE: param written */
  int32_t out_index;  /* STORE: i64 expr, element offset into out_param */
} kir_phase;

typedef struct kir_param {
  int32_t buffer;     /* buffer id in the program (program.h) */
  sc_dtype dtype;
  int64_t numel;      /* elements (for bounds checks in debug builds) */
  bool written;       /* an output of the kernel */
} kir_param;

typedef struct kir_kernel {
  const char *name;   /* unique in the program; a C identifier */
  int32_t n_params;
  kir_param *params;
  int32_t outer_rank; /* 0: a single outer point */
  int64_t outer_dims[SC_MAX_RANK];
  int64_t inner;      /* >= 1 */
  int32_t n_exprs, cap_exprs;
  kir_expr *exprs;
  int32_t n_phases, cap_phases;
  kir_phase *phases;
  const char *origin; /* the graph node(s) it came from, for comments */
  /* A multi-tensor kernel (codegen/multi_tensor.c) when n_segs > 0: the
   * same elementwise body run over n_segs tensors in one launch, as
   * PyTorch's fused AdamW and apex's multi_tensor_apply do. Its outer
   * domain is 1-D, [seg_start[n_segs]], inner 1; outer point o belongs to
   * the segment s with seg_start[s] <= o < seg_start[s + 1] (strictly
   * increasing, seg_start[0] = 0), and there KIR_VAR 0 is o - seg_start[s]
   * (the element of the segment's tensors). Exprs and phases name only the
   * TEMPLATE params 0 .. seg_params - 1; segment s reads and writes params
   * s * seg_params + j in their place (n_params = n_segs * seg_params;
   * param s * seg_params + j has template param j's dtype and written
   * flag, and its own buffer and numel). 0 and NULL: an ordinary kernel.
   *
   * A multi-tensor REDUCTION when seg_inner is not NULL (n_segs entries):
   * the same reduction run over n_segs tensors, apex's multi_tensor_l2norm
   * without its chunking. Each segment is one outer point (seg_start[s] =
   * s) whose inner loop has its own extent: KIR_INNER runs over
   * 0 .. seg_inner[s] - 1 there, and `inner` is the largest of them. Each
   * segment reduces in the order its own kernel with inner seg_inner[s]
   * would (the same bits on every backend). */
  int32_t n_segs;
  int32_t seg_params;
  int64_t *seg_start;  /* n_segs + 1 entries */
  int64_t *seg_inner;  /* n_segs entries, or NULL */
  int32_t *hash_slots; /* builders' hash-consing table (kir.c): open
                          addressing, a slot holds expr id + 1, 0 = empty;
                          rebuilt from exprs when NULL or too small */
  int32_t cap_hash;    /* slots in hash_slots (a power of two) */
} kir_kernel;

/* ---- building (allocations in `arena`; the kernel owns nothing else) ---- */
kir_kernel *kir_kernel_create(sc_arena *arena, const char *name);
int32_t kir_add_param(sc_arena *arena, kir_kernel *k, int32_t buffer,
                      sc_dtype dtype, int64_t numel, bool written);
/* Expression builders return the expr id (hash-consed), -1 on allocation
 * failure. They fold constants and trivial identities (x+0, x*1, x*0 for
 * ints, i/1, i%1) so index arithmetic stays small. */
int32_t kir_const_f(sc_arena *arena, kir_kernel *k, sc_dtype t, double v);
int32_t kir_const_i(sc_arena *arena, kir_kernel *k, sc_dtype t, int64_t v);
int32_t kir_var(sc_arena *arena, kir_kernel *k, int32_t var);
int32_t kir_reg(sc_arena *arena, kir_kernel *k, int32_t phase);
int32_t kir_load(sc_arena *arena, kir_kernel *k, int32_t param, int32_t index);
int32_t kir_unary(sc_arena *arena, kir_kernel *k, kir_op op, int32_t a);
int32_t kir_binary(sc_arena *arena, kir_kernel *k, kir_op op, int32_t a, int32_t b);
int32_t kir_select(sc_arena *arena, kir_kernel *k, int32_t c, int32_t a, int32_t b);
int32_t kir_cast(sc_arena *arena, kir_kernel *k, sc_dtype to, int32_t a);
/* a's bits read as dtype `to`, of the same size (bool and u8/i8 are one byte:
 * a byte read as bool is true when nonzero). */
int32_t kir_bitcast(sc_arena *arena, kir_kernel *k, sc_dtype to, int32_t a);
int32_t kir_add_reduce(sc_arena *arena, kir_kernel *k, kir_reduce_op rop,
                       sc_dtype acc, int32_t value); /* returns the phase index */
int32_t kir_add_store(sc_arena *arena, kir_kernel *k, int32_t param,
                      int32_t index, int32_t value);

/* Checks structure: operand ids < own id, dtypes consistent, params in
 * range, REG only after its phase, VAR dims < outer_rank. */
sc_status kir_verify(const kir_kernel *k, sc_diag *diag);
void kir_print(const kir_kernel *k, FILE *out);

/* Reference interpreter (slow, exact semantics): runs k over buffers
 * bufs[param] — the oracle for backend tests. */
sc_status kir_interpret(const kir_kernel *k, void *const *bufs, sc_diag *diag);

/* True when in-place reuse of param `param`'s storage by `out_param` is
 * legal: both have the same numel and element size, out_param is stored by
 * exactly one STORE phase whose index is provably injective (affine in the
 * loop variables with non-overlapping strides), every LOAD of `param` uses
 * that very index expression, and no load of `param` comes in a phase after
 * that store. Conservative: false when unsure. Used by passes/memplan.c. */
bool kir_reads_aligned(const kir_kernel *k, int32_t param, int32_t out_param);

/* The param that template param j (a LOAD's var, a STORE's out_param) is
 * in segment s of a multi-tensor kernel: s * seg_params + j; j itself in
 * an ordinary kernel (s 0). */
static inline int32_t kir_seg_param(const kir_kernel *k, int32_t s, int32_t j) {
  return k->n_segs > 0 ? s * k->seg_params + j : j;
}

/* The segment of a multi-tensor kernel's outer point o (binary search over
 * seg_start); 0 for an ordinary kernel. */
int32_t kir_segment_of(const kir_kernel *k, int64_t o);

/* The inner extent of segment s: seg_inner[s] in a multi-tensor
 * reduction, `inner` otherwise. */
static inline int64_t kir_seg_inner(const kir_kernel *k, int32_t s) {
  return k->seg_inner ? k->seg_inner[s] : k->inner;
}

/* Whether i64 expression id is an affine form of the loop variables:
 * sum(coef[v] * var v) + *cst, slots v = 0 .. outer_rank - 1 the outer dims
 * and slot outer_rank the inner index (coef has outer_rank + 1 entries;
 * the caller zeroes them and *cst, and the form is added to them).
 * Constants may multiply from either side; false for anything else or on
 * overflow. */
bool kir_affine(const kir_kernel *k, int32_t id, int64_t *coef, int64_t *cst);

/* True when i64 expression id is the row-major offset of the outer point:
 * the sum over outer dims d of var d times the product of the dims after d
 * (a dim of extent 1 may have any coefficient), without a constant term or
 * the inner index (when inner > 1). Always false in a multi-tensor kernel
 * (KIR_VAR 0 is the element of a segment there, not the point). */
bool kir_is_point_index(const kir_kernel *k, int32_t id);

/* True when i64 expression id is the inner index itself, r, at every point
 * of a kernel of one outer point (every outer dim of extent 1): r, or r
 * taken apart and put back together (sum over digits of ((r / div) % mod)
 * * div, each digit's div the product of the mods below it), as a
 * reduction over a tensor's every axis reads the tensor through its own
 * dims. False in a multi-tensor kernel. */
bool kir_is_inner_index(const kir_kernel *k, int32_t id);

#endif
