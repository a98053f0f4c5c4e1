/*
 * gpu_ranks.c — whether every rank has a GPU of its own, and the skip when not (gpu_ranks.h).
 */
#include "gpu_ranks.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>

bool gpu_ranks_have_devices(int *local_rank) {
  int count = 0;
  int ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  int rank = 0, local = 1, here = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local);
  MPI_Comm_rank(node, &here);
  MPI_Comm_free(&node);
  if (local_rank != NULL)
    *local_rank = here;
  ok = ok && count >= local;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

int gpu_ranks_skip(const char *why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("SKIP: %s\n", why);
  MPI_Finalize();
  return 77;
}
