/*
 * model/sharded_name.c — the names of a pre-sharded checkpoint's files and tensors (see
 * model/sharded_name.h): the rank and part in "model-rank-{rank}-part-{part}.safetensors", and the
 * rank-qualified catalog name of a tensor of such a file, the saved layout in a part file's
 * metadata, and the detection of a folder of such files. Used by the catalog as it names tensors
 * and reads their headers, by the model of the checkpoint (model/sharded.c) as it gives each
 * parameter its owner, by the saver (output/save.c) for the metadata keys.
 */
#include "model/sharded_name.h"

#include "base/util.h"

#include <dirent.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* A layout size of the metadata: decimal digits only, 1 .. 2^31. */
static bool parse_size(const char *s, uint32_t *out) {
  size_t n = strspn(s, "0123456789");
  if (n == 0 || n > 10 || s[n] != '\0')
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v = v * 10 + (uint64_t)(s[i] - '0');
  if (v == 0 || v > (UINT64_C(1) << 31))
    return false;
  *out = (uint32_t)v;
  return true;
}

sl_status sl__sharded_layout_from_meta(const sl__st_meta *meta, size_t n_meta, const char *what,
                                       sl__sharded_layout *out, sl__err *err) {
  static const char *const keys[3] = {SL_SHARDED_META_TP, SL_SHARDED_META_PP, SL_SHARDED_META_DP};
  uint32_t v[3] = {0, 0, 0};
  size_t found = 0;
  memset(out, 0, sizeof *out);
  for (size_t k = 0; k < 3; k++) {
    for (size_t i = 0; i < n_meta; i++) {
      if (strcmp(meta[i].key, keys[k]) != 0)
        continue;
      if (!parse_size(meta[i].value, &v[k]))
        return sl__err_set(
            err, SL_STATUS_LAYOUT,
            "%s: metadata %s is '%.40s', expected a size of 1 .. 2147483648 (the layout the file "
            "was saved at)",
            what, keys[k], meta[i].value);
      found++;
    }
  }
  if (found == 0)
    return SL_STATUS_OK;
  if (found != 3)
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "%s: metadata gives %zu of %s, %s and %s (the layout the file was saved at needs all three)", what,
        found, keys[0], keys[1], keys[2]);
  if ((uint64_t)v[0] * v[1] * v[2] > UINT32_MAX)
    return sl__err_set(err, SL_STATUS_LAYOUT, "%s: metadata layout tp=%u pp=%u dp=%u is more than 2^32 ranks",
                       what, v[0], v[1], v[2]);
  *out = (sl__sharded_layout){.tp = v[0], .pp = v[1], .dp = v[2]};
  return SL_STATUS_OK;
}

bool sl__sharded_folder(const char *folder) {
  DIR *d = opendir(folder);
  if (d == NULL)
    return false;
  size_t parts = 0;
  bool other = false;
  struct dirent *e = NULL;
  while (!other && (e = readdir(d)) != NULL) {
    /* As the selection matches: a leading '.' is never matched by "*.safetensors" (FNM_PERIOD). */
    if (fnmatch("*" SUFFIX, e->d_name, FNM_PERIOD) != 0)
      continue;
    char *path = sl__path_join(folder, e->d_name);
    struct stat st;
    bool regular = path != NULL && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    if (!regular)
      continue;
    uint32_t rank = 0;
    uint32_t part = 0;
    if (sl__sharded_file_rank(e->d_name, &rank, &part))
      parts++;
    else
      other = true;
  }
  closedir(d);
  return parts > 0 && !other;
}
