/*
 * test_gpu_refit.c — weight sync with device=cuda on every rank (docs/spec/DESIGN.md §13): the
 * first ranks publish blocks held in their GPU's memory (tests/mpi/refit_common.h: the fixtures'
 * values under a version's transformation, copied to the device), the others are loaders loaded on
 * their GPUs that refit, GPU to GPU over NCCL. Every receiver parameter, copied back, must equal
 * the independent reference under the version byte for byte; the caller's current device is what
 * it was; every rank returns the same status.
 *
 *   versions   1, 2 (the plan reused), a repeat of 2 (nothing moves: no NCCL communicator made)
 *   layouts    llama 1 trainer -> tp 2 (3 ranks); mixtral 2 trainers (columns) -> tp 1 dp 2 with
 *              expert parallelism, deepseek_v3 (MLA) 2 trainers (rows) -> tp 2 with EP (4 ranks)
 *   refused    a trainer publishing F32 from device memory for the BF16 checkpoint (the library
 *              converts in host memory only), and blocks in host memory on a cuda publisher (the
 *              backend's placement check): every rank fails naming the tensor, before any byte
 *              moves, the receivers unchanged; receivers on device cpu with trainers on cuda
 *   NCCL       on the stand-in: the pairs' communicators made for a refit and all released; a
 *              peer's NCCL connection failing (MOCK_NCCL_CONNECT_FAIL) fails every rank, the
 *              receivers stay loaded, and the next refit succeeds
 * Built against the stand-in (labels refit, gpumock) and, where CUDA is found, the real runtime
 * (labels refit, gpu; skipped, 77, without a GPU per rank).
 */
#include "check.h"
#include "gpu_ranks.h"
#include "load_check.h"
#include "refit_common.h"
#include "reshard_common.h"

#include <cuda_runtime.h>
#ifdef SL_TEST_CUDA_MOCK
#include "cuda_mock.h"
#endif

#include <stdlib.h>
#include <string.h>

static int rank, size, local_rank;

typedef struct gcase {
  const char *fixture;
  int trainers;
  tcut cut;
  lay to;
} gcase;

static const gcase cases[] = {
    {"llama", 1, CUT_ROWS, {2, 1, 1, false}},      /* 3 */
    {"mixtral", 2, CUT_COLS, {1, 1, 2, true}},     /* 4 */
    {"deepseek_v3", 2, CUT_ROWS, {2, 1, 1, true}}, /* 4 */
};

