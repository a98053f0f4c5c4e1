/*
 * test_comm_caller.c — the communicator over the caller's functions (comm/caller.c, sl_comm_ops of
 * the public header) and the shared parts of comm/comm.c, over a fake transport: N ranks (1 to 4)
 * are N threads of this process meeting in shared memory. The test never initialises MPI.
 *
 *   the fake      every collective call is a rendezvous: each member posts its buffers, waits until
 *                 every member has arrived, copies what it receives from the others' posts, and all
 *                 leave together. Calls are matched by (member set, stop epoch, call number within
 *                 them), so a transfer abandoned by a stop leaves nothing a later epoch could match.
 *                 Waits keep the fake's own deadline (the call's timeout_s) and end with
 *                 SL_COMM_STOPPED when the call's stop epoch was raised. Fault: "rank R never
 *                 arrives at its collective call K" (it hangs until the test ends, or drops out with
 *                 an error). Every call is counted per rank, checked against the other ranks' (same
 *                 kind, root, sizes, counts) and for coming from that rank's own thread.
 *   agreement     all OK; each rank failing alone (its own status and message there, PEER_FAILED
 *                 "another rank failed while <phase>: rank R: <msg>" elsewhere, first_failed and
 *                 first_status on every rank); a rank that only saw an abort loses to a real failure.
 *   collectives   blobs of 0, 1, 3 bytes and 1 MiB from several roots, allgather, MIN and SUM
 *                 reductions, a bitwise-OR reduction, gather on rank 0, the node-local rank.
 *   groups        overlapping broadcast groups: membership, a broadcast in each from a non-zero root,
 *                 an all-to-all in each with data computed from (group, source, destination, index).
 *   abort         arm, raise on one rank, seen by polling on the others; a raise while the others
 *                 wait inside the transport (STOPPED: OK with *aborted); a later epoch is not stopped
 *                 by the earlier raises; the abort hook of comm.c raises for its rank.
 *   deadline      a rank that never arrives (hanging or dropping out) at an agreement's reduction or
 *                 at its broadcast: SL_STATUS_COMM on the others naming the silent rank and the
 *                 phase, the caller's abort hook called once with that message, every later call
 *                 refused at once without a call to the transport; sl__comm_expire breaks it too.
 *   table         sl__comm_init_caller and sl_loader_create_ops refuse NULL ops, a wrong version, a
 *                 rank out of range and each missing required function, naming the field.
 *   loader        sl_loader_create_ops at 2 threads, tp 2, on the llama fixture: replicated, QKV,
 *                 merged and row-parallel parameters against the bytes of the safetensors files,
 *                 every transport call from the rank's own thread, MPI never initialised. The two
 *                 loaders plan and load at the same time, as workers in one process do.
 */
#include "check.h"

#include "base/log.h"
#include "comm/comm.h"
#include "shardload/core.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 4
#define MAX_SLOTS 64
#define MAX_EPOCHS 1024
#define MAX_REDUCE 64
#define SHORT_TIMEOUT_S 0.2
#define WATCHDOG_S 100

/* ---------------------------------------------------------------------------------------------
 * Checks from several threads: the harness counters are plain ints, so every check takes a lock.
 * ------------------------------------------------------------------------------------------- */
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

#define RCHECK(r, cond)                                                                                      \
  do {                                                                                                       \
    pthread_mutex_lock(&check_mu);                                                                           \
    CHECKF(cond, "rank %d: CHECK(%s)", (r), #cond);                                                          \
    pthread_mutex_unlock(&check_mu);                                                                         \
  } while (0)

#define RCHECKF(r, cond, fmt, ...)                                                                           \
  do {                                                                                                       \
    pthread_mutex_lock(&check_mu);                                                                           \
    CHECKF(cond, "rank %d: " fmt, (r), __VA_ARGS__);                                                         \
    pthread_mutex_unlock(&check_mu);                                                                         \
  } while (0)

#define RCHECK_EQ(r, a, b)                                                                                   \
  do {                                                                                                       \
    long long a_ = (long long)(a), b_ = (long long)(b);                                                      \
    RCHECKF(r, a_ == b_, "%s == %s: %lld != %lld", #a, #b, a_, b_);                                          \
  } while (0)

#define RCHECK_STR(r, a, b)                                                                                  \
  do {                                                                                                       \
    const char *a_ = (a), *b_ = (b);                                                                         \
    RCHECKF(r, strcmp(a_, b_) == 0, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_, b_);                           \
  } while (0)

#define RCHECK_CONTAINS(r, h, n)                                                                             \
  do {                                                                                                       \
    const char *h_ = (h), *n_ = (n);                                                                         \
    RCHECKF(r, strstr(h_, n_) != NULL, "\"%s\" does not contain \"%s\"", h_, n_);                            \
  } while (0)

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Test data: a byte from three coordinates, so that any receiver can check any slice alone. */
static uint8_t pattern(uint64_t a, uint64_t b, uint64_t i) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full ^ (i + 7) * 0x165667B19E3779F9ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (uint8_t)x;
}

/* ---------------------------------------------------------------------------------------------
 * The fake transport.
 * ------------------------------------------------------------------------------------------- */
enum { OP_BCAST = 0, OP_ALLGATHER, OP_ALLTOALLV, OP_ALLREDUCE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"broadcast", "allgather", "alltoallv", "allreduce"};

enum { FAULT_HANG = 0, FAULT_LEAVE = 1 };

/* What one member posted for a call. */
typedef struct post {
  const void *send;
  void *recv;
  uint64_t nbytes;
  const uint64_t *scount, *sdispl, *rcount, *rdispl;
  const int64_t *values;
  int count;
  int op;
  int root;
} post;

/* One call in progress, shared by its members (bits by position in the member list). */
typedef struct slot {
  bool used;
  int kind;
  unsigned mask; /* world ranks of the members, as bits */
  uint64_t epoch;
  uint64_t seq;
  int n;
  int members[MAX_RANKS];
  unsigned arrived, done, departed;
  unsigned heard; /* members that ever arrived (the ones that left after waiting included) */
  post p[MAX_RANKS];
} slot;

typedef struct fake_world fake_world;

typedef struct fake_rank {
  fake_world *w;
  int rank;
  pthread_t owner;          /* the thread that runs this rank */
  uint64_t calls[OP_COUNT]; /* collective calls by kind */
  uint64_t collectives;     /* all collective calls: the fault's call number counts these */
  uint64_t stop_raises;     /* stop_raise calls */
  uint64_t stop_checks;     /* stop_check calls */
  uint64_t polls;           /* poll hook calls */
  uint64_t aborts;          /* abort hook calls */
  char abort_msg[SL_ERR_MSG_MAX];
  uint64_t seq[MAX_EPOCHS][16]; /* calls made per (stop epoch, member set) */
} fake_rank;

struct fake_world {
  int n;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* any change: an arrival, a departure, a raise, the release */
  slot slots[MAX_SLOTS];
  int raised_from[MAX_EPOCHS]; /* rank that raised each stop epoch, or -1 */
  int silent_rank;             /* the fault: this rank never arrives at its collective call ... */
  uint64_t silent_call;        /* ... number silent_call (1-based); -1 / 0: no fault */
  int silent_mode;             /* FAULT_HANG or FAULT_LEAVE */
  bool release;                /* the test is over: every wait ends */
  int protocol_errors;         /* ranks that disagreed, arguments out of range */
  int foreign_calls;           /* calls from a thread other than the rank's own */
  char protocol_msg[256];      /* the first protocol error */
  fake_rank r[MAX_RANKS];
};

static fake_world *world_new(int n) {
  fake_world *w = calloc(1, sizeof *w);
  if (w == NULL) {
    fprintf(stderr, "test_comm_caller: out of memory\n");
    exit(1);
  }
  w->n = n;
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &attr);
  pthread_condattr_destroy(&attr);
  for (int e = 0; e < MAX_EPOCHS; e++)
    w->raised_from[e] = -1;
  w->silent_rank = -1;
  for (int r = 0; r < MAX_RANKS; r++) {
    w->r[r].w = w;
    w->r[r].rank = r;
  }
  return w;
}

/* The fake's own invariants: every rank made the same calls, from its own thread. */
static void world_free(fake_world *w) {
  CHECKF(w->protocol_errors == 0, "world of %d: %d protocol errors of the fake transport, first: %s", w->n,
         w->protocol_errors, w->protocol_msg);
  CHECKF(w->foreign_calls == 0, "world of %d: %d transport calls from a thread other than the rank's", w->n,
         w->foreign_calls);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* Under w->mu. */
static void protocol_error(fake_world *w, const char *msg) {
  if (w->protocol_errors++ == 0)
    snprintf(w->protocol_msg, sizeof w->protocol_msg, "%s", msg);
}

static void note_call(fake_rank *fr) {
  if (!pthread_equal(pthread_self(), fr->owner))
    fr->w->foreign_calls++;
}

static void wait_until(fake_world *w, double until) {
  struct timespec ts;
  ts.tv_sec = (time_t)until;
  ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L)
    ts.tv_nsec = 999999999L;
  pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* Copies what this member receives from the others' posts (every member has arrived, and none
 * leaves before every member is done, so the posts stay valid). NULL, or what disagrees. */
