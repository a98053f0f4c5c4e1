/*
 * engine/exchange.c — the rounds of two-phase exchanges (plan/twophase.h) on this rank, and their
 * host buffers (sl__engine_exchange, engine/engine.h): the read operations of its rows (into the
 * round's host buffer, through the reader threads like any other read; the reader splits them
 * into one packed area per column block as it copies them out of staging), then, on the main
 * thread in bucket order, the all-to-all of column blocks inside the exchange group and the
 * delivery of the received columns into local copies (the backend's copy, from host memory, so
 * that device parameters receive them too). */
#include "engine/engine.h"

#include "comm/comm.h"
#include "plan/twophase.h"

#include <stdlib.h>
#include <string.h>

/* The position of world rank `rank` in group g, or SL_NONE. */
static uint32_t member_of(const sl__schedule *s, uint32_t g, uint32_t rank) {
  const sl__group *gr = &s->groups[g];
  for (uint32_t j = 0; j < gr->n; j++)
    if (s->group_members[gr->off + j] == rank)
      return j;
  return SL_NONE;
}

void sl__engine_exchange_size(sl__engine *e) {
  for (size_t j = 0; j < e->buckets.n_mine; j++) {
    const sl__bucket *b = &e->t->sched->buckets[e->buckets.mine[j]];
    if (b->xchg != SL_NONE && b->nbytes > e->exchange.bytes)
      e->exchange.bytes = b->nbytes;
  }
}

sl_status sl__engine_exchange_alloc(sl__engine *e) {
  sl__backend *be = e->t->backend;
  e->exchange.own = !be->host_addressable && e->exchange.bytes > 0;
  sl_status st = SL_STATUS_OK;
  for (uint32_t s = 0; s < SL_BUCKET_SLOTS && st == SL_STATUS_OK && e->exchange.bytes > 0; s++) {
    void *p = e->buckets.slot_buf[s];
    if (e->exchange.own)
      st = be->ops->alloc_staging(be, e->exchange.bytes, &p, e->err);
    e->exchange.buf[s] = p;
  }
  return st;
}

void sl__engine_exchange_free(sl__engine *e) {
  /* A buffer an abort left a round unfinished in may still be written into (as a bucket slot). */
  sl__backend *be = e->t->backend;
  for (uint32_t s = 0; s < SL_BUCKET_SLOTS; s++)
    if (e->exchange.own && e->exchange.buf[s] != NULL && !e->buckets.slot_abandoned[s])
      be->ops->release_staging(be, e->exchange.buf[s]);
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
  return sl__readplan_range(&e->reads.rp, T->file, T->offset + x->src_off + lo * x->row_bytes,
                            (hi - lo) * x->row_bytes, j, 0, e->t->chunk, e->err);
}

void sl__engine_exchange_pack(sl__engine *e, const sl__delivery *d, const uint8_t *buf, uint64_t buf_off) {
  const sl__schedule *s = e->t->sched;
  const sl__xchg *x = &s->xchgs[s->buckets[e->buckets.mine[d->bucket]].xchg];
  uint64_t S = x->row_bytes, rb = x->col_bytes, q = x->rows_per_round;
  uint8_t *out = e->exchange.buf[d->bucket % e->buckets.n_slots];
  uint64_t base = d->p0 - d->bucket_off; /* file offset of the round's first row */
  for (uint64_t p = d->p0; p < d->p1;) {
    uint64_t row = (p - base) / S, col = (p - base) % S;
    uint64_t n = rb - col % rb < d->p1 - p ? rb - col % rb : d->p1 - p;
    memcpy(out + (col / rb) * q * rb + row * rb + col % rb, buf + (p - buf_off), n);
    p += n;
  }
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
  const sl__bucket *b = &s->buckets[e->buckets.mine[j]];
  const sl__xchg *x = &s->xchgs[b->xchg];
  const sl__group *g = &s->groups[b->group];
  uint32_t n = g->n;
  uint32_t me = member_of(s, b->group, (uint32_t)e->t->comm->rank);
  uint32_t my_col = sl__xchg_col_of(s, x, (uint32_t)e->t->comm->rank);
  uint64_t *a = calloc((size_t)n * 6, sizeof *a);
  if (a == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory exchanging column blocks");
  if (me == SL_NONE || my_col == SL_NONE) {
    free(a);
    return sl__err_set(e->err, SL_STATUS_INTERNAL, "two-phase round of a group this rank is not part of");
  }
  uint64_t *sdispl = a, *lo = a + n, *rows = a + 2 * (size_t)n, *scount = a + 3 * (size_t)n;
  uint64_t *rcount = a + 4 * (size_t)n, *rdispl = a + 5 * (size_t)n;
  uint64_t q = x->rows_per_round, rb = x->col_bytes, received = 0;
  for (uint32_t r = 0; r < n; r++) {
    uint64_t hi = 0;
    sl__xchg_rows(x, n, r, b->round, &lo[r], &hi);
    rows[r] = hi - lo[r];
    received += r != me ? rows[r] * rb : 0;
    rcount[r] = rows[r] * rb;
    rdispl[r] = r > 0 ? rdispl[r - 1] + rcount[r - 1] : 0;
  }
  for (uint32_t r = 0; r < n; r++) {
    /* Member r gets my rows of its column block (replicas of a block share its area). */
    sdispl[r] = (uint64_t)sl__xchg_col_of(s, x, s->group_members[g->off + r]) * q * rb;
    scount[r] = rows[me] * rb;
  }
  uint8_t *send = e->exchange.buf[j % e->buckets.n_slots];
  uint8_t *recv = send + q * x->row_bytes;
  sl_status st = sl__comm_group_alltoallv(e->t->comm, b->group, send, scount, sdispl, recv, rcount, rdispl,
                                          aborted, e->err);
  if (st == SL_STATUS_OK && !*aborted) {
    st = deliver_columns(e, x, x->first_piece + my_col, lo, rows, n, recv);
    stats->bytes_sent += rows[me] * x->col_bytes * (n - 1);
    stats->bytes_received += received;
    stats->buckets++;
  }
  free(a);
  return st;
}
