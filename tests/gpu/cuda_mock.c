/*
 * cuda_mock.c — a stand-in for the CUDA runtime and NCCL, on the CPU, so that the CUDA backend's
 * own logic (device choice, streams and events, 2-D copy shapes, NCCL communicator creation by id
 * and by split, broadcast polling, aborts, timeouts, teardown) runs in CI where no GPU exists.
 * Linked instead of libcudart and libnccl into test_cuda_mock (test_cuda_backend.c's checks); the
 * real headers give the signatures, so a mismatch does not compile.
 *
 * Model:
 *   - "device" memory is host memory (filled with 0xCD by cudaMalloc, so that zero-filling is
 *     checked); every copy happens at once, but a stream or event reports cudaErrorNotReady for
 *     MOCK_CUDA_LAG queries after each operation (default 3), so that callers must poll;
 *   - MOCK_CUDA_DEVICES: device count (default 8), or "nodriver" (cudaErrorInsufficientDriver);
 *     device d has PCI bus id 0000:<d>:00.0 (per process; MOCK_CUDA_SHARED=1 gives every device
 *     of every process the same one); MOCK_CUDA_MAX_PITCH caps 2-D pitches (default 2^31-1);
 *   - NCCL communicators meet in a folder ${TMPDIR:-/tmp}/sl-nccl-mock-<id>/: a rank joins by
 *     writing join.<rank>; a broadcast's root writes b<seq>.data and completes when every other
 *     rank has written its b<seq>.ack.<rank>; receivers complete when the data is there. So a
 *     root cannot finish while a member stays away (the abort and timeout paths), like NCCL.
 *     Non-blocking communicators answer ncclInProgress until every rank has joined (or, when
 *     finalizing, written fin.<rank>). A rank that destroys or aborts a communicator writes
 *     gone.<rank>; the last one removes the folder.
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return end != v && *end == '\0' ? (int)x : dflt;
}

static int lag(void) {
  return env_int("MOCK_CUDA_LAG", 3);
}

static void nap_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- device memory registry (for cudaPointerGetAttributes) ---- */

typedef struct alloc_rec {
  char *p;
  size_t n;
  int device;
  struct alloc_rec *next;
} alloc_rec;
static alloc_rec *allocs;

static _Thread_local int current_device;

/* ---- CUDA runtime ---- */

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
  default:
    return "cudaErrorMock";
  }
}

cudaError_t cudaGetLastError(void) {
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
  const char *v = getenv("MOCK_CUDA_DEVICES");
  if (v != NULL && strcmp(v, "nodriver") == 0) {
    *count = 0;
    return cudaErrorInsufficientDriver;
  }
  *count = env_int("MOCK_CUDA_DEVICES", 8);
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return e;
  if (device < 0 || device >= n)
    return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  (void)device;
  *value = attr == cudaDevAttrMaxPitch ? env_int("MOCK_CUDA_MAX_PITCH", 2147483647) : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
  snprintf(bus, (size_t)len, "0000:%02x:00.0", env_int("MOCK_CUDA_SHARED", 0) ? 0 : device);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = (size_t)1 << 30;
  *total = (size_t)2 << 30;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = NULL;
  alloc_rec *r = calloc(1, sizeof *r);
  char *mem = malloc(n > 0 ? n : 1);
  if (r == NULL || mem == NULL) {
    free(r);
    free(mem);
    return cudaErrorMemoryAllocation;
  }
  memset(mem, 0xCD, n);
  r->p = mem;
  r->n = n;
  r->device = current_device;
  pthread_mutex_lock(&mu);
  r->next = allocs;
  allocs = r;
  pthread_mutex_unlock(&mu);
  *p = mem;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (p == NULL)
    return cudaSuccess;
  pthread_mutex_lock(&mu);
  alloc_rec **pp = &allocs;
  while (*pp != NULL && (*pp)->p != p)
    pp = &(*pp)->next;
  alloc_rec *r = *pp;
  if (r != NULL)
    *pp = r->next;
  pthread_mutex_unlock(&mu);
  if (r == NULL)
    return cudaErrorInvalidValue;
  free(r->p);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p) {
  memset(attr, 0, sizeof *attr);
  attr->type = cudaMemoryTypeUnregistered;
  pthread_mutex_lock(&mu);
  for (alloc_rec *r = allocs; r != NULL; r = r->next) {
    if ((const char *)p >= r->p && (const char *)p < r->p + (r->n > 0 ? r->n : 1)) {
      attr->type = cudaMemoryTypeDevice;
      attr->device = r->device;
      attr->devicePointer = (void *)p;
    }
  }
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  *p = malloc(n > 0 ? n : 1);
  return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

/* Streams and events: an operation makes them "not ready" for lag() queries; a stream may also
 * carry one pending broadcast. */
struct ncclComm;
typedef struct pending {
  int kind; /* 0 none, 1 root, 2 receiver */
  struct ncclComm *comm;
  unsigned seq;
  void *buf;
  size_t count;
} pending;

struct CUstream_st {
  int left;
  pending op;
  struct CUstream_st *next;
};
struct CUevent_st {
  int left;
};
static struct CUstream_st *streams;

static void touch_stream(cudaStream_t s) {
  if (s != NULL)
    s->left = lag();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  (void)flags;
  *s = calloc(1, sizeof **s);
  if (*s == NULL)
    return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&mu);
  (*s)->next = streams;
  streams = *s;
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  pthread_mutex_lock(&mu);
  struct CUstream_st **pp = &streams;
  while (*pp != NULL && *pp != s)
    pp = &(*pp)->next;
  if (*pp != NULL)
    *pp = s->next;
  pthread_mutex_unlock(&mu);
  free(s);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
  (void)flags;
  *ev = calloc(1, sizeof **ev);
  return *ev != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  free(ev);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  (void)s;
  ev->left = lag();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  if (ev->left > 0) {
    ev->left--;
    return cudaErrorNotReady;
  }
  return cudaSuccess;
}

