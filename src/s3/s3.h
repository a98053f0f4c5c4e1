/*
 * s3/s3.h — the S3 client: objects of an S3 or S3-compatible store read in place (docs/spec/S3.md).
 * What the rest of the library uses of it:
 *   - s3:// URLs (s3/url.c): recognised, split into bucket and key, turned into request URLs in
 *     path-style or virtual-host addressing;
 *   - the settings (s3/conf.c): credentials, region and endpoint found as AWS's own tools find
 *     them (the environment, then the shared credentials and config files);
 *   - a session and its connections (s3/request.c): one session per load, shared read-only by
 *     threads; one connection (a curl handle and its connection cache) per thread;
 *   - the listing of a prefix (s3/list.c, ListObjectsV2, paginated) and the ranged GET of an
 *     object's bytes straight into the caller's buffer (s3/read.c), each pinned to the object's
 *     ETag (If-Match) and retried with backoff on 5xx, SlowDown and dropped connections.
 * Requests are signed with SigV4 by libcurl (CURLOPT_AWS_SIGV4); without credentials they go
 * unsigned (public buckets). Errors name the bucket and the key and say the cause (AccessDenied,
 * NoSuchBucket, NoSuchKey, an expired token, the bucket's region, a replaced object).
 * Built with libcurl and expat (src/CMakeLists.txt); without them src/absent/s3.c stands in for
 * the network half, and url.c, conf.c and ini.c are always built.
 */
#ifndef SL_S3_H
#define SL_S3_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_S3_SCHEME "s3://"
/* S3's own limit on a key (UTF-8 bytes). */
#define SL_S3_KEY_MAX 1024

/* ---- URLs (s3/url.c) ---- */

typedef enum sl__s3_addressing {
  SL_S3_ADDR_AUTO = 0, /* virtual-host on AWS's endpoints (DNS-compatible buckets), else path-style */
  SL_S3_ADDR_PATH,     /* scheme://host/bucket/key */
  SL_S3_ADDR_VIRTUAL   /* scheme://bucket.host/key */
} sl__s3_addressing;

/* Whether s names an S3 location ("s3://..."). */
bool sl__s3_is_url(const char *s);
/* Splits "s3://bucket[/key]" into a bucket (validated: 1-255 bytes of letters, digits, '.', '-'
 * and '_') and a key (possibly empty; at most SL_S3_KEY_MAX bytes; no control character). Both
 * malloc'd. SL_STATUS_CONFIG naming the URL on a defect. */
sl_status sl__s3_url_parse(const char *url, char **bucket, char **key, sl__err *err);
/* The S3 form of a key or query value: every byte but A-Z a-z 0-9 - _ . ~ (and '/' when
 * keep_slash) as %XX, the form SigV4 signs. malloc'd, or NULL when out of memory. */
char *sl__s3_encode(const char *s, bool keep_slash);

/* ---- settings (s3/conf.c) ---- */

typedef struct sl__s3_conf {
  char *access_key; /* NULL: no credentials were found; requests go unsigned */
  char *secret_key;
  char *session_token; /* or NULL */
  char *region;        /* never NULL (us-east-1 when nothing says otherwise) */
  char *endpoint;      /* scheme://host[:port], no trailing '/' */
  bool custom_endpoint;
  sl__s3_addressing addressing;
  char *profile;    /* the profile the files were read for */
  char *creds_from; /* where the credentials came from, for messages; NULL without credentials */
} sl__s3_conf;

/* The settings from the process environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
 * AWS_SESSION_TOKEN; else the profile (AWS_PROFILE, AWS_DEFAULT_PROFILE, "default") of the
 * shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials) and of the config
 * file (AWS_CONFIG_FILE, ~/.aws/config; "[profile x]" sections, "[default]"); the region from
 * AWS_REGION, AWS_DEFAULT_REGION or the profile's region; the endpoint from AWS_ENDPOINT_URL_S3,
 * AWS_ENDPOINT_URL or the profile's (its "s3 =" sub-section first); the addressing style from the
 * profile's "s3 = addressing_style". SL_STATUS_CONFIG naming the file and line or the variable on
 * a defect (a profile asked for that neither file has, a malformed file, half a key pair). */
sl_status sl__s3_conf_resolve(sl__s3_conf *out, sl__err *err);
void sl__s3_conf_free(sl__s3_conf *c);
/* The URL of an object (key NULL: the bucket itself, for listings) with an already encoded query
 * (or NULL), in the addressing the settings choose for this bucket. SL_STATUS_CONFIG when virtual-
 * host addressing is asked for a bucket that cannot be a host name. */
sl_status sl__s3_request_url(const sl__s3_conf *c, const char *bucket, const char *key, const char *query,
                             char **url, sl__err *err);

/* ---- the session and its connections (s3/request.c) ---- */

typedef struct sl__s3 sl__s3;           /* settings and bounds; read-only once open */
typedef struct sl__s3_conn sl__s3_conn; /* one thread's connection */
/* Polled between attempts and during transfers: true stops the request (SL_STATUS_PEER_FAILED). */
typedef bool (*sl__s3_stop_fn)(void *ctx);

/* Resolves the settings (sl__s3_conf_resolve) and opens a session. retry_s bounds the retries of
 * one request (seconds from its first attempt; the load's watchdog, timeout_s, gives it). */
sl_status sl__s3_open(double retry_s, sl__s3 **out, sl__err *err);
void sl__s3_close(sl__s3 *s);
const sl__s3_conf *sl__s3_settings(const sl__s3 *s);
sl_status sl__s3_conn_open(sl__s3 *s, sl__s3_conn **out, sl__err *err);
void sl__s3_conn_close(sl__s3_conn *c);
/* What a connection did: requests sent (attempts and pages included) and body bytes received. */
void sl__s3_conn_counts(const sl__s3_conn *c, uint64_t *requests, uint64_t *bytes);

/* ---- objects (s3/read.c, s3/list.c) ---- */

typedef struct sl__s3_object {
  char *key; /* the whole key */
  uint64_t size;
  char *etag; /* as the store gave it, quotes included: what If-Match sends back */
} sl__s3_object;

typedef struct sl__s3_listing {
  size_t n;
  sl__s3_object *objects; /* in the store's order (ascending keys) */
} sl__s3_listing;

/* Bytes [off, off + len) of s3://bucket/key into buf, exactly: ranged GETs pinned to etag (If-Match;
 * NULL: not pinned), a connection dropped mid-range resumed where it stopped, 5xx and SlowDown
 * retried with backoff until the session's retry bound. A replaced object (412), a missing one,
 * refused access, a wrong region: an error naming bucket, key and cause. stop may be NULL. */
sl_status sl__s3_read(sl__s3_conn *c, const char *bucket, const char *key, const char *etag, uint64_t off,
                      uint64_t len, void *buf, sl__s3_stop_fn stop, void *stop_ctx, sl__err *err);
/* Every object whose key starts with prefix (ListObjectsV2, every page). */
sl_status sl__s3_list(sl__s3_conn *c, const char *bucket, const char *prefix, sl__s3_listing *out,
                      sl__err *err);
void sl__s3_listing_free(sl__s3_listing *l);

#endif
