/*
 * model/described.c — the builder of a caller-described plan and its canonical blob (see
 * model/described.h).
 *
 * The blob, little-endian, every count before what it counts:
 *   "SLPLAN01"
 *   u32 n_strings, then per string: u32 length, its bytes (no NUL)
 *   u32 n_params, then per parameter: u32 name, u32 dtype, u32 ndim, ndim × u64 shape,
 *       u8 transposed, u8 fill, u64 its region count
 *   then per region, parameter after parameter: u32 tensor (SL_PLAN_ZEROS: zeros), u8 ndim,
 *       u8 dst_ndim, (2·ndim + 2·dst_ndim) × u64: start, count, dst_start, dst_count
 *   u32 n_skips, then per skip: u32 string
 * Strings are interned in the order the parameters, then the regions, then the skips first use
 * them, so the blob is a function of the plan's content, whatever the order in which a caller
 * interleaved parameters and regions.
 */
#include "model/described.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "SLPLAN01"

void sl__plan_init(struct sl_plan *p) {
  memset(p, 0, sizeof *p);
  sl__vec_init(&p->params, sizeof(sl__dparam));
  sl__vec_init(&p->regions, sizeof(sl__dregion));
  sl__vec_init(&p->nums, sizeof(uint64_t));
  sl__vec_init(&p->skips, sizeof(uint32_t));
  sl__vec_init(&p->strings, sizeof(char *));
  sl__hashmap_init(&p->intern, SL_HASHMAP_COPY);
  sl__hashmap_init(&p->param_of, SL_HASHMAP_COPY);
}

void sl__plan_release(struct sl_plan *p) {
  for (size_t i = 0; i < p->strings.len; i++)
    free(SL_VEC_AT(&p->strings, char *, i));
  sl__vec_free(&p->params);
  sl__vec_free(&p->regions);
  sl__vec_free(&p->nums);
  sl__vec_free(&p->skips);
  sl__vec_free(&p->strings);
  sl__hashmap_free(&p->intern);
  sl__hashmap_free(&p->param_of);
}

static sl_status nomem(struct sl_plan *p) {
  return sl__err_set(&p->err, SL_STATUS_NOMEM, "out of memory describing a plan");
}

/* A name's checks: non-empty, at most SL_PLAN_MAX_NAME bytes. */
static sl_status check_name(struct sl_plan *p, const char *what, const char *name) {
  if (name == NULL || name[0] == '\0')
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "%s: an empty name", what);
  size_t n = strnlen(name, SL_PLAN_MAX_NAME + 1);
  if (n > SL_PLAN_MAX_NAME) {
    char q[SL_QUOTE_BUF];
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "%s: the name %s is longer than %u bytes", what,
                       sl__quote(name, q, sizeof q), SL_PLAN_MAX_NAME);
  }
  return SL_STATUS_OK;
}

/* The index of string s, interned. */
static sl_status intern(struct sl_plan *p, const char *s, uint32_t *out) {
  bool added = false;
  size_t n = strlen(s);
  sl__hashval *v = sl__hashmap_slot(&p->intern, s, n, &added);
  if (v == NULL)
    return nomem(p);
  if (added) {
    char **slot = sl__vec_push(&p->strings);
    char *copy = sl__strndup(s, n);
    if (slot == NULL || copy == NULL) {
      free(copy);
      if (slot != NULL)
        p->strings.len--;
      v->u64 = UINT64_MAX; /* the map keeps the key, marked as having no string */
      return nomem(p);
    }
    *slot = copy;
    v->u64 = p->strings.len - 1;
  }
  if (v->u64 == UINT64_MAX) /* left behind by a failed add */
    return nomem(p);
  *out = (uint32_t)v->u64;
  return SL_STATUS_OK;
}

