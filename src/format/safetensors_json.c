/*
 * format/safetensors_json.c — the lexical layer of the strict safetensors header scanner (see
 * format/safetensors_json.h): check 4 (strict UTF-8 over all N header bytes, padding included) and
 * the JSON tokens of check 5: strings with their escapes decoded into the arena, literals,
 * numbers, and a validating skipper for the values the schema ignores.
 */
#include "format/safetensors_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Records an ST_HEADER_JSON error at the current position. */
sl_status sl__st_scan_fail(sl__st_scan *s, const char *fmt, ...) {
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return sl__err_set(s->err, SL_STATUS_ST_HEADER_JSON, "%s: invalid header JSON at byte %zu: %s", s->what,
                     s->pos + 8, reason);
}

sl_status sl__st_scan_nomem(sl__st_scan *s) {
  return sl__err_set(s->err, SL_STATUS_NOMEM, "%s: out of memory parsing the header", s->what);
}

/* ---- step 4: UTF-8 ---- */

bool sl__st_utf8_check(const uint8_t *p, size_t n, size_t *bad_at) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    size_t extra = 0;
    uint8_t lo = 0x80;
    uint8_t hi = 0xBF;
    if (c < 0x80) {
      i++;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0)
        lo = 0xA0; /* overlong */
      if (c == 0xED)
        hi = 0x9F; /* surrogates U+D800–DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0)
        lo = 0x90; /* overlong */
      if (c == 0xF4)
        hi = 0x8F; /* above U+10FFFF */
    } else {
      if (bad_at != NULL)
        *bad_at = i;
      return false;
    }
    for (size_t k = 1; k <= extra; k++) {
      uint8_t min = k == 1 ? lo : 0x80;
      uint8_t max = k == 1 ? hi : 0xBF;
      if (i + k >= n || p[i + k] < min || p[i + k] > max) {
        if (bad_at != NULL)
          *bad_at = i;
        return false;
      }
    }
    i += extra + 1;
  }
  return true;
}

/* ---- step 5: JSON tokens ---- */

/* Consumes byte c (after whitespace) or fails naming what was expected. */
sl_status sl__st_scan_expect(sl__st_scan *s, uint8_t c, const char *where) {
  sl__st_scan_ws(s);
  if (!sl__st_scan_at(s, c)) {
    if (s->pos >= s->n)
      return sl__st_scan_fail(s, "expected '%c' %s, found the end of the header", c, where);
    return sl__st_scan_fail(s, "expected '%c' %s, found byte 0x%02x", c, where, s->p[s->pos]);
  }
  s->pos++;
  return SL_STATUS_OK;
}

/* After an element of an object or array: consumes ',' (returns OK, *more = true) or the closing
 * byte (*more = false). */
sl_status sl__st_scan_next(sl__st_scan *s, uint8_t close, const char *where, bool *more) {
  sl__st_scan_ws(s);
  if (sl__st_scan_at(s, ',')) {
    s->pos++;
    sl__st_scan_ws(s);
    *more = true;
    return SL_STATUS_OK;
  }
  if (sl__st_scan_at(s, close)) {
    s->pos++;
    *more = false;
    return SL_STATUS_OK;
  }
  if (s->pos >= s->n)
    return sl__st_scan_fail(s, "expected ',' or '%c' %s, found the end of the header", close, where);
  return sl__st_scan_fail(s, "expected ',' or '%c' %s, found byte 0x%02x", close, where, s->p[s->pos]);
}

static bool hex4(const uint8_t *p, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    uint8_t c = p[i];
    uint32_t d = 0;
    if (c >= '0' && c <= '9')
      d = (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = (uint32_t)(c - 'A' + 10);
    else
      return false;
    v = v * 16 + d;
  }
  *out = v;
  return true;
}

