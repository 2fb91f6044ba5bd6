/* op_move.h — helpers shared by op_shape.c and op_move.c (the "S" family of
 * ops.def). Internal to ir/. Functions returning sc_status record a
 * diagnostic on node n when they fail. */
#ifndef SC_OP_MOVE_H
#define SC_OP_MOVE_H

#include "op_util.h"

/* Product of dims[from..to) (shapes are already checked against overflow). */
int64_t sc_move_prod(const int64_t *dims, int32_t from, int32_t to);
/* For eval: every present output has an inferred shape, a dtype with a size,
 * and at most SC_FOLD_MAX_ELEMENTS elements (else SC_ERR_LIMIT). */
sc_status sc_move_check_fold(sc_graph *g, const sc_node *n);
/* Data of input i, which must be a constant with data (*out may be NULL for
 * an empty tensor). */
sc_status sc_move_input_data(sc_graph *g, const sc_node *n, int32_t i,
                             const uint8_t **out);
/* Allocates output i (sc_eval_output); *out is NULL for an omitted output. */
sc_status sc_move_output(sc_graph *g, const sc_node *n, int32_t i, uint8_t **out);
/* memcpy that accepts bytes == 0 with NULL pointers. */
void sc_move_copy(uint8_t *dst, const uint8_t *src, int64_t bytes);
/* Integers from constant input idx when present, else from INTS attribute
 * attr (when attr is not NULL). *present says whether either was given. */
sc_status sc_move_ints(sc_graph *g, const sc_node *n, int32_t idx, const char *attr,
                       int64_t *buf, int64_t cap, int64_t *count, bool *present);

#endif
