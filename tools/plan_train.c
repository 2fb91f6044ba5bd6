/* plan_train.c — the training step's memory, printed (plan_train.h).
 *
 * Text:
 *   training step of MODEL: P parameters in T tensors, OPTIMIZER[, bf16|fp16]
 *   [mesh M (N ranks), ZeRO-k over fsdp: the memory below is one rank's]
 *   memory of the step (planned = allocated: the arena is allocated once):
 *     params, optimizer state, gradients, activations, workspace, data
 *                        bytes live at the peak step, by class
 *     live at the peak   their sum, and the step (its origin)
 *     arena              what the memory plan asked for and the runtime
 *                        allocates (and what placement loses)
 *     constants          frozen weights and folded values (outside the arena)
 *     total              arena + constants
 *     the device's lines beside the arena (the CPU's that are there; on a
 *     GPU cluster the CUDA device's, all: workspace, weights padding,
 *     context, NCCL's buffers) and `total, all`; a pipelined step lists a
 *     GPU's per pipeline rank (its pieces' summed, one context)
 *   with a mesh, the collectives of one rank's step: per (op, axes) the
 *   count, the bytes of the whole tensors, what the rank sends with ring
 *   algorithms, and their sum in units of Ψ (the trainable parameters'
 *   fp32 bytes) next to the ZeRO paper's figure for the mesh.
 * JSON: the same numbers, in bytes. --html: the page of plan_html.h, its
 * bars the same figures by part (sc_plan_train_html). */
#include "tools/plan_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "codegen/dist_sim.h"
#include "codegen/pipe_schedule.h"
#include "codegen/train_manifest.h"
#include "driver/plan_report.h"
#include "driver/train_memory.h"
#include "passes/partition/partition.h"
#include "passes/blocks.h"
#include "passes/stats.h"
#include "tools/cli.h"
#include "tools/plan_predict.h"

/* The ZeRO paper's communication per rank per step, in units of Ψ (fp32
 * elements), for the data-parallel part of the mesh: 2(n-1)/n for DDP and
 * ZeRO-1/2 over n ranks, 3(n-1)/n for ZeRO-3; with dp replicas over fsdp
 * shards (HSDP) 3(S-1)/S + 2(R-1)/(R S). */
static double zero_figure(const sc_partition *part) {
  const sc_mesh *m = &part->mesh;
  double R = part->dp_axis >= 0 ? (double)m->axes[part->dp_axis].size : 1;
  double S = part->fsdp_axis >= 0 ? (double)m->axes[part->fsdp_axis].size : 1;
  double k = part->zero_stage == 3 ? 3.0 : 2.0;
  return k * (S - 1) / S + 2.0 * (R - 1) / (R * S);
}

static void json_str(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

/* Entry i of a JSON list of {"node", "why"} (a comma before all but the
 * first). */
static void json_node_why(int32_t i, const char *node, const char *why) {
  printf("%s{\"node\": ", i ? ", " : "");
  json_str(node);
  printf(", \"why\": ");
  json_str(why);
  printf("}");
}

/* --json: ", \"fallbacks\": {...}" with a mesh: what the partition asked
 * to split and kept whole (sc_partition_print_fallbacks' list: the values
 * not split, then the nodes computed whole), empty when nothing fell back. */
static void json_fallbacks(const sc_partition *part) {
  if (!part) return;
  int32_t seeds = part->n_seed_fallbacks;
  printf(",\n \"fallbacks\": {\"values\": %d, \"nodes\": %d, \"list\": [", (int)seeds,
         (int)(part->n_fallbacks - seeds));
  for (int32_t i = 0; i < part->n_fallbacks; i++) {
    const sc_partition_fallback *f = &part->fallbacks[i];
    printf("%s{\"node\": ", i ? ", " : "");
    json_str(f->node);
    printf(", \"op\": ");
    json_str(f->op);
    printf(", \"why\": ");
    json_str(f->what);
    printf("}");
  }
  printf("]}");
}

/* The text's last section (plan's, docs/cli.md): the fallbacks to
 * replicated, when there are some. */
static void print_fallbacks(const sc_partition *part) {
  if (!part || !part->n_fallbacks) return;
  printf("\n");
  sc_partition_print_fallbacks(part, stdout, "");
}

static void row(const char *what, int64_t bytes, const char *note) {
  char b[32];
  sc_stats_format_bytes((double)bytes, b, sizeof b);
  printf("  %-18s %12s  %14lld  %s\n", what, b, (long long)bytes, note);
}

/* --json: ", \"predicted\": {...}" when the plan has a cluster. */
static void print_predicted_json(const sc_build *b) {
  if (!b->plan || !b->plan->predicted.on) return;
  json_t *o = sc_plan_predicted_json(&b->plan->predicted);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  if (s) printf(",\n \"predicted\": %s", s);
  free(s);
  json_decref(o);
}

/* --json of a pipelined step: ",\n \"plan\": {...}", the plan file that
 * replays it with --plan (sc_partition_complete_plan: the cut its chunks
 * were made at, whatever the cluster); 0, or the exit status after the
 * error. */
static int print_plan_json(const sc_build *b, const char *file) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *text = NULL;
  sc_status st = sc_partition_complete_plan(b->part, b->plan, &d);
  if (st == SC_OK && !(text = sc_plan_write_json_string(b->plan, &d))) st = d.status;
  json_t *o = text ? json_loads(text, 0, NULL) : NULL;
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  if (st == SC_OK && !s) st = sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (s) printf(",\n \"plan\": %s", s);
  free(s);
  json_decref(o);
  sc_free(text);
  return st == SC_OK ? 0 : sc_cli_report(&d, file);
}

