/*
 * backend/cuda/backend.c — parameters in GPU memory; shared bytes broadcast with NCCL (see backend/backend.h).
 *
 * Organisation:
 *   1. check macros: every CUDA and NCCL call goes through CUDA_CHECK / NCCL_CHECK / NCCL_START,
 *      which return SL_STATUS_CUDA / SL_STATUS_NCCL naming the call, file:line and the library's
 *      message (never exit, never abort);
 *   2. state: one device; a main stream (device copies, broadcasts), one stream per reader thread
 *      with one event per staging slot; one NCCL communicator per schedule group we belong to;
 *   3. waits: every wait polls (cudaEventQuery, cudaStreamQuery, ncclCommGetAsyncError) against a
 *      deadline (SHARDLOAD_NCCL_TIMEOUT_S) and, for broadcasts, the loader's abort channel; a
 *      broadcast that must stop aborts its communicator instead of hanging;
 *   4. the operations of the backend table;
 *   5. creation (collective: local setup, agreement, NCCL communicators, agreement) and teardown.
 *
 * NCCL communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL call waits for another
 * rank inside NCCL, so the creation of many group communicators cannot deadlock whatever the
 * order, and a stuck one can always be aborted. Decisions that need no GPU live in
 * backend/cuda/logic.c (backend/cuda/cuda_backend.h).
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/log.h"
#include "base/util.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- 1. check macros ------------------------------------------------------------------------ */

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static sl_status cuda_fail(sl__err *err, cudaError_t e, int device, const char *call, const char *file,
                           int line) {
  (void)cudaGetLastError(); /* clear a non-sticky error so that later calls report their own */
  return sl__err_set(err, SL_STATUS_CUDA, "%s failed on CUDA device %d (%s:%d): %s (%s)", call, device,
                     base_name(file), line, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ctx (or NULL) says what the call was for, e.g. "broadcast group 3 (4 ranks)". */
static sl_status nccl_fail(sl__err *err, ncclResult_t r, const char *ctx, const char *call, const char *file,
                           int line) {
  const char *last = ncclGetLastError(NULL);
  bool has_last = last != NULL && *last != '\0';
  return sl__err_set(err, SL_STATUS_NCCL, "%s%s%s failed (%s:%d): %s%s%s", ctx != NULL ? ctx : "",
                     ctx != NULL ? ": " : "", call, base_name(file), line, ncclGetErrorString(r),
                     has_last ? "; NCCL says: " : "", has_last ? last : "");
}

/* `dev` names the device in the message. */
#define CUDA_CHECK(err, dev, call)                                                                           \
  do {                                                                                                       \
    cudaError_t e_ = (call);                                                                                 \
    if (e_ != cudaSuccess)                                                                                   \
      return cuda_fail((err), e_, (dev), #call, __FILE__, __LINE__);                                         \
  } while (0)

/* NCCL_CHECK: the call must succeed. NCCL_START: a call on a non-blocking communicator, which may
 * also answer ncclInProgress (the caller then polls ncclCommGetAsyncError). */
#define NCCL_CHECK(err, call)                                                                                \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != ncclSuccess)                                                                                   \
      return nccl_fail((err), r_, NULL, #call, __FILE__, __LINE__);                                          \
  } while (0)

#define NCCL_START(err, call)                                                                                \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                                           \
      return nccl_fail((err), r_, NULL, #call, __FILE__, __LINE__);                                          \
  } while (0)

/* Runtime answers that mean "there is no usable GPU here" rather than "a call went wrong". */
static bool is_no_device(cudaError_t e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorDevicesUnavailable ||
         e == cudaErrorSystemDriverMismatch || e == cudaErrorSystemNotReady ||
         e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorInitializationError ||
         e == cudaErrorStubLibrary;
}

static sl_status no_device(sl__err *err, cudaError_t e) {
  (void)cudaGetLastError();
  return sl__err_set(
      err, SL_STATUS_NO_DEVICE,
      "no CUDA device available (%s): run where an NVIDIA GPU and its driver are present, check "
      "CUDA_VISIBLE_DEVICES, or use --device cpu",
      cudaGetErrorString(e));
}

/* ---- 2. state ------------------------------------------------------------------------------- */

typedef struct cuda_state {
  int device;                   /* CUDA ordinal */
  cudaStream_t main;            /* device copies and broadcasts (the caller's stream when given) */
  bool own_main;                /* main was created here */
  int workers;                  /* reader threads */
  cudaStream_t *worker_streams; /* [workers]: uploads of each reader thread */
  cudaEvent_t *slot_events;     /* [workers * SL_STAGING_RING_DEPTH]: last upload out of each slot */
  size_t n_groups;              /* schedule groups */
  ncclComm_t *nccl;             /* [n_groups]: our communicator, NULL when not a member or aborted */
  bool *nccl_aborted;           /* [n_groups]: aborted after an abort, an error or a timeout */
  ncclComm_t parent;            /* the caller's communicator (never destroyed here), or NULL */
  double timeout_s;             /* longest wait, seconds (SHARDLOAD_NCCL_TIMEOUT_S) */
  uint64_t max_pitch;           /* largest pitch of a 2-D copy, bytes */
  bool failed;                  /* a communicator was aborted or broke: tear down with ncclCommAbort */
} cuda_state;

static cuda_state *state_of(sl__backend *b) {
  return (cuda_state *)b->impl;
}

/* ---- 3. waits ------------------------------------------------------------------------------- */

/* Busy polls before the first sleep: short operations finish without a context switch. */
#define SPINS_BEFORE_NAP 64

static void nap(const sl__backend *b) {
  (void)b;
  double s = 0.0002; /* GPU work progresses on its own: a short sleep between polls */
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Waits for an event (ev != NULL) or for everything issued on a stream. Local work only: no abort
 * channel (reader threads call it, and a host-to-device copy depends on no other rank). */
static sl_status wait_local(sl__backend *b, cudaEvent_t ev, cudaStream_t stream, const char *what,
                            sl__err *err) {
  cuda_state *st = state_of(b);
  double deadline = sl__now() + st->timeout_s;
  for (int spins = 0;; spins++) {
    cudaError_t e = ev != NULL ? cudaEventQuery(ev) : cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return SL_STATUS_OK;
    if (e != cudaErrorNotReady)
      return cuda_fail(err, e, st->device, ev != NULL ? "cudaEventQuery" : "cudaStreamQuery", __FILE__,
                       __LINE__);
    if (sl__now() > deadline)
      return sl__err_set(err, SL_STATUS_CUDA,
                         "%s on CUDA device %d did not complete within %.1f s (raise %s to wait longer)",
                         what, st->device, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    if (spins >= SPINS_BEFORE_NAP)
      nap(b);
  }
}

static void abort_group(cuda_state *st, size_t g) {
  if (g >= st->n_groups || st->nccl[g] == NULL)
    return;
  ncclResult_t r = ncclCommAbort(st->nccl[g]);
  if (r != ncclSuccess)
    SL_WARN("ncclCommAbort of broadcast group %zu: %s", g, ncclGetErrorString(r));
  st->nccl[g] = NULL;
  st->nccl_aborted[g] = true;
  st->failed = true;
}

/* Polls until a non-blocking communicator has finished its pending NCCL call (creation,
 * finalization): ncclSuccess, an error, or the deadline. */
static ncclResult_t wait_comm_idle(sl__backend *b, ncclComm_t c, double deadline, bool *timed_out) {
  *timed_out = false;
  for (int spins = 0;; spins++) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c, &state);
    if (r != ncclSuccess)
      return r;
    if (state != ncclInProgress)
      return state;
    if (sl__now() > deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    if (spins >= SPINS_BEFORE_NAP)
      nap(b);
  }
}

/* ---- 4. operations -------------------------------------------------------------------------- */

static sl_status cuda_alloc(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  cuda_state *st = state_of(b);
  *out = NULL;
  size_t n = nbytes > 0 ? (size_t)nbytes : 1;
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
      (void)cudaGetLastError();
    return sl__err_set(
        err, SL_STATUS_CUDA,
        "cudaMalloc of %llu bytes on CUDA device %d failed: %s (%s); %llu of %llu bytes free on the "
        "device",
        (unsigned long long)nbytes, st->device, cudaGetErrorString(e), cudaGetErrorName(e),
        (unsigned long long)free_bytes, (unsigned long long)total_bytes);
  }
  /* Zero rows of a padded vocabulary rely on zero-filled memory. The fill must be complete before
   * any upload on a reader stream (which is not ordered with the main stream) can touch it. */
  e = cudaMemsetAsync(p, 0, n, st->main);
  sl_status s =
      e == cudaSuccess ? SL_STATUS_OK : cuda_fail(err, e, st->device, "cudaMemsetAsync", __FILE__, __LINE__);
  if (s == SL_STATUS_OK)
    s = wait_local(b, NULL, st->main, "zero-filling new device memory", err);
  if (s != SL_STATUS_OK) {
    (void)cudaFree(p);
    return s;
  }
  *out = p;
  return SL_STATUS_OK;
}

static void cuda_release(sl__backend *b, void *ptr) {
  cuda_state *st = state_of(b);
  if (ptr == NULL)
    return;
  (void)cudaSetDevice(st->device);
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    SL_WARN("cudaFree on CUDA device %d: %s", st->device, cudaGetErrorString(e));
  }
}

static sl_status cuda_alloc_staging(sl__backend *b, uint64_t nbytes, void **out, sl__err *err) {
  cuda_state *st = state_of(b);
  *out = NULL;
  size_t n = nbytes > 0 ? (size_t)nbytes : 1;
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return sl__err_set(
        err, SL_STATUS_CUDA,
        "cudaHostAlloc of %llu bytes of pinned staging memory failed: %s (%s); lower staging_bytes "
        "or the number of reader threads",
        (unsigned long long)nbytes, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  *out = p;
  return SL_STATUS_OK;
}

static void cuda_release_staging(sl__backend *b, void *ptr) {
  cuda_state *st = state_of(b);
  if (ptr == NULL)
    return;
  (void)cudaSetDevice(st->device);
  cudaError_t e = cudaFreeHost(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    SL_WARN("cudaFreeHost: %s", cudaGetErrorString(e));
  }
}

/* Issues one 2-D copy on stream s (either direction: cudaMemcpyDefault infers it from the
 * pointers, so pageable host memory works too, only slower). */
static sl_status issue_copy(cuda_state *st, cudaStream_t s, void *dst, uint64_t dst_stride, const void *src,
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
    CUDA_CHECK(err, st->device, cudaMemcpyAsync(d, sp, (size_t)(row_bytes * rows), cudaMemcpyDefault, s));
    break;
  case SL_CUDA_COPY_2D:
    for (uint64_t r = 0; r < rows; r += SL_CUDA_2D_MAX_ROWS) {
      uint64_t n = rows - r < SL_CUDA_2D_MAX_ROWS ? rows - r : SL_CUDA_2D_MAX_ROWS;
      CUDA_CHECK(err, st->device,
                 cudaMemcpy2DAsync(d + r * dst_stride, (size_t)dst_stride, sp + r * src_stride,
                                   (size_t)src_stride, (size_t)row_bytes, (size_t)n, cudaMemcpyDefault, s));
    }
    break;
  case SL_CUDA_COPY_ROWS:
    for (uint64_t r = 0; r < rows; r++)
      CUDA_CHECK(
          err, st->device,
          cudaMemcpyAsync(d + r * dst_stride, sp + r * src_stride, (size_t)row_bytes, cudaMemcpyDefault, s));
    break;
  }
  return SL_STATUS_OK;
}

static sl_status slot_index(cuda_state *st, int worker, int slot, size_t *out, sl__err *err) {
  if (worker < 0 || worker >= st->workers || slot < 0 || slot >= SL_STAGING_RING_DEPTH)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "upload from reader %d slot %d: the backend has %d readers of %d slots", worker, slot,
                       st->workers, SL_STAGING_RING_DEPTH);
  *out = (size_t)worker * SL_STAGING_RING_DEPTH + (size_t)slot;
  return SL_STATUS_OK;
}

static sl_status cuda_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                             const void *src, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                             sl__err *err) {
  cuda_state *st = state_of(b);
  size_t idx = 0;
  sl_status res = slot_index(st, worker, slot, &idx, err);
  if (res != SL_STATUS_OK)
    return res;
  /* The current device is per thread: reader threads start on device 0. */
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  cudaStream_t s = st->worker_streams[worker];
  res = issue_copy(st, s, dst, dst_stride, src, src_stride, row_bytes, rows, err);
  if (res != SL_STATUS_OK)
    return res;
  /* Re-recording covers every earlier upload of the slot: they precede it on the same stream. */
  CUDA_CHECK(err, st->device, cudaEventRecord(st->slot_events[idx], s));
  return SL_STATUS_OK;
}

