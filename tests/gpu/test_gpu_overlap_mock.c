/*
 * test_gpu_overlap_mock.c — how the loader keeps the GPU busy, on the CPU stand-in of CUDA and NCCL
 * (cuda_mock.c; label gpumock). The mock counts, per stream, the host waits that found it drained
 * and the pinned buffers with copies queued at once (mock_stats in cuda_mock.h); every load is also
 * compared byte for byte with the same load on the CPU. Cases (all by default, or those named):
 *   buckets  dp = world, every byte broadcast in many small buckets: after each bucket only the
 *            main stream (broadcast, scatter copies) is waited for; a reader thread's stream is
 *            waited for once, by the final sync (it used to be waited for after every bucket); with
 *            the device's memory free, 8 buckets are in rotation (SL_BUCKET_SLOTS_MAX; was 2);
 *   uring    the io_uring strategy, one reader thread, uploads made slow (MOCK_CUDA_OP_US): the
 *            reader keeps uploads out of several staging slots in flight (it used to wait for each
 *            read's uploads before completing the next read: never more than one), and its waits
 *            block in the driver on blocking-sync events (polled with SHARDLOAD_CUDA_BLOCKING_SYNC=0);
 *   numa     reader threads run on the CPUs of the GPU's NUMA node, as a fake sysfs tree
 *            (SHARDLOAD_SYSFS_ROOT) describes it, within the process's affinity; not with
 *            SHARDLOAD_NUMA_BIND=0, nor when the node is unknown or outside the affinity; two
 *            reader threads bound to one CPU are warned of.
 *   narrow   llama's row-parallel slices at tp = world (rows of a few dozen bytes): packed on the
 *            host into the staging slot's pinned scratch and uploaded flat: no narrow 2-D copy;
 *   transposed  Llama-4's experts held transposed: no host wait per transposed block (they were
 *            transposed into a temporary, uploaded and waited for one by one).
 * Nothing here depends on how long anything takes: only on the order the mock runs work in.
 * Usage: mpirun -np N test_gpu_overlap_mock [buckets|uring|numa|narrow|transposed]...
 */
#include "check.h"
#include "cuda_mock.h"

#include "shardload/shardload.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int size;

static char infos[16384]; /* the library's info lines, while a case captures them */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_log(sl_log_level level, int r, const char *line, void *user) {
  (void)r;
  (void)user;
  pthread_mutex_lock(&log_mu); /* the library logs from several threads at once */
  if (level <= SL_LOG_INFO && strlen(infos) + strlen(line) + 2 < sizeof infos) {
    strcat(infos, line);
    strcat(infos, "\n");
  }
  pthread_mutex_unlock(&log_mu);
}

/* One load's settings: the parallel sizes, then optional keys (NULL: default). */
typedef struct setup {
  const char *model;
  int tp, pp, dp;
  const char *strategy;
  const char *threads;
  const char *bucket_bytes;
  const char *chunk;
  const char *coalesce;  /* coalesce_gap_bytes */
  const char *two_phase; /* two_phase_reads */
} setup;

static sl_loader *load(const setup *u, const char *device) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), u->model);
  char tp[16], pp[16], dp[16];
  snprintf(tp, sizeof tp, "%d", u->tp);
  snprintf(pp, sizeof pp, "%d", u->pp);
  snprintf(dp, sizeof dp, "%d", u->dp);
  const char *kv[][2] = {{"model", dir},
                         {"device", device},
                         {"tp", tp},
                         {"pp", pp},
                         {"dp", dp},
                         {"quiet", "true"},
                         {"threads", u->threads},
                         {"load_strategy", u->strategy},
                         {"bucket_bytes", u->bucket_bytes},
                         {"read_chunk_bytes", u->chunk},
                         {"coalesce_gap_bytes", u->coalesce},
                         {"two_phase_reads", u->two_phase}};
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  if (cfg == NULL)
    return NULL;
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    if (kv[i][1] != NULL)
      CHECKF(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK, "config %s=%s: %s", kv[i][0], kv[i][1],
             sl_config_error(cfg));
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "%s on %s: sl_loader_create: %s", u->model, device, sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (st != SL_STATUS_OK)
    return NULL;
  st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s on %s: sl_loader_load: %s", u->model, device, sl_loader_error(l));
  if (st != SL_STATUS_OK) {
    sl_loader_destroy(l);
    return NULL;
  }
  return l;
}