/* ---- a pipelined step ---- */

/* Every rank's action list: each action, what it receives from (<r) and
 * sends to (>r) other pipeline ranks (sc_pipe_traffic: the runtime's
 * transfers, not the dependencies: a value read once per step is sent by
 * its last microbatch, a prepare piece's once a step, before any forward). */
static void print_table(const sc_dist_program *dp, const sc_pipe_row *rows) {
  int32_t P = dp->pipe_ranks;
  printf("\nschedule (P prepare, F forward, B backward, W weight gradients, N norm, U update; "
         "chunk.microbatch; <r receives "
         "from, >r sends to pipeline rank r):\n");
  for (int32_t q = 0; q < P; q++) {
    printf("  rank %d:", (int)q);
    for (int32_t i = 0; i < rows[q].n_acts; i++) {
      char name[64];
      printf(" %s", sc_pipe_action_name(&rows[q].acts[i], name, sizeof name));
      for (int32_t r = 0; r < P && r < 64; r++)
        if (rows[q].from[i] >> r & 1) printf("<%d", (int)r);
      for (int32_t r = 0; r < P && r < 64; r++)
        if (rows[q].to[i] >> r & 1) printf(">%d", (int)r);
    }
    printf("\n");
  }
}

void sc_plan_train_setup(sc_build_setup *bs, const sc_device_target *target) {
  sc_compile_opts_report(&bs->compile, target, true);
}


