/* test_frontend.c — ONNX import/export.
 *
 * Test models are built here with the protobuf-c API (tb_* helpers) and
 * packed, so the tests need no files but the ones they write into a fresh
 * temporary folder. Expected values are the bytes the test put into the
 * model, never something the importer computed.
 *
 * roundtrip_dir imports every *.onnx in $SC_ROUNDTRIP_IN (default: the
 * samples folder), exports it into $SC_ROUNDTRIP_OUT (default:
 * $SC_BINARY_DIR/roundtrip), imports the export again and compares the two
 * graphs. tests/models/test_roundtrip.py runs just that test (through
 * SC_TEST_FILTER, a cmocka test filter) on models it generates with
 * onnx.helper, then checks the exported files with onnx.checker. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_skip.h"

#include "frontend/onnx.h"
#include "onnx.pb-c.h"

/* ---- random numbers (seeded) ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float rndf(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 20.0 - 10.0); }

/* ---- model builder ---- */

typedef struct tb {
  sc_arena a;
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto os;
  Onnx__OperatorSetIdProto *osp[1];
} tb;

static void push(sc_arena *a, void *arrp, size_t *n, void *item) {
  void ***arr = arrp;
  void **na = sc_arena_array(a, *n + 1, sizeof(void *));
  assert_non_null(na);
  if (*n) memcpy(na, *arr, *n * sizeof(void *));
  na[(*n)++] = item;
  *arr = na;
}

static char *tb_str(tb *b, const char *s) { return sc_arena_strdup(&b->a, s); }

static void tb_init(tb *b, int64_t opset) {
  memset(b, 0, sizeof *b);
  sc_arena_init(&b->a);
  onnx__model_proto__init(&b->m);
  onnx__graph_proto__init(&b->g);
  onnx__operator_set_id_proto__init(&b->os);
  b->os.domain = tb_str(b, "");
  b->os.has_version = 1;
  b->os.version = opset;
  b->osp[0] = &b->os;
  b->m.n_opset_import = 1;
  b->m.opset_import = b->osp;
  b->m.has_ir_version = 1;
  b->m.ir_version = 8;
  b->m.producer_name = tb_str(b, "test_frontend");
  b->m.graph = &b->g;
  b->g.name = tb_str(b, "tg");
}

static void tb_free(tb *b) { sc_arena_free(&b->a); }

