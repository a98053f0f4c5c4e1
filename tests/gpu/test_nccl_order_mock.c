/*
 * test_nccl_order_mock.c — the CPU stand-in models what decides a first run on GPUs: collectives of
 * two communicators issued in different orders on different ranks deadlock (label gpumock, 2 ranks;
 * the stand-in alone, no library). Two communicators X and Y over both ranks, a stream each:
 *   same order   both ranks issue X's broadcast, then Y's: both complete, every byte arrives;
 *   crossed      rank 0 issues X then Y, rank 1 Y then X: on each rank the second waits for the GPU
 *                that the first holds (the stand-in lets one collective run at a time per GPU, the
 *                worst a GPU may do), and the first waits for the other rank's, which waits behind
 *                it: a deadlock, which the stand-in's watchdog (MOCK_NCCL_WATCHDOG_S=2 here) turns
 *                into an asynchronous ncclSystemError on the second communicator of each rank, saying
 *                "deadlock" (ncclGetLastError of that communicator). Before, the stand-in ran both at
 *                once and the crossed order completed.
 * The loader's own tests run under the same rules at up to 8 ranks (test_gpu_placement_mock,
 * test_gpu_comm_failure_mock): its broadcasts, one at a time in the schedule's order, never trip it.
 */
#include "check.h"
#include "cuda_mock.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (1u << 20)

static int rank;

static ncclComm_t make_comm(void) {
  ncclUniqueId id;
  if (rank == 0)
    CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t c = NULL;
  CHECK(ncclCommInitRank(&c, 2, id, rank) == ncclSuccess);
  return c;
}

/* Issues the broadcasts of comms[order[0]], then comms[order[1]] (100 ms later: issue order is what
 * the GPU sees), each from rank 0 on its own stream. */
static void issue(ncclComm_t *comms, cudaStream_t *s, void **buf, const int *order) {
  for (int k = 0; k < 2; k++) {
    int i = order[k];
    CHECK(ncclBroadcast(buf[i], buf[i], N, ncclUint8, 0, comms[i], s[i]) == ncclSuccess);
    mock_nap_us(100000);
  }
}

/* Waits (bounded by the test's timeout) until both streams drained or a communicator failed. */
static void wait_done(ncclComm_t *comms, cudaStream_t *s, ncclResult_t *state) {
  for (;;) {
    bool drained = true;
    for (int i = 0; i < 2; i++) {
      state[i] = ncclSuccess;
      CHECK(ncclCommGetAsyncError(comms[i], &state[i]) == ncclSuccess);
      drained = drained && cudaStreamQuery(s[i]) == cudaSuccess;
    }
    if (drained || state[0] != ncclSuccess || state[1] != ncclSuccess)
      return;
    mock_nap_us(10000);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (size != 2) {
    if (rank == 0)
      printf("SKIP: two ranks\n");
    MPI_Finalize();
    return 77;
  }
  setenv("MOCK_NCCL_WATCHDOG_S", "2", 1);
  CHECK(cudaSetDevice(rank) == cudaSuccess);
  ncclComm_t comms[2] = {make_comm(), make_comm()};
  cudaStream_t s[2];
  void *buf[2];
  uint8_t *host = malloc(N);
  for (int i = 0; i < 2; i++) {
    CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaMalloc(&buf[i], N) == cudaSuccess);
    memset(host, rank == 0 ? 0x40 + i : 0, N);
    CHECK(cudaMemcpy(buf[i], host, N, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  /* same order */
  const int same[2] = {0, 1};
  issue(comms, s, buf, same);
  ncclResult_t state[2];
  wait_done(comms, s, state);
  for (int i = 0; i < 2; i++) {
    CHECKF(state[i] == ncclSuccess, "same order: communicator %c: %s (%s)", "XY"[i],
           ncclGetErrorString(state[i]), ncclGetLastError(comms[i]));
    CHECK(cudaMemcpy(host, buf[i], N, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECKF(host[0] == 0x40 + i && host[N - 1] == 0x40 + i, "same order: communicator %c: bytes %#x", "XY"[i],
           host[0]);
  }
  /* crossed */
  const int crossed[2][2] = {{0, 1}, {1, 0}};
  issue(comms, s, buf, crossed[rank]);
  int second = crossed[rank][1];
  for (;;) { /* the watchdog ends the second (at 2 s), the first later (at 4 s) */
    wait_done(comms, s, state);
    if (state[second] != ncclSuccess)
      break;
    mock_nap_us(10000);
  }
  const char *why = ncclGetLastError(comms[second]);
  CHECKF(state[second] == ncclSystemError && strstr(why, "deadlock") != NULL,
         "crossed: communicator %c: %s: %s", "XY"[second], ncclGetErrorString(state[second]), why);
  printf("rank %d: crossed: communicator %c: %s\n", rank, "XY"[second], why);
  for (int i = 0; i < 2; i++) {
    CHECK(ncclCommAbort(comms[i]) == ncclSuccess);
    cudaStreamDestroy(s[i]);
    cudaFree(buf[i]);
  }
  free(host);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
