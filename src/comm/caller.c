/*
 * comm/caller.c — the communicator over functions the caller provides (sl_comm_ops, public header;
 * see comm/comm.h). The caller's functions block and keep their own deadlines, so this side only
 * translates: world operations to member lists, the abort channel to stop epochs, results to
 * statuses. The first call that fails or expires breaks the communicator: its message is kept, the
 * caller's abort hook hears it once, and every later call returns it at once instead of waiting
 * for a peer that is gone. Nothing here ends the process or calls MPI.
 */
#include "comm/comm.h"

#include "base/clock.h"
#include "base/util.h"
#include "shardload/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_CAP 512
/* Large reductions of bitmaps travel as allgathers of at most this many bytes per rank and call. */
#define BOR_PIECE_TOTAL ((size_t)64 << 20)
/* The caller's stop_check and poll are calls into its transport (a Python function, a store): not
 * on every turn of a polling loop. */
#define STOP_CHECK_EVERY_S 0.002
#define POLL_EVERY_S 0.05

typedef struct caller_state {
  sl_comm_ops ops;
  bool broken;
  char broken_msg[SL_ERR_MSG_MAX];
  int **members;  /* per group: its member ranks as ints (NULL where this rank is not a member) */
  int *n_members; /* per group */
  size_t n_groups;
  uint64_t epoch; /* the current transfer's stop epoch (0 before the first) */
  double next_stop_check;
  double next_poll;
} caller_state;

static caller_state *state_of(const sl__comm *c) {
  return (caller_state *)c->state;
}

/* The communicator failed earlier: no call waits again. */
static sl_status refuse(sl__comm *c, sl__err *err) {
  return sl__err_set(err, SL_STATUS_COMM, "%s", state_of(c)->broken_msg);
}

/* The status of one call of the caller's functions. STOPPED is told apart by the callers. */
static sl_status result(sl__comm *c, int rc, const char *what, char *msg, sl__err *err) {
  caller_state *s = state_of(c);
  msg[MSG_CAP - 1] = '\0';
  if (rc == SL_COMM_OK || rc == SL_COMM_STOPPED) {
    sl__comm_progress(c);
    return SL_STATUS_OK;
  }
  const char *kind = rc == SL_COMM_TIMEOUT ? "did not finish within the deadline" : "failed";
  snprintf(s->broken_msg, sizeof s->broken_msg, "%s %s (rank %d of %d, while %s): %s", what, kind, c->rank,
           c->size, c->phase != NULL ? c->phase : "loading",
           msg[0] != '\0'                                 ? msg
           : rc == SL_COMM_TIMEOUT || rc == SL_COMM_ERROR ? "the transport gave no reason"
                                                          : "the transport returned an unknown result");
  s->broken = true;
  if (s->ops.abort != NULL)
    s->ops.abort(s->ops.ctx, s->broken_msg);
  return refuse(c, err);
}

static sl_status caller_allreduce_int(sl__comm *c, int *vals, int n, int op, const char *what, sl__err *err) {
  caller_state *s = state_of(c);
  if (s->broken)
    return refuse(c, err);
  int64_t wide[8];
  if (n > 8)
    return sl__err_set(err, SL_STATUS_INTERNAL, "reduction of %d values (at most 8)", n);
  for (int i = 0; i < n; i++)
    wide[i] = vals[i];
  char msg[MSG_CAP] = "";
  int rc = s->ops.allreduce(s->ops.ctx, wide, n, op == SL__REDUCE_MIN ? SL_COMM_MIN : SL_COMM_SUM,
                            c->timeout_s, msg, sizeof msg);
  sl_status st = result(c, rc, what, msg, err);
  for (int i = 0; i < n && st == SL_STATUS_OK; i++)
    vals[i] = (int)wide[i];
  return st;
}

static sl_status caller_bcast(sl__comm *c, void *buf, size_t nbytes, int root, const char *what,
                              sl__err *err) {
  caller_state *s = state_of(c);
  if (s->broken)
    return refuse(c, err);
  char msg[MSG_CAP] = "";
  int rc = s->ops.broadcast(s->ops.ctx, NULL, c->size, root, buf, nbytes, 0, c->timeout_s, msg, sizeof msg);
  return result(c, rc, what, msg, err);
}

static sl_status caller_allgather(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what,
                                  sl__err *err) {
  caller_state *s = state_of(c);
  if (s->broken)
    return refuse(c, err);
  char msg[MSG_CAP] = "";
  int rc = s->ops.allgather(s->ops.ctx, rec, nbytes, out, c->timeout_s, msg, sizeof msg);
  return result(c, rc, what, msg, err);
}

