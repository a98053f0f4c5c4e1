/*
 * fuzz_header.c — libFuzzer target for the safetensors reader (docs/spec/SAFETENSORS.md §4–§5). The input is
 * a whole file (file_size = size). Every rejection must carry a message; an accepted header is
 * re-serialised with sl__st_build_header, which must succeed, parse again to the same table, and
 * re-serialise to the same bytes.
 */
#include "base/hashmap.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "format/safetensors_write.h"
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *msg) {
  fprintf(stderr, "fuzz_header: %s: %s\n", what, msg);
  abort();
}

/* The writer's input for the table of h (no data: build_header does not read it). */
static sl__st_write_tensor *to_write(const sl__st_header *h, uint64_t *data_len) {
  sl__st_write_tensor *w = calloc(h->n_tensors != 0 ? h->n_tensors : 1, sizeof *w);
  if (w == NULL)
    fail("calloc", "out of memory");
  *data_len = 0;
  for (size_t k = 0; k < h->n_tensors; k++) {
    const sl__st_tensor *t = &h->tensors[k];
    w[k].name = t->name;
    w[k].dtype = t->dtype;
    w[k].ndim = t->ndim;
    memcpy(w[k].shape, t->shape, sizeof t->shape);
    w[k].nbytes = t->end - t->begin;
    *data_len += w[k].nbytes;
  }
  return w;
}

/* Same tensors (by name: zero-size tensors may change places) and the same metadata. */
static void same_table(const sl__st_header *a, const sl__st_header *b) {
  if (a->n_tensors != b->n_tensors || a->n_meta != b->n_meta)
    fail("re-parse", "tensor or metadata count changed");
  sl__hashmap names;
  sl__hashmap_init(&names, SL_HASHMAP_BORROW);
  for (size_t k = 0; k < a->n_tensors; k++) {
    if (!sl__hashmap_put(&names, a->tensors[k].name, a->tensors[k].name_len, k, NULL, NULL))
      fail("re-parse", "duplicate name accepted");
  }
  for (size_t k = 0; k < b->n_tensors; k++) {
    const sl__st_tensor *y = &b->tensors[k];
    uint64_t i = 0;
    if (!sl__hashmap_get(&names, y->name, y->name_len, &i))
      fail("re-parse", "a tensor name changed");
    const sl__st_tensor *x = &a->tensors[i];
    if (x->dtype != y->dtype || x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof x->shape) != 0 ||
        x->end - x->begin != y->end - y->begin)
      fail("re-parse", "a tensor changed");
  }
  sl__hashmap_free(&names);
  for (size_t k = 0; k < a->n_meta; k++) {
    if (strcmp(a->meta[k].key, b->meta[k].key) != 0 || strcmp(a->meta[k].value, b->meta[k].value) != 0)
      fail("re-parse", "metadata changed");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__st_header h;
  sl__err err;
  sl__err_clear(&err);
  if (sl__st_parse(data, size, size, "fuzz input", &h, &err) != SL_STATUS_OK) {
    if (err.msg[0] == '\0' || strstr(err.msg, "fuzz input") == NULL)
      fail("rejection without a message naming the file", err.msg);
    return 0;
  }
  uint64_t data_len = 0;
  sl__st_write_tensor *w = to_write(&h, &data_len);
  uint8_t *hdr = NULL;
  size_t hdr_len = 0;
  size_t *order = NULL;
  if (sl__st_build_header(w, h.n_tensors, h.meta, h.n_meta, &hdr, &hdr_len, &order, &err) != SL_STATUS_OK)
    fail("build_header of an accepted table", err.msg);

  sl__st_header again;
  if (sl__st_parse(hdr, hdr_len, hdr_len + data_len, "rewritten header", &again, &err) != SL_STATUS_OK)
    fail("parse of the rewritten header", err.msg);
  same_table(&h, &again);

  uint64_t data_len2 = 0;
  sl__st_write_tensor *w2 = to_write(&again, &data_len2);
  uint8_t *hdr2 = NULL;
  size_t hdr2_len = 0;
  size_t *order2 = NULL;
  if (sl__st_build_header(w2, again.n_tensors, again.meta, again.n_meta, &hdr2, &hdr2_len, &order2, &err) !=
      SL_STATUS_OK)
    fail("second build_header", err.msg);
  if (hdr2_len != hdr_len || memcmp(hdr, hdr2, hdr_len) != 0)
    fail("second build_header", "the header is not a fixed point of read → write");

  free(hdr2);
  free(order2);
  free(w2);
  sl__st_header_free(&again);
  free(hdr);
  free(order);
  free(w);
  sl__st_header_free(&h);
  return 0;
}
