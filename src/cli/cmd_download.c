/*
 * cmd_download.c — `shardload download REPO ...`: fills the Hugging Face cache with what a load of
 * REPO needs, every other top-level non-weight file (tokenizer, generation config, README: the Hub
 * contract, docs/spec/HUB.md §3; --load-only leaves them out) and the --include patterns, and
 * prints the snapshot folder on stdout. Uses the public API only.
 */
#include "args.h"
#include "cli.h"

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void download_usage(FILE *out) {
  fprintf(out, "usage: shardload download REPO [options]\n"
               "\n"
               "Downloads what loading the Hub repository REPO needs, and every other top-level file\n"
               "that is not a weight file (tokenizer, generation config, README...), into the Hugging\n"
               "Face cache and prints the snapshot folder. --load-only: only config.json, the index and\n"
               "the weights. --include PATTERN (repeatable) adds files.\n");
  sl_cli_print_options(out, &sl_cli_cmd_download);
}

int sl_cli_download(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      download_usage(stdout);
      return 0;
    }
  }
  sl_config *config = NULL;
  if (sl_config_create(&config) != SL_STATUS_OK) {
    fprintf(stderr, "shardload download: out of memory\n");
    return 1;
  }
  /* The contract's default: a download also fetches the non-weight files (a load, by contrast,
   * fetches only what it reads); --load-only turns this off. */
  sl_config_set(config, "download_all", "true");
  sl_cli_args args;
  int rc = sl_cli_parse(argc, argv, config, &args, &sl_cli_cmd_download);
  if (rc == 0 && args.positional == NULL) {
    fprintf(stderr, "shardload download: a repository id is required\n");
    rc = 2;
  }
  if (rc == 0 && sl_config_set(config, "model", args.positional) != SL_STATUS_OK) {
    fprintf(stderr, "shardload download: %s\n", sl_config_error(config));
    rc = 2;
  }
  if (rc == 2)
    fprintf(stderr, "run `shardload download --help` for the options\n");
  if (rc == 0) {
    char *snapshot = NULL;
    sl_status st = sl_hub_download(config, &snapshot);
    if (st == SL_STATUS_OK) {
      printf("%s\n", snapshot);
    } else {
      char words[64];
      fprintf(stderr, "shardload download: %s: %s\n", sl_cli_status_words(st, words, sizeof words),
              sl_config_error(config));
      rc = 1;
    }
    free(snapshot);
  }
  sl_config_destroy(config);
  return rc;
}
