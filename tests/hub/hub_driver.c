/*
 * hub_driver.c — runs one Hub resolution for tests/hub/test_hub.py and prints its outcome as one
 * JSON line on stdout: status name, message, snapshot folder, commit, format, files and bytes
 * downloaded, whether the cache fallback was used, and this process's pid.
 *
 * usage: hub_driver [--public] KEY=VALUE...
 *   KEY=VALUE are configuration keys (sl_config_set); "include" values may repeat (joined with
 *   newlines). Default mode converts the config with sl__hub_opts_from_config and calls
 *   sl__hub_resolve (to report the counters); --public calls sl_hub_download instead.
 * Exit status: 0 on success, 1 on a resolution failure, 2 on a usage error.
 */
#include "api/config.h"
#include "api/hub_download.h"
#include "api/last_error.h"
#include "base/util.h"
#include "hub/hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_result(sl_status st, const char *msg, const char *snapshot, const sl__hub_result *res) {
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_appendf(&b, "{\"status\": "); /* as a caller sees it: SL_STATUS_HUB and the cause */
  sl__buf_json_str(&b, sl_status_name(sl__public_status(st)));
  sl__buf_appendf(&b, ", \"cause\": ");
  /* sl_hub_download already returns SL_STATUS_HUB (its cause: sl_last_error_cause); the resolver
   * inside, the detailed status */
  sl__buf_json_str(
      &b, sl_hub_cause_name(st == SL_STATUS_HUB ? sl_last_error_cause() : (int)sl__public_cause(st, NULL)));
  sl__buf_appendf(&b, ", \"message\": ");
  sl__buf_json_str(&b, msg);
  sl__buf_appendf(&b, ", \"snapshot\": ");
  sl__buf_json_str(&b, snapshot != NULL ? snapshot : "");
  sl__buf_appendf(&b, ", \"commit\": ");
  sl__buf_json_str(&b, res != NULL && res->commit != NULL ? res->commit : "");
  sl__buf_appendf(&b, ", \"format\": ");
  sl__buf_json_str(&b, res != NULL && st == SL_STATUS_OK ? sl__format_name(res->format) : "");
  sl__buf_appendf(
      &b, ", \"files_downloaded\": %u, \"bytes_downloaded\": %llu, \"fallback\": %s, \"pid\": %ld}\n",
      res != NULL ? res->files_downloaded : 0, (unsigned long long)(res != NULL ? res->bytes_downloaded : 0),
      res != NULL && res->from_cache_fallback ? "true" : "false", (long)getpid());
  fputs(sl__buf_str(&b), stdout);
  fflush(stdout);
  sl__buf_free(&b);
}

int main(int argc, char **argv) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return 2;
  bool public_api = false;
  sl__buf include;
  sl__buf_init(&include, 0);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--public") == 0) {
      public_api = true;
      continue;
    }
    char *eq = strchr(argv[i], '=');
    if (eq == NULL) {
      fprintf(stderr, "hub_driver: expected KEY=VALUE, got '%s'\n", argv[i]);
      return 2;
    }
    *eq = '\0';
    if (strcmp(argv[i], "include") == 0) {
      if (include.len > 0)
        sl__buf_putc(&include, '\n');
      sl__buf_append(&include, eq + 1, strlen(eq + 1));
      continue;
    }
    if (sl_config_set(cfg, argv[i], eq + 1) != SL_STATUS_OK) {
      fprintf(stderr, "hub_driver: %s\n", sl_config_error(cfg));
      return 2;
    }
  }
  if (include.len > 0 && sl_config_set(cfg, "include", sl__buf_str(&include)) != SL_STATUS_OK)
    return 2;
  sl__buf_free(&include);
  int rc = 0;
  if (public_api) {
    char *snapshot = NULL;
    sl_status st = sl_hub_download(cfg, &snapshot);
    print_result(st, sl_config_error(cfg), snapshot, NULL);
    free(snapshot);
    rc = st == SL_STATUS_OK ? 0 : 1;
  } else {
    sl__err err;
    sl__err_clear(&err);
    sl__hub_opts opts;
    char **owned = NULL;
    sl__hub_result res;
    memset(&res, 0, sizeof res);
    sl_status st = sl__hub_opts_from_config(cfg, &opts, &owned, &err);
    if (st == SL_STATUS_OK)
      st = sl__hub_resolve(sl_config_get(cfg, "model"), &opts, &res, &err);
    print_result(st, err.msg, res.snapshot_dir, &res);
    sl__hub_result_free(&res);
    sl__config_free_list(owned);
    rc = st == SL_STATUS_OK ? 0 : 1;
  }
  sl_config_destroy(cfg);
  return rc;
}
