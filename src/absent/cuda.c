/*
 * absent/cuda.c — the CUDA backend when shardload was built without CUDA and NCCL: every
 * request for device memory is answered with a clear "unsupported" error.
 */
#include "backend/backend.h"

#include <stdio.h>

sl_status sl__backend_cuda_create(sl__comm *comm, int workers, int slots, int device, void *stream,
                                  void *nccl_comm, const sl__comm_groups *groups, sl__backend **out,
                                  sl__err *err) {
  (void)comm;
  (void)workers;
  (void)slots;
  (void)device;
  (void)stream;
  (void)nccl_comm;
  (void)groups;
  *out = NULL;
  return sl__err_set(
      err, SL_STATUS_UNSUPPORTED,
      "device cuda (--device cuda): this shardload was built without CUDA and NCCL (rebuild where the "
      "CUDA toolkit and NCCL are installed, or set device to cpu: --device cpu)");
}

bool sl__cuda_available(char *why, size_t cap) {
  if (why != NULL && cap > 0)
    snprintf(why, cap, "shardload was built without CUDA support");
  return false;
}

void sl__device_scope_enter(sl__device_scope *s, bool active) {
  (void)active;
  s->mode = 0;
  s->ctx = NULL;
  s->device = -1;
}

void sl__device_scope_leave(sl__device_scope *s) {
  s->mode = 0;
}

sl_status sl__cuda_select_device(int device, int *chosen, sl__err *err) {
  (void)device;
  *chosen = -1;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED,
                     "choosing a CUDA device: this shardload was built without CUDA and NCCL");
}
