/*
 * mpi_init_probe.c — linked into the command-line tool on the mock (shardload_mock): MPI_Init and
 * MPI_Init_thread note which CUDA context is current on the calling thread when MPI starts (a
 * CUDA-aware MPI creates its own context on that device; with none current, on device 0) and,
 * with MOCK_MPI_INIT_PROBE set, print it: "mock: MPI_Init with the CUDA context of device D" (D -1:
 * none). The real initialisation is PMPI's.
 */
#include "cuda_mock.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void probe(void) {
  if (getenv("MOCK_MPI_INIT_PROBE") != NULL)
    fprintf(stderr, "mock: MPI_Init with the CUDA context of device %d\n", mock_thread_context());
}

int MPI_Init(int *argc, char ***argv) {
  probe();
  return PMPI_Init(argc, argv);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  probe();
  return PMPI_Init_thread(argc, argv, required, provided);
}
