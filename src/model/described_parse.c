/*
 * model/described_parse.c — a canonical plan blob read back (see model/described.h for the format
 * and model/described.c for the writer). A blob comes from another rank: every count is checked
 * against the bytes left before anything is allocated from it, every index against what it
 * indexes, so a defective blob is one clear SL_STATUS_PLAN, never a crash.
 */
#include "model/described.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
  const uint8_t *p;
  size_t left;
  bool bad;
} reader;

static uint32_t get32(reader *r) {
  if (r->left < 4) {
    r->bad = true;
    return 0;
  }
  uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
  r->p += 4;
  r->left -= 4;
  return v;
}

static uint64_t get64(reader *r) {
  uint64_t lo = get32(r);
  return lo | (uint64_t)get32(r) << 32;
}

static uint8_t get8(reader *r) {
  if (r->left < 1) {
    r->bad = true;
    return 0;
  }
  r->left--;
  return *r->p++;
}

void sl__dplan_free(sl__dplan *d) {
  if (d == NULL)
    return;
  free(d->blob);
  free(d->strings);
  free(d->text);
  free(d->params);
  free(d->regions);
  free(d->nums);
  free(d->skips);
  memset(d, 0, sizeof *d);
}

static sl_status bad(sl__err *err, const char *what, const char *why) {
  return sl__err_set(err, SL_STATUS_PLAN, "%s is not a valid plan: %s", what, why);
}

/* The string table: lengths bounded by the bytes left, copied NUL-terminated into one block. */
static sl_status read_strings(reader *r, const char *what, sl__dplan *d, sl__err *err) {
  d->n_strings = get32(r);
  if (r->bad || d->n_strings > r->left / 4)
    return bad(err, what, "its string count exceeds its bytes");
  d->strings = calloc((size_t)d->n_strings + 1, sizeof *d->strings);
  d->text = malloc(r->left + (size_t)d->n_strings + 1);
  if (d->strings == NULL || d->text == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  char *at = d->text;
  for (uint32_t i = 0; i < d->n_strings; i++) {
    uint32_t n = get32(r);
    if (r->bad || n > r->left || n == 0 || n > SL_PLAN_MAX_NAME || memchr(r->p, 0, n) != NULL)
      return bad(err, what, "a string is empty, too long, holds a NUL or exceeds its bytes");
    memcpy(at, r->p, n);
    at[n] = '\0';
    d->strings[i] = at;
    at += n + 1;
    r->p += n;
    r->left -= n;
  }
  return SL_STATUS_OK;
}

static sl_status read_params(reader *r, const char *what, sl__dplan *d, sl__err *err) {
  d->n_params = get32(r);
  /* a parameter takes at least 22 bytes */
  if (r->bad || d->n_params > SL_PLAN_MAX_PARAMS || d->n_params > r->left / 22)
    return bad(err, what, "its parameter count exceeds its bytes or the limit");
  d->params = calloc((size_t)d->n_params + 1, sizeof *d->params);
  if (d->params == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  uint64_t total = 0;
  for (uint32_t k = 0; k < d->n_params && !r->bad; k++) {
    sl__dparam *p = &d->params[k];
    p->name = get32(r);
    p->dtype = (sl__dtype)get32(r);
    p->ndim = get32(r);
    if (r->bad || p->name >= d->n_strings || (unsigned)p->dtype >= SL_DT_COUNT || p->ndim > SL_MAX_DIMS)
      return bad(err, what, "a parameter's name, dtype or dimension count is out of range");
    for (uint32_t j = 0; j < p->ndim; j++)
      p->shape[j] = get64(r);
    uint8_t t = get8(r);
    p->fill = get8(r);
    p->transposed = t != 0;
    p->n_regions = get64(r);
    p->first_region = total;
    if (r->bad || t > 1 || (p->fill != SL_FILL_RECORDED && p->fill != SL_FILL_FALLBACK) ||
        p->n_regions > SL_PLAN_MAX_REGIONS || sl__add_overflow(total, p->n_regions, &total) ||
        total > SL_PLAN_MAX_REGIONS)
      return bad(err, what, "a parameter's flags or region count are out of range");
  }
  d->n_regions = total;
  return r->bad ? bad(err, what, "it ends inside its parameters") : SL_STATUS_OK;
}

static sl_status read_regions(reader *r, const char *what, sl__dplan *d, sl__err *err) {
  /* a region takes at least 6 bytes: bound the count before allocating */
  if (d->n_regions > r->left / 6)
    return bad(err, what, "its region count exceeds its bytes");
  d->regions = calloc((size_t)d->n_regions + 1, sizeof *d->regions);
  sl__vec nums;
  sl__vec_init(&nums, sizeof(uint64_t));
  if (d->regions == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  uint32_t k = 0;
  sl_status st = SL_STATUS_OK;
  for (uint64_t i = 0; i < d->n_regions && st == SL_STATUS_OK; i++) {
    while (k < d->n_params && i >= d->params[k].first_region + d->params[k].n_regions)
      k++;
    sl__dregion *g = &d->regions[i];
    g->param = k;
    g->cat = SL_NONE;
    g->tensor = get32(r);
    g->ndim = get8(r);
    g->dst_ndim = get8(r);
    size_t want = 2 * (size_t)g->ndim + 2 * (size_t)g->dst_ndim;
    if (r->bad || (g->tensor != SL_PLAN_ZEROS && g->tensor >= d->n_strings) || g->ndim > SL_MAX_DIMS ||
        g->dst_ndim > SL_MAX_DIMS || (g->tensor == SL_PLAN_ZEROS && g->ndim != 0) || want > r->left / 8) {
      st = bad(err, what, "a region's tensor or dimension counts are out of range");
      break;
    }
    g->nums = nums.len;
    if (!sl__vec_reserve(&nums, nums.len + want)) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
      break;
    }
    for (size_t j = 0; j < want; j++)
      ((uint64_t *)nums.data)[nums.len++] = get64(r);
  }
  d->nums = nums.data;
  if (d->nums == NULL && st == SL_STATUS_OK && (d->nums = calloc(1, sizeof *d->nums)) == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  return st;
}

static sl_status read_skips(reader *r, const char *what, sl__dplan *d, sl__err *err) {
  d->n_skips = get32(r);
  if (r->bad || d->n_skips > r->left / 4)
    return bad(err, what, "its skip count exceeds its bytes");
  d->skips = calloc((size_t)d->n_skips + 1, sizeof *d->skips);
  if (d->skips == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  for (uint32_t i = 0; i < d->n_skips; i++)
    if ((d->skips[i] = get32(r)) >= d->n_strings)
      return bad(err, what, "a skipped tensor's name is out of range");
  return r->left == 0 ? SL_STATUS_OK : bad(err, what, "bytes follow its end");
}

sl_status sl__dplan_parse(const uint8_t *blob, size_t len, const char *what, sl__dplan *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  if (len < 8 || memcmp(blob, "SLPLAN01", 8) != 0)
    return bad(err, what, "it does not start with SLPLAN01");
  out->blob = malloc(len);
  if (out->blob == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  memcpy(out->blob, blob, len);
  out->blob_len = len;
  reader r = {.p = out->blob + 8, .left = len - 8};
  sl_status st = read_strings(&r, what, out, err);
  if (st == SL_STATUS_OK)
    st = read_params(&r, what, out, err);
  if (st == SL_STATUS_OK)
    st = read_regions(&r, what, out, err);
  if (st == SL_STATUS_OK)
    st = read_skips(&r, what, out, err);
  if (st != SL_STATUS_OK)
    sl__dplan_free(out);
  return st;
}
