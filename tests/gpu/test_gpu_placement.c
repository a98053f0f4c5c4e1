/*
 * test_gpu_placement.c — where the CUDA backend puts things, against the CPU stand-in (label gpumock,
 * 4 and 8 ranks; docs/GPU.md). The llama fixture at tp 2 x dp (world / 2): every rank is in a tp group
 * and a dp group, which share ranks, so the groups' communicators come from two layers of splits.
 *   shared   (default) every rank's communicators are split from one parent with splitShare (the
 *            mock counts them), every config bounds maxCTAs (8), and the device memory NCCL took
 *            (the report's gpu_free_bytes_before_nccl - gpu_free_bytes_after_nccl) is one
 *            communicator's: the parent's 8 channels (the mock's 256 KiB each), whatever the number
 *            of groups; the parameters equal a device=cpu load byte for byte;
 *   own      SHARDLOAD_NCCL_SHARE=0 and SHARDLOAD_NCCL_MAX_CTAS=4: one communicator of its own per
 *            group, 4 channels each: NCCL took (groups) x 4 x 256 KiB on each rank;
 *   bound    buffers bound on another GPU than the loader's, then in host memory: every rank's load
 *            fails (INVALID_ARGUMENT on the rank that bound them, PEER_FAILED elsewhere) naming the
 *            parameter and both places, before any byte moved (the buffers keep the stand-in's fill);
 *   pinned   the last rank may pin 4 KiB only (MOCK_CUDA_PINNED_LIMIT): every rank fails with its
 *            cudaHostAlloc error saying what to lower, and no device memory is left behind.
 */
#include "check.h"
#include "cuda_mock.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHANNEL_BYTES (256u * 1024u) /* the mock's default MOCK_NCCL_CHANNEL_BYTES */

static int rank;
static int size;
static char dir[4096];

static sl_loader *create(void) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char dp[16];
  snprintf(dp, sizeof dp, "%d", size / 2);
  const char *kv[][2] = {{"model", dir}, {"device", "cuda"}, {"tp", "2"}, {"dp", dp}, {"quiet", "true"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    CHECK(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK);
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return l;
}

/* Every rank's (communicators, free before - free after) from rank 0's report; -1 when missing. */
static void nccl_figures(sl_loader *l, int *comms, long long *took) {
  comms[0] = -1;
  took[0] = -1;
  const char *json = rank == 0 ? sl_loader_report_json(l) : NULL;
  cJSON *doc = json != NULL ? cJSON_Parse(json) : NULL;
  cJSON *ranks = cJSON_GetObjectItemCaseSensitive(doc, "ranks");
  for (int r = 0; r < size && r < cJSON_GetArraySize(ranks); r++) {
    const cJSON *o = cJSON_GetArrayItem(ranks, r);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "nccl_communicators");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "gpu_free_bytes_before_nccl");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "gpu_free_bytes_after_nccl");
    comms[r] = cJSON_IsNumber(n) ? n->valueint : -1;
    took[r] = cJSON_IsNumber(b) && cJSON_IsNumber(a) ? (long long)(b->valuedouble - a->valuedouble) : -1;
  }
  cJSON_Delete(doc);
}

