/*
 * comm/mpi_watchdog.c — the load watchdog of the MPI communicator (see comm/mpi.h). A rank whose peer died or
 * stopped (SIGSTOP, a node gone, a link down) would otherwise wait forever inside a collective: every wait of
 * a load polls a non-blocking request against a deadline instead, and a blocking call that cannot poll is
 * watched by a backstop thread.
 *
 * When a deadline passes the rank cannot tell a dead peer from a slow one by itself, so it asks:
 * it sends an "alive?" query (tag PING, carrying its phase) to every rank on the abort channel's
 * communicator and listens for a grace period. Every rank that is polling a wait answers (PONG,
 * carrying its own phase). The ranks that did not answer are the ones "not heard from": dead,
 * stopped, unreachable, or stuck in a call that does not poll. A rank that decides the job ends
 * sends END (naming itself) to every rank; each rank that gets it passes it on to every rank (so a
 * lossy link to the deciding rank does not delay the others) and starts its own report. Every
 * reporting rank prints its view, tells every rank it has printed (DONE), waits until each rank it
 * heard from has printed too (bounded: a rank can die meanwhile), and calls MPI_Abort on the load's
 * communicator: the only way out of a collective that a dead peer will never complete. Without
 * that wait the first MPI_Abort kills ranks still listening, before they print. Queries cost
 * nothing while all is well (waits probe for them at most every few milliseconds).
 */
#include "comm/mpi.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PING_TAG 7072
#define PONG_TAG 7073
#define END_TAG 7074
#define DONE_TAG 7075
#define PHASE_MAX 96
#define PROBE_EVERY_S 0.005
/* After printing, beyond a grace period, the longest wait for the other reporting ranks' DONE
 * before MPI_Abort: they start when END reaches them (TCP retransmissions on a lossy link take
 * hundreds of milliseconds), listen for a grace period of their own, then print. */
#define ABORT_DELAY_S 2.0

/* Seconds the reporting rank listens for answers: long enough for live ranks to reply (they
 * answer from their next poll, a few milliseconds), short against the timeout. */
static double grace_s(const sl__comm *c) {
  double g = c->timeout_s / 4;
  return g < 1 ? 1 : g > 5 ? 5 : g;
}

/* ---------------------------------------------------------------------------------------------
 * The backstop thread: blocking calls that overrun
 * ------------------------------------------------------------------------------------------- */

