/*
 * test_gpu_load.c — end to end through the public API: fixture models (docs/FIXTURES.md) are
 * loaded twice in each layout of the world size (tensor, pipeline and data parallel, experts with
 * and without expert parallelism: the table `layouts` below), with device=cpu and with
 * device=cuda, and every local parameter must match: same table (names, dtypes, shapes, sizes),
 * host pointers on the CPU, device pointers on the GPU, and the same bytes once copied back. Usage:
 *   mpirun -np N test_gpu_load [MODEL...]      (MODEL...: every layout at tp = N, those models only)
 * Models are folders under $SL_FIXTURES. Without a usable GPU per rank: "SKIP: ..." and exit 77.
 * Built twice: against the CUDA runtime and NCCL (label gpu), and against the CPU stand-in of both
 * (tests/gpu/cuda_mock.c, label gpumock).
 */
#include "backend/backend.h"
#include "check.h"

#include "shardload/shardload.h"

#include <cuda.h>
#include <cuda_runtime.h>
#ifdef SL_TEST_CUDA_MOCK
#include "cuda_mock.h"

#include <cjson/cJSON.h>
#endif

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int size;

/* One layout of a world size, and the fixtures loaded in it (NULL: every default model). */
typedef struct layout {
  int world, tp, pp, dp;
  bool ep;
  const char *models; /* comma-separated */
} layout;

static const char *const default_models[] = {
    "llama", "qwen2", "qwen3", "mixtral", "deepseek_v2_lite", "llama4_text", "mixtral_w4a16", "ct_nvfp4"};

/* The fixtures: llama 8/2 heads, 3 layers; qwen2 12/1 heads (tp 3); mixtral and deepseek_v2_lite 8
 * experts (deepseek: MLA and shared experts); llama4_text: experts held transposed (vLLM's w13/w2);
 * mixtral_w4a16: W4A16 experts held transposed (vLLM's Marlin layout), weight_shape values checked
 * after the transfer (device memory copied back); ct_nvfp4: NVFP4 linears. */
static const layout layouts[] = {
    {1, 1, 1, 1, false, NULL},
    {2, 2, 1, 1, false, NULL},
    {2, 1, 2, 1, false, "llama,qwen3,mixtral"},
    {2, 1, 1, 2, false, "llama,mixtral"},
    {2, 2, 1, 1, true, "mixtral,deepseek_v2_lite,llama4_text,mixtral_w4a16"},
    {3, 3, 1, 1, false, "qwen2"},
    {3, 1, 3, 1, false, "llama"},
    {3, 1, 1, 3, false, "llama"}, /* experts split over dp x tp = 3: 64 rows do not divide */
    {4, 4, 1, 1, false, NULL},
    {4, 2, 2, 1, false, "llama,mixtral"},
    {4, 2, 1, 2, true, "mixtral,deepseek_v2_lite,llama4_text,mixtral_w4a16"},
    {4, 1, 1, 4, true, "mixtral"},
};

/* Creates a loader for model in layout lay on device ("cpu" or "cuda"), not loaded yet. */
/* threads: the reader threads (NULL: the default). */
static sl_loader *create(const char *dir, const layout *lay, const char *device, const char *threads) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  if (cfg == NULL)
    return NULL;
  char tp[16], pp[16], dp[16];
  snprintf(tp, sizeof tp, "%d", lay->tp);
  snprintf(pp, sizeof pp, "%d", lay->pp);
  snprintf(dp, sizeof dp, "%d", lay->dp);
  const char *kv[][2] = {{"model", dir},    {"device", device},
                         {"tp", tp},        {"pp", pp},
                         {"dp", dp},        {"enable_expert_parallel", lay->ep ? "true" : "false"},
                         {"quiet", "true"}, {"threads", threads}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    if (kv[i][1] != NULL)
      CHECKF(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK, "config %s=%s: %s", kv[i][0], kv[i][1],
             sl_config_error(cfg));
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "%s on %s (tp %d pp %d dp %d%s): sl_loader_create: %s", dir, device, lay->tp,
         lay->pp, lay->dp, lay->ep ? " ep" : "", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return l;
}

/* Loads l (created by create()); NULL, and l destroyed, when the load fails. */
static sl_loader *finish(sl_loader *l, const char *dir, const layout *lay, const char *device) {
  if (l == NULL)
    return NULL;
  sl_status st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s on %s (tp %d pp %d dp %d%s): sl_loader_load: %s", dir, device, lay->tp,
         lay->pp, lay->dp, lay->ep ? " ep" : "", sl_loader_error(l));
  if (st != SL_STATUS_OK) {
    sl_loader_destroy(l);
    return NULL;
  }
  return l;
}

static sl_loader *load(const char *dir, const layout *lay, const char *device) {
  return finish(create(dir, lay, device, NULL), dir, lay, device);
}

/* A caller's device buffers, bound to every parameter of a cuda load. Just before the load, the
 * caller queues a fill of each on the legacy default stream (as a framework fills parameters when
 * it builds a model): the loader must write after that work, not race it. One reader thread: a
 * reader with nothing to read frees its pinned staging at once, and cudaFreeHost synchronises the
 * whole device, which would order the uploads after the fill by accident. */