sl_status sl__plan_param_check(struct sl_plan *p, const char *name, sl__dtype dtype, uint32_t ndim,
                               uint8_t fill, sl__hashmap *batch) {
  sl_status st = check_name(p, "sl_plan_add_param", name);
  if (st != SL_STATUS_OK)
    return st;
  char q[SL_QUOTE_BUF];
  sl__quote(name, q, sizeof q);
  if ((unsigned)dtype >= SL_DT_COUNT)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "parameter %s: unknown dtype %d", q, (int)dtype);
  if (ndim > SL_MAX_DIMS)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "parameter %s: %u dimensions (at most %d)", q,
                       ndim, SL_MAX_DIMS);
  if (fill != SL_FILL_RECORDED && fill != SL_FILL_FALLBACK)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT,
                       "parameter %s: fill %d is neither SL_FILL_RECORDED nor SL_FILL_FALLBACK", q, fill);
  size_t before = batch != NULL ? batch->count : 0;
  if (p->params.len + before >= SL_PLAN_MAX_PARAMS)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "parameter %s: more than %u parameters", q,
                       SL_PLAN_MAX_PARAMS);
  bool oom = false;
  bool again = sl__hashmap_find(&p->param_of, name, strlen(name)) != NULL ||
               (batch != NULL && !sl__hashmap_put(batch, name, strlen(name), 0, NULL, &oom));
  if (oom)
    return nomem(p);
  if (again)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT,
                       "parameter %s is described twice: names are unique on a rank", q);
  return SL_STATUS_OK;
}

sl_status sl__plan_param(struct sl_plan *p, const char *name, sl__dtype dtype, uint32_t ndim,
                         const uint64_t *shape, bool transposed, uint8_t fill, uint32_t *index) {
  sl_status st = sl__plan_param_check(p, name, dtype, ndim, fill, NULL);
  if (st != SL_STATUS_OK)
    return st;
  char q[SL_QUOTE_BUF];
  sl__quote(name, q, sizeof q);
  if (ndim > 0 && shape == NULL)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "parameter %s: %u dimensions and no shape", q,
                       ndim);
  uint64_t existing = 0;
  bool oom = false;
  if (!sl__hashmap_put(&p->param_of, name, strlen(name), p->params.len, &existing, &oom))
    return oom ? nomem(p)
               : sl__err_set(
                     &p->err, SL_STATUS_INVALID_ARGUMENT,
                     "parameter %s is described twice (parameters %llu and %zu): names are unique on a rank",
                     q, (unsigned long long)existing, p->params.len);
  uint32_t s = 0;
  st = intern(p, name, &s);
  sl__dparam *d = st == SL_STATUS_OK ? sl__vec_push(&p->params) : NULL;
  if (d == NULL)
    return st != SL_STATUS_OK ? st : nomem(p); /* the name stays taken: the plan is unusable anyway */
  *d = (sl__dparam){.name = s, .dtype = dtype, .ndim = ndim, .transposed = transposed, .fill = fill};
  if (ndim > 0)
    memcpy(d->shape, shape, ndim * sizeof *shape);
  if (index != NULL)
    *index = (uint32_t)(p->params.len - 1);
  return SL_STATUS_OK;
}

