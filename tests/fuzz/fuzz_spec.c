/*
 * fuzz_spec.c — libFuzzer target for architecture spec files (model/spec.c): any bytes parse into
 * a spec or fail with a message naming the spec; nothing crashes, leaks into a later run or
 * recurses without bound.
 */
#include "fuzz_common.h"
#include "model/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__err err;
  sl__err_clear(&err);
  sl__spec *spec = NULL;
  sl_status st = sl__spec_parse((const char *)data, size, "fuzz.json", &spec, &err);
  fuzz_check_error("fuzz_spec", st, &err);
  if (st == SL_STATUS_OK && spec == NULL)
    abort();
  sl__spec_free(spec);
  return 0;
}