typedef struct bound {
  size_t n;
  void **buf;
} bound;

static sl_loader *load_bound(const char *dir, const layout *lay, int device, bound *b) {
  sl_loader *l = create(dir, lay, "cuda", "1");
  b->n = 0;
  b->buf = NULL;
  if (l == NULL)
    return NULL;
  /* The caller's buffers are on the rank's GPU, made current by the caller (the loader leaves the
   * caller's current device alone). */
  CHECK(cudaSetDevice(device) == cudaSuccess);
  sl_status st = sl_loader_plan(l);
  CHECKF(st == SL_STATUS_OK, "%s bound: sl_loader_plan: %s", dir, sl_loader_error(l));
  size_t n = st == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  b->buf = calloc(n > 0 ? n : 1, sizeof *b->buf);
  CHECK(b->buf != NULL);
  for (size_t i = 0; b->buf != NULL && i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (p == NULL || p->nbytes == 0 || p->alias_of != NULL)
      continue;
    cudaError_t e = cudaMalloc(&b->buf[i], (size_t)p->nbytes);
    CHECKF(e == cudaSuccess, "%s: cudaMalloc: %s", p->name, cudaGetErrorString(e));
    if (e != cudaSuccess) {
      b->buf[i] = NULL;
      continue;
    }
    b->n = i + 1;
    e = cudaMemsetAsync(b->buf[i], 0x5A, (size_t)p->nbytes, 0); /* the caller's pending work */
    CHECKF(e == cudaSuccess, "%s: cudaMemsetAsync: %s", p->name, cudaGetErrorString(e));
    st = sl_loader_bind(l, p->name, b->buf[i], p->nbytes);
    CHECKF(st == SL_STATUS_OK, "%s: sl_loader_bind: %s", p->name, sl_loader_error(l));
  }
  return finish(l, dir, lay, "cuda");
}

static void free_bound(bound *b) {
  for (size_t i = 0; i < b->n; i++)
    if (b->buf[i] != NULL)
      (void)cudaFree(b->buf[i]);
  free(b->buf);
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

#ifdef SL_TEST_CUDA_MOCK
/* Against the mock, which counts NCCL communicators (COLLECTIVE): the load made communicators only
 * for groups that broadcast (each carried more than its one-byte warm-up), released them all once
 * the transfer was over (the loader is still alive), and the report's per-rank count equals what
 * the mock saw on each rank. */
static void check_comms(const char *what, sl_loader *gpu, mock_nccl_counts before) {
  mock_nccl_counts now = mock_nccl_count();
  /* the groups' communicators (the report's count), not the parent they were split from */
  int made = now.made - before.made - (now.parents - before.parents);
  CHECKF(now.live == before.live, "%s: %d NCCL communicators still held after the load", what,
         now.live - before.live);
  CHECKF(now.unused == before.unused, "%s: %d NCCL communicators carried no broadcast", what,
         now.unused - before.unused);
  int *all = calloc((size_t)size, sizeof *all);
  MPI_Gather(&made, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank != 0 || all == NULL) {
    free(all);
    return;
  }
  const char *json = sl_loader_report_json(gpu);
  cJSON *doc = json != NULL ? cJSON_Parse(json) : NULL;
  cJSON *ranks = cJSON_GetObjectItemCaseSensitive(doc, "ranks");
  CHECKF(cJSON_GetArraySize(ranks) == size, "%s: the report lists %d ranks", what, cJSON_GetArraySize(ranks));
  for (int r = 0; r < size && r < cJSON_GetArraySize(ranks); r++) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ranks, r), "nccl_communicators");
    CHECKF(cJSON_IsNumber(n) && n->valueint == all[r],
           "%s: rank %d: the report counts %d NCCL communicators, the mock saw %d", what, r,
           cJSON_IsNumber(n) ? n->valueint : -1, all[r]);
  }
  cJSON_Delete(doc);
  free(all);
}
#endif

/* The driver's current-context calls, through the runtime (false where the driver lacks them). */
typedef CUresult (*ctx_get_fn)(CUcontext *ctx);
typedef CUresult (*ctx_set_fn)(CUcontext ctx);
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;

static bool driver_contexts(void) {
  void *get = NULL;
  void *set = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess ||
      cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return false;
  memcpy(&ctx_get, &get, sizeof ctx_get);
  memcpy(&ctx_set, &set, sizeof ctx_set);
  return true;
}

/* A cuda load that must leave the calling thread's CUDA context as it found it. The first one
 * starts from no context at all: the loader must not leave one bound (nor, on the mock, create
 * any but its own device's: restoring "device 0" would make GPU 0's context in every rank). */
