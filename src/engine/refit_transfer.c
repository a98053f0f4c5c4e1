/*
 * engine/refit_transfer.c — this rank's messages of a refit (see engine/refit_transfer.h): packed
 * out of a trainer's blocks or a relay's parameters, broadcast in the pair's group, scattered into
 * a receiver's parameters. Bytes that keep their dtype and place move with the backend's 2-D
 * copies (device to device on a GPU); a trainer's block of another dtype is converted element by
 * element into the message, and a receiver's parameter held in another dtype or transposed takes
 * the message's elements one row at a time (host memory: the GPU backend never converts).
 */
#include "engine/refit_transfer.h"

#include "base/clock.h"

#include <string.h>

/* Where planned element i of a parameter held transposed lies in its memory (engine/deliver.c's
 * rule: each matrix of A rows of B elements planned is held as B rows of A). */
static uint64_t held_elem(const sl__lparam *lp, uint64_t i) {
  if (lp->transposed == 0 || lp->ndim < 2)
    return i;
  uint64_t A = lp->shape[lp->ndim - 1], B = lp->shape[lp->ndim - 2];
  uint64_t m = A * B;
  uint64_t rem = m > 0 ? i % m : 0;
  return i - rem + rem % B * A + rem / B;
}

static uint64_t elem_bytes(sl__dtype dt) {
  return sl__dtype_bits(dt) / 8;
}

/* Trainer: part p out of its block into the message, converted into the wire's dtype. */
static sl_status pack_block(const sl__refit_xfer *x, const sl__peer_part *p, uint8_t *buf, sl__err *err) {
  sl__backend *b = x->backend;
  const uint8_t *base = x->block_ptr[p->d_lparam];
  sl__dtype from = x->block_dtype[p->d_lparam];
  sl__dtype to = x->wire[p->tensor];
  if (from == to)
    return b->ops->copy(b, buf + p->msg_off, p->row_bytes, base + p->d_off, p->d_stride, p->row_bytes,
                        p->rows, err);
  uint64_t e = elem_bytes(to), f = elem_bytes(from);
  if (!b->host_addressable || e == 0 || p->row_bytes % e != 0 || p->d_off % e != 0 || p->d_stride % e != 0)
    return sl__err_set(err, SL_STATUS_INTERNAL, "refit: a %s block cannot be converted into %s here",
                       sl__dtype_name(from), sl__dtype_name(to));
  for (uint64_t r = 0; r < p->rows; r++)
    sl__cast(to, buf + p->msg_off + r * p->row_bytes, from, base + (p->d_off + r * p->d_stride) / e * f,
             p->row_bytes / e);
  return SL_STATUS_OK;
}

/* Receiver: whether parameter lp takes its bytes as they travel (no conversion, not transposed). */
static bool plain(const sl__refit_xfer *x, uint32_t lp) {
  bool cast = x->cast != NULL && x->cast[lp].from != x->cast[lp].to;
  return !cast && x->lparams[lp].transposed == 0;
}

/* Receiver: part p from the message into its parameter, element by element (host memory). */
static sl_status scatter_elems(const sl__refit_xfer *x, const sl__peer_part *p, const uint8_t *buf,
                               sl__err *err) {
  const sl__lparam *lp = &x->lparams[p->r_lparam];
  sl__dtype wire = x->wire[p->tensor];
  sl__dtype to = x->cast != NULL ? x->cast[p->r_lparam].to : wire;
  uint64_t e = elem_bytes(wire), t = elem_bytes(to);
  if (!x->backend->host_addressable || e == 0 || p->row_bytes % e != 0 || p->r_off % e != 0 ||
      p->r_stride % e != 0)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "refit: a converted or transposed parameter in memory the "
                       "library cannot convert in");
  uint8_t *dst = x->param_ptr[p->r_lparam];
  for (uint64_t r = 0; r < p->rows; r++) {
    const uint8_t *src = buf + p->msg_off + r * p->row_bytes;
    uint64_t i0 = (p->r_off + r * p->r_stride) / e, n = p->row_bytes / e;
    if (lp->transposed == 0) {
      sl__cast(to, dst + i0 * t, wire, src, n);
      continue;
    }
    for (uint64_t k = 0; k < n; k++)
      sl__cast(to, dst + held_elem(lp, i0 + k) * t, wire, src + k * e, 1);
  }
  return SL_STATUS_OK;
}

