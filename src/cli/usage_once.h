/*
 * usage_once.h — the command line parsed on every rank of an MPI job with its usage errors printed
 * once (usage_once.c): every rank parses the same argv, so their messages are the same and one
 * copy is enough; a rank whose message differs still prints its own.
 */
#ifndef SL_CLI_USAGE_ONCE_H
#define SL_CLI_USAGE_ONCE_H

#include "args.h"

#include <mpi.h>

/* COLLECTIVE over comm: sl_cli_parse(argc, argv, config, args, cmd) on every rank (config NULL: not
 * parsed, status 1), what it prints to stderr caught; rank 0 prints its message, another rank only a
 * message that differs from rank 0's (prefixed with its rank). Returns the worst status of every
 * rank (0, 1 or 2), so that every rank exits alike. */
int sl_cli_parse_once(MPI_Comm comm, int argc, char **argv, sl_config *config, sl_cli_args *args,
                      const sl_cli_command *cmd);

#endif
