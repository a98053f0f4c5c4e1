/*
 * base/err.h — the per-handle error message: a status plus a formatted message, where the FIRST error
 * wins (later failures caused by the first one do not overwrite the cause the user needs).
 */
#ifndef SL_ERR_H
#define SL_ERR_H

#include "shardload/core.h"

#include <stdarg.h>

#define SL_ERR_MSG_MAX 4096

typedef struct sl__err {
  sl_status status;         /* SL_STATUS_OK until the first error */
  sl_hub_cause cause;       /* with SL_STATUS_HUB: what failed (sl__err_hub); else NONE */
  char msg[SL_ERR_MSG_MAX]; /* "" until the first error */
} sl__err;

#if defined(__GNUC__)
#define SL_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define SL_PRINTF(fmt_index, first_arg)
#endif

void sl__err_clear(sl__err *err);
/* Records (status, message) unless an error is already recorded; returns status either way, so
 * callers write `return sl__err_set(err, SL_STATUS_IO, "cannot open %s: %s", ...)`.
 * err may be NULL (the message is dropped). */
sl_status sl__err_set(sl__err *err, sl_status status, const char *fmt, ...) SL_PRINTF(3, 4);
sl_status sl__err_setv(sl__err *err, sl_status status, const char *fmt, va_list ap);
/* Records SL_STATUS_HUB with its cause (an S3 request's failure), as sl__err_set. */
sl_status sl__err_hub(sl__err *err, sl_hub_cause cause, const char *fmt, ...) SL_PRINTF(3, 4);
/* Prefixes the recorded message with "prefix: " (adds context such as a file name). */
void sl__err_prefix(sl__err *err, const char *fmt, ...) SL_PRINTF(2, 3);
/* Copies src (cause included) into dst when dst has no error yet. */
void sl__err_copy(sl__err *dst, const sl__err *src);

#endif
