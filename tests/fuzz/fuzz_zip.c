/*
 * fuzz_zip.c — libFuzzer target for the zip directory reader and the whole torch.save checkpoint
 * path (format/zip.h, format/torch_ckpt.h, docs/spec/FILES.md §8). The input is a whole file.
 * Every rejection must carry a message; accepted entries must lie inside the file without
 * overlapping, and every tensor of an accepted checkpoint inside the file.
 */
#include "format/torch_ckpt.h"
#include "fuzz_common.h"

static void fail(const char *msg) {
  fprintf(stderr, "fuzz_zip: %s\n", msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__zip_mem mem = {.data = data, .len = size, .what = "fuzz input"};
  sl__zip_src src = {.read = sl__zip_mem_read, .ctx = &mem, .size = size};
  sl__zip_dir d;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__zip_read_dir(&src, "fuzz input", &d, &err);
  fuzz_check_error("fuzz_zip", st, &err);
  if (st == SL_STATUS_OK) {
    for (size_t i = 0; i < d.n; i++) {
      const sl__zip_entry *e = &d.entries[i];
      if (e->data_off > size || e->size > size - e->data_off || e->data_off < e->header_off + 30)
        fail("an entry outside the file was accepted");
    }
    sl__zip_dir_free(&d);
  }
  sl__st_header h;
  sl__err_clear(&err);
  st = sl__pt_parse(&src, "fuzz input", &h, &err);
  fuzz_check_error("fuzz_zip", st, &err);
  if (st == SL_STATUS_OK) {
    for (size_t i = 0; i < h.n_tensors; i++) {
      if (h.tensors[i].begin > h.tensors[i].end || h.tensors[i].end > size)
        fail("a tensor outside the file was accepted");
    }
    sl__st_header_free(&h);
  }
  return 0;
}
