/*
 * args.h — command-line options → configuration keys, shared by the subcommands. A flag
 * `--some-key VALUE` sets the configuration key `some_key`; a few flags are booleans or have
 * their own names (table in args.c).
 */
#ifndef SL_CLI_ARGS_H
#define SL_CLI_ARGS_H

#include "shardload/shardload.h"

#include <stdbool.h>

typedef struct sl_cli_args {
  const char *positional; /* MODEL / FILE / REPO */
  bool json;              /* --json */
  bool help;              /* --help */
  int world;              /* --world N (plan), 0 when absent */
} sl_cli_args;

/* Parses argv[1..] into config and args; returns 0, or 2 after printing a usage error to stderr.
 * allow_world: accept --world. */
int sl_cli_parse(int argc, char **argv, sl_config *config, sl_cli_args *args, bool allow_world);
/* Prints the option list (from the configuration table). */
void sl_cli_print_options(void);

#endif