typedef struct sl__backstop {
  pthread_t thread;
  pthread_mutex_t mu; /* guards stop, what and since: the load's thread sets them, the backstop reads */
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
    /* The polled waits report by themselves within timeout + grace; this fires only later (a
     * report re-arms it: it lasts at most two grace periods + ABORT_DELAY_S). */
    double limit = c->timeout_s + grace_s(c) + ABORT_DELAY_S + 2;
    if (b->stop || b->what == NULL || c->timeout_s <= 0 || sl__now() - b->since < limit)
      continue;
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: no progress for %.0f s while %s (%s, a call that cannot be "
            "polled: the ranks not heard from are unknown); ending the job with MPI_Abort\n",
            c->rank, sl__now() - b->since, c->phase != NULL ? c->phase : "loading", b->what);
    fflush(stderr);
    /* Another thread than the one inside MPI: the last resort, when the main thread cannot act. */
    MPI_Abort(sl__mpi_of(c)->world, 1);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void backstop_free(sl__comm *c) {
  sl__backstop *b = sl__mpi_of(c)->backstop;
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
  sl__mpi_of(c)->backstop = NULL;
}

void sl__mpi_set_timeout(sl__comm *c) {
  if (c->timeout_s <= 0 || sl__mpi_of(c)->backstop != NULL)
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
  sl__mpi_of(c)->backstop = b;
}

void sl__mpi_block_begin(sl__comm *c, const char *what) {
  sl__mpi_of(c)->last_poll = 0;
  sl__backstop *b = sl__mpi_of(c)->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->what = what;
  b->since = sl__now();
  pthread_mutex_unlock(&b->mu);
}

void sl__mpi_block_end(sl__comm *c) {
  sl__backstop *b = sl__mpi_of(c)->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->what = NULL;
  pthread_mutex_unlock(&b->mu);
}

/* The wait in progress gets a new deadline (the job still moves): so does the backstop's. */
static void backstop_rearm(sl__comm *c) {
  sl__backstop *b = sl__mpi_of(c)->backstop;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->since = sl__now();
  pthread_mutex_unlock(&b->mu);
}

/* ---------------------------------------------------------------------------------------------
 * Alive queries and the report
 * ------------------------------------------------------------------------------------------- */

/* The texts of the messages this rank sends without waiting (queries, answers, END, DONE): MPI reads
 * a send buffer until the send completes, so a text stays in its slot until every send of it has
 * completed (MPI_Test), and only then does the slot take another. A slot holds one text and one
 * request per rank (a query or END goes to every rank from one text). The slots belong to one
 * communicator: two loaders of one process never share them. */
#define SENT_SLOTS 32
#define SENT_DRAIN_S 1.0 /* at release, the longest wait for sends still in flight */
typedef struct sl__sent {
  unsigned next;                    /* the slot tried first */
  int n_req;                        /* requests per slot: the communicator's size */
  char text[SENT_SLOTS][PHASE_MAX]; /* text[s] is read by the sends of req[s * n_req ...] */
  MPI_Request req[];                /* SENT_SLOTS * n_req; MPI_REQUEST_NULL once completed */
} sl__sent;

/* Whether every send from slot s has completed (completed requests become MPI_REQUEST_NULL; one
 * that failed counts as still in flight, as MPI may still read its buffer). */
static bool slot_idle(sl__sent *s, unsigned slot) {
  MPI_Request *req = s->req + (size_t)slot * (size_t)s->n_req;
  bool idle = true;
  for (int r = 0; r < s->n_req; r++) {
    int flag = 0;
    if (req[r] != MPI_REQUEST_NULL && (MPI_Test(&req[r], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag))
      idle = false;
  }
  return idle;
}

/* A free slot holding `text`, or NULL (out of memory, or every slot still in flight: the message is
 * not sent, and the rank it was for counts this one as not heard from). */
static sl__sent *slot_take(sl__comm *c, const char *text, unsigned *slot) {
  sl__comm_mpi *m = sl__mpi_of(c);
  if (m->sent == NULL) {
    size_t n = c->size > 0 ? (size_t)c->size : 1;
    m->sent = calloc(1, sizeof *m->sent + SENT_SLOTS * n * sizeof(MPI_Request));
    if (m->sent == NULL)
      return NULL;
    m->sent->n_req = (int)n;
    for (size_t i = 0; i < SENT_SLOTS * n; i++)
      m->sent->req[i] = MPI_REQUEST_NULL;
  }
  sl__sent *s = m->sent;
  for (unsigned k = 0; k < SENT_SLOTS; k++) {
    unsigned i = (s->next + k) % SENT_SLOTS;
    if (slot_idle(s, i)) {
      s->next = i + 1;
      snprintf(s->text[i], PHASE_MAX, "%s", text);
      *slot = i;
      return s;
    }
  }
  SL_DEBUG("watchdog: every send buffer is still in flight: a message is not sent");
  return NULL;
}

/* Releases the send buffers once their sends completed; a send still in flight after a short wait
 * (a peer gone) keeps them allocated: MPI may still read them. */
static void sent_free(sl__comm *c) {
  sl__sent *s = sl__mpi_of(c)->sent;
  if (s == NULL)
    return;
  sl__mpi_of(c)->sent = NULL;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) { /* MPI reads no buffer any more, and may not be called */
    free(s);
    return;
  }
  double end = sl__now() + SENT_DRAIN_S;
  for (;;) {
    bool idle = true;
    for (unsigned i = 0; i < SENT_SLOTS; i++)
      idle = slot_idle(s, i) && idle;
    if (idle) {
      free(s);
      return;
    }
    if (sl__now() > end)
      return;
    sl__sleep_s(0.001);
  }
}

void sl__mpi_watchdog_free(sl__comm *c) {
  backstop_free(c);
  sent_free(c);
}

static const char *phase_of(const sl__comm *c) {
  return c->phase != NULL ? c->phase : "loading";
}

static void send_from(sl__comm *c, sl__sent *s, unsigned slot, int r, int tag) {
  MPI_Request *req = &s->req[(size_t)slot * (size_t)s->n_req + (size_t)r];
  if (MPI_Isend(s->text[slot], PHASE_MAX, MPI_CHAR, r, tag, sl__mpi_of(c)->abort_comm, req) != MPI_SUCCESS)
    *req = MPI_REQUEST_NULL;
}

static void send_to(sl__comm *c, int r, int tag, const char *text) {
  unsigned slot;
  sl__sent *s = slot_take(c, text, &slot);
  if (s != NULL)
    send_from(c, s, slot, r, tag);
}

static void send_all(sl__comm *c, int tag, const char *text) {
  unsigned slot;
  sl__sent *s = slot_take(c, text, &slot);
  for (int r = 0; s != NULL && r < c->size; r++)
    if (r != c->rank)
      send_from(c, s, slot, r, tag);
}

/* Seconds since this rank last progressed: its waits and reads, or what progress_hook reports. */
static double idle_s(const sl__comm *c) {
  double last = c->last_progress;
  double other = c->progress_hook != NULL ? c->progress_hook(c->progress_hook_ctx) : 0;
  last = other > last ? other : last;
  return last > 0 ? sl__now() - last : 1e9;
}

/* The answer to an alive query: seconds since this rank's last progress, then its phase. */
static void answer(sl__comm *c, int r) {
  char text[PHASE_MAX];
  double idle = idle_s(c);
  snprintf(text, sizeof text, "%.3f %s", idle, c->waiting_for != NULL ? c->waiting_for : phase_of(c));
  send_to(c, r, PONG_TAG, text);
}

/* Receives a pending message of `tag` if any: its source, or -1. */
static int take(sl__comm *c, int tag, char *text) {
  int flag = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, tag, sl__mpi_of(c)->abort_comm, &flag, &status) != MPI_SUCCESS || !flag)
    return -1;
  MPI_Recv(text, PHASE_MAX, MPI_CHAR, status.MPI_SOURCE, tag, sl__mpi_of(c)->abort_comm, MPI_STATUS_IGNORE);
  text[PHASE_MAX - 1] = '\0';
  return status.MPI_SOURCE;
}