static void *to_device(const void *host, size_t n) {
  void *d = NULL;
  if (cudaMalloc(&d, n) != cudaSuccess)
    return NULL;
  if (cudaMemcpy(d, host, n, cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return NULL;
  }
  return d;
}

static void release(void *p) {
  cudaFree(p);
}

static rf_device gpu;
static const rf_device *blocks_on = &gpu; /* where step() puts the trainers' blocks */

/* Host memory posing as a trainer's device blocks (refused by the placement check). */
static void *to_host(const void *host, size_t n) {
  void *p = malloc(n + 1);
  if (p != NULL)
    memcpy(p, host, n);
  return p;
}

static void host_release(void *p) {
  free(p);
}

static rf_device host_blocks;

static bool fetch(const sl_param *p, uint8_t *host) {
  return cudaMemcpy(host, p->data, (size_t)p->nbytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

/* A receiver on `device`, loaded, this rank's GPU named. */
static sl_loader *receiver(const char *fixture, const lay *to, const char *device, MPI_Comm side) {
  sl_config *cfg = lay_config(fixture, to);
  lay_set(cfg, "device", device);
  lay_set(cfg, "timeout_s", "120");
  char dev[16];
  snprintf(dev, sizeof dev, "%d", local_rank);
  if (strcmp(device, "cuda") == 0)
    lay_set(cfg, "cuda_device", dev);
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, side, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (l != NULL)
    CHECKF(sl_loader_load(l) == SL_STATUS_OK, "load: %s", sl_loader_error(l));
  return l;
}

static uint64_t checksum(const sl_loader *l) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; l != NULL && i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    uint8_t *b = p->alias_of == NULL && p->nbytes > 0 ? malloc((size_t)p->nbytes) : NULL;
    if (b != NULL && fetch(p, b))
      for (uint64_t k = 0; k < p->nbytes; k++)
        h = (h ^ b[k]) * 1099511628211ull;
    free(b);
  }
  return h;
}

static void same_device(const char *label, int before) {
  int now = -1;
  CHECK(cudaGetDevice(&now) == cudaSuccess);
  CHECKF(now == before, "%s: the current device moved from %d to %d", label, before, now);
}

/* One refit of version v; zero: nothing may move. rounded: F32 from device memory (refused). */
static sl_status step(const gcase *c, const char *label, rf_trainer *t, sl_loader *l, MPI_Comm side,
                      uint64_t v, bool zero, bool rounded) {
  int device = -1;
  CHECK(cudaGetDevice(&device) == cudaSuccess);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c0 = mock_nccl_count();
#endif
  sl_status st;
  const char *report;
  if (l == NULL) {
    rf_trainer_make_on(t, blocks_on, c->fixture, c->cut, rank % c->trainers, c->trainers, v, rounded);
    st = sl_publish(t->pub, MPI_COMM_WORLD, v);
    report = sl_publisher_report_json(t->pub);
  } else {
    st = sl_loader_refit(l, MPI_COMM_WORLD, v);
    report = sl_loader_refit_report_json(l);
  }
  rf_same_everywhere(label, st == SL_STATUS_OK ? SL_STATUS_OK
                                               : SL_STATUS_INTERNAL); /* failures: PEER_FAILED elsewhere */
  same_device(label, device);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c1 = mock_nccl_count();
  CHECKF(c1.live == c0.live, "%s: %d NCCL communicators still held", label, c1.live - c0.live);
  CHECKF(st != SL_STATUS_OK || (zero ? c1.made == c0.made : c1.made > c0.made),
         "%s: %d NCCL communicators made", label, c1.made - c0.made);
#endif
  if (st == SL_STATUS_OK) {
    double moved = rf_json_number(report, "bytes_transferred");
    CHECKF(zero ? moved == 0 : moved > 0, "%s: %.0f bytes moved", label, moved);
  }
  if (st == SL_STATUS_OK && l != NULL) {
    int me = 0;
    MPI_Comm_rank(side, &me);
    rf_check_receiver_with(label, c->fixture, c->to.tp, c->to.pp, c->to.dp, c->to.ep, me, l, v, false, fetch);
  }
  return st;
}

static void run_case(const gcase *c) {
  if (c->trainers + lay_size(&c->to) != size)
    return;
  bool trainer = rank < c->trainers;
  char label[160];
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, trainer ? 0 : 1, rank, &side);
  sl_loader *l = trainer ? NULL : receiver(c->fixture, &c->to, "cuda", side);
  rf_trainer t;
  memset(&t, 0, sizeof t);
  for (uint64_t v = 1; v <= 3; v++) {
    snprintf(label, sizeof label, "%s %d trainers, version %llu, rank %d", c->fixture, c->trainers,
             (unsigned long long)(v < 3 ? v : 2), rank);
    sl_status st = step(c, label, &t, l, side, v < 3 ? v : 2, v == 3, false);
    CHECKF(st == SL_STATUS_OK, "%s: %s", label, l != NULL ? sl_loader_error(l) : sl_publisher_error(t.pub));
  }
  /* F32 from device memory into the BF16 checkpoint: refused before any byte moves */
  uint64_t sum = checksum(l);
  snprintf(label, sizeof label, "%s: F32 from the GPU, rank %d", c->fixture, rank);
  sl_status st = step(c, label, &t, l, side, 4, false, true);
  const char *msg = l != NULL ? sl_loader_error(l) : sl_publisher_error(t.pub);
  CHECKF(st != SL_STATUS_OK && strstr(msg, "convert it on the GPU") != NULL, "%s: %s", label, msg);
  CHECKF(l == NULL || checksum(l) == sum, "%s: the receiver changed", label);
  /* blocks in host memory on a cuda publisher: refused before any byte moves, naming the tensor */
  snprintf(label, sizeof label, "%s: blocks in host memory, rank %d", c->fixture, rank);
  blocks_on = &host_blocks;
  st = step(c, label, &t, l, side, 4, false, false);
  blocks_on = &gpu;
  msg = l != NULL ? sl_loader_error(l) : sl_publisher_error(t.pub);
  CHECKF(st != SL_STATUS_OK && (l != NULL || strstr(msg, "published block of ") != NULL), "%s: %s", label,
         msg);
  CHECKF(l == NULL || checksum(l) == sum, "%s: the receiver changed", label);
#ifdef SL_TEST_CUDA_MOCK
  /* a peer's NCCL connection fails: every rank fails, the receivers stay loaded, a retry works */
  char last[16];
  snprintf(last, sizeof last, "%d", size - 1);
  setenv("MOCK_NCCL_CONNECT_FAIL", last, 1);
  snprintf(label, sizeof label, "%s: NCCL fails, rank %d", c->fixture, rank);
  st = step(c, label, &t, l, side, 5, false, false);
  CHECKF(st != SL_STATUS_OK, "%s: succeeded", label);
  unsetenv("MOCK_NCCL_CONNECT_FAIL");
  snprintf(label, sizeof label, "%s: after the NCCL failure, rank %d", c->fixture, rank);
  st = step(c, label, &t, l, side, 5, false, false);
  CHECKF(st == SL_STATUS_OK, "%s: %s", label, l != NULL ? sl_loader_error(l) : sl_publisher_error(t.pub));
#endif
  rf_trainer_free(&t);
  sl_loader_destroy(l);
  MPI_Comm_free(&side);
}

