/* plan_train.c — the training step's memory, printed (plan_train.h).
 *
 * Text:
 *   training step of MODEL: P parameters in T tensors, OPTIMIZER[, bf16|fp16]
 *   memory of the step (planned = allocated: the arena is allocated once):
 *     params, optimizer state, gradients, activations, workspace, data
 *                        bytes live at the peak step, by class
 *     live at the peak   their sum, and the step (its origin)
 *     arena              what the memory plan asked for and the runtime
 *                        allocates (and what placement loses)
 *     constants          frozen weights and folded values (outside the arena)
 *     total              arena + constants
 * JSON: the same numbers, in bytes. */
#include "tools/plan_train.h"

#include <stdio.h>

#include "driver/train_memory.h"
#include "passes/stats.h"
#include "tools/cli.h"

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
  sc_train_memory m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_train_memory_of(p, &m, &d) != SC_OK) return sc_cli_report(&d, file);
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
    printf(", \"arena\": %lld, \"constants\": %lld, \"total\": %lld}\n", (long long)m.arena,
           (long long)m.constants, (long long)(m.arena + m.constants));
    return 0;
  }
  char count[64];
  sc_cli_format_count(b->train.trainable_numel, count, sizeof count);
  printf("training step of %s: %s parameters in %d tensors, %s, %s\n", file, count,
         (int)b->train.n_trainable, opt, prec);
  printf("\nmemory of the step (planned = allocated: one arena, allocated once):\n");
  printf("  %-18s %12s  %14s\n", "", "", "bytes");
  static const char *const notes[SC_MEM_CLASS_COUNT] = {
      "fp32 master weights, updated in place", "updated in place",
      "grad:P of every parameter (and accumulators)", "forward values the backward reads",
      "backward and optimizer temporaries", "the batch and the step's scalars"};
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
  return 0;
}
