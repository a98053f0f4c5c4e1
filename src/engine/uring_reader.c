/*
 * engine/uring_reader.c — the io_uring strategy's reader threads (see engine/engine.h). The
 * threads keep SL_URING_DEPTH O_DIRECT reads in flight between them (a deep queue, like fio),
 * each thread with its own ring and aligned staging slots (engine/staging.h sizes both), and
 * deliver the reads as they complete. Each thread runs: take operations for its free slots,
 * submit them, complete one read (resubmitting the rest of a short one); at the end it drains
 * what is still in flight before its buffers go away.
 *
 * Uploads out of a slot (asynchronous on a GPU: one event per slot, backend.h) are waited for only
 * when the slot is about to be read into again, or at the end, so that the thread completes and
 * delivers the next read while the last one's bytes still travel. A bucket read is the exception:
 * its uploads are waited for before it counts as done, since the main thread broadcasts the
 * bucket at once. A slot just delivered is not read into again at once (its uploads would be
 * waited for right away, and the copy engine would idle between one read's uploads and the
 * next): while reads are in flight, up to a quarter of the slots (at least one) are left to their
 * uploads, and the slot reused is the one delivered longest ago, whose uploads are most likely
 * done.
 */
#include "engine/engine.h"

#include "engine/uring.h"

#include <string.h>

typedef struct inflight {
  uint32_t op;  /* SL_NONE when no read is in flight in the slot */
  uint64_t off; /* file range read: the operation's, widened to O_DIRECT alignment */
  uint64_t len;
  uint64_t got;       /* bytes read so far (short reads are resubmitted) */
  uint8_t *dst;       /* the slot's staging buffer */
  bool uploading;     /* uploads out of the slot may be in flight (never while a read is) */
  uint64_t delivered; /* which delivery of the thread queued them (the oldest is reused first) */
} inflight;

/* One reader thread. */
typedef struct uring_reader {
  sl__engine *e;
  int w;
  sl__backend *be;
  sl__err werr;
  sl__uring *u;
  uint32_t depth;     /* this thread's slots: reads in flight, or uploads out of them */
  uint32_t busy;      /* slots with a read in flight */
  uint32_t uploading; /* free slots whose uploads may be in flight */
  uint32_t reserve;   /* such slots left to their uploads while reads are in flight */
  uint64_t deliveries;
  uint8_t *slots[SL_URING_DEPTH];
  inflight fl[SL_URING_DEPTH];
} uring_reader;

static sl_status submit_rest(uring_reader *r, uint32_t slot, const inflight *f) {
  const sl__read_op *op = &SL_VEC_AT(&r->e->reads.rp.ops, sl__read_op, f->op);
  uint64_t left = f->len - f->got;
  uint32_t len = left > 0x40000000u ? 0x40000000u : (uint32_t)left;
  int fd = -1;
  sl_status st = sl__engine_fd(r->e, op->file, &fd, &r->werr);
  if (st == SL_STATUS_OK)
    st = sl__uring_read(r->u, fd, f->dst + f->got, len, f->off + f->got, slot, &r->werr);
  return st == SL_STATUS_OK ? sl__uring_submit(r->u, &r->werr) : st;
}

/* The ring and the staging slots. */
static sl_status setup(uring_reader *r) {
  r->depth = r->e->staging.ring_slots;
  r->reserve = r->depth < 2 ? 0 : r->depth / 4 > 1 ? r->depth / 4 : 1;
  sl_status st = sl__uring_create(r->e->staging.uring_entries, &r->u, &r->werr);
  for (uint32_t k = 0; k < SL_URING_DEPTH; k++)
    r->fl[k].op = SL_NONE;
  for (uint32_t k = 0; k < r->depth; k++) {
    void *p = NULL;
    if (st == SL_STATUS_OK)
      st = r->be->ops->alloc_staging(r->be, r->e->staging.slot_bytes, &p, &r->werr);
    r->slots[k] = p;
  }
  return st;
}

/* Waits for work (or for reads in flight) and takes operations for the free slots, bucket reads
 * first. Returns true when the thread is to quit. */
static bool take_ops(uring_reader *r, uint32_t *take, uint32_t *n_take) {
  uint32_t kept = r->busy == 0 ? 0 : r->uploading < r->reserve ? r->uploading : r->reserve;
  return sl__engine_take_ops(r->e, r->busy == 0, r->depth - r->busy - kept, take, n_take);
}

/* Slot k's uploads are complete (or failed to be waited for: the slot is not waited for twice). */
static sl_status upload_done(uring_reader *r, uint32_t k) {
  if (!r->fl[k].uploading)
    return SL_STATUS_OK;
  r->fl[k].uploading = false;
  r->uploading--;
  return r->be->ops->upload_wait(r->be, r->w, (int)k, &r->werr);
}

/* A free slot to read into: one without uploads, else the one delivered longest ago, once its
 * uploads are complete (take_ops left room for one, so there is a free slot). */
static sl_status free_slot(uring_reader *r, uint32_t *out) {
  uint32_t oldest = SL_NONE;
  for (uint32_t k = 0; k < r->depth; k++) {
    if (r->fl[k].op != SL_NONE)
      continue;
    if (!r->fl[k].uploading) {
      *out = k;
      return SL_STATUS_OK;
    }
    if (oldest == SL_NONE || r->fl[k].delivered < r->fl[oldest].delivered)
      oldest = k;
  }
  if (oldest == SL_NONE)
    return sl__err_set(&r->werr, SL_STATUS_INTERNAL, "io_uring reader %d: no free staging slot", r->w);
  *out = oldest;
  return upload_done(r, oldest);
}

