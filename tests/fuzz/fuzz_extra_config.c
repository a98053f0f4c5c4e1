/*
 * fuzz_extra_config.c — libFuzzer target for vLLM's --extra-config JSON (api/extra_config.c): any
 * text is accepted with sane effective values or refused with a CONFIG message.
 */
#include "api/extra_config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *json = fuzz_cstr(data, size);
  sl__extra_config out;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__extra_config_parse(json, NULL, NULL, 0, false, &out, &err);
  fuzz_check_error("fuzz_extra_config", st, &err);
  if (st == SL_STATUS_OK && out.num_threads == 0)
    abort(); /* an accepted config always has at least one reader thread */
  free(json);
  return 0;
}
