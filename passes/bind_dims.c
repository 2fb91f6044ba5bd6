/* bind_dims.c — the bind-dims pass: gives every still-unknown dim of a graph
 * input a static value.
 *
 * The caller binds the dims the user named (--dim batch=8, through
 * sc_graph_bind_dim) before the pipeline runs; what is left SC_DIM_UNKNOWN
 * gets opts->default_dim (1), with one note on stderr per distinct symbolic
 * name (and one per anonymous dim) unless opts->quiet. Only graph inputs have
 * symbolic dims; everything else is inferred from them. */
#include <stdio.h>
#include <string.h>

#include "passes/pass.h"

sc_status sc_pass_bind_dims(sc_graph *g, const sc_pass_opts *opts) {
  int64_t dflt = opts ? opts->default_dim : 1;
  bool quiet = opts ? opts->quiet : false;
  if (dflt < 0 || dflt > SC_MAX_ELEMENTS)
    return sc_graph_error(g, SC_ERR_USAGE, "default dim %lld out of range",
                          (long long)dflt);
  const char *noted[256]; /* symbolic names already noted */
  int n_noted = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    sc_value *v = sc_val(g, g->inputs[i]);
    if (v->rank < 0) continue; /* unknown rank: infer-shapes reports it */
    for (int32_t d = 0; d < v->rank; d++) {
      if (v->dims[d] != SC_DIM_UNKNOWN) continue;
      const char *sym = v->dim_param ? v->dim_param[d] : NULL;
      if (!quiet && sym) {
        bool seen = false;
        for (int k = 0; k < n_noted && !seen; k++) seen = strcmp(noted[k], sym) == 0;
        if (!seen) {
          if (n_noted < (int)(sizeof noted / sizeof noted[0])) noted[n_noted++] = sym;
          fprintf(stderr,
                  "shardc: note: dim '%s' not bound (--dim %s=N), using %lld\n",
                  sym, sym, (long long)dflt);
        }
      } else if (!quiet) {
        fprintf(stderr,
                "shardc: note: dim %d of input '%s' is unknown, using %lld\n", d,
                v->name, (long long)dflt);
      }
      v->dims[d] = dflt;
    }
    int64_t numel = 1;
    for (int32_t d = 0; d < v->rank; d++)
      if (!sc_mul_i64(numel, v->dims[d], &numel) || numel > SC_MAX_ELEMENTS)
        return sc_graph_error(g, SC_ERR_LIMIT,
                              "input '%s': element count overflows", v->name);
  }
  return SC_OK;
}
