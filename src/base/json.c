/*
 * base/json.c — bounded JSON parsing (see json.h): a linear pre-scan that counts depth and
 * values without allocating, then cJSON.
 */
#include "base/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* A limit from the environment (a positive integer), else the built-in default. */
static uint64_t limit_from_env(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return dflt;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n == 0)
    return dflt;
  return (uint64_t)n;
}

sl_status sl__json_check(const char *text, size_t len, const char *what, sl_status status, sl__err *err) {
  uint64_t max_depth = limit_from_env("SHARDLOAD_JSON_MAX_DEPTH", SL_JSON_MAX_DEPTH);
  uint64_t max_values = limit_from_env("SHARDLOAD_JSON_MAX_VALUES", SL_JSON_MAX_VALUES);
  uint64_t depth = 0;
  uint64_t values = 0;
  bool in_string = false;
  bool in_scalar = false; /* inside a number or a literal: counted once, at its first byte */
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        if (i + 5 < len && text[i + 1] == 'u' && text[i + 2] == '0' && text[i + 3] == '0' &&
            text[i + 4] == '0' && text[i + 5] == '0')
          return sl__err_set(err, status,
                             "%s: a string holds an escaped NUL (\\u0000) at byte %zu: no key, "
                             "name or path may contain one",
                             what, i);
        i++; /* the escaped character cannot end the string */
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    bool scalar_byte = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ||
                       (c >= 'a' && c <= 'z');
    if (scalar_byte && !in_scalar)
      values++;
    in_scalar = scalar_byte;
    if (c == '"') {
      in_string = true;
      values++;
    } else if (c == '[' || c == '{') {
      values++;
      if (++depth > max_depth)
        return sl__err_set(err, status,
                           "%s: nested deeper than %llu levels at byte %zu (set SHARDLOAD_JSON_MAX_DEPTH to "
                           "raise the limit)",
                           what, (unsigned long long)max_depth, i);
    } else if (c == ']' || c == '}') {
      if (depth > 0)
        depth--;
    }
    if (values > max_values)
      return sl__err_set(err, status,
                         "%s: more than %llu JSON values (set SHARDLOAD_JSON_MAX_VALUES to raise the limit)",
                         what, (unsigned long long)max_values);
  }
  return SL_STATUS_OK;
}

/* The bounded parse; *end where cJSON stopped. */
static sl_status parse_bounded(const char *text, size_t len, const char *what, sl_status status, cJSON **out,
                               const char **end, sl__err *err) {
  *out = NULL;
  *end = NULL;
  sl_status st = sl__json_check(text, len, what, status, err);
  if (st != SL_STATUS_OK)
    return st;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, end, false);
  if (root == NULL) {
    size_t at = *end != NULL && *end >= text && *end <= text + len ? (size_t)(*end - text) : 0;
    return sl__err_set(err, status, "%s: invalid JSON near byte %zu", what, at);
  }
  *out = root;
  return SL_STATUS_OK;
}

sl_status sl__json_parse(const char *text, size_t len, const char *what, sl_status status, cJSON **out,
                         sl__err *err) {
  const char *end = NULL;
  return parse_bounded(text, len, what, status, out, &end, err);
}

sl_status sl__json_parse_whole(const char *text, size_t len, const char *what, sl_status status, cJSON **out,
                               sl__err *err) {
  const char *end = NULL;
  sl_status st = parse_bounded(text, len, what, status, out, &end, err);
  if (st != SL_STATUS_OK)
    return st;
  for (const char *p = end; p != NULL && p < text + len; p++) {
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      cJSON_Delete(*out);
      *out = NULL;
      return sl__err_set(err, status, "%s: text after the JSON value at byte %zu", what, (size_t)(p - text));
    }
  }
  return SL_STATUS_OK;
}