sl_status sl__plan_region(struct sl_plan *p, uint32_t param, const char *tensor, uint32_t ndim,
                          const uint64_t *start, const uint64_t *count, uint32_t dst_ndim,
                          const uint64_t *dst_start, const uint64_t *dst_count) {
  const char *fn = tensor != NULL ? "sl_plan_add_region" : "sl_plan_add_zeros";
  if (param >= p->params.len)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "%s: no parameter %u (the plan has %zu)", fn,
                       param, p->params.len);
  const sl__dparam *dp = &SL_VEC_AT(&p->params, sl__dparam, param);
  const char *pname = SL_VEC_AT(&p->strings, char *, dp->name);
  sl_status st = tensor != NULL ? check_name(p, fn, tensor) : SL_STATUS_OK;
  if (st != SL_STATUS_OK)
    return st;
  if (ndim > SL_MAX_DIMS || dst_ndim > SL_MAX_DIMS || (ndim > 0 && (start == NULL || count == NULL)) ||
      (dst_ndim > 0 && (dst_start == NULL || dst_count == NULL)))
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT,
                       "%s(%s): %u and %u dimensions (at most %d each, with a start and a count for each)",
                       fn, pname, ndim, dst_ndim, SL_MAX_DIMS);
  if (p->regions.len >= SL_PLAN_MAX_REGIONS)
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "%s(%s): more than %llu regions", fn, pname,
                       (unsigned long long)SL_PLAN_MAX_REGIONS);
  uint32_t t = SL_PLAN_ZEROS;
  if (tensor != NULL && (st = intern(p, tensor, &t)) != SL_STATUS_OK)
    return st;
  size_t base = p->nums.len;
  size_t want = 2 * (size_t)ndim + 2 * (size_t)dst_ndim;
  sl__dregion *r = sl__vec_reserve(&p->nums, base + want) ? sl__vec_push(&p->regions) : NULL;
  if (r == NULL)
    return nomem(p);
  *r = (sl__dregion){
      .param = param, .tensor = t, .ndim = ndim, .dst_ndim = dst_ndim, .nums = base, .cat = SL_NONE};
  uint64_t *n = want > 0 ? (uint64_t *)p->nums.data + base : NULL;
  if (ndim > 0) {
    memcpy(n, start, ndim * sizeof *n);
    memcpy(n + ndim, count, ndim * sizeof *n);
  }
  if (dst_ndim > 0) {
    memcpy(n + 2 * ndim, dst_start, dst_ndim * sizeof *n);
    memcpy(n + 2 * ndim + dst_ndim, dst_count, dst_ndim * sizeof *n);
  }
  p->nums.len = base + want;
  return SL_STATUS_OK;
}

void sl__plan_truncate(struct sl_plan *p, uint64_t n_regions, uint64_t n_nums) {
  if (n_regions < p->regions.len)
    p->regions.len = (size_t)n_regions;
  if (n_nums < p->nums.len)
    p->nums.len = (size_t)n_nums;
}

sl_status sl__plan_skip(struct sl_plan *p, const char *tensor) {
  sl_status st = check_name(p, "sl_plan_skip", tensor);
  if (st == SL_STATUS_OK && p->skips.len >= SL_PLAN_MAX_SKIPS)
    st = sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT, "sl_plan_skip: more than %u skipped tensors",
                     SL_PLAN_MAX_SKIPS);
  uint32_t s = 0;
  if (st == SL_STATUS_OK)
    st = intern(p, tensor, &s);
  uint32_t *slot = st == SL_STATUS_OK ? sl__vec_push(&p->skips) : NULL;
  if (slot == NULL)
    return st != SL_STATUS_OK ? st : nomem(p);
  *slot = s;
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The canonical blob
 * ------------------------------------------------------------------------------------------- */

static void put32(sl__buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  sl__buf_append(b, x, 4);
}

static void put64(sl__buf *b, uint64_t v) {
  put32(b, (uint32_t)v);
  put32(b, (uint32_t)(v >> 32));
}

/* Strings renumbered in the order of first use: the canonical numbering (into map, string → new). */
typedef struct canon {
  const struct sl_plan *p;
  uint32_t *new_of; /* per builder string: its canonical number + 1 (0: unused yet) */
  uint32_t *order;  /* canonical number → builder string */
  uint32_t n;
} canon;

static uint32_t canon_of(canon *c, uint32_t s) {
  if (c->new_of[s] == 0) {
    c->order[c->n] = s;
    c->new_of[s] = ++c->n;
  }
  return c->new_of[s] - 1;
}

/* Regions by parameter, stably: the builder's region numbers in canonical order. */
static uint64_t *regions_by_param(const struct sl_plan *p, uint64_t *first) {
  size_t np = p->params.len;
  size_t nr = p->regions.len;
  uint64_t *order = malloc((nr + 1) * sizeof *order);
  if (order == NULL)
    return NULL;
  memset(first, 0, (np + 1) * sizeof *first);
  for (size_t i = 0; i < nr; i++)
    first[SL_VEC_AT(&p->regions, sl__dregion, i).param + 1]++;
  for (size_t k = 0; k < np; k++)
    first[k + 1] += first[k];
  uint64_t *at = calloc(np + 1, sizeof *at);
  if (at == NULL) {
    free(order);
    return NULL;
  }
  for (size_t i = 0; i < nr; i++) {
    uint32_t k = SL_VEC_AT(&p->regions, sl__dregion, i).param;
    order[first[k] + at[k]++] = i;
  }
  free(at);
  return order;
}

