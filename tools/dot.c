/* dot.c — Graphviz writer for IR graphs.
 *
 * Node ids in the output are synthetic ("n12" for node 12, "v7" for value 7)
 * so that any name is safe; names only appear inside quoted labels, escaped.
 * Only what `dot -Tsvg` needs: no layout hints beyond rankdir. */
#include "dot.h"

#include <string.h>

void sc_dot_put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') {
      fputc('\\', f);
      fputc(*p, f);
    } else if (*p == '\n') {
      fputs("\\n", f);
    } else if (*p >= 0x20) {
      fputc(*p, f);
    }
  }
  fputc('"', f);
}

static void shape_str(const sc_value *v, char *buf, size_t n) {
  size_t pos = 0;
  int w = snprintf(buf, n, "%s[", sc_dtype_name(v->dtype));
  if (w < 0 || (size_t)w >= n) return;
  pos = (size_t)w;
  for (int32_t d = 0; d < v->rank; d++) {
    w = snprintf(buf + pos, n - pos, d ? ",%lld" : "%lld", (long long)v->dims[d]);
    if (w < 0 || (size_t)w >= n - pos) return;
    pos += (size_t)w;
  }
  snprintf(buf + pos, n - pos, "]");
}

static bool live_node(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }

void sc_dot_write_edges(const sc_graph *g, FILE *f, bool shape_labels) {
  char shape[256];
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!live_node(n)) continue;
    for (int32_t j = 0; j < n->n_inputs; j++) {
      int32_t vid = n->inputs[j];
      if (vid < 0) continue;
      const sc_value *v = &g->values[vid];
      if (v->producer >= 0) fprintf(f, "  n%d -> n%d", v->producer, i);
      else if ((v->flags & (SC_VALUE_INPUT | SC_VALUE_PARAM)) && !(v->flags & SC_VALUE_DEAD))
        fprintf(f, "  v%d -> n%d", vid, i);
      else continue; /* other constants are omitted */
      if (!shape_labels) {
        fputs(";\n", f);
        continue;
      }
      shape_str(v, shape, sizeof shape);
      fputs(" [label=", f);
      sc_dot_put_quoted(f, shape);
      fputs("];\n", f);
    }
  }
}

sc_status sc_dot_write_graph(sc_graph *g, FILE *f) {
  char shape[256], label[1024];
  fputs("digraph ", f);
  sc_dot_put_quoted(f, g->name ? g->name : "graph");
  fputs(" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [fontname=\"Helvetica\", fontsize=8];\n", f);

  for (int32_t i = 0; i < g->n_inputs; i++) {
    const sc_value *v = &g->values[g->inputs[i]];
    shape_str(v, shape, sizeof shape);
    snprintf(label, sizeof label, "%s\n%s", v->name, shape);
    fprintf(f, "  v%d [shape=ellipse, style=filled, fillcolor=\"#d0e8ff\", label=", g->inputs[i]);
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
  }
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if ((v->flags & SC_VALUE_DEAD) || !(v->flags & SC_VALUE_PARAM)) continue;
    shape_str(v, shape, sizeof shape);
    snprintf(label, sizeof label, "%s\n%s", v->name, shape);
    fprintf(f, "  v%d [shape=box, style=filled, fillcolor=\"#eeeeee\", fontsize=7, label=", i);
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!live_node(n)) continue;
    const sc_value *out = n->n_outputs > 0 && n->outputs[0] >= 0 ? &g->values[n->outputs[0]] : NULL;
    if (out) shape_str(out, shape, sizeof shape);
    else shape[0] = 0;
    snprintf(label, sizeof label, "%s\n%s", sc_op_name(n->op), shape);
    fprintf(f, "  n%d [shape=box, style=\"rounded,filled\", fillcolor=\"#fff4d0\", label=", i);
    sc_dot_put_quoted(f, label);
    fputs(", tooltip=", f);
    sc_dot_put_quoted(f, n->name);
    fputs("];\n", f);
  }
  sc_dot_write_edges(g, f, true);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    int32_t vid = g->outputs[i];
    const sc_value *v = &g->values[vid];
    shape_str(v, shape, sizeof shape);
    snprintf(label, sizeof label, "%s\n%s", v->name, shape);
    fprintf(f, "  out%d [shape=ellipse, style=filled, fillcolor=\"#d8f5d0\", label=", i);
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
    if (v->producer >= 0) fprintf(f, "  n%d -> out%d;\n", v->producer, i);
    else if (v->flags & SC_VALUE_INPUT) fprintf(f, "  v%d -> out%d;\n", vid, i);
  }
  fputs("}\n", f);
  return ferror(f) ? SC_ERR_IO : SC_OK;
}
