/*
 * api/refit_receiver.c — sl_loader_refit: a loaded loader receives the weights trainers publish
 * into the memory it already holds (docs/spec/DESIGN.md §13). What a loader keeps between refits
 * (api/refit_job.h, sl__refit_state): the plan of its pair of layouts, the version every parameter
 * holds, and after a refit that failed part-way the version it was refitting with each copy's
 * progress, so that the next refit of that version moves only what is missing and
 * sl_loader_reload_state says per parameter what it holds.
 */
#include "shardload/core.h"

#include "api/config.h"
#include "api/last_error.h"
#include "api/loader_state.h"
#include "api/refit_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loader's refit state, made on first use (NULL when out of memory). */
static sl__refit_state *state_of(sl_loader *l) {
  size_t n = l->pl.plan.n_copies;
  if (l->refit == NULL) {
    sl__refit_state *s = calloc(1, sizeof *s);
    if (s == NULL)
      return NULL;
    s->done = calloc(n + 1, 1);
    s->touched = calloc(n + 1, 1);
    s->copy_done = calloc(n + 1, sizeof *s->copy_done);
    s->copy_started = calloc(n + 1, sizeof *s->copy_started);
    s->n_copies = n;
    s->reloads = l->wr.reloads;
    sl__buf_init(&s->report, 0);
    if (s->done == NULL || s->touched == NULL || s->copy_done == NULL || s->copy_started == NULL) {
      sl__refit_state_free(s);
      return NULL;
    }
    l->refit = s;
  }
  if (l->refit->reloads != l->wr.reloads) { /* a reload brought other weights: no version holds */
    l->refit->version = l->refit->pending = 0;
    l->refit->reloads = l->wr.reloads;
  }
  return l->refit;
}

