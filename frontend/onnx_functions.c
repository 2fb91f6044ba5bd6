/* onnx_functions.c — model-local functions (ModelProto.functions), inlined
 * at import: PyTorch's dynamo exporter and onnxscript emit them.
 *
 * sc_onnx_inline_functions gives import_graph (onnx_import.c) a copy of the
 * main graph whose node list has every call of a model-local function (a
 * node whose domain and op_type name one) replaced by the function's body,
 * recursively. In a body expanded for call node C of function F:
 *   - F's formal inputs are C's actual inputs (a missing optional one is
 *     ""), F's formal outputs C's outputs (one C does not take becomes a
 *     value of its own);
 *   - every other value V made in the body is "C/V", every body node N is
 *     named "C/N" (or "C/<op>_<k>"), so expanded names say where they come
 *     from and do not meet the caller's;
 *   - an attribute that refers to F's attribute A (ref_attr_name) takes C's
 *     attribute A under its own name, else F's default for A
 *     (FunctionProto.attribute_proto), else is left out, as ONNX says.
 * A body may call functions in turn, up to SC_ONNX_MAX_FUNCTION_DEPTH deep
 * (a recursive function is an error, not a hang), and the expansion stops
 * at SC_ONNX_MAX_INLINED nodes or SC_ONNX_MAX_INLINED_NAMES bytes of the
 * names it makes (long names nested: memory stays bounded). Errors name the function and the body node:
 * a body reading a name that is neither F's input nor made before it, more
 * inputs or outputs than F declares, F importing another default opset than
 * the model's, two functions of one name.
 *
 * The schema this build reads (ONNX 1.12's onnx.proto) predates
 * FunctionProto.attribute_proto (field 11): protobuf-c keeps it among the
 * message's unknown fields, and each is unpacked here as an AttributeProto.
 *
 * Everything made here (nodes, name arrays, attribute copies) lives in the
 * graph's arena or, for unpacked defaults, in graph cleanups: the graph
 * import_graph fills owns it, and import_graph reads it before returning. */
#include <stdio.h>
#include <string.h>

#include "frontend_internal.h"

enum {
  SC_ONNX_MAX_FUNCTION_DEPTH = 32,
  SC_ONNX_MAX_INLINED = 1 << 20,        /* expanded nodes */
  SC_ONNX_MAX_INLINED_NAMES = 64 << 20, /* bytes of the names made for them */
};

typedef struct fn_info {
  const Onnx__FunctionProto *f;
  Onnx__AttributeProto **defaults; /* attribute_proto, unpacked */
  size_t n_defaults;
} fn_info;

typedef struct inliner {
  sc_onnx_ctx *c;
  const Onnx__ModelProto *m;
  fn_info *fns;
  size_t n_fns;
  sc_onnx_nodes out; /* the expanded node list */
  int64_t model_opset;
  size_t name_bytes; /* made so far (a hostile file's long names, nested) */
} inliner;

static sc_status nomem(inliner *in) {
  return sc_onnx_error(in->c, SC_ERR_NOMEM, "out of memory");
}

static bool same(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}


/* The function a node calls, or NULL. */
static const fn_info *callee(const inliner *in, const Onnx__NodeProto *np) {
  for (size_t k = 0; np && k < in->n_fns; k++)
    if (same(in->fns[k].f->name, np->op_type) &&
        (same(in->fns[k].f->domain, np->domain) ||
         (sc_onnx_default_domain(in->fns[k].f->domain) &&
          sc_onnx_default_domain(np->domain))))
      return &in->fns[k];
  return NULL;
}

static void free_attr(void *a) { onnx__attribute_proto__free_unpacked(a, NULL); }

/* Reads a varint at p (end excluded); its byte count, 0 if malformed. */
static size_t varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (size_t k = 0; p + k < end && k < 10; k++) {
    *v |= (uint64_t)(p[k] & 0x7f) << (7 * k);
    if (!(p[k] & 0x80)) return k + 1;
  }
  return 0;
}

