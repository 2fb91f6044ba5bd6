/* inspect.c — `shardc inspect MODEL`: import, bind dims, canonical passes,
 * then a report of what the model is (inputs, outputs, ops, parameters,
 * FLOPs, largest activation, repeated blocks), as text or as one JSON object
 * (schema in docs/inspect.md), optionally with a Graphviz drawing.
 *
 * Parameters and the node count before folding are taken right after import
 * (sc_stats_begin); everything else after the passes (sc_stats_finish). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "dot.h"
#include "ir/fileio.h"
#include "frontend/onnx.h"
#include "passes/pass.h"
#include "passes/blocks.h"
#include "passes/stats.h"

static const char *const USAGE =
    "shardc inspect MODEL.onnx [--dim NAME=V]... [--no-weights] [--json]\n"
    "                         [--dot FILE] [--print-after=PASS] [--time-passes]";

typedef struct op_row {
  sc_op op;
  int64_t count;
} op_row;

static int cmp_op_row(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return strcmp(sc_op_name(x->op), sc_op_name(y->op));
}

/* The histogram sorted by count (descending), then name; returns rows. */
static int sorted_ops(const sc_stats *s, op_row *rows) {
  int n = 0;
  for (int i = 0; i < SC_OP_COUNT; i++)
    if (s->op_count[i] > 0) rows[n++] = (op_row){(sc_op)i, s->op_count[i]};
  qsort(rows, (size_t)n, sizeof *rows, cmp_op_row);
  return n;
}

static json_t *json_shape(const sc_value *v) {
  json_t *a = json_array();
  for (int32_t d = 0; d < v->rank; d++) json_array_append_new(a, json_integer(v->dims[d]));
  return a;
}

static json_t *json_values(sc_graph *g, const int32_t *ids, int32_t n) {
  json_t *a = json_array();
  for (int32_t i = 0; i < n; i++) {
    const sc_value *v = &g->values[ids[i]];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(v->name));
    json_object_set_new(o, "dtype", json_string(sc_dtype_name(v->dtype)));
    json_object_set_new(o, "shape", json_shape(v));
    if (v->dim_param) {
      json_t *sym = json_array();
      for (int32_t d = 0; d < v->rank; d++)
        json_array_append_new(sym, v->dim_param[d] ? json_string(v->dim_param[d]) : json_null());
      json_object_set_new(o, "dim_params", sym);
    }
    json_array_append_new(a, o);
  }
  return a;
}

/* FLOPs are whole numbers; an integer when it fits, else a real. */
static json_t *json_flops(double f) {
  if (f >= 0 && f < 9.0e18) return json_integer((json_int_t)(f + 0.5));
  return json_real(f);
}

static json_t *json_block(const sc_block_stats *b) {
  json_t *o = json_object();
  if (b->index >= 0) json_object_set_new(o, "index", json_integer(b->index));
  else json_object_set_new(o, "index", json_null());
  json_object_set_new(o, "nodes", json_integer(b->n_nodes));
  json_object_set_new(o, "params", json_integer(b->params));
  json_object_set_new(o, "param_bytes", json_integer(b->param_bytes));
  json_object_set_new(o, "flops", json_flops(b->flops));
  return o;
}

