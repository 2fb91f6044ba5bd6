/* plan.c — `shardc plan MODEL --mesh AXES`: partition a model and report
 * the result, or write it as a replayable plan (--json).
 *
 * The build (driver/driver.h) imports the model, divides its batch dims by
 * the microbatch count, runs the canonical passes, partitions and compiles
 * every stage graph (lowering and memory plan only, no JIT: it works on
 * shape-only models, --no-weights). This file only prints. The text report
 * (docs/cli.md#plan) has five parts, all derived from the partition and the
 * stage programs, in a fixed order so that golden tests can pin them:
 *   header       model, mesh, axis roles, a sequence padded for cp, stages,
 *                microbatches, schedule
 *   stages       per stage: its ranks, global nodes, blocks, parameters
 *                (global and per rank), FLOPs per microbatch (global and per
 *                rank), activation arena per rank
 *   memory       per rank of each stage: weights (CONST buffers, local
 *                shapes), comm scratch (the largest pack + unpack buffers
 *                of one COMM step), activations (the rest of the arena),
 *                total = weights + arena; then every line of the device's
 *                memory (codegen/device_memory.h) on the plan's target: the
 *                host's CPU device, or for a GPU cluster the CUDA device's
 *                (sc_device_target_of_cluster: its programs compiled with
 *                cuBLASLt's workspace in the arena, the context and NCCL's
 *                buffers as lines of their own)
 *   collectives  per (stage, op, axes): count and bytes per microbatch
 *                and per step (times the microbatches)
 *   shardings    every initializer: global shape, sharding, local shape
 *   fallbacks    (only when there are some) what the plan asked to split but
 *                stayed whole: weights whose dim does not divide, nodes
 *                whose rule gathers a split input (partition.h); also one
 *                warning line on stderr, with --json too
 * --json writes the plan (docs/plan-format.md) with node_stages and the
 * chosen sharding of every split initializer filled in, so that `--plan`
 * replays the same partition. --dot draws the local graph, coloured by
 * stage, collectives in red. --html FILE also writes the plan as one
 * self-contained page (plan_html.h; with --train plan_train.c writes it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/device_memory.h"
#include "codegen/dist_sim.h"
#include "driver/plan_report.h"
#include "ir/fileio.h"
#include "runtime/runtime.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/dot.h"
#include "tools/partition_args.h"
#include "tools/plan_auto.h"
#include "tools/plan_html.h"
#include "tools/plan_predict.h"
#include "tools/plan_train.h"
#include "tools/train_args.h"

static const char *const USAGE =
    "shardc plan MODEL.onnx (--mesh AXES | --plan FILE.json) [--dim NAME=V]...\n"
    "                      [--ranks-per-node N] [--cluster C] [--microbatches M]\n"
    "                      [--stage-boundaries A,B] [--sequence-parallel]\n"
    "                      [--no-vocab-parallel] [--no-overlap] [--json] [--dot FILE]\n"
    "                      [--no-weights] [--print-after=PASS] [--time-passes]\n"
    "                      [--html FILE]\n"
    "                      [--gemm-engine own|onednn] [--threads N]\n"
    "       shardc plan MODEL.onnx --train [--dim NAME=V]... [--loss KIND]\n"
    "                      [--mesh pp=P,... --schedule 1f1b --microbatches M]\n"
    "                      [--schedule-table]\n"
    "                      [--optimizer sgd|adamw] ... [--json] (the step's options of\n"
    "                      shardc train)";

enum { MAX_ARGS = 1024 };

/* ---- formatting helpers ---- */

static void fmt_dims(const int64_t *dims, int32_t rank, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t d = 0; d <= rank && pos < n; d++) {
    int w = d == rank ? snprintf(buf + pos, n - pos, "]")
                      : snprintf(buf + pos, n - pos, "%s%lld", d ? "," : "[", (long long)dims[d]);
    if (w < 0) return;
    pos += (size_t)w;
  }
  if (rank == 0) snprintf(buf, n, "[]");
}

static bool live_node(const sc_node *n) { return !(n->flags & SC_NODE_DEAD); }
static bool live_param(const sc_value *v) {
  return (v->flags & SC_VALUE_PARAM) && !(v->flags & SC_VALUE_DEAD);
}

/* ---- what the report shows, gathered once ---- */

typedef struct stage_info {
  char ranks[64];        /* "0..3", "0,2", "0,4,8,... (16 ranks)" */
  int64_t n_ranks;
  int64_t nodes;         /* live global nodes */
  int32_t first, last;   /* global node ids, -1 when none */
  int64_t block_lo, block_hi; /* block indices, -1 when none */
  int64_t params, params_rank;
  double flops, flops_rank;
  int64_t weight_bytes, arena_bytes, comm_bytes;
  sc_device_memory device; /* every line on the plan's target */
} stage_info;

typedef struct report {
  sc_device_target target; /* what the device memory is planned for */
  const sc_build *b;
  const sc_partition *part;
  sc_graph *g;
  const sc_stats *stats;
  stage_info *st;
  sc_plan_report pr;       /* memory per rank and collectives, as data */
} report;