static int pipe_report(const sc_build *b, const sc_train_opts *t, bool json, bool table,
                       const char *file, const sc_device_target *target) {
  const sc_dist_program *dp = b->program;
  const sc_partition *part = b->part;
  int32_t P = dp->pipe_ranks, C = dp->pipe_chunks, M = dp->schedule.microbatches;
  bool cuda = target->device && !strcmp(target->device, "cuda"); /* a GPU's own lines */
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_pipe_handoffs ho;
  sc_pipe_deps deps = {0};
  sc_pipe_row *rows = sc_calloc((size_t)P, sizeof *rows);
  sc_pipe_action **lists = sc_calloc((size_t)P, sizeof *lists);
  int32_t *ns = sc_calloc((size_t)P, sizeof *ns);
  if (!rows || !lists || !ns) {
    sc_free(rows);
    sc_free(lists);
    sc_free(ns);
    fprintf(stderr, "shardc: error: out of memory\n");
    return 1;
  }
  sc_status st = sc_pipe_handoffs_of(dp, &ho, &d);
  if (st == SC_OK) st = sc_pipe_deps_of(dp, &deps, &d);
  for (int32_t q = 0; st == SC_OK && q < P; q++) {
    st = sc_pipe_row_of(dp, &ho, q, target, &rows[q], &d);
    lists[q] = rows[q].acts;
    ns[q] = rows[q].n_acts;
  }
  if (st == SC_OK) st = sc_pipe_check(&deps, P, C / P, M, lists, ns, &d);
  int rc = 0;
  if (st != SC_OK) {
    rc = sc_cli_report(&d, file);
    goto done;
  }
  char mesh[256];
  sc_mesh_format(&part->mesh, mesh, sizeof mesh);
  const char *sched = sc_schedule_name(dp->schedule.kind);
  const char *opt = t->optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw";
  if (json) {
    printf("{\"model\": ");
    json_str(file);
    printf(", \"parameters\": %lld, \"tensors\": %d, \"optimizer\": \"%s\", \"mesh\": ",
           (long long)b->train.trainable_numel, (int)b->train.n_trainable, opt);
    json_str(mesh);
    printf(", \"ranks\": %lld, \"zero_stage\": %d,\n \"pipeline\": {\"schedule\": \"%s\", "
           "\"stages\": %d, \"virtual_stages\": %d, \"microbatches\": %d, \"deadlock_free\": "
           "true, \"boundaries\": ",
           (long long)part->mesh.n_ranks, (int)part->zero_stage, sched, (int)P, (int)(C / P),
           (int)M);
    /* where the chunks were cut (a replay with --stage-boundaries or the
     * plan file cuts there whatever its cluster) */
    if (!part->chunk_boundaries) printf("null");
    for (int32_t i = 0; part->chunk_boundaries && i < C - 1; i++) {
      printf("%s", i ? ", " : "[");
      json_str(part->chunk_boundaries[i]);
    }
    /* a cut of one chunk has no boundary: an empty list, still JSON */
    printf("%s, \"ranks\": [",
           !part->chunk_boundaries ? "" : C > 1 ? "]" : "[]");
    for (int32_t q = 0; q < P; q++) {
      const sc_pipe_row *r = &rows[q];
      printf("%s\n  {\"rank\": %d, \"arena\": %lld, \"state\": %lld, \"stash_peak\": %lld, "
             "\"step_values_peak\": %lld, \"total\": %lld, \"stashed_microbatches\": %d, "
             "\"stash_formula\": %d, \"p2p_sent\": %lld, \"collective_sent\": %lld, ",
             q ? "," : "", (int)q, (long long)r->arena, (long long)r->state,
             (long long)r->stash, (long long)r->step,
             (long long)(r->arena + r->state + r->kept), (int)r->stashed,
             (int)r->formula, (long long)r->p2p, (long long)r->coll);
      printf("\"offload\": {\"values\": %lld, \"bytes\": %lld, \"host_pool\": %lld, "
             "\"stash_peak_without\": %lld, \"total_without\": %lld, \"saved_at_peak\": %lld}, "
             "\"actions\": [",
             (long long)r->off_values, (long long)r->off_bytes, (long long)r->host,
             (long long)r->stash_without, (long long)(r->arena + r->state + r->kept_without),
             (long long)(r->kept_without - r->kept));
      if (cuda) { /* a GPU's lines beside the arena, and the total with them */
        printf("], \"device\": {");
        for (int l = 1, first = 1; l < SC_MEM_LINE_COUNT; l++) {
          if (!sc_mem_line_of_device((sc_mem_line)l, "cuda")) continue;
          printf("%s\"%s\": %lld", first ? "" : ", ", sc_mem_line_name((sc_mem_line)l),
                 (long long)r->dev.bytes[l]);
          first = 0;
        }
        printf("}, \"total_with_device\": %lld, \"actions\": [",
               (long long)(r->arena + r->state + r->kept + r->outside));
      }
      for (int32_t i = 0; i < r->n_acts; i++) {
        char name[64];
        printf("%s\"%s\"", i ? ", " : "", sc_pipe_action_name(&r->acts[i], name, sizeof name));
      }
      printf("]}");
    }
    printf("]}");
    json_fallbacks(part);
    print_predicted_json(b);
    rc = print_plan_json(b, file);
    printf("}\n");
    goto done;
  }
  char count[64];
  sc_cli_format_count(b->train.trainable_numel, count, sizeof count);
  printf("training step of %s: %s parameters in %d tensors, %s\n", file, count,
         (int)b->train.n_trainable, opt);
  printf("mesh %s (%lld ranks), pipeline %s: %d pipeline ranks x %d chunks, %d microbatches "
         "(each a forward and a backward step)\n", mesh, (long long)part->mesh.n_ranks, sched,
         (int)P, (int)(C / P), (int)M);
  if (part->chunk_boundaries) {
    printf("chunks cut at (--stage-boundaries):");
    for (int32_t i = 0; i < C - 1; i++) printf("%s'%s'", i ? ", " : " ", part->chunk_boundaries[i]);
    printf("\n");
  }
  printf("schedule check: every rank's action list runs to its end (no deadlock)\n");
  printf("\nper pipeline rank (one rank of its data and tensor parallel group; planned = "
         "allocated):\n");
  printf("  %4s %12s %12s %12s %12s %12s %9s %9s %12s %12s\n", "rank", "arena", "state",
         "stash peak", "step values", "total", "stashed", "formula", "p2p sent", "coll sent");
  for (int32_t q = 0; q < P; q++) {
    const sc_pipe_row *r = &rows[q];
    printf("  %4d %12lld %12lld %12lld %12lld %12lld %9d %9d %12lld %12lld\n", (int)q,
           (long long)r->arena, (long long)r->state, (long long)r->stash, (long long)r->step,
           (long long)(r->arena + r->state + r->kept), (int)r->stashed, (int)r->formula,
           (long long)r->p2p, (long long)r->coll);
  }
  printf("  arena: one, shared by its pieces (prepare, forward, backward, weight, norm,\n"
         "  update of each chunk): the largest piece's, as they run in turn and keep\n"
         "  nothing in it; state: parameters, optimizer state and accumulators it keeps;\n"
         "  stash peak: the most bytes of values handed over per microbatch kept at once\n"
         "  (forward to backward, across chunks); step values: that of values kept once a\n"
         "  step (the weights' casts, state copies, the norm's and the update's inputs);\n"
         "  total: with the most of both kept at once; stashed: the most microbatches\n"
         "  whose forward ran and backward has not (formula: %s);\n"
         "  sent: bytes per step to other pipeline ranks, and in collectives\n",
         dp->schedule.kind == SC_SCHEDULE_GPIPE         ? "GPipe M"
         : dp->schedule.kind == SC_SCHEDULE_INTERLEAVED ? "interleaved min((P-rank-1)·2 + (V-1)·P + 1, M·V)"
                                                        : "1F1B and ZB-H1 min(P - rank, M)");
  if (dp->schedule.n_offload > 0) {
    printf("\nactivation offloading (horizon %d reload points): per pipeline rank, the "
           "microbatch copies of\n  saved activations parked in its host pool a step, the "
           "pool, and the device's peaks\n  without offloading:\n",
           (int)dp->schedule.offload_horizon);
    for (int32_t q = 0; q < P; q++) {
      const sc_pipe_row *r = &rows[q];
      printf("  rank %d: %lld values, %lld bytes; host pool %lld bytes; stash peak %lld "
             "(without %lld), total %lld (without %lld, saves %lld)\n",
             (int)q, (long long)r->off_values, (long long)r->off_bytes, (long long)r->host,
             (long long)r->stash, (long long)r->stash_without,
             (long long)(r->arena + r->state + r->kept),
             (long long)(r->arena + r->state + r->kept_without),
             (long long)(r->kept_without - r->kept));
    }
  }
  if (cuda) {
    printf("\nthe CUDA device's lines beside the arena, per pipeline rank (its pieces' "
           "summed, one context):\n");
    for (int32_t q = 0; q < P; q++) {
      const sc_pipe_row *r = &rows[q];
      printf("  %4d", (int)q);
      for (int l = 1; l < SC_MEM_LINE_COUNT; l++)
        if (sc_mem_line_of_device((sc_mem_line)l, "cuda"))
          printf("  %s %lld%s", sc_mem_line_name((sc_mem_line)l), (long long)r->dev.bytes[l],
                 l == SC_MEM_CUDA_CONTEXT && !r->dev.bytes[l] ? " (unknown)" : "");
      printf("; total, all %lld\n", (long long)(r->arena + r->state + r->kept + r->outside));
    }
  }
  if (table) print_table(dp, rows);
  int64_t peak = 0;
  for (int32_t q = 0; q < P; q++) {
    const sc_pipe_row *r = &rows[q];
    if (r->arena + r->state + r->kept + r->outside > peak)
      peak = r->arena + r->state + r->kept + r->outside;
  }
  sc_plan_print_predicted(dp, b->plan, sc_train_precision_name(t), peak);
  print_fallbacks(part);
done:
  for (int32_t q = 0; q < P; q++) sc_pipe_row_free(&rows[q]);
  sc_free(rows);
  sc_free(lists);
  sc_free(ns);
  sc_pipe_deps_free(&deps);
  sc_pipe_handoffs_free(&ho);
  return rc;
}

