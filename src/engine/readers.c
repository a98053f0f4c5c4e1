/*
 * engine/readers.c — the reader pool (sl__engine_pool, engine/engine.h), its one owner: the
 * queues (bucket reads before local reads), the threads' start and stop, failure and completion,
 * the figures the readers count and the test hooks; the pread readers, each reading operations
 * into a ring of staging slots (or straight into their destination) and delivering them, uploads
 * out of one slot overlapping the read into the next; and the main thread's wait for the readers'
 * progress (sl__engine_wait_for).
 */
#include "engine/engine.h"

#include "base/clock.h"
#include "base/util.h"
#include "engine/file_gate.h"
#include "engine/filemap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * The pool's state: setup, start, stop
 * ------------------------------------------------------------------------------------------- */

void sl__engine_pool_init(sl__engine *e) {
  sl__err_clear(&e->pool.err);
  atomic_init(&e->pool.failed, false);
  pthread_mutex_init(&e->pool.mu, NULL);
  pthread_cond_init(&e->pool.cv, NULL);
  atomic_init(&e->figures.bytes_read, 0);
  atomic_init(&e->figures.bytes_covering, 0);
  atomic_init(&e->figures.read_ops, 0);
  atomic_init(&e->figures.bytes_mapped, 0);
  atomic_init(&e->figures.bytes_done, 0);
}

void sl__engine_pool_free(sl__engine *e) {
  free(e->pool.queue_hi);
  free(e->pool.queue_lo);
  free(e->pool.bucket_left);
  free(e->pool.args);
  pthread_cond_destroy(&e->pool.cv);
  pthread_mutex_destroy(&e->pool.mu);
}

