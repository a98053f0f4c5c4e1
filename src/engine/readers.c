/*
 * engine/readers.c — the pread reader pool (see engine/engine.h): each thread takes operations
 * from the queues (bucket reads before local reads), reads them into a ring of staging slots (or
 * straight into their destination), and delivers them; uploads out of one slot overlap the read
 * into the next. Also what every reader shares: the injected failure, failure and completion, and
 * the main thread's wait for the readers' progress (sl__engine_wait_for).
 */
#include "engine/engine.h"

#include "base/clock.h"
#include "engine/file_gate.h"
#include "engine/filemap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

sl_status sl__engine_injected_failure(sl__engine *e, uint32_t f, uint64_t off, sl__err *werr) {
  if (e->inject_delay_us > 0)
    usleep((useconds_t)e->inject_delay_us);
  if (!atomic_exchange(&e->inject_error, false))
    return SL_STATUS_OK;
  return sl__err_set(werr, SL_STATUS_IO,
                     "read of %s at offset %llu failed: %s (injected by SHARDLOAD_INJECT_READ_ERROR)",
                     e->t->cat->files[f].path, (unsigned long long)off, strerror(EIO));
}

void sl__engine_fail(sl__engine *e, const sl__err *werr) {
  pthread_mutex_lock(&e->mu);
  sl__err_copy(&e->pool_err, werr);
  atomic_store(&e->failed, true);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

void sl__engine_reader_start(sl__engine *e, int worker) {
  sl__backend *be = e->t->backend;
  if (be->ops->reader_start != NULL)
    be->ops->reader_start(be, worker);
}

void sl__engine_op_done(sl__engine *e, const sl__read_op *op) {
  pthread_mutex_lock(&e->mu);
  if (op->bucket != SL_NONE)
    e->bucket_left[op->bucket]--;
  else
    e->local_left--;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

/* The one place a reader fills a buffer from (file, offset, length): a local file's descriptor, or
 * an object of a store on the reader's own connection (engine/remote.c). */
static sl_status pread_full(sl__engine *e, int worker, int fd, uint32_t f, uint8_t *buf, uint64_t len,
                            uint64_t off, bool allow_short, sl__err *werr) {
  sl_status st = sl__engine_injected_failure(e, f, off, werr);
  uint64_t calls = 0;
  if (st == SL_STATUS_OK && sl__cat_file_remote(e->t->cat, f)) {
    st = sl__engine_remote_read(e, worker, f, buf, len, off, werr);
    calls = 1;
  } else if (st == SL_STATUS_OK) {
    st = sl__pread_full(fd, buf, len, off, allow_short, e->t->cat->files[f].path, NULL, &calls, werr);
  }
  atomic_fetch_add(&e->read_ops, calls);
  return st;
}

/* Whether op's row-parallel slices are copied out of its file's mapping (e->rowmap): a row run,
 * or a covering read, of strided pieces, not whole rows of an exchange. */
static bool from_rowmap(const sl__engine *e, const sl__read_op *op) {
  if (e->rowmap == NULL || e->rowmap[op->file] == NULL)
    return false;
  const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first);
  return d->piece != SL_NONE && e->t->sched->pieces[d->piece].rows > 1;
}

/* File bytes [lo, hi) of the mapping made resident in one call: an I/O error or a truncated file
 * then fails the read instead of faulting (files are mapped for rows only where the kernel has the
 * call: engine/file_choice.c). */
static sl_status populate(sl__engine *e, const sl__read_op *op, uint64_t lo, uint64_t hi, sl__err *werr) {
#ifdef MADV_POPULATE_READ
  if (madvise(e->rowmap[op->file] + lo, (size_t)(hi - lo), MADV_POPULATE_READ) != 0)
    return sl__err_set(werr, SL_STATUS_IO, "read of %s at offset %llu (%llu bytes, mapped) failed: %s",
                       e->t->cat->files[op->file].path, (unsigned long long)lo, (unsigned long long)(hi - lo),
                       errno == EFAULT ? "I/O error or file truncated" : strerror(errno));
#else
  (void)e, (void)op, (void)lo, (void)hi, (void)werr;
#endif
  return SL_STATUS_OK;
}

/* The deliveries of op straight from the page cache through the file's mapping, one copy per row
 * into the destination, in windows of at most a read chunk of the file (at least one row): each
 * window made resident first, and its page table entries dropped after (the pages stay cached), so
 * that the mapping adds at most a window per reader to the process's resident memory. */
static sl_status copy_rows(sl__engine *e, int worker, int slot, const sl__read_op *op, sl__err *werr) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), chunk = e->t->chunk > 0 ? e->t->chunk : UINT64_MAX;
  sl_status st = sl__engine_injected_failure(e, op->file, op->offset, werr);
  for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++) {
    const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first + i);
    const sl__piece *P = &e->t->sched->pieces[d->piece];
    uint64_t base = e->t->cat->tensors[P->tensor].offset;
    uint64_t per = P->rows > 1 && chunk / P->src_stride > 0 ? chunk / P->src_stride : 1;
    for (uint64_t a = d->p0, b = a; a < d->p1 && st == SL_STATUS_OK; a = b) {
      b = P->rows > 1 ? (a / P->row_bytes + per) * P->row_bytes : (d->p1 - a > chunk ? a + chunk : d->p1);
      b = b < d->p1 ? b : d->p1;
      uint64_t lo = (base + sl__src_of(P, a)) / page * page, hi = base + sl__src_of(P, b - 1) + 1;
      sl__delivery w = {.piece = d->piece,
                        .p0 = a,
                        .p1 = b,
                        .bucket = d->bucket,
                        .bucket_off = d->bucket_off + (a - d->p0)};
      st = populate(e, op, lo, hi, werr);
      if (st == SL_STATUS_OK)
        st = sl__engine_deliver(e, worker, slot, &w, e->rowmap[op->file], 0, false, werr);
      (void)madvise(e->rowmap[op->file] + lo, (size_t)(hi - lo), MADV_DONTNEED);
    }
  }
  return st;
}

