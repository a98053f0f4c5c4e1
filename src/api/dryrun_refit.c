/*
 * api/dryrun_refit.c — the dry run of a refit (docs/spec/DESIGN.md §13; `shardload plan
 * --from-publishers`): the receivers' plans of the target layout from the headers, the trainers'
 * blocks as described (plan/refit_describe.c), checked as a refit checks them, the plan of
 * plan/peers.h between them and its time model (plan/peer_model.c, the one a refit's report
 * carries): per node max(bytes in, bytes out) between nodes over network_gbps, then its relays
 * within the node. Trainers are the job's first ranks, receivers after them, ranks_per_node
 * consecutive ranks per node. No MPI, no tensor data.
 */
#include "api/config.h"
#include "api/last_error.h"
#include "api/prepare.h"
#include "base/clock.h"
#include "base/util.h"
#include "plan/refit.h"

#include <stdlib.h>
#include <string.h>

struct sl_dryrun_refit {
  uint32_t trainers, receivers;
  sl__pipeline dst;
  sl__refit_blocks *blocks;
  sl__peer_plan pp;
  uint64_t *needed; /* per job rank: a receiver's plan's bytes, a trainer's blocks' */
  uint32_t *node_of;
  sl__peer_model model;
  uint32_t n_nodes, ranks_per_node;
  double network_gbps, seconds;
  sl__buf json, summary;
};

void sl_dryrun_refit_destroy(sl_dryrun_refit *d) {
  if (d == NULL)
    return;
  sl__pipeline_free(&d->dst);
  for (uint32_t t = 0; d->blocks != NULL && t < d->trainers; t++)
    sl__refit_blocks_free(&d->blocks[t]);
  free(d->blocks);
  sl__peer_plan_free(&d->pp);
  free(d->needed);
  free(d->node_of);
  sl__peer_model_free(&d->model);
  sl__buf_free(&d->json);
  sl__buf_free(&d->summary);
  free(d);
}

