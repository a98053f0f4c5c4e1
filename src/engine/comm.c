/*
 * engine/comm.c — MPI plumbing of the loader (see engine/comm.h). Every communicator the library creates has
 * MPI_ERRORS_RETURN so that an MPI failure becomes a status, never a process abort. Collectives are
 * non-blocking requests waited for by sl__comm_wait (engine/watchdog.c), so that a peer that died
 * or stopped ends in the watchdog's report instead of a wait without end.
 */
#include "engine/comm.h"

#include "base/log.h"
#include "base/util.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define ABORT_TAG 7071
#define BLOB_PIECE ((size_t)1 << 30)

static sl_status mpi_fail(sl__err *err, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return sl__err_set(err, SL_STATUS_MPI, "%s failed: %s", what, msg);
}

sl_status sl__comm_init(sl__comm *c, MPI_Comm user, sl__err *err) {
  memset(c, 0, sizeof *c);
  c->world = MPI_COMM_NULL;
  c->abort_comm = MPI_COMM_NULL;
  c->abort_req = MPI_REQUEST_NULL;
  c->abort_from = -1;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return sl__err_set(err, SL_STATUS_MPI, "MPI is not initialized: call MPI_Init before creating a loader");
  int rc = MPI_Comm_dup(user, &c->world);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
  rc = MPI_Comm_dup(c->world, &c->abort_comm);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&c->world);
    return mpi_fail(err, rc, "MPI_Comm_dup");
  }
  MPI_Comm_set_errhandler(c->abort_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->world, &c->rank);
  MPI_Comm_size(c->world, &c->size);
  return SL_STATUS_OK;
}

static void free_groups(sl__comm *c) {
  for (size_t i = 0; i < c->n_groups; i++)
    if (c->groups[i] != MPI_COMM_NULL)
      MPI_Comm_free(&c->groups[i]);
  free(c->groups);
  free(c->group_rank);
  c->groups = NULL;
  c->group_rank = NULL;
  c->n_groups = 0;
}

void sl__comm_free(sl__comm *c) {
  if (c == NULL)
    return;
  sl__comm_watchdog_free(c);
  free_groups(c);
  if (c->abort_req != MPI_REQUEST_NULL) {
    MPI_Cancel(&c->abort_req);
    MPI_Request_free(&c->abort_req);
  }
  if (c->abort_comm != MPI_COMM_NULL)
    MPI_Comm_free(&c->abort_comm);
  if (c->world != MPI_COMM_NULL)
    MPI_Comm_free(&c->world);
}

sl_status sl__comm_agree(sl__comm *c, sl_status mine, sl__err *err, const char *phase) {
  /* The first rank that failed by itself wins; a rank that only stopped because another failed
   * (PEER_FAILED: it saw an abort) takes that rank's message, so every rank names the cause. */
  int me[2] = {mine != SL_STATUS_OK && mine != SL_STATUS_PEER_FAILED ? c->rank : c->size,
               mine != SL_STATUS_OK ? c->rank : c->size};
  int firsts[2] = {c->size, c->size};
  if (phase != NULL)
    c->phase = phase;
  MPI_Request req;
  int rc = MPI_Iallreduce(me, firsts, 2, MPI_INT, MPI_MIN, c->world, &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "status agreement (MPI_Iallreduce)");
  sl_status st = sl__comm_wait(c, &req, "status agreement", err);
  if (st != SL_STATUS_OK)
    return st;
  int first = firsts[0] < c->size ? firsts[0] : firsts[1];
  if (first == c->size)
    return SL_STATUS_OK;
  struct {
    int status;
    char msg[SL_ERR_MSG_MAX];
  } payload;
  memset(&payload, 0, sizeof payload);
  if (c->rank == first) {
    payload.status = (int)mine;
    snprintf(payload.msg, sizeof payload.msg, "%s", err != NULL ? err->msg : "");
  }
  rc = MPI_Ibcast(&payload, (int)sizeof payload, MPI_BYTE, first, c->world, &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "status agreement (MPI_Ibcast)");
  st = sl__comm_wait(c, &req, "status agreement (the failing rank's message)", err);
  if (st != SL_STATUS_OK)
    return st;
  if (mine != SL_STATUS_OK && (mine != SL_STATUS_PEER_FAILED || c->rank == first))
    return mine;
  payload.msg[sizeof payload.msg - 1] = '\0';
  if (err != NULL)
    sl__err_clear(err);
  return sl__err_set(err, SL_STATUS_PEER_FAILED, "another rank failed%s%s: rank %d: %s",
                     phase != NULL ? " while " : "", phase != NULL ? phase : "", first, payload.msg);
}

