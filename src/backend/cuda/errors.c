/*
 * backend/cuda/errors.c — a failed CUDA or NCCL call → the backend's status and a message naming
 * the call, the device, the source line and the library's own words (the CUDA_CHECK and NCCL_CHECK
 * macros of cuda_internal.h end here). A leaf: it calls nothing else of the backend.
 */
#include "backend/cuda/cuda_internal.h"

#include <stdbool.h>
#include <string.h>

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* The call as written, without the table it goes through ("sl__cu.cudaMalloc(&p, n)" → "cudaMalloc(&p, n)").
 */
static const char *call_text(const char *call) {
  if (strncmp(call, "sl__cu.", 7) == 0 || strncmp(call, "sl__nc.", 7) == 0)
    return call + 7;
  return call;
}

sl_status sl__cuda_fail(sl__err *err, cudaError_t e, int device, const char *call, const char *file,
                        int line) {
  (void)sl__cu.cudaGetLastError(); /* clear a non-sticky error so that later calls report their own */
  return sl__err_set(err, SL_STATUS_CUDA, "%s failed on CUDA device %d (%s:%d): %s (%s)", call_text(call),
                     device, base_name(file), line, sl__cu.cudaGetErrorString(e), sl__cu.cudaGetErrorName(e));
}

sl_status sl__nccl_fail(sl__err *err, ncclResult_t r, const char *ctx, const char *call, const char *file,
                        int line) {
  const char *last = sl__nccl_ready() ? sl__nc.ncclGetLastError(NULL) : NULL;
  bool has_last = last != NULL && *last != '\0';
  return sl__err_set(err, SL_STATUS_NCCL, "%s%s%s failed (%s:%d): %s%s%s", ctx != NULL ? ctx : "",
                     ctx != NULL ? ": " : "", call_text(call), base_name(file), line,
                     sl__nc.ncclGetErrorString(r), has_last ? "; NCCL says: " : "", has_last ? last : "");
}
