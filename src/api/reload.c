/*
 * api/reload.c — sl_loader_reload: a loaded loader reads another checkpoint of the same
 * architecture and shapes into the parameter memory it already holds (docs/spec/DESIGN.md §10).
 *
 *   prepare   the preparation pipeline (api/prepare.h) again, over the loader's configuration with
 *             another model or revision, agreed stage by stage; rank 0 resolves without a download
 *             behind the transfer, so that a failed download is a refusal, not a torn reload
 *   match     every rank's new plan against its loaded one (plan/plan_match.h), and the weights
 *             pre-check: a difference refuses the reload before any byte is written
 *   swap      the new pipeline and configuration replace the loader's; the broadcast groups are
 *             made again only where the new schedule's differ, the backend's transfer resources
 *             (NCCL communicators) always
 *   transfer  the load's own phases (api/loader.c): transfer into the existing pointers (mapped
 *             parameters written like any memory), tracking, statistics, report
 *
 * A failure after the swap leaves the loader failed but its table readable; which parameters hold
 * which checkpoint follows from each copy's progress (copy_done, copy_started): sl_reload_state.
 */
#include "shardload/core.h"

#include "api/config.h"
#include "api/last_error.h"
#include "api/loader_state.h"
#include "api/prepare.h"
#include "base/clock.h"
#include "base/util.h"
#include "comm/comm.h"
#include "plan/plan_match.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pipeline being prepared and what its stages need. */
typedef struct reload_ctx {
  sl_loader *l;
  sl__pipeline *pl;
  const sl_config *cfg;
  const char *what; /* the new checkpoint, for messages */
} reload_ctx;

/* The pipeline's hook: each stage agreed between ranks, as a load's; the catalog built by rank 0
 * with every file complete (no download behind the transfer), the plan matched. */
static sl_status after_stage(void *ctx, sl__prep_stage stage, sl_status st, double t0, sl__err *err) {
  reload_ctx *r = ctx;
  sl_loader *l = r->l;
  switch (stage) {
  case SL_PREP_OPTIONS:
    st = sl__comm_agree(&l->comm, st, err, "checking the reload's configuration");
    /* the loader's described plans again, before rank 0 builds the catalog (no spec then) */
    return st == SL_STATUS_OK ? sl__loader_share_plans(l, r->pl) : st;
  case SL_PREP_CATALOG:
    if (st == SL_STATUS_OK && l->comm.rank == 0)
      st = sl__prepare_catalog(r->cfg, &r->pl->opts, false, r->pl->described != NULL, &r->pl->prep, err);
    st = sl__loader_share_catalog(l, r->pl, st, t0);
    return st == SL_STATUS_OK ? sl__loader_find_storage(l, r->pl) : st;
  case SL_PREP_MODEL:
    st = sl__comm_agree(&l->comm, st, err, "instantiating the architecture spec");
    if (st == SL_STATUS_OK)
      st = sl__loader_twophase_choose(l, r->pl);
    l->res.t_model = sl__now() - t0;
    return st;
  case SL_PREP_PLAN: {
    sl__plan_side was = {.model = &l->pl.prep.model, .cat = &l->pl.prep.cat, .plan = &l->pl.plan};
    sl__plan_side now = {.model = &r->pl->prep.model, .cat = &r->pl->prep.cat, .plan = &r->pl->plan};
    if (st == SL_STATUS_OK)
      st = sl__plan_match(&was, &now, r->what, err);
    st = sl__comm_agree(&l->comm, st, err, "checking the new checkpoint against the loaded parameters");
    l->res.t_plan = sl__now() - t0;
    return st;
  }
  case SL_PREP_NONE:
    break;
  }
  return st;
}

/* The loader's configuration with the new model and revision (see sl_loader_reload). */
static sl_status reload_config(sl_loader *l, const char *model, const char *revision, sl_config **out) {
  const char *own = sl__config_str(l->cfg, "model");
  bool same = model == NULL || *model == '\0' || (own != NULL && strcmp(model, own) == 0);
  sl_config *cfg = sl__config_clone(l->cfg);
  sl_status st = cfg != NULL ? SL_STATUS_OK : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK && !same)
    st = sl_config_set(cfg, "model", model);
  /* Another repository starts from its default branch, not from this one's revision. */
  const char *rev = revision != NULL ? revision : same ? NULL : "main";
  if (st == SL_STATUS_OK && rev != NULL)
    st = sl_config_set(cfg, "revision", rev);
  if (st != SL_STATUS_OK && cfg != NULL && l->err.msg[0] == '\0')
    sl__err_set(&l->err, st, "sl_loader_reload: %s", sl_config_error(cfg));
  if (st != SL_STATUS_OK) {
    sl_config_destroy(cfg);
    cfg = NULL;
  }
  *out = cfg;
  return st;
}

