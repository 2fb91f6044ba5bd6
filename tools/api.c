/* api.c — the public embedding API (include/shardc.h) over the internal
 * modules: frontend import, the pass manager and the statistics analysis.
 * Every call records its failure in the model's diag, formatted on demand by
 * sc_model_error. */
#include "shardc.h"

#include <string.h>

#include "frontend/onnx.h"
#include "passes/pass.h"
#include "passes/stats.h"

struct sc_model {
  sc_graph *g;        /* NULL when the load failed */
  sc_model_opts opts;
  char *path;
  sc_stats stats;
  bool stats_begun;
  bool prepared;
  sc_diag diag;       /* the last failure */
  char error[2048];   /* sc_model_error's buffer */
};

static sc_status fail_from(sc_model *m, const sc_diag *d) {
  m->diag = *d;
  if (!m->diag.file[0] && m->path) sc_diag_set_file(&m->diag, m->path);
  return m->diag.status;
}

sc_status sc_model_load(const char *path, const sc_model_opts *opts, sc_model **out) {
  if (!out) return SC_ERR_USAGE;
  *out = NULL;
  sc_model *m = sc_calloc(1, sizeof *m);
  if (!m) return SC_ERR_NOMEM;
  *out = m;
  if (opts) m->opts = *opts;
  sc_diag_clear(&m->diag);
  if (!path)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "sc_model_load: path is NULL");
  m->path = sc_strdup(path);
  if (!m->path) return sc_diag_set(&m->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_import_opts io = {.no_weights = m->opts.no_weights};
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_onnx_import(path, &io, &m->g, &d);
  if (st != SC_OK) {
    if (m->g) sc_graph_destroy(m->g);
    m->g = NULL;
    return fail_from(m, &d);
  }
  return SC_OK;
}

sc_status sc_model_bind_dim(sc_model *m, const char *name, int64_t value) {
  if (!m) return SC_ERR_USAGE;
  sc_diag_clear(&m->diag);
  if (!m->g || m->prepared || !name || value <= 0)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL,
                       "sc_model_bind_dim: %s", !m->g ? "no model loaded"
                       : m->prepared ? "the model is already prepared"
                                     : "needs a name and a value > 0");
  if (sc_graph_bind_dim(m->g, name, value) == 0) {
    sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "no input has a dim named '%s'", name);
    sc_diag_set_file(&m->diag, m->path);
    return SC_ERR_USAGE;
  }
  return SC_OK;
}

sc_status sc_model_prepare(sc_model *m) {
  if (!m) return SC_ERR_USAGE;
  sc_diag_clear(&m->diag);
  if (!m->g || m->prepared)
    return sc_diag_set(&m->diag, SC_ERR_USAGE, NULL, NULL, "sc_model_prepare: %s",
                       !m->g ? "no model loaded" : "already prepared");
  sc_status st = sc_stats_begin(m->g, &m->stats);
  m->stats_begun = true;
  if (st == SC_OK) {
    sc_pass_opts po;
    sc_pass_opts_init(&po);
    po.quiet = m->opts.quiet;
    st = sc_run_passes(m->g, SC_CANONICAL_PASSES, &po);
  }
  if (st == SC_OK) st = sc_stats_finish(m->g, &m->stats);
  if (st != SC_OK) return fail_from(m, &m->g->diag);
  m->prepared = true;
  return SC_OK;
}

sc_status sc_model_stats(const sc_model *m, sc_model_info *out) {
  if (!m || !out || !m->prepared) return SC_ERR_USAGE;
  const sc_stats *s = &m->stats;
  memset(out, 0, sizeof *out);
  out->nodes = s->n_nodes;
  out->nodes_before_fold = s->n_nodes_before_fold;
  out->params = s->params;
  out->param_bytes = s->param_bytes;
  out->flops = s->flops;
  out->largest_activation_bytes = s->largest_bytes;
  out->blocks = s->n_blocks;
  return SC_OK;
}

const char *sc_model_error(const sc_model *m) {
  if (!m) return "no model";
  sc_model *mm = (sc_model *)m; /* the buffer is a cache */
  if (m->diag.status == SC_OK) return "";
  sc_diag_format(&m->diag, mm->error, sizeof mm->error);
  return mm->error;
}

void sc_model_free(sc_model *m) {
  if (!m) return;
  if (m->stats_begun) sc_stats_free(&m->stats);
  if (m->g) sc_graph_destroy(m->g);
  sc_free(m->path);
  sc_free(m);
}
