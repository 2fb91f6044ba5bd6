/* test_pp.c — pipeline stages (passes/partition/pp.h).
 *
 * Split: a local graph of 6 nodes tagged `__stage` 0,0,1,1,2,2 under the
 * mesh pp=3,tp=2, where stage 2 reads values of stage 0 (two stages later)
 * in the opposite order to their production, and a local output of stage 1
 * is also read by stage 2. Checked: the nodes, inputs and outputs of each
 * stage, Send/Recv placement, peers and tags (sends of s to t and receives
 * of t from s pair one to one, both in tag order, and run to completion
 * when sends block until received; a stage receives before its first
 * Send), shardings and constants
 * (a sharded weight without data, a replicated one with its data borrowed),
 * that every stage verifies, infers shapes equal to the local ones and
 * round-trips through the IR text, and that the stages' nodes other than
 * Send/Recv are exactly the local graph's nodes. One stage: the same graph
 * without a mesh. Errors: a node without `__stage`, stages out of order or
 * out of range, no mesh, no pp axis or one of another size, more than
 * 32768 tags.
 *
 * Stage assignment: 8 equal MatMul+Add layers in 2, 4 and 8 stages get
 * equal layers per stage, in 16 stages one node each; with 3 residual
 * layers in 2 stages the cut lands between layers (one value crossing)
 * although a cut inside layer 2 would balance better by a few percent; boundaries by name; unknown and
 * out-of-order boundary names and more stages than nodes are errors naming
 * them. Set PP_PRINT=1 to see the stage graphs. */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

#include "ir/sharding.h"
#include "passes/partition/pp.h"
#include "passes/pass.h"

/* ---- helpers ---- */

static void infer_ok(sc_graph *g) {
  sc_pass_opts o;
  sc_pass_opts_init(&o);
  o.quiet = true;
  o.verify = true;
  if (sc_run_passes(g, "infer-shapes", &o) != SC_OK) fail_msg("infer-shapes: %s", g->diag.msg);
}

static int32_t node_named(const sc_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0) return i;
  return -1;
}

static int64_t iattr(const sc_node *n, const char *name) {
  const sc_attr *a = sc_node_attr(n, name);
  assert_non_null(a);
  assert_int_equal(a->kind, SC_ATTR_INT);
  return a->i;
}

/* "op:name" of each node, space-separated, into buf. */
static const char *listing(const sc_graph *g, char *buf, size_t cap) {
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    pos += (size_t)snprintf(buf + pos, cap - pos, "%s%s:%s", i ? " " : "",
                            sc_op_name(g->nodes[i].op), g->nodes[i].name);
  return buf;
}

static const char *names_of(const sc_graph *g, const int32_t *ids, int32_t n, char *buf,
                            size_t cap) {
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t i = 0; i < n; i++)
    pos += (size_t)snprintf(buf + pos, cap - pos, "%s%s", i ? " " : "", g->values[ids[i]].name);
  return buf;
}

/* ---- split ---- */

static const char *local_text =
    "shardc.ir 1\n"
    "graph \"loc\" opset 18 {\n"
    "  mesh [pp=3, tp=2]\n"
    "  input %x : f32[4,8] shard<[_,_]>\n"
    "  param %w0 : f32[8,8]\n"
    "  const %bias : f32[8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]\n"
    "  param %w1 : f32[8,8] shard<[tp,_]>\n"
    "  %a : f32[4,8] = MatMul(%x, %w0) {__stage = 0} \"n0\"\n"
    "  %b : f32[4,8] = Add(%a, %bias) {__stage = 0} \"n1\"\n"
    "  %c : f32[4,8] shard<[_,_] partial(tp)> = MatMul(%b, %w1) {__stage = 1} \"n2\"\n"
    "  %d : f32[4,8] = Add(%c, %x) {__stage = 1} \"n3\"\n"
    "  %e : f32[4,8] = Add(%d, %b) {__stage = 2} \"n4\"\n"
    "  %f : f32[4,8] = Add(%e, %a) {__stage = 2} \"n5\"\n"
    "  output %f\n"
    "  output %d\n"
    "}\n";

static void split_ok(sc_graph *l, int32_t k, sc_graph **st) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_pp_split(l, k, "pp", st, &d) != SC_OK) fail_msg("split: %s", d.msg);
  for (int32_t s = 0; s < k; s++) assert_non_null(st[s]);
}

