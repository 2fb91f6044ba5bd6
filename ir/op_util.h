/* op_util.h — helpers shared by the op implementations (op_*.c).
 *
 * Internal to ir/: shape rules, attribute/input decoding and the output
 * allocation used by the eval functions of constant folding. All functions
 * that can fail record a diagnostic on node n and return a status. */
#ifndef SC_OP_UTIL_H
#define SC_OP_UTIL_H

#include "ir.h"

/* Prototypes of every function ops.def names (defined in op_*.c). */
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  sc_status sc_op_##infer(sc_graph *g, sc_node *n);                                   \
  void sc_op_##cost(sc_graph *g, const sc_node *n, sc_cost *c);                       \
  sc_status sc_op_##eval(sc_graph *g, sc_node *n);
#include "ops.def"
#undef OP

/* Constant folding evaluates a node only when each output has at most this
 * many elements (keeps folding from materialising big tensors). */
#define SC_FOLD_MAX_ELEMENTS ((int64_t)1 << 20)

/* Every non-optional input present with known dtype and shape; checks arity
 * against the ops table. Call first in each infer function. */
sc_status sc_check_inputs(sc_graph *g, const sc_node *n);

/* Multidirectional (numpy) broadcast of shapes a and b into out. */
sc_status sc_broadcast(sc_graph *g, const sc_node *n, int32_t ra,
                       const int64_t *da, int32_t rb, const int64_t *db,
                       int32_t *rout, int64_t *dout);

/* Normalises axis in [-rank, rank) to [0, rank); error when out of range. */
sc_status sc_norm_axis(sc_graph *g, const sc_node *n, int64_t axis, int32_t rank,
                       int32_t *out);

/* Reads input idx (a constant integer tensor of rank 0 or 1, any int dtype)
 * into buf (at most cap elements). Error when it is not constant, its data is
 * absent, or it is too long. When the input is a graph input (not constant),
 * or is computed from one, g->want_const is set to that graph input's value
 * id before the error returns: a caller
 * that has the input's data (`shardc run`) can make it a constant and retry
 * (docs/runtime.md, "specialisation"). */
/* Which axes of input 0 a Reduce* node reduces (mask[SC_MAX_RANK]), whether
 * it is an identity (*noop: noop_with_empty_axes with empty axes) and
 * keepdims, from the attribute or the constant input 1 (op_reduce.c). Also
 * read by the lowering and the sharding rule of Reduce*. */
sc_status sc_reduce_axes(sc_graph *g, const sc_node *n, bool *mask, bool *noop, bool *keep);

/* Attribute 'epsilon' of a normalisation node (BatchNormalization,
 * InstanceNormalization, LayerNormalization, RMSNormalization,
 * GroupNormalization), default 1e-5: the one place that default is written.
 * Read by shape inference and by the lowering (op_nn.c). */
sc_status sc_norm_epsilon(sc_graph *g, const sc_node *n, double *eps);

/* Gemm's transA, transB (0 or 1, else an error), alpha and beta (default
 * 1.0), for shape inference and the lowering (op_nn.c). */
sc_status sc_gemm_read_attrs(sc_graph *g, const sc_node *n, bool *trans_a, bool *trans_b,
                             double *alpha, double *beta);

sc_status sc_input_ints(sc_graph *g, const sc_node *n, int32_t idx, int64_t *buf,
                        int64_t cap, int64_t *count);
/* SC_OK when v is a constant with data; else an error on n ("must be a
 * constant"), setting g->want_const when v is (computed from) a graph
 * input, as above. For
 * operands whose contents a shape or a lowering needs. */
sc_status sc_require_const(sc_graph *g, const sc_node *n, const sc_value *v);

/* Typed attribute readers: *out is dflt when the attribute is absent; a
 * present attribute of another kind is an error. */
sc_status sc_read_attr_int(sc_graph *g, const sc_node *n, const char *name,
                           int64_t dflt, int64_t *out);
sc_status sc_read_attr_float(sc_graph *g, const sc_node *n, const char *name,
                             double dflt, double *out);
sc_status sc_read_attr_string(sc_graph *g, const sc_node *n, const char *name,
                              const char *dflt, const char **out);
/* A string attribute that names one of names[count] (default dflt): *out is
 * its index; another string is SC_ERR_UNSUPPORTED naming it. */
sc_status sc_read_attr_choice(sc_graph *g, const sc_node *n, const char *name, const char *dflt,
                              const char *const *names, int count, int *out);

/* Sets output idx's dtype and shape (checked for negative dims, overflow). */
sc_status sc_set_output(sc_graph *g, const sc_node *n, int32_t idx, sc_dtype dtype,
                        int32_t rank, const int64_t *dims);
