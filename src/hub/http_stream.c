/*
 * hub/http_stream.c — docs/spec/HUB.md §5.2 of docs/spec/HUB.md: a file downloaded as one stream, appended to
 * a file that may already hold a prefix, resumed with a Range after every break. Status replies are retried
 * per docs/spec/HUB.md §7.2; breaks that bring no byte are counted, and SL_HTTP_MAX_DEAD_ATTEMPTS of them in
 * a row give up (the partial file is kept for a later run). A 416 on a resumed range restarts once from
 * byte 0.
 */
#include "hub/http_xfer.h"

#include "base/log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The state of one stream download across its attempts. */
typedef struct stream {
  const sl__http *h;
  sl__http_xfer x; /* x.pos: bytes the file holds */
  const char *url;
  const char *file;
  int fd;
  uint64_t size;
  sl__http_url_kind kind;
  unsigned status_retries;
  unsigned dead; /* consecutive broken attempts without a byte */
  unsigned attempts;
  bool retried_416; /* the one restart after a 416 was used */
  bool skip_range;  /* the next attempt starts over from byte 0 */
} stream;

/* What an attempt leaves to do. */
typedef enum stream_next { STREAM_DONE, STREAM_AGAIN, STREAM_FAILED } stream_next;

/* After a broken attempt: the dead counter and the wait (1 unit after progress, else backoff).
 * Returns false when the attempts are exhausted. */
static bool after_break(const sl__http *h, uint64_t got, unsigned *dead, unsigned *status_retries) {
  if (got > 0) {
    *dead = 0;
    *status_retries = 0;
    sl__http_wait_units(h, 1);
    return true;
  }
  (*dead)++;
  if (*dead >= SL_HTTP_MAX_DEAD_ATTEMPTS)
    return false;
  sl__http_wait_units(h, sl__http_retry_wait_units(*dead, 0, NULL, NULL));
  return true;
}

/* One GET from x.pos to the end (from byte 0, the file emptied, after a 416). A failure inside
 * the callbacks (write, size, ranges) is returned as the status; *rc is curl's verdict. */
static sl_status stream_attempt(stream *s, CURLcode *rc, const sl__http_sink *sink, sl__err *err) {
  sl__http_xfer *x = &s->x;
  if (s->skip_range && x->pos > 0) {
    if (ftruncate(s->fd, 0) != 0)
      return sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot truncate the partial download of %s: %s", s->file,
                         strerror(errno));
    if (sink != NULL && sink->reset != NULL)
      sink->reset(sink->user);
    x->pos = 0;
  }
  s->skip_range = false;
  x->ranged = x->pos > 0;
  x->range_start = x->pos;
  x->limit = s->size;
  sl_status st =
      sl__http_xfer_setup(x, s->url, false, true, s->h->download_timeout_s, x->ranged, x->pos, 0, err);
  if (st != SL_STATUS_OK)
    return st;
  s->attempts++;
  *rc = curl_easy_perform(x->easy);
  if (x->cb_err.status != SL_STATUS_OK) {
    sl__err_copy(err, &x->cb_err);
    return x->cb_err.status;
  }
  return SL_STATUS_OK;
}

/* A break (reset, timeout, or a body shorter than announced): wait and resume, or give up. */
static stream_next stream_broke(stream *s, CURLcode rc, sl_status *st, sl__err *err) {
  sl__http_xfer *x = &s->x;
  SL_DEBUG("GET %s: stream broke at byte %llu (%s)", s->url, (unsigned long long)x->pos,
           rc != CURLE_OK ? curl_easy_strerror(rc) : "short body");
  if (after_break(s->h, x->got, &s->dead, &s->status_retries))
    return STREAM_AGAIN;
  if (rc != CURLE_OK)
    sl__http_net_error(x, rc, "GET", s->url, s->file, s->attempts, err);
  else
    sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on GET %s: short body", s->file, s->url);
  sl__err_prefix(err,
                 "download of %s gave up after %d consecutive attempts without data, at byte %llu of "
                 "%llu",
                 s->file, SL_HTTP_MAX_DEAD_ATTEMPTS, (unsigned long long)x->pos, (unsigned long long)s->size);
  *st = SL_STATUS_HUB_NETWORK;
  return STREAM_FAILED;
}

