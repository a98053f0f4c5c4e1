/*
 * backend/cuda/wait.c — the backend's bounded wait for its own GPU work (an event or a stream)
 * and the nap between polls: spin first, then sleep; past the deadline (SHARDLOAD_NCCL_TIMEOUT_S)
 * the wait fails naming what it waited for, instead of hanging on a stuck device.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/clock.h"

void sl__cuda_nap(const sl__backend *b) {
  (void)b;
  sl__sleep_s(0.0002); /* GPU work progresses on its own: a short sleep between polls */
}

sl_status sl__cuda_wait_local(sl__backend *b, cudaEvent_t ev, cudaStream_t stream, const char *what,
                              sl__err *err) {
  cuda_state *st = state_of(b);
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
