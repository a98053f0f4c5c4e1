/*
 * plan/refit_blocks.c — the blocks trainers publish (see plan/refit.h): a trainer's list, its wire
 * form and hash, the checks against the receivers' catalog, and each block as donor copies.
 */
#include "plan/refit.h"

#include "base/edit_distance.h"
#include "base/util.h"
#include "format/cast.h"

#include <stdlib.h>
#include <string.h>

#define BLOB_MAGIC 0x42524c53u /* "SLRB" */
#define NAME_MAX_BYTES 65536u

static bool dtype_ok(sl__dtype dt) {
  return (int)dt >= 0 && dt < SL_DT_COUNT;
}

/* "[a, b, c]" of n values into buf. */
static const char *dims_text(const uint64_t *v, uint32_t n, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (uint32_t d = 0; d < n && at < cap; d++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%llu", d > 0 ? ", " : "", (unsigned long long)v[d]);
  if (at < cap)
    snprintf(buf + at, cap - at, "]");
  return buf;
}

static sl_status check_block(const sl__refit_block *k, const char *who, sl__err *err) {
  char q[SL_QUOTE_BUF];
  if (!dtype_ok(k->dtype))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: tensor %s: unknown dtype %d", who,
                       sl__quote(k->name, q, sizeof q), (int)k->dtype);
  if (k->ndim > SL_CAT_MAX_DIMS)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: tensor %s: %u dimensions, at most %d", who,
                       sl__quote(k->name, q, sizeof q), k->ndim, SL_CAT_MAX_DIMS);
  for (uint32_t d = 0; k->shape_known && d < k->ndim; d++) {
    if (k->offsets[d] > k->shape[d] || k->extent[d] > k->shape[d] - k->offsets[d]) {
      char a[256], b[256], c[256];
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "%s: tensor %s: the block at offsets %s of extent %s lies outside the tensor's shape "
          "%s (dimension %u)",
          who, sl__quote(k->name, q, sizeof q), dims_text(k->offsets, k->ndim, a, sizeof a),
          dims_text(k->extent, k->ndim, b, sizeof b), dims_text(k->shape, k->ndim, c, sizeof c), d);
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__refit_blocks_add(sl__refit_blocks *b, const char *name, sl__dtype dtype, uint32_t ndim,
                               const uint64_t *shape, const uint64_t *offsets, const uint64_t *extent,
                               sl__err *err) {
  if (name == NULL || *name == '\0' || strlen(name) >= NAME_MAX_BYTES)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "a published block needs a tensor name (1 to %u bytes)", NAME_MAX_BYTES - 1);
  if (ndim > 0 && (offsets == NULL || extent == NULL))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "tensor %s: offsets and extent are needed", name);
  if (b->n >= SL_REFIT_MAX_BLOCKS)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "more than %u published blocks", SL_REFIT_MAX_BLOCKS);
  sl__refit_block k = {
      .dtype = dtype, .ndim = ndim, .tensor = SL_NONE, .shape_known = shape != NULL || ndim == 0};
  /* Too many dimensions: nothing is read from the caller's arrays (they need not hold ndim
   * entries then); check_block refuses it, naming the tensor. */
  for (uint32_t d = 0; ndim <= SL_CAT_MAX_DIMS && d < ndim; d++) {
    k.shape[d] = shape != NULL ? shape[d] : 0;
    k.offsets[d] = offsets[d];
    k.extent[d] = extent[d];
  }
  k.name = (char *)name;
  sl_status st = check_block(&k, "publishing", err);
  if (st != SL_STATUS_OK)
    return st;
  if (b->n == b->cap) {
    size_t cap = b->cap > 0 ? b->cap * 2 : 16;
    sl__refit_block *nb = realloc(b->b, cap * sizeof *nb);
    if (nb == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    b->b = nb;
    b->cap = cap;
  }
  k.name = sl__strdup(name);
  if (k.name == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  b->b[b->n++] = k;
  return SL_STATUS_OK;
}

void sl__refit_blocks_free(sl__refit_blocks *b) {
  if (b == NULL)
    return;
  for (size_t i = 0; i < b->n; i++)
    free(b->b[i].name);
  free(b->b);
  memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------------------------------------
 * Wire form and hash
 * ------------------------------------------------------------------------------------------- */

static void put32(sl__buf *o, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  sl__buf_append(o, x, 4);
}

static void put64(sl__buf *o, uint64_t v) {
  put32(o, (uint32_t)v);
  put32(o, (uint32_t)(v >> 32));
}

sl_status sl__refit_blocks_serialize(const sl__refit_blocks *b, uint8_t **blob, size_t *len, sl__err *err) {
  sl__buf o;
  sl__buf_init(&o, 0);
  put32(&o, BLOB_MAGIC);
  put32(&o, (uint32_t)b->n);
  for (size_t i = 0; i < b->n; i++) {
    const sl__refit_block *k = &b->b[i];
    size_t nl = strlen(k->name);
    put32(&o, (uint32_t)nl);
    sl__buf_append(&o, k->name, nl);
    put32(&o, (uint32_t)k->dtype);
    put32(&o, k->ndim);
    put32(&o, k->shape_known ? 1u : 0u);
    for (uint32_t d = 0; d < k->ndim; d++) {
      put64(&o, k->shape[d]);
      put64(&o, k->offsets[d]);
      put64(&o, k->extent[d]);
    }
  }
  if (o.failed) {
    sl__buf_free(&o);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  *len = o.len;
  *blob = (uint8_t *)sl__buf_take(&o);
  return SL_STATUS_OK;
}

typedef struct reader {
  const uint8_t *p;
  size_t left;
} reader;

static bool get32(reader *r, uint32_t *v) {
  if (r->left < 4)
    return false;
  *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
  r->p += 4;
  r->left -= 4;
  return true;
}

static bool get64(reader *r, uint64_t *v) {
  uint32_t lo = 0, hi = 0;
  if (!get32(r, &lo) || !get32(r, &hi))
    return false;
  *v = (uint64_t)hi << 32 | lo;
  return true;
}

static sl_status truncated(const char *who, sl__err *err) {
  return sl__err_set(err, SL_STATUS_INTERNAL, "%s: the published blocks' description is truncated or corrupt",
                     who);
}

/* One block of the blob into k (its name malloc'd). */
static sl_status parse_one(reader *r, const char *who, sl__refit_block *k, sl__err *err) {
  uint32_t nl = 0, dt = 0, nd = 0, flags = 0;
  if (!get32(r, &nl) || nl == 0 || nl >= NAME_MAX_BYTES || nl > r->left)
    return truncated(who, err);
  char *name = sl__strndup((const char *)r->p, nl);
  if (name == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  r->p += nl;
  r->left -= nl;
  *k = (sl__refit_block){.name = name, .tensor = SL_NONE};
  if (strlen(name) != nl || !get32(r, &dt) || !get32(r, &nd) || nd > SL_CAT_MAX_DIMS || !get32(r, &flags) ||
      flags > 1)
    return truncated(who, err);
  k->dtype = (sl__dtype)dt;
  k->ndim = nd;
  k->shape_known = flags == 1;
  for (uint32_t d = 0; d < nd; d++)
    if (!get64(r, &k->shape[d]) || !get64(r, &k->offsets[d]) || !get64(r, &k->extent[d]))
      return truncated(who, err);
  for (uint32_t d = 0; !k->shape_known && d < nd; d++)
    if (k->shape[d] != 0)
      return truncated(who, err); /* one form per block: what serializes back to the same bytes */
  return check_block(k, who, err);
}

sl_status sl__refit_blocks_parse(const uint8_t *blob, size_t len, const char *who, sl__refit_blocks *out,
                                 sl__err *err) {
  memset(out, 0, sizeof *out);
  reader r = {.p = blob, .left = len};
  uint32_t magic = 0, count = 0;
  if (!get32(&r, &magic) || magic != BLOB_MAGIC || !get32(&r, &count) || count > SL_REFIT_MAX_BLOCKS)
    return truncated(who, err);
  /* each block takes at least 17 bytes: bound the count by the blob before allocating */
  if (count > r.left / 17)
    return truncated(who, err);
  out->b = calloc((size_t)count + 1, sizeof *out->b);
  if (out->b == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  out->cap = (size_t)count + 1;
  sl_status st = SL_STATUS_OK;
  for (uint32_t i = 0; i < count && st == SL_STATUS_OK; i++) {
    st = parse_one(&r, who, &out->b[i], err);
    out->n = out->b[i].name != NULL ? i + 1 : i;
  }
  if (st == SL_STATUS_OK && r.left != 0)
    st = truncated(who, err);
  if (st != SL_STATUS_OK)
    sl__refit_blocks_free(out);
  return st;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

uint64_t sl__refit_blocks_hash(const sl__refit_blocks *b) {
  uint64_t h = fnv(1469598103934665603ull, &b->n, sizeof b->n);
  for (size_t i = 0; i < b->n; i++) {
    const sl__refit_block *k = &b->b[i];
    h = fnv(h, k->name, strlen(k->name) + 1); /* not the dtype: the plan does not depend on it */
    h = fnv(h, &k->ndim, sizeof k->ndim);
    h = fnv(h, &k->shape_known, sizeof k->shape_known);
    h = fnv(h, k->shape, k->ndim * sizeof *k->shape);
    h = fnv(h, k->offsets, k->ndim * sizeof *k->offsets);
    h = fnv(h, k->extent, k->ndim * sizeof *k->extent);
  }
  return h;
}

/* ---------------------------------------------------------------------------------------------
 * Checks against the receivers' catalog
 * ------------------------------------------------------------------------------------------- */

/* The catalog's name nearest to `name` (edit distance at most a third of its length), or NULL. */
static const char *nearest(const sl__catalog *cat, const char *name) {
  const char *best = NULL;
  size_t best_d = strlen(name) / 3 + 1;
  for (size_t t = 0; t < cat->n_tensors; t++) {
    size_t d = sl__edit_distance(name, cat->tensors[t].name);
    if (d < best_d) {
      best_d = d;
      best = cat->tensors[t].name;
    }
  }
  return best;
}

static sl_status against_catalog(const sl__catalog *cat, sl__refit_block *k, uint32_t rank, sl__err *err) {
  char q[SL_QUOTE_BUF], a[256], b[256];
  k->tensor = sl__catalog_find(cat, k->name);
  if (k->tensor == SL_NONE) {
    const char *near = nearest(cat, k->name);
    return sl__err_set(
        err, SL_STATUS_NOT_FOUND,
        "trainer rank %u publishes tensor %s, which the receivers' checkpoint does not hold%s%s%s", rank,
        sl__quote(k->name, q, sizeof q), near != NULL ? " (did you mean " : "", near != NULL ? near : "",
        near != NULL ? "?)" : "");
  }
  const sl__cat_tensor *t = &cat->tensors[k->tensor];
  if (!k->shape_known && t->ndim == k->ndim) { /* the catalog's shape, then the bounds */
    memcpy(k->shape, t->shape, k->ndim * sizeof *k->shape);
    k->shape_known = true;
    char who[64];
    snprintf(who, sizeof who, "trainer rank %u", rank);
    sl_status st = check_block(k, who, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  if (!k->shape_known)
    return sl__err_set(
        err, SL_STATUS_SHAPE,
        "tensor %s: trainer rank %u publishes a %u-dimensional block of it, the receivers' checkpoint "
        "holds %s",
        sl__quote(k->name, q, sizeof q), rank, k->ndim, dims_text(t->shape, t->ndim, b, sizeof b));
  if (t->ndim != k->ndim || memcmp(t->shape, k->shape, k->ndim * sizeof *k->shape) != 0)
    return sl__err_set(
        err, SL_STATUS_SHAPE,
        "tensor %s: trainer rank %u publishes it with shape %s, the receivers' checkpoint holds %s",
        sl__quote(k->name, q, sizeof q), rank, dims_text(k->shape, k->ndim, a, sizeof a),
        dims_text(t->shape, t->ndim, b, sizeof b));
  if (sl__dtype_bits(t->dtype) % 8 != 0)
    return sl__err_set(
        err, SL_STATUS_UNSUPPORTED,
        "tensor %s: the receivers' checkpoint holds it as %s (elements smaller than a byte), which "
        "cannot be published block by block",
        sl__quote(k->name, q, sizeof q), sl__dtype_name(t->dtype));
  if (k->dtype != t->dtype && !sl__cast_supported(k->dtype, t->dtype))
    return sl__err_set(
        err, SL_STATUS_SHAPE,
        "tensor %s: trainer rank %u publishes it as %s, the receivers' checkpoint holds %s: only "
        "F32, F16, BF16 and F64 convert into each other",
        sl__quote(k->name, q, sizeof q), rank, sl__dtype_name(k->dtype), sl__dtype_name(t->dtype));
  return SL_STATUS_OK;
}

/* A non-empty block of one tensor, and its trainer. */
typedef struct box {
  const sl__refit_block *k;
  uint32_t trainer;
} box;

static int cmp_box(const void *pa, const void *pb) {
  const box *a = pa;
  const box *b = pb;
  if (a->k->tensor != b->k->tensor)
    return a->k->tensor < b->k->tensor ? -1 : 1;
  uint64_t x = a->k->ndim > 0 ? a->k->offsets[0] : 0;
  uint64_t y = b->k->ndim > 0 ? b->k->offsets[0] : 0;
  if (x != y)
    return x < y ? -1 : 1;
  return a->trainer < b->trainer ? -1 : a->trainer > b->trainer ? 1 : 0;
}

static bool empty(const sl__refit_block *k) {
  for (uint32_t d = 0; d < k->ndim; d++)
    if (k->extent[d] == 0)
      return true;
  return false;
}

static bool same_box(const sl__refit_block *a, const sl__refit_block *b) {
  return memcmp(a->offsets, b->offsets, a->ndim * sizeof *a->offsets) == 0 &&
         memcmp(a->extent, b->extent, a->ndim * sizeof *a->extent) == 0;
}

static bool intersect(const sl__refit_block *a, const sl__refit_block *b) {
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->offsets[d] >= b->offsets[d] + b->extent[d] || b->offsets[d] >= a->offsets[d] + a->extent[d])
      return false;
  return true;
}

/* Blocks of one tensor that overlap without being the same block, in sorted boxes[0 .. n). */
static sl_status overlaps(const box *boxes, size_t n, const uint32_t *rank_of, sl__err *err) {
  for (size_t i = 0; i < n; i++) {
    const sl__refit_block *a = boxes[i].k;
    uint64_t end0 = a->ndim > 0 ? a->offsets[0] + a->extent[0] : 1;
    for (size_t j = i + 1; j < n && boxes[j].k->tensor == a->tensor; j++) {
      const sl__refit_block *b = boxes[j].k;
      if ((b->ndim > 0 ? b->offsets[0] : 0) >= end0)
        break;
      if (!intersect(a, b) || same_box(a, b))
        continue;
      char q[SL_QUOTE_BUF], o1[256], e1[256], o2[256], e2[256];
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "tensor %s: the blocks of trainer rank %u (offsets %s, extent %s) and trainer rank %u "
          "(offsets %s, extent %s) overlap: trainers must publish disjoint blocks, or the same "
          "block (replicas)",
          sl__quote(a->name, q, sizeof q), rank_of[boxes[i].trainer],
          dims_text(a->offsets, a->ndim, o1, sizeof o1), dims_text(a->extent, a->ndim, e1, sizeof e1),
          rank_of[boxes[j].trainer], dims_text(b->offsets, b->ndim, o2, sizeof o2),
          dims_text(b->extent, b->ndim, e2, sizeof e2));
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__refit_check(const sl__catalog *cat, sl__refit_blocks *trainers, uint32_t n,
                          const uint32_t *rank_of, sl__err *err) {
  size_t total = 0;
  for (uint32_t t = 0; t < n; t++) {
    for (size_t i = 0; i < trainers[t].n; i++) {
      sl_status st = against_catalog(cat, &trainers[t].b[i], rank_of[t], err);
      if (st != SL_STATUS_OK)
        return st;
    }
    total += trainers[t].n;
  }
  box *boxes = calloc(total + 1, sizeof *boxes);
  if (boxes == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory checking the published blocks");
  size_t m = 0;
  for (uint32_t t = 0; t < n; t++)
    for (size_t i = 0; i < trainers[t].n; i++)
      if (!empty(&trainers[t].b[i]))
        boxes[m++] = (box){.k = &trainers[t].b[i], .trainer = t};
  qsort(boxes, m, sizeof *boxes, cmp_box);
  sl_status st = overlaps(boxes, m, rank_of, err);
  free(boxes);
  return st;
}

sl_status sl__refit_check_dtypes(const sl__refit_blocks *b, const uint32_t *tensor_of, const sl__dtype *wire,
                                 bool device, sl__err *err) {
  for (size_t i = 0; i < b->n; i++) {
    const sl__refit_block *k = &b->b[i];
    sl__dtype w = wire[tensor_of[i]];
    char q[SL_QUOTE_BUF];
    if (k->dtype == w)
      continue;
    if (!sl__cast_supported(k->dtype, w))
      return sl__err_set(
          err, SL_STATUS_SHAPE,
          "tensor %s: published as %s, the receivers' checkpoint holds %s: only F32, F16, BF16 and "
          "F64 convert into each other",
          sl__quote(k->name, q, sizeof q), sl__dtype_name(k->dtype), sl__dtype_name(w));
    if (device)
      return sl__err_set(
          err, SL_STATUS_UNSUPPORTED,
          "tensor %s is published as %s from device memory, the receivers hold %s: convert it on the "
          "GPU before publishing (the library converts in host memory only)",
          sl__quote(k->name, q, sizeof q), sl__dtype_name(k->dtype), sl__dtype_name(w));
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Blocks as donor copies
 * ------------------------------------------------------------------------------------------- */

/* The copies of block k (index bi) at element size e, appended to v. */
static sl_status block_copies(const sl__refit_block *k, uint32_t bi, uint64_t e, sl__vec *v) {
  if (empty(k))
    return SL_STATUS_OK;
  uint32_t nd = k->ndim;
  uint64_t ss[SL_CAT_MAX_DIMS + 1], bs[SL_CAT_MAX_DIMS + 1]; /* element strides: tensor, block */
  ss[nd] = bs[nd] = 1;
  for (uint32_t d = nd; d-- > 0;) {
    ss[d] = ss[d + 1] * k->shape[d];
    bs[d] = bs[d + 1] * k->extent[d];
  }
  /* dims [kd, nd) are one run in both: every dimension after kd is whole */
  uint32_t kd = nd;
  while (kd > 0 && (kd == nd || k->extent[kd] == k->shape[kd]))
    kd--;
  uint64_t run = nd > 0 ? k->extent[kd] * ss[kd + 1] : 1;
  uint64_t rows = kd > 0 ? k->extent[kd - 1] : 1;
  /* every index of dims [0, kd - 1) is a copy of its own */
  uint32_t outer = kd > 0 ? kd - 1 : 0;
  uint64_t count = bs[0] / (outer < nd ? bs[outer] : 1);
  uint64_t idx[SL_CAT_MAX_DIMS] = {0};
  for (uint64_t c = 0; c < count; c++) {
    uint64_t src = 0, dst = 0;
    for (uint32_t d = 0; d < nd; d++) {
      uint64_t i = d < outer ? idx[d] : 0;
      src += (k->offsets[d] + i) * ss[d + 1];
      dst += i * bs[d + 1];
    }
    sl__copy *cp = sl__vec_push(v);
    if (cp == NULL)
      return SL_STATUS_NOMEM;
    *cp = (sl__copy){.lparam = bi,
                     .tensor = k->tensor,
                     .unit = SL_NONE,
                     .src_off = src * e,
                     .src_stride = (kd > 0 ? ss[kd] : run) * e,
                     .row_bytes = run * e,
                     .rows = rows,
                     .dst_off = dst * e,
                     .dst_stride = (kd > 0 ? bs[kd] : run) * e};
    for (uint32_t d = outer; d-- > 0;) { /* the next index, last dimension fastest */
      if (++idx[d] < k->extent[d])
        break;
      idx[d] = 0;
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__refit_copies(const sl__catalog *cat, const sl__refit_blocks *b, sl__copy **out, size_t *n,
                           sl__err *err) {
  sl__vec v;
  sl__vec_init(&v, sizeof(sl__copy));
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < b->n && st == SL_STATUS_OK; i++) {
    const sl__refit_block *k = &b->b[i];
    uint64_t e = k->tensor < cat->n_tensors ? sl__dtype_bits(cat->tensors[k->tensor].dtype) / 8 : 0;
    st = e > 0 ? block_copies(k, (uint32_t)i, e, &v)
               : sl__err_set(err, SL_STATUS_INTERNAL, "tensor %s: the block was not checked", k->name);
    if (st == SL_STATUS_NOMEM)
      sl__err_set(err, st, "out of memory planning the published blocks");
  }
  if (st != SL_STATUS_OK) {
    sl__vec_free(&v);
    return st;
  }
  *n = v.len;
  *out = v.data;
  if (*out == NULL)
    *out = calloc(1, sizeof(sl__copy));
  return *out != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}
