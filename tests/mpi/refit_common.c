/*
 * refit_common.c — the trainers' blocks from the value function and the receivers' expected bytes
 * from the reference (see refit_common.h).
 */
#include "refit_common.h"

#include "check.h"
#include "load_check.h"
#include "values.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t rf_key(uint64_t v) {
  static const uint8_t keys[] = {0x00, 0xFF, 0x5A, 0xC3, 0x3C, 0x81};
  return keys[v % (sizeof keys)];
}

/* Rows [lo, hi) of `rows` for shard s of n under chunks of `chunk`. */
static void chunk_of(uint64_t rows, uint64_t chunk, int s, uint64_t *lo, uint64_t *hi) {
  *lo = (uint64_t)s * chunk < rows ? (uint64_t)s * chunk : rows;
  *hi = *lo + chunk < rows ? *lo + chunk : rows;
}

/* The block of shard s of n of a tensor of shape[ndim] under cut. */
static void block_of(tcut cut, int s, int n, uint32_t ndim, const uint64_t *shape, uint64_t *off,
                     uint64_t *ext) {
  for (uint32_t d = 0; d < ndim; d++) {
    off[d] = 0;
    ext[d] = shape[d];
  }
  if (ndim == 0 || cut == CUT_WHOLE)
    return;
  uint32_t d = cut == CUT_COLS ? ndim - 1 : 0;
  uint64_t parts = cut == CUT_ROWS_LAST && n > 1 ? (uint64_t)n - 1 : (uint64_t)n;
  uint64_t chunk = (shape[d] + parts - 1) / parts;
  uint64_t lo, hi;
  chunk_of(shape[d], chunk, s, &lo, &hi);
  off[d] = lo;
  ext[d] = hi - lo;
}

static uint32_t bits_of(const char *dtype) {
  for (int i = 0; i < SL_DTYPE_COUNT; i++)
    if (strcmp(sl_dtype_name((sl_dtype)i), dtype) == 0)
      return sl_dtype_bits((sl_dtype)i);
  return 0;
}

static sl_dtype id_of(const char *dtype) {
  for (int i = 0; i < SL_DTYPE_COUNT; i++)
    if (strcmp(sl_dtype_name((sl_dtype)i), dtype) == 0)
      return (sl_dtype)i;
  return SL_DTYPE_COUNT;
}

/* Element bytes of version v (already XORed) as the F32 a rounded trainer publishes. */
static uint32_t rounded_f32(uint16_t bf16) {
  uint32_t f = (uint32_t)bf16 << 16;
  return (bf16 & 0x7F80) == 0x7F80 ? f : f | 0x8001u;
}

/* The block's elements of version v in row-major order into a new buffer (NULL when empty). */
static void *fill_block(const sl_tensor_info *ti, const uint64_t *off, const uint64_t *ext, uint64_t v,
                        bool to_f32) {
  uint64_t e = bits_of(ti->dtype) / 8, count = 1;
  for (uint32_t d = 0; d < ti->ndim; d++)
    count *= ext[d];
  if (count == 0 || e == 0)
    return NULL;
  uint64_t pe = to_f32 ? 4 : e;
  uint8_t *buf = malloc(count * pe);
  uint64_t idx[SL_MAX_DIMS] = {0};
  for (uint64_t j = 0; buf != NULL && j < count; j++) {
    uint64_t g = 0;
    for (uint32_t d = 0; d < ti->ndim; d++)
      g = g * ti->shape[d] + off[d] + idx[d];
    uint8_t x[8];
    sl_value_fill(ti->name, g * e, x, (size_t)e);
    for (uint64_t b = 0; b < e; b++)
      x[b] ^= rf_key(v);
    if (to_f32) {
      uint32_t f = rounded_f32((uint16_t)(x[0] | x[1] << 8));
      memcpy(buf + j * 4, &f, 4);
    } else {
      memcpy(buf + j * e, x, (size_t)e);
    }
    for (uint32_t d = ti->ndim; d-- > 0;) {
      if (++idx[d] < ext[d])
        break;
      idx[d] = 0;
    }
  }
  return buf;
}

/* Block i's memory as published: its host buffer, or (with a device) its device copy. */
static const void *published(rf_trainer *t, size_t i, uint64_t nbytes) {
  if (t->dev == NULL || t->bufs[i] == NULL)
    return t->bufs[i];
  t->dev_bufs[i] = t->dev->copy(t->bufs[i], (size_t)nbytes);
  CHECKF(t->dev_bufs[i] != NULL, "a block's device copy failed");
  return t->dev_bufs[i];
}

static bool make(rf_trainer *t, const rf_device *dev, const char *fixture, tcut cut, int shard, int shards,
                 uint64_t v, bool rounded, const char *skip, uint64_t bucket_bytes);

bool rf_trainer_make(rf_trainer *t, const char *fixture, tcut cut, int shard, int shards, uint64_t v,
                     bool rounded, const char *skip, uint64_t bucket_bytes) {
  return make(t, NULL, fixture, cut, shard, shards, v, rounded, skip, bucket_bytes);
}

