/*
 * backend/cuda/wait.c — the backend's waits for its own GPU work (an event or a stream). A stream
 * is polled: spin first, then sleep between queries; past the deadline (SHARDLOAD_NCCL_TIMEOUT_S)
 * the wait fails naming what it waited for, instead of hanging on a stuck device. An event made
 * with cudaEventBlockingSync (the staging slots' and the main stream's, SHARDLOAD_CUDA_BLOCKING_SYNC
 * on) is queried a few times, then waited for in the driver (cudaEventSynchronize): the thread
 * sleeps until the GPU signals, where a poll's sleep of 200 µs against uploads of 0.2-0.4 ms lost
 * up to half of them; such a wait has no deadline of its own: the load's watchdog bounds the job
 * (its backstop ends a job stuck in a call, comm/comm.h).
 */
#include "backend/cuda/cuda_internal.h"

#include "base/clock.h"

void sl__cuda_nap(const sl__backend *b) {
  (void)b;
  sl__sleep_s(0.0002); /* GPU work progresses on its own: a short sleep between polls */
}

/* Queries before a blocking wait: short work completes without a trip through the driver's sleep. */
#define SPINS_BEFORE_BLOCK 8

static sl_status wait_blocking(cuda_state *st, cudaEvent_t ev, sl__err *err) {
  for (int spins = 0; spins < SPINS_BEFORE_BLOCK; spins++) {
    cudaError_t e = sl__cu.cudaEventQuery(ev);
    if (e == cudaSuccess)
      return SL_STATUS_OK;
    if (e != cudaErrorNotReady)
      return sl__cuda_fail(err, e, st->device, "cudaEventQuery", __FILE__, __LINE__);
  }
  CUDA_CHECK(err, st->device, sl__cu.cudaEventSynchronize(ev));
  return SL_STATUS_OK;
}

sl_status sl__cuda_wait_local(sl__backend *b, cudaEvent_t ev, cudaStream_t stream, const char *what,
                              sl__err *err) {
  cuda_state *st = state_of(b);
  if (ev != NULL && st->blocking_sync)
    return wait_blocking(st, ev, err);
  double deadline = sl__now() + st->timeout_s;
  for (int spins = 0;; spins++) {
    cudaError_t e = ev != NULL ? sl__cu.cudaEventQuery(ev) : sl__cu.cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return SL_STATUS_OK;
    if (e != cudaErrorNotReady)
      return sl__cuda_fail(err, e, st->device, ev != NULL ? "cudaEventQuery" : "cudaStreamQuery", __FILE__,
                           __LINE__);
    if (sl__now() > deadline)
      return sl__err_set(err, SL_STATUS_CUDA,
                         "%s on CUDA device %d did not complete within %.1f s (raise %s to wait longer)",
                         what, st->device, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    if (spins >= SL_CUDA_SPINS_BEFORE_NAP)
      sl__cuda_nap(b);
  }
}
