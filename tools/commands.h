/* commands.h — the shardc subcommands, one file each in tools/.
 *
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status: 0 success, 1 error in the
 * input (printed as "shardc: error: FILE: node 'N' (Op): msg"), 2 usage. */
#ifndef SC_TOOLS_COMMANDS_H
#define SC_TOOLS_COMMANDS_H

int sc_cmd_inspect(int argc, char **argv);
int sc_cmd_opt(int argc, char **argv);
int sc_cmd_run(int argc, char **argv);
int sc_cmd_compile(int argc, char **argv);
int sc_cmd_plan(int argc, char **argv);
int sc_cmd_train(int argc, char **argv);
int sc_cmd_export(int argc, char **argv);
int sc_cmd_calibrate(int argc, char **argv);
int sc_cmd_check(int argc, char **argv);
int sc_cmd_report(int argc, char **argv);

#endif
