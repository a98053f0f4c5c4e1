/*
 * test_progress_cb.c — the progress callback (sl_loader_set_progress): every rank that sets one is
 * called at least once; bytes_done never decreases and never exceeds bytes_total; the last call
 * says done == total; on rank 0 the total is the job's (the report's cluster bytes_needed), on
 * the other ranks the rank's own bytes (summed over ranks they give the same figure); setting a
 * callback after the load is refused; a loader without a callback loads as before. Runs at 1, 2,
 * 3 and 4 ranks on the llama fixture (tp = 1 or 2, dp = the rest: broadcasts included).
 */
#include "check.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen {
  unsigned calls;
  uint64_t last_done, last_total;
  int bad; /* done decreased, exceeded the total, or the total changed */
} seen;

static void on_progress(uint64_t done, uint64_t total, void *user) {
  seen *s = user;
  if (s->calls > 0 && (done < s->last_done || total != s->last_total))
    s->bad++;
  if (done > total)
    s->bad++;
  s->calls++;
  s->last_done = done;
  s->last_total = total;
}

/* The cluster's bytes_needed: the first "bytes_needed" of the report (the figures come before the
 * per-rank list). */
static uint64_t report_needed(const char *json) {
  const char *p = strstr(json, "\"bytes_needed\":");
  return p != NULL ? strtoull(p + strlen("\"bytes_needed\":"), NULL, 10) : 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  char model[4096];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  int tp = size % 2 == 0 ? 2 : 1;
  char v[16];
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  snprintf(v, sizeof v, "%d", tp);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%d", size / tp);
  sl_config_set(cfg, "dp", v);
  sl_config_set(cfg, "progress", "never"); /* the callback only: nothing on stderr */
  CHECK(sl_config_set(cfg, "progress", "sometimes") != SL_STATUS_OK);

  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  seen s = {0};
  CHECK(sl_loader_set_progress(NULL, on_progress, &s) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_loader_set_progress(l, on_progress, &s) == SL_STATUS_OK);
  CHECKF(sl_loader_load(l) == SL_STATUS_OK, "load: %s", sl_loader_error(l));
  CHECKF(s.calls >= 1, "rank %d: %u calls", rank, s.calls);
  CHECKF(s.bad == 0, "rank %d: %d inconsistent calls", rank, s.bad);
  CHECK(s.last_done == s.last_total && s.last_total > 0);
  CHECK(sl_loader_set_progress(l, on_progress, &s) != SL_STATUS_OK); /* after the load */

  /* Rank 0's total is the job's; the others' totals are their own bytes. */
  uint64_t own = rank == 0 ? 0 : s.last_total;
  uint64_t others = 0;
  MPI_Allreduce(&own, &others, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    const char *json = sl_loader_report_json(l);
    CHECK(json != NULL);
    uint64_t needed = json != NULL ? report_needed(json) : 0;
    CHECKF(s.last_total == needed, "rank 0 total %llu, report bytes_needed %llu",
           (unsigned long long)s.last_total, (unsigned long long)needed);
    CHECK(others < needed || size == 1);
  }
  sl_loader_destroy(l);

  /* No callback: nothing changes. */
  CHECK(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK);
  CHECK(sl_loader_set_progress(l, NULL, NULL) == SL_STATUS_OK);
  CHECK(sl_loader_load(l) == SL_STATUS_OK);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
