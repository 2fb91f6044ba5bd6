/* onnx_import.c — ONNX ModelProto → sc_graph.
 *
 * The file is read (mmap), checked for excessive message nesting, and
 * unpacked by protobuf-c, which copies every field once into the decoded
 * message; the graph keeps that message alive (a cleanup frees it) and
 * borrows raw_data from it. An initializer's raw_data of OWN_RAW_BYTES or
 * more is taken out of the message instead, into a cleanup of its own, so
 * that sc_graph_release can give it back early (a trainer's initial
 * weights, once copied: docs/training.md, Memory). Data in the typed
 * fields (float_data, int32_data, ...) is converted into tight
 * little-endian arrays in the graph arena.
 *
 * Order of work: opset imports; model-local functions inlined
 * (onnx_functions.c); initializers (constants, flagged PARAM);
 * graph inputs that are not initializers; node names (kept when non-empty and
 * unique, else "<OpType>_<index>"); per node, Constant nodes become constant
 * values and every other node an sc_node with its outputs defined; then node
 * inputs are resolved by name (so unsorted files work), graph outputs are
 * looked up and take their declared type, and the graph is toposorted.
 *
 * Every problem is reported through the caller's diag with the model path
 * and, when it is about a node, the node's name and op_type. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend_internal.h"
#include "ir/fileio.h"

sc_status sc_onnx_error(sc_onnx_ctx *c, sc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sc_diag_vset(c->diag, st, c->cur_node, c->cur_op, fmt, ap);
  va_end(ap);
  return st;
}

/* A graph API call failed and put its reason in g->diag: pass it on. */
static sc_status from_graph(sc_onnx_ctx *c, sc_status st) {
  const sc_diag *gd = &c->g->diag;
  if (gd->status == SC_OK)
    return sc_onnx_error(c, st == SC_OK ? SC_ERR_INVALID : st, "graph construction failed");
  sc_diag_set(c->diag, gd->status, gd->node[0] ? gd->node : c->cur_node,
              gd->op[0] ? gd->op : c->cur_op, "%s", gd->msg);
  return gd->status;
}

/* ---- nesting depth, checked before protobuf-c recurses ---- */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* Walks the wire format with the schema's descriptors; false only when the
 * nesting is too deep. Malformed bytes stop the walk (unpack rejects them). */
static bool scan_depth(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                       const uint8_t *end, int depth) {
  while (p < end) {
    uint64_t tag, len;
    if (!read_varint(&p, end, &tag)) return true;
    switch (tag & 7) {
    case 0:
      if (!read_varint(&p, end, &len)) return true;
      break;
    case 1:
      if (end - p < 8) return true;
      p += 8;
      break;
    case 5:
      if (end - p < 4) return true;
      p += 4;
      break;
    case 2: {
      if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return true;
      uint64_t field = tag >> 3;
      const ProtobufCFieldDescriptor *fd =
          field <= UINT32_MAX && desc
              ? protobuf_c_message_descriptor_get_field(desc, (unsigned)field)
              : NULL;
      if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (depth + 1 > SC_ONNX_MAX_DEPTH) return false;
        if (!scan_depth(fd->descriptor, p, p + len, depth + 1)) return false;
      }
      p += len;
      break;
    }
    default: return true;
    }
  }
  return true;
}

bool sc_onnx_depth_ok(const uint8_t *data, size_t size) {
  return scan_depth(&onnx__model_proto__descriptor, data, data + size, 0);
}

/* ---- a small string set (node names) ---- */

typedef struct nameset {
  const char **slot;
  size_t cap; /* power of two */
} nameset;

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool nameset_init(nameset *s, size_t n) {
  s->cap = 64;
  while (s->cap < 2 * n + 2) s->cap *= 2;
  s->slot = sc_calloc(s->cap, sizeof *s->slot);
  return s->slot != NULL;
}

/* Inserts name; false when it was already present. */
static bool nameset_add(nameset *s, const char *name) {
  size_t i = (size_t)hash_name(name) & (s->cap - 1);
  while (s->slot[i]) {
    if (strcmp(s->slot[i], name) == 0) return false;
    i = (i + 1) & (s->cap - 1);
  }
  s->slot[i] = name;
  return true;
}

static bool nameset_has(const nameset *s, const char *name) {
  size_t i = (size_t)hash_name(name) & (s->cap - 1);
  while (s->slot[i]) {
    if (strcmp(s->slot[i], name) == 0) return true;
    i = (i + 1) & (s->cap - 1);
  }
  return false;
}

/* ---- tensors ---- */

/* dtype of an ONNX element type number, refusing what shardc cannot hold. */
static sc_status check_dtype(sc_onnx_ctx *c, int32_t onnx, const char *what,
                             sc_dtype *out) {
  sc_dtype d = onnx == 0 ? SC_DTYPE_UNDEF : sc_dtype_from_onnx(onnx);
  if (d == SC_DTYPE_COUNT)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "%s: unknown element type %d", what,
                         (int)onnx);
  if (d == SC_DTYPE_UNDEF)
    return sc_onnx_error(c, SC_ERR_INVALID, "%s: element type is not set", what);
  if (d == SC_DTYPE_STRING)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "%s: string tensors are not supported",
                         what);
  if (!sc_dtype_is_numeric(d))
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "%s: element type %s is not supported",
                         what, sc_dtype_name(d));
  *out = d;
  return SC_OK;
}

/* Rank, dims, element count and byte size, all checked. */
static sc_status tensor_shape(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                              const char *what, sc_onnx_tensor *out,
                              int64_t *numel) {
  if (t->n_dims > SC_MAX_RANK)
    return sc_onnx_error(c, SC_ERR_LIMIT, "tensor '%s': rank %zu (at most %d supported)",
                         what, t->n_dims, SC_MAX_RANK);
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0)
      return sc_onnx_error(c, SC_ERR_INVALID, "tensor '%s': negative dim %lld", what,
                           (long long)t->dims[i]);
    if (!sc_mul_i64(n, t->dims[i], &n) || n > SC_MAX_ELEMENTS)
      return sc_onnx_error(c, SC_ERR_LIMIT, "tensor '%s': element count overflows",
                           what);
    out->dims[i] = t->dims[i];
  }
  out->rank = (int32_t)t->n_dims;
  *numel = n;
  out->data_bytes = (uint64_t)n * sc_dtype_size(out->dtype); /* n <= 2^50 */
  return SC_OK;
}