int sc_plan_train_report(const sc_build *b, const sc_train_opts *t, bool json, bool table,
                         const char *file, const sc_device_target *target) {
  if (json) { /* the text prints it (sc_plan_print_predicted) */
    sc_diag pd = {0};
    sc_diag_clear(&pd);
    if (sc_plan_train_predict(b, t, target, &pd) != SC_OK) return sc_cli_report(&pd, file);
  }
  if (b->program->pipe_chunks > 0) return pipe_report(b, t, json, table, file, target);
  if (table) {
    fprintf(stderr, "shardc: error: %s: --schedule-table: the step is not pipelined (a pp "
            "axis of 2 or more)\n", file);
    return 1;
  }
  const sc_program *p = b->program->stages[0].program;
  const sc_partition *part = b->part;
  sc_train_memory m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_train_memory_of(p, &m, &d) != SC_OK) return sc_cli_report(&d, file);
  sc_device_memory dm;
  if (sc_device_memory_plan(p, target, &dm, &d) != SC_OK) return sc_cli_report(&d, file);
  int64_t outside = sc_device_memory_outside(&dm);
  sc_train_comm *cm = NULL;
  int32_t n_cm = 0;
  if (part && sc_train_comm_of(p, &cm, &n_cm, &d) != SC_OK) return sc_cli_report(&d, file);
  int64_t sent = 0;
  for (int32_t i = 0; i < n_cm; i++) sent += cm[i].sent;
  double psi = 4.0 * (double)b->train.trainable_numel;
  char mesh[256] = "";
  if (part) sc_mesh_format(&part->mesh, mesh, sizeof mesh);
  const char *opt = t->optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw";
  const char *prec = sc_train_precision_name(t);
  if (json) {
    printf("{\"model\": ");
    json_str(file);
    printf(", \"parameters\": %lld, \"tensors\": %d, \"optimizer\": \"%s\", \"precision\": "
           "\"%s\",\n \"live\": {",
           (long long)b->train.trainable_numel, (int)b->train.n_trainable, opt, prec);
    for (int c = 0; c < SC_MEM_CLASS_COUNT; c++) {
      printf("%s", c ? ", " : "");
      json_str(sc_mem_class_name((sc_mem_class)c));
      printf(": %lld", (long long)m.live[c]);
    }
    printf("},\n \"peak_live\": %lld, \"peak_step\": %d, \"peak_origin\": ",
           (long long)m.peak_live, (int)m.peak_step);
    if (m.peak_origin) json_str(m.peak_origin);
    else printf("null");
    printf(", \"saved_activations\": %lld", (long long)m.saved);
    printf(", \"arena\": %lld, \"constants\": %lld, \"total\": %lld", (long long)m.arena,
           (long long)m.constants, (long long)(m.arena + m.constants));
    printf(",\n \"offload\": {\"values\": %d, \"bytes\": %lld, \"host_pool\": %lld, "
           "\"peak_live_without\": %lld, \"saved_at_peak\": %lld}",
           (int)m.n_offloaded, (long long)m.offloaded, (long long)m.host,
           (long long)m.peak_live_unoffloaded, (long long)(m.peak_live_unoffloaded - m.peak_live));
    printf(",\n \"fp8_transposes\": {\"copies\": %d, \"bytes\": %lld, \"at_peak\": %lld}",
           (int)m.n_fp8_copies, (long long)m.fp8_copies, (long long)m.fp8_copies_at_peak);
    printf(",\n \"device\": {");
    for (int l = 1, first = 1; l < SC_MEM_LINE_COUNT; l++) {
      if (!sc_mem_line_of_device((sc_mem_line)l, target->device)) continue;
      printf("%s", first ? "" : ", ");
      first = 0;
      json_str(sc_mem_line_name((sc_mem_line)l));
      printf(": %lld", (long long)dm.bytes[l]);
    }
    printf("}, \"total_with_device\": %lld", (long long)(m.arena + m.constants + outside));
    static const char *const found_by[] = {"null", "\"structure\"", "\"names\""};
    const sc_recompute_report *rr = &b->train.recompute;
    const sc_fuse_attention_report *ar = &b->train.attention;
    printf(", \"attention\": {\"ran\": %s, \"fused\": %d, \"unfused\": %d, \"cores\": [",
           ar->ran ? "true" : "false", (int)ar->fused, (int)ar->unfused);
    for (int32_t i = 0; i < ar->n_listed; i++) json_node_why(i, ar->list[i].node, ar->list[i].why);
    printf("]}");
    const sc_fp8_report *fr = &b->train.fp8;
    if (fr->ran) {
      printf(", \"fp8\": {\"history\": %d, \"layers\": %d, \"kept\": %d, \"bf16\": [",
             (int)fr->history, (int)fr->fp8, (int)fr->kept);
      for (int32_t i = 0; i < fr->n_listed; i++) json_node_why(i, fr->list[i].node, fr->list[i].why);
      printf("]}");
    }
    printf(", \"recompute\": {\"kind\": \"%s\", \"blocks\": %d, \"found_by\": %s, "
           "\"residual_adds_per_block\": %d, \"nodes\": %d, \"flops\": %.0f}",
           t->recompute == SC_RECOMPUTE_FULL ? "full"
           : t->recompute == SC_RECOMPUTE_SELECTIVE ? "selective" : "none",
           (int)rr->blocks, rr->found_by > 0 && rr->found_by < 3 ? found_by[rr->found_by] : "null",
           (int)rr->adds_per_block, (int)rr->nodes, rr->flops);
    if (part) {
      printf(",\n \"mesh\": ");
      json_str(mesh);
      printf(", \"ranks\": %lld, \"zero_stage\": %d, \"collectives\": [",
             (long long)part->mesh.n_ranks, (int)part->zero_stage);
      for (int32_t i = 0; i < n_cm; i++) {
        char axes[128];
        sc_cli_format_axes(&part->mesh, cm[i].axes, axes, sizeof axes);
        printf("%s{\"op\": \"%s\", \"axes\": ", i ? ", " : "", sc_comm_kind_names[cm[i].kind]);
        json_str(axes);
        printf(", \"group\": %lld, \"count\": %lld, \"async\": %lld, \"bytes\": %lld, "
               "\"sent\": %lld, \"sent_backward\": %lld}",
               (long long)cm[i].group_size, (long long)cm[i].ops, (long long)cm[i].async_ops,
               (long long)cm[i].bytes, (long long)cm[i].sent, (long long)cm[i].backward_sent);
      }
      printf("], \"sent_per_rank\": %lld, \"psi_bytes\": %.0f, \"zero_figure\": %.6f",
             (long long)sent, psi, zero_figure(part));
      json_fallbacks(part);
    }
    print_predicted_json(b);
    printf("}\n");
    sc_free(cm);
    return 0;
  }
  char count[64];
  sc_cli_format_count(b->train.trainable_numel, count, sizeof count);
  printf("training step of %s: %s parameters in %d tensors, %s, %s\n", file, count,
         (int)b->train.n_trainable, opt, prec);
  if (part) {
    char zero[64] = "";
    if (part->zero_stage)
      snprintf(zero, sizeof zero, ", ZeRO-%d over %s", (int)part->zero_stage,
               part->mesh.axes[part->fsdp_axis].name);
    printf("mesh %s (%lld ranks)%s: the memory below is one rank's\n", mesh,
           (long long)part->mesh.n_ranks, zero);
    sc_partition_print_cp_padding(part, stdout, "");
  }
  sc_fuse_attention_print(&b->train.attention, stdout, "");
  sc_fp8_print(&b->train.fp8, stdout);
  if (b->train.fp8.ran) sc_dist_fp8_print(b->program, stdout, "  ");
  if (t->recompute != SC_RECOMPUTE_NONE) {
    const sc_recompute_report *rr = &b->train.recompute;
    char fl[32], how[160];
    sc_stats_format_si(rr->flops, "FLOP", fl, sizeof fl);
    sc_blocks bl = {.how = (sc_blocks_how)rr->found_by, .n_blocks = rr->blocks,
                    .adds_per_block = rr->adds_per_block};
    sc_blocks_describe(&bl, how, sizeof how);
    printf("recompute %s: %d blocks found %s; %d forward nodes run again before the backward, "
           "%s more per step\n",
           t->recompute == SC_RECOMPUTE_FULL ? "full" : "selective", (int)rr->blocks,
           rr->blocks ? how : "(nothing to recompute)", (int)rr->nodes, fl);
  }
  printf("\nmemory of the step (planned = allocated: one arena, allocated once):\n");
  printf("  %-18s %12s  %14s\n", "", "", "bytes");
  static const char *const notes[SC_MEM_CLASS_COUNT] = {
      "fp32 master weights, updated in place", "updated in place",
      "grad:P of every parameter (and accumulators)", "forward values the backward reads",
      "backward and optimizer temporaries", "the batch and the step's scalars",
      "gathered parameters, reduced sums, collective scratch"};
  for (int c = 0; c < SC_MEM_CLASS_COUNT; c++)
    row(sc_mem_class_name((sc_mem_class)c), m.live[c], notes[c]);
  char where[160];
  snprintf(where, sizeof where, "at step %d of %d%s%s", (int)m.peak_step, (int)p->n_steps,
           m.peak_origin ? ": " : " (the end)", m.peak_origin ? m.peak_origin : "");
  row("live at the peak", m.peak_live, where);
  if (m.n_fp8_copies) {
    char fc[160];
    snprintf(fc, sizeof fc, "%d transposed FP8 copies for FP8 matmuls (in the rows above while "
             "live: %lld bytes at the peak)", (int)m.n_fp8_copies, (long long)m.fp8_copies_at_peak);
    row("fp8 transposes", m.fp8_copies, fc);
  }
  /* cuBLASLt's workspace, reserved above every value (program.h), is not
   * placement's loss: said apart */
  int64_t ws = p->workspace_bytes > 0 ? p->workspace_bytes : 0;
  char lost[112], wsn[64] = "";
  if (ws) {
    char w[32];
    sc_stats_format_bytes(ws, w, sizeof w);
    snprintf(wsn, sizeof wsn, " (%s of it cuBLASLt's workspace)", w);
  }
  snprintf(lost, sizeof lost, "the memory plan's%s; placement adds %.1f%%", wsn,
           m.peak_live ? 100.0 * (double)(m.arena - ws - m.peak_live) / (double)m.peak_live
                       : 0.0);
  row("arena", m.arena, lost);
  if (m.n_offloaded > 0) {
    char off[160];
    snprintf(off, sizeof off, "%d activations (%lld bytes) parked there, apart from the arena",
             (int)m.n_offloaded, (long long)m.offloaded);
    row("host pool", m.host, off);
    char sv[160];
    snprintf(sv, sizeof sv, "live at the peak without offloading %lld bytes",
             (long long)m.peak_live_unoffloaded);
    row("offload saves", m.peak_live_unoffloaded - m.peak_live, sv);
  }
  row("constants", m.constants, "frozen weights, folded values (outside the arena)");
  row("total", m.arena + m.constants, "");
  char tg[96];
  sc_cli_format_target(target, tg, sizeof tg);
  bool cuda = target->device && !strcmp(target->device, "cuda");
  for (int l = 1; l < SC_MEM_LINE_COUNT; l++) /* a GPU's lines all, the CPU's that are there */
    if (cuda ? sc_mem_line_of_device((sc_mem_line)l, "cuda") : dm.bytes[l] != 0)
      row(sc_mem_line_name((sc_mem_line)l), dm.bytes[l],
          l == SC_MEM_CUDA_CONTEXT && !dm.bytes[l] ? "unknown: the cluster's gpu.context_bytes"
                                                   : sc_mem_line_what((sc_mem_line)l));
  char with[160];
  snprintf(with, sizeof with, "+ the device's own memory beside the arena (%s)", tg);
  row("total, all", m.arena + m.constants + outside, with);
  if (m.backward_step >= 0) {
    char at[96];
    snprintf(at, sizeof at, "forward values live when the backward begins (step %d)",
             (int)m.backward_step);
    row("saved for backward", m.saved, at);
  }
  if (part) {
    printf("\ncollectives of one rank's step (bytes: the whole tensors; sent: by this rank, "
           "ring algorithms):\n");
    if (!n_cm) printf("  none\n");
    else
      printf("  %-14s %-10s %6s %6s %6s %14s %14s %14s\n", "op", "axes", "group", "count",
             "async", "bytes", "sent", "of it backward");
    for (int32_t i = 0; i < n_cm; i++) {
      char axes[128];
      sc_cli_format_axes(&part->mesh, cm[i].axes, axes, sizeof axes);
      printf("  %-14s %-10s %6lld %6lld %6lld %14lld %14lld %14lld\n",
             sc_comm_kind_names[cm[i].kind], axes, (long long)cm[i].group_size,
             (long long)cm[i].ops, (long long)cm[i].async_ops, (long long)cm[i].bytes,
             (long long)cm[i].sent, (long long)cm[i].backward_sent);
    }
    printf("  async: started on the communication thread, waited for where first needed "
           "(--no-overlap: none)\n");
    printf("  sent per rank per step: %lld bytes = %.4f Psi (Psi = %.0f bytes, the trainable "
           "parameters in fp32); the ZeRO paper's figure for its data-parallel axes: %.4f Psi\n",
           (long long)sent, psi > 0 ? (double)sent / psi : 0.0, psi, zero_figure(part));
  }
  sc_plan_print_predicted(b->program, b->plan, prec, m.arena + m.constants + outside);
  print_fallbacks(part);
  sc_free(cm);
  return 0;
}

