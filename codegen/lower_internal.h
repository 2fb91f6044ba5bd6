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
};

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
 * sc_lower_store). */
sc_status sc_lower_begin_kernel(sc_lower_ctx *cx, const sc_node *n, int32_t outer_rank,
                                const int64_t *outer_dims, int64_t inner);

/* For STEP lowerings: the buffer holding graph value v (creating a TEMP for
 * it if needed), and adding a step. */
int32_t sc_lower_buffer_of(sc_lower_ctx *cx, int32_t value);
/* A scratch TEMP buffer (e.g. im2col) of the given dtype and shape. */
int32_t sc_lower_scratch(sc_lower_ctx *cx, const char *name, sc_dtype dtype,
                         int32_t rank, const int64_t *dims);
sc_status sc_lower_add_step(sc_lower_ctx *cx, const sc_step *s);
/* Lowers a standalone pointwise kernel computing value `out` of buffer
 * shape from a POINT-style callback — used by STEP lowerings that need
 * helper kernels (im2col, bias/epilogue). */
typedef int32_t (*sc_lower_index_fn)(sc_lower_ctx *cx, void *ud, const int32_t *idx);
sc_status sc_lower_pointwise_kernel(sc_lower_ctx *cx, const char *name, int32_t buffer,
                                    sc_lower_index_fn fn, void *ud);

/* Errors about node n (sets cx->diag with node name and op). */
sc_status sc_lower_error(sc_lower_ctx *cx, const sc_node *n, sc_status st,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
