/*
 * engine/reads.c — the read operations of this rank (see engine/engine.h): the pieces it reads
 * alone first, in file order, then the items of the buckets it is the reader of and its rows of
 * two-phase exchange rounds (engine/exchange.c), in bucket order; and the files they read, opened
 * once before the readers start (and before the operations are planned: how each file is read,
 * engine/file_choice.c, shapes its operations). Owns sl__engine_reads and the descriptors and
 * stamps of sl__engine_files (engine/engine.h).
 */
#include "engine/engine.h"

#include "base/log.h"
#include "engine/file_gate.h"
#include "plan/twophase.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read operations for packed range [p0, p1) of piece P (a whole piece, or one bucket item). A
 * local piece with one contiguous copy in host memory is read straight into the parameter when its
 * file is read through the page cache, or, when that parameter is a mapping of the piece's bytes,
 * populated in place (whatever the rest of the file is read with). Not a parameter converted on
 * delivery (sl_loader_bind_as) nor one held transposed: its bytes go through staging, where
 * engine/deliver.c converts or transposes them. */
static sl_status plan_piece_reads(sl__engine *e, const sl__piece *P, uint64_t p0, uint64_t p1,
                                  uint32_t bucket, uint64_t bucket_off) {
  uint32_t piece = (uint32_t)(P - e->t->sched->pieces);
  uint8_t *direct = NULL;
  bool populate = false;
  bool buffered = !e->files.choice[e->t->cat->tensors[P->tensor].file].direct;
  if (bucket == SL_NONE && P->rows <= 1 && e->t->backend->host_addressable &&
      e->copy_start[piece + 1] - e->copy_start[piece] == 1 &&
      !sl__engine_rearranges(e->t, e->t->plan->copies[e->copy_list[e->copy_start[piece]]].lparam)) {
    const sl__copy *cp = &e->t->plan->copies[e->copy_list[e->copy_start[piece]]];
    populate = e->t->param_mapped != NULL && e->t->param_mapped[cp->lparam];
    if (buffered || populate)
      direct = (uint8_t *)e->t->param_ptr[cp->lparam] + cp->dst_off;
  }
  size_t first = e->reads.rp.ops.len;
  sl_status st = sl__readplan_piece(&e->reads.rp, P, piece, &e->t->cat->tensors[P->tensor], p0, p1, bucket,
                                    bucket_off, direct, e->t->chunk, e->t->coalesce_gap, buffered, e->err);
  for (size_t i = first; i < e->reads.rp.ops.len && populate; i++)
    SL_VEC_AT(&e->reads.rp.ops, sl__read_op, i).populate = true;
  return st;
}