static const char *typed_field_for(sc_dtype d) {
  switch (d) {
  case SC_DTYPE_F32: return "float_data";
  case SC_DTYPE_I64: return "int64_data";
  case SC_DTYPE_F64: return "double_data";
  case SC_DTYPE_U32:
  case SC_DTYPE_U64: return "uint64_data";
  default: return "int32_data"; /* i32 i16 i8 u16 u8 bool f16 bf16 */
  }
}

/* Typed fields → tight little-endian array in the arena. */
static sc_status read_typed(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                            const char *what, int64_t numel, sc_onnx_tensor *out) {
  struct { const char *name; size_t n; } f[] = {
      {"float_data", t->n_float_data},   {"int32_data", t->n_int32_data},
      {"int64_data", t->n_int64_data},   {"double_data", t->n_double_data},
      {"uint64_data", t->n_uint64_data}, {"string_data", t->n_string_data}};
  int used = -1, n_used = 0;
  for (int i = 0; i < (int)(sizeof f / sizeof f[0]); i++)
    if (f[i].n) {
      used = i;
      n_used++;
    }
  if (n_used > 1)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': data in more than one typed field", what);
  if (n_used == 0) {
    if (numel == 0) return SC_OK;
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': no data for its %lld elements", what,
                         (long long)numel);
  }
  const char *want = typed_field_for(out->dtype);
  if (strcmp(f[used].name, want) != 0)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s' of type %s has its data in %s (expected %s)", what,
                         sc_dtype_name(out->dtype), f[used].name, want);
  /* packed types hold 2 or 4 elements per int32_data entry (onnx.proto) */
  uint64_t entries = sc_dtype_file_bits(out->dtype) < 8
                         ? sc_dtype_file_bytes(out->dtype, (uint64_t)numel)
                         : (uint64_t)numel;
  if ((uint64_t)f[used].n != entries)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': %zu values in %s, its shape needs %llu", what,
                         f[used].n, f[used].name, (unsigned long long)entries);
  void *dst = sc_arena_alloc(&c->g->arena, (size_t)out->data_bytes);
  if (!dst) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  size_t n = (size_t)numel;
  if (sc_dtype_is_narrow(out->dtype)) {
    uint8_t *bytes = sc_arena_alloc(&c->g->arena, (size_t)entries);
    if (!bytes) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < entries; i++) bytes[i] = (uint8_t)t->int32_data[i];
    sc_narrow_unpack(out->dtype, bytes, (uint64_t)numel, dst);
    out->data = dst;
    out->kind = SC_DATA_ARENA;
    return SC_OK;
  }
  switch (out->dtype) {
  case SC_DTYPE_F32: memcpy(dst, t->float_data, n * 4); break;
  case SC_DTYPE_F64: memcpy(dst, t->double_data, n * 8); break;
  case SC_DTYPE_I64: memcpy(dst, t->int64_data, n * 8); break;
  case SC_DTYPE_U64: memcpy(dst, t->uint64_data, n * 8); break;
  case SC_DTYPE_I32: memcpy(dst, t->int32_data, n * 4); break;
  case SC_DTYPE_U32:
    for (size_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = (uint32_t)t->uint64_data[i];
    break;
  case SC_DTYPE_I16:
    for (size_t i = 0; i < n; i++) ((int16_t *)dst)[i] = (int16_t)t->int32_data[i];
    break;
  case SC_DTYPE_U16:
  case SC_DTYPE_F16:
  case SC_DTYPE_BF16: /* the 16 bits of the value, in the low half */
    for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i];
    break;
  case SC_DTYPE_I8:
    for (size_t i = 0; i < n; i++) ((int8_t *)dst)[i] = (int8_t)t->int32_data[i];
    break;
  case SC_DTYPE_U8:
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)t->int32_data[i];
    break;
  case SC_DTYPE_BOOL:
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = t->int32_data[i] != 0;
    break;
  default:
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "tensor '%s': type %s", what,
                         sc_dtype_name(out->dtype));
  }
  out->data = dst;
  out->kind = SC_DATA_ARENA;
  return SC_OK;
}

static sc_status read_tensor(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                             const char *what, sc_onnx_tensor *out) {
  memset(out, 0, sizeof *out);
  if (!t) return sc_onnx_error(c, SC_ERR_INVALID, "tensor '%s' is missing", what);
  char label[300];
  snprintf(label, sizeof label, "tensor '%.250s'", what);
  sc_status st = check_dtype(c, t->has_data_type ? t->data_type : 0, label, &out->dtype);
  if (st != SC_OK) return st;
  int64_t numel = 0;
  if ((st = tensor_shape(c, t, what, out, &numel)) != SC_OK) return st;
  if (t->segment)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "tensor '%s': segments are not supported",
                         what);
  bool external = t->has_data_location &&
                  t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  bool typed = t->n_float_data || t->n_int32_data || t->n_int64_data ||
               t->n_double_data || t->n_uint64_data || t->n_string_data;
  if (t->has_data_location && !external &&
      t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT)
    return sc_onnx_error(c, SC_ERR_INVALID, "tensor '%s': unknown data_location %d", what,
                         (int)t->data_location);
  if ((external && (t->has_raw_data || typed)) || (t->has_raw_data && typed))
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': data given in more than one way", what);
  bool packed = sc_dtype_file_bits(out->dtype) < 8;
  if (external && packed)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED,
                         "tensor '%s': external data of a %s tensor (packed) is not supported",
                         what, sc_dtype_name(out->dtype));
  if (external) return sc_onnx_read_external(c, t, what, out);
  if (t->has_raw_data && packed) { /* unpacked into the arena, a byte each */
    uint64_t want = sc_dtype_file_bytes(out->dtype, (uint64_t)numel);
    if ((uint64_t)t->raw_data.len != want)
      return sc_onnx_error(c, SC_ERR_INVALID,
                           "tensor '%s': raw_data has %zu bytes, its type and shape "
                           "need %llu", what, t->raw_data.len, (unsigned long long)want);
    if (numel == 0) return SC_OK;
    void *dst = sc_arena_alloc(&c->g->arena, (size_t)out->data_bytes);
    if (!dst) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    sc_narrow_unpack(out->dtype, t->raw_data.data, (uint64_t)numel, dst);
    out->data = dst;
    out->kind = SC_DATA_ARENA;
    return SC_OK;
  }
  if (t->has_raw_data) {
    if ((uint64_t)t->raw_data.len != out->data_bytes)
      return sc_onnx_error(c, SC_ERR_INVALID,
                           "tensor '%s': raw_data has %zu bytes, its type and shape "
                           "need %llu", what, t->raw_data.len,
                           (unsigned long long)out->data_bytes);
    if (out->data_bytes) {
      out->data = t->raw_data.data; /* borrowed from the decoded message */
      out->kind = SC_DATA_BORROWED;
    }
    return SC_OK;
  }
  return read_typed(c, t, what, numel, out);
}