static size_t utf8_encode(uint32_t cp, char *dst) {
  if (cp < 0x80) {
    dst[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = (char)(0xE0 | (cp >> 12));
    dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  dst[0] = (char)(0xF0 | (cp >> 18));
  dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  dst[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decodes the \uXXXX escape at s->pos (just after "\u"), combining a surrogate pair. */
static sl_status scan_u_escape(sl__st_scan *s, uint32_t *cp) {
  if (s->n - s->pos < 4 || !hex4(s->p + s->pos, cp))
    return sl__st_scan_fail(s, "\\u must be followed by 4 hex digits");
  s->pos += 4;
  if (*cp >= 0xDC00 && *cp <= 0xDFFF)
    return sl__st_scan_fail(s, "lone low surrogate \\u%04x", *cp);
  if (*cp < 0xD800 || *cp > 0xDBFF)
    return SL_STATUS_OK;
  uint32_t low = 0;
  if (s->n - s->pos < 6 || s->p[s->pos] != '\\' || s->p[s->pos + 1] != 'u' ||
      !hex4(s->p + s->pos + 2, &low) || low < 0xDC00 || low > 0xDFFF)
    return sl__st_scan_fail(s, "high surrogate \\u%04x is not followed by a low surrogate", *cp);
  s->pos += 6;
  *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
  return SL_STATUS_OK;
}

/* Decodes the string at s->pos into the arena's top (not committed). */
sl_status sl__st_scan_string(sl__st_scan *s, sl__st_str *out) {
  if (!sl__st_scan_at(s, '"')) {
    if (s->pos >= s->n)
      return sl__st_scan_fail(s, "expected a string, found the end of the header");
    return sl__st_scan_fail(s, "expected a string, found byte 0x%02x", s->p[s->pos]);
  }
  s->pos++;
  char *dst = s->arena + s->arena_used;
  size_t k = 0;
  for (;;) {
    if (s->pos >= s->n)
      return sl__st_scan_fail(s, "unterminated string");
    uint8_t c = s->p[s->pos];
    if (c == '"')
      break;
    if (c < 0x20)
      return sl__st_scan_fail(s, "raw control byte 0x%02x in a string (must be escaped)", c);
    if (c != '\\') {
      dst[k] = (char)c;
      k++;
      s->pos++;
      continue;
    }
    if (s->n - s->pos < 2)
      return sl__st_scan_fail(s, "unterminated escape");
    uint8_t e = s->p[s->pos + 1];
    static const char escaped[] = "\"\\/bfnrtu";
    static const char decoded[] = "\"\\/\b\f\n\r\t";
    const char *hit = e != 0 ? strchr(escaped, e) : NULL;
    if (hit == NULL)
      return sl__st_scan_fail(s, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7F ? e : '?');
    s->pos += 2;
    if (e != 'u') {
      dst[k] = decoded[hit - escaped];
      k++;
      continue;
    }
    uint32_t cp = 0;
    sl_status st = scan_u_escape(s, &cp);
    if (st != SL_STATUS_OK)
      return st;
    k += utf8_encode(cp, dst + k);
  }
  s->pos++;
  dst[k] = '\0';
  out->s = dst;
  out->len = k;
  return SL_STATUS_OK;
}

sl_status sl__st_scan_literal(sl__st_scan *s, const char *lit) {
  size_t n = strlen(lit);
  if (s->n - s->pos < n || memcmp(s->p + s->pos, lit, n) != 0)
    return sl__st_scan_fail(s, "invalid literal (expected %s)", lit);
  s->pos += n;
  return SL_STATUS_OK;
}

/* A JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static sl_status scan_number(sl__st_scan *s) {
  if (sl__st_scan_at(s, '-'))
    s->pos++;
  if (sl__st_scan_at(s, '0')) {
    s->pos++;
  } else if (s->pos < s->n && sl__st_is_digit(s->p[s->pos])) {
    while (s->pos < s->n && sl__st_is_digit(s->p[s->pos]))
      s->pos++;
  } else {
    return sl__st_scan_fail(s, "invalid number");
  }
  if (sl__st_scan_at(s, '.')) {
    s->pos++;
    if (s->pos >= s->n || !sl__st_is_digit(s->p[s->pos]))
      return sl__st_scan_fail(s, "invalid number: digits expected after '.'");
    while (s->pos < s->n && sl__st_is_digit(s->p[s->pos]))
      s->pos++;
  }
  if (sl__st_scan_at(s, 'e') || sl__st_scan_at(s, 'E')) {
    s->pos++;
    if (sl__st_scan_at(s, '+') || sl__st_scan_at(s, '-'))
      s->pos++;
    if (s->pos >= s->n || !sl__st_is_digit(s->p[s->pos]))
      return sl__st_scan_fail(s, "invalid number: digits expected in the exponent");
    while (s->pos < s->n && sl__st_is_digit(s->p[s->pos]))
      s->pos++;
  }
  return SL_STATUS_OK;
}

/* A string whose content is not needed: decoded at the arena's top, not committed. */
static sl_status skip_string(sl__st_scan *s) {
  sl__st_str ignored;
  return sl__st_scan_string(s, &ignored);
}

/* One member of an object or element of an array being skipped, container at depth. */
static sl_status skip_element(sl__st_scan *s, bool object, int depth) {
  if (object) {
    sl__st_str key;
    sl_status st = sl__st_scan_string(s, &key);
    if (st == SL_STATUS_OK)
      st = sl__st_scan_expect(s, ':', "after an object key");
    if (st != SL_STATUS_OK)
      return st;
  }
  return sl__st_scan_skip(s, depth + 1);
}

/* The object or array opening at s->pos, at depth. */
static sl_status skip_container(sl__st_scan *s, int depth) {
  bool object = s->p[s->pos] == '{';
  uint8_t close = object ? '}' : ']';
  if (depth > ST_MAX_DEPTH)
    return sl__st_scan_fail(s, "nesting deeper than %d levels", ST_MAX_DEPTH);
  s->pos++;
  sl__st_scan_ws(s);
  if (sl__st_scan_at(s, close)) {
    s->pos++;
    return SL_STATUS_OK;
  }
  bool more = true;
  while (more) {
    sl_status st = skip_element(s, object, depth);
    if (st == SL_STATUS_OK)
      st = sl__st_scan_next(s, close, object ? "in an object" : "in an array", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

sl_status sl__st_scan_skip(sl__st_scan *s, int depth) {
  sl__st_scan_ws(s);
  if (s->pos >= s->n)
    return sl__st_scan_fail(s, "expected a value, found the end of the header");
  uint8_t c = s->p[s->pos];
  switch (c) {
  case '"':
    return skip_string(s);
  case 't':
    return sl__st_scan_literal(s, "true");
  case 'f':
    return sl__st_scan_literal(s, "false");
  case 'n':
    return sl__st_scan_literal(s, "null");
  case '{':
  case '[':
    return skip_container(s, depth);
  default:
    if (c == '-' || sl__st_is_digit(c))
      return scan_number(s);
    return sl__st_scan_fail(s, "expected a value, found byte 0x%02x", c);
  }
}
