/*
 * engine/staging.h — the one owner of the staging budget. staging_bytes is shared by the reader
 * threads' staging slots (a ring per thread, or the io_uring queue) and the broadcast bucket
 * slots; this splits it and derives the largest single read (the chunk) that fits. The planner's
 * options (read_chunk, bucket_bytes) and the read engine's buffers both come from
 * sl__staging_split, so the plan's read figures are the engine's reads.
 */
#ifndef SL_STAGING_H
#define SL_STAGING_H

#include <stdbool.h>
#include <stdint.h>

#define SL_DIRECT_ALIGN 4096u      /* O_DIRECT alignment of offsets, lengths and buffers */
#define SL_BUCKET_SLOTS 2u         /* bucket buffers: one broadcast while the next one is read */
#define SL_BUCKET_SLOTS_MAX 8u     /* at most, where the backend has room for more (device memory) */
#define SL_STAGING_RING_DEPTH 2    /* staging slots per reader thread: reads overlap uploads */
#define SL_URING_DEPTH 32u         /* reads in flight with the io_uring strategy, all threads */
#define SL_BUCKET_MAX (1ull << 30) /* one MPI message */

/* staging_bytes: the budget, or SL_STAGING_UNBOUNDED when read_chunk already fits one (the engine
 * passes the planner's chunk). */
#define SL_STAGING_UNBOUNDED UINT64_MAX

typedef struct sl__staging_req {
  uint64_t staging_bytes;
  uint64_t bucket_bytes; /* requested broadcast bucket size */
  uint64_t read_chunk;   /* requested largest single read */
  uint32_t workers;      /* reader threads requested (0: one) */
  bool uring;            /* the io_uring strategy */
} sl__staging_req;

typedef struct sl__staging {
  uint64_t bucket_bytes;  /* effective bucket: requested, capped to a quarter of the budget and
                             to SL_BUCKET_MAX, at least 1 */
  uint32_t bucket_slots;  /* SL_BUCKET_SLOTS */
  uint32_t threads;       /* reader threads (io_uring: at most SL_URING_DEPTH) */
  uint32_t ring_slots;    /* staging slots per thread: the ring, or its share of the io_uring queue */
  uint32_t uring_entries; /* io_uring: submission queue size per thread (twice its reads in flight) */
  uint64_t reader_slots;  /* staging slots the budget is divided by (all threads) */
  uint64_t align;         /* SL_DIRECT_ALIGN */
  uint64_t chunk;         /* largest single read: requested, reduced to a multiple of align so
                             that the bucket slots and the reader slots fit the budget */
  uint64_t slot_bytes;    /* one reader staging slot: a chunk plus two alignment blocks */
} sl__staging;

void sl__staging_split(const sl__staging_req *req, sl__staging *out);

/* Staging slots one reader thread may use, with either strategy, when `workers` threads are
 * requested: the most ring_slots sl__staging_split gives for them. A backend tracks uploads per
 * (thread, slot) for that many slots. */
uint32_t sl__staging_slots_per_thread(uint32_t workers);

#endif
