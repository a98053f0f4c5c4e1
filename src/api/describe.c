/*
 * api/describe.c — caller-described plans in the public API (shardload/core.h section 12,
 * docs/spec/DESIGN.md §12): the plan builder's entry points over model/described.h, its JSON form,
 * the loader's plan, the fill of a table entry, the dry run of described plans, and the agreement
 * by which the ranks of a load learn every rank's plan:
 *
 *   1. every rank says whether it has a plan (one reduction): all or none, else every rank fails
 *      naming the lowest rank without one;
 *   2. every rank's canonical blob is hashed (model/described.h sl__plan_key: two 64-bit hashes and
 *      the length) and the keys are gathered: ranks of equal keys form one class;
 *   3. the lowest rank of each class broadcasts its blob, class after class (data-parallel replicas
 *      cost one blob); every rank parses it, and the class's other ranks compare it with their own
 *      (a hash collision fails the load rather than load another rank's plan);
 *   4. every rank agrees on the status.
 * The classes then key the planner's rank classes (plan/pieces.c): each distinct plan is sliced once.
 */
#include "shardload/core.h"

#include "api/config.h"
#include "api/last_error.h"
#include "api/loader_state.h"
#include "api/prepare.h"
#include "base/hashmap.h"
#include "base/util.h"
#include "comm/comm.h"
#include "model/described.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * The builder
 * ------------------------------------------------------------------------------------------- */

static sl_status plan_create_impl(sl_plan **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = malloc(sizeof **out);
  if (*out == NULL)
    return SL_STATUS_NOMEM;
  sl__plan_init(*out);
  return SL_STATUS_OK;
}

sl_status sl_plan_create(sl_plan **out) {
  return sl__api_return(plan_create_impl(out), NULL, __func__);
}

void sl_plan_destroy(sl_plan *plan) {
  if (plan == NULL)
    return;
  sl__plan_release(plan);
  free(plan);
}

const char *sl_plan_error(const sl_plan *plan) {
  return plan != NULL ? plan->err.msg : "";
}

size_t sl_plan_param_count(const sl_plan *plan) {
  return plan != NULL ? plan->params.len : 0;
}

uint64_t sl_plan_region_count(const sl_plan *plan) {
  return plan != NULL ? plan->regions.len : 0;
}

static sl_status plan_add_param_impl(sl_plan *plan, const char *name, sl_dtype dtype, uint32_t ndim,
                                     const uint64_t *shape, int transposed, int fill, uint32_t *index) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  if (fill != SL_FILL_RECORDED && fill != SL_FILL_FALLBACK)
    return sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_plan_add_param(%s): fill %d is neither SL_FILL_RECORDED nor SL_FILL_FALLBACK",
                       name != NULL ? name : "(null)", fill);
  return sl__plan_param(plan, name, (sl__dtype)dtype, ndim, shape, transposed != 0, (uint8_t)fill, index);
}

sl_status sl_plan_add_param(sl_plan *plan, const char *name, sl_dtype dtype, uint32_t ndim,
                            const uint64_t *shape, int transposed, int fill, uint32_t *index) {
  return sl__api_return(plan_add_param_impl(plan, name, dtype, ndim, shape, transposed, fill, index),
                        plan != NULL ? &plan->err : NULL, __func__);
}

static sl_status plan_add_params_impl(sl_plan *plan, size_t n, const char *const *names,
                                      const sl_dtype *dtypes, const uint32_t *ndims, const uint64_t *shapes,
                                      size_t n_shapes, const uint8_t *transposed, const uint8_t *fills) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  if (n > 0 && (names == NULL || dtypes == NULL || ndims == NULL))
    return sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT, "sl_plan_add_params: a NULL array");
  /* every parameter checked first: on a refusal nothing is added */
  sl__hashmap batch;
  sl__hashmap_init(&batch, SL_HASHMAP_BORROW);
  size_t at = 0;
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    uint8_t fill = fills != NULL ? fills[i] : SL_FILL_RECORDED;
    st = sl__plan_param_check(plan, names[i], (sl__dtype)dtypes[i], ndims[i], fill, &batch);
    if (st == SL_STATUS_OK && (ndims[i] > n_shapes - at || (ndims[i] > 0 && shapes == NULL)))
      st = sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_plan_add_params: parameter %zu: %u dimensions, %zu of %zu sizes used", i, ndims[i],
                       at, n_shapes);
    at += st == SL_STATUS_OK ? ndims[i] : 0;
  }
  sl__hashmap_free(&batch);
  if (st == SL_STATUS_OK && at != n_shapes)
    st = sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT,
                     "sl_plan_add_params: the parameters use %zu sizes, %zu were given", at, n_shapes);
  at = 0;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) { /* only out of memory fails now */
    st = sl__plan_param(plan, names[i], (sl__dtype)dtypes[i], ndims[i], ndims[i] > 0 ? shapes + at : NULL,
                        transposed != NULL && transposed[i] != 0, fills != NULL ? fills[i] : SL_FILL_RECORDED,
                        NULL);
    at += ndims[i];
  }
  return st;
}