/* Why this rank cannot receive (its message in l->err), or SL_STATUS_OK. */
static sl_status own_checks(sl_loader *l, sl__refit_state *s) {
  if (l->state != STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_refit needs a loaded loader (sl_loader_load or sl_loader_load_from_peers)");
  if (s == NULL ||
      (l->wr.reload_state == NULL && (l->wr.reload_state = calloc(l->pl.plan.n_lparams + 1, 1)) == NULL))
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  bool cuda = l->pl.opts.device == SL_DEVICE_CUDA;
  for (size_t i = 0; cuda && i < l->pl.plan.n_lparams; i++) {
    bool cast = l->store.cast != NULL && l->store.cast[i].from != l->store.cast[i].to;
    if (cast || l->pl.plan.lparams[i].transposed > 0)
      return sl__err_set(
          &l->err, SL_STATUS_UNSUPPORTED,
          "sl_loader_refit: %s is held %s in device memory: the library converts and transposes "
          "in host memory only",
          l->store.table[i].name, cast ? "in another dtype" : "transposed");
  }
  if (cuda && l->store.backend != NULL)
    return l->store.backend->ops->sync(l->store.backend, &l->err); /* the loader's own work first */
  return SL_STATUS_OK;
}

/* Each parameter's state from its copies' progress in refits of s->pending (aliases: their
 * target's); counts[] per state. */
static void states(sl_loader *l, const sl__refit_state *s, size_t counts[3]) {
  const sl__rank_plan *p = &l->pl.plan;
  enum { ALL_DONE = 1, TOUCHED = 2 };
  uint8_t *f = l->wr.reload_state;
  for (size_t i = 0; i < p->n_lparams; i++)
    f[i] = ALL_DONE;
  for (size_t c = 0; c < p->n_copies; c++) {
    if (!s->done[c])
      f[p->copies[c].lparam] &= (uint8_t)~ALL_DONE;
    if (s->touched[c])
      f[p->copies[c].lparam] |= TOUCHED;
  }
  counts[0] = counts[1] = counts[2] = 0;
  for (size_t i = 0; i < p->n_lparams; i++)
    f[i] = (f[i] & ALL_DONE) ? SL_RELOAD_NEW : (f[i] & TOUCHED) ? SL_RELOAD_PARTIAL : SL_RELOAD_OLD;
  for (size_t i = 0; i < p->n_lparams; i++) {
    if (p->lparams[i].alias_of != SL_NONE)
      f[i] = f[p->lparams[i].alias_of];
    counts[f[i]]++;
  }
}

/* After the run: the state and each parameter's. */
static void after(sl_loader *l, sl__refit_state *s, const sl__refit_side *side, sl_status st) {
  size_t n = s->n_copies;
  if (st == SL_STATUS_OK) {
    s->version = side->version;
    s->pending = 0;
    memset(s->done, 0, n);
    memset(s->touched, 0, n);
    memset(l->wr.reload_state, SL_RELOAD_NEW, l->pl.plan.n_lparams);
    return;
  }
  if (!side->transferred)
    return; /* refused before any byte moved: every parameter as it was */
  if (s->pending != side->version) {
    memset(s->done, 0, n);
    memset(s->touched, 0, n);
    s->pending = side->version;
  }
  const sl__rank_plan *p = &l->pl.plan;
  for (size_t c = 0; c < n; c++) {
    uint64_t got = atomic_load(&s->copy_done[c]);
    s->done[c] |= got == p->copies[c].rows * p->copies[c].row_bytes && got > 0;
    s->touched[c] |= got > 0 || atomic_load(&s->copy_started[c]) != 0;
  }
  size_t counts[3];
  states(l, s, counts);
  size_t len = strlen(l->err.msg);
  snprintf(
      l->err.msg + len, sizeof l->err.msg - len,
      " [refit to version %llu failed: on this rank %zu parameters hold it, %zu what they held before, %zu "
      "parts of both (sl_loader_reload_state); a refit of version %llu moves what is missing]",
      (unsigned long long)side->version, counts[SL_RELOAD_NEW], counts[SL_RELOAD_OLD],
      counts[SL_RELOAD_PARTIAL], (unsigned long long)side->version);
}

static sl_status loader_refit_run_impl(sl_loader *l, sl__refit_init_fn init, const void *arg,
                                       uint64_t version) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  /* A rank that cannot receive still takes part: the others fail with its message, not a timeout. */
  sl_status refused = sl__loader_begin(l);
  sl__refit_state *s = refused == SL_STATUS_OK ? state_of(l) : NULL;
  if (refused == SL_STATUS_OK)
    refused = own_checks(l, s);
  sl__refit_session none;
  memset(&none, 0, sizeof none);
  if (s != NULL) {
    sl__buf_free(&s->report);
    sl__buf_init(&s->report, 0);
  }
  for (size_t c = 0; s != NULL && c < s->n_copies; c++) {
    atomic_store(&s->copy_done[c], 0);
    atomic_store(&s->copy_started[c], 0);
  }
  bool cuda = l->pl.opts.device == SL_DEVICE_CUDA;
  bool ok = refused == SL_STATUS_OK;
  sl__refit_side side = {.trainer = false,
                         .version = version,
                         .err = &l->err,
                         .session = s != NULL ? &s->session : &none,
                         .timeout_s = l->pl.opts.timeout_s,
                         .bucket_bytes = l->pl.opts.bucket_bytes,
                         .network_gbps = l->pl.opts.network_gbps,
                         .cuda = cuda,
                         .cuda_device = cuda && l->store.backend != NULL ? l->store.backend->device : -1,
                         .cuda_stream = l->dev.cuda_stream,
                         .cat = &l->pl.prep.cat,
                         .plan = &l->pl.plan,
                         .param_ptr = l->store.param_ptr,
                         .cast = l->store.cast,
                         .holds = ok && s->version == version && s->pending == 0,
                         .done = ok && s->pending == version && version != 0 ? s->done : NULL,
                         .copy_done = ok ? s->copy_done : NULL,
                         .copy_started = ok ? s->copy_started : NULL,
                         .refused = refused,
                         .report = ok ? &s->report : NULL};
  sl__device_scope scope;
  sl__device_scope_enter(&scope, cuda && ok);
  sl_status st = sl__refit_run(&side, init, arg);
  sl__device_scope_leave(&scope);
  if (ok)
    after(l, s, &side, st);
  return st;
}

sl_status sl__loader_refit_run(sl_loader *l, sl__refit_init_fn init, const void *arg, uint64_t version) {
  return sl__loader_return(loader_refit_run_impl(l, init, arg, version), l, "sl_loader_refit");
}

static sl_status init_caller(sl__comm *c, const void *ops, sl__err *err) {
  return sl__comm_init_caller(c, ops, err);
}

sl_status sl_loader_refit_ops(sl_loader *l, const sl_comm_ops *ops, uint64_t version) {
  return sl__loader_refit_run(l, init_caller, ops, version);
}

static sl_status loader_version_impl(const sl_loader *l, uint64_t *version, uint64_t *pending) {
  if (l == NULL || version == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  bool same = l->refit != NULL && l->refit->reloads == l->wr.reloads;
  *version = same ? l->refit->version : 0;
  if (pending != NULL)
    *pending = same ? l->refit->pending : 0;
  return SL_STATUS_OK;
}

sl_status sl_loader_version(const sl_loader *l, uint64_t *version, uint64_t *pending) {
  return sl__loader_return(loader_version_impl(l, version, pending), l, __func__);
}

const char *sl_loader_refit_report_json(const sl_loader *l) {
  if (l == NULL || l->refit == NULL || l->refit->report.len == 0)
    return NULL;
  return l->refit->report.data;
}
