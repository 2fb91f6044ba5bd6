/* compile.c — the whole pipeline from a bound graph to a runnable program
 * (codegen/compile.h).
 *
 *   canonical passes (SC_CANONICAL_PASSES)   static shapes, folded, dead code gone
 *   fuse (when opts->fuse and registered)    node groups (codegen/fuse.c)
 *   sc_program_from_graph                    kernels and steps (codegen/lower*.c)
 *   sc_program_pair_state                    training state updated in place
 *   sc_program_bind_inputs                   inputs bound outside the arena
 *   sc_program_multi_tensor (opts->fuse)     alike elementwise kernels in one launch (codegen/multi_tensor.c)
 *   sc_program_pair_shifts                   a ring's shifted SEND and RECV as one step
 *   sc_program_overlap (when opts->overlap)  async collectives, prefetch (codegen/overlap.c)
 *   sc_program_offload (opts->offload)       saved activations to the host pool (codegen/offload.c)
 *   sc_memplan_run + sc_memplan_verify       arena offsets, checked (codegen/memplan.c)
 *
 * --print-after=PASS prints the IR after a graph pass (to opts->print_out,
 * default stderr); --print-after=program (or "memplan") prints the final
 * program. --time-passes adds "lower" and "memplan" lines after the pass
 * manager's table. Errors come back in diag: the graph pass's diagnostic
 * (with its node) or the lowering's. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "codegen/compile.h"
#include "codegen/memplan.h"
#include "passes/pass.h"

static void register_once(void) {
  static const sc_pass_info fuse = {
      "fuse", sc_pass_fuse, "static shapes (infer-shapes), folded",
      "every node carries its fusion group in attribute __group (codegen lowers each group to "
      "one kernel)",
      false};
  sc_pass_register(&fuse);
}

void sc_codegen_register_passes(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_once);
}

void sc_compile_opts_init(sc_compile_opts *o) {
  memset(o, 0, sizeof *o);
  o->fuse = true;
  o->overlap = true;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool prints_program(const char *pa) {
  return pa && (strcmp(pa, "program") == 0 || strcmp(pa, "memplan") == 0 ||
                strcmp(pa, "all") == 0);
}

sc_status sc_compile_graph(sc_graph *g, const sc_compile_opts *o, sc_program **out,
                           sc_diag *diag) {
  *out = NULL;
  sc_compile_opts defaults;
  if (!o) {
    sc_compile_opts_init(&defaults);
    o = &defaults;
  }
  FILE *print_out = o->print_out ? o->print_out : stderr;
  FILE *time_out = o->time_out ? o->time_out : stderr;
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.print_after = o->print_after && strcmp(o->print_after, "program") != 0 &&
                           strcmp(o->print_after, "memplan") != 0
                       ? o->print_after
                       : NULL;
  po.print_out = print_out;
  po.time_passes = o->time_passes;
  po.time_out = time_out;
  po.quiet = o->quiet;
  po.no_fuse_attention = o->no_fuse_attention;

  /* without fuse every node is its own group */
  sc_codegen_register_passes();
  char list[256];
  snprintf(list, sizeof list, "%s%sscatter-sum%s", o->skip_canonical ? "" : SC_CANONICAL_PASSES,
           o->skip_canonical ? "" : ",", o->fuse ? ",fuse" : "");
  sc_status st = sc_run_passes(g, list, &po);
  if (st != SC_OK) {
    *diag = g->diag;
    return st;
  }

  double t0 = now_ms();
  sc_program *p = NULL;
  st = sc_program_from_graph(g, &p, diag);
  double t1 = now_ms();
  if (st == SC_OK && (sc_program_pair_state(p) != SC_OK ||
                      sc_program_bind_inputs(p, o->bound, o->n_bound) != SC_OK))
    st = sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  if (st == SC_OK && o->fuse) st = sc_program_multi_tensor(p, diag);
  if (st == SC_OK) st = sc_program_pair_shifts(p, NULL, diag);
  if (st == SC_OK && o->overlap) st = sc_program_overlap(p, NULL, NULL, diag);
  if (st == SC_OK && o->n_offload > 0)
    st = sc_program_offload(p, o->offload, o->n_offload, o->offload_horizon, NULL, diag);
  if (st == SC_OK && o->workspace_bytes > 0) {
    bool gemm = false;
    for (int32_t i = 0; i < p->n_steps; i++) gemm |= p->steps[i].kind == SC_STEP_GEMM;
    p->workspace_bytes = gemm ? o->workspace_bytes : 0;
  }
  if (st == SC_OK) st = sc_memplan_run(p, diag);
  if (st == SC_OK) st = sc_memplan_verify(p, diag);
  double t2 = now_ms();
  if (st != SC_OK) {
    sc_program_destroy(p);
    return st;
  }
  if (o->time_passes)
    fprintf(time_out, "  %9.3f ms  lower\n  %9.3f ms  memplan\n", t1 - t0, t2 - t1);
  if (prints_program(o->print_after)) {
    fprintf(print_out, "; program after memplan\n");
    sc_program_print(p, print_out);
  }
  *out = p;
  return SC_OK;
}
