/*
 * format/safetensors.h — strict reading of safetensors files (spec: docs/spec/SAFETENSORS.md); the writer
 * is format/safetensors_write.h. Pure: no MPI, no CUDA, no network.
 *
 * The reader runs every check of docs/spec/SAFETENSORS.md §4 in its order; the first failing check decides
 * the status (SL_STATUS_ST_*), and the message names the file and, where one is involved, the
 * tensor. Nothing is allocated from a length before it is validated.
 */
#ifndef SL_SAFETENSORS_H
#define SL_SAFETENSORS_H

#include "base/err.h"
#include "format/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_ST_MAX_HEADER 100000000ULL /* largest accepted header length N */
#define SL_ST_MAX_DIMS                                                                                       \
  SL_MAX_DIMS /* more dimensions → SL_STATUS_ST_HEADER_JSON (the public header owns the number) */

typedef struct sl__st_tensor {
  const char *name; /* NUL-terminated, points into sl__st_header.strings */
  size_t name_len;  /* bytes, without the NUL (names never contain NUL) */
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_ST_MAX_DIMS];
  uint64_t begin; /* data_offsets[0], relative to the data section */
  uint64_t end;   /* data_offsets[1] */
} sl__st_tensor;

/* A metadata entry. Keys and values are C strings: a U+0000 inside a key or value ends it there
 * (the reference accepts such metadata; shardload never needs it), so two keys equal up to a
 * U+0000 count as one, the last value kept. */
typedef struct sl__st_meta {
  const char *key; /* NUL-terminated, into strings */
  const char *value;
} sl__st_meta;

typedef struct sl__st_header {
  uint64_t header_len; /* N, as stored (padding included) */
  uint64_t data_start; /* 8 + N: absolute file offset of the data section */
  uint64_t file_size;  /* F */
  size_t n_tensors;
  sl__st_tensor *tensors; /* sorted by (begin, end, name bytes): data order */
  size_t n_meta;
  sl__st_meta *meta; /* __metadata__ entries, keys sorted bytewise, last value kept */
  char *strings;     /* arena holding every decoded name, key and value */
} sl__st_header;

/* Validates a whole file given as its first bytes and its size. prefix holds at least
 * min(file_size, 8 + N) bytes — the 8-byte length and the header; data is not needed.
 * `what` names the file in messages; byte positions in messages are file offsets.
 * On error *out is zeroed. Fewer bytes than needed → SL_STATUS_INVALID_ARGUMENT. */
sl_status sl__st_parse(const uint8_t *prefix, size_t prefix_len, uint64_t file_size, const char *what,
                       sl__st_header *out, sl__err *err);

/* Opens path, fstat()s it, reads 8 + N bytes (after checking N), and calls sl__st_parse.
 * The data section is never read (check 7 uses the file size), so header-only sparse files work.
 * I/O failures (a missing file included) → SL_STATUS_IO naming the file. */
sl_status sl__st_read_file(const char *path, sl__st_header *out, sl__err *err);

/* Frees what sl__st_parse / sl__st_read_file filled in and zeroes *h; NULL is a no-op. */
void sl__st_header_free(sl__st_header *h);

/* Byte size of a tensor: the shape folded left to right from 1 with an overflow check at each
 * multiply, times the dtype's bits. SL_STATUS_ST_OVERFLOW or SL_STATUS_ST_MISALIGNED (bits not a
 * multiple of 8) on failure, with no message (callers name the tensor). */
sl_status sl__st_nbytes(sl__dtype dtype, uint32_t ndim, const uint64_t *shape, uint64_t *nbytes);

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF; NUL allowed). On false,
 * *bad_at (may be NULL) receives the offset of the first byte of the bad sequence. */
bool sl__st_utf8_check(const uint8_t *p, size_t n, size_t *bad_at);

#endif