/* The ranks of each stage (coordinate along pp), as text. */
static void stage_ranks(const sc_partition *part, stage_info *st) {
  const sc_mesh *m = &part->mesh;
  int64_t coords[SC_MESH_MAX_AXES];
  int64_t *first = sc_calloc((size_t)part->n_stages, sizeof *first);
  int64_t *last = sc_calloc((size_t)part->n_stages, sizeof *last);
  if (!first || !last) goto done;
  for (int64_t r = 0; r < m->n_ranks; r++) {
    sc_mesh_rank_to_coords(m, r, coords);
    int32_t s = part->pp_axis >= 0 ? (int32_t)coords[part->pp_axis] : 0;
    if (s >= part->n_stages) continue;
    stage_info *si = &st[s];
    if (si->n_ranks == 0) first[s] = r;
    last[s] = r;
    if (si->n_ranks < 3) { /* the list form shows up to three */
      size_t len = strlen(si->ranks);
      snprintf(si->ranks + len, sizeof si->ranks - len, "%s%lld", len ? "," : "", (long long)r);
    }
    si->n_ranks++;
  }
  for (int32_t s = 0; s < part->n_stages; s++) {
    stage_info *si = &st[s];
    if (si->n_ranks > 1 && last[s] - first[s] + 1 == si->n_ranks)
      snprintf(si->ranks, sizeof si->ranks, "%lld..%lld", (long long)first[s], (long long)last[s]);
    else if (si->n_ranks > 3) {
      size_t len = strlen(si->ranks);
      snprintf(si->ranks + len, sizeof si->ranks - len, ",... (%lld)", (long long)si->n_ranks);
    }
  }
done:
  sc_free(first);
  sc_free(last);
}

/* Elements of the value named name in graph g, or -1. */
static int64_t numel_in(const sc_graph *g, const char *name) {
  int32_t id = g ? sc_graph_find_value(g, name) : -1;
  return id >= 0 && g->values[id].rank >= 0 ? sc_value_numel(&g->values[id]) : -1;
}

/* Block index of node n from its name, else from the names of the
 * constants it reads (as sc_stats does); -1 when neither says. */
static int64_t node_block(sc_graph *g, const sc_node *n, const char *key) {
  if (!key) return -1;
  int64_t b = sc_stats_block_of_name(key, n->name);
  for (int32_t j = 0; b < 0 && j < n->n_inputs; j++) {
    const sc_value *in = sc_node_input(g, n, j);
    if (in && sc_value_is_const(in)) b = sc_stats_block_of_name(key, in->name);
  }
  return b;
}

/* Nodes, blocks, parameters and FLOPs of each stage, from the global graph
 * (node_stage) and the stage graphs. */
static sc_status stage_contents(report *r) {
  const sc_partition *part = r->part;
  sc_graph *g = r->g;
  int32_t *seen = g->n_values ? sc_calloc((size_t)g->n_values, sizeof *seen) : NULL;
  if (g->n_values && !seen) return SC_ERR_NOMEM;
  for (int32_t s = 0; s < part->n_stages; s++) {
    stage_info *si = &r->st[s];
    si->first = si->last = -1;
    si->block_lo = si->block_hi = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      sc_node *n = &g->nodes[i];
      if (!live_node(n) || part->node_stage[i] != s) continue;
      si->nodes++;
      if (si->first < 0) si->first = i;
      si->last = i;
      int64_t blk = node_block(g, n, r->stats->block_key);
      if (blk >= 0 && (si->block_lo < 0 || blk < si->block_lo)) si->block_lo = blk;
      if (blk > si->block_hi) si->block_hi = blk;
      sc_cost c = {0, 0};
      if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost) sc_ops[n->op].cost(g, n, &c);
      if (c.flops > 0) si->flops += c.flops;
      for (int32_t j = 0; j < n->n_inputs; j++) {
        int32_t vid = n->inputs[j];
        if (vid < 0 || !live_param(&g->values[vid]) || seen[vid] == s + 1) continue;
        seen[vid] = s + 1;
        const sc_value *v = &g->values[vid];
        si->params += sc_value_numel(v);
        int64_t local = numel_in(part->stages[s], v->name);
        if (local < 0) local = numel_in(part->local, v->name);
        si->params_rank += local >= 0 ? local : sc_value_numel(v);
      }
    }
    sc_graph *sg = part->stages[s];
    for (int32_t i = 0; i < sg->n_nodes; i++) {
      sc_node *n = &sg->nodes[i];
      if (!live_node(n)) continue;
      sc_cost c = {0, 0};
      if ((unsigned)n->op < SC_OP_COUNT && sc_ops[n->op].cost) sc_ops[n->op].cost(sg, n, &c);
      if (c.flops > 0) si->flops_rank += c.flops;
    }
  }
  sc_free(seen);
  return SC_OK;
}

/* Memory per rank (driver/plan_report.h) and each stage's memory on the
 * target. */
