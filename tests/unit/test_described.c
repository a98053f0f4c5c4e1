/*
 * test_described.c — caller-described plans without MPI (src/model/described*.c,
 * src/plan/slicing_described.c, docs/spec/DESIGN.md §12), on a hand-made catalog:
 *   - regions made copies, against an independent element-by-element expansion: 400 random
 *     boxes of random tensors (1-4 dimensions, BF16 and U8), each into a random box of a random
 *     parameter shape (a reshape: the destination box's dimensions are another factorization of
 *     the element count), the rest of the parameter declared zeros; the copies applied to labelled
 *     source bytes must put every source element where the row-major pairing says, write nothing
 *     else, and amount to the box's bytes;
 *   - sub-byte elements (F4): whole rows accepted, a column of single elements refused;
 *   - every validation rule refused with SL_STATUS_PLAN and a message naming the parameter, the
 *     region's tensor and what is wrong; the builder's own refusals;
 *   - the JSON form: a random plan written, read back and written again is the same text and the
 *     same canonical blob; defective documents refused naming the key.
 */
#include "check.h"

#include "api/prepare.h"
#include "model/described.h"
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(uint64_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return n > 0 ? rng % n : 0;
}

/* ---- a hand-made catalog ---- */

typedef struct fake_cat {
  sl__catalog cat;
  sl__cat_tensor t[8];
  char names[8][32];
} fake_cat;

static void cat_add(fake_cat *f, sl__dtype dt, uint32_t ndim, const uint64_t *shape) {
  size_t i = f->cat.n_tensors++;
  snprintf(f->names[i], sizeof f->names[i], "t%zu", i);
  uint64_t e = 1;
  for (uint32_t j = 0; j < ndim; j++)
    e *= shape[j];
  f->t[i] =
      (sl__cat_tensor){.name = f->names[i], .dtype = dt, .ndim = ndim, .nbytes = e * sl__dtype_bits(dt) / 8};
  memcpy(f->t[i].shape, shape, ndim * sizeof *shape);
  f->cat.tensors = f->t;
  sl__hashmap_set(&f->cat.by_name, f->names[i], strlen(f->names[i]), i);
}

static void cat_init(fake_cat *f) {
  memset(f, 0, sizeof *f);
  sl__hashmap_init(&f->cat.by_name, SL_HASHMAP_BORROW);
}

/* ---- world-size plans through the model and the planner ---- */

typedef struct planned {
  sl__model m;
  sl__rank_plan rp;
  sl__err err;
  sl_status st;
} planned;

/* Plans rank `rank` of `world` ranks describing plans[0 .. world). */
static void plan_of(const fake_cat *f, uint32_t world, const sl_plan *const *plans, uint32_t rank,
                    planned *out) {
  memset(out, 0, sizeof *out);
  sl__described *d = NULL;
  out->st = sl__described_from_plans(world, plans, &d, &out->err);
  if (out->st == SL_STATUS_OK)
    out->st = sl__described_model_build(d, &f->cat, 1, &out->m, &out->err);
  if (out->st != SL_STATUS_OK)
    return;
  uint32_t starts[2] = {0, out->m.n_layers};
  sl__plan_opts o = {.pp_starts = starts};
  sl__layout_init(&o.layout, 1, 1, world, world, NULL);
  out->st = sl__plan_rank(&out->m, &f->cat, &o, rank, true, &out->rp, &out->err);
}

static void planned_free(planned *p) {
  sl__rank_plan_free(&p->rp);
  sl__model_free(&p->m);
}

/* ---- boxes ---- */

static uint64_t elems(const uint64_t *c, uint32_t n) {
  uint64_t e = 1;
  for (uint32_t j = 0; j < n; j++)
    e *= c[j];
  return e;
}

/* Linear index (in shape) of the k-th element of box start/count, row-major. */
static uint64_t box_elem(const uint64_t *start, const uint64_t *count, const uint64_t *shape, uint32_t n,
                         uint64_t k) {
  uint64_t idx = 0, stride = 1;
  uint64_t at[SL_MAX_DIMS];
  for (uint32_t j = n; j-- > 0;) {
    at[j] = start[j] + k % count[j];
    k /= count[j];
  }
  for (uint32_t j = n; j-- > 0;) {
    idx += at[j] * stride;
    stride *= shape[j];
  }
  return idx;
}

