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
 *   Softmax, LogSoftmax, Hardmax (< 13)  coerced the input to 2-D around `axis`
 *       (default 1): Y = Reshape(Softmax(Flatten(X, axis), axis = 1),
 *       Shape(X)); Flatten and Reshape are views, and the result equals
 *       the per-axis form when axis is the last one;
 *   Slice (< 10)      starts, ends, axes attributes → int64 inputs;
 *   Pad (< 11)        pads attribute → an int64 input, value (non-zero) →
 *       a float scalar input (the data's dtype must then be float32);
 *   BatchNormalization (< 9)  `spatial` = 0 (per-element statistics) is
 *       refused; otherwise the attribute is dropped;
 *   Upsample (< 10; scales an attribute at 7, an input at 9), Resize (< 11;
 *       X and scales)  → Resize(X, "", scales) with the asymmetric
 *       coordinates and the floor nearest rounding they had;
 *   Scatter (9, 10)   → ScatterElements, its later name (the same op; the
 *       table's row accepts it from opset 9 for that).
 *
 * The same mechanism reads onnxruntime's com.microsoft ops, which exports
 * optimised by its transformer tools contain, as IR ops (their semantics
 * are onnxruntime's contrib op definitions):
 *   Gelu, BiasGelu(A, B)   0.5 x (1 + erf(x / sqrt 2)), x = A (+ B);
 *   FastGelu(X[, bias])    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
 *   QuickGelu(X; alpha)    x sigmoid(alpha x), alpha 1.702 by default;
 *   FusedMatMul(A, B; alpha, transA, transB)  alpha op(A) @ op(B); a
 *       transposed operand must be a graph input or initializer (its rank
 *       is needed for the permutation); transBatchA/B are refused;
 *   SkipLayerNormalization, SkipSimplifiedLayerNormalization,
 *   SimplifiedLayerNormalization (the last also in the default domain,
 *       where onnxruntime registers it): over the last axis, of input +
 *       skip (+ bias; output 3 is that sum), LayerNormalization from opset
 *       17, its decomposition before, and the RMS form x / sqrt(mean(x^2)
 *       + eps) * gamma; the mean and inverse-deviation outputs are refused.
 *   MultiHeadAttention (separate Q, K, V; bias, a [B, T] key_padding_mask,
 *       attention_bias, past_key/value), Attention (the packed projection
 *       weights, split by qkv_hidden_sizes or in three; a [B, T] mask_index,
 *       attention_bias; no past), RotaryEmbedding (inputs reordered): the
 *       default domain's Attention and RotaryEmbedding, composite ops of
 *       the IR (passes/composite.c); masks become onnxruntime's additive
 *       mask_filter_value; EmbedLayerNormalization's [B] mask_index (the
 *       count of ones per row) masks the keys from that count on;
 *   EmbedLayerNormalization  Gathers of the word, position and segment
 *       embeddings, their sum and LayerNormalization; mask_index as above.
 *   MoE (mixture of experts: softmax of the router logits, top k,
 *       each expert's two projections and activation, the weighted sum)
 *       computed densely, every expert on every row (ms_moe);
 * And ONNX's preview domains' FlexAttention (ai.onnx.preview) and
 * Momentum, Adagrad, Adam (ai.onnx.preview.training), and ai.onnx.ml's
 * Binarizer and ArrayFeatureExtractor, composite ops of the IR's table:
 * read as they are, in the default domain.
 * Softmax before 13 over the last axis of an input whose rank is known (a
 * graph input, an initializer, Flatten's output) means what it means from
 * 13 and is kept as it is: so the export of an adapted graph, read again,
 * is not adapted twice.
 * Their scalar constants take the data's dtype through CastLike from opset
 * 15 (float32 before).
 * Made nodes and values are named after the node ("N/flatten",
 * "N/starts", "N/3"); constants are Constant nodes (typed int64/float
 * data). All of it lives in the graph's arena, like the inliner's
 * (onnx_functions.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "frontend_internal.h"

typedef struct adapter {
  sc_onnx_ctx *c;
  const Onnx__GraphProto *graph;
  int64_t opset;
  sc_onnx_nodes out;
  size_t index; /* of the node being adapted, for generated names */
  int tmp;      /* values made for the node so far */
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

/* A new attribute `name` of `type`, its value still unset. */
static Onnx__AttributeProto *new_attr(adapter *ad, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = sc_arena_array(A(ad), 1, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  return a;
}

static Onnx__AttributeProto *int_attr(adapter *ad, const char *name, int64_t v) {
  Onnx__AttributeProto *a = new_attr(ad, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
  return a;
}

/* An INTS attribute `name` = v[n] (copied). */
static Onnx__AttributeProto *ints_attribute(adapter *ad, const char *name, const int64_t *v,
                                            size_t n) {
  Onnx__AttributeProto *a = new_attr(ad, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *c = sc_arena_array(A(ad), n + 1, sizeof *c);
  if (!a || !c) return NULL;
  memcpy(c, v, n * sizeof *c);
  a->ints = c;
  a->n_ints = n;
  return a;
}

static Onnx__AttributeProto *str_attr(adapter *ad, const char *name, const char *v) {
  Onnx__AttributeProto *a = new_attr(ad, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (a) a->has_s = 1, a->s.data = (uint8_t *)v, a->s.len = strlen(v);
  return a;
}

/* A Constant node whose output `value` is the int64 vector v[n] (or, with
 * f, the float vector f[n], or the float scalar *f when n is 0). */
static sc_status constant(adapter *ad, const char *value, const int64_t *v, size_t n,
                          const float *f) {
  Onnx__TensorProto *t = sc_arena_array(A(ad), 1, sizeof *t);
  Onnx__AttributeProto *a = new_attr(ad, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  int64_t *dims = sc_arena_array(A(ad), 1, sizeof *dims);
  int64_t *data = sc_arena_array(A(ad), n + 1, sizeof *data);
  float *fd = sc_arena_array(A(ad), n + 1, sizeof *fd);
  const char *name = sc_arena_printf(A(ad), "%s/const", value);
  Onnx__NodeProto *np = node(ad, "Constant", name, NULL, 0, &value, 1, 1);
  if (!t || !a || !dims || !data || !fd || !np) return nomem(ad);
  onnx__tensor_proto__init(t);
  t->has_data_type = 1;
  if (f) {
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    memcpy(fd, f, (n ? n : 1) * sizeof *fd);
    t->float_data = fd;
    t->n_float_data = n ? n : 1;
    if (n) {
      dims[0] = (int64_t)n;
      t->dims = dims;
      t->n_dims = 1;
    }
  } else {
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    dims[0] = (int64_t)n;
    t->dims = dims;
    t->n_dims = 1;
    if (n) memcpy(data, v, n * sizeof *data);
    t->int64_data = data;
    t->n_int64_data = n;
  }
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

/* The rank of a graph input or initializer named x, or of an output whose
 * rank its op fixes (Flatten's: 2; EmbedLayerNormalization's mask_index:
 * [batch]), or -1. */
static int rank_of(const adapter *ad, const char *x) {
  const Onnx__GraphProto *g = ad->graph;
  for (size_t k = 0; k < g->n_node; k++) {
    const Onnx__NodeProto *np = g->node[k];
    if (np && np->op_type && strcmp(np->op_type, "Flatten") == 0 &&
        sc_onnx_default_domain(np->domain) && np->n_output == 1 && np->output[0] &&
        strcmp(np->output[0], x) == 0)
      return 2;
    if (np && np->op_type && strcmp(np->op_type, "EmbedLayerNormalization") == 0 &&
        np->domain && strcmp(np->domain, "com.microsoft") == 0 && np->n_output > 1 &&
        np->output[1] && strcmp(np->output[1], x) == 0)
      return 1;
  }
  for (size_t k = 0; k < g->n_initializer; k++)
    if (g->initializer[k] && g->initializer[k]->name && strcmp(g->initializer[k]->name, x) == 0)
      return (int)g->initializer[k]->n_dims;
  for (size_t k = 0; k < g->n_input; k++) {
    const Onnx__ValueInfoProto *v = g->input[k];
    if (v && v->name && strcmp(v->name, x) == 0 && v->type && v->type->tensor_type &&
        v->type->tensor_type->shape)
      return (int)v->type->tensor_type->shape->n_dim;
  }
  return -1;
}

/* ---- the adapters ---- */

static sc_status softmax(adapter *ad, const Onnx__NodeProto *np) {
  if (np->n_input != 1 || np->n_output != 1) return emit(ad, (Onnx__NodeProto *)np);
  const Onnx__AttributeProto *ax = attr(np, "axis");
  int64_t axis = ax ? ax->i : 1;
  int rank = rank_of(ad, np->input[0]);
  if (rank > 0 && (axis == rank - 1 || axis == -1)) /* the last axis: both meanings agree */
    return emit(ad, (Onnx__NodeProto *)np);   /* (an absent axis, 1, is read as -1) */
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

/* Upsample (opset 7: scales an attribute; 9: input 1) and Resize-10 (X,
 * scales) become Resize(X, "", scales): both scaled with the asymmetric
 * coordinates (x / scale) and, in nearest mode, took the element at the
 * floor, so those are the attributes set. */
static sc_status upsample(adapter *ad, const Onnx__NodeProto *np) {
  if (np->n_input < 1 || np->n_output != 1)
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "%s takes X and scales", np->op_type);
  const char *b = base_name(ad, np), *in[3] = {np->input[0], "", NULL};
  sc_status st;
  if (np->n_input >= 2 && np->input[1] && np->input[1][0]) {
    in[2] = np->input[1];
  } else {
    const Onnx__AttributeProto *sc = attr(np, "scales");
    if (!sc || sc->n_floats == 0)
      return sc_onnx_error(ad->c, SC_ERR_INVALID, "%s without scales", np->op_type);
    if (!(in[2] = sc_arena_printf(A(ad), "%s/scales", b))) return nomem(ad);
    if ((st = constant(ad, in[2], NULL, sc->n_floats, sc->floats)) != SC_OK) return st;
  }
  const Onnx__AttributeProto *mode = attr(np, "mode");
  const char *out = np->output[0];
  Onnx__NodeProto *r = node(ad, "Resize", b, in, 3, &out, 1, 3);
  Onnx__AttributeProto *ct = str_attr(ad, "coordinate_transformation_mode", "asymmetric");
  Onnx__AttributeProto *nm = str_attr(ad, "nearest_mode", "floor");
  if (!r || !ct || !nm) return nomem(ad);
  r->attribute[r->n_attribute++] = ct;
  r->attribute[r->n_attribute++] = nm;
  if (mode) r->attribute[r->n_attribute++] = (Onnx__AttributeProto *)mode;
  return emit(ad, r);
}

/* Scatter (opsets 9 and 10) is ScatterElements under its former name: the
 * same node, renamed. */
static sc_status scatter(adapter *ad, const Onnx__NodeProto *np) {
  Onnx__NodeProto *cp = sc_arena_array(A(ad), 1, sizeof *cp);
  if (!cp) return nomem(ad);
  *cp = *np;
  cp->op_type = "ScatterElements";
  return emit(ad, cp);
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

/* ---- com.microsoft ops (onnxruntime's contrib ops), in IR ops ---- */

/* Names of the values a contrib expansion makes: "<node>/<k>". */
static const char *tmp_name(adapter *ad, const char *b) {
  return sc_arena_printf(A(ad), "%s/%d", b, ad->tmp++);
}

/* out = op(a[, b]) as a new node; out NULL: a fresh name. */
/* out = op(in[0..n_in)) as a new node "<b>/<op>_<k>", with attribute a
 * when given; out NULL: a fresh name. NULL when an input is NULL (a step
 * before failed) or on no memory. */
static const char *opn(adapter *ad, const char *b, const char *op, const char **in, size_t n_in,
                       const char *out, Onnx__AttributeProto *a) {
  for (size_t k = 0; k < n_in; k++)
    if (!in[k]) return NULL;
  const char *o = out ? out : tmp_name(ad, b);
  Onnx__NodeProto *np = o ? node(ad, op, sc_arena_printf(A(ad), "%s/%s_%d", b, op, ad->tmp++),
                                 in, n_in, &o, 1, 1)
                          : NULL;
  if (!np) return NULL;
  if (a) np->attribute[np->n_attribute++] = a;
  return emit(ad, np) == SC_OK ? o : NULL;
}

/* out = op(x[, y]) as a new node; out NULL: a fresh name. */
static const char *op2(adapter *ad, const char *b, const char *op, const char *x, const char *y,
                       const char *out) {
  const char *in[2] = {x, y};
  return opn(ad, b, op, in, y ? 2 : 1, out, NULL);
}

/* Cast(x, to) as a new node. */
static const char *cast(adapter *ad, const char *b, const char *x, int64_t to) {
  Onnx__AttributeProto *a = int_attr(ad, "to", to);
  return a ? opn(ad, b, "Cast", &x, 1, NULL, a) : NULL;
}

/* An int64 constant: the vector v[n], or with n = 0 the scalar *v. */
static const char *int_const(adapter *ad, const char *b, const int64_t *v, size_t n) {
  const char *c = tmp_name(ad, b);
  if (!c || constant(ad, c, v, n ? n : 1, NULL) != SC_OK) return NULL;
  return n ? c : op2(ad, b, "Squeeze", c, NULL, NULL);
}

/* A float scalar constant in X's dtype (CastLike from opset 15; before,
 * float32). */
static const char *scalar(adapter *ad, const char *b, float v, const char *like) {
  const char *c = tmp_name(ad, b);
  if (!c || constant(ad, c, NULL, 0, &v) != SC_OK) return NULL;
  return ad->opset >= 15 ? op2(ad, b, "CastLike", c, like, NULL) : c;
}

/* A node with an INTS attribute `name` = v[n] (ReduceMean's axes). */
static const char *reduce_mean_last(adapter *ad, const char *b, const char *x) {
  const char *o = tmp_name(ad, b);
  Onnx__NodeProto *np = o ? node(ad, "ReduceMean", sc_arena_printf(A(ad), "%s/mean_%d", b,
                                                                   ad->tmp++), &x, 1, &o, 1, 2)
                          : NULL;
  Onnx__AttributeProto *axes = ints_attribute(ad, "axes", (const int64_t[]){-1}, 1);
  Onnx__AttributeProto *keep = int_attr(ad, "keepdims", 1);
  if (!np || !axes || !keep) return NULL;
  np->attribute[np->n_attribute++] = axes;
  np->attribute[np->n_attribute++] = keep;
  return emit(ad, np) == SC_OK ? o : NULL;
}

static float float_attr(const Onnx__NodeProto *np, const char *name, float dflt) {
  const Onnx__AttributeProto *a = attr(np, name);
  return a ? a->f : dflt;
}

static const char *input(const Onnx__NodeProto *np, size_t i) {
  return i < np->n_input && np->input[i] && np->input[i][0] ? np->input[i] : NULL;
}
static const char *output(const Onnx__NodeProto *np, size_t i) {
  return i < np->n_output && np->output[i] && np->output[i][0] ? np->output[i] : NULL;
}

/* 0.5 x (1 + erf(x / sqrt 2)) into out. */
static const char *gelu_erf(adapter *ad, const char *b, const char *x, const char *out) {
  const char *r2 = scalar(ad, b, 1.41421356237f, x), *h = scalar(ad, b, 0.5f, x);
  const char *one = scalar(ad, b, 1.0f, x);
  const char *e = op2(ad, b, "Erf", op2(ad, b, "Div", x, r2, NULL), NULL, NULL);
  const char *hx = op2(ad, b, "Mul", x, h, NULL);
  return op2(ad, b, "Mul", hx, op2(ad, b, "Add", e, one, NULL), out);
}

/* Input 0 plus the optional input i (a bias), or input 0. */
static const char *with_bias(adapter *ad, const char *b, const Onnx__NodeProto *np, size_t i) {
  return input(np, i) ? op2(ad, b, "Add", np->input[0], np->input[i], NULL) : np->input[0];
}

static sc_status contrib_done(adapter *ad, const char *last) {
  return last ? SC_OK : (ad->c->diag->status ? ad->c->diag->status : nomem(ad));
}

static sc_status need_io(adapter *ad, const Onnx__NodeProto *np, size_t min_in, size_t max_out) {
  if (np->n_input < min_in || !input(np, 0) || !output(np, 0))
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "%s needs %zu inputs and an output",
                         np->op_type, min_in);
  for (size_t k = 1; k < np->n_output; k++)
    if (output(np, k) && k >= max_out)
      return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "%s's output %zu ('%s') is not supported",
                           np->op_type, k, np->output[k]);
  return SC_OK;
}

/* Gelu (com.microsoft): the erf form; BiasGelu: of A + B. */
static sc_status ms_gelu(adapter *ad, const Onnx__NodeProto *np) {
  bool bias = strcmp(np->op_type, "BiasGelu") == 0;
  sc_status st = need_io(ad, np, bias ? 2 : 1, 1);
  if (st != SC_OK) return st;
  const char *b = base_name(ad, np);
  return contrib_done(ad, gelu_erf(ad, b, bias ? with_bias(ad, b, np, 1) : np->input[0],
                                   np->output[0]));
}

/* FastGelu(X[, bias]): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static sc_status ms_fast_gelu(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 1, 1);
  if (st != SC_OK) return st;
  const char *b = base_name(ad, np), *x = with_bias(ad, b, np, 1);
  const char *x3 = op2(ad, b, "Mul", op2(ad, b, "Mul", x, x, NULL), x, NULL);
  const char *in = op2(ad, b, "Add", x, op2(ad, b, "Mul", x3, scalar(ad, b, 0.044715f, x), NULL),
                       NULL);
  const char *t = op2(ad, b, "Tanh", op2(ad, b, "Mul", in, scalar(ad, b, 0.7978845608f, x), NULL),
                      NULL, NULL);
  const char *hx = op2(ad, b, "Mul", x, scalar(ad, b, 0.5f, x), NULL);
  return contrib_done(ad, op2(ad, b, "Mul", hx, op2(ad, b, "Add", t, scalar(ad, b, 1.0f, x), NULL),
                              np->output[0]));
}

/* QuickGelu(X; alpha = 1.702) = x sigmoid(alpha x). */
static sc_status ms_quick_gelu(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 1, 1);
  if (st != SC_OK) return st;
  const char *b = base_name(ad, np), *x = np->input[0];
  const char *ax = op2(ad, b, "Mul", x, scalar(ad, b, float_attr(np, "alpha", 1.702f), x), NULL);
  return contrib_done(ad, op2(ad, b, "Mul", x, op2(ad, b, "Sigmoid", ax, NULL, NULL),
                              np->output[0]));
}

/* x with its last two dims swapped (its rank known from the graph). */
static const char *swap_last(adapter *ad, const char *b, const Onnx__NodeProto *np, const char *x) {
  int r = rank_of(ad, x);
  if (r < 2) {
    sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED,
                  "%s transposes '%s', whose rank is not known before shape inference (only a "
                  "graph input or initializer)", np->op_type, x);
    return NULL;
  }
  const char *o = tmp_name(ad, b);
  Onnx__NodeProto *t = o ? node(ad, "Transpose", sc_arena_printf(A(ad), "%s/T_%d", b, ad->tmp++),
                                &x, 1, &o, 1, 1)
                         : NULL;
  int64_t v[SC_MAX_RANK];
  if (r > SC_MAX_RANK) {
    sc_onnx_error(ad->c, SC_ERR_LIMIT, "%s: '%s' has rank %d (at most %d)", np->op_type, x, r,
                  SC_MAX_RANK);
    return NULL;
  }
  for (int k = 0; k < r; k++) v[k] = k;
  v[r - 2] = r - 1;
  v[r - 1] = r - 2;
  Onnx__AttributeProto *perm = ints_attribute(ad, "perm", v, (size_t)r);
  if (!t || !perm) return NULL;
  t->attribute[t->n_attribute++] = perm;
  return emit(ad, t) == SC_OK ? o : NULL;
}

/* FusedMatMul(A, B; alpha, transA, transB) = alpha op(A) @ op(B). */
static sc_status ms_fused_matmul(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 2, 1);
  if (st != SC_OK) return st;
  const Onnx__AttributeProto *ta = attr(np, "transA"), *tb = attr(np, "transB");
  const Onnx__AttributeProto *bA = attr(np, "transBatchA"), *bB = attr(np, "transBatchB");
  if ((bA && bA->i) || (bB && bB->i))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "FusedMatMul with transBatchA/B is not "
                         "supported");
  const char *b = base_name(ad, np), *x = np->input[0], *y = np->input[1];
  if (ta && ta->i && !(x = swap_last(ad, b, np, x))) return contrib_done(ad, NULL);
  if (tb && tb->i && !(y = swap_last(ad, b, np, y))) return contrib_done(ad, NULL);
  float alpha = float_attr(np, "alpha", 1.0f);
  if (alpha == 1.0f) return contrib_done(ad, op2(ad, b, "MatMul", x, y, np->output[0]));
  const char *p = op2(ad, b, "MatMul", x, y, NULL);
  return contrib_done(ad, op2(ad, b, "Mul", p, scalar(ad, b, alpha, p), np->output[0]));
}

/* y = LayerNormalization(x, gamma[, beta]; epsilon) over the last axis
 * (opset 17's op, its decomposition before), or with rms the simplified
 * form x / sqrt(mean(x^2) + eps) * gamma. Returns y, NULL on an error. */
static const char *layer_norm(adapter *ad, const char *b, const char *x, const char *gamma,
                              const char *beta, bool rms, float eps, const char *y) {
  if (!x) return NULL;
  if (!rms && ad->opset >= 17) {
    const char *in[3] = {x, gamma, beta};
    Onnx__NodeProto *ln = node(ad, "LayerNormalization", b, in, beta ? 3 : 2, &y, 1, 2);
    Onnx__AttributeProto *ax = int_attr(ad, "axis", -1), *ep = sc_arena_array(A(ad), 1, sizeof *ep);
    if (!ln || !ax || !ep) return NULL;
    onnx__attribute_proto__init(ep);
    ep->name = "epsilon";
    ep->has_type = 1;
    ep->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    ep->has_f = 1;
    ep->f = eps;
    ln->attribute[ln->n_attribute++] = ax;
    ln->attribute[ln->n_attribute++] = ep;
    return emit(ad, ln) == SC_OK ? y : NULL;
  }
  const char *d = rms ? x : op2(ad, b, "Sub", x, reduce_mean_last(ad, b, x), NULL);
  const char *var = reduce_mean_last(ad, b, op2(ad, b, "Mul", d, d, NULL));
  const char *den = op2(ad, b, "Sqrt", op2(ad, b, "Add", var, scalar(ad, b, eps, x), NULL), NULL,
                        NULL);
  const char *n = op2(ad, b, "Mul", op2(ad, b, "Div", d, den, NULL), gamma, beta ? NULL : y);
  return beta ? op2(ad, b, "Add", n, beta, y) : n;
}

/* (Skip)(Simplified)LayerNormalization over the last axis: S = input +
 * skip (+ bias) for the Skip forms (output 3 is S); LayerNormalization
 * (opset 17) or its decomposition; the simplified (RMS) form X /
 * sqrt(mean(X^2) + eps) * gamma. */
static sc_status ms_layer_norm(adapter *ad, const Onnx__NodeProto *np) {
  bool skip = strncmp(np->op_type, "Skip", 4) == 0;
  bool rms = strstr(np->op_type, "Simplified") != NULL;
  sc_status st = need_io(ad, np, skip ? 3 : 2, skip ? 4 : 1);
  if (st != SC_OK) return st;
  if (skip && output(np, 1)) return need_io(ad, np, 3, 1);
  if (skip && output(np, 2)) return need_io(ad, np, 3, 2);
  const Onnx__AttributeProto *axis = attr(np, "axis");
  if (axis && axis->i != -1)
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "%s over axis %lld (only the last)",
                         np->op_type, (long long)axis->i);
  const char *b = base_name(ad, np), *x = np->input[0];
  /* inputs: Skip*: input, skip, gamma, beta (LN) / bias; LN: bias at 4 */
  const char *gamma = skip ? np->input[2] : np->input[1];
  const char *beta = rms ? NULL : input(np, skip ? 3 : 2);
  const char *bias = skip ? input(np, rms ? 3 : 4) : NULL;
  float eps = float_attr(np, "epsilon", skip ? 1e-12f : 1e-5f);
  if (skip) {
    const char *s = op2(ad, b, "Add", x, np->input[1], bias ? NULL : output(np, 3));
    x = bias ? op2(ad, b, "Add", s, bias, output(np, 3)) : s;
    if (!x) return contrib_done(ad, NULL);
  }
  return contrib_done(ad, layer_norm(ad, b, x, gamma, beta, rms, eps, np->output[0]));
}

/* EmbedLayerNormalization(input_ids, segment_ids, word_embedding,
 * position_embedding, segment_embedding, gamma, beta[, mask, position_ids])
 * -> output, mask_index, embedding_sum: S = word[ids] + position[pos] (+
 * segment[segment_ids]), pos = position_ids or 0..S-1; output =
 * LayerNormalization(S) (epsilon); mask_index[b] = the count of mask[b, :]
 * equal to 1 (int32, as onnxruntime's kernel counts). */
static sc_status ms_embed_layer_norm(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 7, 3);
  if (st != SC_OK) return st;
  if (!input(np, 2) || !input(np, 3) || !input(np, 5))
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "EmbedLayerNormalization needs the word and "
                         "position embeddings and gamma (inputs 2, 3, 5)");
  if (output(np, 1) && !input(np, 7))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "EmbedLayerNormalization's mask_index "
                         "without a mask (input 7) is not supported");
  const char *b = base_name(ad, np), *ids = np->input[0];
  const int64_t zero = 0, one = 1;
  const char *pos;
  if (input(np, 8)) {
    pos = op2(ad, b, "Gather", np->input[3], np->input[8], NULL);
  } else { /* position_embedding[0 : S] */
    const char *s = op2(ad, b, "Gather", op2(ad, b, "Shape", ids, NULL, NULL),
                        int_const(ad, b, &one, 1), NULL);
    const char *in[4] = {np->input[3], int_const(ad, b, &zero, 1), s, int_const(ad, b, &zero, 1)};
    pos = opn(ad, b, "Slice", in, 4, NULL, NULL);
  }
  const char *sum = op2(ad, b, "Add", op2(ad, b, "Gather", np->input[2], ids, NULL), pos,
                        NULL);
  bool seg = input(np, 1) && input(np, 4);
  if (seg) sum = op2(ad, b, "Add", sum, op2(ad, b, "Gather", np->input[4], np->input[1], NULL),
                     output(np, 2));
  else if (sum && output(np, 2)) sum = op2(ad, b, "Identity", sum, NULL, np->output[2]);
  if (!layer_norm(ad, b, sum, np->input[5], input(np, 6), false,
                  float_attr(np, "epsilon", 1e-12f), np->output[0]))
    return contrib_done(ad, NULL);
  if (!output(np, 1)) return SC_OK;
  const char *ones = cast(ad, b, op2(ad, b, "Equal", np->input[7],
                                     cast(ad, b, int_const(ad, b, &one, 0),
                                          ONNX__TENSOR_PROTO__DATA_TYPE__INT32), NULL),
                          ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
  const char *in[2] = {ones, int_const(ad, b, &one, 1)};
  Onnx__AttributeProto *keep = int_attr(ad, "keepdims", 0);
  return contrib_done(ad, keep ? opn(ad, b, "ReduceSum", in, 2, np->output[1], keep) : NULL);
}

/* The attention family, onto the default domain's Attention (a composite
 * op, passes/composite.c) with q_num_heads = kv_num_heads = num_heads,
 * is_causal = unidirectional and the scale; onnxruntime's masks become the
 * float mask it adds: mask_filter_value (-10000) where a key-padding /
 * raw mask is 0, plus attention_bias. */

/* An attribute of np copied under another name (NULL when absent). */
static Onnx__AttributeProto *renamed(adapter *ad, const Onnx__NodeProto *np, const char *from,
                                     const char *to) {
  const Onnx__AttributeProto *a = attr(np, from);
  if (!a) return NULL;
  Onnx__AttributeProto *b = sc_arena_array(A(ad), 1, sizeof *b);
  if (b) {
    *b = *a;
    b->name = (char *)to;
  }
  return b;
}

static sc_status refuse_input(adapter *ad, const Onnx__NodeProto *np, size_t i, const char *why) {
  return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "%s's input %zu ('%s'): %s", np->op_type, i,
                       np->input[i], why);
}

/* keep[b, j] = j < len[b] ([B, T] bool) from onnxruntime's 1-D mask_index
 * [B] (right padding: the valid keys' count per row); T is dim 1 of keys. */
static const char *mask_from_lengths(adapter *ad, const char *b, const char *len,
                                     const char *keys) {
  const int64_t zero = 0, one = 1, axis1 = 1;
  const char *t = op2(ad, b, "Squeeze",
                      op2(ad, b, "Gather", op2(ad, b, "Shape", keys, NULL, NULL),
                          int_const(ad, b, &axis1, 1), NULL),
                      NULL, NULL);
  const char *in[3] = {int_const(ad, b, &zero, 0), t, int_const(ad, b, &one, 0)};
  const char *r = opn(ad, b, "Range", in, 3, NULL, NULL);
  const char *l = op2(ad, b, "Unsqueeze", cast(ad, b, len, ONNX__TENSOR_PROTO__DATA_TYPE__INT64),
                      int_const(ad, b, &axis1, 1), NULL); /* [B, 1] */
  return op2(ad, b, "Less", r, l, NULL);
}

/* The float mask from a key mask at input `mi` — [B, T] (0: masked), or
 * EmbedLayerNormalization's mask_index [B] (the valid keys' count) — and
 * an additive attention_bias at input `bi`, or NULL when neither is given.
 * `keys` holds the keys ([B, T, ...]). */
static const char *ms_mask(adapter *ad, const char *b, const Onnx__NodeProto *np, size_t mi,
                           size_t bi, const char *like, const char *keys, sc_status *st) {
  const char *m = NULL, *bias = input(np, bi);
  if (input(np, mi)) {
    int rank = rank_of(ad, np->input[mi]);
    if (rank != 2 && rank != 1) {
      *st = refuse_input(ad, np, mi, "only a [batch, keys] mask given as a graph input or "
                         "initializer, or EmbedLayerNormalization's mask_index, is supported");
      return NULL;
    }
    const char *keep = rank == 2 ? cast(ad, b, np->input[mi], ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
                                 : mask_from_lengths(ad, b, np->input[mi], keys);
    const char *in[3] = {keep, scalar(ad, b, 0.0f, like),
                         scalar(ad, b, float_attr(np, "mask_filter_value", -10000.0f), like)};
    const int64_t axes[2] = {1, 2};
    m = op2(ad, b, "Unsqueeze", opn(ad, b, "Where", in, 3, NULL, NULL), int_const(ad, b, axes, 2),
            NULL); /* [B, 1, 1, T] */
    if (!m) return NULL;
  }
  if (m && bias) return op2(ad, b, "Add", m, bias, NULL);
  return m ? m : bias;
}

/* Attention(q, k, v, mask, past_key, past_value) -> outputs 0..2 of np. */
static sc_status ms_attention_node(adapter *ad, const char *b, const Onnx__NodeProto *np,
                                   const char *q, const char *k, const char *v,
                                   const char *mask, const char *pk, const char *pv) {
  if (!q || !k || !v) return contrib_done(ad, NULL);
  const char *in[6] = {q, k, v, mask ? mask : "", pk ? pk : "", pv ? pv : ""};
  size_t n_in = pk ? 6 : mask ? 4 : 3;
  const char *out[3] = {np->output[0], output(np, 1) ? np->output[1] : "",
                        output(np, 2) ? np->output[2] : ""};
  size_t n_out = output(np, 2) ? 3 : output(np, 1) ? 2 : 1;
  Onnx__NodeProto *at = node(ad, "Attention", b, in, n_in, out, n_out, 4);
  const Onnx__AttributeProto *h = attr(np, "num_heads");
  if (!at) return nomem(ad);
  if (!h || h->i <= 0)
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "%s needs a positive num_heads", np->op_type);
  Onnx__AttributeProto *qh = int_attr(ad, "q_num_heads", h->i);
  Onnx__AttributeProto *kh = int_attr(ad, "kv_num_heads", h->i);
  if (!qh || !kh) return nomem(ad);
  at->attribute[at->n_attribute++] = qh;
  at->attribute[at->n_attribute++] = kh;
  Onnx__AttributeProto *causal = renamed(ad, np, "unidirectional", "is_causal");
  Onnx__AttributeProto *scale = renamed(ad, np, "scale", "scale");
  if (causal) at->attribute[at->n_attribute++] = causal;
  if (scale) at->attribute[at->n_attribute++] = scale;
  return emit(ad, at);
}

/* q + bias[0], k + bias[1], v + bias[2]: the bias split in three equal
 * parts (or by qkv_hidden_sizes) along its only axis. */
static bool split3(adapter *ad, const char *b, const Onnx__NodeProto *np, const char *x,
                   int64_t axis, const char **parts) {
  const Onnx__AttributeProto *sizes = attr(np, "qkv_hidden_sizes");
  const char *sz = NULL;
  if (sizes) {
    if (sizes->n_ints != 3) {
      sc_onnx_error(ad->c, SC_ERR_INVALID, "qkv_hidden_sizes needs 3 values");
      return false;
    }
    sz = tmp_name(ad, b);
    if (!sz || constant(ad, sz, sizes->ints, 3, NULL) != SC_OK) return false;
  }
  for (int k = 0; k < 3; k++)
    if (!(parts[k] = tmp_name(ad, b))) return false;
  const char *in[2] = {x, sz};
  Onnx__NodeProto *sp = node(ad, "Split", sc_arena_printf(A(ad), "%s/split_%d", b, ad->tmp++),
                             in, sz ? 2 : 1, parts, 3, 1);
  Onnx__AttributeProto *ax = int_attr(ad, "axis", axis);
  if (!sp || !ax) return false;
  sp->attribute[sp->n_attribute++] = ax;
  return emit(ad, sp) == SC_OK;
}

/* MultiHeadAttention(query, key, value[, bias, key_padding_mask,
 * attention_bias, past_key, past_value]): the separate Q, K, V form. */
static sc_status ms_mha(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 1, 3);
  if (st != SC_OK) return st;
  if (!input(np, 1) || !input(np, 2))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MultiHeadAttention with packed QKV or KV "
                         "(no separate key and value) is not supported");
  for (size_t i = 8; i < np->n_input; i++)
    if (input(np, i)) return refuse_input(ad, np, i, "buffer sharing and beam search are not "
                                          "supported");
  const char *b = base_name(ad, np), *q = np->input[0], *k = np->input[1], *v = np->input[2];
  if (input(np, 3)) {
    const char *bias[3];
    if (!split3(ad, b, np, np->input[3], 0, bias)) return contrib_done(ad, NULL);
    q = op2(ad, b, "Add", q, bias[0], NULL);
    k = op2(ad, b, "Add", k, bias[1], NULL);
    v = op2(ad, b, "Add", v, bias[2], NULL);
  }
  st = SC_OK;
  const char *mask = ms_mask(ad, b, np, 4, 5, np->input[0], k, &st);
  if (st != SC_OK) return st;
  if ((input(np, 4) || input(np, 5)) && !mask) return contrib_done(ad, NULL);
  return ms_attention_node(ad, b, np, q, k, v, mask, input(np, 6), input(np, 7));
}

/* Attention(input, weights[, bias, mask_index, past, attention_bias]): Q,
 * K and V from one projection, split by qkv_hidden_sizes or in three. */
static sc_status ms_attention(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 2, 1);
  if (st != SC_OK) return st;
  if (input(np, 4)) return refuse_input(ad, np, 4, "the past state is not supported");
  if (input(np, 6)) return refuse_input(ad, np, 6, "buffer sharing is not supported");
  const Onnx__AttributeProto *rot = attr(np, "do_rotary"), *share = attr(np,
                                                                         "past_present_share_buffer");
  if ((rot && rot->i) || (share && share->i))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "Attention with %s is not supported",
                         rot && rot->i ? "do_rotary" : "past_present_share_buffer");
  const char *b = base_name(ad, np), *qkv[3];
  const char *x = op2(ad, b, "MatMul", np->input[0], np->input[1], NULL);
  if (x && input(np, 2)) x = op2(ad, b, "Add", x, np->input[2], NULL);
  if (!x || !split3(ad, b, np, x, -1, qkv)) return contrib_done(ad, NULL);
  const char *mask = ms_mask(ad, b, np, 3, 5, np->input[0], np->input[0], &st);
  if (st != SC_OK) return st;
  if ((input(np, 3) || input(np, 5)) && !mask) return contrib_done(ad, NULL);
  return ms_attention_node(ad, b, np, qkv[0], qkv[1], qkv[2], mask, NULL, NULL);
}

