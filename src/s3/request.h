/*
 * s3/request.h — one HTTP request of the S3 client and what came back (private to src/s3/):
 * s3/request.c sends it (libcurl, signed with SigV4 by libcurl itself), s3/failure.c judges the
 * outcome (done, worth another attempt, or a failure) and words the failure, s3/read.c and
 * s3/list.c build requests and loop over attempts. Only the files of src/s3/ include curl.h.
 */
#ifndef SL_S3_REQUEST_H
#define SL_S3_REQUEST_H

#include "base/util.h"
#include "s3/s3.h"

#include <stdbool.h>
#include <stdint.h>

/* Bytes of an error reply kept (the document says the cause in a few hundred). */
#define SL_S3_ERROR_BODY_MAX (64u * 1024u)
/* Longest wait between two attempts, seconds. */
#define SL_S3_BACKOFF_MAX_S 5.0
/* First wait between two attempts, seconds (doubled each time). */
#define SL_S3_BACKOFF_FIRST_S 0.1

struct sl__s3 {
  sl__s3_conf conf;
  double retry_s;      /* attempts of one request stop this long after its last progress */
  long stall_s;        /* a transfer with no byte for this long is cut (and tried again) */
  char sigv4[128];     /* CURLOPT_AWS_SIGV4: "aws:amz:<region>:s3" */
  char user_agent[96]; /* shardload/<version> libcurl/<version> */
};

struct sl__s3_conn {
  sl__s3 *s;
  void *easy; /* CURL *, reset between requests: its connection cache stays */
  uint64_t requests, bytes;
};

typedef struct sl__s3_req {
  /* what to ask */
  const char *bucket;
  const char *key;      /* NULL: the bucket itself (a listing) */
  const char *query;    /* already encoded, keys in order (as SigV4 signs it), or NULL */
  const char *if_match; /* or NULL */
  uint64_t from, len;   /* len > 0: bytes [from, from + len) (Range) */
  uint8_t *dst;         /* ranged: the bytes land here, len at most */
  sl__buf *body;        /* otherwise: the body (bounded by its max) */
  sl__s3_stop_fn stop;
  void *stop_ctx;
  /* what came back */
  int curl_code;           /* CURLcode */
  char curl_msg[256];      /* curl's error buffer */
  long status;             /* HTTP status, 0 without an answer */
  uint64_t got;            /* bytes written at dst (only bytes of the range asked) */
  bool refused;            /* the reply was cut on purpose: refused_why says why */
  const char *refused_why; /* static text */
  bool stopped;            /* stop said so */
  char content_range[96];  /* the reply's Content-Range */
  char bucket_region[64];  /* the reply's x-amz-bucket-region */
  sl__buf error_body;      /* the body of a reply that is not 2xx (SL_S3_ERROR_BODY_MAX) */
} sl__s3_req;

/* Sends r once on connection c. SL_STATUS_OK when it was sent, whatever came back (the outcome is
 * in r for s3/failure.c to judge); an error only when it could not be built (memory, settings).
 * Free r->error_body with sl__buf_free. */
sl_status sl__s3_send(sl__s3_conn *c, sl__s3_req *r, sl__err *err);

/* ---- s3/failure.c ---- */

typedef enum sl__s3_verdict {
  SL_S3_DONE = 0, /* a 2xx reply received whole */
  SL_S3_AGAIN,    /* worth another attempt: 5xx, SlowDown, a connection cut or stalled */
  SL_S3_FAILED    /* no attempt will do better */
} sl__s3_verdict;

sl__s3_verdict sl__s3_judge(const sl__s3_req *r);
/* Records the failure of r (what: the object or listing, for the message) and returns its status:
 * the store's code and message, what it means and what to do, bucket and key named. */
sl_status sl__s3_failure(const sl__s3 *s, const sl__s3_req *r, const char *what, sl__err *err);
/* Waits before attempt `attempt` (2, 3, ...): false (nothing waited) when that would end past
 * `since` + the session's retry bound, or when stop says so meanwhile (*stopped set). */
bool sl__s3_backoff(const sl__s3 *s, unsigned attempt, double since, sl__s3_stop_fn stop, void *stop_ctx,
                    bool *stopped);

#endif
