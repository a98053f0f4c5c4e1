/*
 * engine/comm.h — everything MPI: the loader's duplicated communicator, status agreement at the end of
 * every phase, blob broadcast, the broadcast-group communicators of the schedule, bitmap
 * reductions, statistics gathering, and an abort channel so that a rank that fails mid-load
 * makes every other rank stop waiting (non-blocking broadcasts polled against it) instead of
 * hanging; and the load watchdog (engine/watchdog.c): every wait of a load has a deadline
 * (timeout_s), and a rank whose deadline passes asks every rank whether it is alive and when it
 * last made progress; a job that still moves (a slow link, slow storage) is waited for, otherwise
 * every rank prints the phase and the ranks it has not heard from, and the job ends with MPI_Abort
 * on the load's communicator (the one place where the library calls it: a peer that died or
 * stopped can never be waited out).
 */
#ifndef SL_COMM_H
#define SL_COMM_H

#include "base/err.h"

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One broadcast group: the world ranks that receive the same bytes, sorted. A member's position
 * in `members` is its rank in the group's communicators (MPI and NCCL). */
typedef struct sl__comm_group {
  uint32_t n;
  const uint32_t *members;
} sl__comm_group;

/* The broadcast groups of a load, numbered in the one order every rank walks: group g is
 * group[g]. The loader derives them from the schedule. */
typedef struct sl__comm_groups {
  size_t n;
  const sl__comm_group *group;
} sl__comm_groups;

typedef struct sl__comm {
  MPI_Comm world; /* duplicate of the caller's communicator, errors returned */
  int rank;
  int size;
  MPI_Comm abort_comm;   /* abort messages travel here */
  MPI_Request abort_req; /* posted receive of an abort message */
  int abort_buf;
  int abort_one; /* send buffer of abort messages (must outlive the sends) */
  bool armed;
  bool aborted;   /* some rank raised an abort (or we did) */
  bool raised;    /* we raised it */
  int abort_from; /* rank whose abort we saw first, or -1 */
  /* A failure outside MPI that must stop every rank (a Hub download behind the load): checked
   * with the abort channel, it raises the abort when it returns true. NULL: none. */
  bool (*abort_hook)(void *ctx);
  void *abort_hook_ctx;
  /* Progress this rank makes outside the load's own waits and reads (a Hub download behind the
   * load): sl__now() of the latest, or 0. The watchdog counts it like last_progress. NULL: none. */
  double (*progress_hook)(void *ctx);
  void *progress_hook_ctx;
  size_t n_groups;
  MPI_Comm *groups;      /* per broadcast group: its communicator, MPI_COMM_NULL if not a member */
  int *group_rank;       /* our rank in each group, -1 if not a member */
  MPI_Request abandoned; /* a broadcast left unfinished by an abort (never waited for) */
  /* the watchdog (engine/watchdog.c) */
  double timeout_s;              /* seconds any one wait may last; 0 = no watchdog */
  const char *phase;             /* what the load is doing, for the expiry message */
  const char *waiting_for;       /* the wait in progress (sl__comm_block_begin), or NULL */
  double next_probe;             /* when waits next look for other ranks' alive queries */
  double last_poll;              /* the last poll of the wait in progress (0: none yet) */
  double self_stalled;           /* longest gap between two polls: this rank itself not running */
  double last_progress;          /* when this rank last completed a wait or read a byte */
  struct sl__backstop *backstop; /* thread that ends blocking calls which overrun */
} sl__comm;

sl_status sl__comm_init(sl__comm *c, MPI_Comm user, sl__err *err);
void sl__comm_free(sl__comm *c);

/* Every rank returns the same verdict. A failing rank keeps its own message; the others get
 * SL_STATUS_PEER_FAILED "another rank failed: rank R: <its message>". `phase` names the step. */
sl_status sl__comm_agree(sl__comm *c, sl_status mine, sl__err *err, const char *phase);

/* Broadcasts a byte blob from root: on root *blob and *len are the input; elsewhere they receive a
 * malloc'd copy. Sizes above INT_MAX travel in pieces. */
sl_status sl__comm_bcast_blob(sl__comm *c, uint8_t **blob, size_t *len, int root, sl__err *err);

/* Creates one communicator per broadcast group (every rank calls it; creation follows the groups'
 * order, the same on every rank, so it cannot deadlock). */
