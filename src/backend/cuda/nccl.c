/*
 * backend/cuda/nccl.c — the CUDA backend's NCCL side: one non-blocking communicator per broadcast
 * group this rank belongs to that carries broadcasts (groups that only swap column blocks in
 * two-phase exchanges get none: those travel in host memory), made from ids exchanged within the
 * group through the communicator, or split from the caller's communicator, and warmed up by a
 * one-byte broadcast; the GPU placement check that precedes them; broadcasts polled against NCCL
 * errors, the abort channel and a deadline (a broadcast that must stop aborts its communicator);
 * their finalization once the transfer is over. Every NCCL call that cannot poll (split, abort,
 * destroy) is bracketed for the watchdog's backstop, and every polled wait answers other ranks'
 * alive queries.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void abort_group(sl__backend *b, size_t g) {
  cuda_state *st = state_of(b);
  if (g >= st->n_groups || st->nccl[g] == NULL)
    return;
  /* An abort waits for NCCL's own threads and may hang on a broken device: the backstop bounds it. */
  sl__cuda_watch(b, "ncclCommAbort");
  ncclResult_t r = sl__nc.ncclCommAbort(st->nccl[g]);
  sl__cuda_unwatch(b);
  if (r != ncclSuccess)
    SL_WARN("ncclCommAbort of broadcast group %zu: %s", g, sl__nc.ncclGetErrorString(r));
  st->nccl[g] = NULL;
  st->nccl_aborted[g] = true;
  st->failed = true;
}

/* A broadcast waits for its root, which may still be reading the bucket from slow storage. Past
 * the deadline the load's watchdog decides (when it is on): if some rank made progress recently
 * the job is slow, not stuck, and the wait goes on with a new deadline; otherwise the watchdog
 * reports the ranks not heard from (with MPI it then ends the job, as every other wait of a load
 * does). Without the watchdog the deadline is final. */
static bool extend_deadline(sl__backend *b, double start, double *deadline) {
  cuda_state *st = state_of(b);
  if (b->comm == NULL || b->comm->timeout_s <= 0)
    return false;
  sl__err xerr;
  sl__err_clear(&xerr);
  if (!sl__comm_expire(b->comm, "an NCCL broadcast", sl__now() - start, &xerr))
    return false;
  *deadline = sl__now() + st->timeout_s;
  return true;
}

static sl_status bcast_wait(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                            sl__err *err);

sl_status sl__cuda_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                         sl__err *err) {
  cuda_state *st = state_of(b);
  *aborted = false;
  if (g >= st->n_groups || st->nccl[g] == NULL)
    return sl__err_set(
        err, SL_STATUS_INTERNAL,
        g >= st->n_groups || !st->nccl_made[g] ? "broadcast in group %u that this rank has no NCCL "
                                                 "communicator for (not a member, or a group "
                                                 "without broadcasts)"
        : st->nccl_aborted[g] ? "broadcast in group %u, whose NCCL communicator was aborted earlier"
                              : "broadcast in group %u after its NCCL communicator was released",
        g);
  if (nbytes == 0)
    return SL_STATUS_OK;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  sl_status ordered = sl__cuda_after_caller(st, st->workers, err);
  if (ordered != SL_STATUS_OK)
    return ordered;
  return bcast_wait(b, g, buf, nbytes, root, aborted, err);
}

/* The broadcast itself, on the main stream, waited for (sl__cuda_bcast has checked g). */
/* ncclCommGetAsyncError with an error state as the result (ncclInProgress in *state is no error). */
static ncclResult_t async_error(ncclComm_t c, ncclResult_t *state) {
  *state = ncclSuccess;
  ncclResult_t r = sl__nc.ncclCommGetAsyncError(c, state);
  if (r == ncclSuccess && *state != ncclSuccess && *state != ncclInProgress)
    r = *state;
  return r;
}

/* A broadcast NCCL failed: its message, and the group's communicator aborted. */
static sl_status bcast_failed(sl__backend *b, uint32_t g, uint64_t nbytes, int root, ncclResult_t r,
                              sl__err *err) {
  const char *last = sl__nc.ncclGetLastError(state_of(b)->nccl[g]);
  sl_status res =
      sl__err_set(err, SL_STATUS_NCCL,
                  "ncclBroadcast of %llu bytes in broadcast group %u (root %d) failed: %s%s%s; the "
                  "group's NCCL communicator was aborted",
                  (unsigned long long)nbytes, g, root, sl__nc.ncclGetErrorString(r),
                  last != NULL && *last != '\0' ? "; NCCL says: " : "", last != NULL ? last : "");
  abort_group(b, g);
  return res;
}

