/*
 * comm/comm.h — the one interface through which the library talks to other ranks. Engine, backends,
 * loader and save call only the sl__comm_* functions below; two implementations stand behind them:
 *
 *   MPI    (comm/mpi.c, comm/mpi_watchdog.c): a duplicate of the caller's MPI communicator; the CLI
 *          and sl_loader_create. Non-blocking MPI collectives polled against an abort channel and the
 *          load watchdog, which names the ranks not heard from and ends the job with MPI_Abort.
 *   caller (comm/caller.c): a table of functions the caller provides (sl_comm_ops in the public
 *          header; the Python package builds one over a torch.distributed process group). Its
 *          operations are blocking calls with a deadline; a failed or expired one makes the
 *          communicator "broken": the caller's abort hook is called once, this call and every later
 *          one return SL_STATUS_COMM with the transport's message (which names the silent ranks),
 *          and no call ever waits again. The process is never ended.
 *
 * What both share lives in comm/comm.c: the status agreement at the end of every phase, the blob
 * broadcast, the abort flags, the phase names. Pure layers (format, model, plan) never include this.
 */
#ifndef SL_COMM_H
#define SL_COMM_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One broadcast group: the world ranks that receive the same bytes, sorted. A member's position
 * in `members` is its rank in the group (MPI, NCCL and caller transports alike). `broadcasts`:
 * some bucket is broadcast in it (false for a group that only swaps column blocks in two-phase
 * exchanges, which travel through this layer in host memory: the GPU backend makes no NCCL
 * communicator for it). */
typedef struct sl__comm_group {
  uint32_t n;
  const uint32_t *members;
  bool broadcasts;
} sl__comm_group;

/* The broadcast groups of a load, numbered in the one order every rank walks: group g is
 * group[g]. The loader derives them from the schedule. */
typedef struct sl__comm_groups {
  size_t n;
  const sl__comm_group *group;
} sl__comm_groups;

typedef struct sl__comm sl__comm;

/* What an implementation provides. World operations are collective over every rank; group ones over
 * the members of group g only. Every wait is bounded by c->timeout_s (the watchdog). */
typedef struct sl__comm_impl {
  const char *name; /* "MPI" or "caller", for messages */
  /* Element-wise reduction of n ints over every rank, in place (SL__REDUCE_*). */
  sl_status (*allreduce_int)(sl__comm *c, int *vals, int n, int op, const char *what, sl__err *err);
  /* nbytes (at most 1 GiB) from root to every rank. */
  sl_status (*bcast)(sl__comm *c, void *buf, size_t nbytes, int root, const char *what, sl__err *err);
  /* One record of nbytes per rank, into out (size × nbytes), on every rank. */
  sl_status (*allgather)(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what,
                         sl__err *err);
  /* One record per rank on rank 0 (out: size × nbytes, only read on rank 0). */
  sl_status (*gather)(sl__comm *c, const void *rec, size_t nbytes, void *out, const char *what, sl__err *err);
  /* Bitwise OR of a byte array over every rank, in place. */
  sl_status (*allreduce_bor)(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err);
  sl_status (*groups_create)(sl__comm *c, const sl__comm_groups *groups, sl__err *err);
  void (*groups_free)(sl__comm *c);
  sl_status (*group_bcast)(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                           sl__err *err);
  sl_status (*group_alltoallv)(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                               const uint64_t *sdispl, void *recv, const uint64_t *rcount,
                               const uint64_t *rdispl, bool *aborted, sl__err *err);
  /* The abort channel: arm before the transfer, raise to stop every rank, poll whether another rank
   * raised (sets c->abort_from), disarm (COLLECTIVE) after it. */
  sl_status (*abort_arm)(sl__comm *c, sl__err *err);
  void (*abort_raise)(sl__comm *c);
  bool (*abort_poll)(sl__comm *c);
  sl_status (*abort_disarm)(sl__comm *c, sl__err *err);
  /* Lowest rank sharing memory with this one, or -1 when the implementation cannot tell (the job's
   * nodes are then told apart by host name). COLLECTIVE. */
  sl_status (*node_leader)(sl__comm *c, int *leader, sl__err *err);
  /* The watchdog: deadlines set, waits that poll something else, calls that cannot poll. */
  void (*set_timeout)(sl__comm *c);
  void (*poll)(sl__comm *c);
  bool (*expire)(sl__comm *c, const char *what, double waited, sl__err *err);
  void (*block_begin)(sl__comm *c, const char *what);
  void (*block_end)(sl__comm *c);
  void (*free)(sl__comm *c);
} sl__comm_impl;

enum { SL__REDUCE_MIN = 0, SL__REDUCE_SUM = 1 };

struct sl__comm {
  const sl__comm_impl *impl;
  void *state; /* the implementation's own (comm/mpi.h, comm/caller.c) */
  int rank;
  int size;
  bool armed;
  bool aborted;   /* some rank raised an abort (or we did) */
  bool raised;    /* we raised it */
  int abort_from; /* rank whose abort we saw first, or -1 */
  /* The agreement's verdict: the status of the rank that failed first (its own kind of failure, so
   * that every rank can report the same kind), -1 when no rank failed. */
  int first_failed;
  sl_status first_status;
  /* A failure outside the communicator that must stop every rank (a Hub download behind the load):
   * checked with the abort channel, it raises the abort when it returns true. NULL: none. */
  bool (*abort_hook)(void *ctx);
  void *abort_hook_ctx;
  /* Progress this rank makes outside the load's own waits and reads (a Hub download behind the
   * load): sl__now() of the latest, or 0. The watchdog counts it like last_progress. NULL: none. */
  double (*progress_hook)(void *ctx);
  void *progress_hook_ctx;
  size_t n_groups;
  int *group_rank; /* our position in each group, -1 if not a member */
  /* the watchdog */
  double timeout_s;        /* seconds any one wait may last; 0 = no watchdog */
  const char *phase;       /* what the load is doing, for the expiry message */
  const char *waiting_for; /* the wait in progress (sl__comm_block_begin), or NULL */
  double last_progress;    /* when this rank last completed a wait or read a byte */
  bool free_local;         /* sl__comm_free makes no collective call: a local release
                              (sl_loader_release_local) leaves the duplicated MPI communicators */
};

