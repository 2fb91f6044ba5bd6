/* lower_internal.h — what the per-op lowerings (codegen/lower_*.c) use.
 *
 * The context holds the kernel being built and answers "what is input i of
 * node n at index idx" — loading from the input's buffer, or, when the
 * producer is a POINT op fused into the same group, inlining the producer's
 * expression at that index (recursively). Index vectors are arrays of i64
 * kir expr ids, one per dim of the value they index. Implemented in
 * codegen/lower.c. */
#ifndef SC_CODEGEN_LOWER_INTERNAL_H
#define SC_CODEGEN_LOWER_INTERNAL_H

#include "codegen/lower.h"

struct sc_lower_ctx {
  sc_graph *g;
  sc_program *p;
  sc_arena *arena;        /* == &p->arena: kernels live as long as the program */
  kir_kernel *k;          /* kernel being built (NULL for STEP lowerings) */
  int32_t *value_buffer;  /* graph value id -> program buffer id, -1 if none */
  int32_t *node_group;    /* graph node id -> fusion group id */
  int32_t group;          /* group being lowered */
  int32_t *param_of_buffer; /* buffer id -> param index in k, -1 (scratch) */
  sc_diag *diag;
  /* epilogue: set by lower.c while a KERNEL lowering runs in a fused group */
  void *epilogue;
  /* private to lower.c / from_graph.c (lowerings do not touch these) */
  int32_t cap_param_of_buffer; /* entries allocated in param_of_buffer */
  struct sc_lower_group *grp;  /* the group being lowered: name, epilogue */
  struct sc_lower_memo *memo;  /* inlined values read in the kernel being
                                  built (sc_lower_value_at), or NULL */
};

/* Frees what a context allocated while lowering (the param map, the
 * inlining memo); its owner calls it once, whatever the outcome. */
void sc_lower_ctx_release(sc_lower_ctx *cx);

/* Every sc_lw_<name> named in ops.def's `lower` column (defined in
 * codegen/lower_*.c). */
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, \
           lower, shard, grad)                                                              \
  extern const sc_lowering sc_##lower;
#include "ir/ops.def"
#undef OP

/* --- reading inputs / writing outputs inside a kernel --- */
/* Value of input `in` of node n at multi-index idx (input's rank entries).
 * -1 on error (diag set). Omitted optional input: error. */
int32_t sc_lower_input_at(sc_lower_ctx *cx, const sc_node *n, int32_t in,
                          const int32_t *idx);
/* Value of graph value v at idx (same as above, by value id). */
int32_t sc_lower_value_at(sc_lower_ctx *cx, int32_t value, const int32_t *idx);
/* Stores expr `val` as output `out` of node n at multi-index idx (output
 * rank entries): adds a STORE phase to cx->k, applying fused epilogues. */
sc_status sc_lower_store(sc_lower_ctx *cx, const sc_node *n, int32_t out,
                         const int32_t *idx, int32_t val);

/* --- index helpers (all exprs are i64) --- */
int32_t sc_lower_i64(sc_lower_ctx *cx, int64_t v);           /* constant */
/* Linear row-major offset of idx in a shape. */
int32_t sc_lower_offset(sc_lower_ctx *cx, int32_t rank, const int64_t *dims,
                        const int32_t *idx);
/* Inverse: multi-index of linear offset `lin` in a shape (div/mod). */
void sc_lower_unflatten(sc_lower_ctx *cx, int32_t lin, int32_t rank,
                        const int64_t *dims, int32_t *idx);
/* Numpy broadcast: index into a value of shape (rin, din) from an output
 * index of rank rout (drops leading dims, zeroes dims of extent 1). */
void sc_lower_bcast_index(sc_lower_ctx *cx, int32_t rout, const int32_t *idx,
                          int32_t rin, const int64_t *din, int32_t *out);
/* The outer loop variables of cx->k as an index vector (outer_rank). */
void sc_lower_outer_index(sc_lower_ctx *cx, int32_t *idx);

/* Starts the kernel for a KERNEL lowering with the given outer domain and
 * inner extent (cx->k must then get phases through kir_add_reduce and
 * sc_lower_store). Adds the kernel to the program and a KERNEL step running
 * it (so a lowering that needs two kernels calls this twice, in order). */
sc_status sc_lower_begin_kernel(sc_lower_ctx *cx, const sc_node *n, int32_t outer_rank,
                                const int64_t *outer_dims, int64_t inner);

/* For STEP lowerings: the buffer holding graph value v (creating a CONST
 * buffer for a constant, a TEMP for anything else that has none yet), and
 * adding a step. A STEP writes its outputs' buffers itself; POINT consumers
 * fused after it run as the GEMM step's epilogue kernel, reading them. */
int32_t sc_lower_buffer_of(sc_lower_ctx *cx, int32_t value);
/* A new buffer of `kind` for graph value v (its shape, dtype, and data when
 * CONST; alias_of for a VIEW, else -1), recorded as v's buffer. -1 with the
 * diag set (too large, out of memory). */