/* Large raw_data blocks the graph owns apart from the message (header). */
enum { OWN_RAW_BYTES = 1 << 20 };

/* protobuf-c's default allocator is malloc's */
static void free_raw_block(void *p) { free(p); }

/* Moves t's raw_data block from the decoded message into a graph cleanup
 * of its own; the value keeps pointing at it. */
static sc_status own_raw_data(sc_onnx_ctx *c, Onnx__TensorProto *t) {
  void *block = t->raw_data.data;
  t->raw_data.data = NULL; /* free_unpacked skips a NULL block */
  t->raw_data.len = 0;
  t->has_raw_data = 0;
  sc_status st = sc_graph_add_cleanup(c->g, free_raw_block, block);
  return st == SC_OK ? SC_OK : from_graph(c, st);
}

/* Makes value vid a constant holding tensor t. */
static sc_status set_const(sc_onnx_ctx *c, int32_t vid, const sc_onnx_tensor *t,
                           uint32_t extra_flags) {
  sc_status st = sc_value_set_data(c->g, vid, t->dtype, t->rank, t->dims, t->data,
                                   t->data ? t->data_bytes : 0, false);
  if (st != SC_OK) return from_graph(c, st);
  sc_value *v = sc_val(c->g, vid);
  v->flags |= extra_flags;
  if (t->data) v->data_kind = t->kind;
  v->ext_location = t->ext_location;
  v->ext_offset = t->ext_offset;
  return SC_OK;
}

/* ---- value types (graph inputs and outputs) ---- */

static sc_status read_value_type(sc_onnx_ctx *c, const Onnx__ValueInfoProto *vi,
                                 int32_t vid, const char *role) {
  const char *name = vi->name;
  const Onnx__TypeProto *tp = vi->type;
  char label[300];
  snprintf(label, sizeof label, "%s '%.250s'", role, name);
  if (!tp) return sc_onnx_error(c, SC_ERR_INVALID, "%s has no type", label);
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "%s is not a tensor", label);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  sc_dtype dt;
  sc_status st = check_dtype(c, tt->has_elem_type ? tt->elem_type : 0, label, &dt);
  if (st != SC_OK) return st;
  sc_value *v = sc_val(c->g, vid);
  v->dtype = dt;
  if (!tt->shape) return SC_OK; /* rank unknown */
  const Onnx__TensorShapeProto *sh = tt->shape;
  if (sh->n_dim > SC_MAX_RANK)
    return sc_onnx_error(c, SC_ERR_LIMIT, "%s: rank %zu (at most %d supported)", label,
                         sh->n_dim, SC_MAX_RANK);
  int64_t dims[SC_MAX_RANK], numel = 1;
  const char *params[SC_MAX_RANK] = {0};
  bool any_param = false;
  for (size_t d = 0; d < sh->n_dim; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = sh->dim[d];
    dims[d] = SC_DIM_UNKNOWN;
    if (!dim) continue;
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dim->dim_value < 0)
        return sc_onnx_error(c, SC_ERR_INVALID, "%s: negative dim %lld", label,
                             (long long)dim->dim_value);
      if (!sc_mul_i64(numel, dim->dim_value, &numel) || numel > SC_MAX_ELEMENTS)
        return sc_onnx_error(c, SC_ERR_LIMIT, "%s: element count overflows", label);
      dims[d] = dim->dim_value;
    } else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               dim->dim_param && dim->dim_param[0]) {
      params[d] = sc_arena_strdup(&c->g->arena, dim->dim_param);
      if (!params[d]) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
      any_param = true;
    }
  }
  v = sc_val(c->g, vid);
  v->rank = (int32_t)sh->n_dim;
  for (int32_t d = 0; d < v->rank; d++) v->dims[d] = dims[d];
  v->dim_param = NULL;
  if (any_param) {
    v->dim_param = sc_arena_array(&c->g->arena, (size_t)v->rank, sizeof(char *));
    if (!v->dim_param) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    for (int32_t d = 0; d < v->rank; d++) v->dim_param[d] = params[d];
  }
  return SC_OK;
}

/* ---- attributes ---- */

