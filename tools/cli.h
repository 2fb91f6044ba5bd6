/* cli.h — option parsing and error printing shared by the subcommands.
 *
 * Every subcommand takes one input FILE plus some of the options below; it
 * names the ones it accepts with a mask, and sc_cli_parse rejects the rest.
 * Exit statuses: 0 success, 1 a problem in the input (printed from an sc_diag
 * as "shardc: error: FILE: node 'N' (Op): msg"), 2 wrong usage. */
#ifndef SC_TOOLS_CLI_H
#define SC_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "ir/mesh.h"
#include "passes/pass.h"

enum { SC_CLI_MAX_DIMS = 32 };

enum sc_cli_flags {
  SC_CLI_DIM = 1u << 0,         /* --dim NAME=V (repeatable) */
  SC_CLI_NO_WEIGHTS = 1u << 1,  /* --no-weights */
  SC_CLI_PRINT_AFTER = 1u << 2, /* --print-after=PASS */
  SC_CLI_TIME_PASSES = 1u << 3, /* --time-passes */
  SC_CLI_JSON = 1u << 4,        /* --json */
  SC_CLI_DOT = 1u << 5,         /* --dot FILE */
  SC_CLI_PASSES = 1u << 6,      /* --passes P1,P2 */
};

typedef struct sc_cli_dim {
  char name[128];
  int64_t value;
} sc_cli_dim;

typedef struct sc_cli_opts {
  const char *file;            /* the positional argument */
  sc_cli_dim dims[SC_CLI_MAX_DIMS];
  int n_dims;
  bool no_weights;
  const char *print_after;     /* pass name, "all", or NULL */
  bool time_passes;
  bool json;
  const char *dot;             /* output path, or NULL */
  const char *passes;          /* comma-separated, or NULL */
  bool help;                   /* -h/--help was given */
} sc_cli_opts;

/* Parses argv[1..argc) (argv[0] is the subcommand name). Accepts only the
 * options in `allowed`. On a usage error prints it with the usage line and
 * returns 2; returns 0 otherwise (check opts->help). */
int sc_cli_parse(int argc, char **argv, unsigned allowed, const char *usage,
                 sc_cli_opts *opts);

/* "--name=value" or "--name value" at argv[*i] (name matched exactly): the
 * value, advancing *i past it in the second form; NULL when argv[*i] is not
 * the option. When the value is absent (the option is the last argument)
 * sets *missing and returns argv[*i] itself (*i unchanged), so the caller
 * still knows it was this option. */
const char *sc_cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing);
/* The finite number v, the value of option opt, into *out: 0, or 2 after a
 * usage error naming opt. */
int sc_cli_parse_number(const char *opt, const char *v, double *out);
/* Whether s is a whole decimal integer in [lo, hi]; if so stores it. */
bool sc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* This process's rank in the job a launcher started: mpirun's
 * (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK), and with any_launcher also
 * torchrun's or a script's RANK and Slurm's SLURM_PROCID (--comm tcp);
 * 0 when none says. */
int64_t sc_cli_launcher_rank(bool any_launcher);
/* 1234567 -> "1,234,567" into buf. */
void sc_cli_format_count(int64_t v, char *buf, size_t n);
/* A duration in s, ms or us, three decimals ("1.250 ms"), into buf. */
void sc_cli_format_seconds(double s, char *buf, size_t n);
/* The monotonic clock, in seconds (for the commands' own timings). */
double sc_cli_now_s(void);
/* The axes of set, by name, "dp,tp" ("-" for none), into buf. */
void sc_cli_format_axes(const sc_mesh *m, uint32_t set, char *buf, size_t n);

struct sc_device_memory;
struct sc_device_target;
/* "cpu: oneDNN GEMMs, 2 threads" (the target of a memory plan) into buf. */
void sc_cli_format_target(const struct sc_device_target *t, char *buf, size_t n);
/* The lines of a program's memory (codegen/device_memory.h), one a line,
 * each indented by `indent`, then their total: bytes, readable size and
 * what the line holds. With allocated (not NULL), a column of what the
 * device allocated beside the plan's, and "differs" where they differ.
 * extra_name/extra_bytes (or NULL): one more line before the total (the
 * weights, mapped from the model). Lines of 0 bytes in both are left out
 * (but the arena). */
void sc_cli_print_memory(FILE *f, const char *indent, const struct sc_device_memory *planned,
                         const struct sc_device_memory *allocated, const char *extra_name,
                         int64_t extra_bytes, const char *extra_what);

/* --device cpu|cuda, --no-cuda-graph, --[no-]allow-tf32, --gpu-arch sm_NN at argv[*i] (run,
 * train): 1 when taken (into *d, *i advanced past a value), 0 when
 * argv[*i] is none of them, 2 after a usage error (printed). */
struct sc_device_choice;
int sc_cli_device_option(int argc, char **argv, int *i, struct sc_device_choice *d);
#define SC_CLI_DEVICE_USAGE                                                          \
  "  --device cpu|cuda     where the program runs (default cpu). cuda: one GPU per\n" \
  "                        rank (LOCAL_RANK, else rank modulo the GPUs); with\n"     \
  "                        SHARDC_CUDA_EMU=1, the emulated GPU (docs/cuda-backend.md)\n" \
  "  --no-cuda-graph       cuda: issue every run step by step (no CUDA graph)\n"     \
  "  --[no-]allow-tf32     cuda: f32 products may take TF32 operands (default, as\n"  \
  "                        PyTorch's matmul precision \"high\"); --no-allow-tf32: full f32\n" \
  "  --gpu-arch sm_NN      cuda: compile the kernels for this architecture\n"

/* Prints "shardc: error: FILE: node 'N' (Op): msg" to stderr; file is put in
 * when the diagnostic has none. Returns 1, or 2 for SC_ERR_USAGE. */
int sc_cli_report(const sc_diag *d, const char *file);
/* Prints "shardc: error: msg" to stderr and returns 2. */
int sc_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Binds each --dim on g's inputs; a name that matches no input dim is a
 * usage error (printed, returns 2). Returns 0 on success. */
int sc_cli_bind_dims(sc_graph *g, const sc_cli_opts *opts);

/* Finishes loading FILE: when st (the loader's status) failed, destroys *g
 * (if any), sets it to NULL and reports d; otherwise binds the --dim options
 * (destroying *g on failure). Returns 0 when *g is ready, else the exit
 * status. */
int sc_cli_load_finish(sc_status st, sc_graph **g, const sc_diag *d,
                       const sc_cli_opts *opts);

/* Pass options from the command line: --print-after and --time-passes,
 * both printing to stderr. */
void sc_cli_pass_opts(const sc_cli_opts *opts, sc_pass_opts *po);

/* One shape as "[batch=8,16]" (symbolic names shown for dims whose
 * dim_param names a dim of some graph input) into buf. */
void sc_cli_format_shape(const sc_graph *g, const sc_value *v, char *buf, size_t n);
/* "f32[4,64]" into buf: a dtype and dims (cut short when buf is). */
void sc_cli_format_type(sc_dtype t, int32_t rank, const int64_t *dims, char *buf, size_t n);

#endif
