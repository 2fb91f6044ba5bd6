/* elementwise.h — the one definition of the elementwise ops' semantics
 * (ir/elementwise.def), as seen by the rest of the compiler.
 *
 * elementwise.def holds one formula per elementwise op in a small
 * expression vocabulary. ir/elementwise.c expands it into C for constant
 * folding (sc_ew_fold); codegen/lower_elementwise.c expands it into kernel
 * IR. What both need besides the formula is here: the row's kind and type
 * class, the node's parsed attributes (sc_ew_attrs: the only place where
 * attribute defaults are applied) and the compute dtype.
 *
 * Invariants: every op of ops.def flagged SC_OPF_ELEMENTWISE has exactly one
 * row (sc_ew_rows[op].defined; checked by a static assertion on the counts
 * and by a unit test); sc_ew_attrs_read is called by shape inference, so a
 * node that passed infer-shapes always parses. Nothing here allocates. */
#ifndef SC_IR_ELEMENTWISE_H
#define SC_IR_ELEMENTWISE_H

#include "ir.h"

typedef enum sc_ew_kind {
  SC_EW_UNARY,    /* X0 */
  SC_EW_BINARY,   /* X0, X1 broadcast */
  SC_EW_VARIADIC, /* any number of inputs folded with the step formula */
  SC_EW_WHERE,    /* X0 bool condition, X1, X2 */
  SC_EW_CLIP,     /* X0; X1, X2 optional scalar bounds */
  SC_EW_CONVERT,  /* X0 converted to the output dtype (Cast, CastLike) */
  SC_EW_COPY,     /* output 0 is input 0 (Identity, inference Dropout) */
} sc_ew_kind;

/* Dtypes an op's main inputs accept. */
typedef enum sc_ew_class {
  SC_EW_ANY,    /* numeric or bool */
  SC_EW_ARITH,  /* numeric */
  SC_EW_SIGNED, /* float or signed integer */
  SC_EW_FLOAT,
  SC_EW_BOOL,
  SC_EW_INT,    /* integer (not bool) */
} sc_ew_class;

typedef struct sc_ew_row {
  bool defined;      /* false for ops that are not elementwise */
  sc_ew_kind kind;
  sc_ew_class cls;
  const char *formula; /* the formula's text, for messages and docs */
} sc_ew_row;

extern const sc_ew_row sc_ew_rows[SC_OP_COUNT];

/* Parsed attributes of an elementwise node, defaults applied. */
typedef struct sc_ew_attrs {
  double alpha, beta, gamma;           /* HardSigmoid, LeakyRelu, Elu, Selu,
                                          Celu, ThresholdedRelu */
  double lambd, bias;                  /* Shrink */
  bool gelu_tanh;                      /* Gelu approximate = "tanh" */
  bool detect_negative, detect_positive; /* IsInf */
  bool fmod;                           /* Mod */
  bool shift_left;                     /* BitShift direction = "LEFT" */
  bool saturate;                       /* Cast, CastLike to float8/float4 */
  sc_e8m0_round round_mode;            /*   and to f8e8m0: "up", "down", "nearest" */
  bool has_min, has_max;               /* Clip bounds given as attributes */
  double min, max;                     /*   (opset < 11 form) */
} sc_ew_attrs;

/* Reads and validates n's attributes into *a (defaults from
 * elementwise.def). Errors (SC_ERR_INVALID) name the node: an attribute of
 * the wrong kind or out of range. */
sc_status sc_ew_attrs_read(sc_graph *g, const sc_node *n, sc_ew_attrs *a);

/* The dtype n's formula is computed in: the main input's dtype (input 1 for
 * Where), or f64 when it is an integer and another input is a float (Pow). */
sc_dtype sc_ew_compute_dtype(sc_graph *g, const sc_node *n);

/* Whether dtype t belongs to class c. */
bool sc_ew_class_accepts(sc_ew_class c, sc_dtype t);

/* Internal to ir/ (the eval functions of op_elementwise.c): computes output
 * 0 of n into out (allocated for the inferred dtype and shape) from its
 * formula; the inputs must be constants with data. Errors name the node:
 * integer division by zero, 0 to a negative integer power, an input without
 * data, a dtype the op has no formula for. */
sc_status sc_ew_fold(sc_graph *g, const sc_node *n, void *out);

#endif
