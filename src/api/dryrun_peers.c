/*
 * api/dryrun_peers.c — the dry run of a load from peers (docs/spec/DESIGN.md §11; `shardload plan
 * --from-tp`): the donors' plans (the source layout) and the receivers' (the target layout) of
 * every rank from the headers alone, the messages of plan/peers.h between them, and per rank the
 * bytes sent (donors, and receivers that relay to others of their node) and received with the
 * predicted time of plan/peers.h's model (sl__peer_model_build, the one a real load's report
 * carries): per node max(bytes in, bytes out) of the messages between nodes over the network rate,
 * then its relays' bytes at the same-node rate (ranks_per_node consecutive ranks of the job per
 * node, donors first); nobody reads storage. No MPI, no tensor data.
 */
#include "api/config.h"
#include "api/last_error.h"
#include "api/prepare.h"
#include "base/clock.h"
#include "base/util.h"
#include "plan/peers.h"

#include <stdlib.h>
#include <string.h>

struct sl_dryrun_peers {
  uint32_t donors, receivers;
  sl__pipeline src, dst;
  sl__peer_plan pp;
  uint64_t *needed;  /* per job rank: its plan's bytes */
  uint32_t *node_of; /* per job rank */
  sl__peer_model model;
  uint32_t n_nodes, ranks_per_node;
  double network_gbps, seconds;
  sl__buf json, summary;
};

void sl_dryrun_peers_destroy(sl_dryrun_peers *d) {
  if (d == NULL)
    return;
  sl__pipeline_free(&d->src);
  sl__pipeline_free(&d->dst);
  sl__peer_plan_free(&d->pp);
  free(d->needed);
  free(d->node_of);
  sl__peer_model_free(&d->model);
  sl__buf_free(&d->json);
  sl__buf_free(&d->summary);
  free(d);
}

/* Every rank's copies of one side into ranks[first ..], its plans kept in plans[]. */
static sl_status side_plans(sl__pipeline *pl, uint32_t n, uint32_t first, bool donor, sl__rank_plan *plans,
                            sl__peer_rank *ranks, uint64_t *needed, uint32_t per_node, sl__err *err) {
  sl__plan_opts po;
  sl__pipeline_plan_opts(pl, false, &po);
  for (uint32_t k = 0; k < n; k++) {
    sl_status st = sl__plan_rank(&pl->prep.model, &pl->prep.cat, &po, k, false, &plans[first + k], err);
    if (st != SL_STATUS_OK)
      return st;
    ranks[first + k] = (sl__peer_rank){.donor = donor,
                                       .node = (first + k) / per_node,
                                       .copies = plans[first + k].copies,
                                       .n_copies = plans[first + k].n_copies};
    needed[first + k] = plans[first + k].bytes_needed;
  }
  return SL_STATUS_OK;
}

/* The messages, then the network terms of the time model per node. */
static sl_status peer_plan(sl_dryrun_peers *d, sl__err *err) {
  uint32_t world = d->donors + d->receivers;
  sl__rank_plan *plans = calloc(world, sizeof *plans);
  sl__peer_rank *ranks = calloc(world, sizeof *ranks);
  d->needed = calloc(world, sizeof *d->needed);
  d->node_of = calloc(world, sizeof *d->node_of);
  d->n_nodes = (world + d->ranks_per_node - 1) / d->ranks_per_node;
  sl_status st = plans != NULL && ranks != NULL && d->needed != NULL && d->node_of != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = side_plans(&d->src, d->donors, 0, true, plans, ranks, d->needed, d->ranks_per_node, err);
  if (st == SL_STATUS_OK)
    st = side_plans(&d->dst, d->receivers, d->donors, false, plans, ranks, d->needed, d->ranks_per_node, err);
  if (st == SL_STATUS_OK)
    st = sl__peer_plan_build(ranks, world, &d->src.prep.cat, 0, &d->pp, err);
  for (uint32_t k = 0; st == SL_STATUS_OK && k < world; k++)
    d->node_of[k] = ranks[k].node;
  if (st == SL_STATUS_OK)
    st = sl__peer_model_build(&d->pp, d->node_of, d->n_nodes, d->network_gbps, &d->model, err);
  for (uint32_t k = 0; plans != NULL && k < world; k++)
    sl__rank_plan_free(&plans[k]);
  free(plans);
  free(ranks);
  return st;
}

static sl_status one_side(sl__pipeline *pl, sl_config *cfg, int world, const char *which, sl__err *err) {
  if (world < 1)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "the %s world size must be at least 1", which);
  sl__prep_driver drv = {.cfg = cfg, .world = (uint32_t)world, .dry_run = true, .builds_catalog = true};
  return sl__pipeline_run(pl, &drv, SL_PREP_PLAN, err);
}

