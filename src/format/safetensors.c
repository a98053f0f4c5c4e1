/*
 * format/safetensors.c — the strict safetensors reader (SAFETENSORS.md §1–§5).
 *
 * Organisation, in the order of the checks of §4:
 *   check_length    checks 1–3 on the 8-byte length field (shared with sl__st_read_file, which runs
 *                   them before allocating anything);
 *   sl__st_utf8_check  check 4 over all N header bytes, padding included;
 *   scan_*          check 5: one pass over (ptr, len) for the fixed schema — top object, tensor
 *                   objects, the __metadata__ map — with a validating skipper for ignored values.
 *                   This is deliberately not cJSON (see §5.1);
 *   check_offsets   checks 6a–6e over the table sorted by (begin, end, name bytes), then check 7.
 *
 * Decoded strings live in one arena of N + 1 bytes: a decoded JSON string plus its NUL is always
 * shorter than its quoted source, and the sources are disjoint, so the arena never grows. A string
 * is decoded at the arena's top and kept only when "committed" (names, metadata); field names and
 * ignored strings are overwritten by the next one. Byte positions in messages are file offsets.
 */
#include "format/safetensors.h"

#include "base/hashmap.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_DEPTH 128  /* deepest accepted nesting; the top-level object is depth 1 */
#define ST_NAME_SHOWN 200 /* bytes of a name quoted in a message */

/* A decoded string at the arena's top: s[len] == '\0'; it may hold U+0000 (checked by callers). */
typedef struct st_str {
  char *s;
  size_t len;
} st_str;

typedef struct st_scan {
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
} st_scan;

static int shown(size_t len) {
  return (int)(len < ST_NAME_SHOWN ? len : ST_NAME_SHOWN);
}

/* Records an ST_HEADER_JSON error at the current position. */
static sl_status SL_PRINTF(2, 3) scan_fail(st_scan *s, const char *fmt, ...) {
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return sl__err_set(s->err, SL_STATUS_ST_HEADER_JSON, "%s: invalid header JSON at byte %zu: %s", s->what,
                     s->pos + 8, reason);
}

