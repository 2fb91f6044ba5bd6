/* text.h — textual IR: printer and parser that round-trip.
 *
 * print(parse(print(g))) == print(g), byte for byte. The format is in
 * docs/ir.md. Constants with at most SC_TEXT_INLINE_MAX elements are printed
 * with their data; larger ones (weights) print shape only and parse back as
 * constants whose data is absent (as with --no-weights). */
#ifndef SC_IR_TEXT_H
#define SC_IR_TEXT_H

#include <stdio.h>

#include "ir.h"

enum { SC_TEXT_INLINE_MAX = 64 };

sc_status sc_ir_print(sc_graph *g, FILE *out);
/* Into a malloc'd NUL-terminated string (free with sc_free). */
char *sc_ir_print_string(sc_graph *g);
/* Errors name the file and line: diag->file = name, msg "line N: ...". */
sc_status sc_ir_parse(const char *text, size_t len, const char *name,
                      sc_graph **out, sc_diag *diag);
sc_status sc_ir_parse_file(const char *path, sc_graph **out, sc_diag *diag);

#endif
