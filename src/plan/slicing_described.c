/*
 * plan/slicing_described.c — the plan of one rank of a load from caller-described plans
 * (model/described.h): its parameters as its plan lists them, and each region made copies.
 *
 * A region pairs the elements of two boxes in row-major order. Each box is first written as
 * levels (count, stride in elements), outermost first: dimensions of count 1 dropped, a level merged
 * into the one inside it where the array is contiguous across them; a box's innermost level of
 * stride 1 is its contiguous run. The common run of the two boxes is the gcd of their runs (a
 * break of either side falls on a multiple of it): each box is then levels over chunks of that
 * many elements, and consecutive chunks form one strided copy for as long as both sides step
 * evenly (the gcd of their innermost levels' counts); the outer levels give one copy per index.
 * Identical source slices of several ranks thus become equal copies, one piece with one reader
 * (plan/pieces.c), as a spec's styles make them: a copy contiguous on both sides is one row, a
 * single row has strides equal to its bytes (plan/slicing_copy.c's canonical form).
 *
 * Then every parameter's destination is checked: the rows of its copies and its zero boxes must
 * tile its bytes exactly (sorted intervals): two regions writing the same bytes, or bytes no region
 * writes (how many, the first one's index), is SL_STATUS_PLAN naming the ranks, the parameter, the
 * regions and their tensors. Sub-byte dtypes (F4, F6_*) need rows that start and end on bytes.
 */
#include "plan/plan.h"

#include "base/util.h"
#include "model/described.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs (destination intervals) one parameter may be cut into: what its check sorts. */
#define SL_PLAN_MAX_RUNS (1ull << 24)
/* Copies of one rank's plan. */
#define SL_PLAN_MAX_COPIES (1ull << 26)

typedef struct side {
  uint32_t n; /* levels, outermost first */
  uint64_t count[SL_MAX_DIMS + 1];
  uint64_t stride[SL_MAX_DIMS + 1]; /* elements */
  uint64_t base;                    /* the box's first element */
  uint64_t run;                     /* contiguous elements per innermost step */
} side;

/* A box of an array of `shape` (n dimensions, inside it: checked by the model build) as levels. */
static void box_side(const uint64_t *start, const uint64_t *count, const uint64_t *shape, uint32_t n,
                     side *s) {
  uint64_t stride[SL_MAX_DIMS];
  uint64_t st = 1;
  for (uint32_t j = n; j-- > 0;) {
    stride[j] = st;
    st *= shape[j];
  }
  memset(s, 0, sizeof *s);
  for (uint32_t j = 0; j < n; j++) {
    s->base += start[j] * stride[j];
    if (count[j] == 1)
      continue;
    if (s->n > 0 && s->stride[s->n - 1] == count[j] * stride[j]) { /* contiguous across: merge */
      s->count[s->n - 1] *= count[j];
      s->stride[s->n - 1] = stride[j];
      continue;
    }
    s->count[s->n] = count[j];
    s->stride[s->n] = stride[j];
    s->n++;
  }
  s->run = 1;
  if (s->n > 0 && s->stride[s->n - 1] == 1) {
    s->run = s->count[s->n - 1];
    s->n--;
  }
}

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Chunks of g elements (g divides s->run): the run's remainder becomes a level. */
static void chunked(side *s, uint64_t g) {
  if (s->run > g) {
    s->count[s->n] = s->run / g;
    s->stride[s->n] = g;
    s->n++;
  }
  s->run = g;
}

/* The first element of chunk m. */
static uint64_t chunk_at(const side *s, uint64_t m) {
  uint64_t off = s->base;
  for (uint32_t j = s->n; j-- > 0 && m > 0;) {
    off += m % s->count[j] * s->stride[j];
    m /= s->count[j];
  }
  return off;
}

/* Whether every chunk of s starts and ends on a byte (bits per element). */
static bool on_bytes(const side *s, uint64_t bits) {
  bool ok = s->base * bits % 8 == 0 && s->run * bits % 8 == 0;
  for (uint32_t j = 0; j < s->n; j++)
    ok = ok && s->stride[j] * bits % 8 == 0;
  return ok;
}

/* A destination interval of one parameter: planned bytes [a, b) written by region r. */
typedef struct run {
  uint64_t a, b;
  uint64_t region;
} run;

