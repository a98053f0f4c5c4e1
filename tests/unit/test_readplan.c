/*
 * test_readplan.c — the range scheduler of the read engine (src/plan/readplan.c): pieces with odd
 * offsets, sizes and strides become read operations (chunked, coalesced across small gaps, read
 * row by row across large ones — or as row runs, whole rows packed, for the buffered strategies —
 * merged when they touch); each operation is then really read from
 * a file whose bytes are a function of their position — buffered, or O_DIRECT-style widened to
 * 4096-byte alignment and trimmed — and its deliveries extracted. Every delivered byte must equal
 * the independent computation, every packed byte of every piece must be delivered exactly once,
 * and the bytes read must be the useful bytes plus the covering bytes the plan predicts.
 */
#include "check.h"
#include "plan/plan.h"
#include "plan/readplan.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES (3u << 20)

static uint8_t byte_at(uint64_t pos) {
  return (uint8_t)((pos * 2654435761u) >> 13 ^ (pos >> 7));
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(uint64_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return n > 0 ? rng_state % n : 0;
}

typedef struct one_case {
  uint64_t tensor_off, src_off, rows, row_bytes, stride;
  uint64_t chunk, gap;
  bool widen;
  bool runs; /* row runs allowed (never together with widen, as in the engine) */
} one_case;

static void run_case(int fd, const one_case *c, int idx) {
  sl__cat_tensor T = {.name = "t", .file = 0, .offset = c->tensor_off};
  sl__piece P = {.tensor = 0,
                 .src_off = c->src_off,
                 .rows = c->rows,
                 .row_bytes = c->row_bytes,
                 .src_stride = c->rows <= 1 ? c->row_bytes : c->stride,
                 .nbytes = c->rows * c->row_bytes};
  sl__readplan rp;
  sl__readplan_init(&rp);
  sl__err err;
  sl__err_clear(&err);
  /* Two ranges of the piece (like two bucket items), plus a second piece right after it. */
  uint64_t split = P.nbytes > 1 ? 1 + rnd(P.nbytes - 1) : P.nbytes;
  CHECK(sl__readplan_piece(&rp, &P, 0, &T, 0, split, SL_NONE, 0, NULL, c->chunk, c->gap, c->runs, &err) ==
        SL_STATUS_OK);
  CHECK(sl__readplan_piece(&rp, &P, 0, &T, split, P.nbytes, SL_NONE, split, NULL, c->chunk, c->gap, c->runs,
                           &err) == SL_STATUS_OK);
  uint8_t *packed = calloc(P.nbytes + 1, 1);
  uint8_t *count = calloc(P.nbytes + 1, 1);
  uint64_t read_total = 0;
  uint64_t useful_total = 0;
  uint64_t runs = 0;
  for (size_t i = 0; i < rp.ops.len; i++) {
    const sl__read_op *op = &SL_VEC_AT(&rp.ops, sl__read_op, i);
    CHECKF(op->len <= c->chunk || op->count == 1, "case %d: operation of %llu bytes above the chunk %llu",
           idx, (unsigned long long)op->len, (unsigned long long)c->chunk);
    if (op->rows > 1) {
      /* A row run: whole rows, one delivery, read row by row and packed. */
      const sl__delivery *d = &SL_VEC_AT(&rp.dels, sl__delivery, op->first);
      uint64_t row = op->len / op->rows;
      CHECK(c->runs && !c->widen && op->count == 1 && op->direct_dst == NULL);
      CHECK(row == P.row_bytes && op->stride == P.src_stride && op->len <= c->chunk);
      CHECK(d->p0 % P.row_bytes == 0 && d->p1 - d->p0 == op->len && d->bucket_off == d->p0);
      CHECK_EQ_U64(op->offset, T.offset + sl__src_of(&P, d->p0));
      for (uint32_t r = 0; r < op->rows; r++) {
        ssize_t got = pread(fd, packed + d->p0 + r * row, row, (off_t)(op->offset + r * op->stride));
        CHECK(got == (ssize_t)row);
      }
      for (uint64_t p = d->p0; p < d->p1; p++)
        count[p]++;
      runs++;
      read_total += op->len;
      useful_total += op->useful;
      CHECK_EQ_U64(op->useful, op->len);
      continue;
    }
    CHECK(op->rows == 1);
    uint64_t off = op->offset;
    uint64_t len = op->len;
    if (c->widen) {
      sl__readplan_widen(op->offset, op->len, 4096, &off, &len);
      CHECK(off % 4096 == 0 && len % 4096 == 0 && off <= op->offset && off + len >= op->offset + op->len);
      CHECK(off + 4096 > op->offset && op->offset + op->len + 4096 > off + len);
    }
    uint8_t *buf = malloc(len);
    ssize_t got = pread(fd, buf, len, (off_t)off);
    CHECK(got >= 0 && (uint64_t)got >= op->offset + op->len - off);
    read_total += op->len;
    useful_total += op->useful;
    uint64_t useful = 0;
    for (uint32_t k = 0; k < op->count; k++) {
      const sl__delivery *d = &SL_VEC_AT(&rp.dels, sl__delivery, op->first + k);
      useful += d->p1 - d->p0;
      /* bytes of a delivery must lie inside the operation */
      CHECK(T.offset + sl__src_of(&P, d->p0) >= op->offset);
      CHECK(T.offset + sl__src_of(&P, d->p1 - 1) < op->offset + op->len);
      CHECK(d->bucket_off == d->p0);
      sl__readplan_extract(&P, &T, d, buf, off, packed + d->p0);
      for (uint64_t p = d->p0; p < d->p1; p++)
        count[p]++;
    }
    CHECK_EQ_U64(useful, op->useful);
    free(buf);
  }
  /* every packed byte once, and equal to the file byte at its source position */
  uint64_t bad = 0;
  uint64_t first_bad = 0;
  for (uint64_t p = 0; p < P.nbytes; p++) {
    uint64_t pos = T.offset + P.src_off + (p / P.row_bytes) * P.src_stride + p % P.row_bytes;
    if (count[p] != 1 || packed[p] != byte_at(pos)) {
      if (bad == 0)
        first_bad = p;
      bad++;
    }
  }
  CHECKF(bad == 0,
         "case %d: %llu wrong bytes, first at %llu (rows %llu x %llu, stride %llu, chunk %llu, gap %llu)",
         idx, (unsigned long long)bad, (unsigned long long)first_bad, (unsigned long long)c->rows,
         (unsigned long long)c->row_bytes, (unsigned long long)c->stride, (unsigned long long)c->chunk,
         (unsigned long long)c->gap);
  CHECK_EQ_U64(useful_total, P.nbytes);
  /* Rows read one by one come as runs whenever two whole rows fit a chunk. */
  if (c->runs && P.rows >= 5 && !sl__piece_covering(&P, c->gap, c->chunk) && 2 * P.row_bytes <= c->chunk)
    CHECKF(runs > 0, "case %d: no row run for %llu rows of %llu bytes (chunk %llu)", idx,
           (unsigned long long)P.rows, (unsigned long long)P.row_bytes, (unsigned long long)c->chunk);
  uint64_t predicted = sl__piece_read_bytes(&P, c->gap, c->chunk);
  CHECKF(read_total == predicted, "case %d: read %llu bytes, the plan predicts %llu", idx,
         (unsigned long long)read_total, (unsigned long long)predicted);
  free(packed);
  free(count);
  sl__readplan_free(&rp);
}

static void test_segments(void) {
  sl__segment s[3];
  int n = sl__segments(10, 3, 27, s);
  CHECK(n == 3);
  CHECK(s[0].row == 0 && s[0].col == 3 && s[0].len == 7 && s[0].rows == 1);
  CHECK(s[1].row == 1 && s[1].col == 0 && s[1].len == 10 && s[1].rows == 1);
  CHECK(s[2].row == 2 && s[2].col == 0 && s[2].len == 7 && s[2].rows == 1);
  n = sl__segments(10, 20, 50, s);
  CHECK(n == 1 && s[0].row == 2 && s[0].rows == 3 && s[0].len == 10);
  n = sl__segments(10, 4, 6, s);
  CHECK(n == 1 && s[0].row == 0 && s[0].col == 4 && s[0].len == 2);
  CHECK(sl__segments(10, 5, 5, s) == 0);
}

static void test_merging(void) {
  /* Three small contiguous pieces back to back: one operation; a gap: two. */
  sl__cat_tensor T = {.name = "t", .file = 0, .offset = 100};
  sl__piece a = {.src_off = 0, .rows = 1, .row_bytes = 10, .src_stride = 10, .nbytes = 10};
  sl__piece b = {.src_off = 10, .rows = 1, .row_bytes = 7, .src_stride = 7, .nbytes = 7};
  sl__piece c = {.src_off = 30, .rows = 1, .row_bytes = 5, .src_stride = 5, .nbytes = 5};
  sl__readplan rp;
  sl__readplan_init(&rp);
  sl__err err;
  sl__err_clear(&err);
  sl__readplan_piece(&rp, &a, 0, &T, 0, 10, SL_NONE, 0, NULL, 1 << 20, 4096, false, &err);
  sl__readplan_piece(&rp, &b, 1, &T, 0, 7, SL_NONE, 0, NULL, 1 << 20, 4096, false, &err);
  sl__readplan_piece(&rp, &c, 2, &T, 0, 5, SL_NONE, 0, NULL, 1 << 20, 4096, false, &err);
  CHECK_EQ_U64(rp.ops.len, 2);
  CHECK_EQ_U64(SL_VEC_AT(&rp.ops, sl__read_op, 0).len, 17);
  CHECK_EQ_U64(SL_VEC_AT(&rp.ops, sl__read_op, 0).count, 2);
  /* a direct destination is never merged */
  uint8_t dst[1024];
  sl__readplan_piece(&rp, &a, 0, &T, 0, 10, SL_NONE, 0, dst, 1 << 20, 4096, false, &err);
  sl__readplan_piece(&rp, &b, 1, &T, 0, 7, SL_NONE, 0, NULL, 1 << 20, 4096, false, &err);
  CHECK_EQ_U64(rp.ops.len, 4);
  CHECK(SL_VEC_AT(&rp.ops, sl__read_op, 2).direct_dst == dst);
  /* chunks */
  sl__piece big = {.src_off = 0, .rows = 1, .row_bytes = 1000, .src_stride = 1000, .nbytes = 1000};
  sl__readplan_free(&rp);
  sl__readplan_init(&rp);
  sl__readplan_piece(&rp, &big, 0, &T, 0, 1000, SL_NONE, 0, dst, 300, 4096, false, &err);
  CHECK_EQ_U64(rp.ops.len, 4);
  CHECK(SL_VEC_AT(&rp.ops, sl__read_op, 3).len == 100 &&
        SL_VEC_AT(&rp.ops, sl__read_op, 3).direct_dst == dst + 900);
  /* strided: covering when gaps are small, row by row otherwise */
  sl__piece rows = {.src_off = 3, .rows = 5, .row_bytes = 8, .src_stride = 12, .nbytes = 40};
  CHECK(sl__piece_covering(&rows, 4096, 1 << 20));
  CHECK(!sl__piece_covering(&rows, 3, 1 << 20));
  CHECK(!sl__piece_covering(&rows, 4096, 11)); /* a row and its gap must fit a read */
  CHECK_EQ_U64(sl__piece_read_bytes(&rows, 4096, 1 << 20), 4 * 12 + 8);
  CHECK_EQ_U64(sl__piece_read_bytes(&rows, 3, 1 << 20), 40);
  sl__piece wide = {.src_off = 0, .rows = 4, .row_bytes = 8, .src_stride = 32, .nbytes = 32};
  CHECK(!sl__piece_covering(&wide, 4096, 1 << 20)); /* gap 24 larger than the row: never read across */
  sl__readplan_free(&rp);
}

int main(void) {
  test_segments();
  test_merging();
  char *dir = sl_test_mkdtemp("readplan");
  char path[4200];
  snprintf(path, sizeof path, "%s/data.bin", dir);
  uint8_t *data = malloc(FILE_BYTES);
  for (uint64_t i = 0; i < FILE_BYTES; i++)
    data[i] = byte_at(i);
  CHECK(sl_test_write_file(path, data, FILE_BYTES) == 0);
  free(data);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0);
  for (int i = 0; i < 400 && fd >= 0; i++) {
    one_case c;
    c.rows = 1 + rnd(i % 3 == 0 ? 1 : 300);
    c.row_bytes = 1 + rnd(i % 4 == 0 ? 40000 : 700);
    c.stride = c.row_bytes + rnd(i % 2 == 0 ? 16 : 3000);
    c.tensor_off = rnd(5000);
    uint64_t span = (c.rows - 1) * c.stride + c.row_bytes;
    if (c.tensor_off + span + 8192 >= FILE_BYTES) {
      c.rows = 1;
      span = c.row_bytes;
    }
    c.src_off = rnd(FILE_BYTES - c.tensor_off - span - 8192 > 20000 ? 20000 : 1);
    c.chunk = 1 + rnd(i % 5 == 0 ? 64 : 70000);
    c.gap = rnd(2) ? 4096 : rnd(64);
    c.widen = i % 2 == 1;
    c.runs = i % 4 == 0;
    run_case(fd, &c, i);
  }
  if (fd >= 0)
    close(fd);
  sl_test_rmtree(dir);
  free(dir);
  return sl_test_finish();
}
