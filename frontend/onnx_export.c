/* onnx_export.c — sc_graph → ONNX ModelProto file.
 *
 * The protobuf-c messages are built in a scratch arena and point at the
 * graph's own strings and constant data (nothing is copied until packing);
 * packing streams straight into the file. Written: ir_version (the imported
 * one, else 8), the default-domain opset, graph inputs with their shapes
 * (symbolic dims keep their dim_param names while unbound), graph outputs
 * and intermediate values (value_info) with their types when known, every
 * live constant that a node or graph output uses as an initializer — with
 * embedded little-endian raw_data, or, when its data is absent, as an
 * external-data reference (its original location and offset, or
 * "<value name>.bin" at offset 0) — and live nodes with their attributes.
 * GRAPH, SPARSE_TENSOR and TYPE_PROTO attributes cannot be written (the
 * importer keeps only their kind): exporting a node with one is an error. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontend_internal.h"
#include "ir/fileio.h"

typedef struct exporter {
  sc_arena a;
  sc_graph *g;
  sc_diag *diag;
} exporter;

#define NEW(e, T, init_fn)                                   \
  ({                                                         \
    T *p_ = sc_arena_alloc(&(e)->a, sizeof(T));              \
    if (p_) init_fn(p_);                                     \
    p_;                                                      \
  })

static void *arr(exporter *e, size_t n, size_t size) {
  return sc_arena_array(&e->a, n ? n : 1, size);
}

static Onnx__StringStringEntryProto *entry(exporter *e, const char *k, const char *v) {
  Onnx__StringStringEntryProto *s =
      NEW(e, Onnx__StringStringEntryProto, onnx__string_string_entry_proto__init);
  if (!s) return NULL;
  s->key = (char *)k;
  s->value = (char *)v;
  return s;
}

/* A TensorProto of the given type and shape; data NULL with bytes > 0 means
 * "absent": written as an external reference. */
static Onnx__TensorProto *tensor(exporter *e, const char *name, sc_dtype dt, int32_t rank,
                                 const int64_t *dims, const void *data, uint64_t bytes,
                                 const char *ext_location, uint64_t ext_offset) {
  Onnx__TensorProto *t = NEW(e, Onnx__TensorProto, onnx__tensor_proto__init);
  if (!t) return NULL;
  t->name = (char *)(name ? name : "");
  t->has_data_type = 1;
  t->data_type = sc_dtype_to_onnx(dt);
  t->n_dims = (size_t)(rank > 0 ? rank : 0);
  t->dims = arr(e, t->n_dims, sizeof(int64_t));
  if (!t->dims) return NULL;
  for (size_t i = 0; i < t->n_dims; i++) t->dims[i] = dims[i];
  if ((data || bytes == 0) && sc_dtype_file_bits(dt) < 8) { /* 4/2-bit: packed */
    uint64_t n = bytes / sc_dtype_size(dt), fb = sc_dtype_file_bytes(dt, n);
    uint8_t *packed = fb ? sc_arena_alloc(&e->a, (size_t)fb) : NULL;
    if (fb && !packed) return NULL;
    if (fb) sc_narrow_pack(dt, data, n, packed);
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)fb;
    t->raw_data.data = packed;
    return t;
  }
  if (data || bytes == 0) {
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)bytes;
    t->raw_data.data = (uint8_t *)data; /* packed straight from the graph */
    return t;
  }
  const char *loc = ext_location;
  if (!loc) loc = sc_arena_printf(&e->a, "%s.bin", name);
  char *off = sc_arena_printf(&e->a, "%llu", (unsigned long long)ext_offset);
  char *len = sc_arena_printf(&e->a, "%llu", (unsigned long long)bytes);
  t->n_external_data = 3;
  t->external_data = arr(e, 3, sizeof *t->external_data);
  if (!loc || !off || !len || !t->external_data) return NULL;
  if (!(t->external_data[0] = entry(e, "location", loc)) ||
      !(t->external_data[1] = entry(e, "offset", off)) ||
      !(t->external_data[2] = entry(e, "length", len)))
    return NULL;
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  return t;
}