static const char *deliver(slot *s, int me, int kind, int64_t *reduced) {
  const post *mine = &s->p[me];
  switch (kind) {
  case OP_BCAST: {
    for (int j = 0; j < s->n; j++)
      if (s->p[j].root != mine->root || s->p[j].nbytes != mine->nbytes)
        return "broadcast: the members disagree on the root or the size";
    if (me != mine->root && mine->nbytes > 0)
      memcpy(mine->recv, s->p[mine->root].send, (size_t)mine->nbytes);
    return NULL;
  }
  case OP_ALLGATHER:
    for (int j = 0; j < s->n; j++)
      if (s->p[j].nbytes != mine->nbytes)
        return "allgather: the ranks disagree on the size";
    for (int j = 0; j < s->n && mine->nbytes > 0; j++)
      memcpy((uint8_t *)mine->recv + (size_t)j * mine->nbytes, s->p[j].send, (size_t)mine->nbytes);
    return NULL;
  case OP_ALLTOALLV:
    for (int j = 0; j < s->n; j++)
      if (s->p[j].scount[me] != mine->rcount[j])
        return "alltoallv: a send count differs from the receiver's count";
    for (int j = 0; j < s->n; j++)
      if (mine->rcount[j] > 0)
        memcpy((uint8_t *)mine->recv + mine->rdispl[j], (const uint8_t *)s->p[j].send + s->p[j].sdispl[me],
               (size_t)mine->rcount[j]);
    return NULL;
  case OP_ALLREDUCE:
    for (int j = 0; j < s->n; j++)
      if (s->p[j].count != mine->count || s->p[j].op != mine->op)
        return "allreduce: the ranks disagree on the count or the operation";
    if (mine->op != SL_COMM_MIN && mine->op != SL_COMM_SUM)
      return "allreduce: unknown operation";
    for (int i = 0; i < mine->count; i++) {
      int64_t v = s->p[0].values[i];
      for (int j = 1; j < s->n; j++) {
        int64_t x = s->p[j].values[i];
        v = mine->op == SL_COMM_SUM ? v + x : (x < v ? x : v);
      }
      reduced[i] = v;
    }
    return NULL;
  default:
    return "unknown call";
  }
}

/* One collective call of rank fr: see the top of the file. */
static int meet(fake_rank *fr, int kind, const int *members, int n_members, uint64_t epoch, double timeout_s,
                const post *mine, int64_t *reduced, char *msg, size_t msg_cap) {
  fake_world *w = fr->w;
  pthread_mutex_lock(&w->mu);
  note_call(fr);
  fr->calls[kind]++;
  uint64_t call = ++fr->collectives;
  if (w->silent_rank == fr->rank && call == w->silent_call) {
    while (w->silent_mode == FAULT_HANG && !w->release)
      pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    snprintf(msg, msg_cap, "fake transport: rank %d dropped out at its call %llu", fr->rank,
             (unsigned long long)call);
    return SL_COMM_ERROR;
  }
  int m[MAX_RANKS];
  int n = 0;
  int me = -1;
  const char *bad = NULL;
  if (members == NULL) {
    if (n_members != w->n)
      bad = "members is NULL but n_members is not the size";
    for (n = 0; n < w->n; n++)
      m[n] = n;
  } else if (n_members < 1 || n_members > w->n) {
    bad = "n_members out of range";
  } else {
    for (n = 0; n < n_members; n++) {
      m[n] = members[n];
      if (m[n] < 0 || m[n] >= w->n || (n > 0 && m[n] <= m[n - 1]))
        bad = "members are not increasing ranks of the job";
    }
  }
  unsigned mask = 0;
  for (int i = 0; i < n && bad == NULL; i++) {
    mask |= 1u << m[i];
    if (m[i] == fr->rank)
      me = i;
  }
  if (bad == NULL && me < 0)
    bad = "this rank is not one of the members";
  if (bad == NULL && kind == OP_BCAST && (mine->root < 0 || mine->root >= n))
    bad = "root out of range";
  if (bad == NULL && kind == OP_ALLGATHER && n != w->n)
    bad = "allgather over a subset";
  if (bad == NULL && epoch >= MAX_EPOCHS)
    bad = "stop epoch too large for the fake";
  if (bad == NULL && kind == OP_ALLREDUCE && (mine->count < 0 || mine->count > MAX_REDUCE))
    bad = "reduction count out of range";
  slot *s = NULL;
  if (bad == NULL) {
    uint64_t seq = fr->seq[epoch][mask]++;
    for (int i = 0; i < MAX_SLOTS && s == NULL; i++)
      if (w->slots[i].used && w->slots[i].mask == mask && w->slots[i].epoch == epoch &&
          w->slots[i].seq == seq)
        s = &w->slots[i];
    for (int i = 0; i < MAX_SLOTS && s == NULL; i++)
      if (!w->slots[i].used) {
        s = &w->slots[i];
        memset(s, 0, sizeof *s);
        s->used = true;
        s->kind = kind;
        s->mask = mask;
        s->epoch = epoch;
        s->seq = seq;
        s->n = n;
        memcpy(s->members, m, sizeof m);
      }
    if (s == NULL)
      bad = "out of slots";
    else if (s->kind != kind)
      bad = "the ranks made different calls";
  }
  if (bad != NULL) {
    char line[256];
    snprintf(line, sizeof line, "rank %d, %s call %llu: %s", fr->rank, op_names[kind],
             (unsigned long long)call, bad);
    protocol_error(w, line);
    pthread_mutex_unlock(&w->mu);
    snprintf(msg, msg_cap, "fake transport: %s", line);
    return SL_COMM_ERROR;
  }
  s->p[me] = *mine;
  s->arrived |= 1u << me;
  s->heard |= 1u << me;
  pthread_cond_broadcast(&w->cv);
  unsigned all = (1u << n) - 1;
  double deadline = timeout_s > 0 ? mono() + timeout_s : 0;
  int rc = SL_COMM_OK;
  while (s->arrived != all) {
    double now = mono();
    if (epoch != 0 && w->raised_from[epoch] >= 0) {
      rc = SL_COMM_STOPPED;
    } else if (w->release) {
      rc = SL_COMM_ERROR;
      snprintf(msg, msg_cap, "fake transport: the test ended");
    } else if (deadline > 0 && now >= deadline) {
      rc = SL_COMM_TIMEOUT;
      size_t len = (size_t)snprintf(msg, msg_cap, "fake transport: no word from");
      for (int j = 0; j < n && len < msg_cap; j++)
        if ((s->heard & (1u << j)) == 0)
          len += (size_t)snprintf(msg + len, msg_cap - len, " rank %d", s->members[j]);
      if (len < msg_cap)
        snprintf(msg + len, msg_cap - len, " within %.2f s (%s, call %llu of rank %d)", timeout_s,
                 op_names[kind], (unsigned long long)call, fr->rank);
    }
    if (rc != SL_COMM_OK)
      break;
    wait_until(w, deadline > 0 && deadline < now + 0.05 ? deadline : now + 0.05);
  }
  if (rc != SL_COMM_OK) {
    /* Nobody reads a post before every member has arrived: leaving is safe. */
    s->arrived &= ~(1u << me);
    memset(&s->p[me], 0, sizeof s->p[me]);
    if (s->arrived == 0)
      s->used = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
  }
  pthread_mutex_unlock(&w->mu);
  const char *mismatch = deliver(s, me, kind, reduced);
  pthread_mutex_lock(&w->mu);
  if (mismatch != NULL)
    protocol_error(w, mismatch);
  s->done |= 1u << me;
  pthread_cond_broadcast(&w->cv);
  while (s->done != all)
    pthread_cond_wait(&w->cv, &w->mu);
  s->departed |= 1u << me;
  if (s->departed == all)
    s->used = false;
  pthread_mutex_unlock(&w->mu);
  if (mismatch != NULL) {
    snprintf(msg, msg_cap, "fake transport: %s", mismatch);
    return SL_COMM_ERROR;
  }
  return SL_COMM_OK;
}

/* A collective call. */
static int rendezvous(fake_rank *fr, int kind, const int *members, int n_members, uint64_t epoch,
                      double timeout_s, const post *mine, int64_t *reduced, char *msg, size_t msg_cap) {
  return meet(fr, kind, members, n_members, epoch, timeout_s, mine, reduced, msg, msg_cap);
}

