/*
 * api/loader.c — the public loader API: the pipeline of docs/spec/DESIGN.md §2 driven phase by phase, each
 * phase ending with an agreement between ranks on its status.
 *
 *   create    copy and validate the configuration, duplicate the communicator
 *   download  rank 0 resolves the model and builds the catalog; it and the spec text are
 *             broadcast; every rank instantiates the model
 *   plan      every rank computes its part of the schedule of all ranks (plan/plan.h
 *             sl__plan_opts.local) and keeps its own plan; the table of local parameters becomes
 *             visible (callers may bind their own buffers)
 *   load      allocate, pre-check missing/unexpected weights, transfer, reduce tracking bitmaps,
 *             gather statistics, write the report and the pre-sharded copy when configured
 *
 * Create, download and plan are the stages of the preparation pipeline (api/prepare.h), run with
 * a hook that agrees between ranks after each stage; the loader's state is api/loader_state.h; the
 * statistics and reports after a load are gathered by api/load_stats.c (written by output/report.c).
 */
#include "shardload/shardload.h"

#include "api/bind.h"
#include "api/config.h"
#include "api/last_error.h"
#include "api/loader_state.h"
#include "api/options.h"
#include "api/params.h"
#include "api/prepare.h"
#include "backend/backend.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/memory.h"
#include "base/util.h"
#include "comm/comm.h"
#include "engine/coverage.h"
#include "engine/filemap.h"
#include "engine/nodes.h"
#include "engine/progress.h"
#include "engine/staging.h"
#include "engine/transfer.h"
#include "output/report.h"
#include "output/save.h"
#include "plan/plan.h"
#include "plan/stats.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static sl_status advance(sl_loader *l, sl__prep_stage until);

/* ---------------------------------------------------------------------------------------------
 * Create / destroy
 * ------------------------------------------------------------------------------------------- */

/* The communicator's implementation (comm/comm.h), made over what the caller passed. */
typedef sl_status (*comm_init_fn)(sl__comm *c, const void *arg, sl__err *err);

static sl_status init_mpi(sl__comm *c, const void *comm, sl__err *err) {
  return sl__comm_init_mpi(c, comm, err);
}

static sl_status init_caller(sl__comm *c, const void *ops, sl__err *err) {
  return sl__comm_init_caller(c, ops, err);
}

static sl_status create_over(sl_config *config, comm_init_fn init, const void *arg, sl_loader **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  if (config == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__config_clear_error(config);
  sl_loader *l = calloc(1, sizeof *l);
  if (l == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&l->res.report, 0);
  sl__buf_init(&l->res.summary, 0);
  l->dev.cuda_device = -1;
  sl_status st = init(&l->comm, arg, &l->err);
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &l->err);
    free(l);
    return st;
  }
  sl__log_set_rank(l->comm.rank);
  /* Creation is bounded like every later wait: the configuration's timeout_s is only known once it
   * is checked, so the default deadline holds until then. */
  sl__comm_set_timeout(&l->comm, SL_TIMEOUT_DEFAULT_S);
  /* The job's nodes, once: read-ahead only on one node (engine/reads.c); per-node report figures. */
  sl__err nerr;
  if (sl__job_nodes_detect(&l->comm, &l->nodes, &nerr) != SL_STATUS_OK)
    SL_WARN("the job's nodes are unknown (per-node figures use ranks_per_node): %s", nerr.msg);
  l->cfg = sl__config_clone(config);
  if (l->cfg != NULL)
    st = advance(l, SL_PREP_OPTIONS);
  else
    st = sl__comm_agree(&l->comm, sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory"), &l->err,
                        "checking the configuration");
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &l->err);
    sl__job_nodes_free(&l->nodes);
    sl__comm_free(&l->comm);
    sl__pipeline_free(&l->pl);
    sl_config_destroy(l->cfg);
    free(l);
    return st;
  }
  *out = l;
  return SL_STATUS_OK;
}

sl_status sl_loader_create(sl_config *config, MPI_Comm comm, sl_loader **out) {
  return sl__api_return(create_over(config, init_mpi, &comm, out), sl__config_err(config), __func__);
}

sl_status sl_loader_create_ops(sl_config *config, const sl_comm_ops *ops, sl_loader **out) {
  return sl__api_return(create_over(config, init_caller, ops, out), sl__config_err(config), __func__);
}

/* A destroy that talks to no rank: the duplicated MPI communicators are left to MPI_Finalize
 * (MPI_Comm_free is collective) and NCCL communicators still open are aborted, not finalized. */