sl_status sl__engine_pool_prepare(sl__engine *e) {
  const sl__engine_reads *r = &e->reads;
  e->pool.bucket_left = calloc(e->buckets.n_mine + 1, sizeof *e->pool.bucket_left);
  if (e->pool.bucket_left == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
  for (size_t j = 0; j < e->buckets.n_mine; j++)
    e->pool.bucket_left[j] = r->bucket_ops_start[j + 1] - r->bucket_ops_start[j];
  e->pool.local_left = r->local_ops.len;
  e->pool.n_threads = e->staging.threads;
  e->pool.queue_hi = calloc(r->rp.ops.len + 1, sizeof *e->pool.queue_hi);
  e->pool.queue_lo = calloc(r->rp.ops.len + 1, sizeof *e->pool.queue_lo);
  if (e->pool.queue_hi == NULL || e->pool.queue_lo == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory starting readers");
  for (size_t i = 0; i < r->local_ops.len; i++)
    e->pool.queue_lo[e->pool.lo_tail++] = SL_VEC_AT(&r->local_ops, uint32_t, i);
  return SL_STATUS_OK;
}

sl_status sl__engine_pool_start(sl__engine *e, void *(*fn)(void *)) {
  e->pool.args = calloc(e->pool.n_threads, sizeof *e->pool.args);
  if (e->pool.args == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory");
  for (uint32_t i = 0; i < e->pool.n_threads; i++)
    e->pool.args[i] = (sl__engine_worker){.e = e, .index = (int)i};
  return sl__workers_start(&e->pool.threads, e->pool.n_threads, fn, e->pool.args, sizeof *e->pool.args,
                           "reader", e->err);
}

sl_status sl__engine_pool_stop(sl__engine *e, sl_status st) {
  pthread_mutex_lock(&e->pool.mu);
  e->pool.stop = true;
  pthread_cond_broadcast(&e->pool.cv);
  pthread_mutex_unlock(&e->pool.mu);
  /* A reader inside a read that never returns (storage gone) would hold the join forever. */
  sl__comm_block_begin(e->t->comm, "joining the reader threads");
  sl__workers_join(&e->pool.threads);
  sl__comm_block_end(e->t->comm);
  if (atomic_load(&e->pool.failed)) {
    if (e->pool.err.status == SL_STATUS_OK)
      sl__err_set(&e->pool.err, SL_STATUS_IO, "a reader thread failed");
    sl__err_copy(e->err, &e->pool.err);
    st = st == SL_STATUS_OK || st == SL_STATUS_IO ? e->pool.err.status : st;
  }
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * What every reader shares: test hooks, figures, failure and completion
 * ------------------------------------------------------------------------------------------- */

void sl__engine_inject_init(sl__engine *e) {
  /* Test hook (like sqlite's fault injection): SHARDLOAD_INJECT_READ_ERROR=<rank> makes the first
   * read of that rank fail, to exercise the failure agreement. */
  const char *inject = getenv("SHARDLOAD_INJECT_READ_ERROR");
  uint64_t inject_rank = 0;
  atomic_init(&e->inject.error, inject != NULL && sl__parse_u64(inject, &inject_rank) &&
                                    inject_rank == (uint64_t)e->t->comm->rank);
  /* SHARDLOAD_INJECT_READ_DELAY_MS=<ms>: every read operation sleeps first, so that a test can
   * act while a load is running (kill or stop a rank, rewrite a file). */
  const char *delay = getenv("SHARDLOAD_INJECT_READ_DELAY_MS");
  uint64_t delay_ms = 0;
  if (delay != NULL && sl__parse_u64(delay, &delay_ms))
    e->inject.delay_us = delay_ms * 1000;
}

void sl__engine_count_read(sl__engine *e, uint64_t read, uint64_t covering, uint64_t useful) {
  atomic_fetch_add(&e->figures.bytes_read, read);
  atomic_fetch_add(&e->figures.bytes_covering, covering);
  atomic_fetch_add(&e->figures.bytes_done, useful);
}

void sl__engine_count_calls(sl__engine *e, uint64_t n) {
  atomic_fetch_add(&e->figures.read_ops, n);
}

sl_status sl__engine_injected_failure(sl__engine *e, uint32_t f, uint64_t off, sl__err *werr) {
  if (e->inject.delay_us > 0)
    usleep((useconds_t)e->inject.delay_us);
  if (!atomic_exchange(&e->inject.error, false))
    return SL_STATUS_OK;
  return sl__err_set(werr, SL_STATUS_IO,
                     "read of %s at offset %llu failed: %s (injected by SHARDLOAD_INJECT_READ_ERROR)",
                     e->t->cat->files[f].path, (unsigned long long)off, strerror(EIO));
}

void sl__engine_fail(sl__engine *e, const sl__err *werr) {
  pthread_mutex_lock(&e->pool.mu);
  sl__err_copy(&e->pool.err, werr);
  atomic_store(&e->pool.failed, true);
  pthread_cond_broadcast(&e->pool.cv);
  pthread_mutex_unlock(&e->pool.mu);
}

void sl__engine_reader_start(sl__engine *e, int worker) {
  sl__backend *be = e->t->backend;
  if (be->ops->reader_start != NULL)
    be->ops->reader_start(be, worker);
}

void sl__engine_op_done(sl__engine *e, const sl__read_op *op) {
  pthread_mutex_lock(&e->pool.mu);
  if (op->bucket != SL_NONE)
    e->pool.bucket_left[op->bucket]--;
  else
    e->pool.local_left--;
  pthread_cond_broadcast(&e->pool.cv);
  pthread_mutex_unlock(&e->pool.mu);
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
  sl__engine_count_calls(e, calls);
  return st;
}

/* Whether op's row-parallel slices are copied out of its file's mapping (e->files.rowmap): a row run,
 * or a covering read, of strided pieces, not whole rows of an exchange. */
static bool from_rowmap(const sl__engine *e, const sl__read_op *op) {
  if (e->files.rowmap == NULL || e->files.rowmap[op->file] == NULL)
    return false;
  const sl__delivery *d = &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first);
  return d->piece != SL_NONE && e->t->sched->pieces[d->piece].rows > 1;
}

/* File bytes [lo, hi) of the mapping made resident in one call: an I/O error or a truncated file
 * then fails the read instead of faulting (files are mapped for rows only where the kernel has the
 * call: engine/file_choice.c). */
static sl_status populate(sl__engine *e, const sl__read_op *op, uint64_t lo, uint64_t hi, sl__err *werr) {
#ifdef MADV_POPULATE_READ
  if (madvise(e->files.rowmap[op->file] + lo, (size_t)(hi - lo), MADV_POPULATE_READ) != 0)
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
    const sl__delivery *d = &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first + i);
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
        st = sl__engine_deliver(e, worker, slot, &w, e->files.rowmap[op->file], 0, false, werr);
      (void)madvise(e->files.rowmap[op->file] + lo, (size_t)(hi - lo), MADV_DONTNEED);
    }
  }
  return st;
}

/* Reads one operation into staging (or straight into its destination) and delivers it. */
static sl_status run_op(sl__engine *e, int worker, int slot, uint8_t *staging, const sl__read_op *op,
                        sl__err *werr) {
  int fd = -1;
  uint64_t widening = 0;
  sl_status st = op->populate ? SL_STATUS_OK : sl__engine_fd(e, op->file, &fd, werr);
  if (st != SL_STATUS_OK) {
    return st;
  } else if (op->populate) {
    st = sl__engine_injected_failure(e, op->file, op->offset, werr);
    if (st == SL_STATUS_OK)
      st = sl__filemap_populate(op->direct_dst, op->len, e->t->cat->files[op->file].path, op->offset, werr);
    if (st == SL_STATUS_OK) {
      const sl__delivery *d = &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first);
      atomic_fetch_add(&e->t->copy_done[e->copy_list[e->copy_start[d->piece]]], op->len);
      atomic_fetch_add(&e->figures.bytes_mapped, op->len);
    }
  } else if (op->direct_dst != NULL) {
    const sl__delivery *d = &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first);
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
      st = sl__engine_deliver(e, worker, slot, &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first),
                              staging, 0, true, werr);
  } else {
    uint64_t off = op->offset;
    uint64_t len = op->len;
    bool widened = e->files.choice[op->file].direct;
    /* O_DIRECT: aligned offset, length and buffer; the tail may be short at end of file. */
    if (widened)
      sl__readplan_widen(op->offset, op->len, e->staging.align, &off, &len);
    st = pread_full(e, worker, fd, op->file, staging, len, off, widened, werr);
    for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++)
      st = sl__engine_deliver(e, worker, slot, &SL_VEC_AT(&e->reads.rp.dels, sl__delivery, op->first + i),
                              staging, off, false, werr);
    /* Alignment widening is read but not needed: it counts as covering bytes. */
    widening = len - op->len;
  }
  sl__engine_count_read(e, op->len + widening, op->len - op->useful + widening, op->useful);
  return st;
}

