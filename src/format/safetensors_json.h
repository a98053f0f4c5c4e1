/*
 * format/safetensors_json.h — the JSON lexical layer of the strict header scanner (check 5 of
 * docs/spec/SAFETENSORS.md §4), shared by format/safetensors.c, which reads the fixed schema (top object,
 * tensor objects, __metadata__), and format/safetensors_json.c (strings, literals, numbers, the
 * validating skipper, and the UTF-8 check of step 4). Not cJSON: see docs/spec/SAFETENSORS.md §5.1.
 *
 * Decoded strings live in one arena of N + 1 bytes: a decoded JSON string plus its NUL is always
 * shorter than its quoted source, and the sources are disjoint, so the arena never grows. A string
 * is decoded at the arena's top and kept only when "committed" (names, metadata); field names and
 * ignored strings are overwritten by the next one. Byte positions in messages are file offsets.
 * The one-byte helpers are inline: the scanner calls them for every byte.
 */
#ifndef SL_SAFETENSORS_JSON_H
#define SL_SAFETENSORS_JSON_H

#include "base/hashmap.h"
#include "base/util.h"
#include "format/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ST_MAX_DEPTH 128  /* deepest accepted nesting; the top-level object is depth 1 */
#define ST_NAME_SHOWN 200 /* bytes of a name quoted in a message */

/* A decoded string at the arena's top: s[len] == '\0'; it may hold U+0000 (checked by callers). */
typedef struct sl__st_str {
  char *s;
  size_t len;
} sl__st_str;

typedef struct sl__st_scan {
  const uint8_t *p; /* the N header bytes */
  size_t n;         /* N */
  size_t pos;       /* next byte to read, relative to p */
  const char *what; /* the file, for messages */
  sl__err *err;
  char *arena;       /* decoded strings, n + 1 bytes */
  size_t arena_used; /* committed bytes */
  sl__vec tensors;   /* sl__st_tensor, in header order */
  sl__vec meta;      /* sl__st_meta, in first-seen key order */
  sl__hashmap names; /* tensor name → index into tensors (duplicates) */
  sl__hashmap keys;  /* metadata key → index into meta (a repeated key keeps the last value) */
  bool have_meta;    /* __metadata__ was seen */
} sl__st_scan;

/* Bytes of a name of len bytes quoted in a message. */
static inline int sl__st_shown(size_t len) {
  return (int)(len < ST_NAME_SHOWN ? len : ST_NAME_SHOWN);
}

static inline void sl__st_scan_ws(sl__st_scan *s) {
  while (s->pos < s->n) {
    uint8_t c = s->p[s->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      return;
    s->pos++;
  }
}

static inline bool sl__st_scan_at(const sl__st_scan *s, uint8_t c) {
  return s->pos < s->n && s->p[s->pos] == c;
}

static inline bool sl__st_is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}

/* Keeps the string just decoded at the arena's top. */
static inline void sl__st_scan_commit(sl__st_scan *s, const sl__st_str *str) {
  s->arena_used += str->len + 1;
}

static inline bool sl__st_str_is(const sl__st_str *str, const char *lit) {
  size_t n = strlen(lit);
  return str->len == n && memcmp(str->s, lit, n) == 0;
}

/* Records an ST_HEADER_JSON error at the current position. */
sl_status sl__st_scan_fail(sl__st_scan *s, const char *fmt, ...) SL_PRINTF(2, 3);
/* Records an out-of-memory error naming the file. */
sl_status sl__st_scan_nomem(sl__st_scan *s);
/* Consumes byte c (after whitespace) or fails naming what was expected. */
sl_status sl__st_scan_expect(sl__st_scan *s, uint8_t c, const char *where);
/* After an element of an object or array: consumes ',' (returns OK, *more = true) or the closing
 * byte (*more = false). */
sl_status sl__st_scan_next(sl__st_scan *s, uint8_t close, const char *where, bool *more);
/* Decodes the string at s->pos into the arena's top (not committed). */
sl_status sl__st_scan_string(sl__st_scan *s, sl__st_str *out);
/* Consumes the literal lit (true, false, null). */
sl_status sl__st_scan_literal(sl__st_scan *s, const char *lit);
/* Validates and skips any JSON value at s->pos; depth is the depth it has if it is a container. */
sl_status sl__st_scan_skip(sl__st_scan *s, int depth);

#endif
