/*
 * gpu_ranks.h — the start shared by the multi-rank GPU tests (test_gpu_peers.c, test_gpu_refit.c,
 * test_gpu_reload.c), against the CUDA runtime or its stand-in (cuda_mock.c): whether every rank
 * has a GPU of its own, and the skip (exit status 77) when not.
 */
#ifndef SL_TEST_GPU_RANKS_H
#define SL_TEST_GPU_RANKS_H

#include <stdbool.h>

/* COLLECTIVE. Whether every rank of MPI_COMM_WORLD has a CUDA device of its own: its node has at
 * least as many devices as ranks. local_rank (may be NULL) gets this rank's index on its node: the
 * device it should use. */
bool gpu_ranks_have_devices(int *local_rank);

/* COLLECTIVE. Rank 0 prints "SKIP: why"; every rank finalizes MPI. Returns 77, ctest's skip status. */
int gpu_ranks_skip(const char *why);

#endif