static bool progress(pending *op); /* NCCL part, below */

cudaError_t cudaStreamQuery(cudaStream_t s) {
  if (s == NULL)
    return cudaSuccess;
  if (s->left > 0) {
    s->left--;
    return cudaErrorNotReady;
  }
  pthread_mutex_lock(&mu);
  bool done = s->op.kind == 0 || progress(&s->op);
  pthread_mutex_unlock(&mu);
  return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  cudaError_t e = cudaErrorNotReady;
  while (e == cudaErrorNotReady)
    e = cudaStreamQuery(s);
  return e;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  memset(p, v, n);
  touch_stream(s);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  (void)kind;
  memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)kind;
  memmove(dst, src, n);
  touch_stream(s);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)kind;
  size_t max_pitch = (size_t)env_int("MOCK_CUDA_MAX_PITCH", 2147483647);
  if (width > dpitch || width > spitch || dpitch > max_pitch || spitch > max_pitch)
    return cudaErrorInvalidPitchValue;
  for (size_t i = 0; i < height; i++)
    memmove((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
  touch_stream(s);
  return cudaSuccess;
}

/* ---- NCCL ---- */

enum { C_INIT, C_READY, C_FINALIZING, C_DONE };

struct ncclComm {
  char key[300]; /* names the meeting folder */
  char dir[512];
  int nranks;
  int rank;
  int device;
  int state;
  bool blocking;
  unsigned seq;    /* broadcasts issued */
  unsigned splits; /* splits issued */
};

static char last_error[256] = "";
static int group_depth;
static bool group_in_progress;

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclInProgress:
    return "NCCL operation in progress";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  default:
    return "mock NCCL error";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_error;
}

static void file_path(const struct ncclComm *c, const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", c->dir, name);
}

static bool exists(const struct ncclComm *c, const char *name) {
  char p[600];
  file_path(c, name, p, sizeof p);
  return access(p, F_OK) == 0;
}