/* A broadcast waited for with the watchdog's deadline; MPI_SUCCESS or not (err set). */
static int ibcast(sl__comm *c, void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                  const char *what, sl__err *err) {
  MPI_Request req;
  int rc = MPI_Ibcast(buf, count, type, root, comm, &req);
  if (rc != MPI_SUCCESS) {
    mpi_fail(err, rc, what);
    return rc;
  }
  return sl__comm_wait(c, &req, what, err) == SL_STATUS_OK ? MPI_SUCCESS : MPI_ERR_OTHER;
}

sl_status sl__comm_bcast_blob(sl__comm *c, uint8_t **blob, size_t *len, int root, sl__err *err) {
  uint64_t n = c->rank == root ? (uint64_t)*len : 0;
  int rc = ibcast(c, &n, 1, MPI_UINT64_T, root, c->world, "broadcast of a blob size", err);
  if (rc != MPI_SUCCESS)
    return SL_STATUS_MPI;
  uint8_t *buf = c->rank == root ? *blob : malloc(n > 0 ? (size_t)n : 1);
  /* Every rank must take part in the data broadcast even if its allocation failed. */
  uint8_t dummy[1];
  bool oom = buf == NULL;
  for (uint64_t off = 0; off < n; off += BLOB_PIECE) {
    size_t piece = n - off < BLOB_PIECE ? (size_t)(n - off) : BLOB_PIECE;
    if (oom) {
      /* Receive into a bounded scratch buffer to stay in step. */
      uint8_t *scratch = malloc(piece);
      rc = ibcast(c, scratch != NULL ? scratch : dummy, scratch != NULL ? (int)piece : 0, MPI_BYTE, root,
                  c->world, "broadcast of a blob", err);
      free(scratch);
    } else {
      rc = ibcast(c, buf + off, (int)piece, MPI_BYTE, root, c->world, "broadcast of a blob", err);
    }
    if (rc != MPI_SUCCESS) {
      if (c->rank != root)
        free(buf);
      return SL_STATUS_MPI;
    }
  }
  if (oom)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory receiving %llu bytes", (unsigned long long)n);
  if (c->rank != root) {
    *blob = buf;
    *len = (size_t)n;
  }
  return SL_STATUS_OK;
}

