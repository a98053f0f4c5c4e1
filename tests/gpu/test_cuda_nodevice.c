/*
 * test_cuda_nodevice.c — the CUDA backend where no GPU can be used (CI, laptops): at any number of
 * ranks, sl__cuda_available says why, and creating the backend fails on every rank — with
 * SL_STATUS_NO_DEVICE and "no CUDA device available (...)" when built with CUDA, with
 * SL_STATUS_UNSUPPORTED and "built without CUDA" otherwise — without hanging and without leaving
 * a backend behind. Where a GPU is usable it prints "SKIP: ..." and exits 77 (test_cuda_backend.c
 * covers that case).
 */
#include "backend/backend.h"
#include "check.h"
#include "engine/staging.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  char why[512] = "";
  int have = sl__cuda_available(why, sizeof why) ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&have, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (rank == 0)
      printf("SKIP: a CUDA device is usable here (%s); test_cuda_backend covers it\n", why);
    MPI_Finalize();
    return 77;
  }
  /* The reason alone (the caller words the sentence around it). */
  CHECKF(why[0] != '\0' && strstr(why, "no CUDA device available") == NULL, "sl__cuda_available: \"%s\"",
         why);
  if (rank == 0)
    fprintf(stderr, "no CUDA device available (%s)\n", why);

  sl__err err;
  sl__err_clear(&err);
  sl__comm c;
  if (sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK) {
    fprintf(stderr, "[rank %d] MPI setup: %s\n", rank, err.msg);
    MPI_Finalize();
    return 1;
  }
  /* One broadcast group of every rank, as a real schedule would have. */
  uint32_t *members = calloc((size_t)size, sizeof *members);
  for (int r = 0; members != NULL && r < size; r++)
    members[r] = (uint32_t)r;
  sl__comm_group group = {(uint32_t)size, members, true};
  sl__comm_groups s = {.n = 1, .group = &group};
  CHECK(members != NULL);
  CHECKF(sl__comm_groups_create(&c, &s, &err) == SL_STATUS_OK, "groups: %s", err.msg);

  static sl__backend sentinel;
  const int devices[] = {-1, 0, 3};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
    sl__err_clear(&err);
    sl__backend *b = &sentinel; /* must come back NULL */
    double t0 = MPI_Wtime();
    sl_status st = sl__backend_cuda_create(&c, 2, (int)sl__staging_slots_per_thread(2), devices[i], NULL,
                                           NULL, &s, &b, &err);
    double took = MPI_Wtime() - t0;
    CHECKF(took < 60.0, "device %d: failing creation took %.1f s", devices[i], took);
    CHECK(b == NULL);
#ifdef SL_TEST_HAVE_CUDA
    CHECKF(st == SL_STATUS_NO_DEVICE, "device %d: status %s: %s", devices[i], sl_status_name(st), err.msg);
    CHECK_CONTAINS(err.msg, "no CUDA device available (");
    CHECK_CONTAINS(err.msg, "--device cpu");
#else
    CHECKF(st == SL_STATUS_UNSUPPORTED, "device %d: status %s: %s", devices[i], sl_status_name(st), err.msg);
    CHECK_CONTAINS(err.msg, "built without CUDA");
#endif
  }
  /* Without a schedule (no broadcast groups) it fails the same way. */
  sl__err_clear(&err);
  sl__backend *b = &sentinel;
  CHECK(sl__backend_cuda_create(&c, 1, (int)sl__staging_slots_per_thread(1), -1, NULL, NULL, NULL, &b,
                                &err) != SL_STATUS_OK);
  CHECK(b == NULL);

  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  sl__comm_free(&c);
  free(members);
  MPI_Finalize();
  return rc;
}