static sl_status bcast_wait(sl__backend *b, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                            sl__err *err) {
  cuda_state *st = state_of(b);
  ncclComm_t c = st->nccl[g];
  ncclResult_t r = sl__nc.ncclBroadcast(buf, buf, (size_t)nbytes, ncclUint8, root, c, st->main);
  if (r != ncclSuccess && r != ncclInProgress) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "broadcast of %llu bytes in group %u from root %d", (unsigned long long)nbytes,
             g, root);
    sl_status res = sl__nccl_fail(err, r, ctx, "ncclBroadcast", __FILE__, __LINE__);
    abort_group(b, g);
    return res;
  }
  /* Done when NCCL has enqueued the operation (state no longer in progress) and the stream has
   * run it; meanwhile watch for NCCL errors, other ranks' aborts and the deadline. */
  double start = sl__now();
  double deadline = start + st->timeout_s;
  for (int spins = 0;; spins++) {
    ncclResult_t state = ncclSuccess;
    r = async_error(c, &state);
    if (r != ncclSuccess)
      return bcast_failed(b, g, nbytes, root, r, err);
    if (state == ncclSuccess) {
      cudaError_t e = sl__cu.cudaStreamQuery(st->main);
      if (e == cudaSuccess) {
        /* The stream ran it, but NCCL may have raised an error while it did (a failed connection
         * ends the operation with the error on the communicator): asked once more, now. */
        r = async_error(c, &state);
        return r == ncclSuccess ? SL_STATUS_OK : bcast_failed(b, g, nbytes, root, r, err);
      }
      if (e != cudaErrorNotReady) {
        abort_group(b, g);
        return sl__cuda_fail(err, e, st->device, "cudaStreamQuery (after ncclBroadcast)", __FILE__, __LINE__);
      }
    }
    if (sl__comm_abort_check(b->comm)) {
      abort_group(b, g);
      *aborted = true;
      return SL_STATUS_OK;
    }
    sl__comm_poll(b->comm); /* another rank's watchdog report */
    if (sl__now() > deadline && extend_deadline(b, start, &deadline)) {
      continue;
    }
    if (sl__now() > deadline) {
      abort_group(b, g);
      return sl__err_set(
          err, SL_STATUS_NCCL,
          "ncclBroadcast of %llu bytes in broadcast group %u (root %d) did not complete within %.1f s "
          "(a rank of the group may be stuck or gone; raise %s to wait longer); the group's NCCL "
          "communicator was aborted",
          (unsigned long long)nbytes, g, root, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    }
    if (spins >= SL_CUDA_SPINS_BEFORE_NAP)
      sl__cuda_nap(b);
  }
}

/* Longest wait for communicators to finalize: a rank that never comes costs this. */
#define FINALIZE_MAX_S 60.0

void sl__cuda_release_comms(sl__backend *b) {
  cuda_state *st = state_of(b);
  /* After a failure (ours, or an abort raised by any rank) peers may never finalize: abort. */
  bool abort_all = st->failed || b->failed || (b->comm != NULL && b->comm->aborted);
  bool *finalizing = calloc(st->n_groups + 1, sizeof *finalizing);
  if (finalizing == NULL)
    abort_all = true;
  for (size_t g = 0; g < st->n_groups; g++) {
    if (st->nccl[g] == NULL || abort_all)
      continue;
    /* Non-blocking: start every finalization first, then wait, so their order does not matter. */
    ncclResult_t r = sl__nc.ncclCommFinalize(st->nccl[g]);
    if (r == ncclSuccess || r == ncclInProgress)
      finalizing[g] = true;
  }
  double wait_s = st->timeout_s < FINALIZE_MAX_S ? st->timeout_s : FINALIZE_MAX_S;
  double deadline = sl__now() + wait_s;
  for (size_t g = 0; g < st->n_groups; g++) {
    if (st->nccl[g] == NULL)
      continue;
    bool timed_out = false;
    ncclResult_t r = finalizing != NULL && finalizing[g]
                         ? sl__cuda_wait_comm(b, st->nccl[g], deadline, &timed_out, NULL)
                         : ncclInternalError;
    if (r == ncclSuccess) {
      /* Destroy frees NCCL's device buffers (a device synchronisation): watched like an abort. */
      sl__cuda_watch(b, "ncclCommDestroy");
      r = sl__nc.ncclCommDestroy(st->nccl[g]);
      sl__cuda_unwatch(b);
      if (r != ncclSuccess)
        SL_WARN("ncclCommDestroy of broadcast group %zu: %s", g, sl__nc.ncclGetErrorString(r));
      st->nccl[g] = NULL;
      continue;
    }
    if (timed_out)
      SL_WARN("NCCL communicator of broadcast group %zu did not finalize within %.1f s: aborting it", g,
              wait_s);
    else if (!abort_all)
      SL_WARN("finalizing the NCCL communicator of broadcast group %zu: %s: aborting it", g,
              sl__nc.ncclGetErrorString(r));
    abort_group(b, g);
  }
  free(finalizing);
  /* Its children are gone: the parent they shared resources with goes last. */
  sl__cuda_release_shared_parent(b, abort_all || st->failed, deadline);
}