/* The complement of box (start, count) in shape as zeros regions of parameter p (slabs per dimension). */
static void add_complement(sl_plan *plan, uint32_t p, const uint64_t *shape, const uint64_t *start,
                           const uint64_t *count, uint32_t n) {
  uint64_t s[SL_MAX_DIMS] = {0}, c[SL_MAX_DIMS];
  memcpy(c, shape, n * sizeof *c);
  for (uint32_t j = 0; j < n; j++) {
    if (start[j] > 0) {
      uint64_t cs = c[j];
      c[j] = start[j];
      s[j] = 0;
      CHECK(sl_plan_add_zeros(plan, p, n, s, c) == SL_STATUS_OK);
      c[j] = cs;
    }
    if (start[j] + count[j] < shape[j]) {
      uint64_t cs = c[j];
      s[j] = start[j] + count[j];
      c[j] = shape[j] - s[j];
      CHECK(sl_plan_add_zeros(plan, p, n, s, c) == SL_STATUS_OK);
      c[j] = cs;
    }
    s[j] = start[j];
    c[j] = count[j];
  }
}

/* A random factorization of e into n counts (n >= 1). */
static void factor(uint64_t e, uint32_t n, uint64_t *out) {
  for (uint32_t j = 0; j + 1 < n; j++) {
    uint64_t divs[64];
    int nd = 0;
    for (uint64_t d = 1; d <= e && nd < 64; d++)
      if (e % d == 0)
        divs[nd++] = d;
    out[j] = divs[rnd((uint64_t)nd)];
    e /= out[j];
  }
  out[n - 1] = e;
}

/* One random region into one random parameter, checked element by element. */
static void random_case(int trial) {
  fake_cat f;
  cat_init(&f);
  sl__dtype dt = trial % 3 == 0 ? SL_DT_U8 : SL_DT_BF16;
  uint32_t eb = sl__dtype_bits(dt) / 8;
  uint32_t tn = 1 + (uint32_t)rnd(4);
  uint64_t tshape[SL_MAX_DIMS], start[SL_MAX_DIMS], count[SL_MAX_DIMS];
  for (uint32_t j = 0; j < tn; j++) {
    tshape[j] = 1 + rnd(7);
    count[j] = 1 + rnd(tshape[j]);
    start[j] = rnd(tshape[j] - count[j] + 1);
  }
  cat_add(&f, dt, tn, tshape);
  uint64_t n = elems(count, tn);
  uint32_t pn = 1 + (uint32_t)rnd(4);
  uint64_t dcount[SL_MAX_DIMS], dstart[SL_MAX_DIMS], pshape[SL_MAX_DIMS];
  factor(n, pn, dcount);
  for (uint32_t j = 0; j < pn; j++) {
    pshape[j] = dcount[j] + rnd(3);
    dstart[j] = rnd(pshape[j] - dcount[j] + 1);
  }
  sl_plan *plan = NULL;
  sl_plan_create(&plan);
  uint32_t p = 0;
  CHECK(sl_plan_add_param(plan, "p", (sl_dtype)dt, pn, pshape, 0, SL_FILL_RECORDED, &p) == SL_STATUS_OK);
  CHECKF(sl_plan_add_region(plan, p, "t0", tn, start, count, pn, dstart, dcount) == SL_STATUS_OK, "%s",
         sl_plan_error(plan));
  add_complement(plan, p, pshape, dstart, dcount, pn);
  planned pl;
  const sl_plan *plans[1] = {plan};
  plan_of(&f, 1, plans, 0, &pl);
  CHECKF(pl.st == SL_STATUS_OK, "trial %d: %s", trial, pl.err.msg);
  uint64_t tbytes = f.t[0].nbytes, pbytes = elems(pshape, pn) * eb;
  uint8_t *src = malloc(tbytes), *got = malloc(pbytes), *want = malloc(pbytes);
  for (uint64_t b = 0; b < tbytes; b++)
    src[b] = (uint8_t)(b * 131 + (b >> 8) * 7 + 1);
  memset(got, 0xEE, pbytes);
  memset(want, 0xEE, pbytes);
  for (uint64_t k = 0; k < n; k++)
    memcpy(want + box_elem(dstart, dcount, pshape, pn, k) * eb,
           src + box_elem(start, count, tshape, tn, k) * eb, eb);
  uint64_t moved = 0;
  for (size_t c = 0; pl.st == SL_STATUS_OK && c < pl.rp.n_copies; c++) {
    const sl__copy *cp = &pl.rp.copies[c];
    CHECK(cp->tensor == 0 && cp->lparam == 0 && cp->row_bytes > 0);
    for (uint64_t r = 0; r < cp->rows; r++) {
      CHECK(cp->src_off + r * cp->src_stride + cp->row_bytes <= tbytes);
      CHECK(cp->dst_off + r * cp->dst_stride + cp->row_bytes <= pbytes);
      memcpy(got + cp->dst_off + r * cp->dst_stride, src + cp->src_off + r * cp->src_stride, cp->row_bytes);
      moved += cp->row_bytes;
    }
    CHECK(cp->rows > 1 || (cp->src_stride == cp->row_bytes && cp->dst_stride == cp->row_bytes));
  }
  CHECKF(pl.st != SL_STATUS_OK || memcmp(got, want, pbytes) == 0,
         "trial %d: copies differ from the expansion", trial);
  CHECK_EQ_U64(pl.st == SL_STATUS_OK ? moved : n * eb, n * eb);
  CHECK(pl.st != SL_STATUS_OK || (pl.rp.n_lparams == 1 && pl.rp.lparams[0].nbytes == pbytes));
  free(src);
  free(got);
  free(want);
  planned_free(&pl);
  sl_plan_destroy(plan);
}