/* Reads one operation into staging (or straight into its destination) and delivers it. */
static sl_status run_op(sl__engine *e, int worker, int slot, uint8_t *staging, const sl__read_op *op,
                        sl__err *werr) {
  int fd = -1;
  sl_status st = op->populate ? SL_STATUS_OK : sl__engine_fd(e, op->file, &fd, werr);
  if (st != SL_STATUS_OK) {
    return st;
  } else if (op->populate) {
    st = sl__engine_injected_failure(e, op->file, op->offset, werr);
    if (st == SL_STATUS_OK)
      st = sl__filemap_populate(op->direct_dst, op->len, e->t->cat->files[op->file].path, op->offset, werr);
    if (st == SL_STATUS_OK) {
      const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first);
      atomic_fetch_add(&e->t->copy_done[e->copy_list[e->copy_start[d->piece]]], op->len);
      atomic_fetch_add(&e->bytes_mapped, op->len);
    }
  } else if (op->direct_dst != NULL) {
    const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first);
    uint32_t c = e->copy_list[e->copy_start[d->piece]];
    if (e->t->copy_started != NULL)
      atomic_store(&e->t->copy_started[c], 1);
    st = pread_full(e, worker, fd, op->file, op->direct_dst, op->len, op->offset, false, werr);
    if (st == SL_STATUS_OK)
      atomic_fetch_add(&e->t->copy_done[c], op->len);
  } else if (from_rowmap(e, op)) {
    st = copy_rows(e, worker, slot, op, werr);
  } else if (op->rows > 1) {
    /* A row run (buffered strategies only): the rows land packed, one after the other. */
    uint64_t row = op->len / op->rows;
    for (uint32_t r = 0; r < op->rows && st == SL_STATUS_OK; r++)
      st = pread_full(e, worker, fd, op->file, staging + r * row, row, op->offset + r * op->stride, false,
                      werr);
    if (st == SL_STATUS_OK)
      st = sl__engine_deliver(e, worker, slot, &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first), staging, 0,
                              true, werr);
  } else {
    uint64_t off = op->offset;
    uint64_t len = op->len;
    bool widened = e->choice[op->file].direct;
    /* O_DIRECT: aligned offset, length and buffer; the tail may be short at end of file. */
    if (widened)
      sl__readplan_widen(op->offset, op->len, e->staging.align, &off, &len);
    st = pread_full(e, worker, fd, op->file, staging, len, off, widened, werr);
    for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++)
      st = sl__engine_deliver(e, worker, slot, &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first + i), staging,
                              off, false, werr);
    /* Alignment widening is read but not needed: it counts as covering bytes. */
    atomic_fetch_add(&e->bytes_read, len - op->len);
    atomic_fetch_add(&e->bytes_covering, len - op->len);
  }
  atomic_fetch_add(&e->bytes_read, op->len);
  atomic_fetch_add(&e->bytes_covering, op->len - op->useful);
  atomic_fetch_add(&e->bytes_done, op->useful);
  return st;
}

