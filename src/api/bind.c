/*
 * api/bind.c — the caller's buffers (see api/bind.h).
 *
 *   bind      find the parameter, refuse aliases, check the buffer's size against the plan (in the
 *             buffer's dtype for sl_loader_bind_as, else in the held one) and record it: param_ptr,
 *             bound, and for a conversion the per-parameter cast array (created with the table when
 *             the plan holds a parameter in another dtype than its sources', sl__mparam.held_dtype,
 *             else on the first sl_loader_bind_as; handed to the transfer) and the table entry's
 *             dtype, dtype_bits and nbytes. A conversion is always one: from the sources' dtype to
 *             the buffer's
 *   finish    at allocation: aliases follow their target's dtype; zero the bytes no copy writes
 *
 * Conversions are host memory only: with device=cuda a bind of another dtype is refused, the
 * caller converts on the GPU (the Python package's torch layer does).
 */
#include "api/bind.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* The dtype local parameter i is held in when bound with sl_loader_bind (sl__mparam.held_dtype: its
 * sources', or the planned conversion's). */
static sl__dtype held_dtype(const sl__loader_view *v, size_t i) {
  return v->model->params[v->plan->lparams[i].mparam].held_dtype;
}

/* The planned dtype of local parameter i: the cast array's, else its held dtype (without the
 * array no parameter is converted: the held dtype is its sources'). */
static sl__dtype planned_dtype(const sl__loader_view *v, size_t i) {
  return v->store->cast != NULL ? v->store->cast[i].from : held_dtype(v, i);
}

/* The bytes parameter i's copies address: its size in its sources' dtype (the held size when it
 * is held in theirs). */
static uint64_t copied_bytes(const sl__loader_view *v, size_t i) {
  uint64_t held = sl__dtype_bits(held_dtype(v, i)) / 8;
  uint64_t from = sl__dtype_bits(planned_dtype(v, i)) / 8;
  uint64_t nbytes = v->plan->lparams[i].nbytes;
  return held == from || held == 0 ? nbytes : nbytes / held * from;
}

/* The cast array, every parameter at its planned dtype (no conversion). */
static sl_status make_cast(const sl__loader_view *v) {
  size_t n = v->plan->n_lparams;
  sl__cast_pair *cast = calloc(n + 1, sizeof *cast);
  if (cast == NULL)
    return sl__err_set(v->err, SL_STATUS_NOMEM, "out of memory binding a buffer");
  for (size_t i = 0; i < n; i++) {
    sl__dtype dt = planned_dtype(v, i);
    cast[i] = (sl__cast_pair){.from = dt, .to = dt};
  }
  v->store->cast = cast;
  return SL_STATUS_OK;
}

/* The bytes a buffer of dtype `to` needs for parameter name, whose local size is held_bytes in
 * dtype `held`. */
static sl_status needed_bytes(const sl__loader_view *v, const char *fn, const char *name, uint64_t held_bytes,
                              sl__dtype held, sl__dtype to, uint64_t *out) {
  uint64_t held_size = sl__dtype_bits(held) / 8;
  uint64_t elements = held_size > 0 ? held_bytes / held_size : 0;
  if (held == to) {
    *out = held_bytes;
    return SL_STATUS_OK;
  }
  if (held_size == 0 || held_bytes % held_size != 0 ||
      sl__mul_overflow(elements, sl__dtype_bits(to) / 8, out))
    return sl__err_set(v->err, SL_STATUS_INVALID_ARGUMENT,
                       "%s(%s): %llu bytes of %s are not a whole number of elements, or as %s overflow", fn,
                       name, (unsigned long long)held_bytes, sl__dtype_name(held), sl__dtype_name(to));
  return SL_STATUS_OK;
}

/* Whether a buffer of dtype `to` can receive parameter name (planned dtype from). */
static sl_status check_cast(const sl__loader_view *v, const char *fn, const char *name, sl__dtype from,
                            sl__dtype to) {
  if (from == to)
    return SL_STATUS_OK;
  if (!sl__cast_supported(from, to))
    return sl__err_set(v->err, SL_STATUS_UNSUPPORTED,
                       "%s(%s): the plan holds %s, the buffer is %s: no conversion between them (conversions "
                       "are among F32, F16, BF16 and F64, and from I64 to I32)",
                       fn, name, sl__dtype_name(from), sl__dtype_name(to));
  if (v->cuda)
    return sl__err_set(
        v->err, SL_STATUS_UNSUPPORTED,
        "%s(%s): its checkpoint tensors are %s, the buffer is %s: the loader converts in host memory "
        "only, not in CUDA memory (device=cuda); bind a %s buffer (sl_loader_bind_as) and convert it on "
        "the GPU (the Python package's torch layer does)",
        fn, name, sl__dtype_name(from), sl__dtype_name(to), sl__dtype_name(from));
  return SL_STATUS_OK;
}

