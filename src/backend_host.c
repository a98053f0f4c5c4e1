/*
 * backend_host.c — parameters in host memory; shared bytes broadcast with MPI (see backend.h).
 */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

static sl_status host_alloc(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  (void)b;
  *out = calloc(1, nbytes > 0 ? (size_t)nbytes : 1);
  if (*out == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory allocating %llu bytes", (unsigned long long)nbytes);
  return SL_STATUS_OK;
}

static void host_release(sl__backend *b, void *ptr) {
  (void)b;
  free(ptr);
}

/* Staging is page-aligned so that O_DIRECT reads can land in it. */
static sl_status host_alloc_staging(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  (void)b;
  *out = NULL;
  if (posix_memalign(out, 4096, nbytes > 0 ? (size_t)nbytes : 4096) != 0)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory allocating %llu bytes of staging",
                       (unsigned long long)nbytes);
  return SL_STATUS_OK;
}

static void copy2d(void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride, uint64_t row_bytes,
                   uint64_t rows) {
  if (rows == 1 || (dst_stride == row_bytes && src_stride == row_bytes)) {
    memcpy(dst, src, (size_t)(row_bytes * rows));
    return;
  }
  for (uint64_t i = 0; i < rows; i++)
    memcpy((char *)dst + i * dst_stride, (const char *)src + i * src_stride, (size_t)row_bytes);
}

static sl_status host_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride, const void *src,
                             uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err) {
  (void)b;
  (void)worker;
  (void)slot;
  (void)err;
  copy2d(dst, dst_stride, src, src_stride, row_bytes, rows);
  return SL_STATUS_OK;
}

static sl_status host_upload_wait(sl__backend *b, int worker, int slot, sl__err *err) {
  (void)b;
  (void)worker;
  (void)slot;
  (void)err;
  return SL_STATUS_OK;
}

static sl_status host_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride,
                           uint64_t row_bytes, uint64_t rows, sl__err *err) {
  (void)b;
  (void)err;
  copy2d(dst, dst_stride, src, src_stride, row_bytes, rows);
  return SL_STATUS_OK;
}

static sl_status host_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                            sl__err *err) {
  return sl__comm_group_bcast(b->comm, g, buf, nbytes, root, aborted, err);
}

static sl_status host_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes, sl__err *err) {
  (void)b;
  (void)err;
  memcpy(host_dst, src, (size_t)nbytes);
  return SL_STATUS_OK;
}

static sl_status host_sync(sl__backend *b, sl__err *err) {
  (void)b;
  (void)err;
  return SL_STATUS_OK;
}

static void host_destroy(sl__backend *b) { free(b); }

static const sl__backend_ops host_ops = {
    .name = "host",
    .alloc = host_alloc,
    .release = host_release,
    .alloc_staging = host_alloc_staging,
    .release_staging = host_release,
    .upload = host_upload,
    .upload_wait = host_upload_wait,
    .copy = host_copy,
    .bcast = host_bcast,
    .download = host_download,
    .sync = host_sync,
    .destroy = host_destroy,
};

sl_status sl__backend_host_create(sl__comm *comm, int workers, sl__backend **out, sl__err *err) {
  (void)workers;
  sl__backend *b = calloc(1, sizeof *b);
  if (b == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  b->ops = &host_ops;
  b->comm = comm;
  b->host_addressable = true;
  b->device = -1;
  *out = b;
  return SL_STATUS_OK;
}