static Onnx__ValueInfoProto *value_info(exporter *e, const sc_value *v) {
  Onnx__ValueInfoProto *vi = NEW(e, Onnx__ValueInfoProto, onnx__value_info_proto__init);
  if (!vi) return NULL;
  vi->name = (char *)v->name;
  if (v->dtype == SC_DTYPE_UNDEF) return vi; /* type unknown: name only */
  Onnx__TypeProto *tp = NEW(e, Onnx__TypeProto, onnx__type_proto__init);
  Onnx__TypeProto__Tensor *tt = NEW(e, Onnx__TypeProto__Tensor, onnx__type_proto__tensor__init);
  if (!tp || !tt) return NULL;
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = sc_dtype_to_onnx(v->dtype);
  if (v->rank < 0) return vi;
  Onnx__TensorShapeProto *sh = NEW(e, Onnx__TensorShapeProto, onnx__tensor_shape_proto__init);
  if (!sh) return NULL;
  tt->shape = sh;
  sh->n_dim = (size_t)v->rank;
  sh->dim = arr(e, sh->n_dim, sizeof *sh->dim);
  if (!sh->dim) return NULL;
  for (int32_t d = 0; d < v->rank; d++) {
    Onnx__TensorShapeProto__Dimension *dim = NEW(e, Onnx__TensorShapeProto__Dimension,
                                                 onnx__tensor_shape_proto__dimension__init);
    if (!dim) return NULL;
    sh->dim[d] = dim;
    if (v->dims[d] >= 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = v->dims[d];
    } else if (v->dim_param && v->dim_param[d]) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim->dim_param = (char *)v->dim_param[d];
    } /* else: a dim with neither value nor name */
  }
  return vi;
}

static sc_status nomem(exporter *e) {
  return sc_diag_set(e->diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
}

static sc_status attr(exporter *e, const sc_node *n, const sc_attr *a,
                      Onnx__AttributeProto **out) {
  Onnx__AttributeProto *p = NEW(e, Onnx__AttributeProto, onnx__attribute_proto__init);
  if (!p) return nomem(e);
  p->name = (char *)a->name;
  p->has_type = 1;
  switch (a->kind) {
  case SC_ATTR_FLOAT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    p->has_f = 1;
    p->f = (float)a->f;
    break;
  case SC_ATTR_INT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    p->has_i = 1;
    p->i = a->i;
    break;
  case SC_ATTR_STRING:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    p->has_s = 1;
    p->s.data = (uint8_t *)(a->s ? a->s : "");
    p->s.len = strlen((const char *)p->s.data);
    break;
  case SC_ATTR_FLOATS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    p->n_floats = (size_t)a->n;
    p->floats = arr(e, p->n_floats, sizeof(float));
    if (!p->floats) return nomem(e);
    for (int64_t i = 0; i < a->n; i++) p->floats[i] = (float)a->floats[i];
    break;
  case SC_ATTR_INTS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    p->n_ints = (size_t)a->n;
    p->ints = a->n ? a->ints : NULL;
    break;
  case SC_ATTR_STRINGS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    p->n_strings = (size_t)a->n;
    p->strings = arr(e, p->n_strings, sizeof *p->strings);
    if (!p->strings) return nomem(e);
    for (int64_t i = 0; i < a->n; i++) {
      p->strings[i].data = (uint8_t *)a->strings[i];
      p->strings[i].len = strlen(a->strings[i]);
    }
    break;
  case SC_ATTR_TENSOR:
  case SC_ATTR_TENSORS: {
    int64_t cnt = a->kind == SC_ATTR_TENSOR ? 1 : a->n;
    Onnx__TensorProto **ts = arr(e, (size_t)cnt, sizeof *ts);
    if (!ts) return nomem(e);
    for (int64_t i = 0; i < cnt; i++) {
      const sc_tensor *t = &a->t[i];
      ts[i] = tensor(e, "", t->dtype, t->rank, t->dims, t->data, t->data_bytes, NULL, 0);
      if (!ts[i]) return nomem(e);
      if (!t->data && t->data_bytes) return nomem(e); /* cannot happen: bytes == 0 */
    }
    if (a->kind == SC_ATTR_TENSOR) {
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
      p->t = ts[0];
    } else {
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
      p->n_tensors = (size_t)cnt;
      p->tensors = ts;
    }
    break;
  }
  default:
    return sc_diag_set(e->diag, SC_ERR_UNSUPPORTED, n->name, sc_op_name(n->op),
                       "attribute '%s' of this kind cannot be exported", a->name);
  }
  *out = p;
  return SC_OK;
}

/* Streams the packed message into a FILE. */
typedef struct file_buffer {
  ProtobufCBuffer base;
  FILE *f;
  bool failed;
} file_buffer;

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  file_buffer *fb = (file_buffer *)b;
  if (!fb->failed && len && fwrite(data, 1, len, fb->f) != len) fb->failed = true;
}

