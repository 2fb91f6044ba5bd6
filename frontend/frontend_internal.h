/* frontend_internal.h — shared between the ONNX importer, external-data
 * mapping and the exporter. Not for use outside frontend/.
 *
 * The import context carries the graph being built, where errors go, and the
 * external-data files mapped so far (one mapping per distinct file, shared by
 * all tensors that live in it; each mapping is owned by a graph cleanup). */
#ifndef SC_FRONTEND_INTERNAL_H
#define SC_FRONTEND_INTERNAL_H

#include "frontend/onnx.h"
#include "onnx.pb-c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shardc's ONNX frontend assumes a little-endian host (raw_data is LE)"
#endif

/* Nesting depth of protobuf messages accepted before unpacking (protobuf-c
 * recurses once per level; a hostile file could otherwise exhaust the stack). */
enum { SC_ONNX_MAX_DEPTH = 64 };

typedef struct sc_onnx_map {
  char *real_path;     /* realpath() of the file (malloc'd) */
  const uint8_t *addr; /* NULL for an empty file */
  uint64_t size;
} sc_onnx_map;

typedef struct sc_onnx_ctx {
  sc_graph *g;
  sc_diag *diag;
  const char *cur_node; /* node the current work is about, or NULL */
  const char *cur_op;
  bool no_weights;
  const char *base_dir; /* model folder, or NULL (bytes without a folder) */
  char *base_real;      /* realpath(base_dir), malloc'd on first use */
  sc_onnx_map *maps;
  int32_t n_maps, cap_maps;
  int32_t sub_depth;    /* subgraphs being imported (read_subgraph) */
  sc_import_unsupported *unsupported; /* sc_import_opts's, or NULL */
} sc_onnx_ctx;

/* A decoded TensorProto. */
typedef struct sc_onnx_tensor {
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  const void *data;          /* NULL when empty or absent (no_weights) */
  uint64_t data_bytes;       /* bytes the shape needs */
  sc_data_kind kind;
  const char *ext_location;  /* arena copy, or NULL */
  uint64_t ext_offset;
} sc_onnx_tensor;

/* Whether domain d is ONNX's default one ("" or "ai.onnx"). */
bool sc_onnx_default_domain(const char *d);

/* Records an error in ctx->diag about the current node (if any). */
sc_status sc_onnx_error(sc_onnx_ctx *c, sc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* External data of tensor t (data_location == EXTERNAL): checks the
 * reference, maps the file (unless no_weights) and fills out->data,
 * out->kind, out->ext_location and out->ext_offset. out->dtype, rank, dims
 * and data_bytes must already be set. what names the tensor in errors. */
sc_status sc_onnx_read_external(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                                const char *what, sc_onnx_tensor *out);
/* Releases the context's bookkeeping (not the mappings: the graph owns them). */
void sc_onnx_ctx_free(sc_onnx_ctx *c);

/* Model-local functions inlined (onnx_functions.c): *gp becomes a copy of
 * the graph whose nodes have every call expanded (in c->g's arena), or
 * stays as it is when m has no functions. */
sc_status sc_onnx_inline_functions(sc_onnx_ctx *c, const Onnx__ModelProto *m,
                                   int64_t model_opset, const Onnx__GraphProto **gp);

/* Version adapters (onnx_adapters.c): *gp becomes a copy of the graph whose
 * nodes of ops that meant something else at `opset` are rewritten into the
 * IR's (opset 13+) form, or stays as it is when none is. */
sc_status sc_onnx_adapt_opset(sc_onnx_ctx *c, int64_t opset, const Onnx__GraphProto **gp);

/* A node list being rebuilt (the inliner's, the adapters'). */
typedef struct sc_onnx_nodes {
  Onnx__NodeProto **v;
  size_t n, cap;
} sc_onnx_nodes;
sc_status sc_onnx_nodes_push(sc_onnx_ctx *c, sc_onnx_nodes *l, Onnx__NodeProto *np);
/* With st == SC_OK, *gp becomes a copy of *gp (in the graph's arena) whose
 * nodes are l's; l is freed either way. Returns st, or SC_ERR_NOMEM. */
sc_status sc_onnx_nodes_finish(sc_onnx_ctx *c, sc_onnx_nodes *l, sc_status st,
                               const Onnx__GraphProto **gp);

/* True when the serialized message nests at most SC_ONNX_MAX_DEPTH deep
 * (malformed bytes count as "fine": unpacking rejects them). */
bool sc_onnx_depth_ok(const uint8_t *data, size_t size);

#endif