/* END's text: the deciding rank, then its phase. Returns the rank (`from` if the text has none)
 * and copies the phase into phase[PHASE_MAX]. */
static int parse_end(const char *text, int from, char *phase) {
  char *rest = NULL;
  long r = strtol(text, &rest, 10);
  if (rest == text || r < 0 || r > 1 << 30)
    r = from;
  else if (*rest == ' ')
    text = rest + 1;
  snprintf(phase, PHASE_MAX, "%s", text);
  return (int)r;
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

/* What one round of listening learnt: who answered, and the least idle time among the answers. */
typedef struct heard_set {
  unsigned char *heard;
  size_t left; /* ranks not heard from yet */
  double min_idle;
  int end_from; /* a rank that decided to end the job (END received), or -1 */
  char end_phase[PHASE_MAX];
} heard_set;

static void hear(heard_set *h, const sl__comm *c, int r) {
  if (r != c->rank && !h->heard[r]) {
    h->heard[r] = 1;
    h->left--;
  }
}

/* Listens until every rank was heard from, `until`, or (if stop_at_end) an END arrives: answers
 * queries, collects answers. Ranks that query or report are alive, so they count as heard. */
static void listen(sl__comm *c, heard_set *h, double until, bool stop_at_end) {
  char buf[PHASE_MAX];
  while (sl__now() < until && h->left > 0) {
    int r;
    while ((r = take(c, PING_TAG, buf)) >= 0) {
      answer(c, r);
      hear(h, c, r);
    }
    while ((r = take(c, PONG_TAG, buf)) >= 0) {
      double idle = strtod(buf, NULL);
      if (idle < h->min_idle)
        h->min_idle = idle;
      hear(h, c, r);
    }
    while ((r = take(c, END_TAG, buf)) >= 0) {
      hear(h, c, r);
      if (h->end_from < 0)
        h->end_from = parse_end(buf, r, h->end_phase);
    }
    if (stop_at_end && h->end_from >= 0)
      return;
    sl__sleep_s(0.001);
  }
}

/* Before MPI_Abort: keeps answering queries until every rank in `heard` (alive a moment ago) has
 * printed its view (its DONE), or a grace period + ABORT_DELAY_S have passed. */
static void await_prints(sl__comm *c, const unsigned char *heard) {
  size_t n = c->size > 0 ? (size_t)c->size : 1, waiting = 0;
  unsigned char *done = calloc(n, 1);
  for (int r = 0; r < c->size; r++)
    waiting += r != c->rank && heard[r];
  double end = sl__now() + grace_s(c) + ABORT_DELAY_S;
  char buf[PHASE_MAX];
  while (sl__now() < end && (waiting > 0 || done == NULL)) {
    int r;
    while ((r = take(c, PING_TAG, buf)) >= 0)
      answer(c, r);
    while ((r = take(c, DONE_TAG, buf)) >= 0)
      if (done != NULL && heard[r] && !done[r]) {
        done[r] = 1;
        waiting--;
      }
    while (take(c, END_TAG, buf) >= 0 || take(c, PONG_TAG, buf) >= 0)
      ;
    sl__sleep_s(0.002);
  }
  free(done);
}

/* Prints this rank's view and ends the job. `trigger` is the rank whose decision started it (-1:
 * our own decision), `from` the rank whose END brought it; `h` what our own query heard (NULL:
 * listen now). */
static void report(sl__comm *c, const char *what, double waited, int from, int trigger,
                   const char *trigger_phase, heard_set *h) {
  const char *phase = phase_of(c);
  char missing[4096];
  heard_set mine = {
      .heard = calloc((size_t)c->size, 1), .left = (size_t)c->size - 1, .min_idle = 1e9, .end_from = -1};
  if (mine.heard == NULL) {
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: no progress while %s (%s); ending the job with MPI_Abort\n",
            c->rank, phase, what);
    fflush(stderr);
    MPI_Abort(sl__mpi_of(c)->world, 1);
    return;
  }
  backstop_rearm(c); /* the report's own waits are bounded below */
  char end_text[PHASE_MAX];
  snprintf(end_text, sizeof end_text, "%d %s", trigger >= 0 ? trigger : c->rank,
           trigger >= 0 ? trigger_phase : phase);
  send_all(c, END_TAG, end_text); /* every rank reports its own view (a relay, if we got END) */
  if (h == NULL) {
    /* Ask for ourselves: the ranks that answer (or report too) are alive. */
    if (from >= 0)
      hear(&mine, c, from);
    send_all(c, PING_TAG, phase);
    listen(c, &mine, sl__now() + grace_s(c), false);
    h = &mine;
  }
  size_t n_missing = list_ranks(c, h->heard, 0, missing, sizeof missing);
  char cause[PHASE_MAX + 192];
  char self[96] = "";
  if (sl__mpi_of(c)->self_stalled > 1)
    snprintf(self, sizeof self, "; this rank itself did not run for %.1f s (stopped or starved)",
             sl__mpi_of(c)->self_stalled);
  if (trigger >= 0)
    snprintf(cause, sizeof cause, "rank %d's watchdog expired while %s; this rank was %s%s", trigger,
             trigger_phase, phase, self);
  else
    snprintf(cause, sizeof cause, "no progress for %.1f s while %s%s", waited, phase, self);
  if (n_missing > 0)
    fprintf(stderr,
            "shardload: rank %d: error: watchdog: %s (%s); not heard from rank%s %s (of %d ranks; dead, "
            "stopped or unreachable); ending the job with MPI_Abort\n",
            c->rank, cause, what, n_missing > 1 ? "s" : "", missing, c->size);
  else
    fprintf(
        stderr,
        "shardload: rank %d: error: watchdog: %s (%s); every rank answered, none made progress for %.0f s "
        "(a wait that cannot complete); ending the job with MPI_Abort\n",
        c->rank, cause, what, c->timeout_s);
  fflush(stderr);
  send_all(c, DONE_TAG, "");
  await_prints(c, h->heard);
  free(mine.heard);
  MPI_Abort(sl__mpi_of(c)->world, 1);
}