/* One rank's plan being made. */
typedef struct maker {
  const sl__described *d;
  const sl__catalog *cat;
  const sl__dplan *p;
  char who[96];
  sl__vec *copies;
  sl__vec runs; /* run: the current parameter's */
  uint64_t bytes_needed;
  sl__err *err;
} maker;

static sl_status region_error(maker *k, const sl__dregion *g, const char *what) {
  const sl__dparam *dp = &k->p->params[g->param];
  char q[SL_QUOTE_BUF], t[SL_QUOTE_BUF];
  uint64_t i = (uint64_t)(g - k->p->regions) - dp->first_region;
  return sl__err_set(k->err, SL_STATUS_PLAN, "described plan of %s: parameter %s: region %llu (%s%s): %s",
                     k->who, sl__quote(k->p->strings[dp->name], q, sizeof q), (unsigned long long)i,
                     g->tensor == SL_PLAN_ZEROS ? "zeros" : "tensor ",
                     g->tensor == SL_PLAN_ZEROS ? "" : sl__quote(k->p->strings[g->tensor], t, sizeof t),
                     what);
}

/* Adds destination intervals: count steps of `bytes` bytes from byte `at`, `stride` apart (merged
 * when they abut). */
static sl_status add_runs(maker *k, const sl__dregion *g, uint64_t at, uint64_t bytes, uint64_t stride,
                          uint64_t count) {
  if (stride == bytes) {
    bytes *= count;
    count = 1;
  }
  if (k->runs.len + count > SL_PLAN_MAX_RUNS)
    return region_error(k, g, "its parameter is cut into more than 2^24 pieces of rows: too fragmented");
  if (!sl__vec_reserve(&k->runs, k->runs.len + count))
    return sl__err_set(k->err, SL_STATUS_NOMEM, "out of memory checking a described plan");
  for (uint64_t r = 0; r < count; r++)
    SL_VEC_AT(&k->runs, run, k->runs.len++) =
        (run){.a = at + r * stride, .b = at + r * stride + bytes, .region = (uint64_t)(g - k->p->regions)};
  return SL_STATUS_OK;
}

/* The addressed shape of parameter dp (its last two dimensions swapped when held transposed). */
static void addressed(const sl__dparam *dp, uint64_t *shape) {
  memcpy(shape, dp->shape, sizeof dp->shape);
  if (dp->transposed && dp->ndim >= 2) {
    shape[dp->ndim - 2] = dp->shape[dp->ndim - 1];
    shape[dp->ndim - 1] = dp->shape[dp->ndim - 2];
  }
}

/* A region of parameter lparam made copies (and its destination intervals). */
static sl_status region_copies(maker *k, const sl__dregion *g, uint32_t lparam) {
  const sl__dparam *dp = &k->p->params[g->param];
  const uint64_t *n = sl__dregion_nums(k->p, g);
  uint64_t shape[SL_MAX_DIMS];
  addressed(dp, shape);
  uint64_t bits = sl__dtype_bits(dp->src_dtype);
  side src, dst;
  box_side(n + 2 * g->ndim, n + 2 * g->ndim + g->dst_ndim, shape, g->dst_ndim, &dst);
  if (g->tensor == SL_PLAN_ZEROS) {
    if (!on_bytes(&dst, bits))
      return region_error(k, g, "its rows do not start and end on whole bytes");
    uint64_t steps = 1;
    for (uint32_t j = 0; j < dst.n; j++)
      steps *= dst.count[j];
    if (dst.n <= 1)
      return add_runs(k, g, dst.base * bits / 8, dst.run * bits / 8,
                      dst.n == 1 ? dst.stride[0] * bits / 8 : 0, dst.n == 1 ? dst.count[0] : 1);
    sl_status st = SL_STATUS_OK;
    for (uint64_t m = 0; m < steps && st == SL_STATUS_OK; m++)
      st = add_runs(k, g, chunk_at(&dst, m) * bits / 8, dst.run * bits / 8, 0, 1);
    return st;
  }
  const sl__cat_tensor *t = &k->cat->tensors[g->cat];
  box_side(n, n + g->ndim, t->shape, g->ndim, &src);
  uint64_t cg = gcd(src.run, dst.run);
  chunked(&src, cg);
  chunked(&dst, cg);
  if (!on_bytes(&src, bits) || !on_bytes(&dst, bits))
    return region_error(k, g, "its rows do not start and end on whole bytes");
  uint64_t a = src.n > 0 ? src.count[src.n - 1] : 1;
  uint64_t b = dst.n > 0 ? dst.count[dst.n - 1] : 1;
  uint64_t rows = gcd(a, b);
  uint64_t total = 1;
  for (uint32_t j = 0; j < src.n; j++)
    total *= src.count[j];
  uint64_t ncopies = total / rows;
  if (k->copies->len + ncopies > SL_PLAN_MAX_COPIES)
    return region_error(k, g, "the rank's plan needs more than 2^26 copies: too fragmented");
  uint64_t row_bytes = cg * bits / 8;
  uint64_t sstride = rows > 1 ? src.stride[src.n - 1] * bits / 8 : row_bytes;
  uint64_t dstride = rows > 1 ? dst.stride[dst.n - 1] * bits / 8 : row_bytes;
  sl_status st = SL_STATUS_OK;
  for (uint64_t q = 0; q < ncopies && st == SL_STATUS_OK; q++) {
    sl__copy *c = sl__vec_push(k->copies);
    if (c == NULL)
      return sl__err_set(k->err, SL_STATUS_NOMEM, "out of memory planning a described plan");
    *c = (sl__copy){.lparam = lparam,
                    .tensor = g->cat,
                    .unit = k->d->unit_of[g->cat],
                    .src_off = chunk_at(&src, q * rows) * bits / 8,
                    .src_stride = sstride,
                    .row_bytes = row_bytes,
                    .rows = rows,
                    .dst_off = chunk_at(&dst, q * rows) * bits / 8,
                    .dst_stride = dstride,
                    .piece = SL_NONE};
    k->bytes_needed += rows * row_bytes;
    st = add_runs(k, g, c->dst_off, row_bytes, dstride, rows);
  }
  return st;
}