static int fake_broadcast(void *ctx, const int *members, int n_members, int root, void *buf, uint64_t nbytes,
                          uint64_t stop_epoch, double timeout_s, char *msg, size_t msg_cap) {
  post p = {.send = buf, .recv = buf, .nbytes = nbytes, .root = root};
  return rendezvous(ctx, OP_BCAST, members, n_members, stop_epoch, timeout_s, &p, NULL, msg, msg_cap);
}

static int fake_allgather(void *ctx, const void *send, uint64_t nbytes, void *recv, double timeout_s,
                          char *msg, size_t msg_cap) {
  fake_rank *fr = ctx;
  post p = {.send = send, .recv = recv, .nbytes = nbytes};
  return rendezvous(fr, OP_ALLGATHER, NULL, fr->w->n, 0, timeout_s, &p, NULL, msg, msg_cap);
}

static int fake_alltoallv(void *ctx, const int *members, int n_members, const void *send,
                          const uint64_t *send_counts, const uint64_t *send_displs, void *recv,
                          const uint64_t *recv_counts, const uint64_t *recv_displs, uint64_t stop_epoch,
                          double timeout_s, char *msg, size_t msg_cap) {
  post p = {.send = send,
            .recv = recv,
            .scount = send_counts,
            .sdispl = send_displs,
            .rcount = recv_counts,
            .rdispl = recv_displs};
  return rendezvous(ctx, OP_ALLTOALLV, members, n_members, stop_epoch, timeout_s, &p, NULL, msg, msg_cap);
}

static int fake_allreduce(void *ctx, int64_t *values, int count, int op, double timeout_s, char *msg,
                          size_t msg_cap) {
  fake_rank *fr = ctx;
  int64_t reduced[MAX_REDUCE];
  post p = {.values = values, .count = count, .op = op};
  int rc = rendezvous(fr, OP_ALLREDUCE, NULL, fr->w->n, 0, timeout_s, &p, reduced, msg, msg_cap);
  /* Written only now: the others read this rank's values until every member was done. */
  if (rc == SL_COMM_OK)
    memcpy(values, reduced, (size_t)count * sizeof *values);
  return rc;
}

static void fake_stop_raise(void *ctx, uint64_t stop_epoch) {
  fake_rank *fr = ctx;
  fake_world *w = fr->w;
  pthread_mutex_lock(&w->mu);
  note_call(fr);
  fr->stop_raises++;
  if (stop_epoch == 0 || stop_epoch >= MAX_EPOCHS)
    protocol_error(w, "stop_raise of epoch 0 or of an epoch too large");
  else if (w->raised_from[stop_epoch] < 0)
    w->raised_from[stop_epoch] = fr->rank;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static int fake_stop_check(void *ctx, uint64_t stop_epoch, int *from) {
  fake_rank *fr = ctx;
  fake_world *w = fr->w;
  pthread_mutex_lock(&w->mu);
  note_call(fr);
  fr->stop_checks++;
  int f = -1;
  if (stop_epoch == 0 || stop_epoch >= MAX_EPOCHS)
    protocol_error(w, "stop_check of epoch 0 or of an epoch too large");
  else
    f = w->raised_from[stop_epoch];
  pthread_mutex_unlock(&w->mu);
  *from = f;
  return f >= 0;
}

static void fake_poll(void *ctx, double idle_s) {
  fake_rank *fr = ctx;
  pthread_mutex_lock(&fr->w->mu);
  note_call(fr);
  fr->polls++;
  if (idle_s < 0)
    protocol_error(fr->w, "poll with a negative idle time");
  pthread_mutex_unlock(&fr->w->mu);
}

static void fake_abort(void *ctx, const char *reason) {
  fake_rank *fr = ctx;
  pthread_mutex_lock(&fr->w->mu);
  note_call(fr);
  fr->aborts++;
  snprintf(fr->abort_msg, sizeof fr->abort_msg, "%s", reason != NULL ? reason : "(null)");
  pthread_mutex_unlock(&fr->w->mu);
}

static sl_comm_ops fake_ops(fake_world *w, int rank) {
  sl_comm_ops ops = {.version = SL_COMM_OPS_VERSION,
                     .rank = rank,
                     .size = w->n,
                     .ctx = &w->r[rank],
                     .broadcast = fake_broadcast,
                     .allgather = fake_allgather,
                     .alltoallv = fake_alltoallv,
                     .allreduce = fake_allreduce,
                     .stop_raise = fake_stop_raise,
                     .stop_check = fake_stop_check,
                     .poll = fake_poll,
                     .abort = fake_abort};
  return ops;
}

/* Every call of rank r to its transport so far (collectives and the stop channel). */
static uint64_t transport_calls(fake_world *w, int r) {
  pthread_mutex_lock(&w->mu);
  uint64_t n = w->r[r].collectives + w->r[r].stop_raises + w->r[r].stop_checks;
  pthread_mutex_unlock(&w->mu);
  return n;
}

static uint64_t kind_calls(fake_world *w, int r, int kind) {
  pthread_mutex_lock(&w->mu);
  uint64_t n = w->r[r].calls[kind];
  pthread_mutex_unlock(&w->mu);
  return n;
}

static uint64_t abort_calls(fake_world *w, int r, char *msg, size_t cap) {
  pthread_mutex_lock(&w->mu);
  uint64_t n = w->r[r].aborts;
  if (msg != NULL)
    snprintf(msg, cap, "%s", w->r[r].abort_msg);
  pthread_mutex_unlock(&w->mu);
  return n;
}

/* Waits until `count` members wait inside one call of stop epoch `epoch` (at most 10 s). */
static bool wait_arrivals(fake_world *w, uint64_t epoch, int count) {
  double end = mono() + 10;
  bool seen = false;
  pthread_mutex_lock(&w->mu);
  while (!seen && mono() < end) {
    for (int i = 0; i < MAX_SLOTS && !seen; i++) {
      const slot *s = &w->slots[i];
      int k = 0;
      for (int j = 0; j < s->n; j++)
        k += (s->arrived >> j) & 1u;
      seen = s->used && s->epoch == epoch && k >= count;
    }
    if (!seen)
      wait_until(w, mono() + 0.05);
  }
  pthread_mutex_unlock(&w->mu);
  return seen;
}

/* ---------------------------------------------------------------------------------------------
 * Running a scenario on every rank, one thread each.
 * ------------------------------------------------------------------------------------------- */
typedef struct rank_ctx {
  fake_world *w;
  int rank;
  pthread_barrier_t *barrier; /* test-side steps, outside the transport */
  void *arg;
} rank_ctx;

typedef void (*scenario_fn)(rank_ctx *rc);

typedef struct thread_arg {
  rank_ctx rc;
  scenario_fn fn;
} thread_arg;

static void *rank_main(void *p) {
  thread_arg *ta = p;
  ta->rc.w->r[ta->rc.rank].owner = pthread_self();
  ta->fn(&ta->rc);
  return NULL;
}

static void run_world(fake_world *w, scenario_fn fn, void *arg) {
  pthread_t t[MAX_RANKS];
  thread_arg ta[MAX_RANKS];
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)w->n);
  for (int r = 0; r < w->n; r++) {
    ta[r] = (thread_arg){.rc = {.w = w, .rank = r, .barrier = &barrier, .arg = arg}, .fn = fn};
    if (pthread_create(&t[r], NULL, rank_main, &ta[r]) != 0) {
      fprintf(stderr, "test_comm_caller: cannot start a thread\n");
      exit(1);
    }
  }
  /* A hanging rank waits until every other rank is done with its scenario. */
  for (int r = 0; r < w->n; r++)
    if (r != w->silent_rank || w->silent_mode != FAULT_HANG)
      pthread_join(t[r], NULL);
  pthread_mutex_lock(&w->mu);
  w->release = true;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->silent_rank >= 0 && w->silent_mode == FAULT_HANG)
    pthread_join(t[w->silent_rank], NULL);
  pthread_barrier_destroy(&barrier);
}

static void step(rank_ctx *rc) {
  pthread_barrier_wait(rc->barrier);
}