sl_status sl__comm_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err) {
  free_groups(c);
  c->groups = calloc(groups->n + 1, sizeof *c->groups);
  c->group_rank = calloc(groups->n + 1, sizeof *c->group_rank);
  if (c->groups == NULL || c->group_rank == NULL) {
    free_groups(c);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  }
  c->n_groups = groups->n;
  MPI_Group world_group;
  MPI_Comm_group(c->world, &world_group);
  sl_status st = SL_STATUS_OK;
  for (size_t g = 0; g < groups->n; g++) {
    c->groups[g] = MPI_COMM_NULL;
    c->group_rank[g] = -1;
    const sl__comm_group *gr = &groups->group[g];
    const uint32_t *mem = gr->members;
    int pos = -1;
    for (uint32_t j = 0; j < gr->n; j++)
      if ((int)mem[j] == c->rank)
        pos = (int)j;
    if (pos < 0)
      continue;
    /* Only members call MPI_Comm_create_group; every rank walks groups in the same order. */
    int *ranks = malloc(gr->n * sizeof *ranks);
    if (ranks == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
      break;
    }
    for (uint32_t j = 0; j < gr->n; j++)
      ranks[j] = (int)mem[j];
    MPI_Group sub;
    MPI_Group_incl(world_group, (int)gr->n, ranks, &sub);
    free(ranks);
    /* Blocking (MPI has no non-blocking form): the backstop thread bounds it. */
    sl__comm_block_begin(c, "creating a broadcast group communicator");
    int rc = MPI_Comm_create_group(c->world, sub, (int)(g % 32000), &c->groups[g]);
    sl__comm_block_end(c);
    MPI_Group_free(&sub);
    if (rc != MPI_SUCCESS) {
      st = mpi_fail(err, rc, "MPI_Comm_create_group");
      break;
    }
    MPI_Comm_set_errhandler(c->groups[g], MPI_ERRORS_RETURN);
    c->group_rank[g] = pos;
  }
  MPI_Group_free(&world_group);
  return st;
}