static void put_body(sl__buf *b, canon *c, const uint64_t *order, const uint64_t *first) {
  const struct sl_plan *p = c->p;
  put32(b, (uint32_t)p->params.len);
  for (size_t k = 0; k < p->params.len; k++) {
    const sl__dparam *d = &SL_VEC_AT(&p->params, sl__dparam, k);
    put32(b, canon_of(c, d->name));
    put32(b, (uint32_t)d->dtype);
    put32(b, d->ndim);
    for (uint32_t j = 0; j < d->ndim; j++)
      put64(b, d->shape[j]);
    uint8_t flags[2] = {d->transposed ? 1 : 0, d->fill};
    sl__buf_append(b, flags, 2);
    put64(b, first[k + 1] - first[k]);
  }
  for (size_t i = 0; i < p->regions.len; i++) {
    const sl__dregion *r = &SL_VEC_AT(&p->regions, sl__dregion, order[i]);
    put32(b, r->tensor == SL_PLAN_ZEROS ? SL_PLAN_ZEROS : canon_of(c, r->tensor));
    uint8_t dims[2] = {(uint8_t)r->ndim, (uint8_t)r->dst_ndim};
    sl__buf_append(b, dims, 2);
    const uint64_t *n = sl__plan_nums(p, r->nums);
    for (uint32_t j = 0; j < 2 * r->ndim + 2 * r->dst_ndim; j++)
      put64(b, n[j]);
  }
  put32(b, (uint32_t)p->skips.len);
  for (size_t i = 0; i < p->skips.len; i++)
    put32(b, canon_of(c, SL_VEC_AT(&p->skips, uint32_t, i)));
}

sl_status sl__plan_serialize(const struct sl_plan *p, uint8_t **blob, size_t *len, sl__err *err) {
  size_t ns = p->strings.len;
  canon c = {.p = p, .new_of = calloc(ns + 1, sizeof(uint32_t)), .order = calloc(ns + 1, sizeof(uint32_t))};
  uint64_t *first = calloc(p->params.len + 2, sizeof *first);
  uint64_t *order = first != NULL ? regions_by_param(p, first) : NULL;
  sl__buf body, head;
  sl__buf_init(&body, 0);
  sl__buf_init(&head, 0);
  sl_status st = SL_STATUS_OK;
  if (c.new_of == NULL || c.order == NULL || order == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory serializing a plan");
  } else {
    put_body(&body, &c, order, first); /* numbers the strings as it goes */
    sl__buf_append(&head, MAGIC, 8);
    put32(&head, c.n);
    for (uint32_t i = 0; i < c.n; i++) {
      const char *s = SL_VEC_AT(&p->strings, char *, c.order[i]);
      put32(&head, (uint32_t)strlen(s));
      sl__buf_append(&head, s, strlen(s));
    }
    sl__buf_append(&head, body.data, body.len);
    if (body.failed || head.failed || head.len > SL_PLAN_MAX_BLOB)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory serializing a plan (%zu bytes)", head.len);
  }
  free(c.new_of);
  free(c.order);
  free(first);
  free(order);
  sl__buf_free(&body);
  if (st != SL_STATUS_OK) {
    sl__buf_free(&head);
    return st;
  }
  *len = head.len;
  *blob = (uint8_t *)sl__buf_take(&head);
  return SL_STATUS_OK;
}

sl__plan_key sl__plan_key_of(const uint8_t *blob, size_t len) {
  /* Two independent 64-bit hashes: FNV-1a (base/util.c) and a multiply-rotate over 8-byte words. */
  uint64_t h2 = 0x9e3779b97f4a7c15ULL ^ len;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t w = 0;
    memcpy(&w, blob + i, len - i < 8 ? len - i : 8);
    h2 = (h2 ^ w) * 0xbf58476d1ce4e5b9ULL;
    h2 = (h2 << 31 | h2 >> 33) * 0x94d049bb133111ebULL;
  }
  return (sl__plan_key){.h1 = sl__hash_bytes(blob, len), .h2 = h2 ^ (h2 >> 29), .len = len};
}

