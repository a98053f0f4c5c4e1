/*
 * backend/cuda/device_scope.c — the caller's CUDA state around the library's GPU work, and the
 * device chosen before MPI starts.
 *
 * Scope: the backend calls cudaSetDevice on the caller's thread (its device is per thread); a
 * public call that uses the GPU saves the thread's current context on entry and restores it on
 * return. The context, not the device: restoring "device 0" with cudaSetDevice would create
 * device 0's primary context (CUDA 12 and later do so eagerly) in a process that never used it,
 * hundreds of MiB on someone else's GPU. The driver's cuCtxGetCurrent/cuCtxSetCurrent come from the
 * runtime (cudaGetDriverEntryPointByVersion, or cudaGetDriverEntryPoint before CUDA 12.5), so nothing
 * links against the driver library; where they cannot be had, the device ordinal is saved and
 * restored instead.
 *
 * Selection: a CUDA-aware MPI creates a context on the current device inside MPI_Init. Every rank
 * of a node would then put one on GPU 0 unless its own device is current first; the node-local
 * rank comes from the launcher's environment because MPI cannot be asked yet.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/util.h"

#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*ctx_get_fn)(CUcontext *ctx);
typedef CUresult (*ctx_set_fn)(CUcontext ctx);

/* process-wide: resolves the two driver entry points below exactly once, whichever thread is first. */
static pthread_once_t resolved = PTHREAD_ONCE_INIT;
/* process-wide: the driver's cuCtxGetCurrent, the same for every loader of the process (NULL where
 * it cannot be had); written once under `resolved`, read-only after. */
static ctx_get_fn ctx_get;
/* process-wide: the driver's cuCtxSetCurrent, like ctx_get. */
static ctx_set_fn ctx_set;

/* The driver functions for CUDA 12.0's ABI of these two calls (unchanged since), from whichever
 * entry-point API the runtime has: cudaGetDriverEntryPointByVersion from CUDA 12.5 on,
 * cudaGetDriverEntryPoint before (it hands out the version the runtime was built for, 12.x here). */
static void resolve(void) {
  void *get = NULL;
  void *set = NULL;
  enum cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound;
  enum cudaDriverEntryPointQueryResult q2 = cudaDriverEntryPointSymbolNotFound;
  bool ok = false;
  if (sl__cu.cudaGetDriverEntryPointByVersion != NULL)
    ok = sl__cu.cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &q1) ==
             cudaSuccess &&
         sl__cu.cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault, &q2) ==
             cudaSuccess;
  else if (sl__cu.cudaGetDriverEntryPoint != NULL)
    ok = sl__cu.cudaGetDriverEntryPoint("cuCtxGetCurrent", &get, cudaEnableDefault, &q1) == cudaSuccess &&
         sl__cu.cudaGetDriverEntryPoint("cuCtxSetCurrent", &set, cudaEnableDefault, &q2) == cudaSuccess;
  if (ok && q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess && get != NULL &&
      set != NULL) {
    /* POSIX: data and function pointers convert (dlsym relies on it too). */
    memcpy(&ctx_get, &get, sizeof ctx_get);
    memcpy(&ctx_set, &set, sizeof ctx_set);
  }
  (void)sl__cu.cudaGetLastError();
}

void sl__device_scope_enter(sl__device_scope *s, bool active) {
  memset(s, 0, sizeof *s);
  sl__err err;
  sl__err_clear(&err);
  /* Without a runtime there is no CUDA state to keep (the backend's creation says why). */
  if (!active || sl__cuda_runtime_open(&err) != SL_STATUS_OK)
    return;
  pthread_once(&resolved, resolve);
  CUcontext ctx = NULL;
  if (ctx_get != NULL && ctx_set != NULL && ctx_get(&ctx) == CUDA_SUCCESS) {
    s->mode = 1;
    s->ctx = ctx;
    return;
  }
  int device = 0;
  if (sl__cu.cudaGetDevice(&device) == cudaSuccess) {
    s->mode = 2;
    s->device = device;
  }
  (void)sl__cu.cudaGetLastError();
}

void sl__device_scope_leave(sl__device_scope *s) {
  if (s->mode == 0)
    return; /* nothing saved: a host load, or no CUDA runtime */
  if (s->mode == 1)
    (void)ctx_set((CUcontext)s->ctx);
  else if (s->mode == 2)
    (void)sl__cu.cudaSetDevice(s->device);
  (void)sl__cu.cudaGetLastError();
  s->mode = 0;
}

/* The node-local rank the launcher exported (Open MPI, MPICH/Intel MPI, Slurm, torchrun), or -1. */
static int launcher_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                                     "SLURM_LOCALID", "LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    uint64_t r = 0;
    if (v != NULL && sl__parse_u64(v, &r) && r < 1u << 20)
      return (int)r;
  }
  return -1;
}

sl_status sl__cuda_select_device(int device, int *chosen, sl__err *err) {
  *chosen = -1;
  int local = device >= 0 ? 0 : launcher_local_rank();
  if (device < 0 && local < 0)
    return SL_STATUS_OK; /* nothing to go by: the loader picks the device later, as without this */
  sl_status opened = sl__cuda_runtime_open(err);
  if (opened != SL_STATUS_OK)
    return opened;
  int count = 0;
  cudaError_t e = sl__cu.cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    char why[400];
    if (e == cudaErrorInsufficientDriver)
      sl__cuda_driver_too_old(why, sizeof why);
    else
      snprintf(why, sizeof why, "%s", sl__cu.cudaGetErrorString(e));
    (void)sl__cu.cudaGetLastError();
    return sl__err_set(err, SL_STATUS_NO_DEVICE, "no CUDA device available (%s)", why);
  }
  int pick = -1;
  sl_status st = sl__cuda_pick_device(device, local, count, &pick, err);
  if (st != SL_STATUS_OK)
    return st;
  CUDA_CHECK(err, pick, sl__cu.cudaSetDevice(pick));
  *chosen = pick;
  return SL_STATUS_OK;
}
