/*
 * test_release_local.c — sl_loader_release_local talks to no other rank (what a garbage
 * collector's finalizer may call: the Python package's Loader.__del__). The test program defines
 * MPI_Comm_free itself (the MPI profiling interface: it counts, then calls PMPI_Comm_free), so the
 * library's calls come here. Checked at 1-4 ranks on the llama fixture:
 *   1. rank 0 alone releases a loaded loader: no MPI_Comm_free, the other ranks do nothing with
 *      theirs meanwhile, and a barrier after it completes (a collective release would hang there);
 *      a parameter reference retained before keeps its bytes;
 *   2. the counter sees the collective destroy (sl_loader_destroy frees the duplicated
 *      communicators), so case 1 can fail; release_local(NULL) is a no-op;
 *   3. a loader released after MPI_Finalize: no MPI call at all (one after MPI_Finalize is an
 *      error that ends the process), checked by each rank alone after the agreement on 1 and 2.
 */
#include "check.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int comm_frees;

int MPI_Comm_free(MPI_Comm *comm) {
  comm_frees++;
  return PMPI_Comm_free(comm);
}

static sl_loader *loaded(const char *model, int size) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "progress", "never");
  char v[16];
  int tp = size % 2 == 0 ? 2 : 1;
  snprintf(v, sizeof v, "%d", tp);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%d", size / tp);
  sl_config_set(cfg, "dp", v);
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (l != NULL)
    CHECKF(sl_loader_load(l) == SL_STATUS_OK, "load: %s", sl_loader_error(l));
  return l;
}

/* Case 1 on rank 0: the release is local, and a retained parameter keeps its bytes. */
static void release_alone(sl_loader *l) {
  CHECK(sl_loader_param_count(l) > 0);
  const sl_param *p = sl_loader_param(l, 0);
  uint64_t nbytes = p->nbytes;
  unsigned char *copy = malloc(nbytes);
  memcpy(copy, p->data, nbytes);
  sl_param_ref *ref = NULL;
  CHECK(sl_loader_param_retain(l, 0, &ref) == SL_STATUS_OK);
  int before = comm_frees;
  sl_loader_release_local(l);
  CHECKF(comm_frees == before, "release_local called MPI_Comm_free %d times", comm_frees - before);
  CHECK(ref != NULL && memcmp(sl_param_ref_data(ref), copy, nbytes) == 0);
  sl_param_ref_release(ref);
  free(copy);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  char model[4096];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));

  sl_loader *l = loaded(model, size);
  if (rank == 0 && l != NULL)
    release_alone(l);
  MPI_Barrier(MPI_COMM_WORLD); /* rank 0 arrives without the others having touched their loader */
  if (rank != 0) {
    int before = comm_frees;
    sl_loader_release_local(l);
    CHECKF(comm_frees == before, "release_local called MPI_Comm_free %d times", comm_frees - before);
  }

  /* 2: the collective destroy does free the duplicated communicators (the counter works). */
  sl_loader *d = loaded(model, size);
  int before = comm_frees;
  sl_loader_destroy(d);
  CHECKF(comm_frees >= before + 2, "sl_loader_destroy: %d MPI_Comm_free calls, expected 2 or more",
         comm_frees - before);
  sl_loader_release_local(NULL);

  sl_loader *late = loaded(model, size); /* released after MPI_Finalize (case 3) */
  int failed = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  before = comm_frees;
  sl_loader_release_local(late); /* an MPI call here ends the process with an error */
  if (comm_frees != before) {
    fprintf(stderr, "rank %d: release_local after MPI_Finalize called MPI_Comm_free\n", rank);
    return 1;
  }
  return failed;
}
