/*
 * plan/readplan.c — read operations from pieces (see plan/readplan.h).
 */
#include "plan/readplan.h"

#include <string.h>

void sl__readplan_init(sl__readplan *rp) {
  sl__vec_init(&rp->ops, sizeof(sl__read_op));
  sl__vec_init(&rp->dels, sizeof(sl__delivery));
}

void sl__readplan_free(sl__readplan *rp) {
  sl__vec_free(&rp->ops);
  sl__vec_free(&rp->dels);
}

uint64_t sl__src_of(const sl__piece *P, uint64_t p) {
  if (P->rows <= 1)
    return P->src_off + p;
  return P->src_off + (p / P->row_bytes) * P->src_stride + p % P->row_bytes;
}

int sl__segments(uint64_t row_bytes, uint64_t p0, uint64_t p1, sl__segment out[3]) {
  int n = 0;
  if (p1 <= p0 || row_bytes == 0)
    return 0;
  uint64_t row = p0 / row_bytes;
  uint64_t col = p0 % row_bytes;
  if (col != 0) {
    uint64_t len = row_bytes - col < p1 - p0 ? row_bytes - col : p1 - p0;
    out[n++] = (sl__segment){.row = row, .col = col, .len = len, .rows = 1};
    p0 += len;
    row++;
  }
  uint64_t full = (p1 - p0) / row_bytes;
  if (full > 0) {
    out[n++] = (sl__segment){.row = row, .col = 0, .len = row_bytes, .rows = full};
    p0 += full * row_bytes;
    row += full;
  }
  if (p1 > p0)
    out[n++] = (sl__segment){.row = row, .col = 0, .len = p1 - p0, .rows = 1};
  return n;
}

void sl__readplan_widen(uint64_t off, uint64_t len, uint64_t align, uint64_t *woff, uint64_t *wlen) {
  uint64_t lead = off % align;
  *woff = off - lead;
  *wlen = (lead + len + align - 1) / align * align;
}

void sl__readplan_extract(const sl__piece *P, const sl__cat_tensor *T, const sl__delivery *d,
                          const uint8_t *buf, uint64_t buf_off, uint8_t *out) {
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  sl__segment seg[3];
  int n = sl__segments(rb, d->p0, d->p1, seg);
  for (int k = 0; k < n; k++) {
    for (uint64_t r = 0; r < seg[k].rows; r++) {
      uint64_t p = (seg[k].row + r) * rb + seg[k].col;
      memcpy(out + (p - d->p0), buf + (T->offset + sl__src_of(P, p) - buf_off), (size_t)seg[k].len);
    }
  }
}

