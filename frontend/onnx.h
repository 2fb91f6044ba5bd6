/* onnx.h — ONNX import and export.
 *
 * Import reads a ModelProto (protobuf-c, generated at build time from the
 * installed onnx.proto) into an sc_graph:
 *  - graph inputs that are not initializers become SC_VALUE_INPUT values with
 *    their dtype and shape; symbolic dims (dim_param) are SC_DIM_UNKNOWN with
 *    the name kept in value->dim_param, to be bound by sc_graph_bind_dim;
 *  - initializers and Constant nodes become constant values (Constant nodes
 *    do not appear as nodes); weights stay where they are: external data is
 *    memory-mapped and borrowed, embedded data is borrowed from the decoded
 *    message, which the graph keeps alive (cleanups);
 *  - every other node becomes an sc_node whose op is looked up in the ops
 *    table; an unknown op, an unknown domain or an opset outside
 *    [SC_OPSET_MIN, SC_OPSET_MAX] is an error naming the node; model-local
 *    functions are inlined first, and ops that meant something else at an
 *    older opset are rewritten by the version adapters (frontend.md);
 *  - nodes get unique names (generated as "<OpType>_<index>" when missing);
 *    the graph is toposorted (a cycle or a dangling input is an error).
 *
 * External data: the location must be a relative path inside the model's
 * folder (no "..", no absolute path, no symlink leading outside); offset and
 * length are checked against the file. With opts->no_weights, external data
 * is not opened at all: those constants keep dtype and shape, data == NULL.
 *
 * The model file is untrusted: every failure returns a status with diag set
 * (diag->file = path, node/op when the problem is in a node); never a crash.
 *
 * Export writes a graph back as a ModelProto (all constants as initializers
 * with embedded data; weights whose data is absent are written as external
 * data references with their original location). import(export(import(f)))
 * gives the same graph. */
#ifndef SC_FRONTEND_ONNX_H
#define SC_FRONTEND_ONNX_H

#include "ir/ir.h"

/* The nodes of a model whose op shardc does not support (an op outside
 * its table, or an unknown domain), every one of them: what `shardc check`
 * lists. Ownership: items is sc_malloc'd; sc_import_unsupported_free. */
typedef struct sc_unsupported_node {
  char node[128];   /* the node's name (a made-up "Op_i" when it has none) */
  char op[96];      /* its op_type */
  char domain[96];  /* its domain ("" the default) */
} sc_unsupported_node;
typedef struct sc_import_unsupported {
  sc_unsupported_node *items;
  int32_t n, cap;
} sc_import_unsupported;
void sc_import_unsupported_free(sc_import_unsupported *u);

typedef struct sc_import_opts {
  bool no_weights; /* do not open external data files */
  /* when not NULL: the import goes on past an unsupported node to the end
   * of the top-level graph, listing every one here (appended), and then
   * fails with the first one's error as it would have */
  sc_import_unsupported *unsupported;
} sc_import_opts;

/* On success *out owns everything it borrows; free with sc_graph_destroy. */
sc_status sc_onnx_import(const char *path, const sc_import_opts *opts,
                         sc_graph **out, sc_diag *diag);
/* Same from bytes in memory; name is what diag->file will say. External
 * data is resolved against base_dir; with base_dir NULL it is an error
 * unless opts->no_weights. The bytes are decoded (copied) by protobuf-c, so
 * the caller may free them as soon as this returns. */
sc_status sc_onnx_import_bytes(const void *data, size_t size, const char *name,
                               const char *base_dir, const sc_import_opts *opts,
                               sc_graph **out, sc_diag *diag);
/* Writes g to path (see above and docs/frontend.md): ir_version is
 * g->ir_version or 8; constants a node or graph output uses become
 * initializers (embedded raw_data, or an external reference to ext_location
 * at ext_offset — "<name>.bin" at 0 when unknown — for absent data).
 * SC_ERR_UNSUPPORTED for GRAPH / SPARSE_TENSOR / TYPE_PROTO attributes and
 * internal ops, SC_ERR_LIMIT above protobuf's 2 GiB, SC_ERR_IO on write. */
sc_status sc_onnx_export(sc_graph *g, const char *path, sc_diag *diag);

#endif