static sl_status cuda_upload_wait(sl__backend *b, int worker, int slot, sl__err *err) {
  cuda_state *st = state_of(b);
  size_t idx = 0;
  sl_status res = slot_index(st, worker, slot, &idx, err);
  if (res != SL_STATUS_OK)
    return res;
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  return wait_local(b, st->slot_events[idx], NULL, "a host-to-device upload", err);
}

static sl_status cuda_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src,
                           uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  return issue_copy(st, st->main, dst, dst_stride, src, src_stride, row_bytes, rows, err);
}

/* Device → host, synchronous (saving parameters): the main stream first, so that the bytes are
 * those of the finished load. */
static sl_status cuda_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes,
                               sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  CUDA_CHECK(err, st->device, cudaStreamSynchronize(st->main));
  CUDA_CHECK(err, st->device, cudaMemcpy(host_dst, src, (size_t)nbytes, cudaMemcpyDeviceToHost));
  return SL_STATUS_OK;
}

static sl_status cuda_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                            sl__err *err) {
  cuda_state *st = state_of(b);
  *aborted = false;
  if (g >= st->n_groups || st->nccl[g] == NULL)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       g < st->n_groups && st->nccl_aborted[g]
                           ? "broadcast in group %u, whose NCCL communicator was aborted earlier"
                           : "broadcast in group %u that this rank is not part of",
                       g);
  if (nbytes == 0)
    return SL_STATUS_OK;
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  ncclComm_t c = st->nccl[g];
  ncclResult_t r = ncclBroadcast(buf, buf, (size_t)nbytes, ncclUint8, root, c, st->main);
  if (r != ncclSuccess && r != ncclInProgress) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "broadcast of %llu bytes in group %u from root %d", (unsigned long long)nbytes,
             g, root);
    sl_status res = nccl_fail(err, r, ctx, "ncclBroadcast", __FILE__, __LINE__);
    abort_group(st, g);
    return res;
  }
  /* Done when NCCL has enqueued the operation (state no longer in progress) and the stream has
   * run it; meanwhile watch for NCCL errors, other ranks' aborts and the deadline. */
  double deadline = sl__now() + st->timeout_s;
  for (int spins = 0;; spins++) {
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(c, &state);
    if (r == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      r = state;
    if (r != ncclSuccess) {
      const char *last = ncclGetLastError(NULL);
      sl_status res =
          sl__err_set(err, SL_STATUS_NCCL,
                      "ncclBroadcast of %llu bytes in broadcast group %u (root %d) failed: %s%s%s; the "
                      "group's NCCL communicator was aborted",
                      (unsigned long long)nbytes, g, root, ncclGetErrorString(r),
                      last != NULL && *last != '\0' ? "; NCCL says: " : "", last != NULL ? last : "");
      abort_group(st, g);
      return res;
    }
    if (state == ncclSuccess) {
      cudaError_t e = cudaStreamQuery(st->main);
      if (e == cudaSuccess)
        return SL_STATUS_OK;
      if (e != cudaErrorNotReady) {
        abort_group(st, g);
        return cuda_fail(err, e, st->device, "cudaStreamQuery (after ncclBroadcast)", __FILE__, __LINE__);
      }
    }
    if (sl__comm_abort_check(b->comm)) {
      abort_group(st, g);
      *aborted = true;
      return SL_STATUS_OK;
    }
    if (sl__now() > deadline) {
      abort_group(st, g);
      return sl__err_set(
          err, SL_STATUS_NCCL,
          "ncclBroadcast of %llu bytes in broadcast group %u (root %d) did not complete within %.1f s "
          "(a rank of the group may be stuck or gone; raise %s to wait longer); the group's NCCL "
          "communicator was aborted",
          (unsigned long long)nbytes, g, root, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    }
    if (spins >= SPINS_BEFORE_NAP)
      nap(b);
  }
}

static sl_status cuda_sync(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  CUDA_CHECK(err, st->device, cudaSetDevice(st->device));
  sl_status res = wait_local(b, NULL, st->main, "device copies", err);
  for (int w = 0; w < st->workers && res == SL_STATUS_OK; w++)
    res = wait_local(b, NULL, st->worker_streams[w], "host-to-device uploads", err);
  return res;
}

/* ---- 5. teardown and creation --------------------------------------------------------------- */

/* Longest wait for communicators to finalize at teardown: a rank that never comes costs this. */
#define FINALIZE_MAX_S 60.0

static void release_comms(sl__backend *b) {
  cuda_state *st = state_of(b);
  /* After a failure (ours, or an abort raised by any rank) peers may never finalize: abort. */
  bool abort_all = st->failed || b->failed || (b->comm != NULL && b->comm->aborted);
  bool *finalizing = calloc(st->n_groups + 1, sizeof *finalizing);
  if (finalizing == NULL)
    abort_all = true;
  for (size_t g = 0; g < st->n_groups; g++) {
    if (st->nccl[g] == NULL || abort_all)
      continue;
    /* Non-blocking: start every finalization first, then wait, so their order does not matter. */
    ncclResult_t r = ncclCommFinalize(st->nccl[g]);
    if (r == ncclSuccess || r == ncclInProgress)
      finalizing[g] = true;
  }
  double wait_s = st->timeout_s < FINALIZE_MAX_S ? st->timeout_s : FINALIZE_MAX_S;
  double deadline = sl__now() + wait_s;
  for (size_t g = 0; g < st->n_groups; g++) {
    if (st->nccl[g] == NULL)
      continue;
    bool timed_out = false;
    ncclResult_t r = finalizing != NULL && finalizing[g]
                         ? wait_comm_idle(b, st->nccl[g], deadline, &timed_out)
                         : ncclInternalError;
    if (r == ncclSuccess) {
      r = ncclCommDestroy(st->nccl[g]);
      if (r != ncclSuccess)
        SL_WARN("ncclCommDestroy of broadcast group %zu: %s", g, ncclGetErrorString(r));
      st->nccl[g] = NULL;
      continue;
    }
    if (timed_out)
      SL_WARN("NCCL communicator of broadcast group %zu did not finalize within %.1f s: aborting it", g,
              wait_s);
    else if (!abort_all)
      SL_WARN("finalizing the NCCL communicator of broadcast group %zu: %s: aborting it", g,
              ncclGetErrorString(r));
    abort_group(st, g);
  }
  free(finalizing);
}

static void cuda_destroy(sl__backend *b) {
  if (b == NULL)
    return;
  cuda_state *st = state_of(b);
  if (st != NULL) {
    if (st->device >= 0)
      (void)cudaSetDevice(st->device);
    if (st->nccl != NULL)
      release_comms(b);
    /* Destroying a stream or an event with work pending is allowed: CUDA releases it when done. */
    for (int w = 0; st->slot_events != NULL && w < st->workers * SL_STAGING_RING_DEPTH; w++)
      if (st->slot_events[w] != NULL)
        (void)cudaEventDestroy(st->slot_events[w]);
    for (int w = 0; st->worker_streams != NULL && w < st->workers; w++)
      if (st->worker_streams[w] != NULL)
        (void)cudaStreamDestroy(st->worker_streams[w]);
    if (st->own_main && st->main != NULL)
      (void)cudaStreamDestroy(st->main);
    (void)cudaGetLastError();
    free(st->slot_events);
    free(st->worker_streams);
    free(st->nccl);
    free(st->nccl_aborted);
    free(st);
  }
  free(b);
}

static const sl__backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .release = cuda_release,
    .alloc_staging = cuda_alloc_staging,
    .release_staging = cuda_release_staging,
    .upload = cuda_upload,
    .upload_wait = cuda_upload_wait,
    .copy = cuda_copy,
    .bcast = cuda_bcast,
    .download = cuda_download,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
};

