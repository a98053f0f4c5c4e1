/*
 * fuzz_index.c — libFuzzer target for weight index files (model.safetensors.index.json, read by
 * model/file_select.c): any bytes either filter a fixed selection of shard names or fail with an
 * INDEX message; a kept name was in the selection, and the selection is unchanged on error.
 */
#include "fuzz_common.h"
#include "model/file_select.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const names[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json"};
  sl__select_opts opts = {.format = SL_FORMAT_AUTO, .fall_back_to_pt = true};
  sl__selection sel;
  memset(&sel, 0, sizeof sel);
  sl__err err;
  sl__err_clear(&err);
  if (sl__select_names(names, sizeof names / sizeof names[0], &opts, &sel, &err) != SL_STATUS_OK)
    abort(); /* fixed input: must select */
  size_t before = sel.n_files;
  sl_status st = sl__select_apply_index(&sel, (const char *)data, size, "fuzz index", &err);
  fuzz_check_error("fuzz_index", st, &err);
  if (st != SL_STATUS_OK && sel.n_files != before)
    abort(); /* on error the selection is left unchanged */
  if (sel.n_files > before)
    abort();
  sl__selection_free(&sel);
  return 0;
}
