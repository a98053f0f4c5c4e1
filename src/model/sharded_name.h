/*
 * model/sharded_name.h — the names of pre-sharded checkpoints (load format sharded_state, see
 * model/sharded.h): rank r's files are model-rank-{r}-part-{part}.safetensors, and the catalog
 * qualifies each of their tensors with the rank ("rank-3/model.norm.weight"), since every rank's
 * files hold the same parameter names; the layout a save was made at, which `--save-sharded` writes
 * into every part file's metadata; and whether a folder holds such files only (load format auto).
 * docs/spec/FILES.md §1.4.
 */
#ifndef SL_SHARDED_NAME_H
#define SL_SHARDED_NAME_H

#include "base/err.h"
#include "format/safetensors.h"

#include <stdbool.h>
#include <stdint.h>

/* The metadata keys of a part file that carry the layout it was saved at (decimal values). */
#define SL_SHARDED_META_TP "shardload_tp"
#define SL_SHARDED_META_PP "shardload_pp"
#define SL_SHARDED_META_DP "shardload_dp"

/* The layout a pre-sharded checkpoint was saved at; all zero when its files do not say (vLLM's
 * ShardedStateLoader writes no such metadata). */
typedef struct sl__sharded_layout {
  uint32_t tp, pp, dp;
} sl__sharded_layout;

static inline bool sl__sharded_layout_known(const sl__sharded_layout *l) {
  return l->tp != 0;
}

/* Parses "model-rank-{rank}-part-{part}.safetensors" (decimal, no sign); false when the name has
 * another form. */
bool sl__sharded_file_rank(const char *basename, uint32_t *rank, uint32_t *part);

/* The catalog name of tensor `name` of file `basename`: "rank-R/name" for a per-rank file, a copy
 * of name otherwise (NULL when out of memory). */
char *sl__sharded_catalog_name(const char *basename, const char *name);

/* The layout of a part file's metadata (meta, n_meta as the header parser gives them): the three
 * keys together, or none (*out zeroed). One or two of them, or a value that is not a decimal number
 * in 1 .. 2^31 whose product fits 32 bits, is an SL_STATUS_LAYOUT error naming `what` (the file). */
sl_status sl__sharded_layout_from_meta(const sl__st_meta *meta, size_t n_meta, const char *what,
                                       sl__sharded_layout *out, sl__err *err);

/* Whether folder holds a pre-sharded checkpoint: at least one regular file (or link to one) named
 * model-rank-{rank}-part-{part}.safetensors, and no other *.safetensors file (what load format auto
 * then reads as sharded_state; docs/spec/FILES.md §3). A folder that cannot be listed: false. */
bool sl__sharded_folder(const char *folder);

#endif
