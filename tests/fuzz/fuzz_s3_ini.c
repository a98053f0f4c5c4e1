/*
 * fuzz_s3_ini.c — libFuzzer target for AWS's shared credentials and config files (s3/ini.c, what
 * s3/conf.c reads): any bytes either give a table or are refused with a CONFIG message; every
 * section, value and (lower-cased) name of an accepted table is text of the input, lookups of
 * what the client reads work on it, and the entries are in line order.
 */
#include "fuzz_common.h"
#include "s3/parse.h"

#include <ctype.h>

/* Whether s (non-empty) occurs in the input, ASCII case ignored (names are lower-cased). */
static bool in_input(const char *s, const uint8_t *data, size_t size) {
  size_t n = strlen(s);
  if (n == 0)
    return true;
  for (size_t i = 0; i + n <= size; i++) {
    size_t k = 0;
    while (k < n && tolower(data[i + k]) == tolower((unsigned char)s[k]))
      k++;
    if (k == n)
      return true;
  }
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__s3_ini ini;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__s3_ini_parse((const char *)data, size, "fuzz ini", &ini, &err);
  fuzz_check_error("fuzz_s3_ini", st, &err);
  if (st != SL_STATUS_OK) {
    if (st != SL_STATUS_CONFIG && st != SL_STATUS_NOMEM)
      abort();
    return 0;
  }
  uint32_t line = 0;
  for (size_t i = 0; i < ini.n; i++) {
    const sl__s3_ini_entry *e = &ini.entries[i];
    if (e->line < line || !in_input(e->section, data, size) ||
        (e->key != NULL && !in_input(e->key, data, size)) ||
        (e->sub != NULL && !in_input(e->sub, data, size)) ||
        (e->value != NULL && !in_input(e->value, data, size)))
      abort();
    if (e->sub != NULL && e->key == NULL)
      abort();
    line = e->line;
  }
  (void)sl__s3_ini_get(&ini, "default", "aws_access_key_id", NULL);
  (void)sl__s3_ini_get(&ini, "profile dev", "s3", "addressing_style");
  (void)sl__s3_ini_has_section(&ini, "default");
  sl__s3_ini_free(&ini);
  return 0;
}
