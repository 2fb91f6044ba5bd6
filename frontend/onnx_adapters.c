/* onnx_adapters.c — version adapters: a node of an op whose meaning changed
 * is read at the model's opset and rewritten into the form the IR means
 * (opset 13 and later), so that everything after import sees one meaning.
 *
 * One table entry per op and opset boundary ("before opset B, op O is read
 * by F"); F emits the node(s) that replace it. Where the IR already reads
 * both forms (axes and split as attributes or inputs: Squeeze, Unsqueeze,
 * Split, ReduceSum before 13 and the other reductions before 18; Clip's
 * bounds as attributes before 11; Dropout's ratio attribute, ignored in
 * inference) no adapter is needed. The adapted ops:
 *   Softmax, LogSoftmax (< 13)  coerced the input to 2-D around `axis`
 *       (default 1): Y = Reshape(Softmax(Flatten(X, axis), axis = 1),
 *       Shape(X)); Flatten and Reshape are views, and the result equals
 *       the per-axis form when axis is the last one;
 *   Slice (< 10)      starts, ends, axes attributes → int64 inputs;
 *   Pad (< 11)        pads attribute → an int64 input, value (non-zero) →
 *       a float scalar input (the data's dtype must then be float32);
 *   BatchNormalization (< 9)  `spatial` = 0 (per-element statistics) is
 *       refused; otherwise the attribute is dropped.
 * Made nodes and values are named after the node ("N/flatten",
 * "N/starts"); constants are Constant nodes (typed int64/float data). All
 * of it lives in the graph's arena, like the inliner's (onnx_functions.c). */
#include <stdio.h>
#include <string.h>

#include "frontend_internal.h"

typedef struct adapter {
  sc_onnx_ctx *c;
  sc_onnx_nodes out;
  size_t index; /* of the node being adapted, for generated names */
} adapter;

static sc_status nomem(adapter *ad) {
  return sc_onnx_error(ad->c, SC_ERR_NOMEM, "out of memory");
}

static sc_status emit(adapter *ad, Onnx__NodeProto *np) {
  return sc_onnx_nodes_push(ad->c, &ad->out, np);
}

static sc_arena *A(adapter *ad) { return &ad->c->g->arena; }

/* The node's name, or "<op>_<index>" (names made from it stay unique). */
static const char *base_name(adapter *ad, const Onnx__NodeProto *np) {
  if (np->name && np->name[0]) return np->name;
  return sc_arena_printf(A(ad), "%s_%zu", np->op_type, ad->index);
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *np, const char *name) {
  for (size_t k = 0; k < np->n_attribute; k++)
    if (np->attribute[k] && np->attribute[k]->name && strcmp(np->attribute[k]->name, name) == 0)
      return np->attribute[k];
  return NULL;
}

/* A node op(inputs) -> outputs named name, with n_attr attributes. */
static Onnx__NodeProto *node(adapter *ad, const char *op, const char *name, const char **in,
                             size_t n_in, const char **out, size_t n_out, size_t n_attr) {
  Onnx__NodeProto *np = sc_arena_array(A(ad), 1, sizeof *np);
  char **i = sc_arena_array(A(ad), n_in + 1, sizeof *i), **o = sc_arena_array(A(ad), n_out + 1, sizeof *o);
  Onnx__AttributeProto **at = sc_arena_array(A(ad), n_attr + 1, sizeof *at);
  if (!np || !i || !o || !at || !name) return NULL;
  onnx__node_proto__init(np);
  np->op_type = (char *)op;
  np->name = (char *)name;
  for (size_t k = 0; k < n_in; k++) i[k] = (char *)in[k];
  for (size_t k = 0; k < n_out; k++) o[k] = (char *)out[k];
  np->input = i;
  np->n_input = n_in;
  np->output = o;
  np->n_output = n_out;
  np->attribute = at;
  return np;
}