/* RotaryEmbedding(input, position_ids, cos_cache, sin_cache): the default
 * domain's op, its inputs reordered (position_ids [1] is read there as the
 * first position). */
static sc_status ms_rotary(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 4, 1);
  if (st != SC_OK) return st;
  const Onnx__AttributeProto *packed = attr(np, "is_packed_batching"), *sc = attr(np, "scale");
  if ((packed && packed->i) || (sc && sc->f != 1.0f))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "RotaryEmbedding with %s is not supported",
                         packed && packed->i ? "is_packed_batching" : "a scale other than 1");
  const char *in[4] = {np->input[0], np->input[2], np->input[3], np->input[1]};
  Onnx__NodeProto *r = node(ad, "RotaryEmbedding", base_name(ad, np), in, 4,
                            (const char *[]){np->output[0]}, 1, 3);
  if (!r) return nomem(ad);
  static const char *const keep[] = {"interleaved", "num_heads", "rotary_embedding_dim"};
  for (size_t k = 0; k < 3; k++) {
    Onnx__AttributeProto *a = renamed(ad, np, keep[k], keep[k]);
    if (a) r->attribute[r->n_attribute++] = a;
  }
  return emit(ad, r);
}

/* MoE(input, router_probs, fc1_experts_weights[, fc1_experts_bias],
 * fc2_experts_weights[, fc2_experts_bias]; k, activation_type,
 * normalize_routing_weights, activation_alpha, activation_beta,
 * swiglu_fusion, swiglu_limit): onnxruntime's mixture of experts, as its
 * CPU kernel computes it. X [..., D] is read as T = prod(...) rows;
 * router_probs [T, E] are the router's logits (softmax is taken here);
 * each row goes to its k most probable experts with those probabilities
 * as weights (renormalised to sum 1 with normalize_routing_weights); no
 * capacity, nothing dropped. fc1 [E, F1, D] and fc2 [E, D, F] are
 * (out, in) matrices: h = x fc1[e]ᵀ + b1[e], y += w · (act(h) fc2[e]ᵀ +
 * b2[e]). act: relu, gelu (the tanh form), silu, identity, or swiglu with
 * swiglu_fusion 1 (F1 = 2F interleaved: gate = h[2i], linear = h[2i+1],
 * gate = min(gate, limit), linear = clamp(linear, ±limit), out = gate ·
 * sigmoid(alpha · gate) · (linear + beta); alpha 1, beta 0 and limit ∞ by
 * default). The expansion is dense: every expert runs on every row and
 * the outputs are summed with a [T, E] weight matrix that is zero off the
 * chosen experts (ScatterElements of the top-k weights) — equal to the
 * kernel's gather/scatter, E/k times its arithmetic. fc3 (onnxruntime's
 * CPU kernel refuses it too) and the other swiglu layouts are refused. */
