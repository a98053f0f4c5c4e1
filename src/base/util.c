/*
 * base/util.c — implementation of base/util.h. Everything here is dependency-free and allocation failures
 * are reported to the caller, never fatal.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- buffer ---- */

void sl__buf_init(sl__buf *b, size_t max) {
  memset(b, 0, sizeof *b);
  b->max = max != 0 ? max : SIZE_MAX / 2;
}

void sl__buf_free(sl__buf *b) {
  free(b->data);
  size_t max = b->max;
  memset(b, 0, sizeof *b);
  b->max = max;
}

static bool buf_grow(sl__buf *b, size_t extra) {
  if (b->failed)
    return false;
  size_t need = b->len + extra + 1;
  if (need < b->len || need - 1 > b->max) {
    b->failed = true;
    return false;
  }
  if (need <= b->cap)
    return true;
  size_t cap = b->cap != 0 ? b->cap : 64;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  char *p = realloc(b->data, cap);
  if (p == NULL) {
    b->failed = true;
    return false;
  }
  b->data = p;
  b->cap = cap;
  return true;
}

bool sl__buf_append(sl__buf *b, const void *data, size_t n) {
  if (!buf_grow(b, n))
    return false;
  if (n > 0)
    memcpy(b->data + b->len, data, n);
  b->len += n;
  b->data[b->len] = '\0';
  return true;
}

bool sl__buf_putc(sl__buf *b, char c) {
  return sl__buf_append(b, &c, 1);
}

bool sl__buf_appendf(sl__buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_grow(b, (size_t)n)) {
    va_end(ap2);
    b->failed = true;
    return false;
  }
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  b->len += (size_t)n;
  return true;
}

/* The two-character escape of c shared by JSON strings and quoted names in messages, or NULL
 * (JSON then writes \u00XX, messages \xXX). json: \b and \f (JSON's own) instead of \' (messages
 * quote names in single quotes). */
static const char *short_escape(unsigned char c, bool json) {
  switch (c) {
  case '"':
    return "\\\"";
  case '\\':
    return "\\\\";
  case '\n':
    return "\\n";
  case '\r':
    return "\\r";
  case '\t':
    return "\\t";
  case '\b':
    return json ? "\\b" : NULL;
  case '\f':
    return json ? "\\f" : NULL;
  case '\'':
    return json ? NULL : "\\'";
  default:
    return NULL;
  }
}

bool sl__buf_json_str(sl__buf *b, const char *s) {
  bool ok = sl__buf_putc(b, '"');
  const unsigned char *p = (const unsigned char *)s;
  while (*p != '\0') {
    /* Append runs that need no escaping in one go. */
    const unsigned char *run = p;
    while (*p >= 0x20 && *p != '"' && *p != '\\')
      p++;
    if (p > run)
      ok = ok && sl__buf_append(b, run, (size_t)(p - run));
    if (*p == '\0')
      break;
    const char *esc = short_escape(*p, true);
    if (esc != NULL)
      ok = ok && sl__buf_append(b, esc, 2);
    else
      ok = ok && sl__buf_appendf(b, "\\u%04x", *p);
    p++;
  }
  return sl__buf_putc(b, '"') && ok;
}

const char *sl__buf_str(sl__buf *b) {
  return b->data != NULL ? b->data : "";
}

char *sl__buf_take(sl__buf *b) {
  char *p = b->data;
  if (p == NULL)
    p = sl__strdup("");
  size_t max = b->max;
  memset(b, 0, sizeof *b);
  b->max = max;
  return p;
}

/* ---- strings ---- */

char *sl__strdup(const char *s) {
  return s != NULL ? sl__strndup(s, strlen(s)) : NULL;
}

char *sl__strndup(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p == NULL)
    return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *sl__asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (p != NULL)
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

bool sl__str_ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s);
  size_t m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

bool sl__str_starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

const char *sl__quote(const char *s, char *buf, size_t cap) {
  if (cap == 0)
    return buf;
  if (s == NULL)
    s = "(null)";
  size_t len = strlen(s);
  size_t shown = len;
  if (shown > SL_QUOTE_SHOWN) {
    shown = SL_QUOTE_SHOWN;
    /* Back up over UTF-8 continuation bytes so that the cut falls between characters. */
    while (shown > 0 && ((unsigned char)s[shown] & 0xC0) == 0x80)
      shown--;
  }
  size_t o = 0;
  size_t i = 0;
  /* Reserve room for the longest escape (4 bytes), the truncation note and the NUL. */
  for (; i < shown && o + 4 + 40 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = short_escape(c, false);
    if (esc != NULL) {
      size_t n = strlen(esc);
      memcpy(buf + o, esc, n);
      o += n;
    } else if (c < 0x20 || c == 0x7f) {
      snprintf(buf + o, cap - o, "\\x%02x", c);
      o += 4;
    } else {
      buf[o++] = (char)c;
    }
  }
  buf[o] = '\0';
  if (i < len && o + 1 < cap)
    snprintf(buf + o, cap - o, "\xe2\x80\xa6(%zu bytes)", len);
  return buf;
}

char *sl__path_join(const char *dir, const char *name) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  return sl__asprintf("%.*s/%s", (int)n, dir, name);
}

bool sl__parse_u64(const char *s, uint64_t *out) {
  if (s == NULL || *s < '0' || *s > '9')
    return false;
  uint64_t v = 0;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9')
      return false;
    if (sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, (uint64_t)(*s - '0'), &v))
      return false;
  }
  *out = v;
  return true;
}