static sc_status program_contents(report *r) {
  sc_status st = sc_plan_report_gather(r->b, &r->pr);
  for (int32_t s = 0; st == SC_OK && s < r->part->n_stages; s++) {
    const sc_program *p = r->b->program->stages[s].program;
    stage_info *si = &r->st[s];
    if (!p) continue;
    si->weight_bytes = r->pr.mem[s].weight_bytes;
    si->arena_bytes = r->pr.mem[s].arena_bytes;
    si->comm_bytes = r->pr.mem[s].comm_bytes;
    sc_diag d = {0};
    if (sc_device_memory_plan(p, &r->target, &si->device, &d) != SC_OK) st = d.status;
  }
  return st;
}

/* ---- text report ---- */

/* --cluster: the cluster and where each mesh axis sits on it
 * (passes/plan/cluster.h). */
static void print_placement(const sc_plan *pl, const sc_mesh *m) {
  sc_placement p;
  sc_diag d = {0};
  sc_diag_clear(&d);
  printf("cluster:      %s (%lld node%s of %lld; the mesh uses %lld)\n", pl->cluster,
         (long long)pl->cluster_nodes, pl->cluster_nodes == 1 ? "" : "s",
         (long long)m->ranks_per_node, (long long)((m->n_ranks + m->ranks_per_node - 1) /
                                                   m->ranks_per_node));
  if (sc_placement_compute(m, &p, &d) != SC_OK) { /* validated: cannot happen */
    printf("placement:    ? (%s)\n", d.msg);
    return;
  }
  printf("placement:    %-6s %6s %8s  %-10s  %s\n", "axis", "size", "stride", "groups",
         "nodes/group");
  for (int32_t a = 0; a < p.n_axes; a++)
    printf("              %-6s %6lld %8lld  %-10s  %lld\n", p.axes[a].name,
           (long long)p.axes[a].size, (long long)p.axes[a].stride,
           sc_placement_groups_name(&p.axes[a]), (long long)p.axes[a].nodes_spanned);
}

static void print_header(const report *r, const char *path) {
  const sc_plan *pl = r->b->plan;
  const sc_partition *part = r->part;
  char mesh[256];
  sc_mesh_format(&part->mesh, mesh, sizeof mesh);
  printf("model:        %s\n", r->g->name ? r->g->name : "");
  printf("file:         %s\n", path);
  printf("mesh:         %s (%lld ranks", mesh[0] ? mesh : "-", (long long)part->mesh.n_ranks);
  if (part->mesh.ranks_per_node)
    printf(", %lld per node", (long long)part->mesh.ranks_per_node);
  printf(")\n");
  if (pl->cluster) print_placement(pl, &part->mesh);
  printf("roles:        data parallel %s, tensor parallel %s, pipeline %s\n",
         pl->dp_axis ? pl->dp_axis : "-", pl->tp_axis ? pl->tp_axis : "-",
         pl->pp_axis ? pl->pp_axis : "-");
  if (pl->tp_axis)
    printf("tensor:       sequence parallel %s, vocab parallel %s%s\n",
           pl->sequence_parallel ? "on" : "off", pl->vocab_parallel ? "on" : "off",
           pl->expert_tensor_parallel ? ", expert tensor parallel on" : "");
  sc_partition_print_cp_padding(part, stdout, "context:      ");
  printf("stages:       %d (", part->n_stages);
  if (pl->n_boundaries == 0) printf("balanced");
  for (int32_t i = 0; i < pl->n_boundaries; i++)
    printf("%s'%s'", i ? ", " : "boundaries ", pl->boundaries[i]);
  printf(")\n");
  printf("microbatches: %d (schedule %s; programs compiled for one microbatch)\n",
         part->microbatches, pl->schedule ? pl->schedule : "gpipe");
}

static void print_stages(const report *r) {
  char a[64], b[64], c[64], d[64], e[64], blocks[64];
  printf("\nstages (parameters and FLOPs: global, then per rank; FLOPs per microbatch):\n");
  printf("  %-5s %-12s %7s %-8s %14s %14s %14s %14s %12s\n", "stage", "ranks", "nodes", "blocks",
         "params", "params/rank", "FLOPs", "FLOPs/rank", "arena/rank");
  for (int32_t s = 0; s < r->part->n_stages; s++) {
    const stage_info *si = &r->st[s];
    if (si->block_lo < 0) snprintf(blocks, sizeof blocks, "-");
    else if (si->block_lo == si->block_hi) snprintf(blocks, sizeof blocks, "%lld", (long long)si->block_lo);
    else snprintf(blocks, sizeof blocks, "%lld..%lld", (long long)si->block_lo, (long long)si->block_hi);
    sc_cli_format_count(si->params, a, sizeof a);
    sc_cli_format_count(si->params_rank, b, sizeof b);
    sc_stats_format_si(si->flops, "FLOP", c, sizeof c);
    sc_stats_format_si(si->flops_rank, "FLOP", d, sizeof d);
    sc_stats_format_bytes((double)si->arena_bytes, e, sizeof e);
    printf("  %-5d %-12s %7lld %-8s %14s %14s %14s %14s %12s\n", s, si->ranks,
           (long long)si->nodes, blocks, a, b, c, d, e);
  }
  for (int32_t s = 0; s < r->part->n_stages; s++) {
    const stage_info *si = &r->st[s];
    if (si->first < 0) printf("  stage %d: no nodes\n", s);
    else printf("  stage %d: '%s' .. '%s'\n", s, r->g->nodes[si->first].name,
                r->g->nodes[si->last].name);
  }
}