/* Whether two sets of broadcast groups are the same groups in the same order. */
static bool same_groups(const sl__comm_groups *a, const sl__comm_groups *b) {
  if (a->n != b->n)
    return false;
  for (size_t g = 0; g < a->n; g++)
    if (a->group[g].n != b->group[g].n || a->group[g].broadcasts != b->group[g].broadcasts ||
        (a->group[g].n > 0 && /* a group without this rank lists no members: NULL on both */
         memcmp(a->group[g].members, b->group[g].members, a->group[g].n * sizeof *a->group[g].members) != 0))
      return false;
  return true;
}

static void set_states(sl_loader *l, uint8_t state) {
  for (size_t i = 0; i < l->pl.plan.n_lparams; i++)
    l->wr.reload_state[i] = state;
}

/* After a failed transfer: each parameter from its copies' progress (aliases: their target's). */
static void torn_states(sl_loader *l, size_t counts[3]) {
  const sl__rank_plan *p = &l->pl.plan;
  enum { ALL_DONE = 1, TOUCHED = 2 };
  uint8_t *f = l->wr.reload_state; /* flags first, states after */
  for (size_t i = 0; i < p->n_lparams; i++)
    f[i] = ALL_DONE;
  for (size_t c = 0; c < p->n_copies; c++) {
    const sl__copy *cp = &p->copies[c];
    uint64_t done = atomic_load(&l->wr.copy_done[c]);
    if (done != cp->rows * cp->row_bytes)
      f[cp->lparam] &= (uint8_t)~ALL_DONE;
    if (done > 0 || atomic_load(&l->wr.copy_started[c]) != 0)
      f[cp->lparam] |= TOUCHED;
  }
  for (size_t i = 0; i < p->n_lparams; i++)
    f[i] = (f[i] & ALL_DONE) ? SL_RELOAD_NEW : (f[i] & TOUCHED) ? SL_RELOAD_PARTIAL : SL_RELOAD_OLD;
  counts[0] = counts[1] = counts[2] = 0;
  for (size_t i = 0; i < p->n_lparams; i++) {
    if (p->lparams[i].alias_of != SL_NONE)
      f[i] = f[p->lparams[i].alias_of];
    counts[f[i]]++;
  }
}

/* A failure after the swap: the loader fails; every rank appends its own parameters' states. */
static sl_status torn(sl_loader *l, sl_status st, bool wrote) {
  size_t counts[3] = {l->pl.plan.n_lparams, 0, 0};
  if (wrote)
    torn_states(l, counts);
  else
    set_states(l, SL_RELOAD_OLD);
  l->wr.torn = true;
  size_t len = strlen(l->err.msg);
  snprintf(l->err.msg + len, sizeof l->err.msg - len,
           " [reload failed: on this rank %zu parameters hold the new checkpoint, %zu the previous one, %zu "
           "parts of both (sl_loader_reload_state)]",
           counts[SL_RELOAD_NEW], counts[SL_RELOAD_OLD], counts[SL_RELOAD_PARTIAL]);
  return sl__loader_fail(l, st);
}

/* The new pipeline, prepared, matched and pre-checked; on failure freed, the loader unchanged. */
static sl_status prepare(sl_loader *l, sl_config *cfg, sl__pipeline **out) {
  sl__pipeline *np = calloc(1, sizeof *np);
  sl_status st = np != NULL ? SL_STATUS_OK : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  st = sl__comm_agree(&l->comm, st, &l->err, "starting the reload");
  if (st == SL_STATUS_OK) {
    reload_ctx r = {.l = l, .pl = np, .cfg = cfg, .what = sl__config_str(cfg, "model")};
    /* builds_catalog false: the hook builds it on rank 0, with every file downloaded first. */
    sl__prep_driver d = {.cfg = cfg,
                         .world = (uint32_t)l->comm.size,
                         .rank = (uint32_t)l->comm.rank,
                         .builds_catalog = false,
                         .after = after_stage,
                         .ctx = &r};
    st = sl__pipeline_run(np, &d, SL_PREP_PLAN, &l->err);
  }
  if (st == SL_STATUS_OK)
    st = sl__loader_precheck(l, np);
  if (st != SL_STATUS_OK) {
    sl__pipeline_free(np);
    free(np);
    np = NULL;
  }
  *out = np;
  return st;
}

