/*
 * args.h — command-line options → configuration keys, shared by the subcommands. A flag
 * `--some-key VALUE` (or `--some-key=VALUE`) sets the configuration key `some_key`; a few flags
 * are booleans, have their own names or are vLLM's spellings (table in args.c). Each subcommand
 * describes the keys it uses, which is what its --help lists; an unknown option is an error that
 * names the nearest known one.
 */
#ifndef SL_CLI_ARGS_H
#define SL_CLI_ARGS_H

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stdio.h>

/* Options of the tool itself (not configuration keys), accepted where a command lists them. */
enum {
  SL_CLI_JSON = 1u << 0,        /* --json */
  SL_CLI_WORLD = 1u << 1,       /* --world N */
  SL_CLI_LIST_PARAMS = 1u << 2, /* --list-params */
  SL_CLI_RELOAD = 1u << 3,      /* --reload MODEL (repeatable), --reload-revision REV */
  SL_CLI_PLAN_FILE = 1u << 4    /* --plan-file FILE: every rank's described plan (plan_file.c) */
};

/* The most --reload options one command line takes. */
#define SL_CLI_RELOAD_MAX 8

typedef struct sl_cli_command {
  const char *name;        /* "load" */
  const char *const *keys; /* configuration keys it uses, NULL-terminated (its --help lists them) */
  unsigned options;        /* SL_CLI_* */
} sl_cli_command;

extern const sl_cli_command sl_cli_cmd_load;
extern const sl_cli_command sl_cli_cmd_reshard;
extern const sl_cli_command sl_cli_cmd_plan;
extern const sl_cli_command sl_cli_cmd_inspect;
extern const sl_cli_command sl_cli_cmd_download;

typedef struct sl_cli_args {
  const char *positional;                /* MODEL / FILE / REPO */
  bool json;                             /* --json */
  bool help;                             /* --help */
  bool list_params;                      /* --list-params */
  int world;                             /* --world N (plan), 0 when absent */
  const char *reload[SL_CLI_RELOAD_MAX]; /* --reload MODEL, in order (load) */
  int n_reload;
  const char *reload_revision; /* --reload-revision REV (load), or NULL */
  const char *plan_file;       /* --plan-file FILE (load, plan), or NULL */
} sl_cli_args;

/* Parses argv[1..] into config and args; returns 0, or 2 after printing a usage error to stderr. */
int sl_cli_parse(int argc, char **argv, sl_config *config, sl_cli_args *args, const sl_cli_command *cmd);
/* Prints the options of cmd: its keys as flags with their meaning and default, its aliases. */
void sl_cli_print_options(FILE *out, const sl_cli_command *cmd);
/* The status of the call that just failed, for messages: its name, and for SL_STATUS_HUB the cause
 * (sl_last_error_cause) too: "HUB (GATED)". Returns buf. */
const char *sl_cli_status_words(sl_status st, char *buf, size_t cap);

/* Whether the configuration says quiet (--quiet): no progress and no summary; errors still print. */
bool sl_cli_quiet(const sl_config *config);

#endif