static void print_memory(const report *r) {
  char a[64], b[64], c[64], d[64];
  printf("\nmemory per rank (the ranks of a stage run one program):\n");
  printf("  %-5s %-12s %12s %12s %12s %12s %14s\n", "stage", "ranks", "weights", "activations",
         "comm", "total", "total bytes");
  for (int32_t s = 0; s < r->part->n_stages; s++) {
    const stage_info *si = &r->st[s];
    int64_t act = si->arena_bytes - si->comm_bytes;
    if (act < 0) act = 0;
    int64_t total = si->weight_bytes + si->arena_bytes;
    sc_stats_format_bytes((double)si->weight_bytes, a, sizeof a);
    sc_stats_format_bytes((double)act, b, sizeof b);
    sc_stats_format_bytes((double)si->comm_bytes, c, sizeof c);
    sc_stats_format_bytes((double)total, d, sizeof d);
    printf("  %-5d %-12s %12s %12s %12s %12s %14lld\n", s, si->ranks, a, b, c, d,
           (long long)total);
  }
}

/* Every line of each stage's memory on the target: the arena and the
 * device's own memory beside it (codegen/device_memory.h), the weights,
 * and their total. */
static void print_device_memory(const report *r) {
  char t[96], v[32];
  bool cuda = !strcmp(r->target.device, "cuda");
  sc_cli_format_target(&r->target, t, sizeof t);
  printf("\nmemory per rank, every line (%s; the lines depend on the machine: %s):\n", t,
         cuda ? "the cluster's gpu.context_bytes and nccl_channels" : "--gemm-engine, --threads");
  int w = cuda ? 18 : 16; /* "cublaslt workspace" */
  printf("  %-5s %-*s %14s\n", "stage", w, "line", "bytes");
  for (int32_t s = 0; s < r->part->n_stages; s++) {
    const stage_info *si = &r->st[s];
    for (int l = 0; l < SC_MEM_LINE_COUNT; l++) {
      /* the CPU lists its lines that are there; a GPU all of its own */
      if (l != SC_MEM_ARENA && (cuda ? !sc_mem_line_of_device((sc_mem_line)l, "cuda")
                                     : si->device.bytes[l] == 0))
        continue;
      sc_stats_format_bytes((double)si->device.bytes[l], v, sizeof v);
      printf("  %-5d %-*s %14lld %12s%s\n", s, w, sc_mem_line_name((sc_mem_line)l),
             (long long)si->device.bytes[l], v,
             l == SC_MEM_CUDA_CONTEXT && !si->device.bytes[l] ? "  unknown (gpu.context_bytes)"
                                                              : "");
    }
    sc_stats_format_bytes((double)si->weight_bytes, v, sizeof v);
    printf("  %-5d %-*s %14lld %12s\n", s, w, "weights", (long long)si->weight_bytes, v);
    int64_t total = sc_device_memory_total(&si->device) + si->weight_bytes;
    sc_stats_format_bytes((double)total, v, sizeof v);
    printf("  %-5d %-*s %14lld %12s\n", s, w, "total", (long long)total, v);
  }
}

static void print_collectives(const report *r) {
  char axes[128], a[64], b[64];
  int32_t m = r->part->microbatches;
  printf("\ncollectives per rank (bytes: the larger of input and output; a step runs %d "
         "microbatch%s):\n", m, m == 1 ? "" : "es");
  if (r->pr.n_coll == 0) {
    printf("  none\n");
    return;
  }
  printf("  %-5s %-14s %-10s %6s %14s %14s  %s\n", "stage", "op", "axes", "count", "bytes/mb",
         "bytes/step", "link");
  for (int32_t i = 0; i < r->pr.n_coll; i++) {
    const sc_collective_row *c = &r->pr.coll[i];
    sc_cli_format_axes(&r->part->mesh, c->axes, axes, sizeof axes);
    sc_stats_format_bytes((double)c->bytes, a, sizeof a);
    sc_stats_format_bytes((double)c->bytes * m, b, sizeof b);
    /* --ranks-per-node: whether every group of these axes stays in a node */
    const char *link = sc_mesh_is_intra_node(&r->part->mesh, c->axes) ? "intra-node"
                                                                       : "inter-node";
    printf("  %-5d %-14s %-10s %6lld %14s %14s  %s\n", c->stage,
           (unsigned)c->kind < SC_COMM_KIND_COUNT ? sc_comm_kind_names[c->kind] : "?", axes,
           (long long)c->ops, a, b, link);
  }
}

