/*
 * test_refit_plan.c — the pure part of weight sync (src/plan/refit_blocks.c, refit_describe.c,
 * peer_subset.c; docs/spec/DESIGN.md §13) against independent computations:
 *
 *   copies     400 random blocks of random tensors (1-4 dimensions, elements of 1, 2 or 4 bytes):
 *              sl__refit_copies applied byte by byte must put each byte of the block's memory
 *              (its row-major elements) exactly once, taken from the tensor byte that element's
 *              global index says, and nothing else; empty blocks give no copy, scalars one
 *   checks     a name the catalog lacks (the nearest name suggested), another shape, a dtype that
 *              does not convert (I32 for BF16), sub-byte catalog elements, blocks that overlap
 *              partially (named by trainer): refused; F32 for BF16, identical blocks (replicas),
 *              adjacent and empty blocks: accepted; a block outside its shape refused when added
 *   wire       blocks serialized and parsed back equal, every truncation refused
 *   plan       trainers' blocks as donors of a load from peers: every receiver byte labelled with
 *              its own checkpoint byte, written once (byte-by-byte simulation), messages cut at
 *              whole elements (4-byte elements, 6-byte messages); a byte no trainer publishes
 *              refused naming the trainer side and the element
 *   subset     random subsets of a plan's parts: the kept parts, in order, tiling their messages,
 *              the groups renumbered to the same members, sent and received recounted
 *   describe   fsdp:3 cuts every tensor as torch.chunk does (uneven and empty last blocks),
 *              fsdp:2x2 replicas, JSON blocks; malformed descriptions refused
 */
#include "check.h"
#include "model/catalog.h"
#include "plan/refit.h"

#include <stdlib.h>
#include <string.h>

/* ---- a small catalog ---------------------------------------------------------------------- */

typedef struct tdef {
  const char *name;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[4];
} tdef;

static void cat_make(sl__catalog *cat, const tdef *defs, size_t n) {
  memset(cat, 0, sizeof *cat);
  cat->tensors = calloc(n, sizeof *cat->tensors);
  cat->n_tensors = n;
  sl__hashmap_init(&cat->by_name, SL_HASHMAP_BORROW);
  for (size_t i = 0; i < n; i++) {
    sl__cat_tensor *t = &cat->tensors[i];
    t->name = (char *)defs[i].name;
    t->dtype = defs[i].dtype;
    t->ndim = defs[i].ndim;
    memcpy(t->shape, defs[i].shape, sizeof defs[i].shape);
    CHECK(sl__hashmap_put(&cat->by_name, t->name, strlen(t->name), i, NULL, NULL));
  }
}

static void cat_drop(sl__catalog *cat) {
  sl__hashmap_free(&cat->by_name);
  free(cat->tensors);
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(uint64_t n) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return n > 0 ? rnd_state % n : 0;
}

/* ---- copies against an element-by-element expansion --------------------------------------- */

