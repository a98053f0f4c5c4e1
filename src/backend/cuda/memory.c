/*
 * backend/cuda/memory.c — the CUDA backend's operations on memory (see backend/backend.h): device
 * parameter and bucket memory (zero-filled; the parameters carved from one reserved block),
 * zeroing in place, pinned staging, host-to-device uploads on the reader
 * threads' streams with one event per staging slot, device-to-device 2-D copies on the main
 * stream, synchronous downloads, the wait for the main stream between buckets, and the final sync.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* Device memory of its own, zero-filled: one cudaMalloc, one memset waited for. */
static sl_status alloc_block(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  cuda_state *st = state_of(b);
  *out = NULL;
  size_t n = nbytes > 0 ? (size_t)nbytes : 1;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  void *p = NULL;
  cudaError_t e = sl__cu.cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (sl__cu.cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
      (void)sl__cu.cudaGetLastError();
    return sl__err_set(
        err, SL_STATUS_CUDA,
        "cudaMalloc of %llu bytes on CUDA device %d failed: %s (%s); %llu of %llu bytes free on the "
        "device",
        (unsigned long long)nbytes, st->device, sl__cu.cudaGetErrorString(e), sl__cu.cudaGetErrorName(e),
        (unsigned long long)free_bytes, (unsigned long long)total_bytes);
  }
  /* Zero rows of a padded vocabulary rely on zero-filled memory. The fill must be complete before
   * any upload on a reader stream (which is not ordered with the main stream) can touch it. */
  e = sl__cu.cudaMemsetAsync(p, 0, n, st->main);
  sl_status s = e == cudaSuccess ? SL_STATUS_OK
                                 : sl__cuda_fail(err, e, st->device, "cudaMemsetAsync", __FILE__, __LINE__);
  if (s == SL_STATUS_OK)
    s = sl__cuda_wait_local(b, NULL, st->main, "zero-filling new device memory", err);
  if (s != SL_STATUS_OK) {
    (void)sl__cu.cudaFree(p);
    return s;
  }
  *out = p;
  return SL_STATUS_OK;
}

sl_status sl__cuda_alloc(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  cuda_state *st = state_of(b);
  uint64_t room = sl__arena_room(nbytes);
  if (st->arena != NULL && room <= st->arena_size - st->arena_used) {
    *out = st->arena + st->arena_used; /* zeroed when the block was reserved, never used since */
    st->arena_used += room;
    st->arena_live++;
    return SL_STATUS_OK;
  }
  return alloc_block(b, nbytes, out, err);
}

/* One cudaMalloc and one memset for every parameter instead of one each: allocation is a
 * synchronising driver call, and the memset waited for per tensor serialised thousands of them. */
sl_status sl__cuda_reserve(sl__backend *b, uint64_t nbytes, sl__err *err) {
  cuda_state *st = state_of(b);
  if (st->arena != NULL || nbytes == 0)
    return SL_STATUS_OK; /* one block per backend: later allocations are separate */
  void *p = NULL;
  sl_status res = alloc_block(b, nbytes, &p, err);
  if (res != SL_STATUS_OK)
    return res;
  st->arena = p;
  st->arena_size = nbytes;
  st->arena_used = 0;
  st->arena_live = 0;
  return SL_STATUS_OK;
}

sl_status sl__cuda_zero(sl__backend *b, void *ptr, uint64_t nbytes, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  sl_status res = sl__cuda_after_caller(st, st->workers, err);
  if (res != SL_STATUS_OK)
    return res;
  CUDA_CHECK(err, st->device, sl__cu.cudaMemsetAsync(ptr, 0, (size_t)nbytes, st->main));
  return SL_STATUS_OK;
}

void sl__cuda_release(sl__backend *b, void *ptr) {
  cuda_state *st = state_of(b);
  if (ptr == NULL)
    return;
  if (st->arena != NULL && (char *)ptr >= st->arena && (char *)ptr < st->arena + st->arena_size) {
    if (st->arena_live > 0 && --st->arena_live > 0)
      return; /* the block goes with its last parameter */
    ptr = st->arena;
    st->arena = NULL;
  }
  (void)sl__cu.cudaSetDevice(st->device);
  /* cudaFree waits for the device: a hung one would hold the caller here, so the watchdog's
   * backstop bounds it (only where the loader's communicator still exists). */
  if (b->comm != NULL)
    sl__comm_block_begin(b->comm, "cudaFree");
  cudaError_t e = sl__cu.cudaFree(ptr);
  if (b->comm != NULL)
    sl__comm_block_end(b->comm);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    SL_WARN("cudaFree on CUDA device %d: %s", st->device, sl__cu.cudaGetErrorString(e));
  }
}