/* The rank's communicator over the fake. */
static bool comm_open(rank_ctx *rc, sl__comm *c) {
  sl_comm_ops ops = fake_ops(rc->w, rc->rank);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__comm_init_caller(c, &ops, &err);
  RCHECKF(rc->rank, st == SL_STATUS_OK, "sl__comm_init_caller: %s", err.msg);
  if (st != SL_STATUS_OK)
    return false;
  RCHECK_EQ(rc->rank, c->rank, rc->rank);
  RCHECK_EQ(rc->rank, c->size, rc->w->n);
  RCHECK_STR(rc->rank, c->impl->name, "caller");
  sl__comm_set_timeout(c, 30);
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * 1. Agreement.
 * ------------------------------------------------------------------------------------------- */
static void scenario_agree(rank_ctx *rc) {
  int r = rc->rank;
  int n = rc->w->n;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  sl__err err;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_agree(&c, SL_STATUS_OK, &err, "all well"), SL_STATUS_OK);
  RCHECK_EQ(r, c.first_failed, -1);
  RCHECK_EQ(r, c.first_status, SL_STATUS_OK);
  RCHECK_STR(r, err.msg, "");
  RCHECK_STR(r, c.phase, "all well");

  for (int failing = 0; failing < n; failing++) {
    sl__err_clear(&err);
    char own[64];
    snprintf(own, sizeof own, "no weights on rank %d", failing);
    sl_status mine = r == failing ? sl__err_set(&err, SL_STATUS_NO_WEIGHTS, "%s", own) : SL_STATUS_OK;
    sl_status st = sl__comm_agree(&c, mine, &err, "checking weights");
    if (r == failing) {
      RCHECK_EQ(r, st, SL_STATUS_NO_WEIGHTS);
      RCHECK_STR(r, err.msg, own);
    } else {
      char expect[160];
      snprintf(expect, sizeof expect, "another rank failed while checking weights: rank %d: %s", failing,
               own);
      RCHECK_EQ(r, st, SL_STATUS_PEER_FAILED);
      RCHECK_EQ(r, err.status, SL_STATUS_PEER_FAILED);
      RCHECK_STR(r, err.msg, expect);
    }
    RCHECK_EQ(r, c.first_failed, failing);
    RCHECK_EQ(r, c.first_status, SL_STATUS_NO_WEIGHTS);
  }

  /* Without a phase the message says no "while". */
  sl__err_clear(&err);
  sl_status st =
      sl__comm_agree(&c, r == 0 ? sl__err_set(&err, SL_STATUS_IO, "disk gone") : SL_STATUS_OK, &err, NULL);
  RCHECK_EQ(r, st, r == 0 ? SL_STATUS_IO : SL_STATUS_PEER_FAILED);
  RCHECK_STR(r, err.msg, r == 0 ? "disk gone" : "another rank failed: rank 0: disk gone");
  RCHECK_EQ(r, c.first_status, SL_STATUS_IO);

  if (n >= 2) {
    /* Rank 0 only saw an abort (PEER_FAILED); the last rank failed by itself: the last rank's
     * failure is the cause on every rank, rank 0 included. Two real failures: the lowest wins. */
    int last = n - 1;
    sl__err_clear(&err);
    sl_status mine = r == 0      ? sl__err_set(&err, SL_STATUS_PEER_FAILED, "stopped by an abort")
                     : r == last ? sl__err_set(&err, SL_STATUS_IO, "read error on rank %d", last)
                                 : SL_STATUS_OK;
    st = sl__comm_agree(&c, mine, &err, "loading");
    char own[64];
    char expect[160];
    snprintf(own, sizeof own, "read error on rank %d", last);
    snprintf(expect, sizeof expect, "another rank failed while loading: rank %d: %s", last, own);
    RCHECK_EQ(r, st, r == last ? SL_STATUS_IO : SL_STATUS_PEER_FAILED);
    RCHECK_STR(r, err.msg, r == last ? own : expect);
    RCHECK_EQ(r, c.first_failed, last);
    RCHECK_EQ(r, c.first_status, SL_STATUS_IO);

    sl__err_clear(&err);
    mine =
        r >= 1 ? sl__err_set(&err, r == 1 ? SL_STATUS_SHAPE : SL_STATUS_IO, "failure %d", r) : SL_STATUS_OK;
    st = sl__comm_agree(&c, mine, &err, "planning");
    RCHECK_EQ(r, c.first_failed, 1);
    RCHECK_EQ(r, c.first_status, SL_STATUS_SHAPE);
    if (r == 0)
      RCHECK_STR(r, err.msg, "another rank failed while planning: rank 1: failure 1");
    else
      RCHECK_EQ(r, st, r == 1 ? SL_STATUS_SHAPE : SL_STATUS_IO); /* a failing rank keeps its own */
  }
  sl__comm_free(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 2. World collectives.
 * ------------------------------------------------------------------------------------------- */
static size_t count_mismatches(const uint8_t *data, size_t n, uint64_t a, uint64_t b) {
  size_t bad = 0;
  for (size_t k = 0; k < n; k++)
    bad += data[k] != pattern(a, b, k);
  return bad;
}

static void scenario_collectives(rank_ctx *rc) {
  int r = rc->rank;
  int n = rc->w->n;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  sl__err err;
  static const size_t sizes[] = {0, 1, 3, (size_t)1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int root = 0; root < n; root++) {
      sl__err_clear(&err);
      size_t len = 12345; /* replaced on the receivers */
      uint8_t *blob = NULL;
      uint8_t *mine = NULL;
      if (r == root) {
        len = sizes[i];
        mine = malloc(len > 0 ? len : 1);
        for (size_t k = 0; k < len; k++)
          mine[k] = pattern((uint64_t)root, len, k);
        blob = mine;
      }
      sl_status st = sl__comm_bcast_blob(&c, &blob, &len, root, &err);
      RCHECKF(r, st == SL_STATUS_OK, "blob of %zu bytes from %d: %s", sizes[i], root, err.msg);
      RCHECK_EQ(r, len, sizes[i]);
      RCHECK(r, blob != NULL);
      if (r == root)
        RCHECK(r, blob == mine);
      if (st == SL_STATUS_OK && blob != NULL && len == sizes[i])
        RCHECKF(r, count_mismatches(blob, len, (uint64_t)root, sizes[i]) == 0,
                "blob of %zu bytes from %d differs", sizes[i], root);
      free(blob);
    }
  }

  /* allgather: one record per rank, in rank order */
  enum { REC = 24 };
  uint8_t rec[REC];
  uint8_t *all = calloc((size_t)n, REC);
  for (size_t k = 0; k < REC; k++)
    rec[k] = pattern((uint64_t)r, REC, k);
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_allgather(&c, rec, REC, all, "a test allgather", &err), SL_STATUS_OK);
  for (int j = 0; j < n; j++)
    RCHECKF(r, count_mismatches(all + (size_t)j * REC, REC, (uint64_t)j, REC) == 0, "allgather record of %d",
            j);
  free(all);

  /* reductions of ints: MIN through the interface, SUM through the implementation */
  int vals[3] = {r + 5, 100 - r, (r * 7) % 5 - 2};
  int expect[3] = {5, 100 - (n - 1), 1000};
  for (int j = 0; j < n; j++)
    expect[2] = (j * 7) % 5 - 2 < expect[2] ? (j * 7) % 5 - 2 : expect[2];
  RCHECK_EQ(r, sl__comm_allreduce_min(&c, vals, 3, "a test minimum", &err), SL_STATUS_OK);
  for (int i = 0; i < 3; i++)
    RCHECKF(r, vals[i] == expect[i], "minimum [%d]: %d != %d", i, vals[i], expect[i]);
  int sums[2] = {r, 1};
  RCHECK_EQ(r, c.impl->allreduce_int(&c, sums, 2, SL__REDUCE_SUM, "a test sum", &err), SL_STATUS_OK);
  RCHECK_EQ(r, sums[0], n * (n - 1) / 2);
  RCHECK_EQ(r, sums[1], n);
  uint64_t before = transport_calls(rc->w, r);
  int nine[9] = {0};
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_allreduce_min(&c, nine, 9, "too many", &err), SL_STATUS_INTERNAL);
  RCHECK_EQ(r, transport_calls(rc->w, r), before);
  sl__err_clear(&err);

  /* bitwise OR: rank r sets bit (i + r) % 8 of byte i; the last byte stays 0 */
  enum { BITS = 37 };
  uint8_t bits[BITS];
  for (int i = 0; i < BITS; i++)
    bits[i] = i == BITS - 1 ? 0 : (uint8_t)(1u << ((i + r) % 8));
  RCHECK_EQ(r, sl__comm_allreduce_bor(&c, bits, BITS, &err), SL_STATUS_OK);
  for (int i = 0; i < BITS; i++) {
    uint8_t want = 0;
    for (int j = 0; j < n && i != BITS - 1; j++)
      want |= (uint8_t)(1u << ((i + j) % 8));
    RCHECKF(r, bits[i] == want, "OR byte %d: %#x != %#x", i, bits[i], want);
  }
  before = transport_calls(rc->w, r);
  RCHECK_EQ(r, sl__comm_allreduce_bor(&c, bits, 0, &err), SL_STATUS_OK);
  RCHECK_EQ(r, transport_calls(rc->w, r), before);

  /* gather: rank 0 only (the others pass no buffer) */
  enum { GREC = 16 };
  uint8_t grec[GREC];
  for (size_t k = 0; k < GREC; k++)
    grec[k] = pattern((uint64_t)r + 50, GREC, k);
  uint8_t *gout = r == 0 ? calloc((size_t)n, GREC) : NULL;
  RCHECK_EQ(r, sl__comm_gather(&c, grec, GREC, gout, &err), SL_STATUS_OK);
  for (int j = 0; j < n && r == 0; j++)
    RCHECKF(r, count_mismatches(gout + (size_t)j * GREC, GREC, (uint64_t)j + 50, GREC) == 0,
            "gathered record of %d", j);
  free(gout);

  /* every thread is on this host: the ranks below this one are local */
  RCHECK_EQ(r, sl__comm_local_rank(&c), r);

  /* the poll hook hears the idle time */
  sl__comm_poll(&c);
  pthread_mutex_lock(&rc->w->mu);
  uint64_t polls = rc->w->r[r].polls;
  pthread_mutex_unlock(&rc->w->mu);
  RCHECK(r, polls >= 1);
  RCHECK_EQ(r, abort_calls(rc->w, r, NULL, 0), 0);
  sl__comm_free(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 3. Groups.
 * ------------------------------------------------------------------------------------------- */
#define MAX_GROUPS 32

typedef struct group_list {
  size_t n;
  sl__comm_group g[MAX_GROUPS];
  uint32_t members[MAX_GROUPS][MAX_RANKS];
} group_list;

static void add_group(group_list *gl, unsigned mask) {
  uint32_t k = 0;
  for (uint32_t r = 0; r < MAX_RANKS; r++)
    if (mask & (1u << r))
      gl->members[gl->n][k++] = r;
  gl->g[gl->n] = (sl__comm_group){.n = k, .members = gl->members[gl->n]};
  gl->n++;
}

/* Overlapping groups: the world, each rank alone, neighbours, the ends, even and odd ranks, and
 * two triples at 4. */
static void make_groups(int n, group_list *gl) {
  memset(gl, 0, sizeof *gl);
  unsigned world = (1u << n) - 1;
  add_group(gl, world);
  for (int r = 0; r < n; r++)
    add_group(gl, 1u << r);
  for (int r = 0; r + 1 < n; r++)
    add_group(gl, 3u << r);
  if (n >= 3)
    add_group(gl, 1u | 1u << (n - 1));
  if (n >= 2) {
    add_group(gl, 0x5u & world);
    add_group(gl, 0xAu & world);
  }
  if (n == 4) {
    add_group(gl, 0xEu);
    add_group(gl, 0xBu);
  }
}

static int position(const sl__comm_group *g, int rank) {
  for (uint32_t j = 0; j < g->n; j++)
    if ((int)g->members[j] == rank)
      return (int)j;
  return -1;
}

static uint64_t a2a_count(uint32_t g, uint32_t src, uint32_t dst) {
  return (uint64_t)((src * 3 + dst * 5 + g) % 4) * 13 + (src == dst);
}

static uint8_t a2a_byte(uint32_t g, uint32_t src, uint32_t dst, uint64_t k) {
  return pattern((uint64_t)g * 16 + src, 1000 + dst, k);
}

/* One all-to-all in group g, every block against (g, source, destination, index) and the gaps
 * between the blocks untouched. */
static void check_alltoallv(rank_ctx *rc, sl__comm *c, const group_list *gl, uint32_t g) {
  int r = rc->rank;
  const sl__comm_group *gr = &gl->g[g];
  uint64_t scount[MAX_RANKS], sdispl[MAX_RANKS], rcount[MAX_RANKS], rdispl[MAX_RANKS];
  uint64_t stotal = 0;
  uint64_t rtotal = 0;
  for (uint32_t j = 0; j < gr->n; j++) {
    scount[j] = a2a_count(g, (uint32_t)r, gr->members[j]);
    sdispl[j] = stotal + 3;
    stotal += scount[j] + 3;
    rcount[j] = a2a_count(g, gr->members[j], (uint32_t)r);
    rdispl[j] = rtotal + 5;
    rtotal += rcount[j] + 5;
  }
  uint8_t *send = malloc(stotal);
  uint8_t *recv = malloc(rtotal);
  memset(send, 0xAB, stotal);
  memset(recv, 0xEE, rtotal);
  for (uint32_t j = 0; j < gr->n; j++)
    for (uint64_t k = 0; k < scount[j]; k++)
      send[sdispl[j] + k] = a2a_byte(g, (uint32_t)r, gr->members[j], k);
  sl__err err;
  sl__err_clear(&err);
  bool aborted = true;
  sl_status st = sl__comm_group_alltoallv(c, g, send, scount, sdispl, recv, rcount, rdispl, &aborted, &err);
  RCHECKF(r, st == SL_STATUS_OK, "alltoallv in group %u: %s", g, err.msg);
  RCHECK(r, !aborted);
  size_t bad = 0;
  size_t gaps = 0;
  for (uint32_t j = 0; j < gr->n; j++) {
    for (uint64_t k = 0; k < rcount[j]; k++)
      bad += recv[rdispl[j] + k] != a2a_byte(g, gr->members[j], (uint32_t)r, k);
    for (uint64_t k = rdispl[j] - 5; k < rdispl[j]; k++)
      gaps += recv[k] != 0xEE;
  }
  RCHECKF(r, bad == 0 && gaps == 0, "alltoallv in group %u: %zu bytes differ, %zu gap bytes written", g, bad,
          gaps);
  free(send);
  free(recv);
}

/* A broadcast of nbytes in group g from position root. */
static void check_group_bcast(rank_ctx *rc, sl__comm *c, const group_list *gl, uint32_t g, int root,
                              uint64_t nbytes) {
  int r = rc->rank;
  const sl__comm_group *gr = &gl->g[g];
  int pos = position(gr, r);
  uint8_t *buf = malloc(nbytes > 0 ? nbytes : 1);
  for (uint64_t k = 0; k < nbytes; k++)
    buf[k] = pos == root ? pattern(g, gr->members[root], k) : 0xEE;
  sl__err err;
  sl__err_clear(&err);
  bool aborted = true;
  sl_status st = sl__comm_group_bcast(c, g, buf, nbytes, root, &aborted, &err);
  RCHECKF(r, st == SL_STATUS_OK, "broadcast in group %u: %s", g, err.msg);
  RCHECK(r, !aborted);
  RCHECKF(r, count_mismatches(buf, nbytes, g, gr->members[root]) == 0,
          "broadcast in group %u from position %d", g, root);
  free(buf);
}

static void scenario_groups(rank_ctx *rc) {
  int r = rc->rank;
  int n = rc->w->n;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  group_list gl;
  make_groups(n, &gl);
  sl__comm_groups groups = {.n = gl.n, .group = gl.g};
  sl__err err;
  sl__err_clear(&err);
  uint64_t before = transport_calls(rc->w, r);
  RCHECK_EQ(r, sl__comm_groups_create(&c, &groups, &err), SL_STATUS_OK);
  RCHECK_EQ(r, transport_calls(rc->w, r), before); /* member lists: nothing to agree on */
  for (uint32_t g = 0; g < gl.n; g++)
    RCHECKF(r, sl__comm_in_group(&c, g) == (position(&gl.g[g], r) >= 0), "membership of group %u", g);
  RCHECK(r, !sl__comm_in_group(&c, (uint32_t)gl.n));

  for (uint32_t g = 0; g < gl.n; g++) {
    const sl__comm_group *gr = &gl.g[g];
    if (position(gr, r) < 0) {
      /* not a member: refused here, nothing sent */
      uint8_t b[8];
      bool aborted = true;
      sl__err_clear(&err);
      before = transport_calls(rc->w, r);
      RCHECK_EQ(r, sl__comm_group_bcast(&c, g, b, sizeof b, 0, &aborted, &err), SL_STATUS_INTERNAL);
      RCHECK(r, !aborted);
      RCHECK_CONTAINS(r, err.msg, "not part of");
      RCHECK_EQ(r, transport_calls(rc->w, r), before);
      continue;
    }
    int root = gr->n > 1 ? 1 + (int)(g % (gr->n - 1)) : 0; /* never position 0 in a group of several */
    check_group_bcast(rc, &c, &gl, g, root, 1 + 517 * (uint64_t)g);
    check_alltoallv(rc, &c, &gl, g);
  }
  /* Groups made again replace the earlier ones. */
  group_list one;
  memset(&one, 0, sizeof one);
  add_group(&one, (1u << n) - 1);
  sl__comm_groups again = {.n = one.n, .group = one.g};
  RCHECK_EQ(r, sl__comm_groups_create(&c, &again, &err), SL_STATUS_OK);
  RCHECK(r, !sl__comm_in_group(&c, 1));
  check_group_bcast(rc, &c, &one, 0, n - 1, 4096);
  sl__comm_free(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 4. The abort channel.
 * ------------------------------------------------------------------------------------------- */
static bool hook_fires(void *ctx) {
  int *calls = ctx;
  (*calls)++;
  return true;
}

/* Polls sl__comm_abort_check for up to 10 s. */
static bool await_abort(sl__comm *c) {
  double end = mono() + 10;
  while (!sl__comm_abort_check(c)) {
    if (mono() > end)
      return false;
    usleep(200);
  }
  return true;
}

static void scenario_abort(rank_ctx *rc) {
  int r = rc->rank;
  int n = rc->w->n;
  int raiser = n - 1;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  group_list gl;
  memset(&gl, 0, sizeof gl);
  add_group(&gl, (1u << n) - 1);
  sl__comm_groups groups = {.n = gl.n, .group = gl.g};
  sl__err err;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_groups_create(&c, &groups, &err), SL_STATUS_OK);
  uint8_t buf[4096];
  bool aborted = false;

  /* Epoch 1: the last rank raises; the others see it by polling. */
  RCHECK_EQ(r, sl__comm_abort_arm(&c, &err), SL_STATUS_OK);
  RCHECK(r, c.armed);
  RCHECK(r, !sl__comm_abort_check(&c));
  step(rc);
  if (r == raiser) {
    sl__comm_abort_raise(&c);
    RCHECK(r, c.raised);
    RCHECK(r, sl__comm_abort_check(&c));
    RCHECK_EQ(r, c.abort_from, raiser);
  }
  step(rc);
  if (r != raiser) {
    RCHECK(r, await_abort(&c));
    RCHECK_EQ(r, c.abort_from, raiser);
    RCHECK(r, !c.raised);
  }
  /* a transfer after the abort stops at once, without the transport */
  uint64_t before = kind_calls(rc->w, r, OP_BCAST);
  RCHECK_EQ(r, sl__comm_group_bcast(&c, 0, buf, sizeof buf, 0, &aborted, &err), SL_STATUS_OK);
  RCHECK(r, aborted);
  RCHECK_EQ(r, kind_calls(rc->w, r, OP_BCAST), before);
  RCHECK_EQ(r, sl__comm_abort_disarm(&c, &err), SL_STATUS_OK);
  RCHECK(r, !c.armed);
  RCHECK(r, !sl__comm_abort_check(&c));
  step(rc);

  /* Epoch 2: the others wait inside the transport when the last rank raises instead of joining. */
  RCHECK_EQ(r, sl__comm_abort_arm(&c, &err), SL_STATUS_OK);
  RCHECK(r, !sl__comm_abort_check(&c)); /* epoch 1's raise is not this transfer's */
  RCHECK_EQ(r, c.abort_from, -1);
  step(rc);
  if (n >= 2) {
    if (r != raiser) {
      before = kind_calls(rc->w, r, OP_BCAST);
      memset(buf, 0xEE, sizeof buf);
      aborted = false;
      sl_status st = sl__comm_group_bcast(&c, 0, buf, sizeof buf, 0, &aborted, &err);
      RCHECKF(r, st == SL_STATUS_OK, "stopped broadcast: %s", err.msg);
      RCHECK(r, aborted);
      RCHECK_EQ(r, kind_calls(rc->w, r, OP_BCAST), before + 1); /* it was inside the transport */
      RCHECK_EQ(r, c.abort_from, raiser);
      RCHECK(r, sl__comm_abort_check(&c));
      RCHECK_EQ(r, c.abort_from, raiser);
    } else {
      RCHECK(r, wait_arrivals(rc->w, 2, n - 1));
      sl__comm_abort_raise(&c);
    }
  }
  step(rc);
  RCHECK_EQ(r, sl__comm_abort_disarm(&c, &err), SL_STATUS_OK);
  step(rc);

  /* Epoch 3: the earlier raises stop nothing. */
  RCHECK_EQ(r, sl__comm_abort_arm(&c, &err), SL_STATUS_OK);
  RCHECK(r, !sl__comm_abort_check(&c));
  check_group_bcast(rc, &c, &gl, 0, n - 1, 3000);
  check_alltoallv(rc, &c, &gl, 0);
  RCHECK(r, !sl__comm_abort_check(&c));
  RCHECK_EQ(r, c.abort_from, -1);
  RCHECK_EQ(r, sl__comm_abort_disarm(&c, &err), SL_STATUS_OK);
  step(rc);

  /* Epoch 4: rank 0's abort hook (a failure outside the communicator) raises for it. */
  RCHECK_EQ(r, sl__comm_abort_arm(&c, &err), SL_STATUS_OK);
  step(rc);
  int hook_calls = 0;
  if (r == 0) {
    c.abort_hook = hook_fires;
    c.abort_hook_ctx = &hook_calls;
    RCHECK(r, sl__comm_abort_check(&c));
    RCHECK(r, c.raised);
    RCHECK_EQ(r, c.abort_from, 0);
    RCHECK_EQ(r, hook_calls, 1);
    c.abort_hook = NULL;
  }
  step(rc);
  if (r != 0) {
    RCHECK(r, await_abort(&c));
    RCHECK_EQ(r, c.abort_from, 0);
  }
  RCHECK_EQ(r, sl__comm_abort_disarm(&c, &err), SL_STATUS_OK);
  RCHECK_STR(r, err.msg, "");
  RCHECK_EQ(r, abort_calls(rc->w, r, NULL, 0), 0); /* stops do not break the communicator */
  sl__comm_free(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 5. Deadline and the broken communicator.
 * ------------------------------------------------------------------------------------------- */

/* Every call of a broken communicator fails at once with its message, without the transport. */
static void check_refused(rank_ctx *rc, sl__comm *c, const char *broken) {
  int r = rc->rank;
  uint64_t calls = transport_calls(rc->w, r);
  uint64_t aborts = abort_calls(rc->w, r, NULL, 0);
  double t0 = mono();
  sl__err err;

  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_agree(c, SL_STATUS_OK, &err, "after the failure"), SL_STATUS_COMM);
  RCHECK_STR(r, err.msg, broken);

  sl__err_clear(&err);
  uint8_t data[64] = {1, 2, 3};
  uint8_t *blob = r == 0 ? data : NULL;
  size_t len = r == 0 ? sizeof data : 0;
  RCHECK_EQ(r, sl__comm_bcast_blob(c, &blob, &len, 0, &err), SL_STATUS_COMM);
  RCHECK_STR(r, err.msg, broken);
  RCHECK(r, r == 0 ? blob == data : blob == NULL);

  bool aborted = true;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_group_bcast(c, 0, data, sizeof data, 0, &aborted, &err), SL_STATUS_COMM);
  RCHECK_STR(r, err.msg, broken);

  uint64_t cnt[MAX_RANKS] = {0};
  uint64_t dsp[MAX_RANKS] = {0};
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_group_alltoallv(c, 0, data, cnt, dsp, data, cnt, dsp, &aborted, &err),
            SL_STATUS_COMM);
  RCHECK_STR(r, err.msg, broken);

  uint8_t all[MAX_RANKS * 8];
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_allgather(c, data, 8, all, "after the failure", &err), SL_STATUS_COMM);
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_gather(c, data, 8, r == 0 ? all : NULL, &err), SL_STATUS_COMM);
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_allreduce_bor(c, data, 4, &err), SL_STATUS_COMM);
  int v = 1;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_allreduce_min(c, &v, 1, "after the failure", &err), SL_STATUS_COMM);
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_abort_arm(c, &err), SL_STATUS_COMM);
  RCHECK_STR(r, err.msg, broken);
  RCHECK(r, !c->armed);
  RCHECK_EQ(r, sl__comm_local_rank(c), 0);

  RCHECK_EQ(r, transport_calls(rc->w, r), calls);
  RCHECK_EQ(r, abort_calls(rc->w, r, NULL, 0), aborts);
  double took = mono() - t0;
  RCHECKF(r, took < SHORT_TIMEOUT_S / 2, "refusals took %.3f s", took);
}

