/*
 * format/safetensors.c — the strict safetensors reader (docs/spec/SAFETENSORS.md §1–§5).
 *
 * Organisation, in the order of the checks of docs/spec/SAFETENSORS.md §4:
 *   check_length    checks 1–3 on the 8-byte length field (shared with sl__st_read_file, which runs
 *                   them before allocating anything);
 *   sl__st_utf8_check  check 4 over all N header bytes, padding included (format/safetensors_json.c);
 *   scan_*          check 5: one pass over (ptr, len) for the fixed schema — top object, tensor
 *                   objects, the __metadata__ map — on the JSON tokens of format/safetensors_json.c,
 *                   whose validating skipper handles ignored values. This is deliberately not cJSON
 *                   (see docs/spec/SAFETENSORS.md §5.1);
 *   check_offsets   checks 6a–6e over the table sorted by (begin, end, name bytes), then check 7.
 * Decoded strings live in one arena (see format/safetensors_json.h). Byte positions in messages
 * are file offsets.
 */
#include "format/safetensors.h"

#include "base/util.h"
#include "format/safetensors_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- step 5: the schema ---- */

/* An integer of shape or data_offsets: 0|[1-9][0-9]* into a u64. */
static sl_status scan_u64(sl__st_scan *s, const sl__st_str *tname, const char *field, uint64_t *out) {
  sl__st_scan_ws(s);
  if (s->pos >= s->n || !sl__st_is_digit(s->p[s->pos]))
    return sl__st_scan_fail(s, "tensor '%.*s': %s must hold unsigned integers", sl__st_shown(tname->len),
                            tname->s, field);
  uint64_t v = 0;
  if (s->p[s->pos] == '0') {
    s->pos++;
  } else {
    while (s->pos < s->n && sl__st_is_digit(s->p[s->pos])) {
      uint64_t d = (uint64_t)(s->p[s->pos] - '0');
      if (sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, d, &v))
        return sl__st_scan_fail(s, "tensor '%.*s': integer in %s exceeds 2^64-1", sl__st_shown(tname->len),
                                tname->s, field);
      s->pos++;
    }
  }
  if (s->pos < s->n &&
      (sl__st_is_digit(s->p[s->pos]) || s->p[s->pos] == '.' || s->p[s->pos] == 'e' || s->p[s->pos] == 'E'))
    return sl__st_scan_fail(s, "tensor '%.*s': %s must hold plain unsigned integers (0 or [1-9][0-9]*)",
                            sl__st_shown(tname->len), tname->s, field);
  *out = v;
  return SL_STATUS_OK;
}

