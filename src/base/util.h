/*
 * base/util.h — small shared helpers: overflow-checked arithmetic, a growable byte buffer with an
 * explicit cap (curl's dynbuf idea), string helpers, a growable array and a byte-string hash. The
 * hash table itself is base/hashmap.h.
 */
#ifndef SL_UTIL_H
#define SL_UTIL_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- overflow-checked arithmetic: return true on overflow ---- */
static inline bool sl__mul_overflow(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline bool sl__add_overflow(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_add_overflow(a, b, out);
}

/* ---- growable byte buffer ---- */
typedef struct sl__buf {
  char *data;  /* NUL-terminated when len > 0 or after sl__buf_str */
  size_t len;  /* bytes used */
  size_t cap;  /* bytes allocated */
  size_t max;  /* refuse to grow beyond this many bytes (0 = SIZE_MAX / 2) */
  bool failed; /* an append failed (out of memory or above max): the content is incomplete */
} sl__buf;

void sl__buf_init(sl__buf *b, size_t max);
void sl__buf_free(sl__buf *b);
bool sl__buf_append(sl__buf *b, const void *data, size_t n);
bool sl__buf_appendf(sl__buf *b, const char *fmt, ...) SL_PRINTF(2, 3);
bool sl__buf_putc(sl__buf *b, char c);
/* Appends s as a JSON string literal (quotes included). */
bool sl__buf_json_str(sl__buf *b, const char *s);
/* Returns the NUL-terminated content ("" when empty); valid until the next append or free. */
const char *sl__buf_str(sl__buf *b);
/* Hands the content over to the caller (who frees it); the buffer is left empty. */
char *sl__buf_take(sl__buf *b);

/* ---- strings ---- */
char *sl__strdup(const char *s);
char *sl__strndup(const char *s, size_t n);
char *sl__asprintf(const char *fmt, ...) SL_PRINTF(1, 2);
bool sl__str_ends_with(const char *s, const char *suffix);
bool sl__str_starts_with(const char *s, const char *prefix);
/* A name from a checkpoint, an index or a config file, made safe to print in a message: control
 * characters, DEL, quotes and backslashes are escaped (\n, \t, \r, \xNN, \', \", \\), and a name
 * longer than SL_QUOTE_SHOWN bytes is cut (at a UTF-8 boundary) and followed by "…(N bytes)". No
 * surrounding quotes are added. Writes into buf (SL_QUOTE_BUF bytes suffice) and returns it. */
#define SL_QUOTE_SHOWN 200
#define SL_QUOTE_BUF (SL_QUOTE_SHOWN * 4 + 64)
const char *sl__quote(const char *s, char *buf, size_t cap);
/* Joins directory and name with one '/'. */
char *sl__path_join(const char *dir, const char *name);
/* Parses a whole string as a decimal u64 (no sign, no spaces); false on any defect/overflow. */
bool sl__parse_u64(const char *s, uint64_t *out);
/* Reads len bytes of fd from offset off into buf, retrying short reads and EINTR. allow_short:
 * the end of the file may come first (*got says how much arrived). calls (may be NULL) is
 * incremented per read system call. Errors name path and the offset. */
sl_status sl__pread_full(int fd, void *buf, uint64_t len, uint64_t off, bool allow_short, const char *path,
                         uint64_t *got, uint64_t *calls, sl__err *err);
/* Reads a whole file (at most max_bytes) into a NUL-terminated malloc'd buffer. */
sl_status sl__read_file(const char *path, size_t max_bytes, char **out, size_t *out_len, sl__err *err);

/* ---- growable array of fixed-size elements ---- */
typedef struct sl__vec {
  void *data;
  size_t len;
  size_t cap;
  size_t elem;
} sl__vec;

void sl__vec_init(sl__vec *v, size_t elem_size);
void sl__vec_free(sl__vec *v);
/* Appends one zeroed element and returns it, or NULL when out of memory. */
void *sl__vec_push(sl__vec *v);
bool sl__vec_reserve(sl__vec *v, size_t n);
#define SL_VEC_AT(v, type, i) (((type *)(v)->data)[i])

/* ---- element transposition (host memory) ---- */
/* `rows` rows of `cols` elements of `elem` bytes at src (rows src_stride bytes apart) → `cols` rows
 * of `rows` elements at dst (rows dst_stride bytes apart): element (i, j) of src lands at
 * dst + j*dst_stride + i*elem. Cache-blocked; the regions must not overlap. */
void sl__transpose_elems(void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride, uint64_t rows,
                         uint64_t cols, uint64_t elem);

/* ---- hashing (the hash of base/hashmap.h) ---- */
uint64_t sl__hash_bytes(const void *data, size_t n);

#endif
