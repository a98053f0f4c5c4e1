/*
 * format/zip.c — the central directory of a torch.save zip archive (see format/zip.h and
 * docs/spec/FILES.md §8.1).
 *
 * Order of work: find the end-of-central-directory record (EOCD) at the very end of the file,
 * follow the ZIP64 locator when there is one, read the central directory in one bounded read,
 * validate each entry, then read each entry's local header to learn where its data starts (the
 * local extra field differs from the central one: torch pads it to align storages to 64 bytes).
 * Every count and length is checked against the file size before anything is allocated from it.
 */
#include "format/zip.h"

#include "base/hashmap.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define EOCD_SIG 0x06054b50u
#define EOCD_LEN 22u
#define LOC64_SIG 0x07064b50u
#define LOC64_LEN 20u
#define EOCD64_SIG 0x06064b50u
#define EOCD64_LEN 56u
#define CEN_SIG 0x02014b50u
#define CEN_LEN 46u
#define LOC_SIG 0x04034b50u
#define LOC_LEN 30u
#define MAX_COMMENT 65535u
#define ZIP64_EXTRA 0x0001u

static uint16_t le16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const uint8_t *p) {
  return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

sl_status sl__zip_mem_read(void *ctx, uint64_t off, void *dst, size_t n, sl__err *err) {
  const sl__zip_mem *m = ctx;
  if (off > m->len || n > m->len - off)
    return sl__err_set(err, SL_STATUS_IO, "%s: read of %zu bytes at offset %llu is past the end (%zu bytes)",
                       m->what, n, (unsigned long long)off, m->len);
  memcpy(dst, m->data + off, n);
  return SL_STATUS_OK;
}

void sl__zip_dir_free(sl__zip_dir *d) {
  if (d == NULL)
    return;
  free(d->entries);
  free(d->names);
  memset(d, 0, sizeof *d);
}

const sl__zip_entry *sl__zip_find(const sl__zip_dir *d, const char *name) {
  for (size_t i = 0; i < d->n; i++) {
    if (strcmp(d->entries[i].name, name) == 0)
      return &d->entries[i];
  }
  return NULL;
}

/* The directory's position, from the EOCD (and the ZIP64 records when present). */
typedef struct cd_pos {
  uint64_t n_entries;
  uint64_t off;
  uint64_t size;
  uint64_t end_limit; /* the directory must end at or before this offset */
} cd_pos;

/* The ZIP64 end record that the locator at loc_off points to. */
static sl_status read_zip64(const sl__zip_src *src, const char *what, uint64_t loc_off, cd_pos *pos,
                            sl__err *err) {
  uint8_t loc[LOC64_LEN];
  sl_status st = src->read(src->ctx, loc_off, loc, sizeof loc, err);
  if (st != SL_STATUS_OK)
    return st;
  if (le32(loc) != LOC64_SIG)
    return SL_STATUS_OK; /* no locator: the plain EOCD values stand */
  uint64_t e64 = le64(loc + 8);
  if (le32(loc + 4) != 0 || le32(loc + 16) > 1)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip archive spans several disks (not supported)", what);
  if (e64 > loc_off || loc_off - e64 < EOCD64_LEN)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: ZIP64 end record offset %llu is not before its locator at %llu", what,
                       (unsigned long long)e64, (unsigned long long)loc_off);
  uint8_t r[EOCD64_LEN];
  st = src->read(src->ctx, e64, r, sizeof r, err);
  if (st != SL_STATUS_OK)
    return st;
  if (le32(r) != EOCD64_SIG)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: no ZIP64 end record at offset %llu", what,
                       (unsigned long long)e64);
  if (le32(r + 16) != 0 || le32(r + 20) != 0 || le64(r + 24) != le64(r + 32))
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip archive spans several disks (not supported)", what);
  pos->n_entries = le64(r + 32);
  pos->size = le64(r + 40);
  pos->off = le64(r + 48);
  pos->end_limit = e64;
  return SL_STATUS_OK;
}

