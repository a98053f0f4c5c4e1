/*
 * backend/cuda/cuda_internal.h — what the files of the CUDA backend share: the check macros through
 * which every CUDA and NCCL call goes (they return SL_STATUS_CUDA / SL_STATUS_NCCL naming the call,
 * file:line and the library's message; never exit, never abort), the backend's state, the polled
 * waits, and the functions one file gives the others. Every CUDA and NCCL call goes through the
 * tables sl__cu and sl__nc (libs.h: the libraries are opened at run time):
 *   backend.c  creation (collective), teardown, the table of operations, errors and local waits;
 *   memory.c   device and pinned memory, host-to-device uploads, 2-D copies, downloads, sync;
 *   nccl.c     the NCCL communicators of the broadcast groups (creation, finalization) and
 *              broadcasts polled against the abort channel and a deadline;
 *   nccl_shared.c  the groups' communicators split in layers from one parent, sharing its resources;
 *   nccl_common.c  what both share: configs, polled waits, messages, the watchdog's brackets;
 *   libs.c     the CUDA runtime and NCCL opened at run time (libs.h);
 *   bounce.c   pinned scratch per staging slot (packed narrow rows, transposed blocks);
 *   transpose.c  transposed deliveries (blocks transposed on the host, then one 2-D copy);
 *   numa.c     the reader threads' CPUs: those of the GPU's NUMA node (base/numa.h decides).
 * Included by those files only.
 */
#ifndef SL_CUDA_INTERNAL_H
#define SL_CUDA_INTERNAL_H

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/libs.h"
#include "base/numa.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Errors as statuses with the library's message (backend.c). ctx (or NULL) says what the call
 * was for, e.g. "broadcast group 3 (4 ranks)". */
sl_status sl__cuda_fail(sl__err *err, cudaError_t e, int device, const char *call, const char *file,
                        int line);
sl_status sl__nccl_fail(sl__err *err, ncclResult_t r, const char *ctx, const char *call, const char *file,
                        int line);

