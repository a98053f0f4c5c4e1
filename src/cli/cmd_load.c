/*
 * cmd_load.c — `mpirun -np N shardload load MODEL ...`: initializes MPI, loads with the public
 * API, prints rank 0's summary (stderr) and, on failure, each distinct cause once (rank 0
 * collects the messages of every rank); every rank exits with the same status. With --reload
 * MODEL2 (repeatable) the loaded loader then reads each into the same memory (sl_loader_reload),
 * each summarized in turn.
 */
#include "args.h"
#include "cli.h"
#include "plan_file.h"
#include "usage_once.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSG_MAX 4096

static void usage(FILE *out) {
  fprintf(out, "usage: mpirun -np N shardload load MODEL [options]\n"
               "MODEL is a folder with config.json and safetensors files, a Hub repository id, or\n"
               "s3://bucket/prefix (read in place; AWS_* variables and ~/.aws as AWS's tools use them).\n"
               "tp * pp * dp must equal N; global rank = dp_rank*pp*tp + pp_rank*tp + tp_rank.\n"
               "--plan-file FILE: each rank loads its own described plan from FILE instead of the\n"
               "architecture spec (docs/spec/DESIGN.md §12).\n");
  sl_cli_print_options(out, &sl_cli_cmd_load);
}

/* Rank 0 prints each distinct failure message once; PEER_FAILED ranks only say they stopped. */
static void report_failure(MPI_Comm comm, sl_status st, const char *msg) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char mine[MSG_MAX];
  memset(mine, 0, sizeof mine);
  if (st != SL_STATUS_OK && st != SL_STATUS_PEER_FAILED) {
    char words[64];
    snprintf(mine, sizeof mine, "%s: %s", sl_cli_status_words(st, words, sizeof words),
             msg != NULL ? msg : "");
  }
  char *all = rank == 0 ? calloc((size_t)size, MSG_MAX) : NULL;
  MPI_Gather(mine, MSG_MAX, MPI_CHAR, all, MSG_MAX, MPI_CHAR, 0, comm);
  if (rank != 0)
    return;
  if (all == NULL) {
    fprintf(stderr, "shardload load: failed: %s\n", mine);
    return;
  }
  for (int r = 0; r < size; r++) {
    const char *m = all + (size_t)r * MSG_MAX;
    if (m[0] == '\0')
      continue;
    bool seen = false;
    for (int q = 0; q < r && !seen; q++)
      seen = strcmp(all + (size_t)q * MSG_MAX, m) == 0;
    if (!seen)
      fprintf(stderr, "shardload load: rank %d: %s\n", r, m);
  }
  free(all);
}

static void print_table(MPI_Comm comm, sl_loader *l) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  for (int r = 0; r < size; r++) {
    if (r == rank) {
      size_t n = sl_loader_param_count(l);
      for (size_t i = 0; i < n; i++) {
        const sl_param *p = sl_loader_param(l, i);
        printf("rank %d: %s %s [", rank, p->name, p->dtype);
        for (uint32_t d = 0; d < p->ndim; d++)
          printf("%s%llu", d > 0 ? ", " : "", (unsigned long long)p->local_shape[d]);
        printf("] %llu bytes: %s\n", (unsigned long long)p->nbytes, p->shard);
      }
      fflush(stdout);
    }
    MPI_Barrier(comm);
  }
}

/* This rank's plan of the file (every rank reads it), set on the loader; a failure on any rank
 * fails every rank (sl_loader_agree). */
static sl_status set_plan(sl_loader *l, const char *path) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_plan **plans = sl_cli_read_plans("load", path, size);
  bool read = plans != NULL;
  sl_status st = read ? sl_loader_set_plan(l, plans[rank]) : SL_STATUS_PLAN;
  sl_cli_free_plans(plans, size);
  char msg[MSG_MAX];
  snprintf(msg, sizeof msg, "%s", read ? sl_loader_error(l) : "cannot read the plan file (see above)");
  return sl_loader_agree(l, st, msg);
}

int sl_cli_load(int argc, char **argv) {
  int early_device = sl_cli_early_cuda_device(argc, argv); /* before MPI creates any CUDA context */
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "shardload load: MPI_Init failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_cli_args args;
  memset(&args, 0, sizeof args);
  /* Every rank parses the same argv: its usage errors are printed once, by rank 0. */
  int rc = sl_cli_parse_once(MPI_COMM_WORLD, argc, argv, cfg, &args, &sl_cli_cmd_load);
  if (rc == 0 && args.help) {
    if (rank == 0)
      usage(stdout);
    sl_config_destroy(cfg);
    MPI_Finalize();
    return 0;
  }
  if (rc == 0 && args.positional == NULL) {
    if (rank == 0)
      fprintf(stderr, "shardload load: a MODEL (folder, Hub repository id or s3:// URL) is needed; see "
                      "shardload load --help\n");
    rc = 2;
  }
  if (rc == 0 && sl_config_set(cfg, "model", args.positional) != SL_STATUS_OK)
    rc = 2;
  if (rc == 0 && args.n_reload > 0 && sl_config_get(cfg, "save_sharded") != NULL) {
    if (rank == 0)
      fprintf(stderr, "shardload load: --save-sharded saves the first load, not a reload: run a separate "
                      "load of the last model to save it\n");
    rc = 2;
  }
  if (rc == 0 && args.n_reload == 0 && args.reload_revision != NULL) {
    if (rank == 0)
      fprintf(stderr, "shardload load: --reload-revision needs --reload MODEL\n");
    rc = 2;
  }
  char device[16];
  snprintf(device, sizeof device, "%d", early_device);
  if (rc == 0 && early_device >= 0 && sl_config_set(cfg, "cuda_device", device) != SL_STATUS_OK)
    rc = 2;
  /* Usage errors are the same on every rank: print once. */
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0) {
    sl_config_destroy(cfg);
    MPI_Finalize();
    return worst;
  }
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st != SL_STATUS_OK) {
    report_failure(MPI_COMM_WORLD, st, sl_config_error(cfg));
  } else {
    st = args.plan_file != NULL ? set_plan(l, args.plan_file) : SL_STATUS_OK;
    if (st == SL_STATUS_OK && args.list_params)
      st = sl_loader_plan(l);
    if (st == SL_STATUS_OK && args.list_params)
      print_table(MPI_COMM_WORLD, l);
    if (st == SL_STATUS_OK)
      st = sl_loader_load(l);
    /* A load whose report or copy failed is loaded all the same: say what it did first. */
    const char *done = st != SL_STATUS_OK && rank == 0 && !sl_cli_quiet(cfg) ? sl_loader_summary(l) : NULL;
    if (done != NULL)
      fputs(done, stderr);
    for (int k = 0; k <= args.n_reload && st == SL_STATUS_OK; k++) {
      if (k > 0)
        st = sl_loader_reload(l, args.reload[k - 1], args.reload_revision);
      if (st != SL_STATUS_OK)
        break;
      if (rank == 0 && k > 0 && !sl_cli_quiet(cfg))
        fprintf(stderr, "shardload load: reloaded %s in place\n", args.reload[k - 1]);
      const char *s = rank == 0 && !sl_cli_quiet(cfg) ? sl_loader_summary(l) : NULL;
      if (s != NULL)
        fputs(s, stderr);
    }
    if (st != SL_STATUS_OK)
      report_failure(MPI_COMM_WORLD, st, sl_loader_error(l));
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  MPI_Finalize();
  return st == SL_STATUS_OK ? 0 : 1;
}
