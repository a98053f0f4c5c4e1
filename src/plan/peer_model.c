/*
 * plan/peer_model.c — the time model of a load from peers (see plan/peers.h): per node, the bytes of
 * the messages that cross its link and those its relays forward within it, and the predicted time.
 * Shared by the dry run (api/dryrun_peers.c) and the receivers' report of a real load (api/peers.c),
 * so that both give the same number for the same plan and nodes. Pure.
 */
#include "plan/peers.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

void sl__peer_model_free(sl__peer_model *m) {
  if (m == NULL)
    return;
  free(m->net_in);
  free(m->net_out);
  free(m->relayed);
  free(m->node_s);
  memset(m, 0, sizeof *m);
}

sl_status sl__peer_model_build(const sl__peer_plan *pp, const uint32_t *node_of, uint32_t n_nodes,
                               double network_gbps, sl__peer_model *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->n_nodes = n_nodes;
  out->network_gbps = network_gbps;
  out->net_in = calloc((size_t)n_nodes + 1, sizeof *out->net_in);
  out->net_out = calloc((size_t)n_nodes + 1, sizeof *out->net_out);
  out->relayed = calloc((size_t)n_nodes + 1, sizeof *out->relayed);
  out->node_s = calloc((size_t)n_nodes + 1, sizeof *out->node_s);
  if (out->net_in == NULL || out->net_out == NULL || out->relayed == NULL || out->node_s == NULL) {
    sl__peer_model_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory predicting the load from peers");
  }
  for (size_t k = 0; k < pp->n_msgs; k++) {
    const sl__peer_msg *m = &pp->msgs[k];
    uint32_t a = node_of[m->donor];
    uint32_t b = node_of[m->receiver];
    if (a >= n_nodes || b >= n_nodes)
      continue;
    if (a != b) {
      out->net_out[a] += m->nbytes;
      out->net_in[b] += m->nbytes;
    } else if (m->relay) {
      out->relayed[a] += m->nbytes;
    }
  }
  double rate = network_gbps * 1e9;
  double local = SL_PEER_LOCAL_GBPS * 1e9;
  for (uint32_t n = 0; n < n_nodes; n++) {
    uint64_t most = out->net_in[n] > out->net_out[n] ? out->net_in[n] : out->net_out[n];
    double net = rate > 0 ? (double)most / rate : 0;
    double rel = (double)out->relayed[n] / local;
    out->node_s[n] = net + rel;
    out->network_s = net > out->network_s ? net : out->network_s;
    out->relay_s = rel > out->relay_s ? rel : out->relay_s;
  }
  out->predicted_s = out->network_s + out->relay_s;
  return SL_STATUS_OK;
}

void sl__peer_model_json(struct sl__buf *b, const sl__peer_model *m, uint32_t ranks_per_node) {
  sl__buf_appendf(b,
                  "\"prediction\":{\"network_gbps_per_node\":%g,\"local_gbps\":%g,\"ranks_per_node\":%u,"
                  "\"nodes\":%u,\"network_seconds\":%.6f,\"relay_seconds\":%.6f,\"predicted_seconds\":%.6f},"
                  "\"nodes\":[",
                  m->network_gbps, SL_PEER_LOCAL_GBPS, ranks_per_node, m->n_nodes, m->network_s, m->relay_s,
                  m->predicted_s);
  sl__peer_model_nodes_json(b, m, m->n_nodes);
  sl__buf_appendf(b, "]");
}

void sl__peer_model_nodes_json(struct sl__buf *b, const sl__peer_model *m, uint32_t n_nodes) {
  for (uint32_t n = 0; n < n_nodes; n++)
    sl__buf_appendf(
        b,
        "%s{\"node\":%u,\"bytes_network_in\":%llu,\"bytes_network_out\":%llu,\"bytes_relayed\":%llu,"
        "\"predicted_seconds\":%.6f}",
        n > 0 ? "," : "", n, (unsigned long long)m->net_in[n], (unsigned long long)m->net_out[n],
        (unsigned long long)m->relayed[n], m->node_s[n]);
}