static sl_status scan_nomem(st_scan *s) {
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

/* ---- step 5: the scanner ---- */

static void scan_ws(st_scan *s) {
  while (s->pos < s->n) {
    uint8_t c = s->p[s->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      return;
    s->pos++;
  }
}

static bool scan_at(const st_scan *s, uint8_t c) {
  return s->pos < s->n && s->p[s->pos] == c;
}

/* Consumes byte c (after whitespace) or fails naming what was expected. */
static sl_status scan_expect(st_scan *s, uint8_t c, const char *where) {
  scan_ws(s);
  if (!scan_at(s, c)) {
    if (s->pos >= s->n)
      return scan_fail(s, "expected '%c' %s, found the end of the header", c, where);
    return scan_fail(s, "expected '%c' %s, found byte 0x%02x", c, where, s->p[s->pos]);
  }
  s->pos++;
  return SL_STATUS_OK;
}

/* After an element of an object or array: consumes ',' (returns OK, *more = true) or the closing
 * byte (*more = false). */
static sl_status scan_next(st_scan *s, uint8_t close, const char *where, bool *more) {
  scan_ws(s);
  if (scan_at(s, ',')) {
    s->pos++;
    scan_ws(s);
    *more = true;
    return SL_STATUS_OK;
  }
  if (scan_at(s, close)) {
    s->pos++;
    *more = false;
    return SL_STATUS_OK;
  }
  if (s->pos >= s->n)
    return scan_fail(s, "expected ',' or '%c' %s, found the end of the header", close, where);
  return scan_fail(s, "expected ',' or '%c' %s, found byte 0x%02x", close, where, s->p[s->pos]);
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
static sl_status scan_u_escape(st_scan *s, uint32_t *cp) {
  if (s->n - s->pos < 4 || !hex4(s->p + s->pos, cp))
    return scan_fail(s, "\\u must be followed by 4 hex digits");
  s->pos += 4;
  if (*cp >= 0xDC00 && *cp <= 0xDFFF)
    return scan_fail(s, "lone low surrogate \\u%04x", *cp);
  if (*cp < 0xD800 || *cp > 0xDBFF)
    return SL_STATUS_OK;
  uint32_t low = 0;
  if (s->n - s->pos < 6 || s->p[s->pos] != '\\' || s->p[s->pos + 1] != 'u' ||
      !hex4(s->p + s->pos + 2, &low) || low < 0xDC00 || low > 0xDFFF)
    return scan_fail(s, "high surrogate \\u%04x is not followed by a low surrogate", *cp);
  s->pos += 6;
  *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
  return SL_STATUS_OK;
}

/* Decodes the string at s->pos into the arena's top (not committed). */
static sl_status scan_string(st_scan *s, st_str *out) {
  if (!scan_at(s, '"')) {
    if (s->pos >= s->n)
      return scan_fail(s, "expected a string, found the end of the header");
    return scan_fail(s, "expected a string, found byte 0x%02x", s->p[s->pos]);
  }
  s->pos++;
  char *dst = s->arena + s->arena_used;
  size_t k = 0;
  for (;;) {
    if (s->pos >= s->n)
      return scan_fail(s, "unterminated string");
    uint8_t c = s->p[s->pos];
    if (c == '"')
      break;
    if (c < 0x20)
      return scan_fail(s, "raw control byte 0x%02x in a string (must be escaped)", c);
    if (c != '\\') {
      dst[k] = (char)c;
      k++;
      s->pos++;
      continue;
    }
    if (s->n - s->pos < 2)
      return scan_fail(s, "unterminated escape");
    uint8_t e = s->p[s->pos + 1];
    static const char escaped[] = "\"\\/bfnrtu";
    static const char decoded[] = "\"\\/\b\f\n\r\t";
    const char *hit = e != 0 ? strchr(escaped, e) : NULL;
    if (hit == NULL)
      return scan_fail(s, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7F ? e : '?');
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

/* Keeps the string just decoded at the arena's top. */
static void scan_commit(st_scan *s, const st_str *str) {
  s->arena_used += str->len + 1;
}

static bool str_is(const st_str *str, const char *lit) {
  size_t n = strlen(lit);
  return str->len == n && memcmp(str->s, lit, n) == 0;
}

static sl_status scan_literal(st_scan *s, const char *lit) {
  size_t n = strlen(lit);
  if (s->n - s->pos < n || memcmp(s->p + s->pos, lit, n) != 0)
    return scan_fail(s, "invalid literal (expected %s)", lit);
  s->pos += n;
  return SL_STATUS_OK;
}

static bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}

/* A JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static sl_status scan_number(st_scan *s) {
  if (scan_at(s, '-'))
    s->pos++;
  if (scan_at(s, '0')) {
    s->pos++;
  } else if (s->pos < s->n && is_digit(s->p[s->pos])) {
    while (s->pos < s->n && is_digit(s->p[s->pos]))
      s->pos++;
  } else {
    return scan_fail(s, "invalid number");
  }
  if (scan_at(s, '.')) {
    s->pos++;
    if (s->pos >= s->n || !is_digit(s->p[s->pos]))
      return scan_fail(s, "invalid number: digits expected after '.'");
    while (s->pos < s->n && is_digit(s->p[s->pos]))
      s->pos++;
  }
  if (scan_at(s, 'e') || scan_at(s, 'E')) {
    s->pos++;
    if (scan_at(s, '+') || scan_at(s, '-'))
      s->pos++;
    if (s->pos >= s->n || !is_digit(s->p[s->pos]))
      return scan_fail(s, "invalid number: digits expected in the exponent");
    while (s->pos < s->n && is_digit(s->p[s->pos]))
      s->pos++;
  }
  return SL_STATUS_OK;
}

/* Validates and skips any JSON value at s->pos; depth is the depth it has if it is a container. */
static sl_status scan_skip(st_scan *s, int depth) {
  scan_ws(s);
  if (s->pos >= s->n)
    return scan_fail(s, "expected a value, found the end of the header");
  uint8_t c = s->p[s->pos];
  if (c == '"') {
    st_str ignored;
    return scan_string(s, &ignored);
  }
  if (c == 't')
    return scan_literal(s, "true");
  if (c == 'f')
    return scan_literal(s, "false");
  if (c == 'n')
    return scan_literal(s, "null");
  if (c == '-' || is_digit(c))
    return scan_number(s);
  if (c != '{' && c != '[')
    return scan_fail(s, "expected a value, found byte 0x%02x", c);
  if (depth > ST_MAX_DEPTH)
    return scan_fail(s, "nesting deeper than %d levels", ST_MAX_DEPTH);
  uint8_t close = c == '{' ? '}' : ']';
  s->pos++;
  scan_ws(s);
  if (scan_at(s, close)) {
    s->pos++;
    return SL_STATUS_OK;
  }
  bool more = true;
  while (more) {
    sl_status st = SL_STATUS_OK;
    if (c == '{') {
      st_str key;
      st = scan_string(s, &key);
      if (st == SL_STATUS_OK)
        st = scan_expect(s, ':', "after an object key");
    }
    if (st == SL_STATUS_OK)
      st = scan_skip(s, depth + 1);
    if (st == SL_STATUS_OK)
      st = scan_next(s, close, c == '{' ? "in an object" : "in an array", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* An integer of shape or data_offsets: 0|[1-9][0-9]* into a u64. */
static sl_status scan_u64(st_scan *s, const st_str *tname, const char *field, uint64_t *out) {
  scan_ws(s);
  if (s->pos >= s->n || !is_digit(s->p[s->pos]))
    return scan_fail(s, "tensor '%.*s': %s must hold unsigned integers", shown(tname->len), tname->s, field);
  uint64_t v = 0;
  if (s->p[s->pos] == '0') {
    s->pos++;
  } else {
    while (s->pos < s->n && is_digit(s->p[s->pos])) {
      uint64_t d = (uint64_t)(s->p[s->pos] - '0');
      if (sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, d, &v))
        return scan_fail(s, "tensor '%.*s': integer in %s exceeds 2^64-1", shown(tname->len), tname->s,
                         field);
      s->pos++;
    }
  }
  if (s->pos < s->n &&
      (is_digit(s->p[s->pos]) || s->p[s->pos] == '.' || s->p[s->pos] == 'e' || s->p[s->pos] == 'E'))
    return scan_fail(s, "tensor '%.*s': %s must hold plain unsigned integers (0 or [1-9][0-9]*)",
                     shown(tname->len), tname->s, field);
  *out = v;
  return SL_STATUS_OK;
}

/* [u64, ...] with at most max elements; *count receives the number read. */
static sl_status scan_u64_array(st_scan *s, const st_str *tname, const char *field, uint64_t *vals,
                                uint32_t max, uint32_t *count) {
  *count = 0;
  scan_ws(s);
  if (!scan_at(s, '['))
    return scan_fail(s, "tensor '%.*s': %s must be an array of unsigned integers", shown(tname->len),
                     tname->s, field);
  s->pos++;
  scan_ws(s);
  if (scan_at(s, ']')) {
    s->pos++;
    return SL_STATUS_OK;
  }
  bool more = true;
  while (more) {
    if (*count == max)
      return scan_fail(s, "tensor '%.*s': %s has more than %u elements", shown(tname->len), tname->s, field,
                       max);
    sl_status st = scan_u64(s, tname, field, &vals[*count]);
    if (st != SL_STATUS_OK)
      return st;
    (*count)++;
    st = scan_next(s, ']', field, &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* The value of the member "name": {"dtype": …, "shape": […], "data_offsets": [b, e], …}. */
static sl_status scan_tensor(st_scan *s, st_str *name) {
  if (memchr(name->s, '\0', name->len) != NULL)
    return scan_fail(s, "tensor name contains U+0000 (names must be C strings)");
  bool oom = false;
  uint32_t index = (uint32_t)s->tensors.len;
  if (!sl__hashmap_put(&s->names, name->s, name->len, index, NULL, &oom)) {
    if (oom)
      return scan_nomem(s);
    return scan_fail(s, "duplicate tensor name '%.*s'", shown(name->len), name->s);
  }
  scan_commit(s, name);
  sl__st_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name->s;
  t.name_len = name->len;
  enum { F_DTYPE, F_SHAPE, F_OFFSETS, F_OTHER };
  static const char *const field_names[] = {"dtype", "shape", "data_offsets"};
  bool have[F_OTHER] = {false, false, false};
  scan_ws(s);
  if (!scan_at(s, '{'))
    return scan_fail(s, "tensor '%.*s': expected an object {\"dtype\", \"shape\", \"data_offsets\"}",
                     shown(name->len), name->s);
  s->pos++;
  scan_ws(s);
  bool more = !scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    st_str field;
    sl_status st = scan_string(s, &field);
    if (st == SL_STATUS_OK)
      st = scan_expect(s, ':', "after a field name");
    if (st != SL_STATUS_OK)
      return st;
    int f = F_DTYPE;
    while (f < F_OTHER && !str_is(&field, field_names[f]))
      f++;
    if (f != F_OTHER && have[f])
      return scan_fail(s, "tensor '%.*s': field \"%s\" given twice", shown(name->len), name->s,
                       field_names[f]);
    if (f != F_OTHER)
      have[f] = true;
    if (f == F_DTYPE) {
      st_str dt;
      scan_ws(s);
      if (!scan_at(s, '"'))
        return scan_fail(s, "tensor '%.*s': dtype must be a string", shown(name->len), name->s);
      st = scan_string(s, &dt);
      if (st == SL_STATUS_OK && !sl__dtype_parse(dt.s, dt.len, &t.dtype))
        return scan_fail(s, "tensor '%.*s': unknown dtype '%.*s'", shown(name->len), name->s, shown(dt.len),
                         dt.s);
    } else if (f == F_SHAPE) {
      st = scan_u64_array(s, name, "shape", t.shape, SL_ST_MAX_DIMS, &t.ndim);
    } else if (f == F_OFFSETS) {
      uint64_t off[2] = {0, 0};
      uint32_t count = 0;
      st = scan_u64_array(s, name, "data_offsets", off, 2, &count);
      if (st == SL_STATUS_OK && count != 2)
        return scan_fail(s, "tensor '%.*s': data_offsets must have exactly 2 elements, has %u",
                         shown(name->len), name->s, count);
      t.begin = off[0];
      t.end = off[1];
    } else {
      st = scan_skip(s, 3);
    }
    if (st == SL_STATUS_OK)
      st = scan_next(s, '}', "in a tensor object", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  for (int f = F_DTYPE; f < F_OTHER; f++) {
    if (!have[f])
      return scan_fail(s, "tensor '%.*s': field \"%s\" is missing", shown(name->len), name->s,
                       field_names[f]);
  }
  sl__st_tensor *slot = sl__vec_push(&s->tensors);
  if (slot == NULL)
    return scan_nomem(s);
  *slot = t;
  return SL_STATUS_OK;
}

/* The value of "__metadata__": null or an object of strings. Keys and values are C strings: a
 * U+0000 inside ends them (the reference accepts it; shardload never needs such metadata). */
static sl_status scan_metadata(st_scan *s) {
  if (s->have_meta)
    return scan_fail(s, "__metadata__ given twice");
  s->have_meta = true;
  scan_ws(s);
  if (scan_at(s, 'n'))
    return scan_literal(s, "null");
  if (!scan_at(s, '{'))
    return scan_fail(s, "__metadata__ must be an object of strings or null");
  s->pos++;
  scan_ws(s);
  bool more = !scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    st_str key;
    sl_status st = scan_string(s, &key);
    if (st != SL_STATUS_OK)
      return st;
    size_t key_len = strlen(key.s);
    uint32_t index = (uint32_t)s->meta.len;
    uint64_t existing = 0;
    bool oom = false;
    if (sl__hashmap_put(&s->keys, key.s, key_len, index, &existing, &oom)) {
      scan_commit(s, &key);
      sl__st_meta *slot = sl__vec_push(&s->meta);
      if (slot == NULL)
        return scan_nomem(s);
      slot->key = key.s;
    } else if (oom) {
      return scan_nomem(s);
    } else {
      index = (uint32_t)existing;
    }
    st = scan_expect(s, ':', "after a metadata key");
    if (st != SL_STATUS_OK)
      return st;
    scan_ws(s);
    if (!scan_at(s, '"'))
      return scan_fail(s, "__metadata__ value of key '%.*s' must be a string", shown(key_len),
                       SL_VEC_AT(&s->meta, sl__st_meta, index).key);
    st_str value;
    st = scan_string(s, &value);
    if (st != SL_STATUS_OK)
      return st;
    scan_commit(s, &value);
    SL_VEC_AT(&s->meta, sl__st_meta, index).value = value.s;
    st = scan_next(s, '}', "in __metadata__", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

static sl_status scan_header(st_scan *s) {
  scan_ws(s);
  if (s->pos >= s->n)
    return scan_fail(s, "empty header (expected a JSON object)");
  if (!scan_at(s, '{'))
    return scan_fail(s, "the header must be a JSON object, found byte 0x%02x", s->p[s->pos]);
  s->pos++;
  scan_ws(s);
  bool more = !scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    st_str key;
    sl_status st = scan_string(s, &key);
    if (st == SL_STATUS_OK)
      st = scan_expect(s, ':', "after a tensor name");
    if (st == SL_STATUS_OK && str_is(&key, "__metadata__"))
      st = scan_metadata(s);
    else if (st == SL_STATUS_OK)
      st = scan_tensor(s, &key);
    if (st == SL_STATUS_OK)
      st = scan_next(s, '}', "in the header object", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  scan_ws(s);
  if (s->pos < s->n)
    return scan_fail(
        s, "unexpected byte 0x%02x after the header object (only spaces, tabs and newlines may follow)",
        s->p[s->pos]);
  return SL_STATUS_OK;
}

/* ---- steps 1–3, 6, 7 ---- */

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* Checks 1–3 from the first min(file_size, 8) bytes; *n receives N. */
static sl_status check_length(const uint8_t *prefix, size_t prefix_len, uint64_t file_size, const char *what,
                              uint64_t *n, sl__err *err) {
  if (file_size < 8)
    return sl__err_set(err, SL_STATUS_ST_HEADER_TOO_SMALL,
                       "%s: header too small (%llu bytes; a safetensors file starts with an 8-byte length)",
                       what, (unsigned long long)file_size);
  if (prefix_len < 8)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: %zu bytes given, the 8-byte length is needed",
                       what, prefix_len);
  *n = le64(prefix);
  bool too_large = *n > SL_ST_MAX_HEADER;
#if SIZE_MAX < UINT64_MAX
  too_large = too_large || *n > (uint64_t)SIZE_MAX - 9;
#endif
  if (too_large)
    return sl__err_set(err, SL_STATUS_ST_HEADER_TOO_LARGE, "%s: header length %llu exceeds %llu", what,
                       (unsigned long long)*n, (unsigned long long)SL_ST_MAX_HEADER);
  if (*n > file_size - 8)
    return sl__err_set(err, SL_STATUS_ST_HEADER_LENGTH, "%s: header length %llu exceeds file size %llu", what,
                       (unsigned long long)*n, (unsigned long long)file_size);
  return SL_STATUS_OK;
}

sl_status sl__st_nbytes(sl__dtype dtype, uint32_t ndim, const uint64_t *shape, uint64_t *nbytes) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < ndim; d++) {
    if (sl__mul_overflow(count, shape[d], &count))
      return SL_STATUS_ST_OVERFLOW;
  }
  uint64_t bits = 0;
  if (sl__mul_overflow(count, sl__dtype_bits(dtype), &bits))
    return SL_STATUS_ST_OVERFLOW;
  if (bits % 8 != 0)
    return SL_STATUS_ST_MISALIGNED;
  *nbytes = bits / 8;
  return SL_STATUS_OK;
}

static int cmp_data_order(const void *a, const void *b) {
  const sl__st_tensor *x = a;
  const sl__st_tensor *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  if (c != 0)
    return c;
  return x->name_len < y->name_len ? -1 : x->name_len > y->name_len ? 1 : 0;
}

static int cmp_meta_key(const void *a, const void *b) {
  return strcmp(((const sl__st_meta *)a)->key, ((const sl__st_meta *)b)->key);
}

/* Checks 6a–6e over the sorted table; *data_len receives the end of the last tensor. */
static sl_status check_offsets(const sl__st_tensor *t, size_t count, const char *what, uint64_t *data_len,
                               sl__err *err) {
  uint64_t pos = 0;
  for (size_t i = 0; i < count; i++) {
    int nl = shown(t[i].name_len);
    if (t[i].begin != pos || t[i].end < t[i].begin)
      return sl__err_set(
          err, SL_STATUS_ST_INVALID_OFFSET,
          "%s: invalid data offsets [%llu, %llu] for tensor '%.*s' (expected it to start at %llu)", what,
          (unsigned long long)t[i].begin, (unsigned long long)t[i].end, nl, t[i].name,
          (unsigned long long)pos);
    pos = t[i].end;
    uint64_t nbytes = 0;
    sl_status st = sl__st_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &nbytes);
    if (st == SL_STATUS_ST_OVERFLOW)
      return sl__err_set(err, st, "%s: size of tensor '%.*s' overflows", what, nl, t[i].name);
    if (st == SL_STATUS_ST_MISALIGNED)
      return sl__err_set(err, st, "%s: tensor '%.*s' (%s) does not end on a byte boundary", what, nl,
                         t[i].name, sl__dtype_name(t[i].dtype));
    if (t[i].end - t[i].begin != nbytes)
      return sl__err_set(err, SL_STATUS_ST_TENSOR_INFO,
                         "%s: tensor '%.*s': shape and dtype need %llu bytes, offsets give %llu", what, nl,
                         t[i].name, (unsigned long long)nbytes, (unsigned long long)(t[i].end - t[i].begin));
  }
  *data_len = pos;
  return SL_STATUS_OK;
}

sl_status sl__st_parse(const uint8_t *prefix, size_t prefix_len, uint64_t file_size, const char *what,
                       sl__st_header *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  uint64_t n = 0;
  sl_status st = check_length(prefix, prefix_len, file_size, what, &n, err);
  if (st != SL_STATUS_OK)
    return st;
  if (prefix_len - 8 < n)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: %zu bytes given, the header needs %llu", what,
                       prefix_len, (unsigned long long)(8 + n));
  size_t bad_at = 0;
  if (!sl__st_utf8_check(prefix + 8, (size_t)n, &bad_at))
    return sl__err_set(err, SL_STATUS_ST_HEADER_UTF8, "%s: header is not valid UTF-8 at byte %zu", what,
                       bad_at + 8);

  st_scan s;
  memset(&s, 0, sizeof s);
  s.p = prefix + 8;
  s.n = (size_t)n;
  s.what = what;
  s.err = err;
  sl__vec_init(&s.tensors, sizeof(sl__st_tensor));
  sl__vec_init(&s.meta, sizeof(sl__st_meta));
  sl__hashmap_init(&s.names, SL_HASHMAP_BORROW);
  sl__hashmap_init(&s.keys, SL_HASHMAP_BORROW);
  s.arena = malloc(s.n + 1);
  if (s.arena == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory for a %zu-byte header", what, s.n);
    goto fail;
  }
  st = scan_header(&s);
  if (st != SL_STATUS_OK)
    goto fail;
  sl__hashmap_free(&s.names);
  sl__hashmap_free(&s.keys);

  sl__st_tensor *tensors = s.tensors.data;
  if (s.tensors.len > 1)
    qsort(tensors, s.tensors.len, sizeof *tensors, cmp_data_order);
  uint64_t data_len = 0;
  st = check_offsets(tensors, s.tensors.len, what, &data_len, err);
  if (st != SL_STATUS_OK)
    goto fail;
  uint64_t end = 0;
  if (sl__add_overflow(8 + n, data_len, &end) || end != file_size) {
    st = sl__err_set(err, SL_STATUS_ST_INCOMPLETE,
                     "%s: data section covers %llu bytes, file has %llu after the header", what,
                     (unsigned long long)data_len, (unsigned long long)(file_size - 8 - n));
    goto fail;
  }
  if (s.meta.len > 1)
    qsort(s.meta.data, s.meta.len, sizeof(sl__st_meta), cmp_meta_key);

  out->header_len = n;
  out->data_start = 8 + n;
  out->file_size = file_size;
  out->n_tensors = s.tensors.len;
  out->tensors = s.tensors.data;
  out->n_meta = s.meta.len;
  out->meta = s.meta.data;
  out->strings = s.arena;
  return SL_STATUS_OK;

fail:
  sl__hashmap_free(&s.names);
  sl__hashmap_free(&s.keys);
  sl__vec_free(&s.tensors);
  sl__vec_free(&s.meta);
  free(s.arena);
  return st;
}

void sl__st_header_free(sl__st_header *h) {
  if (h == NULL)
    return;
  free(h->tensors);
  free(h->meta);
  free(h->strings);
  memset(h, 0, sizeof *h);
}

/* ---- the file ---- */

sl_status sl__st_read_file(const char *path, sl__st_header *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  uint8_t *buf = NULL;
  sl_status st = SL_STATUS_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl__err_set(err, SL_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = sl__err_set(err, SL_STATUS_IO, "cannot stat %s: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = sl__err_set(err, SL_STATUS_IO, "%s is not a regular file", path);
    goto done;
  }
  uint64_t file_size = (uint64_t)sb.st_size;
  uint8_t len8[8];
  size_t have = file_size < 8 ? (size_t)file_size : 8;
  st = sl__pread_full(fd, len8, have, 0, false, path, NULL, NULL, err);
  if (st != SL_STATUS_OK)
    goto done;
  uint64_t n = 0;
  st = check_length(len8, have, file_size, path, &n, err);
  if (st != SL_STATUS_OK)
    goto done;
  buf = malloc((size_t)n + 8);
  if (buf == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory for a %llu-byte header", path,
                     (unsigned long long)n);
    goto done;
  }
  memcpy(buf, len8, 8);
  st = sl__pread_full(fd, buf + 8, n, 8, false, path, NULL, NULL, err);
  if (st != SL_STATUS_OK)
    goto done;
  st = sl__st_parse(buf, (size_t)n + 8, file_size, path, out, err);

done:
  free(buf);
  close(fd);
  return st;
}