/* Sends of `from` to `to` and receives of `to` from `from` pair one to one,
 * in the same (increasing) tag order, on the same value name. */
static void check_pairs(sc_graph *from, int32_t fs, sc_graph *to, int32_t ts) {
  int32_t i = 0, j = 0;
  int64_t last = -1;
  for (;;) {
    while (i < from->n_nodes && !(from->nodes[i].op == SC_OP_SEND &&
                                  iattr(&from->nodes[i], "peer_stage") == ts))
      i++;
    while (j < to->n_nodes &&
           !(to->nodes[j].op == SC_OP_RECV && iattr(&to->nodes[j], "peer_stage") == fs))
      j++;
    if (i == from->n_nodes || j == to->n_nodes) break;
    const sc_node *sn = &from->nodes[i], *rn = &to->nodes[j];
    assert_int_equal(iattr(sn, "tag"), iattr(rn, "tag"));
    assert_true(iattr(sn, "tag") > last);
    last = iattr(sn, "tag");
    assert_string_equal(from->values[sn->inputs[0]].name, to->values[rn->outputs[0]].name);
    i++;
    j++;
  }
  assert_int_equal(i, from->n_nodes); /* no unmatched send */
  assert_int_equal(j, to->n_nodes);   /* no unmatched receive */
}

/* Runs the stages' Send/Recv in program order with rendezvous semantics (a
 * send waits for its receive, runtime/comm.h allows that): every one must
 * complete. */
static void check_no_deadlock(sc_graph **st, int32_t k) {
  int32_t at[8] = {0};
  SC_ASSERT(k <= 8);
  for (;;) {
    bool progress = false, done = true;
    for (int32_t s = 0; s < k; s++) { /* skip to the next Send/Recv */
      while (at[s] < st[s]->n_nodes && st[s]->nodes[at[s]].op != SC_OP_SEND &&
             st[s]->nodes[at[s]].op != SC_OP_RECV)
        at[s]++;
      if (at[s] < st[s]->n_nodes) done = false;
    }
    if (done) return;
    for (int32_t s = 0; s < k; s++) {
      if (at[s] == st[s]->n_nodes || st[s]->nodes[at[s]].op != SC_OP_SEND) continue;
      const sc_node *sn = &st[s]->nodes[at[s]];
      int32_t t = (int32_t)iattr(sn, "peer_stage");
      if (at[t] == st[t]->n_nodes) continue;
      const sc_node *rn = &st[t]->nodes[at[t]];
      if (rn->op == SC_OP_RECV && iattr(rn, "peer_stage") == s &&
          iattr(rn, "tag") == iattr(sn, "tag")) {
        at[s]++;
        at[t]++;
        progress = true;
      }
    }
    if (!progress) fail_msg("Send/Recv deadlock");
  }
}

