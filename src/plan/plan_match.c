/*
 * plan/plan_match.c — a new checkpoint's plan against the loaded one (see plan/plan_match.h): the
 * name sets first (through a hash of the loaded names: tables of 10^5 parameters), then each
 * parameter's description, then each copy's destination. The first difference is the message.
 */
#include "plan/plan_match.h"

#include "base/hashmap.h"
#include "base/util.h"
#include "format/dtype.h"

#include <stdio.h>
#include <string.h>

static const char *name_of(const sl__plan_side *s, size_t i) {
  return s->model->params[s->plan->lparams[i].mparam].name;
}

/* "[4, 16]" into buf. */
static const char *dims(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
  size_t off = (size_t)snprintf(buf, cap, "[");
  for (uint32_t d = 0; d < ndim && off < cap; d++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%llu", d > 0 ? ", " : "", (unsigned long long)shape[d]);
  if (off < cap)
    snprintf(buf + off, cap - off, "]");
  return buf;
}

/* The checkpoint tensor that feeds parameter i first (messages), or NULL. */
static const sl__cat_tensor *first_source(const sl__plan_side *s, size_t i) {
  for (size_t c = 0; c < s->plan->n_copies; c++)
    if (s->plan->copies[c].lparam == i && s->plan->copies[c].tensor < s->cat->n_tensors)
      return &s->cat->tensors[s->plan->copies[c].tensor];
  return NULL;
}

/* A parameter of one table that the other lacks, by name; false when the name sets are equal. */
static sl_status missing_name(const sl__plan_side *was, const sl__plan_side *now, const char *what,
                              bool *differ, sl__err *err) {
  sl__hashmap m;
  sl__hashmap_init(&m, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  *differ = false;
  for (size_t i = 0; i < was->plan->n_lparams && st == SL_STATUS_OK; i++) {
    const char *n = name_of(was, i);
    if (!sl__hashmap_set(&m, n, strlen(n), i))
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory comparing the parameter tables");
  }
  char q[SL_QUOTE_BUF];
  size_t found = 0;
  for (size_t i = 0; i < now->plan->n_lparams && st == SL_STATUS_OK && !*differ; i++) {
    const char *n = name_of(now, i);
    if (sl__hashmap_find(&m, n, strlen(n)) != NULL) {
      found++;
      continue;
    }
    *differ = true;
    st = sl__err_set(err, SL_STATUS_SHAPE,
                     "%s holds parameter %s, which the loaded checkpoint has not on this rank (a checkpoint "
                     "of another architecture or size)",
                     what, sl__quote(n, q, sizeof q));
  }
  if (st == SL_STATUS_OK && found < was->plan->n_lparams) {
    /* Some loaded name has no counterpart: find the first one. */
    sl__hashmap_free(&m);
    sl__hashmap_init(&m, SL_HASHMAP_BORROW);
    for (size_t i = 0; i < now->plan->n_lparams && st == SL_STATUS_OK; i++) {
      const char *n = name_of(now, i);
      if (!sl__hashmap_set(&m, n, strlen(n), i))
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory comparing the parameter tables");
    }
    for (size_t i = 0; i < was->plan->n_lparams && st == SL_STATUS_OK && !*differ; i++) {
      const char *n = name_of(was, i);
      if (sl__hashmap_find(&m, n, strlen(n)) != NULL)
        continue;
      *differ = true;
      st = sl__err_set(err, SL_STATUS_SHAPE,
                       "the loaded parameter %s is not in %s's table on this rank (a checkpoint of another "
                       "architecture or size)",
                       sl__quote(n, q, sizeof q), what);
    }
  }
  sl__hashmap_free(&m);
  return st;
}

/* Parameter i of both tables (names equal). */
static sl_status same_param(const sl__plan_side *was, const sl__plan_side *now, size_t i, const char *what,
                            sl__err *err) {
  const sl__lparam *a = &was->plan->lparams[i];
  const sl__lparam *b = &now->plan->lparams[i];
  const sl__mparam *ma = &was->model->params[a->mparam];
  const sl__mparam *mb = &now->model->params[b->mparam];
  char q[SL_QUOTE_BUF], sa[160], sb[160], src[SL_QUOTE_BUF + 48] = "";
  const sl__cat_tensor *t = first_source(now, i);
  if (t != NULL) {
    char tq[SL_QUOTE_BUF];
    snprintf(src, sizeof src, " (checkpoint tensor %s)", sl__quote(t->name, tq, sizeof tq));
  }
  sl__quote(ma->name, q, sizeof q);
  if (ma->dtype != mb->dtype)
    return sl__err_set(err, SL_STATUS_SHAPE, "parameter %s: dtype %s loaded, %s in %s%s", q,
                       sl__dtype_name(ma->dtype), sl__dtype_name(mb->dtype), what, src);
  if (ma->held_dtype != mb->held_dtype)
    return sl__err_set(err, SL_STATUS_SHAPE, "parameter %s: held in %s loaded, in %s in %s%s", q,
                       sl__dtype_name(ma->held_dtype), sl__dtype_name(mb->held_dtype), what, src);
  if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof a->shape) != 0)
    return sl__err_set(err, SL_STATUS_SHAPE, "parameter %s: local shape %s loaded, %s in %s%s", q,
                       dims(a->shape, a->ndim, sa, sizeof sa), dims(b->shape, b->ndim, sb, sizeof sb), what,
                       src);
  if (ma->ndim != mb->ndim || memcmp(ma->shape, mb->shape, sizeof ma->shape) != 0)
    return sl__err_set(err, SL_STATUS_SHAPE, "parameter %s: global shape %s loaded, %s in %s%s", q,
                       dims(ma->shape, ma->ndim, sa, sizeof sa), dims(mb->shape, mb->ndim, sb, sizeof sb),
                       what, src);
  if (a->nbytes != b->nbytes || a->alias_of != b->alias_of || a->transposed != b->transposed)
    return sl__err_set(err, SL_STATUS_SHAPE, "parameter %s: %llu bytes%s%s loaded, %llu bytes%s%s in %s", q,
                       (unsigned long long)a->nbytes, a->alias_of != SL_NONE ? ", an alias" : "",
                       a->transposed ? ", transposed" : "", (unsigned long long)b->nbytes,
                       b->alias_of != SL_NONE ? ", an alias" : "", b->transposed ? ", transposed" : "", what);
  return SL_STATUS_OK;
}