static void scenario_deadline(rank_ctx *rc) {
  int r = rc->rank;
  int n = rc->w->n;
  int silent = rc->w->silent_rank;
  uint64_t k = rc->w->silent_call;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  sl__comm_set_timeout(&c, SHORT_TIMEOUT_S);
  group_list gl;
  memset(&gl, 0, sizeof gl);
  add_group(&gl, (1u << n) - 1);
  sl__comm_groups groups = {.n = gl.n, .group = gl.g};
  sl__err err;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_groups_create(&c, &groups, &err), SL_STATUS_OK);
  /* call 1: a reduction every rank joins */
  RCHECK_EQ(r, sl__comm_agree(&c, SL_STATUS_OK, &err, "warming up"), SL_STATUS_OK);
  /* calls 2 and 3: rank 0 failed, so the agreement reduces, then broadcasts rank 0's message */
  sl__err_clear(&err);
  sl_status mine = r == 0 ? sl__err_set(&err, SL_STATUS_NO_WEIGHTS, "no weights on rank 0") : SL_STATUS_OK;
  double t0 = mono();
  sl_status st = sl__comm_agree(&c, mine, &err, "testing the deadline");
  double took = mono() - t0;
  RCHECKF(r, st == SL_STATUS_COMM, "agreement with a silent rank: %s (%s)", sl_status_name(st), err.msg);
  char reason[SL_ERR_MSG_MAX];
  RCHECK_EQ(r, abort_calls(rc->w, r, reason, sizeof reason), 1);
  RCHECK_CONTAINS(r, reason, "while testing the deadline");
  const char *what =
      k == 2 ? "status agreement did not finish" : "status agreement (the failing rank's message) did";
  if (r == silent) {
    char dropped[192];
    snprintf(dropped, sizeof dropped,
             "failed (rank %d of %d, while testing the deadline): fake transport: rank %d "
             "dropped out at its call %llu",
             r, n, r, (unsigned long long)k);
    RCHECK_CONTAINS(r, reason, dropped);
  } else {
    char named[64];
    snprintf(named, sizeof named, "no word from rank %d within", silent);
    RCHECK_CONTAINS(r, reason, named);
    RCHECK_CONTAINS(r, reason, what);
    RCHECK_CONTAINS(r, reason, "did not finish within the deadline");
    RCHECKF(r, took >= SHORT_TIMEOUT_S * 0.9 && took < 10, "the wait lasted %.3f s", took);
  }
  /* The first error wins: rank 0 keeps its own message, the others carry the transport's. */
  RCHECK_STR(r, err.msg, r == 0 ? "no weights on rank 0" : reason);
  RCHECK_EQ(r, c.first_failed, -1);
  check_refused(rc, &c, reason);
  sl__comm_free(&c);
}