static int print_json(sc_graph *g, const sc_stats *s, const char *path) {
  json_t *root = json_object();
  json_object_set_new(root, "file", json_string(path));
  json_object_set_new(root, "model", json_string(g->name ? g->name : ""));
  json_object_set_new(root, "producer", g->producer ? json_string(g->producer) : json_null());
  json_object_set_new(root, "opset", json_integer(g->opset));
  json_object_set_new(root, "inputs", json_values(g, g->inputs, g->n_inputs));
  json_object_set_new(root, "outputs", json_values(g, g->outputs, g->n_outputs));
  json_object_set_new(root, "nodes", json_integer(s->n_nodes));
  json_object_set_new(root, "nodes_before_fold", json_integer(s->n_nodes_before_fold));
  op_row rows[SC_OP_COUNT];
  int nr = sorted_ops(s, rows);
  json_t *ops = json_object();
  for (int i = 0; i < nr; i++)
    json_object_set_new(ops, sc_op_name(rows[i].op), json_integer(rows[i].count));
  json_object_set_new(root, "ops", ops);
  json_object_set_new(root, "params", json_integer(s->params));
  json_object_set_new(root, "param_tensors", json_integer(s->n_params));
  json_object_set_new(root, "param_bytes", json_integer(s->param_bytes));
  json_t *by = json_object();
  for (int i = 0; i < SC_DTYPE_COUNT; i++)
    if (s->params_by_dtype[i] > 0)
      json_object_set_new(by, sc_dtype_name((sc_dtype)i), json_integer(s->param_bytes_by_dtype[i]));
  json_object_set_new(root, "param_bytes_by_dtype", by);
  json_object_set_new(root, "flops", json_flops(s->flops));
  if (s->largest_value >= 0) {
    const sc_value *v = &g->values[s->largest_value];
    json_t *la = json_object();
    json_object_set_new(la, "name", json_string(v->name));
    json_object_set_new(la, "dtype", json_string(sc_dtype_name(v->dtype)));
    json_object_set_new(la, "shape", json_shape(v));
    json_object_set_new(la, "bytes", json_integer(s->largest_bytes));
    json_object_set_new(root, "largest_activation", la);
  } else {
    json_object_set_new(root, "largest_activation", json_null());
  }
  json_object_set_new(root, "block_key", s->block_key ? json_string(s->block_key) : json_null());
  json_t *blocks = json_array();
  for (int32_t i = 0; i < s->n_blocks; i++) json_array_append_new(blocks, json_block(&s->blocks[i]));
  json_object_set_new(root, "blocks", blocks);
  json_object_set_new(root, "outside_blocks", s->n_blocks ? json_block(&s->outside) : json_null());
  static const char *const found_by[] = {NULL, "structure", "names"};
  const char *fb = s->found_by > 0 && s->found_by < 3 ? found_by[s->found_by] : NULL;
  json_object_set_new(root, "blocks_found_by", fb ? json_string(fb) : json_null());
  json_object_set_new(root, "residual_adds_per_block", json_integer(s->adds_per_block));

  int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? 0 : 1;
  fputc('\n', stdout);
  json_decref(root);
  if (rc) fprintf(stderr, "shardc: error: writing JSON failed\n");
  return rc;
}

static void print_value_line(const sc_graph *g, const sc_value *v) {
  char shape[512];
  sc_cli_format_shape(g, v, shape, sizeof shape);
  printf("  %-24s %s%s\n", v->name, sc_dtype_name(v->dtype), shape);
}

static void print_text(sc_graph *g, const sc_stats *s, const char *path) {
  char a[64], b[64], c[64];
  printf("model:    %s\n", g->name ? g->name : "");
  printf("file:     %s\n", path);
  printf("producer: %s\n", g->producer ? g->producer : "-");
  printf("opset:    %lld\n", (long long)g->opset);
  printf("\ninputs:\n");
  for (int32_t i = 0; i < g->n_inputs; i++) print_value_line(g, &g->values[g->inputs[i]]);
  printf("outputs:\n");
  for (int32_t i = 0; i < g->n_outputs; i++) print_value_line(g, &g->values[g->outputs[i]]);

  printf("\nnodes: %lld before folding, %lld after\n", (long long)s->n_nodes_before_fold,
         (long long)s->n_nodes);
  printf("ops (after folding):\n");
  op_row rows[SC_OP_COUNT];
  int nr = sorted_ops(s, rows);
  for (int i = 0; i < nr; i++)
    printf("  %-24s %lld\n", sc_op_name(rows[i].op), (long long)rows[i].count);

  sc_cli_format_count(s->params, a, sizeof a);
  sc_stats_format_bytes((double)s->param_bytes, b, sizeof b);
  printf("\nparameters: %s in %lld tensors (%s)\n", a, (long long)s->n_params, b);
  for (int i = 0; i < SC_DTYPE_COUNT; i++) {
    if (s->params_by_dtype[i] <= 0) continue;
    sc_cli_format_count(s->params_by_dtype[i], a, sizeof a);
    sc_stats_format_bytes((double)s->param_bytes_by_dtype[i], b, sizeof b);
    printf("  %-6s %16s elements  %12s  (%lld bytes)\n", sc_dtype_name((sc_dtype)i), a, b,
           (long long)s->param_bytes_by_dtype[i]);
  }
  sc_stats_format_si(s->flops, "FLOP", a, sizeof a);
  printf("flops (forward): %s (%.0f)\n", a, s->flops);
  if (s->largest_value >= 0) {
    const sc_value *v = &g->values[s->largest_value];
    char shape[512];
    sc_cli_format_shape(g, v, shape, sizeof shape);
    sc_stats_format_bytes((double)s->largest_bytes, b, sizeof b);
    printf("largest activation: %s %s%s, %s (%lld bytes)\n", v->name, sc_dtype_name(v->dtype),
           shape, b, (long long)s->largest_bytes);
  }

  if (s->n_blocks == 0) {
    printf("\nblocks: no repeated blocks found\n");
    return;
  }
  sc_blocks bl = {.how = (sc_blocks_how)s->found_by, .n_blocks = s->n_blocks,
                  .adds_per_block = s->adds_per_block, .key = s->block_key};
  char how[256];
  sc_blocks_describe(&bl, how, sizeof how);
  if (s->block_key) printf("\nblocks: %d repeated blocks of '%s', found %s\n", s->n_blocks, s->block_key, how);
  else printf("\nblocks: %d repeated blocks, found %s\n", s->n_blocks, how);
  printf("  %-8s %8s %16s %14s\n", "block", "nodes", "params", "FLOPs");
  for (int32_t i = 0; i < s->n_blocks; i++) {
    const sc_block_stats *bs = &s->blocks[i];
    sc_cli_format_count(bs->params, a, sizeof a);
    sc_stats_format_si(bs->flops, "FLOP", c, sizeof c);
    printf("  %-8lld %8lld %16s %14s\n", (long long)bs->index, (long long)bs->n_nodes, a, c);
  }
  sc_cli_format_count(s->outside.params, a, sizeof a);
  sc_stats_format_si(s->outside.flops, "FLOP", c, sizeof c);
  printf("  %-8s %8lld %16s %14s\n", "outside", (long long)s->outside.n_nodes, a, c);
}

