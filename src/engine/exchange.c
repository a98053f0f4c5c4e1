/*
 * engine/exchange.c — the rounds of two-phase exchanges (plan/twophase.h) on this rank: the read
 * operations of its rows (into the round's host buffer, through the reader threads like any
 * other read), then, on the main thread in bucket order, the all-to-all of column blocks inside
 * the exchange group and the delivery of the received columns into local copies (the backend's
 * copy, from host memory, so that device parameters receive them too).
 */
#include "engine/engine.h"

#include "engine/comm.h"
#include "plan/twophase.h"

#include <stdlib.h>

/* The position of world rank `rank` in group g, or SL_NONE. */
static uint32_t member_of(const sl__schedule *s, uint32_t g, uint32_t rank) {
  const sl__group *gr = &s->groups[g];
  for (uint32_t j = 0; j < gr->n; j++)
    if (s->group_members[gr->off + j] == rank)
      return j;
  return SL_NONE;
}

sl_status sl__engine_exchange_reads(sl__engine *e, const sl__bucket *b, uint32_t j) {
  const sl__schedule *s = e->t->sched;
  const sl__xchg *x = &s->xchgs[b->xchg];
  uint32_t m = member_of(s, b->group, (uint32_t)e->t->comm->rank);
  if (m == SL_NONE)
    return sl__err_set(e->err, SL_STATUS_INTERNAL, "two-phase round of a group this rank is not part of");
  uint64_t lo = 0, hi = 0;
  sl__xchg_rows(x, s->groups[b->group].n, m, b->round, &lo, &hi);
  if (hi == lo)
    return SL_STATUS_OK;
  const sl__cat_tensor *T = &e->t->cat->tensors[x->tensor];
  return sl__readplan_range(&e->rp, T->file, T->offset + x->src_off + lo * x->row_bytes, (hi - lo) * x->row_bytes,
                            j, 0, e->t->chunk, e->err);
}

/* Received columns (packed, member after member) → the local copies of my column piece. */
static sl_status deliver_columns(sl__engine *e, const sl__xchg *x, uint32_t piece, const uint64_t *lo,
                                 const uint64_t *rows, uint32_t n, const uint8_t *recv) {
  uint64_t off = 0;
  for (uint32_t r = 0; r < n; r++) {
    if (rows[r] == 0)
      continue;
    sl__segment seg = {.row = lo[r], .col = 0, .len = x->col_bytes, .rows = rows[r]};
    sl_status st = sl__engine_to_copies(e, piece, &seg, recv + off, x->col_bytes, -1, 0, e->err);
    if (st != SL_STATUS_OK)
      return st;
    off += rows[r] * x->col_bytes;
  }
  return SL_STATUS_OK;
}

sl_status sl__engine_exchange_round(sl__engine *e, uint32_t j, sl__transfer_stats *stats, bool *aborted) {
  const sl__schedule *s = e->t->sched;
  const sl__bucket *b = &s->buckets[e->my_buckets[j]];
  const sl__xchg *x = &s->xchgs[b->xchg];
  const sl__group *g = &s->groups[b->group];
  uint32_t n = g->n;
  uint32_t me = member_of(s, b->group, (uint32_t)e->t->comm->rank);
  uint32_t my_col = sl__xchg_col_of(s, x, (uint32_t)e->t->comm->rank);
  uint64_t *a = calloc((size_t)n * 4, sizeof *a);
  if (a == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory exchanging column blocks");
  if (me == SL_NONE || my_col == SL_NONE) {
    free(a);
    return sl__err_set(e->err, SL_STATUS_INTERNAL, "two-phase round of a group this rank is not part of");
  }
  uint64_t *col_off = a, *col_len = a + n, *lo = a + 2 * (size_t)n, *rows = a + 3 * (size_t)n;
  uint64_t received = 0;
  for (uint32_t r = 0; r < n; r++) {
    uint32_t c = sl__xchg_col_of(s, x, s->group_members[g->off + r]);
    col_off[r] = (uint64_t)c * x->col_bytes;
    col_len[r] = x->col_bytes;
    uint64_t hi = 0;
    sl__xchg_rows(x, n, r, b->round, &lo[r], &hi);
    rows[r] = hi - lo[r];
    received += r != me ? rows[r] * x->col_bytes : 0;
  }
  uint8_t *send = e->xbuf[j % SL_BUCKET_SLOTS];
  uint8_t *recv = send + x->rows_per_round * x->row_bytes;
  sl_status st = sl__comm_group_columns(e->t->comm, b->group, send, rows[me], x->row_bytes, col_off, col_len,
                                        recv, rows, aborted, e->err);
  if (st == SL_STATUS_OK && !*aborted) {
    st = deliver_columns(e, x, x->first_piece + my_col, lo, rows, n, recv);
    stats->bytes_sent += rows[me] * x->col_bytes * (n - 1);
    stats->bytes_received += received;
    stats->buckets++;
  }
  free(a);
  return st;
}
