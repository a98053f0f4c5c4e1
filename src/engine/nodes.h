/*
 * engine/nodes.h — the job's node layout: which ranks share a node (MPI_COMM_TYPE_SHARED, else equal
 * host names) and the node's host name, for the time model and the report's per-node figures
 * (plan/stats.h). A load
 * takes it from the job; the `ranks_per_node` key serves the dry run, where there is no job.
 */
#ifndef SL_NODES_H
#define SL_NODES_H

#include "base/err.h"
#include "comm/comm.h"
#include "plan/stats.h"

#include <stdint.h>

#define SL_HOST_MAX 64

typedef struct sl__job_nodes {
  uint32_t *node_of; /* per rank: nodes numbered by their lowest rank */
  char **hosts;      /* per node: the host name of its lowest rank */
  char *host_buf;
  uint32_t n_nodes, ranks_per_node;
} sl__job_nodes;

/* COLLECTIVE. */
sl_status sl__job_nodes_detect(sl__comm *c, sl__job_nodes *out, sl__err *err);
void sl__job_nodes_free(sl__job_nodes *n);
/* The layout the time model takes (pointers into n). */
sl__node_layout sl__job_nodes_layout(const sl__job_nodes *n);

#endif