bool sl__cuda_available(char *why, size_t cap) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != NULL && cap > 0)
      snprintf(why, cap, "%s", cudaGetErrorString(e));
    return false;
  }
  if (count <= 0) {
    if (why != NULL && cap > 0)
      snprintf(why, cap, "this process sees no CUDA device; check CUDA_VISIBLE_DEVICES");
    return false;
  }
  if (why != NULL && cap > 0)
    snprintf(why, cap, "%d CUDA device%s", count, count == 1 ? "" : "s");
  return true;
}

/* The schedule's groups must have their MPI communicators (they carry the NCCL ids). */
static sl_status check_groups(const sl__comm *c, const sl__schedule *s, sl__err *err) {
  if (s->n_groups == 0)
    return SL_STATUS_OK;
  if (c->n_groups != s->n_groups || c->groups == NULL)
    return sl__err_set(
        err, SL_STATUS_INTERNAL,
        "the CUDA backend needs the %zu broadcast-group communicators of the schedule (found %zu)",
        s->n_groups, c->n_groups);
  for (size_t g = 0; g < s->n_groups; g++) {
    int pos = sl__cuda_group_pos(s, g, c->rank);
    bool member = c->groups[g] != MPI_COMM_NULL;
    if ((pos >= 0) != member || (member && c->group_rank[g] != pos))
      return sl__err_set(err, SL_STATUS_INTERNAL,
                         "broadcast group %zu: rank %d is at position %d in the schedule but %d in its MPI "
                         "communicator",
                         g, c->rank, pos, member ? c->group_rank[g] : -1);
  }
  return SL_STATUS_OK;
}

