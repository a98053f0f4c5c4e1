/*
 * test_cuda_backend.c — the CUDA backend's operations (backend/backend.h) at any number of ranks (one GPU
 * per rank of a node), with a fake schedule: group 0 holds every rank, group 1 ranks 1..N-1
 * (from 3 ranks on), so that some ranks are not members:
 *   - alloc returns zero-filled device memory (also after the same memory was dirtied and freed);
 *   - uploads from pinned staging with odd offsets, strides, more rows than one 2-D piece and a
 *     pitch that may exceed the device's limit, from two reader threads' streams, compared byte
 *     for byte after a copy back; device-to-device 2-D copies of the same shapes;
 *   - NCCL broadcasts from every root of every group, with communicators made from NCCL ids, and
 *     again split from a caller's NCCL communicator spanning all ranks;
 *   - the abort path: rank 1 raises the abort channel and skips a broadcast: every other rank
 *     returns (aborted, or complete), none hangs; then the timeout path with
 *     SHARDLOAD_NCCL_TIMEOUT_S=2 and no abort.
 * Built twice: against CUDA and NCCL (label gpu; without a usable GPU, or with fewer GPUs than
 * ranks on a node, it prints "SKIP: ..." and exits 77 — in the second case after checking that
 * creation fails with the shared-GPU error), and against cuda_mock.c (label mpi, runs anywhere).
 * Environment: SL_TEST_BCAST_BYTES (abort/timeout broadcasts, default 256 MiB), SL_TEST_SHARED_ONLY
 * (expect fewer GPUs than ranks: check the shared-GPU error and pass).
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "check.h"
#include "engine/staging.h"
#include "values.h"
#ifdef SL_TEST_CUDA_MOCK
#include "cuda_mock.h"
#endif

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdlib.h>
#include <string.h>

static int rank;
static int size;

/* Group 0: every rank; group 1 (3 ranks or more): ranks 1..size-1; last, every rank again but
 * exchanging only (no broadcast: no NCCL communicator). Members in rank order. */
static uint32_t members[128];
static sl__comm_group groups[3];

static sl__comm_groups test_groups(void) {
  sl__comm_groups s;
  memset(&s, 0, sizeof s);
  for (int r = 0; r < size; r++)
    members[r] = (uint32_t)r;
  groups[0].n = (uint32_t)size;
  groups[0].members = members;
  groups[0].broadcasts = true;
  s.n = 1;
  if (size >= 3) {
    for (int r = 1; r < size; r++)
      members[size + r - 1] = (uint32_t)r;
    groups[1].n = (uint32_t)size - 1;
    groups[1].members = &members[size];
    groups[1].broadcasts = true;
    s.n = 2;
  }
  groups[s.n].n = (uint32_t)size;
  groups[s.n].members = members;
  groups[s.n].broadcasts = false;
  s.n++;
  s.group = groups;
  return s;
}

static size_t env_size(const char *name, size_t dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? (size_t)strtoull(v, NULL, 10) : dflt;
}

static bool copy_back(void *host, const void *dev, size_t n) {
  cudaError_t e = cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost);
  CHECKF(e == cudaSuccess, "cudaMemcpy back of %zu bytes: %s", n, cudaGetErrorString(e));
  return e == cudaSuccess;
}

/* Host reference of a 2-D copy. */
static void copy2d(uint8_t *dst, uint64_t dst_stride, const uint8_t *src, uint64_t src_stride,
                   uint64_t row_bytes, uint64_t rows) {
  for (uint64_t i = 0; i < rows; i++)
    memcpy(dst + i * dst_stride, src + i * src_stride, (size_t)row_bytes);
}

