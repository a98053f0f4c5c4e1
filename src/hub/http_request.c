/*
 * hub/http_request.c — the buffered requests of the Hub client: the API GET (revision listing)
 * and the metadata HEAD of a file (docs/spec/HUB.md §4), both retried per §7.2, the HEAD following relative
 * redirects itself so that the token is kept on the endpoint's origin.
 */
#include "hub/http_xfer.h"

#include "base/log.h"
#include "hub/hub.h"

#include <stdlib.h>
#include <string.h>

/* Performs a buffered request, retrying retryable statuses and transient network failures per
 * docs/spec/HUB.md §7.2. Returns OK with the last reply in x (any status, *retries = retries made), or an
 * error for network failures. */
static sl_status buffered_request(sl__http_client *c, sl__http_xfer *x, bool head, const char *url,
                                  const char *what, long first_timeout, long later_timeout,
                                  const uint64_t *range, unsigned *retries, sl__err *err) {
  const sl__http *h = c->h;
  const char *method = head ? "HEAD" : "GET";
  x->easy = c->easy;
  for (unsigned attempt = 0;; attempt++) {
    *retries = attempt;
    if (sl__http_cancelled(h))
      return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: cancelled", what);
    sl_status st =
        sl__http_xfer_setup(x, url, head, !head, attempt == 0 ? first_timeout : later_timeout, range != NULL,
                            range != NULL ? range[0] : 0, range != NULL ? range[1] : 0, err);
    if (st != SL_STATUS_OK)
      return st;
    CURLcode rc = curl_easy_perform(x->easy);
    if (x->cb_err.status != SL_STATUS_OK) {
      sl__err_copy(err, &x->cb_err);
      return x->cb_err.status;
    }
    if (sl__http_cancelled(h))
      return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: cancelled", what);
    if (rc != CURLE_OK) {
      if (sl__http_classify_curl(rc) != SL_HTTP_NET_TRANSIENT || attempt >= SL_HTTP_MAX_RETRIES)
        return sl__http_net_error(x, rc, method, url, what, attempt + 1, err);
      SL_DEBUG("%s %s: %s; retrying", method, url, curl_easy_strerror(rc));
      sl__http_wait_units(h, sl__http_retry_wait_units(attempt + 1, 0, NULL, NULL));
      continue;
    }
    if (!sl__http_status_retryable(x->status) || attempt >= SL_HTTP_MAX_RETRIES)
      return SL_STATUS_OK;
    uint64_t units = sl__http_retry_wait_units(attempt + 1, x->status, sl__http_hdr_get(x, "Retry-After"),
                                               sl__http_hdr_get(x, "RateLimit"));
    SL_DEBUG("%s %s: HTTP %ld; retrying in %llu units", method, url, x->status, (unsigned long long)units);
    sl__http_wait_units(h, units);
  }
}

sl_status sl__http_get_api(sl__http_client *c, const char *url, const char *what, sl__buf *body,
                           sl__err *err) {
  sl__http_xfer x;
  sl__http_xfer_init(&x, c->h, SL_HTTP_API_BODY_MAX);
  x.file = what;
  unsigned retries = 0;
  long t = c->h->download_timeout_s;
  sl_status st = buffered_request(c, &x, false, url, what, t, t, NULL, &retries, err);
  if (st == SL_STATUS_OK && x.status >= 400)
    st = sl__http_reply_error(&x, SL_HTTP_URL_API, "GET", url, what, retries, err);
  else if (st == SL_STATUS_OK && x.status != 200)
    st = sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: HTTP %ld", url, x.status);
  if (st == SL_STATUS_OK) {
    *body = x.body;
    sl__buf_init(&x.body, SL_HTTP_API_BODY_MAX);
  }
  sl__http_xfer_free(&x);
  return st;
}