/* The caller's NCCL communicator must span the loader's ranks in the same order. */
static sl_status check_parent(const sl__comm *c, ncclComm_t parent, int *device, sl__err *err) {
  int count = 0;
  int rank = 0;
  int dev = -1;
  NCCL_CHECK(err, ncclCommCount(parent, &count));
  NCCL_CHECK(err, ncclCommUserRank(parent, &rank));
  NCCL_CHECK(err, ncclCommCuDevice(parent, &dev));
  if (count != c->size || rank != c->rank)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "the NCCL communicator passed to the loader has %d ranks and puts this process at rank %d; it "
        "must span the loader's communicator in the same order (%d ranks, this one rank %d)",
        count, rank, c->size, c->rank);
  if (*device >= 0 && *device != dev)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "CUDA device %d was requested but the NCCL communicator passed to the loader uses device %d", *device,
        dev);
  *device = dev;
  return SL_STATUS_OK;
}

/* Everything that needs no other rank: device, streams, events, arrays. */
static sl_status setup_local(sl__backend *b, int workers, int device, void *stream, void *nccl_comm,
                             const sl__schedule *sched, int local_rank, sl__err *err) {
  cuda_state *st = state_of(b);
  if (workers < 1)
    return sl__err_set(err, SL_STATUS_INTERNAL, "CUDA backend created for %d reader threads", workers);
  sl_status res = sl__cuda_parse_timeout(getenv(SL_CUDA_TIMEOUT_ENV), &st->timeout_s, err);
  if (res != SL_STATUS_OK)
    return res;
  res = check_groups(b->comm, sched, err);
  if (res != SL_STATUS_OK)
    return res;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return no_device(err, e);
  if (nccl_comm != NULL) {
    st->parent = (ncclComm_t)nccl_comm;
    res = check_parent(b->comm, st->parent, &device, err);
    if (res != SL_STATUS_OK)
      return res;
  }
  res = sl__cuda_pick_device(device, local_rank, count, &st->device, err);
  if (res != SL_STATUS_OK)
    return res;
  b->device = st->device;
  e = cudaSetDevice(st->device);
  if (e == cudaSuccess)
    e = cudaFree(NULL); /* creates the context now, so a busy or broken GPU is reported here */
  if (e != cudaSuccess)
    return is_no_device(e) ? no_device(err, e)
                           : cuda_fail(err, e, st->device, "cudaSetDevice", __FILE__, __LINE__);
  int pitch = 0;
  CUDA_CHECK(err, st->device, cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, st->device));
  st->max_pitch = pitch > 0 ? (uint64_t)pitch : 1;
  if (stream != NULL) {
    st->main = (cudaStream_t)stream;
  } else {
    CUDA_CHECK(err, st->device, cudaStreamCreateWithFlags(&st->main, cudaStreamNonBlocking));
    st->own_main = true;
  }
  st->worker_streams = calloc((size_t)workers, sizeof *st->worker_streams);
  st->slot_events = calloc((size_t)workers * SL_STAGING_RING_DEPTH, sizeof *st->slot_events);
  st->n_groups = sched->n_groups;
  st->nccl = calloc(sched->n_groups + 1, sizeof *st->nccl);
  st->nccl_aborted = calloc(sched->n_groups + 1, sizeof *st->nccl_aborted);
  if (st->worker_streams == NULL || st->slot_events == NULL || st->nccl == NULL || st->nccl_aborted == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory setting up the CUDA backend");
  st->workers = workers;
  for (int w = 0; w < workers; w++) {
    CUDA_CHECK(err, st->device, cudaStreamCreateWithFlags(&st->worker_streams[w], cudaStreamNonBlocking));
    for (int k = 0; k < SL_STAGING_RING_DEPTH; k++)
      CUDA_CHECK(
          err, st->device,
          cudaEventCreateWithFlags(&st->slot_events[w * SL_STAGING_RING_DEPTH + k], cudaEventDisableTiming));
  }
  return SL_STATUS_OK;
}