int32_t sc_lower_value_buffer(sc_lower_ctx *cx, int32_t v, sc_buf_kind kind,
                              int32_t alias_of);
/* Element idx (the buffer's rank entries) of buffer b, read inside the
 * kernel being built: for helper kernels reading a scratch buffer. */
int32_t sc_lower_buffer_at(sc_lower_ctx *cx, int32_t b, const int32_t *idx);
/* Stores expr e (of the buffer's dtype) at element idx of buffer b from
 * the kernel being built: a kernel writing a scratch buffer that a later
 * kernel of the same lowering reads (sc_lower_buffer_at). */
sc_status sc_lower_buffer_store(sc_lower_ctx *cx, int32_t b, const int32_t *idx, int32_t e);
/* A scratch TEMP buffer (e.g. im2col) of the given dtype and shape. */
int32_t sc_lower_scratch(sc_lower_ctx *cx, const char *name, sc_dtype dtype,
                         int32_t rank, const int64_t *dims);
sc_status sc_lower_add_step(sc_lower_ctx *cx, const sc_step *s);
/* Lowers a standalone pointwise kernel writing every element of `buffer`
 * (outer domain = the buffer's shape, inner 1) from a POINT-style callback,
 * and appends a KERNEL step running it — used by STEP lowerings that need
 * helper kernels (im2col before a GEMM, ...). The kernel is named
 * <group kernel name>_<name>. May be called while no kernel is being built
 * (cx->k == NULL) or inside one (cx->k is restored afterwards). */
typedef int32_t (*sc_lower_index_fn)(sc_lower_ctx *cx, void *ud, const int32_t *idx);
sc_status sc_lower_pointwise_kernel(sc_lower_ctx *cx, const char *name, int32_t buffer,
                                    sc_lower_index_fn fn, void *ud);
/* The same over the outer domain `domain` (rank = the buffer's), element
 * idx stored at buffer[idx + shift] (shift NULL: 0): a part of the buffer,
 * e.g. the inside of a padded copy. */
sc_status sc_lower_pointwise_kernel_at(sc_lower_ctx *cx, const char *name, int32_t buffer,
                                       int32_t rank, const int64_t *domain, const int64_t *shift,
                                       sc_lower_index_fn fn, void *ud);
/* A kernel over the shape of node n's input `in` copying it into `buffer`
 * at offset `shift` (NULL: 0), one load and one store an element: a padded
 * copy's inside, a contiguous Concat's member. */
sc_status sc_lower_copy_input(sc_lower_ctx *cx, const char *name, int32_t buffer,
                              const sc_node *n, int32_t in, const int64_t *shift);

/* --- expression shorthands: -1 in, -1 out (so errors propagate) --- */
int32_t sc_lower_un(sc_lower_ctx *cx, kir_op op, int32_t a);
int32_t sc_lower_bin(sc_lower_ctx *cx, kir_op op, int32_t a, int32_t b);
int32_t sc_lower_sel(sc_lower_ctx *cx, int32_t c, int32_t a, int32_t b);
int32_t sc_lower_cast(sc_lower_ctx *cx, sc_dtype to, int32_t a); /* no-op if same */
/* Constant v in dtype t (float or integer/bool, converted as Cast does). */
int32_t sc_lower_const(sc_lower_ctx *cx, sc_dtype t, double v);
sc_dtype sc_lower_dtype(sc_lower_ctx *cx, int32_t expr); /* dtype of an expr */

/* Errors about node n (sets cx->diag with node name and op). */
sc_status sc_lower_error(sc_lower_ctx *cx, const sc_node *n, sc_status st,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* --- private to lower.c and from_graph.c: the group being lowered --- */
typedef struct sc_lower_group {
  const char *kname;       /* base kernel name, e.g. "k3_add_relu" */
  const char *origin;      /* member node names, for kernels and steps */
  int32_t n_kernels;       /* kernels begun for this group so far */
  /* epilogue of a KERNEL anchor: when it stores `fused_value` at idx, the
   * values `stored` (POINT members downstream of it, same shape) are
   * computed at idx with fused_value substituted, and stored instead */
  int32_t anchor;          /* node id, -1 when there is no epilogue */
  int32_t fused_value;
  int32_t n_stored;
  const int32_t *stored;
  int32_t n_epilogue_stores;
  int32_t sub_value, sub_expr, sub_rank; /* active substitution (-1: none) */
  /* a STEP group's member value read as another: the FP8 product's descaled
   * value, read as the product itself once its GEMM step applies the scales
   * (sc_gemm.scaled, from_graph.c take_descale); -1: none */
  int32_t alias_value, alias_of;
  int32_t sub_idx[SC_MAX_RANK];
} sc_lower_group;

/* Resets the per-kernel param map (buffer -> param) for a new kernel. */
sc_status sc_lower_reset_params(sc_lower_ctx *cx);
/* Stores expr e as graph value v at idx (no epilogue; skips values without
 * a buffer). */
sc_status sc_lower_store_value(sc_lower_ctx *cx, int32_t v, const int32_t *idx, int32_t e);

#endif