uint32_t sl__cuda_bucket_slots_op(sl__backend *b, uint64_t slot_bytes) {
  cuda_state *st = state_of(b);
  size_t free_b = 0;
  size_t total = 0;
  if (sl__cu.cudaSetDevice(st->device) != cudaSuccess ||
      sl__cu.cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    free_b = 0;
  }
  uint32_t n = sl__cuda_bucket_slots((uint64_t)free_b, slot_bytes);
  SL_INFO("bucket slots: %u of %.2f MiB (%.1f MiB of device memory free)", n, (double)slot_bytes / 1048576.0,
          (double)free_b / 1048576.0);
  return n;
}

/* Where a byte is: its memory type and device (cudaMemoryTypeUnregistered for pageable host memory). */
static void where(const void *p, struct cudaPointerAttributes *a) {
  memset(a, 0, sizeof *a);
  if (sl__cu.cudaPointerGetAttributes(a, p) != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    a->type = cudaMemoryTypeUnregistered;
  }
}

static const char *memory_kind(enum cudaMemoryType t) {
  switch (t) {
  case cudaMemoryTypeHost:
    return "pinned host memory";
  case cudaMemoryTypeManaged:
    return "managed memory";
  case cudaMemoryTypeDevice:
    return "device memory";
  default:
    return "host memory";
  }
}

/* The first and the last byte of a bound buffer: device (or managed) memory of this rank's device.
 * Another GPU's memory would be written through peer access or fault; host memory would be written
 * by device copies at a fraction of the speed, or fault where it is not registered. */
sl_status sl__cuda_check_bound(sl__backend *b, const char *name, const void *ptr, uint64_t nbytes,
                               sl__err *err) {
  cuda_state *st = state_of(b);
  if (nbytes == 0)
    return SL_STATUS_OK;
  const void *ends[2] = {ptr, (const char *)ptr + (nbytes - 1)};
  for (int i = 0; i < 2; i++) {
    struct cudaPointerAttributes a;
    where(ends[i], &a);
    const char *part = i == 0 ? "" : " (its last byte)";
    if (a.type == cudaMemoryTypeManaged)
      continue;
    if (a.type != cudaMemoryTypeDevice)
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "the buffer bound to %s%s is %s, but this rank loads into device memory of CUDA device %d "
          "(device cuda): bind a buffer of that GPU, or load with device cpu",
          name, part, memory_kind(a.type), st->device);
    if (a.device != st->device)
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "the buffer bound to %s%s is memory of CUDA device %d, but this rank loads on CUDA device "
          "%d: bind memory of device %d, or make the loader use device %d (cuda_device; with torch, "
          "the device of the module's parameters)",
          name, part, a.device, st->device, st->device, a.device);
  }
  return SL_STATUS_OK;
}

sl_status sl__cuda_alloc_staging(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  cuda_state *st = state_of(b);
  *out = NULL;
  size_t n = nbytes > 0 ? (size_t)nbytes : 1;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  void *p = NULL;
  sl__cuda_bounce_note_staging(st, n);
  cudaError_t e = sl__cu.cudaHostAlloc(&p, n, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    return sl__err_set(
        err, SL_STATUS_CUDA,
        "cudaHostAlloc of %llu bytes of pinned staging memory failed: %s (%s); lower staging_bytes "
        "or the number of reader threads",
        (unsigned long long)nbytes, sl__cu.cudaGetErrorString(e), sl__cu.cudaGetErrorName(e));
  }
  *out = p;
  return SL_STATUS_OK;
}