/* F's attribute_proto (field 11, unknown to this schema), unpacked. */
static sc_status read_defaults(inliner *in, fn_info *fi) {
  const ProtobufCMessage *b = &fi->f->base;
  size_t n = 0;
  for (unsigned k = 0; k < b->n_unknown_fields; k++) n += b->unknown_fields[k].tag == 11;
  if (!n) return SC_OK;
  fi->defaults = sc_arena_array(&in->c->g->arena, n, sizeof *fi->defaults);
  if (!fi->defaults) return nomem(in);
  for (unsigned k = 0; k < b->n_unknown_fields; k++) {
    const ProtobufCMessageUnknownField *u = &b->unknown_fields[k];
    if (u->tag != 11) continue;
    const uint8_t *p = u->data, *end = u->data + u->len;
    uint64_t len;
    size_t h = varint(p, end, &len); /* the payload may keep its length prefix */
    if (u->wire_type == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED && h && len == u->len - h) p += h;
    Onnx__AttributeProto *a =
        u->wire_type == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED
            ? onnx__attribute_proto__unpack(NULL, (size_t)(end - p), p)
            : NULL;
    if (!a || !a->name || !a->name[0]) {
      if (a) onnx__attribute_proto__free_unpacked(a, NULL);
      return sc_onnx_error(in->c, SC_ERR_INVALID,
                           "function '%s': a default attribute (attribute_proto) is malformed",
                           fi->f->name);
    }
    if (sc_graph_add_cleanup(in->c->g, free_attr, a) != SC_OK) return nomem(in);
    fi->defaults[fi->n_defaults++] = a;
  }
  return SC_OK;
}

/* The functions of m, checked: named, unique, the model's default opset. */
static sc_status collect(inliner *in) {
  const Onnx__ModelProto *m = in->m;
  in->fns = sc_arena_array(&in->c->g->arena, m->n_functions, sizeof *in->fns);
  if (!in->fns) return nomem(in);
  for (size_t i = 0; i < m->n_functions; i++) {
    const Onnx__FunctionProto *f = m->functions[i];
    if (!f || !f->name || !f->name[0])
      return sc_onnx_error(in->c, SC_ERR_INVALID, "function %zu has no name", i);
    for (size_t k = 0; k < in->n_fns; k++)
      if (same(in->fns[k].f->name, f->name) && same(in->fns[k].f->domain, f->domain))
        return sc_onnx_error(in->c, SC_ERR_INVALID, "function '%s' (domain '%s') defined twice",
                             f->name, f->domain ? f->domain : "");
    for (size_t k = 0; k < f->n_opset_import; k++) {
      const Onnx__OperatorSetIdProto *os = f->opset_import[k];
      if (os && sc_onnx_default_domain(os->domain) && os->has_version &&
          os->version != in->model_opset)
        return sc_onnx_error(in->c, SC_ERR_UNSUPPORTED,
                             "function '%s' imports opset %lld, the model %lld (one default "
                             "opset per model)", f->name, (long long)os->version,
                             (long long)in->model_opset);
    }
    fn_info *fi = &in->fns[in->n_fns++];
    *fi = (fn_info){.f = f};
    sc_status st = read_defaults(in, fi);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

static sc_status emit(inliner *in, Onnx__NodeProto *np) {
  if (in->out.n >= SC_ONNX_MAX_INLINED)
    return sc_onnx_error(in->c, SC_ERR_LIMIT, "functions expand to more than %d nodes",
                         SC_ONNX_MAX_INLINED);
  return sc_onnx_nodes_push(in->c, &in->out, np);
}

/* Names inside one expansion: formal → actual, and the body's own. */
typedef struct scope {
  const char **from, **to;
  size_t n, cap;
} scope;

static bool scope_put(sc_arena *a, scope *s, const char *from, const char *to) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 32;
    const char **f = sc_arena_array(a, cap, sizeof *f), **t = sc_arena_array(a, cap, sizeof *t);
    if (!f || !t) return false;
    if (s->n) {
      memcpy(f, s->from, s->n * sizeof *f);
      memcpy(t, s->to, s->n * sizeof *t);
    }
    s->from = f;
    s->to = t;
    s->cap = cap;
  }
  s->from[s->n] = from;
  s->to[s->n++] = to;
  return true;
}

