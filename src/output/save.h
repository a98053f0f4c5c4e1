/*
 * output/save.h — `--save-sharded DIR`: each rank writes its local parameters as
 * DIR/model-rank-{rank}-part-{part}.safetensors (docs/spec/TRACKING.md §4), and rank 0 copies the model's
 * non-weight files, so that a pre-sharded copy can be loaded by anything that reads safetensors.
 */
#ifndef SL_SAVE_H
#define SL_SAVE_H

#include "backend/backend.h"
#include "format/dtype.h"
#include "base/err.h"

#include <stdint.h>

typedef struct sl__save_entry {
  const char *name;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[8];
  const void *data; /* backend memory; entries with equal data and nbytes share memory */
  uint64_t nbytes;
} sl__save_entry;

/* Writes this rank's parts. Zero-size entries and aliases are dropped (of entries sharing
 * memory, the one whose name sorts first is kept); parts are filled greedily in table order up
 * to max_part bytes (a larger tensor gets a part of its own). Earlier parts of this rank in dir
 * are removed first. *parts receives the number of files written. */
sl_status sl__save_rank(const char *dir, uint32_t rank, const sl__save_entry *entries, size_t n,
                        uint64_t max_part, sl__backend *backend, uint32_t *parts, sl__err *err);

/* Rank 0: copies every top-level non-weight file of model_folder into dir (not *.safetensors,
 * *.bin, *.pt, *.pth, *.ckpt, *.gguf, *.h5, *.msgpack, *.onnx, nor the index files). */
sl_status sl__save_copy_extras(const char *model_folder, const char *dir, sl__err *err);

/* mkdir -p. */
sl_status sl__mkdirs(const char *dir, sl__err *err);

#endif
