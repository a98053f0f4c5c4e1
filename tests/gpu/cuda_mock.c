/*
 * cuda_mock.c — a stand-in for the CUDA runtime and NCCL on the CPU, so that the CUDA backend, and
 * the whole loader over it, run where no GPU exists. Linked instead of libcudart and libnccl (the
 * real headers give the signatures, so a mismatch does not compile) as shared libraries named as the
 * real ones (tests/gpu/gpumock.cmake): libcudart.so.13 (symbols versioned libcudart.so.13, as
 * NVIDIA's), a CUDA 12.4 libcudart.so.12 (MOCK_CUDART_MAJOR=12: no cudaGetDriverEntryPointByVersion,
 * as before 12.5) and libnccl.so.2. The library finds them at run time as it finds the real ones
 * (LD_LIBRARY_PATH, or already loaded by a test program linked with them).
 *
 * It behaves like a device where the backend could get it wrong unnoticed (cuda_mock.h):
 *   - device memory is not host memory: cudaMalloc hands out a mapping with no access (a host read
 *     or write of it faults), filled with 0xCD so that zero-filling is checked; the mock reaches
 *     the pages through a second mapping. Pinned host memory (cudaHostAlloc) is plain memory,
 *     page-aligned as CUDA's (each allocation remembered, so that copies can be counted by their
 *     source buffer);
 *   - work is asynchronous: every copy, memset, event record, event wait and broadcast is queued on
 *     its stream and executed later by the mock's own device thread, in stream order, each due
 *     0-4 x MOCK_CUDA_OP_US microseconds (default 20, drawn per operation: MOCK_CUDA_SEED) after
 *     it was queued, so that work of different streams completes in no fixed order; the legacy stream (NULL)
 *     orders against blocking streams as CUDA's does (non-blocking streams do not wait for it) and
 *     its asynchronous work takes MOCK_CUDA_LEGACY_MS (default 0) more, as a caller's slow kernel
 *     would;
 *     cudaStreamWaitEvent waits for the event's last record; synchronous cudaMemcpy/cudaMemset run
 *     on the legacy stream and wait for it; cudaFree and cudaFreeHost first wait for all work;
 *   - failures: MOCK_CUDA_DEVICES (count, default 8); MOCK_CUDA_DRIVER_VERSION (the driver's CUDA
 *     version, default 13000, 0: none): a driver of an older major than the runtime answers
 *     cudaErrorInsufficientDriver, as the real runtime does;
 *     MOCK_CUDA_MALLOC_LIMIT (bytes of device memory per process before cudaErrorMemoryAllocation);
 *     MOCK_CUDA_FAULT_AFTER (a sticky cudaErrorIllegalAddress after that many executed operations:
 *     every later call returns it); MOCK_CUDA_MAX_PITCH caps 2-D pitches (default 2^31-1);
 *     device d has PCI bus id 0000:<d>:00.0 (MOCK_CUDA_SHARED=1: one bus id for all);
 *   - NCCL (cuda_mock_nccl.c): communicators meet in a folder; creation blocks until every member
 *     has called (non-blocking ones answer ncclInProgress until then); the first collective of a
 *     communicator first connects to every member (lazy connection, as NCCL does); a split of a
 *     blocking parent blocks until every parent rank called it; an abort takes MOCK_NCCL_ABORT_MS
 *     (default 50).
 */
#include "cuda_mock.h"

#ifndef MOCK_CUDART_MAJOR
#define MOCK_CUDART_MAJOR 13
#endif

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t mock_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t mock_cv = PTHREAD_COND_INITIALIZER;

int mock_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return end != v && *end == '\0' ? (int)x : dflt;
}

void mock_nap_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}