/* ---- --html ---- */

/* Pipeline rank q's bar: its state by kind, the arena its pieces share, the
 * handed-over values it keeps and the device's lines beside them (the
 * terms of the report's total). */
static void pipe_bar(const sc_pipe_row *r, void *bars) {
  sc_plan_html_bar *bar = (sc_plan_html_bar *)bars + r->q;
  snprintf(bar->label, sizeof bar->label, "pipeline rank %d", (int)r->q);
  bar->pipe_rank = r->q;
  bar->bytes[SC_PLAN_HTML_PARAMS] = r->state_by[0];
  bar->bytes[SC_PLAN_HTML_GRADIENTS] = r->state_by[1];
  bar->bytes[SC_PLAN_HTML_OPTIMIZER] = r->state_by[2];
  bar->bytes[SC_PLAN_HTML_STASH] = r->kept;
  bar->bytes[SC_PLAN_HTML_WORKSPACE] = r->arena;
  bar->bytes[SC_PLAN_HTML_DEVICE] = r->outside;
}

/* One program's bar: the arena's classes at the peak (train_memory.h),
 * what placement loses and the data as other, the constants as
 * parameters, the device's lines beside the arena. */
static void program_bar(const sc_train_memory *m, int64_t workspace, int64_t outside,
                        void *bars) {
  (void)workspace; /* drawn with placement's loss as other */
  sc_plan_html_bar *bar = bars;
  snprintf(bar->label, sizeof bar->label, "every rank");
  bar->pipe_rank = -1;
  bar->bytes[SC_PLAN_HTML_PARAMS] = m->live[SC_MEM_PARAMS] + m->constants;
  bar->bytes[SC_PLAN_HTML_GRADIENTS] = m->live[SC_MEM_GRADIENTS];
  bar->bytes[SC_PLAN_HTML_OPTIMIZER] = m->live[SC_MEM_OPTIMIZER];
  bar->bytes[SC_PLAN_HTML_ACTIVATIONS] = m->live[SC_MEM_ACTIVATIONS];
  bar->bytes[SC_PLAN_HTML_WORKSPACE] = m->live[SC_MEM_WORKSPACE];
  bar->bytes[SC_PLAN_HTML_COMM] = m->live[SC_MEM_COMM];
  bar->bytes[SC_PLAN_HTML_DEVICE] = outside;
  bar->bytes[SC_PLAN_HTML_OTHER] = m->live[SC_MEM_DATA] + (m->arena - m->peak_live);
}