static int attr_kind_of(const Onnx__AttributeProto *a) {
  if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
    return (int)a->type;
  /* IR version 1 files may leave the type out: infer it from the field set */
  if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
  if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
  if (a->n_tensors) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
  if (a->n_graphs) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
  return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static sc_status to_sc_tensor(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                              const char *what, sc_tensor *out) {
  sc_onnx_tensor ot;
  sc_status st = read_tensor(c, t, what, &ot);
  if (st != SC_OK) return st;
  out->dtype = ot.dtype;
  out->rank = ot.rank;
  memcpy(out->dims, ot.dims, sizeof out->dims);
  out->data = ot.data;
  out->data_bytes = ot.data ? ot.data_bytes : 0;
  return SC_OK;
}

static sc_status import_body(sc_onnx_ctx *c, const Onnx__GraphProto *gp, bool sub);

/* A value of an enclosing scope that the subgraph being imported reads. */
static int32_t outer_value(sc_onnx_ctx *c, const char *name) {
  int32_t vid = sc_graph_add_value(c->g, name);
  if (vid < 0) {
    from_graph(c, SC_ERR_INVALID);
    return -1;
  }
  sc_val(c->g, vid)->flags |= SC_VALUE_OUTER;
  return vid;
}

static void destroy_subgraph(void *p) { sc_graph_destroy(p); }

/* Subgraphs nest at most this deep (a hostile file's nesting is bounded
 * already by the message depth check; this keeps the recursion small). */
enum { SC_ONNX_MAX_SUBGRAPH_DEPTH = 16 };

/* A GRAPH attribute: the subgraph imported into a graph of its own, which
 * the enclosing graph owns (attr->graph). */
static sc_status read_subgraph(sc_onnx_ctx *c, const Onnx__GraphProto *gp, sc_attr *at) {
  if (!gp) return SC_OK; /* typed GRAPH without one: the kind only (an op needing it says so) */
  if (c->sub_depth >= SC_ONNX_MAX_SUBGRAPH_DEPTH)
    return sc_onnx_error(c, SC_ERR_LIMIT, "subgraphs nest deeper than %d",
                         SC_ONNX_MAX_SUBGRAPH_DEPTH);
  sc_graph *parent = c->g;
  sc_graph *sub = sc_graph_create(gp->name && gp->name[0] ? gp->name : at->name);
  if (!sub) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  if (sc_graph_add_cleanup(parent, destroy_subgraph, sub) != SC_OK) {
    sc_graph_destroy(sub);
    return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  }
  sub->opset = parent->opset;
  const char *node = c->cur_node, *op = c->cur_op;
  c->g = sub;
  c->sub_depth++;
  sc_status st = sc_onnx_adapt_opset(c, sub->opset, &gp);
  if (st == SC_OK) st = import_body(c, gp, true);
  c->sub_depth--;
  c->g = parent;
  c->cur_node = node, c->cur_op = op;
  at->graph = sub;
  return st;
}

static sc_status read_attr(sc_onnx_ctx *c, int32_t node_id,
                           const Onnx__AttributeProto *a) {
  sc_graph *g = c->g;
  if (!a || !a->name || !a->name[0])
    return sc_onnx_error(c, SC_ERR_INVALID, "attribute without a name");
  if (a->ref_attr_name && a->ref_attr_name[0])
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED,
                         "attribute '%s' refers to a function attribute", a->name);
  if (sc_node_attr(sc_nod(g, node_id), a->name))
    return sc_onnx_error(c, SC_ERR_INVALID, "attribute '%s' given twice", a->name);
  sc_attr_kind kind;
  switch (attr_kind_of(a)) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: kind = SC_ATTR_FLOAT; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: kind = SC_ATTR_INT; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: kind = SC_ATTR_STRING; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: kind = SC_ATTR_TENSOR; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: kind = SC_ATTR_GRAPH; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: kind = SC_ATTR_FLOATS; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: kind = SC_ATTR_INTS; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: kind = SC_ATTR_STRINGS; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: kind = SC_ATTR_TENSORS; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: kind = SC_ATTR_GRAPHS; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
    kind = SC_ATTR_SPARSE_TENSOR;
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
    kind = SC_ATTR_SPARSE_TENSORS;
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: kind = SC_ATTR_TYPE_PROTO; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
    kind = SC_ATTR_TYPE_PROTOS;
    break;
  default:
    return sc_onnx_error(c, SC_ERR_INVALID, "attribute '%s' has no (known) type",
                         a->name);
  }
  sc_attr *at = sc_node_add_attr(g, node_id, a->name, kind);
  if (!at) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  sc_arena *ar = &g->arena;
  char what[300];
  snprintf(what, sizeof what, "attribute %.250s", a->name);
  switch (kind) {
  case SC_ATTR_FLOAT: at->f = a->f; break;
  case SC_ATTR_INT: at->i = a->i; break;
  case SC_ATTR_STRING:
    at->s = sc_arena_strndup(ar, a->s.data ? (const char *)a->s.data : "", a->s.len);
    if (!at->s) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    break;
  case SC_ATTR_TENSOR:
    at->n = 1;
    at->t = sc_arena_alloc(ar, sizeof *at->t);
    if (!at->t) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    return to_sc_tensor(c, a->t, what, at->t);
  case SC_ATTR_FLOATS:
    at->n = (int64_t)a->n_floats;
    at->floats = sc_arena_array(ar, a->n_floats, sizeof(double));
    if (!at->floats) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < a->n_floats; i++) at->floats[i] = a->floats[i];
    break;
  case SC_ATTR_INTS:
    at->n = (int64_t)a->n_ints;
    at->ints = sc_arena_array(ar, a->n_ints, sizeof(int64_t));
    if (!at->ints) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    if (a->n_ints) memcpy(at->ints, a->ints, a->n_ints * sizeof(int64_t));
    break;
  case SC_ATTR_STRINGS:
    at->n = (int64_t)a->n_strings;
    at->strings = sc_arena_array(ar, a->n_strings, sizeof(char *));
    if (!at->strings) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < a->n_strings; i++) {
      const ProtobufCBinaryData *b = &a->strings[i];
      at->strings[i] = sc_arena_strndup(ar, b->data ? (const char *)b->data : "", b->len);
      if (!at->strings[i]) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    }
    break;
  case SC_ATTR_TENSORS: {
    size_t n = a->n_tensors;
    sc_tensor *ts = sc_arena_array(ar, n, sizeof *ts);
    if (!ts) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    at->n = (int64_t)n;
    at->t = ts;
    for (size_t i = 0; i < n; i++) {
      sc_status st = to_sc_tensor(c, a->tensors[i], what, &ts[i]);
      if (st != SC_OK) return st;
    }
    break;
  }
  case SC_ATTR_GRAPH: return read_subgraph(c, a->g, at);
  case SC_ATTR_GRAPHS: at->n = (int64_t)a->n_graphs; break;
  case SC_ATTR_SPARSE_TENSORS: at->n = (int64_t)a->n_sparse_tensors; break;
  case SC_ATTR_TYPE_PROTOS: at->n = (int64_t)a->n_type_protos; break;
  default: break; /* SPARSE_TENSOR, TYPE_PROTO: kind only */
  }
  return SC_OK;
}