/* Output idx takes input in's dtype and shape. */
sc_status sc_same_as_input(sc_graph *g, const sc_node *n, int32_t out, int32_t in);

/* For eval: allocates zeroed data for output idx (shape already inferred)
 * in the graph arena and marks it constant. */
void *sc_eval_output(sc_graph *g, const sc_node *n, int32_t idx);

/* Row-major strides of a shape (in elements). */
void sc_strides(int32_t rank, const int64_t *dims, int64_t *strides);
/* Offset into an input of shape (rin, din), broadcast against the output
 * shape (rout, dout), of output element with multi-index idx. */
int64_t sc_bcast_offset(int32_t rout, const int64_t *idx, int32_t rin,
                        const int64_t *din);
/* Slice (op_shape.c): effective per-dim start and step, after ONNX's
 * clamping of starts/ends/axes/steps, and the output dims (rank of input 0).
 * Used by eval and by codegen's Slice lowering. */
sc_status sc_op_slice_params(sc_graph *g, const sc_node *n, int64_t *start,
                             int64_t *step, int64_t *dout);
/* DepthToSpace and SpaceToDepth (op_shape.c) are one Transpose of a 6-D
 * view of the input: d6 receives that view's dims and perm the
 * permutation; the output, flattened, is the permuted view flattened.
 * DepthToSpace DCR: [N, b, b, C', H, W] by {0, 3, 4, 1, 5, 2}; CRD:
 * [N, C', b, b, H, W] by {0, 1, 4, 2, 5, 3}; SpaceToDepth: [N, C, H/b, b,
 * W/b, b] by {0, 3, 5, 1, 2, 4} (DCR) or {0, 1, 3, 5, 2, 4} (CRD). Used by infer, eval and the lowering. */
sc_status sc_op_depth_space_view(sc_graph *g, const sc_node *n, int64_t *d6, int32_t *perm);
/* Resize (op_move.c): its attributes and constant inputs, read once for
 * shape inference and the lowering (codegen/lower_shape.c). Per axis: the
 * output extent, the scale (output / input: from `scales`, or sizes / input
 * when `sizes` is given) and, for tf_crop_and_resize, the roi. */
typedef enum sc_resize_mode { SC_RESIZE_NEAREST, SC_RESIZE_LINEAR, SC_RESIZE_CUBIC } sc_resize_mode;
typedef enum sc_resize_coord {
  SC_RESIZE_HALF_PIXEL, SC_RESIZE_HALF_PIXEL_SYMMETRIC, SC_RESIZE_PYTORCH_HALF_PIXEL,
  SC_RESIZE_ALIGN_CORNERS, SC_RESIZE_ASYMMETRIC, SC_RESIZE_TF_CROP_AND_RESIZE
} sc_resize_coord;
typedef enum sc_resize_nearest {
  SC_RESIZE_PREFER_FLOOR, SC_RESIZE_PREFER_CEIL, SC_RESIZE_FLOOR, SC_RESIZE_CEIL
} sc_resize_nearest;
typedef struct sc_resize {
  sc_resize_mode mode;
  sc_resize_coord coord;
  sc_resize_nearest nearest;
  double cubic_a, extrapolation;
  bool exclude_outside, antialias;
  int32_t rank;
  int64_t out[SC_MAX_RANK];
  double scale[SC_MAX_RANK];
  double roi_start[SC_MAX_RANK], roi_end[SC_MAX_RANK]; /* 0 and 1 but for tf_crop */
} sc_resize;
sc_status sc_resize_params(sc_graph *g, const sc_node *n, sc_resize *r);
/* How many input elements axis d of a Resize reads per output element
 * (1 when the axis is not resized or the mode is nearest; 2 linear, 4
 * cubic; an antialiased downscale by s: the reference's footprint at
 * min(s, 1), 2 - 2 start) and, in *start, the first one's offset from
 * ceil(x) - 1, x the source coordinate. sc_resize_params refuses more than
 * SC_RESIZE_MAX_TAPS on an axis or SC_RESIZE_MAX_READS in all. */
enum { SC_RESIZE_MAX_TAPS = 24, SC_RESIZE_MAX_READS = 1024 };
/* Whether axis d is not resized (scale 1, same extent, no roi): read as is. */
bool sc_resize_keeps(const sc_resize *r, const int64_t *in_dims, int32_t d);
int32_t sc_resize_taps(const sc_resize *r, const int64_t *in_dims, int32_t d, int32_t *start);
/* Advances a multi-index over dims; false after the last element. */
bool sc_next_index(int32_t rank, const int64_t *dims, int64_t *idx);

#endif