/* One load; on rank 0 every rank's NCCL memory checked: per_rank(comms) bytes each. */
static sl_loader *load_and_check(const char *what, long long (*expect)(int comms)) {
  mock_nccl_counts c0 = mock_nccl_count();
  sl_loader *l = create();
  sl_status st = l != NULL ? sl_loader_load(l) : SL_STATUS_INTERNAL;
  CHECKF(st == SL_STATUS_OK, "%s: %s", what, l != NULL ? sl_loader_error(l) : "no loader");
  mock_nccl_counts c1 = mock_nccl_count();
  int shared = c1.shared - c0.shared;
  int parents = c1.parents - c0.parents;
  int made = c1.made - c0.made - parents;
  int *comms = calloc((size_t)size, sizeof *comms);
  long long *took = calloc((size_t)size, sizeof *took);
  if (st == SL_STATUS_OK && comms != NULL && took != NULL)
    nccl_figures(l, comms, took);
  for (int r = 0; rank == 0 && st == SL_STATUS_OK && r < size; r++) {
    CHECKF(comms[r] == 2, "%s: rank %d made %d group communicators, expected 2 (tp and dp)", what, r,
           comms[r]);
    CHECKF(took[r] == expect(comms[r]), "%s: rank %d: NCCL took %lld bytes of device memory, expected %lld",
           what, r, took[r], expect(comms[r]));
  }
  printf("rank %d: %s: %d group communicators (%d sharing a parent's resources, %d parents), maxCTAs %d\n",
         rank, what, made, shared, parents, c1.max_ctas);
  free(comms);
  free(took);
  if (st != SL_STATUS_OK) {
    sl_loader_destroy(l);
    return NULL;
  }
  CHECKF(c1.live == c0.live, "%s: %d communicators left after the load", what, c1.live - c0.live);
  return l;
}

static long long one_parent(int comms) {
  (void)comms;
  return 8LL * CHANNEL_BYTES;
}

static long long one_each(int comms) {
  return (long long)comms * 4LL * CHANNEL_BYTES;
}

