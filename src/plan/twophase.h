/*
 * plan/twophase.h — two-phase reading of row-parallel tensors (as MPI-IO's collective reads do
 * it). A tensor split along its last dimension (each rank needs a column block of every row,
 * e.g. o_proj/down_proj at tp > 1) would otherwise be read row by row: one small read per row
 * and rank. Instead, every rank needing a column block (the exchange group) reads a contiguous
 * block of whole rows, about 1/n of the tensor, and the members then exchange column blocks
 * (an all-to-all: member r sends member s the columns s needs out of r's rows). Every byte is
 * still read once in the cluster and every read is large; replicas of a column block (dp > 1)
 * simply receive it from every member, so no byte is read twice.
 *
 * The exchange runs in rounds that fit half a bucket slot (rows read + columns received), each round
 * one bucket of the global bucket order (after the broadcast buckets), so that every rank walks
 * the collectives in the same order. The schedule phases (plan/schedule.c) call:
 *   sl__twophase_find     after the pieces are sorted: marks the column pieces, records exchanges;
 *   sl__twophase_groups   after the broadcast groups: adds each exchange's group, sizes rounds;
 *   sl__twophase_buckets  after the broadcast buckets: appends one bucket per round;
 *   sl__twophase_figures  per-rank reads, opened files, bytes sent and received.
 */
#ifndef SL_TWOPHASE_H
#define SL_TWOPHASE_H

#include "plan/plan.h"

typedef struct sl__xchg {
  uint32_t tensor;
  uint32_t group;       /* schedule group: every rank needing a column block, sorted */
  uint32_t first_piece; /* column pieces first_piece .. first_piece + n_cols - 1, left to right */
  uint32_t n_cols;
  uint64_t src_off;        /* bytes from the tensor's first byte to row 0 of the exchange */
  uint64_t rows;           /* whole rows exchanged */
  uint64_t row_bytes;      /* one whole row (the column pieces' src_stride) */
  uint64_t col_bytes;      /* one column block (the column pieces' row_bytes) */
  uint64_t rows_per_round; /* rows each member reads per round */
  uint64_t rounds;
} sl__xchg;

/* The rows [lo, hi) (from the exchange's row 0) that member m of n reads in round k (k ==
 * UINT64_MAX: its whole block). Blocks are contiguous and ordered by member. */
void sl__xchg_rows(const sl__xchg *x, uint32_t n, uint32_t m, uint64_t k, uint64_t *lo, uint64_t *hi);
/* The column block (0 .. n_cols - 1) that world rank `rank` needs, or SL_NONE. */
uint32_t sl__xchg_col_of(const sl__schedule *s, const sl__xchg *x, uint32_t rank);
/* Bucket slot bytes of one round: the rows read plus the columns received. */
uint64_t sl__xchg_slot_bytes(const sl__xchg *x, uint32_t n);

sl_status sl__twophase_find(sl__schedule *s, const sl__catalog *cat, const sl__plan_opts *o, sl__err *err);
sl_status sl__twophase_groups(sl__schedule *s, sl__err *err);
sl_status sl__twophase_buckets(sl__schedule *s, sl__err *err);
void sl__twophase_figures(sl__schedule *s, const sl__catalog *cat, uint8_t *files);

#endif