static void one_random_block(int k) {
  static const sl__dtype dts[3] = {SL_DT_U8, SL_DT_BF16, SL_DT_F32};
  tdef d = {.name = "t", .dtype = dts[rnd(3)], .ndim = (uint32_t)(1 + rnd(4))};
  uint64_t off[4], ext[4], total = 1, count = 1;
  for (uint32_t i = 0; i < d.ndim; i++) {
    d.shape[i] = 1 + rnd(6);
    off[i] = rnd(d.shape[i]);
    ext[i] = rnd(4) == 0 ? d.shape[i] - off[i] : rnd(d.shape[i] - off[i] + 1); /* some whole, some empty */
    if (rnd(3) == 0) {
      off[i] = 0;
      ext[i] = d.shape[i];
    }
    total *= d.shape[i];
    count *= ext[i];
  }
  sl__catalog cat;
  cat_make(&cat, &d, 1);
  sl__refit_blocks b = {0};
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__refit_blocks_add(&b, "t", d.dtype, d.ndim, d.shape, off, ext, &err) == SL_STATUS_OK);
  uint32_t r0 = 0;
  CHECK(sl__refit_check(&cat, &b, 1, &r0, &err) == SL_STATUS_OK);
  sl__copy *c = NULL;
  size_t nc = 0;
  CHECK(sl__refit_copies(&cat, &b, &c, &nc, &err) == SL_STATUS_OK);
  uint64_t e = sl__dtype_bits(d.dtype) / 8;
  /* where each block byte must come from: element j's global index */
  uint64_t *want = calloc(count * e + 1, sizeof *want);
  int *hits = calloc(count * e + 1, sizeof *hits);
  uint64_t idx[4] = {0};
  for (uint64_t j = 0; j < count; j++) {
    uint64_t g = 0;
    for (uint32_t i = 0; i < d.ndim; i++)
      g = g * d.shape[i] + off[i] + idx[i];
    for (uint64_t x = 0; x < e; x++)
      want[j * e + x] = g * e + x;
    for (uint32_t i = d.ndim; i-- > 0;) {
      if (++idx[i] < ext[i])
        break;
      idx[i] = 0;
    }
  }
  bool ok = true;
  for (size_t i = 0; i < nc && c != NULL; i++)
    for (uint64_t r = 0; r < c[i].rows; r++)
      for (uint64_t x = 0; x < c[i].row_bytes; x++) {
        uint64_t dst = c[i].dst_off + r * c[i].dst_stride + x, src = c[i].src_off + r * c[i].src_stride + x;
        ok = ok && dst < count * e && src < total * e && want[dst] == src && c[i].tensor == 0 &&
             c[i].lparam == 0;
        if (dst < count * e)
          hits[dst]++;
      }
  for (uint64_t x = 0; x < count * e; x++)
    ok = ok && hits[x] == 1;
  CHECKF(ok && (count > 0 || nc == 0), "random block %d: %u dims, copies do not tile the block", k, d.ndim);
  free(want);
  free(hits);
  free(c);
  sl__refit_blocks_free(&b);
  cat_drop(&cat);
}

static void scalar_block(void) {
  tdef d = {.name = "s", .dtype = SL_DT_F32, .ndim = 0};
  sl__catalog cat;
  cat_make(&cat, &d, 1);
  sl__refit_blocks b = {0};
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__refit_blocks_add(&b, "s", SL_DT_F32, 0, NULL, NULL, NULL, &err) == SL_STATUS_OK);
  uint32_t r0 = 0;
  CHECK(sl__refit_check(&cat, &b, 1, &r0, &err) == SL_STATUS_OK);
  sl__copy *c = NULL;
  size_t nc = 0;
  CHECK(sl__refit_copies(&cat, &b, &c, &nc, &err) == SL_STATUS_OK);
  CHECKF(nc == 1 && c[0].row_bytes == 4 && c[0].rows == 1 && c[0].src_off == 0, "scalar: %zu copies", nc);
  free(c);
  sl__refit_blocks_free(&b);
  cat_drop(&cat);
}

/* ---- checks against the catalog ------------------------------------------------------------ */

static const tdef CAT[] = {
    {"model.layers.0.mlp.down_proj.weight", SL_DT_BF16, 2, {8, 12}},
    {"model.norm.weight", SL_DT_BF16, 1, {8}},
    {"packed", SL_DT_F4, 1, {16}},
};

/* Two trainers' blocks as given; the expected status and a needle of the message. */
static void expect_check(const char *label, const sl__refit_blocks *t0, const sl__refit_blocks *t1,
                         sl_status want, const char *needle) {
  sl__catalog cat;
  cat_make(&cat, CAT, 3);
  sl__refit_blocks ts[2] = {*t0, *t1};
  uint32_t ranks[2] = {3, 5};
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__refit_check(&cat, ts, 2, ranks, &err);
  CHECKF(st == want && (needle == NULL || strstr(err.msg, needle) != NULL), "%s: %s: %s", label,
         sl_status_name(st), err.msg);
  cat_drop(&cat);
}