static sc_status ms_moe(adapter *ad, const Onnx__NodeProto *np) {
  sc_status st = need_io(ad, np, 5, 1);
  if (st != SC_OK) return st;
  if (input(np, 6) || input(np, 7))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MoE with fc3_experts_weights or bias is "
                         "not supported");
  const Onnx__AttributeProto *ka = attr(np, "k"), *aa = attr(np, "activation_type");
  const Onnx__AttributeProto *na = attr(np, "normalize_routing_weights");
  const Onnx__AttributeProto *sm = attr(np, "use_sparse_mixer"), *sf = attr(np, "swiglu_fusion");
  char act[16] = "relu";
  if (aa && aa->has_s) {
    if (aa->s.len >= sizeof act)
      return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MoE: activation_type '%.*s' is not "
                           "supported", (int)aa->s.len, (const char *)aa->s.data);
    memcpy(act, aa->s.data, aa->s.len);
    act[aa->s.len] = 0;
  }
  bool swiglu = strcmp(act, "swiglu") == 0;
  if (!swiglu && strcmp(act, "relu") != 0 && strcmp(act, "gelu") != 0 &&
      strcmp(act, "silu") != 0 && strcmp(act, "identity") != 0)
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MoE: activation_type '%s' is not supported "
                         "(relu, gelu, silu, identity, swiglu)", act);
  int64_t k = ka ? ka->i : 1;
  if (k < 1)
    return sc_onnx_error(ad->c, SC_ERR_INVALID, "MoE: k = %lld (at least 1)", (long long)k);
  if (sm && sm->i)
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MoE with use_sparse_mixer is not supported");
  if (swiglu && (!sf || sf->i != 1))
    return sc_onnx_error(ad->c, SC_ERR_UNSUPPORTED, "MoE: swiglu needs swiglu_fusion = 1 (the "
                         "interleaved layout, the one onnxruntime's CPU kernel takes)");
  const char *b = base_name(ad, np), *x = np->input[0];
  /* the routing weights: [T, E], zero off each row's top k */
  const char *p = opn(ad, b, "Softmax", (const char *[]){np->input[1]}, 1, NULL,
                      int_attr(ad, "axis", -1));
  const char *kc = int_const(ad, b, &k, 1), *vals = tmp_name(ad, b), *idx = tmp_name(ad, b);
  const char *tin[2] = {p, kc}, *tout[2] = {vals, idx};
  Onnx__NodeProto *tk = p && kc && vals && idx
                            ? node(ad, "TopK", sc_arena_printf(A(ad), "%s/TopK", b), tin, 2, tout,
                                   2, 1)
                            : NULL;
  Onnx__AttributeProto *tax = int_attr(ad, "axis", -1);
  if (!tk || !tax) return contrib_done(ad, NULL);
  tk->attribute[tk->n_attribute++] = tax;
  if ((st = emit(ad, tk)) != SC_OK) return st;
  const char *last = int_const(ad, b, (const int64_t[]){-1}, 1);
  if (na && na->i)
    vals = op2(ad, b, "Div", vals, opn(ad, b, "ReduceSum", (const char *[]){vals, last}, 2, NULL,
                                       int_attr(ad, "keepdims", 1)), NULL);
  const char *zero = op2(ad, b, "ConstantOfShape", op2(ad, b, "Shape", p, NULL, NULL), NULL, NULL);
  const char *sin[3] = {zero, idx, vals};
  const char *w = opn(ad, b, "ScatterElements", sin, 3, NULL, int_attr(ad, "axis", -1));
  /* every expert on every row: [E, T, ·] */
  const int64_t t021[3] = {0, 2, 1}, zero_axis = 0, one_axis = 1;
  const char *rows = opn(ad, b, "Flatten", &x, 1, NULL, int_attr(ad, "axis", -1));
  const char *x3 = op2(ad, b, "Unsqueeze", rows, int_const(ad, b, &zero_axis, 1), NULL);
  const char *h = op2(ad, b, "MatMul", x3,
                      opn(ad, b, "Transpose", (const char *[]){np->input[2]}, 1, NULL,
                          ints_attribute(ad, "perm", t021, 3)), NULL);
  const char *one = int_const(ad, b, &one_axis, 1);
  if (input(np, 3)) h = op2(ad, b, "Add", h, op2(ad, b, "Unsqueeze", np->input[3], one, NULL), NULL);
  if (strcmp(act, "relu") == 0) {
    h = op2(ad, b, "Relu", h, NULL, NULL);
  } else if (strcmp(act, "gelu") == 0) {
    const char *h3 = op2(ad, b, "Mul", op2(ad, b, "Mul", h, h, NULL), h, NULL);
    const char *in = op2(ad, b, "Add", h, op2(ad, b, "Mul", h3, scalar(ad, b, 0.044715f, h), NULL),
                         NULL);
    const char *t = op2(ad, b, "Tanh", op2(ad, b, "Mul", in, scalar(ad, b, 0.7978845608f, h),
                                           NULL), NULL, NULL);
    h = op2(ad, b, "Mul", op2(ad, b, "Mul", h, scalar(ad, b, 0.5f, h), NULL),
            op2(ad, b, "Add", t, scalar(ad, b, 1.0f, h), NULL), NULL);
  } else if (strcmp(act, "silu") == 0) {
    h = op2(ad, b, "Mul", h, op2(ad, b, "Sigmoid", h, NULL, NULL), NULL);
  } else if (swiglu) {
    const char *pairs = op2(ad, b, "Reshape", h, int_const(ad, b, (const int64_t[]){0, 0, -1, 2},
                                                           4), NULL);
    const int64_t i0 = 0, i1 = 1;
    const char *gate = opn(ad, b, "Gather", (const char *[]){pairs, int_const(ad, b, &i0, 0)}, 2,
                           NULL, int_attr(ad, "axis", -1));
    const char *lin = opn(ad, b, "Gather", (const char *[]){pairs, int_const(ad, b, &i1, 0)}, 2,
                          NULL, int_attr(ad, "axis", -1));
    const Onnx__AttributeProto *lim = attr(np, "swiglu_limit");
    if (lim && isfinite(lim->f)) {
      gate = op2(ad, b, "Min", gate, scalar(ad, b, lim->f, gate), NULL);
      lin = opn(ad, b, "Clip", (const char *[]){lin, scalar(ad, b, -lim->f, lin),
                                                scalar(ad, b, lim->f, lin)}, 3, NULL, NULL);
    }
    float alpha = float_attr(np, "activation_alpha", 1.0f), beta = float_attr(np, "activation_beta",
                                                                              0.0f);
    const char *sg = op2(ad, b, "Sigmoid", op2(ad, b, "Mul", gate, scalar(ad, b, alpha, gate), NULL),
                         NULL, NULL);
    if (beta != 0.0f) lin = op2(ad, b, "Add", lin, scalar(ad, b, beta, lin), NULL);
    h = op2(ad, b, "Mul", op2(ad, b, "Mul", gate, sg, NULL), lin, NULL);
  }
  const char *y = op2(ad, b, "MatMul", h,
                      opn(ad, b, "Transpose", (const char *[]){np->input[4]}, 1, NULL,
                          ints_attribute(ad, "perm", t021, 3)), NULL);
  if (input(np, 5)) y = op2(ad, b, "Add", y, op2(ad, b, "Unsqueeze", np->input[5], one, NULL), NULL);
  /* Σ_e w[t, e] y[e, t, :] */
  const char *we = op2(ad, b, "Unsqueeze",
                       opn(ad, b, "Transpose", &w, 1, NULL,
                           ints_attribute(ad, "perm", (const int64_t[]){1, 0}, 2)),
                       int_const(ad, b, (const int64_t[]){2}, 1), NULL);
  const char *sum = opn(ad, b, "ReduceSum",
                        (const char *[]){op2(ad, b, "Mul", y, we, NULL),
                                         int_const(ad, b, &zero_axis, 1)}, 2, NULL,
                        int_attr(ad, "keepdims", 0));
  return contrib_done(ad, op2(ad, b, "Reshape", sum, op2(ad, b, "Shape", x, NULL, NULL),
                              np->output[0]));
}

