/*
 * hub/http_xfer.c — one HTTP request of the Hub client (see hub/http_xfer.h): its response headers
 * (reset at each status line, so redirects and retries leave only the last reply), a capped body
 * buffer for API replies and error pages, or a file target written with pwrite whose ranges are
 * checked at the first body byte, and the curl set-up of each attempt.
 */
#include "hub/http_xfer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void hdrs_clear(sl__http_xfer *x) {
  for (size_t i = 0; i < x->hdrs.len; i++) {
    free(SL_VEC_AT(&x->hdrs, sl__http_hdr, i).name);
    free(SL_VEC_AT(&x->hdrs, sl__http_hdr, i).value);
  }
  x->hdrs.len = 0;
}

void sl__http_xfer_init(sl__http_xfer *x, const sl__http *h, size_t body_max) {
  memset(x, 0, sizeof *x);
  x->h = h;
  x->fd = -1;
  sl__vec_init(&x->hdrs, sizeof(sl__http_hdr));
  sl__buf_init(&x->body, body_max);
  sl__err_clear(&x->cb_err);
}

void sl__http_xfer_free(sl__http_xfer *x) {
  hdrs_clear(x);
  sl__vec_free(&x->hdrs);
  sl__buf_free(&x->body);
  curl_slist_free_all(x->req);
  x->req = NULL;
}

/* Clears what one attempt produced. */
static void xfer_reset_attempt(sl__http_xfer *x) {
  hdrs_clear(x);
  size_t max = x->body.max;
  sl__buf_free(&x->body);
  sl__buf_init(&x->body, max);
  x->status = 0;
  x->errbuf[0] = '\0';
  x->got = 0;
  x->decided = false;
  x->to_file = false;
  x->no_ranges = false;
  sl__err_clear(&x->cb_err);
}

const char *sl__http_hdr_get(const sl__http_xfer *x, const char *name) {
  for (size_t i = 0; i < x->hdrs.len; i++) {
    const sl__http_hdr *e = &SL_VEC_AT(&x->hdrs, sl__http_hdr, i);
    if (strcasecmp(e->name, name) == 0)
      return e->value;
  }
  return NULL;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user) {
  sl__http_xfer *x = user;
  size_t len = size * nmemb;
  if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
    hdrs_clear(x);
    x->status = 0;
    const char *sp = memchr(data, ' ', len);
    long code = 0;
    for (const char *p = sp != NULL ? sp + 1 : data + len; p < data + len && *p >= '0' && *p <= '9'; p++)
      code = code * 10 + (*p - '0');
    x->status = code;
    return len;
  }
  const char *colon = memchr(data, ':', len);
  if (colon == NULL)
    return len;
  const char *ns = data;
  const char *ne = colon;
  while (ne > ns && (ne[-1] == ' ' || ne[-1] == '\t'))
    ne--;
  const char *vs = colon + 1;
  const char *ve = data + len;
  while (vs < ve && (*vs == ' ' || *vs == '\t'))
    vs++;
  while (ve > vs && (ve[-1] == '\r' || ve[-1] == '\n' || ve[-1] == ' ' || ve[-1] == '\t'))
    ve--;
  sl__http_hdr *e = sl__vec_push(&x->hdrs);
  if (e == NULL)
    return 0;
  e->name = sl__strndup(ns, (size_t)(ne - ns));
  e->value = sl__strndup(vs, (size_t)(ve - vs));
  if (e->name == NULL || e->value == NULL)
    return 0;
  return len;
}

/* Parses "bytes a-b/t". */
bool sl__http_parse_content_range(const char *v, uint64_t *a, uint64_t *b, uint64_t *t) {
  if (v == NULL || strncasecmp(v, "bytes ", 6) != 0)
    return false;
  char buf[96];
  size_t n = strlen(v + 6);
  if (n >= sizeof buf)
    return false;
  memcpy(buf, v + 6, n + 1);
  char *dash = strchr(buf, '-');
  char *slash = dash != NULL ? strchr(dash, '/') : NULL;
  if (dash == NULL || slash == NULL)
    return false;
  *dash = '\0';
  *slash = '\0';
  return sl__parse_u64(buf, a) && sl__parse_u64(dash + 1, b) && sl__parse_u64(slash + 1, t);
}

/* At the first body byte of a reply: decides where its body goes and checks its ranges. Returns
 * false (with cb_err set, or no_ranges) when the transfer must stop. */
