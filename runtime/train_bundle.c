/* train_bundle.c — a trainer from a program and its training manifest
 * (train_bundle.h): the manifest's parameters become the trainer's
 * initial values, by name, and its betas the trainer's. */
#include "runtime/train_bundle.h"

#include <string.h>

sc_status sc_trainer_create_manifest(const sc_program *p, const sc_train_manifest *m,
                                     const sc_trainer_opts *o, sc_trainer **out, sc_diag *d) {
  *out = NULL;
  sc_tensor_view *init = sc_calloc((size_t)m->n_params + 1, sizeof *init);
  if (!init) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t k = 0; k < m->n_params; k++) {
    const sc_buffer *b = &p->buffers[m->params[k].buffer];
    init[k] = (sc_tensor_view){.name = m->params[k].name, .dtype = b->dtype, .rank = b->rank,
                               .data = (void *)m->params[k].data};
    memcpy(init[k].dims, b->dims, sizeof init[k].dims);
  }
  sc_trainer_opts to = {0};
  if (o) to = *o;
  to.beta1 = m->beta1;
  to.beta2 = m->beta2;
  sc_status st = sc_trainer_create(p, init, m->n_params, &to, out, d);
  sc_free(init);
  return st;
}
