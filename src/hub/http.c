/*
 * hub/http.c — the HTTP client of the Hub (docs/spec/HUB.md §2, §4, §7): libcurl's process-wide set-up,
 * the shared settings (sl__http) and each thread's connection cache (sl__http_client), and the
 * pure helpers: URL encoding, etag normalisation, origins, retry waits, fallback eligibility.
 *
 * The other parts of the client, all behind hub/http.h and sharing hub/http_xfer.h:
 *   hub/http_xfer.c     one request's state: response headers (reset at each status line), a body
 *                       buffer for API replies and error pages, or a file target written with pwrite;
 *   hub/http_error.c    HTTP replies and curl failures -> SL_STATUS_HUB_* with URL, status,
 *                       X-Error-Message and request id in the message (docs/spec/HUB.md §7.1);
 *   hub/http_request.c  the API GET and the metadata HEAD (buffered, retried per docs/spec/HUB.md §7.2);
 *   hub/http_stream.c   docs/spec/HUB.md §5.2 single stream with resume;
 *   hub/http_chunks.c   docs/spec/HUB.md §5.3 parallel chunks on one curl multi handle.
 * Only these files include curl.
 */
#include "hub/http_xfer.h"

#include "base/clock.h"
#include "hub/hub.h"
#include "hub/interrupt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

bool sl__http_status_retryable(long code) {
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
char *sl__http_join_relative(const char *base, const char *location) {
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

/* Another file failed (the run's cancel flag), or SIGINT/SIGTERM arrived (hub/interrupt.h). */
bool sl__http_cancelled(const sl__http *h) {
  return sl__hub_interrupted() || (h->cancel != NULL && atomic_load(h->cancel) != 0);
}

/* Sleeps units × backoff_base_ms, waking early on cancellation. */
void sl__http_wait_units(const sl__http *h, uint64_t units) {
  uint64_t ms = 0;
  if (sl__mul_overflow(units, h->backoff_base_ms, &ms))
    ms = UINT64_MAX;
  double end = sl__now() + (double)ms / 1000.0;
  while (!sl__http_cancelled(h)) {
    double left = end - sl__now();
    if (left <= 0)
      break;
    double step = left < 0.02 ? left : 0.02;
    sl__sleep_s(step);
  }
}

/* ---------------------------------------------------------------------------------------------
 * initialisation
 * ------------------------------------------------------------------------------------------- */

/* process-wide: curl_global_init must run once per process, before any other thread uses libcurl
 * (it is not thread-safe); pthread_once runs it exactly once, whichever thread is first. */
static pthread_once_t global_once = PTHREAD_ONCE_INIT;
/* process-wide: curl_global_init's result, written once under global_once, read-only after. */
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
  c->multi = NULL;
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
  if (c->multi != NULL)
    curl_multi_cleanup(c->multi);
  c->multi = NULL;
}

void sl__http_meta_free(sl__http_meta *m) {
  if (m == NULL)
    return;
  free(m->location);
  memset(m, 0, sizeof *m);
}