void sl_loader_release_local(sl_loader *l) {
  if (l == NULL)
    return;
  l->comm.free_local = true;
  if (l->store.backend != NULL)
    l->store.backend->failed = true;
  sl_loader_destroy(l);
}

static void free_buffers(sl_loader *l) {
  if (l->store.param_ptr != NULL && l->store.backend != NULL) {
    for (size_t i = 0; i < l->pl.plan.n_lparams; i++)
      if (l->store.param_ptr[i] != NULL && !l->store.bound[i] && !l->store.mapped[i] &&
          l->pl.plan.lparams[i].alias_of == SL_NONE)
        l->store.backend->ops->release(l->store.backend, l->store.param_ptr[i]);
  }
  sl__filemaps_free(&l->store.maps);
  free(l->store.param_ptr);
  l->store.param_ptr = NULL;
}

void sl_loader_destroy(sl_loader *l) {
  if (l == NULL)
    return;
  sl__device_scope scope; /* freeing device memory makes the loader's device current */
  sl__device_scope_enter(&scope, l->store.backend != NULL && l->store.backend->device >= 0);
  sl__params_loader_destroy(l); /* memory still referenced is taken over, not freed here */
  free_buffers(l);
  sl__transfer_stats_free(&l->res.tstats);
  if (l->store.backend != NULL)
    l->store.backend->ops->destroy(l->store.backend);
  sl__device_scope_leave(&scope);
  free(l->store.bound);
  free(l->store.mapped);
  free(l->store.cast);
  free((void *)l->wr.copy_done);
  free((void *)l->wr.copy_started);
  free(l->wr.reload_state);
  sl__refit_state_free(l->refit);
  free(l->store.table);
  free(l->store.table_strings);
  free(l->res.records);
  free(l->described.blob);
  sl__job_nodes_free(&l->nodes);
  sl__track_free(&l->res.track);
  sl__prepare_groups_free(&l->groups);
  sl__pipeline_free(&l->pl);
  sl__buf_free(&l->res.report);
  sl__buf_free(&l->res.summary);
  sl__comm_free(&l->comm);
  sl_config_destroy(l->cfg);
  free(l);
}

const char *sl_loader_error(const sl_loader *l) {
  return l != NULL ? l->err.msg : "";
}

/* A failed collective phase leaves the loader unusable (but destroyable). */
sl_status sl__loader_fail(sl_loader *l, sl_status st) {
  if (st != SL_STATUS_OK) {
    l->state = STATE_FAILED;
    /* Peers may have aborted: the backend's teardown must not wait for them. */
    if (l->store.backend != NULL)
      l->store.backend->failed = true;
  }
  return st;
}

/* Every public call starts with a clean message (the first error of *this* call wins), except
 * after a failed collective phase: then the message that failed the ranks stays. */
sl_status sl__loader_begin(sl_loader *l) {
  if (l->state == STATE_FAILED) {
    char old[SL_ERR_MSG_MAX];
    snprintf(old, sizeof old, "%s", l->err.msg);
    sl__err_clear(&l->err);
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "the loader failed earlier: %s", old);
  }
  sl__err_clear(&l->err);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Download and plan: the preparation pipeline, agreed between ranks after every stage
 * ------------------------------------------------------------------------------------------- */

/* After the catalog stage (built on rank 0 only): rank 0 sends the catalog and the spec's text to
 * every rank. */
sl_status sl__loader_share_catalog(sl_loader *l, sl__pipeline *pl, sl_status st, double t0) {
  uint8_t *blob = NULL;
  size_t blob_len = 0;
  if (st == SL_STATUS_OK && l->comm.rank == 0)
    st = sl__catalog_serialize(&pl->prep.cat, &blob, &blob_len, &l->err);
  l->res.t_resolve = sl__now() - t0;
  st = sl__comm_agree(&l->comm, st, &l->err, "resolving the model");
  if (st != SL_STATUS_OK) {
    free(blob);
    return st;
  }
  double t1 = sl__now();
  sl__comm_phase(&l->comm, "receiving the catalog");
  st = sl__comm_bcast_blob(&l->comm, &blob, &blob_len, 0, &l->err);
  uint8_t *spec = (uint8_t *)pl->prep.spec_text;
  size_t spec_len = pl->prep.spec_len;
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&l->comm, &spec, &spec_len, 0, &l->err);
  if (st == SL_STATUS_OK && l->comm.rank != 0) {
    pl->prep.spec_text = (char *)spec;
    pl->prep.spec_len = spec_len;
    st = sl__catalog_deserialize(blob, blob_len, &pl->prep.cat, &l->err);
  }
  free(blob);
  st = sl__comm_agree(&l->comm, st, &l->err, "receiving the catalog");
  l->res.t_catalog = sl__now() - t1;
  return st;
}