static void add(sl__refit_blocks *b, const char *name, sl__dtype dt, uint32_t nd, const uint64_t *shape,
                const uint64_t *off, const uint64_t *ext) {
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__refit_blocks_add(b, name, dt, nd, shape, off, ext, &err) == SL_STATUS_OK, "add %s: %s", name,
         err.msg);
}

static void checks(void) {
  const char *down = "model.layers.0.mlp.down_proj.weight";
  uint64_t s2[2] = {8, 12}, o0[2] = {0, 0}, o4[2] = {4, 0}, top[2] = {4, 12}, mid[2] = {2, 0}, s1[1] = {8};
  sl__refit_blocks a = {0}, b = {0};
  add(&a, down, SL_DT_BF16, 2, s2, o0, top);
  add(&b, down, SL_DT_F32, 2, s2, o4, top); /* another dtype that converts */
  expect_check("disjoint halves, F32 for BF16", &a, &b, SL_STATUS_OK, NULL);
  sl__refit_blocks_free(&b);
  add(&b, down, SL_DT_BF16, 2, s2, o0, top); /* the same block: replicas */
  uint64_t z[2] = {0, 12};
  add(&b, down, SL_DT_BF16, 2, s2, o4, z); /* an empty block */
  expect_check("replicas and an empty block", &a, &b, SL_STATUS_OK, NULL);
  sl__refit_blocks_free(&b);
  add(&b, down, SL_DT_BF16, 2, s2, mid, top); /* rows 2 .. 5 across rows 0 .. 3 */
  expect_check("overlap", &a, &b, SL_STATUS_INVALID_ARGUMENT, "trainer rank 3");
  expect_check("overlap names the tensor", &a, &b, SL_STATUS_INVALID_ARGUMENT, down);
  sl__refit_blocks_free(&b);
  add(&b, "model.layers.0.mlp.down_prj.weight", SL_DT_BF16, 2, s2, o4, top);
  expect_check("unknown name", &a, &b, SL_STATUS_NOT_FOUND,
               "did you mean model.layers.0.mlp.down_proj.weight");
  sl__refit_blocks_free(&b);
  uint64_t s9[2] = {9, 12};
  add(&b, down, SL_DT_BF16, 2, s9, o4, top);
  expect_check("shape", &a, &b, SL_STATUS_SHAPE, "[9, 12]");
  sl__refit_blocks_free(&b);
  uint64_t o1[1] = {0};
  add(&b, "model.norm.weight", SL_DT_I32, 1, s1, o1, s1);
  expect_check("dtype", &a, &b, SL_STATUS_SHAPE, "I32");
  sl__refit_blocks_free(&b);
  uint64_t s16[1] = {16};
  add(&b, "packed", SL_DT_F4, 1, s16, o1, s16);
  expect_check("sub-byte", &a, &b, SL_STATUS_UNSUPPORTED, "packed");
  sl__refit_blocks_free(&b);
  /* the shape not given: the catalog's, then the bounds */
  uint64_t o2[2] = {4, 0}, e4[2] = {4, 12}, e5[2] = {5, 12};
  sl__err err0;
  sl__err_clear(&err0);
  CHECK(sl__refit_blocks_add(&b, down, SL_DT_BF16, 2, NULL, o2, e4, &err0) == SL_STATUS_OK);
  expect_check("shape not given", &a, &b, SL_STATUS_OK, NULL);
  sl__refit_blocks_free(&b);
  CHECK(sl__refit_blocks_add(&b, down, SL_DT_BF16, 2, NULL, o2, e5, &err0) == SL_STATUS_OK);
  expect_check("shape not given, block outside", &a, &b, SL_STATUS_INVALID_ARGUMENT, "trainer rank 5");
  sl__refit_blocks_free(&b);
  CHECK(sl__refit_blocks_add(&b, down, SL_DT_BF16, 1, NULL, o2, e4, &err0) == SL_STATUS_OK);
  expect_check("shape not given, dimensions differ", &a, &b, SL_STATUS_SHAPE, "1-dimensional");
  sl__refit_blocks_free(&b);
  /* outside the shape: refused when added */
  sl__err err;
  sl__err_clear(&err);
  uint64_t o6[1] = {6}, e3[1] = {3};
  CHECK(sl__refit_blocks_add(&b, "model.norm.weight", SL_DT_BF16, 1, s1, o6, e3, &err) ==
            SL_STATUS_INVALID_ARGUMENT &&
        strstr(err.msg, "outside") != NULL);
  sl__refit_blocks_free(&a);
}

