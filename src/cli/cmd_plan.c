/*
 * cmd_plan.c — `shardload plan MODEL --world N ...`: the dry-run planner. No MPI is started.
 */
#include "args.h"
#include "cli.h"

#include <stdio.h>

static void usage(FILE *out) {
  fprintf(out, "usage: shardload plan MODEL --world N [--tp N] [--pp N] [--dp N] [--enable-expert-parallel]\n"
               "       [--expert-placement linear|round_robin] [--layout vllm|checkpoint] [--load-format F]\n"
               "       [--arch auto|FILE.json] [--pp-layer-partition 4,6,6,4] [--storage-gbps G]\n"
               "       [--network-gbps G] [--ranks-per-node N] [--json]\n"
               "Plans every rank from the safetensors headers alone and prints bytes read and received per\n"
               "rank, files opened, read amplification and a predicted load time.\n");
}

int sl_cli_plan(int argc, char **argv) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return 1;
  sl_cli_args args;
  int rc = sl_cli_parse(argc, argv, cfg, &args, true);
  if (rc == 0 && args.help) {
    usage(stdout);
    sl_config_destroy(cfg);
    return 0;
  }
  if (rc == 0 && (args.positional == NULL || args.world < 1)) {
    usage(stderr);
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