static sc_status build(exporter *e, Onnx__ModelProto *m) {
  sc_graph *g = e->g;
  m->has_ir_version = 1;
  m->ir_version = g->ir_version > 0 ? g->ir_version : 8;
  m->producer_name = (char *)(g->producer ? g->producer : "shardc");
  Onnx__OperatorSetIdProto *os = NEW(e, Onnx__OperatorSetIdProto, onnx__operator_set_id_proto__init);
  m->opset_import = arr(e, 1, sizeof *m->opset_import);
  if (!os || !m->opset_import) return nomem(e);
  os->domain = (char *)"";
  os->has_version = 1;
  os->version = g->opset;
  m->n_opset_import = 1;
  m->opset_import[0] = os;
  Onnx__GraphProto *gp = NEW(e, Onnx__GraphProto, onnx__graph_proto__init);
  if (!gp) return nomem(e);
  m->graph = gp;
  gp->name = (char *)(g->name ? g->name : "main");

  /* which values are read */
  bool *used = arr(e, (size_t)g->n_values, sizeof(bool));
  if (!used) return nomem(e);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = sc_nod(g, i);
    if (n->flags & SC_NODE_DEAD) continue;
    for (int32_t j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) used[n->inputs[j]] = true;
  }
  for (int32_t i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = true;

  /* nodes */
  gp->node = arr(e, (size_t)g->n_nodes, sizeof *gp->node);
  if (!gp->node) return nomem(e);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = sc_nod(g, i);
    if (n->flags & SC_NODE_DEAD) continue;
    if (sc_ops[n->op].flags & SC_OPF_INTERNAL)
      return sc_diag_set(e->diag, SC_ERR_UNSUPPORTED, n->name, sc_op_name(n->op),
                         "internal op cannot be exported to ONNX");
    Onnx__NodeProto *np = NEW(e, Onnx__NodeProto, onnx__node_proto__init);
    if (!np) return nomem(e);
    np->name = (char *)n->name;
    np->op_type = (char *)sc_op_name(n->op);
    np->domain = (char *)"";
    np->n_input = (size_t)n->n_inputs;
    np->input = arr(e, np->n_input, sizeof(char *));
    np->n_output = (size_t)n->n_outputs;
    np->output = arr(e, np->n_output, sizeof(char *));
    np->n_attribute = (size_t)n->n_attrs;
    np->attribute = arr(e, np->n_attribute, sizeof *np->attribute);
    if (!np->input || !np->output || !np->attribute) return nomem(e);
    for (int32_t j = 0; j < n->n_inputs; j++)
      np->input[j] = (char *)(n->inputs[j] >= 0 ? sc_val(g, n->inputs[j])->name : "");
    for (int32_t j = 0; j < n->n_outputs; j++)
      np->output[j] = (char *)(n->outputs[j] >= 0 ? sc_val(g, n->outputs[j])->name : "");
    for (int32_t j = 0; j < n->n_attrs; j++) {
      sc_status st = attr(e, n, &n->attrs[j], &np->attribute[j]);
      if (st != SC_OK) return st;
    }
    gp->node[gp->n_node++] = np;
  }

  /* initializers, inputs, outputs, value_info */
  gp->initializer = arr(e, (size_t)g->n_values, sizeof *gp->initializer);
  gp->value_info = arr(e, (size_t)g->n_values, sizeof *gp->value_info);
  gp->input = arr(e, (size_t)g->n_inputs, sizeof *gp->input);
  gp->output = arr(e, (size_t)g->n_outputs, sizeof *gp->output);
  if (!gp->initializer || !gp->value_info || !gp->input || !gp->output) return nomem(e);
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = sc_val(g, i);
    if (v->flags & SC_VALUE_DEAD) continue;
    if (v->flags & SC_VALUE_CONST) {
      if (!used[i]) continue;
      int64_t bytes = sc_value_bytes(v);
      if (bytes < 0 || v->dtype == SC_DTYPE_UNDEF)
        return sc_diag_set(e->diag, SC_ERR_INVALID, NULL, NULL,
                           "constant '%s' has no known type and shape", v->name);
      Onnx__TensorProto *t = tensor(e, v->name, v->dtype, v->rank, v->dims, v->data,
                                    (uint64_t)bytes, v->ext_location, v->ext_offset);
      if (!t) return nomem(e);
      gp->initializer[gp->n_initializer++] = t;
    } else if (!(v->flags & (SC_VALUE_INPUT | SC_VALUE_OUTPUT)) &&
               v->dtype != SC_DTYPE_UNDEF) {
      Onnx__ValueInfoProto *vi = value_info(e, v);
      if (!vi) return nomem(e);
      gp->value_info[gp->n_value_info++] = vi;
    }
  }
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const sc_value *v = sc_val(g, g->inputs[i]);
    if (v->flags & (SC_VALUE_DEAD | SC_VALUE_CONST)) continue;
    if (!(gp->input[gp->n_input++] = value_info(e, v))) return nomem(e);
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const sc_value *v = sc_val(g, g->outputs[i]);
    if (v->flags & SC_VALUE_DEAD) continue;
    if (!(gp->output[gp->n_output++] = value_info(e, v))) return nomem(e);
  }
  return SC_OK;
}

