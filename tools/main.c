/* main.c — the shardc command line: a table of subcommands, one file each
 * in tools/ (declared in commands.h). Exit status: 0 success, 1 an error in
 * the input, 2 wrong usage.
 *
 * Artifacts are written under temporary names and renamed into place when
 * complete (ir/fileio.h); on SIGINT, SIGTERM or SIGHUP the handler removes
 * the temporary paths then dies of the same signal, so an interrupted
 * compile, run or plan leaves no half-written bundle or truncated file.
 * While several files are renamed as one commit (run's outputs) the
 * signal waits for the last rename (sc_tmp_defer_signal).
 *
 * Long work (a build's compiles, a checkpoint's bytes, check's checks)
 * draws one progress line on stderr (ir/progress.h) when stderr is a
 * terminal, TERM is set and not "dumb", the command was not given --quiet
 * (-q) and the process is not a rank other than 0 of a launched job;
 * otherwise nothing of it is written. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "ir/fileio.h"
#include "ir/progress.h"

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
    {"train", sc_cmd_train, "train a model (loss, autodiff, SGD/AdamW; one rank or a mesh) on .npy data"},
    {"export", sc_cmd_export, "write a model with a training checkpoint's weights as ONNX"},
    {"check", sc_cmd_check,
     "the checks a CI job gates a plan on: import, fits, performance, equivalence, reproducible"},
    {"report", sc_cmd_report,
     "training logs (train --log-json) compared: a line per run, --html their curves overlaid"},
    {"calibrate", sc_cmd_calibrate,
     "measure this machine (GEMMs, memory, step overhead, collectives) for the planner"},
};
enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: shardc <command> [options]\n       shardc --help | --version\n\n"
             "commands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
  fprintf(f, "\n'shardc <command> --help' describes a command's options.\n");
}

static void install_signal_handlers(void);

static void on_signal(int sig) {
  if (sc_tmp_defer_signal(sig)) { /* files are being renamed as one: it comes back after */
    install_signal_handlers();     /* SA_RESETHAND took ours off */
    return;
  }
  sc_tmp_remove_all();
  if (sc_progress_enabled()) /* the prompt after us starts on a clean line */
    (void)!write(STDERR_FILENO, "\r\033[K", 4);
  signal(sig, SIG_DFL); /* SA_RESETHAND did too; die of sig as without us */
  raise(sig);
}

static void install_signal_handlers(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigfillset(&sa.sa_mask); /* no second handler runs inside the first */
    /* a signal ignored by our parent (nohup, a shell's background job)
     * stays ignored */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sigs[i], &sa, NULL);
  }
}

int main(int argc, char **argv) {
  install_signal_handlers();
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
  /* --quiet or -q among the command's options; one rank of a job draws
   * (its ranks may share a terminal) */
  bool quiet = sc_cli_launcher_rank(true) > 0;
  for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
    quiet |= strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0;
  sc_progress_setup(STDERR_FILENO, quiet);
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
  fprintf(stderr, "shardc: error: unknown command '%s' (see 'shardc --help')\n", argv[1]);
  return 2;
}
