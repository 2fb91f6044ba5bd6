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
 *   with a mesh, the collectives of one rank's step: per (op, axes) the
 *   count, the bytes of the whole tensors, what the rank sends with ring
 *   algorithms, and their sum in units of Ψ (the trainable parameters'
 *   fp32 bytes) next to the ZeRO paper's figure for the mesh.
 * JSON: the same numbers, in bytes. */
#include "tools/plan_train.h"

#include <stdio.h>

#include "driver/train_memory.h"
#include "passes/partition/partition.h"
#include "passes/stats.h"
#include "tools/cli.h"

static const char *const COMM_NAMES[SC_COMM_KIND_COUNT] = {
    "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Send", "Recv"};


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

static void row(const char *what, int64_t bytes, const char *note) {
  char b[32];
  sc_stats_format_bytes((double)bytes, b, sizeof b);
  printf("  %-18s %12s  %14lld  %s\n", what, b, (long long)bytes, note);
}

int sc_plan_train_report(const sc_build *b, const sc_train_opts *t, bool json,
                         const char *file) {
  const sc_program *p = b->program->stages[0].program;
  const sc_partition *part = b->part;
  sc_train_memory m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_train_memory_of(p, &m, &d) != SC_OK) return sc_cli_report(&d, file);
  if (part && part->n_stages > 1) {
    fprintf(stderr, "shardc: error: %s: a pipelined training step is not built yet (train with "
            "dp, fsdp and tp axes)\n", file);
    return 1;
  }
  sc_train_comm *cm = NULL;
  int32_t n_cm = 0;
  if (part && sc_train_comm_of(p, &cm, &n_cm, &d) != SC_OK) return sc_cli_report(&d, file);
  int64_t sent = 0;
  for (int32_t i = 0; i < n_cm; i++) sent += cm[i].sent;
  double psi = 4.0 * (double)b->train.trainable_numel;
  char mesh[256] = "";
  if (part) sc_mesh_format(&part->mesh, mesh, sizeof mesh);
  const char *opt = t->optimizer == SC_OPTIMIZER_SGD ? "sgd" : "adamw";
  const char *prec = t->bf16 ? "bf16" : t->fp16 ? "fp16" : "fp32";
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
    printf(", \"arena\": %lld, \"constants\": %lld, \"total\": %lld", (long long)m.arena,
           (long long)m.constants, (long long)(m.arena + m.constants));
    printf(", \"recompute\": {\"kind\": \"%s\", \"nodes\": %d, \"flops\": %.0f}",
           t->recompute == SC_RECOMPUTE_FULL ? "full"
           : t->recompute == SC_RECOMPUTE_SELECTIVE ? "selective" : "none",
           (int)b->train.recompute.nodes, b->train.recompute.flops);
    if (part) {
      printf(",\n \"mesh\": ");
      json_str(mesh);
      printf(", \"ranks\": %lld, \"zero_stage\": %d, \"collectives\": [",
             (long long)part->mesh.n_ranks, (int)part->zero_stage);
      for (int32_t i = 0; i < n_cm; i++) {
        char axes[128];
        sc_cli_format_axes(&part->mesh, cm[i].axes, axes, sizeof axes);
        printf("%s{\"op\": \"%s\", \"axes\": ", i ? ", " : "", COMM_NAMES[cm[i].kind]);
        json_str(axes);
        printf(", \"group\": %lld, \"count\": %lld, \"bytes\": %lld, \"sent\": %lld}",
               (long long)cm[i].group_size, (long long)cm[i].ops, (long long)cm[i].bytes,
               (long long)cm[i].sent);
      }
      printf("], \"sent_per_rank\": %lld, \"psi_bytes\": %.0f, \"zero_figure\": %.6f",
             (long long)sent, psi, zero_figure(part));
    }
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
  }
  if (t->recompute != SC_RECOMPUTE_NONE) {
    char fl[32];
    sc_stats_format_si(b->train.recompute.flops, "FLOP", fl, sizeof fl);
    printf("recompute %s: %d forward nodes run again before the backward, %s more per step\n",
           t->recompute == SC_RECOMPUTE_FULL ? "full" : "selective",
           (int)b->train.recompute.nodes, fl);
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
  char lost[64];
  snprintf(lost, sizeof lost, "the memory plan's; placement adds %.1f%%",
           m.peak_live ? 100.0 * (double)(m.arena - m.peak_live) / (double)m.peak_live : 0.0);
  row("arena", m.arena, lost);
  row("constants", m.constants, "frozen weights, folded values (outside the arena)");
  row("total", m.arena + m.constants, "");
  if (part) {
    printf("\ncollectives of one rank's step (bytes: the whole tensors; sent: by this rank, "
           "ring algorithms):\n");
    if (!n_cm) printf("  none\n");
    else
      printf("  %-14s %-10s %6s %6s %14s %14s\n", "op", "axes", "group", "count", "bytes",
             "sent");
    for (int32_t i = 0; i < n_cm; i++) {
      char axes[128];
      sc_cli_format_axes(&part->mesh, cm[i].axes, axes, sizeof axes);
      printf("  %-14s %-10s %6lld %6lld %14lld %14lld\n", COMM_NAMES[cm[i].kind], axes,
             (long long)cm[i].group_size, (long long)cm[i].ops, (long long)cm[i].bytes,
             (long long)cm[i].sent);
    }
    printf("  sent per rank per step: %lld bytes = %.4f Psi (Psi = %.0f bytes, the trainable "
           "parameters in fp32); the ZeRO paper's figure for its data-parallel axes: %.4f Psi\n",
           (long long)sent, psi > 0 ? (double)sent / psi : 0.0, psi, zero_figure(part));
  }
  sc_free(cm);
  return 0;
}