bool sl__mpi_expire(sl__comm *c, const char *what, double waited) {
  heard_set h = {.heard = calloc((size_t)c->size, 1), .left = (size_t)c->size - 1, .end_from = -1};
  if (h.heard == NULL) {
    report(c, what, waited, -1, -1, NULL, NULL);
    return false;
  }
  h.min_idle = idle_s(c);
  send_all(c, PING_TAG, phase_of(c));
  listen(c, &h, sl__now() + grace_s(c), true);
  if (h.end_from >= 0) { /* another rank decided first: report as it asks */
    int trigger = h.end_from;
    char phase[PHASE_MAX];
    snprintf(phase, sizeof phase, "%s", h.end_phase);
    free(h.heard);
    report(c, what, waited, -1, trigger, phase, NULL);
    return false;
  }
  if (h.left == 0 && h.min_idle < c->timeout_s) {
    /* Every rank is alive and one of them moved recently: slow (a slow link, slow storage), not
     * stuck. */
    free(h.heard);
    backstop_rearm(c);
    SL_INFO("watchdog: %s for %.1f s, but a rank made progress %.1f s ago: waiting on", what, waited,
            h.min_idle);
    return true;
  }
  report(c, what, waited, -1, -1, NULL, &h);
  free(h.heard);
  return false;
}

