/*
 * engine/transfer.c — one rank's reads, deliveries and bucket broadcasts (see engine/transfer.h).
 *
 * Organisation:
 *   1. segments and deliveries (packed piece bytes → parameter rows or bucket bytes)
 *   2. read operations built from the pieces this rank reads (chunked, coalesced)
 *   3. the reader pool: threads with a ring of staging slots; bucket reads before local reads
 *   4. the bucket loop on the main thread: wait for the reader, broadcast, scatter
 *
 * Data of a piece is thought of as its "packed" form: rows × row_bytes bytes in row order. A
 * delivery moves the packed range [p0, p1) of a piece from a read buffer (source rows
 * src_stride apart) either into a bucket (packed, contiguous) or into every local copy of the
 * piece (rows dst_stride apart).
 */
#include "engine/transfer.h"

#include "plan/readplan.h"

#include "plan/stats.h"
#include "engine/filemap.h"
#include "base/log.h"
#include "engine/uring.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIRECT_ALIGN 4096u
#define BUCKET_SLOTS 2
#define URING_DEPTH SL_URING_DEPTH

/* ---------------------------------------------------------------------------------------------
 * 1. Segments and deliveries
 * ------------------------------------------------------------------------------------------- */

typedef struct engine {
  sl__transfer *t;
  sl__err *err;
  /* my pieces' local copies (CSR by piece) */
  uint32_t *copy_start; /* n_pieces + 1 */
  uint32_t *copy_list;
  /* my buckets in global order */
  uint32_t *my_buckets;
  size_t n_my_buckets;
  uint32_t *bucket_of_global; /* global bucket → my index (or SL_NONE) */
  /* reads */
  sl__readplan rp;            /* read operations and their deliveries */
  uint32_t *bucket_ops_start; /* my bucket → first op index in bucket_op_list */
  uint32_t *bucket_op_list;
  sl__vec local_ops; /* uint32_t op indices */
  int *fds;          /* per file, -1 until opened */
  /* bucket slots */
  void *slot_buf[BUCKET_SLOTS];
  bool slot_abandoned[BUCKET_SLOTS]; /* target of a broadcast an abort left unfinished */
  uint64_t slot_bytes;
  /* pool */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t *queue_hi; /* op indices ready (bucket reads) */
  size_t hi_head, hi_tail;
  uint32_t *queue_lo; /* local reads */
  size_t lo_head, lo_tail;
  uint32_t *bucket_left; /* per my bucket: read ops not finished */
  size_t local_left;
  bool stop;
  _Atomic bool failed;
  sl__err pool_err; /* first worker error */
  pthread_t *threads;
  uint32_t n_threads;
  uint64_t staging_each; /* bytes per staging slot */
  _Atomic uint64_t bytes_read;
  _Atomic uint64_t bytes_covering;
  _Atomic uint64_t read_ops;
  _Atomic uint64_t bytes_mapped;
  _Atomic uint64_t bytes_done;
  uint64_t bytes_total;
  double t_start;
  _Atomic bool inject_error; /* test hook: the next read fails (SHARDLOAD_INJECT_READ_ERROR) */
} engine;

/* Segment seg of piece P, whose first byte is at src (consecutive rows src_stride apart), into
 * every local copy of the piece: uploaded from reader thread `worker` (slot `slot`), or copied
 * within backend memory by the main thread (worker < 0). */
static sl_status to_copies(engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                           uint64_t src_stride, int worker, int slot, sl__err *err) {
  sl__transfer *t = e->t;
  const sl__piece *P = &t->sched->pieces[piece];
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  for (uint32_t ci = e->copy_start[piece]; ci < e->copy_start[piece + 1]; ci++) {
    uint32_t c = e->copy_list[ci];
    const sl__copy *cp = &t->plan->copies[c];
    uint64_t dstride = P->rows <= 1 ? rb : cp->dst_stride;
    uint8_t *dst = (uint8_t *)t->param_ptr[cp->lparam] + cp->dst_off + seg->row * dstride + seg->col;
    sl_status st = worker >= 0 ? t->backend->ops->upload(t->backend, worker, slot, dst, dstride, src,
                                                         src_stride, seg->len, seg->rows, err)
                               : t->backend->ops->copy(t->backend, dst, dstride, src, src_stride, seg->len,
                                                       seg->rows, err);
    if (st != SL_STATUS_OK)
      return st;
    atomic_fetch_add(&t->copy_done[c], seg->len * seg->rows);
  }
  return SL_STATUS_OK;
}

/* Moves delivery d from a host buffer holding file bytes from file offset buf_off, or (packed) the
 * delivery's packed bytes themselves (a row run). */