static void test_alloc(sl__backend *b) {
  sl__err err;
  sl__err_clear(&err);
  const size_t n = ((size_t)1 << 20) + 13;
  void *d = NULL;
  CHECKF(b->ops->alloc(b, n, &d, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
  if (d == NULL)
    return;
  CHECK(cudaMemset(d, 0xAB, n) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  b->ops->release(b, d);
  /* Likely the same memory again: it must come back zeroed. */
  d = NULL;
  CHECKF(b->ops->alloc(b, n, &d, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
  uint8_t *h = malloc(n);
  if (d != NULL && h != NULL && copy_back(h, d, n)) {
    size_t bad = 0;
    while (bad < n && h[bad] == 0)
      bad++;
    CHECKF(bad == n, "alloc: byte %zu of %zu is 0x%02x, not zero", bad, n, bad < n ? h[bad] : 0);
  }
  struct cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, d) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(attr.device == b->device);
  b->ops->release(b, d);
  void *z = NULL;
  CHECKF(b->ops->alloc(b, 0, &z, &err) == SL_STATUS_OK, "alloc of 0 bytes: %s", err.msg);
  CHECK(z != NULL);
  b->ops->release(b, z);
  b->ops->release(b, NULL);
  free(h);
}

typedef struct geometry {
  uint64_t src_off, src_stride, dst_off, dst_stride, row_bytes, rows;
} geometry;

/* b has two reader threads: each has as many staging slots as either read strategy gives it. */
static void test_upload_copy(sl__backend *b) {
  sl__err err;
  sl__err_clear(&err);
  const int slots = (int)sl__staging_slots_per_thread(2);
  CHECK(slots >= SL_STAGING_RING_DEPTH);
  const geometry cases[] = {
      {3, 37, 5, 41, 29, 111},                  /* odd everything */
      {1, 100, 0, 100, 100, 50},                /* dense rows, odd source offset: one flat copy */
      {7, 5, 2, 3, 3, SL_CUDA_2D_MAX_ROWS + 7}, /* more rows than one 2-D piece */
      {11, 0, 13, 0, 4097, 1},                  /* one row, strides unused */
      {0, 64, 0, 16, 16, 1000},                 /* gather rows into a dense block */
      {5, 4096, 8, 3000, 100, 20},              /* pitches above a small device limit: row by row */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const geometry *g = &cases[i];
    uint64_t src_bytes = g->src_off + (g->rows - 1) * g->src_stride + g->row_bytes;
    uint64_t dst_bytes = g->dst_off + (g->rows - 1) * g->dst_stride + g->row_bytes + 9;
    uint8_t *staging = NULL;
    void *dev = NULL;
    void *dev2 = NULL;
    uint8_t *expect = calloc(1, dst_bytes);
    uint8_t *got = malloc(dst_bytes);
    CHECKF(b->ops->alloc_staging(b, src_bytes, (void **)&staging, &err) == SL_STATUS_OK, "staging: %s",
           err.msg);
    CHECKF(b->ops->alloc(b, dst_bytes, &dev, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
    CHECKF(b->ops->alloc(b, dst_bytes, &dev2, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
    if (staging == NULL || dev == NULL || dev2 == NULL || expect == NULL || got == NULL) {
      CHECKF(false, "upload case %zu: allocation failed", i);
    } else {
      sl_value_fill("upload.source", 0, staging, (size_t)src_bytes);
      copy2d(expect + g->dst_off, g->dst_stride, staging + g->src_off, g->src_stride, g->row_bytes, g->rows);
      int worker = (int)(i % 2);
      int slot = (int)(i / 2) * (slots - 1) / 2; /* the first, a middle and the last slot */
      sl_status st = b->ops->upload(b, worker, slot, (uint8_t *)dev + g->dst_off, g->dst_stride,
                                    staging + g->src_off, g->src_stride, g->row_bytes, g->rows, &err);
      CHECKF(st == SL_STATUS_OK, "upload case %zu: %s", i, err.msg);
      st = b->ops->upload_wait(b, worker, slot, &err);
      CHECKF(st == SL_STATUS_OK, "upload_wait case %zu: %s", i, err.msg);
      /* The slot may be reused now: scribbling on it must not change what arrived. */
      memset(staging, 0x5A, (size_t)src_bytes);
      if (copy_back(got, dev, dst_bytes))
        CHECKF(memcmp(got, expect, dst_bytes) == 0, "upload case %zu: device bytes differ", i);
      /* Device to device: the same geometry back into a fresh buffer, from the uploaded rows. */
      st = b->ops->copy(b, (uint8_t *)dev2 + g->dst_off, g->dst_stride, (uint8_t *)dev + g->dst_off,
                        g->dst_stride, g->row_bytes, g->rows, &err);
      CHECKF(st == SL_STATUS_OK, "copy case %zu: %s", i, err.msg);
      /* a device copy is the main stream's: waiting for that stream alone is enough */
      CHECK(b->ops->sync_main != NULL);
      CHECKF(b->ops->sync_main(b, &err) == SL_STATUS_OK, "sync_main: %s", err.msg);
      if (copy_back(got, dev2, dst_bytes))
        CHECKF(memcmp(got, expect, dst_bytes) == 0, "copy case %zu: device bytes differ", i);
    }
    b->ops->release_staging(b, staging);
    b->ops->release(b, dev);
    b->ops->release(b, dev2);
    free(expect);
    free(got);
  }
  /* Out-of-range reader or slot: an internal error, not a crash. */
  sl__err_clear(&err);
  CHECK(b->ops->upload_wait(b, 2, 0, &err) == SL_STATUS_INTERNAL);
  sl__err_clear(&err);
  CHECK(b->ops->upload_wait(b, 0, slots, &err) == SL_STATUS_INTERNAL);
}

/* Broadcasts from every root of every group this rank belongs to (members walk the groups in
 * the same order, so no rank waits for one that is elsewhere). */
static void test_bcast(sl__backend *b, const sl__comm_groups *s) {
  sl__err err;
  sl__err_clear(&err);
  const size_t n = ((size_t)1 << 20) + 7;
  void *dev = NULL;
  uint8_t *host = malloc(n);
  uint8_t *got = malloc(n);
  CHECKF(b->ops->alloc(b, n, &dev, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
  if (dev == NULL || host == NULL || got == NULL) {
    CHECKF(false, "bcast: allocation failed");
    free(host);
    free(got);
    return;
  }
  int broadcasts = 0;
  /* One communicator per broadcasting group of this rank, none for the exchange-only one. */
  CHECK(b->nccl_comms == (rank == 0 || size < 3 ? 1u : 2u));
  for (uint32_t g = 0; g < s->n; g++) {
    int pos = sl__cuda_comm_pos(s, g, rank);
    if (pos < 0)
      continue;
    for (int root = (int)s->group[g].n - 1; root >= 0; root--) {
      char name[32];
      snprintf(name, sizeof name, "bcast.%u.%d", g, root);
      CHECK(cudaMemset(dev, 0, n) == cudaSuccess);
      if (pos == root) {
        sl_value_fill(name, 0, host, n);
        CHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) == cudaSuccess);
      }
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      bool aborted = true;
      sl_status st = b->ops->bcast(b, g, dev, n, root, &aborted, &err);
      CHECKF(st == SL_STATUS_OK, "bcast in group %u from %d: %s", g, root, err.msg);
      CHECK(!aborted);
      CHECKF(b->ops->sync(b, &err) == SL_STATUS_OK, "sync: %s", err.msg);
      if (copy_back(got, dev, n))
        CHECKF(sl_value_mismatch(name, 0, got, n) == n, "bcast in group %u from %d: byte %zu differs", g,
               root, sl_value_mismatch(name, 0, got, n));
      broadcasts++;
    }
  }
  CHECK(broadcasts == (rank == 0 || size < 3 ? size : 2 * size - 1));
  /* Zero bytes: nothing to do, no NCCL call. */
  bool aborted = true;
  CHECK(b->ops->bcast(b, 0, dev, 0, 0, &aborted, &err) == SL_STATUS_OK);
  CHECK(!aborted);
  /* A group that does not exist, or that this rank is not in: an internal error. */
  sl__err_clear(&err);
  CHECK(b->ops->bcast(b, (uint32_t)s->n, dev, 8, 0, &aborted, &err) == SL_STATUS_INTERNAL);
  if (s->n > 2 && rank == 0) {
    sl__err_clear(&err);
    CHECK(b->ops->bcast(b, 1, dev, 8, 0, &aborted, &err) == SL_STATUS_INTERNAL);
    CHECK_CONTAINS(err.msg, "not a member");
  }
  sl__err_clear(&err);
  CHECK(b->ops->bcast(b, (uint32_t)s->n - 1, dev, 8, 0, &aborted, &err) == SL_STATUS_INTERNAL);
  CHECK_CONTAINS(err.msg, "without broadcasts");
  b->ops->release(b, dev);
  free(host);
  free(got);
}

/* The caller's NCCL communicator over every rank (same order): group communicators are split
 * from it, and it survives the backend. */
/* A caller's NCCL communicator over every rank, or NULL (on every rank) when it cannot be made. */
static ncclComm_t world_nccl(int device) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0)
    CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(cudaSetDevice(device) == cudaSuccess);
  ncclComm_t world = NULL;
  ncclResult_t r = ncclCommInitRank(&world, size, id, rank);
  CHECKF(r == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(r));
  int ok = r == ncclSuccess;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all && world != NULL) {
    ncclCommAbort(world);
    world = NULL;
  }
  return all ? world : NULL;
}

static void test_split(sl__comm *c, const sl__comm_groups *s, int device) {
  sl__err err;
  sl__err_clear(&err);
  ncclComm_t world = world_nccl(device);
  if (world == NULL)
    return;
  sl__backend *b = NULL;
  CHECKF(sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, world, s, &b, &err) ==
             SL_STATUS_OK,
         "create with a split: %s", err.msg);
  if (b != NULL) {
    CHECK(b->device == device);
    test_bcast(b, s);
    b->ops->destroy(b);
  }
  /* The caller's communicator is still valid after the backend is gone. */
  int count = 0;
  CHECK(ncclCommCount(world, &count) == ncclSuccess && count == size);
  CHECK(ncclCommDestroy(world) == ncclSuccess);
}

#ifdef SL_TEST_CUDA_MOCK
/* Against the mock only (it injects the failure): the first connection of the communicators of
 * rank 1 fails (NCCL connects lazily, in a communicator's first collective). The backend's
 * warm-up broadcast makes that happen at creation: every rank's creation fails promptly, naming
 * the connection of the group, instead of the first broadcast of the load. */
static void test_connect_failure(sl__comm *c, const sl__comm_groups *s) {
  setenv("MOCK_NCCL_CONNECT_FAIL", "1", 1);
  sl__err err;
  sl__err_clear(&err);
  sl__backend *b = NULL;
  double t0 = MPI_Wtime();
  sl_status st =
      sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, NULL, s, &b, &err);
  double took = MPI_Wtime() - t0;
  unsetenv("MOCK_NCCL_CONNECT_FAIL");
  CHECKF(b == NULL && (st == SL_STATUS_NCCL || st == SL_STATUS_PEER_FAILED),
         "creation with a failing connection: status %s (%s)", sl_status_name(st), err.msg);
  CHECKF(strstr(err.msg, "connecting the NCCL communicator of broadcast group") != NULL,
         "the message does not say that connecting failed: %s", err.msg);
  CHECKF(took < 30.0, "creation with a failing connection took %.1f s", took);
  mock_nccl_counts n = mock_nccl_count();
  CHECKF(n.live == 0, "%d mock communicators left after a failed creation", n.live);
  if (b != NULL)
    b->ops->destroy(b);
}

/* Against the mock only (it injects the failure): rank 1's split into broadcast group 0 fails
 * after the others' children formed. A split of a blocking parent waits for every rank of the
 * parent, so rank 1 must go on taking part in the later splits; every rank's creation then fails
 * promptly with rank 1's error (a rank that left the loop early would leave the others in their
 * next split until the mock gives up, 60 s). */
static void test_split_failure(sl__comm *c, const sl__comm_groups *s, int device) {
  ncclComm_t world = world_nccl(device);
  if (world == NULL)
    return;
  if (rank == 1)
    setenv("MOCK_NCCL_SPLIT_FAIL", "1", 1);
  sl__err err;
  sl__err_clear(&err);
  sl__backend *b = NULL;
  double t0 = MPI_Wtime();
  sl_status st =
      sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, world, s, &b, &err);
  double took = MPI_Wtime() - t0;
  unsetenv("MOCK_NCCL_SPLIT_FAIL");
  CHECKF(st == (rank == 1 ? SL_STATUS_NCCL : SL_STATUS_PEER_FAILED), "a failed split: status %s (%s)",
         sl_status_name(st), err.msg);
  CHECKF(strstr(err.msg, "ncclCommSplit") != NULL, "the message does not name the split: %s", err.msg);
  CHECKF(took < 30.0, "creation with a failed split took %.1f s: a rank left the splits early", took);
  if (b != NULL)
    b->ops->destroy(b);
  CHECK(ncclCommDestroy(world) == ncclSuccess);
}
#endif

/* Rank 1 stops (abort channel raised) and never joins the broadcast; the others must return. */
static void test_abort(sl__comm *c, const sl__comm_groups *s) {
  sl__err err;
  sl__err_clear(&err);
  sl__backend *b = NULL;
  CHECKF(sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, NULL, s, &b, &err) ==
             SL_STATUS_OK,
         "create: %s", err.msg);
  if (b == NULL)
    return;
  /* Far above NCCL's buffers: the root cannot finish alone. */
  const size_t n = env_size("SL_TEST_BCAST_BYTES", (size_t)256 << 20);
  void *dev = NULL;
  CHECKF(b->ops->alloc(b, n, &dev, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
  CHECK(sl__comm_abort_arm(c, &err) == SL_STATUS_OK);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    sl__comm_abort_raise(c);
  } else if (dev != NULL) {
    bool aborted = false;
    double t0 = MPI_Wtime();
    sl_status st = b->ops->bcast(b, 0, dev, n, 0, &aborted, &err);
    double took = MPI_Wtime() - t0;
    CHECKF(st == SL_STATUS_OK, "bcast with an abort: %s", err.msg);
    CHECKF(took < 60.0, "bcast with an abort took %.1f s", took);
    if (size == 2)
      CHECK(aborted); /* the root's only peer never receives */
    if (aborted) {
      sl__err_clear(&err);
      CHECK(b->ops->bcast(b, 0, dev, 8, 0, &aborted, &err) == SL_STATUS_INTERNAL);
      CHECK_CONTAINS(err.msg, "was aborted earlier");
    }
  }
  CHECK(sl__comm_abort_disarm(c, &err) == SL_STATUS_OK);
  b->ops->release(b, dev);
  b->failed = true; /* as the loader marks it after agreeing that the load failed */
  double t0 = MPI_Wtime();
  b->ops->destroy(b);
  CHECKF(MPI_Wtime() - t0 < 30.0, "destroy after an abort took %.1f s", MPI_Wtime() - t0);
}

/* Rank 1 skips a broadcast without raising anything: the others give up after the timeout. */
static void test_timeout(sl__comm *c, const sl__comm_groups *s) {
  sl__err err;
  sl__err_clear(&err);
  setenv("SHARDLOAD_NCCL_TIMEOUT_S", "2", 1);
  sl__backend *b = NULL;
  CHECKF(sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, NULL, s, &b, &err) ==
             SL_STATUS_OK,
         "create: %s", err.msg);
  unsetenv("SHARDLOAD_NCCL_TIMEOUT_S");
  if (b == NULL)
    return;
  const size_t n = env_size("SL_TEST_BCAST_BYTES", (size_t)256 << 20);
  void *dev = NULL;
  CHECKF(b->ops->alloc(b, n, &dev, &err) == SL_STATUS_OK, "alloc: %s", err.msg);
  if (rank != 1 && dev != NULL) {
    bool aborted = false;
    double t0 = MPI_Wtime();
    sl_status st = b->ops->bcast(b, 0, dev, n, 0, &aborted, &err);
    double took = MPI_Wtime() - t0;
    CHECK(!aborted);
    CHECKF(took < 30.0, "bcast with a missing rank took %.1f s", took);
    if (size == 2) {
      CHECK(st == SL_STATUS_NCCL);
      CHECK_CONTAINS(err.msg, "did not complete within 2.0 s");
      CHECK_CONTAINS(err.msg, "SHARDLOAD_NCCL_TIMEOUT_S");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  b->ops->release(b, dev);
  b->failed = true;
  double t0 = MPI_Wtime();
  b->ops->destroy(b);
  CHECKF(MPI_Wtime() - t0 < 30.0, "destroy after a timeout took %.1f s", MPI_Wtime() - t0);
}

static int node_size(void) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

static int run_gpu(sl__comm *c, const sl__comm_groups *s) {
  char why[512];
  int have = sl__cuda_available(why, sizeof why) ? 1 : 0;
  int count = 0;
  if (have && cudaGetDeviceCount(&count) != cudaSuccess)
    count = 0;
  int local = node_size();
  int mine[2] = {have, count >= local ? 1 : 0};
  int all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all[0]) {
    if (rank == 0)
      printf("SKIP: no CUDA device available (%s)\n", have ? "on another rank" : why);
    return 77;
  }
  sl__err err;
  sl__err_clear(&err);
  if (!all[1]) {
    /* More ranks than GPUs on a node: creation must refuse with the shared-GPU message. */
    sl__backend *b = NULL;
    sl_status st =
        sl__backend_cuda_create(c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, NULL, s, &b, &err);
    CHECK(b == NULL);
    /* A GPU in exclusive-process mode refuses the second context before NCCL is reached. */
    bool exclusive = strstr(err.msg, "busy or unavailable") != NULL;
    CHECKF(st == SL_STATUS_NCCL || st == SL_STATUS_PEER_FAILED || (exclusive && st == SL_STATUS_NO_DEVICE),
           "status %s: %s", sl_status_name(st), err.msg);
    CHECKF(exclusive || strstr(err.msg, "would share one GPU") != NULL, "message: %s", err.msg);
    if (getenv("SL_TEST_SHARED_ONLY") != NULL)
      return -1;
    if (sl_test_finish_mpi(MPI_COMM_WORLD) != 0)
      return 1;
    if (rank == 0)
      printf("SKIP: %d ranks per node but %d CUDA devices: only the shared-GPU error was checked\n", local,
             count);
    return 77;
  }
  CHECKF(getenv("SL_TEST_SHARED_ONLY") == NULL, "SL_TEST_SHARED_ONLY is set but every rank has its own GPU");
  sl__backend *b = NULL;
  sl_status st =
      sl__backend_cuda_create(c, 2, (int)sl__staging_slots_per_thread(2), -1, NULL, NULL, s, &b, &err);
  CHECKF(st == SL_STATUS_OK, "create: %s", err.msg);
  if (b != NULL) {
    CHECK_STR(b->ops->name, "cuda");
    CHECK(!b->host_addressable);
    CHECK(b->device >= 0 && b->device < count);
    test_alloc(b);
    test_upload_copy(b);
    test_bcast(b, s);
    int device = b->device;
    b->ops->destroy(b);
    test_split(c, s, device);
#ifdef SL_TEST_CUDA_MOCK
    if (s->n >= 3)
      test_split_failure(c, s, device);
    if (size >= 2)
      test_connect_failure(c, s);
#endif
  }
  if (size >= 2) {
    test_abort(c, s);
    test_timeout(c, s);
  }
  return -1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (size > 64) {
    fprintf(stderr, "test_cuda_backend: at most 64 ranks\n");
    MPI_Finalize();
    return 2;
  }
  sl__err err;
  sl__err_clear(&err);
  sl__comm c;
  sl__comm_groups s = test_groups();
  int rc = 1;
  if (sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK ||
      sl__comm_groups_create(&c, &s, &err) != SL_STATUS_OK) {
    fprintf(stderr, "[rank %d] MPI setup: %s\n", rank, err.msg);
  } else {
    rc = run_gpu(&c, &s);
    if (rc < 0)
      rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  }
  sl__comm_free(&c);
  MPI_Finalize();
  return rc;
}