sl_status sl__pread_full(int fd, void *buf, uint64_t len, uint64_t off, bool allow_short, const char *path,
                         uint64_t *got_out, uint64_t *calls, sl__err *err) {
  uint8_t *p = buf;
  uint64_t got = 0;
  while (got < len) {
    size_t want = len - got < ((uint64_t)1 << 30) ? (size_t)(len - got) : ((size_t)1 << 30);
    ssize_t r = pread(fd, p + got, want, (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (calls != NULL)
      (*calls)++;
    if (r < 0)
      return sl__err_set(err, SL_STATUS_IO, "read of %s at offset %llu failed: %s", path,
                         (unsigned long long)(off + got), strerror(errno));
    if (r == 0) {
      if (allow_short)
        break;
      return sl__err_set(err, SL_STATUS_IO, "%s ended at offset %llu, %llu bytes before the expected end",
                         path, (unsigned long long)(off + got), (unsigned long long)(len - got));
    }
    got += (uint64_t)r;
  }
  if (got_out != NULL)
    *got_out = got;
  return SL_STATUS_OK;
}

sl_status sl__read_file(const char *path, size_t max_bytes, char **out, size_t *out_len, sl__err *err) {
  *out = NULL;
  if (out_len != NULL)
    *out_len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl__err_set(err, errno == ENOENT ? SL_STATUS_NOT_FOUND : SL_STATUS_IO, "cannot open %s: %s", path,
                       strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return sl__err_set(err, SL_STATUS_IO, "cannot stat %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return sl__err_set(err, SL_STATUS_IO, "%s is not a regular file", path);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return sl__err_set(err, SL_STATUS_IO, "%s is %lld bytes, more than the limit of %zu", path,
                       (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char *p = malloc(n + 1);
  if (p == NULL) {
    close(fd);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s (%zu bytes)", path, n);
  }
  sl_status rd = sl__pread_full(fd, p, n, 0, false, path, NULL, NULL, err);
  if (rd != SL_STATUS_OK) {
    free(p);
    close(fd);
    return rd;
  }
  close(fd);
  p[n] = '\0';
  *out = p;
  if (out_len != NULL)
    *out_len = n;
  return SL_STATUS_OK;
}

/* ---- vector ---- */

void sl__vec_init(sl__vec *v, size_t elem_size) {
  memset(v, 0, sizeof *v);
  v->elem = elem_size;
}

void sl__vec_free(sl__vec *v) {
  free(v->data);
  size_t e = v->elem;
  memset(v, 0, sizeof *v);
  v->elem = e;
}

bool sl__vec_reserve(sl__vec *v, size_t n) {
  if (n <= v->cap)
    return true;
  size_t cap = v->cap != 0 ? v->cap : 16;
  while (cap < n) {
    if (cap > SIZE_MAX / 2 / v->elem)
      return false;
    cap *= 2;
  }
  void *p = realloc(v->data, cap * v->elem);
  if (p == NULL)
    return false;
  v->data = p;
  v->cap = cap;
  return true;
}

void *sl__vec_push(sl__vec *v) {
  if (!sl__vec_reserve(v, v->len + 1))
    return NULL;
  void *p = (char *)v->data + v->len * v->elem;
  memset(p, 0, v->elem);
  v->len++;
  return p;
}

/* ---- element transposition ---- */

/* Elements per side of the square tiles the transposition walks: a tile of both the source and the
 * destination stays in cache. */
#define SL_TRANSPOSE_TILE 32u

/* One tile; inlined with a constant elem, each memcpy is one load and one store. */
static inline void transpose_tile(uint8_t *dst, uint64_t dst_stride, const uint8_t *src, uint64_t src_stride,
                                  uint64_t rows, uint64_t cols, size_t elem) {
  for (uint64_t i = 0; i < rows; i++)
    for (uint64_t j = 0; j < cols; j++)
      memcpy(dst + j * dst_stride + i * elem, src + i * src_stride + j * elem, elem);
}

void sl__transpose_elems(void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride, uint64_t rows,
                         uint64_t cols, uint64_t elem) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  for (uint64_t i0 = 0; i0 < rows; i0 += SL_TRANSPOSE_TILE) {
    uint64_t ni = rows - i0 < SL_TRANSPOSE_TILE ? rows - i0 : SL_TRANSPOSE_TILE;
    for (uint64_t j0 = 0; j0 < cols; j0 += SL_TRANSPOSE_TILE) {
      uint64_t nj = cols - j0 < SL_TRANSPOSE_TILE ? cols - j0 : SL_TRANSPOSE_TILE;
      uint8_t *td = d + j0 * dst_stride + i0 * elem;
      const uint8_t *ts = s + i0 * src_stride + j0 * elem;
      switch (elem) {
      case 1:
        transpose_tile(td, dst_stride, ts, src_stride, ni, nj, 1);
        break;
      case 2:
        transpose_tile(td, dst_stride, ts, src_stride, ni, nj, 2);
        break;
      case 4:
        transpose_tile(td, dst_stride, ts, src_stride, ni, nj, 4);
        break;
      case 8:
        transpose_tile(td, dst_stride, ts, src_stride, ni, nj, 8);
        break;
      default:
        transpose_tile(td, dst_stride, ts, src_stride, ni, nj, (size_t)elem);
        break;
      }
    }
  }
}

/* ---- hashing ---- */

uint64_t sl__hash_bytes(const void *data, size_t n) {
  /* FNV-1a 64, then a final avalanche so that low bits are usable with power-of-two tables. */
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}
