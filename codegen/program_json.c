/* program_json.c — an sc_program as JSON (program.json in a bundle) and back.
 *
 * The writer emits every field that defines the program — buffers, the kir
 * of every kernel (params, outer dims, inner extent, the expression array in
 * its exact order, phases) and the steps — so that reading the text gives a
 * program equal field for field, and writing it again gives identical text.
 * Expression fields equal to their defaults (operands -1, var 0, constants
 * 0) are left out; float constants are written with 17 significant digits
 * (exact) and NaN/±inf as the strings "nan", "inf", "-inf".
 *
 * The reader assumes nothing about the text: it is the part of a bundle an
 * attacker edits. Every id is bounds-checked before use, every size is
 * re-derived (bytes = numel × element size, checked), arena slots must lie in
 * the arena, CONST data in the weights, GEMM operands in their buffers, VIEW
 * chains must end, kernel names must be unique C identifiers, and every kernel
 * must pass kir_verify. It does not prove that index expressions stay inside
 * their params (kir has data-dependent indices, e.g. Gather); see
 * docs/bundle.md. Schema: docs/bundle.md. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program_json.h"

#include "codegen/memplan.h"

/* ---------------------------------------------------------------- names */

static const char *const KIR_NAMES[] = {
#define X(e, s, n) s,
    KIR_OPS(X)
#undef X
};
static const int KIR_ARITY[] = {
#define X(e, s, n) n,
    KIR_OPS(X)
#undef X
};
_Static_assert(sizeof KIR_NAMES / sizeof KIR_NAMES[0] == KIR_OP_COUNT, "kir op names");

static const char *const BUF_KINDS[] = {"input", "output", "const", "temp", "view", "host"};
enum { N_BUF_KINDS = 6 };
_Static_assert(N_BUF_KINDS == SC_BUF_HOST + 1, "buffer kinds");
static const char *const STEP_KINDS[] = {"kernel", "gemm",        "comm",     "check",
                                         "scatter_add", "wait",  "attention",
                                         "attention_grad", "copy"};
_Static_assert(sizeof STEP_KINDS / sizeof STEP_KINDS[0] == SC_STEP_KIND_COUNT, "step kinds");
static const char *const PHASE_KINDS[] = {"reduce", "store"};
static const char *const COMM_KINDS[] = {"all_reduce",     "all_gather", "reduce_scatter",
                                         "all_to_all",     "send",       "recv",
                                         "send_recv"};
_Static_assert(sizeof COMM_KINDS / sizeof COMM_KINDS[0] == SC_COMM_KIND_COUNT, "comm kinds");
static const char *const COMM_REDUCE[] = {"sum", "max", "min"}; /* SC_COMM_OP_* */
static const char *const RED_OPS[] = {"sum", "prod", "max", "min", "argmax", "argmin"};
_Static_assert(sizeof RED_OPS / sizeof RED_OPS[0] == KIR_RED_COUNT, "reduce ops");

/* The fields of an "attention" object (sc_attention_step), written and
 * read from one table: buffer ids (-1 allowed where optional), then
 * extents. */
#define ATTN_BUF(f) {#f, offsetof(sc_attention_step, f)}
static const struct { const char *key; size_t offset; } ATTN_BUFS[] = {
    ATTN_BUF(q), ATTN_BUF(k), ATTN_BUF(v), ATTN_BUF(mask), ATTN_BUF(o),
    ATTN_BUF(lse), ATTN_BUF(d_o), ATTN_BUF(dq), ATTN_BUF(dk), ATTN_BUF(dv)};
static const struct { const char *key; size_t offset; } ATTN_DIMS[] = {
    ATTN_BUF(batch), ATTN_BUF(heads), ATTN_BUF(kv_heads), ATTN_BUF(sq), ATTN_BUF(skv),
    ATTN_BUF(d), ATTN_BUF(dv_dim), ATTN_BUF(mask_stride_b), ATTN_BUF(mask_stride_h)};
#undef ATTN_BUF
enum { N_ATTN_BUFS = sizeof ATTN_BUFS / sizeof ATTN_BUFS[0],
       N_ATTN_DIMS = sizeof ATTN_DIMS / sizeof ATTN_DIMS[0] };