int sc_cmd_inspect(int argc, char **argv) {
  sc_cli_opts o;
  int rc = sc_cli_parse(argc, argv,
                        SC_CLI_DIM | SC_CLI_NO_WEIGHTS | SC_CLI_PRINT_AFTER |
                            SC_CLI_TIME_PASSES | SC_CLI_JSON | SC_CLI_DOT,
                        USAGE, &o);
  if (rc) return rc;
  if (o.help) {
    printf("usage: %s\n\n"
           "Imports an ONNX model, binds symbolic dims, runs the canonical passes\n"
           "(" SC_CANONICAL_PASSES ") and reports inputs, outputs, ops,\n"
           "parameters, forward FLOPs, the largest activation and repeated blocks.\n\n"
           "  --dim NAME=V        bind symbolic dim NAME (repeatable; others get 1)\n"
           "  --no-weights        do not open external weight files (shapes only)\n"
           "  --json              one JSON object on stdout (docs/inspect.md)\n"
           "  --dot FILE          write the folded graph as Graphviz\n"
           "  --print-after=PASS  print the IR after PASS (or 'all') to stderr\n"
           "  --time-passes       per-pass wall time on stderr\n",
           USAGE);
    return 0;
  }

  sc_import_opts io = {.no_weights = o.no_weights};
  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  rc = sc_cli_load_finish(sc_onnx_import(o.file, &io, &g, &d), &g, &d, &o);
  if (rc) return rc;

  sc_stats s;
  sc_status st = sc_stats_begin(g, &s);
  if (st == SC_OK) {
    sc_pass_opts po;
    sc_cli_pass_opts(&o, &po);
    st = sc_run_passes(g, SC_CANONICAL_PASSES, &po);
  }
  if (st == SC_OK) st = sc_stats_finish(g, &s);
  if (st != SC_OK) {
    rc = sc_cli_report(&g->diag, o.file);
    sc_stats_free(&s);
    sc_graph_destroy(g);
    return rc;
  }

  if (o.dot) {
    sc_file_commit c;
    sc_diag dd = {0};
    bool ok = sc_file_commit_begin(&c, o.dot, &dd) == SC_OK;
    if (ok && sc_dot_write_graph(g, c.f) != SC_OK) {
      sc_file_commit_abort(&c);
      ok = false;
    }
    if (ok) ok = sc_file_commit_end(&c, &dd) == SC_OK;
    if (!ok) {
      fprintf(stderr, "shardc: error: %s: cannot write the Graphviz file\n", o.dot);
      sc_stats_free(&s);
      sc_graph_destroy(g);
      return 1;
    }
  }
  if (o.json) rc = print_json(g, &s, o.file);
  else print_text(g, &s, o.file);
  fflush(stdout);
  sc_stats_free(&s);
  sc_graph_destroy(g);
  return rc;
}