/* sl__comm_expire: this rank's own reads stalled; the caller's communicator cannot wait on. */
static void scenario_expire(rank_ctx *rc) {
  int r = rc->rank;
  sl__comm c;
  if (!comm_open(rc, &c))
    return;
  sl__comm_set_timeout(&c, SHORT_TIMEOUT_S);
  group_list gl;
  memset(&gl, 0, sizeof gl);
  add_group(&gl, (1u << rc->w->n) - 1);
  sl__comm_groups groups = {.n = gl.n, .group = gl.g};
  sl__err err;
  sl__err_clear(&err);
  RCHECK_EQ(r, sl__comm_groups_create(&c, &groups, &err), SL_STATUS_OK);
  RCHECK_EQ(r, sl__comm_agree(&c, SL_STATUS_OK, &err, "warming up"), SL_STATUS_OK);
  sl__comm_phase(&c, "reading the checkpoint");
  uint64_t calls = transport_calls(rc->w, r);
  bool more = sl__comm_expire(&c, "reading model-00001-of-00003.safetensors", 12.0, &err);
  RCHECK(r, !more);
  RCHECK_EQ(r, err.status, SL_STATUS_COMM);
  RCHECK_CONTAINS(r, err.msg, "reading model-00001-of-00003.safetensors");
  RCHECK_CONTAINS(r, err.msg, "no progress for 12.0 s");
  RCHECK_CONTAINS(r, err.msg, "while reading the checkpoint");
  char own[32];
  snprintf(own, sizeof own, "rank %d:", r);
  RCHECK_CONTAINS(r, err.msg, own);
  char reason[SL_ERR_MSG_MAX];
  RCHECK_EQ(r, abort_calls(rc->w, r, reason, sizeof reason), 1);
  RCHECK_STR(r, reason, err.msg);
  RCHECK_EQ(r, transport_calls(rc->w, r), calls);
  check_refused(rc, &c, reason);
  /* a second expiry keeps the first message and does not call the hook again */
  sl__err err2;
  sl__err_clear(&err2);
  RCHECK(r, !sl__comm_expire(&c, "something else", 99.0, &err2));
  RCHECK_STR(r, err2.msg, reason);
  RCHECK_EQ(r, abort_calls(rc->w, r, NULL, 0), 1);
  sl__comm_free(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 6. The table of functions.
 * ------------------------------------------------------------------------------------------- */
static void expect_refused(const sl_comm_ops *ops, const char *needle) {
  sl__comm c;
  memset(&c, 0xA5, sizeof c);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__comm_init_caller(&c, ops, &err);
  CHECKF(st == SL_STATUS_INVALID_ARGUMENT, "refusal \"%s\": status %s", needle, sl_status_name(st));
  CHECK_CONTAINS(err.msg, needle);
  CHECK_CONTAINS(err.msg, "sl_loader_create_ops");
  CHECK(c.impl == NULL && c.state == NULL);
  sl__comm_free(&c); /* nothing to free */
}

static void test_table(void) {
  fake_world *w = world_new(2);
  w->r[0].owner = pthread_self();
  const sl_comm_ops good = fake_ops(w, 0);
  sl_comm_ops ops;

  expect_refused(NULL, "ops is NULL");
  ops = good;
  ops.version = 0;
  expect_refused(&ops, "ops.version is 0");
  ops.version = SL_COMM_OPS_VERSION + 1;
  char newer[64];
  snprintf(newer, sizeof newer, "ops.version is %u, this library takes %u", (unsigned)SL_COMM_OPS_VERSION + 1,
           (unsigned)SL_COMM_OPS_VERSION);
  expect_refused(&ops, newer);
  ops = good;
  ops.rank = -1;
  expect_refused(&ops, "rank -1 of size 2");
  ops.rank = 2;
  expect_refused(&ops, "rank 2 of size 2");
  ops.rank = 0;
  ops.size = 0;
  expect_refused(&ops, "rank 0 of size 0");

  static const char *const fields[] = {"broadcast", "allgather",  "alltoallv",
                                       "allreduce", "stop_raise", "stop_check"};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    ops = good;
    switch (i) {
    case 0:
      ops.broadcast = NULL;
      break;
    case 1:
      ops.allgather = NULL;
      break;
    case 2:
      ops.alltoallv = NULL;
      break;
    case 3:
      ops.allreduce = NULL;
      break;
    case 4:
      ops.stop_raise = NULL;
      break;
    default:
      ops.stop_check = NULL;
      break;
    }
    char needle[64];
    snprintf(needle, sizeof needle, "ops.%s is NULL (required)", fields[i]);
    expect_refused(&ops, needle);
  }

  /* poll and abort are optional */
  ops = good;
  ops.poll = NULL;
  ops.abort = NULL;
  ops.rank = 1;
  sl__comm c;
  sl__err err;
  sl__err_clear(&err);
  CHECK_EQ_U64(sl__comm_init_caller(&c, &ops, &err), SL_STATUS_OK);
  CHECK_EQ_U64(c.rank, 1);
  CHECK_EQ_U64(c.size, 2);
  CHECK(c.first_failed == -1 && c.abort_from == -1);
  sl__comm_poll(&c);
  sl__comm_free(&c);

  /* the public entry point refuses alike, with the message on the config */
  sl_config *cfg = NULL;
  CHECK_EQ_U64(sl_config_create(&cfg), SL_STATUS_OK);
  static char sentinel;
  sl_loader *l = (sl_loader *)(void *)&sentinel; /* reset to NULL on failure */
  CHECK_EQ_U64(sl_loader_create_ops(cfg, NULL, &l), SL_STATUS_INVALID_ARGUMENT);
  CHECK(l == NULL);
  CHECK_CONTAINS(sl_config_error(cfg), "ops is NULL");
  ops = good;
  ops.allgather = NULL;
  CHECK_EQ_U64(sl_loader_create_ops(cfg, &ops, &l), SL_STATUS_INVALID_ARGUMENT);
  CHECK(l == NULL);
  CHECK_CONTAINS(sl_config_error(cfg), "ops.allgather is NULL");
  sl_config_destroy(cfg);
  CHECK_EQ_U64(transport_calls(w, 0), 0);
  world_free(w);
}

/* ---------------------------------------------------------------------------------------------
 * 7. A load through the public API at 2 threads, tp 2, against the safetensors bytes.
 * ------------------------------------------------------------------------------------------- */
enum { SRC_NORM, SRC_Q, SRC_K, SRC_V, SRC_O, SRC_DOWN, SRC_GATE, SRC_UP, SRC_COUNT };
static const char *const src_names[SRC_COUNT] = {
    "model.norm.weight",
    "model.layers.1.self_attn.q_proj.weight",
    "model.layers.1.self_attn.k_proj.weight",
    "model.layers.1.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.2.mlp.down_proj.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
};

typedef struct load_arg {
  const char *model;
  uint8_t *src[SRC_COUNT]; /* each source tensor's bytes, read from its file */
  uint64_t src_nbytes[SRC_COUNT];
} load_arg;

/* The bytes of each source tensor, read here with pread at the offsets the file's header gives. */
static bool read_sources(load_arg *la) {
  sl_model *m = NULL;
  char *error = NULL;
  if (sl_model_open(la->model, NULL, &m, &error) != SL_STATUS_OK) {
    CHECKF(false, "sl_model_open(%s): %s", la->model, error != NULL ? error : "?");
    free(error);
    return false;
  }
  size_t found = 0;
  for (size_t t = 0; t < sl_model_tensor_count(m); t++) {
    sl_tensor_info ti = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, t, &ti) != SL_STATUS_OK)
      continue;
    for (int s = 0; s < SRC_COUNT; s++) {
      if (strcmp(ti.name, src_names[s]) != 0)
        continue;
      int fd = open(sl_model_file_path(m, ti.file), O_RDONLY);
      la->src[s] = malloc(ti.nbytes);
      la->src_nbytes[s] = ti.nbytes;
      bool ok = fd >= 0 && la->src[s] != NULL &&
                pread(fd, la->src[s], ti.nbytes, (off_t)ti.offset) == (ssize_t)ti.nbytes;
      CHECKF(ok, "reading %s from %s", ti.name, sl_model_file_path(m, ti.file));
      if (fd >= 0)
        close(fd);
      found += ok;
    }
  }
  sl_model_close(m);
  CHECK_EQ_U64(found, SRC_COUNT);
  return found == SRC_COUNT;
}