static int find_name(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

/* --------------------------------------------------------------- writing */

static json_t *jdims(const int64_t *dims, int32_t rank) {
  json_t *a = json_array();
  for (int32_t i = 0; i < rank; i++) json_array_append_new(a, json_integer(dims[i]));
  return a;
}

static json_t *jstr(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *jreal(double f) {
  if (isnan(f)) return json_string("nan");
  if (isinf(f)) return json_string(f > 0 ? "inf" : "-inf");
  return json_real(f);
}

static json_t *write_buffer(const sc_buffer *b, int64_t weight_offset) {
  json_t *o = json_object();
  json_object_set_new(o, "name", jstr(b->name));
  json_object_set_new(o, "kind", json_string(BUF_KINDS[b->kind]));
  json_object_set_new(o, "dtype", json_string(sc_dtype_name(b->dtype)));
  json_object_set_new(o, "shape", jdims(b->dims, b->rank));
  json_object_set_new(o, "bytes", json_integer(b->bytes));
  json_object_set_new(o, "offset", json_integer(b->offset));
  json_object_set_new(o, "alias_of", json_integer(b->alias_of));
  json_object_set_new(o, "value", json_integer(b->value));
  if (b->kind == SC_BUF_CONST && weight_offset >= 0)
    json_object_set_new(o, "weights_offset", json_integer(weight_offset));
  return o;
}

static json_t *write_expr(const kir_expr *e) {
  json_t *o = json_object();
  json_object_set_new(o, "op", json_string(KIR_NAMES[e->op]));
  json_object_set_new(o, "t", json_string(sc_dtype_name(e->dtype)));
  if (e->a != -1) json_object_set_new(o, "a", json_integer(e->a));
  if (e->b != -1) json_object_set_new(o, "b", json_integer(e->b));
  if (e->c != -1) json_object_set_new(o, "c", json_integer(e->c));
  if (e->var != 0) json_object_set_new(o, "var", json_integer(e->var));
  if (e->f != 0 || signbit(e->f) || isnan(e->f)) json_object_set_new(o, "f", jreal(e->f));
  if (e->i != 0) json_object_set_new(o, "i", json_integer(e->i));
  return o;
}

static json_t *write_kernel(const kir_kernel *k) {
  json_t *o = json_object();
  json_object_set_new(o, "name", jstr(k->name));
  json_object_set_new(o, "origin", jstr(k->origin));
  json_t *params = json_array();
  for (int32_t i = 0; i < k->n_params; i++) {
    const kir_param *pa = &k->params[i];
    json_t *po = json_object();
    json_object_set_new(po, "buffer", json_integer(pa->buffer));
    json_object_set_new(po, "dtype", json_string(sc_dtype_name(pa->dtype)));
    json_object_set_new(po, "numel", json_integer(pa->numel));
    json_object_set_new(po, "written", json_boolean(pa->written));
    json_array_append_new(params, po);
  }
  json_object_set_new(o, "params", params);
  json_object_set_new(o, "outer", jdims(k->outer_dims, k->outer_rank));
  json_object_set_new(o, "inner", json_integer(k->inner));
  if (k->n_segs > 0) { /* a multi-tensor kernel: params per segment, the segments' starts */
    json_t *sg = json_object();
    json_object_set_new(sg, "params", json_integer(k->seg_params));
    json_object_set_new(sg, "starts", jdims(k->seg_start, k->n_segs + 1));
    if (k->seg_inner) /* a multi-tensor reduction: each segment's inner extent */
      json_object_set_new(sg, "inners", jdims(k->seg_inner, k->n_segs));
    json_object_set_new(o, "segments", sg);
  }
  json_t *exprs = json_array();
  for (int32_t i = 0; i < k->n_exprs; i++) json_array_append_new(exprs, write_expr(&k->exprs[i]));
  json_object_set_new(o, "exprs", exprs);
  json_t *phases = json_array();
  for (int32_t i = 0; i < k->n_phases; i++) {
    const kir_phase *ph = &k->phases[i];
    json_t *po = json_object();
    json_object_set_new(po, "kind", json_string(PHASE_KINDS[ph->kind]));
    if (ph->kind == KIR_PHASE_REDUCE) {
      json_object_set_new(po, "rop", json_string(RED_OPS[ph->rop]));
      json_object_set_new(po, "acc", json_string(sc_dtype_name(ph->acc_dtype)));
      json_object_set_new(po, "value", json_integer(ph->value));
    } else {
      json_object_set_new(po, "value", json_integer(ph->value));
      json_object_set_new(po, "param", json_integer(ph->out_param));
      json_object_set_new(po, "index", json_integer(ph->out_index));
    }
    json_array_append_new(phases, po);
  }
  json_object_set_new(o, "phases", phases);
  return o;
}

/* sc_conv_geom's sizes: JSON key and field, one table for writer and reader */
#define CONV_FIELD(f) {#f, offsetof(sc_conv_geom, f)}
static const struct {
  const char *key;
  size_t offset;
} CONV_FIELDS[] = {CONV_FIELD(c),  CONV_FIELD(h),  CONV_FIELD(w),  CONV_FIELD(kh), CONV_FIELD(kw),
                   CONV_FIELD(sh), CONV_FIELD(sw), CONV_FIELD(dh), CONV_FIELD(dw), CONV_FIELD(pt),
                   CONV_FIELD(pl), CONV_FIELD(pb), CONV_FIELD(pr), CONV_FIELD(oh), CONV_FIELD(ow)};
#undef CONV_FIELD
enum { N_CONV_FIELDS = sizeof CONV_FIELDS / sizeof *CONV_FIELDS };

/* sc_pool_geom's sizes, as "pool" keys (each >= 0) */
#define POOL_FIELD(f) {#f, offsetof(sc_pool_geom, f)}
static const struct {
  const char *key;
  size_t offset;
} POOL_FIELDS[] = {POOL_FIELD(n),  POOL_FIELD(c),  POOL_FIELD(h),  POOL_FIELD(w),
                   POOL_FIELD(kh), POOL_FIELD(kw), POOL_FIELD(sh), POOL_FIELD(sw),
                   POOL_FIELD(pt), POOL_FIELD(pl), POOL_FIELD(pb), POOL_FIELD(pr),
                   POOL_FIELD(oh), POOL_FIELD(ow)};
#undef POOL_FIELD
enum { N_POOL_FIELDS = sizeof POOL_FIELDS / sizeof *POOL_FIELDS };

static json_t *write_step(const sc_step *s) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(STEP_KINDS[s->kind]));
  json_object_set_new(o, "kernel", json_integer(s->kernel));
  json_object_set_new(o, "origin", jstr(s->origin));
  if (s->kind == SC_STEP_GEMM) {
    const sc_gemm *g = &s->gemm;
    json_t *go = json_object();
    json_object_set_new(go, "a", json_integer(g->a));
    json_object_set_new(go, "b", json_integer(g->b));
    json_object_set_new(go, "c", json_integer(g->c));
    json_object_set_new(go, "trans_a", json_boolean(g->trans_a));
    json_object_set_new(go, "trans_b", json_boolean(g->trans_b));
    json_object_set_new(go, "batch", json_integer(g->batch));
    json_object_set_new(go, "m", json_integer(g->m));
    json_object_set_new(go, "n", json_integer(g->n));
    json_object_set_new(go, "k", json_integer(g->k));
    json_object_set_new(go, "lda", json_integer(g->lda));
    json_object_set_new(go, "ldb", json_integer(g->ldb));
    json_object_set_new(go, "ldc", json_integer(g->ldc));
    json_object_set_new(go, "stride_a", json_integer(g->stride_a));
    json_object_set_new(go, "stride_b", json_integer(g->stride_b));
    json_object_set_new(go, "stride_c", json_integer(g->stride_c));
    json_object_set_new(go, "alpha", jreal(g->alpha));
    json_object_set_new(go, "beta", jreal(g->beta));
    json_object_set_new(go, "bias", json_integer(g->bias));
    json_object_set_new(go, "bias_full", json_boolean(g->bias_full));
    if (g->fp8) {
      json_object_set_new(go, "a8", json_integer(g->a8));
      json_object_set_new(go, "b8", json_integer(g->b8));
      json_object_set_new(go, "a8_tn", json_boolean(g->a8_tn));
      json_object_set_new(go, "b8_tn", json_boolean(g->b8_tn));
    }
    if (g->scaled) {
      json_object_set_new(go, "a8_scale", json_integer(g->a8_scale));
      json_object_set_new(go, "b8_scale", json_integer(g->b8_scale));
    }
    if (g->act != SC_GEMM_ACT_NONE) {
      json_object_set_new(go, "act", json_string(sc_gemm_act_name(g->act)));
      json_object_set_new(go, "act_out", json_integer(g->act_out));
      if (g->act_aux) json_object_set_new(go, "act_aux", json_true());
      if (g->act == SC_GEMM_ACT_DGELU_TANH)
        json_object_set_new(go, "act_in", json_integer(g->act_in));
    }
    if (g->bgrad != SC_GEMM_BGRAD_NONE) {
      json_object_set_new(go, "bgrad", json_string(g->bgrad == SC_GEMM_BGRAD_A ? "a" : "b"));
      json_object_set_new(go, "bgrad_out", json_integer(g->bgrad_out));
      json_object_set_new(go, "bgrad_kernel", json_integer(g->bgrad_kernel));
    }
    if (g->conv.on) {
      const sc_conv_geom *v = &g->conv;
      json_t *co = json_object();
      json_object_set_new(co, "x", json_integer(v->x));
      json_object_set_new(co, "prep", json_pack("[II]", (json_int_t)v->prep[0],
                                                (json_int_t)v->prep[1]));
      json_object_set_new(co, "bias", json_integer(v->bias));
      json_object_set_new(co, "bias_kernel", json_integer(v->bias_kernel));
      for (size_t i = 0; i < N_CONV_FIELDS; i++)
        json_object_set_new(co, CONV_FIELDS[i].key,
                            json_integer(*(const int64_t *)((const char *)v + CONV_FIELDS[i].offset)));
      json_object_set_new(go, "conv", co);
    }
    json_object_set_new(o, "gemm", go);
  } else if (s->kind == SC_STEP_KERNEL && s->pool.on) {
    const sc_pool_geom *v = &s->pool;
    json_t *po = json_object();
    json_object_set_new(po, "x", json_integer(v->x));
    json_object_set_new(po, "y", json_integer(v->y));
    json_object_set_new(po, "prep", json_pack("[II]", (json_int_t)v->prep[0],
                                              (json_int_t)v->prep[1]));
    for (size_t i = 0; i < N_POOL_FIELDS; i++) {
      const int64_t *f = (const int64_t *)((const char *)v + POOL_FIELDS[i].offset);
      json_object_set_new(po, POOL_FIELDS[i].key, json_integer(*f));
    }
    json_object_set_new(o, "pool", po);
  } else if (s->kind == SC_STEP_CHECK) {
    json_t *co = json_object();
    json_object_set_new(co, "buffer", json_integer(s->check.buffer));
    json_object_set_new(co, "dim", json_integer(s->check.dim));
    json_object_set_new(o, "check", co);
  } else if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
    const sc_attention_step *a = &s->attn;
    json_t *ao = json_object();
    for (size_t i = 0; i < N_ATTN_BUFS; i++)
      json_object_set_new(ao, ATTN_BUFS[i].key,
                          json_integer(*(const int32_t *)((const char *)a + ATTN_BUFS[i].offset)));
    for (size_t i = 0; i < N_ATTN_DIMS; i++)
      json_object_set_new(ao, ATTN_DIMS[i].key,
                          json_integer(*(const int64_t *)((const char *)a + ATTN_DIMS[i].offset)));
    json_object_set_new(ao, "scale", jreal(a->scale));
    json_object_set_new(ao, "causal", json_boolean(a->causal));
    json_object_set_new(o, "attention", ao);
  } else if (s->kind == SC_STEP_SCATTER_ADD) {
    const sc_scatter_step *c = &s->scatter;
    json_t *co = json_object();
    json_object_set_new(co, "data", json_integer(c->data));
    json_object_set_new(co, "indices", json_integer(c->indices));
    json_object_set_new(co, "updates", json_integer(c->updates));
    json_object_set_new(co, "out", json_integer(c->out));
    json_object_set_new(co, "rows", json_integer(c->rows));
    json_object_set_new(co, "row", json_integer(c->row));
    json_object_set_new(co, "n", json_integer(c->n));
    json_object_set_new(o, "scatter", co);
  } else if (s->kind == SC_STEP_COMM) {
    const sc_comm_step *c = &s->comm;
    SC_ASSERT((int)c->kind >= 0 && c->kind < SC_COMM_KIND_COUNT && c->reduce >= 0 &&
              c->reduce < 3);
    json_t *co = json_object();
    json_object_set_new(co, "kind", json_string(COMM_KINDS[c->kind]));
    json_object_set_new(co, "reduce", json_string(COMM_REDUCE[c->reduce]));
    json_object_set_new(co, "in", json_integer(c->in));
    json_object_set_new(co, "out", json_integer(c->out));
    json_object_set_new(co, "pack", json_integer(c->pack));
    json_object_set_new(co, "unpack", json_integer(c->unpack));
    json_object_set_new(co, "count", json_integer(c->count));
    json_object_set_new(co, "pack_outer", json_integer(c->pack_outer));
    json_object_set_new(co, "pack_inner", json_integer(c->pack_inner));
    json_object_set_new(co, "unpack_outer", json_integer(c->unpack_outer));
    json_object_set_new(co, "unpack_inner", json_integer(c->unpack_inner));
    if (c->rows) json_object_set_new(co, "rows", json_integer(c->rows));
    json_object_set_new(co, "axes", json_integer(c->axes));
    json_object_set_new(co, "group_size", json_integer(c->group_size));
    json_object_set_new(co, "peer", json_integer(c->peer));
    json_object_set_new(co, "tag", json_integer(c->tag));
    if (c->shift) json_object_set_new(co, "shift", json_integer(c->shift));
    if (c->async) json_object_set_new(co, "async", json_true());
    json_object_set_new(o, "comm", co);
  } else if (s->kind == SC_STEP_WAIT) {
    json_object_set_new(o, "started", json_integer(s->started));
  } else if (s->kind == SC_STEP_COPY) {
    json_object_set_new(o, "src", json_integer(s->copy.src));
    json_object_set_new(o, "dst", json_integer(s->copy.dst));
  }
  return o;
}

static json_t *jids(const int32_t *ids, int32_t n) {
  json_t *a = json_array();
  for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

/* The text of both below: with_bound adds the inputs bound outside the
 * arena ("bound": their indices), which no reader takes. */
static sc_status write_json(const sc_program *p, const int64_t *weight_offsets, bool with_bound,
                            char **text, sc_diag *diag) {
  *text = NULL;
  json_t *root = json_object();
  if (!root) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "program JSON: out of memory");
  json_object_set_new(root, "format", json_string("shardc-program"));
  json_object_set_new(root, "version", json_integer(SC_PROGRAM_JSON_VERSION));
  json_object_set_new(root, "arena_bytes", json_integer(p->arena_bytes));
  json_object_set_new(root, "arena_align", json_integer(p->arena_align));
  if (p->host_bytes > 0) json_object_set_new(root, "host_bytes", json_integer(p->host_bytes));
  if (p->workspace_bytes > 0) {
    json_object_set_new(root, "workspace_bytes", json_integer(p->workspace_bytes));
    json_object_set_new(root, "workspace_offset", json_integer(p->workspace_offset));
  }
  if (p->mesh.n_axes > 0) { /* absent: the one-rank mesh (older bundles have none) */
    char mesh[SC_MESH_MAX_AXES * (SC_MESH_NAME_MAX + 24)];
    sc_mesh_format(&p->mesh, mesh, sizeof mesh);
    json_object_set_new(root, "mesh", json_string(mesh));
    if (p->mesh.ranks_per_node)
      json_object_set_new(root, "ranks_per_node", json_integer(p->mesh.ranks_per_node));
  }
  json_t *bufs = json_array();
  for (int32_t i = 0; i < p->n_buffers; i++) {
    SC_ASSERT((int)p->buffers[i].kind >= 0 && (int)p->buffers[i].kind < N_BUF_KINDS);
    json_array_append_new(bufs, write_buffer(&p->buffers[i],
                                             weight_offsets ? weight_offsets[i] : -1));
  }
  json_object_set_new(root, "buffers", bufs);
  json_object_set_new(root, "inputs", jids(p->inputs, p->n_inputs));
  json_object_set_new(root, "outputs", jids(p->outputs, p->n_outputs));
  if (p->updates) { /* absent: no output updates an input in place */
    json_t *u = json_array();
    for (int32_t j = 0; j < p->n_outputs; j++) json_array_append_new(u, json_integer(p->updates[j]));
    json_object_set_new(root, "updates", u);
  }
  json_t *kernels = json_array();
  for (int32_t i = 0; i < p->n_kernels; i++)
    json_array_append_new(kernels, write_kernel(p->kernels[i]));
  json_object_set_new(root, "kernels", kernels);
  json_t *steps = json_array();
  for (int32_t i = 0; i < p->n_steps; i++) json_array_append_new(steps, write_step(&p->steps[i]));
  json_object_set_new(root, "steps", steps);
  if (with_bound && p->bound) {
    json_t *bound = json_array();
    for (int32_t i = 0; i < p->n_inputs; i++)
      if (p->bound[i]) json_array_append_new(bound, json_integer(i));
    json_object_set_new(root, "bound", bound);
  }

  char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "program JSON: out of memory");
  size_t n = strlen(s);
  *text = sc_malloc(n + 2);
  if (!*text) {
    free(s);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "program JSON: out of memory");
  }
  memcpy(*text, s, n);
  (*text)[n] = '\n';
  (*text)[n + 1] = 0;
  free(s);
  return SC_OK;
}

sc_status sc_program_write_json(const sc_program *p, const int64_t *weight_offsets,
                                char **text, sc_diag *diag) {
  *text = NULL;
  if (p->bound) /* a bundle's program keeps every input in its arena */
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "program JSON: a program with inputs bound outside the arena "
                       "(sc_compile_opts.bind_state) is not written");
  return write_json(p, weight_offsets, false, text, diag);
}