static bool same_destination(const sl__copy *a, const sl__copy *b) {
  return a->lparam == b->lparam && a->dst_off == b->dst_off && a->dst_stride == b->dst_stride &&
         a->row_bytes == b->row_bytes && a->rows == b->rows;
}

sl_status sl__plan_match(const sl__plan_side *was, const sl__plan_side *now, const char *what, sl__err *err) {
  bool differ = false;
  sl_status st = missing_name(was, now, what, &differ, err);
  if (st != SL_STATUS_OK)
    return st;
  char q[SL_QUOTE_BUF];
  if (was->plan->n_lparams != now->plan->n_lparams) /* equal sets: a name repeated in one of them */
    return sl__err_set(err, SL_STATUS_SHAPE, "the loaded table has %zu parameters on this rank, %s's %zu",
                       was->plan->n_lparams, what, now->plan->n_lparams);
  for (size_t i = 0; i < was->plan->n_lparams; i++)
    if (strcmp(name_of(was, i), name_of(now, i)) != 0)
      return sl__err_set(err, SL_STATUS_SHAPE,
                         "%s holds the loaded parameters in another order (%s at position %zu)", what,
                         sl__quote(name_of(now, i), q, sizeof q), i);
  for (size_t i = 0; i < was->plan->n_lparams; i++) {
    st = same_param(was, now, i, what, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  /* Equal tables whose bytes are assembled differently (another slicing of the same shapes). */
  size_t n = was->plan->n_copies < now->plan->n_copies ? was->plan->n_copies : now->plan->n_copies;
  for (size_t c = 0; c <= n; c++) {
    const sl__copy *a = c < was->plan->n_copies ? &was->plan->copies[c] : NULL;
    const sl__copy *b = c < now->plan->n_copies ? &now->plan->copies[c] : NULL;
    if (a != NULL && b != NULL && same_destination(a, b))
      continue;
    if (a == NULL && b == NULL)
      break;
    uint32_t lp = a != NULL ? a->lparam : b->lparam;
    return sl__err_set(err, SL_STATUS_SHAPE,
                       "parameter %s: %s writes it in other pieces than the loaded checkpoint (copy %zu of "
                       "this rank's plan differs)",
                       sl__quote(name_of(was, lp < was->plan->n_lparams ? lp : 0), q, sizeof q), what, c);
  }
  return SL_STATUS_OK;
}
