/*
 * model/sharded.h — pre-sharded checkpoints (load format sharded_state): the per-rank files that
 * --save-sharded (and vLLM's ShardedStateLoader) write, model-rank-{rank}-part-{part}.safetensors.
 * Every tensor of rank r's files is one parameter held by rank r alone, whole: no slicing, nothing
 * shared, so each rank reads only its own files. The same parameter name appears in every rank's
 * files, so the catalog qualifies each name with its rank ("rank-3/model.norm.weight"), and the
 * model strips the qualifier again. docs/spec/FILES.md §1.4. The names are model/sharded_name.h.
 */
#ifndef SL_SHARDED_H
#define SL_SHARDED_H

#include "model/catalog.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/sharded_name.h"

#include <stdint.h>

/* The model of a sharded_state catalog for a job of layout `job`: one owned, replicated parameter
 * per tensor. The saved world size is tp·pp·dp of the layout its files say they were saved at
 * (cat->saved), else the highest rank in the file names plus one; a different world, or a known
 * saved layout other than the job's, is an SL_STATUS_LAYOUT error naming both. */
sl_status sl__sharded_model_build(const sl__catalog *cat, const sl__layout *job, sl__model *out,
                                  sl__err *err);

#endif