/* Reads the docs/spec/HUB.md §4 fields of a final HEAD reply. */
static sl_status head_fields(const sl__http_xfer *x, const char *url, const char *file, sl__http_meta *out,
                             sl__err *err) {
  bool redirect = x->status >= 300 && x->status < 400;
  const char *commit = sl__http_hdr_get(x, "X-Repo-Commit");
  const char *etag = sl__http_hdr_get(x, "X-Linked-Etag");
  if (etag == NULL)
    etag = sl__http_hdr_get(x, "ETag");
  const char *size = sl__http_hdr_get(x, "X-Linked-Size");
  if (size == NULL && !redirect)
    size = sl__http_hdr_get(x, "Content-Length");
  const char *missing = commit == NULL ? "X-Repo-Commit"
                        : etag == NULL ? "ETag"
                        : size == NULL ? "size"
                                       : NULL;
  if (missing != NULL)
    return sl__err_set(err, SL_STATUS_HUB_METADATA,
                       "incomplete file metadata for %s (missing %s) [HEAD %s: HTTP "
                       "%ld]",
                       file, missing, url, x->status);
  if (!sl__hub_is_hex(commit, 40))
    return sl__err_set(err, SL_STATUS_HUB_METADATA,
                       "unexpected reply from %s: X-Repo-Commit '%s' of %s is not a "
                       "40-hex commit",
                       url, commit, file);
  if (!sl__http_etag_normalize(etag, out->etag))
    return sl__err_set(err, SL_STATUS_HUB_INVALID_NAME,
                       "invalid etag '%s' for %s (expected 40 or 64 hex digits) "
                       "[HEAD %s]",
                       etag, file, url);
  if (!sl__parse_u64(size, &out->size))
    return sl__err_set(err, SL_STATUS_HUB_METADATA,
                       "unexpected reply from %s: size '%s' of %s is not a decimal "
                       "number",
                       url, size, file);
  memcpy(out->commit, commit, 41);
  const char *loc = sl__http_hdr_get(x, "Location");
  if (loc == NULL || loc[0] == '\0')
    out->location = sl__strdup(url);
  else if (loc[0] == '/' && loc[1] != '/')
    out->location = sl__http_join_relative(url, loc);
  else
    out->location = sl__strdup(loc);
  if (out->location == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the metadata of %s", file);
  return SL_STATUS_OK;
}

sl_status sl__http_head(sl__http_client *c, const char *url, const char *file, sl__http_meta *out,
                        sl__err *err) {
  memset(out, 0, sizeof *out);
  sl__http_xfer x;
  sl__http_xfer_init(&x, c->h, SL_HTTP_ERR_BODY_MAX);
  x.file = file;
  char *cur = sl__strdup(url);
  sl_status st = cur != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (int hops = 0; st == SL_STATUS_OK; hops++) {
    unsigned retries = 0;
    st = buffered_request(c, &x, true, cur, file, c->h->etag_timeout_s, SL_HTTP_RETRY_HEAD_TIMEOUT_S, NULL,
                          &retries, err);
    if (st != SL_STATUS_OK)
      break;
    const char *commit = sl__http_hdr_get(&x, "X-Repo-Commit");
    if (sl__hub_is_hex(commit, 40))
      memcpy(out->commit, commit, 41);
    if (x.status >= 400) {
      st = sl__http_reply_error(&x, SL_HTTP_URL_RESOLVE, "HEAD", cur, file, retries, err);
      break;
    }
    const char *loc = sl__http_hdr_get(&x, "Location");
    bool relative = loc != NULL && loc[0] == '/' && loc[1] != '/';
    if (x.status >= 300 && x.status < 400 && relative) {
      if (hops + 1 > SL_HTTP_MAX_HOPS) {
        st = sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: more than %d redirects (last HEAD %s)", file,
                         SL_HTTP_MAX_HOPS, cur);
        break;
      }
      char *next = sl__http_join_relative(cur, loc);
      free(cur);
      cur = next;
      if (cur == NULL)
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory following a redirect for %s", file);
      continue;
    }
    if (x.status < 200) {
      st = sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: HTTP %ld", cur, x.status);
      break;
    }
    st = head_fields(&x, cur, file, out, err);
    break;
  }
  if (st != SL_STATUS_OK) {
    free(out->location);
    out->location = NULL;
  }
  free(cur);
  sl__http_xfer_free(&x);
  return st;
}

sl_status sl__http_get_range(sl__http_client *c, const char *url, const char *file, uint64_t from,
                             uint64_t to, size_t max, sl__buf *body, uint64_t *total, bool *no_ranges,
                             sl__err *err) {
  *no_ranges = false;
  *total = 0;
  sl__http_xfer x;
  sl__http_xfer_init(&x, c->h, max);
  x.file = file;
  unsigned retries = 0;
  long t = c->h->download_timeout_s;
  uint64_t range[2] = {from, to};
  sl__err e;
  sl__err_clear(&e);
  sl_status st = buffered_request(c, &x, false, url, file, t, t, range, &retries, &e);
  uint64_t a = 0;
  uint64_t b = 0;
  if (x.status == 200) {
    /* No ranges here. The whole file came when the transfer ended well within max bytes (curl
     * checks the body against Content-Length): kept, so that a small file is not fetched again. */
    *no_ranges = true;
    if (st == SL_STATUS_OK && x.body.len > 0) {
      *total = x.body.len;
      *body = x.body;
      sl__buf_init(&x.body, max);
    }
    st = SL_STATUS_OK;
  } else if (st != SL_STATUS_OK) {
    sl__err_copy(err, &e);
  } else if (x.status >= 400) {
    st = sl__http_reply_error(&x, SL_HTTP_URL_RESOLVE, "GET", url, file, retries, err);
  } else if (x.status != 206 ||
             !sl__http_parse_content_range(sl__http_hdr_get(&x, "Content-Range"), &a, &b, total) ||
             a != from || b < a || b > to || b + 1 - a != x.body.len || (b != to && b + 1 != *total)) {
    st = sl__err_set(
        err, SL_STATUS_HUB_METADATA,
        "unexpected reply for %s: HTTP %ld, Content-Range '%s' for the requested bytes %llu-%llu "
        "[GET %s]",
        file, x.status,
        sl__http_hdr_get(&x, "Content-Range") != NULL ? sl__http_hdr_get(&x, "Content-Range") : "(missing)",
        (unsigned long long)from, (unsigned long long)to, url);
  }
  if (st == SL_STATUS_OK && !*no_ranges) {
    *body = x.body;
    sl__buf_init(&x.body, max);
  }
  sl__http_xfer_free(&x);
  return st;
}
