/*
 * versions.c — which CUDA driver, CUDA runtime and NCCL this process runs with. A driver older than
 * the runtime the library was built with makes every CUDA call fail as if there were no GPU; a
 * process that loaded another NCCL first (torch's, inside a framework's worker) runs that one. Both
 * are said in so many words, and the versions are logged when the backend starts.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"

#include <stdio.h>

/* CUDA versions are 1000 * major + 10 * minor. */
static void cuda_version_text(int v, char *out, size_t cap) {
  if (v <= 0)
    snprintf(out, cap, "unknown");
  else
    snprintf(out, cap, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* NCCL versions from 2.9 on are 10000 * major + 100 * minor + patch. */
static void nccl_version_text(int v, char *out, size_t cap) {
  if (v <= 0)
    snprintf(out, cap, "unknown");
  else if (v >= 20900)
    snprintf(out, cap, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else
    snprintf(out, cap, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

/* The driver's and the runtime's CUDA versions as text ("unknown" for what cannot be asked); returns
 * the driver's (0: no driver). */
static int cuda_versions_text(char *d, char *r, size_t cap) {
  int driver = 0;
  int runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess)
    driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess)
    runtime = 0;
  (void)cudaGetLastError();
  cuda_version_text(driver, d, cap);
  cuda_version_text(runtime, r, cap);
  return driver;
}

void sl__cuda_versions(char *out, size_t cap) {
  int nccl = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess)
    nccl = 0;
  char d[32], r[32], n[32], built[32];
  (void)cuda_versions_text(d, r, sizeof d);
  nccl_version_text(nccl, n, sizeof n);
  nccl_version_text(NCCL_VERSION_CODE, built, sizeof built);
  snprintf(out, cap, "driver for CUDA %s, CUDA runtime %s, NCCL %s (built with NCCL %s)", d, r, n, built);
}

void sl__cuda_driver_too_old(char *out, size_t cap) {
  char d[32], r[32];
  if (cuda_versions_text(d, r, sizeof d) <= 0) { /* the runtime reports a missing driver the same way as an old one */
    snprintf(out, cap,
             "no NVIDIA driver was found (the CUDA runtime %s cannot load libcuda): run where an NVIDIA GPU "
             "and its driver are installed",
             r);
    return;
  }
  snprintf(out, cap,
           "the NVIDIA driver is too old for this build's CUDA runtime %s (the driver supports CUDA %s): "
           "install a driver for CUDA %s or newer, or build shardload with an older CUDA toolkit; the GPUs "
           "themselves may be fine",
           r, d, r);
}

bool sl__cuda_nccl_mismatch(char *out, size_t cap) {
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess || loaded <= 0)
    return false;
  int built = NCCL_VERSION_CODE;
  /* Same major and minor: the ABI the library was compiled against. */
  if (loaded / 100 == built / 100)
    return false;
  char l[32], b[32];
  nccl_version_text(loaded, l, sizeof l);
  nccl_version_text(built, b, sizeof b);
  snprintf(out, cap,
           "this process runs NCCL %s, but shardload was built with NCCL %s (another NCCL was loaded first, "
           "e.g. by torch, or the library path chose another one); broadcasts may fail or misbehave: use "
           "one NCCL for both, or build shardload against the one the process loads",
           l, b);
  return true;
}