/* Writes a file atomically (temporary name, then rename). */
static bool write_file(struct ncclComm *c, const char *name, const void *data, size_t n) {
  char p[600];
  char tmp[640];
  file_path(c, name, p, sizeof p);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", p, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (f == NULL)
    return false;
  bool ok = n == 0 || fwrite(data, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  ok = ok && rename(tmp, p) == 0;
  return ok;
}

static bool all_present(const struct ncclComm *c, const char *prefix) {
  for (int r = 0; r < c->nranks; r++) {
    char name[64];
    snprintf(name, sizeof name, "%s.%d", prefix, r);
    if (!exists(c, name))
      return false;
  }
  return true;
}

/* A rank leaving writes gone.<rank>; the one that finds every rank gone removes the folder. (Files
 * stay until then: a peer may still be looking for this rank's join or fin file.) */
static void cleanup_files(struct ncclComm *c) {
  char name[64];
  snprintf(name, sizeof name, "gone.%d", c->rank);
  write_file(c, name, "", 0);
  if (!all_present(c, "gone"))
    return;
  DIR *d = opendir(c->dir);
  for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d)) {
    char p[1024];
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      snprintf(p, sizeof p, "%s/%s", c->dir, e->d_name);
      unlink(p);
    }
  }
  if (d != NULL)
    closedir(d);
  rmdir(c->dir);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  unsigned char rnd[8] = {0};
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
    if (fd >= 0)
      close(fd);
    snprintf(last_error, sizeof last_error, "mock: no randomness");
    return ncclSystemError;
  }
  close(fd);
  snprintf(id->internal, sizeof id->internal, "%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0],
           rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  return ncclSuccess;
}

static ncclResult_t join(struct ncclComm *c) {
  mkdir(c->dir, 0700);
  char name[64];
  snprintf(name, sizeof name, "join.%d", c->rank);
  if (!write_file(c, name, "", 0)) {
    snprintf(last_error, sizeof last_error, "mock: cannot write in %.150s: %.60s", c->dir, strerror(errno));
    return ncclSystemError;
  }
  if (!c->blocking)
    return ncclInProgress;
  for (int i = 0; i < 60000 && !all_present(c, "join"); i++)
    nap_ms(1);
  if (!all_present(c, "join")) {
    snprintf(last_error, sizeof last_error, "mock: not every rank joined %.200s", c->dir);
    return ncclSystemError;
  }
  c->state = C_READY;
  return ncclSuccess;
}

static struct ncclComm *new_comm(const char *key, int nranks, int rank, bool blocking) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  const char *tmp = getenv("TMPDIR");
  snprintf(c->key, sizeof c->key, "%s", key);
  snprintf(c->dir, sizeof c->dir, "%s/sl-nccl-mock-%s", tmp != NULL && *tmp != '\0' ? tmp : "/tmp", key);
  c->nranks = nranks;
  c->rank = rank;
  c->device = current_device;
  c->state = C_INIT;
  c->blocking = blocking;
  return c;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  bool blocking = config == NULL || config->blocking != 0;
  struct ncclComm *c = new_comm(id.internal, nranks, rank, blocking);
  if (c == NULL)
    return ncclSystemError;
  *comm = c;
  ncclResult_t r = join(c);
  if (r == ncclInProgress && group_depth > 0) {
    group_in_progress = true;
    return ncclSuccess;
  }
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0)
    return ncclInvalidUsage;
  group_depth--;
  if (group_depth == 0 && group_in_progress) {
    group_in_progress = false;
    return ncclInProgress;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
  if (c == NULL)
    return ncclInvalidArgument;
  if (c->state == C_INIT && all_present(c, "join"))
    c->state = C_READY;
  if (c->state == C_FINALIZING && all_present(c, "fin"))
    c->state = C_DONE;
  *state = c->state == C_INIT || c->state == C_FINALIZING ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
  *device = c->device;
  return ncclSuccess;
}