/* Sender (a trainer, or a receiver relaying): the parts of message m packed into buf. */
static sl_status gather(const sl__refit_xfer *x, const sl__peer_msg *m, uint8_t *buf, sl__err *err) {
  sl__backend *b = x->backend;
  for (uint32_t i = 0; i < m->n_parts; i++) {
    const sl__peer_part *p = &x->pp->parts[m->first_part + i];
    sl_status st = SL_STATUS_OK;
    if (p->relay) /* from the relay's own parameter, where its part put the bytes */
      st = b->ops->copy(b, buf + p->msg_off, p->row_bytes,
                        (const uint8_t *)x->param_ptr[p->d_lparam] + p->d_off, p->d_stride, p->row_bytes,
                        p->rows, err);
    else
      st = pack_block(x, p, buf, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* Receiver: the parts of message m from buf into its parameters. */
static sl_status scatter(const sl__refit_xfer *x, const sl__peer_msg *m, const uint8_t *buf, sl__err *err) {
  sl__backend *b = x->backend;
  for (uint32_t i = 0; i < m->n_parts; i++) {
    const sl__peer_part *p = &x->pp->parts[m->first_part + i];
    atomic_store(&x->copy_started[p->r_copy], 1);
    sl_status st = SL_STATUS_OK;
    if (plain(x, p->r_lparam))
      st = b->ops->copy(b, (uint8_t *)x->param_ptr[p->r_lparam] + p->r_off, p->r_stride, buf + p->msg_off,
                        p->row_bytes, p->row_bytes, p->rows, err);
    else
      st = scatter_elems(x, p, buf, err);
    if (st != SL_STATUS_OK)
      return st;
    atomic_fetch_add(&x->copy_done[p->r_copy], p->row_bytes * p->rows);
  }
  return SL_STATUS_OK;
}

/* The largest message this rank takes part in. */
static uint64_t largest(const sl__refit_xfer *x, uint32_t me) {
  uint64_t need = 0;
  for (size_t k = 0; k < x->pp->n_msgs; k++) {
    const sl__peer_msg *m = &x->pp->msgs[k];
    if ((m->donor == me || m->receiver == me) && m->nbytes > need)
      need = m->nbytes;
  }
  return need;
}

/* One message: packed and sent, or received and scattered. *aborted: another rank stopped us. */
static sl_status one_msg(const sl__refit_xfer *x, const sl__peer_msg *m, void *buf, bool *aborted,
                         sl__transfer_stats *stats, sl__err *err) {
  sl__backend *b = x->backend;
  bool sending = m->donor == (uint32_t)x->comm->rank;
  sl_status st = sending ? gather(x, m, buf, err) : SL_STATUS_OK;
  if (st != SL_STATUS_OK)
    return st;
  int root = x->pp->group_members[2 * m->group] == m->donor ? 0 : 1;
  double tb = sl__now();
  st = b->ops->bcast(b, m->group, buf, m->nbytes, root, aborted, err);
  stats->bcast_seconds += sl__now() - tb;
  if (st != SL_STATUS_OK || *aborted)
    return st;
  stats->buckets++;
  if (sending) {
    stats->bytes_sent += m->nbytes;
    return SL_STATUS_OK;
  }
  stats->bytes_received += m->nbytes;
  return scatter(x, m, buf, err);
}

sl_status sl__refit_transfer_run(const sl__refit_xfer *x, sl__transfer_stats *stats, sl__err *err) {
  memset(stats, 0, sizeof *stats);
  double t0 = sl__now();
  uint32_t me = (uint32_t)x->comm->rank;
  sl__backend *b = x->backend;
  uint64_t need = largest(x, me);
  void *buf = NULL;
  sl_status st = need > 0 ? b->ops->alloc(b, need, &buf, err) : SL_STATUS_OK;
  bool aborted = false;
  uint64_t mine = 0;
  for (size_t k = 0; k < x->pp->n_msgs && st == SL_STATUS_OK && !aborted; k++) {
    const sl__peer_msg *m = &x->pp->msgs[k];
    if (m->donor != me && m->receiver != me)
      continue;
    if (x->fail_before > 0 && ++mine == x->fail_before) {
      st = sl__err_set(err, SL_STATUS_IO,
                       "refit: rank %u failed before its message %llu of the transfer "
                       "(injected by SHARDLOAD_INJECT_REFIT_ERROR)",
                       me, (unsigned long long)mine);
      break;
    }
    st = one_msg(x, m, buf, &aborted, stats, err);
  }
  if (st == SL_STATUS_OK && !aborted)
    st = b->ops->sync(b, err); /* the last scattering copies have landed */
  /* A broadcast an abort left unfinished may still write into its buffer: that one is never freed,
   * unless the backend's abort ended the broadcast (NCCL's). */
  if (buf != NULL && (!aborted || b->abort_stops_bcast))
    b->ops->release(b, buf);
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(x->comm);
  if (st == SL_STATUS_OK && aborted)
    st = sl__err_set(err, SL_STATUS_PEER_FAILED,
                     "another rank failed during the refit (rank %d raised the abort)", x->comm->abort_from);
  stats->seconds = sl__now() - t0;
  return st;
}
