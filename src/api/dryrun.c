/*
 * api/dryrun.c — the public dry-run planner: every rank's plan of a world of any size, from the
 * headers alone (no MPI, no tensor data): the preparation pipeline (api/prepare.h) in one
 * process, summarized by plan/stats.c and reported by output/report.c.
 */
#include "api/abi.h"
#include "api/config.h"
#include "api/last_error.h"
#include "api/prepare.h"
#include "base/clock.h"
#include "output/report.h"
#include "plan/plan.h"
#include "plan/stats.h"

#include <stdlib.h>
#include <string.h>

struct sl_dryrun {
  uint32_t world;
  sl_config *cfg; /* private copy: the options (and so the reports) point into it */
  sl__pipeline pl;
  double seconds;
  sl__figures fig;
  sl__buf json;
  sl__buf summary;
};

void sl_dryrun_destroy(sl_dryrun *d) {
  if (d == NULL)
    return;
  sl__pipeline_free(&d->pl);
  sl__figures_free(&d->fig);
  sl__buf_free(&d->json);
  sl__buf_free(&d->summary);
  sl_config_destroy(d->cfg);
  free(d);
}

/* sl_dryrun_create and sl_dryrun_create_described (plans: one per rank, or NULL). */
static sl_status create(sl_config *config, int world_size, const sl_plan *const *plans, sl_dryrun **out) {
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
  /* The caller may destroy its config before asking for the reports: they use a copy. */
  d->cfg = sl__config_clone(config);
  if (st == SL_STATUS_OK && d->cfg == NULL)
    st = sl__err_set(&err, SL_STATUS_NOMEM, "out of memory");
  /* The whole pipeline here, for no rank in particular: the schedule holds every rank's figures. */
  sl__prep_driver drv = {.cfg = d->cfg, .world = d->world, .dry_run = true, .builds_catalog = true};
  if (st == SL_STATUS_OK && plans != NULL)
    st = sl__described_from_plans(d->world, plans, &d->pl.described, &err);
  if (st == SL_STATUS_OK)
    st = sl__pipeline_run(&d->pl, &drv, SL_PREP_PLAN, &err);
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &err);
    sl_dryrun_destroy(d);
    return st;
  }
  d->seconds = sl__now() - t0;
  const sl__opts *o = &d->pl.opts;
  sl__figures_compute(d->pl.sched.stats, d->world, d->pl.sched.unique_bytes, o->storage_gbps, o->network_gbps,
                      o->ranks_per_node, &d->fig);
  /* No job: blocks of ranks_per_node consecutive ranks per node. */
  sl__node_layout layout = {.ranks_per_node = o->ranks_per_node};
  st = sl__figures_predict(&d->fig, d->pl.sched.stats, &d->pl.sched, &d->pl.prep.cat, &layout, &err);
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &err);
    sl_dryrun_destroy(d);
    return st;
  }
  *out = d;
  return SL_STATUS_OK;
}

sl_status sl_dryrun_create(sl_config *config, int world_size, sl_dryrun **out) {
  return sl__api_return(create(config, world_size, NULL, out), sl__config_err(config), __func__);
}

static sl_status dryrun_create_described_impl(sl_config *config, int world_size, const sl_plan *const *plans,
                                              sl_dryrun **out) {
  if (plans == NULL) {
    if (out != NULL)
      *out = NULL;
    return SL_STATUS_INVALID_ARGUMENT;
  }
  return create(config, world_size, plans, out);
}

sl_status sl_dryrun_create_described(sl_config *config, int world_size, const sl_plan *const *plans,
                                     sl_dryrun **out) {
  return sl__api_return(dryrun_create_described_impl(config, world_size, plans, out), sl__config_err(config),
                        __func__);
}

int sl_dryrun_world_size(const sl_dryrun *d) {
  return d != NULL ? (int)d->world : 0;
}

static sl_status dryrun_rank_stats_impl(const sl_dryrun *d, int rank, sl_rank_stats *out) {
  if (d == NULL || out == NULL || rank < 0 || (uint32_t)rank >= d->world)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_rank_stats full = d->pl.sched.stats[rank];
  return sl__sized_out(out, &full, sizeof full, SL__RANK_STATS_SIZE_V1, "sl_rank_stats", NULL);
}

sl_status sl_dryrun_rank_stats(const sl_dryrun *d, int rank, sl_rank_stats *out) {
  return sl__api_return(dryrun_rank_stats_impl(d, rank, out), NULL, __func__);
}

static sl__plan_report report_of(const sl_dryrun *d) {
  const sl__opts *o = &d->pl.opts;
  return (sl__plan_report){.setup = {.model = o->model,
                                     .cat = &d->pl.prep.cat,
                                     .m = &d->pl.prep.model,
                                     .sched = &d->pl.sched,
                                     .tp = o->tp,
                                     .pp = o->pp,
                                     .dp = o->dp,
                                     .expert_parallel = o->enable_ep,
                                     .storage = sl__storage_name(o->storage),
                                     .vis = sl__pipeline_vis(&d->pl)},
                           .world = d->world,
                           .seconds = d->seconds,
                           .fig = &d->fig};
}

const char *sl_dryrun_json(sl_dryrun *d) {
  if (d == NULL)
    return NULL;
  if (d->json.len == 0) {
    sl__plan_report r = report_of(d);
    sl__report_plan_json(&r, &d->json);
  }
  return d->json.failed ? NULL : sl__buf_str(&d->json);
}

const char *sl_dryrun_summary(sl_dryrun *d) {
  if (d == NULL)
    return NULL;
  if (d->summary.len == 0) {
    sl__plan_report r = report_of(d);
    sl__report_plan_summary(&r, &d->summary);
  }
  return d->summary.failed ? NULL : sl__buf_str(&d->summary);
}
