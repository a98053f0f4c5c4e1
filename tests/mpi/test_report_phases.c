/*
 * test_report_phases.c — the report's `phases` (docs/REPORT.md §2) at the MPI world size it
 * runs with: `total_seconds` counts every phase once. Rank 0 reads its report and checks that the
 * total is at least each phase and at least their sum, and at most the wall time the test measured
 * around sl_loader_create .. sl_loader_load (plus the report's rounding); once with the load
 * running the preparation itself, once with sl_loader_plan called first. The preparation phases
 * used to be counted twice when sl_loader_load ran them.
 * Every rank holds the summary of rank 0 and a report (they were NULL on the other ranks): each
 * rank compares its texts with rank 0's, sent by the test itself. Rank 0's report is the job's
 * (report_scope "job", a row per rank); another rank's is its view (docs/REPORT.md §5): report_scope
 * "rank", its own row equal to rank 0's row of it, no node rows, every other member as rank 0's.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 0's text on every rank (caller frees); every rank calls it. */
static char *rank0_text(const char *text) {
  int len0 = text != NULL ? (int)strlen(text) + 1 : 0;
  MPI_Bcast(&len0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  char *text0 = calloc((size_t)len0 + 1, 1);
  if (lc_rank() == 0 && len0 > 0)
    memcpy(text0, text, (size_t)len0);
  MPI_Bcast(text0, len0, MPI_CHAR, 0, MPI_COMM_WORLD);
  return text0;
}

/* text on this rank equals rank 0's, byte for byte; every rank checks. */
static void check_same_as_rank0(const char *what, const char *kind, const char *text) {
  char *text0 = rank0_text(text);
  CHECKF(text0[0] != '\0' && text != NULL, "%s: rank %d: no %s", what, lc_rank(), kind);
  CHECKF(text == NULL || strcmp(text, text0) == 0, "%s: rank %d's %s differs from rank 0's", what, lc_rank(),
         kind);
  free(text0);
}

/* This rank's report is rank 0's job report seen from this rank (rank 0: the job's itself). */
static void check_view_of_rank0(const char *what, const char *text) {
  char *text0 = rank0_text(text);
  cJSON *job = cJSON_Parse(text0);
  cJSON *mine = text != NULL ? cJSON_Parse(text) : NULL;
  CHECKF(job != NULL && mine != NULL, "%s: rank %d: no report, or not JSON", what, lc_rank());
  if (job != NULL && mine != NULL) {
    const char *scope = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mine, "report_scope"));
    CHECKF(scope != NULL && strcmp(scope, lc_rank() == 0 ? "job" : "rank") == 0,
           "%s: rank %d: report_scope %s", what, lc_rank(), scope != NULL ? scope : "(none)");
    cJSON *rows = cJSON_DetachItemFromObjectCaseSensitive(mine, "ranks");
    cJSON *rows0 = cJSON_DetachItemFromObjectCaseSensitive(job, "ranks");
    cJSON *nodes = cJSON_DetachItemFromObjectCaseSensitive(mine, "nodes");
    cJSON *nodes0 = cJSON_DetachItemFromObjectCaseSensitive(job, "nodes");
    int want_rows = lc_rank() == 0 ? lc_world() : 1;
    CHECKF(cJSON_GetArraySize(rows) == want_rows && cJSON_GetArraySize(rows0) == lc_world(),
           "%s: rank %d holds %d rows (rank 0 %d), expected %d", what, lc_rank(), cJSON_GetArraySize(rows),
           cJSON_GetArraySize(rows0), want_rows);
    const cJSON *own = cJSON_GetArrayItem(rows, 0); /* rank 0: its row is the first */
    CHECKF(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(own, "rank")) == lc_rank(),
           "%s: rank %d's own row names another rank", what, lc_rank());
    CHECKF(cJSON_Compare(own, cJSON_GetArrayItem(rows0, lc_rank()), true),
           "%s: rank %d's own row differs from rank 0's row of it", what, lc_rank());
    CHECKF(lc_rank() == 0 ? cJSON_Compare(nodes, nodes0, true) : cJSON_GetArraySize(nodes) == 0,
           "%s: rank %d: the node rows are %s", what, lc_rank(),
           lc_rank() == 0 ? "not rank 0's" : "not empty");
    cJSON_DeleteItemFromObjectCaseSensitive(mine, "report_scope");
    cJSON_DeleteItemFromObjectCaseSensitive(job, "report_scope");
    CHECKF(cJSON_Compare(mine, job, true), "%s: rank %d: the report's other members differ from rank 0's",
           what, lc_rank());
    cJSON_Delete(rows);
    cJSON_Delete(rows0);
    cJSON_Delete(nodes);
    cJSON_Delete(nodes0);
  }
  cJSON_Delete(mine);
  cJSON_Delete(job);
  free(text0);
}

static void check_phases(const char *what, const char *report, double wall) {
  cJSON *r = cJSON_Parse(report);
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(r, "phases");
  CHECKF(cJSON_IsObject(ph), "%s: no phases in the report", what);
  static const char *const names[] = {"resolve_seconds", "catalog_broadcast_seconds", "model_seconds",
                                      "plan_seconds",    "allocate_seconds",          "transfer_seconds",
                                      "track_seconds"};
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(ph, "total_seconds");
  CHECKF(cJSON_IsNumber(t), "%s: no total_seconds", what);
  double total = cJSON_IsNumber(t) ? t->valuedouble : 0;
  double sum = 0;
  /* The report prints microseconds: allow their rounding. */
  const double eps = 2e-6 * 8;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(ph, names[i]);
    CHECKF(cJSON_IsNumber(p) && p->valuedouble >= 0, "%s: %s missing or negative", what, names[i]);
    double v = cJSON_IsNumber(p) ? p->valuedouble : 0;
    CHECKF(total + eps >= v, "%s: total_seconds %.6f < %s %.6f", what, total, names[i], v);
    sum += v;
  }
  CHECKF(total + eps >= sum, "%s: total_seconds %.6f < the sum of the phases %.6f", what, total, sum);
  CHECKF(total <= wall + eps, "%s: total_seconds %.6f > the wall time around the load %.6f", what, total,
         wall);
  cJSON_Delete(r);
}

static void run_case(bool plan_first) {
  int world = lc_world();
  char tp[16];
  char dp[16];
  snprintf(tp, sizeof tp, "%d", world == 3 ? 1 : world);
  snprintf(dp, sizeof dp, "%d", world == 3 ? 3 : 1);
  char model[1024];
  lc_fixture_path("llama", model, sizeof model);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "tp", tp);
  sl_config_set(cfg, "dp", dp);
  sl_config_set(cfg, "quiet", "true");
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK && plan_first)
    st = sl_loader_plan(l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  double wall = now() - t0;
  const char *what = plan_first ? "plan, then load" : "load alone";
  CHECKF(st == SL_STATUS_OK, "%s: %s (%s)", what, sl_status_name(st), l != NULL ? sl_loader_error(l) : "");
  if (st == SL_STATUS_OK && lc_rank() == 0) {
    const char *rep = sl_loader_report_json(l);
    CHECKF(rep != NULL, "%s: no report on rank 0", what);
    if (rep != NULL)
      check_phases(what, rep, wall);
  }
  if (st == SL_STATUS_OK) {
    check_view_of_rank0(what, sl_loader_report_json(l));
    check_same_as_rank0(what, "summary", sl_loader_summary(l));
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  run_case(false);
  run_case(true);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