/* Appends one operation, merging it into the previous one when they touch. */
static sl_status add_op(sl__readplan *rp, uint32_t piece, const sl__cat_tensor *T, uint64_t p0, uint64_t p1,
                        uint32_t bucket, uint64_t bucket_off, uint64_t off, uint64_t len, uint8_t *direct,
                        uint64_t chunk, sl__err *err) {
  if (rp->ops.len > 0 && direct == NULL) {
    sl__read_op *prev = &SL_VEC_AT(&rp->ops, sl__read_op, rp->ops.len - 1);
    if (prev->rows == 1 && prev->file == T->file && prev->bucket == bucket &&
        prev->offset + prev->len == off && prev->len + len <= chunk && prev->direct_dst == NULL) {
      sl__delivery *d = sl__vec_push(&rp->dels);
      if (d == NULL)
        return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning reads");
      *d = (sl__delivery){.piece = piece, .p0 = p0, .p1 = p1, .bucket = bucket, .bucket_off = bucket_off};
      prev->len += len;
      prev->useful += p1 - p0;
      prev->count++;
      return SL_STATUS_OK;
    }
  }
  sl__read_op *op = sl__vec_push(&rp->ops);
  sl__delivery *d = sl__vec_push(&rp->dels);
  if (op == NULL || d == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning reads");
  *d = (sl__delivery){.piece = piece, .p0 = p0, .p1 = p1, .bucket = bucket, .bucket_off = bucket_off};
  *op = (sl__read_op){.file = T->file,
                      .offset = off,
                      .len = len,
                      .rows = 1,
                      .useful = p1 - p0,
                      .first = (uint32_t)(rp->dels.len - 1),
                      .count = 1,
                      .bucket = bucket,
                      .direct_dst = direct != NULL ? direct + p0 : NULL};
  return SL_STATUS_OK;
}

/* Appends a row run: n whole rows from packed byte p0, one delivery. */
static sl_status add_run(sl__readplan *rp, const sl__piece *P, uint32_t piece, const sl__cat_tensor *T,
                         uint64_t p0, uint64_t n, uint32_t bucket, uint64_t bucket_off, sl__err *err) {
  sl__read_op *op = sl__vec_push(&rp->ops);
  sl__delivery *d = sl__vec_push(&rp->dels);
  if (op == NULL || d == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning reads");
  uint64_t p1 = p0 + n * P->row_bytes;
  *d = (sl__delivery){.piece = piece, .p0 = p0, .p1 = p1, .bucket = bucket, .bucket_off = bucket_off};
  *op = (sl__read_op){.file = T->file,
                      .offset = T->offset + sl__src_of(P, p0),
                      .len = p1 - p0,
                      .rows = (uint32_t)n,
                      .stride = P->src_stride,
                      .useful = p1 - p0,
                      .first = (uint32_t)(rp->dels.len - 1),
                      .count = 1,
                      .bucket = bucket};
  return SL_STATUS_OK;
}

sl_status sl__readplan_piece(sl__readplan *rp, const sl__piece *P, uint32_t piece, const sl__cat_tensor *T,
                             uint64_t p0, uint64_t p1, uint32_t bucket, uint64_t bucket_off, uint8_t *direct,
                             uint64_t chunk, uint64_t coalesce_gap, bool row_runs, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  if (chunk == 0)
    chunk = 1;
  if (P->rows <= 1) {
    for (uint64_t a = p0; a < p1 && st == SL_STATUS_OK; a += chunk) {
      uint64_t b = p1 - a < chunk ? p1 : a + chunk;
      st = add_op(rp, piece, T, a, b, bucket, bucket_off + (a - p0), T->offset + P->src_off + a, b - a,
                  direct, chunk, err);
    }
    return st;
  }
  uint64_t rb = P->row_bytes;
  if (sl__piece_covering(P, coalesce_gap, chunk)) {
    /* Whole rows per operation with their trailing gaps (a row and its gap fit a chunk), so that
     * consecutive operations touch: the bytes read are exactly sl__piece_read_bytes. */
    uint64_t per = chunk / P->src_stride;
    uint64_t a = p0;
    while (a < p1 && st == SL_STATUS_OK) {
      uint64_t row = a / rb;
      uint64_t b = (row + per) * rb;
      b = b < p1 ? b : p1;
      uint64_t off = T->offset + sl__src_of(P, a);
      uint64_t end = T->offset + (b % rb == 0 && b < P->nbytes ? sl__src_of(P, b) : sl__src_of(P, b - 1) + 1);
      st = add_op(rp, piece, T, a, b, bucket, bucket_off + (a - p0), off, end - off, NULL, chunk, err);
      a = b;
    }
    return st;
  }
  /* One operation per row (part), or row runs of whole rows. */
  uint64_t per_run = row_runs ? chunk / rb : 0;
  per_run = per_run < UINT32_MAX ? per_run : UINT32_MAX;
  uint64_t a = p0;
  while (a < p1 && st == SL_STATUS_OK) {
    uint64_t whole = a % rb == 0 ? (p1 - a) / rb : 0;
    if (per_run >= 2 && whole >= 2) {
      uint64_t n = whole < per_run ? whole : per_run;
      st = add_run(rp, P, piece, T, a, n, bucket, bucket_off + (a - p0), err);
      a += n * rb;
      continue;
    }
    uint64_t row_end = (a / rb + 1) * rb;
    uint64_t b = row_end < p1 ? row_end : p1;
    b = b - a > chunk ? a + chunk : b;
    st = add_op(rp, piece, T, a, b, bucket, bucket_off + (a - p0), T->offset + sl__src_of(P, a), b - a, NULL,
                chunk, err);
    a = b;
  }
  return st;
}

sl_status sl__readplan_range(sl__readplan *rp, uint32_t file, uint64_t off, uint64_t len, uint32_t bucket,
                             uint64_t bucket_off, uint64_t chunk, sl__err *err) {
  if (chunk == 0)
    chunk = 1;
  for (uint64_t a = 0; a < len; a += chunk) {
    uint64_t n = len - a < chunk ? len - a : chunk;
    sl__read_op *op = sl__vec_push(&rp->ops);
    sl__delivery *d = sl__vec_push(&rp->dels);
    if (op == NULL || d == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning reads");
    *d = (sl__delivery){
        .piece = SL_NONE, .p0 = off + a, .p1 = off + a + n, .bucket = bucket, .bucket_off = bucket_off + a};
    *op = (sl__read_op){.file = file,
                        .offset = off + a,
                        .len = n,
                        .rows = 1,
                        .useful = n,
                        .first = (uint32_t)(rp->dels.len - 1),
                        .count = 1,
                        .bucket = bucket};
  }
  return SL_STATUS_OK;
}
