/*
 * test_last_error.c — sl_last_error, the one channel of error messages (shardload/core.h, section 1): for
 * each older channel (sl_config_error, sl_loader_error, sl_plan_error, sl_publisher_error, the
 * `char **error` of sl_model_open, sl_plan_from_json and sl_cuda_select_device) a failing call
 * leaves the same text in sl_last_error; a NULL handle names the function; a successful call leaves
 * the message as it was; a second thread sees only its own failures. And the cause: none for a
 * failure that is not the Hub's, the names of the causes, SL_STATUS_HUB at the end of the list.
 */
#include "shardload/core.h"

#include "check.h"
#include "solo_comm.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The failing call's message is the older channel's, not empty, and there is no Hub cause. */
static void check_same(const char *what, const char *older) {
  CHECKF(older != NULL && older[0] != '\0', "%s: the older channel has no message", what);
  CHECKF(older != NULL && strcmp(sl_last_error(), older) == 0, "%s: sl_last_error \"%s\" != \"%s\"", what,
         sl_last_error(), older != NULL ? older : "(null)");
  CHECK_EQ_U64(sl_last_error_cause(), SL_HUB_CAUSE_NONE);
}

static void check_config(void) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "tensor_paralel", "2") == SL_STATUS_CONFIG);
  check_same("sl_config_set", sl_config_error(cfg));
  CHECK_CONTAINS(sl_last_error(), "tensor_paralel");
  /* like errno: a success leaves the last failure's message */
  char kept[4096];
  snprintf(kept, sizeof kept, "%s", sl_last_error());
  CHECK(sl_config_set(cfg, "tp", "2") == SL_STATUS_OK);
  CHECK_STR(sl_last_error(), kept);
  sl_config_destroy(cfg);
}

static void check_null_handle(void) {
  CHECK(sl_loader_plan(NULL) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_STR(sl_last_error(), "sl_loader_plan: invalid argument");
  CHECK(sl_config_set(NULL, "tp", "1") == SL_STATUS_INVALID_ARGUMENT);
  CHECK_STR(sl_last_error(), "sl_config_set: invalid argument");
}

/* A planned loader of one rank over the caller's functions: binding a parameter it does not have. */
static void check_loader(const char *llama) {
  static uint64_t raised;
  sl_comm_ops ops;
  sl_config *cfg;
  sl_loader *l;
  sl_status st = solo_planned_loader(llama, &raised, &ops, &cfg, &l);
  if (st == SL_STATUS_OK) {
    float buf[4];
    CHECK(sl_loader_bind(l, "model.no_such_parameter", buf, sizeof buf) != SL_STATUS_OK);
    check_same("sl_loader_bind", sl_loader_error(l));
    CHECK_CONTAINS(sl_last_error(), "model.no_such_parameter");
  }
  sl_loader_destroy(l);
  /* a creation's failure is the configuration's message: two tensor-parallel ranks in a job of one */
  sl_config_set(cfg, "tp", "2");
  l = NULL;
  CHECK(sl_loader_create_ops(cfg, &ops, &l) != SL_STATUS_OK && l == NULL);
  check_same("sl_loader_create_ops", sl_config_error(cfg));
  sl_config_destroy(cfg);
}

static void check_plan(void) {
  sl_plan *plan = NULL;
  CHECK(sl_plan_create(&plan) == SL_STATUS_OK);
  uint64_t shape[1] = {4};
  CHECK(sl_plan_add_param(plan, "w", SL_DTYPE_F32, 1, shape, 0, 99, NULL) == SL_STATUS_INVALID_ARGUMENT);
  check_same("sl_plan_add_param", sl_plan_error(plan));
  sl_plan_destroy(plan);

  const char *bad = "{\"params\": 3}";
  char *error = NULL;
  sl_plan *q = NULL;
  CHECK(sl_plan_from_json(bad, strlen(bad), &q, &error) == SL_STATUS_PLAN && q == NULL);
  check_same("sl_plan_from_json", error);
  free(error);
  sl_config_set(NULL, "tp", "1");                                         /* another message in between */
  CHECK(sl_plan_from_json(bad, strlen(bad), &q, NULL) == SL_STATUS_PLAN); /* no *error: still recorded */
  CHECK(strstr(sl_last_error(), "sl_config_set") == NULL && sl_last_error()[0] != '\0');
}

static void check_publisher(void) {
  sl_publisher *p = NULL;
  CHECK(sl_publisher_create(NULL, &p) == SL_STATUS_OK);
  uint64_t shape[1] = {4}, offsets[1] = {0}, extent[1] = {4};
  float data[4] = {0};
  CHECK(sl_publisher_add(p, "w", SL_DTYPE_F32, SL_MAX_DIMS + 1, shape, offsets, extent, data) !=
        SL_STATUS_OK);
  check_same("sl_publisher_add", sl_publisher_error(p));
  sl_publisher_destroy(p);
}

static void check_char_error(void) {
  char *error = NULL;
  sl_model *m = NULL;
  CHECK(sl_model_open("/nonexistent/model.safetensors", NULL, &m, &error) == SL_STATUS_NOT_FOUND);
  check_same("sl_model_open", error);
  free(error);
  error = NULL;
  int chosen = -1;
  if (sl_cuda_select_device(-7, &chosen, &error) != SL_STATUS_OK)
    check_same("sl_cuda_select_device", error);
  free(error);
}

/* A second thread: nothing before its first failure, then its own message only. */
typedef struct {
  char before[64];
  char after[4096];
} thread_view;

static void *other_thread(void *arg) {
  thread_view *v = arg;
  snprintf(v->before, sizeof v->before, "%s", sl_last_error());
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "threads", "zero");
  snprintf(v->after, sizeof v->after, "%s", sl_last_error());
  sl_config_destroy(cfg);
  return NULL;
}