static const char *scope_get(const scope *s, const char *name) {
  for (size_t k = s->n; k-- > 0;) /* the latest binding wins */
    if (strcmp(s->from[k], name) == 0) return s->to[k];
  return NULL;
}

/* The attribute call gives, or F's default, for F's attribute `name`. */
static const Onnx__AttributeProto *attr_value(const Onnx__NodeProto *call, const fn_info *fi,
                                              const char *name) {
  for (size_t k = 0; k < call->n_attribute; k++)
    if (call->attribute[k] && same(call->attribute[k]->name, name)) return call->attribute[k];
  for (size_t k = 0; k < fi->n_defaults; k++)
    if (same(fi->defaults[k]->name, name)) return fi->defaults[k];
  return NULL;
}

/* "<call>/<name>" (or "<call>/<op>_<k>" when name is NULL), within the
 * names' budget; NULL when out of memory or over it (in->c's diag says). */
static const char *scoped(inliner *in, const char *call, const char *name, const char *op,
                          size_t k) {
  size_t n = strlen(call) + (name ? strlen(name) : strlen(op) + 24) + 2;
  if (in->name_bytes + n > SC_ONNX_MAX_INLINED_NAMES) {
    sc_onnx_error(in->c, SC_ERR_LIMIT, "functions expand to more than %d MiB of names",
                  SC_ONNX_MAX_INLINED_NAMES >> 20);
    return NULL;
  }
  in->name_bytes += n;
  const char *s = name ? sc_arena_printf(&in->c->g->arena, "%s/%s", call, name)
                       : sc_arena_printf(&in->c->g->arena, "%s/%s_%zu", call, op, k);
  if (!s) nomem(in);
  return s;
}

static sc_status expand(inliner *in, Onnx__NodeProto *call, const fn_info *fi, int depth);

/* Emits np, or expands it when it calls a function. */
static sc_status place(inliner *in, Onnx__NodeProto *np, int depth) {
  const fn_info *fi = callee(in, np);
  return fi ? expand(in, np, fi, depth + 1) : emit(in, np);
}