/* The queues' view of the operations: local ones, and per bucket its range of bucket ones. */
static sl_status index_ops(sl__engine *e, size_t n_local) {
  for (size_t i = 0; i < n_local; i++) {
    uint32_t *x = sl__vec_push(&e->reads.local_ops);
    if (x == NULL)
      return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
    *x = (uint32_t)i;
  }
  e->reads.bucket_op_list = calloc(e->reads.rp.ops.len - n_local + 1, sizeof *e->reads.bucket_op_list);
  if (e->reads.bucket_op_list == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
  for (size_t i = n_local; i < e->reads.rp.ops.len; i++)
    e->reads.bucket_op_list[i - n_local] = (uint32_t)i;
  return SL_STATUS_OK;
}

void sl__engine_reads_init(sl__engine *e) {
  sl__readplan_init(&e->reads.rp);
  sl__vec_init(&e->reads.local_ops, sizeof(uint32_t));
}

void sl__engine_reads_free(sl__engine *e) {
  sl__readplan_free(&e->reads.rp);
  free(e->reads.bucket_ops_start);
  free(e->reads.bucket_op_list);
  sl__vec_free(&e->reads.local_ops);
}

sl_status sl__engine_build_reads(sl__engine *e) {
  sl__transfer *t = e->t;
  const sl__schedule *s = t->sched;
  uint32_t me = (uint32_t)t->comm->rank;
  sl_status st = SL_STATUS_OK;
  /* Local-only pieces first, in file order; then bucket items in bucket order. */
  for (size_t k = 0; k < s->n_pieces && st == SL_STATUS_OK; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->reader != me || P->group != SL_NONE || P->nbytes == 0 || P->xchg != SL_NONE)
      continue;
    st = plan_piece_reads(e, P, 0, P->nbytes, SL_NONE, 0);
  }
  size_t n_local = e->reads.rp.ops.len;
  e->reads.bucket_ops_start = calloc(e->buckets.n_mine + 1, sizeof *e->reads.bucket_ops_start);
  if (st == SL_STATUS_OK && e->reads.bucket_ops_start == NULL)
    st = sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory planning reads");
  for (size_t j = 0; j < e->buckets.n_mine && st == SL_STATUS_OK; j++) {
    e->reads.bucket_ops_start[j] = (uint32_t)(e->reads.rp.ops.len - n_local);
    const sl__bucket *b = &s->buckets[e->buckets.mine[j]];
    if (b->xchg != SL_NONE) {
      st = sl__engine_exchange_reads(e, b, (uint32_t)j);
      continue;
    }
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
  e->reads.bucket_ops_start[e->buckets.n_mine] = (uint32_t)(e->reads.rp.ops.len - n_local);
  return index_ops(e, n_local);
}

/* Opens file f into e->files.fds[f], through the page cache until the choice turns O_DIRECT on
 * (engine/file_choice.c), checked before any byte is used: by the load's table of files (its
 * descriptor, opened once for the whole load, engine/file_table.h), or else here against the
 * catalog. The identity it was accepted with is kept for the change check after the last read. */
static sl_status open_file(sl__engine *e, uint32_t f, sl__err *err) {
  sl__transfer *t = e->t;
  if (sl__cat_file_remote(t->cat, f)) /* an object of a store: read with ranged GETs (engine/remote.c) */
    return SL_STATUS_OK;
  int fd = -1;
  sl_status st = SL_STATUS_OK;
  if (t->files != NULL) {
    st = sl__file_table_get(t->files, t->cat, f, &fd, err);
    if (st != SL_STATUS_OK)
      return st;
    e->files.stamps[f] = t->files->stamps[f];
  } else {
    fd = open(t->cat->files[f].path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return sl__err_set(err, SL_STATUS_IO, "cannot open %s: %s", t->cat->files[f].path, strerror(errno));
    st = sl__cat_file_check(t->cat, f, fd, &e->files.stamps[f], err);
    if (st != SL_STATUS_OK) {
      close(fd);
      return st;
    }
  }
  /* Ranks on several nodes: no read-ahead past the plan's reads. The kernel's read-ahead runs on
   * past the end of each read into the next rank's range, which on another node is a second pull
   * of those bytes into this one (docs/PERFORMANCE.md §13). On one node it stays: what it reads
   * past a range is another rank's, read once for both. */
  if (!t->one_node)
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  e->files.fds[f] = fd;
  /* An ordering event for the logs (and the tests): a read starts while files still arrive. */
  if (t->gate != NULL)
    SL_INFO("reading %s (%llu of %zu files complete)", t->cat->files[f].name,
            (unsigned long long)sl__file_gate_opened(t->gate), t->cat->n_files);
  return SL_STATUS_OK;
}

/* Opens file f now unless it is open or still downloading (then sl__engine_fd opens it on first
 * use; with nothing to measure, it is read through the page cache, where the download put it). */
static sl_status open_now(sl__engine *e, uint32_t f) {
  if (e->files.fds[f] >= 0 || (e->t->gate != NULL && !sl__file_gate_is_open(e->t->gate, f)))
    return SL_STATUS_OK;
  return open_file(e, f, e->err);
}

sl_status sl__engine_open_files(sl__engine *e) {
  sl__transfer *t = e->t;
  const sl__schedule *s = t->sched;
  e->files.fds = calloc(t->cat->n_files + 1, sizeof *e->files.fds);
  e->files.stamps = calloc(t->cat->n_files + 1, sizeof *e->files.stamps);
  if (e->files.fds == NULL || e->files.stamps == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t f = 0; f < t->cat->n_files; f++)
    e->files.fds[f] = -1;
  sl_status st = SL_STATUS_OK;
  for (size_t k = 0; k < s->n_pieces && st == SL_STATUS_OK; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->reader == (uint32_t)t->comm->rank && P->nbytes > 0)
      st = open_now(e, t->cat->tensors[P->tensor].file);
  }
  /* A member of a two-phase exchange reads rows of its tensor even where it reads no piece of
   * that file (a replica whose column block another rank reads). */
  for (size_t j = 0; j < e->buckets.n_mine && st == SL_STATUS_OK; j++) {
    const sl__bucket *b = &s->buckets[e->buckets.mine[j]];
    if (b->xchg != SL_NONE)
      st = open_now(e, t->cat->tensors[s->xchgs[b->xchg].tensor].file);
  }
  return st == SL_STATUS_OK ? sl__engine_choose(e) : st;
}

sl_status sl__engine_fd(sl__engine *e, uint32_t f, int *fd, sl__err *werr) {
  sl__file_gate *g = e->t->gate;
  if (g == NULL) {
    *fd = e->files.fds[f]; /* opened before the readers started */
    return SL_STATUS_OK;
  }
  sl_status st = sl__file_gate_wait(g, f, sl__engine_stopping, &e->pool, werr);
  if (st == SL_STATUS_PEER_FAILED)
    return sl__err_set(werr, st, "the load stopped while %s was still downloading", e->t->cat->files[f].path);
  pthread_mutex_lock(&e->pool.mu);
  if (st == SL_STATUS_OK && e->files.fds[f] < 0)
    st = open_file(e, f, werr);
  *fd = e->files.fds[f];
  pthread_mutex_unlock(&e->pool.mu);
  return st;
}

sl_status sl__engine_check_files(sl__engine *e) {
  for (size_t f = 0; e->files.fds != NULL && f < e->t->cat->n_files; f++) {
    if (e->files.fds[f] < 0)
      continue;
    sl_status st = sl__cat_file_check(e->t->cat, (uint32_t)f, e->files.fds[f], &e->files.stamps[f], e->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

void sl__engine_files_close(sl__engine *e) {
  if (e->files.fds != NULL && e->t->files == NULL) { /* the load's table keeps its own */
    for (size_t f = 0; f < e->t->cat->n_files; f++)
      if (e->files.fds[f] >= 0)
        close(e->files.fds[f]);
  }
  free(e->files.fds);
  e->files.fds = NULL;
  sl__engine_rowmaps_free(e);
  sl__engine_remote_close(e);
  free(e->files.stamps);
  e->files.stamps = NULL;
  free(e->files.choice);
  e->files.choice = NULL;
}