/* ---- wire form -------------------------------------------------------------------------------- */

static void wire(void) {
  sl__refit_blocks a = {0}, back = {0};
  uint64_t s2[2] = {8, 12}, o[2] = {1, 2}, e[2] = {3, 4};
  add(&a, "x", SL_DT_BF16, 2, s2, o, e);
  add(&a, "y.weight", SL_DT_F32, 0, NULL, NULL, NULL);
  add(&a, "z", SL_DT_BF16, 2, NULL, o, e); /* shape not given */
  uint8_t *blob = NULL;
  size_t len = 0;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__refit_blocks_serialize(&a, &blob, &len, &err) == SL_STATUS_OK);
  CHECK(sl__refit_blocks_parse(blob, len, "trainer rank 1", &back, &err) == SL_STATUS_OK);
  CHECK(back.n == 3 && strcmp(back.b[0].name, "x") == 0 && back.b[0].extent[1] == 4 && back.b[1].ndim == 0 &&
        back.b[0].shape_known && !back.b[2].shape_known && back.b[2].offsets[1] == 2);
  CHECK(sl__refit_blocks_hash(&a) == sl__refit_blocks_hash(&back));
  back.b[0].offsets[0] = 0;
  CHECK(sl__refit_blocks_hash(&a) != sl__refit_blocks_hash(&back));
  sl__refit_blocks_free(&back);
  for (size_t cut = 0; cut < len; cut++) {
    sl__err_clear(&err);
    sl_status st = sl__refit_blocks_parse(blob, cut, "trainer rank 1", &back, &err);
    CHECKF(st != SL_STATUS_OK && strstr(err.msg, "trainer rank 1") != NULL, "truncated at %zu: %s", cut,
           err.msg);
    sl__refit_blocks_free(&back);
  }
  free(blob);
  sl__refit_blocks_free(&a);
}

/* ---- the plan of trainers' blocks, simulated ------------------------------------------------ */

#define T_ROWS 6
#define T_COLS 5 /* F32: 20 bytes a row */

static uint64_t lab(uint64_t tensor_byte) {
  return tensor_byte + 1;
}

/* Trainer 0 rows [0, 4), trainer 1 rows [4, 6) and a replica of trainer 0 (rank 2); receivers 3
 * (columns 1 .. 3 of every row) and 4 (the whole tensor). Parts applied byte by byte. */
static void simulate(const sl__peer_plan *pp, const sl__refit_blocks *tb, uint64_t **recv, int *bad) {
  for (size_t i = 0; i < pp->n_parts; i++) {
    const sl__peer_part *p = &pp->parts[i];
    for (uint64_t r = 0; r < p->rows; r++)
      for (uint64_t x = 0; x < p->row_bytes; x++) {
        uint64_t d = p->d_off + r * p->d_stride + x; /* in the donor block's bytes, or a relay's memory */
        uint64_t got = 0;
        if (p->relay) {
          got = recv[p->donor][d]; /* a relay forwards only what it already holds: 0 otherwise */
        } else {
          const sl__refit_block *k = &tb[p->donor].b[p->d_lparam];
          uint64_t e = 4, el = d / e, row = el / k->extent[1], col = el % k->extent[1];
          got = lab(((k->offsets[0] + row) * T_COLS + k->offsets[1] + col) * e + d % e);
        }
        uint64_t at = p->r_off + r * p->r_stride + x;
        if (recv[p->receiver][at] != 0)
          (*bad)++;
        recv[p->receiver][at] = got;
        if (got != lab(p->src_off + r * p->src_stride + x))
          (*bad)++;
      }
  }
}