/* Records are small (statistics): an allgather, kept on rank 0 only. */
static sl_status caller_gather(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what,
                               sl__err *err) {
  uint8_t *all = c->rank == 0 ? out : calloc((size_t)c->size, nbytes > 0 ? nbytes : 1);
  if (all == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory while %s", what);
  sl_status st = caller_allgather(c, rec, nbytes, all, what, err);
  if (c->rank != 0)
    free(all);
  return st;
}

/* Weight bitmaps are a bit per tensor: gathered in pieces and OR-ed here. */
static sl_status caller_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err) {
  size_t per = BOR_PIECE_TOTAL / (size_t)c->size;
  per = per > 0 ? per : 1;
  uint8_t *all = malloc((size_t)c->size * (nbytes < per ? (nbytes > 0 ? nbytes : 1) : per));
  if (all == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reducing the weight bitmaps");
  sl_status st = SL_STATUS_OK;
  for (size_t off = 0; off < nbytes && st == SL_STATUS_OK; off += per) {
    size_t piece = nbytes - off < per ? nbytes - off : per;
    st = caller_allgather(c, bits + off, piece, all, "reduction of the weight bitmaps", err);
    for (int r = 0; r < c->size && st == SL_STATUS_OK; r++)
      for (size_t i = 0; i < piece; i++)
        bits[off + i] |= all[(size_t)r * piece + i];
  }
  free(all);
  return st;
}

static void caller_groups_free(sl__comm *c) {
  caller_state *s = state_of(c);
  for (size_t g = 0; g < s->n_groups; g++)
    free(s->members[g]);
  free(s->members);
  free(s->n_members);
  s->members = NULL;
  s->n_members = NULL;
  s->n_groups = 0;
}

/* Groups are member lists: nothing to agree on, no call to the transport. */
static sl_status caller_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err) {
  caller_state *s = state_of(c);
  s->members = calloc(groups->n + 1, sizeof *s->members);
  s->n_members = calloc(groups->n + 1, sizeof *s->n_members);
  if (s->members == NULL || s->n_members == NULL) {
    caller_groups_free(c);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  }
  s->n_groups = groups->n;
  for (size_t g = 0; g < groups->n; g++) {
    const sl__comm_group *gr = &groups->group[g];
    s->n_members[g] = (int)gr->n;
    if (c->group_rank[g] < 0)
      continue;
    s->members[g] = malloc(gr->n * sizeof **s->members);
    if (s->members[g] == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
    for (uint32_t j = 0; j < gr->n; j++)
      s->members[g][j] = (int)gr->members[j];
  }
  return SL_STATUS_OK;
}

/* A stopped call: which rank stopped the transfer (for the messages), and the abort flags — the
 * communicator's too, so that sl__comm_abort_check agrees with *aborted at once (as with MPI,
 * where *aborted comes from it) instead of after the next stop_check. */
static void stopped(sl__comm *c, bool *aborted) {
  caller_state *s = state_of(c);
  int from = -1;
  if (s->ops.stop_check(s->ops.ctx, s->epoch, &from) && from >= 0 && c->abort_from < 0)
    c->abort_from = from;
  c->aborted = true;
  *aborted = true;
}

/* Before a group call: a broken communicator refuses it, a raised stop skips it (*aborted). */
static bool group_call_skipped(sl__comm *c, bool *aborted, sl__err *err, sl_status *status) {
  if (state_of(c)->broken) {
    *status = refuse(c, err);
    return true;
  }
  if (sl__comm_abort_check(c)) {
    *aborted = true;
    *status = SL_STATUS_OK;
    return true;
  }
  return false;
}

static sl_status caller_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root,
                                    bool *aborted, sl__err *err) {
  caller_state *s = state_of(c);
  sl_status skipped;
  if (group_call_skipped(c, aborted, err, &skipped))
    return skipped;
  char msg[MSG_CAP] = "";
  char what[96];
  snprintf(what, sizeof what, "broadcast of %llu bytes in group %u", (unsigned long long)nbytes, g);
  int rc = s->ops.broadcast(s->ops.ctx, s->members[g], s->n_members[g], root, buf, nbytes,
                            c->armed ? s->epoch : 0, c->timeout_s, msg, sizeof msg);
  if (rc == SL_COMM_STOPPED)
    stopped(c, aborted);
  return result(c, rc, what, msg, err);
}

static sl_status caller_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                        const uint64_t *sdispl, void *recv, const uint64_t *rcount,
                                        const uint64_t *rdispl, bool *aborted, sl__err *err) {
  caller_state *s = state_of(c);
  sl_status skipped;
  if (group_call_skipped(c, aborted, err, &skipped))
    return skipped;
  char msg[MSG_CAP] = "";
  char what[96];
  snprintf(what, sizeof what, "two-phase exchange in group %u", g);
  int rc = s->ops.alltoallv(s->ops.ctx, s->members[g], s->n_members[g], send, scount, sdispl, recv, rcount,
                            rdispl, c->armed ? s->epoch : 0, c->timeout_s, msg, sizeof msg);
  if (rc == SL_COMM_STOPPED)
    stopped(c, aborted);
  return result(c, rc, what, msg, err);
}

/* Every transfer has its own stop epoch, the same on every rank (transfers are collective): a stop
 * left over from an earlier transfer cannot stop this one, so there is nothing to drain. */
static sl_status caller_abort_arm(sl__comm *c, sl__err *err) {
  caller_state *s = state_of(c);
  if (s->broken)
    return refuse(c, err);
  s->epoch++;
  s->next_stop_check = 0;
  return SL_STATUS_OK;
}