void sl__cuda_release_staging(sl__backend *b, void *ptr) {
  cuda_state *st = state_of(b);
  if (ptr == NULL)
    return;
  (void)sl__cu.cudaSetDevice(st->device);
  cudaError_t e = sl__cu.cudaFreeHost(ptr);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    SL_WARN("cudaFreeHost: %s", sl__cu.cudaGetErrorString(e));
  }
}

/* Issues one 2-D copy on stream s (either direction: cudaMemcpyDefault infers it from the
 * pointers, so pageable host memory works too, only slower). */
sl_status sl__cuda_issue_copy(cuda_state *st, cudaStream_t s, void *dst, uint64_t dst_stride, const void *src,
                              uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err) {
  sl__cuda_copy_kind kind = SL_CUDA_COPY_NONE;
  sl_status res = sl__cuda_copy_kind_of(dst_stride, src_stride, row_bytes, rows, st->max_pitch, &kind, err);
  if (res != SL_STATUS_OK)
    return res;
  char *d = (char *)dst;
  const char *sp = (const char *)src;
  switch (kind) {
  case SL_CUDA_COPY_NONE:
    break;
  case SL_CUDA_COPY_FLAT:
    CUDA_CHECK(err, st->device,
               sl__cu.cudaMemcpyAsync(d, sp, (size_t)(row_bytes * rows), cudaMemcpyDefault, s));
    break;
  case SL_CUDA_COPY_2D:
    for (uint64_t r = 0; r < rows; r += SL_CUDA_2D_MAX_ROWS) {
      uint64_t n = rows - r < SL_CUDA_2D_MAX_ROWS ? rows - r : SL_CUDA_2D_MAX_ROWS;
      CUDA_CHECK(err, st->device,
                 sl__cu.cudaMemcpy2DAsync(d + r * dst_stride, (size_t)dst_stride, sp + r * src_stride,
                                          (size_t)src_stride, (size_t)row_bytes, (size_t)n, cudaMemcpyDefault,
                                          s));
    }
    break;
  case SL_CUDA_COPY_ROWS:
    for (uint64_t r = 0; r < rows; r++)
      CUDA_CHECK(err, st->device,
                 sl__cu.cudaMemcpyAsync(d + r * dst_stride, sp + r * src_stride, (size_t)row_bytes,
                                        cudaMemcpyDefault, s));
    break;
  }
  return SL_STATUS_OK;
}

/* A caller (a framework's worker) may still have work queued that writes or reads the memory the
 * loader writes: the fill of a freshly built model on the legacy default stream, or, between two
 * reloads, inference kernels on its own stream that still read the old weights. The loader's
 * streams are non-blocking, so nothing else orders them after that work, and a fill could land
 * after the loaded bytes or a kernel read half-reloaded weights. At the start of every transfer the
 * backend marks both streams (events recorded on the caller's thread, which queued the work), and
 * every stream of the loader waits for the marks before its first operation of the transfer. */
sl_status sl__cuda_mark_caller(cuda_state *st, sl__err *err) {
  CUDA_CHECK(err, st->device, sl__cu.cudaEventRecord(st->legacy_mark, cudaStreamLegacy));
  if (!st->own_main)
    CUDA_CHECK(err, st->device, sl__cu.cudaEventRecord(st->stream_mark, st->main));
  for (int w = 0; w <= st->workers; w++)
    st->after_caller[w] = false;
  return SL_STATUS_OK;
}

/* Called by the thread that owns stream `which` (reader threads concurrently, each its own flag). */
sl_status sl__cuda_after_caller(cuda_state *st, int which, sl__err *err) {
  if (st->after_caller[which])
    return SL_STATUS_OK;
  cudaStream_t s = which == st->workers ? st->main : st->worker_streams[which];
  CUDA_CHECK(err, st->device, sl__cu.cudaStreamWaitEvent(s, st->legacy_mark, 0));
  if (!st->own_main && s != st->main) /* the main stream is the caller's: in order already */
    CUDA_CHECK(err, st->device, sl__cu.cudaStreamWaitEvent(s, st->stream_mark, 0));
  st->after_caller[which] = true;
  return SL_STATUS_OK;
}