sc_status sc_onnx_export(sc_graph *g, const char *path, sc_diag *diag) {
  sc_diag local = {0};
  if (!diag) diag = &local;
  memset(diag, 0, sizeof *diag);
  sc_diag_set_file(diag, path);
  exporter e = {.g = g, .diag = diag};
  sc_arena_init(&e.a);
  Onnx__ModelProto m;
  onnx__model_proto__init(&m);
  sc_status st = build(&e, &m);
  if (st == SC_OK) {
    size_t size = onnx__model_proto__get_packed_size(&m);
    if (size > (size_t)INT32_MAX) {
      st = sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL,
                       "model would be %zu bytes, over protobuf's 2 GiB limit (export "
                       "without weights)", size);
    } else {
      sc_file_commit c; /* under a temporary name, renamed when complete */
      st = sc_file_commit_begin(&c, path, diag);
      if (st == SC_OK) {
        file_buffer fb = {.base = {.append = file_append}, .f = c.f};
        onnx__model_proto__pack_to_buffer(&m, &fb.base);
        if (fb.failed) {
          sc_file_commit_abort(&c);
          st = sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "write failed");
        } else {
          st = sc_file_commit_end(&c, diag);
        }
      }
    }
  }
  sc_arena_free(&e.a);
  return st;
}
