/* ops.h — the ops table.
 *
 * Every op shardc knows is one line of ops.def (an X-macro), expanded here
 * into the sc_op enum and in ops.c into sc_ops[], the table of per-op
 * behaviour: ONNX name, arity, the first opset that defines it, flags, and
 * three functions:
 *   infer — parses and validates the node's attributes and sets the dtype
 *           and shape of its outputs from its inputs (reading input data
 *           when the op is data-dependent, e.g. Reshape's shape input);
 *   cost  — FLOPs and bytes moved for one execution (docs/ops.md says how
 *           each kind of op counts);
 *   eval  — computes the outputs' data from constant inputs (used by
 *           constant folding); NULL when the op is never folded.
 * Later columns (gradient, sharding rule, kir lowering) join this table.
 * Internal ops are rows here too, with SC_OPF_INTERNAL: the collectives
 * (family C, ir/op_comm.h) now, optimizer updates later. */
#ifndef SC_OPS_H
#define SC_OPS_H

#include <stdint.h>

#include "base.h"

struct sc_graph;
struct sc_node;

typedef enum sc_op {
#define OP(id, name, since, min_in, max_in, min_out, max_out, flags, infer, cost, eval, lower, \
           shard, grad)                                                                             \
  SC_OP_##id,
#include "ops.def"
#undef OP
  SC_OP_COUNT
} sc_op;

enum sc_op_flags {
  SC_OPF_ELEMENTWISE = 1u << 0, /* output[i] depends on input[i] (broadcast) */
  SC_OPF_REDUCE = 1u << 1,      /* reduces over axes */
  SC_OPF_SHAPE = 1u << 2,       /* shape computation / data movement */
  SC_OPF_MATMUL = 1u << 3,      /* MatMul, Gemm */
  SC_OPF_CONV = 1u << 4,        /* Conv */
  SC_OPF_POOL = 1u << 5,
  SC_OPF_NORM = 1u << 6,        /* row kernels: norms, softmax */
  SC_OPF_INTERNAL = 1u << 7,    /* not an ONNX op */
  SC_OPF_SIDE_EFFECT = 1u << 8, /* must run even when its outputs are unused
                                   (Send, Recv): dce keeps it */
  SC_OPF_COMPOSITE = 1u << 9,   /* defined by other ops: infer-shapes
                                   replaces the node by its expansion
                                   (passes/composite.c), so no later stage
                                   sees it; its infer rule only refuses */
};

typedef struct sc_cost {
  double flops; /* floating-point (or integer) operations */
  double bytes; /* bytes read + written, each tensor once */
} sc_cost;

typedef sc_status (*sc_infer_fn)(struct sc_graph *g, struct sc_node *n);
typedef void (*sc_cost_fn)(struct sc_graph *g, const struct sc_node *n, sc_cost *c);
typedef sc_status (*sc_eval_fn)(struct sc_graph *g, struct sc_node *n);

typedef struct sc_op_info {
  const char *name;          /* ONNX op_type */
  int16_t since;             /* first default-domain opset defining it */
  int8_t min_in, max_in;     /* max -1: variadic */
  int8_t min_out, max_out;
  uint32_t flags;            /* sc_op_flags */
  sc_infer_fn infer;
  sc_cost_fn cost;
  sc_eval_fn eval;           /* NULL: not foldable */
} sc_op_info;

extern const sc_op_info sc_ops[SC_OP_COUNT];

/* SC_OP_COUNT when the name is not an op shardc supports. */
sc_op sc_op_lookup(const char *onnx_name);
static inline const char *sc_op_name(sc_op op) {
  return (unsigned)op < SC_OP_COUNT ? sc_ops[op].name : "?";
}

/* Default-domain opsets shardc accepts. */
enum { SC_OPSET_MIN = 7, SC_OPSET_MAX = 28 };

#endif
