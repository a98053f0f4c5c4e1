/*
 * backend/cuda/transpose.c — the CUDA backend's transposing delivery (sl__backend_ops.transpose): a
 * parameter held with its last two dimensions transposed (engine/deliver.c) receives a block of
 * staged rows as columns. No kernel: the block is transposed on the host into a temporary, then
 * one 2-D copy puts the temporary's rows into the parameter's column range (destination pitch:
 * the row length of the held matrix). A block a reader staged is transposed into its staging
 * slot's pinned scratch (bounce.c) and its copy is waited for with the slot's other uploads; where
 * the scratch has no room, and for a block in device memory (a broadcast bucket, first copied to the
 * host), into a temporary, the copies waited for before returning (the temporary is freed then).
 * The copies go on the reader thread's stream (the main stream for worker < 0), after the caller's
 * work (sl__cuda_after_caller).
 */
#include "backend/cuda/cuda_internal.h"

#include "base/util.h"

#include <stdlib.h>

/* Whether p is device memory (the host cannot read it). */
static bool on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (sl__cu.cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)sl__cu.cudaGetLastError(); /* older runtimes: plain host memory is an error */
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

/* Copies of a temporary in flight are finished before it is freed, whatever happened. */
static sl_status finish(sl__backend *b, cudaStream_t s, sl_status res, sl__err *err) {
  if (res == SL_STATUS_OK)
    return sl__cuda_wait_local(b, NULL, s, "a transposed copy", err);
  sl__err ignored;
  sl__err_clear(&ignored);
  (void)sl__cuda_wait_local(b, NULL, s, "a transposed copy", &ignored);
  return res;
}

sl_status sl__cuda_transpose(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                             const void *src, uint64_t src_stride, uint64_t rows, uint64_t cols,
                             uint64_t elem, sl__err *err) {
  cuda_state *st = state_of(b);
  if (worker >= st->workers)
    return sl__err_set(err, SL_STATUS_INTERNAL, "transposed copy from reader %d: the backend has %d readers",
                       worker, st->workers);
  uint64_t row = 0, bytes = 0;
  if (sl__mul_overflow(cols, elem, &row) || sl__mul_overflow(row, rows, &bytes) || bytes > SIZE_MAX)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "transposed copy of %llu x %llu elements of %llu bytes overflows",
                       (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)elem);
  if (bytes == 0)
    return SL_STATUS_OK;
  CUDA_CHECK(err, st->device, sl__cu.cudaSetDevice(st->device)); /* per thread: readers start on device 0 */
  cudaStream_t s = worker >= 0 ? st->worker_streams[worker] : st->main;
  /* as every operation of the loader: after the caller's work queued on the legacy stream */
  sl_status ordered = sl__cuda_after_caller(st, worker >= 0 ? worker : st->workers, err);
  if (ordered != SL_STATUS_OK)
    return ordered;
  bool device_src = on_device(src);
  /* A block staged by a reader: transposed into its slot's pinned scratch, and uploaded like any
   * upload out of the slot (its event recorded: upload_wait and sync wait for it), with no
   * allocation and no wait here. */
  size_t idx = 0;
  uint8_t *scratch = NULL;
  if (worker >= 0 && !device_src && sl__cuda_slot_index(st, worker, slot, &idx, err) == SL_STATUS_OK)
    scratch = sl__cuda_bounce(st, idx, bytes);
  if (scratch != NULL) {
    sl__transpose_elems(scratch, rows * elem, src, src_stride, rows, cols, elem);
    sl_status res = sl__cuda_issue_copy(st, s, dst, dst_stride, scratch, rows * elem, rows * elem, cols, err);
    if (res == SL_STATUS_OK)
      CUDA_CHECK(err, st->device, sl__cu.cudaEventRecord(st->slot_events[idx], s));
    return res;
  }
  uint8_t *held = malloc((size_t)bytes);
  uint8_t *staged = device_src ? malloc((size_t)bytes) : NULL;
  sl_status res = SL_STATUS_OK;
  if (held == NULL || (device_src && staged == NULL))
    res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory transposing %llu bytes for CUDA device %d",
                      (unsigned long long)bytes, st->device);
  if (res == SL_STATUS_OK && staged != NULL) {
    res = finish(b, s, sl__cuda_issue_copy(st, s, staged, row, src, src_stride, row, rows, err), err);
    src = staged;
    src_stride = row;
  }
  if (res == SL_STATUS_OK) {
    sl__transpose_elems(held, rows * elem, src, src_stride, rows, cols, elem);
    res = finish(b, s, sl__cuda_issue_copy(st, s, dst, dst_stride, held, rows * elem, rows * elem, cols, err),
                 err);
  }
  free(staged);
  free(held);
  return res;
}
