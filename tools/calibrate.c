/* calibrate.c — `shardc calibrate --device cpu|cuda [--quick] [-o PROFILE.json]`:
 * measures the machine at hand for the planner's cost model (sc_calibrate,
 * api/calibrate.h, does the work) and writes the profile
 * (passes/plan/profile.h; docs/planner.md section 5). This file parses the
 * arguments, prints a summary and writes the file atomically. */
#include <stdio.h>
#include <string.h>

#include "api/calibrate.h"
#include "ir/fileio.h"
#include "tools/cli.h"
#include "tools/commands.h"

static const char *const USAGE =
    "shardc calibrate [--device cpu|cuda] [--quick] [--threads N] [--max-ranks N]\n"
    "                 [-o PROFILE.json] [--quiet]";

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
  int64_t x;
  if (!sc_cli_parse_i64(v, lo, hi, &x))
    return sc_cli_usage_error("option '%s' expects a whole number in %d..%d", opt, lo, hi);
  *out = (int)x;
  return 0;
}

int sc_cmd_calibrate(int argc, char **argv) {
  sc_calibrate_opts o;
  sc_calibrate_opts_init(&o);
  const char *out = NULL;
  bool quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *v;
    bool missing = false;
    int rc = 0;
    if ((v = sc_cli_opt_value(argc, argv, &i, "--device", &missing))) {
      if (missing) return sc_cli_usage_error("option '--device' needs a value");
      o.device = v;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--output", &missing)) ||
               (v = sc_cli_opt_value(argc, argv, &i, "-o", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value", argv[i]);
      out = v;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--threads", &missing))) {
      if (missing) return sc_cli_usage_error("option '--threads' needs a value");
      if ((rc = parse_int("--threads", v, 1, 4096, &o.threads))) return rc;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--max-ranks", &missing))) {
      if (missing) return sc_cli_usage_error("option '--max-ranks' needs a value");
      if ((rc = parse_int("--max-ranks", v, 2, 8, &o.max_ranks))) return rc;
    } else if (strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else if (strcmp(argv[i], "--quiet") == 0) {
      quiet = true;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: %s\n\n"
             "Measures what the planner's cost model needs on this machine and writes a\n"
             "calibration profile (docs/planner.md, section 5): the step overhead of a\n"
             "program, GEMM rates by shape (f32, bf16) through the runtime's GEMM engine,\n"
             "the streaming memory bandwidth, and the latency and bandwidth of the local\n"
             "(thread-rank) communicator fitted by non-negative least squares.\n"
             "`shardc plan --cluster cpu:local@PROFILE.json` then predicts times.\n\n"
             "  --device cpu|cuda   what to measure (default cpu); cuda: the GPU this\n"
             "                      process would run on (GEMMs through cuBLASLt, f32 and\n"
             "                      bf16, timed by the device's events; no collectives;\n"
             "                      the context's memory); exits 1 without a driver\n"
             "  --quick             a few seconds: a smaller grid, fewer repeats (tests)\n"
             "  --threads N         runtime threads (default: the runtime's, all cores)\n"
             "  --max-ranks N       largest collective group, 2..8 (default: the cores,\n"
             "                      at least 4)\n"
             "  -o FILE             write the profile there (default: print it)\n"
             "  --quiet             no line per measurement\n",
             USAGE);
      return 0;
    } else {
      return sc_cli_usage_error("unknown argument '%s'\nusage: %s", argv[i], USAGE);
    }
  }
  o.log = quiet ? NULL : stderr;
  sc_profile *p = sc_malloc(sizeof *p);
  if (!p) return sc_cli_usage_error("out of memory");
  sc_diag d = {0};
  sc_diag_clear(&d);
  int rc = 0;
  if (sc_calibrate(&o, p, &d) != SC_OK) {
    rc = sc_cli_report(&d, NULL); /* 2 for SC_ERR_USAGE, else 1 */
  } else if (memset(&d, 0, sizeof d), !out) { /* a fresh diag: no file of the measuring */
    if (sc_profile_write_json(p, stdout, &d) != SC_OK) rc = sc_cli_report(&d, "<stdout>");
  } else {
    sc_file_commit c;
    if (sc_file_commit_begin(&c, out, &d) != SC_OK) {
      rc = sc_cli_report(&d, NULL); /* the message names the file */
    } else if (sc_profile_write_json(p, c.f, &d) != SC_OK) {
      sc_file_commit_abort(&c);
      rc = sc_cli_report(&d, out);
    } else if (sc_file_commit_end(&c, &d) != SC_OK) {
      rc = sc_cli_report(&d, NULL); /* the message names the file */
    }
  }
  if (rc == 0)
    fprintf(stderr, "calibrated %s (%s, %lld threads) in %.1f s%s%s\n", p->device,
            p->device_name, (long long)p->threads, p->calibrate_s, out ? ": " : "",
            out ? out : "");
  sc_free(p);
  return rc;
}
