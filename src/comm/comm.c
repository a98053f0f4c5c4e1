/*
 * comm/comm.c — what the communicator's implementations share (see comm/comm.h): the agreement at
 * the end of every phase and the blob broadcast, written once over the implementation's small
 * reduction and broadcast; the abort flags; the thin dispatch of everything else.
 */
#include "comm/comm.h"

#include "base/clock.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOB_PIECE ((size_t)1 << 30)

void sl__comm_free(sl__comm *c) {
  if (c == NULL || c->impl == NULL)
    return;
  if (c->impl->groups_free != NULL)
    c->impl->groups_free(c);
  free(c->group_rank);
  c->group_rank = NULL;
  c->n_groups = 0;
  c->impl->free(c);
  c->impl = NULL;
}

sl_status sl__comm_agree(sl__comm *c, sl_status mine, sl__err *err, const char *phase) {
  /* The first rank that failed by itself wins; a rank that only stopped because another failed
   * (PEER_FAILED: it saw an abort) takes that rank's message, so every rank names the cause. */
  int firsts[2] = {mine != SL_STATUS_OK && mine != SL_STATUS_PEER_FAILED ? c->rank : c->size,
                   mine != SL_STATUS_OK ? c->rank : c->size};
  if (phase != NULL)
    c->phase = phase;
  c->first_failed = -1;
  c->first_status = SL_STATUS_OK;
  sl_status st = c->impl->allreduce_int(c, firsts, 2, SL__REDUCE_MIN, "status agreement", err);
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
  st = c->impl->bcast(c, &payload, sizeof payload, first, "status agreement (the failing rank's message)",
                      err);
  if (st != SL_STATUS_OK)
    return st;
  c->first_failed = first;
  c->first_status =
      payload.status > 0 && payload.status < SL_STATUS_COUNT ? (sl_status)payload.status : SL_STATUS_INTERNAL;
  if (mine != SL_STATUS_OK && (mine != SL_STATUS_PEER_FAILED || c->rank == first))
    return mine;
  payload.msg[sizeof payload.msg - 1] = '\0';
  if (err != NULL)
    sl__err_clear(err);
  return sl__err_set(err, SL_STATUS_PEER_FAILED, "another rank failed%s%s: rank %d: %s",
                     phase != NULL ? " while " : "", phase != NULL ? phase : "", first, payload.msg);
}

sl_status sl__comm_bcast_blob(sl__comm *c, uint8_t **blob, size_t *len, int root, sl__err *err) {
  uint64_t n = c->rank == root ? (uint64_t)*len : 0;
  sl_status st = c->impl->bcast(c, &n, sizeof n, root, "broadcast of a blob size", err);
  if (st != SL_STATUS_OK)
    return st;
  uint8_t *buf = c->rank == root ? *blob : malloc(n > 0 ? (size_t)n : 1);
  /* Every rank must take part in the data broadcast even if its allocation failed: it receives
   * into a bounded scratch buffer to stay in step. */
  bool oom = buf == NULL;
  for (uint64_t off = 0; off < n && st == SL_STATUS_OK; off += BLOB_PIECE) {
    size_t piece = n - off < BLOB_PIECE ? (size_t)(n - off) : BLOB_PIECE;
    if (oom) {
      uint8_t *scratch = malloc(piece);
      if (scratch == NULL)
        return sl__err_set(err, SL_STATUS_NOMEM, "out of memory receiving %llu bytes", (unsigned long long)n);
      st = c->impl->bcast(c, scratch, piece, root, "broadcast of a blob", err);
      free(scratch);
    } else {
      st = c->impl->bcast(c, buf + off, piece, root, "broadcast of a blob", err);
    }
  }
  if (st != SL_STATUS_OK) {
    if (c->rank != root)
      free(buf);
    return st;
  }
  if (oom)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory receiving %llu bytes", (unsigned long long)n);
  if (c->rank != root) {
    *blob = buf;
    *len = (size_t)n;
  }
  return SL_STATUS_OK;
}

sl_status sl__comm_allgather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, const char *what,
                             sl__err *err) {
  return c->impl->allgather(c, rec, rec_bytes, out, what, err);
}

sl_status sl__comm_allreduce_min(sl__comm *c, int *vals, int n, const char *what, sl__err *err) {
  return c->impl->allreduce_int(c, vals, n, SL__REDUCE_MIN, what, err);
}

sl_status sl__comm_gather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, sl__err *err) {
  return c->impl->gather(c, rec, rec_bytes, out, "gathering statistics", err);
}

sl_status sl__comm_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err) {
  return c->impl->allreduce_bor(c, bits, nbytes, err);
}