static void test_split(void **state) {
  (void)state;
  sc_graph *l = parse_ok(local_text);
  assert_int_equal(sc_graph_verify(l, true), SC_OK);
  sc_graph *st[3];
  split_ok(l, 3, st);
  char buf[2048];
  assert_string_equal(listing(st[0], buf, sizeof buf),
                      "MatMul:n0 Send:a.send_to_2 Add:n1 Send:b.send_to_1 Send:b.send_to_2");
  assert_string_equal(listing(st[1], buf, sizeof buf),
                      "Recv:b.recv_from_0 MatMul:n2 Add:n3 Send:d.send_to_2");
  /* n4 needs d (tag 3) first, but receives go in tag order: a, b, then d
   * (receiving d first would deadlock with blocking sends: see
   * check_no_deadlock) */
  assert_string_equal(listing(st[2], buf, sizeof buf),
                      "Recv:a.recv_from_0 Recv:b.recv_from_0 Recv:d.recv_from_1 Add:n4 Add:n5");
  /* each Send right after its producer; tags in the order they are made */
  assert_int_equal(iattr(&st[0]->nodes[1], "tag"), 0);
  assert_int_equal(iattr(&st[0]->nodes[3], "tag"), 1);
  assert_int_equal(iattr(&st[0]->nodes[4], "tag"), 2);
  assert_int_equal(iattr(&st[1]->nodes[3], "tag"), 3);
  assert_int_equal(iattr(&st[1]->nodes[0], "tag"), 1);
  /* Send's token and attributes */
  const sc_node *snd = &st[0]->nodes[1];
  assert_string_equal(st[0]->values[snd->outputs[0]].name, "a.sent_to_2");
  const sc_attr *ax = sc_node_attr(snd, "axes");
  assert_non_null(ax);
  assert_int_equal(ax->kind, SC_ATTR_STRINGS);
  assert_int_equal(ax->n, 1);
  assert_string_equal(ax->strings[0], "pp");
  assert_int_equal(iattr(snd, "peer_stage"), 2);
  /* Recv's dtype and shape */
  const sc_node *rcv = &st[2]->nodes[2];
  assert_int_equal(iattr(rcv, "peer_stage"), 1);
  assert_string_equal(sc_attr_string(st[2], rcv, "dtype", ""), "f32");
  const int64_t *shp;
  assert_int_equal(sc_attr_ints(st[2], rcv, "shape", &shp), 2);
  assert_int_equal(shp[0], 4);
  assert_int_equal(shp[1], 8);
  for (int32_t s = 0; s < 3; s++)
    for (int32_t t = s + 1; t < 3; t++) check_pairs(st[s], s, st[t], t);
  check_no_deadlock(st, 3);

  /* inputs and outputs */
  assert_string_equal(names_of(st[0], st[0]->inputs, st[0]->n_inputs, buf, sizeof buf), "x");
  assert_string_equal(names_of(st[1], st[1]->inputs, st[1]->n_inputs, buf, sizeof buf), "x");
  assert_int_equal(st[2]->n_inputs, 0);
  assert_int_equal(st[0]->n_outputs, 0);
  assert_string_equal(names_of(st[1], st[1]->outputs, st[1]->n_outputs, buf, sizeof buf), "d");
  assert_string_equal(names_of(st[2], st[2]->outputs, st[2]->n_outputs, buf, sizeof buf), "f");

  /* constants: the replicated one borrows the local data, the sharded
   * weight keeps its local shape, flags and sharding, without data */
  int32_t lb = sc_graph_find_value(l, "bias"), sb = sc_graph_find_value(st[0], "bias");
  assert_true(sb >= 0);
  assert_ptr_equal(st[0]->values[sb].data, l->values[lb].data);
  int32_t w1 = sc_graph_find_value(st[1], "w1");
  assert_true(w1 >= 0);
  assert_null(st[1]->values[w1].data);
  assert_int_equal(st[1]->values[w1].flags & (SC_VALUE_CONST | SC_VALUE_PARAM),
                   SC_VALUE_CONST | SC_VALUE_PARAM);
  assert_true(sc_graph_find_value(st[0], "w1") < 0);
  assert_true(sc_graph_find_value(st[2], "w0") < 0);
  const sc_sharding *sh = sc_graph_sharding(st[1], w1);
  assert_non_null(sh);
  assert_true(sc_sharding_equal(sh, sc_graph_sharding(l, sc_graph_find_value(l, "w1"))));
  sh = sc_graph_sharding(st[1], sc_graph_find_value(st[1], "c"));
  assert_non_null(sh);
  assert_int_equal(sh->partial, 1u << 1); /* tp */
  assert_true(sc_mesh_equal(sc_graph_mesh(st[2]), sc_graph_mesh(l)));

  /* every node of the local graph is in exactly one stage, with its stage */
  int32_t others = 0;
  for (int32_t s = 0; s < 3; s++) {
    for (int32_t i = 0; i < st[s]->n_nodes; i++) {
      const sc_node *n = &st[s]->nodes[i];
      if (n->op == SC_OP_SEND || n->op == SC_OP_RECV) continue;
      others++;
      int32_t li = node_named(l, n->name);
      assert_true(li >= 0);
      assert_int_equal(n->op, l->nodes[li].op);
      assert_int_equal(iattr(n, "__stage"), s);
      for (int32_t t = 0; t < 3; t++)
        if (t != s) assert_int_equal(node_named(st[t], n->name), -1);
    }
  }
  assert_int_equal(others, l->n_nodes);

  /* each stage verifies, infers the local shapes, and round-trips as text */
  for (int32_t s = 0; s < 3; s++) {
    if (getenv("PP_PRINT")) sc_ir_print(st[s], stdout);
    assert_int_equal(sc_graph_verify(st[s], true), SC_OK);
    char *text = sc_ir_print_string(st[s]);
    assert_non_null(text);
    sc_graph *back = parse_ok(text);
    char *again = sc_ir_print_string(back);
    assert_string_equal(again, text);
    sc_free(again);
    sc_free(text);
    sc_graph_destroy(back);
    infer_ok(st[s]);
    for (int32_t v = 0; v < st[s]->n_values; v++) {
      const sc_value *x = &st[s]->values[v];
      int32_t lv = sc_graph_find_value(l, x->name);
      if (lv < 0) continue; /* a Send token */
      check_shape(st[s], v, l->values[lv].dtype, l->values[lv].rank, l->values[lv].dims);
    }
  }
  int32_t tok = sc_graph_find_value(st[1], "d.sent_to_2");
  check_shape(st[1], tok, SC_DTYPE_F32, 1, (int64_t[]){0});
  for (int32_t s = 0; s < 3; s++) sc_graph_destroy(st[s]);
  sc_graph_destroy(l);
}