/* F4 (4 bits): rows of whole bytes pass, a column of single elements does not. */
static void sub_byte(void) {
  fake_cat f;
  cat_init(&f);
  cat_add(&f, SL_DT_F4, 2, (uint64_t[]){4, 6});
  for (int k = 0; k < 2; k++) {
    sl_plan *plan = NULL;
    sl_plan_create(&plan);
    uint64_t cols = k == 0 ? 6 : 1;
    uint32_t p = 0;
    sl_plan_add_param(plan, "p", SL_DTYPE_F4, 2, (uint64_t[]){4, cols}, 0, SL_FILL_RECORDED, &p);
    sl_plan_add_region(plan, p, "t0", 2, (uint64_t[]){0, 0}, (uint64_t[]){4, cols}, 2, (uint64_t[]){0, 0},
                       (uint64_t[]){4, cols});
    planned pl;
    const sl_plan *plans[1] = {plan};
    plan_of(&f, 1, plans, 0, &pl);
    if (k == 0) {
      CHECKF(pl.st == SL_STATUS_OK, "%s", pl.err.msg);
      CHECK(pl.rp.n_copies == 1 && pl.rp.copies[0].row_bytes == 12);
    } else {
      CHECK(pl.st == SL_STATUS_PLAN);
      CHECK_CONTAINS(pl.err.msg, "whole bytes");
      CHECK_CONTAINS(pl.err.msg, "t0");
    }
    planned_free(&pl);
    sl_plan_destroy(plan);
  }
}

/* One defective plan: refused at plan time with SL_STATUS_PLAN and every text in want. */
typedef void (*build_fn)(sl_plan *p);