double mock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Contexts as the runtime makes them: a thread has none until cudaSetDevice (or the first call
 * that needs one, which binds device 0's); the driver's cuCtxGetCurrent/cuCtxSetCurrent (through
 * cudaGetDriverEntryPointByVersion) read and bind a thread's context: NULL, or one per device. */
static _Thread_local int current_device = -1; /* -1: no context on this thread */
static _Atomic unsigned contexts_made;        /* bit d: device d's primary context exists */
static char context_of[32];                   /* the context handle of device d: &context_of[d] */

static void bind_device(int device) {
  current_device = device;
  if (device >= 0 && device < 32)
    contexts_made |= 1u << device;
}

int mock_current_device(void) {
  if (current_device < 0)
    bind_device(0); /* the runtime's implicit initialisation */
  return current_device;
}

int mock_thread_context(void) {
  return current_device;
}

unsigned mock_contexts_made(void) {
  return contexts_made;
}

static CUresult mock_ctx_get(CUcontext *ctx) {
  *ctx = current_device >= 0 ? (CUcontext)(void *)&context_of[current_device] : NULL;
  return CUDA_SUCCESS;
}

static CUresult mock_ctx_set(CUcontext ctx) {
  if (ctx == NULL) {
    current_device = -1;
    return CUDA_SUCCESS;
  }
  ptrdiff_t d = (char *)(void *)ctx - context_of;
  if (d < 0 || d >= 32 || !(contexts_made & (1u << d)))
    return CUDA_ERROR_INVALID_CONTEXT;
  current_device = (int)d;
  return CUDA_SUCCESS;
}

/* The driver's CUDA version (MOCK_CUDA_DRIVER_VERSION, default 13000; 0: no driver), and whether it
 * can run this runtime: a driver runs runtimes of its own major and older. */
static int driver_version(void) {
  return mock_env_int("MOCK_CUDA_DRIVER_VERSION", 13000);
}

static cudaError_t driver_check(void) {
  return driver_version() / 1000 >= MOCK_CUDART_MAJOR ? cudaSuccess : cudaErrorInsufficientDriver;
}

static cudaError_t entry_point(const char *symbol, void **fn, enum cudaDriverEntryPointQueryResult *q) {
  cudaError_t e = driver_check();
  if (e != cudaSuccess)
    return e;
  CUresult (*get)(CUcontext *) = mock_ctx_get;
  CUresult (*set)(CUcontext) = mock_ctx_set;
  *fn = NULL;
  if (strcmp(symbol, "cuCtxGetCurrent") == 0)
    memcpy(fn, &get, sizeof get);
  else if (strcmp(symbol, "cuCtxSetCurrent") == 0)
    memcpy(fn, &set, sizeof set);
  if (q != NULL)
    *q = *fn != NULL ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* cudaGetDriverEntryPointByVersion exists from CUDA 12.5 on: the CUDA 12 stand-in (12.4) lacks it. */
#if MOCK_CUDART_MAJOR >= 13
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *q) {
  (void)version;
  (void)flags;
  return entry_point(symbol, fn, q);
}
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *q) {
  (void)flags;
  return entry_point(symbol, fn, q);
}
#pragma GCC diagnostic pop

/* ---- errors ---- */

static cudaError_t sticky = cudaSuccess; /* under mock_mu */

cudaError_t mock_sticky(void) {
  return sticky;
}

void mock_set_sticky(cudaError_t e) {
  if (sticky == cudaSuccess)
    sticky = e;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInsufficientDriver:
    return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorInvalidPitchValue:
    return "invalid pitch argument";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorNotReady:
    return "device not ready";
  case cudaErrorIllegalAddress:
    return "an illegal memory access was encountered";
  default:
    return "mock CUDA error";
  }
}

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInsufficientDriver:
    return "cudaErrorInsufficientDriver";
  case cudaErrorInvalidPitchValue:
    return "cudaErrorInvalidPitchValue";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorIllegalAddress:
    return "cudaErrorIllegalAddress";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  default:
    return "cudaErrorMock";
  }
}