/* A stage receives everything before its first Send: m2's value is sent
 * before m3 reads b from stage 0, so b's Recv moves up before that Send. */
static void test_split_recv_before_send(void **state) {
  (void)state;
  sc_graph *l = parse_ok("shardc.ir 1 graph \"r\" opset 18 {\n mesh [pp=3]\n"
                         " input %x : f32[4]\n"
                         " %a : f32[4] = Relu(%x) {__stage = 0} \"m0\"\n"
                         " %b : f32[4] = Tanh(%x) {__stage = 0} \"m1\"\n"
                         " %c : f32[4] = Relu(%x) {__stage = 1} \"m2\"\n"
                         " %d : f32[4] = Add(%c, %b) {__stage = 1} \"m3\"\n"
                         " %e : f32[4] = Add(%c, %a) {__stage = 2} \"m4\"\n"
                         " %f : f32[4] = Add(%e, %d) {__stage = 2} \"m5\"\n"
                         " output %f\n}\n");
  sc_graph *st[3];
  split_ok(l, 3, st);
  char buf[512];
  assert_string_equal(listing(st[1], buf, sizeof buf),
                      "Relu:m2 Recv:b.recv_from_0 Send:c.send_to_2 Add:m3 Send:d.send_to_2");
  assert_string_equal(listing(st[2], buf, sizeof buf),
                      "Recv:a.recv_from_0 Recv:c.recv_from_1 Add:m4 Recv:d.recv_from_1 Add:m5");
  check_no_deadlock(st, 3);
  for (int32_t s = 0; s < 3; s++) {
    infer_ok(st[s]);
    sc_graph_destroy(st[s]);
  }
  sc_graph_destroy(l);
}

static void test_split_one_stage(void **state) {
  (void)state;
  /* no mesh needed, no Send/Recv, the same nodes, inputs and outputs */
  sc_graph *l = parse_ok("shardc.ir 1 graph \"o\" opset 18 {\n input %x : f32[4]\n"
                         " %a : f32[4] = Relu(%x) {__stage = 0} \"r0\"\n"
                         " %b : f32[4] = Tanh(%a) {__stage = 0} \"r1\"\n"
                         " output %b\n output %a\n}\n");
  sc_graph *st[1];
  split_ok(l, 1, st);
  char buf[256];
  assert_string_equal(listing(st[0], buf, sizeof buf), "Relu:r0 Tanh:r1");
  assert_string_equal(names_of(st[0], st[0]->inputs, st[0]->n_inputs, buf, sizeof buf), "x");
  assert_string_equal(names_of(st[0], st[0]->outputs, st[0]->n_outputs, buf, sizeof buf), "b a");
  assert_null(sc_graph_mesh(st[0]));
  infer_ok(st[0]);
  sc_graph_destroy(st[0]);
  sc_graph_destroy(l);
}

static void split_err(const char *text, int32_t k, const char *axis, const char *node,
                      const char *needle) {
  sc_graph *l = parse_ok(text);
  sc_graph *st[4] = {(sc_graph *)1, (sc_graph *)1, (sc_graph *)1, (sc_graph *)1};
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status got = sc_pp_split(l, k, axis, st, &d);
  assert_int_not_equal(got, SC_OK);
  assert_int_equal(d.status, got);
  assert_string_equal(d.node, node);
  if (!strstr(d.msg, needle)) fail_msg("message '%s' lacks '%s'", d.msg, needle);
  for (int32_t s = 0; s < k; s++) assert_null(st[s]);
  sc_graph_destroy(l);
}