/* Every rank learns where every other rank's GPU is (two members of one group on one GPU is an
 * error NCCL would report far less clearly) and whether every rank passed its own NCCL
 * communicator (the two ways of creating group communicators cannot be mixed). */
typedef struct placement {
  sl__cuda_place place;
  int32_t has_parent;
} placement;

static sl_status check_placement(sl__backend *b, const sl__schedule *sched, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  if (sched->n_groups == 0)
    return SL_STATUS_OK;
  placement mine;
  memset(&mine, 0, sizeof mine);
  mine.place.device = st->device;
  mine.has_parent = st->parent != NULL;
  if (gethostname(mine.place.host, sizeof mine.place.host - 1) != 0)
    snprintf(mine.place.host, sizeof mine.place.host, "?");
  CUDA_CHECK(err, st->device,
             cudaDeviceGetPCIBusId(mine.place.bus_id, (int)sizeof mine.place.bus_id, st->device));
  placement *all = calloc((size_t)c->size, sizeof *all);
  sl__cuda_place *places = calloc((size_t)c->size, sizeof *places);
  sl_status res = SL_STATUS_OK;
  if (all == NULL || places == NULL) {
    res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory gathering GPU placements");
  } else {
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, c->world);
    if (rc != MPI_SUCCESS)
      res = sl__err_set(err, SL_STATUS_MPI, "MPI_Allgather of GPU placements failed (error %d)", rc);
  }
  int with_parent = 0;
  for (int r = 0; res == SL_STATUS_OK && r < c->size; r++) {
    places[r] = all[r].place;
    with_parent += all[r].has_parent != 0;
  }
  if (res == SL_STATUS_OK && with_parent != 0 && with_parent != c->size)
    res = sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "an NCCL communicator was passed to the loader on %d of %d ranks: pass one on every rank or on "
        "none",
        with_parent, c->size);
  if (res == SL_STATUS_OK)
    res = sl__cuda_check_places(sched, c->rank, places, err);
  free(all);
  free(places);
  return res;
}

