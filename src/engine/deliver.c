/*
 * engine/deliver.c — deliveries: packed piece bytes out of a read buffer into the rows of every
 * local copy of the piece, or into a bucket (see engine/engine.h). A parameter bound with another
 * dtype (sl_loader_bind_as) is converted here, element by element (format/cast.h): the one place
 * where bytes land in parameters through staging, buckets or exchange rounds.
 */
#include "engine/engine.h"

#include "base/util.h"

#include <string.h>

/* Bytes [lead, lead + n) of the element at planned offset off of converted parameter lparam,
 * kept until the element's other bytes arrive (from another delivery, maybe another thread);
 * the delivery that completes it converts it. */
static sl_status cast_partial(sl__engine *e, uint32_t lparam, uint64_t off, uint64_t lead, const uint8_t *src,
                              uint64_t n, sl__err *err) {
  const sl__cast_pair *k = &e->t->param_cast[lparam];
  uint64_t ssz = sl__dtype_bits(k->from) / 8;
  uint64_t dsz = sl__dtype_bits(k->to) / 8;
  sl_status st = SL_STATUS_OK;
  pthread_mutex_lock(&e->cast_mu);
  size_t i = 0;
  while (i < e->cast_partial.len && (SL_VEC_AT(&e->cast_partial, sl__cast_partial, i).lparam != lparam ||
                                     SL_VEC_AT(&e->cast_partial, sl__cast_partial, i).off != off))
    i++;
  sl__cast_partial *p = i < e->cast_partial.len ? &SL_VEC_AT(&e->cast_partial, sl__cast_partial, i)
                                                : sl__vec_push(&e->cast_partial);
  if (p == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory converting a parameter");
  } else {
    p->lparam = lparam;
    p->off = off;
    memcpy(p->bytes + lead, src, (size_t)n);
    for (uint64_t b = lead; b < lead + n; b++)
      p->have |= (uint8_t)(1u << b);
    if (p->have == (uint8_t)((1u << ssz) - 1u)) {
      sl__cast(k->to, (uint8_t *)e->t->param_ptr[lparam] + off / ssz * dsz, k->from, p->bytes, 1);
      *p = SL_VEC_AT(&e->cast_partial, sl__cast_partial, e->cast_partial.len - 1);
      e->cast_partial.len--;
    }
  }
  pthread_mutex_unlock(&e->cast_mu);
  return st;
}

/* Segment seg of copy cp into converted (host) memory: planned byte q of the parameter belongs to
 * element q / ssz, which lies at (q / ssz) * dsz. A row may start or end inside an element (a
 * chunk or bucket boundary): those bytes go through cast_partial. */
static sl_status cast_rows(sl__engine *e, const sl__copy *cp, uint64_t dstride, const sl__segment *seg,
                           const uint8_t *src, uint64_t src_stride, sl__err *err) {
  const sl__cast_pair *k = &e->t->param_cast[cp->lparam];
  uint64_t ssz = sl__dtype_bits(k->from) / 8;
  uint64_t dsz = sl__dtype_bits(k->to) / 8;
  uint8_t *base = e->t->param_ptr[cp->lparam];
  if (!e->t->backend->host_addressable || ssz == 0 || dsz == 0)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "a converted parameter must be host memory of F32, F16, BF16 or F64");
  for (uint64_t r = 0; r < seg->rows; r++) {
    uint64_t q = cp->dst_off + (seg->row + r) * dstride + seg->col;
    const uint8_t *s = src + r * src_stride;
    uint64_t len = seg->len;
    uint64_t lead = q % ssz;
    sl_status st = SL_STATUS_OK;
    if (lead != 0) {
      uint64_t n = ssz - lead < len ? ssz - lead : len;
      st = cast_partial(e, cp->lparam, q - lead, lead, s, n, err);
      q += n;
      s += n;
      len -= n;
    }
    uint64_t whole = len / ssz;
    sl__cast(k->to, base + q / ssz * dsz, k->from, s, whole);
    if (st == SL_STATUS_OK && len > whole * ssz)
      st = cast_partial(e, cp->lparam, q + whole * ssz, 0, s + whole * ssz, len - whole * ssz, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

sl_status sl__engine_cast_check(sl__engine *e) {
  if (e->cast_partial.len == 0)
    return SL_STATUS_OK;
  const sl__cast_partial *p = &SL_VEC_AT(&e->cast_partial, sl__cast_partial, 0);
  return sl__err_set(e->err, SL_STATUS_INTERNAL,
                     "%zu elements of converted parameters were delivered in part only (local parameter %u, "
                     "byte %llu)",
                     e->cast_partial.len, p->lparam, (unsigned long long)p->off);
}

sl_status sl__engine_to_copies(sl__engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                               uint64_t src_stride, int worker, int slot, sl__err *err) {
  sl__transfer *t = e->t;
  const sl__piece *P = &t->sched->pieces[piece];
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  for (uint32_t ci = e->copy_start[piece]; ci < e->copy_start[piece + 1]; ci++) {
    uint32_t c = e->copy_list[ci];
    const sl__copy *cp = &t->plan->copies[c];
    uint64_t dstride = P->rows <= 1 ? rb : cp->dst_stride;
    sl_status st;
    if (sl__engine_casts(t, cp->lparam)) {
      st = cast_rows(e, cp, dstride, seg, src, src_stride, err);
    } else {
      uint8_t *dst = (uint8_t *)t->param_ptr[cp->lparam] + cp->dst_off + seg->row * dstride + seg->col;
      st = worker >= 0
               ? t->backend->ops->upload(t->backend, worker, slot, dst, dstride, src, src_stride, seg->len,
                                         seg->rows, err)
               : t->backend->ops->copy(t->backend, dst, dstride, src, src_stride, seg->len, seg->rows, err);
    }
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