static sl_status dryrun_peers_create_impl(sl_config *target, int world_size, sl_config *source,
                                          int source_world, sl_dryrun_peers **out) {
  if (out == NULL || target == NULL || source == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl__config_clear_error(target);
  sl_dryrun_peers *d = calloc(1, sizeof *d);
  if (d == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&d->json, 0);
  sl__buf_init(&d->summary, 0);
  double t0 = sl__now();
  d->donors = source_world > 0 ? (uint32_t)source_world : 0;
  d->receivers = world_size > 0 ? (uint32_t)world_size : 0;
  sl_status st = one_side(&d->src, source, source_world, "source", &err);
  if (st == SL_STATUS_OK)
    st = one_side(&d->dst, target, world_size, "target", &err);
  if (st == SL_STATUS_OK && d->src.prep.cat.n_tensors != d->dst.prep.cat.n_tensors)
    st = sl__err_set(&err, SL_STATUS_INVALID_ARGUMENT, "the source and the target name different models");
  if (st == SL_STATUS_OK) {
    d->ranks_per_node = d->dst.opts.ranks_per_node > 0 ? d->dst.opts.ranks_per_node : 1;
    d->network_gbps = d->dst.opts.network_gbps;
    st = peer_plan(d, &err);
  }
  if (st != SL_STATUS_OK) {
    sl__config_set_error(target, &err);
    sl_dryrun_peers_destroy(d);
    return st;
  }
  d->seconds = sl__now() - t0;
  *out = d;
  return SL_STATUS_OK;
}

sl_status sl_dryrun_peers_create(sl_config *target, int world_size, sl_config *source, int source_world,
                                 sl_dryrun_peers **out) {
  return sl__api_return(dryrun_peers_create_impl(target, world_size, source, source_world, out),
                        sl__config_err(target), __func__);
}

static void layout_json(sl__buf *b, const char *key, const sl__opts *o, uint32_t ranks) {
  sl__buf_appendf(b, "\"%s\":{\"ranks\":%u,\"tp\":%u,\"pp\":%u,\"dp\":%u,\"expert_parallel\":%s}", key, ranks,
                  o->tp, o->pp, o->dp, o->enable_ep ? "true" : "false");
}

const char *sl_dryrun_peers_json(sl_dryrun_peers *d) {
  if (d == NULL)
    return NULL;
  sl__buf *b = &d->json;
  if (b->len > 0)
    return b->failed ? NULL : sl__buf_str(b);
  uint32_t world = d->donors + d->receivers;
  sl__buf_appendf(b, "{\"report_version\":2,\"from_peers\":true,\"model\":");
  sl__buf_json_str(b, d->dst.opts.model != NULL ? d->dst.opts.model : "");
  sl__buf_appendf(b, ",\"planning_seconds\":%.6f,\"world\":%u,", d->seconds, world);
  layout_json(b, "source", &d->src.opts, d->donors);
  sl__buf_putc(b, ',');
  layout_json(b, "target", &d->dst.opts, d->receivers);
  uint64_t total = 0, relayed = 0;
  for (size_t m = 0; m < d->pp.n_msgs; m++) {
    total += d->pp.msgs[m].nbytes;
    relayed += d->pp.msgs[m].relay ? d->pp.msgs[m].nbytes : 0;
  }
  const sl__peer_model *pm = &d->model;
  sl__buf_appendf(b,
                  ",\"messages\":%zu,\"largest_message_bytes\":%llu,\"bytes_transferred\":%llu,"
                  "\"bytes_relayed\":%llu,\"bytes_read\":0,",
                  d->pp.n_msgs, (unsigned long long)d->pp.max_msg, (unsigned long long)total,
                  (unsigned long long)relayed);
  sl__peer_model_json(b, pm, d->ranks_per_node);
  sl__buf_appendf(b, ",\"ranks\":[");
  for (uint32_t k = 0; k < world; k++)
    sl__buf_appendf(b,
                    "%s{\"rank\":%u,\"role\":\"%s\",\"side_rank\":%u,\"node\":%u,\"bytes_needed\":%llu,"
                    "\"bytes_read\":0,\"bytes_sent\":%llu,\"bytes_received\":%llu}",
                    k > 0 ? "," : "", k, k < d->donors ? "donor" : "receiver",
                    k < d->donors ? k : k - d->donors, d->node_of[k], (unsigned long long)d->needed[k],
                    (unsigned long long)d->pp.sent[k], (unsigned long long)d->pp.received[k]);
  sl__buf_appendf(b, "]}\n");
  return b->failed ? NULL : sl__buf_str(b);
}

const char *sl_dryrun_peers_summary(sl_dryrun_peers *d) {
  if (d == NULL)
    return NULL;
  sl__buf *b = &d->summary;
  if (b->len > 0)
    return b->failed ? NULL : sl__buf_str(b);
  const sl__opts *s = &d->src.opts, *t = &d->dst.opts;
  sl__buf_appendf(b,
                  "load from peers: %u donors (tp %u pp %u dp %u%s) -> %u receivers (tp %u pp %u dp %u%s)\n",
                  d->donors, s->tp, s->pp, s->dp, s->enable_ep ? " ep" : "", d->receivers, t->tp, t->pp,
                  t->dp, t->enable_ep ? " ep" : "");
  sl__buf_appendf(b, "%6s %-8s %5s %16s %16s %16s\n", "rank", "role", "node", "needed", "sent", "received");
  for (uint32_t k = 0; k < d->donors + d->receivers; k++)
    sl__buf_appendf(b, "%6u %-8s %5u %16llu %16llu %16llu\n", k, k < d->donors ? "donor" : "receiver",
                    d->node_of[k], (unsigned long long)d->needed[k], (unsigned long long)d->pp.sent[k],
                    (unsigned long long)d->pp.received[k]);
  sl__buf_appendf(b,
                  "messages %zu (largest %llu bytes), bytes read from storage 0\n"
                  "predicted %.3f s (%u nodes of %u ranks, network %g GB/s per node: %.3f s; relays within "
                  "a node at %g GB/s: %.3f s; other same-node messages free)\n",
                  d->pp.n_msgs, (unsigned long long)d->pp.max_msg, d->model.predicted_s, d->n_nodes,
                  d->ranks_per_node, d->network_gbps, d->model.network_s, SL_PEER_LOCAL_GBPS,
                  d->model.relay_s);
  return b->failed ? NULL : sl__buf_str(b);
}
