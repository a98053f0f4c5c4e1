/*
 * cmd_plan.c — `shardload plan MODEL --world N ...`: the dry-run planner. No MPI is started.
 */
#include "args.h"
#include "cli.h"

#include <stdio.h>

static void usage(FILE *out) {
  fprintf(out, "usage: shardload plan MODEL --world N [--tp N] [--pp N] [--dp N] [options] [--json]\n"
               "Plans every rank of a world of N ranks from the safetensors headers alone (no MPI, no\n"
               "tensor data read) and prints bytes read and received per rank, files opened, read\n"
               "amplification and a predicted load time. tp * pp * dp must equal N.\n");
  sl_cli_print_options(out, &sl_cli_cmd_plan);
}

int sl_cli_plan(int argc, char **argv) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return 1;
  sl_cli_args args;
  int rc = sl_cli_parse(argc, argv, cfg, &args, &sl_cli_cmd_plan);
  if (rc == 0 && args.help) {
    usage(stdout);
    sl_config_destroy(cfg);
    return 0;
  }
  if (rc == 0 && args.positional == NULL) {
    fprintf(stderr,
            "shardload plan: a MODEL (folder or Hub repository id) is needed; see shardload plan --help\n");
    rc = 2;
  }
  if (rc == 0 && args.world < 1) {
    fprintf(stderr,
            "shardload plan: --world N is needed: the number of ranks to plan for (tp * pp * dp = N), "
            "e.g. --world 8 --tp 8\n");
    rc = 2;
  }
  if (rc == 0 && sl_config_set(cfg, "model", args.positional) != SL_STATUS_OK)
    rc = 2;
  if (rc != 0) {
    sl_config_destroy(cfg);
    return rc;
  }
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, args.world, &d);
  if (st != SL_STATUS_OK) {
    fprintf(stderr, "shardload plan: %s\n", sl_config_error(cfg));
    sl_config_destroy(cfg);
    return 1;
  }
  const char *text = args.json ? sl_dryrun_json(d) : sl_dryrun_summary(d);
  if (text == NULL) {
    fprintf(stderr, "shardload plan: out of memory formatting the result\n");
    rc = 1;
  } else {
    fputs(text, stdout);
  }
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
  return rc;
}