static const char *group_ctx(char *buf, size_t cap, const sl__schedule *sched, size_t g) {
  snprintf(buf, cap, "broadcast group %zu (%u ranks)", g, sched->groups[g].n);
  return buf;
}

/* Our NCCL communicators, from NCCL ids that each group's first member makes and broadcasts over
 * the group's MPI communicator. Every rank walks the groups in schedule order; the inits are
 * non-blocking and batched in NCCL groups, then polled until ready. */
typedef struct id_msg {
  int32_t ok; /* the root made an id */
  ncclUniqueId id;
} id_msg;

#define INIT_BATCH 256 /* communicator inits per ncclGroupStart/End (NCCL allows 2048 operations) */

static sl_status create_comms_by_id(sl__backend *b, const sl__schedule *sched, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  id_msg *msgs = calloc(sched->n_groups + 1, sizeof *msgs);
  if (msgs == NULL)
    return sl__comm_agree(c, sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating NCCL ids"), err,
                          "exchanging NCCL ids");
  sl_status res = SL_STATUS_OK;
  for (size_t g = 0; g < sched->n_groups; g++) {
    int pos = sl__cuda_group_pos(sched, g, c->rank);
    if (pos < 0)
      continue;
    if (pos == 0) {
      /* A root that cannot make an id still broadcasts (ok = 0), so that no member waits. */
      ncclResult_t r = ncclGetUniqueId(&msgs[g].id);
      msgs[g].ok = r == ncclSuccess;
      if (r != ncclSuccess)
        res = nccl_fail(err, r, NULL, "ncclGetUniqueId", __FILE__, __LINE__);
    }
    int rc = MPI_Bcast(&msgs[g], (int)sizeof msgs[g], MPI_BYTE, 0, c->groups[g]);
    if (rc != MPI_SUCCESS) {
      res = sl__err_set(err, SL_STATUS_MPI,
                        "MPI_Bcast of the NCCL id of broadcast group %zu failed (error %d)", g, rc);
      break;
    }
    if (!msgs[g].ok && res == SL_STATUS_OK)
      res = sl__err_set(err, SL_STATUS_NCCL,
                        "broadcast group %zu: its first rank could not create an NCCL id", g);
  }
  res = sl__comm_agree(c, res, err, "exchanging NCCL ids");
  if (res != SL_STATUS_OK) {
    free(msgs);
    return res;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  char ctx[96];
  size_t g = 0;
  while (g < sched->n_groups && res == SL_STATUS_OK) {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
      res = nccl_fail(err, r, NULL, "ncclGroupStart", __FILE__, __LINE__);
      break;
    }
    for (int batch = 0; g < sched->n_groups && batch < INIT_BATCH; g++) {
      int pos = sl__cuda_group_pos(sched, g, c->rank);
      if (pos < 0)
        continue;
      batch++;
      r = ncclCommInitRankConfig(&st->nccl[g], (int)sched->groups[g].n, msgs[g].id, pos, &config);
      if (r != ncclSuccess && r != ncclInProgress && res == SL_STATUS_OK)
        res = nccl_fail(err, r, group_ctx(ctx, sizeof ctx, sched, g), "ncclCommInitRankConfig", __FILE__,
                        __LINE__);
    }
    r = ncclGroupEnd(); /* with non-blocking communicators: returns at once (ncclInProgress) */
    if (r != ncclSuccess && r != ncclInProgress && res == SL_STATUS_OK)
      res = nccl_fail(err, r, "creating NCCL communicators", "ncclGroupEnd", __FILE__, __LINE__);
  }
  free(msgs);
  double deadline = sl__now() + st->timeout_s;
  for (size_t k = 0; k < sched->n_groups && res == SL_STATUS_OK; k++) {
    if (st->nccl[k] == NULL)
      continue;
    bool timed_out = false;
    ncclResult_t r = wait_comm_idle(b, st->nccl[k], deadline, &timed_out);
    if (timed_out)
      res = sl__err_set(
          err, SL_STATUS_NCCL,
          "the NCCL communicator of broadcast group %zu (%u ranks) was not ready within %.1f s (raise %s "
          "to wait longer)",
          k, sched->groups[k].n, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    else if (r != ncclSuccess)
      res = nccl_fail(err, r, group_ctx(ctx, sizeof ctx, sched, k), "ncclCommInitRankConfig", __FILE__,
                      __LINE__);
  }
  return res;
}

/* Our NCCL communicators split from the caller's (which spans the loader's ranks): one split per
 * group, every rank in schedule order, non-members with NCCL_SPLIT_NOCOLOR. */
static sl_status create_comms_by_split(sl__backend *b, const sl__schedule *sched, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  char ctx[96];
  double deadline = sl__now() + st->timeout_s;
  for (size_t g = 0; g < sched->n_groups; g++) {
    int pos = sl__cuda_group_pos(sched, g, c->rank);
    /* NCCL writes the new communicator when the split completes, possibly from its own thread:
     * straight into the state, which outlives any wait here. */
    st->nccl[g] = NULL;
    NCCL_START(err, ncclCommSplit(st->parent, pos >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, pos >= 0 ? pos : 0,
                                  &st->nccl[g], &config));
    /* With a non-blocking parent the split completes in the background: the parent reports it. */
    bool timed_out = false;
    ncclResult_t r = wait_comm_idle(b, st->parent, deadline, &timed_out);
    if (timed_out)
      return sl__err_set(err, SL_STATUS_NCCL,
                         "splitting broadcast group %zu from the caller's NCCL communicator did not "
                         "finish within %.1f s (raise %s to wait longer)",
                         g, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    if (r != ncclSuccess)
      return nccl_fail(err, r, group_ctx(ctx, sizeof ctx, sched, g), "ncclCommSplit", __FILE__, __LINE__);
    if ((pos >= 0) != (st->nccl[g] != NULL))
      return sl__err_set(err, SL_STATUS_NCCL, "ncclCommSplit %s a communicator for broadcast group %zu",
                         pos >= 0 ? "gave no" : "unexpectedly gave", g);
    if (st->nccl[g] != NULL) {
      r = wait_comm_idle(b, st->nccl[g], deadline, &timed_out);
      if (timed_out || r != ncclSuccess)
        return sl__err_set(err, SL_STATUS_NCCL,
                           "the NCCL communicator split for broadcast group %zu is not usable: %s", g,
                           timed_out ? "not ready in time" : ncclGetErrorString(r));
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__backend_cuda_create(sl__comm *comm, int workers, int device, void *stream, void *nccl_comm,
                                  const sl__schedule *sched, sl__backend **out, sl__err *err) {
  static const sl__schedule no_groups;
  *out = NULL;
  if (sched == NULL)
    sched = &no_groups;
  /* Collective (MPI_Comm_split_type): first, before anything can fail on one rank only. */
  int local_rank = sl__comm_local_rank(comm);
  /* The NCCL ids travel over the groups' MPI communicators: made here when the caller has not
   * made them yet (collective too; every rank sees the same counts). */
  sl_status res = SL_STATUS_OK;
  if (sched->n_groups > 0 && comm->n_groups != sched->n_groups)
    res = sl__comm_groups_create(comm, sched, err);
  sl__backend *b = calloc(1, sizeof *b);
  cuda_state *st = calloc(1, sizeof *st);
  if (b == NULL || st == NULL) {
    free(b);
    free(st);
    b = NULL;
    res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating the CUDA backend");
  } else {
    b->ops = &cuda_ops;
    b->comm = comm;
    b->host_addressable = false;
    b->device = -1;
    b->impl = st;
    st->device = -1;
    st->timeout_s = SL_CUDA_TIMEOUT_DEFAULT_S;
    if (res == SL_STATUS_OK)
      res = setup_local(b, workers, device, stream, nccl_comm, sched, local_rank, err);
  }
  /* Every rank takes the same path from here on: one failure fails all, none waits for ever. */
  res = sl__comm_agree(comm, res, err, "setting up the CUDA device");
  if (res == SL_STATUS_OK)
    res = sl__comm_agree(comm, check_placement(b, sched, err), err, "checking GPU placement");
  if (res == SL_STATUS_OK && sched->n_groups > 0) {
    if (st->parent != NULL)
      res = create_comms_by_split(b, sched, err);
    else
      res = create_comms_by_id(b, sched, err);
    if (res != SL_STATUS_OK)
      st->failed = true; /* peers may be half way: tear down with ncclCommAbort */
    res = sl__comm_agree(comm, res, err, "creating NCCL communicators");
  }
  if (res != SL_STATUS_OK) {
    if (b != NULL)
      st->failed = true;
    cuda_destroy(b);
    return res;
  }
  SL_DEBUG("cuda backend: device %d, %d reader streams, %zu broadcast groups, timeout %.1f s", st->device,
           workers, sched->n_groups, st->timeout_s);
  *out = b;
  return SL_STATUS_OK;
}
