/*
 * s3/read.c — bytes of an object straight into the caller's buffer (see s3/s3.h): one ranged GET,
 * pinned to the object's ETag; when the connection drops mid-range, the next attempt asks for the
 * rest only, so that no byte is asked twice unless it was lost. Attempts stop once the session's
 * retry bound has passed since the last byte arrived (the watchdog's rule: slow is not stuck).
 */
#include "s3/request.h"

#include "base/clock.h"

#include <stdio.h>
#include <string.h>

sl_status sl__s3_read(sl__s3_conn *c, const char *bucket, const char *key, const char *etag, uint64_t off,
                      uint64_t len, void *buf, sl__s3_stop_fn stop, void *stop_ctx, sl__err *err) {
  char what[SL_S3_KEY_MAX + 512];
  uint64_t end = 0;
  if (sl__add_overflow(off, len, &end))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "s3://%s/%s: range %llu+%llu overflows", bucket, key,
                       (unsigned long long)off, (unsigned long long)len);
  if (len == 0)
    return SL_STATUS_OK;
  snprintf(what, sizeof what, "s3://%s/%s (bytes %llu-%llu)", bucket, key, (unsigned long long)off,
           (unsigned long long)(end - 1));
  sl__s3_req r = {.bucket = bucket, .key = key, .if_match = etag, .stop = stop, .stop_ctx = stop_ctx};
  uint64_t got = 0;
  double since = sl__now();
  sl_status st = SL_STATUS_OK;
  for (unsigned attempt = 1;; attempt++) {
    r.from = off + got;
    r.len = len - got;
    r.dst = (uint8_t *)buf + got;
    st = sl__s3_send(c, &r, err);
    if (st != SL_STATUS_OK)
      break;
    got += r.got;
    if (r.got > 0)
      since = sl__now(); /* progress: the bound counts from here */
    sl__s3_verdict v = sl__s3_judge(&r);
    if (v == SL_S3_DONE && got == len)
      break;
    if (v == SL_S3_FAILED) {
      st = sl__s3_failure(c->s, &r, what, err);
      break;
    }
    /* Worth another attempt (or a 2xx that ended early: the connection was cut). */
    bool stopped = false;
    if (!sl__s3_backoff(c->s, attempt + 1, since, stop, stop_ctx, &stopped)) {
      if (stopped) {
        r.stopped = true;
        st = sl__s3_failure(c->s, &r, what, err);
      } else {
        char prefix[SL_S3_KEY_MAX + 640];
        snprintf(prefix, sizeof prefix,
                 "%s: gave up after %u attempts (no byte for %.0f s; %llu of %llu bytes read)", what, attempt,
                 c->s->retry_s, (unsigned long long)got, (unsigned long long)len);
        st = v == SL_S3_DONE
                 ? sl__err_hub(err, SL_HUB_CAUSE_NETWORK, "%s: the connection ended early", prefix)
                 : sl__s3_failure(c->s, &r, prefix, err);
      }
      break;
    }
  }
  sl__buf_free(&r.error_body);
  return st;
}
