/*
 * fuzz_catalog_blob.c — libFuzzer target for the catalog blob that rank 0 broadcasts
 * (model/catalog.c): any bytes deserialize into a catalog or fail with a message; a catalog
 * accepted from the blob serializes back to the same bytes.
 */
#include "fuzz_common.h"
#include "model/catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__catalog cat;
  memset(&cat, 0, sizeof cat);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__catalog_deserialize(data, size, &cat, &err);
  fuzz_check_error("fuzz_catalog_blob", st, &err);
  if (st == SL_STATUS_OK) {
    uint8_t *blob = NULL;
    size_t len = 0;
    if (sl__catalog_serialize(&cat, &blob, &len, &err) != SL_STATUS_OK)
      abort();
    if (len != size || memcmp(blob, data, size) != 0) {
      fprintf(stderr, "fuzz_catalog_blob: re-serialized blob differs (%zu vs %zu bytes)\n", len, size);
      abort();
    }
    free(blob);
    sl__catalog_free(&cat);
  }
  return 0;
}
