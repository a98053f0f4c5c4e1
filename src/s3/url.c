/*
 * s3/url.c — s3:// URLs and the URLs of requests (see s3/s3.h): the bucket and key of a location,
 * the encoding SigV4 signs, path-style and virtual-host addressing. No network: always built.
 */
#include "s3/s3.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* Longest bucket name any store accepts (AWS: 63; some S3-compatible stores allow more). */
#define BUCKET_MAX 255

bool sl__s3_is_url(const char *s) {
  return s != NULL && strncmp(s, SL_S3_SCHEME, strlen(SL_S3_SCHEME)) == 0;
}

static bool bucket_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
         c == '_';
}

sl_status sl__s3_url_parse(const char *url, char **bucket, char **key, sl__err *err) {
  *bucket = NULL;
  *key = NULL;
  char q[SL_QUOTE_BUF];
  if (!sl__s3_is_url(url))
    return sl__err_set(err, SL_STATUS_CONFIG, "'%s' is not an s3:// URL", sl__quote(url, q, sizeof q));
  const char *b = url + strlen(SL_S3_SCHEME);
  const char *slash = strchr(b, '/');
  size_t blen = slash != NULL ? (size_t)(slash - b) : strlen(b);
  if (blen == 0 || blen > BUCKET_MAX)
    return sl__err_set(err, SL_STATUS_CONFIG, "'%s' has no valid bucket name (s3://bucket/prefix)",
                       sl__quote(url, q, sizeof q));
  for (size_t i = 0; i < blen; i++)
    if (!bucket_char(b[i]))
      return sl__err_set(err, SL_STATUS_CONFIG,
                         "'%s': a bucket name holds letters, digits, '.', '-' and '_' only",
                         sl__quote(url, q, sizeof q));
  const char *k = slash != NULL ? slash + 1 : "";
  size_t klen = strlen(k);
  if (klen > SL_S3_KEY_MAX)
    return sl__err_set(err, SL_STATUS_CONFIG, "'%s': the key is longer than S3's %d bytes",
                       sl__quote(url, q, sizeof q), SL_S3_KEY_MAX);
  for (size_t i = 0; i < klen; i++)
    if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
      return sl__err_set(err, SL_STATUS_CONFIG, "'%s': the key holds a control character",
                         sl__quote(url, q, sizeof q));
  *bucket = sl__strndup(b, blen);
  *key = sl__strdup(k);
  if (*bucket == NULL || *key == NULL) {
    free(*bucket);
    free(*key);
    *bucket = *key = NULL;
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  return SL_STATUS_OK;
}

char *sl__s3_encode(const char *s, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  sl__buf b;
  sl__buf_init(&b, 0);
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    unsigned char c = *p;
    bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                 c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (plain) {
      sl__buf_putc(&b, (char)c);
    } else {
      char e[3] = {'%', hex[c >> 4], hex[c & 15]};
      sl__buf_append(&b, e, 3);
    }
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  sl__buf_str(&b);
  return sl__buf_take(&b);
}

/* A bucket that can be the first label(s) of a host name: AWS's rules (3-63 bytes of lower-case
 * letters, digits, '.' and '-', starting and ending with a letter or digit, no ".."). */
static bool dns_bucket(const char *b) {
  size_t n = strlen(b);
  if (n < 3 || n > 63 || strstr(b, "..") != NULL)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = b[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '.' && c != '-')
      return false;
    if ((i == 0 || i == n - 1) && !alnum)
      return false;
  }
  return true;
}

static bool virtual_host(const sl__s3_conf *c, const char *bucket, sl__err *err, sl_status *st) {
  bool https = strncmp(c->endpoint, "https://", 8) == 0;
  *st = SL_STATUS_OK;
  switch (c->addressing) {
  case SL_S3_ADDR_PATH:
    return false;
  case SL_S3_ADDR_VIRTUAL:
    if (!dns_bucket(bucket))
      *st = sl__err_set(err, SL_STATUS_CONFIG,
                        "bucket '%s' cannot be addressed as a host name (addressing_style virtual): use "
                        "addressing_style path in the config file's s3 section",
                        bucket);
    return true;
  case SL_S3_ADDR_AUTO:
    break;
  }
  /* A dotted bucket name under https does not match the endpoint's wildcard certificate. */
  return !c->custom_endpoint && dns_bucket(bucket) && !(https && strchr(bucket, '.') != NULL);
}

sl_status sl__s3_request_url(const sl__s3_conf *c, const char *bucket, const char *key, const char *query,
                             char **url, sl__err *err) {
  *url = NULL;
  sl_status st = SL_STATUS_OK;
  bool vh = virtual_host(c, bucket, err, &st);
  if (st != SL_STATUS_OK)
    return st;
  char *ek = sl__s3_encode(key != NULL ? key : "", true);
  char *eb = sl__s3_encode(bucket, false);
  const char *sep = query != NULL ? "?" : "";
  const char *qs = query != NULL ? query : "";
  if (ek != NULL && eb != NULL && vh) {
    const char *rest = strstr(c->endpoint, "://") + 3; /* endpoints are checked to hold "://" */
    *url = sl__asprintf("%.*s%s.%s/%s%s%s", (int)(rest - c->endpoint), c->endpoint, eb, rest, ek, sep, qs);
  } else if (ek != NULL && eb != NULL) {
    *url = key != NULL ? sl__asprintf("%s/%s/%s%s%s", c->endpoint, eb, ek, sep, qs)
                       : sl__asprintf("%s/%s%s%s", c->endpoint, eb, sep, qs);
  }
  free(ek);
  free(eb);
  return *url != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}