/* ---- Constant nodes ---- */

static sc_status read_constant(sc_onnx_ctx *c, const Onnx__NodeProto *np,
                               sc_onnx_tensor *out) {
  memset(out, 0, sizeof *out);
  if (np->n_input != 0)
    return sc_onnx_error(c, SC_ERR_INVALID, "Constant takes no inputs (has %zu)",
                         np->n_input);
  if (np->n_attribute != 1 || !np->attribute[0] || !np->attribute[0]->name)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "Constant needs exactly one of value, value_float(s), "
                         "value_int(s) (has %zu attributes)", np->n_attribute);
  const Onnx__AttributeProto *a = np->attribute[0];
  const char *nm = a->name;
  int kind = attr_kind_of(a);
  const char *what = np->output[0];
  if (strcmp(nm, "value") == 0) {
    if (kind != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR || !a->t)
      return sc_onnx_error(c, SC_ERR_INVALID, "Constant: 'value' must be a tensor");
    return read_tensor(c, a->t, what, out);
  }
  bool is_f = strcmp(nm, "value_float") == 0, is_fs = strcmp(nm, "value_floats") == 0;
  bool is_i = strcmp(nm, "value_int") == 0, is_is = strcmp(nm, "value_ints") == 0;
  if (!is_f && !is_fs && !is_i && !is_is) {
    if (strcmp(nm, "sparse_value") == 0 || strcmp(nm, "value_string") == 0 ||
        strcmp(nm, "value_strings") == 0)
      return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "Constant: '%s' is not supported", nm);
    return sc_onnx_error(c, SC_ERR_INVALID, "Constant: unknown attribute '%s'", nm);
  }
  int want = is_f    ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT
             : is_fs ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS
             : is_i  ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT
                     : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  /* an empty list has no field set: accept an untyped attribute for lists */
  bool empty_list = kind == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED && (is_fs || is_is);
  if (kind != want && !empty_list)
    return sc_onnx_error(c, SC_ERR_INVALID, "Constant: attribute '%s' has the wrong type",
                         nm);
  size_t n = is_f || is_i ? 1 : is_fs ? a->n_floats : a->n_ints;
  out->dtype = is_f || is_fs ? SC_DTYPE_F32 : SC_DTYPE_I64;
  out->rank = is_f || is_i ? 0 : 1;
  out->dims[0] = (int64_t)n;
  out->data_bytes = (uint64_t)n * sc_dtype_size(out->dtype);
  if (n == 0) return SC_OK;
  void *p = sc_arena_alloc(&c->g->arena, (size_t)out->data_bytes);
  if (!p) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  if (is_f) memcpy(p, &a->f, 4);
  else if (is_i) memcpy(p, &a->i, 8);
  else if (is_fs) memcpy(p, a->floats, n * 4);
  else memcpy(p, a->ints, n * 8);
  out->data = p;
  out->kind = SC_DATA_ARENA;
  return SC_OK;
}

/* ---- the model ---- */

bool sc_onnx_default_domain(const char *d) {
  return !d || !d[0] || strcmp(d, "ai.onnx") == 0;
}

/* Defines output value `name` for a node (or Constant). */
static sc_status define_output(sc_onnx_ctx *c, const char *name, int32_t *vid) {
  int32_t old = sc_graph_find_value(c->g, name);
  if (old >= 0) {
    const sc_value *v = sc_val(c->g, old);
    const char *by = v->producer >= 0           ? "another node"
                     : (v->flags & SC_VALUE_PARAM) ? "an initializer"
                     : (v->flags & SC_VALUE_INPUT) ? "a graph input"
                                                   : "a Constant";
    return sc_onnx_error(c, SC_ERR_INVALID, "output '%s' is already defined by %s", name,
                         by);
  }
  *vid = sc_graph_add_value(c->g, name);
  return *vid < 0 ? from_graph(c, SC_ERR_INVALID) : SC_OK;
}

static sc_status import_body(sc_onnx_ctx *c, const Onnx__GraphProto *gp, bool sub);

void sc_import_unsupported_free(sc_import_unsupported *u) {
  sc_free(u->items);
  memset(u, 0, sizeof *u);
}

/* Node np (named name) has an op shardc does not support: the error, or,
 * when the caller lists them (sc_import_opts.unsupported), SC_OK after
 * listing it (the first one's error kept in the diagnostic), so that the
 * import goes on to the next node. */
static sc_status unsupported_node(sc_onnx_ctx *c, const Onnx__NodeProto *np, const char *name,
                                  const char *fmt, const char *what) {
  sc_import_unsupported *u = c->unsupported;
  if (!u || c->diag->status != SC_OK) {
    sc_status st = sc_onnx_error(c, SC_ERR_UNSUPPORTED, fmt, what);
    if (!u) return st;
  }
  if (u->n == u->cap) {
    int32_t cap = u->cap ? 2 * u->cap : 16;
    sc_unsupported_node *items = sc_realloc(u->items, (size_t)cap * sizeof *items);
    if (!items) return SC_ERR_NOMEM; /* the diagnostic says the first node */
    u->items = items;
    u->cap = cap;
  }
  sc_unsupported_node *it = &u->items[u->n++];
  snprintf(it->node, sizeof it->node, "%s", name);
  snprintf(it->op, sizeof it->op, "%s", np->op_type);
  snprintf(it->domain, sizeof it->domain, "%s", np->domain ? np->domain : "");
  return SC_OK;
}