sl_status sl_plan_add_params(sl_plan *plan, size_t n, const char *const *names, const sl_dtype *dtypes,
                             const uint32_t *ndims, const uint64_t *shapes, size_t n_shapes,
                             const uint8_t *transposed, const uint8_t *fills) {
  return sl__api_return(
      plan_add_params_impl(plan, n, names, dtypes, ndims, shapes, n_shapes, transposed, fills),
      plan != NULL ? &plan->err : NULL, __func__);
}

static sl_status plan_add_region_impl(sl_plan *plan, uint32_t param, const char *tensor, uint32_t ndim,
                                      const uint64_t *start, const uint64_t *count, uint32_t dst_ndim,
                                      const uint64_t *dst_start, const uint64_t *dst_count) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  if (tensor == NULL)
    return sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT, "sl_plan_add_region: no tensor name");
  return sl__plan_region(plan, param, tensor, ndim, start, count, dst_ndim, dst_start, dst_count);
}

sl_status sl_plan_add_region(sl_plan *plan, uint32_t param, const char *tensor, uint32_t ndim,
                             const uint64_t *start, const uint64_t *count, uint32_t dst_ndim,
                             const uint64_t *dst_start, const uint64_t *dst_count) {
  return sl__api_return(
      plan_add_region_impl(plan, param, tensor, ndim, start, count, dst_ndim, dst_start, dst_count),
      plan != NULL ? &plan->err : NULL, __func__);
}

static sl_status plan_add_zeros_impl(sl_plan *plan, uint32_t param, uint32_t dst_ndim,
                                     const uint64_t *dst_start, const uint64_t *dst_count) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  return sl__plan_region(plan, param, NULL, 0, NULL, NULL, dst_ndim, dst_start, dst_count);
}

sl_status sl_plan_add_zeros(sl_plan *plan, uint32_t param, uint32_t dst_ndim, const uint64_t *dst_start,
                            const uint64_t *dst_count) {
  return sl__api_return(plan_add_zeros_impl(plan, param, dst_ndim, dst_start, dst_count),
                        plan != NULL ? &plan->err : NULL, __func__);
}

static sl_status plan_add_regions_impl(sl_plan *plan, size_t n, const uint32_t *params,
                                       const uint32_t *tensors, const char *const *names, size_t n_names,
                                       const uint32_t *ndims, const uint32_t *dst_ndims,
                                       const uint64_t *numbers, size_t n_numbers) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  if (n > 0 && (params == NULL || tensors == NULL || ndims == NULL || dst_ndims == NULL))
    return sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT, "sl_plan_add_regions: a NULL array");
  uint64_t n_regions = plan->regions.len;
  uint64_t n_nums = plan->nums.len;
  size_t at = 0;
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    bool zeros = tensors[i] == SL_PLAN_ZEROS;
    size_t want = 2 * (size_t)ndims[i] + 2 * (size_t)dst_ndims[i];
    if ((!zeros && (names == NULL || tensors[i] >= n_names || names[tensors[i]] == NULL)) ||
        (zeros && ndims[i] != 0) || ndims[i] > SL_MAX_DIMS || dst_ndims[i] > SL_MAX_DIMS ||
        want > n_numbers - at || (want > 0 && numbers == NULL)) {
      st =
          sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT,
                      "sl_plan_add_regions: region %zu: tensor %u of %zu names, %u and %u dimensions, %zu of "
                      "%zu numbers used",
                      i, tensors[i], n_names, ndims[i], dst_ndims[i], at, n_numbers);
      break;
    }
    static const uint64_t none[1] = {0}; /* no numbers: a region of 0 dimensions */
    const uint64_t *x = want > 0 ? numbers + at : none;
    uint32_t a = ndims[i], b = dst_ndims[i];
    st = sl__plan_region(plan, params[i], zeros ? NULL : names[tensors[i]], a, x, x + a, b, x + 2 * a,
                         x + 2 * a + b);
    at += want;
  }
  if (st == SL_STATUS_OK && at != n_numbers)
    st = sl__err_set(&plan->err, SL_STATUS_INVALID_ARGUMENT,
                     "sl_plan_add_regions: the regions use %zu numbers, %zu were given", at, n_numbers);
  if (st != SL_STATUS_OK)
    sl__plan_truncate(plan, n_regions, n_nums);
  return st;
}

