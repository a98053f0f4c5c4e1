/*
 * test_startup.c — one load of a start-up test (tests/mpi/test_startup.py runs it under mpirun,
 * each rank traced, with SHARDLOAD_INJECT_HOST posing nodes):
 *
 *   test_startup MODEL OUT
 *
 * MODEL is the llama fixture re-sharded into four files (scripts/make-fixture llama DIR --shards 4:
 * the same tensors, so the reference, which reads the fixture itself, still holds); the load is
 * dp = world with storage auto, every rank's bytes against the reference (lc_run). Each rank then
 * writes the report it holds (sl_loader_report_json) to OUT/report.RANK.json for the script, which
 * compares the opens the library counted with those the trace saw, and the report's size with the
 * world's.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  if (argc != 3) {
    fprintf(stderr, "usage: test_startup MODEL OUT\n");
    MPI_Finalize();
    return 2;
  }
  lc_case c = {.fixture = "llama",
               .model_dir = argv[1],
               .tp = 1,
               .pp = 1,
               .dp = lc_world(),
               .extra = {"storage", "auto", NULL}};
  lc_result r;
  memset(&r, 0, sizeof r);
  bool ok = lc_run(&c, &r);
  CHECKF(ok && r.status == SL_STATUS_OK, "rank %d: the load failed: %s", lc_rank(), r.message);
  const char *report = r.loader != NULL ? sl_loader_report_json(r.loader) : NULL;
  CHECKF(report != NULL, "rank %d: no report", lc_rank());
  if (report != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/report.%d.json", argv[2], lc_rank());
    FILE *f = fopen(path, "w");
    CHECKF(f != NULL && fputs(report, f) != EOF, "rank %d: cannot write %s", lc_rank(), path);
    if (f != NULL)
      CHECKF(fclose(f) == 0, "rank %d: cannot write %s", lc_rank(), path);
  }
  lc_result_free(&r);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