static void caller_abort_raise(sl__comm *c) {
  caller_state *s = state_of(c);
  s->ops.stop_raise(s->ops.ctx, s->epoch);
}

static bool caller_abort_poll(sl__comm *c) {
  caller_state *s = state_of(c);
  double now = sl__now();
  if (s->broken)
    return true;
  if (now < s->next_stop_check)
    return false;
  s->next_stop_check = now + STOP_CHECK_EVERY_S;
  int from = -1;
  if (!s->ops.stop_check(s->ops.ctx, s->epoch, &from))
    return false;
  c->abort_from = from;
  return true;
}

static sl_status caller_abort_disarm(sl__comm *c, sl__err *err) {
  (void)c;
  (void)err;
  return SL_STATUS_OK;
}

static sl_status caller_node_leader(sl__comm *c, int *leader, sl__err *err) {
  (void)err;
  *leader = -1; /* shared memory is unknown here: host names decide */
  return state_of(c)->broken ? refuse(c, err) : SL_STATUS_OK;
}

static void caller_set_timeout(sl__comm *c) {
  (void)c; /* every call carries c->timeout_s */
}

static void caller_poll(sl__comm *c) {
  caller_state *s = state_of(c);
  if (s->ops.poll == NULL)
    return;
  double now = sl__now();
  if (now < s->next_poll)
    return;
  s->next_poll = now + POLL_EVERY_S;
  double last = c->last_progress;
  double other = c->progress_hook != NULL ? c->progress_hook(c->progress_hook_ctx) : 0;
  last = other > last ? other : last;
  s->ops.poll(s->ops.ctx, last > 0 ? now - last : 0);
}

/* This rank's own reads stalled past the deadline: no other rank can be asked here, and the wait
 * cannot go on for ever, so the communicator breaks (every rank hears of it through the abort hook
 * and its next call). */
static bool caller_expire(sl__comm *c, const char *what, double waited, sl__err *err) {
  caller_state *s = state_of(c);
  if (!s->broken) {
    snprintf(s->broken_msg, sizeof s->broken_msg,
             "rank %d: %s: no progress for %.1f s (timeout_s %g) while %s", c->rank, what, waited,
             c->timeout_s, c->phase != NULL ? c->phase : "loading");
    s->broken = true;
    if (s->ops.abort != NULL)
      s->ops.abort(s->ops.ctx, s->broken_msg);
  }
  refuse(c, err);
  return false;
}

static void caller_block(sl__comm *c, const char *what) {
  (void)c;
  (void)what;
}

static void caller_block_end(sl__comm *c) {
  (void)c;
}

static void caller_free(sl__comm *c) {
  free(c->state);
  c->state = NULL;
}

static const sl__comm_impl caller_impl = {
    .name = "caller",
    .allreduce_int = caller_allreduce_int,
    .bcast = caller_bcast,
    .allgather = caller_allgather,
    .gather = caller_gather,
    .allreduce_bor = caller_allreduce_bor,
    .groups_create = caller_groups_create,
    .groups_free = caller_groups_free,
    .group_bcast = caller_group_bcast,
    .group_alltoallv = caller_group_alltoallv,
    .abort_arm = caller_abort_arm,
    .abort_raise = caller_abort_raise,
    .abort_poll = caller_abort_poll,
    .abort_disarm = caller_abort_disarm,
    .node_leader = caller_node_leader,
    .set_timeout = caller_set_timeout,
    .poll = caller_poll,
    .expire = caller_expire,
    .block_begin = caller_block,
    .block_end = caller_block_end,
    .free = caller_free,
};

sl_status sl__comm_init_caller(sl__comm *c, const sl_comm_ops *ops, sl__err *err) {
  sl__comm_reset(c);
  if (ops == NULL)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_create_ops: no communication functions (ops is NULL)");
  if (ops->version != SL_COMM_OPS_VERSION)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_create_ops: ops.version is %u, this library takes %u (SL_COMM_OPS_VERSION)",
                       ops->version, (unsigned)SL_COMM_OPS_VERSION);
  if (ops->size < 1 || ops->rank < 0 || ops->rank >= ops->size)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_create_ops: rank %d of size %d (need size >= 1 and 0 <= rank < size)",
                       ops->rank, ops->size);
  const char *missing = ops->broadcast == NULL    ? "broadcast"
                        : ops->allgather == NULL  ? "allgather"
                        : ops->alltoallv == NULL  ? "alltoallv"
                        : ops->allreduce == NULL  ? "allreduce"
                        : ops->stop_raise == NULL ? "stop_raise"
                        : ops->stop_check == NULL ? "stop_check"
                                                  : NULL;
  if (missing != NULL)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "sl_loader_create_ops: ops.%s is NULL (required)",
                       missing);
  caller_state *s = calloc(1, sizeof *s);
  if (s == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating the communicator");
  s->ops = *ops;
  c->rank = ops->rank;
  c->size = ops->size;
  c->impl = &caller_impl;
  c->state = s;
  return SL_STATUS_OK;
}
