/*
 * engine/progress.c — the progress bar, the log lines and the progress callback (see
 * engine/progress.h for the estimate behind the cluster-wide figures).
 */
#include "engine/progress.h"

#include "base/bytes_fmt.h"
#include "base/clock.h"
#include "base/util.h"
#include "plan/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The bar is redrawn and the callback called at most this often: a person sees it move, and the
 * per-copy counters are summed 4 times a second at most. */
#define TICK_SECONDS 0.25

static const char *const phase_names[] = {"allocate", "transfer", "track", "done"};

const char *sl__progress_phase_name(int phase) {
  return phase >= 0 && phase <= SL_PHASE_DONE ? phase_names[phase] : "?";
}

uint64_t sl__progress_done(const sl__progress *p) {
  uint64_t own = 0;
  for (size_t i = 0; i < p->n_copies; i++)
    own += atomic_load(&p->copy_done[i]);
  if (p->own_total == 0)
    return 0;
  if (own >= p->own_total)
    return p->total;
  /* The job's bytes in proportion to this rank's (long double: totals beyond 2^53 stay exact
   * enough, and no product overflows). */
  return (uint64_t)((long double)p->total * (long double)own / (long double)p->own_total);
}

void sl__progress_format(char *buf, size_t cap, const char *phase, uint64_t done, uint64_t total, double rate,
                         bool cluster) {
  char a[32], b[32], eta[32] = "";
  sl__fmt_bytes(a, sizeof a, done);
  sl__fmt_bytes(b, sizeof b, total);
  double pct = total > 0 ? 100.0 * (double)done / (double)total : 100.0;
  if (rate > 0 && done < total)
    snprintf(eta, sizeof eta, ", ETA %.0f s", (double)(total - done) / rate);
  snprintf(buf, cap, "%s: %s / %s (%.1f %%)%s, %.1f MB/s%s", phase, a, b, pct, cluster ? " cluster-wide" : "",
           rate / 1e6, eta);
}

static double rate_of(const sl__progress *p, uint64_t done, double now) {
  double el = now - p->t_transfer;
  return p->t_transfer > 0 && el > 0 ? (double)done / el : 0.0;
}

/* Draws the bar or a line and calls the callback, as due. Only the progress thread (and
 * sl__progress_stop after it joined) calls this: no lock around the drawing state. */
static void report(sl__progress *p, bool final) {
  double now = sl__now();
  int phase = final ? SL_PHASE_DONE : atomic_load(&p->phase);
  if (phase >= SL_PHASE_TRANSFER && p->t_transfer == 0)
    p->t_transfer = now;
  uint64_t done = final ? p->total : sl__progress_done(p);
  char line[256];
  sl__progress_format(line, sizeof line, sl__progress_phase_name(phase), done, p->total,
                      rate_of(p, done, now), p->rank == 0);
  if (p->mode == SL_PROGRESS_BAR) {
    fprintf(p->out, "\r[shardload %d] %s   %s", p->rank, line, final ? "\n" : "");
    fflush(p->out);
    p->drew_bar = true;
  } else if (p->mode == SL_PROGRESS_LINES) {
    /* auto: a load shorter than one interval leaves the log alone; always: from the start. */
    bool due = final ? (p->eager || p->printed) : now - p->t_last_line >= p->interval;
    if (due) {
      if (final) {
        char a[32];
        sl__fmt_bytes(a, sizeof a, p->total);
        snprintf(line, sizeof line, "done: %s%s in %.1f s", a, p->rank == 0 ? " cluster-wide" : "",
                 now - p->t_start);
      }
      fprintf(p->out, "[shardload %d] progress %s\n", p->rank, line);
      fflush(p->out);
      p->t_last_line = now;
      p->printed = true;
    }
  }
  if (p->fn != NULL && (final || done != p->last_done))
    p->fn(done, p->total, p->user);
  p->last_done = done;
}