static sl_status build_table(sl_loader *l);

/* The pipeline's hook: every stage ends with an agreement between ranks (and its timing). */
static sl_status after_stage(void *ctx, sl__prep_stage stage, sl_status st, double t0, sl__err *err) {
  sl_loader *l = ctx;
  switch (stage) {
  case SL_PREP_OPTIONS:
    /* The watchdog bounds every wait from here on (the default when this rank's options failed). */
    sl__comm_set_timeout(&l->comm, st == SL_STATUS_OK ? l->pl.opts.timeout_s : SL_TIMEOUT_DEFAULT_S);
    if (st == SL_STATUS_OK && l->pl.opts.device == SL_DEVICE_CUDA) {
      char why[512];
      if (!sl__cuda_available(why, sizeof why))
        st = sl__err_set(err, SL_STATUS_NO_DEVICE,
                         "device cuda (--device cuda): no CUDA device available (%s)", why);
    }
    if (st == SL_STATUS_OK)
      st = sl__loader_outputs_ready(l);
    return sl__comm_agree(&l->comm, st, err, "checking the configuration");
  case SL_PREP_CATALOG:
    st = sl__loader_share_catalog(l, &l->pl, st, t0);
    return st == SL_STATUS_OK ? sl__loader_find_storage(l, &l->pl) : st;
  case SL_PREP_MODEL:
    st = sl__comm_agree(&l->comm, st, err, "instantiating the architecture spec");
    if (st == SL_STATUS_OK)
      st = sl__loader_twophase_choose(l, &l->pl);
    l->res.t_model = sl__now() - t0;
    return st;
  case SL_PREP_PLAN:
    if (st == SL_STATUS_OK)
      st = build_table(l);
    st = sl__comm_agree(&l->comm, st, err, "planning");
    l->res.t_plan = sl__now() - t0;
    return st;
  case SL_PREP_NONE:
    break;
  }
  return st;
}

static sl_status advance(sl_loader *l, sl__prep_stage until) {
  sl__prep_driver d = {.cfg = l->cfg,
                       .world = (uint32_t)l->comm.size,
                       .rank = (uint32_t)l->comm.rank,
                       .builds_catalog = l->comm.rank == 0,
                       .after = after_stage,
                       .ctx = l};
  return sl__pipeline_run(&l->pl, &d, until, &l->err);
}

static sl_status loader_download_impl(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK || l->state >= STATE_CATALOG)
    return st;
  /* Whether the ranks describe their plans (api/describe.c): known before rank 0 looks for a spec. */
  if (l->pl.done == SL_PREP_OPTIONS)
    st = sl__loader_share_plans(l, &l->pl);
  if (st == SL_STATUS_OK)
    st = advance(l, SL_PREP_MODEL);
  if (st != SL_STATUS_OK)
    return sl__loader_fail(l, st);
  l->state = STATE_CATALOG;
  return SL_STATUS_OK;
}

sl_status sl_loader_download(sl_loader *l) {
  return sl__loader_return(loader_download_impl(l), l, __func__);
}

/* The table's strings, in one block the store owns: a reload replaces the model and the plan
 * they come from, while a caller may hold them until the loader is destroyed. */
static sl_status table_strings(sl_loader *l) {
  size_t n = l->pl.plan.n_lparams, total = 1;
  const sl__mparam *mps = l->pl.prep.model.params;
  for (size_t i = 0; i < n; i++) {
    const sl__mparam *mp = &mps[l->pl.plan.lparams[i].mparam];
    total += strlen(mp->name) + strlen(l->pl.plan.lparams[i].shard) + 2;
    if (mp->alias_of != SL_NONE)
      total += strlen(mps[mp->alias_of].name) + 1;
  }
  char *at = l->store.table_strings = malloc(total);
  if (at == NULL)
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory building the parameter table");
  for (size_t i = 0; i < n; i++) {
    const sl__mparam *mp = &mps[l->pl.plan.lparams[i].mparam];
    const char *parts[3] = {mp->name, l->pl.plan.lparams[i].shard,
                            mp->alias_of != SL_NONE ? mps[mp->alias_of].name : NULL};
    const char **dst[3] = {&l->store.table[i].name, &l->store.table[i].shard, &l->store.table[i].alias_of};
    for (int k = 0; k < 3; k++) {
      if (parts[k] == NULL)
        continue;
      size_t len = strlen(parts[k]) + 1;
      memcpy(at, parts[k], len);
      *dst[k] = at;
      at += len;
    }
  }
  return SL_STATUS_OK;
}