/* Operations looked at past the head of a queue for one on a complete file. */
#define READY_SCAN_MAX 256

/* Moves the first of q[head, tail) (up to READY_SCAN_MAX) whose file is complete to the head;
 * returns whether the head is now such an operation. */
static bool ready_to_head(sl__engine *e, uint32_t *q, size_t head, size_t tail) {
  uint32_t closed = SL_NONE; /* queues run file by file: one look per file */
  for (size_t i = head; i < tail && i < head + READY_SCAN_MAX; i++) {
    uint32_t f = SL_VEC_AT(&e->reads.rp.ops, sl__read_op, q[i]).file;
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

/* Takes the next queued read operation (bucket reads first); called with pool.mu held and one
 * queued. While files still download, an operation on a complete file goes first. */
static uint32_t take_op(sl__engine *e) {
  bool hi = e->pool.hi_head != e->pool.hi_tail;
  /* While the files arrive (docs/spec/HUB.md §13) a reader that took the next operation in
   * order could wait for a file still downloading while operations on complete files sat behind
   * it: the whole pool then waited, and those reads were left to the end (a rank read a complete
   * file only after the last one arrived). Order within the queues does not matter for the bytes;
   * bucket reads keep their priority among ready operations. */
  if (e->t->gate != NULL && !(hi && ready_to_head(e, e->pool.queue_hi, e->pool.hi_head, e->pool.hi_tail)) &&
      e->pool.lo_head != e->pool.lo_tail &&
      ready_to_head(e, e->pool.queue_lo, e->pool.lo_head, e->pool.lo_tail))
    hi = false;
  return hi ? e->pool.queue_hi[e->pool.hi_head++] : e->pool.queue_lo[e->pool.lo_head++];
}

bool sl__engine_take_ops(sl__engine *e, bool idle, uint32_t room, uint32_t *take, uint32_t *n_take) {
  sl__engine_pool *p = &e->pool;
  pthread_mutex_lock(&p->mu);
  while (idle && !p->stop && !atomic_load(&p->failed) && p->hi_head == p->hi_tail && p->lo_head == p->lo_tail)
    pthread_cond_wait(&p->cv, &p->mu);
  bool quit = (idle && p->stop) || atomic_load(&p->failed);
  *n_take = 0;
  while (!quit && *n_take < room && (p->hi_head != p->hi_tail || p->lo_head != p->lo_tail))
    take[(*n_take)++] = take_op(e);
  pthread_mutex_unlock(&p->mu);
  return quit;
}

/* The next operation (bucket reads first), or SL_NONE once the pool stops or failed. */
static uint32_t next_op(sl__engine *e) {
  uint32_t idx = SL_NONE, n = 0;
  return sl__engine_take_ops(e, true, 1, &idx, &n) || n == 0 ? SL_NONE : idx;
}

void sl__engine_push_bucket(sl__engine *e, size_t j) {
  pthread_mutex_lock(&e->pool.mu);
  for (uint32_t i = e->reads.bucket_ops_start[j]; i < e->reads.bucket_ops_start[j + 1]; i++)
    e->pool.queue_hi[e->pool.hi_tail++] = e->reads.bucket_op_list[i];
  pthread_cond_broadcast(&e->pool.cv);
  pthread_mutex_unlock(&e->pool.mu);
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
    const sl__read_op *op = &SL_VEC_AT(&e->reads.rp.ops, sl__read_op, idx);
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
  uint64_t seen = atomic_load(&e->figures.bytes_done) + sl__file_gate_opened(e->t->gate);
  double since = sl__now();
  sl__comm_block_begin(c, "waiting for this rank's reads");
  pthread_mutex_lock(&e->pool.mu);
  while (!pred(e, arg)) {
    if (atomic_load(&e->pool.failed)) {
      pthread_mutex_unlock(&e->pool.mu);
      sl__comm_block_end(c);
      return SL_STATUS_IO;
    }
    struct timespec ts = sl__realtime_in(0.002);
    pthread_cond_timedwait(&e->pool.cv, &e->pool.mu, &ts);
    pthread_mutex_unlock(&e->pool.mu);
    if (sl__comm_abort_check(c)) {
      *aborted = true;
      sl__comm_block_end(c);
      return SL_STATUS_OK;
    }
    sl__comm_poll(c);
    uint64_t done = atomic_load(&e->figures.bytes_done) + sl__file_gate_opened(e->t->gate);
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
    pthread_mutex_lock(&e->pool.mu);
  }
  pthread_mutex_unlock(&e->pool.mu);
  sl__comm_block_end(c);
  return SL_STATUS_OK;
}