/* `dev` names the device in the message. */
#define CUDA_CHECK(err, dev, call)                                                                           \
  do {                                                                                                       \
    cudaError_t e_ = (call);                                                                                 \
    if (e_ != cudaSuccess)                                                                                   \
      return sl__cuda_fail((err), e_, (dev), #call, __FILE__, __LINE__);                                     \
  } while (0)

/* NCCL_CHECK: the call must succeed. NCCL_START: a call on a non-blocking communicator, which may
 * also answer ncclInProgress (the caller then polls ncclCommGetAsyncError). */
#define NCCL_CHECK(err, call)                                                                                \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != ncclSuccess)                                                                                   \
      return sl__nccl_fail((err), r_, NULL, #call, __FILE__, __LINE__);                                      \
  } while (0)

#define NCCL_START(err, call)                                                                                \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                                           \
      return sl__nccl_fail((err), r_, NULL, #call, __FILE__, __LINE__);                                      \
  } while (0)

/* A pinned scratch area of one staging slot (bounce.c). */
typedef struct sl__cuda_bounce_area {
  uint8_t *buf;
  uint64_t cap, used; /* bytes */
  bool failed;        /* it could not be allocated: uploads out of the slot go without it */
} sl__cuda_bounce_area;

/* The backend's state. */
typedef struct cuda_state {
  int device;                   /* CUDA ordinal */
  cudaStream_t main;            /* device copies and broadcasts (the caller's stream when given) */
  bool own_main;                /* main was created here */
  int workers;                  /* reader threads */
  int slots;                    /* staging slots per reader thread (sl__staging_slots_per_thread) */
  cudaStream_t *worker_streams; /* [workers]: uploads of each reader thread */
  cudaEvent_t *slot_events;     /* [workers * slots]: last upload out of each slot */
  cudaEvent_t legacy_mark;      /* the caller's work on the legacy stream when the transfer began */
  cudaEvent_t stream_mark;      /* the caller's work on its own stream (main) then, when it gave one */
  bool *after_caller;           /* [workers + 1]: that stream (main last) waits for both this transfer */
  void *warm_byte;              /* device byte of the warm-up broadcasts (kept: a cudaFree per
                                   transfer would wait for the caller's whole device) */
  size_t n_groups;              /* broadcast groups */
  ncclComm_t *nccl;             /* [n_groups]: our communicator, NULL when not a member or aborted */
  bool *nccl_aborted;           /* [n_groups]: aborted after an abort, an error or a timeout */
  bool *nccl_made;              /* [n_groups]: a communicator was made (released ones included) */
  ncclComm_t parent;            /* the caller's communicator (never destroyed here), or NULL */
  ncclComm_t shared_parent;     /* ours, over the ranks of the broadcasting groups, that the groups'
                                   communicators are split from sharing its resources, or NULL */
  bool share;                   /* groups' communicators split from shared_parent (else one each) */
  int max_ctas;                 /* ncclConfig_t.maxCTAs of every communicator (SHARDLOAD_NCCL_MAX_CTAS) */
  sl__cuda_bounce_area *bounce; /* [workers * slots] (bounce.c) */
  bool blocking_sync;           /* event waits block in the driver (SHARDLOAD_CUDA_BLOCKING_SYNC) */
  cudaEvent_t main_done;        /* recorded on the main stream by sync_main, waited for */
  _Atomic uint64_t staging_max; /* the largest staging slot the readers allocated, bytes */
  uint64_t free_before_comms;   /* device memory free before the communicators were made, bytes */
  uint64_t free_after_comms;    /* ... and once they were connected */
  double timeout_s;             /* longest wait, seconds (SHARDLOAD_NCCL_TIMEOUT_S) */
  uint64_t max_pitch;           /* largest pitch of a 2-D copy, bytes */
  /* The parameters' block (reserve): allocations are carved from it while they fit; it is freed
   * with the last of them. Caller's thread only (the keeper serialises late releases). */
  char *arena;
  uint64_t arena_size, arena_used;
  size_t arena_live;  /* allocations carved and not released */
  bool failed;        /* a communicator was aborted or broke: tear down with ncclCommAbort */
  bool bind_readers;  /* reader threads are bound to near_cpus (numa.c) */
  sl__cpus near_cpus; /* the GPU's NUMA node's CPUs within the process's affinity */
} cuda_state;

static inline cuda_state *state_of(sl__backend *b) {
  return (cuda_state *)b->impl;
}

/* ---- versions (versions.c) ---- */

/* "driver for CUDA 12.4, CUDA runtime 13.0, NCCL 2.28.3 (built with NCCL 2.28.3)". */
void sl__cuda_versions(char *out, size_t cap);
/* The message for cudaErrorInsufficientDriver: no driver at all, or the driver's and the runtime's
 * CUDA versions when it is too old. */
void sl__cuda_driver_too_old(char *out, size_t cap);
/* True, with a message, when the NCCL the process runs is not the major.minor built against. */
bool sl__cuda_nccl_mismatch(char *out, size_t cap);

/* ---- waits (backend.c) ---- */

/* Busy polls before the first sleep: short operations finish without a context switch. */
#define SL_CUDA_SPINS_BEFORE_NAP 64

/* A short sleep between polls: GPU work progresses on its own. */
void sl__cuda_nap(const sl__backend *b);
/* Waits for an event (ev != NULL) or for everything issued on a stream. Local work only: no abort
 * channel (reader threads call it, and a host-to-device copy depends on no other rank). */
sl_status sl__cuda_wait_local(sl__backend *b, cudaEvent_t ev, cudaStream_t stream, const char *what,
                              sl__err *err);

/* Queues a strided copy (rows of row_bytes) on stream s as one flat copy, 2-D copies or row by row,
 * whichever the strides and the device's pitch limit allow (memory.c; transpose.c uses it too). */
sl_status sl__cuda_issue_copy(cuda_state *st, cudaStream_t s, void *dst, uint64_t dst_stride, const void *src,
                              uint64_t src_stride, uint64_t row_bytes, uint64_t rows, sl__err *err);

/* At the start of every transfer (the backend's creation, begin_transfer): marks the work the caller
 * has queued until now on the legacy default stream and on its own stream, and lets every stream of
 * the loader wait for it again (memory.c). */
sl_status sl__cuda_mark_caller(cuda_state *st, sl__err *err);
/* Before the first operation of a transfer that the loader issues on stream `which` (a reader's, or
 * workers: the main one), that stream waits for the marks (memory.c). */
sl_status sl__cuda_after_caller(cuda_state *st, int which, sl__err *err);

/* ---- operations on memory (memory.c): see sl__backend_ops ---- */

sl_status sl__cuda_alloc(sl__backend *b, uint64_t nbytes, void **out, sl__err *err);
sl_status sl__cuda_reserve(sl__backend *b, uint64_t nbytes, sl__err *err);
sl_status sl__cuda_zero(sl__backend *b, void *ptr, uint64_t nbytes, sl__err *err);
void sl__cuda_release(sl__backend *b, void *ptr);
uint32_t sl__cuda_bucket_slots_op(sl__backend *b, uint64_t slot_bytes);
sl_status sl__cuda_check_bound(sl__backend *b, const char *name, const void *ptr, uint64_t nbytes,
                               sl__err *err);
sl_status sl__cuda_alloc_staging(sl__backend *b, uint64_t nbytes, void **out, sl__err *err);
void sl__cuda_release_staging(sl__backend *b, void *ptr);
sl_status sl__cuda_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                          const void *src, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                          sl__err *err);
sl_status sl__cuda_upload_wait(sl__backend *b, int worker, int slot, sl__err *err);
sl_status sl__cuda_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride,
                        uint64_t row_bytes, uint64_t rows, sl__err *err);
sl_status sl__cuda_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes, sl__err *err);
/* transpose.c */
sl_status sl__cuda_transpose(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                             const void *src, uint64_t src_stride, uint64_t rows, uint64_t cols,
                             uint64_t elem, sl__err *err);
