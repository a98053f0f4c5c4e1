/*
 * api/value_check.c — after a transfer, the values a plan cannot check from headers: each
 * weight_shape tensor of a pack-quantized checkpoint (docs/spec/ARCHITECTURES.md §18) must hold the
 * unpacked [out, in] its linear has in config.json and in the shape of its packed weight. Every
 * rank checks the ones it holds (host memory read in place, device memory copied back, 16 bytes
 * each), then the ranks agree: a disagreeing tensor fails every rank with its name, what it holds
 * and what was expected, and the load returns nothing.
 */
#include "api/loader_state.h"

#include "backend/backend.h"
#include "base/util.h"

#include <string.h>

/* The source of parameter mp that copy c reads. */
static const sl__msrc *source_of(const sl__mparam *mp, const sl__copy *c) {
  for (size_t i = 0; i < mp->n_src; i++)
    if (mp->src[i].tensor == c->tensor)
      return &mp->src[i];
  return NULL;
}

/* Little-endian signed integer of eb bytes (4 or 8). */
static int64_t int_at(const uint8_t *p, uint32_t eb) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < eb; i++)
    v |= (uint64_t)p[i] << (8 * i);
  if (eb == 4)
    return (int64_t)(int32_t)(uint32_t)v;
  return (int64_t)v;
}

static sl_status check_copy(sl_loader *l, const sl__mparam *mp, const sl__copy *c) {
  const sl__msrc *src = source_of(mp, c);
  uint32_t eb = sl__dtype_bits(mp->dtype) / 8;
  if (src == NULL || (eb != 4 && eb != 8) || c->rows * c->row_bytes != 2u * eb)
    return sl__err_set(&l->err, SL_STATUS_INTERNAL, "%s: weight_shape copy of %llu bytes", mp->name,
                       (unsigned long long)(c->rows * c->row_bytes));
  uint8_t got[16];
  const uint8_t *at = (const uint8_t *)l->store.param_ptr[c->lparam] + c->dst_off;
  if (l->store.backend->host_addressable) {
    memcpy(got, at, 2u * eb);
  } else {
    sl_status st = l->store.backend->ops->download(l->store.backend, got, at, 2u * eb, &l->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  int64_t v0 = int_at(got, eb);
  int64_t v1 = int_at(got + eb, eb);
  if (v0 == (int64_t)src->wshape[0] && v1 == (int64_t)src->wshape[1])
    return SL_STATUS_OK;
  return sl__err_set(
      &l->err, SL_STATUS_SHAPE,
      "tensor '%s' says the unpacked weight is [%lld, %lld], but its linear is [%llu, %llu] (from "
      "config.json and the shape of its packed weight)",
      src->name, (long long)v0, (long long)v1, (unsigned long long)src->wshape[0],
      (unsigned long long)src->wshape[1]);
}

sl_status sl__loader_check_values(sl_loader *l) {
  const sl__model *m = &l->pl.prep.model;
  if (!m->packed) /* the same on every rank: nothing to agree on */
    return SL_STATUS_OK;
  const sl__rank_plan *plan = &l->pl.plan;
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < plan->n_copies && st == SL_STATUS_OK; i++) {
    const sl__copy *c = &plan->copies[i];
    const sl__mparam *mp = &m->params[plan->lparams[c->lparam].mparam];
    if (mp->shape_values)
      st = check_copy(l, mp, c);
  }
  return sl__comm_agree(&l->comm, st, &l->err, "checking weight_shape values");
}