void sl__mpi_poll(sl__comm *c) {
  sl__comm_mpi *m = sl__mpi_of(c);
  if (c->timeout_s <= 0 || m->abort_comm == MPI_COMM_NULL)
    return;
  double now = sl__now();
  /* Polls come every few milliseconds: a long gap means this rank itself was stopped (SIGSTOP)
   * or starved, which its report must say rather than blame the others. */
  if (m->last_poll > 0 && now - m->last_poll > m->self_stalled)
    m->self_stalled = now - m->last_poll;
  m->last_poll = now;
  if (now < m->next_probe)
    return;
  m->next_probe = now + PROBE_EVERY_S;
  char buf[PHASE_MAX];
  int r;
  while ((r = take(c, PING_TAG, buf)) >= 0)
    answer(c, r);
  r = take(c, END_TAG, buf);
  if (r >= 0) { /* a peer decided that the job ends: report what this rank sees too */
    char phase[PHASE_MAX];
    int trigger = parse_end(buf, r, phase);
    report(c, c->waiting_for != NULL ? c->waiting_for : "waiting", 0, r, trigger, phase, NULL);
  }
}

sl_status sl__mpi_wait(sl__comm *c, MPI_Request *req, const char *what, sl__err *err) {
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
      if (sl__mpi_expire(c, what, waited)) {
        start = sl__now();
        continue;
      }
      sl__comm_block_end(c);
      return sl__err_set(err, SL_STATUS_MPI, "%s did not finish within %.0f s (timeout_s)", what,
                         c->timeout_s);
    }
    if (spins < 20000)
      sched_yield();
    else
      sl__sleep_s(0.001);
  }
  sl__comm_block_end(c);
  sl__comm_progress(c);
  return SL_STATUS_OK;
}
