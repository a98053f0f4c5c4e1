/*
 * format/torch_ckpt.c — a torch.save zip checkpoint as a table of tensors with absolute byte
 * ranges (see format/torch_ckpt.h, docs/spec/FILES.md §8).
 *
 * The archive's entries all live under one folder, `<archive>/`: `data.pkl` (the state dict),
 * `data/<key>` (one per storage, raw little-endian elements), `version`, and since torch 2.x
 * `byteorder` and `.data/…`. Only data.pkl and the storages that tensors use are read; a storage
 * entry must hold exactly numel × element-size bytes.
 */
#include "format/torch_ckpt.h"

#include "base/util.h"
#include "format/pickle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARCHIVE_NAME_MAX 1024 /* longest "<archive>/" prefix */

bool sl__pt_is_pickle_name(const char *n) {
  return sl__str_ends_with(n, ".bin") || sl__str_ends_with(n, ".pt") || sl__str_ends_with(n, ".pth");
}

/* The legacy formats (torch < 1.6: a bare pickle, or a tar) are recognised to say so clearly. */
static sl_status check_not_legacy(const sl__zip_src *src, const char *what, sl__err *err) {
  uint8_t head[262];
  size_t n = src->size < sizeof head ? (size_t)src->size : sizeof head;
  sl_status st = src->read(src->ctx, 0, head, n, err);
  if (st != SL_STATUS_OK)
    return st;
  bool pickle = n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
  bool tar = n >= 262 && memcmp(head + 257, "ustar", 5) == 0;
  if (pickle || tar)
    return sl__err_set(err, SL_STATUS_PICKLE,
                       "%s is in the legacy (pre-1.6) torch.save %s format, which is not supported; re-save "
                       "it with torch.save from torch 1.6 or later (the zip format) or convert it to "
                       "safetensors",
                       what, tar ? "tar" : "pickle");
  return SL_STATUS_OK;
}

/* The "<archive>/" prefix every entry shares (torch's reader takes the first entry's). */
static sl_status archive_prefix(const sl__zip_dir *d, const char *what, char *prefix, sl__err *err) {
  if (d->n == 0)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: the zip archive is empty (no data.pkl)", what);
  const char *slash = strchr(d->entries[0].name, '/');
  size_t n = slash != NULL ? (size_t)(slash - d->entries[0].name) + 1 : 0;
  if (n < 2 || n >= ARCHIVE_NAME_MAX)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' is not inside an archive folder", what,
                       d->entries[0].name);
  memcpy(prefix, d->entries[0].name, n);
  prefix[n] = '\0';
  for (size_t i = 1; i < d->n; i++) {
    if (strncmp(d->entries[i].name, prefix, n) != 0)
      return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' is outside the archive folder '%s'", what,
                         d->entries[i].name, prefix);
  }
  return SL_STATUS_OK;
}