static void test_split_errors(void **state) {
  (void)state;
  const char *head = "shardc.ir 1 graph \"e\" opset 18 {\n mesh [pp=2]\n input %x : f32[4]\n";
  char t[1024];
  snprintf(t, sizeof t,
           "%s %%a : f32[4] = Relu(%%x) {__stage = 0} \"r0\"\n"
           " %%b : f32[4] = Relu(%%a) \"r1\"\n output %%b\n}\n", head);
  split_err(t, 2, "pp", "r1", "no int attribute '__stage'");
  snprintf(t, sizeof t,
           "%s %%a : f32[4] = Relu(%%x) {__stage = 1} \"r0\"\n"
           " %%b : f32[4] = Relu(%%a) {__stage = 0} \"r1\"\n output %%b\n}\n", head);
  split_err(t, 2, "pp", "r1", "comes after a node of stage 1");
  snprintf(t, sizeof t,
           "%s %%a : f32[4] = Relu(%%x) {__stage = 0} \"r0\"\n"
           " %%b : f32[4] = Relu(%%a) {__stage = 2} \"r1\"\n output %%b\n}\n", head);
  split_err(t, 2, "pp", "r1", "__stage 2 is outside [0, 2)");
  snprintf(t, sizeof t,
           "%s %%a : f32[4] = Relu(%%x) {__stage = 0} \"r0\"\n"
           " %%b : f32[4] = Relu(%%a) {__stage = 1} \"r1\"\n output %%b\n}\n", head);
  split_err(t, 3, "pp", "", "axis 'pp' has size 2 but there are 3 stages");
  split_err(t, 2, "stages", "", "pipeline axis 'stages' is not in the mesh");
  split_err("shardc.ir 1 graph \"e\" opset 18 {\n input %x : f32[4]\n"
            " %a : f32[4] = Relu(%x) {__stage = 0} \"r0\"\n"
            " %b : f32[4] = Relu(%a) {__stage = 1} \"r1\"\n output %b\n}\n",
            2, "pp", "", "needs a mesh");
}

/* 32769 values of stage 0 read by stage 1 need one tag too many. */
static void test_split_tag_limit(void **state) {
  (void)state;
  sc_graph *g = sc_graph_create("tags");
  assert_non_null(g);
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_mesh_parse("pp=2", &m, &d), SC_OK);
  assert_int_equal(sc_graph_attach_mesh(g, &m), SC_OK);
  int64_t four = 4;
  int32_t prev = inp(g, SC_DTYPE_F32, 1, &four);
  enum { N = 32769 };
  /* a chain r0..r{N-1} in stage 0; r{N+i} = Relu(r{i}) in stage 1 (named
   * values and few users each keep the graph cheap to build) */
  for (int32_t i = 0; i < 2 * N; i++) {
    int32_t in = i < N ? prev : g->nodes[i - N].outputs[0];
    char name[32];
    snprintf(name, sizeof name, "v%d", (int)i);
    int32_t out = sc_graph_add_value(g, name);
    assert_true(out >= 0);
    snprintf(name, sizeof name, "r%d", (int)i);
    int32_t nid = sc_graph_add_node(g, SC_OP_RELU, name, &in, 1, &out, 1);
    assert_true(nid >= 0);
    set_int(g, nid, "__stage", i < N ? 0 : 1);
    prev = out;
  }
  sc_graph *st[2] = {NULL, NULL};
  sc_diag_clear(&d);
  assert_int_equal(sc_pp_split(g, 2, "pp", st, &d), SC_ERR_LIMIT);
  assert_string_equal(d.node, "r32768");
  assert_non_null(strstr(d.msg, "more than 32768 tags"));
  assert_null(st[0]);
  sc_graph_destroy(g);
}

/* ---- stage assignment ---- */

/* n_layers of m{i} = MatMul(y, w{i}); y = Add(m{i}, b{i} or y when
 * residual), inferred. */