static void expect_refused(const char *what, build_fn build, const char *const *want) {
  fake_cat f;
  cat_init(&f);
  cat_add(&f, SL_DT_BF16, 2, (uint64_t[]){4, 8}); /* t0 */
  cat_add(&f, SL_DT_F32, 1, (uint64_t[]){8});     /* t1 */
  cat_add(&f, SL_DT_I32, 1, (uint64_t[]){8});     /* t2 */
  sl_plan *plan = NULL;
  sl_plan_create(&plan);
  build(plan);
  planned pl;
  const sl_plan *plans[2] = {plan, plan};
  plan_of(&f, 1, plans, 0, &pl);
  CHECKF(pl.st == SL_STATUS_PLAN, "%s: status %d: %s", what, pl.st, pl.err.msg);
  for (const char *const *w = want; *w != NULL; w++)
    CHECKF(strstr(pl.err.msg, *w) != NULL, "%s: \"%s\" lacks \"%s\"", what, pl.err.msg, *w);
  planned_free(&pl);
  sl_plan_destroy(plan);
}

#define Z2 ((uint64_t[]){0, 0})
#define BOX(a, b) ((uint64_t[]){a, b})

static uint32_t param2(sl_plan *p, const char *name, uint64_t r, uint64_t c) {
  uint32_t i = 0;
  sl_plan_add_param(p, name, SL_DTYPE_BF16, 2, BOX(r, c), 0, SL_FILL_RECORDED, &i);
  return i;
}

static void b_unknown(sl_plan *p) {
  sl_plan_add_region(p, param2(p, "w", 4, 8), "nope", 2, Z2, BOX(4, 8), 2, Z2, BOX(4, 8));
}
static void b_outside(sl_plan *p) {
  sl_plan_add_region(p, param2(p, "w", 4, 8), "t0", 2, BOX(1, 0), BOX(4, 8), 2, Z2, BOX(4, 8));
}
static void b_counts(sl_plan *p) {
  sl_plan_add_region(p, param2(p, "w", 4, 8), "t0", 2, Z2, BOX(2, 8), 2, Z2, BOX(4, 8));
}
static void b_dst_outside(sl_plan *p) {
  sl_plan_add_region(p, param2(p, "w", 4, 8), "t0", 2, Z2, BOX(4, 8), 2, BOX(0, 1), BOX(4, 8));
}
static void b_overlap(sl_plan *p) {
  uint32_t w = param2(p, "w", 4, 8);
  sl_plan_add_region(p, w, "t0", 2, Z2, BOX(3, 8), 2, Z2, BOX(3, 8));
  sl_plan_add_region(p, w, "t0", 2, BOX(2, 0), BOX(2, 8), 2, BOX(2, 0), BOX(2, 8));
}
static void b_uncovered(sl_plan *p) {
  uint32_t w = param2(p, "w", 4, 8);
  sl_plan_add_region(p, w, "t0", 2, Z2, BOX(1, 8), 2, Z2, BOX(1, 8));
  sl_plan_add_region(p, w, "t0", 2, BOX(3, 0), BOX(1, 4), 2, BOX(3, 0), BOX(1, 4));
}
static void b_cast(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "n", SL_DTYPE_BF16, 1, (uint64_t[]){8}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "t2", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){0}, (uint64_t[]){8});
}
static void b_mixed(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "n", SL_DTYPE_F32, 1, (uint64_t[]){16}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "t1", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){0}, (uint64_t[]){8});
  sl_plan_add_region(p, i, "t0", 2, Z2, BOX(1, 8), 1, (uint64_t[]){8}, (uint64_t[]){8});
}
static void b_transposed_1d(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "n", SL_DTYPE_F32, 1, (uint64_t[]){8}, 1, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "t1", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){0}, (uint64_t[]){8});
}
static void b_transposed_f4(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "n", SL_DTYPE_F4, 2, BOX(4, 8), 1, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "t0", 2, Z2, BOX(4, 8), 2, Z2, BOX(8, 4));
}
static void b_no_region(sl_plan *p) {
  uint32_t w = param2(p, "w", 4, 8);
  sl_plan_add_zeros(p, w, 2, Z2, BOX(4, 8));
}
static void b_fallback(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "w", SL_DTYPE_BF16, 2, BOX(2, 8), 0, SL_FILL_FALLBACK, &i);
  sl_plan_add_region(p, i, "t0", 2, Z2, BOX(2, 8), 2, Z2, BOX(2, 8));
}

