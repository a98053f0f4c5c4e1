/*
 * engine/watchdog.c — the load watchdog (see engine/comm.h). A rank whose peer died or stopped
 * (SIGSTOP, a node gone, a link down) would otherwise wait forever inside a collective: every
 * wait of a load polls a non-blocking request against a deadline instead, and a blocking call that
 * cannot poll is watched by a backstop thread.
 *
 * When a deadline passes the rank cannot tell a dead peer from a slow one by itself, so it asks:
 * it sends an "alive?" query (tag PING, carrying its phase) to every rank on the abort channel's
 * communicator and listens for a grace period. Every rank that is polling a wait answers (PONG,
 * carrying its own phase) — and, since one rank's expiry means the job is ending, starts its own
 * report. The ranks that did not answer are the ones "not heard from": dead, stopped, unreachable,
 * or stuck in a call that does not poll. Every reporting rank prints its view, waits a moment so
 * that the others print theirs too, and calls MPI_Abort on the load's communicator: the only way
 * out of a collective that a dead peer will never complete. Queries cost nothing while all is well
 * (waits probe for them at most every few milliseconds).
 */
#include "engine/comm.h"

#include "base/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PING_TAG 7072
#define PONG_TAG 7073
#define PHASE_MAX 96
#define PROBE_EVERY_S 0.005
/* After printing, before MPI_Abort: the other reporting ranks print theirs in the meantime (their
 * reports start within milliseconds of the first query). */
#define ABORT_DELAY_S 1.0

/* Seconds the reporting rank listens for answers: long enough for live ranks to reply (they
 * answer from their next poll, a few milliseconds), short against the timeout. */
static double grace_s(const sl__comm *c) {
  double g = c->timeout_s / 4;
  return g < 1 ? 1 : g > 5 ? 5 : g;
}

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * The backstop thread: blocking calls that overrun
 * ------------------------------------------------------------------------------------------- */

typedef struct sl__backstop {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  const char *what; /* the blocking call in progress, or NULL */
  double since;
  sl__comm *c;
} sl__backstop;

static void *backstop_main(void *arg) {
  sl__backstop *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    sl__comm *c = b->c;
    /* The polled waits report by themselves within timeout + grace; this fires only later. */
    double limit = c->timeout_s + grace_s(c) + ABORT_DELAY_S + 2;
    if (b->stop || b->what == NULL || c->timeout_s <= 0 || sl__now() - b->since < limit)
      continue;
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: no progress for %.0f s while %s (%s, a call that cannot be "
            "polled: the ranks not heard from are unknown); ending the job with MPI_Abort\n",
            c->rank, sl__now() - b->since, c->phase != NULL ? c->phase : "loading", b->what);
    fflush(stderr);
    /* Another thread than the one inside MPI: the last resort, when the main thread cannot act. */
    MPI_Abort(c->world, 1);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void backstop_free(sl__comm *c) {
  sl__backstop *b = c->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->stop = true;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  pthread_join(b->thread, NULL);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
  c->backstop = NULL;
}

void sl__comm_set_timeout(sl__comm *c, double seconds) {
  c->timeout_s = seconds > 0 ? seconds : 0;
  if (c->timeout_s <= 0 || c->backstop != NULL)
    return;
  sl__backstop *b = calloc(1, sizeof *b);
  if (b == NULL)
    return; /* the polled waits still have their deadlines */
  b->c = c;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  if (pthread_create(&b->thread, NULL, backstop_main, b) != 0) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return;
  }
  c->backstop = b;
}

void sl__comm_watchdog_free(sl__comm *c) {
  backstop_free(c);
}

void sl__comm_block_begin(sl__comm *c, const char *what) {
  c->waiting_for = what;
  c->last_poll = 0;
  sl__backstop *b = c->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->what = what;
  b->since = sl__now();
  pthread_mutex_unlock(&b->mu);
}

void sl__comm_block_end(sl__comm *c) {
  c->waiting_for = NULL;
  sl__backstop *b = c->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->what = NULL;
  pthread_mutex_unlock(&b->mu);
}

void sl__comm_phase(sl__comm *c, const char *phase) {
  c->phase = phase;
}

/* ---------------------------------------------------------------------------------------------
 * Alive queries and the report
 * ------------------------------------------------------------------------------------------- */

/* Buffers of queries and answers sent without waiting for completion: they must outlive the
 * sends, and the process ends shortly after using them. */
static char sent_phase[PHASE_MAX];

static void send_to(sl__comm *c, int r, int tag) {
  MPI_Request req;
  if (MPI_Isend(sent_phase, PHASE_MAX, MPI_CHAR, r, tag, c->abort_comm, &req) == MPI_SUCCESS)
    MPI_Request_free(&req);
}

/* Receives a pending message of `tag` if any: its source, or -1. */
static int take(sl__comm *c, int tag, char *phase) {
  int flag = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, tag, c->abort_comm, &flag, &status) != MPI_SUCCESS || !flag)
    return -1;
  MPI_Recv(phase, PHASE_MAX, MPI_CHAR, status.MPI_SOURCE, tag, c->abort_comm, MPI_STATUS_IGNORE);
  phase[PHASE_MAX - 1] = '\0';
  return status.MPI_SOURCE;
}

/* "2, 5-7" into out: the ranks whose flag is `want`, except this one. */
static size_t list_ranks(const sl__comm *c, const unsigned char *heard, unsigned char want, char *out,
                         size_t cap) {
  size_t n = 0, len = 0;
  out[0] = '\0';
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank || heard[r] != want)
      continue;
    int end = r;
    while (end + 1 < c->size && end + 1 != c->rank && heard[end + 1] == want)
      end++;
    n += (size_t)(end - r + 1);
    if (len + 32 < cap)
      len +=
          (size_t)snprintf(out + len, cap - len, end > r ? "%s%d-%d" : "%s%d", len > 0 ? ", " : "", r, end);
    r = end;
  }
  return n;
}

