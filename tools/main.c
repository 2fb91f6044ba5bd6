/* main.c — the shardc command line: a table of subcommands, one file each
 * in tools/ (declared in commands.h). Exit status: 0 success, 1 an error in
 * the input, 2 wrong usage. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

#ifndef SHARDC_VERSION
#define SHARDC_VERSION "0.1.0"
#endif

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help; /* one line */
} command;

static const command COMMANDS[] = {
    {"inspect", sc_cmd_inspect,
     "import a model, fold it, report ops, parameters, FLOPs and blocks"},
    {"opt", sc_cmd_opt, "run chosen passes on textual IR and print the result"},
    {"run", sc_cmd_run, "compile a model for the CPU, run it, write its outputs as .npy"},
    {"compile", sc_cmd_compile, "compile a model into a bundle directory, or print its code (--emit)"},
    {"plan", sc_cmd_plan, "partition a model over a device mesh; report stages, memory, collectives"},
};
enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: shardc <command> [options]\n       shardc --help | --version\n\n"
             "commands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
  fprintf(f, "\n'shardc <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("shardc %s\n", SHARDC_VERSION);
    return 0;
  }
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
  fprintf(stderr, "shardc: error: unknown command '%s' (see 'shardc --help')\n", argv[1]);
  return 2;
}