sl_status sl_plan_add_regions(sl_plan *plan, size_t n, const uint32_t *params, const uint32_t *tensors,
                              const char *const *names, size_t n_names, const uint32_t *ndims,
                              const uint32_t *dst_ndims, const uint64_t *numbers, size_t n_numbers) {
  return sl__api_return(
      plan_add_regions_impl(plan, n, params, tensors, names, n_names, ndims, dst_ndims, numbers, n_numbers),
      plan != NULL ? &plan->err : NULL, __func__);
}

static sl_status plan_skip_impl(sl_plan *plan, const char *tensor) {
  if (plan == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&plan->err);
  return sl__plan_skip(plan, tensor);
}

sl_status sl_plan_skip(sl_plan *plan, const char *tensor) {
  return sl__api_return(plan_skip_impl(plan, tensor), plan != NULL ? &plan->err : NULL, __func__);
}

sl_status sl_plan_from_json(const char *text, size_t len, sl_plan **out, char **error) {
  if (error != NULL)
    *error = NULL;
  if (out == NULL || text == NULL)
    return sl__api_return(SL_STATUS_INVALID_ARGUMENT, NULL, __func__);
  *out = malloc(sizeof **out);
  if (*out == NULL)
    return sl__api_return(SL_STATUS_NOMEM, NULL, __func__);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__plan_from_json(text, len, *out, &err);
  if (st == SL_STATUS_OK)
    return SL_STATUS_OK;
  free(*out);
  *out = NULL;
  if (st != SL_STATUS_NOMEM) /* the builder's refusals of a file's content are the file's defects */
    st = SL_STATUS_PLAN;
  if (error != NULL)
    *error = sl__strdup(err.msg);
  return sl__api_return(st, &err, __func__);
}

sl_status sl_plans_from_json(const char *text, size_t len, int world_size, sl_plan **plans, char **error) {
  if (error != NULL)
    *error = NULL;
  if (text == NULL || plans == NULL || world_size < 1)
    return sl__api_return(SL_STATUS_INVALID_ARGUMENT, NULL, __func__);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__plans_from_json(text, len, (uint32_t)world_size, plans, &err);
  if (st != SL_STATUS_OK && st != SL_STATUS_NOMEM)
    st = SL_STATUS_PLAN;
  if (st != SL_STATUS_OK && error != NULL)
    *error = sl__strdup(err.msg);
  return sl__api_return(st, &err, __func__);
}

void sl_plans_destroy(sl_plan **plans, int world_size) {
  if (plans != NULL && world_size > 0)
    sl__plans_free(plans, (uint32_t)world_size);
}

char *sl_plan_to_json(const sl_plan *plan) {
  return plan != NULL ? sl__plan_to_json(plan) : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The loader
 * ------------------------------------------------------------------------------------------- */

static sl_status loader_set_plan_impl(sl_loader *l, const sl_plan *plan) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  if (plan == NULL) { /* the caller could not make this rank's plan: no rank may load without it */
    l->described.failed = true;
    return sl__err_set(
        &l->err, SL_STATUS_INVALID_ARGUMENT,
        "sl_loader_set_plan: no plan (this rank's could not be made): the download fails on every rank");
  }
  if (l->state == STATE_FAILED) /* api/loader.c's sl__loader_begin, which calls into this file */
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&l->err);
  sl_status st = SL_STATUS_OK;
  if (l->state != STATE_CREATED || l->pl.done != SL_PREP_OPTIONS)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_set_plan: set the plan before sl_loader_download, sl_loader_plan and "
                       "sl_loader_load");
  if (l->pl.opts.format == SL_FORMAT_SHARDED_STATE)
    return sl__err_set(&l->err, SL_STATUS_UNSUPPORTED,
                       "sl_loader_set_plan: a sharded_state checkpoint is laid out by its own files");
  uint8_t *blob = NULL;
  size_t len = 0;
  st = sl__plan_serialize(plan, &blob, &len, &l->err);
  l->described.failed = st != SL_STATUS_OK;
  if (st != SL_STATUS_OK)
    return st;
  free(l->described.blob);
  l->described.blob = blob;
  l->described.len = len;
  return SL_STATUS_OK;
}

