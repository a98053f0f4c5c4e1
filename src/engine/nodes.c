/*
 * engine/nodes.c — the job's node layout (see engine/nodes.h): ranks that share memory are on one node
 * (the communicator tells, or else equal host names); every rank learns the lowest rank of its node
 * and its host name by one allgather. Test aid: SHARDLOAD_INJECT_HOST=<name> is this rank's host
 * name and shared memory is not asked, so that one machine can pose as several nodes.
 */
#include "engine/nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct entry {
  int leader; /* the lowest rank of the node */
  char host[SL_HOST_MAX];
} entry;

/* Without a shared-memory leader: the lowest rank with rank r's host name. */
static int first_on_host(const entry *all, int r) {
  for (int q = 0; q < r; q++)
    if (strncmp(all[q].host, all[r].host, SL_HOST_MAX) == 0)
      return q;
  return r;
}

void sl__job_nodes_free(sl__job_nodes *n) {
  free(n->node_of);
  free(n->hosts);
  free(n->host_buf);
  memset(n, 0, sizeof *n);
}

sl_status sl__job_nodes_detect(sl__comm *c, sl__job_nodes *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  int size = c->size;
  entry me = {.leader = -1};
  /* -1: the communicator cannot tell shared memory; the host name decides below. */
  sl_status lst = sl__comm_node_leader(c, &me.leader, err);
  if (lst != SL_STATUS_OK)
    return lst;
  const char *inject = getenv("SHARDLOAD_INJECT_HOST");
  if (inject != NULL && inject[0] != '\0') {
    me.leader = -1;
    snprintf(me.host, sizeof me.host, "%s", inject);
  } else if (gethostname(me.host, sizeof me.host - 1) != 0) {
    snprintf(me.host, sizeof me.host, "?");
  }
  entry *all = calloc((size_t)size, sizeof *all);
  out->node_of = calloc((size_t)size, sizeof *out->node_of);
  uint32_t *node_id = calloc((size_t)size, sizeof *node_id); /* leader rank → node + 1 */
  if (all == NULL || out->node_of == NULL || node_id == NULL) {
    free(all);
    free(node_id);
    sl__job_nodes_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory finding the nodes");
  }
  sl_status st = sl__comm_allgather(c, &me, sizeof me, all, "gathering host names", err);
  uint32_t *count = NULL;
  for (int r = 0; r < size && st == SL_STATUS_OK; r++) {
    int l = all[r].leader >= 0 && all[r].leader < size ? all[r].leader : first_on_host(all, r);
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
