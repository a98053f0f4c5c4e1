/*
 * api/loader_settings.c — what a loader is told before its load: its CUDA device, stream and NCCL
 * communicator (sl_loader_set_cuda), its progress callback (sl_loader_set_progress); and the
 * device choice a program makes before MPI_Init (sl_cuda_select_device).
 */
#include "shardload/core.h"

#include "api/last_error.h"
#include "api/loader_state.h"
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

static sl_status loader_set_cuda_impl(sl_loader *l, int device, void *cuda_stream, void *nccl_comm) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  if (l->state >= STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_set_cuda must be called before the load");
  l->dev.cuda_device = device;
  l->dev.cuda_stream = cuda_stream;
  l->dev.nccl_comm = nccl_comm;
  return SL_STATUS_OK;
}

sl_status sl_loader_set_cuda(sl_loader *l, int device, void *cuda_stream, void *nccl_comm) {
  return sl__loader_return(loader_set_cuda_impl(l, device, cuda_stream, nccl_comm), l, __func__);
}

sl_status sl_cuda_select_device(int device, int *chosen, char **error) {
  int dummy = -1;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__cuda_select_device(device, chosen != NULL ? chosen : &dummy, &err);
  if (error != NULL)
    *error = st != SL_STATUS_OK ? strdup(err.msg) : NULL;
  return sl__api_return(st, &err, __func__);
}

static sl_status loader_set_progress_impl(sl_loader *l, sl_progress_fn fn, void *user) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  if (l->state >= STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_set_progress must be called before the load");
  l->progress.fn = fn;
  l->progress.user = user;
  return SL_STATUS_OK;
}

sl_status sl_loader_set_progress(sl_loader *l, sl_progress_fn fn, void *user) {
  return sl__loader_return(loader_set_progress_impl(l, fn, user), l, __func__);
}
