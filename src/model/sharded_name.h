/*
 * model/sharded_name.h — the names of pre-sharded checkpoints (load format sharded_state, see
 * model/sharded.h): rank r's files are model-rank-{r}-part-{part}.safetensors, and the catalog
 * qualifies each of their tensors with the rank ("rank-3/model.norm.weight"), since every rank's
 * files hold the same parameter names. docs/spec/FILES.md §1.4.
 */
#ifndef SL_SHARDED_NAME_H
#define SL_SHARDED_NAME_H

#include <stdbool.h>
#include <stdint.h>

/* Parses "model-rank-{rank}-part-{part}.safetensors" (decimal, no sign); false when the name has
 * another form. */
bool sl__sharded_file_rank(const char *basename, uint32_t *rank, uint32_t *part);

/* The catalog name of tensor `name` of file `basename`: "rank-R/name" for a per-rank file, a copy
 * of name otherwise (NULL when out of memory). */
char *sl__sharded_catalog_name(const char *basename, const char *name);

#endif
