/*
 * cmd_reshard.c — `mpirun -np N shardload reshard MODEL --from-tp A [--from-pp P] [--from-dp D]
 * [--from-enable-expert-parallel] --tp B [--pp --dp --enable-expert-parallel] [--save-sharded DIR]
 * [--report FILE]`: the first A·P·D ranks load MODEL from storage in the source layout, the others
 * (exactly the target layout's size) receive theirs from them (sl_loader_load_from_peers), then
 * save them when asked (named as a save of the target layout: ranks numbered among the receivers).
 * The report file holds both sides' reports, the receivers' last: every rank with its bytes read
 * and received. With --device cuda every rank uses the GPU of its node-local rank in the job.
 */
#include "args.h"
#include "cli.h"
#include "usage_once.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out,
          "usage: mpirun -np N shardload reshard MODEL --from-tp A [--from-pp P] [--from-dp D]\n"
          "         [--from-enable-expert-parallel] [--from-expert-placement P] [options]\n"
          "The first A*P*D ranks load MODEL from storage in that layout; the other ranks (tp*pp*dp of\n"
          "the options) receive their parameters from them, reading nothing from storage.\n"
          "--save-sharded DIR saves the receivers' parameters; --report FILE writes both sides' reports.\n");
  sl_cli_print_options(out, &sl_cli_cmd_reshard);
}

/* The source layout's options, taken out of argv (the rest is parsed as the target's). */
typedef struct from_opts {
  const char *tp, *pp, *dp, *placement;
  bool ep;
  const char *save, *report;
} from_opts;

/* Whether argv[*i] is option `name` (as `name VALUE` or `name=VALUE`); its value in *val. */
static bool take(int argc, char **argv, int *i, const char *name, const char **val) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0)
    return false;
  if (argv[*i][n] == '=') {
    *val = argv[*i] + n + 1;
    return true;
  }
  if (argv[*i][n] != '\0' || *i + 1 >= argc)
    return false;
  *val = argv[++*i];
  return true;
}

/* argv without the source options, --save-sharded and --report (kept in f) into out; returns its count. */
static int split_args(int argc, char **argv, from_opts *f, char **out) {
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--from-enable-expert-parallel") == 0) {
      f->ep = true;
    } else if (!take(argc, argv, &i, "--from-tp", &f->tp) && !take(argc, argv, &i, "--from-pp", &f->pp) &&
               !take(argc, argv, &i, "--from-dp", &f->dp) &&
               !take(argc, argv, &i, "--from-expert-placement", &f->placement) &&
               !take(argc, argv, &i, "--save-sharded", &f->save) &&
               !take(argc, argv, &i, "--report", &f->report)) {
      out[n++] = argv[i];
    }
  }
  out[n] = NULL;
  return n;
}

static int num(const char *s) {
  return s != NULL ? atoi(s) : 1;
}

/* rank 0 of the job writes {"donors": ..., "receivers": ...}; the receivers' report comes from their rank 0.
 */