static Onnx__AttributeProto *int_attr(adapter *ad, const char *name, int64_t v) {
  Onnx__AttributeProto *a = sc_arena_array(A(ad), 1, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
  return a;
}

/* A Constant node whose output `value` is the int64 vector v[n] (or, with
 * f, the float scalar *f). */
static sc_status constant(adapter *ad, const char *value, const int64_t *v, size_t n,
                          const float *f) {
  Onnx__TensorProto *t = sc_arena_array(A(ad), 1, sizeof *t);
  Onnx__AttributeProto *a = sc_arena_array(A(ad), 1, sizeof *a);
  int64_t *dims = sc_arena_array(A(ad), 1, sizeof *dims);
  int64_t *data = sc_arena_array(A(ad), n + 1, sizeof *data);
  float *fd = sc_arena_array(A(ad), 1, sizeof *fd);
  const char *name = sc_arena_printf(A(ad), "%s/const", value);
  Onnx__NodeProto *np = node(ad, "Constant", name, NULL, 0, &value, 1, 1);
  if (!t || !a || !dims || !data || !fd || !np) return nomem(ad);
  onnx__tensor_proto__init(t);
  t->has_data_type = 1;
  if (f) {
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    fd[0] = *f;
    t->float_data = fd;
    t->n_float_data = 1;
  } else {
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    dims[0] = (int64_t)n;
    t->dims = dims;
    t->n_dims = 1;
    if (n) memcpy(data, v, n * sizeof *data);
    t->int64_data = data;
    t->n_int64_data = n;
  }
  onnx__attribute_proto__init(a);
  a->name = "value";
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  a->t = t;
  np->attribute[np->n_attribute++] = a;
  return emit(ad, np);
}

/* An INTS attribute's values, or an error naming it (required). */
static sc_status ints_attr(adapter *ad, const Onnx__NodeProto *np, const char *name,
                           bool required, const int64_t **v, size_t *n) {
  const Onnx__AttributeProto *a = attr(np, name);
  *v = NULL;
  *n = 0;
  if (!a) return required ? sc_onnx_error(ad->c, SC_ERR_INVALID, "%s (opset < %s) needs "
                                          "attribute '%s'", np->op_type,
                                          strcmp(np->op_type, "Slice") == 0 ? "10" : "11", name)
                          : SC_OK;
  *v = a->ints;
  *n = a->n_ints;
  return SC_OK;
}

/* ---- the adapters ---- */

static sc_status softmax(adapter *ad, const Onnx__NodeProto *np) {
  if (np->n_input != 1 || np->n_output != 1) return emit(ad, (Onnx__NodeProto *)np);
  const Onnx__AttributeProto *ax = attr(np, "axis");
  int64_t axis = ax ? ax->i : 1;
  const char *b = base_name(ad, np);
  const char *x = np->input[0], *y = np->output[0];
  const char *shape = sc_arena_printf(A(ad), "%s/shape", b);
  const char *flat = sc_arena_printf(A(ad), "%s/flat", b);
  const char *soft = sc_arena_printf(A(ad), "%s/2d", b);
  Onnx__NodeProto *s = node(ad, "Shape", sc_arena_printf(A(ad), "%s/shape", b), &x, 1, &shape, 1, 0);
  Onnx__NodeProto *f = node(ad, "Flatten", sc_arena_printf(A(ad), "%s/flatten", b), &x, 1, &flat,
                            1, 1);
  Onnx__NodeProto *m = node(ad, np->op_type, b, &flat, 1, &soft, 1, 1);
  const char *rin[2] = {soft, shape};
  Onnx__NodeProto *r = node(ad, "Reshape", sc_arena_printf(A(ad), "%s/reshape", b), rin, 2, &y,
                            1, 0);
  Onnx__AttributeProto *fa = int_attr(ad, "axis", axis), *ma = int_attr(ad, "axis", 1);
  if (!shape || !flat || !soft || !s || !f || !m || !r || !fa || !ma) return nomem(ad);
  f->attribute[f->n_attribute++] = fa;
  m->attribute[m->n_attribute++] = ma;
  sc_status st = emit(ad, s);
  if (st == SC_OK) st = emit(ad, f);
  if (st == SC_OK) st = emit(ad, m);
  return st == SC_OK ? emit(ad, r) : st;
}

static sc_status slice(adapter *ad, const Onnx__NodeProto *np) {
  const int64_t *v[3];
  size_t n[3];
  static const char *const names[3] = {"starts", "ends", "axes"};
  sc_status st = SC_OK;
  for (int k = 0; k < 3 && st == SC_OK; k++)
    st = ints_attr(ad, np, names[k], k < 2, &v[k], &n[k]);
  if (st != SC_OK) return st;
  if (np->n_input != 1 || np->n_output != 1)
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "Slice (opset < 10) takes one input");
  const char *b = base_name(ad, np), *in[4] = {np->input[0]};
  size_t n_in = v[2] ? 4 : 3;
  for (size_t k = 0; k + 1 < n_in; k++) {
    if (!(in[k + 1] = sc_arena_printf(A(ad), "%s/%s", b, names[k]))) return nomem(ad);
    if ((st = constant(ad, in[k + 1], v[k], n[k], NULL)) != SC_OK) return st;
  }
  const char *out = np->output[0];
  Onnx__NodeProto *s = node(ad, "Slice", b, in, n_in, &out, 1, 0);
  return s ? emit(ad, s) : nomem(ad);
}

