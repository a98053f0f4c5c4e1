/*
 * engine/route.c — where the bytes of a completed read go (sl__engine_deliver, called by the
 * reader threads): into this rank's broadcast bucket slot, into an exchange round's send buffer
 * (engine/exchange.c packs them by column block), or straight into the local copies of the piece
 * (engine/deliver.c, the one place bytes land in parameters).
 */
#include "engine/engine.h"

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
      uint8_t *dst =
          (uint8_t *)e->buckets.slot_buf[d->bucket % e->buckets.n_slots] + d->bucket_off + (p - d->p0);
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