static void validation(void) {
  expect_refused("unknown tensor", b_unknown,
                 (const char *const[]){"parameter w", "nope", "no such tensor", NULL});
  expect_refused(
      "outside", b_outside,
      (const char *const[]){"parameter w", "tensor t0", "outside the tensor", "dimension 0", NULL});
  expect_refused("counts", b_counts, (const char *const[]){"t0", "16 elements", "32", NULL});
  expect_refused("dst outside", b_dst_outside, (const char *const[]){"t0", "outside the parameter", NULL});
  expect_refused(
      "overlap", b_overlap,
      (const char *const[]){"parameter w", "region 1 (tensor t0)", "element [2, 0]", "region 0", NULL});
  expect_refused("uncovered", b_uncovered,
                 (const char *const[]){"parameter w", "20 of its 32 elements", "the first at [1, 0]", NULL});
  expect_refused("cast", b_cast, (const char *const[]){"parameter n", "t2", "I32", "no conversion", NULL});
  expect_refused("mixed", b_mixed,
                 (const char *const[]){"parameter n", "tensor t0", "share one dtype", NULL});
  expect_refused("transposed 1-D", b_transposed_1d, (const char *const[]){"parameter n", "2 or more", NULL});
  expect_refused("transposed F4", b_transposed_f4, (const char *const[]){"parameter n", "whole-byte", NULL});
  expect_refused("no region", b_no_region, (const char *const[]){"parameter w", "no region reads", NULL});
  expect_refused("fallback", b_fallback,
                 (const char *const[]){"parameter w", "whole checkpoint tensor", NULL});
  /* the builder's own refusals */
  sl_plan *p = NULL;
  sl_plan_create(&p);
  param2(p, "w", 4, 8);
  CHECK(sl_plan_add_param(p, "w", SL_DTYPE_BF16, 1, (uint64_t[]){2}, 0, SL_FILL_RECORDED, NULL) ==
        SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(sl_plan_error(p), "described twice");
  CHECK(sl_plan_add_param(p, "x", SL_DTYPE_BF16, 9, BOX(1, 1), 0, SL_FILL_RECORDED, NULL) ==
        SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_plan_add_param(p, "x", SL_DTYPE_BF16, 1, BOX(1, 1), 0, SL_FILL_SPEC, NULL) ==
        SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_plan_add_region(p, 7, "t0", 2, Z2, BOX(4, 8), 2, Z2, BOX(4, 8)) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(sl_plan_error(p), "no parameter 7");
  uint32_t ix[2] = {0, 0}, tx[2] = {0, 5}, nd[2] = {2, 2};
  uint64_t num[16] = {0, 0, 1, 8, 0, 0, 1, 8, 1, 0, 3, 8, 1, 0, 3, 8};
  const char *names[1] = {"t0"};
  CHECK(sl_plan_add_regions(p, 2, ix, tx, names, 1, nd, nd, num, 16) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_EQ_U64(sl_plan_region_count(p), 0); /* all or nothing */
  tx[1] = 0;
  CHECK(sl_plan_add_regions(p, 2, ix, tx, names, 1, nd, nd, num, 16) == SL_STATUS_OK);
  CHECK_EQ_U64(sl_plan_region_count(p), 2);
  const char *pn[3] = {"a", "b", "a"};
  sl_dtype dts[3] = {SL_DTYPE_BF16, SL_DTYPE_F32, SL_DTYPE_BF16};
  uint32_t pd[3] = {1, 2, 1};
  uint64_t sh[4] = {2, 3, 4, 5};
  size_t before = sl_plan_param_count(p);
  CHECK(sl_plan_add_params(p, 3, pn, dts, pd, sh, 4, NULL, NULL) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(sl_plan_error(p), "described twice");
  CHECK_EQ_U64(sl_plan_param_count(p), before); /* all or nothing */
  pn[2] = "c";
  CHECK(sl_plan_add_params(p, 3, pn, dts, pd, sh, 3, NULL, NULL) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(sl_plan_error(p), "3 of 3 sizes used");
  CHECK(sl_plan_add_params(p, 3, pn, dts, pd, sh, 4, NULL, NULL) == SL_STATUS_OK);
  CHECK_EQ_U64(sl_plan_param_count(p), before + 3);
  sl_plan_destroy(p);
}

/* Ranks describing one name differently. */
static void across_ranks(void) {
  fake_cat f;
  cat_init(&f);
  cat_add(&f, SL_DT_BF16, 1, (uint64_t[]){8});
  sl_plan *a = NULL, *b = NULL;
  sl_plan_create(&a);
  sl_plan_create(&b);
  uint32_t i = 0;
  sl_plan_add_param(a, "n", SL_DTYPE_BF16, 1, (uint64_t[]){8}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(a, i, "t0", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){0}, (uint64_t[]){8});
  sl_plan_add_param(b, "n", SL_DTYPE_F32, 1, (uint64_t[]){8}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(b, i, "t0", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){0}, (uint64_t[]){8});
  const sl_plan *plans[3] = {a, a, b};
  planned pl;
  plan_of(&f, 3, plans, 2, &pl);
  CHECK(pl.st == SL_STATUS_PLAN);
  CHECK_CONTAINS(pl.err.msg, "rank 2");
  CHECK_CONTAINS(pl.err.msg, "parameter n");
  CHECK_CONTAINS(pl.err.msg, "held in F32");
  planned_free(&pl);
  /* equal plans share a class; a tensor no rank reads is skipped when some rank skips it, else
   * unexpected (its fate none) */
  cat_add(&f, SL_DT_BF16, 1, (uint64_t[]){8});
  cat_add(&f, SL_DT_BF16, 1, (uint64_t[]){8});
  sl_plan *c = NULL;
  sl_plan_create(&c);
  sl_plan_skip(c, "t1");
  sl_plan_skip(c, "not.in.the.checkpoint");
  const sl_plan *mixed[3] = {a, c, a};
  plan_of(&f, 3, mixed, 1, &pl);
  CHECKF(pl.st == SL_STATUS_OK, "%s", pl.err.msg);
  CHECK(pl.st != SL_STATUS_OK || (pl.m.described->n_classes == 2 && pl.m.described->class_of[2] == 0));
  CHECK(pl.st != SL_STATUS_OK || (pl.m.n_units == 1 && strcmp(pl.m.units[0], "t0") == 0));
  CHECK(pl.st != SL_STATUS_OK ||
        (pl.m.tensor_fate[0] == SL_FATE_CONSUMED && pl.m.tensor_fate[1] == SL_FATE_SKIPPED &&
         pl.m.tensor_fate[2] == SL_FATE_NONE));
  CHECK(pl.st != SL_STATUS_OK || pl.rp.n_lparams == 0);
  planned_free(&pl);
  sl_plan_destroy(c);
  sl_plan_destroy(a);
  sl_plan_destroy(b);
}

/* A random plan: parameters, regions, zeros and skips in random order. */
static sl_plan *random_plan(void) {
  sl_plan *p = NULL;
  sl_plan_create(&p);
  uint32_t np = 1 + (uint32_t)rnd(6);
  for (uint32_t i = 0; i < np; i++) {
    char name[32];
    snprintf(name, sizeof name, "layers.%u.w\"\\x", i);
    uint64_t shape[SL_MAX_DIMS];
    uint32_t nd = (uint32_t)rnd(5);
    for (uint32_t j = 0; j < nd; j++)
      shape[j] = rnd(100000);
    CHECK(sl_plan_add_param(p, name, (sl_dtype)rnd(SL_DTYPE_COUNT), nd, shape, (int)rnd(2),
                            rnd(2) ? SL_FILL_RECORDED : SL_FILL_FALLBACK, NULL) == SL_STATUS_OK);
  }
  for (uint32_t k = 0; k < 20; k++) {
    uint64_t n[4 * SL_MAX_DIMS];
    for (int j = 0; j < 4 * SL_MAX_DIMS; j++)
      n[j] = rnd(1ull << 40);
    uint32_t a = (uint32_t)rnd(4), b = (uint32_t)rnd(4);
    char t[32];
    snprintf(t, sizeof t, "t%u", (uint32_t)rnd(5));
    if (rnd(4) == 0)
      CHECK(sl_plan_add_zeros(p, (uint32_t)rnd(np), b, n, n + b) == SL_STATUS_OK);
    else
      CHECK(sl_plan_add_region(p, (uint32_t)rnd(np), t, a, n, n + a, b, n + 2 * a, n + 2 * a + b) ==
            SL_STATUS_OK);
    if (rnd(5) == 0)
      CHECK(sl_plan_skip(p, t) == SL_STATUS_OK);
  }
  return p;
}

static void json_round_trip(void) {
  for (int trial = 0; trial < 50; trial++) {
    sl_plan *p = random_plan();
    char *text = sl_plan_to_json(p);
    sl_plan *q = NULL;
    char *error = NULL;
    CHECKF(text != NULL && sl_plan_from_json(text, strlen(text), &q, &error) == SL_STATUS_OK, "%s",
           error != NULL ? error : "no text");
    char *again = q != NULL ? sl_plan_to_json(q) : NULL;
    CHECK(again != NULL && text != NULL && strcmp(again, text) == 0);
    uint8_t *b1 = NULL, *b2 = NULL;
    size_t l1 = 0, l2 = 0;
    sl__err err;
    CHECK(sl__plan_serialize(p, &b1, &l1, &err) == SL_STATUS_OK);
    CHECK(q != NULL && sl__plan_serialize(q, &b2, &l2, &err) == SL_STATUS_OK);
    CHECK(l1 == l2 && b1 != NULL && b2 != NULL && memcmp(b1, b2, l1) == 0);
    sl__dplan d;
    CHECK(sl__dplan_parse(b1, l1, "the blob", &d, &err) == SL_STATUS_OK);
    CHECK(d.n_params == sl_plan_param_count(p) && d.n_regions == sl_plan_region_count(p));
    sl__dplan_free(&d);
    for (size_t cut = 0; cut < l1; cut += 1 + l1 / 50) /* every truncation is a clear refusal */
      CHECK(sl__dplan_parse(b1, cut, "a cut blob", &d, &err) == SL_STATUS_PLAN);
    free(b1);
    free(b2);
    free(text);
    free(again);
    free(error);
    sl_plan_destroy(p);
    sl_plan_destroy(q);
  }
  static const char *const bad[][2] = {
      {"[]", "expected an object"},
      {"{\"params\": [], \"skipped\": []}", "unknown key 'skipped'"},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF17\", \"shape\": [1]}]}", "\"dtype\""},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [-1]}]}", "params[0].shape"},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [1.5]}]}", "non-negative integers"},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [1], \"fill\": \"spec\"}]}",
       "\"fill\""},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [2], \"regions\": [{\"tensor\": "
       "\"t\", "
       "\"zeros\": true, \"dst_start\": [0], \"dst_count\": [2]}]}]}",
       "either"},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [2], \"regions\": [{\"tensor\": "
       "\"t\", "
       "\"start\": [0], \"count\": [2, 1], \"dst_start\": [0], \"dst_count\": [2]}]}]}",
       "one entry per dimension"},
      {"{\"params\": [{\"name\": \"a\", \"dtype\": \"BF16\", \"shape\": [1]}, {\"name\": \"a\", \"dtype\": "
       "\"BF16\", \"shape\": [1]}]}",
       "described twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl_plan *q = NULL;
    char *error = NULL;
    CHECKF(sl_plan_from_json(bad[i][0], strlen(bad[i][0]), &q, &error) == SL_STATUS_PLAN && q == NULL,
           "bad JSON %zu accepted", i);
    CHECKF(error != NULL && strstr(error, bad[i][1]) != NULL, "bad JSON %zu: \"%s\" lacks \"%s\"", i,
           error != NULL ? error : "", bad[i][1]);
    free(error);
  }
}

int main(void) {
  for (int trial = 0; trial < 400; trial++)
    random_case(trial);
  sub_byte();
  validation();
  across_ranks();
  json_round_trip();
  return sl_test_finish();
}