static sc_status import_graph(sc_onnx_ctx *c, const Onnx__ModelProto *m) {
  sc_graph *g = c->g;
  const Onnx__GraphProto *gp = m->graph;
  sc_status st = SC_OK;

  /* opsets */
  bool have_default = false;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *os = m->opset_import[i];
    if (!os || !sc_onnx_default_domain(os->domain)) continue;
    if (have_default)
      return sc_onnx_error(c, SC_ERR_INVALID, "model imports the default opset twice");
    have_default = true;
    int64_t ver = os->has_version ? os->version : 0;
    if (ver < SC_OPSET_MIN || ver > SC_OPSET_MAX)
      return sc_onnx_error(c, SC_ERR_UNSUPPORTED,
                           "opset %lld is not supported (shardc reads opsets %d to %d)",
                           (long long)ver, SC_OPSET_MIN, SC_OPSET_MAX);
    g->opset = ver;
  }
  if (!have_default) { /* allowed when no node is of the default domain */
    for (size_t i = 0; i < m->graph->n_node; i++)
      if (m->graph->node[i] && sc_onnx_default_domain(m->graph->node[i]->domain))
        return sc_onnx_error(c, SC_ERR_INVALID, "model imports no default-domain opset");
    g->opset = SC_OPSET_MAX;
  }
  if ((st = sc_onnx_inline_functions(c, m, g->opset, &gp)) != SC_OK ||
      (st = sc_onnx_adapt_opset(c, g->opset, &gp)) != SC_OK)
    return st;
  g->ir_version = m->has_ir_version ? m->ir_version : 0;
  if (m->producer_name && m->producer_name[0]) {
    g->producer = sc_arena_strdup(&g->arena, m->producer_name);
    if (!g->producer) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  }
  return import_body(c, gp, false);
}

/* A graph's initializers, inputs, nodes and outputs into c->g. A subgraph
 * (sub: If's branches, Loop's and Scan's bodies) may read values of the
 * enclosing scopes: a name it does not define becomes an SC_VALUE_OUTER
 * value of that name; its inputs' types may be left out. */
