/* grad_rule.h — the contract of a gradient rule (the `grad` column of
 * ir/ops.def) and the builders rules use (docs/training.md).
 *
 * The autodiff pass (passes/autodiff.c) calls a node's rule once, with the
 * gradient of each of its outputs that reaches the loss (dy[j], a value id,
 * or -1) and the inputs that need a gradient (want[i]). The rule builds
 * backward nodes with the gb_* helpers and sets dx[i] (a value of input
 * i's dtype and shape) for each wanted input it can differentiate; it
 * leaves -1 for inputs that carry none (indices, shapes, conditions,
 * running statistics): nothing flows back through them. The finite-
 * difference test checks that every differentiable input gets one.
 *
 * Builders add nodes after the forward graph (so topological order holds),
 * name them "<forward node>/grad/<k>", infer their shapes at once, and
 * return the new value id, or -1 with g->diag set (the pass adds the
 * forward node's name). Constants are new constant values. */
#ifndef SC_PASSES_GRAD_RULE_H
#define SC_PASSES_GRAD_RULE_H

#include "ir/ir.h"

typedef struct sc_grad_ctx {
  sc_graph *g;
  int32_t node;           /* the forward node; -1 for builders used outside
                             a rule (nodes named "train/<k>") */
  const int32_t *dy;      /* [n_outputs] output gradients, -1: none */
  const bool *want;       /* [n_inputs] inputs that need a gradient */
  int32_t *dx;            /* [n_inputs] out: input gradients, -1: none */
  int32_t *counter;       /* for unique node names */
  const char *tag;        /* names: "<node>/<tag>/<k>"; NULL: "grad" (an
                             expansion of a composite op uses "def") */
} sc_grad_ctx;

typedef sc_status (*sc_grad_fn)(sc_grad_ctx *c);

/* The rule of op, or NULL when it has none (no_grad). */
sc_grad_fn sc_grad_rule(sc_op op);

/* ---- builders ---- */
/* The forward node (re-read after every builder call: nodes move). */
const sc_node *gb_fwd(const sc_grad_ctx *c);
/* op(inputs) with one output; attributes are added by the caller between
 * gb_begin and gb_end (which infers the shape). */
int32_t gb_begin(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, int32_t *node);
int32_t gb_end(sc_grad_ctx *c, int32_t node, int32_t out);
/* op(inputs) with n_out outputs (at most 8), named "<node name>:<suffix[j]>"
 * and written to outs; the caller adds attributes and infers the shapes
 * (sc_ops[op].infer). The node id, or -1 with g->diag set. */
int32_t gb_node(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, int32_t n_out,
                const char *const *suffix, int32_t *outs);
int32_t gb_op(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in);
int32_t gb_1(sc_grad_ctx *c, sc_op op, int32_t a);
int32_t gb_2(sc_grad_ctx *c, sc_op op, int32_t a, int32_t b);
/* op(in) with one INT attribute `attr` = v (Cast's to, Concat's axis). */
int32_t gb_op_i(sc_grad_ctx *c, sc_op op, const int32_t *in, int32_t n_in, const char *attr,
                int64_t v);
int32_t gb_cast(sc_grad_ctx *c, int32_t x, sc_dtype t); /* x itself when already t */
/* An INTS attribute on a node made by gb_begin. */
sc_attr *gb_ints_attr(sc_grad_ctx *c, int32_t node, const char *name, const int64_t *v,
                      int32_t n);
int32_t gb_where(sc_grad_ctx *c, int32_t cond, int32_t a, int32_t b);
/* A scalar constant of dtype t. */
int32_t gb_scalar(sc_grad_ctx *c, sc_dtype t, double v);
/* A 1-D int64 constant. */
int32_t gb_ints(sc_grad_ctx *c, const int64_t *v, int32_t n);
/* Reduce op of x over axes (none: all), keepdims as given. */
int32_t gb_reduce(sc_grad_ctx *c, sc_op op, int32_t x, const int64_t *axes, int32_t n, bool keep);
/* ReduceSum of x over axes (keepdims as given); x itself for no axes. */
int32_t gb_reduce_sum(sc_grad_ctx *c, int32_t x, const int64_t *axes, int32_t n, bool keep);
/* Reshape of x to dims. */
int32_t gb_reshape(sc_grad_ctx *c, int32_t x, int32_t rank, const int64_t *dims);
/* Transpose of x by perm. */
int32_t gb_transpose(sc_grad_ctx *c, int32_t x, const int64_t *perm, int32_t n);
/* x with its last two dims swapped. */
int32_t gb_swap_last(sc_grad_ctx *c, int32_t x);
/* Expand of x to dims. */
int32_t gb_expand(sc_grad_ctx *c, int32_t x, int32_t rank, const int64_t *dims);
/* The gradient g of a broadcast result brought back to the shape of
 * value `to`: summed over the broadcast axes, reshaped. g itself when the
 * shapes agree. */
int32_t gb_unbroadcast(sc_grad_ctx *c, int32_t g, int32_t to);

#endif
