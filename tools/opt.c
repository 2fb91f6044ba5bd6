/* opt.c — `shardc opt FILE.ir --passes P1,P2`: the `opt` of shardc. Parses
 * textual IR, binds --dim names, runs the chosen passes and prints the
 * resulting IR on stdout; what fuse-attention fused and left (when it ran)
 * goes to stderr. For golden tests of single passes (tests/lit). */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "ir/text.h"
#include "codegen/compile.h" /* codegen's passes (fuse) */
#include "passes/fuse_attention.h"
#include "passes/pass.h"

static const char *const USAGE =
    "shardc opt FILE.ir --passes P1,P2 [--dim NAME=V]... [--print-after=PASS]\n"
    "                  [--time-passes]";

int sc_cmd_opt(int argc, char **argv) {
  sc_cli_opts o;
  int rc = sc_cli_parse(argc, argv,
                        SC_CLI_DIM | SC_CLI_PASSES | SC_CLI_PRINT_AFTER | SC_CLI_TIME_PASSES,
                        USAGE, &o);
  if (rc) return rc;
  if (o.help) {
    printf("usage: %s\n\nRuns the named passes on textual IR and prints the result.\n"
           "Passes, in pipeline order:\n",
           USAGE);
    for (const sc_pass_info *p = sc_pass_registry(); p && p->name; p++)
      printf("  %-14s %s\n", p->name, p->guarantees ? p->guarantees : "");
    return 0;
  }
  if (!o.passes) return sc_cli_usage_error("opt: --passes is required\nusage: %s", USAGE);

  sc_graph *g = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  rc = sc_cli_load_finish(sc_ir_parse_file(o.file, &g, &d), &g, &d, &o);
  if (rc) return rc;
  sc_pass_opts po;
  sc_cli_pass_opts(&o, &po);
  sc_fuse_attention_report attention = {0};
  po.attention_report = &attention;
  sc_codegen_register_passes();
  sc_status st = sc_run_passes(g, o.passes, &po);
  if (attention.ran) sc_fuse_attention_print(&attention, stderr, "shardc: note: ");
  if (st != SC_OK) {
    rc = sc_cli_report(&g->diag, o.file);
    sc_graph_destroy(g);
    return rc;
  }
  if (sc_ir_print(g, stdout) != SC_OK) {
    rc = sc_cli_report(&g->diag, o.file);
    sc_graph_destroy(g);
    return rc ? rc : 1;
  }
  sc_graph_destroy(g);
  return 0;
}