static sc_status import_body(sc_onnx_ctx *c, const Onnx__GraphProto *gp, bool sub) {
  sc_graph *g = c->g;
  sc_status st = SC_OK;
  if (gp->n_node > (size_t)INT32_MAX / 4 || gp->n_initializer > (size_t)INT32_MAX / 4 ||
      gp->n_input > (size_t)INT32_MAX / 4)
    return sc_onnx_error(c, SC_ERR_LIMIT, "graph too large");
  if (gp->n_sparse_initializer)
    return sc_onnx_error(c, SC_ERR_UNSUPPORTED, "sparse initializers are not supported");

  /* initializers */
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t || !t->name || !t->name[0])
      return sc_onnx_error(c, SC_ERR_INVALID, "initializer %zu has no name", i);
    if (sc_graph_find_value(g, t->name) >= 0)
      return sc_onnx_error(c, SC_ERR_INVALID, "initializer '%s' defined twice", t->name);
    sc_onnx_tensor ot;
    if ((st = read_tensor(c, t, t->name, &ot)) != SC_OK) return st;
    int32_t vid = sc_graph_add_value(g, t->name);
    if (vid < 0) return from_graph(c, SC_ERR_INVALID);
    if ((st = set_const(c, vid, &ot, SC_VALUE_PARAM)) != SC_OK) return st;
    if (ot.data && ot.data == t->raw_data.data && t->raw_data.len >= OWN_RAW_BYTES &&
        (st = own_raw_data(c, gp->initializer[i])) != SC_OK)
      return st;
  }

  /* graph inputs (an input that is also an initializer is a constant) */
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi || !vi->name || !vi->name[0])
      return sc_onnx_error(c, SC_ERR_INVALID, "graph input %zu has no name", i);
    int32_t old = sc_graph_find_value(g, vi->name);
    if (old >= 0) {
      if (sc_val(g, old)->flags & SC_VALUE_PARAM) continue;
      return sc_onnx_error(c, SC_ERR_INVALID, "graph input '%s' listed twice", vi->name);
    }
    int32_t vid = sc_graph_add_value(g, vi->name);
    if (vid < 0) return from_graph(c, SC_ERR_INVALID);
    if ((!sub || vi->type) && (st = read_value_type(c, vi, vid, "graph input")) != SC_OK)
      return st;
    if (sc_graph_add_input(g, vid) != SC_OK) return from_graph(c, SC_ERR_NOMEM);
  }

  /* value_info: read for well-formedness only; shapes come from inference */
  for (size_t i = 0; i < gp->n_value_info; i++)
    if (!gp->value_info[i] || !gp->value_info[i]->name)
      return sc_onnx_error(c, SC_ERR_INVALID, "value_info %zu has no name", i);

  /* node names */
  size_t nn = gp->n_node;
  const char **names = sc_arena_array(&g->arena, nn, sizeof(char *));
  int32_t *node_id = sc_arena_array(&g->arena, nn, sizeof(int32_t));
  nameset ns = {0};
  if (!names || !node_id || !nameset_init(&ns, nn))
    return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < nn; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    if (!np) continue;
    if (np->name && np->name[0] && !nameset_has(&ns, np->name)) {
      names[i] = sc_arena_strdup(&g->arena, np->name);
      if (!names[i] || !nameset_add(&ns, names[i])) goto nomem;
    }
  }
  for (size_t i = 0; i < nn; i++) {
    if (names[i]) continue;
    const Onnx__NodeProto *np = gp->node[i];
    const char *op = np && np->op_type && np->op_type[0] ? np->op_type : "node";
    char *nm = sc_arena_printf(&g->arena, "%.200s_%zu", op, i);
    for (size_t k = 1; nm && nameset_has(&ns, nm); k++)
      nm = sc_arena_printf(&g->arena, "%.200s_%zu_%zu", op, i, k);
    if (!nm || !nameset_add(&ns, nm)) goto nomem;
    names[i] = nm;
  }
  sc_free(ns.slot);
  ns.slot = NULL;

  /* nodes, pass 1: ops, outputs, attributes; Constants become values */
  for (size_t i = 0; i < nn; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    node_id[i] = -1;
    c->cur_node = names[i];
    c->cur_op = np && np->op_type ? np->op_type : "";
    if (!np || !np->op_type || !np->op_type[0])
      return sc_onnx_error(c, SC_ERR_INVALID, "node has no op_type");
    if (!sc_onnx_default_domain(np->domain)) {
      if ((st = unsupported_node(c, np, names[i], "unknown domain '%s'", np->domain)) != SC_OK)
        return st;
      continue;
    }
    for (size_t j = 0; j < np->n_input; j++)
      if (!np->input[j]) return sc_onnx_error(c, SC_ERR_INVALID, "input %zu missing", j);
    for (size_t j = 0; j < np->n_output; j++)
      if (!np->output[j])
        return sc_onnx_error(c, SC_ERR_INVALID, "output %zu missing", j);
    if (strcmp(np->op_type, "Constant") == 0) {
      if (np->n_output != 1 || !np->output[0][0])
        return sc_onnx_error(c, SC_ERR_INVALID, "Constant needs exactly one output");
      sc_onnx_tensor ot;
      int32_t vid;
      if ((st = read_constant(c, np, &ot)) != SC_OK) return st;
      if ((st = define_output(c, np->output[0], &vid)) != SC_OK) return st;
      if ((st = set_const(c, vid, &ot, 0)) != SC_OK) return st;
      continue;
    }
    sc_op op = sc_op_lookup(np->op_type);
    if (op == SC_OP_COUNT || (sc_ops[op].flags & SC_OPF_INTERNAL)) {
      if ((st = unsupported_node(c, np, names[i], "unsupported op '%s'", np->op_type)) != SC_OK)
        return st;
      continue;
    }
    const sc_op_info *info = &sc_ops[op];
    /* a composite op means the same at every opset (other ops define it),
     * so the com.microsoft adapters may emit one at any */
    if (info->since > g->opset && !(info->flags & SC_OPF_COMPOSITE))
      return sc_onnx_error(c, SC_ERR_INVALID, "%s needs opset %d, the model imports %lld",
                           np->op_type, info->since, (long long)g->opset);
    if ((int64_t)np->n_input < info->min_in ||
        (info->max_in >= 0 && (int64_t)np->n_input > info->max_in))
      return sc_onnx_error(c, SC_ERR_INVALID, "%zu inputs (%s takes %d to %d)",
                           np->n_input, np->op_type, info->min_in, info->max_in);
    if ((int64_t)np->n_output < info->min_out ||
        (info->max_out >= 0 && (int64_t)np->n_output > info->max_out))
      return sc_onnx_error(c, SC_ERR_INVALID, "%zu outputs (%s gives %d to %d)",
                           np->n_output, np->op_type, info->min_out, info->max_out);
    int32_t *ins = sc_arena_array(&g->arena, np->n_input, sizeof(int32_t));
    int32_t *outs = sc_arena_array(&g->arena, np->n_output, sizeof(int32_t));
    if (!ins || !outs) goto nomem;
    for (size_t j = 0; j < np->n_input; j++) ins[j] = -1;
    for (size_t j = 0; j < np->n_input && (int64_t)j < info->min_in; j++)
      if (!np->input[j][0])
        return sc_onnx_error(c, SC_ERR_INVALID, "required input %zu has no name", j);
    for (size_t j = 0; j < np->n_output; j++) {
      outs[j] = -1;
      if (!np->output[j][0] && (int64_t)j < info->min_out)
        return sc_onnx_error(c, SC_ERR_INVALID, "required output %zu has no name", j);
      if (np->output[j][0] && (st = define_output(c, np->output[j], &outs[j])) != SC_OK)
        return st;
    }
    int32_t id = sc_graph_add_node(g, op, names[i], ins, (int32_t)np->n_input, outs,
                                   (int32_t)np->n_output);
    if (id < 0) return from_graph(c, SC_ERR_NOMEM);
    node_id[i] = id;
    for (size_t j = 0; j < np->n_attribute; j++)
      if ((st = read_attr(c, id, np->attribute[j])) != SC_OK) return st;
  }

  /* every unsupported node listed: fail as the first one did */
  if (c->unsupported && c->unsupported->n > 0 && c->diag->status != SC_OK)
    return c->diag->status;

  /* nodes, pass 2: inputs by name */
  for (size_t i = 0; i < nn; i++) {
    if (node_id[i] < 0) continue;
    const Onnx__NodeProto *np = gp->node[i];
    c->cur_node = names[i];
    c->cur_op = np->op_type;
    sc_node *n = sc_nod(g, node_id[i]);
    for (size_t j = 0; j < np->n_input; j++) {
      if (!np->input[j][0]) continue; /* omitted optional input */
      int32_t vid = sc_graph_find_value(g, np->input[j]);
      if (vid < 0 && sub && (vid = outer_value(c, np->input[j])) < 0) return c->diag->status;
      if (vid < 0)
        return sc_onnx_error(c, SC_ERR_INVALID,
                             "input '%s' is not produced by any node, nor a graph input "
                             "or initializer", np->input[j]);
      n->inputs[j] = vid;
    }
  }
  c->cur_node = c->cur_op = NULL;

  /* graph outputs */
  for (size_t i = 0; i < gp->n_output; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    if (!vi || !vi->name || !vi->name[0])
      return sc_onnx_error(c, SC_ERR_INVALID, "graph output %zu has no name", i);
    int32_t vid = sc_graph_find_value(g, vi->name);
    if (vid < 0 && sub && (vid = outer_value(c, vi->name)) < 0) return c->diag->status;
    if (vid < 0)
      return sc_onnx_error(c, SC_ERR_INVALID,
                           "graph output '%s' is not produced by any node", vi->name);
    /* a computed output takes its declared type (inference checks/replaces it) */
    if (!sub && sc_val(g, vid)->producer >= 0 && vi->type &&
        (st = read_value_type(c, vi, vid, "graph output")) != SC_OK)
      return st;
    if (sc_graph_add_output(g, vid) != SC_OK) return from_graph(c, SC_ERR_NOMEM);
  }

  if (sc_graph_toposort(g) != SC_OK) return from_graph(c, SC_ERR_INVALID);
  return SC_OK;