/* Every parameter of the cuda load, copied back, equals the cpu load's. */
static void compare(const char *what, sl_loader *cpu, sl_loader *gpu) {
  size_t n = sl_loader_param_count(cpu);
  CHECKF(n > 0 && n == sl_loader_param_count(gpu), "%s: %zu parameters on cpu, %zu on cuda", what, n,
         sl_loader_param_count(gpu));
  for (size_t i = 0; i < n && n == sl_loader_param_count(gpu); i++) {
    const sl_param *a = sl_loader_param(cpu, i);
    const sl_param *b = sl_loader_param(gpu, i);
    if (a == NULL || b == NULL || a->nbytes != b->nbytes || a->nbytes == 0 || a->data == NULL ||
        b->data == NULL) {
      CHECKF(a != NULL && b != NULL && a->nbytes == b->nbytes, "%s: parameter %zu differs in size", what, i);
      continue;
    }
    uint8_t *host = malloc((size_t)b->nbytes);
    CHECK(host != NULL);
    if (host == NULL)
      continue;
    cudaError_t e = cudaMemcpy(host, b->data, (size_t)b->nbytes, cudaMemcpyDeviceToHost);
    CHECKF(e == cudaSuccess && memcmp(host, a->data, (size_t)a->nbytes) == 0, "%s: %s differs on cuda", what,
           a->name);
    free(host);
  }
}

/* Loads u on cpu and on cuda, compares, and returns the mock's figures of the cuda load. */
static mock_stats measure(const char *what, const setup *u) {
  sl_loader *cpu = load(u, "cpu");
  mock_stats_reset();
  sl_loader *gpu = load(u, "cuda");
  if (cpu != NULL && gpu != NULL)
    compare(what, cpu, gpu);
  sl_loader_destroy(gpu); /* its streams are folded into the figures when they go */
  sl_loader_destroy(cpu);
  mock_stats s;
  mock_stats_get(&s);
  return s;
}

static void case_buckets(void) {
  if (size < 2)
    return; /* one rank broadcasts nothing */
  infos[0] = '\0';
  sl_log_set_callback(on_log, NULL);
  sl_log_set_level(SL_LOG_INFO);
  setup u = {.model = "qwen2",
             .tp = 1,
             .pp = 1,
             .dp = size,
             .threads = "2",
             .bucket_bytes = "8192",
             .chunk = "8192"};
  mock_stats s = measure("buckets", &u);
  sl_log_set_level(SL_LOG_WARN);
  sl_log_set_callback(NULL, NULL);
  fprintf(stderr, "rank %d buckets: %llu broadcasts, %d reader streams, at most %llu host waits on one\n",
          rank, s.broadcasts, s.upload_streams, s.upload_waits_max);
  /* With the stand-in's GPU nearly free (1 GiB), eight 8 KiB buckets in rotation (was: two). */
  CHECKF(strstr(infos, "bucket slots: 8 of") != NULL, "buckets: not 8 bucket slots with the device free: %s",
         infos);
  CHECKF(s.broadcasts >= 4, "buckets: only %llu broadcasts: the case needs several buckets", s.broadcasts);
  CHECKF(s.upload_streams >= 1, "buckets: no reader stream carried uploads");
  /* The final sync waits for each reader stream once; a wait per bucket would count each bucket. */
  CHECKF(s.upload_waits_max <= 1,
         "buckets: a reader stream was waited for %llu times in a load of %llu buckets (only the main stream "
         "needs a wait per bucket)",
         s.upload_waits_max, s.broadcasts);
}

