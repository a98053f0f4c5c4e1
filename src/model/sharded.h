/*
 * model/sharded.h — pre-sharded checkpoints (load format sharded_state): the per-rank files that
 * --save-sharded (and vLLM's ShardedStateLoader) write, model-rank-{rank}-part-{part}.safetensors.
 * Every tensor of rank r's files is one parameter held by rank r alone, whole: no slicing, nothing
 * shared, so each rank reads only its own files. The same parameter name appears in every rank's
 * files, so the catalog qualifies each name with its rank ("rank-3/model.norm.weight"), and the
 * model strips the qualifier again. docs/spec/FILES.md §1.4.
 */
#ifndef SL_SHARDED_H
#define SL_SHARDED_H

#include "model/catalog.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

/* Parses "model-rank-{rank}-part-{part}.safetensors" (decimal, no sign); false when the name has
 * another form. */
bool sl__sharded_file_rank(const char *basename, uint32_t *rank, uint32_t *part);

/* The catalog name of tensor `name` of file `basename`: "rank-R/name" for a per-rank file, a copy
 * of name otherwise (NULL when out of memory). */
char *sl__sharded_catalog_name(const char *basename, const char *name);

/* The model of a sharded_state catalog for a job of `world` ranks: one owned, replicated
 * parameter per tensor. The saved world size is the highest rank in the file names plus one; a
 * different world is an SL_STATUS_LAYOUT error naming both. */
sl_status sl__sharded_model_build(const sl__catalog *cat, uint32_t world, sl__model *out, sl__err *err);

#endif