sl_status sl__cuda_end_transfer(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  if (st->nccl == NULL)
    return SL_STATUS_OK;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device));
  sl__cuda_release_comms(b);
  return SL_STATUS_OK;
}

/* Every rank learns where every other rank's GPU is (two members of one group on one GPU is an
 * error NCCL would report far less clearly) and whether every rank passed its own NCCL
 * communicator (the two ways of creating group communicators cannot be mixed). */
typedef struct placement {
  sl__cuda_place place;
  int32_t has_parent;
} placement;

sl_status sl__cuda_check_placement(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  if (groups->n == 0)
    return SL_STATUS_OK;
  placement mine;
  memset(&mine, 0, sizeof mine);
  mine.place.device = st->device;
  mine.has_parent = st->parent != NULL;
  if (gethostname(mine.place.host, sizeof mine.place.host - 1) != 0)
    snprintf(mine.place.host, sizeof mine.place.host, "?");
  CUDA_CHECK(err, st->device,
             sl__cu.cudaDeviceGetPCIBusId(mine.place.bus_id, (int)sizeof mine.place.bus_id, st->device));
  placement *all = calloc((size_t)c->size, sizeof *all);
  sl__cuda_place *places = calloc((size_t)c->size, sizeof *places);
  sl_status res = SL_STATUS_OK;
  if (all == NULL || places == NULL) {
    res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory gathering GPU placements");
  } else {
    res = sl__comm_allgather(c, &mine, sizeof mine, all, "gathering GPU placements", err);
  }
  int with_parent = 0;
  for (int r = 0; res == SL_STATUS_OK && r < c->size; r++) {
    places[r] = all[r].place;
    with_parent += all[r].has_parent != 0;
  }
  if (res == SL_STATUS_OK && with_parent != 0 && with_parent != c->size)
    res = sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "an NCCL communicator was passed to the loader on %d of %d ranks: pass one on every rank or on "
        "none",
        with_parent, c->size);
  if (res == SL_STATUS_OK)
    res = sl__cuda_check_places(groups, c->rank, places, err);
  /* NCCL makes no communicator with two ranks on one GPU: one that spans every group's ranks is
   * possible only where no two ranks of the job share one (the same answer on every rank). */
  if (res == SL_STATUS_OK && st->share && sl__cuda_any_shared_gpu(places, c->size)) {
    st->share = false;
    SL_DEBUG("cuda backend: ranks of this job share GPUs: one NCCL communicator per broadcast group");
  }
  free(all);
  free(places);
  return res;
}

/* Our NCCL communicators, from NCCL ids that each group's first member makes and broadcasts within
 * the group (comm/comm.h: over MPI or the caller's transport). Every rank walks the groups in
 * schedule order; the inits are non-blocking and batched in NCCL groups, then polled until ready. */
typedef struct id_msg {
  int32_t ok; /* the root made an id */
  ncclUniqueId id;
} id_msg;

#define INIT_BATCH 256 /* communicator inits per ncclGroupStart/End (NCCL allows 2048 operations) */