/* Decides on a finished attempt: complete, retry (after a wait), or fail with *st set. */
static stream_next stream_examine(stream *s, CURLcode rc, sl_status *st, sl__err *err) {
  sl__http_xfer *x = &s->x;
  long code = x->status;
  if (rc == CURLE_OK && (code == 200 || code == 206) && x->pos == s->size)
    return STREAM_DONE;
  if (rc == CURLE_OK && code == 416 && x->ranged && !s->retried_416) {
    SL_DEBUG("GET %s: 416 for bytes %llu-: restarting without a range", s->url,
             (unsigned long long)x->range_start);
    s->retried_416 = true;
    s->skip_range = true;
    return STREAM_AGAIN;
  }
  if (rc == CURLE_OK && sl__http_status_retryable(code)) {
    if (s->status_retries >= SL_HTTP_MAX_RETRIES) {
      *st = sl__http_reply_error(x, s->kind, "GET", s->url, s->file, s->status_retries, err);
      return STREAM_FAILED;
    }
    s->status_retries++;
    sl__http_wait_units(s->h,
                        sl__http_retry_wait_units(s->status_retries, code, sl__http_hdr_get(x, "Retry-After"),
                                                  sl__http_hdr_get(x, "RateLimit")));
    return STREAM_AGAIN;
  }
  if (rc == CURLE_OK && code >= 300 && code != 416) {
    *st = code >= 400 ? sl__http_reply_error(x, s->kind, "GET", s->url, s->file, s->status_retries, err)
                      : sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: unexpected HTTP %ld from GET %s", s->file,
                                    code, s->url);
    return STREAM_FAILED;
  }
  if (rc == CURLE_OK && code != 200 && code != 206) {
    *st = sl__http_reply_error(x, s->kind, "GET", s->url, s->file, s->status_retries, err);
    return STREAM_FAILED;
  }
  if (rc != CURLE_OK && sl__http_classify_curl(rc) != SL_HTTP_NET_TRANSIENT) {
    *st = sl__http_net_error(x, rc, "GET", s->url, s->file, s->attempts, err);
    return STREAM_FAILED;
  }
  return stream_broke(s, rc, st, err);
}

sl_status sl__http_fetch_stream(sl__http_client *c, const char *url, const char *file, int fd, uint64_t have,
                                uint64_t size, const sl__http_sink *sink, sl__err *err) {
  const sl__http *h = c->h;
  stream s;
  memset(&s, 0, sizeof s);
  s.h = h;
  s.url = url;
  s.file = file;
  s.fd = fd;
  s.size = size;
  s.kind = sl__http_same_origin(h, url) ? SL_HTTP_URL_RESOLVE : SL_HTTP_URL_OTHER;
  sl__http_xfer_init(&s.x, h, SL_HTTP_ERR_BODY_MAX);
  s.x.easy = c->easy;
  s.x.fd = fd;
  s.x.file = file;
  s.x.sink = sink;
  s.x.total = size;
  s.x.pos = have;
  sl_status st = SL_STATUS_OK;
  for (;;) {
    if (sl__http_cancelled(h)) {
      st = sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
      break;
    }
    CURLcode rc = CURLE_OK;
    st = stream_attempt(&s, &rc, sink, err);
    if (st != SL_STATUS_OK)
      break;
    if (sl__http_cancelled(h))
      continue;
    if (stream_examine(&s, rc, &st, err) != STREAM_AGAIN)
      break;
  }
  sl__http_xfer_free(&s.x);
  return st;
}