sl_status sl__cuda_slot_index(cuda_state *st, int worker, int slot, size_t *out, sl__err *err) {
  if (worker < 0 || worker >= st->workers || slot < 0 || slot >= st->slots)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "upload from reader %d slot %d: the backend has %d readers of %d slots", worker, slot,
                       st->workers, st->slots);
  *out = (size_t)worker * (size_t)st->slots + (size_t)slot;
  return SL_STATUS_OK;
}

sl_status sl__cuda_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                          const void *src, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                          sl__err *err) {
  cuda_state *st = state_of(b);
  size_t idx = 0;
  sl_status res = sl__cuda_slot_index(st, worker, slot, &idx, err);
  if (res != SL_STATUS_OK)
    return res;
  /* The current device is per thread: reader threads start on device 0. */
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  cudaStream_t s = st->worker_streams[worker];
  res = sl__cuda_after_caller(st, worker, err);
  if (res != SL_STATUS_OK)
    return res;
  /* Narrow strided rows into a contiguous destination: packed on the host (pinned scratch of this
   * slot), then one flat copy instead of a 2-D copy of rows of a few hundred bytes. */
  if (rows > 1 && row_bytes < SL_CUDA_NARROW_ROW && dst_stride == row_bytes && src_stride != row_bytes) {
    uint8_t *packed = sl__cuda_bounce(st, idx, rows * row_bytes);
    if (packed != NULL) {
      for (uint64_t r = 0; r < rows; r++)
        memcpy(packed + r * row_bytes, (const uint8_t *)src + r * src_stride, (size_t)row_bytes);
      src = packed;
      src_stride = row_bytes;
    }
  }
  res = sl__cuda_issue_copy(st, s, dst, dst_stride, src, src_stride, row_bytes, rows, err);
  if (res != SL_STATUS_OK)
    return res;
  /* Re-recording covers every earlier upload of the slot: they precede it on the same stream. */
  CUDA_CHECK(err, st->device, sl__cu.cudaEventRecord(st->slot_events[idx], s));
  return SL_STATUS_OK;
}

sl_status sl__cuda_upload_wait(sl__backend *b, int worker, int slot, sl__err *err) {
  cuda_state *st = state_of(b);
  size_t idx = 0;
  sl_status res = sl__cuda_slot_index(st, worker, slot, &idx, err);
  if (res != SL_STATUS_OK)
    return res;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  res = sl__cuda_wait_local(b, st->slot_events[idx], NULL, "a host-to-device upload", err);
  if (res == SL_STATUS_OK)
    sl__cuda_bounce_reset(st, idx);
  return res;
}

sl_status sl__cuda_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride,
                        uint64_t row_bytes, uint64_t rows, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  sl_status res = sl__cuda_after_caller(st, st->workers, err);
  if (res != SL_STATUS_OK)
    return res;
  return sl__cuda_issue_copy(st, st->main, dst, dst_stride, src, src_stride, row_bytes, rows, err);
}

/* Device → host, synchronous (saving parameters): queued on the main stream after the load's own
 * work, so that the bytes are those of the finished load, and waited for with the deadline of every
 * wait (a plain cudaMemcpy would wait for ever on a stuck device). */
sl_status sl__cuda_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  CUDA_CHECK(err, st->device,
             sl__cu.cudaMemcpyAsync(host_dst, src, (size_t)nbytes, cudaMemcpyDeviceToHost, st->main));
  return sl__cuda_wait_local(b, NULL, st->main, "a device-to-host copy", err);
}
/* Between buckets: the main stream only (backend.h: sync_main), through an event so that the wait
 * can block in the driver (wait.c). */
sl_status sl__cuda_sync_main(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  if (!st->blocking_sync)
    return sl__cuda_wait_local(b, NULL, st->main, "device copies", err);
  CUDA_CHECK(err, st->device, sl__cu.cudaEventRecord(st->main_done, st->main));
  return sl__cuda_wait_local(b, st->main_done, NULL, "device copies", err);
}

sl_status sl__cuda_sync(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  sl_status res = sl__cuda_wait_local(b, NULL, st->main, "device copies", err);
  for (int w = 0; w < st->workers && res == SL_STATUS_OK; w++)
    res = sl__cuda_wait_local(b, NULL, st->worker_streams[w], "host-to-device uploads", err);
  if (res == SL_STATUS_OK)
    sl__cuda_bounce_reset_all(st);
  return res;
}
