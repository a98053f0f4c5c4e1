/*
 * backend/backend.h — where parameters live and how shared bytes travel between ranks. The read engine
 * and the loader only talk to this table of operations:
 *   host (backend/host.c): host memory, memcpy, MPI broadcast;
 *   cuda (backend/cuda/, built with CUDA + NCCL): device memory, pinned staging, asynchronous
 *        host-to-device copies, NCCL broadcast; absent/cuda.c answers "unsupported".
 * Copies are 2-D: `rows` rows of `row_bytes`, consecutive rows `src_stride` / `dst_stride` apart.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include "base/err.h"
#include "comm/comm.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl__backend sl__backend;

typedef struct sl__backend_ops {
  const char *name;
  /* Parameter and bucket memory, zero-filled. */
  sl_status (*alloc)(sl__backend *b, uint64_t nbytes, void **out, sl__err *err);
  /* Optional (NULL: allocations are separate): the parameters' allocations that follow, nbytes in
   * all (each rounded up to SL_ARENA_ALIGN), are carved from one zero-filled block, allocated and
   * cleared once; release frees the block with its last parameter. */
  sl_status (*reserve)(sl__backend *b, uint64_t nbytes, sl__err *err);
  /* Zeroes nbytes of backend memory in place (the padding of a caller's buffer), after the
   * caller's pending work; complete once sync returns. */
  sl_status (*zero)(sl__backend *b, void *ptr, uint64_t nbytes, sl__err *err);
  void (*release)(sl__backend *b, void *ptr);
  /* Optional (NULL: nothing to check): whether this backend can write a buffer the caller bound
   * (nbytes at ptr, bound to parameter `name`); the CUDA backend: device memory of its own device, all
   * of it. Else an error naming the parameter, where the buffer is and what was expected. Called
   * before any byte moves. */
  sl_status (*check_bound)(sl__backend *b, const char *name, const void *ptr, uint64_t nbytes, sl__err *err);
  /* Optional (NULL: SL_BUCKET_SLOTS): how many broadcast buckets of slot_bytes to keep in rotation
   * (2 to SL_BUCKET_SLOTS_MAX), by the room the backend's memory has. */
  uint32_t (*bucket_slots)(sl__backend *b, uint64_t slot_bytes);
  /* Host memory that reader threads read into (pinned on GPUs). */
  sl_status (*alloc_staging)(sl__backend *b, uint64_t nbytes, void **out, sl__err *err);
  void (*release_staging)(sl__backend *b, void *ptr);
  /* Host staging → backend memory, from reader thread `worker` (0 .. workers-1) out of its
   * staging buffer `slot` (0 .. slots-1 of create: the pread ring or the
   * io_uring reader's share of the queue). May be asynchronous: the read engine reuses a slot's
   * bytes only after upload_wait(worker, slot) returned, and waits for a slot only when it is
   * about to reuse it, so that uploads out of several slots may be in flight at once. */
  sl_status (*upload)(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride, const void *src,
                      uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err);
  sl_status (*upload_wait)(sl__backend *b, int worker, int slot, sl__err *err);
  /* Backend memory → backend memory (bucket → parameter), from the main thread. */
  sl_status (*copy)(sl__backend *b, void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride,
                    uint64_t row_bytes, uint64_t rows, sl__err *err);
  /* Host memory, or backend memory from the main thread (worker < 0: a bucket) → backend memory,
   * transposed on the way (a parameter held with its last two dimensions transposed,
   * engine/deliver.c): `rows` rows of `cols` elements of `elem` bytes at src (rows src_stride
   * apart) land as `cols` rows of `rows` elements at dst (rows dst_stride apart): element (i, j) of
   * src at dst + j*dst_stride + i*elem. worker/slot as upload (worker < 0: the main thread).
   * When it returns, src may be reused; the bytes have landed by then for worker < 0, and for a
   * reader's delivery by upload_wait(worker, slot) or sync, as an upload's. */
  sl_status (*transpose)(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                         const void *src, uint64_t src_stride, uint64_t rows, uint64_t cols, uint64_t elem,
                         sl__err *err);
  /* Broadcast within broadcast group g (root = rank inside the group), polled against the abort
   * channel: *aborted set when the load must stop. */
  sl_status (*bcast)(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                     sl__err *err);
  /* Backend memory → host memory (saving parameters, tests), synchronous. */
  sl_status (*download)(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes, sl__err *err);
  /* Everything issued so far has completed. */
  sl_status (*sync)(sl__backend *b, sl__err *err);
  /* COLLECTIVE, after a transfer every rank agreed succeeded (NULL: nothing to do): resources held
   * only for broadcasts (NCCL communicators) are released; bcast is not called again. */
  sl_status (*end_transfer)(sl__backend *b, sl__err *err);
  /* COLLECTIVE, before a transfer that is not the backend's first (sl_loader_reload; NULL:
   * nothing to do): what end_transfer released is made again, over `groups`, the broadcast groups
   * of the new transfer's schedule (the communicator holds them already; they may differ from the
   * first transfer's). Every rank returns the same status. */
  sl_status (*begin_transfer)(sl__backend *b, const sl__comm_groups *groups, sl__err *err);
  /* What the main thread issued so far (bucket → parameter copies, broadcasts) has completed, so
   * that a bucket slot may be refilled; the readers' uploads may still be in flight (the engine
   * waits for a bucket's uploads in the reader before the bucket counts as read). NULL: the
   * engine calls sync instead. */
  sl_status (*sync_main)(sl__backend *b, sl__err *err);
  /* Called by each reader thread when it starts, before it allocates staging: a backend may bind
   * the thread to the CPUs near its device (the CUDA backend: the GPU's NUMA node). NULL: nothing. */
  void (*reader_start)(sl__backend *b, int worker);
  void (*destroy)(sl__backend *b);
} sl__backend_ops;