static Onnx__TensorProto *tb_tensor(tb *b, const char *name, int32_t dtype, int rank,
                                    const int64_t *dims) {
  Onnx__TensorProto *t = sc_arena_alloc(&b->a, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = tb_str(b, name);
  t->has_data_type = 1;
  t->data_type = dtype;
  t->n_dims = (size_t)rank;
  t->dims = sc_arena_array(&b->a, (size_t)rank + 1, sizeof(int64_t));
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  return t;
}

static void tb_raw(tb *b, Onnx__TensorProto *t, const void *data, size_t n) {
  t->has_raw_data = 1;
  t->raw_data.len = n;
  t->raw_data.data = sc_arena_alloc(&b->a, n + 1);
  if (n) memcpy(t->raw_data.data, data, n);
}

static void tb_ext(tb *b, Onnx__TensorProto *t, const char *loc, long long off,
                   long long len) {
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *keys[3] = {"location", "offset", "length"};
  char vals[3][64];
  snprintf(vals[0], 64, "%s", loc);
  snprintf(vals[1], 64, "%lld", off);
  snprintf(vals[2], 64, "%lld", len);
  for (int i = 0; i < 3; i++) {
    if ((i == 1 && off < 0) || (i == 2 && len < 0)) continue;
    Onnx__StringStringEntryProto *e = sc_arena_alloc(&b->a, sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = tb_str(b, keys[i]);
    e->value = tb_str(b, i == 0 ? loc : vals[i]);
    push(&b->a, &t->external_data, &t->n_external_data, e);
  }
}

static void tb_initializer(tb *b, Onnx__TensorProto *t) {
  push(&b->a, &b->g.initializer, &b->g.n_initializer, t);
}

static Onnx__ValueInfoProto *tb_vi(tb *b, const char *name, int32_t elem, int rank,
                                   const int64_t *dims, const char *const *params) {
  Onnx__ValueInfoProto *vi = sc_arena_alloc(&b->a, sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = tb_str(b, name);
  Onnx__TypeProto *tp = sc_arena_alloc(&b->a, sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor *tt = sc_arena_alloc(&b->a, sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  vi->type = tp;
  if (rank < 0) return vi;
  Onnx__TensorShapeProto *sh = sc_arena_alloc(&b->a, sizeof *sh);
  onnx__tensor_shape_proto__init(sh);
  tt->shape = sh;
  for (int d = 0; d < rank; d++) {
    Onnx__TensorShapeProto__Dimension *dim = sc_arena_alloc(&b->a, sizeof *dim);
    onnx__tensor_shape_proto__dimension__init(dim);
    if (params && params[d]) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim->dim_param = tb_str(b, params[d]);
    } else if (dims[d] != INT64_MIN) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = dims[d];
    }
    push(&b->a, &sh->dim, &sh->n_dim, dim);
  }
  return vi;
}

static void tb_input(tb *b, const char *name, int32_t elem, int rank, const int64_t *dims,
                     const char *const *params) {
  push(&b->a, &b->g.input, &b->g.n_input, tb_vi(b, name, elem, rank, dims, params));
}

static void tb_output(tb *b, const char *name, int32_t elem) {
  push(&b->a, &b->g.output, &b->g.n_output, tb_vi(b, name, elem, -1, NULL, NULL));
}

/* ins/outs: comma-separated names; an empty item is an omitted optional one */
static void split_names(tb *b, const char *list, char ***arr, size_t *n) {
  if (!list) return;
  const char *p = list;
  for (;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    push(&b->a, arr, n, sc_arena_strndup(&b->a, p, len));
    if (!e) break;
    p = e + 1;
  }
}

static Onnx__NodeProto *tb_node(tb *b, const char *op, const char *name, const char *ins,
                                const char *outs) {
  Onnx__NodeProto *n = sc_arena_alloc(&b->a, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = tb_str(b, op);
  n->name = tb_str(b, name ? name : "");
  n->domain = tb_str(b, "");
  split_names(b, ins, &n->input, &n->n_input);
  split_names(b, outs, &n->output, &n->n_output);
  push(&b->a, &b->g.node, &b->g.n_node, n);
  return n;
}

static Onnx__AttributeProto *tb_attr(tb *b, Onnx__NodeProto *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = sc_arena_alloc(&b->a, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = tb_str(b, name);
  a->has_type = 1;
  a->type = type;
  push(&b->a, &n->attribute, &n->n_attribute, a);
  return a;
}

static uint8_t *tb_pack(tb *b, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&b->m);
  uint8_t *buf = malloc(*len + 1);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(&b->m, buf), *len);
  return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void tb_write(tb *b, const char *path) {
  size_t n;
  uint8_t *buf = tb_pack(b, &n);
  write_file(path, buf, n);
  free(buf);
}

/* Imports the builder's model from memory. */
static sc_status tb_import(tb *b, bool no_weights, sc_graph **g, sc_diag *d) {
  size_t n;
  uint8_t *buf = tb_pack(b, &n);
  sc_import_opts o = {.no_weights = no_weights};
  sc_status st = sc_onnx_import_bytes(buf, n, "mem.onnx", NULL, &o, g, d);
  free(buf);
  if (st != SC_OK) assert_null(*g);
  return st;
}

static void expect_error(tb *b, sc_status want, const char *node, const char *msg_part) {
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_status st = tb_import(b, false, &g, &d);
  if (st != want || (msg_part && !strstr(d.msg, msg_part)) ||
      (node && strcmp(d.node, node) != 0))
    print_error("got status %d node '%s' msg '%s'\n", st, d.node, d.msg);
  assert_int_equal(st, want);
  assert_string_equal(d.file, "mem.onnx");
  if (node) assert_string_equal(d.node, node);
  if (msg_part) assert_non_null(strstr(d.msg, msg_part));
  sc_graph_destroy(g);
}

static char tmp_root[512];

static void make_tmpdir(char *out, size_t n, const char *tag) {
  snprintf(out, n, "%s/%s_XXXXXX", tmp_root, tag);
  assert_non_null(mkdtemp(out));
}

/* ---- dtypes ---- */

typedef struct dt_case {
  int32_t onnx;
  sc_dtype dt;
  unsigned size;
} dt_case;

static const dt_case dt_cases[] = {
    {1, SC_DTYPE_F32, 4},  {10, SC_DTYPE_F16, 2}, {16, SC_DTYPE_BF16, 2},
    {11, SC_DTYPE_F64, 8}, {3, SC_DTYPE_I8, 1},   {5, SC_DTYPE_I16, 2},
    {6, SC_DTYPE_I32, 4},  {7, SC_DTYPE_I64, 8},  {2, SC_DTYPE_U8, 1},
    {4, SC_DTYPE_U16, 2},  {12, SC_DTYPE_U32, 4}, {13, SC_DTYPE_U64, 8},
    {9, SC_DTYPE_BOOL, 1},
};

enum { DT_N = 6 };

/* Random values of the case's type: expected LE bytes in `bytes`, and the
 * typed-field form filled into t. */
static void dt_values(tb *b, const dt_case *c, uint8_t *bytes, Onnx__TensorProto *t) {
  int32_t *i32 = sc_arena_array(&b->a, DT_N, sizeof *i32);
  for (int i = 0; i < DT_N; i++) {
    uint64_t r = rnd();
    switch (c->dt) {
    case SC_DTYPE_F32: { float f = rndf(); memcpy(bytes + 4 * i, &f, 4); break; }
    case SC_DTYPE_F64: { double f = rndf() * 1.000001; memcpy(bytes + 8 * i, &f, 8); break; }
    case SC_DTYPE_F16: { uint16_t h = sc_f32_to_f16(rndf()); memcpy(bytes + 2 * i, &h, 2); i32[i] = h; break; }
    case SC_DTYPE_BF16: { uint16_t h = sc_f32_to_bf16(rndf()); memcpy(bytes + 2 * i, &h, 2); i32[i] = h; break; }
    case SC_DTYPE_I8: { int8_t v = (int8_t)r; bytes[i] = (uint8_t)v; i32[i] = v; break; }
    case SC_DTYPE_U8: { uint8_t v = (uint8_t)r; bytes[i] = v; i32[i] = v; break; }
    case SC_DTYPE_BOOL: { uint8_t v = r & 1; bytes[i] = v; i32[i] = v; break; }
    case SC_DTYPE_I16: { int16_t v = (int16_t)r; memcpy(bytes + 2 * i, &v, 2); i32[i] = v; break; }
    case SC_DTYPE_U16: { uint16_t v = (uint16_t)r; memcpy(bytes + 2 * i, &v, 2); i32[i] = v; break; }
    case SC_DTYPE_I32: { int32_t v = (int32_t)r; memcpy(bytes + 4 * i, &v, 4); i32[i] = v; break; }
    case SC_DTYPE_U32: { uint32_t v = (uint32_t)r; memcpy(bytes + 4 * i, &v, 4); break; }
    case SC_DTYPE_I64: { int64_t v = (int64_t)r; memcpy(bytes + 8 * i, &v, 8); break; }
    case SC_DTYPE_U64: memcpy(bytes + 8 * i, &r, 8); break;
    default: fail();
    }
  }
  switch (c->dt) {
  case SC_DTYPE_F32:
    t->n_float_data = DT_N;
    t->float_data = sc_arena_array(&b->a, DT_N, 4);
    memcpy(t->float_data, bytes, DT_N * 4);
    break;
  case SC_DTYPE_F64:
    t->n_double_data = DT_N;
    t->double_data = sc_arena_array(&b->a, DT_N, 8);
    memcpy(t->double_data, bytes, DT_N * 8);
    break;
  case SC_DTYPE_I64:
    t->n_int64_data = DT_N;
    t->int64_data = sc_arena_array(&b->a, DT_N, 8);
    memcpy(t->int64_data, bytes, DT_N * 8);
    break;
  case SC_DTYPE_U64:
  case SC_DTYPE_U32:
    t->n_uint64_data = DT_N;
    t->uint64_data = sc_arena_array(&b->a, DT_N, 8);
    for (int i = 0; i < DT_N; i++) {
      if (c->dt == SC_DTYPE_U64) memcpy(&t->uint64_data[i], bytes + 8 * i, 8);
      else { uint32_t v; memcpy(&v, bytes + 4 * i, 4); t->uint64_data[i] = v; }
    }
    break;
  default:
    t->n_int32_data = DT_N;
    t->int32_data = i32;
  }
}

static void build_dtype_model(tb *b, const dt_case *c, bool raw, uint8_t *expect) {
  tb_init(b, 17);
  int64_t dims[2] = {2, 3};
  Onnx__TensorProto *t = tb_tensor(b, "w", c->onnx, 2, dims);
  Onnx__TensorProto scratch;
  onnx__tensor_proto__init(&scratch);
  dt_values(b, c, expect, raw ? &scratch : t);
  if (raw) tb_raw(b, t, expect, DT_N * c->size);
  tb_initializer(b, t);
  tb_node(b, "Identity", "id", "w", "y");
  tb_output(b, "y", c->onnx);
}

static void test_dtypes(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof dt_cases / sizeof dt_cases[0]; k++) {
    const dt_case *c = &dt_cases[k];
    for (int raw = 0; raw < 2; raw++) {
      tb b;
      uint8_t expect[DT_N * 8];
      build_dtype_model(&b, c, raw, expect);
      sc_graph *g = NULL;
      sc_diag d = {0};
      sc_status st = tb_import(&b, false, &g, &d);
      if (st != SC_OK) print_error("%s raw=%d: %s\n", sc_dtype_name(c->dt), raw, d.msg);
      assert_int_equal(st, SC_OK);
      int32_t w = sc_graph_find_value(g, "w");
      assert_true(w >= 0);
      const sc_value *v = sc_val(g, w);
      assert_int_equal(v->dtype, c->dt);
      assert_int_equal(v->rank, 2);
      assert_int_equal(v->dims[0], 2);
      assert_int_equal(v->dims[1], 3);
      assert_true((v->flags & (SC_VALUE_CONST | SC_VALUE_PARAM)) ==
                  (SC_VALUE_CONST | SC_VALUE_PARAM));
      assert_int_equal(v->data_bytes, DT_N * c->size);
      assert_non_null(v->data);
      assert_memory_equal(v->data, expect, DT_N * c->size);
      assert_int_equal(v->data_kind, raw ? SC_DATA_BORROWED : SC_DATA_ARENA);
      assert_int_equal(g->n_nodes, 1);
      assert_int_equal(g->nodes[0].op, SC_OP_IDENTITY);
      assert_int_equal(g->opset, 17);
      assert_int_equal(g->ir_version, 8);
      assert_string_equal(g->producer, "test_frontend");
      sc_graph_destroy(g);

      /* one byte / one value too few, one too many */
      Onnx__TensorProto *t = b.g.initializer[0];
      if (raw) {
        t->raw_data.len--;
        expect_error(&b, SC_ERR_INVALID, NULL, "raw_data has");
        t->raw_data.len += 2;
        expect_error(&b, SC_ERR_INVALID, NULL, "raw_data has");
      } else {
        size_t *cnt = t->n_float_data    ? &t->n_float_data
                      : t->n_double_data ? &t->n_double_data
                      : t->n_int64_data  ? &t->n_int64_data
                      : t->n_uint64_data ? &t->n_uint64_data
                                         : &t->n_int32_data;
        (*cnt)--;
        expect_error(&b, SC_ERR_INVALID, NULL, "its shape needs 6");
      }
      tb_free(&b);
    }
  }
}

static void test_bad_tensors(void **state) {
  (void)state;
  tb b;
  int64_t dims[SC_MAX_RANK + 1];
  float f[4] = {1.5f, -2.25f, 3.0f, 4.75f};

  /* string tensors */
  tb_init(&b, 17);
  dims[0] = 1;
  Onnx__TensorProto *t = tb_tensor(&b, "s", 8, 1, dims);
  tb_raw(&b, t, "x", 1);
  tb_initializer(&b, t);
  tb_output(&b, "s", 8);
  expect_error(&b, SC_ERR_UNSUPPORTED, NULL, "string tensors");
  t->data_type = 99; /* unknown dtype */
  expect_error(&b, SC_ERR_UNSUPPORTED, NULL, "unknown element type 99");
  t->data_type = 14; /* complex64 */
  expect_error(&b, SC_ERR_UNSUPPORTED, NULL, "not supported");
  t->has_data_type = 0;
  expect_error(&b, SC_ERR_INVALID, NULL, "element type is not set");
  tb_free(&b);

  /* negative dim, overflowing element count, rank above the limit */
  tb_init(&b, 17);
  dims[0] = -4;
  t = tb_tensor(&b, "w", 1, 1, dims);
  tb_raw(&b, t, f, 16);
  tb_initializer(&b, t);
  tb_output(&b, "w", 1);
  expect_error(&b, SC_ERR_INVALID, NULL, "negative dim");
  t->n_dims = 2;
  t->dims[0] = INT64_C(1) << 40;
  t->dims[1] = INT64_C(1) << 40;
  expect_error(&b, SC_ERR_LIMIT, NULL, "overflows");
  t->dims[0] = INT64_MAX;
  t->dims[1] = 3;
  expect_error(&b, SC_ERR_LIMIT, NULL, "overflows");
  for (int i = 0; i < SC_MAX_RANK + 1; i++) dims[i] = 1;
  t->dims = dims;
  t->n_dims = SC_MAX_RANK + 1;
  expect_error(&b, SC_ERR_LIMIT, NULL, "rank 9");
  /* typed data in the wrong field */
  t->n_dims = 1;
  dims[0] = 4;
  t->has_raw_data = 0;
  t->n_int64_data = 4;
  t->int64_data = (int64_t[]){1, 2, 3, 4};
  expect_error(&b, SC_ERR_INVALID, NULL, "int64_data");
  /* both raw and typed */
  t->has_raw_data = 1;
  expect_error(&b, SC_ERR_INVALID, NULL, "more than one way");
  tb_free(&b);
}

/* ---- Constant nodes, attributes, names ---- */

static void test_constants(void **state) {
  (void)state;
  tb b;
  tb_init(&b, 17);
  int64_t d3[1] = {3};
  float fv[3] = {rndf(), rndf(), rndf()};
  int64_t iv[3] = {(int64_t)rnd(), -7, 11};
  Onnx__NodeProto *n = tb_node(&b, "Constant", "c_tensor", NULL, "ct");
  Onnx__AttributeProto *a = tb_attr(&b, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  a->t = tb_tensor(&b, "", 1, 1, d3);
  tb_raw(&b, a->t, fv, sizeof fv);
  n = tb_node(&b, "Constant", "", NULL, "cf");
  a = tb_attr(&b, n, "value_float", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = fv[1];
  n = tb_node(&b, "Constant", "", NULL, "cfs");
  a = tb_attr(&b, n, "value_floats", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = 3;
  a->floats = fv;
  n = tb_node(&b, "Constant", "", NULL, "ci");
  a = tb_attr(&b, n, "value_int", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = iv[0];
  n = tb_node(&b, "Constant", "", NULL, "cis");
  a = tb_attr(&b, n, "value_ints", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = 3;
  a->ints = iv;
  tb_node(&b, "Add", "", "ct,cf", "s");
  tb_node(&b, "Add", "", "ci,cis", "t");
  tb_node(&b, "Mul", "", "s,cfs", "u");
  tb_output(&b, "u", 1);
  tb_output(&b, "t", 7);

  sc_graph *g = NULL;
  sc_diag d = {0};
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  assert_int_equal(g->n_nodes, 3); /* Constants are values, not nodes */
  for (int32_t i = 0; i < g->n_nodes; i++) assert_int_not_equal(g->nodes[i].op, SC_OP_CONSTANT);
  struct { const char *name; sc_dtype dt; int rank; const void *data; size_t bytes; } want[] = {
      {"ct", SC_DTYPE_F32, 1, fv, 12},     {"cf", SC_DTYPE_F32, 0, &fv[1], 4},
      {"cfs", SC_DTYPE_F32, 1, fv, 12},    {"ci", SC_DTYPE_I64, 0, iv, 8},
      {"cis", SC_DTYPE_I64, 1, iv, 24}};
  for (size_t i = 0; i < 5; i++) {
    int32_t id = sc_graph_find_value(g, want[i].name);
    assert_true(id >= 0);
    const sc_value *v = sc_val(g, id);
    assert_true(v->flags & SC_VALUE_CONST);
    assert_false(v->flags & SC_VALUE_PARAM);
    assert_int_equal(v->producer, -1);
    assert_int_equal(v->dtype, want[i].dt);
    assert_int_equal(v->rank, want[i].rank);
    if (want[i].rank == 1) assert_int_equal(v->dims[0], 3);
    assert_int_equal(v->data_bytes, want[i].bytes);
    assert_memory_equal(v->data, want[i].data, want[i].bytes);
  }
  sc_graph_destroy(g);

  /* a Constant with two value attributes, with a string */
  a = tb_attr(&b, b.g.node[1], "value_int", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  expect_error(&b, SC_ERR_INVALID, "Constant_1", "exactly one");
  b.g.node[1]->n_attribute = 1;
  b.g.node[1]->attribute[0]->name = tb_str(&b, "value_string");
  expect_error(&b, SC_ERR_UNSUPPORTED, "Constant_1", "value_string");
  tb_free(&b);
}

static void test_attrs_and_names(void **state) {
  (void)state;
  tb b;
  tb_init(&b, 17);
  int64_t dims[2] = {2, 3};
  tb_input(&b, "x", 1, 2, dims, NULL);
  /* explicit unique name kept; missing and duplicate names generated */
  Onnx__NodeProto *n = tb_node(&b, "Relu", "r", "x", "a");
  tb_node(&b, "Relu", "", "a", "b2");
  tb_node(&b, "Relu", "r", "b2", "c");
  tb_node(&b, "Relu", "", "c", "Relu_3"); /* a value, not a node: no clash */
  n = tb_node(&b, "Clip", "clip", "Relu_3,,", "y"); /* omitted optional inputs */
  Onnx__AttributeProto *a;
  a = tb_attr(&b, n, "f", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1, a->f = 0.375f;
  a = tb_attr(&b, n, "i", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1, a->i = -(INT64_C(1) << 40);
  a = tb_attr(&b, n, "s", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1, a->s.data = (uint8_t *)"hello", a->s.len = 5;
  a = tb_attr(&b, n, "fs", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = 2, a->floats = (float[]){1.5f, -0.5f};
  a = tb_attr(&b, n, "is", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = 3, a->ints = (int64_t[]){4, -5, 6};
  a = tb_attr(&b, n, "ss", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  a->n_strings = 2;
  a->strings = (ProtobufCBinaryData[]){{2, (uint8_t *)"ab"}, {0, (uint8_t *)""}};
  a = tb_attr(&b, n, "t", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  int64_t d1[1] = {2};
  a->t = tb_tensor(&b, "", 7, 1, d1);
  int64_t tv[2] = {42, -42};
  tb_raw(&b, a->t, tv, 16);
  a = tb_attr(&b, n, "ts", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS);
  a->n_tensors = 2;
  a->tensors = sc_arena_array(&b.a, 2, sizeof(void *));
  a->tensors[0] = tb_tensor(&b, "", 7, 1, d1);
  tb_raw(&b, a->tensors[0], tv, 16);
  a->tensors[1] = tb_tensor(&b, "", 1, 0, NULL);
  a->tensors[1]->n_float_data = 1;
  a->tensors[1]->float_data = (float[]){2.5f};
  a = tb_attr(&b, n, "g", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
  a = tb_attr(&b, n, "gs", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS);
  a = tb_attr(&b, n, "sp", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR);
  a = tb_attr(&b, n, "sps", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS);
  a = tb_attr(&b, n, "tp", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO);
  a = tb_attr(&b, n, "tps", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS);
  tb_output(&b, "y", 1);

  sc_graph *g = NULL;
  sc_diag d = {0};
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  assert_int_equal(g->n_nodes, 5);
  assert_string_equal(g->nodes[0].name, "r");
  assert_string_equal(g->nodes[1].name, "Relu_1");
  assert_string_equal(g->nodes[2].name, "Relu_2");
  assert_string_equal(g->nodes[3].name, "Relu_3");
  sc_node *clip = &g->nodes[4];
  assert_int_equal(clip->op, SC_OP_CLIP);
  assert_int_equal(clip->n_inputs, 3);
  assert_int_equal(clip->inputs[0], sc_graph_find_value(g, "Relu_3"));
  assert_int_equal(clip->inputs[1], -1);
  assert_int_equal(clip->inputs[2], -1);
  assert_int_equal(clip->n_attrs, 14);
  assert_true(sc_attr_float(g, clip, "f", 0) == 0.375);
  assert_int_equal(sc_attr_int(g, clip, "i", 0), -(INT64_C(1) << 40));
  assert_string_equal(sc_attr_string(g, clip, "s", ""), "hello");
  const double *fs;
  assert_int_equal(sc_attr_floats(g, clip, "fs", &fs), 2);
  assert_true(fs[0] == 1.5 && fs[1] == -0.5);
  const int64_t *is;
  assert_int_equal(sc_attr_ints(g, clip, "is", &is), 3);
  assert_true(is[0] == 4 && is[1] == -5 && is[2] == 6);
  const sc_attr *ss = sc_node_attr(clip, "ss");
  assert_int_equal(ss->kind, SC_ATTR_STRINGS);
  assert_int_equal(ss->n, 2);
  assert_string_equal(ss->strings[0], "ab");
  assert_string_equal(ss->strings[1], "");
  const sc_tensor *t = sc_attr_tensor(g, clip, "t");
  assert_non_null(t);
  assert_int_equal(t->dtype, SC_DTYPE_I64);
  assert_memory_equal(t->data, tv, 16);
  const sc_attr *ts = sc_node_attr(clip, "ts");
  assert_int_equal(ts->kind, SC_ATTR_TENSORS);
  assert_int_equal(ts->n, 2);
  assert_int_equal(ts->t[1].rank, 0);
  assert_true(*(const float *)ts->t[1].data == 2.5f);
  const char *kinds[] = {"g", "gs", "sp", "sps", "tp", "tps"};
  sc_attr_kind kk[] = {SC_ATTR_GRAPH, SC_ATTR_GRAPHS, SC_ATTR_SPARSE_TENSOR,
                       SC_ATTR_SPARSE_TENSORS, SC_ATTR_TYPE_PROTO, SC_ATTR_TYPE_PROTOS};
  for (int i = 0; i < 6; i++) assert_int_equal(sc_node_attr(clip, kinds[i])->kind, kk[i]);

  /* export refuses a GRAPH attribute, naming the node */
  char path[600];
  snprintf(path, sizeof path, "%s/attrs.onnx", tmp_root);
  assert_int_equal(sc_onnx_export(g, path, &d), SC_ERR_UNSUPPORTED);
  assert_string_equal(d.node, "clip");
  assert_non_null(strstr(d.msg, "'g'"));
  sc_graph_destroy(g);
  tb_free(&b);
}

/* ---- symbolic dims ---- */

static void test_symbolic_dims(void **state) {
  (void)state;
  tb b;
  tb_init(&b, 18);
  int64_t dims[3] = {0, INT64_MIN, 3};
  const char *params[3] = {"batch", NULL, NULL};
  tb_input(&b, "x", 1, 3, dims, params);
  tb_node(&b, "Relu", NULL, "x", "y");
  tb_output(&b, "y", 1);
  sc_graph *g = NULL;
  sc_diag d = {0};
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  assert_int_equal(g->n_inputs, 1);
  const sc_value *x = sc_val(g, g->inputs[0]);
  assert_true(x->flags & SC_VALUE_INPUT);
  assert_int_equal(x->dtype, SC_DTYPE_F32);
  assert_int_equal(x->rank, 3);
  assert_int_equal(x->dims[0], SC_DIM_UNKNOWN);
  assert_int_equal(x->dims[1], SC_DIM_UNKNOWN);
  assert_int_equal(x->dims[2], 3);
  assert_non_null(x->dim_param);
  assert_string_equal(x->dim_param[0], "batch");
  assert_null(x->dim_param[1]);
  assert_null(x->dim_param[2]);
  assert_int_equal(sc_graph_bind_dim(g, "batch", 5), 1);
  assert_int_equal(x->dims[0], 5);
  sc_graph_destroy(g);

  /* a negative input dim */
  b.g.input[0]->type->tensor_type->shape->dim[2]->dim_value = -2;
  expect_error(&b, SC_ERR_INVALID, NULL, "negative dim");
  tb_free(&b);
}

/* ---- structural errors ---- */

static void test_graph_errors(void **state) {
  (void)state;
  tb b;
  int64_t dims[1] = {4};

  tb_init(&b, 17);
  tb_input(&b, "x", 1, 1, dims, NULL);
  tb_node(&b, "Foo", "my_foo", "x", "y");
  tb_output(&b, "y", 1);
  sc_graph *g = NULL;
  sc_diag d = {0};
  assert_int_equal(tb_import(&b, false, &g, &d), SC_ERR_UNSUPPORTED);
  assert_string_equal(d.node, "my_foo");
  assert_string_equal(d.op, "Foo");
  assert_non_null(strstr(d.msg, "unsupported op 'Foo'"));
  char line[2048];
  sc_diag_format(&d, line, sizeof line);
  assert_non_null(strstr(line, "mem.onnx"));
  assert_non_null(strstr(line, "my_foo"));
  b.g.node[0]->op_type = tb_str(&b, "Relu");
  b.g.node[0]->domain = tb_str(&b, "com.example");
  expect_error(&b, SC_ERR_UNSUPPORTED, "my_foo", "unknown domain 'com.example'");
  b.g.node[0]->domain = tb_str(&b, "ai.onnx");
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  sc_graph_destroy(g);
  b.os.version = SC_OPSET_MIN - 1;
  expect_error(&b, SC_ERR_UNSUPPORTED, NULL, "opset 6");
  b.os.version = SC_OPSET_MAX + 1;
  expect_error(&b, SC_ERR_UNSUPPORTED, NULL, "is not supported");
  b.os.domain = tb_str(&b, "com.other");
  expect_error(&b, SC_ERR_INVALID, NULL, "no default-domain opset");
  b.os.domain = tb_str(&b, "");
  b.os.version = 17;
  /* dangling input */
  b.g.node[0]->input[0] = tb_str(&b, "nowhere");
  expect_error(&b, SC_ERR_INVALID, "my_foo", "input 'nowhere'");
  b.g.node[0]->input[0] = tb_str(&b, "x");
  /* graph output nobody produces */
  b.g.output[0]->name = tb_str(&b, "zz");
  expect_error(&b, SC_ERR_INVALID, NULL, "graph output 'zz'");
  b.g.output[0]->name = tb_str(&b, "y");
  /* wrong arity */
  b.g.node[0]->n_input = 0;
  expect_error(&b, SC_ERR_INVALID, "my_foo", "0 inputs");
  b.g.node[0]->n_input = 1;
  tb_free(&b);

  /* a value produced twice; a node output named like an input/initializer */
  tb_init(&b, 17);
  tb_input(&b, "x", 1, 1, dims, NULL);
  Onnx__TensorProto *w = tb_tensor(&b, "w", 1, 1, dims);
  float wv[4] = {1, 2, 3, 4};
  tb_raw(&b, w, wv, 16);
  tb_initializer(&b, w);
  tb_node(&b, "Relu", "n1", "x", "y");
  tb_node(&b, "Neg", "n2", "x", "y");
  tb_output(&b, "y", 1);
  expect_error(&b, SC_ERR_INVALID, "n2", "output 'y' is already defined by another node");
  b.g.node[1]->output[0] = tb_str(&b, "w");
  expect_error(&b, SC_ERR_INVALID, "n2", "by an initializer");
  b.g.node[1]->output[0] = tb_str(&b, "x");
  expect_error(&b, SC_ERR_INVALID, "n2", "by a graph input");
  /* an input listed with an initializer's name is the constant */
  b.g.node[1]->output[0] = tb_str(&b, "z");
  tb_input(&b, "w", 1, 1, dims, NULL);
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  assert_int_equal(g->n_inputs, 1);
  assert_true(sc_val(g, sc_graph_find_value(g, "w"))->flags & SC_VALUE_PARAM);
  assert_false(sc_val(g, sc_graph_find_value(g, "w"))->flags & SC_VALUE_INPUT);
  sc_graph_destroy(g);
  tb_free(&b);

  /* a cycle, and nodes out of order (accepted, sorted) */
  tb_init(&b, 17);
  tb_input(&b, "x", 1, 1, dims, NULL);
  tb_node(&b, "Add", "late", "x,b", "c");
  tb_node(&b, "Relu", "early", "x", "b");
  tb_output(&b, "c", 1);
  assert_int_equal(tb_import(&b, false, &g, &d), SC_OK);
  assert_string_equal(g->nodes[0].name, "early");
  assert_string_equal(g->nodes[1].name, "late");
  sc_graph_destroy(g);
  b.g.node[1]->input[0] = tb_str(&b, "c");
  expect_error(&b, SC_ERR_INVALID, NULL, "cycle");
  tb_free(&b);
}

/* ---- hostile bytes ---- */

static void build_small(tb *b) {
  tb_init(b, 17);
  int64_t dims[2] = {2, 2};
  const char *params[2] = {"batch", NULL};
  tb_input(b, "x", 1, 2, dims, params);
  Onnx__TensorProto *w = tb_tensor(b, "w", 1, 2, dims);
  float wv[4] = {rndf(), rndf(), rndf(), rndf()};
  tb_raw(b, w, wv, 16);
  tb_initializer(b, w);
  Onnx__NodeProto *n = tb_node(b, "Gemm", "gemm", "x,w", "y");
  Onnx__AttributeProto *a = tb_attr(b, n, "alpha", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1, a->f = 0.5f;
  tb_node(b, "Relu", NULL, "y", "z");
  tb_output(b, "z", 1);
}

/* model.graph → node → attribute.g → node ..., depth levels, all empty. */
static uint8_t *nested(int depth, size_t *len) {
  static const uint8_t cycle[3] = {1, 5, 6}; /* graph.node, node.attribute, attr.g */
  size_t cap = (size_t)depth * 8 + 16, end = cap, pos = cap;
  uint8_t *buf = malloc(cap);
  for (int i = depth - 1; i >= 0; i--) {
    uint8_t field = i == 0 ? 7 : cycle[(i - 1) % 3];
    uint8_t hdr[12];
    size_t h = 0;
    hdr[h++] = (uint8_t)((field << 3) | 2);
    for (uint64_t v = end - pos;; v >>= 7) {
      hdr[h++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
      if (v < 0x80) break;
    }
    assert_true(pos >= h);
    pos -= h;
    memcpy(buf + pos, hdr, h);
  }
  memmove(buf, buf + pos, end - pos);
  *len = end - pos;
  return buf;
}

static void test_hostile_bytes(void **state) {
  (void)state;
  tb b;
  build_small(&b);
  size_t n;
  uint8_t *buf = tb_pack(&b, &n);
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_import_opts o = {0};
  /* every truncation: a clean error or (rarely) a valid prefix, never a crash */
  int errors = 0;
  for (size_t len = 0; len < n; len++) {
    uint8_t *cut = malloc(len ? len : 1); /* exact size: ASan sees overreads */
    memcpy(cut, buf, len);
    sc_status st = sc_onnx_import_bytes(cut, len, "cut.onnx", NULL, &o, &g, &d);
    if (st != SC_OK) {
      errors++;
      assert_null(g);
      assert_string_equal(d.file, "cut.onnx");
      assert_true(d.msg[0] != 0);
    }
    sc_graph_destroy(g);
    g = NULL;
    free(cut);
  }
  assert_true(errors > (int)n / 2);
  /* a truncated file on disk reads as a parse error */
  char path[600];
  snprintf(path, sizeof path, "%s/trunc.onnx", tmp_root);
  write_file(path, buf, n / 2);
  assert_int_equal(sc_onnx_import(path, &o, &g, &d), SC_ERR_PARSE);
  assert_string_equal(d.file, path);
  assert_non_null(strstr(d.msg, "not a valid ONNX model"));
  /* bit flips (seeded) */
  for (int k = 0; k < 3000; k++) {
    uint8_t *m = malloc(n);
    memcpy(m, buf, n);
    int flips = 1 + (int)(rnd() % 4);
    for (int f = 0; f < flips; f++) m[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
    sc_status st = sc_onnx_import_bytes(m, n, "flip.onnx", NULL, &o, &g, &d);
    if (st != SC_OK) assert_null(g);
    sc_graph_destroy(g);
    g = NULL;
    free(m);
  }
  /* garbage */
  for (int k = 0; k < 500; k++) {
    size_t len = 1 + rnd() % 256;
    uint8_t *m = malloc(len);
    for (size_t i = 0; i < len; i++) m[i] = (uint8_t)rnd();
    sc_status st = sc_onnx_import_bytes(m, len, "junk.onnx", NULL, &o, &g, &d);
    if (st != SC_OK) assert_null(g);
    sc_graph_destroy(g);
    g = NULL;
    free(m);
  }
  assert_int_equal(sc_onnx_import_bytes(buf, 0, "empty", NULL, &o, &g, &d), SC_ERR_PARSE);
  free(buf);
  tb_free(&b);

  /* deeply nested messages: rejected before protobuf-c recurses */
  size_t dlen;
  uint8_t *deep = nested(30000, &dlen);
  sc_status st = sc_onnx_import_bytes(deep, dlen, "deep.onnx", NULL, &o, &g, &d);
  assert_int_equal(st, SC_ERR_LIMIT);
  assert_non_null(strstr(d.msg, "nest"));
  free(deep);
  /* the same shape 12 levels deep passes the depth check and unpacks (then
   * fails for want of an opset import) */
  deep = nested(12, &dlen);
  st = sc_onnx_import_bytes(deep, dlen, "deep.onnx", NULL, &o, &g, &d);
  assert_int_equal(st, SC_ERR_INVALID);
  assert_non_null(strstr(d.msg, "opset"));
  free(deep);
}

/* ---- external data ---- */

/* True when p lies in a mapping of a file whose path ends with `file`. */
static bool in_file_mapping(const void *p, const char *file) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[1024];
  bool found = false;
  uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    if (a < lo || a >= hi) continue;
    line[strcspn(line, "\n")] = 0;
    size_t ll = strlen(line), fl = strlen(file);
    found = ll >= fl && strcmp(line + ll - fl, file) == 0;
    break;
  }
  fclose(f);
  return found;
}

static void build_ext(tb *b, const char *loc, long long off, long long len, int64_t n) {
  tb_init(b, 17);
  int64_t dims[1] = {n};
  tb_input(b, "x", 1, 1, dims, NULL);
  Onnx__TensorProto *w = tb_tensor(b, "w", 1, 1, dims);
  tb_ext(b, w, loc, off, len);
  tb_initializer(b, w);
  tb_node(b, "Add", "add", "x,w", "y");
  tb_output(b, "y", 1);
}

static sc_status import_dir(tb *b, const char *dir, bool no_weights, sc_graph **g,
                            sc_diag *d, char *path, size_t pn) {
  snprintf(path, pn, "%s/model.onnx", dir);
  tb_write(b, path);
  sc_import_opts o = {.no_weights = no_weights};
  return sc_onnx_import(path, &o, g, d);
}

static void test_external(void **state) {
  (void)state;
  char dir[600], path[700], wpath[700];
  make_tmpdir(dir, sizeof dir, "ext");
  float data[16];
  for (int i = 0; i < 16; i++) data[i] = rndf();
  snprintf(wpath, sizeof wpath, "%s/weights.bin", dir);
  write_file(wpath, data, sizeof data);

  /* two tensors in one file: both borrowed from the same mapping */
  tb b;
  build_ext(&b, "weights.bin", 16, 16, 4);
  int64_t dims[1] = {8};
  Onnx__TensorProto *w2 = tb_tensor(&b, "w2", 1, 1, dims);
  tb_ext(&b, w2, "weights.bin", 32, -1); /* no length: the shape's size */
  tb_initializer(&b, w2);
  tb_output(&b, "w2", 1);
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_status st = import_dir(&b, dir, false, &g, &d, path, sizeof path);
  if (st != SC_OK) print_error("%s\n", d.msg);
  assert_int_equal(st, SC_OK);
  const sc_value *w = sc_val(g, sc_graph_find_value(g, "w"));
  const sc_value *v2 = sc_val(g, sc_graph_find_value(g, "w2"));
  assert_int_equal(w->data_kind, SC_DATA_BORROWED);
  assert_memory_equal(w->data, &data[4], 16);
  assert_memory_equal(v2->data, &data[8], 32);
  assert_true(in_file_mapping(w->data, "/weights.bin"));
  assert_ptr_equal((const uint8_t *)v2->data - 16, w->data); /* one mapping */
  assert_string_equal(w->ext_location, "weights.bin");
  assert_int_equal(w->ext_offset, 16);
  sc_graph_destroy(g);

  /* a misaligned offset still works (copied) */
  tb_free(&b);
  build_ext(&b, "weights.bin", 2, 16, 4);
  assert_int_equal(import_dir(&b, dir, false, &g, &d, path, sizeof path), SC_OK);
  w = sc_val(g, sc_graph_find_value(g, "w"));
  assert_memory_equal(w->data, (const uint8_t *)data + 2, 16);
  sc_graph_destroy(g);
  tb_free(&b);

  struct { const char *loc; long long off, len; sc_status st; const char *msg; } bad[] = {
      {"weights.bin", 60, 16, SC_ERR_INVALID, "past the end"},
      {"weights.bin", 64, 0, SC_ERR_INVALID, "length 0"},
      {"weights.bin", 0, 20, SC_ERR_INVALID, "need 16 bytes"},
      {"../outside.bin", 0, 16, SC_ERR_INVALID, "relative path"},
      {"sub/../weights.bin", 0, 16, SC_ERR_INVALID, "relative path"},
      {"/etc/passwd", 0, 16, SC_ERR_INVALID, "relative path"},
      {"link.bin", 0, 16, SC_ERR_INVALID, "outside the model's folder"},
      {"missing.bin", 0, 16, SC_ERR_IO, "not found"},
      {"", 0, 16, SC_ERR_INVALID, "without a location"},
  };
  /* a real file outside the folder, and a symlink to it inside */
  char outside[700], link[700];
  snprintf(outside, sizeof outside, "%s/outside.bin", tmp_root);
  write_file(outside, data, sizeof data);
  snprintf(link, sizeof link, "%s/link.bin", dir);
  unlink(link);
  assert_int_equal(symlink(outside, link), 0);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    build_ext(&b, bad[i].loc, bad[i].off, bad[i].len, 4);
    st = import_dir(&b, dir, false, &g, &d, path, sizeof path);
    if (st != bad[i].st || !strstr(d.msg, bad[i].msg))
      print_error("case %zu: %d %s\n", i, st, d.msg);
    assert_int_equal(st, bad[i].st);
    assert_null(g);
    assert_string_equal(d.file, path);
    assert_non_null(strstr(d.msg, bad[i].msg));
    assert_non_null(strstr(d.msg, "'w'"));
    tb_free(&b);
  }

  /* no_weights: the file is never opened; shape and location kept */
  build_ext(&b, "missing.bin", 128, 16, 4);
  st = import_dir(&b, dir, true, &g, &d, path, sizeof path);
  assert_int_equal(st, SC_OK);
  w = sc_val(g, sc_graph_find_value(g, "w"));
  assert_true((w->flags & (SC_VALUE_CONST | SC_VALUE_PARAM)) == (SC_VALUE_CONST | SC_VALUE_PARAM));
  assert_null(w->data);
  assert_int_equal(w->dtype, SC_DTYPE_F32);
  assert_int_equal(w->rank, 1);
  assert_int_equal(w->dims[0], 4);
  assert_string_equal(w->ext_location, "missing.bin");
  assert_int_equal(w->ext_offset, 128);
  /* export writes the reference back; re-import (no weights) sees the same */
  char out[700];
  snprintf(out, sizeof out, "%s/exported.onnx", dir);
  assert_int_equal(sc_onnx_export(g, out, &d), SC_OK);
  sc_graph *g2 = NULL;
  sc_import_opts nw = {.no_weights = true};
  assert_int_equal(sc_onnx_import(out, &nw, &g2, &d), SC_OK);
  const sc_value *x2 = sc_val(g2, sc_graph_find_value(g2, "w"));
  assert_string_equal(x2->ext_location, "missing.bin");
  assert_int_equal(x2->ext_offset, 128);
  assert_int_equal(x2->dims[0], 4);
  assert_null(x2->data);
  sc_graph_destroy(g2);
  sc_graph_destroy(g);
  /* without no_weights: an error naming tensor and file */
  st = import_dir(&b, dir, false, &g, &d, path, sizeof path);
  assert_int_equal(st, SC_ERR_IO);
  assert_non_null(strstr(d.msg, "'w'"));
  assert_non_null(strstr(d.msg, "missing.bin"));
  /* from bytes with no folder: external data is an error unless no_weights */
  assert_int_equal(tb_import(&b, false, &g, &d), SC_ERR_IO);
  assert_int_equal(tb_import(&b, true, &g, &d), SC_OK);
  sc_graph_destroy(g);
  tb_free(&b);
}

/* ---- round trip ---- */

static bool same_str(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

static void assert_same_tensor(const sc_tensor *a, const sc_tensor *b) {
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->rank, b->rank);
  for (int d = 0; d < a->rank; d++) assert_int_equal(a->dims[d], b->dims[d]);
  assert_int_equal(a->data_bytes, b->data_bytes);
  if (a->data_bytes) assert_memory_equal(a->data, b->data, a->data_bytes);
}

static bool value_used(const sc_graph *g, int32_t id) {
  if (g->values[id].flags & (SC_VALUE_OUTPUT | SC_VALUE_INPUT)) return true;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t j = 0; j < g->nodes[i].n_inputs; j++)
      if (g->nodes[i].inputs[j] == id) return true;
  return !(g->values[id].flags & SC_VALUE_CONST);
}

static void assert_same_graph(sc_graph *a, sc_graph *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->opset, b->opset);
  assert_int_equal(a->ir_version ? a->ir_version : 8, b->ir_version);
  assert_int_equal(a->n_nodes, b->n_nodes);
  assert_int_equal(a->n_inputs, b->n_inputs);
  assert_int_equal(a->n_outputs, b->n_outputs);
  for (int32_t i = 0; i < a->n_nodes; i++) {
    const sc_node *x = &a->nodes[i], *y = &b->nodes[i];
    assert_int_equal(x->op, y->op);
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->n_inputs, y->n_inputs);
    assert_int_equal(x->n_outputs, y->n_outputs);
    for (int32_t j = 0; j < x->n_inputs; j++) {
      assert_int_equal(x->inputs[j] < 0, y->inputs[j] < 0);
      if (x->inputs[j] >= 0)
        assert_string_equal(a->values[x->inputs[j]].name, b->values[y->inputs[j]].name);
    }
    for (int32_t j = 0; j < x->n_outputs; j++) {
      assert_int_equal(x->outputs[j] < 0, y->outputs[j] < 0);
      if (x->outputs[j] >= 0)
        assert_string_equal(a->values[x->outputs[j]].name, b->values[y->outputs[j]].name);
    }
    assert_int_equal(x->n_attrs, y->n_attrs);
    for (int32_t j = 0; j < x->n_attrs; j++) {
      const sc_attr *p = &x->attrs[j], *q = sc_node_attr(y, p->name);
      assert_non_null(q);
      assert_int_equal(p->kind, q->kind);
      assert_int_equal(p->n, q->n);
      switch (p->kind) {
      case SC_ATTR_INT: assert_int_equal(p->i, q->i); break;
      case SC_ATTR_FLOAT: assert_true(p->f == q->f); break;
      case SC_ATTR_STRING: assert_string_equal(p->s, q->s); break;
      case SC_ATTR_INTS:
        if (p->n) assert_memory_equal(p->ints, q->ints, (size_t)p->n * 8);
        break;
      case SC_ATTR_FLOATS:
        if (p->n) assert_memory_equal(p->floats, q->floats, (size_t)p->n * 8);
        break;
      case SC_ATTR_STRINGS:
        for (int64_t k = 0; k < p->n; k++) assert_string_equal(p->strings[k], q->strings[k]);
        break;
      case SC_ATTR_TENSOR: assert_same_tensor(p->t, q->t); break;
      case SC_ATTR_TENSORS:
        for (int64_t k = 0; k < p->n; k++) assert_same_tensor(&p->t[k], &q->t[k]);
        break;
      default: break;
      }
    }
  }
  for (int32_t i = 0; i < a->n_inputs; i++)
    assert_string_equal(a->values[a->inputs[i]].name, b->values[b->inputs[i]].name);
  for (int32_t i = 0; i < a->n_outputs; i++)
    assert_string_equal(a->values[a->outputs[i]].name, b->values[b->outputs[i]].name);
  int32_t n_used = 0;
  for (int32_t i = 0; i < a->n_values; i++) {
    if (!value_used(a, i)) continue;
    n_used++;
    const sc_value *x = &a->values[i];
    int32_t j = sc_graph_find_value(b, x->name);
    if (j < 0) print_error("value '%s' lost\n", x->name);
    assert_true(j >= 0);
    const sc_value *y = &b->values[j];
    uint32_t mask = SC_VALUE_INPUT | SC_VALUE_OUTPUT | SC_VALUE_CONST;
    assert_int_equal(x->flags & mask, y->flags & mask);
    /* a Constant node's value comes back as an initializer */
    if (x->flags & SC_VALUE_PARAM) assert_true(y->flags & SC_VALUE_PARAM);
    assert_int_equal(x->dtype, y->dtype);
    assert_int_equal(x->rank, y->rank);
    for (int32_t d = 0; d < x->rank; d++) {
      assert_int_equal(x->dims[d], y->dims[d]);
      assert_true(same_str(x->dim_param ? x->dim_param[d] : NULL,
                           y->dim_param ? y->dim_param[d] : NULL));
    }
    assert_int_equal(x->data_bytes, y->data_bytes);
    assert_int_equal(x->data != NULL, y->data != NULL);
    if (x->data && x->data_bytes) assert_memory_equal(x->data, y->data, x->data_bytes);
    if (x->flags & SC_VALUE_CONST && !x->data && x->data_bytes == 0 && sc_value_numel(x) > 0) {
      assert_true(same_str(x->ext_location, y->ext_location));
      assert_int_equal(x->ext_offset, y->ext_offset);
    }
  }
  assert_int_equal(n_used, b->n_values);
}

/* import path → export out → import again → same graph */
static void roundtrip_file(const char *path, const char *out) {
  sc_graph *g = NULL, *g2 = NULL;
  sc_diag d = {0};
  sc_import_opts o = {0};
  sc_status st = sc_onnx_import(path, &o, &g, &d);
  if (st == SC_ERR_IO) { /* absent external weights (gpt_1p5b) */
    o.no_weights = true;
    st = sc_onnx_import(path, &o, &g, &d);
  }
  char line[2048];
  sc_diag_format(&d, line, sizeof line);
  if (st != SC_OK) print_error("import: %s\n", line);
  assert_int_equal(st, SC_OK);
  st = sc_onnx_export(g, out, &d);
  sc_diag_format(&d, line, sizeof line);
  if (st != SC_OK) print_error("export: %s\n", line);
  assert_int_equal(st, SC_OK);
  st = sc_onnx_import(out, &o, &g2, &d);
  sc_diag_format(&d, line, sizeof line);
  if (st != SC_OK) print_error("re-import: %s\n", line);
  assert_int_equal(st, SC_OK);
  assert_same_graph(g, g2);
  sc_graph_destroy(g2);
  sc_graph_destroy(g);
}

static void test_roundtrip_built(void **state) {
  (void)state;
  char dir[600], path[700], out[700];
  make_tmpdir(dir, sizeof dir, "rt");
  tb b;
  build_small(&b);
  /* add typed data, a Constant, a tensor attribute and an omitted input */
  int64_t d1[1] = {2};
  Onnx__NodeProto *n = tb_node(&b, "Constant", "", NULL, "k");
  Onnx__AttributeProto *a = tb_attr(&b, n, "value_ints", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = 2, a->ints = (int64_t[]){-1, 4};
  tb_node(&b, "Reshape", "rs", "z,k", "r");
  n = tb_node(&b, "ConstantOfShape", "cos", "k", "c");
  a = tb_attr(&b, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  int64_t one[1] = {1};
  a->t = tb_tensor(&b, "", 1, 1, one);
  a->t->n_float_data = 1, a->t->float_data = (float[]){rndf()};
  tb_node(&b, "Clip", "", "r,,", "cl");
  Onnx__TensorProto *h = tb_tensor(&b, "half", 10, 1, d1);
  h->n_int32_data = 2, h->int32_data = (int32_t[]){0x3c00, 0xc500};
  tb_initializer(&b, h);
  tb_node(&b, "Cast", "", "half", "hc");
  a = tb_attr(&b, b.g.node[b.g.n_node - 1], "to", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1, a->i = 1;
  tb_output(&b, "cl", 1);
  tb_output(&b, "hc", 1);
  tb_output(&b, "c", 1);
  snprintf(path, sizeof path, "%s/built.onnx", dir);
  tb_write(&b, path);
  snprintf(out, sizeof out, "%s/built_out.onnx", dir);
  roundtrip_file(path, out);
  tb_free(&b);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_roundtrip_dir(void **state) {
  (void)state;
  const char *in = getenv("SC_ROUNDTRIP_IN");
  const char *out = getenv("SC_ROUNDTRIP_OUT");
  char in_buf[600], out_buf[600];
  if (!in) {
    snprintf(in_buf, sizeof in_buf, "%s/samples", SC_SOURCE_DIR);
    in = in_buf;
  }
  if (!out) {
    snprintf(out_buf, sizeof out_buf, "%s/roundtrip", SC_BINARY_DIR);
    out = out_buf;
  }
  mkdir(out, 0777);
  DIR *dp = opendir(in);
  if (!dp) SC_SKIP("cannot open %s", in);
  char *names[256];
  int nn = 0;
  struct dirent *de;
  while ((de = readdir(dp)) && nn < 256) {
    size_t l = strlen(de->d_name);
    if (l > 5 && strcmp(de->d_name + l - 5, ".onnx") == 0) names[nn++] = strdup(de->d_name);
  }
  closedir(dp);
  if (nn == 0) SC_SKIP("no .onnx file in %s", in);
  qsort(names, (size_t)nn, sizeof names[0], cmp_str);
  for (int i = 0; i < nn; i++) {
    char p[1200], q[1200];
    snprintf(p, sizeof p, "%s/%s", in, names[i]);
    snprintf(q, sizeof q, "%s/%s", out, names[i]);
    print_message("roundtrip %s\n", names[i]);
    roundtrip_file(p, q);
    free(names[i]);
  }
}

static int setup_tmp(void **state) {
  (void)state;
  snprintf(tmp_root, sizeof tmp_root, "%s/frontend_tmp_XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown_tmp(void **state) {
  (void)state;
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const char *filter = getenv("SC_TEST_FILTER");
  if (filter && filter[0]) cmocka_set_test_filter(filter);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_bad_tensors),
      cmocka_unit_test(test_constants),
      cmocka_unit_test(test_attrs_and_names),
      cmocka_unit_test(test_symbolic_dims),
      cmocka_unit_test(test_graph_errors),
      cmocka_unit_test(test_hostile_bytes),
      cmocka_unit_test(test_external),
      cmocka_unit_test(test_roundtrip_built),
      cmocka_unit_test(test_roundtrip_dir),
  };
  return SC_RUN_TESTS(tests, setup_tmp, teardown_tmp);
}