static void plan_case(uint64_t msg_bytes, bool half) {
  tdef d = {.name = "w", .dtype = SL_DT_F32, .ndim = 2, .shape = {T_ROWS, T_COLS}};
  sl__catalog cat;
  cat_make(&cat, &d, 1);
  uint64_t shape[2] = {T_ROWS, T_COLS}, o0[2] = {0, 0}, e0[2] = {4, T_COLS}, o1[2] = {4, 0},
           e1[2] = {half ? 1 : 2, T_COLS};
  sl__refit_blocks tb[3] = {{0}, {0}, {0}};
  add(&tb[0], "w", SL_DT_F32, 2, shape, o0, e0);
  add(&tb[1], "w", SL_DT_F32, 2, shape, o1, e1);
  add(&tb[2], "w", SL_DT_F32, 2, shape, o0, e0);
  uint32_t ranks[3] = {0, 1, 2};
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__refit_check(&cat, tb, 3, ranks, &err) == SL_STATUS_OK);
  sl__copy *tc[3] = {NULL};
  sl__peer_rank pr[5];
  memset(pr, 0, sizeof pr);
  for (int t = 0; t < 3; t++) {
    size_t n = 0;
    CHECK(sl__refit_copies(&cat, &tb[t], &tc[t], &n, &err) == SL_STATUS_OK);
    pr[t] = (sl__peer_rank){.donor = true, .node = 0, .copies = tc[t], .n_copies = n};
  }
  sl__copy rc3 = {.lparam = 0,
                  .tensor = 0,
                  .src_off = 4,
                  .src_stride = 20,
                  .row_bytes = 12,
                  .rows = T_ROWS,
                  .dst_off = 0,
                  .dst_stride = 12};
  sl__copy rc4 = {.lparam = 0, .tensor = 0, .src_off = 0, .src_stride = 120, .row_bytes = 120, .rows = 1};
  pr[3] = (sl__peer_rank){.node = 1, .copies = &rc3, .n_copies = 1};
  pr[4] = (sl__peer_rank){.node = 1, .copies = &rc4, .n_copies = 1};
  sl__peer_opts o = {.msg_bytes = msg_bytes, .giver = "trainer", .whole_elements = true};
  sl__peer_plan pp;
  sl_status st = sl__peer_plan_build_opts(pr, 5, &cat, &o, &pp, &err);
  if (half) {
    CHECKF(st == SL_STATUS_NOT_FOUND && strstr(err.msg, "no trainer holds") != NULL &&
               strstr(err.msg, "(element [5, ") != NULL && strstr(err.msg, "tensor w") != NULL,
           "a byte no trainer publishes: %s: %s", sl_status_name(st), err.msg);
  } else {
    CHECKF(st == SL_STATUS_OK, "plan: %s", err.msg);
    uint64_t *recv[5] = {NULL, NULL, NULL, calloc(72, 8), calloc(120, 8)};
    int bad = 0;
    simulate(&pp, tb, recv, &bad);
    for (uint64_t r = 0; r < T_ROWS; r++)
      for (uint64_t x = 0; x < 12; x++)
        bad += recv[3][r * 12 + x] != lab(r * 20 + 4 + x);
    for (uint64_t x = 0; x < 120; x++)
      bad += recv[4][x] != lab(x);
    for (size_t i = 0; i < pp.n_parts; i++) /* whole elements in every message */
      bad += pp.parts[i].row_bytes % 4 != 0 || pp.parts[i].msg_off % 4 != 0 || pp.parts[i].src_off % 4 != 0;
    CHECKF(bad == 0, "messages of %llu bytes: %d bytes wrong", (unsigned long long)msg_bytes, bad);
    free(recv[3]);
    free(recv[4]);
    sl__peer_plan_free(&pp);
  }
  for (int t = 0; t < 3; t++) {
    free(tc[t]);
    sl__refit_blocks_free(&tb[t]);
  }
  cat_drop(&cat);
}

