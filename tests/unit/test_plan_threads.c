/*
 * test_plan_threads.c — the planner is reentrant: two dry runs on two threads at once, many
 * times, on layouts whose schedules sort shared pieces and merge many ranks' plans (tensor,
 * pipeline and data parallel with experts), give the same JSON as one run alone (the planning
 * time aside). A sort whose comparator read a static base would mix the two threads' pieces.
 */
#include "check.h"

#include "shardload/shardload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 200

typedef struct job {
  const char *model;
  int world;
  const char *tp, *pp, *dp;
  char *expect; /* the JSON of a run alone */
  int mismatches;
  int failures;
} job;

/* The dry run's JSON without its planning time (the one field that differs between runs). */
static char *plan_json(const job *j) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return NULL;
  sl_config_set(cfg, "model", j->model);
  sl_config_set(cfg, "tp", j->tp);
  sl_config_set(cfg, "pp", j->pp);
  sl_config_set(cfg, "dp", j->dp);
  sl_config_set(cfg, "enable_expert_parallel", "true");
  sl_dryrun *d = NULL;
  char *out = NULL;
  if (sl_dryrun_create(cfg, j->world, &d) == SL_STATUS_OK) {
    const char *json = sl_dryrun_json(d);
    out = json != NULL ? strdup(json) : NULL;
    char *t = out != NULL ? strstr(out, "\"planning_seconds\":") : NULL;
    while (t != NULL && *t != ',' && *t != '\0')
      *t++ = ' ';
  }
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
  return out;
}

static void *run(void *arg) {
  job *j = arg;
  for (int i = 0; i < ROUNDS; i++) {
    char *got = plan_json(j);
    if (got == NULL)
      j->failures++;
    else if (strcmp(got, j->expect) != 0)
      j->mismatches++;
    free(got);
  }
  return NULL;
}

int main(void) {
  const char *fixtures = sl_test_env("SL_FIXTURES", NULL);
  CHECKF(fixtures != NULL, "SL_FIXTURES is not set");
  if (fixtures == NULL)
    return sl_test_finish();
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s/deepseek_v3", fixtures);
  snprintf(b, sizeof b, "%s/mixtral", fixtures);
  job jobs[2] = {{a, 64, "4", "2", "8", NULL, 0, 0}, {b, 32, "2", "1", "16", NULL, 0, 0}};
  for (int k = 0; k < 2; k++) {
    jobs[k].expect = plan_json(&jobs[k]);
    CHECKF(jobs[k].expect != NULL, "%s: the dry run alone failed", jobs[k].model);
  }
  if (jobs[0].expect != NULL && jobs[1].expect != NULL) {
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
      CHECK(pthread_create(&th[k], NULL, run, &jobs[k]) == 0);
    for (int k = 0; k < 2; k++)
      pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
      CHECKF(jobs[k].failures == 0, "%s: %d of %d concurrent dry runs failed", jobs[k].model,
             jobs[k].failures, ROUNDS);
      CHECKF(jobs[k].mismatches == 0, "%s: %d of %d concurrent dry runs differ from the run alone",
             jobs[k].model, jobs[k].mismatches, ROUNDS);
    }
  }
  free(jobs[0].expect);
  free(jobs[1].expect);
  return sl_test_finish();
}