static sc_status pad(adapter *ad, const Onnx__NodeProto *np) {
  const int64_t *pads;
  size_t n;
  sc_status st = ints_attr(ad, np, "pads", true, &pads, &n);
  if (st != SC_OK) return st;
  if (np->n_input != 1 || np->n_output != 1)
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "Pad (opset < 11) takes one input");
  const Onnx__AttributeProto *mode = attr(np, "mode"), *value = attr(np, "value");
  float fv = value ? value->f : 0.0f;
  const char *b = base_name(ad, np), *in[3] = {np->input[0]};
  size_t n_in = fv != 0.0f ? 3 : 2;
  if (!(in[1] = sc_arena_printf(A(ad), "%s/pads", b))) return nomem(ad);
  if ((st = constant(ad, in[1], pads, n, NULL)) != SC_OK) return st;
  if (n_in == 3 && (!(in[2] = sc_arena_printf(A(ad), "%s/value", b)) ||
                    (st = constant(ad, in[2], NULL, 0, &fv)) != SC_OK))
    return st != SC_OK ? st : nomem(ad);
  const char *out = np->output[0];
  Onnx__NodeProto *p = node(ad, "Pad", b, in, n_in, &out, 1, 1);
  if (!p) return nomem(ad);
  if (mode) p->attribute[p->n_attribute++] = (Onnx__AttributeProto *)mode;
  return emit(ad, p);
}

static sc_status batch_norm(adapter *ad, const Onnx__NodeProto *np) {
  const Onnx__AttributeProto *sp = attr(np, "spatial");
  if (!sp) return emit(ad, (Onnx__NodeProto *)np);
  if (sp->i == 0)
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED,
                         "BatchNormalization with spatial = 0 (opset < 9: statistics per "
                         "element) is not supported");
  Onnx__NodeProto *cp = sc_arena_array(A(ad), 1, sizeof *cp);
  Onnx__AttributeProto **at = sc_arena_array(A(ad), np->n_attribute + 1, sizeof *at);
  if (!cp || !at) return nomem(ad);
  *cp = *np;
  cp->attribute = at;
  cp->n_attribute = 0;
  for (size_t k = 0; k < np->n_attribute; k++)
    if (np->attribute[k] != sp) at[cp->n_attribute++] = np->attribute[k];
  return emit(ad, cp);
}

typedef sc_status (*adapt_fn)(adapter *ad, const Onnx__NodeProto *np);
static const struct {
  const char *op;
  int64_t before; /* the opset from which the op means what the IR means */
  adapt_fn fn;
} ADAPTERS[] = {
    {"Softmax", 13, softmax},
    {"LogSoftmax", 13, softmax},
    {"Slice", 10, slice},
    {"Pad", 11, pad},
    {"BatchNormalization", 9, batch_norm},
};

static adapt_fn adapter_of(const Onnx__NodeProto *np, int64_t opset) {
  if (!np || !np->op_type || (np->domain && np->domain[0] && strcmp(np->domain, "ai.onnx") != 0))
    return NULL;
  for (size_t k = 0; k < sizeof ADAPTERS / sizeof *ADAPTERS; k++)
    if (opset < ADAPTERS[k].before && strcmp(np->op_type, ADAPTERS[k].op) == 0)
      return ADAPTERS[k].fn;
  return NULL;
}

sc_status sc_onnx_adapt_opset(sc_onnx_ctx *c, int64_t opset, const Onnx__GraphProto **gp) {
  const Onnx__GraphProto *g0 = *gp;
  bool any = false;
  for (size_t i = 0; i < g0->n_node && !any; i++) any = adapter_of(g0->node[i], opset) != NULL;
  if (!any) return SC_OK;
  adapter ad = {.c = c};
  sc_status st = SC_OK;
  for (size_t i = 0; i < g0->n_node && st == SC_OK; i++) {
    Onnx__NodeProto *np = g0->node[i];
    adapt_fn fn = adapter_of(np, opset);
    ad.index = i;
    if (!fn) {
      st = emit(&ad, np);
      continue;
    }
    c->cur_node = np->name && np->name[0] ? np->name : NULL;
    c->cur_op = np->op_type;
    st = fn(&ad, np);
  }
  return sc_onnx_nodes_finish(c, &ad.out, st, gp);
}
