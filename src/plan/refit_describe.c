/*
 * plan/refit_describe.c — the trainers' layout of a refit's dry run (see sl__refit_describe in
 * plan/refit.h; shardload/core.h, sl_dryrun_refit_create): "fsdp:N" or "fsdp:NxR" cut every tensor
 * of the catalog as FSDP's Shard(0) does (torch.chunk along the first dimension: blocks of
 * ceil(rows / N) rows, the last ones shorter or empty; R replicas of the N trainers), or JSON text
 * that lists each trainer's blocks. Untrusted text: bounded JSON (base/json.h), every count and
 * number checked before use.
 */
#include "plan/refit.h"

#include "base/json.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The most trainers a description may name. */
#define MAX_TRAINERS 65536u

static sl_status fsdp(const sl__catalog *cat, uint64_t n, uint64_t reps, sl__refit_blocks *out,
                      sl__err *err) {
  for (uint64_t t = 0; t < n * reps; t++) {
    uint64_t s = t % n;
    for (size_t i = 0; i < cat->n_tensors; i++) {
      const sl__cat_tensor *x = &cat->tensors[i];
      uint64_t off[SL_CAT_MAX_DIMS] = {0}, ext[SL_CAT_MAX_DIMS];
      memcpy(ext, x->shape, sizeof ext);
      if (x->ndim > 0) {
        uint64_t chunk = (x->shape[0] + n - 1) / n;
        uint64_t lo = s * chunk < x->shape[0] ? s * chunk : x->shape[0];
        uint64_t hi = lo + chunk < x->shape[0] ? lo + chunk : x->shape[0];
        off[0] = lo;
        ext[0] = hi - lo;
      }
      sl_status st = sl__refit_blocks_add(&out[t], x->name, x->dtype, x->ndim, x->shape, off, ext, err);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

/* A JSON array of at most `max` non-negative integers into v; false otherwise. */
static bool u64s(const cJSON *a, uint64_t *v, uint32_t max, uint32_t *n) {
  if (!cJSON_IsArray(a))
    return false;
  uint32_t k = 0;
  for (const cJSON *e = a->child; e != NULL; e = e->next) {
    if (k >= max || !cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 9007199254740992.0 ||
        e->valuedouble != (double)(uint64_t)e->valuedouble)
      return false;
    v[k++] = (uint64_t)e->valuedouble;
  }
  *n = k;
  return true;
}

/* One trainer's object {name: {"offsets": [...], "extent": [...], "dtype": "F32"}, ...}. */
static sl_status one_trainer(const cJSON *o, uint32_t t, const sl__catalog *cat, sl__refit_blocks *out,
                             sl__err *err) {
  if (!cJSON_IsObject(o))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "publishers: trainer %u is not an object", t);
  for (const cJSON *e = o->child; e != NULL; e = e->next) {
    uint32_t ti = sl__catalog_find(cat, e->string);
    const sl__cat_tensor *x = ti != SL_NONE ? &cat->tensors[ti] : NULL;
    uint64_t off[SL_CAT_MAX_DIMS] = {0}, ext[SL_CAT_MAX_DIMS] = {0}, shape[SL_CAT_MAX_DIMS] = {0};
    uint32_t no = 0, ne = 0, ns = 0;
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    bool ok = cJSON_IsObject(e) &&
              u64s(cJSON_GetObjectItemCaseSensitive(e, "offsets"), off, SL_CAT_MAX_DIMS, &no) &&
              u64s(cJSON_GetObjectItemCaseSensitive(e, "extent"), ext, SL_CAT_MAX_DIMS, &ne) && no == ne &&
              (sh == NULL || (u64s(sh, shape, SL_CAT_MAX_DIMS, &ns) && ns == no)) &&
              (dt == NULL || cJSON_IsString(dt));
    char q[SL_QUOTE_BUF];
    if (!ok)
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "publishers: trainer %u, tensor %s: expected {\"offsets\": [..], \"extent\": [..]} (lists "
          "of the same length; optional \"shape\", \"dtype\")",
          t, sl__quote(e->string, q, sizeof q));
    if (sh == NULL && x != NULL)
      memcpy(shape, x->shape, sizeof shape);
    for (uint32_t d = 0; sh == NULL && x == NULL && d < no; d++) /* the check names the unknown tensor */
      if (sl__add_overflow(off[d], ext[d], &shape[d]))
        return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                           "publishers: trainer %u, tensor %s: offsets too large", t,
                           sl__quote(e->string, q, sizeof q));
    sl__dtype dtype = x != NULL ? x->dtype : SL_DT_F32;
    if (dt != NULL && !sl__dtype_parse(dt->valuestring, strlen(dt->valuestring), &dtype))
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "publishers: trainer %u, tensor %s: unknown dtype",
                         t, sl__quote(e->string, q, sizeof q));
    sl_status st = sl__refit_blocks_add(out, e->string, dtype, no, shape, off, ext, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

static sl_status from_json(const char *text, const sl__catalog *cat, sl__refit_blocks **out, uint32_t *n,
                           sl__err *err) {
  cJSON *root = NULL;
  sl_status st = sl__json_parse(text, strlen(text), "the publishers' description", SL_STATUS_INVALID_ARGUMENT,
                                &root, err);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "trainers");
  int count = cJSON_IsArray(tr) ? cJSON_GetArraySize(tr) : -1;
  if (count < 1 || (unsigned)count > MAX_TRAINERS) {
    cJSON_Delete(root);
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "publishers: expected {\"trainers\": [...]} with 1 to %u trainers", MAX_TRAINERS);
  }
  *out = calloc((size_t)count + 1, sizeof **out);
  if (*out == NULL) {
    cJSON_Delete(root);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  *n = (uint32_t)count;
  uint32_t t = 0;
  for (const cJSON *e = tr->child; e != NULL && st == SL_STATUS_OK; e = e->next) {
    st = one_trainer(e, t, cat, &(*out)[t], err);
    t++;
  }
  cJSON_Delete(root);
  return st;
}

/* "fsdp:N" or "fsdp:NxR": *n, *reps; false when text is not of that form. */
static bool fsdp_form(const char *text, uint64_t *n, uint64_t *reps) {
  if (strncmp(text, "fsdp:", 5) != 0)
    return false;
  char num[32];
  const char *x = strchr(text + 5, 'x');
  size_t len = x != NULL ? (size_t)(x - (text + 5)) : strlen(text + 5);
  if (len == 0 || len >= sizeof num)
    return false;
  memcpy(num, text + 5, len);
  num[len] = '\0';
  *reps = 1;
  return sl__parse_u64(num, n) && (x == NULL || sl__parse_u64(x + 1, reps));
}

sl_status sl__refit_describe(const char *text, const sl__catalog *cat, sl__refit_blocks **out, uint32_t *n,
                             sl__err *err) {
  *out = NULL;
  *n = 0;
  if (text == NULL || *text == '\0')
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "publishers: empty description");
  uint64_t shards = 0, reps = 0;
  sl_status st;
  if (fsdp_form(text, &shards, &reps)) {
    if (shards < 1 || reps < 1 || shards > MAX_TRAINERS || reps > MAX_TRAINERS / shards)
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "publishers fsdp: 1 to %u trainers", MAX_TRAINERS);
    *out = calloc(shards * reps + 1, sizeof **out);
    if (*out == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    *n = (uint32_t)(shards * reps);
    st = fsdp(cat, shards, reps, *out, err);
  } else if (text[0] == '{') {
    st = from_json(text, cat, out, n, err);
  } else {
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "publishers: expected fsdp:N, fsdp:NxR or a JSON description {\"trainers\": [...]}");
  }
  if (st != SL_STATUS_OK) {
    for (uint32_t t = 0; *out != NULL && t < *n; t++)
      sl__refit_blocks_free(&(*out)[t]);
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return st;
}