sl_status sl__plan_from_dplan(const sl__dplan *d, struct sl_plan *out, sl__err *err) {
  sl__plan_init(out);
  sl_status st = SL_STATUS_OK;
  for (uint32_t k = 0; k < d->n_params && st == SL_STATUS_OK; k++) {
    const sl__dparam *p = &d->params[k];
    st = sl__plan_param(out, d->strings[p->name], p->dtype, p->ndim, p->shape, p->transposed, p->fill, NULL);
  }
  for (uint64_t i = 0; i < d->n_regions && st == SL_STATUS_OK; i++) {
    const sl__dregion *g = &d->regions[i];
    const uint64_t *n = sl__dregion_nums(d, g);
    st = sl__plan_region(out, g->param, g->tensor == SL_PLAN_ZEROS ? NULL : d->strings[g->tensor], g->ndim, n,
                         n + g->ndim, g->dst_ndim, n + 2 * g->ndim, n + 2 * g->ndim + g->dst_ndim);
  }
  for (uint32_t i = 0; i < d->n_skips && st == SL_STATUS_OK; i++)
    st = sl__plan_skip(out, d->strings[d->skips[i]]);
  if (st != SL_STATUS_OK) {
    sl__err_copy(err, &out->err);
    sl__plan_release(out);
  }
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Every rank's plan
 * ------------------------------------------------------------------------------------------- */

sl_status sl__described_init(sl__described *d, uint32_t world, uint32_t n_classes, sl__dplan *plans,
                             uint32_t *class_of, sl__err *err) {
  memset(d, 0, sizeof *d);
  d->world = world;
  d->n_classes = n_classes;
  d->plans = plans;
  d->class_of = class_of;
  d->class_first = calloc((size_t)n_classes + 1, sizeof *d->class_first);
  d->class_size = calloc((size_t)n_classes + 1, sizeof *d->class_size);
  d->class_some = malloc(((size_t)n_classes + 1) * 3 * sizeof *d->class_some);
  if (d->class_first == NULL || d->class_size == NULL || d->class_some == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (uint32_t c = 0; c < n_classes; c++)
    d->class_first[c] = d->class_some[3 * c] = d->class_some[3 * c + 1] = d->class_some[3 * c + 2] = SL_NONE;
  for (uint32_t r = 0; r < world; r++) {
    uint32_t c = class_of[r];
    if (c >= n_classes)
      return sl__err_set(err, SL_STATUS_INTERNAL, "rank %u: plan class %u of %u", r, c, n_classes);
    if (d->class_first[c] == SL_NONE)
      d->class_first[c] = r;
    if (d->class_size[c] < 3)
      d->class_some[3 * c + d->class_size[c]] = r;
    d->class_size[c]++;
  }
  return SL_STATUS_OK;
}

void sl__described_free(sl__described *d) {
  if (d == NULL)
    return;
  for (uint32_t c = 0; d->plans != NULL && c < d->n_classes; c++)
    sl__dplan_free(&d->plans[c]);
  free(d->plans);
  free(d->class_of);
  free(d->class_first);
  free(d->class_size);
  free(d->class_some);
  free(d->unit_of);
  memset(d, 0, sizeof *d);
}

void sl__described_who(const sl__described *d, uint32_t c, char *buf, size_t cap) {
  if (d->class_size[c] == 1) {
    snprintf(buf, cap, "rank %u", d->class_first[c]);
    return;
  }
  size_t n = (size_t)snprintf(buf, cap, "ranks");
  for (uint32_t k = 0; k < 3 && k < d->class_size[c] && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "%s %u", k > 0 ? "," : "", d->class_some[3 * c + k]);
  if (d->class_size[c] > 3 && n < cap)
    snprintf(buf + n, cap - n, " and %u more", d->class_size[c] - 3);
}
