/* dot.h — Graphviz writer for IR graphs (`shardc inspect --dot FILE`). */
#ifndef SC_TOOLS_DOT_H
#define SC_TOOLS_DOT_H

#include <stdio.h>

#include "ir/ir.h"

/* Writes g as a digraph: one box per live node labelled with its op type and
 * first output's shape, one edge per value from producer to consumer
 * (labelled with the value's shape), graph inputs and outputs as ellipses,
 * and constants as small grey boxes when they are parameters (other
 * constants are omitted). Names are escaped. SC_ERR_IO when writing fails. */
sc_status sc_dot_write_graph(sc_graph *g, FILE *out);

#endif
