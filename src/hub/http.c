/*
 * hub/http.c — libcurl requests of the Hub client (docs/spec/HUB.md §2, §4, §5, §7). The only file that
 * includes curl.
 *
 * Organisation:
 *   helpers      URL encoding, etag normalisation, origins, retry waits, error classification;
 *   xfer         one request's state: response headers (reset at each status line), a body
 *                buffer for API replies and error pages, or a file target written with pwrite;
 *   mapping      HTTP replies and curl failures → SL_STATUS_HUB_* with URL, status, X-Error-Message
 *                and request id in the message (docs/spec/HUB.md §7.1);
 *   requests     the API GET and the metadata HEAD (buffered, retried per docs/spec/HUB.md §7.2);
 *   streams      docs/spec/HUB.md §5.2 single stream with resume, and §5.3 parallel chunks on one curl multi
 *                handle.
 * No request sets CURLOPT_TIMEOUT: a connect timeout plus a low-speed limit (1 byte/s over the
 * timeout) detect stalls without bounding long bodies. CURLOPT_UNRESTRICTED_AUTH stays off.
 */
#include "hub/http.h"

#include "hub/hub.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define SL_HTTP_API_BODY_MAX ((size_t)64 << 20) /* API replies larger than this are refused */
#define SL_HTTP_ERR_BODY_MAX ((size_t)64 << 10) /* error pages: the head is enough */
#define SL_HTTP_MAX_HOPS 10                     /* relative HEAD redirects / followed GET redirects */
#define SL_HTTP_POLL_MS 1000                    /* longest sleep of the chunk loop */

/* ---------------------------------------------------------------------------------------------
 * pure helpers
 * ------------------------------------------------------------------------------------------- */

char *sl__http_url_encode(const char *s, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  sl__buf b;
  sl__buf_init(&b, 0);
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    unsigned char ch = *p;
    bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '.' || ch == '-' || ch == '~' || (keep_slash && ch == '/');
    if (plain) {
      sl__buf_putc(&b, (char)ch);
    } else {
      char esc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
      sl__buf_append(&b, esc, 3);
    }
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}

bool sl__http_etag_normalize(const char *raw, char out[65]) {
  if (raw == NULL)
    return false;
  const char *p = raw;
  while (*p == 'W' || *p == '/')
    p++;
  while (*p == '"')
    p++;
  size_t n = strlen(p);
  while (n > 0 && p[n - 1] == '"')
    n--;
  if (n != 40 && n != 64)
    return false;
  char tmp[65];
  memcpy(tmp, p, n);
  tmp[n] = '\0';
  if (!sl__hub_is_hex(tmp, n))
    return false;
  memcpy(out, tmp, n + 1);
  return true;
}

/* Value of parameter `key` (e.g. "r") in a RateLimit header ("limit=10, remaining=0, reset=5" or
 * "\"default\";r=0;t=5"); false when absent or not an integer. */
static bool ratelimit_param(const char *header, const char *key, uint64_t *out) {
  size_t klen = strlen(key);
  const char *p = header;
  while (*p != '\0') {
    while (*p == ' ' || *p == ';' || *p == ',')
      p++;
    const char *end = p + strcspn(p, ";,");
    if ((size_t)(end - p) > klen && strncasecmp(p, key, klen) == 0 && p[klen] == '=') {
      char num[24];
      size_t n = (size_t)(end - p) - klen - 1;
      while (n > 0 && p[klen + 1 + n - 1] == ' ')
        n--;
      if (n > 0 && n < sizeof num) {
        memcpy(num, p + klen + 1, n);
        num[n] = '\0';
        return sl__parse_u64(num, out);
      }
      return false;
    }
    p = end;
  }
  return false;
}

uint64_t sl__http_retry_wait_units(unsigned retry, long status, const char *retry_after,
                                   const char *ratelimit) {
  uint64_t units = retry <= 1 ? 1 : (retry >= 4 ? 8 : (uint64_t)1 << (retry - 1));
  uint64_t r = 0;
  uint64_t t = 0;
  uint64_t n = 0;
  if (status == 429 && ratelimit != NULL && ratelimit_param(ratelimit, "r", &r) && r == 0 &&
      ratelimit_param(ratelimit, "t", &t)) {
    units = t + 1;
  } else if (retry_after != NULL && sl__parse_u64(retry_after, &n)) {
    units = n + 1;
  }
  if (units > SL_HTTP_MAX_WAIT_UNITS || units == 0)
    units = SL_HTTP_MAX_WAIT_UNITS;
  return units;
}

bool sl__http_fallback_eligible(sl_status status) {
  switch (status) {
  case SL_STATUS_HUB_GATED:
  case SL_STATUS_HUB_DISABLED:
  case SL_STATUS_HUB_REPO_NOT_FOUND:
  case SL_STATUS_HUB_BAD_TOKEN:
  case SL_STATUS_HUB_FORBIDDEN:
  case SL_STATUS_HUB_NOT_FOUND:
  case SL_STATUS_HUB_BAD_REQUEST:
  case SL_STATUS_HUB_HTTP:
  case SL_STATUS_HUB_NETWORK:
    return true;
  default:
    return false;
  }
}