static void case_uring(void) {
  setup u = {.model = "llama",
             .tp = 1,
             .pp = size,
             .dp = 1,
             .strategy = "io_uring",
             .threads = "1",
             .chunk = "8192"};
  mock_stats s = measure("uring", &u);
  fprintf(stderr, "rank %d io_uring: at most %d staging slots with uploads in flight on one stream\n", rank,
          s.pinned_in_flight_max);
  CHECKF(s.pinned_in_flight_max > 1,
         "io_uring: uploads out of at most %d staging slot(s) were in flight at once: the reader waits for "
         "each read's uploads before it completes the next read",
         s.pinned_in_flight_max);
  /* The reader's waits for slow uploads sleep in the driver on blocking-sync events (no poll with
   * naps); SHARDLOAD_CUDA_BLOCKING_SYNC=0 polls instead. */
  CHECKF(s.event_syncs_blocking > 0 && s.event_syncs_spinning == 0,
         "io_uring: %llu waits on blocking-sync events, %llu on others: the waits do not block in the driver",
         s.event_syncs_blocking, s.event_syncs_spinning);
  setenv("SHARDLOAD_CUDA_BLOCKING_SYNC", "0", 1);
  s = measure("uring polled", &u);
  unsetenv("SHARDLOAD_CUDA_BLOCKING_SYNC");
  CHECKF(s.event_syncs_blocking == 0 && s.event_syncs_spinning == 0,
         "io_uring, SHARDLOAD_CUDA_BLOCKING_SYNC=0: %llu blocking waits", s.event_syncs_blocking);
}

/* ---- numa ---- */

/* A fake sysfs tree under root: this rank's GPU (the mock's bus id of device = node-local rank,
 * MPI_COMM_TYPE_SHARED) on NUMA node `node`, whose CPUs are `cpulist`. */
static void fake_sysfs(const char *root, const char *node, const char *cpulist) {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int lr = 0;
  MPI_Comm_rank(local, &lr);
  MPI_Comm_free(&local);
  char path[4096];
  snprintf(path, sizeof path, "%s/bus/pci/devices/0000:%02x:00.0/numa_node", root, lr);
  CHECK(sl_test_write_file(path, node, strlen(node)) == 0);
  snprintf(path, sizeof path, "%s/devices/system/node/node0/cpulist", root);
  CHECK(sl_test_write_file(path, cpulist, strlen(cpulist)) == 0);
}

/* The CPUs the threads that allocated pinned staging ran on, after a load with this tree. */
static mock_stats numa_load(const char *what, const char *node, const char *cpulist, const char *bind) {
  char *root = sl_test_mkdtemp("numa");
  CHECK(root != NULL);
  if (root != NULL)
    fake_sysfs(root, node, cpulist);
  setenv("SHARDLOAD_SYSFS_ROOT", root != NULL ? root : "", 1);
  if (bind != NULL)
    setenv("SHARDLOAD_NUMA_BIND", bind, 1);
  setup u = {.model = "llama", .tp = 1, .pp = 1, .dp = size, .threads = "2"};
  infos[0] = '\0';
  sl_log_set_callback(on_log, NULL);
  mock_stats s = measure(what, &u);
  sl_log_set_callback(NULL, NULL);
  unsetenv("SHARDLOAD_SYSFS_ROOT");
  unsetenv("SHARDLOAD_NUMA_BIND");
  sl_test_rmtree(root);
  free(root);
  CHECKF(s.pinned_allocs > 0, "%s: no pinned staging was allocated", what);
  return s;
}