/* Parameters held in another dtype than their sources' (sl__mparam.held_dtype): the cast array the
 * transfer converts with, made with the table (api/bind.c changes it for sl_loader_bind_as); none
 * when every parameter is held as its sources are. */
static sl_status planned_casts(sl_loader *l) {
  size_t n = l->pl.plan.n_lparams;
  const sl__mparam *mps = l->pl.prep.model.params;
  bool any = false;
  for (size_t i = 0; i < n; i++)
    any = any || mps[l->pl.plan.lparams[i].mparam].held_dtype != mps[l->pl.plan.lparams[i].mparam].dtype;
  if (!any)
    return SL_STATUS_OK;
  l->store.cast = calloc(n + 1, sizeof *l->store.cast);
  if (l->store.cast == NULL)
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory building the parameter table");
  for (size_t i = 0; i < n; i++) {
    const sl__mparam *mp = &mps[l->pl.plan.lparams[i].mparam];
    l->store.cast[i] = (sl__cast_pair){.from = mp->dtype, .to = mp->held_dtype};
  }
  return SL_STATUS_OK;
}

static sl_status build_table(sl_loader *l) {
  size_t n = l->pl.plan.n_lparams;
  l->store.table = calloc(n + 1, sizeof *l->store.table);
  l->store.param_ptr = calloc(n + 1, sizeof *l->store.param_ptr);
  l->store.bound = calloc(n + 1, sizeof *l->store.bound);
  l->store.mapped = calloc(n + 1, sizeof *l->store.mapped);
  l->wr.copy_done = calloc(l->pl.plan.n_copies + 1, sizeof *l->wr.copy_done);
  if (l->store.table == NULL || l->store.param_ptr == NULL || l->store.bound == NULL ||
      l->store.mapped == NULL || l->wr.copy_done == NULL)
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory building the parameter table");
  for (size_t i = 0; i < l->pl.plan.n_copies; i++)
    atomic_init(&l->wr.copy_done[i], 0);
  for (size_t i = 0; i < n; i++) {
    const sl__lparam *lp = &l->pl.plan.lparams[i];
    const sl__mparam *mp = &l->pl.prep.model.params[lp->mparam];
    sl_param *p = &l->store.table[i];
    p->dtype = sl__dtype_name(mp->held_dtype);
    p->dtype_bits = sl__dtype_bits(mp->held_dtype);
    memcpy(p->local_shape, lp->shape, sizeof p->local_shape);
    p->ndim = lp->ndim;
    if (mp->alias_of != SL_NONE) {
      memcpy(p->global_shape, l->pl.prep.model.params[mp->alias_of].shape, sizeof p->global_shape);
    } else {
      memcpy(p->global_shape, mp->shape, sizeof p->global_shape);
      /* Per-expert parameters of the vllm layout are [E, ...] globally. */
    }
    p->nbytes = lp->nbytes;
    p->device = -1;
  }
  sl_status st = planned_casts(l);
  return st == SL_STATUS_OK ? table_strings(l) : st;
}

static sl_status loader_plan_impl(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK || l->state >= STATE_PLANNED)
    return st;
  if (l->state < STATE_CATALOG) {
    st = sl_loader_download(l);
    if (st != SL_STATUS_OK)
      return st;
  }
  st = advance(l, SL_PREP_PLAN);
  if (st != SL_STATUS_OK)
    return sl__loader_fail(l, st);
  if (l->pl.prep.model.experts > 0 && l->pl.opts.enable_ep && l->pl.plan.ctx.ep > 1 &&
      l->pl.plan.ctx.placement != l->pl.opts.placement)
    SL_WARN(
        "expert placement round_robin needs expert groups (n_group > 1), no redundant experts and no EPLB; "
        "using linear");
  l->state = STATE_PLANNED;
  return SL_STATUS_OK;
}

sl_status sl_loader_plan(sl_loader *l) {
  return sl__loader_return(loader_plan_impl(l), l, __func__);
}

size_t sl_loader_param_count(const sl_loader *l) {
  /* After a reload that failed mid-way the table stays: sl_loader_reload_state walks it. */
  return (l != NULL && l->state >= STATE_PLANNED && (l->state != STATE_FAILED || l->wr.torn))
             ? l->pl.plan.n_lparams
             : 0;
}