static int cmp_run(const void *x, const void *y) {
  const run *a = x, *b = y;
  return a->a < b->a ? -1 : a->a > b->a ? 1 : (a->region < b->region ? -1 : a->region > b->region);
}

/* Element e of the addressed shape as "[i, j, k]". */
static void coords(const sl__dparam *dp, uint64_t e, char *buf, size_t cap) {
  uint64_t shape[SL_MAX_DIMS], c[SL_MAX_DIMS];
  addressed(dp, shape);
  for (uint32_t j = dp->ndim; j-- > 0;) {
    c[j] = shape[j] > 0 ? e % shape[j] : 0;
    e = shape[j] > 0 ? e / shape[j] : 0;
  }
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (uint32_t j = 0; j < dp->ndim && n < cap; j++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%llu", j > 0 ? ", " : "", (unsigned long long)c[j]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
}

/* The runs of parameter dp (planned bytes `bytes`, elements of `bits`) tile it exactly. */
static sl_status check_tiling(maker *k, const sl__dparam *dp, uint64_t bytes, uint64_t bits) {
  run *r = k->runs.data;
  size_t n = k->runs.len;
  qsort(r, n, sizeof *r, cmp_run);
  uint64_t at = 0, gap = 0, first_gap = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    if (r[i].a < at) { /* overlaps the run before it that ends past r[i].a */
      size_t j = i;
      while (j-- > 0 && r[j].b <= r[i].a) {
      }
      char where[160];
      coords(dp, r[i].a * 8 / bits, where, sizeof where);
      const sl__dregion *g = &k->p->regions[r[i].region];
      const sl__dregion *h = &k->p->regions[r[j < n ? j : i].region];
      char q[SL_QUOTE_BUF], msg[SL_QUOTE_BUF + 256];
      snprintf(msg, sizeof msg, "writes element %s, which region %llu (%s%s) writes too", where,
               (unsigned long long)((uint64_t)(h - k->p->regions) - dp->first_region),
               h->tensor == SL_PLAN_ZEROS ? "zeros" : "tensor ",
               h->tensor == SL_PLAN_ZEROS ? "" : sl__quote(k->p->strings[h->tensor], q, sizeof q));
      return region_error(k, g, msg);
    }
    if (r[i].a > at) {
      gap += r[i].a - at;
      first_gap = first_gap == UINT64_MAX ? at : first_gap;
    }
    at = r[i].b;
  }
  if (at < bytes) {
    gap += bytes - at;
    first_gap = first_gap == UINT64_MAX ? at : first_gap;
  }
  if (gap == 0)
    return SL_STATUS_OK;
  char where[160], q[SL_QUOTE_BUF];
  coords(dp, first_gap * 8 / bits, where, sizeof where);
  return sl__err_set(
      k->err, SL_STATUS_PLAN,
      "described plan of %s: parameter %s: %llu of its %llu elements are written by no region, "
      "the first at %s%s (a parameter's regions write each of its elements once; "
      "sl_plan_add_zeros declares elements zero on purpose)",
      k->who, sl__quote(k->p->strings[dp->name], q, sizeof q), (unsigned long long)(gap * 8 / bits),
      (unsigned long long)(bytes * 8 / bits), where, dp->transposed ? " (addressed transposed)" : "");
}