/* [u64, ...] with at most max elements; *count receives the number read. */
static sl_status scan_u64_array(sl__st_scan *s, const sl__st_str *tname, const char *field, uint64_t *vals,
                                uint32_t max, uint32_t *count) {
  *count = 0;
  sl__st_scan_ws(s);
  if (!sl__st_scan_at(s, '['))
    return sl__st_scan_fail(s, "tensor '%.*s': %s must be an array of unsigned integers",
                            sl__st_shown(tname->len), tname->s, field);
  s->pos++;
  sl__st_scan_ws(s);
  if (sl__st_scan_at(s, ']')) {
    s->pos++;
    return SL_STATUS_OK;
  }
  bool more = true;
  while (more) {
    if (*count == max)
      return sl__st_scan_fail(s, "tensor '%.*s': %s has more than %u elements", sl__st_shown(tname->len),
                              tname->s, field, max);
    sl_status st = scan_u64(s, tname, field, &vals[*count]);
    if (st != SL_STATUS_OK)
      return st;
    (*count)++;
    st = sl__st_scan_next(s, ']', field, &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* The value of the member "name": {"dtype": …, "shape": […], "data_offsets": [b, e], …}. */
static sl_status scan_tensor(sl__st_scan *s, sl__st_str *name) {
  if (memchr(name->s, '\0', name->len) != NULL)
    return sl__st_scan_fail(s, "tensor name contains U+0000 (names must be C strings)");
  bool oom = false;
  uint32_t index = (uint32_t)s->tensors.len;
  if (!sl__hashmap_put(&s->names, name->s, name->len, index, NULL, &oom)) {
    if (oom)
      return sl__st_scan_nomem(s);
    return sl__st_scan_fail(s, "duplicate tensor name '%.*s'", sl__st_shown(name->len), name->s);
  }
  sl__st_scan_commit(s, name);
  sl__st_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name->s;
  t.name_len = name->len;
  enum { F_DTYPE, F_SHAPE, F_OFFSETS, F_OTHER };
  static const char *const field_names[] = {"dtype", "shape", "data_offsets"};
  bool have[F_OTHER] = {false, false, false};
  sl__st_scan_ws(s);
  if (!sl__st_scan_at(s, '{'))
    return sl__st_scan_fail(s, "tensor '%.*s': expected an object {\"dtype\", \"shape\", \"data_offsets\"}",
                            sl__st_shown(name->len), name->s);
  s->pos++;
  sl__st_scan_ws(s);
  bool more = !sl__st_scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    sl__st_str field;
    sl_status st = sl__st_scan_string(s, &field);
    if (st == SL_STATUS_OK)
      st = sl__st_scan_expect(s, ':', "after a field name");
    if (st != SL_STATUS_OK)
      return st;
    int f = F_DTYPE;
    while (f < F_OTHER && !sl__st_str_is(&field, field_names[f]))
      f++;
    if (f != F_OTHER && have[f])
      return sl__st_scan_fail(s, "tensor '%.*s': field \"%s\" given twice", sl__st_shown(name->len), name->s,
                              field_names[f]);
    if (f != F_OTHER)
      have[f] = true;
    if (f == F_DTYPE) {
      sl__st_str dt;
      sl__st_scan_ws(s);
      if (!sl__st_scan_at(s, '"'))
        return sl__st_scan_fail(s, "tensor '%.*s': dtype must be a string", sl__st_shown(name->len), name->s);
      st = sl__st_scan_string(s, &dt);
      if (st == SL_STATUS_OK && !sl__dtype_parse(dt.s, dt.len, &t.dtype))
        return sl__st_scan_fail(s, "tensor '%.*s': unknown dtype '%.*s'", sl__st_shown(name->len), name->s,
                                sl__st_shown(dt.len), dt.s);
    } else if (f == F_SHAPE) {
      st = scan_u64_array(s, name, "shape", t.shape, SL_ST_MAX_DIMS, &t.ndim);
    } else if (f == F_OFFSETS) {
      uint64_t off[2] = {0, 0};
      uint32_t count = 0;
      st = scan_u64_array(s, name, "data_offsets", off, 2, &count);
      if (st == SL_STATUS_OK && count != 2)
        return sl__st_scan_fail(s, "tensor '%.*s': data_offsets must have exactly 2 elements, has %u",
                                sl__st_shown(name->len), name->s, count);
      t.begin = off[0];
      t.end = off[1];
    } else {
      st = sl__st_scan_skip(s, 3);
    }
    if (st == SL_STATUS_OK)
      st = sl__st_scan_next(s, '}', "in a tensor object", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  for (int f = F_DTYPE; f < F_OTHER; f++) {
    if (!have[f])
      return sl__st_scan_fail(s, "tensor '%.*s': field \"%s\" is missing", sl__st_shown(name->len), name->s,
                              field_names[f]);
  }
  sl__st_tensor *slot = sl__vec_push(&s->tensors);
  if (slot == NULL)
    return sl__st_scan_nomem(s);
  *slot = t;
  return SL_STATUS_OK;
}

/* The value of "__metadata__": null or an object of strings. Keys and values are C strings: a
 * U+0000 inside ends them (the reference accepts it; shardload never needs such metadata). */
static sl_status scan_metadata(sl__st_scan *s) {
  if (s->have_meta)
    return sl__st_scan_fail(s, "__metadata__ given twice");
  s->have_meta = true;
  sl__st_scan_ws(s);
  if (sl__st_scan_at(s, 'n'))
    return sl__st_scan_literal(s, "null");
  if (!sl__st_scan_at(s, '{'))
    return sl__st_scan_fail(s, "__metadata__ must be an object of strings or null");
  s->pos++;
  sl__st_scan_ws(s);
  bool more = !sl__st_scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    sl__st_str key;
    sl_status st = sl__st_scan_string(s, &key);
    if (st != SL_STATUS_OK)
      return st;
    size_t key_len = strlen(key.s);
    uint32_t index = (uint32_t)s->meta.len;
    uint64_t existing = 0;
    bool oom = false;
    if (sl__hashmap_put(&s->keys, key.s, key_len, index, &existing, &oom)) {
      sl__st_scan_commit(s, &key);
      sl__st_meta *slot = sl__vec_push(&s->meta);
      if (slot == NULL)
        return sl__st_scan_nomem(s);
      slot->key = key.s;
    } else if (oom) {
      return sl__st_scan_nomem(s);
    } else {
      index = (uint32_t)existing;
    }
    st = sl__st_scan_expect(s, ':', "after a metadata key");
    if (st != SL_STATUS_OK)
      return st;
    sl__st_scan_ws(s);
    if (!sl__st_scan_at(s, '"'))
      return sl__st_scan_fail(s, "__metadata__ value of key '%.*s' must be a string", sl__st_shown(key_len),
                              SL_VEC_AT(&s->meta, sl__st_meta, index).key);
    sl__st_str value;
    st = sl__st_scan_string(s, &value);
    if (st != SL_STATUS_OK)
      return st;
    sl__st_scan_commit(s, &value);
    SL_VEC_AT(&s->meta, sl__st_meta, index).value = value.s;
    st = sl__st_scan_next(s, '}', "in __metadata__", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

static sl_status scan_header(sl__st_scan *s) {
  sl__st_scan_ws(s);
  if (s->pos >= s->n)
    return sl__st_scan_fail(s, "empty header (expected a JSON object)");
  if (!sl__st_scan_at(s, '{'))
    return sl__st_scan_fail(s, "the header must be a JSON object, found byte 0x%02x", s->p[s->pos]);
  s->pos++;
  sl__st_scan_ws(s);
  bool more = !sl__st_scan_at(s, '}');
  if (!more)
    s->pos++;
  while (more) {
    sl__st_str key;
    sl_status st = sl__st_scan_string(s, &key);
    if (st == SL_STATUS_OK)
      st = sl__st_scan_expect(s, ':', "after a tensor name");
    if (st == SL_STATUS_OK && sl__st_str_is(&key, "__metadata__"))
      st = scan_metadata(s);
    else if (st == SL_STATUS_OK)
      st = scan_tensor(s, &key);
    if (st == SL_STATUS_OK)
      st = sl__st_scan_next(s, '}', "in the header object", &more);
    if (st != SL_STATUS_OK)
      return st;
  }
  sl__st_scan_ws(s);
  if (s->pos < s->n)
    return sl__st_scan_fail(
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

/* The 8 bytes that should have been a length, as text ("{\n  \"arc"): what the file starts with
 * tells the reader more than the number they make. */
static void shown_bytes(const uint8_t *p, char *out, size_t cap) {
  size_t o = 0;
  for (int i = 0; i < 8 && o + 5 < cap; i++) {
    uint8_t c = p[i];
    if (c == '\n' || c == '"' || c == '\\')
      o += (size_t)snprintf(out + o, cap - o, "\\%c", c == '\n' ? 'n' : (char)c);
    else if (c >= 0x20 && c < 0x7f)
      out[o++] = (char)c;
    else
      o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
  }
  out[o] = '\0';
}

/* Checks 1–3 from the first min(file_size, 8) bytes; *n receives N. Nothing else of the file is
 * believed before N fits both the limit and the file: a length beyond either is said to be what it
 * most likely is, a file of another kind (a config.json, a pickle), with the bytes it starts with. */
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
  char head[48];
  shown_bytes(prefix, head, sizeof head);
  if (too_large && *n > file_size - 8)
    return sl__err_set(
        err, SL_STATUS_ST_HEADER_TOO_LARGE,
        "%s: not a safetensors file: it starts with \"%s\", not with an 8-byte header length (read "
        "as one: %llu, above the limit %llu and the file's %llu bytes)",
        what, head, (unsigned long long)*n, (unsigned long long)SL_ST_MAX_HEADER,
        (unsigned long long)file_size);
  if (too_large)
    return sl__err_set(err, SL_STATUS_ST_HEADER_TOO_LARGE, "%s: header length %llu exceeds %llu", what,
                       (unsigned long long)*n, (unsigned long long)SL_ST_MAX_HEADER);
  if (*n > file_size - 8)
    return sl__err_set(
        err, SL_STATUS_ST_HEADER_LENGTH,
        "%s: header length %llu exceeds file size %llu (a truncated file, or not a safetensors "
        "file: it starts with \"%s\")",
        what, (unsigned long long)*n, (unsigned long long)file_size, head);
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
    /* Decoded names may hold control characters or be long: quoted for the message. */
    char q[SL_QUOTE_BUF];
    const char *qn = sl__quote(t[i].name, q, sizeof q);
    if (t[i].begin != pos || t[i].end < t[i].begin)
      return sl__err_set(
          err, SL_STATUS_ST_INVALID_OFFSET,
          "%s: invalid data offsets [%llu, %llu] for tensor '%s' (expected it to start at %llu)", what,
          (unsigned long long)t[i].begin, (unsigned long long)t[i].end, qn, (unsigned long long)pos);
    pos = t[i].end;
    uint64_t nbytes = 0;
    sl_status st = sl__st_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &nbytes);
    if (st == SL_STATUS_ST_OVERFLOW)
      return sl__err_set(err, st, "%s: size of tensor '%s' overflows", what, qn);
    if (st == SL_STATUS_ST_MISALIGNED)
      return sl__err_set(err, st, "%s: tensor '%s' (%s) does not end on a byte boundary", what, qn,
                         sl__dtype_name(t[i].dtype));
    if (t[i].end - t[i].begin != nbytes)
      return sl__err_set(err, SL_STATUS_ST_TENSOR_INFO,
                         "%s: tensor '%s': shape and dtype need %llu bytes, offsets give %llu", what, qn,
                         (unsigned long long)nbytes, (unsigned long long)(t[i].end - t[i].begin));
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

  sl__st_scan s;
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
