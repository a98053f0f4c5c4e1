/*
 * test_gpu_planned_dtype.c — a planned conversion (the spec key "dtype": the llama fixture's norms
 * held in F32, tests/mpi/planned_dtype.cmake's spec) with device=cuda, where the library converts in
 * host memory only:
 *   - left to the loader, it is refused on every rank with the same status, before any byte is
 *     read (the progress callback never sees a byte), naming the parameter and what to do;
 *   - a plain sl_loader_bind of a device buffer in the held dtype is refused at the bind;
 *   - bound with sl_loader_bind_as at the checkpoint's dtype (BF16: no conversion), the load runs and
 *     every norm holds the checkpoint's bytes: the upper halves of the F32 values a cpu load of the
 *     same spec holds; every other parameter equals the cpu load's, byte for byte.
 * And a caller-described plan (docs/spec/DESIGN.md §12: every checkpoint tensor of the fixture a
 * parameter of its own, dp = the world) loaded with device=cuda equals the same plan loaded on the
 * host, byte for byte, every entry's fill "recorded".
 * Usage: mpirun -np N test_gpu_planned_dtype. Built against the CPU stand-in of CUDA (label gpumock).
 */
#include "check.h"

#include "shardload/shardload.h"

#include <cuda_runtime.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool converted(const char *name) {
  return strstr(name, "layernorm.weight") != NULL || strcmp(name, "model.norm.weight") == 0;
}

static sl_loader *create(const char *device, int tp) {
  char model[1024];
  char num[16];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  snprintf(num, sizeof num, "%d", tp);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "arch", SL_TEST_F32_NORMS_SPEC);
  sl_config_set(cfg, "device", device);
  sl_config_set(cfg, "tp", num);
  sl_config_set(cfg, "quiet", "true");
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "create on %s: %s", device, sl_config_error(cfg));
  sl_config_destroy(cfg);
  return l;
}

static void count_bytes(uint64_t done, uint64_t total, void *user) {
  (void)total;
  if (done > *(uint64_t *)user)
    *(uint64_t *)user = done;
}

/* Left to the loader: refused alike on every rank before any byte moves. */
static void refused(int tp, int size) {
  sl_loader *l = create("cuda", tp);
  if (l == NULL)
    return;
  uint64_t seen = 0;
  sl_loader_set_progress(l, count_bytes, &seen);
  sl_status st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_UNSUPPORTED || (size > 1 && st == SL_STATUS_PEER_FAILED), "load: status %d: %s", st,
         sl_loader_error(l));
  int rank = -2;
  CHECK(sl_loader_error_cause(l, &rank) == SL_STATUS_UNSUPPORTED && rank >= 0);
  if (st == SL_STATUS_UNSUPPORTED) {
    CHECK_CONTAINS(sl_loader_error(l), "norm");
    CHECK_CONTAINS(sl_loader_error(l), "host memory only");
    CHECK_CONTAINS(sl_loader_error(l), "sl_loader_bind_as");
  }
  CHECK_EQ_U64(seen, 0);
  sl_loader_destroy(l);
}