sl_status sl__comm_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err) {
  if (c->impl->groups_free != NULL)
    c->impl->groups_free(c);
  free(c->group_rank);
  c->n_groups = 0;
  c->group_rank = calloc(groups->n + 1, sizeof *c->group_rank);
  if (c->group_rank == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  for (size_t g = 0; g < groups->n; g++) {
    c->group_rank[g] = -1;
    for (uint32_t j = 0; j < groups->group[g].n; j++)
      if ((int)groups->group[g].members[j] == c->rank)
        c->group_rank[g] = (int)j;
  }
  c->n_groups = groups->n;
  return c->impl->groups_create(c, groups, err);
}

bool sl__comm_in_group(const sl__comm *c, uint32_t g) {
  return g < c->n_groups && c->group_rank[g] >= 0;
}

sl_status sl__comm_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                               sl__err *err) {
  *aborted = false;
  if (!sl__comm_in_group(c, g))
    return sl__err_set(err, SL_STATUS_INTERNAL, "broadcast in group %u that this rank is not part of", g);
  if (nbytes > BLOB_PIECE)
    return sl__err_set(err, SL_STATUS_INTERNAL, "broadcast of %llu bytes exceeds one message",
                       (unsigned long long)nbytes);
  return c->impl->group_bcast(c, g, buf, nbytes, root, aborted, err);
}

sl_status sl__comm_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                   const uint64_t *sdispl, void *recv, const uint64_t *rcount,
                                   const uint64_t *rdispl, bool *aborted, sl__err *err) {
  *aborted = false;
  if (!sl__comm_in_group(c, g))
    return sl__err_set(err, SL_STATUS_INTERNAL, "exchange in group %u that this rank is not part of", g);
  return c->impl->group_alltoallv(c, g, send, scount, sdispl, recv, rcount, rdispl, aborted, err);
}

sl_status sl__comm_abort_arm(sl__comm *c, sl__err *err) {
  c->aborted = false;
  c->raised = false;
  c->abort_from = -1;
  sl_status st = c->impl->abort_arm(c, err);
  c->armed = st == SL_STATUS_OK;
  return st;
}

void sl__comm_abort_raise(sl__comm *c) {
  if (!c->armed || c->raised)
    return;
  c->raised = true;
  c->aborted = true;
  if (c->abort_from < 0)
    c->abort_from = c->rank;
  c->impl->abort_raise(c);
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
  if (c->impl->abort_poll(c))
    c->aborted = true;
  return c->aborted;
}

sl_status sl__comm_abort_disarm(sl__comm *c, sl__err *err) {
  if (!c->armed)
    return SL_STATUS_OK;
  c->armed = false;
  return c->impl->abort_disarm(c, err);
}

void sl__comm_set_timeout(sl__comm *c, double seconds) {
  c->timeout_s = seconds > 0 ? seconds : 0;
  c->last_progress = sl__now();
  c->impl->set_timeout(c);
}

void sl__comm_phase(sl__comm *c, const char *phase) {
  c->phase = phase;
}

void sl__comm_poll(sl__comm *c) {
  c->impl->poll(c);
}

bool sl__comm_expire(sl__comm *c, const char *what, double waited, sl__err *err) {
  return c->impl->expire(c, what, waited, err);
}

void sl__comm_progress(sl__comm *c) {
  c->last_progress = sl__now();
}

void sl__comm_block_begin(sl__comm *c, const char *what) {
  c->waiting_for = what;
  c->impl->block_begin(c, what);
}

void sl__comm_block_end(sl__comm *c) {
  c->waiting_for = NULL;
  c->impl->block_end(c);
}

sl_status sl__comm_node_leader(sl__comm *c, int *leader, sl__err *err) {
  return c->impl->node_leader(c, leader, err);
}

/* Host names of every rank (allgather): ranks of one node below this one count. Where the
 * implementation knows shared memory (MPI), its node leader decides instead of the name. */
int sl__comm_local_rank(sl__comm *c) {
  typedef struct {
    int leader;
    char host[64];
  } who;
  who me = {.leader = -1};
  sl__err err;
  sl__err_clear(&err);
  if (c->impl->node_leader(c, &me.leader, &err) != SL_STATUS_OK)
    return 0;
  if (gethostname(me.host, sizeof me.host - 1) != 0)
    snprintf(me.host, sizeof me.host, "?");
  /* A few dozen bytes per rank; without them this rank cannot take part (and the others' gather
   * ends at the watchdog's deadline). */
  who *all = calloc((size_t)c->size, sizeof *all);
  if (all == NULL)
    return 0;
  int local = 0;
  if (c->impl->allgather(c, &me, sizeof me, all, "finding the ranks of this node", &err) == SL_STATUS_OK)
    for (int r = 0; r < c->rank; r++)
      local +=
          me.leader >= 0 ? all[r].leader == me.leader : strncmp(all[r].host, me.host, sizeof me.host) == 0;
  free(all);
  return local;
}

void sl__comm_reset(sl__comm *c) {
  memset(c, 0, sizeof *c);
  c->abort_from = -1;
  c->first_failed = -1;
}