static sc_status expand(inliner *in, Onnx__NodeProto *call, const fn_info *fi, int depth) {
  sc_onnx_ctx *c = in->c;
  sc_arena *a = &c->g->arena;
  const Onnx__FunctionProto *f = fi->f;
  const char *cname = call->name;
  if (depth > SC_ONNX_MAX_FUNCTION_DEPTH)
    return sc_onnx_error(c, SC_ERR_LIMIT,
                         "function '%s': calls nest deeper than %d (a recursive function?)",
                         f->name, SC_ONNX_MAX_FUNCTION_DEPTH);
  if (call->n_input > f->n_input || call->n_output > f->n_output)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "node '%s' calls function '%s' with %zu inputs and %zu outputs; it "
                         "declares %zu and %zu", cname, f->name, call->n_input, call->n_output,
                         f->n_input, f->n_output);
  scope s = {0};
  for (size_t i = 0; i < f->n_input; i++)
    if (!f->input[i] || !scope_put(a, &s, f->input[i], i < call->n_input ? call->input[i] : ""))
      return f->input[i] ? nomem(in)
                         : sc_onnx_error(c, SC_ERR_INVALID, "function '%s': input %zu has no "
                                                            "name", f->name, i);
  for (size_t k = 0; k < f->n_node; k++) {
    const Onnx__NodeProto *b = f->node[k];
    if (!b || !b->op_type)
      return sc_onnx_error(c, SC_ERR_INVALID, "function '%s': node %zu has no op_type", f->name,
                           k);
    Onnx__NodeProto *np = sc_arena_array(a, 1, sizeof *np);
    if (!np) return nomem(in);
    onnx__node_proto__init(np);
    np->op_type = b->op_type;
    np->domain = b->domain;
    np->name = (char *)scoped(in, cname, b->name && b->name[0] ? b->name : NULL, b->op_type, k);
    np->n_input = b->n_input;
    np->n_output = b->n_output;
    np->input = sc_arena_array(a, b->n_input + 1, sizeof *np->input);
    np->output = sc_arena_array(a, b->n_output + 1, sizeof *np->output);
    np->attribute = sc_arena_array(a, b->n_attribute + 1, sizeof *np->attribute);
    if (!np->name) return c->diag->status;
    if (!np->input || !np->output || !np->attribute) return nomem(in);
    for (size_t j = 0; j < b->n_input; j++) {
      const char *x = b->input[j] ? b->input[j] : "";
      const char *to = x[0] ? scope_get(&s, x) : "";
      if (!to)
        return sc_onnx_error(c, SC_ERR_INVALID,
                             "function '%s', node '%s': reads '%s', which is neither an input "
                             "of the function nor made before it", f->name,
                             b->name && b->name[0] ? b->name : b->op_type, x);
      np->input[j] = (char *)to;
    }
    for (size_t j = 0; j < b->n_output; j++) {
      const char *x = b->output[j] ? b->output[j] : "";
      const char *to = "";
      for (size_t o = 0; x[0] && o < f->n_output && !to[0]; o++)
        if (f->output[o] && strcmp(f->output[o], x) == 0 && o < call->n_output)
          to = call->output[o];
      if (x[0] && !to[0] && !(to = scoped(in, cname, x, NULL, 0))) return c->diag->status;
      if (x[0] && !scope_put(a, &s, x, to)) return nomem(in);
      np->output[j] = (char *)to;
    }
    for (size_t j = 0; j < b->n_attribute; j++) {
      const Onnx__AttributeProto *at = b->attribute[j];
      if (!at || !at->ref_attr_name || !at->ref_attr_name[0]) {
        np->attribute[np->n_attribute++] = (Onnx__AttributeProto *)at;
        continue;
      }
      const Onnx__AttributeProto *v = attr_value(call, fi, at->ref_attr_name);
      if (!v) continue; /* neither given nor defaulted: left out */
      Onnx__AttributeProto *cp = sc_arena_array(a, 1, sizeof *cp);
      if (!cp) return nomem(in);
      *cp = *v;
      cp->name = at->name;
      cp->ref_attr_name = NULL;
      np->attribute[np->n_attribute++] = cp;
    }
    sc_status st = place(in, np, depth);
    if (st != SC_OK) return st;
  }
  return SC_OK;
}

sc_status sc_onnx_inline_functions(sc_onnx_ctx *c, const Onnx__ModelProto *m,
                                   int64_t model_opset, const Onnx__GraphProto **gp) {
  if (!m->n_functions) return SC_OK;
  inliner in = {.c = c, .m = m, .model_opset = model_opset};
  sc_status st = collect(&in);
  const Onnx__GraphProto *g0 = *gp;
  sc_arena *a = &c->g->arena;
  for (size_t i = 0; st == SC_OK && i < g0->n_node; i++) {
    Onnx__NodeProto *np = g0->node[i];
    const fn_info *fi = np ? callee(&in, np) : NULL;
    if (!fi) {
      st = emit(&in, np);
      continue;
    }
    Onnx__NodeProto *call = np;
    if (!np->name || !np->name[0]) { /* expanded names need the call's */
      if (!(call = sc_arena_array(a, 1, sizeof *call))) {
        st = nomem(&in);
        break;
      }
      *call = *np;
      if (!(call->name = sc_arena_printf(a, "%s_%zu", fi->f->name, i))) st = nomem(&in);
    }
    c->cur_node = call->name;
    c->cur_op = np->op_type;
    if (st == SC_OK) st = expand(&in, call, fi, 1);
  }
  return sc_onnx_nodes_finish(c, &in.out, st, gp);
}
