/*
 * s3/request.c — the session, its connections, and one request sent (see s3/request.h).
 *
 * libcurl signs every request (CURLOPT_AWS_SIGV4 with the key pair; the session token and the
 * payload hash, which libcurl 7.88 does not add for S3, go as headers it then signs). The body of
 * a ranged GET is written straight into the caller's buffer, but only once the reply is known to
 * be the range asked (206 and its Content-Range, or 200 for a whole object asked from byte 0):
 * any other reply goes into a small error buffer, and a reply that would write past the range is
 * cut. A transfer that delivers no byte for the session's stall bound is cut too, and the caller's
 * stop function is polled all along.
 */
#include "s3/request.h"

#include "base/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* SHA-256 of an empty payload: what every request of this client (GETs) carries. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* Bounds of the stall bound, seconds: long enough for a loaded store, short against the watchdog. */
#define STALL_MIN_S 2
#define STALL_MAX_S 30
/* Retry bound when the load has no watchdog (timeout_s 0). */
#define RETRY_DEFAULT_S 300.0

/* process-wide: libcurl's global initialisation, done once whichever thread opens a session first. */
static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
/* process-wide: its result, read after g_curl_once. */
static CURLcode g_curl_init = CURLE_OK;

static void curl_init_once(void) {
  g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT);
}

sl_status sl__s3_open(double retry_s, sl__s3 **out, sl__err *err) {
  *out = NULL;
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_init != CURLE_OK)
    return sl__err_set(err, SL_STATUS_IO, "S3: cannot initialise libcurl: %s",
                       curl_easy_strerror(g_curl_init));
  sl__s3 *s = calloc(1, sizeof *s);
  if (s == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = sl__s3_conf_resolve(&s->conf, err);
  if (st != SL_STATUS_OK) {
    free(s);
    return st;
  }
  s->retry_s = retry_s > 0 ? retry_s : RETRY_DEFAULT_S;
  long stall = (long)(s->retry_s / 4);
  s->stall_s = stall < STALL_MIN_S ? STALL_MIN_S : stall > STALL_MAX_S ? STALL_MAX_S : stall;
  snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", s->conf.region);
  snprintf(s->user_agent, sizeof s->user_agent, "shardload/%s libcurl/%s", SL_VERSION_STRING,
           curl_version_info(CURLVERSION_NOW)->version);
  *out = s;
  return SL_STATUS_OK;
}

void sl__s3_close(sl__s3 *s) {
  if (s == NULL)
    return;
  sl__s3_conf_free(&s->conf);
  free(s);
}

const sl__s3_conf *sl__s3_settings(const sl__s3 *s) {
  return &s->conf;
}

sl_status sl__s3_conn_open(sl__s3 *s, sl__s3_conn **out, sl__err *err) {
  *out = NULL;
  sl__s3_conn *c = calloc(1, sizeof *c);
  CURL *easy = c != NULL ? curl_easy_init() : NULL;
  if (easy == NULL) {
    free(c);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory opening an S3 connection");
  }
  c->s = s;
  c->easy = easy;
  *out = c;
  return SL_STATUS_OK;
}

void sl__s3_conn_close(sl__s3_conn *c) {
  if (c == NULL)
    return;
  curl_easy_cleanup(c->easy);
  free(c);
}

void sl__s3_conn_counts(const sl__s3_conn *c, uint64_t *requests, uint64_t *bytes) {
  *requests = c->requests;
  *bytes = c->bytes;
}

/* ---- callbacks ---- */

typedef struct xfer {
  sl__s3_req *r;
  CURL *easy;
  bool checked; /* the reply's status and range were looked at (first body bytes) */
  bool to_dst;  /* body bytes go to r->dst */
} xfer;

/* Copies a header's value (after "name:"), trimmed, when line is that header. */
static void header_value(const char *line, size_t n, const char *name, char *dst, size_t cap) {
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
    return;
  const char *a = line + k + 1, *b = line + n;
  while (a < b && (*a == ' ' || *a == '\t'))
    a++;
  while (b > a && (b[-1] == '\r' || b[-1] == '\n' || b[-1] == ' '))
    b--;
  snprintf(dst, cap, "%.*s", (int)(b - a), a);
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
  xfer *x = ud;
  size_t n = size * nitems;
  if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) { /* a new reply (after a 100 Continue, say) */
    x->r->content_range[0] = '\0';
    x->r->bucket_region[0] = '\0';
  }
  header_value(line, n, "Content-Range", x->r->content_range, sizeof x->r->content_range);
  header_value(line, n, "x-amz-bucket-region", x->r->bucket_region, sizeof x->r->bucket_region);
  return n;
}

/* Whether the reply is the range asked: 206 with "bytes from-last/total", or 200 for a range that
 * starts at byte 0 (a store that ignores Range: accepted only if the body is no longer than asked). */
static bool range_ok(const sl__s3_req *r, long status) {
  if (status == 200)
    return r->from == 0;
  unsigned long long a = 0, b = 0;
  char tail[2];
  if (sscanf(r->content_range, "bytes %llu-%llu/%1[0-9*]", &a, &b, tail) != 3)
    return false;
  return a == r->from && b == r->from + r->len - 1;
}

