/* train_bundle.c — a training build's manifest (train_bundle.h): the
 * options as the manifest spells them, the classes read from the graph,
 * the parameters matched with the program's inputs by name. */
#include "driver/train_bundle.h"

#include <stdio.h>
#include <string.h>

/* The program's input buffer named name, or -1. */
static int32_t input_named(const sc_program *p, const char *name) {
  for (int32_t i = 0; i < p->n_inputs; i++) {
    const char *n = p->buffers[p->inputs[i]].name;
    if (n && strcmp(n, name) == 0) return p->inputs[i];
  }
  return -1;
}

static void options_of(const sc_train_opts *o, sc_train_manifest *m) {
  static const char *const losses[] = {"cross-entropy", "mse", "output"};
  snprintf(m->optimizer, sizeof m->optimizer, "%s",
           o->optimizer == SC_OPTIMIZER_ADAMW ? "adamw" : "sgd");
  m->momentum = o->momentum;
  m->weight_decay = o->weight_decay;
  m->beta1 = o->beta1;
  m->beta2 = o->beta2;
  m->eps = o->eps;
  m->nesterov = o->nesterov;
  m->clip_grad_norm = o->clip_grad_norm;
  snprintf(m->loss, sizeof m->loss, "%s", losses[o->loss]);
  snprintf(m->logits, sizeof m->logits, "%s", o->logits ? o->logits : "");
  m->ignore_index = o->ignore_index;
  snprintf(m->precision, sizeof m->precision, "%s",
           o->fp16 ? "fp16" : o->fp8 ? "fp8" : o->bf16 ? "bf16" : "fp32");
  m->grad_accum = o->grad_accum > 1 ? o->grad_accum : 1;
}

/* A parameter the step stores as its flat view (ZeRO-3, flat.c): its
 * global input is [S, m_pad/S], or [S, m_pad/S, T] where other axes split
 * P into T pieces (the partition's sc_partition_flat_split), not q's
 * shape; the manifest records P's shape, its split and its initial values
 * in the flat layout (owned by the graph until
 * sc_build_release_initial_weights). */
static sc_status flat_param(const sc_build *b, const sc_train_param *q,
                            sc_train_manifest_param *mp, sc_diag *d) {
  int32_t i = sc_dist_find_input(b->program, q->name);
  if (i < 0) return SC_OK;
  const sc_dist_value *gv = &b->program->inputs[i];
  bool same = gv->rank == q->rank;
  for (int32_t k = 0; same && k < q->rank; k++) same = gv->dims[k] == q->dims[k];
  if (same) return SC_OK;
  const sc_partition_flat_split *split = sc_partition_flat_split_of(b->part, q->name);
  int64_t n = 1, T = split ? split->parts : 1;
  for (int32_t k = 0; k < gv->rank; k++) n *= gv->dims[k];
  if (n < q->numel || q->rank < 1 || gv->rank != (T > 1 ? 3 : 2) || (T > 1 && gv->dims[2] != T))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "parameter '%s': %lld elements in the step, %lld in the model", q->name,
                       (long long)n, (long long)q->numel);
  mp->rank = q->rank;
  memcpy(mp->dims, q->dims, sizeof mp->dims);
  if (split) {
    mp->split_dim = split->dim;
    mp->split_parts = split->parts;
    mp->split_stride = split->stride;
  }
  if (!q->init) return SC_OK;
  size_t esz = sc_dtype_size(q->dtype);
  char *x = sc_calloc((size_t)n, esz); /* the padding zeros */
  if (!x || sc_graph_add_cleanup(b->graph, sc_free, x) != SC_OK) /* frees x on failure */
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_train_flat_copy(q->rank, q->dims, split ? split->dim : -1, T, split ? split->stride : 1,
                     esz, q->init, x, true);
  mp->data = x;
  return SC_OK;
}

sc_status sc_build_train_manifest(const sc_build *b, const sc_train_opts *o,
                                  sc_train_manifest **out, sc_diag *d) {
  *out = NULL;
  const sc_dist_program *dp = b->program;
  if (!dp || (dp->n_stages != 1 && dp->pipe_chunks == 0) || b->train.n_params <= 0)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "not a training build");
  if (o->logits && strlen(o->logits) >= sizeof((sc_train_manifest *)0)->logits)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "logits name longer than %zu bytes",
                       sizeof((sc_train_manifest *)0)->logits - 1);
  const sc_train_info *info = &b->train;
  sc_train_manifest *m = sc_train_manifest_create(info->n_params);
  if (!m) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  options_of(o, m);
  if (dp->pipe_chunks > 0) m->grad_accum = dp->schedule.microbatches; /* accumulated */
  m->classes = o->loss == SC_LOSS_CROSS_ENTROPY ? b->train.classes : 0;
  m->n_params = 0;
  for (int32_t k = 0; k < info->n_params; k++) {
    /* the program that updates it: the one stage, or a pipelined step's
     * update piece of its chunk */
    const sc_program *p = NULL;
    int32_t buf = -1;
    for (int32_t s = 0; s < dp->n_stages && buf < 0; s++) {
      p = dp->stages[s].program;
      buf = input_named(p, info->params[k].name);
      if (buf >= 0 && !sc_program_input_is_state(p, buf)) buf = -1;
    }
    if (buf < 0) continue; /* frozen by structure */
    sc_train_manifest_param *mp = &m->params[m->n_params++];
    *mp = (sc_train_manifest_param){.name = p->buffers[buf].name,
                                    .buffer = buf,
                                    .data = info->params[k].init,
                                    .vocab_dim = info->params[k].vocab_dim,
                                    .vocab = info->params[k].vocab};
    sc_status st = flat_param(b, &info->params[k], mp, d);
    if (st != SC_OK) {
      sc_train_manifest_destroy(m);
      return st;
    }
  }
  *out = m;
  return SC_OK;
}

void sc_build_release_initial_weights(sc_build *b, sc_train_manifest *m) {
  for (int32_t j = 0; b && m && j < m->n_params; j++) {
    const void *data = m->params[j].data;
    if (!data) continue;
    for (int32_t k = 0; k < b->train.n_params; k++) {
      const void *init = b->train.params[k].init;
      bool padded = init && m->params[j].rank > 0 && /* a flat parameter's: its padded copy */
                    strcmp(b->train.params[k].name, m->params[j].name) == 0;
      if (init != data && !padded) continue;
      if (init != data) sc_graph_release(b->graph, init);
      b->train.params[k].init = NULL;
    }
    m->params[j].data = NULL;
    sc_graph_release(b->graph, data);
  }
}