bool rf_trainer_make_on(rf_trainer *t, const rf_device *dev, const char *fixture, tcut cut, int shard,
                        int shards, uint64_t v, bool rounded) {
  return make(t, dev, fixture, cut, shard, shards, v, rounded, NULL, 0);
}

static bool make(rf_trainer *t, const rf_device *dev, const char *fixture, tcut cut, int shard, int shards,
                 uint64_t v, bool rounded, const char *skip, uint64_t bucket_bytes) {
  sl_publisher *keep = t->pub; /* a publisher kept from an earlier step: its plan is reused */
  rf_trainer_bufs_free(t);
  t->pub = keep;
  t->dev = dev;
  char folder[1024];
  lc_fixture_path(fixture, folder, sizeof folder);
  sl_model *m = NULL;
  char *error = NULL;
  if (sl_model_open(folder, NULL, &m, &error) != SL_STATUS_OK) {
    CHECKF(false, "%s: %s", folder, error != NULL ? error : "");
    free(error);
    return false;
  }
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char num[32];
  snprintf(num, sizeof num, "%llu", (unsigned long long)bucket_bytes);
  if (bucket_bytes > 0)
    CHECK(sl_config_set(cfg, "bucket_bytes", num) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "timeout_s", "120") == SL_STATUS_OK);
  snprintf(num, sizeof num, "%d", dev != NULL ? dev->device : 0);
  if (dev != NULL)
    CHECK(sl_config_set(cfg, "device", "cuda") == SL_STATUS_OK &&
          sl_config_set(cfg, "cuda_device", num) == SL_STATUS_OK);
  if (t->pub == NULL)
    CHECK(sl_publisher_create(cfg, &t->pub) == SL_STATUS_OK);
  sl_publisher_clear(t->pub);
  sl_config_destroy(cfg);
  t->n = sl_model_tensor_count(m);
  t->bufs = calloc(t->n + 1, sizeof *t->bufs);
  t->dev_bufs = calloc(t->n + 1, sizeof *t->dev_bufs);
  bool ok = t->pub != NULL && t->bufs != NULL && t->dev_bufs != NULL;
  for (size_t i = 0; ok && i < t->n; i++) {
    sl_tensor_info ti = SL_TENSOR_INFO_INIT;
    ok = sl_model_tensor(m, i, &ti) == SL_STATUS_OK;
    if (!ok || (skip != NULL && strcmp(ti.name, skip) == 0))
      continue;
    uint64_t off[SL_MAX_DIMS], ext[SL_MAX_DIMS];
    block_of(cut, shard, shards, ti.ndim, ti.shape, off, ext);
    bool to_f32 = rounded && strcmp(ti.dtype, "BF16") == 0;
    t->bufs[i] = fill_block(&ti, off, ext, v, to_f32);
    uint64_t count = 1;
    for (uint32_t d = 0; d < ti.ndim; d++)
      count *= ext[d];
    sl_status st =
        sl_publisher_add(t->pub, ti.name, to_f32 ? SL_DTYPE_F32 : id_of(ti.dtype), ti.ndim, ti.shape, off,
                         ext, published(t, i, count * (to_f32 ? 4 : bits_of(ti.dtype) / 8)));
    CHECKF(st == SL_STATUS_OK, "publish %s: %s", ti.name, sl_publisher_error(t->pub));
    ok = st == SL_STATUS_OK;
  }
  sl_model_close(m);
  return ok;
}

void rf_trainer_bufs_free(rf_trainer *t) {
  for (size_t i = 0; t->bufs != NULL && i < t->n; i++) {
    free(t->bufs[i]);
    if (t->dev_bufs != NULL && t->dev_bufs[i] != NULL)
      t->dev->release(t->dev_bufs[i]);
  }
  free(t->bufs);
  free(t->dev_bufs);
  t->bufs = NULL;
  t->dev_bufs = NULL;
  t->n = 0;
}

void rf_trainer_free(rf_trainer *t) {
  rf_trainer_bufs_free(t);
  sl_publisher_destroy(t->pub);
  memset(t, 0, sizeof *t);
}

void rf_expected(const sl_ref_model *m, const sl_ref_param *e, uint64_t v, bool rounded, bool into_f32,
                 uint8_t *out, uint8_t *nan) {
  uint8_t *bf = into_f32 ? malloc(e->nbytes + 1) : out;
  sl_ref_param_fill(m, e, bf);
  bool bf16 = strcmp(e->dtype, "BF16") == 0;
  for (size_t s = 0; s < e->n_segs; s++) {
    const sl_ref_seg *g = &e->segs[s];
    for (uint64_t i = 0; g->tensor >= 0 && i < g->len; i++)
      bf[g->dst + i] ^= rf_key(v);
    for (uint64_t i = 0; rounded && bf16 && g->tensor >= 0 && i + 1 < g->len; i += 2) {
      uint16_t x = (uint16_t)(bf[g->dst + i] | bf[g->dst + i + 1] << 8);
      bool special = (x & 0x7F80) == 0x7F80;
      if (nan != NULL)
        nan[(g->dst + i) / 2] = special && (x & 0x7F) != 0;
      x = special ? x : (uint16_t)(x + 1);
      bf[g->dst + i] = (uint8_t)x;
      bf[g->dst + i + 1] = (uint8_t)(x >> 8);
    }
  }
  for (uint64_t i = 0; into_f32 && i < e->nbytes / 2; i++) { /* BF16 widened: exact */
    uint32_t f = (uint32_t)(bf[2 * i] | bf[2 * i + 1] << 8) << 16;
    memcpy(out + 4 * i, &f, 4);
  }
  if (into_f32)
    free(bf);
}