static void *progress_main(void *arg) {
  sl__progress *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    struct timespec ts = sl__realtime_in(TICK_SECONDS);
    int rc = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    if (p->stop)
      break;
    if (rc == ETIMEDOUT || rc == 0) {
      pthread_mutex_unlock(&p->mu);
      report(p, false);
      pthread_mutex_lock(&p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void sl__progress_start(sl__progress *p) {
  p->running = false;
  p->stop = false;
  p->printed = p->drew_bar = false;
  p->t_start = sl__now();
  /* auto: the first line comes one interval in; always: now (below), then every interval. */
  p->t_last_line = p->eager ? 0 : p->t_start;
  p->t_transfer = 0;
  p->last_done = 0;
  atomic_init(&p->phase, SL_PHASE_ALLOCATE);
  if (p->mode == SL_PROGRESS_OFF && p->fn == NULL)
    return;
  if (p->out == NULL)
    p->out = stderr;
  /* always: the first line as the load starts, so that even a load over before the first tick
   * shows one (no thread runs yet: report() needs no lock). */
  if (p->eager && p->mode == SL_PROGRESS_LINES)
    report(p, false);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (pthread_create(&p->thread, NULL, progress_main, p) != 0) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    return;
  }
  p->running = true;
}

void sl__progress_set_phase(sl__progress *p, int phase) {
  atomic_store(&p->phase, phase);
}

void sl__progress_stop(sl__progress *p, bool done) {
  if (!p->running)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  p->running = false;
  if (done)
    report(p, true);
  else if (p->drew_bar)
    fputc('\n', p->out); /* a failed load's message starts on a line of its own */
}

/* Whether what rank 0 writes to stderr reaches a terminal: its stderr is one (no launcher, or one
 * that gives its ranks a terminal), or it was started by an MPI launcher whose own stderr is one.
 * Open MPI's mpirun gives every rank a pipe on stderr (and a pseudo-terminal of its own on stdout,
 * whatever mpirun's is), and copies what comes through the pipe to its own stderr byte for byte,
 * carriage returns included: so the bar works when the launcher's stderr — the parent's, for rank
 * 0 on the launcher's node — is a terminal. Elsewhere (a remote rank 0 under a daemon, a log file,
 * a pipe, another process's descendants that /proc does not show) the answer is no: log lines. */
bool sl__progress_stderr_is_terminal(void) {
  if (isatty(STDERR_FILENO))
    return true;
  if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMI_SIZE") == NULL && getenv("PMIX_RANK") == NULL)
    return false; /* not a launcher's rank: a pipe of the user's own (| tee log) */
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd/2", (long)getppid());
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISCHR(st.st_mode))
    return false; /* a pipe or a file: never opened */
  int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  bool tty = fd >= 0 && isatty(fd);
  if (fd >= 0)
    close(fd);
  return tty;
}

void sl__progress_configure(sl__progress *p, const char *setting, bool quiet, int rank, bool tty) {
  p->rank = rank;
  p->out = stderr;
  p->eager = setting != NULL && strcmp(setting, "always") == 0;
  bool never = setting != NULL && strcmp(setting, "never") == 0;
  /* Only rank 0 draws: under mpirun every rank's stderr ends up in the same log. */
  if (quiet || never || rank != 0)
    p->mode = SL_PROGRESS_OFF;
  else
    p->mode = tty ? SL_PROGRESS_BAR : SL_PROGRESS_LINES;
  p->interval = SL_PROGRESS_INTERVAL_DEFAULT;
  const char *env = getenv("SHARDLOAD_PROGRESS_INTERVAL");
  char *end = NULL;
  double v = env != NULL ? strtod(env, &end) : 0;
  if (env != NULL && end != env && *end == '\0' && v > 0)
    p->interval = v;
}

void sl__progress_begin(sl__progress *p, const char *setting, bool quiet, int rank, const sl__schedule *sched,
                        const sl__rank_plan *plan, const _Atomic uint64_t *copy_done) {
  sl__progress_configure(p, setting, quiet, rank, rank == 0 && sl__progress_stderr_is_terminal());
  p->own_total = plan->bytes_needed;
  p->total = p->own_total;
  if (rank == 0) { /* the job's bytes: every rank's, from the plan */
    p->total = 0;
    for (uint32_t r = 0; r < sched->world; r++)
      p->total += sched->stats[r].bytes_needed;
  }
  p->copy_done = copy_done;
  p->n_copies = plan->n_copies;
  sl__progress_start(p);
}