sl_status sl__comm_groups_create(sl__comm *c, const sl__comm_groups *groups, sl__err *err);

/* Abort channel. arm: post the receive (collective-free); raise: tell every rank to stop;
 * check: has anyone raised; disarm: COLLECTIVE, drains every abort message and cancels the
 * pending receive. */
sl_status sl__comm_abort_arm(sl__comm *c, sl__err *err);
void sl__comm_abort_raise(sl__comm *c);
bool sl__comm_abort_check(sl__comm *c);
sl_status sl__comm_abort_disarm(sl__comm *c, sl__err *err);

/* Broadcast of nbytes host bytes inside group g (root = rank within the group), as a
 * non-blocking operation polled against the abort channel. *aborted is set (and OK returned)
 * when an abort arrived before completion: the caller stops the load. */
sl_status sl__comm_group_bcast(sl__comm *c, uint32_t g, void *buf, uint64_t nbytes, int root, bool *aborted,
                               sl__err *err);

/* All-to-all of bytes inside group g (a non-blocking MPI_Ialltoallv polled like a broadcast):
 * member r receives scount[r] bytes from send + sdispl[r]; rcount/rdispl place what each member
 * sends here (the two-phase exchanges of engine/exchange.c). Blocks up to INT_MAX bytes. */
sl_status sl__comm_group_alltoallv(sl__comm *c, uint32_t g, const void *send, const uint64_t *scount,
                                  const uint64_t *sdispl, void *recv, const uint64_t *rcount, const uint64_t *rdispl,
                                  bool *aborted, sl__err *err);

/* ---- the watchdog (engine/watchdog.c) ---- */
#define SL_TIMEOUT_DEFAULT_S 600.0
/* Sets the deadline of every later wait (0 turns the watchdog off) and starts the backstop thread. */
void sl__comm_set_timeout(sl__comm *c, double seconds);
/* Names what the load is doing now ("loading", "tracking weights"): the expiry message says it. */
void sl__comm_phase(sl__comm *c, const char *phase);
/* Waits for a non-blocking MPI request, polling it (and other ranks' alive queries) until the
 * deadline; past it the watchdog fires (see sl__comm_expire). `what` names the operation. */
sl_status sl__comm_wait(sl__comm *c, MPI_Request *req, const char *what, sl__err *err);
/* For waits that poll something else (reader threads, NCCL): answers other ranks' alive queries;
 * a peer that decided to end the job makes this rank report too (it does not return then). Cheap:
 * a probe at most every few milliseconds. */
void sl__comm_poll(sl__comm *c);
/* Notes that this rank made progress (a wait completed, bytes were read): alive queries report
 * the time since. */
void sl__comm_progress(sl__comm *c);
/* The watchdog fires: `what` has not finished within `waited` seconds. Asks every rank whether it is
 * alive and how long ago it made progress. Returns true when every rank answered and one of them
 * progressed within timeout_s (the job is slow, not stuck: the caller starts a new deadline).
 * Otherwise every rank prints the phase and the ranks not heard from on stderr, and the job ends
 * with MPI_Abort on the load's communicator (returns false only if MPI_Abort returns, never with
 * Open MPI or MPICH). */
bool sl__comm_expire(sl__comm *c, const char *what, double waited);
/* Brackets a call that cannot poll (communicator creation, joining threads): if it lasts longer
 * than timeout_s plus the reporting grace, the backstop thread reports and calls MPI_Abort. */
void sl__comm_block_begin(sl__comm *c, const char *what);
void sl__comm_block_end(sl__comm *c);
/* Stops the backstop thread (sl__comm_free calls it). */
void sl__comm_watchdog_free(sl__comm *c);

/* Bitwise-OR allreduce of a byte array. */
sl_status sl__comm_allreduce_bor(sl__comm *c, uint8_t *bits, size_t nbytes, sl__err *err);
/* Gathers one fixed-size record per rank on rank 0 (out: size × rec_bytes, only on rank 0). */
sl_status sl__comm_gather(sl__comm *c, const void *rec, size_t rec_bytes, void *out, sl__err *err);
/* Node-local rank (ranks sharing memory with us), for picking a GPU. */
int sl__comm_local_rank(sl__comm *c);

#endif