/* Trainers on cuda, receivers on cpu: refused on every rank, naming the mix. */
static void mixed(void) {
  bool trainer = rank == 0;
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, trainer ? 0 : 1, rank, &side);
  lay to = {1, 1, size - 1, false};
  sl_loader *l = trainer ? NULL : receiver("llama", &to, "cpu", side);
  rf_trainer t;
  memset(&t, 0, sizeof t);
  sl_status st;
  if (trainer) {
    rf_trainer_make_on(&t, &gpu, "llama", CUT_WHOLE, 0, 1, 1, false);
    st = sl_publish(t.pub, MPI_COMM_WORLD, 1);
  } else {
    st = sl_loader_refit(l, MPI_COMM_WORLD, 1);
  }
  const char *msg = l != NULL ? sl_loader_error(l) : sl_publisher_error(t.pub);
  CHECKF(st != SL_STATUS_OK && strstr(msg, "same device") != NULL, "cuda/cpu mix, rank %d: %s", rank, msg);
  rf_same_everywhere("cuda/cpu mix", st == SL_STATUS_OK ? SL_STATUS_OK : SL_STATUS_INTERNAL);
  rf_trainer_free(&t);
  sl_loader_destroy(l);
  MPI_Comm_free(&side);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  lc_quiet_logs();
  if (size < 2 || !gpu_ranks_have_devices(&local_rank))
    return gpu_ranks_skip("a refit on GPUs needs 2 ranks or more, each with its own CUDA device");
  CHECK(cudaSetDevice(local_rank) == cudaSuccess); /* the caller's device, kept by every call */
  gpu = (rf_device){.device = local_rank, .copy = to_device, .release = release};
  host_blocks = (rf_device){.device = local_rank, .copy = to_host, .release = host_release};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    run_case(&cases[k]);
  mixed();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