const sl_param *sl_loader_param(const sl_loader *l, size_t index) {
  if (l == NULL || l->store.table == NULL || index >= l->pl.plan.n_lparams)
    return NULL;
  return &l->store.table[index];
}

const sl_param *sl_loader_find(const sl_loader *l, const char *name) {
  if (l == NULL || l->store.table == NULL || name == NULL)
    return NULL;
  for (size_t i = 0; i < l->pl.plan.n_lparams; i++)
    if (strcmp(l->store.table[i].name, name) == 0)
      return &l->store.table[i];
  return NULL;
}

/* sl_loader_bind and sl_loader_bind_as: the state here, the checks and the record in api/bind.c. */
static sl_status bind(sl_loader *l, const char *fn, const char *name, void *data, uint64_t nbytes, bool as,
                      sl_dtype dtype) {
  if (l == NULL || name == NULL || data == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK)
    return st;
  if (l->state != STATE_PLANNED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "%s(%s): bind after sl_loader_plan and before sl_loader_load", fn, name);
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  return sl__bind(&v, fn, name, data, nbytes, as, dtype);
}

sl_status sl_loader_bind(sl_loader *l, const char *name, void *data, uint64_t nbytes) {
  return sl__loader_return(bind(l, "sl_loader_bind", name, data, nbytes, false, SL_DTYPE_COUNT), l, __func__);
}

sl_status sl_loader_bind_as(sl_loader *l, const char *name, void *data, uint64_t nbytes, sl_dtype dtype) {
  return sl__loader_return(bind(l, "sl_loader_bind_as", name, data, nbytes, true, dtype), l, __func__);
}

/* Parameters converted as delivered (a planned conversion, or sl_loader_bind_as) are never file
 * mappings; nor are bound ones. skip: one flag per parameter, set for those. Converting needs host
 * memory: with another backend an unbound planned conversion is refused here, before any byte is
 * read (bound ones were refused by the bind). */
static sl_status unmappable(sl_loader *l, bool *skip) {
  for (size_t i = 0; i < l->pl.plan.n_lparams; i++) {
    const sl__cast_pair *k = l->store.cast != NULL ? &l->store.cast[i] : NULL;
    bool converts = k != NULL && k->from != k->to;
    skip[i] = l->store.bound[i] || converts;
    if (converts && !l->store.backend->host_addressable)
      return sl__err_set(&l->err, SL_STATUS_UNSUPPORTED,
                         "%s: the plan holds it in %s, its checkpoint tensors are %s: the loader converts in "
                         "host memory only, not with device=%s; bind a %s buffer (sl_loader_bind_as) and "
                         "convert it on the device",
                         l->store.table[i].name, sl__dtype_name(k->to), sl__dtype_name(k->from),
                         l->store.backend->ops->name, sl__dtype_name(k->from));
  }
  return SL_STATUS_OK;
}

static sl_status allocate(sl_loader *l) {
  bool *skip = calloc(l->pl.plan.n_lparams + 1, sizeof *skip);
  sl_status st = skip != NULL ? unmappable(l, skip) : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  /* Files still downloading (docs/spec/HUB.md §13) cannot be mapped yet, nor objects of a store
   * (docs/spec/S3.md): such a load copies. */
  if (st == SL_STATUS_OK &&
      sl__strategy_maps(l->pl.opts.strategy, l->store.backend->host_addressable, l->pl.opts.prefault) &&
      !l->pl.prep.cat.arriving && !sl__catalog_remote(&l->pl.prep.cat) && !l->wr.peers)
    st = sl__filemap_params(&l->pl.prep.cat, &l->pl.sched, &l->pl.plan, skip, l->pl.opts.strategy,
                            l->pl.files, l->store.param_ptr, l->store.mapped, &l->store.maps, &l->err);
  free(skip);
  /* One block for all of them where the backend offers it (device memory). */
  uint64_t total = 0;
  for (size_t i = 0; i < l->pl.plan.n_lparams && st == SL_STATUS_OK; i++)
    if (l->pl.plan.lparams[i].alias_of == SL_NONE && !l->store.bound[i] && !l->store.mapped[i] &&
        sl__add_overflow(total, sl__arena_room(l->pl.plan.lparams[i].nbytes), &total))
      st = sl__err_set(&l->err, SL_STATUS_NOMEM, "the parameters of this rank need more than 2^64 bytes");
  if (st == SL_STATUS_OK && l->store.backend->ops->reserve != NULL)
    st = l->store.backend->ops->reserve(l->store.backend, total, &l->err);
  for (size_t i = 0; i < l->pl.plan.n_lparams && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->pl.plan.lparams[i];
    if (lp->alias_of != SL_NONE || l->store.bound[i] || l->store.mapped[i])
      continue;
    st = l->store.backend->ops->alloc(l->store.backend, lp->nbytes, &l->store.param_ptr[i], &l->err);
    char q[SL_QUOTE_BUF];
    if (st != SL_STATUS_OK)
      sl__err_prefix(&l->err, "allocating %s", sl__quote(l->store.table[i].name, q, sizeof q));
    else if (l->pl.opts.prefault && l->store.backend->host_addressable)
      sl__prefault(l->store.param_ptr[i], lp->nbytes);
  }
  for (size_t i = 0; i < l->pl.plan.n_lparams && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->pl.plan.lparams[i];
    if (lp->alias_of != SL_NONE)
      l->store.param_ptr[i] = l->store.param_ptr[lp->alias_of];
    l->store.table[i].data = l->store.param_ptr[i];
    l->store.table[i].device = l->store.backend->device;
  }
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  return st == SL_STATUS_OK ? sl__bind_finish(&v) : st;
}