/* Operations looked at past the head of a queue for one on a complete file. */
#define READY_SCAN_MAX 256

/* Moves the first of q[head, tail) (up to READY_SCAN_MAX) whose file is complete to the head;
 * returns whether the head is now such an operation. */
static bool ready_to_head(sl__engine *e, uint32_t *q, size_t head, size_t tail) {
  uint32_t closed = SL_NONE; /* queues run file by file: one look per file */
  for (size_t i = head; i < tail && i < head + READY_SCAN_MAX; i++) {
    uint32_t f = SL_VEC_AT(&e->rp.ops, sl__read_op, q[i]).file;
    if (f == closed)
      continue;
    if (sl__file_gate_is_open(e->t->gate, f)) {
      uint32_t x = q[head];
      q[head] = q[i];
      q[i] = x;
      return true;
    }
    closed = f;
  }
  return false;
}

uint32_t sl__engine_take_op(sl__engine *e) {
  bool hi = e->hi_head != e->hi_tail;
  /* While the files arrive (docs/spec/HUB.md §13) a reader that took the next operation in
   * order could wait for a file still downloading while operations on complete files sat behind
   * it: the whole pool then waited, and those reads were left to the end (a rank read a complete
   * file only after the last one arrived). Order within the queues does not matter for the bytes;
   * bucket reads keep their priority among ready operations. */
  if (e->t->gate != NULL && !(hi && ready_to_head(e, e->queue_hi, e->hi_head, e->hi_tail)) &&
      e->lo_head != e->lo_tail && ready_to_head(e, e->queue_lo, e->lo_head, e->lo_tail))
    hi = false;
  return hi ? e->queue_hi[e->hi_head++] : e->queue_lo[e->lo_head++];
}

/* The next operation (bucket reads first), or SL_NONE once the pool stops or failed. */
static uint32_t next_op(sl__engine *e) {
  pthread_mutex_lock(&e->mu);
  while (!e->stop && !atomic_load(&e->failed) && e->hi_head == e->hi_tail && e->lo_head == e->lo_tail)
    pthread_cond_wait(&e->cv, &e->mu);
  uint32_t idx = SL_NONE;
  if (!e->stop && !atomic_load(&e->failed))
    idx = sl__engine_take_op(e);
  pthread_mutex_unlock(&e->mu);
  return idx;
}