static int write_report(const char *path, int rank, int first_receiver, sl_loader *l) {
  const char *mine = l != NULL ? sl_loader_report_json(l) : NULL;
  int rc = 0;
  if (rank == first_receiver) {
    int len = mine != NULL ? (int)strlen(mine) : 0;
    MPI_Send(&len, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
    MPI_Send(mine != NULL ? mine : "", len, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
  } else if (rank == 0) {
    int len = 0;
    MPI_Recv(&len, 1, MPI_INT, first_receiver, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    char *theirs = calloc((size_t)len + 1, 1);
    MPI_Recv(theirs, len, MPI_CHAR, first_receiver, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    FILE *fp = fopen(path, "w");
    if (fp == NULL || fprintf(fp, "{\"donors\":%s,\"receivers\":%s}\n", mine != NULL ? mine : "null",
                              len > 0 ? theirs : "null") < 0) {
      fprintf(stderr, "shardload reshard: cannot write the report %s\n", path);
      rc = 1;
    }
    if (fp != NULL && fclose(fp) != 0)
      rc = 1;
    free(theirs);
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

/* Both sides' configurations: the target's from the options, the source's the same with its layout. */
static int configure(int argc, char **argv, from_opts *f, sl_config **cfg, bool donor, sl_cli_args *args,
                     int rank) {
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int n = rest != NULL ? split_args(argc, argv, f, rest) : 0;
  if (rest != NULL)
    sl_config_create(cfg);
  /* Every rank parses the same options: their usage errors are printed once, by rank 0. */
  int rc = sl_cli_parse_once(MPI_COMM_WORLD, n, rest, rest != NULL ? *cfg : NULL, args, &sl_cli_cmd_reshard);
  free(rest);
  if (rc != 0 || args->help)
    return rc;
  if (args->positional == NULL || (f->tp == NULL && f->pp == NULL && f->dp == NULL)) {
    if (rank == 0)
      fprintf(stderr, "shardload reshard: a MODEL and the source layout (--from-tp, --from-pp, --from-dp) "
                      "are needed; see shardload reshard --help\n");
    return 2;
  }
  if (sl_config_set(*cfg, "model", args->positional) != SL_STATUS_OK)
    return 2;
  if (!donor)
    return 0;
  const char *keys[] = {"tp", "pp", "dp"};
  const char *vals[] = {f->tp != NULL ? f->tp : "1", f->pp != NULL ? f->pp : "1",
                        f->dp != NULL ? f->dp : "1"};
  for (int k = 0; k < 3; k++)
    if (sl_config_set(*cfg, keys[k], vals[k]) != SL_STATUS_OK)
      rc = 2;
  if (sl_config_set(*cfg, "enable_expert_parallel", f->ep ? "true" : "false") != SL_STATUS_OK ||
      (f->placement != NULL && sl_config_set(*cfg, "expert_placement", f->placement) != SL_STATUS_OK))
    rc = 2;
  if (rc != 0 && rank == 0)
    fprintf(stderr, "shardload reshard: %s\n", sl_config_error(*cfg));
  return rc;
}

int sl_cli_reshard(int argc, char **argv) {
  /* --device cuda: each rank's GPU current before MPI creates a CUDA context, and the loader's: the
   * job's node-local rank picks it, so that a donor and a receiver of one node never share a GPU
   * (the loaders' own default counts each side's ranks apart). */
  int early_device = sl_cli_early_cuda_device(argc, argv);
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "shardload reshard: MPI_Init failed\n");
    return 1;
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  from_opts f;
  memset(&f, 0, sizeof f);
  /* the source size first (the options are the same on every rank) */
  for (int i = 0; i < argc; i++) {
    const char *v = NULL;
    if (take(argc, argv, &i, "--from-tp", &v))
      f.tp = v;
    else if (take(argc, argv, &i, "--from-pp", &v))
      f.pp = v;
    else if (take(argc, argv, &i, "--from-dp", &v))
      f.dp = v;
  }
  int donors = num(f.tp) * num(f.pp) * num(f.dp);
  bool donor = rank < donors;
  sl_config *cfg = NULL;
  sl_cli_args args;
  memset(&args, 0, sizeof args);
  int rc = configure(argc, argv, &f, &cfg, donor, &args, rank);
  char device[16];
  snprintf(device, sizeof device, "%d", early_device);
  if (rc == 0 && early_device >= 0 && sl_config_set(cfg, "cuda_device", device) != SL_STATUS_OK)
    rc = 2;
  if (rc == 0 && !args.help && (donors < 1 || donors >= size)) {
    if (rank == 0)
      fprintf(stderr,
              "shardload reshard: the source layout takes %d of the %d ranks: none are left to receive\n",
              donors, size);
    rc = 2;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0 || args.help) {
    if (args.help && rank == 0)
      usage(stdout);
    sl_config_destroy(cfg);
    MPI_Finalize();
    return worst;
  }
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, donor ? 0 : 1, rank, &side);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, side, &l);
  const char *why = st != SL_STATUS_OK ? sl_config_error(cfg) : NULL;
  if (st == SL_STATUS_OK && donor)
    st = sl_loader_load(l);
  /* Every rank joins the load from peers only when both sides are ready. */
  int bad = st != SL_STATUS_OK;
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any == 0)
    st = sl_loader_load_from_peers(l, MPI_COMM_WORLD);
  else if (st == SL_STATUS_OK)
    st = SL_STATUS_PEER_FAILED;
  if (st != SL_STATUS_OK && st != SL_STATUS_PEER_FAILED)
    fprintf(stderr, "shardload reshard: rank %d (%s): %s: %s\n", rank, donor ? "donor" : "receiver",
            sl_status_name(st), why != NULL ? why : sl_loader_error(l));
  if (st == SL_STATUS_OK && !donor && f.save != NULL)
    st = sl_loader_save_sharded(l, f.save);
  const char *s = st == SL_STATUS_OK && rank == donors && !sl_cli_quiet(cfg) ? sl_loader_summary(l) : NULL;
  if (s != NULL)
    fputs(s, stderr);
  int failed = st != SL_STATUS_OK;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int out = any;
  if (any == 0 && f.report != NULL)
    out = write_report(f.report, rank, donors, l);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  MPI_Comm_free(&side);
  MPI_Finalize();
  return out != 0 ? 1 : 0;
}