sc_status sc_program_describe_json(const sc_program *p, char **text, sc_diag *diag) {
  return write_json(p, NULL, true, text, diag);
}

int64_t sc_program_weights_layout(const sc_program *p, int64_t *offsets) {
  int64_t pos = 0;
  for (int32_t i = 0; i < p->n_buffers; i++) {
    offsets[i] = -1;
    if (p->buffers[i].kind != SC_BUF_CONST) continue;
    if (!p->buffers[i].data && p->buffers[i].bytes > 0) continue; /* external */
    int64_t aligned;
    if (!sc_add_i64(pos, SC_BUNDLE_WEIGHT_ALIGN - 1, &aligned)) return -1;
    aligned -= aligned % SC_BUNDLE_WEIGHT_ALIGN;
    offsets[i] = aligned;
    if (!sc_add_i64(aligned, p->buffers[i].bytes, &pos)) return -1;
  }
  return pos;
}

/* --------------------------------------------------------------- reading */

typedef struct reader {
  sc_diag *diag;
  sc_program *p;
  char where[160]; /* "kernels[3].exprs[12]" */
  const void *weights;
  int64_t weights_bytes;
} reader;

static sc_status fail(reader *r, sc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status fail(reader *r, sc_status st, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sc_diag_set(r->diag, st, NULL, NULL, "program.json: %s%s%s", r->where,
                     r->where[0] ? ": " : "", msg);
}

static void at(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void at(reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->where, sizeof r->where, fmt, ap);
  va_end(ap);
}

/* Integer field; when absent: dflt if optional, else an error. */
static sc_status get_int(reader *r, json_t *o, const char *key, bool required, int64_t dflt,
                         int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    if (required) return fail(r, SC_ERR_PARSE, "missing '%s'", key);
    *out = dflt;
    return SC_OK;
  }
  if (!json_is_integer(v)) return fail(r, SC_ERR_PARSE, "'%s' must be an integer", key);
  *out = (int64_t)json_integer_value(v);
  return SC_OK;
}

static sc_status get_range(reader *r, json_t *o, const char *key, bool required, int64_t dflt,
                           int64_t lo, int64_t hi, int32_t *out) {
  int64_t v = 0;
  sc_status st = get_int(r, o, key, required, dflt, &v);
  if (st) return st;
  if (v < lo || v > hi)
    return fail(r, SC_ERR_INVALID, "'%s' = %lld out of range [%lld, %lld]", key, (long long)v,
                (long long)lo, (long long)hi);
  *out = (int32_t)v;
  return SC_OK;
}

static sc_status get_bool(reader *r, json_t *o, const char *key, bool *out) {
  json_t *v = json_object_get(o, key);
  if (!v || !json_is_boolean(v)) return fail(r, SC_ERR_PARSE, "'%s' must be true or false", key);
  *out = json_is_true(v);
  return SC_OK;
}

static sc_status get_real(reader *r, json_t *o, const char *key, bool required, double *out) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    if (required) return fail(r, SC_ERR_PARSE, "missing '%s'", key);
    *out = 0;
    return SC_OK;
  }
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return SC_OK;
  }
  const char *s = json_string_value(v);
  if (s && strcmp(s, "nan") == 0) *out = NAN;
  else if (s && strcmp(s, "inf") == 0) *out = INFINITY;
  else if (s && strcmp(s, "-inf") == 0) *out = -INFINITY;
  else return fail(r, SC_ERR_PARSE, "'%s' must be a number, \"nan\", \"inf\" or \"-inf\"", key);
  return SC_OK;
}

/* A string field copied into the program's arena (NULL when JSON null and
 * nullable). */
static sc_status get_str(reader *r, json_t *o, const char *key, bool nullable, const char **out) {
  json_t *v = json_object_get(o, key);
  if (v && json_is_null(v) && nullable) {
    *out = NULL;
    return SC_OK;
  }
  if (!v || !json_is_string(v)) return fail(r, SC_ERR_PARSE, "'%s' must be a string", key);
  *out = sc_arena_strdup(&r->p->arena, json_string_value(v));
  if (!*out) return fail(r, SC_ERR_NOMEM, "out of memory");
  return SC_OK;
}

static sc_status get_enum(reader *r, json_t *o, const char *key, const char *const *names, int n,
                          int *out) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s) return fail(r, SC_ERR_PARSE, "'%s' must be a string", key);
  *out = find_name(names, n, s);
  if (*out < 0) return fail(r, SC_ERR_INVALID, "unknown %s '%s'", key, s);
  return SC_OK;
}

static sc_status get_dtype(reader *r, json_t *o, const char *key, sc_dtype *out) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s) return fail(r, SC_ERR_PARSE, "'%s' must be a dtype name", key);
  sc_dtype t = sc_dtype_parse(s);
  if (t == SC_DTYPE_COUNT || !sc_dtype_is_numeric(t))
    return fail(r, SC_ERR_INVALID, "'%s': unsupported dtype '%s'", key, s);
  *out = t;
  return SC_OK;
}

static sc_status get_array(reader *r, json_t *o, const char *key, size_t max, json_t **out) {
  json_t *v = json_object_get(o, key);
  if (!v || !json_is_array(v)) return fail(r, SC_ERR_PARSE, "'%s' must be an array", key);
  if (json_array_size(v) > max)
    return fail(r, SC_ERR_LIMIT, "'%s' has %zu entries (at most %zu)", key, json_array_size(v),
                max);
  *out = v;
  return SC_OK;
}

