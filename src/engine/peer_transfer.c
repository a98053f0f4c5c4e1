/*
 * engine/peer_transfer.c — this rank's messages of a load from peers (see engine/peer_transfer.h):
 * gathered from the donor's parameters with the backend's 2-D copies, broadcast in the pair's group,
 * scattered into the receiver's parameters the same way. One message buffer, as large as this
 * rank's largest message.
 */
#include "engine/peer_transfer.h"

#include "base/clock.h"

#include <string.h>

/* Donor: the parts of message m, out of its parameters, packed into buf. */
static sl_status gather(const sl__peer_xfer *x, const sl__peer_msg *m, uint8_t *buf, sl__err *err) {
  sl__backend *b = x->backend;
  for (uint32_t i = 0; i < m->n_parts; i++) {
    const sl__peer_part *p = &x->pp->parts[m->first_part + i];
    const uint8_t *src = (const uint8_t *)x->param_ptr[p->d_lparam] + p->d_off;
    sl_status st =
        b->ops->copy(b, buf + p->msg_off, p->row_bytes, src, p->d_stride, p->row_bytes, p->rows, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* Receiver: the parts of message m, from buf into its parameters. */
static sl_status scatter(const sl__peer_xfer *x, const sl__peer_msg *m, const uint8_t *buf, sl__err *err) {
  sl__backend *b = x->backend;
  for (uint32_t i = 0; i < m->n_parts; i++) {
    const sl__peer_part *p = &x->pp->parts[m->first_part + i];
    uint8_t *dst = (uint8_t *)x->param_ptr[p->r_lparam] + p->r_off;
    sl_status st =
        b->ops->copy(b, dst, p->r_stride, buf + p->msg_off, p->row_bytes, p->row_bytes, p->rows, err);
    if (st != SL_STATUS_OK)
      return st;
    if (x->copy_done != NULL)
      atomic_fetch_add(&x->copy_done[p->r_copy], p->row_bytes * p->rows);
  }
  return SL_STATUS_OK;
}

sl_status sl__peer_transfer_run(const sl__peer_xfer *x, sl__transfer_stats *stats, sl__err *err) {
  memset(stats, 0, sizeof *stats);
  double t0 = sl__now();
  uint32_t me = (uint32_t)x->comm->rank;
  sl__backend *b = x->backend;
  uint64_t need = 0;
  for (size_t k = 0; k < x->pp->n_msgs; k++) {
    const sl__peer_msg *m = &x->pp->msgs[k];
    if ((m->donor == me || m->receiver == me) && m->nbytes > need)
      need = m->nbytes;
  }
  void *buf = NULL;
  sl_status st = need > 0 ? b->ops->alloc(b, need, &buf, err) : SL_STATUS_OK;
  bool aborted = false;
  bool abandoned = false;
  for (size_t k = 0; k < x->pp->n_msgs && st == SL_STATUS_OK && !aborted; k++) {
    const sl__peer_msg *m = &x->pp->msgs[k];
    if (m->donor != me && m->receiver != me)
      continue;
    bool sending = m->donor == me;
    if (sending)
      st = gather(x, m, buf, err);
    if (st == SL_STATUS_OK)
      st = b->ops->sync(b, err);
    if (st != SL_STATUS_OK)
      break;
    int root = x->pp->group_members[2 * m->group] == m->donor ? 0 : 1;
    double tb = sl__now();
    st = b->ops->bcast(b, m->group, buf, m->nbytes, root, &aborted, err);
    stats->bcast_seconds += sl__now() - tb;
    abandoned = aborted;
    if (st != SL_STATUS_OK || aborted)
      break;
    stats->buckets++;
    if (sending)
      stats->bytes_sent += m->nbytes;
    else
      st = scatter(x, m, buf, err);
    stats->bytes_received += sending ? 0 : m->nbytes;
    if (st == SL_STATUS_OK)
      st = b->ops->sync(b, err);
  }
  /* A broadcast an abort left unfinished may still write into its buffer: that one is never freed. */
  if (buf != NULL && !abandoned)
    b->ops->release(b, buf);
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(x->comm);
  if (st == SL_STATUS_OK && aborted)
    st = sl__err_set(err, SL_STATUS_PEER_FAILED,
                     "another rank failed during the load from peers (rank %d raised the abort)",
                     x->comm->abort_from);
  stats->seconds = sl__now() - t0;
  return st;
}
