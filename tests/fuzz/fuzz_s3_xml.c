/*
 * fuzz_s3_xml.c — libFuzzer target for the XML replies of S3 (s3/xml.c): any bytes read as a
 * ListObjectsV2 page either give its objects or are refused with an IO message naming the
 * listing; an accepted page holds at most SL_S3_PAGE_MAX_KEYS objects, each with a non-empty key
 * of at most SL_S3_KEY_MAX bytes; read as an error document, the fields are terminated strings
 * inside their buffers, all empty when the body is not one.
 */
#include "fuzz_common.h"
#include "s3/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__s3_page pg;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__s3_parse_list((const char *)data, size, "fuzz listing", &pg, &err);
  fuzz_check_error("fuzz_s3_xml", st, &err);
  if (st != SL_STATUS_OK && (st != SL_STATUS_HUB || err.cause != SL_HUB_CAUSE_METADATA ||
                             strstr(err.msg, "fuzz listing") == NULL || pg.n != 0))
    abort();
  if (st == SL_STATUS_OK) {
    if (pg.n > SL_S3_PAGE_MAX_KEYS)
      abort();
    for (size_t i = 0; i < pg.n; i++) {
      size_t n = strlen(pg.objects[i].key);
      if (n == 0 || n > SL_S3_KEY_MAX || (pg.objects[i].etag != NULL && pg.objects[i].etag[0] == '\0'))
        abort();
    }
    sl__s3_page_free(&pg);
  }
  sl__s3_error_doc d;
  bool is_error = sl__s3_parse_error((const char *)data, size, &d);
  if (strnlen(d.code, sizeof d.code) == sizeof d.code ||
      strnlen(d.message, sizeof d.message) == sizeof d.message ||
      strnlen(d.region, sizeof d.region) == sizeof d.region)
    abort();
  if (!is_error && (d.code[0] != '\0' || d.message[0] != '\0' || d.region[0] != '\0'))
    abort();
  return 0;
}