/* ONNX's preview domains (ai.onnx.preview: FlexAttention; .training:
 * Momentum, Adagrad, Adam) and two of ai.onnx.ml's (Binarizer,
 * ArrayFeatureExtractor): ops of the IR's table under their own names,
 * read into the default domain as they are. */
static sc_status preview(adapter *ad, const Onnx__NodeProto *np) {
  Onnx__NodeProto *cp = sc_arena_array(A(ad), 1, sizeof *cp);
  if (!cp) return sc_onnx_error(ad->c, SC_ERR_NOMEM, "out of memory");
  *cp = *np;
  cp->domain = NULL;
  return emit(ad, cp);
}

typedef sc_status (*adapt_fn)(adapter *ad, const Onnx__NodeProto *np);
static const struct {
  const char *domain; /* NULL: the default domain */
  const char *op;
  int64_t before; /* the opset from which the op means what the IR means */
  adapt_fn fn;
} ADAPTERS[] = {
    {NULL, "Softmax", 13, softmax},
    {NULL, "LogSoftmax", 13, softmax},
    {NULL, "Hardmax", 13, softmax},
    {NULL, "Slice", 10, slice},
    {NULL, "Pad", 11, pad},
    {NULL, "BatchNormalization", 9, batch_norm},
    {NULL, "Upsample", 10, upsample},
    {NULL, "Resize", 11, upsample},
    {NULL, "Scatter", 11, scatter},
    /* onnxruntime registers this one in the default domain */
    {NULL, "SimplifiedLayerNormalization", INT64_MAX, ms_layer_norm},
    {"com.microsoft", "Gelu", INT64_MAX, ms_gelu},
    {"com.microsoft", "BiasGelu", INT64_MAX, ms_gelu},
    {"com.microsoft", "FastGelu", INT64_MAX, ms_fast_gelu},
    {"com.microsoft", "QuickGelu", INT64_MAX, ms_quick_gelu},
    {"com.microsoft", "FusedMatMul", INT64_MAX, ms_fused_matmul},
    {"com.microsoft", "SkipLayerNormalization", INT64_MAX, ms_layer_norm},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", INT64_MAX, ms_layer_norm},
    {"com.microsoft", "SimplifiedLayerNormalization", INT64_MAX, ms_layer_norm},
    {"com.microsoft", "MultiHeadAttention", INT64_MAX, ms_mha},
    {"com.microsoft", "Attention", INT64_MAX, ms_attention},
    {"com.microsoft", "RotaryEmbedding", INT64_MAX, ms_rotary},
    {"com.microsoft", "EmbedLayerNormalization", INT64_MAX, ms_embed_layer_norm},
    {"com.microsoft", "MoE", INT64_MAX, ms_moe},
    {"ai.onnx.preview", "FlexAttention", INT64_MAX, preview},
    {"ai.onnx.preview.training", "Momentum", INT64_MAX, preview},
    {"ai.onnx.preview.training", "Adagrad", INT64_MAX, preview},
    {"ai.onnx.preview.training", "Adam", INT64_MAX, preview},
    {"ai.onnx.ml", "Binarizer", INT64_MAX, preview},
    {"ai.onnx.ml", "ArrayFeatureExtractor", INT64_MAX, preview},
};

