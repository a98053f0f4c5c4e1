/*
 * test_gpu_reload.c — sl_loader_reload with device=cuda (docs/spec/DESIGN.md §10): the llama
 * fixture (and mixtral with expert parallelism) loaded on the GPU, then reloaded from a copy whose
 * weight bytes are all inverted (XOR 0xFF: the same shapes, other values), then from the original
 * again. After each reload every parameter's device memory equals, byte for byte, a fresh
 * device=cpu load of the same checkpoint, at the device pointers of the first load; the caller's
 * CUDA context is what it was; and the same into the caller's device buffers (sl_loader_bind). On
 * the CPU stand-in (tests/gpu/cuda_mock.c) also: every reload made its broadcast groups' NCCL
 * communicators again, as many as the load (the load released them), and released them all.
 * On the stand-in, work the caller queues between two reloads (slow fills on its own stream, then on
 * the legacy stream) lands before the reloaded bytes (queued_between).
 * Built twice: against the CUDA runtime and NCCL (labels reshard, gpu; skipped, 77, without a GPU
 * per rank) and against the stand-in (labels reshard, gpumock).
 */
#include "check.h"
#include "gpu_ranks.h"

#include "shardload/shardload.h"

#include <cuda_runtime.h>
#ifdef SL_TEST_CUDA_MOCK
#include "cuda_mock.h"
#endif

#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int size;
static const char *threads = "2"; /* reader threads of the loads */

typedef struct layout {
  int tp, pp, dp;
  bool ep;
  const char *model;
} layout;

/* COLLECTIVE: rank 0 copies folder `from` into `dir` with every weight byte inverted. */
static bool make_inverted(const char *from, const char *dir) {
  int ok = 1;
  if (rank == 0) {
    DIR *d = opendir(from);
    ok = d != NULL;
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; ok && e != NULL; e = readdir(d)) {
      if (e->d_name[0] == '.')
        continue;
      char s[4096], t[4096];
      snprintf(s, sizeof s, "%s/%s", from, e->d_name);
      snprintf(t, sizeof t, "%s/%s", dir, e->d_name);
      size_t n = 0;
      uint8_t *bytes = (uint8_t *)sl_test_read_file(s, &n);
      size_t len = strlen(e->d_name);
      if (bytes != NULL && len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0 && n >= 8) {
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--)
          h = h << 8 | bytes[i];
        for (size_t k = 8 + (size_t)h; k < n; k++)
          bytes[k] ^= 0xFF;
      }
      ok = bytes != NULL && sl_test_write_file(t, bytes, n) == 0;
      free(bytes);
    }
    if (d != NULL)
      closedir(d);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECKF(ok, "cannot write the inverted copy of %s", from);
  return ok;
}

static sl_loader *create(const char *dir, const layout *lay, const char *device) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char tp[16], pp[16], dp[16];
  snprintf(tp, sizeof tp, "%d", lay->tp);
  snprintf(pp, sizeof pp, "%d", lay->pp);
  snprintf(dp, sizeof dp, "%d", lay->dp);
  const char *kv[][2] = {
      {"model", dir}, {"device", device}, {"tp", tp},           {"pp", pp},
      {"dp", dp},     {"quiet", "true"},  {"threads", threads}, {"enable_expert_parallel", "false"}};
  if (lay->ep)
    kv[7][1] = "true";
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    CHECK(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK);
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return l;
}

static sl_loader *load(const char *dir, const layout *lay, const char *device) {
  sl_loader *l = create(dir, lay, device);
  if (l != NULL && sl_loader_load(l) != SL_STATUS_OK) {
    CHECKF(false, "%s on %s: %s", dir, device, sl_loader_error(l));
    sl_loader_destroy(l);
    l = NULL;
  }
  return l;
}

/* Every parameter of gpu (device memory, at the pointers `at`) against cpu, byte for byte. */
static void compare(const char *what, sl_loader *cpu, sl_loader *gpu, void *const *at) {
  size_t n = sl_loader_param_count(cpu);
  CHECKF(n == sl_loader_param_count(gpu) && n > 0, "%s: %zu parameters on cpu, %zu on cuda", what, n,
         sl_loader_param_count(gpu));
  for (size_t i = 0; n == sl_loader_param_count(gpu) && i < n; i++) {
    const sl_param *a = sl_loader_param(cpu, i);
    const sl_param *b = sl_loader_param(gpu, i);
    CHECK_STR(a->name, b->name);
    CHECKF(b->data == at[i], "%s: %s moved on the device", what, b->name);
    if (a->nbytes != b->nbytes || a->nbytes == 0 || a->alias_of != NULL)
      continue;
    uint8_t *host = malloc((size_t)b->nbytes);
    cudaError_t e = cudaMemcpy(host, b->data, (size_t)b->nbytes, cudaMemcpyDeviceToHost);
    CHECKF(e == cudaSuccess, "%s: %s: cudaMemcpy back: %s", what, b->name, cudaGetErrorString(e));
    CHECKF(e != cudaSuccess || memcmp(host, a->data, (size_t)a->nbytes) == 0,
           "%s: %s differs between cuda and cpu", what, a->name);
    free(host);
  }
}