/* Local rows [lrow, lrow + nrows) of p equal source rows [srow, +nrows) (row_bytes each). */
static void check_rows(int r, const load_arg *la, const sl_param *p, uint64_t lrow, int src, uint64_t srow,
                       uint64_t nrows, uint64_t row_bytes) {
  bool inside = (lrow + nrows) * row_bytes <= p->nbytes && (srow + nrows) * row_bytes <= la->src_nbytes[src];
  RCHECKF(r, inside, "%s: rows out of range", p->name);
  if (inside)
    RCHECKF(r,
            memcmp((const uint8_t *)p->data + lrow * row_bytes, la->src[src] + srow * row_bytes,
                   nrows * row_bytes) == 0,
            "%s rows [%llu, +%llu) != %s rows [%llu, +%llu)", p->name, (unsigned long long)lrow,
            (unsigned long long)nrows, src_names[src], (unsigned long long)srow, (unsigned long long)nrows);
}

static const sl_param *find_param(int r, sl_loader *l, const char *name, uint64_t rows, uint64_t cols) {
  const sl_param *p = sl_loader_find(l, name);
  RCHECKF(r, p != NULL, "no parameter %s", name);
  if (p == NULL)
    return NULL;
  RCHECK_STR(r, p->dtype, "BF16");
  RCHECK_EQ(r, p->device, -1);
  RCHECK_EQ(r, p->local_shape[0], rows);
  if (cols > 0)
    RCHECK_EQ(r, p->local_shape[1], cols);
  RCHECK_EQ(r, p->nbytes, rows * (cols > 0 ? cols : 1) * 2);
  return p->nbytes == rows * (cols > 0 ? cols : 1) * 2 && p->data != NULL ? p : NULL;
}