static sl_status create_backend(sl_loader *l) {
  uint32_t workers = l->pl.opts.extra.num_threads;
  if (l->pl.opts.device == SL_DEVICE_CUDA) {
    int dev = l->dev.cuda_device >= 0 ? l->dev.cuda_device : l->pl.opts.cuda_device;
    /* A load from peers broadcasts nothing in its own schedule's groups (api/peers.c makes the
     * pairs' communicators): none is made for them. */
    return sl__backend_cuda_create(&l->comm, (int)workers, (int)sl__staging_slots_per_thread(workers), dev,
                                   l->dev.cuda_stream, l->dev.nccl_comm, l->wr.peers ? NULL : &l->groups,
                                   &l->store.backend, &l->err);
  }
  return sl__backend_host_create(&l->comm, (int)workers, &l->store.backend, &l->err);
}

/* Missing and unexpected weights are known from the plan alone: fail before reading. */
sl_status sl__loader_precheck(sl_loader *l, const sl__pipeline *pl) {
  const sl__prepared *p = &pl->prep;
  sl__track pre;
  sl_status st = sl__track_precheck(&p->model, &p->cat, &pl->sched, &pre, &l->err);
  if (st == SL_STATUS_OK) {
    char msg[SL_ERR_MSG_MAX];
    sl_status verdict = SL_STATUS_OK;
    if (sl__track_message(&p->model, &p->cat, &pre, msg, sizeof msg, &verdict)) {
      if (pl->opts.extra.weights_track)
        st = sl__err_set(&l->err, verdict, "%s", msg);
      else if (l->comm.rank == 0)
        SL_WARN("%s (loading anyway: strict checking is off)", msg);
    }
    sl__track_free(&pre);
  }
  return sl__comm_agree(&l->comm, st, &l->err, "checking the weights against the plan");
}

/* Group communicators first (the CUDA backend builds its NCCL communicators over them), then the
 * backend and the parameter memory. */
sl_status sl__loader_allocate(sl_loader *l) {
  double t0 = sl__now();
  sl__comm_phase(&l->comm, "creating broadcast groups");
  sl_status st = sl__prepare_groups(&l->pl.sched, &l->groups, &l->err);
  if (st == SL_STATUS_OK)
    st = sl__comm_groups_create(&l->comm, &l->groups, &l->err);
  st = sl__comm_agree(&l->comm, st, &l->err, "creating broadcast groups");
  if (st != SL_STATUS_OK)
    return st;
  st = create_backend(l);
  if (st == SL_STATUS_OK)
    st = allocate(l);
  st = sl__comm_agree(&l->comm, st, &l->err, "allocating parameters");
  l->res.t_alloc = sl__now() - t0;
  return st;
}