static sl_status deliver_from_read(engine *e, int worker, int slot, const sl__delivery *d, const uint8_t *buf,
                                   uint64_t buf_off, bool packed, sl__err *werr) {
  sl__transfer *t = e->t;
  const sl__piece *P = &t->sched->pieces[d->piece];
  uint64_t base = t->cat->tensors[P->tensor].offset;
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  uint64_t sstride = packed ? rb : P->rows <= 1 ? P->nbytes : P->src_stride;
  sl__segment seg[3];
  int n = sl__segments(rb, d->p0, d->p1, seg);
  for (int k = 0; k < n; k++) {
    uint64_t p = seg[k].row * rb + seg[k].col;
    const uint8_t *src = packed ? buf + (p - d->p0) : buf + (base + sl__src_of(P, p) - buf_off);
    sl_status st;
    if (d->bucket != SL_NONE) {
      uint8_t *dst = (uint8_t *)e->slot_buf[d->bucket % BUCKET_SLOTS] + d->bucket_off + (p - d->p0);
      st = t->backend->ops->upload(t->backend, worker, slot, dst, seg[k].len, src, sstride, seg[k].len,
                                   seg[k].rows, werr);
    } else {
      st = to_copies(e, d->piece, &seg[k], src, sstride, worker, slot, werr);
    }
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* After a broadcast: bucket items (packed piece bytes) → local copies. */
static sl_status scatter_bucket(engine *e, uint32_t mine) {
  sl__transfer *t = e->t;
  const sl__bucket *b = &t->sched->buckets[e->my_buckets[mine]];
  const uint8_t *slot = e->slot_buf[mine % BUCKET_SLOTS];
  for (uint32_t i = 0; i < b->n_items; i++) {
    const sl__bucket_item *it = &t->sched->items[b->first_item + i];
    const sl__piece *P = &t->sched->pieces[it->piece];
    uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
    sl__segment seg[3];
    int n = sl__segments(rb, it->piece_off, it->piece_off + it->len, seg);
    for (int k = 0; k < n; k++) {
      uint64_t p = seg[k].row * rb + seg[k].col;
      sl_status st = to_copies(e, it->piece, &seg[k], slot + it->bucket_off + (p - it->piece_off), seg[k].len,
                               -1, 0, e->err);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 2. Read operations
 * ------------------------------------------------------------------------------------------- */

/* Read operations for packed range [p0, p1) of piece P (a whole piece, or one bucket item). A
 * local piece with one contiguous copy in host memory is read straight into the parameter, or,
 * when that parameter is a mapping of the piece's bytes, populated in place. */
static sl_status plan_piece_reads(engine *e, const sl__piece *P, uint64_t p0, uint64_t p1, uint32_t bucket,
                                  uint64_t bucket_off) {
  uint32_t piece = (uint32_t)(P - e->t->sched->pieces);
  uint8_t *direct = NULL;
  bool populate = false;
  bool buffered = e->t->strategy == SL_STRATEGY_AUTO || e->t->strategy == SL_STRATEGY_MMAP;
  if (bucket == SL_NONE && P->rows <= 1 && e->t->backend->host_addressable && buffered &&
      e->copy_start[piece + 1] - e->copy_start[piece] == 1) {
    const sl__copy *cp = &e->t->plan->copies[e->copy_list[e->copy_start[piece]]];
    direct = (uint8_t *)e->t->param_ptr[cp->lparam] + cp->dst_off;
    populate = e->t->param_mapped != NULL && e->t->param_mapped[cp->lparam];
  }
  size_t first = e->rp.ops.len;
  sl_status st = sl__readplan_piece(&e->rp, P, piece, &e->t->cat->tensors[P->tensor], p0, p1, bucket,
                                    bucket_off, direct, e->t->chunk, e->t->coalesce_gap, buffered, e->err);
  for (size_t i = first; i < e->rp.ops.len && populate; i++)
    SL_VEC_AT(&e->rp.ops, sl__read_op, i).populate = true;
  return st;
}

static sl_status build_reads(engine *e) {
  sl__transfer *t = e->t;
  const sl__schedule *s = t->sched;
  uint32_t me = (uint32_t)t->comm->rank;
  sl_status st = SL_STATUS_OK;
  /* Local-only pieces first, in file order; then bucket items in bucket order. */
  for (size_t k = 0; k < s->n_pieces && st == SL_STATUS_OK; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->reader != me || P->group != SL_NONE || P->nbytes == 0)
      continue;
    st = plan_piece_reads(e, P, 0, P->nbytes, SL_NONE, 0);
  }
  size_t n_local = e->rp.ops.len;
  e->bucket_ops_start = calloc(e->n_my_buckets + 1, sizeof *e->bucket_ops_start);
  if (st == SL_STATUS_OK && e->bucket_ops_start == NULL)
    st = sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
  for (size_t j = 0; j < e->n_my_buckets && st == SL_STATUS_OK; j++) {
    e->bucket_ops_start[j] = (uint32_t)(e->rp.ops.len - n_local);
    const sl__bucket *b = &s->buckets[e->my_buckets[j]];
    if (b->reader != me)
      continue;
    for (uint32_t i = 0; i < b->n_items && st == SL_STATUS_OK; i++) {
      const sl__bucket_item *it = &s->items[b->first_item + i];
      st = plan_piece_reads(e, &s->pieces[it->piece], it->piece_off, it->piece_off + it->len, (uint32_t)j,
                            it->bucket_off);
    }
  }
  if (st != SL_STATUS_OK)
    return st;
  e->bucket_ops_start[e->n_my_buckets] = (uint32_t)(e->rp.ops.len - n_local);
  for (size_t i = 0; i < n_local; i++) {
    uint32_t *x = sl__vec_push(&e->local_ops);
    if (x == NULL)
      return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
    *x = (uint32_t)i;
  }
  e->bucket_op_list = calloc(e->rp.ops.len - n_local + 1, sizeof *e->bucket_op_list);
  e->bucket_left = calloc(e->n_my_buckets + 1, sizeof *e->bucket_left);
  if (e->bucket_op_list == NULL || e->bucket_left == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
  for (size_t i = n_local; i < e->rp.ops.len; i++)
    e->bucket_op_list[i - n_local] = (uint32_t)i;
  for (size_t j = 0; j < e->n_my_buckets; j++)
    e->bucket_left[j] = e->bucket_ops_start[j + 1] - e->bucket_ops_start[j];
  e->local_left = n_local;
  for (size_t i = 0; i < e->rp.ops.len; i++) {
    const sl__read_op *op = &SL_VEC_AT(&e->rp.ops, sl__read_op, i);
    e->bytes_total += op->useful;
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 3. Reader pool
 * ------------------------------------------------------------------------------------------- */

static sl_status open_files(engine *e) {
  sl__transfer *t = e->t;
  for (size_t i = 0; i < e->rp.ops.len; i++) {
    uint32_t f = SL_VEC_AT(&e->rp.ops, sl__read_op, i).file;
    if (e->fds[f] >= 0)
      continue;
    int flags = O_RDONLY | O_CLOEXEC;
    bool want_direct = t->strategy == SL_STRATEGY_DIRECT || t->strategy == SL_STRATEGY_IO_URING;
    if (want_direct)
      flags |= O_DIRECT;
    int fd = open(t->cat->files[f].path, flags);
    if (fd < 0 && want_direct && errno == EINVAL) {
      SL_WARN("%s: the file system refuses O_DIRECT; reading it through the page cache",
              t->cat->files[f].path);
      fd = open(t->cat->files[f].path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
      return sl__err_set(e->err, SL_STATUS_IO, "cannot open %s: %s", t->cat->files[f].path, strerror(errno));
    sl_status st = sl__cat_file_check(t->cat, f, fd, e->err);
    if (st != SL_STATUS_OK) {
      close(fd);
      return st;
    }
    e->fds[f] = fd;
  }
  return SL_STATUS_OK;
}

/* The test hook: the first read of this rank fails (SHARDLOAD_INJECT_READ_ERROR). */
static sl_status injected_failure(engine *e, uint32_t f, uint64_t off, sl__err *werr) {
  if (!atomic_exchange(&e->inject_error, false))
    return SL_STATUS_OK;
  return sl__err_set(werr, SL_STATUS_IO,
                     "read of %s at offset %llu failed: %s (injected by SHARDLOAD_INJECT_READ_ERROR)",
                     e->t->cat->files[f].path, (unsigned long long)off, strerror(EIO));
}

static sl_status pread_full(engine *e, int fd, uint32_t f, uint8_t *buf, uint64_t len, uint64_t off,
                            bool allow_short, sl__err *werr) {
  sl_status st = injected_failure(e, f, off, werr);
  uint64_t calls = 0;
  if (st == SL_STATUS_OK)
    st = sl__pread_full(fd, buf, len, off, allow_short, e->t->cat->files[f].path, NULL, &calls, werr);
  atomic_fetch_add(&e->read_ops, calls);
  return st;
}

/* Reads one operation into staging (or straight into its destination) and delivers it. */
static sl_status run_op(engine *e, int worker, int slot, uint8_t *staging, const sl__read_op *op,
                        sl__err *werr) {
  /* Files were opened by the main thread before the pool started (open_files). */
  int fd = e->fds[op->file];
  sl_status st = SL_STATUS_OK;
  if (op->populate) {
    st = injected_failure(e, op->file, op->offset, werr);
    if (st == SL_STATUS_OK)
      st = sl__filemap_populate(op->direct_dst, op->len, e->t->cat->files[op->file].path, op->offset, werr);
    if (st == SL_STATUS_OK) {
      const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first);
      atomic_fetch_add(&e->t->copy_done[e->copy_list[e->copy_start[d->piece]]], op->len);
      atomic_fetch_add(&e->bytes_mapped, op->len);
    }
  } else if (op->direct_dst != NULL) {
    st = pread_full(e, fd, op->file, op->direct_dst, op->len, op->offset, false, werr);
    if (st == SL_STATUS_OK) {
      const sl__delivery *d = &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first);
      uint32_t c = e->copy_list[e->copy_start[d->piece]];
      atomic_fetch_add(&e->t->copy_done[c], op->len);
    }
  } else if (op->rows > 1) {
    /* A row run (buffered strategies only): the rows land packed, one after the other. */
    uint64_t row = op->len / op->rows;
    for (uint32_t r = 0; r < op->rows && st == SL_STATUS_OK; r++)
      st = pread_full(e, fd, op->file, staging + r * row, row, op->offset + r * op->stride, false, werr);
    if (st == SL_STATUS_OK)
      st = deliver_from_read(e, worker, slot, &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first), staging, 0,
                             true, werr);
  } else {
    uint64_t off = op->offset;
    uint64_t len = op->len;
    bool widened = e->t->strategy == SL_STRATEGY_DIRECT;
    /* O_DIRECT: aligned offset, length and buffer; the tail may be short at end of file. */
    if (widened)
      sl__readplan_widen(op->offset, op->len, DIRECT_ALIGN, &off, &len);
    st = pread_full(e, fd, op->file, staging, len, off, widened, werr);
    for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++)
      st = deliver_from_read(e, worker, slot, &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first + i), staging,
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

typedef struct worker_arg {
  engine *e;
  int index;
} worker_arg;

/* Records a worker's error (the first one wins) and wakes everybody up. */
static void fail_pool(engine *e, const sl__err *werr) {
  pthread_mutex_lock(&e->mu);
  sl__err_copy(&e->pool_err, werr);
  atomic_store(&e->failed, true);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  engine *e = wa->e;
  int w = wa->index;
  sl__backend *be = e->t->backend;
  uint8_t *slots[SL_STAGING_RING_DEPTH] = {NULL};
  bool used[SL_STAGING_RING_DEPTH] = {false};
  sl__err werr;
  sl__err_clear(&werr);
  sl_status st = SL_STATUS_OK;
  for (int s = 0; s < SL_STAGING_RING_DEPTH && st == SL_STATUS_OK; s++) {
    void *p = NULL;
    st = be->ops->alloc_staging(be, e->staging_each, &p, &werr);
    slots[s] = p;
  }
  if (st != SL_STATUS_OK)
    fail_pool(e, &werr);
  int slot = 0;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !atomic_load(&e->failed) && e->hi_head == e->hi_tail && e->lo_head == e->lo_tail)
      pthread_cond_wait(&e->cv, &e->mu);
    if (e->stop || atomic_load(&e->failed)) {
      pthread_mutex_unlock(&e->mu);
      break;
    }
    uint32_t idx;
    if (e->hi_head != e->hi_tail)
      idx = e->queue_hi[e->hi_head++];
    else
      idx = e->queue_lo[e->lo_head++];
    pthread_mutex_unlock(&e->mu);
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
      fail_pool(e, &werr);
      break;
    }
    pthread_mutex_lock(&e->mu);
    if (op->bucket != SL_NONE)
      e->bucket_left[op->bucket]--;
    else
      e->local_left--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    slot = (slot + 1) % SL_STAGING_RING_DEPTH;
  }
  for (int s = 0; s < SL_STAGING_RING_DEPTH; s++) {
    if (used[s] && be->ops->upload_wait(be, w, s, &werr) != SL_STATUS_OK)
      fail_pool(e, &werr);
    if (slots[s] != NULL)
      be->ops->release_staging(be, slots[s]);
  }
  return NULL;
}

/* The io_uring strategy: the reader threads keep URING_DEPTH O_DIRECT reads in flight between
 * them (a deep queue, like fio), each thread with its own ring and aligned staging slots, and
 * deliver them as they complete. */
typedef struct inflight {
  uint32_t op;  /* SL_NONE when the slot is free */
  uint64_t off; /* file range read: the operation's, widened to O_DIRECT alignment */
  uint64_t len;
  uint64_t got; /* bytes read so far (short reads are resubmitted) */
  uint8_t *dst; /* the slot's staging buffer */
} inflight;

static sl_status uring_submit_rest(engine *e, sl__uring *u, uint32_t slot, const inflight *f, sl__err *werr) {
  const sl__read_op *op = &SL_VEC_AT(&e->rp.ops, sl__read_op, f->op);
  uint64_t left = f->len - f->got;
  uint32_t len = left > 0x40000000u ? 0x40000000u : (uint32_t)left;
  sl_status st = sl__uring_read(u, e->fds[op->file], f->dst + f->got, len, f->off + f->got, slot, werr);
  return st == SL_STATUS_OK ? sl__uring_submit(u, werr) : st;
}

static void *uring_worker_main(void *arg) {
  worker_arg *wa = arg;
  engine *e = wa->e;
  int w = wa->index;
  sl__backend *be = e->t->backend;
  sl__err werr;
  sl__err_clear(&werr);
  sl__uring *u = NULL;
  uint8_t *slots[URING_DEPTH] = {NULL};
  inflight fl[URING_DEPTH];
  /* The queue depth is shared by the reader threads, each with its own ring: the copies out of
   * staging (into memory touched for the first time) then run on every core. */
  uint32_t depth = URING_DEPTH / e->n_threads;
  depth = depth > 0 ? depth : 1;
  sl_status st = sl__uring_create(depth * 2, &u, &werr);
  for (uint32_t k = 0; k < URING_DEPTH; k++)
    fl[k].op = SL_NONE;
  for (uint32_t k = 0; k < depth; k++) {
    void *p = NULL;
    if (st == SL_STATUS_OK)
      st = be->ops->alloc_staging(be, e->staging_each, &p, &werr);
    slots[k] = p;
  }
  uint32_t busy = 0;
  while (st == SL_STATUS_OK) {
    /* Fill free slots from the queues (bucket reads first). */
    pthread_mutex_lock(&e->mu);
    while (busy == 0 && !e->stop && !atomic_load(&e->failed) && e->hi_head == e->hi_tail &&
           e->lo_head == e->lo_tail)
      pthread_cond_wait(&e->cv, &e->mu);
    bool quit = (busy == 0 && e->stop) || atomic_load(&e->failed);
    uint32_t take[URING_DEPTH];
    uint32_t n_take = 0;
    while (!quit && busy + n_take < depth && (e->hi_head != e->hi_tail || e->lo_head != e->lo_tail))
      take[n_take++] = e->hi_head != e->hi_tail ? e->queue_hi[e->hi_head++] : e->queue_lo[e->lo_head++];
    pthread_mutex_unlock(&e->mu);
    if (quit)
      break;
    for (uint32_t i = 0, k = 0; i < n_take && st == SL_STATUS_OK; i++) {
      while (fl[k].op != SL_NONE)
        k++;
      const sl__read_op *op = &SL_VEC_AT(&e->rp.ops, sl__read_op, take[i]);
      fl[k] = (inflight){.op = take[i], .got = 0, .dst = slots[k]};
      /* The files are opened with O_DIRECT: aligned ranges into aligned staging, trimmed after. */
      sl__readplan_widen(op->offset, op->len, DIRECT_ALIGN, &fl[k].off, &fl[k].len);
      st = uring_submit_rest(e, u, k, &fl[k], &werr);
      if (st == SL_STATUS_OK)
        busy++;
      else
        fl[k].op = SL_NONE;
    }
    if (st != SL_STATUS_OK || busy == 0)
      continue;
    uint64_t slot = 0;
    int32_t res = 0;
    st = sl__uring_wait(u, &slot, &res, &werr);
    if (st != SL_STATUS_OK)
      break;
    inflight *f = &fl[slot];
    const sl__read_op *op = &SL_VEC_AT(&e->rp.ops, sl__read_op, f->op);
    if (res < 0) {
      st = sl__err_set(&werr, SL_STATUS_IO, "read of %s at offset %llu failed: %s",
                       e->t->cat->files[op->file].path, (unsigned long long)(op->offset + f->got),
                       strerror(-res));
      f->op = SL_NONE; /* completed: nothing of it is in flight any more */
      busy--;
      break;
    }
    uint64_t needed = op->offset + op->len - f->off;
    f->got += (uint64_t)res;
    atomic_fetch_add(&e->read_ops, 1);
    /* A short read at the end of the file (the widened tail) is fine once the bytes needed are in. */
    bool at_end = res == 0 || (f->got < f->len && f->got % DIRECT_ALIGN != 0);
    if (at_end && f->got < needed) {
      st = sl__err_set(&werr, SL_STATUS_IO, "%s ended at offset %llu, before the expected end",
                       e->t->cat->files[op->file].path, (unsigned long long)(f->off + f->got));
      f->op = SL_NONE;
      busy--;
      break;
    }
    if (!at_end && f->got < f->len) {
      st = uring_submit_rest(e, u, (uint32_t)slot, f, &werr);
      if (st != SL_STATUS_OK) {
        f->op = SL_NONE; /* the rest was not submitted */
        busy--;
      }
      continue;
    }
    st = injected_failure(e, op->file, op->offset, &werr);
    for (uint32_t i = 0; i < op->count && st == SL_STATUS_OK; i++)
      st = deliver_from_read(e, w, 0, &SL_VEC_AT(&e->rp.dels, sl__delivery, op->first + i), f->dst, f->off,
                             false, &werr);
    /* The slot is reused right away: its uploads must be complete. */
    if (st == SL_STATUS_OK)
      st = be->ops->upload_wait(be, w, 0, &werr);
    /* Alignment widening is read but not needed: covering bytes. */
    atomic_fetch_add(&e->bytes_read, f->len);
    atomic_fetch_add(&e->bytes_covering, f->len - op->useful);
    atomic_fetch_add(&e->bytes_done, op->useful);
    pthread_mutex_lock(&e->mu);
    if (op->bucket != SL_NONE)
      e->bucket_left[op->bucket]--;
    else
      e->local_left--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    f->op = SL_NONE;
    busy--;
  }
  if (st != SL_STATUS_OK)
    fail_pool(e, &werr);
  /* Drain reads still in flight before their buffers go away. */
  while (busy > 0) {
    uint64_t slot = 0;
    int32_t res = 0;
    if (sl__uring_wait(u, &slot, &res, &werr) != SL_STATUS_OK)
      break;
    /* Each slot has one read in flight: its completion frees it (nothing is resubmitted). */
    busy--;
  }
  for (uint32_t k = 0; k < URING_DEPTH; k++)
    if (slots[k] != NULL)
      be->ops->release_staging(be, slots[k]);
  sl__uring_destroy(u);
  return NULL;
}

static void push_bucket_ops(engine *e, size_t j) {
  pthread_mutex_lock(&e->mu);
  for (uint32_t i = e->bucket_ops_start[j]; i < e->bucket_ops_start[j + 1]; i++)
    e->queue_hi[e->hi_tail++] = e->bucket_op_list[i];
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void progress_line(engine *e, bool final) {
  if (!e->t->progress)
    return;
  static double last;
  double now = sl__now();
  if (!final && now - last < 0.25)
    return;
  last = now;
  uint64_t done = atomic_load(&e->bytes_done);
  double el = now - e->t_start;
  double rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 ? (double)(e->bytes_total - done) / rate : 0;
  char a[32], b[32];
  sl__fmt_bytes(a, sizeof a, done);
  sl__fmt_bytes(b, sizeof b, e->bytes_total);
  fprintf(stderr, "\r[shardload 0] read %s / %s  %.1f MB/s  ETA %.0f s   %s", a, b, rate / 1e6, eta,
          final ? "\n" : "");
  fflush(stderr);
}

/* Waits until pred holds, polling the abort channel (main thread only: it may call MPI). */
static sl_status wait_for(engine *e, bool (*pred)(engine *, void *), void *arg, bool *aborted) {
  *aborted = false;
  pthread_mutex_lock(&e->mu);
  while (!pred(e, arg)) {
    if (atomic_load(&e->failed)) {
      pthread_mutex_unlock(&e->mu);
      return SL_STATUS_IO;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 2000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    pthread_mutex_unlock(&e->mu);
    progress_line(e, false);
    if (sl__comm_abort_check(e->t->comm)) {
      *aborted = true;
      return SL_STATUS_OK;
    }
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return SL_STATUS_OK;
}

static bool bucket_ready(engine *e, void *arg) {
  return e->bucket_left[*(size_t *)arg] == 0;
}
static bool locals_done(engine *e, void *arg) {
  (void)arg;
  return e->local_left == 0;
}

/* ---------------------------------------------------------------------------------------------
 * 4. Orchestration
 * ------------------------------------------------------------------------------------------- */

static void engine_free(engine *e) {
  free(e->copy_start);
  free(e->copy_list);
  free(e->my_buckets);
  free(e->bucket_of_global);
  sl__readplan_free(&e->rp);
  free(e->bucket_ops_start);
  free(e->bucket_op_list);
  sl__vec_free(&e->local_ops);
  if (e->fds != NULL) {
    for (size_t f = 0; f < e->t->cat->n_files; f++)
      if (e->fds[f] >= 0)
        close(e->fds[f]);
  }
  free(e->fds);
  /* A broadcast abandoned by an abort may still write into its bucket whenever MPI progresses
   * (in any later MPI call of this process): that bucket is deliberately never released. */
  for (int s = 0; s < BUCKET_SLOTS; s++)
    if (e->slot_buf[s] != NULL && !e->slot_abandoned[s])
      e->t->backend->ops->release(e->t->backend, e->slot_buf[s]);
  free(e->queue_hi);
  free(e->queue_lo);
  free(e->bucket_left);
  free(e->threads);
}

static sl_status index_copies(engine *e) {
  const sl__schedule *s = e->t->sched;
  const sl__rank_plan *p = e->t->plan;
  e->copy_start = calloc(s->n_pieces + 2, sizeof *e->copy_start);
  e->copy_list = calloc(p->n_copies + 1, sizeof *e->copy_list);
  if (e->copy_start == NULL || e->copy_list == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory indexing copies");
  for (size_t c = 0; c < p->n_copies; c++)
    e->copy_start[p->copies[c].piece + 1]++;
  for (size_t k = 0; k < s->n_pieces; k++)
    e->copy_start[k + 1] += e->copy_start[k];
  uint32_t *fill = calloc(s->n_pieces + 1, sizeof *fill);
  if (fill == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory indexing copies");
  for (size_t c = 0; c < p->n_copies; c++) {
    uint32_t k = p->copies[c].piece;
    e->copy_list[e->copy_start[k] + fill[k]++] = (uint32_t)c;
  }
  free(fill);
  /* My buckets: those whose group contains me, in global order. */
  uint32_t me = (uint32_t)e->t->comm->rank;
  e->my_buckets = calloc(s->n_buckets + 1, sizeof *e->my_buckets);
  if (e->my_buckets == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory indexing buckets");
  for (size_t b = 0; b < s->n_buckets; b++) {
    const sl__group *g = &s->groups[s->buckets[b].group];
    for (uint32_t j = 0; j < g->n; j++) {
      if (s->group_members[g->off + j] == me) {
        e->my_buckets[e->n_my_buckets++] = (uint32_t)b;
        break;
      }
    }
  }
  return SL_STATUS_OK;
}

static int group_rank_of(const sl__schedule *s, uint32_t g, uint32_t rank) {
  const sl__group *gr = &s->groups[g];
  for (uint32_t j = 0; j < gr->n; j++)
    if (s->group_members[gr->off + j] == rank)
      return (int)j;
  return -1;
}

static sl_status start_pool(engine *e) {
  sl__transfer *t = e->t;
  e->n_threads = t->workers > 0 ? t->workers : 1;
  if (t->strategy == SL_STRATEGY_IO_URING && e->n_threads > URING_DEPTH)
    e->n_threads = URING_DEPTH;
  e->staging_each = t->chunk + 2 * DIRECT_ALIGN;
  e->threads = calloc(e->n_threads, sizeof *e->threads);
  e->queue_hi = calloc(e->rp.ops.len + 1, sizeof *e->queue_hi);
  e->queue_lo = calloc(e->rp.ops.len + 1, sizeof *e->queue_lo);
  if (e->threads == NULL || e->queue_hi == NULL || e->queue_lo == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory starting readers");
  for (size_t i = 0; i < e->local_ops.len; i++)
    e->queue_lo[e->lo_tail++] = SL_VEC_AT(&e->local_ops, uint32_t, i);
  return SL_STATUS_OK;
}

sl_status sl__transfer_run(sl__transfer *t, sl__transfer_stats *stats, sl__err *err) {
  memset(stats, 0, sizeof *stats);
  engine e;
  memset(&e, 0, sizeof e);
  e.t = t;
  e.err = err;
  sl__readplan_init(&e.rp);
  sl__vec_init(&e.local_ops, sizeof(uint32_t));
  sl__err_clear(&e.pool_err);
  atomic_init(&e.failed, false);
  atomic_init(&e.bytes_read, 0);
  atomic_init(&e.bytes_covering, 0);
  atomic_init(&e.read_ops, 0);
  atomic_init(&e.bytes_mapped, 0);
  atomic_init(&e.bytes_done, 0);
  /* Test hook (like sqlite's fault injection): SHARDLOAD_INJECT_READ_ERROR=<rank> makes the first
   * read of that rank fail, to exercise the failure agreement. */
  const char *inject = getenv("SHARDLOAD_INJECT_READ_ERROR");
  uint64_t inject_rank = 0;
  atomic_init(&e.inject_error, inject != NULL && sl__parse_u64(inject, &inject_rank) &&
                                   inject_rank == (uint64_t)t->comm->rank);
  pthread_mutex_init(&e.mu, NULL);
  pthread_cond_init(&e.cv, NULL);
  double t0 = sl__now();
  e.t_start = t0;
  uint32_t me = (uint32_t)t->comm->rank;
  bool aborted = false;
  sl_status st = index_copies(&e);
  /* The chunk (t->chunk) already fits the staging budget (sl__effective_chunk); the bucket slots
   * are as large as this rank's largest bucket. */
  for (size_t j = 0; st == SL_STATUS_OK && j < e.n_my_buckets; j++) {
    uint64_t n = t->sched->buckets[e.my_buckets[j]].nbytes;
    e.slot_bytes = n > e.slot_bytes ? n : e.slot_bytes;
  }
  if (st == SL_STATUS_OK)
    st = build_reads(&e);
  e.fds = calloc(t->cat->n_files + 1, sizeof *e.fds);
  if (st == SL_STATUS_OK && e.fds == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t f = 0; e.fds != NULL && f < t->cat->n_files; f++)
    e.fds[f] = -1;
  if (st == SL_STATUS_OK)
    st = open_files(&e);
  for (int s = 0; s < BUCKET_SLOTS && st == SL_STATUS_OK && e.n_my_buckets > 0; s++)
    st = t->backend->ops->alloc(t->backend, e.slot_bytes, &e.slot_buf[s], err);
  if (st == SL_STATUS_OK)
    st = start_pool(&e);
  uint32_t started = 0;
  worker_arg *args = st == SL_STATUS_OK ? calloc(e.n_threads, sizeof *args) : NULL;
  if (st == SL_STATUS_OK && args == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (uint32_t i = 0; i < e.n_threads && st == SL_STATUS_OK; i++) {
    args[i] = (worker_arg){.e = &e, .index = (int)i};
    void *(*fn)(void *) = t->strategy == SL_STRATEGY_IO_URING ? uring_worker_main : worker_main;
    if (pthread_create(&e.threads[i], NULL, fn, &args[i]) != 0)
      st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot start reader thread %u", i);
    else
      started++;
  }
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(t->comm);
  /* Bucket loop: every rank walks its buckets in the global order. */
  double t_bcast = 0;
  for (size_t j = 0; j < BUCKET_SLOTS && j < e.n_my_buckets && st == SL_STATUS_OK; j++)
    push_bucket_ops(&e, j);
  for (size_t j = 0; j < e.n_my_buckets && st == SL_STATUS_OK && !aborted; j++) {
    if (atomic_load(&e.failed))
      break;
    const sl__bucket *b = &t->sched->buckets[e.my_buckets[j]];
    if (b->reader == me) {
      st = wait_for(&e, bucket_ready, &j, &aborted);
      if (st != SL_STATUS_OK || aborted)
        break;
    }
    double tb = sl__now();
    int root = group_rank_of(t->sched, b->group, b->reader);
    st = t->backend->ops->bcast(t->backend, b->group, e.slot_buf[j % BUCKET_SLOTS], b->nbytes, root, &aborted,
                                err);
    t_bcast += sl__now() - tb;
    if (aborted)
      e.slot_abandoned[j % BUCKET_SLOTS] = true;
    if (st != SL_STATUS_OK || aborted)
      break;
    stats->buckets++;
    if (b->reader == me)
      stats->bytes_sent += b->nbytes;
    else
      stats->bytes_received += b->nbytes;
    st = scatter_bucket(&e, (uint32_t)j);
    if (st == SL_STATUS_OK)
      st = t->backend->ops->sync(t->backend, err);
    if (st == SL_STATUS_OK && j + BUCKET_SLOTS < e.n_my_buckets)
      push_bucket_ops(&e, j + BUCKET_SLOTS);
  }
  if (st == SL_STATUS_OK && !aborted)
    st = wait_for(&e, locals_done, NULL, &aborted);
  progress_line(&e, true);
  /* Stop and join the pool whatever happened. */
  pthread_mutex_lock(&e.mu);
  e.stop = true;
  pthread_cond_broadcast(&e.cv);
  pthread_mutex_unlock(&e.mu);
  for (uint32_t i = 0; i < started; i++)
    pthread_join(e.threads[i], NULL);
  free(args);
  if (atomic_load(&e.failed)) {
    if (e.pool_err.status == SL_STATUS_OK)
      sl__err_set(&e.pool_err, SL_STATUS_IO, "a reader thread failed");
    sl__err_copy(err, &e.pool_err);
    st = st == SL_STATUS_OK || st == SL_STATUS_IO ? e.pool_err.status : st;
  }
  if (st == SL_STATUS_OK && !aborted)
    st = t->backend->ops->sync(t->backend, err);
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(t->comm);
  if (st == SL_STATUS_OK && aborted)
    st = sl__err_set(err, SL_STATUS_PEER_FAILED,
                     "another rank failed during the load (rank %d raised the abort)", t->comm->abort_from);
  stats->bytes_read = atomic_load(&e.bytes_read);
  stats->bytes_covering = atomic_load(&e.bytes_covering);
  stats->read_ops = atomic_load(&e.read_ops);
  stats->bytes_mapped = atomic_load(&e.bytes_mapped);
  for (size_t f = 0; e.fds != NULL && f < t->cat->n_files; f++)
    stats->files_opened += e.fds[f] >= 0;
  stats->bcast_seconds = t_bcast;
  stats->seconds = sl__now() - t0;
  stats->read_seconds = stats->seconds - t_bcast;
  engine_free(&e);
  pthread_cond_destroy(&e.cv);
  pthread_mutex_destroy(&e.mu);
  return st;
}