sl_status sl__cuda_create_comms_by_id(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  id_msg *msgs = calloc(groups->n + 1, sizeof *msgs);
  if (msgs == NULL)
    return sl__comm_agree(c, sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating NCCL ids"), err,
                          "exchanging NCCL ids");
  sl_status res = SL_STATUS_OK;
  for (size_t g = 0; g < groups->n; g++) {
    int pos = sl__cuda_comm_pos(groups, g, c->rank);
    if (pos < 0)
      continue;
    if (pos == 0) {
      /* A root that cannot make an id still broadcasts (ok = 0), so that no member waits. */
      ncclResult_t r = sl__nc.ncclGetUniqueId(&msgs[g].id);
      msgs[g].ok = r == ncclSuccess;
      if (r != ncclSuccess)
        res = sl__nccl_fail(err, r, NULL, "ncclGetUniqueId", __FILE__, __LINE__);
    }
    bool aborted = false; /* another rank's failure (the abort channel is armed while creating) */
    sl_status bst = sl__comm_group_bcast(c, (uint32_t)g, &msgs[g], sizeof msgs[g], 0, &aborted, err);
    if (bst == SL_STATUS_OK && aborted)
      bst = sl__cuda_peer_failed(b, err, "exchanging NCCL ids");
    if (bst != SL_STATUS_OK) {
      res = bst;
      break;
    }
    if (!msgs[g].ok && res == SL_STATUS_OK)
      res = sl__err_set(err, SL_STATUS_NCCL,
                        "broadcast group %zu: its first rank could not create an NCCL id", g);
  }
  res = sl__comm_agree(c, res, err, "exchanging NCCL ids");
  if (res != SL_STATUS_OK) {
    free(msgs);
    return res;
  }
  ncclConfig_t config = sl__cuda_nccl_config(st, false);
  char ctx[96];
  size_t g = 0;
  while (g < groups->n && res == SL_STATUS_OK) {
    ncclResult_t r = sl__nc.ncclGroupStart();
    if (r != ncclSuccess) {
      res = sl__nccl_fail(err, r, NULL, "ncclGroupStart", __FILE__, __LINE__);
      break;
    }
    for (int batch = 0; g < groups->n && batch < INIT_BATCH; g++) {
      int pos = sl__cuda_comm_pos(groups, g, c->rank);
      if (pos < 0)
        continue;
      batch++;
      r = sl__nc.ncclCommInitRankConfig(&st->nccl[g], (int)groups->group[g].n, msgs[g].id, pos, &config);
      if (r != ncclSuccess && r != ncclInProgress && res == SL_STATUS_OK)
        res = sl__nccl_fail(err, r, sl__cuda_group_ctx(ctx, sizeof ctx, groups, g), "ncclCommInitRankConfig",
                            __FILE__, __LINE__);
    }
    r = sl__nc.ncclGroupEnd(); /* with non-blocking communicators: returns at once (ncclInProgress) */
    if (r != ncclSuccess && r != ncclInProgress && res == SL_STATUS_OK)
      res = sl__nccl_fail(err, r, "creating NCCL communicators", "ncclGroupEnd", __FILE__, __LINE__);
  }
  free(msgs);
  double deadline = sl__now() + st->timeout_s;
  for (size_t k = 0; k < groups->n && res == SL_STATUS_OK; k++) {
    if (st->nccl[k] == NULL)
      continue;
    bool timed_out = false;
    bool aborted = false;
    ncclResult_t r = sl__cuda_wait_comm(b, st->nccl[k], deadline, &timed_out, &aborted);
    if (aborted)
      res = sl__cuda_peer_failed(b, err, "creating NCCL communicators");
    else if (timed_out)
      res = sl__err_set(
          err, SL_STATUS_NCCL,
          "the NCCL communicator of broadcast group %zu (%u ranks) was not ready within %.1f s (raise %s "
          "to wait longer)",
          k, groups->group[k].n, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    else if (r != ncclSuccess)
      res = sl__nccl_fail(err, r, sl__cuda_group_ctx(ctx, sizeof ctx, groups, k), "ncclCommInitRankConfig",
                          __FILE__, __LINE__);
  }
  return res;
}

/* Our NCCL communicators split from the caller's (which spans the loader's ranks): one split per
 * group, every rank in schedule order, non-members with NCCL_SPLIT_NOCOLOR. A split of a blocking
 * parent (torch's are) returns only once every rank of the parent has called it, so a rank never
 * leaves the loop early: after a failure it goes on taking part with NCCL_SPLIT_NOCOLOR, and says
 * why at the end. Each split is a call that cannot poll: the watchdog's backstop bounds it. */
static sl_status create_comms_by_split(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  ncclConfig_t config = sl__cuda_nccl_config(st, false); /* a caller's communicator is its own: shared
                                                             resources would serialise our broadcasts
                                                             with its collectives */
  char ctx[96];
  double deadline = sl__now() + st->timeout_s;
  sl_status res = SL_STATUS_OK;
  for (size_t g = 0; g < groups->n; g++) {
    if (!groups->group[g].broadcasts)
      continue; /* every rank knows it: no split at all */
    int pos = res == SL_STATUS_OK ? sl__cuda_comm_pos(groups, g, c->rank) : -1;
    /* NCCL writes the new communicator when the split completes, possibly from its own thread:
     * straight into the state, which outlives any wait here. */
    st->nccl[g] = NULL;
    sl__cuda_watch(b, "ncclCommSplit");
    ncclResult_t r = sl__nc.ncclCommSplit(st->parent, pos >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, pos >= 0 ? pos : 0,
                                          &st->nccl[g], &config);
    sl__cuda_unwatch(b);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (res == SL_STATUS_OK)
        res = sl__nccl_fail(err, r, sl__cuda_group_ctx(ctx, sizeof ctx, groups, g), "ncclCommSplit", __FILE__,
                            __LINE__);
      continue;
    }
    /* With a non-blocking parent the split completes in the background: the parent reports it. */
    bool timed_out = false;
    r = sl__cuda_wait_comm(b, st->parent, deadline, &timed_out, NULL);
    if (res != SL_STATUS_OK)
      continue;
    if (timed_out)
      res = sl__err_set(err, SL_STATUS_NCCL,
                        "splitting broadcast group %zu from the caller's NCCL communicator did not "
                        "finish within %.1f s (raise %s to wait longer)",
                        g, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    else if (r != ncclSuccess)
      res = sl__nccl_fail(err, r, sl__cuda_group_ctx(ctx, sizeof ctx, groups, g), "ncclCommSplit", __FILE__,
                          __LINE__);
    else if ((pos >= 0) != (st->nccl[g] != NULL))
      res = sl__err_set(err, SL_STATUS_NCCL, "ncclCommSplit %s a communicator for broadcast group %zu",
                        pos >= 0 ? "gave no" : "unexpectedly gave", g);
    else if (st->nccl[g] != NULL) {
      r = sl__cuda_wait_comm(b, st->nccl[g], deadline, &timed_out, NULL);
      if (timed_out)
        res =
            sl__err_set(err, SL_STATUS_NCCL,
                        "the NCCL communicator that ncclCommSplit made for broadcast group %zu was not ready "
                        "within %.1f s (raise %s to wait longer)",
                        g, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
      else if (r != ncclSuccess) /* a non-blocking split fails on the child, in the background */
        res = sl__nccl_fail(err, r, sl__cuda_group_ctx(ctx, sizeof ctx, groups, g), "ncclCommSplit", __FILE__,
                            __LINE__);
    }
  }
  return res;
}

/* NCCL connects a communicator's ranks lazily, inside its first collective: a one-byte broadcast
 * in each, every rank walking the groups in the same order, makes that happen at creation, under
 * its deadline and reported as such, instead of inside the first bucket of the load. */
sl_status sl__cuda_warm_up(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  void *one = st->warm_byte;
  sl_status res = SL_STATUS_OK;
  /* A failure ends the walk: connect_groups raises the abort at once, and the other members, waiting
   * in this warm-up or a later one, see it (NCCL tells them nothing). */
  for (size_t g = 0; g < st->n_groups && res == SL_STATUS_OK; g++) {
    if (st->nccl[g] == NULL)
      continue;
    bool aborted = false; /* another rank's failure: the abort channel is armed while connecting */
    sl__err gerr;
    sl__err_clear(&gerr);
    sl_status gst = bcast_wait(b, (uint32_t)g, one, 1, 0, &aborted, &gerr);
    if (gst == SL_STATUS_OK && aborted) {
      res = sl__cuda_peer_failed(b, err, "connecting NCCL communicators");
    } else if (gst != SL_STATUS_OK) {
      sl__err_copy(err, &gerr);
      sl__err_prefix(err, "connecting the NCCL communicator of broadcast group %zu (its warm-up broadcast)",
                     g);
      res = gst;
    }
  }
  return res;
}

sl_status sl__cuda_create_comms(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  cuda_state *st = state_of(b);
  sl_status res = st->parent != NULL ? create_comms_by_split(b, groups, err)
                  : st->share        ? sl__cuda_create_comms_shared(b, groups, err)
                                     : sl__cuda_create_comms_by_id(b, groups, err);
  b->nccl_comms = 0;
  for (size_t g = 0; g < st->n_groups; g++) {
    st->nccl_made[g] = st->nccl[g] != NULL;
    b->nccl_comms += st->nccl_made[g];
  }
  return res;
}