sl_status sl__cuda_sync(sl__backend *b, sl__err *err);
sl_status sl__cuda_sync_main(sl__backend *b, sl__err *err);

/* ---- pinned scratch per staging slot (bounce.c) ---- */

/* Rows narrower than this are packed on the host before a flat upload instead of a 2-D copy. */
#define SL_CUDA_NARROW_ROW 512u

/* A staging slot of nbytes was allocated: scratch areas are that large. */
void sl__cuda_bounce_note_staging(cuda_state *st, uint64_t nbytes);
/* nbytes of slot idx's (worker * slots + slot) area, or NULL when it has no room left or none. */
uint8_t *sl__cuda_bounce(cuda_state *st, size_t idx, uint64_t nbytes);
/* The slot's uploads were waited for (upload_wait), or everything (sync): its area is free again. */
void sl__cuda_bounce_reset(cuda_state *st, size_t idx);
void sl__cuda_bounce_reset_all(cuda_state *st);
void sl__cuda_bounce_free(cuda_state *st);
/* The index of (worker, slot) among the backend's slots; SL_STATUS_INTERNAL when out of range. */
sl_status sl__cuda_slot_index(cuda_state *st, int worker, int slot, size_t *out, sl__err *err);

/* ---- NUMA (numa.c) ---- */

/* At creation, once the device is chosen: decides which CPUs the reader threads run on (the GPU's
 * NUMA node within the process's affinity; SHARDLOAD_NUMA_BIND=0 turns it off) and logs it. Fails
 * only on a malformed SHARDLOAD_NUMA_BIND; a node that cannot be found leaves the threads alone. */
sl_status sl__cuda_numa_setup(sl__backend *b, sl__err *err);
/* Warns when the reader threads are bound (by a launcher, or to the GPU's NUMA node) to fewer CPUs
 * than they number. */
void sl__cuda_cpus_check(sl__backend *b);
/* sl__backend_ops.reader_start: binds the calling reader thread to those CPUs. */
void sl__cuda_reader_start(sl__backend *b, int worker);

/* ---- NCCL (nccl.c) ---- */

sl_status sl__cuda_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                         sl__err *err);
/* COLLECTIVE: every rank learns where the others' GPUs are; two members of one group on one GPU,
 * or a caller's NCCL communicator on some ranks only, is an error. */
sl_status sl__cuda_check_placement(sl__backend *b, const sl__comm_groups *groups, sl__err *err);
/* COLLECTIVE: our NCCL communicator of every broadcasting group we belong to, split from the
 * caller's communicator when one was given, else from ids exchanged within the groups through the
 * communicator; b->nccl_comms counts them. */
sl_status sl__cuda_create_comms(sl__backend *b, const sl__comm_groups *groups, sl__err *err);
/* The config of every communicator the backend makes: non-blocking, maxCTAs bounded; splitShare for
 * the children of shared_parent. */
ncclConfig_t sl__cuda_nccl_config(const cuda_state *st, bool split_share);
/* Polls a non-blocking communicator until its pending call finished (nccl.c); with `aborted`, ends
 * on the abort channel too (*aborted set). */
ncclResult_t sl__cuda_wait_comm(sl__backend *b, ncclComm_t c, double deadline, bool *timed_out,
                                bool *aborted);
/* PEER_FAILED "another rank (rank R) failed while WHAT" (the agreement that follows names the cause). */
sl_status sl__cuda_peer_failed(sl__backend *b, sl__err *err, const char *what);
/* "broadcast group G (N ranks)" in buf. */
const char *sl__cuda_group_ctx(char *buf, size_t cap, const sl__comm_groups *groups, size_t g);
/* COLLECTIVE: one communicator per group from ids exchanged within it (nccl.c). */
sl_status sl__cuda_create_comms_by_id(sl__backend *b, const sl__comm_groups *groups, sl__err *err);
/* COLLECTIVE: one parent over the groups' ranks, the groups split from it in layers, sharing its
 * resources (nccl_shared.c). */
sl_status sl__cuda_create_comms_shared(sl__backend *b, const sl__comm_groups *groups, sl__err *err);
/* Brackets an NCCL call that cannot poll for the watchdog's backstop (nccl.c). */
void sl__cuda_watch(sl__backend *b, const char *what);
void sl__cuda_unwatch(sl__backend *b);
/* Finalizes (or aborts) shared_parent, once its children are gone (nccl_shared.c). */
void sl__cuda_release_shared_parent(sl__backend *b, bool abort, double deadline);

/* COLLECTIVE, once every rank has its communicators: a one-byte broadcast in each (NCCL connects
 * lazily, in the first collective). */
sl_status sl__cuda_warm_up(sl__backend *b, sl__err *err);
/* Finalizes (or, after a failure, aborts) every communicator still held; at most 60 s. */
void sl__cuda_release_comms(sl__backend *b);
/* The end_transfer operation: the communicators are released (backend/backend.h). */
sl_status sl__cuda_end_transfer(sl__backend *b, sl__err *err);

#endif