static void check_threads(void) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  CHECK(sl_config_set(cfg, "tp", "-1") == SL_STATUS_CONFIG);
  char mine[4096];
  snprintf(mine, sizeof mine, "%s", sl_last_error());
  thread_view v;
  pthread_t th;
  CHECK(pthread_create(&th, NULL, other_thread, &v) == 0);
  pthread_join(th, NULL);
  CHECK_STR(v.before, "");
  CHECK_CONTAINS(v.after, "threads");
  CHECK(strcmp(v.after, mine) != 0);
  CHECK_STR(sl_last_error(), mine);
  sl_config_destroy(cfg);
}

static void check_causes(void) {
  CHECK_STR(sl_status_name(SL_STATUS_HUB), "HUB");
  CHECK_EQ_U64(SL_STATUS_HUB, SL_STATUS_COUNT - 1);
  CHECK_STR(sl_hub_cause_name(SL_HUB_CAUSE_NONE), "NONE");
  CHECK_STR(sl_hub_cause_name(SL_HUB_CAUSE_GATED), "GATED");
  CHECK_STR(sl_hub_cause_name(SL_HUB_CAUSE_S3_NO_SUCH_KEY), "S3_NO_SUCH_KEY");
  CHECK_STR(sl_hub_cause_name(SL_HUB_CAUSE_COUNT), "UNKNOWN");
  CHECK_STR(sl_hub_cause_name(-1), "UNKNOWN");
  /* the detailed Hub statuses keep their names, in the causes' order */
  CHECK_STR(sl_status_name(SL_STATUS_HUB_GATED), "HUB_GATED");
  CHECK_EQ_U64(SL_STATUS_HUB_GATED - SL_STATUS_HUB_REVISION_NOT_FOUND + 1, SL_HUB_CAUSE_GATED);
}

int main(void) {
  CHECK_STR(sl_last_error(), "");
  CHECK_EQ_U64(sl_last_error_cause(), SL_HUB_CAUSE_NONE);
  char llama[4096];
  snprintf(llama, sizeof llama, "%s/llama", sl_test_env("SL_FIXTURES", ".fixtures"));
  check_config();
  check_null_handle();
  check_loader(llama);
  check_plan();
  check_publisher();
  check_char_error();
  check_threads();
  check_causes();
  return sl_test_finish();
}
