/*
 * versions.c — which CUDA driver, CUDA runtime and NCCL this process runs with. A driver older than
 * the runtime makes every CUDA call fail as if there were no GPU; a process that loaded another
 * NCCL first (torch's, inside a framework's worker) runs that one. Both are said in so many words,
 * and the versions and the libraries' files are logged when the backend starts (libs.c opened them).
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"

#include <stdio.h>

/* The driver's and the runtime's CUDA versions as text ("unknown" for what cannot be asked); returns
 * the driver's (0: no driver). */
static int cuda_versions_text(char *d, char *r, size_t cap) {
  int driver = 0;
  int runtime = 0;
  if (sl__cu.cudaDriverGetVersion(&driver) != cudaSuccess)
    driver = 0;
  if (sl__cu.cudaRuntimeGetVersion(&runtime) != cudaSuccess)
    runtime = 0;
  (void)sl__cu.cudaGetLastError();
  sl__cuda_version_text(driver, d, cap);
  sl__cuda_version_text(runtime, r, cap);
  return driver;
}

void sl__cuda_versions(char *out, size_t cap) {
  int nccl = 0;
  if (!sl__nccl_ready() || sl__nc.ncclGetVersion(&nccl) != ncclSuccess)
    nccl = 0;
  char d[32], r[32], n[32], built[32];
  (void)cuda_versions_text(d, r, sizeof d);
  sl__nccl_version_text(nccl, n, sizeof n);
  sl__nccl_version_text(NCCL_VERSION_CODE, built, sizeof built);
  if (nccl > 0)
    snprintf(out, cap, "driver for CUDA %s, CUDA runtime %s, NCCL %s (built with NCCL %s)", d, r, n, built);
  else
    snprintf(out, cap, "driver for CUDA %s, CUDA runtime %s, NCCL not needed yet (built with NCCL %s)", d, r,
             built);
}

void sl__cuda_driver_too_old(char *out, size_t cap) {
  char d[32], r[32];
  if (cuda_versions_text(d, r, sizeof d) <=
      0) { /* the runtime reports a missing driver the same way as an old one */
    snprintf(out, cap,
             "no NVIDIA driver was found (the CUDA runtime %s cannot load libcuda): run where an NVIDIA GPU "
             "and its driver are installed",
             r);
    return;
  }
  snprintf(
      out, cap,
      "the NVIDIA driver is too old for the CUDA runtime %s at %s (the driver supports CUDA %s): install a "
      "driver for CUDA %s or newer, or put a CUDA runtime of the driver's major version first (%s names "
      "one); the GPUs themselves may be fine",
      r, sl__cu.path, d, r, SL_CUDART_ENV);
}

bool sl__cuda_nccl_mismatch(char *out, size_t cap) {
  int loaded = 0;
  if (!sl__nccl_ready() || sl__nc.ncclGetVersion(&loaded) != ncclSuccess || loaded <= 0)
    return false;
  int built = NCCL_VERSION_CODE;
  /* Same major and minor: the headers the library was compiled against. Older ones are used through
   * the fields they know (ncclConfig_t carries its size and version). */
  if (loaded / 100 == built / 100)
    return false;
  char l[32], b[32];
  sl__nccl_version_text(loaded, l, sizeof l);
  sl__nccl_version_text(built, b, sizeof b);
  snprintf(out, cap,
           "this process runs NCCL %s (%s), but shardload was built with NCCL %s (another NCCL was loaded "
           "first, e.g. by torch, or the library path chose another one); broadcasts may fail or misbehave: "
           "use one NCCL for both, or name the one to use in %s",
           l, sl__nc.path, b, SL_NCCL_ENV);
  return true;
}
