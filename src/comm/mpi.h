/*
 * comm/mpi.h — the MPI implementation's own state, shared by comm/mpi.c (collectives, abort channel)
 * and comm/mpi_watchdog.c (alive queries, reports, the backstop thread). Nothing else includes it.
 */
#ifndef SL_COMM_MPI_H
#define SL_COMM_MPI_H

#include "comm/comm.h"

#include <mpi.h>

typedef struct sl__comm_mpi {
  MPI_Comm world;        /* duplicate of the caller's communicator, errors returned */
  MPI_Comm abort_comm;   /* abort messages and the watchdog's queries travel here */
  MPI_Request abort_req; /* posted receive of an abort message */
  int abort_buf;
  int abort_one;         /* send buffer of abort messages (must outlive the sends) */
  MPI_Comm *groups;      /* per broadcast group: its communicator, MPI_COMM_NULL if not a member */
  MPI_Request abandoned; /* a broadcast left unfinished by an abort (never waited for) */
  /* the watchdog (comm/mpi_watchdog.c) */
  double next_probe;             /* when waits next look for other ranks' alive queries */
  double last_poll;              /* the last poll of the wait in progress (0: none yet) */
  double self_stalled;           /* longest gap between two polls: this rank itself not running */
  struct sl__backstop *backstop; /* thread that ends blocking calls which overrun */
  struct sl__sent *sent;         /* this communicator's send buffers of the watchdog's messages,
                                    each kept until its sends completed; NULL until the first */
} sl__comm_mpi;

static inline sl__comm_mpi *sl__mpi_of(const sl__comm *c) {
  return (sl__comm_mpi *)c->state;
}

/* Waits for a non-blocking MPI request, polling it (and other ranks' alive queries) until the
 * deadline; past it the watchdog fires (see sl__mpi_expire). `what` names the operation. */
sl_status sl__mpi_wait(sl__comm *c, MPI_Request *req, const char *what, sl__err *err);
/* The watchdog fires: `what` has not finished within `waited` seconds. Asks every rank whether it is
 * alive and how long ago it made progress. Returns true when every rank answered and one of them
 * progressed within timeout_s (the job is slow, not stuck: the caller starts a new deadline).
 * Otherwise every rank prints the phase and the ranks not heard from on stderr, and the job ends
 * with MPI_Abort on the load's communicator (returns false only if MPI_Abort returns, never with
 * Open MPI or MPICH). */
bool sl__mpi_expire(sl__comm *c, const char *what, double waited);
/* The watchdog's hooks of the implementation table. */
void sl__mpi_set_timeout(sl__comm *c);
void sl__mpi_poll(sl__comm *c);
void sl__mpi_block_begin(sl__comm *c, const char *what);
void sl__mpi_block_end(sl__comm *c);
void sl__mpi_watchdog_free(sl__comm *c);

#endif
