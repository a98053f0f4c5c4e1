/*
 * api/dryrun.c — the public dry-run planner: every rank's plan of a world of any size, from the
 * headers alone (no MPI, no tensor data), summarized by plan/stats.c.
 */
#include "api/config.h"
#include "plan/stats.h"
#include "plan/plan.h"
#include "api/prepare.h"

#include <stdlib.h>
#include <string.h>

struct sl_dryrun {
  uint32_t world;
  sl__opts opts;
  sl__prepared prep;
  sl__schedule sched;
  uint32_t *pp_starts;
  double seconds;
  sl__figures fig;
  sl__buf json;
  sl__buf summary;
};

void sl_dryrun_destroy(sl_dryrun *d) {
  if (d == NULL)
    return;
  sl__prepared_free(&d->prep);
  sl__schedule_free(&d->sched);
  free(d->pp_starts);
  sl__buf_free(&d->json);
  sl__buf_free(&d->summary);
  free(d);
}

sl_status sl_dryrun_create(sl_config *config, int world_size, sl_dryrun **out) {
  if (out == NULL || config == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl__config_clear_error(config);
  sl_dryrun *d = calloc(1, sizeof *d);
  if (d == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&d->json, 0);
  sl__buf_init(&d->summary, 0);
  double t0 = sl__now();
  sl_status st = world_size >= 1
                     ? SL_STATUS_OK
                     : sl__err_set(&err, SL_STATUS_INVALID_ARGUMENT, "world size must be at least 1");
  d->world = (uint32_t)world_size;
  if (st == SL_STATUS_OK)
    st = sl__opts_from_config(config, &d->opts, &err);
  sl__layout layout;
  if (st == SL_STATUS_OK)
    st = sl__layout_init(&layout, d->opts.tp, d->opts.pp, d->opts.dp, d->world, &err);
  if (st == SL_STATUS_OK)
    st = sl__prepare_catalog(config, &d->opts, &d->prep, &err);
  if (st == SL_STATUS_OK)
    st = sl__prepare_model(&d->opts, &d->prep, &err);
  if (st == SL_STATUS_OK)
    st = sl__pp_starts(&d->opts, d->prep.model.n_layers, &d->pp_starts, &err);
  if (st == SL_STATUS_OK) {
    sl__plan_opts po;
    sl__plan_opts_from(&d->opts, &layout, d->pp_starts, &po);
    st = sl__schedule_build(&d->prep.model, &d->prep.cat, &po, SL_NONE, NULL, &d->sched, &err);
  }
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &err);
    sl_dryrun_destroy(d);
    return st;
  }
  d->seconds = sl__now() - t0;
  sl__figures_compute(d->sched.stats, d->world, d->sched.unique_bytes, d->opts.storage_gbps,
                      d->opts.network_gbps, d->opts.ranks_per_node, &d->fig);
  *out = d;
  return SL_STATUS_OK;
}

int sl_dryrun_world_size(const sl_dryrun *d) {
  return d != NULL ? (int)d->world : 0;
}

sl_status sl_dryrun_rank_stats(const sl_dryrun *d, int rank, sl_rank_stats *out) {
  if (d == NULL || out == NULL || rank < 0 || (uint32_t)rank >= d->world)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = d->sched.stats[rank];
  return SL_STATUS_OK;
}

static void header_json(sl_dryrun *d, sl__buf *b) {
  const sl__model *m = &d->prep.model;
  sl__buf_appendf(b, "{\"model\":");
  sl__buf_json_str(b, d->opts.model);
  sl__buf_appendf(b, ",\"architecture\":");
  sl__buf_json_str(b, m->architecture != NULL ? m->architecture : "");
  sl__buf_appendf(
      b,
      ",\"layout\":\"%s\",\"tp\":%u,\"pp\":%u,\"dp\":%u,\"expert_parallel\":%s,\"experts\":%llu,"
      "\"layers\":%u,\"checkpoint_bytes\":%llu,\"files\":%zu,\"tensors\":%zu,\"planning_seconds\":%.3f,"
      "\"pieces\":%zu,\"broadcast_groups\":%zu,\"buckets\":%zu,\"tensors_read\":%llu,"
      "\"tensors_read_by_one_rank\":%llu,\"expert_tensors\":%llu,\"expert_tensors_read_by_one_rank\":%llu,",
      m->layout == SL_LAYOUT_VLLM ? "vllm" : "checkpoint", d->opts.tp, d->opts.pp, d->opts.dp,
      d->opts.enable_ep ? "true" : "false", (unsigned long long)m->experts, m->n_layers,
      (unsigned long long)d->sched.checkpoint_bytes, d->prep.cat.n_files, d->prep.cat.n_tensors, d->seconds,
      d->sched.n_pieces, d->sched.n_groups, d->sched.n_buckets, (unsigned long long)d->sched.tensors_read,
      (unsigned long long)d->sched.tensors_one_reader, (unsigned long long)d->sched.expert_tensors,
      (unsigned long long)d->sched.expert_tensors_one_reader);
}

const char *sl_dryrun_json(sl_dryrun *d) {
  if (d == NULL)
    return NULL;
  if (d->json.len == 0) {
    header_json(d, &d->json);
    sl__figures_json(&d->json, &d->fig);
    sl__figures_ranks_json(&d->json, d->sched.stats, d->world);
    sl__buf_appendf(&d->json, "}\n");
  }
  return d->json.failed ? NULL : sl__buf_str(&d->json);
}

const char *sl_dryrun_summary(sl_dryrun *d) {
  if (d == NULL)
    return NULL;
  if (d->summary.len == 0) {
    const sl__model *m = &d->prep.model;
    char ck[32];
    sl__fmt_bytes(ck, sizeof ck, d->sched.checkpoint_bytes);
    sl__buf_appendf(&d->summary,
                    "model: %s (%s, %u layers, %llu experts), %zu files, %zu tensors, %s\n"
                    "layout: tp=%u pp=%u dp=%u%s, %s parameters\n"
                    "planned in %.3f s: %zu distinct slices, %zu broadcast groups, %zu buckets\n"
                    "tensors read whole by one rank: %llu of %llu; expert tensors: %llu of %llu\n",
                    d->opts.model, m->architecture != NULL ? m->architecture : "?", m->n_layers,
                    (unsigned long long)m->experts, d->prep.cat.n_files, d->prep.cat.n_tensors, ck,
                    d->opts.tp, d->opts.pp, d->opts.dp, d->opts.enable_ep ? " with expert parallelism" : "",
                    m->layout == SL_LAYOUT_VLLM ? "vllm" : "checkpoint", d->seconds, d->sched.n_pieces,
                    d->sched.n_groups, d->sched.n_buckets, (unsigned long long)d->sched.tensors_one_reader,
                    (unsigned long long)d->sched.tensors_read,
                    (unsigned long long)d->sched.expert_tensors_one_reader,
                    (unsigned long long)d->sched.expert_tensors);
    sl__figures_table(&d->summary, &d->fig, d->sched.stats, 64);
  }
  return d->summary.failed ? NULL : sl__buf_str(&d->summary);
}