/* ---- subsets ---------------------------------------------------------------------------------- */

static void subset_case(void) {
  /* a plan of plain donors (plan/peers.h) with many messages */
  sl__copy d0 = {.lparam = 0, .tensor = 0, .src_off = 0, .src_stride = 0, .row_bytes = 400, .rows = 1};
  sl__copy r[3] = {{.lparam = 0, .tensor = 0, .src_off = 0, .row_bytes = 400, .rows = 1},
                   {.lparam = 0, .tensor = 0, .src_off = 100, .src_stride = 40, .row_bytes = 20, .rows = 5},
                   {.lparam = 1, .tensor = 0, .src_off = 8, .row_bytes = 64, .rows = 1}};
  sl__peer_rank pr[4] = {{.donor = true, .node = 0, .copies = &d0, .n_copies = 1},
                         {.node = 1, .copies = r, .n_copies = 3},
                         {.node = 1, .copies = r, .n_copies = 3},
                         {.node = 2, .copies = r + 1, .n_copies = 2}};
  sl__peer_plan pp, sub;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__peer_plan_build(pr, 4, NULL, 48, &pp, &err) == SL_STATUS_OK);
  for (int k = 0; k < 50; k++) {
    uint8_t *keep = calloc(pp.n_parts + 1, 1);
    for (size_t i = 0; i < pp.n_parts; i++)
      keep[i] = k == 0 ? 1 : k == 1 ? 0 : (uint8_t)rnd(2);
    CHECK(sl__peer_plan_subset(&pp, keep, &sub, &err) == SL_STATUS_OK);
    int bad = 0;
    size_t j = 0;
    uint64_t sent[4] = {0}, recvd[4] = {0};
    for (size_t i = 0; i < pp.n_parts; i++) {
      if (!keep[i])
        continue;
      const sl__peer_part *a = &pp.parts[i], *b = &sub.parts[j++];
      bad += a->src_off != b->src_off || a->r_off != b->r_off || a->rows != b->rows || a->donor != b->donor;
      const sl__peer_msg *ma = &pp.msgs[a->msg], *mb = &sub.msgs[b->msg];
      bad += pp.group_members[2 * ma->group] != sub.group_members[2 * mb->group] ||
             pp.group_members[2 * ma->group + 1] != sub.group_members[2 * mb->group + 1];
      sent[a->donor] += a->rows * a->row_bytes;
      recvd[a->receiver] += a->rows * a->row_bytes;
    }
    bad += j != sub.n_parts;
    for (size_t m = 0; m < sub.n_msgs; m++) { /* its parts tile it */
      uint64_t at = 0;
      for (uint32_t q = 0; q < sub.msgs[m].n_parts; q++) {
        const sl__peer_part *p = &sub.parts[sub.msgs[m].first_part + q];
        bad += p->msg_off != at || p->msg != m;
        at += p->rows * p->row_bytes;
      }
      bad += at != sub.msgs[m].nbytes || at == 0 || sub.msgs[m].group >= sub.n_groups;
    }
    for (int q = 0; q < 4; q++)
      bad += sent[q] != sub.sent[q] || recvd[q] != sub.received[q];
    CHECKF(bad == 0 && (k != 1 || (sub.n_msgs == 0 && sub.n_groups == 0)), "subset %d: %d defects", k, bad);
    sl__peer_plan_free(&sub);
    free(keep);
  }
  sl__peer_plan_free(&pp);
}

/* ---- descriptions ----------------------------------------------------------------------------- */

