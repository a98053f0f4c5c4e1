/* base/err.c — first-error-wins message buffer (see base/err.h). */
#include "base/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void sl__err_clear(sl__err *err) {
  if (err == NULL)
    return;
  err->status = SL_STATUS_OK;
  err->cause = SL_HUB_CAUSE_NONE;
  err->msg[0] = '\0';
}

sl_status sl__err_setv(sl__err *err, sl_status status, const char *fmt, va_list ap) {
  if (err == NULL || err->status != SL_STATUS_OK)
    return status;
  err->status = status;
  err->cause = SL_HUB_CAUSE_NONE;
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  return status;
}

sl_status sl__err_hub(sl__err *err, sl_hub_cause cause, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bool first = err != NULL && err->status == SL_STATUS_OK;
  sl__err_setv(err, SL_STATUS_HUB, fmt, ap);
  va_end(ap);
  if (first)
    err->cause = cause;
  return SL_STATUS_HUB;
}

sl_status sl__err_set(sl__err *err, sl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sl__err_setv(err, status, fmt, ap);
  va_end(ap);
  return status;
}

void sl__err_prefix(sl__err *err, const char *fmt, ...) {
  if (err == NULL || err->status == SL_STATUS_OK)
    return;
  char prefix[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  /* Assembled by hand: truncating the tail of a long message is intended. */
  char old[SL_ERR_MSG_MAX];
  memcpy(old, err->msg, sizeof old);
  size_t np = strlen(prefix);
  size_t no = strlen(old);
  size_t cap = sizeof err->msg - 1;
  size_t k = 0;
  memcpy(err->msg, prefix, np < cap ? np : cap);
  k = np < cap ? np : cap;
  if (k + 2 <= cap) {
    memcpy(err->msg + k, ": ", 2);
    k += 2;
  }
  size_t take = no < cap - k ? no : cap - k;
  memcpy(err->msg + k, old, take);
  err->msg[k + take] = '\0';
}

void sl__err_copy(sl__err *dst, const sl__err *src) {
  if (dst == NULL || src == NULL || dst->status != SL_STATUS_OK || src->status == SL_STATUS_OK)
    return;
  dst->status = src->status;
  dst->cause = src->cause;
  memcpy(dst->msg, src->msg, sizeof dst->msg);
}
