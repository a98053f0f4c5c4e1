/*
 * hub/http.h — the HTTP side of the Hub client (docs/spec/HUB.md §2, §4, §5, §7): URL encoding, the API GET,
 * the metadata HEAD, single-stream and parallel ranged downloads into a file descriptor, bounded
 * retries and the mapping of HTTP and network failures to SL_STATUS_HUB_* codes.
 * Only the hub/http*.c files include <curl/curl.h> (through their private hub/http_xfer.h).
 *
 * Threads: one sl__http is shared read-only by all download threads; each thread uses its own
 * sl__http_client. Every wait and transfer stops early when *cancel becomes non-zero.
 */
#ifndef SL_HUB_HTTP_H
#define SL_HUB_HTTP_H

#include "base/err.h"
#include "base/util.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_HTTP_MAX_RETRIES 5             /* retries after the first attempt (6 attempts) */
#define SL_HTTP_MAX_DEAD_ATTEMPTS 5       /* consecutive stream failures without a byte */
#define SL_HTTP_MAX_WAIT_UNITS 60         /* cap of one retry wait, in backoff units */
#define SL_HTTP_HUGE_BYTES 50000000000ULL /* above this: always ranged, never range-less */
#define SL_HTTP_RETRY_HEAD_TIMEOUT_S 60   /* timeout of repeated HEADs */

/* Settings shared by every request of one resolution. */
typedef struct sl__http {
  char *resolve_host;       /* lower-cased host of the endpoint (Authorization target) */
  long resolve_port;        /* its port (scheme default when absent) */
  char *resolve_scheme;     /* its scheme */
  const char *token;        /* bearer token or NULL (not owned) */
  long etag_timeout_s;      /* first HEAD attempt */
  long download_timeout_s;  /* GETs (API and files) */
  uint64_t backoff_base_ms; /* one wait unit */
  char user_agent[128];     /* shardload/<v> libcurl/<v> */
  atomic_int *cancel;       /* non-zero: stop as soon as possible (may be NULL) */
} sl__http;

/* Process-wide libcurl initialisation; call from one thread before any other function here. */
sl_status sl__http_global_init(sl__err *err);

sl_status sl__http_init(sl__http *h, const char *endpoint, const char *token, long etag_timeout_s,
                        long download_timeout_s, uint64_t backoff_base_ms, atomic_int *cancel, sl__err *err);
void sl__http_free(sl__http *h);

/* One thread's connection cache (keeps connections alive between requests). */
typedef struct sl__http_client {
  const sl__http *h;
  void *easy;  /* CURL *, reused with curl_easy_reset */
  void *multi; /* CURLM * of this client's chunked downloads, made on first use and kept: its
                * connection cache carries the connections from one file's chunks to the next */
} sl__http_client;

sl_status sl__http_client_init(sl__http_client *c, const sl__http *h, sl__err *err);
void sl__http_client_free(sl__http_client *c);

/* GET of an API URL (retried per docs/spec/HUB.md §7.2, redirects followed); the body (≤ 64 MiB) is left in
 * body. `what` describes the request in messages (e.g. "revision 'main' of org/name"). */
sl_status sl__http_get_api(sl__http_client *c, const char *url, const char *what, sl__buf *body,
                           sl__err *err);

/* GET of bytes from..to (inclusive) of a resolve URL into body (at most max bytes), redirects
 * followed, retried like the API GET: the header of a weight file before its download
 * (docs/spec/HUB.md §13). *total gets the file's size from Content-Range; the reply may stop at
 * the end of the file (body then holds all of it when *total <= max). A server that ignores ranges
 * (200): OK with *no_ranges set; body empty and *total 0, except when the whole file came within
 * max bytes: body holds it and *total is its size. */
sl_status sl__http_get_range(sl__http_client *c, const char *url, const char *file, uint64_t from,
                             uint64_t to, size_t max, sl__buf *body, uint64_t *total, bool *no_ranges,
                             sl__err *err);