void *sl__engine_pread_worker(void *arg) {
  sl__engine_worker *wa = arg;
  sl__engine *e = wa->e;
  int w = wa->index;
  sl__backend *be = e->t->backend;
  uint8_t *slots[SL_STAGING_RING_DEPTH] = {NULL};
  bool used[SL_STAGING_RING_DEPTH] = {false};
  sl__err werr;
  sl__err_clear(&werr);
  sl_status st = SL_STATUS_OK;
  sl__engine_reader_start(e, w); /* before the staging: its pages land near the CPU that touches them */
  for (int s = 0; s < SL_STAGING_RING_DEPTH && st == SL_STATUS_OK; s++) {
    void *p = NULL;
    st = be->ops->alloc_staging(be, e->staging.slot_bytes, &p, &werr);
    slots[s] = p;
  }
  if (st != SL_STATUS_OK)
    sl__engine_fail(e, &werr);
  int slot = 0;
  for (uint32_t idx = next_op(e); idx != SL_NONE; idx = next_op(e)) {
    const sl__read_op *op = &SL_VEC_AT(&e->rp.ops, sl__read_op, idx);
    /* The slot's previous uploads must be finished before its bytes are overwritten. */
    if (used[slot])
      st = be->ops->upload_wait(be, w, slot, &werr);
    used[slot] = false;
    if (st == SL_STATUS_OK) {
      st = run_op(e, w, slot, slots[slot], op, &werr);
      used[slot] = op->direct_dst == NULL;
    }
    /* A bucket's bytes must have landed before the main thread broadcasts it. */
    if (st == SL_STATUS_OK && op->bucket != SL_NONE && used[slot]) {
      st = be->ops->upload_wait(be, w, slot, &werr);
      used[slot] = false;
    }
    if (st != SL_STATUS_OK) {
      sl__engine_fail(e, &werr);
      break;
    }
    sl__engine_op_done(e, op);
    slot = (slot + 1) % SL_STAGING_RING_DEPTH;
  }
  for (int s = 0; s < SL_STAGING_RING_DEPTH; s++) {
    if (used[s] && be->ops->upload_wait(be, w, s, &werr) != SL_STATUS_OK)
      sl__engine_fail(e, &werr);
    if (slots[s] != NULL)
      be->ops->release_staging(be, slots[s]);
  }
  return NULL;
}

sl_status sl__engine_wait_for(sl__engine *e, bool (*pred)(sl__engine *, void *), void *arg, bool *aborted) {
  *aborted = false;
  sl__comm *c = e->t->comm;
  /* The watchdog's deadline counts from the last byte read (or file downloaded): slow storage
   * that still delivers is waited for, a read that never returns is not. */
  uint64_t seen = atomic_load(&e->bytes_done) + sl__file_gate_opened(e->t->gate);
  double since = sl__now();
  sl__comm_block_begin(c, "waiting for this rank's reads");
  pthread_mutex_lock(&e->mu);
  while (!pred(e, arg)) {
    if (atomic_load(&e->failed)) {
      pthread_mutex_unlock(&e->mu);
      sl__comm_block_end(c);
      return SL_STATUS_IO;
    }
    struct timespec ts = sl__realtime_in(0.002);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    pthread_mutex_unlock(&e->mu);
    if (sl__comm_abort_check(c)) {
      *aborted = true;
      sl__comm_block_end(c);
      return SL_STATUS_OK;
    }
    sl__comm_poll(c);
    uint64_t done = atomic_load(&e->bytes_done) + sl__file_gate_opened(e->t->gate);
    if (done != seen) {
      seen = done;
      since = sl__now();
      sl__comm_progress(c);
      sl__comm_block_begin(c, "waiting for this rank's reads");
    } else if (c->timeout_s > 0 && sl__now() - since > c->timeout_s) {
      if (!sl__comm_expire(c, "waiting for this rank's reads: no byte read meanwhile", sl__now() - since,
                           e->err)) {
        sl__comm_block_end(c);
        return e->err->status;
      }
      since = sl__now(); /* the others still move: a new deadline */
    }
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  sl__comm_block_end(c);
  return SL_STATUS_OK;
}
