/*
 * main.c — entry point of the `shardload` tool: dispatches to a subcommand.
 */
#include "cli.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out,
          "shardload %s — load safetensors checkpoints into an MPI job, each byte read once\n"
          "\n"
          "usage:\n"
          "  mpirun -np N shardload load MODEL [--tp N] [--pp N] [--dp N] [options]\n"
          "  mpirun -np N shardload reshard MODEL --from-tp A [--from-pp P] [--from-dp D] --tp B [options]\n"
          "  shardload plan MODEL --world N [--tp N] [--pp N] [--dp N] [options] [--json]\n"
          "  shardload inspect FILE|DIR [--load-format F] [--json]\n"
          "  shardload download REPO [--revision R] [--include PATTERN]... [--all]\n"
          "\n"
          "Run `shardload COMMAND --help` for the options of a command.\n",
          sl_version());
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "load") == 0)
    return sl_cli_load(argc - 1, argv + 1);
  if (strcmp(cmd, "reshard") == 0)
    return sl_cli_reshard(argc - 1, argv + 1);
  if (strcmp(cmd, "plan") == 0)
    return sl_cli_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "inspect") == 0)
    return sl_cli_inspect(argc - 1, argv + 1);
  if (strcmp(cmd, "download") == 0)
    return sl_cli_download(argc - 1, argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    /* The library's version: the one that runs. The tool's own headers only when they differ (a
     * library replaced under the tool). */
    if (sl_version_hex() == SL_VERSION_HEX)
      printf("shardload %s\n", sl_version());
    else
      printf("shardload %s (library; the tool was built with %s)\n", sl_version(), SL_VERSION_STRING);
    return 0;
  }
  fprintf(stderr, "shardload: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