static size_t on_body(char *data, size_t size, size_t nitems, void *ud) {
  xfer *x = ud;
  sl__s3_req *r = x->r;
  size_t n = size * nitems;
  if (!x->checked) {
    x->checked = true;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status >= 200 && r->status < 300 && r->len > 0) {
      if (!range_ok(r, r->status)) {
        r->refused = true;
        r->refused_why = r->status == 200 ? "the store ignored the byte range asked"
                                          : "the store answered with another byte range";
        return 0;
      }
      x->to_dst = true;
    }
  }
  if (x->to_dst) {
    if (n > r->len - r->got) {
      r->refused = true;
      r->refused_why = "the store sent more bytes than the range asked";
      return 0;
    }
    memcpy(r->dst + r->got, data, n);
    r->got += n;
    return n;
  }
  sl__buf *b = r->status >= 200 && r->status < 300 && r->body != NULL ? r->body : &r->error_body;
  if (!sl__buf_append(b, data, n) && b == r->body) {
    r->refused = true;
    r->refused_why = "a reply larger than this client reads";
    return 0;
  }
  return n; /* an error body past its bound: the rest is dropped, the start says the cause */
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
  (void)dltotal;
  (void)dlnow;
  (void)ultotal;
  (void)ulnow;
  sl__s3_req *r = ud;
  if (r->stop != NULL && r->stop(r->stop_ctx)) {
    r->stopped = true;
    return 1;
  }
  return 0;
}

/* ---- one request ---- */

static struct curl_slist *headers_of(const sl__s3 *s, const sl__s3_req *r, bool *ok) {
  struct curl_slist *h = NULL, *t = NULL;
  *ok = true;
  char line[1024 + 64];
  t = curl_slist_append(h, "x-amz-content-sha256: " EMPTY_SHA256);
  *ok = *ok && t != NULL;
  h = t != NULL ? t : h;
  if (r->if_match != NULL && r->if_match[0] != '\0') {
    snprintf(line, sizeof line, "If-Match: %s", r->if_match);
    t = curl_slist_append(h, line);
    *ok = *ok && t != NULL;
    h = t != NULL ? t : h;
  }
  if (s->conf.access_key != NULL && s->conf.session_token != NULL) {
    char *tok = sl__asprintf("x-amz-security-token: %s", s->conf.session_token);
    t = tok != NULL ? curl_slist_append(h, tok) : NULL;
    free(tok);
    *ok = *ok && t != NULL;
    h = t != NULL ? t : h;
  }
  return h;
}

static void set_options(sl__s3_conn *c, sl__s3_req *r, const char *url, struct curl_slist *hdrs, xfer *x,
                        char *range) {
  const sl__s3 *s = c->s;
  CURL *e = c->easy;
  curl_easy_reset(e);
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, s->stall_s);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s->stall_s);
  curl_easy_setopt(e, CURLOPT_USERAGENT, s->user_agent);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_msg);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
  if (r->len > 0) {
    snprintf(range, 64, "%llu-%llu", (unsigned long long)r->from, (unsigned long long)(r->from + r->len - 1));
    curl_easy_setopt(e, CURLOPT_RANGE, range);
  }
  if (s->conf.access_key != NULL) {
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(e, CURLOPT_USERNAME, s->conf.access_key);
    curl_easy_setopt(e, CURLOPT_PASSWORD, s->conf.secret_key);
  }
}

sl_status sl__s3_send(sl__s3_conn *c, sl__s3_req *r, sl__err *err) {
  r->curl_code = CURLE_OK;
  r->curl_msg[0] = '\0';
  r->status = 0;
  r->got = 0;
  r->refused = r->stopped = false;
  r->refused_why = NULL;
  r->content_range[0] = r->bucket_region[0] = '\0';
  sl__buf_free(&r->error_body);
  sl__buf_init(&r->error_body, SL_S3_ERROR_BODY_MAX);
  char *url = NULL;
  sl_status st = sl__s3_request_url(&c->s->conf, r->bucket, r->key, r->query, &url, err);
  if (st != SL_STATUS_OK)
    return st;
  bool ok = true;
  struct curl_slist *hdrs = headers_of(c->s, r, &ok);
  if (!ok) {
    curl_slist_free_all(hdrs);
    free(url);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  xfer x = {.r = r, .easy = c->easy};
  char range[64];
  set_options(c, r, url, hdrs, &x, range);
  CURLcode rc = curl_easy_perform(c->easy);
  r->curl_code = (int)rc;
  if (r->status == 0)
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &r->status);
  /* A reply with no body at all (a 404 to a HEAD-like GET, an empty object) passes no byte
   * through on_body: its status is still the reply's. */
  c->requests++;
  c->bytes += r->got;
  SL_DEBUG("S3 GET %s%s%s -> curl %d, HTTP %ld, %llu bytes", url, r->len > 0 ? " bytes " : "",
           r->len > 0 ? range : "", r->curl_code, r->status, (unsigned long long)r->got);
  curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
  curl_slist_free_all(hdrs);
  free(url);
  return SL_STATUS_OK;
}
