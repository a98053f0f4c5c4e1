/*
 * plan/stats.h — cluster-wide figures from per-rank statistics (shared by the load report and the
 * dry run): totals, read amplification, largest and smallest rank, and a simple predicted load
 * time (per-node storage and network bandwidth), written as JSON or as a human table.
 */
#ifndef SL_FIGURES_H
#define SL_FIGURES_H

#include "base/util.h"
#include "model/catalog.h"
#include "plan/plan.h"

#include <stdint.h>

/* Storage is read in blocks: what a node pulls from a file system is the blocks its reads touch
 * (page cache pages; network file systems fetch whole pages). */
#define SL_STORAGE_BLOCK_BYTES 4096u

/* Which node each rank runs on: from the job (MPI_COMM_TYPE_SHARED and host names) in a load,
 * blocks of ranks_per_node consecutive ranks in a dry run. */
typedef struct sl__node_layout {
  uint32_t n_nodes;
  const uint32_t *node_of;  /* per rank; NULL: rank / ranks_per_node */
  const char *const *hosts; /* per node, or NULL (a dry run knows no host) */
  uint32_t ranks_per_node;  /* the largest node */
  bool from_job;
} sl__node_layout;

/* The node of rank in the layout. */
static inline uint32_t sl__node_layout_of(const sl__node_layout *l, uint32_t rank) {
  if (l->node_of != NULL)
    return l->node_of[rank];
  return rank / (l->ranks_per_node > 0 ? l->ranks_per_node : 1);
}

/* One node's figures: measured (load) or planned (dry run) bytes of its ranks, and the model's. */
typedef struct sl__node_figures {
  uint32_t ranks;
  uint64_t read, received, sent; /* sums over the node's ranks (intra-node broadcasts included) */
  uint64_t storage;              /* model: blocks of storage its reads touch, in bytes */
  uint64_t net_in, net_out;      /* model: broadcast bytes crossing the node's link */
  double read_s, bcast_s;        /* model: its storage time; broadcasts it takes part in */
} sl__node_figures;

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
  /* the time model (sl__figures_predict) */
  uint32_t n_nodes;
  sl__node_figures *nodes; /* [n_nodes], owned; NULL before sl__figures_predict */
  const char *const *hosts;
  bool nodes_from_job;
  uint64_t block;
  double predicted_read_s, predicted_bcast_s;
} sl__figures;

void sl__figures_compute(const sl_rank_stats *stats, uint32_t world, uint64_t unique, double storage_gbps,
                         double network_gbps, uint32_t ranks_per_node, sl__figures *out);
/* The time model from the schedule (pieces, buckets, groups), the files' offsets and the node
 * layout, replacing the per-rank estimate of sl__figures_compute: predicted = the slowest node's
 * storage blocks / storage bandwidth + the broadcasts, each bucket costing ceil(log2 nodes) copies
 * of its bytes (a binomial tree's sends at the root) on every node in its group, summed per node
 * and the busiest node taken; a group within one node costs nothing on the network. Pure. Fills
 * f->nodes (free with sl__figures_free). */
sl_status sl__figures_predict(sl__figures *f, const sl_rank_stats *stats, const sl__schedule *sched,
                              const sl__catalog *cat, const sl__node_layout *layout, sl__err *err);
void sl__figures_free(sl__figures *f);
/* "key": value members of the cluster figures, each followed by a comma (no braces). */
void sl__figures_json(sl__buf *b, const sl__figures *f);
/* "ranks": [...] of per-rank statistics. */
void sl__figures_ranks_json(sl__buf *b, const sl_rank_stats *stats, uint32_t world);
/* "nodes": [...] of per-node figures (after sl__figures_predict), followed by a comma. */
void sl__figures_nodes_json(sl__buf *b, const sl__figures *f);
/* A human table; per-rank rows when world ≤ max_rows, else the largest and smallest ranks. */
void sl__figures_table(sl__buf *b, const sl__figures *f, const sl_rank_stats *stats, uint32_t max_rows);

#endif
