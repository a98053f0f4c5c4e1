/*
 * backend/host.c — parameters in host memory; shared bytes broadcast with MPI (see backend/backend.h).
 */
#include "backend/backend.h"

#include "base/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Large parameters are anonymous mappings advised to use transparent huge pages: the kernel
 * zero-fills them lazily and 2 MiB pages make the first touch (the read landing in them) far
 * cheaper than one fault per 4 KiB. Their sizes are remembered for munmap. */
#define BIG_ALLOC (4u << 20)

typedef struct mapping {
  void *ptr;
  size_t len;
} mapping;

typedef struct host_state {
  pthread_mutex_t mu; /* guards maps: reader threads and a DLPack deleter allocate and release at once */
  mapping *maps;
  size_t n_maps, cap_maps;
} host_state;

static sl_status host_alloc(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  host_state *h = b->impl;
  *out = NULL;
  if (nbytes >= BIG_ALLOC && nbytes <= SIZE_MAX / 2) {
    void *p = mmap(NULL, (size_t)nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
      madvise(p, (size_t)nbytes, MADV_HUGEPAGE);
#endif
      pthread_mutex_lock(&h->mu);
      if (h->n_maps == h->cap_maps) {
        size_t cap = h->cap_maps != 0 ? h->cap_maps * 2 : 64;
        mapping *m = realloc(h->maps, cap * sizeof *m);
        if (m != NULL) {
          h->maps = m;
          h->cap_maps = cap;
        }
      }
      bool kept = h->n_maps < h->cap_maps;
      if (kept)
        h->maps[h->n_maps++] = (mapping){.ptr = p, .len = (size_t)nbytes};
      pthread_mutex_unlock(&h->mu);
      if (kept) {
        *out = p;
        return SL_STATUS_OK;
      }
      munmap(p, (size_t)nbytes);
    }
  }
  *out = calloc(1, nbytes > 0 ? (size_t)nbytes : 1);
  if (*out == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory allocating %llu bytes",
                       (unsigned long long)nbytes);
  return SL_STATUS_OK;
}

static void host_release(sl__backend *b, void *ptr) {
  host_state *h = b->impl;
  if (ptr == NULL)
    return;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < h->n_maps; i++) {
    if (h->maps[i].ptr == ptr) {
      size_t len = h->maps[i].len;
      h->maps[i] = h->maps[--h->n_maps];
      pthread_mutex_unlock(&h->mu);
      munmap(ptr, len);
      return;
    }
  }
  pthread_mutex_unlock(&h->mu);
  free(ptr);
}

static void host_release_staging(sl__backend *b, void *ptr) {
  host_release(b, ptr);
}

/* Staging is page-aligned so that O_DIRECT reads can land in it. Large slots are mappings with
 * huge pages like large parameters: every load touches its staging for the first time. */
static sl_status host_alloc_staging(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  *out = NULL;
  if (nbytes >= BIG_ALLOC) {
    sl_status st = host_alloc(b, nbytes, out, err);
    if (st != SL_STATUS_OK || ((uintptr_t)*out % 4096u) == 0)
      return st;
    host_release(b, *out); /* the unaligned fallback: use posix_memalign below */
    *out = NULL;
  }
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

static sl_status host_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                             const void *src, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                             sl__err *err) {
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

static sl_status host_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src,
                           uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err) {
  (void)b;
  (void)err;
  copy2d(dst, dst_stride, src, src_stride, row_bytes, rows);
  return SL_STATUS_OK;
}

static sl_status host_transpose(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                                const void *src, uint64_t src_stride, uint64_t rows, uint64_t cols,
                                uint64_t elem, sl__err *err) {
  (void)b;
  (void)worker;
  (void)slot;
  (void)err;
  sl__transpose_elems(dst, dst_stride, src, src_stride, rows, cols, elem);
  return SL_STATUS_OK;
}

static sl_status host_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                            sl__err *err) {
  return sl__comm_group_bcast(b->comm, g, buf, nbytes, root, aborted, err);
}

static sl_status host_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes,
                               sl__err *err) {
  (void)b;
  (void)err;
  memcpy(host_dst, src, (size_t)nbytes);
  return SL_STATUS_OK;
}

static sl_status host_zero(sl__backend *b, void *ptr, uint64_t nbytes, sl__err *err) {
  (void)b;
  (void)err;
  memset(ptr, 0, (size_t)nbytes);
  return SL_STATUS_OK;
}

static sl_status host_sync(sl__backend *b, sl__err *err) {
  (void)b;
  (void)err;
  return SL_STATUS_OK;
}

static void host_destroy(sl__backend *b) {
  host_state *h = b->impl;
  for (size_t i = 0; i < h->n_maps; i++)
    munmap(h->maps[i].ptr, h->maps[i].len);
  free(h->maps);
  pthread_mutex_destroy(&h->mu);
  free(h);
  free(b);
}

static const sl__backend_ops host_ops = {
    .name = "host",
    .alloc = host_alloc,
    .release = host_release,
    .alloc_staging = host_alloc_staging,
    .release_staging = host_release_staging,
    .upload = host_upload,
    .upload_wait = host_upload_wait,
    .copy = host_copy,
    .transpose = host_transpose,
    .bcast = host_bcast,
    .download = host_download,
    .sync = host_sync,
    .zero = host_zero,
    .destroy = host_destroy,
};

sl_status sl__backend_host_create(sl__comm *comm, int workers, sl__backend **out, sl__err *err) {
  (void)workers;
  sl__backend *b = calloc(1, sizeof *b);
  host_state *h = calloc(1, sizeof *h);
  if (b == NULL || h == NULL) {
    free(b);
    free(h);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  pthread_mutex_init(&h->mu, NULL);
  b->impl = h;
  b->ops = &host_ops;
  b->comm = comm;
  b->host_addressable = true;
  b->device = -1;
  *out = b;
  return SL_STATUS_OK;
}