/* The transfer, with the abort channel armed so that a failing rank stops everyone. */
sl_status sl__loader_transfer(sl_loader *l, bool reload) {
  double t0 = sl__now();
  sl__comm_phase(&l->comm, "loading");
  sl_status st = sl__comm_abort_arm(&l->comm, &l->err);
  const sl__opts *o = &l->pl.opts;
  sl__transfer tr = {.cat = &l->pl.prep.cat,
                     .sched = &l->pl.sched,
                     .plan = &l->pl.plan,
                     .backend = l->store.backend,
                     .comm = &l->comm,
                     .param_ptr = l->store.param_ptr,
                     /* a reload writes into mappings: they hold the first load's file pages */
                     .param_mapped = sl__filemaps_tried(&l->store.maps) && !reload ? l->store.mapped : NULL,
                     .param_cast = l->store.cast,
                     .workers = o->extra.num_threads,
                     .chunk = sl__effective_chunk(&l->pl.opts),
                     .coalesce_gap = o->coalesce_gap,
                     .strategy = o->strategy,
                     .one_node = l->nodes.n_nodes == 1,
                     .copy_done = l->wr.copy_done,
                     .copy_started = reload ? l->wr.copy_started : NULL,
                     .vis = sl__pipeline_vis(&l->pl),
                     .files = l->pl.files};
  st = st == SL_STATUS_OK ? sl__prepare_gate(&l->pl.prep, &l->comm, &tr.gate, &l->err) : st;
  st = st == SL_STATUS_OK ? sl__transfer_run(&tr, &l->res.tstats, &l->err) : st;
  st = sl__prepare_download_wait(&l->pl.prep, &l->comm, st, &l->err);
  st = sl__transfer_finish(&l->comm, l->store.backend, st, &l->err);
  if (l->pl.files != NULL) /* every byte is read: the descriptors of the load go (its count stays) */
    sl__file_table_close(l->pl.files);
  l->res.t_transfer = sl__now() - t0;
  return st;
}

/* Tracking over all ranks: what no rank loaded, what nothing consumed. */
sl_status sl__loader_track(sl_loader *l) {
  double t0 = sl__now();
  const sl__prepared *p = &l->pl.prep;
  sl__comm_phase(&l->comm, "tracking weights");
  sl_status st = sl__track_reduce(&l->comm, &p->model, &p->cat, &l->pl.sched, &l->pl.plan, l->wr.copy_done,
                                  &l->res.track, &l->err);
  l->res.have_track = st == SL_STATUS_OK;
  if (st == SL_STATUS_OK) {
    char msg[SL_ERR_MSG_MAX];
    sl_status verdict = SL_STATUS_OK;
    if (sl__track_message(&p->model, &p->cat, &l->res.track, msg, sizeof msg, &verdict)) {
      if (l->pl.opts.extra.weights_track)
        st = sl__err_set(&l->err, verdict, "%s", msg);
      else if (l->comm.rank == 0)
        SL_WARN("%s", msg);
    }
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "tracking weights");
  l->res.t_track = sl__now() - t0;
  return st;
}

/* The report could not be written after a successful load: the copy is saved all the same (the
 * load it copies is sound), and the report's error, which the load returns, says what became of it. */
static sl_status save_after_report_failure(sl_loader *l, sl_status report_st) {
  sl__err report_err;
  sl__err_clear(&report_err);
  sl__err_copy(&report_err, &l->err);
  sl_status st = sl_loader_save_sharded(l, l->pl.opts.save_dir);
  char save_msg[SL_ERR_MSG_MAX];
  snprintf(save_msg, sizeof save_msg, "%s", st == SL_STATUS_OK ? "" : l->err.msg);
  sl__err_clear(&l->err);
  if (st == SL_STATUS_OK)
    return sl__err_set(&l->err, report_st, "%s (the load succeeded; its sharded copy is saved in %s)",
                       report_err.msg, l->pl.opts.save_dir);
  return sl__err_set(&l->err, report_st, "%s (the load succeeded; its sharded copy failed too: %s)",
                     report_err.msg, save_msg);
}

/* Every wait below is bounded by the watchdog (timeout_s, comm/mpi_watchdog.c): past it a rank names
 * the phase and the ranks it has not heard from, then ends the job with MPI_Abort on the load's
 * communicator, the library's one exception to returning a status. */
