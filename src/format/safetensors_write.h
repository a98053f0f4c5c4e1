/*
 * format/safetensors_write.h — byte-exact writing of safetensors files (docs/spec/SAFETENSORS.md §6): the
 * header builder and the file writer of format/safetensors_write.c, byte-identical to the
 * reference serializer. Pure: no MPI, no CUDA, no network.
 */
#ifndef SL_SAFETENSORS_WRITE_H
#define SL_SAFETENSORS_WRITE_H

#include "base/err.h"
#include "format/dtype.h"
#include "format/safetensors.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl__st_write_tensor {
  const char *name;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_ST_MAX_DIMS];
  const void *data; /* host bytes */
  uint64_t nbytes;  /* must equal the shape's size: refused otherwise */
} sl__st_write_tensor;

/* Builds the complete header (the 8-byte length, JSON, space padding) for the tensors in the
 * writer's order; *order receives the permutation (order[k] = input index of the k-th tensor in
 * the file). meta may be NULL (n_meta = 0). Caller frees *header and *order. Refused: a tensor
 * whose nbytes disagrees with its shape (ST_MISALIGNED / ST_OVERFLOW / ST_TENSOR_INFO), a padded
 * header above SL_ST_MAX_HEADER (ST_HEADER_TOO_LARGE), and INVALID_ARGUMENT for what no reader
 * would accept: a name or metadata string that is not UTF-8, a duplicate tensor name or metadata
 * key, a tensor named "__metadata__", an unknown dtype, more than SL_ST_MAX_DIMS dims. The data
 * pointers are not used. */
sl_status sl__st_build_header(const sl__st_write_tensor *tensors, size_t n, const sl__st_meta *meta,
                              size_t n_meta, uint8_t **header, size_t *header_len, size_t **order,
                              sl__err *err);

/* Writes a file byte-identical to the reference serializer: to "<path>.<8 hex>.tmp" in the same
 * directory, fsync, then rename onto path. Nothing is left behind on failure. A tensor with
 * nbytes > 0 needs data. */
sl_status sl__st_write_file(const char *path, const sl__st_write_tensor *tensors, size_t n,
                            const sl__st_meta *meta, size_t n_meta, sl__err *err);

#endif
