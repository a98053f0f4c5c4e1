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
#include "plan/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool locals_done(sl__engine *e, void *arg) {
  (void)arg;
  return e->pool.local_left == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------------------------- */

static void engine_init(sl__engine *e, sl__transfer *t, sl__err *err) {
  memset(e, 0, sizeof *e);
  e->t = t;
  e->err = err;
  sl__engine_reads_init(e);
  sl__engine_pool_init(e);
  sl__engine_inject_init(e);
  /* The reader threads and their staging slots. The chunk (t->chunk) already fits the staging
   * budget: the planner's options came from the same split. */
  sl__staging_req req = {.staging_bytes = SL_STAGING_UNBOUNDED,
                         .read_chunk = t->chunk,
                         .workers = t->workers,
                         .uring = t->strategy == SL_STRATEGY_IO_URING};
  sl__staging_split(&req, &e->staging);
  sl__engine_casts_init(e);
}

static void engine_free(sl__engine *e) {
  free(e->copy_start);
  free(e->copy_list);
  sl__engine_reads_free(e);
  sl__engine_files_close(e);
  sl__engine_exchange_free(e);
  sl__engine_buckets_free(e);
  sl__engine_pool_free(e);
  sl__engine_casts_free(e);
}

/* My pieces' local copies (CSR by piece). */
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
  return SL_STATUS_OK;
}

/* Everything before the threads: indexes, open files and how each is read, read operations,
 * bucket slots (as large as this rank's largest bucket), the queues with the local reads. */
static sl_status prepare(sl__engine *e) {
  sl_status st = index_copies(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_buckets_index(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_remote_open(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_open_files(e);
  if (st == SL_STATUS_OK)
    st = sl__engine_build_reads(e);
  if (st == SL_STATUS_OK) {
    sl__engine_exchange_size(e);
    st = sl__engine_slots_alloc(e);
  }
  if (st == SL_STATUS_OK)
    st = sl__engine_exchange_alloc(e);
  return st == SL_STATUS_OK ? sl__engine_pool_prepare(e) : st;
}

static void report(sl__engine *e, sl__transfer_stats *stats, double t_start, double t_bcast) {
  stats->bytes_read = atomic_load(&e->figures.bytes_read);
  stats->bytes_covering = atomic_load(&e->figures.bytes_covering);
  stats->read_ops = atomic_load(&e->figures.read_ops);
  stats->bytes_mapped = atomic_load(&e->figures.bytes_mapped);
  for (size_t f = 0; e->files.fds != NULL && f < e->t->cat->n_files; f++) {
    stats->files_opened += e->files.fds[f] >= 0;
    stats->files_mapped += e->files.choice != NULL && e->files.choice[f].in.bytes_mapped > 0;
    stats->files_direct += e->files.choice != NULL && e->files.choice[f].direct;
  }
  stats->choice = sl__engine_choice_take(e); /* the stats own it now */
  stats->bcast_seconds = t_bcast;
  stats->seconds = sl__now() - t_start;
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
  double t_start = sl__now();
  sl_status st = prepare(&e);
  /* No rank reads before every rank has opened its files. Some network file systems drop a file's
   * cached pages whenever any process opens it (FUSE mounts without keep_cache, such as sshfs:
   * there a file read, opened again and read again crossed the node's link twice): a rank of the
   * same node still opening a file would throw away what another rank had read or mapped of it.
   * The agreement also tells every rank at once that one of them could not open or prepare. */
  const char *phase = t->comm->phase;
  st = sl__comm_agree(t->comm, st, err, "opening the checkpoint files");
  sl__comm_phase(t->comm, phase);
  if (st == SL_STATUS_OK) {
    SL_INFO("transfer: %zu read operations, %zu buckets", e.reads.rp.ops.len, e.buckets.n_mine);
    st = sl__engine_pool_start(&e, t->strategy == SL_STRATEGY_IO_URING ? sl__engine_uring_worker
                                                                       : sl__engine_pread_worker);
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
  st = sl__engine_pool_stop(&e, st);
  /* The reads are over: a file changed meanwhile may have given bytes of two versions. */
  if (st == SL_STATUS_OK && !aborted)
    st = sl__engine_check_files(&e);
  if (st == SL_STATUS_OK && !aborted)
    st = sl__engine_cast_check(&e);
  if (st == SL_STATUS_OK && !aborted)
    st = t->backend->ops->sync(t->backend, err);
  if (st != SL_STATUS_OK)
    sl__comm_abort_raise(t->comm);
  if (st == SL_STATUS_OK && aborted)
    st = sl__err_set(err, SL_STATUS_PEER_FAILED,
                     "another rank failed during the load (rank %d raised the abort)", t->comm->abort_from);
  report(&e, stats, t_start, t_bcast);
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