static bool decide_body(sl__http_xfer *x) {
  x->decided = true;
  long code = x->status;
  if (x->fd < 0 || (code != 200 && code != 206))
    return true;
  if (code == 206) {
    uint64_t a = 0;
    uint64_t b = 0;
    uint64_t t = 0;
    const char *cr = sl__http_hdr_get(x, "Content-Range");
    if (!sl__http_parse_content_range(cr, &a, &b, &t)) {
      sl__err_set(&x->cb_err, SL_STATUS_HUB_METADATA, "unexpected reply for %s: 206 with Content-Range '%s'",
                  x->file, cr != NULL ? cr : "(missing)");
      return false;
    }
    if (t != x->total) {
      sl__err_set(&x->cb_err, SL_STATUS_HUB_SIZE,
                  "size mismatch for %s: expected %llu, the server reports %llu "
                  "(Content-Range '%s')",
                  x->file, (unsigned long long)x->total, (unsigned long long)t, cr);
      return false;
    }
    if (!x->ranged || a != x->range_start || b + 1 != x->limit) {
      sl__err_set(&x->cb_err, SL_STATUS_HUB_METADATA,
                  "unexpected reply for %s: Content-Range '%s' for the "
                  "requested bytes %llu-%llu",
                  x->file, cr, (unsigned long long)x->range_start, (unsigned long long)(x->limit - 1));
      return false;
    }
    x->to_file = true;
    return true;
  }
  /* 200: the whole file from byte 0. */
  if (x->chunk) {
    x->no_ranges = true;
    return false;
  }
  const char *cl = sl__http_hdr_get(x, "Content-Length");
  uint64_t len = 0;
  if (cl != NULL && (!sl__parse_u64(cl, &len) || len != x->total)) {
    sl__err_set(&x->cb_err, SL_STATUS_HUB_SIZE,
                "size mismatch for %s: expected %llu, the server sends %s bytes", x->file,
                (unsigned long long)x->total, cl);
    return false;
  }
  if (x->pos > 0) {
    if (ftruncate(x->fd, 0) != 0) {
      sl__err_set(&x->cb_err, SL_STATUS_HUB_CACHE, "cannot truncate the partial download of %s: %s", x->file,
                  strerror(errno));
      return false;
    }
    if (x->sink != NULL && x->sink->reset != NULL)
      x->sink->reset(x->sink->user);
    x->pos = 0;
  }
  x->limit = x->total;
  x->to_file = true;
  return true;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
  sl__http_xfer *x = user;
  size_t n = size * nmemb;
  if (sl__http_cancelled(x->h))
    return 0;
  if (!x->decided && !decide_body(x))
    return 0;
  if (!x->to_file) {
    if (!sl__buf_append(&x->body, data, n) && x->fd < 0) {
      sl__err_set(&x->cb_err, SL_STATUS_HUB_METADATA, "the reply for %s is larger than %zu bytes", x->file,
                  x->body.max);
      return 0;
    }
    return n;
  }
  if (n > x->limit - x->pos) {
    sl__err_set(&x->cb_err, SL_STATUS_HUB_SIZE, "size mismatch for %s: expected %llu, the server sent more",
                x->file, (unsigned long long)x->total);
    return 0;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(x->fd, data + done, n - done, (off_t)(x->pos + done));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC; /* a write that makes no progress: the device is full */
      sl__err_set(&x->cb_err, SL_STATUS_HUB_CACHE, "cannot write the download of %s at byte %llu: %s",
                  x->file, (unsigned long long)(x->pos + done), strerror(e));
      if (x->sink != NULL && x->sink->write_failed != NULL)
        x->sink->write_failed(x->sink->user, e);
      return 0;
    }
    done += (size_t)w;
  }
  if (x->sink != NULL && x->sink->data != NULL)
    x->sink->data(x->sink->user, x->pos, data, n);
  x->pos += n;
  x->got += n;
  return n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
  (void)dltotal;
  (void)dlnow;
  (void)ultotal;
  (void)ulnow;
  const sl__http_xfer *x = user;
  return sl__http_cancelled(x->h) ? 1 : 0;
}

/* Prepares x->easy for one attempt. range_to = 0 means an open range ("a-"). */
sl_status sl__http_xfer_setup(sl__http_xfer *x, const char *url, bool head, bool follow, long timeout_s,
                              bool ranged, uint64_t range_from, uint64_t range_to, sl__err *err) {
  CURL *e = x->easy;
  curl_easy_reset(e);
  curl_slist_free_all(x->req);
  x->req = NULL;
  struct curl_slist *l = curl_slist_append(NULL, "Accept-Encoding: identity");
  char *auth = NULL;
  if (l != NULL && x->h->token != NULL && sl__http_same_origin(x->h, url)) {
    auth = sl__asprintf("Authorization: Bearer %s", x->h->token);
    struct curl_slist *l2 = auth != NULL ? curl_slist_append(l, auth) : NULL;
    if (l2 == NULL) {
      curl_slist_free_all(l);
      l = NULL;
    }
    free(auth);
  }
  if (l == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory preparing a request to %s", url);
  x->req = l;
  char range[64];
  if (ranged) {
    if (range_to > 0)
      snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)range_from,
               (unsigned long long)range_to);
    else
      snprintf(range, sizeof range, "%llu-", (unsigned long long)range_from);
  }
  CURLcode rc = CURLE_OK;
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_URL, url);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_USERAGENT, x->h->user_agent);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->req);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, timeout_s);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, timeout_s);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_MAXREDIRS, (long)SL_HTTP_MAX_HOPS);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_UNRESTRICTED_AUTH, 0L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_NOBODY, head ? 1L : 0L);
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_RANGE, ranged ? range : NULL);
#if LIBCURL_VERSION_NUM >= 0x075500
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  rc = rc != CURLE_OK ? rc : curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  rc = rc != CURLE_OK
           ? rc
           : curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  if (rc != CURLE_OK)
    return sl__err_set(err, SL_STATUS_INTERNAL, "cannot configure a request to %s: %s", url,
                       curl_easy_strerror(rc));
  xfer_reset_attempt(x);
  return SL_STATUS_OK;
}
