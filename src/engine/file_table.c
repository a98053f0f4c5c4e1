/*
 * engine/file_table.c — the checkpoint files one rank opens during one load, each once, checked at
 * open (see engine/file_table.h).
 */
#include "engine/file_table.h"

#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A file's fingerprint covers its size and its header: a safetensors file's JSON header (bounded
 * as the format bounds it), the first bytes of any other. */
#define SL_PRINT_PREFIX_BYTES 65536
#define SL_PRINT_HEADER_MAX (100u * 1024 * 1024)

uint64_t sl__file_fingerprint(int fd, uint64_t size, bool safetensors, bool *ok) {
  uint64_t len = size < SL_PRINT_PREFIX_BYTES ? size : SL_PRINT_PREFIX_BYTES;
  uint8_t head[8];
  if (safetensors && size >= 8 && pread(fd, head, 8, 0) == 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
      n = (n << 8) | head[i];
    if (n <= SL_PRINT_HEADER_MAX && n <= size - 8)
      len = 8 + n;
  }
  uint8_t *buf = malloc(len + 1);
  sl__err e;
  sl__err_clear(&e);
  *ok = buf != NULL && sl__pread_full(fd, buf, len, 0, false, "", NULL, NULL, &e) == SL_STATUS_OK;
  uint64_t h = *ok ? sl__hash_bytes(buf, len) ^ (size * 0x9e3779b97f4a7c15ULL) : 0;
  free(buf);
  return h;
}

sl_status sl__file_table_init(sl__file_table *t, const sl__catalog *cat, sl__err *err) {
  memset(t, 0, sizeof *t);
  t->n_files = cat->n_files;
  t->safetensors = cat->format != SL_FORMAT_PT && cat->format != SL_FORMAT_SHARDED_STATE;
  t->fds = malloc((t->n_files + 1) * sizeof *t->fds);
  t->stamps = calloc(t->n_files + 1, sizeof *t->stamps);
  t->prints = calloc(t->n_files + 1, sizeof *t->prints);
  if (t->fds == NULL || t->stamps == NULL || t->prints == NULL) {
    sl__file_table_free(t);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory for the table of %zu checkpoint files",
                       cat->n_files);
  }
  for (size_t f = 0; f < t->n_files; f++)
    t->fds[f] = -1;
  atomic_init(&t->opens, 0);
  return SL_STATUS_OK;
}

void sl__file_table_close(sl__file_table *t) {
  for (size_t f = 0; t->fds != NULL && f < t->n_files; f++) {
    if (t->fds[f] >= 0)
      close(t->fds[f]);
    t->fds[f] = -1;
  }
}

void sl__file_table_free(sl__file_table *t) {
  if (t == NULL)
    return;
  sl__file_table_close(t);
  free(t->fds);
  free(t->stamps);
  free(t->prints);
  memset(t, 0, sizeof *t);
}

int sl__file_table_open_path(sl__file_table *t, const char *path) {
  atomic_fetch_add(&t->opens, 1);
  return open(path, O_RDONLY | O_CLOEXEC);
}

/* A file that is not the catalog's by its times: accepted as a copy when the probe compared
 * copies of it and this one has rank 0's size and header (its stamp is then the one to keep). */
static bool copy_accepted(sl__file_table *t, const sl__catalog *cat, uint32_t f, int fd) {
  sl__file_stamp now;
  if (t->prints[f] == 0 || !sl__cat_file_stamp(fd, &now) || now.size != cat->files[f].size)
    return false;
  bool ok = false;
  uint64_t h = sl__file_fingerprint(fd, now.size, t->safetensors, &ok);
  if (!ok || h != t->prints[f])
    return false;
  SL_DEBUG("%s: a copy with rank 0's header, read as this node's", cat->files[f].path);
  t->stamps[f] = now;
  return true;
}

sl_status sl__file_table_get(sl__file_table *t, const sl__catalog *cat, uint32_t f, int *fd, sl__err *err) {
  if (t->fds[f] >= 0) { /* checked when it was opened */
    *fd = t->fds[f];
    return SL_STATUS_OK;
  }
  const char *path = cat->files[f].path;
  int d = sl__file_table_open_path(t, path);
  if (d < 0)
    return sl__err_set(err, SL_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
  bool stamped = t->stamps[f].valid;
  sl__err why;
  sl__err_clear(&why);
  sl_status st = sl__cat_file_check(cat, f, d, &t->stamps[f], &why);
  if (st != SL_STATUS_OK && !stamped && copy_accepted(t, cat, f, d))
    st = SL_STATUS_OK;
  if (st != SL_STATUS_OK) {
    close(d);
    sl__err_copy(err, &why);
    return st;
  }
  t->fds[f] = d;
  *fd = d;
  return SL_STATUS_OK;
}