sl_status sl_loader_set_plan(sl_loader *l, const sl_plan *plan) {
  return sl__loader_return(loader_set_plan_impl(l, plan), l, __func__);
}

sl_fill sl_loader_param_fill(const sl_loader *l, size_t index) {
  if (l == NULL || l->store.table == NULL || index >= l->pl.plan.n_lparams)
    return SL_FILL_SPEC;
  return (sl_fill)l->pl.prep.model.params[l->pl.plan.lparams[index].mparam].fill;
}

/* Ranks into classes of equal keys (numbered by their lowest rank). */
static sl_status classes_of(const sl__plan_key *keys, uint32_t world, uint32_t *class_of, uint32_t *n_classes,
                            sl__err *err) {
  sl__hashmap of;
  sl__hashmap_init(&of, SL_HASHMAP_BORROW);
  *n_classes = 0;
  for (uint32_t r = 0; r < world; r++) {
    bool added = false;
    sl__hashval *v = sl__hashmap_slot(&of, &keys[r], sizeof keys[r], &added);
    if (v == NULL) {
      sl__hashmap_free(&of);
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory comparing the ranks' plans");
    }
    if (added)
      v->u64 = (*n_classes)++;
    class_of[r] = (uint32_t)v->u64;
  }
  sl__hashmap_free(&of);
  return SL_STATUS_OK;
}

/* Every rank has a plan, or none; *all says which. A rank whose plan could not be set
 * (sl_loader_set_plan failed) fails every rank: none loads without its plan. COLLECTIVE. */
static sl_status all_or_none(sl_loader *l, bool *all) {
  int has = l->described.blob != NULL || l->described.failed;
  int v[4] = {has, -has, has ? l->comm.size : l->comm.rank,
              l->described.failed ? l->comm.rank : l->comm.size};
  sl_status st = sl__comm_allreduce_min(&l->comm, v, 4, "agreeing on described plans", &l->err);
  *all = st == SL_STATUS_OK && v[1] == -1;
  if (st == SL_STATUS_OK && v[3] < l->comm.size)
    st = sl__err_set(&l->err, SL_STATUS_PLAN, "rank %d could not set its plan (sl_loader_set_plan failed)",
                     v[3]);
  else if (st == SL_STATUS_OK && v[0] == 0 && v[1] == -1)
    st = sl__err_set(
        &l->err, SL_STATUS_PLAN,
        "rank %d set no plan (sl_loader_set_plan) while others did: every rank sets one, or none", v[2]);
  return st;
}

/* Class c's blob from its lowest rank, parsed into *out; its other ranks check it is theirs. */
static sl_status class_plan(sl_loader *l, const sl__described *d, uint32_t c, sl__dplan *out) {
  int root = (int)d->class_first[c];
  bool mine = root == l->comm.rank;
  uint8_t *blob = mine ? l->described.blob : NULL;
  size_t len = mine ? l->described.len : 0;
  sl_status st = sl__comm_bcast_blob(&l->comm, &blob, &len, root, &l->err);
  if (st != SL_STATUS_OK)
    return st;
  char what[64];
  snprintf(what, sizeof what, "rank %d's plan", root);
  st = sl__dplan_parse(blob, len, what, out, &l->err);
  if (st == SL_STATUS_OK && !mine && d->class_of[l->comm.rank] == c &&
      (len != l->described.len || memcmp(blob, l->described.blob, len) != 0))
    st = sl__err_set(&l->err, SL_STATUS_PLAN,
                     "this rank's plan and rank %d's differ but hash alike: describe them again (a collision "
                     "of 128-bit hashes)",
                     root);
  if (!mine)
    free(blob);
  return st;
}

