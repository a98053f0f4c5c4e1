/*
 * model/sharded_name.c — the names of a pre-sharded checkpoint's files and tensors (see
 * model/sharded_name.h): the rank and part in "model-rank-{rank}-part-{part}.safetensors", and the
 * rank-qualified catalog name of a tensor of such a file. Used by the catalog as it names tensors
 * and by the model of the checkpoint (model/sharded.c) as it gives each parameter its owner.
 */
#include "model/sharded_name.h"

#include "base/util.h"

#include <string.h>

#define RANK_PREFIX "model-rank-"
#define PART_INFIX "-part-"
#define SUFFIX ".safetensors"

/* A decimal number of at most 9 digits (no sign, no overflow) at *p; advances *p. */
static bool parse_u32(const char **p, uint32_t *out) {
  size_t n = strspn(*p, "0123456789");
  if (n == 0 || n > 9)
    return false;
  uint32_t v = 0;
  for (size_t i = 0; i < n; i++)
    v = v * 10 + (uint32_t)((*p)[i] - '0');
  *p += n;
  *out = v;
  return true;
}

bool sl__sharded_file_rank(const char *basename, uint32_t *rank, uint32_t *part) {
  const char *p = basename;
  if (strncmp(p, RANK_PREFIX, strlen(RANK_PREFIX)) != 0)
    return false;
  p += strlen(RANK_PREFIX);
  if (!parse_u32(&p, rank) || strncmp(p, PART_INFIX, strlen(PART_INFIX)) != 0)
    return false;
  p += strlen(PART_INFIX);
  return parse_u32(&p, part) && strcmp(p, SUFFIX) == 0;
}

char *sl__sharded_catalog_name(const char *basename, const char *name) {
  uint32_t rank = 0;
  uint32_t part = 0;
  if (!sl__sharded_file_rank(basename, &rank, &part))
    return sl__strdup(name);
  return sl__asprintf("rank-%u/%s", rank, name);
}