static void print_shardings(const report *r) {
  const sc_partition *part = r->part;
  sc_graph *g = r->g;
  char shape[256], lshape[256], text[256];
  printf("\nshardings of the initializers (global shape, sharding, local shape):\n");
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    if (!live_param(v) || v->rank < 0) continue;
    fmt_dims(v->dims, v->rank, shape, sizeof shape);
    const sc_sharding *s = sc_partition_param_sharding(part, v->name);
    int64_t local[SC_MAX_RANK];
    sc_diag d = {0}; /* sc_diag_clear keeps .file: start zeroed */
    sc_diag_clear(&d);
    if (!s) {
      snprintf(text, sizeof text, "replicated");
      snprintf(lshape, sizeof lshape, "%s", shape);
    } else {
      sc_sharding_format(s, &part->mesh, text, sizeof text);
      if (sc_sharding_local_shape(s, &part->mesh, v->rank, v->dims, local, v->name, &d) == SC_OK)
        fmt_dims(local, v->rank, lshape, sizeof lshape);
      else snprintf(lshape, sizeof lshape, "?");
    }
    printf("  %-48s %-20s %-16s %s\n", v->name, shape, text, lshape);
  }
}

/* ---- --dot: the local graph by stage ---- */

static void value_label(const sc_value *v, const char *name, char *buf, size_t n) {
  char dims[192];
  fmt_dims(v->dims, v->rank < 0 ? 0 : v->rank, dims, sizeof dims);
  snprintf(buf, n, "%s%s%s%s", name ? name : "", name ? "\n" : "", sc_dtype_name(v->dtype), dims);
}

static bool is_comm_op(sc_op op) {
  return op == SC_OP_ALL_REDUCE || op == SC_OP_ALL_GATHER || op == SC_OP_REDUCE_SCATTER ||
         op == SC_OP_ALL_TO_ALL || op == SC_OP_SEND || op == SC_OP_RECV;
}

static sc_status write_dot(sc_graph *g, FILE *f) {
  static const char *const COLORS[] = {"#fff4d0", "#e0d8ff", "#ffe0c8", "#d0f5f0",
                                       "#f5f0c0", "#f0d8f5", "#e8e8e8", "#c8f0c8"};
  enum { N_COLORS = sizeof COLORS / sizeof COLORS[0] };
  char label[1024];
  fputs("digraph ", f);
  sc_dot_put_quoted(f, g->name ? g->name : "graph");
  fputs(" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [fontname=\"Helvetica\", fontsize=8];\n", f);
  for (int32_t i = 0; i < g->n_values; i++) {
    const sc_value *v = &g->values[i];
    bool input = v->flags & SC_VALUE_INPUT;
    if ((v->flags & SC_VALUE_DEAD) || !(input || (v->flags & SC_VALUE_PARAM))) continue;
    value_label(v, v->name, label, sizeof label);
    fprintf(f, "  v%d [shape=%s, style=filled, fillcolor=\"%s\"%s, label=", i,
            input ? "ellipse" : "box", input ? "#d0e8ff" : "#eeeeee", input ? "" : ", fontsize=7");
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sc_node *n = &g->nodes[i];
    if (!live_node(n)) continue;
    int64_t stage = sc_attr_int(g, n, "__stage", 0);
    const sc_value *out = n->n_outputs > 0 && n->outputs[0] >= 0 ? &g->values[n->outputs[0]] : NULL;
    char sl[256] = "";
    if (out) value_label(out, NULL, sl, sizeof sl);
    snprintf(label, sizeof label, "%s\n%s", sc_op_name(n->op), sl);
    if (is_comm_op(n->op))
      fprintf(f, "  n%d [shape=box, style=filled, color=red, fillcolor=\"#ff9090\", label=", i);
    else
      fprintf(f, "  n%d [shape=box, style=\"rounded,filled\", fillcolor=\"%s\", label=", i,
              COLORS[(stage < 0 ? 0 : stage) % N_COLORS]);
    sc_dot_put_quoted(f, label);
    fprintf(f, ", tooltip=");
    snprintf(label, sizeof label, "%s (stage %lld)", n->name, (long long)stage);
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
  }
  sc_dot_write_edges(g, f, false);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const sc_value *v = &g->values[g->outputs[i]];
    value_label(v, v->name, label, sizeof label);
    fprintf(f, "  out%d [shape=ellipse, style=filled, fillcolor=\"#d8f5d0\", label=", i);
    sc_dot_put_quoted(f, label);
    fputs("];\n", f);
    if (v->producer >= 0) fprintf(f, "  n%d -> out%d;\n", v->producer, i);
    else if (v->flags & SC_VALUE_INPUT) fprintf(f, "  v%d -> out%d;\n", g->outputs[i], i);
  }
  fputs("}\n", f);
  return ferror(f) ? SC_ERR_IO : SC_OK;
}

/* ---- the command ---- */