static bool status_retryable(long code) {
  return code == 408 || code == 429 || code == 500 || code == 502 || code == 503 || code == 504;
}

/* Scheme, lower-cased host and port (scheme default when absent) of an absolute URL. */
static bool url_parts(const char *url, char **scheme, char **host, long *port) {
  CURLU *u = curl_url();
  if (u == NULL)
    return false;
  char *s = NULL;
  char *hst = NULL;
  char *prt = NULL;
  bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &s, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_HOST, &hst, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_PORT, &prt, CURLU_DEFAULT_PORT) == CURLUE_OK;
  uint64_t p = 0;
  ok = ok && sl__parse_u64(prt, &p) && p <= 65535;
  if (ok) {
    for (char *c = hst; *c != '\0'; c++) {
      if (*c >= 'A' && *c <= 'Z')
        *c = (char)(*c - 'A' + 'a');
    }
    *scheme = sl__strdup(s);
    *host = sl__strdup(hst);
    *port = (long)p;
    ok = *scheme != NULL && *host != NULL;
    if (!ok) {
      free(*scheme);
      free(*host);
    }
  }
  curl_free(s);
  curl_free(hst);
  curl_free(prt);
  curl_url_cleanup(u);
  return ok;
}

bool sl__http_same_origin(const sl__http *h, const char *url) {
  char *scheme = NULL;
  char *host = NULL;
  long port = 0;
  if (!url_parts(url, &scheme, &host, &port))
    return false;
  bool same = strcmp(host, h->resolve_host) == 0 && port == h->resolve_port;
  free(scheme);
  free(host);
  return same;
}

/* "scheme://host:port" + path of a relative Location (its query and fragment dropped). */
static char *join_relative(const char *base, const char *location) {
  char *scheme = NULL;
  char *host = NULL;
  long port = 0;
  if (!url_parts(base, &scheme, &host, &port))
    return NULL;
  size_t n = strcspn(location, "?#");
  bool v6 = strchr(host, ':') != NULL && host[0] != '[';
  char *out =
      sl__asprintf("%s://%s%s%s:%ld%.*s", scheme, v6 ? "[" : "", host, v6 ? "]" : "", port, (int)n, location);
  free(scheme);
  free(host);
  return out;
}

static bool cancelled(const sl__http *h) {
  return h->cancel != NULL && atomic_load(h->cancel) != 0;
}