/* dims (each >= 0, product and × elem fitting in int64); numel out. */
static sc_status get_dims(reader *r, json_t *o, const char *key, int64_t *dims, int32_t *rank,
                          int64_t *numel) {
  json_t *a;
  sc_status st = get_array(r, o, key, SC_MAX_RANK, &a);
  if (st) return st;
  *rank = (int32_t)json_array_size(a);
  int64_t n = 1;
  for (int32_t i = 0; i < *rank; i++) {
    json_t *d = json_array_get(a, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return fail(r, SC_ERR_INVALID, "'%s'[%d] must be a non-negative integer", key, i);
    dims[i] = (int64_t)json_integer_value(d);
    if (!sc_mul_i64(n, dims[i], &n)) return fail(r, SC_ERR_LIMIT, "'%s': size overflows", key);
  }
  *numel = n;
  return SC_OK;
}

static bool is_identifier(const char *s) {
  if (!s || !s[0] || strlen(s) > 255) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
    return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      return false;
  return true;
}

static sc_status read_buffer(reader *r, json_t *o, int32_t id, int32_t n_buffers, sc_buffer *b) {
  at(r, "buffers[%d]", id);
  if (!json_is_object(o)) return fail(r, SC_ERR_PARSE, "must be an object");
  int kind;
  int64_t numel = 0, v = 0;
  sc_status st;
  memset(b, 0, sizeof *b);
  if ((st = get_str(r, o, "name", true, &b->name))) return st;
  if ((st = get_enum(r, o, "kind", BUF_KINDS, N_BUF_KINDS, &kind))) return st;
  b->kind = (sc_buf_kind)kind;
  if ((st = get_dtype(r, o, "dtype", &b->dtype))) return st;
  if ((st = get_dims(r, o, "shape", b->dims, &b->rank, &numel))) return st;
  if ((st = get_int(r, o, "bytes", true, 0, &b->bytes))) return st;
  int64_t want;
  if (!sc_mul_i64(numel, (int64_t)sc_dtype_size(b->dtype), &want))
    return fail(r, SC_ERR_LIMIT, "size overflows");
  if (b->bytes != want)
    return fail(r, SC_ERR_INVALID, "bytes %lld, but shape and dtype give %lld",
                (long long)b->bytes, (long long)want);
  if ((st = get_int(r, o, "offset", true, 0, &b->offset))) return st;
  if ((st = get_range(r, o, "alias_of", true, 0, -1, n_buffers - 1, &b->alias_of))) return st;
  if ((st = get_int(r, o, "value", true, 0, &v))) return st;
  if (v < -1 || v > INT32_MAX) return fail(r, SC_ERR_INVALID, "'value' out of range");
  b->value = (int32_t)v;

  const sc_program *p = r->p;
  bool in_arena = b->kind == SC_BUF_INPUT || b->kind == SC_BUF_OUTPUT || b->kind == SC_BUF_TEMP;
  if (in_arena) {
    int64_t end;
    if (b->offset < 0 || (p->arena_align > 0 && b->offset % p->arena_align != 0) ||
        !sc_add_i64(b->offset, b->bytes, &end) || end > p->arena_bytes)
      return fail(r, SC_ERR_INVALID, "arena slot [%lld, +%lld) outside the arena (%lld bytes)",
                  (long long)b->offset, (long long)b->bytes, (long long)p->arena_bytes);
  } else if (b->kind == SC_BUF_HOST) {
    int64_t end;
    if (b->offset < 0 || (p->arena_align > 0 && b->offset % p->arena_align != 0) ||
        !sc_add_i64(b->offset, b->bytes, &end) || end > p->host_bytes)
      return fail(r, SC_ERR_INVALID, "host slot [%lld, +%lld) outside the host pool (%lld bytes)",
                  (long long)b->offset, (long long)b->bytes, (long long)p->host_bytes);
  } else if (b->offset != -1) {
    return fail(r, SC_ERR_INVALID, "a %s buffer has no arena offset", BUF_KINDS[b->kind]);
  }
  if ((b->kind == SC_BUF_VIEW) != (b->alias_of >= 0))
    return fail(r, SC_ERR_INVALID, "alias_of must be set exactly for view buffers");
  if (b->alias_of == id) return fail(r, SC_ERR_INVALID, "a view of itself");

  json_t *wo = json_object_get(o, "weights_offset");
  if (b->kind == SC_BUF_CONST && !wo) {
    /* external: its data is given per rank (a partitioned model's shard) */
    if (b->bytes == 0) return fail(r, SC_ERR_PARSE, "missing 'weights_offset'");
    b->data = NULL;
  } else if (b->kind == SC_BUF_CONST) {
    int64_t off, end;
    if ((st = get_int(r, o, "weights_offset", true, 0, &off))) return st;
    if (off < 0 || off % SC_BUNDLE_WEIGHT_ALIGN != 0 || !sc_add_i64(off, b->bytes, &end) ||
        end > r->weights_bytes)
      return fail(r, SC_ERR_INVALID,
                  "weights [%lld, +%lld) outside weights.bin (%lld bytes) or unaligned",
                  (long long)off, (long long)b->bytes, (long long)r->weights_bytes);
    b->data = r->weights ? (const char *)r->weights + off : NULL;
  } else if (wo) {
    return fail(r, SC_ERR_INVALID, "weights_offset on a non-const buffer");
  }
  return SC_OK;
}

static sc_status read_expr(reader *r, json_t *o, const kir_kernel *k, int32_t id, kir_expr *e) {
  if (!json_is_object(o)) return fail(r, SC_ERR_PARSE, "must be an object");
  int op;
  sc_status st;
  if ((st = get_enum(r, o, "op", KIR_NAMES, KIR_OP_COUNT, &op))) return st;
  e->op = (kir_op)op;
  if ((st = get_dtype(r, o, "t", &e->dtype))) return st;
  int32_t *ops[3] = {&e->a, &e->b, &e->c};
  const char *keys[3] = {"a", "b", "c"};
  for (int j = 0; j < 3; j++) {
    /* Used operands name earlier exprs; unused ones stay -1. */
    bool used = j < KIR_ARITY[op];
    if ((st = get_range(r, o, keys[j], used, -1, used ? 0 : -1, used ? id - 1 : -1, ops[j])))
      return st;
  }
  int64_t var = 0;
  if ((st = get_int(r, o, "var", false, 0, &var))) return st;
  int64_t lo = INT32_MIN, hi = INT32_MAX;
  if (op == KIR_VAR) {
    lo = KIR_INNER;
    hi = k->outer_rank - 1;
    if (var == KIR_INNER && k->inner < 1) hi = -2;
  } else if (op == KIR_LOAD) {
    lo = 0;
    hi = k->n_params - 1;
  } else if (op == KIR_REG) {
    lo = 0;
    hi = k->n_phases - 1;
  }
  if (var < lo || var > hi)
    return fail(r, SC_ERR_INVALID, "'var' = %lld out of range [%lld, %lld]", (long long)var,
                (long long)lo, (long long)hi);
  e->var = (int32_t)var;
  if ((st = get_real(r, o, "f", false, &e->f))) return st;
  if ((st = get_int(r, o, "i", false, 0, &e->i))) return st;
  return SC_OK;
}

static sc_status read_kernel(reader *r, json_t *o, int32_t kid, kir_kernel **out) {
  sc_program *p = r->p;
  at(r, "kernels[%d]", kid);
  if (!json_is_object(o)) return fail(r, SC_ERR_PARSE, "must be an object");
  const char *name, *origin;
  sc_status st;
  if ((st = get_str(r, o, "name", false, &name))) return st;
  if (!is_identifier(name)) return fail(r, SC_ERR_INVALID, "name '%s' is not a C identifier", name);
  for (int32_t i = 0; i < kid; i++)
    if (strcmp(p->kernels[i]->name, name) == 0)
      return fail(r, SC_ERR_INVALID, "duplicate kernel name '%s'", name);
  if ((st = get_str(r, o, "origin", true, &origin))) return st;
  kir_kernel *k = kir_kernel_create(&p->arena, name);
  if (!k) return fail(r, SC_ERR_NOMEM, "out of memory");
  k->origin = origin;

  json_t *params, *exprs, *phases;
  if ((st = get_array(r, o, "params", 1 << 16, &params))) return st;
  if ((st = get_array(r, o, "exprs", 1 << 24, &exprs))) return st;
  if ((st = get_array(r, o, "phases", 1 << 16, &phases))) return st;
  int64_t points;
  if ((st = get_dims(r, o, "outer", k->outer_dims, &k->outer_rank, &points))) return st;
  if ((st = get_int(r, o, "inner", true, 1, &k->inner))) return st;
  int64_t total;
  if (k->inner < 1 || !sc_mul_i64(points, k->inner, &total))
    return fail(r, SC_ERR_INVALID, "inner must be >= 1 and the domain must fit in int64");

  k->n_params = (int32_t)json_array_size(params);
  /* Capacity as kir_add_param would have grown it (4, 8, 16, ...). */
  size_t cap_params = 4;
  while (cap_params < (size_t)k->n_params) cap_params *= 2;
  k->params = sc_arena_array(&p->arena, cap_params, sizeof *k->params);
  k->n_exprs = k->cap_exprs = (int32_t)json_array_size(exprs);
  k->exprs = sc_arena_array(&p->arena, (size_t)k->n_exprs + 1, sizeof *k->exprs);
  k->n_phases = k->cap_phases = (int32_t)json_array_size(phases);
  k->phases = sc_arena_array(&p->arena, (size_t)k->n_phases + 1, sizeof *k->phases);
  k->hash_slots = NULL;
  k->cap_hash = 0;
  if (!k->params || !k->exprs || !k->phases) return fail(r, SC_ERR_NOMEM, "out of memory");

  for (int32_t i = 0; i < k->n_params; i++) {
    at(r, "kernels[%d].params[%d]", kid, i);
    json_t *po = json_array_get(params, (size_t)i);
    kir_param *pa = &k->params[i];
    if (!json_is_object(po)) return fail(r, SC_ERR_PARSE, "must be an object");
    if ((st = get_range(r, po, "buffer", true, 0, 0, p->n_buffers - 1, &pa->buffer))) return st;
    if ((st = get_dtype(r, po, "dtype", &pa->dtype))) return st;
    if ((st = get_int(r, po, "numel", true, 0, &pa->numel))) return st;
    if ((st = get_bool(r, po, "written", &pa->written))) return st;
    const sc_buffer *b = &p->buffers[pa->buffer];
    int64_t bytes;
    if (pa->numel < 0 || !sc_mul_i64(pa->numel, (int64_t)sc_dtype_size(pa->dtype), &bytes) ||
        bytes > b->bytes)
      return fail(r, SC_ERR_INVALID, "%lld elements of %s do not fit buffer %d (%lld bytes)",
                  (long long)pa->numel, sc_dtype_name(pa->dtype), pa->buffer,
                  (long long)b->bytes);
    if (pa->written && (b->kind == SC_BUF_CONST || b->kind == SC_BUF_INPUT))
      return fail(r, SC_ERR_INVALID, "writes %s buffer %d", BUF_KINDS[b->kind], pa->buffer);
  }
  json_t *sg = json_object_get(o, "segments");
  if (sg) { /* kir_verify checks the rest */
    at(r, "kernels[%d].segments", kid);
    json_t *starts;
    if (!json_is_object(sg)) return fail(r, SC_ERR_PARSE, "must be an object");
    if ((st = get_range(r, sg, "params", true, 0, 1, k->n_params > 0 ? k->n_params : 1,
                        &k->seg_params)))
      return st;
    if ((st = get_array(r, sg, "starts", 1 << 16, &starts))) return st;
    if (json_array_size(starts) < 2) return fail(r, SC_ERR_INVALID, "fewer than one segment");
    k->n_segs = (int32_t)json_array_size(starts) - 1;
    k->seg_start = sc_arena_array(&p->arena, (size_t)k->n_segs + 1, sizeof *k->seg_start);
    if (!k->seg_start) return fail(r, SC_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i <= k->n_segs; i++) {
      json_t *v = json_array_get(starts, (size_t)i);
      if (!json_is_integer(v)) return fail(r, SC_ERR_PARSE, "starts[%d] must be an integer", i);
      k->seg_start[i] = json_integer_value(v);
    }
    json_t *inners = json_object_get(sg, "inners");
    if (inners) {
      if (!json_is_array(inners) || json_array_size(inners) != (size_t)k->n_segs)
        return fail(r, SC_ERR_PARSE, "inners must be an array of %d integers", (int)k->n_segs);
      k->seg_inner = sc_arena_array(&p->arena, (size_t)k->n_segs, sizeof *k->seg_inner);
      if (!k->seg_inner) return fail(r, SC_ERR_NOMEM, "out of memory");
      for (int32_t i = 0; i < k->n_segs; i++) {
        json_t *v = json_array_get(inners, (size_t)i);
        if (!json_is_integer(v)) return fail(r, SC_ERR_PARSE, "inners[%d] must be an integer", i);
        k->seg_inner[i] = json_integer_value(v);
      }
    }
  }
  /* Phases are read before expressions so that REG operands can be checked. */
  for (int32_t i = 0; i < k->n_phases; i++) {
    at(r, "kernels[%d].phases[%d]", kid, i);
    json_t *po = json_array_get(phases, (size_t)i);
    kir_phase *ph = &k->phases[i];
    if (!json_is_object(po)) return fail(r, SC_ERR_PARSE, "must be an object");
    int kind;
    if ((st = get_enum(r, po, "kind", PHASE_KINDS, 2, &kind))) return st;
    ph->kind = (kir_phase_kind)kind;
    if ((st = get_range(r, po, "value", true, 0, 0, k->n_exprs - 1, &ph->value))) return st;
    if (ph->kind == KIR_PHASE_REDUCE) {
      int rop;
      if ((st = get_enum(r, po, "rop", RED_OPS, KIR_RED_COUNT, &rop))) return st;
      ph->rop = (kir_reduce_op)rop;
      if ((st = get_dtype(r, po, "acc", &ph->acc_dtype))) return st;
      ph->out_param = ph->out_index = -1; /* as kir_add_reduce leaves them */
    } else {
      if ((st = get_range(r, po, "param", true, 0, 0, k->n_params - 1, &ph->out_param)))
        return st;
      if ((st = get_range(r, po, "index", true, 0, 0, k->n_exprs - 1, &ph->out_index)))
        return st;
      if (!k->params[ph->out_param].written)
        return fail(r, SC_ERR_INVALID, "stores to param %d, which is not written",
                    ph->out_param);
    }
  }
  for (int32_t i = 0; i < k->n_exprs; i++) {
    at(r, "kernels[%d].exprs[%d]", kid, i);
    if ((st = read_expr(r, json_array_get(exprs, (size_t)i), k, i, &k->exprs[i]))) return st;
  }
  at(r, "kernels[%d] '%s'", kid, name);
  sc_diag kd = {0};
  sc_diag_clear(&kd);
  if (kir_verify(k, &kd) != SC_OK) return fail(r, SC_ERR_INVALID, "kir_verify: %s", kd.msg);
  *out = k;
  return SC_OK;
}

/* The last element touched by a row-major rows×cols matrix with leading
 * dimension ld, batched with stride, must lie inside the buffer, whose
 * dtype is the product's: f32 or bf16, every operand the same (what the
 * devices run: sc_gemm_problem in runtime/cpu_device.c). */
/* A GEMM operand in buffer buf of dtype t (an FP8 copy: f8e4m3fn or
 * f8e5m2, when t is one of them): batch matrices rows x cols, leading dim
 * ld, stride apart, within the buffer. */
static sc_status check_matrix(reader *r, const char *what, int32_t buf, sc_dtype t,
                              int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                              int64_t stride) {
  const sc_buffer *b = &r->p->buffers[buf];
  if (ld < cols || ld < 1 || stride < 0)
    return fail(r, SC_ERR_INVALID, "%s: leading dimension %lld < %lld columns or bad stride",
                what, (long long)ld, (long long)cols);
  if (t != SC_DTYPE_F32 && t != SC_DTYPE_BF16 && t != SC_DTYPE_F8E4M3FN && t != SC_DTYPE_F8E5M2)
    return fail(r, SC_ERR_UNSUPPORTED, "%s: GEMM on %s (f32 or bf16 only)", what,
                sc_dtype_name(b->dtype));
  if (b->dtype != t)
    return fail(r, SC_ERR_INVALID, "%s: %s operand of a GEMM on %s (every operand the same)",
                what, sc_dtype_name(b->dtype), sc_dtype_name(t));
  if (rows == 0 || cols == 0 || batch == 0) return SC_OK;
  int64_t t1, t2, last;
  if (!sc_mul_i64(batch - 1, stride, &t1) || !sc_mul_i64(rows - 1, ld, &t2) ||
      !sc_add_i64(t1, t2, &last) || !sc_add_i64(last, cols, &last) ||
      !sc_mul_i64(last, (int64_t)sc_dtype_size(t), &last) || last > b->bytes)
    return fail(r, SC_ERR_INVALID, "%s: the matrices overrun buffer %d (%lld bytes)", what, buf,
                (long long)b->bytes);
  return SC_OK;
}

/* Buffer `id` (-1 allowed when optional) holds `elems` elements of dtype t
 * and, when written, is not CONST or INPUT. */
static sc_status check_comm_buf(reader *r, const char *what, int32_t id, bool optional,
                                int64_t elems, sc_dtype t, bool written) {
  const sc_program *p = r->p;
  if (id < 0) {
    if (optional) return SC_OK;
    return fail(r, SC_ERR_INVALID, "'%s' is required for this comm kind", what);
  }
  const sc_buffer *b = &p->buffers[id];
  int64_t bytes;
  if (b->dtype != t)
    return fail(r, SC_ERR_INVALID, "'%s' buffer %d is %s, the step moves %s", what, id,
                sc_dtype_name(b->dtype), sc_dtype_name(t));
  if (!sc_mul_i64(elems, (int64_t)sc_dtype_size(t), &bytes) || bytes > b->bytes)
    return fail(r, SC_ERR_INVALID, "'%s': %lld elements overrun buffer %d (%lld bytes)", what,
                (long long)elems, id, (long long)b->bytes);
  if (written && (b->kind == SC_BUF_CONST || b->kind == SC_BUF_INPUT))
    return fail(r, SC_ERR_INVALID, "comm writes %s buffer %d", BUF_KINDS[b->kind], id);
  return SC_OK;
}

/* A COMM step: every id in range, the group one of the program's mesh, and
 * every buffer the communicator or the pack/unpack copies touch big enough
 * (the sizes runtime/session.c's run_comm uses). */
static sc_status read_comm(reader *r, json_t *o, sc_comm_step *c) {
  const sc_program *p = r->p;
  json_t *co = json_object_get(o, "comm");
  if (!json_is_object(co)) return fail(r, SC_ERR_PARSE, "'comm' must be an object");
  int kind, red;
  int64_t axes;
  int32_t hi = p->n_buffers - 1;
  sc_status st;
  if ((st = get_enum(r, co, "kind", COMM_KINDS, SC_COMM_KIND_COUNT, &kind)) ||
      (st = get_enum(r, co, "reduce", COMM_REDUCE, 3, &red)) ||
      (st = get_range(r, co, "in", true, 0, -1, hi, &c->in)) ||
      (st = get_range(r, co, "out", true, 0, -1, hi, &c->out)) ||
      (st = get_range(r, co, "pack", true, 0, -1, hi, &c->pack)) ||
      (st = get_range(r, co, "unpack", true, 0, -1, hi, &c->unpack)) ||
      (st = get_int(r, co, "count", true, 0, &c->count)) ||
      (st = get_int(r, co, "pack_outer", true, 0, &c->pack_outer)) ||
      (st = get_int(r, co, "pack_inner", true, 0, &c->pack_inner)) ||
      (st = get_int(r, co, "unpack_outer", true, 0, &c->unpack_outer)) ||
      (st = get_int(r, co, "unpack_inner", true, 0, &c->unpack_inner)) ||
      (st = get_int(r, co, "rows", false, 0, &c->rows)) ||
      (st = get_int(r, co, "axes", true, 0, &axes)) ||
      (st = get_int(r, co, "group_size", true, 0, &c->group_size)) ||
      (st = get_range(r, co, "peer", true, 0, -1, INT32_MAX, &c->peer)) ||
      (st = get_range(r, co, "tag", true, 0, INT32_MIN, INT32_MAX, &c->tag)) ||
      (st = get_range(r, co, "shift", false, 0, INT32_MIN + 1, INT32_MAX, &c->shift)))
    return st;
  c->kind = (sc_comm_kind)kind;
  c->reduce = red;
  c->async = false;
  if (json_object_get(co, "async") && (st = get_bool(r, co, "async", &c->async))) return st;
  if (c->async && (c->kind == SC_COMM_SEND || c->kind == SC_COMM_RECV))
    return fail(r, SC_ERR_INVALID, "a %s step cannot be async", COMM_KINDS[c->kind]);
  if (axes < 0 || axes > (int64_t)sc_mesh_all_axes(&p->mesh))
    return fail(r, SC_ERR_INVALID, "'axes' = %lld is not a set of the mesh's axes",
                (long long)axes);
  c->axes = (uint32_t)axes;
  if ((c->axes & ~sc_mesh_all_axes(&p->mesh)) ||
      c->group_size != sc_mesh_group_size(&p->mesh, c->axes))
    return fail(r, SC_ERR_INVALID, "'group_size' = %lld, the mesh's group over axes 0x%x has %lld",
                (long long)c->group_size, (unsigned)c->axes,
                (long long)sc_mesh_group_size(&p->mesh, c->axes));
  bool p2p = c->kind == SC_COMM_SEND || c->kind == SC_COMM_RECV;
  if (c->kind == SC_COMM_SEND_RECV && !c->shift)
    return fail(r, SC_ERR_INVALID, "a send_recv step needs a 'shift'");
  if (c->shift && (!(p2p || c->kind == SC_COMM_SEND_RECV) || c->peer != -1 || c->shift <= -c->group_size ||
                   c->shift >= c->group_size))
    return fail(r, SC_ERR_INVALID, "'shift' = %d does not fit a %s step in a group of %lld",
                c->shift, COMM_KINDS[c->kind], (long long)c->group_size);
  if (p2p && !c->shift && (c->peer < 0 || c->peer >= c->group_size)) /* collectives: unused */
    return fail(r, SC_ERR_INVALID, "'peer' = %d is not a key of the group", c->peer);
  if (c->count < 0 || c->pack_outer < 0 || c->pack_inner < 0 || c->unpack_outer < 0 ||
      c->unpack_inner < 0 || c->rows < 0)
    return fail(r, SC_ERR_INVALID, "negative comm sizes");
  bool has_in = c->kind != SC_COMM_RECV, has_out = c->kind != SC_COMM_SEND;
  if ((c->in >= 0) != has_in || (c->out >= 0) != has_out)
    return fail(r, SC_ERR_INVALID, "'in'/'out' do not fit a %s step", COMM_KINDS[c->kind]);
  bool may_pack = c->kind == SC_COMM_REDUCE_SCATTER || c->kind == SC_COMM_ALL_TO_ALL;
  bool may_unpack = c->kind == SC_COMM_ALL_GATHER || c->kind == SC_COMM_ALL_TO_ALL;
  if ((c->pack >= 0 && !may_pack) || (c->unpack >= 0 && !may_unpack))
    return fail(r, SC_ERR_INVALID, "a %s step has no pack/unpack buffer", COMM_KINDS[c->kind]);
  sc_dtype t = p->buffers[has_in ? c->in : c->out].dtype;
  int64_t n = c->group_size, send = c->count, recv = c->count, packed, unpacked;
  if (c->kind == SC_COMM_REDUCE_SCATTER || c->kind == SC_COMM_ALL_TO_ALL)
    if (!sc_mul_i64(send, n, &send)) return fail(r, SC_ERR_LIMIT, "comm size overflows");
  if (c->kind == SC_COMM_ALL_GATHER || c->kind == SC_COMM_ALL_TO_ALL)
    if (!sc_mul_i64(recv, n, &recv)) return fail(r, SC_ERR_LIMIT, "comm size overflows");
  /* a gather or reduce-scatter in row chunks moves all of in and out a
   * row at a time, and its unpack or pack holds one call's rows */
  bool chunked = c->rows > 0, scatter = c->kind == SC_COMM_REDUCE_SCATTER;
  int64_t outer = sc_comm_step_outer(c), pack_scratch, unpack_scratch, rows_in;
  if (chunked && (!(scatter || c->kind == SC_COMM_ALL_GATHER) ||
                  (scatter ? c->pack : c->unpack) < 0 || c->rows >= outer ||
                  !sc_mul_i64(outer, sc_comm_step_inner(c), &rows_in) || rows_in != c->count))
    return fail(r, SC_ERR_INVALID, "'rows' = %lld does not fit the step", (long long)c->rows);
  if (!sc_mul_i64(c->pack_outer, n, &packed) || !sc_mul_i64(packed, c->pack_inner, &packed) ||
      !sc_mul_i64(c->unpack_outer, n, &unpacked) ||
      !sc_mul_i64(unpacked, c->unpack_inner, &unpacked) ||
      !sc_mul_i64(chunked && scatter ? c->rows : c->pack_outer, n, &pack_scratch) ||
      !sc_mul_i64(pack_scratch, c->pack_inner, &pack_scratch) ||
      !sc_mul_i64(chunked && !scatter ? c->rows : c->unpack_outer, n, &unpack_scratch) ||
      !sc_mul_i64(unpack_scratch, c->unpack_inner, &unpack_scratch))
    return fail(r, SC_ERR_LIMIT, "comm size overflows");
  if (c->pack >= 0 && packed < send) return fail(r, SC_ERR_INVALID, "the pack covers too little");
  if (c->unpack >= 0 && unpacked < recv)
    return fail(r, SC_ERR_INVALID, "the unpack covers too little");
  /* The communicator reads send elements of pack-or-in, writes recv of
   * unpack-or-out; the copies read all of `in` / write all of `out`. */
  if ((st = check_comm_buf(r, "in", c->in, !has_in, c->pack >= 0 ? packed : send, t, false)) ||
      (st = check_comm_buf(r, "pack", c->pack, true, pack_scratch, t, true)) ||
      (st = check_comm_buf(r, "out", c->out, !has_out, c->unpack >= 0 ? unpacked : recv, t,
                           true)) ||
      (st = check_comm_buf(r, "unpack", c->unpack, true, unpack_scratch, t, true)))
    return st;
  return SC_OK;
}

/* A SCATTER_ADD step: buffers in range, of the dtypes and sizes the step
 * reads and writes (sc_scatter_step), so the runtime's loops stay inside
 * them; out is not a constant or an input. */
static sc_status read_scatter(reader *r, json_t *o, sc_scatter_step *c) {
  const sc_program *p = r->p;
  json_t *j = json_object_get(o, "scatter");
  if (!json_is_object(j)) return fail(r, SC_ERR_PARSE, "'scatter' must be an object");
  int32_t hi = p->n_buffers - 1;
  sc_status st;
  if ((st = get_range(r, j, "data", true, 0, 0, hi, &c->data)) ||
      (st = get_range(r, j, "indices", true, 0, 0, hi, &c->indices)) ||
      (st = get_range(r, j, "updates", true, 0, 0, hi, &c->updates)) ||
      (st = get_range(r, j, "out", true, 0, 0, hi, &c->out)) ||
      (st = get_int(r, j, "rows", true, 0, &c->rows)) ||
      (st = get_int(r, j, "row", true, 0, &c->row)) || (st = get_int(r, j, "n", true, 0, &c->n)))
    return st;
  const sc_buffer *d = &p->buffers[c->data], *x = &p->buffers[c->indices];
  const sc_buffer *u = &p->buffers[c->updates], *y = &p->buffers[c->out];
  int64_t es = sc_dtype_size(y->dtype), cells, upd;
  if (c->rows < 1 || c->row < 0 || c->n < 0 || !sc_mul_i64(c->rows, c->row, &cells) ||
      !sc_mul_i64(c->n, c->row, &upd))
    return fail(r, SC_ERR_INVALID, "scatter_add: bad sizes");
  if ((y->dtype != SC_DTYPE_F32 && y->dtype != SC_DTYPE_F64) || d->dtype != y->dtype ||
      u->dtype != y->dtype || (x->dtype != SC_DTYPE_I32 && x->dtype != SC_DTYPE_I64))
    return fail(r, SC_ERR_INVALID, "scatter_add: dtypes %s, %s, %s, %s", sc_dtype_name(d->dtype),
                sc_dtype_name(x->dtype), sc_dtype_name(u->dtype), sc_dtype_name(y->dtype));
  if (y->bytes != cells * es || d->bytes != y->bytes || u->bytes != upd * es ||
      x->bytes != c->n * (int64_t)sc_dtype_size(x->dtype))
    return fail(r, SC_ERR_INVALID, "scatter_add: buffer sizes do not match rows %lld, row %lld, "
                "n %lld", (long long)c->rows, (long long)c->row, (long long)c->n);
  if (y->kind == SC_BUF_CONST || y->kind == SC_BUF_INPUT)
    return fail(r, SC_ERR_INVALID, "scatter_add writes %s buffer %d", BUF_KINDS[y->kind],
                (int)c->out);
  return SC_OK;
}

/* An ATTENTION or ATTENTION_GRAD step: ids in range (-1 only for the
 * mask and, in the forward, the gradient buffers), then every extent and
 * dtype checked against the buffers (sc_attention_problem), so the
 * device's loops stay inside them. */
static sc_status read_attention(reader *r, json_t *o, sc_step *s) {
  const sc_program *p = r->p;
  json_t *j = json_object_get(o, "attention");
  if (!json_is_object(j)) return fail(r, SC_ERR_PARSE, "'attention' must be an object");
  sc_attention_step *a = &s->attn;
  sc_status st;
  for (size_t i = 0; i < N_ATTN_BUFS; i++)
    if ((st = get_range(r, j, ATTN_BUFS[i].key, true, 0, -1, p->n_buffers - 1,
                        (int32_t *)((char *)a + ATTN_BUFS[i].offset))))
      return st;
  for (size_t i = 0; i < N_ATTN_DIMS; i++)
    if ((st = get_int(r, j, ATTN_DIMS[i].key, true, 0,
                      (int64_t *)((char *)a + ATTN_DIMS[i].offset))))
      return st;
  double scale;
  if ((st = get_real(r, j, "scale", true, &scale)) || (st = get_bool(r, j, "causal", &a->causal)))
    return st;
  if (!(fabs(scale) <= 3.4e38)) return fail(r, SC_ERR_INVALID, "attention: scale out of range");
  a->scale = (float)scale;
  const char *why = sc_attention_problem(p, s);
  if (why) return fail(r, SC_ERR_INVALID, "%s: %s", STEP_KINDS[s->kind], why);
  return SC_OK;
}

typedef struct host_touch {
  const sc_program *p;
  bool hit;
} host_touch;

static void touches_host(void *ud, int32_t b, bool written) {
  (void)written;
  host_touch *t = ud;
  if (b >= 0 && b < t->p->n_buffers && t->p->buffers[sc_program_root(t->p, b)].kind == SC_BUF_HOST)
    t->hit = true;
}

/* Host-pool buffers are touched by COPY steps only (devices give them no
 * address): no view of one, no input or output, no other step naming one. */
static sc_status check_host_buffers(reader *r) {
  const sc_program *p = r->p;
  host_touch t = {p, false};
  for (int32_t b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == SC_BUF_VIEW) touches_host(&t, b, false);
  if (t.hit) return fail(r, SC_ERR_INVALID, "a view of a host buffer");
  for (int32_t i = 0; i < p->n_inputs; i++) touches_host(&t, p->inputs[i], false);
  for (int32_t i = 0; i < p->n_outputs; i++) touches_host(&t, p->outputs[i], false);
  if (t.hit) return fail(r, SC_ERR_INVALID, "a host buffer as an input or output");
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind == SC_STEP_COPY || s->kind == SC_STEP_WAIT) continue;
    sc_step_buffers(p, s, touches_host, &t);
    if (t.hit) {
      at(r, "steps[%d]", i);
      return fail(r, SC_ERR_INVALID, "only copy steps may touch a host buffer");
    }
  }
  return SC_OK;
}