/* Every parameter of gpu against a device=cpu load of the same layout. */
static void compare_with_cpu(sl_loader *gpu) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char dp[16];
  snprintf(dp, sizeof dp, "%d", size / 2);
  const char *kv[][2] = {{"model", dir}, {"device", "cpu"}, {"tp", "2"}, {"dp", dp}, {"quiet", "true"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    CHECK(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK);
  sl_loader *cpu = NULL;
  CHECK(sl_loader_create(cfg, MPI_COMM_WORLD, &cpu) == SL_STATUS_OK && sl_loader_load(cpu) == SL_STATUS_OK);
  sl_config_destroy(cfg);
  size_t n = sl_loader_param_count(cpu);
  CHECK(n > 0 && n == sl_loader_param_count(gpu));
  for (size_t i = 0; i < n && n == sl_loader_param_count(gpu); i++) {
    const sl_param *a = sl_loader_param(cpu, i);
    const sl_param *b = sl_loader_param(gpu, i);
    if (a->alias_of != NULL || a->nbytes == 0)
      continue;
    uint8_t *host = malloc((size_t)a->nbytes);
    CHECK(host != NULL &&
          cudaMemcpy(host, b->data, (size_t)a->nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECKF(host != NULL && memcmp(host, a->data, (size_t)a->nbytes) == 0, "%s differs from the cpu load",
           a->name);
    free(host);
  }
  sl_loader_destroy(cpu);
}

/* Bound buffers the loader cannot write: every rank fails before any byte moves. */
static void bound_elsewhere(const char *what, bool host) {
  sl_loader *l = create();
  size_t n = l != NULL && sl_loader_plan(l) == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  int count = 1;
  cudaGetDeviceCount(&count);
  int own = rank % count; /* the loader's: the node-local rank's */
  int other = (own + 1) % count;
  void *buf = NULL;
  const sl_param *p = NULL;
  for (size_t i = 0; i < n && p == NULL; i++)
    if (sl_loader_param(l, i)->alias_of == NULL && sl_loader_param(l, i)->nbytes > 0)
      p = sl_loader_param(l, i);
  bool binds = rank == size - 1 && p != NULL; /* only the last rank binds a wrong buffer */
  size_t nbytes = p != NULL ? (size_t)p->nbytes : 0;
  if (binds && host) {
    buf = malloc(nbytes);
    memset(buf, 0xCD, nbytes);
  } else if (binds) {
    cudaSetDevice(other);
    CHECK(cudaMalloc(&buf, nbytes) == cudaSuccess);
    cudaSetDevice(own);
  }
  if (binds)
    CHECK(sl_loader_bind(l, p->name, buf, nbytes) == SL_STATUS_OK);
  sl_status st = l != NULL ? sl_loader_load(l) : SL_STATUS_INTERNAL;
  const char *msg = l != NULL ? sl_loader_error(l) : "";
  CHECKF(st == (binds ? SL_STATUS_INVALID_ARGUMENT : SL_STATUS_PEER_FAILED), "%s: status %s: %s", what,
         sl_status_name(st), msg);
  CHECKF(p == NULL || strstr(msg, p->name) != NULL, "%s: the message does not name the parameter: %s", what,
         msg);
  char place[64];
  int others = ((size - 1) % count + 1) % count; /* the binding rank's other GPU */
  snprintf(place, sizeof place, host ? "is host memory" : "is memory of CUDA device %d", others);
  CHECKF(strstr(msg, place) != NULL, "%s: the message does not say \"%s\": %s", what, place, msg);
  if (binds && buf != NULL) { /* nothing was written into it */
    uint8_t *seen = malloc(nbytes);
    if (!host)
      CHECK(cudaMemcpy(seen, buf, nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    else
      memcpy(seen, buf, nbytes);
    bool untouched = true;
    for (size_t i = 0; i < nbytes; i++)
      untouched = untouched && seen[i] == 0xCD;
    CHECKF(untouched, "%s: bytes were written into the refused buffer", what);
    free(seen);
  }
  sl_loader_destroy(l);
  if (host)
    free(buf);
  else if (buf != NULL)
    cudaFree(buf);
}

/* A pinned-memory limit (a container's locked-memory limit) on the last rank: its readers' staging
 * cannot be allocated; every rank fails with that rank's message, no device memory is left. */
static void pinned_limit(void) {
  size_t f0 = 0, f1 = 0, total = 0;
  CHECK(cudaMemGetInfo(&f0, &total) == cudaSuccess);
  if (rank == size - 1)
    setenv("MOCK_CUDA_PINNED_LIMIT", "4096", 1);
  sl_loader *l = create();
  sl_status st = l != NULL ? sl_loader_load(l) : SL_STATUS_INTERNAL;
  const char *msg = l != NULL ? sl_loader_error(l) : "";
  CHECKF(st == (rank == size - 1 ? SL_STATUS_CUDA : SL_STATUS_PEER_FAILED), "pinned: status %s: %s",
         sl_status_name(st), msg);
  CHECKF(strstr(msg, "pinned staging memory") != NULL && strstr(msg, "staging_bytes") != NULL,
         "pinned: the message does not say what to lower: %s", msg);
  sl_loader_destroy(l);
  unsetenv("MOCK_CUDA_PINNED_LIMIT");
  CHECK(cudaMemGetInfo(&f1, &total) == cudaSuccess);
  CHECKF(f1 == f0, "pinned: %lld bytes of device memory left after the failure",
         (long long)f0 - (long long)f1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (size < 4 || size % 2 != 0) {
    if (rank == 0)
      printf("SKIP: tp 2 x dp needs an even world of 4 ranks or more\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(dir, sizeof dir, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  sl_loader *l = load_and_check("shared", one_parent);
  mock_nccl_counts c = mock_nccl_count();
  CHECKF(c.shared >= 2 && c.parents == 1 && c.max_ctas == 8,
         "shared: %d communicators sharing a parent's resources, %d parents, maxCTAs %d", c.shared, c.parents,
         c.max_ctas);
  if (l != NULL)
    compare_with_cpu(l);
  sl_loader_destroy(l);
  setenv("SHARDLOAD_NCCL_SHARE", "0", 1);
  setenv("SHARDLOAD_NCCL_MAX_CTAS", "4", 1);
  sl_loader_destroy(load_and_check("own", one_each));
  unsetenv("SHARDLOAD_NCCL_SHARE");
  unsetenv("SHARDLOAD_NCCL_MAX_CTAS");
  bound_elsewhere("bound on another GPU", false);
  bound_elsewhere("bound in host memory", true);
  pinned_limit();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
