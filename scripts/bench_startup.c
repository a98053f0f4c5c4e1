/*
 * bench_startup.c — the driver of scripts/bench-startup: one load of MODEL with dp = the world size
 * and storage auto, through the public API only, so that it runs against any build of the library
 * (the one of this tree, or an older one given with LD_LIBRARY_PATH). Each rank writes the report
 * it holds after the load (sl_loader_report_json) to OUT/report.RANK.json; the script counts the
 * bytes of each and, from a trace of each rank, its opens of the checkpoint files.
 *
 * Build (scripts/bench-startup does it):
 *   mpicc -O2 -std=c11 -Iinclude -Ibuild/include scripts/bench_startup.c -Lbuild/lib -lshardload \
 *         -Wl,-rpath,build/lib -o build/bench_startup
 * Usage: mpirun -np N bench_startup MODEL OUT   (SHARDLOAD_INJECT_HOST poses nodes)
 */
#define _GNU_SOURCE
#include <shardload/shardload.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 3) {
    if (rank == 0)
      fprintf(stderr, "usage: bench_startup MODEL OUT\n");
    MPI_Finalize();
    return 2;
  }
  char dp[32];
  snprintf(dp, sizeof dp, "%d", world);
  sl_config *cfg = NULL;
  sl_loader *l = NULL;
  sl_status st = sl_config_create(&cfg);
  const char *keys[][2] = {
      {"model", argv[1]}, {"dp", dp}, {"storage", "auto"}, {"threads", "1"}, {"quiet", "true"}};
  for (size_t i = 0; st == SL_STATUS_OK && i < sizeof keys / sizeof keys[0]; i++)
    st = sl_config_set(cfg, keys[i][0], keys[i][1]);
  if (st == SL_STATUS_OK)
    st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  int rc = 0;
  if (st != SL_STATUS_OK) {
    fprintf(stderr, "bench_startup rank %d: %s: %s\n", rank, sl_status_name(st),
            l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
    rc = 1;
  } else {
    char path[4096];
    snprintf(path, sizeof path, "%s/report.%d.json", argv[2], rank);
    FILE *f = fopen(path, "w");
    const char *rep = sl_loader_report_json(l);
    if (f == NULL || rep == NULL || fputs(rep, f) == EOF)
      rc = 1;
    if (f != NULL && fclose(f) != 0)
      rc = 1;
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