static void *const *pointers(sl_loader *l) {
  size_t n = sl_loader_param_count(l);
  void **at = calloc(n + 1, sizeof *at);
  for (size_t i = 0; at != NULL && i < n; i++)
    at[i] = sl_loader_param(l, i)->data;
  return at;
}

/* The reload of `to` into gpu, compared with cpu's load of it. */
static void reload(const char *what, sl_loader *gpu, const char *to, sl_loader *cpu, void *const *at) {
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c0 = mock_nccl_count();
#endif
  sl_status st = sl_loader_reload(gpu, to, NULL);
  CHECKF(st == SL_STATUS_OK, "%s: %s", what, sl_loader_error(gpu));
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c1 = mock_nccl_count();
  CHECKF(c1.live == c0.live, "%s: %d NCCL communicators still held after the reload", what,
         c1.live - c0.live);
  /* As many made as the report counts for this rank (those of the groups it broadcasts in). */
  unsigned made = (unsigned)(c1.made - c0.made);
  const char *json = sl_loader_report_json(gpu);
  CHECKF(rank != 0 || (json != NULL && strstr(json, "\"nccl_communicators\":") != NULL),
         "%s: no NCCL figure in the report", what);
  int any = made > 0, all_ranks = 0;
  MPI_Allreduce(&any, &all_ranks, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (size > 1)
    CHECKF(all_ranks, "%s: no rank made NCCL communicators again", what);
#endif
  if (st == SL_STATUS_OK)
    compare(what, cpu, gpu, at);
}

#ifdef SL_TEST_CUDA_MOCK
/* The caller's slow rewrite of every parameter of l with the bytes it holds now (the checkpoint loaded
 * last: the padding stays zero), queued on stream s (NULL: the legacy one) from copies made here.
 * Landing after the next reload, it would leave the old bytes there. The copies are returned to be
 * freed once that reload is compared (cudaFree waits for every stream). */
static void **rewrite(sl_loader *l, cudaStream_t s) {
  size_t n = sl_loader_param_count(l);
  void **copies = calloc(n + 1, sizeof *copies);
  for (size_t i = 0; copies != NULL && i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (p->alias_of != NULL || p->nbytes == 0)
      continue;
    CHECK(cudaMalloc(&copies[i], (size_t)p->nbytes) == cudaSuccess);
    CHECK(cudaMemcpy(copies[i], p->data, (size_t)p->nbytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
  }
  for (size_t i = 0; copies != NULL && i < n; i++) /* all queued after every copy was made */
    if (copies[i] != NULL)
      CHECK(cudaMemcpyAsync(sl_loader_param(l, i)->data, copies[i], (size_t)sl_loader_param(l, i)->nbytes,
                            cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  return copies;
}

static void free_copies(sl_loader *l, void **copies) {
  for (size_t i = 0; copies != NULL && i < sl_loader_param_count(l); i++)
    if (copies[i] != NULL)
      cudaFree(copies[i]);
  free(copies);
}

/* Work the caller queues between two reloads must land before the reload's bytes (as inference
 * kernels still reading the old weights must finish before they are overwritten): slow rewrites of
 * every parameter (with the bytes it holds) on the caller's own stream (passed to the loader), then
 * on the legacy stream.
 * Before, the loader's streams waited for the legacy stream only before the first transfer and
 * never for the caller's stream: the fills landed after the reloaded bytes. One reader thread: an
 * idle reader frees its pinned staging at once, and cudaFreeHost waits for the whole device, which
 * orders the uploads by accident. */
static void queued_between(const char *what, const layout *lay, const char *orig, const char *inverted,
                           sl_loader *cpu_a, sl_loader *cpu_b) {
  threads = "1";
  cudaStream_t s = NULL;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  sl_loader *gpu = create(orig, lay, "cuda");
  if (gpu != NULL && sl_loader_set_cuda(gpu, -1, s, NULL) == SL_STATUS_OK &&
      sl_loader_load(gpu) == SL_STATUS_OK) {
    void *const *at = pointers(gpu);
    char w[320];
    mock_stream_delay_ms(s, 100);
    void **copies = rewrite(gpu, s);
    snprintf(w, sizeof w, "%s, reload after the caller's stream", what);
    reload(w, gpu, inverted, cpu_b, at);
    free_copies(gpu, copies);
    mock_stream_delay_ms(s, 0);
    setenv("MOCK_CUDA_LEGACY_MS", "100", 1);
    copies = rewrite(gpu, NULL);
    unsetenv("MOCK_CUDA_LEGACY_MS");
    snprintf(w, sizeof w, "%s, reload after the legacy stream", what);
    reload(w, gpu, orig, cpu_a, at);
    free_copies(gpu, copies);
    free((void *)at);
  } else {
    CHECKF(false, "%s: the load with the caller's stream failed: %s", what,
           gpu != NULL ? sl_loader_error(gpu) : "");
  }
  sl_loader_destroy(gpu);
  cudaStreamDestroy(s);
  threads = "2";
}
#endif

static void run(const layout *lay, const char *orig, const char *inverted) {
  char what[256];
  snprintf(what, sizeof what, "%s tp %d pp %d dp %d%s", lay->model, lay->tp, lay->pp, lay->dp,
           lay->ep ? " ep" : "");
  char layout_name[256];
  snprintf(layout_name, sizeof layout_name, "%s", what); /* what gets ", bound" below */
  sl_loader *cpu_a = load(orig, lay, "cpu");
  sl_loader *cpu_b = load(inverted, lay, "cpu");
  sl_loader *gpu = load(orig, lay, "cuda");
  if (cpu_a != NULL && cpu_b != NULL && gpu != NULL) {
    void *const *at = pointers(gpu);
    char w[320];
    snprintf(w, sizeof w, "%s, reload inverted", what);
    reload(w, gpu, inverted, cpu_b, at);
    snprintf(w, sizeof w, "%s, reload original", what);
    reload(w, gpu, orig, cpu_a, at);
    free((void *)at);
  }
  sl_loader_destroy(gpu);
  /* The caller's device buffers. */
  sl_loader *b = create(orig, lay, "cuda");
  size_t n = b != NULL && sl_loader_plan(b) == SL_STATUS_OK ? sl_loader_param_count(b) : 0;
  void **buf = calloc(n + 1, sizeof *buf);
  int device = -1;
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(b, i);
    if (p->alias_of != NULL || p->nbytes == 0)
      continue;
    if (device < 0) { /* the loader's device: the node-local rank's */
      int count = 1;
      cudaGetDeviceCount(&count);
      MPI_Comm node;
      int local = 0;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local);
      MPI_Comm_free(&node);
      device = local % (count > 0 ? count : 1);
      cudaSetDevice(device);
    }
    CHECK(cudaMalloc(&buf[i], (size_t)p->nbytes) == cudaSuccess);
    CHECK(sl_loader_bind(b, p->name, buf[i], p->nbytes) == SL_STATUS_OK);
  }
  if (b != NULL && sl_loader_load(b) == SL_STATUS_OK && cpu_b != NULL) {
    snprintf(what + strlen(what), sizeof what - strlen(what), ", bound");
    reload(what, b, inverted, cpu_b, (void *const *)buf);
  }
  sl_loader_destroy(b);
  for (size_t i = 0; i < n; i++)
    if (buf[i] != NULL)
      cudaFree(buf[i]);
  free(buf);
#ifdef SL_TEST_CUDA_MOCK
  if (cpu_a != NULL && cpu_b != NULL)
    queued_between(layout_name, lay, orig, inverted, cpu_a, cpu_b);
#endif
  sl_loader_destroy(cpu_a);
  sl_loader_destroy(cpu_b);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (!gpu_ranks_have_devices(NULL))
    return gpu_ranks_skip("no CUDA device for every rank");
  const char *fixtures = sl_test_env("SL_FIXTURES", "fixtures");
  char tmp[1024] = "";
  if (rank == 0) {
    char *d = sl_test_mkdtemp("gpu-reload");
    snprintf(tmp, sizeof tmp, "%s", d != NULL ? d : "");
    free(d);
  }
  MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
  /* llama: tp over the world where its 8 heads divide it, else data parallel; mixtral: data
   * parallel with its experts spread (expert parallelism). Both broadcast between ranks. */
  layout lays[2] = {{size == 3 ? 1 : size, 1, size == 3 ? 3 : 1, false, "llama"},
                    {1, 1, size, true, "mixtral"}};
  for (int k = 0; k < 2 && tmp[0] != '\0'; k++) {
    char orig[4096], inverted[4200];
    snprintf(orig, sizeof orig, "%s/%s", fixtures, lays[k].model);
    snprintf(inverted, sizeof inverted, "%s/%s", tmp, lays[k].model);
    if (make_inverted(orig, inverted))
      run(&lays[k], orig, inverted);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && tmp[0] != '\0')
    sl_test_rmtree(tmp);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
