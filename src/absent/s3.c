/*
 * absent/s3.c — the S3 client when shardload was built without it (no libcurl or no expat, or
 * SL_S3=OFF): s3:// models are refused with a message that says how to get the client back. The
 * URLs and settings (s3/url.c, s3/conf.c, s3/ini.c) are always built; only the network half is
 * stood in for here.
 */
#include "s3/s3.h"

#include <string.h>

sl_status sl__s3_open(double retry_s, sl__s3 **out, sl__err *err) {
  (void)retry_s;
  *out = NULL;
  return sl__err_set(
      err, SL_STATUS_UNSUPPORTED,
      "this shardload was built without the S3 client (SL_S3=OFF, or libcurl or expat missing): "
      "install libcurl4-openssl-dev and libexpat1-dev and rebuild to load s3:// models");
}

/* Without a session nothing below is ever reached. */
void sl__s3_close(sl__s3 *s) {
  (void)s;
}

const sl__s3_conf *sl__s3_settings(const sl__s3 *s) {
  (void)s;
  return NULL;
}

sl_status sl__s3_conn_open(sl__s3 *s, sl__s3_conn **out, sl__err *err) {
  (void)s;
  *out = NULL;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "built without the S3 client");
}

void sl__s3_conn_close(sl__s3_conn *c) {
  (void)c;
}

void sl__s3_conn_counts(const sl__s3_conn *c, uint64_t *requests, uint64_t *bytes) {
  (void)c;
  *requests = 0;
  *bytes = 0;
}

sl_status sl__s3_read(sl__s3_conn *c, const char *bucket, const char *key, const char *etag, uint64_t off,
                      uint64_t len, void *buf, sl__s3_stop_fn stop, void *stop_ctx, sl__err *err) {
  (void)c, (void)bucket, (void)key, (void)etag, (void)off, (void)len, (void)buf, (void)stop, (void)stop_ctx;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "built without the S3 client");
}

sl_status sl__s3_list(sl__s3_conn *c, const char *bucket, const char *prefix, sl__s3_listing *out,
                      sl__err *err) {
  (void)c, (void)bucket, (void)prefix;
  memset(out, 0, sizeof *out);
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "built without the S3 client");
}

void sl__s3_listing_free(sl__s3_listing *l) {
  (void)l;
}