sc_status sc_plan_train_html(const sc_build *b, const sc_train_opts *t,
                             const sc_device_target *target, const char *file,
                             const char *command, const sc_plan_html_candidate *candidates,
                             int32_t n_candidates, const char *path, sc_diag *d) {
  const sc_dist_program *dp = b->program;
  sc_status st = sc_plan_train_predict(b, t, target, d);
  if (st != SC_OK) return st;
  int32_t n_bars = dp->pipe_chunks > 0 ? dp->pipe_ranks : 1;
  sc_plan_html_bar *bars = sc_calloc((size_t)n_bars, sizeof *bars);
  if (!bars) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  st = sc_train_rows_walk(b, target, pipe_bar, program_bar, bars, d);
  if (st == SC_OK) {
    sc_plan_html h = {.command = command, .model = file, .kind = "training step", .dp = dp,
                      .plan = b->plan, .bars = bars, .n_bars = n_bars,
                      .candidates = candidates, .n_candidates = n_candidates};
    char count[64];
    sc_cli_format_count(b->train.trainable_numel, count, sizeof count);
    sc_plan_html_field(&h, "parameters", "%s in %d tensors", count, (int)b->train.n_trainable);
    sc_plan_html_field(&h, "optimizer", "%s, %s", t->optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw",
                       sc_train_precision_name(t));
    if (b->part && b->part->zero_stage)
      sc_plan_html_field(&h, "sharded data parallel", "ZeRO-%d over %s", (int)b->part->zero_stage,
                         b->part->mesh.axes[b->part->fsdp_axis].name);
    sc_plan_html_field(&h, "recompute", "%s",
                       t->recompute == SC_RECOMPUTE_FULL        ? "full"
                       : t->recompute == SC_RECOMPUTE_SELECTIVE ? "selective"
                                                                : "none");
    st = sc_plan_html_write(&h, path, d);
  }
  sc_free(bars);
  return st;
}
