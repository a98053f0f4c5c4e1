/*
 * fuzz_pickle.c — libFuzzer target for the restricted state-dict pickle reader (format/pickle.h,
 * docs/spec/FILES.md §8.2). The input is a data.pkl. Every rejection must carry a message naming
 * the input; an accepted table must be consistent: names non-empty and NUL-free, at most 8
 * dimensions, every tensor's byte range inside its storage and as long as its shape says.
 */
#include "format/pickle.h"
#include "fuzz_common.h"

static void fail(const char *msg) {
  fprintf(stderr, "fuzz_pickle: %s\n", msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__pk_state s;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__pickle_state_dict(data, size, "fuzz input", &s, &err);
  fuzz_check_error("fuzz_pickle", st, &err);
  if (st != SL_STATUS_OK) {
    if (strstr(err.msg, "fuzz input") == NULL && st != SL_STATUS_NOMEM)
      fail("a rejection does not name the input");
    return 0;
  }
  for (size_t i = 0; i < s.n; i++) {
    const sl__pk_tensor *t = &s.tensors[i];
    if (t->name_len == 0 || strlen(t->name) != t->name_len || t->ndim > SL_PK_MAX_DIMS)
      fail("a bad name or rank was accepted");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
      numel *= t->shape[d];
    if (t->begin > t->end || t->end > t->storage_bytes ||
        t->end - t->begin != numel * (sl__dtype_bits(t->dtype) / 8))
      fail("a tensor's byte range disagrees with its shape or storage");
  }
  sl__pk_state_free(&s);
  return 0;
}