static int print_help(void) {
  printf("usage: %s\n\n"
         "Partitions a model over a device mesh (tensor, pipeline and data\n"
         "parallel) and reports each stage, memory per rank, collectives and the\n"
         "sharding of every initializer; or writes the plan as JSON for --plan.\n\n"
         "  --mesh AXES             e.g. pp=2,dp=2,tp=2; the axes are dp, tp and pp\n"
         "                          (data, tensor, pipeline parallel): no other names\n"
         "  --ranks-per-node N      ranks r, s share a node iff r/N == s/N\n"
         "  --microbatches M        pipeline microbatches (batch dims are divided by M)\n"
         "  --stage-boundaries A,B  node names starting stages 1, 2, ... (default: balanced)\n"
         "  --sequence-parallel     reduce-scatter + all-gather instead of all-reduce\n"
         "  --no-vocab-parallel     keep the embedding and LM head whole\n"
         "  --no-overlap            collectives run where they are, to completion (no\n"
         "                          async start and wait, no prefetch of the next gather)\n"
         "  --plan FILE.json        replay a plan written by --json (no --mesh etc.)\n"
         "  --dim NAME=V            bind symbolic dim NAME (the full batch; repeatable)\n"
         "  --no-weights            do not open external weight files (shapes only)\n"
         "  --json                  write the plan (docs/plan-format.md) on stdout\n"
         "  --dot FILE              write the local graph as Graphviz, coloured by stage\n"
         "  --html FILE             also write the plan as a self-contained page: summary,\n"
         "                          memory per rank, the simulated step's timeline (with\n"
         "                          --cluster), collectives (docs/report.md)\n"
         "  --print-after=PASS      print the IR after PASS (or 'all') to stderr\n"
         "  --time-passes           per-pass wall time on stderr\n"
         "  --schedule gpipe|1f1b|interleaved|zb-h1  the pipeline schedule (training: all)\n"
         "  --virtual-stages V      chunks per pipeline rank (--schedule interleaved)\n"
         "  --schedule-table        with --train: every pipeline rank's action list\n"
         "  --auto, --mesh auto     with --cluster C: search the inference plan (--batch B,\n"
         "                          --objective latency|throughput), or with --train\n"
         "                          --global-batch B the training plan (docs/planner.md;\n"
         "                          shardc plan --auto --help)\n"
         "  --train                 the training step on one rank instead: its memory\n"
         "                          (params, optimizer state, gradients, activations,\n"
         "                          workspace at the peak; the arena, allocated once).\n"
         "                          The step's options, as shardc train's:\n",
         USAGE);
  sc_train_args_help(stdout);
  return 0;
}

/* Takes the partitioning and training options out of argv; the rest go to
 * sc_cli_parse. */
/* --gemm-engine own|onednn and --threads N at argv[*i] into t: 1 when
 * taken, 0 when not such an option, 2 after a usage error. */
static int target_option(int argc, char **argv, int *i, sc_device_target *t) {
  bool missing = false;
  const char *v;
  int64_t n;
  if ((v = sc_cli_opt_value(argc, argv, i, "--gemm-engine", &missing))) {
    if (missing) return sc_cli_usage_error("--gemm-engine needs a value");
    (*i)++;
    if (strcmp(v, "own") == 0) t->engine = SC_GEMM_ENGINE_OWN;
    else if (strcmp(v, "onednn") == 0) t->engine = SC_GEMM_ENGINE_ONEDNN;
    else return sc_cli_usage_error("--gemm-engine takes own or onednn, not '%s'", v);
    return 1;
  }
  if ((v = sc_cli_opt_value(argc, argv, i, "--threads", &missing))) {
    if (missing) return sc_cli_usage_error("--threads needs a value");
    (*i)++;
    if (!sc_cli_parse_i64(v, 1, 4096, &n))
      return sc_cli_usage_error("--threads takes a count in [1, 4096], not '%s'", v);
    t->threads = (int)n;
    return 1;
  }
  return 0;
}

static int split_args(int argc, char **argv, sc_partition_args *p, bool *train, bool *table,
                      const char **html, sc_train_args *ta, sc_device_target *target,
                      char **rest, int *n_rest) {
  *n_rest = 0;
  rest[(*n_rest)++] = argv[0];
  bool only_files = false;
  for (int i = 1; i < argc;) {
    if (*n_rest >= MAX_ARGS - 1) return sc_cli_usage_error("too many arguments");
    if (!only_files && argv[i][0] == '-') {
      if (strcmp(argv[i], "--train") == 0) {
        *train = true;
        i++;
        continue;
      }
      if (strcmp(argv[i], "--schedule-table") == 0) {
        *table = true;
        i++;
        continue;
      }
      bool missing = false;
      const char *v = sc_cli_opt_value(argc, argv, &i, "--html", &missing);
      if (v) {
        if (missing) return sc_cli_usage_error("--html needs a file");
        *html = v;
        i++;
        continue;
      }
      int rc = target_option(argc, argv, &i, target);
      if (rc == 1) continue;
      if (rc) return rc;
      rc = sc_partition_args_take(p, argc, argv, &i, false);
      if (rc == 1) continue;
      if (rc) return rc;
      if ((rc = sc_train_args_take(ta, argc, argv, &i)) == 1) continue;
      if (rc) return rc;
      if (strcmp(argv[i], "--") == 0) only_files = true;
    }
    rest[(*n_rest)++] = argv[i++];
  }
  return 0;
}