sl_status sl__bind(const sl__loader_view *v, const char *fn, const char *name, void *data, uint64_t nbytes,
                   bool as, sl_dtype dtype) {
  size_t n = v->plan->n_lparams;
  size_t i = 0;
  while (i < n && strcmp(v->store->table[i].name, name) != 0)
    i++;
  if (i == n)
    return sl__err_set(v->err, SL_STATUS_NOT_FOUND, "this rank holds no parameter named '%s'", name);
  const sl__lparam *lp = &v->plan->lparams[i];
  sl_param *p = &v->store->table[i];
  if (lp->alias_of != SL_NONE)
    return sl__err_set(v->err, SL_STATUS_INVALID_ARGUMENT,
                       "%s shares the memory of %s: bind that one instead", name, p->alias_of);
  if (as && (unsigned)dtype >= (unsigned)SL_DTYPE_COUNT)
    return sl__err_set(v->err, SL_STATUS_INVALID_ARGUMENT, "%s(%s): unknown dtype %d", fn, name, (int)dtype);
  /* One conversion, from the sources' dtype to the buffer's, never through the held one. */
  sl__dtype from = planned_dtype(v, i);
  sl__dtype held = held_dtype(v, i);
  sl__dtype to = as ? (sl__dtype)dtype : held;
  uint64_t want = 0;
  sl_status st = check_cast(v, fn, name, from, to);
  if (st == SL_STATUS_OK)
    st = needed_bytes(v, fn, name, lp->nbytes, held, to, &want);
  if (st != SL_STATUS_OK)
    return st;
  if (nbytes != want && !as)
    return sl__err_set(v->err, SL_STATUS_INVALID_ARGUMENT, "%s needs a buffer of %llu bytes, got %llu", name,
                       (unsigned long long)want, (unsigned long long)nbytes);
  if (nbytes != want)
    return sl__err_set(v->err, SL_STATUS_INVALID_ARGUMENT,
                       "%s(%s): the plan holds %s; as %s it needs a buffer of %llu bytes, got %llu", fn, name,
                       sl__dtype_name(held), sl__dtype_name(to), (unsigned long long)want,
                       (unsigned long long)nbytes);
  if (to != from && v->store->cast == NULL && (st = make_cast(v)) != SL_STATUS_OK)
    return st;
  if (v->store->cast != NULL)
    v->store->cast[i].to = to;
  v->store->param_ptr[i] = data;
  v->store->bound[i] = true;
  p->dtype = sl__dtype_name(to);
  p->dtype_bits = sl__dtype_bits(to);
  p->nbytes = want;
  return SL_STATUS_OK;
}

/* A caller's buffer is not zero-filled like ours: the bytes that no copy writes (the padding of a
 * vocabulary) are zeroed here, in place, through the backend (device memory alike, after the
 * caller's pending work on it); a converted buffer in its own size (zero is zero in every
 * floating-point type). One wait at the end orders all of it before the transfer's uploads. */
static sl_status zero_unwritten(const sl__loader_view *v) {
  const sl__rank_plan *plan = v->plan;
  sl__backend *backend = v->store->backend;
  uint64_t *written = calloc(plan->n_lparams + 1, sizeof *written);
  if (written == NULL)
    return sl__err_set(v->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t c = 0; c < plan->n_copies; c++)
    written[plan->copies[c].lparam] += plan->copies[c].rows * plan->copies[c].row_bytes;
  sl_status st = SL_STATUS_OK;
  bool zeroed = false;
  for (size_t i = 0; i < plan->n_lparams && st == SL_STATUS_OK; i++) {
    uint64_t nbytes = v->store->table[i].nbytes; /* the buffer's bytes */
    if (!v->store->bound[i] || written[i] >= copied_bytes(v, i) || nbytes == 0)
      continue;
    st = backend->ops->zero(backend, v->store->param_ptr[i], nbytes, v->err);
    zeroed = true;
    if (st != SL_STATUS_OK)
      sl__err_prefix(v->err, "zeroing the padding of the bound buffer of %s", v->store->table[i].name);
  }
  if (zeroed && st == SL_STATUS_OK)
    st = backend->ops->sync(backend, v->err);
  free(written);
  return st;
}

sl_status sl__bind_finish(const sl__loader_view *v) {
  const sl__rank_plan *plan = v->plan;
  sl__backend *backend = v->store->backend;
  /* Bound memory the backend cannot write (another GPU's, host memory for device cuda) is refused
   * here, before any byte moves. */
  for (size_t i = 0; backend != NULL && backend->ops->check_bound != NULL && i < plan->n_lparams; i++) {
    if (!v->store->bound[i])
      continue;
    sl_status st = backend->ops->check_bound(backend, v->store->table[i].name, v->store->param_ptr[i],
                                             v->store->table[i].nbytes, v->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  for (size_t i = 0; v->store->cast != NULL && i < plan->n_lparams; i++) {
    uint32_t target = plan->lparams[i].alias_of;
    if (target == SL_NONE)
      continue;
    v->store->cast[i].to = v->store->cast[target].to;
    v->store->table[i].dtype = v->store->table[target].dtype;
    v->store->table[i].dtype_bits = v->store->table[target].dtype_bits;
    v->store->table[i].nbytes = v->store->table[target].nbytes;
  }
  return zero_unwritten(v);
}
