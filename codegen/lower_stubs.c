/* lower_stubs.c — weak placeholders for lowerings not yet written.
 *
 * delete a line when you define the symbol (in codegen/lower_shape.c or
 * codegen/lower_linalg.c): a weak definition in this object of the static
 * library could otherwise shadow the strong one, since the linker stops
 * looking once a symbol is defined. A placeholder has kind SC_LOWER_NONE, so
 * sc_program_from_graph reports the op as unsupported instead of crashing.
 * When every line is gone, delete this file. */
#include "codegen/lower.h"

#define SC_LW_STUB(name) \
  __attribute__((weak)) const sc_lowering sc_lw_##name = {SC_LOWER_NONE, NULL, NULL};

