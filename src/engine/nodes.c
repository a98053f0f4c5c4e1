/*
 * engine/nodes.c — the job's node layout (see engine/nodes.h): ranks that share memory are on one
 * node; every rank learns the lowest rank of its node and its host name by one allgather.
 */
#include "engine/nodes.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct entry {
  int leader; /* the lowest rank of the node */
  char host[SL_HOST_MAX];
} entry;

void sl__job_nodes_free(sl__job_nodes *n) {
  free(n->node_of);
  free(n->hosts);
  free(n->host_buf);
  memset(n, 0, sizeof *n);
}

sl_status sl__job_nodes_detect(MPI_Comm comm, sl__job_nodes *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node = MPI_COMM_NULL;
  entry me = {.leader = rank};
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return sl__err_set(err, SL_STATUS_MPI, "MPI_Comm_split_type failed");
  /* The node communicator keeps the order of comm (key = rank): its rank 0 is the lowest rank. */
  int rc = MPI_Allreduce(MPI_IN_PLACE, &me.leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (gethostname(me.host, sizeof me.host - 1) != 0)
    strcpy(me.host, "?");
  entry *all = calloc((size_t)size, sizeof *all);
  out->node_of = calloc((size_t)size, sizeof *out->node_of);
  uint32_t *node_id = calloc((size_t)size, sizeof *node_id); /* leader rank → node + 1 */
  if (all == NULL || out->node_of == NULL || node_id == NULL) {
    free(all);
    free(node_id);
    sl__job_nodes_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory finding the nodes");
  }
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm);
  sl_status st =
      rc == MPI_SUCCESS ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_MPI, "gathering host names failed");
  uint32_t *count = NULL;
  for (int r = 0; r < size && st == SL_STATUS_OK; r++) {
    int l = all[r].leader >= 0 && all[r].leader < size ? all[r].leader : r;
    if (node_id[l] == 0)
      node_id[l] = ++out->n_nodes;
    out->node_of[r] = node_id[l] - 1;
  }
  out->hosts = calloc(out->n_nodes + 1, sizeof *out->hosts);
  out->host_buf = calloc(out->n_nodes + 1, SL_HOST_MAX);
  count = calloc(out->n_nodes + 1, sizeof *count);
  if (st == SL_STATUS_OK && (out->hosts == NULL || out->host_buf == NULL || count == NULL))
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory finding the nodes");
  for (int r = 0; r < size && st == SL_STATUS_OK; r++) {
    uint32_t n = out->node_of[r];
    if (count[n]++ == 0) {
      out->hosts[n] = out->host_buf + (size_t)n * SL_HOST_MAX;
      memcpy(out->hosts[n], all[r].host, SL_HOST_MAX - 1);
    }
    out->ranks_per_node = count[n] > out->ranks_per_node ? count[n] : out->ranks_per_node;
  }
  free(all);
  free(node_id);
  free(count);
  if (st != SL_STATUS_OK)
    sl__job_nodes_free(out);
  return st;
}

sl__node_layout sl__job_nodes_layout(const sl__job_nodes *n) {
  return (sl__node_layout){.n_nodes = n->n_nodes,
                           .node_of = n->node_of,
                           .hosts = (const char *const *)n->hosts,
                           .ranks_per_node = n->ranks_per_node,
                           .from_job = true};
}