sl_status sl__loader_share_plans(sl_loader *l, sl__pipeline *pl) {
  sl__comm_phase(&l->comm, "agreeing on described plans");
  bool all = false;
  sl_status st = all_or_none(l, &all);
  if (st != SL_STATUS_OK || !all)
    return sl__comm_agree(&l->comm, st, &l->err, "agreeing on described plans");
  uint32_t world = (uint32_t)l->comm.size;
  sl__plan_key mine = sl__plan_key_of(l->described.blob, l->described.len);
  sl__plan_key *keys = calloc(world, sizeof *keys);
  uint32_t *class_of = calloc(world, sizeof *class_of);
  sl__described *d = calloc(1, sizeof *d);
  uint32_t n_classes = 0;
  st = keys != NULL && class_of != NULL && d != NULL ? SL_STATUS_OK
                                                     : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  st = sl__comm_agree(&l->comm, st, &l->err, "agreeing on described plans");
  if (st == SL_STATUS_OK)
    st = sl__comm_allgather(&l->comm, &mine, sizeof mine, keys, "gathering the plans' hashes", &l->err);
  if (st == SL_STATUS_OK)
    st = classes_of(keys, world, class_of, &n_classes, &l->err);
  sl__dplan *plans = NULL;
  if (st == SL_STATUS_OK) {
    plans = calloc((size_t)n_classes + 1, sizeof *plans);
    st = plans != NULL ? sl__described_init(d, world, n_classes, plans, class_of, &l->err)
                       : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  }
  if (d == NULL || d->class_of == NULL) { /* not taken over by d */
    free(class_of);
    free(plans);
    n_classes = 0;
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "agreeing on described plans");
  /* every rank walks the classes in the same order: a failed parse still joins the broadcasts */
  sl_status own = SL_STATUS_OK;
  for (uint32_t c = 0; c < n_classes && st == SL_STATUS_OK; c++) {
    sl_status cs = class_plan(l, d, c, &plans[c]);
    if (cs == SL_STATUS_COMM)
      st = cs;
    else if (own == SL_STATUS_OK)
      own = cs;
  }
  st = sl__comm_agree(&l->comm, st != SL_STATUS_OK ? st : own, &l->err, "agreeing on described plans");
  free(keys);
  if (st == SL_STATUS_OK) {
    sl__described_free(pl->described);
    free(pl->described);
    pl->described = d;
  } else {
    sl__described_free(d);
    free(d);
  }
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * The dry run's plans: the same classes, in one process
 * ------------------------------------------------------------------------------------------- */

sl_status sl__described_from_plans(uint32_t world, const sl_plan *const *plans, sl__described **out,
                                   sl__err *err) {
  *out = NULL;
  if (plans == NULL)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "no plans given (one per rank)");
  uint8_t **blob =
      calloc((size_t)world + 1, sizeof *blob); /* per rank: its own, or NULL (a pointer repeated) */
  size_t *len = calloc((size_t)world + 1, sizeof *len);
  uint32_t *same = calloc((size_t)world + 1, sizeof *same); /* the rank whose blob it shares */
  sl__plan_key *keys = calloc((size_t)world + 1, sizeof *keys);
  uint32_t *class_of = calloc((size_t)world + 1, sizeof *class_of);
  sl__described *d = calloc(1, sizeof *d);
  sl_status st = blob && len && same && keys && class_of && d
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (uint32_t r = 0; r < world && st == SL_STATUS_OK; r++) {
    same[r] = r;
    if (plans[r] == NULL)
      st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "rank %u has no plan", r);
    else if (r > 0 && plans[r] == plans[r - 1])
      same[r] = same[r - 1];
    else
      st = sl__plan_serialize(plans[r], &blob[r], &len[r], err);
    if (st == SL_STATUS_OK)
      keys[r] = same[r] == r ? sl__plan_key_of(blob[r], len[r]) : keys[same[r]];
  }
  uint32_t n_classes = 0;
  if (st == SL_STATUS_OK)
    st = classes_of(keys, world, class_of, &n_classes, err);
  sl__dplan *plans_out = st == SL_STATUS_OK ? calloc((size_t)n_classes + 1, sizeof *plans_out) : NULL;
  if (st == SL_STATUS_OK)
    st = plans_out != NULL ? sl__described_init(d, world, n_classes, plans_out, class_of, err)
                           : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (d == NULL || d->class_of == NULL) {
    free(class_of);
    free(plans_out);
    n_classes = 0;
  }
  for (uint32_t r = 0; r < world && st == SL_STATUS_OK; r++) {
    uint32_t first = same[d->class_first[class_of[r]]];
    uint32_t own = same[r];
    if (len[own] != len[first] || memcmp(blob[own], blob[first], len[own]) != 0)
      st = sl__err_set(err, SL_STATUS_PLAN, "the plans of ranks %u and %u differ but hash alike", first, r);
    else if (r == d->class_first[class_of[r]]) {
      char what[64];
      snprintf(what, sizeof what, "rank %u's plan", r);
      st = sl__dplan_parse(blob[own], len[own], what, &d->plans[class_of[r]], err);
    }
  }
  for (uint32_t r = 0; blob != NULL && r < world; r++)
    free(blob[r]);
  free(blob);
  free(len);
  free(same);
  free(keys);
  if (st != SL_STATUS_OK) {
    sl__described_free(d);
    free(d);
    return st;
  }
  *out = d;
  return SL_STATUS_OK;
}