static void set_key(int r, sl_config *cfg, const char *key, const char *value) {
  sl_status st = sl_config_set(cfg, key, value);
  RCHECKF(r, st == SL_STATUS_OK, "sl_config_set(%s, %s): %s", key, value, sl_config_error(cfg));
}

static void scenario_load(rank_ctx *rc) {
  int r = rc->rank;
  const load_arg *la = rc->arg;
  sl_config *cfg = NULL;
  RCHECK_EQ(r, sl_config_create(&cfg), SL_STATUS_OK);
  if (cfg == NULL)
    return;
  set_key(r, cfg, "model", la->model);
  set_key(r, cfg, "tp", "2");
  set_key(r, cfg, "progress", "never");
  set_key(r, cfg, "threads", "2");
  set_key(r, cfg, "timeout_s", "60");
  sl_comm_ops ops = fake_ops(rc->w, r);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create_ops(cfg, &ops, &l);
  RCHECKF(r, st == SL_STATUS_OK, "sl_loader_create_ops: %s", sl_config_error(cfg));
  if (st == SL_STATUS_OK) {
    st = sl_loader_load(l);
    RCHECKF(r, st == SL_STATUS_OK, "sl_loader_load: %s", sl_loader_error(l));
  }
  if (st == SL_STATUS_OK) {
    const uint64_t rb = 64 * 2; /* hidden 64, BF16 */
    const uint64_t u = (uint64_t)r;
    /* replicated */
    const sl_param *p = find_param(r, l, "model.norm.weight", 64, 0);
    if (p != NULL)
      check_rows(r, la, p, 0, SRC_NORM, 0, 1, 128);
    /* QKV (Hq 8, Hkv 2, head 8 at tp 2): q rows [32r, +32), k and v rows [8r, +8) */
    p = find_param(r, l, "model.layers.1.self_attn.qkv_proj.weight", 48, 64);
    if (p != NULL) {
      check_rows(r, la, p, 0, SRC_Q, 32 * u, 32, rb);
      check_rows(r, la, p, 32, SRC_K, 8 * u, 8, rb);
      check_rows(r, la, p, 40, SRC_V, 8 * u, 8, rb);
    }
    /* merged gate/up (I 128): gate rows [64r, +64), then up rows [64r, +64) */
    p = find_param(r, l, "model.layers.0.mlp.gate_up_proj.weight", 128, 64);
    if (p != NULL) {
      check_rows(r, la, p, 0, SRC_GATE, 64 * u, 64, rb);
      check_rows(r, la, p, 64, SRC_UP, 64 * u, 64, rb);
    }
    /* row-parallel: columns [32r, +32) of o_proj [64, 64], [64r, +64) of down_proj [64, 128] */
    static const struct {
      const char *name;
      int src;
      uint64_t cols;
    } rows[] = {{"model.layers.0.self_attn.o_proj.weight", SRC_O, 64},
                {"model.layers.2.mlp.down_proj.weight", SRC_DOWN, 128}};
    for (size_t i = 0; i < 2; i++) {
      uint64_t half = rows[i].cols / 2;
      p = find_param(r, l, rows[i].name, 64, half);
      size_t bad = 0;
      for (uint64_t row = 0; p != NULL && row < 64; row++)
        bad += memcmp((const uint8_t *)p->data + row * half * 2,
                      la->src[rows[i].src] + (row * rows[i].cols + u * half) * 2, half * 2) != 0;
      RCHECKF(r, bad == 0, "%s: %zu rows differ", rows[i].name, bad);
    }
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  pthread_mutex_lock(&rc->w->mu);
  const fake_rank *fr = &rc->w->r[r];
  fprintf(stderr,
          "load at tp 2, rank %d: %llu broadcasts, %llu allgathers, %llu all-to-alls, %llu reductions, "
          "%llu stop checks, %llu polls\n",
          r, (unsigned long long)fr->calls[OP_BCAST], (unsigned long long)fr->calls[OP_ALLGATHER],
          (unsigned long long)fr->calls[OP_ALLTOALLV], (unsigned long long)fr->calls[OP_ALLREDUCE],
          (unsigned long long)fr->stop_checks, (unsigned long long)fr->polls);
  bool used = fr->calls[OP_BCAST] > 0 && fr->calls[OP_ALLREDUCE] > 0;
  uint64_t aborts = fr->aborts;
  pthread_mutex_unlock(&rc->w->mu);
  RCHECK(r, used);
  RCHECK_EQ(r, aborts, 0);
}

static void test_load(void) {
  char model[4096];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  load_arg la = {.model = model};
  if (read_sources(&la)) {
    fake_world *w = world_new(2);
    run_world(w, scenario_load, &la);
    world_free(w);
  }
  for (int s = 0; s < SRC_COUNT; s++)
    free(la.src[s]);
}

/* ---------------------------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------------------------- */
static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_comm_caller: still running after the watchdog's limit: a rank hangs\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  _exit(1);
}

static void run(int n, scenario_fn fn, const char *name) {
  fprintf(stderr, "test_comm_caller: %s at %d rank%s\n", name, n, n > 1 ? "s" : "");
  fake_world *w = world_new(n);
  run_world(w, fn, NULL);
  world_free(w);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  (void)sl__log_enabled(SL_LOG_ERROR); /* reads SHARDLOAD_LOG now, once, before the threads */

  test_table();
  for (int n = 1; n <= MAX_RANKS; n++) {
    run(n, scenario_agree, "agreement");
    run(n, scenario_collectives, "world collectives");
    run(n, scenario_groups, "groups");
    run(n, scenario_abort, "abort channel");
    run(n, scenario_expire, "expiry");
  }
  for (int n = 2; n <= MAX_RANKS; n++)
    for (int mode = FAULT_HANG; mode <= FAULT_LEAVE; mode++)
      for (uint64_t k = 2; k <= 3; k++) {
        fprintf(stderr, "test_comm_caller: rank %d %s at its call %llu of %d ranks\n", n - 1,
                mode == FAULT_HANG ? "hangs" : "drops out", (unsigned long long)k, n);
        fake_world *w = world_new(n);
        w->silent_rank = n - 1;
        w->silent_call = k;
        w->silent_mode = mode;
        run_world(w, scenario_deadline, NULL);
        world_free(w);
      }
  test_load();

  int initialized = 1;
  MPI_Initialized(&initialized);
  CHECKF(initialized == 0, "MPI was initialised in this process");
  return sl_test_finish();
}
