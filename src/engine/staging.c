/*
 * engine/staging.c — the split of the staging budget (see engine/staging.h).
 */
#include "engine/staging.h"

void sl__staging_split(const sl__staging_req *req, sl__staging *out) {
  const uint64_t align = SL_DIRECT_ALIGN;
  uint32_t threads = req->workers > 0 ? req->workers : 1;
  out->align = align;
  out->bucket_slots = SL_BUCKET_SLOTS;
  /* Buckets: a quarter of the budget at most, so that reads always keep half of it. */
  uint64_t bucket = req->bucket_bytes;
  if (bucket > req->staging_bytes / 4)
    bucket = req->staging_bytes / 4;
  if (bucket > SL_BUCKET_MAX)
    bucket = SL_BUCKET_MAX;
  out->bucket_bytes = bucket > 0 ? bucket : 1;
  if (req->uring) {
    /* The queue depth is shared by the reader threads, each with its own ring: the copies out of
     * staging (into memory touched for the first time) then run on every core. */
    threads = threads < SL_URING_DEPTH ? threads : SL_URING_DEPTH;
    out->ring_slots = SL_URING_DEPTH / threads > 0 ? SL_URING_DEPTH / threads : 1;
    out->uring_entries = out->ring_slots * 2;
    out->reader_slots = SL_URING_DEPTH;
  } else {
    out->ring_slots = SL_STAGING_RING_DEPTH;
    out->uring_entries = 0;
    out->reader_slots = (uint64_t)threads * SL_STAGING_RING_DEPTH;
  }
  out->threads = threads;
  /* The reader slots share what the bucket slots leave. */
  uint64_t buckets = (uint64_t)SL_BUCKET_SLOTS * out->bucket_bytes;
  uint64_t left = req->staging_bytes > buckets ? req->staging_bytes - buckets : req->staging_bytes / 2;
  uint64_t per = left / out->reader_slots;
  /* Each slot holds a chunk plus two alignment blocks (O_DIRECT widening). */
  uint64_t fit = per > 4 * align ? (per - 2 * align) / align * align : 2 * align;
  uint64_t chunk = req->read_chunk < fit ? req->read_chunk : fit;
  out->chunk = chunk > 0 ? chunk : align;
  out->slot_bytes = out->chunk + 2 * align;
}

uint32_t sl__staging_slots_per_thread(uint32_t workers) {
  sl__staging_req req = {
      .staging_bytes = SL_STAGING_UNBOUNDED, .read_chunk = SL_DIRECT_ALIGN, .workers = workers};
  sl__staging ring;
  sl__staging uring;
  sl__staging_split(&req, &ring);
  req.uring = true;
  sl__staging_split(&req, &uring);
  return ring.ring_slots > uring.ring_slots ? ring.ring_slots : uring.ring_slots;
}
