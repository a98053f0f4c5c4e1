/*
 * backend/cuda/libs.h — the CUDA runtime and NCCL, opened at run time. The library has no load-time
 * dependency on either (readelf -d shows none): a node without the toolkit loads it and runs host
 * loads, and a process that already holds a CUDA runtime (torch's libcudart.so.12) keeps using that
 * one instead of having a second one forced on it. Every call of the backend goes through the two
 * tables below, whose members have the types the CUDA 13 and NCCL 2.28 headers declare (so a
 * mismatch does not compile); their values are looked up with dlvsym/dlsym when the backend is first
 * needed (libs.c). Which libraries are chosen:
 *   runtime: SHARDLOAD_CUDART (a path or a file name) when set; else a libcudart.so.13 or .so.12
 *            the process has loaded already (dlopen with RTLD_NOLOAD); else the first of
 *            libcudart.so.13, libcudart.so.12 whose CUDA major the driver supports (a CUDA 12.x
 *            driver, R525–R575, cannot run a 13.x runtime), else the first found;
 *   NCCL:    SHARDLOAD_NCCL when set; else a libnccl.so.2 the process has loaded (torch's); else
 *            libnccl.so.2 from the library path. Opened only where a broadcast needs it; 2.18 or
 *            newer (ncclCommSplit, ncclConfig_t.splitShare).
 * Symbols of the runtime are looked up by version (libcudart exports `cudaMalloc@@libcudart.so.13`):
 * dlvsym with the version node of the runtime's major, dlsym where the library has none.
 * cudaGetDriverEntryPointByVersion exists from CUDA 12.5 on: where it is missing, the driver's entry
 * points come from cudaGetDriverEntryPoint (device_scope.c).
 */
#ifndef SL_CUDA_LIBS_H
#define SL_CUDA_LIBS_H

#include "base/err.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdbool.h>
#include <stddef.h>

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the backend calls the legacy-stream entry points: do not build it with per-thread default streams"
#endif

/* Environment variables naming the libraries to open instead of searching. */
#define SL_CUDART_ENV "SHARDLOAD_CUDART"
#define SL_NCCL_ENV "SHARDLOAD_NCCL"

/* The oldest NCCL the backend accepts (ncclCommSplit with a config, splitShare). */
#define SL_NCCL_MIN_VERSION 21800

/* The runtime's functions the backend calls (every one required). */
#define SL_CUDART_FUNCS(X)                                                                                   \
  X(cudaGetDeviceCount)                                                                                      \
  X(cudaSetDevice)                                                                                           \
  X(cudaGetDevice)                                                                                           \
  X(cudaGetLastError)                                                                                        \
  X(cudaGetErrorString)                                                                                      \
  X(cudaGetErrorName)                                                                                        \
  X(cudaDriverGetVersion)                                                                                    \
  X(cudaRuntimeGetVersion)                                                                                   \
  X(cudaDeviceGetAttribute)                                                                                  \
  X(cudaDeviceGetPCIBusId)                                                                                   \
  X(cudaMalloc)                                                                                              \
  X(cudaFree)                                                                                                \
  X(cudaMemGetInfo)                                                                                          \
  X(cudaHostAlloc)                                                                                           \
  X(cudaFreeHost)                                                                                            \
  X(cudaMemsetAsync)                                                                                         \
  X(cudaMemcpyAsync)                                                                                         \
  X(cudaMemcpy2DAsync)                                                                                       \
  X(cudaPointerGetAttributes)                                                                                \
  X(cudaStreamCreateWithFlags)                                                                               \
  X(cudaStreamDestroy)                                                                                       \
  X(cudaStreamQuery)                                                                                         \
  X(cudaStreamWaitEvent)                                                                                     \
  X(cudaEventCreateWithFlags)                                                                                \
  X(cudaEventDestroy)                                                                                        \
  X(cudaEventRecord)                                                                                         \
  X(cudaEventQuery)                                                                                          \
  X(cudaEventSynchronize)

/* NCCL's functions the backend calls (every one required). */
#define SL_NCCL_FUNCS(X)                                                                                     \
  X(ncclGetVersion)                                                                                          \
  X(ncclGetErrorString)                                                                                      \
  X(ncclGetLastError)                                                                                        \
  X(ncclGetUniqueId)                                                                                         \
  X(ncclCommInitRankConfig)                                                                                  \
  X(ncclCommSplit)                                                                                           \
  X(ncclGroupStart)                                                                                          \
  X(ncclGroupEnd)                                                                                            \
  X(ncclCommGetAsyncError)                                                                                   \
  X(ncclCommCount)                                                                                           \
  X(ncclCommUserRank)                                                                                        \
  X(ncclCommCuDevice)                                                                                        \
  X(ncclBroadcast)                                                                                           \
  X(ncclCommFinalize)                                                                                        \
  X(ncclCommAbort)                                                                                           \
  X(ncclCommDestroy)

/* cudaGetDriverEntryPoint as CUDA 12.0–12.4 declare it (deprecated in CUDA 13's headers, so its own
 * type here rather than the header's). */
typedef cudaError_t (*sl__cuda_entry_point_fn)(const char *symbol, void **fn, unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult *status);

#define SL_CUDA_API_MEMBER(f) __typeof__(f) *f;

typedef struct sl__cudart {
  SL_CUDART_FUNCS(SL_CUDA_API_MEMBER)
  /* Optional: the first from CUDA 12.5 on, the second until it is removed. */
  __typeof__(cudaGetDriverEntryPointByVersion) *cudaGetDriverEntryPointByVersion;
  sl__cuda_entry_point_fn cudaGetDriverEntryPoint;
  int version;        /* cudaRuntimeGetVersion: 1000 * major + 10 * minor */
  int driver_version; /* cudaDriverGetVersion when opened (0: no driver) */
  bool preloaded;     /* the process had loaded it before us (torch's) */
  char path[512];     /* where it was loaded from */
} sl__cudart;

typedef struct sl__nccl_api {
  SL_NCCL_FUNCS(SL_CUDA_API_MEMBER)
  int version; /* ncclGetVersion */
  bool preloaded;
  char path[512];
} sl__nccl_api;

/* The tables, filled by the open functions below (read-only after). Process-wide. */
extern sl__cudart sl__cu;
extern sl__nccl_api sl__nc;

/* Opens the CUDA runtime once per process (thread-safe; later calls return the first answer). Not
 * found, or a symbol missing: SL_STATUS_NO_DEVICE saying which library was looked for, where, and
 * what to do. */
sl_status sl__cuda_runtime_open(sl__err *err);
/* Whether the runtime is open (never tries to open it). */
bool sl__cuda_runtime_ready(void);
/* Opens NCCL once per process, as the runtime: not found, too old or incomplete is SL_STATUS_NCCL
 * naming the library and the version needed. */
sl_status sl__nccl_open(sl__err *err);
bool sl__nccl_ready(void);

/* "libcudart.so.13 (CUDA runtime 13.0, loaded by the process before shardload) at PATH". */
void sl__cuda_libs_describe(char *out, size_t cap);

#endif
