/*
 * cli.h — the subcommands of the `shardload` tool. Each takes argv with argv[0] = the subcommand
 * name and returns the process exit status (0 ok, 1 failure, 2 usage error). The tool uses the
 * public header only.
 */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_load(int argc, char **argv);
int sl_cli_plan(int argc, char **argv);
int sl_cli_inspect(int argc, char **argv);
int sl_cli_download(int argc, char **argv);

#endif