sl_status sl__comm_abort_arm(sl__comm *c, sl__err *err) {
  c->aborted = false;
  c->raised = false;
  c->abort_from = -1;
  int rc = MPI_Irecv(&c->abort_buf, 1, MPI_INT, MPI_ANY_SOURCE, ABORT_TAG, c->abort_comm, &c->abort_req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Irecv (abort channel)");
  c->armed = true;
  return SL_STATUS_OK;
}

void sl__comm_abort_raise(sl__comm *c) {
  if (!c->armed || c->raised)
    return;
  c->raised = true;
  c->aborted = true;
  if (c->abort_from < 0)
    c->abort_from = c->rank;
  c->abort_one = 1;
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank)
      continue;
    /* Completion is not awaited: every receiver drains its messages in sl__comm_abort_disarm. */
    MPI_Request req;
    if (MPI_Isend(&c->abort_one, 1, MPI_INT, r, ABORT_TAG, c->abort_comm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

bool sl__comm_abort_check(sl__comm *c) {
  if (!c->armed)
    return false;
  if (c->aborted)
    return true;
  if (c->abort_hook != NULL && c->abort_hook(c->abort_hook_ctx)) {
    sl__comm_abort_raise(c);
    return true;
  }
  int flag = 0;
  MPI_Status status;
  if (c->abort_req != MPI_REQUEST_NULL && MPI_Test(&c->abort_req, &flag, &status) == MPI_SUCCESS && flag) {
    c->aborted = true;
    c->abort_from = status.MPI_SOURCE;
    c->abort_req = MPI_REQUEST_NULL;
  }
  return c->aborted;
}

sl_status sl__comm_abort_disarm(sl__comm *c, sl__err *err) {
  if (!c->armed)
    return SL_STATUS_OK;
  c->armed = false;
  /* How many ranks raised: each sent one message to every other rank. */
  int raised = c->raised ? 1 : 0;
  int total = 0;
  MPI_Request req;
  int rc = MPI_Iallreduce(&raised, &total, 1, MPI_INT, MPI_SUM, c->world, &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Iallreduce (abort channel)");
  sl_status st = sl__comm_wait(c, &req, "counting the aborts raised", err);
  if (st != SL_STATUS_OK)
    return st;
  int expect = total - raised;
  if (c->abort_req == MPI_REQUEST_NULL) {
    /* The posted receive already matched one message. */
    expect--;
  } else if (expect > 0) {
    st = sl__comm_wait(c, &c->abort_req, "receiving the abort messages", err);
    if (st != SL_STATUS_OK)
      return st;
    expect--;
  } else {
    MPI_Cancel(&c->abort_req);
    MPI_Wait(&c->abort_req, MPI_STATUS_IGNORE);
  }
  c->abort_req = MPI_REQUEST_NULL;
  for (int i = 0; i < expect && st == SL_STATUS_OK; i++) {
    int buf = 0;
    rc = MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, ABORT_TAG, c->abort_comm, &req);
    st = rc == MPI_SUCCESS ? sl__comm_wait(c, &req, "receiving the abort messages", err)
                           : mpi_fail(err, rc, "MPI_Irecv (abort channel)");
  }
  return st;
}

/* Waits for a non-blocking collective of group g, polled against the abort channel and the
 * watchdog. Open MPI progresses a non-blocking collective only inside MPI calls: poll without
 * sleeping, yielding the core to the reader threads between polls (a sleep here cut the broadcast
 * rate by more than ten times). */
static sl_status poll_collective(sl__comm *c, MPI_Request *req, const char *what, bool *aborted, sl__err *err) {
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
    if (c->timeout_s > 0 && waited > c->timeout_s && sl__comm_expire(c, what, waited))
      start = sl__now(); /* the job still moves: a new deadline */
    if (sl__comm_abort_check(c)) {
      sl__comm_block_end(c);
      /* Leave the request behind: a non-blocking collective cannot be cancelled or freed, and
       * its peers may never complete it. The communicator is released with the loader. */
      c->abandoned = *req;
      *aborted = true;
      return SL_STATUS_OK;
    }
    sched_yield();
  }
}

sl_status sl__comm_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                               sl__err *err) {
  *aborted = false;
  if (g >= c->n_groups || c->groups[g] == MPI_COMM_NULL)
    return sl__err_set(err, SL_STATUS_INTERNAL, "broadcast in group %u that this rank is not part of", g);
  if (nbytes > INT_MAX)
    return sl__err_set(err, SL_STATUS_INTERNAL, "broadcast of %llu bytes exceeds one message",
                       (unsigned long long)nbytes);
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, c->groups[g], &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Ibcast");
  char what[96];
  snprintf(what, sizeof what, "broadcast of %llu bytes in group %u", (unsigned long long)nbytes, g);
  return poll_collective(c, &req, what, aborted, err);
}

sl_status sl__comm_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                  const uint64_t *sdispl, void *recv, const uint64_t *rcount, const uint64_t *rdispl,
                                  bool *aborted, sl__err *err) {
  *aborted = false;
  if (g >= c->n_groups || c->groups[g] == MPI_COMM_NULL)
    return sl__err_set(err, SL_STATUS_INTERNAL, "exchange in group %u that this rank is not part of", g);
  int n = 0;
  MPI_Comm_size(c->groups[g], &n);
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
  int rc = MPI_Ialltoallv(send, ints, ints + n, MPI_BYTE, recv, ints + 2 * n, ints + 3 * n, MPI_BYTE,
                          c->groups[g], &req);
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

sl_status sl__comm_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err) {
  for (size_t off = 0; off < nbytes; off += BLOB_PIECE) {
    size_t piece = nbytes - off < BLOB_PIECE ? nbytes - off : BLOB_PIECE;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, bits + off, (int)piece, MPI_BYTE, MPI_BOR, c->world, &req);
    if (rc != MPI_SUCCESS)
      return mpi_fail(err, rc, "MPI_Iallreduce of the weight bitmaps");
    sl_status st = sl__comm_wait(c, &req, "reduction of the weight bitmaps", err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

sl_status sl__comm_gather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, sl__err *err) {
  MPI_Request req;
  int rc = MPI_Igather(rec, (int)rec_bytes, MPI_BYTE, out, (int)rec_bytes, MPI_BYTE, 0, c->world, &req);
  if (rc != MPI_SUCCESS)
    return mpi_fail(err, rc, "MPI_Igather of statistics");
  return sl__comm_wait(c, &req, "gathering statistics", err);
}

int sl__comm_local_rank(sl__comm *c) {
  MPI_Comm node;
  if (MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return 0;
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}
