/*
 * comm/mpi.c — the MPI implementation of the communicator (see comm/comm.h). Every communicator the
 * library creates has MPI_ERRORS_RETURN so that an MPI failure becomes a status, never a process
 * abort. Collectives are non-blocking requests waited for by sl__mpi_wait (comm/mpi_watchdog.c), so
 * that a peer that died or stopped ends in the watchdog's report instead of a wait without end.
 */
#include "comm/mpi.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define ABORT_TAG 7071
#define PIECE ((size_t)1 << 30)

static sl_status mpi_fail(sl__err *err, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return sl__err_set(err, SL_STATUS_MPI, "%s failed: %s", what, msg);
}

/* A non-blocking operation started by `rc`'s call, waited for with the watchdog's deadline. */
static sl_status started(sl__comm *c, int rc, MPI_Request *req, const char *what, sl__err *err) {
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, what);
  return sl__mpi_wait(c, req, what, err);
}

static sl_status mpi_allreduce_int(sl__comm *c, int *vals, int n, int op, const char *what, sl__err *err) {
  MPI_Request req;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, vals, n, MPI_INT, op == SL__REDUCE_MIN ? MPI_MIN : MPI_SUM,
                          sl__mpi_of(c)->world, &req);
  return started(c, rc, &req, what, err);
}

static sl_status mpi_bcast(sl__comm *c, void *buf, size_t nbytes, int root, const char *what, sl__err *err) {
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, sl__mpi_of(c)->world, &req);
  return started(c, rc, &req, what, err);
}

static sl_status mpi_allgather(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what,
                               sl__err *err) {
  MPI_Request req;
  int rc = MPI_Iallgather(rec, (int)nbytes, MPI_BYTE, out, (int)nbytes, MPI_BYTE, sl__mpi_of(c)->world, &req);
  return started(c, rc, &req, what, err);
}

static sl_status mpi_gather(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what,
                            sl__err *err) {
  MPI_Request req;
  int rc = MPI_Igather(rec, (int)nbytes, MPI_BYTE, out, (int)nbytes, MPI_BYTE, 0, sl__mpi_of(c)->world, &req);
  return started(c, rc, &req, what, err);
}

