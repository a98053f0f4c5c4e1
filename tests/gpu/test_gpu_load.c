/*
 * test_gpu_load.c — end to end through the public API: each fixture model (docs/FIXTURES.md) is
 * loaded twice at tp = world size, with device=cpu and with device=cuda, and every local
 * parameter must match: same table (names, dtypes, shapes, sizes), host pointers on the CPU,
 * device pointers on the GPU, and the same bytes once copied back. Usage:
 *   mpirun -np N test_gpu_load [MODEL...]      (default: llama qwen2 qwen3 mixtral deepseek_v2_lite)
 * Models are folders under $SL_FIXTURES. Without a usable GPU per rank: "SKIP: ..." and exit 77.
 */
#include "backend/backend.h"
#include "check.h"

#include "shardload/shardload.h"

#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

static int rank;
static int size;

/* Creates and loads a loader for model at tp = world size on device ("cpu" or "cuda"). */
static sl_loader *load(const char *dir, const char *device) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  if (cfg == NULL)
    return NULL;
  char tp[16];
  snprintf(tp, sizeof tp, "%d", size);
  const char *kv[][2] = {{"model", dir}, {"device", device}, {"tp", tp}, {"quiet", "true"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    CHECKF(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK, "config %s=%s: %s", kv[i][0], kv[i][1],
           sl_config_error(cfg));
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "%s on %s: sl_loader_create: %s", dir, device, sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (l == NULL)
    return NULL;
  st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s on %s: sl_loader_load: %s", dir, device, sl_loader_error(l));
  if (st != SL_STATUS_OK) {
    sl_loader_destroy(l);
    return NULL;
  }
  return l;
}

static void compare(const char *model, sl_loader *cpu, sl_loader *gpu) {
  size_t n = sl_loader_param_count(cpu);
  CHECKF(n == sl_loader_param_count(gpu), "%s: %zu parameters on cpu, %zu on cuda", model, n,
         sl_loader_param_count(gpu));
  CHECKF(n > 0, "%s: no parameters", model);
  if (n != sl_loader_param_count(gpu))
    return;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    const sl_param *a = sl_loader_param(cpu, i);
    const sl_param *b = sl_loader_param(gpu, i);
    if (a == NULL || b == NULL) {
      CHECKF(false, "%s: parameter %zu missing", model, i);
      continue;
    }
    CHECK_STR(a->name, b->name);
    CHECK_STR(a->dtype, b->dtype);
    CHECK_EQ_U64(a->nbytes, b->nbytes);
    CHECK_EQ_U64(a->ndim, b->ndim);
    for (uint32_t d = 0; d < a->ndim && d < SL_MAX_DIMS; d++) {
      CHECK_EQ_U64(a->local_shape[d], b->local_shape[d]);
      CHECK_EQ_U64(a->global_shape[d], b->global_shape[d]);
    }
    CHECKF(a->device == -1, "%s: %s on cpu has device %d", model, a->name, a->device);
    CHECKF(b->device >= 0, "%s: %s on cuda has device %d", model, b->name, b->device);
    if (a->nbytes != b->nbytes || a->nbytes == 0 || a->data == NULL || b->data == NULL) {
      CHECKF(a->nbytes == 0 || (a->data != NULL && b->data != NULL), "%s: %s has no data", model, a->name);
      continue;
    }
    struct cudaPointerAttributes attr;
    memset(&attr, 0, sizeof attr);
    cudaError_t e = cudaPointerGetAttributes(&attr, b->data);
    CHECKF(e == cudaSuccess && attr.type == cudaMemoryTypeDevice && attr.device == b->device,
           "%s: %s: data is not memory of CUDA device %d (%s, type %d, device %d)", model, b->name, b->device,
           cudaGetErrorString(e), (int)attr.type, attr.device);
    uint8_t *host = malloc((size_t)b->nbytes);
    if (host == NULL) {
      CHECKF(false, "%s: %s: out of memory", model, b->name);
      continue;
    }
    e = cudaMemcpy(host, b->data, (size_t)b->nbytes, cudaMemcpyDeviceToHost);
    CHECKF(e == cudaSuccess, "%s: %s: cudaMemcpy back: %s", model, b->name, cudaGetErrorString(e));
    if (e == cudaSuccess && memcmp(host, a->data, (size_t)a->nbytes) != 0) {
      size_t k = 0;
      while (k < a->nbytes && host[k] == ((const uint8_t *)a->data)[k])
        k++;
      CHECKF(false, "%s: %s (%s): byte %zu of %llu is 0x%02x on cuda, 0x%02x on cpu", model, a->name,
             a->shard, k, (unsigned long long)a->nbytes, host[k], ((const uint8_t *)a->data)[k]);
    }
    bytes += a->nbytes;
    free(host);
  }
  if (rank == 0)
    fprintf(stderr, "%s: %zu parameters, %llu bytes compared on rank 0\n", model, n,
            (unsigned long long)bytes);
}

static int gpus_for_every_rank(char *why, size_t cap) {
  int have = sl__cuda_available(why, cap) ? 1 : 0;
  int count = 0;
  if (have && cudaGetDeviceCount(&count) != cudaSuccess)
    count = 0;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  char reason[512];
  snprintf(reason, sizeof reason, "%s", why);
  if (!have)
    snprintf(why, cap, "no CUDA device available (%.400s)", reason);
  else if (count < local)
    snprintf(why, cap, "%d ranks on this node but %d CUDA device%s", local, count, count == 1 ? "" : "s");
  int ok = have && count >= local;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all && ok)
    snprintf(why, cap, "no CUDA device available on another rank");
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  char why[512] = "";
  if (!gpus_for_every_rank(why, sizeof why)) {
    if (rank == 0)
      printf("SKIP: %s\n", why);
    MPI_Finalize();
    return 77;
  }
  const char *fixtures = sl_test_env("SL_FIXTURES", NULL);
  CHECKF(fixtures != NULL, "SL_FIXTURES is not set");
  const char *defaults[] = {"llama", "qwen2", "qwen3", "mixtral", "deepseek_v2_lite"};
  int n_models = argc > 1 ? argc - 1 : (int)(sizeof defaults / sizeof defaults[0]);
  for (int i = 0; fixtures != NULL && i < n_models; i++) {
    const char *model = argc > 1 ? argv[i + 1] : defaults[i];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, model);
    sl_loader *cpu = load(dir, "cpu");
    sl_loader *gpu = load(dir, "cuda");
    if (cpu != NULL && gpu != NULL)
      compare(model, cpu, gpu);
    sl_loader_destroy(gpu);
    sl_loader_destroy(cpu);
  }
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
