/*
 * engine/transfer.c — one rank's reads, deliveries and bucket broadcasts (see engine/transfer.h):
 * the run and its steps. The jobs themselves are in the files listed in engine/engine.h.
 *
 * The run: index this rank's copies and buckets, open the files and choose how each is read,
 * build the read operations, allocate the bucket slots, start the reader threads (pread pool or io_uring
 * readers, sized by engine/staging.h), walk the buckets, wait for the local reads, stop the threads, agree on
 * the outcome, report the figures.
 */
#include "engine/engine.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/file_gate.h"
#include "plan/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool locals_done(sl__engine *e, void *arg) {
  (void)arg;
  return e->local_left == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------------------------- */

static void engine_init(sl__engine *e, sl__transfer *t, sl__err *err) {
  memset(e, 0, sizeof *e);
  e->t = t;
  e->err = err;
  sl__readplan_init(&e->rp);
  sl__vec_init(&e->local_ops, sizeof(uint32_t));
  sl__err_clear(&e->pool_err);
  atomic_init(&e->failed, false);
  atomic_init(&e->bytes_read, 0);
  atomic_init(&e->bytes_covering, 0);
  atomic_init(&e->read_ops, 0);
  atomic_init(&e->bytes_mapped, 0);
  atomic_init(&e->bytes_done, 0);
  /* Test hook (like sqlite's fault injection): SHARDLOAD_INJECT_READ_ERROR=<rank> makes the first
   * read of that rank fail, to exercise the failure agreement. */
  const char *inject = getenv("SHARDLOAD_INJECT_READ_ERROR");
  uint64_t inject_rank = 0;
  atomic_init(&e->inject_error, inject != NULL && sl__parse_u64(inject, &inject_rank) &&
                                    inject_rank == (uint64_t)t->comm->rank);
  /* SHARDLOAD_INJECT_READ_DELAY_MS=<ms>: every read operation sleeps first, so that a test can
   * act while a load is running (kill or stop a rank, rewrite a file). */
  const char *delay = getenv("SHARDLOAD_INJECT_READ_DELAY_MS");
  uint64_t delay_ms = 0;
  if (delay != NULL && sl__parse_u64(delay, &delay_ms))
    e->inject_delay_us = delay_ms * 1000;
  /* The reader threads and their staging slots. The chunk (t->chunk) already fits the staging
   * budget: the planner's options came from the same split. */
  sl__staging_req req = {.staging_bytes = SL_STAGING_UNBOUNDED,
                         .read_chunk = t->chunk,
                         .workers = t->workers,
                         .uring = t->strategy == SL_STRATEGY_IO_URING};
  sl__staging_split(&req, &e->staging);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  pthread_mutex_init(&e->cast_mu, NULL);
  sl__vec_init(&e->cast_partial, sizeof(sl__cast_partial));
  e->t_start = sl__now();
}

static void engine_free(sl__engine *e) {
  free(e->copy_start);
  free(e->copy_list);
  free(e->my_buckets);
  sl__readplan_free(&e->rp);
  free(e->bucket_ops_start);
  free(e->bucket_op_list);
  sl__vec_free(&e->local_ops);
  if (e->fds != NULL && e->t->files == NULL) { /* the load's table keeps its own */
    for (size_t f = 0; f < e->t->cat->n_files; f++)
      if (e->fds[f] >= 0)
        close(e->fds[f]);
  }
  free(e->fds);
  sl__engine_rowmaps_free(e);
  sl__engine_remote_close(e);
  free(e->stamps);
  free(e->choice);
  /* A broadcast abandoned by an abort may still write into its bucket whenever MPI progresses
   * (in any later MPI call of this process): that bucket is deliberately never released, unless
   * the backend's abort ended the broadcast (NCCL's). */
  bool keep_abandoned = !e->t->backend->abort_stops_bcast;
  for (uint32_t s = 0; s < SL_BUCKET_SLOTS_MAX; s++) {
    if (e->slot_buf[s] != NULL && !(e->slot_abandoned[s] && keep_abandoned))
      e->t->backend->ops->release(e->t->backend, e->slot_buf[s]);
    if (s < SL_BUCKET_SLOTS && e->xbuf_own && e->xbuf[s] != NULL && !e->slot_abandoned[s])
      e->t->backend->ops->release_staging(e->t->backend, e->xbuf[s]);
  }
  free(e->queue_hi);
  free(e->queue_lo);
  free(e->bucket_left);
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  sl__vec_free(&e->cast_partial);
  pthread_mutex_destroy(&e->cast_mu);
}

/* My pieces' local copies (CSR by piece) and my buckets: those whose group contains me, in
 * global order. */