/* Finds the EOCD: the last record whose comment ends exactly at the end of the file. */
static sl_status find_eocd(const sl__zip_src *src, const char *what, cd_pos *pos, sl__err *err) {
  if (src->size < EOCD_LEN)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: %llu bytes is too short for a zip archive", what,
                       (unsigned long long)src->size);
  size_t tail = (size_t)(src->size < EOCD_LEN + MAX_COMMENT ? src->size : EOCD_LEN + MAX_COMMENT);
  uint8_t *buf = malloc(tail);
  if (buf == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory reading the zip directory", what);
  uint64_t base = src->size - tail;
  sl_status st = src->read(src->ctx, base, buf, tail, err);
  size_t at = SIZE_MAX;
  for (size_t i = tail - EOCD_LEN + 1; st == SL_STATUS_OK && i-- > 0;) {
    if (le32(buf + i) == EOCD_SIG && i + EOCD_LEN + le16(buf + i + 20) == tail) {
      at = i;
      break;
    }
  }
  if (st == SL_STATUS_OK && at == SIZE_MAX)
    st = sl__err_set(err, SL_STATUS_PICKLE, "%s: not a zip archive (no end of central directory record)",
                     what);
  if (st == SL_STATUS_OK) {
    const uint8_t *e = buf + at;
    if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != le16(e + 10))
      st = sl__err_set(err, SL_STATUS_PICKLE, "%s: zip archive spans several disks (not supported)", what);
    pos->n_entries = le16(e + 10);
    pos->size = le32(e + 12);
    pos->off = le32(e + 16);
    pos->end_limit = base + at;
    if (st == SL_STATUS_OK && base + at >= LOC64_LEN)
      st = read_zip64(src, what, base + at - LOC64_LEN, pos, err);
  }
  free(buf);
  return st;
}

/* The ZIP64 extra field of a central entry replaces the 32-bit values that are 0xFFFFFFFF, in
 * the order uncompressed size, compressed size, local header offset. */
static sl_status apply_zip64_extra(const uint8_t *x, size_t xlen, uint64_t *usize, uint64_t *csize,
                                   uint64_t *loff, const char *what, const char *name, sl__err *err) {
  bool need_u = *usize == UINT32_MAX, need_c = *csize == UINT32_MAX, need_o = *loff == UINT32_MAX;
  size_t i = 0;
  while (i + 4 <= xlen) {
    uint16_t id = le16(x + i), len = le16(x + i + 2);
    if (len > xlen - i - 4)
      break;
    if (id == ZIP64_EXTRA) {
      const uint8_t *f = x + i + 4;
      size_t left = len;
      uint64_t *targets[3] = {need_u ? usize : NULL, need_c ? csize : NULL, need_o ? loff : NULL};
      for (int k = 0; k < 3; k++) {
        if (targets[k] == NULL)
          continue;
        if (left < 8)
          return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' has a short ZIP64 extra field", what,
                             name);
        *targets[k] = le64(f);
        f += 8;
        left -= 8;
      }
      return SL_STATUS_OK;
    }
    i += 4 + (size_t)len;
  }
  if (need_u || need_c || need_o)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' needs a ZIP64 extra field and has none",
                       what, name);
  return SL_STATUS_OK;
}

/* An entry name: non-empty, no NUL, no control byte, no backslash, not absolute, no '..'. */
static bool name_ok(const uint8_t *p, size_t n) {
  if (n == 0 || p[0] == '/')
    return false;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < 0x20 || p[i] == '\\' || p[i] == 0x7f)
      return false;
    if (p[i] == '.' && i + 1 < n && p[i + 1] == '.' && (i == 0 || p[i - 1] == '/') &&
        (i + 2 == n || p[i + 2] == '/'))
      return false;
  }
  return true;
}

