/* export.c — `shardc export CHECKPOINT --model MODEL.onnx -o OUT.onnx`:
 * the model with its initializers replaced by a training checkpoint's
 * weights, written as a new ONNX file (sc_export_checkpoint in the public
 * API does the work; this file parses the arguments and prints). */
#include <stdio.h>
#include <string.h>

#include "shardc.h"
#include "tools/cli.h"
#include "tools/commands.h"

static const char *const USAGE =
    "shardc export CHECKPOINT --model MODEL.onnx -o OUT.onnx";

int sc_cmd_export(int argc, char **argv) {
  const char *ckpt = NULL, *model = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v;
    bool missing = false;
    if ((v = sc_cli_opt_value(argc, argv, &i, "--model", &missing))) {
      if (missing) return sc_cli_usage_error("option '--model' needs a value");
      model = v;
    } else if ((v = sc_cli_opt_value(argc, argv, &i, "--output", &missing)) ||
               (v = sc_cli_opt_value(argc, argv, &i, "-o", &missing))) {
      if (missing) return sc_cli_usage_error("option '%s' needs a value", argv[i]);
      out = v;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: %s\n\n"
             "Writes MODEL with its initializers replaced by the weights of a training\n"
             "checkpoint (`shardc train --save DIR`, docs/checkpoint.md) as OUT.onnx:\n"
             "onnxruntime and `shardc run` run it. A checkpoint weight the model lacks,\n"
             "or of another dtype or shape, is an error.\n",
             USAGE);
      return 0;
    } else if (argv[i][0] == '-') {
      return sc_cli_usage_error("unknown option '%s'\nusage: %s", argv[i], USAGE);
    } else if (ckpt) {
      return sc_cli_usage_error("one checkpoint only\nusage: %s", USAGE);
    } else {
      ckpt = argv[i];
    }
  }
  if (!ckpt || !model || !out)
    return sc_cli_usage_error("needs a checkpoint, --model and -o\nusage: %s", USAGE);
  char *error = NULL;
  sc_status st = sc_export_checkpoint(ckpt, model, out, &error);
  if (st != SC_OK) {
    fprintf(stderr, "shardc: error: %s\n", error ? error : sc_status_name(st));
    sc_string_free(error);
    return st == SC_ERR_USAGE ? 2 : 1;
  }
  printf("%s: %s with the weights of %s\n", out, model, ckpt);
  return 0;
}