static void case_numa(void) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed))
      last = c;
  char one[32];
  snprintf(one, sizeof one, "%d\n", last);
  /* The node holds one CPU of this process's: the readers run there and nowhere else. */
  mock_stats s = numa_load("numa bound", "0\n", one, NULL);
  if (CPU_COUNT(&allowed) > 1) {
    CHECKF(CPU_COUNT(&s.pinned_cpus) == 1 && CPU_ISSET(last, &s.pinned_cpus),
           "numa: staging allocated on %d CPUs, expected CPU %d only (the GPU's node)",
           CPU_COUNT(&s.pinned_cpus), last);
  }
  /* Two reader threads on one CPU: said (a launcher binding each rank to one core does this). */
  CHECKF(strstr(infos, "reader threads: 2 of them on 1 CPU") != NULL,
         "numa: no warning of 2 readers on 1 CPU: %s", infos);
  /* Switched off, no node, or a node outside the process's CPUs: the affinity is left as it was. */
  s = numa_load("numa off", "0\n", one, "0");
  CHECKF(CPU_EQUAL(&s.pinned_cpus, &allowed), "numa off: the readers' affinity was changed");
  CHECKF(CPU_COUNT(&allowed) < 2 || strstr(infos, "reader threads: 2 of them") == NULL,
         "numa off: a warning of too few CPUs with %d: %s", CPU_COUNT(&allowed), infos);
  s = numa_load("numa no node", "-1\n", one, NULL);
  CHECKF(CPU_EQUAL(&s.pinned_cpus, &allowed), "numa, no node: the readers' affinity was changed");
  char outside[32];
  snprintf(outside, sizeof outside, "%d\n", CPU_SETSIZE - 1);
  if (!CPU_ISSET(CPU_SETSIZE - 1, &allowed)) {
    s = numa_load("numa outside", "0\n", outside, NULL);
    CHECKF(CPU_EQUAL(&s.pinned_cpus, &allowed),
           "numa, node outside the affinity: the readers' affinity was changed");
  }
}

/* Row-parallel slices of llama at tp = world (rows of 64 and 128 bytes, strided in the checkpoint,
 * contiguous in the parameter), read with the other ranks' columns between them (whole-row reads:
 * gaps coalesced, no two-phase exchange): packed on the host, uploaded flat. Uploaded as 2-D copies
 * before: 6 per rank at 2 ranks. */
static void case_narrow(void) {
  if (size != 2 && size != 4)
    return; /* llama's heads divide 2 and 4 */
  setup u = {.model = "llama",
             .tp = size,
             .pp = 1,
             .dp = 1,
             .threads = "2",
             .coalesce = "1048576",
             .two_phase = "false"};
  mock_stats s = measure("narrow", &u);
  fprintf(stderr, "rank %d narrow: %llu narrow 2-D uploads\n", rank, s.narrow_2d);
  CHECKF(s.narrow_2d == 0,
         "narrow: %llu host-to-device 2-D copies of rows under 512 bytes (packed before: flat)", s.narrow_2d);
}

/* Llama-4's experts, held transposed: each block transposed into its staging slot's pinned scratch
 * and uploaded with the slot's other uploads, not waited for one by one. */
static void case_transposed(void) {
  setup u = {.model = "llama4_text", .tp = 1, .pp = 1, .dp = size, .threads = "1"};
  mock_stats s = measure("transposed", &u);
  fprintf(stderr, "rank %d transposed: at most %llu host waits on one reader stream\n", rank,
          s.upload_waits_max);
  CHECKF(s.upload_waits_max <= 1,
         "transposed: a reader stream was waited for %llu times (a wait per transposed block; only the final "
         "sync should)",
         s.upload_waits_max);
}

static bool wanted(int argc, char **argv, const char *name) {
  if (argc < 2)
    return true;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0)
      return true;
  return false;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (wanted(argc, argv, "buckets"))
    case_buckets();
  if (wanted(argc, argv, "narrow"))
    case_narrow();
  if (wanted(argc, argv, "transposed"))
    case_transposed();
  if (wanted(argc, argv, "uring"))
    case_uring();
  if (wanted(argc, argv, "numa"))
    case_numa();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
