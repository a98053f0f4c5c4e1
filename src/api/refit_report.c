/*
 * api/refit_report.c — the report of one refit (see api/refit_job.h), the same JSON on every rank
 * of the job: the version, whether the plan was made by this call or reused, the parts and bytes
 * moved, each node's link in the plan's time model (plan/peer_model.c: messages between nodes at
 * network_gbps per node, relays within a node at the same-node rate) and its prediction, and
 * every rank's measured figures. docs/REPORT.md, "Refit report".
 */
#include "api/refit_job.h"

#include <stdlib.h>

static void links(sl__buf *b, const sl__peer_model *m, bool ok) {
  sl__buf_appendf(b,
                  ",\"prediction\":{\"network_gbps_per_node\":%g,\"local_gbps\":%g,\"network_seconds\":%.6f,"
                  "\"relay_seconds\":%.6f,\"predicted_seconds\":%.6f},\"nodes\":[",
                  m->network_gbps, SL_PEER_LOCAL_GBPS, ok ? m->network_s : 0, ok ? m->relay_s : 0,
                  ok ? m->predicted_s : 0);
  sl__peer_model_nodes_json(b, m, ok ? m->n_nodes : 0);
  sl__buf_putc(b, ']');
}

void sl__refit_report(sl__buf *out, const sl__refit_side *side, const sl__peer_plan *moved,
                      const sl__refit_rank_fig *figs, double plan_s) {
  const sl__refit_session *ss = side->session;
  sl__buf_free(out);
  sl__buf_init(out, 0);
  uint64_t total = 0, relayed = 0;
  for (size_t m = 0; m < moved->n_msgs; m++) {
    total += moved->msgs[m].nbytes;
    relayed += moved->msgs[m].relay ? moved->msgs[m].nbytes : 0;
  }
  uint64_t planned = 0;
  for (size_t m = 0; m < ss->pp.n_msgs; m++)
    planned += ss->pp.msgs[m].nbytes;
  double transfer = 0, wall = 0;
  for (uint32_t k = 0; k < ss->world; k++) {
    transfer = figs[k].transfer_s > transfer ? figs[k].transfer_s : transfer;
    wall = figs[k].total_s > wall ? figs[k].total_s : wall;
  }
  sl__buf_appendf(
      out,
      "{\"report_version\":2,\"refit\":true,\"version\":%llu,\"planned\":%s,\"planning_seconds\":%.6f,"
      "\"world\":%u,\"trainers\":%u,\"receivers\":%u,\"parts\":%zu,\"parts_moved\":%zu,\"messages\":%zu,"
      "\"largest_message_bytes\":%llu,\"bytes_planned\":%llu,\"bytes_transferred\":%llu,"
      "\"bytes_relayed\":%llu,\"transfer_seconds\":%.6f,\"total_seconds\":%.6f",
      (unsigned long long)side->version, side->planned ? "true" : "false", plan_s, ss->world, ss->n_trainers,
      ss->n_receivers, ss->pp.n_parts, moved->n_parts, moved->n_msgs, (unsigned long long)moved->max_msg,
      (unsigned long long)planned, (unsigned long long)total, (unsigned long long)relayed, transfer, wall);
  sl__peer_model pm = {0};
  sl__err err;
  sl__err_clear(&err);
  bool ok =
      sl__peer_model_build(moved, ss->node_of, ss->n_nodes, ss->network_gbps, &pm, &err) == SL_STATUS_OK;
  links(out, &pm, ok);
  if (ok)
    sl__peer_model_free(&pm);
  sl__buf_appendf(out, ",\"ranks\":[");
  for (uint32_t k = 0; k < ss->world; k++)
    sl__buf_appendf(out,
                    "%s{\"rank\":%u,\"role\":\"%s\",\"node\":%u,\"bytes_sent\":%llu,\"bytes_received\":%llu,"
                    "\"messages\":%llu,\"transfer_seconds\":%.6f,\"total_seconds\":%.6f}",
                    k > 0 ? "," : "", k, figs[k].trainer ? "trainer" : "receiver", figs[k].node,
                    (unsigned long long)figs[k].bytes_sent, (unsigned long long)figs[k].bytes_received,
                    (unsigned long long)figs[k].messages, figs[k].transfer_s, figs[k].total_s);
  sl__buf_appendf(out, "]}\n");
}