static sl_loader *load_cuda(const char *dir, const layout *lay, bool first) {
  CUcontext before = NULL;
  bool have = ctx_get != NULL && ctx_get(&before) == CUDA_SUCCESS;
  if (have && first) {
    CHECK(ctx_set(NULL) == CUDA_SUCCESS);
    before = NULL;
  }
#ifdef SL_TEST_CUDA_MOCK
  unsigned made_before = mock_contexts_made();
#endif
  sl_loader *l = load(dir, lay, "cuda");
  CUcontext after = NULL;
  if (have && l != NULL) {
    CHECK(ctx_get(&after) == CUDA_SUCCESS);
    CHECKF(after == before, "%s: the calling thread's CUDA context changed during sl_loader_load", dir);
  }
#ifdef SL_TEST_CUDA_MOCK
  const sl_param *p0 = l != NULL && sl_loader_param_count(l) > 0 ? sl_loader_param(l, 0) : NULL;
  if (first && made_before == 0 && p0 != NULL)
    CHECKF(mock_contexts_made() == 1u << p0->device,
           "%s: CUDA contexts on devices 0x%x, only device %d's expected", dir, mock_contexts_made(),
           p0->device);
#endif
  return l;
}

/* Parameter memory the loader allocated is one block (COLLECTIVE-free): sorted by address, every
 * parameter starts SL_ARENA_ALIGN-aligned right where the previous one's room ends. */
static void check_arena(const char *what, sl_loader *l) {
  size_t n = sl_loader_param_count(l);
  const sl_param **ps = calloc(n + 1, sizeof *ps);
  size_t k = 0;
  for (size_t i = 0; ps != NULL && i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (p != NULL && p->alias_of == NULL && p->data != NULL)
      ps[k++] = p;
  }
  for (size_t i = 1; i < k; i++) /* insertion sort by address: a few hundred parameters */
    for (size_t j = i; j > 0 && (uintptr_t)ps[j]->data < (uintptr_t)ps[j - 1]->data; j--) {
      const sl_param *t = ps[j];
      ps[j] = ps[j - 1];
      ps[j - 1] = t;
    }
  for (size_t i = 0; i < k; i++) {
    CHECKF((uintptr_t)ps[i]->data % SL_ARENA_ALIGN == 0, "%s: %s is not %u-byte aligned", what, ps[i]->name,
           SL_ARENA_ALIGN);
    if (i + 1 < k)
      CHECKF((uintptr_t)ps[i + 1]->data - (uintptr_t)ps[i]->data == sl__arena_room(ps[i]->nbytes),
             "%s: %s and %s are not neighbours in one block of parameter memory", what, ps[i]->name,
             ps[i + 1]->name);
  }
  free(ps);
}

/* Whether NAME is one of the comma-separated LIST. */
static bool in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0)
      return true;
    p = end != NULL ? end + 1 : NULL;
  }
  return false;
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
  if (!driver_contexts() && rank == 0)
    fprintf(stderr, "the driver's context calls are not available: the caller's context is not checked\n");
  const char *fixtures = sl_test_env("SL_FIXTURES", NULL);
  CHECKF(fixtures != NULL, "SL_FIXTURES is not set");
  int loads = 0;
  for (size_t c = 0; fixtures != NULL && c < sizeof layouts / sizeof layouts[0]; c++) {
    const layout *lay = &layouts[c];
    if (lay->world != size)
      continue;
    if (argc > 1 && lay->tp != size)
      continue; /* models named: tensor parallel over the world only */
    size_t n_default = sizeof default_models / sizeof default_models[0];
    bool bound_done = false;
    size_t n_models = argc > 1 ? (size_t)(argc - 1) : n_default;
    for (size_t i = 0; i < n_models; i++) {
      const char *model = argc > 1 ? argv[i + 1] : default_models[i];
      if (argc == 1 && lay->models != NULL && !in_list(lay->models, model))
        continue;
      char dir[4096];
      snprintf(dir, sizeof dir, "%s/%s", fixtures, model);
      sl_loader *cpu = load(dir, lay, "cpu");
#ifdef SL_TEST_CUDA_MOCK
      mock_nccl_counts before = mock_nccl_count();
#endif
      sl_loader *gpu = load_cuda(dir, lay, loads == 0);
      char what[160];
      snprintf(what, sizeof what, "%s tp %d pp %d dp %d%s", model, lay->tp, lay->pp, lay->dp,
               lay->ep ? " ep" : "");
      if (cpu != NULL && gpu != NULL) {
        compare(what, cpu, gpu);
        check_arena(what, gpu);
#ifdef SL_TEST_CUDA_MOCK
        check_comms(what, gpu, before);
#endif
        loads++;
      }
      int device = gpu != NULL && sl_loader_param_count(gpu) > 0 ? sl_loader_param(gpu, 0)->device : 0;
      sl_loader_destroy(gpu);
      if (cpu != NULL && !bound_done) { /* the first model of each layout again, into the caller's buffers */
        bound_done = true;
        bound b;
        sl_loader *into = load_bound(dir, lay, device, &b);
        if (into != NULL) {
          char bwhat[200];
          snprintf(bwhat, sizeof bwhat, "%s, bound after the caller's pending fill", what);
          compare(bwhat, cpu, into);
        }
        sl_loader_destroy(into);
        free_bound(&b);
      }
      sl_loader_destroy(cpu);
    }
  }
  CHECKF(loads > 0, "no layout of %d ranks was loaded", size);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