/* The report itself; `trigger` is the rank whose query started it (-1: our own deadline). */
static void report(sl__comm *c, const char *what, double waited, int trigger, const char *trigger_phase) {
  const char *phase = c->phase != NULL ? c->phase : "loading";
  snprintf(sent_phase, sizeof sent_phase, "%s", phase);
  unsigned char *heard = calloc((size_t)c->size, 1);
  char *missing = malloc(4096);
  if (heard == NULL || missing == NULL) {
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: no progress while %s (%s); ending the job with MPI_Abort\n",
            c->rank, phase, what);
    fflush(stderr);
    MPI_Abort(c->world, 1);
    free(heard);
    free(missing);
    return;
  }
  if (trigger >= 0)
    heard[trigger] = 1;
  for (int r = 0; r < c->size; r++)
    if (r != c->rank)
      send_to(c, r, PING_TAG);
  /* Listen: answer the queries of the other reporting ranks, collect the answers to ours. */
  char buf[PHASE_MAX];
  double end = sl__now() + grace_s(c);
  size_t left = (size_t)c->size - 1 - (trigger >= 0 ? 1 : 0);
  while (sl__now() < end && left > 0) {
    int r;
    while ((r = take(c, PING_TAG, buf)) >= 0) {
      send_to(c, r, PONG_TAG);
      if (!heard[r] && r != c->rank)
        left--;
      heard[r] = 1;
    }
    while ((r = take(c, PONG_TAG, buf)) >= 0) {
      if (!heard[r] && r != c->rank)
        left--;
      heard[r] = 1;
    }
    sleep_s(0.001);
  }
  size_t n_missing = list_ranks(c, heard, 0, missing, 4096);
  char cause[PHASE_MAX + 192];
  char self[96] = "";
  if (c->self_stalled > 1)
    snprintf(self, sizeof self, "; this rank itself did not run for %.1f s (stopped or starved)",
             c->self_stalled);
  if (trigger >= 0)
    snprintf(cause, sizeof cause, "rank %d's watchdog expired while %s; this rank was %s%s", trigger,
             trigger_phase, phase, self);
  else
    snprintf(cause, sizeof cause, "no progress for %.1f s while %s%s", waited, phase, self);
  if (n_missing > 0)
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: %s (%s); not heard from rank%s %s (of %d ranks; dead, "
            "stopped or "
            "unreachable); ending the job with MPI_Abort\n",
            c->rank, cause, what, n_missing > 1 ? "s" : "", missing, c->size);
  else
    fprintf(
        stderr,
        "shardload: rank %d: error: watchdog: %s (%s); every rank answered (a wait that cannot complete); "
        "ending the job with MPI_Abort\n",
        c->rank, cause, what);
  fflush(stderr);
  free(heard);
  free(missing);
  /* Keep answering while the other reporting ranks print theirs. */
  end = sl__now() + ABORT_DELAY_S;
  while (sl__now() < end) {
    int r;
    while ((r = take(c, PING_TAG, buf)) >= 0)
      send_to(c, r, PONG_TAG);
    sleep_s(0.005);
  }
  MPI_Abort(c->world, 1);
}

void sl__comm_expire(sl__comm *c, const char *what, double waited) {
  report(c, what, waited, -1, NULL);
}

void sl__comm_poll(sl__comm *c) {
  if (c->timeout_s <= 0 || c->abort_comm == MPI_COMM_NULL)
    return;
  double now = sl__now();
  /* Polls come every few milliseconds: a long gap means this rank itself was stopped (SIGSTOP)
   * or starved, which its report must say rather than blame the others. */
  if (c->last_poll > 0 && now - c->last_poll > c->self_stalled)
    c->self_stalled = now - c->last_poll;
  c->last_poll = now;
  if (now < c->next_probe)
    return;
  c->next_probe = now + PROBE_EVERY_S;
  char phase[PHASE_MAX];
  int r = take(c, PING_TAG, phase);
  if (r < 0)
    return;
  /* A peer's watchdog fired: the job ends; answer it and report what this rank sees too. */
  snprintf(sent_phase, sizeof sent_phase, "%s", c->phase != NULL ? c->phase : "loading");
  send_to(c, r, PONG_TAG);
  report(c, c->waiting_for != NULL ? c->waiting_for : "waiting", 0, r, phase);
}

sl_status sl__comm_wait(sl__comm *c, MPI_Request *req, const char *what, sl__err *err) {
  double start = sl__now();
  sl__comm_block_begin(c, what);
  /* Spin (yielding) first: Open MPI progresses a request only inside MPI calls, and most waits are
   * short; then poll every millisecond so that a long wait does not hold a core. */
  for (unsigned spins = 0;; spins++) {
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      sl__comm_block_end(c);
      char msg[MPI_MAX_ERROR_STRING] = "";
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      return sl__err_set(err, SL_STATUS_MPI, "%s failed: %s", what, msg);
    }
    if (flag)
      break;
    sl__comm_poll(c);
    double waited = sl__now() - start;
    if (c->timeout_s > 0 && waited > c->timeout_s) {
      sl__comm_expire(c, what, waited);
      sl__comm_block_end(c);
      return sl__err_set(err, SL_STATUS_MPI, "%s did not finish within %.0f s (timeout_s)", what,
                         c->timeout_s);
    }
    if (spins < 20000)
      sched_yield();
    else
      sleep_s(0.001);
  }
  sl__comm_block_end(c);
  return SL_STATUS_OK;
}