static sc_graph *layers(int32_t n_layers, bool residual) {
  size_t cap = 8192, pos = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  pos += (size_t)snprintf(t + pos, cap - pos,
                          "shardc.ir 1 graph \"g\" opset 18 {\n input %%y0 : f32[16,64]\n");
  for (int32_t i = 1; i <= n_layers; i++)
    pos += (size_t)snprintf(t + pos, cap - pos,
                            " param %%w%d : f32[64,64]\n param %%b%d : f32[64]\n"
                            " %%m%d = MatMul(%%y%d, %%w%d) \"mm%d\"\n"
                            " %%y%d = Add(%%m%d, %%%s%d) \"add%d\"\n",
                            i, i, i, i - 1, i, i, i, i, residual ? "y" : "b",
                            residual ? i - 1 : i, i);
  snprintf(t + pos, cap - pos, " output %%y%d\n}\n", n_layers);
  sc_graph *g = parse_ok(t);
  free(t);
  infer_ok(g);
  return g;
}

static void test_assign_balanced(void **state) {
  (void)state;
  sc_graph *g = layers(8, false);
  int32_t stage[16];
  sc_diag d = {0};
  for (int32_t k = 1; k <= 8; k *= 2) {
    sc_diag_clear(&d);
    assert_int_equal(sc_pp_assign_stages(g, k, NULL, 0, stage, &d), SC_OK);
    for (int32_t i = 0; i < 16; i++) assert_int_equal(stage[i], (i / 2) / (8 / k));
  }
  sc_diag_clear(&d); /* as many stages as nodes: one node each */
  assert_int_equal(sc_pp_assign_stages(g, 16, NULL, 0, stage, &d), SC_OK);
  for (int32_t i = 0; i < 16; i++) assert_int_equal(stage[i], i);
  sc_graph_destroy(g);

  /* 3 residual layers, 2 stages: the best balance cuts between mm2 and
   * add2 (two values cross: m2 and y1), within 5% a cut between layers
   * carries only y1 */
  g = layers(3, true);
  sc_diag_clear(&d);
  assert_int_equal(sc_pp_assign_stages(g, 2, NULL, 0, stage, &d), SC_OK);
  assert_int_equal(stage[0], 0);
  assert_int_equal(stage[5], 1);
  for (int32_t l = 0; l < 3; l++) assert_int_equal(stage[2 * l], stage[2 * l + 1]);
  sc_graph_destroy(g);
}

static void assign_err(sc_graph *g, int32_t k, const char *const *b, int32_t n_b,
                       const char *needle, const char *needle2) {
  int32_t stage[16];
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_status st = sc_pp_assign_stages(g, k, b, n_b, stage, &d);
  assert_int_not_equal(st, SC_OK);
  assert_int_equal(d.status, st);
  if (!strstr(d.msg, needle)) fail_msg("message '%s' lacks '%s'", d.msg, needle);
  if (needle2 && !strstr(d.msg, needle2)) fail_msg("message '%s' lacks '%s'", d.msg, needle2);
}

static void test_assign_boundaries(void **state) {
  (void)state;
  sc_graph *g = layers(8, false);
  int32_t stage[16];
  sc_diag d = {0};
  sc_diag_clear(&d);
  const char *b3[] = {"mm2", "add5", "mm8"};
  assert_int_equal(sc_pp_assign_stages(g, 4, b3, 3, stage, &d), SC_OK);
  /* nodes: mm1 add1 mm2 ... ; mm2 = node 2, add5 = node 9, mm8 = node 14 */
  for (int32_t i = 0; i < 16; i++)
    assert_int_equal(stage[i], i < 2 ? 0 : i < 9 ? 1 : i < 14 ? 2 : 3);

  assign_err(g, 2, (const char *[]){"nope"}, 1, "'nope' is not a node", NULL);
  assign_err(g, 3, (const char *[]){"mm5", "mm2"}, 2, "'mm2'", "'mm5'");
  assign_err(g, 3, (const char *[]){"mm5", "mm5"}, 2, "'mm5' (node 8) does not come after", NULL);
  assign_err(g, 2, (const char *[]){"mm1"}, 1, "stage 0 would be empty", NULL);
  assign_err(g, 3, (const char *[]){"mm5"}, 1, "1 pipeline boundaries for 3 stages", NULL);
  assign_err(g, 17, NULL, 0, "17 pipeline stages", "only 16 nodes");
  assign_err(g, 0, NULL, 0, "0 pipeline stages", NULL);
  sc_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split),           cmocka_unit_test(test_split_recv_before_send),
      cmocka_unit_test(test_split_one_stage),
      cmocka_unit_test(test_split_errors),    cmocka_unit_test(test_split_tag_limit),
      cmocka_unit_test(test_assign_balanced),
      cmocka_unit_test(test_assign_boundaries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