/* The new pipeline and configuration become the loader's; the groups follow the new schedule. */
static sl_status swap(sl_loader *l, sl__pipeline *np, sl_config *cfg) {
  double t0 = sl__now();
  sl__comm_groups groups = {0};
  sl_status st = sl__prepare_groups(&np->sched, &groups, &l->err);
  bool same = st == SL_STATUS_OK && same_groups(&groups, &l->groups);
  sl__pipeline old = l->pl;
  l->pl = *np;
  free(np);
  sl__prepare_groups_free(&l->groups);
  l->groups = groups; /* its members point into the new schedule, now the loader's */
  sl__pipeline_free(&old);
  sl_config_destroy(l->cfg);
  l->cfg = cfg;
  sl__comm_phase(&l->comm, "creating broadcast groups");
  st = sl__comm_agree(&l->comm, st, &l->err, "creating broadcast groups");
  /* Each rank lists only its own groups' members (plan/plan.h): the same branch everywhere only
   * when every rank finds its groups unchanged. */
  int same_all = same;
  if (st == SL_STATUS_OK)
    st = sl__comm_allreduce_min(&l->comm, &same_all, 1, "comparing broadcast groups", &l->err);
  same = same_all != 0;
  if (st == SL_STATUS_OK && !same) {
    st = sl__comm_groups_create(&l->comm, &l->groups, &l->err);
    st = sl__comm_agree(&l->comm, st, &l->err, "creating broadcast groups");
  }
  sl__backend *b = l->store.backend;
  if (st == SL_STATUS_OK && b->ops->begin_transfer != NULL)
    st = b->ops->begin_transfer(b, &l->groups, &l->err);
  l->res.t_alloc = sl__now() - t0;
  return st;
}

static sl_status reload_phases(sl_loader *l, const char *model, const char *revision) {
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK)
    return st;
  if (l->state != STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_reload needs a loaded loader (call sl_loader_load first)");
  size_t n = l->pl.plan.n_lparams, nc = l->pl.plan.n_copies;
  if (l->wr.reload_state == NULL)
    l->wr.reload_state = calloc(n + 1, 1);
  if (l->wr.copy_started == NULL)
    l->wr.copy_started = calloc(nc + 1, sizeof *l->wr.copy_started);
  sl_config *cfg = NULL;
  if (l->wr.reload_state == NULL || l->wr.copy_started == NULL)
    st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  else
    st = reload_config(l, model, revision, &cfg);
  /* Every rank takes part in the preparation's agreements, a failed one included. */
  sl__pipeline *np = NULL;
  if (st != SL_STATUS_OK)
    st = sl__comm_agree(&l->comm, st, &l->err, "starting the reload");
  else
    st = prepare(l, cfg, &np);
  if (st != SL_STATUS_OK) { /* refused: nothing written, the loader as it was */
    sl_config_destroy(cfg);
    if (l->wr.reload_state != NULL)
      set_states(l, SL_RELOAD_OLD);
    return st;
  }
  double t0 = sl__now(); /* the reload's own phases: as a load's, after its preparation */
  st = swap(l, np, cfg);
  if (st != SL_STATUS_OK)
    return torn(l, st, false);
  for (size_t c = 0; c < nc; c++) {
    atomic_store(&l->wr.copy_done[c], 0);
    atomic_store(&l->wr.copy_started[c], 0);
  }
  sl__transfer_stats_free(&l->res.tstats);
  sl__track_free(&l->res.track);
  l->res.have_track = false;
  sl__progress_begin(&l->progress, sl__config_str(l->cfg, "progress"), l->pl.opts.quiet, l->comm.rank,
                     &l->pl.sched, &l->pl.plan, l->wr.copy_done);
  sl__progress_set_phase(&l->progress, SL_PHASE_TRANSFER);
  st = sl__loader_transfer(l, true);
  if (st == SL_STATUS_OK)
    st = sl__loader_check_values(l);
  sl__progress_set_phase(&l->progress, SL_PHASE_TRACK);
  if (st == SL_STATUS_OK)
    st = sl__loader_track(l);
  sl__progress_stop(&l->progress, st == SL_STATUS_OK);
  if (st != SL_STATUS_OK)
    return torn(l, st, true);
  set_states(l, SL_RELOAD_NEW);
  l->wr.reloads++;
  st = sl__loader_statistics(l, t0);
  if (st != SL_STATUS_OK)
    return sl__loader_fail(l, st); /* every byte is new: the states say so */
  return sl__loader_report_file(l);
}

static sl_status loader_reload_impl(sl_loader *l, const char *model, const char *revision) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__device_scope scope; /* the caller's CUDA context is what it was once the reload returns */
  sl__device_scope_enter(&scope, l->pl.opts.device == SL_DEVICE_CUDA);
  sl_status st = reload_phases(l, model, revision);
  sl__device_scope_leave(&scope);
  return st;
}

sl_status sl_loader_reload(sl_loader *l, const char *model, const char *revision) {
  return sl__loader_return(loader_reload_impl(l, model, revision), l, __func__);
}

static sl_status loader_reload_state_impl(const sl_loader *l, size_t index, sl_reload_state *out) {
  if (l == NULL || out == NULL || l->store.table == NULL || index >= l->pl.plan.n_lparams)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = l->wr.reload_state != NULL ? (sl_reload_state)l->wr.reload_state[index] : SL_RELOAD_OLD;
  return SL_STATUS_OK;
}

sl_status sl_loader_reload_state(const sl_loader *l, size_t index, sl_reload_state *out) {
  return sl__loader_return(loader_reload_state_impl(l, index, out), l, __func__);
}