static sl_status index_copies(sl__engine *e) {
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
  uint32_t me = (uint32_t)e->t->comm->rank;
  e->my_buckets = calloc(s->n_buckets + 1, sizeof *e->my_buckets);
  if (e->my_buckets == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory indexing buckets");
  for (size_t b = 0; b < s->n_buckets; b++) {
    const sl__group *g = &s->groups[s->buckets[b].group];
    for (uint32_t j = 0; sl__group_listed(s, s->buckets[b].group) && j < g->n; j++) {
      if (s->group_members[g->off + j] == me) {
        e->my_buckets[e->n_my_buckets++] = (uint32_t)b;
        break;
      }
    }
  }
  return SL_STATUS_OK;
}

/* Everything before the threads: indexes, open files and how each is read, read operations,
 * bucket slots (as large as this rank's largest bucket), the queues with the local reads. */
static sl_status prepare(sl__engine *e) {
  sl__transfer *t = e->t;
  sl_status st = index_copies(e);
  for (size_t j = 0; st == SL_STATUS_OK && j < e->n_my_buckets; j++) {
    const sl__bucket *b = &t->sched->buckets[e->my_buckets[j]];
    uint64_t *max = b->xchg != SL_NONE ? &e->xbuf_bytes : &e->slot_bytes;
    *max = b->nbytes > *max ? b->nbytes : *max;
  }
  /* Exchange rounds use the bucket slots where they are host memory, else staging memory. */
  bool host = t->backend->host_addressable;
  if (host && e->xbuf_bytes > e->slot_bytes)
    e->slot_bytes = e->xbuf_bytes;
  e->fds = calloc(t->cat->n_files + 1, sizeof *e->fds);
  e->stamps = calloc(t->cat->n_files + 1, sizeof *e->stamps);
  if (st == SL_STATUS_OK && (e->fds == NULL || e->stamps == NULL))
    st = sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t f = 0; e->fds != NULL && f < t->cat->n_files; f++)
    e->fds[f] = -1;
  if (st == SL_STATUS_OK)
    st = sl__engine_remote_open(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_open_files(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_build_reads(e);
  /* More buckets in rotation where the backend has room (device memory): the readers fill buckets
   * further ahead of the broadcasts. Not with exchange rounds, whose buffers rotate with them. */
  e->n_slots = SL_BUCKET_SLOTS;
  if (st == SL_STATUS_OK && e->xbuf_bytes == 0 && e->slot_bytes > 0 &&
      t->backend->ops->bucket_slots != NULL) {
    uint32_t n = t->backend->ops->bucket_slots(t->backend, e->slot_bytes);
    e->n_slots = n < SL_BUCKET_SLOTS ? SL_BUCKET_SLOTS : n > SL_BUCKET_SLOTS_MAX ? SL_BUCKET_SLOTS_MAX : n;
  }
  for (uint32_t s = 0; s < e->n_slots && st == SL_STATUS_OK && e->slot_bytes > 0; s++)
    st = t->backend->ops->alloc(t->backend, e->slot_bytes, &e->slot_buf[s], e->err);
  e->xbuf_own = !host && e->xbuf_bytes > 0;
  for (uint32_t s = 0; s < SL_BUCKET_SLOTS && st == SL_STATUS_OK && e->xbuf_bytes > 0; s++) {
    void *p = e->slot_buf[s];
    if (e->xbuf_own)
      st = t->backend->ops->alloc_staging(t->backend, e->xbuf_bytes, &p, e->err);
    e->xbuf[s] = p;
  }
  if (st != SL_STATUS_OK)
    return st;
  e->n_threads = e->staging.threads;
  e->queue_hi = calloc(e->rp.ops.len + 1, sizeof *e->queue_hi);
  e->queue_lo = calloc(e->rp.ops.len + 1, sizeof *e->queue_lo);
  if (e->queue_hi == NULL || e->queue_lo == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory starting readers");
  for (size_t i = 0; i < e->local_ops.len; i++)
    e->queue_lo[e->lo_tail++] = SL_VEC_AT(&e->local_ops, uint32_t, i);
  return SL_STATUS_OK;
}

/* Starts the reader threads (base/workers.h); the ones that started run even when this fails. */
static sl_status start_readers(sl__engine *e, sl__engine_worker *args) {
  void *(*fn)(void *) =
      e->t->strategy == SL_STRATEGY_IO_URING ? sl__engine_uring_worker : sl__engine_pread_worker;
  for (uint32_t i = 0; i < e->n_threads; i++)
    args[i] = (sl__engine_worker){.e = e, .index = (int)i};
  return sl__workers_start(&e->threads, e->n_threads, fn, args, sizeof *args, "reader", e->err);
}

/* Stops and joins the reader threads whatever happened; a reader's error becomes the run's. */
static sl_status stop_readers(sl__engine *e, sl_status st) {
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  /* A reader inside a read that never returns (storage gone) would hold the join forever. */
  sl__comm_block_begin(e->t->comm, "joining the reader threads");
  sl__workers_join(&e->threads);
  sl__comm_block_end(e->t->comm);
  if (atomic_load(&e->failed)) {
    if (e->pool_err.status == SL_STATUS_OK)
      sl__err_set(&e->pool_err, SL_STATUS_IO, "a reader thread failed");
    sl__err_copy(e->err, &e->pool_err);
    st = st == SL_STATUS_OK || st == SL_STATUS_IO ? e->pool_err.status : st;
  }
  return st;
}

static void report(sl__engine *e, sl__transfer_stats *stats, double t_bcast) {
  stats->bytes_read = atomic_load(&e->bytes_read);
  stats->bytes_covering = atomic_load(&e->bytes_covering);
  stats->read_ops = atomic_load(&e->read_ops);
  stats->bytes_mapped = atomic_load(&e->bytes_mapped);
  for (size_t f = 0; e->fds != NULL && f < e->t->cat->n_files; f++) {
    stats->files_opened += e->fds[f] >= 0;
    stats->files_mapped += e->choice != NULL && e->choice[f].in.bytes_mapped > 0;
    stats->files_direct += e->choice != NULL && e->choice[f].direct;
  }
  stats->choice = e->choice; /* the stats own it now */
  e->choice = NULL;
  stats->bcast_seconds = t_bcast;
  stats->seconds = sl__now() - e->t_start;
  stats->read_seconds = stats->seconds - t_bcast;
}

/* ---------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------- */

void sl__transfer_stats_free(sl__transfer_stats *stats) {
  free(stats->choice);
  stats->choice = NULL;
}

sl_status sl__transfer_run(sl__transfer *t, sl__transfer_stats *stats, sl__err *err) {
  memset(stats, 0, sizeof *stats);
  sl__engine e;
  engine_init(&e, t, err);
  sl_status st = prepare(&e);
  /* No rank reads before every rank has opened its files. Some network file systems drop a file's
   * cached pages whenever any process opens it (FUSE mounts without keep_cache, such as sshfs:
   * there a file read, opened again and read again crossed the node's link twice): a rank of the
   * same node still opening a file would throw away what another rank had read or mapped of it.
   * The agreement also tells every rank at once that one of them could not open or prepare. */
  const char *phase = t->comm->phase;
  st = sl__comm_agree(t->comm, st, err, "opening the checkpoint files");
  sl__comm_phase(t->comm, phase);
  sl__engine_worker *args = st == SL_STATUS_OK ? calloc(e.n_threads, sizeof *args) : NULL;
  if (st == SL_STATUS_OK && args == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK) {
    SL_INFO("transfer: %zu read operations, %zu buckets", e.rp.ops.len, e.n_my_buckets);
    st = start_readers(&e, args);
  }
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(t->comm);
  /* Buckets in the global order, then the local reads. */
  double t_bcast = 0;
  bool aborted = false;
  if (st == SL_STATUS_OK)
    st = sl__engine_run_buckets(&e, stats, &t_bcast, &aborted);
  if (st == SL_STATUS_OK && !aborted)
    st = sl__engine_wait_for(&e, locals_done, NULL, &aborted);
  st = stop_readers(&e, st);
  /* The reads are over: a file changed meanwhile may have given bytes of two versions. */
  if (st == SL_STATUS_OK && !aborted)
    st = sl__engine_check_files(&e);
  if (st == SL_STATUS_OK && !aborted)
    st = sl__engine_cast_check(&e);
  free(args);
  if (st == SL_STATUS_OK && !aborted)
    st = t->backend->ops->sync(t->backend, err);
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(t->comm);
  if (st == SL_STATUS_OK && aborted)
    st = sl__err_set(err, SL_STATUS_PEER_FAILED,
                     "another rank failed during the load (rank %d raised the abort)", t->comm->abort_from);
  report(&e, stats, t_bcast);
  engine_free(&e);
  return st;
}

sl_status sl__transfer_finish(sl__comm *comm, sl__backend *backend, sl_status st, sl__err *err) {
  sl__err derr;
  sl__err_clear(&derr);
  sl_status dst = sl__comm_abort_disarm(comm, &derr);
  if (st == SL_STATUS_OK && dst != SL_STATUS_OK) {
    sl__err_copy(err, &derr);
    st = dst;
  }
  st = sl__comm_agree(comm, st, err, "loading");
  if (st != SL_STATUS_OK || backend->ops->end_transfer == NULL)
    return st;
  /* Communicators held until the loader is destroyed would keep their device buffers for nothing. */
  return sl__comm_agree(comm, backend->ops->end_transfer(backend, err), err, "releasing NCCL communicators");
}
