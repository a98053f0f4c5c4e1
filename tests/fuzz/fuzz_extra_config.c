/*
 * fuzz_extra_config.c — libFuzzer target for vLLM's --extra-config JSON (api/extra_config.c): any
 * text is refused with a CONFIG message, or accepted as at most three members, each an allowed key
 * with a value its configuration key takes (set through the key table: num_threads as threads).
 */
#include "api/extra_config.h"
#include "fuzz_common.h"
#include "shardload/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *json = fuzz_cstr(data, size);
  sl__extra_members m;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__extra_config_parse(json, NULL, &m, &err);
  fuzz_check_error("fuzz_extra_config", st, &err);
  if (st == SL_STATUS_OK) {
    sl_config *cfg = NULL;
    if (m.n > 3 || sl_config_create(&cfg) != SL_STATUS_OK)
      abort();
    for (size_t i = 0; i < m.n; i++) /* an accepted member is a valid value of its key */
      if (sl_config_set(cfg, m.member[i].key, m.member[i].value) != SL_STATUS_OK)
        abort();
    const char *threads = sl_config_get(cfg, "threads");
    if (threads != NULL && (threads[0] < '1' || threads[0] > '9'))
      abort(); /* an accepted config always has at least one reader thread */
    sl_config_destroy(cfg);
  }
  free(json);
  return 0;
}