/* Bound at the checkpoint's dtype on the device: loaded, equal to a cpu load's. */
static void bound(int tp) {
  sl_loader *cpu = create("cpu", tp);
  sl_loader *gpu = create("cuda", tp);
  if (cpu == NULL || gpu == NULL) {
    sl_loader_destroy(cpu);
    sl_loader_destroy(gpu);
    return;
  }
  CHECKF(sl_loader_load(cpu) == SL_STATUS_OK, "cpu: %s", sl_loader_error(cpu));
  CHECK(sl_loader_plan(gpu) == SL_STATUS_OK);
  size_t n = sl_loader_param_count(gpu);
  void **buf = calloc(n + 1, sizeof *buf);
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(gpu, i);
    if (!converted(p->name))
      continue;
    CHECK_STR(p->dtype, "F32");
    CHECK(cudaMalloc(&buf[i], (size_t)p->nbytes) == cudaSuccess);
    CHECK(sl_loader_bind(gpu, p->name, buf[i], p->nbytes) == SL_STATUS_UNSUPPORTED);
    CHECK_CONTAINS(sl_loader_error(gpu), "host memory only");
    CHECKF(sl_loader_bind_as(gpu, p->name, buf[i], p->nbytes / 2, SL_DTYPE_BF16) == SL_STATUS_OK,
           "bind_as: %s", sl_loader_error(gpu));
  }
  CHECKF(sl_loader_load(gpu) == SL_STATUS_OK, "cuda: %s", sl_loader_error(gpu));
  int norms = 0;
  for (size_t i = 0; i < n; i++) {
    const sl_param *g = sl_loader_param(gpu, i);
    const sl_param *c = sl_loader_find(cpu, g->name);
    CHECKF(c != NULL, "%s only on cuda", g->name);
    if (c == NULL)
      continue;
    uint8_t *host = malloc(g->nbytes + 1);
    CHECK(cudaMemcpy(host, g->data, (size_t)g->nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    if (converted(g->name)) {
      norms++;
      CHECK_STR(g->dtype, "BF16");
      CHECK_EQ_U64(2 * g->nbytes, c->nbytes);
      uint64_t bad = 0;
      for (uint64_t k = 0; k < g->nbytes / 2; k++)
        bad += memcmp(host + 2 * k, (const uint8_t *)c->data + 4 * k + 2, 2) != 0;
      CHECKF(bad == 0, "%s: %llu elements differ from the cpu load's upper halves", g->name,
             (unsigned long long)bad);
    } else {
      CHECK_STR(g->dtype, c->dtype);
      CHECKF(g->nbytes == c->nbytes && memcmp(host, c->data, (size_t)c->nbytes) == 0, "%s differs", g->name);
    }
    free(host);
  }
  CHECK(norms > 0);
  sl_loader_destroy(gpu);
  sl_loader_destroy(cpu);
  for (size_t i = 0; i < n; i++)
    if (buf[i] != NULL)
      (void)cudaFree(buf[i]);
  free(buf);
}

/* Every tensor of the llama fixture as a parameter of its own. */
static sl_plan *whole_tensors(const char *model) {
  sl_model *sm = NULL;
  CHECK(sl_model_open(model, NULL, &sm, NULL) == SL_STATUS_OK);
  sl_plan *plan = NULL;
  sl_plan_create(&plan);
  for (size_t t = 0; sm != NULL && t < sl_model_tensor_count(sm); t++) {
    sl_tensor_info ti = SL_TENSOR_INFO_INIT;
    sl_model_tensor(sm, t, &ti);
    sl_dtype dt = SL_DTYPE_COUNT;
    for (int d = 0; d < SL_DTYPE_COUNT; d++)
      dt = strcmp(sl_dtype_name((sl_dtype)d), ti.dtype) == 0 ? (sl_dtype)d : dt;
    uint64_t zero[SL_MAX_DIMS] = {0};
    uint32_t i = 0;
    CHECK(sl_plan_add_param(plan, ti.name, dt, ti.ndim, ti.shape, 0, SL_FILL_RECORDED, &i) == SL_STATUS_OK);
    CHECK(sl_plan_add_region(plan, i, ti.name, ti.ndim, zero, ti.shape, ti.ndim, zero, ti.shape) ==
          SL_STATUS_OK);
  }
  sl_model_close(sm);
  return plan;
}

static sl_loader *described_loader(const char *device, int size, const sl_plan *plan) {
  char model[1024], num[16];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  snprintf(num, sizeof num, "%d", size);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "device", device);
  sl_config_set(cfg, "dp", num);
  sl_config_set(cfg, "quiet", "true");
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  CHECK(l != NULL && sl_loader_set_plan(l, plan) == SL_STATUS_OK);
  CHECKF(l != NULL && sl_loader_load(l) == SL_STATUS_OK, "%s: %s", device,
         l != NULL ? sl_loader_error(l) : "");
  return l;
}

static void described(int size) {
  char model[1024];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  sl_plan *plan = whole_tensors(model);
  sl_loader *cpu = described_loader("cpu", size, plan);
  sl_loader *gpu = described_loader("cuda", size, plan);
  size_t n = gpu != NULL ? sl_loader_param_count(gpu) : 0;
  CHECK(n > 0 && cpu != NULL && n == sl_loader_param_count(cpu));
  for (size_t i = 0; cpu != NULL && i < n; i++) {
    const sl_param *g = sl_loader_param(gpu, i);
    const sl_param *c = sl_loader_find(cpu, g->name);
    CHECK(sl_loader_param_fill(gpu, i) == SL_FILL_RECORDED && g->device >= 0);
    uint8_t *host = malloc(g->nbytes + 1);
    CHECK(cudaMemcpy(host, g->data, (size_t)g->nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECKF(c != NULL && c->nbytes == g->nbytes && memcmp(host, c->data, (size_t)g->nbytes) == 0,
           "described: %s differs on cuda", g->name);
    free(host);
  }
  sl_loader_destroy(gpu);
  sl_loader_destroy(cpu);
  sl_plan_destroy(plan);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (getenv("SHARDLOAD_LOG") == NULL)
    sl_log_set_level(SL_LOG_ERROR);
  CHECK(cudaSetDevice(rank) == cudaSuccess); /* the loader's default: the node-local rank's GPU */
  refused(size, size);
  bound(size);
  described(size);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
