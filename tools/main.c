/* main.c — the shardc command line: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0) {
    printf("usage: shardc <command> [options]\n");
    return argc < 2;
  }
  fprintf(stderr, "shardc: error: unknown command '%s'\n", argv[1]);
  return 1;
}
