/*
 * api/refit_mpi.c — the MPI entry points of weight sync (shardload/shardload.h: sl_publish,
 * sl_loader_refit; docs/spec/DESIGN.md §13): the trainers' and the receivers' sides over a
 * duplicate of the caller's MPI communicator. The only refit file that sees MPI.
 */
#include "shardload/shardload.h"

#include "api/refit_job.h"

static sl_status init_mpi(sl__comm *c, const void *comm, sl__err *err) {
  return sl__comm_init_mpi(c, comm, err);
}

sl_status sl_publish(sl_publisher *p, MPI_Comm comm, uint64_t version) {
  return sl__publish_run(p, init_mpi, &comm, version);
}

sl_status sl_loader_refit(sl_loader *l, MPI_Comm comm, uint64_t version) {
  return sl__loader_refit_run(l, init_mpi, &comm, version);
}