/* Submits the taken operations into free slots. */
static sl_status submit_ops(uring_reader *r, const uint32_t *take, uint32_t n_take) {
  sl_status st = SL_STATUS_OK;
  for (uint32_t i = 0; i < n_take && st == SL_STATUS_OK; i++) {
    uint32_t k = 0;
    st = free_slot(r, &k);
    if (st != SL_STATUS_OK)
      break;
    const sl__read_op *op = &SL_VEC_AT(&r->e->reads.rp.ops, sl__read_op, take[i]);
    inflight *f = &r->fl[k];
    *f = (inflight){.op = take[i], .got = 0, .dst = r->slots[k]};
    /* The files are opened with O_DIRECT: aligned ranges into aligned staging, trimmed after. */
    sl__readplan_widen(op->offset, op->len, r->e->staging.align, &f->off, &f->len);
    st = submit_rest(r, k, f);
    if (st == SL_STATUS_OK)
      r->busy++;
    else
      f->op = SL_NONE;
  }
  return st;
}

/* Frees the slot of a read that is no longer in flight. */
static void release(uring_reader *r, inflight *f) {
  f->op = SL_NONE;
  r->busy--;
}

/* A complete read in slot k: its deliveries, its figures, and the operation counted as done. Its
 * uploads are left in flight (waited for when the slot is reused), a bucket's excepted. */
static sl_status deliver(uring_reader *r, uint32_t k, inflight *f, const sl__read_op *op) {
  sl__engine *e = r->e;
  sl_status st = sl__engine_injected_failure(e, op->file, op->offset, &r->werr);
  for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++)
    st = sl__engine_deliver(e, r->w, (int)k, &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first + i),
                            f->dst, f->off, false, &r->werr);
  f->uploading = true; /* even after a failure: what was queued is waited for before the end */
  f->delivered = ++r->deliveries;
  r->uploading++;
  /* The main thread broadcasts a bucket as soon as its reads count as done. */
  if (st == SL_STATUS_OK && op->bucket != SL_NONE)
    st = upload_done(r, k);
  /* Alignment widening is read but not needed: covering bytes. */
  sl__engine_count_read(e, f->len, f->len - op->useful, op->useful);
  sl__engine_op_done(e, op);
  release(r, f);
  return st;
}

/* Waits for one completion: a failure, the rest of a short read resubmitted, or a complete read
 * delivered. */
static sl_status complete_one(uring_reader *r) {
  sl__engine *e = r->e;
  uint64_t slot = 0;
  int32_t res = 0;
  sl_status st = sl__uring_wait(r->u, &slot, &res, &r->werr);
  if (st != SL_STATUS_OK)
    return st;
  inflight *f = &r->fl[slot];
  const sl__read_op *op = &SL_VEC_AT(&e->reads.rp.ops, sl__read_op, f->op);
  if (res < 0) {
    st = sl__err_set(&r->werr, SL_STATUS_IO, "read of %s at offset %llu failed: %s",
                     e->t->cat->files[op->file].path, (unsigned long long)(op->offset + f->got),
                     strerror(-res));
    release(r, f); /* completed: nothing of it is in flight any more */
    return st;
  }
  uint64_t needed = op->offset + op->len - f->off;
  f->got += (uint64_t)res;
  sl__engine_count_calls(e, 1);
  /* A short read at the end of the file (the widened tail) is fine once the bytes needed are in. */
  bool at_end = res == 0 || (f->got < f->len && f->got % e->staging.align != 0);
  if (at_end && f->got < needed) {
    st = sl__err_set(&r->werr, SL_STATUS_IO, "%s ended at offset %llu, before the expected end",
                     e->t->cat->files[op->file].path, (unsigned long long)(f->off + f->got));
    release(r, f);
    return st;
  }
  if (!at_end && f->got < f->len) {
    st = submit_rest(r, (uint32_t)slot, f);
    if (st != SL_STATUS_OK)
      release(r, f); /* the rest was not submitted */
    return st;
  }
  return deliver(r, (uint32_t)slot, f, op);
}

/* Drains the reads and the uploads still in flight before their buffers go away, then frees
 * everything. */
static void finish(uring_reader *r) {
  while (r->busy > 0) {
    uint64_t slot = 0;
    int32_t res = 0;
    if (sl__uring_wait(r->u, &slot, &res, &r->werr) != SL_STATUS_OK)
      break;
    /* Each slot has one read in flight: its completion frees it (nothing is resubmitted). */
    r->busy--;
  }
  for (uint32_t k = 0; k < r->depth; k++)
    if (upload_done(r, k) != SL_STATUS_OK)
      sl__engine_fail(r->e, &r->werr);
  for (uint32_t k = 0; k < SL_URING_DEPTH; k++)
    if (r->slots[k] != NULL)
      r->be->ops->release_staging(r->be, r->slots[k]);
  sl__uring_destroy(r->u);
}

void *sl__engine_uring_worker(void *arg) {
  sl__engine_worker *wa = arg;
  uring_reader r;
  memset(&r, 0, sizeof r);
  r.e = wa->e;
  r.w = wa->index;
  r.be = wa->e->t->backend;
  sl__err_clear(&r.werr);
  sl__engine_reader_start(r.e, r.w); /* before the staging: its pages land near the CPU that touches them */
  sl_status st = setup(&r);
  while (st == SL_STATUS_OK) {
    uint32_t take[SL_URING_DEPTH];
    uint32_t n_take = 0;
    if (take_ops(&r, take, &n_take))
      break;
    st = submit_ops(&r, take, n_take);
    if (st == SL_STATUS_OK && r.busy > 0)
      st = complete_one(&r);
  }
  if (st != SL_STATUS_OK)
    sl__engine_fail(r.e, &r.werr);
  finish(&r);
  return NULL;
}