static sl_status mpi_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err) {
  for (size_t off = 0; off < nbytes; off += PIECE) {
    size_t piece = nbytes - off < PIECE ? nbytes - off : PIECE;
    MPI_Request req;
    int rc =
        MPI_Iallreduce(MPI_IN_PLACE, bits + off, (int)piece, MPI_BYTE, MPI_BOR, sl__mpi_of(c)->world, &req);
    sl_status st = started(c, rc, &req, "reduction of the weight bitmaps", err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* Whether freeing may call MPI_Comm_free, which is collective: not in a local release, and no MPI
 * call at all once MPI is finalized (a release from a garbage collector at exit). */
static bool may_free_comms(const sl__comm *c) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !c->free_local && !finalized;
}

static void mpi_groups_free(sl__comm *c) {
  sl__comm_mpi *m = sl__mpi_of(c);
  bool collective = may_free_comms(c);
  for (size_t i = 0; i < c->n_groups && m->groups != NULL && collective; i++)
    if (m->groups[i] != MPI_COMM_NULL)
      MPI_Comm_free(&m->groups[i]);
  free(m->groups);
  m->groups = NULL;
}

static sl_status mpi_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err) {
  sl__comm_mpi *m = sl__mpi_of(c);
  m->groups = calloc(groups->n + 1, sizeof *m->groups);
  if (m->groups == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  for (size_t g = 0; g < groups->n; g++)
    m->groups[g] = MPI_COMM_NULL;
  MPI_Group world_group;
  MPI_Comm_group(m->world, &world_group);
  sl_status st = SL_STATUS_OK;
  for (size_t g = 0; g < groups->n; g++) {
    const sl__comm_group *gr = &groups->group[g];
    if (c->group_rank[g] < 0)
      continue;
    /* Only members call MPI_Comm_create_group; every rank walks groups in the same order. */
    int *ranks = malloc(gr->n * sizeof *ranks);
    if (ranks == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
      break;
    }
    for (uint32_t j = 0; j < gr->n; j++)
      ranks[j] = (int)gr->members[j];
    MPI_Group sub;
    MPI_Group_incl(world_group, (int)gr->n, ranks, &sub);
    free(ranks);
    /* Blocking (MPI has no non-blocking form): the backstop thread bounds it. */
    sl__comm_block_begin(c, "creating a broadcast group communicator");
    int rc = MPI_Comm_create_group(m->world, sub, (int)(g % 32000), &m->groups[g]);
    sl__comm_block_end(c);
    MPI_Group_free(&sub);
    if (rc != MPI_SUCCESS) {
      st = mpi_fail(err, rc, "MPI_Comm_create_group");
      break;
    }
    MPI_Comm_set_errhandler(m->groups[g], MPI_ERRORS_RETURN);
  }
  MPI_Group_free(&world_group);
  return st;
}

static sl_status mpi_abort_arm(sl__comm *c, sl__err *err) {
  sl__comm_mpi *m = sl__mpi_of(c);
  int rc = MPI_Irecv(&m->abort_buf, 1, MPI_INT, MPI_ANY_SOURCE, ABORT_TAG, m->abort_comm, &m->abort_req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Irecv (abort channel)");
  return SL_STATUS_OK;
}

static void mpi_abort_raise(sl__comm *c) {
  sl__comm_mpi *m = sl__mpi_of(c);
  m->abort_one = 1;
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank)
      continue;
    /* Completion is not awaited: every receiver drains its messages in mpi_abort_disarm. */
    MPI_Request req;
    if (MPI_Isend(&m->abort_one, 1, MPI_INT, r, ABORT_TAG, m->abort_comm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

static bool mpi_abort_poll(sl__comm *c) {
  sl__comm_mpi *m = sl__mpi_of(c);
  int flag = 0;
  MPI_Status status;
  if (m->abort_req != MPI_REQUEST_NULL && MPI_Test(&m->abort_req, &flag, &status) == MPI_SUCCESS && flag) {
    c->abort_from = status.MPI_SOURCE;
    m->abort_req = MPI_REQUEST_NULL;
    return true;
  }
  return false;
}

static sl_status mpi_abort_disarm(sl__comm *c, sl__err *err) {
  sl__comm_mpi *m = sl__mpi_of(c);
  /* How many ranks raised: each sent one message to every other rank. */
  int counts[1] = {c->raised ? 1 : 0};
  sl_status st = mpi_allreduce_int(c, counts, 1, SL__REDUCE_SUM, "counting the aborts raised", err);
  if (st != SL_STATUS_OK)
    return st;
  int expect = counts[0] - (c->raised ? 1 : 0);
  if (m->abort_req == MPI_REQUEST_NULL) {
    /* The posted receive already matched one message. */
    expect--;
  } else if (expect > 0) {
    st = sl__mpi_wait(c, &m->abort_req, "receiving the abort messages", err);
    if (st != SL_STATUS_OK)
      return st;
    expect--;
  } else {
    MPI_Cancel(&m->abort_req);
    MPI_Wait(&m->abort_req, MPI_STATUS_IGNORE);
  }
  m->abort_req = MPI_REQUEST_NULL;
  for (int i = 0; i < expect && st == SL_STATUS_OK; i++) {
    int buf = 0;
    MPI_Request req;
    int rc = MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, ABORT_TAG, m->abort_comm, &req);
    st = started(c, rc, &req, "receiving the abort messages", err);
  }
  return st;
}

/* Waits for a non-blocking collective of a group, polled against the abort channel and the
 * watchdog. Open MPI progresses a non-blocking collective only inside MPI calls: poll without
 * sleeping, yielding the core to the reader threads between polls (a sleep here cut the broadcast
 * rate by more than ten times). */
static sl_status poll_collective(sl__comm *c, MPI_Request *req, const char *what, bool *aborted,
                                 sl__err *err) {
  double start = sl__now();
  sl__comm_block_begin(c, what);
  for (;;) {
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag)
      sl__comm_block_end(c);
    if (rc != MPI_SUCCESS)
      return mpi_fail(err, rc, "MPI_Test of a group collective");
    if (flag) {
      sl__comm_progress(c);
      return SL_STATUS_OK;
    }
    sl__comm_poll(c);
    double waited = sl__now() - start;
    if (c->timeout_s > 0 && waited > c->timeout_s && sl__mpi_expire(c, what, waited))
      start = sl__now(); /* the job still moves: a new deadline */
    if (sl__comm_abort_check(c)) {
      sl__comm_block_end(c);
      /* Leave the request behind: a non-blocking collective cannot be cancelled or freed, and
       * its peers may never complete it. The communicator is released with the loader. */
      sl__mpi_of(c)->abandoned = *req;
      *aborted = true;
      return SL_STATUS_OK;
    }
    sched_yield();
  }
}

static sl_status mpi_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                                 sl__err *err) {
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, sl__mpi_of(c)->groups[g], &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Ibcast");
  char what[96];
  snprintf(what, sizeof what, "broadcast of %llu bytes in group %u", (unsigned long long)nbytes, g);
  return poll_collective(c, &req, what, aborted, err);
}

static sl_status mpi_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                     const uint64_t *sdispl, void *recv, const uint64_t *rcount,
                                     const uint64_t *rdispl, bool *aborted, sl__err *err) {
  MPI_Comm comm = sl__mpi_of(c)->groups[g];
  int n = 0;
  MPI_Comm_size(comm, &n);
  /* The request keeps using the count arrays until it completes: an abandoned one keeps them. */
  int *ints = calloc((size_t)n * 4 + 1, sizeof *ints);
  if (ints == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory exchanging column blocks");
  for (int r = 0; r < n; r++) {
    if (scount[r] > INT_MAX || sdispl[r] > INT_MAX || rcount[r] > INT_MAX || rdispl[r] > INT_MAX) {
      free(ints);
      return sl__err_set(err, SL_STATUS_INTERNAL, "exchange in group %u: a block exceeds one message", g);
    }
    ints[r] = (int)scount[r];
    ints[n + r] = (int)sdispl[r];
    ints[2 * n + r] = (int)rcount[r];
    ints[3 * n + r] = (int)rdispl[r];
  }
  MPI_Request req;
  int rc =
      MPI_Ialltoallv(send, ints, ints + n, MPI_BYTE, recv, ints + 2 * n, ints + 3 * n, MPI_BYTE, comm, &req);
  if (rc != MPI_SUCCESS) {
    free(ints);
    return mpi_fail(err, rc, "MPI_Ialltoallv");
  }
  char what[96];
  snprintf(what, sizeof what, "two-phase exchange in group %u", g);
  sl_status st = poll_collective(c, &req, what, aborted, err);
  if (!*aborted)
    free(ints);
  return st;
}

/* The ranks that share memory with this one (MPI_COMM_TYPE_SHARED) agree on their lowest rank. */
static sl_status mpi_node_leader(sl__comm *c, int *leader, sl__err *err) {
  sl__comm_mpi *m = sl__mpi_of(c);
  MPI_Comm node = MPI_COMM_NULL;
  *leader = c->rank;
  if (MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return sl__err_set(err, SL_STATUS_MPI, "MPI_Comm_split_type failed");
  int rc = MPI_Allreduce(MPI_IN_PLACE, leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  return rc == MPI_SUCCESS ? SL_STATUS_OK : mpi_fail(err, rc, "MPI_Allreduce (node leader)");
}

static bool mpi_expire(sl__comm *c, const char *what, double waited, sl__err *err) {
  (void)err;
  return sl__mpi_expire(c, what, waited);
}

static void mpi_free(sl__comm *c) {
  sl__comm_mpi *m = sl__mpi_of(c);
  if (m == NULL)
    return;
  sl__mpi_watchdog_free(c);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (m->abort_req != MPI_REQUEST_NULL && !finalized) { /* local calls */
    MPI_Cancel(&m->abort_req);
    MPI_Request_free(&m->abort_req);
  }
  bool collective = may_free_comms(c);
  if (m->abort_comm != MPI_COMM_NULL && collective)
    MPI_Comm_free(&m->abort_comm);
  if (m->world != MPI_COMM_NULL && collective)
    MPI_Comm_free(&m->world);
  free(m);
  c->state = NULL;
}

static const sl__comm_impl mpi_impl = {
    .name = "MPI",
    .allreduce_int = mpi_allreduce_int,
    .bcast = mpi_bcast,
    .allgather = mpi_allgather,
    .gather = mpi_gather,
    .allreduce_bor = mpi_allreduce_bor,
    .groups_create = mpi_groups_create,
    .groups_free = mpi_groups_free,
    .group_bcast = mpi_group_bcast,
    .group_alltoallv = mpi_group_alltoallv,
    .abort_arm = mpi_abort_arm,
    .abort_raise = mpi_abort_raise,
    .abort_poll = mpi_abort_poll,
    .abort_disarm = mpi_abort_disarm,
    .node_leader = mpi_node_leader,
    .set_timeout = sl__mpi_set_timeout,
    .poll = sl__mpi_poll,
    .expire = mpi_expire,
    .block_begin = sl__mpi_block_begin,
    .block_end = sl__mpi_block_end,
    .free = mpi_free,
};

sl_status sl__comm_init_mpi(sl__comm *c, const void *mpi_comm, sl__err *err) {
  sl__comm_reset(c);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return sl__err_set(err, SL_STATUS_MPI, "MPI is not initialized: call MPI_Init before creating a loader");
  sl__comm_mpi *m = calloc(1, sizeof *m);
  if (m == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating the communicator");
  m->world = MPI_COMM_NULL;
  m->abort_comm = MPI_COMM_NULL;
  m->abort_req = MPI_REQUEST_NULL;
  m->abandoned = MPI_REQUEST_NULL;
  int rc = MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &m->world);
  if (rc != MPI_SUCCESS) {
    free(m);
    return mpi_fail(err, rc, "MPI_Comm_dup");
  }
  MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
  rc = MPI_Comm_dup(m->world, &m->abort_comm);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&m->world);
    free(m);
    return mpi_fail(err, rc, "MPI_Comm_dup");
  }
  MPI_Comm_set_errhandler(m->abort_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m->world, &c->rank);
  MPI_Comm_size(m->world, &c->size);
  c->impl = &mpi_impl;
  c->state = m;
  return SL_STATUS_OK;
}
