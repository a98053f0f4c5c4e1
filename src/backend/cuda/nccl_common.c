/*
 * backend/cuda/nccl_common.c — what the CUDA backend's NCCL files (nccl.c, nccl_shared.c) share: the
 * config of every communicator the backend makes, the polled wait for a non-blocking
 * communicator's pending call (with the abort channel while creating), the "another rank failed"
 * status, the name of a group in messages, and the brackets of calls that cannot poll for the
 * watchdog's backstop. Calls nothing of the backend but wait.c.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/clock.h"

#include <stdio.h>

/* Brackets a call that cannot poll for the watchdog's backstop. A backend kept alive by
 * parameters still referenced after its loader is gone has no communicator (comm NULL). */
void sl__cuda_watch(sl__backend *b, const char *what) {
  if (b->comm != NULL)
    sl__comm_block_begin(b->comm, what);
}

void sl__cuda_unwatch(sl__backend *b) {
  if (b->comm != NULL)
    sl__comm_block_end(b->comm);
}

/* Polls until a non-blocking communicator has finished its pending NCCL call (creation,
 * finalization): ncclSuccess, an error, or the deadline. With `aborted` (creation), also the
 * abort channel: another rank's failure sets *aborted and the wait ends at once (ncclInProgress),
 * since NCCL itself never tells the other members that one of them gave up. */
ncclResult_t sl__cuda_wait_comm(sl__backend *b, ncclComm_t c, double deadline, bool *timed_out,
                                bool *aborted) {
  *timed_out = false;
  for (int spins = 0;; spins++) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = sl__nc.ncclCommGetAsyncError(c, &state);
    if (r != ncclSuccess)
      return r;
    if (state != ncclInProgress)
      return state;
    if (aborted != NULL && b->comm != NULL && sl__comm_abort_check(b->comm)) {
      *aborted = true;
      return ncclInProgress;
    }
    if (sl__now() > deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    if (b->comm != NULL)
      sl__comm_poll(b->comm); /* other ranks' alive queries: this rank is waiting, not gone */
    if (spins >= SL_CUDA_SPINS_BEFORE_NAP)
      sl__cuda_nap(b);
  }
}

/* "another rank failed" while creating or connecting: the agreement that follows names it. */
sl_status sl__cuda_peer_failed(sl__backend *b, sl__err *err, const char *what) {
  int from = b->comm != NULL ? b->comm->abort_from : -1;
  return sl__err_set(err, SL_STATUS_PEER_FAILED, "another rank (rank %d) failed while %s", from, what);
}

ncclConfig_t sl__cuda_nccl_config(const cuda_state *st, bool split_share) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* no call waits for another rank inside NCCL: every wait polls, and aborts */
  config.maxCTAs = st->max_ctas;
  if (split_share)
    config.splitShare = 1;
  return config;
}

const char *sl__cuda_group_ctx(char *buf, size_t cap, const sl__comm_groups *groups, size_t g) {
  snprintf(buf, cap, "broadcast group %zu (%u ranks)", g, groups->group[g].n);
  return buf;
}
