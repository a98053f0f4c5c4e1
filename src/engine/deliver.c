/*
 * engine/deliver.c — deliveries: packed piece bytes out of a read buffer into the rows of every
 * local copy of the piece, or into a bucket (see engine/engine.h).
 */
#include "engine/engine.h"

sl_status sl__engine_to_copies(sl__engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                               uint64_t src_stride, int worker, int slot, sl__err *err) {
  sl__transfer *t = e->t;
  const sl__piece *P = &t->sched->pieces[piece];
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  for (uint32_t ci = e->copy_start[piece]; ci < e->copy_start[piece + 1]; ci++) {
    uint32_t c = e->copy_list[ci];
    const sl__copy *cp = &t->plan->copies[c];
    uint64_t dstride = P->rows <= 1 ? rb : cp->dst_stride;
    uint8_t *dst = (uint8_t *)t->param_ptr[cp->lparam] + cp->dst_off + seg->row * dstride + seg->col;
    sl_status st = worker >= 0 ? t->backend->ops->upload(t->backend, worker, slot, dst, dstride, src,
                                                         src_stride, seg->len, seg->rows, err)
                               : t->backend->ops->copy(t->backend, dst, dstride, src, src_stride, seg->len,
                                                       seg->rows, err);
    if (st != SL_STATUS_OK)
      return st;
    atomic_fetch_add(&t->copy_done[c], seg->len * seg->rows);
  }
  return SL_STATUS_OK;
}

sl_status sl__engine_deliver(sl__engine *e, int worker, int slot, const sl__delivery *d, const uint8_t *buf,
                             uint64_t buf_off, bool packed, sl__err *werr) {
  sl__transfer *t = e->t;
  if (d->piece == SL_NONE) {
    sl__engine_exchange_pack(e, d, buf, buf_off);
    return SL_STATUS_OK;
  }
  const sl__piece *P = &t->sched->pieces[d->piece];
  uint64_t base = t->cat->tensors[P->tensor].offset;
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  uint64_t sstride = packed ? rb : P->rows <= 1 ? P->nbytes : P->src_stride;
  sl__segment seg[3];
  int n = sl__segments(rb, d->p0, d->p1, seg);
  for (int k = 0; k < n; k++) {
    uint64_t p = seg[k].row * rb + seg[k].col;
    const uint8_t *src = packed ? buf + (p - d->p0) : buf + (base + sl__src_of(P, p) - buf_off);
    sl_status st;
    if (d->bucket != SL_NONE) {
      uint8_t *dst = (uint8_t *)e->slot_buf[d->bucket % SL_BUCKET_SLOTS] + d->bucket_off + (p - d->p0);
      st = t->backend->ops->upload(t->backend, worker, slot, dst, seg[k].len, src, sstride, seg[k].len,
                                   seg[k].rows, werr);
    } else {
      st = sl__engine_to_copies(e, d->piece, &seg[k], src, sstride, worker, slot, werr);
    }
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}