/* What the report shows (r->st, r->pr: freed by report_free). */
static sc_status report_gather(report *r) {
  r->st = sc_calloc((size_t)r->part->n_stages, sizeof *r->st);
  if (!r->st) return SC_ERR_NOMEM;
  stage_ranks(r->part, r->st);
  if (stage_contents(r) != SC_OK || program_contents(r) != SC_OK) return SC_ERR_NOMEM;
  return SC_OK;
}

static void report_free(report *r) {
  sc_plan_report_free(&r->pr);
  sc_free(r->st);
}

static int report_all(const sc_build *b, sc_graph *g, const sc_stats *stats, const char *path,
                      const sc_device_target *target) {
  report r = {.target = *target, .b = b, .part = b->part, .g = g, .stats = stats};
  int rc = 1;
  if (report_gather(&r) != SC_OK) goto nomem;
  print_header(&r, path);
  printf("\n");
  sc_fuse_attention_print(&b->attention, stdout, "");
  print_stages(&r);
  print_memory(&r);
  print_device_memory(&r);
  print_collectives(&r);
  sc_plan_print_predicted(b->program, b->plan, b->plan->precision,
                          sc_plan_peak_rank_bytes(b->program, target));
  print_shardings(&r);
  if (b->part->n_fallbacks) {
    printf("\n");
    sc_partition_print_fallbacks(b->part, stdout, "");
  }
  rc = 0;
  goto done;
nomem:
  fprintf(stderr, "shardc: error: out of memory\n");
done:
  report_free(&r);
  return rc;
}

/* --html: the page of an inference plan (plan_html.h's sc_plan_infer_html):
 * one bar per stage (its weights as parameters, its arena as activations
 * and the collectives' scratch, the device's lines beside the arena), the
 * predicted step when the plan has a cluster. */
sc_status sc_plan_infer_html(const sc_build *b, const sc_device_target *target, const char *file,
                             const char *command, const sc_plan_html_candidate *candidates,
                             int32_t n_candidates, const char *path, sc_diag *d) {
  if (!b->part)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "the inference page draws a partitioned plan: give --mesh or --plan");
  sc_graph *g = b->graph;
  report r = {.target = *target, .b = b, .part = b->part, .g = g, .stats = &b->stats};
  sc_plan_html_bar *bars = sc_calloc((size_t)b->part->n_stages + 1, sizeof *bars);
  sc_status st = bars ? report_gather(&r) : SC_ERR_NOMEM;
  if (st != SC_OK) {
    sc_free(bars);
    report_free(&r);
    return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  for (int32_t s = 0; s < b->part->n_stages; s++) {
    const stage_info *si = &r.st[s];
    sc_plan_html_bar *bar = &bars[s];
    snprintf(bar->label, sizeof bar->label, "stage %d (ranks %s)", (int)s, si->ranks);
    bar->pipe_rank = s;
    int64_t act = si->arena_bytes - si->comm_bytes;
    bar->bytes[SC_PLAN_HTML_PARAMS] = si->weight_bytes;
    bar->bytes[SC_PLAN_HTML_ACTIVATIONS] = act > 0 ? act : 0;
    bar->bytes[SC_PLAN_HTML_COMM] = si->arena_bytes - (act > 0 ? act : 0);
    bar->bytes[SC_PLAN_HTML_DEVICE] = sc_device_memory_outside(&si->device);
  }
  sc_plan_infer_predict(b, target);
  sc_plan_html h = {.command = command, .model = file, .model_name = g->name,
                    .kind = "inference", .dp = b->program, .plan = b->plan, .bars = bars,
                    .n_bars = b->part->n_stages, .candidates = candidates,
                    .n_candidates = n_candidates};
  char tg[96];
  sc_cli_format_target(target, tg, sizeof tg);
  sc_plan_html_field(&h, "memory planned for", "%s", tg);
  for (int32_t s = 0; s < b->part->n_stages; s++) {
    const stage_info *si = &r.st[s];
    char key[32];
    snprintf(key, sizeof key, "stage %d", (int)s);
    if (si->first < 0) sc_plan_html_field(&h, key, "no nodes");
    else sc_plan_html_field(&h, key, "'%s' .. '%s' (%lld nodes)", g->nodes[si->first].name,
                            g->nodes[si->last].name, (long long)si->nodes);
  }
  st = sc_plan_html_write(&h, path, d);
  sc_free(bars);
  report_free(&r);
  return st;
}

/* One stderr line when the partition fell back to replicated anywhere;
 * `where` says where the list is (NULL: at the end of the report). */
static void warn_fallbacks(const sc_partition *part, const char *file, const char *where) {
  if (!part || !part->n_fallbacks) return;
  fprintf(stderr, "shardc: warning: %s: %d value%s or node%s not split as planned (fell back "
          "to replicated)%s\n", file, (int)part->n_fallbacks, part->n_fallbacks == 1 ? "" : "s",
          part->n_fallbacks == 1 ? "" : "s", where ? where : ": listed at the end of the report");
}