/* Sleeps units × backoff_base_ms, waking early on cancellation. */
static void wait_units(const sl__http *h, uint64_t units) {
  uint64_t ms = 0;
  if (sl__mul_overflow(units, h->backoff_base_ms, &ms))
    ms = UINT64_MAX;
  double end = sl__now() + (double)ms / 1000.0;
  while (!cancelled(h)) {
    double left = end - sl__now();
    if (left <= 0)
      break;
    double step = left < 0.02 ? left : 0.02;
    struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* ---------------------------------------------------------------------------------------------
 * initialisation
 * ------------------------------------------------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init_once(void) {
  global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

sl_status sl__http_global_init(sl__err *err) {
  pthread_once(&global_once, global_init_once);
  if (global_rc != CURLE_OK)
    return sl__err_set(err, SL_STATUS_HUB_NETWORK, "cannot initialise libcurl: %s",
                       curl_easy_strerror(global_rc));
  const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
  if (v->version_num < 0x073a00)
    return sl__err_set(err, SL_STATUS_UNSUPPORTED,
                       "libcurl %s is too old: the Hub client needs 7.58 or newer", v->version);
  return SL_STATUS_OK;
}

sl_status sl__http_init(sl__http *h, const char *endpoint, const char *token, long etag_timeout_s,
                        long download_timeout_s, uint64_t backoff_base_ms, atomic_int *cancel, sl__err *err) {
  memset(h, 0, sizeof *h);
  sl_status st = sl__http_global_init(err);
  if (st != SL_STATUS_OK)
    return st;
  if (!url_parts(endpoint, &h->resolve_scheme, &h->resolve_host, &h->resolve_port))
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "HF_ENDPOINT '%s' is not a valid URL (expected e.g. "
                       "https://huggingface.co)",
                       endpoint);
  if (strcasecmp(h->resolve_scheme, "http") != 0 && strcasecmp(h->resolve_scheme, "https") != 0) {
    sl__http_free(h);
    return sl__err_set(err, SL_STATUS_CONFIG, "HF_ENDPOINT '%s' must be an http:// or https:// URL",
                       endpoint);
  }
  h->token = token;
  h->etag_timeout_s = etag_timeout_s;
  h->download_timeout_s = download_timeout_s;
  h->backoff_base_ms = backoff_base_ms;
  h->cancel = cancel;
  snprintf(h->user_agent, sizeof h->user_agent, "shardload/%s libcurl/%s", SL_VERSION_STRING,
           curl_version_info(CURLVERSION_NOW)->version);
  return SL_STATUS_OK;
}

void sl__http_free(sl__http *h) {
  if (h == NULL)
    return;
  free(h->resolve_host);
  free(h->resolve_scheme);
  memset(h, 0, sizeof *h);
}

sl_status sl__http_client_init(sl__http_client *c, const sl__http *h, sl__err *err) {
  c->h = h;
  c->easy = curl_easy_init();
  if (c->easy == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "cannot create a libcurl handle");
  return SL_STATUS_OK;
}

void sl__http_client_free(sl__http_client *c) {
  if (c == NULL)
    return;
  if (c->easy != NULL)
    curl_easy_cleanup(c->easy);
  c->easy = NULL;
}

void sl__http_meta_free(sl__http_meta *m) {
  if (m == NULL)
    return;
  free(m->location);
  memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------------------------------------
 * xfer: one request
 * ------------------------------------------------------------------------------------------- */

typedef struct hdr {
  char *name;
  char *value;
} hdr;

typedef struct xfer {
  const sl__http *h;
  CURL *easy;
  struct curl_slist *req; /* request headers */
  long status;            /* code of the last status line */
  sl__vec hdrs;           /* hdr: headers of the last response */
  sl__buf body;           /* API reply or error page */
  char errbuf[CURL_ERROR_SIZE];
  /* file target (fd >= 0) */
  int fd;
  bool ranged;          /* a Range header was sent */
  bool chunk;           /* a parallel chunk: a 200 reply means "no ranges" */
  uint64_t range_start; /* first byte asked for */
  uint64_t pos;         /* next file offset to write */
  uint64_t limit;       /* one past the last byte this request may write */
  uint64_t total;       /* expected size of the whole file */
  uint64_t got;         /* body bytes written during this attempt */
  bool decided;         /* the reply's status was examined at its first body byte */
  bool to_file;         /* this reply's body goes to the file */
  bool no_ranges;       /* a chunk was answered with 200 */
  const sl__http_sink *sink;
  const char *file; /* name in messages */
  sl__err cb_err;   /* failure found inside a callback */
} xfer;

static void hdrs_clear(xfer *x) {
  for (size_t i = 0; i < x->hdrs.len; i++) {
    free(SL_VEC_AT(&x->hdrs, hdr, i).name);
    free(SL_VEC_AT(&x->hdrs, hdr, i).value);
  }
  x->hdrs.len = 0;
}

static void xfer_init(xfer *x, const sl__http *h, size_t body_max) {
  memset(x, 0, sizeof *x);
  x->h = h;
  x->fd = -1;
  sl__vec_init(&x->hdrs, sizeof(hdr));
  sl__buf_init(&x->body, body_max);
  sl__err_clear(&x->cb_err);
}

static void xfer_free(xfer *x) {
  hdrs_clear(x);
  sl__vec_free(&x->hdrs);
  sl__buf_free(&x->body);
  curl_slist_free_all(x->req);
  x->req = NULL;
}

/* Clears what one attempt produced. */
static void xfer_reset_attempt(xfer *x) {
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

static const char *hdr_get(const xfer *x, const char *name) {
  for (size_t i = 0; i < x->hdrs.len; i++) {
    const hdr *e = &SL_VEC_AT(&x->hdrs, hdr, i);
    if (strcasecmp(e->name, name) == 0)
      return e->value;
  }
  return NULL;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user) {
  xfer *x = user;
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
  hdr *e = sl__vec_push(&x->hdrs);
  if (e == NULL)
    return 0;
  e->name = sl__strndup(ns, (size_t)(ne - ns));
  e->value = sl__strndup(vs, (size_t)(ve - vs));
  if (e->name == NULL || e->value == NULL)
    return 0;
  return len;
}

/* Parses "bytes a-b/t". */
static bool parse_content_range(const char *v, uint64_t *a, uint64_t *b, uint64_t *t) {
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
static bool decide_body(xfer *x) {
  x->decided = true;
  long code = x->status;
  if (x->fd < 0 || (code != 200 && code != 206))
    return true;
  if (code == 206) {
    uint64_t a = 0;
    uint64_t b = 0;
    uint64_t t = 0;
    const char *cr = hdr_get(x, "Content-Range");
    if (!parse_content_range(cr, &a, &b, &t)) {
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
  const char *cl = hdr_get(x, "Content-Length");
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
  xfer *x = user;
  size_t n = size * nmemb;
  if (cancelled(x->h))
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
      sl__err_set(&x->cb_err, SL_STATUS_HUB_CACHE, "cannot write the download of %s: %s", x->file,
                  w < 0 ? strerror(errno) : "no space written");
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
  const xfer *x = user;
  return cancelled(x->h) ? 1 : 0;
}

/* Prepares x->easy for one attempt. range_to = 0 means an open range ("a-"). */
static sl_status xfer_setup(xfer *x, const char *url, bool head, bool follow, long timeout_s, bool ranged,
                            uint64_t range_from, uint64_t range_to, sl__err *err) {
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

/* ---------------------------------------------------------------------------------------------
 * mapping of failures (docs/spec/HUB.md §7.1)
 * ------------------------------------------------------------------------------------------- */

typedef enum url_kind { URL_API, URL_RESOLVE, URL_OTHER } url_kind;

typedef enum net_class { NET_TRANSIENT, NET_TLS, NET_PROXY, NET_FATAL } net_class;

static net_class classify_curl(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_AGAIN:
    return NET_TRANSIENT;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_SHUTDOWN_FAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_USE_SSL_FAILED:
    return NET_TLS;
  case CURLE_COULDNT_RESOLVE_PROXY:
#if LIBCURL_VERSION_NUM >= 0x074900
  case CURLE_PROXY:
#endif
    return NET_PROXY;
  default:
    return NET_FATAL;
  }
}

/* "GET url" plus curl's detail. */
static sl_status net_error(const xfer *x, CURLcode rc, const char *method, const char *url, const char *what,
                           unsigned attempts, sl__err *err) {
  net_class k = classify_curl(rc);
  const char *detail = x->errbuf[0] != '\0' ? x->errbuf : curl_easy_strerror(rc);
  if (k == NET_TLS)
    return sl__err_set(err, SL_STATUS_HUB_TLS, "%s: TLS failure on %s %s: %s", what, method, url, detail);
  if (k == NET_PROXY)
    return sl__err_set(err, SL_STATUS_HUB_PROXY,
                       "%s: proxy failure on %s %s: %s (check http_proxy/https_proxy)", what, method, url,
                       detail);
  return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on %s %s: %s (%u attempt%s)", what,
                     method, url, detail, attempts, attempts == 1 ? "" : "s");
}

/* The "error" (string or list) or "error_description" of an API JSON reply, or NULL. */
static char *api_error_text(const sl__buf *body) {
  if (body->len == 0)
    return NULL;
  cJSON *root = cJSON_ParseWithLength(body->data, body->len);
  if (root == NULL)
    return NULL;
  char *out = NULL;
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
  if (cJSON_IsString(e)) {
    out = sl__strdup(e->valuestring);
  } else if (cJSON_IsArray(e)) {
    sl__buf b;
    sl__buf_init(&b, 4096);
    const cJSON *item = NULL;
    cJSON_ArrayForEach(item, e) {
      if (cJSON_IsString(item))
        sl__buf_appendf(&b, "%s%s", b.len > 0 ? "; " : "", item->valuestring);
    }
    out = b.len > 0 ? sl__buf_take(&b) : NULL;
    sl__buf_free(&b);
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "error_description");
  if (out == NULL && cJSON_IsString(d))
    out = sl__strdup(d->valuestring);
  cJSON_Delete(root);
  return out;
}

/* Maps an HTTP error reply (status ≥ 400) to a status and a message (first matching row wins). */
static sl_status http_error(const xfer *x, url_kind kind, const char *method, const char *url,
                            const char *what, unsigned retries, sl__err *err) {
  long code = x->status;
  const char *xcode = hdr_get(x, "X-Error-Code");
  const char *xmsg = hdr_get(x, "X-Error-Message");
  const char *rid = hdr_get(x, "X-Request-Id");
  if (rid == NULL)
    rid = hdr_get(x, "X-Amzn-Trace-Id");
  if (rid == NULL)
    rid = hdr_get(x, "X-Amz-Cf-Id");
  char *api = kind == URL_API ? api_error_text(&x->body) : NULL;
  char retried[48] = "";
  if (retries > 0)
    snprintf(retried, sizeof retried, " after %u retr%s", retries, retries == 1 ? "y" : "ies");
  char detail[2048];
  snprintf(detail, sizeof detail, "%s %s: HTTP %ld%s%s%s%s%s%s%s", method, url, code, retried,
           xmsg != NULL ? "; X-Error-Message: " : "", xmsg != NULL ? xmsg : "",
           rid != NULL ? "; request id: " : "", rid != NULL ? rid : "", api != NULL ? "; error: " : "",
           api != NULL ? api : "");
  free(api);
  bool bad_creds = xmsg != NULL && strcmp(xmsg, "Invalid credentials in Authorization header") == 0;
  if (xcode != NULL && strcmp(xcode, "RevisionNotFound") == 0)
    return sl__err_set(err, SL_STATUS_HUB_REVISION_NOT_FOUND, "%s: revision not found on the Hub (%s)", what,
                       detail);
  if (xcode != NULL && strcmp(xcode, "EntryNotFound") == 0)
    return sl__err_set(err, SL_STATUS_HUB_ENTRY_NOT_FOUND, "%s: file not found in the repository (%s)", what,
                       detail);
  if (xcode != NULL && strcmp(xcode, "GatedRepo") == 0) {
    if (code == 401)
      return sl__err_set(
          err, SL_STATUS_HUB_GATED,
          "%s: gated repository: log in by setting HF_TOKEN (or the "
          "hub_token option) to a token of an account that accepted the terms on the repository "
          "page (%s)",
          what, detail);
    return sl__err_set(err, SL_STATUS_HUB_GATED,
                       "%s: gated repository: access has not been granted to this "
                       "token's account yet; accept the terms on the repository page (the token comes from "
                       "HF_TOKEN) (%s)",
                       what, detail);
  }
  if (xmsg != NULL && strcmp(xmsg, "Access to this resource is disabled.") == 0)
    return sl__err_set(err, SL_STATUS_HUB_DISABLED, "%s: access to this repository is disabled (%s)", what,
                       detail);
  if ((xcode != NULL && strcmp(xcode, "RepoNotFound") == 0) ||
      (code == 401 && kind != URL_OTHER && !bad_creds))
    return sl__err_set(err, SL_STATUS_HUB_REPO_NOT_FOUND,
                       "%s: repository not found: check the name; if it is "
                       "private or gated, set HF_TOKEN to a token with access (or accept the terms on the "
                       "repository page) (%s)",
                       what, detail);
  if (code == 401 && bad_creds)
    return sl__err_set(err, SL_STATUS_HUB_BAD_TOKEN,
                       "%s: the Hub rejected the token: check HF_TOKEN or the "
                       "hub_token option (%s)",
                       what, detail);
  if (code == 403)
    return sl__err_set(err, SL_STATUS_HUB_FORBIDDEN, "%s: forbidden (%s)", what, detail);
  if (code == 404)
    return sl__err_set(err, SL_STATUS_HUB_NOT_FOUND, "%s: not found (%s)", what, detail);
  if (code == 400)
    return sl__err_set(err, SL_STATUS_HUB_BAD_REQUEST, "%s: bad request (%s)", what, detail);
  return sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: HTTP error %ld (%s)", what, code, detail);
}

/* ---------------------------------------------------------------------------------------------
 * buffered requests: API GET and HEAD
 * ------------------------------------------------------------------------------------------- */

/* Performs a buffered request, retrying retryable statuses and transient network failures per
 * docs/spec/HUB.md §7.2. Returns OK with the last reply in x (any status, *retries = retries made), or an
 * error for network failures. */
static sl_status buffered_request(sl__http_client *c, xfer *x, bool head, const char *url, const char *what,
                                  long first_timeout, long later_timeout, unsigned *retries, sl__err *err) {
  const sl__http *h = c->h;
  const char *method = head ? "HEAD" : "GET";
  x->easy = c->easy;
  for (unsigned attempt = 0;; attempt++) {
    *retries = attempt;
    if (cancelled(h))
      return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: cancelled", what);
    sl_status st =
        xfer_setup(x, url, head, !head, attempt == 0 ? first_timeout : later_timeout, false, 0, 0, err);
    if (st != SL_STATUS_OK)
      return st;
    CURLcode rc = curl_easy_perform(x->easy);
    if (x->cb_err.status != SL_STATUS_OK) {
      sl__err_copy(err, &x->cb_err);
      return x->cb_err.status;
    }
    if (cancelled(h))
      return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: cancelled", what);
    if (rc != CURLE_OK) {
      if (classify_curl(rc) != NET_TRANSIENT || attempt >= SL_HTTP_MAX_RETRIES)
        return net_error(x, rc, method, url, what, attempt + 1, err);
      SL_DEBUG("%s %s: %s; retrying", method, url, curl_easy_strerror(rc));
      wait_units(h, sl__http_retry_wait_units(attempt + 1, 0, NULL, NULL));
      continue;
    }
    if (!status_retryable(x->status) || attempt >= SL_HTTP_MAX_RETRIES)
      return SL_STATUS_OK;
    uint64_t units =
        sl__http_retry_wait_units(attempt + 1, x->status, hdr_get(x, "Retry-After"), hdr_get(x, "RateLimit"));
    SL_DEBUG("%s %s: HTTP %ld; retrying in %llu units", method, url, x->status, (unsigned long long)units);
    wait_units(h, units);
  }
}

sl_status sl__http_get_api(sl__http_client *c, const char *url, const char *what, sl__buf *body,
                           sl__err *err) {
  xfer x;
  xfer_init(&x, c->h, SL_HTTP_API_BODY_MAX);
  x.file = what;
  unsigned retries = 0;
  long t = c->h->download_timeout_s;
  sl_status st = buffered_request(c, &x, false, url, what, t, t, &retries, err);
  if (st == SL_STATUS_OK && x.status >= 400)
    st = http_error(&x, URL_API, "GET", url, what, retries, err);
  else if (st == SL_STATUS_OK && x.status != 200)
    st = sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: HTTP %ld", url, x.status);
  if (st == SL_STATUS_OK) {
    *body = x.body;
    sl__buf_init(&x.body, SL_HTTP_API_BODY_MAX);
  }
  xfer_free(&x);
  return st;
}

/* Reads the docs/spec/HUB.md §4 fields of a final HEAD reply. */
static sl_status head_fields(const xfer *x, const char *url, const char *file, sl__http_meta *out,
                             sl__err *err) {
  bool redirect = x->status >= 300 && x->status < 400;
  const char *commit = hdr_get(x, "X-Repo-Commit");
  const char *etag = hdr_get(x, "X-Linked-Etag");
  if (etag == NULL)
    etag = hdr_get(x, "ETag");
  const char *size = hdr_get(x, "X-Linked-Size");
  if (size == NULL && !redirect)
    size = hdr_get(x, "Content-Length");
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
  const char *loc = hdr_get(x, "Location");
  if (loc == NULL || loc[0] == '\0')
    out->location = sl__strdup(url);
  else if (loc[0] == '/' && loc[1] != '/')
    out->location = join_relative(url, loc);
  else
    out->location = sl__strdup(loc);
  if (out->location == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the metadata of %s", file);
  return SL_STATUS_OK;
}

sl_status sl__http_head(sl__http_client *c, const char *url, const char *file, sl__http_meta *out,
                        sl__err *err) {
  memset(out, 0, sizeof *out);
  xfer x;
  xfer_init(&x, c->h, SL_HTTP_ERR_BODY_MAX);
  x.file = file;
  char *cur = sl__strdup(url);
  sl_status st = cur != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (int hops = 0; st == SL_STATUS_OK; hops++) {
    unsigned retries = 0;
    st = buffered_request(c, &x, true, cur, file, c->h->etag_timeout_s, SL_HTTP_RETRY_HEAD_TIMEOUT_S,
                          &retries, err);
    if (st != SL_STATUS_OK)
      break;
    const char *commit = hdr_get(&x, "X-Repo-Commit");
    if (sl__hub_is_hex(commit, 40))
      memcpy(out->commit, commit, 41);
    if (x.status >= 400) {
      st = http_error(&x, URL_RESOLVE, "HEAD", cur, file, retries, err);
      break;
    }
    const char *loc = hdr_get(&x, "Location");
    bool relative = loc != NULL && loc[0] == '/' && loc[1] != '/';
    if (x.status >= 300 && x.status < 400 && relative) {
      if (hops + 1 > SL_HTTP_MAX_HOPS) {
        st = sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: more than %d redirects (last HEAD %s)", file,
                         SL_HTTP_MAX_HOPS, cur);
        break;
      }
      char *next = join_relative(cur, loc);
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
  xfer_free(&x);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * docs/spec/HUB.md §5.2 single stream
 * ------------------------------------------------------------------------------------------- */

/* After a broken attempt: the dead counter and the wait (1 unit after progress, else backoff).
 * Returns false when the attempts are exhausted. */
static bool after_break(const sl__http *h, uint64_t got, unsigned *dead, unsigned *status_retries) {
  if (got > 0) {
    *dead = 0;
    *status_retries = 0;
    wait_units(h, 1);
    return true;
  }
  (*dead)++;
  if (*dead >= SL_HTTP_MAX_DEAD_ATTEMPTS)
    return false;
  wait_units(h, sl__http_retry_wait_units(*dead, 0, NULL, NULL));
  return true;
}

sl_status sl__http_fetch_stream(sl__http_client *c, const char *url, const char *file, int fd, uint64_t have,
                                uint64_t size, const sl__http_sink *sink, sl__err *err) {
  const sl__http *h = c->h;
  xfer x;
  xfer_init(&x, h, SL_HTTP_ERR_BODY_MAX);
  x.easy = c->easy;
  x.fd = fd;
  x.file = file;
  x.sink = sink;
  x.total = size;
  x.pos = have;
  url_kind kind = sl__http_same_origin(h, url) ? URL_RESOLVE : URL_OTHER;
  unsigned status_retries = 0;
  unsigned dead = 0;
  unsigned attempts = 0;
  bool retried_416 = false;
  bool skip_range = false;
  sl_status st = SL_STATUS_OK;
  for (;;) {
    if (cancelled(h)) {
      st = sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
      break;
    }
    if (skip_range && x.pos > 0) {
      if (ftruncate(fd, 0) != 0) {
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot truncate the partial download of %s: %s", file,
                         strerror(errno));
        break;
      }
      if (sink != NULL && sink->reset != NULL)
        sink->reset(sink->user);
      x.pos = 0;
    }
    skip_range = false;
    x.ranged = x.pos > 0;
    x.range_start = x.pos;
    x.limit = size;
    st = xfer_setup(&x, url, false, true, h->download_timeout_s, x.ranged, x.pos, 0, err);
    if (st != SL_STATUS_OK)
      break;
    attempts++;
    CURLcode rc = curl_easy_perform(x.easy);
    if (x.cb_err.status != SL_STATUS_OK) {
      sl__err_copy(err, &x.cb_err);
      st = x.cb_err.status;
      break;
    }
    if (cancelled(h))
      continue;
    if (rc == CURLE_OK && (x.status == 200 || x.status == 206) && x.pos == size)
      break;
    if (rc == CURLE_OK && x.status == 416 && x.ranged && !retried_416) {
      SL_DEBUG("GET %s: 416 for bytes %llu-: restarting without a range", url,
               (unsigned long long)x.range_start);
      retried_416 = true;
      skip_range = true;
      continue;
    }
    if (rc == CURLE_OK && status_retryable(x.status)) {
      if (status_retries >= SL_HTTP_MAX_RETRIES) {
        st = http_error(&x, kind, "GET", url, file, status_retries, err);
        break;
      }
      status_retries++;
      wait_units(h, sl__http_retry_wait_units(status_retries, x.status, hdr_get(&x, "Retry-After"),
                                              hdr_get(&x, "RateLimit")));
      continue;
    }
    if (rc == CURLE_OK && x.status >= 300 && x.status != 416) {
      st = x.status >= 400 ? http_error(&x, kind, "GET", url, file, status_retries, err)
                           : sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: unexpected HTTP %ld from GET %s", file,
                                         x.status, url);
      break;
    }
    if (rc == CURLE_OK && x.status != 200 && x.status != 206) {
      st = http_error(&x, kind, "GET", url, file, status_retries, err);
      break;
    }
    if (rc != CURLE_OK && classify_curl(rc) != NET_TRANSIENT) {
      st = net_error(&x, rc, "GET", url, file, attempts, err);
      break;
    }
    /* A break: reset, timeout, or a body shorter than announced. */
    SL_DEBUG("GET %s: stream broke at byte %llu (%s)", url, (unsigned long long)x.pos,
             rc != CURLE_OK ? curl_easy_strerror(rc) : "short body");
    if (!after_break(h, x.got, &dead, &status_retries)) {
      if (rc != CURLE_OK)
        net_error(&x, rc, "GET", url, file, attempts, err);
      else
        sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on GET %s: short body", file, url);
      sl__err_prefix(err,
                     "download of %s gave up after %d consecutive attempts without data, at byte %llu of "
                     "%llu",
                     file, SL_HTTP_MAX_DEAD_ATTEMPTS, (unsigned long long)x.pos, (unsigned long long)size);
      st = SL_STATUS_HUB_NETWORK;
      break;
    }
  }
  xfer_free(&x);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * docs/spec/HUB.md §5.3 parallel chunks
 * ------------------------------------------------------------------------------------------- */

typedef struct chunk {
  xfer x;      /* x.easy: this slot's handle, reused */
  bool in_use; /* holds a chunk not yet complete */
  bool active; /* added to the multi handle */
  uint64_t a;  /* chunk [a, b) */
  uint64_t b;
  unsigned status_retries;
  unsigned dead;
  unsigned attempts;
  double not_before; /* monotonic time before which it must not restart */
} chunk;

/* Examines a finished transfer of a chunk. Returns OK to go on (done or rescheduled). */
static sl_status chunk_finished(const sl__http *h, chunk *k, CURLcode rc, const char *url, const char *file,
                                bool *no_ranges, sl__err *err) {
  xfer *x = &k->x;
  if (x->cb_err.status != SL_STATUS_OK) {
    sl__err_copy(err, &x->cb_err);
    return x->cb_err.status;
  }
  if (x->no_ranges || (rc == CURLE_OK && x->status == 200)) {
    *no_ranges = true;
    return SL_STATUS_UNSUPPORTED;
  }
  if (cancelled(h))
    return sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
  url_kind kind = sl__http_same_origin(h, url) ? URL_RESOLVE : URL_OTHER;
  if (rc == CURLE_OK && x->status == 206 && x->pos == k->b) {
    k->in_use = false;
    return SL_STATUS_OK;
  }
  if (rc == CURLE_OK && status_retryable(x->status)) {
    if (k->status_retries >= SL_HTTP_MAX_RETRIES)
      return http_error(x, kind, "GET", url, file, k->status_retries, err);
    k->status_retries++;
    uint64_t units = sl__http_retry_wait_units(k->status_retries, x->status, hdr_get(x, "Retry-After"),
                                               hdr_get(x, "RateLimit"));
    k->not_before = sl__now() + (double)units * (double)h->backoff_base_ms / 1000.0;
    return SL_STATUS_OK;
  }
  if (rc == CURLE_OK && x->status != 206)
    return http_error(x, kind, "GET", url, file, k->status_retries, err);
  if (rc != CURLE_OK && classify_curl(rc) != NET_TRANSIENT)
    return net_error(x, rc, "GET", url, file, k->attempts, err);
  /* A break: resume this chunk from its own received bytes. */
  if (x->got > 0) {
    k->dead = 0;
    k->status_retries = 0;
    k->not_before = sl__now() + (double)h->backoff_base_ms / 1000.0;
    return SL_STATUS_OK;
  }
  k->dead++;
  if (k->dead >= SL_HTTP_MAX_DEAD_ATTEMPTS) {
    if (rc != CURLE_OK)
      net_error(x, rc, "GET", url, file, k->attempts, err);
    else
      sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on GET %s: short body", file, url);
    sl__err_prefix(err, "download of %s (bytes %llu-%llu) gave up after %d consecutive attempts without data",
                   file, (unsigned long long)k->a, (unsigned long long)(k->b - 1), SL_HTTP_MAX_DEAD_ATTEMPTS);
    return SL_STATUS_HUB_NETWORK;
  }
  uint64_t units = sl__http_retry_wait_units(k->dead, 0, NULL, NULL);
  k->not_before = sl__now() + (double)units * (double)h->backoff_base_ms / 1000.0;
  return SL_STATUS_OK;
}

sl_status sl__http_fetch_chunks(const sl__http *h, const char *url, const char *file, int fd, uint64_t size,
                                uint64_t chunk_bytes, uint32_t connections, const sl__http_sink *sink,
                                bool *no_ranges, sl__err *err) {
  *no_ranges = false;
  if (chunk_bytes == 0 || connections == 0)
    return sl__err_set(err, SL_STATUS_CONFIG, "hub_chunk_bytes and hub_connections must be positive");
  uint64_t n_chunks = size / chunk_bytes + (size % chunk_bytes != 0 ? 1 : 0);
  uint32_t slots = connections;
  if ((uint64_t)slots > n_chunks)
    slots = (uint32_t)n_chunks;
  CURLM *multi = curl_multi_init();
  chunk *ks = calloc(slots > 0 ? slots : 1, sizeof *ks);
  sl_status st = multi != NULL && ks != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", file);
  for (uint32_t i = 0; st == SL_STATUS_OK && i < slots; i++) {
    xfer_init(&ks[i].x, h, SL_HTTP_ERR_BODY_MAX);
    ks[i].x.easy = curl_easy_init();
    ks[i].x.fd = fd;
    ks[i].x.file = file;
    ks[i].x.sink = sink;
    ks[i].x.total = size;
    ks[i].x.chunk = true;
    if (ks[i].x.easy == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "cannot create a libcurl handle");
  }
  uint64_t next = 0;
  while (st == SL_STATUS_OK) {
    bool any = false;
    double now = sl__now();
    double soonest = now + (double)SL_HTTP_POLL_MS / 1000.0;
    for (uint32_t i = 0; i < slots && st == SL_STATUS_OK; i++) {
      chunk *k = &ks[i];
      if (!k->in_use && next < n_chunks) {
        k->in_use = true;
        k->a = next * chunk_bytes;
        k->b = size - k->a < chunk_bytes ? size : k->a + chunk_bytes;
        k->x.pos = k->a;
        k->status_retries = 0;
        k->dead = 0;
        k->attempts = 0;
        k->not_before = 0;
        next++;
      }
      if (!k->in_use)
        continue;
      any = true;
      if (k->active)
        continue;
      if (k->not_before > now) {
        soonest = k->not_before < soonest ? k->not_before : soonest;
        continue;
      }
      k->x.ranged = true;
      k->x.range_start = k->x.pos;
      k->x.limit = k->b;
      st = xfer_setup(&k->x, url, false, true, h->download_timeout_s, true, k->x.pos, k->b - 1, err);
      if (st == SL_STATUS_OK && curl_multi_add_handle(multi, k->x.easy) != CURLM_OK)
        st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot start a ranged request for %s", file);
      k->active = st == SL_STATUS_OK;
      k->attempts++;
    }
    if (st != SL_STATUS_OK || !any)
      break;
    int running = 0;
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      st = sl__err_set(err, SL_STATUS_INTERNAL, "libcurl multi interface failed while downloading %s", file);
      break;
    }
    for (;;) {
      int left = 0;
      CURLMsg *m = curl_multi_info_read(multi, &left);
      if (m == NULL)
        break;
      if (m->msg != CURLMSG_DONE)
        continue;
      CURL *done = m->easy_handle;
      CURLcode rc = m->data.result;
      for (uint32_t i = 0; i < slots; i++) {
        if (ks[i].x.easy != done || !ks[i].active)
          continue;
        curl_multi_remove_handle(multi, done);
        ks[i].active = false;
        if (st == SL_STATUS_OK)
          st = chunk_finished(h, &ks[i], rc, url, file, no_ranges, err);
        break;
      }
    }
    if (st != SL_STATUS_OK)
      break;
    if (cancelled(h)) {
      st = sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
      break;
    }
    /* Sleep until socket activity, or until a free slot or a waiting chunk can start. */
    now = sl__now();
    bool busy = false;
    for (uint32_t i = 0; i < slots; i++) {
      busy = busy || ks[i].in_use;
      if (!ks[i].in_use && next < n_chunks)
        soonest = now; /* a free slot to refill */
      else if (ks[i].in_use && !ks[i].active && ks[i].not_before < soonest)
        soonest = ks[i].not_before;
    }
    if (!busy)
      continue; /* every chunk is done */
    double wait_s = soonest - now;
    int timeout_ms = wait_s <= 0 ? 0 : (int)(wait_s * 1000.0) + 1;
    if (timeout_ms > SL_HTTP_POLL_MS)
      timeout_ms = SL_HTTP_POLL_MS;
    curl_multi_poll(multi, NULL, 0, timeout_ms, NULL);
  }
  for (uint32_t i = 0; ks != NULL && i < slots; i++) {
    if (ks[i].active)
      curl_multi_remove_handle(multi, ks[i].x.easy);
    if (ks[i].x.easy != NULL)
      curl_easy_cleanup(ks[i].x.easy);
    xfer_free(&ks[i].x);
  }
  free(ks);
  if (multi != NULL)
    curl_multi_cleanup(multi);
  return st;
}
