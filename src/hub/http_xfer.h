/*
 * hub/http_xfer.h — internals shared by the hub/http*.c files, not by any other file: one
 * request's state (sl__http_xfer) with its curl callbacks and set-up (hub/http_xfer.c), the mapping
 * of failures to SL_STATUS_HUB_* (hub/http_error.c), and the small helpers of hub/http.c
 * (cancellation, retry waits, redirects). It includes <curl/curl.h>, which is why only the
 * hub/http*.c files may include it.
 *
 * A request: sl__http_xfer_init once, then per attempt sl__http_xfer_setup (which clears what the
 * previous attempt received) and curl_easy_perform / the multi interface, then sl__http_xfer_free.
 * No request sets CURLOPT_TIMEOUT: a connect timeout plus a low-speed limit (1 byte/s over the
 * timeout) detect stalls without bounding long bodies. CURLOPT_UNRESTRICTED_AUTH stays off.
 */
#ifndef SL_HUB_HTTP_XFER_H
#define SL_HUB_HTTP_XFER_H

#include "hub/http.h"

#include <curl/curl.h>

#define SL_HTTP_API_BODY_MAX ((size_t)64 << 20) /* API replies larger than this are refused */
#define SL_HTTP_ERR_BODY_MAX ((size_t)64 << 10) /* error pages: the head is enough */
#define SL_HTTP_MAX_HOPS 10                     /* relative HEAD redirects / followed GET redirects */
#define SL_HTTP_POLL_MS 1000                    /* longest sleep of the chunk loop */

/* ---- one request (hub/http_xfer.c) ---- */

typedef struct sl__http_hdr {
  char *name;
  char *value;
} sl__http_hdr;

typedef struct sl__http_xfer {
  const sl__http *h;
  CURL *easy;
  struct curl_slist *req; /* request headers */
  long status;            /* code of the last status line */
  sl__vec hdrs;           /* sl__http_hdr: headers of the last response */
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
} sl__http_xfer;

/* Zeroes x for requests on h; error pages and API replies are kept up to body_max bytes. x->easy,
 * and for file targets fd, pos, total, file, sink and chunk, are set by the caller. */
void sl__http_xfer_init(sl__http_xfer *x, const sl__http *h, size_t body_max);
void sl__http_xfer_free(sl__http_xfer *x);
/* Prepares x->easy for one attempt (headers, Authorization on the endpoint's origin only,
 * timeouts, callbacks, protocols). range_to = 0 means an open range ("a-"). */
sl_status sl__http_xfer_setup(sl__http_xfer *x, const char *url, bool head, bool follow, long timeout_s,
                              bool ranged, uint64_t range_from, uint64_t range_to, sl__err *err);
/* Parses a Content-Range value "bytes a-b/t"; false when it is not one. */
bool sl__http_parse_content_range(const char *v, uint64_t *a, uint64_t *b, uint64_t *t);
/* Value of response header `name` (case-insensitive) of the last reply, or NULL. */
const char *sl__http_hdr_get(const sl__http_xfer *x, const char *name);

/* ---- failures (hub/http_error.c, docs/spec/HUB.md §7.1) ---- */

typedef enum sl__http_url_kind { SL_HTTP_URL_API, SL_HTTP_URL_RESOLVE, SL_HTTP_URL_OTHER } sl__http_url_kind;

typedef enum sl__http_net_class {
  SL_HTTP_NET_TRANSIENT,
  SL_HTTP_NET_TLS,
  SL_HTTP_NET_PROXY,
  SL_HTTP_NET_RESOLVE, /* the host name did not resolve: not retried (the resolver has retried) */
  SL_HTTP_NET_FATAL
} sl__http_net_class;

sl__http_net_class sl__http_classify_curl(CURLcode rc);
/* A curl failure of "method url" as HUB_TLS, HUB_PROXY or HUB_NETWORK, with curl's detail. */
sl_status sl__http_net_error(const sl__http_xfer *x, CURLcode rc, const char *method, const char *url,
                             const char *what, unsigned attempts, sl__err *err);
/* Maps an HTTP error reply (status >= 400) to a status and a message (first matching row wins). */
sl_status sl__http_reply_error(const sl__http_xfer *x, sl__http_url_kind kind, const char *method,
                               const char *url, const char *what, unsigned retries, sl__err *err);

/* ---- helpers (hub/http.c) ---- */

/* *h->cancel is set: stop as soon as possible. */
bool sl__http_cancelled(const sl__http *h);
/* Sleeps units x backoff_base_ms, waking early on cancellation. */
void sl__http_wait_units(const sl__http *h, uint64_t units);
/* 408, 429, 500, 502, 503, 504: retried per docs/spec/HUB.md §7.2. */
bool sl__http_status_retryable(long code);
/* "scheme://host:port" of base + the path of a relative Location (its query and fragment dropped). */
char *sl__http_join_relative(const char *base, const char *location);

#endif