static adapt_fn adapter_of(const Onnx__NodeProto *np, int64_t opset) {
  if (!np || !np->op_type) return NULL;
  for (size_t k = 0; k < sizeof ADAPTERS / sizeof *ADAPTERS; k++) {
    bool dom = ADAPTERS[k].domain ? np->domain && strcmp(np->domain, ADAPTERS[k].domain) == 0
                                  : sc_onnx_default_domain(np->domain);
    if (dom && opset < ADAPTERS[k].before && strcmp(np->op_type, ADAPTERS[k].op) == 0)
      return ADAPTERS[k].fn;
  }
  return NULL;
}

sc_status sc_onnx_adapt_opset(sc_onnx_ctx *c, int64_t opset, const Onnx__GraphProto **gp) {
  const Onnx__GraphProto *g0 = *gp;
  bool any = false;
  for (size_t i = 0; i < g0->n_node && !any; i++) any = adapter_of(g0->node[i], opset) != NULL;
  if (!any) return SC_OK;
  adapter ad = {.c = c, .graph = g0, .opset = opset};
  sc_status st = SC_OK;
  for (size_t i = 0; i < g0->n_node && st == SC_OK; i++) {
    Onnx__NodeProto *np = g0->node[i];
    adapt_fn fn = adapter_of(np, opset);
    ad.index = i;
    ad.tmp = 0;
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