static bool is_nan(const uint8_t *p, bool f32) {
  if (f32) {
    uint32_t x;
    memcpy(&x, p, 4);
    return (x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu) != 0;
  }
  uint16_t x = (uint16_t)(p[0] | p[1] << 8);
  return (x & 0x7F80) == 0x7F80 && (x & 0x7F) != 0;
}

/* One parameter: every byte, a NaN where only a NaN is expected. */
static void check_param(const char *label, const sl_ref_model *m, const sl_param *p, const sl_ref_param *e,
                        uint64_t v, bool rounded, rf_fetch fetch) {
  bool f32 = strcmp(p->dtype, "F32") == 0 && strcmp(e->dtype, "BF16") == 0;
  uint64_t n = f32 ? e->nbytes * 2 : e->nbytes;
  CHECKF(p->nbytes == n, "%s: %s holds %llu bytes, expected %llu", label, p->name,
         (unsigned long long)p->nbytes, (unsigned long long)n);
  if (p->nbytes != n)
    return;
  uint8_t *want = malloc(n + 1);
  uint8_t *nan = calloc(e->nbytes / 2 + 1, 1);
  rf_expected(m, e, v, rounded, f32, want, nan);
  uint8_t *fetched = fetch != NULL ? malloc(n + 1) : NULL;
  if (fetched != NULL && !fetch(p, fetched)) {
    CHECKF(false, "%s: %s: cannot copy the parameter back", label, p->name);
    memset(fetched, 0, n);
  }
  const uint8_t *have = fetched != NULL ? fetched : p->data;
  uint64_t es = f32 ? 4 : 2, bad = UINT64_MAX;
  for (uint64_t k = 0; k < n && bad == UINT64_MAX; k++) {
    uint64_t el = k / es;
    bool nan_ok = rounded && el < e->nbytes / 2 && nan[el];
    if (nan_ok ? !is_nan(have + el * es, f32) : have[k] != want[k])
      bad = k;
  }
  CHECKF(bad == UINT64_MAX, "%s: %s differs at byte %llu of %llu (version %llu%s): 0x%02x, expected 0x%02x",
         label, p->name, (unsigned long long)bad, (unsigned long long)n, (unsigned long long)v,
         rounded ? ", rounded" : "", bad < n ? have[bad] : 0, bad < n ? want[bad] : 0);
  free(want);
  free(nan);
  free(fetched);
}

void rf_check_receiver(const char *label, const char *fixture, int tp, int pp, int dp, bool ep, int side_rank,
                       const sl_loader *l, uint64_t v, bool rounded) {
  rf_check_receiver_with(label, fixture, tp, pp, dp, ep, side_rank, l, v, rounded, NULL);
}

void rf_check_receiver_with(const char *label, const char *fixture, int tp, int pp, int dp, bool ep,
                            int side_rank, const sl_loader *l, uint64_t v, bool rounded, rf_fetch fetch) {
  sl_ref_model *m = lc_model(fixture, NULL);
  sl_ref_layout rl = {.tp = tp, .pp = pp, .dp = dp, .rank = side_rank, .expert_parallel = ep};
  sl_ref_table *ref = NULL;
  char msg[512] = "";
  sl_status st = m != NULL ? sl_ref_table_build(m, &rl, &ref, msg, sizeof msg) : SL_STATUS_INTERNAL;
  CHECKF(st == SL_STATUS_OK, "%s: reference: %s", label, msg);
  size_t n = st == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  CHECKF(st != SL_STATUS_OK || n == ref->count, "%s: %zu parameters, the reference %zu", label, n,
         st == SL_STATUS_OK ? ref->count : 0);
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    CHECKF(e != NULL, "%s: %s is not in the reference", label, p->name);
    if (e != NULL && p->alias_of == NULL && p->nbytes > 0)
      check_param(label, m, p, e, v, rounded, fetch);
  }
  sl_ref_table_free(ref);
}

void rf_same_everywhere(const char *label, sl_status st) {
  int lo = (int)st, hi = (int)st;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECKF(lo == hi, "%s: the ranks returned different statuses (%d .. %d)", label, lo, hi);
}

double rf_json_number(const char *json, const char *key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *at = json != NULL ? strstr(json, pat) : NULL;
  return at != NULL ? strtod(at + strlen(pat), NULL) : -1;
}
