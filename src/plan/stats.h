/*
 * plan/stats.h — cluster-wide figures from per-rank statistics (shared by the load report and the
 * dry run): totals, read amplification, largest and smallest rank, and a simple predicted load
 * time (per-node storage and network bandwidth), written as JSON or as a human table.
 */
#ifndef SL_FIGURES_H
#define SL_FIGURES_H

#include "base/util.h"

#include <stdint.h>

typedef struct sl__figures {
  uint32_t world;
  uint64_t needed;               /* sum of bytes_needed */
  uint64_t read;                 /* sum of bytes_read (covering included) */
  uint64_t covering;             /* sum of bytes_covering */
  uint64_t received;             /* sum of bytes_received */
  uint64_t naive;                /* sum of bytes_naive */
  uint64_t unique;               /* bytes of distinct source slices the job needs */
  double amplification;          /* (read - covering) / unique */
  double amplification_covering; /* read / unique */
  double naive_amplification;    /* naive / unique */
  uint32_t largest, smallest;    /* ranks with most / fewest bytes read */
  double predicted_s;            /* storage then network, per the model */
  double predicted_naive_s;      /* every rank reading whole tensors */
  double storage_gbps, network_gbps;
  uint32_t ranks_per_node;
} sl__figures;

void sl__figures_compute(const sl_rank_stats *stats, uint32_t world, uint64_t unique, double storage_gbps,
                         double network_gbps, uint32_t ranks_per_node, sl__figures *out);
/* "key": value members of the cluster figures, each followed by a comma (no braces). */
void sl__figures_json(sl__buf *b, const sl__figures *f);
/* "ranks": [...] of per-rank statistics. */
void sl__figures_ranks_json(sl__buf *b, const sl_rank_stats *stats, uint32_t world);
/* A human table; per-rank rows when world ≤ max_rows, else the largest and smallest ranks. */
void sl__figures_table(sl__buf *b, const sl__figures *f, const sl_rank_stats *stats, uint32_t max_rows);
/* "1.23 GiB" style. */
void sl__fmt_bytes(char *buf, size_t cap, uint64_t bytes);

#endif