/* The MPI implementation over a duplicate of `mpi_comm` (an MPI_Comm passed as a pointer to it, so
 * that this header needs no <mpi.h>). MPI must be initialized. */
sl_status sl__comm_init_mpi(sl__comm *c, const void *mpi_comm, sl__err *err);
/* The caller's implementation (struct sl_comm_ops of the public header, checked here). */
struct sl_comm_ops;
sl_status sl__comm_init_caller(sl__comm *c, const struct sl_comm_ops *ops, sl__err *err);
void sl__comm_free(sl__comm *c);

/* Every rank returns the same verdict. A failing rank keeps its own message; the others get
 * SL_STATUS_PEER_FAILED "another rank failed: rank R: <its message>" (c->first_status holds R's own
 * status). `phase` names the step. */
sl_status sl__comm_agree(sl__comm *c, sl_status mine, sl__err *err, const char *phase);

/* Broadcasts a byte blob from root: on root *blob and *len are the input; elsewhere they receive a
 * malloc'd copy. Large blobs travel in pieces. */
sl_status sl__comm_bcast_blob(sl__comm *c, uint8_t **blob, size_t *len, int root, sl__err *err);

/* One fixed-size record per rank, on every rank (out: size × rec_bytes). */
sl_status sl__comm_allgather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, const char *what,
                             sl__err *err);
/* Element-wise minimum of n ints over every rank, in place. */
sl_status sl__comm_allreduce_min(sl__comm *c, int *vals, int n, const char *what, sl__err *err);

/* One group per broadcast group of the schedule (every rank calls it, walking the groups in the same
 * order: it cannot deadlock). */
sl_status sl__comm_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err);
/* Whether this rank is a member of group g. */
bool sl__comm_in_group(const sl__comm *c, uint32_t g);

/* Abort channel. arm: start listening (collective-free); raise: tell every rank to stop; check: has
 * anyone raised (or the abort hook fired); disarm: COLLECTIVE, after which no abort message of this
 * load is left in flight. */
sl_status sl__comm_abort_arm(sl__comm *c, sl__err *err);
void sl__comm_abort_raise(sl__comm *c);
bool sl__comm_abort_check(sl__comm *c);
sl_status sl__comm_abort_disarm(sl__comm *c, sl__err *err);

/* Broadcast of nbytes (at most 1 GiB) inside group g (root = position within the group), waited for
 * against the abort channel: *aborted is set (and OK returned) when an abort arrived first; the
 * caller stops the load. */
sl_status sl__comm_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                               sl__err *err);

/* All-to-all of bytes inside group g: member r receives scount[r] bytes from send + sdispl[r];
 * rcount/rdispl place what each member sends here (the two-phase exchanges of engine/exchange.c).
 * Blocks up to INT_MAX bytes. */
sl_status sl__comm_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                   const uint64_t *sdispl, void *recv, const uint64_t *rcount,
                                   const uint64_t *rdispl, bool *aborted, sl__err *err);

/* ---- the watchdog ---- */
#define SL_TIMEOUT_DEFAULT_S 600.0
/* Sets the deadline of every later wait (0 turns the MPI watchdog off; the caller's transport gets
 * it with each call). */
void sl__comm_set_timeout(sl__comm *c, double seconds);
/* Names what the load is doing now ("loading", "tracking weights"): the expiry message says it. */
void sl__comm_phase(sl__comm *c, const char *phase);
/* For waits that poll something else (reader threads, NCCL): answers other ranks' alive queries
 * (MPI) or lets the caller's transport show that this rank lives (its poll hook). Cheap. */
void sl__comm_poll(sl__comm *c);
/* A wait that polls something else (this rank's reads) passed its deadline after `waited` seconds.
 * True: the job still moves, wait on with a new deadline. False: the wait fails (err says why; the
 * caller's communicator is broken). With MPI a stuck job never returns: the watchdog reports and
 * ends it with MPI_Abort (comm/mpi_watchdog.c). */
bool sl__comm_expire(sl__comm *c, const char *what, double waited, sl__err *err);
/* Notes that this rank made progress (a wait completed, bytes were read). */
void sl__comm_progress(sl__comm *c);
/* Brackets a call that cannot poll (communicator creation, joining threads): with MPI, if it lasts
 * longer than timeout_s plus the reporting grace, a backstop thread reports and calls MPI_Abort. */
/* A communicator with nothing set: no rank failed, no abort heard (the start of both inits). */
void sl__comm_reset(sl__comm *c);
void sl__comm_block_begin(sl__comm *c, const char *what);
void sl__comm_block_end(sl__comm *c);

/* Bitwise-OR allreduce of a byte array. */
sl_status sl__comm_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err);
/* Gathers one fixed-size record per rank on rank 0 (out: size × rec_bytes, only on rank 0). */
sl_status sl__comm_gather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, sl__err *err);
/* The lowest rank sharing memory with this one, or -1 when the communicator cannot tell (ranks are
 * then on one node when their host names are equal). COLLECTIVE. */
sl_status sl__comm_node_leader(sl__comm *c, int *leader, sl__err *err);
/* Node-local rank (ranks on our node below us), for picking a GPU. COLLECTIVE. */
int sl__comm_local_rank(sl__comm *c);

#endif