/* Every WAIT completes an earlier async COMM step, each async step is
 * waited for exactly once, and none is left running at the end: the
 * session's waits then always end. */
static sc_status check_waits(reader *r) {
  const sc_program *p = r->p;
  bool *waited = sc_calloc((size_t)p->n_steps + 1, sizeof *waited);
  if (!waited) return fail(r, SC_ERR_NOMEM, "out of memory");
  sc_status st = SC_OK;
  for (int32_t i = 0; i < p->n_steps && st == SC_OK; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_WAIT) continue;
    at(r, "steps[%d]", i);
    int32_t j = s->started;
    if (p->steps[j].kind != SC_STEP_COPY && (p->steps[j].kind != SC_STEP_COMM || !p->steps[j].comm.async))
      st = fail(r, SC_ERR_INVALID,
                "waits for step %d, which is not an async collective or a copy", j);
    else if (waited[j])
      st = fail(r, SC_ERR_INVALID, "waits for step %d a second time", j);
    waited[j] = true;
  }
  for (int32_t i = 0; i < p->n_steps && st == SC_OK; i++)
    if (((p->steps[i].kind == SC_STEP_COMM && p->steps[i].comm.async) ||
         p->steps[i].kind == SC_STEP_COPY) && !waited[i]) {
      at(r, "steps[%d]", i);
      st = fail(r, SC_ERR_INVALID, "an async collective or copy that no step waits for");
    }
  sc_free(waited);
  return st;
}