struct sl__backend {
  const sl__backend_ops *ops;
  sl__comm *comm;             /* MPI plumbing (groups created by the loader before any bcast) */
  bool host_addressable;      /* parameters are host memory: readers may pread straight into them */
  int device;                 /* CUDA device ordinal, -1 on the host */
  void *impl;                 /* backend private state */
  uint32_t nccl_comms;        /* NCCL communicators made for this load (0 on the host) */
  uint64_t free_before_comms; /* device memory free before they were made, bytes (0: none made) */
  uint64_t free_after_comms;  /* ... and once they were connected */
  bool failed;                /* set by the loader once the ranks agreed that a load failed: destroy
                                 then aborts NCCL communicators instead of finalizing them with peers */
  bool abort_stops_bcast;     /* a broadcast stopped by the abort channel writes nothing afterwards
                                 (NCCL's abort ends it): its bucket may be released. The host
                                 backend's abandoned MPI request may write whenever MPI progresses */
};

/* Alignment of the parameters carved from a reserved block (cudaMalloc's own). */
#define SL_ARENA_ALIGN 256u

/* The room an allocation of nbytes takes in a reserved block (at least one aligned unit). */
static inline uint64_t sl__arena_room(uint64_t nbytes) {
  uint64_t n = nbytes > 0 ? nbytes : 1;
  return (n + SL_ARENA_ALIGN - 1) / SL_ARENA_ALIGN * SL_ARENA_ALIGN;
}

/* The calling thread's current CUDA context (or, without the driver's entry points, its current
 * device), saved when a public call that uses the GPU starts and restored when it returns: the
 * backend makes its device current on the caller's thread, which must not leak into the caller. */
typedef struct sl__device_scope {
  int mode; /* 0: nothing saved; 1: a context; 2: a device ordinal */
  void *ctx;
  int device;
} sl__device_scope;
/* active false: nothing is done (a host load never touches CUDA). No-ops without CUDA support. */
void sl__device_scope_enter(sl__device_scope *s, bool active);
void sl__device_scope_leave(sl__device_scope *s);
/* sl_cuda_select_device of the public header (absent: SL_STATUS_UNSUPPORTED). */
sl_status sl__cuda_select_device(int device, int *chosen, sl__err *err);

/* Host backend: always available. */
sl_status sl__backend_host_create(sl__comm *comm, int workers, sl__backend **out, sl__err *err);

/* CUDA backend for `workers` reader threads of `slots` staging slots each (the read engine's split
 * of the staging budget: sl__staging_slots_per_thread). device < 0: the node-local rank picks the GPU. stream
 * / nccl_comm: the caller's cudaStream_t and ncclComm_t, or NULL to create them. Without CUDA support
 * compiled in, or without a usable GPU: SL_STATUS_UNSUPPORTED / SL_STATUS_NO_DEVICE with a clear message. */
sl_status sl__backend_cuda_create(sl__comm *comm, int workers, int slots, int device, void *stream,
                                  void *nccl_comm, const sl__comm_groups *groups, sl__backend **out,
                                  sl__err *err);
/* Whether a CUDA device is usable in this process (false, with the driver's message, if not). */
bool sl__cuda_available(char *why, size_t cap);
/* sl__backend_cuda_create is COLLECTIVE over comm (it agrees on its status, so every rank fails
 * alike: the failing rank's message, "another rank failed: ..." elsewhere); it creates the
 * broadcast groups' communicators (sl__comm_groups_create) when they do not exist yet (groups:
 * NULL for none). Its destroy is collective too unless b->failed is set (communicators are
 * finalized together; at most 60 s, then aborted). */

#endif