static sl_status load_phases(sl_loader *l) {
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK)
    return st;
  if (l->state >= STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "sl_loader_load was already called");
  if (l->state < STATE_PLANNED) {
    st = sl_loader_plan(l);
    if (st != SL_STATUS_OK)
      return st;
  }
  double t0 = sl__now();
  sl__progress_begin(&l->progress, sl__config_str(l->cfg, "progress"), l->pl.opts.quiet, l->comm.rank,
                     &l->pl.sched, &l->pl.plan, l->wr.copy_done);
  st = sl__loader_precheck(l, &l->pl);
  if (st == SL_STATUS_OK)
    st = sl__loader_allocate(l);
  sl__progress_set_phase(&l->progress, SL_PHASE_TRANSFER);
  if (st == SL_STATUS_OK)
    st = sl__loader_transfer(l, false);
  if (st == SL_STATUS_OK)
    st = sl__loader_check_values(l);
  sl__progress_set_phase(&l->progress, SL_PHASE_TRACK);
  if (st == SL_STATUS_OK)
    st = sl__loader_track(l);
  sl__progress_stop(&l->progress, st == SL_STATUS_OK);
  if (st == SL_STATUS_OK)
    st = sl__loader_statistics(l, t0);
  if (st != SL_STATUS_OK)
    return sl__loader_fail(l, st);
  /* Report file and pre-sharded copy, when configured (their failure leaves the load usable). */
  st = sl__loader_report_file(l);
  if (l->pl.opts.save_dir == NULL)
    return st;
  if (st == SL_STATUS_OK)
    return sl_loader_save_sharded(l, l->pl.opts.save_dir);
  return save_after_report_failure(l, st);
}

static sl_status loader_load_impl(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  /* The caller's current CUDA context (or device) is what it was once the load returns. */
  sl__device_scope scope;
  sl__device_scope_enter(&scope, l->pl.opts.device == SL_DEVICE_CUDA);
  sl_status st = load_phases(l);
  sl__device_scope_leave(&scope);
  return st;
}

sl_status sl_loader_load(sl_loader *l) {
  return sl__loader_return(loader_load_impl(l), l, __func__);
}

/* ---------------------------------------------------------------------------------------------
 * Save
 * ------------------------------------------------------------------------------------------- */

static sl_status loader_save_sharded_impl(sl_loader *l, const char *dir) {
  if (l == NULL || dir == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK)
    return st;
  st = l->state == STATE_LOADED
           ? SL_STATUS_OK
           : sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "sl_loader_save_sharded needs a loaded loader");
  size_t n = l->pl.plan.n_lparams;
  sl__save_entry *entries = st == SL_STATUS_OK ? calloc(n + 1, sizeof *entries) : NULL;
  if (st == SL_STATUS_OK && entries == NULL)
    st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->pl.plan.lparams[i];
    /* A converted parameter is saved as it is held: in its buffer's dtype (the table's). */
    sl__dtype dtype = l->store.cast != NULL ? l->store.cast[i].to : l->pl.prep.model.params[lp->mparam].dtype;
    entries[i] = (sl__save_entry){.name = l->store.table[i].name,
                                  .dtype = dtype,
                                  .ndim = lp->ndim,
                                  .data = l->store.param_ptr[i],
                                  .nbytes = l->store.table[i].nbytes};
    memcpy(entries[i].shape, lp->shape, sizeof entries[i].shape);
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "preparing the sharded copy");
  /* All or nothing across ranks (output/save.h). */
  /* A model of an object store has no folder to copy from: its config.json alone is written. */
  bool remote = sl__catalog_remote(&l->pl.prep.cat);
  sl__save_job job = {.dir = dir,
                      .model_folder = remote ? NULL : l->pl.prep.cat.folder,
                      .config_json = remote ? l->pl.prep.cat.config_json : NULL,
                      .config_len = remote ? l->pl.prep.cat.config_len : 0,
                      .entries = entries,
                      .n = n,
                      .max_part = l->pl.opts.save_max_part,
                      .overwrite = l->pl.opts.overwrite,
                      .backend = l->store.backend,
                      .layout = {.tp = l->pl.layout.tp, .pp = l->pl.layout.pp, .dp = l->pl.layout.dp}};
  sl__device_scope scope; /* device parameters are copied back to the host */
  sl__device_scope_enter(&scope, st == SL_STATUS_OK && l->store.backend->device >= 0);
  if (st == SL_STATUS_OK)
    st = sl__save_sharded(&l->comm, &job, &l->err);
  sl__device_scope_leave(&scope);
  free(entries);
  return st;
}

sl_status sl_loader_save_sharded(sl_loader *l, const char *dir) {
  return sl__loader_return(loader_save_sharded_impl(l, dir), l, __func__);
}

const char *sl_loader_report_json(sl_loader *l) {
  if (l == NULL || l->state != STATE_LOADED || l->res.report.len == 0)
    return NULL;
  return sl__buf_str(&l->res.report);
}

const char *sl_loader_summary(sl_loader *l) {
  if (l == NULL || l->state != STATE_LOADED || l->res.summary.len == 0)
    return NULL;
  return sl__buf_str(&l->res.summary);
}
