/*
 * cli.h — the subcommands of the `shardload` tool. Each takes argv with argv[0] = the subcommand
 * name and returns the process exit status (0 ok, 1 failure, 2 usage error). The tool uses the
 * public header only.
 */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_load(int argc, char **argv);
int sl_cli_reshard(int argc, char **argv);
int sl_cli_plan(int argc, char **argv);
int sl_cli_inspect(int argc, char **argv);
int sl_cli_download(int argc, char **argv);

/* Before MPI_Init, for `load --device cuda`: makes the rank's CUDA device current (from
 * --cuda-device or the launcher's node-local rank; early_device.c) and returns it, or -1 when
 * none was chosen. */
int sl_cli_early_cuda_device(int argc, char **argv);

#endif
