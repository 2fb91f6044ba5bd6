/* init_roles.h — what a parameter initialiser needs to know of each
 * parameter that only the graph says (runtime/param_init.h's roles):
 *
 *   fan-in axis   a 2-D weight read as a Gemm's B with transB = 1, as
 *                 the B of a MatMul (or Gemm) through a Transpose, or as
 *                 the table of a Gather on axis 0 (an embedding) is
 *                 PyTorch's [out, in] or [num, dim] (fan-in on its last
 *                 axis); every other 2-D weight ONNX MatMul's [in, out]
 *                 (axis 0). A tied embedding and LM head therefore get
 *                 the last axis whatever form the mesh gives the head.
 *   residual      the weight B of a MatMul or Gemm of the forward whose
 *                 output (directly, or through one Add of a bias) is an
 *                 operand of an Add whose other operand is an ancestor of
 *                 the product's input A: the branch reads the stream and
 *                 is added back to it. In a transformer block that is the
 *                 attention's output projection and the MLP's second
 *                 product; a decomposed GELU's x + 0.044715·x³ is not one
 *                 (x³ descends from x, it is no ancestor of the product's
 *                 input).
 *
 * n_layers = the residual projections found / 2 (each block adds two
 * branches to the stream: attention and MLP), GPT-2's n_layer.
 *
 * The forward is the graph without the training step's backward, whose
 * nodes autodiff names "<forward node>/grad/..." (passes/autodiff.c).
 * Reads the graph only. */
#ifndef SC_PASSES_INIT_ROLES_H
#define SC_PASSES_INIT_ROLES_H

#include "ir/ir.h"

typedef struct sc_init_roles {
  int32_t n;             /* entries, one per name given */
  bool *fan_in_last;     /* [n] */
  bool *residual;        /* [n] */
  int32_t n_residual;    /* residual projections found */
} sc_init_roles;

/* Roles of names[n] (values of g; a name that is not one gets none).
 * SC_ERR_NOMEM only. Free with sc_init_roles_free. */
sc_status sc_init_roles_find(const sc_graph *g, const char *const *names, int32_t n,
                             sc_init_roles *out, sc_diag *d);
void sc_init_roles_free(sc_init_roles *r);

#endif