/* The convolution a GEMM computes (sc_conv_geom): ids in range, sizes
 * non-negative, x large enough for [batch, c, h, w]. Whether the sizes
 * describe this GEMM is the device's check when it convolves
 * (runtime/cpu_conv.c); otherwise they are not used. */
/* The 'prep' array of a conv or pool object: 2 kernel ids or -1. */
static sc_status read_prep(reader *r, json_t *o, const char *what, int32_t prep[2]) {
  json_t *a = json_object_get(o, "prep");
  if (!json_is_array(a) || json_array_size(a) != 2)
    return fail(r, SC_ERR_PARSE, "%s 'prep' must be an array of 2 kernel ids", what);
  for (size_t i = 0; i < 2; i++) {
    json_t *e = json_array_get(a, i);
    if (!json_is_integer(e) || json_integer_value(e) < -1 ||
        json_integer_value(e) >= r->p->n_kernels)
      return fail(r, SC_ERR_INVALID, "%s prep[%d] is not a kernel id or -1", what, (int)i);
    prep[i] = (int32_t)json_integer_value(e);
  }
  return SC_OK;
}

/* Whether buffer b holds at least n*c*h*w floats. */
static bool holds_floats(const sc_program *p, int32_t b, int64_t n, int64_t c, int64_t h,
                         int64_t w) {
  int64_t need = n, bytes;
  return sc_mul_i64(need, c, &need) && sc_mul_i64(need, h, &need) &&
         sc_mul_i64(need, w, &need) && sc_mul_i64(need, 4, &bytes) &&
         p->buffers[b].bytes >= bytes;
}

static sc_status read_conv(reader *r, json_t *co, sc_gemm *m) {
  sc_program *p = r->p;
  sc_conv_geom *v = &m->conv;
  if (!json_is_object(co)) return fail(r, SC_ERR_PARSE, "'conv' must be an object");
  sc_status st;
  if ((st = get_range(r, co, "x", true, 0, 0, p->n_buffers - 1, &v->x)) ||
      (st = read_prep(r, co, "conv", v->prep)))
    return st;
  if ((st = get_range(r, co, "bias", false, -1, -1, p->n_buffers - 1, &v->bias)) ||
      (st = get_range(r, co, "bias_kernel", false, -1, -1, p->n_kernels - 1, &v->bias_kernel)))
    return st;
  if ((v->bias < 0) != (v->bias_kernel < 0))
    return fail(r, SC_ERR_INVALID, "conv 'bias' and 'bias_kernel' are given together");
  for (size_t i = 0; i < N_CONV_FIELDS; i++) {
    int64_t *f = (int64_t *)((char *)v + CONV_FIELDS[i].offset);
    if ((st = get_int(r, co, CONV_FIELDS[i].key, true, 0, f))) return st;
    if (*f < 0) return fail(r, SC_ERR_INVALID, "conv '%s' is negative", CONV_FIELDS[i].key);
  }
  if (!holds_floats(p, v->x, m->batch, v->c, v->h, v->w))
    return fail(r, SC_ERR_INVALID, "conv input buffer %d is smaller than its sizes", v->x);
  v->on = true;
  return SC_OK;
}

/* The max-pool a KERNEL step completes (sc_pool_geom): ids in range, sizes
 * non-negative, x and y large enough for them. Whether the kernels compute
 * that pool is the lowering's promise; a device that pools directly checks
 * the geometry itself (runtime/cpu_conv.c). */
static sc_status read_pool(reader *r, json_t *po, sc_pool_geom *v) {
  sc_program *p = r->p;
  if (!json_is_object(po)) return fail(r, SC_ERR_PARSE, "'pool' must be an object");
  sc_status st;
  if ((st = get_range(r, po, "x", true, 0, 0, p->n_buffers - 1, &v->x)) ||
      (st = get_range(r, po, "y", true, 0, 0, p->n_buffers - 1, &v->y)) ||
      (st = read_prep(r, po, "pool", v->prep)))
    return st;
  for (size_t i = 0; i < N_POOL_FIELDS; i++) {
    int64_t *f = (int64_t *)((char *)v + POOL_FIELDS[i].offset);
    if ((st = get_int(r, po, POOL_FIELDS[i].key, true, 0, f))) return st;
    if (*f < 0) return fail(r, SC_ERR_INVALID, "pool '%s' is negative", POOL_FIELDS[i].key);
  }
  if (!holds_floats(p, v->x, v->n, v->c, v->h, v->w) ||
      !holds_floats(p, v->y, v->n, v->c, v->oh, v->ow))
    return fail(r, SC_ERR_INVALID, "pool buffers %d, %d are smaller than its sizes", v->x, v->y);
  v->on = true;
  return SC_OK;
}

