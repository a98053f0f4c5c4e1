/*
 * fuzz_refit.c — libFuzzer target for weight sync's two parsers (docs/spec/DESIGN.md §13): the
 * first byte picks one, the rest is its input.
 *   0  the blocks a trainer publishes, as they travel between ranks (sl__refit_blocks_parse): any
 *      bytes parse or fail with a message; parsed blocks serialize back to the same bytes
 *   1  the publishers' description of a dry run (sl__refit_describe: fsdp:N, fsdp:NxR or JSON)
 *      against a small catalog: any text gives blocks within the catalog's shapes, or a message
 */
#include "fuzz_common.h"
#include "model/catalog.h"
#include "plan/refit.h"

static void parse_blob(const uint8_t *data, size_t size) {
  sl__refit_blocks b;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__refit_blocks_parse(data, size, "trainer rank 0", &b, &err);
  fuzz_check_error("fuzz_refit (blocks)", st, &err);
  if (st != SL_STATUS_OK)
    return;
  uint8_t *blob = NULL;
  size_t len = 0;
  if (sl__refit_blocks_serialize(&b, &blob, &len, &err) != SL_STATUS_OK || len != size ||
      memcmp(blob, data, size) != 0) {
    fprintf(stderr, "fuzz_refit: re-serialized blocks differ (%zu vs %zu bytes)\n", len, size);
    abort();
  }
  free(blob);
  sl__refit_blocks_free(&b);
}

static void describe(const uint8_t *data, size_t size) {
  static sl__cat_tensor tensors[3] = {{.name = "a", .dtype = SL_DT_BF16, .ndim = 2, .shape = {7, 4}},
                                      {.name = "b", .dtype = SL_DT_F32, .ndim = 1, .shape = {2}},
                                      {.name = "c", .dtype = SL_DT_F32, .ndim = 0}};
  sl__catalog cat;
  memset(&cat, 0, sizeof cat);
  cat.tensors = tensors;
  cat.n_tensors = 3;
  sl__hashmap_init(&cat.by_name, SL_HASHMAP_BORROW);
  for (size_t i = 0; i < 3; i++)
    sl__hashmap_put(&cat.by_name, tensors[i].name, strlen(tensors[i].name), i, NULL, NULL);
  char *text = fuzz_cstr(data, size);
  sl__refit_blocks *tb = NULL;
  uint32_t n = 0;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__refit_describe(text, &cat, &tb, &n, &err);
  fuzz_check_error("fuzz_refit (describe)", st, &err);
  for (uint32_t t = 0; t < n; t++) {
    for (size_t i = 0; i < tb[t].n; i++)
      for (uint32_t d = 0; d < tb[t].b[i].ndim; d++)
        if (tb[t].b[i].offsets[d] + tb[t].b[i].extent[d] > tb[t].b[i].shape[d])
          abort();
    sl__refit_blocks_free(&tb[t]);
  }
  free(tb);
  free(text);
  sl__hashmap_free(&cat.by_name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if (data[0] % 2 == 0)
    parse_blob(data + 1, size - 1);
  else
    describe(data + 1, size - 1);
  return 0;
}