/* The last error: the sticky one, else none (calls report their own errors directly). */
cudaError_t cudaGetLastError(void) {
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = sticky;
  pthread_mutex_unlock(&mock_mu);
  return e;
}

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 0;
  cudaError_t e = driver_check();
  if (e != cudaSuccess)
    return e;
  *count = mock_env_int("MOCK_CUDA_DEVICES", 8);
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return e;
  if (device < 0 || device >= n)
    return cudaErrorInvalidDevice;
  bind_device(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = current_device >= 0 ? current_device : 0; /* as the runtime: 0 without a context */
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  (void)device;
  *value = attr == cudaDevAttrMaxPitch ? mock_env_int("MOCK_CUDA_MAX_PITCH", 2147483647) : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
  snprintf(bus, (size_t)len, "0000:%02x:00.0", mock_env_int("MOCK_CUDA_SHARED", 0) ? 0 : device);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = driver_version();
  return cudaSuccess;
}

/* The CUDA 13 stand-in is the headers' runtime; the CUDA 12 one is a 12.4. */
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = MOCK_CUDART_MAJOR >= 13 ? CUDART_VERSION : MOCK_CUDART_MAJOR * 1000 + 40;
  return cudaSuccess;
}

/* ---- device memory: a no-access mapping handed out, a second mapping for the mock ---- */

typedef struct alloc_rec {
  char *dev;    /* what the caller gets: no access */
  char *shadow; /* the same pages, readable and writable by the mock */
  size_t n;     /* bytes asked for */
  size_t mapped;
  int device;
  struct alloc_rec *next;
} alloc_rec;
static alloc_rec *allocs;
static size_t allocated;

static alloc_rec *find_alloc(const void *p) {
  for (alloc_rec *r = allocs; r != NULL; r = r->next)
    if ((const char *)p >= r->dev && (const char *)p < r->dev + (r->n > 0 ? r->n : 1))
      return r;
  return NULL;
}

void *mock_shadow(const void *p, size_t len, bool *is_device) {
  alloc_rec *r = find_alloc(p);
  if (is_device != NULL)
    *is_device = r != NULL;
  if (r == NULL)
    return (void *)p;
  size_t off = (size_t)((const char *)p - r->dev);
  if (len > r->n - off)
    return NULL;
  return r->shadow + off;
}

void mock_device_reserve(long long delta) {
  pthread_mutex_lock(&mock_mu);
  if (delta < 0 && (size_t)-delta > allocated)
    allocated = 0;
  else
    allocated = (size_t)((long long)allocated + delta);
  pthread_mutex_unlock(&mock_mu);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  size_t limit = (size_t)mock_env_int("MOCK_CUDA_MALLOC_LIMIT", 1 << 30);
  pthread_mutex_lock(&mock_mu);
  *free_bytes = allocated < limit ? limit - allocated : 0;
  pthread_mutex_unlock(&mock_mu);
  *total = limit;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = NULL;
  pthread_mutex_lock(&mock_mu);
  cudaError_t st = sticky;
  size_t limit = (size_t)mock_env_int("MOCK_CUDA_MALLOC_LIMIT", 1 << 30);
  bool room = n <= limit && allocated <= limit - n;
  pthread_mutex_unlock(&mock_mu);
  if (st != cudaSuccess)
    return st;
  if (!room)
    return cudaErrorMemoryAllocation;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t mapped = n == 0 ? page : (n + page - 1) / page * page;
  alloc_rec *r = calloc(1, sizeof *r);
  int fd = memfd_create("mock-cuda-device", MFD_CLOEXEC);
  if (r == NULL || fd < 0 || ftruncate(fd, (off_t)mapped) != 0) {
    free(r);
    if (fd >= 0)
      close(fd);
    return cudaErrorMemoryAllocation;
  }
  r->dev = mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  r->shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (r->dev == MAP_FAILED || r->shadow == MAP_FAILED) {
    if (r->dev != MAP_FAILED)
      munmap(r->dev, mapped);
    if (r->shadow != MAP_FAILED)
      munmap(r->shadow, mapped);
    free(r);
    return cudaErrorMemoryAllocation;
  }
  memset(r->shadow, 0xCD, mapped);
  r->n = n;
  r->mapped = mapped;
  r->device = mock_current_device();
  pthread_mutex_lock(&mock_mu);
  r->next = allocs;
  allocs = r;
  allocated += n;
  pthread_mutex_unlock(&mock_mu);
  *p = r->dev;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  /* cudaFree(NULL) does nothing (callers use it to create the context); a real free synchronises
   * the device first. */
  if (p == NULL)
    return mock_sticky();
  mock_drain_all();
  pthread_mutex_lock(&mock_mu);
  alloc_rec **pp = &allocs;
  while (*pp != NULL && (*pp)->dev != p)
    pp = &(*pp)->next;
  alloc_rec *r = *pp;
  if (r != NULL) {
    *pp = r->next;
    allocated -= r->n;
  }
  pthread_mutex_unlock(&mock_mu);
  if (r == NULL)
    return cudaErrorInvalidValue;
  munmap(r->dev, r->mapped);
  munmap(r->shadow, r->mapped);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p) {
  memset(attr, 0, sizeof *attr);
  attr->type = cudaMemoryTypeUnregistered;
  pthread_mutex_lock(&mock_mu);
  alloc_rec *r = find_alloc(p);
  if (r != NULL) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = r->device;
    attr->devicePointer = (void *)p;
  } else if (mock_pinned_base(p) != NULL) {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = (void *)p;
  }
  pthread_mutex_unlock(&mock_mu);
  return cudaSuccess;
}