/* One central entry at cd[*at]; advances *at. The name is copied into the arena at *arena_used. */
static sl_status parse_central(const uint8_t *cd, size_t cd_len, size_t *at, const char *what, sl__zip_dir *d,
                               size_t *arena_used, sl__err *err) {
  size_t i = *at;
  size_t idx = d->n;
  if (cd_len - i < CEN_LEN || le32(cd + i) != CEN_SIG)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip central directory entry %zu is malformed", what, idx);
  const uint8_t *c = cd + i;
  uint16_t flags = le16(c + 8), method = le16(c + 10);
  size_t nlen = le16(c + 28), xlen = le16(c + 30), clen = le16(c + 32);
  if (nlen + xlen + clen > cd_len - i - CEN_LEN)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip central directory entry %zu runs past the directory",
                       what, idx);
  const uint8_t *name = c + CEN_LEN;
  if (nlen > SL_ZIP_MAX_NAME || !name_ok(name, nlen))
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry %zu has an invalid name (%zu bytes)", what, idx,
                       nlen);
  char *dst = d->names + *arena_used;
  memcpy(dst, name, nlen);
  dst[nlen] = '\0';
  *arena_used += nlen + 1;
  if (flags & 0x0001u)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' is encrypted (not supported)", what, dst);
  if (method != 0)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip entry '%s' is compressed (method %u); only stored entries are supported "
                       "(torch.save writes them uncompressed)",
                       what, dst, (unsigned)method);
  if (le16(c + 34) != 0 && le16(c + 34) != 0xFFFFu)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' starts on another disk", what, dst);
  uint64_t csize = le32(c + 20), usize = le32(c + 24), loff = le32(c + 42);
  sl_status st = apply_zip64_extra(name + nlen, xlen, &usize, &csize, &loff, what, dst, err);
  if (st != SL_STATUS_OK)
    return st;
  if (csize != usize)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: stored zip entry '%s' has compressed size %llu != uncompressed size %llu", what,
                       dst, (unsigned long long)csize, (unsigned long long)usize);
  sl__zip_entry *e = &d->entries[d->n++];
  e->name = dst;
  e->name_len = nlen;
  e->header_off = loff;
  e->size = usize;
  *at = i + CEN_LEN + nlen + xlen + clen;
  return SL_STATUS_OK;
}

/* The local header of e: same name, stored, and where the data starts. */
static sl_status read_local(const sl__zip_src *src, const char *what, sl__zip_entry *e, uint64_t limit,
                            uint8_t *scratch, sl__err *err) {
  if (e->header_off > limit || limit - e->header_off < LOC_LEN)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip entry '%s' has its local header at %llu, past the data", what, e->name,
                       (unsigned long long)e->header_off);
  uint8_t h[LOC_LEN];
  sl_status st = src->read(src->ctx, e->header_off, h, sizeof h, err);
  if (st != SL_STATUS_OK)
    return st;
  if (le32(h) != LOC_SIG)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s': no local header at offset %llu", what,
                       e->name, (unsigned long long)e->header_off);
  uint64_t nlen = le16(h + 26), xlen = le16(h + 28);
  if (le16(h + 8) != 0)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' is compressed in its local header", what,
                       e->name);
  if (nlen != e->name_len)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s': local and central names differ", what,
                       e->name);
  uint64_t data = e->header_off + LOC_LEN + nlen + xlen; /* cannot overflow: header_off ≤ limit */
  if (data > limit || e->size > limit - data)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip entry '%s' (%llu bytes at offset %llu) runs past the start of the central "
                       "directory (%llu)",
                       what, e->name, (unsigned long long)e->size, (unsigned long long)data,
                       (unsigned long long)limit);
  st = src->read(src->ctx, e->header_off + LOC_LEN, scratch, (size_t)nlen, err);
  if (st != SL_STATUS_OK)
    return st;
  if (memcmp(scratch, e->name, (size_t)nlen) != 0)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s': local and central names differ", what,
                       e->name);
  e->data_off = data;
  return SL_STATUS_OK;
}

static int cmp_header_off(const void *a, const void *b) {
  const sl__zip_entry *x = *(const sl__zip_entry *const *)a, *y = *(const sl__zip_entry *const *)b;
  return x->header_off < y->header_off ? -1 : x->header_off > y->header_off;
}

