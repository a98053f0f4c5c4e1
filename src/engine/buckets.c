/*
 * engine/buckets.c — my buckets and their slots (sl__engine_buckets, engine/engine.h), and the
 * bucket loop on the main thread. Every rank walks its buckets in the schedule's global order, so
 * the blocking order of group broadcasts is the same everywhere. n_slots bucket buffers
 * (SL_BUCKET_SLOTS, more where the backend has room) rotate: the readers fill the next buckets
 * while the current one is broadcast and scattered into local copies. */
#include "engine/engine.h"

#include "base/clock.h"
#include "engine/file_gate.h"
#include "plan/visibility.h"

#include "base/util.h"

#include <stdlib.h>

sl_status sl__engine_buckets_index(sl__engine *e) {
  const sl__schedule *s = e->t->sched;
  uint32_t me = (uint32_t)e->t->comm->rank;
  e->buckets.mine = calloc(s->n_buckets + 1, sizeof *e->buckets.mine);
  if (e->buckets.mine == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory indexing buckets");
  for (size_t b = 0; b < s->n_buckets; b++) {
    const sl__group *g = &s->groups[s->buckets[b].group];
    for (uint32_t j = 0; sl__group_listed(s, s->buckets[b].group) && j < g->n; j++) {
      if (s->group_members[g->off + j] == me) {
        e->buckets.mine[e->buckets.n_mine++] = (uint32_t)b;
        break;
      }
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__engine_slots_alloc(sl__engine *e) {
  sl__transfer *t = e->t;
  sl__engine_buckets *B = &e->buckets;
  uint64_t xbytes = e->exchange.bytes;
  for (size_t j = 0; j < B->n_mine; j++) {
    const sl__bucket *b = &t->sched->buckets[B->mine[j]];
    if (b->xchg == SL_NONE && b->nbytes > B->slot_bytes)
      B->slot_bytes = b->nbytes;
  }
  /* Exchange rounds use the bucket slots where they are host memory, else staging memory. */
  if (t->backend->host_addressable && xbytes > B->slot_bytes)
    B->slot_bytes = xbytes;
  /* More buckets in rotation where the backend has room (device memory): the readers fill buckets
   * further ahead of the broadcasts. Not with exchange rounds, whose buffers rotate with them. */
  B->n_slots = SL_BUCKET_SLOTS;
  if (xbytes == 0 && B->slot_bytes > 0 && t->backend->ops->bucket_slots != NULL) {
    uint32_t n = t->backend->ops->bucket_slots(t->backend, B->slot_bytes);
    B->n_slots = n < SL_BUCKET_SLOTS ? SL_BUCKET_SLOTS : n > SL_BUCKET_SLOTS_MAX ? SL_BUCKET_SLOTS_MAX : n;
  }
  sl_status st = SL_STATUS_OK;
  for (uint32_t s = 0; s < B->n_slots && st == SL_STATUS_OK && B->slot_bytes > 0; s++)
    st = t->backend->ops->alloc(t->backend, B->slot_bytes, &B->slot_buf[s], e->err);
  return st;
}

void sl__engine_buckets_free(sl__engine *e) {
  /* A broadcast abandoned by an abort may still write into its bucket whenever MPI progresses
   * (in any later MPI call of this process): that bucket is deliberately never released, unless
   * the backend's abort ended the broadcast (NCCL's). */
  sl__backend *be = e->t->backend;
  bool keep_abandoned = !be->abort_stops_bcast;
  for (uint32_t s = 0; s < SL_BUCKET_SLOTS_MAX; s++)
    if (e->buckets.slot_buf[s] != NULL && !(e->buckets.slot_abandoned[s] && keep_abandoned))
      be->ops->release(be, e->buckets.slot_buf[s]);
  free(e->buckets.mine);
}

/* After a broadcast: bucket items (packed piece bytes) → local copies. */
static sl_status scatter_bucket(sl__engine *e, uint32_t mine) {
  sl__transfer *t = e->t;
  const sl__bucket *b = &t->sched->buckets[e->buckets.mine[mine]];
  const uint8_t *slot = e->buckets.slot_buf[mine % e->buckets.n_slots];
  for (uint32_t i = 0; i < b->n_items; i++) {
    const sl__bucket_item *it = &t->sched->items[b->first_item + i];
    const sl__piece *P = &t->sched->pieces[it->piece];
    uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
    sl__segment seg[3];
    int n = sl__segments(rb, it->piece_off, it->piece_off + it->len, seg);
    for (int k = 0; k < n; k++) {
      uint64_t p = seg[k].row * rb + seg[k].col;
      sl_status st = sl__engine_to_copies(e, it->piece, &seg[k], slot + it->bucket_off + (p - it->piece_off),
                                          seg[k].len, -1, 0, e->err);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

static int group_rank_of(const sl__schedule *s, uint32_t g, uint32_t rank) {
  const sl__group *gr = &s->groups[g];
  for (uint32_t j = 0; j < gr->n; j++)
    if (s->group_members[gr->off + j] == rank)
      return (int)j;
  return -1;
}

static bool bucket_ready(sl__engine *e, void *arg) {
  return e->pool.bucket_left[*(size_t *)arg] == 0;
}

/* Stops a wait for a file when the load stops; answers the other ranks (watchdog) meanwhile. */
static bool gate_give_up(void *arg) {
  sl__engine *e = arg;
  sl__comm_poll(e->t->comm);
  return sl__comm_abort_check(e->t->comm) || atomic_load(&e->pool.failed);
}

/* While the files still download (docs/spec/HUB.md §13), a receiver waits for the bucket's files
 * napping: its broadcast would otherwise poll a core away from the download and the reader. */
static sl_status wait_bucket_files(sl__engine *e, const sl__bucket *b, bool *aborted) {
  sl__transfer *t = e->t;
  for (uint32_t i = 0; t->gate != NULL && i < b->n_items; i++) {
    const sl__piece *P = &t->sched->pieces[t->sched->items[b->first_item + i].piece];
    uint32_t f = t->cat->tensors[P->tensor].file;
    if (t->vis != NULL && !sl__visibility_sees(t->vis, (uint32_t)t->comm->rank, f))
      continue; /* it never appears here: the reader's node has it */
    sl_status st = sl__file_gate_wait(t->gate, f, gate_give_up, e, e->err);
    if (st == SL_STATUS_PEER_FAILED) {
      *aborted = true; /* the abort channel or a reader thread says why */
      return SL_STATUS_OK;
    }
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* One broadcast bucket: wait for my reads as its reader (for its files as a receiver), broadcast,
 * scatter. */
static sl_status broadcast_bucket(sl__engine *e, size_t j, sl__transfer_stats *stats, double *t_bcast,
                                  bool *aborted) {
  sl__transfer *t = e->t;
  uint32_t me = (uint32_t)t->comm->rank;
  const sl__bucket *b = &t->sched->buckets[e->buckets.mine[j]];
  if (b->reader == me) {
    sl_status st = sl__engine_wait_for(e, bucket_ready, &j, aborted);
    if (st != SL_STATUS_OK || *aborted)
      return st;
  } else {
    sl_status st = wait_bucket_files(e, b, aborted);
    if (st != SL_STATUS_OK || *aborted)
      return st;
  }
  double tb = sl__now();
  int root = group_rank_of(t->sched, b->group, b->reader);
  sl_status st = t->backend->ops->bcast(t->backend, b->group, e->buckets.slot_buf[j % e->buckets.n_slots],
                                        b->nbytes, root, aborted, e->err);
  *t_bcast += sl__now() - tb;
  if (st != SL_STATUS_OK || *aborted)
    return st;
  stats->buckets++;
  if (b->reader == me)
    stats->bytes_sent += b->nbytes;
  else
    stats->bytes_received += b->nbytes;
  return scatter_bucket(e, (uint32_t)j);
}

/* One two-phase exchange round: every member reads, then the column blocks are swapped. */
static sl_status exchange_bucket(sl__engine *e, size_t j, sl__transfer_stats *stats, double *t_bcast,
                                 bool *aborted) {
  sl_status st = sl__engine_wait_for(e, bucket_ready, &j, aborted);
  if (st != SL_STATUS_OK || *aborted)
    return st;
  double tb = sl__now();
  st = sl__engine_exchange_round(e, (uint32_t)j, stats, aborted);
  *t_bcast += sl__now() - tb;
  return st;
}

/* Before bucket slot j is refilled: the main thread's work on it (the broadcast, the copies out of
 * it) has completed. Only that: the readers' uploads into the slot were waited for before the
 * bucket counted as read, and waiting for their streams here too would make every bucket wait
 * for the local reads' uploads queued meanwhile. */
static sl_status slot_free(sl__transfer *t, sl__err *err) {
  sl__backend *b = t->backend;
  return b->ops->sync_main != NULL ? b->ops->sync_main(b, err) : b->ops->sync(b, err);
}

sl_status sl__engine_run_buckets(sl__engine *e, sl__transfer_stats *stats, double *t_bcast, bool *aborted) {
  sl__transfer *t = e->t;
  sl_status st = SL_STATUS_OK;
  for (size_t j = 0; j < e->buckets.n_slots && j < e->buckets.n_mine; j++)
    sl__engine_push_bucket(e, j);
  for (size_t j = 0; j < e->buckets.n_mine && st == SL_STATUS_OK && !*aborted; j++) {
    if (atomic_load(&e->pool.failed))
      break;
    const sl__bucket *b = &t->sched->buckets[e->buckets.mine[j]];
    st = b->xchg != SL_NONE ? exchange_bucket(e, j, stats, t_bcast, aborted)
                            : broadcast_bucket(e, j, stats, t_bcast, aborted);
    if (*aborted)
      e->buckets.slot_abandoned[j % e->buckets.n_slots] = true;
    if (st != SL_STATUS_OK || *aborted)
      break;
    st = slot_free(t, e->err);
    if (st == SL_STATUS_OK && j + e->buckets.n_slots < e->buckets.n_mine)
      sl__engine_push_bucket(e, j + e->buckets.n_slots);
  }
  return st;
}
