/*
 * fuzz_common.h — what every libFuzzer target of tests/fuzz shares: the entry point's prototype,
 * a copy of the input as a NUL-terminated string (the parsers take C strings), and the check
 * that every rejection carries a message (an error without one would leave a user guessing).
 */
#ifndef SL_FUZZ_COMMON_H
#define SL_FUZZ_COMMON_H

#include "base/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a C string (an embedded NUL ends it, as it would for a file read as text). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (s == NULL)
    abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* A failed status must come with a non-empty message naming what failed. */
static inline void fuzz_check_error(const char *target, sl_status st, const sl__err *err) {
  if (st != SL_STATUS_OK && (err->status == SL_STATUS_OK || err->msg[0] == '\0')) {
    fprintf(stderr, "%s: status %d without a message\n", target, (int)st);
    abort();
  }
}

#endif
