/*
 * cmd_plan.c — `shardload plan MODEL --world N ...`: the dry-run planner. No MPI is started.
 * With a source layout (--from-tp A [--from-pp P --from-dp D --from-enable-expert-parallel]) the
 * dry run of a load from peers: A*P*D donors give the N receivers their layout (sl_dryrun_peers).
 */
#include "args.h"
#include "cli.h"
#include "plan_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The source layout's options, taken out of argv (the rest is parsed as the target's). */
typedef struct from_opts {
  const char *v[3]; /* tp, pp, dp */
  bool ep, any;
} from_opts;

static int split_from(int argc, char **argv, from_opts *f, char **out) {
  static const char *const names[3] = {"--from-tp", "--from-pp", "--from-dp"};
  int n = 0;
  for (int i = 0; i < argc; i++) {
    bool taken = false;
    for (int k = 0; k < 3 && !taken; k++) {
      size_t len = strlen(names[k]);
      if (strncmp(argv[i], names[k], len) == 0 && argv[i][len] == '=')
        taken = (f->v[k] = argv[i] + len + 1) != NULL;
      else if (strcmp(argv[i], names[k]) == 0 && i + 1 < argc)
        taken = (f->v[k] = argv[++i]) != NULL;
    }
    if (strcmp(argv[i], "--from-enable-expert-parallel") == 0)
      taken = f->ep = true;
    f->any = f->any || taken;
    if (!taken)
      out[n++] = argv[i];
  }
  out[n] = NULL;
  return n;
}

/* The donors' dry run: the target's configuration with the source layout. */
static int plan_peers(sl_config *cfg, int world, const from_opts *f, bool json) {
  sl_config *src = NULL;
  int donors = 1;
  int rc = sl_config_create(&src) == SL_STATUS_OK ? 0 : 1;
  const char *keys[] = {"model",          "revision",         "arch",  "storage_gbps", "network_gbps",
                        "ranks_per_node", "expert_placement", "layout"};
  for (size_t k = 0; rc == 0 && k < sizeof keys / sizeof keys[0]; k++) {
    const char *v = sl_config_get(cfg, keys[k]);
    if (v != NULL && sl_config_set(src, keys[k], v) != SL_STATUS_OK)
      rc = 2;
  }
  static const char *const layout[3] = {"tp", "pp", "dp"};
  for (int k = 0; rc == 0 && k < 3; k++) {
    donors *= f->v[k] != NULL ? atoi(f->v[k]) : 1;
    if (sl_config_set(src, layout[k], f->v[k] != NULL ? f->v[k] : "1") != SL_STATUS_OK)
      rc = 2;
  }
  if (rc == 0 && sl_config_set(src, "enable_expert_parallel", f->ep ? "true" : "false") != SL_STATUS_OK)
    rc = 2;
  if (rc != 0)
    fprintf(stderr, "shardload plan: the source layout: %s\n", sl_config_error(src));
  sl_dryrun_peers *d = NULL;
  if (rc == 0 && sl_dryrun_peers_create(cfg, world, src, donors, &d) != SL_STATUS_OK) {
    fprintf(stderr, "shardload plan: %s\n", sl_config_error(cfg));
    rc = 1;
  }
  const char *text = d == NULL ? NULL : json ? sl_dryrun_peers_json(d) : sl_dryrun_peers_summary(d);
  if (rc == 0 && text == NULL) {
    fprintf(stderr, "shardload plan: out of memory formatting the result\n");
    rc = 1;
  } else if (text != NULL) {
    fputs(text, stdout);
  }
  sl_dryrun_peers_destroy(d);
  sl_config_destroy(src);
  return rc;
}

static void usage(FILE *out) {
  fprintf(out, "usage: shardload plan MODEL --world N [--tp N] [--pp N] [--dp N] [options] [--json]\n"
               "Plans every rank of a world of N ranks from the safetensors headers alone (no MPI, no\n"
               "tensor data read) and prints bytes read and received per rank, files opened, read\n"
               "amplification and a predicted load time. tp * pp * dp must equal N.\n"
               "--from-tp A [--from-pp P] [--from-dp D] [--from-enable-expert-parallel]: the dry run of a\n"
               "load from peers instead: A*P*D ranks holding that layout give the N ranks theirs (bytes\n"
               "sent and received per rank, messages, a predicted time; nothing read from storage).\n"
               "--plan-file FILE: every rank's described plan (docs/spec/DESIGN.md §12) instead of the\n"
               "architecture spec.\n");
  sl_cli_print_options(out, &sl_cli_cmd_plan);
}

int sl_cli_plan(int argc, char **argv) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return 1;
  sl_cli_args args;
  from_opts f;
  memset(&f, 0, sizeof f);
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int rc =
      rest != NULL ? sl_cli_parse(split_from(argc, argv, &f, rest), rest, cfg, &args, &sl_cli_cmd_plan) : 1;
  free(rest);
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
  if (f.any) {
    rc = plan_peers(cfg, args.world, &f, args.json);
    sl_config_destroy(cfg);
    return rc;
  }
  sl_dryrun *d = NULL;
  sl_plan **plans = args.plan_file != NULL ? sl_cli_read_plans("plan", args.plan_file, args.world) : NULL;
  if (args.plan_file != NULL && plans == NULL) {
    sl_config_destroy(cfg);
    return 1;
  }
  sl_status st = plans != NULL
                     ? sl_dryrun_create_described(cfg, args.world, (const sl_plan *const *)plans, &d)
                     : sl_dryrun_create(cfg, args.world, &d);
  sl_cli_free_plans(plans, args.world);
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
