/*
 * s3/failure.c — what a request's outcome means (see s3/request.h): done, worth another attempt
 * (5xx, SlowDown, throttling, a connection refused, cut or stalled), or a failure, worded with the
 * store's own code and what to do about it (SL_STATUS_HUB, the cause naming the kind); and the wait between
 * attempts (doubling, bounded by the session's retry bound, polling the caller's stop function).
 */
#include "s3/parse.h"
#include "s3/request.h"

#include "base/clock.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

/* Naps while waiting between attempts: the stop function is asked this often (seconds). */
#define STOP_POLL_S 0.02

static bool transient_curl(int code) {
  switch ((CURLcode)code) {
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_PARTIAL_FILE:
  case CURLE_GOT_NOTHING:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_SSL_CONNECT_ERROR:
    return true;
  default:
    return false;
  }
}

static sl__s3_error_doc doc_of(const sl__s3_req *r) {
  sl__s3_error_doc d;
  sl__s3_req *m = (sl__s3_req *)r; /* sl__buf_str may terminate the buffer: nothing else changes */
  if (!sl__s3_parse_error(sl__buf_str(&m->error_body), m->error_body.len, &d))
    memset(&d, 0, sizeof d);
  return d;
}

sl__s3_verdict sl__s3_judge(const sl__s3_req *r) {
  if (r->stopped || r->refused)
    return SL_S3_FAILED;
  if (r->curl_code != CURLE_OK)
    return transient_curl(r->curl_code) ? SL_S3_AGAIN : SL_S3_FAILED;
  if (r->status >= 200 && r->status < 300)
    return SL_S3_DONE;
  if (r->status >= 500 || r->status == 429)
    return SL_S3_AGAIN;
  sl__s3_error_doc d = doc_of(r);
  if (strcmp(d.code, "SlowDown") == 0 || strcmp(d.code, "RequestTimeout") == 0 ||
      strcmp(d.code, "InternalError") == 0)
    return SL_S3_AGAIN;
  return SL_S3_FAILED;
}

/* Where the credentials came from, for the messages about them. */
static const char *creds_of(const sl__s3 *s) {
  return s->conf.creds_from != NULL ? s->conf.creds_from : "nowhere (the request went unsigned)";
}

/* The store's answer in words: credentials, region and existence first, then the generic form. */
static sl_status http_failure(const sl__s3 *s, const sl__s3_req *r, const char *what, sl__err *err) {
  sl__s3_error_doc d = doc_of(r);
  const char *code = d.code[0] != '\0' ? d.code : "no error code";
  const char *region = r->bucket_region[0] != '\0' ? r->bucket_region : d.region;
  if (region[0] != '\0' && strcmp(region, s->conf.region) != 0 &&
      (r->status == 301 || r->status == 307 || strcmp(d.code, "AuthorizationHeaderMalformed") == 0 ||
       strcmp(d.code, "PermanentRedirect") == 0 || strcmp(d.code, "IncorrectEndpoint") == 0))
    return sl__err_hub(err, SL_HUB_CAUSE_S3_WRONG_REGION,
                       "%s: bucket '%s' is in region %s, not %s (%s): set AWS_REGION=%s", what, r->bucket,
                       region, s->conf.region, code, region);
  if (strcmp(d.code, "NoSuchBucket") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_NO_SUCH_BUCKET,
                       "%s: bucket '%s' does not exist at %s (NoSuchBucket)", what, r->bucket,
                       s->conf.endpoint);
  if (strcmp(d.code, "NoSuchKey") == 0 || (r->status == 404 && r->key != NULL))
    return sl__err_hub(err, SL_HUB_CAUSE_S3_NO_SUCH_KEY, "%s: no such object (%s)", what, code);
  if (r->status == 412 || strcmp(d.code, "PreconditionFailed") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_CHANGED,
                       "%s: the object was replaced during the load (its ETag is no longer %s: If-Match "
                       "failed, PreconditionFailed); load again once it stays unchanged",
                       what, r->if_match != NULL ? r->if_match : "the one listed");
  if (strcmp(d.code, "ExpiredToken") == 0 || strcmp(d.code, "TokenRefreshRequired") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_EXPIRED_TOKEN,
                       "%s: the session token from %s has expired (%s): refresh the "
                       "credentials",
                       what, creds_of(s), code);
  if (strcmp(d.code, "InvalidToken") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_INVALID_TOKEN,
                       "%s: the session token from %s is not valid (InvalidToken)", what, creds_of(s));
  if (strcmp(d.code, "InvalidAccessKeyId") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_UNKNOWN_KEY_ID,
                       "%s: the store does not know the access key id from %s "
                       "(InvalidAccessKeyId)",
                       what, creds_of(s));
  if (strcmp(d.code, "SignatureDoesNotMatch") == 0)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_BAD_SIGNATURE,
                       "%s: the secret access key from %s does not match its key id "
                       "(SignatureDoesNotMatch)",
                       what, creds_of(s));
  if (strcmp(d.code, "AccessDenied") == 0 || r->status == 403)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_ACCESS_DENIED,
                       "%s: access denied (%s%s%s) with the credentials from %s", what, code,
                       d.message[0] != '\0' ? ": " : "", d.message, creds_of(s));
  if (strcmp(d.code, "InvalidRange") == 0 || r->status == 416)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_SHORT_OBJECT,
                       "%s: the object is shorter than its listing said (InvalidRange)", what);
  return sl__err_hub(err, SL_HUB_CAUSE_HTTP, "%s: HTTP %ld from %s (%s%s%s)", what, r->status,
                     s->conf.endpoint, code, d.message[0] != '\0' ? ": " : "", d.message);
}

sl_status sl__s3_failure(const sl__s3 *s, const sl__s3_req *r, const char *what, sl__err *err) {
  if (r->stopped)
    return sl__err_set(err, SL_STATUS_PEER_FAILED, "%s: stopped (the load is ending)", what);
  if (r->refused)
    return sl__err_hub(err, SL_HUB_CAUSE_S3_BAD_REPLY, "%s: %s (HTTP %ld, Content-Range '%s')", what,
                       r->refused_why, r->status, r->content_range);
  if (r->curl_code != CURLE_OK)
    return sl__err_hub(err, SL_HUB_CAUSE_NETWORK, "%s: cannot reach %s: %s", what, s->conf.endpoint,
                       r->curl_msg[0] != '\0' ? r->curl_msg : curl_easy_strerror((CURLcode)r->curl_code));
  return http_failure(s, r, what, err);
}

bool sl__s3_backoff(const sl__s3 *s, unsigned attempt, double since, sl__s3_stop_fn stop, void *stop_ctx,
                    bool *stopped) {
  *stopped = false;
  double wait = SL_S3_BACKOFF_FIRST_S;
  for (unsigned i = 2; i < attempt && wait < SL_S3_BACKOFF_MAX_S; i++)
    wait *= 2;
  if (wait > SL_S3_BACKOFF_MAX_S)
    wait = SL_S3_BACKOFF_MAX_S;
  double until = sl__now() + wait;
  if (until - since > s->retry_s)
    return false;
  while (sl__now() < until) {
    if (stop != NULL && stop(stop_ctx)) {
      *stopped = true;
      return false;
    }
    sl__sleep_s(STOP_POLL_S);
  }
  return true;
}
