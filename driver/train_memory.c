/* train_memory.c — the training step's arena by class (train_memory.h). */
#include "driver/train_memory.h"

#include <string.h>

#include "codegen/memplan.h"
#include "codegen/train_manifest.h"

const char *sc_mem_class_name(sc_mem_class c) {
  static const char *const names[SC_MEM_CLASS_COUNT] = {
      "params", "optimizer state", "gradients", "activations", "workspace", "data"};
  return c >= 0 && c < SC_MEM_CLASS_COUNT ? names[c] : "?";
}

static bool has_prefix(const char *s, const char *prefix) {
  return s && strncmp(s, prefix, strlen(prefix)) == 0;
}


/* The class of storage root r; grad[r] marks the storage of the gradients
 * (buffers named "grad:P", views of the value autodiff summed). */
static sc_mem_class class_of(const sc_program *p, int32_t r, const bool *grad) {
  const sc_buffer *b = &p->buffers[r];
  const char *name = b->name ? b->name : "";
  if (b->kind == SC_BUF_INPUT) {
    if (sc_train_is_optimizer_state(name)) return SC_MEM_OPTIMIZER;
    if (has_prefix(name, "accum:")) return SC_MEM_GRADIENTS;
    return sc_program_input_is_state(p, r) ? SC_MEM_PARAMS : SC_MEM_DATA;
  }
  if (grad[r] || has_prefix(name, "new:accum:")) return SC_MEM_GRADIENTS;
  if (strstr(name, "/grad/") || has_prefix(name, "train/") || has_prefix(name, "new:") ||
      strcmp(name, "loss") == 0 || has_prefix(name, "train:") || strcmp(name, "grad_const") == 0)
    return SC_MEM_WORKSPACE;
  return SC_MEM_ACTIVATIONS;
}

sc_status sc_train_memory_of(const sc_program *p, sc_train_memory *m, sc_diag *d) {
  memset(m, 0, sizeof *m);
  size_t n = (size_t)(p->n_buffers ? p->n_buffers : 1);
  bool *live = sc_calloc(n, sizeof *live), *grad = sc_calloc(n, sizeof *grad);
  if (!live || !grad) {
    sc_free(live);
    sc_free(grad);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  sc_status st = sc_memplan_peak(p, &m->peak_step, &m->peak_live, live, d);
  for (int32_t i = 0; st == SC_OK && i < p->n_buffers; i++)
    if (has_prefix(p->buffers[i].name, "grad:")) {
      int32_t r = sc_program_root(p, i);
      if (r >= 0) grad[r] = true;
    }
  int64_t align = p->arena_align > 0 ? p->arena_align : 64;
  for (int32_t i = 0; st == SC_OK && i < p->n_buffers; i++) {
    if (p->buffers[i].kind == SC_BUF_CONST) m->constants += p->buffers[i].bytes;
    if (!live[i]) continue;
    m->live[class_of(p, i, grad)] += (p->buffers[i].bytes + align - 1) / align * align;
  }
  m->arena = p->arena_bytes;
  m->peak_origin = st == SC_OK && m->peak_step < p->n_steps ? p->steps[m->peak_step].origin : NULL;
  sc_free(live);
  sc_free(grad);
  return st;
}