static sc_status read_step(reader *r, json_t *o, int32_t sid, sc_step *s) {
  const sc_program *p = r->p;
  at(r, "steps[%d]", sid);
  if (!json_is_object(o)) return fail(r, SC_ERR_PARSE, "must be an object");
  int kind;
  sc_status st;
  memset(s, 0, sizeof *s);
  if ((st = get_enum(r, o, "kind", STEP_KINDS, SC_STEP_KIND_COUNT, &kind))) return st;
  s->kind = (sc_step_kind)kind;
  if ((st = get_str(r, o, "origin", true, &s->origin))) return st;
  if (s->kind == SC_STEP_COMM) {
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel))) return st;
    return read_comm(r, o, &s->comm);
  }
  if (s->kind == SC_STEP_SCATTER_ADD) {
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel))) return st;
    return read_scatter(r, o, &s->scatter);
  }
  if (s->kind == SC_STEP_ATTENTION || s->kind == SC_STEP_ATTENTION_GRAD) {
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel))) return st;
    return read_attention(r, o, s);
  }
  if (s->kind == SC_STEP_COPY) { /* one HOST and one arena TEMP of one size */
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel)) ||
        (st = get_range(r, o, "src", true, 0, 0, p->n_buffers - 1, &s->copy.src)) ||
        (st = get_range(r, o, "dst", true, 0, 0, p->n_buffers - 1, &s->copy.dst)))
      return st;
    const sc_buffer *a = &p->buffers[s->copy.src], *b = &p->buffers[s->copy.dst];
    if ((a->kind == SC_BUF_HOST) == (b->kind == SC_BUF_HOST) ||
        (a->kind != SC_BUF_HOST && a->kind != SC_BUF_TEMP) ||
        (b->kind != SC_BUF_HOST && b->kind != SC_BUF_TEMP) || a->bytes != b->bytes)
      return fail(r, SC_ERR_INVALID, "copy: src and dst must be a host and a temp buffer of "
                                     "one size");
    return SC_OK;
  }
  if (s->kind == SC_STEP_WAIT) { /* pairing checked by check_waits */
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel))) return st;
    return get_range(r, o, "started", true, 0, 0, sid - 1, &s->started);
  }
  if (s->kind == SC_STEP_CHECK) {
    if ((st = get_range(r, o, "kernel", true, 0, -1, -1, &s->kernel))) return st;
    json_t *c = json_object_get(o, "check");
    if (!json_is_object(c)) return fail(r, SC_ERR_PARSE, "'check' must be an object");
    if ((st = get_range(r, c, "buffer", true, 0, 0, p->n_buffers - 1, &s->check.buffer)) ||
        (st = get_int(r, c, "dim", true, 0, &s->check.dim)))
      return st;
    sc_dtype t = p->buffers[s->check.buffer].dtype;
    if (s->check.dim < 0) return fail(r, SC_ERR_INVALID, "check: negative dim");
    if (!sc_dtype_is_int(t))
      return fail(r, SC_ERR_INVALID, "checked buffer %d is %s, not integers",
                  (int)s->check.buffer, sc_dtype_name(t));
    return SC_OK;
  }
  if ((st = get_range(r, o, "kernel", true, 0, s->kind == SC_STEP_GEMM ? -1 : 0,
                      p->n_kernels - 1, &s->kernel)))
    return st;
  if (s->kind != SC_STEP_GEMM) {
    s->gemm.a = s->gemm.b = s->gemm.c = s->gemm.bias = 0;
    json_t *po = json_object_get(o, "pool");
    return po ? read_pool(r, po, &s->pool) : SC_OK;
  }
  json_t *g = json_object_get(o, "gemm");
  if (!json_is_object(g)) return fail(r, SC_ERR_PARSE, "'gemm' must be an object");
  sc_gemm *m = &s->gemm;
  int32_t hi = p->n_buffers - 1;
  double alpha, beta;
  if ((st = get_range(r, g, "a", true, 0, 0, hi, &m->a)) ||
      (st = get_range(r, g, "b", true, 0, 0, hi, &m->b)) ||
      (st = get_range(r, g, "c", true, 0, 0, hi, &m->c)) ||
      (st = get_range(r, g, "bias", true, 0, -1, hi, &m->bias)) ||
      (st = get_bool(r, g, "trans_a", &m->trans_a)) ||
      (st = get_bool(r, g, "trans_b", &m->trans_b)) ||
      (st = get_bool(r, g, "bias_full", &m->bias_full)) ||
      (st = get_int(r, g, "batch", true, 0, &m->batch)) ||
      (st = get_int(r, g, "m", true, 0, &m->m)) || (st = get_int(r, g, "n", true, 0, &m->n)) ||
      (st = get_int(r, g, "k", true, 0, &m->k)) ||
      (st = get_int(r, g, "lda", true, 0, &m->lda)) ||
      (st = get_int(r, g, "ldb", true, 0, &m->ldb)) ||
      (st = get_int(r, g, "ldc", true, 0, &m->ldc)) ||
      (st = get_int(r, g, "stride_a", true, 0, &m->stride_a)) ||
      (st = get_int(r, g, "stride_b", true, 0, &m->stride_b)) ||
      (st = get_int(r, g, "stride_c", true, 0, &m->stride_c)) ||
      (st = get_real(r, g, "alpha", true, &alpha)) || (st = get_real(r, g, "beta", true, &beta)))
    return st;
  m->alpha = (float)alpha;
  m->beta = (float)beta;
  if (m->batch < 1 || m->m < 0 || m->n < 0 || m->k < 0)
    return fail(r, SC_ERR_INVALID, "bad GEMM sizes");
  const sc_buffer *cb = &p->buffers[m->c];
  if (cb->kind == SC_BUF_CONST || cb->kind == SC_BUF_INPUT)
    return fail(r, SC_ERR_INVALID, "GEMM writes %s buffer %d", BUF_KINDS[cb->kind], m->c);
  sc_dtype t = cb->dtype; /* the product's: C's */
  if ((st = check_matrix(r, "A", m->a, t, m->batch, m->trans_a ? m->k : m->m,
                         m->trans_a ? m->m : m->k, m->lda, m->stride_a)) ||
      (st = check_matrix(r, "B", m->b, t, m->batch, m->trans_b ? m->n : m->k,
                         m->trans_b ? m->k : m->n, m->ldb, m->stride_b)) ||
      (st = check_matrix(r, "C", m->c, t, m->batch, m->m, m->n, m->ldc, m->stride_c)))
    return st;
  /* FP8 copies of A and B (sc_gemm.fp8): both or neither, f8e4m3fn or f8e5m2 */
  m->a8 = m->b8 = -1;
  m->a8_tn = m->b8_tn = false;
  if ((st = get_range(r, g, "a8", false, -1, -1, hi, &m->a8)) ||
      (st = get_range(r, g, "b8", false, -1, -1, hi, &m->b8)))
    return st;
  m->fp8 = m->a8 >= 0 || m->b8 >= 0;
  if (m->fp8) {
    if (m->a8 < 0 || m->b8 < 0) return fail(r, SC_ERR_INVALID, "a GEMM with a8 but no b8");
    sc_dtype ta = p->buffers[m->a8].dtype, tb = p->buffers[m->b8].dtype;
    if (t != SC_DTYPE_F32 || (ta != SC_DTYPE_F8E4M3FN && ta != SC_DTYPE_F8E5M2) ||
        (tb != SC_DTYPE_F8E4M3FN && tb != SC_DTYPE_F8E5M2))
      return fail(r, SC_ERR_INVALID, "a8, b8: FP8 copies (f8e4m3fn, f8e5m2) of an f32 GEMM's "
                  "operands");
    /* in A's and B's layout, or transposed copies laid out "TN" */
    if ((json_object_get(g, "a8_tn") && (st = get_bool(r, g, "a8_tn", &m->a8_tn))) ||
        (json_object_get(g, "b8_tn") && (st = get_bool(r, g, "b8_tn", &m->b8_tn))))
      return st;
    sc_gemm v = sc_gemm_fp8_layout(m);
    if ((st = check_matrix(r, "a8", m->a8, ta, v.batch, v.trans_a ? v.k : v.m,
                           v.trans_a ? v.m : v.k, v.lda, v.stride_a)) ||
        (st = check_matrix(r, "b8", m->b8, tb, v.batch, v.trans_b ? v.n : v.k,
                           v.trans_b ? v.k : v.n, v.ldb, v.stride_b)))
      return st;
  }
  /* the dequantisation factors the product is multiplied by (sc_gemm.scaled):
   * both or neither, f32 scalars, of an FP8 product without alpha, C or bias */
  m->a8_scale = m->b8_scale = -1;
  if ((st = get_range(r, g, "a8_scale", false, -1, -1, hi, &m->a8_scale)) ||
      (st = get_range(r, g, "b8_scale", false, -1, -1, hi, &m->b8_scale)))
    return st;
  m->scaled = m->a8_scale >= 0 || m->b8_scale >= 0;
  if (m->scaled) {
    if (!m->fp8 || m->a8_scale < 0 || m->b8_scale < 0)
      return fail(r, SC_ERR_INVALID, "a8_scale, b8_scale: both, and only on an FP8 GEMM (a8, b8)");
    for (int j = 0; j < 2; j++) {
      const sc_buffer *sb = &p->buffers[j ? m->b8_scale : m->a8_scale];
      if (sb->dtype != SC_DTYPE_F32 || sb->bytes != (int64_t)sizeof(float))
        return fail(r, SC_ERR_INVALID, "%s: a scale is one f32 element", j ? "b8_scale" : "a8_scale");
    }
    if (m->alpha != 1.0f || m->beta != 0.0f || m->bias >= 0)
      return fail(r, SC_ERR_INVALID, "a scaled FP8 GEMM has alpha 1, beta 0 and no bias");
  }
  if (m->bias >= 0) {
    int64_t need = m->n;
    if (m->bias_full && !sc_mul_i64(m->m, m->n, &need))
      return fail(r, SC_ERR_LIMIT, "bias size overflows");
    int64_t bytes;
    if (p->buffers[m->bias].dtype != t)
      return fail(r, SC_ERR_INVALID, "bias buffer %d is %s, the GEMM %s", m->bias,
                  sc_dtype_name(p->buffers[m->bias].dtype), sc_dtype_name(t));
    if (!sc_mul_i64(need, (int64_t)sc_dtype_size(t), &bytes) || p->buffers[m->bias].bytes < bytes)
      return fail(r, SC_ERR_INVALID, "bias buffer %d is smaller than %lld elements", m->bias,
                  (long long)need);
  }
  m->act = SC_GEMM_ACT_NONE;
  m->act_out = -1;
  m->act_aux = false;
  m->act_in = -1;
  if (json_object_get(g, "act")) { /* the epilogue kernel computes act_out = act(C) */
    static const char *const acts[SC_GEMM_ACT_COUNT] = {"none", "relu", "gelu_tanh",
                                                        "dgelu_tanh"};
    int a;
    if ((st = get_enum(r, g, "act", acts, SC_GEMM_ACT_COUNT, &a)) ||
        (st = get_range(r, g, "act_out", true, 0, 0, hi, &m->act_out)) ||
        (json_object_get(g, "act_aux") && (st = get_bool(r, g, "act_aux", &m->act_aux))))
      return st;
    m->act = (sc_gemm_act)a;
    const sc_buffer *ab = &p->buffers[m->act_out];
    if (m->act != SC_GEMM_ACT_NONE && (s->kernel < 0 || ab->kind == SC_BUF_CONST ||
                                       ab->kind == SC_BUF_INPUT))
      return fail(r, SC_ERR_INVALID, "GEMM activation without an epilogue kernel, or into %s "
                  "buffer %d", BUF_KINDS[ab->kind], m->act_out);
    if ((st = check_matrix(r, "act_out", m->act_out, t, m->batch, m->m, m->n, m->ldc,
                           m->stride_c)))
      return st;
    if (m->act == SC_GEMM_ACT_DGELU_TANH &&
        ((st = get_range(r, g, "act_in", true, 0, 0, hi, &m->act_in)) ||
         (st = check_matrix(r, "act_in", m->act_in, t, m->batch, m->m, m->n, m->ldc,
                            m->stride_c))))
      return st;
  }
  m->bgrad = SC_GEMM_BGRAD_NONE;
  m->bgrad_out = m->bgrad_kernel = -1;
  if (json_object_get(g, "bgrad")) { /* bgrad_kernel sums one operand over k */
    static const char *const sides[SC_GEMM_BGRAD_COUNT] = {"none", "a", "b"};
    int b;
    if ((st = get_enum(r, g, "bgrad", sides, SC_GEMM_BGRAD_COUNT, &b)) ||
        (st = get_range(r, g, "bgrad_out", true, 0, 0, hi, &m->bgrad_out)) ||
        (st = get_range(r, g, "bgrad_kernel", true, 0, 0, p->n_kernels - 1, &m->bgrad_kernel)))
      return st;
    m->bgrad = (sc_gemm_bgrad)b;
    const sc_buffer *bb = &p->buffers[m->bgrad_out];
    int64_t need = m->bgrad == SC_GEMM_BGRAD_A ? m->m : m->n, bytes;
    if (m->bgrad != SC_GEMM_BGRAD_NONE &&
        (m->bgrad_kernel == s->kernel || m->act != SC_GEMM_ACT_NONE || m->batch != 1 ||
         m->fp8 || bb->kind == SC_BUF_CONST || bb->kind == SC_BUF_INPUT || bb->dtype != t ||
         !sc_mul_i64(need, (int64_t)sc_dtype_size(t), &bytes) || bb->bytes < bytes))
      return fail(r, SC_ERR_INVALID, "GEMM bias gradient in the step's epilogue kernel, with an "
                  "activation, batched or FP8, or into %s buffer %d that is not %lld elements "
                  "of %s", BUF_KINDS[bb->kind], m->bgrad_out, (long long)need,
                  sc_dtype_name(t));
  }
  json_t *co = json_object_get(g, "conv");
  return co ? read_conv(r, co, m) : SC_OK;
}

