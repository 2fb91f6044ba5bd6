/* print.c — the textual IR printer (format in docs/ir.md).
 *
 * Prints the live part of a graph: graph inputs, constants (initializers as
 * `param`, others as `const`; data inline up to SC_TEXT_INLINE_MAX elements),
 * nodes in order, graph outputs. The output is deterministic and parse.c reads
 * it back so that print(parse(print(g))) == print(g) byte for byte: floats
 * are printed with enough digits to round-trip (%.9g for f32, f16, bf16 and
 * float attributes, %.17g for f64), names that are not plain identifiers are
 * quoted with C escapes. Values flagged dead, nodes flagged dead and values
 * defined nowhere (no producer, not an input, not a constant) are not
 * printed. A graph with a sharding table (ir/sharding.h) prints a `mesh`
 * statement first and ` shard<...>` after the type of each value that has a
 * sharding; a graph without one prints exactly as before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharding.h"
#include "text.h"

static bool is_plain_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}

static bool is_plain(const char *s) {
  if (!s || !*s) return false;
  for (; *s; s++)
    if (!is_plain_char((unsigned char)*s)) return false;
  return true;
}

static void put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\t': fputs("\\t", f); break;
    case '\r': fputs("\\r", f); break;
    default:
      if (c < 0x20 || c >= 0x7f)
        fprintf(f, "\\x%02x", c);
      else
        fputc(c, f);
    }
  }
  fputc('"', f);
}

static void put_name(FILE *f, const char *s) {
  if (is_plain(s))
    fputs(s, f);
  else
    put_quoted(f, s);
}

static void put_value_ref(FILE *f, sc_graph *g, int32_t id) {
  if (id < 0 || id >= g->n_values) {
    fputc('_', f);
    return;
  }
  fputc('%', f);
  put_name(f, g->values[id].name);
}

/* A float always marked as one: has '.', an exponent, or is inf/nan. */
static void put_float(FILE *f, double v, int digits) {
  if (isnan(v)) {
    fputs("nan", f);
    return;
  }
  if (isinf(v)) {
    fputs(v < 0 ? "-inf" : "inf", f);
    return;
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%.*g", digits, v);
  fputs(buf, f);
  if (!strpbrk(buf, ".e")) fputs(".0", f);
}

static void put_type(FILE *f, const sc_value *v) {
  fputs(sc_dtype_name(v->dtype), f);
  if (v->rank < 0) {
    fputs("[*]", f);
    return;
  }
  fputc('[', f);
  for (int32_t d = 0; d < v->rank; d++) {
    if (d) fputc(',', f);
    if (v->dim_param && v->dim_param[d]) {
      put_name(f, v->dim_param[d]);
      fputc('=', f);
    }
    if (v->dims[d] < 0)
      fputc('?', f);
    else
      fprintf(f, "%lld", (long long)v->dims[d]);
  }
  fputc(']', f);
}

static bool has_type(const sc_value *v) {
  return v->dtype != SC_DTYPE_UNDEF || v->rank >= 0;
}

/* " shard<[dp,_] partial(tp)>" when value id has a sharding. */
static void put_sharding(FILE *f, sc_graph *g, int32_t id) {
  const sc_sharding *s = sc_graph_sharding(g, id);
  if (!s) return;
  char buf[1024];
  sc_sharding_format(s, &g->shardings->mesh, buf, sizeof buf);
  fprintf(f, " shard<%s>", buf);
}

static void put_mesh(FILE *f, const sc_mesh *m) {
  fputs("  mesh [", f);
  for (int32_t i = 0; i < m->n_axes; i++)
    fprintf(f, "%s%s=%lld", i ? ", " : "", m->axes[i].name, (long long)m->axes[i].size);
  fputc(']', f);
  if (m->ranks_per_node > 0) fprintf(f, " ranks_per_node %lld", (long long)m->ranks_per_node);
  fputc('\n', f);
}

/* Whether data of this dtype and size is printed inline. */
static bool printable_data(sc_dtype t, int64_t numel) {
  return numel >= 0 && numel <= SC_TEXT_INLINE_MAX &&
         (sc_dtype_is_numeric(t) || t == SC_DTYPE_BOOL) && sc_dtype_size(t) > 0;
}

static void put_elem(FILE *f, sc_dtype t, const void *data, int64_t i) {
  switch (t) {
  case SC_DTYPE_F32: put_float(f, ((const float *)data)[i], 9); break;
  case SC_DTYPE_F64: put_float(f, ((const double *)data)[i], 17); break;
  case SC_DTYPE_F16:
  case SC_DTYPE_BF16: put_float(f, sc_load_f64(t, data, i), 9); break;
  case SC_DTYPE_BOOL: fputs(((const uint8_t *)data)[i] ? "true" : "false", f); break;
  case SC_DTYPE_U64:
    fprintf(f, "%llu", (unsigned long long)((const uint64_t *)data)[i]);
    break;
  default:
    if (sc_dtype_is_float(t)) put_float(f, sc_load_f64(t, data, i), 9); /* float8, float4 */
    else fprintf(f, "%lld", (long long)sc_load_i64(t, data, i));
    break;
  }
}

static void put_data(FILE *f, sc_dtype t, const void *data, int64_t numel) {
  fputc('[', f);
  for (int64_t i = 0; i < numel; i++) {
    if (i) fputs(", ", f);
    put_elem(f, t, data, i);
  }
  fputc(']', f);
}

static void put_tensor(FILE *f, const sc_tensor *t) {
  sc_value tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.dtype = t->dtype;
  tmp.rank = t->rank < 0 || t->rank > SC_MAX_RANK ? -1 : t->rank;
  if (tmp.rank > 0) memcpy(tmp.dims, t->dims, (size_t)tmp.rank * sizeof tmp.dims[0]);
  fputs("tensor<", f);
  put_type(f, &tmp);
  fputc('>', f);
  int64_t numel = sc_value_numel(&tmp);
  int64_t want = sc_value_bytes(&tmp);
  if ((t->data || numel == 0) && want >= 0 && (uint64_t)want == t->data_bytes &&
      printable_data(t->dtype, numel))
    put_data(f, t->dtype, t->data, numel);
}

static const char *opaque_name(sc_attr_kind k) {
  switch (k) {
  case SC_ATTR_GRAPH: return "graph";
  case SC_ATTR_TENSORS: return "tensors";
  case SC_ATTR_GRAPHS: return "graphs";
  case SC_ATTR_SPARSE_TENSOR: return "sparse_tensor";
  case SC_ATTR_SPARSE_TENSORS: return "sparse_tensors";
  case SC_ATTR_TYPE_PROTO: return "type_proto";
  case SC_ATTR_TYPE_PROTOS: return "type_protos";
  default: return "undef";
  }
}

static void put_attr(FILE *f, const sc_attr *a) {
  put_name(f, a->name);
  fputs(" = ", f);
  switch (a->kind) {
  case SC_ATTR_INT: fprintf(f, "%lld", (long long)a->i); break;
  case SC_ATTR_FLOAT: put_float(f, (float)a->f, 9); break;
  case SC_ATTR_STRING: put_quoted(f, a->s ? a->s : ""); break;
  case SC_ATTR_INTS:
  case SC_ATTR_FLOATS:
  case SC_ATTR_STRINGS:
    fputc('[', f);
    for (int64_t i = 0; i < a->n; i++) {
      if (i) fputs(", ", f);
      if (a->kind == SC_ATTR_INTS)
        fprintf(f, "%lld", (long long)a->ints[i]);
      else if (a->kind == SC_ATTR_FLOATS)
        put_float(f, (float)a->floats[i], 9);
      else
        put_quoted(f, a->strings[i] ? a->strings[i] : "");
    }
    fputc(']', f);
    break;
  case SC_ATTR_TENSOR:
    if (a->t)
      put_tensor(f, a->t);
    else
      fputs("<tensor>", f);
    break;
  default: fprintf(f, "<%s>", opaque_name(a->kind)); break;
  }
}

static bool value_live(const sc_value *v) { return !(v->flags & SC_VALUE_DEAD); }

sc_status sc_ir_print(sc_graph *g, FILE *f) {
  fprintf(f, "shardc.ir 1\ngraph ");
  put_quoted(f, g->name ? g->name : "main");
  fprintf(f, " opset %lld {\n", (long long)g->opset);
  if (g->shardings) put_mesh(f, &g->shardings->mesh);
  for (int32_t i = 0; i < g->n_inputs; i++) {
    if (g->inputs[i] < 0 || g->inputs[i] >= g->n_values) continue;
    const sc_value *v = &g->values[g->inputs[i]];
    if (!value_live(v)) continue;
    fputs("  input ", f);
    put_value_ref(f, g, g->inputs[i]);
    if (has_type(v)) {
      fputs(" : ", f);
      put_type(f, v);
      put_sharding(f, g, g->inputs[i]);
    }
    fputc('\n', f);
  }
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!value_live(v) || !(v->flags & SC_VALUE_CONST) || v->producer >= 0 ||
        (v->flags & SC_VALUE_INPUT))
      continue;
    fputs(v->flags & SC_VALUE_PARAM ? "  param " : "  const ", f);
    put_value_ref(f, g, i);
    if (has_type(v)) {
      fputs(" : ", f);
      put_type(f, v);
      put_sharding(f, g, i);
    }
    int64_t numel = sc_value_numel(v);
    if (sc_value_has_data(v) && v->rank >= 0 && printable_data(v->dtype, numel)) {
      fputs(" = ", f);
      put_data(f, v->dtype, v->data, numel);
    }
    fputc('\n', f);
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (n->flags & SC_NODE_DEAD) continue;
    fputs("  ", f);
    for (int32_t j = 0; j < n->n_outputs; j++) {
      if (j) fputs(", ", f);
      int32_t id = n->outputs[j];
      put_value_ref(f, g, id);
      if (id >= 0 && id < g->n_values && has_type(&g->values[id])) {
        fputs(" : ", f);
        put_type(f, &g->values[id]);
        put_sharding(f, g, id);
      }
    }
    if (n->n_outputs) fputs(" = ", f);
    fputs(sc_op_name(n->op), f);
    fputc('(', f);
    for (int32_t j = 0; j < n->n_inputs; j++) {
      if (j) fputs(", ", f);
      put_value_ref(f, g, n->inputs[j]);
    }
    fputc(')', f);
    if (n->n_attrs > 0) {
      fputs(" {", f);
      for (int32_t j = 0; j < n->n_attrs; j++) {
        if (j) fputs(", ", f);
        put_attr(f, &n->attrs[j]);
      }
      fputc('}', f);
    }
    if (n->name) {
      fputc(' ', f);
      put_quoted(f, n->name);
    }
    fputc('\n', f);
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    if (g->outputs[i] < 0 || g->outputs[i] >= g->n_values) continue;
    if (!value_live(&g->values[g->outputs[i]])) continue;
    fputs("  output ", f);
    put_value_ref(f, g, g->outputs[i]);
    fputc('\n', f);
  }
  fputs("}\n", f);
  return ferror(f) ? sc_graph_error(g, SC_ERR_IO, "error writing the IR") : SC_OK;
}

char *sc_ir_print_string(sc_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  sc_status st = sc_ir_print(g, f);
  fclose(f);
  char *out = st == SC_OK && buf ? sc_malloc(len + 1) : NULL;
  if (out) {
    memcpy(out, buf, len);
    out[len] = 0;
  }
  free(buf);
  return out;
}