/* The trainers' ranks and copies (their blocks checked), then the receivers'. */
static sl_status ranks_of(sl_dryrun_refit *d, sl__peer_rank *ranks, sl__copy **tcopies, sl__rank_plan *plans,
                          sl__err *err) {
  const sl__catalog *cat = &d->dst.prep.cat;
  uint32_t world = d->trainers + d->receivers;
  uint32_t *rank_of = calloc(d->trainers + 1, sizeof *rank_of);
  if (rank_of == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (uint32_t t = 0; t < d->trainers; t++)
    rank_of[t] = t;
  sl_status st = sl__refit_check(cat, d->blocks, d->trainers, rank_of, err);
  free(rank_of);
  for (uint32_t t = 0; t < d->trainers && st == SL_STATUS_OK; t++) {
    size_t n = 0;
    st = sl__refit_copies(cat, &d->blocks[t], &tcopies[t], &n, err);
    ranks[t] =
        (sl__peer_rank){.donor = true, .node = t / d->ranks_per_node, .copies = tcopies[t], .n_copies = n};
    for (size_t k = 0; k < n; k++)
      d->needed[t] += tcopies[t][k].row_bytes * tcopies[t][k].rows;
  }
  sl__plan_opts po;
  sl__pipeline_plan_opts(&d->dst, false, &po);
  for (uint32_t k = d->trainers; k < world && st == SL_STATUS_OK; k++) {
    st = sl__plan_rank(&d->dst.prep.model, cat, &po, k - d->trainers, false, &plans[k], err);
    ranks[k] = (sl__peer_rank){
        .node = k / d->ranks_per_node, .copies = plans[k].copies, .n_copies = plans[k].n_copies};
    d->needed[k] = plans[k].bytes_needed;
  }
  for (uint32_t k = 0; k < world; k++)
    d->node_of[k] = k / d->ranks_per_node;
  return st;
}

static sl_status plan_refit(sl_dryrun_refit *d, sl__err *err) {
  uint32_t world = d->trainers + d->receivers;
  sl__peer_rank *ranks = calloc(world + 1, sizeof *ranks);
  sl__copy **tcopies = calloc(d->trainers + 1, sizeof *tcopies);
  sl__rank_plan *plans = calloc(world + 1, sizeof *plans);
  d->needed = calloc(world + 1, sizeof *d->needed);
  d->node_of = calloc(world + 1, sizeof *d->node_of);
  d->n_nodes = (world + d->ranks_per_node - 1) / d->ranks_per_node;
  sl_status st = ranks != NULL && tcopies != NULL && plans != NULL && d->needed != NULL && d->node_of != NULL
                     ? ranks_of(d, ranks, tcopies, plans, err)
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl__peer_opts o = {.msg_bytes = d->dst.opts.bucket_bytes, .giver = "trainer", .whole_elements = true};
  if (st == SL_STATUS_OK)
    st = sl__peer_plan_build_opts(ranks, world, &d->dst.prep.cat, &o, &d->pp, err);
  if (st == SL_STATUS_OK)
    st = sl__peer_model_build(&d->pp, d->node_of, d->n_nodes, d->network_gbps, &d->model, err);
  for (uint32_t k = 0; plans != NULL && k < world; k++)
    sl__rank_plan_free(&plans[k]);
  for (uint32_t t = 0; tcopies != NULL && t < d->trainers; t++)
    free(tcopies[t]);
  free(plans);
  free(tcopies);
  free(ranks);
  return st;
}

static sl_status dryrun_refit_create_impl(sl_config *target, int world_size, const char *publishers,
                                          sl_dryrun_refit **out) {
  if (out == NULL || target == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl__config_clear_error(target);
  sl_dryrun_refit *d = calloc(1, sizeof *d);
  if (d == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&d->json, 0);
  sl__buf_init(&d->summary, 0);
  double t0 = sl__now();
  sl_status st = SL_STATUS_OK;
  if (world_size < 1)
    st = sl__err_set(&err, SL_STATUS_INVALID_ARGUMENT, "the receivers' world size must be at least 1");
  d->receivers = world_size > 0 ? (uint32_t)world_size : 0;
  sl__prep_driver drv = {.cfg = target, .world = d->receivers, .dry_run = true, .builds_catalog = true};
  if (st == SL_STATUS_OK)
    st = sl__pipeline_run(&d->dst, &drv, SL_PREP_PLAN, &err);
  if (st == SL_STATUS_OK)
    st = sl__refit_describe(publishers, &d->dst.prep.cat, &d->blocks, &d->trainers, &err);
  if (st == SL_STATUS_OK) {
    d->ranks_per_node = d->dst.opts.ranks_per_node > 0 ? d->dst.opts.ranks_per_node : 1;
    d->network_gbps = d->dst.opts.network_gbps;
    st = plan_refit(d, &err);
  }
  if (st != SL_STATUS_OK) {
    sl__config_set_error(target, &err);
    sl_dryrun_refit_destroy(d);
    return st;
  }
  d->seconds = sl__now() - t0;
  *out = d;
  return SL_STATUS_OK;
}

sl_status sl_dryrun_refit_create(sl_config *target, int world_size, const char *publishers,
                                 sl_dryrun_refit **out) {
  return sl__api_return(dryrun_refit_create_impl(target, world_size, publishers, out), sl__config_err(target),
                        __func__);
}

static uint64_t sum_msgs(const sl__peer_plan *pp, bool relays_only) {
  uint64_t total = 0;
  for (size_t m = 0; m < pp->n_msgs; m++)
    total += !relays_only || pp->msgs[m].relay ? pp->msgs[m].nbytes : 0;
  return total;
}

const char *sl_dryrun_refit_json(sl_dryrun_refit *d) {
  if (d == NULL)
    return NULL;
  sl__buf *b = &d->json;
  if (b->len > 0)
    return b->failed ? NULL : sl__buf_str(b);
  const sl__opts *o = &d->dst.opts;
  sl__buf_appendf(b, "{\"report_version\":2,\"refit\":true,\"dry_run\":true,\"model\":");
  sl__buf_json_str(b, o->model != NULL ? o->model : "");
  sl__buf_appendf(
      b,
      ",\"planning_seconds\":%.6f,\"world\":%u,\"trainers\":%u,\"receivers\":{\"ranks\":%u,\"tp\":%u,"
      "\"pp\":%u,\"dp\":%u,\"expert_parallel\":%s},\"parts\":%zu,\"messages\":%zu,"
      "\"largest_message_bytes\":%llu,\"bytes_transferred\":%llu,\"bytes_relayed\":%llu,\"bytes_read\":0,",
      d->seconds, d->trainers + d->receivers, d->trainers, d->receivers, o->tp, o->pp, o->dp,
      o->enable_ep ? "true" : "false", d->pp.n_parts, d->pp.n_msgs, (unsigned long long)d->pp.max_msg,
      (unsigned long long)sum_msgs(&d->pp, false), (unsigned long long)sum_msgs(&d->pp, true));
  const sl__peer_model *pm = &d->model;
  sl__peer_model_json(b, pm, d->ranks_per_node);
  sl__buf_appendf(b, ",\"ranks\":[");
  for (uint32_t k = 0; k < d->trainers + d->receivers; k++)
    sl__buf_appendf(b,
                    "%s{\"rank\":%u,\"role\":\"%s\",\"side_rank\":%u,\"node\":%u,\"bytes_held\":%llu,"
                    "\"bytes_sent\":%llu,\"bytes_received\":%llu}",
                    k > 0 ? "," : "", k, k < d->trainers ? "trainer" : "receiver",
                    k < d->trainers ? k : k - d->trainers, d->node_of[k], (unsigned long long)d->needed[k],
                    (unsigned long long)d->pp.sent[k], (unsigned long long)d->pp.received[k]);
  sl__buf_appendf(b, "]}\n");
  return b->failed ? NULL : sl__buf_str(b);
}

const char *sl_dryrun_refit_summary(sl_dryrun_refit *d) {
  if (d == NULL)
    return NULL;
  sl__buf *b = &d->summary;
  if (b->len > 0)
    return b->failed ? NULL : sl__buf_str(b);
  const sl__opts *t = &d->dst.opts;
  sl__buf_appendf(b, "refit: %u trainers -> %u receivers (tp %u pp %u dp %u%s)\n", d->trainers, d->receivers,
                  t->tp, t->pp, t->dp, t->enable_ep ? " ep" : "");
  sl__buf_appendf(b, "%6s %-8s %5s %16s %16s %16s\n", "rank", "role", "node", "held/needed", "sent",
                  "received");
  for (uint32_t k = 0; k < d->trainers + d->receivers; k++)
    sl__buf_appendf(b, "%6u %-8s %5u %16llu %16llu %16llu\n", k, k < d->trainers ? "trainer" : "receiver",
                    d->node_of[k], (unsigned long long)d->needed[k], (unsigned long long)d->pp.sent[k],
                    (unsigned long long)d->pp.received[k]);
  sl__buf_appendf(
      b,
      "messages %zu (largest %llu bytes), bytes moved %llu (relayed within nodes %llu)\n"
      "predicted %.3f s per refit (%u nodes of %u ranks, network %g GB/s per node: %.3f s; relays "
      "within a node at %g GB/s: %.3f s); the plan is made once and reused by later refits\n",
      d->pp.n_msgs, (unsigned long long)d->pp.max_msg, (unsigned long long)sum_msgs(&d->pp, false),
      (unsigned long long)sum_msgs(&d->pp, true), d->model.predicted_s, d->n_nodes, d->ranks_per_node,
      d->network_gbps, d->model.network_s, SL_PEER_LOCAL_GBPS, d->model.relay_s);
  return b->failed ? NULL : sl__buf_str(b);
}