/* Parameter k of the plan as local parameter li: its table entry, its copies, its check. */
static sl_status make_param(maker *k, uint32_t li, sl__lparam *lp, bool with_table) {
  const sl__dparam *dp = &k->p->params[li];
  uint64_t elems = 1;
  for (uint32_t j = 0; j < dp->ndim; j++)
    elems *= dp->shape[j]; /* bounded by the model build */
  uint64_t bits = sl__dtype_bits(dp->src_dtype);
  *lp = (sl__lparam){.mparam = dp->mparam,
                     .ndim = dp->ndim,
                     .nbytes = elems * sl__dtype_bits(dp->dtype) / 8,
                     .alias_of = SL_NONE,
                     .transposed = dp->transposed ? (uint32_t)(bits / 8) : 0};
  memcpy(lp->shape, dp->shape, sizeof lp->shape);
  if (elems * bits % 8 != 0)
    return sl__err_set(k->err, SL_STATUS_PLAN,
                       "described plan of %s: parameter %s: not a whole number of bytes as %s", k->who,
                       k->p->strings[dp->name], sl__dtype_name(dp->src_dtype));
  if (with_table) {
    const sl__dregion *g = dp->n_regions > 0 ? &k->p->regions[dp->first_region] : NULL;
    if (dp->fill == SL_FILL_FALLBACK && g != NULL)
      snprintf(lp->shard, sizeof lp->shard, "fallback: tensor %s whole", k->p->strings[g->tensor]);
    else
      snprintf(lp->shard, sizeof lp->shard, "recorded: %llu region%s%s", (unsigned long long)dp->n_regions,
               dp->n_regions == 1 ? "" : "s", dp->transposed ? ", last two dims transposed" : "");
  }
  k->runs.len = 0;
  sl_status st = SL_STATUS_OK;
  for (uint64_t i = dp->first_region; i < dp->first_region + dp->n_regions && st == SL_STATUS_OK; i++)
    st = region_copies(k, &k->p->regions[i], li);
  return st == SL_STATUS_OK ? check_tiling(k, dp, elems * bits / 8, bits) : st;
}

sl_status sl__plan_rank_described(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                                  uint32_t rank, bool with_table, sl__rank_plan *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  sl_status st = sl__rank_ctx_init(m, o, rank, &out->ctx, err);
  const sl__described *d = m->described;
  if (st == SL_STATUS_OK && rank >= d->world)
    st = sl__err_set(err, SL_STATUS_INTERNAL, "rank %u of a described load of %u ranks", rank, d->world);
  if (st != SL_STATUS_OK)
    return st;
  uint32_t c = d->class_of[rank];
  sl__vec copies;
  sl__vec_init(&copies, sizeof(sl__copy));
  maker k = {.d = d, .cat = cat, .p = &d->plans[c], .copies = &copies, .err = err};
  sl__vec_init(&k.runs, sizeof(run));
  sl__described_who(d, c, k.who, sizeof k.who);
  out->lparams = calloc((size_t)k.p->n_params + 1, sizeof *out->lparams);
  if (out->lparams == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning a described plan");
  for (uint32_t i = 0; i < k.p->n_params && st == SL_STATUS_OK; i++) {
    st = make_param(&k, i, &out->lparams[i], with_table);
    out->bytes_local += out->lparams[i].nbytes;
    out->n_lparams = i + 1;
  }
  sl__vec_free(&k.runs);
  out->copies = copies.data;
  out->n_copies = copies.len;
  out->bytes_needed = k.bytes_needed;
  if (st != SL_STATUS_OK) { /* freed here: plan/slicing.c calls this file, not the other way */
    free(out->lparams);
    free(out->copies);
    memset(out, 0, sizeof *out);
  }
  return st;
}