/* Pinned allocations, so that a copy's source can be told apart by its buffer (mock_stats). */
typedef struct pinned_rec {
  char *p;
  size_t n;
  struct pinned_rec *next;
} pinned_rec;

static pinned_rec *pinned;  /* under mock_mu */
static size_t pinned_bytes; /* held by pinned allocations, against MOCK_CUDA_PINNED_LIMIT */

const void *mock_pinned_base(const void *p) {
  for (const pinned_rec *r = pinned; r != NULL; r = r->next)
    if ((const char *)p >= r->p && (const char *)p < r->p + r->n)
      return r->p;
  return NULL;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  n = n > 0 ? n : 1;
  pinned_rec *r = malloc(sizeof *r);
  /* CUDA's pinned memory is page-aligned: O_DIRECT reads (io_uring) go straight into it */
  if (posix_memalign(p, 4096, n) != 0)
    *p = NULL;
  if (r == NULL || *p == NULL) {
    free(r);
    free(*p);
    *p = NULL;
    return cudaErrorMemoryAllocation;
  }
  pthread_mutex_lock(&mock_mu);
  /* MOCK_CUDA_PINNED_LIMIT: bytes of pinned memory the process may hold (a container's locked-memory
   * limit, or the driver's), beyond which cudaHostAlloc fails as CUDA's does. */
  int limit = mock_env_int("MOCK_CUDA_PINNED_LIMIT", 0);
  if (limit > 0 && pinned_bytes + n > (size_t)limit) {
    pthread_mutex_unlock(&mock_mu);
    free(r);
    free(*p);
    *p = NULL;
    return cudaErrorMemoryAllocation;
  }
  pinned_bytes += n;
  *r = (pinned_rec){.p = *p, .n = n, .next = pinned};
  pinned = r;
  mock_stats_note_pinned();
  pthread_mutex_unlock(&mock_mu);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
  mock_drain_all(); /* as cudaFree */
  pthread_mutex_lock(&mock_mu);
  for (pinned_rec **pp = &pinned; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->p == p) {
      pinned_rec *r = *pp;
      pinned_bytes -= r->n;
      *pp = r->next;
      free(r);
      break;
    }
  }
  pthread_mutex_unlock(&mock_mu);
  free(p);
  return cudaSuccess;
}