static void describe(void) {
  static const tdef defs[] = {
      {"a", SL_DT_BF16, 2, {7, 4}}, {"b", SL_DT_F32, 1, {2}}, {"c", SL_DT_F32, 0, {0}}};
  sl__catalog cat;
  cat_make(&cat, defs, 3);
  sl__refit_blocks *tb = NULL;
  uint32_t n = 0;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__refit_describe("fsdp:3", &cat, &tb, &n, &err) == SL_STATUS_OK && n == 3);
  /* torch.chunk(7, 3): 3, 3, 1; chunk(2, 3): 1, 1, 0 (empty) */
  static const uint64_t lo[3] = {0, 3, 6}, ext[3] = {3, 3, 1}, blo[3] = {0, 1, 2}, bext[3] = {1, 1, 0};
  for (uint32_t t = 0; tb != NULL && t < 3; t++)
    CHECKF(tb[t].n == 3 && tb[t].b[0].offsets[0] == lo[t] && tb[t].b[0].extent[0] == ext[t] &&
               tb[t].b[0].extent[1] == 4 && tb[t].b[1].offsets[0] == blo[t] &&
               tb[t].b[1].extent[0] == bext[t] && tb[t].b[2].ndim == 0,
           "fsdp:3 trainer %u", t);
  for (uint32_t t = 0; t < n; t++)
    sl__refit_blocks_free(&tb[t]);
  free(tb);
  CHECK(sl__refit_describe("fsdp:2x2", &cat, &tb, &n, &err) == SL_STATUS_OK && n == 4 &&
        tb[2].b[0].offsets[0] == tb[0].b[0].offsets[0] && tb[3].b[0].offsets[0] == 4);
  for (uint32_t t = 0; t < n; t++)
    sl__refit_blocks_free(&tb[t]);
  free(tb);
  const char *json = "{\"trainers\": [{\"a\": {\"offsets\": [0, 0], \"extent\": [7, 2], \"dtype\": \"F32\"}},"
                     " {\"a\": {\"offsets\": [0, 2], \"extent\": [7, 2]}}]}";
  CHECK(sl__refit_describe(json, &cat, &tb, &n, &err) == SL_STATUS_OK && n == 2 &&
        tb[0].b[0].dtype == SL_DT_F32 && tb[1].b[0].dtype == SL_DT_BF16 && tb[1].b[0].offsets[1] == 2 &&
        tb[1].b[0].shape[0] == 7);
  for (uint32_t t = 0; t < n; t++)
    sl__refit_blocks_free(&tb[t]);
  free(tb);
  static const char *bad[] = {
      "",
      "fsdp:0",
      "fsdp:x",
      "fsdp:2x0",
      "zero",
      "{\"trainers\": []}",
      "{\"trainers\": [{\"a\": {\"offsets\": [0], \"extent\": [7, 2]}}]}",
      "{\"trainers\": [{\"a\": {\"offsets\": [-1, 0], \"extent\": [7, 2]}}]}",
      "{\"trainers\": [{\"a\": {\"offsets\": [0, 0], \"extent\": [7, 2], \"dtype\": \"F99\"}}]}",
      "{\"trainers\": [3]}",
      "{\"trainers\": [{\"a\": 1}]}",
      "{\"trainers\": [{}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err_clear(&err);
    sl_status st = sl__refit_describe(bad[i], &cat, &tb, &n, &err);
    CHECKF(st != SL_STATUS_OK && err.msg[0] != '\0' && tb == NULL, "description %s accepted", bad[i]);
  }
  cat_drop(&cat);
}

int main(void) {
  for (int k = 0; k < 400; k++)
    one_random_block(k);
  scalar_block();
  checks();
  wire();
  plan_case(0, false);
  plan_case(6, false); /* messages smaller than a row: cut at whole F32 elements */
  plan_case(0, true);
  subset_case();
  describe();
  return sl_test_finish();
}
