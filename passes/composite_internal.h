/* composite_internal.h — what the files of the composite-op expansions
 * share (passes/composite*.c): the expansion signature, short accessors of
 * the composite node being expanded, and builders beyond grad_rule.h's.
 * Every builder returns a value id, or -1 with g->diag set (or on no
 * memory); -1 operands pass through, so a chain of builders is checked once
 * at its end. Builders add values to the graph: a `const sc_value *` taken
 * before one does not survive it (copy what is needed first). */
#ifndef SC_PASSES_COMPOSITE_INTERNAL_H
#define SC_PASSES_COMPOSITE_INTERNAL_H

#include "passes/composite.h"
#include "passes/grad_rule.h"

/* An expansion sets out[j] to the value computing output j (every output
 * the op has; the driver uses those the node asks for). Errors name the
 * node (cx_built after a builder failed). */
typedef sc_status (*cx_expand_fn)(sc_grad_ctx *c, int32_t *out);

static inline const sc_node *cx_node(const sc_grad_ctx *c) { return &c->g->nodes[c->node]; }
static inline const sc_value *cx_val(const sc_grad_ctx *c, int32_t v) {
  return &c->g->values[v];
}
/* Input i of the composite node, or -1 (absent). */
static inline int32_t cx_in(const sc_grad_ctx *c, int32_t i) {
  return i < cx_node(c)->n_inputs ? cx_node(c)->inputs[i] : -1;
}
/* The status after a builder returned -1: g->diag's, else out of memory. */
static inline sc_status cx_built(const sc_grad_ctx *c) {
  return c->g->diag.status ? c->g->diag.status : SC_ERR_NOMEM;
}

/* x with n size-1 axes inserted before axis `at` (a Reshape). */
int32_t cx_unsqueeze(sc_grad_ctx *c, int32_t x, int32_t at, int32_t n);
/* An int64 constant of `rank` dims, all 1 but dims[axis] = n, holding
 * 0..n-1 along it. */
int32_t cx_iota(sc_grad_ctx *c, int64_t n, int32_t rank, int32_t axis);
/* Clip of x (dtype t) to [lo, hi]: constant bounds. */
int32_t cx_clip(sc_grad_ctx *c, int32_t x, sc_dtype t, double lo, double hi);
/* x[..., a:b] along the last axis. */
int32_t cx_last_slice(sc_grad_ctx *c, int32_t x, int64_t a, int64_t b);
/* x[.., a:b:step, ..] along `axis`. */
int32_t cx_axis_slice(sc_grad_ctx *c, int32_t x, int64_t axis, int64_t a, int64_t b,
                      int64_t step);
/* A new constant `name` of dtype t and shape dims, zeros, whose data (in
 * the graph's arena) the caller then fills (sc_store_f64); *value is its
 * id. NULL on no memory or a size that overflows. */
void *cx_const_data(sc_grad_ctx *c, const char *name, sc_dtype t, int32_t rank,
                    const int64_t *dims, int32_t *value);
/* ArgMax of x along axis, kept as a size-1 axis (int64). */
int32_t cx_argmax_keep(sc_grad_ctx *c, int32_t x, int64_t axis);

/* Another composite op inside an expansion: node (made by gb_begin, its
 * attributes set, never inferred) is expanded by fn in place and marked
 * dead; returns the value of its output 0, or -1. */
int32_t cx_expand_nested(sc_grad_ctx *c, int32_t node, cx_expand_fn fn);

/* The expansions of the other files (composite.c holds the small ones). */
sc_status cx_expand_attention(sc_grad_ctx *c, int32_t *out);  /* composite_attention.c */
sc_status cx_expand_if(sc_grad_ctx *c, int32_t *out);         /* composite_control.c */
sc_status cx_expand_loop(sc_grad_ctx *c, int32_t *out);       /* composite_control.c */
sc_status cx_expand_scan(sc_grad_ctx *c, int32_t *out);       /* composite_control.c */
sc_status cx_expand_flex_attention(sc_grad_ctx *c, int32_t *out); /* composite_control.c */
sc_status cx_expand_det(sc_grad_ctx *c, int32_t *out);        /* composite_misc.c */
sc_status cx_expand_optional(sc_grad_ctx *c, int32_t *out);   /* composite_misc.c */
sc_status cx_expand_deform_conv(sc_grad_ctx *c, int32_t *out); /* composite_sample.c */
sc_status cx_expand_roi_align(sc_grad_ctx *c, int32_t *out);  /* composite_sample.c */
sc_status cx_expand_mel(sc_grad_ctx *c, int32_t *out);        /* composite_misc.c */
sc_status cx_expand_binarizer(sc_grad_ctx *c, int32_t *out);  /* composite_misc.c */
sc_status cx_expand_array_feature_extractor(sc_grad_ctx *c, int32_t *out); /* composite_misc.c */
sc_status cx_expand_rotary(sc_grad_ctx *c, int32_t *out);     /* composite_attention.c */
sc_status cx_expand_linear_attention(sc_grad_ctx *c, int32_t *out); /* composite_attention.c */
sc_status cx_expand_rnn(sc_grad_ctx *c, int32_t *out);        /* composite_rnn.c */
sc_status cx_expand_conv_transpose(sc_grad_ctx *c, int32_t *out); /* composite_linalg.c */
sc_status cx_expand_col2im(sc_grad_ctx *c, int32_t *out);     /* composite_linalg.c */
sc_status cx_expand_topk(sc_grad_ctx *c, int32_t *out);       /* composite_linalg.c */
sc_status cx_expand_einsum(sc_grad_ctx *c, int32_t *out);     /* composite_linalg.c */
sc_status cx_expand_grid_sample(sc_grad_ctx *c, int32_t *out); /* composite_sample.c */
sc_status cx_expand_dft(sc_grad_ctx *c, int32_t *out);        /* composite_signal.c */
sc_status cx_expand_stft(sc_grad_ctx *c, int32_t *out);       /* composite_signal.c */
sc_status cx_expand_quantize(sc_grad_ctx *c, int32_t *out);   /* composite_quant.c */
sc_status cx_expand_dequantize(sc_grad_ctx *c, int32_t *out); /* composite_quant.c */
sc_status cx_expand_dynamic_quantize(sc_grad_ctx *c, int32_t *out); /* composite_quant.c */
sc_status cx_expand_int_product(sc_grad_ctx *c, int32_t *out); /* composite_quant.c */

#endif