/* No two entries share bytes: in header order, each entry's data ends before the next header. */
static sl_status check_overlap(const sl__zip_dir *d, const char *what, sl__err *err) {
  if (d->n < 2)
    return SL_STATUS_OK;
  const sl__zip_entry **order = malloc(d->n * sizeof *order);
  if (order == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory checking the zip directory", what);
  for (size_t i = 0; i < d->n; i++)
    order[i] = &d->entries[i];
  qsort(order, d->n, sizeof *order, cmp_header_off);
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i + 1 < d->n; i++) {
    if (order[i]->data_off + order[i]->size > order[i + 1]->header_off) {
      st = sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entries '%s' and '%s' overlap", what, order[i]->name,
                       order[i + 1]->name);
      break;
    }
  }
  free(order);
  return st;
}

/* Every name appears once. */
static sl_status check_unique(const sl__zip_dir *d, const char *what, sl__err *err) {
  sl__hashmap names;
  sl__hashmap_init(&names, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < d->n && st == SL_STATUS_OK; i++) {
    bool oom = false;
    if (!sl__hashmap_put(&names, d->entries[i].name, d->entries[i].name_len, i, NULL, &oom))
      st = oom ? sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory checking the zip directory", what)
               : sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' appears twice", what,
                             d->entries[i].name);
  }
  sl__hashmap_free(&names);
  return st;
}

static sl_status parse_all(const sl__zip_src *src, const char *what, const cd_pos *pos, const uint8_t *cd,
                           sl__zip_dir *out, sl__err *err) {
  size_t at = 0, arena_used = 0;
  for (uint64_t k = 0; k < pos->n_entries; k++) {
    sl_status st = parse_central(cd, (size_t)pos->size, &at, what, out, &arena_used, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  if (at != pos->size)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip central directory holds %zu bytes after its %llu entries (expected none)",
                       what, (size_t)pos->size - at, (unsigned long long)pos->n_entries);
  uint8_t *scratch = malloc(65536);
  if (scratch == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory reading the zip directory", what);
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < out->n && st == SL_STATUS_OK; i++)
    st = read_local(src, what, &out->entries[i], pos->off, scratch, err);
  free(scratch);
  if (st == SL_STATUS_OK)
    st = check_unique(out, what, err);
  if (st == SL_STATUS_OK)
    st = check_overlap(out, what, err);
  return st;
}

sl_status sl__zip_read_dir(const sl__zip_src *src, const char *what, sl__zip_dir *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  cd_pos pos;
  memset(&pos, 0, sizeof pos);
  sl_status st = find_eocd(src, what, &pos, err);
  if (st != SL_STATUS_OK)
    return st;
  if (pos.off > pos.end_limit || pos.size > pos.end_limit - pos.off)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip central directory (%llu bytes at offset %llu) lies outside the file", what,
                       (unsigned long long)pos.size, (unsigned long long)pos.off);
  if (pos.size > SL_ZIP_MAX_CD)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip central directory of %llu bytes exceeds the limit of %llu", what,
                       (unsigned long long)pos.size, (unsigned long long)SL_ZIP_MAX_CD);
  if (pos.n_entries > SL_ZIP_MAX_ENTRIES || pos.n_entries > pos.size / CEN_LEN)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s: zip directory claims %llu entries in %llu bytes (at most %u, 46 bytes each)",
                       what, (unsigned long long)pos.n_entries, (unsigned long long)pos.size,
                       SL_ZIP_MAX_ENTRIES);
  uint8_t *cd = malloc(pos.size != 0 ? (size_t)pos.size : 1);
  out->entries = calloc(pos.n_entries != 0 ? (size_t)pos.n_entries : 1, sizeof *out->entries);
  /* The names fit in the directory's bytes, one NUL each. */
  out->names = malloc((size_t)pos.size + (size_t)pos.n_entries + 1);
  if (cd == NULL || out->entries == NULL || out->names == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory reading the zip directory", what);
  } else {
    st = src->read(src->ctx, pos.off, cd, (size_t)pos.size, err);
    if (st == SL_STATUS_OK)
      st = parse_all(src, what, &pos, cd, out, err);
  }
  free(cd);
  if (st != SL_STATUS_OK)
    sl__zip_dir_free(out);
  return st;
}