/* Called with mu held: moves a pending broadcast on; true when it is complete. */
static bool progress(pending *op) {
  struct ncclComm *c = op->comm;
  char name[64];
  if (op->kind == 2) {
    char p[600];
    snprintf(name, sizeof name, "b%u.data", op->seq);
    file_path(c, name, p, sizeof p);
    FILE *f = fopen(p, "rb");
    if (f == NULL)
      return false;
    size_t got = fread(op->buf, 1, op->count, f);
    fclose(f);
    if (got != op->count)
      return false;
    snprintf(name, sizeof name, "b%u.ack.%d", op->seq, c->rank);
    write_file(c, name, "", 0);
    op->kind = 0;
    return true;
  }
  for (int r = 0; r < c->nranks; r++) {
    snprintf(name, sizeof name, "b%u.ack.%d", op->seq, r);
    if (r != c->rank && !exists(c, name))
      return false;
  }
  op->kind = 0;
  return true;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t c, cudaStream_t s) {
  if (c == NULL || s == NULL || type != ncclUint8 || root < 0 || root >= c->nranks || c->state != C_READY)
    return ncclInvalidArgument;
  pthread_mutex_lock(&mu);
  if (s->op.kind != 0) {
    pthread_mutex_unlock(&mu);
    snprintf(last_error, sizeof last_error, "mock: the stream already carries a broadcast");
    return ncclInvalidUsage;
  }
  c->seq++;
  pending op = {.kind = c->rank == root ? 1 : 2, .comm = c, .seq = c->seq, .buf = recv, .count = count};
  if (op.kind == 1) {
    if (send != recv)
      memmove(recv, send, count);
    char name[64];
    snprintf(name, sizeof name, "b%u.data", c->seq);
    if (c->nranks > 1 && !write_file(c, name, recv, count)) {
      pthread_mutex_unlock(&mu);
      snprintf(last_error, sizeof last_error, "mock: cannot write %s", name);
      return ncclSystemError;
    }
  }
  s->op = op;
  pthread_mutex_unlock(&mu);
  touch_stream(s);
  return c->blocking ? ncclSuccess : ncclInProgress;
}

static void drop_pending(struct ncclComm *c) {
  pthread_mutex_lock(&mu);
  for (struct CUstream_st *s = streams; s != NULL; s = s->next)
    if (s->op.kind != 0 && s->op.comm == c)
      s->op.kind = 0;
  pthread_mutex_unlock(&mu);
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == NULL)
    return ncclSuccess;
  drop_pending(c);
  cleanup_files(c);
  free(c);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (c == NULL || c->state != C_READY)
    return ncclInvalidUsage;
  char name[64];
  snprintf(name, sizeof name, "fin.%d", c->rank);
  if (!write_file(c, name, "", 0))
    return ncclSystemError;
  c->state = C_FINALIZING;
  if (!c->blocking)
    return ncclInProgress;
  while (!all_present(c, "fin"))
    nap_ms(1);
  c->state = C_DONE;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c == NULL)
    return ncclSuccess;
  if (c->state == C_FINALIZING || c->state == C_INIT)
    return ncclInvalidUsage;
  drop_pending(c);
  cleanup_files(c);
  free(c);
  return ncclSuccess;
}

/* Every rank of the parent writes s<n>.<rank> = "color key"; members of a color form a child
 * ordered by (key, parent rank). Blocking, like a split of a blocking parent. */
ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  *newcomm = NULL;
  if (parent == NULL || parent->state != C_READY)
    return ncclInvalidUsage;
  unsigned n = ++parent->splits;
  char name[64];
  char text[64];
  snprintf(name, sizeof name, "s%u.%d", n, parent->rank);
  int len = snprintf(text, sizeof text, "%d %d", color, key);
  if (!write_file(parent, name, text, (size_t)len))
    return ncclSystemError;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "s%u", n);
  for (int i = 0; i < 60000 && !all_present(parent, prefix); i++)
    nap_ms(1);
  int size = 0;
  int rank = 0;
  for (int r = 0; r < parent->nranks; r++) {
    char p[600];
    snprintf(name, sizeof name, "s%u.%d", n, r);
    file_path(parent, name, p, sizeof p);
    FILE *f = fopen(p, "r");
    int col = 0;
    int k = 0;
    bool ok = f != NULL && fscanf(f, "%d %d", &col, &k) == 2;
    if (f != NULL)
      fclose(f);
    if (!ok) {
      snprintf(last_error, sizeof last_error, "mock: split %u: rank %d did not take part", n, r);
      return ncclSystemError;
    }
    if (col != color || color == NCCL_SPLIT_NOCOLOR)
      continue;
    size++;
    if (k < key || (k == key && r < parent->rank))
      rank++;
  }
  if (color == NCCL_SPLIT_NOCOLOR)
    return ncclSuccess;
  char child_key[300];
  snprintf(child_key, sizeof child_key, "%.200s-s%u-c%d", parent->key, n, color);
  struct ncclComm *c =
      new_comm(child_key, size, rank, config == NULL ? parent->blocking : config->blocking != 0);
  if (c == NULL)
    return ncclSystemError;
  c->device = parent->device;
  ncclResult_t r = join(c);
  if (r != ncclSuccess && r != ncclInProgress) {
    cleanup_files(c);
    free(c);
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}
