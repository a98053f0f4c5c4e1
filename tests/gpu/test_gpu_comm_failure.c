/*
 * test_gpu_comm_failure.c — a failure while the NCCL communicators are made or connected ends every
 * rank promptly (label gpumock, against the CPU stand-in; docs/GPU.md). The llama fixture is loaded
 * with device cuda at dp = the world size (every byte broadcast to every rank), with the default
 * timeout_s (600 s): before the abort channel was armed during creation, the ranks that did not fail
 * waited for the failed one until that timeout (the ctest timeout, 120 s for every case together,
 * fails the test then; nothing here asserts on time, the seconds are printed). Cases, the last rank
 * failing:
 *   init     its ncclCommInitRankConfig fails in the background (MOCK_NCCL_INIT_FAIL): it never joins,
 *            the others' creations wait for it;
 *   connect  its first connection fails and only it is told (MOCK_NCCL_CONNECT_FAIL with
 *            MOCK_NCCL_CONNECT_FAIL_ONE): the others wait in their warm-up broadcast;
 *   read     (after the communicators: in the transfer) its first read fails
 *            (SHARDLOAD_INJECT_READ_ERROR): the others' broadcasts are aborted.
 * Every rank's load fails; the failing rank's status is NCCL, its message NCCL's (the mock's words)
 * and it logged that message as an error at once; every other rank's is PEER_FAILED naming the
 * failing rank and the same cause; no communicator is left in any process, and the device memory
 * is all released (aborted broadcasts' buckets included: NCCL's abort ends them). Then a load without a
 * failure succeeds and releases its communicators (nothing of the failures is left over).
 */
#include "check.h"
#include "cuda_mock.h"

#include "shardload/shardload.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int size;
static char errors[8192]; /* this rank's error lines, from the log callback */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_log(sl_log_level level, int r, const char *line, void *user) {
  (void)r;
  (void)user;
  pthread_mutex_lock(&log_mu); /* the library logs from several threads at once */
  if (level == SL_LOG_ERROR && strlen(errors) + strlen(line) + 2 < sizeof errors) {
    strcat(errors, line);
    strcat(errors, "\n");
  }
  pthread_mutex_unlock(&log_mu);
}

/* The device's free memory (the stand-in's: its allocations and the communicators' buffers). */
static size_t free_bytes(void) {
  size_t f = 0, t = 0;
  CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess);
  return f;
}

static sl_status load(char *msg, size_t cap) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char dir[4096], dp[16];
  snprintf(dir, sizeof dir, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  snprintf(dp, sizeof dp, "%d", size);
  const char *kv[][2] = {{"model", dir}, {"device", "cuda"}, {"dp", dp}, {"quiet", "true"}, {"threads", "1"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    CHECK(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  snprintf(msg, cap, "%s", st != SL_STATUS_OK ? sl_config_error(cfg) : "");
  sl_config_destroy(cfg);
  if (st == SL_STATUS_OK) {
    st = sl_loader_load(l);
    snprintf(msg, cap, "%s", st != SL_STATUS_OK ? sl_loader_error(l) : "");
  }
  sl_loader_destroy(l);
  return st;
}

/* One failing case: `var`=the last rank (and `extra`=1 when given) set on every rank for the load. */
static void failing_case(const char *name, const char *var, const char *extra, const char *cause,
                         sl_status own) {
  int failing = size - 1;
  char value[16];
  snprintf(value, sizeof value, "%d", failing);
  setenv(var, value, 1);
  if (extra != NULL)
    setenv(extra, "1", 1);
  errors[0] = '\0';
  size_t free0 = free_bytes();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  char msg[2048] = "";
  sl_status st = load(msg, sizeof msg);
  double took = MPI_Wtime() - t0;
  unsetenv(var);
  if (extra != NULL)
    unsetenv(extra);
  printf("rank %d: %s: %s after %.1f s: %s\n", rank, name, sl_status_name(st), took, msg);
  if (rank == failing) {
    CHECKF(st == own, "%s: the failing rank returned %s: %s", name, sl_status_name(st), msg);
    CHECKF(own != SL_STATUS_NCCL || strstr(errors, cause) != NULL,
           "%s: the failing rank did not log NCCL's message as an error: %s", name, errors);
  } else {
    char who[32];
    snprintf(who, sizeof who, "rank %d", failing);
    CHECKF(st == SL_STATUS_PEER_FAILED, "%s: rank %d returned %s: %s", name, rank, sl_status_name(st), msg);
    CHECKF(strstr(msg, who) != NULL, "%s: the message does not name the failing %s: %s", name, who, msg);
  }
  CHECKF(strstr(msg, cause) != NULL, "%s: the message does not give the cause (%s): %s", name, cause, msg);
  mock_nccl_counts n = mock_nccl_count();
  CHECKF(n.live == 0, "%s: %d NCCL communicators left after the failure", name, n.live);
  /* every bucket, the parameters' block and the communicators' buffers released, aborted
   * broadcasts' buckets included */
  size_t free1 = free_bytes();
  CHECKF(free1 == free0, "%s: %lld bytes of device memory not released after the failure", name,
         (long long)free0 - (long long)free1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_log_set_callback(on_log, NULL);
  if (size < 2) {
    if (rank == 0)
      printf("SKIP: a failing rank needs others\n");
    MPI_Finalize();
    return 77;
  }
  const char *only = argc > 1 ? argv[1] : NULL; /* one case by name, else all */
  if (only == NULL || strcmp(only, "init") == 0)
    failing_case("init", "MOCK_NCCL_INIT_FAIL", NULL, "injected failure of ncclCommInitRankConfig",
                 SL_STATUS_NCCL);
  if (only == NULL || strcmp(only, "connect") == 0)
    failing_case("connect", "MOCK_NCCL_CONNECT_FAIL", "MOCK_NCCL_CONNECT_FAIL_ONE", "connection to a peer",
                 SL_STATUS_NCCL);
  if (only == NULL || strcmp(only, "read") == 0)
    failing_case("read", "SHARDLOAD_INJECT_READ_ERROR", NULL, "injected by SHARDLOAD_INJECT_READ_ERROR",
                 SL_STATUS_IO);
  int made_before = mock_nccl_count().made;
  char msg[2048] = "";
  sl_status st = load(msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "a load after the failures: %s", msg);
  mock_nccl_counts n = mock_nccl_count();
  CHECKF(n.live == 0 && n.made > made_before, "after the good load: %d communicators made, %d left",
         n.made - made_before, n.live);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
