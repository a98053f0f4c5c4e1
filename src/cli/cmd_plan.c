/*
 * cmd_plan.c — `shardload plan MODEL --world N ...`: the dry-run planner. No MPI is started.
 * With a source layout (--from-tp A [--from-pp P --from-dp D --from-enable-expert-parallel]) the
 * dry run of a load from peers: A*P*D donors give the N receivers their layout (sl_dryrun_peers).
 * With --from-publishers SPEC the dry run of a refit (weight sync): trainers publishing their blocks
 * as SPEC says (fsdp:T, fsdp:TxR, or a JSON file of each trainer's blocks) into the N receivers
 * (sl_dryrun_refit).
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
  const char *publishers; /* --from-publishers: a refit's trainers */
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
    if (!taken && strncmp(argv[i], "--from-publishers=", 18) == 0)
      taken = (f->publishers = argv[i] + 18) != NULL;
    else if (!taken && strcmp(argv[i], "--from-publishers") == 0 && i + 1 < argc)
      taken = (f->publishers = argv[++i]) != NULL;
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

/* The text of --from-publishers: fsdp:... or JSON as given, else the file it names (freed by the
 * caller; NULL with a message when it cannot be read). */
static char *publishers_text(const char *spec) {
  if (strncmp(spec, "fsdp:", 5) == 0 || spec[0] == '{')
    return strdup(spec);
  FILE *fp = fopen(spec, "rb");
  char *text = NULL;
  long n = -1;
  if (fp != NULL && fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && n < (64L << 20) &&
      fseek(fp, 0, SEEK_SET) == 0 && (text = calloc((size_t)n + 1, 1)) != NULL &&
      fread(text, 1, (size_t)n, fp) != (size_t)n) {
    free(text);
    text = NULL;
  }
  if (fp != NULL)
    fclose(fp);
  if (text == NULL)
    fprintf(
        stderr,
        "shardload plan: --from-publishers %s: expected fsdp:T, fsdp:TxR, JSON text or a readable JSON file "
        "(under 64 MiB)\n",
        spec);
  return text;
}

/* The refit's dry run: trainers as --from-publishers says, the receivers as the target. */
static int plan_refit(sl_config *cfg, int world, const char *spec, bool json) {
  char *text = publishers_text(spec);
  if (text == NULL)
    return 2;
  sl_dryrun_refit *d = NULL;
  int rc = 0;
  if (sl_dryrun_refit_create(cfg, world, text, &d) != SL_STATUS_OK) {
    fprintf(stderr, "shardload plan: %s\n", sl_config_error(cfg));
    rc = 1;
  }
  free(text);
  const char *out = d == NULL ? NULL : json ? sl_dryrun_refit_json(d) : sl_dryrun_refit_summary(d);
  if (rc == 0 && out == NULL) {
    fprintf(stderr, "shardload plan: out of memory formatting the result\n");
    rc = 1;
  } else if (out != NULL) {
    fputs(out, stdout);
  }
  sl_dryrun_refit_destroy(d);
  return rc;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: shardload plan MODEL --world N [--tp N] [--pp N] [--dp N] [options] [--json]\n"
          "Plans every rank of a world of N ranks from the safetensors headers alone (no MPI, no\n"
          "tensor data read) and prints bytes read and received per rank, files opened, read\n"
          "amplification and a predicted load time. tp * pp * dp must equal N.\n"
          "--from-tp A [--from-pp P] [--from-dp D] [--from-enable-expert-parallel]: the dry run of a\n"
          "load from peers instead: A*P*D ranks holding that layout give the N ranks theirs (bytes\n"
          "sent and received per rank, messages, a predicted time; nothing read from storage).\n"
          "--plan-file FILE: every rank's described plan (docs/spec/DESIGN.md §12) instead of the\n"
          "architecture spec.\n"
          "--from-publishers SPEC: the dry run of a refit (weight sync) instead: trainers publish their\n"
          "blocks of every tensor into the N ranks; SPEC is fsdp:T (T trainers, each tensor cut along\n"
          "its first dimension as FSDP does), fsdp:TxR (R replicas of those) or a JSON file of each\n"
          "trainer's blocks (docs/REPORT.md). The trainers are the job's first ranks.\n");
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
  if (f.publishers != NULL && f.any) {
    fprintf(stderr, "shardload plan: --from-publishers and --from-tp/--from-pp/--from-dp are two dry runs: "
                    "pass one\n");
    rc = 2;
  } else if (f.publishers != NULL) {
    rc = plan_refit(cfg, args.world, f.publishers, args.json);
    sl_config_destroy(cfg);
    return rc;
  }
  if (rc == 0 && f.any) {
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