/* --train: the training step's memory (per rank with --mesh). */
static int plan_train(const sc_partition_args *p, sc_train_args *ta, const sc_cli_opts *o,
                      bool table, const char *html, const sc_device_target *target) {
  if (o->dot) return sc_cli_usage_error("plan --train does not take --dot");
  int rc = sc_train_args_finish(ta);
  if (rc) return rc;
  sc_build_setup bs;
  sc_build_setup_init(&bs, o, p);
  bs.compile.quiet = true;
  sc_plan_train_setup(&bs, target); /* as shardc train does, and plan --auto */
  bs.build.no_weights = o->no_weights;
  ta->t.shape_only = o->no_weights; /* shapes only: every float initializer trains */
  sc_build *b = NULL;
  if ((rc = sc_train_args_build(ta, p, o, &bs.build, &b)) != 0) return rc;
  warn_fallbacks(b->part, o->file, o->json ? ": listed under \"fallbacks\"" : NULL);
  rc = sc_plan_train_report(b, &ta->t, o->json, table, o->file, target);
  fflush(stdout);
  if (!rc && html) {
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_plan_train_html(b, &ta->t, target, o->file, "shardc plan --train", NULL, 0, html,
                           &d) != SC_OK)
      rc = sc_cli_report(&d, o->file);
  }
  sc_build_destroy(b);
  return rc;
}

int sc_cmd_plan(int argc, char **argv) {
  if (sc_plan_auto_asked(argc, argv)) return sc_cmd_plan_auto(argc, argv);
  sc_partition_args p;
  sc_partition_args_init(&p);
  sc_train_args ta;
  sc_train_args_init(&ta);
  bool train = false, table = false;
  const char *html = NULL;
  char *rest[MAX_ARGS];
  int n_rest = 0;
  sc_device_target target;
  sc_runtime_target_host(&target); /* with oneDNN's sizing of direct convolutions */
  int rc = split_args(argc, argv, &p, &train, &table, &html, &ta, &target, rest, &n_rest);
  if (rc) return rc;
  sc_cli_opts o;
  rc = sc_cli_parse(n_rest, rest,
                    SC_CLI_DIM | SC_CLI_NO_WEIGHTS | SC_CLI_PRINT_AFTER | SC_CLI_TIME_PASSES |
                        SC_CLI_JSON | SC_CLI_DOT,
                    USAGE, &o);
  if (rc) return rc;
  if (o.help) return print_help();
  /* a GPU cluster: the memory is the CUDA device's, whose arena holds
   * cuBLASLt's workspace as `shardc train --device cuda` plans it */
  sc_partition_args_target(&p, &target);
  if (train) return plan_train(&p, &ta, &o, table, html, &target);
  if (table) return sc_cli_usage_error("--schedule-table needs --train (a pipelined step)");
  if (ta.first) return sc_cli_usage_error("%s needs --train", ta.first);
  if (!sc_partition_args_active(&p))
    return sc_cli_usage_error("plan needs --mesh AXES or --plan FILE.json\nusage: %s", USAGE);

  sc_build_setup bs;
  sc_build_setup_init(&bs, &o, &p);
  bs.compile.quiet = true;
  sc_build_setup_target(&bs, &target);
  bs.build.no_weights = o.no_weights;
  bs.build.stats = true; /* for the block names only */
  sc_build *b = NULL;
  if ((rc = sc_partition_args_build(&p, &o, &bs.build, &b, NULL)) != 0) return rc;
  sc_graph *g = b->graph;
  warn_fallbacks(b->part, o.file, o.json ? "; the text report lists them" : NULL);

  if (!rc && o.dot) {
    sc_file_commit c;
    sc_diag dd = {0};
    bool ok = sc_file_commit_begin(&c, o.dot, &dd) == SC_OK;
    if (ok && write_dot(b->part->local, c.f) != SC_OK) {
      sc_file_commit_abort(&c);
      ok = false;
    }
    if (ok) ok = sc_file_commit_end(&c, &dd) == SC_OK;
    if (!ok) {
      fprintf(stderr, "shardc: error: %s: cannot write the Graphviz file\n", o.dot);
      rc = 1;
    }
  }
  if (!rc && o.json) {
    sc_diag d = {0};
    sc_diag_clear(&d);
    sc_status st = sc_partition_complete_plan(b->part, b->plan, &d);
    sc_plan_infer_predict(b, &target);
    if (st == SC_OK) st = sc_plan_write_json(b->plan, stdout, &d);
    if (st != SC_OK) rc = sc_cli_report(&d, o.file);
  } else if (!rc) {
    rc = report_all(b, g, &b->stats, o.file, &target);
  }
  fflush(stdout);
  if (!rc && html) {
    sc_diag d = {0};
    sc_diag_clear(&d);
    if (sc_plan_infer_html(b, &target, o.file, "shardc plan", NULL, 0, html, &d) != SC_OK)
      rc = sc_cli_report(&d, o.file);
  }
  fflush(stdout);
  sc_build_destroy(b);
  return rc;
}