/* Reads a whole entry (at most max bytes) into a malloc'd buffer. */
static sl_status read_entry(const sl__zip_src *src, const sl__zip_entry *e, size_t max, const char *what,
                            uint8_t **out, sl__err *err) {
  *out = NULL;
  if (e->size > max)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: zip entry '%s' is %llu bytes, more than the limit of %zu",
                       what, e->name, (unsigned long long)e->size, max);
  *out = malloc(e->size != 0 ? (size_t)e->size : 1);
  if (*out == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory reading '%s'", what, e->name);
  sl_status st = src->read(src->ctx, e->data_off, *out, (size_t)e->size, err);
  if (st != SL_STATUS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* torch ≥ 2.1 records the byte order; storages are raw elements in it. */
static sl_status check_byteorder(const sl__zip_src *src, const sl__zip_dir *d, const char *prefix,
                                 const char *what, sl__err *err) {
  char name[ARCHIVE_NAME_MAX + 16];
  snprintf(name, sizeof name, "%sbyteorder", prefix);
  const sl__zip_entry *e = sl__zip_find(d, name);
  if (e == NULL)
    return SL_STATUS_OK;
  uint8_t *b = NULL;
  sl_status st = read_entry(src, e, 16, what, &b, err);
  if (st != SL_STATUS_OK)
    return st;
  if (e->size != 6 || memcmp(b, "little", 6) != 0)
    st = sl__err_set(err, SL_STATUS_PICKLE,
                     "%s: '%s' says the storages are not little-endian (not supported)", what, name);
  free(b);
  return st;
}

static int cmp_tensor(const void *a, const void *b) {
  const sl__st_tensor *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The pickle's table → the header: storage entries found and sized, offsets made absolute. */
static sl_status to_header(const sl__zip_dir *d, const char *prefix, const sl__pk_state *pk, const char *what,
                           sl__st_header *out, sl__err *err) {
  size_t arena = 1;
  for (size_t i = 0; i < pk->n; i++)
    arena += pk->tensors[i].name_len + 1;
  out->tensors = calloc(pk->n + 1, sizeof *out->tensors);
  out->strings = malloc(arena);
  if (out->tensors == NULL || out->strings == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory listing %zu tensors", what, pk->n);
  size_t used = 0;
  char name[ARCHIVE_NAME_MAX + 80];
  for (size_t i = 0; i < pk->n; i++) {
    const sl__pk_tensor *t = &pk->tensors[i];
    snprintf(name, sizeof name, "%sdata/%s", prefix, t->storage_key);
    const sl__zip_entry *e = sl__zip_find(d, name);
    if (e == NULL)
      return sl__err_set(err, SL_STATUS_PICKLE, "%s: tensor '%s' uses storage '%s', which has no entry '%s'",
                         what, t->name, t->storage_key, name);
    if (e->size != t->storage_bytes)
      return sl__err_set(err, SL_STATUS_PICKLE,
                         "%s: tensor '%s': storage entry '%s' holds %llu bytes, the pickle says %llu", what,
                         t->name, name, (unsigned long long)e->size, (unsigned long long)t->storage_bytes);
    sl__st_tensor *s = &out->tensors[out->n_tensors++];
    memcpy(out->strings + used, t->name, t->name_len + 1);
    s->name = out->strings + used;
    s->name_len = t->name_len;
    used += t->name_len + 1;
    s->dtype = t->dtype;
    s->ndim = t->ndim;
    memcpy(s->shape, t->shape, sizeof(uint64_t) * t->ndim);
    s->begin = e->data_off + t->begin; /* end ≤ storage_bytes == e->size: inside the file */
    s->end = e->data_off + t->end;
  }
  if (out->n_tensors > 1)
    qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_tensor);
  return SL_STATUS_OK;
}

sl_status sl__pt_parse(const sl__zip_src *src, const char *what, sl__st_header *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->file_size = src->size;
  sl_status st = check_not_legacy(src, what, err);
  if (st != SL_STATUS_OK)
    return st;
  sl__zip_dir d;
  st = sl__zip_read_dir(src, what, &d, err);
  if (st != SL_STATUS_OK)
    return st;
  char prefix[ARCHIVE_NAME_MAX];
  uint8_t *pkl = NULL;
  sl__pk_state pk;
  memset(&pk, 0, sizeof pk);
  st = archive_prefix(&d, what, prefix, err);
  if (st == SL_STATUS_OK)
    st = check_byteorder(src, &d, prefix, what, err);
  if (st == SL_STATUS_OK) {
    char name[ARCHIVE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%sdata.pkl", prefix);
    const sl__zip_entry *e = sl__zip_find(&d, name);
    if (e == NULL)
      st = sl__err_set(err, SL_STATUS_PICKLE, "%s: the zip archive has no '%s' (not a torch.save file)", what,
                       name);
    else
      st = read_entry(src, e, SL_PK_MAX_BYTES, what, &pkl, err);
    if (st == SL_STATUS_OK) {
      char label[1200];
      snprintf(label, sizeof label, "%s: %s", what, name);
      st = sl__pickle_state_dict(pkl, (size_t)e->size, label, &pk, err);
    }
  }
  if (st == SL_STATUS_OK)
    st = to_header(&d, prefix, &pk, what, out, err);
  free(pkl);
  sl__pk_state_free(&pk);
  sl__zip_dir_free(&d);
  if (st != SL_STATUS_OK)
    sl__st_header_free(out);
  return st;
}

typedef struct fd_src {
  int fd;
  const char *path;
} fd_src;

static sl_status fd_read(void *ctx, uint64_t off, void *dst, size_t n, sl__err *err) {
  const fd_src *f = ctx;
  return sl__pread_full(f->fd, dst, n, off, false, f->path, NULL, NULL, err);
}

sl_status sl__pt_read_file(const char *path, sl__st_header *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl__err_set(err, SL_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  sl_status st = SL_STATUS_OK;
  if (fstat(fd, &sb) != 0) {
    st = sl__err_set(err, SL_STATUS_IO, "cannot stat %s: %s", path, strerror(errno));
  } else {
    fd_src f = {.fd = fd, .path = path};
    sl__zip_src src = {.read = fd_read, .ctx = &f, .size = (uint64_t)sb.st_size};
    st = sl__pt_parse(&src, path, out, err);
  }
  close(fd);
  return st;
}

sl_status sl__weights_read_file(const char *path, sl__st_header *out, sl__err *err) {
  const char *slash = strrchr(path, '/');
  if (sl__pt_is_pickle_name(slash != NULL ? slash + 1 : path))
    return sl__pt_read_file(path, out, err);
  return sl__st_read_file(path, out, err);
}