nomem:
  sc_free(ns.slot);
  return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
}

sc_status sc_onnx_nodes_push(sc_onnx_ctx *c, sc_onnx_nodes *l, Onnx__NodeProto *np) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    Onnx__NodeProto **x = sc_realloc(l->v, cap * sizeof *x);
    if (!x) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    l->v = x;
    l->cap = cap;
  }
  l->v[l->n++] = np;
  return SC_OK;
}

sc_status sc_onnx_nodes_finish(sc_onnx_ctx *c, sc_onnx_nodes *l, sc_status st,
                               const Onnx__GraphProto **gp) {
  Onnx__GraphProto *ng = st == SC_OK ? sc_arena_array(&c->g->arena, 1, sizeof *ng) : NULL;
  Onnx__NodeProto **nodes = ng ? sc_arena_array(&c->g->arena, l->n + 1, sizeof *nodes) : NULL;
  if (st == SC_OK && (!ng || !nodes)) st = sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  if (st == SC_OK) {
    c->cur_node = c->cur_op = NULL;
    if (l->n) memcpy(nodes, l->v, l->n * sizeof *nodes);
    *ng = **gp;
    ng->node = nodes;
    ng->n_node = l->n;
    *gp = ng;
  }
  sc_free(l->v);
  memset(l, 0, sizeof *l);
  return st;
}

static void free_model(void *p) { onnx__model_proto__free_unpacked(p, NULL); }

/* protobuf-c's allocator for the unpack: malloc and free, as its default
 * (free_model frees with that), and a note of a request that failed, so
 * that a model that did not fit in memory is not called malformed. */
static void *unpack_alloc(void *ud, size_t n) {
  void *p = malloc(n);
  if (!p && *(size_t *)ud < n) *(size_t *)ud = n;
  return p;
}
static void unpack_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

static sc_status import_buffer(const uint8_t *data, size_t size, const char *base_dir,
                               const sc_import_opts *opts, sc_graph **out,
                               sc_diag *diag) {
  sc_onnx_ctx c = {0};
  c.diag = diag;
  c.no_weights = opts && opts->no_weights;
  c.unsupported = opts ? opts->unsupported : NULL;
  c.base_dir = base_dir;
  if (size == 0 || !data)
    return sc_onnx_error(&c, SC_ERR_PARSE, "not a valid ONNX model (empty file)");
  if (!sc_onnx_depth_ok(data, size))
    return sc_onnx_error(&c, SC_ERR_LIMIT,
                         "not a valid ONNX model: messages nest deeper than %d levels",
                         SC_ONNX_MAX_DEPTH);
  size_t failed = 0;
  ProtobufCAllocator pa = {unpack_alloc, unpack_free, &failed};
  Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, size, data);
  if (!m && failed)
    return sc_onnx_error(&c, SC_ERR_NOMEM, "out of memory: needed %zu bytes for decoding the model",
                         failed);
  if (!m) return sc_onnx_error(&c, SC_ERR_PARSE, "not a valid ONNX model");
  if (!m->graph) {
    onnx__model_proto__free_unpacked(m, NULL);
    return sc_onnx_error(&c, SC_ERR_PARSE, "not a valid ONNX model (no graph)");
  }
  c.g = sc_graph_create(m->graph->name && m->graph->name[0] ? m->graph->name : "main");
  if (!c.g) {
    onnx__model_proto__free_unpacked(m, NULL);
    return sc_onnx_error(&c, SC_ERR_NOMEM, "out of memory");
  }
  sc_status st = sc_graph_add_cleanup(c.g, free_model, m); /* frees m on failure */
  if (st == SC_OK) st = import_graph(&c, m);
  else st = sc_onnx_error(&c, SC_ERR_NOMEM, "out of memory");
  sc_onnx_ctx_free(&c);
  if (st != SC_OK) {
    if (diag->status == SC_OK) sc_onnx_error(&c, st, "import failed");
    sc_graph_destroy(c.g);
    return st;
  }
  sc_diag_clear(&c.g->diag);
  *out = c.g;
  return SC_OK;
}

sc_status sc_onnx_import_bytes(const void *data, size_t size, const char *name,
                               const char *base_dir, const sc_import_opts *opts,
                               sc_graph **out, sc_diag *diag) {
  sc_diag local = {0};
  if (!diag) diag = &local;
  memset(diag, 0, sizeof *diag);
  sc_diag_set_file(diag, name ? name : "");
  *out = NULL;
  return import_buffer(data, size, base_dir, opts, out, diag);
}

sc_status sc_onnx_import(const char *path, const sc_import_opts *opts, sc_graph **out,
                         sc_diag *diag) {
  sc_diag local = {0};
  if (!diag) diag = &local;
  memset(diag, 0, sizeof *diag);
  sc_diag_set_file(diag, path);
  *out = NULL;
  /* a regular file (ir/fileio.h: a FIFO or device is refused, not waited on) */
  int fd;
  int64_t file_bytes;
  sc_status ost = sc_file_open_regular(path, NULL, (int64_t)(SIZE_MAX / 2), &fd, &file_bytes, diag);
  if (ost != SC_OK) return ost;
  if (file_bytes == 0) {
    close(fd);
    return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL, "not a valid ONNX model (empty file)");
  }
  size_t size = (size_t)file_bytes;
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED && errno == ENOMEM)
    return sc_diag_nomem(diag, size, "mapping the model");
  if (map == MAP_FAILED)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "cannot map: %s", strerror(errno));

  /* external data lives next to the model */
  const char *slash = strrchr(path, '/');
  char *dir = slash ? sc_malloc((size_t)(slash - path) + 2) : sc_strdup(".");
  if (!dir) {
    munmap(map, size);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  if (slash) {
    size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/m.onnx" → "/" */
    memcpy(dir, path, n);
    dir[n] = 0;
  }
  /* protobuf-c copies what it decodes, so the file mapping ends here */
  sc_status st = import_buffer(map, size, dir, opts, out, diag);
  munmap(map, size);
  sc_free(dir);
  return st;
}