static sc_status read_ids(reader *r, json_t *root, const char *key, int32_t *n, int32_t **ids) {
  sc_program *p = r->p;
  json_t *a;
  at(r, "%s", "");
  sc_status st = get_array(r, root, key, (size_t)p->n_buffers, &a);
  if (st) return st;
  *n = (int32_t)json_array_size(a);
  *ids = sc_arena_array(&p->arena, (size_t)*n + 1, sizeof **ids);
  if (!*ids) return fail(r, SC_ERR_NOMEM, "out of memory");
  for (int32_t i = 0; i < *n; i++) {
    json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= p->n_buffers)
      return fail(r, SC_ERR_INVALID, "%s[%d] is not a buffer id", key, i);
    (*ids)[i] = (int32_t)json_integer_value(v);
    sc_buf_kind kind = p->buffers[(*ids)[i]].kind;
    bool inputs = strcmp(key, "inputs") == 0;
    if (inputs ? kind != SC_BUF_INPUT : (kind == SC_BUF_TEMP))
      return fail(r, SC_ERR_INVALID, "%s[%d]: buffer %d is a %s buffer", key, i, (*ids)[i],
                  BUF_KINDS[kind]);
  }
  return SC_OK;
}

/* "updates": [n_outputs] input indices or -1 (the memory plan's check,
 * run on every loaded program, decides whether the pairs are sound). */
static sc_status read_updates(reader *r, json_t *root) {
  sc_program *p = r->p;
  if (!json_object_get(root, "updates")) return SC_OK;
  json_t *a;
  at(r, "%s", "");
  sc_status st = get_array(r, root, "updates", (size_t)p->n_outputs, &a);
  if (st) return st;
  if ((int32_t)json_array_size(a) != p->n_outputs)
    return fail(r, SC_ERR_INVALID, "'updates' has %d entries for %d outputs",
                (int)json_array_size(a), (int)p->n_outputs);
  p->updates = sc_arena_array(&p->arena, (size_t)p->n_outputs + 1, sizeof *p->updates);
  if (!p->updates) return fail(r, SC_ERR_NOMEM, "out of memory");
  for (int32_t j = 0; j < p->n_outputs; j++) {
    json_t *v = json_array_get(a, (size_t)j);
    if (!json_is_integer(v) || json_integer_value(v) < -1 ||
        json_integer_value(v) >= p->n_inputs)
      return fail(r, SC_ERR_INVALID, "updates[%d] is not an input index or -1", (int)j);
    p->updates[j] = (int32_t)json_integer_value(v);
  }
  return SC_OK;
}

static sc_status read_program(reader *r, json_t *root) {
  sc_program *p = r->p;
  sc_status st;
  if (!json_is_object(root)) return fail(r, SC_ERR_PARSE, "the top level must be an object");
  const char *fmt = json_string_value(json_object_get(root, "format"));
  if (!fmt || strcmp(fmt, "shardc-program") != 0)
    return fail(r, SC_ERR_PARSE, "not a shardc program (\"format\" is not \"shardc-program\")");
  int64_t version;
  if ((st = get_int(r, root, "version", true, 0, &version))) return st;
  if (version != SC_PROGRAM_JSON_VERSION)
    return fail(r, SC_ERR_UNSUPPORTED, "version %lld (this shardc reads version %d)",
                (long long)version, SC_PROGRAM_JSON_VERSION);
  if ((st = get_int(r, root, "arena_bytes", true, 0, &p->arena_bytes))) return st;
  if ((st = get_int(r, root, "arena_align", true, 0, &p->arena_align))) return st;
  if ((st = get_int(r, root, "host_bytes", false, 0, &p->host_bytes))) return st;
  if (p->host_bytes < 0) return fail(r, SC_ERR_INVALID, "negative host_bytes");
  if ((st = get_int(r, root, "workspace_bytes", false, 0, &p->workspace_bytes)) ||
      (st = get_int(r, root, "workspace_offset", false, 0, &p->workspace_offset)))
    return st; /* checked by sc_memplan_verify */
  json_t *mesh = json_object_get(root, "mesh");
  if (mesh) {
    sc_diag md = {0};
    sc_diag_clear(&md);
    int64_t rpn;
    if (!json_is_string(mesh)) return fail(r, SC_ERR_PARSE, "'mesh' must be a string");
    if (sc_mesh_parse(json_string_value(mesh), &p->mesh, &md) != SC_OK)
      return fail(r, SC_ERR_INVALID, "mesh: %s", md.msg);
    if ((st = get_int(r, root, "ranks_per_node", false, 0, &rpn))) return st;
    if (rpn && sc_mesh_set_ranks_per_node(&p->mesh, rpn, &md) != SC_OK)
      return fail(r, SC_ERR_INVALID, "ranks_per_node: %s", md.msg);
  } else if (json_object_get(root, "ranks_per_node")) {
    return fail(r, SC_ERR_PARSE, "'ranks_per_node' without 'mesh'");
  }
  if (p->arena_bytes < 0 || p->arena_align < 1 || p->arena_align > 4096 ||
      (p->arena_align & (p->arena_align - 1)))
    return fail(r, SC_ERR_INVALID, "bad arena_bytes or arena_align");

  json_t *bufs, *kernels, *steps;
  if ((st = get_array(r, root, "buffers", 1 << 24, &bufs))) return st;
  if ((st = get_array(r, root, "kernels", 1 << 20, &kernels))) return st;
  if ((st = get_array(r, root, "steps", 1 << 22, &steps))) return st;
  int32_t nb = (int32_t)json_array_size(bufs);
  for (int32_t i = 0; i < nb; i++) {
    sc_buffer b;
    if ((st = read_buffer(r, json_array_get(bufs, (size_t)i), i, nb, &b))) return st;
    if (sc_program_add_buffer(p, &b) != i) return fail(r, SC_ERR_NOMEM, "out of memory");
  }
  /* VIEW chains end at a storage buffer, no bigger than it. */
  for (int32_t i = 0; i < nb; i++) {
    int32_t cur = i, hops = 0;
    while (p->buffers[cur].kind == SC_BUF_VIEW) {
      cur = p->buffers[cur].alias_of;
      if (++hops > nb) {
        at(r, "buffers[%d]", i);
        return fail(r, SC_ERR_INVALID, "a cycle of views");
      }
    }
    if (p->buffers[i].bytes > p->buffers[cur].bytes) {
      at(r, "buffers[%d]", i);
      return fail(r, SC_ERR_INVALID, "a view larger than its storage (buffer %d)", cur);
    }
  }
  if ((st = read_ids(r, root, "inputs", &p->n_inputs, &p->inputs))) return st;
  if ((st = read_ids(r, root, "outputs", &p->n_outputs, &p->outputs))) return st;
  if ((st = read_updates(r, root))) return st;
  int32_t nk = (int32_t)json_array_size(kernels);
  for (int32_t i = 0; i < nk; i++) {
    kir_kernel *k = NULL;
    if ((st = read_kernel(r, json_array_get(kernels, (size_t)i), i, &k))) return st;
    if (sc_program_add_kernel(p, k) != i) return fail(r, SC_ERR_NOMEM, "out of memory");
  }
  int32_t ns = (int32_t)json_array_size(steps);
  for (int32_t i = 0; i < ns; i++) {
    sc_step s;
    if ((st = read_step(r, json_array_get(steps, (size_t)i), i, &s))) return st;
    if (sc_program_add_step(p, &s) != i) return fail(r, SC_ERR_NOMEM, "out of memory");
  }
  if ((st = check_host_buffers(r))) return st;
  return check_waits(r);
}

sc_status sc_program_read_json(const char *text, size_t len, const void *weights,
                               int64_t weights_bytes, sc_program **out, sc_diag *diag) {
  *out = NULL;
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL, "program.json: line %d: %s", err.line,
                       err.text);
  reader r = {.diag = diag, .weights = weights, .weights_bytes = weights ? weights_bytes : 0};
  r.p = sc_program_create();
  sc_status st = r.p ? read_program(&r, root) : fail(&r, SC_ERR_NOMEM, "out of memory");
  json_decref(root);
  sc_diag md;
  sc_diag_clear(&md);
  if (st == SC_OK && sc_memplan_verify(r.p, &md) != SC_OK) /* a plan we did not make */
    st = sc_diag_set(diag, md.status, NULL, NULL, "program.json: %s", md.msg);
  if (st != SC_OK) {
    sc_program_destroy(r.p);
    return st;
  }
  *out = r.p;
  return SC_OK;
}