/* Metadata of one file (docs/spec/HUB.md §4). */
typedef struct sl__http_meta {
  char commit[41]; /* X-Repo-Commit; also filled from an error reply when present */
  char etag[65];   /* normalised: hex40 or hex64 */
  char *location;  /* GET target (owned) */
  uint64_t size;   /* expected size in bytes */
} sl__http_meta;

void sl__http_meta_free(sl__http_meta *m);

/* HEAD on a resolve URL per docs/spec/HUB.md §4, with relative redirects followed (token kept) and the retry
 * rule of docs/spec/HUB.md §7.2 (first attempt with the etag timeout, later ones with 60 s). `file` names the
 * file. */
sl_status sl__http_head(sl__http_client *c, const char *url, const char *file, sl__http_meta *out,
                        sl__err *err);

/* Receives every byte written to the file, in order for streams (hashing, progress). */
typedef struct sl__http_sink {
  void (*reset)(void *user); /* the file was truncated to 0: forget what was passed */
  void (*data)(void *user, uint64_t offset, const void *bytes, size_t n);
  void *user;
  /* Writing to the file failed with errnum (ENOSPC: the caller removes the partial file and says
   * how much space the file needs); may be NULL. */
  void (*write_failed)(void *user, int errnum);
  /* Ranged chunks only (may be NULL): bytes [0, upto) of the file are all written; called on
   * every turn of the transfer loop, upto never shrinking. Lets the caller hash the file while it
   * downloads, a bounded step per call so that the transfers are not held up, instead of reading
   * it all again after the last chunk (that pass delayed every publication by size / hash rate). */
  void (*prefix)(void *user, uint64_t upto);
} sl__http_sink;

/* docs/spec/HUB.md §5.2 single stream: fd holds `have` (< size) bytes already (passed to the sink by the
 * caller); appends until it holds `size` bytes, resuming with Range after breaks. On failure the status
 * says whether the partial file may be kept: HUB_NETWORK / HUB_HTTP (give-up) keep it;
 * HUB_SIZE means the server disagrees on the size. */
sl_status sl__http_fetch_stream(sl__http_client *c, const char *url, const char *file, int fd, uint64_t have,
                                uint64_t size, const sl__http_sink *sink, sl__err *err);

/* docs/spec/HUB.md §5.3 parallel ranged chunks of chunk_bytes, at most `connections` in flight, pwrite into
 * fd (already ftruncate'd to size). When the server answers a chunk with 200 (no range support),
 * returns SL_STATUS_UNSUPPORTED with *no_ranges = true and no message recorded. */
sl_status sl__http_fetch_chunks(sl__http_client *c, const char *url, const char *file, int fd, uint64_t size,
                                uint64_t chunk_bytes, uint32_t connections, const sl__http_sink *sink,
                                bool *no_ranges, sl__err *err);

/* ---- pure helpers (exposed for tests) ---- */

/* docs/spec/HUB.md §2 enc (keep_slash false) / encpath (true): bytes outside A-Z a-z 0-9 _ . - ~ become %XX.
 * */
char *sl__http_url_encode(const char *s, bool keep_slash);
/* docs/spec/HUB.md §4 etag normalisation: drop leading 'W' and '/', then leading/trailing '"'; true when the
 * result is hex40 or hex64 (copied to out). */
bool sl__http_etag_normalize(const char *raw, char out[65]);
/* docs/spec/HUB.md §7.2 wait before retry `retry` (1-based) in backoff units, from the status and the
 * RateLimit and Retry-After headers (NULL when absent), capped at SL_HTTP_MAX_WAIT_UNITS. */
uint64_t sl__http_retry_wait_units(unsigned retry, long status, const char *retry_after,
                                   const char *ratelimit);
/* The Authorization rule of docs/spec/HUB.md §5.1: url has the endpoint's host (case-insensitive) and port.
 * */
bool sl__http_same_origin(const sl__http *h, const char *url);
/* Whether an error kind lets the resolution fall back to the cache (docs/spec/HUB.md §7.1 last column). */
bool sl__http_fallback_eligible(sl_status status);

#endif
