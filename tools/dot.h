/* dot.h — Graphviz writer for IR graphs (`shardc inspect --dot FILE`). */
#ifndef SC_TOOLS_DOT_H
#define SC_TOOLS_DOT_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h"

/* Writes g as a digraph: one box per live node labelled with its op type and
 * first output's shape, one edge per value from producer to consumer
 * (labelled with the value's shape), graph inputs and outputs as ellipses,
 * and constants as small grey boxes when they are parameters (other
 * constants are omitted). Names are escaped. SC_ERR_IO when writing fails. */
sc_status sc_dot_write_graph(sc_graph *g, FILE *out);

/* s as a quoted DOT string (backslash, quote and newline escaped; control
 * bytes dropped); NULL is "". */
void sc_dot_put_quoted(FILE *out, const char *s);
/* One edge per input of each live node: "n<producer> -> n<i>", or
 * "v<value> -> n<i>" for a graph input or live parameter (other constants
 * are omitted); with shape_labels each edge is labelled with the value's
 * dtype and dims. */
void sc_dot_write_edges(const sc_graph *g, FILE *out, bool shape_labels);

#endif
